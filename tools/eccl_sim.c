/* eccl-sim: runs a scenario file on the simulator backend.
 *
 *   eccl-sim run FILE [--seed S] [--out DIR] [--log-level 0-5] [--verbose]
 *
 * The scenario (format: scenarios/README.md) describes a generated platform,
 * N ranks running the very worker loop eccl-worker runs
 * (examples/worker_loop.c, eccl_worker_run) as SimGrid actors, and a fault
 * plan. After the run the outcome is checked; the results go to DIR (default
 * results/<name>/ under the current directory): platform.xml, events.tsv,
 * ranks.tsv, summary.tsv, plot.gp and plot.png (rendered with gnuplot when it
 * is installed; past 1,000 ranks from plot.tsv, a sample of the ranks).
 *
 * `workload = bench` instead runs eccl-bench's measurement on the platform
 * (tools/sim_bench.h) and prints its rows; `diloco` and `nccl2_bootstrap`
 * are the other workloads (scenarios/README.md).
 *
 * Exit status: 0 every check passed, 1 a check failed (or the outputs could
 * not be written), 2 usage or scenario error.
 *
 * Like everything the simulation links, this file holds no mutable global:
 * the scenario, its PRNG and its results hang off one struct in main().
 * Everything written to the TSVs comes from the simulated clock and the
 * seeded PRNG, so the same file and seed give the same bytes.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <malloc.h>

#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <simgrid/link.h>
#include <xbt/config.h>
#include <xbt/dynar.h>
#include <xbt/log.h>

#include "eccl.h"
#include "env_sg.h"
#include "worker_loop_sg.h"
#include "diloco_loop.h"
#include "churn_check.h"
#include "sim_nccl2.h"
#include "sim_bench.h"
#include "tool_util.h"
#include "coll/dispatch.h"
#include "scenario.h"
#include "results.h"


/* ---- run state ----------------------------------------------------------- */

typedef struct sim sim;

/* What the fault plan says a rank ends as. */
typedef enum rank_role {
    ROLE_SURVIVOR, /* runs from the start, finishes every iteration */
    ROLE_JOINER,   /* its last worker started late (join, host_on): finishes the job's last
                      iterations from wherever the others were */
    ROLE_KILLED,   /* its host is off at the end (kill, host_off) */
    ROLE_DROPPED   /* cut off from the master longer than peer_timeout: its worker fails */
} rank_role;

static const char *role_name(rank_role r)
{
    static const char *const names[] = {"survivor", "joiner", "victim", "dropped"};
    return names[r];
}

typedef struct rank_state {
    sim *s;
    int idx; /* 1..ranks */
    char name[16];
    char host[24];      /* node-(1 + (idx-1) / ranks_per_host) */
    aid_t pid;          /* its current worker's actor */
    uint64_t arrive_ns; /* staggered start, plus seeded jitter; or its join time */
    int kill_iter;      /* kill @ iter I: I, else -1 */
    int kill_armed;     /* its killer actor was started */
    int late;           /* its first worker joins a running job */
    int nstarts;        /* workers the plan starts on it: 1 + its host_on count */
    int lives, ends;    /* workers started; ended (returned, or killed while running) */
    int running;        /* a worker is alive on it now (maybe still before its arrival) */
    int counted;        /* ... and past its arrival: in sim->running */
    int start_world;    /* the current worker's --start-world */
    rank_role role;     /* expected, from the plan */
    uint64_t cut_ns;    /* longest stretch cut off from the master; UINT64_MAX: to the end */
    int killed;         /* workers killed while running */
    int kill_missed;    /* its host went off while no worker ran (after it returned) */
    /* The current worker (reset when a new one starts). */
    int returned, status;
    int exit_status; /* from its event=exit line; -1 before */
    int oks, first_ok_iter, last_ok_iter, last_ok_world, min_ok_world, max_ok_world,
        failed_ops;
    int rejoins;               /* master_lost lines: its relay died, it came back */
    int phantom_oks;           /* event=ok lines that said values=phantom */
    int hashed_oks;            /* event=ok lines with a result hash */
    uint64_t begin_ns, op_ns; /* last event=begin; last begin-to-ok time */
    uint64_t first_begin_ns;   /* its first worker's first event=begin; 0: none yet */
    size_t life;               /* diloco: the checker's index of its current worker */
    uint64_t last_rev;         /* diloco: its workers' last reported revision */
} rank_state;

typedef struct event_row {
    uint64_t t_ns;
    int rank;
    char event[16];
    int iter, world; /* -1: none */
    char ms[24];     /* as the loop printed it, "-" when none */
    char hash[24];   /* event=ok: the result's hash, "phantom", else "-" */
} event_row;

/* A fault's links, resolved on the loaded platform (node-K names give two). */
typedef struct fault_links {
    int n;
    sg_link_t l[2 * MAX_FAULT_LINKS];
} fault_links;

struct n2_run;

struct sim {
    const eccl_scenario *cfg;
    eccl_sg_world *w;
    const char *master_addr;
    /* relays: relay k serves ranks [k * relay_share + 1, (k + 1) * relay_share] */
    int relay_share;
    char (*relay_addr)[ECCL_ADDR_MAX];
    aid_t *relay_pid;
    struct relay_arg *relay_args;
    int relays_live;   /* relay actors not ended */
    int verbose;
    int done;    /* ranks whose last worker ended; the master stops at cfg->ranks */
    int running; /* workers alive now */
    int next_milestone; /* the next iteration whose completion is announced */
    int *oks_at;        /* per iter: live ranks through it */
    uint64_t *ref_hash; /* per iter: the first result hash seen; 0 none yet */
    int parity_bad;     /* results that differ from ref_hash */
    fault_links *flinks; /* per cfg->faults entry */
    int *order;          /* timed faults, in the order they fire */
    int norder;
    /* Detection: the first kill/host_off/cut, and the first sign of it at a
     * survivor (a failed all-reduce, or one done in a smaller world). */
    uint64_t fault_ns, detect_ns; /* UINT64_MAX: none */
    /* Slow links: all-reduces wholly before / begun after the first one. */
    uint64_t slow_ns; /* UINT64_MAX: no slow_link (nor optimize_topology) yet */
    int optimized;    /* optimize_topology calls that returned */
    uint64_t before_n, before_sum_ns, after_n, after_sum_ns;
    rank_state *rk;
    event_row *ev;
    size_t nev, cap_ev;
    int oom;
    /* The most memory malloc had handed out, seen  every
     * heap_sample_every() events: from its heap (the run's objects) and in
     * chunks of their own (mmapped: actor stacks, large buffers), each
     * counted as allocated, not as touched. Unlike RSS, deterministic for a
     * binary and a seed, so the scale guard compares them with a baseline
     * (tests/sim/check_scale_guard.sh). */
    size_t heap_peak, mmap_peak;
    /* Every good all-reduce, begin to ok, all ranks: count, sum, minimum. */
    uint64_t ar_n, ar_sum_ns, ar_min_ns;
    uint64_t ar_by_algo[ECCL_ALGO_COUNT]; /* successful all-reduces by algorithm (algo= of event=ok) */
    uint64_t ar_failed; /* all-reduces that returned an error (peer lost, timeout, too few) */
    /* workload = diloco */
    churn_check chk;
    int dl_live;      /* workers started and not ended */
    int churn_done;   /* the churn actor has finished */
    int dl_kills, dl_spawns, dl_bad_exits;
    size_t dl_lives;  /* workers started in all */
    /* workload = nccl2_bootstrap */
    struct n2_run *n2;
};

/* ---- events and progress ------------------------------------------------- */

static int field_int(const char *line, const char *key, int *out)
{
    const char *p = strstr(line, key);
    return p && sscanf(p + strlen(key), "%d", out) == 1;
}

/* Host buffers: every good step was checked and hashed by the loop.
 * Phantom: every one ran on phantom buffers (there are no values). */
static int values_ok(const eccl_scenario *cfg, const rank_state *r)
{
    return cfg->phantom ? r->phantom_oks == r->oks : r->hashed_oks == r->oks;
}

/* mallinfo2 walks every free chunk malloc holds, which a 96K-rank heap has
 * millions of: at every 64th event it was 88% of such a run. So a fixed
 * number of samples whatever the size: every ranks / 2 events, some 16 in
 * a run of 3 all-reduces (about 8 events a rank). */
static size_t heap_sample_every(const sim *s)
{
    return s->cfg->ranks > 128 ? (size_t)s->cfg->ranks / 2 : 64;
}

static void sample_heap(sim *s)
{
    struct mallinfo2 mi = mallinfo2();
    if (mi.uordblks > s->heap_peak) s->heap_peak = mi.uordblks;
    if (mi.hblkhd > s->mmap_peak) s->mmap_peak = mi.hblkhd;
}

/* rank 0 in events.tsv: a platform event (link_off, link_on, slow_link). */
static void add_event(sim *s, int rank, const char *event, int iter, int world, const char *ms,
                      const char *hash)
{
    if (s->nev == s->cap_ev) {
        size_t cap = s->cap_ev ? 2 * s->cap_ev : 256;
        event_row *n = realloc(s->ev, cap * sizeof *n);
        if (!n) {
            s->oom = 1;
            return;
        }
        s->ev = n;
        s->cap_ev = cap;
    }
    event_row *e = &s->ev[s->nev++];
    if (s->nev % heap_sample_every(s) == 0) sample_heap(s);
    e->t_ns = eccl_sg_now_ns();
    e->rank = rank;
    snprintf(e->event, sizeof e->event, "%s", event);
    e->iter = iter;
    e->world = world;
    snprintf(e->ms, sizeof e->ms, "%s", ms ? ms : "-");
    snprintf(e->hash, sizeof e->hash, "%s", hash ? hash : "-");
}

/* Announces every iteration all running workers are through (a worker that
 * joined at step f counts as through the steps before f). */
static void progress(sim *s)
{
    while (s->next_milestone < s->cfg->iters && s->running > 0 &&
           s->oks_at[s->next_milestone] >= s->running) {
        eccl_sg_printf("eccl-sim", "progress iter=%d/%d ranks_done=%d", s->next_milestone + 1,
                       s->cfg->iters, s->oks_at[s->next_milestone]);
        s->next_milestone++;
    }
}

/* ---- fault injection ----------------------------------------------------- */

static aid_t start_actor(eccl_sg_world *w, const char *name, const char *host, xbt_main_func_t fn, void *data)
{
    sg_actor_t a = sg_actor_init(name, eccl_sg_world_host(w, host));
    const aid_t pid = sg_actor_get_pid(a);
    sg_actor_set_data(a, data);
    sg_actor_start(a, fn, 0, NULL);
    return pid;
}

/* A worker ended (returned, or killed while running). */
static void worker_ended(sim *s, rank_state *r)
{
    if (r->counted) s->running--;
    r->counted = 0;
    r->running = 0;
    if (++r->ends == r->nstarts) s->done++;
}

/* Its worker was taken down (kill, or its host went off). */
static void host_went_off(sim *s, rank_state *r, const char *event)
{
    uint64_t now = eccl_sg_now_ns();
    if (r->running) {
        r->killed++;
        /* Its finished steps no longer count towards the live workers' progress. */
        for (int i = 0; i <= r->last_ok_iter && i < s->cfg->iters; i++) s->oks_at[i]--;
        worker_ended(s, r);
    } else if (r->returned) {
        r->kill_missed++; /* it had finished: the fault came too late */
    } else {
        return; /* already killed (a host_off after a kill of one of its ranks) */
    }
    add_event(s, r->idx, event, r->last_ok_iter + 1, -1, NULL, NULL);
    if (s->fault_ns == UINT64_MAX) s->fault_ns = now;
    progress(s);
}

/* kill: a crash of the rank's process. With one rank per host, the host
 * crashes with it (as it always did: a host_on may bring it back); with
 * several, only the process: its conns reset, its listeners refuse, its
 * actors die, the host and its other ranks go on. */
static void kill_rank(sim *s, rank_state *r)
{
    if (s->cfg->ranks_per_host == 1) {
        eccl_sg_printf("eccl-sim", "kill rank=%d host=%s", r->idx, r->host);
        eccl_sg_world_kill_host(s->w, r->host);
    } else {
        eccl_sg_printf("eccl-sim", "kill rank=%d host=%s (its process; the host stays on)",
                       r->idx, r->host);
        if (r->running) eccl_sg_world_kill_process(s->w, r->pid);
    }
    host_went_off(s, r, "killed");
}

typedef struct killer_arg {
    rank_state *victim;
    uint64_t at_ns;
} killer_arg;

static void killer_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    killer_arg *ka = sg_actor_self_get_data();
    rank_state *v = ka->victim;
    sim *s = v->s;
    sg_actor_sleep_until((double)ka->at_ns / 1e9);
    kill_rank(s, v);
    free(ka);
}

static void start_killer(rank_state *v, uint64_t at_ns)
{
    killer_arg *ka = malloc(sizeof *ka);
    if (!ka) {
        v->s->oom = 1;
        return;
    }
    ka->victim = v;
    ka->at_ns = at_ns;
    char name[32];
    snprintf(name, sizeof name, "killer%d", v->idx);
    start_actor(v->s->w, name, "node-0", killer_main, ka);
}

static void rank_main(int argc, char **argv);
static void relay_main(int argc, char **argv);
static void relay_faults_main(int argc, char **argv);

/* A relay actor's data. */
typedef struct relay_arg {
    sim *s;
    int k;
} relay_arg;



/* relays = K: relay k on the host of the first rank of its share, which
 * its ranks reach first (the master next). -1: out of memory. */
static int start_relays(sim *s)
{
    const eccl_scenario *c = s->cfg;
    if (!c->relays) return 0;
    s->relay_share = (c->ranks + c->relays - 1) / c->relays;
    s->relay_addr = calloc((size_t)c->relays, sizeof *s->relay_addr);
    s->relay_pid = calloc((size_t)c->relays, sizeof *s->relay_pid);
    relay_arg *args = s->relay_args = calloc((size_t)c->relays, sizeof *args);
    if (!s->relay_addr || !s->relay_pid || !args) return -1;
    /* A relay runs on a host of its share (the first rank's: the same rack
     * as most of its ranks), except under the diloco churn, which crashes
     * ranks' hosts at random: there it takes a spare host (checked). */
    const int spare0 = 1 + eccl_scn_rank_host(c, c->ranks);
    const int spare = c->diloco;
    for (int k = 0; k < c->relays; k++) {
        char host[24];
        if (spare) {
            snprintf(host, sizeof host, "node-%d", spare0 + k);
        } else {
            const rank_state *first = &s->rk[k * s->relay_share < c->ranks ? k * s->relay_share : c->ranks - 1];
            snprintf(host, sizeof host, "%s", first->host);
        }
        snprintf(s->relay_addr[k], sizeof s->relay_addr[k], "%s:%d", host, RELAY_PORT);
        args[k] = (relay_arg){s, k};
        char name[32];
        snprintf(name, sizeof name, "relay-%d", k + 1);
        s->relay_pid[k] = start_actor(s->w, name, host, relay_main, &args[k]);
        s->relays_live++;
    }
    if (c->n_relay_kills) start_actor(s->w, "relay-faults", "node-0", relay_faults_main, s);
    return 0;
}

