#include "topo/tsp.h"
#include "util/rand.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEF_STARTS 4u
#define DEF_NEIGHBOURS 10u
#define MAX_NEIGHBOURS 64u
#define DEF_POLL 16384u
/* A kick exchanges two adjacent runs of at most this many peers: local
 * enough that the local search repairs it near where it happened. */
#define KICK_SPAN 50u
/* A move must lower the sum by this fraction of the links it removes. Far
 * above the rounding error of a six-term sum, so every accepted move lowers
 * the true (real-number) cost and the search cannot cycle on rounding. */
#define SUM_EPS 1e-12

/* ---- options -------------------------------------------------------------- */

typedef struct cfg {
    eccl_tsp_objective obj;
    uint32_t exact_max_n, starts, k;
    uint64_t max_work, max_kicks, seed, poll_every;
    int (*should_stop)(void *arg);
    void *stop_arg;
    void *(*alloc)(void *ctx, size_t bytes);
    void (*release)(void *ctx, void *ptr);
    void *actx;
} cfg;

static void *sys_alloc(void *ctx, size_t bytes)
{
    (void)ctx;
    return malloc(bytes);
}

static void sys_release(void *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
}

static eccl_result cfg_resolve(const eccl_tsp_opts *o, uint32_t n, cfg *c)
{
    eccl_tsp_opts zero;
    if (!o) {
        memset(&zero, 0, sizeof zero);
        o = &zero;
    }
    if (o->objective != ECCL_TSP_BOTTLENECK && o->objective != ECCL_TSP_SUM) return ECCL_ERR_INVALID_ARG;
    if (o->exact_max_n > ECCL_TSP_EXACT_LIMIT) return ECCL_ERR_INVALID_ARG;
    if (o->neighbours > MAX_NEIGHBOURS) return ECCL_ERR_INVALID_ARG;
    if (!o->alloc != !o->release) return ECCL_ERR_INVALID_ARG;
    c->obj = o->objective;
    c->exact_max_n = o->exact_max_n ? o->exact_max_n : ECCL_TSP_EXACT_DEFAULT;
    if (c->exact_max_n < 3) c->exact_max_n = 3;
    c->starts = o->starts ? o->starts : DEF_STARTS;
    if (c->starts > n) c->starts = n;
    c->k = o->neighbours ? o->neighbours : DEF_NEIGHBOURS;
    if (c->k > n - 1) c->k = n - 1;
    c->max_work = o->max_work;
    c->max_kicks = o->max_kicks;
    c->seed = o->seed;
    c->poll_every = o->poll_every ? o->poll_every : DEF_POLL;
    c->should_stop = o->should_stop;
    c->stop_arg = o->stop_arg;
    c->alloc = o->alloc ? o->alloc : sys_alloc;
    c->release = o->alloc ? o->release : sys_release;
    c->actx = o->alloc_ctx;
    return ECCL_OK;
}

static eccl_result check_args(uint32_t n, const double *cost, const void *tour)
{
    if (n == 0 || n > ECCL_TSP_MAX_N || !cost || !tour) return ECCL_ERR_INVALID_ARG;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < n; j++) {
            double v = cost[(size_t)i * n + j];
            /* !(v >= 0) also catches NaN; +inf (unmeasured) passes */
            if (i != j && !(v >= 0)) return ECCL_ERR_INVALID_ARG;
        }
    return ECCL_OK;
}

/* 1 when tour is a permutation of 0..n-1; seen is n bytes of scratch. */
static int is_perm(uint32_t n, const uint32_t *tour, uint8_t *seen)
{
    memset(seen, 0, n);
    for (uint32_t i = 0; i < n; i++) {
        if (tour[i] >= n || seen[tour[i]]) return 0;
        seen[tour[i]] = 1;
    }
    return 1;
}

/* ---- pricing whole tours -------------------------------------------------- */

static inline int is_inf(double v) { return v == (double)INFINITY; }
static inline double fin(double v) { return is_inf(v) ? 0.0 : v; }

/* Prices a tour (any rotation) from peer 0 onwards, so the sum's rounding
 * depends on the ring only. */
static void price(uint32_t n, const double *c, const uint32_t *t, eccl_tsp_result *r)
{
    memset(r, 0, sizeof *r);
    if (n < 2) return;
    uint32_t z = 0;
    while (t[z] != 0) z++;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t a = t[(z + k) % n], b = t[(z + k + 1) % n];
        double v = c[(size_t)a * n + b];
        if (is_inf(v)) {
            r->unmeasured++;
            continue;
        }
        r->sum += v;
        if (v > r->max) r->max = v;
    }
}

int eccl_tsp_compare(eccl_tsp_objective obj, const eccl_tsp_result *a, const eccl_tsp_result *b)
{
    if (a->unmeasured != b->unmeasured) return a->unmeasured < b->unmeasured ? -1 : 1;
    double a1 = obj == ECCL_TSP_SUM ? a->sum : a->max, b1 = obj == ECCL_TSP_SUM ? b->sum : b->max;
    double a2 = obj == ECCL_TSP_SUM ? a->max : a->sum, b2 = obj == ECCL_TSP_SUM ? b->max : b->sum;
    if (a1 != b1) return a1 < b1 ? -1 : 1;
    if (a2 != b2) return a2 < b2 ? -1 : 1;
    return 0;
}

/* Rotates t so that t[0] == 0; scratch is n entries. */
static void canonical(uint32_t n, const uint32_t *t, uint32_t *out)
{
    uint32_t z = 0;
    while (t[z] != 0) z++;
    for (uint32_t k = 0; k < n; k++) out[k] = t[(z + k) % n];
}

