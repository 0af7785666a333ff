/* Two runs side by side (`eccl-results compare A B`, results/README.md):
 * a run is a folder of the one writer's outputs, summary.tsv (key/value)
 * and, where the tool wrote them, bench.tsv and events.tsv. Typically a
 * scenario run by eccl-sim and the same scenario run by eccl-emu; any two
 * runs whose summaries share keys compare. */
#ifndef ECCL_RESULTS_COMPARE_H
#define ECCL_RESULTS_COMPARE_H

#include <stddef.h>
#include <stdio.h>

typedef struct eccl_results_pair {
    char *key, *value;
} eccl_results_pair;

typedef struct eccl_results_bench_point {
    double size, time_us, busbw;
} eccl_results_bench_point;

typedef struct eccl_results_run {
    char label[64];              /* the column's name in the table and the plot */
    /* summary.tsv's rows in file order, then one `events:KIND` row per
     * event kind of events.tsv (how many rows of it there are). */
    eccl_results_pair *kv;
    size_t nkv;
    eccl_results_bench_point *bench; /* bench.tsv's rows; has_bench 0: no file */
    size_t nbench;
    int has_bench;
} eccl_results_run;

/* Loads DIR's summary.tsv (required) and its bench.tsv and events.tsv
 * (where present); the label is DIR's last name. 0, or -1 with why set to
 * "FILE:LINE: what is wrong" (or "DIR: ..."). Free with
 * eccl_results_run_free, also after a failure. */
int eccl_results_run_load(const char *dir, eccl_results_run *run, char *why, size_t why_len);
void eccl_results_run_free(eccl_results_run *run);

/* The parsers under eccl_results_run_load, each reading an open file
 * named path (for messages). 0, or -1 with why. summary.tsv: the header
 * "key<TAB>value", then rows of exactly two fields, the key non-empty and
 * given once. bench.tsv: a header naming at least size, time_us and
 * busbw_GBps, then rows of as many fields, those three numbers. events.tsv:
 * a header naming an event column, then rows of as many fields. */
int eccl_results_parse_summary(FILE *f, const char *path, eccl_results_run *run, char *why, size_t why_len);
int eccl_results_parse_bench(FILE *f, const char *path, eccl_results_run *run, char *why, size_t why_len);
int eccl_results_parse_events(FILE *f, const char *path, eccl_results_run *run, char *why, size_t why_len);

/* Whether s is a plain decimal number (digits, sign, point, exponent: what
 * the TSVs write; not "-", hashes, "inf" or hex), and its value. */
int eccl_results_number(const char *s, double *out);

/* Labels for the two columns: a summary's `tool` where the two runs' tools
 * differ (eccl-sim against eccl-emu), else the folders' names, with
 * " (A)" / " (B)" added where those are the same too. */
void eccl_results_pick_labels(eccl_results_run *a, eccl_results_run *b);

/* The value of key in run's summary, or NULL. */
const char *eccl_results_get(const eccl_results_run *run, const char *key);

/* Prints the side-by-side table on out: every key of A in its order, then
 * those only B has, with B/A for numbers and same / DIFFERENT for the
 * verdicts (checks, survivors, killed, joined); then, where both have
 * bench.tsv, its rows paired by size. With outdir, also writes
 * outdir/compare.tsv and compare.gp, rendered to compare.png (busbw against
 * size for both where both have bench rows; else bars of the times, keys
 * ending in _s, both runs have). 0, or -1 when an output file could not be
 * written (said on stderr). */
int eccl_results_compare(const eccl_results_run *a, const eccl_results_run *b, FILE *out, const char *outdir);

#endif
