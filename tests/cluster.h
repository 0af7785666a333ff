/* A loopback cluster for multi-process integration tests: one master and N
 * peers, each its own process, reporting back through shared memory.
 *
 * Process layout (why the master gets its own process):
 *   test process (cmocka) -- stays single-threaded, never touches an eccl
 *   |                        object: it only forks, signals and reads the
 *   |                        shared area
 *   +-- master child      -- eccl_master_create("127.0.0.1:0") +
 *   |                        eccl_master_run; publishes its address
 *   +-- peer child i      -- create, connect, admission loop, body
 * Forking peers from a process whose master progress thread is running
 * would be unsafe (a lock held by that thread stays held in the child), and
 * every peer forked later (a joiner) would inherit the master's accepted
 * sockets: a connection the master closes would then stay open in the
 * sibling, so a kicked peer or a stopped master would never be noticed. A
 * master in its own process has neither problem, lets tests kill or freeze
 * (SIGSTOP) the master, and keeps the parent free to fork at any time.
 *
 * Nothing may hang: every child runs under alarm() and PR_SET_PDEATHSIG, the
 * parent waits with deadlines and SIGKILLs what is left, and a watchdog
 * alarm in the parent kills every child it knows before giving up.
 */
#ifndef ECCL_TESTS_CLUSTER_H
#define ECCL_TESTS_CLUSTER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "eccl.h"

#define CLUSTER_MAX_PEERS 16
#define CLUSTER_MAX_HASHES 1024
#define CLUSTER_MAX_EVENTS 64
#define CLUSTER_MAX_CTL 16
#define CLUSTER_MSG 512

#define CL_MS 1000000ull
#define CL_SEC 1000000000ull

/* A peer child's lifecycle, as it reports it. */
enum cluster_phase {
    CL_PHASE_NONE = 0,
    CL_PHASE_CREATING,
    CL_PHASE_CONNECTING,
    CL_PHASE_ADMITTING,
    CL_PHASE_RUNNING, /* in the body */
    CL_PHASE_LINGER,  /* body passed; waiting for the others' bodies */
    CL_PHASE_DESTROYING,
    CL_PHASE_PASSED,
    CL_PHASE_FAILED,
    CL_PHASE_KILLED   /* set by the parent after cluster_kill */
};

/* One collective call a body chose to record. */
typedef struct cluster_event {
    uint64_t tag;
    int32_t result;      /* eccl_result */
    uint32_t world;      /* info.world_size */
    uint64_t elapsed_ns; /* wall time of the call */
    uint64_t pre_hash;   /* the input before the call (in place: the buffer) */
    uint64_t post_hash;  /* the same after the call */
    uint64_t end_ns;     /* CLOCK_MONOTONIC when it returned (system-wide,
                            so comparable with the parent's clock) */
} cluster_event;

/* Written by one peer child, read by the parent. */
typedef struct cluster_slot {
    atomic_int phase;
    int died_phase;        /* phase when it died unfinished (set by the parent) */
    atomic_llong started;  /* body-defined progress counters */
    atomic_llong finished;
    int64_t rank, world, peer_id, epoch; /* right after admission */
    uint64_t admit_ns;                   /* fork to admitted */
    int n_hash;
    uint64_t hash[CLUSTER_MAX_HASHES];
    atomic_int n_events;
    cluster_event ev[CLUSTER_MAX_EVENTS];
    atomic_llong val[16]; /* body-defined */
    char msg[CLUSTER_MSG];
    char addr[64];        /* a relay's address (cluster_fork_relay) */
    char master_of[256];  /* set: this peer's master_addr ("A,B,..."), a relay's parent */
} cluster_slot;

typedef struct cluster_shared {
    char master_addr[64];
    atomic_int master_state; /* 0 starting, 1 running, 2 stopped, -1 failed */
    atomic_int master_cmd;   /* 0 serve, 1 eccl_master_stop + destroy, 2 eccl_master_trace_all */
    atomic_llong ctl[CLUSTER_MAX_CTL]; /* parent -> children, test-defined */
    cluster_slot slot[CLUSTER_MAX_PEERS];
} cluster_shared;

