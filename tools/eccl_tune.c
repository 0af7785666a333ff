/* eccl-tune: measures every algorithm of every collective and writes the
 * dispatcher's rule table (core/coll/dispatch.h: ECCL_TUNE / ECCL_TUNE_FILE).
 *
 * For each collective and world size it runs eccl-bench once per
 * algorithm the collective has, forced with ECCL_ALGO, and once with the
 * library's own choice ("auto"), and keeps, per size, the median time of
 * --repeat runs. A row the library ran with another algorithm than the
 * forced one (it cannot run the call: a tree of two ranks) is dropped, so
 * the table only ever names algorithms that were measured running.
 *
 * Rules: per world size, consecutive sizes with one winner become one
 * range; a measured size N covers the world sizes from the previous
 * measured one (exclusive) up to N, the largest all above it. First match
 * wins, as in the dispatcher.
 *
 * How well does it pick? The sizes are split in two alternately: rules are
 * fitted on one half and judged on the other (held-out), as Big Send-off
 * judges its SVM: the share of picks that were the measured best, and what
 * the wrong picks cost (their time over the best one's). The library's
 * built-in choice ("auto") is judged on the same sizes and the same
 * measurements: the candidate its own runs report having run, timed in
 * that candidate's forced runs. The table written is then fitted on all
 * sizes.
 *
 * Topology. With --hosts H, eccl-bench runs its ranks on H emulated hosts
 * (loopback addresses), and with --sim FILE every measurement runs in the
 * simulator instead (eccl-sim's `workload = bench` on FILE's platform,
 * scenarios/README.md), where hosts have NICs and the network has a shape.
 * Either way the all-reduce's hierarchical algorithm joins its candidates,
 * and the rules of a world size say for which ranks per host they were
 * measured (ppn=L, core/coll/dispatch.h; ppn=0 where that world is not
 * host-regular), so a table from one topology never speaks for another. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eccl.h"

#define MAX_NP 16
#define MAX_SIZES 40
#define MAX_REPEAT 9
#define N_COLLS 6
#define MAX_ALGOS 4
#define HIER "hier" /* measured only where ranks share hosts */

static const struct coll_desc {
    const char *name;
    const char *algos[MAX_ALGOS]; /* candidates, as ECCL_ALGO names them */
} colls[N_COLLS] = {
    {"allreduce", {"ring", "tree", "recursive", HIER}},
    {"allgather", {"ring", "bruck", "recursive"}},
    {"reduce_scatter", {"ring", "recursive"}},
    {"broadcast", {"chain", "binomial"}},
    {"reduce", {"chain", "binomial"}},
    {"alltoall", {"pairwise"}},
};

#define AUTO MAX_ALGOS /* the library's own choice, in the last slot */

struct opts {
    int np[MAX_NP], n_np;
    int coll_on[N_COLLS];
    const char *minb, *maxb, *factor;
    int iters, warmup, repeat;
    char bench[4096];
    const char *out, *report;
    int hosts;         /* --hosts: emulated hosts of eccl-bench (0: one) */
    const char *sim;   /* --sim: the scenario whose platform is measured */
    char sim_bin[4096];
    int sim_rph;       /* its ranks_per_host */
};

/* One (collective, world size): times[algo][size], 0 = not measured. */
struct sweep {
    size_t sizes[MAX_SIZES];
    int n_sizes;
    double t[MAX_ALGOS + 1][MAX_SIZES];
    int auto_ran[MAX_SIZES]; /* the candidate AUTO's rows ran (-1: none of them) */
};