/* ---- Held–Karp ------------------------------------------------------------ */

/* dp over (set S of peers 1..n-1 visited, last peer j): the best path from
 * peer 0. Labels compare lexicographically: (unmeasured, a, b) where
 * HK_SUM: a = sum, b = max;  HK_MINMAX: a = max.  Both orders are monotone
 * under appending a link (IEEE rounding is monotone), so keeping one label
 * per state is exact. (max, sum) is NOT monotone — a path with a smaller
 * max but a larger sum can lose once a slower link joins both — which is why
 * the bottleneck objective runs HK_MINMAX for the optimum's slowest link B,
 * then HK_SUM over links no slower than B. Ties keep the first label found:
 * lowest predecessor, then lowest last peer. */
enum { HK_SUM, HK_MINMAX };
#define HK_NONE 0xffu

typedef struct hk {
    uint32_t n, m;
    const double *c;
    uint8_t *k;   /* unmeasured links so far; HK_NONE: unreachable */
    uint8_t *par; /* predecessor (0..m-1) */
    double *a, *b;
    uint64_t work;
} hk;

/* Extends label (k, a, b) by a link of cost v; 0 when the link is barred. */
static inline int hk_ext(int mode, double cap, uint32_t k, double a, double b, double v,
                         uint32_t *ok, double *oa, double *ob)
{
    if (is_inf(v)) {
        *ok = k + 1;
        *oa = a;
        *ob = b;
        return 1;
    }
    if (v > cap) return 0;
    *ok = k;
    if (mode == HK_SUM) {
        *oa = a + v;
        *ob = v > b ? v : b;
    } else {
        *oa = v > a ? v : a;
        *ob = 0;
    }
    return 1;
}

static inline int hk_less(uint32_t k1, double a1, double b1, uint32_t k2, double a2, double b2)
{
    if (k1 != k2) return k1 < k2;
    if (a1 != a2) return a1 < a2;
    return b1 < b2;
}

/* One pass; writes the best closing peer and label. Returns 0 when no tour
 * passes the cap (cannot happen for the caps used). */
static int hk_pass(hk *h, int mode, double cap, uint32_t *best_j, uint32_t *bk, double *ba, double *bb)
{
    const uint32_t n = h->n, m = h->m;
    const size_t states = (size_t)1 << m;
    const double *c = h->c;
    for (size_t s = 1; s < states; s++) {
        for (uint32_t j = 0; j < m; j++) {
            if (!(s >> j & 1)) continue;
            size_t at = s * m + j;
            size_t prev = s ^ ((size_t)1 << j);
            uint32_t kk;
            double aa, bb2;
            h->k[at] = HK_NONE;
            if (!prev) {
                if (hk_ext(mode, cap, 0, 0.0, 0.0, c[j + 1], &kk, &aa, &bb2)) {
                    h->k[at] = (uint8_t)kk;
                    h->a[at] = aa;
                    h->b[at] = bb2;
                    h->par[at] = HK_NONE;
                }
                h->work++;
                continue;
            }
            for (uint32_t i = 0; i < m; i++) {
                if (!(prev >> i & 1)) continue;
                size_t from = prev * m + i;
                h->work++;
                if (h->k[from] == HK_NONE) continue;
                if (!hk_ext(mode, cap, h->k[from], h->a[from], h->b[from],
                            c[(size_t)(i + 1) * n + (j + 1)], &kk, &aa, &bb2))
                    continue;
                if (h->k[at] == HK_NONE || hk_less(kk, aa, bb2, h->k[at], h->a[at], h->b[at])) {
                    h->k[at] = (uint8_t)kk;
                    h->a[at] = aa;
                    h->b[at] = bb2;
                    h->par[at] = (uint8_t)i;
                }
            }
        }
    }
    int found = 0;
    size_t full = states - 1;
    for (uint32_t j = 0; j < m; j++) {
        size_t at = full * m + j;
        uint32_t kk;
        double aa, bb2;
        h->work++;
        if (h->k[at] == HK_NONE) continue;
        if (!hk_ext(mode, cap, h->k[at], h->a[at], h->b[at], c[(size_t)(j + 1) * n], &kk, &aa, &bb2))
            continue;
        if (!found || hk_less(kk, aa, bb2, *bk, *ba, *bb)) {
            found = 1;
            *best_j = j;
            *bk = kk;
            *ba = aa;
            *bb = bb2;
        }
    }
    return found;
}

static eccl_result held_karp(uint32_t n, const double *c, const cfg *cf, uint32_t *tour, uint64_t *work)
{
    if (n == 1) {
        tour[0] = 0;
        return ECCL_OK;
    }
    hk h = {.n = n, .m = n - 1, .c = c};
    size_t cells = ((size_t)1 << h.m) * h.m;
    /* one block: the doubles first, so every array is aligned */
    uint8_t *blk = cf->alloc(cf->actx, cells * (2 * sizeof(double) + 2));
    if (!blk) return ECCL_ERR_NO_MEMORY;
    h.a = (double *)(void *)blk;
    h.b = h.a + cells;
    h.k = (uint8_t *)(h.b + cells);
    h.par = h.k + cells;

    uint32_t j = 0, kk = 0;
    double aa = 0, bb = 0;
    int found;
    if (cf->obj == ECCL_TSP_SUM) {
        found = hk_pass(&h, HK_SUM, (double)INFINITY, &j, &kk, &aa, &bb);
    } else {
        found = hk_pass(&h, HK_MINMAX, (double)INFINITY, &j, &kk, &aa, &bb);
        if (found) found = hk_pass(&h, HK_SUM, aa, &j, &kk, &aa, &bb);
    }
    if (found) {
        size_t s = ((size_t)1 << h.m) - 1;
        tour[0] = 0;
        for (uint32_t p = n - 1; p >= 1; p--) {
            tour[p] = j + 1;
            uint8_t pj = h.par[s * h.m + j];
            s ^= (size_t)1 << j;
            j = pj;
        }
    }
    *work = h.work;
    cf->release(cf->actx, blk);
    /* every matrix has a tour under an infinite cap, and the capped pass
     * admits the min-max optimum */
    return found ? ECCL_OK : ECCL_ERR_INVALID_ARG;
}