typedef struct cluster_opts {
    uint32_t peer_timeout_ms;    /* default 5000, as the library */
    uint32_t op_timeout_ms;      /* default 10000: every call here takes < 2 s */
    uint32_t connect_timeout_ms; /* default 10000 */
    unsigned child_alarm_s;      /* a child older than this dies; default 90 */
    unsigned watchdog_s;         /* the parent gives up; default 170 */
    /* By default a peer whose body passed keeps its communicator until
     * every other live peer left its body too, so a fast peer leaving does
     * not turn into a membership change under a slower peer's last call
     * (tests of exactly that set no_linger). */
    int no_linger;
    /* eccl_comm_params.p2p_pool_size of every peer (0: the default), or
     * of peer i where pool_size_of[i] is nonzero. */
    uint32_t p2p_pool_size;
    uint32_t pool_size_of[CLUSTER_MAX_PEERS];
    /* eccl_comm_params.peer_group of peer i (default 0: one group). */
    uint32_t peer_group_of[CLUSTER_MAX_PEERS];
    /* If set, every peer child sets ECCL_P2P_POOL to it before creating
     * its communicator. */
    const char *pool_env;
    /* If set, every peer child sets ECCL_ALGO to it (the dispatcher's
     * forced algorithms, e.g. "allreduce=recursive") before creating its
     * communicator. */
    const char *algo_env;
    /* If set, every peer child sets ECCL_PROGRESS_THREAD=0. */
    int no_progress_thread;
    /* eccl_comm_params.p2p_host of peer i (NULL: the default, 127.0.0.1):
     * 127.0.0.x addresses emulate hosts on one box (all of 127.0.0.0/8 is
     * loopback on Linux), which the master groups ranks by. */
    const char *p2p_host_of[CLUSTER_MAX_PEERS];
} cluster_opts;

typedef struct cluster {
    cluster_shared *sh;
    cluster_opts opts;
    pid_t parent;
    pid_t master_pid;
    pid_t pid[CLUSTER_MAX_PEERS];   /* 0: none or reaped */
    int status[CLUSTER_MAX_PEERS];  /* wait status once reaped, else -1 */
    int spawned[CLUSTER_MAX_PEERS];
    uint32_t target_world[CLUSTER_MAX_PEERS];
} cluster;

/* Returns nonzero when the body failed. Runs after the peer is connected
 * and admitted until its world size reached the requested size. */
typedef int (*cluster_body)(eccl_comm *c, int index, void *arg);
/* A bare child: no communicator is made for it. */
typedef int (*cluster_proc)(cluster *cl, int index, void *arg);

/* ---- parent side ------------------------------------------------------- */

/* cmocka fixtures: *state is a zeroed cluster, torn down (children killed)
 * after the test whatever happened. */
int cluster_test_setup(void **state);
int cluster_test_teardown(void **state);


/* Maps the shared area, forks the master and waits for its address.
 * opts may be NULL. Returns 0 or -1 (with a message on stderr). */
int cluster_init(cluster *cl, const cluster_opts *opts);
/* Forks peer `index`: connect, admit until world == `world`, body. */
int cluster_spawn(cluster *cl, int index, uint32_t world, cluster_body body, void *arg);
/* Peers 0..n-1, all admitting until world == n. */
int cluster_spawn_n(cluster *cl, int n, cluster_body body, void *arg);
int cluster_fork(cluster *cl, int index, cluster_proc fn, void *arg);
/* Forks a relay of the master into slot `index` (which holds no peer) and
 * waits until it listens; its address is then in slot[index].addr. */
int cluster_fork_relay(cluster *cl, int index);
/* The same under the relay of slot `parent` (-1: the master), whose
 * address becomes slot[index].master_of. */
int cluster_fork_relay_under(cluster *cl, int index, int parent);
/* Waits for one child; SIGKILLs it at the deadline. 0 iff it exited 0. */
int cluster_wait(cluster *cl, int index, uint64_t timeout_ms);
/* Waits for every spawned child not reaped yet; returns how many failed
 * (nonzero exit, signal or timeout) and prints why for each. */
int cluster_wait_all(cluster *cl, uint64_t timeout_ms);
/* SIGKILL + reap. */
void cluster_kill(cluster *cl, int index);
/* A peer that kills itself (a failpoint's SIGKILL) mid-test: waits until
 * the peer with ring rank `rank` among the first n is running, then until
 * it died, and marks it killed on purpose. Its index, or -1 if it did not
 * appear, or did not die of SIGKILL, within timeout_ms each. */
