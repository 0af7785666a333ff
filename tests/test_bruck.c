/* Bruck's all-gather (core/coll/bruck.c) in one process: the N state
 * machines of one call, wired by a harness that hands each DATA frame a
 * rank queued to the rank at the other end of its peer link, through the
 * algorithm table (eccl_bruck_algo) as comm does after the socket: recv,
 * the payload copied to where recv said, recv_done.
 *
 * Links open as comm's peer links do (and as in test_rec_allreduce.c):
 * only once the LOWER rank of the pair asked for it (links->peer), at once
 * or, with `late`, at some later event. No threads, no sockets: seeded
 * random choices of which rank pumps, which link delivers and which asked
 * link opens make every interleaving, stop point and malformed frame
 * reproducible.
 *
 * Every run checks against a model written here from coll/bruck.h, not from
 * the engine's code:
 *   - each frame's link, header (phase, step = round, offset, length, no
 *     flags, ring 0) in its sender's order: round k from rank r to r - 2^k,
 *     origins r..r+m_k-1 as runs of adjacent non-empty blocks in slices, one
 *     empty frame for a round without bytes; then the barrier tokens (none
 *     at N = 2), token k to r + 2^k only once ranks r, r-1, ..., r-2^k+1 are
 *     full;
 *   - each payload, when the socket takes it, is the final bytes of those
 *     blocks (nothing is sent before it arrived, nor changed while queued);
 *   - a frame only reaches a rank whose expects(PEER + sender) is 1, and
 *     every expects is 0 at the end; any other role's is 0;
 *   - have_full never goes back and turns 1 only with recvbuf final;
 *     complete() only with every rank full and no frame of ours queued;
 *   - tx/rx byte counts; guard bytes around recvbuf, sendbuf and the backup
 *     stay untouched; sendbuf is never written;
 *   - stopped after any event, restore() puts back every byte of recvbuf;
 *   - a malformed frame (any header field off, a token early, a frame from
 *     a rank that owes nothing, a non-peer role) is ECCL_ERR_PROTOCOL and
 *     changes nothing: the good frame is still taken after it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coll/bruck.h"
#include "coll/dispatch.h"
#include "coll/ring_pass.h" /* ECCL_RING_PASS_SLICE_BYTES */
#include "proto/chan.h"
#include "proto/wire.h"

#define MAXN 9
#define GUARD 64
#define SEND_GUARD 0x5a
#define RECV_GUARD 0xa5
#define AUX_GUARD 0x3c
#define TAG 77
#define EPOCH 3
#define MAXF 512

#include "coll_data.h"
#include "host_env.h"

/* ---- one call -------------------------------------------------------------------- */

enum { LAYOUT_UNIFORM, LAYOUT_V_PACKED, LAYOUT_V_SCATTERED };

typedef struct bcase {
    int n;
    eccl_dtype t;
    size_t count;  /* uniform: per block; v: the largest block */
    int in_place;
    int layout;
    size_t slice;  /* bytes per frame asked for (0: the default) */
    uint64_t seed;
} bcase;

static bcase mk(int n, eccl_dtype t, size_t count, int in_place, int layout, size_t slice, uint64_t seed)
{
    bcase c = {n, t, count, in_place, layout, slice, seed};
    return c;
}

typedef struct mframe {
    int to;
    eccl_wire_data w;
} mframe;

typedef struct sim sim;
typedef struct pctx {
    sim *s;
    int i;
} pctx;

struct sim {
    eccl_env env;
    bcase c;
    int n, rounds;
    size_t es, slice, extent;
    size_t vc[MAXN], vd[MAXN]; /* elements */
    const eccl_coll_algo *alg;
    eccl_bruck a[MAXN];
    pctx px[MAXN];
    eccl_chan ch[MAXN][MAXN]; /* ch[i][j]: rank i's frames to rank j */
    int link[MAXN][MAXN];     /* [lo][hi]: 0 closed, 1 asked by lo, 2 open */
    int late;
    uint8_t *want;            /* the final output */
    uint8_t *send_reg[MAXN], *recv_reg[MAXN], *back_reg[MAXN], *orig_send[MAXN], *orig_recv[MAXN];
    size_t send_len[MAXN], recv_len[MAXN], back_len;
    uint8_t *recv[MAXN];
    const uint8_t *send[MAXN];
    mframe *mf[MAXN];          /* each rank's frames in order */
    uint32_t nmf[MAXN];
    uint32_t out[MAXN][MAXN];  /* taken off ch[i][j] */
    uint32_t q_seen[MAXN][MAXN];
    uint32_t tok_q[MAXN];
    int full[MAXN];
    uint64_t rng;
    size_t events, stop;
    int fuzz;
    size_t rejected;
};

