/* The one writer of run outputs: folders, TSVs, times, gnuplot PNGs.
 * Every command that writes a run's results goes through it, so that runs
 * of different tools line up (results/README.md). */
#ifndef ECCL_RESULTS_H
#define ECCL_RESULTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* mkdir -p DIR. Returns 0, or -1 (errno says why). */
int eccl_results_mkdir(const char *dir);
/* Opens DIR/NAME for writing; NULL after printing why on stderr. */
FILE *eccl_results_open(const char *dir, const char *name);
/* A time in ns as the TSVs write seconds: "S.NNNNNNNNN", exact. */
void eccl_results_fmt_time(char *buf, size_t size, uint64_t ns);
/* Renders DIR/plot.png from DIR/plot.gp with gnuplot. Returns what a
 * summary says of the plot: "plot.png"; "skipped" when gnuplot is not
 * installed (not an error, said on stderr); "failed" when it failed, with
 * *io_err set. */
const char *eccl_results_plot_png(const char *dir, int *io_err);
/* The same for any script: renders DIR/png from DIR/script (the script
 * names its output); returns png, "skipped" or "failed". */
const char *eccl_results_render_png(const char *dir, const char *script, const char *png, int *io_err);

/* ---- summary.tsv: one `key<TAB>value` row per fact of the run ----------------
 * The same keys mean the same thing in every tool's summary, so that
 * `eccl-results compare` lines two runs up (results/README.md). Rows go out
 * in call order; errors surface at eccl_results_close. */

/* Opens DIR/summary.tsv and writes its header ("key\tvalue"); NULL after
 * printing why on stderr. */
FILE *eccl_results_summary_open(const char *dir);
/* One row: KEY, a tab, the value as printf formats it, a newline. */
__attribute__((format(printf, 3, 4))) void eccl_results_kv(FILE *f, const char *key, const char *fmt, ...);
void eccl_results_kv_str(FILE *f, const char *key, const char *value);
void eccl_results_kv_u64(FILE *f, const char *key, uint64_t value);
void eccl_results_kv_i64(FILE *f, const char *key, int64_t value);
/* A time in ns, as eccl_results_fmt_time spells it ("S.NNNNNNNNN"). */
void eccl_results_kv_time(FILE *f, const char *key, uint64_t ns);
/* %.17g: reads back to the same double. */
void eccl_results_kv_double(FILE *f, const char *key, double value);
/* fclose: 0, or -1 when anything written to f was lost. */
int eccl_results_close(FILE *f);

/* ---- bench.tsv: eccl-bench's rows, as eccl-bench and eccl-sim's
 * `workload = bench` write them ------------------------------------------------- */

/* Opens DIR/bench.tsv and writes the column header (size count type redop
 * time_us algbw_GBps busbw_GBps wrong algo); NULL after printing why. */
FILE *eccl_results_bench_open(const char *dir);
/* One row: the time with 3 decimals, the bandwidths with 2; wrong is a
 * count, or "N/A" where the run did not check. */
void eccl_results_bench_row(FILE *f, size_t bytes, size_t count, const char *type, const char *redop,
                            double time_us, double algbw, double busbw, const char *wrong, const char *algo);
/* DIR/plot.gp for bench.tsv: bus bandwidth and time against size (log x).
 * generated_by says which tool and run wrote it (a comment), title tops the
 * plot. Returns 0, or -1 (said on stderr). Render with eccl_results_plot_png. */
int eccl_results_bench_plot(const char *dir, const char *generated_by, const char *title);

/* ---- a churn run's plot: revisions over time, kills and starts ------------------
 * From DIR/events.tsv (time_s rank event iter ...): rows of event "rev"
 * (iter: the revision), "killed", and start_event (a new worker), as
 * eccl-sim's `workload = diloco` and eccl-churn write them. generated_by is
 * the comment's "who" ("eccl-sim for scenario X (workload = diloco)"),
 * clock names the time axis ("simulated time", "time since the start").
 * Returns 0, or -1 (said on stderr). */
int eccl_results_churn_plot(const char *dir, const char *generated_by, const char *clock, const char *title,
                            const char *start_event);

#endif