static int usage(int status)
{
    fprintf(status ? stderr : stdout,
            "usage: eccl-tune [options]\n"
            "  --np LIST        world sizes, comma-separated (default 2,4,8)\n"
            "  --coll LIST      collectives (default all: allreduce,allgather,reduce_scatter,\n"
            "                   broadcast,reduce,alltoall)\n"
            "  -b, -e, -f       smallest size, largest, factor (eccl-bench's; default 8, 16M, 4)\n"
            "  -n, -w           timed and warm-up iterations per size (default 20, 3)\n"
            "  --repeat R       runs per algorithm, the median kept (default 3, at most %d)\n"
            "  --bench PATH     eccl-bench (default: the one beside eccl-tune)\n"
            "  --hosts H        eccl-bench's ranks on H emulated hosts (127.0.0.x): the\n"
            "                   hierarchical all-reduce is measured too, rules get ppn=\n"
            "  --sim FILE       measure in the simulator instead: FILE is a scenario giving the\n"
            "                   platform (name, platform keys, ranks_per_host; not ranks, workload,\n"
            "                   coll, algo, sizes or iterations, which eccl-tune adds); rules get\n"
            "                   ppn=; runs are deterministic, so --repeat is 1\n"
            "  --eccl-sim PATH  eccl-sim (default: the one beside eccl-tune)\n"
            "  -o FILE          the rule table (default: stdout)\n"
            "  --report FILE    the measurements and the held-out evaluation (default: stderr)\n",
            MAX_REPEAT);
    return status;
}

static int parse_list(char *s, int *out, int max)
{
    int n = 0;
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        char *end;
        long v = strtol(tok, &end, 10);
        if (*end || v < 2 || v > 4096 || n == max) return -1;
        out[n++] = (int)v;
    }
    return n;
}

static int coll_index(const char *s)
{
    for (int k = 0; k < N_COLLS; k++)
        if (strcmp(s, colls[k].name) == 0) return k;
    return -1;
}

/* Writes the scenario of one simulated run: --sim's file, then the bench
 * workload's keys (scenarios/README.md). path: a mkstemp template. */
static int sim_scenario(const struct opts *o, int coll, int np, const char *algo, char *path)
{
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    FILE *out = fdopen(fd, "w"), *in = fopen(o->sim, "r");
    int rc = out && in ? 0 : -1;
    char line[4096];
    while (rc == 0 && fgets(line, sizeof line, in)) rc = fputs(line, out) < 0 ? -1 : 0;
    if (rc == 0)
        rc = fprintf(out, "\nworkload = bench\nranks = %d\ncoll = %s\nminbytes = %s\nmaxbytes = %s\n"
                          "stepfactor = %s\niters = %d\nwarmup = %d\n",
                     np, colls[coll].name, o->minb, o->maxb, o->factor, o->iters, o->warmup) < 0 ? -1 : 0;
    if (rc == 0 && algo) rc = fprintf(out, "algo = %s=%s\n", colls[coll].name, algo) < 0 ? -1 : 0;
    if (in) fclose(in);
    if (out ? fclose(out) != 0 : close(fd) != 0) rc = -1;
    if (rc != 0) unlink(path);
    return rc;
}

/* The ranks per host of a sweep's world of np ranks, as the dispatcher
 * sees it (eccl_coll_call.local_size): L when L >= 2 ranks sit on each of
 * two hosts or more, else 0. -1: no topology given (one host, rules for
 * any). */
static int ranks_per_host(const struct opts *o, int np)
{
    int hosts = o->sim ? (np + o->sim_rph - 1) / o->sim_rph : o->hosts;
    if (!o->sim && !o->hosts) return -1;
    if (hosts < 2 || np % hosts != 0 || np / hosts < 2) return 0;
    return np / hosts;
}

/* Runs eccl-bench once; fills t[size index] for rows that ran `want` (NULL:
 * any), adding sizes the first time they are seen. 0, or -1 if the run
 * failed. */
