/* The binomial broadcast and reduce (core/coll/binomial.c) in one process:
 * the N state machines of one call, wired by a harness that plays comm's
 * part after the socket, through the algorithm table (eccl_binomial_algo):
 * each DATA frame a rank queued on its link to rank j reaches j in role
 * ECCL_ROLE_PEER + sender: recv, the payload copied to where recv said
 * (perhaps in two parts with other events in between, as a socket read in
 * pieces leaves it), recv_done.
 *
 * Links are comm's peer links: one per pair of ranks, each end a channel
 * of its own, handed to pump through links->peer(ctx, rank), which returns
 * NULL while the pair is not open. Late runs open a pair only at some
 * pump after one of its ranks asked for it (asking opens it, in comm), so
 * frames for it wait. No threads, no sockets: the harness alone picks the
 * global order (round robin, or seeded random choices of which rank pumps
 * and which link delivers next); a link's own frames stay FIFO, as TCP
 * keeps them. So every interleaving, stop point and malformed frame is
 * reproducible.
 *
 * Every run checks, after every pump and every delivery, the promises of
 * coll/algo.h against a model written here from the documented schedule
 * (coll/binomial.h), not from the engine's code:
 *   - the tree: relative rank v = (r - root) mod N, parent v minus its
 *     lowest set bit, children v + 1, v + 2, v + 4, ... below it; a rank
 *     asks for no link but its parent's and its children's;
 *   - every frame's link, order and header (phase, step, offset, length,
 *     flags; tokens' step = the collective) when it is queued, and its
 *     payload when the socket takes it (a borrowed payload must not change
 *     while queued): the root's slices for the broadcast, the subtree's
 *     partial P(v) = ((P(c0) op P(c1)) ...) op own(v) for the reduce;
 *   - where payloads land: the broadcast's straight into recvbuf at the
 *     frame's offset, the reduce's into scratch region j for child j (an
 *     out-of-place root's child 0: recvbuf, where it folds); two
 *     frames landing in one rank at once never share a byte;
 *   - a frame only reaches a rank whose expects() is 1 for its sender's
 *     role, and expects() is exactly "more frames will come from there",
 *     for every role, after every event;
 *   - have_full() never goes back, and turns 1 only with the final output
 *     in recvbuf (a reduce rank off the root: once all its slices are
 *     queued);
 *   - DONE leaves a rank only when its whole subtree is full, COMMIT only
 *     when every rank is; complete() only once every rank is full (two
 *     ranks included), every frame of the rank's is queued, every frame
 *     for it arrived and no payload of its is queued;
 *   - tx/rx byte counts; guard bytes around every buffer (the caller's,
 *     scratch, backup) stay untouched; sendbuf is never written (but the
 *     reduce root's output in place).
 * Stopped after any number of frames (whole, or mid-frame with half the
 * payload landed), every rank's restore gives recvbuf back bit for bit (in
 * place; out of place its output is unspecified) and leaves sendbuf as it was.
 * Before every delivery, malformed variants of the frame (and frames from
 * the wrong rank, out of order, repeated) must be refused with
 * ECCL_ERR_PROTOCOL and leave the state machine as it was.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coll/binomial.h"
#include "coll/dispatch.h"
#include "coll/reduce.h"
#include "proto/chan.h"
#include "proto/wire.h"
#include "util/half.h"

#define MAXN 9
#define GUARD 64
#define SEND_GUARD 0x5a
#define RECV_GUARD 0xa5
#define AUX_GUARD 0x3c
#define SLICE ECCL_BINOMIAL_SLICE_BYTES

#include "host_env.h"

/* ---- data ------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static int is_float(eccl_dtype t) { return t >= ECCL_F16; }
static int is_signed_int(eccl_dtype t) { return t == ECCL_I8 || t == ECCL_I16 || t == ECCL_I32 || t == ECCL_I64; }
static int mod(int x, int n) { return ((x % n) + n) % n; }

static void fill_bytes(uint8_t *buf, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0xD1B54A32D192ED03ull + 99;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t r = rng_next(&x);
        memcpy(buf + i, &r, n - i < 8 ? n - i : 8);
    }
}

/* Random bits for integers (SUM and PROD wrap); random finite floats with
 * full mantissas, so another reduction order gives other bits; PROD's
 * factors near 1. */
static void fill_input(uint8_t *buf, eccl_dtype t, eccl_op op, size_t count, uint64_t seed)
{
    size_t es = eccl_dtype_size(t);
    if (!is_float(t)) {
        fill_bytes(buf, count * es, seed * 0x9E3779B97F4A7C15ull + 12345);
        return;
    }
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 12345;
    for (size_t i = 0; i < count; i++) {
        double u = (double)(rng_next(&x) >> 11) / 9007199254740992.0;
        double v = op == ECCL_PROD ? 0.5 + 1.5 * u : 2.0 * u - 1.0;
        float f = (float)v;
        if (t == ECCL_F64) {
            memcpy(buf + i * es, &v, 8);
        } else if (t == ECCL_F32) {
            memcpy(buf + i * es, &f, 4);
        } else {
            uint32_t bits;
            memcpy(&bits, &f, 4);
            uint16_t h = t == ECCL_F16 ? eccl_f32_to_f16(f) : (uint16_t)(bits >> 16);
            memcpy(buf + i * es, &h, 2);
        }
    }
}

/* One little-endian element, zero-extended. */
static uint64_t load_u(const uint8_t *p, size_t es)
{
    uint64_t v = 0;
    memcpy(&v, p, es);
    return v;
}

/* Integer reductions one element at a time, independent of reduce.c and of
 * any order: wrap-around SUM and PROD, signed or unsigned MIN and MAX, AVG
 * as the wrapped sum divided by n with C's truncation. */
static void naive_int_reduce(uint8_t *out, const uint8_t *const *in, int n, size_t count, eccl_dtype t, eccl_op op)
{
    size_t es = eccl_dtype_size(t);
    unsigned sh = (unsigned)(64 - 8 * es);
    int sgn = is_signed_int(t);
    for (size_t e = 0; e < count; e++) {
        uint64_t acc = load_u(in[0] + e * es, es);
        for (int r = 1; r < n; r++) {
            uint64_t v = load_u(in[r] + e * es, es);
            int64_t sa = (int64_t)(acc << sh) >> sh, sv = (int64_t)(v << sh) >> sh;
            uint64_t ua = acc << sh >> sh;
            switch (op) {
            case ECCL_SUM: case ECCL_AVG: acc += v; break;
            case ECCL_PROD: acc *= v; break;
            case ECCL_MIN: acc = (sgn ? sv < sa : v < ua) ? v : acc; break;
            default: acc = (sgn ? sv > sa : v > ua) ? v : acc; break;
            }
        }
        if (op == ECCL_AVG) {
            if (sgn) acc = (uint64_t)(((int64_t)(acc << sh) >> sh) / (int64_t)n);
            else acc = (acc << sh >> sh) / (uint64_t)n;
        }
        memcpy(out + e * es, &acc, es);
    }
}

/* ---- one call and its model ------------------------------------------------ */

typedef struct bcase {
    eccl_coll_kind kind; /* broadcast or reduce */
    int n;
    uint32_t root;
    eccl_dtype t;
    eccl_op op;
    size_t count;
    int in_place;
    uint64_t seed;
} bcase;

static bcase mk(eccl_coll_kind kind, int n, uint32_t root, eccl_dtype t, eccl_op op, size_t count, int in_place,
                uint64_t seed)
{
    bcase c = {kind, n, root, t, op, count, in_place, seed};
    return c;
}

static int is_bc(const bcase *c) { return c->kind == ECCL_COLL_BROADCAST; }
static size_t es_of(const bcase *c) { return eccl_dtype_size(c->t); }
static size_t bytes_of(const bcase *c) { return c->count * es_of(c); }
static const char *kind_name(const bcase *c) { return is_bc(c) ? "broadcast" : "reduce"; }

