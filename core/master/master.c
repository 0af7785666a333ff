/* The master: membership, ring order and the micro-consensus around them.
 *
 * Peers register (REGISTERED) and are admitted when every accepted peer has
 * voted (TOPO_VOTE from eccl_comm_update_topology). Any change of a group's
 * ring runs one view change:
 *
 *   VIEW_QUERY(e) -> every member freezes its epoch-e ops and reports, per
 *                    tag, whether it holds the full result
 *   VIEW_DECIDE   -> commit a tag iff every surviving member holds it (a
 *                    point-to-point tag: every surviving party), else
 *                    abort it (members restore their buffers)
 *   RING(e+1)     -> new neighbours; members report RING_READY when wired
 *
 * A collective's done-token round guarantees that if any peer returned
 * success, every peer held the result, so "commit iff all hold it" never
 * contradicts a peer that already returned. The master never blocks: a peer
 * that sends a bad frame or a message out of turn is kicked, one that goes
 * silent past its timeout is dropped, and the rest carry on.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/p2p.h"
#include "util/addr.h"
#include "coll/tree_allreduce.h"
#include "eccl_core.h"
#include "proto/chan.h"
#include "proto/gate.h"
#include "sched/engine.h"
#include "trace/trace.h"
#include "state/sync.h"
#include "topo/bwstore.h"
#include "topo/tsp.h"
#include "util/config.h"
#include "util/log.h"

#define MASTER_RBUF 512u
#define MASTER_DEFAULT_TIMEOUT_MS 5000u
#define MS 1000000ull

/* MP_RELAY: a relay (core/master/relay.c) that speaks for the peers behind
 * it; it is no peer itself. */
enum mpeer_state { MP_CONNECTED, MP_REGISTERED, MP_ACCEPTED, MP_RELAY, MP_STATES };
#define MP_RX 4 /* links in per member the master keeps rates of (a ring's one, a tree's few) */

/* A peer's part in its group's shared-state round (state/sync.h). */
enum msync_state {
    MS_NONE,      /* not in a sync call (as far as the master knows) */
    MS_SUBMITTED, /* asked; the round collects */
    MS_TRANSFER,  /* planned; fetching or serving */
    MS_REPORTED   /* its fetches are done; serving until the round closes */
};

/* The group's round. */
enum mgroup_sync { MG_SYNC_IDLE, MG_SYNC_COLLECTING, MG_SYNC_TRANSFER };

/* The group's optimize_topology call: every member asks, the master runs
 * probe rounds, solves the ring and re-forms it (docs/protocol.md). */
enum mgroup_opt { MG_OPT_IDLE, MG_OPT_COLLECTING, MG_OPT_PROBING, MG_OPT_REWIRING };
/* The background search ("moonshot") spends ECCL_TOPO_MOONSHOT_KICKS
 * (default below) on a group's last solved ring, MASTER_MOON_SLICE per
 * master step, and its ring is adopted at the next call if the members are
 * the same. */
#define MASTER_MOON_KICKS 4096u
#define MASTER_MOON_SLICE 8u
/* The foreground solve's work budget above the exact solver's 12 peers
 * (tsp.h units, ~10-20 ns each): ECCL_TOPO_SOLVE_WORK, this by default. */
#define MASTER_OPT_WORK 20000000ull

typedef struct mgroup mgroup;

typedef struct mpeer {
    eccl_chan ch; /* first: ready pointers are channels */
    struct mpeer *next;
    struct mpeer **pprev; /* what points at us in m->peers: O(1) unlink */
    uint64_t id;
    enum mpeer_state state;
    mgroup *group;
    char p2p_addr[ECCL_ADDR_MAX];
    uint64_t timeout_ns;
    uint64_t heartbeat_at;
    uint64_t registered_ns; /* when it registered: its admission's latency */
    int voted;
    int asked_pending;      /* in the current peers-pending round */
    int admitting;          /* chosen by the current admission */
    uint32_t ready_epoch;
    uint32_t host_ranks;    /* members sharing its host this epoch (group_by_host) */
    int leaving;            /* sent LEAVE: its ops are settled, it waits for the others */
    uint32_t late_us;       /* its last LATE_REPORT: it calls late by this (µs); 0: it does not */
    /* Its links in, as its LINK_RATEs measure them: the last MP_RX senders. */
    struct mrx {
        uint64_t from;      /* the sending peer; 0: a free slot */
        double bps;         /* the last window's rate */
        uint64_t bytes;     /* every byte it reported over this link */
        uint32_t slow;      /* windows in a row well under the group's reference (rate_ref) */
    } *rx;                  /* MP_RX of them once it reported one; else NULL */
    int reported;
    eccl_wire_op_flag *report;
    uint32_t n_report;
    /* shared state */
    enum msync_state sync_state;
    uint32_t sync_seq;          /* the peer's call counter, echoed back */
    uint64_t sync_rev;
    uint8_t sync_strategy, sync_htype;
    eccl_wire_sync_key *sync_keys; /* its SYNC_REQ list, copied out */
    uint32_t n_sync_keys;
    int sync_src;               /* a holder others fetch from this round */
    int synced;                 /* took part in the group's last good round */
    /* optimize_topology */
    int opt_asked;              /* in the group's optimize call */
    int opt_probing;            /* owes the OPT_BW of the current round */
    uint32_t opt_seq;
    eccl_msg_opt_req opt_req;
    /* A peer behind a relay has no channel of its own: its frames come and
     * go in the relay's batches, and its liveness is the relay's to watch. */
    struct mpeer *via;          /* that relay, or NULL */
    uint32_t handle;            /* the relay's name for it */
    /* a relay (MP_RELAY) */
    struct mpeer **kids;        /* handle -> peer behind it; NULL once gone */
    uint32_t n_kids, cap_kids;
    eccl_wire_batch out;        /* frames for them, sent at the end of the step */
    eccl_result out_err;        /* a frame `out` could not take: drop the relay */
    int ack_owed;               /* its last batch not answered yet (flow control) */
    struct mpeer *next_relay;
} mpeer;

struct mgroup {
    mgroup *next;
    uint32_t id;
    uint32_t epoch;
    mpeer **members;        /* ring order */
    uint32_t *starts;       /* send_rings' runs: their first ranks (room for cap) */
    uint32_t n, cap;
    uint32_t local_size;    /* this epoch's (eccl_msg_ring.local_size) */
    uint32_t n_ready;       /* members wired for `epoch` (RING_READY) */
    uint32_t n_reported;    /* members that answered the current query */
    uint32_t n_leaving;     /* members that sent LEAVE */
    int left_together;      /* every member sent LEAVE: they go, no ring re-forms */
    int querying;
    int change_wanted;
    uint32_t traced_epoch; /* TRACE_ASK sent for a failure of this epoch, plus one */
    uint64_t slow_peer;    /* the late member its members were told of (SLOW_NOTICE); 0: none */
    uint32_t slow_us;
    uint64_t slow_from, slow_to; /* the slow link its members were told of (SLOW_LINK); 0: none */
    double slow_bps;             /* its rate then */
    double rate_ref;       /* its members' links' rates (LINK_RATE): the upper quartile */
    uint64_t rate_ref_ns;  /* when it was taken; 0: never */
    uint32_t rate_reports; /* LINK_RATEs since */
    uint64_t query_ns;     /* when the current view change began (VIEW_QUERY), 0: none */
    /* The current query's decisions, once every member reported (tallied),
     * and the replicated results they wait for (docs/protocol.md, "The
     * commit rule"): each asked of one member that holds it. */
    int tallied;
    eccl_wire_op_flag *decided;
    uint32_t n_decided;
    struct mrepair {
        uint64_t tag;
        mpeer *source;      /* asked; NULL: nobody left to ask */
        uint8_t *bytes;     /* its answer, once in */
        uint32_t len;
        uint32_t decision;  /* index in `decided` */
    } *repairs;
    uint32_t n_repairs, repairs_owed;
    /* shared state */
    enum mgroup_sync sync_phase;
    uint32_t n_sync;        /* COLLECTING: asked; TRANSFER: yet to report */
    uint32_t sync_round;    /* id of the last round planned (tags p2p traffic) */
    int have_rev;           /* a round succeeded, at `revision` */
    uint64_t revision;
    uint64_t sync_elected;  /* the revision the current round elected */
    /* optimize_topology */
    enum mgroup_opt opt_phase;
    uint32_t n_opt;         /* COLLECTING: asked; PROBING: reports owed */
    uint32_t opt_shift;     /* the probe round: member i sends to i + shift */
    uint32_t opt_rounds;    /* probe rounds run by this call */
    eccl_msg_opt_req opt_req; /* the lowest-id member's options */
    eccl_msg_opt_done opt_done; /* the outcome, sent once rewired */
    /* moonshot: the members it searches for (ids, in the order moon_cost
     * rows are), and its best ring as indices into them */
    uint64_t *moon_ids;
    uint32_t *moon_ring;
    uint32_t moon_n;
    uint64_t moon_kicks;    /* spent so far */
    double *moon_cost;      /* the matrix it searches */
    eccl_tsp_result moon_given; /* the price of the ring it was given */
    int moon_better;        /* it found a better ring than it was given */
};

struct eccl_master {
    eccl_env *env;
    eccl_env_release_fn env_release;
    eccl_engine eng;
    struct {
        int kind;
        eccl_listener *l;
    } listener;
    char addr[ECCL_ADDR_MAX];
    eccl_gate gate; /* accepted connections still proving the secret */
    mpeer *peers;
    mpeer *graveyard;
    mgroup *groups;
    uint64_t next_id;
    int admitting;
    int running;
    /* Counters, so that no message costs a scan of every peer (a master
     * of 100k peers gets O(N) messages per decision). */
    uint32_t n_state[MP_STATES]; /* peers per mpeer_state */
    mpeer *relays;          /* MP_RELAY children */
    uint32_t n_asked;       /* accepted peers in the current pending round */
    uint32_t n_voted;       /* accepted peers that voted for admission */
    uint32_t n_admitting;   /* registered peers the current admission takes */
    uint64_t scan_at;       /* earliest heartbeat or silence deadline */
    eccl_bw_store bw;       /* measured links, kept across optimize calls */
    uint64_t opt_work;      /* ECCL_TOPO_SOLVE_WORK */
    uint32_t slow_link_factor; /* ECCL_SLOW_LINK_FACTOR: a link this many times under rate_ref is slow; 0: off */
    uint64_t moon_budget;   /* ECCL_TOPO_MOONSHOT_KICKS: kicks per solved ring */
    uint32_t seg_handles[ECCL_WIRE_MAX_SEG]; /* send_rings' scratch */
    /* What eccl_master_metrics reports (Prometheus counters and sums). */
    struct {
        uint64_t registrations, admitted, admit_ns, lost, epochs, view_changes, view_ns, trace_asks, late_reports,
            slow_links, member_calls, member_bytes, auth_refused, auth_gone, notices, notice_reforms;
        uint64_t coll_failed[ECCL_ERR_AUTH + 1]; /* COLL_DONE reports by result */
    } metrics;
};

static const eccl_chan_handler peer_handler;

static uint64_t now_ns(const eccl_master *m) { return eccl_engine_now(&m->eng); }

static void set_state(eccl_master *m, mpeer *p, enum mpeer_state s)
{
    m->n_state[p->state]--;
    m->n_state[s]++;
    p->state = s;
}

static void admitted(eccl_master *m, mpeer *p)
{
    set_state(m, p, MP_ACCEPTED);
    m->metrics.admitted++;
    m->metrics.admit_ns += now_ns(m) - p->registered_ns;
}

/* Heartbeats go out in batches: a scan runs when the earliest heartbeat is
 * due, and every peer due within 1/16 of its timeout gets one then (its
 * interval is a quarter timeout, so early is harmless). The next scan is
 * thus at least that slack away, however many peers there are and however
 * evenly their heartbeats are spread. (Scanning at "due minus slack"
 * instead re-scans for every peer that registered a moment later: O(N) per
 * heartbeat, which stalled admission at 32k simulated peers.) */
static uint64_t heartbeat_slack(const mpeer *p) { return p->timeout_ns / 16; }

/* When this peer next needs the master's attention: its heartbeat, or
 * being dropped for silence. */
static uint64_t peer_deadline(const mpeer *p)
{
    uint64_t t = p->ch.last_rx_ns + p->timeout_ns + 1;
    if (p->state != MP_CONNECTED && p->heartbeat_at < t) t = p->heartbeat_at;
    return t;
}

static void schedule_scan(eccl_master *m, const mpeer *p)
{
    if (p->via) return; /* its relay watches it */
    uint64_t t = peer_deadline(p);
    if (t < m->scan_at) m->scan_at = t;
}

static void relay_flush(mpeer *r);
static void relay_flush_cb(void *r) { relay_flush(r); }

/* An entry for the peer behind a relay (msg NULL: a gone entry, the relay
 * disconnects it), in the relay's next batch; a full batch goes at once.
 * An entry the batch cannot take drops the relay at the end of the step,
 * and its peers with it: they would wait for the entry forever. */
static void relay_put(mpeer *p, const eccl_msg *msg)
{
    eccl_result rc =
        eccl_wire_batch_put(&p->via->out, relay_flush_cb, p->via, p->handle, msg, NULL, 0);
    /* The same decision for the relay's next handle grows the last entry
     * (a span, wire.h) instead of adding one: the relay expands it, so a
     * vote's answer costs the master an entry per relay, not per peer. */
    if (rc != ECCL_OK || !p->via->out.folded) eccl_clock_work(p->via->ch.env, 1);
    if (rc != ECCL_OK && p->via->out_err == ECCL_OK) p->via->out_err = rc;
}