/* A new worker on the rank's host, as a new process would start: fresh
 * communicator, admitted by the running peers' vote. */
static void start_worker(rank_state *r, uint64_t at_ns, int start_world)
{
    r->lives++;
    r->running = 1;
    r->counted = 0;
    r->arrive_ns = at_ns;
    r->start_world = start_world;
    r->returned = 0;
    r->status = 0;
    r->exit_status = -1;
    r->oks = r->phantom_oks = r->hashed_oks = 0;
    r->first_ok_iter = r->last_ok_iter = -1;
    r->last_ok_world = r->min_ok_world = r->max_ok_world = -1;
    r->failed_ops = 0;
    r->rejoins = 0;
    r->begin_ns = r->op_ns = 0;
    r->pid = start_actor(r->s->w, r->name, r->host, rank_main, r);
}

static void apply_fault(sim *s, int idx)
{
    const eccl_scn_fault *f = &s->cfg->faults[idx];
    const fault_links *fl = &s->flinks[idx];
    rank_state *r = f->rank > 0 ? &s->rk[f->rank - 1] : NULL;
    eccl_result rc = ECCL_OK;
    switch (f->kind) {
    case F_KILL:
        kill_rank(s, r);
        break;
    case F_HOST_OFF:
    case F_HOST_ON: {
        /* The whole host: every rank on it, in rank order. */
        int first, last;
        eccl_scn_host_ranks(s->cfg, eccl_scn_rank_host(s->cfg, r->idx), &first, &last);
        char ranks[48] = "";
        if (s->cfg->ranks_per_host > 1) snprintf(ranks, sizeof ranks, " ranks=%d-%d", first, last);
        if (f->kind == F_HOST_OFF) {
            eccl_sg_printf("eccl-sim", "host_off rank=%d host=%s%s (silent)", r->idx, r->host,
                           ranks);
            rc = eccl_sg_world_host_off(s->w, r->host);
            for (int q = first; q <= last; q++) host_went_off(s, &s->rk[q - 1], "host_off");
        } else {
            eccl_sg_printf("eccl-sim", "host_on rank=%d host=%s%s: a new worker starts%s",
                           r->idx, r->host, ranks, first < last ? " for each" : "");
            rc = eccl_sg_world_host_on(s->w, r->host);
            for (int q = first; q <= last; q++) {
                add_event(s, q, "host_on", -1, -1, NULL, NULL);
                start_worker(&s->rk[q - 1], eccl_sg_now_ns(), 0);
            }
        }
        break;
    }
    case F_LINK_OFF:
    case F_LINK_ON:
        for (int i = 0; i < fl->n && rc == ECCL_OK; i++)
            rc = eccl_sg_world_set_link(s->w, fl->l[i], f->kind == F_LINK_ON);
        eccl_sg_printf("eccl-sim", "%s %s%s (%d links)", f->kind == F_LINK_ON ? "link_on" : "link_off",
                       f->links[0], f->nlinks > 1 ? ",..." : "", fl->n);
        add_event(s, 0, f->kind == F_LINK_ON ? "link_on" : "link_off", -1, -1, NULL, NULL);
        if (f->kind == F_LINK_OFF && s->fault_ns == UINT64_MAX) s->fault_ns = eccl_sg_now_ns();
        break;
    case F_SLOW:
        for (int i = 0; i < fl->n; i++) {
            double bw = sg_link_get_bandwidth(fl->l[i]), lat = sg_link_get_latency(fl->l[i]);
            if (f->factor > 0) {
                bw /= f->factor;
                lat *= f->factor;
            }
            if (f->bw_Bps > 0) bw = f->bw_Bps;
            if (f->have_lat) lat = f->lat_s;
            sg_link_set_bandwidth(fl->l[i], bw);
            sg_link_set_latency(fl->l[i], lat);
        }
        eccl_sg_printf("eccl-sim", "slow_link %s%s (%d links)", f->links[0],
                       f->nlinks > 1 ? ",..." : "", fl->n);
        add_event(s, 0, "slow_link", -1, -1, NULL, NULL);
        if (s->slow_ns == UINT64_MAX) s->slow_ns = eccl_sg_now_ns();
        break;
    case F_JOIN:
        break; /* not timed here: the rank's first worker arrives then */
    }
    if (rc != ECCL_OK) {
        eccl_sg_printf("eccl-sim", "FAIL %s: %s", eccl_scn_fault_name(f->kind), eccl_strerror(rc));
        s->oom = 1;
    }
}

/* Fires the timed faults in plan order (time, then file order), from one
 * actor, so that faults at the same instant apply in a fixed order. */
static void plan_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sim *s = sg_actor_self_get_data();
    for (int k = 0; k < s->norder; k++) {
        sg_actor_sleep_until((double)s->cfg->faults[s->order[k]].at_ns / 1e9);
        apply_fault(s, s->order[k]);
    }
}

/* ---- the sim launch ------------------------------------------------------ */

/* The loop's key=value lines: recorded as events, echoed with --verbose. */
static void sim_print(void *ctx, int to_stderr, const char *line)
{
    rank_state *r = ctx;
    sim *s = r->s;
    if (to_stderr || s->verbose) eccl_sg_printf(r->name, "%s%s", to_stderr ? "stderr: " : "", line);
    if (to_stderr || strncmp(line, "event=", 6) != 0) return;
    char event[16] = "", ms[24] = "";
    sscanf(line + 6, "%15[a-z_]", event);
    uint64_t now = eccl_sg_now_ns();
    /* The loop prints ms=%.1f; the simulated clock gives the exact time
     * since this rank's event=begin, to the nanosecond. */
    if (strstr(line, " ms=")) {
        uint64_t d = now - r->begin_ns;
        snprintf(ms, sizeof ms, "%llu.%06llu", (unsigned long long)(d / 1000000u),
                 (unsigned long long)(d % 1000000u));
    }
    int iter = -1, world = -1;
    field_int(line, " iter=", &iter);
    field_int(line, " world=", &world);
    /* The result's hash (host buffers) or "phantom", for events.tsv. */
    char hash[24] = "";
    const char *hp = strstr(line, " hash=");
    if (hp) sscanf(hp + 6, "%16[0-9a-f]", hash);
    else if (strstr(line, " values=phantom")) snprintf(hash, sizeof hash, "phantom");
    add_event(s, r->idx, event, iter, world, ms[0] ? ms : NULL, hash[0] ? hash : NULL);
    const int after_fault = s->fault_ns != UINT64_MAX && s->detect_ns == UINT64_MAX;

    if (strcmp(event, "begin") == 0) {
        r->begin_ns = now;
        /* Bootstrap: the first worker's first all-reduce begins once it is
         * connected, admitted, on the ring and agreed on the step. */
        if (r->lives == 1 && !r->late && !r->first_begin_ns) r->first_begin_ns = now;
        /* The victim starts the fatal step: crash it halfway through, by the
         * time its last good step took (as tests/sim/sim_worker does). */
        if (r->kill_iter >= 0 && iter == r->kill_iter && !r->kill_armed) {
            r->kill_armed = 1;
            start_killer(r, now + r->op_ns / 2);
        }
    } else if (strcmp(event, "ok") == 0) {
        unsigned long long h = 0;
        r->oks++;
        r->phantom_oks += strcmp(hash, "phantom") == 0;
        r->op_ns = now - r->begin_ns;
        s->ar_n++;
        s->ar_sum_ns += r->op_ns;
        const char *ap = strstr(line, " algo=");
        for (uint32_t a = 0; ap && a < ECCL_ALGO_COUNT; a++) {
            size_t len = strlen(eccl_algorithm_name(a));
            if (strncmp(ap + 6, eccl_algorithm_name(a), len) == 0 && (ap[6 + len] == ' ' || !ap[6 + len]))
                s->ar_by_algo[a]++;
        }
        if (s->ar_n == 1 || r->op_ns < s->ar_min_ns) s->ar_min_ns = r->op_ns;
        if (s->slow_ns != UINT64_MAX && r->begin_ns >= s->slow_ns) {
            s->after_n++;
            s->after_sum_ns += r->op_ns;
        } else if ((s->slow_ns == UINT64_MAX || now < s->slow_ns) && iter > 0) {
            /* Not iteration 0: it also waits for the last rank to arrive. */
            s->before_n++;
            s->before_sum_ns += r->op_ns;
        }
        /* A survivor saw the failure: an all-reduce done in a smaller world. */
        if (after_fault && r->last_ok_world >= 0 && world < r->last_ok_world) s->detect_ns = now;
        if (r->first_ok_iter < 0) r->first_ok_iter = iter;
        r->last_ok_iter = iter;
        r->last_ok_world = world;
        if (r->min_ok_world < 0 || world < r->min_ok_world) r->min_ok_world = world;
        if (world > r->max_ok_world) r->max_ok_world = world;
        if (iter >= 0 && iter < s->cfg->iters) {
            /* Every rank that finished an iteration holds the same bits. */
            if (hp && sscanf(hp + 6, "%llx", &h) == 1) {
                if (!s->ref_hash[iter]) s->ref_hash[iter] = h;
                else if (s->ref_hash[iter] != h) s->parity_bad++;
                r->hashed_oks++;
            }
            /* A late worker's first step: it is through the ones before. */
            if (r->oks == 1)
                for (int i = 0; i < iter; i++) s->oks_at[i]++;
            s->oks_at[iter]++;
            progress(s);
        }
    } else if (strcmp(event, "peer_lost") == 0 || strcmp(event, "timeout") == 0 ||
               strcmp(event, "too_few_peers") == 0 || strcmp(event, "master_lost") == 0) {
        r->failed_ops++;
        r->rejoins += event[0] == 'm';
        s->ar_failed++;
        if (after_fault) s->detect_ns = now;
    } else if (strcmp(event, "exit") == 0) {
        field_int(line, " status=", &r->exit_status);
    } else if (strcmp(event, "optimized") == 0) {
        /* Like a slow_link: all-reduces split into before and after. */
        if (s->slow_ns == UINT64_MAX) s->slow_ns = now;
        s->optimized++;
    }
}

/* ---- actors -------------------------------------------------------------- */

/* Until every rank is done (diloco: until the churn is over and no worker
 * lives): the coordinators serve until then. */
static int job_running(const sim *s)
{
    return s->cfg->diloco ? !(s->dl_live == 0 && s->churn_done) : s->done < s->cfg->ranks;
}

static void master_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sim *s = sg_actor_self_get_data();
    eccl_master *m = NULL;
    eccl_result rc = eccl_sg_master_create(s->w, s->master_addr, &m);
    if (rc == ECCL_OK) rc = eccl_master_run(m);
    if (rc != ECCL_OK) {
        eccl_sg_printf("master", "FAIL master start: %s", eccl_strerror(rc));
        eccl_master_destroy(m);
        s->oom = 1;
        return;
    }
    /* Until every rank is done (diloco: until the churn is over and no
     * worker lives). */
    while (job_running(s) || s->relays_live > 0) sg_actor_sleep_for(0.001);
    eccl_master_destroy(m);
}

/* However a relay actor ends (its run is over, kill_relay, its host's
 * kill): the master goes on until none is left, so no relay outlives it. */
static void relay_exited(int failed, void *data)
{
    (void)failed;
    ((sim *)data)->relays_live--;
}

static void relay_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    relay_arg *a = sg_actor_self_get_data();
    sim *s = a->s;
    sg_actor_on_exit(relay_exited, s);
    eccl_relay *relay = NULL;
    eccl_result rc = eccl_sg_relay_create(s->w, s->relay_addr[a->k], s->master_addr, &relay);
    if (rc == ECCL_OK) rc = eccl_relay_run(relay);
    if (rc != ECCL_OK) {
        eccl_sg_printf("relay", "FAIL relay %d start: %s", a->k + 1, eccl_strerror(rc));
        eccl_relay_destroy(relay);
        s->oom = 1;
        return;
    }
    /* Until every rank is done: coarse, one timer per relay. */
    while (job_running(s)) sg_actor_sleep_for(0.01);
    eccl_relay_destroy(relay);
}

/* Fires the kill_relay lines in time order (file order at one instant). */
static void relay_faults_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sim *s = sg_actor_self_get_data();
    const eccl_scenario *c = s->cfg;
    int done[MAX_RELAY_KILLS] = {0};
    for (int n = 0; n < c->n_relay_kills; n++) {
        int next = -1;
        for (int i = 0; i < c->n_relay_kills; i++)
            if (!done[i] && (next < 0 || c->relay_kills[i].at_ns < c->relay_kills[next].at_ns))
                next = i;
        done[next] = 1;
        sg_actor_sleep_until((double)c->relay_kills[next].at_ns / 1e9);
        int k = c->relay_kills[next].relay - 1;
        eccl_sg_printf("eccl-sim", "kill_relay relay=%d at=%s: its ranks rejoin through the master",
                       k + 1, s->relay_addr[k]);
        add_event(s, 0, "kill_relay", -1, -1, NULL, NULL);
        if (s->fault_ns == UINT64_MAX) s->fault_ns = eccl_sg_now_ns();
        eccl_sg_world_kill_process(s->w, s->relay_pid[k]);
    }
}

/* A rank's master_addr: behind a relay, it first and the master next (a
 * dead relay's ranks rejoin through the master). */
static void rank_master(const sim *s, const rank_state *r, char *buf, size_t len)
{
    if (s->cfg->relays)
        snprintf(buf, len, "%s,%s", s->relay_addr[(r->idx - 1) / s->relay_share], s->master_addr);
    else
        snprintf(buf, len, "%s", s->master_addr);
}

static void rank_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    rank_state *r = sg_actor_self_get_data();
    sim *s = r->s;
    /* Not when it is due now (a host_on): SimGrid would round a sleep of
     * less than its precision up to 1 ns, and say so. */
    if (r->arrive_ns > eccl_sg_now_ns()) sg_actor_sleep_until((double)r->arrive_ns / 1e9);
    r->counted = 1;
    s->running++;
    eccl_worker_sg sim_launch;
    eccl_worker_sg_init(&sim_launch, s->w, sim_print, r);
    const eccl_launch launch = sim_launch.launch;
    /* eccl-worker --master node-0:5000 --count C --iters I --start-world N */
    char master[2 * ECCL_ADDR_MAX + 1];
    rank_master(s, r, master, sizeof master);
    const eccl_worker_options o = {
        .master = master,
        .rejoins = s->cfg->relays ? 1 : 0,
        .count = (size_t)s->cfg->count,
        .iters = s->cfg->iters,
        .world_min = s->cfg->world_min,
        .start_world = r->start_world,
        .group = 0,
        .wait_ms = 30000,
        .step_ms = (int)llround(s->cfg->step_s * 1e3),
        .peer_timeout_ms = (uint32_t)llround(s->cfg->peer_timeout_s * 1e3),
        .optimize_at = s->cfg->optimize_at,
    };
    r->status = eccl_worker_run(&launch, &o);
    r->returned = 1;
    worker_ended(s, r);
}