/* The tree, as binomial.h documents it. */
static int vr(const bcase *c, int r) { return mod(r - (int)c->root, c->n); }
static int real_rank(const bcase *c, int v) { return (v + (int)c->root) % c->n; }
static int low(int v) { return v & -v; }
static int m_parent(const bcase *c, int r)
{
    int v = vr(c, r);
    return v ? real_rank(c, v - low(v)) : -1;
}
static int m_children(const bcase *c, int r, int *out)
{
    int v = vr(c, r), m = 0;
    for (int d = 1; v + d < c->n && (v == 0 || d < low(v)); d <<= 1) out[m++] = real_rank(c, v + d);
    return m;
}
/* Whether rank x is in the subtree of rank top: relative ranks [v, v + lowbit(v)). */
static int in_subtree(const bcase *c, int top, int x)
{
    int v = vr(c, top), w = vr(c, x);
    return v == 0 || (w >= v && w < v + low(v));
}
static int child_idx(const bcase *c, int r, int x)
{
    int ch[32], m = m_children(c, r, ch);
    for (int j = 0; j < m; j++)
        if (ch[j] == x) return j;
    return -1;
}
static int waves(const bcase *c) { return c->n > 1; }
static size_t slice_b(const bcase *c)
{
    size_t cap = SLICE / es_of(c) * es_of(c);
    return bytes_of(c) < cap ? bytes_of(c) : cap;
}
static uint32_t nslices(const bcase *c)
{
    size_t s = slice_b(c);
    return s ? (uint32_t)((bytes_of(c) + s - 1) / s) : 0;
}
static int has_output(const bcase *c, int r) { return is_bc(c) || (uint32_t)r == c->root; }

/* A frame of the model: its header, and for data the slice it carries. */
typedef struct mframe {
    eccl_wire_data w;
    int data;
} mframe;

/* ---- the harness ----------------------------------------------------------- */

/* A payload landing in two parts: recv was called, recv_done not yet. */
typedef struct landing {
    int open;
    eccl_wire_data w;
    uint8_t *dst;
    size_t got;
    uint8_t *payload; /* what the socket took */
} landing;

enum { AUX_SCRATCH, AUX_BACKUP, AUX_COUNT };

typedef struct sim sim;
typedef struct pctx {
    sim *s;
    int rank;
} pctx;

struct sim {
    eccl_env env;
    bcase c;
    int n;
    const eccl_coll_algo *alg;
    eccl_binomial b[MAXN];
    /* link[i][j]: rank i's end of the pair (i, j): frames from i to j. */
    eccl_chan link[MAXN][MAXN];
    int open[MAXN][MAXN];  /* symmetric */
    int asked[MAXN][MAXN]; /* rank i asked for rank j's link */
    int late;              /* pairs open only at random pumps after one of them asked */
    pctx pc[MAXN];
    uint8_t *send_reg[MAXN], *recv_reg[MAXN];
    size_t send_len[MAXN], recv_len[MAXN];
    const uint8_t *send[MAXN];
    uint8_t *recv[MAXN];
    uint8_t *orig_send[MAXN], *orig_recv[MAXN];
    uint8_t *aux_reg[MAXN][AUX_COUNT], *aux[MAXN][AUX_COUNT];
    size_t aux_len[MAXN][AUX_COUNT];
    uint8_t *in[MAXN];      /* each rank's contribution */
    uint8_t *partial[MAXN]; /* reduce: P(rank) of the model, whole buffer */
    uint8_t *want;          /* the output (broadcast: the root's input; reduce: the root's result) */
    mframe *mf[MAXN][MAXN]; /* by sender and receiver */
    uint32_t nmf[MAXN][MAXN];
    uint32_t q_seen[MAXN][MAXN]; /* frames of link[i][j] inspected */
    uint32_t taken[MAXN][MAXN];  /* frames of link[i][j] the socket took */
    uint32_t rx[MAXN][MAXN];     /* [to][from]: delivered (recv_done) */
    landing land[MAXN][MAXN];    /* [to][from] */
    eccl_wire_data last_rx[MAXN][MAXN];
    int has_last[MAXN][MAXN];
    uint64_t rng;
    size_t frames, stop;
    int mid, fuzz;
    size_t rejected;
    int full[MAXN], done[MAXN];
    uint32_t opened; /* pairs opened late so far */
};

static size_t with_guards(size_t x) { return x + 2 * GUARD; }

static uint8_t *region(size_t len, uint8_t **reg, size_t *reg_len, uint8_t guard)
{
    *reg_len = with_guards(len);
    *reg = malloc(*reg_len);
    assert_non_null(*reg);
    memset(*reg, guard, *reg_len);
    return *reg + GUARD;
}

/* The reduce's partials bottom up: P(v) = ((P(c0) op P(c1)) ...) op own(v). */
static void model_partial(sim *s, int r)
{
    const bcase *c = &s->c;
    int ch[32], m = m_children(c, r, ch);
    size_t b = bytes_of(c);
    s->partial[r] = malloc(b + 1);
    assert_non_null(s->partial[r]);
    if (m == 0) {
        memcpy(s->partial[r], s->in[r], b);
        return;
    }
    for (int j = 0; j < m; j++) model_partial(s, ch[j]);
    memcpy(s->partial[r], s->partial[ch[0]], b);
    for (int j = 1; j < m; j++) eccl_reduce_into(s->partial[r], s->partial[ch[j]], c->count, c->t, c->op);
    eccl_reduce_into(s->partial[r], s->in[r], c->count, c->t, c->op);
}

static void add_frame(sim *s, int from, int to, uint8_t phase, uint64_t offset, uint32_t len, int data)
{
    mframe *f = &s->mf[from][to][s->nmf[from][to]++];
    memset(f, 0, sizeof *f);
    f->w.tag = 77;
    f->w.epoch = 3;
    f->w.phase = phase;
    f->w.offset = offset;
    f->w.len = len;
    f->w.step = data ? 0 : (uint16_t)s->c.kind;
    f->data = data;
}

static void build_model(sim *s)
{
    const bcase *c = &s->c;
    uint32_t ns = nslices(c);
    size_t sb = slice_b(c), b = bytes_of(c);
    for (int i = 0; i < s->n; i++)
        for (int j = 0; j < s->n; j++) {
            s->mf[i][j] = malloc(sizeof(mframe) * (ns + 2));
            assert_non_null(s->mf[i][j]);
            s->nmf[i][j] = 0;
        }
    for (int r = 0; r < s->n; r++) {
        int p = m_parent(c, r);
        if (p < 0) continue;
        /* The edge (p, r): data one way, a token or two. */
        int from = is_bc(c) ? p : r, to = is_bc(c) ? r : p;
        for (uint32_t k = 0; k < ns; k++) {
            size_t off = (size_t)k * sb, len = b - off < sb ? b - off : sb;
            add_frame(s, from, to, is_bc(c) ? ECCL_PHASE_BINO_BCAST : ECCL_PHASE_BINO_REDUCE, off, (uint32_t)len, 1);
        }
        if (waves(c)) {
            if (is_bc(c)) add_frame(s, r, p, ECCL_PHASE_BINO_DONE, 0, 0, 0);
            add_frame(s, p, r, ECCL_PHASE_BINO_COMMIT, 0, 0, 0);
        }
    }
}

static eccl_chan *h_peer(void *ctx, uint32_t rank)
{
    pctx *p = ctx;
    sim *s = p->s;
    const bcase *c = &s->c;
    if ((int)rank >= s->n || (int)rank == p->rank) fail_msg("rank %d asked for a link to rank %u", p->rank, rank);
    if ((int)rank != m_parent(c, p->rank) && child_idx(c, p->rank, (int)rank) < 0)
        fail_msg("rank %d asked for a link to rank %u, neither its parent nor a child", p->rank, rank);
    s->asked[p->rank][rank] = 1;
    return s->open[p->rank][rank] ? &s->link[p->rank][rank] : NULL;
}

