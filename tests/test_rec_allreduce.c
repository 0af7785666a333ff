/* The recursive all-reduce (core/coll/rec_allreduce.c) in one process: the
 * N state machines of one call, wired by a harness that hands each DATA
 * frame a rank queued to the rank at the other end of its peer link,
 * through the algorithm table (eccl_rec_allreduce_algo) as comm does after
 * the socket: recv, the payload copied to where recv said, recv_done.
 *
 * Every pair of ranks has one link, a FIFO each way, that opens the way
 * comm's peer links do: only once the LOWER rank of the pair asked for it
 * (links->peer), at once or, with LATE, some events later; the higher
 * rank's asks open nothing. A lower rank that only listens to a higher one
 * must still ask, or the run is stuck. No threads, no sockets: the harness
 * alone picks the global order (round robin, or seeded random choices of
 * which rank pumps, which link delivers next, and whether a payload lands
 * in two parts with other events in between), so every interleaving, stop
 * point and malformed frame is reproducible.
 *
 * Every run checks, after every pump and every delivery, against a model
 * written here from the documented schedule (coll/rec_allreduce.h), not
 * from the engine's code:
 *   - each frame's link, header (phase, step, offset, length, no flags,
 *     ring 0) and payload when the socket takes it (a borrowed payload must
 *     not change while queued): an extra's input, a doubling or halving
 *     partial (the reduction over the sender's 2^k-cube, lower half op
 *     upper half at every level, folded inputs at the leaves), the final
 *     values (GATHER, RESULT);
 *   - where a payload lands: GATHER and RESULT straight into recvbuf at
 *     their offset, the partials into scratch; two frames landing in one
 *     rank at once never share a byte;
 *   - a frame only reaches a rank whose expects(PEER + sender) is 1, and
 *     expects is 0 as soon as the last frame from that rank arrived;
 *     expects of any other role is 0;
 *   - have_full never goes back, and turns 1 only with the final output in
 *     recvbuf (the same bits on every rank, doubling and halving alike);
 *   - a barrier token of round k leaves rank i only when ranks i, i-1, ...,
 *     i-2^k+1 are full; complete() only once every rank is full (N > 2),
 *     with no frame of the rank still queued and every frame of the model
 *     sent and received;
 *   - tx/rx byte counts; guard bytes around every buffer (the caller's,
 *     the scratch and backup the op asked for) stay untouched; sendbuf is
 *     never written.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coll/rec_allreduce.h"
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
    size_t count;
    int in_place;
    int halving;
    size_t slice; /* bytes per frame asked for (0: the default) */
    uint64_t seed;
    int nan;      /* f32 MIN/MAX: distinct NaNs at element 0 of several ranks */
} rcase;

static rcase mk(int n, eccl_dtype t, eccl_op op, size_t count, int in_place, int halving, size_t slice,
                uint64_t seed)
{
    rcase c;
    memset(&c, 0, sizeof c);
    c.n = n;
    c.t = t;
    c.op = op;
    c.count = count;
    c.in_place = in_place;
    c.halving = halving;
    c.slice = slice;
    c.seed = seed;
    return c;
}

static size_t es_of(const rcase *c) { return eccl_dtype_size(c->t); }
/* Slice bytes: the asked size in whole elements, at least one. */
static size_t slice_of(const rcase *c)
{
    size_t s = c->slice ? c->slice : ECCL_RING_PASS_SLICE_BYTES, es = es_of(c);
    s = s / es * es;
    return s ? s : es;
}

/* The documented halving ranges: [0, count) cut at lo + (hi - lo) / 2 at
 * each level k, core rank v keeping the upper half iff bit k is set. */
static void range_of(const rcase *c, int v, int levels, size_t *lo, size_t *hi)
{
    *lo = 0;
    *hi = c->count;
    for (int k = 0; k < levels; k++) {
        size_t mid = *lo + (*hi - *lo) / 2;
        if (v >> k & 1) *lo = mid;
        else *hi = mid;
    }
}

enum { P_INPUT, P_PARTIAL, P_FINAL, P_NONE };

/* One frame of the model, in its sender's order. */
typedef struct mframe {
    int to;
    eccl_wire_data w;
    int what;     /* P_*: its payload */
    int base, k;  /* P_PARTIAL: the cube [base, base + 2^k); P_INPUT: rank base */
} mframe;

