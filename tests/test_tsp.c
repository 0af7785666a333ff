/* Ring order as an ATSP (core/topo/tsp.c).
 *
 * The exact solver is checked against brute force written independently
 * here (its own pricing and ordering), the heuristic against the exact
 * solver and against planted instances whose optimum is known by
 * construction: every peer's cheapest out-link is its planted successor, so
 * the planted ring is the unique optimum under both objectives. Every random
 * instance comes from a fixed-seed local splitmix64. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eccl.h"
#include "topo/tsp.h"

#define INF ((double)INFINITY)

/* ---- helpers ------------------------------------------------------------- */

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

static void shuffle(uint32_t *a, uint32_t n, uint64_t *s)
{
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = (uint32_t)(rnd(s) % i), t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/* Random asymmetric costs: small integers (so sums are exact and ties are
 * common, which exercises the tie-breaks) or reals; a fraction p_inf of the
 * links unmeasured. */
static double *random_matrix(uint32_t n, uint64_t seed, int integers, double p_inf)
{
    double *c = malloc((size_t)n * n * sizeof *c);
    uint64_t s = seed;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < n; j++) {
            double v = integers ? (double)(1 + rnd(&s) % 20) : unif(&s, 0.5, 100.0);
            if (p_inf > 0 && unif(&s, 0, 1) < p_inf) v = INF;
            c[(size_t)i * n + j] = i == j ? NAN : v; /* the diagonal is never read */
        }
    return c;
}

/* Planted ring: perm[k] -> perm[k+1] costs [1,2); every other link [lo,hi);
 * the planted links backwards cost `back` (0: like the rest). */
static double *planted(uint32_t n, uint64_t seed, uint32_t *perm, double lo, double hi, double back)
{
    double *c = malloc((size_t)n * n * sizeof *c);
    uint64_t s = seed;
    for (uint32_t i = 0; i < n; i++) perm[i] = i;
    shuffle(perm, n, &s);
    for (size_t i = 0; i < (size_t)n * n; i++) c[i] = unif(&s, lo, hi);
    for (uint32_t k = 0; k < n; k++) {
        uint32_t a = perm[k], b = perm[(k + 1) % n];
        c[(size_t)a * n + b] = unif(&s, 1.0, 2.0);
        if (back > 0) c[(size_t)b * n + a] = back;
    }
    for (uint32_t i = 0; i < n; i++) c[(size_t)i * n + i] = 0;
    return c;
}

/* perm rotated to start at 0 */
static void canon(const uint32_t *t, uint32_t n, uint32_t *out)
{
    uint32_t z = 0;
    while (t[z] != 0) z++;
    for (uint32_t k = 0; k < n; k++) out[k] = t[(z + k) % n];
}

/* Independent pricing: from peer 0, link by link. */
typedef struct key {
    uint32_t inf;
    double sum, max;
} key;

static key price(const double *c, uint32_t n, const uint32_t *t)
{
    key k = {0, 0, 0};
    uint32_t z = 0;
    while (t[z] != 0) z++;
    for (uint32_t i = 0; i < n && n > 1; i++) {
        double v = c[(size_t)t[(z + i) % n] * n + t[(z + i + 1) % n]];
        if (v == INF) {
            k.inf++;
        } else {
            k.sum += v;
            if (v > k.max) k.max = v;
        }
    }
    return k;
}

static int key_cmp(eccl_tsp_objective obj, key a, key b)
{
    if (a.inf != b.inf) return a.inf < b.inf ? -1 : 1;
    double a1 = obj == ECCL_TSP_SUM ? a.sum : a.max, b1 = obj == ECCL_TSP_SUM ? b.sum : b.max;
    double a2 = obj == ECCL_TSP_SUM ? a.max : a.sum, b2 = obj == ECCL_TSP_SUM ? b.max : b.sum;
    if (a1 != b1) return a1 < b1 ? -1 : 1;
    if (a2 != b2) return a2 < b2 ? -1 : 1;
    return 0;
}

