/* The address book and peer links: a link to any rank of the epoch, for
 * the algorithms that talk beyond their ring neighbours (coll/algo.h,
 * ECCL_ROLE_PEER). RING names only next, prev and the tree's parent, so a
 * rank learns other ranks' addresses on demand: the first time an op
 * wants rank r, comm asks the master (PEER_QUERY, batched once per step
 * and passed through relays like any control frame) and connects when the
 * PEER_REPLY arrives. Of each pair the lower rank connects and the higher
 * accepts (the hello names the sender's rank), so a pair never holds two
 * links and the higher rank needs no address at all. A rank holds entries
 * only for the ranks its ops talked to: log N for the log-depth
 * algorithms, N for all-to-all, never the whole world by default (a
 * simulated 96K-rank run holds 96K comms). The book is the epoch's: RING
 * starts a new one. */
#include "comm/comm_internal.h"

#define PEER_EMPTY UINT32_MAX
#define PEERS_START 8u

static uint32_t slot_of(uint32_t rank, uint32_t cap)
{
    return (rank * 2654435761u) & (cap - 1); /* Fibonacci hashing; cap is a power of two */
}

static comm_peer *peer_find(const eccl_comm *c, uint32_t rank)
{
    if (!c->peers) return NULL;
    for (uint32_t i = slot_of(rank, c->cap_peers);; i = (i + 1) & (c->cap_peers - 1)) {
        comm_peer *p = &c->peers[i];
        if (p->rank == rank) return p;
        if (p->rank == PEER_EMPTY) return NULL;
    }
}

/* Grows the table to hold twice as many entries, keeping every entry. */
static eccl_result peers_grow(eccl_comm *c)
{
    uint32_t cap = c->cap_peers ? 2 * c->cap_peers : PEERS_START;
    comm_peer *t = malloc(cap * sizeof *t);
    if (!t) return ECCL_ERR_NO_MEMORY;
    for (uint32_t i = 0; i < cap; i++) t[i].rank = PEER_EMPTY;
    for (uint32_t k = 0; k < c->cap_peers; k++) {
        comm_peer *o = &c->peers[k];
        if (o->rank == PEER_EMPTY) continue;
        uint32_t i = slot_of(o->rank, cap);
        while (t[i].rank != PEER_EMPTY) i = (i + 1) & (cap - 1);
        t[i] = *o;
    }
    free(c->peers);
    c->peers = t;
    c->cap_peers = cap;
    return ECCL_OK;
}

/* The entry of `rank`, made if new; NULL without memory. */
static comm_peer *peer_get(eccl_comm *c, uint32_t rank)
{
    comm_peer *p = peer_find(c, rank);
    if (p) return p;
    if (2 * (c->n_peers + 1) > c->cap_peers && peers_grow(c) != ECCL_OK) return NULL;
    uint32_t i = slot_of(rank, c->cap_peers);
    while (c->peers[i].rank != PEER_EMPTY) i = (i + 1) & (c->cap_peers - 1);
    p = &c->peers[i];
    memset(p, 0, sizeof *p);
    p->rank = rank;
    c->n_peers++;
    return p;
}

void comm_peers_reset(eccl_comm *c)
{
    for (uint32_t i = 0; i < c->cap_peers; i++) c->peers[i].rank = PEER_EMPTY;
    c->n_peers = 0;
    c->n_ask = 0;
    c->peers_retry_at = 0;
}

void comm_peers_free(eccl_comm *c)
{
    free(c->peers);
    free(c->ask);
    c->peers = NULL;
    c->ask = NULL;
    c->cap_peers = c->n_peers = c->n_ask = c->cap_ask = 0;
}

static void ask_add(eccl_comm *c, comm_peer *p)
{
    if (c->n_ask == c->cap_ask) {
        uint32_t cap = c->cap_ask ? 2 * c->cap_ask : 16;
        uint32_t *a = realloc(c->ask, cap * sizeof *a);
        if (!a) return; /* asked again at the next pump */
        c->ask = a;
        c->cap_ask = cap;
    }
    c->ask[c->n_ask++] = p->rank;
    p->asked = 1;
}

static int rank_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sends the ranks asked for since the last flush, sorted (the wire wants
 * them increasing), in queries of ECCL_WIRE_MAX_PEER_REFS. */
