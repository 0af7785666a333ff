#include "coll/ring_pass.h"

#include <string.h>

#include "coll/ring_allreduce.h"
#include "quant/quant.h"

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

/* ---- geometry ------------------------------------------------------------- */

static uint32_t total(const eccl_ring_pass *p, int d) { return p->nsteps * p->dir[d].nslices; }

/* The rank at position q of ring d (ring 1 numbers positions the other way
 * round, so that they grow along its send direction too). */
static uint32_t rank_at(const eccl_ring_pass *p, int d, int64_t q)
{
    uint32_t pos = mod_n(p, q);
    return d ? (p->call.nranks - pos) % p->call.nranks : pos;
}

/* The first element of block b that ring 1 carries (its count when one
 * ring carries everything). */
static size_t half_elems(const eccl_ring_pass *p, uint32_t b)
{
    size_t n = blk_bytes(&p->call, b) / p->esize;
    return p->nrings == 2 ? n - n / 2 : n;
}

/* Ring d's share of block b: bytes, and where it starts in the blocks. */
static size_t part_bytes(const eccl_ring_pass *p, int d, uint32_t b)
{
    size_t h = half_elems(p, b) * p->esize;
    return d ? blk_bytes(&p->call, b) - h : h;
}

static size_t part_at(const eccl_ring_pass *p, int d, uint32_t b)
{
    return blk_at(&p->call, b) + (d ? half_elems(p, b) * p->esize : 0);
}

/* Block sent (recv 0) or received (recv 1) at step g of ring d. */
static uint32_t step_block(const eccl_ring_pass *p, int d, uint32_t g, int recv)
{
    int64_t q = p->dir[d].pos;
    switch (p->call.kind) {
    case ECCL_COLL_ALLGATHER: return rank_at(p, d, q - g - recv);
    case ECCL_COLL_REDUCE_SCATTER: return rank_at(p, d, q - g - 1 - recv);
    default: return 0;
    }
}

/* Byte offset, within the blocks, of slot i of ring d, and its length (0:
 * a slot past the end of a smaller share). */
static size_t slice_at(const eccl_ring_pass *p, int d, uint32_t i, int recv, size_t *len)
{
    uint32_t k = p->dir[d].nslices;
    uint32_t g = i / k, b = step_block(p, d, g, recv);
    size_t start = (size_t)(i % k) * p->slice, bytes = part_bytes(p, d, b);
    *len = start >= bytes ? 0 : bytes - start < p->slice ? bytes - start : p->slice;
    return part_at(p, d, b) + start;
}

/* Moves cursor *i of ring d past empty slots. */
static void settle(const eccl_ring_pass *p, int d, uint32_t *i, int recv)
{
    size_t len = 0;
    while (*i < total(p, d) && (slice_at(p, d, *i, recv, &len), len == 0)) (*i)++;
}

/* One slot per slice we send, both rings': a record and a code per value. */
static size_t qslot_bytes(const eccl_ring_pass *p) { return ECCL_QUANT_META_BYTES + p->slice / p->esize; }

static uint8_t *qslot(const eccl_ring_pass *p, int d, uint32_t i)
{
    return p->qimg + ((size_t)(d ? total(p, 0) : 0) + i) * qslot_bytes(p);
}

size_t eccl_ring_pass_quant_bytes(const eccl_ring_pass *p)
{
    return (size_t)(total(p, 0) + total(p, 1)) * qslot_bytes(p);
}

size_t eccl_ring_pass_qstage_bytes(const eccl_ring_pass *p) { return 2 * qslot_bytes(p); }

void eccl_ring_pass_set_quant(eccl_ring_pass *p, uint8_t *img, uint8_t *stage)
{
    p->qimg = img;
    p->qstage[0] = stage;
    p->qstage[1] = stage + qslot_bytes(p);
}