/* Best key over all (n-1)! rings, by next-permutation over 1..n-1. */
static key brute(const double *c, uint32_t n, eccl_tsp_objective obj)
{
    uint32_t t[16];
    for (uint32_t i = 0; i < n; i++) t[i] = i;
    key best = price(c, n, t);
    for (;;) {
        int i = (int)n - 2;
        while (i >= 1 && t[i] > t[i + 1]) i--;
        if (i < 1) break;
        int j = (int)n - 1;
        while (t[j] < t[i]) j--;
        uint32_t x = t[i];
        t[i] = t[j];
        t[j] = x;
        for (int a = i + 1, b = (int)n - 1; a < b; a++, b--) {
            x = t[a];
            t[a] = t[b];
            t[b] = x;
        }
        key k = price(c, n, t);
        if (key_cmp(obj, k, best) < 0) best = k;
    }
    return best;
}

static void assert_perm(const uint32_t *t, uint32_t n)
{
    uint8_t seen[ECCL_TSP_MAX_N] = {0};
    assert_int_equal(t[0], 0); /* canonical rotation */
    for (uint32_t i = 0; i < n; i++) {
        assert_true(t[i] < n);
        assert_false(seen[t[i]]);
        seen[t[i]] = 1;
    }
}

static void assert_result_matches(const double *c, uint32_t n, const uint32_t *t, const eccl_tsp_result *r)
{
    key k = price(c, n, t);
    assert_int_equal(k.inf, r->unmeasured);
    assert_true(k.sum == r->sum);
    assert_true(k.max == r->max);
}

static const eccl_tsp_objective OBJS[2] = {ECCL_TSP_BOTTLENECK, ECCL_TSP_SUM};

/* ---- exact ---------------------------------------------------------------- */

static void test_exact_vs_brute(void **state)
{
    (void)state;
    for (uint32_t n = 2; n <= 9; n++)
        for (int inst = 0; inst < 6; inst++)
            for (int o = 0; o < 2; o++) {
                int integers = inst % 2 == 0;
                double p_inf = inst >= 4 ? 0.3 : 0.0;
                double *c = random_matrix(n, 1000 * n + (uint64_t)inst, integers, p_inf);
                eccl_tsp_opts opts = {.objective = OBJS[o]};
                uint32_t t[16];
                eccl_tsp_result r;
                assert_int_equal(eccl_tsp_solve(n, c, &opts, t, &r), ECCL_OK);
                assert_perm(t, n);
                assert_true(r.exact);
                assert_result_matches(c, n, t, &r);
                key want = brute(c, n, OBJS[o]);
                if (key_cmp(OBJS[o], price(c, n, t), want) != 0)
                    fail_msg("n=%u inst=%d obj=%d: got (%u, %g, %g), brute force (%u, %g, %g)", n, inst, o,
                             r.unmeasured, r.sum, r.max, want.inf, want.sum, want.max);
                free(c);
            }
}

/* The two objectives disagree: a ring of one slow link and cheap others
 * (best sum) against a ring of uniformly middling links (best bottleneck). */
static void test_objectives_differ(void **state)
{
    (void)state;
    const uint32_t n = 4;
    double c[16];
    for (int i = 0; i < 16; i++) c[i] = 100;
    /* ring A: 0->1->2->3->0 = 1 + 1 + 1 + 20: sum 23, max 20
     * ring B: 0->3->1->2->0 = 10 + 10 + 1 + 10: sum 31, max 10
     * every other ring uses a link of 100 */
    c[0 * 4 + 1] = 1, c[1 * 4 + 2] = 1, c[2 * 4 + 3] = 1, c[3 * 4 + 0] = 20;
    c[0 * 4 + 3] = 10, c[3 * 4 + 1] = 10, c[2 * 4 + 0] = 10;
    uint32_t t[4];
    eccl_tsp_result r;
    eccl_tsp_opts sum = {.objective = ECCL_TSP_SUM}, bn = {.objective = ECCL_TSP_BOTTLENECK};
    assert_int_equal(eccl_tsp_solve(n, c, &sum, t, &r), ECCL_OK);
    assert_true(r.sum == 23 && r.max == 20);
    assert_int_equal(eccl_tsp_solve(n, c, &bn, t, &r), ECCL_OK);
    assert_true(r.max == 10);
    assert_true(r.sum == 31); /* 0->3->1->2->0 */
    key bs = brute(c, n, ECCL_TSP_BOTTLENECK);
    assert_true(bs.max == 10 && bs.sum == 31);
}