void comm_peers_flush_asks(eccl_comm *c)
{
    if (!c->n_ask || !c->master_open) return;
    qsort(c->ask, c->n_ask, sizeof *c->ask, rank_cmp);
    for (uint32_t at = 0; at < c->n_ask; at += ECCL_WIRE_MAX_PEER_REFS) {
        eccl_msg m = {.type = ECCL_MSG_PEER_QUERY};
        m.u.peer_query.epoch = c->epoch;
        m.u.peer_query.n = c->n_ask - at < ECCL_WIRE_MAX_PEER_REFS ? c->n_ask - at : ECCL_WIRE_MAX_PEER_REFS;
        m.u.peer_query.ranks = c->ask + at;
        comm_master_send(c, &m);
    }
    c->n_ask = 0;
}

eccl_result comm_on_peer_reply(eccl_comm *c, const eccl_msg_peer_reply *m)
{
    if (m->epoch != c->epoch) return ECCL_OK; /* asked in an epoch that is over */
    uint32_t pos = 0, i = 0;
    eccl_wire_peer_entry e;
    while (eccl_wire_peer_reply_next(m, &pos, &i, &e)) {
        comm_peer *p = peer_find(c, e.rank);
        if (!p || !p->asked) return ECCL_ERR_PROTOCOL; /* the master answers only what we asked */
        p->known = 1;
        p->ref = e.ref;
    }
    return ECCL_OK;
}

p2p_link *comm_peer_link(eccl_comm *c, uint32_t rank)
{
    if (rank >= c->world || rank == c->rank) return NULL;
    comm_peer *p = peer_get(c, rank);
    if (!p) return NULL; /* no memory: asked again at the next pump */
    if (p->link || rank < c->rank || c->frozen || p->retry_at) return p->link;
    if (!p->known) {
        if (!p->asked) ask_add(c, p);
        return NULL;
    }
    eccl_result rc;
    p->link = comm_link_connect_in(c, &c->links, &p->ref, ECCL_LINK_PEER, c->epoch, 0, 0, &rc);
    if (p->link) {
        p->link->peer_rank = rank;
    } else {
        p->retry_at = comm_retry_at(c, &p->backoff);
        if (!c->peers_retry_at || p->retry_at < c->peers_retry_at) c->peers_retry_at = p->retry_at;
    }
    return p->link;
}

eccl_result comm_peer_adopt(eccl_comm *c, p2p_link *l)
{
    /* Only a lower rank connects to us, once. */
    if (l->outgoing || l->peer_rank >= c->rank) return ECCL_ERR_PROTOCOL;
    comm_peer *p = peer_get(c, l->peer_rank);
    if (!p) return ECCL_ERR_NO_MEMORY;
    if (p->link && p->link != l) return ECCL_ERR_PROTOCOL;
    p->link = l;
    c->pool_adopted = 1; /* its frames held so far may now be placed */
    return ECCL_OK;
}

uint64_t comm_peer_id_of(const eccl_comm *c, uint32_t rank)
{
    const comm_peer *p = peer_find(c, rank);
    if (!p) return 0;
    return p->known ? p->ref.peer_id : p->link ? p->link->peer_id : 0;
}

const char *comm_peer_addr_of(const eccl_comm *c, const p2p_link *l)
{
    if (l->peer_id && l->peer_id == c->prev_ref.peer_id) return c->prev_ref.addr;
    if (l->peer_id && l->peer_id == c->next_ref.peer_id) return c->next_ref.addr;
    if (l->purpose != ECCL_LINK_PEER) return NULL;
    const comm_peer *p = peer_find(c, l->peer_rank);
    return p && p->known && p->ref.peer_id == l->peer_id ? p->ref.addr : NULL;
}

int comm_peer_role(const eccl_comm *c, const p2p_link *l)
{
    if (l->purpose != ECCL_LINK_PEER || l->epoch != c->epoch) return ROLE_NONE;
    const comm_peer *p = peer_find(c, l->peer_rank);
    return p && p->link == l ? ECCL_ROLE_PEER + (int)l->peer_rank : ROLE_NONE;
}

