/* All-gather by recursive doubling (core/coll/rec_allgather.c) in one
 * process: the N state machines of one call, wired by a harness that hands
 * each DATA frame a rank queued to the rank at the other end of its peer
 * link, through the algorithm table (eccl_rec_ag_algo) as comm does after
 * the socket: recv, the payload copied to where recv said, recv_done. The
 * harness is peer_harness.h (links that open only once the lower rank
 * asked, at once or late; seeded global orders; payloads that land in two
 * parts; stops anywhere, whole or mid-frame; malformed variants of every
 * frame), with the model of this algorithm.
 *
 * Every run checks, after every pump and every delivery, against a model
 * written here from the documented schedule (coll/rec_allgather.h), not
 * from the engine's code:
 *   - each frame's link, header (phase, step, offset: where the range
 *     starts in recvbuf plus the slice's place in its pieces back to back,
 *     length, no flags, ring 0) and payload when the socket takes it: the
 *     blocks it names, each being its rank's input (a payload changed
 *     after it was queued shows there, as the channel borrows it);
 *   - where a payload lands: straight into recvbuf, at its own blocks;
 *   - a frame only reaches a rank whose expects(PEER + sender) is 1, and
 *     expects is 0 as soon as the last frame from that rank arrived;
 *   - have_full never goes back, and turns 1 only with every block in
 *     recvbuf;
 *   - a barrier token of round k leaves rank i only when ranks i, i-1, ...,
 *     i-2^k+1 are full; complete() only once every rank is full (N > 2),
 *     with nothing of the rank still queued;
 *   - tx/rx byte counts; guard bytes around every buffer stay untouched;
 *     sendbuf is never written (in place: recvbuf's own block keeps the
 *     input);
 *   - stopped anywhere, restore gives recvbuf back bit for bit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coll/rec_allgather.h"
#include "coll/ring_allreduce.h" /* ECCL_RING_MAX_QUEUED */
#include "coll/ring_pass.h"      /* ECCL_RING_PASS_SLICE_BYTES, the output extent */
#include "proto/chan.h"
#include "proto/wire.h"

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
    size_t count; /* elements per block */
    int in_place;
    size_t slice; /* bytes per frame asked for (0: the default) */
    uint64_t seed;
} rcase;

static rcase mk(int n, eccl_dtype t, size_t count, int in_place, size_t slice, uint64_t seed)
{
    rcase c;
    memset(&c, 0, sizeof c);
    c.n = n;
    c.t = t;
    c.count = count;
    c.in_place = in_place;
    c.slice = slice;
    c.seed = seed;
    return c;
}

static size_t es_of(const rcase *c) { return eccl_dtype_size(c->t); }
static size_t block_of(const rcase *c) { return c->count * es_of(c); }
/* Slice bytes: the asked size in whole elements, at least one. */
static size_t slice_of(const rcase *c)
{
    size_t s = c->slice ? c->slice : ECCL_RING_PASS_SLICE_BYTES, es = es_of(c);
    s = s / es * es;
    return s ? s : es;
}

/* One frame of the model, in its sender's order. */
typedef struct mframe {
    int to;
    eccl_wire_data w;
    size_t nat; /* where its payload is in recvbuf, bytes */
} mframe;

#define MAXF 4096

/* Data of one case: each rank's input block, what its recvbuf held before,
 * and the output (block b: rank b's input). */
typedef struct cdata {
    uint8_t *in[MAXN], *old[MAXN], *want;
} cdata;

/* Random bits (an all-gather only copies: the dtype sets the element size
 * alone), each block's first byte stamped so that no two inputs are alike
 * and no input is what recvbuf held there: a block landing in the wrong
 * place, or not at all, never goes unseen, even at one byte a block. */