static void test_degenerate(void **state)
{
    (void)state;
    for (int o = 0; o < 2; o++)
        for (uint32_t exact = 0; exact <= 1; exact++) {
            /* exact_max_n = 1 switches Held–Karp off from n = 4; n <= 3 is
             * exact regardless */
            eccl_tsp_opts opts = {.objective = OBJS[o], .exact_max_n = exact ? 0 : 1};
            double c1[1] = {NAN};
            uint32_t t[3] = {7, 7, 7};
            eccl_tsp_result r;
            assert_int_equal(eccl_tsp_solve(1, c1, &opts, t, &r), ECCL_OK);
            assert_int_equal(t[0], 0);
            assert_true(r.sum == 0 && r.max == 0 && r.unmeasured == 0 && r.exact);

            double c2[4] = {0, 3, 5, 0};
            assert_int_equal(eccl_tsp_solve(2, c2, &opts, t, &r), ECCL_OK);
            assert_int_equal(t[0], 0);
            assert_int_equal(t[1], 1);
            assert_true(r.sum == 8 && r.max == 5);

            /* 0->1->2->0 = 1+1+1, 0->2->1->0 = 5+5+5 */
            double c3[9] = {0, 1, 5, 5, 0, 1, 1, 5, 0};
            assert_int_equal(eccl_tsp_solve(3, c3, &opts, t, &r), ECCL_OK);
            assert_int_equal(t[1], 1);
            assert_int_equal(t[2], 2);
            assert_true(r.sum == 3);
            c3[0 * 3 + 1] = 9; /* now the other direction wins */
            c3[1 * 3 + 0] = 0.5;
            c3[2 * 3 + 1] = 0.5;
            c3[0 * 3 + 2] = 0.5;
            assert_int_equal(eccl_tsp_solve(3, c3, &opts, t, &r), ECCL_OK);
            assert_int_equal(t[1], 2);
            assert_int_equal(t[2], 1);
            assert_true(r.sum == 1.5);
        }
}

/* ---- heuristic ------------------------------------------------------------ */

static void test_heuristic_vs_exact(void **state)
{
    (void)state;
    for (int o = 0; o < 2; o++) {
        int total = 0, same = 0, same_improved = 0;
        for (uint32_t n = 5; n <= 12; n++)
            for (int inst = 0; inst < 12; inst++) {
                double *c = random_matrix(n, 77 * n + (uint64_t)inst, inst % 2, inst % 4 == 3 ? 0.2 : 0);
                eccl_tsp_opts ex = {.objective = OBJS[o]};
                eccl_tsp_opts he = {.objective = OBJS[o], .exact_max_n = 1};
                uint32_t te[16], th[16], id[16];
                eccl_tsp_result re, rh, ri;
                assert_int_equal(eccl_tsp_solve(n, c, &ex, te, &re), ECCL_OK);
                assert_int_equal(eccl_tsp_solve(n, c, &he, th, &rh), ECCL_OK);
                assert_perm(th, n);
                assert_false(rh.exact);
                assert_result_matches(c, n, th, &rh);
                /* never better than optimal, never worse than the identity */
                assert_true(eccl_tsp_compare(OBJS[o], &re, &rh) <= 0);
                for (uint32_t i = 0; i < n; i++) id[i] = i;
                assert_int_equal(eccl_tsp_eval(n, c, NULL, id, &ri), ECCL_OK);
                assert_true(eccl_tsp_compare(OBJS[o], &rh, &ri) <= 0);
                total++;
                same += eccl_tsp_compare(OBJS[o], &re, &rh) == 0;
                /* the moonshot closes the rest of the gap */
                he.max_kicks = 200;
                he.seed = (uint64_t)inst;
                assert_int_equal(eccl_tsp_improve(n, c, &he, th, &rh), ECCL_OK);
                assert_perm(th, n);
                assert_result_matches(c, n, th, &rh);
                same_improved += eccl_tsp_compare(OBJS[o], &re, &rh) == 0;
                free(c);
            }
        print_message("objective %d: local search optimal on %d/%d, after 200 kicks %d/%d\n", o, same,
                      total, same_improved, total);
        assert_true(same * 10 >= total * 7);
        assert_true(same_improved * 100 >= total * 95);
    }
}

