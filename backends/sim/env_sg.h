/* The simulator backend: an eccl_env over SimGrid S4U (C API, 3.32).
 *
 * Every simulated rank lives in one process, so nothing here is global: one
 * `eccl_sg_world` per simulation owns the address registry ("HOST:PORT" ->
 * listener) and the list of live envs, and every env points to it. An env is
 * bound to the SimGrid host of the actor that creates it: its receiver actor,
 * and every thread core spawns through it, run on that host, so turning the
 * host off (eccl_sg_world_kill_host) takes the whole rank down.
 *
 * All functions must be called from inside a SimGrid actor, except
 * eccl_sg_world_create / eccl_sg_world_destroy (before and after
 * simgrid_run).
 */
#ifndef ECCL_BACKENDS_SIM_ENV_SG_H
#define ECCL_BACKENDS_SIM_ENV_SG_H

#include <stdint.h>

#include <simgrid/forward.h>

#include "env.h"

typedef struct eccl_sg_world eccl_sg_world;

/* log_level: core lines above it are dropped (ECCL_LOG_*). Lines go to
 * stdout, prefixed with the simulated time and the env's name. */
eccl_result eccl_sg_world_create(int log_level, eccl_sg_world **out);
/* After simgrid_run returned. Envs of killed hosts are freed here. */
void eccl_sg_world_destroy(eccl_sg_world *w);

/* The platform's host of that name (NULL: none), in O(1) for node-K (the
 * hosts of eccl-sim's platforms), SimGrid's lookup for the rest. Call once
 * the platform is loaded: the table is made on the first call. */
sg_host_t eccl_sg_world_host(eccl_sg_world *w, const char *name);

/* The simulated device (dev_sim) of every env the world creates from now on.
 *
 * Host buffers (phantom = 0, the default): dev memory is host memory, copy
 * and reduce move real bytes; correctness runs.
 *
 * Phantom buffers (phantom = 1; scale runs): the world reserves one region
 * of address space with no access rights and no memory behind it
 * (PROT_NONE, MAP_NORESERVE). eccl_sg_phantom_alloc and every dev alloc
 * above ECCL_SG_PHANTOM_MIN bytes hand out addresses in it; copy, reduce
 * and scale_div touch nothing there and the net carries only the sizes of
 * payloads read from or written to it (core asks through
 * eccl_dev_ops.is_phantom). A byte touched there is a crash, never a silent
 * cost: phantom runs prove that nothing reads or writes tensor bytes.
 * Smaller dev allocations stay real, because small collectives on host
 * buffers (the worker loop's step agreement) still carry real values.
 *
 * In both modes copy costs bytes / copy_Bps and reduce and scale_div
 * count x dtype size / reduce_Bps of simulated time (0: free), slept by
 * the calling actor (see dev_cost in env_sg.c for why a sleep). */
#define ECCL_SG_PHANTOM_MIN 4096
typedef struct eccl_sg_dev_cfg {
    int phantom;
    double reduce_Bps;
    double copy_Bps;
    /* Simulated CUDA devices (devices = 1; scenario key `buffers = cuda`):
     * a rank may own an eccl_sg_device (below) and create its comms on it;
     * their env's dev table then has the device ops of env.h (mem_kind,
     * host_alloc, host_free, to_host, to_device), so core stages that
     * rank's device tensors through host mirrors as it does with CUDA.
     * A to_host / to_device costs dev_copy_latency_s + bytes /
     * dev_copy_Bps of simulated time, slept by the calling actor. With
     * devices, dev_copy_Bps must be > 0 and dev_copy_latency_s >= 0. */
    int devices;
    double dev_copy_Bps;
    double dev_copy_latency_s;
    /* Nonzero (scenario key `device_ring = 1`): the ranks' envs answer the
     * setting ECCL_DEVICE_RING_MIN_BYTES with it, so plain all-reduces that
     * large run core's device-resident ring (the d_* dev ops: device
     * copies cost a bus copy, kernels reduce_Bps, host-side waits nothing:
     * every simulated device call is done when it returns). */
    size_t resident_min;
    /* Phantom mode: bytes of address space to reserve for phantom buffers
     * (0: 4 GiB, four buffers of the worker's largest all-reduce). A
     * program that holds many big phantom buffers at once (eccl-sim's
     * bench with `concurrent` outputs of 1 GiB) asks for room enough that
     * they get distinct addresses. */
    size_t phantom_region;
} eccl_sg_dev_cfg;