void eccl_ring_pass_init(eccl_ring_pass *p, const eccl_coll_call *call, uint8_t *scratch,
                         uint8_t *backup)
{
    memset(p, 0, sizeof *p);
    p->call = *call;
    p->scratch = scratch;
    p->backup = backup;
    p->esize = eccl_dtype_size(call->dtype);
    uint32_t n = call->nranks;
    int chain = is_chain(call);
    for (uint32_t b = 0; b < (call->vcounts ? n : 1); b++)
        if (blk_bytes(call, b) > p->block) p->block = blk_bytes(call, b);
    size_t moved = chain ? p->block : p->block * n;
    p->nrings = moved >= ECCL_RING_TWO_RINGS_MIN_BYTES && p->block >= 2 * p->esize ? 2 : 1;
    size_t cap = ECCL_RING_PASS_SLICE_BYTES / p->esize * p->esize;
    size_t share = p->nrings == 2 ? (p->block / p->esize - p->block / p->esize / 2) * p->esize : p->block;
    p->slice = share < cap ? share : cap;
    p->nsteps = chain ? 1 : n - 1;
    for (int d = 0; d < (int)p->nrings; d++) {
        eccl_ring_pass_dir *r = &p->dir[d];
        r->pos = d ? (n - call->rank) % n : call->rank;
        r->nslices = p->slice ? (uint32_t)((share + p->slice - 1) / p->slice) : 0;
        r->sends = r->recvs = 1;
        if (chain) {
            /* The broadcast's chains start at the root; the reduce's end there. */
            uint32_t root = d ? (n - call->root) % n : call->root;
            r->dist = mod_n(p, (int64_t)r->pos - root - (call->kind == ECCL_COLL_REDUCE));
            r->sends = r->dist < n - 1;
            r->recvs = r->dist > 0;
        }
        settle(p, d, &r->send_i, 0);
        settle(p, d, &r->recv_i, 1);
    }
    /* Nothing of ours to copy in: in place, or a kind without a copy. */
    p->own_done = !(call->kind == ECCL_COLL_ALLGATHER ||
                    (call->kind == ECCL_COLL_BROADCAST && call->rank == call->root));
}

/* Whether received slot i of ring d is written into recvbuf (when it
 * arrives for the copying kinds, once reduced for the others). */
static int writes_output(const eccl_ring_pass *p, int d, uint32_t i)
{
    switch (p->call.kind) {
    case ECCL_COLL_REDUCE_SCATTER: return i / p->dir[d].nslices == p->nsteps - 1;
    case ECCL_COLL_REDUCE: return p->call.rank == p->call.root;
    default: return 1;
    }
}

/* Where in recvbuf (and backup) a received range goes: the reduce-scatter
 * writes one block, whichever block it is in the sendbuf. */
static size_t output_at(const eccl_ring_pass *p, size_t off)
{
    return p->call.kind == ECCL_COLL_REDUCE_SCATTER ? off - blk_at(&p->call, p->call.rank) : off;
}

static int full(const eccl_ring_pass *p)
{
    if (!p->own_done) return 0;
    for (int d = 0; d < (int)p->nrings; d++) {
        const eccl_ring_pass_dir *r = &p->dir[d];
        if (p->call.kind == ECCL_COLL_REDUCE && p->call.rank != p->call.root) {
            if (r->send_i < total(p, d)) return 0; /* no output: ours is sent */
        } else if (r->recvs && r->recv_i < total(p, d)) {
            return 0;
        }
    }
    return 1;
}

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
        eccl_coll_save(&p->call, p->backup, at, bytes);
        p->own_saved = 1;
        eccl_coll_copy(&p->call, p->call.recvbuf + at, p->call.sendbuf, bytes);
    }
    p->own_done = 1;
}

static int send_ready(const eccl_ring_pass *p, int d)
{
    const eccl_ring_pass_dir *r = &p->dir[d];
    if (!r->sends || r->send_i >= total(p, d)) return 0;
    uint32_t g = r->send_i / r->nslices, k = r->send_i % r->nslices;
    /* Slice k forwards what slice k of the step before brought in (the
     * chains forward within their one step). */
    if (is_chain(&p->call)) return !r->recvs || r->recv_i > k;
    return g == 0 || r->recv_i > (g - 1) * r->nslices + k;
}

static const uint8_t *send_src(const eccl_ring_pass *p, int d, size_t off)
{
    const eccl_ring_pass_dir *r = &p->dir[d];
    int first = is_chain(&p->call) ? r->dist == 0 : r->send_i < r->nslices;
    switch (p->call.kind) {
    case ECCL_COLL_ALLGATHER: return p->call.recvbuf + off;
    case ECCL_COLL_BROADCAST: return (first ? p->call.sendbuf : p->call.recvbuf) + off;
    default: return (first ? p->call.sendbuf : p->scratch) + off; /* our data, or our partial */
    }
}

static eccl_result pump_tokens(eccl_ring_pass *p, const eccl_coll_links *links, eccl_chan *next)
{
    uint32_t n = p->call.nranks;
    if (!full(p)) return ECCL_OK;
    uint32_t want = p->done_recv + 1 < n - 1 ? p->done_recv + 1 : n - 1;
    while (p->done_sent < want) {
        eccl_wire_data t = {.tag = p->call.tag, .epoch = p->call.epoch, .phase = ECCL_PHASE_DONE,
                            .step = (uint16_t)(p->done_sent + 1)};
        eccl_result rc = eccl_coll_send_token(links->lazy_tokens, next, &t, NULL);
        if (rc != ECCL_OK) return rc;
        p->done_sent++;
    }
    return ECCL_OK;
}

