/* eccl-emu's runner (run_emu.h): the scenario with real processes on one
 * box. One loop, one thread: it starts the master, the relays and the
 * workers when the plan says, fires the timed faults, reads every worker's
 * stdout a line at a time into the job observer (job.h) with the wall
 * clock's time since the job's start, and reaps what ends.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_rows.h"
#include "diloco.h"
#include "job.h"
#include "results.h"
#include "run_emu.h"

#define LINE_MAX_BYTES 2048
#define ADDR_LEN 64
/* How long the master and a relay get to say where they listen, and to
 * leave once asked (SIGTERM) before SIGKILL. */
#define START_TIMEOUT_NS 10000000000ull
#define STOP_GRACE_NS 5000000000ull

typedef enum proc_kind { P_MASTER, P_RELAY, P_WORKER, P_BENCH, P_DILOCO } proc_kind;

typedef struct proc {
    proc_kind kind;
    char name[32];
    pid_t pid;  /* 0: none */
    int out;    /* its stdout; -1: closed */
    char buf[LINE_MAX_BYTES];
    size_t len;
    rank_state *r; /* a worker's rank */
    int taken;     /* killed or stopped by the plan: its end is no return */
    int stopped;   /* SIGSTOPped: a silent host */
} proc;

typedef struct emu {
    eccl_scenario *cfg;
    const eccl_scn_emu_options *o;
    eccl_scn_job job;
    uint64_t t0; /* CLOCK_MONOTONIC at the job's start: the plan's origin too */
    char plan[PATH_MAX], wires[PATH_MAX], logs[PATH_MAX], t0s[32];
    char traces[PATH_MAX]; /* trace = 1: the workers' ECCL_TRACE_DIR */
    char master_addr[ADDR_LEN];
    proc master;
    proc *relays;
    char (*relay_addr)[ADDR_LEN];
    int relay_share;
    int relay_kills_done;
    proc *workers;     /* per rank: its current worker */
    uint64_t *kill_at; /* per rank: an armed kill @ iter; UINT64_MAX none */
    int *pending;      /* per rank: its worker starts at arrive_ns */
    int *order, norder, next_fault;
    const char *failure; /* what the runner could not do; NULL: nothing */
    int warned_early;    /* a timed fault came before the job's bootstrap: said */
    FILE *master_log;    /* logs/master.log: the master's lines, written here */
    int registered;      /* "peer N registered" lines of the master */
    int launched;        /* worker processes started */
    uint64_t last_launch_ns;
    eccl_scn_dl *dl;     /* workload = diloco */
} emu;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ns(const emu *e) { return mono_ns() - e->t0; }

/* Whether the next worker may start: once every one started before it has
 * registered with the master (LAUNCH_WAIT_NS at most). In the simulator
 * ranks arrive in the order of their arrival times, and the master admits
 * them in that order, which makes the ring; real processes take tens of ms
 * to start, more on a loaded box, and would arrive in any order, and with
 * another ring another run (two regions crossed twice or four times). */
#define LAUNCH_WAIT_NS 5000000000ull
static int launch_gate(emu *e, uint64_t now)
{
    return e->registered >= e->launched || now >= e->last_launch_ns + LAUNCH_WAIT_NS;
}

/* The job's log lines, stamped as eccl-sim stamps its own (wall clock). */
static void emu_say(void *ctx, const char *who, const char *line)
{
    const emu *e = ctx;
    printf("[%14.9f] %s %s\n", (double)now_ns(e) / 1e9, who, line);
}

/* ---- processes ----------------------------------------------------------- */

/* Starts argv[0] (a program in the bindir) on emulated host `host`: its
 * stdout a pipe the loop reads, its stderr logs/NAME.log, its net shaped by
 * the plan as that host. -1 after saying why. */
static int spawn(emu *e, proc *p, proc_kind kind, const char *name, int host, char *const argv[])
{
    /* The master's log comes through the pipe too, at info or finer: its
     * "peer N registered" lines pace the launches (launch_gate). */
    const int master = kind == P_MASTER;
    char path[PATH_MAX], log[PATH_MAX], ip[32];
    if (snprintf(path, sizeof path, "%s/%s", e->o->bindir, argv[0]) >= (int)sizeof path ||
        snprintf(log, sizeof log, "%s/%s.log", e->logs, name) >= (int)sizeof log) {
        fprintf(stderr, "eccl-emu: %s: path too long\n", e->logs);
        return -1;
    }
    eccl_scn_emu_host_addr(host, ip, sizeof ip);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        fprintf(stderr, "eccl-emu: pipe: %s\n", strerror(errno));
        return -1;
    }
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "eccl-emu: fork: %s\n", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        /* A rank must not outlive its launcher. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        int err = master ? fds[1] : open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (err < 0 || dup2(fds[1], STDOUT_FILENO) < 0 || dup2(err, STDERR_FILENO) < 0) _exit(127);
        const char *lvl = getenv("ECCL_LOG_LEVEL");
        if (master && !(lvl && (!strcasecmp(lvl, "debug") || !strcasecmp(lvl, "trace"))))
            setenv("ECCL_LOG_LEVEL", "info", 1);
        setenv("ECCL_P2P_HOST", ip, 1);
        setenv("ECCL_CHAOS", e->plan, 1);
        setenv("ECCL_CHAOS_SELF", ip, 1);
        setenv("ECCL_CHAOS_T0", e->t0s, 1);
        setenv("ECCL_CHAOS_WIRES", e->wires, 1);
        if (e->cfg->algo[0]) setenv("ECCL_ALGO", e->cfg->algo, 1);
        setenv("ECCL_PROGRESS_THREAD", e->cfg->progress_thread ? "1" : "0", 1);
        if (e->cfg->trace) setenv("ECCL_TRACE_DIR", e->traces, 1);
        if (e->cfg->pool) {
            char pool[16];
            snprintf(pool, sizeof pool, "%d", e->cfg->pool);
            setenv("ECCL_P2P_POOL", pool, 1);
        }
        signal(SIGPIPE, SIG_DFL);
        execv(path, argv);
        fprintf(stderr, "eccl-emu: cannot run %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    memset(p, 0, sizeof *p);
    p->kind = kind;
    snprintf(p->name, sizeof p->name, "%s", name);
    p->pid = pid;
    p->out = fds[0];
    if (master && !(e->master_log = fopen(log, "w"))) {
        fprintf(stderr, "eccl-emu: %s: %s\n", log, strerror(errno));
        return -1;
    }
    return 0;
}

/* Waits for p (it has closed its stdout or was killed); its status as a
 * worker's: the exit status, or 128 + the signal. */
