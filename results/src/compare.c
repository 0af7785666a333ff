/* Two runs side by side (compare.h, results/README.md). */
#define _GNU_SOURCE /* getline */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compare.h"
#include "results.h"

/* Keys whose values are pass/fail facts: a difference there is a different
 * outcome, not a different measurement. */
static const char *const verdict_keys[] = {"checks", "survivors", "killed", "joined"};

__attribute__((format(printf, 3, 4))) static int fail(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
    return -1;
}

int eccl_results_number(const char *s, double *out)
{
    if (!*s || strspn(s, "0123456789.eE+-") != strlen(s)) return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno || !isfinite(v)) return 0;
    *out = v;
    return 1;
}

const char *eccl_results_get(const eccl_results_run *run, const char *key)
{
    for (size_t i = 0; i < run->nkv; i++)
        if (strcmp(run->kv[i].key, key) == 0) return run->kv[i].value;
    return NULL;
}

static int add_pair(eccl_results_run *run, const char *key, const char *value)
{
    eccl_results_pair *kv = realloc(run->kv, (run->nkv + 1) * sizeof *kv);
    if (!kv) return -1;
    run->kv = kv;
    kv[run->nkv].key = strdup(key);
    kv[run->nkv].value = strdup(value);
    if (!kv[run->nkv].key || !kv[run->nkv].value) {
        free(kv[run->nkv].key);
        free(kv[run->nkv].value);
        return -1;
    }
    run->nkv++;
    return 0;
}

/* A TSV read line by line: the current line without its newline, split
 * into fields in place. */
typedef struct tsv_reader {
    FILE *f;
    char *line;
    size_t cap;
    long lineno;
    char *field[64];
    int nfields; /* 65: more than field[] holds */
} tsv_reader;

/* 1 a line, 0 the end. */
static int tsv_next(tsv_reader *r)
{
    ssize_t n = getline(&r->line, &r->cap, r->f);
    if (n < 0) return 0;
    r->lineno++;
    if (n > 0 && r->line[n - 1] == '\n') r->line[--n] = '\0';
    r->nfields = 0;
    for (char *p = r->line;;) {
        if (r->nfields == 64) {
            r->nfields++; /* more than field[] holds: no writer's file */
            break;
        }
        r->field[r->nfields++] = p;
        char *tab = strchr(p, '\t');
        if (!tab) break;
        *tab = '\0';
        p = tab + 1;
    }
    return 1;
}

static int tsv_column(const tsv_reader *r, const char *name)
{
    for (int i = 0; i < r->nfields && i < 64; i++)
        if (strcmp(r->field[i], name) == 0) return i;
    return -1;
}

int eccl_results_parse_summary(FILE *f, const char *path, eccl_results_run *run, char *why, size_t why_len)
{
    tsv_reader r = {.f = f};
    int rc = 0;
    if (!tsv_next(&r) || r.nfields != 2 || strcmp(r.field[0], "key") || strcmp(r.field[1], "value")) {
        rc = fail(why, why_len, "%s:1: not a summary (want the header \"key<TAB>value\")", path);
        goto out;
    }
    while (tsv_next(&r)) {
        if (r.nfields != 2 || !r.field[0][0]) {
            rc = fail(why, why_len, "%s:%ld: want key<TAB>value, got %d field%s", path, r.lineno,
                      r.nfields, r.nfields == 1 ? "" : "s");
            goto out;
        }
        if (eccl_results_get(run, r.field[0])) {
            rc = fail(why, why_len, "%s:%ld: key %s given twice", path, r.lineno, r.field[0]);
            goto out;
        }
        if (add_pair(run, r.field[0], r.field[1])) {
            rc = fail(why, why_len, "%s:%ld: out of memory", path, r.lineno);
            goto out;
        }
    }
out:
    free(r.line);
    return rc;
}