/* Before the first env is created (outside or inside simgrid_run). */
eccl_result eccl_sg_world_set_dev(eccl_sg_world *w, const eccl_sg_dev_cfg *cfg);
/* The device the world's envs get. */
const eccl_sg_dev_cfg *eccl_sg_world_dev(const eccl_sg_world *w);
/* Phantom mode only: `bytes` of phantom memory (nothing to free; addresses
 * are reused once the region wraps, and that is harmless since no byte is
 * ever there). ECCL_ERR_INVALID_ARG in host mode or above the region's
 * half (two buffers of one call must not overlap). */
eccl_result eccl_sg_phantom_alloc(eccl_sg_world *w, size_t bytes, void **out);
/* Whether p lies in the world's phantom region. */
int eccl_sg_is_phantom(const eccl_sg_world *w, const void *p);

/* ---- simulated devices (devices = 1) ---------------------------------------
 * One per rank, as one GPU per process. Device memory is an address range
 * in a region the world reserves with no access rights (PROT_NONE,
 * MAP_NORESERVE): a device pointer is not host-addressable, so a byte read
 * or written there by anything but the copies below is a SIGSEGV, as it
 * would be with real device memory. With host bytes (phantom = 0) each
 * allocation has a backing store the device keeps apart (the simulated
 * HBM), which only to_host / to_device (core) and eccl_sg_device_read /
 * eccl_sg_device_write (the program) copy through; with phantom bytes
 * there is none, and the copies move nothing (their cost is charged all
 * the same). The world owns every device (freed with it): a device of a
 * killed rank outlives its actors harmlessly. */
typedef struct eccl_sg_device eccl_sg_device;

/* A new device, device number 0 of its rank. ECCL_ERR_INVALID_ARG when the
 * world has no devices (eccl_sg_world_set_dev with devices = 0). */
eccl_result eccl_sg_device_create(eccl_sg_world *w, eccl_sg_device **out);
/* `bytes` of device memory (cudaMalloc); ECCL_ERR_NO_MEMORY when the
 * world's device region is full (its address space is never reused). */
eccl_result eccl_sg_device_alloc(eccl_sg_device *d, size_t bytes, void **out);
void eccl_sg_device_free(eccl_sg_device *d, void *p);
/* The program's own copies (its kernels filling a tensor, reading a result
 * back to check it): dev[0..bytes) = host, host = dev[0..bytes). Free of
 * simulated time: they stand for work outside the collective (a training
 * step's kernels), which the scenario's `step` models. ECCL_ERR_INVALID_ARG
 * when the range is not inside one allocation of d. */
eccl_result eccl_sg_device_write(eccl_sg_device *d, void *dev, const void *host, size_t bytes);
eccl_result eccl_sg_device_read(eccl_sg_device *d, void *host, const void *dev, size_t bytes);

/* The transport of comms' peer links (the master's control path is always
 * the stream net, as in the real backend). Scenario key `transport`.
 *
 * ibv = 0 (default): net_sg's streams carry everything.
 * ibv = 1: core's net_ibv protocol (core/net/ibv.c), the very code the real
 * backend runs over libibverbs, over net_sg's streams and a simulated RDMA
 * NIC per env (backends/sim/verbs_sg.c): payloads of at least min_bytes are
 * RDMA writes into registered memory, moved between the ranks' hosts as
 * SimGrid communications. qps / min_bytes / chunk_bytes answer the
 * settings ECCL_IB_QPS / ECCL_IB_MIN_BYTES / ECCL_IB_CHUNK_BYTES of those
 * envs (0: the protocol's default); no setting comes from the process's
 * environment. Needs <infiniband/verbs.h> at build time
 * (ECCL_ERR_UNSUPPORTED without). */
