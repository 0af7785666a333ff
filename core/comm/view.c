/* Ring epochs and the view change (docs/protocol.md): RING wires an
 * epoch, VIEW_QUERY freezes and reports, VIEW_DECIDE commits or aborts. */
#include "comm/comm_internal.h"

#include <string.h>

/* ---- ring epochs and the view-change protocol ------------------------------ */

void comm_check_ring_ready(eccl_comm *c)
{
    if (c->ring_ready || c->frozen || c->phase == PHASE_FAILED) return;
    if (c->world > 1 && !(c->link_next && c->link_prev)) return;
    c->ring_ready = 1;
    c->next_backoff = 0;
    ECCL_DEBUG(c->env, "ring epoch %u ready: rank %u of %u", c->epoch, c->rank, c->world);
    eccl_msg m = {.type = ECCL_MSG_RING_READY};
    m.u.epoch.epoch = c->epoch;
    comm_master_send(c, &m);
}

eccl_result comm_pool_alloc(eccl_comm *c)
{
    if (!c->pslot) c->pslot = calloc(ECCL_WIRE_MAX_POOL, sizeof *c->pslot);
    return c->pslot ? ECCL_OK : ECCL_ERR_NO_MEMORY;
}

/* Connection k >= 1 of prev's pool: adopted once connection 0 told us the
 * pool's size (the hellos of one pool may arrive in any order); until then
 * it waits like a link of a later epoch. */
static eccl_result pool_adopt_prev(eccl_comm *c, p2p_link *l)
{
    if (!c->link_prev) return ECCL_OK;
    if (l->pool_size != c->pool_in) return ECCL_ERR_PROTOCOL; /* one pool per neighbour */
    if (!c->pslot[l->pool].prev) {
        c->pslot[l->pool].prev = l;
        c->pool_adopted = 1;
    }
    return ECCL_OK;
}

/* An accepted link said hello: adopt it as `prev` or as a tree child if it
 * belongs to the current epoch, keep it if it is from an epoch we have not
 * reached yet. Returns ECCL_ERR_CLOSED for a link of a past epoch: the
 * caller drops it. */
eccl_result comm_link_adopt(eccl_comm *c, p2p_link *l)
{
    if (l->epoch < c->epoch) return ECCL_ERR_CLOSED;
    if (l->epoch != c->epoch || c->frozen || c->world < 2) return ECCL_OK;
    if (l->purpose == ECCL_LINK_PEER) return l->outgoing ? ECCL_OK : comm_peer_adopt(c, l);
    if (l->purpose == ECCL_LINK_RING && l->pool > 0) /* never prev's connection 0 */
        return l->outgoing || l->peer_id != c->prev_ref.peer_id ? ECCL_OK : pool_adopt_prev(c, l);
    if (l->purpose == ECCL_LINK_RING && l->peer_id == c->prev_ref.peer_id && !c->link_prev) {
        if (l->pool_size > 1 && comm_pool_alloc(c) != ECCL_OK) return ECCL_ERR_NO_MEMORY;
        c->link_prev = l;
        c->pool_in = l->pool_size;
        if (l->pool_size > 1) {
            /* Its pool's other connections that said hello first. */
            for (p2p_link *o = c->links, *n; o; o = n) {
                n = o->next;
                /* Not ours to next (with two peers, next is prev). */
                if (o != l && o->hello_seen && !o->outgoing && o->purpose == ECCL_LINK_RING &&
                    o->pool > 0 &&
                    o->epoch == c->epoch && o->peer_id == l->peer_id &&
                    pool_adopt_prev(c, o) != ECCL_OK)
                    comm_link_close(c, o);
            }
        }
        comm_check_ring_ready(c);
    }
    for (uint32_t k = 0; k < ECCL_WIRE_TREE_CHILDREN; k++) {
        p2p_link **slot = &c->link_tree[ECCL_TREE_CHILD0 + k];
        if (l->purpose == ECCL_LINK_TREE && c->child_id[k] && l->peer_id == c->child_id[k] &&
            !*slot)
            *slot = l;
    }
    return ECCL_OK;
}

