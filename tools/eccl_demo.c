/* eccl-demo: a master and N local workers doing all-reduces; one worker is
 * killed with SIGKILL in the middle of a large all-reduce, and the rest
 * recover. Prints what happened, in words, and exits non-zero if the story
 * does not hold: a survivor that did not fail cleanly, an input that was not
 * intact, results that differ between peers, or a worker that did not
 * finish.
 *
 * The workers are eccl-worker processes (examples/worker.c) found next to
 * this binary; this program only starts them, kills one, and reads their
 * key=value event lines.
 */
#include <eccl.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "churn_check.h" /* churn_field: key=value lines */

#define MAX_WORKERS 16

typedef struct worker {
    pid_t pid;
    int fd;            /* its stdout */
    char buf[4096];
    size_t len;
    long long peer;
    int alive;
    int exited_ok;
    int lost_seen;     /* saw peer_lost for the killed iteration */
    int input_bad;
    double lost_ms;
} worker;

typedef struct demo {
    int np, iters, kill_after;
    size_t count;
    worker w[MAX_WORKERS];
    int victim;
    int killed;
    int kill_iter;
    double t0;
    double iter_ms;           /* last iteration's duration, to aim the kill */
    int oks[1024];            /* ok reports per iteration */
    int begins[1024];         /* workers that entered the all-reduce */
    unsigned long long hash[1024];
    int hash_mismatch;
    int wrong;
    int failures;
} demo;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long long field_ll(const char *line, const char *key)
{
    char v[64];
    return churn_field(line, key, v, sizeof v) ? strtoll(v, NULL, 0) : -1;
}

static double field_d(const char *line, const char *key)
{
    char v[64];
    return churn_field(line, key, v, sizeof v) ? strtod(v, NULL) : -1;
}

static int alive_count(const demo *d)
{
    int n = 0;
    for (int i = 0; i < d->np; i++) n += d->w[i].alive;
    return n;
}

static void say(const demo *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const demo *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("  %6.2fs  ", now_s() - d->t0);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
}

static void on_line(demo *d, int i, const char *line)
{
    worker *w = &d->w[i];
    char ev[32] = "";
    churn_field(line, "event", ev, sizeof ev);
    long long iter = field_ll(line, "iter");
    if (!strcmp(ev, "begin") && iter >= 0 && iter < 1024) {
        d->begins[iter]++;
    } else if (!strcmp(ev, "connected")) {
        w->peer = field_ll(line, "peer");
        say(d, "worker %d connected to the master as peer %lld", i, w->peer);
    } else if (!strcmp(ev, "ok") && iter >= 0 && iter < 1024) {
        char h[32] = "";
        churn_field(line, "hash", h, sizeof h);
        unsigned long long hv = strtoull(h, NULL, 16);
        if (d->oks[iter] == 0) d->hash[iter] = hv;
        else if (d->hash[iter] != hv) d->hash_mismatch = 1;
        d->wrong += field_ll(line, "wrong") != 0;
        d->iter_ms = field_d(line, "ms");
        if (++d->oks[iter] == alive_count(d)) {
            say(d, "iteration %lld: %zu MiB all-reduce on %lld peers correct everywhere, "
                   "results bit-identical (hash %016llx), %.0f ms",
                iter, d->count * 4 >> 20, field_ll(line, "world"), d->hash[iter], d->iter_ms);
        }
    } else if (!strcmp(ev, "peer_lost") || !strcmp(ev, "timeout")) {
        char intact[8] = "";
        churn_field(line, "intact", intact, sizeof intact);
        if (strcmp(intact, "yes") != 0) w->input_bad = 1;
        w->lost_seen = 1;
        w->lost_ms = field_d(line, "ms");
        say(d, "peer %lld: iteration %lld failed with %s after %.1f ms; input "
               "intact bit for bit: %s; retrying on the survivors",
            w->peer, iter, !strcmp(ev, "timeout") ? "ECCL_ERR_TIMEOUT" : "ECCL_ERR_PEER_LOST",
            w->lost_ms, intact);
    } else if (!strcmp(ev, "exit")) {
        w->exited_ok = field_ll(line, "status") == 0;
    } else if (ev[0]) {
        say(d, "worker %d: %s", i, line);
    }
}