static void check_planted(uint32_t n, uint64_t seed)
{
    uint32_t *perm = malloc(n * sizeof *perm), *want = malloc(n * sizeof *want);
    uint32_t *t = malloc(n * sizeof *t);
    double *c = planted(n, seed, perm, 10.0, 100.0, 0);
    canon(perm, n, want);
    for (int o = 0; o < 2; o++) {
        eccl_tsp_opts opts = {.objective = OBJS[o]};
        eccl_tsp_result r;
        assert_int_equal(eccl_tsp_solve(n, c, &opts, t, &r), ECCL_OK);
        assert_memory_equal(t, want, n * sizeof *t);
        assert_false(r.stopped);

        /* from a random ring, local search and kicks alone must find it */
        uint64_t s = seed + 1;
        for (uint32_t i = 0; i < n; i++) t[i] = i;
        shuffle(t, n, &s);
        opts.seed = 5;
        opts.max_kicks = 2000;
        assert_int_equal(eccl_tsp_improve(n, c, &opts, t, &r), ECCL_OK);
        print_message("planted n=%u obj=%d from random: work %llu, kicks %llu (%llu kept)\n", n, o,
                      (unsigned long long)r.work, (unsigned long long)r.kicks, (unsigned long long)r.accepted);
        assert_memory_equal(t, want, n * sizeof *t);
    }
    free(c);
    free(t);
    free(want);
    free(perm);
}

static void test_planted_64(void **state)
{
    (void)state;
    check_planted(64, 64);
}

static void test_planted_500(void **state)
{
    (void)state;
    check_planted(500, 500);
}

/* Planted ring forward costs 1-2, backwards 1000, the rest 50: the mirror
 * image of the optimum is the worst ring there is. A solver that thinks
 * symmetrically (or 2-opt priced without re-pricing the reversed links)
 * happily returns either direction. */
static void test_reverse_is_bad(void **state)
{
    (void)state;
    const uint32_t sizes[2] = {10, 40};
    for (int z = 0; z < 2; z++)
        for (int o = 0; o < 2; o++) {
            uint32_t n = sizes[z], perm[40], want[40], t[40], rev[40];
            double *c = planted(n, 9 + (uint64_t)z, perm, 50.0, 50.0 + 1e-9, 1000.0);
            canon(perm, n, want);
            eccl_tsp_opts opts = {.objective = OBJS[o]};
            eccl_tsp_result r, rr;
            assert_int_equal(eccl_tsp_solve(n, c, &opts, t, &r), ECCL_OK);
            assert_int_equal(r.exact, n <= 12);
            assert_memory_equal(t, want, n * sizeof *t);
            for (uint32_t i = 0; i < n; i++) rev[i] = t[(n - i) % n];
            assert_int_equal(eccl_tsp_eval(n, c, NULL, rev, &rr), ECCL_OK);
            assert_true(rr.sum >= 1000.0 * n && r.sum < 2.0 * n);
            /* improving the mirror image must turn it round */
            opts.max_kicks = 50;
            assert_int_equal(eccl_tsp_improve(n, c, &opts, rev, &rr), ECCL_OK);
            assert_memory_equal(rev, want, n * sizeof *t);
            free(c);
        }
}

/* A sparse matrix (70% unmeasured) that still holds the planted finite
 * ring: no unmeasured link in the answer. And a peer nobody has measured a
 * link into: exactly one unmeasured link, the unavoidable one. */
