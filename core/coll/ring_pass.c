#include "coll/ring_pass.h"

#include <string.h>

#include "coll/ring_allreduce.h"

static uint32_t mod_n(const eccl_ring_pass *p, int64_t x)
{
    int64_t n = p->call.nranks;
    return (uint32_t)(((x % n) + n) % n);
}

static int is_chain(const eccl_coll_call *c)
{
    return c->kind == ECCL_COLL_BROADCAST || c->kind == ECCL_COLL_REDUCE;
}

/* Whether received slices are partials to add our data to. */
static int reduces(const eccl_ring_pass *p)
{
    return p->call.kind == ECCL_COLL_REDUCE_SCATTER || p->call.kind == ECCL_COLL_REDUCE;
}

static uint8_t phase_of(eccl_coll_kind k)
{
    switch (k) {
    case ECCL_COLL_ALLGATHER: return ECCL_PHASE_GATHER;
    case ECCL_COLL_REDUCE_SCATTER: return ECCL_PHASE_SCATTER;
    case ECCL_COLL_BROADCAST: return ECCL_PHASE_BCAST;
    default: return ECCL_PHASE_CHAIN_REDUCE;
    }
}

/* Block b's bytes, and where it starts in the blocks (bytes). */
static size_t blk_bytes(const eccl_coll_call *c, uint32_t b)
{
    return (c->vcounts ? c->vcounts[b] : c->count) * eccl_dtype_size(c->dtype);
}

static size_t blk_at(const eccl_coll_call *c, uint32_t b)
{
    size_t es = eccl_dtype_size(c->dtype);
    return c->vcounts ? c->vdispls[b] * es : (size_t)b * c->count * es;
}

/* Bytes from the first block's start to the end of the last one. */
static size_t blocks_extent(const eccl_coll_call *c)
{
    size_t end = 0;
    if (!c->vcounts) return (size_t)c->nranks * blk_bytes(c, 0);
    for (uint32_t b = 0; b < c->nranks; b++) {
        size_t e = blk_at(c, b) + blk_bytes(c, b);
        if (e > end) end = e;
    }
    return end;
}

size_t eccl_ring_pass_scratch_bytes(const eccl_coll_call *c)
{
    if (c->kind == ECCL_COLL_REDUCE_SCATTER) return blocks_extent(c);
    return c->kind == ECCL_COLL_REDUCE ? blk_bytes(c, 0) : 0;
}

size_t eccl_ring_pass_output_bytes(const eccl_coll_call *c)
{
    if (c->kind == ECCL_COLL_ALLGATHER) return blocks_extent(c);
    if (c->kind == ECCL_COLL_REDUCE_SCATTER) return blk_bytes(c, c->rank);
    return c->kind == ECCL_COLL_REDUCE && c->rank != c->root ? 0 : blk_bytes(c, 0);
}

static void settle(const eccl_ring_pass *p, uint32_t *i, int recv);

void eccl_ring_pass_init(eccl_ring_pass *p, const eccl_coll_call *call, uint8_t *scratch,
                         uint8_t *backup)
{
    memset(p, 0, sizeof *p);
    p->call = *call;
    p->scratch = scratch;
    p->backup = backup;
    p->esize = eccl_dtype_size(call->dtype);
    uint32_t n = call->nranks;
    /* Every step has the slots of the largest block; a smaller block's
     * extra slots are empty and skipped (v layouts: blocks differ). */
    p->block = 0;
    for (uint32_t b = 0; b < (call->vcounts ? n : 1); b++)
        if (blk_bytes(call, b) > p->block) p->block = blk_bytes(call, b);
    size_t cap = ECCL_RING_PASS_SLICE_BYTES / p->esize * p->esize;
    p->slice = p->block < cap ? p->block : cap;
    p->nslices = p->slice ? (uint32_t)((p->block + p->slice - 1) / p->slice) : 0;
    p->sends = p->recvs = 1;
    if (is_chain(call)) {
        p->nsteps = 1;
        /* The broadcast's chain starts at the root; the reduce's ends there. */
        p->dist = mod_n(p, (int64_t)call->rank - call->root - (call->kind == ECCL_COLL_REDUCE));
        p->sends = p->dist < n - 1;
        p->recvs = p->dist > 0;
    } else {
        p->nsteps = n - 1;
    }
    /* Nothing of ours to copy in: in place, or a kind without a copy. */
    p->own_done = !(call->kind == ECCL_COLL_ALLGATHER ||
                    (call->kind == ECCL_COLL_BROADCAST && p->dist == 0));
    settle(p, &p->send_i, 0);
    settle(p, &p->recv_i, 1);
}