int eccl_results_parse_bench(FILE *f, const char *path, eccl_results_run *run, char *why, size_t why_len)
{
    tsv_reader r = {.f = f};
    int rc = 0, size = -1, time = -1, busbw = -1, ncols = 0;
    if (tsv_next(&r)) {
        size = tsv_column(&r, "size");
        time = tsv_column(&r, "time_us");
        busbw = tsv_column(&r, "busbw_GBps");
        ncols = r.nfields;
    }
    if (size < 0 || time < 0 || busbw < 0) {
        rc = fail(why, why_len, "%s:1: not bench rows (want a header naming size, time_us, busbw_GBps)", path);
        goto out;
    }
    run->has_bench = 1;
    while (tsv_next(&r)) {
        eccl_results_bench_point p;
        if (r.nfields != ncols) {
            rc = fail(why, why_len, "%s:%ld: %d fields, the header has %d", path, r.lineno, r.nfields, ncols);
            goto out;
        }
        if (!eccl_results_number(r.field[size], &p.size) || !eccl_results_number(r.field[time], &p.time_us) ||
            !eccl_results_number(r.field[busbw], &p.busbw)) {
            rc = fail(why, why_len, "%s:%ld: size, time_us and busbw_GBps must be numbers", path, r.lineno);
            goto out;
        }
        eccl_results_bench_point *b = realloc(run->bench, (run->nbench + 1) * sizeof *b);
        if (!b) {
            rc = fail(why, why_len, "%s:%ld: out of memory", path, r.lineno);
            goto out;
        }
        run->bench = b;
        b[run->nbench++] = p;
    }
out:
    free(r.line);
    return rc;
}

typedef struct event_count {
    char kind[32];
    unsigned long long n;
} event_count;

int eccl_results_parse_events(FILE *f, const char *path, eccl_results_run *run, char *why, size_t why_len)
{
    tsv_reader r = {.f = f};
    event_count kinds[64];
    int rc = 0, nkinds = 0, col = -1, ncols = 0;
    if (tsv_next(&r)) {
        col = tsv_column(&r, "event");
        ncols = r.nfields;
    }
    if (col < 0) {
        rc = fail(why, why_len, "%s:1: not events (want a header naming an event column)", path);
        goto out;
    }
    while (tsv_next(&r)) {
        if (r.nfields != ncols) {
            rc = fail(why, why_len, "%s:%ld: %d fields, the header has %d", path, r.lineno, r.nfields, ncols);
            goto out;
        }
        int k = 0;
        while (k < nkinds && strcmp(kinds[k].kind, r.field[col]) != 0) k++;
        if (k == nkinds) {
            /* The writers name a few kinds; past 64 the file is not theirs. */
            if (nkinds == 64 || strlen(r.field[col]) >= sizeof kinds[0].kind) {
                rc = fail(why, why_len, "%s:%ld: event %.40s: too many kinds or too long a name", path,
                          r.lineno, r.field[col]);
                goto out;
            }
            memcpy(kinds[nkinds].kind, r.field[col], strlen(r.field[col]) + 1);
            kinds[nkinds++].n = 0;
        }
        kinds[k].n++;
    }
    for (int k = 0; k < nkinds; k++) {
        char key[48], n[24];
        snprintf(key, sizeof key, "events:%.31s", kinds[k].kind);
        snprintf(n, sizeof n, "%llu", kinds[k].n);
        if (add_pair(run, key, n)) {
            rc = fail(why, why_len, "%s: out of memory", path);
            goto out;
        }
    }
out:
    free(r.line);
    return rc;
}

typedef int (*parse_fn)(FILE *, const char *, eccl_results_run *, char *, size_t);

/* DIR/name through parse; a missing file is fine unless required. */
static int load_file(const char *dir, const char *name, int required, parse_fn parse, eccl_results_run *run,
                     char *why, size_t why_len)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return fail(why, why_len, "%s: path too long", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT && !required) return 0;
        return fail(why, why_len, "%s: %s", path, strerror(errno));
    }
    int rc = parse(f, path, run, why, why_len);
    fclose(f);
    return rc;
}

