/* Wire format: every frame is a 16-byte header followed by `length` payload
 * bytes. All integers are little-endian. This module is the only place that
 * encodes or decodes bytes that cross a connection.
 *
 *   offset 0  u32 magic    ECCL_WIRE_MAGIC
 *          4  u16 version  ECCL_WIRE_VERSION
 *          6  u16 type     enum eccl_msg_type
 *          8  u32 length   payload bytes, bounded per type
 *         12  u32 reserved must be 0
 *
 * Decoders reject a bad magic, another version, an unknown type, a length over
 * the type's bound, a payload that is shorter or longer than its fields, a
 * string over its bound, and a list longer than its bound: all with
 * ECCL_ERR_PROTOCOL, never by reading past the buffer.
 */
#ifndef ECCL_CORE_PROTO_WIRE_H
#define ECCL_CORE_PROTO_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "eccl.h"
#include "env.h"
#include "quant/quant.h"

#define ECCL_WIRE_MAGIC 0x4C434345u /* "ECCL" read as little-endian bytes */
#define ECCL_WIRE_VERSION 8u /* 2: RING has four tree children; RING_SEG. 3: REGISTER_SEG. 4: TRACE_ASK.
                                5: LATE_REPORT, SLOW_NOTICE. 6: LINK_RATE, SLOW_LINK,
                                COLL_STATS. 7: NOTICE_POST, NOTICE. 8: repairs of up
                                to 64 KiB, control payloads of up to 128 KiB */
#define ECCL_WIRE_HEADER_SIZE 16u
/* Largest control payload (everything but DATA): a repair and its header
 * fit. */
#define ECCL_WIRE_MAX_CONTROL 131072u
/* Largest DATA payload: data header + one slice. */
#define ECCL_WIRE_MAX_DATA (ECCL_WIRE_DATA_HEADER_SIZE + (16u << 20))
/* Longest address string on the wire, without NUL. */
#define ECCL_WIRE_MAX_ADDR (ECCL_ADDR_MAX - 1)
/* Most entries in a VIEW_REPORT / VIEW_DECIDE list. */
#define ECCL_WIRE_MAX_OPS 4096u
/* Largest result a view change repairs (REPAIR_DATA / REPAIR_PUT): a
 * replicated output this small is handed to survivors that lack it, and
 * a call this small may return before its completion round
 * (ECCL_EARLY_RETURN_BYTES). 64 KiB: the DONE/COMMIT waves of a 64 KiB
 * broadcast at eight ranks on two cores cost as much as its data (79-127
 * us a call waiting for them, 54-84 returning early). */
#define ECCL_WIRE_MAX_REPAIR 65536u
/* Most children of a rank in the small collectives' tree: two in its run,
 * two runs' roots under a run's root (coll/tree_allreduce.h). */
#define ECCL_WIRE_TREE_CHILDREN 4u

enum eccl_msg_type {
    /* peer -> master */
    ECCL_MSG_REGISTER = 1,     /* join the run */
    ECCL_MSG_HEARTBEAT = 2,    /* either direction: I am alive */
    ECCL_MSG_PENDING_QUERY = 3,/* how many peers wait to be admitted? */
    ECCL_MSG_TOPO_VOTE = 4,    /* update_topology: admit the pending peers */
    ECCL_MSG_RING_READY = 5,   /* my links for this epoch are up */
    ECCL_MSG_COLL_DONE = 7,    /* collective `tag` failed here: `result` */
    ECCL_MSG_VIEW_REPORT = 8,  /* reply to VIEW_QUERY: my open ops */
    ECCL_MSG_SYNC_REQ = 9,     /* shared-state sync: my revision and keys */
    ECCL_MSG_SYNC_REPORT = 10, /* my part of sync call `seq` ended: `result` */
    ECCL_MSG_OPT_REQ = 11,     /* optimize_topology: measure, solve, rewire */
    ECCL_MSG_OPT_BW = 12,      /* what my probe of this round measured */
    ECCL_MSG_PEER_QUERY = 13,  /* the address book: who are these ranks? */
    ECCL_MSG_LEAVE = 14,       /* eccl_comm_leave: my ops are settled; we go
                                  once every member says so */
    ECCL_MSG_REPAIR_DATA = 15, /* answer to REPAIR_ASK: the result of `tag` */
    ECCL_MSG_LATE_REPORT = 16, /* I call late: my calls start a median `late_us`
                                  after my partners' first frames (0: no longer) */
    ECCL_MSG_LINK_RATE = 17,   /* my link from peer `from` moved `bytes` in `ns` */
    ECCL_MSG_COLL_STATS = 18,  /* since my last: `calls` collectives returned OK here, of `bytes` */
    ECCL_MSG_NOTICE_POST = 19, /* eccl_comm_notify: tell my group `word` (and re-form it) */
    /* master -> peer */
    ECCL_MSG_WELCOME = 32,     /* your peer id; accepted at once or pending */
    ECCL_MSG_PENDING_REPLY = 33,
    ECCL_MSG_RING = 34,        /* your ring neighbours for a new epoch */
    ECCL_MSG_TOPO_DONE = 35,   /* every member's links for `epoch` are up */
    ECCL_MSG_VIEW_QUERY = 36,  /* membership changed: freeze and report ops */
    ECCL_MSG_VIEW_DECIDE = 37, /* commit or abort each reported op */
    ECCL_MSG_KICK = 38,        /* you are removed; `reason` is an eccl_result */
    ECCL_MSG_SYNC_PLAN = 39,   /* the election: up to date, or what to fetch */
    ECCL_MSG_SYNC_DONE = 40,   /* the sync round closed: `result` */
    ECCL_MSG_OPT_PROBE = 41,   /* optimize round: measure your link to `target` */
    ECCL_MSG_OPT_DONE = 42,    /* optimize call `seq` ended: `result`, new ring */
    ECCL_MSG_PEER_REPLY = 43,  /* the address book: these ranks are these peers */
    ECCL_MSG_LEAVE_DONE = 44,  /* every member sent LEAVE (`result` OK): go;
                                  or why the group cannot leave together */
    ECCL_MSG_REPAIR_ASK = 45,  /* view change: send me your result of `tag` */
    ECCL_MSG_REPAIR_PUT = 46,  /* view change: `tag` commits with these bytes */
    ECCL_MSG_RING_SEG = 47,    /* to a relay: its peers' RINGs, for it to expand */
    ECCL_MSG_TRACE_ASK = 48,   /* `tag` failed at a member (`result`): write your trace */
    ECCL_MSG_SLOW_NOTICE = 49, /* member `peer_id` of your group calls late (0: none) */
    ECCL_MSG_SLOW_LINK = 50,   /* the link `from` -> `to` of your group is slow
                                  (`bytes` in `ns`); from 0: none is */
    ECCL_MSG_NOTICE = 51,      /* member `from` of your group posted `word` in `epoch` */
    /* peer -> peer */
    ECCL_MSG_P2P_HELLO = 64,   /* first frame on a p2p connection */
    ECCL_MSG_DATA = 65,        /* collective payload: data header + bytes */
    ECCL_MSG_SYNC_FETCH = 66,  /* on a SYNC link: send me this key */
    /* relay <-> its parent coordinator (docs/protocol.md, "Relays") */
    ECCL_MSG_RELAY_HELLO = 80, /* relay -> parent, first frame: I speak for others */
    ECCL_MSG_BATCH = 81,       /* either way: frames of the peers behind a relay */
    ECCL_MSG_REGISTER_SEG = 82 /* relay -> parent, in a batch: its newcomers' REGISTERs */
};