static uint32_t total(const eccl_ring_pass *p) { return p->nsteps * p->nslices; }

/* Block sent (recv 0) or received (recv 1) at step g. */
static uint32_t step_block(const eccl_ring_pass *p, uint32_t g, int recv)
{
    switch (p->call.kind) {
    case ECCL_COLL_ALLGATHER: return mod_n(p, (int64_t)p->call.rank - g - recv);
    case ECCL_COLL_REDUCE_SCATTER: return mod_n(p, (int64_t)p->call.rank - g - 1 - recv);
    default: return 0;
    }
}

/* Byte offset, within the blocks, of slice i's values, and its length (0:
 * a slot past the end of a smaller block). */
static size_t slice_at(const eccl_ring_pass *p, uint32_t i, int recv, size_t *len)
{
    uint32_t g = i / p->nslices, k = i % p->nslices, b = step_block(p, g, recv);
    size_t start = (size_t)k * p->slice, bytes = blk_bytes(&p->call, b);
    *len = start >= bytes ? 0 : bytes - start < p->slice ? bytes - start : p->slice;
    return blk_at(&p->call, b) + start;
}

/* Moves cursor *i past empty slots. */
static void settle(const eccl_ring_pass *p, uint32_t *i, int recv)
{
    size_t len = 0;
    while (*i < total(p) && (slice_at(p, *i, recv, &len), len == 0)) (*i)++;
}

/* Whether received slice i is written into recvbuf (when it arrives for
 * the copying kinds, once reduced for the others). */
static int writes_output(const eccl_ring_pass *p, uint32_t i)
{
    switch (p->call.kind) {
    case ECCL_COLL_REDUCE_SCATTER: return i / p->nslices == p->nsteps - 1;
    case ECCL_COLL_REDUCE: return p->dist == p->call.nranks - 1;
    default: return 1;
    }
}

/* Where in recvbuf (and backup) received slice i goes: the reduce kinds
 * write one block, whichever block it is in the sendbuf. */
static size_t output_at(const eccl_ring_pass *p, size_t off)
{
    return p->call.kind == ECCL_COLL_REDUCE_SCATTER ? off - blk_at(&p->call, p->call.rank) : off;
}

static void copy(const eccl_ring_pass *p, void *dst, const void *src, size_t n)
{
    p->call.env->dev->copy(p->call.env->dev_ctx, dst, src, n);
}

static int full(const eccl_ring_pass *p)
{
    if (!p->own_done) return 0;
    if (p->call.kind == ECCL_COLL_REDUCE && p->dist != p->call.nranks - 1)
        return p->send_i >= total(p); /* no output: ours is sent */
    return !p->recvs || p->recv_i >= total(p);
}

/* Our own contribution into recvbuf, before anything is sent from there. */
/* Where our own block sits in recvbuf (the all-gather's; the root's
 * buffer for the broadcast), and its bytes. */
static size_t own_at(const eccl_ring_pass *p, size_t *bytes)
{
    int ag = p->call.kind == ECCL_COLL_ALLGATHER;
    *bytes = blk_bytes(&p->call, ag ? p->call.rank : 0);
    return ag ? blk_at(&p->call, p->call.rank) : 0;
}

static void own_copy(eccl_ring_pass *p)
{
    size_t bytes, at = own_at(p, &bytes);
    if (p->call.recvbuf + at != p->call.sendbuf) {
        copy(p, p->backup + at, p->call.recvbuf + at, bytes);
        p->own_saved = 1;
        copy(p, p->call.recvbuf + at, p->call.sendbuf, bytes);
    }
    p->own_done = 1;
}

