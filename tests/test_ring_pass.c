/* The ring pass (core/coll/ring_pass.c) in one process: the N state
 * machines of one all-gather, reduce-scatter, broadcast or reduce, wired by
 * a harness that takes each DATA frame a rank queued on its link to `next`
 * and hands it to that rank through the algorithm table
 * (eccl_ring_pass_algo / eccl_chain_pass_algo) exactly as comm.c does after
 * the socket: recv, the payload copied to where recv said, recv_done. No
 * threads, no sockets: the harness alone picks the global order (round
 * robin, or seeded random choices of which rank pumps and which link
 * delivers next; a link's own frames stay FIFO, as TCP keeps them), so every
 * interleaving, stop point and malformed frame is reproducible.
 *
 * Every run checks, after every pump and every delivery, the promises
 * comm.c builds on (coll/algo.h), against a model written here from the
 * documented schedule (coll/ring_pass.h), not from the engine's code:
 *   - each frame's header, and its payload when the socket takes it (a
 *     borrowed payload must not change while queued): the block, slice,
 *     step, and, for the reduce kinds, the partial in ring order;
 *   - a frame only reaches a rank whose expects() is 1 (comm hands any
 *     other to the caller's next call of the tag), and expects() is 0 as
 *     soon as the last frame for the rank arrived: exactly when no more come;
 *   - have_full() never goes back, and turns 1 only with the final output
 *     in recvbuf (a reduce's non-root: once all its sends are queued);
 *   - complete() only once every rank has its output (N > 2: with done
 *     token N-1; N == 2 has no tokens) and no payload of ours is queued;
 *   - done token s leaves a rank only when it and the s-1 ranks before it
 *     are full;
 *   - tx/rx byte counts; guard bytes around every buffer stay untouched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <malloc.h>

#include "coll/reduce.h"
#include "coll/ring_allreduce.h" /* ECCL_RING_MAX_QUEUED: the pass queues as the ring does */
#include "coll/ring_pass.h"
#include "proto/chan.h"
#include "proto/wire.h"
#include "util/half.h"

#define MAXN 8
#define GUARD 64
/* Unlike bytes either side of sendbuf and recvbuf: a copy that overruns
 * one into the other's guard must show. */
#define SEND_GUARD 0x5a
#define RECV_GUARD 0xa5
#define SLICE ECCL_RING_PASS_SLICE_BYTES

/* ---- a host env: enough for channels and the pass ------------------------- */

static uint64_t h_now(void *ctx) { (void)ctx; return 0; }
static const eccl_clock_ops h_clock = {sizeof h_clock, h_now, NULL};
static eccl_result h_alloc(void *ctx, size_t bytes, void **out)
{
    (void)ctx;
    *out = malloc(bytes ? bytes : 1);
    return *out ? ECCL_OK : ECCL_ERR_NO_MEMORY;
}
static void h_free(void *ctx, void *p) { (void)ctx; free(p); }
static void h_copy(void *ctx, void *d, const void *s, size_t n) { (void)ctx; if (n) memmove(d, s, n); }
static void h_reduce(void *ctx, void *d, const void *s, size_t n, eccl_dtype t, eccl_op op)
{
    (void)ctx;
    eccl_reduce_into(d, s, n, t, op);
}
static void h_div(void *ctx, void *x, size_t n, eccl_dtype t, uint32_t k)
{
    (void)ctx;
    eccl_reduce_scale_div(x, n, t, k);
}
static const eccl_dev_ops h_dev = {.size = sizeof h_dev, .alloc = h_alloc, .free = h_free, .copy = h_copy,
                                   .reduce = h_reduce, .scale_div = h_div};
static void h_log(void *ctx, int level, const char *line) { (void)ctx, (void)level, (void)line; }
static const eccl_log_ops h_logops = {sizeof h_logops, h_log};

/* ---- data ------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static int is_float(eccl_dtype t) { return t >= ECCL_F16; }
static int is_signed_int(eccl_dtype t)
{
    return t == ECCL_I8 || t == ECCL_I16 || t == ECCL_I32 || t == ECCL_I64;
}

/* One little-endian element of es bytes, zero-extended (fixed-size
 * copies: this runs over megabytes). */
static uint64_t load_u(const uint8_t *p, size_t es)
{
    switch (es) {
    case 1: return *p;
    case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); return v; }
    }
}

static void store_u(uint8_t *p, size_t es, uint64_t v)
{
    switch (es) {
    case 1: *p = (uint8_t)v; break;
    case 2: { uint16_t x = (uint16_t)v; memcpy(p, &x, 2); break; }
    case 4: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
    default: memcpy(p, &v, 8); break;
    }
}

/* Inputs: random bits for integers (SUM and PROD wrap), random finite
 * values with full mantissas for floats, so that another reduction order
 * gives other bits; PROD's factors stay near 1 to stay finite. */
static void fill_input(uint8_t *buf, eccl_dtype t, eccl_op op, size_t count, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 12345;
    size_t es = eccl_dtype_size(t);
    for (size_t i = 0; i < count; i++) {
        uint64_t r = rng_next(&x);
        if (!is_float(t)) {
            store_u(buf + i * es, es, r);
            continue;
        }
        double u = (double)(r >> 11) / 9007199254740992.0; /* [0, 1) */
        double v = op == ECCL_PROD ? 0.5 + 1.5 * u : 2.0 * u - 1.0;
        if (t == ECCL_F64) {
            memcpy(buf + i * es, &v, 8);
        } else if (t == ECCL_F32) {
            float f = (float)v;
            memcpy(buf + i * es, &f, 4);
        } else {
            uint16_t h = t == ECCL_F16 ? eccl_f32_to_f16((float)v) : eccl_f32_to_bf16((float)v);
            memcpy(buf + i * es, &h, 2);
        }
    }
}

static void fill_bytes(uint8_t *buf, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0xD1B54A32D192ED03ull + 99;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t r = rng_next(&x);
        memcpy(buf + i, &r, n - i < 8 ? n - i : 8);
    }
}

/* Integer reductions written out here, one element at a time, independent
 * of core/coll/reduce.c: wrap-around SUM and PROD, signed or unsigned MIN
 * and MAX, AVG as the wrapped sum divided by n with C's truncation. */
static void naive_int_reduce(uint8_t *out, const uint8_t *const *in, int n, size_t off, size_t count,
                             eccl_dtype t, eccl_op op)
{
    size_t es = eccl_dtype_size(t);
    unsigned sh = (unsigned)(64 - 8 * es);
    int sgn = is_signed_int(t);
    for (size_t e = 0; e < count; e++) {
        uint64_t acc = load_u(in[0] + off + e * es, es);
        for (int r = 1; r < n; r++) {
            uint64_t v = load_u(in[r] + off + e * es, es);
            int64_t sa = (int64_t)(acc << sh) >> sh, sv = (int64_t)(v << sh) >> sh;
            uint64_t ua = acc << sh >> sh;
            switch (op) {
            case ECCL_SUM: case ECCL_AVG: acc = acc + v; break;
            case ECCL_PROD: acc = acc * v; break;
            case ECCL_MIN: acc = (sgn ? sv < sa : v < ua) ? v : acc; break;
            default: acc = (sgn ? sv > sa : v > ua) ? v : acc; break;
            }
        }
        if (op == ECCL_AVG) {
            if (sgn) acc = (uint64_t)(((int64_t)(acc << sh) >> sh) / (int64_t)n);
            else acc = (acc << sh >> sh) / (uint64_t)n;
        }
        store_u(out + e * es, es, acc);
    }
}

/* out = in[first] op in[first+1] op ... op in[last] (first <= last, ranks
 * taken mod n), left to right, over bytes [off, off + len): the order the
 * ring pass documents. */