static void drain(demo *d, int i)
{
    worker *w = &d->w[i];
    ssize_t n = read(w->fd, w->buf + w->len, sizeof w->buf - 1 - w->len);
    if (n <= 0) {
        close(w->fd);
        w->fd = -1;
        return;
    }
    w->len += (size_t)n;
    w->buf[w->len] = 0;
    char *start = w->buf, *nl;
    while ((nl = strchr(start, '\n')) != NULL) {
        *nl = 0;
        on_line(d, i, start);
        start = nl + 1;
    }
    w->len -= (size_t)(start - w->buf);
    memmove(w->buf, start, w->len);
}

static void maybe_kill(demo *d)
{
    if (d->killed || d->kill_after < 0 || d->begins[d->kill_after + 1] < d->np) return;
    /* Every worker has entered the next all-reduce: aim for a third of the
     * way through it. */
    usleep((useconds_t)(d->iter_ms * 1000 / 3));
    worker *v = &d->w[d->victim];
    kill(v->pid, SIGKILL);
    v->alive = 0;
    d->killed = 1;
    d->kill_iter = d->kill_after + 1;
    say(d, "killed worker %d (peer %lld) with SIGKILL, in the middle of iteration %d",
        d->victim, v->peer, d->kill_iter);
}

static pid_t spawn_worker(const char *exe, const char *master, const demo *d, int *fd)
{
    int p[2];
    if (pipe(p) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        char count[32], iters[32], world[32];
        snprintf(count, sizeof count, "%zu", d->count);
        snprintf(iters, sizeof iters, "%d", d->iters);
        snprintf(world, sizeof world, "%d", d->np);
        execl(exe, exe, "--master", master, "--count", count, "--iters", iters, "--world-min",
              "2", "--start-world", world, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    *fd = p[0];
    return pid;
}

int main(int argc, char **argv)
{
    demo d;
    memset(&d, 0, sizeof d);
    d.np = 4;
    d.iters = 8;
    d.kill_after = 3;
    d.count = 16u << 20; /* 64 MiB of f32 */
    static const struct option longs[] = {{"np", required_argument, 0, 'n'},
                                          {"iters", required_argument, 0, 'i'},
                                          {"count", required_argument, 0, 'c'},
                                          {"kill-after", required_argument, 0, 'k'},
                                          {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "n:i:c:k:h", longs, NULL)) != -1) {
        switch (ch) {
        case 'n': d.np = atoi(optarg); break;
        case 'i': d.iters = atoi(optarg); break;
        case 'c': d.count = strtoull(optarg, NULL, 0); break;
        case 'k': d.kill_after = atoi(optarg); break;
        default:
            fprintf(ch == 'h' ? stdout : stderr,
                    "usage: %s [--np N] [--iters N] [--count ELEMENTS] [--kill-after ITER|-1]\n", argv[0]);
            return ch == 'h' ? 0 : 2;
        }
    }
    if (d.np < 3 || d.np > MAX_WORKERS || d.iters < 1 || d.iters > 1000 ||
        d.kill_after >= d.iters - 1) {
        fprintf(stderr, "eccl-demo: need 3 <= np <= %d, 1 <= iters <= 1000, kill-after < iters-1\n",
                MAX_WORKERS);
        return 2;
    }
    d.victim = d.np - 1;

    char self[PATH_MAX], exe[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 1;
    self[n] = 0;
    snprintf(exe, sizeof exe, "%s/eccl-worker", dirname(self));

    eccl_master *master = NULL;
    char addr[64];
    eccl_result rc = eccl_auth_job_secret(); /* the workers inherit it */
    if (rc == ECCL_OK) rc = eccl_master_create("127.0.0.1:0", &master);
    if (rc == ECCL_OK) rc = eccl_master_address(master, addr, sizeof addr);
    if (rc != ECCL_OK) {
        fprintf(stderr, "eccl-demo: master: %s\n", eccl_strerror(rc));
        return 1;
    }
    d.t0 = now_s();
    printf("eccl demo: a master and %d workers all-reduce %zu MiB of f32 %d times;\n"
           "worker %d is killed during iteration %d and the others must recover.\n\n",
           d.np, d.count * 4 >> 20, d.iters, d.victim, d.kill_after + 1);
    say(&d, "master listening on %s", addr);
    /* Fork before the master starts its thread: children get a clean process. */
    for (int i = 0; i < d.np; i++) {
        d.w[i].pid = spawn_worker(exe, addr, &d, &d.w[i].fd);
        d.w[i].alive = d.w[i].pid > 0;
    }
    if ((rc = eccl_master_run(master)) != ECCL_OK) {
        fprintf(stderr, "eccl-demo: master: %s\n", eccl_strerror(rc));
        return 1;
    }

    double deadline = now_s() + 300;
    for (;;) {
        struct pollfd fds[MAX_WORKERS];
        int map[MAX_WORKERS], nfds = 0;
        for (int i = 0; i < d.np; i++) {
            if (d.w[i].fd < 0) continue;
            fds[nfds] = (struct pollfd){.fd = d.w[i].fd, .events = POLLIN};
            map[nfds++] = i;
        }
        if (nfds == 0) break;
        if (now_s() > deadline) {
            say(&d, "giving up: workers still running after 300 s");
            d.failures++;
            break;
        }
        if (poll(fds, (nfds_t)nfds, 1000) < 0 && errno != EINTR) break;
        for (int k = 0; k < nfds; k++)
            if (fds[k].revents) drain(&d, map[k]);
        maybe_kill(&d);
    }
    for (int i = 0; i < d.np; i++) {
        int st = 0;
        if (d.w[i].alive && now_s() > deadline) kill(d.w[i].pid, SIGKILL);
        waitpid(d.w[i].pid, &st, 0);
        if (i != d.victim && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) d.failures++;
    }
    eccl_master_stop(master);
    eccl_master_destroy(master);

    int survivors = 0, lost_seen = 0, input_bad = 0;
    double lo = 1e9, hi = 0;
    for (int i = 0; i < d.np; i++) {
        if (i == d.victim) continue;
        survivors++;
        input_bad += d.w[i].input_bad;
        if (d.w[i].lost_seen) {
            lost_seen++;
            if (d.w[i].lost_ms < lo) lo = d.w[i].lost_ms;
            if (d.w[i].lost_ms > hi) hi = d.w[i].lost_ms;
        }
        if (!d.w[i].exited_ok) d.failures++;
    }
    int finished = d.oks[d.iters - 1] == survivors;
    printf("\nWhat happened:\n");
    if (d.killed) {
        printf("  - worker %d was killed during iteration %d.\n", d.victim, d.kill_iter);
        if (lost_seen == survivors)
            printf("  - all %d survivors got ECCL_ERR_PEER_LOST within %.1f-%.1f ms of their call "
                   "and %s.\n", survivors, lo, hi,
                   input_bad ? "SOME LOST THEIR INPUT" : "each kept its input intact");
        else if (lost_seen == 0)
            printf("  - the kill landed after the all-reduce had committed: the survivors kept "
                   "its result and none had to retry.\n");
        else
            printf("  - only %d of %d survivors saw the loss: THEY DISAGREE.\n", lost_seen, survivors);
    }
    printf("  - %s: the survivors %s all %d iterations; results %s; %d wrong element reports.\n",
           finished ? "recovered" : "NOT recovered", finished ? "finished" : "did not finish",
           d.iters, d.hash_mismatch ? "DIFFER between peers" : "bit-identical on every peer",
           d.wrong);
    int ok = finished && !d.hash_mismatch && !d.wrong && !input_bad && d.failures == 0 &&
             (lost_seen == 0 || lost_seen == survivors);
    printf("\n%s\n", ok ? "DEMO PASSED" : "DEMO FAILED");
    return ok ? 0 : 1;
}
