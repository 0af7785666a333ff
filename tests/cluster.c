/* The loopback cluster harness (see cluster.h for the process layout). */
#include "cluster.h"

#include <fiu-control.h>

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- time ----------------------------------------------------------------- */

uint64_t cluster_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * CL_SEC + (uint64_t)ts.tv_nsec;
}

void cluster_sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- the parent's watchdog ---------------------------------------------------
 * Every pid the parent forked, so a SIGALRM can kill them all before the
 * test process gives up (children also die with PR_SET_PDEATHSIG). */
#define WATCH_MAX 64
static volatile pid_t g_watch[WATCH_MAX];

static void watch_add(pid_t pid)
{
    for (int i = 0; i < WATCH_MAX; i++) {
        if (g_watch[i] == 0) {
            g_watch[i] = pid;
            return;
        }
    }
}

static void watch_del(pid_t pid)
{
    for (int i = 0; i < WATCH_MAX; i++)
        if (g_watch[i] == pid) g_watch[i] = 0;
}

static void watchdog_fire(int sig)
{
    (void)sig;
    static const char msg[] = "cluster: watchdog expired, killing every child\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    for (int i = 0; i < WATCH_MAX; i++)
        if (g_watch[i] > 0) kill(g_watch[i], SIGKILL);
    _exit(3);
}

/* ---- child-side state -------------------------------------------------------- */

static cluster_shared *g_shm;
static int g_index = -1;

int cluster_self_index(void) { return g_index; }
cluster_slot *cluster_self(void) { return g_shm && g_index >= 0 ? &g_shm->slot[g_index] : NULL; }
cluster_shared *cluster_shm(void) { return g_shm; }

void cluster_fail(const char *fmt, ...)
{
    char line[CLUSTER_MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "[peer %d pid %d] %s\n", g_index, (int)getpid(), line);
    cluster_slot *s = cluster_self();
    if (!s) return;
    /* Keep every line that fits: a check's location, then its detail. */
    size_t used = strnlen(s->msg, sizeof s->msg - 1);
    const char *parts[2] = {used ? " | " : "", line};
    for (int k = 0; k < 2; k++) {
        size_t len = strlen(parts[k]), room = sizeof s->msg - 1 - used;
        if (len > room) len = room;
        memcpy(s->msg + used, parts[k], len);
        used += len;
    }
    s->msg[used] = '\0';
}

void cluster_record(uint64_t tag, eccl_result rc, uint32_t world, uint64_t t0, uint64_t t1,
                    uint64_t pre_hash, uint64_t post_hash)
{
    cluster_slot *s = cluster_self();
    if (!s) return;
    int n = atomic_load(&s->n_events);
    if (n >= CLUSTER_MAX_EVENTS) return;
    cluster_event *e = &s->ev[n];
    e->tag = tag;
    e->result = (int32_t)rc;
    e->world = world;
    e->elapsed_ns = t1 - t0;
    e->pre_hash = pre_hash;
    e->post_hash = post_hash;
    e->end_ns = t1;
    atomic_store(&s->n_events, n + 1);
}

int cluster_wait_ctl(int k, long long at_least, uint64_t timeout_ms)
{
    uint64_t deadline = cluster_now_ns() + timeout_ms * CL_MS;
    while (atomic_load(&cluster_shm()->ctl[k]) < at_least) {
        if (cluster_now_ns() >= deadline) return -1;
        cluster_sleep_ms(1);
    }
    return 0;
}

void cluster_push_hash(uint64_t h)
{
    cluster_slot *s = cluster_self();
    if (s && s->n_hash < CLUSTER_MAX_HASHES) s->hash[s->n_hash++] = h;
}

eccl_result cluster_admit(eccl_comm *c, uint32_t world, uint64_t timeout_ms)
{
    uint64_t deadline = cluster_now_ns() + timeout_ms * CL_MS;
    for (;;) {
        int64_t w = 0;
        eccl_result rc = eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &w);
        if (rc != ECCL_OK) return rc;
        if (w >= (int64_t)world) return ECCL_OK;
        if (cluster_now_ns() >= deadline) return ECCL_ERR_TIMEOUT;
        uint32_t pending = 0;
        rc = eccl_comm_peers_pending(c, &pending);
        if (rc != ECCL_OK) return rc;
        if (pending > 0) {
            rc = eccl_comm_update_topology(c);
            if (rc != ECCL_OK) return rc;
        } else {
            usleep(1000);
        }
    }
}

eccl_result cluster_agreed_admit(eccl_comm *c, uint64_t tag, uint32_t *seen, uint32_t *agreed,
                                 int *voted)
{
    uint32_t pending = 0;
    *voted = 0;
    eccl_result rc = eccl_comm_peers_pending(c, &pending);
    if (rc != ECCL_OK) return rc;
    if (seen) *seen = pending;
    rc = eccl_allreduce(c, &pending, &pending, 1, ECCL_U32, ECCL_MAX, tag, NULL);
    if (agreed) *agreed = pending;
    if (rc != ECCL_OK || pending == 0) return rc;
    *voted = 1;
    return eccl_comm_update_topology(c);
}

/* ---- processes ------------------------------------------------------------------ */

static void child_setup(cluster *cl, int index)
{
    /* Die with the test process, even if it is SIGKILLed by ctest. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != cl->parent) _exit(98);
    /* cmocka catches crash signals and longjmps back into its runner: a
     * crashing child would go on running the parent's remaining tests. A
     * child must die of its crash instead, for the parent to see it. */
    static const int crash[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS, SIGALRM};
    for (size_t i = 0; i < sizeof crash / sizeof crash[0]; i++) signal(crash[i], SIG_DFL);
    alarm(cl->opts.child_alarm_s);
    /* Only stdio: sockets the parent holds (raw test connections) must not
     * live on in a peer. */
    if (close_range(3, ~0u, 0) != 0)
        for (int fd = 3; fd < 1024; fd++) close(fd);
    g_shm = cl->sh;
    g_index = index;
}