static void test_unmeasured(void **state)
{
    (void)state;
    const uint32_t sizes[2] = {8, 60};
    for (int z = 0; z < 2; z++)
        for (int o = 0; o < 2; o++) {
            uint32_t n = sizes[z], perm[60], t[60];
            double *c = planted(n, 31 + (uint64_t)z, perm, 1.0, 100.0, 0);
            uint64_t s = 99;
            for (uint32_t i = 0; i < n; i++)
                for (uint32_t j = 0; j < n; j++)
                    if (i != j && unif(&s, 0, 1) < 0.7) c[(size_t)i * n + j] = INF;
            for (uint32_t k = 0; k < n; k++) /* keep the ring, at a middling cost */
                c[(size_t)perm[k] * n + perm[(k + 1) % n]] = 60.0;
            eccl_tsp_opts opts = {.objective = OBJS[o]};
            eccl_tsp_result r;
            assert_int_equal(eccl_tsp_solve(n, c, &opts, t, &r), ECCL_OK);
            assert_perm(t, n);
            assert_int_equal(r.unmeasured, 0);
            assert_result_matches(c, n, t, &r);

            for (uint32_t i = 0; i < n; i++) c[(size_t)i * n + 3] = INF;
            assert_int_equal(eccl_tsp_solve(n, c, &opts, t, &r), ECCL_OK);
            assert_int_equal(r.unmeasured, 1);
            assert_result_matches(c, n, t, &r);
            free(c);
        }
}

/* ---- budget, stop, determinism -------------------------------------------- */

static void test_budget(void **state)
{
    (void)state;
    const uint32_t n = 300;
    double *c = random_matrix(n, 4242, 0, 0);
    uint32_t t[300];
    const uint64_t budgets[] = {1, 1000, 50000, 300000, 2000000};
    for (int o = 0; o < 2; o++)
        for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
            eccl_tsp_opts opts = {.objective = OBJS[o], .max_work = budgets[b]};
            eccl_tsp_result r;
            assert_int_equal(eccl_tsp_solve(n, c, &opts, t, &r), ECCL_OK);
            assert_perm(t, n);
            assert_true(r.work <= budgets[b]);
            if (budgets[b] <= 1000) assert_true(r.stopped);
            /* improve under a budget */
            opts.seed = 1;
            assert_int_equal(eccl_tsp_improve(n, c, &opts, t, &r), ECCL_OK);
            assert_true(r.work <= budgets[b]);
            assert_true(r.stopped); /* no kick bound: only the budget ends it */
        }
    /* a budget below the greedy construction's sort (n*K*log2(n*K) = 36000
     * here) still buys nearest neighbour and some local search: far better
     * than the identity ring */
    for (int o = 0; o < 2; o++) {
        eccl_tsp_opts small = {.objective = OBJS[o], .max_work = 20000};
        eccl_tsp_result r, ri;
        uint32_t id[300];
        for (uint32_t i = 0; i < n; i++) id[i] = i;
        assert_int_equal(eccl_tsp_solve(n, c, &small, t, &r), ECCL_OK);
        assert_int_equal(eccl_tsp_eval(n, c, NULL, id, &ri), ECCL_OK);
        assert_true(r.sum < 0.5 * ri.sum);
    }
    /* unlimited: runs to a local optimum and says it was not cut short */
    eccl_tsp_opts opts = {0};
    eccl_tsp_result r;
    assert_int_equal(eccl_tsp_solve(n, c, &opts, t, &r), ECCL_OK);
    assert_false(r.stopped);
    assert_true(r.work > 0);
    /* max_kicks alone bounds improve */
    opts.max_kicks = 37;
    assert_int_equal(eccl_tsp_improve(n, c, &opts, t, &r), ECCL_OK);
    assert_int_equal(r.kicks, 37);
    assert_false(r.stopped);
    free(c);
}

typedef struct stopper {
    int calls, stop_at;
} stopper;

static int should_stop(void *arg)
{
    stopper *s = arg;
    return ++s->calls >= s->stop_at;
}