static int send_ready(const eccl_ring_pass *p)
{
    if (!p->sends || p->send_i >= total(p)) return 0;
    uint32_t g = p->send_i / p->nslices, k = p->send_i % p->nslices;
    /* Slice k forwards what slice k of the step before brought in (the
     * chains forward within their one step). */
    if (is_chain(&p->call)) return !p->recvs || p->recv_i > k;
    return g == 0 || p->recv_i > (g - 1) * p->nslices + k;
}

static const uint8_t *send_src(const eccl_ring_pass *p, size_t off)
{
    int first = is_chain(&p->call) ? p->dist == 0 : p->send_i < p->nslices;
    switch (p->call.kind) {
    case ECCL_COLL_ALLGATHER: return p->call.recvbuf + off;
    case ECCL_COLL_BROADCAST: return (first ? p->call.sendbuf : p->call.recvbuf) + off;
    default: return (first ? p->call.sendbuf : p->scratch) + off; /* our data, or our partial */
    }
}

static eccl_result pump_tokens(eccl_ring_pass *p, eccl_chan *next)
{
    uint32_t n = p->call.nranks;
    if (!full(p) || n == 2) return ECCL_OK;
    uint32_t want = p->done_recv + 1 < n - 1 ? p->done_recv + 1 : n - 1;
    while (p->done_sent < want) {
        eccl_wire_data t = {.tag = p->call.tag, .epoch = p->call.epoch, .phase = ECCL_PHASE_DONE,
                            .step = (uint16_t)(p->done_sent + 1)};
        eccl_result rc = eccl_chan_send_data(next, &t, NULL, NULL);
        if (rc != ECCL_OK) return rc;
        p->done_sent++;
    }
    return ECCL_OK;
}

static eccl_result pass_pump(void *op, eccl_chan *link[ECCL_ROLE_COUNT])
{
    eccl_ring_pass *p = op;
    eccl_chan *next = link[ECCL_ROLE_NEXT];
    if (!p->own_done) own_copy(p);
    while (send_ready(p) && next->queued_bytes < ECCL_RING_MAX_QUEUED) {
        size_t len, off = slice_at(p, p->send_i, 0, &len);
        eccl_wire_data w = {.tag = p->call.tag, .epoch = p->call.epoch,
                            .phase = phase_of(p->call.kind),
                            .step = (uint16_t)(p->send_i / p->nslices), .offset = off,
                            .len = (uint32_t)len};
        eccl_result rc = eccl_chan_send_data(next, &w, send_src(p, off), &p->inflight);
        if (rc != ECCL_OK) return rc;
        p->tx_bytes += len;
        p->send_i++;
        settle(p, &p->send_i, 0);
    }
    return pump_tokens(p, next);
}

/* Backs up the output range of received slice i if it writes one. */
static void save_slice(eccl_ring_pass *p, uint32_t i, size_t off, size_t len)
{
    if (writes_output(p, i)) {
        size_t at = output_at(p, off);
        copy(p, p->backup + at, p->call.recvbuf + at, len);
    }
    p->saved_i = i + 1;
}

static eccl_result pass_recv(void *op, int role, const eccl_wire_data *w, void **dst)
{
    eccl_ring_pass *p = op;
    if (role != ECCL_ROLE_PREV || w->ring != 0) return ECCL_ERR_PROTOCOL;
    if (w->phase == ECCL_PHASE_DONE) {
        if (w->len != 0 || w->step != p->done_recv + 1 || w->step > p->call.nranks - 1 ||
            p->call.nranks == 2)
            return ECCL_ERR_PROTOCOL;
        *dst = NULL;
        return ECCL_OK;
    }
    if (!p->recvs || p->recv_i >= total(p)) return ECCL_ERR_PROTOCOL;
    size_t len, off = slice_at(p, p->recv_i, 1, &len);
    if (w->phase != phase_of(p->call.kind) || w->flags != 0 ||
        w->step != (uint16_t)(p->recv_i / p->nslices) || w->offset != off || w->len != len)
        return ECCL_ERR_PROTOCOL;
    if (reduces(p)) {
        *dst = p->scratch + off;
    } else {
        save_slice(p, p->recv_i, off, len); /* before the first byte lands */
        *dst = p->call.recvbuf + off;
    }
    return ECCL_OK;
}

