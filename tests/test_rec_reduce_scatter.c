/* Reduce-scatter by recursive halving (core/coll/rec_reduce_scatter.c) in
 * one process: the N state machines of one call, wired by a harness that
 * hands each DATA frame a rank queued to the rank at the other end of its
 * peer link, through the algorithm table (eccl_rec_rs_algo) as comm does
 * after the socket: recv, the payload copied to where recv said, recv_done.
 * The harness is test_rec_allreduce.c's (links that open only once the
 * lower rank asked, at once or late; seeded global orders; payloads that
 * land in two parts; stops anywhere, whole or mid-frame; malformed
 * variants of every frame), with the model of this algorithm.
 *
 * Every run checks, after every pump and every delivery, against a model
 * written here from the documented schedule (coll/rec_reduce_scatter.h),
 * not from the engine's code:
 *   - each frame's link, header (phase, step, offset in the compact layout
 *     of what the step sends, length, no flags, ring 0) and payload when
 *     the socket takes it: an extra's input, a halving partial (core rank
 *     v's partial before step k: lower op higher over the ranks that differ
 *     from v in their k highest bits, the highest bit combined first, with
 *     folded inputs at the leaves), the final block (RESULT);
 *   - where a payload lands: RESULT straight into recvbuf at its offset,
 *     the rest into scratch; two frames landing in one rank at once never
 *     share a byte;
 *   - a frame only reaches a rank whose expects(PEER + sender) is 1, and
 *     expects is 0 as soon as the last frame from that rank arrived;
 *   - have_full never goes back, and turns 1 only with the final block in
 *     recvbuf;
 *   - a barrier token of round k leaves rank i only when ranks i, i-1, ...,
 *     i-2^k+1 are full; complete() only once every rank is full (N > 2),
 *     with nothing of the rank still queued;
 *   - tx/rx byte counts; guard bytes around every buffer stay untouched;
 *     sendbuf is never written (in place: but for the rank's own block).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coll/rec_reduce_scatter.h"
#include "coll/reduce.h"
#include "coll/ring_allreduce.h" /* ECCL_RING_MAX_QUEUED */
#include "coll/ring_pass.h"      /* ECCL_RING_PASS_SLICE_BYTES */
#include "proto/chan.h"
#include "proto/wire.h"
#include "util/half.h"

#define MAXN 9
#define GUARD 64
#define SEND_GUARD 0x5a
#define RECV_GUARD 0xa5
#define AUX_GUARD 0x3c
#define TAG 77
#define EPOCH 3

#include "coll_data.h"
#include "host_env.h"

/* ---- one call's model -------------------------------------------------------- */

typedef struct rcase {
    int n;
    eccl_dtype t;
    eccl_op op;
    size_t count;  /* uniform: elements per block */
    int v;         /* v layout: block b has vc[b] elements */
    size_t vc[MAXN], vd[MAXN];
    int in_place;
    size_t slice; /* bytes per frame asked for (0: the default) */
    uint64_t seed;
    int nan;      /* f32 MIN/MAX: distinct NaNs in several ranks' inputs */
} rcase;

static rcase mk(int n, eccl_dtype t, eccl_op op, size_t count, int in_place, size_t slice, uint64_t seed)
{
    rcase c;
    memset(&c, 0, sizeof c);
    c.n = n;
    c.t = t;
    c.op = op;
    c.count = count;
    c.in_place = in_place;
    c.slice = slice;
    c.seed = seed;
    return c;
}

/* A v layout: block b gets counts[b % len] elements (0: an empty block). */
static void set_v(rcase *c, const size_t *counts, size_t len)
{
    size_t at = 0;
    c->v = 1;
    for (int b = 0; b < c->n; b++) {
        c->vc[b] = counts[(size_t)b % len];
        c->vd[b] = at;
        at += c->vc[b];
    }
}

static size_t es_of(const rcase *c) { return eccl_dtype_size(c->t); }
static size_t blk_n(const rcase *c, int b) { return c->v ? c->vc[b] : c->count; }
static size_t blk_at(const rcase *c, int b)
{
    if (b >= c->n) return c->v ? c->vd[c->n - 1] + c->vc[c->n - 1] : (size_t)c->n * c->count;
    return c->v ? c->vd[b] : (size_t)b * c->count;
}
static size_t total_of(const rcase *c) { return blk_at(c, c->n); }
/* Slice bytes: the asked size in whole elements, at least one. */
static size_t slice_of(const rcase *c)
{
    size_t s = c->slice ? c->slice : ECCL_RING_PASS_SLICE_BYTES, es = es_of(c);
    s = s / es * es;
    return s ? s : es;
}