static void master_main(cluster *cl)
{
    cluster_shared *sh = cl->sh;
    eccl_master *m = NULL;
    eccl_result rc = eccl_master_create("127.0.0.1:0", &m);
    if (rc == ECCL_OK) rc = eccl_master_address(m, sh->master_addr, sizeof sh->master_addr);
    if (rc == ECCL_OK) rc = eccl_master_run(m);
    if (rc != ECCL_OK) {
        fprintf(stderr, "cluster master: %s\n", eccl_strerror(rc));
        atomic_store(&sh->master_state, -1);
        _exit(1);
    }
    atomic_store(&sh->master_state, 1);
    for (int cmd; (cmd = atomic_load(&sh->master_cmd)) != 1; cluster_sleep_ms(2))
        if (cmd == 2 && eccl_master_trace_all(m) == ECCL_OK) /* 2: every member's trace, once */
            atomic_store(&sh->master_cmd, 0);
    rc = eccl_master_stop(m);
    eccl_master_destroy(m);
    atomic_store(&sh->master_state, 2);
    _exit(rc == ECCL_OK ? 0 : 1);
}

static void peer_main(cluster *cl, int index, uint32_t world, cluster_body body, void *arg)
{
    cluster_slot *s = &cl->sh->slot[index];
    uint64_t t0 = cluster_now_ns();
    eccl_comm_params p;
    eccl_comm *c = NULL;
    int failed = 1;

    atomic_store(&s->phase, CL_PHASE_CREATING);
    eccl_comm_params_init(&p);
    p.master_addr = s->master_of[0] ? s->master_of : cl->sh->master_addr;
    p.peer_timeout_ms = cl->opts.peer_timeout_ms;
    p.op_timeout_ms = cl->opts.op_timeout_ms;
    p.connect_timeout_ms = cl->opts.connect_timeout_ms;
    if (cl->opts.p2p_pool_size) p.p2p_pool_size = cl->opts.p2p_pool_size;
    if (cl->opts.pool_size_of[index]) p.p2p_pool_size = cl->opts.pool_size_of[index];
    p.peer_group = cl->opts.peer_group_of[index];
    if (cl->opts.p2p_host_of[index]) p.p2p_host = cl->opts.p2p_host_of[index];
    if (cl->opts.pool_env) setenv("ECCL_P2P_POOL", cl->opts.pool_env, 1);
    if (cl->opts.algo_env) setenv("ECCL_ALGO", cl->opts.algo_env, 1);
    if (cl->opts.no_progress_thread) setenv("ECCL_PROGRESS_THREAD", "0", 1);
    eccl_result rc = eccl_comm_create(&p, &c);
    if (rc != ECCL_OK) {
        cluster_fail("eccl_comm_create: %s", eccl_strerror(rc));
        goto out;
    }
    atomic_store(&s->phase, CL_PHASE_CONNECTING);
    rc = eccl_comm_connect(c);
    if (rc != ECCL_OK) {
        cluster_fail("eccl_comm_connect: %s", eccl_strerror(rc));
        goto out;
    }
    atomic_store(&s->phase, CL_PHASE_ADMITTING);
    rc = cluster_admit(c, world, (uint64_t)cl->opts.op_timeout_ms + 10000);
    if (rc != ECCL_OK) {
        cluster_fail("admission to world %u: %s", world, eccl_strerror(rc));
        goto out;
    }
    eccl_comm_get_attr(c, ECCL_ATTR_RANK, &s->rank);
    eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &s->world);
    eccl_comm_get_attr(c, ECCL_ATTR_PEER_ID, &s->peer_id);
    eccl_comm_get_attr(c, ECCL_ATTR_EPOCH, &s->epoch);
    s->admit_ns = cluster_now_ns() - t0;
    atomic_store(&s->phase, CL_PHASE_RUNNING);
    failed = body(c, index, arg) != 0;
    if (!failed && !cl->opts.no_linger) {
        atomic_store(&s->phase, CL_PHASE_LINGER);
        uint64_t deadline = cluster_now_ns() + 30 * CL_SEC;
        for (;;) {
            int busy = 0;
            for (int i = 0; i < CLUSTER_MAX_PEERS; i++) {
                int ph = atomic_load(&cl->sh->slot[i].phase);
                busy += ph >= CL_PHASE_CREATING && ph <= CL_PHASE_RUNNING;
            }
            if (!busy || cluster_now_ns() > deadline) break;
            cluster_sleep_ms(1);
        }
    }
out:
    atomic_store(&s->phase, CL_PHASE_DESTROYING);
    eccl_comm_destroy(c);
    atomic_store(&s->phase, failed ? CL_PHASE_FAILED : CL_PHASE_PASSED);
    _exit(failed ? 1 : 0);
}

static void watchdog_arm(unsigned seconds)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = watchdog_fire;
    sigaction(SIGALRM, &sa, NULL);
    alarm(seconds);
}

