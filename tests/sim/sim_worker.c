/* The very same worker loop as eccl-worker (examples/worker_loop.c), run as
 * SimGrid actors: a master and 4 workers on a flat cluster.
 *
 * The workers get a sim launch (eccl_sg_comm_create on this simulation's
 * world, simulated sleep and clock, the timestamped printer) and the options
 * `eccl-worker --count 4096 --iters 6 --start-world 4` would give them. When
 * worker 4 begins its all-reduce of iteration 2 (after two good ones), a
 * killer crashes its host halfway through an all-reduce's simulated time. The
 * 3 survivors must notice, find their buffer restored, retry on 3 and finish
 * all 6 iterations with exit status 0. The launch reads the loop's own event
 * lines to count steps, as tools/eccl_demo.c does with the processes.
 *
 * Usage: sim_worker PLATFORM.xml [LOG_LEVEL 0-5]
 * Exit status: 0 when every check passed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <xbt/config.h>

#include "eccl.h"
#include "env_sg.h"
#include "worker_loop.h"

#define NWORKERS 4
#define COUNT 4096u /* f32 elements */
#define ITERS 6
#define VICTIM 4    /* the worker on node-4 dies ... */
#define KILL_ITER 2 /* ... during this iteration's all-reduce */

typedef struct scenario scenario;

typedef struct worker {
    scenario *s;
    int idx; /* 1..NWORKERS, also the host node-idx */
    char name[16];
    int returned;    /* eccl_worker_run came back */
    int status;      /* ... with this */
    int exit_status; /* from its event=exit line; -1 before */
    int oks;         /* event=ok lines */
    int last_ok_iter;
    int failed_ops;  /* event=peer_lost/timeout/too_few_peers lines */
    uint64_t begin_ns, op_ns; /* last event=begin; last begin-to-ok time */
} worker;

struct scenario {
    eccl_sg_world *w;
    const char *master_addr;
    int done; /* workers returned or killed; the master stops at NWORKERS */
    int killer_started;
    uint64_t kill_at_ns;
    worker wk[NWORKERS];
};

static void start_actor(const char *name, const char *host, xbt_main_func_t fn, void *data)
{
    sg_actor_t a = sg_actor_init(name, sg_host_by_name(host));
    sg_actor_set_data(a, data);
    sg_actor_start(a, fn, 0, NULL);
}

static int field(const char *line, const char *key, int *out)
{
    const char *p = strstr(line, key);
    return p && sscanf(p + strlen(key), "%d", out) == 1;
}

static void killer_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    scenario *s = sg_actor_self_get_data();
    sg_actor_sleep_until((double)s->kill_at_ns / 1e9);
    eccl_sg_printf("killer", "crashing node-%d (host off) mid all-reduce", VICTIM);
    eccl_sg_world_kill_host(s->w, "node-4");
    s->done++; /* the victim never returns */
}

/* ---- the sim launch ------------------------------------------------------ */

static eccl_result sim_comm_create(void *ctx, const eccl_comm_params *params, eccl_comm **out)
{
    worker *wk = ctx;
    eccl_comm_params p = *params;
    p.p2p_host = sg_host_self_get_name();
    return eccl_sg_comm_create(wk->s->w, &p, out);
}

static void sim_sleep_ms(void *ctx, int ms)
{
    (void)ctx;
    sg_actor_sleep_for(ms / 1e3);
}

static double sim_now_ms(void *ctx)
{
    (void)ctx;
    return (double)eccl_sg_now_ns() / 1e6;
}

static void sim_print(void *ctx, int to_stderr, const char *line)
{
    worker *wk = ctx;
    scenario *s = wk->s;
    eccl_sg_printf(wk->name, "%s%s", to_stderr ? "stderr: " : "", line);
    uint64_t now = eccl_sg_now_ns();
    int iter = -1;
    if (strncmp(line, "event=begin ", 12) == 0) {
        wk->begin_ns = now;
        /* The victim starts the fatal step: crash it halfway through, by the
         * time its last good step took. */
        if (wk->idx == VICTIM && field(line, " iter=", &iter) && iter == KILL_ITER &&
            !s->killer_started) {
            s->killer_started = 1;
            s->kill_at_ns = now + wk->op_ns / 2;
            start_actor("killer", "node-0", killer_main, s);
        }
    } else if (strncmp(line, "event=ok ", 9) == 0) {
        wk->oks++;
        wk->op_ns = now - wk->begin_ns;
        if (field(line, " iter=", &iter)) wk->last_ok_iter = iter;
    } else if (strncmp(line, "event=peer_lost ", 16) == 0 ||
               strncmp(line, "event=timeout ", 14) == 0 ||
               strncmp(line, "event=too_few_peers ", 20) == 0) {
        wk->failed_ops++;
    } else if (strncmp(line, "event=exit ", 11) == 0) {
        field(line, " status=", &wk->exit_status);
    }
}