enum { P_INPUT, P_PARTIAL, P_FINAL, P_NONE };

/* One frame of the model, in its sender's order. */
typedef struct mframe {
    int to;
    eccl_wire_data w;
    size_t nat;   /* where its payload is in the input's layout, bytes */
    int what;     /* P_*: its payload */
    int base, k;  /* P_PARTIAL: core rank base's partial before step k; P_INPUT: rank base */
} mframe;

#define MAXF 4096

/* Data of one case: inputs, what recvbufs held before, the partials of
 * every core rank before every step (over the whole input), the result. */
typedef struct cdata {
    uint8_t *in[MAXN], *old[MAXN], *part[MAXN][5], *want;
} cdata;

/* Core rank v's partial before halving step k, over the whole input: the
 * leaf (v's input, op p+v's if it has an extra) at k = 0; else the
 * partials of step k-1's pair, lower op higher, the pair differing in
 * bit p >> k (the highest first). */
static void partial_of(const rcase *c, const cdata *d, int v, int k, uint8_t *out)
{
    size_t es = es_of(c), n = total_of(c);
    int p = pow2_of(c->n);
    if (k == 0) {
        memcpy(out, d->in[v], n * es);
        if (v < c->n - p) eccl_reduce_into(out, d->in[v + p], n, c->t, c->op);
        return;
    }
    int bit = p >> k;
    uint8_t *hi = malloc(n * es + 1);
    assert_non_null(hi);
    partial_of(c, d, v & ~bit, k - 1, out);
    partial_of(c, d, v | bit, k - 1, hi);
    eccl_reduce_into(out, hi, n, c->t, c->op);
    free(hi);
}

static void case_data(const rcase *c, cdata *d)
{
    size_t es = es_of(c), bytes = total_of(c) * es;
    int p = pow2_of(c->n), L = log2_of(p);
    memset(d, 0, sizeof *d);
    for (int r = 0; r < c->n; r++) {
        d->in[r] = malloc(bytes + 1);
        d->old[r] = malloc(blk_n(c, r) * es + 1);
        assert_true(d->in[r] && d->old[r]);
        fill_input(d->in[r], c->t, c->op, total_of(c), c->seed * 131 + (uint64_t)r);
        fill_bytes(d->old[r], blk_n(c, r) * es, c->seed * 7 + (uint64_t)r);
        /* NaNs with distinct payloads (MIN/MAX keep the first operand's)
         * in every other element of every other rank, both parities, so
         * that every block, whoever reduces it, meets some. */
        for (size_t e = 0; c->nan && e < total_of(c); e++) {
            if ((r + (int)e) % 2) continue;
            uint32_t bits = 0x7fc00000u | (uint32_t)(r + 1) | (uint32_t)(e % 4096) << 8;
            memcpy(d->in[r] + e * 4, &bits, 4);
        }
    }
    for (int v = 0; v < p; v++)
        for (int k = 0; k <= L; k++) {
            d->part[v][k] = malloc(bytes + 1);
            assert_non_null(d->part[v][k]);
            partial_of(c, d, v, k, d->part[v][k]);
        }
    d->want = malloc(bytes + 1);
    assert_non_null(d->want);
    memcpy(d->want, d->part[0][L], bytes);
    if (c->op == ECCL_AVG) eccl_reduce_scale_div(d->want, total_of(c), c->t, (uint32_t)c->n);
}

static void case_data_free(cdata *d)
{
    for (int r = 0; r < MAXN; r++) {
        free(d->in[r]);
        free(d->old[r]);
        for (int k = 0; k < 5; k++) free(d->part[r][k]);
    }
    free(d->want);
}

/* ---- the harness (peer_harness.h) ------------------------------------------ */

#define PH_CASE rcase
#define PH_OP eccl_rec_rs
#define PH_DONE_PHASE ECCL_PHASE_RECRS_DONE
#define PH_SIM_FIELDS                             \
    int p, levels, rem;                           \
    size_t total; /* bytes of the input */        \
    size_t vcounts[MAXN], vdispls[MAXN];
#include "peer_harness.h"

/* Every phase of the ring, tree and recursive algorithms: a frame is tried
 * with each other one. */