static void case_data(const rcase *c, cdata *d)
{
    size_t B = block_of(c), total = (size_t)c->n * B;
    memset(d, 0, sizeof *d);
    d->want = malloc(total + 1);
    assert_non_null(d->want);
    for (int r = 0; r < c->n; r++) {
        d->in[r] = malloc(B + 1);
        d->old[r] = malloc(total + 1);
        assert_true(d->in[r] && d->old[r]);
        fill_bytes(d->in[r], B, c->seed * 131 + (uint64_t)r);
        fill_bytes(d->old[r], total, c->seed * 7 + 1000 + (uint64_t)r);
        for (int b = 0; B && b < c->n; b++) d->old[r][(size_t)b * B] = (uint8_t)(0x80 + b);
        if (B) d->in[r][0] = (uint8_t)r;
        memcpy(d->want + (size_t)r * B, d->in[r], B);
    }
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
#define PH_OP eccl_rec_ag
#define PH_DONE_PHASE ECCL_PHASE_RECAG_DONE
#define PH_SIM_FIELDS         \
    int p, levels, rem;       \
    size_t block, total; /* bytes of a block, of recvbuf */
#include "peer_harness.h"

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

/* The slices of a step's range: two pieces of recvbuf (at[i], len[i]
 * bytes), each cut into slices of its own; offsets count from the first
 * piece's start with the pieces laid back to back; one empty frame if
 * both are empty. */
static void add_range(sim *s, int from, int to, uint8_t phase, uint16_t step, const size_t at[2],
                      const size_t len[2])
{
    size_t S = slice_of(&s->c), off = 0;
    uint32_t before = s->nmf[from];
    for (int i = 0; i < 2; i++) {
        for (size_t j = 0; j * S < len[i]; j++) {
            mframe *m = add_frame(s, from, to, phase, step);
            m->w.offset = at[0] + off + j * S;
            m->w.len = (uint32_t)(len[i] - j * S < S ? len[i] - j * S : S);
            m->nat = at[i] + j * S;
        }
        off += len[i];
    }
    if (s->nmf[from] == before) {
        mframe *m = add_frame(s, from, to, phase, step);
        m->w.offset = at[0];
        m->nat = at[0];
    }
}

/* Core rank v's group at level k as the header defines it: run A, blocks
 * g..g+2^k-1 (g = v & ~(2^k - 1)), then run B, blocks p+g ..
 * p+min(g+2^k, e)-1 (empty if g >= e). */
static void group_runs(const sim *s, int v, int k, size_t at[2], size_t len[2])
{
    int size = 1 << k, g = v & ~(size - 1), end = g + size < s->rem ? g + size : s->rem;
    at[0] = (size_t)g * s->block;
    len[0] = (size_t)size * s->block;
    at[1] = (size_t)(s->p + g) * s->block;
    len[1] = g < s->rem ? (size_t)(end - g) * s->block : 0;
}

/* Every frame each rank sends, in order, as rec_allgather.h documents:
 * an extra's block to its core rank (FOLD, step 0); a core rank's group to
 * v ^ 2^k (DOUBLE, step k + 1); a folder's every block but its extra's
 * (RESULT, step L + 1); then the barrier's tokens. */
static void build_model(sim *s)
{
    int n = s->n, p = s->p, L = s->levels;
    size_t B = s->block;
    for (int r = 0; r < n; r++) {
        s->mf[r] = malloc(MAXF * sizeof(mframe));
        assert_non_null(s->mf[r]);
        if (r >= p) {
            size_t at[2] = {(size_t)r * B, 0}, len[2] = {B, 0};
            add_range(s, r, r - p, ECCL_PHASE_RECAG_FOLD, 0, at, len);
        } else {
            for (int k = 0; k < L; k++) {
                size_t at[2], len[2];
                group_runs(s, r, k, at, len);
                add_range(s, r, r ^ (1 << k), ECCL_PHASE_RECAG_DOUBLE, (uint16_t)(k + 1), at, len);
            }
            if (r < s->rem) {
                int x = p + r; /* the extra */
                size_t at[2] = {0, (size_t)(x + 1) * B}, len[2] = {(size_t)x * B, (size_t)(n - x - 1) * B};
                add_range(s, r, x, ECCL_PHASE_RECAG_RESULT, (uint16_t)(L + 1), at, len);
            }
        }
        for (int k = 0; k < s->rounds; k++) add_frame(s, r, (r + (1 << k)) % n, ECCL_PHASE_RECAG_DONE, (uint16_t)k);
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
    s->block = block_of(c);
    s->total = (size_t)c->n * s->block;
    s->env = host_env();
    s->alg = &eccl_rec_ag_algo;
    s->rng = sched_seed;
    s->late = late;
    s->stop = SIZE_MAX;
    case_data(c, &s->d);
    size_t S = slice_of(c);
    for (int r = 0; r < s->n; r++) {
        s->recv[r] = region(s->total, &s->recv_reg[r], &s->recv_len[r], RECV_GUARD);
        memcpy(s->recv[r], s->d.old[r], s->total);
        if (c->in_place) {
            /* sendbuf is the rank's own block of recvbuf. */
            s->send[r] = s->recv[r] + (size_t)r * s->block;
        } else {
            s->send[r] = region(s->block, &s->send_reg[r], &s->send_len[r], SEND_GUARD);
            s->orig_send[r] = malloc(s->send_len[r]);
            assert_non_null(s->orig_send[r]);
        }
        memcpy((uint8_t *)s->send[r], s->d.in[r], s->block);
        if (!c->in_place) memcpy(s->orig_send[r], s->send_reg[r], s->send_len[r]);
        s->orig_recv[r] = malloc(s->recv_len[r]);
        assert_non_null(s->orig_recv[r]);
        memcpy(s->orig_recv[r], s->recv_reg[r], s->recv_len[r]);
        eccl_coll_call call = {.env = &s->env, .kind = ECCL_COLL_ALLGATHER, .tag = TAG, .epoch = EPOCH,
                               .sendbuf = s->send[r], .recvbuf = s->recv[r], .count = c->count, .dtype = c->t,
                               .rank = (uint32_t)r, .nranks = (uint32_t)s->n};
        assert_int_equal(eccl_ring_pass_output_bytes(&call), s->total);
        uint8_t *backup = region(s->total, &s->aux_reg[r][AUX_BACKUP], &s->aux_len[r][AUX_BACKUP], AUX_GUARD);
        s->aux[r][AUX_BACKUP] = backup;
        s->aux_len[r][AUX_BACKUP] = s->total;
        if (c->slice) eccl_rec_ag_init_ex(&s->a[r], &call, backup, c->slice);
        else eccl_rec_ag_init(&s->a[r], &call, backup);
        s->px[r] = (pctx){s, r};
        for (int j = 0; j < s->n; j++) {
            assert_int_equal(eccl_chan_init(&s->ch[r][j], &s->env, NULL, 64), ECCL_OK);
            s->lbuf[r][j] = malloc(S + 64);
            assert_non_null(s->lbuf[r][j]);
        }
    }
    build_model(s);
}

/* Every byte of recvbuf is, in the end, that byte of the output. */
static const uint8_t *model_payload(sim *s, const mframe *m) { return s->d.want + m->nat; }

/* A payload lands straight into recvbuf, where its blocks go. The frame
 * landing is the next one `from` owes `to` (a link lands one at a time). */
static void check_dst(sim *s, int to, int from, const eccl_wire_data *w, const uint8_t *dst)
{
    const mframe *m = pair_frame(s, from, to, s->rx[from][to]);
    if (dst != s->recv[to] + m->nat)
        fail_msg("%s: rank %d: a frame from %d (phase %u step %u offset %llu) lands at recvbuf %+td, not %zu",
                 case_str(&s->c), to, from, w->phase, w->step, (unsigned long long)w->offset, dst - s->recv[to],
                 m->nat);
}

static const char *case_str(const rcase *c)
{
    static char buf[160];
    snprintf(buf, sizeof buf, "n=%d %s count=%zu %s slice=%zu seed=%llu", c->n, eccl_dtype_name(c->t), c->count,
             c->in_place ? "in-place" : "out-of-place", c->slice, (unsigned long long)c->seed);
    return buf;
}

static int output_final(const sim *s, int r) { return memcmp(s->recv[r], s->d.want, s->total) == 0; }

static void print_state(const sim *s, int r)
{
    const eccl_peer_steps *e = &s->a[r].steps;
    print_message("rank %d: step %u of %u, full %d, tokens sent %llx received %llx, inflight %u\n", r, e->cur,
                  e->nsteps, e->have_full, (unsigned long long)e->bar.sent, (unsigned long long)e->bar.recv,
                  e->inflight);
}

static void check_results(sim *s)
{
    for (int r = 0; r < s->n; r++) {
        if (!output_final(s, r)) {
            size_t x = 0;
            while (s->recv[r][x] == s->d.want[x]) x++;
            fail_msg("%s: rank %d: byte %zu of block %zu wrong", case_str(&s->c), r, x % s->block, x / s->block);
        }
        check_guards(s, r);
        if (s->send_reg[r] && memcmp(s->send_reg[r], s->orig_send[r], s->send_len[r]) != 0)
            fail_msg("%s: rank %d's sendbuf was written", case_str(&s->c), r);
        check_rank_finished(s, r);
    }
}

/* ---- tests ------------------------------------------------------------------ */

/* The model against the header's promises, so that a check against it is
 * a check of those: every rank receives every block but its own exactly
 * once and its own never; a step sends only its own block and what its
 * earlier steps brought; no two inputs are alike, nor an input and what
 * recvbuf held at its block. */
static void test_reference(void **state)
{
    (void)state;
    for (int n = 2; n <= MAXN; n++)
        for (size_t count = 1; count <= 3; count += 2) {
            rcase c = mk(n, ECCL_U8, count, 0, 2, 11 + (uint64_t)n);
            sim *s = malloc(sizeof *s);
            assert_non_null(s);
            sim_init(s, &c, 0, 0);
            size_t B = s->block, total = s->total;
            /* brought[r][x]: 1 + the step that brings byte x to rank r (0: none). */
            uint32_t *brought = calloc((size_t)n * total, sizeof *brought);
            assert_non_null(brought);
            for (int from = 0; from < n; from++)
                for (uint32_t k = 0; k < s->nmf[from]; k++) {
                    const mframe *m = &s->mf[from][k];
                    uint32_t *to = brought + (size_t)m->to * total;
                    for (size_t x = m->nat; x < m->nat + m->w.len; x++) {
                        if (to[x]) fail_msg("n=%d: rank %d gets byte %zu twice", n, m->to, x);
                        to[x] = 1u + m->w.step;
                    }
                }
            for (int r = 0; r < n; r++)
                for (size_t x = 0; x < total; x++)
                    if ((x / B == (size_t)r) != (brought[(size_t)r * total + x] == 0))
                        fail_msg("n=%d: rank %d: byte %zu of block %zu brought %s", n, r, x % B, x / B,
                                 x / B == (size_t)r ? "though its own" : "by no step");
            for (int from = 0; from < n; from++)
                for (uint32_t k = 0; k < s->nmf[from]; k++) {
                    const mframe *m = &s->mf[from][k];
                    const uint32_t *held = brought + (size_t)from * total;
                    for (size_t x = m->nat; x < m->nat + m->w.len; x++)
                        if (x / B != (size_t)from && held[x] > m->w.step)
                            fail_msg("n=%d: rank %d sends byte %zu in step %u before it has it", n, from, x,
                                     m->w.step);
                }
            for (int b = 0; b < n; b++)
                for (int r = 0; r < n; r++) {
                    if (r != b) assert_true(memcmp(s->d.in[b], s->d.in[r], B) != 0);
                    assert_true(memcmp(s->d.in[b], s->d.old[r] + (size_t)b * B, B) != 0);
                }
            free(brought);
            sim_fini(s);
            free(s);
        }
}

/* Step s of a as the engine sees it. */
static eccl_peer_step step_at(const eccl_rec_ag *a, uint32_t s)
{
    eccl_peer_step st;
    memset(&st, 0, sizeof st);
    a->steps.ops->step(a, s, &st);
    return st;
}

static int range_is(const eccl_peer_range *r, uint32_t peer, size_t at, size_t len0, size_t len1)
{
    return r->on && r->peer == peer && r->at == at && r->len[0] == len0 && r->len[1] == len1;
}

/* The schedule by hand, N = 6 (p = 4, extras 4, 5 fold into 0, 1; three
 * barrier rounds), 2 u8 elements a block; and init's copy of our own
 * block, backed up first, out of place only. */
static void test_schedule(void **state)
{
    (void)state;
    eccl_env env = host_env();
    uint8_t send[2] = {0xaa, 0xbb}, recv[12], backup[12];
    eccl_coll_call call = {.env = &env, .kind = ECCL_COLL_ALLGATHER, .tag = 1, .sendbuf = send, .recvbuf = recv,
                           .count = 2, .dtype = ECCL_U8, .nranks = 6};
    eccl_rec_ag a;
    eccl_peer_step st;
    memset(recv, 0x11, sizeof recv);
    memset(backup, 0, sizeof backup);
    assert_int_equal(eccl_ring_pass_output_bytes(&call), 12);
    /* Extra 5: its block to 1, then blocks 0..4 back (no second piece). */
    call.rank = 5;
    eccl_rec_ag_init_ex(&a, &call, backup, 4);
    assert_int_equal(a.steps.nsteps, 2);
    assert_int_equal(a.steps.bar.rounds, 3);
    st = step_at(&a, 0);
    assert_true(st.phase == ECCL_PHASE_RECAG_FOLD && st.wire_step == 0 && range_is(&st.tx, 1, 10, 2, 0) &&
                !st.rx.on);
    st = step_at(&a, 1);
    assert_true(st.phase == ECCL_PHASE_RECAG_RESULT && st.wire_step == 3 && range_is(&st.rx, 1, 0, 10, 0) &&
                !st.tx.on);
    /* Extra 4: blocks 0..3, then 5. */
    call.rank = 4;
    eccl_rec_ag_init_ex(&a, &call, backup, 4);
    st = step_at(&a, 1);
    assert_true(range_is(&st.rx, 0, 0, 8, 2));
    /* Core 1, a folder: block 5 in; with 0, blocks 1, 5 out and 0, 4 in;
     * with 3, blocks 0, 1 and 4, 5 out and 2, 3 in (2 >= e: no run B);
     * every block but 5 to 5. */
    call.rank = 1;
    memset(recv, 0x11, sizeof recv);
    memset(backup, 0, sizeof backup);
    eccl_rec_ag_init_ex(&a, &call, backup, 4);
    assert_true(recv[2] == 0xaa && recv[3] == 0xbb && recv[1] == 0x11 && recv[4] == 0x11);
    assert_true(backup[2] == 0x11 && backup[3] == 0x11 && backup[1] == 0 && backup[4] == 0);
    assert_int_equal(a.steps.nsteps, 4);
    st = step_at(&a, 0);
    assert_true(st.phase == ECCL_PHASE_RECAG_FOLD && st.wire_step == 0 && range_is(&st.rx, 5, 10, 2, 0) &&
                !st.tx.on);
    st = step_at(&a, 1);
    assert_true(st.phase == ECCL_PHASE_RECAG_DOUBLE && st.wire_step == 1 && range_is(&st.tx, 0, 2, 2, 2) &&
                range_is(&st.rx, 0, 0, 2, 2));
    st = step_at(&a, 2);
    assert_true(st.phase == ECCL_PHASE_RECAG_DOUBLE && st.wire_step == 2 && range_is(&st.tx, 3, 0, 4, 4) &&
                range_is(&st.rx, 3, 4, 4, 0));
    st = step_at(&a, 3);
    assert_true(st.phase == ECCL_PHASE_RECAG_RESULT && st.wire_step == 3 && range_is(&st.tx, 5, 0, 10, 0) &&
                !st.rx.on);
    /* Core 3, no extra: with 2, then with 1 (blocks 0, 1 and 4, 5 in). */
    call.rank = 3;
    eccl_rec_ag_init_ex(&a, &call, backup, 4);
    assert_int_equal(a.steps.nsteps, 2);
    st = step_at(&a, 0);
    assert_true(st.wire_step == 1 && range_is(&st.tx, 2, 6, 2, 0) && range_is(&st.rx, 2, 4, 2, 0));
    st = step_at(&a, 1);
    assert_true(st.wire_step == 2 && range_is(&st.tx, 1, 4, 4, 0) && range_is(&st.rx, 1, 0, 4, 4));
    /* In place (sendbuf is our block of recvbuf): nothing copied, nothing
     * backed up. */
    memset(recv, 0x11, sizeof recv);
    memset(backup, 0, sizeof backup);
    call.sendbuf = recv + 6;
    eccl_rec_ag_init_ex(&a, &call, backup, 4);
    for (size_t i = 0; i < sizeof recv; i++) assert_true(recv[i] == 0x11 && backup[i] == 0);
    /* The algorithm table. */
    check_algo_table(&eccl_rec_ag_algo, ECCL_ALGO_RECURSIVE);
}

/* Every world 2..9 and dtype on small blocks (0, 1, 3 and 7 elements,
 * frames of 4 bytes: several slices a block, or several blocks a slice),
 * in and out of place, each under its own order, some with links opening
 * late. */
static void test_exact_small(void **state)
{
    (void)state;
    static const size_t counts[] = {0, 1, 3, 7};
    uint64_t seed = 1;
    for (int n = 2; n <= MAXN; n++)
        for (int t = 0; t < ECCL_DTYPE_COUNT; t++)
            for (int ip = 0; ip < 2; ip++)
                for (int k = 0; k < 4; k++) {
                    rcase c = mk(n, (eccl_dtype)t, counts[k], ip, 4, seed);
                    run_case(&c, seed % 2 ? seed * 2654435761u : 0, seed % 3 ? 0 : LATE);
                    seed++;
                }
}

/* The same call under many global orders: each gives the output, every
 * invariant holding at every step. */
static void test_orders(void **state)
{
    (void)state;
    for (int n = 2; n <= MAXN; n++)
        for (int ip = 0; ip < 2; ip++) {
            rcase c = mk(n, ECCL_F32, 5, ip, 8, 900 + (uint64_t)n);
            for (uint64_t seed = 1; seed <= 30; seed++)
                run_case(&c, seed * 0x2545F4914F6CDD1Dull, seed % 4 == 0 ? LATE : 0);
        }
}

/* Stopped after every number of delivered frames, whole or mid-frame:
 * every rank's restore gives recvbuf back bit for bit, sendbuf as it was;
 * with blocks of 3 elements (several slices each), of 1 (several blocks a
 * slice) and of none. */
static void test_restore_anywhere(void **state)
{
    (void)state;
    for (int n = 2; n <= MAXN; n++)
        for (int ip = 0; ip < 2; ip++) {
            rcase c = mk(n, ECCL_I16, 3, ip, 4, 300 + (uint64_t)n);
            restore_case(&c, 0, 0, 1, 0);
            c = mk(n, ECCL_U8, 1, ip, 3, 400 + (uint64_t)n);
            restore_case(&c, 4242 + (uint64_t)n, 0, 1, LATE);
            c = mk(n, ECCL_F64, 0, ip, 0, 500 + (uint64_t)n);
            restore_case(&c, 77 + (uint64_t)n, 0, 1, 0);
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
    for (int n = 2; n <= MAXN; n++) {
        rcase c = mk(n, ECCL_I16, 5, n % 2, 6, 60 + (uint64_t)n);
        run_case(&c, 0, FUZZ);
        c = mk(n, ECCL_F64, 1, !(n % 2), 0, 61 + (uint64_t)n);
        run_case(&c, 31337, FUZZ | LATE);
        c = mk(n, ECCL_U32, 0, 0, 0, 62 + (uint64_t)n);
        run_case(&c, 7, FUZZ);
    }
}

/* The default frame size (1 MiB): blocks of two slices (in place, N = 3:
 * RESULT's pieces of several), slices straddling blocks (N = 6), and a
 * stop anywhere in a call of two-slice blocks. */
static void test_default_slices(void **state)
{
    (void)state;
    rcase c = mk(3, ECCL_U8, 5 * ECCL_RING_PASS_SLICE_BYTES / 4 + 3, 1, 0, 72);
    run_case(&c, 5, 0);
    c = mk(6, ECCL_U16, 3 * ECCL_RING_PASS_SLICE_BYTES / 8 + 1, 0, 0, 73);
    run_case(&c, 0, LATE);
    c = mk(3, ECCL_U8, ECCL_RING_PASS_SLICE_BYTES + 1, 0, 0, 74);
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
    rcase c = mk(2, ECCL_U8, count, 0, ECCL_RING_PASS_SLICE_BYTES, 80);
    queue_cap_case(&c, ECCL_RING_PASS_SLICE_BYTES);
}

/* The completion round, step by step: every data frame delivered and every
 * rank full, no rank completes before its last token, two ranks included. */
static void test_completion(void **state)
{
    (void)state;
    for (int n = 2; n <= MAXN; n++) {
        rcase c = mk(n, ECCL_U32, 3, n % 2, 8, 5);
        completion_case(&c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference),        cmocka_unit_test(test_schedule),
        cmocka_unit_test(test_exact_small),      cmocka_unit_test(test_orders),
        cmocka_unit_test(test_restore_anywhere), cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_default_slices),   cmocka_unit_test(test_queue_cap),
        cmocka_unit_test(test_completion),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