/* Largest BATCH payload: a relay flushes before it would pass this. */
#define ECCL_WIRE_MAX_BATCH (1u << 20)

typedef struct eccl_wire_header {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint32_t length;
    uint32_t reserved;
} eccl_wire_header;

typedef struct eccl_msg_register {
    uint32_t peer_group;
    uint32_t peer_timeout_ms;     /* drop me after this much silence */
    char p2p_addr[ECCL_ADDR_MAX]; /* where this peer accepts p2p links */
} eccl_msg_register;

typedef struct eccl_msg_welcome {
    uint64_t peer_id;
    uint32_t accepted; /* 1: first peer, accepted at once; 0: pending vote */
} eccl_msg_welcome;

typedef struct eccl_msg_pending_reply {
    uint32_t pending;
} eccl_msg_pending_reply;

typedef struct eccl_wire_peer_ref {
    uint64_t peer_id;
    char addr[ECCL_ADDR_MAX];
} eccl_wire_peer_ref;

typedef struct eccl_msg_ring {
    uint32_t peer_group;
    uint32_t epoch;
    uint32_t world_size;
    uint32_t rank;
    eccl_wire_peer_ref next; /* we connect to it */
    eccl_wire_peer_ref prev; /* it connects to us */
    /* Small collectives run over a tree in rank order
     * (coll/tree_allreduce.h): we connect to the parent when we first need
     * it; the children connect to us. Children first, 0 past the last;
     * unused for rank 0 / for leaves. */
    eccl_wire_peer_ref tree_parent;
    uint64_t tree_child[ECCL_WIRE_TREE_CHILDREN];
    /* Ranks per host when the world is host-regular (ranks of a host
     * contiguous in rank order, every host the same number L >= 2 of them,
     * two hosts or more; a host is the HOST of a peer's p2p address), 0
     * otherwise: the hierarchical all-reduce runs only where it is >= 2
     * (coll/hier_allreduce.h). */
    uint32_t local_size;
    /* Members sharing this rank's host, itself included (1..world_size;
     * 0: not told): a host with over four times as many ranks as CPUs does not spin
     * (sched/engine.h, eccl_engine_set_host_ranks). */
    uint32_t host_ranks;
} eccl_msg_ring;

/* RING_SEG: the RINGs of a run of consecutive ranks behind one relay,
 * which the relay expands (docs/protocol.md, "Rings through relays"): rank
 * first_rank + i is the peer of the relay's handle handles[i]. The relay
 * knows its peers' ids and addresses (their WELCOMEs and REGISTERs passed
 * it), so neighbours and tree edges inside the run are its to fill in; the
 * master sends what lies outside: the rank before the run and the one
 * after it, and the run's tree root's parent and children among the other
 * runs' roots (coll/tree_allreduce.h). A master's entries per ring are thus
 * one per run, not one per rank. Handles: `handles` to encode, `packed`
 * once decoded (eccl_wire_ring_seg_handle). */
#define ECCL_WIRE_MAX_SEG 4096u
typedef struct eccl_msg_ring_seg {
    uint32_t peer_group;
    uint32_t epoch;
    uint32_t world_size;
    uint32_t first_rank;
    uint32_t local_size;
    uint32_t host_ranks;           /* every rank of the run's */
    eccl_wire_peer_ref prev, next; /* of the run's first and last rank */
    eccl_wire_peer_ref root_parent; /* peer_id 0: the run's root is rank 0 */
    uint64_t root_child[2];        /* other runs' roots under ours; 0: none */
    uint32_t n;
    const uint32_t *handles; /* encode */
    const uint8_t *packed;   /* decoded: n u32 */
} eccl_msg_ring_seg;