#define MAXF 4096

/* Data of one case: inputs, what recvbufs held before, the final output. */
typedef struct cdata {
    uint8_t *in[MAXN], *old[MAXN], *want;
} cdata;

/* The value of the cube [base, base + size) of core ranks over bytes
 * [off, off + len): lower half op upper half, recursively; a core rank
 * with an extra is (its input) op (the extra's). */
static void cube(const rcase *c, const cdata *d, int base, int size, size_t off, size_t len, uint8_t *out)
{
    size_t es = es_of(c);
    int p = pow2_of(c->n);
    if (size == 1) {
        memcpy(out, d->in[base] + off, len);
        if (base < c->n - p) eccl_reduce_into(out, d->in[base + p] + off, len / es, c->t, c->op);
        return;
    }
    uint8_t *hi = malloc(len + 1);
    assert_non_null(hi);
    cube(c, d, base, size / 2, off, len, out);
    cube(c, d, base + size / 2, size / 2, off, len, hi);
    eccl_reduce_into(out, hi, len / es, c->t, c->op);
    free(hi);
}

static void case_data(const rcase *c, cdata *d)
{
    size_t es = es_of(c), bytes = c->count * es;
    memset(d, 0, sizeof *d);
    for (int r = 0; r < c->n; r++) {
        d->in[r] = malloc(bytes + 1);
        d->old[r] = malloc(bytes + 1);
        assert_true(d->in[r] && d->old[r]);
        fill_input(d->in[r], c->t, c->op, c->count, c->seed * 131 + (uint64_t)r);
        fill_bytes(d->old[r], bytes, c->seed * 7 + (uint64_t)r);
        /* NaNs with distinct payloads (MIN/MAX keep the first operand's)
         * in every other element of every other rank, both parities, so
         * that every block, whoever reduces it, meets some. */
        for (size_t e = 0; c->nan && e < c->count; e++) {
            if ((r + (int)e) % 2) continue;
            uint32_t bits = 0x7fc00000u | (uint32_t)(r + 1) | (uint32_t)(e % 4096) << 8;
            memcpy(d->in[r] + e * 4, &bits, 4);
        }
    }
    d->want = malloc(bytes + 1);
    assert_non_null(d->want);
    cube(c, d, 0, pow2_of(c->n), 0, bytes, d->want);
    if (c->op == ECCL_AVG) eccl_reduce_scale_div(d->want, c->count, c->t, (uint32_t)c->n);
}

static void case_data_free(cdata *d)
{
    for (int r = 0; r < MAXN; r++) {
        free(d->in[r]);
        free(d->old[r]);
    }
    free(d->want);
}

/* ---- the harness (peer_harness.h) ------------------------------------------ */

#define PH_CASE rcase
#define PH_OP eccl_rec_allreduce
#define PH_DONE_PHASE ECCL_PHASE_REC_DONE
#define PH_SIM_FIELDS                   \
    int p, levels, rem, nsteps_core;    \
    size_t bytes;
#include "peer_harness.h"

/* Every phase but the hierarchical and RECRS ones: a frame is tried with
 * each other one. */
static const uint8_t bad_phases[] = {ECCL_PHASE_REDUCE_SCATTER, ECCL_PHASE_ALL_GATHER, ECCL_PHASE_DONE,
                                     ECCL_PHASE_EXCHANGE,       ECCL_PHASE_TREE_UP,    ECCL_PHASE_TREE_DONE,
                                     ECCL_PHASE_GATHER,         ECCL_PHASE_SCATTER,    ECCL_PHASE_REC_FOLD,
                                     ECCL_PHASE_REC_DOUBLE,     ECCL_PHASE_REC_HALVE,  ECCL_PHASE_REC_GATHER,
                                     ECCL_PHASE_REC_RESULT,     ECCL_PHASE_REC_DONE};

/* Rank r's step numbers as frames carry them: FOLD 0, the core's from 1,
 * RESULT last. */
static uint16_t result_step(const sim *s) { return (uint16_t)(s->nsteps_core + 1); }

