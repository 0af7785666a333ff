/* The one writer of run outputs (results/README.md): the output folder, its
 * TSV files, times as the TSVs spell them, and plot.png rendered from
 * plot.gp by gnuplot, summary.tsv's key/value rows, bench.tsv's rows and
 * the plots two tools share. Its messages name the program. */
#define _GNU_SOURCE /* program_invocation_short_name */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "results.h"

int eccl_results_mkdir(const char *dir)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0777) && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) && errno != EEXIST) return -1;
    struct stat st;
    return stat(buf, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

FILE *eccl_results_open(const char *dir, const char *name)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return NULL;
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "%s: cannot write %s: %s\n", program_invocation_short_name, path, strerror(errno));
    return f;
}

void eccl_results_fmt_time(char *buf, size_t size, uint64_t ns)
{
    snprintf(buf, size, "%llu.%09llu", (unsigned long long)(ns / 1000000000u),
             (unsigned long long)(ns % 1000000000u));
}

/* 0 rendered, 1 gnuplot missing, -1 gnuplot failed. */
static int render_plot(const char *dir, const char *script)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (chdir(dir) != 0) _exit(126);
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        _exit(errno == ENOENT ? 127 : 126);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) return -1;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 127) return 1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Renders png from script; what the summary says of it. A gnuplot that is
 * missing is not an error; one that fails is (*io_err). */
const char *eccl_results_render_png(const char *outdir, const char *script, const char *png, int *io_err)
{
    int pr = render_plot(outdir, script);
    if (pr == 1) {
        fprintf(stderr, "%s: gnuplot not found: skipping %s (install gnuplot-nox)\n",
                program_invocation_short_name, png);
        return "skipped";
    }
    if (pr < 0) {
        fprintf(stderr, "%s: gnuplot failed on %s/%s\n", program_invocation_short_name, outdir, script);
        *io_err = 1;
        return "failed";
    }
    return png;
}

const char *eccl_results_plot_png(const char *outdir, int *io_err)
{
    return eccl_results_render_png(outdir, "plot.gp", "plot.png", io_err);
}

FILE *eccl_results_summary_open(const char *dir)
{
    FILE *f = eccl_results_open(dir, "summary.tsv");
    if (f) fputs("key\tvalue\n", f);
    return f;
}

void eccl_results_kv(FILE *f, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(f, "%s\t", key);
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    va_end(ap);
}

void eccl_results_kv_str(FILE *f, const char *key, const char *value) { fprintf(f, "%s\t%s\n", key, value); }

void eccl_results_kv_u64(FILE *f, const char *key, uint64_t value)
{
    fprintf(f, "%s\t%" PRIu64 "\n", key, value);
}

void eccl_results_kv_i64(FILE *f, const char *key, int64_t value)
{
    fprintf(f, "%s\t%" PRId64 "\n", key, value);
}

void eccl_results_kv_time(FILE *f, const char *key, uint64_t ns)
{
    char t[32];
    eccl_results_fmt_time(t, sizeof t, ns);
    eccl_results_kv_str(f, key, t);
}

void eccl_results_kv_double(FILE *f, const char *key, double value) { fprintf(f, "%s\t%.17g\n", key, value); }

int eccl_results_close(FILE *f)
{
    /* ferror first: fclose alone misses a write error already reported. */
    int bad = ferror(f);
    return fclose(f) != 0 || bad ? -1 : 0;
}

FILE *eccl_results_bench_open(const char *dir)
{
    FILE *f = eccl_results_open(dir, "bench.tsv");
    if (f) fputs("size\tcount\ttype\tredop\ttime_us\talgbw_GBps\tbusbw_GBps\twrong\talgo\n", f);
    return f;
}

void eccl_results_bench_row(FILE *f, size_t bytes, size_t count, const char *type, const char *redop,
                            double time_us, double algbw, double busbw, const char *wrong, const char *algo)
{
    fprintf(f, "%zu\t%zu\t%s\t%s\t%.3f\t%.2f\t%.2f\t%s\t%s\n", bytes, count, type, redop, time_us, algbw,
            busbw, wrong, algo);
}

int eccl_results_bench_plot(const char *dir, const char *generated_by, const char *title)
{
    FILE *f = eccl_results_open(dir, "plot.gp");
    if (!f) return -1;
    /* Bus bandwidth is what compares across collectives and world sizes
     * (nccl-tests' factor); time on a log axis of its own shows the latency
     * floor of the small sizes that the bandwidth curve flattens. */
    fprintf(f,
            "# Generated by %s: bus bandwidth and time per\n"
            "# call against size. Run in this directory: gnuplot plot.gp  (reads bench.tsv)\n"
            "set terminal pngcairo noenhanced size 1000,500 font \",10\"\n"
            "set output \"plot.png\"\n"
            "set datafile separator \"\\t\"\n"
            "set title \"%s\"\n"
            "set logscale x 2\n"
            "set format x \"%%.0b%%B\"\n"
            "set xlabel \"size (bytes)\"\n"
            "set ylabel \"bus bandwidth (GB/s)\"\n"
            "set y2label \"time per call (us)\"\n"
            "set logscale y2\n"
            "set ytics nomirror\n"
            "set y2tics\n"
            "set grid xtics ytics\n"
            "set key outside bottom center horizontal\n"
            "plot \"bench.tsv\" skip 1 using 1:7 with linespoints pt 7 lc rgb \"#1f5fbf\" title \"busbw\", \\\n"
            "     \"\" skip 1 using 1:5 axes x1y2 with linespoints pt 6 dt 2 lc rgb \"#d62728\" "
            "title \"time (us)\"\n",
            generated_by, title);
    return eccl_results_close(f);
}

int eccl_results_churn_plot(const char *dir, const char *generated_by, const char *clock, const char *title,
                            const char *start_event)
{
    FILE *f = eccl_results_open(dir, "plot.gp");
    if (!f) return -1;
    fprintf(f,
            "# Generated by %s: revisions over\n"
            "# %s, kills and starts. Run in this directory: gnuplot plot.gp\n"
            "set terminal pngcairo size 1000,500 font \",10\"\n"
            "set output \"plot.png\"\n"
            "set datafile separator \"\\t\"\n"
            "set title \"%s\"\n"
            "set xlabel \"%s (s)\"\n"
            "set ylabel \"revision\"\n"
            "set y2label \"rank\"\n"
            "set y2tics\n"
            "set key outside bottom center horizontal\n"
            "plot \"events.tsv\" skip 1 using (strcol(3) eq \"rev\" ? $1 : NaN):4 with points pt 7 "
            "ps 0.3 lc rgb \"#2a9d3f\" title \"revision reported\", \\\n"
            "     \"\" skip 1 using (strcol(3) eq \"killed\" ? $1 : NaN):2 axes x1y2 with points "
            "pt 2 ps 1.5 lc rgb \"black\" title \"kill (rank)\", \\\n"
            "     \"\" skip 1 using (strcol(3) eq \"%s\" ? $1 : NaN):2 axes x1y2 with points "
            "pt 8 ps 1.5 lc rgb \"#1f5fbf\" title \"start (rank)\"\n",
            generated_by, clock, title, clock, start_event);
    return eccl_results_close(f);
}
