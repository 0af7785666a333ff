/* eccl — elastic, fault-tolerant collective communication.
 *
 * Public C99 API. A run has one master (coordinator) and any number of peers.
 * Peers register with the master, are admitted by a unanimous vote of the
 * peers already accepted (eccl_comm_update_topology), and then run collectives
 * peer-to-peer over a ring the master orders. When a peer vanishes mid-call,
 * every survivor's call fails with ECCL_ERR_PEER_LOST with its input intact
 * (an in-place call's buffer holds exactly what it held before the call);
 * calling again runs on the survivors.
 *
 * Thread safety: every function may be called from any thread. One
 * communicator may run several asynchronous collectives at once, told apart
 * by their tag.
 */
#ifndef ECCL_H
#define ECCL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ECCL_VERSION_MAJOR 0
#define ECCL_VERSION_MINOR 1
#define ECCL_VERSION_PATCH 0

typedef enum eccl_result {
    ECCL_OK = 0,
    ECCL_ERR_INVALID_ARG = 1,   /* a NULL or out-of-range argument */
    ECCL_ERR_NO_MEMORY = 2,     /* an allocation failed */
    ECCL_ERR_SYSTEM = 3,        /* the operating system refused (see the log) */
    ECCL_ERR_CONNECT = 4,       /* could not reach the master or a peer */
    ECCL_ERR_TIMEOUT = 5,       /* the configured timeout passed */
    ECCL_ERR_PEER_LOST = 6,     /* a peer left mid-operation; inputs intact */
    ECCL_ERR_TOO_FEW_PEERS = 7, /* a collective needs at least two peers */
    ECCL_ERR_PROTOCOL = 8,      /* a malformed or unexpected frame */
    ECCL_ERR_KICKED = 9,        /* the master removed this peer */
    ECCL_ERR_MASTER_LOST = 10,  /* the connection to the master broke */
    ECCL_ERR_BUSY = 11,         /* tag already in flight, or wrong state */
    ECCL_ERR_NOT_CONNECTED = 12,/* eccl_comm_connect has not succeeded */
    ECCL_ERR_AGAIN = 13,        /* internal: would block; never returned by API */
    ECCL_ERR_CLOSED = 14,       /* the object is shutting down */
    ECCL_ERR_UNSUPPORTED = 15,  /* not supported by this build or backend */
    ECCL_ERR_DEVICE = 16,       /* the device (CUDA) failed a copy or kernel */
    ECCL_ERR_AUTH = 17          /* a peer did not prove the job's secret, or none is set */
} eccl_result;

/* A static, human-readable description; never NULL. */
const char *eccl_strerror(eccl_result result);

typedef enum eccl_dtype {
    ECCL_I8 = 0, ECCL_U8, ECCL_I16, ECCL_U16, ECCL_I32, ECCL_U32,
    ECCL_I64, ECCL_U64, ECCL_F16, ECCL_BF16, ECCL_F32, ECCL_F64,
    ECCL_DTYPE_COUNT
} eccl_dtype;

typedef enum eccl_op {
    ECCL_SUM = 0, ECCL_AVG, ECCL_PROD, ECCL_MIN, ECCL_MAX,
    ECCL_OP_COUNT
} eccl_op;

/* Bytes per element, or 0 for an invalid dtype. */
size_t eccl_dtype_size(eccl_dtype dtype);
const char *eccl_dtype_name(eccl_dtype dtype);
const char *eccl_op_name(eccl_op op);

/* ---- who may join: the job's secret ---------------------------------------
 * Every connection (to the master, a relay, a peer) opens with a
 * challenge-response on a secret all processes of the job share
 * (docs/protocol.md, "Authentication"). The real library reads it from
 * ECCL_AUTH_SECRET_FILE (a file only its owner can read) or ECCL_AUTH_SECRET
 * when a master, relay or communicator is created, and refuses to create one
 * without it (ECCL_ERR_AUTH) unless ECCL_AUTH=0 turns authentication off. */

/* For launchers: where this process has no secret and ECCL_AUTH is not 0,
 * makes a fresh random one and sets ECCL_AUTH_SECRET in its environment, so
 * that the masters and communicators it creates and the processes it starts
 * afterwards share it. Where a secret is set (or ECCL_AUTH=0), does nothing.
 * Not thread-safe (it sets an environment variable): call it first thing. */
eccl_result eccl_auth_job_secret(void);

/* ---- master -------------------------------------------------------------- */

typedef struct eccl_master eccl_master;

/* Binds "HOST:PORT" (PORT 0 picks a free port). Serves nothing until
 * eccl_master_run. */
eccl_result eccl_master_create(const char *listen_addr, eccl_master **out);
/* The address actually bound, "HOST:PORT". */
eccl_result eccl_master_address(const eccl_master *master, char *buf, size_t len);
/* Starts the master's progress thread and returns at once. */
eccl_result eccl_master_run(eccl_master *master);
/* Stops serving and closes every connection; peers see ECCL_ERR_MASTER_LOST. */
eccl_result eccl_master_stop(eccl_master *master);
/* Asks every member of every group to write its collective trace
 * (eccl_comm_trace_dump; docs/trace.md), with why "operator": where
 * ECCL_TRACE_DIR is set. eccl-master does it on SIGUSR2. Returns at once. */