static int reap(proc *p)
{
    int st = 0;
    while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR) {}
    if (p->out >= 0) close(p->out);
    p->out = -1;
    p->pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static void worker_line(emu *e, proc *p, const char *line)
{
    if (e->o->verbose) emu_say(e, p->r->name, line);
    eccl_scn_job_line(p->r, now_ns(e), line);
}

/* Reads what p has written; each whole line to the observer (workers) or,
 * with --verbose, to the log (master, relays). Returns 1 at its end. */
static int drain(emu *e, proc *p, char *first_line, size_t first_len)
{
    for (;;) {
        ssize_t n = read(p->out, p->buf + p->len, sizeof p->buf - 1 - p->len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return 0; /* EAGAIN: all read */
        if (n == 0) return 1;
        p->len += (size_t)n;
        char *nl;
        while ((nl = memchr(p->buf, '\n', p->len))) {
            *nl = '\0';
            if (p->kind == P_WORKER) worker_line(e, p, p->buf);
            else if (p->kind == P_BENCH) printf("%s\n", p->buf); /* the rows, as eccl-bench prints them */
            else if (p->kind == P_DILOCO) {
                if (e->o->verbose) emu_say(e, p->r->name, p->buf);
                eccl_scn_dl_line(e->dl, p->r, now_ns(e), p->buf);
            }
            else if (first_line && !first_line[0]) snprintf(first_line, first_len, "%s", p->buf);
            else if (e->o->verbose) emu_say(e, p->name, p->buf);
            if (p->kind == P_MASTER && e->master_log) {
                fprintf(e->master_log, "%s\n", p->buf);
                e->registered += strstr(p->buf, " registered in group ") != NULL;
            }
            const size_t used = (size_t)(nl + 1 - p->buf);
            memmove(p->buf, nl + 1, p->len - used);
            p->len -= used;
        }
        if (p->len == sizeof p->buf - 1) p->len = 0; /* a line too long to be the loop's: dropped */
    }
}

/* Starts a master (parent NULL) or a relay of parent on host, and reads
 * back the address it bound ("eccl-master listening on ADDR"). */
static int start_coordinator(emu *e, proc *p, const char *name, int host, const char *parent, char *addr)
{
    char ip[32], listen[48];
    eccl_scn_emu_host_addr(host, ip, sizeof ip);
    snprintf(listen, sizeof listen, "%s:0", ip);
    char *argv[] = {"eccl-master", "--listen", listen, parent ? "--relay" : NULL, (char *)parent, NULL};
    if (spawn(e, p, parent ? P_RELAY : P_MASTER, name, host, argv)) return -1;
    char line[LINE_MAX_BYTES] = "";
    const uint64_t until = mono_ns() + START_TIMEOUT_NS;
    while (!line[0] && mono_ns() < until) {
        struct pollfd pf = {.fd = p->out, .events = POLLIN};
        poll(&pf, 1, 100);
        if (drain(e, p, line, sizeof line)) break;
    }
    const char *at = strstr(line, " on ");
    if (!at || sscanf(at + 4, "%63s", addr) != 1) {
        fprintf(stderr, "eccl-emu: %s did not start (see %s/%s.log)\n", name, e->logs, name);
        return -1;
    }
    return 0;
}

static void stop_coordinator(proc *p)
{
    if (!p->pid) return;
    kill(p->pid, SIGTERM);
    const uint64_t until = mono_ns() + STOP_GRACE_NS;
    int st;
    while (waitpid(p->pid, &st, WNOHANG) == 0) {
        if (mono_ns() > until) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
            break;
        }
        usleep(10000);
    }
    if (p->out >= 0) close(p->out);
    p->out = -1;
    p->pid = 0;
}

/* ---- workers and faults -------------------------------------------------- */

static void rank_master(const emu *e, const rank_state *r, char *buf, size_t len)
{
    if (e->cfg->relays)
        snprintf(buf, len, "%s,%s", e->relay_addr[(r->idx - 1) / e->relay_share], e->master_addr);
    else
        snprintf(buf, len, "%s", e->master_addr);
}

/* Its worker's process, as eccl-sim runs the loop:
 * eccl-worker --master M --count C --iters I --world-min W --start-world S ... */
