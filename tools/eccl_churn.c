/* eccl-churn: churn chaos on loopback, with a checker that can fail.
 *
 * Starts eccl-master on a free 127.0.0.1 port and DiLoCo workers
 * (eccl-diloco, examples/diloco_loop.c) next to this binary; every 0.5-1 s
 * (seeded splitmix64) it either SIGKILLs a random worker or starts a new one,
 * keeping between 2 and --max-peers alive (and never killing one of the last
 * two workers that hold the shared state: with none left the state is gone
 * by definition, which tests nothing). It reads every worker's lines and
 * judges the run (scenarios/engine/churn_check.c) plus what only it sees: exit statuses
 * and memory (VmRSS). Exits 0 only if every check passed, after one summary
 * line of key=value pairs, printed last. With --out DIR it also writes the
 * run's results as eccl-sim's diloco workload does (results/README.md):
 * events.tsv, summary.tsv, plot.gp / plot.png.
 *
 * Every loop is bounded by a global deadline (duration + grace); every
 * child is reaped before exit; children die with it (PR_SET_PDEATHSIG).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "eccl.h"
#include "churn_check.h"
#include "results.h"
#include "tool_util.h"

#define MAX_SPAWNS 100000
#define LINE_MAX_LEN 4096

typedef struct worker {
    pid_t pid;
    int out, err;         /* pipes: stdout (event lines), stderr (diagnostics) */
    char buf[LINE_MAX_LEN];
    size_t len;
    char ebuf[512];
    size_t elen;
    char last_err[512];   /* its last stderr line, shown if it fails */
    int alive;            /* not killed by us, not exited */
    int killed;           /* by us (churn or the final stop) */
    int reaped, status;
    double born, died;
    long rss_first_kb, rss_last_kb; /* -1: none */
    double rss_first_t, rss_last_t;
} worker;

typedef struct opts {
    double duration, max_stall, interval_min, interval_max, warmup, rss_span;
    uint64_t seed, corrupt_at;
    int max_peers, start_peers, step_ms, verbose;
    size_t count;
    double rss_slack_pct;
    long rss_slack_kb;
    const char *out; /* --out: the results' folder; NULL: none */
} opts;

typedef struct churn {
    opts o;
    char exe_dir[PATH_MAX];
    char master_addr[128];
    pid_t master_pid;
    int master_dead;
    long master_rss_first_kb, master_rss_last_kb;
    worker *w;
    size_t nw;
    uint64_t prng;
    double t0;
    churn_check chk;
    int kills, spawned, spawn_failures, unexpected_exits;
    int stopping; /* the run is over: exits are ours */
    double max_join_s; /* longest spawn-to-joined (or alive-unjoined) time */
    FILE *events;      /* --out: events.tsv, written as they happen */
    size_t nev;
} churn;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t prng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double prng_unit(uint64_t *state) { return (prng_next(state) >> 11) * 0x1.0p-53; }

__attribute__((format(printf, 2, 3))) static void say(const churn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "churn: %7.2fs ", now_s() - c->t0);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static long rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
    fclose(f);
    return kb;
}

/* --out: a row of events.tsv in eccl-sim's columns (time_s rank event iter
 * world ms hash), so that one plot script and `eccl-results compare` read
 * both; rank is the worker's index (wN in the log), iter the revision the
 * line names. line: the worker's key=value line, or NULL (kill, start). */
static void log_event(churn *c, size_t wi, const char *event, const char *line)
{
    if (!c->events) return;
    char t[32], rev[24] = "-", world[24] = "-", hash[24] = "-";
    eccl_results_fmt_time(t, sizeof t, (uint64_t)((now_s() - c->t0) * 1e9 + 0.5));
    if (line) {
        churn_field(line, "revision", rev, sizeof rev);
        churn_field(line, "world", world, sizeof world);
        churn_field(line, "hash", hash, sizeof hash);
    }
    fprintf(c->events, "%s\t%zu\t%s\t%s\t%s\t-\t%s\n", t, wi, event, rev, world, hash);
    c->nev++;
}

static void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

/* fork + exec with stdout (and optionally stderr) on pipes; the child dies
 * with us. Returns the pid or -1. */
