/* eccl-tsp-bench: speed and quality of the ring-order solver (core/topo/tsp).
 *
 *   eccl-tsp-bench [-n N]... [-r REPEATS]
 *
 * Part 1 times Held–Karp for n = 8..16. Part 2 runs the heuristic on
 * instances with a known good ring (n from -n, default 64 256 1024):
 *   planted: ring links cost U[1,2), every other link U[10,100): the planted
 *            ring is the unique optimum (each peer's cheapest link is its
 *            planted one), so "=opt" says whether it was found;
 *   decoy:   as planted, plus 4 cheap decoy links U[1,3) out of every peer:
 *            finding a ring of cheap links is then a Hamiltonian-cycle search
 *            in a sparse random digraph, adversarial for local search; the
 *            planted ring is a reference, not a proven optimum;
 *   wan:     internet peers: n/16 regions, per-peer uplink U[0.5,10) and
 *            downlink U[1,25) Gbit/s, per region pair (ordered) WAN capacity
 *            U[0.2,5), 100 inside a region; cost = (1 ± 3% noise) / min(up of
 *            the sender, down of the receiver, the region pair's capacity).
 *            The reference is a lower bound: for max, the slowest of every
 *            peer's cheapest out- and in-link and every region's cheapest
 *            exit and entry (a ring needs all of them); for sum, the larger
 *            of the sums of cheapest out- and in-links.
 * Columns: sum/ref and max/ref are the tour's sum and slowest link over the
 * reference's; =opt: planted ring found (planted), max equals its lower bound
 * and so is optimal (wan); work is the solver's own work count; ms is the
 * median wall time of the repeats. The solver is internal, hence the include
 * below.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/topo/tsp.h"
#include "tool_util.h"

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double unif(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * (double)(rnd(s) >> 11) / 9007199254740992.0;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double min2(double a, double b) { return a < b ? a : b; }

/* kind 0 planted, 1 decoy, 2 wan; writes the reference into ref */
static double *instance(uint32_t n, uint64_t seed, int kind, uint32_t *perm, eccl_tsp_result *ref)
{
    double *c = malloc((size_t)n * n * sizeof *c);
    if (!c) return NULL;
    uint64_t s = seed;
    memset(ref, 0, sizeof *ref);
    if (kind == 2) {
        uint32_t regions = n / 16 < 2 ? 2 : n / 16;
        double *up = malloc(n * sizeof *up), *down = malloc(n * sizeof *down);
        double *wan = malloc((size_t)regions * regions * sizeof *wan);
        uint32_t *reg = malloc(n * sizeof *reg);
        double *out_lb = malloc(regions * sizeof *out_lb), *in_lb = malloc(regions * sizeof *in_lb);
        if (!up || !down || !wan || !reg || !out_lb || !in_lb) return NULL;
        for (uint32_t i = 0; i < n; i++) {
            reg[i] = (uint32_t)(rnd(&s) % regions);
            up[i] = unif(&s, 0.5, 10);
            down[i] = unif(&s, 1, 25);
        }
        for (uint32_t a = 0; a < regions * regions; a++) wan[a] = a % (regions + 1) == 0 ? 100 : unif(&s, 0.2, 5);
        for (uint32_t r = 0; r < regions; r++) out_lb[r] = in_lb[r] = INFINITY;
        double sum_out = 0, sum_in = 0;
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t j = 0; j < n; j++) {
                double v = unif(&s, 0.97, 1.03) / min2(min2(up[i], down[j]), wan[reg[i] * regions + reg[j]]);
                c[(size_t)i * n + j] = i == j ? 0 : v;
                if (i != j && reg[i] != reg[j]) {
                    out_lb[reg[i]] = min2(out_lb[reg[i]], v);
                    in_lb[reg[j]] = min2(in_lb[reg[j]], v);
                }
            }
        for (uint32_t i = 0; i < n; i++) {
            double mo = INFINITY, mi = INFINITY;
            for (uint32_t j = 0; j < n; j++)
                if (i != j) {
                    mo = min2(mo, c[(size_t)i * n + j]);
                    mi = min2(mi, c[(size_t)j * n + i]);
                }
            sum_out += mo;
            sum_in += mi;
            if (mo > ref->max) ref->max = mo;
            if (mi > ref->max) ref->max = mi;
        }
        for (uint32_t r = 0; r < regions; r++) {
            if (out_lb[r] != INFINITY && out_lb[r] > ref->max) ref->max = out_lb[r];
            if (in_lb[r] != INFINITY && in_lb[r] > ref->max) ref->max = in_lb[r];
        }
        ref->sum = sum_out > sum_in ? sum_out : sum_in;
        free(up), free(down), free(wan), free(reg), free(out_lb), free(in_lb);
        return c;
    }
    for (uint32_t i = 0; i < n; i++) perm[i] = i;
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = (uint32_t)(rnd(&s) % i), t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < (size_t)n * n; i++) c[i] = unif(&s, 10, 100);
    for (uint32_t i = 0; i < n && kind == 1; i++)
        for (int d = 0; d < 4; d++) c[(size_t)i * n + rnd(&s) % n] = unif(&s, 1, 3);
    for (uint32_t k = 0; k < n; k++) c[(size_t)perm[k] * n + perm[(k + 1) % n]] = unif(&s, 1, 2);
    for (uint32_t i = 0; i < n; i++) c[(size_t)i * n + i] = 0;
    eccl_tsp_eval(n, c, NULL, perm, ref);
    return c;
}