/* The algorithm's own memory (scratch, backup): the size it asked for, guarded. */
static uint8_t *aux_region(sim *s, int r, int a, size_t len)
{
    size_t reg_len;
    s->aux_len[r][a] = len;
    if (!len) return NULL;
    s->aux[r][a] = region(len, &s->aux_reg[r][a], &reg_len, AUX_GUARD);
    return s->aux[r][a];
}

static void sim_init(sim *s, const bcase *c, uint64_t sched_seed, int late)
{
    memset(s, 0, sizeof *s);
    s->env = host_env();
    s->c = *c;
    s->n = c->n;
    s->alg = &eccl_binomial_algo;
    s->rng = sched_seed;
    s->late = late;
    s->stop = SIZE_MAX;
    size_t b = bytes_of(c);
    for (int r = 0; r < s->n; r++) {
        s->in[r] = malloc(b + 1);
        assert_non_null(s->in[r]);
        fill_input(s->in[r], c->t, c->op, c->count, c->seed * 131 + (uint64_t)r);
    }
    s->want = malloc(b + 1);
    assert_non_null(s->want);
    if (is_bc(c)) {
        memcpy(s->want, s->in[c->root], b);
    } else {
        model_partial(s, (int)c->root);
        memcpy(s->want, s->partial[c->root], b);
        if (c->op == ECCL_AVG) eccl_reduce_scale_div(s->want, c->count, c->t, (uint32_t)s->n);
    }
    for (int r = 0; r < s->n; r++) {
        int root = (uint32_t)r == c->root;
        if (is_bc(c)) {
            s->recv[r] = region(b, &s->recv_reg[r], &s->recv_len[r], RECV_GUARD);
            fill_bytes(s->recv[r], b, c->seed * 7 + (uint64_t)r);
            if (root) {
                s->send[r] = c->in_place ? s->recv[r] : region(b, &s->send_reg[r], &s->send_len[r], SEND_GUARD);
                memcpy((uint8_t *)s->send[r], s->in[r], b);
            }
        } else {
            s->send[r] = region(b, &s->send_reg[r], &s->send_len[r], SEND_GUARD);
            memcpy((uint8_t *)s->send[r], s->in[r], b);
            if (root && c->in_place) {
                s->recv[r] = (uint8_t *)s->send[r];
            } else if (root) {
                s->recv[r] = region(b, &s->recv_reg[r], &s->recv_len[r], RECV_GUARD);
                fill_bytes(s->recv[r], b, c->seed * 7 + (uint64_t)r);
            }
        }
        if (s->send_reg[r]) {
            s->orig_send[r] = malloc(s->send_len[r]);
            memcpy(s->orig_send[r], s->send_reg[r], s->send_len[r]);
        }
        if (s->recv_reg[r]) {
            s->orig_recv[r] = malloc(s->recv_len[r]);
            memcpy(s->orig_recv[r], s->recv_reg[r], s->recv_len[r]);
        }
        eccl_coll_call call = {.env = &s->env, .kind = c->kind, .root = c->root, .tag = 77, .epoch = 3,
                               .sendbuf = s->send[r], .recvbuf = s->recv[r], .count = c->count, .dtype = c->t,
                               .op = c->op, .rank = (uint32_t)r, .nranks = (uint32_t)c->n};
        size_t sb = eccl_binomial_scratch_bytes(&call), ob = eccl_binomial_output_bytes(&call);
        int ch[32], m = m_children(c, r, ch);
        assert_int_equal(sb, is_bc(c) ? 0 : (size_t)m * b);
        assert_int_equal(ob, has_output(c, r) ? b : 0);
        assert_int_equal(eccl_binomial_nchildren((uint32_t)r, (uint32_t)c->n, c->root), (uint32_t)m);
        /* A backup only in place, as comm/ops.c hands it out. */
        uint8_t *scratch = aux_region(s, r, AUX_SCRATCH, sb),
                *backup = c->in_place ? aux_region(s, r, AUX_BACKUP, ob) : NULL;
        eccl_binomial_init(&s->b[r], &call, scratch, backup);
        s->pc[r] = (pctx){s, r};
        for (int j = 0; j < s->n; j++) {
            assert_int_equal(eccl_chan_init(&s->link[r][j], &s->env, NULL, 64), ECCL_OK);
            s->open[r][j] = !late;
        }
    }
    build_model(s);
}

static void sim_fini(sim *s)
{
    for (int r = 0; r < s->n; r++) {
        for (int j = 0; j < s->n; j++) {
            eccl_chan_close(&s->link[r][j]);
            free(s->mf[r][j]);
        }
        for (int a = 0; a < AUX_COUNT; a++) free(s->aux_reg[r][a]);
        for (int j = 0; j < s->n; j++) free(s->land[r][j].payload);
        free(s->send_reg[r]);
        free(s->recv_reg[r]);
        free(s->orig_send[r]);
        free(s->orig_recv[r]);
        free(s->in[r]);
        free(s->partial[r]);
    }
    free(s->want);
}

static void decode_frame(const eccl_frame *f, eccl_wire_data *w)
{
    eccl_wire_header h;
    assert_int_equal(eccl_wire_header_decode(f->head, &h), ECCL_OK);
    assert_int_equal(h.type, ECCL_MSG_DATA);
    assert_int_equal(eccl_wire_data_decode(f->head + ECCL_WIRE_HEADER_SIZE, h.length, w), ECCL_OK);
    assert_int_equal(f->payload_len, w->len);
}

static int is_full(const sim *s, int r) { return s->alg->have_full(&s->b[r]); }
static int same_header(const eccl_wire_data *a, const eccl_wire_data *b)
{
    return a->tag == b->tag && a->epoch == b->epoch && a->ring == b->ring && a->phase == b->phase &&
           a->step == b->step && a->offset == b->offset && a->len == b->len && a->flags == b->flags;
}

/* Frames rank i queued since the last look: header and order against the
 * model; tokens when they are sent (a token must never claim more than is
 * true). */
static void inspect_queued(sim *s, int i)
{
    const bcase *c = &s->c;
    for (int j = 0; j < s->n; j++) {
        uint32_t k = 0;
        for (const eccl_frame *f = s->link[i][j].out_head; f; f = f->next, k++) {
            uint32_t at = s->taken[i][j] + k;
            if (at < s->q_seen[i][j]) continue;
            eccl_wire_data w;
            decode_frame(f, &w);
            if (at >= s->nmf[i][j]) fail_msg("rank %d queued frame %u to rank %d: the model has %u", i, at, j, s->nmf[i][j]);
            const mframe *m = &s->mf[i][j][at];
            if (!same_header(&w, &m->w))
                fail_msg("%s n=%d root=%u: rank %d's frame %u to rank %d: phase %u step %u offset %llu len %u flags %u "
                         "ring %u; expected phase %u step %u offset %llu len %u",
                         kind_name(c), c->n, c->root, i, at, j, w.phase, w.step, (unsigned long long)w.offset, w.len,
                         w.flags, w.ring, m->w.phase, m->w.step, (unsigned long long)m->w.offset, m->w.len);
            if (w.phase == ECCL_PHASE_BINO_DONE)
                for (int x = 0; x < s->n; x++)
                    if (in_subtree(c, i, x) && !is_full(s, x))
                        fail_msg("rank %d sent DONE while rank %d of its subtree is not full", i, x);
            if (w.phase == ECCL_PHASE_BINO_COMMIT)
                for (int x = 0; x < s->n; x++)
                    if (!is_full(s, x)) fail_msg("rank %d sent COMMIT while rank %d is not full", i, x);
            s->q_seen[i][j] = at + 1;
        }
    }
}

static uint32_t data_frames(const sim *s, int i, int j)
{
    uint32_t d = 0;
    for (uint32_t k = 0; k < s->nmf[i][j]; k++) d += s->mf[i][j][k].data;
    return d;
}

