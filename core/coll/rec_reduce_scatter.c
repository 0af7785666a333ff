#include "coll/rec_reduce_scatter.h"

#include <string.h>

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
        if (s == a->steps.nsteps - 1) {
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

static int sends(const eccl_recrs_step *st)
{
    return st->kind == ECCL_RECRS_FOLD_SEND || st->kind == ECCL_RECRS_HALVE || st->kind == ECCL_RECRS_RESULT_SEND;
}

static int receives(const eccl_recrs_step *st)
{
    return st->kind == ECCL_RECRS_FOLD_RECV || st->kind == ECCL_RECRS_HALVE || st->kind == ECCL_RECRS_RESULT_RECV;
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

/* Backs up recvbuf (our block) before its first write. */
static void save(eccl_rec_rs *a)
{
    if (a->saved) return;
    eccl_coll_save(&a->call, a->backup, 0, eccl_rec_rs_output_bytes(&a->call));
    a->saved = 1;
}

/* ---- init ------------------------------------------------------------------------ */

static const eccl_peer_steps_ops rs_steps; /* the list, for the engine: below */

void eccl_rec_rs_init_ex(eccl_rec_rs *a, const eccl_coll_call *call, uint8_t *scratch, uint8_t *backup,
                         size_t slice_bytes)
{
    memset(a, 0, sizeof *a);
    a->call = *call;
    a->scratch = scratch;
    a->backup = backup;
    a->esize = eccl_dtype_size(call->dtype);
    a->total = total_of(call);
    a->p = eccl_floor_pow2(call->nranks);
    a->levels = eccl_ceil_log2(a->p);
    a->rem = call->nranks - a->p;
    a->extra = call->rank >= a->p;
    a->folder = call->rank < a->rem;
    uint32_t nsteps = a->extra ? 2 : a->levels + (a->folder ? 2 : 0);
    eccl_peer_steps_init(&a->steps, &rs_steps, call, slice_bytes, nsteps, a->counters);
}

void eccl_rec_rs_init(eccl_rec_rs *a, const eccl_coll_call *call, uint8_t *scratch, uint8_t *backup)
{
    eccl_rec_rs_init_ex(a, call, scratch, backup, ECCL_RING_PASS_SLICE_BYTES);
}

/* ---- the list, for the engine (coll/peer_steps.h) ----------------------------------- */

static void rs_step(const void *op, uint32_t s, eccl_peer_step *ps)
{
    const eccl_rec_rs *a = op;
    eccl_recrs_step st;
    eccl_rec_rs_step(a, s, &st);
    ps->phase = st.phase;
    ps->wire_step = wire_step(a, s);
    /* Offsets in the compact layout of what the step sends. */
    ps->tx = (eccl_peer_range){.on = sends(&st), .peer = st.peer, .len = {st.tx_len[0], st.tx_len[1]}};
    ps->rx = (eccl_peer_range){.on = receives(&st), .peer = st.peer, .len = {st.rx_len[0], st.rx_len[1]}};
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

static const uint8_t *rs_tx_src(const void *op, uint32_t s, const eccl_peer_slice *sl)
{
    const eccl_rec_rs *a = op;
    eccl_recrs_step st;
    eccl_rec_rs_step(a, s, &st);
    return tx_base(a, &st) + st.tx_off[sl->piece] + sl->start;
}

/* Where a received slice of step s lands: the fold and each halving step
 * their own scratch region (a partner may run ahead), RESULT recvbuf. */
static uint8_t *rs_rx_dst(void *op, uint32_t s, const eccl_peer_slice *sl)
{
    eccl_rec_rs *a = op;
    eccl_recrs_step st;
    eccl_rec_rs_step(a, s, &st);
    switch (st.kind) {
    case ECCL_RECRS_FOLD_RECV: return fold_rx(a) + sl->off;
    case ECCL_RECRS_HALVE: return rx_region(a, st.level) + sl->off;
    default: /* RESULT: straight into recvbuf, backed up first */
        save(a);
        return a->call.recvbuf + sl->off;
    }
}

/* Received slice sl of step s (the current one) is in place: combine it. */
static void rs_combine(void *op, uint32_t s, const eccl_peer_slice *sl)
{
    eccl_rec_rs *a = op;
    eccl_recrs_step st;
    eccl_rec_rs_step(a, s, &st);
    size_t off = sl->off, len = sl->len;
    if (st.kind == ECCL_RECRS_FOLD_RECV) {
        /* Ours op the extra's. */
        eccl_coll_copy(&a->call, fold_acc(a) + off, a->call.sendbuf + off, len);
        eccl_coll_reduce(&a->call, fold_acc(a) + off, fold_rx(a) + off, len);
    } else if (st.kind == ECCL_RECRS_HALVE) {
        /* Lower op higher: the lower rank into a fresh region, the higher
         * into the lower's partial it received. */
        uint8_t *rx = rx_region(a, st.level) + off;
        const uint8_t *mine = partial(a, st.level) + st.keep_off[sl->piece] + sl->start;
        if (st.lower) {
            uint8_t *acc = acc_region(a, st.level) + off;
            eccl_coll_copy(&a->call, acc, mine, len);
            eccl_coll_reduce(&a->call, acc, rx, len);
        } else {
            eccl_coll_reduce(&a->call, rx, mine, len);
        }
    }
    /* RESULT: landed in recvbuf as it is */
}

/* Step s is complete: what its end finishes (1: the output is final). */
static int rs_step_done(void *op, uint32_t s)
{
    eccl_rec_rs *a = op;
    eccl_recrs_step st;
    eccl_rec_rs_step(a, s, &st);
    if (st.kind == ECCL_RECRS_HALVE && st.level == a->levels - 1) {
        /* Blocks v and v + p are final: AVG divides once, here, by their
         * owner; block v goes to recvbuf (block v + p leaves from here). */
        const eccl_coll_call *c = &a->call;
        uint8_t *fin = (uint8_t *)partial(a, a->levels);
        size_t mine = block_count(c, c->rank), theirs = a->folder ? block_count(c, c->rank + a->p) : 0;
        if (c->op == ECCL_AVG && mine + theirs)
            c->env->dev->scale_div(c->env->dev_ctx, fin, mine + theirs, c->dtype, c->nranks);
        save(a);
        eccl_coll_copy(&a->call, c->recvbuf, fin, mine * a->esize);
        return 1;
    }
    return st.kind == ECCL_RECRS_RESULT_RECV;
}

static const eccl_peer_steps_ops rs_steps = {
    .done_phase = ECCL_PHASE_RECRS_DONE,
    .step = rs_step,
    .tx_src = rs_tx_src,
    .rx_dst = rs_rx_dst,
    .combine = rs_combine,
    .step_done = rs_step_done,
};

/* ---- the algorithm face ------------------------------------------------------------ */

static void rs_restore(void *op)
{
    eccl_rec_rs *a = op;
    if (a->saved) eccl_coll_put_back(&a->call, a->backup, 0, eccl_rec_rs_output_bytes(&a->call));
}

const eccl_coll_algo eccl_rec_rs_algo = ECCL_PEER_STEPS_ALGO(ECCL_ALGO_RECURSIVE, rs_restore);
