/* P2p links: opening, adopting into roles, closing, and the frames they
 * carry (hello, data for ops, shared-state fetches, probes). */
#include "comm/comm_internal.h"

/* ---- links ---------------------------------------------------------------- */

/* A link whose conn the caller opens next (the conn's user pointer is the
 * link, so it must exist first). */
static p2p_link *link_new_in(eccl_comm *c, p2p_link **list)
{
    p2p_link *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    if (eccl_chan_init(&l->ch, c->env, NULL, COMM_RBUF_P2P) != ECCL_OK) {
        eccl_chan_close(&l->ch);
        free(l);
        return NULL;
    }
    l->early_tail = &l->early;
    l->next = *list;
    *list = l;
    return l;
}

p2p_link *comm_link_new(eccl_comm *c) { return link_new_in(c, &c->links); }


/* Takes l out of whichever list holds it. */
static void link_unlist(eccl_comm *c, p2p_link *l)
{
    p2p_link **lists[2] = {&c->links, &c->side_links};
    for (int i = 0; i < 2; i++) {
        for (p2p_link **p = lists[i]; *p; p = &(*p)->next) {
            if (*p == l) {
                *p = l->next;
                return;
            }
        }
    }
}

void comm_early_free(eccl_comm *c, early_frame *e)
{
    eccl_bufpool_put(&c->pool, e->buf);
    free(e);
}

void comm_link_close(eccl_comm *c, p2p_link *l)
{
    if (l->ch.closed) return; /* already in the graveyard */
    /* An op passed by as quiet looked this link up: it looks again. */
    for (eccl_request *r = c->ops; r; r = r->next) r->quiet = 0;
    eccl_gate_leave(&c->gate, l);
    link_unlist(c, l);
    if (c->link_next == l || c->link_prev == l) {
        /* The ring is broken until the master hands out the next one. */
        c->ring_ready = 0;
        if (c->link_next == l) c->link_next = NULL;
        if (c->link_prev == l) c->link_prev = NULL;
    }
    for (int i = 0; i < ECCL_TREE_ROLES; i++)
        if (c->link_tree[i] == l) c->link_tree[i] = NULL;
    if (l->purpose == ECCL_LINK_PEER && l->hello_seen) comm_peer_link_lost(c, l);
    if (c->pslot && l->pool) {
        if (c->pslot[l->pool].next == l) c->pslot[l->pool].next = NULL;
        if (c->pslot[l->pool].prev == l) c->pslot[l->pool].prev = NULL;
    }
    eccl_chan_close(&l->ch);
    for (early_frame *e = l->early, *n; e; e = n) {
        n = e->next;
        comm_early_free(c, e);
    }
    if (l->receiving) comm_early_free(c, l->receiving);
    l->early = l->receiving = NULL;
    l->early_tail = &l->early;
    l->early_bytes = 0;
    l->next = c->graveyard;
    c->graveyard = l;
}

/* Drops every link of epochs up to `epoch` (every link for UINT32_MAX). A
 * link that has not said hello yet may belong to a newer ring: it stays. */
void comm_links_close_upto(eccl_comm *c, uint32_t epoch)
{
    p2p_link *l = c->links;
    while (l) {
        p2p_link *n = l->next;
        if (epoch == UINT32_MAX || (l->hello_seen && l->epoch <= epoch)) comm_link_close(c, l);
        l = n;
    }
    c->ring_ready = 0;
}


/* Opens a link of this epoch to `ref` and says hello; NULL if the connect
 * failed at once (*rc says why). */
/* Opens a link to `ref` in `list` and says hello for `purpose` in `epoch`
 * (a ring epoch, or a shared-state round). */