static const uint8_t bad_phases[] = {ECCL_PHASE_REDUCE_SCATTER, ECCL_PHASE_ALL_GATHER, ECCL_PHASE_DONE,
                                     ECCL_PHASE_EXCHANGE,       ECCL_PHASE_TREE_UP,    ECCL_PHASE_TREE_DONE,
                                     ECCL_PHASE_GATHER,         ECCL_PHASE_SCATTER,    ECCL_PHASE_REC_FOLD,
                                     ECCL_PHASE_REC_DOUBLE,     ECCL_PHASE_REC_HALVE,  ECCL_PHASE_REC_GATHER,
                                     ECCL_PHASE_REC_RESULT,     ECCL_PHASE_REC_DONE,   ECCL_PHASE_RECRS_FOLD,
                                     ECCL_PHASE_RECRS_HALVE,    ECCL_PHASE_RECRS_RESULT, ECCL_PHASE_RECRS_DONE};

static mframe *add_frame(sim *s, int from, int to, uint8_t phase, uint16_t step)
{
    assert_true(s->nmf[from] < MAXF);
    mframe *m = &s->mf[from][s->nmf[from]++];
    memset(m, 0, sizeof *m);
    m->to = to;
    m->w.tag = TAG;
    m->w.epoch = EPOCH;
    m->w.phase = phase;
    m->w.step = step;
    s->pair_total[from][to]++;
    return m;
}

/* The slices of `pieces` runs of the input ([at, at + n) elements each),
 * back to back in the step's compact layout; one empty frame if all are
 * empty. */
static void add_pieces(sim *s, int from, int to, uint8_t phase, uint16_t step, const size_t *at, const size_t *n,
                       int pieces, int what, int base, int k)
{
    size_t es = es_of(&s->c), S = slice_of(&s->c), off = 0;
    uint32_t before = s->nmf[from];
    for (int i = 0; i < pieces; i++) {
        size_t b = n[i] * es;
        for (size_t j = 0; j * S < b; j++) {
            mframe *m = add_frame(s, from, to, phase, step);
            m->w.offset = off + j * S;
            m->w.len = (uint32_t)(b - j * S < S ? b - j * S : S);
            m->nat = at[i] * es + j * S;
            m->what = what;
            m->base = base;
            m->k = k;
        }
        off += b;
    }
    if (s->nmf[from] == before) {
        mframe *m = add_frame(s, from, to, phase, step);
        m->what = what;
        m->base = base;
        m->k = k;
    }
}

/* Every frame each rank sends, in order, as rec_reduce_scatter.h
 * documents: core index x stands for blocks x and x + p (x < N - p); a half
 * [x, x + h) is blocks x.. x+h-1 (run A) then blocks min(x, e)+p ..
 * min(x+h, e)+p-1 (run B). */
static void build_model(sim *s)
{
    const rcase *c = &s->c;
    int n = s->n, p = s->p, L = s->levels, e = s->rem;
    for (int r = 0; r < n; r++) {
        s->mf[r] = malloc(MAXF * sizeof(mframe));
        assert_non_null(s->mf[r]);
        if (r >= p) {
            size_t at = 0, len = total_of(c);
            add_pieces(s, r, r - p, ECCL_PHASE_RECRS_FOLD, 0, &at, &len, 1, P_INPUT, r, 0);
        } else {
            for (int k = 0; k < L; k++) {
                int h = p >> (k + 1), partner = r ^ h;
                int x = partner & ~(h - 1); /* the half the partner keeps */
                int xa = x < e ? x : e, xb = x + h < e ? x + h : e;
                size_t at[2] = {blk_at(c, x), blk_at(c, xa + p)};
                size_t len[2] = {blk_at(c, x + h) - blk_at(c, x), blk_at(c, xb + p) - blk_at(c, xa + p)};
                add_pieces(s, r, partner, ECCL_PHASE_RECRS_HALVE, (uint16_t)(1 + k), at, len, 2, P_PARTIAL, r, k);
            }
            if (r < e) {
                size_t at = blk_at(c, r + p), len = blk_n(c, r + p);
                add_pieces(s, r, r + p, ECCL_PHASE_RECRS_RESULT, (uint16_t)(L + 1), &at, &len, 1, P_FINAL, 0, 0);
            }
        }
        for (int k = 0; k < s->rounds; k++) {
            mframe *m = add_frame(s, r, (r + (1 << k)) % n, ECCL_PHASE_RECRS_DONE, (uint16_t)k);
            m->what = P_NONE;
        }
    }
}

