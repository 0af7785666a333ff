#include "coll/rec_allreduce.h"

#include <string.h>

#include "coll/ring_pass.h"      /* ECCL_RING_PASS_SLICE_BYTES */

/* ---- geometry --------------------------------------------------------------- */

/* Elements [lo, hi) that core rank v holds after j halving steps: step k
 * cuts the range at its middle element and v keeps the upper half iff bit
 * k of v is set. */
static void level_range(size_t count, uint32_t v, uint32_t j, size_t *lo, size_t *hi)
{
    size_t a = 0, b = count;
    for (uint32_t k = 0; k < j; k++) {
        size_t mid = a + (b - a) / 2;
        if ((v >> k) & 1u) a = mid;
        else b = mid;
    }
    *lo = a;
    *hi = b;
}

int eccl_rec_allreduce_halving(const eccl_coll_call *c)
{
    uint32_t p = eccl_floor_pow2(c->nranks), L = eccl_ceil_log2(p);
    double bytes = (double)c->count * (double)eccl_dtype_size(c->dtype);
    /* Bytes a rank sends and reduces less: 2 log2 p buffers against
     * 3 (p-1)/p of one (exact in doubles for any real size: 3/p is). */
    double saved = bytes * (2.0 * L - 3.0 + 3.0 / (double)p);
    return c->count >= p && saved >= (double)ECCL_REC_HALVING_MIN_SAVED;
}

void eccl_rec_allreduce_step(const eccl_rec_allreduce *a, uint32_t s, eccl_rec_step *st)
{
    uint32_t rank = a->call.rank;
    size_t n = a->call.count, lo, hi;
    memset(st, 0, sizeof *st);
    if (a->extra) {
        st->peer = rank - a->p;
        if (s == 0) {
            st->kind = ECCL_REC_FOLD_SEND;
            st->phase = ECCL_PHASE_REC_FOLD;
            st->tx = 1;
            st->tx_n = n;
        } else {
            st->kind = ECCL_REC_RESULT_RECV;
            st->phase = ECCL_PHASE_REC_RESULT;
            st->rx = 1;
            st->rx_n = n;
        }
        return;
    }
    if (a->folder) {
        st->peer = rank + a->p;
        st->lower = 1;
        if (s == 0) {
            st->kind = ECCL_REC_FOLD_RECV;
            st->phase = ECCL_PHASE_REC_FOLD;
            st->rx = 1;
            st->rx_n = n;
            return;
        }
        if (s == a->steps.nsteps - 1) {
            st->kind = ECCL_REC_RESULT_SEND;
            st->phase = ECCL_PHASE_REC_RESULT;
            st->tx = 1;
            st->tx_n = n;
            return;
        }
        s -= 1;
    }
    uint32_t L = a->levels;
    uint32_t k = !a->halving || s < L ? s : L - 1 - (s - L);
    st->level = k;
    st->peer = rank ^ (1u << k);
    st->lower = !((rank >> k) & 1u);
    st->tx = st->rx = 1;
    if (!a->halving) {
        st->kind = ECCL_REC_DOUBLE;
        st->phase = ECCL_PHASE_REC_DOUBLE;
        st->tx_n = st->rx_n = n;
    } else if (s < L) {
        st->kind = ECCL_REC_HALVE;
        st->phase = ECCL_PHASE_REC_HALVE;
        level_range(n, rank, k, &lo, &hi);
        size_t mid = lo + (hi - lo) / 2;
        /* Keep one half (rx: the partner's partial of it), send the other. */
        st->rx_at = st->lower ? lo : mid;
        st->rx_n = st->lower ? mid - lo : hi - mid;
        st->tx_at = st->lower ? mid : lo;
        st->tx_n = st->lower ? hi - mid : mid - lo;
    } else {
        st->kind = ECCL_REC_GATHER;
        st->phase = ECCL_PHASE_REC_GATHER;
        level_range(n, rank, k + 1, &lo, &hi);
        st->tx_at = lo;
        st->tx_n = hi - lo;
        level_range(n, st->peer, k + 1, &lo, &hi);
        st->rx_at = lo;
        st->rx_n = hi - lo;
    }
}

/* The step number frames carry: the same on both ends of a pair, so
 * numbered as a folder numbers its steps (FOLD 0, the core's steps from 1,
 * RESULT last), whatever part of the list this rank runs. */