static void expect_bytes(const sim *s, int r)
{
    uint64_t tx = 0, rx = 0, wtx = 0, wrx = 0;
    s->alg->bytes(&s->b[r], &tx, &rx);
    for (int j = 0; j < s->n; j++) {
        wtx += (uint64_t)data_frames(s, r, j) ? bytes_of(&s->c) : 0;
        wrx += (uint64_t)data_frames(s, j, r) ? bytes_of(&s->c) : 0;
    }
    if (tx != wtx || rx != wrx)
        fail_msg("rank %d: tx %llu rx %llu, expected %llu %llu", r, (unsigned long long)tx, (unsigned long long)rx,
                 (unsigned long long)wtx, (unsigned long long)wrx);
}

/* The promises of coll/algo.h, checked after every event. */
static void observe(sim *s)
{
    const bcase *c = &s->c;
    for (int r = 0; r < s->n; r++) {
        const void *op = &s->b[r];
        int f = s->alg->have_full(op);
        if (s->full[r] && !f) fail_msg("rank %d: have_full went back to 0", r);
        if (f && !s->full[r]) {
            if (has_output(c, r) && memcmp(s->recv[r], s->want, bytes_of(c)) != 0)
                fail_msg("%s n=%d root=%u: rank %d full with an output that is not final", kind_name(c), c->n, c->root, r);
            if (!has_output(c, r)) {
                int p = m_parent(c, r);
                if (s->q_seen[r][p] < data_frames(s, r, p))
                    fail_msg("rank %d (no output) full with %u of %u slices queued", r, s->q_seen[r][p],
                             data_frames(s, r, p));
            }
            s->full[r] = 1;
        }
        for (int role = 0; role < ECCL_ROLE_COUNT; role++)
            if (s->alg->expects(op, role)) fail_msg("rank %d expects frames in fixed role %d", r, role);
        for (int x = 0; x <= s->n; x++) {
            int e = s->alg->expects(op, ECCL_ROLE_PEER + x);
            int left = x < s->n && x != r && s->rx[r][x] < s->nmf[x][r];
            if (e != left)
                fail_msg("%s n=%d root=%u: rank %d expects(peer %d) %d with %u of %u frames in", kind_name(c), c->n,
                         c->root, r, x, e, x < s->n ? s->rx[r][x] : 0, x < s->n ? s->nmf[x][r] : 0);
        }
        if (!s->done[r] && s->alg->complete(&s->b[r])) {
            s->done[r] = 1;
            if (!f) fail_msg("rank %d complete without its output", r);
            if (waves(c))
                for (int x = 0; x < s->n; x++)
                    if (!is_full(s, x)) fail_msg("rank %d complete while rank %d is not full", r, x);
            for (int j = 0; j < s->n; j++) {
                for (const eccl_frame *q = s->link[r][j].out_head; q; q = q->next)
                    if (q->payload_len) fail_msg("rank %d complete with a payload still queued", r);
                if (s->q_seen[r][j] != s->nmf[r][j])
                    fail_msg("rank %d complete with %u of %u frames to rank %d queued", r, s->q_seen[r][j], s->nmf[r][j], j);
                if (s->rx[r][j] != s->nmf[j][r])
                    fail_msg("rank %d complete with %u of %u frames from rank %d in", r, s->rx[r][j], s->nmf[j][r], j);
            }
            expect_bytes(s, r);
        }
    }
}

/* A late pair opens at some pump after one of its ranks asked for it. */
static void maybe_open(sim *s, int i)
{
    if (s->late != 1) return;
    for (int j = 0; j < s->n; j++)
        if (!s->open[i][j] && (s->asked[i][j] || s->asked[j][i]) && (!s->rng || rng_next(&s->rng) % 4 == 0)) {
            s->open[i][j] = s->open[j][i] = 1;
            s->opened++;
        }
}

static void pump(sim *s, int i)
{
    if (s->done[i]) return; /* comm retires an op once complete */
    eccl_coll_links l = {{NULL}, h_peer, &s->pc[i], 0};
    assert_int_equal(s->alg->pump(&s->b[i], &l), ECCL_OK);
    inspect_queued(s, i);
    observe(s);
    maybe_open(s, i);
}

/* The payload data frame k from rank i must carry. */
static const uint8_t *model_payload(const sim *s, int i, const eccl_wire_data *w)
{
    return (is_bc(&s->c) ? s->in[s->c.root] : s->partial[i]) + w->offset;
}

/* Whether w is the frame rank `to` expects next from rank `from`. */
static int is_next_expected(const sim *s, int to, int from, const eccl_wire_data *w)
{
    if (from < 0 || from >= s->n || s->rx[to][from] >= s->nmf[from][to]) return 0;
    return same_header(w, &s->mf[from][to][s->rx[to][from]].w);
}

static void try_bad(sim *s, int to, int role, const eccl_wire_data *w)
{
    eccl_binomial before;
    memcpy(&before, &s->b[to], sizeof before);
    void *dst = &dst;
    eccl_result rc = s->alg->recv(&s->b[to], role, w, &dst);
    if (rc != ECCL_ERR_PROTOCOL)
        fail_msg("%s n=%d root=%u: rank %d took a malformed frame (role %d ring %u phase %u step %u offset %llu len %u "
                 "flags %u): %s",
                 kind_name(&s->c), s->n, s->c.root, to, role, w->ring, w->phase, w->step,
                 (unsigned long long)w->offset, w->len, w->flags, eccl_strerror(rc));
    if (memcmp(&before, &s->b[to], sizeof before) != 0) fail_msg("rank %d: a refused frame changed the state", to);
    s->rejected++;
}

/* Whether token t from rank x could be on its way to `to` now, as far as
 * `to` can know: it is what x sends next, and `to` did its part first (a
 * COMMIT comes only to a full rank that sent its DONE, a DONE only from a
 * child that was sent every slice). */
static int token_possible(const sim *s, int x, int to, const eccl_wire_data *t)
{
    if (!is_next_expected(s, to, x, t)) return 0;
    int p = m_parent(&s->c, to);
    if (t->phase == ECCL_PHASE_BINO_COMMIT)
        return is_full(s, to) && (!is_bc(&s->c) || p < 0 || s->q_seen[to][p] == s->nmf[to][p]);
    return s->q_seen[to][x] >= data_frames(s, to, x);
}

