/* An op from start to finish: buffers and algorithm (the dispatcher),
 * early frames, pumping, completion, and the failure promise: a failed op
 * puts its output back (the algorithms restore, coll/algo.h). */
#include "comm/comm_internal.h"

/* ---- ops ------------------------------------------------------------------- */

/* The op's algorithm, behind one face (coll/algo.h). */
static void op_restore(eccl_request *r) { r->alg->restore(op_state(r)); }
static int op_complete(eccl_request *r) { return r->alg->complete(op_state(r)); }
static int op_expects(const eccl_request *r, int role) { return r->alg->expects(op_state(r), role); }

eccl_result comm_op_recv(eccl_request *r, int role, const eccl_wire_data *d, void **dst)
{
    r->quiet = 0; /* its frame may let it send (comm_ops_pump) */
    if (!r->trace_heard) {
        r->trace_heard = 1;
        comm_trace_phase(r->comm, r, TRACE_FIRST, 0);
    }
    return r->alg->recv(op_state(r), role, d, dst);
}

eccl_result comm_op_recv_done(eccl_request *r, int role, const eccl_wire_data *d)
{
    r->quiet = 0;
    return r->alg->recv_done(op_state(r), role, d);
}

/* Which connection of a pool of `size` carries the op with `tag`: the same
 * on every peer (the tag is), and the same for every call of the tag, so a
 * connection still carries one call's frames before the next call's. */
static uint32_t pool_index(uint64_t tag, uint32_t size)
{
    return size > 1 ? (uint32_t)(tag % size) : 0;
}

/* The link an op's frames take in `role` (NULL while it is not open). */
static p2p_link *op_link(const eccl_comm *c, const eccl_request *r, int role)
{
    if (role == ECCL_ROLE_NEXT) {
        uint32_t k = pool_index(r->call.tag, c->pool_out);
        return k ? c->pslot[k].next : c->link_next;
    }
    if (role == ECCL_ROLE_PREV) {
        uint32_t k = pool_index(r->call.tag, c->pool_in);
        return k ? c->pslot[k].prev : c->link_prev;
    }
    if (ECCL_ROLE_IS_PEER(role)) return comm_peer_open(c, ECCL_ROLE_PEER_RANK(role));
    return role >= ECCL_ROLE_PARENT && role < ECCL_ROLE_COUNT ? c->link_tree[role - ECCL_ROLE_PARENT] : NULL;
}

uint32_t comm_op_waits(const eccl_comm *c, const eccl_request *r, eccl_trace_wait *out, uint32_t max)
{
    uint32_t n = 0;
    for (int role = 0; role < ECCL_ROLE_COUNT; role++) {
        if (!(r->alg->roles & ECCL_ROLE_BIT(role)) || !op_expects(r, role)) continue;
        eccl_trace_wait w = {role, UINT32_MAX, 0};
        if (role == ECCL_ROLE_PREV) w.rank = (c->rank + c->world - 1) % c->world, w.peer_id = c->prev_ref.peer_id;
        else if (role == ECCL_ROLE_NEXT) w.rank = (c->rank + 1) % c->world, w.peer_id = c->next_ref.peer_id;
        else if (role == ECCL_ROLE_PARENT) w.peer_id = c->parent_ref.peer_id;
        else w.peer_id = c->child_id[role - ECCL_ROLE_CHILD0];
        if (n < max) out[n] = w;
        n++;
    }
    for (uint32_t k = 0; (r->alg->roles & ECCL_ROLES_PEERS) && k < c->world; k++) {
        if (k == c->rank || !op_expects(r, ECCL_ROLE_PEER + (int)k)) continue;
        if (n < max) out[n] = (eccl_trace_wait){ECCL_ROLE_PEER + (int)k, k, comm_peer_id_of(c, k)};
        n++;
    }
    return n;
}

/* Whether more frames of this op will come over `l`, a link in `role`:
 * ring frames only over the op's own connection of each pool. */
int comm_op_expects_on(const eccl_comm *c, const eccl_request *r, const p2p_link *l, int role)
{
    if (!op_expects(r, role)) return 0;
    return role >= ECCL_ROLE_PARENT || op_link(c, r, role) == l;
}

static void op_release_buffers(eccl_comm *c, eccl_request *r)
{
    eccl_bufpool_put(&c->pool, r->backup);
    for (uint32_t i = 0; i < ECCL_WIRE_TREE_CHILDREN; i++) {
        eccl_bufpool_put(&c->pool, r->staging[i]);
        r->staging[i] = NULL;
    }
    eccl_bufpool_put(&c->pool, r->qimg);
    r->backup = r->qimg = NULL;
    const eccl_dev_ops *d = c->env->dev;
    if (r->pinned) d->host_free(c->env->dev_ctx, r->pinned, r->pinned_bytes);
    if (r->dev_backup) d->d_free(c->env->dev_ctx, r->dev_backup);
    r->pinned = r->dev_backup = NULL;
    free(r->amem);
    r->amem = NULL;
}

static const char *coll_name(eccl_coll_kind k)
{
    static const char *const names[ECCL_COLL_KIND_COUNT] = {"all-reduce", "all-gather", "reduce-scatter",
                                                           "broadcast", "reduce", "all-to-all", "send", "receive"};
    return (unsigned)k < ECCL_COLL_KIND_COUNT ? names[k] : "collective";
}

/* Tells the master our op failed here (or, TIMEOUT on a repairable op,
 * is stuck): the others are stuck in it too, so it re-forms the ring,
 * which settles it everywhere. */
static void op_tell_master(eccl_comm *c, const eccl_request *r, eccl_result result)
{
    eccl_msg m = {.type = ECCL_MSG_COLL_DONE};
    m.u.coll.tag = r->call.tag;
    m.u.coll.epoch = r->call.epoch;
    m.u.coll.count = r->call.count;
    m.u.coll.dtype = (uint8_t)r->call.dtype;
    m.u.coll.op = (uint8_t)r->call.op;
    m.u.coll.result = (uint32_t)result;
    if (c->master_open) comm_master_send(c, &m);
}

void comm_op_timed_out(eccl_comm *c, eccl_request *r)
{
    if (r->state == OP_RUNNING && !r->timeout_told && c->master_open && comm_op_repair_bytes(c, r)) {
        /* Another survivor may hold this result, even have returned it
         * early: not ours alone to fail. The master's view change settles
         * it on every member (committed with those bytes, or aborted); we
         * fail it ourselves only if that does not come within another
         * timeout. */
        r->timeout_told = 1;
        r->deadline_ns = now_ns(c) + (uint64_t)c->params.op_timeout_ms * MS;
        ECCL_INFO(c->env, "tag %llu timed out: asking the master to settle it", (unsigned long long)r->call.tag);
        op_tell_master(c, r, ECCL_ERR_TIMEOUT);
        return;
    }
    /* Our links may hold frames into this buffer, and neighbours are stuck
     * too: drop the links; the notice asks the master to re-form the ring. */
    if (r->state != OP_QUEUED) comm_links_close_upto(c, UINT32_MAX);
    comm_op_finish(c, r, ECCL_ERR_TIMEOUT);
}

