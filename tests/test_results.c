/* results/src: the key/value and bench writers (exact bytes: other tools
 * and `eccl-results compare` read them back) and compare's readers (what
 * they accept, what they refuse and how they name it, the table). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compare.h"
#include "results.h"

/* A fresh folder under TMPDIR, removed with its files by rm_dir. */
static void make_dir(char *dir, size_t len)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, len, "%s/eccl-test-results-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(dir));
}

static void rm_dir(const char *dir, const char *const *names)
{
    char path[512];
    for (; *names; names++) {
        snprintf(path, sizeof path, "%s/%s", dir, *names);
        unlink(path);
    }
    assert_int_equal(rmdir(dir), 0);
}

static char *read_file(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void test_summary_writer_bytes(void **state)
{
    (void)state;
    char dir[256];
    make_dir(dir, sizeof dir);
    FILE *f = eccl_results_summary_open(dir);
    assert_non_null(f);
    eccl_results_kv_str(f, "scenario", "ci-kill-4");
    eccl_results_kv_u64(f, "seed", UINT64_MAX);
    eccl_results_kv_i64(f, "delta", -3);
    eccl_results_kv_time(f, "sim_time_s", 12010007);
    eccl_results_kv_time(f, "whole_s", 2000000000);
    eccl_results_kv_double(f, "ratio", 0.1);
    eccl_results_kv(f, "duration_s", "%.9f", 1.5);
    assert_int_equal(eccl_results_close(f), 0);
    assert_string_equal(read_file(dir, "summary.tsv"), "key\tvalue\n"
                                                       "scenario\tci-kill-4\n"
                                                       "seed\t18446744073709551615\n"
                                                       "delta\t-3\n"
                                                       "sim_time_s\t0.012010007\n"
                                                       "whole_s\t2.000000000\n"
                                                       "ratio\t0.10000000000000001\n"
                                                       "duration_s\t1.500000000\n");
    static const char *const names[] = {"summary.tsv", NULL};
    rm_dir(dir, names);
}

static void test_bench_writer_bytes(void **state)
{
    (void)state;
    char dir[256];
    make_dir(dir, sizeof dir);
    FILE *f = eccl_results_bench_open(dir);
    assert_non_null(f);
    eccl_results_bench_row(f, 1024, 256, "float", "sum", 60.2424, 0.017, 0.0149, "0", "ring");
    eccl_results_bench_row(f, 8, 2, "i32", "none", 7.0, 0, 0, "N/A", "bruck");
    assert_int_equal(eccl_results_close(f), 0);
    assert_string_equal(read_file(dir, "bench.tsv"),
                        "size\tcount\ttype\tredop\ttime_us\talgbw_GBps\tbusbw_GBps\twrong\talgo\n"
                        "1024\t256\tfloat\tsum\t60.242\t0.02\t0.01\t0\tring\n"
                        "8\t2\ti32\tnone\t7.000\t0.00\t0.00\tN/A\tbruck\n");
    assert_int_equal(eccl_results_bench_plot(dir, "test", "a title"), 0);
    assert_non_null(strstr(read_file(dir, "plot.gp"), "set title \"a title\"\n"));
    static const char *const names[] = {"bench.tsv", "plot.gp", NULL};
    rm_dir(dir, names);
}

static void test_number(void **state)
{
    (void)state;
    double v = 0;
    assert_true(eccl_results_number("0.012345678", &v));
    assert_true(v == 0.012345678);
    assert_true(eccl_results_number("-3", &v) && v == -3);
    assert_true(eccl_results_number("1e-3", &v) && v == 1e-3);
    assert_true(eccl_results_number("18446744073709551615", &v));
    const char *not_numbers[] = {"", "-", "pass", "3c390c16d93a39c3", "inf", "nan", "0x10", "1.5s", "1 2"};
    for (size_t i = 0; i < sizeof not_numbers / sizeof not_numbers[0]; i++)
        assert_false(eccl_results_number(not_numbers[i], &v));
}

/* Runs a parser over text; 0 or -1, with why. */
static int parse(int (*fn)(FILE *, const char *, eccl_results_run *, char *, size_t), const char *text,
                 eccl_results_run *run, char *why, size_t len)
{
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    assert_non_null(f);
    int rc = fn(f, "x.tsv", run, why, len);
    fclose(f);
    return rc;
}

static void test_summary_parse(void **state)
{
    (void)state;
    eccl_results_run run = {0};
    char why[256] = "";
    assert_int_equal(parse(eccl_results_parse_summary, "key\tvalue\nchecks\tpass\nsim_time_s\t0.5\n", &run, why,
                           sizeof why),
                     0);
    assert_int_equal(run.nkv, 2);
    assert_string_equal(eccl_results_get(&run, "checks"), "pass");
    assert_string_equal(eccl_results_get(&run, "sim_time_s"), "0.5");
    assert_null(eccl_results_get(&run, "nope"));
    eccl_results_run_free(&run);

    static const struct {
        const char *text, *why;
    } bad[] = {
        {"", "x.tsv:1: not a summary"},
        {"name\tvalue\n", "x.tsv:1: not a summary"},
        {"key\tvalue\nchecks\tpass\nno tab here\n", "x.tsv:3: want key<TAB>value, got 1 field"},
        {"key\tvalue\na\tb\tc\n", "x.tsv:2: want key<TAB>value, got 3 fields"},
        {"key\tvalue\n\tb\n", "x.tsv:2: want key<TAB>value"},
        {"key\tvalue\nchecks\tpass\nchecks\tfail\n", "x.tsv:3: key checks given twice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = '\0';
        assert_int_equal(parse(eccl_results_parse_summary, bad[i].text, &run, why, sizeof why), -1);
        if (strncmp(why, bad[i].why, strlen(bad[i].why)) != 0) fail_msg("case %zu: got \"%s\"", i, why);
        eccl_results_run_free(&run);
    }
}

static void test_bench_and_events_parse(void **state)
{
    (void)state;
    eccl_results_run run = {0};
    char why[256] = "";
    assert_int_equal(parse(eccl_results_parse_bench,
                           "size\tcount\ttype\tredop\ttime_us\talgbw_GBps\tbusbw_GBps\twrong\talgo\n"
                           "8\t2\tfloat\tsum\t77.332\t0.00\t0.00\t0\tring\n"
                           "64\t16\tfloat\tsum\t96.084\t0.00\t0.01\tN/A\tring\n",
                           &run, why, sizeof why),
                     0);
    assert_true(run.has_bench);
    assert_int_equal(run.nbench, 2);
    assert_true(run.bench[1].size == 64 && run.bench[1].time_us == 96.084 && run.bench[1].busbw == 0.01);
    assert_int_equal(parse(eccl_results_parse_events,
                           "time_s\trank\tevent\titer\nT\t1\tok\t0\nT\t2\tok\t0\nT\t3\tkilled\t-\n", &run, why,
                           sizeof why),
                     0);
    assert_string_equal(eccl_results_get(&run, "events:ok"), "2");
    assert_string_equal(eccl_results_get(&run, "events:killed"), "1");
    eccl_results_run_free(&run);

    assert_int_equal(parse(eccl_results_parse_bench, "size\ttime_us\n8\t1\n", &run, why, sizeof why), -1);
    assert_non_null(strstr(why, "x.tsv:1: not bench rows"));
    eccl_results_run_free(&run);
    assert_int_equal(parse(eccl_results_parse_bench, "size\ttime_us\tbusbw_GBps\n8\t1\t2\n16\tslow\t2\n", &run, why,
                           sizeof why),
                     -1);
    assert_non_null(strstr(why, "x.tsv:3: size, time_us and busbw_GBps must be numbers"));
    eccl_results_run_free(&run);
    assert_int_equal(parse(eccl_results_parse_events, "time_s\tevent\nT\tok\nT\n", &run, why, sizeof why), -1);
    assert_non_null(strstr(why, "x.tsv:3: 1 fields, the header has 2"));
    eccl_results_run_free(&run);
}

static void load_text(eccl_results_run *run, const char *label, const char *summary, const char *bench)
{
    char why[256] = "";
    *run = (eccl_results_run){0};
    snprintf(run->label, sizeof run->label, "%s", label);
    assert_int_equal(parse(eccl_results_parse_summary, summary, run, why, sizeof why), 0);
    if (bench) assert_int_equal(parse(eccl_results_parse_bench, bench, run, why, sizeof why), 0);
}

/* The line of the table that starts with key (then a space). */
static const char *table_line(const char *table, const char *key)
{
    size_t len = strlen(key);
    for (const char *p = table; p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, key, len) == 0 && p[len] == ' ') return p;
    fail_msg("no row %s in:\n%s", key, table);
    return NULL;
}

static int line_has(const char *line, const char *word)
{
    const char *hit = strstr(line, word), *nl = strchr(line, '\n');
    return hit && (!nl || hit < nl);
}

static void test_compare_table(void **state)
{
    (void)state;
    eccl_results_run a, b;
    load_text(&a, "sim", "key\tvalue\ntool\teccl-sim\nchecks\tpass\nsurvivors\t3\nsim_time_s\t0.010000000\nonly_a\t1\n",
              "size\ttime_us\tbusbw_GBps\n8\t10.000\t0.50\n64\t20.000\t1.00\n");
    load_text(&b, "emu", "key\tvalue\ntool\teccl-emu\nchecks\tfail\nsurvivors\t3\nsim_time_s\t0.012500000\nonly_b\tx\n",
              "size\ttime_us\tbusbw_GBps\n8\t30.000\t0.25\n128\t1.000\t1.00\n");
    eccl_results_pick_labels(&a, &b);
    assert_string_equal(a.label, "eccl-sim");
    assert_string_equal(b.label, "eccl-emu");
    char *table = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&table, &len);
    assert_non_null(out);
    assert_int_equal(eccl_results_compare(&a, &b, out, NULL), 0);
    fclose(out);
    assert_true(line_has(table_line(table, "checks"), "DIFFERENT"));
    assert_true(line_has(table_line(table, "survivors"), "same"));
    assert_true(line_has(table_line(table, "sim_time_s"), "  1.25\n"));
    assert_true(line_has(table_line(table, "only_a"), "only A"));
    assert_true(line_has(table_line(table, "only_b"), "only B"));
    /* Bench rows by size: 8 on both sides (time x3, busbw x0.5), 64 and 128 on one. */
    const char *bench = strstr(table, "bench rows by size");
    assert_non_null(bench);
    const char *row8 = strstr(bench, "             8  ");
    assert_non_null(row8);
    assert_true(line_has(row8, " 3 ") && line_has(row8, "0.5"));
    assert_true(line_has(strstr(bench, "            64  "), "only A"));
    assert_true(line_has(strstr(bench, "           128  "), "only B"));
    free(table);
    eccl_results_run_free(&a);
    eccl_results_run_free(&b);
}