static void send_to(mpeer *p, const eccl_msg *msg)
{
    if (p->via) relay_put(p, msg);
    else if (eccl_chan_send_msg(&p->ch, msg) == ECCL_OK) eccl_chan_flush(&p->ch);
}

static void relay_flush(mpeer *r)
{
    uint32_t len;
    uint8_t *f = eccl_wire_batch_take(&r->out, &len);
    if (f) r->ack_owed = 0;
    if (f && eccl_chan_send_frame(&r->ch, f, len) == ECCL_OK) eccl_chan_flush(&r->ch);
}

/* ---- groups ------------------------------------------------------------------ */

static mgroup *group_get(eccl_master *m, uint32_t id)
{
    for (mgroup *g = m->groups; g; g = g->next)
        if (g->id == id) return g;
    mgroup *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->id = id;
    g->next = m->groups;
    m->groups = g;
    return g;
}

static void moon_reset(mgroup *g);

static int group_add(mgroup *g, mpeer *p)
{
    moon_reset(g); /* searched for other members */
    if (g->n == g->cap) {
        uint32_t cap = g->cap ? 2 * g->cap : 8;
        mpeer **n = realloc(g->members, cap * sizeof *n);
        if (!n) return -1;
        g->members = n;
        uint32_t *s = realloc(g->starts, cap * sizeof *s);
        if (!s) return -1;
        g->starts = s;
        g->cap = cap;
    }
    g->members[g->n++] = p;
    return 0;
}

static void group_remove(mgroup *g, mpeer *p)
{
    moon_reset(g);
    for (uint32_t i = 0; i < g->n; i++) {
        if (g->members[i] == p) {
            memmove(&g->members[i], &g->members[i + 1], (g->n - i - 1) * sizeof *g->members);
            g->n--;
            return;
        }
    }
}

/* ---- rings --------------------------------------------------------------------- */

/* ---- hosts (util/addr.h) ---------------------------------------------------- */

