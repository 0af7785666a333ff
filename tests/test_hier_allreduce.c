/* The hierarchical all-reduce (core/coll/hier_allreduce.c) in one process:
 * the N = L x H state machines of one call, wired by a harness that hands
 * each DATA frame a rank queued to the rank at the other end of its peer
 * link, through the algorithm table (eccl_hier_allreduce_algo) as comm does
 * after the socket: recv, the payload copied to where recv said,
 * recv_done.
 *
 * Links open the way comm's peer links do: only once the LOWER rank of the
 * pair asked for it (links->peer), at once or, with LATE, some events
 * later. The harness alone picks the global order (round robin, or seeded
 * random choices of which rank pumps, which link delivers next, and
 * whether a payload lands in two parts with other events in between), so
 * every interleaving, stop point and malformed frame is reproducible.
 *
 * Every run checks, after every pump and every delivery, against a model
 * written here from the documented schedule (coll/hier_allreduce.h), not
 * from the engine's code:
 *   - each frame's link, header (phase, step, offset, length, no flags,
 *     ring 0) and payload when the socket takes it: an RS slice is the
 *     sender's input; an INTER reduce-scatter slice the fold of host
 *     partials from its chunk's first host to the sender's (each host
 *     partial the fold of its local inputs in local rank order); every
 *     all-gather slice the final values;
 *   - where a payload lands: final values straight into recvbuf at their
 *     offset, partials into scratch; two frames landing in one rank at once
 *     never share a byte;
 *   - a frame only reaches a rank whose expects(PEER + sender) is 1, and
 *     expects is 0 as soon as the last frame from that rank arrived;
 *   - have_full never goes back, and turns 1 only with the final output in
 *     recvbuf (the same bits on every rank: the model's);
 *   - a barrier token of round k leaves rank i only when ranks i, i-1, ...,
 *     i-2^k+1 are full; complete() only once every rank is full, with no
 *     frame of the rank still queued and every frame of the model sent and
 *     received;
 *   - tx/rx byte counts; guard bytes around every buffer stay untouched;
 *     sendbuf is never written; a stop anywhere, restore() gives recvbuf
 *     back bit for bit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coll/hier_allreduce.h"
#include "coll/reduce.h"
#include "coll/ring_allreduce.h" /* ECCL_RING_MAX_QUEUED */
#include "coll/ring_pass.h"      /* ECCL_RING_PASS_SLICE_BYTES */
#include "proto/chan.h"
#include "proto/wire.h"
#include "util/half.h"

#define MAXN 8
#define GUARD 64
#define SEND_GUARD 0x5a
#define RECV_GUARD 0xa5
#define AUX_GUARD 0x3c
#define TAG 91
#define EPOCH 5

#include "coll_data.h"
#include "host_env.h"

/* ---- one call's model -------------------------------------------------------- */

typedef struct hcase {
    int L, H;
    eccl_dtype t;
    eccl_op op;
    size_t count;
    int in_place;
    size_t slice; /* bytes per frame asked for (0: the default) */
    uint64_t seed;
    int nan;      /* f32 MIN/MAX: distinct NaNs in many elements of many ranks */
} hcase;

static hcase mk(int L, int H, eccl_dtype t, eccl_op op, size_t count, int in_place, size_t slice, uint64_t seed)
{
    hcase c;
    memset(&c, 0, sizeof c);
    c.L = L;
    c.H = H;
    c.t = t;
    c.op = op;
    c.count = count;
    c.in_place = in_place;
    c.slice = slice;
    c.seed = seed;
    return c;
}

static size_t es_of(const hcase *c) { return eccl_dtype_size(c->t); }
static int n_of(const hcase *c) { return c->L * c->H; }
static size_t slice_of(const hcase *c)
{
    size_t s = c->slice ? c->slice : ECCL_RING_PASS_SLICE_BYTES, es = es_of(c);
    s = s / es * es;
    return s ? s : es;
}

/* The documented layout, written out: part i of n elements in `parts` is
 * [floor(i n / parts), floor((i+1) n / parts)). */
static void part(size_t n, int parts, int i, size_t *lo, size_t *hi)
{
    *lo = (size_t)((uint64_t)n * (uint64_t)i / (uint64_t)parts); /* test sizes: no overflow */
    *hi = (size_t)((uint64_t)n * (uint64_t)(i + 1) / (uint64_t)parts);
}