static uint16_t wire_step(const eccl_rec_allreduce *a, uint32_t s)
{
    uint32_t core = a->halving ? 2 * a->levels : a->levels;
    if (a->extra) return (uint16_t)(s ? core + 1 : 0);
    return (uint16_t)(a->folder ? s : s + 1);
}

/* ---- scratch ---------------------------------------------------------------------
 * Doubling: level k's received partial at k*B (the higher rank of the pair
 * combines into it: it becomes our partial), the lower rank's combined
 * partial of level k < L-1 at (L+k)*B (level L-1 combines into recvbuf),
 * then (a folder) the extra's input, then (a folder, or in place) our
 * input, copied: B = the buffer's bytes. Halving: level k's received
 * partial (the half we keep) after those of the levels before, then (a
 * folder) the extra's input. An extra rank needs none. */

static size_t halve_rx_at(const eccl_coll_call *c, uint32_t k)
{
    size_t at = 0, lo, hi, es = eccl_dtype_size(c->dtype);
    for (uint32_t j = 0; j < k; j++) {
        level_range(c->count, c->rank, j + 1, &lo, &hi);
        at += (hi - lo) * es;
    }
    return at;
}

size_t eccl_rec_allreduce_scratch_bytes(const eccl_coll_call *c, int halving)
{
    uint32_t p = eccl_floor_pow2(c->nranks), L = eccl_ceil_log2(p);
    size_t bytes = c->count * eccl_dtype_size(c->dtype);
    int folder = c->rank < c->nranks - p, in_place = c->sendbuf == c->recvbuf;
    if (c->rank >= p) return 0;
    if (halving) return halve_rx_at(c, L) + (folder ? bytes : 0);
    return (2 * (size_t)L - 1 + (size_t)folder + (size_t)(folder || in_place)) * bytes;
}

static uint8_t *fold_region(const eccl_rec_allreduce *a)
{
    return a->scratch + (a->halving ? halve_rx_at(&a->call, a->levels) : (2 * (size_t)a->levels - 1) * a->bytes);
}

/* Doubling: our input (step 0's partial). */
static const uint8_t *dbl_input(const eccl_rec_allreduce *a)
{
    if (!a->folder && a->call.sendbuf != a->call.recvbuf) return a->call.sendbuf;
    return a->scratch + (2 * (size_t)a->levels - 1 + (size_t)a->folder) * a->bytes;
}

static uint8_t *dbl_rx(const eccl_rec_allreduce *a, uint32_t k) { return a->scratch + (size_t)k * a->bytes; }

/* Doubling: our partial before level k (what level k sends): where level
 * k-1 combined it (the higher rank into what it received). */
static const uint8_t *dbl_partial(const eccl_rec_allreduce *a, uint32_t k)
{
    if (k == 0) return dbl_input(a);
    if (a->call.rank >> (k - 1) & 1u) return dbl_rx(a, k - 1);
    return a->scratch + ((size_t)a->levels + k - 1) * a->bytes;
}

/* Halving: where our partial of level k's range is. */
static const uint8_t *halve_src(const eccl_rec_allreduce *a, uint32_t k)
{
    return k == 0 && !a->folder ? a->call.sendbuf : a->call.recvbuf;
}

/* ---- the backup: recvbuf's two level-1 halves ----------------------------------- */

static void half_bytes(const eccl_rec_allreduce *a, int h, size_t *lo, size_t *hi)
{
    size_t mid = a->call.count / 2 * a->esize;
    *lo = h ? mid : 0;
    *hi = h ? a->bytes : mid;
}

/* Backs up every half of recvbuf that bytes [off, off + len) touch. */
static void save(eccl_rec_allreduce *a, size_t off, size_t len)
{
    for (int h = 0; h < 2 && len; h++) {
        size_t lo, hi;
        half_bytes(a, h, &lo, &hi);
        if (a->saved[h] || lo >= hi || off >= hi || off + len <= lo) continue;
        eccl_coll_save(&a->call, a->backup, lo, hi - lo);
        a->saved[h] = 1;
    }
}

/* ---- init ------------------------------------------------------------------------ */

static const eccl_peer_steps_ops rec_steps; /* the list, for the engine: below */