int cluster_wait_self_killed(cluster *cl, int n, int64_t rank, uint64_t timeout_ms);
/* 1 while the child has not exited. */
int cluster_alive(cluster *cl, int index);
int cluster_master_alive(cluster *cl);
/* Sends a signal to the master process (SIGKILL reaps it). */
void cluster_master_signal(cluster *cl, int sig);
/* Asks the master to eccl_master_stop + destroy; waits for it to exit. */
int cluster_master_stop(cluster *cl, uint64_t timeout_ms);
/* Polls `cond(cl, arg)` every ms until true (0) or the deadline (-1); fails
 * early (-1) if any spawned child that should be running has exited. */
int cluster_wait_for(cluster *cl, int (*cond)(cluster *, void *), void *arg,
                     uint64_t timeout_ms);
/* The TCP port a child process listens on (its p2p listener), found
 * through /proc: the API does not expose it. 0 if none. */
unsigned cluster_listen_port(cluster *cl, int index);
/* Kills whatever is left, master included, and unmaps; idempotent, safe on
 * a zeroed struct. */
void cluster_fini(cluster *cl);
/* The common test: init (opts may be NULL), n peers running `body`, every
 * one passing within timeout_ms, fini. 0 on success, -1 otherwise (the
 * failures printed). */
int cluster_run(cluster *cl, const cluster_opts *opts, int n, cluster_body body, void *arg,
                uint64_t timeout_ms);
void cluster_dump_slot(const cluster *cl, int index);

/* ---- child side -------------------------------------------------------- */



/* The current child's index and slot (NULL in the parent). */
int cluster_self_index(void);
cluster_slot *cluster_self(void);
cluster_shared *cluster_shm(void);
/* This peer's ring rank and world size (ECCL_ATTR_RANK, _WORLD_SIZE): 0,
 * or -1 if either could not be read. */
int cluster_rank_world(eccl_comm *c, uint32_t *rank, uint32_t *world);
/* Records the first failure message of this child (also to stderr). */
void cluster_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* t0/t1: cluster_now_ns() right before and right after the call. */
void cluster_record(uint64_t tag, eccl_result rc, uint32_t world, uint64_t t0, uint64_t t1,
                    uint64_t pre_hash, uint64_t post_hash);
void cluster_push_hash(uint64_t h);
/* Polls the parent's ctl[k] until it reaches at_least: 0, or -1 after
 * timeout_ms. */
int cluster_wait_ctl(int k, long long at_least, uint64_t timeout_ms);
/* Admission loop: until ECCL_ATTR_WORLD_SIZE == world, poll peers_pending
 * and vote. Every accepted peer must run it for the vote to pass. */
eccl_result cluster_admit(eccl_comm *c, uint32_t world, uint64_t timeout_ms);
/* Admission inside a running job: every peer asks how many peers wait
 * (eccl_comm_peers_pending, itself a vote of the accepted peers), the
 * answers are all-reduced (MAX) with `tag`, and everyone votes iff the
 * result is > 0 -- so all peers take the same decision at the same point of
 * their collective sequence. *seen gets this peer's own answer, *agreed the
 * maximum over all peers (equal, if peers_pending is the vote it claims). */
eccl_result cluster_agreed_admit(eccl_comm *c, uint64_t tag, uint32_t *seen, uint32_t *agreed,
                                 int *voted);