static pid_t spawn(char *const argv[], int *out, int *err)
{
    int po[2], pe[2] = {-1, -1};
    if (pipe(po) != 0) return -1;
    if (err && pipe(pe) != 0) {
        close(po[0]);
        close(po[1]);
        return -1;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        dup2(po[1], 1);
        if (err) dup2(pe[1], 2);
        close(po[0]);
        close(po[1]);
        if (err) {
            close(pe[0]);
            close(pe[1]);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    close(po[1]);
    if (err) close(pe[1]);
    if (pid < 0) {
        close(po[0]);
        if (err) close(pe[0]);
        return -1;
    }
    set_nonblock(po[0]);
    *out = po[0];
    if (err) {
        set_nonblock(pe[0]);
        *err = pe[0];
    }
    return pid;
}

static int start_master(churn *c)
{
    char exe[PATH_MAX + 16];
    snprintf(exe, sizeof exe, "%s/eccl-master", c->exe_dir);
    char *argv[] = {exe, "--listen", "127.0.0.1:0", NULL};
    int fd;
    c->master_pid = spawn(argv, &fd, NULL);
    if (c->master_pid < 0) return -1;
    char buf[256];
    size_t len = 0;
    double deadline = now_s() + 10;
    while (now_s() < deadline && len < sizeof buf - 1) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, 100);
        ssize_t n = read(fd, buf + len, sizeof buf - 1 - len);
        if (n == 0) break;
        if (n > 0) len += (size_t)n;
        buf[len] = 0;
        char *nl = strchr(buf, '\n');
        if (nl) {
            *nl = 0;
            const char *at = strstr(buf, "listening on ");
            if (!at) break;
            snprintf(c->master_addr, sizeof c->master_addr, "%s", at + strlen("listening on "));
            close(fd);
            return 0;
        }
    }
    close(fd);
    return -1;
}

static int spawn_worker(churn *c)
{
    if (c->nw >= MAX_SPAWNS) return -1;
    worker *w = &c->w[c->nw];
    memset(w, 0, sizeof *w);
    char exe[PATH_MAX + 16], count[32], step[32], corrupt[32];
    snprintf(exe, sizeof exe, "%s/eccl-diloco", c->exe_dir);
    snprintf(count, sizeof count, "%zu", c->o.count);
    snprintf(step, sizeof step, "%d", c->o.step_ms);
    char *argv[12] = {exe, "--master", c->master_addr, "--count", count, "--step-ms", step, NULL};
    int n = 7;
    if (c->o.corrupt_at && c->nw == 0) {
        /* The first worker (a founder, so it holds the state from the start). */
        snprintf(corrupt, sizeof corrupt, "%llu", (unsigned long long)c->o.corrupt_at);
        argv[n++] = "--corrupt-at";
        argv[n++] = corrupt;
        argv[n] = NULL;
    }
    w->pid = spawn(argv, &w->out, &w->err);
    if (w->pid < 0) {
        c->spawn_failures++;
        return -1;
    }
    w->alive = 1;
    w->born = now_s();
    w->rss_first_kb = w->rss_last_kb = -1;
    log_event(c, c->nw, "started", NULL);
    c->nw++;
    c->spawned++;
    return 0;
}

static void on_line(churn *c, size_t i, char *line)
{
    double t = now_s() - c->t0;
    int held = churn_check_holds_state(&c->chk, i);
    churn_check_line(&c->chk, i, line, t);
    /* The events eccl-sim's diloco workload keeps (the loop's own lines). */
    char event[16];
    if (sscanf(line, "event=%15[a-z_]", event) == 1 &&
        (!strcmp(event, "rev") || !strcmp(event, "joined") || !strcmp(event, "retry") ||
         !strcmp(event, "corrupt") || !strcmp(event, "error") || !strcmp(event, "gave_up") ||
         !strcmp(event, "exit") || !strcmp(event, "connected")))
        log_event(c, i, event, line);
    if (!held && churn_check_holds_state(&c->chk, i)) {
        double js = now_s() - c->w[i].born;
        if (js > c->max_join_s) c->max_join_s = js;
    }
    if (c->o.verbose) say(c, "w%zu: %s", i, line);
    else if (!strstr(line, "event=rev ") && !strstr(line, "event=retry ") &&
             !strstr(line, "event=connected "))
        say(c, "w%zu: %s", i, line);
}