eccl_result eccl_master_trace_all(eccl_master *master);
/* The master's metrics in Prometheus' text format (0.0.4): peers by state,
 * each group's members and epoch, registrations, admissions and their
 * latency, peers lost, epochs, view changes and their latency, collective
 * failures members reported, trace asks (docs/trace.md, "Metrics").
 * Writes buf[0..len) NUL-terminated and sets *needed (may be NULL) to the
 * bytes the whole text takes, NUL included; ECCL_ERR_INVALID_ARG when
 * len < *needed (call again with more). eccl-master serves it over HTTP
 * with --metrics HOST:PORT (off by default). */
eccl_result eccl_master_metrics(eccl_master *master, char *buf, size_t len, size_t *needed);
void eccl_master_destroy(eccl_master *master);

/* ---- relay --------------------------------------------------------------- */

/* A node of the coordinator's tree: peers (or other relays) connect to it
 * as to the master, and it speaks for all of them to its parent (the master
 * or another relay) over one connection, batching what they say and fanning
 * out what is decided (docs/protocol.md, "Relays"). It decides nothing; if
 * it dies, the peers behind it lose their master and come back through
 * another coordinator. ECCL_RELAY_TIMEOUT_MS (default 5000) is the silence
 * after which it and its parent give up on each other. */
typedef struct eccl_relay eccl_relay;

/* Binds listen_addr ("HOST:PORT", port 0 = any) and returns; the parent is
 * reached once eccl_relay_run starts, and again (with jittered back-off)
 * whenever the link to it breaks. Until then peers are refused. */
eccl_result eccl_relay_create(const char *listen_addr, const char *parent_addr,
                              eccl_relay **out);
eccl_result eccl_relay_address(const eccl_relay *relay, char *buf, size_t len);
eccl_result eccl_relay_run(eccl_relay *relay);
eccl_result eccl_relay_stop(eccl_relay *relay);
void eccl_relay_destroy(eccl_relay *relay);

/* ---- communicator -------------------------------------------------------- */

typedef struct eccl_comm eccl_comm;

typedef struct eccl_comm_params {
    const char *master_addr;     /* "HOST:PORT" of the master or of a relay;
                                    required. "A,B,..." (up to 4): tried in
                                    turn while connecting, so a peer whose
                                    relay is down comes in through the next */
    const char *p2p_host;        /* address peers reach us on; NULL: ECCL_P2P_HOST, else "127.0.0.1" */
    uint32_t peer_group;         /* collectives run within a group; 0 */
    /* Ring connections per neighbour, 1..64; 1. Concurrent all-reduces
     * spread over them: an op with tag t runs over connection t % size of
     * each pool, so a large op does not hold a small one up behind it
     * unless their tags share a connection. The environment variable
     * ECCL_P2P_POOL (1..64), if set, overrides this (ECCL_ATTR_P2P_POOL
     * tells the size in use). Connection 0 opens with the ring, the others
     * when an op first needs them. Peers may differ: each pool's size is
     * its opener's. Over 64: ECCL_ERR_INVALID_ARG. */
    uint32_t p2p_pool_size;
    uint32_t connect_timeout_ms; /* eccl_comm_connect and p2p connects; 10000 */
    uint32_t op_timeout_ms;      /* one collective or topology update; 60000 */
    uint32_t peer_timeout_ms;    /* silence after which a peer is dropped; 5000 */
} eccl_comm_params;

/* Fills the defaults above; master_addr stays NULL. */
void eccl_comm_params_init(eccl_comm_params *params);

eccl_result eccl_comm_create(const eccl_comm_params *params, eccl_comm **out);
/* Registers with the master and returns once the accepted peers have voted
 * this peer in (or at once, if it is the first). */
eccl_result eccl_comm_connect(eccl_comm *comm);
/* Accepted peers vote to admit every pending peer; returns once the new ring
 * is wired. Blocks until every accepted peer has called it. ECCL_ERR_BUSY at
 * once if a collective is in flight on this communicator (issued and not
 * yet waited for) or a shared-state sync runs: never under a collective. */
eccl_result eccl_comm_update_topology(eccl_comm *comm);
/* Number of peers registered with the master and waiting to be admitted.
 * A vote of all accepted peers: it returns once every accepted peer has
 * called it, with the same answer on every peer, so that either all of them
 * go on to eccl_comm_update_topology or none does. It may be called with
 * collectives in flight: they keep moving while it waits. ECCL_ERR_TIMEOUT
 * after op_timeout_ms (a member that has not called it yet): the vote
 * stays open with the master, and the next call waits for its answer. */
eccl_result eccl_comm_peers_pending(eccl_comm *comm, uint32_t *pending);

typedef enum eccl_attr {
    ECCL_ATTR_RANK = 0,        /* position in this peer group's ring */
    ECCL_ATTR_WORLD_SIZE = 1,  /* accepted peers in this peer group */
    ECCL_ATTR_PEER_ID = 2,     /* the master's stable id for this peer */
    ECCL_ATTR_EPOCH = 3,       /* ring generation; grows on every change */
    ECCL_ATTR_P2P_POOL = 4,    /* p2p_pool_size in use (after ECCL_P2P_POOL) */
    ECCL_ATTR_RING_LINKS = 5,  /* connections of our pool to the ring's next
                                  peer open right now (pools open lazily) */
    ECCL_ATTR_HOST_RANKS = 6,  /* peers of this group on our host, us
                                  included (the host of each p2p_host):
                                  over twice as many as CPUs, and a
                                  blocked call sleeps at once instead of
                                  spinning (unless ECCL_SPIN_NS is set) */
    ECCL_ATTR_SLOW_PEER = 7,   /* the peer id of a member of this group
                                  that calls late, as the master names it
                                  (every collective waits for it; docs/
                                  trace.md, "Slow ranks while the job
                                  runs"); 0: none */
    ECCL_ATTR_SLOW_LINK_FROM = 8, /* the link of this group the master names
                                  slow, far under the median rate of the
                                  group's links (ECCL_SLOW_LINK_FACTOR):
                                  the peer id at its sending end; 0: none */
    ECCL_ATTR_SLOW_LINK_TO = 9 /* ...and at its receiving end */
} eccl_attr;

