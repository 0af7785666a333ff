/* The env table: everything core/ needs from the world, as function pointers.
 *
 * core/ makes no system call and holds no mutable global; a backend (real:
 * POSIX + TCP, sim: SimGrid) fills one eccl_env per master or communicator.
 * Each ops table starts with its own size so a table can grow without breaking
 * an older backend (NCCL-net style): core checks `size` before using a field
 * added later.
 *
 * Unless a field says otherwise: calls never block, return ECCL_OK or an
 * ECCL_ERR_* code, and may be called from any thread that holds the owning
 * object's mutex (core serialises all calls on one env instance except
 * `wake`, which is thread-safe).
 */
#ifndef ECCL_CORE_ENV_H
#define ECCL_CORE_ENV_H

#include <stddef.h>
#include <stdint.h>

#include "eccl.h"
#include "util/mem_kind.h"

/* Opaque, backend-owned handles. */
typedef struct eccl_conn eccl_conn;
typedef struct eccl_listener eccl_listener;
typedef struct eccl_bulk eccl_bulk; /* an isend/irecv in flight */

/* base NULL: `len` bytes of phantom payload (see eccl_dev_ops.is_phantom):
 * only an env whose dev has phantom memory ever passes one. */
typedef struct eccl_iov {
    const void *base;
    size_t len;
} eccl_iov;

/* Longest "HOST:PORT" string, including the terminating NUL. */
#define ECCL_ADDR_MAX 64

/* ---- net: non-blocking byte streams, plus bulk payloads --------------------
 * A conn is a reliable, ordered, full-duplex byte stream (TCP, or a mailbox
 * pair in the simulator), and on an RDMA net also a pair of queue pairs'
 * worth of one-sided writes (the bulk ops at the end). Readiness is reported through `wait`: every conn and
 * listener carries a `user` pointer that `wait` hands back when it is ready. */