int eccl_results_run_load(const char *dir, eccl_results_run *run, char *why, size_t why_len)
{
    *run = (eccl_results_run){0};
    /* The label: the folder's last name, trailing slashes aside. */
    size_t end = strlen(dir);
    while (end > 1 && dir[end - 1] == '/') end--;
    size_t start = end;
    while (start > 0 && dir[start - 1] != '/') start--;
    snprintf(run->label, sizeof run->label, "%.*s", (int)(end - start), dir + start);
    struct stat st;
    if (stat(dir, &st) != 0) return fail(why, why_len, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return fail(why, why_len, "%s: not a folder", dir);
    if (load_file(dir, "summary.tsv", 1, eccl_results_parse_summary, run, why, why_len) ||
        load_file(dir, "bench.tsv", 0, eccl_results_parse_bench, run, why, why_len) ||
        load_file(dir, "events.tsv", 0, eccl_results_parse_events, run, why, why_len))
        return -1;
    return 0;
}

void eccl_results_run_free(eccl_results_run *run)
{
    for (size_t i = 0; i < run->nkv; i++) {
        free(run->kv[i].key);
        free(run->kv[i].value);
    }
    free(run->kv);
    free(run->bench);
    *run = (eccl_results_run){0};
}

void eccl_results_pick_labels(eccl_results_run *a, eccl_results_run *b)
{
    const char *ta = eccl_results_get(a, "tool"), *tb = eccl_results_get(b, "tool");
    if (ta && tb && strcmp(ta, tb) != 0) {
        snprintf(a->label, sizeof a->label, "%s", ta);
        snprintf(b->label, sizeof b->label, "%s", tb);
    } else if (strcmp(a->label, b->label) == 0) {
        char base[sizeof a->label];
        memcpy(base, a->label, sizeof base);
        snprintf(a->label, sizeof a->label, "%.58s (A)", base);
        snprintf(b->label, sizeof b->label, "%.58s (B)", base);
    }
}

/* ---- the comparison ---------------------------------------------------------- */

/* One row of the table: key, A's and B's value, B/A, and a note. */
typedef struct row {
    const char *key;
    char size[24]; /* bench rows: the size; "-" otherwise */
    const char *a, *b;
    char ratio[32];
    const char *note;
} row;

static int is_verdict(const char *key)
{
    for (size_t i = 0; i < sizeof verdict_keys / sizeof verdict_keys[0]; i++)
        if (strcmp(key, verdict_keys[i]) == 0) return 1;
    return 0;
}

static void fmt_ratio(char *buf, size_t len, const char *a, const char *b)
{
    double x, y;
    if (a && b && eccl_results_number(a, &x) && eccl_results_number(b, &y) && x != 0)
        snprintf(buf, len, "%.4g", y / x);
    else
        snprintf(buf, len, "-");
}

static row kv_row(const char *key, const char *a, const char *b)
{
    row r = {.key = key, .size = "-", .a = a ? a : "-", .b = b ? b : "-"};
    double x;
    fmt_ratio(r.ratio, sizeof r.ratio, a, b);
    if (!a) r.note = "only B";
    else if (!b) r.note = "only A";
    else if (is_verdict(key)) r.note = strcmp(a, b) == 0 ? "same" : "DIFFERENT";
    else if (eccl_results_number(a, &x) && eccl_results_number(b, &x)) r.note = "-";
    else r.note = strcmp(a, b) == 0 ? "same" : "differs";
    return r;
}

/* The summary rows: A's keys in its order, then B's own. */
static size_t summary_rows(const eccl_results_run *a, const eccl_results_run *b, row *rows)
{
    size_t n = 0;
    for (size_t i = 0; i < a->nkv; i++)
        rows[n++] = kv_row(a->kv[i].key, a->kv[i].value, eccl_results_get(b, a->kv[i].key));
    for (size_t i = 0; i < b->nkv; i++)
        if (!eccl_results_get(a, b->kv[i].key)) rows[n++] = kv_row(b->kv[i].key, NULL, b->kv[i].value);
    return n;
}

static const eccl_results_bench_point *bench_at(const eccl_results_run *run, double size)
{
    for (size_t i = 0; i < run->nbench; i++)
        if (run->bench[i].size == size) return &run->bench[i];
    return NULL;
}

/* The sizes of both runs' bench rows: A's in order, then B's own. */
static size_t bench_sizes(const eccl_results_run *a, const eccl_results_run *b, double *sizes)
{
    size_t n = 0;
    for (size_t i = 0; i < a->nbench; i++) sizes[n++] = a->bench[i].size;
    for (size_t i = 0; i < b->nbench; i++)
        if (!bench_at(a, b->bench[i].size)) sizes[n++] = b->bench[i].size;
    return n;
}

/* One measure of a size, both sides: A's, B's (as bench.tsv spells them,
 * "-" where a side has no row) and B/A. */
typedef struct bench_cells {
    char a[32], b[32], ratio[32];
} bench_cells;

static bench_cells bench_measure(const eccl_results_bench_point *pa, const eccl_results_bench_point *pb,
                                 int busbw)
{
    bench_cells c = {.a = "-", .b = "-", .ratio = "-"};
    const char *fmt = busbw ? "%.2f" : "%.3f";
    double x = pa ? (busbw ? pa->busbw : pa->time_us) : 0, y = pb ? (busbw ? pb->busbw : pb->time_us) : 0;
    if (pa) snprintf(c.a, sizeof c.a, fmt, x);
    if (pb) snprintf(c.b, sizeof c.b, fmt, y);
    if (pa && pb && x != 0) snprintf(c.ratio, sizeof c.ratio, "%.4g", y / x);
    return c;
}

static void print_table(FILE *out, const eccl_results_run *a, const eccl_results_run *b, const row *rows,
                        size_t n)
{
    int wk = 3, wa = (int)strlen(a->label), wb = (int)strlen(b->label);
    for (size_t i = 0; i < n; i++) {
        if ((int)strlen(rows[i].key) > wk) wk = (int)strlen(rows[i].key);
        if ((int)strlen(rows[i].a) > wa) wa = (int)strlen(rows[i].a);
        if ((int)strlen(rows[i].b) > wb) wb = (int)strlen(rows[i].b);
    }
    fprintf(out, "%-*s  %-*s  %-*s  %-9s  %s\n", wk, "key", wa, a->label, wb, b->label, "B/A", "note");
    for (size_t i = 0; i < n; i++) {
        fprintf(out, "%-*s  %-*s  %-*s  ", wk, rows[i].key, wa, rows[i].a, wb, rows[i].b);
        /* Numbers need no note (their ratio says it): no trailing blanks. */
        if (strcmp(rows[i].note, "-") != 0) fprintf(out, "%-9s  %s\n", rows[i].ratio, rows[i].note);
        else fprintf(out, "%s\n", rows[i].ratio);
    }
}

static void print_bench(FILE *out, const eccl_results_run *a, const eccl_results_run *b, const double *sizes,
                        size_t n)
{
    fprintf(out, "\nbench rows by size (A = %s, B = %s)\n", a->label, b->label);
    fprintf(out, "%14s  %12s  %12s  %9s  %10s  %10s  %9s\n", "size", "time_us A", "time_us B", "B/A",
            "busbw A", "busbw B", "B/A");
    for (size_t i = 0; i < n; i++) {
        const eccl_results_bench_point *pa = bench_at(a, sizes[i]), *pb = bench_at(b, sizes[i]);
        const bench_cells t = bench_measure(pa, pb, 0), bw = bench_measure(pa, pb, 1);
        fprintf(out, "%14.0f  %12s  %12s  %9s  %10s  %10s  %9s%s\n", sizes[i], t.a, t.b, t.ratio, bw.a, bw.b,
                bw.ratio, !pa ? "  only B" : !pb ? "  only A" : "");
    }
}

/* compare.tsv: key size a b b_over_a note; the summary's rows (size "-"),
 * then per bench size a time_us and a busbw_GBps row. The labels are a
 * row of their own (key "label") so the columns keep fixed names. */
static int write_tsv(const char *dir, const eccl_results_run *a, const eccl_results_run *b, const row *rows,
                     size_t n, const double *sizes, size_t nsizes)
{
    FILE *f = eccl_results_open(dir, "compare.tsv");
    if (!f) return -1;
    fputs("key\tsize\ta\tb\tb_over_a\tnote\n", f);
    fprintf(f, "label\t-\t%s\t%s\t-\t-\n", a->label, b->label);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s\t%s\t%s\t%s\t%s\t%s\n", rows[i].key, rows[i].size, rows[i].a, rows[i].b, rows[i].ratio,
                rows[i].note);
    for (size_t i = 0; i < nsizes; i++) {
        const eccl_results_bench_point *pa = bench_at(a, sizes[i]), *pb = bench_at(b, sizes[i]);
        const char *note = !pa ? "only B" : !pb ? "only A" : "-";
        for (int busbw = 0; busbw < 2; busbw++) {
            const bench_cells c = bench_measure(pa, pb, busbw);
            fprintf(f, "%s\t%.0f\t%s\t%s\t%s\t%s\n", busbw ? "busbw_GBps" : "time_us", sizes[i], c.a, c.b,
                    c.ratio, note);
        }
    }
    return eccl_results_close(f);
}