static void fold(uint8_t *out, const uint8_t *const *in, int n, int first, int last, size_t off, size_t len,
                 eccl_dtype t, eccl_op op)
{
    size_t es = eccl_dtype_size(t);
    memcpy(out, in[first % n] + off, len);
    for (int r = first + 1; r <= last; r++) eccl_reduce_into(out, in[r % n] + off, len / es, t, op);
}

/* ---- one call's model ------------------------------------------------------ */

typedef struct pcase {
    eccl_coll_kind kind;
    int n;
    eccl_dtype t;
    eccl_op op;
    size_t count;
    int in_place;
    uint32_t root;
    uint64_t seed;
} pcase;

static int is_chain_kind(eccl_coll_kind k) { return k == ECCL_COLL_BROADCAST || k == ECCL_COLL_REDUCE; }

static size_t es_of(const pcase *c) { return eccl_dtype_size(c->t); }
static size_t block_of(const pcase *c) { return c->count * es_of(c); }
static size_t slice_of(const pcase *c)
{
    size_t cap = SLICE / es_of(c) * es_of(c);
    return block_of(c) < cap ? block_of(c) : cap;
}
static uint32_t nslices_of(const pcase *c)
{
    return block_of(c) ? (uint32_t)((block_of(c) + slice_of(c) - 1) / slice_of(c)) : 0;
}
static int mod(int x, int n) { return ((x % n) + n) % n; }

/* A chain's position: the broadcast starts at the root, the reduce ends there. */
static int dist_of(const pcase *c, int r)
{
    return c->kind == ECCL_COLL_BROADCAST ? mod(r - (int)c->root, c->n) : mod(r - (int)c->root - 1, c->n);
}
static uint32_t sends_of(const pcase *c, int r)
{
    if (!is_chain_kind(c->kind)) return (uint32_t)(c->n - 1) * nslices_of(c);
    return dist_of(c, r) < c->n - 1 ? nslices_of(c) : 0;
}
static uint32_t recvs_of(const pcase *c, int r)
{
    if (!is_chain_kind(c->kind)) return (uint32_t)(c->n - 1) * nslices_of(c);
    return dist_of(c, r) > 0 ? nslices_of(c) : 0;
}
static uint32_t tokens_of(const pcase *c) { return c->n > 2 ? (uint32_t)c->n - 1 : 0; }
static int has_output(const pcase *c, int r) { return c->kind != ECCL_COLL_REDUCE || (uint32_t)r == c->root; }

static uint8_t phase_of(eccl_coll_kind k)
{
    switch (k) {
    case ECCL_COLL_ALLGATHER: return ECCL_PHASE_GATHER;
    case ECCL_COLL_REDUCE_SCATTER: return ECCL_PHASE_SCATTER;
    case ECCL_COLL_BROADCAST: return ECCL_PHASE_BCAST;
    default: return ECCL_PHASE_CHAIN_REDUCE;
    }
}

static const char *kind_name(eccl_coll_kind k)
{
    static const char *const names[] = {"all-reduce", "all-gather", "reduce-scatter", "broadcast", "reduce"};
    return names[k];
}

/* The j-th DATA frame rank r sends, as ring_pass.h documents it: the
 * all-gather's step g sends block r-g, the reduce-scatter's block r-g-1
 * (its partial), the chains their one block; slice k of each. */
static void model_frame(const pcase *c, int r, uint32_t j, eccl_wire_data *w, uint32_t *blk)
{
    uint32_t ns = nslices_of(c), g = j / ns, k = j % ns;
    size_t b = block_of(c), s = slice_of(c);
    int bl = c->kind == ECCL_COLL_ALLGATHER        ? mod(r - (int)g, c->n)
             : c->kind == ECCL_COLL_REDUCE_SCATTER ? mod(r - (int)g - 1, c->n)
                                                    : 0;
    memset(w, 0, sizeof *w);
    w->phase = phase_of(c->kind);
    w->step = (uint16_t)g;
    w->offset = (uint64_t)bl * b + (size_t)k * s;
    w->len = (uint32_t)(b - (size_t)k * s < s ? b - (size_t)k * s : s);
    *blk = (uint32_t)bl;
}

/* ---- the harness ----------------------------------------------------------- */

typedef struct sim {
    eccl_env env;
    pcase c;
    int n;
    const eccl_coll_algo *alg;
    eccl_ring_pass p[MAXN];
    eccl_chan next[MAXN]; /* rank i's link to rank i+1: ring 0, all the pass sends */
    eccl_chan prev[MAXN]; /* rank i's link to rank i-1: must stay empty */
    uint8_t *scratch[MAXN], *backup[MAXN];
    /* Buffers: each region GUARD bytes past both ends of what the call sees. */
    uint8_t *send_reg[MAXN], *recv_reg[MAXN];
    size_t send_len[MAXN], recv_len[MAXN];
    const uint8_t *send[MAXN];
    uint8_t *recv[MAXN];
    uint8_t *orig_send[MAXN], *orig_recv[MAXN]; /* the regions before the call */
    const uint8_t *in[MAXN]; /* each rank's contribution, kept aside (cd) */
    const uint8_t *want[MAXN]; /* the output each rank must end with (cd) */
    uint8_t *payload, *tmp;
    /* The schedule: 0 round robin, else a xorshift state. */
    uint64_t rng;
    size_t frames;        /* delivered */
    /* Stopping at frame `stop`: mid != 0 stops between recv and recv_done
     * with half the payload landed, as a link dying mid-frame leaves it. */
    size_t stop;
    int mid;
    /* Malformed variants of every frame are tried before it is delivered. */
    int fuzz;
    size_t rejected;      /* variants refused (with the state untouched) */
    /* What the observer saw. */
    uint32_t q_seen[MAXN];            /* frames of next[i] already inspected */
    uint32_t data_q[MAXN], tok_q[MAXN];   /* queued by rank i */
    uint32_t data_out[MAXN];              /* of rank i's, delivered */
    uint32_t data_rx[MAXN], tok_rx[MAXN]; /* delivered to rank i */
    eccl_wire_data last_rx[MAXN];         /* the last data frame rank i took */
    int has_last_rx[MAXN];
    int full[MAXN], done[MAXN];
    int tokens_seen;
} sim;

static size_t with_guards(size_t x) { return x + GUARD * 2; }

/* One region: `len` bytes the call sees, guards on both sides. */
static uint8_t *region(size_t len, uint8_t **reg, size_t *reg_len, uint8_t guard)
{
    *reg_len = with_guards(len);
    *reg = malloc(*reg_len);
    assert_non_null(*reg);
    memset(*reg, guard, *reg_len);
    return *reg + GUARD;
}

/* Each rank's contribution, what its output buffer held before, and the
 * output it must end with, for the last case asked: restore tests run one
 * case once per stop point, and generating these dominated their time. */
static struct {
    int valid;
    pcase c;
    uint8_t *in[MAXN], *old[MAXN], *want[MAXN];
} cd;

static int same_case(const pcase *a, const pcase *b)
{
    return a->kind == b->kind && a->n == b->n && a->t == b->t && a->op == b->op && a->count == b->count &&
           a->root == b->root && a->seed == b->seed;
}

static void case_data_free(void)
{
    for (int r = 0; r < MAXN; r++) {
        free(cd.in[r]);
        free(cd.old[r]);
        free(cd.want[r]);
        cd.in[r] = cd.old[r] = cd.want[r] = NULL;
    }
    cd.valid = 0;
}