/* Shard l's chunk c: elements [lo, hi) of the buffer. */
static void chunk(const hcase *c, int l, int ch, size_t *lo, size_t *hi)
{
    size_t slo, shi, a, b;
    part(c->count, c->L, l, &slo, &shi);
    part(shi - slo, c->H, ch, &a, &b);
    *lo = slo + a;
    *hi = slo + b;
}

typedef struct cdata {
    uint8_t *in[MAXN], *old[MAXN], *y[MAXN], *want;
} cdata;

/* y[h]: host h's partial, in_{hL} op in_{hL+1} op ... op in_{hL+L-1}. */
static void host_partials(const hcase *c, cdata *d)
{
    size_t bytes = c->count * es_of(c);
    for (int h = 0; h < c->H; h++) {
        d->y[h] = malloc(bytes + 1);
        assert_non_null(d->y[h]);
        memcpy(d->y[h], d->in[h * c->L], bytes);
        for (int m = 1; m < c->L; m++) eccl_reduce_into(d->y[h], d->in[h * c->L + m], c->count, c->t, c->op);
    }
}

/* Hosts from..to (mod H, `from` first) folded over elements [lo, hi). */
static void host_fold(const hcase *c, const cdata *d, int from, int to, size_t lo, size_t hi, uint8_t *out)
{
    size_t es = es_of(c);
    memcpy(out, d->y[from] + lo * es, (hi - lo) * es);
    for (int h = from; h != to;) {
        h = (h + 1) % c->H;
        eccl_reduce_into(out, d->y[h] + lo * es, hi - lo, c->t, c->op);
    }
}

static void case_data(const hcase *c, cdata *d)
{
    size_t es = es_of(c), bytes = c->count * es;
    int n = n_of(c);
    memset(d, 0, sizeof *d);
    for (int r = 0; r < n; r++) {
        d->in[r] = malloc(bytes + 1);
        d->old[r] = malloc(bytes + 1);
        assert_true(d->in[r] && d->old[r]);
        fill_input(d->in[r], c->t, c->op, c->count, c->seed * 131 + (uint64_t)r);
        fill_bytes(d->old[r], bytes, c->seed * 7 + (uint64_t)r);
        /* NaNs with distinct payloads (MIN/MAX keep the first operand's)
         * in every other element of every other rank, both parities. */
        for (size_t e = 0; c->nan && e < c->count; e++) {
            if ((r + (int)e) % 2) continue;
            uint32_t bits = 0x7fc00000u | (uint32_t)(r + 1) | (uint32_t)(e % 4096) << 8;
            memcpy(d->in[r] + e * 4, &bits, 4);
        }
    }
    host_partials(c, d);
    /* Chunk ch of every shard: hosts ch, ch+1, ..., ch+H-1. */
    d->want = malloc(bytes + 1);
    assert_non_null(d->want);
    for (int l = 0; l < c->L; l++)
        for (int ch = 0; ch < c->H; ch++) {
            size_t lo, hi;
            chunk(c, l, ch, &lo, &hi);
            if (hi > lo) host_fold(c, d, ch, (ch + c->H - 1) % c->H, lo, hi, d->want + lo * es);
        }
    if (c->op == ECCL_AVG) eccl_reduce_scale_div(d->want, c->count, c->t, (uint32_t)n);
}

static void case_data_free(cdata *d)
{
    for (int r = 0; r < MAXN; r++) {
        free(d->in[r]);
        free(d->old[r]);
        free(d->y[r]);
    }
    free(d->want);
}

/* ---- the model's frames ---------------------------------------------------- */

enum { P_INPUT, P_PARTIAL, P_FINAL, P_NONE };

typedef struct mframe {
    int to;
    eccl_wire_data w;
    int what;     /* P_*: its payload */
    int from_h, to_h; /* P_PARTIAL: hosts folded; P_INPUT: from_h = the sender */
} mframe;

#define MAXF 4096

/* ---- the harness (peer_harness.h) ------------------------------------------ */

#define PH_CASE hcase
#define PH_OP eccl_hier_allreduce
#define PH_DONE_PHASE ECCL_PHASE_HIER_DONE
#define PH_SIM_FIELDS size_t bytes;
#include "peer_harness.h"

