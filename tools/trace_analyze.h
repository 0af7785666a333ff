/* The analysis of a directory of collective traces (docs/trace.md):
 * `eccl-trace analyze` and the scenario engine's `expect_culprit` check. */
#ifndef ECCL_TOOLS_TRACE_ANALYZE_H
#define ECCL_TOOLS_TRACE_ANALYZE_H

#include <stdint.h>
#include <stdio.h>

typedef enum eccl_trace_culprit {
    ECCL_TRACE_NONE,         /* every call completed, or nobody stood out */
    ECCL_TRACE_NEVER_CALLED, /* alive (it wrote its trace) and never posted the call */
    ECCL_TRACE_NO_TRACE,     /* wrote no trace: dead, stopped, cut off */
    ECCL_TRACE_WAITED_ON,    /* the rank the most others wait on */
    ECCL_TRACE_CUT_OFF       /* some ranks lost the master (in or before the call), not all */
} eccl_trace_culprit;

#define ECCL_TRACE_MAX_CUT 64

typedef struct eccl_trace_verdict {
    int incomplete;             /* some call did not complete everywhere */
    uint64_t tag;               /* the first such call's tag */
    eccl_trace_culprit culprit;
    uint32_t rank;              /* the culprit's rank in that call's epoch */
    uint64_t peer;              /* its peer id, where a trace names it (0: not known) */
    int slow;                   /* slow ranks named */
    int slow_links;             /* slow links named; the slowest's ends' peer ids (0: none) */
    uint64_t slow_link_from, slow_link_to;
    int held;                   /* links of waiting ranks held behind a frame of a call not made */
    /* ECCL_TRACE_CUT_OFF: the ranks (and peers) that lost the master, the
     * first ECCL_TRACE_MAX_CUT of them (rank/peer: the first) */
    uint32_t n_cut, cut_rank[ECCL_TRACE_MAX_CUT];
    uint64_t cut_peer[ECCL_TRACE_MAX_CUT];
} eccl_trace_verdict;

/* Prints the report to `out` (the time line to `png` where not NULL).
 * Returns 0 when every traced call completed everywhere, 1 when one did
 * not, 2 when DIR has no trace or cannot be read (said on stderr). */
int eccl_trace_analyze(const char *dir, const char *png, FILE *out, eccl_trace_verdict *v);

#endif /* ECCL_TOOLS_TRACE_ANALYZE_H */