/* RANK, WORLD_SIZE, EPOCH and HOST_RANKS are those of the ring the next
 * call runs on: asked while a membership change is under way (e.g. right
 * after a call failed with ECCL_ERR_PEER_LOST), they wait for the new
 * ring, at most op_timeout_ms. */

eccl_result eccl_comm_get_attr(eccl_comm *comm, eccl_attr attr, int64_t *value);

/* Who the ring is: ids[k] = the peer id (ECCL_ATTR_PEER_ID) of ring rank
 * first + k, k < n, on the ring the next call runs on (waiting for one
 * being re-formed, as get_attr does). Ranks this peer has not talked to
 * are asked of the master, one round trip for all of them; their entries
 * stay until the ring changes (a rank holds only those of the ranks its
 * calls talk to otherwise: asking for all N of a huge world costs N
 * entries, ~100 bytes each). With the ids from before a loss, a caller
 * tells which peers left. ECCL_ERR_INVALID_ARG past the world's end;
 * ECCL_ERR_PEER_LOST if the ring changes meanwhile (read WORLD_SIZE and
 * ask again); ECCL_ERR_TIMEOUT after op_timeout_ms. */
eccl_result eccl_comm_peer_ids(eccl_comm *comm, uint32_t first, uint32_t n, uint64_t *ids);

/* Pins every call this communicator is given from now on (collectives,
 * sends, receives) to the ring of `epoch` (ECCL_ATTR_EPOCH as the caller
 * read it), as eccl_allreduce_opts.ring_epoch pins one all-reduce: should
 * the ring change before a call starts, it fails with ECCL_ERR_PEER_LOST
 * having sent nothing, instead of running on the new ring; a call that a
 * view change committed on the pinned ring still returns its result. For
 * callers whose names of peers and calls belong to a ring they read (the
 * MPI library's communicators): a survivor never waits on a new ring for
 * peers that went on. A call's own ring_epoch option wins; 0 (the
 * default) unpins. */
eccl_result eccl_comm_pin_epoch(eccl_comm *comm, uint64_t epoch);

/* Notices: a word one member posts to every member of its group, itself
 * included, through the master, in one order for all (the master's). With
 * ECCL_NOTIFY_REFORM the master re-forms the group's ring right after
 * passing the word on (a new epoch, the same members): every call in
 * flight on every member settles as on a loss (committed where a member
 * holds its result, failed with ECCL_ERR_PEER_LOST otherwise, inputs
 * restored), and each member holds the word before its calls settle.
 * It interrupts, on every member, calls that wait for one another (what
 * MPI's MPIX_Comm_revoke needs). The re-form is done only if the poster's
 * ring is still the group's: a post that crosses a loss's re-form asks for
 * nothing more. Unknown flags: ECCL_ERR_INVALID_ARG; a communicator that
 * failed (master lost, kicked, ...) fails it as any call. */
enum { ECCL_NOTIFY_REFORM = 1 };
eccl_result eccl_comm_notify(eccl_comm *comm, uint64_t word, int flags);

typedef struct eccl_notice {
    uint64_t word;
    uint64_t from;  /* the poster's peer id (ECCL_ATTR_PEER_ID) */
    int64_t epoch;  /* the group's ring epoch when the master passed it on */
    int reform;     /* it re-formed the ring after it */
} eccl_notice;

/* Takes the notices that arrived, oldest first, up to max of them into
 * out; *n: how many. Never waits. At most 4096 wait here untaken; more
 * are dropped and logged. */
eccl_result eccl_comm_notices(eccl_comm *comm, eccl_notice *out, size_t max, size_t *n);

/* The collective trace (docs/trace.md). Every communicator records its
 * last calls (tag, collective, algorithm, bytes, epoch, when it was posted,
 * started, first heard from a peer, had its data, ended, and how) and its
 * ring epochs: ECCL_TRACE_RECORDS of them (default 256; 0 keeps none).
 * This
 * writes them out, with the links each unfinished call still waits on,
 * `why` (one word) in the header: a file eccl-trace-<peer>-<pid>-<n>.txt in
 * ECCL_TRACE_DIR (the current directory if unset). A call that fails
 * writes one on its own, once per ring epoch, where ECCL_TRACE_DIR is set;
 * so does every communicator of a process sent the signal named by
 * ECCL_TRACE_SIGNAL (USR1, USR2 or a number; no handler without it).
 * `eccl-trace analyze DIR` reads every rank's. ECCL_ERR_UNSUPPORTED: this
 * backend has nowhere to write (the simulator unless its run keeps traces);
 * ECCL_ERR_SYSTEM: the file could not be written. */
eccl_result eccl_comm_trace_dump(eccl_comm *comm, const char *why);

