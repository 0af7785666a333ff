#include "coll/rec_allgather.h"

#include <string.h>

#include "coll/ring_pass.h" /* ECCL_RING_PASS_SLICE_BYTES */

/* ---- geometry ---------------------------------------------------------------- */

enum ag_kind { AG_FOLD_SEND, AG_FOLD_RECV, AG_DOUBLE, AG_RESULT_SEND, AG_RESULT_RECV };

/* Up to two pieces of recvbuf, as byte offsets and lengths. */
typedef struct ag_pieces {
    size_t at[2], len[2];
} ag_pieces;

/* Step s of this rank's list: with whom, and the pieces it sends and
 * receives (each in recvbuf, where both ends keep them). */
typedef struct ag_step {
    uint8_t kind; /* enum ag_kind */
    uint32_t peer;
    ag_pieces tx, rx;
} ag_step;

/* Core rank v's group at level k: run A (its 2^k blocks), run B (their
 * extras' blocks). */
static ag_pieces group(const eccl_rec_ag *a, uint32_t v, uint32_t k)
{
    uint32_t n = 1u << k, g = v & ~(n - 1);
    ag_pieces r = {{(size_t)g * a->block, 0}, {(size_t)n * a->block, 0}};
    if (g < a->rem) {
        uint32_t end = g + n < a->rem ? g + n : a->rem;
        r.at[1] = (size_t)(a->p + g) * a->block;
        r.len[1] = (size_t)(end - g) * a->block;
    }
    return r;
}

static ag_pieces one_block(const eccl_rec_ag *a, uint32_t b)
{
    return (ag_pieces){{(size_t)b * a->block, 0}, {a->block, 0}};
}

/* Every block but extra x's. */
static ag_pieces all_but(const eccl_rec_ag *a, uint32_t x)
{
    size_t end = (size_t)a->call.nranks * a->block;
    return (ag_pieces){{0, (size_t)(x + 1) * a->block}, {(size_t)x * a->block, end - (size_t)(x + 1) * a->block}};
}

static void step_of(const eccl_rec_ag *a, uint32_t s, ag_step *st)
{
    uint32_t rank = a->call.rank;
    memset(st, 0, sizeof *st);
    if (a->extra) {
        st->peer = rank - a->p;
        st->kind = s == 0 ? AG_FOLD_SEND : AG_RESULT_RECV;
        if (s == 0) st->tx = one_block(a, rank);
        else st->rx = all_but(a, rank);
        return;
    }
    if (a->folder) {
        st->peer = rank + a->p;
        if (s == 0) {
            st->kind = AG_FOLD_RECV;
            st->rx = one_block(a, rank + a->p);
            return;
        }
        if (s == a->steps.nsteps - 1) {
            st->kind = AG_RESULT_SEND;
            st->tx = all_but(a, rank + a->p);
            return;
        }
        s -= 1;
    }
    st->kind = AG_DOUBLE;
    st->peer = rank ^ (1u << s);
    st->tx = group(a, rank, s);
    st->rx = group(a, st->peer, s);
}

/* The step number frames carry: the same on both ends of a pair, so
 * numbered as a folder numbers its steps (FOLD 0, DOUBLE k at k + 1,
 * RESULT L + 1). */
static uint16_t wire_step(const eccl_rec_ag *a, uint32_t s)
{
    if (a->extra) return (uint16_t)(s ? a->levels + 1 : 0);
    return (uint16_t)(a->folder ? s : s + 1);
}

static uint8_t phase_of(uint8_t kind)
{
    switch (kind) {
    case AG_FOLD_SEND: case AG_FOLD_RECV: return ECCL_PHASE_RECAG_FOLD;
    case AG_DOUBLE: return ECCL_PHASE_RECAG_DOUBLE;
    default: return ECCL_PHASE_RECAG_RESULT;
    }
}

static int sends(uint8_t kind) { return kind == AG_FOLD_SEND || kind == AG_DOUBLE || kind == AG_RESULT_SEND; }
static int receives(uint8_t kind) { return kind == AG_FOLD_RECV || kind == AG_DOUBLE || kind == AG_RESULT_RECV; }

/* ---- init ------------------------------------------------------------------------ */

static const eccl_peer_steps_ops ag_steps; /* the list, for the engine: below */