/* Whether r runs over l, a link in `role` (without opening any). A peer
 * link counts for every op of a peer-link algorithm: which peers it still
 * talks to is the algorithm's, and one re-form too many only fails calls
 * their callers retry. */
static int op_runs_over(const eccl_comm *c, const eccl_request *r, const p2p_link *l, int role)
{
    if (ECCL_ROLE_IS_PEER(role)) return (r->alg->roles & ECCL_ROLES_PEERS) != 0;
    return role != ROLE_NONE && (r->alg->roles & ECCL_ROLE_BIT(role)) && op_link(c, r, role) == l;
}

void comm_ops_link_lost(eccl_comm *c, p2p_link *l)
{
    if (!l->hello_seen || l->epoch != c->epoch || !c->master_open) return;
    int role = comm_link_role(c, l);
    if (l->ch.error == ECCL_ERR_DEVICE) {
        /* Our own device broke while the net served this link (it copied
         * out of a host-mate's device memory with our context): this rank
         * fails its ops as their own device work would (ECCL_ERR_DEVICE,
         * told to the master), the link is not to blame. */
        for (eccl_request *r = c->ops, *next; r; r = next) {
            next = r->next;
            if (r->state == OP_RUNNING && !r->returned && op_runs_over(c, r, l, role))
                comm_op_finish(c, r, ECCL_ERR_DEVICE);
        }
        return;
    }
    const eccl_request *hit = NULL;
    for (const eccl_request *r = c->ops; r && !hit; r = r->next)
        if (r->state == OP_RUNNING && !r->returned && op_runs_over(c, r, l, role)) hit = r;
    if (!hit && !l->early && !l->receiving) return;
    uint64_t tag = hit ? hit->call.tag : l->early ? l->early->d.tag : l->receiving->d.tag;
    ECCL_INFO(c->env, "link to peer %llu broke with frames of tag %llu on it: asking the master to settle",
              (unsigned long long)l->peer_id, (unsigned long long)tag);
    eccl_msg m = {.type = ECCL_MSG_COLL_DONE};
    m.u.coll.tag = tag;
    m.u.coll.epoch = c->epoch;
    m.u.coll.result = (uint32_t)ECCL_ERR_CONNECT;
    comm_master_send(c, &m);
}

void comm_op_finish(eccl_comm *c, eccl_request *r, eccl_result result)
{
    if (r->state == OP_DONE) return;
    if (r->returned) {
        /* The caller has had the result since the op returned early:
         * whatever ends it now (its completion round, a view change, the
         * comm's end) changes nothing for the caller, and its buffers are
         * the caller's again. A view change commits it (we hold it). */
        if (result != ECCL_OK && result != ECCL_ERR_MASTER_LOST && result != ECCL_ERR_KICKED &&
            result != ECCL_ERR_CLOSED)
            ECCL_WARN(c->env, "tag %llu, returned early, ended with %s after the caller had it",
                      (unsigned long long)r->call.tag, eccl_strerror(result));
        result = ECCL_OK;
        c->returned_finished = 1;
        c->kept_total -= comm_op_repair_bytes(c, r);
        c->n_returned--;
        eccl_bufpool_put(&c->pool, r->kept);
        r->kept = NULL;
    }
    /* The promise: on failure recvbuf holds what it held before. */
    if (result != ECCL_OK && r->started) op_restore(r);
    if (r->state != OP_QUEUED && result != ECCL_OK && result != ECCL_ERR_PEER_LOST &&
        result != ECCL_ERR_TOO_FEW_PEERS) {
        /* We gave up on our own (timeout, no memory). Successes and losses
         * need no word (the master decided the latter). */
        op_tell_master(c, r, result);
    }
    if (r->state != OP_QUEUED) {
        /* Full and unable to grow: the oldest goes, as at COMM_RECENT. */
        if (c->n_recent == c->cap_recent)
            comm_ring_grow((void **)&c->recent, &c->cap_recent, &c->recent_head, c->n_recent,
                           sizeof *c->recent, COMM_RECENT);
        c->recent[c->recent_head].tag = r->call.tag;
        c->recent[c->recent_head].ok = result == ECCL_OK;
        c->recent[c->recent_head].receiver = r->call.kind == ECCL_COLL_RECV;
        c->recent_head = (c->recent_head + 1) % c->cap_recent;
        if (c->n_recent < c->cap_recent) c->n_recent++;
    }
    r->result = result;
    /* One clock reading: the trace's end and, unless it returned early,
     * when the call returned (late.c). */
    uint64_t now = r->returned ? 0 : now_ns(c);
    comm_trace_phase(c, r, TRACE_END, now);
    if (result == ECCL_OK && r->started) comm_late_note(c, r);
    if (result == ECCL_OK) comm_stats_note(c, r);
    if (now) c->returned_ns = now;
    /* A failure leaves a trace for whoever looks into it (ECCL_TRACE_DIR),
     * once an epoch: a loss fails every op in flight at once. Written
     * while the op still counts as unfinished, so its wait lines say whom
     * it was still waiting for. */
    if (result != ECCL_OK && result != ECCL_ERR_TOO_FEW_PEERS && result != ECCL_ERR_CLOSED &&
        c->trace_auto_epoch != c->epoch + 1) {
        c->trace_auto_epoch = c->epoch + 1;
        comm_trace_dump(c, result == ECCL_ERR_TIMEOUT ? "timeout" : "failed", 1);
    }
    op_release_buffers(c, r);
    r->state = OP_DONE;
    if (result == ECCL_OK)
        ECCL_TRACE(c->env, "%s tag %llu done", coll_name(r->call.kind), (unsigned long long)r->call.tag);
    else
        ECCL_INFO(c->env, "%s tag %llu failed: %s", coll_name(r->call.kind), (unsigned long long)r->call.tag,
                  eccl_strerror(result));
}


/* Feeds an op the frames a peer sent over `l` before we called it, in order.
 * An error means the peer broke the protocol: the caller drops the link. */
