/* Internal to backends/sim: the objects env_sg.c and net_sg.c share.
 *
 * Concurrency model. SimGrid actors are cooperative: exactly one runs at a
 * time and control changes hands only inside a simcall (mutex, cond, comm,
 * sleep, actor ops). Net state (conn queues, flags, the registry) is only
 * read and written in stretches of code without a simcall in the middle, so
 * it needs no lock. A waiter checks readiness and queues itself on the cv
 * with no simcall in between, so a notification cannot fall into that gap.
 */
#ifndef ECCL_BACKENDS_SIM_SG_INTERNAL_H
#define ECCL_BACKENDS_SIM_SG_INTERNAL_H

#include <simgrid/actor.h>
#include <simgrid/comm.h>
#include <simgrid/host.h>
#include <simgrid/link.h>
#include <simgrid/mailbox.h>
#include <simgrid/mutex.h>
#include <simgrid/semaphore.h>

#include "env_sg.h"
#include "idmap.h"

typedef struct sg_env sg_env;

/* A condition variable built from one semaphore per waiter. SimGrid 3.32's
 * sg_cond_wait_for cannot be used from C: it wraps the mutex the caller
 * already holds in a std::unique_lock, which locks it a second time, so the
 * cond wait releases only one level and the mutex stays held for the whole
 * timed wait (every other actor needing it stalls until the timeout). A
 * waiter queues itself (plain memory) before unlocking, and a semaphore
 * remembers a release that comes before the acquire: no lost wake-up. */
typedef struct sg_waiter sg_waiter;
typedef struct sg_cv {
    sg_waiter *head;
    /* The last waiter's semaphore, kept for the next: a cv rarely has two
     * waiters at once, and making and freeing a SimGrid semaphore on every
     * wait was four allocations each, about a tenth of a scale run. A
     * semaphore comes back from a wait at 0 (one release, one acquire). */
    sg_sem_t spare;
} sg_cv;

/* A mutex in plain memory. sg_mutex_lock and sg_mutex_unlock are simcalls,
 * each a round trip through SimGrid's maestro (two context switches and a
 * scheduling round) even when nobody else wants the mutex, and core takes
 * its engine's mutex several times per message: mutexes were half of all
 * simcalls of a scale run. Since actors only lose control inside simcalls,
 * a flag suffices while there is no contention; a locker that finds the
 * mutex held queues itself and sleeps on a semaphore, and unlock hands the
 * mutex straight to the first in line (FIFO, as SimGrid's own mutex does).
 * Only actors of one process (a comm's or a master's) share one. */
typedef struct sg_lock_waiter sg_lock_waiter;
typedef struct sg_lock {
    int held;
    sg_lock_waiter *head, *tail;
} sg_lock;
void eccl_sg_lock(sg_lock *m);
void eccl_sg_unlock(sg_lock *m);

/* `m` (NULL: none) held on entry and exit. timeout_s < 0: no timeout.
 * Returns 1 if it timed out. */
int eccl_sg_cv_wait(sg_cv *cv, sg_lock *m, double timeout_s);
/* Wakes every waiter; the mutex need not be held. */
void eccl_sg_cv_broadcast(sg_cv *cv);
/* Frees what the cv keeps (no waiter may be left). */
void eccl_sg_cv_fini(sg_cv *cv);

/* Per-host fault state, hung on the host with sg_host_set_data (made on the
 * first fault of that host; freed with the world). `boot` grows every time
 * the host goes off: an env belongs to the boot it was made in, so a message
 * for an env of an older boot can never arrive and is dropped. */
typedef struct sg_host_state {
    sg_host_t host;
    int boot;
    struct sg_host_state *next; /* in world->host_states */
} sg_host_state;

/* Per-link fault state, hung on the link with sg_link_set_data. SimGrid
 * 3.32's C API cannot turn a link off (only s4u::Link can), so eccl keeps
 * the state and net_sg consults it on every send while any link is off. */
typedef struct sg_link_state {
    sg_link_t link;
    int off;
    struct sg_link_state *next; /* in world->link_states */
} sg_link_state;

/* Something other than a conn that `wait` reports: a simulated NIC's
 * completion channel (verbs_sg.c), reported with `user` while it holds
 * `pending` events nobody took yet. Owned by its watcher; linked into the
 * env's list from eccl_net_sg_watch to eccl_net_sg_unwatch. */
typedef struct sg_event_source {
    void *user;
    int pending;
    struct sg_event_source *next, *prev;
} sg_event_source;