typedef struct row {
    const char *what;
    eccl_tsp_result r;
    double ms;
    int is_opt;
} row;

static void print_row(uint32_t n, const char *inst, eccl_tsp_objective obj, const row *w,
                      const eccl_tsp_result *ref)
{
    printf("%6" PRIu32 "  %-7s  %-10s  %-22s  %10.2f  %12" PRIu64 "  %8.4f  %8.4f  %6s  %5" PRIu64 "\n", n,
           inst, obj == ECCL_TSP_SUM ? "sum" : "bottleneck", w->what, w->ms, w->r.work, w->r.sum / ref->sum,
           w->r.max / ref->max, w->is_opt < 0 ? "-" : w->is_opt ? "yes" : "no", w->r.accepted);
}

int main(int argc, char **argv)
{
    uint32_t sizes[16];
    int nsizes = 0;
    uint64_t repeats = 3;
    for (int i = 1; i < argc; i++) {
        uint64_t v;
        if (!strcmp(argv[i], "-n") && i + 1 < argc && nsizes < 16 &&
            !tool_parse_u64(argv[++i], 4, ECCL_TSP_MAX_N, &v)) {
            sizes[nsizes++] = (uint32_t)v;
        } else if (!strcmp(argv[i], "-r") && i + 1 < argc && !tool_parse_u64(argv[++i], 1, 100, &v)) {
            repeats = v;
        } else {
            int help = !strcmp(argv[i], "-h") || !strcmp(argv[i], "--help");
            fprintf(help ? stdout : stderr, "usage: %s [-n N]... [-r REPEATS]\n", argv[0]);
            return help ? 0 : 2;
        }
    }
    if (!nsizes) {
        sizes[0] = 64, sizes[1] = 256, sizes[2] = 1024;
        nsizes = 3;
    }
    double ms[100];

    printf("# Held-Karp (exact), random costs U[1,100), median of %" PRIu64 "\n", repeats);
    printf("# %4s  %-10s  %10s  %12s\n", "n", "objective", "ms", "work");
    for (uint32_t n = 8; n <= ECCL_TSP_EXACT_LIMIT; n += 2)
        for (int o = 0; o < 2; o++) {
            uint32_t perm[16], t[16];
            eccl_tsp_result ref;
            double *c = instance(n, n, 0, perm, &ref);
            for (size_t i = 0; i < (size_t)n * n; i++) c[i] = 1 + (double)(i * 2654435761u % 99);
            eccl_tsp_opts opts = {.objective = (eccl_tsp_objective)o, .exact_max_n = ECCL_TSP_EXACT_LIMIT};
            eccl_tsp_result r;
            for (uint64_t k = 0; k < repeats; k++) {
                double t0 = now_ms();
                if (eccl_tsp_solve(n, c, &opts, t, &r) != ECCL_OK) return 1;
                ms[k] = now_ms() - t0;
            }
            qsort(ms, repeats, sizeof *ms, cmp_double);
            printf("  %4" PRIu32 "  %-10s  %10.3f  %12" PRIu64 "\n", n, o ? "sum" : "bottleneck", ms[repeats / 2],
                   r.work);
            free(c);
        }

    printf("\n# heuristic; sum/ref, max/ref: over the planted ring (planted, decoy) or the lower bounds (wan);"
           " kept: improving kicks\n");
    printf("# %4s  %-7s  %-10s  %-22s  %10s  %12s  %8s  %8s  %6s  %5s\n", "n", "inst", "objective", "run", "ms",
           "work", "sum/ref", "max/ref", "=opt", "kept");
    for (int z = 0; z < nsizes; z++)
        for (int kind = 0; kind < 3; kind++)
            for (int o = 0; o < 2; o++) {
                uint32_t n = sizes[z];
                eccl_tsp_objective obj = (eccl_tsp_objective)o;
                uint32_t *perm = malloc(n * sizeof *perm), *want = malloc(n * sizeof *want);
                uint32_t *t = malloc(n * sizeof *t), *sol = malloc(n * sizeof *sol);
                eccl_tsp_result ref;
                double *c = perm ? instance(n, 1000 + n, kind, perm, &ref) : NULL;
                if (!perm || !want || !t || !sol || !c) return 1;
                uint32_t zp = 0;
                while (kind < 2 && perm[zp]) zp++;
                for (uint32_t k = 0; k < n && kind < 2; k++) want[k] = perm[(zp + k) % n];
                const char *inst = kind == 0 ? "planted" : kind == 1 ? "decoy" : "wan";

                struct {
                    const char *what;
                    int improve;
                    uint64_t budget;
                } runs[] = {
                    {"solve budget 1e5", 0, 100000},
                    {"solve budget 1e6", 0, 1000000},
                    {"solve unlimited", 0, 0},
                    {"improve +1e6", 1, 1000000},
                    {"improve +1e7", 1, 10000000},
                };
                for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
                    row w = {.what = runs[k].what};
                    eccl_tsp_opts opts = {.objective = obj, .max_work = runs[k].budget, .seed = 42};
                    for (uint64_t rep = 0; rep < repeats; rep++) {
                        /* improve starts from the unlimited solve's ring */
                        if (runs[k].improve) memcpy(t, sol, n * sizeof *t);
                        double t0 = now_ms();
                        eccl_result rc = runs[k].improve ? eccl_tsp_improve(n, c, &opts, t, &w.r)
                                                         : eccl_tsp_solve(n, c, &opts, t, &w.r);
                        ms[rep] = now_ms() - t0;
                        if (rc != ECCL_OK) return 1;
                    }
                    qsort(ms, repeats, sizeof *ms, cmp_double);
                    w.ms = ms[repeats / 2];
                    w.is_opt = kind == 0 ? !memcmp(t, want, n * sizeof *t) : kind == 2 ? w.r.max == ref.max : -1;
                    if (!runs[k].improve && !runs[k].budget) memcpy(sol, t, n * sizeof *t);
                    print_row(n, inst, obj, &w, &ref);
                }
                free(c);
                free(sol);
                free(t);
                free(want);
                free(perm);
            }
    return 0;
}