/* ---- the fault plan on the loaded platform -------------------------------- */

/* The links of one name: node-K is host K's own link (both directions: the
 * first link of its route out and the last of its route in); any other name
 * is a link of platform.xml. 0, or -1 when there is no such link. */
static int resolve_link(const eccl_scenario *c, const char *name, fault_links *out)
{
    int k;
    char tail;
    if (sscanf(name, "node-%d%c", &k, &tail) == 1 && k >= 0 && k < c->hosts) {
        char self[24], other[24];
        snprintf(self, sizeof self, "node-%d", k);
        snprintf(other, sizeof other, "node-%d", k == 0 ? 1 : 0);
        sg_host_t a = sg_host_by_name(self), b = sg_host_by_name(other);
        if (!a || !b) return -1;
        for (int dir = 0; dir < 2; dir++) {
            xbt_dynar_t links = xbt_dynar_new(sizeof(sg_link_t), NULL);
            sg_host_get_route(dir ? b : a, dir ? a : b, links);
            unsigned long n = xbt_dynar_length(links);
            if (n > 0) {
                sg_link_t l = xbt_dynar_get_as(links, dir ? n - 1 : 0, sg_link_t);
                if (out->n == 0 || out->l[out->n - 1] != l) out->l[out->n++] = l;
            }
            xbt_dynar_free(&links);
        }
        return out->n > 0 ? 0 : -1;
    }
    size_t n = sg_link_count();
    sg_link_t *all = sg_link_list();
    int found = -1;
    for (size_t i = 0; i < n && all; i++) {
        if (strcmp(sg_link_get_name(all[i]), name) == 0) {
            out->l[out->n++] = all[i];
            found = 0;
            break;
        }
    }
    free(all);
    return found;
}

static int resolve_links(const char *file, const eccl_scenario *c, fault_links *fl)
{
    for (int i = 0; i < c->nfaults; i++) {
        const eccl_scn_fault *f = &c->faults[i];
        for (int j = 0; j < f->nlinks; j++)
            if (resolve_link(c, f->links[j], &fl[i]))
                return eccl_scn_error(file, f->line, "%s: \"%s\": no such link (node-K is host K's "
                                 "link; other names as in platform.xml)", eccl_scn_fault_name(f->kind),
                                 f->links[j]);
    }
    return 0;
}

static int order_cmp(const void *a, const void *b, void *ctx)
{
    const eccl_scenario *c = ctx;
    int x = *(const int *)a, y = *(const int *)b;
    uint64_t tx = c->faults[x].at_ns, ty = c->faults[y].at_ns;
    if (tx != ty) return tx < ty ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* The links a set of faults turns off, with their state during the walk. */
typedef struct cut_links {
    int n;
    sg_link_t *l;
    int *off;
} cut_links;

static int is_off(const cut_links *u, sg_link_t l)
{
    for (int i = 0; i < u->n; i++)
        if (u->l[i] == l) return u->off[i];
    return 0;
}

/* 1 when the route a -> b crosses no link that is off. */
static int route_up(const cut_links *u, int a, int b)
{
    char ha[24], hb[24];
    snprintf(ha, sizeof ha, "node-%d", a);
    snprintf(hb, sizeof hb, "node-%d", b);
    xbt_dynar_t links = xbt_dynar_new(sizeof(sg_link_t), NULL);
    sg_host_get_route(sg_host_by_name(ha), sg_host_by_name(hb), links);
    int up = 1;
    unsigned long n = xbt_dynar_length(links);
    for (unsigned long i = 0; i < n && up; i++)
        up = !is_off(u, xbt_dynar_get_as(links, i, sg_link_t));
    xbt_dynar_free(&links);
    return up;
}

/* Walks the link faults in time order and finds, per rank, the longest
 * stretch during which its route to or from the master (node-0) crosses a
 * link that is off (r->cut_ns; UINT64_MAX when it lasts to the end). A cut
 * of at least peer_timeout + 100 ms drops the rank (master and worker both
 * time out; 100 ms covers the messages that were on the wire at the cut);
 * one of at most peer_timeout / 2 is invisible (heartbeats go every
 * peer_timeout / 4 and held messages flow on heal); in between, the outcome
 * depends on heartbeat phase, and the scenario is refused. While a stretch
 * of constant link state lasts more than peer_timeout / 2, every two ranks
 * that reach the master must reach each other, or the job would hang in a
 * ring that crosses the cut: refused too (a partition must split the
 * platform into groups). 0, or -1 after printing why. */
static int analyse_cuts(const char *file, const eccl_scenario *c, const fault_links *fl,
                        rank_state *rk)
{
    int nlink = 0;
    for (int i = 0; i < c->nfaults; i++)
        if (c->faults[i].kind == F_LINK_OFF || c->faults[i].kind == F_LINK_ON) nlink++;
    if (nlink == 0) return 0;
    if (c->ranks > 512)
        return eccl_scn_error(file, 0, "link faults: at most 512 ranks (the partition check "
                         "compares the routes of every two ranks)");
    int *ord = calloc((size_t)nlink, sizeof *ord);
    cut_links u = {0, calloc((size_t)nlink * 2 * MAX_FAULT_LINKS, sizeof(sg_link_t)),
                   calloc((size_t)nlink * 2 * MAX_FAULT_LINKS, sizeof(int))};
    uint64_t *since = calloc((size_t)c->ranks + 1, sizeof *since);
    int *reach = calloc((size_t)c->ranks + 1, sizeof *reach);
    int rc = 0;
    if (!ord || !u.l || !u.off || !since || !reach) {
        rc = eccl_scn_error(file, 0, "out of memory");
        goto out;
    }
    int n = 0;
    for (int i = 0; i < c->nfaults; i++) {
        const eccl_scn_fault *f = &c->faults[i];
        if (f->kind != F_LINK_OFF && f->kind != F_LINK_ON) continue;
        ord[n++] = i;
        for (int j = 0; j < fl[i].n; j++) {
            int seen = 0;
            for (int k = 0; k < u.n; k++) seen |= u.l[k] == fl[i].l[j];
            if (!seen) u.l[u.n++] = fl[i].l[j];
        }
    }
    qsort_r(ord, (size_t)n, sizeof *ord, order_cmp, (void *)c);
    for (int r = 1; r <= c->ranks; r++) since[r] = UINT64_MAX;
    for (int i = 0; i < n && rc == 0;) {
        const uint64_t t = c->faults[ord[i]].at_ns;
        int first = i, partition_line = 0;
        for (; i < n && c->faults[ord[i]].at_ns == t; i++) {
            const eccl_scn_fault *f = &c->faults[ord[i]];
            for (int j = 0; j < fl[ord[i]].n; j++)
                for (int k = 0; k < u.n; k++)
                    if (u.l[k] == fl[ord[i]].l[j]) u.off[k] = f->kind == F_LINK_OFF;
            if (f->partition) partition_line = f->line;
        }
        const uint64_t end = i < n ? c->faults[ord[i]].at_ns : UINT64_MAX;
        int cut_any = 0;
        for (int r = 1; r <= c->ranks; r++) {
            const int h = eccl_scn_rank_host(c, r);
            reach[r] = route_up(&u, 0, h) && route_up(&u, h, 0);
            cut_any |= !reach[r];
            if (!reach[r] && since[r] == UINT64_MAX) since[r] = t;
            if (reach[r] && since[r] != UINT64_MAX) {
                if (t - since[r] > rk[r - 1].cut_ns) rk[r - 1].cut_ns = t - since[r];
                since[r] = UINT64_MAX;
            }
        }
        if (partition_line && !cut_any) {
            rc = eccl_scn_error(file, partition_line, "partition: cuts no rank off the master "
                           "(node-0)");
            break;
        }
        const uint64_t half = (uint64_t)llround(c->peer_timeout_s * 0.5e9);
        if (end - t <= half) continue;
        for (int a = 1; a <= c->ranks && rc == 0; a++) {
            if (!reach[a]) continue;
            for (int b = a + 1; b <= c->ranks && rc == 0; b++) {
                const int ha = eccl_scn_rank_host(c, a), hb = eccl_scn_rank_host(c, b);
                if (reach[b] && !(route_up(&u, ha, hb) && route_up(&u, hb, ha)))
                    rc = eccl_scn_error(file, c->faults[ord[first]].line,
                                   "ranks %d and %d both reach the master but not each other: "
                                   "not a partition into groups", a, b);
            }
        }
    }
    for (int r = 1; r <= c->ranks && rc == 0; r++) {
        if (since[r] != UINT64_MAX) rk[r - 1].cut_ns = UINT64_MAX;
        const uint64_t cut = rk[r - 1].cut_ns;
        const double t = c->peer_timeout_s;
        if (cut == 0) continue;
        if (cut != UINT64_MAX && (double)cut / 1e9 > t / 2 && (double)cut / 1e9 < t + 0.1)
            rc = eccl_scn_error(file, 0, "rank %d is cut off from the master for %.3fs: between "
                           "peer_timeout/2 (%.3fs) and peer_timeout + 100ms (%.3fs) whether it "
                           "is dropped depends on heartbeat phase", r, (double)cut / 1e9,
                           t / 2, t + 0.1);
    }
out:
    free(ord);
    free(u.l);
    free(u.off);
    free(since);
    free(reach);
    return rc;
}

/* Expected roles (from the host plan and the cuts), the timed faults in
 * firing order, and expect_survivors unless given. 0, or -1 after printing
 * why. */
static int plan_roles(const char *file, eccl_scenario *c, sim *s)
{
    s->order = calloc((size_t)c->nfaults + 1, sizeof *s->order);
    if (!s->order) return eccl_scn_error(file, 0, "out of memory");
    for (int i = 0; i < c->nfaults; i++) {
        const eccl_scn_fault *f = &c->faults[i];
        rank_state *r = f->rank > 0 ? &s->rk[f->rank - 1] : NULL;
        if (f->kind == F_JOIN) {
            r->late = 1;
            r->arrive_ns = f->at_ns;
            continue;
        }
        if (f->kind == F_KILL && f->at_iter >= 0) {
            r->kill_iter = f->at_iter;
            continue;
        }
        if (f->kind == F_HOST_ON) {
            int first, last;
            eccl_scn_host_ranks(c, eccl_scn_rank_host(c, f->rank), &first, &last);
            for (int q = first; q <= last; q++) s->rk[q - 1].nstarts++;
        }
        s->order[s->norder++] = i;
    }
    qsort_r(s->order, (size_t)s->norder, sizeof *s->order, order_cmp, c);
    if (analyse_cuts(file, c, s->flinks, s->rk)) return -1;
    /* A rank's last host event says whether its host ends on. */
    int expected = 0;
    for (int i = 0; i < c->ranks; i++) {
        rank_state *r = &s->rk[i];
        int off = r->kill_iter >= 0, host_events = r->late || off;
        for (int k = 0; k < s->norder; k++) {
            const eccl_scn_fault *f = &c->faults[s->order[k]];
            if (f->rank != r->idx &&
                !(f->rank > 0 && eccl_scn_host_wide(f->kind) && eccl_scn_rank_host(c, f->rank) == eccl_scn_rank_host(c, r->idx)))
                continue;
            host_events = 1;
            off = f->kind == F_KILL || f->kind == F_HOST_OFF;
        }
        const double cut_s = r->cut_ns == UINT64_MAX ? 1e300 : (double)r->cut_ns / 1e9;
        const int dropped = cut_s >= c->peer_timeout_s + 0.1;
        if (dropped && host_events)
            return eccl_scn_error(file, 0, "rank %d is both cut off by link faults and the subject "
                             "of host events: give it one or the other", r->idx);
        r->role = off ? ROLE_KILLED : dropped ? ROLE_DROPPED
                  : (r->late || r->nstarts > 1) ? ROLE_JOINER : ROLE_SURVIVOR;
        expected += r->role == ROLE_SURVIVOR || r->role == ROLE_JOINER;
    }
    if (c->expect_survivors < 0) c->expect_survivors = expected;
    return 0;
}

/* ---- outputs ------------------------------------------------------------- */


/* The timeline plot draws a row per rank: past PLOT_RANKS_MAX ranks, more
 * rows than the picture has pixels. gnuplot then spent as long drawing
 * them as a tenth of the simulation (2.4 s of user time at 10k ranks,
 * reading 80,000 events five times over; some 25 s at 96K). So above it the
 * plot reads plot.tsv: the events of every stride-th rank, and the marks
 * the plot draws for any rank (failed all-reduces, kills, host changes)
 * whatever its rank. */
#define PLOT_RANKS_MAX 1000

static int plot_stride(const eccl_scenario *c)
{
    return c->ranks > PLOT_RANKS_MAX ? (c->ranks + PLOT_RANKS_MAX - 1) / PLOT_RANKS_MAX : 1;
}

static int plot_keeps(const event_row *e, int stride)
{
    if (stride <= 1 || e->rank % stride == 0) return 1;
    static const char *const marks[] = {"peer_lost", "timeout", "too_few_peers",
                                        "killed", "host_off", "host_on"};
    for (size_t i = 0; i < sizeof marks / sizeof *marks; i++)
        if (!strcmp(e->event, marks[i])) return 1;
    return 0;
}

static int write_event_rows(const sim *s, const char *dir, const char *name, int stride)
{
    FILE *f = eccl_results_open(dir, name);
    if (!f) return -1;
    fputs("time_s\trank\tevent\titer\tworld\tms\thash\n", f);
    for (size_t i = 0; i < s->nev; i++) {
        const event_row *e = &s->ev[i];
        if (!plot_keeps(e, stride)) continue;
        char t[32], it[16] = "-", wo[16] = "-";
        eccl_results_fmt_time(t, sizeof t, e->t_ns);
        if (e->iter >= 0) snprintf(it, sizeof it, "%d", e->iter);
        if (e->world >= 0) snprintf(wo, sizeof wo, "%d", e->world);
        fprintf(f, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", t, e->rank, e->event, it, wo, e->ms,
                e->hash);
    }
    return fclose(f) == 0 ? 0 : -1;
}

static int write_events(const sim *s, const char *dir)
{
    return write_event_rows(s, dir, "events.tsv", 1);
}

static int write_plot_script(const sim *s, const eccl_scenario *c, const char *dir)
{
    const int stride = plot_stride(c);
    const char *data = stride > 1 ? "plot.tsv" : "events.tsv";
    if (stride > 1 && write_event_rows(s, dir, data, stride)) return -1;
    char every[64] = "";
    if (stride > 1) snprintf(every, sizeof every, ", every %d-th rank drawn", stride);
    FILE *f = eccl_results_open(dir, "plot.gp");
    if (!f) return -1;
    fprintf(f,
            "# Generated by eccl-sim for scenario %s: one row per rank, simulated time\n"
            "# across. Run in this directory: gnuplot plot.gp  (reads %s)\n"
            "set terminal pngcairo size 1000,%d font \",10\"\n"
            "set output \"plot.png\"\n"
            "set datafile separator \"\\t\"\n"
            "set title \"%s: %d ranks x %d iterations of %ld f32 (all-reduce timeline%s)\"\n"
            "set xlabel \"simulated time (ms)\"\n"
            "set ylabel \"rank\"\n"
            "set yrange [0.5:%d.5]\n"
            "%s"
            "set grid xtics\n"
            "set key outside bottom center horizontal\n"
            "set style arrow 1 nohead lw 6 lc rgb \"#2a9d3f\"\n"
            "set style arrow 2 nohead lw 6 lc rgb \"#d62728\"\n"
            "ok(e) = e eq \"ok\"\n"
            "failed(e) = e eq \"peer_lost\" || e eq \"timeout\" || e eq \"too_few_peers\"\n"
            "# Each all-reduce ends at time_s after taking ms: a bar from its start to its end.\n"
            "plot \"%s\" skip 1 using (ok(strcol(3)) ? $1*1000 - $6 : NaN):2:6:(0) \\\n"
            "       with vectors arrowstyle 1 title \"all-reduce ok\", \\\n"
            "     \"\" skip 1 using (failed(strcol(3)) ? $1*1000 - $6 : NaN):2:6:(0) \\\n"
            "       with vectors arrowstyle 2 title \"all-reduce failed (peer lost)\", \\\n"
            "     \"\" skip 1 using (strcol(3) eq \"killed\" || strcol(3) eq \"host_off\" ? "
            "$1*1000 : NaN):2 \\\n"
            "       with points pt 2 ps 3 lw 3 lc rgb \"black\" title \"host off (kill, "
            "host_off)\", \\\n"
            "     \"\" skip 1 using (strcol(3) eq \"host_on\" ? $1*1000 : NaN):2 \\\n"
            "       with points pt 8 ps 2 lw 2 lc rgb \"#1f5fbf\" title \"host on (new worker)\", \\\n"
            "     \"\" skip 1 using (strcol(3) eq \"exit\" ? $1*1000 : NaN):2 \\\n"
            "       with points pt 7 ps 1.2 lc rgb \"#1f5fbf\" title \"worker exit\"\n",
            c->name, data, 200 + 40 * (c->ranks < 40 ? c->ranks : 40), c->name, c->ranks,
            c->iters, c->count, every, c->ranks,
            /* a label a rank, as long as there is room for one */
            stride > 1 ? "set ytics\n" : "set ytics 1\n", data);
    return fclose(f) == 0 ? 0 : -1;
}


/* Past this many ranks a finished run exits without tearing its world down
 * (unless ECCL_SIM_TEARDOWN is set, e.g. for a leak check): freeing every
 * outbox, message, conn and actor, then SimGrid's own teardown of the
 * actors and their stacks, took 9.5 s of a 110 s 10k flow run (load 6) and
 * 5.5% of a 32k run's samples, for memory the process's end returns anyway.
 * The CI scenarios (2k ranks and fewer) still tear down, so leaks there stay
 * visible to valgrind; sim_scenario_scale10k runs this path. */
#define FAST_EXIT_RANKS 4096

/* Everything a run holds, once its summary is out. */
static void sim_free(sim *s, eccl_scenario *cfg)
{
    eccl_sg_world_destroy(s->w);
    free(s->rk);
    free(s->oks_at);
    free(s->ref_hash);
    free(s->flinks);
    free(s->order);
    free(s->ev);
    free(s->relay_addr);
    free(s->relay_pid);
    free(s->relay_args);
    free(s);
    eccl_scn_free(cfg);
    fflush(stdout);
}


/* ---- workload = diloco: seeded churn, judged by tools/churn_check.c ------- */

static void dl_rank_main(int argc, char **argv);

static void dl_start_worker(sim *s, rank_state *r, uint64_t at_ns)
{
    r->lives++;
    r->running = 1;
    r->returned = 0;
    r->status = 0;
    r->exit_status = -1;
    r->arrive_ns = at_ns;
    r->life = s->dl_lives++;
    s->dl_live++;
    r->pid = start_actor(s->w, r->name, r->host, dl_rank_main, r);
}

static void dl_worker_ended(sim *s, rank_state *r)
{
    r->running = 0;
    s->dl_live--;
}

/* A crash of the rank's process (with one rank per host: of its host). */
static void dl_kill(sim *s, rank_state *r)
{
    if (s->cfg->ranks_per_host == 1) eccl_sg_world_kill_host(s->w, r->host);
    else eccl_sg_world_kill_process(s->w, r->pid);
    r->killed++;
    s->dl_kills++;
    dl_worker_ended(s, r);
    add_event(s, r->idx, "killed", -1, -1, NULL, NULL);
}

/* A new worker where one was killed (its host back on first). */
static void dl_respawn(sim *s, rank_state *r)
{
    if (s->cfg->ranks_per_host == 1 && eccl_sg_world_host_on(s->w, r->host) != ECCL_OK) s->oom = 1;
    add_event(s, r->idx, "host_on", -1, -1, NULL, NULL);
    s->dl_spawns++;
    dl_start_worker(s, r, eccl_sg_now_ns());
}

/* May rank r be killed now: a worker holding the state may go only while
 * two other holders stay (with none left the state is gone by definition);
 * with corrupt_at, rank 1's first worker lives until it has corrupted. */
static int dl_victim_ok(const sim *s, const rank_state *r, int holders)
{
    if (!r->running) return 0;
    if (s->cfg->corrupt_at && r->idx == 1 && r->lives == 1 &&
        (r->last_rev == UINT64_MAX || r->last_rev < s->cfg->corrupt_at))
        return 0;
    return !churn_check_holds_state(&s->chk, r->life) || holders >= 3;
}

/* Every interval (seeded, in [lo, hi]) until `until`: kill a random worker
 * (while more than min are alive) or start one on a random free rank
 * (while fewer than max are alive), a coin deciding when both are allowed.
 * Decisions read the simulation's state at seeded simulated times: the
 * same seed gives the same run. */
static void churn_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sim *s = sg_actor_self_get_data();
    const eccl_scenario *c = s->cfg;
    uint64_t rng = c->churn_have_seed ? c->churn_seed : c->seed ^ 0x636875726eull;
    uint64_t t = 0;
    for (;;) {
        t += c->churn_lo_ns + eccl_scn_prng_below(&rng, c->churn_hi_ns - c->churn_lo_ns + 1);
        if (t >= c->churn_until_ns) break;
        sg_actor_sleep_until((double)t / 1e9);
        int alive = 0, holders = 0, cand = 0, free_ranks = 0;
        for (int i = 0; i < c->ranks; i++) {
            const rank_state *r = &s->rk[i];
            if (!r->running) {
                free_ranks++;
                continue;
            }
            alive++;
            holders += churn_check_holds_state(&s->chk, r->life);
        }
        for (int i = 0; i < c->ranks; i++) cand += dl_victim_ok(s, &s->rk[i], holders);
        const int can_kill = alive > c->churn_min && cand > 0;
        const int can_spawn = alive < c->churn_max && free_ranks > 0;
        const int do_kill = can_kill && (!can_spawn || (eccl_scn_prng_next(&rng) & 1));
        if (do_kill) {
            uint64_t pick = eccl_scn_prng_below(&rng, (uint64_t)cand);
            for (int i = 0; i < c->ranks; i++) {
                rank_state *r = &s->rk[i];
                if (!dl_victim_ok(s, r, holders) || pick-- > 0) continue;
                eccl_sg_printf("eccl-sim", "churn: kill rank=%d (%s); %d alive", r->idx,
                               churn_check_holds_state(&s->chk, r->life) ? "holder" : "newcomer",
                               alive - 1);
                dl_kill(s, r);
                break;
            }
        } else if (can_spawn) {
            uint64_t pick = eccl_scn_prng_below(&rng, (uint64_t)free_ranks);
            for (int i = 0; i < c->ranks; i++) {
                rank_state *r = &s->rk[i];
                if (r->running || pick-- > 0) continue;
                eccl_sg_printf("eccl-sim", "churn: start rank=%d; %d alive", r->idx, alive + 1);
                dl_respawn(s, r);
                break;
            }
        }
    }
    s->churn_done = 1;
}