static size_t blk_bytes(const sim *s, int o) { return s->vc[o] * s->es; }
static size_t blk_at(const sim *s, int o) { return s->vd[o] * s->es; }
static int mod(int x, int n) { return ((x % n) + n) % n; }
static int ceil_log2(int n)
{
    int r = 0;
    while ((1 << r) < n) r++;
    return r;
}

static uint8_t *region(size_t len, uint8_t **reg, size_t *reg_len, uint8_t guard)
{
    *reg_len = len + 2 * GUARD;
    *reg = malloc(*reg_len);
    assert_non_null(*reg);
    memset(*reg, guard, *reg_len);
    return *reg + GUARD;
}

static void add_frame(sim *s, int from, int to, uint8_t phase, int step, size_t off, size_t len)
{
    assert_true(s->nmf[from] < MAXF);
    mframe *m = &s->mf[from][s->nmf[from]++];
    memset(m, 0, sizeof *m);
    m->to = to;
    m->w = (eccl_wire_data){.tag = TAG, .epoch = EPOCH, .phase = phase, .step = (uint16_t)step,
                            .offset = off, .len = (uint32_t)len};
}

/* The documented schedule. */
static void build_model(sim *s)
{
    int n = s->n;
    for (int r = 0; r < n; r++) {
        s->mf[r] = calloc(MAXF, sizeof(mframe));
        assert_non_null(s->mf[r]);
        for (int k = 0; k < s->rounds; k++) {
            int m = (1 << k) < n - (1 << k) ? 1 << k : n - (1 << k), to = mod(r - (1 << k), n);
            uint32_t before = s->nmf[r];
            size_t run_at = 0, run_len = 0;
            for (int j = 0; j <= m; j++) {
                int o = mod(r + j, n);
                if (j < m && !blk_bytes(s, o)) continue;
                if (j < m && run_len && run_at + run_len == blk_at(s, o)) {
                    run_len += blk_bytes(s, o);
                    continue;
                }
                for (size_t at = 0; at < run_len; at += s->slice)
                    add_frame(s, r, to, ECCL_PHASE_BRUCK, k, run_at + at,
                              run_len - at < s->slice ? run_len - at : s->slice);
                if (j < m) run_at = blk_at(s, o), run_len = blk_bytes(s, o);
            }
            if (s->nmf[r] == before) add_frame(s, r, to, ECCL_PHASE_BRUCK, k, 0, 0);
        }
        for (int k = 0; k < s->rounds; k++) add_frame(s, r, (r + (1 << k)) % n, ECCL_PHASE_BRUCK_DONE, k, 0, 0);
    }
}

/* The k-th frame `from` sends `to`. */
static const mframe *pair_frame(const sim *s, int from, int to, uint32_t k)
{
    for (uint32_t i = 0; i < s->nmf[from]; i++)
        if (s->mf[from][i].to == to && k-- == 0) return &s->mf[from][i];
    return NULL;
}

static uint32_t pair_total(const sim *s, int from, int to)
{
    uint32_t t = 0;
    for (uint32_t i = 0; i < s->nmf[from]; i++) t += s->mf[from][i].to == to;
    return t;
}

static eccl_chan *peer_cb(void *ctx, uint32_t rank)
{
    pctx *x = ctx;
    sim *s = x->s;
    int i = x->i, r = (int)rank;
    if (r < 0 || r >= s->n || r == i) return NULL;
    int lo = i < r ? i : r, hi = i < r ? r : i;
    if (s->link[lo][hi] == 0 && i == lo) s->link[lo][hi] = s->late ? 1 : 2;
    return s->link[lo][hi] == 2 ? &s->ch[i][r] : NULL;
}