typedef struct eccl_msg_epoch { /* RING_READY, TOPO_DONE, VIEW_QUERY */
    uint32_t epoch;
} eccl_msg_epoch;

typedef struct eccl_msg_coll {  /* COLL_DONE */
    uint64_t tag;
    uint32_t epoch;
    uint64_t count;
    uint8_t dtype;
    uint8_t op;
    uint32_t result;            /* an eccl_result */
} eccl_msg_coll;

typedef struct eccl_msg_trace_ask { /* TRACE_ASK */
    uint64_t tag;
    uint32_t epoch;
    uint32_t result; /* an eccl_result */
} eccl_msg_trace_ask;

typedef struct eccl_msg_late { /* LATE_REPORT (peer_id 0), SLOW_NOTICE */
    uint64_t peer_id;
    uint32_t late_us; /* the median lateness; 0: not late (any more) */
    uint32_t calls;   /* LATE_REPORT: the calls it is a median over */
} eccl_msg_late;

typedef struct eccl_msg_notice { /* NOTICE_POST (from 0), NOTICE */
    uint64_t word;
    uint64_t from;   /* NOTICE: the poster's peer id */
    uint32_t epoch;  /* the poster's ring epoch; NOTICE: the group's */
    uint32_t reform; /* 1: the group's ring re-forms after it (its calls in flight settle) */
} eccl_msg_notice;

typedef struct eccl_msg_stats { /* COLL_STATS */
    uint64_t calls, bytes;
} eccl_msg_stats;

typedef struct eccl_msg_link { /* LINK_RATE (to 0: the sender), SLOW_LINK */
    uint64_t from, to;  /* peer ids: the link's sending and receiving ends */
    uint64_t bytes, ns; /* payload received, and the time it took */
} eccl_msg_link;

typedef struct eccl_wire_op_flag {
    uint64_t tag;
    uint8_t flag; /* VIEW_REPORT: ECCL_VIEW_* below; VIEW_DECIDE: 1 = commit,
                     0 = abort */
} eccl_wire_op_flag;
#define ECCL_VIEW_HELD 1u     /* I hold the full result */
#define ECCL_VIEW_RECEIVER 2u /* I receive this point-to-point tag */
/* A replicated output (every rank ends with the same bytes) that I lack and
 * can take from another survivor (REPAIR_PUT). */
#define ECCL_VIEW_REPAIRABLE 4u
/* I hold it and can send its bytes (REPAIR_ASK): at most
 * ECCL_WIRE_MAX_REPAIR, in host memory. */
#define ECCL_VIEW_SOURCE 8u

/* VIEW_REPORT, VIEW_DECIDE. The entry list is never held inline (up to
 * ECCL_WIRE_MAX_OPS entries would make every eccl_msg 64 KiB, and core keeps
 * messages on the stacks of simulated actors). Read entries with
 * eccl_wire_view_op, which works for either kind of view:
 *   - to encode, point `ops` at the caller's n_ops entries (packed NULL);
 *   - a decoded view has ops NULL and `packed` pointing at the validated
 *     entries inside the payload it was decoded from: it BORROWS that buffer
 *     and is valid only while the buffer lives and is unchanged. Copy the
 *     entries out to keep them. */
typedef struct eccl_msg_view {
    uint32_t epoch;
    uint32_t n_ops;
    const eccl_wire_op_flag *ops; /* encode: caller's entries, or NULL */
    const uint8_t *packed;        /* decoded: n_ops 9-byte wire entries */
} eccl_msg_view;

typedef struct eccl_msg_kick {
    uint32_t reason;
} eccl_msg_kick;

/* REPAIR_ASK (len 0), REPAIR_DATA, REPAIR_PUT: a replicated result during
 * the view change of `epoch` (docs/protocol.md, "The commit rule"). A
 * decoded one BORROWS its bytes from the payload, as a view does. */
typedef struct eccl_msg_repair {
    uint32_t epoch;
    uint64_t tag;
    uint32_t len;
    const uint8_t *bytes;
} eccl_msg_repair;

typedef struct eccl_msg_leave_done {
    uint32_t result; /* an eccl_result */
} eccl_msg_leave_done;

enum eccl_link_purpose {
    ECCL_LINK_RING = 0, /* to the ring's next rank */
    ECCL_LINK_TREE = 1, /* to the tree parent */
    ECCL_LINK_SYNC = 2, /* a shared-state fetcher to a holder */
    ECCL_LINK_PROBE = 3, /* a bandwidth probe (optimize_topology) */
    ECCL_LINK_PEER = 4,  /* to any rank of the epoch, keyed by rank (coll/algo.h) */
    ECCL_LINK_LAST = ECCL_LINK_PEER
};

/* Most ring connections per neighbour (eccl_comm_params.p2p_pool_size). */
#define ECCL_WIRE_MAX_POOL 64u
/* In a hello's purpose word on the wire: pool fields follow. */
#define ECCL_WIRE_HELLO_POOL 0x10000u