void eccl_rec_allreduce_init_ex(eccl_rec_allreduce *a, const eccl_coll_call *call, uint8_t *scratch,
                                uint8_t *backup, int halving, size_t slice_bytes)
{
    memset(a, 0, sizeof *a);
    a->call = *call;
    a->scratch = scratch;
    a->backup = backup;
    a->esize = eccl_dtype_size(call->dtype);
    a->bytes = call->count * a->esize;
    a->halving = halving;
    a->p = eccl_floor_pow2(call->nranks);
    a->levels = eccl_ceil_log2(a->p);
    a->extra = call->rank >= a->p;
    a->folder = call->rank < call->nranks - a->p;
    uint32_t nsteps = a->extra ? 2 : (halving ? 2 * a->levels : a->levels) + (a->folder ? 2 : 0);
    eccl_peer_steps_init(&a->steps, &rec_steps, call, slice_bytes, nsteps, a->counters);
    /* Doubling in place: the first step sends our input while the last
     * writes recvbuf, so it goes from a copy (a folder builds its input
     * there as the extra's slices come). */
    if (!halving && !a->extra && !a->folder && call->sendbuf == call->recvbuf)
        eccl_coll_copy(&a->call, (uint8_t *)dbl_input(a), call->sendbuf, a->bytes);
}

void eccl_rec_allreduce_init(eccl_rec_allreduce *a, const eccl_coll_call *call, uint8_t *scratch,
                             uint8_t *backup)
{
    eccl_rec_allreduce_init_ex(a, call, scratch, backup, eccl_rec_allreduce_halving(call),
                               ECCL_RING_PASS_SLICE_BYTES);
}

/* ---- the list, for the engine (coll/peer_steps.h) ----------------------------------- */

static void rec_step(const void *op, uint32_t s, eccl_peer_step *ps)
{
    const eccl_rec_allreduce *a = op;
    eccl_rec_step st;
    eccl_rec_allreduce_step(a, s, &st);
    ps->phase = st.phase;
    ps->wire_step = wire_step(a, s);
    ps->tx = (eccl_peer_range){.on = st.tx, .peer = st.peer, .at = st.tx_at * a->esize, .len = {st.tx_n * a->esize, 0}};
    ps->rx = (eccl_peer_range){.on = st.rx, .peer = st.peer, .at = st.rx_at * a->esize, .len = {st.rx_n * a->esize, 0}};
}

/* Where a slice of step s leaves from. */
static const uint8_t *rec_tx_src(const void *op, uint32_t s, const eccl_peer_slice *sl)
{
    const eccl_rec_allreduce *a = op;
    eccl_rec_step st;
    eccl_rec_allreduce_step(a, s, &st);
    switch (st.kind) {
    case ECCL_REC_FOLD_SEND: return a->call.sendbuf + sl->off;
    case ECCL_REC_DOUBLE: return dbl_partial(a, st.level) + sl->off;
    case ECCL_REC_HALVE: return halve_src(a, st.level) + sl->off;
    default: return a->call.recvbuf + sl->off; /* GATHER, RESULT */
    }
}

/* Where a received slice of step s lands: each step's partial its own
 * scratch region (a partner may run ahead), the final values recvbuf. */
static uint8_t *rec_rx_dst(void *op, uint32_t s, const eccl_peer_slice *sl)
{
    eccl_rec_allreduce *a = op;
    eccl_rec_step st;
    eccl_rec_allreduce_step(a, s, &st);
    switch (st.kind) {
    case ECCL_REC_FOLD_RECV: return fold_region(a) + sl->off;
    case ECCL_REC_DOUBLE: return dbl_rx(a, st.level) + sl->off;
    case ECCL_REC_HALVE: return a->scratch + halve_rx_at(&a->call, st.level) + (sl->off - st.rx_at * a->esize);
    default: /* GATHER, RESULT: straight into recvbuf, backed up first */
        save(a, sl->off, sl->len);
        return a->call.recvbuf + sl->off;
    }
}