/* Leaving together: a vote of every member of this peer group, as
 * eccl_comm_peers_pending is. Call it with no call in flight (else
 * ECCL_ERR_BUSY), then eccl_comm_destroy. It returns ECCL_OK once every
 * member has called it: from then on no member needs anything of another,
 * so members that go take no membership change (no new ring, no dial of a
 * peer already gone, nothing on the log above info), and calls after it
 * fail with ECCL_ERR_CLOSED (the others may be gone). A member lost before the vote passed fails
 * it on the others with ECCL_ERR_PEER_LOST (the ring then re-forms as
 * after any loss, and they are ordinary members again); at most
 * op_timeout_ms. A single peer that leaves an elastic run alone just
 * destroys its communicator: the others go on, on a new ring. */
eccl_result eccl_comm_leave(eccl_comm *comm);

void eccl_comm_destroy(eccl_comm *comm);

/* ---- all-reduce ---------------------------------------------------------- */

/* How a collective ran (the library picks per call). */
typedef enum eccl_algorithm {
    ECCL_ALGO_RING = 0, /* two counter-rotating rings (small calls: one ring;
                           an all-reduce of two ranks: one swap) */
    ECCL_ALGO_TREE = 1, /* binary tree, log depth: small buffers, 3+ ranks */
    ECCL_ALGO_CHAIN = 2, /* broadcast, reduce: pipelined chains along the ring
                            from (or to) the root, both ways round */
    ECCL_ALGO_RECURSIVE = 3, /* recursive doubling / halving-doubling over
                                peer links; any N (the extra ranks fold in) */
    ECCL_ALGO_BINOMIAL = 4,  /* broadcast, reduce: binomial tree over peer links */
    ECCL_ALGO_PAIRWISE = 5,  /* all-to-all: every pair exchanges directly */
    ECCL_ALGO_DIRECT = 6,    /* send / receive: the peer link between the two */
    ECCL_ALGO_BRUCK = 7,     /* all-gather: Bruck's ceil(log2 N) rounds over
                                peer links; any N */
    ECCL_ALGO_HIER = 8,      /* all-reduce: intra-host reduce-scatter, per-local-
                                rank sub-rings across hosts, intra-host
                                all-gather; ranks sharing hosts (p2p_host) */
    ECCL_ALGO_COUNT
} eccl_algorithm;

/* "ring", "tree", "chain", "recursive", "binomial", "pairwise", "direct",
 * "bruck", "hier" (the names ECCL_ALGO and ECCL_TUNE use); "?" for anything else. */
const char *eccl_algorithm_name(uint32_t algorithm);

/* What one collective call did (any collective, not only all-reduce). */
typedef struct eccl_reduce_info {
    uint32_t world_size;  /* peers that took part */
    uint32_t algorithm;   /* an eccl_algorithm */
    uint64_t tx_bytes;    /* payload bytes this peer sent */
    uint64_t rx_bytes;    /* payload bytes this peer received */
} eccl_reduce_info;

typedef struct eccl_request eccl_request;

/* sendbuf == recvbuf means in place. The failure promise (every collective,
 * every error): the input is intact, which is all a retry reads. In place
 * (input and output share any byte) recvbuf therefore holds what it held
 * before the call, bit for bit; out of place recvbuf's content after a
 * failure is unspecified, as in MPI and NCCL, and the call keeps no backup
 * of it (the copy a restore needs would cost every call). info may be NULL.
 *
 * Buffers may be host memory or CUDA device memory (both of one kind: host
 * or pinned host memory on one side and device or managed memory on the
 * other is ECCL_ERR_INVALID_ARG). The CUDA part is a plugin loaded on first
 * use of a device pointer; without a CUDA runtime a device pointer gets
 * ECCL_ERR_UNSUPPORTED. Device buffers are read after the work queued on
 * the options' stream (eccl_allreduce_opts.stream; the legacy default
 * stream otherwise) and the result is in place, for the host and for work
 * queued on that stream, when the call returns; on failure the device
 * buffers keep the failure promise as host buffers do. A
 * device copy or kernel that fails is ECCL_ERR_DEVICE.
 * docs/devices.md says how device memory flows. */
eccl_result eccl_allreduce(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                           size_t count, eccl_dtype dtype, eccl_op op,
                           uint64_t tag, eccl_reduce_info *info);

/* Starts an all-reduce and returns a request. The tag must not be in flight
 * on this communicator already (ECCL_ERR_BUSY). Buffers must stay valid until
 * the request completes. */
eccl_result eccl_allreduce_async(eccl_comm *comm, const void *sendbuf,
                                 void *recvbuf, size_t count, eccl_dtype dtype,
                                 eccl_op op, uint64_t tag, eccl_request **req);
/* ---- all-reduce options: quantisation --------------------------------------
 *
 * A quantised all-reduce sends 8-bit codes instead of the values: about 1/4
 * of the bytes for f32 (1/2 for f16/bf16), plus a 24-byte metadata record
 * per slice of up to 1 MiB of values. Each peer quantises its partial sum of
 * a chunk before sending it (reduce-scatter); the owner of a fully reduced
 * chunk quantises it ONCE, keeps exactly the dequantised values it sends,
 * and the all-gather forwards those codes unchanged, so every peer ends with
 * bit-identical buffers -- and with values that carry one rounding per
 * reduce-scatter hop plus one for the result (each at most about half a
 * code step: (max - min) / 510 of the slice's range).
 *
 * Only ECCL_SUM and ECCL_AVG on ECCL_F32, ECCL_F16 and ECCL_BF16 (others:
 * ECCL_ERR_INVALID_ARG; ECCL_F64: ECCL_ERR_UNSUPPORTED). A slice holding NaN
 * or infinity (or a range wider than the float type) travels unquantised,
 * so such values propagate exactly as without quantisation. Quantised calls
 * always take the ring algorithm (also for small buffers), and need tensor
 * memory the host can address: an env with phantom buffers (the simulator's
 * scale runs) answers ECCL_ERR_UNSUPPORTED. The failure promise is
 * unchanged (eccl_allreduce). */