eccl_result comm_on_ring(eccl_comm *c, const eccl_msg_ring *m)
{
    if (m->peer_group != c->params.peer_group || (c->world && m->epoch <= c->epoch))
        return ECCL_ERR_PROTOCOL;
    comm_links_close_upto(c, m->epoch - 1);
    comm_peers_reset(c); /* a new epoch's ranks: a new address book */
    c->epoch = m->epoch;
    c->world = m->world_size;
    c->rank = m->rank;
    comm_trace_epoch(c);
    c->local_size = m->local_size;
    c->host_ranks = m->host_ranks;
    eccl_engine_set_host_ranks(&c->eng, m->host_ranks);
    c->next_ref = m->next;
    c->prev_ref = m->prev;
    c->parent_ref = m->tree_parent;
    memcpy(c->child_id, m->tree_child, sizeof c->child_id);
    c->frozen = 0;
    c->ring_ready = 0;
    c->next_retry_at = 0;
    c->parent_retry_at = 0;
    c->parent_backoff = 0;
    c->pool_in = 0; /* the new prev's hello tells */
    for (uint32_t k = 0; c->pslot && k < ECCL_WIRE_MAX_POOL; k++)
        c->pslot[k].retry_at = c->pslot[k].backoff = 0;
    c->n_recent = c->recent_head = 0;
    if (c->phase == PHASE_REGISTERING) c->phase = PHASE_PENDING;
    ECCL_INFO(c->env, "ring epoch %u: rank %u of %u", c->epoch, c->rank, c->world);
    if (c->world > 1) {
        eccl_result rc = comm_link_connect_next(c);
        if (rc != ECCL_OK && rc != ECCL_ERR_CONNECT) return rc;
        for (p2p_link *l = c->links, *n; l; l = n) {
            n = l->next;
            if (l != c->link_next && l->hello_seen && comm_link_adopt(c, l) != ECCL_OK)
                comm_link_close(c, l);
        }
    }
    comm_check_ring_ready(c);
    return ECCL_OK;
}


/* A view change may hand a call's result from one survivor to
 * another (docs/protocol.md, "The commit rule") if it is a replicated
 * output (all-reduce, all-gather, broadcast: every rank ends with the
 * same bytes), exact, at most ECCL_WIRE_MAX_REPAIR, in host memory we can
 * read and write (a device call runs on its host mirror; the
 * device-resident ring and the simulator's phantom buffers do not). */
static size_t call_repair_bytes(const eccl_comm *c, const eccl_coll_call *k)
{
    if (k->on_device || k->quant != ECCL_QUANT_NONE || eccl_dev_is_phantom(c->env, k->recvbuf)) return 0;
    size_t n = comm_call_replicated_bytes(k);
    return n <= ECCL_WIRE_MAX_REPAIR ? n : 0;
}

/* (comm_internal.h) */
size_t comm_call_replicated_bytes(const eccl_coll_call *k)
{
    size_t es = eccl_dtype_size(k->dtype);
    switch (k->kind) {
    case ECCL_COLL_ALLREDUCE:
    case ECCL_COLL_BROADCAST: return k->count * es;
    case ECCL_COLL_ALLGATHER: return (k->vcounts ? k->count : k->count * k->nranks) * es;
    default: return 0;
    }
}

static void report_add(eccl_wire_op_flag *ops, uint32_t cap, uint32_t *n, uint64_t tag, uint8_t flag)
{
    if (*n < cap) ops[(*n)++] = (eccl_wire_op_flag){tag, flag};
}

/* (comm_internal.h) Of a started op: call_repair_bytes. */
size_t comm_op_repair_bytes(const eccl_comm *c, const eccl_request *r)
{
    return r->started ? call_repair_bytes(c, &r->call) : 0;
}

static uint8_t report_flag(const eccl_comm *c, const eccl_request *r)
{
    int have = op_have_full(r);
    uint8_t flag = (uint8_t)((have ? ECCL_VIEW_HELD : 0) | (r->call.kind == ECCL_COLL_RECV ? ECCL_VIEW_RECEIVER : 0));
    if (comm_op_repair_bytes(c, r)) flag |= have ? ECCL_VIEW_SOURCE : ECCL_VIEW_REPAIRABLE;
    return flag;
}