/* Received slice sl of step s (the current one) is in place: combine it. */
static void rec_combine(void *op, uint32_t s, const eccl_peer_slice *sl)
{
    eccl_rec_allreduce *a = op;
    eccl_rec_step st;
    eccl_rec_allreduce_step(a, s, &st);
    size_t off = sl->off, len = sl->len;
    uint8_t *out = a->call.recvbuf + off;
    const uint8_t *send = a->call.sendbuf + off;
    switch (st.kind) {
    case ECCL_REC_FOLD_RECV: {
        /* Ours op the extra's. */
        const uint8_t *theirs = fold_region(a) + off;
        if (!a->halving) {
            uint8_t *in = (uint8_t *)dbl_input(a) + off;
            eccl_coll_copy(&a->call, in, send, len);
            eccl_coll_reduce(&a->call, in, theirs, len);
        } else {
            save(a, off, len);
            if (out != send) eccl_coll_copy(&a->call, out, send, len);
            eccl_coll_reduce(&a->call, out, theirs, len);
        }
        break;
    }
    case ECCL_REC_DOUBLE: {
        /* Lower op higher, into a fresh place: what we sent may still be
         * on the wire. The last level writes recvbuf (nothing is sent from
         * it), the others the higher rank's received partial or the lower
         * rank's own region. */
        uint8_t *rx = dbl_rx(a, st.level) + off;
        const uint8_t *mine = dbl_partial(a, st.level) + off;
        if (st.level == a->levels - 1) {
            save(a, off, len);
            eccl_coll_copy(&a->call, out, st.lower ? mine : rx, len);
            eccl_coll_reduce(&a->call, out, st.lower ? rx : mine, len);
        } else if (st.lower) {
            uint8_t *acc = a->scratch + ((size_t)a->levels + st.level) * a->bytes + off;
            eccl_coll_copy(&a->call, acc, mine, len);
            eccl_coll_reduce(&a->call, acc, rx, len);
        } else {
            eccl_coll_reduce(&a->call, rx, mine, len);
        }
        break;
    }
    case ECCL_REC_HALVE: {
        uint8_t *rx = a->scratch + halve_rx_at(&a->call, st.level) + (off - st.rx_at * a->esize);
        const uint8_t *mine = halve_src(a, st.level) + off;
        if (st.lower) {
            save(a, off, len);
            if (out != mine) eccl_coll_copy(&a->call, out, mine, len);
            eccl_coll_reduce(&a->call, out, rx, len);
        } else {
            eccl_coll_reduce(&a->call, rx, mine, len);
            save(a, off, len);
            eccl_coll_copy(&a->call, out, rx, len);
        }
        break;
    }
    default: break; /* GATHER, RESULT: landed in recvbuf as they are */
    }
}

/* Step s is complete: what its end finishes (1: the output is final). */
static int rec_step_done(void *op, uint32_t s)
{
    eccl_rec_allreduce *a = op;
    eccl_rec_step st;
    eccl_rec_allreduce_step(a, s, &st);
    const eccl_dev_ops *dev = a->call.env->dev;
    void *ctx = a->call.env->dev_ctx;
    int avg = a->call.op == ECCL_AVG;
    uint32_t L = a->levels;
    if (st.kind == ECCL_REC_DOUBLE && st.level == L - 1) {
        if (avg && a->call.count) dev->scale_div(ctx, a->call.recvbuf, a->call.count, a->call.dtype, a->call.nranks);
        return 1;
    }
    if (st.kind == ECCL_REC_HALVE && st.level == L - 1 && avg) {
        size_t lo, hi;
        level_range(a->call.count, a->call.rank, L, &lo, &hi);
        save(a, lo * a->esize, (hi - lo) * a->esize);
        if (hi > lo)
            dev->scale_div(ctx, a->call.recvbuf + lo * a->esize, hi - lo, a->call.dtype, a->call.nranks);
        return 0;
    }
    return (st.kind == ECCL_REC_GATHER && st.level == 0) || st.kind == ECCL_REC_RESULT_RECV;
}

static const eccl_peer_steps_ops rec_steps = {
    .done_phase = ECCL_PHASE_REC_DONE,
    .step = rec_step,
    .tx_src = rec_tx_src,
    .rx_dst = rec_rx_dst,
    .combine = rec_combine,
    .step_done = rec_step_done,
};

/* ---- the algorithm face ------------------------------------------------------------ */

static void rec_restore(void *op)
{
    eccl_rec_allreduce *a = op;
    for (int h = 0; h < 2; h++) {
        size_t lo, hi;
        half_bytes(a, h, &lo, &hi);
        if (a->saved[h]) eccl_coll_put_back(&a->call, a->backup, lo, hi - lo);
    }
}

const eccl_coll_algo eccl_rec_allreduce_algo = ECCL_PEER_STEPS_ALGO(ECCL_ALGO_RECURSIVE, rec_restore);