/* The loop's lines: to the checker (simulated time) and to events.tsv. */
static void dl_print(void *ctx, int to_stderr, const char *line)
{
    rank_state *r = ctx;
    sim *s = r->s;
    if (to_stderr || s->verbose) eccl_sg_printf(r->name, "%s%s", to_stderr ? "stderr: " : "", line);
    if (to_stderr) return;
    const double t = (double)eccl_sg_now_ns() / 1e9;
    churn_check_line(&s->chk, r->life, line, t);
    char event[16] = "", hash[24] = "", v[32];
    if (sscanf(line, "event=%15[a-z_]", event) != 1) return;
    int world = -1, rev = -1;
    if (churn_field(line, "world", v, sizeof v)) world = atoi(v);
    if (churn_field(line, "revision", v, sizeof v)) {
        uint64_t x = strtoull(v, NULL, 10);
        rev = x > INT_MAX ? INT_MAX : (int)x;
        if (!strcmp(event, "rev")) r->last_rev = x;
    }
    churn_field(line, "hash", hash, sizeof hash);
    if (!strcmp(event, "exit")) field_int(line, " status=", &r->exit_status);
    if (!strcmp(event, "rev") || !strcmp(event, "joined") || !strcmp(event, "retry") ||
        !strcmp(event, "corrupt") || !strcmp(event, "error") || !strcmp(event, "gave_up") ||
        !strcmp(event, "exit") || !strcmp(event, "connected"))
        add_event(s, r->idx, event, rev, world, NULL, hash[0] ? hash : NULL);
}

static void dl_rank_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    rank_state *r = sg_actor_self_get_data();
    sim *s = r->s;
    const eccl_scenario *c = s->cfg;
    if (r->arrive_ns > eccl_sg_now_ns()) sg_actor_sleep_until((double)r->arrive_ns / 1e9);
    eccl_worker_sg sim_launch;
    eccl_worker_sg_init(&sim_launch, s->w, dl_print, r);
    eccl_diloco_options o;
    eccl_diloco_options_init(&o);
    char master[2 * ECCL_ADDR_MAX + 1];
    rank_master(s, r, master, sizeof master);
    o.master = master;
    o.count = (size_t)c->count;
    o.step_ms = (int)llround(c->step_s * 1e3);
    o.peer_timeout_ms = (uint32_t)llround(c->peer_timeout_s * 1e3);
    o.stop_after_ms = c->duration_s * 1e3;
    if (r->idx == 1 && r->lives == 1) o.corrupt_at = c->corrupt_at;
    r->status = eccl_diloco_run(&sim_launch.launch, &o);
    r->returned = 1;
    if (r->status != 0) s->dl_bad_exits++;
    dl_worker_ended(s, r);
}

static int dl_write_plot(const eccl_scenario *c, const char *dir)
{
    FILE *f = eccl_results_open(dir, "plot.gp");
    if (!f) return -1;
    fprintf(f,
            "# Generated by eccl-sim for scenario %s (workload = diloco): revisions over\n"
            "# simulated time, kills and starts. Run in this directory: gnuplot plot.gp\n"
            "set terminal pngcairo size 1000,500 font \",10\"\n"
            "set output \"plot.png\"\n"
            "set datafile separator \"\\t\"\n"
            "set title \"%s: %d ranks, DiLoCo loop of %ld f32 under churn\"\n"
            "set xlabel \"simulated time (s)\"\n"
            "set ylabel \"revision\"\n"
            "set y2label \"rank\"\n"
            "set y2tics\n"
            "set key outside bottom center horizontal\n"
            "plot \"events.tsv\" skip 1 using (strcol(3) eq \"rev\" ? $1 : NaN):4 with points pt 7 "
            "ps 0.3 lc rgb \"#2a9d3f\" title \"revision reported\", \\\n"
            "     \"\" skip 1 using (strcol(3) eq \"killed\" ? $1 : NaN):2 axes x1y2 with points "
            "pt 2 ps 1.5 lc rgb \"black\" title \"kill (rank)\", \\\n"
            "     \"\" skip 1 using (strcol(3) eq \"host_on\" ? $1 : NaN):2 axes x1y2 with points "
            "pt 8 ps 1.5 lc rgb \"#1f5fbf\" title \"start (rank)\"\n",
            c->name, c->name, c->ranks, c->count);
    return fclose(f) == 0 ? 0 : -1;
}

/* Runs the diloco workload on the loaded platform and judges it; returns
 * the exit status. */
/* transport = ibv: which transport and how many RDMA writes landed (a
 * run whose payloads all stayed in the streams shows 0). Only then, so
 * other scenarios' summaries stay as they were. */
static void write_transport(FILE *sf, const sim *s, const eccl_scenario *cfg)
{
    if (!cfg->ibv) return;
    fprintf(sf, "transport\tibv\nrdma_writes\t%llu\n",
            (unsigned long long)eccl_sg_world_rdma_writes(s->w));
}

/* Rank idx (1-based) of every workload: its names, and its arrival,
 * staggered by `stagger` plus seeded jitter drawn from *rng (the
 * scenario's one stream, rank by rank), so that the same seed gives every
 * workload of a scenario the same start-up. */
static void rank_start(sim *s, const eccl_scenario *cfg, rank_state *r, int idx, uint64_t *rng)
{
    r->s = s;
    r->idx = idx;
    snprintf(r->name, sizeof r->name, "rank%d", idx);
    snprintf(r->host, sizeof r->host, "node-%d", eccl_scn_rank_host(cfg, idx));
    r->arrive_ns = (uint64_t)llround(cfg->stagger_s * 1e9) * (uint64_t)idx;
    uint64_t jitter_ns = (uint64_t)llround(cfg->jitter_s * 1e9);
    if (jitter_ns) r->arrive_ns += eccl_scn_prng_below(rng, jitter_ns);
}