typedef struct eccl_msg_p2p_hello {
    uint64_t peer_id;
    uint32_t peer_group;
    uint32_t epoch;
    uint32_t purpose; /* enum eccl_link_purpose: two peers may share both */
    /* A pool of ring connections to one neighbour (purpose RING only):
     * this is connection `pool` of the sender's `pool_size`. Both travel
     * only when pool_size > 1, flagged by ECCL_WIRE_HELLO_POOL in the
     * purpose word, as 8 more bytes (28 in all): a pool of one sends the
     * 20-byte hello it always did, and no prefix of a pooled hello is a
     * valid hello. Encode: pool_size 0 or 1 means no pool (pool must be
     * 0). Decode: no flag gives pool 0, pool_size 1; with the flag,
     * 2 <= pool_size <= ECCL_WIRE_MAX_POOL, pool < pool_size, purpose
     * RING. `purpose` never holds the flag in a message. */
    uint32_t pool;
    uint32_t pool_size;
    /* Purpose PEER only, and always there (24 bytes in all): the sender's
     * rank in `epoch`, so the acceptor knows the link without asking. */
    uint32_t rank;
} eccl_msg_p2p_hello;

/* A DATA frame's payload starts with this 32-byte header; `len` bytes of
 * tensor data follow, so the frame length is exactly 32 + len. */
#define ECCL_WIRE_DATA_HEADER_SIZE 32u
typedef struct eccl_wire_data {
    uint64_t tag;
    uint32_t epoch;
    uint8_t ring;     /* 0: forward ring, 1: reverse ring */
    uint8_t phase;    /* enum eccl_data_phase */
    uint16_t step;
    uint64_t offset;  /* byte offset into the collective's buffer */
    uint32_t len;     /* bytes that follow */
    uint32_t flags;   /* ECCL_WIRE_DATA_*; unknown bits are rejected */
} eccl_wire_data;

/* The payload is a quantised slice, not raw values: a 24-byte
 * eccl_quant_meta record (core/quant/quant.h: its fixed little-endian
 * encoding) followed by meta.count uint8 codes, so len = 24 + count, while
 * `offset` still names the slice's position in the value buffer. Only
 * reduce-scatter and all-gather frames may carry it (the all-reduce's
 * phases, and the ring pass's SCATTER). */
#define ECCL_WIRE_DATA_QUANT 1u
/* The payload does not follow in the stream: it travels as the conn's next
 * bulk message (eccl_net_ops.isend), so the frame is the 32-byte header
 * alone while `len` still says how many payload bytes there are. Set and
 * consumed by the channel (core/proto/chan.c); collectives never see it. */
#define ECCL_WIRE_DATA_BULK 2u
#define ECCL_WIRE_DATA_FLAGS_KNOWN (ECCL_WIRE_DATA_QUANT | ECCL_WIRE_DATA_BULK)

enum eccl_data_phase {
    ECCL_PHASE_REDUCE_SCATTER = 0,
    ECCL_PHASE_ALL_GATHER = 1,
    ECCL_PHASE_DONE = 2,      /* completion token; len 0 */
    ECCL_PHASE_EXCHANGE = 3,  /* two peers swap whole small buffers */
    /* the tree all-reduce's four waves (coll/tree_allreduce.h) */
    ECCL_PHASE_TREE_UP = 4,     /* a subtree's partial, to the parent */
    ECCL_PHASE_TREE_DOWN = 5,   /* the result, to the children */
    ECCL_PHASE_TREE_DONE = 6,   /* my subtree holds it; len 0 */
    ECCL_PHASE_TREE_COMMIT = 7, /* every rank holds it; len 0 */
    /* shared state: bytes [offset, offset + len) of the tensor a SYNC_FETCH
     * asked for; tag = the fetch's id, epoch = the sync round */
    ECCL_PHASE_SYNC = 8,
    /* bandwidth probe: filler bytes (offset and contents mean nothing);
     * step 1 marks the sender's last frame, answered by an empty frame back;
     * tag = the optimize call, epoch = its probe round */
    ECCL_PHASE_PROBE = 9,
    /* the ring pass (coll/ring_pass.h): a slice of the collective's
     * blocks; each collective has its own phase, so peers that called
     * different collectives with one tag break the op rather than mix */
    ECCL_PHASE_GATHER = 10,       /* all-gather */
    ECCL_PHASE_SCATTER = 11,      /* reduce-scatter: a partial */
    ECCL_PHASE_BCAST = 12,        /* broadcast chain */
    ECCL_PHASE_CHAIN_REDUCE = 13, /* reduce chain: a partial */
    /* all-to-all (coll/alltoall.h), on peer links: step 0 a slice of the
     * sender's block for us (offset: within it), step 1 its done token */
    ECCL_PHASE_A2A = 14,
    /* send / receive (coll/p2p.h), on peer links: step 0 a slice, 1 the
     * last slice, 2 the receiver's ACK */
    ECCL_PHASE_P2P = 15,
    /* the binomial tree over peer links (coll/binomial.h): slices down
     * (broadcast) or partials up (reduce); its tokens are empty and carry
     * the collective in `step` */
    ECCL_PHASE_BINO_BCAST = 16,   /* broadcast: a slice, to a child */
    ECCL_PHASE_BINO_REDUCE = 17,  /* reduce: a subtree's partial, to the parent */
    ECCL_PHASE_BINO_DONE = 18,    /* broadcast: my subtree holds it; len 0 */
    ECCL_PHASE_BINO_COMMIT = 19,  /* every rank holds its output; len 0 */
    /* the recursive all-reduce (coll/rec_allreduce.h): step = the step's
     * number (FOLD 0, the core's steps from 1, RESULT last), offset = the
     * slice's byte offset in the buffer */
    ECCL_PHASE_REC_FOLD = 20,   /* an extra rank's input, to its core rank */
    ECCL_PHASE_REC_DOUBLE = 21, /* recursive doubling: a whole partial */
    ECCL_PHASE_REC_HALVE = 22,  /* recursive halving: a half's partial */
    ECCL_PHASE_REC_GATHER = 23, /* doubling back: reduced blocks */
    ECCL_PHASE_REC_RESULT = 24, /* the result, to an extra rank */
    ECCL_PHASE_REC_DONE = 25,   /* barrier token of round `step`; len 0 */
    /* Bruck's all-gather (coll/bruck.h): step = the round, offset = the
     * slice's byte offset in recvbuf's layout */
    ECCL_PHASE_BRUCK = 26,      /* blocks, to rank - 2^step */
    ECCL_PHASE_BRUCK_DONE = 27, /* barrier token of round `step`; len 0 */
    /* reduce-scatter by recursive halving (coll/rec_reduce_scatter.h):
     * step = the step's number (FOLD 0, HALVE k at k + 1, RESULT last),
     * offset = the slice's byte offset in the compact layout of what the
     * step sends (FOLD: the input; HALVE: the half's two runs; RESULT: the
     * block) */
    ECCL_PHASE_RECRS_FOLD = 28,   /* an extra rank's input, to its core rank */
    ECCL_PHASE_RECRS_HALVE = 29,  /* a half's partial */
    ECCL_PHASE_RECRS_RESULT = 30, /* the extra rank's block, to it */
    ECCL_PHASE_RECRS_DONE = 31,   /* barrier token of round `step`; len 0 */
    /* the hierarchical all-reduce (coll/hier_allreduce.h): offset = the
     * slice's byte offset in the buffer */
    ECCL_PHASE_HIER_RS = 32,    /* a shard of an input, to its local owner; step = distance */
    ECCL_PHASE_HIER_INTER = 33, /* the sub-ring over hosts; step = its step (RS, then AG) */
    ECCL_PHASE_HIER_AG = 34,    /* a final shard, to a local rank; step = distance */
    ECCL_PHASE_HIER_DONE = 35,  /* barrier token of round `step`; len 0 */
    /* the all-gather by recursive doubling (coll/rec_allgather.h): step =
     * the step's number (FOLD 0, DOUBLE k at k + 1, RESULT last), offset =
     * the byte offset in recvbuf of the range's first piece plus the
     * slice's place in its pieces laid back to back */
    ECCL_PHASE_RECAG_FOLD = 36,   /* an extra rank's block, to its core rank */
    ECCL_PHASE_RECAG_DOUBLE = 37, /* a group's blocks, to the partner */
    ECCL_PHASE_RECAG_RESULT = 38, /* every other block, to an extra rank */
    ECCL_PHASE_RECAG_DONE = 39,   /* barrier token of round `step`; len 0 */
    ECCL_PHASE_LAST = ECCL_PHASE_RECAG_DONE
};