int cluster_init(cluster *cl, const cluster_opts *opts)
{
    memset(cl, 0, sizeof *cl);
    cl->opts.peer_timeout_ms = 5000; /* the library default: loaded CI hosts starve heartbeats */
    cl->opts.op_timeout_ms = 10000;
    cl->opts.connect_timeout_ms = 10000;
    cl->opts.child_alarm_s = 90;
    cl->opts.watchdog_s = 170;
    if (opts) {
        if (opts->peer_timeout_ms) cl->opts.peer_timeout_ms = opts->peer_timeout_ms;
        if (opts->op_timeout_ms) cl->opts.op_timeout_ms = opts->op_timeout_ms;
        if (opts->connect_timeout_ms) cl->opts.connect_timeout_ms = opts->connect_timeout_ms;
        if (opts->child_alarm_s) cl->opts.child_alarm_s = opts->child_alarm_s;
        if (opts->watchdog_s) cl->opts.watchdog_s = opts->watchdog_s;
        cl->opts.no_linger = opts->no_linger;
        cl->opts.p2p_pool_size = opts->p2p_pool_size;
        memcpy(cl->opts.pool_size_of, opts->pool_size_of, sizeof cl->opts.pool_size_of);
        memcpy(cl->opts.peer_group_of, opts->peer_group_of, sizeof cl->opts.peer_group_of);
        cl->opts.pool_env = opts->pool_env;
        cl->opts.algo_env = opts->algo_env;
        cl->opts.no_progress_thread = opts->no_progress_thread;
        memcpy(cl->opts.p2p_host_of, opts->p2p_host_of, sizeof cl->opts.p2p_host_of);
    }
    for (int i = 0; i < CLUSTER_MAX_PEERS; i++) cl->status[i] = -1;
    cl->parent = getpid();
    void *p = mmap(NULL, sizeof *cl->sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("cluster: mmap");
        return -1;
    }
    cl->sh = p;
    watchdog_arm(cl->opts.watchdog_s);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("cluster: fork master");
        return -1;
    }
    if (pid == 0) {
        child_setup(cl, -1);
        master_main(cl);
    }
    cl->master_pid = pid;
    watch_add(pid);
    uint64_t deadline = cluster_now_ns() + 10 * CL_SEC;
    while (atomic_load(&cl->sh->master_state) == 0) {
        if (cluster_now_ns() > deadline || !cluster_master_alive(cl)) {
            fprintf(stderr, "cluster: the master did not start\n");
            return -1;
        }
        cluster_sleep_ms(1);
    }
    if (atomic_load(&cl->sh->master_state) != 1) return -1;
    return 0;
}

int cluster_spawn(cluster *cl, int index, uint32_t world, cluster_body body, void *arg)
{
    if (index < 0 || index >= CLUSTER_MAX_PEERS || cl->pid[index]) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("cluster: fork peer");
        return -1;
    }
    if (pid == 0) {
        child_setup(cl, index);
        peer_main(cl, index, world, body, arg);
    }
    cl->pid[index] = pid;
    cl->spawned[index] = 1;
    cl->status[index] = -1;
    cl->target_world[index] = world;
    watch_add(pid);
    return 0;
}

int cluster_spawn_n(cluster *cl, int n, cluster_body body, void *arg)
{
    for (int i = 0; i < n; i++)
        if (cluster_spawn(cl, i, (uint32_t)n, body, arg) != 0) return -1;
    return 0;
}

int cluster_fork(cluster *cl, int index, cluster_proc fn, void *arg)
{
    if (index < 0 || index >= CLUSTER_MAX_PEERS || cl->pid[index]) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        child_setup(cl, index);
        atomic_store(&cl->sh->slot[index].phase, CL_PHASE_RUNNING);
        int r = fn(cl, index, arg);
        atomic_store(&cl->sh->slot[index].phase, r ? CL_PHASE_FAILED : CL_PHASE_PASSED);
        _exit(r ? 1 : 0);
    }
    cl->pid[index] = pid;
    cl->spawned[index] = 1;
    cl->status[index] = -1;
    watch_add(pid);
    return 0;
}

static int relay_proc(cluster *cl, int index, void *arg)
{
    (void)arg;
    cluster_slot *s = &cl->sh->slot[index];
    eccl_relay *r = NULL;
    const char *parent = s->master_of[0] ? s->master_of : cl->sh->master_addr;
    eccl_result rc = eccl_relay_create("127.0.0.1:0", parent, &r);
    char addr[sizeof s->addr];
    if (rc == ECCL_OK) rc = eccl_relay_address(r, addr, sizeof addr);
    if (rc == ECCL_OK) rc = eccl_relay_run(r);
    if (rc != ECCL_OK) {
        cluster_fail("relay: %s", eccl_strerror(rc));
        eccl_relay_destroy(r);
        return 1;
    }
    /* The first byte last: the test reads the address once it is set. */
    memcpy(s->addr + 1, addr + 1, sizeof addr - 1);
    __atomic_store_n(&s->addr[0], addr[0], __ATOMIC_RELEASE);
    for (;;) pause(); /* until the test kills it (or cluster_fini does) */
}

int cluster_fork_relay(cluster *cl, int index)
{
    return cluster_fork_relay_under(cl, index, -1);
}

int cluster_fork_relay_under(cluster *cl, int index, int parent)
{
    cluster_slot *s = &cl->sh->slot[index];
    if (parent >= 0) memcpy(s->master_of, cl->sh->slot[parent].addr, sizeof cl->sh->slot[parent].addr);
    else s->master_of[0] = '\0';
    if (cluster_fork(cl, index, relay_proc, NULL) != 0) return -1;
    for (int i = 0; i < 5000 && !__atomic_load_n(&cl->sh->slot[index].addr[0], __ATOMIC_ACQUIRE); i++) {
        if (!cluster_alive(cl, index)) return -1;
        cluster_sleep_ms(1);
    }
    return cl->sh->slot[index].addr[0] ? 0 : -1;
}