typedef struct eccl_sg_net_cfg {
    int ibv;
    unsigned qps;
    size_t min_bytes;
    size_t chunk_bytes;
} eccl_sg_net_cfg;
/* Before the first comm is created. */
eccl_result eccl_sg_world_set_net(eccl_sg_world *w, const eccl_sg_net_cfg *cfg);
/* RDMA writes applied at their targets so far (transport ibv). */
uint64_t eccl_sg_world_rdma_writes(const eccl_sg_world *w);
/* Messages the net put on the wire so far (frames, handshakes, resets):
 * what a simulation's wall time is mostly made of. */
uint64_t eccl_sg_world_messages(const eccl_sg_world *w);
/* Connections opened so far, and the times an actor blocked (on a
 * condition, for an arrival, in a sleep of CPU or device time): with
 * messages, the simulated events a run is made of. Deterministic for a
 * seed, so the scale guard (tests/sim/check_scale_guard.sh) compares them
 * with a committed baseline. */
uint64_t eccl_sg_world_conns(const eccl_sg_world *w);
uint64_t eccl_sg_world_waits(const eccl_sg_world *w);

/* CPU time the master spends on each control message it sends or takes
 * (a syscall, decoding, its bookkeeping), in seconds; 0 (the default) is
 * free. Applies to masters created from now on. The master's thread
 * sleeps it before each send, and for every message its env took since,
 * when it next waits for the net, so a master's messages are handled one
 * after another, as by a real single-threaded master: a broadcast to N
 * peers takes N x cost, and N peers registering at once queue up behind
 * each other. Ranks' own
 * messages cost nothing here: their cost is dominated by the network and
 * the device, which the platform and dev_sim model. */
eccl_result eccl_sg_world_set_master_msg_cost(eccl_sg_world *w, double seconds);

/* Whether communicators made in this world run a progress thread (setting
 * ECCL_PROGRESS_THREAD, default on). Off, a rank is one actor fewer (a
 * quarter less memory at scale) and progresses only inside its calls, as
 * a workload that calls back to back needs. */
void eccl_sg_world_set_progress_thread(eccl_sg_world *w, int on);
/* Hooks on every communicator's env of the world: `created` right after the
 * env exists, before the comm uses it (a failure fails the comm's creation),
 * `destroying` before it goes (the scenario engine puts the chaos env
 * around it and takes it off). Either may be NULL; h NULL: none. */
typedef struct eccl_sg_env_hooks {
    void *ctx;
    eccl_result (*created)(void *ctx, eccl_env *env);
    void (*destroying)(void *ctx, eccl_env *env);
} eccl_sg_env_hooks;
void eccl_sg_world_set_env_hooks(eccl_sg_world *w, const eccl_sg_env_hooks *h);

/* Setting ECCL_ALGO of communicators made in this world from now on
 * (coll/dispatch.h: "broadcast=binomial,reduce=chain"; NULL or "": not
 * set, the dispatcher picks). ECCL_ERR_INVALID_ARG if it is 256 bytes or
 * longer. */
eccl_result eccl_sg_world_set_algo(eccl_sg_world *w, const char *spec);

/* How messages between envs are timed:
 * - FLOW (the default): each is a SimGrid comm on its route, sharing
 *   bandwidth with every other flow there (CM02's max-min), taken by a
 *   receiver actor per env (3 actors a rank with the progress thread).
 * - LATENCY: each arrives after its route's latency + size / bandwidth, as
 *   a flow alone on its route would, straight into its destination's queue:
 *   no SimGrid comm and no receiver actor. For control-plane runs at scale
 *   (the bootstrap of scenarios/scale), where frames are small and the
 *   cost of a comm, not the network, bounds what can be simulated. Bulk
 *   transfers need FLOW: here they never contend.
 * Set before the first env (ECCL_ERR_BUSY after). */
typedef enum eccl_sg_net_model { ECCL_SG_NET_FLOW, ECCL_SG_NET_LATENCY } eccl_sg_net_model;
eccl_result eccl_sg_world_set_net_model(eccl_sg_world *w, eccl_sg_net_model model);