static void sim_init(sim *s, const rcase *c, uint64_t sched_seed, int late)
{
    memset(s, 0, sizeof *s);
    s->c = *c;
    s->n = c->n;
    s->p = pow2_of(c->n);
    s->levels = log2_of(s->p);
    s->rem = c->n - s->p;
    s->rounds = log2_of(c->n);
    size_t es = es_of(c);
    s->total = total_of(c) * es;
    s->env = host_env();
    s->alg = &eccl_rec_rs_algo;
    s->rng = sched_seed;
    s->late = late;
    s->stop = SIZE_MAX;
    s->bad_phases = bad_phases;
    s->n_bad_phases = sizeof bad_phases;
    case_data(c, &s->d);
    size_t S = slice_of(c);
    s->tmp = malloc(S + 64);
    assert_non_null(s->tmp);
    for (int b = 0; b < s->n; b++) {
        s->vcounts[b] = c->vc[b];
        s->vdispls[b] = c->vd[b];
    }
    for (int r = 0; r < s->n; r++) {
        size_t rb = blk_n(c, r) * es;
        s->send[r] = region(s->total, &s->send_reg[r], &s->send_len[r], SEND_GUARD);
        memcpy((uint8_t *)s->send[r], s->d.in[r], s->total);
        if (c->in_place) {
            /* recvbuf is the rank's block of sendbuf: what it held before
             * is that block of the input. */
            s->recv[r] = (uint8_t *)s->send[r] + blk_at(c, r) * es;
            memcpy(s->d.old[r], s->recv[r], rb);
        } else {
            s->recv[r] = region(rb, &s->recv_reg[r], &s->recv_len[r], RECV_GUARD);
            memcpy(s->recv[r], s->d.old[r], rb);
            s->orig_recv[r] = malloc(s->recv_len[r]);
            assert_non_null(s->orig_recv[r]);
            memcpy(s->orig_recv[r], s->recv_reg[r], s->recv_len[r]);
        }
        s->orig_send[r] = malloc(s->send_len[r]);
        assert_non_null(s->orig_send[r]);
        memcpy(s->orig_send[r], s->send_reg[r], s->send_len[r]);
        eccl_coll_call call = {.env = &s->env, .kind = ECCL_COLL_REDUCE_SCATTER, .tag = TAG, .epoch = EPOCH,
                               .sendbuf = s->send[r], .recvbuf = s->recv[r], .count = c->v ? total_of(c) : c->count,
                               .vcounts = c->v ? s->vcounts : NULL, .vdispls = c->v ? s->vdispls : NULL,
                               .dtype = c->t, .op = c->op, .rank = (uint32_t)r, .nranks = (uint32_t)s->n};
        size_t sb = eccl_rec_rs_scratch_bytes(&call);
        /* Bounded as the layout says: a folder's two copies of the input,
         * then per step k the kept half, twice on the lower rank: at most
         * 2 (p >> (k+1)) blocks (uniform), at most the input (v). */
        size_t cap = r >= s->p ? 0 : r < s->rem ? 2 * s->total : 0;
        for (int k = 0; r < s->p && k < s->levels; k++) {
            size_t blocks = 2 * (size_t)(s->p >> (k + 1));
            cap += 2 * (c->v ? s->total : (blocks < (size_t)s->n ? blocks : (size_t)s->n) * c->count * es);
        }
        if (sb > cap) fail_msg("rank %d of %d asks for %zu scratch bytes, more than %zu", r, s->n, sb, cap);
        assert_int_equal(eccl_rec_rs_output_bytes(&call), rb);
        uint8_t *scratch = sb ? region(sb, &s->aux_reg[r][AUX_SCRATCH], &s->aux_len[r][AUX_SCRATCH], AUX_GUARD) : NULL;
        if (sb) s->aux[r][AUX_SCRATCH] = scratch, s->aux_len[r][AUX_SCRATCH] = sb;
        uint8_t *backup = region(rb, &s->aux_reg[r][AUX_BACKUP], &s->aux_len[r][AUX_BACKUP], AUX_GUARD);
        s->aux[r][AUX_BACKUP] = backup;
        s->aux_len[r][AUX_BACKUP] = rb;
        if (c->slice) eccl_rec_rs_init_ex(&s->a[r], &call, scratch, backup, c->slice);
        else eccl_rec_rs_init(&s->a[r], &call, scratch, backup);
        s->px[r] = (pctx){s, r};
        for (int j = 0; j < s->n; j++) {
            assert_int_equal(eccl_chan_init(&s->ch[r][j], &s->env, NULL, 64), ECCL_OK);
            s->lbuf[r][j] = malloc(S + 64);
            assert_non_null(s->lbuf[r][j]);
        }
    }
    build_model(s);
}