static void case_data(const pcase *c)
{
    if (cd.valid && same_case(&cd.c, c)) return;
    case_data_free();
    int n = c->n;
    size_t b = block_of(c), out_len = c->kind == ECCL_COLL_ALLGATHER ? n * b : b;
    for (int r = 0; r < n; r++) {
        size_t in_len = c->kind == ECCL_COLL_REDUCE_SCATTER ? n * b : b;
        cd.in[r] = malloc(in_len + 1);
        cd.old[r] = malloc(out_len + 1);
        assert_true(cd.in[r] && cd.old[r]);
        fill_input(cd.in[r], c->t, c->op, in_len / es_of(c), c->seed * 131 + (uint64_t)r);
        fill_bytes(cd.old[r], out_len, c->seed * 7 + (uint64_t)r);
    }
    /* The outputs: the integers' by the independent loop, the floats' by
     * the kernels in the documented order (which fixes their bits). */
    const uint8_t *const *in = (const uint8_t *const *)cd.in;
    for (int r = 0; r < n; r++) {
        if (!has_output(c, r)) continue;
        cd.want[r] = malloc(out_len + 1);
        assert_non_null(cd.want[r]);
        switch (c->kind) {
        case ECCL_COLL_ALLGATHER:
            for (int x = 0; x < n; x++) memcpy(cd.want[r] + x * b, cd.in[x], b);
            break;
        case ECCL_COLL_BROADCAST: memcpy(cd.want[r], cd.in[c->root], b); break;
        default: {
            /* reduce-scatter: block r from rank r+1 round to r; reduce: the
             * whole buffer from root+1 round to root */
            size_t off = c->kind == ECCL_COLL_REDUCE_SCATTER ? (size_t)r * b : 0;
            if (!is_float(c->t)) {
                naive_int_reduce(cd.want[r], in, n, off, c->count, c->t, c->op);
                break;
            }
            if (b) fold(cd.want[r], in, n, r + 1, r + n, off, b, c->t, c->op);
            if (c->op == ECCL_AVG) eccl_reduce_scale_div(cd.want[r], c->count, c->t, (uint32_t)n);
            break;
        }
        }
    }
    cd.c = *c;
    cd.valid = 1;
}

static void sim_setup_buffers(sim *s)
{
    const pcase *c = &s->c;
    int n = c->n;
    size_t b = block_of(c);
    case_data(c);
    for (int r = 0; r < n; r++) {
        s->in[r] = cd.in[r];
        s->want[r] = cd.want[r];
        s->send[r] = NULL;
        s->recv[r] = NULL;
        switch (c->kind) {
        case ECCL_COLL_ALLGATHER:
            s->recv[r] = region(n * b, &s->recv_reg[r], &s->recv_len[r], RECV_GUARD);
            memcpy(s->recv[r], cd.old[r], n * b);
            if (c->in_place) {
                s->send[r] = s->recv[r] + r * b;
            } else {
                s->send[r] = region(b, &s->send_reg[r], &s->send_len[r], SEND_GUARD);
            }
            memcpy((uint8_t *)s->send[r], s->in[r], b);
            break;
        case ECCL_COLL_REDUCE_SCATTER:
            s->send[r] = region(n * b, &s->send_reg[r], &s->send_len[r], SEND_GUARD);
            memcpy((uint8_t *)s->send[r], s->in[r], n * b);
            if (c->in_place) {
                s->recv[r] = (uint8_t *)s->send[r] + r * b;
            } else {
                s->recv[r] = region(b, &s->recv_reg[r], &s->recv_len[r], RECV_GUARD);
                memcpy(s->recv[r], cd.old[r], b);
            }
            break;
        case ECCL_COLL_BROADCAST:
            s->recv[r] = region(b, &s->recv_reg[r], &s->recv_len[r], RECV_GUARD);
            memcpy(s->recv[r], cd.old[r], b);
            if ((uint32_t)r == c->root) {
                if (c->in_place) s->send[r] = s->recv[r];
                else s->send[r] = region(b, &s->send_reg[r], &s->send_len[r], SEND_GUARD);
                memcpy((uint8_t *)s->send[r], s->in[r], b);
            } /* else NULL: the broadcast never reads it off the root */
            break;
        default: /* reduce */
            s->send[r] = region(b, &s->send_reg[r], &s->send_len[r], SEND_GUARD);
            memcpy((uint8_t *)s->send[r], s->in[r], b);
            if ((uint32_t)r == c->root) {
                if (c->in_place) {
                    s->recv[r] = (uint8_t *)s->send[r];
                } else {
                    s->recv[r] = region(b, &s->recv_reg[r], &s->recv_len[r], RECV_GUARD);
                    memcpy(s->recv[r], cd.old[r], b);
                }
            } /* else NULL: nothing may be written there */
            break;
        }
        if (s->send_reg[r]) {
            s->orig_send[r] = malloc(s->send_len[r]);
            assert_non_null(s->orig_send[r]);
            memcpy(s->orig_send[r], s->send_reg[r], s->send_len[r]);
        }
        if (s->recv_reg[r]) {
            s->orig_recv[r] = malloc(s->recv_len[r]);
            assert_non_null(s->orig_recv[r]);
            memcpy(s->orig_recv[r], s->recv_reg[r], s->recv_len[r]);
        }
    }
}

static void sim_init(sim *s, const pcase *c, uint64_t sched_seed)
{
    memset(s, 0, sizeof *s);
    s->c = *c;
    s->n = c->n;
    s->env.clock = &h_clock;
    s->env.dev = &h_dev;
    s->env.log = &h_logops;
    s->alg = is_chain_kind(c->kind) ? &eccl_chain_pass_algo : &eccl_ring_pass_algo;
    s->rng = sched_seed;
    s->stop = SIZE_MAX;
    s->payload = malloc(SLICE + 64);
    s->tmp = malloc(SLICE + 64);
    assert_true(s->payload && s->tmp);
    sim_setup_buffers(s);
    for (int r = 0; r < s->n; r++) {
        eccl_coll_call call = {.env = &s->env, .kind = c->kind, .root = c->root, .tag = 77, .epoch = 3,
                               .sendbuf = s->send[r], .recvbuf = s->recv[r], .count = c->count,
                               .dtype = c->t, .op = c->op, .rank = (uint32_t)r, .nranks = (uint32_t)s->n};
        size_t sb = eccl_ring_pass_scratch_bytes(&call), ob = eccl_ring_pass_output_bytes(&call);
        /* What the layout needs: partials of every block (reduce-scatter)
         * or of the buffer (reduce); a backup of every output byte. */
        size_t want_sb = c->kind == ECCL_COLL_REDUCE_SCATTER ? s->n * block_of(c)
                         : c->kind == ECCL_COLL_REDUCE      ? block_of(c)
                                                            : 0;
        size_t want_ob = !has_output(c, r) ? 0 : c->kind == ECCL_COLL_ALLGATHER ? s->n * block_of(c) : block_of(c);
        assert_int_equal(sb, want_sb);
        assert_int_equal(ob, want_ob);
        if (sb) assert_non_null(s->scratch[r] = malloc(sb));
        if (ob) assert_non_null(s->backup[r] = malloc(ob));
        eccl_ring_pass_init(&s->p[r], &call, s->scratch[r], s->backup[r]);
        assert_int_equal(eccl_chan_init(&s->next[r], &s->env, NULL, 64), ECCL_OK);
        assert_int_equal(eccl_chan_init(&s->prev[r], &s->env, NULL, 64), ECCL_OK);
    }
}

static void sim_fini(sim *s)
{
    for (int r = 0; r < s->n; r++) {
        eccl_chan_close(&s->next[r]);
        eccl_chan_close(&s->prev[r]);
        free(s->scratch[r]);
        free(s->backup[r]);
        free(s->send_reg[r]);
        free(s->recv_reg[r]);
        free(s->orig_send[r]);
        free(s->orig_recv[r]);
    }
    free(s->payload);
    free(s->tmp);
}