static void layout(sim *s)
{
    const bcase *c = &s->c;
    uint64_t x = c->seed * 31 + 7;
    s->extent = 0;
    if (c->layout == LAYOUT_UNIFORM) {
        for (int o = 0; o < s->n; o++) s->vc[o] = c->count, s->vd[o] = (size_t)o * c->count;
        s->extent = (size_t)s->n * c->count;
        return;
    }
    /* Random sizes up to count, at least two empty blocks (one of them,
     * with three or more ranks, not rank 0's); scattered: blocks in a
     * shuffled order with gaps. */
    int perm[MAXN];
    for (int o = 0; o < s->n; o++) {
        s->vc[o] = (size_t)(rng_next(&x) % (c->count + 1));
        perm[o] = o;
    }
    s->vc[rng_next(&x) % (uint64_t)s->n] = 0;
    s->vc[s->n - 1] = 0;
    if (c->layout == LAYOUT_V_SCATTERED)
        for (int o = s->n - 1; o > 0; o--) {
            int j = (int)(rng_next(&x) % (uint64_t)(o + 1)), t = perm[o];
            perm[o] = perm[j];
            perm[j] = t;
        }
    size_t at = c->layout == LAYOUT_V_SCATTERED ? 3 : 0;
    for (int i = 0; i < s->n; i++) {
        int o = perm[i];
        s->vd[o] = at;
        at += s->vc[o] + (c->layout == LAYOUT_V_SCATTERED ? (size_t)(rng_next(&x) % 3) : 0);
        if (s->vd[o] + s->vc[o] > s->extent) s->extent = s->vd[o] + s->vc[o];
    }
}

static void sim_init(sim *s, const bcase *c, uint64_t sched_seed, int late)
{
    memset(s, 0, sizeof *s);
    s->c = *c;
    s->n = c->n;
    s->es = eccl_dtype_size(c->t);
    s->rounds = ceil_log2(c->n);
    s->env = host_env();
    s->alg = &eccl_bruck_algo;
    s->rng = sched_seed * 0x9E3779B97F4A7C15ull + 1;
    s->late = late;
    s->stop = SIZE_MAX;
    size_t S = c->slice ? c->slice : ECCL_RING_PASS_SLICE_BYTES;
    s->slice = S / s->es * s->es;
    if (!s->slice) s->slice = s->es;
    layout(s);
    size_t bytes = s->extent * s->es;
    s->want = malloc(bytes + 1);
    assert_non_null(s->want);
    for (int r = 0; r < s->n; r++) {
        s->recv[r] = region(bytes, &s->recv_reg[r], &s->recv_len[r], RECV_GUARD);
        fill_bytes(s->recv[r], bytes, c->seed * 1000 + 500 + (uint64_t)r); /* what was there before */
        uint8_t *mine;
        if (c->in_place) {
            mine = s->recv[r] + blk_at(s, r);
        } else {
            mine = region(blk_bytes(s, r), &s->send_reg[r], &s->send_len[r], SEND_GUARD);
        }
        fill_bytes(mine, blk_bytes(s, r), c->seed * 1000 + (uint64_t)r);
        s->send[r] = mine;
        memcpy(s->want + blk_at(s, r), mine, blk_bytes(s, r));
        if (!c->in_place) {
            s->orig_send[r] = malloc(s->send_len[r]);
            assert_non_null(s->orig_send[r]);
            memcpy(s->orig_send[r], s->send_reg[r], s->send_len[r]);
        }
        s->orig_recv[r] = malloc(s->recv_len[r]);
        assert_non_null(s->orig_recv[r]);
        memcpy(s->orig_recv[r], s->recv_reg[r], s->recv_len[r]);
    }
    for (int r = 0; r < s->n; r++) {
        eccl_coll_call call = {.env = &s->env, .kind = ECCL_COLL_ALLGATHER, .tag = TAG, .epoch = EPOCH,
                               .sendbuf = s->send[r], .recvbuf = s->recv[r], .dtype = c->t,
                               .rank = (uint32_t)r, .nranks = (uint32_t)s->n};
        if (c->layout == LAYOUT_UNIFORM) {
            call.count = c->count;
        } else {
            call.vcounts = s->vc;
            call.vdispls = s->vd;
            for (int o = 0; o < s->n; o++) call.count += s->vc[o];
        }
        assert_int_equal(eccl_bruck_output_bytes(&call), bytes);
        uint8_t *backup = region(bytes, &s->back_reg[r], &s->back_len, AUX_GUARD);
        if (c->slice) eccl_bruck_init_ex(&s->a[r], &call, backup, c->slice);
        else eccl_bruck_init(&s->a[r], &call, backup);
        s->px[r] = (pctx){s, r};
        for (int j = 0; j < s->n; j++) assert_int_equal(eccl_chan_init(&s->ch[r][j], &s->env, NULL, 64), ECCL_OK);
    }
    build_model(s);
}

static void sim_fini(sim *s)
{
    for (int r = 0; r < s->n; r++) {
        for (int j = 0; j < s->n; j++) eccl_chan_close(&s->ch[r][j]);
        free(s->send_reg[r]);
        free(s->recv_reg[r]);
        free(s->back_reg[r]);
        free(s->orig_send[r]);
        free(s->orig_recv[r]);
        free(s->mf[r]);
    }
    free(s->want);
}