/* What model frame m of rank `from` must carry. */
static const uint8_t *model_payload(sim *s, const mframe *m)
{
    switch (m->what) {
    case P_INPUT: return s->d.in[m->base] + m->nat;
    case P_FINAL: return s->d.want + m->nat;
    default: return s->d.part[m->base][m->k] + m->nat;
    }
}

/* Where a payload lands: RESULT at its offset in recvbuf, the rest in
 * scratch; never on bytes another landing frame is using. */
static void check_dst(sim *s, int to, int from, const eccl_wire_data *w, const uint8_t *dst)
{
    if (w->phase == ECCL_PHASE_RECRS_RESULT) {
        if (dst != s->recv[to] + w->offset) fail_msg("rank %d: phase %u lands off its recvbuf offset", to, w->phase);
    } else {
        const uint8_t *sc = s->aux[to][AUX_SCRATCH];
        if (!sc || dst < sc || dst + w->len > sc + s->aux_len[to][AUX_SCRATCH])
            fail_msg("rank %d: a phase-%u partial lands outside its scratch", to, w->phase);
    }
    for (int x = 0; x < s->n; x++) {
        const landing *o = &s->land[to][x];
        if (x != from && o->open && o->w.len && dst < o->dst + o->w.len && o->dst < dst + w->len)
            fail_msg("rank %d: frames from %d and %d land on the same bytes", to, from, x);
    }
}

static const char *case_str(const rcase *c)
{
    static char buf[160];
    snprintf(buf, sizeof buf, "n=%d %s %s count=%zu%s %s slice=%zu seed=%llu", c->n, eccl_dtype_name(c->t),
             eccl_op_name(c->op), c->count, c->v ? " (v)" : "", c->in_place ? "in-place" : "out-of-place", c->slice,
             (unsigned long long)c->seed);
    return buf;
}

static int output_final(const sim *s, int r)
{
    size_t es = es_of(&s->c);
    return memcmp(s->recv[r], s->d.want + blk_at(&s->c, r) * es, blk_n(&s->c, r) * es) == 0;
}

static void print_state(const sim *s, int r)
{
    print_message("rank %d: step %u of %u, full %d, tokens sent %llx received %llx, inflight %u\n", r, s->a[r].steps.cur,
                  s->a[r].steps.nsteps, s->a[r].steps.have_full, (unsigned long long)s->a[r].steps.bar.sent,
                  (unsigned long long)s->a[r].steps.bar.recv, s->a[r].steps.inflight);
}

static void check_results(sim *s)
{
    size_t es = es_of(&s->c);
    for (int r = 0; r < s->n; r++) {
        const uint8_t *want = s->d.want + blk_at(&s->c, r) * es;
        size_t rb = blk_n(&s->c, r) * es, at = GUARD + blk_at(&s->c, r) * es;
        if (memcmp(s->recv[r], want, rb) != 0) {
            size_t e = 0;
            while (memcmp(s->recv[r] + e * es, want + e * es, es) == 0) e++;
            fail_msg("%s: rank %d element %zu wrong", case_str(&s->c), r, e);
        }
        check_guards(s, r);
        /* sendbuf as it was; in place but for the rank's block. */
        if (s->c.in_place) memcpy(s->orig_send[r] + at, want, rb);
        if (memcmp(s->send_reg[r], s->orig_send[r], s->send_len[r]) != 0)
            fail_msg("%s: rank %d's sendbuf was written", case_str(&s->c), r);
        check_rank_finished(s, r);
    }
}

/* ---- tests ------------------------------------------------------------------ */

/* The model's reference: its order (bit-reversed cube, folded leaves) is
 * another than a left fold and than the natural cube's for floats, and the
 * same for integers, where the order cannot matter: a check of the order
 * is a check of something. */