void eccl_rec_ag_init_ex(eccl_rec_ag *a, const eccl_coll_call *call, uint8_t *backup, size_t slice_bytes)
{
    memset(a, 0, sizeof *a);
    a->call = *call;
    a->backup = backup;
    a->block = call->count * eccl_dtype_size(call->dtype);
    a->p = eccl_floor_pow2(call->nranks);
    a->levels = eccl_ceil_log2(a->p);
    a->rem = call->nranks - a->p;
    a->extra = call->rank >= a->p;
    a->folder = call->rank < a->rem;
    uint32_t nsteps = a->extra ? 2 : a->levels + (a->folder ? 2 : 0);
    eccl_peer_steps_init(&a->steps, &ag_steps, call, slice_bytes, nsteps, a->counters);
    /* Our own block goes into recvbuf before any frame leaves: every send
     * then reads recvbuf, and nothing is written there after it is sent. */
    uint8_t *own = call->recvbuf + (size_t)call->rank * a->block;
    if (own != call->sendbuf && a->block) {
        eccl_coll_save(&a->call, a->backup, (size_t)call->rank * a->block, a->block);
        a->own_saved = 1;
        eccl_coll_copy(&a->call, own, call->sendbuf, a->block);
    }
}

void eccl_rec_ag_init(eccl_rec_ag *a, const eccl_coll_call *call, uint8_t *backup)
{
    eccl_rec_ag_init_ex(a, call, backup, ECCL_RING_PASS_SLICE_BYTES);
}

/* ---- the list, for the engine (coll/peer_steps.h) ----------------------------------- */

static void ag_step_for(const void *op, uint32_t s, eccl_peer_step *ps)
{
    const eccl_rec_ag *a = op;
    ag_step st;
    step_of(a, s, &st);
    ps->phase = phase_of(st.kind);
    ps->wire_step = wire_step(a, s);
    ps->tx = (eccl_peer_range){.on = sends(st.kind), .peer = st.peer, .at = st.tx.at[0],
                               .len = {st.tx.len[0], st.tx.len[1]}};
    ps->rx = (eccl_peer_range){.on = receives(st.kind), .peer = st.peer, .at = st.rx.at[0],
                               .len = {st.rx.len[0], st.rx.len[1]}};
}

static const uint8_t *ag_tx_src(const void *op, uint32_t s, const eccl_peer_slice *sl)
{
    const eccl_rec_ag *a = op;
    ag_step st;
    step_of(a, s, &st);
    return a->call.recvbuf + st.tx.at[sl->piece] + sl->start;
}

/* A received slice of step s lands at its block's place in recvbuf, the
 * step's blocks backed up before the first of them. */
static uint8_t *ag_rx_dst(void *op, uint32_t s, const eccl_peer_slice *sl)
{
    eccl_rec_ag *a = op;
    ag_step st;
    step_of(a, s, &st);
    if (!(a->saved >> s & 1u)) {
        for (int i = 0; i < 2; i++) eccl_coll_save(&a->call, a->backup, st.rx.at[i], st.rx.len[i]);
        a->saved |= (uint64_t)1 << s;
    }
    return a->call.recvbuf + st.rx.at[sl->piece] + sl->start;
}

/* Step s is complete: 1 once the output is final (a core rank's last
 * DOUBLE, an extra's RESULT). */
static int ag_step_done(void *op, uint32_t s)
{
    const eccl_rec_ag *a = op;
    ag_step st;
    step_of(a, s, &st);
    if (st.kind == AG_DOUBLE) return s == (a->folder ? a->levels : a->levels - 1);
    return st.kind == AG_RESULT_RECV;
}

static const eccl_peer_steps_ops ag_steps = {
    .done_phase = ECCL_PHASE_RECAG_DONE,
    .step = ag_step_for,
    .tx_src = ag_tx_src,
    .rx_dst = ag_rx_dst,
    .step_done = ag_step_done,
};

/* ---- the algorithm face ------------------------------------------------------------ */

static void ag_restore(void *op)
{
    eccl_rec_ag *a = op;
    for (uint32_t s = 0; s < a->steps.nsteps; s++) {
        if (!(a->saved >> s & 1u)) continue;
        ag_step st;
        step_of(a, s, &st);
        for (int i = 0; i < 2; i++) eccl_coll_put_back(&a->call, a->backup, st.rx.at[i], st.rx.len[i]);
    }
    if (a->own_saved) eccl_coll_put_back(&a->call, a->backup, (size_t)a->call.rank * a->block, a->block);
}

const eccl_coll_algo eccl_rec_ag_algo = ECCL_PEER_STEPS_ALGO(ECCL_ALGO_RECURSIVE, ag_restore);