static void test_should_stop(void **state)
{
    (void)state;
    const uint32_t n = 400;
    double *c = random_matrix(n, 7, 0, 0);
    uint32_t t[400];
    for (int o = 0; o < 2; o++) {
        stopper st = {0, 3};
        eccl_tsp_opts opts = {.objective = OBJS[o], .should_stop = should_stop, .stop_arg = &st,
                              .poll_every = 5000};
        eccl_tsp_result r;
        assert_int_equal(eccl_tsp_solve(n, c, &opts, t, &r), ECCL_OK);
        assert_perm(t, n);
        assert_int_equal(st.calls, 3);
        assert_true(r.stopped);
        /* polled each time another poll_every units are spent; one charge
         * overshoots by at most the greedy construction's sort, n*K*log2(n*K)
         * with the default K = 10 (every other charge is at most 3n) */
        assert_true(r.work >= 3 * 5000);
        assert_true(r.work < 3 * (5000 + n * 10 * 12));

        /* should_stop alone bounds improve (it never ends otherwise); from
         * a local optimum, so that kicks start before the stop */
        eccl_tsp_opts full = {.objective = OBJS[o]};
        assert_int_equal(eccl_tsp_solve(n, c, &full, t, &r), ECCL_OK);
        st.calls = 0;
        st.stop_at = 40;
        opts.seed = 3;
        assert_int_equal(eccl_tsp_improve(n, c, &opts, t, &r), ECCL_OK);
        assert_int_equal(st.calls, 40);
        assert_true(r.stopped);
        assert_true(r.work < 40 * (5000 + 3 * n)); /* no charge above 3n here */
        assert_true(r.kicks > 0);
    }
    free(c);
}

static void test_determinism(void **state)
{
    (void)state;
    const uint32_t n = 200;
    double *c = random_matrix(n, 11, 0, 0.05);
    for (int o = 0; o < 2; o++) {
        uint32_t a[200], b[200];
        eccl_tsp_result ra, rb;
        eccl_tsp_opts opts = {.objective = OBJS[o], .max_work = 3000000};
        assert_int_equal(eccl_tsp_solve(n, c, &opts, a, &ra), ECCL_OK);
        assert_int_equal(eccl_tsp_solve(n, c, &opts, b, &rb), ECCL_OK);
        assert_memory_equal(a, b, sizeof a);
        assert_memory_equal(&ra, &rb, sizeof ra);
        opts.seed = 12345;
        assert_int_equal(eccl_tsp_improve(n, c, &opts, a, &ra), ECCL_OK);
        assert_int_equal(eccl_tsp_improve(n, c, &opts, b, &rb), ECCL_OK);
        assert_memory_equal(a, b, sizeof a);
        assert_memory_equal(&ra, &rb, sizeof ra);
        /* a rotated input is the same ring: same answer */
        uint32_t rot[200];
        assert_int_equal(eccl_tsp_solve(n, c, &opts, a, NULL), ECCL_OK);
        for (uint32_t i = 0; i < n; i++) rot[i] = a[(i + 77) % n];
        memcpy(b, a, sizeof a);
        assert_int_equal(eccl_tsp_improve(n, c, &opts, b, &rb), ECCL_OK);
        assert_int_equal(eccl_tsp_improve(n, c, &opts, rot, &ra), ECCL_OK);
        assert_memory_equal(rot, b, sizeof b);
    }
    free(c);
}

/* improve never returns a worse ring than it was given, whatever the
 * budget, and repeated calls with new seeds only get better. */
static void test_improve_monotone(void **state)
{
    (void)state;
    const uint32_t n = 150;
    double *c = random_matrix(n, 5150, 0, 0);
    for (int o = 0; o < 2; o++) {
        uint32_t t[150];
        eccl_tsp_result r0, r;
        eccl_tsp_opts opts = {.objective = OBJS[o], .max_work = 20000};
        assert_int_equal(eccl_tsp_solve(n, c, &opts, t, &r0), ECCL_OK);
        for (uint64_t seed = 1; seed <= 8; seed++) {
            opts.seed = seed;
            opts.max_work = 200000 * seed;
            assert_int_equal(eccl_tsp_improve(n, c, &opts, t, &r), ECCL_OK);
            assert_perm(t, n);
            assert_result_matches(c, n, t, &r);
            assert_true(eccl_tsp_compare(OBJS[o], &r, &r0) <= 0);
            r0 = r;
        }
    }
    free(c);
}

/* ---- errors ---------------------------------------------------------------- */