/* Queues what ring d may send on `link`. */
static eccl_result pump_dir(eccl_ring_pass *p, int d, eccl_chan *link)
{
    eccl_ring_pass_dir *r = &p->dir[d];
    while (send_ready(p, d) && link->queued_bytes < ECCL_RING_MAX_QUEUED) {
        size_t len, off = slice_at(p, d, r->send_i, 0, &len);
        eccl_wire_data w = {.tag = p->call.tag, .epoch = p->call.epoch, .ring = (uint8_t)d,
                            .phase = phase_of(p->call.kind),
                            .step = (uint16_t)(r->send_i / r->nslices), .offset = off,
                            .len = (uint32_t)len};
        const uint8_t *src = send_src(p, d, off);
        if (p->call.quant != ECCL_QUANT_NONE) {
            /* Our partial, quantised as it leaves; raw if the quantiser
             * refuses it. The slot stays ours until the frame is written. */
            uint8_t *slot = qslot(p, d, r->send_i);
            eccl_quant_meta m;
            if (eccl_quant_quantize(p->call.quant, p->call.dtype, src, len / p->esize,
                                    slot + ECCL_QUANT_META_BYTES, &m) == ECCL_OK &&
                eccl_wire_qdata_encode(&m, slot) == ECCL_OK) {
                src = slot;
                w.flags = ECCL_WIRE_DATA_QUANT;
                w.len = (uint32_t)(ECCL_QUANT_META_BYTES + len / p->esize);
            }
        }
        eccl_result rc = eccl_chan_send_data(link, &w, src, &p->inflight);
        if (rc != ECCL_OK) return rc;
        p->tx_bytes += w.len;
        r->send_i++;
        settle(p, d, &r->send_i, 0);
    }
    return ECCL_OK;
}

static eccl_result pass_pump(void *op, const eccl_coll_links *links)
{
    eccl_ring_pass *p = op;
    if (!p->own_done) own_copy(p);
    eccl_chan *next = links->role[ECCL_ROLE_NEXT], *prev = links->role[ECCL_ROLE_PREV];
    eccl_result rc = pump_dir(p, 0, next);
    /* Ring 1 goes to prev, whose link may open a moment later: its frames wait. */
    if (rc == ECCL_OK && p->nrings == 2 && prev) rc = pump_dir(p, 1, prev);
    return rc != ECCL_OK ? rc : pump_tokens(p, links, next);
}

/* Backs up the output range of received slot i of ring d if it writes one. */
static void save_slice(eccl_ring_pass *p, int d, uint32_t i, size_t off, size_t len)
{
    if (writes_output(p, d, i)) {
        size_t at = output_at(p, off);
        eccl_coll_save(&p->call, p->backup, at, len);
    }
    p->dir[d].saved_i = i + 1;
}

/* Where received slot i of ring d lands and is combined with our input:
 * straight in recvbuf when it is output there and the call has no backup
 * (input and output apart: writing early cannot touch what we still read,
 * and saves a pass over the bytes), else in scratch. */
static uint8_t *acc_at(const eccl_ring_pass *p, int d, uint32_t i, size_t off)
{
    if (writes_output(p, d, i) && !p->backup) return p->call.recvbuf + output_at(p, off);
    return p->scratch + off;
}

/* Ring 0 arrives from prev, ring 1 from next. */
static int role_dir(int role) { return role == ECCL_ROLE_PREV ? 0 : 1; }

static eccl_result pass_recv(void *op, int role, const eccl_wire_data *w, void **dst)
{
    eccl_ring_pass *p = op;
    if (role != ECCL_ROLE_PREV && role != ECCL_ROLE_NEXT) return ECCL_ERR_PROTOCOL;
    int d = role_dir(role);
    if (w->ring != d || (uint32_t)d >= p->nrings) return ECCL_ERR_PROTOCOL;
    eccl_ring_pass_dir *r = &p->dir[d];
    if (w->phase == ECCL_PHASE_DONE) {
        if (d != 0 || w->len != 0 || w->step != p->done_recv + 1 || w->step > p->call.nranks - 1)
            return ECCL_ERR_PROTOCOL;
        *dst = NULL;
        return ECCL_OK;
    }
    if (!r->recvs || r->recv_i >= total(p, d)) return ECCL_ERR_PROTOCOL;
    size_t len, off = slice_at(p, d, r->recv_i, 1, &len);
    /* A quantised call takes quantised or raw slices; a plain one only raw. */
    int q = w->flags == ECCL_WIRE_DATA_QUANT && p->call.quant != ECCL_QUANT_NONE;
    if (w->phase != phase_of(p->call.kind) || (w->flags != 0 && !q) ||
        w->step != (uint16_t)(r->recv_i / r->nslices) || w->offset != off ||
        w->len != (q ? ECCL_QUANT_META_BYTES + len / p->esize : len))
        return ECCL_ERR_PROTOCOL;
    if (q) {
        *dst = p->qstage[d]; /* dequantised in recv_done */
    } else if (reduces(p)) {
        *dst = acc_at(p, d, r->recv_i, off);
    } else {
        save_slice(p, d, r->recv_i, off, len); /* before the first byte lands */
        *dst = p->call.recvbuf + off;
    }
    return ECCL_OK;
}