/* Reads what is there; splits lines. Closes the fd at EOF. */
static void drain_fd(churn *c, size_t i, int *fd, char *buf, size_t cap, size_t *len, int is_err)
{
    for (int rounds = 0; rounds < 64 && *fd >= 0; rounds++) {
        ssize_t n = read(*fd, buf + *len, cap - 1 - *len);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        if (n <= 0) {
            close(*fd);
            *fd = -1;
            return;
        }
        *len += (size_t)n;
        buf[*len] = 0;
        char *start = buf, *nl;
        while ((nl = strchr(start, '\n')) != NULL) {
            *nl = 0;
            if (is_err) {
                snprintf(c->w[i].last_err, sizeof c->w[i].last_err, "%s", start);
                if (c->o.verbose) say(c, "w%zu stderr: %s", i, start);
            } else {
                on_line(c, i, start);
            }
            start = nl + 1;
        }
        *len -= (size_t)(start - buf);
        memmove(buf, start, *len);
        if (*len == cap - 1) *len = 0; /* a line longer than the buffer: drop it */
    }
}

static void reap(churn *c)
{
    for (int guard = 0; guard < 1000; guard++) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid <= 0) return;
        if (pid == c->master_pid) {
            if (!c->stopping) {
                c->master_dead = 1;
                say(c, "the master exited (status 0x%x)", st);
            }
            c->master_pid = -1;
            continue;
        }
        for (size_t i = 0; i < c->nw; i++) {
            worker *w = &c->w[i];
            if (w->pid != pid || w->reaped) continue;
            w->reaped = 1;
            w->status = st;
            w->died = now_s();
            if (!w->killed) {
                c->unexpected_exits++;
                say(c, "w%zu (pid %d) exited on its own (%s %d); last stderr: %s", i, (int)pid,
                    WIFEXITED(st) ? "status" : "signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), w->last_err);
            }
            w->alive = 0;
            break;
        }
    }
}

/* Whether worker i may be killed now. With --inject-corruption the first
 * worker is spared until it has passed the revision it corrupts, so that
 * the must-fail run cannot pass by luck. */
static int victim_ok(const churn *c, size_t i, size_t holders)
{
    if (!c->w[i].alive) return 0;
    if (c->o.corrupt_at && i == 0 &&
        (i >= c->chk.nw || c->chk.w[i].last_rev == UINT64_MAX || c->chk.w[i].last_rev < c->o.corrupt_at))
        return 0;
    return !churn_check_holds_state(&c->chk, i) || holders >= 3;
}

static void churn_step(churn *c)
{
    size_t alive = 0, holders = 0;
    for (size_t i = 0; i < c->nw; i++) {
        if (!c->w[i].alive) continue;
        alive++;
        holders += churn_check_holds_state(&c->chk, i);
    }
    /* Victims: any alive worker, except that a holder may go only while
     * two other holders stay. */
    size_t cand = 0;
    for (size_t i = 0; i < c->nw; i++) cand += victim_ok(c, i, holders);
    int can_kill = alive > 2 && cand > 0;
    int can_spawn = alive < (size_t)c->o.max_peers;
    int do_kill = can_kill && (!can_spawn || (prng_next(&c->prng) & 1));
    if (do_kill) {
        uint64_t pick = prng_next(&c->prng) % cand;
        for (size_t i = 0; i < c->nw; i++) {
            worker *w = &c->w[i];
            if (!victim_ok(c, i, holders)) continue;
            if (pick-- > 0) continue;
            kill(w->pid, SIGKILL);
            w->killed = 1;
            w->alive = 0;
            c->kills++;
            log_event(c, i, "killed", NULL);
            say(c, "kill w%zu (pid %d, %s, lived %.1fs); %zu alive", i, (int)w->pid,
                churn_check_holds_state(&c->chk, i) ? "holder" : "newcomer", now_s() - w->born,
                alive - 1);
            break;
        }
    } else if (can_spawn) {
        if (spawn_worker(c) == 0)
            say(c, "spawn w%zu (pid %d); %zu alive", c->nw - 1, (int)c->w[c->nw - 1].pid,
                alive + 1);
        else
            say(c, "spawn failed: %s", strerror(errno));
    }
}