eccl_result comm_replay_early(eccl_comm *c, eccl_request *r, p2p_link *l)
{
    if (!l) return ECCL_OK;
    int role = comm_link_role(c, l);
    for (early_frame **p = &l->early; *p;) {
        early_frame *e = *p;
        if (e->d.tag != r->call.tag) {
            p = &e->next;
            continue;
        }
        *p = e->next;
        if (l->early_tail == &e->next) l->early_tail = p;
        l->early_bytes -= e->d.len;
        if (e->at_ns && (!r->heard_early_ns || e->at_ns < r->heard_early_ns)) r->heard_early_ns = e->at_ns;
        void *dst = NULL;
        eccl_result rc = comm_op_recv(r, role, &e->d, &dst);
        if (rc == ECCL_OK) {
            if (dst && e->buf) c->env->dev->copy(c->env->dev_ctx, dst, e->buf->ptr, e->d.len);
            rc = comm_op_recv_done(r, role, &e->d);
        }
        comm_early_free(c, e);
        if (rc != ECCL_OK) {
            ECCL_WARN(c->env, "bad frame from peer %llu: %s", (unsigned long long)l->peer_id,
                      eccl_strerror(rc));
            return rc;
        }
    }
    return ECCL_OK;
}

/* Every link that carries ops' frames in this epoch, one per index below
 * comm_role_links_n (NULL: none there): prev, next, the tree's links, the
 * pools' other connections, then the peer links. Looked up afresh at each
 * index, so a caller may close links as it goes. */
uint32_t comm_role_links_n(const eccl_comm *c)
{
    uint32_t extra = c->pslot ? 2 * (ECCL_WIRE_MAX_POOL - 1) : 0;
    return ECCL_ROLE_COUNT + extra + comm_peer_slots(c);
}

p2p_link *comm_role_link_at(const eccl_comm *c, uint32_t i)
{
    switch (i) {
    case 0: return c->link_prev;
    case 1: return c->link_next;
    default: break;
    }
    if (i < ECCL_ROLE_COUNT) return c->link_tree[i - ECCL_ROLE_PARENT];
    i -= ECCL_ROLE_COUNT;
    uint32_t pooled = c->pslot ? 2 * (ECCL_WIRE_MAX_POOL - 1) : 0;
    if (i >= pooled) return comm_peer_slot_link(c, i - pooled);
    return i % 2 ? c->pslot[1 + i / 2].next : c->pslot[1 + i / 2].prev;
}

/* An op's own links, in the order comm_role_link_at gives them. */
static int op_links(const eccl_comm *c, const eccl_request *r, p2p_link *out[ECCL_ROLE_COUNT])
{
    int n = 0;
    for (int role = 0; role < ECCL_ROLE_COUNT; role++) {
        /* Only the links of the op's own algorithm: frames of this tag on
         * another link belong to a later call of it. */
        p2p_link *l = r->alg->roles & ECCL_ROLE_BIT(role) ? op_link(c, r, role) : NULL;
        if (l) out[n++] = l;
    }
    return n;
}

/* The bytes of sendbuf the call reads (an all-to-all's: coll/alltoall.h). */
static size_t input_bytes(const eccl_coll_call *c)
{
    size_t es = eccl_dtype_size(c->dtype);
    switch (c->kind) {
    case ECCL_COLL_ALLGATHER: return (c->vcounts ? c->vcounts[c->rank] : c->count) * es;
    case ECCL_COLL_REDUCE_SCATTER: return (c->vcounts ? c->count : c->count * c->nranks) * es;
    case ECCL_COLL_ALLTOALL: return eccl_a2a_send_extent(c);
    default: return c->count * es;
    }
}

/* The backup a call of out_bytes of output keeps: all of them in place
 * (input and output overlap: the output is what a retry reads, so a
 * failure puts it back bit for bit), none out of place (the input is
 * intact, which is all a retry needs; the output is then unspecified,
 * eccl.h). A receive has no input: its buffer is put back as ever. */
static size_t backup_bytes(const eccl_request *r, size_t out_bytes)
{
    const eccl_coll_call *c = &r->call;
    return c->kind == ECCL_COLL_RECV || eccl_coll_overlaps(c, input_bytes(c), out_bytes) ? out_bytes : 0;
}

/* Takes from the pool the backup of a call of out_bytes of output
 * (backup_bytes; none for 0): its pointer or NULL. */
static eccl_result take_backup(eccl_comm *c, eccl_request *r, size_t out_bytes, uint8_t **backup)
{
    size_t bytes = backup_bytes(r, out_bytes);
    *backup = NULL;
    if (!bytes) return ECCL_OK;
    if (!(r->backup = eccl_bufpool_get(&c->pool, bytes))) return ECCL_ERR_NO_MEMORY;
    *backup = r->backup->ptr;
    return ECCL_OK;
}

/* The op's algorithm state, `bytes` of it zeroed, from the comm's state
 * pool (r->alg_state): NULL when there is no memory. */
static void *take_state(eccl_comm *c, eccl_request *r, size_t bytes)
{
    if (!(r->alg_state = eccl_bufpool_get(&c->states, bytes))) return NULL;
    memset(r->alg_state->ptr, 0, bytes);
    return r->alg_state->ptr;
}

/* The recursive all-reduce's (coll/rec_allreduce.h): scratch and the backup. */
static eccl_result rec_setup(eccl_comm *c, eccl_request *r, size_t bytes)
{
    int halving = eccl_rec_allreduce_halving(&r->call);
    size_t sb = eccl_rec_allreduce_scratch_bytes(&r->call, halving);
    uint8_t *backup;
    if (take_backup(c, r, bytes, &backup) != ECCL_OK) return ECCL_ERR_NO_MEMORY;
    if (sb && !(r->staging[0] = eccl_bufpool_get(&c->pool, sb))) return ECCL_ERR_NO_MEMORY;
    eccl_rec_allreduce *a = take_state(c, r, sizeof *a);
    if (!a) return ECCL_ERR_NO_MEMORY;
    eccl_rec_allreduce_init(a, &r->call, sb ? r->staging[0]->ptr : NULL, backup);
    r->alg = &eccl_rec_allreduce_algo;
    return ECCL_OK;
}

/* The hierarchical all-reduce's (coll/hier_allreduce.h): scratch (its
 * counters, received shards, the host partial, ring chunks) and the
 * backup. */
static eccl_result hier_setup(eccl_comm *c, eccl_request *r, size_t bytes)
{
    size_t sb = eccl_hier_allreduce_scratch_bytes(&r->call);
    uint8_t *backup;
    if (take_backup(c, r, bytes, &backup) != ECCL_OK) return ECCL_ERR_NO_MEMORY;
    if (!(r->staging[0] = eccl_bufpool_get(&c->pool, sb))) return ECCL_ERR_NO_MEMORY;
    eccl_hier_allreduce *a = take_state(c, r, sizeof *a);
    if (!a) return ECCL_ERR_NO_MEMORY;
    eccl_hier_allreduce_init(a, &r->call, r->staging[0]->ptr, backup);
    r->alg = &eccl_hier_allreduce_algo;
    return ECCL_OK;
}