static void add_slices(sim *s, int from, int to, uint8_t phase, uint16_t step, size_t at, size_t n, int what,
                       int base, int k)
{
    size_t es = es_of(&s->c), S = slice_of(&s->c), b = n * es;
    size_t nsl = b ? (b + S - 1) / S : 1;
    for (size_t j = 0; j < nsl; j++) {
        assert_true(s->nmf[from] < MAXF);
        mframe *m = &s->mf[from][s->nmf[from]++];
        memset(m, 0, sizeof *m);
        m->to = to;
        m->w.tag = TAG;
        m->w.epoch = EPOCH;
        m->w.phase = phase;
        m->w.step = step;
        m->w.offset = at * es + j * S;
        m->w.len = (uint32_t)(b ? (b - j * S < S ? b - j * S : S) : 0);
        m->what = what;
        m->base = base;
        m->k = k;
        s->pair_total[from][to]++;
    }
}

/* Every frame each rank sends, in order, as rec_allreduce.h documents. */
static void build_model(sim *s)
{
    const rcase *c = &s->c;
    int n = s->n, p = s->p, L = s->levels;
    for (int r = 0; r < n; r++) {
        s->mf[r] = malloc(MAXF * sizeof(mframe));
        assert_non_null(s->mf[r]);
        if (r >= p) {
            add_slices(s, r, r - p, ECCL_PHASE_REC_FOLD, 0, 0, c->count, P_INPUT, r, 0);
        } else if (!c->halving) {
            for (int k = 0; k < L; k++)
                add_slices(s, r, r ^ (1 << k), ECCL_PHASE_REC_DOUBLE, (uint16_t)(1 + k), 0, c->count, P_PARTIAL,
                           r & ~((1 << k) - 1), k);
        } else {
            for (int k = 0; k < L; k++) {
                /* The half the partner keeps: our partial of it. */
                size_t lo, hi;
                range_of(c, r ^ (1 << k), k + 1, &lo, &hi);
                add_slices(s, r, r ^ (1 << k), ECCL_PHASE_REC_HALVE, (uint16_t)(1 + k), lo, hi - lo, P_PARTIAL,
                           r & ~((1 << k) - 1), k);
            }
            for (int j = 0; j < L; j++) {
                int k = L - 1 - j;
                size_t lo, hi;
                range_of(c, r, k + 1, &lo, &hi);
                add_slices(s, r, r ^ (1 << k), ECCL_PHASE_REC_GATHER, (uint16_t)(1 + L + j), lo, hi - lo, P_FINAL,
                           0, 0);
            }
        }
        if (r < s->rem) add_slices(s, r, r + p, ECCL_PHASE_REC_RESULT, result_step(s), 0, c->count, P_FINAL, 0, 0);
        for (int k = 0; k < s->rounds; k++) {
            int to = (r + (1 << k)) % n;
            mframe *m = &s->mf[r][s->nmf[r]++];
            memset(m, 0, sizeof *m);
            m->to = to;
            m->w = (eccl_wire_data){.tag = TAG, .epoch = EPOCH, .phase = ECCL_PHASE_REC_DONE, .step = (uint16_t)k};
            m->what = P_NONE;
            s->pair_total[r][to]++;
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
    s->nsteps_core = c->halving ? 2 * s->levels : s->levels;
    s->bytes = c->count * es_of(c);
    s->env = host_env();
    s->alg = &eccl_rec_allreduce_algo;
    s->rng = sched_seed;
    s->late = late;
    s->stop = SIZE_MAX;
    s->bad_phases = bad_phases;
    s->n_bad_phases = sizeof bad_phases;
    case_data(c, &s->d);
    size_t S = slice_of(c);
    s->tmp = malloc(S + 64);
    assert_non_null(s->tmp);
    for (int r = 0; r < s->n; r++) {
        s->recv[r] = region(s->bytes, &s->recv_reg[r], &s->recv_len[r], RECV_GUARD);
        memcpy(s->recv[r], s->d.old[r], s->bytes);
        if (c->in_place) {
            s->send[r] = s->recv[r];
        } else {
            s->send[r] = region(s->bytes, &s->send_reg[r], &s->send_len[r], SEND_GUARD);
            s->orig_send[r] = malloc(s->send_len[r]);
            assert_non_null(s->orig_send[r]);
        }
        memcpy((uint8_t *)s->send[r], s->d.in[r], s->bytes);
        if (!c->in_place) memcpy(s->orig_send[r], s->send_reg[r], s->send_len[r]);
        s->orig_recv[r] = malloc(s->recv_len[r]);
        assert_non_null(s->orig_recv[r]);
        memcpy(s->orig_recv[r], s->recv_reg[r], s->recv_len[r]);
        /* What the caller's recvbuf holds before: in place, the input. */
        if (c->in_place) memcpy(s->d.old[r], s->d.in[r], s->bytes);
        eccl_coll_call call = {.env = &s->env, .kind = ECCL_COLL_ALLREDUCE, .tag = TAG, .epoch = EPOCH,
                               .sendbuf = s->send[r], .recvbuf = s->recv[r], .count = c->count, .dtype = c->t,
                               .op = c->op, .rank = (uint32_t)r, .nranks = (uint32_t)s->n};
        size_t sb = eccl_rec_allreduce_scratch_bytes(&call, c->halving);
        /* Bounded as the layout says: doubling, two buffers per level plus
         * the fold's two; halving, one buffer (and an element per level)
         * plus the fold's; an extra rank none. */
        size_t cap = r >= s->p ? 0
                     : c->halving ? s->bytes + (size_t)s->levels * es_of(c) + (r < s->rem ? s->bytes : 0)
                                  : (2 * (size_t)s->levels + 2) * s->bytes;
        if (sb > cap) fail_msg("rank %d of %d asks for %zu scratch bytes, more than %zu", r, s->n, sb, cap);
        uint8_t *scratch = sb ? region(sb, &s->aux_reg[r][AUX_SCRATCH], &s->aux_len[r][AUX_SCRATCH], AUX_GUARD) : NULL;
        if (sb) s->aux[r][AUX_SCRATCH] = scratch, s->aux_len[r][AUX_SCRATCH] = sb;
        uint8_t *backup = region(s->bytes, &s->aux_reg[r][AUX_BACKUP], &s->aux_len[r][AUX_BACKUP], AUX_GUARD);
        s->aux[r][AUX_BACKUP] = backup;
        s->aux_len[r][AUX_BACKUP] = s->bytes;
        if (c->slice) eccl_rec_allreduce_init_ex(&s->a[r], &call, scratch, backup, c->halving, c->slice);
        else {
            assert_int_equal(eccl_rec_allreduce_halving(&call), c->halving);
            eccl_rec_allreduce_init(&s->a[r], &call, scratch, backup);
        }
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
    case P_INPUT: return s->d.in[m->base] + m->w.offset;
    case P_FINAL: return s->d.want + m->w.offset;
    default:
        cube(&s->c, &s->d, m->base, 1 << m->k, m->w.offset, m->w.len, s->tmp);
        return s->tmp;
    }
}

/* Where a payload lands: GATHER and RESULT at their offset in recvbuf,
 * partials in scratch; never on bytes another landing frame is using. */
static void check_dst(sim *s, int to, int from, const eccl_wire_data *w, const uint8_t *dst)
{
    if (w->phase == ECCL_PHASE_REC_GATHER || w->phase == ECCL_PHASE_REC_RESULT) {
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
    snprintf(buf, sizeof buf, "n=%d %s %s count=%zu %s %s slice=%zu seed=%llu", c->n, eccl_dtype_name(c->t),
             eccl_op_name(c->op), c->count, c->in_place ? "in-place" : "out-of-place",
             c->halving ? "halving" : "doubling", c->slice, (unsigned long long)c->seed);
    return buf;
}

static int output_final(const sim *s, int r) { return memcmp(s->recv[r], s->d.want, s->bytes) == 0; }

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
        if (memcmp(s->recv[r], s->d.want, s->bytes) != 0) {
            size_t e = 0;
            while (memcmp(s->recv[r] + e * es, s->d.want + e * es, es) == 0) e++;
            fail_msg("%s: rank %d element %zu wrong", case_str(&s->c), r, e);
        }
        check_guards(s, r);
        if (s->send_reg[r] && memcmp(s->send_reg[r], s->orig_send[r], s->send_len[r]) != 0)
            fail_msg("%s: rank %d's sendbuf was written", case_str(&s->c), r);
        check_rank_finished(s, r);
    }
}

/* ---- tests ------------------------------------------------------------------ */

/* The model's reference: its order (lower cube op upper cube, folded
 * leaves) is another than a left fold for floats, and the same for
 * integers, where the order cannot matter: a check of the order is a check
 * of something. */
static void test_reference(void **state)
{
    (void)state;
    for (int n = 3; n <= MAXN; n += 2) {
        rcase c = mk(n, ECCL_F32, ECCL_SUM, 64, 0, 0, 0, 5);
        cdata d;
        case_data(&c, &d);
        uint8_t left[256];
        memcpy(left, d.in[0], sizeof left);
        for (int r = 1; r < n; r++) eccl_reduce_into(left, d.in[r], 64, ECCL_F32, ECCL_SUM);
        assert_true(memcmp(left, d.want, sizeof left) != 0);
        case_data_free(&d);
        c.t = ECCL_U32;
        case_data(&c, &d);
        memcpy(left, d.in[0], sizeof left);
        for (int r = 1; r < n; r++) eccl_reduce_into(left, d.in[r], 64, ECCL_U32, ECCL_SUM);
        assert_memory_equal(left, d.want, sizeof left);
        case_data_free(&d);
    }
    /* The NaN case: which NaN comes out depends on the order. */
    rcase c = mk(5, ECCL_F32, ECCL_MAX, 4, 0, 0, 0, 6);
    c.nan = 1;
    cdata d;
    case_data(&c, &d);
    uint8_t right[16];
    memcpy(right, d.in[4], sizeof right);
    for (int r = 3; r >= 0; r--) eccl_reduce_into(right, d.in[r], 4, ECCL_F32, ECCL_MAX);
    assert_true(memcmp(right, d.want, 4) != 0);
    case_data_free(&d);
}

/* The schedule by hand: ranges, steps, peers, numbers. */
static void test_schedule(void **state)
{
    (void)state;
    rcase c = mk(4, ECCL_U8, ECCL_SUM, 11, 0, 1, 0, 0);
    size_t lo, hi;
    range_of(&c, 0, 1, &lo, &hi); /* 11 cut at 5 */
    assert_true(lo == 0 && hi == 5);
    range_of(&c, 3, 2, &lo, &hi); /* upper 6, its upper 3 */
    assert_true(lo == 8 && hi == 11);
    range_of(&c, 1, 2, &lo, &hi); /* upper at level 0, lower at 1: [5, 8) */
    assert_true(lo == 5 && hi == 8);
    /* N = 6: p = 4, ranks 4, 5 fold into 0, 1; three barrier rounds. */
    eccl_env env = host_env();
    uint8_t buf[64] = {0}, scratch[4096], backup[64];
    eccl_coll_call call = {.env = &env, .tag = 1, .sendbuf = buf, .recvbuf = buf + 32, .count = 11,
                           .dtype = ECCL_U8, .op = ECCL_SUM, .nranks = 6};
    eccl_rec_allreduce a;
    eccl_rec_step st;
    call.rank = 5;
    eccl_rec_allreduce_init_ex(&a, &call, NULL, backup, 1, 4);
    assert_int_equal(a.steps.nsteps, 2);
    assert_int_equal(a.steps.bar.rounds, 3);
    eccl_rec_allreduce_step(&a, 0, &st);
    assert_true(st.kind == ECCL_REC_FOLD_SEND && st.peer == 1 && st.tx && !st.rx && st.tx_n == 11);
    eccl_rec_allreduce_step(&a, 1, &st);
    assert_true(st.kind == ECCL_REC_RESULT_RECV && st.peer == 1 && st.rx && !st.tx);
    call.rank = 1;
    assert_true(eccl_rec_allreduce_scratch_bytes(&call, 1) <= sizeof scratch);
    eccl_rec_allreduce_init_ex(&a, &call, scratch, backup, 1, 4);
    assert_int_equal(a.steps.nsteps, 2 + 4);
    eccl_rec_allreduce_step(&a, 0, &st);
    assert_true(st.kind == ECCL_REC_FOLD_RECV && st.peer == 5 && st.lower);
    eccl_rec_allreduce_step(&a, 1, &st); /* halve with 0: rank 1 keeps the upper 6 */
    assert_true(st.kind == ECCL_REC_HALVE && st.peer == 0 && !st.lower && st.rx_at == 5 && st.rx_n == 6 &&
                st.tx_at == 0 && st.tx_n == 5);
    eccl_rec_allreduce_step(&a, 2, &st); /* halve with 3: keeps [5, 8) */
    assert_true(st.kind == ECCL_REC_HALVE && st.peer == 3 && st.lower && st.rx_at == 5 && st.rx_n == 3);
    eccl_rec_allreduce_step(&a, 3, &st); /* gather with 3 first */
    assert_true(st.kind == ECCL_REC_GATHER && st.peer == 3 && st.tx_at == 5 && st.tx_n == 3 && st.rx_at == 8 &&
                st.rx_n == 3);
    eccl_rec_allreduce_step(&a, 5, &st);
    assert_true(st.kind == ECCL_REC_RESULT_SEND && st.peer == 5);
    /* The mode: halving once it saves ECCL_REC_HALVING_MIN_SAVED bytes
     * sent and reduced per rank, B (2 log2 p - 3 + 3/p): from
     * ceil(p m / (2 p log2 p - 3 p + 3)) bytes, and p elements. */
    static const struct {
        uint32_t n, p, l;
    } w[] = {{2, 2, 1}, {3, 2, 1}, {6, 4, 2}, {9, 8, 3}, {100, 64, 6}};
    uint64_t m = ECCL_REC_HALVING_MIN_SAVED;
    for (size_t i = 0; i < sizeof w / sizeof *w; i++) {
        uint64_t f = 2ull * w[i].p * w[i].l - 3ull * w[i].p + 3, from = (w[i].p * m + f - 1) / f;
        call.nranks = w[i].n;
        for (int t = 0; t < 2; t++) {
            call.dtype = t ? ECCL_F64 : ECCL_U8;
            size_t es = t ? 8 : 1;
            call.count = (from + es - 1) / es;
            assert_true(eccl_rec_allreduce_halving(&call));
            call.count--;
            assert_false(eccl_rec_allreduce_halving(&call));
        }
    }
    call.dtype = ECCL_U8;
    call.nranks = 1u << 20; /* p elements at least */
    call.count = (1u << 20) - 1;
    assert_false(eccl_rec_allreduce_halving(&call));
    call.count++;
    assert_true(eccl_rec_allreduce_halving(&call));
    /* The algorithm table. */
    check_algo_table(&eccl_rec_allreduce_algo, ECCL_ALGO_RECURSIVE);
}

/* Every world 2..9, dtype and op on small buffers (0, 1, 7 elements and a
 * few slices of 8 bytes), both modes, in and out of place, each under its
 * own order, some with links opening late. */
static void test_exact_small(void **state)
{
    (void)state;
    static const size_t counts[] = {0, 1, 7, 29};
    uint64_t seed = 1;
    for (int n = 2; n <= MAXN; n++)
        for (int t = 0; t < ECCL_DTYPE_COUNT; t++)
            for (int op = 0; op < ECCL_OP_COUNT; op++)
                for (int ip = 0; ip < 2; ip++)
                    for (int h = 0; h < 2; h++) {
                        size_t count = counts[seed % 4];
                        rcase c = mk(n, (eccl_dtype)t, (eccl_op)op, count, ip, h, 8, seed);
                        run_case(&c, seed % 2 ? seed * 2654435761u : 0, seed % 3 ? 0 : LATE);
                        seed++;
                    }
}

/* NaNs with distinct payloads in several ranks' inputs: MIN/MAX keep the
 * first operand's, so only lower-op-higher everywhere gives every rank the
 * model's NaN. */
static void test_nan_order(void **state)
{
    (void)state;
    for (int n = 2; n <= MAXN; n++)
        for (int op = ECCL_MIN; op <= ECCL_MAX; op++)
            for (int h = 0; h < 2; h++) {
                rcase c = mk(n, ECCL_F32, (eccl_op)op, 29, h, h, 12, 40 + (uint64_t)n);
                c.nan = 1;
                run_case(&c, (uint64_t)n * 31 + (uint64_t)h, 0);
            }
}

/* The same call under many global orders: each gives the model's bits,
 * every invariant holding at every step. */
static void test_orders(void **state)
{
    (void)state;
    for (int n = 2; n <= MAXN; n++)
        for (int h = 0; h < 2; h++) {
            rcase c = mk(n, ECCL_F32, ECCL_AVG, 37, n % 2, h, 16, 900 + (uint64_t)n);
            for (uint64_t seed = 1; seed <= 30; seed++)
                run_case(&c, seed * 0x2545F4914F6CDD1Dull, seed % 4 == 0 ? LATE : 0);
        }
}

/* Stopped after every number of delivered frames, whole or mid-frame:
 * every rank's restore gives recvbuf back bit for bit. */
static void test_restore_anywhere(void **state)
{
    (void)state;
    for (int n = 2; n <= MAXN; n++)
        for (int ip = 0; ip < 2; ip++)
            for (int h = 0; h < 2; h++) {
                rcase c = mk(n, ECCL_I32, ECCL_SUM, 13, ip, h, 12, 300 + (uint64_t)n);
                restore_case(&c, 0, 0, 1, 0);
                c.t = ECCL_F16;
                c.op = ECCL_AVG;
                c.count = 5;
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
    for (int n = 2; n <= MAXN; n++)
        for (int h = 0; h < 2; h++) {
            rcase c = mk(n, ECCL_I16, ECCL_MIN, 11, n % 2, h, 6, 60 + (uint64_t)n);
            run_case(&c, 0, FUZZ);
            run_case(&c, 31337, FUZZ | LATE);
        }
}

/* The default frame size: slices of 1 MiB, the halving threshold from
 * eccl_rec_allreduce_halving (one element either side of it), and a call
 * of several slices per step in both modes. */
static void test_default_slices(void **state)
{
    (void)state;
    size_t th = (4 * (size_t)ECCL_REC_HALVING_MIN_SAVED / 7 + 3) / 4; /* f32 at p = 4: ceil(4m/7) bytes */
    rcase c = mk(5, ECCL_F32, ECCL_SUM, th - 1, 0, 0, 0, 70);
    run_case(&c, 0, 0);
    c = mk(5, ECCL_F32, ECCL_SUM, th, 1, 1, 0, 71);
    run_case(&c, 77, 0);
    /* 2.5 MiB: three slices a whole-buffer step, halves of 1.25 MiB; three
     * ranks halve from 1.5 MiB. */
    c = mk(6, ECCL_U8, ECCL_MAX, 5 * ECCL_RING_PASS_SLICE_BYTES / 2, 1, 1, 0, 72);
    run_case(&c, 5, 0);
    c = mk(3, ECCL_U8, ECCL_MIN, 5 * ECCL_RING_PASS_SLICE_BYTES / 2, 0, 1, 0, 75);
    run_case(&c, 0, 0);
    c = mk(3, ECCL_U8, ECCL_MIN, 3 * ECCL_RING_PASS_SLICE_BYTES / 2 - 1, 1, 0, 0, 76);
    run_case(&c, 3, 0);
    c = mk(6, ECCL_U16, ECCL_SUM, 5 * ECCL_RING_PASS_SLICE_BYTES / 4 + 3, 0, 1, 0, 73);
    run_case(&c, 0, LATE);
    c = mk(3, ECCL_F64, ECCL_PROD, 3 * ECCL_RING_PASS_SLICE_BYTES / 8 + 1, 0, 0, ECCL_RING_PASS_SLICE_BYTES, 74);
    restore_case(&c, 9, 0, 2, 0);
}

/* The queue's cap (ECCL_RING_MAX_QUEUED per link) holds slices back: a
 * rank with every slice received is not complete, nor past its step,
 * until its own are all queued; then the run finishes. */
static void test_queue_cap(void **state)
{
    (void)state;
    size_t count = 6 * (size_t)ECCL_RING_PASS_SLICE_BYTES; /* 6 slices a step: more than the cap */
    assert_true(count > ECCL_RING_MAX_QUEUED);
    rcase c = mk(2, ECCL_U8, ECCL_SUM, count, 0, 0, ECCL_RING_PASS_SLICE_BYTES, 80);
    queue_cap_case(&c, ECCL_RING_PASS_SLICE_BYTES);
}

/* The completion round, step by step: every data frame delivered and every
 * rank full, no rank completes before its last token, two ranks included. */
static void test_completion(void **state)
{
    (void)state;
    for (int n = 2; n <= MAXN; n++)
        for (int h = 0; h < 2; h++) {
            rcase c = mk(n, ECCL_U32, ECCL_SUM, 9, 0, h, 8, 5);
            completion_case(&c);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference),     cmocka_unit_test(test_schedule),
        cmocka_unit_test(test_exact_small),   cmocka_unit_test(test_nan_order),
        cmocka_unit_test(test_orders),        cmocka_unit_test(test_restore_anywhere),
        cmocka_unit_test(test_malformed),     cmocka_unit_test(test_default_slices),
        cmocka_unit_test(test_queue_cap),     cmocka_unit_test(test_completion),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