static int is_full(const sim *s, int r) { return s->alg->have_full(&s->a[r]); }

static void check_full(sim *s, int r)
{
    int f = is_full(s, r);
    if (s->full[r] && !f) fail_msg("rank %d: have_full went back", r);
    if (f && !s->full[r]) {
        for (int o = 0; o < s->n; o++)
            if (memcmp(s->recv[r] + blk_at(s, o), s->want + blk_at(s, o), blk_bytes(s, o)) != 0)
                fail_msg("rank %d of %d full without block %d", r, s->n, o);
        s->full[r] = 1;
    }
}

/* Tokens rank i queued since the last look: token k only to i + 2^k, in
 * round order, with ranks i, i-1, ..., i-2^k+1 full. */
static void inspect_queued(sim *s, int i)
{
    uint32_t fresh = 0; /* tokens queued since the last look, by round */
    for (int j = 0; j < s->n; j++) {
        uint32_t k = 0;
        for (const eccl_frame *f = s->ch[i][j].out_head; f; f = f->next, k++) {
            if (k < s->q_seen[i][j]) continue;
            eccl_wire_data w;
            decode_frame(f, &w);
            if (w.phase != ECCL_PHASE_BRUCK_DONE) continue;
            if ((int)w.step >= s->rounds || j != (i + (1 << w.step)) % s->n || (fresh >> w.step & 1u))
                fail_msg("rank %d sent a token of round %u to rank %d", i, w.step, j);
            fresh |= 1u << w.step;
        }
        s->q_seen[i][j] = k;
    }
    for (uint32_t r = 0; r < (uint32_t)s->rounds; r++) {
        if (!(fresh >> r & 1u)) continue;
        if (r != s->tok_q[i]) fail_msg("rank %d sent its round-%u token after %u tokens", i, r, s->tok_q[i]);
        int span = (1 << r) < s->n ? 1 << r : s->n;
        for (int back = 0; back < span; back++)
            if (!is_full(s, mod(i - back, s->n)))
                fail_msg("rank %d sent token %u while rank %d is not full", i, r, mod(i - back, s->n));
        s->tok_q[i]++;
    }
}

static void do_pump(sim *s, int i)
{
    eccl_coll_links links = {{NULL}, peer_cb, &s->px[i], 0};
    assert_int_equal(s->alg->pump(&s->a[i], &links), ECCL_OK);
    inspect_queued(s, i);
}

/* A malformed copy of `good` from `from` to `to`: ECCL_ERR_PROTOCOL, and
 * nothing changes. */
static void expect_reject(sim *s, int to, int role, const eccl_wire_data *bad)
{
    eccl_bruck before = s->a[to];
    void *dst = (void *)1;
    eccl_result rc = s->alg->recv(&s->a[to], role, bad, &dst);
    if (rc != ECCL_ERR_PROTOCOL)
        fail_msg("rank %d took a bad frame (role %d phase %u step %u off %llu len %u ring %u flags %u): %d", to, role,
                 bad->phase, bad->step, (unsigned long long)bad->offset, bad->len, bad->ring, bad->flags, (int)rc);
    if (memcmp(&before, &s->a[to], sizeof before) != 0) fail_msg("rank %d changed on a bad frame", to);
    s->rejected++;
}

static void fuzz_frame(sim *s, int from, int to, const eccl_wire_data *good)
{
    int role = ECCL_ROLE_PEER + from;
    eccl_wire_data w;
#define BAD(mut) (w = *good, (void)(mut), expect_reject(s, to, role, &w))
    BAD(w.phase = good->phase == ECCL_PHASE_BRUCK ? ECCL_PHASE_BRUCK_DONE : ECCL_PHASE_BRUCK);
    BAD(w.phase = ECCL_PHASE_REC_DONE);
    BAD(w.phase = ECCL_PHASE_GATHER);
    BAD(w.step = (uint16_t)(good->step + 1));
    if (good->step) BAD(w.step = (uint16_t)(good->step - 1));
    BAD(w.offset = good->offset + s->es);
    BAD(w.len = good->len + (uint32_t)s->es);
    if (good->len) BAD(w.len = 0);
    BAD(w.ring = 1);
    BAD(w.flags = 1);
    w = *good;
    expect_reject(s, to, ECCL_ROLE_PREV, &w);
    expect_reject(s, to, ECCL_ROLE_PEER + to, &w);
    expect_reject(s, to, ECCL_ROLE_PEER + s->n, &w);
    /* The same frame from a rank that owes nothing now. */
    for (int o = 0; o < s->n; o++) {
        if (o == to || s->alg->expects(&s->a[to], ECCL_ROLE_PEER + o)) continue;
        expect_reject(s, to, ECCL_ROLE_PEER + o, &w);
        eccl_wire_data t = {.tag = TAG, .epoch = EPOCH, .phase = ECCL_PHASE_BRUCK_DONE};
        expect_reject(s, to, ECCL_ROLE_PEER + o, &t);
        break;
    }
    /* A token while data is still owed. */
    if (good->phase == ECCL_PHASE_BRUCK)
        for (uint16_t k = 0; k < 4; k++) {
            eccl_wire_data t = {.tag = TAG, .epoch = EPOCH, .phase = ECCL_PHASE_BRUCK_DONE, .step = k};
            expect_reject(s, to, role, &t);
        }
#undef BAD
}