static void add_slices(sim *s, int from, int to, uint8_t phase, uint16_t step, size_t at, size_t n, int what,
                       int from_h, int to_h)
{
    size_t es = es_of(&s->c), S = slice_of(&s->c), b = n * es;
    size_t nsl = b ? (b + S - 1) / S : 1;
    for (size_t j = 0; j < nsl; j++) {
        assert_true(s->nmf[from] < MAXF);
        mframe *m = &s->mf[from][s->nmf[from]++];
        memset(m, 0, sizeof *m);
        m->to = to;
        m->w = (eccl_wire_data){.tag = TAG, .epoch = EPOCH, .phase = phase, .step = step,
                                .offset = at * es + j * S,
                                .len = (uint32_t)(b ? (b - j * S < S ? b - j * S : S) : 0)};
        m->what = what;
        m->from_h = from_h;
        m->to_h = to_h;
        s->pair_total[from][to]++;
    }
}

/* Every frame each rank sends, in order, as hier_allreduce.h documents. */
static void build_model(sim *s)
{
    const hcase *c = &s->c;
    int L = c->L, H = c->H;
    for (int r = 0; r < s->n; r++) {
        int h = r / L, l = r % L, base = h * L, next = ((h + 1) % H) * L + l;
        s->mf[r] = malloc(MAXF * sizeof(mframe));
        assert_non_null(s->mf[r]);
        size_t lo, hi;
        for (int k = 1; k < L; k++) {
            int j = (l + k) % L;
            part(c->count, L, j, &lo, &hi);
            add_slices(s, r, base + j, ECCL_PHASE_HIER_RS, (uint16_t)k, lo, hi - lo, P_INPUT, r, 0);
        }
        for (int j = 0; j < H - 1; j++) {
            int chn = ((h - j) % H + H) % H;
            chunk(c, l, chn, &lo, &hi);
            add_slices(s, r, next, ECCL_PHASE_HIER_INTER, (uint16_t)j, lo, hi - lo, P_PARTIAL, chn, h);
        }
        for (int j = 0; j < H - 1; j++) {
            int chn = ((h + 1 - j) % H + H) % H;
            chunk(c, l, chn, &lo, &hi);
            add_slices(s, r, next, ECCL_PHASE_HIER_INTER, (uint16_t)(H - 1 + j), lo, hi - lo, P_FINAL, 0, 0);
        }
        part(c->count, L, l, &lo, &hi);
        for (int k = 1; k < L; k++)
            add_slices(s, r, base + (l + k) % L, ECCL_PHASE_HIER_AG, (uint16_t)k, lo, hi - lo, P_FINAL, 0, 0);
        for (int k = 0; k < s->rounds; k++) {
            int to = (r + (1 << k)) % s->n;
            mframe *m = &s->mf[r][s->nmf[r]++];
            memset(m, 0, sizeof *m);
            m->to = to;
            m->w = (eccl_wire_data){.tag = TAG, .epoch = EPOCH, .phase = ECCL_PHASE_HIER_DONE, .step = (uint16_t)k};
            m->what = P_NONE;
            s->pair_total[r][to]++;
        }
    }
}

/* The per-step counters (tx_i, rx_i, ...: three arrays of nsteps). */
static size_t side_state(const sim *s, int r, const void **p)
{
    size_t cb = (size_t)3 * s->a[r].steps.nsteps * sizeof(uint32_t);
    assert_true(cb <= (size_t)3 * (2 * MAXN) * sizeof(uint32_t));
    *p = s->a[r].steps.tx_i;
    return cb;
}