/* Values travel on the wire (metadata records): never renumber. */
typedef enum eccl_quant_type {
    ECCL_QUANT_NONE = 0,      /* exact values: the plain all-reduce */
    ECCL_QUANT_MINMAX_U8 = 1, /* codes 0..255 span the slice's [min, max] */
    ECCL_QUANT_AFFINE_U8 = 2  /* scale and zero point; 0.0 is exact */
} eccl_quant_type;

typedef struct eccl_allreduce_opts {
    size_t size;           /* sizeof(eccl_allreduce_opts): lets it grow */
    eccl_quant_type quant; /* ECCL_QUANT_NONE */
    /* Device buffers only: a cudaStream_t. The call reads the buffers after
     * the work queued there before it, and work queued there after it sees
     * the result (NCCL's semantics). NULL: the legacy default stream. */
    void *stream;
    /* Nonzero: the call belongs to the ring of this epoch (ECCL_ATTR_EPOCH
     * as the caller read it). Should the ring change before the call starts
     * (a loss under way while it was posted), it fails with
     * ECCL_ERR_PEER_LOST having sent nothing, instead of running on the new
     * ring: for callers that name their calls by the ring they read (a vote
     * retried under a tag made of the epoch), so that a survivor that read
     * the old ring and one that read the new never wait for each other under
     * two names. 0 (the default): it runs on the ring current at its start. */
    uint64_t ring_epoch;
} eccl_allreduce_opts;

/* Fills the defaults above (an all-reduce with these is eccl_allreduce). */
void eccl_allreduce_opts_init(eccl_allreduce_opts *opts);

/* eccl_allreduce with options; opts NULL means the defaults. Every peer
 * must pass the same options for the same call (a peer whose frames do not
 * match breaks the op like any malformed frame). */
eccl_result eccl_allreduce_ex(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                              size_t count, eccl_dtype dtype, eccl_op op, uint64_t tag,
                              const eccl_allreduce_opts *opts, eccl_reduce_info *info);
eccl_result eccl_allreduce_ex_async(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, eccl_dtype dtype, eccl_op op,
                                    uint64_t tag, const eccl_allreduce_opts *opts,
                                    eccl_request **req);

/* ---- a batch of all-reduces, retried on peer loss --------------------------- */

typedef struct eccl_allreduce_desc {
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    eccl_dtype dtype;
    eccl_op op;
    uint64_t tag;                    /* distinct within a batch */
    const eccl_allreduce_opts *opts; /* NULL: defaults */
} eccl_allreduce_desc;

/* Runs descs[0..n) with at most max_in_flight (>= 1) of them in flight at
 * once, issued in order. Every peer must pass the same batch AND the same
 * max_in_flight: a peer running ahead could otherwise start a large op that
 * another has not called yet, ahead of frames that one still needs. An op that
 * fails with ECCL_ERR_PEER_LOST (its input intact, the ring re-formed on
 * the survivors by the library) is issued again, until
 * every op succeeded (ECCL_OK) or fewer than two peers remain
 * (ECCL_ERR_TOO_FEW_PEERS). Any other error stops issuing new ops; the ops
 * in flight are waited for and the first such error is returned. infos,
 * if not NULL, gets one entry per desc: the successful run's info, or
 * zeros (world_size 0) for an op that did not succeed, whose buffers then
 * keep the failure promise (eccl_allreduce). A peer that succeeded on some ops
 * before a loss keeps those results (each with the world it ran on). */
eccl_result eccl_allreduce_multiple_with_retry(eccl_comm *comm, const eccl_allreduce_desc *descs,
                                               size_t n, uint32_t max_in_flight,
                                               eccl_reduce_info *infos);

/* Waits for completion, returns the operation's result and frees req. */
eccl_result eccl_wait(eccl_request *req, eccl_reduce_info *info);
/* Sets *done. When done, returns the operation's result and frees req;
 * otherwise returns ECCL_OK and req stays valid. */
eccl_result eccl_test(eccl_request *req, int *done, eccl_reduce_info *info);

/* ---- all-gather, reduce-scatter, broadcast, reduce, barrier ----------------
 *
 * Every collective keeps all-reduce's contract: when a peer is lost mid-call,
 * the call fails with ECCL_ERR_PEER_LOST on every survivor with its input
 * intact and, in place (input and output share any byte), its output as it
 * was, bit for bit (out of place the output is unspecified after a
 * failure; eccl_allreduce); calling again runs on the
 * survivors; outputs that are replicated (all-gather, broadcast) are
 * bit-identical on every peer; calls issued in different orders on
 * different peers (told apart by their tags, one tag space for all
 * collectives) never deadlock. Blocking calls return once the result is in
 * place; the _async forms return a request for eccl_wait / eccl_test.
 * Buffers may be host or CUDA device memory, as for eccl_allreduce (device
 * buffers run on a pinned host mirror; docs/devices.md).
 *
 * Layouts follow NCCL. They depend on the world (ECCL_ATTR_WORLD_SIZE) and
 * this peer's rank (ECCL_ATTR_RANK) when the call is made: a call made
 * before a membership change that starts after it fails with
 * ECCL_ERR_PEER_LOST without touching any buffer, so that no call ever runs
 * on a layout its caller did not mean. Roots are ranks of that world
 * (root >= world: ECCL_ERR_INVALID_ARG). Every peer must pass the same
 * count, dtype, op and root for the same call (a peer whose frames do not
 * match breaks the op like any malformed frame). */