typedef struct eccl_net_ops {
    size_t size;
    /* Binds and listens on "HOST:PORT" (PORT 0 = any free port). Writes the
     * bound address to `bound` (ECCL_ADDR_MAX bytes). The listener is
     * reported readable by `wait` when accept may succeed. */
    eccl_result (*listen)(void *ctx, const char *addr, void *user,
                          eccl_listener **out, char *bound);
    /* Accepts one pending connection, or ECCL_ERR_AGAIN if none. */
    eccl_result (*accept)(void *ctx, eccl_listener *l, void *user,
                          eccl_conn **out);
    void (*close_listener)(void *ctx, eccl_listener *l);
    /* Starts connecting to "HOST:PORT" and returns at once. Until the
     * connection is up, send/recv move 0 bytes; a refused or failed connect
     * shows up as ECCL_ERR_CONNECT from send/recv. */
    eccl_result (*connect)(void *ctx, const char *addr, void *user,
                           eccl_conn **out);
    /* Writes as much of iov[0..n) as it can without blocking; *sent = bytes
     * written (0 is fine). Errors: ECCL_ERR_CLOSED (peer closed or reset),
     * ECCL_ERR_CONNECT (connect failed). Never keeps a pointer to iov.
     * An iov with a NULL base is phantom payload: a net paired with a dev
     * that has phantom memory (the simulator's) charges its length on the
     * wire and carries no bytes; other nets never see one. */
    eccl_result (*send)(void *ctx, eccl_conn *c, const eccl_iov *iov, int n,
                        size_t *sent);
    /* Reads up to len bytes without blocking; *got = bytes read (0 = nothing
     * yet). End of stream or reset is ECCL_ERR_CLOSED. buf NULL (phantom
     * payload, same nets as above): consumes up to len bytes, stores none.
     * A net that carries phantom payload stops a read into a real buffer
     * where phantom bytes begin (a short read is then not "drained"), and
     * reads phantom bytes into a real buffer as zeros. */
    eccl_result (*recv)(void *ctx, eccl_conn *c, void *buf, size_t len,
                        size_t *got);
    /* Which readiness `wait` reports for this conn: readable (read=1) and/or
     * writable (write=1). New conns start as read=1, write=0. Core turns
     * reading off to apply back-pressure (a frame it cannot place yet) and
     * writing on only while it has bytes queued. Errors and hang-ups are
     * reported whenever read=1 or write=1. */
    void (*set_interest)(void *ctx, eccl_conn *c, int read, int write);
    /* Closes and frees the conn; never fails. */
    void (*close)(void *ctx, eccl_conn *c);
    /* Blocks until a conn/listener is ready, `wake` is called, or the clock
     * reaches deadline_ns (0 = poll and return at once). Writes up to `max`
     * ready user pointers to `ready` (each at most once) and returns how many.
     * May return 0 early. Called without the owner's mutex held, possibly
     * by two threads at once. It must not dereference backend state that a
     * concurrent `close` may free: the user pointer is what it hands back
     * (the real backend stores it in epoll's data.ptr), and core keeps user
     * objects alive until no thread is inside `wait`. */
    int (*wait)(void *ctx, uint64_t deadline_ns, void **ready, int max);
    /* Makes a concurrent or the next `wait` return early. Thread-safe,
     * callable without any lock. Each call must release at least one
     * thread blocked in `wait` (one readiness event may wake only one of
     * several waiting threads, as with epoll). */
    void (*wake)(void *ctx);

    /* ---- bulk: payloads outside the stream (added later; check with
     * eccl_net_has_bulk; NULL in a stream-only net) --------------------------
     * NCCL's net plugin shape (isend/irecv/test), for transports that move
     * bytes with one-sided writes into registered memory (RDMA). Core still
     * frames everything on the stream: a DATA frame's header always travels
     * there, and on a conn with bulk its payload may instead be an isend
     * that the receiver, once the header told it where the bytes belong,
     * matches with an irecv into their destination. The k-th isend on one
     * end of a conn is the k-th irecv on the other, whatever their sizes
     * (core sends both the same length). A stream-only net (TCP, the
     * simulator's mailboxes) implements the same contract with bulk_min 0:
     * its payloads follow their headers in the stream, which already lands
     * them in place without a copy (recv straight into the destination);
     * an isend/irecv layer on top would only add a round trip.
     *
     * Registration (NCCL's regMr/deregMr) is the net's business, not
     * core's: core does not know how long a user's buffer lives, and a
     * registration that outlives its memory writes to pages the allocator
     * gave back. The net registers what a transfer needs and may cache it
     * (net_ibv: ECCL_IB_REG_CACHE, docs/transports.md). */
    /* The smallest payload this conn moves as bulk; 0 = none (everything
     * in the stream, e.g. a conn to a peer without RDMA). Never blocks. */
    size_t (*bulk_min)(void *ctx, eccl_conn *c);
    /* Starts sending buf[0..len) as the conn's next bulk message and
     * returns at once; buf stays untouched-by-core until `test` says done.
     * *req is the net's; it lives until `test` reports done (or an error),
     * or until the conn is closed, which frees it. */
    eccl_result (*isend)(void *ctx, eccl_conn *c, const void *buf, size_t len, eccl_bulk **req);
    /* Names buf[0..len) as where the peer's next bulk message lands. The
     * net may write there until `test` reports done, and never after
     * `close` returned: closing the conn fences every write still in
     * flight (core closes links before a failed call returns, which is
     * how a one-sided write can never land in a restored buffer). */
    eccl_result (*irecv)(void *ctx, eccl_conn *c, void *buf, size_t len, eccl_bulk **req);
    /* Takes the conn's completion events and advances its transfers.
     * `wait` reports the conn's user pointer whenever a transfer of it may
     * have progressed, whatever set_interest says; progress consumes that
     * readiness, so the caller tests every request of the conn after it
     * (a completion taken here and tested nowhere would wait for a wake-up
     * that never comes). Errors: ECCL_ERR_CLOSED (the peer or the path to
     * it is lost: a failed completion, a queue pair in error, a port down,
     * the stream closed while a bulk receive waits); ECCL_ERR_DEVICE (this
     * rank's device failed a copy the net made with it: core fails the
     * ops on the conn as its own device work would, and blames no peer). */
    eccl_result (*progress)(void *ctx, eccl_conn *c);
    /* *done = 1 once req has finished (req is then freed); reads what the
     * last progress found and consumes no readiness. An error is the
     * conn's (as progress); req then stays the conn's until close. */
    eccl_result (*test)(void *ctx, eccl_bulk *req, int *done);

    /* ---- device payloads (added later; check eccl_net_has_device_bulk;
     * NULL in a net that moves host memory only) ------------------------
     * A conn may carry device memory as bulk with no host copy on the
     * sender: a host-mate maps it (CUDA IPC, net_shm); GPUDirect RDMA would
     * be another. The receiver's irecv is unchanged (host memory). */
    /* 1 if isend_device may name memory of `device` in buf's allocation on
     * this conn now. It may turn from 0 to 1 as the conn learns what its
     * peer can do, never back while the conn lives. Payloads below
     * bulk_min go in the stream, which cannot read device memory: the
     * caller checks lengths too. */
    int (*bulk_device)(void *ctx, eccl_conn *c, const void *buf, int device);
    /* isend of device memory: buf[0..len) is memory of `device` that no
     * queued device work writes any more (the caller waited for it) and
     * that stays untouched until `test` says done. */
    eccl_result (*isend_device)(void *ctx, eccl_conn *c, const void *buf, size_t len, int device,
                                eccl_bulk **req);

    /* ---- wire time (added later; check eccl_net_has_wire_time; NULL where
     * the net cannot tell) ------------------------------------------------
     * What this conn received since it opened, counting messages the net
     * knows the time on the wire of: their bytes, and that time (ns). The
     * simulator knows it from its model (a message's size over its route's
     * bandwidth); a real stream does not (its bytes carry no send time), and
     * core times large frames as they arrive instead (comm/rates.c). */
    void (*wire_time)(void *ctx, eccl_conn *c, uint64_t *bytes, uint64_t *ns);

    /* ---- the far end (added later; check eccl_net_has_peer_addr; NULL
     * where the net cannot tell) ------------------------------------------
     * conn's far end as "HOST:PORT" into addr[ECCL_ADDR_MAX] ("" if
     * unknown): a listener bounds the unproven connections it holds per
     * host with it (proto/gate.h). */
    void (*peer_addr)(void *ctx, eccl_conn *c, char *addr);

    /* ---- host payloads (added later; check eccl_net_has_bulk_min_host;
     * NULL: bulk_min for every payload) -------------------------------------
     * The smallest payload in host memory that this conn moves as bulk: at
     * least bulk_min, SIZE_MAX for none (host payloads stay in the stream;
     * device payloads keep bulk_min). For a net whose stream outruns its
     * bulk for host memory: net_shm's inboxes, two copies through a ring
     * that stays in cache, pipelined, against one process_vm_readv that
     * pins every page (docs/transports.md). */
    size_t (*bulk_min_host)(void *ctx, eccl_conn *c);
} eccl_net_ops;