/* FLOW model: messages to a rank's env with fewer than `bytes` bytes of
 * payload (control frames, small collectives' data) travel as under
 * LATENCY (route latency + size / narrowest link, no SimGrid comm), the
 * rest as flows. A small message gets next to nothing from sharing a link
 * (its bytes are a rounding error of the latency), but as a flow it is a
 * variable of every link on its route, and at scale the solver that
 * shares them walks one huge component at each message's start and end.
 * A conn's messages stay in order whichever path each takes (per-conn
 * sequence numbers). Only for runs whose links keep their capacity and
 * state and whose streams are not paced: no slow_link, link_off,
 * partition, tcp_window or RDMA (the scenario engine refuses the key
 * there and leaves it 0). 0 (the default): every message is a flow.
 * Messages to a coordinator (master, relay) are flows either way: its
 * receiver actor takes them in put order. */
void eccl_sg_world_set_flow_min_bytes(eccl_sg_world *w, size_t bytes);

/* The real backend moves a payload of 256 KiB and up between processes of
 * one host with one copy out of the sender's memory (backends/real/net_shm.c,
 * ECCL_SHM_MIN_BYTES's default), announced and acknowledged by two control
 * datagrams. Its twin here prices, from now on, a stream message of at
 * least ECCL_SG_SHM_MIN_BYTES between two ranks of one host as the
 * route's latency three times (the message, the announcement, the
 * acknowledgement) plus its bytes at `bytes_per_s` (the host's memory copy
 * rate), instead of at the loopback's bandwidth; smaller messages and other
 * routes are unchanged. 0 (the default): not modelled, every message costs
 * what its route says. */
#define ECCL_SG_SHM_MIN_BYTES (256u << 10)
void eccl_sg_world_set_shm(eccl_sg_world *w, double bytes_per_s);
/* net_tls's price: each byte an env's conns send, and each one they
 * receive, costs the calling actor 1/bytes_per_s seconds of its time (a
 * rank encrypting and decrypting on its one progress thread); <= 0: off
 * (the default). Before the first env. */
void eccl_sg_world_set_tls(eccl_sg_world *w, double bytes_per_s);

/* Communicators made in this world from now on keep collective traces
 * (ECCL_TRACE_RECORDS, the library's default) and write every dump
 * (docs/trace.md) as DIR/eccl-trace-<peer>-<env>-<n>.txt, <env> the
 * simulated process's env id, so a run writes the same files every time.
 * DIR must exist. NULL (the default): they keep none (a 96K-rank run would
 * hold some 55 MB of records) and a dump is ECCL_ERR_UNSUPPORTED. */
eccl_result eccl_sg_world_set_trace_dir(eccl_sg_world *w, const char *dir);

/* The connection-pool size of communicators made in this world from now on
 * (setting ECCL_P2P_POOL, 1..64; 0: not set, the library's default of 1).
 * Concurrent collectives then run over separate connections, each its own
 * TCP stream (scenario key `pool`). ECCL_ERR_INVALID_ARG above 64. */
eccl_result eccl_sg_world_set_p2p_pool(eccl_sg_world *w, unsigned pool);

/* The TCP window of every stream from now on, in bytes (0: none, the
 * default: a stream is as fast as its share of the links). With a window
 * W, a connection whose route has one-way latency L sends at most W / (2L)
 * bytes a second on average: its sends are paced (a send is refused, 0
 * bytes taken, until the bytes sent before have drained at that rate;
 * write readiness comes back when they have), so one message of at most
 * 4 MiB goes out at a time and the stream's rate over any longer stretch
 * is at most window / RTT. Streams still share their links' capacity, as
 * every SimGrid flow does (scenario key `tcp_window`; the model and its
 * limits: scenarios/README.md, "WAN TCP model"). The caller also sets
 * SimGrid's network/TCP-gamma to W, which bounds each message alike. */
void eccl_sg_world_set_tcp_window(eccl_sg_world *w, double bytes);

/* An env on the calling actor's host. Free with eccl_sg_env_destroy (the
 * release function core objects call). */
eccl_result eccl_sg_env_create(eccl_sg_world *w, const char *name, eccl_env **out);
/* The same, charged as a master's env is (eccl_sg_world_set_master_msg_cost):
 * for a program that stands in for eccl's master, such as the NCCL 2.x
 * root of eccl-sim's baseline, so that both pay the same CPU time per
 * message. */
eccl_result eccl_sg_env_create_master(eccl_sg_world *w, const char *name, eccl_env **out);
void eccl_sg_env_destroy(eccl_env *env);