static void decode_frame(const eccl_frame *f, eccl_wire_data *w)
{
    eccl_wire_header h;
    assert_int_equal(eccl_wire_header_decode(f->head, &h), ECCL_OK);
    assert_int_equal(h.type, ECCL_MSG_DATA);
    assert_int_equal(eccl_wire_data_decode(f->head + ECCL_WIRE_HEADER_SIZE, h.length, w), ECCL_OK);
    assert_int_equal(f->payload_len, w->len);
}

/* Takes the head frame off a channel as if the socket had written it. */
static void pop_frame(eccl_chan *ch)
{
    eccl_frame *f = ch->out_head;
    ch->out_head = f->next;
    if (!ch->out_head) ch->out_tail = NULL;
    ch->queued_bytes -= f->head_len + f->payload_len;
    if (f->inflight) (*f->inflight)--;
    f->inflight = NULL;
    f->next = ch->free_frames;
    ch->free_frames = f;
}

static int is_full(sim *s, int r) { return s->alg->have_full(&s->p[r]); }

/* Frames rank i queued since the last look: tokens are checked here, when
 * they are sent (a token must never claim more than is true). */
static void inspect_queued(sim *s, int i)
{
    uint32_t k = 0;
    for (const eccl_frame *f = s->next[i].out_head; f; f = f->next, k++) {
        if (k < s->q_seen[i]) continue;
        eccl_wire_data w;
        decode_frame(f, &w);
        assert_int_equal(w.tag, 77);
        assert_int_equal(w.epoch, 3);
        if (w.phase != ECCL_PHASE_DONE) {
            s->data_q[i]++;
            if (s->data_q[i] > sends_of(&s->c, i))
                fail_msg("rank %d queued %u data frames, %u expected", i, s->data_q[i], sends_of(&s->c, i));
            continue;
        }
        s->tokens_seen = 1;
        if (s->n == 2) fail_msg("rank %d sent a done token with two ranks", i);
        assert_int_equal(w.len, 0);
        assert_int_equal(w.ring, 0);
        assert_int_equal(w.step, s->tok_q[i] + 1);
        assert_true(w.step <= s->n - 1);
        /* Token s: the sender and the s-1 ranks before it hold their output. */
        for (int back = 0; back < w.step; back++)
            if (!is_full(s, mod(i - back, s->n)))
                fail_msg("rank %d sent token %u while rank %d is not full", i, w.step, mod(i - back, s->n));
        s->tok_q[i]++;
    }
    s->q_seen[i] = k;
}

/* The output region of rank r (NULL: none). */
static const uint8_t *out_of(const sim *s, int r, size_t *len)
{
    *len = s->c.kind == ECCL_COLL_ALLGATHER ? s->n * block_of(&s->c) : block_of(&s->c);
    return has_output(&s->c, r) ? s->recv[r] : NULL;
}

static void expect_bytes(sim *s, int r)
{
    uint64_t tx = 0, rx = 0;
    s->alg->bytes(&s->p[r], &tx, &rx);
    size_t b = block_of(&s->c);
    uint64_t want_tx = is_chain_kind(s->c.kind) ? (sends_of(&s->c, r) ? b : 0) : (uint64_t)(s->n - 1) * b;
    uint64_t want_rx = is_chain_kind(s->c.kind) ? (recvs_of(&s->c, r) ? b : 0) : (uint64_t)(s->n - 1) * b;
    if (tx != want_tx || rx != want_rx)
        fail_msg("rank %d of %d (%s): tx %llu rx %llu, expected %llu %llu", r, s->n, kind_name(s->c.kind),
                 (unsigned long long)tx, (unsigned long long)rx, (unsigned long long)want_tx,
                 (unsigned long long)want_rx);
}

/* The promises of coll/algo.h, checked after every event. */
static void observe(sim *s)
{
    const pcase *c = &s->c;
    for (int r = 0; r < s->n; r++) {
        const void *op = &s->p[r];
        int f = s->alg->have_full(op);
        if (s->full[r] && !f) fail_msg("rank %d: have_full went back to 0", r);
        if (f && !s->full[r]) {
            size_t len;
            const uint8_t *out = out_of(s, r, &len);
            if (out && memcmp(out, s->want[r], len) != 0)
                fail_msg("rank %d of %d (%s): have_full with an output that is not final", r, s->n,
                         kind_name(c->kind));
            if (!out && s->data_q[r] != sends_of(c, r))
                fail_msg("rank %d (no output) full with %u of %u sends queued", r, s->data_q[r], sends_of(c, r));
            s->full[r] = 1;
        }
        for (int role = 0; role < ECCL_ROLE_COUNT; role++)
            if (role != ECCL_ROLE_PREV && s->alg->expects(op, role))
                fail_msg("rank %d expects frames in role %d: the pass receives from prev only", r, role);
        uint32_t left = (recvs_of(c, r) - s->data_rx[r]) + (tokens_of(c) - s->tok_rx[r]);
        int e = s->alg->expects(op, ECCL_ROLE_PREV);
        if (e != (left > 0))
            fail_msg("rank %d of %d (%s): expects %d with %u frames still to come", r, s->n, kind_name(c->kind), e,
                     left);
        if (!s->done[r] && s->alg->complete(&s->p[r])) {
            s->done[r] = 1;
            if (!f) fail_msg("rank %d complete without its own output", r);
            /* N == 2 has no completion round: a loss leaves one survivor. */
            if (s->n > 2)
                for (int x = 0; x < s->n; x++)
                    if (!is_full(s, x)) fail_msg("rank %d complete while rank %d is not full", r, x);
            for (const eccl_frame *q = s->next[r].out_head; q; q = q->next)
                if (q->payload_len) fail_msg("rank %d complete with a payload still queued", r);
            assert_int_equal(s->data_q[r], sends_of(c, r));
            assert_int_equal(s->tok_q[r], tokens_of(c));
            assert_int_equal(s->tok_rx[r], tokens_of(c));
            expect_bytes(s, r);
        }
    }
}

static void pump(sim *s, int i)
{
    if (s->done[i]) return; /* comm retires an op once complete */
    eccl_chan *l[ECCL_ROLE_COUNT] = {0};
    l[ECCL_ROLE_PREV] = &s->prev[i];
    l[ECCL_ROLE_NEXT] = &s->next[i];
    assert_int_equal(s->alg->pump(&s->p[i], l), ECCL_OK);
    if (s->prev[i].out_head) fail_msg("rank %d sent towards prev: the pass runs ring 0 only", i);
    inspect_queued(s, i);
    observe(s);
}

/* The payload frame j of rank i must carry when the socket takes it. */
static const uint8_t *model_payload(sim *s, int i, const eccl_wire_data *w, uint32_t blk)
{
    const pcase *c = &s->c;
    size_t k_off = (size_t)w->offset - (size_t)blk * block_of(c);
    switch (c->kind) {
    case ECCL_COLL_ALLGATHER: return s->in[blk] + k_off;
    case ECCL_COLL_BROADCAST: return s->in[c->root] + k_off;
    default: {
        /* A partial: the chain from its first rank to the sender, in order. */
        int first = c->kind == ECCL_COLL_REDUCE_SCATTER ? (int)blk + 1 : (int)c->root + 1;
        int last = first + mod(i - first, s->n);
        fold(s->tmp, (const uint8_t *const *)s->in, s->n, first, last, w->offset, w->len, c->t, c->op);
        return s->tmp;
    }
    }
}