/* The frozen op of `tag`, or NULL. */
static eccl_request *frozen_op(eccl_comm *c, uint64_t tag)
{
    for (eccl_request *r = c->ops; r; r = r->next)
        if (r->call.tag == tag && r->state == OP_FROZEN) return r;
    return NULL;
}

eccl_result comm_on_repair_ask(eccl_comm *c, const eccl_msg_repair *q)
{
    eccl_request *r = frozen_op(c, q->tag);
    eccl_msg d = {.type = ECCL_MSG_REPAIR_DATA};
    d.u.repair.epoch = q->epoch;
    d.u.repair.tag = q->tag;
    /* Empty: we cannot (the op is gone); the master asks another holder. */
    if (r && op_have_full(r)) {
        d.u.repair.len = (uint32_t)comm_op_repair_bytes(c, r);
        /* Returned early: the caller owns recvbuf again; we kept a copy. */
        d.u.repair.bytes = r->returned ? r->kept->ptr : r->call.recvbuf;
    }
    return comm_master_send(c, &d);
}

static void record_free(eccl_comm *c, comm_record *rec)
{
    eccl_bufpool_put(&c->pool, rec->bytes);
    free(rec);
}

/* A result for a tag we have not started (not called yet, or queued): kept
 * until the decision says whether the tag committed. */
static eccl_result record_put(eccl_comm *c, const eccl_msg_repair *p)
{
    for (comm_record **q = &c->records; *q; q = &(*q)->next) {
        if ((*q)->tag == p->tag && !(*q)->committed) { /* a repeat of this view change's */
            comm_record *old = *q;
            *q = old->next;
            record_free(c, old);
            break;
        }
    }
    comm_record *rec = malloc(sizeof *rec);
    eccl_buf *bytes = rec ? eccl_bufpool_get(&c->pool, p->len) : NULL;
    if (!bytes) {
        /* We drop the master: a loss to the others, never a wrong result. */
        ECCL_WARN(c->env, "tag %llu: no memory for the %u bytes of its committed result",
                  (unsigned long long)p->tag, p->len);
        free(rec);
        return ECCL_ERR_NO_MEMORY;
    }
    rec->tag = p->tag;
    rec->epoch = p->epoch;
    rec->world = c->world; /* the decision's epoch is still ours: its RING comes after it */
    rec->committed = 0;
    rec->len = p->len;
    rec->bytes = bytes;
    c->env->dev->copy(c->env->dev_ctx, bytes->ptr, p->bytes, p->len);
    rec->next = c->records;
    c->records = rec;
    ECCL_DEBUG(c->env, "tag %llu: a result of %u bytes for our next call of it", (unsigned long long)p->tag, p->len);
    return ECCL_OK;
}

/* The decision of `v` came: records of its epoch whose tag it committed
 * stay, for our next call of the tag; the others go. */
static void records_decide(eccl_comm *c, const eccl_msg_view *v)
{
    for (comm_record **q = &c->records; *q;) {
        comm_record *rec = *q;
        if (rec->committed) {
            q = &rec->next;
            continue;
        }
        for (uint32_t i = 0; i < v->n_ops && rec->epoch == v->epoch; i++) {
            eccl_wire_op_flag e = eccl_wire_view_op(v, i);
            if (e.tag == rec->tag) rec->committed = e.flag != 0;
        }
        if (rec->committed) {
            q = &rec->next;
        } else {
            *q = rec->next;
            record_free(c, rec);
        }
    }
}

