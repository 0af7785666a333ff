/* The communicator's insides, shared by the files of core/comm: comm.c
 * (the engine, the master link, create/connect/destroy), links.c (p2p
 * links and the frames they carry), ops.c (an op's life and its fault
 * contract, behind coll/algo.h), view.c (ring epochs and the view change),
 * colls.c (the collectives' public API), shared_state.c and topo_opt.c.
 * One mutex (the engine's) guards all of it. Not a public header. */
#ifndef ECCL_CORE_COMM_COMM_INTERNAL_H
#define ECCL_CORE_COMM_COMM_INTERNAL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/stage.h"
#include "coll/algo.h"
#include "coll/alltoall.h"
#include "coll/p2p.h"
#include "coll/binomial.h"
#include "coll/dispatch.h"
#include "coll/hier_allreduce.h"
#include "coll/rec_allreduce.h"
#include "coll/bruck.h"
#include "coll/rec_allgather.h"
#include "coll/rec_reduce_scatter.h"
#include "coll/ring_allreduce.h"
#include "coll/ring_pass.h"
#include "coll/tree_allreduce.h"
#include "eccl_core.h"
#include "proto/chan.h"
#include "sched/engine.h"
#include "proto/gate.h"
#include "state/hash.h"
#include "util/bufpool.h"
#include "util/config.h"
#include "util/log.h"
#include "trace/trace.h"

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
/* Calls over which a rank judges whether it calls late (late.c). */
#define COMM_LATE_CALLS 16u
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
    eccl_buf *staging[ECCL_WIRE_TREE_CHILDREN]; /* a tree op's partials; others use [0], [1] */
    eccl_buf *qimg;       /* quantised ring: the two code images */
    eccl_stage stage;     /* device buffers: the host mirror the op runs on */
    void *pinned;         /* device-resident ring: staging + send slots (pinned) */
    size_t pinned_bytes;
    void *dev_backup;     /* device-resident ring: the backup, device memory */
    int started;          /* the algorithm owns recvbuf's restore from here */
    int repaired;         /* frozen without the result, which a view change handed us */
    /* Returned early (docs/protocol.md, "The commit rule"): the caller has
     * its result; the op runs on for its completion round, keeping a copy
     * of the result (`kept`) for survivors that may lack it. `orphan`: the
     * caller reaped it too; it is freed when it finishes. */
    int returned, orphan;
    /* Its completion tokens may wait for the link's next frame
     * (eccl_chan_send_lazy): it fit an early return when it started, so
     * they are, or will soon be, off the caller's path. Decided once, not
     * per pump: a call that ends up waiting for its round after all has
     * them sent as soon as its engine finds nothing to do (comm_idle). */
    int lazy_tokens;
    /* Returned, and its last pump had every peer link it asked for and
     * queued nothing: only a frame of its own (a token) can give it more to
     * send, so comm_ops_pump passes it by until one comes (comm_op_recv) or
     * a link of the comm closes (comm_link_close). */
    int quiet;
    uint64_t start_seq;   /* the order ops started in (comm->starts) */
    uint64_t posted_ns;   /* the caller's call */
    uint64_t heard_early_ns; /* the first of its frames that came before it was posted; 0: none (late.c) */
    uint64_t gap_ns;      /* since the caller's previous call returned, when posted (late.c) */
    eccl_buf *kept;       /* comm_op_repair_bytes(r) of them, from the comm's pool */
    int timeout_told;     /* its deadline passed and the master was asked to settle it */
    /* The world and rank the caller saw: a layout-bound call (all but
     * all-reduce) that starts in another fails rather than run on a layout
     * nobody meant. */
    uint32_t called_world, called_rank;
    uint8_t barrier_buf[2]; /* a barrier's one-byte all-reduce: in, out */
    uint64_t trace_seq;     /* its record in the comm's trace (0: none) */
    int trace_heard;        /* its first frame is in the record: later ones skip it */
    size_t *varr;           /* the v layouts' counts and displacements (call.vcounts) */
    void *amem;             /* the algorithm's own bookkeeping (all-to-all: per peer) */
    const eccl_coll_algo *alg; /* NULL until the op starts */
    /* Its state (an eccl_tree_allreduce, ...: op_state), sized to the
     * algorithm from the comm's state pool, so that a small call's request
     * stays small (two are alive at once behind a call that returned
     * early): NULL until the op starts. */
    eccl_buf *alg_state;
};

