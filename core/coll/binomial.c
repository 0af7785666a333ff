#include "coll/binomial.h"

#include <string.h>

#include "coll/ring_allreduce.h" /* ECCL_RING_MAX_QUEUED: a link's queue cap */

/* ---- geometry ---------------------------------------------------------------- */

static uint32_t lowbit(uint32_t v) { return v & (~v + 1u); }

/* Relative rank v's children are v + d for d = 1, 2, 4, ... below v's
 * lowest set bit (any d for the root), v + d < n. */
static uint32_t children_of(uint32_t v, uint32_t n, uint32_t root, uint32_t *out)
{
    uint32_t m = 0;
    for (uint64_t d = 1; v + d < n && (v == 0 || d < lowbit(v)); d <<= 1) {
        if (out) out[m] = (uint32_t)((root + v + d) % n);
        m++;
    }
    return m;
}

static uint32_t vrank_of(uint32_t rank, uint32_t n, uint32_t root) { return (uint32_t)(((uint64_t)rank + n - root) % n); }

uint32_t eccl_binomial_nchildren(uint32_t rank, uint32_t nranks, uint32_t root)
{
    return children_of(vrank_of(rank, nranks, root), nranks, root, NULL);
}

static int is_bcast(const eccl_binomial *b) { return b->call.kind == ECCL_COLL_BROADCAST; }
static int is_root(const eccl_binomial *b) { return b->vrank == 0; }

size_t eccl_binomial_scratch_bytes(const eccl_coll_call *c)
{
    if (c->kind != ECCL_COLL_REDUCE) return 0;
    return (size_t)eccl_binomial_nchildren(c->rank, c->nranks, c->root) * c->count * eccl_dtype_size(c->dtype);
}

size_t eccl_binomial_output_bytes(const eccl_coll_call *c)
{
    return c->kind == ECCL_COLL_REDUCE && c->rank != c->root ? 0 : c->count * eccl_dtype_size(c->dtype);
}

void eccl_binomial_init(eccl_binomial *b, const eccl_coll_call *call, uint8_t *scratch, uint8_t *backup)
{
    memset(b, 0, sizeof *b);
    b->call = *call;
    b->scratch = scratch;
    b->backup = backup;
    b->esize = eccl_dtype_size(call->dtype);
    b->bytes = call->count * b->esize;
    size_t cap = ECCL_BINOMIAL_SLICE_BYTES / b->esize * b->esize;
    b->slice = b->bytes < cap ? b->bytes : cap;
    b->nslices = b->slice ? (uint32_t)((b->bytes + b->slice - 1) / b->slice) : 0;
    uint32_t n = call->nranks;
    b->vrank = vrank_of(call->rank, n, call->root);
    b->parent = b->vrank ? (uint32_t)(((uint64_t)call->root + (b->vrank & (b->vrank - 1))) % n) : ECCL_BINOMIAL_NONE;
    b->nchildren = children_of(b->vrank, n, call->root, b->child);
    /* The broadcast root's own output is a copy of sendbuf (none in place). */
    b->own_done = !(is_bcast(b) && is_root(b) && call->sendbuf != call->recvbuf && b->bytes);
}

/* Slice i: where it starts, and its bytes. */
static size_t slice_at(const eccl_binomial *b, uint32_t i, size_t *len)
{
    size_t off = (size_t)i * b->slice;
    *len = b->bytes - off < b->slice ? b->bytes - off : b->slice;
    return off;
}

static int child_index(const eccl_binomial *b, uint32_t rank)
{
    for (uint32_t j = 0; j < b->nchildren; j++)
        if (b->child[j] == rank) return (int)j;
    return -1;
}

static uint32_t all_children(const eccl_binomial *b)
{
    return b->nchildren == 32 ? UINT32_MAX : (1u << b->nchildren) - 1u;
}

static int full(const eccl_binomial *b)
{
    if (is_bcast(b)) return is_root(b) ? b->own_done : b->up_recv == b->nslices;
    return is_root(b) ? b->folded == b->nslices : b->up_send == b->nslices;
}

/* Every data frame of ours is queued. */
static int sends_queued(const eccl_binomial *b)
{
    if (!is_bcast(b)) return is_root(b) || b->up_send == b->nslices;
    for (uint32_t j = 0; j < b->nchildren; j++)
        if (b->send_i[j] < b->nslices) return 0;
    return 1;
}

