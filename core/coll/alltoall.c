#include "coll/alltoall.h"

#include <string.h>

#include "coll/ring_allreduce.h" /* ECCL_RING_MAX_QUEUED */

/* A data frame's step; the done token's. */
enum { A2A_DATA = 0, A2A_DONE = 1 };

static size_t es_of(const eccl_coll_call *c) { return eccl_dtype_size(c->dtype); }

/* Block j's bytes and where it starts, in the send (recv 0) or receive
 * (recv 1) layout. */
static size_t blk_bytes(const eccl_coll_call *c, uint32_t j, int recv)
{
    const size_t *counts = recv ? c->vcounts : c->svcounts;
    return (counts ? counts[j] : c->count) * es_of(c);
}

static size_t blk_at(const eccl_coll_call *c, uint32_t j, int recv)
{
    const size_t *displs = recv ? c->vdispls : c->svdispls;
    return displs ? displs[j] * es_of(c) : (size_t)j * c->count * es_of(c);
}

static size_t extent(const eccl_coll_call *c, int recv)
{
    size_t end = 0;
    for (uint32_t j = 0; j < c->nranks; j++) {
        size_t e = blk_at(c, j, recv) + blk_bytes(c, j, recv);
        if (blk_bytes(c, j, recv) && e > end) end = e;
    }
    return end;
}

size_t eccl_a2a_send_extent(const eccl_coll_call *c) { return extent(c, 0); }
size_t eccl_a2a_recv_extent(const eccl_coll_call *c) { return extent(c, 1); }

int eccl_a2a_overlaps(const eccl_coll_call *c) { return eccl_coll_overlaps(c, extent(c, 0), extent(c, 1)); }

/* Before any frame can land: the backup, the send copy, our own block. */
static void start(eccl_a2a *a)
{
    const eccl_coll_call *c = &a->call;
    uint32_t me = c->rank;
    for (uint32_t j = 0; j < c->nranks; j++) eccl_coll_save(&a->call, a->backup, blk_at(c, j, 1), blk_bytes(c, j, 1));
    if (a->copy) eccl_coll_copy(&a->call, a->copy, c->sendbuf, extent(c, 0));
    /* Our own block: a mismatch with ourselves is the caller's layout. */
    size_t own = blk_bytes(c, me, 0) < blk_bytes(c, me, 1) ? blk_bytes(c, me, 0) : blk_bytes(c, me, 1);
    eccl_coll_copy(&a->call, c->recvbuf + blk_at(c, me, 1), a->src + blk_at(c, me, 0), own);
    a->started = 1;
    for (uint32_t j = 0; j < c->nranks; j++)
        if (j != me && blk_bytes(c, j, 1) == 0) a->n_full++;
}

void eccl_a2a_init(eccl_a2a *a, const eccl_coll_call *call, eccl_a2a_peer *peer,
                        uint8_t *backup, uint8_t *copy_buf)
{
    memset(a, 0, sizeof *a);
    a->call = *call;
    a->esize = es_of(call);
    a->peer = peer;
    a->backup = backup;
    a->copy = copy_buf;
    a->src = copy_buf ? copy_buf : call->sendbuf;
    start(a); /* early frames replay before the first pump */
}

static int have_full(const eccl_a2a *a) { return a->started && a->n_full == a->call.nranks - 1; }

static eccl_result a2a_pump(void *op, const eccl_coll_links *links)
{
    eccl_a2a *a = op;
    const eccl_coll_call *c = &a->call;
    uint32_t n = c->nranks;
    int full = have_full(a);
    for (uint32_t k = 1; k < n; k++) {
        uint32_t j = (c->rank + k) % n;
        eccl_a2a_peer *p = &a->peer[j];
        size_t bytes = blk_bytes(c, j, 0);
        if (p->sent == bytes && (p->done_sent || !full)) continue;
        eccl_chan *link = links->peer(links->ctx, j);
        if (!link) continue; /* opening: its frames wait */
        while (p->sent < bytes && link->queued_bytes < ECCL_RING_MAX_QUEUED) {
            size_t len = bytes - p->sent < ECCL_A2A_SLICE_BYTES ? bytes - p->sent : ECCL_A2A_SLICE_BYTES;
            eccl_wire_data w = {.tag = c->tag, .epoch = c->epoch, .phase = ECCL_PHASE_A2A,
                                .step = A2A_DATA, .offset = p->sent, .len = (uint32_t)len};
            eccl_result rc = eccl_chan_send_data(link, &w, a->src + blk_at(c, j, 0) + p->sent, &a->inflight);
            if (rc != ECCL_OK) return rc;
            p->sent += len;
            a->tx_bytes += len;
        }
        if (p->sent == bytes && full && !p->done_sent) {
            eccl_wire_data t = {.tag = c->tag, .epoch = c->epoch, .phase = ECCL_PHASE_A2A, .step = A2A_DONE};
            eccl_result rc = eccl_chan_send_data(link, &t, NULL, NULL);
            if (rc != ECCL_OK) return rc;
            p->done_sent = 1;
        }
    }
    return ECCL_OK;
}