static inline void *op_state(const eccl_request *r) { return r->alg_state->ptr; }

/* A replicated result the master handed us (REPAIR_PUT) for a tag we had
 * not called when a view change committed it (docs/protocol.md, "The
 * commit rule"): our next call of the tag returns these bytes instead of
 * running. `committed` once the decision of its epoch came; a record whose
 * decision did not commit the tag is dropped. The bytes are staging memory
 * from the comm's pool, as an op's backup is (and fail as it can). */
typedef struct comm_record {
    struct comm_record *next;
    uint64_t tag;
    uint32_t epoch;
    uint32_t world;     /* of that epoch: the world the others ran the call in */
    int committed;
    uint32_t len;
    eccl_buf *bytes;
} comm_record;

/* What a link is to us in the current epoch (enum eccl_coll_role), or
 * ROLE_NONE: not (yet) part of the current epoch. */
#define ROLE_NONE (-1)

typedef struct early_frame {
    struct early_frame *next;
    eccl_wire_data d;
    eccl_buf *buf; /* NULL for an empty frame */
    uint64_t at_ns; /* when it came (late.c) */
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
    uint64_t held_ns, held_tag;       /* since when a frame of a call not made
                                         here waits unread on the link (late.c); 0: none */
    /* Its rate in (rates.c): large frames' payload bytes and the time they
     * took; what the master was told of; when the frame being read began. */
    uint64_t rx_bytes, rx_ns, rx_told_bytes, rx_told_ns, rx_at_ns;
    uint64_t rx_win_bytes, rx_win_ns; /* the last window told to the master */
    /* Shared-state and probe links (purposes SYNC, PROBE) live in
     * comm->side_links, outside every ring epoch: view changes neither
     * pause nor close them. */
    int sync_fetcher;                 /* we opened it to fetch from src */
    uint32_t sync_src;                /* index into comm->sync.src */
    int probe_sender;                 /* we opened it to probe the target */
    uint32_t probe_unacked;           /* our probe frames not answered yet */
    uint32_t peer_rank;               /* purpose PEER: the rank at the other end */
} p2p_link;