/* ---- local search state --------------------------------------------------- */

/* A link's standing in the local search is (penalty, cost). The penalty
 * packs counts of "levels" so lexicographic order is integer order:
 *   +inf (unmeasured)      w3
 *   cost > hi              w2   (slower than the tour's bottleneck)
 *   lo <= cost <= hi       w1   (at the bottleneck being squeezed out)
 * with w = n+1 so n links of one level never reach the next. Every level is
 * monotone in the cost, so candidate lists sorted by cost stay sorted by
 * standing. ECCL_TSP_SUM uses lo = hi = +inf: only unmeasured links weigh. */
typedef struct acc {
    int64_t pen;
    double sum;
} acc;

typedef struct gedge {
    double c;
    uint32_t i, j;
} gedge;

typedef struct ls {
    uint32_t n, k;
    const double *c;
    const cfg *cf;
    uint32_t *tour, *pos, *tmp, *best, *queue, *nb_out, *nb_in;
    uint32_t *succ, *pred, *uf; /* greedy construction */
    struct gedge *edges;        /* greedy construction: the candidate links */
    uint8_t *inq;
    double *pf, *pb;  /* prefix sums of link costs along the tour: forward, reversed */
    int64_t *qf, *qb; /* the same for penalties */
    uint32_t qhead, qlen;
    double lo, hi;
    int64_t w1, w2, w3;
    uint64_t work, next_poll;
    int stopped;
    uint64_t rng;
} ls;

static inline double cst(const ls *x, uint32_t i, uint32_t j) { return x->c[(size_t)i * x->n + j]; }

static inline int64_t pen_of(const ls *x, double v)
{
    if (is_inf(v)) return x->w3;
    if (v > x->hi) return x->w2;
    if (v >= x->lo) return x->w1;
    return 0;
}

static inline void acc_add(const ls *x, acc *s, double v)
{
    s->pen += pen_of(x, v);
    s->sum += fin(v);
}

static inline int acc_better(acc add, acc rem)
{
    if (add.pen != rem.pen) return add.pen < rem.pen;
    return add.sum < rem.sum - SUM_EPS * rem.sum;
}

/* Takes `units` of work, or says no: the budget is spent (the search ends
 * without spending it) or should_stop said so. */
static int take(ls *x, uint64_t units)
{
    if (x->stopped) return 0;
    if (x->cf->max_work && (x->work + units > x->cf->max_work || x->work + units < x->work)) {
        x->stopped = 1;
        return 0;
    }
    x->work += units;
    if (x->cf->should_stop && x->work >= x->next_poll) {
        x->next_poll = x->work + x->cf->poll_every;
        if (x->cf->should_stop(x->cf->stop_arg)) {
            x->stopped = 1;
            return 0;
        }
    }
    return 1;
}

/* Whether the budget could pay for `units` now (nothing is taken). */
static int affordable(const ls *x, uint64_t units)
{
    return !x->stopped && (!x->cf->max_work || x->cf->max_work - x->work >= units);
}

/* position helpers: r is an offset from position p0 along the tour */
static inline uint32_t at(const ls *x, uint32_t p0, uint32_t r)
{
    uint32_t q = p0 + r;
    while (q >= x->n) q -= x->n;
    return x->tour[q];
}

static inline uint32_t rel(const ls *x, uint32_t p0, uint32_t v)
{
    uint32_t p = x->pos[v];
    return p >= p0 ? p - p0 : p + x->n - p0;
}

static void rebuild(ls *x)
{
    const uint32_t n = x->n;
    for (uint32_t i = 0; i < n; i++) x->pos[x->tour[i]] = i;
    x->pf[0] = x->pb[0] = 0;
    x->qf[0] = x->qb[0] = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t a = x->tour[i], b = x->tour[i + 1 == n ? 0 : i + 1];
        double f = cst(x, a, b), r = cst(x, b, a);
        x->pf[i + 1] = x->pf[i] + fin(f);
        x->pb[i + 1] = x->pb[i] + fin(r);
        x->qf[i + 1] = x->qf[i] + pen_of(x, f);
        x->qb[i + 1] = x->qb[i] + pen_of(x, r);
    }
}

/* Penalties depend on the levels, so the prefix arrays are rebuilt. */
static void set_levels(ls *x, double lo, double hi)
{
    x->lo = lo;
    x->hi = hi;
    rebuild(x);
}

/* The tmp array becomes the tour. */
static void commit(ls *x)
{
    uint32_t *t = x->tour;
    x->tour = x->tmp;
    x->tmp = t;
    rebuild(x);
}

static void push(ls *x, uint32_t v)
{
    if (x->inq[v]) return;
    x->inq[v] = 1;
    uint32_t q = x->qhead + x->qlen;
    if (q >= x->n) q -= x->n;
    x->queue[q] = v;
    x->qlen++;
}

static uint32_t pop(ls *x)
{
    uint32_t v = x->queue[x->qhead];
    if (++x->qhead == x->n) x->qhead = 0;
    x->qlen--;
    x->inq[v] = 0;
    return v;
}