/* ---- shared state (state/sync.h has the protocol) ----
 * Keys are strings of 1..ECCL_WIRE_MAX_KEY bytes without NUL. Every list is
 * bounded so that every sync message fits one control frame (64 KiB). */
#define ECCL_WIRE_MAX_KEY ECCL_WIRE_MAX_ADDR
#define ECCL_WIRE_MAX_SYNC_KEYS 512u /* voted tensors per sync call */
#define ECCL_WIRE_MAX_SYNC_SRCS 128u /* holders one fetcher is sent to */

typedef struct eccl_wire_sync_key {
    char key[ECCL_ADDR_MAX]; /* NUL-terminated */
    uint64_t bytes;
    uint64_t hash;
    uint8_t dtype;           /* an eccl_dtype */
} eccl_wire_sync_key;

/* SYNC_REQ. Keys are sorted by key (strcmp order) and unique: the decoder
 * rejects anything else, so equal sets have equal encodings. Like a view,
 * the list is borrowed: `keys` to encode, `packed` once decoded (valid
 * while the payload is); read entries in order with eccl_wire_sync_req_next. */
typedef struct eccl_msg_sync_req {
    uint32_t seq;        /* the peer's call counter, echoed in PLAN / DONE */
    uint64_t revision;
    uint8_t strategy;    /* an eccl_sync_strategy */
    uint8_t hash_type;   /* an eccl_hash_type */
    uint32_t n_keys;
    const eccl_wire_sync_key *keys; /* encode */
    const uint8_t *packed;          /* decoded */
    uint32_t packed_len;
} eccl_msg_sync_req;

/* One fetch of a SYNC_PLAN: key `key` (an index into the receiver's own
 * SYNC_REQ list) from source `src` (an index into the plan's sources); the
 * bytes must hash to `hash`. */
typedef struct eccl_wire_sync_fetch {
    uint32_t key;
    uint32_t src;
    uint64_t hash;
} eccl_wire_sync_fetch;

/* SYNC_PLAN. result != OK: this peer's call fails with it (no lists). Lists
 * borrowed as above: fetches are fixed-size (eccl_wire_sync_plan_fetch),
 * sources follow them (eccl_wire_sync_plan_src). */
typedef struct eccl_msg_sync_plan {
    uint32_t seq;
    uint32_t result;     /* an eccl_result */
    uint32_t round;      /* the master's round id: tags the p2p traffic */
    uint64_t revision;   /* the elected revision */
    uint32_t n_fetch, n_src;
    const eccl_wire_sync_fetch *fetch;  /* encode */
    const eccl_wire_peer_ref *src;      /* encode */
    const uint8_t *packed;              /* decoded: fetches, then sources */
} eccl_msg_sync_plan;