void comm_peer_link_lost(eccl_comm *c, p2p_link *l)
{
    comm_peer *p = peer_find(c, l->peer_rank);
    if (!p || p->link != l) return;
    p->link = NULL;
    /* Its frames are lost (the view change settles their ops); the next
     * op that needs the rank reconnects after a back-off. */
    if (l->outgoing && !c->frozen) {
        p->retry_at = comm_retry_at(c, &p->backoff);
        if (!c->peers_retry_at || p->retry_at < c->peers_retry_at) c->peers_retry_at = p->retry_at;
    }
}

uint64_t comm_peers_timers(eccl_comm *c, uint64_t now)
{
    if (!c->peers_retry_at || now < c->peers_retry_at) return c->peers_retry_at;
    uint64_t next = 0;
    for (uint32_t i = 0; i < c->cap_peers; i++) {
        comm_peer *p = &c->peers[i];
        if (p->rank == PEER_EMPTY || !p->retry_at) continue;
        if (now >= p->retry_at) p->retry_at = 0; /* the next pump reconnects when needed */
        else if (!next || p->retry_at < next) next = p->retry_at;
    }
    c->peers_retry_at = next;
    return next;
}

p2p_link *comm_peer_open(const eccl_comm *c, uint32_t rank)
{
    const comm_peer *p = peer_find(c, rank);
    return p ? p->link : NULL;
}

uint32_t comm_peer_slots(const eccl_comm *c) { return c->cap_peers; }

p2p_link *comm_peer_slot_link(const eccl_comm *c, uint32_t i)
{
    return i < c->cap_peers && c->peers[i].rank != PEER_EMPTY ? c->peers[i].link : NULL;
}

/* ---- the ring's members, for the caller (eccl_comm_peer_ids) -------------- */

typedef struct ids_wait {
    const eccl_comm *c;
    uint32_t epoch, first, n;
} ids_wait;

static int ids_known(void *arg)
{
    const ids_wait *w = arg;
    const eccl_comm *c = w->c;
    if (c->epoch != w->epoch || c->frozen || c->phase == PHASE_FAILED) return 1;
    for (uint32_t r = w->first; r < w->first + w->n; r++)
        if (r != c->rank && !comm_peer_id_of(c, r)) return 0;
    return 1;
}

/* The book answers for any rank: those it lacks are asked of the master
 * in one query (the entries stay, as the ops' own would, until the epoch
 * ends). */
eccl_result eccl_comm_peer_ids(eccl_comm *c, uint32_t first, uint32_t n, uint64_t *ids)
{
    if (!c || (n && !ids)) return ECCL_ERR_INVALID_ARG;
    eccl_engine_lock(&c->eng);
    eccl_result rc = comm_usable(c);
    if (rc == ECCL_OK) comm_wait_view(c);
    if (rc == ECCL_OK && c->phase == PHASE_FAILED) rc = c->fatal;
    if (rc == ECCL_OK && c->frozen) rc = ECCL_ERR_TIMEOUT; /* the view change did not settle */
    if (rc == ECCL_OK && (first > c->world || n > c->world - first)) rc = ECCL_ERR_INVALID_ARG;
    ids_wait w = {c, c->epoch, first, n};
    for (uint32_t r = first; rc == ECCL_OK && r < first + n; r++) {
        if (r == c->rank || comm_peer_id_of(c, r)) continue;
        comm_peer *p = peer_get(c, r);
        if (!p) rc = ECCL_ERR_NO_MEMORY;
        else if (!p->asked) ask_add(c, p);
    }
    if (rc == ECCL_OK && !ids_known(&w)) {
        comm_peers_flush_asks(c);
        rc = eccl_engine_drive(&c->eng, ids_known, &w, now_ns(c) + (uint64_t)c->params.op_timeout_ms * MS);
    }
    if (rc == ECCL_OK && c->phase == PHASE_FAILED) rc = c->fatal;
    if (rc == ECCL_OK && (c->epoch != w.epoch || c->frozen)) rc = ECCL_ERR_PEER_LOST;
    for (uint32_t k = 0; rc == ECCL_OK && k < n; k++)
        ids[k] = first + k == c->rank ? c->peer_id : comm_peer_id_of(c, first + k);
    eccl_engine_unlock(&c->eng);
    return rc;
}