static void launch_worker(emu *e, rank_state *r)
{
    const eccl_scenario *c = e->cfg;
    char master[2 * ADDR_LEN + 2], count[24], iters[16], wmin[16], start[16], step[16], pto[16], opt[16],
        oto[16], sat[16], sms[16], name[48];
    rank_master(e, r, master, sizeof master);
    snprintf(count, sizeof count, "%ld", c->count);
    snprintf(iters, sizeof iters, "%d", c->iters);
    snprintf(wmin, sizeof wmin, "%d", c->world_min);
    snprintf(start, sizeof start, "%d", r->start_world);
    snprintf(step, sizeof step, "%ld", lround(c->step_s * 1e3));
    snprintf(pto, sizeof pto, "%ld", lround(c->peer_timeout_s * 1e3));
    snprintf(opt, sizeof opt, "%d", c->optimize_at);
    snprintf(oto, sizeof oto, "%ld", lround(c->op_timeout_s * 1e3));
    snprintf(sat, sizeof sat, "%d", r->idx == c->stall_rank ? c->stall_iter : 0);
    snprintf(sms, sizeof sms, "%d", r->idx == c->stall_rank ? c->stall_ms : 0);
    snprintf(name, sizeof name, "%s.%d", r->name, r->lives);
    char *argv[] = {"eccl-worker", "--master", master, "--count", count, "--iters", iters, "--world-min", wmin,
                    "--start-world", start, "--wait-ms", "30000", "--step-ms", step, "--peer-timeout-ms", pto,
                    "--optimize-at", opt, "--rejoins", c->relays ? "1" : "0", "--op-timeout-ms", oto,
                    "--stall-at", sat, "--stall-ms", sms, NULL};
    proc *p = &e->workers[r->idx - 1];
    if (spawn(e, p, P_WORKER, name, eccl_scn_rank_host(c, r->idx), argv)) {
        e->failure = "a worker could not be started";
        eccl_scn_job_worker_ended(r);
        return;
    }
    p->r = r;
    r->pid = p->pid;
    e->launched++;
    e->last_launch_ns = now_ns(e);
    if (e->o->verbose) eccl_scn_job_say(&e->job, "eccl-emu", "start %s (pid %d): %d started, %d registered", name,
                                        (int)p->pid, e->launched, e->registered);
    eccl_scn_job_worker_arrived(r);
}

/* Rank r's next worker, due at at_ns (now or later). */
static void start_worker(emu *e, rank_state *r, uint64_t at_ns, int start_world)
{
    eccl_scn_job_worker_starts(r, at_ns, start_world);
    e->pending[r->idx - 1] = 1;
}

/* The plan takes r's worker: SIGKILL (a crash) or SIGSTOP (a silent host:
 * nothing more comes from it, its sockets stay open). */
static void take(emu *e, rank_state *r, const char *event, int sig)
{
    proc *p = &e->workers[r->idx - 1];
    e->pending[r->idx - 1] = 0; /* a worker not started yet never will be */
    if (p->pid && !p->taken && r->running) {
        kill(p->pid, sig);
        p->taken = 1;
        p->stopped = sig == SIGSTOP;
    }
    eccl_scn_job_host_off(r, now_ns(e), event);
}

/* A stopped worker's host comes back: the old process is gone for good. */
static void bury(proc *p)
{
    if (!p->pid) return;
    kill(p->pid, SIGKILL);
    reap(p);
}

static void emu_arm_kill(void *ctx, rank_state *r, uint64_t at_ns)
{
    emu *e = ctx;
    e->kill_at[r->idx - 1] = at_ns;
}

static void kill_rank(emu *e, rank_state *r)
{
    eccl_scn_job_say(&e->job, "eccl-emu", "kill rank=%d host=%s (SIGKILL)", r->idx, r->host);
    take(e, r, "killed", SIGKILL);
}

/* Real processes start and bootstrap slower than simulated ones (exec,
 * the dynamic loader, a loaded box: some 100-300 ms against the
 * simulator's few ms), so a fault timed for the simulator's job may land
 * before this one has begun: said once, since the run then tests something
 * else than the scenario meant. */
static void warn_if_early(emu *e, const eccl_scn_fault *f, uint64_t now)
{
    if (e->warned_early || f->kind == F_JOIN) return;
    for (int i = 0; i < e->cfg->ranks; i++) {
        const rank_state *r = &e->job.rk[i];
        if (r->late || r->first_begin_ns || r->killed) continue;
        e->warned_early = 1;
        char t[32];
        eccl_results_fmt_time(t, sizeof t, now);
        fprintf(stderr, "eccl-emu: %s (line %d) fired at %s s, before rank %d began its first all-reduce: real "
                        "processes bootstrap slower than simulated ones; time faults after the job's bootstrap "
                        "(bootstrap_s in summary.tsv) or by iteration (kill = R @ iter I) to compare runs\n",
                eccl_scn_fault_name(f->kind), f->line, t, r->idx);
        return;
    }
}

static void apply_fault(emu *e, int idx)
{
    const eccl_scenario *c = e->cfg;
    const eccl_scn_fault *f = &c->faults[idx];
    rank_state *r = f->rank > 0 ? &e->job.rk[f->rank - 1] : NULL;
    const uint64_t now = now_ns(e);
    warn_if_early(e, f, now);
    switch (f->kind) {
    case F_KILL:
        kill_rank(e, r);
        break;
    case F_HOST_OFF:
    case F_HOST_ON: {
        int first, last;
        eccl_scn_host_ranks(c, eccl_scn_rank_host(c, r->idx), &first, &last);
        if (f->kind == F_HOST_OFF) {
            eccl_scn_job_say(&e->job, "eccl-emu", "host_off rank=%d host=%s (silent: SIGSTOP)", r->idx, r->host);
            for (int q = first; q <= last; q++) take(e, &e->job.rk[q - 1], "host_off", SIGSTOP);
        } else {
            eccl_scn_job_say(&e->job, "eccl-emu", "host_on rank=%d host=%s: a new worker starts%s", r->idx,
                             r->host, first < last ? " for each" : "");
            for (int q = first; q <= last; q++) {
                bury(&e->workers[q - 1]);
                eccl_scn_job_add_event(&e->job, now, q, "host_on", -1, -1, NULL, NULL);
                start_worker(e, &e->job.rk[q - 1], now, 0);
            }
        }
        break;
    }
    case F_LINK_OFF:
    case F_LINK_ON:
        /* The plan holds the partition from this time; here it is recorded. */
        eccl_scn_job_say(&e->job, "eccl-emu", "%s %s%s", f->kind == F_LINK_ON ? "link_on" : "link_off",
                         f->links[0], f->nlinks > 1 ? ",..." : "");
        eccl_scn_job_add_event(&e->job, now, 0, f->kind == F_LINK_ON ? "link_on" : "link_off", -1, -1, NULL,
                               NULL);
        if (f->kind == F_LINK_OFF) eccl_scn_job_fault(&e->job, now);
        break;
    case F_SLOW:
        eccl_scn_job_say(&e->job, "eccl-emu", "slow_link %s%s", f->links[0], f->nlinks > 1 ? ",..." : "");
        eccl_scn_job_add_event(&e->job, now, 0, "slow_link", -1, -1, NULL, NULL);
        if (e->job.slow_ns == UINT64_MAX) e->job.slow_ns = now;
        break;
    case F_JOIN:
        break; /* the rank's first worker starts then */
    }
}