static void check_sent_frame(sim *s, int i, const eccl_wire_data *w, const uint8_t *payload)
{
    eccl_wire_data m;
    uint32_t blk;
    if (s->data_out[i] >= sends_of(&s->c, i)) fail_msg("rank %d sent more data frames than it should", i);
    model_frame(&s->c, i, s->data_out[i], &m, &blk);
    if (w->phase != m.phase || w->step != m.step || w->offset != m.offset || w->len != m.len || w->flags ||
        w->ring)
        fail_msg("rank %d frame %u: phase %u step %u offset %llu len %u flags %u ring %u; expected phase %u step "
                 "%u offset %llu len %u",
                 i, s->data_out[i], w->phase, w->step, (unsigned long long)w->offset, w->len, w->flags, w->ring,
                 m.phase, m.step, (unsigned long long)m.offset, m.len);
    assert_non_null(payload);
    if (memcmp(payload, model_payload(s, i, w, blk), w->len) != 0)
        fail_msg("rank %d of %d (%s %s %s) frame %u (block %u): payload differs from the model", i, s->n,
                 kind_name(s->c.kind), eccl_dtype_name(s->c.t), eccl_op_name(s->c.op), s->data_out[i], blk);
    s->data_out[i]++;
}

/* Malformed variants of the frame `w` about to reach rank `to`: each must
 * be refused with ECCL_ERR_PROTOCOL, leaving the state machine as it was
 * (comm then drops the link and the op fails: restore must still work). */
static void try_bad(sim *s, int to, int role, const eccl_wire_data *w)
{
    eccl_ring_pass before;
    memcpy(&before, &s->p[to], sizeof before);
    void *dst = (void *)&dst;
    eccl_result rc = s->alg->recv(&s->p[to], role, w, &dst);
    if (rc != ECCL_ERR_PROTOCOL)
        fail_msg("rank %d of %d (%s): malformed frame (role %d ring %u phase %u step %u offset %llu len %u "
                 "flags %u) got %s",
                 to, s->n, kind_name(s->c.kind), role, w->ring, w->phase, w->step, (unsigned long long)w->offset,
                 w->len, w->flags, eccl_strerror(rc));
    if (memcmp(&before, &s->p[to], sizeof before) != 0) fail_msg("rank %d: a refused frame changed the state", to);
    s->rejected++;
}

static void fuzz_frame(sim *s, int to, const eccl_wire_data *good, const eccl_frame *second)
{
    const pcase *c = &s->c;
    size_t es = es_of(c);
    eccl_wire_data w;
#define BAD(stmt)                                  \
    do {                                           \
        w = *good;                                 \
        stmt;                                      \
        try_bad(s, to, ECCL_ROLE_PREV, &w);        \
    } while (0)
    /* The wrong role: the ring pass hears from prev alone. */
    for (int role = ECCL_ROLE_NEXT; role < ECCL_ROLE_COUNT; role++) try_bad(s, to, role, good);
    BAD(w.ring = 1);
    if (good->phase == ECCL_PHASE_DONE) {
        BAD(w.step++);                      /* skips a token */
        BAD(w.step--);                      /* repeats one, or token 0 */
        BAD(w.step = (uint16_t)s->n);       /* beyond N-1 */
        BAD(w.len = (uint32_t)es);          /* tokens carry nothing */
        BAD(w.phase = phase_of(c->kind));   /* a token dressed as data */
    } else {
        static const uint8_t phases[] = {ECCL_PHASE_REDUCE_SCATTER, ECCL_PHASE_ALL_GATHER, ECCL_PHASE_DONE,
                                         ECCL_PHASE_EXCHANGE, ECCL_PHASE_TREE_UP, ECCL_PHASE_TREE_DOWN,
                                         ECCL_PHASE_GATHER, ECCL_PHASE_SCATTER, ECCL_PHASE_BCAST,
                                         ECCL_PHASE_CHAIN_REDUCE};
        for (size_t i = 0; i < sizeof phases; i++)
            if (phases[i] != good->phase) BAD(w.phase = phases[i]); /* another collective's frame */
        BAD(w.step++);
        if (good->step) BAD(w.step--);
        BAD(w.offset += es);
        if (good->offset) BAD(w.offset -= es);
        BAD(w.offset += block_of(c));       /* another block */
        BAD(w.offset += 1ull << 40);
        BAD(w.len -= (uint32_t)es);
        BAD(w.len += (uint32_t)es);
        BAD(w.len = 0);
        BAD(w.flags = ECCL_WIRE_DATA_QUANT); /* the pass never carries codes */
        BAD(w.flags = ECCL_WIRE_DATA_BULK);
        /* The frame after it, first: FIFO broken. */
        if (second) {
            eccl_wire_data w2;
            decode_frame(second, &w2);
            if (w2.phase != ECCL_PHASE_DONE) try_bad(s, to, ECCL_ROLE_PREV, &w2);
        }
    }
    /* The frame the rank took last, again. */
    if (s->has_last_rx[to]) try_bad(s, to, ECCL_ROLE_PREV, &s->last_rx[to]);
    /* A token with two ranks, where there is no completion round. */
    if (s->n == 2) BAD((w.phase = ECCL_PHASE_DONE, w.step = 1, w.len = 0, w.offset = 0));
    /* Data to every rank that receives none (the chain's first rank). */
    for (int r = 0; r < s->n; r++) {
        if (recvs_of(c, r) || !block_of(c)) continue;
        eccl_wire_data d = {.tag = 77, .epoch = 3, .phase = phase_of(c->kind), .step = 0, .offset = 0,
                            .len = (uint32_t)slice_of(c)};
        try_bad(s, r, ECCL_ROLE_PREV, &d);
    }
#undef BAD
}

/* Delivers the head frame of rank i's link to rank i+1. ECCL_ERR_AGAIN:
 * stopped mid-frame (s->mid). */
static eccl_result deliver(sim *s, int i)
{
    eccl_chan *ch = &s->next[i];
    const eccl_frame *f = ch->out_head;
    eccl_wire_data w;
    decode_frame(f, &w);
    int to = (i + 1) % s->n;
    if (w.phase != ECCL_PHASE_DONE) check_sent_frame(s, i, &w, f->payload);
    if (w.len) memcpy(s->payload, f->payload, w.len);
    if (s->fuzz) fuzz_frame(s, to, &w, f->next);
    pop_frame(ch);
    s->q_seen[i]--;
    s->frames++;
    /* comm hands a frame to the op only while it expects one. */
    if (!s->alg->expects(&s->p[to], ECCL_ROLE_PREV)) fail_msg("rank %d got a frame it does not expect", to);
    void *dst = NULL;
    eccl_result rc = s->alg->recv(&s->p[to], ECCL_ROLE_PREV, &w, &dst);
    if (rc != ECCL_OK)
        fail_msg("rank %d refused a well-formed frame (phase %u step %u offset %llu len %u): %s", to, w.phase,
                 w.step, (unsigned long long)w.offset, w.len, eccl_strerror(rc));
    if (w.len) {
        assert_non_null(dst);
        if (s->mid && s->frames == s->stop) {
            memcpy(dst, s->payload, w.len / 2);
            memset((uint8_t *)dst + w.len / 2, 0xee, w.len - w.len / 2);
            return ECCL_ERR_AGAIN;
        }
        memcpy(dst, s->payload, w.len);
    } else {
        assert_null(dst);
    }
    assert_int_equal(s->alg->recv_done(&s->p[to], ECCL_ROLE_PREV, &w), ECCL_OK);
    if (w.phase == ECCL_PHASE_DONE) {
        s->tok_rx[to]++;
    } else {
        s->data_rx[to]++;
        s->last_rx[to] = w;
        s->has_last_rx[to] = 1;
    }
    observe(s);
    return ECCL_OK;
}

