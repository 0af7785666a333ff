/* The job workload's observer: the part of a scenario run that does not
 * care who runs it. A runner (eccl-sim's SimGrid actors, eccl-emu's real
 * processes) starts the workers and fires the faults; it hands every line
 * a worker prints to eccl_scn_job_line with the time it saw it, and tells
 * the job when a worker ended or its host went off. The job keeps each
 * rank's state and the events, knows from the fault plan what every rank
 * must end as (its role), judges the run and writes events.tsv, ranks.tsv,
 * summary.tsv and the timeline plot through the results writer.
 *
 * Nothing here reads a clock or starts anything: times come in as
 * arguments, and the runner is reached through the hooks. So the same
 * lines at the same times give the same judgement and the same bytes,
 * whichever runner produced them.
 */
#ifndef ECCL_SCN_JOB_H
#define ECCL_SCN_JOB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "eccl.h"
#include "scenario.h"

typedef struct eccl_scn_job eccl_scn_job;

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
    eccl_scn_job *job;
    int idx; /* 1..ranks */
    char name[16];
    char host[24];      /* node-(1 + (idx-1) / ranks_per_host) */
    long pid;           /* the runner's handle of its current worker (actor, process) */
    uint64_t arrive_ns; /* staggered start, plus seeded jitter; or its join time */
    int kill_iter;      /* kill @ iter I: I, else -1 */
    int kill_armed;     /* the runner was asked to kill it */
    int chaos_kill;     /* the chaos plan (chaos = FILE) kills its host */
    int late;           /* its first worker joins a running job */
    int nstarts;        /* workers the plan starts on it: 1 + its host_on count */
    int lives, ends;    /* workers started; ended (returned, or killed while running) */
    int running;        /* a worker is alive on it now (maybe still before its arrival) */
    int counted;        /* ... and past its arrival: in job->running */
    int start_world;    /* the current worker's --start-world */
    rank_role role;     /* expected, from the plan */
    uint64_t cut_ns;    /* longest stretch cut off from the master; UINT64_MAX: to the end */
    int killed;         /* workers killed while running */
    int kill_missed;    /* its host went off while no worker ran (after it returned) */
    /* The current worker (reset when a new one starts). */
    int returned, status;
    int exit_status; /* from its event=exit line; -1 before */
    uint64_t peer_id; /* from its event=connected line (the master's id); 0 before */
    int oks, first_ok_iter, last_ok_iter, last_ok_world, min_ok_world, max_ok_world,
        failed_ops;
    int rejoins;               /* master_lost lines: its relay died, it came back */
    int phantom_oks;           /* event=ok lines that said values=phantom */
    int hashed_oks;            /* event=ok lines with a result hash */
    /* Its last result hash (of iteration pend_iter; -1: none), compared
     * with the others' only once it is known to outlive the call: a rank
     * whose call returned early and that died right after may hold a
     * result the survivors then aborted (docs/protocol.md, "The commit
     * rule": its outcome binds nobody). */
    int pend_iter;
    uint64_t pend_hash;
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
    char ms[24];     /* begin-to-end, "-" when none */
    char hash[24];   /* event=ok: the result's hash, "phantom", else "-" */
} event_row;

/* How the job reaches its runner. */
typedef struct eccl_scn_job_hooks {
    void *ctx;
    /* A line of the run's log, from `who` (the tool, or a rank's name). */
    void (*say)(void *ctx, const char *who, const char *line);
    /* kill @ iter: crash r's worker at at_ns (called once per rank). */
    void (*arm_kill)(void *ctx, rank_state *r, uint64_t at_ns);
    /* After each event is recorded (the simulator samples its heap); may be NULL. */
    void (*event_added)(void *ctx, size_t nev);
} eccl_scn_job_hooks;

struct eccl_scn_job {
    const eccl_scenario *cfg;
    const char *tool; /* "eccl-sim", "eccl-emu": names its lines and plot */
    eccl_scn_job_hooks hooks;
    rank_state *rk;     /* cfg->ranks */
    /* trace = 1: the analysis's culprit ("none", "never_called", "no_trace",
     * "waited_on"; "-" without traces) and its rank (0: none found) */
    const char *trace_culprit;
    int trace_rank;
    /* The last slow link the master named, as a worker saw it (its
     * event=slow_link_seen: peer ids; 0: none), and when one was first named. */
    unsigned long long slow_from, slow_to;
    uint64_t slow_named_ns; /* UINT64_MAX: never */
    int slow_link_rank;     /* expect_slow_link: that rank if the link named touches it, else the link's
                               receiving rank (0: none named) */
    int trace_slow_link_rank; /* the same for the slow link the traces' analysis names (trace = 1) */
    int done;           /* ranks whose last worker ended */
    int running;        /* workers alive now */
    int next_milestone; /* the next iteration whose completion is announced */
    int *oks_at;        /* per iter: live ranks through it */
    uint64_t *ref_hash; /* per iter: the first result hash that counts; 0 none yet */
    int parity_bad;     /* results that differ from ref_hash */
    /* Detection: the first kill/host_off/cut, and the first sign of it at a
     * survivor (a failed all-reduce, or one done in a smaller world). */
    uint64_t fault_ns, detect_ns; /* UINT64_MAX: none */
    /* Slow links: all-reduces wholly before / begun after the first one. */
    uint64_t slow_ns; /* UINT64_MAX: no slow_link (nor optimize_topology) yet */
    int optimized;    /* optimize_topology calls that returned */
    uint64_t before_n, before_sum_ns, after_n, after_sum_ns;
    /* Every good all-reduce, begin to ok, all ranks: count, sum, minimum. */
    uint64_t ar_n, ar_sum_ns, ar_min_ns;
    uint64_t ar_by_algo[ECCL_ALGO_COUNT]; /* successful all-reduces by algorithm (algo= of event=ok) */
    uint64_t ar_failed; /* all-reduces that returned an error (peer lost, timeout, too few) */
    event_row *ev;
    size_t nev, cap_ev;
    int oom;
};