static int waves(const eccl_binomial *b) { return b->call.nranks > 1; }

/* Backs up slice i of recvbuf before its first byte is written. */
static void save_slice(eccl_binomial *b, uint32_t i)
{
    size_t len, off = slice_at(b, i, &len);
    eccl_coll_save(&b->call, b->backup, off, len);
    b->saved = i + 1;
}

static void own_copy(eccl_binomial *b)
{
    eccl_coll_save(&b->call, b->backup, 0, b->bytes);
    b->own_saved = 1;
    eccl_coll_copy(&b->call, b->call.recvbuf, b->call.sendbuf, b->bytes);
    b->own_done = 1;
}

/* ---- the reduce's fold -------------------------------------------------------- */

/* Where child j's partials land and, for j = 0, the fold accumulates:
 * region j of scratch; an out-of-place root's region 0 is recvbuf itself
 * (no backup: writing it early touches no input byte, and the fold's
 * result is then already where it goes). */
static uint8_t *region(const eccl_binomial *b, uint32_t j)
{
    if (j == 0 && is_root(b) && !b->backup) return b->call.recvbuf;
    return b->scratch + (size_t)j * b->bytes;
}

/* Folds every slice whose children's partials are all in: region 0 op
 * region 1 op ... op our own data, into region 0; the root writes it to
 * recvbuf (AVG divides there, once). */
static void fold_ready(eccl_binomial *b)
{
    const eccl_dev_ops *dev = b->call.env->dev;
    void *ctx = b->call.env->dev_ctx;
    while (b->folded < b->nslices) {
        for (uint32_t j = 0; j < b->nchildren; j++)
            if (b->recv_i[j] <= b->folded) return;
        size_t len, off = slice_at(b, b->folded, &len), n = len / b->esize;
        uint8_t *acc = region(b, 0) + off;
        for (uint32_t j = 1; j < b->nchildren; j++)
            dev->reduce(ctx, acc, region(b, j) + off, n, b->call.dtype, b->call.op);
        dev->reduce(ctx, acc, b->call.sendbuf + off, n, b->call.dtype, b->call.op);
        if (is_root(b)) {
            save_slice(b, b->folded);
            if (acc != b->call.recvbuf + off) eccl_coll_copy(&b->call, b->call.recvbuf + off, acc, len);
            if (b->call.op == ECCL_AVG) dev->scale_div(ctx, b->call.recvbuf + off, n, b->call.dtype, b->call.nranks);
        }
        b->folded++;
    }
}

/* ---- sending ------------------------------------------------------------------- */

static eccl_result send_slice(eccl_binomial *b, eccl_chan *link, uint8_t phase, uint32_t i, const uint8_t *base)
{
    size_t len, off = slice_at(b, i, &len);
    eccl_wire_data w = {.tag = b->call.tag, .epoch = b->call.epoch, .phase = phase, .offset = off,
                        .len = (uint32_t)len};
    eccl_result rc = eccl_chan_send_data(link, &w, base + off, &b->inflight);
    if (rc == ECCL_OK) b->tx_bytes += len;
    return rc;
}

static eccl_result send_token(eccl_binomial *b, eccl_chan *link, uint8_t phase)
{
    eccl_wire_data w = {.tag = b->call.tag, .epoch = b->call.epoch, .phase = phase,
                        .step = (uint16_t)b->call.kind};
    return eccl_chan_send_data(link, &w, NULL, NULL);
}

/* Broadcast: every slice we hold to every child, the largest subtree first. */
static eccl_result pump_bcast(eccl_binomial *b, eccl_chan *const *down)
{
    uint32_t have = is_root(b) ? b->nslices : b->up_recv;
    const uint8_t *src = is_root(b) ? b->call.sendbuf : b->call.recvbuf;
    for (uint32_t j = b->nchildren; j-- > 0;) {
        while (down[j] && b->send_i[j] < have && down[j]->queued_bytes < ECCL_RING_MAX_QUEUED) {
            eccl_result rc = send_slice(b, down[j], ECCL_PHASE_BINO_BCAST, b->send_i[j], src);
            if (rc != ECCL_OK) return rc;
            b->send_i[j]++;
        }
    }
    return ECCL_OK;
}