/* ---- clock --------------------------------------------------------------- */
typedef struct eccl_clock_ops {
    size_t size;
    /* Monotonic nanoseconds (simulated time in the simulator). */
    uint64_t (*now_ns)(void *ctx);
    /* Optional (NULL, or absent from an older, smaller table): the caller
     * just did `units` messages' worth of bookkeeping that no system call
     * paid for (a coordinator decoding and handling the entries of a
     * relay's batch). Never blocks. A simulated clock charges it as CPU
     * time; a real one has already spent it and ignores it. */
    void (*work)(void *ctx, uint64_t units);
} eccl_clock_ops;

/* ---- sync: mutexes, condition variables, threads ---------------------------
 * These block by design. A thread in the real backend is a pthread; in the
 * simulator an actor. */
typedef struct eccl_mutex eccl_mutex;
typedef struct eccl_cond eccl_cond;
typedef struct eccl_thread eccl_thread;

typedef struct eccl_sync_ops {
    size_t size;
    eccl_result (*mutex_create)(void *ctx, eccl_mutex **out);
    void (*mutex_destroy)(void *ctx, eccl_mutex *m);
    void (*lock)(void *ctx, eccl_mutex *m);
    void (*unlock)(void *ctx, eccl_mutex *m);
    eccl_result (*cond_create)(void *ctx, eccl_cond **out);
    void (*cond_destroy)(void *ctx, eccl_cond *c);
    /* Waits with `m` held; returns ECCL_ERR_TIMEOUT once the clock passes
     * deadline_ns (0 = no deadline). Spurious wake-ups are allowed. */
    eccl_result (*cond_wait)(void *ctx, eccl_cond *c, eccl_mutex *m,
                             uint64_t deadline_ns);
    void (*cond_broadcast)(void *ctx, eccl_cond *c);
    /* Runs fn(arg) on a new thread (actor); `name` is for debuggers. */
    eccl_result (*spawn)(void *ctx, const char *name, void (*fn)(void *),
                         void *arg, eccl_thread **out);
    /* Waits for the thread to return and frees it. */
    void (*join)(void *ctx, eccl_thread *t);
    /* Gives the processor to another runnable thread, if any, and returns.
     * A caller that has spun a while calls it between polls: with more
     * ranks than cores, the rank it waits for may need this core. */
    void (*yield)(void *ctx);
} eccl_sync_ops;