/* A key of a time in seconds both runs have as a positive number: the bar
 * chart's (on a log axis: the times of one run span microseconds to
 * seconds). */
static int shared_time(const row *r)
{
    size_t len = strlen(r->key);
    double x, y;
    return len > 2 && strcmp(r->key + len - 2, "_s") == 0 && eccl_results_number(r->a, &x) &&
           eccl_results_number(r->b, &y) && x > 0 && y > 0;
}

/* compare.gp with its data inline (a datablock), so the folder's script
 * stands alone. Returns 1 when there is nothing to draw (no script). */
static int write_plot(const char *dir, const eccl_results_run *a, const eccl_results_run *b, const row *rows,
                      size_t n, const double *sizes, size_t nsizes)
{
    const int bench = a->nbench && b->nbench;
    size_t ntimes = 0;
    for (size_t i = 0; i < n; i++) ntimes += shared_time(&rows[i]);
    if (!bench && !ntimes) return 1;
    FILE *f = eccl_results_open(dir, "compare.gp");
    if (!f) return -1;
    fprintf(f,
            "# Generated by eccl-results compare: A = %s, B = %s.\n"
            "# Run in this directory: gnuplot compare.gp (the data is inline)\n"
            "set terminal pngcairo noenhanced size 1000,500 font \",10\"\n"
            "set output \"compare.png\"\n"
            "set key outside bottom center horizontal\n"
            "set grid ytics\n"
            "$data << EOD\n",
            a->label, b->label);
    if (bench) {
        for (size_t i = 0; i < nsizes; i++) {
            const eccl_results_bench_point *pa = bench_at(a, sizes[i]), *pb = bench_at(b, sizes[i]);
            char va[32] = "NaN", vb[32] = "NaN";
            if (pa) snprintf(va, sizeof va, "%.17g", pa->busbw);
            if (pb) snprintf(vb, sizeof vb, "%.17g", pb->busbw);
            fprintf(f, "%.0f %s %s\n", sizes[i], va, vb);
        }
        fprintf(f,
                "EOD\n"
                "set title \"bus bandwidth: %s against %s\"\n"
                "set logscale x 2\n"
                "set format x \"%%.0b%%B\"\n"
                "set xlabel \"size (bytes)\"\n"
                "set ylabel \"bus bandwidth (GB/s)\"\n"
                "plot $data using 1:2 with linespoints pt 7 lc rgb \"#1f5fbf\" title \"%s\", \\\n"
                "     $data using 1:3 with linespoints pt 6 dt 2 lc rgb \"#d62728\" title \"%s\"\n",
                a->label, b->label, a->label, b->label);
    } else {
        for (size_t i = 0; i < n; i++)
            if (shared_time(&rows[i])) fprintf(f, "\"%s\" %s %s\n", rows[i].key, rows[i].a, rows[i].b);
        fprintf(f,
                "EOD\n"
                "set title \"times (s): %s against %s\"\n"
                "set style data histograms\n"
                "set style histogram clustered gap 1\n"
                "set style fill solid 0.8 border -1\n"
                "set xtics rotate by -30\n"
                "set logscale y\n"
                "set ylabel \"seconds\"\n"
                "plot $data using 2:xtic(1) lc rgb \"#1f5fbf\" title \"%s\", \\\n"
                "     $data using 3 lc rgb \"#d62728\" title \"%s\"\n",
                a->label, b->label, a->label, b->label);
    }
    return eccl_results_close(f);
}