/* Malformed variants of `good`, about to reach rank `to` from `from`. */
static void fuzz_frame(sim *s, int from, int to, const eccl_wire_data *good, const eccl_frame *second)
{
    const bcase *c = &s->c;
    size_t es = es_of(c);
    int role = ECCL_ROLE_PEER + from;
    eccl_wire_data w;
#define BAD(stmt)                 \
    do {                          \
        w = *good;                \
        stmt;                     \
        try_bad(s, to, role, &w); \
    } while (0)
    /* The fixed roles, and every other sender (a link with a frame landing
     * reads nothing else: comm's links are serial). */
    for (int r = 0; r < ECCL_ROLE_COUNT; r++) try_bad(s, to, r, good);
    for (int x = 0; x <= s->n + 1; x++)
        if (x != from && (x >= s->n || !s->land[to][x].open) && !is_next_expected(s, to, x, good))
            try_bad(s, to, ECCL_ROLE_PEER + x, good);
    for (int p = 0; p <= ECCL_PHASE_LAST; p++)
        if (p != good->phase) BAD(w.phase = (uint8_t)p); /* another collective's, or another wave's */
    BAD(w.ring = 1);
    BAD(w.step++);
    if (good->step) BAD(w.step--);
    BAD(w.step = (uint16_t)(c->kind == ECCL_COLL_BROADCAST ? ECCL_COLL_REDUCE : ECCL_COLL_BROADCAST));
    BAD(w.flags = ECCL_WIRE_DATA_QUANT);
    BAD(w.flags |= ECCL_WIRE_DATA_BULK);
    BAD(w.offset += es);
    if (good->offset) BAD(w.offset -= es);
    if (slice_b(c)) BAD(w.offset += slice_b(c));
    BAD(w.offset += 1ull << 40);
    if (good->len) {
        BAD(w.len -= (uint32_t)es);
        BAD(w.len = 0);
    }
    BAD(w.len += (uint32_t)es);
    /* The frame after it, first: FIFO broken. */
    if (second) {
        eccl_wire_data w2;
        decode_frame(second, &w2);
        try_bad(s, to, role, &w2);
    }
    /* The frame the rank took last from this sender, again. */
    if (s->has_last[to][from]) try_bad(s, to, role, &s->last_rx[to][from]);
    /* Tokens from every rank, unless one could be on its way now. */
    for (int x = 0; x < s->n; x++) {
        for (int k = 0; k < 2; k++) {
            eccl_wire_data t = {.tag = 77, .epoch = 3, .phase = k ? ECCL_PHASE_BINO_COMMIT : ECCL_PHASE_BINO_DONE,
                                .step = (uint16_t)c->kind};
            if (x != to && (x == from || !s->land[to][x].open) && !token_possible(s, x, to, &t) &&
                !(x == from && same_header(&t, good)))
                try_bad(s, to, ECCL_ROLE_PEER + x, &t);
        }
    }
    for (int x = 0; x < s->n; x++) {
        if (x == to || s->land[to][x].open || data_frames(s, x, to) || !c->count) continue;
        eccl_wire_data d = {.tag = 77, .epoch = 3, .phase = is_bc(c) ? ECCL_PHASE_BINO_BCAST : ECCL_PHASE_BINO_REDUCE,
                            .len = (uint32_t)slice_b(c)};
        try_bad(s, to, ECCL_ROLE_PEER + x, &d);
    }
#undef BAD
}

/* Where a payload lands, and never on bytes another landing frame uses. */
static void check_dst(const sim *s, int from, int to, const eccl_wire_data *w, const uint8_t *dst)
{
    const bcase *c = &s->c;
    if (!w->len) {
        if (dst) fail_msg("rank %d: a token from rank %d lands somewhere", to, from);
        return;
    }
    size_t j = (size_t)child_idx(c, to, from);
    /* An out-of-place root folds in recvbuf: its first child's partials land there. */
    int in_recv = is_bc(c) || (j == 0 && (uint32_t)to == c->root && !c->in_place);
    const uint8_t *want = in_recv ? s->recv[to] + w->offset
                                  : s->aux[to][AUX_SCRATCH] + j * bytes_of(c) + w->offset;
    if (dst != want) fail_msg("%s: rank %d: a frame from rank %d lands off its place", kind_name(c), to, from);
    for (int x = 0; x < s->n; x++) {
        const landing *o = &s->land[to][x];
        if (x != from && o->open && o->w.len && dst < o->dst + o->w.len && o->dst < dst + w->len)
            fail_msg("rank %d: frames from ranks %d and %d land on the same bytes", to, from, x);
    }
}

static void deliver_end(sim *s, int from, int to)
{
    landing *l = &s->land[to][from];
    eccl_wire_data w = l->w;
    l->open = 0;
    assert_int_equal(s->alg->recv_done(&s->b[to], ECCL_ROLE_PEER + from, &w), ECCL_OK);
    s->rx[to][from]++;
    s->last_rx[to][from] = w;
    s->has_last[to][from] = 1;
    observe(s);
}

/* The rest of a landing payload, then recv_done. */
static void land_rest(sim *s, int from, int to)
{
    landing *l = &s->land[to][from];
    if (l->w.len) memcpy(l->dst + l->got, l->payload + l->got, l->w.len - l->got);
    free(l->payload);
    l->payload = NULL;
    deliver_end(s, from, to);
}

/* Takes the head frame off link (from, to) and hands it to `to`; `split`:
 * half its payload lands now, the rest later. ECCL_ERR_AGAIN: stopped
 * mid-frame (s->mid). */
static eccl_result deliver_begin(sim *s, int from, int to, int split)
{
    eccl_chan *ch = &s->link[from][to];
    const eccl_frame *f = ch->out_head;
    eccl_wire_data w;
    decode_frame(f, &w);
    landing *l = &s->land[to][from];
    assert_false(l->open);
    uint32_t at = s->taken[from][to];
    assert_true(at < s->nmf[from][to]);
    if (!same_header(&w, &s->mf[from][to][at].w)) fail_msg("rank %d's frame %u to %d changed while queued", from, at, to);
    if (w.len && memcmp(f->payload, model_payload(s, from, &w), w.len) != 0)
        fail_msg("%s n=%d root=%u %s %s: rank %d's frame %u to rank %d (offset %llu): payload differs from the model",
                 kind_name(&s->c), s->n, s->c.root, eccl_dtype_name(s->c.t), eccl_op_name(s->c.op), from, at, to,
                 (unsigned long long)w.offset);
    uint8_t *payload = malloc(w.len + 1);
    assert_non_null(payload);
    if (w.len) memcpy(payload, f->payload, w.len);
    if (s->fuzz) fuzz_frame(s, from, to, &w, f->next);
    pop_frame(ch);
    s->taken[from][to]++;
    s->frames++;
    int role = ECCL_ROLE_PEER + from;
    if (!s->alg->expects(&s->b[to], role)) fail_msg("rank %d got a frame from rank %d it does not expect", to, from);
    void *dst = &dst;
    eccl_result rc = s->alg->recv(&s->b[to], role, &w, &dst);
    if (rc != ECCL_OK)
        fail_msg("%s n=%d root=%u: rank %d refused a well-formed frame from rank %d (phase %u offset %llu len %u): %s",
                 kind_name(&s->c), s->n, s->c.root, to, from, w.phase, (unsigned long long)w.offset, w.len,
                 eccl_strerror(rc));
    check_dst(s, from, to, &w, dst);
    l->open = 1;
    l->w = w;
    l->dst = dst;
    l->got = 0;
    l->payload = payload;
    if (w.len && s->mid && s->frames == s->stop) {
        memcpy(dst, payload, w.len / 2);
        memset((uint8_t *)dst + w.len / 2, 0xee, w.len - w.len / 2);
        return ECCL_ERR_AGAIN;
    }
    if (split && w.len >= 2) {
        l->got = w.len / 2;
        memcpy(dst, payload, l->got);
        observe(s);
        return ECCL_OK;
    }
    land_rest(s, from, to);
    return ECCL_OK;
}

static int all_done(const sim *s)
{
    for (int r = 0; r < s->n; r++)
        if (!s->done[r]) return 0;
    return 1;
}

/* Links (from * MAXN + to) with a frame to take or one landing. */
static int active_links(const sim *s, int *out)
{
    int m = 0;
    for (int i = 0; i < s->n; i++)
        for (int j = 0; j < s->n; j++)
            if (s->link[i][j].out_head || s->land[j][i].open) out[m++] = i * MAXN + j;
    return m;
}

static eccl_result step_link(sim *s, int id, int split)
{
    int from = id / MAXN, to = id % MAXN;
    if (s->land[to][from].open) {
        land_rest(s, from, to);
        return ECCL_OK;
    }
    if (s->frames >= s->stop) return ECCL_ERR_AGAIN;
    return deliver_begin(s, from, to, split);
}

/* Nothing to deliver: a pair somebody asked for opens (else the run is stuck). */
static int open_asked(sim *s)
{
    for (int i = 0; i < s->n; i++)
        for (int j = 0; j < s->n; j++)
            if (!s->open[i][j] && (s->asked[i][j] || s->asked[j][i])) {
                s->open[i][j] = s->open[j][i] = 1;
                return 1;
            }
    return 0;
}

