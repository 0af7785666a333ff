/* workload = diloco, whoever runs it: examples/diloco_loop.c workers under
 * seeded churn, judged line by line by churn_check.c. The runner (eccl-sim's
 * actors, eccl-emu's processes) starts and kills the workers; here are the
 * churn's decisions (seeded, against the live state), the workers' lines,
 * the verdict and the outputs (ranks.tsv, events.tsv, summary.tsv, plot). */
#ifndef ECCL_SCN_DILOCO_H
#define ECCL_SCN_DILOCO_H

#include <stdint.h>

#include "churn_check.h"
#include "job.h"

typedef struct eccl_scn_dl {
    eccl_scn_job *job; /* the ranks, the events, the hooks (say) */
    churn_check chk;
    int live;        /* workers started and not ended */
    int kills, spawns, bad_exits;
    size_t lives;    /* workers started in all */
    uint64_t rng;    /* the churn's stream */
    uint64_t next_ns; /* the churn's next decision; UINT64_MAX: the churn is over */
} eccl_scn_dl;

/* 0, or -1 out of memory; the churn's first decision drawn. */
int eccl_scn_dl_init(eccl_scn_dl *d, eccl_scn_job *j);
/* Rank r's next worker, due at at_ns: a life of the checker. */
void eccl_scn_dl_worker_starts(eccl_scn_dl *d, rank_state *r, uint64_t at_ns);
/* The churn brings rank r back at now (its host on): the event, and its
 * next worker's life (eccl_scn_dl_worker_starts); the runner starts it. */
void eccl_scn_dl_respawns(eccl_scn_dl *d, rank_state *r, uint64_t now);
/* Its worker returned with `status` (eccl_diloco_run's, or the process's). */
void eccl_scn_dl_worker_returned(eccl_scn_dl *d, rank_state *r, int status);
/* The churn crashed its worker at now. */
void eccl_scn_dl_killed(eccl_scn_dl *d, rank_state *r, uint64_t now);
/* A key=value line of its worker at now. */
void eccl_scn_dl_line(eccl_scn_dl *d, rank_state *r, uint64_t now, const char *line);

/* The churn's decision due at d->next_ns: *kill set to 1 (kill *r) or 0
 * (start a worker on *r, whose host is back on); 0 when it decides nothing.
 * Draws the next decision's time. */
int eccl_scn_dl_decide(eccl_scn_dl *d, int *kill, rank_state **r);

/* The churn key, in the summary's and the start line's words. */
void eccl_scn_dl_churn_words(const eccl_scenario *cfg, char *churn, size_t len);

/* Judges the run that ended at end_ns and writes its outputs; prints the
 * one-line summary. Returns the exit status (0 pass, 1 a check failed or the
 * outputs could not be written). Frees the checker. */
int eccl_scn_dl_finish(eccl_scn_dl *d, const char *outdir, uint64_t end_ns, const eccl_scn_job_report *rep);

#endif
