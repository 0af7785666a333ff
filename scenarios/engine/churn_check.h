/* The churn checker: reads the key=value lines of DiLoCo workers
 * (examples/diloco_loop.c) as they come and judges the run. Shared by
 * eccl-churn (real processes, wall-clock time) and eccl-sim's diloco
 * workload (actors, simulated time): the caller says which worker a line
 * came from and when it arrived.
 *
 * What it checks:
 *  - parity: every peer that reports a revision reports the same hash (and
 *    the same advanced flag) for it; parity_breaks counts revisions with
 *    more than one;
 *  - order: each worker's revisions strictly increase;
 *  - progress: the longest time without a new advanced revision (from the
 *    start, between them, and up to the end) is max_stall_s;
 *  - corruption: any event=corrupt line (a wrong all-reduce element, a
 *    buffer not restored after a failure, a synced peer that had to fetch)
 *    and any event=error line.
 * The caller adds what only it can see (exit statuses, memory).
 *
 * No mutable globals (it runs inside eccl-sim); memory is bounded: a window
 * of the last `window` revisions, and one small record per worker index. */
#ifndef ECCL_TOOLS_CHURN_CHECK_H
#define ECCL_TOOLS_CHURN_CHECK_H

#include <stddef.h>
#include <stdint.h>

typedef struct churn_rev_slot {
    uint64_t rev; /* UINT64_MAX: empty */
    uint64_t hash;
    int advanced;
    int broken;
    int reports;
} churn_rev_slot;

typedef struct churn_worker_rec {
    uint64_t last_rev; /* UINT64_MAX: none yet */
    int joined;        /* reported event=joined */
    int corrupt;       /* reported event=corrupt */
    int errors;        /* reported event=error / gave_up */
} churn_worker_rec;

typedef struct churn_check {
    churn_rev_slot *win;
    size_t window;
    churn_worker_rec *w;
    size_t nw;
    double t_start, last_progress, max_stall_s, max_stall_at;
    uint64_t max_rev; /* highest advanced revision seen; UINT64_MAX none */
    uint64_t revisions;     /* distinct advanced revisions */
    uint64_t parity_breaks; /* revisions with more than one hash */
    uint64_t order_breaks;  /* a worker's revision that did not increase */
    uint64_t corrupt, errors, joins, retries, lines, late; /* late: behind the window */
    uint64_t first_break_rev; /* UINT64_MAX: none */
    char first_problem[256];  /* the first line that broke something, for the report */
} churn_check;

/* window: revisions remembered (e.g. 65536). Returns 0 or -1 (no memory). */
int churn_check_init(churn_check *c, size_t window, double t_start);
/* One line of worker `worker` (any index >= 0), received at time t (s). */
void churn_check_line(churn_check *c, size_t worker, const char *line, double t);
/* The run ended at t: closes the last stall interval. */
void churn_check_finish(churn_check *c, double t);
/* Whether worker `worker` has reported holding the state (joined, or a
 * revision) -- eccl-churn keeps two such alive. */
int churn_check_holds_state(const churn_check *c, size_t worker);
void churn_check_free(churn_check *c);

/* The value of `key=` in a key=value line, into out (0 when absent). */
int churn_field(const char *line, const char *key, char *out, size_t len);

#endif