/* Takes the head frame of ch[from][to] and hands it to `to`. */
static void deliver(sim *s, int from, int to)
{
    eccl_chan *ch = &s->ch[from][to];
    eccl_frame *f = ch->out_head;
    eccl_wire_data w;
    decode_frame(f, &w);
    const mframe *m = pair_frame(s, from, to, s->out[from][to]);
    if (!m) fail_msg("rank %d sent rank %d more than %u frames", from, to, s->out[from][to]);
    if (memcmp(&w, &m->w, sizeof w) != 0)
        fail_msg("frame %u from %d to %d: phase %u step %u off %llu len %u, expected phase %u step %u off %llu len %u",
                 s->out[from][to], from, to, w.phase, w.step, (unsigned long long)w.offset, w.len, m->w.phase,
                 m->w.step, (unsigned long long)m->w.offset, m->w.len);
    if (w.len && memcmp(f->payload, s->want + w.offset, w.len) != 0)
        fail_msg("frame %u from %d to %d (round %u, off %llu): wrong payload", s->out[from][to], from, to, w.step,
                 (unsigned long long)w.offset);
    s->out[from][to]++;
    int role = ECCL_ROLE_PEER + from;
    if (!s->alg->expects(&s->a[to], role)) fail_msg("rank %d got a frame from %d it did not expect", to, from);
    if (s->fuzz) fuzz_frame(s, from, to, &w);
    void *dst = NULL;
    assert_int_equal(s->alg->recv(&s->a[to], role, &w, &dst), ECCL_OK);
    if (w.len) {
        if (dst != s->recv[to] + w.offset) fail_msg("rank %d: frame lands at a wrong place", to);
        memcpy(dst, f->payload, w.len);
    } else if (dst) {
        fail_msg("rank %d: an empty frame has a place", to);
    }
    pop_frame(ch);
    if (s->q_seen[from][to]) s->q_seen[from][to]--;
    assert_int_equal(s->alg->recv_done(&s->a[to], role, &w), ECCL_OK);
    check_full(s, to);
    if (s->out[from][to] == pair_total(s, from, to) && s->alg->expects(&s->a[to], role))
        fail_msg("rank %d still expects rank %d after its last frame", to, from);
}

static int all_complete(sim *s)
{
    for (int r = 0; r < s->n; r++) {
        if (!s->alg->complete(&s->a[r])) return 0;
    }
    return 1;
}

static void check_complete(sim *s)
{
    for (int r = 0; r < s->n; r++) {
        if (!s->alg->complete(&s->a[r])) continue;
        for (int j = 0; j < s->n; j++)
            if (s->ch[r][j].out_head) fail_msg("rank %d complete with frames queued", r);
        for (int o = 0; o < s->n; o++)
            if (!is_full(s, o)) fail_msg("rank %d complete while rank %d is not full", r, o);
        if (!is_full(s, r)) fail_msg("rank %d complete but not full", r);
    }
}

/* One event: 0 none possible (stuck), 1 done. */
static int step(sim *s)
{
    uint64_t x = rng_next(&s->rng);
    int kind = (int)(x % 8);
    if (kind < 3) {
        do_pump(s, (int)(rng_next(&s->rng) % (uint64_t)s->n));
        return 1;
    }
    if (kind < 7) {
        int start = (int)(rng_next(&s->rng) % (uint64_t)(s->n * s->n));
        for (int t = 0; t < s->n * s->n; t++) {
            int q = (start + t) % (s->n * s->n), i = q / s->n, j = q % s->n;
            if (s->ch[i][j].out_head) {
                deliver(s, i, j);
                return 1;
            }
        }
    }
    for (int lo = 0; lo < s->n; lo++)
        for (int hi = lo + 1; hi < s->n; hi++)
            if (s->link[lo][hi] == 1 && rng_next(&s->rng) % 2) {
                s->link[lo][hi] = 2;
                return 1;
            }
    do_pump(s, (int)(rng_next(&s->rng) % (uint64_t)s->n));
    return 1;
}