static int run_diloco(sim *s, eccl_scenario *cfg, const char *outdir)
{
    if (churn_check_init(&s->chk, 1u << 16, 0) != 0) return 1;
    uint64_t rng = cfg->seed;
    for (int i = 0; i < cfg->ranks; i++) {
        rank_state *r = &s->rk[i];
        rank_start(s, cfg, r, i + 1, &rng);
        r->kill_iter = -1;
        r->last_rev = UINT64_MAX;
    }
    char churn[160] = "none";
    if (cfg->have_churn)
        snprintf(churn, sizeof churn, "interval=%.3f..%.3fs,min=%d,max=%d,until=%.3fs",
                 (double)cfg->churn_lo_ns / 1e9, (double)cfg->churn_hi_ns / 1e9, cfg->churn_min,
                 cfg->churn_max, (double)cfg->churn_until_ns / 1e9);
    eccl_sg_printf("eccl-sim", "scenario=%s seed=%llu platform=%s hosts=%d ranks=%d workload=diloco "
                   "count=%ld duration=%.3fs churn=%s out=%s", cfg->name,
                   (unsigned long long)cfg->seed, cfg->platform, cfg->hosts, cfg->ranks,
                   cfg->count, cfg->duration_s, churn, outdir);
    s->churn_done = !cfg->have_churn;
    start_actor(s->w, "master", "node-0", master_main, s);
    if (start_relays(s) != 0) {
        fprintf(stderr, "eccl-sim: out of memory for %d relays\n", cfg->relays);
        return 2;
    }
    if (cfg->have_churn) start_actor(s->w, "churn", "node-0", churn_main, s);
    for (int i = 0; i < cfg->ranks; i++) dl_start_worker(s, &s->rk[i], s->rk[i].arrive_ns);
    simgrid_run();
    const uint64_t end_ns = eccl_sg_now_ns();
    churn_check_finish(&s->chk, (double)cfg->duration_s);

    /* A worker's last life either was killed or stopped with status 0. */
    int failures = 0, bad_ranks = 0;
    FILE *rf = eccl_results_open(outdir, "ranks.tsv");
    if (rf) fputs("rank\thost\tworkers\tkilled\treturned\tstatus\tlast_revision\tcheck\n", rf);
    for (int i = 0; i < cfg->ranks; i++) {
        const rank_state *r = &s->rk[i];
        const int ok = r->lives == r->killed || (r->returned && r->status == 0 && r->exit_status == 0);
        bad_ranks += !ok;
        char last[24] = "-";
        if (r->last_rev != UINT64_MAX) snprintf(last, sizeof last, "%llu", (unsigned long long)r->last_rev);
        if (rf)
            fprintf(rf, "%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", r->idx, r->host, r->lives, r->killed,
                    r->returned, r->status, last, ok ? "pass" : "FAIL");
        if (!ok)
            eccl_sg_printf("eccl-sim", "FAIL rank=%d workers=%d killed=%d returned=%d status=%d",
                           r->idx, r->lives, r->killed, r->returned, r->status);
    }
    const churn_check *k = &s->chk;
    const char *why = NULL;
    if (s->oom) why = "internal";
    else if (k->parity_breaks) why = "parity";
    else if (k->corrupt) why = "corruption";
    else if (k->order_breaks) why = "order";
    else if (k->errors || s->dl_bad_exits || bad_ranks) why = "worker_failed";
    else if (k->max_stall_s > cfg->max_stall_s) why = "stall";
    else if (k->revisions == 0) why = "no_progress";
    else if (cfg->have_churn && s->dl_kills == 0) why = "no_kills";
    failures += why != NULL;
    if (why && k->first_problem[0]) eccl_sg_printf("eccl-sim", "first problem: %s", k->first_problem);

    char sim_time[32], stall[32];
    eccl_results_fmt_time(sim_time, sizeof sim_time, end_ns);
    eccl_results_fmt_time(stall, sizeof stall, (uint64_t)llround(k->max_stall_s * 1e9));
    int io_err = rf ? (fclose(rf) != 0) : 1;
    io_err |= write_events(s, outdir) != 0;
    FILE *sf = eccl_results_open(outdir, "summary.tsv");
    if (sf) {
        fprintf(sf, "key\tvalue\n");
        fprintf(sf, "scenario\t%s\nseed\t%llu\nplatform\t%s\nhosts\t%d\nranks\t%d\ncount\t%ld\n"
                    "workload\tdiloco\nduration_s\t%.9f\nchurn\t%s\nrevisions\t%llu\n"
                    "max_revision\t%llu\nparity_breaks\t%llu\ncorrupt\t%llu\nerrors\t%llu\n"
                    "bad_ranks\t%d\nmax_stall_s\t%s\nkills\t%d\nspawned\t%d\njoins\t%llu\n"
                    "retries\t%llu\nchecks\t%s\nreason\t%s\nevents\t%zu\nsim_time_s\t%s\n",
                cfg->name, (unsigned long long)cfg->seed, cfg->platform, cfg->hosts, cfg->ranks,
                cfg->count, cfg->duration_s, churn, (unsigned long long)k->revisions,
                (unsigned long long)(k->max_rev == UINT64_MAX ? 0 : k->max_rev),
                (unsigned long long)k->parity_breaks, (unsigned long long)k->corrupt,
                (unsigned long long)k->errors, bad_ranks, stall, s->dl_kills, s->dl_spawns,
                (unsigned long long)k->joins, (unsigned long long)k->retries,
                failures ? "fail" : "pass", why ? why : "-", s->nev, sim_time);
        write_transport(sf, s, cfg);
        io_err |= fclose(sf) != 0;
    } else {
        io_err = 1;
    }
    io_err |= dl_write_plot(cfg, outdir) != 0;
    const char *plot = io_err ? "none" : eccl_results_plot_png(outdir, &io_err);
    printf("scenario=%s seed=%llu ranks=%d workload=diloco checks=%s%s%s revisions=%llu "
           "max_revision=%llu parity_breaks=%llu corrupt=%llu errors=%llu max_stall_s=%s "
           "kills=%d joins=%llu spawned=%d sim_time_s=%s events=%zu out=%s plot=%s\n",
           cfg->name, (unsigned long long)cfg->seed, cfg->ranks, failures ? "fail" : "pass",
           why ? " reason=" : "", why ? why : "", (unsigned long long)k->revisions,
           (unsigned long long)(k->max_rev == UINT64_MAX ? 0 : k->max_rev),
           (unsigned long long)k->parity_breaks, (unsigned long long)k->corrupt,
           (unsigned long long)k->errors, stall, s->dl_kills, (unsigned long long)k->joins,
           s->dl_spawns, sim_time, s->nev, outdir, plot);
    churn_check_free(&s->chk);
    return failures == 0 && !io_err ? 0 : 1;
}

/* ---- workload = nccl2_bootstrap: the NCCL 2.x baseline ---------------------
 * The root (bootstrapRoot) on node-0, where eccl's master would be, on an env
 * charged per message as the master's; each rank (bootstrapInit and its ring
 * all-gather) on its host, arriving as the worker's ranks do. Both run
 * tools/sim_nccl2.c over net_sg. The checker: the root served everyone, and
 * every rank's table is complete and correct, entry by entry as it lands (entry
 * j is the address rank j bound; held per rank as its last slot only, so a
 * 96k-rank run needs no N x N table). NCCL 2.x has no fault tolerance: a rank
 * that dies fails the bootstrap (its neighbours see the stream end and give up,
 * the rest time out at nccl2_timeout). */

typedef struct n2_rank {
    uint64_t sent_ns, next_ns, ring_ns, done_ns; /* phases reached; 0: not */
    uint32_t entries, bad_entries, order_bad;
    int refused;
    int returned, failed, killed;
    char addr[ECCL_NCCL2_ADDR_BYTES]; /* its peer listen address: the truth */
    char why[64];
} n2_rank;

typedef struct n2_run {
    sim *s;
    n2_rank *rk;
    uint64_t gathered_ns, scattered_ns;
    int root_returned, root_failed, root_refused;
    char root_why[96];
    int done, next_report; /* ranks with a complete table; the next tenth announced */
    eccl_nccl2_hooks hooks;
} n2_run;

static void n2_sleep(void *ctx, uint64_t ns)
{
    (void)ctx;
    sg_actor_sleep_for((double)ns / 1e9);
}

static void n2_listener_interest(void *ctx, eccl_env *env, eccl_listener *l, int on)
{
    (void)ctx;
    eccl_sg_listener_set_interest(env, l, on);
}

static void n2_listening(void *ctx, int rank, const char *addr)
{
    n2_run *run = ctx;
    memcpy(run->rk[rank].addr, addr, ECCL_NCCL2_ADDR_BYTES);
}

static void n2_mark(void *ctx, int rank, int what)
{
    n2_run *run = ctx;
    sim *s = run->s;
    const uint64_t now = eccl_sg_now_ns();
    if (rank < 0) {
        const int gathered = what == ECCL_NCCL2_GATHERED;
        if (gathered) run->gathered_ns = now;
        else run->scattered_ns = now;
        eccl_sg_printf("eccl-sim", "nccl2 root: %s (%d ranks)",
                       gathered ? "every rank's info in" : "every rank told its ring successor",
                       s->cfg->ranks);
        add_event(s, 0, gathered ? "root_gathered" : "root_scattered", -1, -1, NULL, NULL);
        return;
    }
    n2_rank *x = &run->rk[rank];
    static const char *const names[] = {"sent", "next", "ring", "done"};
    uint64_t *at[] = {&x->sent_ns, &x->next_ns, &x->ring_ns, &x->done_ns};
    *at[what] = now;
    add_event(s, rank + 1, names[what], -1, -1, NULL, NULL);
    if (what != ECCL_NCCL2_DONE) return;
    /* Progress: each tenth of the ranks with a complete table. */
    run->done++;
    while (run->next_report <= 10 && run->done * 10 >= run->next_report * s->cfg->ranks) {
        if (run->next_report > 0)
            eccl_sg_printf("eccl-sim", "progress ranks_done=%d/%d", run->done, s->cfg->ranks);
        run->next_report++;
    }
}

static void n2_entry(void *ctx, int rank, int step, int slot, const char *addr)
{
    n2_run *run = ctx;
    const int n = run->s->cfg->ranks;
    n2_rank *x = &run->rk[rank];
    x->entries++;
    /* The ring's order: own first, then rank - step - 1 at each step. */
    const int want = step < 0 ? rank : (rank - step - 1 + n) % n;
    if (slot != want || slot < 0 || slot >= n) {
        x->order_bad++;
        return;
    }
    if (memcmp(addr, run->rk[slot].addr, ECCL_NCCL2_ADDR_BYTES) != 0) x->bad_entries++;
}

static void n2_root_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    n2_run *run = sg_actor_self_get_data();
    sim *s = run->s;
    const eccl_scenario *c = s->cfg;
    eccl_env *env = NULL;
    eccl_nccl2_result res;
    memset(&res, 0, sizeof res);
    const eccl_nccl2_options o = {.root_addr = s->master_addr, .nranks = c->ranks,
                                  .deadline_ns = c->nccl2_timeout_ns};
    int rc = -1;
    if (eccl_sg_env_create_master(s->w, "nccl2-root", &env) != ECCL_OK)
        snprintf(res.why, sizeof res.why, "root: cannot create its env");
    else
        rc = eccl_nccl2_root_run(env, &o, &run->hooks, &res);
    eccl_sg_env_destroy(env);
    run->root_returned = 1;
    run->root_failed = rc != 0;
    run->root_refused = res.refused;
    snprintf(run->root_why, sizeof run->root_why, "%s", res.why);
    if (rc != 0) {
        eccl_sg_printf("eccl-sim", "nccl2 root failed: %s", res.why);
        add_event(s, 0, "root_failed", -1, -1, NULL, NULL);
    }
}

static void n2_rank_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    rank_state *r = sg_actor_self_get_data();
    sim *s = r->s;
    n2_run *run = s->n2;
    const eccl_scenario *c = s->cfg;
    n2_rank *x = &run->rk[r->idx - 1];
    if (r->arrive_ns > eccl_sg_now_ns()) sg_actor_sleep_until((double)r->arrive_ns / 1e9);
    eccl_env *env = NULL;
    eccl_nccl2_result res;
    memset(&res, 0, sizeof res);
    const eccl_nccl2_options o = {.root_addr = s->master_addr, .nranks = c->ranks,
                                  .rank = r->idx - 1, .host = r->host,
                                  .stagger_ns = c->nccl2_stagger_ns,
                                  .deadline_ns = c->nccl2_timeout_ns, .replay = c->nccl2_replay,
                                  .corrupt = r->idx == c->nccl2_corrupt};
    int rc = -1;
    if (eccl_sg_env_create(s->w, r->name, &env) != ECCL_OK)
        snprintf(res.why, sizeof res.why, "cannot create its env");
    else
        rc = eccl_nccl2_rank_run(env, &o, &run->hooks, &res);
    eccl_sg_env_destroy(env);
    x->returned = 1;
    x->failed = rc != 0;
    x->refused = res.refused;
    snprintf(x->why, sizeof x->why, "%.63s", res.why);
    if (rc != 0) {
        if (s->verbose) eccl_sg_printf(r->name, "nccl2 bootstrap failed: %s", res.why);
        add_event(s, r->idx, "failed", -1, -1, NULL, NULL);
    }
}

/* The fault plan: crashes (kill) and silent host failures (host_off), in
 * time order, then file order. */
static void n2_plan_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sim *s = sg_actor_self_get_data();
    const eccl_scenario *c = s->cfg;
    for (int k = 0; k < s->norder; k++) {
        const eccl_scn_fault *f = &c->faults[s->order[k]];
        sg_actor_sleep_until((double)f->at_ns / 1e9);
        rank_state *r = &s->rk[f->rank - 1];
        int first = f->rank, last = f->rank;
        if (f->kind == F_HOST_OFF) {
            eccl_scn_host_ranks(c, eccl_scn_rank_host(c, f->rank), &first, &last);
            eccl_sg_printf("eccl-sim", "host_off rank=%d host=%s (silent)", r->idx, r->host);
            eccl_sg_world_host_off(s->w, r->host);
        } else if (c->ranks_per_host == 1) {
            eccl_sg_printf("eccl-sim", "kill rank=%d host=%s", r->idx, r->host);
            eccl_sg_world_kill_host(s->w, r->host);
        } else {
            eccl_sg_printf("eccl-sim", "kill rank=%d host=%s (its process)", r->idx, r->host);
            if (!s->n2->rk[r->idx - 1].returned) eccl_sg_world_kill_process(s->w, r->pid);
        }
        for (int q = first; q <= last; q++) {
            n2_rank *x = &s->n2->rk[q - 1];
            if (x->returned || x->killed) continue; /* over already, or down */
            x->killed = 1;
            add_event(s, q, f->kind == F_HOST_OFF ? "host_off" : "killed", -1, -1, NULL, NULL);
        }
    }
}

/* Events in time order, ties as they were recorded: the replayed "done"
 * rows are appended after the run. */
static int n2_event_cmp(const void *a, const void *b)
{
    const event_row *x = a, *y = b;
    if (x->t_ns != y->t_ns) return x->t_ns < y->t_ns ? -1 : 1;
    /* iter holds the row's recording order here (then reset): stable. */
    return x->iter < y->iter ? -1 : x->iter > y->iter;
}