/* ---- actors -------------------------------------------------------------- */

static void master_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    scenario *s = sg_actor_self_get_data();
    eccl_master *m = NULL;
    eccl_result rc = eccl_sg_master_create(s->w, s->master_addr, &m);
    if (rc == ECCL_OK) rc = eccl_master_run(m);
    if (rc != ECCL_OK) {
        eccl_sg_printf("master", "FAIL master start: %s", eccl_strerror(rc));
        eccl_master_destroy(m);
        return;
    }
    eccl_sg_printf("master", "serving on %s", s->master_addr);
    while (s->done < NWORKERS) sg_actor_sleep_for(0.001);
    eccl_master_destroy(m);
    eccl_sg_printf("master", "stopped");
}

static void worker_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    worker *wk = sg_actor_self_get_data();
    /* Staggered arrivals: the first worker founds the group, the others join. */
    sg_actor_sleep_for(0.001 * wk->idx);
    const eccl_launch launch = {
        .ctx = wk,
        .comm_create = sim_comm_create,
        .sleep_ms = sim_sleep_ms,
        .now_ms = sim_now_ms,
        .print = sim_print,
        .pid = (int)sg_actor_self_get_pid(),
    };
    /* eccl-worker --master node-0:5000 --count 4096 --iters 6 --start-world 4 */
    const eccl_worker_options o = {
        .master = wk->s->master_addr,
        .count = COUNT,
        .iters = ITERS,
        .world_min = 2,
        .start_world = NWORKERS,
        .group = 0,
        .wait_ms = 30000,
    };
    wk->status = eccl_worker_run(&launch, &o);
    wk->returned = 1;
    wk->s->done++;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    simgrid_init(&argc, argv);
    if (argc < 2) {
        fprintf(stderr, "usage: %s PLATFORM.xml [LOG_LEVEL 0-5]\n", argv[0]);
        return 2;
    }
    /* CM02: a message costs exactly latency + size / bandwidth. */
    sg_cfg_set_string("network/model", "CM02");
    simgrid_load_platform(argv[1]);

    scenario *s = calloc(1, sizeof *s);
    if (!s) return 1;
    s->master_addr = "node-0:5000";
    int level = argc > 2 ? atoi(argv[2]) : ECCL_LOG_WARN;
    if (eccl_sg_world_create(level, &s->w) != ECCL_OK) return 1;
    start_actor("master", "node-0", master_main, s);
    for (int i = 0; i < NWORKERS; i++) {
        worker *wk = &s->wk[i];
        char host[16];
        wk->s = s;
        wk->idx = i + 1;
        wk->exit_status = -1;
        wk->last_ok_iter = -1;
        snprintf(wk->name, sizeof wk->name, "worker%d", i + 1);
        snprintf(host, sizeof host, "node-%d", i + 1);
        start_actor(wk->name, host, worker_main, wk);
    }
    simgrid_run();

    int failures = 0, noticed = 0;
    for (int i = 0; i < NWORKERS; i++) {
        worker *wk = &s->wk[i];
        int ok;
        if (wk->idx == VICTIM) {
            ok = !wk->returned && wk->oks == KILL_ITER && wk->last_ok_iter == KILL_ITER - 1;
            eccl_sg_printf("main", "%s %s: killed=%s oks=%d last_ok_iter=%d", ok ? "ok" : "FAIL",
                           wk->name, wk->returned ? "no" : "yes", wk->oks, wk->last_ok_iter);
        } else {
            ok = wk->returned && wk->status == 0 && wk->exit_status == 0 && wk->oks == ITERS &&
                 wk->last_ok_iter == ITERS - 1;
            noticed += wk->failed_ops > 0;
            eccl_sg_printf("main", "%s %s: status=%d exit_line_status=%d oks=%d last_ok_iter=%d "
                           "failed_ops=%d", ok ? "ok" : "FAIL", wk->name, wk->status,
                           wk->exit_status, wk->oks, wk->last_ok_iter, wk->failed_ops);
        }
        failures += !ok;
    }
    /* The crash lands mid all-reduce: every survivor was in it. */
    if (noticed != NWORKERS - 1) {
        eccl_sg_printf("main", "FAIL only %d of %d survivors saw a failed all-reduce", noticed,
                       NWORKERS - 1);
        failures++;
    }
    eccl_sg_printf("main", "simulation over: %d workers done, %d failed checks", s->done,
                   failures);
    eccl_sg_world_destroy(s->w);
    free(s);
    fflush(stdout);
    return failures == 0 ? 0 : 1;
}