/* Runs until every rank completes (ECCL_OK) or frame s->stop (ECCL_ERR_AGAIN). */
static eccl_result sim_run(sim *s)
{
    int links[MAXN * MAXN];
    for (;;) {
        int m = active_links(s, links);
        if (all_done(s)) {
            if (m) fail_msg("every rank complete with frames left on a link");
            return ECCL_OK;
        }
        if (s->rng == 0 || m == 0) {
            int from = s->rng ? (int)(rng_next(&s->rng) % (uint64_t)s->n) : 0;
            uint32_t opened = s->opened;
            for (int j = 0; j < s->n && (!s->rng || !active_links(s, links)); j++) pump(s, (from + j) % s->n);
            m = active_links(s, links);
            if (m == 0) {
                /* A pair that opened during these pumps is not used yet. */
                if (all_done(s) || s->opened != opened) continue;
                if (!open_asked(s)) {
                    for (int r = 0; r < s->n; r++)
                        print_error("rank %d: full %d done %d up_recv %u up_send %u folded %u committed %d\n", r,
                                    s->full[r], s->done[r], s->b[r].up_recv, s->b[r].up_send, s->b[r].folded,
                                    s->b[r].committed);
                    fail_msg("%s n=%d root=%u count=%zu: stuck: no frame queued and not every rank complete",
                             kind_name(&s->c), s->n, s->c.root, s->c.count);
                }
                continue;
            }
            if (s->rng) continue;
            for (int j = 0; j < m; j++) {
                eccl_result rc = step_link(s, links[j], 0);
                if (rc != ECCL_OK) return rc;
            }
            continue;
        }
        uint64_t x = rng_next(&s->rng);
        if (x % 4 == 0) {
            pump(s, (int)((x >> 8) % (uint64_t)s->n));
        } else {
            eccl_result rc = step_link(s, links[(x >> 8) % (uint64_t)m], (x >> 40) % 4 == 0);
            if (rc != ECCL_OK) return rc;
        }
    }
}

static void check_guards(const sim *s, int r)
{
    const uint8_t *regs[2 + AUX_COUNT] = {s->send_reg[r], s->recv_reg[r], s->aux_reg[r][0], s->aux_reg[r][1]};
    size_t lens[2 + AUX_COUNT] = {s->send_len[r], s->recv_len[r], with_guards(s->aux_len[r][0]),
                                  with_guards(s->aux_len[r][1])};
    uint8_t guard[2 + AUX_COUNT] = {SEND_GUARD, RECV_GUARD, AUX_GUARD, AUX_GUARD};
    static const char *const names[] = {"send", "recv", "scratch", "backup"};
    for (int k = 0; k < 2 + AUX_COUNT; k++) {
        if (!regs[k]) continue;
        for (size_t i = 0; i < GUARD; i++)
            if (regs[k][i] != guard[k] || regs[k][lens[k] - 1 - i] != guard[k])
                fail_msg("rank %d: a byte next to its %s buffer was written", r, names[k]);
    }
}

static void check_results(sim *s)
{
    const bcase *c = &s->c;
    size_t es = es_of(c), b = bytes_of(c);
    for (int r = 0; r < s->n; r++) {
        if (has_output(c, r) && memcmp(s->recv[r], s->want, b) != 0) {
            size_t e = 0;
            while (memcmp(s->recv[r] + e * es, s->want + e * es, es) == 0) e++;
            fail_msg("%s n=%d root=%u %s %s count=%zu in_place=%d: rank %d element %zu wrong", kind_name(c), c->n,
                     c->root, eccl_dtype_name(c->t), eccl_op_name(c->op), c->count, c->in_place, r, e);
        }
        check_guards(s, r);
        if (s->send_reg[r]) {
            /* Never written, but the reduce root's output in place. */
            int skip = !is_bc(c) && c->in_place && (uint32_t)r == c->root;
            size_t end = skip ? GUARD : s->send_len[r];
            if (memcmp(s->send_reg[r], s->orig_send[r], end) != 0 ||
                (skip && memcmp(s->send_reg[r] + GUARD + b, s->orig_send[r] + GUARD + b, GUARD) != 0))
                fail_msg("%s n=%d: rank %d's sendbuf was written", kind_name(c), c->n, r);
        }
        expect_bytes(s, r);
        assert_true(s->full[r] && s->done[r]);
        for (int x = 0; x < s->n + 2; x++) assert_false(s->alg->expects(&s->b[r], ECCL_ROLE_PEER + x));
    }
}

/* In place, recvbuf (and so sendbuf) bit for bit as before; out of place,
 * sendbuf untouched (all a retry reads; the output is then unspecified). */
static void restore_all(sim *s)
{
    for (int r = 0; r < s->n; r++) s->alg->restore(&s->b[r]);
    for (int r = 0; r < s->n; r++) {
        if (s->c.in_place && s->recv_reg[r] && memcmp(s->recv_reg[r], s->orig_recv[r], s->recv_len[r]) != 0)
            fail_msg("%s n=%d root=%u count=%zu in_place=%d, stopped at frame %zu%s: rank %d recvbuf not restored",
                     kind_name(&s->c), s->n, s->c.root, s->c.count, s->c.in_place, s->frames,
                     s->mid ? " mid-frame" : "", r);
        if (s->send_reg[r] && memcmp(s->send_reg[r], s->orig_send[r], s->send_len[r]) != 0)
            fail_msg("%s n=%d, stopped at frame %zu: rank %d sendbuf not as before", kind_name(&s->c), s->n, s->frames, r);
        check_guards(s, r);
    }
}

#define FUZZ 1
#define LATE 2

/* One whole call; returns the frames it took. */
static size_t run_case(const bcase *c, uint64_t sched_seed, int flags)
{
    sim *s = malloc(sizeof *s);
    assert_non_null(s);
    sim_init(s, c, sched_seed, flags & LATE ? 1 : 0);
    s->fuzz = flags & FUZZ;
    assert_int_equal(sim_run(s), ECCL_OK);
    check_results(s);
    if (s->fuzz && s->frames) assert_true(s->rejected > 0);
    /* Every frame in: one more is refused, whatever it is. */
    for (int r = 0; r < s->n; r++)
        for (int x = 0; x < s->n; x++) {
            if (s->has_last[r][x]) try_bad(s, r, ECCL_ROLE_PEER + x, &s->last_rx[r][x]);
            eccl_wire_data t = {.tag = 77, .epoch = 3, .phase = ECCL_PHASE_BINO_COMMIT, .step = (uint16_t)c->kind};
            if (x != r) try_bad(s, r, ECCL_ROLE_PEER + x, &t);
            t.phase = ECCL_PHASE_BINO_DONE;
            if (x != r) try_bad(s, r, ECCL_ROLE_PEER + x, &t);
        }
    size_t frames = s->frames;
    sim_fini(s);
    free(s);
    return frames;
}

/* Stopped after every stride-th number of delivered frames, whole or
 * mid-frame: every rank's restore gives recvbuf back bit for bit. */
static void restore_case(const bcase *c, uint64_t sched_seed, int flags)
{
    size_t total = run_case(c, sched_seed, flags);
    for (size_t stop = 0; stop <= total; stop++) {
        for (int mid = 0; mid < 2; mid++) {
            if (mid && stop == 0) continue;
            sim *s = malloc(sizeof *s);
            assert_non_null(s);
            sim_init(s, c, sched_seed, flags & LATE ? 1 : 0);
            s->stop = stop;
            s->mid = mid;
            eccl_result rc = sim_run(s);
            assert_true(rc == ECCL_ERR_AGAIN || (rc == ECCL_OK && stop == total));
            restore_all(s);
            sim_fini(s);
            free(s);
        }
    }
}

/* ---- tests ------------------------------------------------------------------ */