static int n2_write_plot(const eccl_scenario *c, const char *dir)
{
    FILE *f = eccl_results_open(dir, "plot.gp");
    if (!f) return -1;
    fprintf(f,
            "# Generated by eccl-sim for scenario %s (workload = nccl2_bootstrap): when\n"
            "# each rank reached each phase of NCCL 2.x's bootstrap. Run in this directory:\n"
            "# gnuplot plot.gp  (reads ranks.tsv)\n"
            "set terminal pngcairo size 1000,600 font \",10\"\n"
            "set output \"plot.png\"\n"
            "set datafile separator \"\\t\"\n"
            "set datafile missing \"-\"\n"
            "set title \"%s: NCCL 2.x bootstrap of %d ranks (all-gather: %s)\"\n"
            "set xlabel \"rank\"\n"
            "set ylabel \"simulated time (s)\"\n"
            "set key outside bottom center horizontal\n"
            "plot \"ranks.tsv\" skip 1 using 1:4 with dots lc rgb \"#1f5fbf\" title \"info sent to root\", \\\n"
            "     \"\" skip 1 using 1:5 with dots lc rgb \"#9467bd\" title \"successor from root\", \\\n"
            "     \"\" skip 1 using 1:6 with dots lc rgb \"#ff7f0e\" title \"ring formed\", \\\n"
            "     \"\" skip 1 using 1:7 with dots lc rgb \"#2a9d3f\" title \"table complete\"\n",
            c->name, c->name, c->ranks, c->nccl2_replay ? "replayed" : "messages");
    return fclose(f) == 0 ? 0 : -1;
}

static void n2_fmt(char *buf, size_t size, uint64_t ns)
{
    if (ns) eccl_results_fmt_time(buf, size, ns);
    else snprintf(buf, size, "-");
}

static int run_nccl2(sim *s, eccl_scenario *cfg, const char *outdir)
{
    const int n = cfg->ranks;
    n2_run *run = calloc(1, sizeof *run);
    int *order = calloc((size_t)cfg->nfaults + 1, sizeof *order);
    if (!run || !order || !(run->rk = calloc((size_t)n, sizeof *run->rk))) {
        fprintf(stderr, "eccl-sim: out of memory\n");
        if (run) free(run->rk);
        free(run);
        free(order);
        return 1;
    }
    run->s = s;
    run->hooks = (eccl_nccl2_hooks){.ctx = run, .sleep_ns = n2_sleep,
                                    .listener_interest = n2_listener_interest,
                                    .listening = n2_listening, .mark = n2_mark, .entry = n2_entry};
    s->n2 = run;
    /* The same arrivals as the worker's ranks: the same seed gives the
     * eccl twin of a scenario the same start-up. */
    uint64_t rng = cfg->seed;
    for (int i = 0; i < n; i++) rank_start(s, cfg, &s->rk[i], i + 1, &rng);
    for (int i = 0; i < cfg->nfaults; i++) order[i] = i;
    qsort_r(order, (size_t)cfg->nfaults, sizeof *order, order_cmp, cfg);
    s->order = order;
    s->norder = cfg->nfaults;
    char rph[32] = "";
    if (cfg->ranks_per_host > 1) snprintf(rph, sizeof rph, " ranks_per_host=%d", cfg->ranks_per_host);
    eccl_sg_printf("eccl-sim", "scenario=%s seed=%llu platform=%s hosts=%d ranks=%d%s "
                   "workload=nccl2_bootstrap allgather=%s root_stagger=%.6fs timeout=%.3fs "
                   "master_msg_cost=%.9fs faults=%d out=%s", cfg->name,
                   (unsigned long long)cfg->seed, cfg->platform, cfg->hosts, n, rph,
                   cfg->nccl2_replay ? "replay" : "messages", (double)cfg->nccl2_stagger_ns / 1e9,
                   (double)cfg->nccl2_timeout_ns / 1e9, cfg->master_msg_cost_s, cfg->nfaults,
                   outdir);
    start_actor(s->w, "nccl2-root", "node-0", n2_root_main, run);
    if (s->norder > 0) start_actor(s->w, "faults", "node-0", n2_plan_main, s);
    for (int i = 0; i < n; i++) s->rk[i].pid = start_actor(s->w, s->rk[i].name, s->rk[i].host, n2_rank_main, &s->rk[i]);
    simgrid_run();
    uint64_t end_ns = eccl_sg_now_ns();

    /* Replay: the all-gather's timing from when each rank's ring was up
     * and each hop's cost over the same network model (sim_nccl2.h). */
    int replayed = 0, all_ring = 1;
    for (int i = 0; i < n; i++) all_ring &= run->rk[i].ring_ns > 0 && !run->rk[i].failed &&
                                             !run->rk[i].killed && run->rk[i].returned;
    if (cfg->nccl2_replay && all_ring && !run->root_failed) {
        double *start = malloc((size_t)n * sizeof *start), *lat = malloc((size_t)n * sizeof *lat),
               *wire = malloc((size_t)n * sizeof *wire), *done = malloc((size_t)n * sizeof *done);
        int routes = start && lat && wire && done;
        for (int i = 0; routes && i < n; i++) {
            start[i] = (double)run->rk[i].ring_ns / 1e9;
            /* A slot message: NCCL's 4-byte length and its 28 bytes. */
            routes = eccl_sg_route_cost(s->rk[(i + n - 1) % n].host, s->rk[i].host,
                                        4 + ECCL_NCCL2_ADDR_BYTES, &lat[i], &wire[i]) == 0;
        }
        if (routes) {
            eccl_sg_printf("eccl-sim", "nccl2 all-gather: replaying %d ranks x %d steps", n, n - 1);
            if (eccl_nccl2_replay(n, start, lat, wire, done) == 0) {
                replayed = 1;
                for (int i = 0; i < n; i++) {
                    run->rk[i].done_ns = (uint64_t)llround(done[i] * 1e9);
                    add_event(s, i + 1, "done", -1, -1, NULL, NULL);
                    if (s->nev) s->ev[s->nev - 1].t_ns = run->rk[i].done_ns;
                    if (run->rk[i].done_ns > end_ns) end_ns = run->rk[i].done_ns;
                }
            }
        }
        free(start);
        free(lat);
        free(wire);
        free(done);
        if (!replayed) s->oom = 1;
    }
    if (s->oom) {
        fprintf(stderr, "eccl-sim: out of memory while running\n");
    }
    /* Events in time order (replayed rows land where they belong). */
    for (size_t i = 0; i < s->nev; i++) s->ev[i].iter = (int)i;
    qsort(s->ev, s->nev, sizeof *s->ev, n2_event_cmp);
    for (size_t i = 0; i < s->nev; i++) s->ev[i].iter = -1;

    /* ---- checks ---- */
    int failed = 0, killed = 0, incomplete = 0, refused = run->root_refused;
    uint64_t bad = 0, misordered = 0, entries = 0, boot_ns = 0, boot_min_ns = 0, ring_ns = 0;
    const char *why = NULL;
    char first_why[128] = "";
    FILE *rf = eccl_results_open(outdir, "ranks.tsv");
    if (rf)
        fputs("rank\thost\tarrive_s\tsent_s\tnext_s\tring_s\tdone_s\trefused\tentries\t"
              "bad_entries\tstatus\tcheck\n", rf);
    for (int i = 0; i < n; i++) {
        const n2_rank *x = &run->rk[i];
        const rank_state *r = &s->rk[i];
        refused += x->refused;
        bad += x->bad_entries;
        misordered += x->order_bad;
        entries += x->entries;
        killed += x->killed;
        /* Complete: every entry landed, each in the ring's order and each
         * the address its rank bound; with a replay, the ring was formed
         * (its entries are not moved). */
        const int table_ok = cfg->nccl2_replay
                                 ? replayed
                                 : x->entries == (uint32_t)n && !x->bad_entries && !x->order_bad;
        const int ok = x->returned && !x->failed && !x->killed && x->done_ns && table_ok;
        const char *status = x->killed     ? "killed"
                             : !x->returned ? "hung"
                             : x->failed    ? "failed"
                             : !table_ok    ? "bad_table"
                                            : "ok";
        if (!ok) {
            failed++;
            incomplete += x->returned && !x->failed && !table_ok;
            if (!first_why[0])
                snprintf(first_why, sizeof first_why, "rank %d: %s%s%s", r->idx, status,
                         x->why[0] ? ": " : "", x->why);
        }
        if (x->done_ns > boot_ns) boot_ns = x->done_ns;
        if (x->done_ns && (!boot_min_ns || x->done_ns < boot_min_ns)) boot_min_ns = x->done_ns;
        if (x->ring_ns > ring_ns) ring_ns = x->ring_ns;
        if (rf) {
            char t[5][32];
            eccl_results_fmt_time(t[0], sizeof t[0], r->arrive_ns);
            n2_fmt(t[1], sizeof t[1], x->sent_ns);
            n2_fmt(t[2], sizeof t[2], x->next_ns);
            n2_fmt(t[3], sizeof t[3], x->ring_ns);
            n2_fmt(t[4], sizeof t[4], x->done_ns);
            fprintf(rf, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%u\t%u\t%s\t%s\n", r->idx, r->host, t[0],
                    t[1], t[2], t[3], t[4], x->refused, x->entries, x->bad_entries + x->order_bad,
                    status, ok ? "pass" : "FAIL");
        }
    }
    if (s->oom) why = "internal";
    else if (killed) why = "killed";
    else if (!run->root_returned || run->root_failed) why = "root_failed";
    else if (bad || misordered) why = "bad_entries";
    else if (failed) why = "rank_failed";
    const int failures = why != NULL;
    if (failures) {
        eccl_sg_printf("eccl-sim", "FAIL nccl2 bootstrap: %s (%d of %d ranks failed their check)",
                       why, failed, n);
        if (run->root_why[0]) eccl_sg_printf("eccl-sim", "root: %s", run->root_why);
        if (first_why[0]) eccl_sg_printf("eccl-sim", "first: %s", first_why);
        if (bad || misordered)
            eccl_sg_printf("eccl-sim", "%llu table entries differ from the address their rank "
                           "bound, %llu out of the ring's order", (unsigned long long)bad,
                           (unsigned long long)misordered);
    }
    /* Only a bootstrap every rank finished has a time. */
    char boot[32] = "-", boot_min[32] = "-", gathered[32], scattered[32], ring[32], sim_time[32];
    if (!failures) {
        eccl_results_fmt_time(boot, sizeof boot, boot_ns);
        eccl_results_fmt_time(boot_min, sizeof boot_min, boot_min_ns);
    }
    n2_fmt(gathered, sizeof gathered, run->gathered_ns);
    n2_fmt(scattered, sizeof scattered, run->scattered_ns);
    n2_fmt(ring, sizeof ring, all_ring ? ring_ns : 0);
    eccl_results_fmt_time(sim_time, sizeof sim_time, end_ns);
    int io_err = rf ? (fclose(rf) != 0) : 1;
    io_err |= write_events(s, outdir) != 0;
    FILE *sf = eccl_results_open(outdir, "summary.tsv");
    if (sf) {
        char stag[32], tmo[32], cost[32];
        eccl_results_fmt_time(stag, sizeof stag, cfg->nccl2_stagger_ns);
        eccl_results_fmt_time(tmo, sizeof tmo, cfg->nccl2_timeout_ns);
        eccl_results_fmt_time(cost, sizeof cost, (uint64_t)llround(cfg->master_msg_cost_s * 1e9));
        fprintf(sf, "key\tvalue\n");
        fprintf(sf, "scenario\t%s\nseed\t%llu\nplatform\t%s\nhosts\t%d\nranks\t%d\n"
                    "ranks_per_host\t%d\nworkload\tnccl2_bootstrap\nallgather\t%s\n"
                    "root_stagger_s\t%s\ntimeout_s\t%s\nmaster_msg_cost_s\t%s\nchecks\t%s\n"
                    "reason\t%s\nbootstrap_s\t%s\nbootstrap_min_s\t%s\nroot_gathered_s\t%s\n"
                    "root_scattered_s\t%s\nring_formed_s\t%s\nrefused\t%d\nfailed_ranks\t%d\n"
                    "killed\t%d\nincomplete\t%d\nentries_checked\t%llu\nbad_entries\t%llu\n"
                    "events\t%zu\nsim_time_s\t%s\n",
                cfg->name, (unsigned long long)cfg->seed, cfg->platform, cfg->hosts, n,
                cfg->ranks_per_host, cfg->nccl2_replay ? "replay" : "messages", stag, tmo, cost,
                failures ? "fail" : "pass", why ? why : "-", boot, boot_min, gathered, scattered,
                ring, refused, failed, killed, incomplete, (unsigned long long)entries,
                (unsigned long long)(bad + misordered), s->nev, sim_time);
        io_err |= fclose(sf) != 0;
    } else {
        io_err = 1;
    }
    io_err |= n2_write_plot(cfg, outdir) != 0;
    const char *plot = io_err ? "none" : eccl_results_plot_png(outdir, &io_err);
    printf("scenario=%s seed=%llu ranks=%d workload=nccl2_bootstrap allgather=%s checks=%s%s%s "
           "bootstrap_s=%s root_gathered_s=%s root_scattered_s=%s ring_formed_s=%s refused=%d "
           "failed=%d killed=%d bad_entries=%llu sim_time_s=%s events=%zu out=%s plot=%s\n",
           cfg->name, (unsigned long long)cfg->seed, n, cfg->nccl2_replay ? "replay" : "messages",
           failures ? "fail" : "pass", why ? " reason=" : "", why ? why : "", boot, gathered,
           scattered, ring, refused, failed, killed, (unsigned long long)(bad + misordered),
           sim_time, s->nev, outdir, plot);
    free(run->rk);
    free(run);
    s->n2 = NULL;
    return failures == 0 && !io_err ? 0 : 1;
}

/* ---- workload = bench: eccl-bench's rows on the simulated platform -------
 *
 * Every rank runs tools/sim_bench.c's program (eccl-bench's calls, in its
 * order) as an actor on its host; the comm's rank 0 keeps the rows, printed
 * after the run in eccl-bench's format (stdout: `#` header lines, then one
 * row per size) and written to bench.tsv. Times are simulated, so the same
 * file and seed print the same bytes. */

typedef struct bench_rank {
    sim *s;
    rank_state *r;
    eccl_simbench_options o;
    eccl_simbench_result res;
    int status; /* eccl_simbench_rank_run's; 1 until it returns */
} bench_rank;

static eccl_result bench_comm_create(void *ctx, const eccl_comm_params *params, eccl_comm **out)
{
    bench_rank *b = ctx;
    eccl_comm_params p = *params;
    p.p2p_host = sg_host_self_get_name();
    return eccl_sg_comm_create_on(b->s->w, NULL, &p, out);
}

static uint64_t bench_now_ns(void *ctx)
{
    (void)ctx;
    return eccl_sg_now_ns();
}

static void bench_sleep_ns(void *ctx, uint64_t ns)
{
    (void)ctx;
    sg_actor_sleep_for((double)ns / 1e9);
}

static void bench_rank_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    bench_rank *b = sg_actor_self_get_data();
    sim *s = b->s;
    if (b->r->arrive_ns > eccl_sg_now_ns()) sg_actor_sleep_until((double)b->r->arrive_ns / 1e9);
    const eccl_simbench_hooks h = {.ctx = b, .comm_create = bench_comm_create, .now_ns = bench_now_ns,
                                   .sleep_ns = bench_sleep_ns};
    b->status = eccl_simbench_rank_run(&h, s->master_addr, &b->o, &b->res);
    if (b->status) /* stderr: stdout is the rows' */
        fprintf(stderr, "eccl-sim: %s (t=%.9f s): bench failed: %s\n", b->r->name,
                (double)eccl_sg_now_ns() / 1e9, b->res.why);
    s->done++; /* the master serves until every rank is through */
}

