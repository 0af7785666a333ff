#include "coll/rec_reduce_scatter.h"

#include <string.h>

#include "coll/ring_allreduce.h" /* ECCL_RING_MAX_QUEUED */
#include "coll/ring_pass.h"      /* ECCL_RING_PASS_SLICE_BYTES */

/* ---- geometry --------------------------------------------------------------- */



static size_t total_of(const eccl_coll_call *c)
{
    return c->vcounts ? c->count : c->count * c->nranks;
}

/* Element where block x starts, x <= N (block N: the end). The v layout's
 * blocks are back to back (call.h), so vdispls is their running sum. */
static size_t disp(const eccl_coll_call *c, uint32_t x)
{
    if (x >= c->nranks) return total_of(c);
    return c->vcounts ? c->vdispls[x] : (size_t)x * c->count;
}

static size_t block_count(const eccl_coll_call *c, uint32_t b)
{
    return c->vcounts ? c->vcounts[b] : c->count;
}

/* Where run B of core indices starting at x starts: block min(x, e) + p. */
static size_t disp_b(const eccl_coll_call *c, uint32_t p, uint32_t x)
{
    uint32_t e = c->nranks - p;
    return disp(c, (x < e ? x : e) + p);
}

/* Halving step k of core rank v: the range R = [lo, lo + 2h) it holds
 * before, the partner v ^ h, and which half it keeps. */
typedef struct halve_geom {
    uint32_t lo, h, keep_a, send_a; /* kept / sent half: [x, x + h) */
    int lower;
} halve_geom;

static halve_geom geom(uint32_t p, uint32_t v, uint32_t k)
{
    halve_geom g;
    uint32_t size = p >> k;
    g.h = size / 2;
    g.lo = v & ~(size - 1);
    g.lower = !(v & g.h);
    g.keep_a = g.lower ? g.lo : g.lo + g.h;
    g.send_a = g.lower ? g.lo + g.h : g.lo;
    return g;
}

/* Bytes of the compact layout of core indices [a, a + n): run A, run B. */
static void runs(const eccl_coll_call *c, uint32_t p, uint32_t a, uint32_t n, size_t es, size_t len[2])
{
    len[0] = (disp(c, a + n) - disp(c, a)) * es;
    len[1] = (disp_b(c, p, a + n) - disp_b(c, p, a)) * es;
}

/* Where half [x, x + h) sits in R's compact layout (bytes): its A piece
 * and its B piece. */
static void pos_in(const eccl_coll_call *c, uint32_t p, const halve_geom *g, uint32_t x, size_t es, size_t off[2])
{
    size_t r_len[2];
    runs(c, p, g->lo, 2 * g->h, es, r_len);
    off[0] = (disp(c, x) - disp(c, g->lo)) * es;
    off[1] = r_len[0] + (disp_b(c, p, x) - disp_b(c, p, g->lo)) * es;
}

void eccl_rec_rs_step(const eccl_rec_rs *a, uint32_t s, eccl_recrs_step *st)
{
    const eccl_coll_call *c = &a->call;
    uint32_t rank = c->rank;
    size_t es = a->esize;
    memset(st, 0, sizeof *st);
    if (a->extra) {
        st->peer = rank - a->p;
        if (s == 0) {
            st->kind = ECCL_RECRS_FOLD_SEND;
            st->phase = ECCL_PHASE_RECRS_FOLD;
            st->tx_len[0] = a->total * es;
        } else {
            st->kind = ECCL_RECRS_RESULT_RECV;
            st->phase = ECCL_PHASE_RECRS_RESULT;
            st->rx_len[0] = block_count(c, rank) * es;
        }
        return;
    }
    if (a->folder) {
        st->peer = rank + a->p;
        st->lower = 1;
        if (s == 0) {
            st->kind = ECCL_RECRS_FOLD_RECV;
            st->phase = ECCL_PHASE_RECRS_FOLD;
            st->rx_len[0] = a->total * es;
            return;
        }
        if (s == a->nsteps - 1) {
            st->kind = ECCL_RECRS_RESULT_SEND;
            st->phase = ECCL_PHASE_RECRS_RESULT;
            st->tx_off[0] = block_count(c, rank) * es; /* after block v in the last partial */
            st->tx_len[0] = block_count(c, rank + a->p) * es;
            return;
        }
        s -= 1;
    }
    halve_geom g = geom(a->p, rank, s);
    st->kind = ECCL_RECRS_HALVE;
    st->phase = ECCL_PHASE_RECRS_HALVE;
    st->level = s;
    st->peer = rank ^ g.h;
    st->lower = g.lower;
    runs(c, a->p, g.send_a, g.h, es, st->tx_len);
    pos_in(c, a->p, &g, g.send_a, es, st->tx_off);
    runs(c, a->p, g.keep_a, g.h, es, st->rx_len);
    pos_in(c, a->p, &g, g.keep_a, es, st->keep_off);
}