static void test_labels_from_folders(void **state)
{
    (void)state;
    eccl_results_run a = {0}, b = {0};
    snprintf(a.label, sizeof a.label, "out");
    snprintf(b.label, sizeof b.label, "out");
    eccl_results_pick_labels(&a, &b);
    assert_string_equal(a.label, "out (A)");
    assert_string_equal(b.label, "out (B)");
}

static void test_load_refuses(void **state)
{
    (void)state;
    eccl_results_run run;
    char why[512] = "", dir[256];
    assert_int_equal(eccl_results_run_load("/nonexistent/eccl-run", &run, why, sizeof why), -1);
    assert_non_null(strstr(why, "/nonexistent/eccl-run: "));
    eccl_results_run_free(&run);
    make_dir(dir, sizeof dir);
    assert_int_equal(eccl_results_run_load(dir, &run, why, sizeof why), -1);
    assert_non_null(strstr(why, "/summary.tsv: "));
    eccl_results_run_free(&run);
    /* A folder of the writer's loads, labelled by its name. */
    FILE *f = eccl_results_summary_open(dir);
    assert_non_null(f);
    eccl_results_kv_str(f, "checks", "pass");
    assert_int_equal(eccl_results_close(f), 0);
    assert_int_equal(eccl_results_run_load(dir, &run, why, sizeof why), 0);
    assert_string_equal(run.label, strrchr(dir, '/') + 1);
    assert_int_equal(run.has_bench, 0);
    eccl_results_run_free(&run);
    static const char *const names[] = {"summary.tsv", NULL};
    rm_dir(dir, names);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_summary_writer_bytes), cmocka_unit_test(test_bench_writer_bytes),
        cmocka_unit_test(test_number),               cmocka_unit_test(test_summary_parse),
        cmocka_unit_test(test_bench_and_events_parse), cmocka_unit_test(test_compare_table),
        cmocka_unit_test(test_labels_from_folders),  cmocka_unit_test(test_load_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