/* Pushes v and the two peers before it: the run starts whose or-opt moves
 * touch the link out of v. */
static void push_around(ls *x, uint32_t v)
{
    uint32_t p = x->pos[v];
    push(x, v);
    push(x, at(x, p, x->n - 1));
    push(x, at(x, p, x->n - 2));
}

static void push_all(ls *x)
{
    for (uint32_t i = 0; i < x->n; i++) push(x, x->tour[i]);
}

/* Segment exchange from position p1: t1 | [1..r3] | [r3+1..r5] | rest
 * becomes t1 [r3+1..r5] [1..r3] rest. */
static void apply_swap(ls *x, uint32_t p1, uint32_t r3, uint32_t r5)
{
    uint32_t k = 0;
    x->tmp[k++] = at(x, p1, 0);
    for (uint32_t r = r3 + 1; r <= r5; r++) x->tmp[k++] = at(x, p1, r);
    for (uint32_t r = 1; r <= r3; r++) x->tmp[k++] = at(x, p1, r);
    for (uint32_t r = r5 + 1; r < x->n; r++) x->tmp[k++] = at(x, p1, r);
    commit(x);
}

/* 2-opt from position p1: t1 | [1..r3] reversed | rest. */
static void apply_rev(ls *x, uint32_t p1, uint32_t r3)
{
    uint32_t k = 0;
    x->tmp[k++] = at(x, p1, 0);
    for (uint32_t r = r3; r >= 1; r--) x->tmp[k++] = at(x, p1, r);
    for (uint32_t r = r3 + 1; r < x->n; r++) x->tmp[k++] = at(x, p1, r);
    commit(x);
}

/* Sum and penalty of the `len` links starting at tour position p, forward
 * (P, Q = pf, qf) or reversed (pb, qb), from the prefix arrays. */
static void seg_prefix(const ls *x, const double *P, const int64_t *Q, uint32_t p, uint32_t len, acc *s)
{
    uint32_t e = p + len, n = x->n;
    if (e <= n) {
        s->sum += P[e] - P[p];
        s->pen += Q[e] - Q[p];
    } else {
        s->sum += (P[n] - P[p]) + P[e - n];
        s->pen += (Q[n] - Q[p]) + Q[e - n];
    }
}

/* ---- moves ---------------------------------------------------------------- */

/* Or-opt: moves the run of len peers starting at v (v..e, between p and nx)
 * to between xx and y, keeping its direction. Candidates: xx among v's
 * cheapest in-links, or y among e's cheapest out-links. */
static int try_oropt(ls *x, uint32_t v)
{
    const uint32_t n = x->n, K = x->k;
    uint32_t pv = x->pos[v];
    uint32_t pp = pv ? pv - 1 : n - 1; /* position of p */
    uint32_t p = x->tour[pp];
    for (uint32_t len = 1; len <= 3 && len + 2 <= n; len++) {
        uint32_t e = at(x, pp, len), nx = at(x, pp, len + 1);
        double c_pv = cst(x, p, v), c_enx = cst(x, e, nx);
        for (int side = 0; side < 2; side++) {
            const uint32_t *nb = side == 0 ? x->nb_in + (size_t)v * K : x->nb_out + (size_t)e * K;
            for (uint32_t i = 0; i < K; i++) {
                uint32_t xx, y, rx;
                if (side == 0) {
                    xx = nb[i];
                    if (cst(x, xx, v) >= c_pv) break;
                    rx = rel(x, pp, xx);
                    if (rx < len + 1) continue;
                    y = at(x, pp, rx + 1);
                } else {
                    y = nb[i];
                    if (cst(x, e, y) >= c_enx) break;
                    uint32_t ry = rel(x, pp, y);
                    rx = ry ? ry - 1 : n - 1;
                    if (rx < len + 1) continue;
                    xx = at(x, pp, rx);
                }
                if (!take(x, 1)) return 0;
                acc rem = {0, 0}, add = {0, 0};
                acc_add(x, &rem, c_pv);
                acc_add(x, &rem, c_enx);
                acc_add(x, &rem, cst(x, xx, y));
                acc_add(x, &add, cst(x, p, nx));
                acc_add(x, &add, cst(x, xx, v));
                acc_add(x, &add, cst(x, e, y));
                if (!acc_better(add, rem)) continue;
                if (!take(x, n)) return 0;
                apply_swap(x, pp, len, rx);
                push(x, v);
                push_around(x, p);
                push_around(x, e);
                push_around(x, xx);
                return 1;
            }
        }
    }
    return 0;
}

/* Segment exchange: removes t1->t2, t3->t4, t5->t6 (in tour order), adds
 * t1->t4, t5->t2, t3->t6: t1 [t2..t3] [t4..t5] t6 -> t1 [t4..t5] [t2..t3] t6.
 * t4 among t1's cheapest out-links (and cheaper than t1->t2); then t5 among
 * t2's cheapest in-links, or t6 among t3's cheapest out-links. */