struct sg_nic;

struct eccl_sg_world {
    int log_level;
    eccl_sg_env_hooks env_hooks; /* on comms' envs (eccl_sg_world_set_env_hooks) */
    int links_off;           /* links now off: routes are only checked when > 0 */
    sg_host_state *host_states;
    sg_link_state *link_states;
    uint64_t next_id;        /* env, conn and listener ids; never reused */
    unsigned next_port;      /* "HOST:0" binds get ports from here */
    sg_env *envs;            /* every env not yet destroyed, dead ones too */
    sg_idmap env_ids;        /* id -> sg_env, every env of envs */
    sg_idmap conn_ids;       /* id -> eccl_conn, every conn not freed */
    sg_idmap host_rx;        /* (uintptr_t)host -> its sg_host_rx (net_sg.c) */
    struct sg_host_rx *host_rx_list; /* every one made, to free them */
    sg_idmap registry;       /* sg_idmap_strkey(addr) -> bound listeners with
                                that key (chained by reg_next) */
    sg_idmap outboxes;       /* actor pid -> its sg_outbox (net_sg.c) */
    struct sg_outbox *outbox_list; /* every outbox, to free the leftovers */
    eccl_sg_dev_cfg dev;     /* dev_sim of every env from now on */
    double master_msg_cost_s;/* msg_cost_s of masters from now on */
    int no_progress_thread;  /* ranks' ECCL_PROGRESS_THREAD = 0 */
    char algo[256];          /* ranks' ECCL_ALGO ("": not set) */
    unsigned p2p_pool;       /* ranks' ECCL_P2P_POOL (0: not set) */
    double tcp_window;       /* bytes a stream may send per RTT (0: no cap; net_sg.c, pacing) */
    unsigned char *phantom_base; /* reserved, inaccessible region (phantom mode) */
    size_t phantom_size;
    size_t phantom_next;     /* bump offset of the next phantom allocation */
    unsigned char *devmem_base; /* reserved, inaccessible: device memory (devices) */
    size_t devmem_size;
    size_t devmem_next;      /* bump offset of the next device allocation */
    struct eccl_sg_device *devices; /* every device created, freed with the world */
    eccl_sg_net_cfg net;     /* the transport of comms' envs from now on */
    uint64_t rdma_writes;    /* RDMA writes applied at their target (verbs_sg.c) */
    uint64_t messages;       /* net_sg messages put on the wire (post_as) */
    uint64_t conns;          /* connections opened (sg_connect) */
    uint64_t waits;          /* times an actor blocked: on a condition, for
                                an arrival, or in a sleep of CPU time */
    /* net model "latency" (eccl_sg_world_set_net_model): a message arrives
     * after its route's latency + size / bandwidth, with no flow sharing,
     * straight into the destination env's arrivals (no SimGrid comm, no
     * receiver actor). */
    int latency_net;
    /* Flow model, a rank's small messages (eccl_sg_world_set_flow_min_bytes):
     * a message to a rank with fewer payload bytes than this takes the
     * latency net's path (0: every message is a flow). */
    size_t flow_min_bytes;
    /* net_shm's twin (eccl_sg_world_set_shm): a stream message of
     * ECCL_SG_SHM_MIN_BYTES or more between ranks of one host is charged
     * at this bandwidth plus a control round trip; 0: the loopback's. */
    double shm_bw;
    /* net_tls's price (eccl_sg_world_set_tls): every byte a conn sends or
     * receives costs its rank's progress actor 1/tls_Bps seconds (the
     * encryption and the decryption); 0: none. */
    double tls_Bps;
    /* Where communicators write their collective traces
     * (eccl_sg_world_set_trace_dir); NULL: they keep no records. */
    char *trace_dir;
    uint64_t arrival_seq;    /* ties between equal arrival times: send order */
    struct sg_route_memo *route_memo; /* latency net: (host, host) -> cost */
    /* node-K -> its host, made on the first lookup: SimGrid 3.32 finds a
     * host by name by walking every zone (tens of microseconds at 12,288
     * hosts, once per rank started). */
    sg_host_t *node_hosts;
    size_t n_node_hosts;
};

