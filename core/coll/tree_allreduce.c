#include "coll/tree_allreduce.h"

#include <string.h>

uint32_t eccl_tree_heap_parent(uint32_t j) { return j == 0 ? UINT32_MAX : (j - 1) / 2; }

uint32_t eccl_tree_heap_child(uint32_t j, uint32_t n, int k)
{
    uint64_t child = 2ull * j + 1 + (uint32_t)k;
    return child < n ? (uint32_t)child : UINT32_MAX;
}

void eccl_tree_allreduce_init(eccl_tree_allreduce *t, const eccl_coll_call *call, int nchildren,
                              uint8_t *const partial[], uint8_t *backup)
{
    memset(t, 0, sizeof *t);
    t->call = *call;
    t->backup = backup;
    t->nchildren = nchildren;
    for (int i = 0; i < nchildren; i++) t->partial[i] = partial[i];
    t->bytes = call->count * eccl_dtype_size(call->dtype);
}

static int all_children(const eccl_tree_allreduce *t, const int flag[])
{
    for (int i = 0; i < t->nchildren; i++)
        if (!flag[i]) return 0;
    return 1;
}

static void save_backup(eccl_tree_allreduce *t)
{
    if (t->saved || !t->backup) return; /* none out of place: call.h */
    t->call.env->dev->copy(t->call.env->dev_ctx, t->backup, t->call.recvbuf, t->bytes);
    t->saved = 1;
}

/* Our subtree's partial: child 1's op ours op child 2's, in that order
 * everywhere (only the root's result is ever used, so any fixed order
 * gives every rank the same bits). Returns where it is. */
static const uint8_t *reduce_subtree(eccl_tree_allreduce *t)
{
    if (t->nchildren == 0) return t->call.sendbuf;
    const eccl_dev_ops *dev = t->call.env->dev;
    dev->reduce(t->call.env->dev_ctx, t->partial[0], t->call.sendbuf, t->call.count, t->call.dtype, t->call.op);
    for (int i = 1; i < t->nchildren; i++)
        dev->reduce(t->call.env->dev_ctx, t->partial[0], t->partial[i], t->call.count, t->call.dtype, t->call.op);
    return t->partial[0];
}

static eccl_result tree_send(eccl_tree_allreduce *t, eccl_chan *link, uint8_t phase,
                             const void *payload, size_t len)
{
    eccl_wire_data w = {.tag = t->call.tag, .epoch = t->call.epoch, .phase = phase, .len = (uint32_t)len};
    eccl_result rc = eccl_chan_send_data(link, &w, payload, payload ? &t->inflight : NULL);
    if (rc == ECCL_OK) t->tx_bytes += len;
    return rc;
}

eccl_result eccl_tree_allreduce_pump(eccl_tree_allreduce *t, eccl_chan *link[ECCL_TREE_ROLES])
{
    eccl_result rc;
    eccl_chan *parent = link[ECCL_TREE_PARENT];
    if (!t->up_sent && all_children(t, t->up_recvd)) {
        if (t->call.rank == 0) {
            const uint8_t *sum = reduce_subtree(t);
            save_backup(t);
            t->call.env->dev->copy(t->call.env->dev_ctx, t->call.recvbuf, sum, t->bytes);
            if (t->call.op == ECCL_AVG)
                t->call.env->dev->scale_div(t->call.env->dev_ctx, t->call.recvbuf, t->call.count, t->call.dtype,
                                       t->call.nranks);
            t->have_full = 1;
            t->up_sent = 1;
        } else if (parent) {
            if ((rc = tree_send(t, parent, ECCL_PHASE_TREE_UP, reduce_subtree(t), t->bytes)) != ECCL_OK)
                return rc;
            t->up_sent = 1;
        }
    }
    if (t->have_full && !t->down_sent) {
        for (int i = 0; i < t->nchildren; i++)
            if (!link[1 + i]) return ECCL_OK; /* the view change will settle it */
        for (int i = 0; i < t->nchildren; i++)
            if ((rc = tree_send(t, link[1 + i], ECCL_PHASE_TREE_DOWN, t->call.recvbuf, t->bytes)) != ECCL_OK)
                return rc;
        t->down_sent = 1;
    }
    if (t->have_full && !t->done_sent && all_children(t, t->done_recvd)) {
        if (t->call.rank == 0) {
            t->committed = 1; /* every rank below us holds the result */
            t->done_sent = 1;
        } else if (parent) {
            if ((rc = tree_send(t, parent, ECCL_PHASE_TREE_DONE, NULL, 0)) != ECCL_OK) return rc;
            t->done_sent = 1;
        }
    }
    if (t->committed && !t->commit_sent) {
        for (int i = 0; i < t->nchildren; i++)
            if (!link[1 + i]) return ECCL_OK;
        for (int i = 0; i < t->nchildren; i++)
            if ((rc = tree_send(t, link[1 + i], ECCL_PHASE_TREE_COMMIT, NULL, 0)) != ECCL_OK)
                return rc;
        t->commit_sent = 1;
    }
    return ECCL_OK;
}