/* Reduce: every folded slice (a leaf's: its own data) to the parent. */
static eccl_result pump_reduce(eccl_binomial *b, eccl_chan *up)
{
    if (is_root(b)) return ECCL_OK;
    uint32_t have = b->nchildren ? b->folded : b->nslices;
    const uint8_t *src = b->nchildren ? b->scratch : b->call.sendbuf;
    while (up && b->up_send < have && up->queued_bytes < ECCL_RING_MAX_QUEUED) {
        eccl_result rc = send_slice(b, up, ECCL_PHASE_BINO_REDUCE, b->up_send, src);
        if (rc != ECCL_OK) return rc;
        b->up_send++;
    }
    return ECCL_OK;
}

/* DONE up (broadcast), COMMIT down. */
static eccl_result pump_waves(eccl_binomial *b, eccl_chan *up, eccl_chan *const *down)
{
    if (!waves(b)) return ECCL_OK;
    int subtree = full(b) && (!is_bcast(b) || b->done_mask == all_children(b));
    if (subtree && is_root(b)) b->committed = 1;
    if (subtree && is_bcast(b) && !is_root(b) && !b->done_sent && up) {
        eccl_result rc = send_token(b, up, ECCL_PHASE_BINO_DONE);
        if (rc != ECCL_OK) return rc;
        b->done_sent = 1;
    }
    for (uint32_t j = 0; b->committed && j < b->nchildren; j++) {
        if (!down[j] || (b->commit_mask & (1u << j))) continue;
        eccl_result rc = send_token(b, down[j], ECCL_PHASE_BINO_COMMIT);
        if (rc != ECCL_OK) return rc;
        b->commit_mask |= 1u << j;
    }
    return ECCL_OK;
}

static eccl_result bino_pump(void *op, const eccl_coll_links *links)
{
    eccl_binomial *b = op;
    if (!b->own_done) own_copy(b);
    /* Every link of ours is asked for at every pump: asking opens it. */
    eccl_chan *up = b->parent != ECCL_BINOMIAL_NONE ? links->peer(links->ctx, b->parent) : NULL;
    eccl_chan *down[ECCL_BINOMIAL_MAX_CHILDREN];
    for (uint32_t j = 0; j < b->nchildren; j++) down[j] = links->peer(links->ctx, b->child[j]);
    eccl_result rc = is_bcast(b) ? pump_bcast(b, down) : pump_reduce(b, up);
    return rc != ECCL_OK ? rc : pump_waves(b, up, down);
}

/* ---- receiving ---------------------------------------------------------------- */

/* Whether w is slice i of this call, with `phase`. */
static int is_slice(const eccl_binomial *b, const eccl_wire_data *w, uint8_t phase, uint32_t i)
{
    if (i >= b->nslices || w->phase != phase || w->step != 0) return 0;
    size_t len, off = slice_at(b, i, &len);
    return w->offset == off && w->len == len;
}

static int is_token(const eccl_binomial *b, const eccl_wire_data *w, uint8_t phase)
{
    return waves(b) && w->phase == phase && w->step == (uint16_t)b->call.kind && w->offset == 0 && w->len == 0;
}

static eccl_result bino_recv(void *op, int role, const eccl_wire_data *w, void **dst)
{
    eccl_binomial *b = op;
    if (!ECCL_ROLE_IS_PEER(role) || w->ring != 0 || w->flags != 0) return ECCL_ERR_PROTOCOL;
    uint32_t from = ECCL_ROLE_PEER_RANK(role);
    *dst = NULL;
    if (from == b->parent) {
        if (is_bcast(b) && is_slice(b, w, ECCL_PHASE_BINO_BCAST, b->up_recv)) {
            save_slice(b, b->up_recv); /* before the first byte lands */
            *dst = b->call.recvbuf + w->offset;
            return ECCL_OK;
        }
        /* COMMIT only once our part is done: the root cannot know before. */
        if (is_token(b, w, ECCL_PHASE_BINO_COMMIT) && !b->committed && full(b) && (!is_bcast(b) || b->done_sent))
            return ECCL_OK;
        return ECCL_ERR_PROTOCOL;
    }
    int j = child_index(b, from);
    if (j < 0) return ECCL_ERR_PROTOCOL;
    if (!is_bcast(b) && is_slice(b, w, ECCL_PHASE_BINO_REDUCE, b->recv_i[j])) {
        *dst = region(b, (uint32_t)j) + w->offset;
        return ECCL_OK;
    }
    /* DONE only once the child has every slice we owe it. */
    if (is_bcast(b) && is_token(b, w, ECCL_PHASE_BINO_DONE) && !(b->done_mask & (1u << j)) &&
        b->send_i[j] == b->nslices)
        return ECCL_OK;
    return ECCL_ERR_PROTOCOL;
}