static int try_swap(ls *x, uint32_t t1)
{
    const uint32_t n = x->n, K = x->k;
    uint32_t p1 = x->pos[t1];
    uint32_t t2 = at(x, p1, 1);
    double c12 = cst(x, t1, t2);
    const uint32_t *n1 = x->nb_out + (size_t)t1 * K;
    for (uint32_t i = 0; i < K; i++) {
        uint32_t t4 = n1[i];
        double c14 = cst(x, t1, t4);
        if (c14 >= c12) break;
        uint32_t r4 = rel(x, p1, t4);
        if (r4 < 2) continue;
        uint32_t t3 = at(x, p1, r4 - 1);
        double c34 = cst(x, t3, t4);
        for (int side = 0; side < 2; side++) {
            const uint32_t *nb = side == 0 ? x->nb_in + (size_t)t2 * K : x->nb_out + (size_t)t3 * K;
            for (uint32_t j = 0; j < K; j++) {
                uint32_t t5, t6, r5;
                if (side == 0) {
                    t5 = nb[j];
                    r5 = rel(x, p1, t5);
                    if (r5 < r4) continue; /* also t5 == t1 (r5 == 0) */
                    t6 = at(x, p1, r5 + 1);
                } else {
                    t6 = nb[j];
                    uint32_t r6 = rel(x, p1, t6);
                    if (r6 == 0) r6 = n;
                    if (r6 < r4 + 1) continue;
                    r5 = r6 - 1;
                    t5 = at(x, p1, r5);
                }
                if (!take(x, 1)) return 0;
                acc rem = {0, 0}, add = {0, 0};
                acc_add(x, &rem, c12);
                acc_add(x, &rem, c34);
                acc_add(x, &rem, cst(x, t5, t6));
                acc_add(x, &add, c14);
                acc_add(x, &add, cst(x, t5, t2));
                acc_add(x, &add, cst(x, t3, t6));
                if (!acc_better(add, rem)) continue;
                if (!take(x, n)) return 0;
                apply_swap(x, p1, r4 - 1, r5);
                push_around(x, t1);
                push_around(x, t3);
                push_around(x, t5);
                return 1;
            }
        }
    }
    return 0;
}

/* 2-opt: removes t1->t2 and t3->t4, reverses t2..t3, adds t1->t3, t2->t4.
 * In an ATSP the reversed links change cost, so the move is priced from
 * prefix sums of the tour in both directions, then — when it looks like a
 * gain — re-priced link by link, since prefix differences round. */
static int try_2opt(ls *x, uint32_t t1)
{
    const uint32_t n = x->n, K = x->k;
    uint32_t p1 = x->pos[t1];
    uint32_t t2 = at(x, p1, 1);
    double c12 = cst(x, t1, t2);
    const uint32_t *n1 = x->nb_out + (size_t)t1 * K;
    double tol = 1e-9 * (x->pf[n] + x->pb[n]);
    for (uint32_t i = 0; i < K; i++) {
        uint32_t t3 = n1[i];
        double c13 = cst(x, t1, t3);
        if (c13 >= c12) break;
        uint32_t r3 = rel(x, p1, t3);
        if (r3 < 2) continue;
        uint32_t t4 = at(x, p1, r3 + 1);
        if (!take(x, 1)) return 0;
        uint32_t ps = p1 + 1 == n ? 0 : p1 + 1; /* position of t2: the segment's first link */
        acc rem = {0, 0}, add = {0, 0};
        acc_add(x, &rem, c12);
        acc_add(x, &rem, cst(x, t3, t4));
        acc_add(x, &add, c13);
        acc_add(x, &add, cst(x, t2, t4));
        seg_prefix(x, x->pf, x->qf, ps, r3 - 1, &rem);
        seg_prefix(x, x->pb, x->qb, ps, r3 - 1, &add);
        if (add.pen > rem.pen) continue;
        if (add.pen == rem.pen) {
            if (add.sum >= rem.sum + tol) continue;
            /* exact re-pricing, in a fixed order */
            if (!take(x, r3)) return 0;
            acc er = {0, 0}, ea = {0, 0};
            acc_add(x, &er, c12);
            acc_add(x, &er, cst(x, t3, t4));
            acc_add(x, &ea, c13);
            acc_add(x, &ea, cst(x, t2, t4));
            for (uint32_t r = 1; r < r3; r++) {
                uint32_t a = at(x, p1, r), b = at(x, p1, r + 1);
                acc_add(x, &er, cst(x, a, b));
                acc_add(x, &ea, cst(x, b, a));
            }
            if (!acc_better(ea, er)) continue;
        }
        if (!take(x, n)) return 0;
        apply_rev(x, p1, r3);
        push_around(x, t1);
        push_around(x, t2);
        push_around(x, t3);
        return 1;
    }
    return 0;
}

/* First improvement from one peer; 1 when a move was made. */
static int try_node(ls *x, uint32_t v)
{
    return try_oropt(x, v) || try_swap(x, v) || try_2opt(x, v);
}

/* Local search under the current levels until the queue is empty or the
 * budget ends. */
static void ls_run(ls *x)
{
    while (x->qlen && !x->stopped) try_node(x, pop(x));
    x->qhead = x->qlen = 0;
    for (uint32_t i = 0; i < x->n; i++) x->inq[i] = 0;
}

static void tour_price(const ls *x, eccl_tsp_result *r) { price(x->n, x->c, x->tour, r); }

/* Local search for the objective. Bottleneck: squeeze the slowest link —
 * links at or above the current max count as bad, so the search removes
 * them while it can, and each success lowers the max and goes again — then
 * minimise the sum with nothing slower than the max allowed. */