typedef struct eccl_msg_sync_result { /* SYNC_REPORT, SYNC_DONE */
    uint32_t seq;
    uint32_t result;     /* an eccl_result */
    uint64_t revision;   /* DONE: the elected revision; REPORT: 0 */
} eccl_msg_sync_result;

typedef struct eccl_msg_sync_fetch { /* SYNC_FETCH */
    uint32_t round;
    uint32_t id;         /* the fetcher's id for the key: DATA tag */
    uint64_t bytes;      /* the tensor's size as the fetcher has it */
    char key[ECCL_ADDR_MAX];
} eccl_msg_sync_fetch;

/* ---- topology optimisation (protocol in docs/protocol.md) ---- */
typedef struct eccl_msg_opt_req { /* OPT_REQ */
    uint32_t seq;         /* the peer's call counter, echoed in PROBE / DONE */
    uint32_t probe_ms;    /* how long one probe sends */
    uint32_t probe_conns; /* connections one probe sends over */
    uint32_t max_rounds;  /* probe rounds this call (0: every unmeasured pair) */
} eccl_msg_opt_req;

typedef struct eccl_msg_opt_probe { /* OPT_PROBE */
    uint32_t seq, round;
    uint32_t probe_ms, probe_conns;
    eccl_wire_peer_ref target; /* peer_id 0: nothing to send this round */
} eccl_msg_opt_probe;

typedef struct eccl_msg_opt_bw { /* OPT_BW */
    uint32_t seq, round;
    uint32_t result;      /* not OK: I leave the call with this error
                             (a timeout); the round ends for everyone */
    uint64_t target;
    uint64_t bytes;       /* acknowledged by the target; 0: probe failed */
    uint64_t ns;          /* from the first byte sent to the last ack */
} eccl_msg_opt_bw;

typedef struct eccl_msg_opt_done { /* OPT_DONE */
    uint32_t seq;
    uint32_t result;      /* an eccl_result */
    uint32_t epoch;       /* the ring the call ends on */
    uint8_t changed;      /* the ring order changed */
    uint8_t exact;        /* the order is proven optimal for the measurements */
    uint8_t moonshot;     /* the background search's order was adopted */
    uint32_t pairs;       /* links measured by this call, group-wide */
    uint32_t unmeasured;  /* links of the new ring never measured */
    uint64_t old_bps;     /* slowest measured link of the old / new ring */
    uint64_t new_bps;
} eccl_msg_opt_done;

/* ---- the address book (docs/protocol.md, "Peer links") ----
 * A rank learns the address of another rank of its epoch only when an
 * algorithm first needs a link to it: PEER_QUERY names up to
 * ECCL_WIRE_MAX_PEER_REFS ranks, PEER_REPLY answers them (relays pass both
 * in their batches like any control frame). Lists are borrowed, as in a
 * view: `ranks` / `entries` to encode, `packed` once decoded. Ranks in a
 * query are strictly increasing, so a repeat cannot inflate a reply. */
#define ECCL_WIRE_MAX_PEER_REFS 256u

typedef struct eccl_wire_peer_entry {
    uint32_t rank;
    eccl_wire_peer_ref ref;
} eccl_wire_peer_entry;

typedef struct eccl_msg_peer_query { /* PEER_QUERY */
    uint32_t epoch;
    uint32_t n;
    const uint32_t *ranks;   /* encode */
    const uint8_t *packed;   /* decoded: n u32 */
} eccl_msg_peer_query;

typedef struct eccl_msg_peer_reply { /* PEER_REPLY */
    uint32_t epoch;
    uint32_t n;
    const eccl_wire_peer_entry *entries; /* encode */
    const uint8_t *packed;               /* decoded */
    uint32_t packed_len;
} eccl_msg_peer_reply;

/* REGISTER_SEG: the REGISTERs of n (1..ECCL_WIRE_MAX_SEG) newcomers behind
 * a relay with one group and timeout, as one batch entry for its first
 * handle: handle + i registers with address i (docs/protocol.md,
 * "Registrations by the relay"). A relay's registration burst is thus an
 * entry per batch at its parent, not one per peer. Addresses: `addrs` to encode, `packed` once decoded
 * (eccl_wire_register_seg_next). Never sent outside a batch. Its payload
 * bound: as many of the longest addresses as 64 KiB takes (the control
 * bound until repairs grew past it: relays batch as they did, and the
 * bootstrap's message counts stay what the scale runs measured). */
#define ECCL_WIRE_REGISTER_SEG_BOUND 65536u
#define ECCL_WIRE_REGISTER_SEG_MAX \
    (12u + (ECCL_WIRE_REGISTER_SEG_BOUND - 12u) / (2u + ECCL_WIRE_MAX_ADDR) * (2u + ECCL_WIRE_MAX_ADDR))
typedef struct eccl_msg_register_seg {
    uint32_t peer_group;
    uint32_t peer_timeout_ms;
    uint32_t n;
    const char *const *addrs; /* encode: n NUL-terminated addresses */
    const uint8_t *packed;    /* decoded */
    uint32_t packed_len;
} eccl_msg_register_seg;

typedef struct eccl_msg_relay_hello { /* RELAY_HELLO */
    uint32_t timeout_ms;  /* silence after which the parent drops the relay */
} eccl_msg_relay_hello;