/* All-reduce's buffers and algorithm, as the dispatcher picks it among
 * those that can run the call (coll/dispatch.h). Quantised calls always
 * take the ring: it alone carries codes. */
/* What the dispatcher is told of the world's hosts: ECCL_DISPATCH_ONE_HOST
 * when every rank shares this one and this rank talks to them through
 * shared memory (its advertised address is net_shm's), else the epoch's
 * local_size. */
static uint32_t comm_dispatch_topology(const eccl_comm *c)
{
    if (c->world >= 2 && c->host_ranks == c->world && strncmp(c->p2p_addr, "shm:", 4) == 0)
        return ECCL_DISPATCH_ONE_HOST;
    return c->local_size;
}

static eccl_result allreduce_setup(eccl_comm *c, eccl_request *r)
{
    size_t bytes = r->call.count * eccl_dtype_size(r->call.dtype);
    /* The ring runs everything; the tree and the recursive all-reduce
     * only host buffers, exact (the tree among three or more and small). */
    int plain_host = r->call.quant == ECCL_QUANT_NONE && !r->call.on_device;
    uint32_t can = ECCL_DISPATCH_BIT(ECCL_ALGO_RING);
    if (c->world >= 3 && bytes <= ECCL_TREE_MAX_BYTES && plain_host) can |= ECCL_DISPATCH_BIT(ECCL_ALGO_TREE);
    if (c->world >= 2 && plain_host) can |= ECCL_DISPATCH_BIT(ECCL_ALGO_RECURSIVE);
    /* The hierarchy only where the master found the world host-regular
     * (this epoch's local_size: L >= 2 ranks on each of two hosts or more). */
    if (plain_host && eccl_hier_allreduce_can(&r->call)) can |= ECCL_DISPATCH_BIT(ECCL_ALGO_HIER);
    eccl_algorithm algo = eccl_dispatch_pick(&c->dispatch, ECCL_COLL_ALLREDUCE, c->world, comm_dispatch_topology(c), bytes, can);
    if (algo == ECCL_ALGO_RECURSIVE) return rec_setup(c, r, bytes);
    if (algo == ECCL_ALGO_HIER) return hier_setup(c, r, bytes);
    uint8_t *staging[ECCL_WIRE_TREE_CHILDREN] = {NULL}, *backup;
    size_t sb = eccl_ring_staging_bytes_q(r->call.count, r->call.dtype, r->call.quant);
    if (r->call.on_device) {
        /* Pinned staging (kernels read it) and send slots in one block, the
         * backup on the device. */
        const eccl_dev_ops *d = c->env->dev;
        r->pinned_bytes = (2 + ECCL_RING_DEV_SLOTS) * sb;
        eccl_result rc = d->host_alloc(c->env->dev_ctx, r->pinned_bytes, &r->pinned);
        size_t keep = backup_bytes(r, bytes);
        if (rc == ECCL_OK && keep) rc = d->d_alloc(c->env->dev_ctx, r->call.device, keep, &r->dev_backup);
        if (rc != ECCL_OK) return rc == ECCL_ERR_NO_MEMORY ? rc : ECCL_ERR_DEVICE;
        staging[0] = r->pinned;
        staging[1] = (uint8_t *)r->pinned + sb;
        backup = r->dev_backup;
    } else {
        if (take_backup(c, r, bytes, &backup) != ECCL_OK) return ECCL_ERR_NO_MEMORY;
        for (int i = 0; i < 2; i++) {
            r->staging[i] = eccl_bufpool_get(&c->pool, sb);
            if (!r->staging[i]) return ECCL_ERR_NO_MEMORY;
            staging[i] = r->staging[i]->ptr;
        }
    }
    if (algo == ECCL_ALGO_TREE) {
        /* A run's root has up to four children (coll/tree_allreduce.h):
         * a partial each. (Host memory: the tree takes no device calls.) */
        int nchildren = 0;
        while (nchildren < (int)ECCL_WIRE_TREE_CHILDREN && c->child_id[nchildren]) nchildren++;
        for (int i = 2; i < nchildren; i++) {
            if (!(r->staging[i] = eccl_bufpool_get(&c->pool, sb))) return ECCL_ERR_NO_MEMORY;
            staging[i] = r->staging[i]->ptr;
        }
        eccl_tree_allreduce *t = take_state(c, r, sizeof *t);
        if (!t) return ECCL_ERR_NO_MEMORY;
        eccl_tree_allreduce_init(t, &r->call, nchildren, staging, backup);
        r->alg = &eccl_tree_allreduce_algo;
        return ECCL_OK;
    }
    eccl_ring_allreduce *a = take_state(c, r, sizeof *a);
    if (!a) return ECCL_ERR_NO_MEMORY;
    eccl_ring_allreduce_init(a, &r->call, staging, backup);
    r->alg = &eccl_ring_allreduce_algo;
    if (r->call.on_device) eccl_ring_allreduce_set_slots(a, (uint8_t *)r->pinned + 2 * sb);
    if (r->call.quant != ECCL_QUANT_NONE) {
        r->qimg = eccl_bufpool_get(&c->pool, eccl_ring_quant_bytes(a));
        if (!r->qimg) return ECCL_ERR_NO_MEMORY;
        eccl_ring_allreduce_set_quant(a, r->qimg->ptr);
    }
    return ECCL_OK;
}

/* Takes sb bytes of scratch (r->staging[0]) and the backup of a call of ob
 * bytes of output (take_backup) from the pool, and points *scratch and
 * *backup at them (NULL: none). */
static eccl_result take_scratch_backup(eccl_comm *c, eccl_request *r, size_t sb, size_t ob, uint8_t **scratch,
                                       uint8_t **backup)
{
    if (sb && !(r->staging[0] = eccl_bufpool_get(&c->pool, sb))) return ECCL_ERR_NO_MEMORY;
    *scratch = sb ? r->staging[0]->ptr : NULL;
    return take_backup(c, r, ob, backup);
}

/* The binomial tree's (coll/binomial.h): the reduce's child regions and
 * the backup. */
static eccl_result binomial_setup(eccl_comm *c, eccl_request *r)
{
    uint8_t *scratch, *backup;
    eccl_result rc = take_scratch_backup(c, r, eccl_binomial_scratch_bytes(&r->call),
                                         eccl_binomial_output_bytes(&r->call), &scratch, &backup);
    if (rc != ECCL_OK) return rc;
    eccl_binomial *a = take_state(c, r, sizeof *a);
    if (!a) return ECCL_ERR_NO_MEMORY;
    eccl_binomial_init(a, &r->call, scratch, backup);
    r->alg = &eccl_binomial_algo;
    return ECCL_OK;
}

