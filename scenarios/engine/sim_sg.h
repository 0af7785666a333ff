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
#include "job.h"

#include "run_sg.h"

/* ---- run state ----------------------------------------------------------- */

typedef struct sim sim;

/* A fault's links, resolved on the loaded platform (node-K names give two). */
typedef struct fault_links {
    int n;
    sg_link_t l[2 * MAX_FAULT_LINKS];
    uintptr_t id[2 * MAX_FAULT_LINKS]; /* the same, as the plan's analysis names links */
} fault_links;

struct n2_run;

struct sim {
    const eccl_scenario *cfg;
    /* The workers' lines, the ranks' state, the events and the verdict
     * (job.h); its hooks' ctx is this sim. */
    eccl_scn_job job;
    eccl_sg_world *w;
    const char *master_addr;
    /* relays: relay k < cfg->relays serves ranks [k * relay_share + 1,
     * (k + 1) * relay_share]; the rest are the tree above them
     * (eccl_scn_relay_parent) */
    int relay_share;
    char (*relay_addr)[ECCL_ADDR_MAX];
    aid_t *relay_pid;
    struct relay_arg *relay_args;
    int relays_live;   /* relay actors not ended */
    int verbose;
    fault_links *flinks; /* per cfg->faults entry */
    int *order;          /* timed faults, in the order they fire */
    int norder;
    /* The most memory malloc had handed out, seen  every
     * heap_sample_every() events: from its heap (the run's objects) and in
     * chunks of their own (mmapped: actor stacks, large buffers), each
     * counted as allocated, not as touched. Unlike RSS, deterministic for a
     * binary and a seed, so the scale guard compares them with a baseline
     * (tests/sim/check_scale_guard.sh). */
    size_t heap_peak, mmap_peak;
    /* workload = diloco: its state (diloco.h); the churn actor has finished */
    struct eccl_scn_dl *dl;
    int churn_done;
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

/* The sim a rank belongs to. */
static inline sim *rank_sim(const rank_state *r) { return r->job->hooks.ctx; }
/* One row of events.tsv at the simulated now (rank 0: a platform event). */
void eccl_scn_sg_add_event(sim *s, int rank, const char *event, int iter, int world, const char *ms,
                           const char *hash);
aid_t eccl_scn_sg_start_actor(eccl_sg_world *w, const char *name, const char *host, xbt_main_func_t fn,
                              void *data);
/* cfg->relays relay actors, each on the host of its share's first rank. */
int eccl_scn_sg_start_relays(sim *s);
/* A killer actor crashes rank v (kill_rank: its process, or its host) at at_ns. */
void eccl_scn_sg_kill_rank_at(sim *s, rank_state *v, uint64_t at_ns);
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

/* ---- plan_sg.c ----------------------------------------------------------- */

/* Resolves every fault's link names on the loaded platform (exit status 2
 * material: -1 after printing why). */
int eccl_scn_sg_resolve_links(const char *file, const eccl_scenario *c, fault_links *fl);
/* Every rank's role, kill iteration and late start from the plan, on the
 * loaded platform's routes (eccl_scn_job_plan). */
int eccl_scn_sg_plan_roles(const char *file, eccl_scenario *c, sim *s);

/* ---- the workloads: each runs the job and returns eccl-sim's exit status - */

int eccl_scn_sg_job(sim *s, eccl_scenario *cfg, const char *file, const char *outdir);
int eccl_scn_sg_diloco(sim *s, eccl_scenario *cfg, const char *outdir);
int eccl_scn_sg_nccl2(sim *s, eccl_scenario *cfg, const char *outdir);
int eccl_scn_sg_bench(sim *s, eccl_scenario *cfg, const char *outdir);

#endif