static int run_bench(const struct opts *o, int coll, int np, const char *algo, const char *want, struct sweep *s,
                     double *t)
{
    char cmd[16384], env[128] = "", hosts[32] = "", scn[64] = "/tmp/eccl-tune-XXXXXX";
    int n;
    if (o->sim) {
        if (sim_scenario(o, coll, np, algo, scn) != 0) return -1;
        n = snprintf(cmd, sizeof cmd, "'%s' run '%s' --out '%s.out' 2>/dev/null; rc=$?; rm -rf '%s' '%s.out'; exit $rc",
                     o->sim_bin, scn, scn, scn, scn);
    } else {
        if (algo) snprintf(env, sizeof env, "ECCL_ALGO='%s=%s' ", colls[coll].name, algo);
        if (o->hosts) snprintf(hosts, sizeof hosts, " --hosts %d", o->hosts);
        n = snprintf(cmd, sizeof cmd, "%s'%s' --np %d%s -b %s -e %s -f %s -n %d -w %d -c 0 --coll %s 2>/dev/null", env,
                     o->bench, np, hosts, o->minb, o->maxb, o->factor, o->iters, o->warmup, colls[coll].name);
    }
    if (n < 0 || (size_t)n >= sizeof cmd) return -1;
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[1024];
    while (fgets(line, sizeof line, p)) {
        if (line[0] == '#') continue;
        size_t size, count;
        char type[32], redop[32], wrong[32], ran[32];
        double time_us, algbw, busbw;
        if (sscanf(line, "%zu %zu %31s %31s %lf %lf %lf %31s %31s", &size, &count, type, redop, &time_us, &algbw,
                   &busbw, wrong, ran) != 9)
            continue;
        if (want && strcmp(ran, want) != 0) continue; /* it could not run this size: not a measurement of it */
        int i = 0;
        while (i < s->n_sizes && s->sizes[i] != size) i++;
        if (i == s->n_sizes) {
            if (s->n_sizes == MAX_SIZES) continue;
            s->sizes[s->n_sizes++] = size;
        }
        t[i] = time_us;
        if (!algo) { /* the library's own choice: which candidate it was */
            s->auto_ran[i] = -1;
            for (int a = 0; a < MAX_ALGOS && colls[coll].algos[a]; a++)
                if (strcmp(ran, colls[coll].algos[a]) == 0) s->auto_ran[i] = a;
        }
    }
    return pclose(p) == 0 ? 0 : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Measures every candidate (and AUTO) of `coll` at `np`, --repeat times,
 * keeping the median per size; sizes end up sorted. */
static int measure(const struct opts *o, int coll, int np, struct sweep *s, FILE *rep)
{
    static double runs[MAX_ALGOS + 1][MAX_REPEAT][MAX_SIZES];
    memset(s, 0, sizeof *s);
    for (int i = 0; i < MAX_SIZES; i++) s->auto_ran[i] = -1;
    memset(runs, 0, sizeof runs);
    for (int a = 0; a <= AUTO; a++) {
        const char *algo = a == AUTO ? NULL : colls[coll].algos[a];
        if (a != AUTO && (!algo || (strcmp(algo, HIER) == 0 && ranks_per_host(o, np) <= 0))) continue;
        for (int r = 0; r < o->repeat; r++)
            if (run_bench(o, coll, np, algo, algo, s, runs[a][r]) != 0)
                fprintf(rep, "# %s np %d %s: eccl-bench failed (run %d)\n", colls[coll].name, np,
                        algo ? algo : "auto", r);
    }
    /* Sort the sizes, carrying every run's column along. */
    for (int i = 1; i < s->n_sizes; i++)
        for (int j = i; j > 0 && s->sizes[j - 1] > s->sizes[j]; j--) {
            size_t z = s->sizes[j];
            s->sizes[j] = s->sizes[j - 1];
            s->sizes[j - 1] = z;
            int ar = s->auto_ran[j];
            s->auto_ran[j] = s->auto_ran[j - 1];
            s->auto_ran[j - 1] = ar;
            for (int a = 0; a <= AUTO; a++)
                for (int r = 0; r < o->repeat; r++) {
                    double t = runs[a][r][j];
                    runs[a][r][j] = runs[a][r][j - 1];
                    runs[a][r][j - 1] = t;
                }
        }
    for (int a = 0; a <= AUTO; a++)
        for (int i = 0; i < s->n_sizes; i++) {
            double v[MAX_REPEAT];
            int n = 0;
            for (int r = 0; r < o->repeat; r++)
                if (runs[a][r][i] > 0) v[n++] = runs[a][r][i];
            if (!n) continue;
            qsort(v, (size_t)n, sizeof v[0], cmp_double);
            s->t[a][i] = v[n / 2];
        }
    return s->n_sizes ? 0 : -1;
}

/* The measured best candidate at size index i (-1: none measured). */
static int best_at(const struct sweep *s, int i)
{
    int best = -1;
    for (int a = 0; a < MAX_ALGOS; a++)
        if (s->t[a][i] > 0 && (best < 0 || s->t[a][i] < s->t[best][i])) best = a;
    return best;
}

/* Rules of one (collective, world range) fitted on the sizes with
 * use[i] set: winners by size, merged into ranges. */
struct rule {
    size_t max_bytes; /* SIZE_MAX: no bound */
    int algo;
};

static int fit(const struct sweep *s, const int *use, struct rule *out)
{
    int n = 0;
    for (int i = 0; i < s->n_sizes; i++) {
        int b = use[i] ? best_at(s, i) : -1;
        if (b < 0) continue;
        if (n && out[n - 1].algo == b) out[n - 1].max_bytes = s->sizes[i];
        else out[n++] = (struct rule){s->sizes[i], b};
    }
    if (n) out[n - 1].max_bytes = SIZE_MAX;
    return n;
}

static int pick(const struct rule *r, int n, size_t size)
{
    for (int k = 0; k < n; k++)
        if (size <= r[k].max_bytes) return r[k].algo;
    return -1;
}

/* The held-out judgement of one sweep: picks that were the best, and the
 * wrong picks' cost, for the fitted rules and for the library's choice. */
struct judge {
    int n, right, auto_n, auto_right;
    double cost_sum, cost_max, auto_cost_sum, auto_cost_max;
};

static void judge_sweep(const struct sweep *s, struct judge *j, FILE *rep, const char *coll, int np)
{
    int train[MAX_SIZES], test[MAX_SIZES];
    for (int i = 0; i < s->n_sizes; i++) train[i] = i % 2 == 0, test[i] = !train[i];
    struct rule r[MAX_SIZES];
    int nr = fit(s, train, r);
    for (int i = 0; i < s->n_sizes; i++) {
        int b = best_at(s, i);
        if (!test[i] || b < 0) continue;
        int p = pick(r, nr, s->sizes[i]);
        double cost = p >= 0 && s->t[p][i] > 0 ? s->t[p][i] / s->t[b][i] - 1 : 0;
        j->n++;
        j->right += p == b;
        j->cost_sum += cost;
        if (cost > j->cost_max) j->cost_max = cost;
        /* The library's choice is judged as the tuned one is: by the forced
         * runs' time of the candidate it ran, so both face the same
         * measurements (its own runs' times, taken at other moments, would
         * add the box's run-to-run noise to its judgement). */
        int ar = s->auto_ran[i];
        double ac = ar >= 0 && s->t[ar][i] > 0 ? s->t[ar][i] / s->t[b][i] - 1 : 0;
        if (ar >= 0 && s->t[ar][i] > 0) {
            j->auto_n++;
            j->auto_right += ar == b;
            j->auto_cost_sum += ac;
            if (ac > j->auto_cost_max) j->auto_cost_max = ac;
        }
        fprintf(rep, "# held-out %s np %d %zu B: best %s, tuned %s (%+.0f%%), built-in %s (%+.0f%%)\n", coll, np,
                s->sizes[i], colls[coll_index(coll)].algos[b], p >= 0 ? colls[coll_index(coll)].algos[p] : "-",
                100 * cost, ar >= 0 ? colls[coll_index(coll)].algos[ar] : "-", 100 * ac);
    }
}

/* The ranks_per_host of a scenario file (default 1); -1 if unreadable. */
static int scenario_rph(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int rph = 1;
    while (fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        int v;
        char rest[2];
        if (sscanf(line, " ranks_per_host = %d %1s", &v, rest) == 1) rph = v;
    }
    fclose(f);
    return rph;
}

int main(int argc, char **argv)
{
    struct opts o = {.n_np = 3, .np = {2, 4, 8}, .minb = "8", .maxb = "16M", .factor = "4",
                     .iters = 20, .warmup = 3, .repeat = 3};
    for (int k = 0; k < N_COLLS; k++) o.coll_on[k] = 1;
    /* eccl-bench beside us. */
    ssize_t len = readlink("/proc/self/exe", o.bench, sizeof o.bench - 16);
    if (len <= 0) len = 0;
    o.bench[len] = '\0';
    char *slash = strrchr(o.bench, '/');
    strcpy(slash ? slash + 1 : o.bench, "eccl-bench");
    snprintf(o.sim_bin, sizeof o.sim_bin, "%s", o.bench);
    slash = strrchr(o.sim_bin, '/');
    strcpy(slash ? slash + 1 : o.sim_bin, "eccl-sim");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) return usage(0);
        if (!v) return usage(2);
        i++;
        if (strcmp(a, "--np") == 0) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            if ((o.n_np = parse_list(buf, o.np, MAX_NP)) <= 0) return usage(2);
        } else if (strcmp(a, "--coll") == 0) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            memset(o.coll_on, 0, sizeof o.coll_on);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                int k = coll_index(tok);
                if (k < 0) {
                    fprintf(stderr, "eccl-tune: unknown collective '%s'\n", tok);
                    return 2;
                }
                o.coll_on[k] = 1;
            }
        } else if (strcmp(a, "-b") == 0) o.minb = v;
        else if (strcmp(a, "-e") == 0) o.maxb = v;
        else if (strcmp(a, "-f") == 0) o.factor = v;
        else if (strcmp(a, "-n") == 0) o.iters = atoi(v);
        else if (strcmp(a, "-w") == 0) o.warmup = atoi(v);
        else if (strcmp(a, "--repeat") == 0) o.repeat = atoi(v);
        else if (strcmp(a, "--bench") == 0) snprintf(o.bench, sizeof o.bench, "%s", v);
        else if (strcmp(a, "--hosts") == 0) o.hosts = atoi(v);
        else if (strcmp(a, "--sim") == 0) o.sim = v;
        else if (strcmp(a, "--eccl-sim") == 0) snprintf(o.sim_bin, sizeof o.sim_bin, "%s", v);
        else if (strcmp(a, "-o") == 0) o.out = v;
        else if (strcmp(a, "--report") == 0) o.report = v;
        else return usage(2);
    }
    if (o.iters < 1 || o.warmup < 0 || o.repeat < 1 || o.repeat > MAX_REPEAT || o.hosts < 0 || (o.sim && o.hosts) ||
        strchr(o.bench, '\'') || strchr(o.sim_bin, '\''))
        return usage(2);
    if (o.sim && (o.sim_rph = scenario_rph(o.sim)) < 1) {
        fprintf(stderr, "eccl-tune: %s: unreadable, or its ranks_per_host is not a number >= 1\n", o.sim);
        return 2;
    }
    if (o.sim) o.repeat = 1; /* the simulator gives the same times every run */
    FILE *rep = o.report ? fopen(o.report, "w") : stderr;
    if (!rep) {
        fprintf(stderr, "eccl-tune: %s: %s\n", o.report, strerror(errno));
        return 1;
    }
    /* World sizes ascending: each covers the ones down to the previous. */
    for (int i = 1; i < o.n_np; i++)
        for (int j = i; j > 0 && o.np[j - 1] > o.np[j]; j--) {
            int t = o.np[j];
            o.np[j] = o.np[j - 1];
            o.np[j - 1] = t;
        }
    static char table[1 << 16];
    size_t tl = 0;
    tl += (size_t)snprintf(table + tl, sizeof table - tl,
                           "# eccl-tune: -b %s -e %s -f %s -n %d -w %d, median of %d runs\n", o.minb, o.maxb, o.factor,
                           o.iters, o.warmup, o.repeat);
    if (o.hosts) tl += (size_t)snprintf(table + tl, sizeof table - tl, "# on %d emulated hosts (loopback)\n", o.hosts);
    if (o.sim) tl += (size_t)snprintf(table + tl, sizeof table - tl, "# simulated: %s\n", o.sim);
    struct judge all = {0};
    int failed = 0;
    for (int k = 0; k < N_COLLS; k++) {
        if (!o.coll_on[k]) continue;
        for (int w = 0; w < o.n_np; w++) {
            struct sweep s;
            if (measure(&o, k, o.np[w], &s, rep) != 0) {
                fprintf(stderr, "eccl-tune: %s at np %d: nothing measured\n", colls[k].name, o.np[w]);
                failed = 1;
                continue;
            }
            fprintf(rep, "# %s np %d: time (us) by size\n# %12s", colls[k].name, o.np[w], "bytes");
            for (int a = 0; a < MAX_ALGOS && colls[k].algos[a]; a++) fprintf(rep, " %12s", colls[k].algos[a]);
            fprintf(rep, " %12s\n", "auto");
            for (int i = 0; i < s.n_sizes; i++) {
                fprintf(rep, "  %12zu", s.sizes[i]);
                for (int a = 0; a < MAX_ALGOS && colls[k].algos[a]; a++) fprintf(rep, " %12.2f", s.t[a][i]);
                fprintf(rep, " %12.2f\n", s.t[AUTO][i]);
            }
            struct judge j = {0};
            judge_sweep(&s, &j, rep, colls[k].name, o.np[w]);
            all.n += j.n, all.right += j.right, all.cost_sum += j.cost_sum;
            all.auto_n += j.auto_n, all.auto_right += j.auto_right, all.auto_cost_sum += j.auto_cost_sum;
            if (j.cost_max > all.cost_max) all.cost_max = j.cost_max;
            if (j.auto_cost_max > all.auto_cost_max) all.auto_cost_max = j.auto_cost_max;
            /* The table: fitted on every size. */
            int every[MAX_SIZES];
            for (int i = 0; i < s.n_sizes; i++) every[i] = 1;
            struct rule r[MAX_SIZES];
            int nr = fit(&s, every, r);
            int lo = w ? o.np[w - 1] + 1 : 1;
            unsigned long hi = w + 1 < o.n_np ? (unsigned long)o.np[w] : 4294967295ul;
            char ppn[32] = "";
            if (ranks_per_host(&o, o.np[w]) >= 0) snprintf(ppn, sizeof ppn, " ppn=%d", ranks_per_host(&o, o.np[w]));
            for (int q = 0; q < nr; q++)
                tl += (size_t)snprintf(table + tl, sizeof table - tl, "%s %d-%lu %zu %s%s\n", colls[k].name, lo, hi,
                                       r[q].max_bytes == SIZE_MAX ? (size_t)UINT64_MAX : r[q].max_bytes,
                                       colls[k].algos[r[q].algo], ppn);
            if (tl >= sizeof table) {
                fprintf(stderr, "eccl-tune: the table outgrew %zu bytes\n", sizeof table);
                return 1;
            }
        }
    }
    if (all.n)
        fprintf(rep,
                "# held-out: tuned picks the measured best at %d of %d sizes (%.0f%%); wrong picks cost "
                "+%.1f%% on average over all held-out sizes, +%.0f%% at worst\n"
                "# held-out: the built-in choice picks the measured best at %d of %d sizes (%.0f%%); wrong picks cost "
                "+%.1f%% on average over all held-out sizes, +%.0f%% at worst\n",
                all.right, all.n, 100.0 * all.right / all.n, 100 * all.cost_sum / all.n, 100 * all.cost_max,
                all.auto_right, all.auto_n, all.auto_n ? 100.0 * all.auto_right / all.auto_n : 0.0,
                all.auto_n ? 100 * all.auto_cost_sum / all.auto_n : 0.0, 100 * all.auto_cost_max);
    FILE *out = o.out ? fopen(o.out, "w") : stdout;
    if (!out || fputs(table, out) < 0 || (o.out && fclose(out) != 0)) {
        fprintf(stderr, "eccl-tune: writing %s: %s\n", o.out ? o.out : "stdout", strerror(errno));
        return 1;
    }
    if (o.report) fclose(rep);
    return failed;
}