/* Bruck's all-gather's (coll/bruck.h): the backup alone. */
static eccl_result bruck_setup(eccl_comm *c, eccl_request *r)
{
    uint8_t *scratch, *backup;
    eccl_result rc = take_scratch_backup(c, r, 0, eccl_bruck_output_bytes(&r->call), &scratch, &backup);
    if (rc != ECCL_OK) return rc;
    eccl_bruck *a = take_state(c, r, sizeof *a);
    if (!a) return ECCL_ERR_NO_MEMORY;
    eccl_bruck_init(a, &r->call, backup);
    r->alg = &eccl_bruck_algo;
    return ECCL_OK;
}

/* Recursive doubling's all-gather (coll/rec_allgather.h): the backup alone. */
static eccl_result recag_setup(eccl_comm *c, eccl_request *r)
{
    uint8_t *scratch, *backup;
    eccl_result rc = take_scratch_backup(c, r, 0, eccl_ring_pass_output_bytes(&r->call), &scratch, &backup);
    if (rc != ECCL_OK) return rc;
    eccl_rec_ag *a = take_state(c, r, sizeof *a);
    if (!a) return ECCL_ERR_NO_MEMORY;
    eccl_rec_ag_init(a, &r->call, backup);
    r->alg = &eccl_rec_ag_algo;
    return ECCL_OK;
}

/* Recursive halving's (coll/rec_reduce_scatter.h): scratch and the backup. */
static eccl_result recrs_setup(eccl_comm *c, eccl_request *r)
{
    uint8_t *scratch, *backup;
    eccl_result rc = take_scratch_backup(c, r, eccl_rec_rs_scratch_bytes(&r->call), eccl_rec_rs_output_bytes(&r->call),
                                         &scratch, &backup);
    if (rc != ECCL_OK) return rc;
    eccl_rec_rs *a = take_state(c, r, sizeof *a);
    if (!a) return ECCL_ERR_NO_MEMORY;
    eccl_rec_rs_init(a, &r->call, scratch, backup);
    r->alg = &eccl_rec_rs_algo;
    return ECCL_OK;
}

/* The ring pass's (coll/ring_pass.h): partials and the backup. Broadcast
 * and reduce may take the binomial tree instead, all-gathers Bruck's (and
 * uniform ones recursive doubling), reduce-scatter(v) recursive halving,
 * as the dispatcher picks: they run
 * on host memory (a device call's host mirror, comm/stage.h, included: it
 * is host memory laid out as the call's own buffers; on_device marks only
 * the device-resident all-reduce), exact values only. */
static eccl_result pass_setup(eccl_comm *c, eccl_request *r)
{
    eccl_coll_kind k = r->call.kind;
    int chain = k == ECCL_COLL_BROADCAST || k == ECCL_COLL_REDUCE;
    if (r->call.quant == ECCL_QUANT_NONE && !r->call.on_device) {
        /* The pass, or this collective's other algorithm. The dispatcher's
         * size: the buffer of broadcast and reduce; the N blocks of
         * all-gather and reduce-scatter, the former's output and the
         * latter's input, as eccl-bench reports them (v layouts: count is
         * already the blocks' sum). */
        uint32_t can = ECCL_DISPATCH_BIT(chain ? ECCL_ALGO_CHAIN : ECCL_ALGO_RING);
        if (k == ECCL_COLL_ALLGATHER) /* recursive doubling: uniform layouts only */
            can |= ECCL_DISPATCH_BIT(ECCL_ALGO_BRUCK) | (r->call.vcounts ? 0 : ECCL_DISPATCH_BIT(ECCL_ALGO_RECURSIVE));
        else
            can |= ECCL_DISPATCH_BIT(k == ECCL_COLL_REDUCE_SCATTER ? ECCL_ALGO_RECURSIVE : ECCL_ALGO_BINOMIAL);
        uint64_t bytes = (uint64_t)r->call.count * eccl_dtype_size(r->call.dtype) *
                         (chain || r->call.vcounts ? 1u : c->world);
        switch (eccl_dispatch_pick(&c->dispatch, k, c->world, comm_dispatch_topology(c), bytes, can)) {
        case ECCL_ALGO_BRUCK: return bruck_setup(c, r);
        case ECCL_ALGO_BINOMIAL: return binomial_setup(c, r);
        case ECCL_ALGO_RECURSIVE: return k == ECCL_COLL_ALLGATHER ? recag_setup(c, r) : recrs_setup(c, r);
        default: break; /* the ring pass or the chain, below */
        }
    }
    uint8_t *scratch, *backup;
    eccl_result rc = take_scratch_backup(c, r, eccl_ring_pass_scratch_bytes(&r->call),
                                         eccl_ring_pass_output_bytes(&r->call), &scratch, &backup);
    if (rc != ECCL_OK) return rc;
    eccl_ring_pass *a = take_state(c, r, sizeof *a);
    if (!a) return ECCL_ERR_NO_MEMORY;
    eccl_ring_pass_init(a, &r->call, scratch, backup);
    if (r->call.quant != ECCL_QUANT_NONE) {
        r->qimg = eccl_bufpool_get(&c->pool, eccl_ring_pass_quant_bytes(a));
        r->staging[1] = eccl_bufpool_get(&c->pool, eccl_ring_pass_qstage_bytes(a));
        if (!r->qimg || !r->staging[1]) return ECCL_ERR_NO_MEMORY;
        eccl_ring_pass_set_quant(a, r->qimg->ptr, r->staging[1]->ptr);
    }
    r->alg = chain ? &eccl_chain_pass_algo : &eccl_ring_pass_algo;
    return ECCL_OK;
}

/* All-to-all's (coll/alltoall.h): per-peer progress, the backup, and a
 * copy of the send blocks when the buffers overlap. */
static eccl_result alltoall_setup(eccl_comm *c, eccl_request *r)
{
    size_t re = eccl_a2a_recv_extent(&r->call), se = eccl_a2a_send_extent(&r->call);
    int overlaps = eccl_a2a_overlaps(&r->call);
    r->amem = calloc(c->world, sizeof(eccl_a2a_peer));
    if (!r->amem) return ECCL_ERR_NO_MEMORY;
    uint8_t *backup;
    if (take_backup(c, r, re, &backup) != ECCL_OK) return ECCL_ERR_NO_MEMORY;
    if (overlaps && !(r->staging[0] = eccl_bufpool_get(&c->pool, se))) return ECCL_ERR_NO_MEMORY;
    eccl_a2a *a = take_state(c, r, sizeof *a);
    if (!a) return ECCL_ERR_NO_MEMORY;
    eccl_a2a_init(a, &r->call, r->amem, backup, overlaps ? r->staging[0]->ptr : NULL);
    r->alg = &eccl_a2a_algo;
    return ECCL_OK;
}