static int reap(cluster *cl, int index, int block)
{
    if (!cl->pid[index]) return 1;
    int st = 0;
    pid_t r;
    do {
        r = waitpid(cl->pid[index], &st, block ? 0 : WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r == 0) return 0;
    watch_del(cl->pid[index]);
    cl->pid[index] = 0;
    cl->status[index] = r < 0 ? -2 : st;
    /* Died without finishing (crash, alarm): lingering peers stop waiting. */
    int ph = atomic_load(&cl->sh->slot[index].phase);
    if (ph >= CL_PHASE_CREATING && ph <= CL_PHASE_LINGER) {
        cl->sh->slot[index].died_phase = ph;
        atomic_store(&cl->sh->slot[index].phase, CL_PHASE_FAILED);
    }
    return 1;
}

int cluster_alive(cluster *cl, int index) { return !reap(cl, index, 0); }

int cluster_master_alive(cluster *cl)
{
    if (!cl->master_pid) return 0;
    int st;
    pid_t r = waitpid(cl->master_pid, &st, WNOHANG);
    if (r == 0) return 1;
    watch_del(cl->master_pid);
    cl->master_pid = 0;
    return 0;
}

static const char *phase_name(int p)
{
    static const char *names[] = {"none",       "creating", "connecting", "admitting", "running",
                                  "lingering",  "destroying", "passed",   "failed",    "killed"};
    return p >= 0 && p <= CL_PHASE_KILLED ? names[p] : "?";
}

void cluster_dump_slot(const cluster *cl, int index)
{
    const cluster_slot *s = &cl->sh->slot[index];
    int st = cl->status[index];
    char how[64];
    if (st == -1) snprintf(how, sizeof how, "running");
    else if (st == -3) snprintf(how, sizeof how, "timed out (SIGKILLed)");
    else if (st < 0) snprintf(how, sizeof how, "lost");
    else if (WIFEXITED(st)) snprintf(how, sizeof how, "exit %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st)) snprintf(how, sizeof how, "signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else snprintf(how, sizeof how, "status 0x%x", st);
    fprintf(stderr, "  peer %d: %s, phase %s%s%s, rank %lld/%lld, started %lld, finished %lld%s%s\n",
            index, how, phase_name(atomic_load(&s->phase)), s->died_phase ? ", died while " : "",
            s->died_phase ? phase_name(s->died_phase) : "", (long long)s->rank,
            (long long)s->world, (long long)atomic_load(&s->started),
            (long long)atomic_load(&s->finished), s->msg[0] ? ": " : "", s->msg);
    int n = atomic_load(&s->n_events);
    for (int i = 0; i < n; i++)
        fprintf(stderr, "    event tag %llu: %s, world %u, %.1f ms, pre %016llx post %016llx\n",
                (unsigned long long)s->ev[i].tag, eccl_strerror((eccl_result)s->ev[i].result),
                s->ev[i].world, (double)s->ev[i].elapsed_ns / 1e6,
                (unsigned long long)s->ev[i].pre_hash, (unsigned long long)s->ev[i].post_hash);
}

static int failed_status(int st)
{
    return st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0;
}

int cluster_wait(cluster *cl, int index, uint64_t timeout_ms)
{
    uint64_t deadline = cluster_now_ns() + timeout_ms * CL_MS;
    while (!reap(cl, index, 0)) {
        /* A peer that died on its own (a failpoint's SIGKILL, a crash)
         * is reaped here too: its slot turns FAILED, and the peer we wait
         * for stops lingering on it (else 30 s for a dead victim). Its
         * status stays in cl->status for the test to read. */
        for (int i = 0; i < CLUSTER_MAX_PEERS; i++)
            if (i != index) reap(cl, i, 0);
        if (cluster_now_ns() >= deadline) {
            kill(cl->pid[index], SIGKILL);
            reap(cl, index, 1);
            cl->status[index] = -3;
            break;
        }
        cluster_sleep_ms(1);
    }
    int bad = failed_status(cl->status[index]);
    if (bad) cluster_dump_slot(cl, index);
    return bad ? -1 : 0;
}

int cluster_wait_all(cluster *cl, uint64_t timeout_ms)
{
    uint64_t deadline = cluster_now_ns() + timeout_ms * CL_MS;
    int failures = 0;
    for (;;) {
        int left = 0;
        for (int i = 0; i < CLUSTER_MAX_PEERS; i++) left += !reap(cl, i, 0);
        if (!left) break;
        if (cluster_now_ns() >= deadline) {
            for (int i = 0; i < CLUSTER_MAX_PEERS; i++) {
                if (!cl->pid[i]) continue;
                fprintf(stderr, "cluster: peer %d still running at the deadline: SIGKILL\n", i);
                kill(cl->pid[i], SIGKILL);
                reap(cl, i, 1);
                cl->status[i] = -3;
            }
            break;
        }
        cluster_sleep_ms(1);
    }
    for (int i = 0; i < CLUSTER_MAX_PEERS; i++) {
        if (!cl->spawned[i] || cl->status[i] == -4) continue; /* -4: killed on purpose */
        if (failed_status(cl->status[i])) {
            failures++;
            cluster_dump_slot(cl, i);
        }
    }
    return failures;
}

void cluster_kill(cluster *cl, int index)
{
    if (!cl->pid[index]) return;
    kill(cl->pid[index], SIGKILL);
    reap(cl, index, 1);
    cl->status[index] = -4;
    atomic_store(&cl->sh->slot[index].phase, CL_PHASE_KILLED);
}

int cluster_wait_self_killed(cluster *cl, int n, int64_t rank, uint64_t timeout_ms)
{
    int victim = -1;
    uint64_t deadline = cluster_now_ns() + timeout_ms * CL_MS;
    while (victim < 0 && cluster_now_ns() < deadline) {
        for (int i = 0; i < n; i++)
            if (cl->sh->slot[i].rank == rank && atomic_load(&cl->sh->slot[i].phase) >= CL_PHASE_RUNNING)
                victim = i;
        cluster_sleep_ms(1);
    }
    if (victim < 0) return -1;
    cluster_wait(cl, victim, timeout_ms);
    if (!WIFSIGNALED(cl->status[victim]) || WTERMSIG(cl->status[victim]) != SIGKILL) return -1;
    cl->status[victim] = -4; /* killed on purpose */
    return victim;
}

void cluster_master_signal(cluster *cl, int sig)
{
    if (!cl->master_pid) return;
    kill(cl->master_pid, sig);
    if (sig == SIGSTOP) {
        /* kill() returns before the stop takes effect: a request sent in
         * that window would still be answered. Wait (bounded) until the
         * kernel reports the master stopped. */
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)cl->master_pid);
        for (int i = 0; i < 1000; i++) {
            char buf[256] = "";
            FILE *f = fopen(path, "r");
            if (f) {
                size_t n = fread(buf, 1, sizeof buf - 1, f);
                buf[n] = '\0';
                fclose(f);
            }
            const char *st = strrchr(buf, ')');
            if (st && st[1] == ' ' && (st[2] == 'T' || st[2] == 't')) break;
            cluster_sleep_ms(1);
        }
    }
    if (sig == SIGKILL) {
        int st;
        waitpid(cl->master_pid, &st, 0);
        watch_del(cl->master_pid);
        cl->master_pid = 0;
    }
}