/* BATCH: `n` entries, each a u32 handle (the relay's name for one peer
 * behind it), a u32 length and that many bytes of one whole control frame
 * (any type but DATA, RELAY_HELLO and BATCH). A length of 0 is no frame: the
 * peer is gone (upward) or is to be disconnected (downward). A *span* entry
 * carries one frame for several peers: its handle word is the first handle
 * | ECCL_WIRE_BATCH_SPAN, then the length, then a u32 count (2 or more,
 * the last handle within ECCL_WIRE_BATCH_MAX_HANDLE), then the frame (never
 * a gone entry): the frame as if sent to handles first .. first+count-1,
 * in that order. Identical decisions for the peers behind one relay (a
 * vote's answer, TOPO_DONE, a view query) thus travel once per relay, and
 * the relay expands them. Decoding checks every entry's bounds and frame
 * header; the frames' payloads are decoded when delivered. Decoded,
 * `packed` borrows the frame. */
#define ECCL_WIRE_BATCH_SPAN 0x80000000u
#define ECCL_WIRE_BATCH_MAX_HANDLE 0x7FFFFFFFu
/* In a span's count: a *stepping* span, WELCOMEs only: handle first + i
 * gets the frame with peer id + i. The master hands the newcomers of one
 * relay batch consecutive ids, so their WELCOMEs travel as one entry per
 * relay too (docs/protocol.md, "Relays"). Upward (a relay to its parent)
 * a stepping span is a protocol error. */
#define ECCL_WIRE_BATCH_STEP 0x80000000u
typedef struct eccl_msg_batch {
    uint32_t n;
    uint32_t len;          /* bytes at `packed` */
    const uint8_t *packed;
} eccl_msg_batch;

/* A batch being built: one frame in `buf` (owned), header written by
 * eccl_wire_batch_take. */
typedef struct eccl_wire_batch {
    uint8_t *buf;
    size_t len, cap;
    uint32_t n;
    size_t last; /* offset of the last entry, which the next may fold into */
    int folded;  /* the last add folded into the entry before (no new entry) */
} eccl_wire_batch;

/* Every decoded control message. */
typedef struct eccl_msg {
    uint16_t type;
    union {
        eccl_msg_register reg;
        eccl_msg_welcome welcome;
        eccl_msg_pending_reply pending;
        eccl_msg_ring ring;
        eccl_msg_ring_seg ring_seg;
        eccl_msg_epoch epoch;
        eccl_msg_coll coll;
        eccl_msg_trace_ask trace_ask;
        eccl_msg_late late;
        eccl_msg_notice notice;
        eccl_msg_link link;
        eccl_msg_stats stats;
        eccl_msg_view view;
        eccl_msg_kick kick;
        eccl_msg_repair repair;
        eccl_msg_leave_done leave_done;
        eccl_msg_p2p_hello hello;
        eccl_msg_sync_req sync_req;
        eccl_msg_sync_plan sync_plan;
        eccl_msg_sync_result sync_result;
        eccl_msg_sync_fetch sync_fetch;
        eccl_msg_opt_req opt_req;
        eccl_msg_opt_probe opt_probe;
        eccl_msg_opt_bw opt_bw;
        eccl_msg_opt_done opt_done;
        eccl_msg_relay_hello relay_hello;
        eccl_msg_batch batch;
        eccl_msg_peer_query peer_query;
        eccl_msg_peer_reply peer_reply;
        eccl_msg_register_seg register_seg;
    } u;
} eccl_msg;

/* Whether in[0..4) is a frame header's magic (whatever its version). */
int eccl_wire_is_frame_start(const uint8_t *in);
/* Writes a header into out[ECCL_WIRE_HEADER_SIZE]. */
void eccl_wire_header_encode(uint16_t type, uint32_t length, uint8_t *out);
/* Parses and validates in[ECCL_WIRE_HEADER_SIZE]: magic, version, known type,
 * reserved == 0, length within the type's bound. */
eccl_result eccl_wire_header_decode(const uint8_t *in, eccl_wire_header *out);
/* The largest payload a frame of this type may carry; 0 for unknown types. */
uint32_t eccl_wire_max_length(uint16_t type);

/* Encodes a whole frame (header + payload) for a control message into
 * out[cap]. Returns the frame size, or 0 if it does not fit or the message is
 * invalid (unknown type, string or list over bound, DATA, a view with entries
 * but not exactly one of `ops` / `packed` set). */
size_t eccl_wire_encode(const eccl_msg *msg, uint8_t *out, size_t cap);
/* Decodes the payload of a control frame whose header was already decoded.
 * A decoded VIEW_* message borrows `payload` (see eccl_msg_view): keep it
 * alive and unchanged while the message is read. On failure *out holds no
 * pointer into `payload`. */
eccl_result eccl_wire_decode(uint16_t type, const uint8_t *payload,
                             uint32_t length, eccl_msg *out);
/* Entry i (< v->n_ops) of a view, decoded or built for encoding. */
eccl_wire_op_flag eccl_wire_view_op(const eccl_msg_view *v, uint32_t i);

/* Reads the next key of a SYNC_REQ (encoded or decoded); *pos starts at 0.
 * Returns 0 past the end. */
int eccl_wire_sync_req_next(const eccl_msg_sync_req *m, uint32_t *pos, uint32_t *i,
                            eccl_wire_sync_key *out);
/* Fetch i (< n_fetch) and source i (< n_src) of a SYNC_PLAN. */
eccl_wire_sync_fetch eccl_wire_sync_plan_fetch(const eccl_msg_sync_plan *m, uint32_t i);
void eccl_wire_sync_plan_src(const eccl_msg_sync_plan *m, uint32_t i, eccl_wire_peer_ref *out);