/* The next relay kill not yet fired, in time order (file order at one
 * instant); -1 when none is left. */
static int next_relay_kill(const emu *e)
{
    const eccl_scenario *c = e->cfg;
    if (e->relay_kills_done >= c->n_relay_kills) return -1;
    /* Sorted once in eccl_scn_emu_run; done ones are the first. */
    return e->relay_kills_done;
}

typedef __typeof__(((eccl_scenario *)0)->relay_kills[0]) relay_kill;

/* By time, then by line: file order at one instant. */
static int relay_kill_cmp(const void *a, const void *b)
{
    const relay_kill *x = a, *y = b;
    if (x->at_ns != y->at_ns) return x->at_ns < y->at_ns ? -1 : 1;
    return x->line - y->line;
}

/* ---- the loop ------------------------------------------------------------ */


/* Everything due by now: arrivals, timed faults, armed kills, relay kills.
 * Returns the time of the next one (UINT64_MAX: none). */
static uint64_t fire_due(emu *e)
{
    const eccl_scenario *c = e->cfg;
    uint64_t now = now_ns(e), next = UINT64_MAX;
    while (e->next_fault < e->norder && c->faults[e->order[e->next_fault]].at_ns <= now)
        apply_fault(e, e->order[e->next_fault++]);
    if (e->next_fault < e->norder) next = c->faults[e->order[e->next_fault]].at_ns;
    for (int k; (k = next_relay_kill(e)) >= 0;) {
        if (c->relay_kills[k].at_ns > now) {
            if (c->relay_kills[k].at_ns < next) next = c->relay_kills[k].at_ns;
            break;
        }
        const int relay = c->relay_kills[k].relay - 1;
        eccl_scn_job_say(&e->job, "eccl-emu", "kill_relay relay=%d at=%s: its ranks rejoin through the master",
                         relay + 1, e->relay_addr[relay]);
        eccl_scn_job_add_event(&e->job, now, 0, "kill_relay", -1, -1, NULL, NULL);
        eccl_scn_job_fault(&e->job, now);
        if (e->relays[relay].pid) kill(e->relays[relay].pid, SIGKILL);
        e->relay_kills_done++;
    }
    for (int i = 0; i < c->ranks; i++) {
        rank_state *r = &e->job.rk[i];
        if (e->kill_at[i] != UINT64_MAX) {
            if (e->kill_at[i] <= now) {
                e->kill_at[i] = UINT64_MAX;
                kill_rank(e, r);
            } else if (e->kill_at[i] < next) {
                next = e->kill_at[i];
            }
        }
        if (e->pending[i]) {
            if (r->arrive_ns <= now && launch_gate(e, now)) {
                e->pending[i] = 0;
                launch_worker(e, r);
            } else if (r->arrive_ns > now && r->arrive_ns < next) {
                next = r->arrive_ns;
            } else if (r->arrive_ns <= now) {
                next = now + 1000000u; /* the gate: look again in 1 ms */
            }
        }
    }
    return next;
}

/* A worker's stdout closed: it ended. A return unless the plan took it. */
static void worker_ended(emu *e, proc *p)
{
    rank_state *r = p->r;
    const int taken = p->taken;
    const int status = reap(p);
    if (taken) return;
    if (r->chaos_kill && status == 128 + SIGKILL) {
        /* The chaos plan's kill (SIGKILL, raised by the worker's own chaos net). */
        eccl_scn_job_say(&e->job, "eccl-emu", "kill rank=%d host=%s (the chaos plan)", r->idx, r->host);
        eccl_scn_job_host_off(r, now_ns(e), "killed");
        return;
    }
    r->returned = 1;
    r->status = status;
    eccl_scn_job_worker_ended(r);
}

/* Waits until `wake_ns` on the emulation's clock (100 ms at most, so that
 * the callers' deadlines are looked at) for output from the running
 * processes (workers not stopped, relays, the master), echoes what came
 * (drain), and hands each process whose output ended, that is that
 * exited, to `ended`. */
static void wait_output(emu *e, uint64_t wake_ns, void (*ended)(emu *, proc *, void *), void *arg)
{
    const eccl_scenario *c = e->cfg;
    struct pollfd pf[2 * ECCL_EMU_MAX_RANKS + 1];
    proc *who[2 * ECCL_EMU_MAX_RANKS + 1];
    int n = 0;
    for (int i = 0; i < c->ranks; i++)
        if (e->workers[i].pid && e->workers[i].out >= 0 && !e->workers[i].stopped)
            pf[n] = (struct pollfd){.fd = e->workers[i].out, .events = POLLIN}, who[n++] = &e->workers[i];
    for (int k = 0; k < eccl_scn_relay_count(c); k++)
        if (e->relays[k].pid && e->relays[k].out >= 0)
            pf[n] = (struct pollfd){.fd = e->relays[k].out, .events = POLLIN}, who[n++] = &e->relays[k];
    if (e->master.out >= 0) pf[n] = (struct pollfd){.fd = e->master.out, .events = POLLIN}, who[n++] = &e->master;
    const uint64_t now = now_ns(e);
    uint64_t wait = wake_ns > now ? wake_ns - now : 0;
    if (wait > 100000000u) wait = 100000000u;
    const struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)wait};
    if (ppoll(pf, (nfds_t)n, &ts, NULL) <= 0) return;
    for (int i = 0; i < n; i++)
        if ((pf[i].revents & (POLLIN | POLLHUP | POLLERR)) && drain(e, who[i], NULL, 0)) ended(e, who[i], arg);
}