static void test_reference(void **state)
{
    (void)state;
    for (int n = 4; n <= MAXN; n++) {
        rcase c = mk(n, ECCL_F32, ECCL_SUM, 64, 0, 0, 5);
        cdata d;
        case_data(&c, &d);
        size_t b = total_of(&c) * 4;
        uint8_t *left = malloc(b), *nat = malloc(b), *hi = malloc(b);
        assert_true(left && nat && hi);
        memcpy(left, d.in[0], b);
        for (int r = 1; r < n; r++) eccl_reduce_into(left, d.in[r], total_of(&c), ECCL_F32, ECCL_SUM);
        assert_true(memcmp(left, d.want, b) != 0);
        /* Natural cube at p = 4: (leaf 0 op leaf 1) op (leaf 2 op leaf 3). */
        if (n < 8) {
            int p = pow2_of(n);
            memcpy(nat, d.part[0][0], b);
            eccl_reduce_into(nat, d.part[1][0], total_of(&c), ECCL_F32, ECCL_SUM);
            memcpy(hi, d.part[2][0], b);
            eccl_reduce_into(hi, d.part[3][0], total_of(&c), ECCL_F32, ECCL_SUM);
            eccl_reduce_into(nat, hi, total_of(&c), ECCL_F32, ECCL_SUM);
            assert_int_equal(p, 4);
            assert_true(memcmp(nat, d.want, b) != 0);
        }
        case_data_free(&d);
        c.t = ECCL_U32;
        case_data(&c, &d);
        memcpy(left, d.in[0], b);
        for (int r = 1; r < n; r++) eccl_reduce_into(left, d.in[r], total_of(&c), ECCL_U32, ECCL_SUM);
        assert_memory_equal(left, d.want, b);
        case_data_free(&d);
        free(left);
        free(nat);
        free(hi);
    }
}

/* The schedule by hand, N = 6 (p = 4, ranks 4, 5 fold into 0, 1; three
 * barrier rounds), 2 u8 elements a block: core index x is blocks x and,
 * for x < 2, x + 4. */
static void test_schedule(void **state)
{
    (void)state;
    eccl_env env = host_env();
    uint8_t buf[64] = {0}, scratch[4096], backup[64];
    eccl_coll_call call = {.env = &env, .kind = ECCL_COLL_REDUCE_SCATTER, .tag = 1, .sendbuf = buf,
                           .recvbuf = buf + 32, .count = 2, .dtype = ECCL_U8, .op = ECCL_SUM, .nranks = 6};
    eccl_rec_rs a;
    eccl_recrs_step st;
    call.rank = 5;
    assert_int_equal(eccl_rec_rs_scratch_bytes(&call), 0);
    eccl_rec_rs_init_ex(&a, &call, NULL, backup, 4);
    assert_int_equal(a.steps.nsteps, 2);
    assert_int_equal(a.steps.bar.rounds, 3);
    eccl_rec_rs_step(&a, 0, &st);
    assert_true(st.kind == ECCL_RECRS_FOLD_SEND && st.peer == 1 && st.tx_len[0] == 12 && st.tx_len[1] == 0);
    eccl_rec_rs_step(&a, 1, &st);
    assert_true(st.kind == ECCL_RECRS_RESULT_RECV && st.peer == 1 && st.rx_len[0] == 2);
    call.rank = 1;
    /* Fold 2 x 12, step 0 lower (8 kept, twice), step 1 higher (4). */
    assert_int_equal(eccl_rec_rs_scratch_bytes(&call), 24 + 16 + 4);
    eccl_rec_rs_init_ex(&a, &call, scratch, backup, 4);
    assert_int_equal(a.steps.nsteps, 4);
    eccl_rec_rs_step(&a, 0, &st);
    assert_true(st.kind == ECCL_RECRS_FOLD_RECV && st.peer == 5 && st.rx_len[0] == 12);
    /* Step 0 with 3: keeps core [0, 2) (blocks 0, 1 and 4, 5), sends
     * blocks 2, 3 (no B run: 2 >= e). */
    eccl_rec_rs_step(&a, 1, &st);
    assert_true(st.kind == ECCL_RECRS_HALVE && st.peer == 3 && st.lower && st.tx_len[0] == 4 && st.tx_len[1] == 0 &&
                st.tx_off[0] == 4 && st.rx_len[0] == 4 && st.rx_len[1] == 4 && st.keep_off[0] == 0 &&
                st.keep_off[1] == 8);
    /* Step 1 with 0: keeps core 1 (blocks 1, 5), sends blocks 0 and 4. */
    eccl_rec_rs_step(&a, 2, &st);
    assert_true(st.kind == ECCL_RECRS_HALVE && st.peer == 0 && !st.lower && st.tx_len[0] == 2 &&
                st.tx_len[1] == 2 && st.tx_off[0] == 0 && st.tx_off[1] == 4 && st.keep_off[0] == 2 &&
                st.keep_off[1] == 6);
    eccl_rec_rs_step(&a, 3, &st);
    assert_true(st.kind == ECCL_RECRS_RESULT_SEND && st.peer == 5 && st.tx_off[0] == 2 && st.tx_len[0] == 2);
    call.rank = 3;
    assert_int_equal(eccl_rec_rs_scratch_bytes(&call), 4 + 2);
    eccl_rec_rs_init_ex(&a, &call, scratch, backup, 4);
    assert_int_equal(a.steps.nsteps, 2);
    eccl_rec_rs_step(&a, 0, &st);
    assert_true(st.kind == ECCL_RECRS_HALVE && st.peer == 1 && !st.lower && st.tx_len[0] == 4 &&
                st.tx_len[1] == 4 && st.tx_off[0] == 0 && st.tx_off[1] == 8 && st.rx_len[0] == 4 &&
                st.rx_len[1] == 0);
    /* The algorithm table. */
    check_algo_table(&eccl_rec_rs_algo, ECCL_ALGO_RECURSIVE);
}