p2p_link *comm_link_connect_in(eccl_comm *c, p2p_link **list, const eccl_wire_peer_ref *ref,
                               uint32_t purpose, uint32_t epoch, uint32_t pool,
                               uint32_t pool_size, eccl_result *rc)
{
    eccl_conn *conn = NULL;
    p2p_link *l = link_new_in(c, list);
    if (!l) {
        *rc = ECCL_ERR_NO_MEMORY;
        return NULL;
    }
    *rc = c->env->net->connect(c->env->net_ctx, ref->addr, l, &conn);
    if (*rc != ECCL_OK) {
        comm_link_close(c, l);
        return NULL;
    }
    if ((*rc = eccl_chan_attach(&l->ch, conn, 1)) != ECCL_OK) {
        comm_link_close(c, l);
        return NULL;
    }
    l->peer_id = ref->peer_id;
    l->epoch = epoch;
    l->purpose = purpose;
    l->pool = pool;
    l->pool_size = pool_size > 1 ? pool_size : 1;
    l->outgoing = 1;
    l->hello_seen = 1;
    eccl_msg m = {.type = ECCL_MSG_P2P_HELLO};
    m.u.hello.peer_id = c->peer_id;
    m.u.hello.peer_group = c->params.peer_group;
    m.u.hello.epoch = epoch;
    m.u.hello.purpose = purpose;
    m.u.hello.rank = purpose == ECCL_LINK_PEER ? c->rank : 0;
    if (pool_size > 1) { /* a pool of one says nothing: the hello it always sent */
        m.u.hello.pool = pool;
        m.u.hello.pool_size = pool_size;
    }
    *rc = eccl_chan_send_msg(&l->ch, &m);
    return l;
}

static p2p_link *link_connect(eccl_comm *c, const eccl_wire_peer_ref *ref, uint32_t purpose,
                              eccl_result *rc)
{
    return comm_link_connect_in(c, &c->links, ref, purpose, c->epoch, 0, 0, rc);
}

eccl_result comm_link_connect_next(eccl_comm *c)
{
    eccl_result rc;
    /* Connection 0 of our pool: its hello tells next the pool's size. */
    c->link_next = comm_link_connect_in(c, &c->links, &c->next_ref, ECCL_LINK_RING, c->epoch, 0,
                                        c->pool_out, &rc);
    if (!c->link_next) {
        c->next_retry_at = comm_retry_at(c, &c->next_backoff);
        return rc;
    }
    comm_check_ring_ready(c); /* a reconnect may complete the ring again */
    return rc;
}

/* Lazy: connection k >= 1 of our pool to `next` opens when an op mapped to
 * it first runs in the epoch (a simulated 100k-rank run with a pool of 4
 * would otherwise hold 4x the sockets before anyone needs them), and after
 * a failure only once its back-off passed. NULL until then. */
p2p_link *comm_pool_link_next(eccl_comm *c, uint32_t k)
{
    struct pool_slot *ps = &c->pslot[k];
    if (ps->next || ps->retry_at || c->frozen || !c->ring_ready) return ps->next;
    eccl_result rc;
    ps->next = comm_link_connect_in(c, &c->links, &c->next_ref, ECCL_LINK_RING, c->epoch, k,
                                    c->pool_out, &rc);
    if (!ps->next) ps->retry_at = comm_retry_at(c, &ps->backoff);
    return ps->next;
}

/* Lazy: a rank opens its tree link when a tree op first needs it. */
void comm_link_connect_parent(eccl_comm *c)
{
    eccl_result rc;
    if (c->link_tree[ECCL_TREE_PARENT] || c->parent_retry_at || c->frozen || c->rank == 0) return;
    c->link_tree[ECCL_TREE_PARENT] = link_connect(c, &c->parent_ref, ECCL_LINK_TREE, &rc);
    if (!c->link_tree[ECCL_TREE_PARENT]) c->parent_retry_at = comm_retry_at(c, &c->parent_backoff);
}

/* ---- p2p data --------------------------------------------------------------- */

static eccl_result link_on_msg(void *owner, eccl_chan *ch, const eccl_msg *m)
{
    eccl_comm *c = owner;
    p2p_link *l = (p2p_link *)ch;
    if (link_is_sync(l) && m->type == ECCL_MSG_SYNC_FETCH) return comm_sync_on_fetch(c, l, &m->u.sync_fetch);
    if (m->type != ECCL_MSG_P2P_HELLO || l->hello_seen ||
        m->u.hello.peer_group != c->params.peer_group)
        return ECCL_ERR_PROTOCOL;
    l->hello_seen = 1;
    l->peer_id = m->u.hello.peer_id;
    l->epoch = m->u.hello.epoch;
    l->purpose = m->u.hello.purpose;
    l->pool = m->u.hello.pool;
    l->pool_size = m->u.hello.pool_size;
    l->peer_rank = m->u.hello.rank;
    if (l->purpose == ECCL_LINK_PROBE && !c->opt.active) return ECCL_ERR_PROTOCOL;
    if (l->purpose == ECCL_LINK_SYNC || l->purpose == ECCL_LINK_PROBE) {
        /* A fetcher or a prober: off the ring's list, so view changes
         * leave it be. */
        link_unlist(c, l);
        l->next = c->side_links;
        c->side_links = l;
        return ECCL_OK;
    }
    return comm_link_adopt(c, l);
}