/* The job's: a worker's end is judged; a coordinator that ends before the
 * job does died (a kill_relay): reaped. */
static void job_ended(emu *e, proc *p, void *arg)
{
    (void)arg;
    if (p->kind == P_WORKER) worker_ended(e, p);
    else reap(p);
}

static void run_loop(emu *e)
{
    const eccl_scenario *c = e->cfg;
    const uint64_t deadline = (uint64_t)llround(e->o->timeout_s * 1e9);
    while (e->job.done < c->ranks) {
        const uint64_t next = fire_due(e);
        if (e->job.done >= c->ranks) break;
        if (now_ns(e) >= deadline) {
            eccl_scn_job_say(&e->job, "eccl-emu", "FAIL the run passed --timeout %gs: every process is killed",
                             e->o->timeout_s);
            e->failure = "timeout";
            break;
        }
        /* To the nanosecond: a kill @ iter lands halfway through an
         * all-reduce that may take well under a millisecond. */
        wait_output(e, next < deadline ? next : deadline, job_ended, NULL);
    }
}

/* ---- workload = bench ---------------------------------------------------- */

typedef struct bench_run {
    int live, failed; /* eccl-bench processes still running; one failed */
} bench_run;

static void bench_ended(emu *e, proc *p, void *arg)
{
    bench_run *b = arg;
    const int status = reap(p);
    if (p->kind != P_BENCH) return;
    b->live--;
    if (status != 0) {
        eccl_scn_job_say(&e->job, "eccl-emu", "FAIL %s exited with status %d (see %s/%s.log)", p->name, status,
                         e->logs, p->name);
        b->failed = 1;
    }
}

/* eccl-bench's rows with real processes: one `eccl-bench --master M
 * --world N` per rank (the comm's rank 0 writes bench.tsv, summary.tsv and
 * the plot to outdir, and prints the rows, echoed here). Passes when every
 * rank exits 0 (eccl-bench exits non-zero on a wrong value or a failed
 * call) within --timeout. */
static int run_bench(emu *e, const char *outdir)
{
    const eccl_scenario *c = e->cfg;
    char world[16], minb[24], maxb[24], step[16], iters[16], warm[16], inflight[16], out[PATH_MAX], name[32];
    snprintf(world, sizeof world, "%d", c->ranks);
    snprintf(minb, sizeof minb, "%zu", c->bench_minbytes);
    snprintf(maxb, sizeof maxb, "%zu", c->bench_maxbytes);
    snprintf(step, sizeof step, "%d", c->bench_stepfactor);
    snprintf(iters, sizeof iters, "%d", c->iters);
    snprintf(warm, sizeof warm, "%d", c->bench_warmup);
    snprintf(inflight, sizeof inflight, "%d", c->bench_concurrent ? c->bench_concurrent : 1);
    snprintf(out, sizeof out, "%s", outdir);
    char *argv[] = {"eccl-bench", "--master", e->master_addr, "--world", world, "-b", minb, "-e", maxb, "-f", step,
                    "-n", iters, "-w", warm, "--coll", (char *)bench_coll_names[c->bench_coll], "--inflight", inflight, "--out", out, NULL};
    int started = 0;
    for (int i = 0; i < c->ranks; i++) {
        /* In rank order, each once the one before registered (launch_gate). */
        while (!launch_gate(e, now_ns(e))) {
            struct pollfd pf = {.fd = e->master.out, .events = POLLIN};
            if (poll(&pf, 1, 10) > 0 && drain(e, &e->master, NULL, 0)) break;
        }
        snprintf(name, sizeof name, "rank%d.1", i + 1);
        if (spawn(e, &e->workers[i], P_BENCH, name, eccl_scn_rank_host(c, i + 1), argv)) break;
        e->launched++;
        e->last_launch_ns = now_ns(e);
        started++;
    }
    bench_run b = {started, started < c->ranks};
    const uint64_t deadline = (uint64_t)llround(e->o->timeout_s * 1e9);
    while (b.live > 0 && !b.failed) {
        if (now_ns(e) >= deadline) {
            eccl_scn_job_say(&e->job, "eccl-emu", "FAIL the run passed --timeout %gs: every process is killed",
                             e->o->timeout_s);
            b.failed = 1;
            break;
        }
        wait_output(e, UINT64_MAX, bench_ended, &b);
    }
    return b.failed;
}

/* ---- workload = diloco --------------------------------------------------- */

/* One eccl-diloco process for rank r (its next life), as eccl-sim runs the
 * loop: the same model size, step, peer timeout, and the same stop (the
 * job's start + duration). */
