/* The communicator: a peer's side of the run.
 *
 * One mutex (the engine's) guards everything here. The master link carries
 * membership and the fault protocol; p2p links carry collective data and are
 * rebuilt for every ring epoch: the ring's links when the epoch starts, the
 * tree's (small buffers, coll/tree_allreduce.h) when first used. A
 * collective never waits for the master on its fast path: it runs
 * peer-to-peer and finishes with its completion round (done tokens, or the
 * tree's DONE/COMMIT waves). The master steps in only when membership changes:
 *
 *   VIEW_QUERY(e)   freeze every op of epoch e; report which hold the result
 *   VIEW_DECIDE(e)  drop epoch-e links; commit or abort (restore) each op
 *   RING(e+1)       wire the new ring; queued ops start on it
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/stage.h"
#include "coll/ring_allreduce.h"
#include "coll/ring_pass.h"
#include "coll/tree_allreduce.h"
#include "eccl_core.h"
#include "proto/chan.h"
#include "sched/engine.h"
#include "state/hash.h"
#include "util/bufpool.h"
#include "util/config.h"
#include "util/log.h"

#define COMM_RBUF_MASTER 4096u
#define COMM_MASTER_ADDRS 4u /* master_addr "A,B,...": a relay, then fallbacks */
#define COMM_RBUF_P2P (64u << 10)
#define COMM_READ_BUDGET (8u << 20)
/* Connect attempts back off exponentially: a refusal usually means a full
 * accept backlog, which hammering makes worse. */
#define COMM_RETRY_NS 50000000ull      /* first retry after 50 ms */
#define COMM_RETRY_MAX_NS 1000000000ull /* then doubling, up to 1 s */
/* A neighbour may start a collective before we call it. Its small frames are
 * kept aside (saves toggling the socket off and on); bigger ones, or more
 * than COMM_EARLY_LIMIT bytes, stay in the kernel, held by TCP back-pressure. */
#define COMM_EARLY_MAX (64u << 10)
/* Tags this peer finished in the current epoch. Successes go into view
 * reports (a peer that returned success must count as holding the result);
 * local failures must not be marked aborted-but-not-called when the master
 * aborts them. Peers are never more than the in-flight window apart, so the
 * last few suffice. */
#define COMM_RECENT 1024u
/* Tags the master aborted that this peer had not called yet: its next call
 * of such a tag fails once with ECCL_ERR_PEER_LOST, as it did everywhere
 * else, so every peer sees the same outcome and retries together. */
#define COMM_ABORTED_TAGS 1024u
/* Both rings start this small and double when full: a 100k-rank simulated
 * job holds 100k comms, and 24 KiB of history each was 2.4 GB. */
#define COMM_RING_START 16u
#define COMM_EARLY_LIMIT (1u << 20)
/* A holder streams a tensor in DATA frames of this size. */
#define COMM_SYNC_SLICE (4u << 20)
/* A bandwidth probe sends frames of this size and keeps at most
 * COMM_PROBE_WINDOW of them unanswered per connection: the receiver answers
 * each, so the probe is clocked by the link itself (the simulator's
 * sockets take any number of bytes at once; a real one would hide the
 * first few MB in its buffers). 2 MiB in flight per connection fills
 * 400 MB/s at 5 ms RTT; more connections fill more. */
#define COMM_PROBE_SLICE (256u << 10)
#define COMM_PROBE_WINDOW 8u
#define MS 1000000ull
/* The device-resident ring's smallest call: past the tree's and the two-peer
 * exchange's sizes, which stay mirror paths. */
#define COMM_RESIDENT_MIN (1u << 20)

enum comm_phase {
    PHASE_NEW,         /* created, connect not called */
    PHASE_REGISTERING, /* connecting to / registering with the master */
    PHASE_PENDING,     /* registered, waiting for the accepted peers' vote */
    PHASE_ACCEPTED,
    PHASE_FAILED       /* master lost or kicked: comm->fatal says which */
};

enum op_state { OP_QUEUED, OP_RUNNING, OP_FROZEN, OP_DONE };

struct eccl_request {
    struct eccl_request *next;
    eccl_comm *comm;
    eccl_coll_call call;  /* epoch, rank and world filled in at the start */
    enum op_state state;
    eccl_result result;
    uint64_t deadline_ns;
    eccl_buf *backup;
    eccl_buf *staging[2];
    eccl_buf *qimg;       /* quantised ring: the two code images */
    eccl_stage stage;     /* device buffers: the host mirror the op runs on */
    void *pinned;         /* device-resident ring: staging + send slots (pinned) */
    size_t pinned_bytes;
    void *dev_backup;     /* device-resident ring: the backup, device memory */
    int started;          /* the algorithm owns recvbuf's restore from here */
    /* The world and rank the caller saw: a layout-bound call (all but
     * all-reduce) that starts in another fails rather than run on a layout
     * nobody meant. */
    uint32_t called_world, called_rank;
    uint8_t barrier_buf[2]; /* a barrier's one-byte all-reduce: in, out */
    const eccl_coll_algo *alg; /* NULL until the op starts */
    union {
        eccl_ring_allreduce ring;
        eccl_tree_allreduce tree;
        eccl_ring_pass pass;
    } u;
};

/* What a link is to us in the current epoch (enum eccl_coll_role), or
 * ROLE_NONE: not (yet) part of the current epoch. */
#define ROLE_NONE (-1)

typedef struct early_frame {
    struct early_frame *next;
    eccl_wire_data d;
    eccl_buf *buf; /* NULL for an empty frame */
} early_frame;

typedef struct p2p_link {
    eccl_chan ch; /* first: ready pointers are channels */
    struct p2p_link *next;
    uint64_t peer_id;
    uint32_t epoch;
    uint32_t purpose;             /* enum eccl_link_purpose */
    uint32_t pool, pool_size;     /* ring links: connection `pool` of a pool this big */
    int outgoing;                 /* we opened it (else accepted) */
    int hello_seen;
    early_frame *early, **early_tail; /* frames for ops not called yet */
    size_t early_bytes;
    early_frame *receiving;           /* the early frame being read */
    /* Shared-state and probe links (purposes SYNC, PROBE) live in
     * comm->side_links, outside every ring epoch: view changes neither
     * pause nor close them. */
    int sync_fetcher;                 /* we opened it to fetch from src */
    uint32_t sync_src;                /* index into comm->sync.src */
    int probe_sender;                 /* we opened it to probe the target */
    uint32_t probe_unacked;           /* our probe frames not answered yet */
} p2p_link;

/* The shared-state call in progress (state/sync.h has the protocol). */
enum sync_phase {
    SY_ASKED,    /* SYNC_REQ sent; waiting for the plan */
    SY_FETCHING, /* fetching the keys the plan names */
    SY_REPORTED, /* our part is reported; serving until SYNC_DONE */
    SY_DONE      /* the call's outcome is in sync.result */
};

typedef struct sync_fetch {
    uint32_t info;  /* index into state->infos */
    uint32_t src;   /* index into sync.src */
    uint64_t hash;  /* the elected hash */
    uint64_t bytes, got;
} sync_fetch;

typedef struct comm_sync {
    int active;
    enum sync_phase phase;
    uint32_t seq, round;
    eccl_shared_state *state;
    eccl_hash_type htype;
    eccl_wire_sync_key *keys;   /* what we voted, sorted by key */
    uint32_t *key_info;         /* keys[i] is state->infos[key_info[i]] */
    uint32_t n_keys;
    sync_fetch *fetch;
    uint32_t n_fetch, n_done;
    eccl_wire_peer_ref *src;
    uint32_t n_src;
    eccl_result result;
    uint64_t revision;
    uint64_t tx, rx;
    uint32_t keys_served;
} comm_sync;

/* The optimize_topology call in progress, and our probe of its current
 * round (the protocol is in docs/protocol.md). */
typedef struct comm_opt {
    int active;
    int done;                 /* OPT_DONE arrived: `fin` holds it */
    uint32_t seq;
    eccl_msg_opt_done fin;
    int probing;
    uint32_t round, conns;
    uint64_t target;
    uint64_t stop_ns;         /* send no new frame from here */
    uint64_t give_up_ns;      /* answers still missing: the probe failed */
    uint64_t start_ns, last_ack_ns;
    uint64_t acked;           /* bytes answered */
    int broken;               /* a probe link failed */
    uint8_t *filler;          /* COMM_PROBE_SLICE bytes every frame sends */
    uint32_t probes, failed;
    uint64_t tx;
} comm_opt;

typedef struct comm_listener {
    int kind; /* ECCL_HANDLE_LISTENER */
    eccl_listener *l;
} comm_listener;

struct eccl_comm {
    eccl_env *env;
    size_t resident_min;        /* device calls this big run the device-resident ring */
    int progress_thread;        /* ECCL_PROGRESS_THREAD: progress between calls too */
    eccl_env_release_fn env_release;
    eccl_engine eng;
    eccl_comm_params params;
    char master_addr[COMM_MASTER_ADDRS * ECCL_ADDR_MAX]; /* as given: "A,B,..." */
    char master_addrs[COMM_MASTER_ADDRS][ECCL_ADDR_MAX];
    uint32_t n_master_addrs;
    uint32_t master_turn;       /* which one the next connect attempt tries */
    char p2p_host[ECCL_ADDR_MAX];

    enum comm_phase phase;
    eccl_result fatal;
    eccl_chan master;
    int master_open;
    uint64_t master_deadline;   /* give up reaching the master */
    uint64_t master_retry_at;   /* next connect attempt, 0 = none */
    uint64_t master_backoff;    /* delay before the attempt after that */
    uint64_t retries;           /* connect retries so far: salts the jitter */
    uint64_t heartbeat_at;
    uint64_t peer_id;

    comm_listener listener;
    char p2p_addr[ECCL_ADDR_MAX];

    /* ring of the current epoch */
    uint32_t epoch, world, rank;
    eccl_wire_peer_ref next_ref, prev_ref;
    p2p_link *link_next, *link_prev;
    uint64_t next_retry_at;     /* reconnect to next after a refusal */
    uint64_t next_backoff;
    int ring_ready;
    int frozen;                 /* between VIEW_QUERY and RING */
    /* tree of the current epoch: link_tree[eccl_tree_role] */
    eccl_wire_peer_ref parent_ref;
    uint64_t child_id[2];
    p2p_link *link_tree[3];
    uint64_t parent_retry_at;   /* reconnect to the parent after a refusal */
    uint64_t parent_backoff;
    /* The pool of ring connections per neighbour (p2p_pool_size): an op
     * runs over connection tag % size of each pool, so every peer maps it
     * alike without a word. Connection 0 is link_next / link_prev, opened
     * with the ring; the others open when an op mapped to them first runs
     * (pslot[k], k >= 1). Our pool to `next` is pool_out (ours); prev's
     * to us is pool_in, which its hello on connection 0 announces (0 until
     * then). pslot stays NULL while both are 1: a pool of one is exactly
     * the single ring link it always was. */
    uint32_t pool_out, pool_in;
    struct pool_slot {
        p2p_link *next, *prev;
        uint64_t retry_at, backoff; /* reopening next after a failure */
    } *pslot;                       /* [ECCL_WIRE_MAX_POOL] */
    int pool_adopted;               /* a pool link got its role outside its own read */

    p2p_link *links;            /* every open link */
    p2p_link *side_links;       /* shared-state and probe links, apart from the rings */
    p2p_link *graveyard;        /* closed, freed by reap */
    comm_sync sync;
    comm_opt opt;

    uint64_t topo_done_seen;
    uint64_t pending_replies;
    uint32_t pending_value;

    eccl_request *ops;
    uint32_t n_ops;
    /* Both ring buffers grow from COMM_RING_START entries as they fill
     * (ring_grow): a comm that finishes few ops holds a few hundred bytes,
     * not 24 KiB (a simulated 100k-rank run holds 100k comms). */
    struct comm_recent {
        uint64_t tag;
        int ok;
    } *recent;                             /* ring of cap_recent, up to COMM_RECENT */
    uint32_t n_recent, recent_head, cap_recent;
    uint64_t *aborted_tags;                /* ring of cap_aborted, up to COMM_ABORTED_TAGS */
    uint32_t n_aborted_tags, aborted_head, cap_aborted;
    eccl_bufpool pool;
};

static const eccl_chan_handler master_handler;
static const eccl_chan_handler link_handler;

static uint64_t now_ns(const eccl_comm *c) { return eccl_engine_now(&c->eng); }

/* A full ring of `n` entries of `elem` bytes (the next write at *head) in
 * twice the room, at most `max` entries, oldest first: the next write goes
 * to n. Out of memory or at `max`, it stays as it is, and the caller
 * overwrites its oldest entry. */
static void ring_grow(void **buf, uint32_t *cap, uint32_t *head, uint32_t n, size_t elem,
                      uint32_t max)
{
    if (*cap >= max) return;
    uint32_t ncap = *cap * 2 < max ? *cap * 2 : max;
    uint8_t *nb = malloc((size_t)ncap * elem);
    if (!nb) return;
    for (uint32_t i = 0; i < n; i++)
        memcpy(nb + i * elem, (const uint8_t *)*buf + (size_t)((*head + *cap - n + i) % *cap) * elem,
               elem);
    free(*buf);
    *buf = nb;
    *cap = ncap;
    *head = n;
}

/* When to try again: now plus the current delay, which then doubles. The
 * delay is jittered down by up to half, by a hash of this peer's own
 * address and its attempt count (core has no random source, and this keeps
 * the simulator deterministic): peers refused together must not all come
 * back together. Without it 100k simulated peers retried in lockstep
 * waves, each wave mostly refused again by the master's full backlog. */
static uint64_t retry_at(eccl_comm *c, uint64_t *backoff)
{
    if (*backoff < COMM_RETRY_NS) *backoff = COMM_RETRY_NS;
    uint64_t salt[2] = {eccl_hash(ECCL_HASH_SIMPLE, c->p2p_addr, strlen(c->p2p_addr)),
                        c->retries++};
    uint64_t jitter = eccl_hash(ECCL_HASH_SIMPLE, salt, sizeof salt) % (*backoff / 2);
    uint64_t at = now_ns(c) + *backoff - jitter;
    *backoff = *backoff * 2 > COMM_RETRY_MAX_NS ? COMM_RETRY_MAX_NS : *backoff * 2;
    return at;
}

/* The master is retried until connect_timeout, and not a moment later.
 * The next address of the list is tried at once: only a whole round of
 * refusals earns a back-off (a dead relay must not delay its peers' way in
 * through the master by a back-off period). */