/* recvbuf (world * sendcount elements) gets rank r's sendbuf as block r, on
 * every rank. In place: sendbuf == recvbuf + rank * sendcount elements. */
eccl_result eccl_allgather(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                           size_t sendcount, eccl_dtype dtype, uint64_t tag,
                           eccl_reduce_info *info);
eccl_result eccl_allgather_async(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                                 size_t sendcount, eccl_dtype dtype, uint64_t tag,
                                 eccl_request **req);

/* sendbuf holds world * recvcount elements; recvbuf (recvcount elements)
 * gets block `rank` of the reduction of every rank's sendbuf. In place:
 * recvbuf == sendbuf + rank * recvcount elements (sendbuf is not written
 * then either, except for that block). */
eccl_result eccl_reduce_scatter(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                                size_t recvcount, eccl_dtype dtype, eccl_op op,
                                uint64_t tag, eccl_reduce_info *info);
eccl_result eccl_reduce_scatter_async(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                                      size_t recvcount, eccl_dtype dtype, eccl_op op,
                                      uint64_t tag, eccl_request **req);
/* With all-reduce's options (opts NULL: the defaults): opts->stream orders a
 * device call, and opts->quant sends every partial as 8-bit codes, as the
 * quantised all-reduce's reduce-scatter does (same types, ops and limits;
 * each value carries one rounding per hop, at most about half a code step
 * of its slice's range each; nothing is replicated, so there is no final
 * rounding). */
eccl_result eccl_reduce_scatter_ex(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                                   size_t recvcount, eccl_dtype dtype, eccl_op op, uint64_t tag,
                                   const eccl_allreduce_opts *opts, eccl_reduce_info *info);
eccl_result eccl_reduce_scatter_ex_async(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                                         size_t recvcount, eccl_dtype dtype, eccl_op op,
                                         uint64_t tag, const eccl_allreduce_opts *opts,
                                         eccl_request **req);

/* The v layouts (MPI's Allgatherv, Reduce_scatter): block r has
 * recvcounts[r] elements (world entries, the same on every rank). The
 * all-gather's block r lands at element displs[r] of recvbuf, and rank r
 * sends recvcounts[r] elements (in place: sendbuf == recvbuf + displs[rank]
 * elements); blocks must not overlap. The reduce-scatter's sendbuf holds
 * the blocks back to back, and recvbuf gets recvcounts[rank] elements (in
 * place: recvbuf == sendbuf + the counts of the ranks before us). The
 * arrays are read during the call only. */
eccl_result eccl_allgatherv(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                            const size_t *recvcounts, const size_t *displs, eccl_dtype dtype,
                            uint64_t tag, eccl_reduce_info *info);
eccl_result eccl_allgatherv_async(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                                  const size_t *recvcounts, const size_t *displs,
                                  eccl_dtype dtype, uint64_t tag, eccl_request **req);
eccl_result eccl_reduce_scatterv(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                                 const size_t *recvcounts, eccl_dtype dtype, eccl_op op,
                                 uint64_t tag, eccl_reduce_info *info);
eccl_result eccl_reduce_scatterv_async(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                                       const size_t *recvcounts, eccl_dtype dtype, eccl_op op,
                                       uint64_t tag, eccl_request **req);

/* root's sendbuf (count elements) lands in every rank's recvbuf, root's
 * included. sendbuf is read on the root only (NULL elsewhere is fine); in
 * place: sendbuf == recvbuf. */
eccl_result eccl_broadcast(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                           size_t count, eccl_dtype dtype, uint32_t root, uint64_t tag,
                           eccl_reduce_info *info);
eccl_result eccl_broadcast_async(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                                 size_t count, eccl_dtype dtype, uint32_t root,
                                 uint64_t tag, eccl_request **req);

/* The reduction of every rank's sendbuf lands in root's recvbuf alone
 * (recvbuf is not touched elsewhere, and may be NULL there). In place on the
 * root: sendbuf == recvbuf. If the root is lost after every other rank has
 * sent its part, the survivors' calls succeed: no output of theirs is lost. */
eccl_result eccl_reduce(eccl_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                        eccl_dtype dtype, eccl_op op, uint32_t root, uint64_t tag,
                        eccl_reduce_info *info);
eccl_result eccl_reduce_async(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                              size_t count, eccl_dtype dtype, eccl_op op, uint32_t root,
                              uint64_t tag, eccl_request **req);

/* All-to-all: sendbuf holds world blocks of count elements, block j for
 * rank j; recvbuf (world * count elements) gets rank i's block for us as
 * block i. In place: sendbuf == recvbuf (every block is sent before any
 * is overwritten). */
eccl_result eccl_alltoall(eccl_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                          eccl_dtype dtype, uint64_t tag, eccl_reduce_info *info);
eccl_result eccl_alltoall_async(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                                size_t count, eccl_dtype dtype, uint64_t tag,
                                eccl_request **req);