static int all_done(const sim *s)
{
    for (int r = 0; r < s->n; r++)
        if (!s->done[r]) return 0;
    return 1;
}

static int nonempty_links(const sim *s, int *out)
{
    int m = 0;
    for (int i = 0; i < s->n; i++)
        if (s->next[i].out_head) out[m++] = i;
    return m;
}

/* Runs until every rank completes (ECCL_OK) or frame s->stop is reached
 * (ECCL_ERR_AGAIN: that many frames were delivered, the last one whole
 * unless s->mid). */
static eccl_result sim_run(sim *s)
{
    int links[MAXN];
    for (;;) {
        if (all_done(s)) {
            for (int i = 0; i < s->n; i++)
                if (s->next[i].out_head) fail_msg("every rank complete with frames left on rank %d's link", i);
            return ECCL_OK;
        }
        int m = nonempty_links(s, links);
        if (s->rng == 0 || m == 0) {
            /* Random orders pump from a random rank on and stop at the
             * first that sends, so a rank may take frames before its first
             * pump: comm replays frames that came before the call so. */
            int from = s->rng ? (int)(rng_next(&s->rng) % (uint64_t)s->n) : 0;
            for (int j = 0; j < s->n && (!s->rng || !nonempty_links(s, links)); j++) pump(s, (from + j) % s->n);
            m = nonempty_links(s, links);
            if (m == 0 && all_done(s)) continue; /* nothing to send at all (count 0, N == 2) */
            if (m == 0) fail_msg("stuck: no frame queued and not every rank complete");
            if (s->rng) continue;
            for (int j = 0; j < m; j++) {
                if (s->frames >= s->stop) return ECCL_ERR_AGAIN;
                eccl_result rc = deliver(s, links[j]);
                if (rc != ECCL_OK) return rc;
            }
            continue;
        }
        uint64_t x = rng_next(&s->rng);
        if (x % 4 == 0) {
            pump(s, (int)((x >> 8) % (uint64_t)s->n));
        } else {
            if (s->frames >= s->stop) return ECCL_ERR_AGAIN;
            eccl_result rc = deliver(s, links[(x >> 8) % (uint64_t)m]);
            if (rc != ECCL_OK) return rc;
        }
    }
}

static void check_guards(const sim *s, int r)
{
    const uint8_t *regs[2] = {s->send_reg[r], s->recv_reg[r]};
    const size_t lens[2] = {s->send_len[r], s->recv_len[r]};
    const uint8_t guard[2] = {SEND_GUARD, RECV_GUARD};
    for (int k = 0; k < 2; k++) {
        if (!regs[k]) continue;
        for (size_t i = 0; i < GUARD; i++)
            if (regs[k][i] != guard[k] || regs[k][lens[k] - 1 - i] != guard[k])
                fail_msg("rank %d: a byte next to its %s buffer was written", r, k ? "recv" : "send");
    }
}

/* After a run: every output, the inputs untouched, byte counts. */
static void check_results(sim *s)
{
    const pcase *c = &s->c;
    size_t b = block_of(c);
    for (int r = 0; r < s->n; r++) {
        size_t len;
        const uint8_t *out = out_of(s, r, &len);
        if (out && memcmp(out, s->want[r], len) != 0) {
            size_t es = es_of(c), e = 0;
            while (memcmp(out + e * es, s->want[r] + e * es, es) == 0) e++;
            fail_msg("%s n=%d root=%u %s %s count=%zu in_place=%d: rank %d element %zu wrong", kind_name(c->kind),
                     s->n, c->root, eccl_dtype_name(c->t), eccl_op_name(c->op), c->count, c->in_place, r, e);
        }
        check_guards(s, r);
        /* sendbuf is never written, but for the block of it that is the
         * output in place (already checked above). */
        if (s->send_reg[r]) {
            size_t skip_at = SIZE_MAX;
            if (c->in_place && c->kind == ECCL_COLL_REDUCE_SCATTER) skip_at = GUARD + (size_t)r * b;
            if (c->in_place && c->kind == ECCL_COLL_REDUCE && (uint32_t)r == c->root) skip_at = GUARD;
            size_t len1 = skip_at < s->send_len[r] ? skip_at : s->send_len[r];
            size_t from2 = skip_at < s->send_len[r] ? skip_at + b : s->send_len[r];
            if (memcmp(s->send_reg[r], s->orig_send[r], len1) != 0 ||
                memcmp(s->send_reg[r] + from2, s->orig_send[r] + from2, s->send_len[r] - from2) != 0)
                fail_msg("%s n=%d in_place=%d: rank %d's sendbuf was written", kind_name(c->kind), s->n,
                         c->in_place, r);
        }
        expect_bytes(s, r);
        assert_true(s->full[r] && s->done[r]);
        assert_false(s->alg->expects(&s->p[r], ECCL_ROLE_PREV));
    }
    if (s->n == 2) assert_false(s->tokens_seen);
}

/* Every rank's restore: recvbuf (and sendbuf) bit for bit as before. */
static void restore_all(sim *s)
{
    for (int r = 0; r < s->n; r++) s->alg->restore(&s->p[r]);
    for (int r = 0; r < s->n; r++) {
        if (s->recv_reg[r] && memcmp(s->recv_reg[r], s->orig_recv[r], s->recv_len[r]) != 0)
            fail_msg("%s n=%d root=%u count=%zu in_place=%d, stopped at frame %zu%s: rank %d recvbuf not restored",
                     kind_name(s->c.kind), s->n, s->c.root, s->c.count, s->c.in_place, s->frames,
                     s->mid ? " mid-frame" : "", r);
        if (s->send_reg[r] && memcmp(s->send_reg[r], s->orig_send[r], s->send_len[r]) != 0)
            fail_msg("%s n=%d count=%zu in_place=%d, stopped at frame %zu: rank %d sendbuf not as before",
                     kind_name(s->c.kind), s->n, s->c.count, s->c.in_place, s->frames, r);
    }
}

/* One whole call; returns the frames it took. */
static size_t run_case(const pcase *c, uint64_t sched_seed, int fuzz)
{
    sim *s = malloc(sizeof *s);
    assert_non_null(s);
    sim_init(s, c, sched_seed);
    s->fuzz = fuzz;
    assert_int_equal(sim_run(s), ECCL_OK);
    check_results(s);
    if (fuzz && nslices_of(c)) assert_true(s->rejected > 0);
    /* Every frame expected: one more is refused, whatever it is. */
    for (int r = 0; r < s->n; r++) {
        if (s->has_last_rx[r]) try_bad(s, r, ECCL_ROLE_PREV, &s->last_rx[r]);
        eccl_wire_data t = {.tag = 77, .epoch = 3, .phase = ECCL_PHASE_DONE, .step = (uint16_t)s->n};
        try_bad(s, r, ECCL_ROLE_PREV, &t);
        t.step = (uint16_t)(s->n - 1);
        try_bad(s, r, ECCL_ROLE_PREV, &t);
    }
    size_t frames = s->frames;
    sim_fini(s);
    free(s);
    return frames;
}

static const eccl_coll_kind kinds[] = {ECCL_COLL_ALLGATHER, ECCL_COLL_REDUCE_SCATTER, ECCL_COLL_BROADCAST,
                                       ECCL_COLL_REDUCE};
static const int ns[] = {2, 3, 5, 8};
#define NK (sizeof kinds / sizeof *kinds)
#define NN (sizeof ns / sizeof *ns)

