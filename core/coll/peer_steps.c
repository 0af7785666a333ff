#include "coll/peer_steps.h"

#include <string.h>

#include "coll/ring_allreduce.h" /* ECCL_RING_MAX_QUEUED */

void eccl_peer_steps_init(eccl_peer_steps *e, const eccl_peer_steps_ops *ops, const eccl_coll_call *call,
                          size_t slice_bytes, uint32_t nsteps, uint32_t *counters)
{
    size_t es = eccl_dtype_size(call->dtype);
    memset(e, 0, sizeof *e);
    e->ops = ops;
    e->tag = call->tag;
    e->epoch = call->epoch;
    e->slice = slice_bytes / es * es;
    if (e->slice == 0) e->slice = es;
    e->nsteps = nsteps;
    memset(counters, 0, (size_t)3 * nsteps * sizeof *counters);
    e->tx_i = counters;
    e->rx_got = counters + nsteps;
    e->rx_done = counters + 2 * (size_t)nsteps;
    eccl_dissem_init(&e->bar, call->rank, call->nranks);
}

/* ---- slices ------------------------------------------------------------------ */

static uint32_t piece_slices(const eccl_peer_steps *e, size_t len)
{
    return (uint32_t)((len + e->slice - 1) / e->slice);
}

uint32_t eccl_peer_slices(const eccl_peer_steps *e, const eccl_peer_range *r)
{
    if (!r->on) return 0;
    uint32_t n = piece_slices(e, r->len[0]) + piece_slices(e, r->len[1]);
    return n ? n : 1; /* an empty range still sends one frame */
}

void eccl_peer_slice_of(const eccl_peer_steps *e, const eccl_peer_range *r, uint32_t j, eccl_peer_slice *sl)
{
    uint32_t n0 = piece_slices(e, r->len[0]);
    sl->piece = j >= n0;
    sl->start = (size_t)(j - (sl->piece ? n0 : 0)) * e->slice;
    size_t plen = r->len[sl->piece];
    sl->len = sl->start >= plen ? 0 : plen - sl->start < e->slice ? plen - sl->start : e->slice;
    sl->off = r->at + (sl->piece ? r->len[0] : 0) + sl->start;
}

/* ---- progress ------------------------------------------------------------------ */

/* Combines what landed for the current step and moves past every step
 * that is complete (all its slices queued and combined). */
static void advance(void *op)
{
    eccl_peer_steps *e = op;
    const eccl_peer_steps_ops *ops = e->ops;
    if (ops->settle && !ops->settle(op)) return;
    while (e->cur < e->nsteps) {
        uint32_t s = e->cur;
        eccl_peer_step st;
        ops->step(op, s, &st);
        while (e->rx_done[s] < e->rx_got[s]) {
            eccl_peer_slice sl;
            eccl_peer_slice_of(e, &st.rx, e->rx_done[s]++, &sl);
            if (ops->combine) ops->combine(op, s, &sl);
        }
        if (e->rx_done[s] < eccl_peer_slices(e, &st.rx) || e->tx_i[s] < eccl_peer_slices(e, &st.tx)) return;
        if (ops->step_done ? ops->step_done(op, s) : s == e->nsteps - 1) e->have_full = 1;
        e->cur++;
    }
}

/* Asks for the link of every rank we still send to or hear from: the
 * lower rank of a pair opens it, even one that only listens. */
static void touch_links(const eccl_peer_steps *e, const void *op, const eccl_coll_links *links)
{
    for (uint32_t s = e->cur; s < e->nsteps; s++) {
        eccl_peer_step st;
        e->ops->step(op, s, &st);
        int tx = e->tx_i[s] < eccl_peer_slices(e, &st.tx), rx = e->rx_got[s] < eccl_peer_slices(e, &st.rx);
        if (tx) (void)eccl_coll_peer(links, st.tx.peer);
        if (rx && !(tx && st.rx.peer == st.tx.peer)) (void)eccl_coll_peer(links, st.rx.peer);
    }
    eccl_dissem_touch(&e->bar, links);
}

/* Queues the slices of step s that may leave, while its link takes them. */
static eccl_result send_step(eccl_peer_steps *e, void *op, const eccl_coll_links *links, uint32_t s)
{
    eccl_peer_step st;
    e->ops->step(op, s, &st);
    uint32_t want = e->ops->tx_ready ? e->ops->tx_ready(op, s, &st) : eccl_peer_slices(e, &st.tx);
    eccl_chan *ch = e->tx_i[s] < want ? eccl_coll_peer(links, st.tx.peer) : NULL;
    while (ch && e->tx_i[s] < want && ch->queued_bytes < ECCL_RING_MAX_QUEUED) {
        eccl_peer_slice sl;
        eccl_peer_slice_of(e, &st.tx, e->tx_i[s], &sl);
        eccl_wire_data w = {.tag = e->tag, .epoch = e->epoch, .phase = st.phase, .step = st.wire_step,
                            .offset = sl.off, .len = (uint32_t)sl.len};
        eccl_result rc = eccl_chan_send_data(ch, &w, e->ops->tx_src(op, s, &sl), &e->inflight);
        if (rc != ECCL_OK) return rc;
        e->tx_bytes += sl.len;
        e->tx_i[s]++;
    }
    return ECCL_OK;
}