int eccl_results_compare(const eccl_results_run *a, const eccl_results_run *b, FILE *out, const char *outdir)
{
    row *rows = malloc((a->nkv + b->nkv + 1) * sizeof *rows);
    double *sizes = malloc((a->nbench + b->nbench + 1) * sizeof *sizes);
    if (!rows || !sizes) {
        free(rows);
        free(sizes);
        fprintf(stderr, "eccl-results: out of memory\n");
        return -1;
    }
    size_t n = summary_rows(a, b, rows);
    size_t nsizes = a->has_bench && b->has_bench ? bench_sizes(a, b, sizes) : 0;
    fprintf(out, "A = %s, B = %s\n", a->label, b->label);
    print_table(out, a, b, rows, n);
    if (nsizes) print_bench(out, a, b, sizes, nsizes);
    else if (a->has_bench != b->has_bench)
        fprintf(out, "\nbench.tsv: only %s has one\n", a->has_bench ? a->label : b->label);
    int rc = 0;
    if (outdir) {
        rc = eccl_results_mkdir(outdir);
        if (rc) fprintf(stderr, "eccl-results: cannot create %s: %s\n", outdir, strerror(errno));
        if (!rc) rc = write_tsv(outdir, a, b, rows, n, sizes, nsizes);
        int plot = rc ? -1 : write_plot(outdir, a, b, rows, n, sizes, nsizes);
        int io_err = plot < 0;
        const char *png = plot == 0 ? eccl_results_render_png(outdir, "compare.gp", "compare.png", &io_err)
                                    : "none (no bench rows, no shared times)";
        if (plot < 0 || io_err) rc = -1;
        else fprintf(out, "\nout=%s/compare.tsv plot=%s\n", outdir, png);
    }
    free(rows);
    free(sizes);
    return rc;
}