/* The step number frames carry: the same on both ends of a pair, so
 * numbered as a folder numbers its steps (FOLD 0, HALVE k at k + 1,
 * RESULT L + 1). */
static uint16_t wire_step(const eccl_rec_rs *a, uint32_t s)
{
    if (a->extra) return (uint16_t)(s ? a->levels + 1 : 0);
    return (uint16_t)(a->folder ? s : s + 1);
}

/* Frames of a step's two pieces: each piece's slices, one empty frame if
 * both are empty. */
static uint32_t piece_slices(const eccl_rec_rs *a, size_t len)
{
    return (uint32_t)((len + a->slice - 1) / a->slice);
}

static uint32_t nslices(const eccl_rec_rs *a, const size_t len[2])
{
    uint32_t n = piece_slices(a, len[0]) + piece_slices(a, len[1]);
    return n ? n : 1;
}

static int sends(const eccl_recrs_step *st)
{
    return st->kind == ECCL_RECRS_FOLD_SEND || st->kind == ECCL_RECRS_HALVE || st->kind == ECCL_RECRS_RESULT_SEND;
}

static int receives(const eccl_recrs_step *st)
{
    return st->kind == ECCL_RECRS_FOLD_RECV || st->kind == ECCL_RECRS_HALVE || st->kind == ECCL_RECRS_RESULT_RECV;
}

static uint32_t n_tx(const eccl_rec_rs *a, const eccl_recrs_step *st) { return sends(st) ? nslices(a, st->tx_len) : 0; }
static uint32_t n_rx(const eccl_rec_rs *a, const eccl_recrs_step *st) { return receives(st) ? nslices(a, st->rx_len) : 0; }

/* Slice j of pieces len[2]: its piece, its start in the piece, its length;
 * returns its offset in the compact layout (piece 0 then piece 1). */
static size_t slice_of(const eccl_rec_rs *a, const size_t len[2], uint32_t j, int *piece, size_t *start,
                       size_t *n)
{
    uint32_t n0 = piece_slices(a, len[0]);
    *piece = j >= n0;
    *start = (size_t)(j - (*piece ? n0 : 0)) * a->slice;
    size_t plen = len[*piece];
    *n = *start >= plen ? 0 : plen - *start < a->slice ? plen - *start : a->slice;
    return (*piece ? len[0] : 0) + *start;
}

/* ---- scratch ---------------------------------------------------------------------
 * A folder: the extra's input as it lands (fold_rx), then its input op the
 * extra's (fold_acc), each the whole input. Then per halving step k: the
 * partner's partial of the kept half (rx_k), and on the lower rank of the
 * pair the combination (acc_k), each the kept half's compact size. An
 * extra rank needs none. */

static size_t fold_bytes(const eccl_coll_call *c, uint32_t p)
{
    return c->rank < c->nranks - p ? total_of(c) * eccl_dtype_size(c->dtype) : 0;
}

/* Offset of rx_k (k <= L: L gives the total). */
static size_t rx_at(const eccl_coll_call *c, uint32_t p, uint32_t k)
{
    size_t at = 2 * fold_bytes(c, p), es = eccl_dtype_size(c->dtype), len[2];
    for (uint32_t j = 0; j < k; j++) {
        halve_geom g = geom(p, c->rank, j);
        runs(c, p, g.keep_a, g.h, es, len);
        at += (len[0] + len[1]) * (g.lower ? 2 : 1);
    }
    return at;
}

size_t eccl_rec_rs_scratch_bytes(const eccl_coll_call *c)
{
    uint32_t p = eccl_floor_pow2(c->nranks);
    if (c->rank >= p) return 0;
    return rx_at(c, p, eccl_ceil_log2(p));
}