int comm_link_role(const eccl_comm *c, const p2p_link *l)
{
    if (l == c->link_prev) return ECCL_ROLE_PREV; /* ring 0 flows from prev */
    if (l == c->link_next) return ECCL_ROLE_NEXT; /* ring 1 from next */
    for (int i = 0; i < ECCL_TREE_ROLES; i++)
        if (l == c->link_tree[i]) return ECCL_ROLE_PARENT + i;
    if (c->pslot && l->pool) {
        if (l == c->pslot[l->pool].prev) return ECCL_ROLE_PREV;
        if (l == c->pslot[l->pool].next) return ECCL_ROLE_NEXT;
    }
    return comm_peer_role(c, l);
}

static eccl_result link_on_data(void *owner, eccl_chan *ch, const eccl_wire_data *d,
                                void **dst)
{
    eccl_comm *c = owner;
    p2p_link *l = (p2p_link *)ch;
    if (link_is_sync(l)) return comm_sync_on_data(c, l, d, dst);
    if (link_is_probe(l)) return comm_probe_on_data(c, l, d, dst);
    int role = comm_link_role(c, l);
    if (!l->hello_seen || d->epoch != l->epoch) return ECCL_ERR_PROTOCOL;
    if (role == ROLE_NONE || c->frozen) return ECCL_ERR_AGAIN; /* not our epoch yet */
    eccl_request *r = comm_op_find(c, d->tag);
    if (!r || r->state == OP_QUEUED || (r->state == OP_RUNNING && !comm_op_expects_on(c, r, l, role))) {
        /* A neighbour started a collective we have not called yet (maybe
         * the next call with a tag whose last call is still finishing). */
        /* Since when it waits matters (late.c): the frame came then. */
        if (!l->held_ns || l->held_tag != d->tag) l->held_ns = now_ns(c), l->held_tag = d->tag;
        if (d->len > COMM_EARLY_MAX || l->early_bytes + d->len > COMM_EARLY_LIMIT)
            return ECCL_ERR_AGAIN;
        early_frame *e = calloc(1, sizeof *e);
        if (!e) return ECCL_ERR_AGAIN;
        e->d = *d;
        e->at_ns = l->held_ns;
        l->held_ns = 0;
        if (d->len && !(e->buf = eccl_bufpool_get(&c->pool, d->len))) {
            free(e);
            return ECCL_ERR_AGAIN;
        }
        l->receiving = e;
        *dst = e->buf ? e->buf->ptr : NULL;
        comm_rate_begin(c, l, d);
        return ECCL_OK;
    }
    if (r->state != OP_RUNNING || r->call.epoch != d->epoch) return ECCL_ERR_PROTOCOL;
    if (l->held_ns) {
        /* Held unread on the link since before its call was made (late.c). */
        if (l->held_tag == d->tag && (!r->heard_early_ns || l->held_ns < r->heard_early_ns))
            r->heard_early_ns = l->held_ns;
        l->held_ns = 0;
    }
    eccl_result rc = comm_op_recv(r, role, d, dst);
    if (rc == ECCL_OK) comm_rate_begin(c, l, d);
    return rc;
}

static eccl_result link_on_data_done(void *owner, eccl_chan *ch, const eccl_wire_data *d)
{
    eccl_comm *c = owner;
    p2p_link *l = (p2p_link *)ch;
    if (link_is_sync(l)) return comm_sync_on_data_done(c, l, d);
    if (link_is_probe(l)) return comm_probe_on_data_done(c, l, d);
    comm_rate_done(c, l, d);
    if (l->receiving) {
        *l->early_tail = l->receiving;
        l->early_tail = &l->receiving->next;
        l->early_bytes += d->len;
        l->receiving = NULL;
        /* The payload took more than one read and the op was called in
         * between: it already replayed the others, so replay this one. */
        eccl_request *r = comm_op_find(c, d->tag);
        return r && r->state == OP_RUNNING && comm_op_expects_on(c, r, l, comm_link_role(c, l))
                   ? comm_replay_early(c, r, l)
                   : ECCL_OK;
    }
    eccl_request *r = comm_op_find(c, d->tag);
    if (!r || r->state != OP_RUNNING) return ECCL_ERR_PROTOCOL;
    return comm_op_recv_done(r, comm_link_role(c, l), d);
}

const eccl_chan_handler comm_link_handler = {link_on_msg, link_on_data, link_on_data_done};