static void sim_init(sim *s, const hcase *c, uint64_t sched_seed, int late)
{
    memset(s, 0, sizeof *s);
    s->c = *c;
    s->n = n_of(c);
    s->rounds = log2_of(s->n);
    s->bytes = c->count * es_of(c);
    s->env = host_env();
    s->alg = &eccl_hier_allreduce_algo;
    s->rng = sched_seed;
    s->late = late;
    s->stop = SIZE_MAX;
    /* complete() only once every rank is full; a frame is tried with
     * every other phase, but not on another link that owes the same
     * header; the step counters outside the struct stay as they were. */
    s->owed_elsewhere = 1;
    s->side_state = side_state;
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
        if (c->in_place) memcpy(s->d.old[r], s->d.in[r], s->bytes);
        eccl_coll_call call = {.env = &s->env, .kind = ECCL_COLL_ALLREDUCE, .tag = TAG, .epoch = EPOCH,
                               .sendbuf = s->send[r], .recvbuf = s->recv[r], .count = c->count, .dtype = c->t,
                               .op = c->op, .rank = (uint32_t)r, .nranks = (uint32_t)s->n,
                               .local_size = (uint32_t)c->L};
        assert_true(eccl_hier_allreduce_can(&call));
        size_t sb = eccl_hier_allreduce_scratch_bytes(&call);
        /* Bounded as the layout says: the counters (3 per step, 16-byte
         * padded) and L + 1 shards of at most ceil(count / L) elements. */
        size_t nsteps = 2 * (size_t)(c->L - 1) + 2 * (size_t)(c->H - 1);
        size_t cap = (12 * nsteps + 15) / 16 * 16 + (size_t)(c->L + 1) * ((c->count + (size_t)c->L - 1) / (size_t)c->L) * es_of(c);
        if (sb > cap) fail_msg("rank %d asks for %zu scratch bytes, more than %zu", r, sb, cap);
        /* 16-byte aligned, as the pool gives it (GUARD is a multiple). */
        uint8_t *scratch = region(sb, &s->aux_reg[r][AUX_SCRATCH], &s->aux_len[r][AUX_SCRATCH], AUX_GUARD);
        s->aux[r][AUX_SCRATCH] = scratch;
        s->aux_len[r][AUX_SCRATCH] = sb;
        uint8_t *backup = region(s->bytes, &s->aux_reg[r][AUX_BACKUP], &s->aux_len[r][AUX_BACKUP], AUX_GUARD);
        s->aux[r][AUX_BACKUP] = backup;
        s->aux_len[r][AUX_BACKUP] = s->bytes;
        if (c->slice) eccl_hier_allreduce_init_ex(&s->a[r], &call, scratch, backup, c->slice);
        else eccl_hier_allreduce_init(&s->a[r], &call, scratch, backup);
        s->px[r] = (pctx){s, r};
        for (int j = 0; j < s->n; j++) {
            assert_int_equal(eccl_chan_init(&s->ch[r][j], &s->env, NULL, 64), ECCL_OK);
            s->lbuf[r][j] = malloc(S + 64);
            assert_non_null(s->lbuf[r][j]);
        }
    }
    build_model(s);
}

static const char *case_str(const hcase *c)
{
    static char buf[160];
    snprintf(buf, sizeof buf, "L=%d H=%d %s %s count=%zu %s slice=%zu seed=%llu", c->L, c->H,
             eccl_dtype_name(c->t), eccl_op_name(c->op), c->count, c->in_place ? "in-place" : "out-of-place",
             c->slice, (unsigned long long)c->seed);
    return buf;
}

static const uint8_t *model_payload(sim *s, const mframe *m)
{
    size_t es = es_of(&s->c);
    switch (m->what) {
    case P_INPUT: return s->d.in[m->from_h] + m->w.offset;
    case P_FINAL: return s->d.want + m->w.offset;
    default: {
        size_t lo = m->w.offset / es;
        host_fold(&s->c, &s->d, m->from_h, m->to_h, lo, lo + m->w.len / es, s->tmp);
        return s->tmp;
    }
    }
}

/* Final values land at their offset in recvbuf, partials in scratch;
 * never on bytes another landing frame is using. */
static void check_dst(sim *s, int to, int from, const eccl_wire_data *w, const uint8_t *dst)
{
    int final = w->phase == ECCL_PHASE_HIER_AG || (w->phase == ECCL_PHASE_HIER_INTER && w->step >= s->c.H - 1);
    if (final) {
        if (dst != s->recv[to] + w->offset) fail_msg("rank %d: phase %u step %u lands off its recvbuf offset", to,
                                                     w->phase, w->step);
    } else {
        const uint8_t *sc = s->aux[to][AUX_SCRATCH];
        if (dst < sc || dst + w->len > sc + s->aux_len[to][AUX_SCRATCH])
            fail_msg("rank %d: a phase-%u partial lands outside its scratch", to, w->phase);
    }
    for (int x = 0; x < s->n; x++) {
        const landing *o = &s->land[to][x];
        if (x != from && o->open && o->w.len && dst < o->dst + o->w.len && o->dst < dst + w->len)
            fail_msg("rank %d: frames from %d and %d land on the same bytes", to, from, x);
    }
}