static void bench_print(FILE *f, const eccl_scenario *c, const bench_rank *b0, int tsv)
{
    eccl_simbench_print_columns(f, tsv);
    for (int i = 0; i < b0->res.nrows; i++)
        eccl_simbench_print_row(f, tsv, c->bench_coll, b0->res.nranks, &b0->res.rows[i]);
}

static int run_bench(sim *s, eccl_scenario *cfg, const char *outdir)
{
    bench_rank *br = calloc((size_t)cfg->ranks, sizeof *br);
    if (!br) {
        fprintf(stderr, "eccl-sim: out of memory\n");
        return 1;
    }
    if (s->verbose)
        eccl_sg_printf("eccl-sim", "scenario=%s seed=%llu platform=%s hosts=%d ranks=%d workload=bench coll=%s "
                       "algo=%s out=%s", cfg->name, (unsigned long long)cfg->seed, cfg->platform, cfg->hosts,
                       cfg->ranks, bench_coll_names[cfg->bench_coll], cfg->algo[0] ? cfg->algo : "-",
                       outdir);
    /* Arrivals as the worker workload's: staggered, plus seeded jitter. */
    uint64_t rng = cfg->seed;
    start_actor(s->w, "master", "node-0", master_main, s);
    for (int i = 0; i < cfg->ranks; i++) {
        rank_state *r = &s->rk[i];
        bench_rank *b = &br[i];
        rank_start(s, cfg, r, i + 1, &rng);
        *b = (bench_rank){.s = s, .r = r, .status = 1};
        b->o = (eccl_simbench_options){.coll = cfg->bench_coll, .minbytes = cfg->bench_minbytes,
                                       .maxbytes = cfg->bench_maxbytes,
                                       .stepfactor = (uint64_t)cfg->bench_stepfactor,
                                       .iters = (uint64_t)cfg->iters, .warmup = (uint64_t)cfg->bench_warmup,
                                       .world = cfg->ranks, .wait_ns = 30ull * 1000000000ull,
                                       .corrupt = r->idx == cfg->bench_corrupt};
        r->pid = start_actor(s->w, r->name, r->host, bench_rank_main, b);
    }
    simgrid_run();
    const uint64_t end_ns = eccl_sg_now_ns();

    /* The rows are the comm's rank 0's; every rank must have finished. */
    int failed = 0;
    const bench_rank *b0 = NULL;
    for (int i = 0; i < cfg->ranks; i++) {
        failed += br[i].status != 0;
        if (br[i].status == 0 && br[i].res.rank == 0) b0 = &br[i];
    }
    uint64_t wrong = b0 ? b0->res.wrong_total : 0;
    double busbw_sum = 0;
    for (int i = 0; b0 && i < b0->res.nrows; i++)
        busbw_sum += eccl_simbench_busbw(cfg->bench_coll, b0->res.nranks, &b0->res.rows[i]);
    char end[32];
    eccl_results_fmt_time(end, sizeof end, end_ns);
    printf("# eccl-sim bench: scenario %s seed %llu platform %s ranks %d ranks_per_host %d coll %s algo %s "
           "transport %s\n",
           cfg->name, (unsigned long long)cfg->seed, cfg->platform, cfg->ranks, cfg->ranks_per_host,
           bench_coll_names[cfg->bench_coll], cfg->algo[0] ? cfg->algo : "-", cfg->ibv ? "ibv" : "tcp");
    printf("# eccl-bench: nranks %d dtype float op sum inplace 0 iters %d warmup %d check 1 inflight 1 "
           "device 0 coll %s\n",
           cfg->ranks, cfg->iters, cfg->bench_warmup, bench_coll_names[cfg->bench_coll]);
    if (b0) bench_print(stdout, cfg, b0, 0);
    printf("# Out of bounds values : %llu %s\n", (unsigned long long)wrong, wrong == 0 ? "OK" : "FAILED");
    printf("# Avg bus bandwidth    : %g\n", b0 && b0->res.nrows ? busbw_sum / b0->res.nrows : 0.0);
    printf("# simulated time %s s, ranks failed %d, out %s\n", end, failed, outdir);
    printf("#\n");

    int io_err = 0;
    FILE *f = eccl_results_open(outdir, "bench.tsv");
    if (f) {
        if (b0) bench_print(f, cfg, b0, 1);
        else eccl_simbench_print_columns(f, 1);
        io_err = fclose(f) != 0;
    } else {
        io_err = 1;
    }
    if (failed) fprintf(stderr, "eccl-sim: %d of %d ranks failed (see above)\n", failed, cfg->ranks);
    if (wrong) fprintf(stderr, "eccl-sim: %llu wrong elements\n", (unsigned long long)wrong);
    free(br);
    return failed || !b0 || wrong || io_err ? 1 : 0;
}

/* ---- main ---------------------------------------------------------------- */

/* help: asked for (stdout, success) or a bad command line (stderr, 2). */
static int usage(const char *argv0, int help)
{
    fprintf(help ? stdout : stderr,
            "usage: %s run FILE [--seed S] [--out DIR] [--log-level 0-5] [--verbose]\n"
            "  Runs the scenario FILE (format: scenarios/README.md) on the simulator and\n"
            "  writes its results to DIR (default: results/<scenario name>/).\n"
            "  SimGrid's own --cfg=... and --log=... options are accepted too.\n"
            "  Exit status: 0 all checks passed, 1 a check failed, 2 usage or scenario error.\n",
            argv0);
    return help ? 0 : 2;
}

/* Actor stacks. Core's deepest call chain is under 4 KiB (no control
 * message on the stack is bigger than 256 bytes), so 256 KiB instead of
 * SimGrid's 8 MiB leaves ample room for libc and SimGrid. What costs is not
 * the size but the memory maps: a stack with a guard page is 2, and Linux
 * allows vm.max_map_count (65,530 by default) per process, which with 3
 * actors per rank (worker, progress, receiver) stops at about 10,900
 * ranks. Beyond what the limit allows, stacks go without guard pages (one
 * plain allocation each): an overflow is then no longer caught, which the
 * margin above makes a remote risk; eccl-sim says so when it happens. */
#define ACTOR_STACK_KIB 256
#define MAP_MARGIN 4096 /* maps for everything else: libraries, heap, SimGrid */