int comm_record_take(eccl_comm *c, eccl_request *r)
{
    for (comm_record **q = &c->records; *q; q = &(*q)->next) {
        comm_record *rec = *q;
        if (rec->tag != r->call.tag || !rec->committed) continue;
        *q = rec->next;
        r->state = OP_RUNNING; /* nothing was sent: finishing restores nothing */
        if (call_repair_bytes(c, &r->call) == rec->len) {
            r->call.nranks = rec->world; /* what eccl_reduce_info reports: the result's world */
            c->env->dev->copy(c->env->dev_ctx, r->call.recvbuf, rec->bytes->ptr, rec->len);
            ECCL_DEBUG(c->env, "tag %llu: committed while not called here; its result handed over",
                       (unsigned long long)r->call.tag);
            comm_op_finish(c, r, ECCL_OK);
        } else {
            /* Not the call the others made (kind, size or buffer kind). */
            ECCL_WARN(c->env, "tag %llu committed elsewhere with %u bytes of result; this call cannot take them",
                      (unsigned long long)r->call.tag, rec->len);
            comm_op_finish(c, r, ECCL_ERR_PEER_LOST);
        }
        record_free(c, rec);
        return 1;
    }
    return 0;
}

void comm_records_free(eccl_comm *c)
{
    for (comm_record *rec = c->records, *n; rec; rec = n) {
        n = rec->next;
        record_free(c, rec);
    }
    c->records = NULL;
}

eccl_result comm_on_repair_put(eccl_comm *c, const eccl_msg_repair *p)
{
    eccl_request *r = frozen_op(c, p->tag);
    if (!r) return record_put(c, p);
    if (op_have_full(r) || r->repaired || comm_op_repair_bytes(c, r) != p->len) {
        ECCL_WARN(c->env, "repair of tag %llu (%u bytes) fits no frozen op here: ignored",
                  (unsigned long long)p->tag, p->len);
        return ECCL_OK;
    }
    c->env->dev->copy(c->env->dev_ctx, r->call.recvbuf, p->bytes, p->len);
    r->repaired = 1;
    return ECCL_OK;
}

eccl_result comm_on_view_query(eccl_comm *c, uint32_t epoch)
{
    /* What already arrived counts: a peer that finished and left may have
     * delivered our last bytes just before the master noticed it leave. */
    for (uint32_t i = 0; i < comm_role_links_n(c); i++) {
        p2p_link *l = comm_role_link_at(c, i);
        if (l) comm_link_service(c, l);
    }
    comm_flush_and_complete(c);
    c->frozen = 1;
    c->ring_ready = 0;
    /* Freezing makes the report final: no byte moves until the decision. */
    /* A link that has not said hello yet belongs to no frozen op (it may be
     * a shared-state fetcher, which must go on): its frames wait anyway
     * until it has a role. */
    for (p2p_link *l = c->links; l; l = l->next)
        if (l->hello_seen) eccl_chan_pause(&l->ch, 1);
    /* The entries go into an array sized to this report (usually a
     * handful), not a worst-case one: view changes are rare, and a
     * per-comm 64 KiB array would cost 6 GiB across 100k simulated ranks. */
    size_t cap = 0;
    for (eccl_request *r = c->ops; r; r = r->next) cap += r->state == OP_RUNNING;
    for (uint32_t i = 0; i < c->n_recent; i++)
        cap += c->recent[(c->recent_head + c->cap_recent - 1 - i) % c->cap_recent].ok;
    if (cap > ECCL_WIRE_MAX_OPS) cap = ECCL_WIRE_MAX_OPS;
    eccl_wire_op_flag *ops = cap ? malloc(cap * sizeof *ops) : NULL;
    if (cap && !ops) return ECCL_ERR_NO_MEMORY;
    uint32_t n_ops = 0;
    for (eccl_request *r = c->ops; r; r = r->next) {
        if (r->state != OP_RUNNING) continue;
        r->state = OP_FROZEN;
        report_add(ops, (uint32_t)cap, &n_ops, r->call.tag, report_flag(c, r));
    }
    /* Ops we completed count as held: we returned success for them. */
    for (uint32_t i = 0; i < c->n_recent; i++) {
        uint32_t k = (c->recent_head + c->cap_recent - 1 - i) % c->cap_recent;
        if (c->recent[k].ok)
            report_add(ops, (uint32_t)cap, &n_ops, c->recent[k].tag,
                       (uint8_t)(ECCL_VIEW_HELD | (c->recent[k].receiver ? ECCL_VIEW_RECEIVER : 0)));
    }
    eccl_msg m = {.type = ECCL_MSG_VIEW_REPORT};
    m.u.view.epoch = epoch;
    m.u.view.n_ops = n_ops;
    m.u.view.ops = ops;
    eccl_result rc = comm_master_send(c, &m);
    free(ops);
    return rc;
}