static void check_guards(const sim *s)
{
    size_t bytes = s->extent * s->es;
    for (int r = 0; r < s->n; r++) {
        for (int g = 0; g < GUARD; g++) {
            if (s->recv_reg[r][g] != RECV_GUARD || s->recv_reg[r][GUARD + bytes + (size_t)g] != RECV_GUARD)
                fail_msg("rank %d: recvbuf guard written", r);
            if (s->back_reg[r][g] != AUX_GUARD || s->back_reg[r][GUARD + bytes + (size_t)g] != AUX_GUARD)
                fail_msg("rank %d: backup guard written", r);
        }
        if (!s->c.in_place && memcmp(s->orig_send[r], s->send_reg[r], s->send_len[r]) != 0)
            fail_msg("rank %d: sendbuf written", r);
    }
}

/* Runs to the end (or to s->stop events); returns the events taken. */
static size_t run(sim *s)
{
    for (int r = 0; r < s->n; r++) check_full(s, r);
    while (!all_complete(s)) {
        if (s->events == s->stop) return s->events;
        if (s->events > 200000) fail_msg("stuck: n %d layout %d", s->n, s->c.layout);
        step(s);
        s->events++;
        check_complete(s);
    }
    return s->events;
}

static void check_end(sim *s)
{
    size_t bytes = s->extent * s->es;
    for (int r = 0; r < s->n; r++) {
        if (!is_full(s, r)) fail_msg("rank %d not full at the end", r);
        for (int o = 0; o < s->n; o++)
            if (memcmp(s->recv[r] + blk_at(s, o), s->want + blk_at(s, o), blk_bytes(s, o)) != 0)
                fail_msg("rank %d of %d: block %d wrong", r, s->n, o);
        /* Bytes between blocks are the caller's: untouched. */
        for (size_t b = 0; b < bytes; b++) {
            int in_block = 0;
            for (int o = 0; o < s->n; o++)
                if (b >= blk_at(s, o) && b < blk_at(s, o) + blk_bytes(s, o)) in_block = 1;
            if (!in_block && s->recv_reg[r][GUARD + b] != s->orig_recv[r][GUARD + b])
                fail_msg("rank %d: byte %zu outside the blocks written", r, b);
        }
        for (int role = 0; role < ECCL_ROLE_PEER + MAXN + 1; role++)
            if (s->alg->expects(&s->a[r], role)) fail_msg("rank %d still expects role %d", r, role);
        for (int j = 0; j < s->n; j++) {
            if (s->out[r][j] != pair_total(s, r, j))
                fail_msg("rank %d sent rank %d %u frames, expected %u", r, j, s->out[r][j], pair_total(s, r, j));
        }
        uint64_t tx, rx, want_tx = 0, want_rx = 0;
        s->alg->bytes(&s->a[r], &tx, &rx);
        for (int i = 0; i < s->n; i++)
            for (uint32_t k = 0; k < s->nmf[i]; k++) {
                if (i == r) want_tx += s->mf[i][k].w.len;
                if (s->mf[i][k].to == r) want_rx += s->mf[i][k].w.len;
            }
        if (tx != want_tx || rx != want_rx) fail_msg("rank %d: tx %llu rx %llu", r, (unsigned long long)tx,
                                                     (unsigned long long)rx);
        assert_int_equal(s->alg->error(&s->a[r]), ECCL_OK);
        assert_int_equal((int)s->tok_q[r], s->rounds);
    }
    check_guards(s);
}

static size_t run_case(const bcase *c, uint64_t sched, int late, int fuzz)
{
    sim *s = calloc(1, sizeof *s);
    assert_non_null(s);
    sim_init(s, c, sched, late);
    s->fuzz = fuzz;
    size_t ev = run(s);
    check_end(s);
    if (fuzz && !s->rejected) fail_msg("no malformed frame was tried");
    sim_fini(s);
    free(s);
    return ev;
}

/* Stops after `stop` events and restores every rank: recvbuf (guards
 * included) as it was. */