/* The v layout (MPI's Alltoallv, in elements): send block j has
 * sendcounts[j] elements at element sdispls[j] of sendbuf, receive block i
 * recvcounts[i] at rdispls[i] of recvbuf (world entries each). Rank i's
 * sendcounts[j] must equal rank j's recvcounts[i]: a peer whose block does
 * not match breaks the call like any malformed frame. Receive blocks must
 * not overlap. In place: sendbuf == recvbuf with sendcounts, sdispls NULL
 * (the receive layout is the send layout, as MPI_IN_PLACE). The arrays are
 * read during the call only. */
eccl_result eccl_alltoallv(eccl_comm *comm, const void *sendbuf, const size_t *sendcounts,
                           const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                           const size_t *rdispls, eccl_dtype dtype, uint64_t tag,
                           eccl_reduce_info *info);
eccl_result eccl_alltoallv_async(eccl_comm *comm, const void *sendbuf, const size_t *sendcounts,
                                 const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                 const size_t *rdispls, eccl_dtype dtype, uint64_t tag,
                                 eccl_request **req);

/* ---- send and receive ---------------------------------------------------------
 *
 * count elements from this rank's buf into rank `peer`'s (not our own:
 * ECCL_ERR_INVALID_ARG). `peer` is a rank of the numbering the caller last
 * saw: the one ECCL_ATTR_RANK / WORLD_SIZE / EPOCH last returned, or the
 * current one after it was told the membership changed (a call failed with
 * ECCL_ERR_PEER_LOST, update_topology or optimize_topology returned). If a
 * loss renumbered the world since, the call fails with ECCL_ERR_PEER_LOST
 * having sent nothing (its peer may be another rank now), and the next one
 * is made in the new world. A send
 * pairs with the receive of the same tag, count and dtype on `peer` naming
 * us; a receive of another size breaks the pair like a malformed frame.
 * Tags: a send and a receive of one tag, or one tag between other pairs,
 * never meet, so a pair may exchange both ways with one tag (async); tags
 * with the top bit set are reserved (ECCL_ERR_INVALID_ARG, here and for
 * every collective).
 *
 * The fault contract holds for the pair: if either side is lost, or the
 * membership changes while the transfer is under way, both calls fail with
 * ECCL_ERR_PEER_LOST (the receive buffer as it was, bit for bit), unless
 * the receiver already held every byte and the sender knew it, in which
 * case both succeed; never one of each. A receive returns once it holds
 * the data, a send once the receiver acknowledged it. */
eccl_result eccl_send(eccl_comm *comm, const void *buf, size_t count, eccl_dtype dtype, uint32_t peer,
                      uint64_t tag, eccl_reduce_info *info);
eccl_result eccl_send_async(eccl_comm *comm, const void *buf, size_t count, eccl_dtype dtype,
                            uint32_t peer, uint64_t tag, eccl_request **req);
eccl_result eccl_recv(eccl_comm *comm, void *buf, size_t count, eccl_dtype dtype, uint32_t peer,
                      uint64_t tag, eccl_reduce_info *info);
eccl_result eccl_recv_async(eccl_comm *comm, void *buf, size_t count, eccl_dtype dtype, uint32_t peer,
                            uint64_t tag, eccl_request **req);

/* Returns once every peer of the group has entered the barrier with this
 * tag (a one-byte all-reduce under the hood, with its fault contract). */
eccl_result eccl_barrier(eccl_comm *comm, uint64_t tag);
eccl_result eccl_barrier_async(eccl_comm *comm, uint64_t tag, eccl_request **req);

/* ---- shared state ------------------------------------------------------- */

/* Peers keep named tensors identical (model weights, optimiser state, step
 * counters) by voting on their hashes: every accepted peer of a peer group
 * calls eccl_comm_sync_shared_state with its tensors and revision; the
 * master elects the most popular (key, hash) set, and each peer whose copy
 * differs fetches the differing tensors peer-to-peer from peers that hold
 * the elected set, straight into its own buffers, and verifies their hash.
 *
 * Revision rule: a peer that took part in the group's last successful sync
 * must pass exactly that sync's revision + 1 (ECCL_ERR_INVALID_ARG
 * otherwise, and it is left out of the round); a newcomer (one that did
 * not) may pass any revision and adopts the elected one. */

/* Values travel on the wire: never renumber. 0 is left invalid. */
typedef enum eccl_hash_type {
    ECCL_HASH_SIMPLE = 1, /* FNV-1a-like lanes folded by a fixed tree */
    ECCL_HASH_CRC32C = 2  /* CRC-32C (Castagnoli) */
} eccl_hash_type;

typedef enum eccl_sync_strategy {
    /* Vote; fetch if outvoted; serve if elected. */
    ECCL_SYNC_ENFORCE_POPULAR = 0,
    /* This peer's state is authoritative: vote and serve, never fetch. A
     * SEND_ONLY peer outvoted by the election is kicked (ECCL_ERR_KICKED). */
    ECCL_SYNC_SEND_ONLY = 1,
    /* Take whatever is elected: no vote, never serves (its hashes do not
     * count towards popularity). If every caller is RECEIVE_ONLY, nobody
     * votes and the call fails with ECCL_ERR_INVALID_ARG everywhere. */
    ECCL_SYNC_RECEIVE_ONLY = 2
} eccl_sync_strategy;