static int output_final(const sim *s, int r) { return memcmp(s->recv[r], s->d.want, s->bytes) == 0; }

static void print_state(const sim *s, int r)
{
    print_message("rank %d: step %u of %u, folded %u, full %d, inflight %u\n", r, s->a[r].steps.cur, s->a[r].steps.nsteps,
                  s->a[r].rs_done, s->a[r].steps.have_full, s->a[r].steps.inflight);
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
        /* Bit-identical replicas: every rank against rank 0 too. */
        assert_memory_equal(s->recv[r], s->recv[0], s->bytes);
        check_guards(s, r);
        if (s->send_reg[r] && memcmp(s->send_reg[r], s->orig_send[r], s->send_len[r]) != 0)
            fail_msg("%s: rank %d's sendbuf was written", case_str(&s->c), r);
        check_rank_finished(s, r);
    }
}

/* ---- tests ------------------------------------------------------------------ */

static const int shapes[][2] = {{2, 2}, {2, 3}, {3, 2}, {4, 2}, {2, 4}};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

/* The model's reference: its order (local ranks left to right, then hosts
 * from each chunk's first) is another than a left fold over ranks for
 * floats, and the same for integers, where the order cannot matter: a
 * check of the order is a check of something. */
static void test_reference(void **state)
{
    (void)state;
    for (size_t i = 0; i < NSHAPES; i++) {
        hcase c = mk(shapes[i][0], shapes[i][1], ECCL_F32, ECCL_SUM, 64, 0, 0, 5);
        int n = n_of(&c);
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
}

/* The schedule by hand: shards, chunks, peers, wire steps. */
static void test_schedule(void **state)
{
    (void)state;
    size_t at, n;
    eccl_hier_part(0, 11, 3, 0, &at, &n); /* 11 in 3: 0-3, 3-7, 7-11 */
    assert_true(at == 0 && n == 3);
    eccl_hier_part(0, 11, 3, 1, &at, &n);
    assert_true(at == 3 && n == 4);
    eccl_hier_part(5, 11, 3, 2, &at, &n);
    assert_true(at == 12 && n == 4);
    eccl_hier_part(0, 1, 4, 3, &at, &n); /* count < L: only the last part has the element */
    assert_true(at == 0 && n == 1);
    eccl_hier_part(0, 1, 4, 2, &at, &n);
    assert_true(n == 0);
    eccl_env env = host_env();
    uint8_t buf[64] = {0}, scratch[1024] __attribute__((aligned(16))), backup[64];
    /* N = 6 as 3 hosts of 2: rank 3 is local 1 of host 1. count 24 u8:
     * shard 1 is [12, 24), its chunks [12, 16), [16, 20), [20, 24). */
    eccl_coll_call call = {.env = &env, .kind = ECCL_COLL_ALLREDUCE, .tag = 1, .sendbuf = buf, .recvbuf = buf + 32,
                           .count = 24, .dtype = ECCL_U8, .op = ECCL_SUM, .rank = 3, .nranks = 6, .local_size = 2};
    assert_true(eccl_hier_allreduce_can(&call));
    assert_true(eccl_hier_allreduce_scratch_bytes(&call) <= sizeof scratch);
    eccl_hier_allreduce a;
    eccl_hier_step st;
    eccl_hier_allreduce_init_ex(&a, &call, scratch, backup, 4);
    assert_int_equal(a.steps.nsteps, 2 * 1 + 2 * 2);
    assert_int_equal(a.steps.bar.rounds, 3);
    eccl_hier_allreduce_step(&a, 0, &st); /* RS: shard 0 to rank 2, shard 1 from it */
    assert_true(st.kind == ECCL_HIER_RS && st.phase == ECCL_PHASE_HIER_RS && st.wire_step == 1 && st.tx_peer == 2 &&
                st.rx_peer == 2 && st.tx_at == 0 && st.tx_n == 12 && st.rx_at == 12 && st.rx_n == 12);
    eccl_hier_allreduce_step(&a, 1, &st); /* ring RS j=0: chunk 1 to rank 5, chunk 0 from rank 1 */
    assert_true(st.kind == ECCL_HIER_INTER_RS && st.wire_step == 0 && st.tx_peer == 5 && st.rx_peer == 1 &&
                st.tx_at == 16 && st.tx_n == 4 && st.rx_at == 12 && st.rx_n == 4);
    eccl_hier_allreduce_step(&a, 2, &st); /* j=1: chunk 0 on, chunk 2 in: ours (h+1) */
    assert_true(st.kind == ECCL_HIER_INTER_RS && st.wire_step == 1 && st.tx_at == 12 && st.rx_at == 20);
    eccl_hier_allreduce_step(&a, 3, &st); /* ring AG j=0: chunk 2 out, chunk 1 in */
    assert_true(st.kind == ECCL_HIER_INTER_AG && st.wire_step == 2 && st.tx_at == 20 && st.rx_at == 16);
    eccl_hier_allreduce_step(&a, 4, &st);
    assert_true(st.kind == ECCL_HIER_INTER_AG && st.wire_step == 3 && st.tx_at == 16 && st.rx_at == 12);
    eccl_hier_allreduce_step(&a, 5, &st); /* AG: shard 1 to rank 2, shard 0 from it */
    assert_true(st.kind == ECCL_HIER_AG && st.phase == ECCL_PHASE_HIER_AG && st.wire_step == 1 && st.tx_peer == 2 &&
                st.tx_at == 12 && st.tx_n == 12 && st.rx_at == 0 && st.rx_n == 12);
    /* Who can run it: an all-reduce, L >= 2 dividing N into H >= 2. */
    call.local_size = 3;
    assert_true(eccl_hier_allreduce_can(&call));
    call.local_size = 6;
    assert_false(eccl_hier_allreduce_can(&call));
    call.local_size = 4;
    assert_false(eccl_hier_allreduce_can(&call));
    call.local_size = 1;
    assert_false(eccl_hier_allreduce_can(&call));
    call.local_size = 0;
    assert_false(eccl_hier_allreduce_can(&call));
    call.local_size = 2;
    call.kind = ECCL_COLL_BROADCAST;
    assert_false(eccl_hier_allreduce_can(&call));
    check_algo_table(&eccl_hier_allreduce_algo, ECCL_ALGO_HIER);
}

/* Every shape, dtype and op on small buffers (0, 1, L-1 elements, a few
 * slices of 8 bytes), in and out of place, each under its own order, some
 * with links opening late. */
static void test_exact_small(void **state)
{
    (void)state;
    uint64_t seed = 1;
    for (size_t i = 0; i < NSHAPES; i++)
        for (int t = 0; t < ECCL_DTYPE_COUNT; t++)
            for (int op = 0; op < ECCL_OP_COUNT; op++)
                for (int ip = 0; ip < 2; ip++) {
                    int L = shapes[i][0], H = shapes[i][1];
                    size_t counts[] = {0, 1, (size_t)L - 1, 29, 61};
                    size_t count = counts[seed % 5];
                    hcase c = mk(L, H, (eccl_dtype)t, (eccl_op)op, count, ip, 8, seed);
                    run_case(&c, seed % 2 ? seed * 2654435761u : 0, seed % 3 ? 0 : LATE);
                    seed++;
                }
}

/* NaNs with distinct payloads: only the documented operand order
 * everywhere gives every rank the model's NaN. */
static void test_nan_order(void **state)
{
    (void)state;
    for (size_t i = 0; i < NSHAPES; i++)
        for (int op = ECCL_MIN; op <= ECCL_MAX; op++)
            for (int ip = 0; ip < 2; ip++) {
                hcase c = mk(shapes[i][0], shapes[i][1], ECCL_F32, (eccl_op)op, 37, ip, 12, 40 + i);
                c.nan = 1;
                run_case(&c, i * 31 + (uint64_t)ip + 1, 0);
            }
}

/* The same call under many global orders: each gives the model's bits. */
static void test_orders(void **state)
{
    (void)state;
    for (size_t i = 0; i < NSHAPES; i++) {
        hcase c = mk(shapes[i][0], shapes[i][1], ECCL_F32, ECCL_AVG, 53, (int)(i % 2), 16, 900 + i);
        for (uint64_t seed = 1; seed <= 30; seed++)
            run_case(&c, seed * 0x2545F4914F6CDD1Dull, seed % 4 == 0 ? LATE : 0);
        c = mk(shapes[i][0], shapes[i][1], ECCL_F64, ECCL_SUM, 3, (int)(i % 2 == 0), 8, 950 + i);
        for (uint64_t seed = 1; seed <= 10; seed++) run_case(&c, seed * 7919, seed % 2 ? LATE : 0);
    }
}

/* Stopped after every number of delivered frames, whole or mid-frame:
 * every rank's restore gives recvbuf back bit for bit. */
static void test_restore_anywhere(void **state)
{
    (void)state;
    for (size_t i = 0; i < NSHAPES; i++)
        for (int ip = 0; ip < 2; ip++) {
            hcase c = mk(shapes[i][0], shapes[i][1], ECCL_I32, ECCL_SUM, 13, ip, 12, 300 + i);
            restore_case(&c, 0, 0, 1, 0);
            c.t = ECCL_F16;
            c.op = ECCL_AVG;
            c.count = 7;
            restore_case(&c, 4242 + i, 0, 1, LATE);
        }
}

/* Malformed frames at every point of a run: another link's, a ring or
 * tree role's, every other phase, step, offset, length, QUANT or BULK
 * flag, ring 1, a token where data is owed, the frame after the next
 * (FIFO broken), the last frame again; and after the last expected frame,
 * any frame. Each is refused with ECCL_ERR_PROTOCOL and changes nothing. */
static void test_malformed(void **state)
{
    (void)state;
    for (size_t i = 0; i < NSHAPES; i++) {
        hcase c = mk(shapes[i][0], shapes[i][1], ECCL_I16, ECCL_MIN, 23, (int)(i % 2), 6, 60 + i);
        run_case(&c, 0, FUZZ);
        run_case(&c, 31337 + i, FUZZ | LATE);
    }
}

/* The default frame size: slices of 1 MiB, shards of two and three slices
 * (2.5 MiB over two local ranks; 4.5 MiB over three). */
static void test_default_slices(void **state)
{
    (void)state;
    hcase c = mk(2, 2, ECCL_U8, ECCL_MAX, 5 * ECCL_RING_PASS_SLICE_BYTES / 2 + 3, 1, 0, 72);
    run_case(&c, 5, 0);
    c = mk(3, 2, ECCL_F32, ECCL_SUM, 9 * ECCL_RING_PASS_SLICE_BYTES / 8 + 5, 0, 0, 73);
    run_case(&c, 0, LATE);
}

/* The queue's cap (ECCL_RING_MAX_QUEUED per link) holds slices back; the
 * run still finishes. */
static void test_queue_cap(void **state)
{
    (void)state;
    size_t slice = 65536, count = 2 * (ECCL_RING_MAX_QUEUED / slice + 4) * slice; /* more slices a shard than fit */
    hcase c = mk(2, 2, ECCL_U8, ECCL_SUM, count, 0, slice, 80);
    sim *s = malloc(sizeof *s);
    assert_non_null(s);
    sim_init(s, &c, 0, 0);
    for (int r = 0; r < 4; r++) pump(s, r);
    for (int r = 0; r < 4; r++) {
        int local = r ^ 1;
        assert_true(s->ch[r][local].out_head != NULL);
        assert_true(s->ch[r][local].queued_bytes <= ECCL_RING_MAX_QUEUED + slice);
        assert_true(s->ch[r][local].queued_bytes < count / 2);
        assert_false(is_full(s, r));
    }
    assert_int_equal(sim_run(s), ECCL_OK);
    check_results(s);
    sim_fini(s);
    free(s);
}

/* The completion round, step by step: every data frame delivered and every
 * rank full, no rank completes before its last token. */
static void test_completion(void **state)
{
    (void)state;
    for (size_t i = 0; i < NSHAPES; i++) {
        hcase c = mk(shapes[i][0], shapes[i][1], ECCL_U32, ECCL_SUM, 9, 0, 8, 5);
        completion_case(&c); /* four ranks or more: none completes early */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference),      cmocka_unit_test(test_schedule),
        cmocka_unit_test(test_exact_small),    cmocka_unit_test(test_nan_order),
        cmocka_unit_test(test_orders),         cmocka_unit_test(test_restore_anywhere),
        cmocka_unit_test(test_malformed),      cmocka_unit_test(test_default_slices),
        cmocka_unit_test(test_queue_cap),      cmocka_unit_test(test_completion),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