/* Index of `tag` in the abort records, or -1. */
static int aborted_find(const eccl_comm *c, uint64_t tag)
{
    for (uint32_t i = 0; i < c->n_aborted_tags; i++) {
        uint32_t k = (c->aborted_head + c->cap_aborted - 1 - i) % c->cap_aborted;
        if (c->aborted_tags[k] == tag) return (int)k;
    }
    return -1;
}

/* Consumes the abort record of `tag`, if any. */
int comm_aborted_take(eccl_comm *c, uint64_t tag)
{
    int k = aborted_find(c, tag);
    if (k < 0) return 0;
    /* Fill the hole with the oldest record and forget the oldest slot. */
    uint32_t oldest = (c->aborted_head + c->cap_aborted - c->n_aborted_tags) % c->cap_aborted;
    c->aborted_tags[k] = c->aborted_tags[oldest];
    c->n_aborted_tags--;
    return 1;
}

static void aborted_add(eccl_comm *c, uint64_t tag)
{
    if (aborted_find(c, tag) >= 0) return;
    if (c->n_aborted_tags == c->cap_aborted)
        comm_ring_grow((void **)&c->aborted_tags, &c->cap_aborted, &c->aborted_head,
                       c->n_aborted_tags, sizeof *c->aborted_tags, COMM_ABORTED_TAGS);
    c->aborted_tags[c->aborted_head] = tag;
    c->aborted_head = (c->aborted_head + 1) % c->cap_aborted;
    if (c->n_aborted_tags < c->cap_aborted) c->n_aborted_tags++;
}

/* Whether we finished `tag` in this epoch (either way). */
static int recently_finished(const eccl_comm *c, uint64_t tag)
{
    for (uint32_t i = 0; i < c->n_recent; i++)
        if (c->recent[(c->recent_head + c->cap_recent - 1 - i) % c->cap_recent].tag == tag) return 1;
    return 0;
}

eccl_result comm_on_view_decide(eccl_comm *c, const eccl_msg_view *v)
{
    /* Queued frames may point into buffers an abort is about to restore. */
    comm_links_close_upto(c, v->epoch);
    records_decide(c, v);
    /* A tag aborted elsewhere that we had not started fails here too: a
     * queued call of it now, or else our next call of it. */
    for (uint32_t i = 0; i < v->n_ops; i++) {
        eccl_wire_op_flag e = eccl_wire_view_op(v, i);
        if (e.flag) continue;
        eccl_request *r = comm_op_find(c, e.tag);
        if (!r) {
            /* Not if we already failed it ourselves (timeout, no memory). */
            if (!recently_finished(c, e.tag)) aborted_add(c, e.tag);
        } else if (r->state == OP_QUEUED) {
            r->call.nranks = c->world;
            comm_op_finish(c, r, ECCL_ERR_PEER_LOST);
        }
    }
    for (eccl_request *r = c->ops; r; r = r->next) {
        if (r->state != OP_FROZEN) continue;
        int commit = 0;
        for (uint32_t i = 0; i < v->n_ops; i++) {
            eccl_wire_op_flag e = eccl_wire_view_op(v, i);
            if (e.tag == r->call.tag) commit = e.flag;
        }
        /* A point-to-point sender committed without its ACK: its receiver
         * holds every byte (core/coll/p2p.h), which is all a send owes. */
        int done = op_have_full(r) || r->repaired || r->call.kind == ECCL_COLL_SEND;
        comm_op_finish(c, r, commit && done ? ECCL_OK : ECCL_ERR_PEER_LOST);
    }
    return ECCL_OK;
}