static int host_cmp(const mpeer *a, const mpeer *b)
{
    size_t la, lb;
    const char *ha = eccl_addr_host(a->p2p_addr, &la), *hb = eccl_addr_host(b->p2p_addr, &lb);
    int c = memcmp(ha, hb, la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}

/* A member and its position, sorted by (host, position). */
typedef struct host_key {
    const mpeer *p;
    uint32_t pos;
    uint32_t anchor, late; /* group_by_host's order: (anchor, late, pos) */
} host_key;

static int host_key_cmp(const void *a, const void *b)
{
    const host_key *x = a, *y = b;
    int c = host_cmp(x->p, y->p);
    return c ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

static int anchor_cmp(const void *a, const void *b)
{
    const host_key *x = a, *y = b;
    if (x->anchor != y->anchor) return x->anchor < y->anchor ? -1 : 1;
    if (x->late != y->late) return x->late < y->late ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Once per epoch, from one sort of the members by host (O(n log n)):
 * each member's count of members sharing its host (mpeer.host_ranks), and
 * the order. Newcomers (members from position n0 on, appended in admission
 * order) move to right after the last earlier member of their host; those
 * of a host new to the group stay together, hosts in order of their first
 * newcomer. Earlier members keep their order (the topology optimiser's
 * ring survives admissions), so a group whose hosts arrive interleaved
 * becomes host-contiguous and the hierarchical all-reduce can run; where
 * every member shares one host (or each has its own) nothing moves.
 * Without memory every count is 0 (not told) and the order stays as is. */
static void group_by_host(mgroup *g, uint32_t n0)
{
    uint32_t n = g->n;
    int reorder = n0 < n && n >= 2;
    host_key *k = n ? malloc(n * sizeof *k) : NULL;
    mpeer **order = reorder ? malloc(n * sizeof *order) : NULL;
    if (!k || (reorder && !order)) {
        for (uint32_t i = 0; i < n; i++) g->members[i]->host_ranks = 0;
        free(k), free(order);
        return;
    }
    for (uint32_t i = 0; i < n; i++) k[i] = (host_key){g->members[i], i, i, 0};
    qsort(k, n, sizeof *k, host_key_cmp);
    for (uint32_t a = 0, b; a < n; a = b) {
        /* One host's run, in position order: old members first. */
        uint32_t last_old = UINT32_MAX, first_new = UINT32_MAX;
        for (b = a; b < n && host_cmp(k[a].p, k[b].p) == 0; b++) {
            if (k[b].pos < n0) last_old = k[b].pos;
            else if (first_new == UINT32_MAX) first_new = k[b].pos;
        }
        for (uint32_t i = a; i < b; i++) {
            g->members[k[i].pos]->host_ranks = b - a;
            if (k[i].pos >= n0) {
                k[i].anchor = last_old != UINT32_MAX ? last_old : first_new;
                k[i].late = 1;
            }
        }
    }
    if (reorder) {
        qsort(k, n, sizeof *k, anchor_cmp);
        for (uint32_t i = 0; i < n; i++) order[i] = (mpeer *)k[i].p;
        memcpy(g->members, order, n * sizeof *order);
    }
    free(k), free(order);
}

/* A newcomer and its place in admission order. */
typedef struct newcomer_key {
    mpeer *p;
    uint32_t pos;
} newcomer_key;

static int newcomer_cmp(const void *a, const void *b)
{
    const newcomer_key *x = a, *y = b;
    uint64_t rx = x->p->via ? x->p->via->id : 0, ry = y->p->via ? y->p->via->id : 0;
    if (rx != ry) return rx < ry ? -1 : 1;
    uint32_t kx = x->p->via ? x->p->handle : x->pos, ky = y->p->via ? y->p->handle : y->pos;
    return (kx > ky) - (kx < ky);
}

/* Newcomers (from position n0 on) behind one relay go next to each other,
 * in its handle order, so that a relay's share of a ring is one run
 * (send_rings) however the registrations through many relays interleaved;
 * those on the master itself come first, in admission order. Before
 * group_by_host, which keeps this order but for host-mates. Without
 * memory the order stays: only the runs are shorter. */
static void order_newcomers(mgroup *g, uint32_t n0)
{
    uint32_t k = g->n - n0;
    newcomer_key *key = k >= 2 ? malloc(k * sizeof *key) : NULL;
    if (!key) return;
    for (uint32_t i = 0; i < k; i++) key[i] = (newcomer_key){g->members[n0 + i], i};
    qsort(key, k, sizeof *key, newcomer_cmp);
    for (uint32_t i = 0; i < k; i++) g->members[n0 + i] = key[i].p;
    free(key);
}

/* L if the world is host-regular: every host's ranks contiguous in rank
 * order, every host with the same L >= 2 of them, two hosts or more; else
 * 0 (the hierarchical all-reduce does not run). From this epoch's
 * host_ranks (group_by_host first): when every host has exactly L
 * members and every block of L consecutive ranks is one host's, each host
 * fills exactly one block, so none can come back further on. */
static uint32_t group_local_size(const mgroup *g)
{
    uint32_t n = g->n, L = n ? g->members[0]->host_ranks : 0;
    if (L < 2 || n % L != 0 || n / L < 2) return 0;
    for (uint32_t i = 0; i < n; i++)
        if (g->members[i]->host_ranks != L || host_cmp(g->members[i], g->members[i - i % L]) != 0) return 0;
    return L;
}

static void ref_of(eccl_wire_peer_ref *r, const mpeer *p)
{
    r->peer_id = p->id;
    memcpy(r->addr, p->p2p_addr, sizeof r->addr);
}

/* This epoch's runs (coll/tree_allreduce.h) into g->starts: the longest
 * stretches of consecutive members behind one relay with one host count,
 * at most ECCL_WIRE_MAX_SEG each; a member on the master itself is a run
 * of its own. */
static uint32_t group_runs(mgroup *g)
{
    uint32_t runs = 0;
    for (uint32_t i = 0; i < g->n; i++) {
        const mpeer *p = g->members[i], *q = i ? g->members[i - 1] : NULL;
        if (!q || !p->via || p->via != q->via || p->host_ranks != q->host_ranks ||
            i - g->starts[runs - 1] == ECCL_WIRE_MAX_SEG)
            g->starts[runs++] = i;
    }
    return runs;
}

/* Run s's root's tree edges to the other runs (coll/tree_allreduce.h):
 * its parent (none for run 0) and the roots of runs 2s+1 and 2s+2 (0 past
 * the last). */
static void run_root_edges(const mgroup *g, uint32_t runs, uint32_t s, eccl_wire_peer_ref *parent,
                           uint64_t child[2])
{
    if (s) ref_of(parent, g->members[g->starts[eccl_tree_heap_parent(s)]]);
    for (int c = 0; c < 2; c++) {
        uint32_t run = eccl_tree_heap_child(s, runs, c);
        child[c] = run != UINT32_MAX ? g->members[g->starts[run]]->id : 0;
    }
}

/* Run s of one member on the master itself: its RING (no children in its
 * run: its tree edges are the run root's). */
static void send_ring(mgroup *g, uint32_t runs, uint32_t s)
{
    uint32_t i = g->starts[s];
    eccl_msg msg = {.type = ECCL_MSG_RING};
    eccl_msg_ring *r = &msg.u.ring;
    r->peer_group = g->id;
    r->epoch = g->epoch;
    r->world_size = g->n;
    r->rank = i;
    ref_of(&r->next, g->members[(i + 1) % g->n]);
    ref_of(&r->prev, g->members[(i + g->n - 1) % g->n]);
    run_root_edges(g, runs, s, &r->tree_parent, r->tree_child);
    r->local_size = g->local_size;
    r->host_ranks = g->members[i]->host_ranks;
    send_to(g->members[i], &msg);
}

/* Run s, behind a relay: one RING_SEG for the relay to expand, with what
 * lies outside the run (wire.h). */
static void send_ring_seg(eccl_master *m, mgroup *g, uint32_t runs, uint32_t s)
{
    uint32_t a = g->starts[s], k = (s + 1 < runs ? g->starts[s + 1] : g->n) - a;
    eccl_msg msg = {.type = ECCL_MSG_RING_SEG};
    eccl_msg_ring_seg *r = &msg.u.ring_seg;
    r->peer_group = g->id;
    r->epoch = g->epoch;
    r->world_size = g->n;
    r->first_rank = a;
    r->local_size = g->local_size;
    r->host_ranks = g->members[a]->host_ranks;
    ref_of(&r->prev, g->members[(a + g->n - 1) % g->n]);
    ref_of(&r->next, g->members[(a + k) % g->n]);
    run_root_edges(g, runs, s, &r->root_parent, r->root_child);
    for (uint32_t i = 0; i < k; i++) m->seg_handles[i] = g->members[a + i]->handle;
    r->n = k;
    r->handles = m->seg_handles;
    send_to(g->members[a], &msg); /* an entry the relay reads itself */
}

/* Every member's ring for g's new epoch: an entry per run at most. */
static void send_rings(eccl_master *m, mgroup *g)
{
    uint32_t runs = group_runs(g);
    for (uint32_t s = 0; s < runs; s++) {
        if (g->members[g->starts[s]]->via) send_ring_seg(m, g, runs, s);
        else send_ring(g, runs, s);
    }
}

static void check_admission_done(eccl_master *m);

static int op_flag_cmp(const void *a, const void *b)
{
    uint64_t x = ((const eccl_wire_op_flag *)a)->tag, y = ((const eccl_wire_op_flag *)b)->tag;
    return x < y ? -1 : x > y;
}

static void check_query(eccl_master *m, mgroup *g);

/* In a tally, before the decision goes out: commit once repaired. */
#define REPAIR_MARK 2u

/* Member p's report entry for `tag`, or NULL. */
static eccl_wire_op_flag *report_entry(const mpeer *p, uint64_t tag)
{
    for (uint32_t i = 0; i < p->n_report; i++)
        if (p->report[i].tag == tag) return &p->report[i];
    return NULL;
}

/* Asks the first member that can send repair x's result (and was not
 * asked in vain); none left: x is owed no more, and its tag aborts. */
static void repair_ask(mgroup *g, struct mrepair *x)
{
    x->source = NULL;
    for (uint32_t i = 0; i < g->n && !x->source; i++) {
        eccl_wire_op_flag *e = report_entry(g->members[i], x->tag);
        if (e && (e->flag & ECCL_VIEW_SOURCE)) x->source = g->members[i];
    }
    if (!x->source) {
        g->decided[x->decision].flag = 0;
        g->repairs_owed--;
        return;
    }
    eccl_msg q = {.type = ECCL_MSG_REPAIR_ASK};
    q.u.repair.epoch = g->epoch;
    q.u.repair.tag = x->tag;
    send_to(x->source, &q);
}

/* Every member reported: decides each reported tag. A tag commits iff
 * every survivor holds its result, or, for a replicated result (the same
 * bytes on every rank), iff every survivor that reported it either holds
 * it or can take it, and one that holds it can send it: the others, those
 * that have not called it included, then get it (REPAIR_PUT) before the
 * decision. Returns 0 on no memory. */
static int view_tally(mgroup *g)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < g->n; i++) total += g->members[i]->n_report;
    eccl_wire_op_flag *all = total ? malloc(total * sizeof *all) : NULL;
    if (total && !all) return 0;
    size_t k = 0;
    for (uint32_t i = 0; i < g->n; i++) {
        if (!g->members[i]->n_report) continue; /* report, all: maybe NULL */
        memcpy(all + k, g->members[i]->report, g->members[i]->n_report * sizeof *all);
        k += g->members[i]->n_report;
    }
    /* Sorted by tag, each tag's reports sit together (each member reports
     * a tag once; one that completed it reports it as held). The
     * decisions are compacted into the front of `all` itself (slot n_ops
     * is never ahead of group start a). */
    if (total) qsort(all, total, sizeof *all, op_flag_cmp);
    uint32_t n_ops = 0, n_repairs = 0;
    for (size_t a = 0, b; a < total && n_ops < ECCL_WIRE_MAX_OPS; a = b) {
        uint32_t holders = 0, takers = 0, sources = 0;
        int receiver = -1; /* a point-to-point tag's receiving party: held or not */
        uint64_t tag = all[a].tag;
        for (b = a; b < total && all[b].tag == tag; b++) {
            holders += (all[b].flag & ECCL_VIEW_HELD) != 0;
            takers += (all[b].flag & (ECCL_VIEW_HELD | ECCL_VIEW_REPAIRABLE)) == ECCL_VIEW_REPAIRABLE;
            sources += (all[b].flag & ECCL_VIEW_SOURCE) != 0;
            if (all[b].flag & ECCL_VIEW_RECEIVER) receiver = (all[b].flag & ECCL_VIEW_HELD) != 0;
        }
        /* A point-to-point tag (coll/p2p.h) has two parties, and only they
         * report it: it is done iff its receiver holds every byte; with no
         * receiver left, iff the sender saw its ACK. */
        uint32_t need = tag & ECCL_P2P_TAG_BIT ? (uint32_t)(b - a) : g->n;
        int commit = tag & ECCL_P2P_TAG_BIT && receiver >= 0 ? receiver : holders == need;
        /* Every member that reported it holds it or can take it; those
         * that did not (a broadcast's rank that has not called it yet:
         * the others may have returned early) take it as a record for
         * their call of it. */
        int repair = !commit && !(tag & ECCL_P2P_TAG_BIT) && holders + takers == b - a && sources > 0;
        all[n_ops].tag = tag;
        all[n_ops].flag = (uint8_t)(commit ? 1 : repair ? REPAIR_MARK : 0);
        n_repairs += (uint32_t)repair;
        n_ops++;
    }
    g->decided = all;
    g->n_decided = n_ops;
    g->tallied = 1;
    if (n_repairs && !(g->repairs = calloc(n_repairs, sizeof *g->repairs))) return 0;
    for (uint32_t d = 0; d < n_ops; d++) {
        if (g->decided[d].flag != REPAIR_MARK) continue;
        g->decided[d].flag = 1; /* a commit that owes the takers a result */
        struct mrepair *x = &g->repairs[g->n_repairs++];
        x->tag = g->decided[d].tag;
        x->decision = d;
    }
    g->repairs_owed = g->n_repairs;
    for (uint32_t r = 0; r < g->n_repairs; r++) repair_ask(g, &g->repairs[r]);
    return 1;
}

/* REPAIR_DATA from p: its answer (empty: it cannot) for its repair. */
static eccl_result on_repair_data(eccl_master *m, mpeer *p, const eccl_msg_repair *d)
{
    mgroup *g = p->group;
    if (p->state != MP_ACCEPTED || !g->tallied || d->epoch != g->epoch) return ECCL_OK; /* stale */
    for (uint32_t r = 0; r < g->n_repairs; r++) {
        struct mrepair *x = &g->repairs[r];
        if (x->tag != d->tag || x->source != p || x->bytes) continue;
        if (!d->len) {
            eccl_wire_op_flag *e = report_entry(p, d->tag);
            if (e) e->flag &= (uint8_t)~ECCL_VIEW_SOURCE; /* not again */
            repair_ask(g, x);
        } else {
            if (!(x->bytes = malloc(d->len))) return ECCL_ERR_NO_MEMORY;
            memcpy(x->bytes, d->bytes, d->len);
            x->len = d->len;
            g->repairs_owed--;
        }
        check_query(m, g);
        return ECCL_OK;
    }
    return ECCL_OK; /* an answer it was not asked for (a repeat) */
}

/* Member p of g is gone: the repairs it owed go to another holder. */
static void repair_on_drop(mgroup *g, const mpeer *p)
{
    for (uint32_t r = 0; g->tallied && r < g->n_repairs; r++)
        if (g->repairs[r].source == p && !g->repairs[r].bytes) repair_ask(g, &g->repairs[r]);
}

static void view_reset(mgroup *g)
{
    for (uint32_t r = 0; r < g->n_repairs; r++) free(g->repairs[r].bytes);
    free(g->repairs);
    g->repairs = NULL;
    g->n_repairs = g->repairs_owed = 0;
    free(g->decided);
    g->decided = NULL;
    g->n_decided = 0;
    g->tallied = 0;
}

/* Names the group's latest member to its members (SLOW_NOTICE) when that
 * changes: the one that calls latest of those that said they call late
 * (LATE_REPORT), or none. `again`: a new ring, whose newcomers have not
 * been told yet. */
static void slow_update(eccl_master *m, mgroup *g, int again)
{
    const mpeer *slow = NULL;
    for (uint32_t i = 0; i < g->n; i++)
        if (g->members[i]->late_us && (!slow || g->members[i]->late_us > slow->late_us)) slow = g->members[i];
    uint64_t id = slow ? slow->id : 0;
    if (id == g->slow_peer && !(again && id)) return;
    if (id != g->slow_peer && id)
        ECCL_WARN(m->env, "group %u: peer %llu calls late (its calls start a median %.1f ms after its partners' "
                          "first frames): every collective waits for it; members are told (ECCL_ATTR_SLOW_PEER)",
                  g->id, (unsigned long long)id, slow->late_us / 1e3);
    else if (id != g->slow_peer)
        ECCL_INFO(m->env, "group %u: no member calls late any more", g->id);
    g->slow_peer = id;
    g->slow_us = slow ? slow->late_us : 0;
    eccl_msg t = {.type = ECCL_MSG_SLOW_NOTICE};
    t.u.late.peer_id = id;
    t.u.late.late_us = g->slow_us;
    for (uint32_t i = 0; i < g->n; i++) send_to(g->members[i], &t);
}

/* ---- slow links: rates members measure on their links in (LINK_RATE) ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Tells every member which link is slow (SLOW_LINK; from 0: none is). */
static void slow_link_tell(mgroup *g, uint64_t from, uint64_t to, double bps)
{
    g->slow_from = from, g->slow_to = to, g->slow_bps = bps;
    eccl_msg t = {.type = ECCL_MSG_SLOW_LINK};
    t.u.link.from = from, t.u.link.to = to;
    t.u.link.bytes = (uint64_t)bps, t.u.link.ns = 1000000000u; /* the rate as bytes in a second */
    for (uint32_t i = 0; i < g->n; i++) send_to(g->members[i], &t);
}

/* A new ring: its newcomers learn of the slow link, or every member that
 * none is, once an end of it left. */
static void slow_link_ring(mgroup *g)
{
    if (!g->slow_from) return;
    int ends = 0;
    for (uint32_t i = 0; i < g->n; i++) ends += g->members[i]->id == g->slow_from || g->members[i]->id == g->slow_to;
    if (ends == 2) slow_link_tell(g, g->slow_from, g->slow_to, g->slow_bps);
    else slow_link_tell(g, 0, 0, 0);
}

/* What the group's links do when healthy: the upper quartile of their last
 * rates (a slow host link slows every link through it, most of a small
 * group's: a median would sink with them). Taken again once a second at
 * most and once half the members reported since: O(1) a report. */
static void rate_ref(eccl_master *m, mgroup *g)
{
    uint64_t now = now_ns(m);
    if (g->rate_ref_ns && (now - g->rate_ref_ns < 1000000000u || g->rate_reports * 2 < g->n)) return;
    double *v = malloc((size_t)g->n * MP_RX * sizeof *v);
    if (!v) return; /* the last reference stands */
    size_t k = 0;
    for (uint32_t i = 0; i < g->n; i++)
        for (int j = 0; g->members[i]->rx && j < MP_RX; j++)
            if (g->members[i]->rx[j].from) v[k++] = g->members[i]->rx[j].bps;
    if (k >= 3) { /* fewer links: nothing to compare with yet (and no wait to take it again) */
        qsort(v, k, sizeof *v, cmp_double);
        g->rate_ref = v[3 * k / 4];
        g->rate_ref_ns = now;
        g->rate_reports = 0;
    }
    free(v);
}

/* A member's LINK_RATE: the link from `from` moved `bytes` in `ns` (links
 * between hosts only: comm/rates.c). A link under 1/ECCL_SLOW_LINK_FACTOR
 * of the group's reference rate (rate_ref) two windows in a row is named
 * to every member; it is cleared once it reaches half the reference. */
static eccl_result on_link_rate(eccl_master *m, mpeer *p, const eccl_msg_link *l)
{
    mgroup *g = p->group;
    if (p->state != MP_ACCEPTED || !l->from || l->to || !l->ns) return ECCL_ERR_PROTOCOL;
    if (!p->rx && !(p->rx = calloc(MP_RX, sizeof *p->rx))) return ECCL_OK; /* unmeasured, no harm */
    struct mrx *e = NULL;
    for (int j = 0; j < MP_RX && !e; j++)
        if (p->rx[j].from == l->from) e = &p->rx[j];
    for (int j = 0; j < MP_RX && !e; j++)
        if (!p->rx[j].from) e = &p->rx[j];
    if (!e) { /* the oldest sender goes: links change with the ring */
        memmove(p->rx, p->rx + 1, (MP_RX - 1) * sizeof *p->rx);
        e = &p->rx[MP_RX - 1];
        memset(e, 0, sizeof *e);
    }
    e->from = l->from;
    e->bps = (double)l->bytes * 1e9 / (double)l->ns;
    e->bytes += l->bytes;
    g->rate_reports++;
    rate_ref(m, g);
    int slow = g->rate_ref > 0 && e->bps * m->slow_link_factor < g->rate_ref;
    e->slow = slow ? e->slow + 1 : 0;
    int named = g->slow_from == l->from && g->slow_to == p->id;
    if (e->slow >= 2 && !g->slow_from && m->slow_link_factor) {
        ECCL_WARN(m->env, "group %u: the link from peer %llu to peer %llu is slow: %.3g B/s where the group's links "
                          "do %.3g B/s (upper quartile); members are told (ECCL_ATTR_SLOW_LINK_FROM/TO)",
                  g->id, (unsigned long long)l->from, (unsigned long long)p->id, e->bps, g->rate_ref);
        m->metrics.slow_links++;
        slow_link_tell(g, l->from, p->id, e->bps);
    } else if (named && e->bps * 2 >= g->rate_ref) {
        ECCL_INFO(m->env, "group %u: the link from peer %llu to peer %llu is no longer slow (%.3g B/s)", g->id,
                  (unsigned long long)l->from, (unsigned long long)p->id, e->bps);
        slow_link_tell(g, 0, 0, 0);
    }
    return ECCL_OK;
}

/* Decides the frozen ops (every member reported, every repair is in),
 * then hands out the next ring. */
static void finish_view(eccl_master *m, mgroup *g)
{
    if (g->querying) {
        if (!g->tallied && !view_tally(g)) {
            /* No memory for a tally: every tag aborts, as the old rule
             * would on a lost report. */
            view_reset(g);
            g->tallied = 1;
        }
        if (g->repairs_owed) return; /* on_repair_data comes back here */
        for (uint32_t r = 0; r < g->n_repairs; r++) {
            const struct mrepair *x = &g->repairs[r];
            if (!x->bytes) continue;
            eccl_msg put = {.type = ECCL_MSG_REPAIR_PUT};
            put.u.repair.epoch = g->epoch;
            put.u.repair.tag = x->tag;
            put.u.repair.len = x->len;
            put.u.repair.bytes = x->bytes;
            for (uint32_t i = 0; i < g->n; i++) {
                const eccl_wire_op_flag *e = report_entry(g->members[i], x->tag);
                if (!e || !(e->flag & ECCL_VIEW_HELD)) send_to(g->members[i], &put);
            }
        }
        for (uint32_t d = 0; d < g->n_decided; d++)
            ECCL_INFO(m->env, "group %u epoch %u: %s %s tag %llu", g->id, g->epoch,
                      g->decided[d].flag ? "commit" : "abort",
                      g->decided[d].tag & ECCL_P2P_TAG_BIT ? "point-to-point" : "collective",
                      (unsigned long long)g->decided[d].tag);
        eccl_msg d = {.type = ECCL_MSG_VIEW_DECIDE};
        d.u.view.epoch = g->epoch;
        d.u.view.n_ops = g->n_decided;
        d.u.view.ops = g->decided;
        for (uint32_t i = 0; i < g->n; i++) send_to(g->members[i], &d);
        view_reset(g);
        for (uint32_t i = 0; i < g->n; i++) {
            free(g->members[i]->report);
            g->members[i]->report = NULL;
            g->members[i]->n_report = 0;
            g->members[i]->reported = 0;
        }
        g->querying = 0;
        g->n_reported = 0;
    }
    g->change_wanted = 0;
    uint32_t n0 = g->n;
    for (mpeer *p = m->peers; p; p = p->next) {
        if (p->admitting && p->state == MP_REGISTERED && p->group == g) {
            if (group_add(g, p) == 0) admitted(m, p);
            p->admitting = 0;
            m->n_admitting--;
        }
    }
    order_newcomers(g, n0);
    group_by_host(g, n0);
    g->local_size = group_local_size(g);
    g->epoch++;
    m->metrics.epochs++;
    if (g->query_ns) {
        m->metrics.view_changes++;
        m->metrics.view_ns += now_ns(m) - g->query_ns;
        g->query_ns = 0;
    }
    g->n_ready = 0;
    ECCL_INFO(m->env, "group %u: ring epoch %u with %u peers", g->id, g->epoch, g->n);
    send_rings(m, g);
    slow_update(m, g, 1);
    slow_link_ring(g);
    check_admission_done(m);
}

static void start_view_changes(eccl_master *m)
{
    for (mgroup *g = m->groups; g; g = g->next) {
        if (!g->change_wanted || g->querying) continue;
        if (g->n == 0) {
            int newcomers = 0;
            for (mpeer *p = m->peers; p; p = p->next)
                newcomers += p->admitting && p->group == g;
            if (newcomers) finish_view(m, g);
            else g->change_wanted = 0;
            continue;
        }
        g->querying = 1;
        g->query_ns = now_ns(m);
        eccl_msg q = {.type = ECCL_MSG_VIEW_QUERY};
        q.u.epoch.epoch = g->epoch;
        for (uint32_t i = 0; i < g->n; i++) send_to(g->members[i], &q);
    }
}

static void check_query(eccl_master *m, mgroup *g)
{
    if (g->querying && g->n_reported == g->n && (!g->tallied || !g->repairs_owed)) finish_view(m, g);
}

/* ---- leaving together (eccl_comm_leave) --------------------------------------- */

static void send_leave_done(mgroup *g, eccl_result result)
{
    eccl_msg d = {.type = ECCL_MSG_LEAVE_DONE};
    d.u.leave_done.result = (uint32_t)result;
    for (uint32_t i = 0; i < g->n; i++) {
        if (!g->members[i]->leaving) continue;
        send_to(g->members[i], &d);
        g->members[i]->leaving = result == ECCL_OK;
    }
    g->n_leaving = result == ECCL_OK ? g->n : 0;
}

/* A vote, as peers_pending: the group leaves together once every member
 * said its ops are settled. From then on nothing of a member is needed by
 * another, so members that go take no view change: a new ring among the
 * rest would have them dial peers already gone, and their parting looks
 * like no failure. */
static void check_leave(mgroup *g)
{
    if (g->left_together || g->n_leaving == 0 || g->n_leaving < g->n) return;
    g->left_together = 1;
    send_leave_done(g, ECCL_OK);
}

/* ---- admission -------------------------------------------------------------- */

/* peers_pending is a vote too: every accepted peer asks, then all get the
 * same count, so they all call update_topology or none does (an answer that
 * differed between peers would leave some voting and others waiting in a
 * collective). */
static void check_pending_round(eccl_master *m)
{
    if (m->n_asked == 0 || m->n_asked < m->n_state[MP_ACCEPTED]) return;
    eccl_msg r = {.type = ECCL_MSG_PENDING_REPLY};
    r.u.pending.pending = m->n_state[MP_REGISTERED];
    for (mpeer *p = m->peers; p; p = p->next) {
        if (!p->asked_pending) continue;
        p->asked_pending = 0;
        send_to(p, &r);
    }
    m->n_asked = 0;
}

static void check_admission_done(eccl_master *m)
{
    if (!m->admitting || m->n_admitting) return;
    for (mgroup *g = m->groups; g; g = g->next)
        if (g->querying || g->change_wanted || g->n_ready < g->n) return;
    m->admitting = 0;
    m->n_voted = 0;
    eccl_msg done = {.type = ECCL_MSG_TOPO_DONE};
    for (mpeer *p = m->peers; p; p = p->next) {
        if (p->state != MP_ACCEPTED) continue;
        done.u.epoch.epoch = p->group->epoch;
        p->voted = 0;
        send_to(p, &done);
    }
    ECCL_INFO(m->env, "topology update done: %u accepted, %u pending",
              m->n_state[MP_ACCEPTED], m->n_state[MP_REGISTERED]);
}

/* With nobody accepted, nobody can vote: the oldest registered peer starts
 * (or restarts) the run on its own. `welcomed` is the peer just told
 * WELCOME accepted=1 (or NULL): any other was told it is pending and waits
 * in eccl_comm_connect for TOPO_DONE, as an admitted newcomer does, so it
 * gets one after its ring; without it, it waited out op_timeout_ms and every
 * later peer waited on its vote. */
static void accept_alone_if_empty(eccl_master *m, const mpeer *welcomed)
{
    if (m->admitting || m->n_state[MP_ACCEPTED] > 0) return;
    mpeer *first = NULL;
    for (mpeer *p = m->peers; p; p = p->next)
        if (p->state == MP_REGISTERED && (!first || p->id < first->id)) first = p;
    if (!first) return;
    mgroup *g = first->group;
    if (group_add(g, first) != 0) return;
    admitted(m, first);
    group_by_host(g, g->n); /* its host count: 1 */
    g->local_size = group_local_size(g); /* one member: 0 */
    g->epoch++;
    m->metrics.epochs++;
    g->n_ready = 0;
    ECCL_INFO(m->env, "peer %llu starts the run in group %u", (unsigned long long)first->id,
              g->id);
    send_rings(m, g);
    if (first != welcomed) {
        eccl_msg done = {.type = ECCL_MSG_TOPO_DONE};
        done.u.epoch.epoch = g->epoch;
        send_to(first, &done);
    }
}

static void maybe_admit(eccl_master *m)
{
    if (m->admitting || m->n_state[MP_ACCEPTED] == 0 || m->n_voted < m->n_state[MP_ACCEPTED])
        return;
    uint32_t newcomers = 0;
    for (mpeer *p = m->peers; p; p = p->next) {
        if (p->state != MP_REGISTERED) continue;
        p->admitting = 1;
        p->group->change_wanted = 1;
        newcomers++;
    }
    m->n_admitting = newcomers;
    m->admitting = 1;
    ECCL_INFO(m->env, "vote passed: admitting %u peers", newcomers);
    if (newcomers == 0) {
        check_admission_done(m);
        return;
    }
    start_view_changes(m);
}

/* ---- shared state (state/sync.h) --------------------------------------------- */

static void drop_peer(eccl_master *m, mpeer *p, eccl_result why);
static void relay_gone(eccl_master *m, mpeer *r);

static void sync_reset(mpeer *p)
{
    free(p->sync_keys);
    p->sync_keys = NULL;
    p->n_sync_keys = 0;
    p->sync_state = MS_NONE;
    p->sync_src = 0;
}

static void sync_send_done(mpeer *p, eccl_result result, uint64_t revision)
{
    eccl_msg d = {.type = ECCL_MSG_SYNC_DONE};
    d.u.sync_result.seq = p->sync_seq;
    d.u.sync_result.result = (uint32_t)result;
    d.u.sync_result.revision = revision;
    send_to(p, &d);
}

/* Ends the group's round with `why` on every peer still in it. */
static void sync_abort(eccl_master *m, mgroup *g, eccl_result why)
{
    if (g->sync_phase == MG_SYNC_IDLE) return;
    ECCL_INFO(m->env, "group %u: shared-state round aborted: %s", g->id, eccl_strerror(why));
    for (uint32_t i = 0; i < g->n; i++) {
        mpeer *p = g->members[i];
        if (p->sync_state == MS_NONE) continue;
        sync_send_done(p, why, g->sync_elected);
        sync_reset(p);
    }
    g->sync_phase = MG_SYNC_IDLE;
    g->n_sync = 0;
}

/* TRANSFER: every participant reported success; the round closes. */
static void sync_check_transfer(eccl_master *m, mgroup *g)
{
    if (g->sync_phase != MG_SYNC_TRANSFER || g->n_sync > 0) return;
    g->have_rev = 1;
    g->revision = g->sync_elected;
    for (uint32_t i = 0; i < g->n; i++) {
        mpeer *p = g->members[i];
        if (p->sync_state != MS_REPORTED) continue;
        p->synced = 1;
        sync_send_done(p, ECCL_OK, g->revision);
        sync_reset(p);
    }
    g->sync_phase = MG_SYNC_IDLE;
    ECCL_INFO(m->env, "group %u: shared state synced at revision %llu", g->id,
              (unsigned long long)g->revision);
}

/* Sends `p` its plan: the fetches of voter `vi` (fetch[*at..] while they
 * are this voter's), with their holders numbered per plan. */
static eccl_result sync_send_plan(mgroup *g, mpeer *p, const eccl_sync_voter *v, uint32_t vi,
                                  const eccl_sync_election *e, uint32_t *at)
{
    uint32_t first = *at, nf = 0;
    while (*at < e->n_fetch && e->fetch[*at].peer == vi) (*at)++;
    nf = *at - first;
    eccl_wire_sync_fetch *f = nf ? malloc(nf * sizeof *f) : NULL;
    eccl_wire_peer_ref *src = nf ? malloc(nf * sizeof *src) : NULL;
    uint32_t *src_voter = nf ? malloc(nf * sizeof *src_voter) : NULL;
    if (nf && (!f || !src || !src_voter)) {
        free(f), free(src), free(src_voter);
        return ECCL_ERR_NO_MEMORY;
    }
    uint32_t ns = 0;
    for (uint32_t k = 0; k < nf; k++) {
        const eccl_sync_assign *a = &e->fetch[first + k];
        uint32_t s = 0;
        while (s < ns && src_voter[s] != a->src) s++;
        if (s == ns) {
            src_voter[ns] = a->src;
            src[ns].peer_id = v[a->src].id;
            memcpy(src[ns].addr, g->members[a->src]->p2p_addr, sizeof src[ns].addr);
            ns++;
        }
        f[k] = (eccl_wire_sync_fetch){a->key, s, a->hash};
    }
    eccl_msg msg = {.type = ECCL_MSG_SYNC_PLAN};
    msg.u.sync_plan.seq = p->sync_seq;
    msg.u.sync_plan.result = ECCL_OK;
    msg.u.sync_plan.round = g->sync_round;
    msg.u.sync_plan.revision = e->revision;
    msg.u.sync_plan.n_fetch = nf;
    msg.u.sync_plan.n_src = ns;
    msg.u.sync_plan.fetch = f;
    msg.u.sync_plan.src = src;
    send_to(p, &msg);
    free(f), free(src), free(src_voter);
    return ECCL_OK;
}

/* COLLECTING: once every member asked, elect and hand out the plans. */
static void sync_check_collect(eccl_master *m, mgroup *g)
{
    if (g->sync_phase != MG_SYNC_COLLECTING || g->n_sync < g->n) return;
    if (g->n == 0) {
        g->sync_phase = MG_SYNC_IDLE;
        g->n_sync = 0;
        return;
    }
    uint32_t n = g->n;
    eccl_sync_voter *v = calloc(n, sizeof *v);
    mpeer **kicked = calloc(n, sizeof *kicked);
    eccl_sync_election e;
    if (!v || !kicked) {
        free(v), free(kicked);
        sync_abort(m, g, ECCL_ERR_NO_MEMORY);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        mpeer *p = g->members[i];
        v[i] = (eccl_sync_voter){.id = p->id, .revision = p->sync_rev,
                                 .strategy = p->sync_strategy, .hash_type = p->sync_htype,
                                 .newcomer = !p->synced, .keys = p->sync_keys,
                                 .n_keys = p->n_sync_keys};
    }
    if (eccl_sync_elect(v, n, g->have_rev, g->revision, &e) != ECCL_OK) {
        free(v), free(kicked);
        sync_abort(m, g, ECCL_ERR_NO_MEMORY);
        return;
    }
    g->sync_round++;
    g->sync_elected = e.revision;
    g->sync_phase = MG_SYNC_TRANSFER;
    g->n_sync = 0;
    ECCL_INFO(m->env, "group %u: shared-state round %u elects revision %llu, %u fetches", g->id,
              g->sync_round, (unsigned long long)e.revision, e.n_fetch);
    uint32_t at = 0, n_kicked = 0;
    for (uint32_t i = 0; i < n; i++) {
        mpeer *p = g->members[i];
        if (v[i].result == ECCL_ERR_KICKED) {
            ECCL_WARN(m->env, "peer %llu: SEND_ONLY state outvoted: kicked",
                      (unsigned long long)p->id);
            kicked[n_kicked++] = p;
            sync_reset(p);
            continue;
        }
        if (v[i].result == ECCL_OK && sync_send_plan(g, p, v, i, &e, &at) != ECCL_OK)
            v[i].result = ECCL_ERR_NO_MEMORY;
        if (v[i].result != ECCL_OK) {
            eccl_msg msg = {.type = ECCL_MSG_SYNC_PLAN};
            msg.u.sync_plan.seq = p->sync_seq;
            msg.u.sync_plan.result = (uint32_t)v[i].result;
            msg.u.sync_plan.revision = e.revision;
            send_to(p, &msg);
            ECCL_INFO(m->env, "peer %llu left out of the round: %s", (unsigned long long)p->id,
                      eccl_strerror(v[i].result));
            /* Its state is not the group's: its next call is a newcomer's. */
            p->synced = 0;
            sync_reset(p);
            while (at < e.n_fetch && e.fetch[at].peer == i) at++;
            continue;
        }
        p->sync_src = v[i].source;
        /* Only fetchers report (O(fetchers) messages, not O(group)); the
         * up to date wait for SYNC_DONE, serving. */
        if (v[i].elected) {
            p->sync_state = MS_REPORTED;
        } else {
            p->sync_state = MS_TRANSFER;
            g->n_sync++;
        }
    }
    eccl_sync_election_free(&e);
    free(v);
    for (uint32_t i = 0; i < n_kicked; i++) drop_peer(m, kicked[i], ECCL_ERR_KICKED);
    free(kicked);
    sync_check_transfer(m, g);
}

/* A member left: it no longer counts; a holder lost mid-round ends it. */
static void sync_on_drop(eccl_master *m, mgroup *g, enum msync_state was, int src)
{
    if (g->sync_phase == MG_SYNC_COLLECTING) {
        if (was == MS_SUBMITTED) g->n_sync--;
        sync_check_collect(m, g);
    } else if (g->sync_phase == MG_SYNC_TRANSFER) {
        if (src) {
            sync_abort(m, g, ECCL_ERR_PEER_LOST);
            return;
        }
        if (was == MS_TRANSFER) g->n_sync--;
        sync_check_transfer(m, g);
    }
}

/* A member entered another group-wide vote (topology, peers pending): the
 * sync round can never complete. */
static void sync_conflict(eccl_master *m, mgroup *g)
{
    if (g->sync_phase == MG_SYNC_COLLECTING) sync_abort(m, g, ECCL_ERR_BUSY);
}

static eccl_result on_sync_req(eccl_master *m, mpeer *p, const eccl_msg_sync_req *q)
{
    mgroup *g = p->group;
    if (p->state != MP_ACCEPTED || p->sync_state != MS_NONE) return ECCL_ERR_PROTOCOL;
    size_t bytes = q->n_keys * sizeof *p->sync_keys;
    p->sync_keys = bytes ? malloc(bytes) : NULL;
    if (bytes && !p->sync_keys) return ECCL_ERR_NO_MEMORY;
    uint32_t pos = 0, i = 0;
    while (eccl_wire_sync_req_next(q, &pos, &i, &p->sync_keys[i])) {
    }
    p->n_sync_keys = q->n_keys;
    p->sync_seq = q->seq;
    p->sync_rev = q->revision;
    p->sync_strategy = q->strategy;
    p->sync_htype = q->hash_type;
    p->sync_state = MS_SUBMITTED;
    if (g->sync_phase == MG_SYNC_TRANSFER) {
        /* Left out of the running round (an error earlier): not now. */
        sync_send_done(p, ECCL_ERR_BUSY, g->sync_elected);
        sync_reset(p);
        return ECCL_OK;
    }
    if (g->sync_phase == MG_SYNC_IDLE) {
        g->sync_phase = MG_SYNC_COLLECTING;
        g->n_sync = 0;
        /* A member already waiting in another vote never asks: fail now
         * rather than at everyone's timeout. */
        for (uint32_t k = 0; k < g->n; k++) {
            if (g->members[k]->voted || g->members[k]->asked_pending || g->members[k]->opt_asked) {
                g->n_sync = 1;
                sync_abort(m, g, ECCL_ERR_BUSY);
                return ECCL_OK;
            }
        }
    }
    g->n_sync++;
    sync_check_collect(m, g);
    return ECCL_OK;
}

static eccl_result on_sync_report(eccl_master *m, mpeer *p, const eccl_msg_sync_result *r)
{
    mgroup *g = p->group;
    if (p->sync_state == MS_NONE || r->seq != p->sync_seq) return ECCL_OK; /* stale */
    eccl_result why = (eccl_result)r->result;
    if (p->sync_state == MS_SUBMITTED || p->sync_state == MS_REPORTED) {
        /* It gave up waiting (timeout): the round cannot complete without
         * it. Success is reported only by a fetcher, once. */
        if (why == ECCL_OK) return ECCL_ERR_PROTOCOL;
        sync_abort(m, g, why);
        return ECCL_OK;
    }
    if (r->result != ECCL_OK) {
        ECCL_WARN(m->env, "peer %llu: shared-state fetch failed: %s", (unsigned long long)p->id,
                  eccl_strerror(why));
        sync_abort(m, g, why);
        return ECCL_OK;
    }
    p->sync_state = MS_REPORTED;
    g->n_sync--;
    sync_check_transfer(m, g);
    return ECCL_OK;
}

/* ---- topology optimisation (docs/protocol.md) -------------------------------- */

static void moon_reset(mgroup *g)
{
    free(g->moon_ids);
    free(g->moon_ring);
    free(g->moon_cost);
    g->moon_ids = NULL;
    g->moon_ring = NULL;
    g->moon_cost = NULL;
    g->moon_n = 0;
    g->moon_kicks = 0;
    g->moon_better = 0;
}

static void opt_send_done(mpeer *p, const eccl_msg_opt_done *d)
{
    eccl_msg msg = {.type = ECCL_MSG_OPT_DONE};
    msg.u.opt_done = *d;
    msg.u.opt_done.seq = p->opt_seq;
    send_to(p, &msg);
}

/* Ends the group's call with `result` for every member in it. */
static void opt_finish(eccl_master *m, mgroup *g, eccl_result result)
{
    if (g->opt_phase == MG_OPT_IDLE) return;
    if (result != ECCL_OK)
        ECCL_INFO(m->env, "group %u: optimize_topology ended: %s", g->id, eccl_strerror(result));
    g->opt_done.result = (uint32_t)result;
    g->opt_done.epoch = g->epoch;
    for (uint32_t i = 0; i < g->n; i++) {
        mpeer *p = g->members[i];
        if (!p->opt_asked) continue;
        opt_send_done(p, &g->opt_done);
        p->opt_asked = p->opt_probing = 0;
    }
    g->opt_phase = MG_OPT_IDLE;
    g->n_opt = 0;
}

/* A member entered another group-wide call: the optimize call can never
 * gather everyone. */
static void opt_conflict(eccl_master *m, mgroup *g)
{
    if (g->opt_phase == MG_OPT_COLLECTING) opt_finish(m, g, ECCL_ERR_BUSY);
}

/* The moonshot's ring, if it was searched for exactly these members and
 * found something better than the ring it was given: as indices into
 * g->members, in tour[]. */
static int moon_tour(const mgroup *g, uint32_t *tour)
{
    if (!g->moon_better || g->moon_n != g->n) return 0;
    for (uint32_t k = 0; k < g->n; k++) {
        uint32_t i = 0;
        while (i < g->n && g->members[i]->id != g->moon_ids[g->moon_ring[k]]) i++;
        if (i == g->n) return 0;
        tour[k] = i;
    }
    return 1;
}

static uint64_t bps_of(const eccl_tsp_result *r) { return r->max > 0 ? (uint64_t)(1.0 / r->max) : 0; }

/* Every probe is in: solve the ring over the measured links (the moonshot
 * competes when the members are the ones it searched for), re-form the ring
 * if the result is strictly better, and let the moonshot search on. */
static void opt_solve(eccl_master *m, mgroup *g)
{
    uint32_t n = g->n;
    uint64_t *ids = malloc(n * sizeof *ids);
    double *cost = malloc((size_t)n * n * sizeof *cost);
    uint32_t *tour = malloc(n * sizeof *tour), *alt = malloc(n * sizeof *alt);
    mpeer **ring = malloc(n * sizeof *ring);
    eccl_result rc = ids && cost && tour && alt && ring ? ECCL_OK : ECCL_ERR_NO_MEMORY;
    eccl_tsp_result was = {0}, best = {0}, other;
    eccl_tsp_opts o = {.max_work = m->opt_work};
    if (rc == ECCL_OK) {
        for (uint32_t i = 0; i < n; i++) {
            ids[i] = g->members[i]->id;
            alt[i] = i;
        }
        eccl_bw_store_costs(&m->bw, ids, n, cost);
        rc = eccl_tsp_eval(n, cost, &o, alt, &was);
    }
    if (rc == ECCL_OK) rc = eccl_tsp_solve(n, cost, &o, tour, &best);
    int moon = 0;
    if (rc == ECCL_OK && moon_tour(g, alt) && eccl_tsp_eval(n, cost, &o, alt, &other) == ECCL_OK &&
        eccl_tsp_compare(o.objective, &other, &best) < 0) {
        memcpy(tour, alt, n * sizeof *tour);
        best = other;
        moon = 1;
    }
    if (rc != ECCL_OK) {
        free(ids), free(cost), free(tour), free(alt), free(ring);
        opt_finish(m, g, rc);
        return;
    }
    int changed = eccl_tsp_compare(o.objective, &best, &was) < 0;
    g->opt_done.changed = (uint8_t)changed;
    g->opt_done.exact = (uint8_t)(best.exact != 0);
    g->opt_done.moonshot = (uint8_t)moon;
    g->opt_done.unmeasured = changed ? best.unmeasured : was.unmeasured;
    g->opt_done.old_bps = bps_of(&was);
    g->opt_done.new_bps = bps_of(changed ? &best : &was);
    ECCL_INFO(m->env, "group %u: ring of %u %s: slowest link %.3g -> %.3g B/s (%s%s)", g->id, n,
              changed ? "re-ordered" : "kept", (double)g->opt_done.old_bps,
              (double)g->opt_done.new_bps, best.exact ? "exact" : "heuristic",
              moon ? ", moonshot" : "");
    if (changed) {
        for (uint32_t k = 0; k < n; k++) ring[k] = g->members[tour[k]];
        memcpy(g->members, ring, n * sizeof *ring);
    }
    /* The moonshot searches on from the ring now in use, unless that one
     * is proven optimal. */
    moon_reset(g);
    uint32_t *moon_ring = !best.exact && n > 3 ? malloc(n * sizeof *moon_ring) : NULL;
    if (moon_ring) {
        for (uint32_t i = 0; i < n; i++) {
            ids[i] = g->members[i]->id;
            moon_ring[i] = i;
        }
        eccl_bw_store_costs(&m->bw, ids, n, cost);
        if (eccl_tsp_eval(n, cost, NULL, moon_ring, &g->moon_given) == ECCL_OK) {
            g->moon_ids = ids, g->moon_ring = moon_ring, g->moon_cost = cost, g->moon_n = n;
            ids = NULL, cost = NULL;
        } else {
            free(moon_ring);
        }
    }
    free(ids), free(cost), free(tour), free(alt), free(ring);
    if (!changed) {
        opt_finish(m, g, ECCL_OK);
        return;
    }
    g->opt_phase = MG_OPT_REWIRING;
    g->change_wanted = 1;
    start_view_changes(m);
}

/* Kicks of the background search, a slice per master step, on its ring in
 * place; 1 while some group has budget left. */
static int moon_step(eccl_master *m)
{
    int more = 0;
    for (mgroup *g = m->groups; g; g = g->next) {
        if (!g->moon_ids || g->moon_kicks >= m->moon_budget) continue;
        eccl_tsp_opts o = {.max_kicks = MASTER_MOON_SLICE, .seed = g->moon_kicks + 1};
        eccl_tsp_result r;
        if (eccl_tsp_improve(g->moon_n, g->moon_cost, &o, g->moon_ring, &r) != ECCL_OK) {
            moon_reset(g);
            continue;
        }
        g->moon_kicks += MASTER_MOON_SLICE;
        /* Against the ring it was given, not r.accepted: that counts kicks
         * only, and the first slice's local search may be the whole gain. */
        g->moon_better = eccl_tsp_compare(o.objective, &r, &g->moon_given) < 0;
        more |= g->moon_kicks < m->moon_budget;
    }
    return more;
}

/* Whether some pair of this probe round was never measured. */
static int opt_round_wanted(const eccl_master *m, const mgroup *g, uint32_t shift)
{
    for (uint32_t i = 0; i < g->n; i++)
        if (eccl_bw_store_get(&m->bw, g->members[i]->id, g->members[(i + shift) % g->n]->id) == 0)
            return 1;
    return 0;
}

/* The next probe round with something to measure, else the solve. Round
 * `shift` has member i send to member i + shift: every member sends one
 * probe and receives one, so no link is measured while another probe of
 * the same peer competes with it. */
static void opt_next_round(eccl_master *m, mgroup *g)
{
    uint32_t max = g->opt_req.max_rounds;
    while (++g->opt_shift < g->n && !(max && g->opt_rounds >= max)) {
        if (!opt_round_wanted(m, g, g->opt_shift)) continue;
        g->opt_rounds++;
        g->n_opt = 0;
        for (uint32_t i = 0; i < g->n; i++) {
            mpeer *p = g->members[i], *t = g->members[(i + g->opt_shift) % g->n];
            if (eccl_bw_store_get(&m->bw, p->id, t->id) > 0) continue;
            eccl_msg msg = {.type = ECCL_MSG_OPT_PROBE};
            msg.u.opt_probe.seq = p->opt_seq;
            msg.u.opt_probe.round = g->opt_shift;
            msg.u.opt_probe.probe_ms = g->opt_req.probe_ms;
            msg.u.opt_probe.probe_conns = g->opt_req.probe_conns;
            msg.u.opt_probe.target.peer_id = t->id;
            memcpy(msg.u.opt_probe.target.addr, t->p2p_addr, sizeof msg.u.opt_probe.target.addr);
            p->opt_probing = 1;
            g->n_opt++;
            send_to(p, &msg);
        }
        return;
    }
    opt_solve(m, g);
}

static void opt_check_collect(eccl_master *m, mgroup *g)
{
    if (g->opt_phase != MG_OPT_COLLECTING) return;
    if (g->n_opt == 0) g->opt_phase = MG_OPT_IDLE; /* every asker left */
    if (g->n_opt == 0 || g->n_opt < g->n) return;
    /* Options: those of the lowest peer id, so the choice does not depend
     * on arrival order. */
    mpeer *first = NULL;
    for (uint32_t i = 0; i < g->n; i++)
        if (!first || g->members[i]->id < first->id) first = g->members[i];
    g->opt_req = first->opt_req;
    g->opt_phase = MG_OPT_PROBING;
    g->opt_shift = 0;
    g->opt_rounds = 0;
    opt_next_round(m, g);
}

/* The re-formed ring is wired everywhere: the call is over. */
static void opt_check_rewired(eccl_master *m, mgroup *g)
{
    if (g->opt_phase == MG_OPT_REWIRING && !g->querying && !g->change_wanted && g->n_ready == g->n)
        opt_finish(m, g, ECCL_OK);
}

static eccl_result on_opt_req(eccl_master *m, mpeer *p, const eccl_msg_opt_req *q)
{
    mgroup *g = p->group;
    if (p->state != MP_ACCEPTED || p->opt_asked || q->probe_ms == 0 || q->probe_conns == 0 ||
        q->probe_conns > ECCL_TOPO_MAX_CONNS)
        return ECCL_ERR_PROTOCOL;
    p->opt_asked = 1;
    p->opt_seq = q->seq;
    p->opt_req = *q;
    if (g->opt_phase != MG_OPT_IDLE && g->opt_phase != MG_OPT_COLLECTING) {
        /* Left out of the running call (it gave up earlier): not now. */
        eccl_msg_opt_done d = {.result = ECCL_ERR_BUSY, .epoch = g->epoch};
        opt_send_done(p, &d);
        p->opt_asked = 0;
        return ECCL_OK;
    }
    if (g->opt_phase == MG_OPT_IDLE) {
        g->opt_phase = MG_OPT_COLLECTING;
        g->n_opt = 0;
        memset(&g->opt_done, 0, sizeof g->opt_done);
    }
    g->n_opt++;
    /* A member already waiting in another group-wide call never asks:
     * fail both now rather than at everyone's timeout. */
    int busy = g->sync_phase != MG_SYNC_IDLE;
    for (uint32_t k = 0; k < g->n && !busy; k++)
        busy = g->members[k]->voted || g->members[k]->asked_pending;
    if (busy) {
        sync_conflict(m, g);
        opt_finish(m, g, ECCL_ERR_BUSY);
        return ECCL_OK;
    }
    opt_check_collect(m, g);
    return ECCL_OK;
}

static eccl_result on_opt_bw(eccl_master *m, mpeer *p, const eccl_msg_opt_bw *b)
{
    mgroup *g = p->group;
    if (p->state != MP_ACCEPTED) return ECCL_ERR_PROTOCOL;
    if (!p->opt_asked || b->seq != p->opt_seq) return ECCL_OK; /* stale */
    if (b->result != ECCL_OK) {
        /* It gave up (timeout): the call cannot complete without it. */
        opt_finish(m, g, (eccl_result)b->result);
        return ECCL_OK;
    }
    if (g->opt_phase != MG_OPT_PROBING || !p->opt_probing || b->round != g->opt_shift)
        return ECCL_ERR_PROTOCOL;
    uint32_t i = 0;
    while (g->members[i] != p) i++;
    if (b->target != g->members[(i + g->opt_shift) % g->n]->id) return ECCL_ERR_PROTOCOL;
    if (b->bytes && b->ns) {
        /* A failed probe (0 bytes) stays unmeasured: the solver avoids it. */
        double bps = (double)b->bytes * 1e9 / (double)b->ns;
        if (eccl_bw_store_set(&m->bw, p->id, b->target, bps) == ECCL_OK) g->opt_done.pairs++;
    }
    p->opt_probing = 0;
    if (--g->n_opt == 0) opt_next_round(m, g);
    return ECCL_OK;
}

/* A member left: in COLLECTING it no longer counts; later the call fails. */
static void opt_on_drop(eccl_master *m, mgroup *g, int asked)
{
    if (g->opt_phase == MG_OPT_COLLECTING) {
        g->n_opt -= (uint32_t)asked;
        opt_check_collect(m, g);
    } else {
        opt_finish(m, g, ECCL_ERR_PEER_LOST);
    }
}

/* ---- peers ------------------------------------------------------------------ */

static void drop_peer(eccl_master *m, mpeer *p, eccl_result why)
{
    if (p->ch.closed) return;
    eccl_gate_leave(&m->gate, p);
    if (why == ECCL_ERR_PROTOCOL || why == ECCL_ERR_KICKED) {
        eccl_msg k = {.type = ECCL_MSG_KICK};
        k.u.kick.reason = (uint32_t)why;
        send_to(p, &k);
    }
    ECCL_INFO(m->env, "%s %llu dropped: %s", p->state == MP_RELAY ? "relay" : "peer",
              (unsigned long long)p->id, eccl_strerror(why));
    if (p->state == MP_ACCEPTED || p->state == MP_REGISTERED) m->metrics.lost++;
    /* In O(1): a 10k-rank job's shutdown dropped its peers one by one with
     * a scan each, 5 % of the simulator's time (perf). */
    *p->pprev = p->next;
    if (p->next) p->next->pprev = p->pprev;
    if (p->via) {
        /* The relay disconnects it (a gone entry downward). */
        p->via->kids[p->handle] = NULL;
        if (!p->via->ch.closed) {
            relay_put(p, NULL);
            relay_flush(p->via);
        }
        p->ch.closed = 1;
    } else {
        eccl_chan_close(&p->ch);
    }
    if (p->state == MP_RELAY) relay_gone(m, p);
    free(p->report);
    p->report = NULL;
    free(p->rx);
    p->rx = NULL;
    int opt_was = p->opt_asked;
    enum msync_state sync_was = p->sync_state;
    int sync_src = p->sync_src;
    sync_reset(p);
    eccl_bw_store_forget(&m->bw, p->id);
    p->next = m->graveyard;
    m->graveyard = p;
    m->n_state[p->state]--;
    m->n_asked -= p->asked_pending;
    m->n_voted -= p->state == MP_ACCEPTED && p->voted;
    m->n_admitting -= p->admitting;
    mgroup *g = p->group;
    if (p->state == MP_ACCEPTED && g) {
        g->n_ready -= p->ready_epoch == g->epoch;
        g->n_reported -= g->querying && p->reported;
        group_remove(g, p);
        repair_on_drop(g, p);
        sync_on_drop(m, g, sync_was, sync_src);
        opt_on_drop(m, g, opt_was);
        if (g->left_together) {
            if (g->n == 0) g->left_together = 0, g->n_leaving = 0; /* gone: it may start anew */
        } else {
            /* A loss before the vote passed: the members that voted are
             * told (they would wait for it in vain), and the ring
             * re-forms as after any loss. */
            g->n_leaving -= (uint32_t)p->leaving;
            if (g->n_leaving) send_leave_done(g, ECCL_ERR_PEER_LOST);
            g->change_wanted = 1;
            start_view_changes(m);
        }
        check_query(m, g);
    }
    accept_alone_if_empty(m, NULL);
    maybe_admit(m);
    check_admission_done(m);
    check_pending_round(m);
}

static eccl_result on_register(eccl_master *m, mpeer *p, const eccl_msg_register *r)
{
    if (p->state != MP_CONNECTED) return ECCL_ERR_PROTOCOL;
    p->group = group_get(m, r->peer_group);
    if (!p->group) return ECCL_ERR_NO_MEMORY;
    p->id = ++m->next_id;
    memcpy(p->p2p_addr, r->p2p_addr, sizeof p->p2p_addr);
    if (r->peer_timeout_ms) p->timeout_ns = (uint64_t)r->peer_timeout_ms * MS;
    p->registered_ns = now_ns(m);
    p->heartbeat_at = p->registered_ns + p->timeout_ns / 4; /* its timeout, not ours */
    set_state(m, p, MP_REGISTERED);
    m->metrics.registrations++;
    schedule_scan(m, p);
    int alone = !m->admitting && m->n_state[MP_ACCEPTED] == 0;
    eccl_msg w = {.type = ECCL_MSG_WELCOME};
    w.u.welcome.peer_id = p->id;
    w.u.welcome.accepted = (uint32_t)alone;
    send_to(p, &w);
    ECCL_INFO(m->env, "peer %llu registered in group %u at %s", (unsigned long long)p->id,
              r->peer_group, p->p2p_addr);
    if (alone) accept_alone_if_empty(m, p);
    return ECCL_OK;
}

/* ---- relays (docs/protocol.md, "Relays") ---------------------------------- */

static eccl_result peer_on_msg(void *owner, eccl_chan *ch, const eccl_msg *msg);

static eccl_result on_relay_hello(eccl_master *m, mpeer *r, const eccl_msg_relay_hello *h)
{
    if (r->state != MP_CONNECTED) return ECCL_ERR_PROTOCOL;
    set_state(m, r, MP_RELAY);
    r->id = ++m->next_id; /* for log lines: ids are never reused */
    if (h->timeout_ms) r->timeout_ns = (uint64_t)h->timeout_ms * MS;
    r->heartbeat_at = now_ns(m) + r->timeout_ns / 4;
    schedule_scan(m, r);
    r->next_relay = m->relays;
    m->relays = r;
    ECCL_INFO(m->env, "relay %llu attached", (unsigned long long)r->id);
    return ECCL_OK;
}

/* The peer a relay's first frame for a new handle introduces. Handles are
 * handed out in the order of those first frames, so a new one is always
 * the next number: a relay cannot make us allocate at will. */
static mpeer *relay_kid_new(eccl_master *m, mpeer *r, uint32_t h)
{
    if (h != r->n_kids) return NULL;
    if (r->n_kids == r->cap_kids) {
        uint32_t cap = r->cap_kids ? 2 * r->cap_kids : 64;
        mpeer **k = realloc(r->kids, cap * sizeof *k);
        if (!k) return NULL;
        r->kids = k;
        r->cap_kids = cap;
    }
    mpeer *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->via = r;
    p->handle = h;
    p->timeout_ns = MASTER_DEFAULT_TIMEOUT_MS * MS;
    p->next = m->peers;
    if (p->next) p->next->pprev = &p->next;
    p->pprev = &m->peers;
    m->peers = p;
    m->n_state[MP_CONNECTED]++;
    r->kids[r->n_kids++] = p;
    return p;
}

/* A relay's REGISTER_SEG (wire.h) at handle h0: newcomer i is the peer of
 * handle h0 + i and registers as if alone; what it breaks drops it alone.
 * The handles are new (a peer's first frame is its REGISTER), so an old one
 * is the relay's violation, like any handle out of order. */
static eccl_result on_register_seg(eccl_master *m, mpeer *r, uint32_t h0, const eccl_msg_register_seg *s)
{
    eccl_msg reg = {.type = ECCL_MSG_REGISTER};
    reg.u.reg.peer_group = s->peer_group;
    reg.u.reg.peer_timeout_ms = s->peer_timeout_ms;
    uint32_t pos = 0, i = 0;
    while (!r->ch.closed && eccl_wire_register_seg_next(s, &pos, &i, reg.u.reg.p2p_addr)) {
        mpeer *p = relay_kid_new(m, r, h0 + i - 1);
        if (!p) return ECCL_ERR_PROTOCOL;
        eccl_result rc = peer_on_msg(m, &p->ch, &reg);
        if (rc != ECCL_OK) drop_peer(m, p, rc == ECCL_ERR_PROTOCOL ? ECCL_ERR_PROTOCOL : ECCL_ERR_CLOSED);
    }
    return ECCL_OK;
}

static eccl_result on_batch(eccl_master *m, mpeer *r, const eccl_msg_batch *b)
{
    uint32_t pos = 0, h0, count, len;
    const uint8_t *f;
    while (!r->ch.closed && eccl_wire_batch_next(b, &pos, &h0, &count, &f, &len)) {
        /* An entry is decoded once, a span's frame too (the same vote of
         * `count` peers), then applied to each of its peers. */
        eccl_clock_work(m->env, 1);
        eccl_msg msg;
        eccl_result drc = len ? eccl_wire_decode_entry(f, len, &msg) : ECCL_OK;
        if (drc == ECCL_OK && len && msg.type == ECCL_MSG_REGISTER_SEG) {
            if (count != 1) return ECCL_ERR_PROTOCOL;
            eccl_result rc = on_register_seg(m, r, h0, &msg.u.register_seg);
            if (rc != ECCL_OK) return rc;
            continue;
        }
        for (uint32_t h = h0; h - h0 < count && !r->ch.closed; h++) {
            mpeer *p = h < r->n_kids ? r->kids[h] : NULL;
            if (!len) { /* the relay lost it */
                if (p) drop_peer(m, p, ECCL_ERR_CLOSED);
                continue;
            }
            if (!p && h < r->n_kids) continue; /* dropped here; the relay will hear */
            if (!p && !(p = relay_kid_new(m, r, h))) return ECCL_ERR_PROTOCOL;
            eccl_result rc = drc == ECCL_OK ? peer_on_msg(m, &p->ch, &msg) : drc;
            if (rc != ECCL_OK) drop_peer(m, p, rc == ECCL_ERR_PROTOCOL ? ECCL_ERR_PROTOCOL : ECCL_ERR_CLOSED);
        }
    }
    /* Stopped early: a stepping span, which only goes down. */
    if (!r->ch.closed && pos != b->len) return ECCL_ERR_PROTOCOL;
    return ECCL_OK;
}

/* A relay is gone: so are the peers behind it, from here. They hear it as
 * a lost master and come back through another coordinator, as newcomers
 * (docs/protocol.md): deciding on their behalf would be deciding on a view
 * nobody can confirm. */
static void relay_gone(eccl_master *m, mpeer *r)
{
    for (mpeer **q = &m->relays; *q; q = &(*q)->next_relay)
        if (*q == r) {
            *q = r->next_relay;
            break;
        }
    for (uint32_t h = 0; h < r->n_kids; h++)
        if (r->kids[h]) drop_peer(m, r->kids[h], ECCL_ERR_CLOSED);
    eccl_wire_batch_free(&r->out);
}

/* The address book: who the asked ranks of the peer's epoch are. A query
 * for another epoch is stale (a view change overtook it: RING starts a new
 * book) and gets no answer; a rank out of the world is a broken peer. */
static eccl_result on_peer_query(mpeer *p, const eccl_msg_peer_query *q)
{
    mgroup *g = p->group;
    if (p->state != MP_ACCEPTED) return ECCL_ERR_PROTOCOL;
    if (q->epoch != g->epoch || g->querying) return ECCL_OK;
    if (!q->n) return ECCL_OK;
    /* 19 KiB at most: off the stack (simulated actors' stacks are lean). */
    eccl_wire_peer_entry *e = malloc(q->n * sizeof *e);
    if (!e) return ECCL_ERR_NO_MEMORY;
    for (uint32_t i = 0; i < q->n; i++) {
        uint32_t rank = eccl_wire_peer_query_rank(q, i);
        if (rank >= g->n) {
            free(e);
            return ECCL_ERR_PROTOCOL;
        }
        const mpeer *t = g->members[rank];
        e[i].rank = rank;
        e[i].ref.peer_id = t->id;
        memcpy(e[i].ref.addr, t->p2p_addr, sizeof e[i].ref.addr);
    }
    eccl_msg msg = {.type = ECCL_MSG_PEER_REPLY};
    msg.u.peer_reply.epoch = q->epoch;
    msg.u.peer_reply.n = q->n;
    msg.u.peer_reply.entries = e;
    send_to(p, &msg);
    free(e);
    return ECCL_OK;
}

static eccl_result peer_on_msg(void *owner, eccl_chan *ch, const eccl_msg *msg)
{
    eccl_master *m = owner;
    mpeer *p = (mpeer *)ch;
    if (msg->type == ECCL_MSG_REGISTER) return on_register(m, p, &msg->u.reg);
    if (msg->type == ECCL_MSG_RELAY_HELLO) return p->via ? ECCL_ERR_PROTOCOL : on_relay_hello(m, p, &msg->u.relay_hello);
    if (p->state == MP_RELAY) {
        if (msg->type == ECCL_MSG_BATCH) {
            p->ack_owed = 1; /* answered at the end of the step (relay.c, "upward") */
            return on_batch(m, p, &msg->u.batch);
        }
        return msg->type == ECCL_MSG_HEARTBEAT ? ECCL_OK : ECCL_ERR_PROTOCOL;
    }
    if (p->state == MP_CONNECTED) return ECCL_ERR_PROTOCOL; /* must register first */
    mgroup *g = p->group;
    switch (msg->type) {
    case ECCL_MSG_HEARTBEAT:
        return ECCL_OK;
    case ECCL_MSG_PENDING_QUERY:
        if (p->state != MP_ACCEPTED || p->asked_pending) return ECCL_ERR_PROTOCOL;
        p->asked_pending = 1;
        m->n_asked++;
        sync_conflict(m, g);
        opt_conflict(m, g);
        check_pending_round(m);
        return ECCL_OK;
    case ECCL_MSG_TOPO_VOTE:
        if (p->state != MP_ACCEPTED) return ECCL_ERR_PROTOCOL;
        m->n_voted += !p->voted;
        p->voted = 1;
        sync_conflict(m, g);
        opt_conflict(m, g);
        maybe_admit(m);
        return ECCL_OK;
    case ECCL_MSG_RING_READY:
        if (p->state == MP_ACCEPTED && msg->u.epoch.epoch == g->epoch && p->ready_epoch != g->epoch)
            g->n_ready++;
        p->ready_epoch = msg->u.epoch.epoch;
        check_admission_done(m);
        if (p->state == MP_ACCEPTED) opt_check_rewired(m, g);
        return ECCL_OK;
    case ECCL_MSG_COLL_DONE:
        /* Peers report only local failures (timeout, no memory) and links
         * that broke under an op (CONNECT): the rest of the ring is stuck
         * in that op. Re-forming the ring settles it and every other op in
         * flight. A link also breaks when its far end leaves, which is
         * routine: that report is no warning. */
        if (p->state != MP_ACCEPTED) return ECCL_ERR_PROTOCOL;
        if (msg->u.coll.result != ECCL_OK && msg->u.coll.result <= ECCL_ERR_AUTH)
            m->metrics.coll_failed[msg->u.coll.result]++;
        if (msg->u.coll.result != ECCL_OK && msg->u.coll.epoch == g->epoch) {
            if (msg->u.coll.result == ECCL_ERR_CONNECT)
                ECCL_INFO(m->env, "peer %llu: a link broke under tag %llu: re-forming group %u",
                          (unsigned long long)p->id, (unsigned long long)msg->u.coll.tag, g->id);
            else
                ECCL_WARN(m->env, "peer %llu failed tag %llu (%s): re-forming group %u",
                          (unsigned long long)p->id, (unsigned long long)msg->u.coll.tag,
                          eccl_strerror((eccl_result)msg->u.coll.result), g->id);
            /* A call stuck somewhere: every member writes its trace
             * (docs/trace.md), the ones that never called it too, before
             * the view change settles it. Once an epoch. */
            if (msg->u.coll.result != ECCL_ERR_CONNECT && g->traced_epoch != g->epoch + 1) {
                eccl_msg t = {.type = ECCL_MSG_TRACE_ASK};
                t.u.trace_ask.tag = msg->u.coll.tag;
                t.u.trace_ask.epoch = g->epoch;
                t.u.trace_ask.result = msg->u.coll.result;
                g->traced_epoch = g->epoch + 1;
                m->metrics.trace_asks++;
                for (uint32_t i = 0; i < g->n; i++) send_to(g->members[i], &t);
            }
            g->change_wanted = 1;
            start_view_changes(m);
        }
        return ECCL_OK;
    case ECCL_MSG_LATE_REPORT:
        if (p->state != MP_ACCEPTED || msg->u.late.peer_id != 0) return ECCL_ERR_PROTOCOL;
        p->late_us = msg->u.late.late_us;
        m->metrics.late_reports++;
        slow_update(m, g, 0);
        return ECCL_OK;
    case ECCL_MSG_LINK_RATE:
        return on_link_rate(m, p, &msg->u.link);
    case ECCL_MSG_NOTICE_POST: {
        /* eccl_comm_notify: to every member, the poster too, before any
         * view change the notice starts (each member's master channel is
         * in order, so every member has the word before its calls in
         * flight settle). */
        if (p->state != MP_ACCEPTED || msg->u.notice.from != 0 || msg->u.notice.reform > 1)
            return ECCL_ERR_PROTOCOL;
        eccl_msg t = {.type = ECCL_MSG_NOTICE};
        t.u.notice = msg->u.notice;
        t.u.notice.from = p->id;
        t.u.notice.epoch = g->epoch;
        m->metrics.notices++;
        for (uint32_t i = 0; i < g->n; i++) send_to(g->members[i], &t);
        if (msg->u.notice.reform && msg->u.notice.epoch == g->epoch) {
            ECCL_INFO(m->env, "peer %llu posted a notice: re-forming group %u", (unsigned long long)p->id, g->id);
            m->metrics.notice_reforms++;
            g->change_wanted = 1;
            start_view_changes(m);
        }
        return ECCL_OK;
    }
    case ECCL_MSG_COLL_STATS:
        if (p->state != MP_ACCEPTED) return ECCL_ERR_PROTOCOL;
        m->metrics.member_calls += msg->u.stats.calls;
        m->metrics.member_bytes += msg->u.stats.bytes;
        return ECCL_OK;
    case ECCL_MSG_VIEW_REPORT: {
        if (p->state != MP_ACCEPTED || !g->querying || msg->u.view.epoch != g->epoch ||
            p->reported)
            return ECCL_OK; /* stale: a view it was not asked about */
        /* The decoded entries borrow the frame's payload: copy them out. */
        size_t bytes = msg->u.view.n_ops * sizeof *p->report;
        p->report = bytes ? malloc(bytes) : NULL;
        if (bytes && !p->report) return ECCL_ERR_NO_MEMORY;
        for (uint32_t i = 0; i < msg->u.view.n_ops; i++)
            p->report[i] = eccl_wire_view_op(&msg->u.view, i);
        p->n_report = msg->u.view.n_ops;
        p->reported = 1;
        g->n_reported++;
        check_query(m, g);
        return ECCL_OK;
    }
    case ECCL_MSG_SYNC_REQ:
        opt_conflict(m, g);
        return on_sync_req(m, p, &msg->u.sync_req);
    case ECCL_MSG_OPT_REQ:
        return on_opt_req(m, p, &msg->u.opt_req);
    case ECCL_MSG_OPT_BW:
        return on_opt_bw(m, p, &msg->u.opt_bw);
    case ECCL_MSG_SYNC_REPORT:
        if (p->state != MP_ACCEPTED) return ECCL_ERR_PROTOCOL;
        return on_sync_report(m, p, &msg->u.sync_result);
    case ECCL_MSG_PEER_QUERY:
        return on_peer_query(p, &msg->u.peer_query);
    case ECCL_MSG_REPAIR_DATA:
        return on_repair_data(m, p, &msg->u.repair);
    case ECCL_MSG_LEAVE:
        if (p->state != MP_ACCEPTED || p->leaving) return ECCL_ERR_PROTOCOL;
        p->leaving = 1;
        g->n_leaving++;
        check_leave(g);
        return ECCL_OK;
    default:
        return ECCL_ERR_PROTOCOL; /* a master-to-peer or p2p message */
    }
}

static const eccl_chan_handler peer_handler = {peer_on_msg, eccl_chan_refuse_data,
                                                eccl_chan_refuse_data_done};

/* A connection closed at the door, to make room or at its deadline: a
 * line now and then (eccl_auth_log_due), the counts in the metrics. */
static void gate_note(eccl_master *m)
{
    const eccl_gate *g = &m->gate;
    if (eccl_auth_log_due(g->refused + g->evicted + g->expired))
        ECCL_WARN(m->env,
                  "closing connections that do not prove the job's secret in time: %llu refused (their host "
                  "had %u pending), %llu closed to make room (%u pending at most), %llu past %llu ms",
                  (unsigned long long)g->refused, g->per_host, (unsigned long long)g->evicted, g->cap,
                  (unsigned long long)g->expired, (unsigned long long)(g->timeout_ns / MS));
}

static void accept_peers(eccl_master *m)
{
    for (;;) {
        mpeer *p = calloc(1, sizeof *p);
        if (!p) return;
        eccl_result rc = eccl_chan_accept(&p->ch, m->env, m->listener.l, p, MASTER_RBUF);
        if (rc != ECCL_OK) {
            free(p);
            if (rc != ECCL_ERR_AGAIN) ECCL_WARN(m->env, "accept failed: %s", eccl_strerror(rc));
            return;
        }
        p->timeout_ns = MASTER_DEFAULT_TIMEOUT_MS * MS;
        p->heartbeat_at = now_ns(m) + p->timeout_ns / 4;
        p->next = m->peers;
        if (p->next) p->next->pprev = &p->next;
        p->pprev = &m->peers;
        m->peers = p;
        m->n_state[MP_CONNECTED]++;
        schedule_scan(m, p);
        /* Until it proves the secret: a bounded few per host and in all. */
        void *evict = NULL;
        int in = eccl_gate_enter(&m->gate, p, &p->ch, eccl_gate_host_of(m->env, p->ch.conn), now_ns(m), &evict);
        if (evict) drop_peer(m, evict, ECCL_ERR_AUTH);
        if (!in) drop_peer(m, p, ECCL_ERR_AUTH);
        if (evict || !in) gate_note(m);
        if (eccl_gate_deadline(&m->gate) < m->scan_at) m->scan_at = eccl_gate_deadline(&m->gate);
    }
}

static void service_peer(eccl_master *m, mpeer *p)
{
    if (p->ch.closed) return;
    eccl_result rc = eccl_chan_read(&p->ch, &peer_handler, m, SIZE_MAX);
    if (rc == ECCL_OK) rc = eccl_chan_flush(&p->ch);
    if (rc != ECCL_OK && !p->ch.closed) {
        if (rc == ECCL_ERR_PROTOCOL)
            ECCL_WARN(m->env, "peer %llu broke the protocol: kicked", (unsigned long long)p->id);
        if (rc != ECCL_ERR_AUTH && p->ch.auth) m->metrics.auth_gone++; /* hung up mid-handshake */
        if (rc == ECCL_ERR_AUTH && eccl_auth_log_due(++m->metrics.auth_refused))
            ECCL_WARN(m->env, "refused a connection that failed authentication (%llu so far): %s",
                      (unsigned long long)m->metrics.auth_refused, p->ch.auth_why ? p->ch.auth_why : "its TLS handshake failed");
        drop_peer(m, p, rc == ECCL_ERR_PROTOCOL ? ECCL_ERR_PROTOCOL : ECCL_ERR_CLOSED);
    }
}

static void scan_peers(eccl_master *m, uint64_t now);

static uint64_t master_step(void *owner, void **ready, int n, int *again)
{
    eccl_master *m = owner;
    *again = 0;
    for (int i = 0; i < n; i++) {
        if (*(int *)ready[i] == ECCL_HANDLE_LISTENER) accept_peers(m);
        else service_peer(m, ready[i]);
    }
    *again = moon_step(m);
    /* Outbound queues that the socket did not take wait for writability,
     * so only deadlines need the scan of every peer, and only when due. */
    uint64_t now = now_ns(m);
    if (now >= m->scan_at) scan_peers(m, now);
    /* What this step decided for peers behind relays: one frame per relay. */
    for (mpeer *r = m->relays, *nx; r; r = nx) {
        nx = r->next_relay;
        if (r->out_err != ECCL_OK) {
            drop_peer(m, r, r->out_err);
            continue;
        }
        relay_flush(r);
        if (r->ack_owed && !r->ch.closed) {
            /* Nothing for its peers: a heartbeat answers its batch, so it
             * may send the next (it holds one unanswered at most). */
            eccl_msg hb = {.type = ECCL_MSG_HEARTBEAT};
            if (eccl_chan_send_msg(&r->ch, &hb) == ECCL_OK) eccl_chan_flush(&r->ch);
        }
        r->ack_owed = 0;
    }
    return m->scan_at;
}

static void scan_peers(eccl_master *m, uint64_t now)
{
    m->scan_at = ECCL_NO_DEADLINE;
    for (mpeer *p; (p = eccl_gate_expired(&m->gate, now)) != NULL;) {
        drop_peer(m, p, ECCL_ERR_TIMEOUT);
        gate_note(m);
    }
    if (eccl_gate_deadline(&m->gate) < m->scan_at) m->scan_at = eccl_gate_deadline(&m->gate);
    for (mpeer *p = m->peers, *nx; p; p = nx) {
        nx = p->next;
        if (p->via) continue; /* its relay watches it */
        if (now - p->ch.last_rx_ns > p->timeout_ns) {
            drop_peer(m, p, ECCL_ERR_TIMEOUT);
            continue;
        }
        if (now + heartbeat_slack(p) >= p->heartbeat_at && p->state != MP_CONNECTED) {
            eccl_msg hb = {.type = ECCL_MSG_HEARTBEAT};
            send_to(p, &hb);
            p->heartbeat_at = now + p->timeout_ns / 4;
        }
        schedule_scan(m, p);
    }
}

static void master_reap(void *owner)
{
    eccl_master *m = owner;
    for (mpeer *p = m->graveyard, *n; p; p = n) {
        n = p->next;
        free(p->kids);
        free(p);
    }
    m->graveyard = NULL;
}

static const eccl_engine_ops master_engine_ops = {master_step, master_reap, NULL};

/* ---- public API ---------------------------------------------------------------- */

eccl_result eccl_master_create_with_env(eccl_env *env, eccl_env_release_fn release,
                                        const char *listen_addr, eccl_master **out)
{
    eccl_result rc;
    if (!listen_addr || !out || strlen(listen_addr) >= ECCL_ADDR_MAX) {
        release(env);
        return ECCL_ERR_INVALID_ARG;
    }
    eccl_master *m = calloc(1, sizeof *m);
    if (!m) {
        release(env);
        return ECCL_ERR_NO_MEMORY;
    }
    m->env = env;
    m->env_release = release;
    m->listener.kind = ECCL_HANDLE_LISTENER;
    snprintf(env->name, sizeof env->name, "master");
    m->opt_work = eccl_config_uint(env, "ECCL_TOPO_SOLVE_WORK", 1, UINT64_MAX, MASTER_OPT_WORK);
    m->slow_link_factor = (uint32_t)eccl_config_uint(env, "ECCL_SLOW_LINK_FACTOR", 0, 1000, 4);
    m->moon_budget =
        eccl_config_uint(env, "ECCL_TOPO_MOONSHOT_KICKS", 0, UINT32_MAX, MASTER_MOON_KICKS);
    if ((rc = eccl_gate_init(&m->gate, env)) != ECCL_OK) goto fail;
    ECCL_CHECK(env, eccl_engine_init(&m->eng, env, &master_engine_ops, m));
    rc = env->net->listen(env->net_ctx, listen_addr, &m->listener, &m->listener.l, m->addr);
    if (rc != ECCL_OK) {
        ECCL_ERROR(env, "cannot listen on %s: %s", listen_addr, eccl_strerror(rc));
        eccl_engine_fini(&m->eng);
        eccl_gate_free(&m->gate);
        goto fail;
    }
    *out = m;
    return ECCL_OK;
fail:
    free(m);
    release(env);
    return rc;
}

eccl_result eccl_master_address(const eccl_master *m, char *buf, size_t len)
{
    if (!m || !buf || len == 0) return ECCL_ERR_INVALID_ARG;
    if (strlen(m->addr) >= len) return ECCL_ERR_INVALID_ARG;
    memcpy(buf, m->addr, strlen(m->addr) + 1);
    return ECCL_OK;
}

eccl_result eccl_master_run(eccl_master *m)
{
    if (!m) return ECCL_ERR_INVALID_ARG;
    if (m->running) return ECCL_ERR_BUSY;
    eccl_result rc = eccl_engine_start(&m->eng, "eccl-master");
    if (rc == ECCL_OK) m->running = 1;
    return rc;
}

/* ---- metrics (Prometheus text format 0.0.4) ------------------------------------ */

struct text {
    char *buf;
    size_t len, used; /* used may pass len: the size needed */
};

__attribute__((format(printf, 2, 3))) static void put(struct text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->buf + (t->used < t->len ? t->used : t->len), t->used < t->len ? t->len - t->used : 0,
                      fmt, ap);
    va_end(ap);
    if (k > 0) t->used += (size_t)k;
}