static void sample_memory(churn *c, double t)
{
    if (c->master_pid > 0 && t >= c->o.warmup) {
        long kb = rss_kb(c->master_pid);
        if (kb > 0) {
            if (c->master_rss_first_kb < 0) c->master_rss_first_kb = kb;
            c->master_rss_last_kb = kb;
        }
    }
    double now = now_s();
    for (size_t i = 0; i < c->nw; i++) {
        worker *w = &c->w[i];
        if (!w->alive || now - w->born < c->o.warmup) continue;
        long kb = rss_kb(w->pid);
        if (kb <= 0) continue;
        if (w->rss_first_kb < 0) {
            w->rss_first_kb = kb;
            w->rss_first_t = now;
        }
        w->rss_last_kb = kb;
        w->rss_last_t = now;
    }
}

static void drain_all(churn *c, int timeout_ms)
{
    struct pollfd *fds = malloc(2 * (c->nw + 1) * sizeof *fds);
    size_t *map = malloc(2 * (c->nw + 1) * sizeof *map);
    if (!fds || !map) {
        free(fds);
        free(map);
        return;
    }
    nfds_t n = 0;
    for (size_t i = 0; i < c->nw; i++) {
        if (c->w[i].out >= 0) {
            fds[n] = (struct pollfd){.fd = c->w[i].out, .events = POLLIN};
            map[n++] = 2 * i;
        }
        if (c->w[i].err >= 0) {
            fds[n] = (struct pollfd){.fd = c->w[i].err, .events = POLLIN};
            map[n++] = 2 * i + 1;
        }
    }
    if (poll(fds, n, timeout_ms) > 0) {
        for (nfds_t k = 0; k < n; k++) {
            if (!fds[k].revents) continue;
            worker *w = &c->w[map[k] / 2];
            if (map[k] & 1)
                drain_fd(c, map[k] / 2, &w->err, w->ebuf, sizeof w->ebuf, &w->elen, 1);
            else
                drain_fd(c, map[k] / 2, &w->out, w->buf, sizeof w->buf, &w->len, 0);
        }
    }
    free(fds);
    free(map);
}

static int open_fds(const churn *c)
{
    int n = 0;
    for (size_t i = 0; i < c->nw; i++) n += (c->w[i].out >= 0) + (c->w[i].err >= 0);
    return n;
}