static eccl_result bino_recv_done(void *op, int role, const eccl_wire_data *w)
{
    eccl_binomial *b = op;
    int j = child_index(b, ECCL_ROLE_PEER_RANK(role));
    b->rx_bytes += w->len;
    switch (w->phase) {
    case ECCL_PHASE_BINO_BCAST: b->up_recv++; break;
    case ECCL_PHASE_BINO_COMMIT: b->committed = 1; break;
    case ECCL_PHASE_BINO_DONE: b->done_mask |= 1u << j; break;
    case ECCL_PHASE_BINO_REDUCE:
        b->recv_i[j]++;
        fold_ready(b);
        break;
    default: return ECCL_ERR_PROTOCOL;
    }
    return ECCL_OK;
}

/* ---- the rest of coll/algo.h ---------------------------------------------------- */

static int bino_have_full(const void *op) { return full(op); }

/* Our output is final and every slice went down to our children (the
 * reduce's non-roots: up to the parent): DONE and COMMIT, both empty, are
 * all that is left. */
static int bino_settled(const void *op)
{
    const eccl_binomial *b = op;
    return b->inflight == 0 && full(b) && sends_queued(b);
}

static int bino_complete(void *op)
{
    const eccl_binomial *b = op;
    if (!bino_settled(b)) return 0;
    return !waves(b) || (b->committed && b->commit_mask == all_children(b));
}

/* DONE up (a broadcast's non-root), COMMIT down: pump_waves. */
static int bino_owes_token(const void *op, int role)
{
    const eccl_binomial *b = op;
    if (!ECCL_ROLE_IS_PEER(role) || !waves(b)) return 0;
    uint32_t to = ECCL_ROLE_PEER_RANK(role);
    if (to == b->parent) return is_bcast(b) && !is_root(b) && !b->done_sent;
    for (uint32_t j = 0; j < b->nchildren; j++)
        if (b->child[j] == to) return !(b->commit_mask & (1u << j));
    return 0;
}

static int bino_expects(const void *op, int role)
{
    const eccl_binomial *b = op;
    if (!ECCL_ROLE_IS_PEER(role)) return 0;
    uint32_t from = ECCL_ROLE_PEER_RANK(role);
    if (from == b->parent) return (is_bcast(b) && b->up_recv < b->nslices) || (waves(b) && !b->committed);
    int j = child_index(b, from);
    if (j < 0) return 0;
    if (!is_bcast(b)) return b->recv_i[j] < b->nslices;
    return waves(b) && !(b->done_mask & (1u << j));
}

static void bino_restore(void *op)
{
    eccl_binomial *b = op;
    if (b->own_saved) eccl_coll_put_back(&b->call, b->backup, 0, b->bytes);
    for (uint32_t i = 0; i < b->saved; i++) {
        size_t len, off = slice_at(b, i, &len);
        eccl_coll_put_back(&b->call, b->backup, off, len);
    }
}

static eccl_result bino_error(const void *op)
{
    (void)op;
    return ECCL_OK;
}

static void bino_bytes(const void *op, uint64_t *tx, uint64_t *rx)
{
    const eccl_binomial *b = op;
    *tx = b->tx_bytes;
    *rx = b->rx_bytes;
}

const eccl_coll_algo eccl_binomial_algo = {
    .id = ECCL_ALGO_BINOMIAL,
    .roles = ECCL_ROLES_PEERS,
    .pump_needs = 0, /* a link not open yet holds its frames back */
    .pump = bino_pump,
    .recv = bino_recv,
    .recv_done = bino_recv_done,
    .complete = bino_complete,
    .expects = bino_expects,
    .have_full = bino_have_full,
    .settled = bino_settled,
    .owes_token = bino_owes_token,
    .restore = bino_restore,
    .error = bino_error,
    .bytes = bino_bytes,
};