/* Roots to try: all of a small world, the ends and the middle of a big one. */
static int roots_of(int n, uint32_t *out)
{
    if (n <= 3) {
        for (int r = 0; r < n; r++) out[r] = (uint32_t)r;
        return n;
    }
    out[0] = 0;
    out[1] = (uint32_t)n / 2;
    out[2] = (uint32_t)n - 1;
    return 3;
}

/* ---- tests ------------------------------------------------------------------ */

/* The reference itself: the kernel's fold agrees with the independent
 * integer loop (else the integer checks would prove nothing of the floats'). */
static void test_reference(void **state)
{
    (void)state;
    enum { C = 37, R = 5 };
    static const eccl_dtype ts[] = {ECCL_I8, ECCL_U16, ECCL_I32, ECCL_U64};
    for (size_t ti = 0; ti < sizeof ts / sizeof *ts; ti++)
        for (int op = 0; op < ECCL_OP_COUNT; op++) {
            uint8_t *in[R], a[C * 8], b[C * 8];
            for (int r = 0; r < R; r++) {
                in[r] = malloc(C * 8);
                fill_input(in[r], ts[ti], (eccl_op)op, C, (uint64_t)r);
            }
            naive_int_reduce(a, (const uint8_t *const *)in, R, 0, C, ts[ti], (eccl_op)op);
            fold(b, (const uint8_t *const *)in, R, 2, 2 + R - 1, 0, C * eccl_dtype_size(ts[ti]), ts[ti],
                 (eccl_op)op);
            if (op == ECCL_AVG) eccl_reduce_scale_div(b, C, ts[ti], R);
            assert_memory_equal(a, b, C * eccl_dtype_size(ts[ti]));
            for (int r = 0; r < R; r++) free(in[r]);
        }
    /* Order matters for floats: a check of it is a check of something. */
    uint8_t *in[R], a[C * 4], b[C * 4];
    for (int r = 0; r < R; r++) {
        in[r] = malloc(C * 4);
        fill_input(in[r], ECCL_F32, ECCL_SUM, C, (uint64_t)r);
    }
    fold(a, (const uint8_t *const *)in, R, 0, R - 1, 0, C * 4, ECCL_F32, ECCL_SUM);
    fold(b, (const uint8_t *const *)in, R, 1, R, 0, C * 4, ECCL_F32, ECCL_SUM);
    assert_true(memcmp(a, b, sizeof a) != 0);
    for (int r = 0; r < R; r++) free(in[r]);
}

static void test_algo_table(void **state)
{
    (void)state;
    const eccl_coll_algo *a[2] = {&eccl_ring_pass_algo, &eccl_chain_pass_algo};
    assert_int_equal(a[0]->id, ECCL_ALGO_RING);
    assert_int_equal(a[1]->id, ECCL_ALGO_CHAIN);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(a[i]->roles, ECCL_ROLES_RING);
        assert_int_equal(a[i]->pump_needs, ECCL_ROLE_BIT(ECCL_ROLE_NEXT));
        assert_true(a[i]->pump && a[i]->recv && a[i]->recv_done && a[i]->complete && a[i]->expects &&
                    a[i]->have_full && a[i]->restore && a[i]->error && a[i]->bytes);
    }
}

/* Every kind, world, dtype and op on small blocks (0, 1 and 7 elements),
 * in and out of place, several roots, each under its own random order. */
static void test_exact_small(void **state)
{
    (void)state;
    static const size_t counts[] = {0, 1, 7};
    uint64_t seed = 1;
    for (size_t ki = 0; ki < NK; ki++)
        for (size_t ni = 0; ni < NN; ni++)
            for (int t = 0; t < ECCL_DTYPE_COUNT; t++)
                for (int op = 0; op < ECCL_OP_COUNT; op++) {
                    /* The copying kinds have no op: one pass is enough. */
                    if (op && (kinds[ki] == ECCL_COLL_ALLGATHER || kinds[ki] == ECCL_COLL_BROADCAST)) continue;
                    uint32_t roots[MAXN];
                    int nr = is_chain_kind(kinds[ki]) ? roots_of(ns[ni], roots) : 1;
                    if (!is_chain_kind(kinds[ki])) roots[0] = 0;
                    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++)
                        for (int ip = 0; ip < 2; ip++)
                            for (int ri = 0; ri < nr; ri++) {
                                pcase c = {kinds[ki], ns[ni], (eccl_dtype)t, (eccl_op)op, counts[ci], ip,
                                           roots[ri], seed};
                                /* Alternate round robin and random orders. */
                                run_case(&c, seed % 2 ? seed * 2654435761u : 0, 0);
                                seed++;
                            }
                }
}

/* Blocks of several 1 MiB slices, one a whole multiple of the slice and
 * others not, so the pipeline overlaps steps and the last slice is short. */
static void test_multislice(void **state)
{
    (void)state;
    static const struct {
        eccl_dtype t;
        eccl_op op;
        size_t count;
    } sz[] = {
        {ECCL_U8, ECCL_SUM, 2 * SLICE + 1},          /* 3 slices, the last one byte */
        {ECCL_F32, ECCL_SUM, SLICE / 4 * 2},         /* exactly 2 slices */
        {ECCL_F64, ECCL_MAX, SLICE / 8 + 3},         /* 2 slices, the last 3 elements */
        {ECCL_BF16, ECCL_AVG, SLICE / 2 * 2 + 1001}, /* 3 slices */
    };
    uint64_t seed = 500;
    for (size_t ki = 0; ki < NK; ki++)
        for (size_t ni = 0; ni < NN; ni++)
            for (size_t si = 0; si < sizeof sz / sizeof *sz; si++) {
                /* Keep it fast: the widest worlds take one size each. */
                if (ns[ni] == 8 && si != (is_chain_kind(kinds[ki]) ? 0 : 2)) continue;
                if (ns[ni] == 5 && si == 3 && !is_chain_kind(kinds[ki])) continue;
                pcase c = {kinds[ki], ns[ni], sz[si].t, sz[si].op, sz[si].count, (int)((si + ni) % 2),
                           (uint32_t)(si % (size_t)ns[ni]), seed};
                run_case(&c, seed % 3 ? seed : 0, 0);
                seed++;
            }
}

/* The same call under many global orders: each must give the expected
 * (hence the same) bits, every invariant holding at every step. */
static void test_orders(void **state)
{
    (void)state;
    for (size_t ki = 0; ki < NK; ki++)
        for (size_t ni = 0; ni < NN; ni++) {
            pcase c = {kinds[ki], ns[ni], ECCL_F32, ECCL_SUM, 13, (int)(ni % 2), (uint32_t)(ni % 2), 900 + ki};
            for (uint64_t seed = 1; seed <= 40; seed++) run_case(&c, seed * 0x2545F4914F6CDD1Dull, 0);
        }
    /* Several slices in flight, so orders interleave within a step too. */
    static const int few[] = {3, 5};
    for (size_t ki = 0; ki < NK; ki++)
        for (int a = 0; a < 2; a++) {
            pcase c = {kinds[ki], few[a], ECCL_F32, ECCL_AVG, SLICE / 4 * 2 + 5, a, 1, 950 + ki};
            for (uint64_t seed = 1; seed <= 4; seed++) run_case(&c, seed * 7919, 0);
        }
}

/* Stopped after every possible number of delivered frames, whole or
 * mid-frame, every rank's restore gives recvbuf back bit for bit, and
 * sendbuf is as it was. */