/* The address book's entry for one rank of the epoch (peers.c). */
typedef struct comm_peer {
    uint32_t rank;            /* UINT32_MAX: a free slot */
    uint8_t asked, known;     /* PEER_QUERY sent; PEER_REPLY came */
    eccl_wire_peer_ref ref;
    p2p_link *link;           /* open (ours or accepted), or NULL */
    uint64_t retry_at, backoff; /* reconnecting after a failure */
} comm_peer;

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
    uint64_t stop_ns;         /* send no new frame from here (once one was sent) */
    uint32_t sent;            /* frames of this probe */
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
    eccl_dispatch dispatch;     /* which algorithm runs a call (coll/dispatch.h) */
    eccl_trace trace;           /* the last calls and epochs (coll_trace.c) */
    uint32_t trace_dumps;       /* dumps written so far: the next one's number */
    uint32_t trace_auto_epoch;  /* the epoch of the last automatic dump, plus one */
    uint64_t trace_now;         /* inside a call's submission: its clock reading, else 0 */
    uint64_t trace_asks;        /* the env's asks from outside already answered */
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
    int master_broken;          /* a send to the master failed: the next step fails us */
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
    /* The numbering the caller last saw (ECCL_ATTR_RANK and the like, or
     * its first send or receive), which names its peers; seen_world 0: it
     * was told the membership changed (a call failed with PEER_LOST, an
     * update_topology returned), so the current one is what it means. */
    uint32_t seen_world, seen_rank;
    uint64_t call_epoch;    /* eccl_comm_pin_epoch: calls belong to this ring (0: the current) */
    /* Notices the master passed on, not taken yet (eccl_comm_notices):
     * oldest first, at most COMM_NOTICES_MAX (more are dropped, counted). */
    eccl_notice *notices;
    uint32_t n_notices, cap_notices;
    uint64_t notices_dropped;
    /* Ranks per host in a host-regular world, else 0 (eccl_msg_ring):
     * where the hierarchical all-reduce may run. */
    uint32_t local_size;
    uint32_t host_ranks;   /* this epoch's RING: ranks on our host (0: not told) */
    uint64_t auth_refused; /* p2p connections refused: they did not prove the job's secret */
    eccl_gate gate;        /* accepted p2p connections still proving it */
    eccl_wire_peer_ref next_ref, prev_ref;
    p2p_link *link_next, *link_prev;
    uint64_t next_retry_at;     /* reconnect to next after a refusal */
    uint64_t next_backoff;
    int ring_ready;
    int frozen;                 /* between VIEW_QUERY and RING */
    /* tree of the current epoch: link_tree[eccl_tree_role] */
    eccl_wire_peer_ref parent_ref;
    uint64_t child_id[ECCL_WIRE_TREE_CHILDREN]; /* 0 past the last */
    p2p_link *link_tree[ECCL_TREE_ROLES];
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

    /* The address book and peer links of the epoch (peers.c): open
     * addressing by rank, entries only for ranks our ops talked to. */
    comm_peer *peers;
    uint32_t cap_peers, n_peers;
    uint32_t *ask;              /* ranks to ask the master for at the end of the pump */
    uint32_t n_ask, cap_ask;
    uint64_t peers_retry_at;    /* earliest entry's retry_at, 0 = none */

    p2p_link *links;            /* every open link */
    p2p_link *side_links;       /* shared-state and probe links, apart from the rings */
    p2p_link *graveyard;        /* closed, freed by reap */
    comm_sync sync;
    comm_opt opt;

    uint64_t topo_done_seen;
    uint64_t pending_replies;
    uint64_t pending_asked;     /* PENDING_QUERYs sent: one more than replies while one is out */
    uint32_t pending_value;
    int leaving;                /* eccl_comm_leave: sent LEAVE */
    int left;                   /* LEAVE_DONE came: leave_result */
    eccl_result leave_result;

    eccl_request *ops;
    uint32_t n_ops;
    size_t early_max;           /* ECCL_EARLY_RETURN_BYTES */
    size_t kept_total;          /* bytes kept by ops that returned early */
    uint32_t n_returned;        /* ops that returned early, running on */
    uint64_t starts;            /* ops started so far: eccl_request.start_seq */
    /* Calling late (late.c): this rank's lateness of its last calls (µs
     * after a partner's first frame), its limit (ECCL_LATE_MS; 0: off),
     * what it last told the master, and the group's late peer the master
     * names (ECCL_ATTR_SLOW_PEER; 0: none). */
    uint32_t late_us[COMM_LATE_CALLS], n_late, late_head, late_limit_us, late_told_us;
    uint32_t late_over, late_under; /* of those, over the limit; under half of it */
    uint64_t returned_ns; /* when a call last returned to the caller (late.c) */
    uint64_t slow_peer;
    uint32_t slow_us;
    uint64_t slow_link_from, slow_link_to; /* the master's SLOW_LINK (rates.c); 0: none */
    int net_wire_time;                     /* eccl_net_has_wire_time (rates.c) */
    /* Calls that returned ECCL_OK here and their bytes; what the master
     * was told of (COLL_STATS, rates.c); the next time to tell it; the
     * interval (ECCL_STATS_MS; 0: never). */
    uint64_t calls_ok, calls_bytes, calls_told, calls_bytes_told, stats_at_ns, stats_every_ns;
    struct comm_record *records; /* results handed over for tags not called yet */
    int returned_finished;      /* one of those finished: a call of its tag may start */
    /* Both ring buffers grow from COMM_RING_START entries as they fill
     * (ring_grow): a comm that finishes few ops holds a few hundred bytes,
     * not 24 KiB (a simulated 100k-rank run holds 100k comms). */
    struct comm_recent {
        uint64_t tag;
        uint8_t ok;
        uint8_t receiver; /* the receiving party of a point-to-point tag */
    } *recent;                             /* ring of cap_recent, up to COMM_RECENT */
    uint32_t n_recent, recent_head, cap_recent;
    uint64_t *aborted_tags;                /* ring of cap_aborted, up to COMM_ABORTED_TAGS */
    uint32_t n_aborted_tags, aborted_head, cap_aborted;
    eccl_bufpool pool;
    eccl_bufpool states; /* host memory: the ops' algorithm states (alg_state) */
};