/* 0, or -1 out of memory. */
int eccl_scn_job_init(eccl_scn_job *j, const eccl_scenario *cfg, const char *tool, const eccl_scn_job_hooks *h);
void eccl_scn_job_free(eccl_scn_job *j);
/* printf to the hooks' say, from `who`. */
__attribute__((format(printf, 3, 4))) void eccl_scn_job_say(const eccl_scn_job *j, const char *who,
                                                             const char *fmt, ...);

/* Rank idx (1-based) of every workload: its names, and its arrival,
 * staggered by `stagger` plus seeded jitter drawn from *rng (the
 * scenario's one stream, rank by rank), so that the same seed gives every
 * workload of a scenario the same start-up. */
void eccl_scn_job_rank_init(eccl_scn_job *j, rank_state *r, int idx, uint64_t *rng);
/* Rank r's next worker, due at at_ns, told --start-world: its state reset. */
void eccl_scn_job_worker_starts(rank_state *r, uint64_t at_ns, int start_world);
/* It is past its arrival: it counts among the running workers. */
void eccl_scn_job_worker_arrived(rank_state *r);

/* One row of events.tsv (rank 0: a platform event). */
void eccl_scn_job_add_event(eccl_scn_job *j, uint64_t now, int rank, const char *event, int iter, int world,
                            const char *ms, const char *hash);
/* `key` followed by an integer in a worker's key=value line: 1, or 0. */
int eccl_scn_job_field_int(const char *line, const char *key, int *out);
/* A key=value line the rank's worker printed at `now`. */
void eccl_scn_job_line(rank_state *r, uint64_t now, const char *line);
/* Its worker ended (returned, or killed while running). */
void eccl_scn_job_worker_ended(rank_state *r);
/* Its worker was taken down at `now` (event: killed, host_off). */
void eccl_scn_job_host_off(rank_state *r, uint64_t now, const char *event);
/* The first fault (kill, host_off, link_off, kill_relay) happened at now. */
void eccl_scn_job_fault(eccl_scn_job *j, uint64_t now);
/* Announces the iterations every running rank has got through. */
void eccl_scn_job_progress(eccl_scn_job *j);
/* The rank's good steps carry what its buffers promise (hashes, or phantom). */
int eccl_scn_job_values_ok(const eccl_scenario *cfg, const rank_state *r);

/* ---- the plan ------------------------------------------------------------ */

/* The platform's routes as the runner knows them, for the partition
 * analysis: links are opaque ids (a SimGrid link, an index). */
#define ECCL_SCN_ROUTE_MAX 32
typedef struct eccl_scn_routes {
    void *ctx;
    /* The links fault `fault` names (resolved); their count. */
    int (*fault_links)(void *ctx, int fault, const uintptr_t **ids);
    /* The links of the route from host a to host b; their count (at most
     * ECCL_SCN_ROUTE_MAX). */
    int (*route)(void *ctx, int a, int b, uintptr_t *ids);
} eccl_scn_routes;

/* Fault indices by time, then by index (qsort_r; ctx: the scenario). */
int eccl_scn_fault_order_cmp(const void *a, const void *b, void *ctx);
/* Every rank's role, kill iteration and late start from the plan, the timed
 * faults in firing order (order[] has room for cfg->nfaults), and
 * expect_survivors unless given. 0, or -1 after printing why. */
int eccl_scn_job_plan(const char *file, eccl_scenario *c, eccl_scn_job *j, const eccl_scn_routes *routes,
                      int *order, int *norder);

/* ---- the verdict --------------------------------------------------------- */

/* What the runner adds to the outputs. */
typedef struct eccl_scn_job_report {
    const char *clock;    /* "simulated", "wall-clock": the plot's time axis */
    const char *end_key;  /* summary key of end_ns: "sim_time_s", "wall_time_s" */
    /* summary.tsv rows of the runner's own costs, after bootstrap_s, and its
     * last rows; either may be NULL. */
    void (*write_costs)(void *ctx, FILE *f);
    void (*write_tail)(void *ctx, FILE *f);
    void *ctx;
    const char *failure; /* what the runner could not do (a check fails); NULL: nothing */
} eccl_scn_job_report;

/* Checks the run that ended at end_ns and writes its outputs to outdir;
 * prints the one-line summary on stdout. Returns the exit status: 0 every
 * check passed, 1 a check failed or the outputs could not be written. */
int eccl_scn_job_finish(eccl_scn_job *j, const char *outdir, uint64_t end_ns, const eccl_scn_job_report *rep);

/* trace = 1: OUTDIR/traces, made and emptied of an earlier run's traces,
 * into dir[len], where the ranks write theirs. 0, or -1 (errno says why). */
int eccl_scn_job_trace_dir(const char *outdir, char *dir, size_t len);
/* summary.tsv's first rows, every workload's: scenario, seed, platform,
 * hosts, ranks, count. */
void eccl_scn_summary_head(FILE *f, const eccl_scenario *c);
/* events.tsv from j->ev. */
int eccl_scn_job_write_events(const eccl_scn_job *j, const char *dir);

#endif