static eccl_result pass_recv_done(void *op, int role, const eccl_wire_data *w)
{
    eccl_ring_pass *p = op;
    (void)role;
    if (w->phase == ECCL_PHASE_DONE) {
        p->done_recv = w->step;
        return ECCL_OK;
    }
    p->rx_bytes += w->len;
    if (reduces(p)) {
        const eccl_dev_ops *dev = p->call.env->dev;
        void *ctx = p->call.env->dev_ctx;
        size_t off = w->offset, n = w->len / p->esize;
        /* The partial from upstream op our own data: the ring's order. */
        dev->reduce(ctx, p->scratch + off, p->call.sendbuf + off, n, p->call.dtype, p->call.op);
        if (writes_output(p, p->recv_i)) {
            uint8_t *out = p->call.recvbuf + output_at(p, off);
            save_slice(p, p->recv_i, off, w->len);
            copy(p, out, p->scratch + off, w->len);
            if (p->call.op == ECCL_AVG) dev->scale_div(ctx, out, n, p->call.dtype, p->call.nranks);
        } else {
            p->saved_i = p->recv_i + 1;
        }
    }
    p->recv_i++;
    settle(p, &p->recv_i, 1);
    return ECCL_OK;
}

static int pass_have_full(const void *op) { return full(op); }

static int pass_complete(void *op)
{
    eccl_ring_pass *p = op;
    if (p->inflight > 0 || (p->sends && p->send_i < total(p)) || !full(p)) return 0;
    uint32_t n = p->call.nranks;
    return n == 2 || (p->done_recv >= n - 1 && p->done_sent >= n - 1);
}

static int pass_expects(const void *op, int role)
{
    const eccl_ring_pass *p = op;
    if (role != ECCL_ROLE_PREV) return 0;
    return (p->recvs && p->recv_i < total(p)) || (p->call.nranks > 2 && p->done_recv < p->call.nranks - 1);
}

static void pass_restore(void *op)
{
    eccl_ring_pass *p = op;
    if (p->own_saved) {
        size_t bytes, at = own_at(p, &bytes);
        copy(p, p->call.recvbuf + at, p->backup + at, bytes);
    }
    for (uint32_t i = 0; i < p->saved_i; i++) {
        size_t len, at = slice_at(p, i, 1, &len);
        if (len && writes_output(p, i)) copy(p, p->call.recvbuf + output_at(p, at), p->backup + output_at(p, at), len);
    }
}

static eccl_result pass_error(const void *op)
{
    (void)op;
    return ECCL_OK;
}

static void pass_bytes(const void *op, uint64_t *tx, uint64_t *rx)
{
    const eccl_ring_pass *p = op;
    *tx = p->tx_bytes;
    *rx = p->rx_bytes;
}

/* One engine, two names: the all-gather and reduce-scatter run the ring,
 * broadcast and reduce the chain. */
#define PASS_ALGO(algo_id)                                                             \
    {                                                                                  \
        .id = (algo_id), .roles = ECCL_ROLES_RING,                                     \
        .pump_needs = ECCL_ROLE_BIT(ECCL_ROLE_NEXT), .pump = pass_pump,                \
        .recv = pass_recv, .recv_done = pass_recv_done, .complete = pass_complete,     \
        .expects = pass_expects, .have_full = pass_have_full, .restore = pass_restore, \
        .error = pass_error, .bytes = pass_bytes,                                      \
    }
const eccl_coll_algo eccl_ring_pass_algo = PASS_ALGO(ECCL_ALGO_RING);
const eccl_coll_algo eccl_chain_pass_algo = PASS_ALGO(ECCL_ALGO_CHAIN);