/* Stops everything: SIGTERM, then SIGKILL; reads what is left; reaps all. */
static void stop_all(churn *c, double hard_deadline)
{
    c->stopping = 1;
    for (size_t i = 0; i < c->nw; i++) {
        if (!c->w[i].alive) continue;
        c->w[i].killed = 1; /* ours: the run is over */
        c->w[i].alive = 0;
        kill(c->w[i].pid, SIGTERM);
    }
    double until = now_s() + 2;
    if (until > hard_deadline) until = hard_deadline;
    while (now_s() < until && open_fds(c) > 0) {
        drain_all(c, 50);
        reap(c);
    }
    for (size_t i = 0; i < c->nw; i++)
        if (!c->w[i].reaped) kill(c->w[i].pid, SIGKILL);
    if (c->master_pid > 0) kill(c->master_pid, SIGTERM);
    until = now_s() + 3;
    for (;;) {
        reap(c);
        int left = c->master_pid > 0;
        for (size_t i = 0; i < c->nw; i++) left += !c->w[i].reaped;
        if (!left) break;
        if (now_s() > until) {
            if (c->master_pid > 0) kill(c->master_pid, SIGKILL);
            for (size_t i = 0; i < c->nw; i++)
                if (!c->w[i].reaped) kill(c->w[i].pid, SIGKILL);
            /* SIGKILL cannot be refused: these waits end. */
            if (c->master_pid > 0) {
                waitpid(c->master_pid, NULL, 0);
                c->master_pid = -1;
            }
            for (size_t i = 0; i < c->nw; i++)
                if (!c->w[i].reaped) {
                    waitpid(c->w[i].pid, &c->w[i].status, 0);
                    c->w[i].reaped = 1;
                }
            break;
        }
        drain_all(c, 20);
    }
    for (size_t i = 0; i < c->nw; i++) {
        if (c->w[i].out >= 0) close(c->w[i].out);
        if (c->w[i].err >= 0) close(c->w[i].err);
        c->w[i].out = c->w[i].err = -1;
    }
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: eccl-churn [--duration S] [--seed N] [--max-peers K] [options]\n"
            "\n"
            "Churn chaos on loopback: an eccl-master and DiLoCo workers (eccl-diloco);\n"
            "every 0.5-1 s (seeded) one worker is SIGKILLed or a new one started,\n"
            "keeping 2..K alive (never one of the last two that hold the state).\n"
            "Checks: every revision's hash is identical on every peer that reports\n"
            "it; no stall longer than --max-stall (also a newcomer's admission);\n"
            "no wrong all-reduce element, unrestored buffer or diverged peer; no\n"
            "worker exits on its own; VmRSS of the master and of workers sampled\n"
            "over >= --rss-span s grows by at most PCT%% + KB. Exit 0 only if all\n"
            "hold; the last line is the summary (key=value).\n"
            "\n"
            "  --duration S        seconds of churn (default 60)\n"
            "  --seed N            PRNG seed (default 1)\n"
            "  --max-peers K       at most K workers alive, K >= 3 (default 6)\n"
            "  --start-peers N     workers at the start (default 3)\n"
            "  --max-stall S       progress bound in seconds (default 20)\n"
            "  --interval MIN,MAX  seconds between churn events (default 0.5,1)\n"
            "  --count N           model elements, f32 (default 65536: 256 KiB)\n"
            "  --step-ms MS        a worker's compute per revision (default 10)\n"
            "  --warmup S          memory: first sample after S s of life (default 5)\n"
            "  --rss-span S        memory: workers sampled over at least S s (default 15)\n"
            "  --rss-slack PCT,KB  memory: allowed growth (default 25,8192)\n"
            "  --inject-corruption REV  tests only: the first worker flips a bit of its\n"
            "                      model at revision REV; the run must FAIL\n"
            "  --out DIR           write events.tsv, summary.tsv and plot.gp / plot.png\n"
            "                      there (results/README.md)\n"
            "  --verbose           echo every worker line and stderr\n");
}

static int parse_pair(const char *s, double *a, double *b)
{
    char *end;
    *a = strtod(s, &end);
    if (*end != ',') return -1;
    *b = strtod(end + 1, &end);
    return *end ? -1 : 0;
}