static void restore_case(const pcase *c, uint64_t sched_seed, size_t stride)
{
    size_t total = run_case(c, sched_seed, 0);
    for (size_t stop = 0; stop <= total; stop += stride) {
        for (int mid = 0; mid < 2; mid++) {
            if (mid && stop == 0) continue;
            sim *s = malloc(sizeof *s);
            assert_non_null(s);
            sim_init(s, c, sched_seed);
            s->stop = stop;
            s->mid = mid;
            eccl_result rc = sim_run(s);
            assert_true(rc == ECCL_ERR_AGAIN || (rc == ECCL_OK && stop == total));
            restore_all(s); /* guards included: whole regions compared */
            sim_fini(s);
            free(s);
        }
    }
}

static void test_restore_anywhere(void **state)
{
    (void)state;
    for (size_t ki = 0; ki < NK; ki++)
        for (size_t ni = 0; ni < NN; ni++)
            for (int ip = 0; ip < 2; ip++) {
                uint32_t root = (uint32_t)(ns[ni] - 1 - ip);
                pcase c = {kinds[ki], ns[ni], ECCL_I32, ECCL_SUM, 7, ip, root, 300 + ni};
                restore_case(&c, 0, 1);
                c.t = ECCL_F16;
                c.op = ECCL_AVG;
                c.count = 1;
                restore_case(&c, 4242 + ki, 1);
            }
    /* Several slices: stops inside a step's pipeline. */
    for (size_t ki = 0; ki < NK; ki++)
        for (int ip = 0; ip < 2; ip++) {
            pcase c = {kinds[ki], 3, ECCL_U16, ECCL_MAX, SLICE / 2 + 9, ip, (uint32_t)ip, 777};
            restore_case(&c, 99, 1);
            c.n = 2;
            restore_case(&c, 0, 1);
        }
}

/* Malformed frames at every point of a run: the wrong collective's phase,
 * step, offset, length, QUANT or BULK flag, ring, role, a token out of
 * order or at N == 2, the frame after the next (FIFO broken), the last
 * frame again, data to a rank that receives none; and after the last
 * expected frame, any frame. Each is refused with ECCL_ERR_PROTOCOL and
 * changes nothing. */
static void test_malformed(void **state)
{
    (void)state;
    for (size_t ki = 0; ki < NK; ki++)
        for (size_t ni = 0; ni < NN; ni++) {
            pcase c = {kinds[ki], ns[ni], ECCL_I16, ECCL_MIN, 5, (int)(ni % 2), (uint32_t)(ni % 3), 60 + ni};
            run_case(&c, 0, 1);
            run_case(&c, 31337, 1);
            c.count = SLICE / 2 + 3; /* two slices */
            if (ns[ni] <= 3) run_case(&c, 0, 1);
        }
}

/* The completion round, step by step: with every data frame delivered and
 * every rank full, no rank completes until its token N-1; N == 2 has no
 * round. */
static void test_completion(void **state)
{
    (void)state;
    for (size_t ki = 0; ki < NK; ki++)
        for (int n = 2; n <= 5; n++) {
            pcase c = {kinds[ki], n, ECCL_U32, ECCL_SUM, 3, 0, (uint32_t)(n - 1), 5};
            sim *s = malloc(sizeof *s);
            assert_non_null(s);
            sim_init(s, &c, 0);
            /* Deliver data frames only, until none is left anywhere. */
            for (;;) {
                for (int i = 0; i < n; i++) pump(s, i);
                int moved = 0;
                for (int i = 0; i < n; i++) {
                    const eccl_frame *f = s->next[i].out_head;
                    if (!f) continue;
                    eccl_wire_data w;
                    decode_frame(f, &w);
                    if (w.phase == ECCL_PHASE_DONE) continue;
                    assert_int_equal(deliver(s, i), ECCL_OK);
                    moved = 1;
                }
                if (!moved) break;
            }
            for (int r = 0; r < n; r++) {
                assert_true(is_full(s, r));
                assert_int_equal(s->data_rx[r], recvs_of(&c, r));
                /* Two ranks: full is enough; more wait for their tokens. */
                assert_int_equal(s->alg->complete(&s->p[r]), n == 2);
                assert_int_equal(s->alg->expects(&s->p[r], ECCL_ROLE_PREV), n > 2);
            }
            if (n > 2) {
                /* Tokens now: each rank completes with token N-1 exactly. */
                for (int i = 0; i < n; i++) assert_non_null(s->next[i].out_head);
                assert_int_equal(sim_run(s), ECCL_OK);
                for (int r = 0; r < n; r++) assert_int_equal(s->tok_rx[r], n - 1);
            } else {
                for (int i = 0; i < n; i++) assert_null(s->next[i].out_head);
            }
            check_results(s);
            sim_fini(s);
            free(s);
        }
}

/* The queue's cap (ECCL_RING_MAX_QUEUED) holds sends back: a rank may be
 * full with sends still to queue. A reduce's non-root has no output: it is
 * full once every one of its sends is queued (not yet taken by the socket),
 * and not before. No rank completes with a send not yet queued, even once
 * its queue ran dry. */
static void test_queue_cap(void **state)
{
    (void)state;
    /* 6 slices: more than the cap lets out at once. */
    size_t count = 6 * (size_t)SLICE;
    assert_true(count > ECCL_RING_MAX_QUEUED);
    pcase c = {ECCL_COLL_REDUCE, 3, ECCL_U8, ECCL_SUM, count, 0, 0, 8};
    sim *s = malloc(sizeof *s);
    assert_non_null(s);
    sim_init(s, &c, 0);
    int start = 1; /* root + 1: the chain's first rank, which receives nothing */
    assert_false(is_full(s, start));
    pump(s, start);
    assert_true(s->data_q[start] > 0 && s->data_q[start] < 6); /* the cap held some back */
    assert_false(is_full(s, start));
    while (s->data_q[start] < 6) {
        assert_false(is_full(s, start));
        assert_int_equal(deliver(s, start), ECCL_OK);
        pump(s, start);
    }
    /* All queued, some still on the link: full, not complete. */
    assert_non_null(s->next[start].out_head);
    assert_true(is_full(s, start));
    assert_false(s->alg->complete(&s->p[start]));
    assert_int_equal(sim_run(s), ECCL_OK);
    check_results(s);
    sim_fini(s);

    /* A broadcast's root of two is full at once (its output is its own
     * copy) and has no token to wait for: with its queue drained and sends
     * still held back, it must not complete. */
    pcase b = {ECCL_COLL_BROADCAST, 2, ECCL_U8, ECCL_SUM, count, 0, 0, 9};
    sim_init(s, &b, 0);
    pump(s, 0);
    assert_true(is_full(s, 0));
    assert_true(s->data_q[0] < 6);
    while (s->next[0].out_head) assert_int_equal(deliver(s, 0), ECCL_OK);
    assert_false(s->alg->complete(&s->p[0]));
    assert_int_equal(sim_run(s), ECCL_OK);
    check_results(s);
    sim_fini(s);
    free(s);

    /* Every kind, two and three ranks, under random orders that let queues
     * drain between pumps. */
    for (size_t ki = 0; ki < NK; ki++)
        for (int n = 2; n <= 3; n++) {
            pcase r = {kinds[ki], n, ECCL_U8, ECCL_MAX, count + 5, n == 3, 1, 10 + ki};
            run_case(&r, 17 + ki, 0);
        }
}

int main(int argc, char **argv)
{
    /* A pattern (e.g. "test_malformed") runs those tests alone. */
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    /* Thousands of calls allocate megabytes each: from the heap, not fresh
     * mmaps (page faults were most of the run time). */
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_algo_table),
        cmocka_unit_test(test_exact_small),
        cmocka_unit_test(test_multislice),
        cmocka_unit_test(test_orders),
        cmocka_unit_test(test_restore_anywhere),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_completion),
        cmocka_unit_test(test_queue_cap),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    case_data_free();
    return rc;
}