static void run_stop(const bcase *c, uint64_t sched, int late, size_t stop)
{
    sim *s = calloc(1, sizeof *s);
    assert_non_null(s);
    sim_init(s, c, sched, late);
    s->stop = stop;
    run(s);
    for (int r = 0; r < s->n; r++) {
        s->alg->restore(&s->a[r]);
        if (memcmp(s->recv_reg[r], s->orig_recv[r], s->recv_len[r]) != 0)
            fail_msg("n %d layout %d in_place %d: rank %d not restored after %zu events", c->n, c->layout,
                     c->in_place, r, stop);
    }
    check_guards(s);
    sim_fini(s);
    free(s);
}

/* ---- tests ------------------------------------------------------------------------ */

static const eccl_dtype dtypes[] = {ECCL_U8, ECCL_F16, ECCL_I32, ECCL_F64};

static void test_round_blocks(void **state)
{
    (void)state;
    /* Rounds cover every other block once: sum of m_k = N - 1. */
    for (uint32_t n = 2; n < 70; n++) {
        uint32_t sum = 0;
        for (uint32_t k = 0; ((uint64_t)1 << k) < n; k++) sum += eccl_bruck_round_blocks(n, k);
        assert_int_equal(sum, n - 1);
    }
    assert_int_equal(eccl_bruck_round_blocks(5, 2), 1);
    assert_int_equal(eccl_bruck_round_blocks(8, 2), 4);
    assert_int_equal(eccl_bruck_round_blocks(9, 3), 1);
}

static void test_uniform(void **state)
{
    (void)state;
    for (int n = 2; n <= MAXN; n++)
        for (int d = 0; d < 4; d++)
            for (int ip = 0; ip < 2; ip++)
                for (uint64_t sched = 1; sched <= 3; sched++) {
                    bcase c = mk(n, dtypes[d], 1 + (size_t)(n * 3 + d) % 7, ip, LAYOUT_UNIFORM, 0,
                                 (uint64_t)(n * 100 + d * 10 + ip));
                    run_case(&c, sched, (int)(sched % 2), 0);
                }
}

static void test_multi_slice(void **state)
{
    (void)state;
    /* Small slices: a block in several frames, runs cut mid-block. */
    for (int n = 2; n <= MAXN; n++)
        for (int ip = 0; ip < 2; ip++)
            for (uint64_t sched = 1; sched <= 2; sched++) {
                bcase c = mk(n, ECCL_F32, 13, ip, LAYOUT_UNIFORM, 24, (uint64_t)(n * 7 + ip));
                run_case(&c, sched, 1, 0);
                c = mk(n, ECCL_F64, 5, ip, LAYOUT_UNIFORM, 3, (uint64_t)(n * 9 + ip)); /* rounded up to one element */
                run_case(&c, sched + 10, 0, 0);
            }
}

static void test_v_layouts(void **state)
{
    (void)state;
    for (int n = 2; n <= MAXN; n++)
        for (int lay = LAYOUT_V_PACKED; lay <= LAYOUT_V_SCATTERED; lay++)
            for (int ip = 0; ip < 2; ip++)
                for (uint64_t seed = 1; seed <= 4; seed++) {
                    bcase c = mk(n, dtypes[seed % 4], 9, ip, lay, seed % 2 ? 16 : 0, seed * 17 + (uint64_t)n);
                    run_case(&c, seed, (int)(seed % 2), 0);
                }
    /* Every block empty: one empty frame per round. */
    for (int n = 2; n <= MAXN; n++) {
        bcase c = mk(n, ECCL_I32, 0, 0, LAYOUT_UNIFORM, 0, 5);
        run_case(&c, 2, 1, 0);
    }
}

static void test_malformed(void **state)
{
    (void)state;
    for (int n = 2; n <= MAXN; n++) {
        bcase c = mk(n, ECCL_I16, 5, n % 2, LAYOUT_UNIFORM, 4, 3);
        run_case(&c, 7, 0, 1);
        c = mk(n, ECCL_U8, 6, 0, LAYOUT_V_SCATTERED, 0, 4);
        run_case(&c, 8, 1, 1);
    }
}

static void test_restore(void **state)
{
    (void)state;
    for (int n = 2; n <= 7; n++)
        for (int ip = 0; ip < 2; ip++)
            for (int lay = 0; lay <= LAYOUT_V_SCATTERED; lay += 2) {
                bcase c = mk(n, ECCL_I32, 3, ip, lay, 8, (uint64_t)(n + ip * 50 + lay));
                size_t total = run_case(&c, 4, 1, 0);
                for (size_t stop = 0; stop <= total; stop++) run_stop(&c, 4, 1, stop);
            }
}