static void master_retry_schedule(eccl_comm *c)
{
    uint64_t at = c->master_turn % c->n_master_addrs ? now_ns(c) : retry_at(c, &c->master_backoff);
    c->master_retry_at = at < c->master_deadline ? at : c->master_deadline;
}

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

static p2p_link *link_new(eccl_comm *c) { return link_new_in(c, &c->links); }

static int link_is_sync(const p2p_link *l) { return l->purpose == ECCL_LINK_SYNC; }
static int link_is_probe(const p2p_link *l) { return l->purpose == ECCL_LINK_PROBE; }

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

static void early_free(eccl_comm *c, early_frame *e)
{
    eccl_bufpool_put(&c->pool, e->buf);
    free(e);
}

static void link_close(eccl_comm *c, p2p_link *l)
{
    if (l->ch.closed) return; /* already in the graveyard */
    link_unlist(c, l);
    if (c->link_next == l || c->link_prev == l) {
        /* The ring is broken until the master hands out the next one. */
        c->ring_ready = 0;
        if (c->link_next == l) c->link_next = NULL;
        if (c->link_prev == l) c->link_prev = NULL;
    }
    for (int i = 0; i < 3; i++)
        if (c->link_tree[i] == l) c->link_tree[i] = NULL;
    if (c->pslot && l->pool) {
        if (c->pslot[l->pool].next == l) c->pslot[l->pool].next = NULL;
        if (c->pslot[l->pool].prev == l) c->pslot[l->pool].prev = NULL;
    }
    eccl_chan_close(&l->ch);
    for (early_frame *e = l->early, *n; e; e = n) {
        n = e->next;
        early_free(c, e);
    }
    if (l->receiving) early_free(c, l->receiving);
    l->early = l->receiving = NULL;
    l->early_tail = &l->early;
    l->early_bytes = 0;
    l->next = c->graveyard;
    c->graveyard = l;
}

/* Drops every link of epochs up to `epoch` (every link for UINT32_MAX). A
 * link that has not said hello yet may belong to a newer ring: it stays. */
static void links_close_upto(eccl_comm *c, uint32_t epoch)
{
    p2p_link *l = c->links;
    while (l) {
        p2p_link *n = l->next;
        if (epoch == UINT32_MAX || (l->hello_seen && l->epoch <= epoch)) link_close(c, l);
        l = n;
    }
    c->ring_ready = 0;
}

static void check_ring_ready(eccl_comm *c);

/* Opens a link of this epoch to `ref` and says hello; NULL if the connect
 * failed at once (*rc says why). */
/* Opens a link to `ref` in `list` and says hello for `purpose` in `epoch`
 * (a ring epoch, or a shared-state round). */
static p2p_link *link_connect_in(eccl_comm *c, p2p_link **list, const eccl_wire_peer_ref *ref,
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
        link_close(c, l);
        return NULL;
    }
    l->ch.conn = conn;
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
    return link_connect_in(c, &c->links, ref, purpose, c->epoch, 0, 0, rc);
}

static eccl_result link_connect_next(eccl_comm *c)
{
    eccl_result rc;
    /* Connection 0 of our pool: its hello tells next the pool's size. */
    c->link_next = link_connect_in(c, &c->links, &c->next_ref, ECCL_LINK_RING, c->epoch, 0,
                                   c->pool_out, &rc);
    if (!c->link_next) {
        c->next_retry_at = retry_at(c, &c->next_backoff);
        return rc;
    }
    check_ring_ready(c); /* a reconnect may complete the ring again */
    return rc;
}

/* Lazy: connection k >= 1 of our pool to `next` opens when an op mapped to
 * it first runs in the epoch (a simulated 100k-rank run with a pool of 4
 * would otherwise hold 4x the sockets before anyone needs them), and after
 * a failure only once its back-off passed. NULL until then. */
static p2p_link *pool_link_next(eccl_comm *c, uint32_t k)
{
    struct pool_slot *ps = &c->pslot[k];
    if (ps->next || ps->retry_at || c->frozen || !c->ring_ready) return ps->next;
    eccl_result rc;
    ps->next = link_connect_in(c, &c->links, &c->next_ref, ECCL_LINK_RING, c->epoch, k,
                               c->pool_out, &rc);
    if (!ps->next) ps->retry_at = retry_at(c, &ps->backoff);
    return ps->next;
}

/* Lazy: a rank opens its tree link when a tree op first needs it. */
static void link_connect_parent(eccl_comm *c)
{
    eccl_result rc;
    if (c->link_tree[ECCL_TREE_PARENT] || c->parent_retry_at || c->frozen ||
        eccl_tree_peer(c->rank, c->world, ECCL_TREE_PARENT) == UINT32_MAX)
        return;
    c->link_tree[ECCL_TREE_PARENT] = link_connect(c, &c->parent_ref, ECCL_LINK_TREE, &rc);
    if (!c->link_tree[ECCL_TREE_PARENT]) c->parent_retry_at = retry_at(c, &c->parent_backoff);
}

/* ---- master link ---------------------------------------------------------- */

static eccl_result master_send(eccl_comm *c, const eccl_msg *m)
{
    eccl_result rc = eccl_chan_send_msg(&c->master, m);
    return rc == ECCL_OK ? eccl_chan_flush(&c->master) : rc;
}

static eccl_result master_open(eccl_comm *c)
{
    eccl_conn *conn = NULL;
    eccl_result rc = eccl_chan_init(&c->master, c->env, NULL, COMM_RBUF_MASTER);
    if (rc != ECCL_OK) return rc;
    const char *addr = c->master_addrs[c->master_turn++ % c->n_master_addrs];
    rc = c->env->net->connect(c->env->net_ctx, addr, &c->master, &conn);
    if (rc != ECCL_OK) {
        eccl_chan_close(&c->master);
        return rc;
    }
    c->master.conn = conn;
    c->master_open = 1;
    eccl_msg m = {.type = ECCL_MSG_REGISTER};
    m.u.reg.peer_group = c->params.peer_group;
    m.u.reg.peer_timeout_ms = c->params.peer_timeout_ms;
    snprintf(m.u.reg.p2p_addr, sizeof m.u.reg.p2p_addr, "%s", c->p2p_addr);
    return master_send(c, &m);
}

/* ---- ops ------------------------------------------------------------------- */

/* The op's algorithm, behind one face (coll/algo.h). */
static int op_have_full(const eccl_request *r) { return r->alg->have_full(&r->u); }
static void op_restore(eccl_request *r) { r->alg->restore(&r->u); }
static int op_complete(eccl_request *r) { return r->alg->complete(&r->u); }
static int op_expects(const eccl_request *r, int role) { return r->alg->expects(&r->u, role); }

static eccl_result op_recv(eccl_request *r, int role, const eccl_wire_data *d, void **dst)
{
    return r->alg->recv(&r->u, role, d, dst);
}

static eccl_result op_recv_done(eccl_request *r, int role, const eccl_wire_data *d)
{
    return r->alg->recv_done(&r->u, role, d);
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
    return role >= ECCL_ROLE_PARENT && role < ECCL_ROLE_COUNT ? c->link_tree[role - ECCL_ROLE_PARENT] : NULL;
}

/* Whether more frames of this op will come over `l`, a link in `role`:
 * ring frames only over the op's own connection of each pool. */
static int op_expects_on(const eccl_comm *c, const eccl_request *r, const p2p_link *l, int role)
{
    if (!op_expects(r, role)) return 0;
    return role >= ECCL_ROLE_PARENT || op_link(c, r, role) == l;
}

static void op_release_buffers(eccl_comm *c, eccl_request *r)
{
    eccl_bufpool_put(&c->pool, r->backup);
    eccl_bufpool_put(&c->pool, r->staging[0]);
    eccl_bufpool_put(&c->pool, r->staging[1]);
    eccl_bufpool_put(&c->pool, r->qimg);
    r->backup = r->staging[0] = r->staging[1] = r->qimg = NULL;
    const eccl_dev_ops *d = c->env->dev;
    if (r->pinned) d->host_free(c->env->dev_ctx, r->pinned, r->pinned_bytes);
    if (r->dev_backup) d->d_free(c->env->dev_ctx, r->dev_backup);
    r->pinned = r->dev_backup = NULL;
}

static const char *coll_name(eccl_coll_kind k)
{
    static const char *const names[ECCL_COLL_KIND_COUNT] = {"all-reduce", "all-gather", "reduce-scatter",
                                                           "broadcast", "reduce"};
    return (unsigned)k < ECCL_COLL_KIND_COUNT ? names[k] : "collective";
}

static void op_finish(eccl_comm *c, eccl_request *r, eccl_result result)
{
    if (r->state == OP_DONE) return;
    /* The promise: on failure recvbuf holds what it held before. */
    if (result != ECCL_OK && r->started) op_restore(r);
    if (r->state != OP_QUEUED && result != ECCL_OK && result != ECCL_ERR_PEER_LOST &&
        result != ECCL_ERR_TOO_FEW_PEERS) {
        /* We gave up on our own (timeout, no memory): the others are stuck
         * in this op, so ask the master to re-form the ring, which settles
         * it everywhere. Successes and losses need no word (the master
         * decided the latter). */
        eccl_msg m = {.type = ECCL_MSG_COLL_DONE};
        m.u.coll.tag = r->call.tag;
        m.u.coll.epoch = r->call.epoch;
        m.u.coll.count = r->call.count;
        m.u.coll.dtype = (uint8_t)r->call.dtype;
        m.u.coll.op = (uint8_t)r->call.op;
        m.u.coll.result = (uint32_t)result;
        if (c->master_open) master_send(c, &m);
    }
    if (r->state != OP_QUEUED) {
        /* Full and unable to grow: the oldest goes, as at COMM_RECENT. */
        if (c->n_recent == c->cap_recent)
            ring_grow((void **)&c->recent, &c->cap_recent, &c->recent_head, c->n_recent,
                      sizeof *c->recent, COMM_RECENT);
        c->recent[c->recent_head].tag = r->call.tag;
        c->recent[c->recent_head].ok = result == ECCL_OK;
        c->recent_head = (c->recent_head + 1) % c->cap_recent;
        if (c->n_recent < c->cap_recent) c->n_recent++;
    }
    op_release_buffers(c, r);
    r->state = OP_DONE;
    r->result = result;
    if (result == ECCL_OK)
        ECCL_TRACE(c->env, "%s tag %llu done", coll_name(r->call.kind), (unsigned long long)r->call.tag);
    else
        ECCL_INFO(c->env, "%s tag %llu failed: %s", coll_name(r->call.kind), (unsigned long long)r->call.tag,
                  eccl_strerror(result));
}

static int link_role(const eccl_comm *c, const p2p_link *l);

/* Feeds an op the frames a peer sent over `l` before we called it, in order.
 * An error means the peer broke the protocol: the caller drops the link. */
static eccl_result replay_early(eccl_comm *c, eccl_request *r, p2p_link *l)
{
    if (!l) return ECCL_OK;
    int role = link_role(c, l);
    for (early_frame **p = &l->early; *p;) {
        early_frame *e = *p;
        if (e->d.tag != r->call.tag) {
            p = &e->next;
            continue;
        }
        *p = e->next;
        if (l->early_tail == &e->next) l->early_tail = p;
        l->early_bytes -= e->d.len;
        void *dst = NULL;
        eccl_result rc = op_recv(r, role, &e->d, &dst);
        if (rc == ECCL_OK) {
            if (dst && e->buf) c->env->dev->copy(c->env->dev_ctx, dst, e->buf->ptr, e->d.len);
            rc = op_recv_done(r, role, &e->d);
        }
        early_free(c, e);
        if (rc != ECCL_OK) {
            ECCL_WARN(c->env, "bad frame from peer %llu: %s", (unsigned long long)l->peer_id,
                      eccl_strerror(rc));
            return rc;
        }
    }
    return ECCL_OK;
}

/* Every link that carries ops' frames in this epoch, one per index below
 * role_links_n (NULL: none there): prev, next, the tree's three, then the
 * pools' other connections. Looked up afresh at each index, so a caller
 * may close links as it goes. */
static uint32_t role_links_n(const eccl_comm *c)
{
    uint32_t extra = c->pslot ? 2 * (ECCL_WIRE_MAX_POOL - 1) : 0;
    return 5 + extra;
}

static p2p_link *role_link_at(const eccl_comm *c, uint32_t i)
{
    switch (i) {
    case 0: return c->link_prev;
    case 1: return c->link_next;
    case 2: case 3: case 4: return c->link_tree[i - 2];
    default: break;
    }
    i -= 5;
    return i % 2 ? c->pslot[1 + i / 2].next : c->pslot[1 + i / 2].prev;
}

/* An op's own links, in the order role_link_at gives them. */
static int op_links(const eccl_comm *c, const eccl_request *r, p2p_link *out[5])
{
    int n = 0;
    p2p_link *all[5] = {op_link(c, r, ECCL_ROLE_PREV), op_link(c, r, ECCL_ROLE_NEXT), c->link_tree[0],
                        c->link_tree[1], c->link_tree[2]};
    for (int i = 0; i < 5; i++)
        if (all[i]) out[n++] = all[i];
    return n;
}

/* All-reduce's buffers and algorithm. The dispatcher: a small buffer among
 * three or more ranks takes the tree (log depth); the rest take the ring
 * (bandwidth-optimal). Quantised calls always take the ring: it alone
 * carries codes. */
static eccl_result allreduce_setup(eccl_comm *c, eccl_request *r)
{
    size_t bytes = r->call.count * eccl_dtype_size(r->call.dtype);
    uint8_t *staging[2] = {NULL, NULL}, *backup;
    size_t sb = eccl_ring_staging_bytes_q(r->call.count, r->call.dtype, r->call.quant);
    if (r->call.on_device) {
        /* Pinned staging (kernels read it) and send slots in one block, the
         * backup on the device. */
        const eccl_dev_ops *d = c->env->dev;
        r->pinned_bytes = (2 + ECCL_RING_DEV_SLOTS) * sb;
        eccl_result rc = d->host_alloc(c->env->dev_ctx, r->pinned_bytes, &r->pinned);
        if (rc == ECCL_OK) rc = d->d_alloc(c->env->dev_ctx, r->call.device, bytes, &r->dev_backup);
        if (rc != ECCL_OK) return rc == ECCL_ERR_NO_MEMORY ? rc : ECCL_ERR_DEVICE;
        staging[0] = r->pinned;
        staging[1] = (uint8_t *)r->pinned + sb;
        backup = r->dev_backup;
    } else {
        r->backup = eccl_bufpool_get(&c->pool, bytes);
        if (!r->backup) return ECCL_ERR_NO_MEMORY;
        for (int i = 0; i < 2; i++) {
            r->staging[i] = eccl_bufpool_get(&c->pool, sb);
            if (!r->staging[i]) return ECCL_ERR_NO_MEMORY;
            staging[i] = r->staging[i]->ptr;
        }
        backup = r->backup->ptr;
    }
    if (c->world >= 3 && bytes <= ECCL_TREE_MAX_BYTES && r->call.quant == ECCL_QUANT_NONE &&
        !r->call.on_device) {
        eccl_tree_allreduce_init(&r->u.tree, &r->call, staging, backup);
        r->alg = &eccl_tree_allreduce_algo;
        return ECCL_OK;
    }
    eccl_ring_allreduce_init(&r->u.ring, &r->call, staging, backup);
    r->alg = &eccl_ring_allreduce_algo;
    if (r->call.on_device) eccl_ring_allreduce_set_slots(&r->u.ring, (uint8_t *)r->pinned + 2 * sb);
    if (r->call.quant != ECCL_QUANT_NONE) {
        r->qimg = eccl_bufpool_get(&c->pool, eccl_ring_quant_bytes(&r->u.ring));
        if (!r->qimg) return ECCL_ERR_NO_MEMORY;
        eccl_ring_allreduce_set_quant(&r->u.ring, r->qimg->ptr);
    }
    return ECCL_OK;
}