struct sg_env {
    eccl_env env; /* first: core's eccl_env * is an sg_env * */
    eccl_sg_world *w;
    uint64_t id;
    sg_host_t host;
    int boot;               /* the host's boot when the env was made */
    aid_t owner;            /* the actor that made it */
    sg_mailbox_t mbox;      /* its address: every frame for a conn of this
                               env is put here, or in lanes[] (below) */
    /* Lanes (a master's env): SimGrid 3.32 keeps a mailbox's puts in a
     * circular buffer and takes each get's match out of its front by
     * shifting every later entry down (two refcount updates each), so a
     * mailbox with K messages in flight costs O(K) a get. A master takes
     * N ranks' messages at once (13% of a 32k run, in those shifts). Put
     * number i goes to lane i % nlanes and the receiver takes number
     * rx_taken from lane rx_taken % nlanes: the same messages, in the same
     * order (a lane keeps its puts in put order), from queues nlanes times
     * shorter. lanes[0] is mbox; lanes is NULL with one lane. A lane takes
     * puts only once the receiver is its permanent receiver (a put before
     * that would wait unstarted for a get): until the receiver has set up
     * every lane, all puts go to mbox, and put number lanes_from is the
     * first spread over the lanes. A put made before the receiver is even
     * mbox's permanent receiver (at time 0) waits in mbox unstarted, and
     * SimGrid gives a get such a put only when no started one is there:
     * the receiver does the same (rx_early). */
    sg_mailbox_t *lanes;
    unsigned nlanes;
    uint64_t lanes_from;    /* UINT64_MAX until the lanes are set up */
    int rx_ready;           /* the receiver is mbox's permanent receiver */
    uint64_t rx_early;      /* lanes: puts made before that, not taken yet */
    uint64_t rx_posted;     /* other puts made to this env so far */
    uint64_t rx_taken;      /* of those, taken by the receiver */
    sg_actor_t receiver;    /* moves mbox messages into conns; NULL when the
                               host's shared one does (shared_rx) */
    int shared_rx;          /* mbox is its host's, served by the host's
                               receiver (net_sg.c, "host receivers") */
    sg_cv cv;               /* wait sleeps here (no mutex: a waiter checks
                               and queues itself with no simcall between) */
    eccl_conn *conns;       /* creation order (= id order) */
    eccl_conn *conns_tail;
    eccl_conn **cand;       /* conns that may be ready: wait looks at these
                               only, in id order (= creation order) */
    size_t ncand, cand_cap;
    eccl_listener *listeners;
    uint64_t wake_gen;      /* bumped by wake */
    int wake_pending;       /* a wake nobody consumed yet */
    int dead;               /* its host was killed */
    int rx_done;            /* its receiver took M_STOP and returned */
    double dev_debt_s;      /* device time charged but not slept yet */
    struct eccl_sg_device *device; /* the rank's simulated device, or NULL */
    double msg_cost_s;      /* CPU time per message sent or taken */
    double work_cost_s;     /* CPU time per unit of clock work (a batch entry) */
    double msg_debt_s;      /* of messages taken, not slept yet (sg_wait) */
    double pace_due_s;      /* tcp_window: when the first paced conn wait
                               looked at may send again (-1: none) */
    sg_event_source *sources; /* completion channels wait watches */
    struct sg_nic *nic;     /* the env's simulated RDMA NIC (transport ibv) */
    int ibv;                /* a comm's env in a transport ibv world */
    int data_links;         /* a comm's env: its host-mates' streams are net_shm's (shm_bandwidth) */
    /* Takes a fabric message (eccl_net_sg_fabric_post) in the receiver
     * actor; NULL: such messages are dropped. */
    void (*fabric_rx)(sg_env *e, const void *data, size_t len);
    /* Latency net: messages on their way here, a min-heap by (time, seq);
     * wait takes those whose time has come. */
    struct sg_arrival *arr;
    size_t narr, cap_arr;
    sg_env *next, *prev;    /* in w->envs */
};

/* net_sg.c */
extern const eccl_net_ops eccl_net_sg_ops;
/* Creates the mailbox (nlanes of them: see sg_env.lanes) and starts the
 * receiver actor on e->host. */
eccl_result eccl_net_sg_start(sg_env *e, unsigned nlanes);
/* Stops and joins the receiver. Every conn and listener must be closed. */
void eccl_net_sg_stop(sg_env *e);
/* Frees what a killed env still holds (no simcall). */
void eccl_net_sg_free_dead(sg_env *e);
/* Resets the far end of every conn of `e` and unbinds its listeners. */
void eccl_net_sg_crash(sg_env *e);
/* Waits out every message the calling actor put on the wire and frees its
 * outbox: an actor calls it before it ends, since SimGrid cancels the
 * comms an actor still owns when it ends (net_sg.c, "Outboxes"). */