eccl_result eccl_peer_steps_pump(void *op, const eccl_coll_links *links)
{
    eccl_peer_steps *e = op;
    touch_links(e, op, links);
    advance(op);
    for (;;) {
        uint32_t before = e->cur, end = e->ops->tx_ready ? e->nsteps : e->cur + 1;
        for (uint32_t s = e->cur; s < end && s < e->nsteps; s++) {
            eccl_result rc = send_step(e, op, links, s);
            if (rc != ECCL_OK) return rc;
        }
        advance(op);
        if (e->cur == before) break; /* waiting for a link, the queue or a partner */
    }
    if (!e->have_full || e->cur < e->nsteps) return ECCL_OK;
    return eccl_dissem_pump(&e->bar, links, e->tag, e->epoch, e->ops->done_phase, &e->inflight);
}

/* The first step from `cur` on whose data `rank` still owes us, or
 * e->nsteps. */
static uint32_t owed_step(const eccl_peer_steps *e, const void *op, uint32_t rank, eccl_peer_step *st)
{
    for (uint32_t s = e->cur; s < e->nsteps; s++) {
        e->ops->step(op, s, st);
        if (st->rx.peer == rank && e->rx_got[s] < eccl_peer_slices(e, &st->rx)) return s;
    }
    return e->nsteps;
}

eccl_result eccl_peer_steps_recv(void *op, int role, const eccl_wire_data *d, void **dst)
{
    eccl_peer_steps *e = op;
    if (!ECCL_ROLE_IS_PEER(role)) return ECCL_ERR_PROTOCOL;
    uint32_t from = ECCL_ROLE_PEER_RANK(role);
    if (from >= e->bar.nranks || from == e->bar.rank || d->ring != 0 || d->flags != 0) return ECCL_ERR_PROTOCOL;
    *dst = NULL;
    eccl_peer_step st;
    uint32_t s = owed_step(e, op, from, &st);
    if (s == e->nsteps) return eccl_dissem_check(&e->bar, from, e->ops->done_phase, d);
    eccl_peer_slice sl;
    eccl_peer_slice_of(e, &st.rx, e->rx_got[s], &sl);
    if (d->phase != st.phase || d->step != st.wire_step || d->offset != sl.off || d->len != sl.len)
        return ECCL_ERR_PROTOCOL;
    if (sl.len) *dst = e->ops->rx_dst(op, s, &sl);
    return ECCL_OK;
}

eccl_result eccl_peer_steps_recv_done(void *op, int role, const eccl_wire_data *d)
{
    eccl_peer_steps *e = op;
    if (d->phase == e->ops->done_phase) {
        eccl_dissem_got(&e->bar, d);
        return ECCL_OK;
    }
    eccl_peer_step st;
    uint32_t s = owed_step(e, op, ECCL_ROLE_PEER_RANK(role), &st); /* the step recv checked it against */
    if (s == e->nsteps) return ECCL_ERR_PROTOCOL;
    e->rx_bytes += d->len;
    e->rx_got[s]++;
    advance(op);
    return ECCL_OK;
}

/* Every step done and written; only the barrier's tokens may be left. */
int eccl_peer_steps_settled(const void *op)
{
    const eccl_peer_steps *e = op;
    return e->have_full && e->cur == e->nsteps && e->inflight == 0;
}

int eccl_peer_steps_complete(void *op)
{
    const eccl_peer_steps *e = op;
    return e->have_full && e->cur == e->nsteps && e->inflight == 0 && eccl_dissem_done(&e->bar);
}

int eccl_peer_steps_expects(const void *op, int role)
{
    const eccl_peer_steps *e = op;
    if (!ECCL_ROLE_IS_PEER(role)) return 0;
    uint32_t from = ECCL_ROLE_PEER_RANK(role);
    eccl_peer_step st;
    return owed_step(e, op, from, &st) < e->nsteps || eccl_dissem_owed(&e->bar, from) < e->bar.rounds;
}

int eccl_peer_steps_owes_token(const void *op, int role)
{
    const eccl_peer_steps *e = op;
    return ECCL_ROLE_IS_PEER(role) && eccl_dissem_owes(&e->bar, ECCL_ROLE_PEER_RANK(role));
}

int eccl_peer_steps_have_full(const void *op) { return ((const eccl_peer_steps *)op)->have_full; }

eccl_result eccl_peer_steps_error(const void *op)
{
    (void)op;
    return ECCL_OK;
}

void eccl_peer_steps_bytes(const void *op, uint64_t *tx, uint64_t *rx)
{
    const eccl_peer_steps *e = op;
    *tx = e->tx_bytes;
    *rx = e->rx_bytes;
}