static void ls_full(ls *x)
{
    const double inf = (double)INFINITY;
    if (x->cf->obj == ECCL_TSP_SUM) {
        set_levels(x, inf, inf);
        push_all(x);
        ls_run(x);
        return;
    }
    eccl_tsp_result r;
    tour_price(x, &r);
    for (int first = 1; !x->stopped; first = 0) {
        set_levels(x, r.max, r.max);
        if (first) {
            push_all(x);
        } else {
            /* only the links at the new bottleneck are news */
            for (uint32_t i = 0; i < x->n; i++) {
                uint32_t a = x->tour[i], b = x->tour[i + 1 == x->n ? 0 : i + 1];
                if (pen_of(x, cst(x, a, b))) {
                    push(x, a);
                    push(x, b);
                    uint32_t p = i ? i - 1 : x->n - 1;
                    push(x, x->tour[p]);
                    push(x, x->tour[p ? p - 1 : x->n - 1]);
                }
            }
        }
        if (!take(x, x->n)) return;
        ls_run(x);
        eccl_tsp_result after;
        tour_price(x, &after);
        int progress = after.unmeasured < r.unmeasured ||
                       (after.unmeasured == r.unmeasured && after.max < r.max);
        r = after;
        if (!progress) break;
    }
    if (!take(x, x->n)) return;
    set_levels(x, inf, r.max);
    push_all(x);
    ls_run(x);
}

/* ---- construction --------------------------------------------------------- */

/* K cheapest out- and in-links of every peer, ordered by (cost, peer). */
static void build_neighbours(ls *x)
{
    const uint32_t n = x->n, K = x->k;
    const double *c = x->c;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t *l = x->nb_out + (size_t)i * K, cnt = 0;
        const double *row = c + (size_t)i * n;
        for (uint32_t j = 0; j < n; j++) {
            if (j == i) continue;
            double v = row[j];
            if (cnt == K && !(v < row[l[K - 1]])) continue;
            uint32_t q = cnt < K ? cnt++ : K - 1;
            while (q > 0 && row[l[q - 1]] > v) {
                l[q] = l[q - 1];
                q--;
            }
            l[q] = j;
        }
    }
    /* in-lists in one row-major pass; worst[j] caches list j's last cost */
    uint32_t *cnt = x->queue;
    double *worst = x->pf;
    memset(cnt, 0, (size_t)n * sizeof *cnt);
    for (uint32_t i = 0; i < n; i++) {
        const double *row = c + (size_t)i * n;
        for (uint32_t j = 0; j < n; j++) {
            if (j == i) continue;
            double v = row[j];
            if (cnt[j] == K && !(v < worst[j])) continue;
            uint32_t *l = x->nb_in + (size_t)j * K;
            uint32_t q = cnt[j] < K ? cnt[j]++ : K - 1;
            while (q > 0 && c[(size_t)l[q - 1] * n + j] > v) {
                l[q] = l[q - 1];
                q--;
            }
            l[q] = i;
            worst[j] = c[(size_t)l[cnt[j] - 1] * n + j];
        }
    }
}

/* Nearest neighbour from s, ties to the lower peer. The first unvisited
 * entry of the candidate list is the nearest unvisited peer overall; only
 * when the whole list is visited does a step scan the row. If the budget
 * ends, the unvisited peers follow in index order. */
static void nearest_neighbour(ls *x, uint32_t s)
{
    const uint32_t n = x->n, K = x->k;
    uint8_t *seen = x->inq;
    memset(seen, 0, n);
    x->tour[0] = s;
    seen[s] = 1;
    uint32_t cur = s, k = 1;
    for (; k < n; k++) {
        uint32_t next = n;
        const uint32_t *l = x->nb_out + (size_t)cur * K;
        uint32_t i = 0;
        for (; i < K && seen[l[i]]; i++) {}
        if (!take(x, i < K ? i + 1 : K + n)) break;
        if (i < K) {
            next = l[i];
        } else {
            const double *row = x->c + (size_t)cur * n;
            for (uint32_t j = 0; j < n; j++)
                if (!seen[j] && (next == n || row[j] < row[next])) next = j;
        }
        x->tour[k] = cur = next;
        seen[next] = 1;
    }
    for (uint32_t j = 0; j < n && k < n; j++)
        if (!seen[j]) x->tour[k++] = j;
    memset(seen, 0, n);
    rebuild(x);
}

static int gedge_cmp(const void *a, const void *b)
{
    const gedge *p = a, *q = b;
    if (p->c != q->c) return p->c < q->c ? -1 : 1;
    if (p->i != q->i) return p->i < q->i ? -1 : 1;
    return p->j < q->j ? -1 : p->j > q->j;
}

static uint32_t uf_find(uint32_t *uf, uint32_t v)
{
    while (uf[v] != v) {
        uf[v] = uf[uf[v]];
        v = uf[v];
    }
    return v;
}

/* Greedy matching: the candidate links, cheapest first, each taken when its
 * tail has no successor yet, its head no predecessor, and it closes no
 * cycle; then the fragments are chained, each tail to the cheapest unused
 * fragment head. Better than nearest neighbour on ATSP, whose last steps are
 * forced onto whatever links are left. Returns 0, having built and spent
 * nothing, when the budget cannot pay for the sort. */