void eccl_net_sg_drain_self(eccl_sg_world *w);
/* Frees the outboxes of actors that never drained (killed with their
 * host, or daemons stopped by the end of the simulation). No simcall. */
void eccl_net_sg_free_outboxes(eccl_sg_world *w);
/* Frees the latency net's memo of route costs. */
void eccl_net_sg_free_routes(eccl_sg_world *w);
/* The pid of the receiver `h`'s envs share in its current boot, -1 if none:
 * it serves every process of the host, so killing one spares it. */
aid_t eccl_net_sg_host_receiver(const eccl_sg_world *w, const_sg_host_t h);
void eccl_net_sg_free_host_rx(eccl_sg_world *w);
/* Whether wait reports listener l while connections wait in its backlog
 * (quiet = 0, the default) or never (1). */
void eccl_net_sg_listener_quiet(eccl_listener *l, int quiet);
/* What a message of `bytes` stream bytes costs from host `from` to host
 * `to` when nothing else shares the route: the route's latency, and the
 * time its bytes (and net_sg's header) take on the narrowest link. */
void eccl_net_sg_route_cost(const_sg_host_t from, const_sg_host_t to, size_t bytes,
                            double *latency_s, double *wire_s);
/* Posts what conns hold back for a path that was down and is up again. */
void eccl_net_sg_release_held(eccl_sg_world *w);
/* The boot of a host (0 until it first goes off). */
int eccl_sg_host_boot(const_sg_host_t h);
/* 1 when no link of the route a -> b is off. */
int eccl_net_sg_route_up(const eccl_sg_world *w, const_sg_host_t a, const_sg_host_t b);

/* A message between simulated NICs: data[0..len) is copied and travels
 * from `from`'s host to env `to_env`'s, charged wire_bytes on the network
 * (the payload a write moves, phantom or not), and is handed to the
 * target's fabric_rx by its receiver actor. 0 when it went on the wire; -1
 * when it never can (the target env is gone, dead or stopping, its host
 * rebooted, or a link of the route is off: RC's retries run out on all of
 * those) or out of memory. */
int eccl_net_sg_fabric_post(sg_env *from, uint64_t to_env, const void *data, size_t len,
                            size_t wire_bytes);
/* Whether a fabric message from `from` to env to_env would go on the wire
 * now (no simcall). */
int eccl_net_sg_fabric_reachable(const sg_env *from, uint64_t to_env);
/* Readiness for a source (see sg_event_source). */
void eccl_net_sg_watch(sg_env *e, sg_event_source *src);
void eccl_net_sg_unwatch(sg_env *e, sg_event_source *src);
/* What net_ibv's protocol needs from a stream conn beyond eccl_net_ops. */
void eccl_net_sg_conn_addr(const eccl_conn *c, char *addr);
void eccl_net_sg_watch_hangup(eccl_conn *c, int on);
int eccl_net_sg_hung_up(const eccl_conn *c);

/* verbs_sg.c (transport ibv) */
/* Gives a comm's env a simulated NIC and makes its net core's net_ibv
 * protocol over net_sg and that NIC. */
eccl_result eccl_verbs_sg_attach(sg_env *e);
/* Undoes attach: every conn and listener is closed. */
void eccl_verbs_sg_detach(sg_env *e);
/* Frees the NIC of a killed env (no simcall). */
void eccl_verbs_sg_free_dead(sg_env *e);
/* The env's NIC as the protocol sees it (verbs table, device, GID), for
 * tests of the verbs rules; NULL without a NIC. */
const struct eccl_ibv_device *eccl_verbs_sg_device(const sg_env *e);
/* Call after envs died (killed, or their host off): the writes that live
 * NICs still wait on for a dead or gone env complete with
 * IBV_WC_RETRY_EXC_ERR, as RC's retries would run out. Makes simcalls
 * (wake-ups) once every state change is done. */
void eccl_verbs_sg_peers_dead(eccl_sg_world *w);

/* `bytes` at `Bps` of e's actor's own time (env_sg.c's device-kernel
 * sleep, small ones summed until worth a sleep); nothing when Bps <= 0. */
void eccl_sg_charge_bytes(sg_env *e, size_t bytes, double Bps);
void eccl_sg_log(const sg_env *e, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* ECCL_BACKENDS_SIM_SG_INTERNAL_H */