/* The tree by hand, and the engine's against the model for every N and root. */
static void test_tree(void **state)
{
    (void)state;
    bcase c = mk(ECCL_COLL_BROADCAST, 8, 0, ECCL_U8, ECCL_SUM, 1, 0, 0);
    int ch[32];
    assert_int_equal(m_children(&c, 0, ch), 3);
    assert_int_equal(ch[0], 1);
    assert_int_equal(ch[1], 2);
    assert_int_equal(ch[2], 4);
    assert_int_equal(m_children(&c, 4, ch), 2);
    assert_int_equal(ch[0], 5);
    assert_int_equal(ch[1], 6);
    assert_int_equal(m_children(&c, 6, ch), 1);
    assert_int_equal(m_children(&c, 7, ch), 0);
    assert_int_equal(m_parent(&c, 7), 6);
    assert_int_equal(m_parent(&c, 6), 4);
    assert_int_equal(m_parent(&c, 5), 4);
    assert_int_equal(m_parent(&c, 3), 2);
    /* Rooted at 3 of 5: relative 0..4 are ranks 3, 4, 0, 1, 2. */
    c = mk(ECCL_COLL_REDUCE, 5, 3, ECCL_U8, ECCL_SUM, 1, 0, 0);
    assert_int_equal(m_children(&c, 3, ch), 3);
    assert_int_equal(ch[0], 4);
    assert_int_equal(ch[1], 0);
    assert_int_equal(ch[2], 2);
    assert_int_equal(m_children(&c, 0, ch), 1);
    assert_int_equal(ch[0], 1);
    assert_int_equal(m_parent(&c, 1), 0);
    assert_int_equal(m_parent(&c, 2), 3);
    /* The engine agrees for every N up to 70 and every root, and the depth
     * is floor(log2 N) (the root's children: ceil(log2 N)). */
    eccl_env env = host_env();
    for (int n = 2; n <= 70; n++) {
        int depth_max = 0, want_depth = 0;
        while ((2 << want_depth) <= n) want_depth++; /* floor(log2 N) */
        for (int root = 0; root < n; root++) {
            c = mk(root % 2 ? ECCL_COLL_REDUCE : ECCL_COLL_BROADCAST, n, (uint32_t)root, ECCL_U8, ECCL_SUM, 1, 0, 0);
            for (int r = 0; r < n; r++) {
                eccl_coll_call call = {.env = &env, .kind = c.kind, .root = (uint32_t)root, .count = 1,
                                       .dtype = ECCL_U8, .rank = (uint32_t)r, .nranks = (uint32_t)n};
                uint8_t x = 0;
                call.sendbuf = &x;
                call.recvbuf = &x;
                eccl_binomial b;
                eccl_binomial_init(&b, &call, NULL, NULL);
                int m = m_children(&c, r, ch), p = m_parent(&c, r);
                assert_int_equal(b.parent, p < 0 ? ECCL_BINOMIAL_NONE : (uint32_t)p);
                assert_int_equal(b.nchildren, (uint32_t)m);
                for (int j = 0; j < m; j++) assert_int_equal(b.child[j], (uint32_t)ch[j]);
                int depth = 0;
                for (int x2 = r; m_parent(&c, x2) >= 0; x2 = m_parent(&c, x2)) depth++;
                if (depth > depth_max) depth_max = depth;
            }
        }
        assert_int_equal(depth_max, want_depth);
    }
}

/* The model's reduce is the reduction (integers: any order gives the same,
 * the naive loop says which), and its float order is one of its own: a
 * left fold over the ranks gives other bits. */
static void test_reference(void **state)
{
    (void)state;
    enum { C = 41 };
    static const eccl_dtype ts[] = {ECCL_I8, ECCL_U16, ECCL_I32, ECCL_U64};
    for (int n = 2; n <= MAXN; n++)
        for (size_t ti = 0; ti < sizeof ts / sizeof *ts; ti++)
            for (int op = 0; op < ECCL_OP_COUNT; op++) {
                bcase c = mk(ECCL_COLL_REDUCE, n, (uint32_t)(n / 2), ts[ti], (eccl_op)op, C, 0, (uint64_t)n);
                sim *s = malloc(sizeof *s);
                sim_init(s, &c, 0, 0);
                uint8_t want[C * 8];
                naive_int_reduce(want, (const uint8_t *const *)s->in, n, C, ts[ti], (eccl_op)op);
                assert_memory_equal(want, s->want, C * eccl_dtype_size(ts[ti]));
                sim_fini(s);
                free(s);
            }
    bcase c = mk(ECCL_COLL_REDUCE, 8, 0, ECCL_F32, ECCL_SUM, C, 0, 5);
    sim *s = malloc(sizeof *s);
    sim_init(s, &c, 0, 0);
    uint8_t fold[C * 4];
    memcpy(fold, s->in[0], sizeof fold);
    for (int r = 1; r < 8; r++) eccl_reduce_into(fold, s->in[r], C, ECCL_F32, ECCL_SUM);
    assert_true(memcmp(fold, s->want, sizeof fold) != 0);
    sim_fini(s);
    free(s);
}

static void test_algo_table(void **state)
{
    (void)state;
    const eccl_coll_algo *a = &eccl_binomial_algo;
    assert_int_equal(a->id, ECCL_ALGO_BINOMIAL);
    assert_int_equal(a->roles, ECCL_ROLES_PEERS);
    assert_int_equal(a->pump_needs, 0);
    assert_true(a->pump && a->recv && a->recv_done && a->complete && a->expects && a->have_full && a->restore &&
                a->error && a->bytes);
}

/* N = 2..9, every root, both collectives, round robin and a random order,
 * malformed frames tried before every delivery. */
static void test_every_root(void **state)
{
    (void)state;
    uint64_t seed = 1;
    for (int n = 2; n <= MAXN; n++)
        for (int root = 0; root < n; root++)
            for (int k = 0; k < 2; k++) {
                eccl_coll_kind kind = k ? ECCL_COLL_REDUCE : ECCL_COLL_BROADCAST;
                bcase c = mk(kind, n, (uint32_t)root, k ? ECCL_F32 : ECCL_I16, ECCL_SUM, 37, root % 2, seed++);
                run_case(&c, 0, FUZZ);
                run_case(&c, seed * 77 + 1, FUZZ);
            }
}

/* Every dtype and op (the broadcast: every dtype), in and out of place, on
 * a few worlds and roots. */
static void test_dtypes_ops(void **state)
{
    (void)state;
    static const int worlds[][2] = {{3, 1}, {5, 2}, {8, 5}, {9, 0}};
    uint64_t seed = 100;
    for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; wi++)
        for (int t = 0; t < ECCL_DTYPE_COUNT; t++)
            for (int in_place = 0; in_place < 2; in_place++) {
                bcase c = mk(ECCL_COLL_BROADCAST, worlds[wi][0], (uint32_t)worlds[wi][1], (eccl_dtype)t, ECCL_SUM, 13,
                             in_place, seed++);
                run_case(&c, seed, 0);
                for (int op = 0; op < ECCL_OP_COUNT; op++) {
                    c = mk(ECCL_COLL_REDUCE, worlds[wi][0], (uint32_t)worlds[wi][1], (eccl_dtype)t, (eccl_op)op, 13,
                           in_place, seed++);
                    run_case(&c, seed, 0);
                }
            }
}

/* Several slices (and a partial one): each link carries them in order, and
 * the reduce folds slice by slice; links open late; random orders. */
static void test_slices(void **state)
{
    (void)state;
    size_t three = (2 * SLICE + SLICE / 2) / 4 + 3; /* f32: 2.5 slices and a bit */
    static const int worlds[][2] = {{2, 1}, {3, 0}, {6, 4}, {9, 7}};
    uint64_t seed = 500;
    for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; wi++)
        for (int k = 0; k < 2; k++) {
            eccl_coll_kind kind = k ? ECCL_COLL_REDUCE : ECCL_COLL_BROADCAST;
            bcase c = mk(kind, worlds[wi][0], (uint32_t)worlds[wi][1], ECCL_F32, k ? ECCL_AVG : ECCL_SUM, three,
                         (int)(wi % 2), seed++);
            assert_int_equal(nslices(&c), 3);
            run_case(&c, 0, 0);
            run_case(&c, seed * 3 + 1, LATE);
            run_case(&c, seed * 5 + 2, FUZZ | LATE);
        }
    /* Exactly one slice, and one element more. */
    bcase c = mk(ECCL_COLL_REDUCE, 4, 3, ECCL_U8, ECCL_MAX, SLICE, 0, 9);
    assert_int_equal(nslices(&c), 1);
    run_case(&c, 11, 0);
    c.count++;
    assert_int_equal(nslices(&c), 2);
    run_case(&c, 12, 0);
    c.kind = ECCL_COLL_BROADCAST;
    run_case(&c, 13, LATE);
}