/* Every world 2..9, dtype and op on small blocks (0, 1, 3 and 7 elements,
 * frames of 8 bytes: several slices a piece), in and out of place, uniform
 * and v layouts with empty blocks, each under its own order, some with
 * links opening late. */
static void test_exact_small(void **state)
{
    (void)state;
    static const size_t counts[] = {0, 1, 3, 7};
    static const size_t vlay[] = {3, 0, 5, 1, 0, 2, 9};
    uint64_t seed = 1;
    for (int n = 2; n <= MAXN; n++)
        for (int t = 0; t < ECCL_DTYPE_COUNT; t++)
            for (int op = 0; op < ECCL_OP_COUNT; op++)
                for (int ip = 0; ip < 2; ip++)
                    for (int v = 0; v < 2; v++) {
                        rcase c = mk(n, (eccl_dtype)t, (eccl_op)op, counts[seed % 4], ip, 8, seed);
                        if (v) set_v(&c, vlay + seed % 3, 4);
                        run_case(&c, seed % 2 ? seed * 2654435761u : 0, seed % 3 ? 0 : LATE);
                        seed++;
                    }
}

/* v layouts at the edges: one block holding everything (the rank that
 * owns it, or its core rank, folds it all), every block empty, only the
 * extras' blocks non-empty, only the core's. */
static void test_v_edges(void **state)
{
    (void)state;
    for (int n = 2; n <= MAXN; n++)
        for (int ip = 0; ip < 2; ip++) {
            int p = pow2_of(n);
            size_t vc[MAXN];
            for (int owner = 0; owner < n; owner++) {
                memset(vc, 0, sizeof vc);
                vc[owner] = 23;
                rcase c = mk(n, ECCL_F64, ECCL_SUM, 0, ip, 16, 500 + (uint64_t)owner);
                set_v(&c, vc, (size_t)n);
                run_case(&c, (uint64_t)owner + 1, owner % 2 ? LATE : 0);
            }
            memset(vc, 0, sizeof vc);
            rcase c = mk(n, ECCL_I32, ECCL_MAX, 0, ip, 8, 600);
            set_v(&c, vc, (size_t)n);
            run_case(&c, 3, 0);
            for (int b = 0; b < n; b++) vc[b] = b >= p ? 5 : 0;
            c = mk(n, ECCL_F32, ECCL_AVG, 0, ip, 8, 601);
            set_v(&c, vc, (size_t)n);
            run_case(&c, 4, LATE);
            for (int b = 0; b < n; b++) vc[b] = b < p ? (size_t)b + 1 : 0;
            c = mk(n, ECCL_BF16, ECCL_PROD, 0, ip, 4, 602);
            set_v(&c, vc, (size_t)n);
            run_case(&c, 0, 0);
        }
}

/* NaNs with distinct payloads in several ranks' inputs: MIN/MAX keep the
 * first operand's, so only lower-op-higher everywhere gives the model's
 * NaN. */
static void test_nan_order(void **state)
{
    (void)state;
    for (int n = 2; n <= MAXN; n++)
        for (int op = ECCL_MIN; op <= ECCL_MAX; op++)
            for (int ip = 0; ip < 2; ip++) {
                rcase c = mk(n, ECCL_F32, (eccl_op)op, 9, ip, 12, 40 + (uint64_t)n);
                c.nan = 1;
                run_case(&c, (uint64_t)n * 31 + (uint64_t)ip, 0);
            }
}

/* The same call under many global orders: each gives the model's bits,
 * every invariant holding at every step. */