/* Send and receive's (coll/p2p.h): the receiver's backup. */
static eccl_result p2p_setup(eccl_comm *c, eccl_request *r)
{
    size_t bytes = r->call.count * eccl_dtype_size(r->call.dtype);
    if (r->call.kind == ECCL_COLL_RECV && !(r->backup = eccl_bufpool_get(&c->pool, bytes)))
        return ECCL_ERR_NO_MEMORY;
    eccl_p2p *a = take_state(c, r, sizeof *a);
    if (!a) return ECCL_ERR_NO_MEMORY;
    eccl_p2p_init(a, &r->call, r->backup ? r->backup->ptr : NULL);
    r->alg = &eccl_p2p_algo;
    return ECCL_OK;
}

static size_t early_fit(const eccl_comm *c, const eccl_request *r);

/* Whether r's kind and size let it return early: what early_fit asks that
 * is the same on every rank of the call (not its memory or its state). */
static int early_kind(const eccl_comm *c, const eccl_request *r)
{
    size_t bytes = comm_call_replicated_bytes(&r->call);
    return bytes && bytes <= c->early_max && bytes <= ECCL_WIRE_MAX_REPAIR;
}

static eccl_result op_start(eccl_comm *c, eccl_request *r)
{
    r->call.env = c->env;
    r->call.epoch = c->epoch; /* a failure notice names it, even of an op that never ran */
    r->call.rank = c->rank;
    r->call.nranks = c->world;
    r->call.local_size = c->local_size;
    /* Committed by a view change while we had not called it. */
    if (c->records && comm_record_take(c, r)) return ECCL_OK;
    if (c->world < 2) {
        comm_op_finish(c, r, ECCL_ERR_TOO_FEW_PEERS);
        return ECCL_OK;
    }
    if (r->call.ring_epoch && r->call.ring_epoch != (uint64_t)c->epoch) {
        /* Pinned to a ring that is gone (eccl_allreduce_opts.ring_epoch):
         * peers that read the new one call it by another name. */
        comm_op_finish(c, r, ECCL_ERR_PEER_LOST);
        return ECCL_OK;
    }
    if (r->call.kind != ECCL_COLL_ALLREDUCE && (c->world != r->called_world || c->rank != r->called_rank)) {
        /* Membership changed since the call: its layout is not this
         * world's. It fails as if a loss had aborted it, having sent
         * nothing; the caller's next call runs on the new world. */
        comm_op_finish(c, r, ECCL_ERR_PEER_LOST);
        return ECCL_OK;
    }
    eccl_result rc = r->call.kind == ECCL_COLL_ALLREDUCE  ? allreduce_setup(c, r)
                     : r->call.kind == ECCL_COLL_ALLTOALL ? alltoall_setup(c, r)
                     : r->call.kind == ECCL_COLL_SEND || r->call.kind == ECCL_COLL_RECV ? p2p_setup(c, r)
                                                          : pass_setup(c, r);
    if (rc != ECCL_OK) {
        r->state = OP_RUNNING; /* nothing was sent: finishing restores nothing */
        comm_op_finish(c, r, rc);
        return ECCL_OK;
    }
    if (r->alg->roles & ECCL_ROLES_TREE) comm_link_connect_parent(c);
    r->started = 1;
    r->start_seq = ++c->starts;
    r->state = OP_RUNNING;
    comm_trace_phase(c, r, TRACE_STARTED, 0);
    /* The completion tokens of an op whose caller will return as soon as
     * its data is out need not leave at once: queued lazily they go with
     * the next frame on their link (the next call's data), or when the
     * engine would otherwise wait (comm_idle): one write a call instead of
     * two at two ranks. The budget of kept copies is left out: it frees up
     * as earlier calls' tokens come in, and a call that ends up waiting for
     * its round sends its tokens as soon as it has nothing else to do. */
    r->lazy_tokens = early_fit(c, r) != 0;
    p2p_link *links[ECCL_ROLE_COUNT];
    for (int i = 0, n = op_links(c, r, links); i < n; i++)
        if (comm_replay_early(c, r, links[i]) != ECCL_OK) comm_link_close(c, links[i]);
    for (uint32_t i = 0; (r->alg->roles & ECCL_ROLES_PEERS) && i < comm_peer_slots(c); i++) {
        p2p_link *l = comm_peer_slot_link(c, i);
        if (l && comm_replay_early(c, r, l) != ECCL_OK) comm_link_close(c, l);
    }
    return ECCL_OK;
}

/* The op of `tag` that frames belong to: a started one before one queued
 * behind it (a call of a tag whose previous call returned early waits for
 * that one to finish). */
eccl_request *comm_op_find(eccl_comm *c, uint64_t tag)
{
    eccl_request *queued = NULL;
    for (eccl_request *r = c->ops; r; r = r->next) {
        if (r->call.tag != tag || r->state == OP_DONE) continue;
        if (r->state != OP_QUEUED) return r;
        queued = r;
    }
    return queued;
}

/* ---- returning early (docs/protocol.md, "The commit rule") ----------------- */

/* Most bytes the ops that returned early keep at once, and most such ops;
 * past either a call waits for its completion round as before. The count
 * bounds how far a rank runs ahead of its slowest peer's rounds, since
 * every engine step walks the ops: a broadcast's root with 32 KiB of 8-byte
 * copies let thousands of calls run ahead (2,000 8-byte broadcasts in a
 * row, N = 4: 114-196 us a call; bounded at 16: 28-41 us; 4 and 64 measure
 * the same as 16). */
#define COMM_KEPT_MAX (4u * ECCL_WIRE_MAX_REPAIR)
#define COMM_RETURNED_MAX 16u

/* The bytes r would keep if it returned before its completion round, or 0
 * when its kind, size or memory rule that out (the budget of kept copies
 * aside: early_bytes). Only a call whose result is the same on every rank
 * (all-reduce, all-gather, broadcast) and that a view change can hand over
 * (comm_op_repair_bytes: to a survivor that reports it, or as a record to
 * one that has not called it yet), in host memory of the caller's own (a
 * device call's mirror goes back at the end of the call). */
static size_t early_fit(const eccl_comm *c, const eccl_request *r)
{
    if (r->returned || r->state != OP_RUNNING || r->call.nranks < 2 || r->stage.active || !r->alg->settled) return 0;
    return early_kind(c, r) ? comm_op_repair_bytes(c, r) : 0;
}

/* early_fit's bytes once r holds its result and nothing more will touch
 * the caller's buffers, within the budget; else 0. */