static inline uint64_t now_ns(const eccl_comm *c) { return eccl_engine_now(&c->eng); }
static inline int link_is_sync(const p2p_link *l) { return l->purpose == ECCL_LINK_SYNC; }
static inline int link_is_probe(const p2p_link *l) { return l->purpose == ECCL_LINK_PROBE; }
static inline int op_have_full(const eccl_request *r) { return r->alg->have_full(op_state(r)); }

extern const eccl_chan_handler comm_link_handler;

/* comm.c: the engine, the master link, the public basics */
eccl_result comm_usable(const eccl_comm *c);
/* Mutex held: waits out a view change in progress (bounded by
 * op_timeout_ms), so world and rank are those of the next ring. */
void comm_wait_view(eccl_comm *c);
void comm_link_service(eccl_comm *c, p2p_link *l);
eccl_result comm_master_send(eccl_comm *c, const eccl_msg *m);
uint64_t comm_retry_at(eccl_comm *c, uint64_t *backoff);
void comm_ring_grow(void **buf, uint32_t *cap, uint32_t *head, uint32_t n, size_t elem, uint32_t max);

/* links.c: p2p links and the frames they carry */
void comm_early_free(eccl_comm *c, early_frame *e);
void comm_link_close(eccl_comm *c, p2p_link *l);
p2p_link *comm_link_connect_in(eccl_comm *c, p2p_link **list, const eccl_wire_peer_ref *ref,
                               uint32_t purpose, uint32_t epoch, uint32_t pool, uint32_t pool_size,
                               eccl_result *rc);
eccl_result comm_link_connect_next(eccl_comm *c);
void comm_link_connect_parent(eccl_comm *c);
p2p_link *comm_link_new(eccl_comm *c);
int comm_link_role(const eccl_comm *c, const p2p_link *l);
void comm_links_close_upto(eccl_comm *c, uint32_t epoch);
p2p_link *comm_pool_link_next(eccl_comm *c, uint32_t k);

/* ops.c: an op from start to finish, behind coll/algo.h */
void comm_fail(eccl_comm *c, eccl_result why);
void comm_flush_and_complete(eccl_comm *c);
int comm_op_expects_on(const eccl_comm *c, const eccl_request *r, const p2p_link *l, int role);
eccl_request *comm_op_find(eccl_comm *c, uint64_t tag);
/* A link an unfinished op still expects frames over (coll_trace.c's
 * "wait" lines). comm_op_waits fills out[0 .. max) and returns how many
 * there are (call with max 0 to count). */
typedef struct eccl_trace_wait {
    int role;
    uint32_t rank;
    uint64_t peer_id; /* 0: not known here */
} eccl_trace_wait;
uint32_t comm_op_waits(const eccl_comm *c, const eccl_request *r, eccl_trace_wait *out, uint32_t max);
void comm_op_finish(eccl_comm *c, eccl_request *r, eccl_result result);
eccl_result comm_op_recv(eccl_request *r, int role, const eccl_wire_data *d, void **dst);
eccl_result comm_op_recv_done(eccl_request *r, int role, const eccl_wire_data *d);
void comm_op_unlink(eccl_comm *c, eccl_request *r);
void comm_ops_advance(eccl_comm *c);
void comm_ops_fail_all(eccl_comm *c, eccl_result why);