/* The ring pass's (coll/ring_pass.h): partials and the backup. */
static eccl_result pass_setup(eccl_comm *c, eccl_request *r)
{
    size_t sb = eccl_ring_pass_scratch_bytes(&r->call), ob = eccl_ring_pass_output_bytes(&r->call);
    if (sb && !(r->staging[0] = eccl_bufpool_get(&c->pool, sb))) return ECCL_ERR_NO_MEMORY;
    if (ob && !(r->backup = eccl_bufpool_get(&c->pool, ob))) return ECCL_ERR_NO_MEMORY;
    eccl_ring_pass_init(&r->u.pass, &r->call, sb ? r->staging[0]->ptr : NULL, ob ? r->backup->ptr : NULL);
    int chain = r->call.kind == ECCL_COLL_BROADCAST || r->call.kind == ECCL_COLL_REDUCE;
    r->alg = chain ? &eccl_chain_pass_algo : &eccl_ring_pass_algo;
    return ECCL_OK;
}

static eccl_result op_start(eccl_comm *c, eccl_request *r)
{
    r->call.env = c->env;
    r->call.epoch = c->epoch; /* a failure notice names it, even of an op that never ran */
    r->call.rank = c->rank;
    r->call.nranks = c->world;
    if (c->world < 2) {
        op_finish(c, r, ECCL_ERR_TOO_FEW_PEERS);
        return ECCL_OK;
    }
    if (r->call.kind != ECCL_COLL_ALLREDUCE && (c->world != r->called_world || c->rank != r->called_rank)) {
        /* Membership changed since the call: its layout is not this
         * world's. It fails as if a loss had aborted it, having sent
         * nothing; the caller's next call runs on the new world. */
        op_finish(c, r, ECCL_ERR_PEER_LOST);
        return ECCL_OK;
    }
    eccl_result rc = r->call.kind == ECCL_COLL_ALLREDUCE ? allreduce_setup(c, r) : pass_setup(c, r);
    if (rc != ECCL_OK) {
        r->state = OP_RUNNING; /* nothing was sent: finishing restores nothing */
        op_finish(c, r, rc);
        return ECCL_OK;
    }
    if (r->alg->roles & ECCL_ROLES_TREE) link_connect_parent(c);
    r->started = 1;
    r->state = OP_RUNNING;
    p2p_link *links[5];
    for (int i = 0, n = op_links(c, r, links); i < n; i++)
        if (replay_early(c, r, links[i]) != ECCL_OK) link_close(c, links[i]);
    return ECCL_OK;
}

static eccl_request *op_find(eccl_comm *c, uint64_t tag)
{
    for (eccl_request *r = c->ops; r; r = r->next)
        if (r->call.tag == tag && r->state != OP_DONE) return r;
    return NULL;
}

static void op_unlink(eccl_comm *c, eccl_request *r)
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
static void ops_fail_all(eccl_comm *c, eccl_result why)
{
    links_close_upto(c, UINT32_MAX); /* no frame may still point at a buffer */
    for (eccl_request *r = c->ops; r; r = r->next) op_finish(c, r, why);
}

static void sync_finish(eccl_comm *c, eccl_result result, uint64_t revision);
static void side_links_close(eccl_comm *c, uint32_t purpose);

static void comm_fail(eccl_comm *c, eccl_result why)
{
    if (c->phase == PHASE_FAILED) return;
    ECCL_WARN(c->env, "communicator failed: %s", eccl_strerror(why));
    c->phase = PHASE_FAILED;
    c->fatal = why;
    ops_fail_all(c, why);
    sync_finish(c, why, 0);
    side_links_close(c, ECCL_LINK_SYNC);
    if (c->master_open) eccl_chan_close(&c->master);
    c->master_open = 0;
}

/* ---- ring epochs and the view-change protocol ------------------------------ */

static void check_ring_ready(eccl_comm *c)
{
    if (c->ring_ready || c->frozen || c->phase == PHASE_FAILED) return;
    if (c->world > 1 && !(c->link_next && c->link_prev)) return;
    c->ring_ready = 1;
    c->next_backoff = 0;
    ECCL_DEBUG(c->env, "ring epoch %u ready: rank %u of %u", c->epoch, c->rank, c->world);
    eccl_msg m = {.type = ECCL_MSG_RING_READY};
    m.u.epoch.epoch = c->epoch;
    master_send(c, &m);
}

static eccl_result pool_alloc(eccl_comm *c)
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
static eccl_result link_adopt(eccl_comm *c, p2p_link *l)
{
    if (l->epoch < c->epoch) return ECCL_ERR_CLOSED;
    if (l->epoch != c->epoch || c->frozen || c->world < 2) return ECCL_OK;
    if (l->purpose == ECCL_LINK_RING && l->pool > 0) /* never prev's connection 0 */
        return l->outgoing || l->peer_id != c->prev_ref.peer_id ? ECCL_OK : pool_adopt_prev(c, l);
    if (l->purpose == ECCL_LINK_RING && l->peer_id == c->prev_ref.peer_id && !c->link_prev) {
        if (l->pool_size > 1 && pool_alloc(c) != ECCL_OK) return ECCL_ERR_NO_MEMORY;
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
                    link_close(c, o);
            }
        }
        check_ring_ready(c);
    }
    for (int k = 0; k < 2; k++) {
        p2p_link **slot = &c->link_tree[ECCL_TREE_CHILD0 + k];
        if (l->purpose == ECCL_LINK_TREE && c->child_id[k] && l->peer_id == c->child_id[k] &&
            !*slot)
            *slot = l;
    }
    return ECCL_OK;
}

static eccl_result on_ring(eccl_comm *c, const eccl_msg_ring *m)
{
    if (m->peer_group != c->params.peer_group || (c->world && m->epoch <= c->epoch))
        return ECCL_ERR_PROTOCOL;
    links_close_upto(c, m->epoch - 1);
    c->epoch = m->epoch;
    c->world = m->world_size;
    c->rank = m->rank;
    c->next_ref = m->next;
    c->prev_ref = m->prev;
    c->parent_ref = m->tree_parent;
    c->child_id[0] = m->tree_child[0];
    c->child_id[1] = m->tree_child[1];
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
        eccl_result rc = link_connect_next(c);
        if (rc != ECCL_OK && rc != ECCL_ERR_CONNECT) return rc;
        for (p2p_link *l = c->links, *n; l; l = n) {
            n = l->next;
            if (l != c->link_next && l->hello_seen && link_adopt(c, l) != ECCL_OK)
                link_close(c, l);
        }
    }
    check_ring_ready(c);
    return ECCL_OK;
}

static void link_service(eccl_comm *c, p2p_link *l);
static void flush_and_complete(eccl_comm *c);

static void report_add(eccl_wire_op_flag *ops, uint32_t cap, uint32_t *n, uint64_t tag,
                       int have)
{
    if (*n < cap) ops[(*n)++] = (eccl_wire_op_flag){tag, (uint8_t)have};
}