size_t eccl_rec_rs_output_bytes(const eccl_coll_call *c)
{
    return block_count(c, c->rank) * eccl_dtype_size(c->dtype);
}

static uint8_t *rx_region(const eccl_rec_rs *a, uint32_t k) { return a->scratch + rx_at(&a->call, a->p, k); }

static uint8_t *acc_region(const eccl_rec_rs *a, uint32_t k)
{
    size_t len[2];
    halve_geom g = geom(a->p, a->call.rank, k);
    runs(&a->call, a->p, g.keep_a, g.h, a->esize, len);
    return rx_region(a, k) + len[0] + len[1];
}

static uint8_t *fold_rx(const eccl_rec_rs *a) { return a->scratch; }
static uint8_t *fold_acc(const eccl_rec_rs *a) { return a->scratch + a->total * a->esize; }

/* Our partial before halving step k, in the compact layout of the range
 * held then: the input (a folder's combined with its extra's) at k = 0,
 * else where step k-1 combined. */
static const uint8_t *partial(const eccl_rec_rs *a, uint32_t k)
{
    if (k == 0) return a->folder ? fold_acc(a) : a->call.sendbuf;
    return geom(a->p, a->call.rank, k - 1).lower ? acc_region(a, k - 1) : rx_region(a, k - 1);
}

/* ---- buffers -------------------------------------------------------------------- */

static void copy(const eccl_rec_rs *a, void *dst, const void *src, size_t n)
{
    if (n) a->call.env->dev->copy(a->call.env->dev_ctx, dst, src, n);
}

static void reduce(const eccl_rec_rs *a, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        a->call.env->dev->reduce(a->call.env->dev_ctx, dst, src, bytes / a->esize, a->call.dtype, a->call.op);
}

/* Backs up recvbuf (our block) before its first write. */
static void save(eccl_rec_rs *a)
{
    if (a->saved) return;
    copy(a, a->backup, a->call.recvbuf, eccl_rec_rs_output_bytes(&a->call));
    a->saved = 1;
}

/* ---- init ------------------------------------------------------------------------ */

void eccl_rec_rs_init_ex(eccl_rec_rs *a, const eccl_coll_call *call, uint8_t *scratch, uint8_t *backup,
                         size_t slice_bytes)
{
    memset(a, 0, sizeof *a);
    a->call = *call;
    a->scratch = scratch;
    a->backup = backup;
    a->esize = eccl_dtype_size(call->dtype);
    a->total = total_of(call);
    a->slice = slice_bytes / a->esize * a->esize;
    if (a->slice == 0) a->slice = a->esize;
    a->p = eccl_floor_pow2(call->nranks);
    a->levels = eccl_ceil_log2(a->p);
    a->rem = call->nranks - a->p;
    a->extra = call->rank >= a->p;
    a->folder = call->rank < a->rem;
    a->nsteps = a->extra ? 2 : a->levels + (a->folder ? 2 : 0);
    eccl_dissem_init(&a->bar, call->rank, call->nranks);
}

void eccl_rec_rs_init(eccl_rec_rs *a, const eccl_coll_call *call, uint8_t *scratch, uint8_t *backup)
{
    eccl_rec_rs_init_ex(a, call, scratch, backup, ECCL_RING_PASS_SLICE_BYTES);
}

/* ---- progress ---------------------------------------------------------------------- */

/* Received slice j of step st (the current one) is in place: combine it. */
static void combine(eccl_rec_rs *a, const eccl_recrs_step *st, uint32_t j)
{
    int pc;
    size_t start, len, off = slice_of(a, st->rx_len, j, &pc, &start, &len);
    if (st->kind == ECCL_RECRS_FOLD_RECV) {
        /* Ours op the extra's. */
        copy(a, fold_acc(a) + off, a->call.sendbuf + off, len);
        reduce(a, fold_acc(a) + off, fold_rx(a) + off, len);
    } else if (st->kind == ECCL_RECRS_HALVE) {
        /* Lower op higher: the lower rank into a fresh region, the higher
         * into the lower's partial it received. */
        uint8_t *rx = rx_region(a, st->level) + off;
        const uint8_t *mine = partial(a, st->level) + st->keep_off[pc] + start;
        if (st->lower) {
            uint8_t *acc = acc_region(a, st->level) + off;
            copy(a, acc, mine, len);
            reduce(a, acc, rx, len);
        } else {
            reduce(a, rx, mine, len);
        }
    }
    /* RESULT: landed in recvbuf as it is */
}