typedef struct counting {
    int allocs, frees, fail_at;
} counting;

static void *count_alloc(void *ctx, size_t bytes)
{
    counting *a = ctx;
    if (a->fail_at && a->allocs + 1 >= a->fail_at) return NULL;
    a->allocs++;
    return malloc(bytes);
}

static void count_release(void *ctx, void *p)
{
    counting *a = ctx;
    a->frees++;
    free(p);
}

static void test_invalid_args(void **state)
{
    (void)state;
    double c[25];
    for (int i = 0; i < 25; i++) c[i] = 1;
    uint32_t t[5] = {0, 1, 2, 3, 4};
    eccl_tsp_result r;
    eccl_tsp_opts ok = {.max_kicks = 1};
    assert_int_equal(eccl_tsp_solve(0, c, NULL, t, &r), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_tsp_solve(ECCL_TSP_MAX_N + 1, c, NULL, t, &r), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_tsp_solve(5, NULL, NULL, t, &r), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_tsp_solve(5, c, NULL, NULL, &r), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_tsp_improve(5, c, &ok, NULL, &r), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_tsp_eval(5, c, NULL, t, NULL), ECCL_ERR_INVALID_ARG);
    const double bad[] = {NAN, -1.0, -INF};
    for (int b = 0; b < 3; b++) {
        c[1 * 5 + 3] = bad[b];
        assert_int_equal(eccl_tsp_solve(5, c, NULL, t, &r), ECCL_ERR_INVALID_ARG);
        assert_int_equal(eccl_tsp_improve(5, c, &ok, t, &r), ECCL_ERR_INVALID_ARG);
        assert_int_equal(eccl_tsp_eval(5, c, NULL, t, &r), ECCL_ERR_INVALID_ARG);
    }
    c[1 * 5 + 3] = 1;
    c[2 * 5 + 2] = NAN; /* the diagonal is ignored */
    assert_int_equal(eccl_tsp_solve(5, c, NULL, t, &r), ECCL_OK);

    eccl_tsp_opts o = {.objective = (eccl_tsp_objective)7};
    assert_int_equal(eccl_tsp_solve(5, c, &o, t, &r), ECCL_ERR_INVALID_ARG);
    o = (eccl_tsp_opts){.exact_max_n = ECCL_TSP_EXACT_LIMIT + 1};
    assert_int_equal(eccl_tsp_solve(5, c, &o, t, &r), ECCL_ERR_INVALID_ARG);
    o = (eccl_tsp_opts){.neighbours = 65};
    assert_int_equal(eccl_tsp_solve(5, c, &o, t, &r), ECCL_ERR_INVALID_ARG);
    o = (eccl_tsp_opts){.alloc = count_alloc};
    assert_int_equal(eccl_tsp_solve(5, c, &o, t, &r), ECCL_ERR_INVALID_ARG);

    /* improve: no bound at all, or not a permutation (both paths) */
    assert_int_equal(eccl_tsp_improve(5, c, NULL, t, &r), ECCL_ERR_INVALID_ARG);
    for (uint32_t exact = 0; exact <= 1; exact++) {
        eccl_tsp_opts io = {.max_kicks = 1, .exact_max_n = exact ? 0 : 1};
        uint32_t dup[5] = {0, 1, 1, 3, 4}, big[5] = {0, 1, 2, 3, 5};
        assert_int_equal(eccl_tsp_improve(5, c, &io, dup, &r), ECCL_ERR_INVALID_ARG);
        assert_int_equal(eccl_tsp_improve(5, c, &io, big, &r), ECCL_ERR_INVALID_ARG);
        assert_memory_equal(dup, ((uint32_t[5]){0, 1, 1, 3, 4}), sizeof dup);
        assert_int_equal(eccl_tsp_eval(5, c, NULL, dup, &r), ECCL_ERR_INVALID_ARG);
    }
}

/* Every allocation failure comes back as NO_MEMORY with the tour untouched,
 * and every successful call frees what it took. */