/* Many random interleavings (payloads landing in pieces, pumps anywhere,
 * links opening late) of small and multi-slice calls. */
static void test_interleavings(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 120; seed++) {
        int n = 2 + (int)(seed % 8);
        uint32_t root = (uint32_t)(seed * 7 % (uint64_t)n);
        eccl_coll_kind kind = seed % 2 ? ECCL_COLL_REDUCE : ECCL_COLL_BROADCAST;
        size_t count = seed % 10 == 0 ? SLICE + SLICE / 3 : 1 + seed % 50;
        bcase c = mk(kind, n, root, seed % 3 ? ECCL_F32 : ECCL_U8, seed % 4 ? ECCL_SUM : ECCL_AVG, count,
                     (int)(seed / 2 % 2), seed);
        run_case(&c, seed * 0x9E37 + 5, seed % 3 ? LATE : 0);
    }
}

/* Count 0: no data, the waves alone. */
static void test_count_zero(void **state)
{
    (void)state;
    for (int n = 2; n <= 6; n++)
        for (int k = 0; k < 2; k++) {
            bcase c = mk(k ? ECCL_COLL_REDUCE : ECCL_COLL_BROADCAST, n, (uint32_t)(n - 1), ECCL_F32, ECCL_SUM, 0, 0, 3);
            size_t frames = run_case(&c, (uint64_t)n, FUZZ);
            assert_int_equal(frames, (size_t)(n - 1) * (k ? 1 : 2));
        }
}

/* Restore at every stop, whole and mid-frame, of one and of three slices,
 * in and out of place, both collectives, small and large worlds. */
static void test_restore(void **state)
{
    (void)state;
    static const int worlds[][2] = {{2, 0}, {2, 1}, {3, 2}, {5, 1}, {8, 6}, {9, 4}};
    uint64_t seed = 900;
    for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; wi++)
        for (int k = 0; k < 2; k++)
            for (int in_place = 0; in_place < 2; in_place++) {
                eccl_coll_kind kind = k ? ECCL_COLL_REDUCE : ECCL_COLL_BROADCAST;
                bcase c = mk(kind, worlds[wi][0], (uint32_t)worlds[wi][1], ECCL_F32, ECCL_SUM, 29, in_place, seed++);
                restore_case(&c, 0, 0);
                restore_case(&c, seed * 13, LATE);
            }
    for (int k = 0; k < 2; k++) {
        bcase c = mk(k ? ECCL_COLL_REDUCE : ECCL_COLL_BROADCAST, 5, 3, ECCL_U8, ECCL_SUM, 2 * SLICE + 17, k, 7);
        restore_case(&c, 41, 0);
    }
}

/* The dispatcher's built-in ranges for broadcast and reduce (every line
 * of ECCL_DISPATCH_DEFAULT parses: a malformed one would be skipped with
 * only a warning), and ECCL_ALGO forcing the tree where it may run. */
static const char *forced_algo;
static int cfg_get(void *ctx, const char *name, char *buf, size_t len)
{
    (void)ctx;
    if (!forced_algo || strcmp(name, "ECCL_ALGO") != 0) return 0;
    return (size_t)snprintf(buf, len, "%s", forced_algo) < len;
}
static const eccl_config_ops cfg_ops = {sizeof cfg_ops, cfg_get};

static void test_dispatch(void **state)
{
    (void)state;
    eccl_env env = host_env();
    env.config = &cfg_ops;
    eccl_dispatch d;
    const uint32_t both = ECCL_DISPATCH_BIT(ECCL_ALGO_CHAIN) | ECCL_DISPATCH_BIT(ECCL_ALGO_BINOMIAL);
    forced_algo = NULL;
    assert_int_equal(eccl_dispatch_init(&d, &env), ECCL_OK);
    static const struct {
        eccl_coll_kind k;
        uint32_t n;
        uint64_t bytes;
        eccl_algorithm want;
    } picks[] = {
        {ECCL_COLL_BROADCAST, 2, 8, ECCL_ALGO_CHAIN},          {ECCL_COLL_BROADCAST, 2, 131072, ECCL_ALGO_CHAIN},
        {ECCL_COLL_BROADCAST, 2, 131073, ECCL_ALGO_BINOMIAL},  {ECCL_COLL_BROADCAST, 2, 524288, ECCL_ALGO_BINOMIAL},
        {ECCL_COLL_BROADCAST, 2, 524289, ECCL_ALGO_CHAIN},     {ECCL_COLL_BROADCAST, 3, 131072, ECCL_ALGO_CHAIN},
        {ECCL_COLL_BROADCAST, 3, 131073, ECCL_ALGO_BINOMIAL},  {ECCL_COLL_BROADCAST, 8, 4194304, ECCL_ALGO_BINOMIAL},
        {ECCL_COLL_BROADCAST, 8, 4194305, ECCL_ALGO_CHAIN},    {ECCL_COLL_BROADCAST, 100000, 1 << 20, ECCL_ALGO_BINOMIAL},
        {ECCL_COLL_REDUCE, 2, 262144, ECCL_ALGO_CHAIN},        {ECCL_COLL_REDUCE, 3, 8, ECCL_ALGO_BINOMIAL},
        {ECCL_COLL_REDUCE, 3, 131073, ECCL_ALGO_BINOMIAL},     {ECCL_COLL_REDUCE, 8, 2097152, ECCL_ALGO_BINOMIAL},
        {ECCL_COLL_REDUCE, 8, 2097153, ECCL_ALGO_CHAIN},       {ECCL_COLL_REDUCE, 9, 8, ECCL_ALGO_BINOMIAL},
    };
    for (size_t i = 0; i < sizeof picks / sizeof *picks; i++)
        if (eccl_dispatch_pick(&d, picks[i].k, picks[i].n, 0, picks[i].bytes, both) != picks[i].want)
            fail_msg("pick %zu: kind %d N=%u %llu bytes: not %s", i, picks[i].k, picks[i].n,
                     (unsigned long long)picks[i].bytes, eccl_dispatch_algo_name(picks[i].want));
    /* Where the tree cannot run, the chain. */
    assert_int_equal(eccl_dispatch_pick(&d, ECCL_COLL_BROADCAST, 8, 0, 1 << 20, ECCL_DISPATCH_BIT(ECCL_ALGO_CHAIN)),
                     ECCL_ALGO_CHAIN);
    eccl_dispatch_free(&d);
    forced_algo = "broadcast=binomial,reduce=chain";
    assert_int_equal(eccl_dispatch_init(&d, &env), ECCL_OK);
    assert_int_equal(eccl_dispatch_pick(&d, ECCL_COLL_BROADCAST, 8, 0, 8, both), ECCL_ALGO_BINOMIAL);
    assert_int_equal(eccl_dispatch_pick(&d, ECCL_COLL_REDUCE, 8, 0, 1 << 20, both), ECCL_ALGO_CHAIN);
    assert_int_equal(eccl_dispatch_pick(&d, ECCL_COLL_BROADCAST, 8, 0, 8, ECCL_DISPATCH_BIT(ECCL_ALGO_CHAIN)),
                     ECCL_ALGO_CHAIN);
    eccl_dispatch_free(&d);
    forced_algo = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree),
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_algo_table),
        cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_every_root),
        cmocka_unit_test(test_dtypes_ops),
        cmocka_unit_test(test_slices),
        cmocka_unit_test(test_interleavings),
        cmocka_unit_test(test_count_zero),
        cmocka_unit_test(test_restore),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