#define CL_CHECK(cond, ...)                                                     \
    do {                                                                        \
        if (!(cond)) {                                                          \
            cluster_fail("%s:%d: check `%s` failed", __FILE__, __LINE__, #cond); \
            cluster_fail(__VA_ARGS__);                                          \
            return 1;                                                           \
        }                                                                       \
    } while (0)

#define CL_EXPECT_RC(expr, want)                                                \
    do {                                                                        \
        eccl_result cl_rc_ = (expr);                                            \
        if (cl_rc_ != (want)) {                                                 \
            cluster_fail("%s:%d: %s returned %s (%d), expected %s", __FILE__,   \
                         __LINE__, #expr, eccl_strerror(cl_rc_), (int)cl_rc_,   \
                         eccl_strerror(want));                                  \
            return 1;                                                           \
        }                                                                       \
    } while (0)

#define CL_OK(expr) CL_EXPECT_RC(expr, ECCL_OK)

/* ---- data ---------------------------------------------------------------- */

uint64_t cluster_now_ns(void);
void cluster_sleep_ms(unsigned ms);
/* Whether [a, a + na) and [b, b + nb) share a byte: an in-place call,
 * whose output a failure must put back bit for bit (eccl.h); out of place
 * only its input is promised intact. */
static inline int cluster_overlaps(const void *a, size_t na, const void *b, size_t nb)
{
    const char *x = a, *y = b;
    return x && y && na && nb && x < y + nb && y < x + na;
}

uint64_t cluster_fnv1a(const void *buf, size_t bytes);

enum cluster_pattern {
    CL_PAT_SMALL,  /* integers in [-6, 6] (signed) or [0, 12] (unsigned) */
    CL_PAT_PROD,   /* {-1, 1, 2} (signed) or {1, 2} (unsigned) */
    CL_PAT_RANDOM  /* any bits (integers), or finite reals in +-[0.5, 4)
                      (floats; every value normal in f16 and bf16) */
};

/* Checks every element of `out` against the expected all-reduce of the
 * `pat` contributions of peers idx[0..n); 0 if all match, else records a
 * failure naming `what` and the first mismatch. */
int cluster_check_values(const void *out, eccl_dtype t, eccl_op op, enum cluster_pattern pat,
                         size_t count, const int *idx, int n, uint64_t seed, const char *what);

/* Element i of peer `index`'s contribution for `seed`. Deterministic. */
void cluster_fill(void *buf, eccl_dtype t, size_t count, int index, uint64_t seed,
                  enum cluster_pattern pat);
/* The exact result of reducing the contributions of `indices` with `op`,
 * with the library's documented arithmetic (integers wrap; AVG is the sum
 * divided by the peer count, truncating for integers and rounded once to
 * nearest-even for floats). Returns -1 where the result is not defined
 * exactly (float SUM/PROD/AVG of random reals). */
int cluster_expected(void *out, eccl_dtype t, size_t count, eccl_op op, const int *indices,
                     int n, uint64_t seed, enum cluster_pattern pat);
/* Elements whose bits differ; *first gets the first such index. */
size_t cluster_mismatches(const void *got, const void *want, eccl_dtype t, size_t count,
                          size_t *first);
/* An element as a double (f16/bf16 decoded), for messages. */
double cluster_load(const void *buf, eccl_dtype t, size_t i);
/* Stores v rounded to nearest-even (floats) or truncated to the width. */
void cluster_store(void *buf, eccl_dtype t, size_t i, double v);

/* ---- a job that grows -------------------------------------------------------- */

/* What a member of a running job of n0 peers saw while waiting for the join. */
typedef struct cluster_join_seen {
    uint32_t max_pending; /* largest peers_pending answer of its own */
    int votes;            /* admission votes it cast */
    int disagreed;        /* rounds whose own answer differed from the agreed one */
} cluster_join_seen;

/* A member of a running job of n0 peers: checked out-of-place i32
 * all-reduces (tags 10, 11, ...) with the agreed admission check between
 * them, until the world grows to n1 (0) or timeout_ms passes (1).
 * before_round, if given, runs before each all-reduce; nonzero fails. */
int cluster_job_until_join(eccl_comm *c, int index, int n0, int n1, uint64_t timeout_ms,
                           int (*before_round)(int index, void *arg), void *arg,
                           cluster_join_seen *seen);
/* What every member runs once the world has n peers (indices 0..n-1): `ops`
 * checked f32 all-reduces (tags 5000, ...), in place or not, each result's
 * hash pushed. */
int cluster_after_join(eccl_comm *c, int index, int n, int ops, int in_place);

/* Has fiu call `cb` (an external callback: fiu_enable_external's) at every
 * send of the process, whatever carries it: a frame or payload written to
 * the stream (eccl/net/send), a payload written by RDMA (eccl/net_ibv/post),
 * a payload announced to a host-mate, who reads it out of our memory, or
 * such a read acknowledged (eccl/net_shm/ctl). Call fiu_init first. 0 on
 * success. Tests that kill a victim at its K-th send count them all. */
int cluster_hook_sends(int (*cb)(const char *, int *, void **, unsigned int *));

#endif