static eccl_result pass_recv_done(void *op, int role, const eccl_wire_data *w)
{
    eccl_ring_pass *p = op;
    int d = role_dir(role);
    eccl_ring_pass_dir *r = &p->dir[d];
    if (w->phase == ECCL_PHASE_DONE) {
        p->done_recv = w->step;
        return ECCL_OK;
    }
    p->rx_bytes += w->len;
    if (reduces(p)) {
        const eccl_dev_ops *dev = p->call.env->dev;
        void *ctx = p->call.env->dev_ctx;
        size_t off = w->offset, len, n;
        slice_at(p, d, r->recv_i, 1, &len);
        n = len / p->esize;
        uint8_t *acc = acc_at(p, d, r->recv_i, off);
        if (w->flags & ECCL_WIRE_DATA_QUANT) {
            /* Checked against the call before any value is written: a peer
             * with other options is a protocol error. */
            eccl_quant_meta m;
            const uint8_t *codes;
            if (eccl_wire_qdata_decode(p->qstage[d], w->len, &m, &codes) != ECCL_OK ||
                m.type != (uint8_t)p->call.quant || m.dtype != (uint8_t)p->call.dtype || m.count != n ||
                eccl_quant_dequantize(&m, codes, n, acc) != ECCL_OK)
                return ECCL_ERR_PROTOCOL;
        }
        /* The partial from upstream op our own data: the ring's order. */
        dev->reduce(ctx, acc, p->call.sendbuf + off, n, p->call.dtype, p->call.op);
        if (writes_output(p, d, r->recv_i)) {
            uint8_t *out = p->call.recvbuf + output_at(p, off);
            save_slice(p, d, r->recv_i, off, len);
            if (acc != out) eccl_coll_copy(&p->call, out, acc, len);
            if (p->call.op == ECCL_AVG) dev->scale_div(ctx, out, n, p->call.dtype, p->call.nranks);
        } else {
            r->saved_i = r->recv_i + 1;
        }
    }
    r->recv_i++;
    settle(p, d, &r->recv_i, 1);
    return ECCL_OK;
}

static int pass_have_full(const void *op) { return full(op); }

static int pass_settled(const void *op)
{
    const eccl_ring_pass *p = op;
    if (p->inflight > 0 || !full(p)) return 0;
    for (int d = 0; d < (int)p->nrings; d++)
        if (p->dir[d].sends && p->dir[d].send_i < total(p, d)) return 0;
    return 1;
}

static int pass_complete(void *op)
{
    eccl_ring_pass *p = op;
    if (!pass_settled(p)) return 0;
    uint32_t n = p->call.nranks;
    return p->done_recv >= n - 1 && p->done_sent >= n - 1;
}

/* The done tokens go to next, each after the one before came from prev. */
static int pass_owes_token(const void *op, int role)
{
    const eccl_ring_pass *p = op;
    return role == ECCL_ROLE_NEXT && p->done_sent < p->call.nranks - 1;
}

static int pass_expects(const void *op, int role)
{
    const eccl_ring_pass *p = op;
    if (role != ECCL_ROLE_PREV && role != ECCL_ROLE_NEXT) return 0;
    int d = role_dir(role);
    const eccl_ring_pass_dir *r = &p->dir[d];
    int data = (uint32_t)d < p->nrings && r->recvs && r->recv_i < total(p, d);
    int tokens = d == 0 && p->done_recv < p->call.nranks - 1;
    return data || tokens;
}

static void pass_restore(void *op)
{
    eccl_ring_pass *p = op;
    if (p->own_saved) {
        size_t bytes, at = own_at(p, &bytes);
        eccl_coll_put_back(&p->call, p->backup, at, bytes);
    }
    for (int d = 0; d < (int)p->nrings; d++) {
        for (uint32_t i = 0; i < p->dir[d].saved_i; i++) {
            size_t len, at = slice_at(p, d, i, 1, &len);
            if (len && writes_output(p, d, i))
                eccl_coll_put_back(&p->call, p->backup, output_at(p, at), len);
        }
    }
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
        .settled = pass_settled, .owes_token = pass_owes_token,                        \
        .bytes = pass_bytes,                                      \
    }
const eccl_coll_algo eccl_ring_pass_algo = PASS_ALGO(ECCL_ALGO_RING);
const eccl_coll_algo eccl_chain_pass_algo = PASS_ALGO(ECCL_ALGO_CHAIN);