static void test_no_memory(void **state)
{
    (void)state;
    const uint32_t sizes[3] = {6, 16, 40}; /* Held–Karp; Held–Karp at its limit; heuristic */
    for (int z = 0; z < 3; z++) {
        uint32_t n = sizes[z], t[40], keep[40];
        double *c = random_matrix(n, 3, 0, 0);
        for (uint32_t i = 0; i < n; i++) t[i] = keep[i] = (i * 7 + 3) % n;
        for (int call = 0; call < 3; call++) {
            for (int fail_at = 1; fail_at <= 3; fail_at++) {
                counting a = {0, 0, fail_at};
                eccl_tsp_opts o = {.alloc = count_alloc, .release = count_release, .alloc_ctx = &a,
                                   .exact_max_n = 16, .max_kicks = 3};
                eccl_tsp_result r;
                eccl_result rc = call == 0   ? eccl_tsp_solve(n, c, &o, t, &r)
                                 : call == 1 ? eccl_tsp_improve(n, c, &o, t, &r)
                                             : eccl_tsp_eval(n, c, &o, t, &r);
                assert_int_equal(a.allocs, a.frees);
                if (rc == ECCL_OK) {
                    assert_true(a.allocs < fail_at); /* it never got that far */
                    memcpy(t, keep, sizeof t);
                    continue;
                }
                assert_int_equal(rc, ECCL_ERR_NO_MEMORY);
                assert_memory_equal(t, keep, n * sizeof *t);
            }
            counting a = {0, 0, 0};
            eccl_tsp_opts o = {.alloc = count_alloc, .release = count_release, .alloc_ctx = &a,
                               .exact_max_n = 16, .max_kicks = 3};
            eccl_tsp_result r;
            eccl_result rc = call == 0   ? eccl_tsp_solve(n, c, &o, t, &r)
                             : call == 1 ? eccl_tsp_improve(n, c, &o, t, &r)
                                         : eccl_tsp_eval(n, c, &o, t, &r);
            assert_int_equal(rc, ECCL_OK);
            assert_true(a.allocs >= 1);
            assert_int_equal(a.allocs, a.frees);
            memcpy(t, keep, sizeof t);
        }
        free(c);
    }
}

static void test_eval_compare(void **state)
{
    (void)state;
    double c[9] = {0, 1, INF, 2, 0, 3, 4, 5, 0};
    uint32_t t[3] = {1, 2, 0}; /* rotation of 0 1 2: 1 + 3 + 4 */
    eccl_tsp_result r, q;
    assert_int_equal(eccl_tsp_eval(3, c, NULL, t, &r), ECCL_OK);
    assert_true(r.sum == 8 && r.max == 4 && r.unmeasured == 0);
    uint32_t u[3] = {0, 2, 1}; /* inf + 5 + 2 */
    assert_int_equal(eccl_tsp_eval(3, c, NULL, u, &q), ECCL_OK);
    assert_true(q.sum == 7 && q.max == 5 && q.unmeasured == 1);
    assert_true(eccl_tsp_compare(ECCL_TSP_SUM, &r, &q) < 0); /* fewer unmeasured wins */
    assert_true(eccl_tsp_compare(ECCL_TSP_BOTTLENECK, &q, &r) > 0);
    q.unmeasured = 0;
    assert_true(eccl_tsp_compare(ECCL_TSP_SUM, &q, &r) < 0);        /* 7 < 8 */
    assert_true(eccl_tsp_compare(ECCL_TSP_BOTTLENECK, &r, &q) < 0); /* 4 < 5 */
    assert_int_equal(eccl_tsp_compare(ECCL_TSP_SUM, &r, &r), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_vs_brute),
        cmocka_unit_test(test_objectives_differ),
        cmocka_unit_test(test_degenerate),
        cmocka_unit_test(test_heuristic_vs_exact),
        cmocka_unit_test(test_planted_64),
        cmocka_unit_test(test_planted_500),
        cmocka_unit_test(test_reverse_is_bad),
        cmocka_unit_test(test_unmeasured),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_should_stop),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_improve_monotone),
        cmocka_unit_test(test_invalid_args),
        cmocka_unit_test(test_no_memory),
        cmocka_unit_test(test_eval_compare),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