static size_t early_bytes(const eccl_comm *c, const eccl_request *r)
{
    size_t bytes = early_fit(c, r);
    if (!bytes || c->kept_total + bytes > COMM_KEPT_MAX || c->n_returned >= COMM_RETURNED_MAX) return 0;
    return r->alg->settled(op_state(r)) ? bytes : 0;
}

static void op_return_early(eccl_comm *c, eccl_request *r, size_t bytes)
{
    /* An op that returned never restores: its backup, if any, keeps the
     * result (one buffer fewer alive while the caller's next call runs);
     * else one from the pool, as backups: a warm call path allocates
     * nothing. */
    if (r->backup && r->backup->cap >= bytes) {
        r->kept = r->backup;
        r->backup = NULL;
    } else if (!(r->kept = eccl_bufpool_get(&c->pool, bytes))) {
        return; /* it returns after its round, as any call */
    }
    c->env->dev->copy(c->env->dev_ctx, r->kept->ptr, r->call.recvbuf, bytes);
    c->kept_total += bytes;
    c->n_returned++;
    r->returned = 1;
    r->result = ECCL_OK;
    c->returned_ns = now_ns(c);
    comm_trace_phase(c, r, TRACE_DATA, c->returned_ns);
    ECCL_TRACE(c->env, "%s tag %llu returned early", coll_name(r->call.kind), (unsigned long long)r->call.tag);
}

void comm_ops_sweep(eccl_comm *c)
{
    for (eccl_request **p = &c->ops; *p;) {
        eccl_request *r = *p;
        if (!r->orphan || r->state != OP_DONE) {
            p = &r->next;
            continue;
        }
        *p = r->next;
        c->n_ops--;
        comm_request_free(c, r);
    }
}

void comm_request_free(eccl_comm *c, eccl_request *r)
{
    eccl_bufpool_put(&c->states, r->alg_state);
    free(r->varr);
    free(r);
}

static int none_returned(void *arg)
{
    const eccl_comm *c = arg;
    for (const eccl_request *r = c->ops; r; r = r->next)
        if (r->returned && r->state != OP_DONE) return 0;
    return 1;
}

void comm_ops_settle_returned(eccl_comm *c)
{
    if (!none_returned(c))
        eccl_engine_drive(&c->eng, none_returned, c, now_ns(c) + (uint64_t)c->params.op_timeout_ms * MS);
    comm_ops_sweep(c);
}

void comm_op_unlink(eccl_comm *c, eccl_request *r)
{
    for (eccl_request **p = &c->ops; *p; p = &(*p)->next) {
        if (*p == r) {
            *p = r->next;
            c->n_ops--;
            return;
        }
    }
}

/* Fails every unfinished op, e.g. when the master is gone. */
void comm_ops_fail_all(eccl_comm *c, eccl_result why)
{
    comm_links_close_upto(c, UINT32_MAX); /* no frame may still point at a buffer */
    for (eccl_request *r = c->ops; r; r = r->next) comm_op_finish(c, r, why);
    comm_ops_sweep(c);
}


void comm_fail(eccl_comm *c, eccl_result why)
{
    if (c->phase == PHASE_FAILED) return;
    ECCL_WARN(c->env, "communicator failed: %s", eccl_strerror(why));
    c->phase = PHASE_FAILED;
    c->fatal = why;
    comm_ops_fail_all(c, why);
    /* Failed between calls (in a membership step, say): the trace still
     * says so, or a rank cut off there would look like one that never
     * called (docs/trace.md, "When it is written"). */
    if (why != ECCL_ERR_CLOSED && c->trace_auto_epoch != c->epoch + 1) {
        char w[64];
        snprintf(w, sizeof w, "comm_failed:%s", eccl_trace_result_word(why));
        c->trace_auto_epoch = c->epoch + 1;
        comm_trace_dump(c, w, 1);
    }
    comm_sync_finish(c, why, 0);
    comm_side_links_close(c, ECCL_LINK_SYNC);
    if (c->master_open) eccl_chan_close(&c->master);
    c->master_open = 0;
}

static size_t links_queued(const eccl_comm *c)
{
    size_t n = 0;
    for (const p2p_link *l = c->links; l; l = l->next) n += l->ch.queued_bytes;
    return n;
}

/* ---- a later call's frames behind an earlier call's tokens ----------------- */

/* Whether x still owes a completion token over l (coll/algo.h, owes_token). */
static int owes_on(const eccl_comm *c, const eccl_request *x, const p2p_link *l)
{
    if (!x->alg->owes_token) return 0;
    if (x->alg->roles & ECCL_ROLES_PEERS) {
        int role = comm_peer_role(c, l);
        return role != ROLE_NONE && x->alg->owes_token(op_state(x), role);
    }
    for (int role = 0; role < ECCL_ROLE_COUNT; role++)
        if ((x->alg->roles & ECCL_ROLE_BIT(role)) && op_link(c, x, role) == l &&
            x->alg->owes_token(op_state(x), role))
            return 1;
    return 0;
}

/* Whether y keeps its frames off l for now: a call x started before it
 * returned early and still owes a token over l that waits for another's
 * (the dissemination barrier's next round, the ring's next done token).
 * Queued after y's frames, the token could sit behind one the peer must
 * hold back unread on its connection (y not called there yet, the frame too big to
 * keep aside: COMM_EARLY_MAX), while the peer's own call of x waits for
 * it: both would wait forever. Kept behind, it leaves first.
 *
 * Only a call whose kind and size rule out an early return on every rank
 * is held. One that could return early is small (its frames fit what a
 * peer keeps aside, below), and held it could in turn hold back tokens
 * that another rank's call waits for: a cycle, when two ranks run ahead
 * in different orders. A held call returns early nowhere, so it owes no
 * token anything is held behind: x's tokens depend only on x's frames
 * elsewhere, which are never held (x is small everywhere). */
_Static_assert(ECCL_WIRE_MAX_REPAIR <= COMM_EARLY_MAX, "a call that returns early must fit a peer's early frames");
static int link_gated(const eccl_comm *c, const eccl_request *y, const p2p_link *l)
{
    if (!c->n_returned || !l || early_kind(c, y)) return 0;
    for (const eccl_request *x = c->ops; x; x = x->next)
        if (x->returned && x->state == OP_RUNNING && x->start_seq < y->start_seq && owes_on(c, x, l)) return 1;
    return 0;
}

/* What one pump of an op looked up (its peer links, role_links' fixed
 * ones): whether a link was missing (not open yet, or held back:
 * link_gated), and, for an op that returned, the bytes queued on those it
 * got, to tell whether the pump queued a frame (a pump only adds to a
 * queue: nothing is written while it runs). */