typedef struct eccl_tensor_info {
    const char *key;   /* unique, 1..63 bytes */
    void *data;        /* host or device memory, count * eccl_dtype_size(dtype) bytes;
                        * device tensors are hashed and moved through pinned
                        * host mirrors and written only after a successful sync */
    size_t count;
    eccl_dtype dtype;
    /* Nonzero: this tensor may differ between peers; it takes no part in
     * the vote and is never transferred. */
    int allow_content_inequality;
} eccl_tensor_info;

typedef struct eccl_shared_state {
    uint64_t revision;        /* updated to the elected revision on success */
    size_t count;             /* tensors; at most 512 voted ones */
    eccl_tensor_info *infos;
} eccl_shared_state;

typedef struct eccl_sync_info {
    uint64_t tx_bytes;     /* tensor bytes this peer served to others */
    uint64_t rx_bytes;     /* tensor bytes this peer fetched */
    uint64_t revision;     /* the elected revision */
    uint32_t keys_fetched; /* tensors this peer replaced */
    uint32_t keys_served;  /* fetches of this peer's tensors by others */
} eccl_sync_info;

/* Blocks until every accepted peer of the group has called it and every
 * outdated peer has fetched and verified what it lacked, or until
 * op_timeout_ms. ECCL_OK on every participant, or the same error on all
 * (ECCL_ERR_PEER_LOST when a holder vanished mid-transfer, ECCL_ERR_PROTOCOL
 * when fetched bytes did not hash to the elected hash), except the errors
 * that concern one peer alone: ECCL_ERR_INVALID_ARG (bad arguments, the
 * revision rule, a key set, size or dtype that cannot take the elected
 * set), ECCL_ERR_KICKED (a SEND_ONLY peer outvoted). ECCL_ERR_BUSY if a
 * collective is in flight on this communicator, or if another peer of the
 * group is in update_topology or peers_pending instead (then every sync
 * caller of the group gets it). On failure, tensors that were being
 * fetched hold unspecified bytes (they were outdated anyway: the next
 * successful sync replaces them); every other tensor is untouched. info
 * may be NULL. */
eccl_result eccl_comm_sync_shared_state(eccl_comm *comm, eccl_shared_state *state,
                                        eccl_sync_strategy strategy,
                                        eccl_hash_type hash_type, eccl_sync_info *info);

/* ---- topology optimisation ------------------------------------------------ */

/* A ring all-reduce runs at the speed of its slowest link, and the default
 * ring order (admission order) knows nothing of the network. Every accepted
 * peer of a group calls eccl_comm_optimize_topology; the master then names
 * the pairs to measure in rounds (in each round every peer sends one probe
 * and receives one), each probe streams filler bytes over `probe_conns`
 * connections for `probe_ms` and reports bytes per second to the master's
 * bandwidth store, which keeps them across calls: a later call measures
 * only pairs it has never measured (pairs of peers that joined since). The
 * master solves the asymmetric TSP for the ring order (slowest link first,
 * then the sum: exact up to 12 peers, local search beyond) and, if the
 * solution is strictly better than the current ring, re-forms the ring in
 * that order. Beyond 12 peers it keeps searching in the background; a
 * better ring found there is adopted at the next call if the members are
 * the same. */
#define ECCL_TOPO_MAX_CONNS 64
typedef struct eccl_topo_opts {
    uint32_t probe_ms;    /* how long each probe sends; default 50 */
    uint32_t probe_conns; /* connections per probe; default 4 (1..ECCL_TOPO_MAX_CONNS) */
    uint32_t max_rounds;  /* probe rounds per call; 0 (default): as many as
                             it takes to measure every pair (N-1 rounds of
                             probe_ms each for N new peers) */
} eccl_topo_opts;

void eccl_topo_opts_init(eccl_topo_opts *opts);

typedef struct eccl_topo_info {
    int changed;               /* the ring was re-formed in a new order */
    int exact;                 /* the order is proven optimal for what was measured */
    int moonshot;              /* the background search's order was adopted */
    uint32_t pairs_measured;   /* links measured by this call, group-wide */
    uint32_t unmeasured_links; /* links of the ring never measured */
    uint32_t probes_sent;      /* this peer's probes, and how many failed */
    uint32_t probes_failed;
    uint64_t probe_bytes;      /* filler bytes this peer sent */
    double old_bottleneck_bps; /* slowest measured link of the ring before */
    double new_bottleneck_bps; /* ... and after (the same if unchanged) */
} eccl_topo_info;

/* Blocks until every accepted peer of the group has called it, the probes
 * are measured and the (possibly re-ordered) ring is wired, or until
 * op_timeout_ms. ECCL_OK on every participant, or the same error on all:
 * ECCL_ERR_PEER_LOST (a member left mid-call; the ring is re-formed without
 * it as after any loss), ECCL_ERR_BUSY (a collective or a sync is in flight
 * on this communicator, or another member of the group is in
 * update_topology, peers_pending or sync_shared_state instead),
 * ECCL_ERR_TIMEOUT. A probe that fails (refused, reset) is not an error:
 * its link stays unmeasured and the solver avoids it (probes_failed,
 * unmeasured_links). opts and info may be NULL. */
eccl_result eccl_comm_optimize_topology(eccl_comm *comm, const eccl_topo_opts *opts,
                                        eccl_topo_info *info);

#ifdef __cplusplus
}
#endif

#endif /* ECCL_H */