static eccl_result a2a_recv(void *op, int role, const eccl_wire_data *w, void **dst)
{
    eccl_a2a *a = op;
    const eccl_coll_call *c = &a->call;
    if (!ECCL_ROLE_IS_PEER(role)) return ECCL_ERR_PROTOCOL;
    uint32_t j = ECCL_ROLE_PEER_RANK(role);
    if (j >= c->nranks || j == c->rank || w->phase != ECCL_PHASE_A2A || w->ring != 0 || w->flags != 0)
        return ECCL_ERR_PROTOCOL;
    eccl_a2a_peer *p = &a->peer[j];
    size_t bytes = blk_bytes(c, j, 1);
    if (w->step == A2A_DONE) {
        /* Only after its whole block: a shorter block is a layout mismatch. */
        if (w->len != 0 || p->done_recv || p->got != bytes) return ECCL_ERR_PROTOCOL;
        *dst = NULL;
        return ECCL_OK;
    }
    if (w->step != A2A_DATA || w->offset != p->got || w->len == 0 || w->len > bytes - p->got ||
        w->len > ECCL_A2A_SLICE_BYTES)
        return ECCL_ERR_PROTOCOL;
    *dst = c->recvbuf + blk_at(c, j, 1) + p->got; /* backed up at the start */
    return ECCL_OK;
}

static eccl_result a2a_recv_done(void *op, int role, const eccl_wire_data *w)
{
    eccl_a2a *a = op;
    eccl_a2a_peer *p = &a->peer[ECCL_ROLE_PEER_RANK(role)];
    if (w->step == A2A_DONE) {
        p->done_recv = 1;
        a->n_done++;
        return ECCL_OK;
    }
    p->got += w->len;
    a->rx_bytes += w->len;
    if (p->got == blk_bytes(&a->call, ECCL_ROLE_PEER_RANK(role), 1)) a->n_full++;
    return ECCL_OK;
}

static int a2a_complete(void *op)
{
    const eccl_a2a *a = op;
    uint32_t n = a->call.nranks;
    if (!have_full(a) || a->n_done != n - 1 || a->inflight) return 0;
    for (uint32_t j = 0; j < n; j++)
        if (j != a->call.rank && !a->peer[j].done_sent) return 0;
    return 1;
}

static int a2a_expects(const void *op, int role)
{
    const eccl_a2a *a = op;
    if (!ECCL_ROLE_IS_PEER(role)) return 0;
    uint32_t j = ECCL_ROLE_PEER_RANK(role);
    return j < a->call.nranks && j != a->call.rank && !a->peer[j].done_recv;
}

static int a2a_have_full_algo(const void *op) { return have_full(op); }

static void a2a_restore(void *op)
{
    eccl_a2a *a = op;
    const eccl_coll_call *c = &a->call;
    if (!a->started) return;
    for (uint32_t j = 0; j < c->nranks; j++) eccl_coll_put_back(&a->call, a->backup, blk_at(c, j, 1), blk_bytes(c, j, 1));
}

static void a2a_bytes(const void *op, uint64_t *tx, uint64_t *rx)
{
    const eccl_a2a *a = op;
    *tx = a->tx_bytes;
    *rx = a->rx_bytes;
}

const eccl_coll_algo eccl_a2a_algo = {
    .id = ECCL_ALGO_PAIRWISE,
    .roles = ECCL_ROLES_PEERS,
    .pump_needs = 0,
    .pump = a2a_pump,
    .recv = a2a_recv,
    .recv_done = a2a_recv_done,
    .complete = a2a_complete,
    .expects = a2a_expects,
    .have_full = a2a_have_full_algo,
    .restore = a2a_restore,
    .bytes = a2a_bytes,
};