/* The dispatcher's built-in range for all-gathers (the line parses: a
 * malformed one would be skipped with only a warning), and ECCL_ALGO
 * forcing Bruck where it may run. */
static const char *forced_algo;
static int cfg_get(void *ctx, const char *name, char *buf, size_t len)
{
    (void)ctx;
    if (!forced_algo || strcmp(name, "ECCL_ALGO") != 0) return 0;
    return (size_t)snprintf(buf, len, "%s", forced_algo) < len;
}
static const eccl_config_ops cfg_ops = {sizeof cfg_ops, cfg_get};

static void test_dispatch_rule(void **state)
{
    (void)state;
    eccl_env env = host_env();
    env.config = &cfg_ops;
    eccl_dispatch d;
    const uint32_t both = ECCL_DISPATCH_BIT(ECCL_ALGO_RING) | ECCL_DISPATCH_BIT(ECCL_ALGO_BRUCK);
    assert_string_equal(eccl_dispatch_algo_name(ECCL_ALGO_BRUCK), "bruck");
    assert_string_equal(eccl_algorithm_name(ECCL_ALGO_BRUCK), "bruck");
    assert_int_equal(eccl_dispatch_algo_parse("bruck", 5), ECCL_ALGO_BRUCK);
    forced_algo = NULL;
    assert_int_equal(eccl_dispatch_init(&d, &env), ECCL_OK);
    static const struct {
        uint32_t n;
        uint64_t bytes;
        eccl_algorithm want;
    } picks[] = {
        {2, 8, ECCL_ALGO_RING},        {3, 8, ECCL_ALGO_BRUCK},       {4, 2048, ECCL_ALGO_BRUCK},
        {5, 32768, ECCL_ALGO_BRUCK},   {6, 0, ECCL_ALGO_BRUCK},       {6, 8, ECCL_ALGO_BRUCK},
        {6, 262144, ECCL_ALGO_BRUCK},  {6, 262145, ECCL_ALGO_RING},   {8, 32768, ECCL_ALGO_BRUCK},
        {8, 4194304, ECCL_ALGO_RING},  {100000, 8, ECCL_ALGO_BRUCK},
    };
    for (size_t i = 0; i < sizeof picks / sizeof *picks; i++)
        if (eccl_dispatch_pick(&d, ECCL_COLL_ALLGATHER, picks[i].n, 0, picks[i].bytes, both) != picks[i].want)
            fail_msg("pick %zu: N=%u %llu bytes: not %s", i, picks[i].n, (unsigned long long)picks[i].bytes,
                     eccl_dispatch_algo_name(picks[i].want));
    /* Where Bruck cannot run (quantised, device-resident), the ring; the
     * other collectives never take it. */
    assert_int_equal(eccl_dispatch_pick(&d, ECCL_COLL_ALLGATHER, 8, 0, 8, ECCL_DISPATCH_BIT(ECCL_ALGO_RING)),
                     ECCL_ALGO_RING);
    assert_int_equal(eccl_dispatch_pick(&d, ECCL_COLL_REDUCE_SCATTER, 8, 0, 8, both), ECCL_ALGO_RING);
    eccl_dispatch_free(&d);
    forced_algo = "allgather=bruck";
    assert_int_equal(eccl_dispatch_init(&d, &env), ECCL_OK);
    assert_int_equal(eccl_dispatch_pick(&d, ECCL_COLL_ALLGATHER, 3, 0, 8, both), ECCL_ALGO_BRUCK);
    assert_int_equal(eccl_dispatch_pick(&d, ECCL_COLL_ALLGATHER, 8, 0, 1u << 30, both), ECCL_ALGO_BRUCK);
    assert_int_equal(eccl_dispatch_pick(&d, ECCL_COLL_ALLGATHER, 8, 0, 8, ECCL_DISPATCH_BIT(ECCL_ALGO_RING)),
                     ECCL_ALGO_RING);
    eccl_dispatch_free(&d);
    forced_algo = "allgather=ring";
    assert_int_equal(eccl_dispatch_init(&d, &env), ECCL_OK);
    assert_int_equal(eccl_dispatch_pick(&d, ECCL_COLL_ALLGATHER, 8, 0, 8, both), ECCL_ALGO_RING);
    eccl_dispatch_free(&d);
    forced_algo = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_blocks), cmocka_unit_test(test_uniform),  cmocka_unit_test(test_multi_slice),
        cmocka_unit_test(test_v_layouts),    cmocka_unit_test(test_malformed), cmocka_unit_test(test_restore),
        cmocka_unit_test(test_dispatch_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