/* Rank i (< n) of a PEER_QUERY, encoded or decoded. */
uint32_t eccl_wire_peer_query_rank(const eccl_msg_peer_query *m, uint32_t i);
/* The handle of a RING_SEG's i-th rank (i < n), encoded or decoded. */
uint32_t eccl_wire_ring_seg_handle(const eccl_msg_ring_seg *m, uint32_t i);
/* Reads the next newcomer of a REGISTER_SEG (encoded or decoded) into
 * out[ECCL_ADDR_MAX]; *pos and *i start at 0. Returns 0 past the end. */
int eccl_wire_register_seg_next(const eccl_msg_register_seg *m, uint32_t *pos, uint32_t *i,
                                char *out);
/* Reads the next entry of a PEER_REPLY (encoded or decoded); *pos and *i
 * start at 0. Returns 0 past the end. */
int eccl_wire_peer_reply_next(const eccl_msg_peer_reply *m, uint32_t *pos, uint32_t *i,
                              eccl_wire_peer_entry *out);

/* Reads the next entry of a decoded BATCH; *pos starts at 0. Returns 0
 * past the end. The entry is for handles *handle .. *handle + *count - 1
 * (*count 1 for a plain entry). *frame_len 0: a "gone" entry (*frame NULL,
 * *count 1). */
int eccl_wire_batch_next(const eccl_msg_batch *b, uint32_t *pos, uint32_t *handle,
                         uint32_t *count, const uint8_t **frame, uint32_t *frame_len);
/* As eccl_wire_batch_next, and stepping spans too (*step 1: handle
 * *handle + i gets eccl_wire_batch_step_frame(frame, i)); eccl_wire_batch_next
 * stops at one (returns 0) as at a malformed entry. */
int eccl_wire_batch_next_step(const eccl_msg_batch *b, uint32_t *pos, uint32_t *handle,
                              uint32_t *count, int *step, const uint8_t **frame,
                              uint32_t *frame_len);
/* An entry's frame (as the walks above give it, its header checked): its
 * type, and the whole message decoded (payload checks as eccl_wire_decode). */
uint16_t eccl_wire_entry_type(const uint8_t *frame);
eccl_result eccl_wire_decode_entry(const uint8_t *frame, uint32_t len, eccl_msg *out);
/* Writes into out[len] the frame of a stepping span's i-th handle (its
 * WELCOME with peer id + i); ECCL_ERR_PROTOCOL for a frame that is no
 * WELCOME. */
eccl_result eccl_wire_batch_step_frame(const uint8_t *frame, uint32_t len, uint32_t i,
                                       uint8_t *out);
/* Appends to `b` an entry for `handle` (<= ECCL_WIRE_BATCH_MAX_HANDLE):
 * message m encoded (m NULL: a gone entry), or an already encoded frame.
 * When the batch's last entry carries the very same frame for the handle
 * just below or above `handle`, it grows into (or by one more) span entry
 * instead, and b->folded is set. ECCL_ERR_AGAIN: it would pass
 * ECCL_WIRE_MAX_BATCH (take the batch, then add again);
 * ECCL_ERR_INVALID_ARG: m does not encode, or the handle is out of range;
 * ECCL_ERR_NO_MEMORY. */
eccl_result eccl_wire_batch_add(eccl_wire_batch *b, uint32_t handle, const eccl_msg *m);
eccl_result eccl_wire_batch_add_frame(eccl_wire_batch *b, uint32_t handle,
                                      const uint8_t *frame, uint32_t frame_len);
/* Adds an entry (m encoded; m NULL: frame f as it is; both NULL: gone),
 * calling flush(to) first when the batch is full, so that its owner takes
 * and sends it. Errors as eccl_wire_batch_add, never ECCL_ERR_AGAIN. */
eccl_result eccl_wire_batch_put(eccl_wire_batch *b, void (*flush)(void *to), void *to,
                                uint32_t handle, const eccl_msg *m, const uint8_t *frame,
                                uint32_t frame_len);
/* Finishes the batch: returns its whole frame (the caller frees it) and
 * its size, and leaves `b` empty. NULL when it holds no entry. */
uint8_t *eccl_wire_batch_take(eccl_wire_batch *b, uint32_t *frame_len);
void eccl_wire_batch_free(eccl_wire_batch *b);

void eccl_wire_data_encode(const eccl_wire_data *d, uint8_t *out);
/* Parses the 32-byte data header; frame_length is the frame's header length.
 * Checks reserved == 0, ring <= 1, phase known, and 32 + len == frame_length. */
eccl_result eccl_wire_data_decode(const uint8_t *in, uint32_t frame_length,
                                  eccl_wire_data *out);

/* Quantised DATA payloads (ECCL_WIRE_DATA_QUANT). Writes m's record into
 * payload[0..24) (the codes follow at payload + ECCL_QUANT_META_BYTES);
 * ECCL_ERR_INVALID_ARG for a record eccl_quant_meta_check rejects. */
eccl_result eccl_wire_qdata_encode(const eccl_quant_meta *m, uint8_t *payload);
/* Splits payload[0..len) into its record and codes: ECCL_ERR_PROTOCOL
 * unless len >= 24, the record decodes (eccl_quant_meta_decode) and its
 * count == len - 24. *codes points into payload. */
eccl_result eccl_wire_qdata_decode(const uint8_t *payload, uint32_t len, eccl_quant_meta *m,
                                   const uint8_t **codes);

#endif /* ECCL_CORE_PROTO_WIRE_H */