#define PUMP_WATCH 64 /* lookups: the barrier's and the data steps' of 2^20 ranks */
typedef struct pump_seen {
    eccl_comm *c;
    const eccl_request *r;
    int missing;
    uint32_t n;
    eccl_chan *ch[PUMP_WATCH];
    size_t before[PUMP_WATCH];
} pump_seen;

/* (A link looked up twice is kept twice: its first entry still tells.) */
static void pump_watch(pump_seen *p, eccl_chan *ch)
{
    if (p->n == PUMP_WATCH) {
        p->missing = 1; /* too many to tell: not quiet */
        return;
    }
    p->ch[p->n] = ch;
    p->before[p->n++] = ch->queued_bytes;
}

static int pump_queued(const pump_seen *p)
{
    for (uint32_t i = 0; i < p->n; i++)
        if (p->ch[i]->queued_bytes != p->before[i]) return 1;
    return 0;
}

static eccl_chan *pump_peer(void *ctx, uint32_t rank)
{
    pump_seen *p = ctx;
    p2p_link *l = comm_peer_link(p->c, rank);
    if (!l || link_gated(p->c, p->r, l)) {
        p->missing = 1;
        return NULL;
    }
    if (p->r->returned) pump_watch(p, &l->ch);
    return &l->ch;
}

/* The op's links in the fixed roles (ring, tree), into links->role: what
 * the gate lets through (link_gated), each looked up as pump_peer does.
 * 0: a link the algorithm needs before it may pump is missing. */
static int role_links(eccl_comm *c, const eccl_request *r, eccl_coll_links *links, pump_seen *seen)
{
    p2p_link *l[ECCL_ROLE_COUNT] = {NULL};
    if (r->alg->roles & ECCL_ROLES_RING) {
        /* The op's connection of each pool; one not open yet (prev opens
         * its side when it runs the op) holds the op's frames back if the
         * algorithm needs it. */
        uint32_t k = pool_index(r->call.tag, c->pool_out);
        l[ECCL_ROLE_NEXT] = k ? comm_pool_link_next(c, k) : c->link_next;
        l[ECCL_ROLE_PREV] = op_link(c, r, ECCL_ROLE_PREV);
    }
    if (r->alg->roles & ECCL_ROLES_TREE)
        for (int i = 0; i < ECCL_TREE_ROLES; i++) l[ECCL_ROLE_PARENT + i] = c->link_tree[i];
    int ready = 1;
    for (int i = 0; i < ECCL_ROLE_COUNT; i++) {
        if (!(r->alg->roles & ECCL_ROLE_BIT(i))) continue;
        if (link_gated(c, r, l[i])) l[i] = NULL;
        links->role[i] = l[i] ? &l[i]->ch : NULL;
        if (!l[i]) seen->missing = 1; /* (a leaf's children too: a tree op is never quiet) */
        else if (r->returned) pump_watch(seen, &l[i]->ch);
        if (!l[i] && (r->alg->pump_needs & ECCL_ROLE_BIT(i))) ready = 0;
    }
    return ready;
}

/* Queues the frames of running ops that are ready; returns how many bytes.
 *
 * An op that returned early has sent its data (settled): what is left are
 * its completion tokens, and each pump queues every token that may leave.
 * Once a pump of it had every link it looked up and queued nothing, only a
 * frame of its own can give it more to send (a token it waits for), so it
 * is passed by (`quiet`) until one comes, or a link of the comm closes
 * (comm_link_close): a stream of small calls keeps up to
 * COMM_RETURNED_MAX such ops alive, and every engine step pumps. */
size_t comm_ops_pump(eccl_comm *c)
{
    if (!c->ring_ready || c->frozen || c->world < 2) return 0;
    size_t before = links_queued(c);
    for (eccl_request *r = c->ops; r; r = r->next) {
        if (r->state != OP_RUNNING || r->quiet) continue;
        eccl_coll_links links = {{NULL}, NULL, NULL, r->lazy_tokens};
        pump_seen seen; /* (its arrays fill as lookups come) */
        seen.c = c, seen.r = r, seen.missing = 0, seen.n = 0;
        if (r->alg->roles & ECCL_ROLES_PEERS) {
            links.peer = pump_peer;
            links.ctx = &seen;
        }
        if ((r->alg->roles & ~ECCL_ROLES_PEERS) && !role_links(c, r, &links, &seen)) continue;
        r->alg->pump(op_state(r), &links);
        if (r->returned && !seen.missing && !pump_queued(&seen)) r->quiet = 1;
    }
    comm_peers_flush_asks(c); /* the ranks the ops wanted and nobody knew */
    return links_queued(c) - before;
}

void comm_ops_advance(eccl_comm *c)
{
    if (!c->ring_ready || c->frozen) return;
    int started = 0;
    for (eccl_request *r = c->ops; r; r = r->next) {
        if (r->state == OP_QUEUED && comm_op_find(c, r->call.tag) == r) {
            /* (Not behind a call of its tag that returned early.) */
            op_start(c, r);
            started = 1;
        }
    }
    comm_ops_pump(c);
    if (started || c->pool_adopted) {
        /* Frames held for a tag we had not called yet, or on a pool link
         * that had no role yet, may now be placed. */
        c->pool_adopted = 0;
        for (uint32_t i = 0; i < comm_role_links_n(c); i++) {
            p2p_link *l = comm_role_link_at(c, i);
            if (l && l->ch.held) comm_link_service(c, l);
        }
    }
}

/* Writes what the sockets take, then finishes the ops that are complete: an
 * op completes only once its own frames are written. */
void comm_flush_and_complete(eccl_comm *c)
{
    for (;;) {
        int drained = 1;
        for (p2p_link *l = c->links; l; l = l->next) {
            if (eccl_chan_has_output(&l->ch) && l->ch.error == ECCL_OK) eccl_chan_flush(&l->ch);
            if (eccl_chan_has_output(&l->ch) && l->ch.error == ECCL_OK) drained = 0;
        }
        /* A queue the socket emptied leaves nothing to wake us for, though
         * the queue cap may have held back slices that are ready: queue
         * them now. A queue left non-empty waits for writability. */
        if (!drained || !comm_ops_pump(c)) break;
    }
    for (eccl_request *r = c->ops; r; r = r->next) {
        if (r->state != OP_RUNNING) continue;
        eccl_result err = r->alg->error ? r->alg->error(op_state(r)) : ECCL_OK;
        size_t early;
        if (err != ECCL_OK) comm_op_finish(c, r, err);
        else if (op_complete(r)) comm_op_finish(c, r, ECCL_OK);
        else if ((early = early_bytes(c, r)) != 0) op_return_early(c, r, early);
    }
}