/* coll_trace.c: the trace's records as calls and epochs go. */
enum comm_trace_phase { TRACE_STARTED, TRACE_FIRST, TRACE_DATA, TRACE_END };
void comm_trace_init(eccl_comm *c);
void comm_trace_post(eccl_comm *c, eccl_request *r, uint64_t now);
/* `now`: a clock reading the caller took anyway (0: the trace takes one if
 * it keeps the record). */
void comm_trace_phase(eccl_comm *c, const eccl_request *r, enum comm_trace_phase phase, uint64_t now);
void comm_trace_epoch(eccl_comm *c);
/* A dump if someone outside asked since the last look (eccl_trace_ops.asked). */
void comm_trace_poll(eccl_comm *c);
/* Writes a dump through the env (ECCL_ERR_UNSUPPORTED: it has nowhere). */
eccl_result comm_trace_dump(eccl_comm *c, const char *why, int automatic);

/* Calling late (late.c): the settings; a call that ended well; the
 * master's SLOW_NOTICE. */
void comm_late_init(eccl_comm *c);
void comm_late_note(eccl_comm *c, const eccl_request *r);
void comm_late_on_notice(eccl_comm *c, const eccl_msg_late *m);

/* Link rates (rates.c): a DATA frame's payload given a place, and in place;
 * the heartbeat's reports to the master; the master's SLOW_LINK. Frames of
 * COMM_RATE_MIN bytes or more are timed; a link reports once it carried
 * COMM_RATE_REPORT bytes more. */
#define COMM_RATE_MIN (64u << 10)
#define COMM_RATE_REPORT (1u << 20)
void comm_rate_begin(eccl_comm *c, p2p_link *l, const eccl_wire_data *d);
void comm_rate_done(eccl_comm *c, p2p_link *l, const eccl_wire_data *d);
void comm_rates_report(eccl_comm *c);
/* Calls' counts (rates.c): the settings; a call that ended well; what the
 * master was not told yet, sent now (on leaving). */
void comm_stats_init(eccl_comm *c);
void comm_stats_note(eccl_comm *c, const eccl_request *r);
void comm_stats_flush(eccl_comm *c);
/* Whether l's rate in counts (a link from another host that carried large
 * frames); the same with its counters brought up to date first. */
int comm_rate_counts(const eccl_comm *c, const p2p_link *l);
int comm_rate_measured(eccl_comm *c, p2p_link *l);
void comm_rates_on_notice(eccl_comm *c, const eccl_msg_link *m);
/* The p2p address of the peer at l's far end, where this rank knows it (a
 * ring neighbour, a peer of the address book), else NULL (peers.c). */
const char *comm_peer_addr_of(const eccl_comm *c, const p2p_link *l);
size_t comm_ops_pump(eccl_comm *c);
eccl_result comm_replay_early(eccl_comm *c, eccl_request *r, p2p_link *l);
p2p_link *comm_role_link_at(const eccl_comm *c, uint32_t i);
uint32_t comm_role_links_n(const eccl_comm *c);

/* view.c: ring epochs and the view change */
int comm_aborted_take(eccl_comm *c, uint64_t tag);
void comm_check_ring_ready(eccl_comm *c);
eccl_result comm_link_adopt(eccl_comm *c, p2p_link *l);
eccl_result comm_on_ring(eccl_comm *c, const eccl_msg_ring *m);
eccl_result comm_on_view_decide(eccl_comm *c, const eccl_msg_view *v);
eccl_result comm_on_view_query(eccl_comm *c, uint32_t epoch);
eccl_result comm_on_repair_ask(eccl_comm *c, const eccl_msg_repair *q);
/* The bytes of r's result a view change may hand between survivors (0:
 * none may be: not replicated, too big, not host memory). */
size_t comm_op_repair_bytes(const eccl_comm *c, const eccl_request *r);
/* The output bytes of a call whose result is the same on every rank
 * (all-reduce, all-gather(v), broadcast; 0 for other kinds). */
