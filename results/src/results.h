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

#endif