static int greedy(ls *x)
{
    const uint32_t n = x->n, K = x->k;
    size_t m = 0, nk = (size_t)n * K;
    uint64_t lg = 1;
    while (((size_t)1 << lg) < nk) lg++;
    if (!affordable(x, nk * lg) || !take(x, nk * lg)) return 0;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < K; k++) {
            uint32_t j = x->nb_out[(size_t)i * K + k];
            double v = cst(x, i, j);
            if (is_inf(v)) break; /* the join below covers what is left */
            x->edges[m++] = (gedge){v, i, j};
        }
    qsort(x->edges, m, sizeof *x->edges, gedge_cmp);
    for (uint32_t v = 0; v < n; v++) {
        x->succ[v] = x->pred[v] = n;
        x->uf[v] = v;
    }
    for (size_t e = 0; e < m; e++) {
        uint32_t i = x->edges[e].i, j = x->edges[e].j;
        if (x->succ[i] != n || x->pred[j] != n) continue;
        uint32_t ri = uf_find(x->uf, i), rj = uf_find(x->uf, j);
        if (ri == rj) continue;
        x->uf[ri] = rj;
        x->succ[i] = j;
        x->pred[j] = i;
    }
    /* fragment heads, in index order; the chain starts with 0's fragment */
    uint32_t *heads = x->queue, f = 0;
    for (uint32_t v = 0; v < n; v++)
        if (x->pred[v] == n) heads[f++] = v;
    uint32_t h = uf_find(x->uf, 0), k = 0, left = f;
    for (uint32_t i = 0; i < f; i++)
        if (uf_find(x->uf, heads[i]) == h) {
            h = heads[i];
            heads[i] = n; /* used */
            break;
        }
    for (;;) {
        for (uint32_t v = h; v != n; v = x->succ[v]) x->tour[k++] = v;
        if (--left == 0) break;
        uint32_t tail = x->tour[k - 1], pick = f;
        if (take(x, f)) {
            for (uint32_t i = 0; i < f; i++)
                if (heads[i] != n && (pick == f || cst(x, tail, heads[i]) < cst(x, tail, heads[pick]))) pick = i;
        } else {
            for (uint32_t i = 0; i < f && pick == f; i++)
                if (heads[i] != n) pick = i;
        }
        h = heads[pick];
        heads[pick] = n;
    }
    rebuild(x);
    return 1;
}

/* Kick: exchanges two adjacent runs of peers (the ATSP double bridge: three
 * links change, no reversal). Half the kicks are local — runs of at most
 * KICK_SPAN peers at a random place, which the local search repairs nearby —
 * and half global, three cut points anywhere: they reorder whole fragments,
 * which no move of the local search can do in one step. */
static void kick(ls *x)
{
    const uint32_t n = x->n;
    uint32_t p1 = (uint32_t)(eccl_splitmix64(&x->rng) % n), r3, r5;
    if (eccl_splitmix64(&x->rng) & 1) {
        uint32_t span = (n - 1) / 2 < KICK_SPAN ? (n - 1) / 2 : KICK_SPAN;
        r3 = 1 + (uint32_t)(eccl_splitmix64(&x->rng) % span);
        r5 = r3 + 1 + (uint32_t)(eccl_splitmix64(&x->rng) % span);
    } else {
        r3 = 1 + (uint32_t)(eccl_splitmix64(&x->rng) % (n - 2));
        r5 = r3 + 1 + (uint32_t)(eccl_splitmix64(&x->rng) % (n - 1 - r3));
    }
    uint32_t t1 = at(x, p1, 0), t3 = at(x, p1, r3), t5 = at(x, p1, r5);
    apply_swap(x, p1, r3, r5);
    push_around(x, t1);
    push_around(x, t3);
    push_around(x, t5);
}

/* ---- entry points --------------------------------------------------------- */

static eccl_result ls_init(ls *x, uint32_t n, const double *c, const cfg *cf, void **blk)
{
    memset(x, 0, sizeof *x);
    x->n = n;
    x->k = cf->k;
    x->c = c;
    x->cf = cf;
    x->next_poll = cf->poll_every;
    x->rng = cf->seed;
    x->w1 = 1;
    x->w2 = (int64_t)n + 1;
    x->w3 = x->w2 * x->w2;
    /* doubles and int64 first, then uint32, then bytes: all aligned */
    size_t n1 = (size_t)n + 1, nk = (size_t)n * cf->k;
    size_t bytes = 4 * n1 * 8 + nk * sizeof(gedge) + (8 * (size_t)n + 2 * nk) * 4 + n;
    uint8_t *b = cf->alloc(cf->actx, bytes);
    if (!b) return ECCL_ERR_NO_MEMORY;
    *blk = b;
    x->pf = (double *)(void *)b;
    x->pb = x->pf + n1;
    x->qf = (int64_t *)(void *)(x->pb + n1);
    x->qb = x->qf + n1;
    x->edges = (gedge *)(void *)(x->qb + n1);
    x->tour = (uint32_t *)(void *)(x->edges + nk);
    x->pos = x->tour + n;
    x->tmp = x->pos + n;
    x->best = x->tmp + n;
    x->queue = x->best + n;
    x->succ = x->queue + n;
    x->pred = x->succ + n;
    x->uf = x->pred + n;
    x->nb_out = x->uf + n;
    x->nb_in = x->nb_out + nk;
    x->inq = (uint8_t *)(x->nb_in + nk);
    memset(x->inq, 0, n);
    x->lo = x->hi = (double)INFINITY;
    build_neighbours(x);
    return ECCL_OK;
}

static void fill_result(eccl_tsp_result *res, uint32_t n, const double *c, const uint32_t *tour)
{
    if (res) price(n, c, tour, res);
}