static void set_actor_stacks(const eccl_scenario *c)
{
    sg_cfg_set_int("contexts/stack-size", ACTOR_STACK_KIB);
    long limit = 0;
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    if (f) {
        if (fscanf(f, "%ld", &limit) != 1) limit = 0;
        fclose(f);
    }
    /* Every worker life is 3 actors, less its progress thread and its
     * receiver when it has none (a host_on restarts its host's ranks); the
     * master 2; killers and the plan 1. */
    long actors = (1L + c->progress_thread + !c->latency_net) * (c->ranks + (long)c->nfaults * c->ranks_per_host) + 2 + c->nfaults + 1;
    if (limit > 0 && 2 * actors + MAP_MARGIN > limit) {
        sg_cfg_set_int("contexts/guard-size", 0);
        /* Without a guard, SimGrid callocs each stack. glibc raises its mmap
         * threshold past a freed mmapped chunk, and a calloc from the heap
         * clears the whole stack: 32k ranks touched 11 GB of zeros. A fixed
         * threshold keeps every stack a fresh, untouched mapping (and the
         * kernel merges adjacent ones, so they cost few maps). glibc also
         * caps its mmapped chunks at 65536 and serves the rest from the
         * heap, cleared: lift the cap, or 32k ranks and up pay 256 KiB of
         * zeros per actor past the 65,536th. */
        mallopt(M_MMAP_THRESHOLD, 128 * 1024);
        mallopt(M_MMAP_MAX, INT_MAX);
        eccl_sg_printf("eccl-sim", "actor stacks without guard pages: %ld actors need %ld maps "
                       "with them, vm.max_map_count is %ld", actors, 2 * actors + MAP_MARGIN,
                       limit);
    }
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* Before SimGrid, which answers --help with its configuration list. */
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) return usage(argv[0], 1);
    /* Takes SimGrid's own --cfg=... and --log=... options out of argv. */
    simgrid_init(&argc, argv);
    if (argc < 3 || strcmp(argv[1], "run") != 0) return usage(argv[0], 0);
    const char *file = argv[2], *out = NULL;
    int have_seed = 0, verbose = 0, log_level = ECCL_LOG_WARN;
    uint64_t seed = 0;
    for (int i = 3; i < argc; i++) {
        long x;
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            if (eccl_scn_parse_u64(argv[++i], &seed)) {
                fprintf(stderr, "eccl-sim: --seed %s: want an unsigned 64-bit integer\n", argv[i]);
                return 2;
            }
            have_seed = 1;
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else if (strcmp(argv[i], "--log-level") == 0 && i + 1 < argc) {
            if (eccl_scn_parse_long(argv[++i], 0, 5, &x)) return usage(argv[0], 0);
            log_level = (int)x;
        } else if (strcmp(argv[i], "--verbose") == 0) {
            verbose = 1;
        } else {
            return usage(argv[0], 0);
        }
    }

    eccl_scenario cfg;
    if (eccl_scn_parse(file, &cfg)) {
        free(cfg.faults);
        return 2;
    }
    if (have_seed) cfg.seed = seed; /* --seed wins over the file's */
    else if (!cfg.have_seed) cfg.seed = 1;

    char outdir[PATH_MAX];
    if (out)
        snprintf(outdir, sizeof outdir, "%s", out);
    else
        snprintf(outdir, sizeof outdir, "results/%s", cfg.name);
    char platform_path[PATH_MAX];
    if (eccl_results_mkdir(outdir) ||
        snprintf(platform_path, sizeof platform_path, "%s/platform.xml", outdir) >=
            (int)sizeof platform_path ||
        eccl_scn_write_platform(&cfg, platform_path)) {
        fprintf(stderr, "eccl-sim: cannot create %s: %s\n", outdir, strerror(errno));
        free(cfg.faults);
        return 1;
    }

    /* SimGrid's configuration chatter goes, its warnings stay. */
    xbt_log_control_set("xbt_cfg.thres:warning");
    /* CM02: a message costs exactly latency + size / bandwidth. */
    sg_cfg_set_string("network/model", "CM02");
    set_actor_stacks(&cfg);
    simgrid_load_platform(platform_path);
    /* Seal it now (SimGrid does on the first run): a Floyd zone (clos,
     * wan) computes its routes when sealed, and the fault plan asks for
     * routes before the job runs. Nothing runs until 0 s. */
    simgrid_run_until(0.0);

    sim *s = calloc(1, sizeof *s);
    if (!s) return 1;
    s->cfg = &cfg;
    s->verbose = verbose;
    s->master_addr = "node-0:5000";
    s->fault_ns = s->detect_ns = s->slow_ns = UINT64_MAX;
    s->rk = calloc((size_t)cfg.ranks, sizeof *s->rk);
    s->oks_at = calloc((size_t)cfg.iters + 1, sizeof *s->oks_at);
    s->ref_hash = calloc((size_t)cfg.iters + 1, sizeof *s->ref_hash);
    s->flinks = calloc((size_t)cfg.nfaults + 1, sizeof *s->flinks);
    if (!s->rk || !s->oks_at || !s->ref_hash || !s->flinks ||
        eccl_sg_world_create(log_level, &s->w) != ECCL_OK) {
        fprintf(stderr, "eccl-sim: out of memory\n");
        return 1;
    }
    const eccl_sg_dev_cfg dev = {.phantom = cfg.phantom, .reduce_Bps = cfg.reduce_rate_Bps,
                                 .copy_Bps = cfg.copy_rate_Bps, .devices = cfg.cuda,
                                 .dev_copy_Bps = cfg.dev_copy_Bps,
                                 .dev_copy_latency_s = cfg.dev_copy_latency_s,
                                 .resident_min = cfg.device_ring ? (size_t)1 << 20 : 0};
    const eccl_sg_net_cfg net = {.ibv = cfg.ibv,
                                 .qps = (unsigned)cfg.ib_qps,
                                 .min_bytes = (size_t)cfg.ib_min_bytes,
                                 .chunk_bytes = (size_t)cfg.ib_chunk_bytes};
    if (eccl_sg_world_set_net(s->w, &net) != ECCL_OK) {
        fprintf(stderr, "eccl-sim: transport = ibv: this eccl-sim was built without "
                        "<infiniband/verbs.h>\n");
        return 2;
    }
    if (eccl_sg_world_set_dev(s->w, &dev) != ECCL_OK ||
        eccl_sg_world_set_master_msg_cost(s->w, cfg.master_msg_cost_s) != ECCL_OK) {
        fprintf(stderr, "eccl-sim: cannot set up the %s device\n", eccl_scn_buffers_name(&cfg));
        return 1;
    }
    eccl_sg_world_set_progress_thread(s->w, cfg.progress_thread);
    if (cfg.algo[0] && eccl_sg_world_set_algo(s->w, cfg.algo) != ECCL_OK) {
        fprintf(stderr, "eccl-sim: algo: cannot set \"%s\"\n", cfg.algo);
        sim_free(s, &cfg);
        return 2;
    }
    if (eccl_sg_world_set_net_model(s->w, cfg.latency_net ? ECCL_SG_NET_LATENCY : ECCL_SG_NET_FLOW) !=
        ECCL_OK) {
        fprintf(stderr, "eccl-sim: cannot set the net model\n");
        return 1;
    }

    if (cfg.diloco) {
        int status = run_diloco(s, &cfg, outdir);
        sim_free(s, &cfg);
        return status;
    }
    if (cfg.bench) {
        int status = run_bench(s, &cfg, outdir);
        sim_free(s, &cfg);
        return status;
    }
    if (cfg.nccl2) {
        int status = run_nccl2(s, &cfg, outdir);
        sim_free(s, &cfg);
        return status;
    }
    /* Every random choice comes from this one stream, in this order. */
    uint64_t rng = cfg.seed;
    for (int i = 0; i < cfg.ranks; i++) {
        rank_state *r = &s->rk[i];
        rank_start(s, &cfg, r, i + 1, &rng); /* the first to arrive founds the group */
        r->kill_iter = -1;
        r->nstarts = 1;
    }
    /* Faults name links and ranks of the loaded platform: a scenario error
     * found here is still exit status 2. */
    if (resolve_links(file, &cfg, s->flinks) || plan_roles(file, &cfg, s)) {
        eccl_sg_world_destroy(s->w);
        return 2;
    }
    if (cfg.expect_survivors > cfg.ranks) {
        fprintf(stderr, "eccl-sim: %s: expect_survivors = %d: only %d ranks\n", file,
                cfg.expect_survivors, cfg.ranks);
        return 2;
    }
    char rph[32] = ""; /* said only when not the default */
    if (cfg.ranks_per_host > 1) snprintf(rph, sizeof rph, " ranks_per_host=%d", cfg.ranks_per_host);
    eccl_sg_printf("eccl-sim", "scenario=%s seed=%llu platform=%s hosts=%d ranks=%d%s iters=%d "
                   "count=%ld buffers=%s faults=%d out=%s", cfg.name,
                   (unsigned long long)cfg.seed, cfg.platform, cfg.hosts, cfg.ranks, rph,
                   cfg.iters, cfg.count, eccl_scn_buffers_name(&cfg), cfg.nfaults, outdir);

    int initial = 0; /* ranks that start with the job: the first step waits for them all */
    for (int i = 0; i < cfg.ranks; i++) initial += !s->rk[i].late;
    start_actor(s->w, "master", "node-0", master_main, s);
    if (s->norder > 0) start_actor(s->w, "faults", "node-0", plan_main, s);
    if (start_relays(s) != 0) {
        fprintf(stderr, "eccl-sim: out of memory for %d relays\n", cfg.relays);
        return 2;
    }
    for (int i = 0; i < cfg.ranks; i++)
        start_worker(&s->rk[i], s->rk[i].arrive_ns, s->rk[i].late ? 0 : initial);
    simgrid_run();
    uint64_t end_ns = eccl_sg_now_ns();

    /* ---- checks ---- */
    int failures = 0, survivors = 0, killed = 0, dropped = 0, joined = 0, noticed = 0;
    int victims = 0; /* the plan takes some worker down: survivors must notice */
    for (int i = 0; i < cfg.nfaults; i++)
        victims |= cfg.faults[i].kind == F_KILL || cfg.faults[i].kind == F_HOST_OFF;
    for (int i = 0; i < cfg.ranks; i++) victims |= s->rk[i].role == ROLE_DROPPED;

    FILE *rf = eccl_results_open(outdir, "ranks.tsv");
    if (rf)
        fputs("rank\thost\trole\tworkers\tkilled\treturned\tstatus\toks\tfirst_ok_iter\t"
              "last_ok_iter\tlast_world\tfailed_ops\tcut_s\tcheck\n", rf);
    for (int i = 0; i < cfg.ranks; i++) {
        rank_state *r = &s->rk[i];
        int ok = 0;
        const int finished = r->returned && r->status == 0 && r->exit_status == 0 &&
                             r->last_ok_iter == cfg.iters - 1;
        switch (r->role) {
        case ROLE_KILLED:
            /* Every worker it ran was killed while running, the last before
             * finishing; a kill @ iter I: exactly I good steps. */
            ok = r->killed == r->nstarts && !r->kill_missed && !r->returned &&
                 r->oks < cfg.iters;
            if (r->kill_iter >= 0)
                ok = ok && r->oks == r->kill_iter && r->last_ok_iter == r->kill_iter - 1;
            killed += ok;
            break;
        case ROLE_DROPPED:
            /* Cut off from the master: its worker failed before the end. */
            ok = r->returned && r->status != 0 && !r->killed && r->last_ok_iter < cfg.iters - 1;
            dropped += ok;
            break;
        case ROLE_SURVIVOR: {
            /* One that rejoined (its relay died) misses the steps the job
             * took while it was away, and only those. */
            ok = finished && (r->oks == cfg.iters || (r->rejoins && r->oks >= 1)) &&
                 !r->killed && !r->kill_missed && values_ok(&cfg, r);
            /* Saw the failure: an all-reduce failed under it, or its world shrank. */
            int saw = r->failed_ops > 0 || (r->min_ok_world >= 0 && r->min_ok_world < r->max_ok_world) ||
                      (r->last_ok_world >= 0 && r->last_ok_world < cfg.ranks);
            noticed += saw;
            if (victims && !saw) ok = 0;
            survivors += ok;
            break;
        }
        case ROLE_JOINER:
            /* Its last worker came in late and did every step from its first
             * to the job's last; any earlier one was killed while running. */
            ok = finished && r->oks >= 1 && r->oks == cfg.iters - r->first_ok_iter &&
                 r->killed == r->nstarts - 1 && !r->kill_missed && values_ok(&cfg, r);
            survivors += ok;
            joined += ok;
            break;
        }
        failures += !ok;
        char cut[32] = "-";
        if (r->cut_ns == UINT64_MAX) snprintf(cut, sizeof cut, "end");
        else if (r->cut_ns) eccl_results_fmt_time(cut, sizeof cut, r->cut_ns);
        eccl_sg_printf("eccl-sim", "%s rank=%d role=%s workers=%d killed=%d returned=%d status=%d "
                       "oks=%d first_ok_iter=%d last_ok_iter=%d last_world=%d failed_ops=%d cut=%s",
                       ok ? "ok" : "FAIL", r->idx, role_name(r->role), r->lives, r->killed,
                       r->returned, r->status, r->oks, r->first_ok_iter, r->last_ok_iter,
                       r->last_ok_world, r->failed_ops, cut);
        if (rf)
            fprintf(rf, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", r->idx,
                    r->host, role_name(r->role), r->lives, r->killed, r->returned, r->status,
                    r->oks, r->first_ok_iter, r->last_ok_iter, r->last_ok_world, r->failed_ops,
                    cut, ok ? "pass" : "FAIL");
    }
    if (cfg.phantom)
        eccl_sg_printf("eccl-sim", "values unchecked: phantom buffers carry sizes, not bytes "
                       "(checked: completion, survivors, timing)");
    if (s->parity_bad) {
        eccl_sg_printf("eccl-sim", "FAIL %d all-reduce results differ between ranks",
                       s->parity_bad);
        failures++;
    }
    if (survivors != cfg.expect_survivors) {
        eccl_sg_printf("eccl-sim", "FAIL survivors=%d expect_survivors=%d", survivors,
                       cfg.expect_survivors);
        failures++;
    }
    /* A relay's death shows in its ranks: they lost their master and came
     * back (the others may see nothing, if it died before the first step). */
    int rejoined = 0;
    for (int i = 0; i < cfg.ranks; i++) rejoined += s->rk[i].rejoins > 0;
    if (cfg.n_relay_kills && !rejoined) {
        eccl_sg_printf("eccl-sim", "FAIL kill_relay: no rank lost its master");
        failures++;
    }
    if (victims && s->detect_ns == UINT64_MAX) {
        eccl_sg_printf("eccl-sim", "FAIL no survivor ever saw the failure");
        failures++;
    }
    /* Slow links: the mean all-reduce begun after the first one against the
     * mean of those done before it, in ppm of the ratio (integer: stable). */
    char before_mean[32] = "-", after_mean[32] = "-", slowdown[32] = "-";
    if (s->slow_ns != UINT64_MAX && s->before_n) eccl_results_fmt_time(before_mean, sizeof before_mean, s->before_sum_ns / s->before_n);
    if (s->after_n) eccl_results_fmt_time(after_mean, sizeof after_mean, s->after_sum_ns / s->after_n);
    if (s->slow_ns != UINT64_MAX && s->before_n && s->after_n) {
        uint64_t b = s->before_sum_ns / s->before_n, a = s->after_sum_ns / s->after_n;
        uint64_t ppm = b ? (uint64_t)((double)a * 1e6 / (double)b) : 0;
        snprintf(slowdown, sizeof slowdown, "%llu.%06llu", (unsigned long long)(ppm / 1000000u),
                 (unsigned long long)(ppm % 1000000u));
        if (cfg.expect_slowdown > 0 && (double)ppm / 1e6 < cfg.expect_slowdown) {
            eccl_sg_printf("eccl-sim", "FAIL slowdown=%s expect_slowdown=%g", slowdown,
                           cfg.expect_slowdown);
            failures++;
        }
        if (cfg.expect_speedup > 0 && (ppm == 0 || 1e6 / (double)ppm < cfg.expect_speedup)) {
            eccl_sg_printf("eccl-sim", "FAIL speedup=%.6f expect_speedup=%g",
                           ppm ? 1e6 / (double)ppm : 0.0, cfg.expect_speedup);
            failures++;
        }
    } else if (cfg.expect_slowdown > 0 || cfg.expect_speedup > 0) {
        eccl_sg_printf("eccl-sim", "FAIL expect_%s: no all-reduce %s the %s",
                       cfg.expect_slowdown > 0 ? "slowdown" : "speedup",
                       s->before_n ? "began after" : "ended before",
                       cfg.expect_slowdown > 0 ? "slow_link" : "optimize_topology");
        failures++;
    }
    if (s->oom) {
        fprintf(stderr, "eccl-sim: out of memory (or a fault failed) while running\n");
        failures++;
    }
    const char *checks = failures ? "fail" : "pass";
    char sim_time[32], ar_mean[32] = "-", ar_min[32] = "-", fault_t[32] = "-", detect[32] = "-";
    eccl_results_fmt_time(sim_time, sizeof sim_time, end_ns);
    if (s->ar_n) {
        eccl_results_fmt_time(ar_mean, sizeof ar_mean, s->ar_sum_ns / s->ar_n);
        eccl_results_fmt_time(ar_min, sizeof ar_min, s->ar_min_ns);
    }
    if (s->fault_ns != UINT64_MAX) eccl_results_fmt_time(fault_t, sizeof fault_t, s->fault_ns);
    if (s->fault_ns != UINT64_MAX && s->detect_ns != UINT64_MAX)
        eccl_results_fmt_time(detect, sizeof detect, s->detect_ns - s->fault_ns);
    int nkills = 0;
    for (int i = 0; i < cfg.nfaults; i++)
        nkills += cfg.faults[i].kind == F_KILL || cfg.faults[i].kind == F_HOST_OFF;

    /* Bootstrap: when the last rank that started with the job began its
     * first all-reduce (connected, admitted, ring formed, step agreed);
     * ranks that never began one (killed first) are left out. */
    uint64_t boot_ns = 0;
    for (int i = 0; i < cfg.ranks; i++)
        if (!s->rk[i].late && s->rk[i].first_begin_ns > boot_ns) boot_ns = s->rk[i].first_begin_ns;
    char boot[32] = "-";
    if (boot_ns) eccl_results_fmt_time(boot, sizeof boot, boot_ns);

    /* The loopback, when the platform has one ("-" otherwise). */
    char lo_bw[32] = "-", lo_lat[32] = "-";
    if (cfg.loopback) {
        snprintf(lo_bw, sizeof lo_bw, "%.17g", cfg.loopback_bandwidth_Bps);
        eccl_results_fmt_time(lo_lat, sizeof lo_lat, (uint64_t)llround(cfg.loopback_latency_s * 1e9));
    }

    int io_err = rf ? (fclose(rf) != 0) : 1;
    io_err |= write_events(s, outdir) != 0;
    FILE *sf = eccl_results_open(outdir, "summary.tsv");
    if (sf) {
        fprintf(sf, "key\tvalue\n");
        fprintf(sf, "scenario\t%s\nseed\t%llu\nplatform\t%s\nhosts\t%d\nranks\t%d\ncount\t%ld\n"
                    "iters\t%d\nkills\t%d\nkilled\t%d\nsurvivors\t%d\nexpect_survivors\t%d\n"
                    "survivors_noticed\t%d\nfailed_checks\t%d\nchecks\t%s\nevents\t%zu\n"
                    "sim_time_s\t%s\nallreduce_ok\t%llu\nallreduce_mean_s\t%s\n"
                    "allreduce_min_s\t%s\nallreduce_failed\t%llu\nfaults\t%d\ndropped\t%d\njoined\t%d\n"
                    "first_fault_s\t%s\ndetect_s\t%s\nallreduce_mean_before_slow_s\t%s\n"
                    "allreduce_mean_after_slow_s\t%s\nslowdown\t%s\nbuffers\t%s\nvalues\t%s\n"
                    "reduce_rate_Bps\t%.17g\ncopy_rate_Bps\t%.17g\nranks_per_host\t%d\n"
                    "loopback_Bps\t%s\nloopback_latency_s\t%s\nbootstrap_s\t%s\nmessages\t%llu\n"
                    "conns\t%llu\nwaits\t%llu\nheap_peak_bytes\t%zu\nmmap_peak_bytes\t%zu\n",
                cfg.name, (unsigned long long)cfg.seed, cfg.platform, cfg.hosts, cfg.ranks,
                cfg.count, cfg.iters, nkills, killed, survivors, cfg.expect_survivors, noticed,
                failures, checks, s->nev, sim_time, (unsigned long long)s->ar_n, ar_mean, ar_min,
                (unsigned long long)s->ar_failed, cfg.nfaults, dropped, joined, fault_t, detect, before_mean, after_mean, slowdown,
                eccl_scn_buffers_name(&cfg), cfg.phantom ? "unchecked" : "checked",
                cfg.reduce_rate_Bps, cfg.copy_rate_Bps, cfg.ranks_per_host, lo_bw, lo_lat, boot,
                (unsigned long long)eccl_sg_world_messages(s->w),
                (unsigned long long)eccl_sg_world_conns(s->w), (unsigned long long)eccl_sg_world_waits(s->w),
                s->heap_peak, s->mmap_peak);
        /* Successful all-reduces by the algorithm that ran them (the
         * dispatcher's picks), only those that ran. */
        for (uint32_t a = 0; a < ECCL_ALGO_COUNT; a++)
            if (s->ar_by_algo[a])
                fprintf(sf, "allreduce_ok_%s\t%llu\n", eccl_algorithm_name(a), (unsigned long long)s->ar_by_algo[a]);
        /* Only with devices, so other scenarios' summaries stay as they were. */
        if (cfg.cuda)
            fprintf(sf, "device_copy_Bps\t%.17g\ndevice_copy_latency_s\t%.9f\n", cfg.dev_copy_Bps,
                    cfg.dev_copy_latency_s);
        write_transport(sf, s, &cfg);
        io_err |= fclose(sf) != 0;
    } else {
        io_err = 1;
    }
    io_err |= write_plot_script(s, &cfg, outdir) != 0;
    const char *plot = io_err ? "none" : eccl_results_plot_png(outdir, &io_err);

    printf("scenario=%s seed=%llu ranks=%d killed=%d dropped=%d joined=%d survivors=%d "
           "expect_survivors=%d iters=%d buffers=%s values=%s checks=%s sim_time_s=%s "
           "bootstrap_s=%s allreduce_mean_s=%s detect_s=%s slowdown=%s events=%zu out=%s plot=%s\n",
           cfg.name, (unsigned long long)cfg.seed, cfg.ranks, killed, dropped, joined, survivors,
           cfg.expect_survivors, cfg.iters, eccl_scn_buffers_name(&cfg),
           cfg.phantom ? "unchecked" : "checked", checks, sim_time, boot, ar_mean, detect, slowdown,
           s->nev, outdir, plot);

    const int rc = failures == 0 && !io_err ? 0 : 1;
    if (cfg.ranks >= FAST_EXIT_RANKS && !getenv("ECCL_SIM_TEARDOWN")) {
        /* Everything is written: the process's end frees it all at once. */
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    sim_free(s, &cfg);
    return rc;
}