static eccl_result on_view_query(eccl_comm *c, uint32_t epoch)
{
    /* What already arrived counts: a peer that finished and left may have
     * delivered our last bytes just before the master noticed it leave. */
    for (uint32_t i = 0; i < role_links_n(c); i++) {
        p2p_link *l = role_link_at(c, i);
        if (l) link_service(c, l);
    }
    flush_and_complete(c);
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
        report_add(ops, (uint32_t)cap, &n_ops, r->call.tag, op_have_full(r));
    }
    /* Ops we completed count as held: we returned success for them. */
    for (uint32_t i = 0; i < c->n_recent; i++) {
        uint32_t k = (c->recent_head + c->cap_recent - 1 - i) % c->cap_recent;
        if (c->recent[k].ok) report_add(ops, (uint32_t)cap, &n_ops, c->recent[k].tag, 1);
    }
    eccl_msg m = {.type = ECCL_MSG_VIEW_REPORT};
    m.u.view.epoch = epoch;
    m.u.view.n_ops = n_ops;
    m.u.view.ops = ops;
    eccl_result rc = master_send(c, &m);
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
static int aborted_take(eccl_comm *c, uint64_t tag)
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
        ring_grow((void **)&c->aborted_tags, &c->cap_aborted, &c->aborted_head,
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

static eccl_result on_view_decide(eccl_comm *c, const eccl_msg_view *v)
{
    /* Queued frames may point into buffers an abort is about to restore. */
    links_close_upto(c, v->epoch);
    /* A tag aborted elsewhere that we had not started fails here too: a
     * queued call of it now, or else our next call of it. */
    for (uint32_t i = 0; i < v->n_ops; i++) {
        eccl_wire_op_flag e = eccl_wire_view_op(v, i);
        if (e.flag) continue;
        eccl_request *r = op_find(c, e.tag);
        if (!r) {
            /* Not if we already failed it ourselves (timeout, no memory). */
            if (!recently_finished(c, e.tag)) aborted_add(c, e.tag);
        } else if (r->state == OP_QUEUED) {
            r->call.nranks = c->world;
            op_finish(c, r, ECCL_ERR_PEER_LOST);
        }
    }
    for (eccl_request *r = c->ops; r; r = r->next) {
        if (r->state != OP_FROZEN) continue;
        int commit = 0;
        for (uint32_t i = 0; i < v->n_ops; i++) {
            eccl_wire_op_flag e = eccl_wire_view_op(v, i);
            if (e.tag == r->call.tag) commit = e.flag;
        }
        op_finish(c, r, commit && op_have_full(r) ? ECCL_OK : ECCL_ERR_PEER_LOST);
    }
    return ECCL_OK;
}

static eccl_result sync_on_plan(eccl_comm *c, const eccl_msg_sync_plan *p);
static eccl_result sync_on_done(eccl_comm *c, const eccl_msg_sync_result *r);
static eccl_result opt_on_probe(eccl_comm *c, const eccl_msg_opt_probe *p);
static eccl_result opt_on_done(eccl_comm *c, const eccl_msg_opt_done *d);

static eccl_result master_on_msg(void *owner, eccl_chan *ch, const eccl_msg *m)
{
    eccl_comm *c = owner;
    (void)ch;
    switch (m->type) {
    case ECCL_MSG_WELCOME:
        if (c->phase != PHASE_REGISTERING) return ECCL_ERR_PROTOCOL;
        c->peer_id = m->u.welcome.peer_id;
        snprintf(c->env->name, sizeof c->env->name, "peer %llu",
                 (unsigned long long)c->peer_id);
        c->phase = m->u.welcome.accepted ? PHASE_ACCEPTED : PHASE_PENDING;
        ECCL_INFO(c->env, "registered (%s)", m->u.welcome.accepted ? "accepted" : "pending");
        return ECCL_OK;
    case ECCL_MSG_RING:
        return on_ring(c, &m->u.ring);
    case ECCL_MSG_TOPO_DONE:
        c->topo_done_seen++;
        if (c->phase == PHASE_PENDING) c->phase = PHASE_ACCEPTED;
        return ECCL_OK;
    case ECCL_MSG_PENDING_REPLY:
        c->pending_value = m->u.pending.pending;
        c->pending_replies++;
        return ECCL_OK;
    case ECCL_MSG_VIEW_QUERY:
        return on_view_query(c, m->u.epoch.epoch);
    case ECCL_MSG_VIEW_DECIDE:
        return on_view_decide(c, &m->u.view);
    case ECCL_MSG_KICK:
        ECCL_WARN(c->env, "kicked by the master: %s", eccl_strerror((eccl_result)m->u.kick.reason));
        comm_fail(c, ECCL_ERR_KICKED);
        return ECCL_OK;
    case ECCL_MSG_HEARTBEAT:
        return ECCL_OK;
    case ECCL_MSG_SYNC_PLAN:
        return sync_on_plan(c, &m->u.sync_plan);
    case ECCL_MSG_SYNC_DONE:
        return sync_on_done(c, &m->u.sync_result);
    case ECCL_MSG_OPT_PROBE:
        return opt_on_probe(c, &m->u.opt_probe);
    case ECCL_MSG_OPT_DONE:
        return opt_on_done(c, &m->u.opt_done);
    default:
        return ECCL_ERR_PROTOCOL;
    }
}

static eccl_result master_on_data(void *owner, eccl_chan *ch, const eccl_wire_data *d,
                                  void **dst)
{
    (void)owner, (void)ch, (void)d, (void)dst;
    return ECCL_ERR_PROTOCOL;
}

static eccl_result master_on_data_done(void *owner, eccl_chan *ch, const eccl_wire_data *d)
{
    (void)owner, (void)ch, (void)d;
    return ECCL_ERR_PROTOCOL;
}

static const eccl_chan_handler master_handler = {master_on_msg, master_on_data,
                                                 master_on_data_done};

/* ---- shared state ------------------------------------------------------------ */

static void side_links_close(eccl_comm *c, uint32_t purpose)
{
    for (p2p_link *l = c->side_links, *n; l; l = n) {
        n = l->next;
        if (l->purpose == purpose) link_close(c, l);
    }
}

/* The call's outcome is known: no byte moves into or out of the tensors
 * after this (closing drops queued frames that point into them). */
static void sync_finish(eccl_comm *c, eccl_result result, uint64_t revision)
{
    if (!c->sync.active || c->sync.phase == SY_DONE) return;
    side_links_close(c, ECCL_LINK_SYNC);
    c->sync.phase = SY_DONE;
    c->sync.result = result;
    c->sync.revision = revision;
}

static void sync_report(eccl_comm *c, eccl_result result)
{
    eccl_msg m = {.type = ECCL_MSG_SYNC_REPORT};
    m.u.sync_result.seq = c->sync.seq;
    m.u.sync_result.result = (uint32_t)result;
    if (c->master_open) master_send(c, &m);
}

/* Our fetches failed (a holder lost, bad bytes): tell the master, which
 * ends the round for everyone with this error; wait for its SYNC_DONE.
 * Links are not closed here: this may run inside a link's read. */
static void sync_fetch_failed(eccl_comm *c, eccl_result why)
{
    if (!c->sync.active || c->sync.phase != SY_FETCHING) return;
    ECCL_WARN(c->env, "shared-state fetch failed: %s", eccl_strerror(why));
    c->sync.phase = SY_REPORTED;
    sync_report(c, why);
}

static p2p_link *sync_connect(eccl_comm *c, uint32_t src, eccl_result *rc)
{
    p2p_link *l = link_connect_in(c, &c->side_links, &c->sync.src[src], ECCL_LINK_SYNC,
                                  c->sync.round, 0, 0, rc);
    if (l) {
        l->sync_fetcher = 1;
        l->sync_src = src;
    }
    return l;
}

static eccl_result sync_on_plan(eccl_comm *c, const eccl_msg_sync_plan *p)
{
    comm_sync *s = &c->sync;
    if (!s->active || s->phase != SY_ASKED || p->seq != s->seq) return ECCL_OK; /* stale */
    if (p->result != ECCL_OK) {
        ECCL_WARN(c->env, "shared-state sync refused: %s", eccl_strerror((eccl_result)p->result));
        sync_finish(c, (eccl_result)p->result, p->revision);
        return ECCL_OK;
    }
    s->round = p->round;
    s->revision = p->revision;
    if (p->n_fetch) {
        s->fetch = calloc(p->n_fetch, sizeof *s->fetch);
        s->src = calloc(p->n_src, sizeof *s->src);
        if (!s->fetch || !s->src) {
            s->phase = SY_FETCHING;
            sync_fetch_failed(c, ECCL_ERR_NO_MEMORY);
            return ECCL_OK;
        }
    }
    for (uint32_t i = 0; i < p->n_src; i++) {
        eccl_wire_sync_plan_src(p, i, &s->src[i]);
        if (s->src[i].peer_id == c->peer_id) return ECCL_ERR_PROTOCOL;
    }
    for (uint32_t i = 0; i < p->n_fetch; i++) {
        eccl_wire_sync_fetch f = eccl_wire_sync_plan_fetch(p, i);
        if (f.key >= s->n_keys) return ECCL_ERR_PROTOCOL;
        s->fetch[i] = (sync_fetch){s->key_info[f.key], f.src, f.hash, s->keys[f.key].bytes, 0};
    }
    s->n_fetch = p->n_fetch;
    s->n_src = p->n_src;
    if (s->n_fetch == 0) {
        s->phase = SY_REPORTED; /* up to date: serve until SYNC_DONE, say nothing */
        return ECCL_OK;
    }
    s->phase = SY_FETCHING;
    ECCL_INFO(c->env, "shared state outdated: fetching %u keys from %u peers", s->n_fetch,
              s->n_src);
    /* One link per holder, opened now (lazily: only the holders we need),
     * each carrying the requests for its keys. */
    for (uint32_t k = 0; k < s->n_src; k++) {
        eccl_result rc;
        p2p_link *l = sync_connect(c, k, &rc);
        for (uint32_t i = 0; l && rc == ECCL_OK && i < s->n_fetch; i++) {
            if (s->fetch[i].src != k) continue;
            eccl_msg m = {.type = ECCL_MSG_SYNC_FETCH};
            m.u.sync_fetch.round = s->round;
            m.u.sync_fetch.id = i;
            m.u.sync_fetch.bytes = s->fetch[i].bytes;
            snprintf(m.u.sync_fetch.key, sizeof m.u.sync_fetch.key, "%s",
                     s->state->infos[s->fetch[i].info].key);
            rc = eccl_chan_send_msg(&l->ch, &m);
        }
        if (l && rc == ECCL_OK) rc = eccl_chan_flush(&l->ch);
        if (!l || rc != ECCL_OK) {
            sync_fetch_failed(c, ECCL_ERR_PEER_LOST);
            return ECCL_OK;
        }
    }
    return ECCL_OK;
}

static eccl_result sync_on_done(eccl_comm *c, const eccl_msg_sync_result *r)
{
    if (!c->sync.active || r->seq != c->sync.seq) return ECCL_OK; /* stale */
    sync_finish(c, (eccl_result)r->result, r->revision);
    return ECCL_OK;
}

static int sync_key_cmp(const void *a, const void *b)
{
    return strcmp(((const eccl_wire_sync_key *)a)->key, ((const eccl_wire_sync_key *)b)->key);
}

/* A holder's side: a fetcher asks for one key; stream it straight from the
 * tensor. We serve while our call runs (even before our own plan arrives:
 * the round cannot move on without us, and the fetcher verifies the hash). */
static eccl_result sync_on_fetch(eccl_comm *c, p2p_link *l, const eccl_msg_sync_fetch *f)
{
    comm_sync *s = &c->sync;
    if (l->sync_fetcher || !s->active || s->phase == SY_DONE) return ECCL_ERR_PROTOCOL;
    if (s->phase != SY_ASKED && f->round != s->round) return ECCL_ERR_PROTOCOL;
    eccl_wire_sync_key probe;
    snprintf(probe.key, sizeof probe.key, "%s", f->key);
    const eccl_wire_sync_key *k = bsearch(&probe, s->keys, s->n_keys, sizeof *s->keys, sync_key_cmp);
    if (!k || k->bytes != f->bytes) return ECCL_ERR_PROTOCOL;
    const uint8_t *data = s->state->infos[s->key_info[k - s->keys]].data;
    uint64_t off = 0;
    do {
        uint64_t len = k->bytes - off < COMM_SYNC_SLICE ? k->bytes - off : COMM_SYNC_SLICE;
        eccl_wire_data d = {.tag = f->id, .epoch = f->round, .phase = ECCL_PHASE_SYNC,
                            .offset = off, .len = (uint32_t)len};
        eccl_result rc = eccl_chan_send_data(&l->ch, &d, data ? data + off : data, NULL);
        if (rc != ECCL_OK) return rc;
        off += len;
    } while (off < k->bytes);
    s->tx += k->bytes;
    s->keys_served++;
    return ECCL_OK;
}

/* A fetcher's side: DATA of fetch d->tag goes straight into the tensor. */
static eccl_result sync_on_data(eccl_comm *c, p2p_link *l, const eccl_wire_data *d, void **dst)
{
    comm_sync *s = &c->sync;
    if (!l->sync_fetcher || !s->active || s->phase != SY_FETCHING) return ECCL_ERR_PROTOCOL;
    if (d->phase != ECCL_PHASE_SYNC || d->epoch != s->round || d->tag >= s->n_fetch)
        return ECCL_ERR_PROTOCOL;
    sync_fetch *f = &s->fetch[d->tag];
    /* In order, exactly covering the tensor: TCP keeps order, so anything
     * else is a broken holder. */
    if (f->src != l->sync_src || d->offset != f->got || d->len > f->bytes - f->got ||
        (f->got == f->bytes && f->bytes > 0))
        return ECCL_ERR_PROTOCOL;
    *dst = (uint8_t *)s->state->infos[f->info].data + d->offset;
    return ECCL_OK;
}

static eccl_result sync_on_data_done(eccl_comm *c, p2p_link *l, const eccl_wire_data *d)
{
    comm_sync *s = &c->sync;
    (void)l;
    if (s->phase != SY_FETCHING) return ECCL_ERR_PROTOCOL;
    sync_fetch *f = &s->fetch[d->tag];
    f->got += d->len;
    s->rx += d->len;
    if (f->got < f->bytes) return ECCL_OK;
    const eccl_tensor_info *t = &s->state->infos[f->info];
    if (eccl_hash(s->htype, t->data, f->bytes) != f->hash) {
        ECCL_WARN(c->env, "shared-state key '%s' from peer %llu does not hash to the elected hash",
                  t->key, (unsigned long long)l->peer_id);
        sync_fetch_failed(c, ECCL_ERR_PROTOCOL);
        return ECCL_OK;
    }
    if (++s->n_done == s->n_fetch) {
        s->phase = SY_REPORTED;
        sync_report(c, ECCL_OK);
    }
    return ECCL_OK;
}

/* A SYNC link broke. Ours to a holder: the fetch failed. One a fetcher
 * opened to us: its own problem (it reports it). */
static void sync_link_lost(eccl_comm *c, p2p_link *l)
{
    if (l->sync_fetcher) sync_fetch_failed(c, ECCL_ERR_PEER_LOST);
}

/* ---- topology optimisation (docs/protocol.md) ------------------------------------ */

/* Our probe of the round is over: report what it measured (nothing if it
 * failed: the master leaves the link unmeasured). Its links close at the
 * next probe_pump (this may run inside one of their reads). */
static void probe_end(eccl_comm *c, int ok)
{
    comm_opt *o = &c->opt;
    if (!o->probing) return;
    o->probing = 0;
    const char *why = o->broken ? "connection failed" : !ok ? "unanswered"
                      : o->acked == 0 ? "no answer" : NULL;
    if (why) {
        o->failed++;
        ECCL_WARN(c->env, "bandwidth probe to peer %llu failed: %s", (unsigned long long)o->target,
                  why);
    }
    ok = !why;
    eccl_msg m = {.type = ECCL_MSG_OPT_BW};
    m.u.opt_bw.seq = o->seq;
    m.u.opt_bw.round = o->round;
    m.u.opt_bw.target = o->target;
    m.u.opt_bw.bytes = ok ? o->acked : 0;
    m.u.opt_bw.ns = ok ? o->last_ack_ns - o->start_ns : 0;
    if (c->master_open) master_send(c, &m);
}

/* The master names our target for this round: open the connections; the
 * frames go out from probe_pump. */
static eccl_result opt_on_probe(eccl_comm *c, const eccl_msg_opt_probe *p)
{
    comm_opt *o = &c->opt;
    if (!o->active || o->done || p->seq != o->seq) return ECCL_OK; /* stale */
    if (o->probing || !p->target.peer_id || p->target.peer_id == c->peer_id ||
        p->probe_conns == 0 || p->probe_conns > ECCL_TOPO_MAX_CONNS)
        return ECCL_ERR_PROTOCOL;
    uint64_t now = now_ns(c);
    o->probing = 1;
    o->round = p->round;
    o->conns = p->probe_conns;
    o->target = p->target.peer_id;
    o->stop_ns = now + (uint64_t)p->probe_ms * MS;
    o->give_up_ns = o->stop_ns + (uint64_t)c->params.peer_timeout_ms * MS;
    o->start_ns = now;
    o->last_ack_ns = o->acked = 0;
    o->broken = 0;
    o->probes++;
    if (!o->filler && !(o->filler = calloc(1, COMM_PROBE_SLICE))) o->broken = 1;
    for (uint32_t k = 0; k < o->conns && !o->broken; k++) {
        eccl_result rc;
        p2p_link *l = link_connect_in(c, &c->side_links, &p->target, ECCL_LINK_PROBE, p->round,
                                     0, 0, &rc);
        if (l) l->probe_sender = 1;
        if (!l || rc != ECCL_OK) o->broken = 1;
    }
    if (o->broken) probe_end(c, 0);
    return ECCL_OK;
}

static eccl_result opt_on_done(eccl_comm *c, const eccl_msg_opt_done *d)
{
    comm_opt *o = &c->opt;
    if (!o->active || o->done || d->seq != o->seq) return ECCL_OK; /* stale */
    o->done = 1;
    o->fin = *d;
    o->probing = 0;
    return ECCL_OK;
}

/* Keeps every probe connection's window full until stop_ns, ends the probe
 * once every frame is answered (or at give_up_ns), and closes the links of
 * a probe that is over. */
static void probe_pump(eccl_comm *c)
{
    comm_opt *o = &c->opt;
    uint64_t now = now_ns(c);
    int waiting = 0;
    for (p2p_link *l = c->side_links, *n; l; l = n) {
        n = l->next;
        if (!link_is_probe(l) || !l->probe_sender) continue;
        if (!o->probing) {
            link_close(c, l);
            continue;
        }
        while (now < o->stop_ns && l->probe_unacked < COMM_PROBE_WINDOW) {
            eccl_wire_data d = {.tag = o->seq, .epoch = o->round, .phase = ECCL_PHASE_PROBE,
                                .len = COMM_PROBE_SLICE};
            if (eccl_chan_send_data(&l->ch, &d, o->filler, NULL) != ECCL_OK) {
                o->broken = 1;
                break;
            }
            l->probe_unacked++;
            o->tx += COMM_PROBE_SLICE;
        }
        if (l->ch.out_head) eccl_chan_flush(&l->ch);
        waiting += l->probe_unacked > 0;
    }
    if (o->probing && (o->broken || now >= o->give_up_ns || (now >= o->stop_ns && !waiting)))
        probe_end(c, now < o->give_up_ns);
}

/* A probe frame arrived. The target drops the filler and answers each
 * frame with an empty one (step 1); the sender counts the answers. */
static eccl_result probe_on_data(eccl_comm *c, p2p_link *l, const eccl_wire_data *d, void **dst)
{
    (void)c;
    if (d->phase != ECCL_PHASE_PROBE || d->step != (l->probe_sender ? 1 : 0) ||
        (l->probe_sender && (d->len || !l->probe_unacked)))
        return ECCL_ERR_PROTOCOL;
    *dst = NULL;
    return ECCL_OK;
}

static eccl_result probe_on_data_done(eccl_comm *c, p2p_link *l, const eccl_wire_data *d)
{
    comm_opt *o = &c->opt;
    if (!l->probe_sender) {
        eccl_wire_data a = {.tag = d->tag, .epoch = d->epoch, .phase = ECCL_PHASE_PROBE, .step = 1};
        return eccl_chan_send_data(&l->ch, &a, NULL, NULL);
    }
    l->probe_unacked--;
    if (!o->probing) return ECCL_OK;
    /* Timed from the probe's start to the last answer: the connection
     * set-up and one round trip count too (a few percent of a probe). Not
     * from the first answer: concurrent frames may all complete together
     * (the simulator shares a link fairly between them). */
    o->acked += COMM_PROBE_SLICE;
    o->last_ack_ns = now_ns(c);
    return ECCL_OK;
}

/* ---- p2p data --------------------------------------------------------------- */

static eccl_result link_on_msg(void *owner, eccl_chan *ch, const eccl_msg *m)
{
    eccl_comm *c = owner;
    p2p_link *l = (p2p_link *)ch;
    if (link_is_sync(l) && m->type == ECCL_MSG_SYNC_FETCH) return sync_on_fetch(c, l, &m->u.sync_fetch);
    if (m->type != ECCL_MSG_P2P_HELLO || l->hello_seen ||
        m->u.hello.peer_group != c->params.peer_group)
        return ECCL_ERR_PROTOCOL;
    l->hello_seen = 1;
    l->peer_id = m->u.hello.peer_id;
    l->epoch = m->u.hello.epoch;
    l->purpose = m->u.hello.purpose;
    l->pool = m->u.hello.pool;
    l->pool_size = m->u.hello.pool_size;
    if (l->purpose == ECCL_LINK_PROBE && !c->opt.active) return ECCL_ERR_PROTOCOL;
    if (l->purpose == ECCL_LINK_SYNC || l->purpose == ECCL_LINK_PROBE) {
        /* A fetcher or a prober: off the ring's list, so view changes
         * leave it be. */
        link_unlist(c, l);
        l->next = c->side_links;
        c->side_links = l;
        return ECCL_OK;
    }
    return link_adopt(c, l);
}

static int link_role(const eccl_comm *c, const p2p_link *l)
{
    if (l == c->link_prev) return ECCL_ROLE_PREV; /* ring 0 flows from prev */
    if (l == c->link_next) return ECCL_ROLE_NEXT; /* ring 1 from next */
    for (int i = 0; i < 3; i++)
        if (l == c->link_tree[i]) return ECCL_ROLE_PARENT + i;
    if (c->pslot && l->pool) {
        if (l == c->pslot[l->pool].prev) return ECCL_ROLE_PREV;
        if (l == c->pslot[l->pool].next) return ECCL_ROLE_NEXT;
    }
    return ROLE_NONE;
}

static eccl_result link_on_data(void *owner, eccl_chan *ch, const eccl_wire_data *d,
                                void **dst)
{
    eccl_comm *c = owner;
    p2p_link *l = (p2p_link *)ch;
    if (link_is_sync(l)) return sync_on_data(c, l, d, dst);
    if (link_is_probe(l)) return probe_on_data(c, l, d, dst);
    int role = link_role(c, l);
    if (!l->hello_seen || d->epoch != l->epoch) return ECCL_ERR_PROTOCOL;
    if (role == ROLE_NONE || c->frozen) return ECCL_ERR_AGAIN; /* not our epoch yet */
    eccl_request *r = op_find(c, d->tag);
    if (!r || r->state == OP_QUEUED || (r->state == OP_RUNNING && !op_expects_on(c, r, l, role))) {
        /* A neighbour started a collective we have not called yet (maybe
         * the next call with a tag whose last call is still finishing). */
        if (d->len > COMM_EARLY_MAX || l->early_bytes + d->len > COMM_EARLY_LIMIT)
            return ECCL_ERR_AGAIN;
        early_frame *e = calloc(1, sizeof *e);
        if (!e) return ECCL_ERR_AGAIN;
        e->d = *d;
        if (d->len && !(e->buf = eccl_bufpool_get(&c->pool, d->len))) {
            free(e);
            return ECCL_ERR_AGAIN;
        }
        l->receiving = e;
        *dst = e->buf ? e->buf->ptr : NULL;
        return ECCL_OK;
    }
    if (r->state != OP_RUNNING || r->call.epoch != d->epoch) return ECCL_ERR_PROTOCOL;
    return op_recv(r, role, d, dst);
}

static eccl_result link_on_data_done(void *owner, eccl_chan *ch, const eccl_wire_data *d)
{
    eccl_comm *c = owner;
    p2p_link *l = (p2p_link *)ch;
    if (link_is_sync(l)) return sync_on_data_done(c, l, d);
    if (link_is_probe(l)) return probe_on_data_done(c, l, d);
    if (l->receiving) {
        *l->early_tail = l->receiving;
        l->early_tail = &l->receiving->next;
        l->early_bytes += d->len;
        l->receiving = NULL;
        /* The payload took more than one read and the op was called in
         * between: it already replayed the others, so replay this one. */
        eccl_request *r = op_find(c, d->tag);
        return r && r->state == OP_RUNNING && op_expects_on(c, r, l, link_role(c, l))
                   ? replay_early(c, r, l)
                   : ECCL_OK;
    }
    eccl_request *r = op_find(c, d->tag);
    if (!r || r->state != OP_RUNNING) return ECCL_ERR_PROTOCOL;
    return op_recv_done(r, link_role(c, l), d);
}

static const eccl_chan_handler link_handler = {link_on_msg, link_on_data, link_on_data_done};

/* ---- progress ----------------------------------------------------------------- */

static void accept_links(eccl_comm *c)
{
    for (;;) {
        p2p_link *l = link_new(c);
        if (!l) return;
        eccl_conn *conn = NULL;
        eccl_result rc = c->env->net->accept(c->env->net_ctx, c->listener.l, l, &conn);
        if (rc != ECCL_OK) {
            link_close(c, l);
            if (rc != ECCL_ERR_AGAIN)
                ECCL_WARN(c->env, "p2p accept failed: %s", eccl_strerror(rc));
            return;
        }
        l->ch.conn = conn;
    }
}

static void link_service(eccl_comm *c, p2p_link *l)
{
    if (l->ch.closed) return;
    eccl_chan_read(&l->ch, &link_handler, c, COMM_READ_BUDGET);
    if (l->ch.error == ECCL_OK) eccl_chan_flush(&l->ch);
    if (l->ch.error != ECCL_OK && (link_is_sync(l) || link_is_probe(l))) {
        if (link_is_sync(l)) sync_link_lost(c, l);
        if (link_is_probe(l) && l->probe_sender) c->opt.broken = 1;
        link_close(c, l);
        return;
    }
    if (l->ch.error != ECCL_OK) {
        /* A broken link stalls its ops; the master's view change (or the op
         * timeout) resolves them. Until then keep trying to reach `next`:
         * a connect can fail after it started (refused, reset), and the
         * neighbour may well be alive. */
        if (l == c->link_next || l == c->link_prev)
            ECCL_INFO(c->env, "link to peer %llu lost: %s", (unsigned long long)l->peer_id,
                      eccl_strerror(l->ch.error));
        if (l == c->link_next && !c->frozen) c->next_retry_at = retry_at(c, &c->next_backoff);
        /* Likewise a connection of our pool: the next op mapped to it
         * reopens it, once the back-off passed. */
        if (c->pslot && l->pool && l == c->pslot[l->pool].next && !c->frozen) {
            ECCL_INFO(c->env, "pool link %u to peer %llu lost: %s", l->pool,
                      (unsigned long long)l->peer_id, eccl_strerror(l->ch.error));
            c->pslot[l->pool].retry_at = retry_at(c, &c->pslot[l->pool].backoff);
        }
        /* Its frames are lost (the view change settles their ops), but
         * the next tree op needs the parent again. */
        if (l == c->link_tree[ECCL_TREE_PARENT] && !c->frozen)
            c->parent_retry_at = retry_at(c, &c->parent_backoff);
        link_close(c, l);
    }
}

static void master_service(eccl_comm *c)
{
    if (!c->master_open) return;
    eccl_result rc = eccl_chan_read(&c->master, &master_handler, c, SIZE_MAX);
    if (rc == ECCL_OK && c->master_open) rc = eccl_chan_flush(&c->master);
    if (!c->master_open || c->phase == PHASE_FAILED) return;
    if (rc == ECCL_ERR_CONNECT && c->phase == PHASE_REGISTERING) {
        /* The master may not be up yet: retry until connect_timeout. */
        eccl_chan_close(&c->master);
        c->master_open = 0;
        master_retry_schedule(c);
        return;
    }
    if (rc != ECCL_OK)
        comm_fail(c, rc == ECCL_ERR_PROTOCOL ? ECCL_ERR_PROTOCOL : ECCL_ERR_MASTER_LOST);
}

static size_t links_queued(const eccl_comm *c)
{
    size_t n = 0;
    for (const p2p_link *l = c->links; l; l = l->next) n += l->ch.queued_bytes;
    return n;
}

/* Queues the frames of running ops that are ready; returns how many bytes. */
static size_t ops_pump(eccl_comm *c)
{
    if (!c->ring_ready || c->frozen || c->world < 2) return 0;
    size_t before = links_queued(c);
    for (eccl_request *r = c->ops; r; r = r->next) {
        if (r->state != OP_RUNNING) continue;
        p2p_link *l[ECCL_ROLE_COUNT] = {NULL};
        if (r->alg->roles & ECCL_ROLES_RING) {
            /* The op's connection of each pool; one not open yet (prev
             * opens its side when it runs the op) holds the op's frames
             * back if the algorithm needs it. */
            uint32_t k = pool_index(r->call.tag, c->pool_out);
            l[ECCL_ROLE_NEXT] = k ? pool_link_next(c, k) : c->link_next;
            l[ECCL_ROLE_PREV] = op_link(c, r, ECCL_ROLE_PREV);
        }
        if (r->alg->roles & ECCL_ROLES_TREE)
            for (int i = 0; i < 3; i++) l[ECCL_ROLE_PARENT + i] = c->link_tree[i];
        eccl_chan *ch[ECCL_ROLE_COUNT];
        int ready = 1;
        for (int i = 0; i < ECCL_ROLE_COUNT; i++) {
            ch[i] = l[i] ? &l[i]->ch : NULL;
            if (!l[i] && (r->alg->pump_needs & ECCL_ROLE_BIT(i))) ready = 0;
        }
        if (ready) r->alg->pump(&r->u, ch);
    }
    return links_queued(c) - before;
}

static void ops_advance(eccl_comm *c)
{
    if (!c->ring_ready || c->frozen) return;
    int started = 0;
    for (eccl_request *r = c->ops; r; r = r->next) {
        if (r->state == OP_QUEUED) {
            op_start(c, r);
            started = 1;
        }
    }
    ops_pump(c);
    if (started || c->pool_adopted) {
        /* Frames held for a tag we had not called yet, or on a pool link
         * that had no role yet, may now be placed. */
        c->pool_adopted = 0;
        for (uint32_t i = 0; i < role_links_n(c); i++) {
            p2p_link *l = role_link_at(c, i);
            if (l && l->ch.held) link_service(c, l);
        }
    }
}

/* Writes what the sockets take, then finishes the ops that are complete: an
 * op completes only once its own frames are written. */
static void flush_and_complete(eccl_comm *c)
{
    for (;;) {
        int drained = 1;
        for (p2p_link *l = c->links; l; l = l->next) {
            if (l->ch.out_head && l->ch.error == ECCL_OK) eccl_chan_flush(&l->ch);
            if (l->ch.out_head && l->ch.error == ECCL_OK) drained = 0;
        }
        /* A queue the socket emptied leaves nothing to wake us for, though
         * the queue cap may have held back slices that are ready: queue
         * them now. A queue left non-empty waits for writability. */
        if (!drained || !ops_pump(c)) break;
    }
    for (eccl_request *r = c->ops; r; r = r->next) {
        if (r->state != OP_RUNNING) continue;
        eccl_result err = r->alg->error(&r->u);
        if (err != ECCL_OK) op_finish(c, r, err);
        else if (op_complete(r)) op_finish(c, r, ECCL_OK);
    }
}

static uint64_t min_deadline(uint64_t a, uint64_t b) { return a < b ? a : b; }

static uint64_t timers(eccl_comm *c)
{
    uint64_t now = now_ns(c), next = ECCL_NO_DEADLINE;
    if (c->phase == PHASE_REGISTERING && !c->master_open && c->master_retry_at) {
        if (now >= c->master_deadline) {
            comm_fail(c, ECCL_ERR_CONNECT);
        } else if (now >= c->master_retry_at) {
            c->master_retry_at = 0;
            if (master_open(c) != ECCL_OK) master_retry_schedule(c);
        }
        if (c->master_retry_at) next = min_deadline(next, c->master_retry_at);
    }
    if (c->master_open && c->phase != PHASE_REGISTERING) {
        uint64_t timeout = (uint64_t)c->params.peer_timeout_ms * MS;
        if (now - c->master.last_rx_ns > timeout) {
            ECCL_WARN(c->env, "master silent for %u ms", c->params.peer_timeout_ms);
            comm_fail(c, ECCL_ERR_MASTER_LOST);
            return ECCL_NO_DEADLINE;
        }
        if (now >= c->heartbeat_at) {
            eccl_msg m = {.type = ECCL_MSG_HEARTBEAT};
            master_send(c, &m);
            c->heartbeat_at = now + timeout / 4;
        }
        next = min_deadline(next, min_deadline(c->heartbeat_at, c->master.last_rx_ns + timeout + 1));
    }
    if (c->next_retry_at && !c->frozen && c->world > 1 && !c->link_next) {
        if (now >= c->next_retry_at) {
            c->next_retry_at = 0;
            link_connect_next(c);
        }
        if (c->next_retry_at) next = min_deadline(next, c->next_retry_at);
    }
    for (uint32_t k = 1; c->pslot && k < c->pool_out; k++) {
        struct pool_slot *ps = &c->pslot[k];
        if (!ps->retry_at || ps->next) continue;
        if (now >= ps->retry_at) ps->retry_at = 0; /* ops_pump reopens it when needed */
        else next = min_deadline(next, ps->retry_at);
    }
    if (c->parent_retry_at && !c->frozen && !c->link_tree[ECCL_TREE_PARENT]) {
        if (now >= c->parent_retry_at) {
            c->parent_retry_at = 0;
            link_connect_parent(c);
        }
        if (c->parent_retry_at) next = min_deadline(next, c->parent_retry_at);
    }
    if (c->opt.probing)
        next = min_deadline(next, now < c->opt.stop_ns ? c->opt.stop_ns : c->opt.give_up_ns);
    for (eccl_request *r = c->ops; r; r = r->next) {
        if (r->state == OP_DONE) continue;
        if (now >= r->deadline_ns) {
            if (r->state != OP_QUEUED) {
                /* Our links may hold frames into this buffer, and neighbours
                 * are stuck too: drop the links; the notice asks the master
                 * to re-form the ring. */
                links_close_upto(c, UINT32_MAX);
            }
            op_finish(c, r, ECCL_ERR_TIMEOUT);
        } else {
            next = min_deadline(next, r->deadline_ns);
        }
    }
    return next;
}

static uint64_t comm_step(void *owner, void **ready, int n, int *again)
{
    eccl_comm *c = owner;
    for (int i = 0; i < n; i++) {
        int kind = *(int *)ready[i];
        if (kind == ECCL_HANDLE_LISTENER) {
            accept_links(c);
        } else if (ready[i] == &c->master) {
            master_service(c);
        } else {
            link_service(c, ready[i]);
        }
    }
    uint64_t next = timers(c);
    ops_advance(c);
    *again = 0;
    p2p_link *lists[2] = {c->links, c->side_links};
    for (int k = 0; k < 2; k++) {
        for (p2p_link *l = lists[k], *nx; l; l = nx) {
            nx = l->next;
            if (l->ch.more) link_service(c, l);
            else if (l->ch.out_head) eccl_chan_flush(&l->ch);
            if (l->ch.more) *again = 1;
        }
    }
    ops_advance(c);
    flush_and_complete(c);
    probe_pump(c);
    return next;
}

static void comm_reap(void *owner)
{
    eccl_comm *c = owner;
    for (p2p_link *l = c->graveyard, *n; l; l = n) {
        n = l->next;
        free(l);
    }
    c->graveyard = NULL;
}

static const eccl_engine_ops comm_engine_ops = {comm_step, comm_reap};

/* ---- public API ------------------------------------------------------------- */

void eccl_comm_params_init(eccl_comm_params *p)
{
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->p2p_host = "127.0.0.1";
    p->p2p_pool_size = 1;
    p->connect_timeout_ms = 10000;
    p->op_timeout_ms = 60000;
    p->peer_timeout_ms = 5000;
}

/* "A,B,...": 1..COMM_MASTER_ADDRS non-empty addresses. */
static eccl_result parse_master_addrs(eccl_comm *c)
{
    const char *a = c->master_addr;
    for (;;) {
        size_t len = strcspn(a, ",");
        if (len == 0 || len >= ECCL_ADDR_MAX || c->n_master_addrs == COMM_MASTER_ADDRS)
            return ECCL_ERR_INVALID_ARG;
        memcpy(c->master_addrs[c->n_master_addrs], a, len);
        c->master_addrs[c->n_master_addrs++][len] = '\0';
        if (!a[len]) return ECCL_OK;
        a += len + 1;
    }
}

eccl_result eccl_comm_create_with_env(eccl_env *env, eccl_env_release_fn release,
                                      const eccl_comm_params *params, eccl_comm **out)
{
    eccl_result rc;
    if (!params || !out || !params->master_addr ||
        strlen(params->master_addr) >= sizeof ((eccl_comm *)0)->master_addr ||
        (params->p2p_host && strlen(params->p2p_host) + 7 >= ECCL_ADDR_MAX)) {
        release(env);
        return ECCL_ERR_INVALID_ARG;
    }
    eccl_comm *c = calloc(1, sizeof *c);
    if (!c) {
        release(env);
        return ECCL_ERR_NO_MEMORY;
    }
    c->env = env;
    c->env_release = release;
    c->params = *params;
    snprintf(c->master_addr, sizeof c->master_addr, "%s", params->master_addr);
    if (parse_master_addrs(c) != ECCL_OK) {
        free(c);
        release(env);
        return ECCL_ERR_INVALID_ARG;
    }
    snprintf(c->p2p_host, sizeof c->p2p_host, "%s",
             params->p2p_host ? params->p2p_host : "127.0.0.1");
    c->params.master_addr = c->master_addr;
    c->params.p2p_host = c->p2p_host;
    if (!c->params.connect_timeout_ms) c->params.connect_timeout_ms = 10000;
    if (!c->params.op_timeout_ms) c->params.op_timeout_ms = 60000;
    if (!c->params.peer_timeout_ms) c->params.peer_timeout_ms = 5000;
    if (!c->params.p2p_pool_size) c->params.p2p_pool_size = 1;
    if (c->params.p2p_pool_size > ECCL_WIRE_MAX_POOL) {
        rc = ECCL_ERR_INVALID_ARG;
        goto fail;
    }
    /* ECCL_P2P_POOL overrides the caller's pool size (a deployment knob). */
    c->params.p2p_pool_size = (uint32_t)eccl_config_uint(env, "ECCL_P2P_POOL", 1, ECCL_WIRE_MAX_POOL,
                                                         c->params.p2p_pool_size);
    c->pool_out = c->params.p2p_pool_size;
    /* Plain all-reduces on device buffers of at least this many bytes run the
     * device-resident ring; smaller ones, quantised ones, and all of them by
     * default, a host mirror (docs/devices.md says why). 0: always the mirror. */
    c->resident_min = (size_t)eccl_config_uint(env, "ECCL_DEVICE_RING_MIN_BYTES", 0, UINT64_MAX >> 1, 0);
    if (c->resident_min && c->resident_min < COMM_RESIDENT_MIN) c->resident_min = COMM_RESIDENT_MIN;
    /* Off, the communicator progresses only inside its calls (as MPI
     * without an async progress thread): one thread less per rank, for
     * applications that call back to back. Between calls nobody answers
     * heartbeats or serves async ops, so a gap longer than the peer
     * timeout costs this peer its membership. */
    c->progress_thread = eccl_config_uint(env, "ECCL_PROGRESS_THREAD", 0, 1, 1) != 0;
    if (c->pool_out > 1 && pool_alloc(c) != ECCL_OK) {
        rc = ECCL_ERR_NO_MEMORY;
        goto fail;
    }
    c->cap_recent = c->cap_aborted = COMM_RING_START;
    c->recent = malloc(c->cap_recent * sizeof *c->recent);
    c->aborted_tags = malloc(c->cap_aborted * sizeof *c->aborted_tags);
    if (!c->recent || !c->aborted_tags) {
        rc = ECCL_ERR_NO_MEMORY;
        goto fail;
    }
    c->listener.kind = ECCL_HANDLE_LISTENER;
    eccl_bufpool_init(&c->pool, env);
    ECCL_CHECK(env, eccl_engine_init(&c->eng, env, &comm_engine_ops, c));
    *out = c;
    return ECCL_OK;
fail:
    free(c->recent);
    free(c->aborted_tags);
    free(c->pslot);
    free(c);
    release(env);
    return rc;
}

static int connect_done(void *arg)
{
    eccl_comm *c = arg;
    return c->phase == PHASE_FAILED || (c->phase == PHASE_ACCEPTED && c->ring_ready);
}

eccl_result eccl_comm_connect(eccl_comm *c)
{
    if (!c) return ECCL_ERR_INVALID_ARG;
    eccl_result rc = ECCL_OK;
    eccl_engine_lock(&c->eng);
    if (c->phase == PHASE_NEW) {
        char addr[ECCL_ADDR_MAX + 4];
        snprintf(addr, sizeof addr, "%s:0", c->p2p_host);
        ECCL_CHECK(c->env, c->env->net->listen(c->env->net_ctx, addr, &c->listener,
                                               &c->listener.l, c->p2p_addr));
        c->phase = PHASE_REGISTERING;
        c->master_deadline = now_ns(c) + (uint64_t)c->params.connect_timeout_ms * MS;
        rc = master_open(c);
        if (rc != ECCL_OK) {
            if (rc != ECCL_ERR_CONNECT) goto fail;
            master_retry_schedule(c);
        }
        if (c->progress_thread) ECCL_CHECK(c->env, eccl_engine_start(&c->eng, "eccl-comm"));
    }
    rc = eccl_engine_drive(&c->eng, connect_done, c,
                           now_ns(c) + (uint64_t)c->params.op_timeout_ms * MS);
    if (c->phase == PHASE_FAILED) rc = c->fatal;
fail:
    eccl_engine_unlock(&c->eng);
    return rc;
}

static eccl_result comm_usable(const eccl_comm *c)
{
    if (c->phase == PHASE_FAILED) return c->fatal;
    if (c->phase != PHASE_ACCEPTED) return ECCL_ERR_NOT_CONNECTED;
    return ECCL_OK;
}

typedef struct topo_wait {
    eccl_comm *c;
    uint64_t target;
} topo_wait;

static int topo_done(void *arg)
{
    topo_wait *w = arg;
    return w->c->phase == PHASE_FAILED || (w->c->topo_done_seen >= w->target && w->c->ring_ready);
}

eccl_result eccl_comm_update_topology(eccl_comm *c)
{
    if (!c) return ECCL_ERR_INVALID_ARG;
    eccl_engine_lock(&c->eng);
    eccl_result rc = comm_usable(c);
    /* never mid-collective, never mid-sync */
    if (rc == ECCL_OK && (c->n_ops > 0 || c->sync.active)) rc = ECCL_ERR_BUSY;
    if (rc == ECCL_OK) {
        topo_wait w = {c, c->topo_done_seen + 1};
        eccl_msg m = {.type = ECCL_MSG_TOPO_VOTE};
        rc = master_send(c, &m);
        eccl_engine_kick(&c->eng);
        if (rc == ECCL_OK)
            rc = eccl_engine_drive(&c->eng, topo_done, &w,
                                   now_ns(c) + (uint64_t)c->params.op_timeout_ms * MS);
        if (c->phase == PHASE_FAILED) rc = c->fatal;
    }
    eccl_engine_unlock(&c->eng);
    return rc;
}

typedef struct pending_wait {
    eccl_comm *c;
    uint64_t target;
} pending_wait;

static int pending_done(void *arg)
{
    pending_wait *w = arg;
    return w->c->phase == PHASE_FAILED || w->c->pending_replies >= w->target;
}

eccl_result eccl_comm_peers_pending(eccl_comm *c, uint32_t *pending)
{
    if (!c || !pending) return ECCL_ERR_INVALID_ARG;
    eccl_engine_lock(&c->eng);
    eccl_result rc = comm_usable(c);
    if (rc == ECCL_OK && c->sync.active) rc = ECCL_ERR_BUSY;
    if (rc == ECCL_OK) {
        pending_wait w = {c, c->pending_replies + 1};
        eccl_msg m = {.type = ECCL_MSG_PENDING_QUERY};
        rc = master_send(c, &m);
        eccl_engine_kick(&c->eng);
        if (rc == ECCL_OK)
            rc = eccl_engine_drive(&c->eng, pending_done, &w,
                                   now_ns(c) + (uint64_t)c->params.op_timeout_ms * MS);
        if (c->phase == PHASE_FAILED) rc = c->fatal;
        if (rc == ECCL_OK) *pending = c->pending_value;
    }
    eccl_engine_unlock(&c->eng);
    return rc;
}

eccl_result eccl_comm_get_attr(eccl_comm *c, eccl_attr attr, int64_t *value)
{
    if (!c || !value) return ECCL_ERR_INVALID_ARG;
    eccl_result rc = ECCL_OK;
    eccl_engine_lock(&c->eng);
    switch (attr) {
    case ECCL_ATTR_RANK: *value = c->rank; break;
    case ECCL_ATTR_WORLD_SIZE: *value = c->world; break;
    case ECCL_ATTR_PEER_ID: *value = (int64_t)c->peer_id; break;
    case ECCL_ATTR_EPOCH: *value = c->epoch; break;
    case ECCL_ATTR_P2P_POOL: *value = c->pool_out; break;
    case ECCL_ATTR_RING_LINKS:
        *value = c->link_next != NULL;
        for (uint32_t k = 1; c->pslot && k < c->pool_out; k++) *value += c->pslot[k].next != NULL;
        break;
    default: rc = ECCL_ERR_INVALID_ARG;
    }
    eccl_engine_unlock(&c->eng);
    return rc;
}

void eccl_comm_destroy(eccl_comm *c)
{
    if (!c) return;
    if (c->eng.thread) eccl_engine_stop(&c->eng);
    ops_fail_all(c, ECCL_ERR_CLOSED);
    for (eccl_request *r = c->ops, *n; r; r = n) {
        n = r->next;
        eccl_stage_end(&r->stage, ECCL_ERR_CLOSED); /* frees a mirror never waited for */
        free(r);
    }
    if (c->master_open) {
        eccl_chan_flush(&c->master);
        eccl_chan_close(&c->master);
    }
    if (c->listener.l) c->env->net->close_listener(c->env->net_ctx, c->listener.l);
    comm_reap(c);
    eccl_bufpool_fini(&c->pool);
    eccl_engine_fini(&c->eng);
    c->env_release(c->env);
    free(c->recent);
    free(c->aborted_tags);
    free(c->pslot);
    free(c);
}

/* ---- collectives: submitting a call ------------------------------------------- */

/* Mutex held. Queues `call` (arguments already checked), made when the
 * world was `world` and we were `rank` (the layout the caller meant), and
 * starts it if it can. `barrier`: the call is a barrier's one-byte
 * all-reduce on the request's own bytes. `kick`: wake the background
 * poller so it takes the new op into account; a blocking call that drives
 * progress itself skips that. */
static eccl_result coll_submit(eccl_comm *c, const eccl_coll_call *call, uint32_t world,
                               uint32_t rank, const eccl_stage *stage, int barrier, int kick,
                               eccl_request **out)
{
    eccl_result rc = comm_usable(c);
    if (rc != ECCL_OK) return rc;
    if (c->sync.active) return ECCL_ERR_BUSY; /* shared-state sync of this group */
    if (op_find(c, call->tag)) return ECCL_ERR_BUSY;
    if (c->n_ops >= ECCL_WIRE_MAX_OPS) return ECCL_ERR_BUSY;
    eccl_request *r = calloc(1, sizeof *r);
    if (!r) return ECCL_ERR_NO_MEMORY;
    r->comm = c;
    r->call = *call;
    r->call.on_device = stage->resident;
    r->call.device = stage->device;
    if (barrier) {
        r->call.sendbuf = &r->barrier_buf[0];
        r->call.recvbuf = &r->barrier_buf[1];
    }
    r->called_world = world;
    r->called_rank = rank;
    r->stage = *stage;
    r->state = OP_QUEUED;
    r->deadline_ns = now_ns(c) + (uint64_t)c->params.op_timeout_ms * MS;
    r->next = c->ops;
    c->ops = r;
    c->n_ops++;
    if (aborted_take(c, call->tag)) {
        r->call.nranks = c->world;
        op_finish(c, r, ECCL_ERR_PEER_LOST);
    } else if (call->count == 0) {
        r->call.nranks = c->world;
        op_finish(c, r, c->world < 2 ? ECCL_ERR_TOO_FEW_PEERS : ECCL_OK);
    } else {
        ops_advance(c);
        flush_and_complete(c);
    }
    if (kick) eccl_engine_kick(&c->eng);
    *out = r;
    return ECCL_OK;
}

/* ---- all-reduce ---------------------------------------------------------- */

/* Whether the caller's options struct holds `field` (it may predate it):
 * fields past its end keep their defaults. */
#define OPTS_HAS(o, field) \
    ((o) != NULL && (o)->size >= offsetof(eccl_allreduce_opts, field) + sizeof(o)->field)

/* Mutex held. `kick`: wake the background poller so it takes the new op
 * into account; a blocking call that drives progress itself skips that. */
static eccl_result allreduce_submit(eccl_comm *c, const void *sendbuf, void *recvbuf,
                                    size_t count, eccl_dtype dtype, eccl_op op,
                                    uint64_t tag, const eccl_allreduce_opts *opts,
                                    const eccl_stage *stage, int kick, eccl_request **out)
{
    if ((unsigned)dtype >= ECCL_DTYPE_COUNT || (unsigned)op >= ECCL_OP_COUNT)
        return ECCL_ERR_INVALID_ARG;
    if (opts && !OPTS_HAS(opts, quant)) return ECCL_ERR_INVALID_ARG;
    eccl_quant_type quant = OPTS_HAS(opts, quant) ? opts->quant : ECCL_QUANT_NONE;
    if (quant != ECCL_QUANT_NONE) {
        if (quant != ECCL_QUANT_MINMAX_U8 && quant != ECCL_QUANT_AFFINE_U8) return ECCL_ERR_INVALID_ARG;
        if (op != ECCL_SUM && op != ECCL_AVG) return ECCL_ERR_INVALID_ARG;
        if (dtype == ECCL_F64) return ECCL_ERR_UNSUPPORTED;
        if (dtype != ECCL_F32 && dtype != ECCL_F16 && dtype != ECCL_BF16) return ECCL_ERR_INVALID_ARG;
        /* The quantiser reads and writes tensor bytes itself: phantom
         * memory has none (its staging would be phantom too). */
        if (eccl_dev_has_phantom(c->env)) return ECCL_ERR_UNSUPPORTED;
    }
    if (count && (!sendbuf || !recvbuf)) return ECCL_ERR_INVALID_ARG;
    if (count > SIZE_MAX / 16 / eccl_dtype_size(dtype)) return ECCL_ERR_INVALID_ARG;
    eccl_coll_call call = {.kind = ECCL_COLL_ALLREDUCE, .tag = tag, .sendbuf = sendbuf,
                           .recvbuf = recvbuf, .count = count, .dtype = dtype, .op = op,
                           .quant = quant};
    return coll_submit(c, &call, c->world, c->rank, stage, 0, kick, out);
}

static int request_done(void *arg) { return ((eccl_request *)arg)->state == OP_DONE; }


/* Frees a finished request; *stage gets its staging, to be ended by the
 * caller once the engine's mutex is released (the copy to the device may
 * take a while, and must not hold up other ops' progress). */
static eccl_result request_reap(eccl_request *r, eccl_reduce_info *info, eccl_stage *stage)
{
    eccl_result rc = r->result;
    *stage = r->stage;
    if (info) {
        memset(info, 0, sizeof *info);
        info->world_size = r->call.nranks;
        if (r->alg) {
            info->algorithm = r->alg->id;
            r->alg->bytes(&r->u, &info->tx_bytes, &info->rx_bytes);
        }
    }
    op_unlink(r->comm, r);
    free(r);
    return rc;
}

eccl_result eccl_allreduce_async(eccl_comm *c, const void *sendbuf, void *recvbuf,
                                 size_t count, eccl_dtype dtype, eccl_op op,
                                 uint64_t tag, eccl_request **req)
{
    return eccl_allreduce_ex_async(c, sendbuf, recvbuf, count, dtype, op, tag, NULL, req);
}

/* Mutex held: drives progress until the op is done (it enforces its own
 * deadline), then frees it. */
static eccl_result request_finish(eccl_comm *c, eccl_request *r, eccl_reduce_info *info,
                                  eccl_stage *stage)
{
    eccl_engine_drive(&c->eng, request_done, r, ECCL_NO_DEADLINE);
    if (r->state != OP_DONE) op_finish(c, r, c->phase == PHASE_FAILED ? c->fatal : ECCL_ERR_CLOSED);
    return request_reap(r, info, stage);
}

eccl_result eccl_wait(eccl_request *r, eccl_reduce_info *info)
{
    if (!r) return ECCL_ERR_INVALID_ARG;
    eccl_comm *c = r->comm;
    eccl_stage stage;
    eccl_engine_lock(&c->eng);
    eccl_result rc = request_finish(c, r, info, &stage);
    eccl_engine_unlock(&c->eng);
    return eccl_stage_end(&stage, rc);
}

eccl_result eccl_test(eccl_request *r, int *done, eccl_reduce_info *info)
{
    if (!r || !done) return ECCL_ERR_INVALID_ARG;
    eccl_comm *c = r->comm;
    eccl_stage stage = {0};
    eccl_engine_lock(&c->eng);
    /* Nobody else moves the op forward: this test does, one look a call. */
    if (!c->progress_thread && r->state != OP_DONE) eccl_engine_poll_once(&c->eng);
    *done = r->state == OP_DONE;
    eccl_result rc = *done ? request_reap(r, info, &stage) : ECCL_OK;
    eccl_engine_unlock(&c->eng);
    return eccl_stage_end(&stage, rc);
}

eccl_result eccl_allreduce(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                           eccl_dtype dtype, eccl_op op, uint64_t tag,
                           eccl_reduce_info *info)
{
    return eccl_allreduce_ex(c, sendbuf, recvbuf, count, dtype, op, tag, NULL, info);
}

void eccl_allreduce_opts_init(eccl_allreduce_opts *opts)
{
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    opts->size = sizeof *opts;
    opts->quant = ECCL_QUANT_NONE;
    opts->stream = NULL;
}

/* Before the engine's mutex: device buffers are swapped for a host mirror
 * holding the input (stage.h). The copy may take a while, and must not hold
 * up other ops' progress. Arguments the submit would refuse are left to it. */
static eccl_result allreduce_stage(eccl_comm *c, const void **sendbuf, void **recvbuf,
                                   size_t count, eccl_dtype dtype, const eccl_allreduce_opts *opts,
                                   eccl_stage *stage)
{
    void *stream = OPTS_HAS(opts, stream) ? opts->stream : NULL;
    size_t es = eccl_dtype_size(dtype);
    if (!es || !count || !*sendbuf || !*recvbuf || count > SIZE_MAX / 16 / es) {
        memset(stage, 0, sizeof *stage);
        return ECCL_OK;
    }
    eccl_quant_type quant = OPTS_HAS(opts, quant) ? opts->quant : ECCL_QUANT_NONE;
    return eccl_stage_begin_resident(stage, c->env, sendbuf, recvbuf, count * es, stream,
                                     quant == ECCL_QUANT_NONE ? c->resident_min : 0);
}

eccl_result eccl_allreduce_ex_async(eccl_comm *c, const void *sendbuf, void *recvbuf,
                                    size_t count, eccl_dtype dtype, eccl_op op, uint64_t tag,
                                    const eccl_allreduce_opts *opts, eccl_request **req)
{
    if (!c || !req) return ECCL_ERR_INVALID_ARG;
    eccl_stage stage;
    eccl_result rc = allreduce_stage(c, &sendbuf, &recvbuf, count, dtype, opts, &stage);
    if (rc != ECCL_OK) return rc;
    eccl_engine_lock(&c->eng);
    rc = allreduce_submit(c, sendbuf, recvbuf, count, dtype, op, tag, opts, &stage, 1, req);
    eccl_engine_unlock(&c->eng);
    if (rc != ECCL_OK) eccl_stage_end(&stage, rc);
    return rc;
}

eccl_result eccl_allreduce_ex(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                              eccl_dtype dtype, eccl_op op, uint64_t tag,
                              const eccl_allreduce_opts *opts, eccl_reduce_info *info)
{
    if (!c) return ECCL_ERR_INVALID_ARG;
    eccl_request *r = NULL;
    eccl_stage stage;
    eccl_result rc = allreduce_stage(c, &sendbuf, &recvbuf, count, dtype, opts, &stage);
    if (rc != ECCL_OK) return rc;
    eccl_engine_lock(&c->eng);
    eccl_result sub = allreduce_submit(c, sendbuf, recvbuf, count, dtype, op, tag, opts, &stage, 0, &r);
    if (sub == ECCL_OK) {
        rc = request_finish(c, r, info, &stage); /* the request hands its stage back */
    } else {
        rc = sub;
    }
    eccl_engine_unlock(&c->eng);
    return eccl_stage_end(&stage, rc);
}

/* ---- all-gather, reduce-scatter, broadcast, reduce, barrier ------------------- */

/* Checks a layout-bound call against the world it is made in. */
static eccl_result coll_check(const eccl_coll_call *call, uint32_t world, uint32_t rank)
{
    int reducing = call->kind == ECCL_COLL_REDUCE_SCATTER || call->kind == ECCL_COLL_REDUCE;
    if ((unsigned)call->dtype >= ECCL_DTYPE_COUNT || (reducing && (unsigned)call->op >= ECCL_OP_COUNT))
        return ECCL_ERR_INVALID_ARG;
    int rooted = call->kind == ECCL_COLL_BROADCAST || call->kind == ECCL_COLL_REDUCE;
    if (rooted && call->root >= world) return ECCL_ERR_INVALID_ARG;
    /* Blocks of world * count elements must stay far from overflow. */
    if (call->count > SIZE_MAX / 16 / eccl_dtype_size(call->dtype) / (world ? world : 1))
        return ECCL_ERR_INVALID_ARG;
    if (!call->count) return ECCL_OK;
    int root = rank == call->root;
    int need_in = call->kind != ECCL_COLL_BROADCAST || root;
    int need_out = call->kind != ECCL_COLL_REDUCE || root;
    return (need_in && !call->sendbuf) || (need_out && !call->recvbuf) ? ECCL_ERR_INVALID_ARG : ECCL_OK;
}

/* Where input and output sit in a device call's host mirror: the layouts
 * of eccl.h, so the call runs on the mirror as if in place. */
static eccl_stage_layout coll_layout(const eccl_coll_call *call, uint32_t world, uint32_t rank)
{
    size_t b = call->count * eccl_dtype_size(call->dtype);
    int root = rank == call->root;
    switch (call->kind) {
    case ECCL_COLL_ALLGATHER: return (eccl_stage_layout){b, rank * b, world * b, 0, world * b};
    case ECCL_COLL_REDUCE_SCATTER: return (eccl_stage_layout){world * b, 0, b, rank * b, world * b};
    case ECCL_COLL_BROADCAST: return (eccl_stage_layout){root ? b : 0, 0, b, 0, b};
    default: return (eccl_stage_layout){b, 0, root ? b : 0, 0, b};
    }
}

/* One layout-bound call, blocking (req NULL: info gets what it did) or
 * not (*req gets the request). */
static eccl_result coll_call(eccl_comm *c, eccl_coll_call call, eccl_reduce_info *info,
                             eccl_request **req)
{
    if (!c) return ECCL_ERR_INVALID_ARG;
    eccl_engine_lock(&c->eng);
    eccl_result rc = comm_usable(c);
    uint32_t world = c->world, rank = c->rank;
    eccl_engine_unlock(&c->eng);
    if (rc == ECCL_OK) rc = coll_check(&call, world, rank);
    if (rc != ECCL_OK) return rc;
    eccl_stage stage;
    eccl_stage_layout lay = coll_layout(&call, world, rank);
    const void *in = call.sendbuf;
    void *out = call.recvbuf;
    rc = call.count ? eccl_stage_begin_layout(&stage, c->env, &in, &out, &lay, NULL) : ECCL_OK;
    if (!call.count) memset(&stage, 0, sizeof stage);
    if (rc != ECCL_OK) return rc;
    call.sendbuf = in;
    call.recvbuf = out;
    eccl_request *r = NULL;
    eccl_engine_lock(&c->eng);
    rc = coll_submit(c, &call, world, rank, &stage, 0, req != NULL, &r);
    if (rc == ECCL_OK && !req) rc = request_finish(c, r, info, &stage);
    eccl_engine_unlock(&c->eng);
    if (!req) return eccl_stage_end(&stage, rc);
    if (rc != ECCL_OK) return eccl_stage_end(&stage, rc);
    *req = r;
    return ECCL_OK;
}

static eccl_coll_call gather_call(const void *sendbuf, void *recvbuf, size_t count, eccl_dtype dtype,
                                  uint64_t tag)
{
    return (eccl_coll_call){.kind = ECCL_COLL_ALLGATHER, .tag = tag, .sendbuf = sendbuf,
                            .recvbuf = recvbuf, .count = count, .dtype = dtype};
}

eccl_result eccl_allgather(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t sendcount,
                           eccl_dtype dtype, uint64_t tag, eccl_reduce_info *info)
{
    return coll_call(c, gather_call(sendbuf, recvbuf, sendcount, dtype, tag), info, NULL);
}

eccl_result eccl_allgather_async(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t sendcount,
                                 eccl_dtype dtype, uint64_t tag, eccl_request **req)
{
    if (!req) return ECCL_ERR_INVALID_ARG;
    return coll_call(c, gather_call(sendbuf, recvbuf, sendcount, dtype, tag), NULL, req);
}

static eccl_coll_call reducing_call(eccl_coll_kind kind, const void *sendbuf, void *recvbuf,
                                    size_t count, eccl_dtype dtype, eccl_op op, uint32_t root,
                                    uint64_t tag)
{
    return (eccl_coll_call){.kind = kind, .tag = tag, .sendbuf = sendbuf, .recvbuf = recvbuf,
                            .count = count, .dtype = dtype, .op = op, .root = root};
}

eccl_result eccl_reduce_scatter(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t recvcount,
                                eccl_dtype dtype, eccl_op op, uint64_t tag, eccl_reduce_info *info)
{
    return coll_call(c, reducing_call(ECCL_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, 0, tag),
                     info, NULL);
}

eccl_result eccl_reduce_scatter_async(eccl_comm *c, const void *sendbuf, void *recvbuf,
                                      size_t recvcount, eccl_dtype dtype, eccl_op op, uint64_t tag,
                                      eccl_request **req)
{
    if (!req) return ECCL_ERR_INVALID_ARG;
    return coll_call(c, reducing_call(ECCL_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, 0, tag),
                     NULL, req);
}

eccl_result eccl_broadcast(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                           eccl_dtype dtype, uint32_t root, uint64_t tag, eccl_reduce_info *info)
{
    return coll_call(c, reducing_call(ECCL_COLL_BROADCAST, sendbuf, recvbuf, count, dtype, ECCL_SUM, root, tag),
                     info, NULL);
}

eccl_result eccl_broadcast_async(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                                 eccl_dtype dtype, uint32_t root, uint64_t tag, eccl_request **req)
{
    if (!req) return ECCL_ERR_INVALID_ARG;
    return coll_call(c, reducing_call(ECCL_COLL_BROADCAST, sendbuf, recvbuf, count, dtype, ECCL_SUM, root, tag),
                     NULL, req);
}

eccl_result eccl_reduce(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t count, eccl_dtype dtype,
                        eccl_op op, uint32_t root, uint64_t tag, eccl_reduce_info *info)
{
    return coll_call(c, reducing_call(ECCL_COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root, tag), info,
                     NULL);
}

eccl_result eccl_reduce_async(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                              eccl_dtype dtype, eccl_op op, uint32_t root, uint64_t tag,
                              eccl_request **req)
{
    if (!req) return ECCL_ERR_INVALID_ARG;
    return coll_call(c, reducing_call(ECCL_COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root, tag), NULL,
                     req);
}

/* A one-byte MAX all-reduce on the request's own bytes: it returns only
 * once every peer has entered, with all-reduce's fault contract. */
static eccl_result barrier_submit(eccl_comm *c, uint64_t tag, int kick, eccl_request **out)
{
    eccl_coll_call call = {.kind = ECCL_COLL_ALLREDUCE, .tag = tag, .count = 1, .dtype = ECCL_U8,
                           .op = ECCL_MAX};
    eccl_stage stage = {0};
    return coll_submit(c, &call, c->world, c->rank, &stage, 1, kick, out);
}

eccl_result eccl_barrier(eccl_comm *c, uint64_t tag)
{
    if (!c) return ECCL_ERR_INVALID_ARG;
    eccl_request *r;
    eccl_stage stage;
    eccl_engine_lock(&c->eng);
    eccl_result rc = barrier_submit(c, tag, 0, &r);
    if (rc == ECCL_OK) rc = request_finish(c, r, NULL, &stage);
    eccl_engine_unlock(&c->eng);
    return rc;
}

eccl_result eccl_barrier_async(eccl_comm *c, uint64_t tag, eccl_request **req)
{
    if (!c || !req) return ECCL_ERR_INVALID_ARG;
    eccl_engine_lock(&c->eng);
    eccl_result rc = barrier_submit(c, tag, 1, req);
    eccl_engine_unlock(&c->eng);
    return rc;
}

/* ---- shared state (public) ------------------------------------------------------ */

static int sync_done(void *arg)
{
    eccl_comm *c = arg;
    return c->phase == PHASE_FAILED || c->sync.phase == SY_DONE;
}

/* Checks the caller's tensors and builds the sorted key list we vote with
 * (hashing every voted tensor). Runs without the lock: it touches only the
 * caller's memory. */
static eccl_result sync_prepare(const eccl_shared_state *st, eccl_hash_type ht,
                                eccl_wire_sync_key **keys_out, uint32_t **info_out,
                                uint32_t *n_out)
{
    size_t n = 0;
    for (size_t i = 0; i < st->count; i++) {
        const eccl_tensor_info *t = &st->infos[i];
        size_t len = t->key ? strlen(t->key) : 0;
        size_t es = eccl_dtype_size(t->dtype);
        if (len == 0 || len > ECCL_WIRE_MAX_KEY || es == 0 || t->count > SIZE_MAX / es ||
            (t->count && !t->data))
            return ECCL_ERR_INVALID_ARG;
        n += !t->allow_content_inequality;
    }
    if (n > ECCL_WIRE_MAX_SYNC_KEYS) return ECCL_ERR_INVALID_ARG;
    eccl_wire_sync_key *keys = n ? calloc(n, sizeof *keys) : NULL;
    uint32_t *info = n ? calloc(n, sizeof *info) : NULL;
    if (n && (!keys || !info)) {
        free(keys), free(info);
        return ECCL_ERR_NO_MEMORY;
    }
    uint32_t k = 0;
    for (size_t i = 0; i < st->count; i++) {
        const eccl_tensor_info *t = &st->infos[i];
        if (t->allow_content_inequality) continue;
        snprintf(keys[k].key, sizeof keys[k].key, "%s", t->key);
        keys[k].bytes = (uint64_t)t->count * eccl_dtype_size(t->dtype);
        keys[k].dtype = (uint8_t)t->dtype;
        keys[k].hash = eccl_hash(ht, t->data, (size_t)keys[k].bytes);
        info[k] = (uint32_t)i;
        k++;
    }
    /* Sort keys and their info indices together (insertion into a sorted
     * permutation: n <= 512). */
    uint32_t *perm = n ? malloc(n * sizeof *perm) : NULL;
    eccl_wire_sync_key *sorted = n ? malloc(n * sizeof *sorted) : NULL;
    uint32_t *sinfo = n ? malloc(n * sizeof *sinfo) : NULL;
    if (n && (!perm || !sorted || !sinfo)) {
        free(keys), free(info), free(perm), free(sorted), free(sinfo);
        return ECCL_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = i;
        while (j > 0 && strcmp(keys[perm[j - 1]].key, keys[i].key) > 0) {
            perm[j] = perm[j - 1];
            j--;
        }
        perm[j] = i;
    }
    eccl_result rc = ECCL_OK;
    for (uint32_t i = 0; i < n; i++) {
        sorted[i] = keys[perm[i]];
        sinfo[i] = info[perm[i]];
        if (i > 0 && strcmp(sorted[i - 1].key, sorted[i].key) == 0) rc = ECCL_ERR_INVALID_ARG;
    }
    /* A "may differ" key must not shadow a voted one either. */
    for (size_t i = 0; rc == ECCL_OK && i < st->count; i++) {
        if (!st->infos[i].allow_content_inequality) continue;
        for (size_t j = 0; j < st->count; j++)
            if (j != i && strcmp(st->infos[i].key, st->infos[j].key) == 0) rc = ECCL_ERR_INVALID_ARG;
    }
    free(keys), free(info), free(perm);
    if (rc != ECCL_OK) {
        free(sorted), free(sinfo);
        return rc;
    }
    *keys_out = sorted;
    *info_out = sinfo;
    *n_out = (uint32_t)n;
    return ECCL_OK;
}

static eccl_result sync_shared_state_host(eccl_comm *c, eccl_shared_state *st,
                                          eccl_sync_strategy strategy, eccl_hash_type ht,
                                          eccl_sync_info *info)
{
    eccl_wire_sync_key *keys = NULL;
    uint32_t *key_info = NULL, n_keys = 0;
    eccl_result rc = sync_prepare(st, ht, &keys, &key_info, &n_keys);
    if (rc != ECCL_OK) return rc;
    eccl_engine_lock(&c->eng);
    rc = comm_usable(c);
    /* One major operation per peer group at a time (DESIGN.md). */
    if (rc == ECCL_OK && (c->n_ops > 0 || c->sync.active)) rc = ECCL_ERR_BUSY;
    if (rc != ECCL_OK) {
        eccl_engine_unlock(&c->eng);
        free(keys), free(key_info);
        return rc;
    }
    comm_sync *s = &c->sync;
    uint32_t seq = s->seq + 1;
    memset(s, 0, sizeof *s);
    s->active = 1;
    s->phase = SY_ASKED;
    s->seq = seq;
    s->state = st;
    s->htype = ht;
    s->keys = keys;
    s->key_info = key_info;
    s->n_keys = n_keys;
    eccl_msg m = {.type = ECCL_MSG_SYNC_REQ};
    m.u.sync_req.seq = seq;
    m.u.sync_req.revision = st->revision;
    m.u.sync_req.strategy = (uint8_t)strategy;
    m.u.sync_req.hash_type = (uint8_t)ht;
    m.u.sync_req.n_keys = n_keys;
    m.u.sync_req.keys = keys;
    rc = master_send(c, &m);
    eccl_engine_kick(&c->eng);
    if (rc == ECCL_OK)
        rc = eccl_engine_drive(&c->eng, sync_done, c,
                               now_ns(c) + (uint64_t)c->params.op_timeout_ms * MS);
    if (c->phase == PHASE_FAILED) {
        rc = c->fatal;
    } else if (s->phase == SY_DONE) {
        rc = s->result;
    } else {
        /* Timed out (or closed): withdraw, so the master ends the round for
         * the others instead of waiting on us. */
        if (rc == ECCL_OK) rc = ECCL_ERR_TIMEOUT;
        sync_report(c, rc);
        sync_finish(c, rc, 0);
    }
    if (rc == ECCL_OK) st->revision = s->revision;
    if (info) {
        info->tx_bytes = s->tx;
        info->rx_bytes = s->rx;
        info->revision = rc == ECCL_OK ? s->revision : st->revision;
        info->keys_fetched = rc == ECCL_OK ? s->n_done : 0;
        info->keys_served = s->keys_served;
    }
    side_links_close(c, ECCL_LINK_SYNC);
    free(s->keys), free(s->key_info), free(s->fetch), free(s->src);
    s->keys = NULL, s->key_info = NULL, s->fetch = NULL, s->src = NULL;
    s->active = 0;
    eccl_engine_unlock(&c->eng);
    return rc;
}

/* Tensors on a device take part through pinned host mirrors (stage.h):
 * hashed, served and fetched there; written back to the device only after
 * the sync succeeded, so a failed sync leaves every device tensor as it was.
 * Host tensors are used in place, as ever. */
eccl_result eccl_comm_sync_shared_state(eccl_comm *c, eccl_shared_state *st,
                                        eccl_sync_strategy strategy, eccl_hash_type ht,
                                        eccl_sync_info *info)
{
    if (!c || !st || (st->count && !st->infos) || (unsigned)strategy > ECCL_SYNC_RECEIVE_ONLY ||
        (ht != ECCL_HASH_SIMPLE && ht != ECCL_HASH_CRC32C))
        return ECCL_ERR_INVALID_ARG;
    if (!eccl_dev_has_devices(c->env) || st->count == 0)
        return sync_shared_state_host(c, st, strategy, ht, info);
    eccl_tensor_info *mirrored = calloc(st->count, sizeof *mirrored);
    eccl_stage *stages = calloc(st->count, sizeof *stages);
    if (!mirrored || !stages) {
        free(mirrored);
        free(stages);
        return ECCL_ERR_NO_MEMORY;
    }
    eccl_result rc = ECCL_OK;
    size_t staged = 0;
    for (; rc == ECCL_OK && staged < st->count; staged++) {
        eccl_tensor_info *t = &mirrored[staged];
        *t = st->infos[staged];
        size_t es = eccl_dtype_size(t->dtype);
        if (!t->data || !es || t->count > SIZE_MAX / es) continue; /* sync_prepare refuses it */
        const void *in = t->data;
        rc = eccl_stage_begin(&stages[staged], c->env, &in, &t->data, t->count * es, NULL);
    }
    if (rc == ECCL_OK) {
        eccl_shared_state shadow = {.revision = st->revision, .count = st->count, .infos = mirrored};
        rc = sync_shared_state_host(c, &shadow, strategy, ht, info);
        st->revision = shadow.revision;
    } else {
        staged--; /* the one that failed holds nothing */
    }
    for (size_t i = 0; i < staged; i++) {
        eccl_result end = eccl_stage_end(&stages[i], rc);
        if (rc == ECCL_OK) rc = end;
    }
    free(mirrored);
    free(stages);
    return rc;
}

/* ---- topology optimisation (public) ----------------------------------------------- */

void eccl_topo_opts_init(eccl_topo_opts *opts)
{
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    opts->probe_ms = 50;
    opts->probe_conns = 4;
}

static int opt_done(void *arg)
{
    eccl_comm *c = arg;
    return c->phase == PHASE_FAILED ||
           (c->opt.done && (c->opt.fin.result != ECCL_OK || c->ring_ready));
}

eccl_result eccl_comm_optimize_topology(eccl_comm *c, const eccl_topo_opts *opts,
                                        eccl_topo_info *info)
{
    eccl_topo_opts defaults;
    if (!opts) {
        eccl_topo_opts_init(&defaults);
        opts = &defaults;
    }
    if (!c || opts->probe_ms == 0 || opts->probe_conns == 0 ||
        opts->probe_conns > ECCL_TOPO_MAX_CONNS)
        return ECCL_ERR_INVALID_ARG;
    if (info) memset(info, 0, sizeof *info);
    eccl_engine_lock(&c->eng);
    eccl_result rc = comm_usable(c);
    /* One major operation per peer group at a time (DESIGN.md). */
    if (rc == ECCL_OK && (c->n_ops > 0 || c->sync.active)) rc = ECCL_ERR_BUSY;
    if (rc != ECCL_OK) {
        eccl_engine_unlock(&c->eng);
        return rc;
    }
    comm_opt *o = &c->opt;
    uint32_t seq = o->seq + 1;
    memset(o, 0, sizeof *o);
    o->active = 1;
    o->seq = seq;
    eccl_msg m = {.type = ECCL_MSG_OPT_REQ};
    m.u.opt_req = (eccl_msg_opt_req){seq, opts->probe_ms, opts->probe_conns, opts->max_rounds};
    rc = master_send(c, &m);
    eccl_engine_kick(&c->eng);
    if (rc == ECCL_OK)
        rc = eccl_engine_drive(&c->eng, opt_done, c,
                               now_ns(c) + (uint64_t)c->params.op_timeout_ms * MS);
    if (c->phase == PHASE_FAILED) {
        rc = c->fatal;
    } else if (o->done) {
        rc = (eccl_result)o->fin.result;
    } else {
        /* Timed out: withdraw, so the master ends the call for the others
         * instead of waiting on us. */
        if (rc == ECCL_OK) rc = ECCL_ERR_TIMEOUT;
        eccl_msg w = {.type = ECCL_MSG_OPT_BW};
        w.u.opt_bw.seq = seq;
        w.u.opt_bw.result = (uint32_t)rc;
        if (c->master_open) master_send(c, &w);
    }
    if (info) {
        info->changed = o->fin.changed;
        info->exact = o->fin.exact;
        info->moonshot = o->fin.moonshot;
        info->pairs_measured = o->fin.pairs;
        info->unmeasured_links = o->fin.unmeasured;
        info->probes_sent = o->probes;
        info->probes_failed = o->failed;
        info->probe_bytes = o->tx;
        info->old_bottleneck_bps = (double)o->fin.old_bps;
        info->new_bottleneck_bps = (double)o->fin.new_bps;
    }
    o->probing = 0;
    side_links_close(c, ECCL_LINK_PROBE); /* drops frames that borrow the filler */
    free(o->filler);
    o->filler = NULL;
    o->active = 0;
    eccl_engine_unlock(&c->eng);
    return rc;
}
