/* The SimGrid runner's shared state (scenarios/engine/run_sg.h runs it):
 * one `sim` per run holds the scenario, its world, every rank's state and
 * the events; the files of the runner (run_sg.c: world, actors, faults;
 * plan_sg.c: the plan on the loaded platform; job_sg.c, diloco_sg.c,
 * nccl2_sg.c, bench_sg.c: the workloads) share it through here.
 *
 * Like everything the simulation links, the runner holds no mutable global:
 * the scenario, its PRNG and its results hang off the one struct. Everything
 * written to the TSVs comes from the simulated clock and the seeded PRNG, so
 * the same file and seed give the same bytes.
 */
#ifndef ECCL_SCN_SIM_SG_H
#define ECCL_SCN_SIM_SG_H

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

#include "run_sg.h"

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

static inline const char *role_name(rank_role r)
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

/* Past this many ranks a finished run exits without tearing its world down
 * (unless ECCL_SIM_TEARDOWN is set, e.g. for a leak check): freeing every
 * outbox, message, conn and actor, then SimGrid's own teardown of the
 * actors and their stacks, took 9.5 s of a 110 s 10k flow run (load 6) and
 * 5.5% of a 32k run's samples, for memory the process's end returns anyway.
 * The CI scenarios (2k ranks and fewer) still tear down, so leaks there stay
 * visible to valgrind; sim_scenario_scale10k runs this path. */
#define FAST_EXIT_RANKS 4096

/* ---- run_sg.c ------------------------------------------------------------ */

/* `key` followed by an integer in a worker's key=value line. */
int eccl_scn_sg_field_int(const char *line, const char *key, int *out);
/* The rank's good steps carry what its buffers promise (hashes, or phantom). */
int eccl_scn_sg_values_ok(const eccl_scenario *cfg, const rank_state *r);
/* One row of events.tsv (rank 0: a platform event). */
void eccl_scn_sg_add_event(sim *s, int rank, const char *event, int iter, int world, const char *ms,
                           const char *hash);
/* Announces the iterations every running rank has got through. */
void eccl_scn_sg_progress(sim *s);
aid_t eccl_scn_sg_start_actor(eccl_sg_world *w, const char *name, const char *host, xbt_main_func_t fn,
                              void *data);
/* cfg->relays relay actors, each on the host of its share's first rank. */
int eccl_scn_sg_start_relays(sim *s);
/* Rank r's next worker, due at at_ns, told --start-world. */
void eccl_scn_sg_start_worker(rank_state *r, uint64_t at_ns, int start_world);
/* Actors: the timed faults in order; the master. */
void eccl_scn_sg_plan_main(int argc, char **argv);
void eccl_scn_sg_master_main(int argc, char **argv);
/* The --master list of rank r: its relay's address, then the master's. */
void eccl_scn_sg_rank_master(const sim *s, const rank_state *r, char *buf, size_t len);
/* Everything the run holds, the scenario's faults included. */
void eccl_scn_sg_free(sim *s, eccl_scenario *cfg);
/* transport = ibv: the summary's transport lines. */
void eccl_scn_sg_write_transport(FILE *sf, const sim *s, const eccl_scenario *cfg);
/* Rank idx (1-based): its names and its seeded arrival. */
void eccl_scn_sg_rank_start(sim *s, const eccl_scenario *cfg, rank_state *r, int idx, uint64_t *rng);

/* ---- plan_sg.c ----------------------------------------------------------- */

/* Resolves every fault's link names on the loaded platform (exit status 2
 * material: -1 after printing why). */
int eccl_scn_sg_resolve_links(const char *file, const eccl_scenario *c, fault_links *fl);
/* Fault indices by time, then by index (qsort_r; ctx: the scenario). */
int eccl_scn_sg_order_cmp(const void *a, const void *b, void *ctx);
/* Every rank's role, kill iteration and late start from the plan. */
int eccl_scn_sg_plan_roles(const char *file, eccl_scenario *c, sim *s);

/* ---- the workloads: each runs the job and returns eccl-sim's exit status - */

int eccl_scn_sg_job(sim *s, eccl_scenario *cfg, const char *file, const char *outdir);
int eccl_scn_sg_diloco(sim *s, eccl_scenario *cfg, const char *outdir);
int eccl_scn_sg_nccl2(sim *s, eccl_scenario *cfg, const char *outdir);
int eccl_scn_sg_bench(sim *s, eccl_scenario *cfg, const char *outdir);
/* events.tsv from s->ev (job_sg.c). */
int eccl_scn_sg_write_events(const sim *s, const char *dir);

#endif