static int parse_opts(int argc, char **argv, opts *o)
{
    *o = (opts){.duration = 60, .max_stall = 20, .interval_min = 0.5, .interval_max = 1.0,
                .warmup = 5, .rss_span = 15, .seed = 1, .max_peers = 6, .start_peers = 3,
                .step_ms = 10, .count = 65536, .rss_slack_pct = 25, .rss_slack_kb = 8192};
    static const struct option longs[] = {
        {"duration", required_argument, 0, 'd'},  {"seed", required_argument, 0, 's'},
        {"max-peers", required_argument, 0, 'k'}, {"start-peers", required_argument, 0, 'n'},
        {"max-stall", required_argument, 0, 'S'}, {"interval", required_argument, 0, 'i'},
        {"count", required_argument, 0, 'c'},     {"step-ms", required_argument, 0, 't'},
        {"warmup", required_argument, 0, 'w'},    {"rss-span", required_argument, 0, 'r'},
        {"rss-slack", required_argument, 0, 'R'}, {"inject-corruption", required_argument, 0, 'x'},
        {"verbose", no_argument, 0, 'v'},         {"help", no_argument, 0, 'h'},
        {"out", required_argument, 0, 'o'},       {0, 0, 0, 0}};
    int ch;
    uint64_t v;
    double a, b;
    while ((ch = getopt_long(argc, argv, "d:s:k:n:S:i:c:t:w:r:R:x:o:vh", longs, NULL)) != -1) {
        switch (ch) {
        case 'd': o->duration = strtod(optarg, NULL); break;
        case 's':
            if (tool_parse_u64(optarg, 0, UINT64_MAX, &o->seed)) return 2;
            break;
        case 'k':
            if (tool_parse_u64(optarg, 3, 1000, &v)) return 2;
            o->max_peers = (int)v;
            break;
        case 'n':
            if (tool_parse_u64(optarg, 2, 1000, &v)) return 2;
            o->start_peers = (int)v;
            break;
        case 'S': o->max_stall = strtod(optarg, NULL); break;
        case 'i':
            if (parse_pair(optarg, &o->interval_min, &o->interval_max)) return 2;
            break;
        case 'c':
            if (tool_parse_u64(optarg, 1, 1u << 28, &v)) return 2;
            o->count = (size_t)v;
            break;
        case 't':
            if (tool_parse_u64(optarg, 0, 100000, &v)) return 2;
            o->step_ms = (int)v;
            break;
        case 'w': o->warmup = strtod(optarg, NULL); break;
        case 'r': o->rss_span = strtod(optarg, NULL); break;
        case 'R':
            if (parse_pair(optarg, &a, &b)) return 2;
            o->rss_slack_pct = a;
            o->rss_slack_kb = (long)b;
            break;
        case 'x':
            if (tool_parse_u64(optarg, 1, UINT64_MAX, &o->corrupt_at)) return 2;
            break;
        case 'v': o->verbose = 1; break;
        case 'o': o->out = optarg; break;
        case 'h': usage(stdout); exit(0);
        default: return 2;
        }
    }
    if (optind < argc || !(o->duration > 0 && o->duration <= 86400) || !(o->max_stall > 0) ||
        !(o->interval_min > 0 && o->interval_max >= o->interval_min) || o->warmup < 0)
        return 2;
    if (o->start_peers > o->max_peers) o->start_peers = o->max_peers;
    return 0;
}

/* --out: summary.tsv, with eccl-sim's diloco keys where they mean the same
 * (so `eccl-results compare` lines the two up), and the plot. */
static int write_results(const churn *c, const char *why, double t_end, long worker_growth, int rss_workers,
                         long master_growth)
{
    const churn_check *k = &c->chk;
    const opts *o = &c->o;
    int io_err = 0;
    FILE *sf = eccl_results_summary_open(o->out);
    if (sf) {
        eccl_results_kv_str(sf, "tool", "eccl-churn");
        eccl_results_kv_u64(sf, "seed", o->seed);
        eccl_results_kv_i64(sf, "max_peers", o->max_peers);
        eccl_results_kv_u64(sf, "count", o->count);
        eccl_results_kv_str(sf, "workload", "diloco");
        eccl_results_kv(sf, "duration_s", "%.9f", o->duration);
        eccl_results_kv(sf, "churn", "interval=%.3f..%.3fs,min=2,max=%d", o->interval_min, o->interval_max,
                        o->max_peers);
        eccl_results_kv_u64(sf, "revisions", k->revisions);
        eccl_results_kv_u64(sf, "max_revision", k->max_rev == UINT64_MAX ? 0 : k->max_rev);
        eccl_results_kv_u64(sf, "parity_breaks", k->parity_breaks);
        eccl_results_kv_u64(sf, "corrupt", k->corrupt);
        eccl_results_kv_u64(sf, "errors", k->errors);
        eccl_results_kv_i64(sf, "unexpected_exits", c->unexpected_exits);
        eccl_results_kv_time(sf, "max_stall_s", (uint64_t)(k->max_stall_s * 1e9 + 0.5));
        eccl_results_kv_time(sf, "max_join_s", (uint64_t)(c->max_join_s * 1e9 + 0.5));
        eccl_results_kv_i64(sf, "kills", c->kills);
        eccl_results_kv_i64(sf, "spawned", c->spawned);
        eccl_results_kv_u64(sf, "joins", k->joins);
        eccl_results_kv_u64(sf, "retries", k->retries);
        eccl_results_kv_str(sf, "checks", why ? "fail" : "pass");
        eccl_results_kv_str(sf, "reason", why ? why : "-");
        eccl_results_kv_u64(sf, "events", c->nev);
        eccl_results_kv_time(sf, "wall_time_s", (uint64_t)(t_end * 1e9 + 0.5));
        eccl_results_kv_i64(sf, "worker_rss_growth_kb", worker_growth);
        eccl_results_kv_i64(sf, "worker_rss_checked", rss_workers);
        eccl_results_kv_i64(sf, "master_rss_kb", c->master_rss_last_kb);
        eccl_results_kv_i64(sf, "master_rss_growth_kb", master_growth);
        io_err |= eccl_results_close(sf) != 0;
    } else {
        io_err = 1;
    }
    char title[192];
    snprintf(title, sizeof title, "eccl-churn: seed %llu, 2..%d workers, DiLoCo loop of %zu f32 under churn",
             (unsigned long long)o->seed, o->max_peers, o->count);
    io_err |= eccl_results_churn_plot(o->out, "eccl-churn", "time since the start", title, "started") != 0;
    if (!io_err) eccl_results_plot_png(o->out, &io_err);
    return io_err ? -1 : 0;
}