/* Step st is complete: what its end finishes. */
static void step_done(eccl_rec_rs *a, const eccl_recrs_step *st)
{
    if (st->kind == ECCL_RECRS_HALVE && st->level == a->levels - 1) {
        /* Blocks v and v + p are final: AVG divides once, here, by their
         * owner; block v goes to recvbuf (block v + p leaves from here). */
        const eccl_coll_call *c = &a->call;
        uint8_t *fin = (uint8_t *)partial(a, a->levels);
        size_t mine = block_count(c, c->rank), theirs = a->folder ? block_count(c, c->rank + a->p) : 0;
        if (c->op == ECCL_AVG && mine + theirs)
            c->env->dev->scale_div(c->env->dev_ctx, fin, mine + theirs, c->dtype, c->nranks);
        save(a);
        copy(a, c->recvbuf, fin, mine * a->esize);
        a->have_full = 1;
    } else if (st->kind == ECCL_RECRS_RESULT_RECV) {
        a->have_full = 1;
    }
}

/* Combines what landed for the current step and moves past every step
 * that is complete (all its slices queued and combined). */
static void advance(eccl_rec_rs *a)
{
    while (a->cur < a->nsteps) {
        eccl_recrs_step st;
        eccl_rec_rs_step(a, a->cur, &st);
        while (a->rx_done[a->cur] < a->rx_got[a->cur]) combine(a, &st, a->rx_done[a->cur]++);
        if (a->rx_done[a->cur] < n_rx(a, &st) || a->tx_i[a->cur] < n_tx(a, &st)) return;
        step_done(a, &st);
        a->cur++;
    }
}

/* Where the data step st sends is. */
static const uint8_t *tx_base(const eccl_rec_rs *a, const eccl_recrs_step *st)
{
    switch (st->kind) {
    case ECCL_RECRS_FOLD_SEND: return a->call.sendbuf;
    case ECCL_RECRS_HALVE: return partial(a, st->level);
    default: return partial(a, a->levels); /* RESULT: the last partial */
    }
}


/* ---- the algorithm face ------------------------------------------------------------ */

/* Asks for the link of every rank we still send to or hear from: the
 * lower rank of a pair opens it, even one that only listens. */
static void touch_links(const eccl_rec_rs *a, const eccl_coll_links *links)
{
    for (uint32_t s = a->cur; s < a->nsteps; s++) {
        eccl_recrs_step st;
        eccl_rec_rs_step(a, s, &st);
        if (a->rx_got[s] < n_rx(a, &st) || a->tx_i[s] < n_tx(a, &st)) (void)eccl_coll_peer(links, st.peer);
    }
    eccl_dissem_touch(&a->bar, links);
}

static eccl_result rs_pump(void *op, const eccl_coll_links *links)
{
    eccl_rec_rs *a = op;
    touch_links(a, links);
    advance(a);
    while (a->cur < a->nsteps) {
        eccl_recrs_step st;
        eccl_rec_rs_step(a, a->cur, &st);
        uint32_t want = n_tx(a, &st), before = a->cur;
        eccl_chan *ch = a->tx_i[a->cur] < want ? eccl_coll_peer(links, st.peer) : NULL;
        while (ch && a->tx_i[a->cur] < want && ch->queued_bytes < ECCL_RING_MAX_QUEUED) {
            int pc;
            size_t start, len, off = slice_of(a, st.tx_len, a->tx_i[a->cur], &pc, &start, &len);
            eccl_wire_data w = {.tag = a->call.tag, .epoch = a->call.epoch, .phase = st.phase,
                                .step = wire_step(a, a->cur), .offset = off, .len = (uint32_t)len};
            eccl_result rc = eccl_chan_send_data(ch, &w, tx_base(a, &st) + st.tx_off[pc] + start, &a->inflight);
            if (rc != ECCL_OK) return rc;
            a->tx_bytes += len;
            a->tx_i[a->cur]++;
        }
        advance(a);
        if (a->cur == before) break; /* waiting for a link, the queue or the partner */
    }
    if (!a->have_full || a->cur < a->nsteps) return ECCL_OK;
    return eccl_dissem_pump(&a->bar, links, a->call.tag, a->call.epoch, ECCL_PHASE_RECRS_DONE, &a->inflight);
}