static void dl_launch(emu *e, rank_state *r)
{
    const eccl_scenario *c = e->cfg;
    char count[24], step[16], pto[16], stop[32], corrupt[24], name[48];
    snprintf(count, sizeof count, "%ld", c->count);
    snprintf(step, sizeof step, "%ld", lround(c->step_s * 1e3));
    snprintf(pto, sizeof pto, "%ld", lround(c->peer_timeout_s * 1e3));
    /* eccl-diloco counts --stop-after-ms from its own start: what is left of
     * the job's duration (1 ms past it: a late worker stops at once). */
    const double left_ms = c->duration_s * 1e3 - (double)now_ns(e) / 1e6;
    snprintf(stop, sizeof stop, "%.3f", left_ms > 1 ? left_ms : 1.0);
    snprintf(corrupt, sizeof corrupt, "%llu", (unsigned long long)c->corrupt_at);
    snprintf(name, sizeof name, "%s.%d", r->name, r->lives);
    const int corrupts = c->corrupt_at && r->idx == 1 && r->lives == 1;
    char *argv[] = {"eccl-diloco", "--master", e->master_addr, "--count", count, "--step-ms", step,
                    "--peer-timeout-ms", pto, "--stop-after-ms", stop, corrupts ? "--corrupt-at" : NULL, corrupt,
                    NULL};
    proc *p = &e->workers[r->idx - 1];
    if (spawn(e, p, P_DILOCO, name, eccl_scn_rank_host(c, r->idx), argv)) {
        e->failure = "a worker could not be started";
        eccl_scn_dl_worker_returned(e->dl, r, 127);
        return;
    }
    p->r = r;
    r->pid = p->pid;
    e->launched++;
    e->last_launch_ns = now_ns(e);
}

static void diloco_ended(emu *e, proc *p, void *arg)
{
    (void)arg;
    const int taken = p->taken;
    const int status = reap(p);
    if (p->kind == P_DILOCO && !taken) eccl_scn_dl_worker_returned(e->dl, p->r, status);
}

/* The diloco loop: the workers start in rank order at their arrivals
 * (launch_gate), the churn kills (SIGKILL) and starts them at its seeded
 * times, until the churn is over and every worker has stopped. */
static void run_diloco(emu *e)
{
    const eccl_scenario *c = e->cfg;
    const uint64_t deadline = (uint64_t)llround(e->o->timeout_s * 1e9);
    int *pending = e->pending;
    for (int i = 0; i < c->ranks; i++) {
        eccl_scn_dl_worker_starts(e->dl, &e->job.rk[i], e->job.rk[i].arrive_ns);
        pending[i] = 1;
    }
    for (;;) {
        uint64_t now = now_ns(e), next = e->dl->next_ns;
        for (int i = 0; i < c->ranks; i++) {
            rank_state *r = &e->job.rk[i];
            if (!pending[i]) continue;
            if (r->arrive_ns <= now && launch_gate(e, now)) {
                pending[i] = 0;
                dl_launch(e, r);
            } else {
                const uint64_t t = r->arrive_ns > now ? r->arrive_ns : now + 1000000u;
                if (t < next) next = t;
            }
        }
        if (e->dl->next_ns <= now) {
            int do_kill;
            rank_state *r;
            if (eccl_scn_dl_decide(e->dl, &do_kill, &r)) {
                proc *p = &e->workers[r->idx - 1];
                if (do_kill) {
                    pending[r->idx - 1] = 0;
                    if (p->pid) {
                        kill(p->pid, SIGKILL);
                        p->taken = 1;
                    }
                    eccl_scn_dl_killed(e->dl, r, now);
                } else {
                    bury(p);
                    eccl_scn_dl_respawns(e->dl, r, now);
                    dl_launch(e, r);
                }
            }
            continue;
        }
        if (e->dl->next_ns == UINT64_MAX && e->dl->live == 0) break;
        if (now >= deadline) {
            eccl_scn_job_say(&e->job, "eccl-emu", "FAIL the run passed --timeout %gs: every process is killed",
                             e->o->timeout_s);
            e->failure = "timeout";
            e->job.oom = 1; /* diloco's verdict: "internal" */
            break;
        }
        wait_output(e, next, diloco_ended, NULL);
    }
}

/* ---- the run ------------------------------------------------------------- */

/* What eccl-emu cannot run: said, and exit status 2. Keys that only
 * price the simulation are noted and left to the real machine. */
static int refuse_or_note(const eccl_scenario *c, const char *file)
{
    if (c->ranks > ECCL_EMU_MAX_RANKS)
        return eccl_scn_error(file, 0, "ranks = %d: eccl-emu runs real processes, and one box holds tens of "
                              "them (at most %d); eccl-sim runs this scenario", c->ranks, ECCL_EMU_MAX_RANKS);
    if (1 + eccl_scn_rank_host(c, c->ranks) > 65000)
        return eccl_scn_error(file, 0, "more hosts than loopback addresses 127.77.X.Y");
    if (c->nccl2)
        return eccl_scn_error(file, 0, "workload = nccl2_bootstrap: NCCL 2.x's bootstrap is the simulator's "
                              "baseline, not eccl; eccl-sim runs it");
    if (c->diloco && c->relays)
        return eccl_scn_error(file, 0, "relays with workload = diloco: not in eccl-emu (the relays sit on spare "
                              "hosts there); eccl-sim runs it");
    if (c->bench && c->nfaults)
        return eccl_scn_error(file, 0, "workload = bench: no faults (eccl-sim refuses them too)");
    if (c->cuda)
        return eccl_scn_error(file, 0, "buffers = %s: eccl-emu's workers use host memory (CUDA needs a GPU; "
                              "eccl-sim simulates one)", eccl_scn_buffers_name(c));
    if (c->ibv) return eccl_scn_error(file, 0, "transport = ibv: this box has no RDMA device; eccl-sim runs it");
    if (c->corrupt_at || c->bench_corrupt || c->nccl2_corrupt)
        return eccl_scn_error(file, 0, "the test-only corruption keys are the simulator's");
    if (c->phantom)
        fprintf(stderr, "eccl-emu: %s: buffers = phantom: real processes carry real bytes; values are checked\n",
                file);
    if (c->master_msg_cost_s > 0 || c->reduce_rate_Bps > 0 || c->copy_rate_Bps > 0 || c->latency_net ||
        c->shm_bandwidth_Bps > 0 || c->tls_Bps > 0)
        fprintf(stderr, "eccl-emu: %s: master_msg_cost, reduce_rate, copy_rate, shm_bandwidth, tls_rate and "
                        "net_model price the simulation; real processes pay their own costs (ECCL_TLS runs "
                        "TLS for real)\n", file);
    return 0;
}