static void test_orders(void **state)
{
    (void)state;
    static const size_t vlay[] = {4, 0, 7, 2, 1};
    for (int n = 2; n <= MAXN; n++)
        for (int v = 0; v < 2; v++) {
            rcase c = mk(n, ECCL_F32, ECCL_AVG, 9, n % 2, 16, 900 + (uint64_t)n);
            if (v) set_v(&c, vlay, 5);
            for (uint64_t seed = 1; seed <= 30; seed++)
                run_case(&c, seed * 0x2545F4914F6CDD1Dull, seed % 4 == 0 ? LATE : 0);
        }
}

/* Stopped after every number of delivered frames, whole or mid-frame:
 * every rank's restore gives recvbuf back bit for bit (in place: sendbuf
 * whole). */
static void test_restore_anywhere(void **state)
{
    (void)state;
    static const size_t vlay[] = {2, 0, 5};
    for (int n = 2; n <= MAXN; n++)
        for (int ip = 0; ip < 2; ip++) {
            rcase c = mk(n, ECCL_I32, ECCL_SUM, 3, ip, 8, 300 + (uint64_t)n);
            restore_case(&c, 0, 0, 1, 0);
            c = mk(n, ECCL_F16, ECCL_AVG, 0, ip, 4, 400 + (uint64_t)n);
            set_v(&c, vlay, 3);
            restore_case(&c, 4242 + (uint64_t)n, 0, 1, LATE);
        }
}

/* Malformed frames at every point of a run: another link's, a ring or tree
 * role's, every other phase, step, offset, length, QUANT or BULK flag,
 * ring 1, a token where data is owed, the frame after the next (FIFO
 * broken), the last frame again; and after the last expected frame, any
 * frame. Each is refused with ECCL_ERR_PROTOCOL and changes nothing. */
static void test_malformed(void **state)
{
    (void)state;
    static const size_t vlay[] = {3, 0, 4};
    for (int n = 2; n <= MAXN; n++) {
        rcase c = mk(n, ECCL_I16, ECCL_MIN, 5, n % 2, 6, 60 + (uint64_t)n);
        run_case(&c, 0, FUZZ);
        set_v(&c, vlay, 3);
        run_case(&c, 31337, FUZZ | LATE);
    }
}

/* The default frame size (1 MiB): pieces of several slices, a fold of
 * several. */
static void test_default_slices(void **state)
{
    (void)state;
    rcase c = mk(3, ECCL_U8, ECCL_MAX, 5 * ECCL_RING_PASS_SLICE_BYTES / 4 + 3, 1, 0, 72);
    run_case(&c, 5, 0);
    c = mk(6, ECCL_U16, ECCL_SUM, 3 * ECCL_RING_PASS_SLICE_BYTES / 8 + 1, 0, 0, 73);
    run_case(&c, 0, LATE);
    size_t vc[3] = {ECCL_RING_PASS_SLICE_BYTES + 1, 0, 2 * ECCL_RING_PASS_SLICE_BYTES - 1};
    c = mk(3, ECCL_U8, ECCL_MIN, 0, 0, 0, 74);
    set_v(&c, vc, 3);
    restore_case(&c, 9, 0, 2, 0);
}

/* The queue's cap (ECCL_RING_MAX_QUEUED per link) holds slices back: a
 * rank with every slice received is not full until its own are all
 * queued; then the run finishes. */
static void test_queue_cap(void **state)
{
    (void)state;
    size_t count = 6 * (size_t)ECCL_RING_PASS_SLICE_BYTES; /* 6 slices a step: more than the cap */
    assert_true(count > ECCL_RING_MAX_QUEUED);
    rcase c = mk(2, ECCL_U8, ECCL_SUM, count, 0, ECCL_RING_PASS_SLICE_BYTES, 80);
    queue_cap_case(&c, ECCL_RING_PASS_SLICE_BYTES);
}

/* The completion round, step by step: every data frame delivered and every
 * rank full, no rank completes before its last token, two ranks included. */
static void test_completion(void **state)
{
    (void)state;
    for (int n = 2; n <= MAXN; n++) {
        rcase c = mk(n, ECCL_U32, ECCL_SUM, 3, 0, 8, 5);
        completion_case(&c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference),     cmocka_unit_test(test_schedule),
        cmocka_unit_test(test_exact_small),   cmocka_unit_test(test_v_edges),
        cmocka_unit_test(test_nan_order),     cmocka_unit_test(test_orders),
        cmocka_unit_test(test_restore_anywhere), cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_default_slices), cmocka_unit_test(test_queue_cap),
        cmocka_unit_test(test_completion),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