int cluster_master_stop(cluster *cl, uint64_t timeout_ms)
{
    if (!cl->master_pid) return -1;
    atomic_store(&cl->sh->master_cmd, 1);
    uint64_t deadline = cluster_now_ns() + timeout_ms * CL_MS;
    int st = 0;
    for (;;) {
        pid_t r = waitpid(cl->master_pid, &st, WNOHANG);
        if (r == cl->master_pid) break;
        if (cluster_now_ns() >= deadline) {
            fprintf(stderr, "cluster: eccl_master_stop/destroy did not return in %llu ms\n",
                    (unsigned long long)timeout_ms);
            cluster_master_signal(cl, SIGKILL);
            return -1;
        }
        cluster_sleep_ms(1);
    }
    watch_del(cl->master_pid);
    cl->master_pid = 0;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int cluster_wait_for(cluster *cl, int (*cond)(cluster *, void *), void *arg, uint64_t timeout_ms)
{
    uint64_t deadline = cluster_now_ns() + timeout_ms * CL_MS;
    for (;;) {
        if (cond(cl, arg)) return 0;
        for (int i = 0; i < CLUSTER_MAX_PEERS; i++) {
            if (cl->spawned[i] && cl->pid[i] && !cluster_alive(cl, i)) {
                fprintf(stderr, "cluster: peer %d exited while waiting\n", i);
                cluster_dump_slot(cl, i);
                return -1;
            }
        }
        if (cluster_now_ns() >= deadline) return -1;
        cluster_sleep_ms(1);
    }
}

unsigned cluster_listen_port(cluster *cl, int index)
{
    if (!cl->pid[index]) return 0;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)cl->pid[index]);
    DIR *d = opendir(path);
    if (!d) return 0;
    unsigned long inodes[256];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 256) {
        char link[384], target[64];
        snprintf(link, sizeof link, "%s/%s", path, de->d_name);
        ssize_t len = readlink(link, target, sizeof target - 1);
        if (len <= 0) continue;
        target[len] = '\0';
        unsigned long ino;
        if (sscanf(target, "socket:[%lu]", &ino) == 1) inodes[n++] = ino;
    }
    closedir(d);
    FILE *f = fopen("/proc/net/tcp", "r");
    if (!f) return 0;
    char line[512];
    unsigned port = 0;
    while (!port && fgets(line, sizeof line, f)) {
        unsigned lport, st;
        unsigned long ino;
        /* sl local rem st tx:rx tr:tm retrnsmt uid timeout inode */
        if (sscanf(line, " %*d: %*x:%x %*x:%*x %x %*x:%*x %*x:%*x %*x %*u %*u %lu", &lport, &st,
                   &ino) != 3)
            continue;
        if (st != 0x0a) continue; /* TCP_LISTEN */
        for (int i = 0; i < n; i++)
            if (inodes[i] == ino) port = lport;
    }
    fclose(f);
    return port;
}

int cluster_run(cluster *cl, const cluster_opts *opts, int n, cluster_body body, void *arg,
                uint64_t timeout_ms)
{
    int rc = cluster_init(cl, opts) == 0 && cluster_spawn_n(cl, n, body, arg) == 0 &&
                     cluster_wait_all(cl, timeout_ms) == 0
                 ? 0
                 : -1;
    cluster_fini(cl);
    return rc;
}

int cluster_rank_world(eccl_comm *c, uint32_t *rank, uint32_t *world)
{
    int64_t r, w;
    if (eccl_comm_get_attr(c, ECCL_ATTR_RANK, &r) != ECCL_OK ||
        eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &w) != ECCL_OK)
        return -1;
    *rank = (uint32_t)r;
    *world = (uint32_t)w;
    return 0;
}

void cluster_fini(cluster *cl)
{
    if (!cl->sh) return;
    for (int i = 0; i < CLUSTER_MAX_PEERS; i++) {
        if (!cl->pid[i]) continue;
        kill(cl->pid[i], SIGKILL);
        reap(cl, i, 1);
    }
    if (cl->master_pid) {
        kill(cl->master_pid, SIGCONT); /* a test may have frozen it */
        cluster_master_signal(cl, SIGKILL);
    }
    alarm(0);
    munmap(cl->sh, sizeof *cl->sh);
    cl->sh = NULL;
}