static void metric(struct text *t, const char *name, const char *type, const char *help)
{
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(struct text *t, const char *name, const char *help, uint64_t value)
{
    metric(t, name, "counter", help);
    put(t, "%s %llu\n", name, (unsigned long long)value);
}

/* A summary of `count` durations adding up to sum_ns, in seconds. */
static void summary(struct text *t, const char *name, const char *help, uint64_t sum_ns, uint64_t count)
{
    metric(t, name, "summary", help);
    put(t, "%s_sum %.9f\n%s_count %llu\n", name, (double)sum_ns / 1e9, name, (unsigned long long)count);
}

/* One line per member's link in that it reported: its rate, or its bytes. */
static void link_lines(struct text *t, const eccl_master *m, const char *name, int bytes)
{
    for (const mgroup *g = m->groups; g; g = g->next)
        for (uint32_t i = 0; i < g->n; i++)
            for (int j = 0; g->members[i]->rx && j < MP_RX; j++) {
                const struct mrx *e = &g->members[i]->rx[j];
                if (!e->from) continue;
                put(t, "%s{from=\"%llu\",to=\"%llu\"} ", name, (unsigned long long)e->from,
                    (unsigned long long)g->members[i]->id);
                if (bytes) put(t, "%llu\n", (unsigned long long)e->bytes);
                else put(t, "%.6g\n", e->bps);
            }
}

eccl_result eccl_master_metrics(eccl_master *m, char *buf, size_t len, size_t *needed)
{
    static const char *const states[MP_STATES] = {"connected", "registered", "accepted", "relay"};
    if (!m || (!buf && len)) return ECCL_ERR_INVALID_ARG;
    struct text t = {buf, len, 0};
    eccl_engine_lock(&m->eng);
    metric(&t, "eccl_master_peers", "gauge", "Connections by state: connected (not registered), registered "
                                              "(waiting for admission), accepted (members), relay.");
    for (int s = 0; s < MP_STATES; s++) put(&t, "eccl_master_peers{state=\"%s\"} %u\n", states[s], m->n_state[s]);
    metric(&t, "eccl_master_group_members", "gauge", "Members of each peer group's ring.");
    for (const mgroup *g = m->groups; g; g = g->next)
        put(&t, "eccl_master_group_members{group=\"%u\"} %u\n", g->id, g->n);
    metric(&t, "eccl_master_group_epoch", "gauge", "Each peer group's ring epoch.");
    for (const mgroup *g = m->groups; g; g = g->next)
        put(&t, "eccl_master_group_epoch{group=\"%u\"} %u\n", g->id, g->epoch);
    metric(&t, "eccl_master_group_slow_peer", "gauge",
           "The member of each group that calls late, as its members are told (0: none).");
    for (const mgroup *g = m->groups; g; g = g->next)
        put(&t, "eccl_master_group_slow_peer{group=\"%u\"} %llu\n", g->id, (unsigned long long)g->slow_peer);
    metric(&t, "eccl_master_group_slow_link", "gauge",
           "The slow link of each group, as its members are told: 1 for the link from peer `from` to peer `to`.");
    for (const mgroup *g = m->groups; g; g = g->next)
        if (g->slow_from)
            put(&t, "eccl_master_group_slow_link{group=\"%u\",from=\"%llu\",to=\"%llu\"} 1\n", g->id,
                (unsigned long long)g->slow_from, (unsigned long long)g->slow_to);
    metric(&t, "eccl_master_link_rate_bytes_per_second", "gauge",
           "Each member's links in (from the sending peer), as it last measured them (LINK_RATE): payload bytes "
           "over the time they took to arrive.");
    link_lines(&t, m, "eccl_master_link_rate_bytes_per_second", 0);
    metric(&t, "eccl_master_link_bytes_total", "counter",
           "Payload bytes each member's links in carried, as its LINK_RATEs reported them (large frames only).");
    link_lines(&t, m, "eccl_master_link_bytes_total", 1);
    counter(&t, "eccl_master_member_collectives_total",
            "Collectives that returned ECCL_OK on members, each member's own calls, summed (COLL_STATS: every "
            "ECCL_STATS_MS and when a member leaves).",
            m->metrics.member_calls);
    counter(&t, "eccl_master_member_collective_bytes_total",
            "The bytes of those calls (count times the datatype's size), summed over members.",
            m->metrics.member_bytes);
    counter(&t, "eccl_master_slow_links_total", "Links named slow to their group's members.",
            m->metrics.slow_links);
    counter(&t, "eccl_master_registrations_total", "Peers that registered.", m->metrics.registrations);
    counter(&t, "eccl_master_auth_refused_total",
            "Connections refused because they did not prove the job's secret.", m->metrics.auth_refused);
    metric(&t, "eccl_master_auth_pending", "gauge", "Connections accepted that have not proven the secret yet.");
    put(&t, "eccl_master_auth_pending %u\n", m->gate.n);
    metric(&t, "eccl_master_auth_closed_total", "counter",
           "Connections closed before they proved the secret: their host had ECCL_AUTH_PENDING_PER_HOST "
           "pending (host), the oldest closed for room past ECCL_AUTH_PENDING_MAX (room), past "
           "ECCL_AUTH_TIMEOUT_MS (timeout), or hung up or reset by the far end (gone).");
    put(&t, "eccl_master_auth_closed_total{why=\"host\"} %llu\n", (unsigned long long)m->gate.refused);
    put(&t, "eccl_master_auth_closed_total{why=\"room\"} %llu\n", (unsigned long long)m->gate.evicted);
    put(&t, "eccl_master_auth_closed_total{why=\"timeout\"} %llu\n", (unsigned long long)m->gate.expired);
    put(&t, "eccl_master_auth_closed_total{why=\"gone\"} %llu\n", (unsigned long long)m->metrics.auth_gone);
    counter(&t, "eccl_master_admitted_total", "Peers admitted into a ring.", m->metrics.admitted);
    summary(&t, "eccl_master_admission_seconds",
            "From a peer's registration to its admission (the vote and the view change).", m->metrics.admit_ns,
            m->metrics.admitted);
    counter(&t, "eccl_master_peers_lost_total", "Registered or accepted peers dropped (lost, left, kicked).",
            m->metrics.lost);
    counter(&t, "eccl_master_epochs_total", "Ring epochs begun, all groups.", m->metrics.epochs);
    counter(&t, "eccl_master_late_reports_total", "Members that said they call late, or no longer do.",
            m->metrics.late_reports);
    summary(&t, "eccl_master_view_change_seconds",
            "View changes (a query of every member, then a new ring), and how long each took.",
            m->metrics.view_ns, m->metrics.view_changes);
    metric(&t, "eccl_master_collective_failures_total", "counter",
           "Collectives members reported failed to the master (COLL_DONE), by result.");
    for (int r = 1; r <= ECCL_ERR_AUTH; r++)
        if (m->metrics.coll_failed[r])
            put(&t, "eccl_master_collective_failures_total{result=\"%s\"} %llu\n", eccl_trace_result_word(r),
                (unsigned long long)m->metrics.coll_failed[r]);
    counter(&t, "eccl_master_trace_asks_total",
            "Times every member was asked for its collective trace (a failure, or an operator).",
            m->metrics.trace_asks);
    counter(&t, "eccl_master_notices_total", "Notices members posted to their groups (eccl_comm_notify).",
            m->metrics.notices);
    counter(&t, "eccl_master_notice_reforms_total",
            "Ring re-forms those notices asked for (ECCL_NOTIFY_REFORM), its calls in flight settled.",
            m->metrics.notice_reforms);
    eccl_engine_unlock(&m->eng);
    if (needed) *needed = t.used + 1;
    return t.used < len ? ECCL_OK : ECCL_ERR_INVALID_ARG;
}

eccl_result eccl_master_trace_all(eccl_master *m)
{
    if (!m) return ECCL_ERR_INVALID_ARG;
    uint32_t asked = 0;
    eccl_engine_lock(&m->eng);
    for (mgroup *g = m->groups; g; g = g->next) {
        eccl_msg t = {.type = ECCL_MSG_TRACE_ASK}; /* tag 0, result OK: an operator's ask */
        t.u.trace_ask.epoch = g->epoch;
        for (uint32_t i = 0; i < g->n; i++, asked++) send_to(g->members[i], &t);
    }
    m->metrics.trace_asks++;
    eccl_engine_unlock(&m->eng);
    eccl_engine_kick(&m->eng); /* its step flushes what waits for relays */
    ECCL_INFO(m->env, "asked %u member(s) for their collective traces", asked);
    return ECCL_OK;
}

eccl_result eccl_master_stop(eccl_master *m)
{
    if (!m) return ECCL_ERR_INVALID_ARG;
    if (m->running) eccl_engine_stop(&m->eng);
    m->running = 0;
    for (mpeer *p = m->peers, *n; p; p = n) {
        n = p->next;
        if (!p->via) eccl_chan_close(&p->ch);
        free(p->report);
        free(p->rx);
        free(p->sync_keys);
        free(p->kids);
        eccl_wire_batch_free(&p->out);
        free(p);
    }
    m->peers = NULL;
    m->relays = NULL;
    if (m->listener.l) m->env->net->close_listener(m->env->net_ctx, m->listener.l);
    m->listener.l = NULL;
    master_reap(m);
    return ECCL_OK;
}

void eccl_master_destroy(eccl_master *m)
{
    if (!m) return;
    eccl_master_stop(m);
    for (mgroup *g = m->groups, *n; g; g = n) {
        n = g->next;
        moon_reset(g);
        view_reset(g);
        free(g->members);
        free(g->starts);
        free(g);
    }
    eccl_bw_store_fini(&m->bw);
    eccl_engine_fini(&m->eng);
    eccl_gate_free(&m->gate);
    m->env_release(m->env);
    free(m);
}