size_t comm_call_replicated_bytes(const eccl_coll_call *k);
/* Frees the ops that finished after their caller reaped them. */
void comm_ops_sweep(eccl_comm *c);
/* Frees a request unlinked from (or never on) c->ops. */
void comm_request_free(eccl_comm *c, eccl_request *r);
/* r's deadline passed: fail it here, or ask the master to settle it. */
void comm_op_timed_out(eccl_comm *c, eccl_request *r);
/* l, a link of this epoch, broke (not by our own doing). If an op runs
 * over it (one that returned early excepted: the caller has its result,
 * and its completion round is the master's to settle, as at its
 * timeout), or it held frames for an op not called yet, those frames are
 * gone and a redialled link cannot bring them back: the op would stall to
 * its timeout. One notice asks the master to re-form the ring now, which
 * settles every op in flight on every member (committed where the commit
 * rule allows, else aborted with buffers restored). */
void comm_ops_link_lost(eccl_comm *c, p2p_link *l);
/* Mutex held: lets the ops that returned early finish (bounded by the op
 * timeout), for calls that need no op in flight. */
void comm_ops_settle_returned(eccl_comm *c);
/* The caller sees r finished (it may have returned early). */
static inline int comm_op_user_done(const eccl_request *r) { return r->state == OP_DONE || r->returned; }
eccl_result comm_on_repair_put(eccl_comm *c, const eccl_msg_repair *p);
/* Ends r, which is starting, with the committed record of its tag if there
 * is one (1; the record is used up), else 0. */
int comm_record_take(eccl_comm *c, eccl_request *r);
void comm_records_free(eccl_comm *c);
eccl_result comm_pool_alloc(eccl_comm *c);

/* peers.c: the address book and peer links */
p2p_link *comm_peer_link(eccl_comm *c, uint32_t rank);
p2p_link *comm_peer_open(const eccl_comm *c, uint32_t rank);
eccl_result comm_peer_adopt(eccl_comm *c, p2p_link *l);
void comm_peer_link_lost(eccl_comm *c, p2p_link *l);
int comm_peer_role(const eccl_comm *c, const p2p_link *l);
/* The peer id of the epoch's `rank` where the address book has it, else 0. */
uint64_t comm_peer_id_of(const eccl_comm *c, uint32_t rank);
void comm_on_notice(eccl_comm *c, const eccl_msg_notice *m);
uint32_t comm_peer_slots(const eccl_comm *c);
p2p_link *comm_peer_slot_link(const eccl_comm *c, uint32_t i);
eccl_result comm_on_peer_reply(eccl_comm *c, const eccl_msg_peer_reply *m);
void comm_peers_flush_asks(eccl_comm *c);
void comm_peers_free(eccl_comm *c);
void comm_peers_reset(eccl_comm *c);
uint64_t comm_peers_timers(eccl_comm *c, uint64_t now);

/* shared_state.c: eccl_comm_sync_shared_state */
void comm_side_links_close(eccl_comm *c, uint32_t purpose);
void comm_sync_finish(eccl_comm *c, eccl_result result, uint64_t revision);
void comm_sync_link_lost(eccl_comm *c, p2p_link *l);
eccl_result comm_sync_on_data(eccl_comm *c, p2p_link *l, const eccl_wire_data *d, void **dst);
eccl_result comm_sync_on_data_done(eccl_comm *c, p2p_link *l, const eccl_wire_data *d);
eccl_result comm_sync_on_done(eccl_comm *c, const eccl_msg_sync_result *r);
eccl_result comm_sync_on_fetch(eccl_comm *c, p2p_link *l, const eccl_msg_sync_fetch *f);
eccl_result comm_sync_on_plan(eccl_comm *c, const eccl_msg_sync_plan *p);

/* topo_opt.c: eccl_comm_optimize_topology */
eccl_result comm_opt_on_done(eccl_comm *c, const eccl_msg_opt_done *d);
eccl_result comm_opt_on_probe(eccl_comm *c, const eccl_msg_opt_probe *p);
eccl_result comm_probe_on_data(eccl_comm *c, p2p_link *l, const eccl_wire_data *d, void **dst);
eccl_result comm_probe_on_data_done(eccl_comm *c, p2p_link *l, const eccl_wire_data *d);
void comm_probe_pump(eccl_comm *c);

#endif /* ECCL_CORE_COMM_COMM_INTERNAL_H */