/* ---- data ------------------------------------------------------------------------ */

uint64_t cluster_fnv1a(const void *buf, size_t bytes)
{
    const uint8_t *p = buf;
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < bytes; i++) {
        h ^= p[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

static uint64_t mix64(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

static int is_float(eccl_dtype t)
{
    return t == ECCL_F16 || t == ECCL_BF16 || t == ECCL_F32 || t == ECCL_F64;
}

static int is_signed_int(eccl_dtype t)
{
    return t == ECCL_I8 || t == ECCL_I16 || t == ECCL_I32 || t == ECCL_I64;
}

static unsigned width_bits(eccl_dtype t) { return (unsigned)eccl_dtype_size(t) * 8u; }

static uint64_t width_mask(eccl_dtype t)
{
    unsigned w = width_bits(t);
    return w == 64 ? ~UINT64_C(0) : (UINT64_C(1) << w) - 1;
}

static int64_t sext(uint64_t v, unsigned w)
{
    if (w == 64) return (int64_t)v;
    uint64_t sign = UINT64_C(1) << (w - 1);
    v &= (UINT64_C(1) << w) - 1;
    return (int64_t)(v ^ sign) - (int64_t)sign;
}

/* Round-to-nearest-even into a 16-bit float with `mant` fraction bits and
 * `ebits` exponent bits. Written independently of the library's half.h so
 * the expected values do not share its conversions. */
static uint16_t rne16(double v, int mant, int ebits)
{
    int bias = (1 << (ebits - 1)) - 1;
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    uint16_t emax = (uint16_t)((1 << ebits) - 1);
    if (isnan(v)) return (uint16_t)(sign | (emax << mant) | (1u << (mant - 1)));
    double a = fabs(v);
    if (a == 0) return sign;
    if (isinf(a)) return (uint16_t)(sign | (emax << mant));
    int e;
    frexp(a, &e);
    int E = e - 1; /* a in [2^E, 2^(E+1)) */
    if (E < 1 - bias) {
        double r = nearbyint(ldexp(a, bias - 1 + mant));
        return (uint16_t)(sign | (uint16_t)r); /* r == 2^mant encodes the least normal */
    }
    double r = nearbyint(ldexp(a, mant - E));
    if (r >= ldexp(1.0, mant + 1)) {
        r = ldexp(1.0, mant);
        E++;
    }
    if (E > bias) return (uint16_t)(sign | (emax << mant));
    return (uint16_t)(sign | ((uint32_t)(E + bias) << mant) | ((uint32_t)r - (1u << mant)));
}

static double dec16(uint16_t h, int mant, int ebits)
{
    int bias = (1 << (ebits - 1)) - 1;
    unsigned emax = (1u << ebits) - 1;
    unsigned ex = (h >> mant) & emax;
    unsigned frac = h & ((1u << mant) - 1);
    double v;
    if (ex == 0) v = ldexp(frac, 1 - bias - mant);
    else if (ex == emax) v = frac ? NAN : INFINITY;
    else v = ldexp((double)(frac | (1u << mant)), (int)ex - bias - mant);
    return (h & 0x8000) ? -v : v;
}

static void store_bits(void *buf, eccl_dtype t, size_t i, uint64_t bits)
{
    switch (eccl_dtype_size(t)) {
    case 1: ((uint8_t *)buf)[i] = (uint8_t)bits; break;
    case 2: ((uint16_t *)buf)[i] = (uint16_t)bits; break;
    case 4: ((uint32_t *)buf)[i] = (uint32_t)bits; break;
    default: ((uint64_t *)buf)[i] = bits; break;
    }
}

static uint64_t load_bits(const void *buf, eccl_dtype t, size_t i)
{
    switch (eccl_dtype_size(t)) {
    case 1: return ((const uint8_t *)buf)[i];
    case 2: return ((const uint16_t *)buf)[i];
    case 4: return ((const uint32_t *)buf)[i];
    default: return ((const uint64_t *)buf)[i];
    }
}

void cluster_store(void *buf, eccl_dtype t, size_t i, double v)
{
    switch (t) {
    case ECCL_F16: ((uint16_t *)buf)[i] = rne16(v, 10, 5); break;
    case ECCL_BF16: ((uint16_t *)buf)[i] = rne16(v, 7, 8); break;
    case ECCL_F32: ((float *)buf)[i] = (float)v; break;
    case ECCL_F64: ((double *)buf)[i] = v; break;
    default: store_bits(buf, t, i, (uint64_t)(int64_t)v); break;
    }
}

double cluster_load(const void *buf, eccl_dtype t, size_t i)
{
    switch (t) {
    case ECCL_F16: return dec16(((const uint16_t *)buf)[i], 10, 5);
    case ECCL_BF16: return dec16(((const uint16_t *)buf)[i], 7, 8);
    case ECCL_F32: return ((const float *)buf)[i];
    case ECCL_F64: return ((const double *)buf)[i];
    default: {
        uint64_t b = load_bits(buf, t, i);
        return is_signed_int(t) ? (double)sext(b, width_bits(t)) : (double)b;
    }
    }
}

/* The patterns SMALL and PROD depend on i only through i mod their period,
 * which lets fill and expected compute one period and tile it. */
#define SMALL_PERIOD 13u
#define PROD_PERIOD 4u
#define TILE (SMALL_PERIOD * PROD_PERIOD)

static int64_t small_int(int index, size_t i, uint64_t seed, enum cluster_pattern pat)
{
    if (pat == CL_PAT_PROD) {
        static const int64_t vals[PROD_PERIOD] = {-1, 1, 2, 1};
        return vals[((uint64_t)index * 5 + (i % PROD_PERIOD) * 7 + seed % PROD_PERIOD) % PROD_PERIOD];
    }
    return (int64_t)(((uint64_t)index + 1) * 7 + (i % SMALL_PERIOD) * 3 + seed % SMALL_PERIOD) %
               SMALL_PERIOD - 6;
}

/* Element i of one contribution as stored bits (integers) or as the exact
 * double the stored float holds. */
static uint64_t contrib_int(eccl_dtype t, int index, size_t i, uint64_t seed,
                            enum cluster_pattern pat)
{
    if (pat == CL_PAT_RANDOM)
        return mix64(mix64(seed * 1000003u + (uint64_t)index) + i) & width_mask(t);
    int64_t v = small_int(index, i, seed, pat);
    if (!is_signed_int(t)) v = pat == CL_PAT_PROD ? (v < 0 ? 2 : v) : v + 6;
    return (uint64_t)v & width_mask(t);
}

static double contrib_float(eccl_dtype t, int index, size_t i, uint64_t seed,
                            enum cluster_pattern pat)
{
    if (pat != CL_PAT_RANDOM) return (double)small_int(index, i, seed, pat);
    uint64_t r = mix64(mix64(seed * 1000003u + (uint64_t)index) + i);
    double u = (double)(r >> 11) * 0x1p-53;
    double v = 0.5 + 3.5 * u;
    if (r & 1) v = -v;
    uint8_t tmp[8];
    cluster_store(tmp, t, 0, v);
    return cluster_load(tmp, t, 0);
}

static void tile(void *buf, size_t esize, size_t count, size_t period)
{
    size_t have = period < count ? period : count;
    uint8_t *b = buf;
    /* b[have + j] = b[j] holds for any j < have while have is a multiple of
     * the period: doubling keeps it one until the last, partial copy. */
    while (have < count) {
        size_t n = have < count - have ? have : count - have;
        memcpy(b + have * esize, b, n * esize);
        have += n;
    }
}

void cluster_fill(void *buf, eccl_dtype t, size_t count, int index, uint64_t seed,
                  enum cluster_pattern pat)
{
    size_t n = pat == CL_PAT_RANDOM ? count : (count < TILE ? count : TILE);
    for (size_t i = 0; i < n; i++) {
        if (is_float(t)) cluster_store(buf, t, i, contrib_float(t, index, i, seed, pat));
        else store_bits(buf, t, i, contrib_int(t, index, i, seed, pat));
    }
    if (n < count) tile(buf, eccl_dtype_size(t), count, TILE);
}

static uint64_t reduce_int(eccl_dtype t, eccl_op op, uint64_t a, uint64_t b)
{
    unsigned w = width_bits(t);
    uint64_t m = width_mask(t);
    int sgn = is_signed_int(t);
    switch (op) {
    case ECCL_SUM:
    case ECCL_AVG: return (a + b) & m;
    case ECCL_PROD: return (a * b) & m;
    case ECCL_MIN: return (sgn ? sext(b, w) < sext(a, w) : b < a) ? b : a;
    default: return (sgn ? sext(b, w) > sext(a, w) : b > a) ? b : a;
    }
}

int cluster_expected(void *out, eccl_dtype t, size_t count, eccl_op op, const int *indices,
                     int n, uint64_t seed, enum cluster_pattern pat)
{
    if (n < 1) return -1;
    if (is_float(t) && pat == CL_PAT_RANDOM && op != ECCL_MIN && op != ECCL_MAX) return -1;
    size_t lim = pat == CL_PAT_RANDOM ? count : (count < TILE ? count : TILE);
    for (size_t i = 0; i < lim; i++) {
        if (!is_float(t)) {
            uint64_t acc = contrib_int(t, indices[0], i, seed, pat);
            for (int k = 1; k < n; k++)
                acc = reduce_int(t, op, acc, contrib_int(t, indices[k], i, seed, pat));
            if (op == ECCL_AVG) {
                if (is_signed_int(t))
                    acc = (uint64_t)(sext(acc, width_bits(t)) / (int64_t)n) & width_mask(t);
                else
                    acc = acc / (uint64_t)n;
            }
            store_bits(out, t, i, acc);
            continue;
        }
        double acc = contrib_float(t, indices[0], i, seed, pat);
        for (int k = 1; k < n; k++) {
            double v = contrib_float(t, indices[k], i, seed, pat);
            switch (op) {
            case ECCL_SUM:
            case ECCL_AVG: acc += v; break;
            case ECCL_PROD: acc *= v; break;
            case ECCL_MIN: acc = v < acc ? v : acc; break;
            default: acc = v > acc ? v : acc; break;
            }
        }
        if (op == ECCL_AVG) {
            /* The owner divides the (here exact) sum in the dtype's own
             * arithmetic: f64 in double, the others in float. */
            if (t == ECCL_F64) acc = acc / (double)n;
            else acc = (double)((float)acc / (float)n);
        }
        cluster_store(out, t, i, acc);
    }
    if (lim < count) tile(out, eccl_dtype_size(t), count, TILE);
    return 0;
}

size_t cluster_mismatches(const void *got, const void *want, eccl_dtype t, size_t count,
                          size_t *first)
{
    size_t es = eccl_dtype_size(t);
    if (memcmp(got, want, count * es) == 0) return 0;
    size_t bad = 0;
    const uint8_t *g = got, *w = want;
    for (size_t i = 0; i < count; i++) {
        if (memcmp(g + i * es, w + i * es, es) != 0) {
            if (bad++ == 0 && first) *first = i;
        }
    }
    return bad;
}

int cluster_test_setup(void **state)
{
    *state = calloc(1, sizeof(cluster));
    return *state ? 0 : -1;
}

int cluster_test_teardown(void **state)
{
    cluster_fini(*state);
    free(*state);
    return 0;
}

int cluster_check_values(const void *out, eccl_dtype t, eccl_op op, enum cluster_pattern pat,
                         size_t count, const int *idx, int n, uint64_t seed, const char *what)
{
    uint8_t *want = malloc(count * eccl_dtype_size(t) + 8);
    CL_CHECK(want, "oom");
    CL_CHECK(cluster_expected(want, t, count, op, idx, n, seed, pat) == 0, "expected");
    size_t first = 0, bad = cluster_mismatches(out, want, t, count, &first);
    double g = bad ? cluster_load(out, t, first) : 0, w = bad ? cluster_load(want, t, first) : 0;
    free(want);
    CL_CHECK(bad == 0, "%s: %zu wrong elements of %zu (world %d), first [%zu] = %g want %g", what,
             bad, count, n, first, g, w);
    return 0;
}

/* ---- a job that grows -------------------------------------------------------- */

int cluster_job_until_join(eccl_comm *c, int index, int n0, int n1, uint64_t timeout_ms,
                           int (*before_round)(int index, void *arg), void *arg,
                           cluster_join_seen *seen)
{
    int idx[CLUSTER_MAX_PEERS];
    for (int i = 0; i < n0; i++) idx[i] = i;
    uint64_t deadline = cluster_now_ns() + timeout_ms * CL_MS;
    cluster_slot *self = cluster_self();
    *seen = (cluster_join_seen){0};
    int32_t send[1000], buf[1000];
    for (uint64_t k = 0;; k++) {
        if (before_round && before_round(index, arg)) return 1;
        cluster_fill(send, ECCL_I32, 1000, index, 10 + k, CL_PAT_SMALL);
        eccl_reduce_info info;
        eccl_result rc = eccl_allreduce(c, send, buf, 1000, ECCL_I32, ECCL_SUM, 10 + k, &info);
        CL_CHECK(rc == ECCL_OK, "job all-reduce %llu: %s", (unsigned long long)k, eccl_strerror(rc));
        CL_CHECK(info.world_size == (uint32_t)n0, "world %u before the join", info.world_size);
        if (cluster_check_values(buf, ECCL_I32, ECCL_SUM, CL_PAT_SMALL, 1000, idx, n0, 10 + k,
                                 "before the join"))
            return 1;
        atomic_store(&self->finished, (long long)k + 1);
        uint32_t pending = 0, agreed = 0;
        int voted = 0;
        rc = cluster_agreed_admit(c, 1000000 + k, &pending, &agreed, &voted);
        CL_CHECK(rc == ECCL_OK, "admission check %llu: %s", (unsigned long long)k, eccl_strerror(rc));
        if (pending > seen->max_pending) seen->max_pending = pending;
        seen->votes += voted;
        seen->disagreed += pending != agreed;
        int64_t w = 0;
        CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &w));
        if (w == n1) return 0;
        CL_CHECK(w == n0, "world %lld while waiting for the join", (long long)w);
        CL_CHECK(cluster_now_ns() < deadline, "no newcomer after %llu ms (%llu rounds)",
                 (unsigned long long)timeout_ms, (unsigned long long)k + 1);
        usleep(1000);
    }
}

int cluster_after_join(eccl_comm *c, int index, int n, int ops, int in_place)
{
    enum { COUNT = 10007 };
    int idx[CLUSTER_MAX_PEERS];
    for (int i = 0; i < n; i++) idx[i] = i;
    int64_t w = 0;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &w));
    CL_CHECK(w == n, "ECCL_ATTR_WORLD_SIZE %lld after the join, want %d", (long long)w, n);
    float *buf = malloc(COUNT * sizeof *buf);
    float *send = in_place ? buf : malloc(COUNT * sizeof *send);
    int bad = !buf || !send;
    for (int j = 0; j < ops && !bad; j++) {
        uint64_t tag = 5000 + (uint64_t)j;
        cluster_fill(send, ECCL_F32, COUNT, index, tag, CL_PAT_SMALL);
        eccl_reduce_info info;
        eccl_result rc = eccl_allreduce(c, send, buf, COUNT, ECCL_F32, ECCL_SUM, tag, &info);
        if (rc != ECCL_OK) cluster_fail("all-reduce %llu after the join: %s", (unsigned long long)tag,
                                        eccl_strerror(rc));
        else if (info.world_size != (uint32_t)n)
            cluster_fail("info.world_size %u, want %d", info.world_size, n);
        bad = rc != ECCL_OK || info.world_size != (uint32_t)n ||
              cluster_check_values(buf, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, COUNT, idx, n, tag,
                                   "after the join");
        if (!bad) cluster_push_hash(cluster_fnv1a(buf, COUNT * sizeof *buf));
    }
    if (!buf || !send) cluster_fail("out of memory");
    if (!in_place) free(send);
    free(buf);
    return bad;
}

int cluster_hook_sends(int (*cb)(const char *, int *, void **, unsigned int *))
{
    static const char *const sends[] = {"eccl/net/send", "eccl/net_ibv/post", "eccl/net_shm/ctl"};
    for (size_t i = 0; i < sizeof sends / sizeof *sends; i++)
        if (fiu_enable_external(sends[i], 1, NULL, 0, cb) != 0) return -1;
    return 0;
}