/* ---- dev: where tensors live ---------------------------------------------
 * Host memory in the real CPU backend; device memory or phantom buffers
 * elsewhere. Core never touches tensor bytes except through these, nor
 * through net send/recv when is_phantom says a buffer is phantom. */
typedef struct eccl_dev_ops {
    size_t size;
    /* Staging memory usable by send/recv and by copy/reduce. */
    eccl_result (*alloc)(void *ctx, size_t bytes, void **out);
    void (*free)(void *ctx, void *p);
    void (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
    /* dst[i] = dst[i] (op) src[i] for i < count; AVG reduces as SUM. */
    void (*reduce)(void *ctx, void *dst, const void *src, size_t count,
                   eccl_dtype dtype, eccl_op op);
    /* x[i] = x[i] / divisor (AVG's final step). */
    void (*scale_div)(void *ctx, void *x, size_t count, eccl_dtype dtype,
                      uint32_t divisor);
    /* Added later (check `size`, or use eccl_dev_is_phantom); may be NULL.
     * 1 when p points into phantom memory: an address with no bytes behind
     * it (the simulator's scale runs, where sizes travel and bytes do not).
     * copy/reduce/scale_div accept phantom pointers and touch nothing there;
     * a DATA payload read from or written to one goes to the net as a NULL
     * iov base / a NULL recv buffer, never dereferenced. */
    int (*is_phantom)(void *ctx, const void *p);

    /* ---- device tensors (added later; check `size`, or use
     * eccl_dev_has_devices). NULL in an env whose tensors are all host
     * memory. Core never reads or writes device memory itself: a collective
     * on device buffers runs on a pinned host mirror (core/comm/stage.c),
     * filled with to_host before and copied back with to_device after. ---- */
    /* What p[0..bytes) is, and on which device. A pointer the host can read
     * is host memory unless a device runtime is already in use and says
     * otherwise; one it cannot read loads the device runtime on first use
     * (ECCL_ERR_UNSUPPORTED when there is none, ECCL_ERR_INVALID_ARG when
     * the runtime does not know the pointer either). May block (loading). */
    eccl_result (*mem_kind)(void *ctx, const void *p, size_t bytes, eccl_mem_kind *kind,
                            int *device);
    /* Pinned host memory for a mirror of `bytes` (cached: freeing keeps a
     * few for the next call). Only after mem_kind reported a device. */
    eccl_result (*host_alloc)(void *ctx, size_t bytes, void **out);
    void (*host_free)(void *ctx, void *p, size_t bytes);
    /* host[0..bytes) = dev[0..bytes) on `device`, read after all work the
     * caller queued on `stream` (a cudaStream_t; NULL: the legacy default
     * stream) so far. Blocks until the bytes are on the host.
     * ECCL_ERR_DEVICE: the copy failed (host untouched or partly written). */
    eccl_result (*to_host)(void *ctx, int device, void *stream, void *host, const void *dev,
                           size_t bytes);
    /* dev[0..bytes) = host[0..bytes), then makes `stream` wait for it (work
     * the caller queues there later sees the bytes). Blocks until written. */
    eccl_result (*to_device)(void *ctx, int device, void *stream, void *dev, const void *host,
                             size_t bytes);

    /* ---- device-resident ring (added later; check eccl_dev_has_dring) ----
     * A large plain all-reduce on device buffers runs its ring on the
     * device buffers themselves: partials leave through pinned send slots
     * (d_copy to host, then d_sync: the slot is sent once its bytes are
     * there), arrive in pinned staging and are reduced into the device
     * output by a kernel on the library's stream, and the restore backup is
     * device memory. All d_* work is queued on the library's stream of
     * `device`, in call order, and returns at once; d_sync waits for it
     * and reports a failure of any of it (ECCL_ERR_DEVICE). */
    /* Device memory on `device` (the restore backup). */
    eccl_result (*d_alloc)(void *ctx, int device, size_t bytes, void **out);
    void (*d_free)(void *ctx, void *p);
    /* dst = src; either side device or pinned host memory. */
    eccl_result (*d_copy)(void *ctx, int device, void *dst, const void *src, size_t bytes);
    /* dst (device) = dst op src (device or pinned host): eccl_reduce's bits. */
    eccl_result (*d_reduce)(void *ctx, int device, void *dst, const void *src, size_t count,
                            eccl_dtype dtype, eccl_op op);
    eccl_result (*d_scale_div)(void *ctx, int device, void *x, size_t count, eccl_dtype dtype,
                               uint32_t divisor);
    eccl_result (*d_sync)(void *ctx, int device);
    /* Makes the library's stream wait for the work queued on `stream` so
     * far (the call's input is read after it), or `stream` wait for the
     * library's (the caller sees the result): NCCL's ordering. */
    eccl_result (*d_order)(void *ctx, int device, void *stream, int library_waits);
} eccl_dev_ops;


/* ---- log ----------------------------------------------------------------- */
enum eccl_log_level {
    ECCL_LOG_NONE = 0,
    ECCL_LOG_ERROR = 1,
    ECCL_LOG_WARN = 2,
    ECCL_LOG_INFO = 3,
    ECCL_LOG_DEBUG = 4,
    ECCL_LOG_TRACE = 5
};

typedef struct eccl_log_ops {
    size_t size;
    /* Emits one finished line (no trailing newline). Thread-safe. */
    void (*write)(void *ctx, int level, const char *line);
} eccl_log_ops;

/* ---- config: settings from the process's surroundings ----------------------
 * How a deployment overrides a knob without a rebuild (the real backend:
 * environment variables). Core cannot read them itself: the simulator runs
 * many ranks in one process, and a setting must come from its scenario,
 * not from whatever the host process's environment holds. */
typedef struct eccl_config_ops {
    size_t size;
    /* Copies the value of setting `name` (e.g. "ECCL_P2P_POOL") into
     * buf[0..len), NUL-terminated, and returns 1; returns 0 if the setting
     * is not set (or its value does not fit in len - 1 bytes). Never
     * blocks; callable from any thread. */
    int (*get)(void *ctx, const char *name, char *buf, size_t len);
} eccl_config_ops;

/* ---- trace: where a communicator's collective trace goes -------------------
 * (core/trace/trace.h, docs/trace.md). The real backend writes a file per
 * dump into ECCL_TRACE_DIR; an env without this table keeps the records
 * but cannot write them out. */
typedef struct eccl_trace_ops {
    size_t size;
    /* Stores one dump, text[0..len) ("eccl-trace 1" ...), of the peer with
     * `peer_id`, its `n`-th; `automatic`: the comm wrote it on its own (a
     * failed call), which an env may turn off. ECCL_OK, or why it could
     * not (ECCL_ERR_SYSTEM, ECCL_ERR_UNSUPPORTED: nowhere to write). */
    eccl_result (*dump)(void *ctx, uint64_t peer_id, uint32_t n, int automatic, const char *text, size_t len);
    /* Optional (NULL or absent): how many times someone outside asked this
     * process for its traces so far (the real backend: a signal, with
     * ECCL_TRACE_SIGNAL). Every communicator writes one when it changes.
     * Never blocks; callable from any thread. */
    uint64_t (*asked)(void *ctx);
} eccl_trace_ops;

/* ---- auth: who may talk to us ------------------------------------------
 * Every connection core opens or accepts starts with a challenge-response
 * on the job's shared secret (proto/auth.h) when the env has this table;
 * the secret itself stays in the backend. */
#define ECCL_AUTH_MAC_BYTES 32u /* HMAC-SHA256 */
typedef struct eccl_auth_ops {
    size_t size;
    /* n fresh, unpredictable bytes (a CSPRNG; a simulator its seeded
     * stream, for runs that repeat). */
    eccl_result (*nonce)(void *ctx, uint8_t *out, size_t n);
    /* The keyed MAC of msg[0..len) under the job's secret. */
    eccl_result (*mac)(void *ctx, const uint8_t *msg, size_t len, uint8_t out[ECCL_AUTH_MAC_BYTES]);
    /* 1 if a[0..n) == b[0..n), in a time that does not depend on where
     * they differ. */
    int (*equal)(void *ctx, const void *a, const void *b, size_t n);
} eccl_auth_ops;

typedef struct eccl_env {
    const eccl_net_ops *net;
    void *net_ctx;
    const eccl_clock_ops *clock;
    void *clock_ctx;
    const eccl_sync_ops *sync;
    void *sync_ctx;
    const eccl_dev_ops *dev;
    void *dev_ctx;
    const eccl_log_ops *log;
    void *log_ctx;
    int log_level;   /* lines above this level are not formatted */
    uint64_t spin_ns;/* a blocked API call polls this long before sleeping */
    char name[32];   /* prefix for log lines, e.g. "master" or "peer 3" */
    /* Added later: NULL means no setting is ever set (eccl_config_get). */
    const eccl_config_ops *config;
    void *config_ctx;
    /* CPUs this process may run on; 0: unknown. A communicator whose host
     * runs more than four times as many ranks does not spin (sched/engine.h). */
    uint32_t ncpus;
    /* Added later: NULL means trace dumps have nowhere to go. */
    const eccl_trace_ops *trace;
    void *trace_ctx;
    /* Added later: NULL means connections are not authenticated. */
    const eccl_auth_ops *auth;
    void *auth_ctx;
} eccl_env;

/* Setting `name` of env's config into buf[len]: 1 if set, 0 if not (or
 * there is no config table). */
static inline int eccl_config_get(const eccl_env *env, const char *name, char *buf, size_t len)
{
    const eccl_config_ops *c = env->config;
    if (!c || c->size < offsetof(eccl_config_ops, get) + sizeof c->get || !c->get || len == 0)
        return 0;
    return c->get(env->config_ctx, name, buf, len);
}

/* Whether env's dev has phantom memory at all: only then can a buffer be
 * phantom (an older or real dev table has no is_phantom). */
static inline int eccl_dev_has_phantom(const eccl_env *env)
{
    const eccl_dev_ops *d = env->dev;
    return d->size >= offsetof(eccl_dev_ops, is_phantom) + sizeof d->is_phantom &&
           d->is_phantom != NULL;
}

/* Whether env's dev can hold device tensors at all (an older or host-only
 * dev table has no mem_kind). */
static inline int eccl_dev_has_devices(const eccl_env *env)
{
    const eccl_dev_ops *d = env->dev;
    return d->size >= offsetof(eccl_dev_ops, to_device) + sizeof d->to_device && d->mem_kind != NULL;
}

/* Whether env's dev can run the device-resident ring (eccl_dev_ops.d_*). */
static inline int eccl_dev_has_dring(const eccl_env *env)
{
    const eccl_dev_ops *d = env->dev;
    return eccl_dev_has_devices(env) &&
           d->size >= offsetof(eccl_dev_ops, d_order) + sizeof d->d_order && d->d_order != NULL;
}

/* Bookkeeping a coordinator did (eccl_clock_ops.work), where the env
 * counts it; a no-op elsewhere. */
static inline void eccl_clock_work(const eccl_env *env, uint64_t units)
{
    const eccl_clock_ops *c = env->clock;
    if (c->size >= offsetof(eccl_clock_ops, work) + sizeof c->work && c->work)
        c->work(env->clock_ctx, units);
}

/* Whether env's net says apart which host payloads go as bulk
 * (eccl_net_ops.bulk_min_host). */
static inline int eccl_net_has_bulk_min_host(const eccl_env *env)
{
    const eccl_net_ops *n = env->net;
    return n->size >= offsetof(eccl_net_ops, bulk_min_host) + sizeof n->bulk_min_host && n->bulk_min_host != NULL;
}

/* Whether env's net can move payloads as bulk (eccl_net_ops.isend...). */
static inline int eccl_net_has_bulk(const eccl_env *env)
{
    const eccl_net_ops *n = env->net;
    return n->size >= offsetof(eccl_net_ops, test) + sizeof n->test && n->test != NULL;
}

/* Whether env's net can send device memory as bulk on some conns. */
static inline int eccl_net_has_device_bulk(const eccl_env *env)
{
    const eccl_net_ops *n = env->net;
    return eccl_net_has_bulk(env) &&
           n->size >= offsetof(eccl_net_ops, isend_device) + sizeof n->isend_device && n->isend_device != NULL;
}

/* Whether env's net knows how long received bytes were on the wire. */
static inline int eccl_net_has_wire_time(const eccl_env *env)
{
    const eccl_net_ops *n = env->net;
    return n->size >= offsetof(eccl_net_ops, wire_time) + sizeof n->wire_time && n->wire_time != NULL;
}

static inline int eccl_net_has_peer_addr(const eccl_env *env)
{
    const eccl_net_ops *n = env->net;
    return n->size >= offsetof(eccl_net_ops, peer_addr) + sizeof n->peer_addr && n->peer_addr != NULL;
}

/* Whether p is phantom memory of env's dev. */
static inline int eccl_dev_is_phantom(const eccl_env *env, const void *p)
{
    return eccl_dev_has_phantom(env) && env->dev->is_phantom(env->dev_ctx, p);
}

#endif /* ECCL_CORE_ENV_H */