eccl_result eccl_tree_allreduce_recv(eccl_tree_allreduce *t, enum eccl_tree_role role,
                                     const eccl_wire_data *d, void **dst)
{
    if (d->ring != 0 || d->step != 0 || d->offset != 0) return ECCL_ERR_PROTOCOL;
    *dst = NULL;
    if (role == ECCL_TREE_PARENT) {
        if (t->call.rank == 0) return ECCL_ERR_PROTOCOL;
        if (d->phase == ECCL_PHASE_TREE_DOWN && t->up_sent && !t->have_full &&
            d->len == t->bytes) {
            save_backup(t);
            *dst = t->call.recvbuf;
            return ECCL_OK;
        }
        if (d->phase == ECCL_PHASE_TREE_COMMIT && t->done_sent && !t->committed && d->len == 0)
            return ECCL_OK;
        return ECCL_ERR_PROTOCOL;
    }
    int i = (int)role - ECCL_TREE_CHILD0;
    if (i < 0 || i >= t->nchildren) return ECCL_ERR_PROTOCOL;
    if (d->phase == ECCL_PHASE_TREE_UP && !t->up_recvd[i] && d->len == t->bytes) {
        *dst = t->partial[i];
        return ECCL_OK;
    }
    if (d->phase == ECCL_PHASE_TREE_DONE && t->down_sent && !t->done_recvd[i] && d->len == 0)
        return ECCL_OK;
    return ECCL_ERR_PROTOCOL;
}

eccl_result eccl_tree_allreduce_recv_done(eccl_tree_allreduce *t, enum eccl_tree_role role,
                                          const eccl_wire_data *d)
{
    int i = role == ECCL_TREE_PARENT ? 0 : (int)role - ECCL_TREE_CHILD0;
    t->rx_bytes += d->len;
    switch (d->phase) {
    case ECCL_PHASE_TREE_UP: t->up_recvd[i] = 1; break;
    case ECCL_PHASE_TREE_DONE: t->done_recvd[i] = 1; break;
    case ECCL_PHASE_TREE_DOWN: t->have_full = 1; break;
    case ECCL_PHASE_TREE_COMMIT: t->committed = 1; break;
    default: return ECCL_ERR_PROTOCOL;
    }
    return ECCL_OK;
}

int eccl_tree_allreduce_complete(const eccl_tree_allreduce *t)
{
    return t->committed && t->commit_sent && t->inflight == 0;
}

int eccl_tree_allreduce_expects(const eccl_tree_allreduce *t, enum eccl_tree_role role)
{
    if (role == ECCL_TREE_PARENT) return t->call.rank != 0 && !t->committed;
    int i = (int)role - ECCL_TREE_CHILD0;
    return i >= 0 && i < t->nchildren && !t->done_recvd[i];
}

void eccl_tree_allreduce_restore(eccl_tree_allreduce *t)
{
    if (t->saved) t->call.env->dev->copy(t->call.env->dev_ctx, t->call.recvbuf, t->backup, t->bytes);
}

/* ---- behind coll/algo.h ------------------------------------------------------ */

static enum eccl_tree_role tree_role(int role) { return (enum eccl_tree_role)(role - ECCL_ROLE_PARENT); }

static eccl_result algo_pump(void *op, const eccl_coll_links *links)
{
    eccl_chan *tree[ECCL_TREE_ROLES];
    for (int i = 0; i < ECCL_TREE_ROLES; i++) tree[i] = links->role[ECCL_ROLE_PARENT + i];
    return eccl_tree_allreduce_pump(op, tree);
}

static eccl_result algo_recv(void *op, int role, const eccl_wire_data *d, void **dst)
{
    return role >= ECCL_ROLE_PARENT ? eccl_tree_allreduce_recv(op, tree_role(role), d, dst)
                                    : ECCL_ERR_PROTOCOL;
}

static eccl_result algo_recv_done(void *op, int role, const eccl_wire_data *d)
{
    return eccl_tree_allreduce_recv_done(op, tree_role(role), d);
}

static int algo_complete(void *op) { return eccl_tree_allreduce_complete(op); }

/* DONE up (but from the root), COMMIT down. */
static int algo_owes_token(const void *op, int role)
{
    const eccl_tree_allreduce *t = op;
    if (role == ECCL_ROLE_PARENT) return t->call.rank != 0 && !t->done_sent;
    return role > ECCL_ROLE_PARENT && role - ECCL_ROLE_CHILD0 < t->nchildren && !t->commit_sent;
}

static int algo_expects(const void *op, int role)
{
    return role >= ECCL_ROLE_PARENT && eccl_tree_allreduce_expects(op, tree_role(role));
}

static int algo_have_full(const void *op) { return ((const eccl_tree_allreduce *)op)->have_full; }

/* The result is ours and went down to our children: DONE and COMMIT,
 * both empty, are all that is left. */
static int algo_settled(const void *op)
{
    const eccl_tree_allreduce *t = op;
    return t->have_full && t->down_sent && t->inflight == 0;
}
static void algo_restore(void *op) { eccl_tree_allreduce_restore(op); }

static void algo_bytes(const void *op, uint64_t *tx, uint64_t *rx)
{
    const eccl_tree_allreduce *t = op;
    *tx = t->tx_bytes;
    *rx = t->rx_bytes;
}

const eccl_coll_algo eccl_tree_allreduce_algo = {
    .id = ECCL_ALGO_TREE,
    .roles = ECCL_ROLES_TREE,
    .pump_needs = 0, /* a link not up yet holds its frames back */
    .pump = algo_pump,
    .recv = algo_recv,
    .recv_done = algo_recv_done,
    .complete = algo_complete,
    .settled = algo_settled,
    .owes_token = algo_owes_token,
    .expects = algo_expects,
    .have_full = algo_have_full,
    .restore = algo_restore,
    .bytes = algo_bytes,
};