/* The first step from `cur` on whose data `rank` still owes us, or
 * a->nsteps. */
static uint32_t owed_step(const eccl_rec_rs *a, uint32_t rank, eccl_recrs_step *st)
{
    for (uint32_t s = a->cur; s < a->nsteps; s++) {
        eccl_rec_rs_step(a, s, st);
        if (st->peer == rank && a->rx_got[s] < n_rx(a, st)) return s;
    }
    return a->nsteps;
}

static eccl_result rs_recv(void *op, int role, const eccl_wire_data *d, void **dst)
{
    eccl_rec_rs *a = op;
    if (!ECCL_ROLE_IS_PEER(role)) return ECCL_ERR_PROTOCOL;
    uint32_t from = ECCL_ROLE_PEER_RANK(role);
    if (from >= a->call.nranks || from == a->call.rank || d->ring != 0 || d->flags != 0)
        return ECCL_ERR_PROTOCOL;
    *dst = NULL;
    eccl_recrs_step st;
    uint32_t s = owed_step(a, from, &st);
    if (s < a->nsteps) {
        int pc;
        size_t start, len, off = slice_of(a, st.rx_len, a->rx_got[s], &pc, &start, &len);
        if (d->phase != st.phase || d->step != wire_step(a, s) || d->offset != off || d->len != len)
            return ECCL_ERR_PROTOCOL;
        if (!len) return ECCL_OK;
        switch (st.kind) {
        case ECCL_RECRS_FOLD_RECV: *dst = fold_rx(a) + off; break;
        case ECCL_RECRS_HALVE: *dst = rx_region(a, st.level) + off; break;
        default: /* RESULT: straight into recvbuf, backed up first */
            save(a);
            *dst = a->call.recvbuf + off;
            break;
        }
        return ECCL_OK;
    }
    return eccl_dissem_check(&a->bar, from, ECCL_PHASE_RECRS_DONE, d);
}

static eccl_result rs_recv_done(void *op, int role, const eccl_wire_data *d)
{
    eccl_rec_rs *a = op;
    if (d->phase == ECCL_PHASE_RECRS_DONE) {
        eccl_dissem_got(&a->bar, d);
        return ECCL_OK;
    }
    eccl_recrs_step st;
    uint32_t s = owed_step(a, ECCL_ROLE_PEER_RANK(role), &st); /* the step recv checked it against */
    if (s == a->nsteps) return ECCL_ERR_PROTOCOL;
    a->rx_bytes += d->len;
    a->rx_got[s]++;
    advance(a);
    return ECCL_OK;
}

static int rs_complete(void *op)
{
    const eccl_rec_rs *a = op;
    return a->have_full && a->cur == a->nsteps && a->inflight == 0 && eccl_dissem_done(&a->bar);
}

static int rs_expects(const void *op, int role)
{
    const eccl_rec_rs *a = op;
    if (!ECCL_ROLE_IS_PEER(role)) return 0;
    uint32_t from = ECCL_ROLE_PEER_RANK(role);
    eccl_recrs_step st;
    return owed_step(a, from, &st) < a->nsteps || eccl_dissem_owed(&a->bar, from) < a->bar.rounds;
}

static int rs_have_full(const void *op) { return ((const eccl_rec_rs *)op)->have_full; }

static void rs_restore(void *op)
{
    eccl_rec_rs *a = op;
    if (a->saved) copy(a, a->call.recvbuf, a->backup, eccl_rec_rs_output_bytes(&a->call));
}

static eccl_result rs_error(const void *op)
{
    (void)op;
    return ECCL_OK;
}

static void rs_bytes(const void *op, uint64_t *tx, uint64_t *rx)
{
    const eccl_rec_rs *a = op;
    *tx = a->tx_bytes;
    *rx = a->rx_bytes;
}

const eccl_coll_algo eccl_rec_rs_algo = {
    .id = ECCL_ALGO_RECURSIVE,
    .roles = ECCL_ROLES_PEERS,
    .pump_needs = 0, /* peer links open lazily: frames wait for theirs */
    .pump = rs_pump,
    .recv = rs_recv,
    .recv_done = rs_recv_done,
    .complete = rs_complete,
    .expects = rs_expects,
    .have_full = rs_have_full,
    .restore = rs_restore,
    .error = rs_error,
    .bytes = rs_bytes,
};