eccl_result eccl_tsp_solve(uint32_t n, const double *cost, const eccl_tsp_opts *opts,
                           uint32_t *tour, eccl_tsp_result *result)
{
    cfg cf;
    eccl_result rc = check_args(n, cost, tour);
    if (rc == ECCL_OK) rc = cfg_resolve(opts, n, &cf);
    if (rc != ECCL_OK) return rc;

    if (n <= cf.exact_max_n) {
        uint64_t work = 0;
        /* into a scratch copy: on error the caller's tour is untouched */
        uint32_t *t = cf.alloc(cf.actx, (size_t)n * sizeof *t);
        if (!t) return ECCL_ERR_NO_MEMORY;
        rc = held_karp(n, cost, &cf, t, &work);
        if (rc == ECCL_OK) {
            memcpy(tour, t, (size_t)n * sizeof *t);
            fill_result(result, n, cost, tour);
            if (result) {
                result->exact = 1;
                result->work = work;
            }
        }
        cf.release(cf.actx, t);
        return rc;
    }

    ls x;
    void *blk = NULL;
    rc = ls_init(&x, n, cost, &cf, &blk);
    if (rc != ECCL_OK) return rc;
    eccl_tsp_result best, cur;
    /* the identity ring is the floor: never return worse */
    for (uint32_t i = 0; i < n; i++) x.best[i] = i;
    price(n, cost, x.best, &best);
    /* start 0: greedy matching (or, when the budget cannot pay for its sort,
     * the much cheaper nearest neighbour from peer 0); the others: nearest
     * neighbour */
    for (uint32_t s = 0; s < cf.starts && !x.stopped; s++) {
        if (s > 0 || !greedy(&x)) {
            if (x.stopped) break;
            nearest_neighbour(&x, (uint32_t)((uint64_t)s * n / cf.starts));
        }
        ls_full(&x);
        tour_price(&x, &cur);
        if (eccl_tsp_compare(cf.obj, &cur, &best) < 0) {
            best = cur;
            memcpy(x.best, x.tour, (size_t)n * sizeof *x.best);
        }
    }
    canonical(n, x.best, tour);
    fill_result(result, n, cost, tour);
    if (result) {
        result->stopped = x.stopped;
        result->work = x.work;
    }
    cf.release(cf.actx, blk);
    return ECCL_OK;
}

eccl_result eccl_tsp_improve(uint32_t n, const double *cost, const eccl_tsp_opts *opts,
                             uint32_t *tour, eccl_tsp_result *result)
{
    cfg cf;
    eccl_result rc = check_args(n, cost, tour);
    if (rc == ECCL_OK) rc = cfg_resolve(opts, n, &cf);
    if (rc != ECCL_OK) return rc;
    if (!cf.max_work && !cf.max_kicks && !cf.should_stop) return ECCL_ERR_INVALID_ARG;

    if (n <= cf.exact_max_n) {
        uint8_t *seen = cf.alloc(cf.actx, (size_t)n);
        if (!seen) return ECCL_ERR_NO_MEMORY;
        int ok = is_perm(n, tour, seen);
        cf.release(cf.actx, seen);
        if (!ok) return ECCL_ERR_INVALID_ARG;
        return eccl_tsp_solve(n, cost, opts, tour, result);
    }

    ls x;
    void *blk = NULL;
    rc = ls_init(&x, n, cost, &cf, &blk);
    if (rc != ECCL_OK) return rc;
    if (!is_perm(n, tour, x.inq)) {
        cf.release(cf.actx, blk);
        return ECCL_ERR_INVALID_ARG;
    }
    memset(x.inq, 0, n);
    eccl_tsp_result best, cur;
    uint64_t kicks = 0, accepted = 0;
    /* from the canonical rotation: a rotated input is the same ring and
     * must give the same search */
    canonical(n, tour, x.tour);
    memcpy(x.best, x.tour, (size_t)n * sizeof *x.best);
    price(n, cost, x.best, &best);
    rebuild(&x);
    ls_full(&x);
    tour_price(&x, &cur);
    if (eccl_tsp_compare(cf.obj, &cur, &best) < 0) {
        best = cur;
        memcpy(x.best, x.tour, (size_t)n * sizeof *x.best);
    } else {
        memcpy(x.tour, x.best, (size_t)n * sizeof *x.tour);
    }
    const double inf = (double)INFINITY;
    while (!x.stopped && (!cf.max_kicks || kicks < cf.max_kicks)) {
        /* x.tour == x.best here */
        if (cf.obj == ECCL_TSP_SUM)
            set_levels(&x, inf, inf);
        else
            set_levels(&x, best.max, best.max);
        /* a kick rewrites the tour, prices it, and keeps or reverts it */
        if (!take(&x, 3 * (uint64_t)n)) break;
        kick(&x);
        kicks++;
        ls_run(&x);
        tour_price(&x, &cur);
        if (eccl_tsp_compare(cf.obj, &cur, &best) < 0) {
            accepted++;
            if (cf.obj == ECCL_TSP_BOTTLENECK &&
                (cur.unmeasured < best.unmeasured || cur.max < best.max)) {
                ls_full(&x); /* a new bottleneck: squeeze it too */
                tour_price(&x, &cur);
            }
            best = cur;
            memcpy(x.best, x.tour, (size_t)n * sizeof *x.best);
        } else {
            memcpy(x.tour, x.best, (size_t)n * sizeof *x.tour);
        }
    }
    canonical(n, x.best, tour);
    fill_result(result, n, cost, tour);
    if (result) {
        result->stopped = x.stopped;
        result->work = x.work;
        result->kicks = kicks;
        result->accepted = accepted;
    }
    cf.release(cf.actx, blk);
    return ECCL_OK;
}

eccl_result eccl_tsp_eval(uint32_t n, const double *cost, const eccl_tsp_opts *opts,
                          const uint32_t *tour, eccl_tsp_result *result)
{
    cfg cf;
    eccl_result rc = check_args(n, cost, tour);
    if (rc == ECCL_OK) rc = cfg_resolve(opts, n, &cf);
    if (rc != ECCL_OK) return rc;
    if (!result) return ECCL_ERR_INVALID_ARG;
    uint8_t *seen = cf.alloc(cf.actx, (size_t)n);
    if (!seen) return ECCL_ERR_NO_MEMORY;
    int ok = is_perm(n, tour, seen);
    cf.release(cf.actx, seen);
    if (!ok) return ECCL_ERR_INVALID_ARG;
    price(n, cost, tour, result);
    return ECCL_OK;
}