/* The partition analysis on the platform model's routes (eccl_scn_route):
 * a link's id is its index in a table of the names seen. */
typedef struct emu_routes {
    const eccl_scenario *c;
    char (*names)[LINK_NAME_MAX];
    int n, cap;
    uintptr_t (*fault_ids)[2 * MAX_FAULT_LINKS];
    int *fault_n;
} emu_routes;

static uintptr_t link_id(emu_routes *er, const char *name)
{
    for (int i = 0; i < er->n; i++)
        if (!strcmp(er->names[i], name)) return (uintptr_t)i + 1;
    if (er->n == er->cap) {
        int cap = er->cap ? 2 * er->cap : 64;
        void *m = realloc(er->names, (size_t)cap * sizeof *er->names);
        if (!m) return 0;
        er->names = m;
        er->cap = cap;
    }
    snprintf(er->names[er->n], LINK_NAME_MAX, "%s", name);
    return (uintptr_t)++er->n;
}

static int er_route(void *ctx, int a, int b, uintptr_t *ids)
{
    emu_routes *er = ctx;
    eccl_scn_hop h[ECCL_SCN_HOPS_MAX];
    const int n = eccl_scn_route(er->c, a, b, h);
    for (int i = 0; i < n; i++) ids[i] = link_id(er, h[i].name);
    return n;
}

static int er_fault_links(void *ctx, int fault, const uintptr_t **ids)
{
    emu_routes *er = ctx;
    *ids = er->fault_ids[fault];
    return er->fault_n[fault];
}

static int plan_roles(emu *e, const char *file)
{
    eccl_scenario *c = e->cfg;
    emu_routes er = {.c = c};
    er.fault_ids = calloc((size_t)c->nfaults + 1, sizeof *er.fault_ids);
    er.fault_n = calloc((size_t)c->nfaults + 1, sizeof *er.fault_n);
    int rc = -1;
    if (er.fault_ids && er.fault_n) {
        for (int i = 0; i < c->nfaults; i++)
            for (int j = 0; j < c->faults[i].nlinks; j++)
                er.fault_ids[i][er.fault_n[i]++] = link_id(&er, c->faults[i].links[j]);
        const eccl_scn_routes routes = {.ctx = &er, .fault_links = er_fault_links, .route = er_route};
        rc = eccl_scn_job_plan(file, c, &e->job, &routes, e->order, &e->norder);
    }
    free(er.names);
    free(er.fault_ids);
    free(er.fault_n);
    return rc;
}

static void write_costs(void *ctx, FILE *f)
{
    const emu *e = ctx;
    eccl_results_kv_i64(f, "emulated_hosts", 1 + eccl_scn_rank_host(e->cfg, e->cfg->ranks));
}

/* Last: which tool wrote the run, for eccl-results compare's labels. */
static void write_tail(void *ctx, FILE *f)
{
    (void)ctx;
    eccl_results_kv_str(f, "tool", "eccl-emu");
}

static void free_emu(emu *e)
{
    if (e->master_log) fclose(e->master_log);
    e->master_log = NULL;
    eccl_scn_job_free(&e->job);
    free(e->relays);
    free(e->relay_addr);
    free(e->workers);
    free(e->kill_at);
    free(e->pending);
    free(e->order);
}