/* Whether env's `wait` reports listener l while connections wait in its
 * backlog (on, the default) or not at all (off). Core never turns it off:
 * its progress engine services every listener. A program that blocks on one
 * socket at a time, as NCCL's bootstrap does with blocking system calls,
 * turns off what it is not blocked on, or a listener with a backlog would
 * make every wait return at once. Call from the env's owner. */
void eccl_sg_listener_set_interest(eccl_env *env, eccl_listener *l, int on);

/* What one message of `bytes` stream bytes costs from host `from` to host
 * `to` over net_sg when nothing else shares the route, as the CM02 model
 * eccl-sim loads charges it: *latency_s, the route's latency, and *wire_s,
 * the time its bytes and net_sg's per-message header take on the route's
 * narrowest link (it arrives latency + wire after it is sent). -1 when a
 * host is unknown, else 0. Callable outside simgrid_run once the platform
 * is sealed. */
int eccl_sg_route_cost(const char *from, const char *to, size_t bytes, double *latency_s,
                       double *wire_s);

/* The public objects, built around a fresh sim env (as api_real.c does for
 * the real backend). */
eccl_result eccl_sg_master_create(eccl_sg_world *w, const char *listen_addr,
                                  eccl_master **out);
/* A relay of the coordinator's tree on the calling actor's host, charged
 * the master's CPU time per message (eccl_sg_world_set_master_msg_cost). */
eccl_result eccl_sg_relay_create(eccl_sg_world *w, const char *listen_addr, const char *parent_addr,
                                 eccl_relay **out);
eccl_result eccl_sg_comm_create(eccl_sg_world *w, const eccl_comm_params *params,
                                eccl_comm **out);
/* The same on the rank's simulated device d: device pointers of d passed to
 * its collectives are staged through host mirrors (core/comm/stage.h).
 * d NULL: eccl_sg_comm_create. */
eccl_result eccl_sg_comm_create_on(eccl_sg_world *w, eccl_sg_device *d,
                                   const eccl_comm_params *params, eccl_comm **out);

/* Crashes a host: every conn of every env on it is reset (the far end's
 * recv/send return ECCL_ERR_CLOSED at once, as after a TCP RST), its
 * listeners stop accepting (connects are refused), then the host is turned
 * off, which kills all its actors. Call from an actor on another host. */
void eccl_sg_world_kill_host(eccl_sg_world *w, const char *host);

/* Crashes one process on a host that stays on (several ranks per host):
 * the actor `pid` and every actor it started, directly or not, on its host
 * (a rank's worker, its progress engine, its envs' receivers). Every env
 * whose receiver is one of them is reset as by eccl_sg_world_kill_host (the
 * far end's recv/send return ECCL_ERR_CLOSED at once, its listeners refuse)
 * and never receives again; then those actors are killed. The host, and
 * every other actor on it, go on. No-op when `pid` has ended. Call from an
 * actor outside the process. */
void eccl_sg_world_kill_process(eccl_sg_world *w, aid_t pid);

/* Turns a host off silently: no conn is reset, no listener refuses. Its
 * actors die with it; nothing sent to it ever arrives and nothing more
 * comes from it, so peers notice only through their own timers (as with a
 * power cut or a kernel panic on a real network). Call from an actor on
 * another host. */
eccl_result eccl_sg_world_host_off(eccl_sg_world *w, const char *host);
/* Turns the host back on, empty: its old envs stay dead, whatever runs
 * there now starts from scratch (a new process). */
eccl_result eccl_sg_world_host_on(eccl_sg_world *w, const char *host);

/* Turns a link off or back on. While a link is off, a message whose route
 * crosses it waits in its conn (a TCP send buffer retransmitting into the
 * void) and goes when the whole route is up again, in stream order; a
 * message with no conn (a refusal) is lost. Messages already on the wire
 * when the link goes off still arrive (they are past the cut). SimGrid's
 * own link state is not used: its C API cannot set it. */
eccl_result eccl_sg_world_set_link(eccl_sg_world *w, sg_link_t link, int on);

/* printf-style line to stdout with the simulated-time prefix; for programs. */
void eccl_sg_printf(const char *who, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Simulated nanoseconds since the start of the simulation. */
uint64_t eccl_sg_now_ns(void);

#endif /* ECCL_BACKENDS_SIM_ENV_SG_H */