int main(int argc, char **argv)
{
    churn *c = calloc(1, sizeof *c);
    if (!c) return 1;
    if (parse_opts(argc, argv, &c->o)) {
        usage(stderr);
        return 2;
    }
    if (eccl_auth_job_secret() != ECCL_OK) { /* the workers inherit it */
        fprintf(stderr, "eccl-churn: cannot make the job's secret\n");
        return 1;
    }
    c->w = calloc(MAX_SPAWNS, sizeof *c->w);
    if (!c->w || churn_check_init(&c->chk, 1u << 16, 0) != 0) return 1;
    c->prng = c->o.seed;
    c->master_rss_first_kb = c->master_rss_last_kb = -1;
    signal(SIGPIPE, SIG_IGN);

    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 1;
    self[n] = 0;
    snprintf(c->exe_dir, sizeof c->exe_dir, "%s", dirname(self));

    if (c->o.out) {
        if (eccl_results_mkdir(c->o.out) != 0) {
            fprintf(stderr, "eccl-churn: --out: cannot create %s: %s\n", c->o.out, strerror(errno));
            return 2;
        }
        c->events = eccl_results_open(c->o.out, "events.tsv");
        if (!c->events) return 2;
        fputs("time_s\trank\tevent\titer\tworld\tms\thash\n", c->events);
    }
    c->t0 = now_s();
    int setup_failed = 0;
    if (start_master(c) != 0) {
        say(c, "cannot start %s/eccl-master", c->exe_dir);
        setup_failed = 1;
    } else {
        say(c, "master %s (pid %d); seed %llu, K %d, %.0f s", c->master_addr, (int)c->master_pid,
            (unsigned long long)c->o.seed, c->o.max_peers, c->o.duration);
        for (int i = 0; i < c->o.start_peers; i++)
            if (spawn_worker(c) != 0) setup_failed = 1;
    }

    const double end = c->o.duration;
    const double hard_deadline = c->t0 + end + 30; /* the grace for stopping */
    double next_event = c->o.interval_min + prng_unit(&c->prng) * (c->o.interval_max - c->o.interval_min);
    double next_sample = 0;
    while (!setup_failed) {
        double t = now_s() - c->t0;
        if (t >= end || now_s() > hard_deadline) break;
        double wake = next_event < next_sample ? next_event : next_sample;
        int ms = (int)((wake - t) * 1000);
        if (ms < 0) ms = 0;
        if (ms > 100) ms = 100;
        drain_all(c, ms);
        reap(c);
        if (c->master_dead) break;
        t = now_s() - c->t0;
        if (t >= next_sample) {
            sample_memory(c, t);
            next_sample = t + 0.5;
        }
        if (t >= next_event) {
            churn_step(c);
            next_event = t + c->o.interval_min +
                         prng_unit(&c->prng) * (c->o.interval_max - c->o.interval_min);
        }
    }
    double t_end = now_s() - c->t0;
    /* A worker alive but never admitted counts as a newcomer stalled. */
    for (size_t i = 0; i < c->nw; i++)
        if (c->w[i].alive && !churn_check_holds_state(&c->chk, i) &&
            now_s() - c->w[i].born > c->max_join_s)
            c->max_join_s = now_s() - c->w[i].born;
    sample_memory(c, t_end);
    churn_check_finish(&c->chk, t_end);
    int master_dead = c->master_dead;
    stop_all(c, hard_deadline);

    /* Memory: the master over the run, workers sampled long enough. */
    long master_growth = -1, worker_growth = -1;
    int rss_bad = 0, rss_workers = 0;
    if (c->master_rss_first_kb > 0) {
        master_growth = c->master_rss_last_kb - c->master_rss_first_kb;
        if (master_growth > c->master_rss_first_kb * c->o.rss_slack_pct / 100 + c->o.rss_slack_kb) {
            rss_bad = 1;
            say(c, "master RSS grew %ld kB (%ld -> %ld)", master_growth, c->master_rss_first_kb,
                c->master_rss_last_kb);
        }
    }
    for (size_t i = 0; i < c->nw; i++) {
        worker *w = &c->w[i];
        if (w->rss_first_kb < 0 || w->rss_last_t - w->rss_first_t < c->o.rss_span) continue;
        long g = w->rss_last_kb - w->rss_first_kb;
        rss_workers++;
        if (g > worker_growth) worker_growth = g;
        if (g > w->rss_first_kb * c->o.rss_slack_pct / 100 + c->o.rss_slack_kb) {
            rss_bad = 1;
            say(c, "w%zu RSS grew %ld kB (%ld -> %ld over %.0f s)", i, g, w->rss_first_kb,
                w->rss_last_kb, w->rss_last_t - w->rss_first_t);
        }
    }

    const churn_check *k = &c->chk;
    const char *why = NULL;
    if (setup_failed) why = "setup";
    else if (master_dead) why = "master_died";
    else if (k->parity_breaks) why = "parity";
    else if (k->corrupt) why = "corruption";
    else if (k->order_breaks) why = "order";
    else if (k->errors || c->unexpected_exits) why = "worker_failed";
    else if (k->max_stall_s > c->o.max_stall) why = "stall";
    else if (c->max_join_s > c->o.max_stall) why = "join_stall";
    else if (k->revisions == 0) why = "no_progress";
    else if (c->kills == 0 && c->o.duration >= 10) why = "no_kills";
    else if (rss_bad) why = "memory";
    if (why && k->first_problem[0]) say(c, "first problem: %s", k->first_problem);
    printf("churn: result=%s%s%s duration_s=%.0f seed=%llu max_peers=%d revisions=%llu "
           "max_revision=%llu parity_breaks=%llu corrupt=%llu errors=%llu unexpected_exits=%d "
           "max_stall_s=%.3f max_join_s=%.3f kills=%d spawned=%d joins=%llu retries=%llu "
           "worker_rss_growth_kb=%ld worker_rss_checked=%d master_rss_kb=%ld "
           "master_rss_growth_kb=%ld\n",
           why ? "FAIL" : "PASS", why ? " reason=" : "", why ? why : "", c->o.duration,
           (unsigned long long)c->o.seed, c->o.max_peers, (unsigned long long)k->revisions,
           (unsigned long long)(k->max_rev == UINT64_MAX ? 0 : k->max_rev),
           (unsigned long long)k->parity_breaks, (unsigned long long)k->corrupt,
           (unsigned long long)k->errors, c->unexpected_exits, k->max_stall_s, c->max_join_s,
           c->kills, c->spawned, (unsigned long long)k->joins, (unsigned long long)k->retries,
           worker_growth, rss_workers, c->master_rss_last_kb, master_growth);
    fflush(stdout);
    int io_err = 0;
    if (c->o.out) {
        io_err = eccl_results_close(c->events) != 0;
        c->events = NULL;
        io_err |= write_results(c, why, t_end, worker_growth, rss_workers, master_growth) != 0;
    }
    churn_check_free(&c->chk);
    free(c->w);
    free(c);
    return why || io_err ? 1 : 0;
}