int eccl_scn_emu_run(eccl_scenario *cfg, const char *file, const char *outdir, const eccl_scn_emu_options *o)
{
    if (refuse_or_note(cfg, file)) return 2;
    cfg->phantom = 0; /* real bytes: every step is checked */
    emu e = {.cfg = cfg, .o = o};
    const eccl_scn_job_hooks hooks = {.ctx = &e, .say = emu_say, .arm_kill = emu_arm_kill};
    e.t0 = mono_ns();
    if (eccl_scn_job_init(&e.job, cfg, "eccl-emu", &hooks)) {
        fprintf(stderr, "eccl-emu: out of memory\n");
        return 1;
    }
    e.workers = calloc((size_t)cfg->ranks, sizeof *e.workers);
    e.kill_at = calloc((size_t)cfg->ranks, sizeof *e.kill_at);
    e.pending = calloc((size_t)cfg->ranks, sizeof *e.pending);
    e.order = calloc((size_t)cfg->nfaults + 1, sizeof *e.order);
    e.relays = calloc((size_t)eccl_scn_relay_count(cfg) + 1, sizeof *e.relays);
    e.relay_addr = calloc((size_t)eccl_scn_relay_count(cfg) + 1, sizeof *e.relay_addr);
    if (!e.workers || !e.kill_at || !e.pending || !e.order || !e.relays || !e.relay_addr) {
        fprintf(stderr, "eccl-emu: out of memory\n");
        free_emu(&e);
        return 1;
    }
    e.master.out = -1;
    uint64_t rng = cfg->seed;
    for (int i = 0; i < cfg->ranks; i++) {
        rank_state *r = &e.job.rk[i];
        eccl_scn_job_rank_init(&e.job, r, i + 1, &rng);
        r->kill_iter = -1;
        r->nstarts = 1;
        e.kill_at[i] = UINT64_MAX;
    }
    if (plan_roles(&e, file)) {
        free_emu(&e);
        return 2;
    }
    if (cfg->expect_survivors > cfg->ranks) {
        fprintf(stderr, "eccl-emu: %s: expect_survivors = %d: only %d ranks\n", file, cfg->expect_survivors,
                cfg->ranks);
        free_emu(&e);
        return 2;
    }
    snprintf(e.plan, sizeof e.plan, "%s/chaos.plan", outdir);
    snprintf(e.wires, sizeof e.wires, "%s/chaos.wires", outdir);
    snprintf(e.logs, sizeof e.logs, "%s/logs", outdir);
    int nwires = 0;
    if (eccl_scn_emu_write_plan(cfg, file, e.plan, &nwires)) {
        free_emu(&e);
        return 2;
    }
    /* The wires' buckets, zeroed (free since the job's start); removed
     * once every process is gone. */
    int wfd = open(e.wires, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (wfd < 0 || ftruncate(wfd, (off_t)(nwires + 1) * (off_t)sizeof(uint64_t)) != 0) {
        fprintf(stderr, "eccl-emu: %s: %s\n", e.wires, strerror(errno));
        if (wfd >= 0) close(wfd);
        free_emu(&e);
        return 1;
    }
    close(wfd);
    if (eccl_results_mkdir(e.logs)) {
        fprintf(stderr, "eccl-emu: cannot create %s: %s\n", e.logs, strerror(errno));
        free_emu(&e);
        return 1;
    }
    if (cfg->trace && eccl_scn_job_trace_dir(outdir, e.traces, sizeof e.traces)) {
        fprintf(stderr, "eccl-emu: cannot prepare %s/traces: %s\n", outdir, strerror(errno));
        free_emu(&e);
        return 1;
    }
    qsort(cfg->relay_kills, (size_t)cfg->n_relay_kills, sizeof cfg->relay_kills[0], relay_kill_cmp);
    signal(SIGPIPE, SIG_IGN);

    eccl_scn_job_say(&e.job, "eccl-emu", "scenario=%s seed=%llu platform=%s hosts=%d ranks=%d iters=%d count=%ld "
                     "faults=%d out=%s", cfg->name, (unsigned long long)cfg->seed, cfg->platform,
                     1 + eccl_scn_rank_host(cfg, cfg->ranks), cfg->ranks, cfg->iters, cfg->count, cfg->nfaults,
                     outdir);
    /* The job's clock starts now: the plan's times, the arrivals and the
     * faults all count from here. */
    e.t0 = mono_ns();
    snprintf(e.t0s, sizeof e.t0s, "%llu", (unsigned long long)e.t0);
    int rc = 1;
    if (start_coordinator(&e, &e.master, "master", 0, NULL, e.master_addr)) goto out;
    if (cfg->relays) {
        /* The tree above the shares' relays (relay_fanout) first: a
         * relay needs its parent's address. */
        e.relay_share = (cfg->ranks + cfg->relays - 1) / cfg->relays;
        for (int k = eccl_scn_relay_count(cfg) - 1; k >= 0; k--) {
            int level;
            const int r0 = eccl_scn_relay_first_leaf(cfg, k, &level) * e.relay_share;
            const int first = r0 < cfg->ranks ? r0 : cfg->ranks - 1;
            const int parent = eccl_scn_relay_parent(cfg, k);
            char name[32];
            snprintf(name, sizeof name, "relay-%d", k + 1);
            if (start_coordinator(&e, &e.relays[k], name, eccl_scn_rank_host(cfg, first + 1),
                                  parent < 0 ? e.master_addr : e.relay_addr[parent], e.relay_addr[k]))
                goto out;
        }
    }
    if (cfg->diloco) {
        eccl_scn_dl dl;
        if (eccl_scn_dl_init(&dl, &e.job)) {
            fprintf(stderr, "eccl-emu: out of memory\n");
            goto out;
        }
        e.dl = &dl;
        for (int i = 0; i < cfg->ranks; i++) e.job.rk[i].last_rev = UINT64_MAX;
        run_diloco(&e);
        const uint64_t end = now_ns(&e);
        for (int i = 0; i < cfg->ranks; i++) bury(&e.workers[i]);
        stop_coordinator(&e.master);
        unlink(e.wires);
        const eccl_scn_job_report rep = {.clock = "wall-clock time", .end_key = "wall_time_s",
                                         .write_tail = write_tail, .ctx = &e};
        rc = eccl_scn_dl_finish(&dl, outdir, end, &rep);
        free_emu(&e);
        return rc;
    }
    if (cfg->bench) {
        rc = run_bench(&e, outdir);
        for (int i = 0; i < cfg->ranks; i++) bury(&e.workers[i]);
        stop_coordinator(&e.master);
        unlink(e.wires);
        free_emu(&e);
        printf("scenario=%s workload=bench ranks=%d checks=%s out=%s\n", cfg->name, cfg->ranks,
               rc ? "fail" : "pass", outdir);
        return rc ? 1 : 0;
    }
    int initial = 0; /* ranks that start with the job: the first step waits for them all */
    for (int i = 0; i < cfg->ranks; i++) initial += !e.job.rk[i].late;
    for (int i = 0; i < cfg->ranks; i++)
        start_worker(&e, &e.job.rk[i], e.job.rk[i].arrive_ns, e.job.rk[i].late ? 0 : initial);
    run_loop(&e);
    const uint64_t end_ns = now_ns(&e);
    rc = 0;
out:
    for (int i = 0; i < cfg->ranks; i++) bury(&e.workers[i]);
    for (int k = 0; k < eccl_scn_relay_count(cfg); k++) stop_coordinator(&e.relays[k]);
    stop_coordinator(&e.master);
    unlink(e.wires);
    if (rc) {
        free_emu(&e);
        return 1;
    }
    const eccl_scn_job_report rep = {.clock = "wall-clock", .end_key = "wall_time_s", .write_costs = write_costs,
                                     .write_tail = write_tail, .failure = e.failure, .ctx = &e};
    rc = eccl_scn_job_finish(&e.job, outdir, end_ns, &rep);
    free_emu(&e);
    return rc;
}
