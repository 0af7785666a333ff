/* The ring pass (core/coll/ring_pass.c) in one process: the N state
 * machines of one all-gather(v), reduce-scatter(v) (plain or quantised),
 * broadcast or reduce, wired by a harness that hands each DATA frame a rank
 * queued to the rank at the other end of its link, through the algorithm
 * table (eccl_ring_pass_algo / eccl_chain_pass_algo) exactly as comm.c does
 * after the socket: recv, the payload copied to where recv said, recv_done.
 *
 * Every rank has two links, as in comm: to `next` (ring 0's frames and the
 * done tokens leave there and reach next in its PREV role) and to `prev`
 * (ring 1's frames, reaching prev in its NEXT role). No threads, no
 * sockets: the harness alone picks the global order (round robin, or
 * seeded random choices of which rank pumps, which link delivers next, and
 * whether a payload lands in two parts with other events in between, as a
 * socket read in pieces leaves it); a link's own frames stay FIFO, as TCP
 * keeps them. A rank's pump may get a NULL PREV link for a while (comm
 * passes NULL before that link exists): ring 1's frames must wait. So every
 * interleaving, stop point and malformed frame is reproducible.
 *
 * Every run checks, after every pump and every delivery, the promises
 * comm.c builds on (coll/algo.h), against a model written here from the
 * documented schedule (coll/ring_pass.h), not from the engine's code:
 *   - the rings: from ECCL_RING_TWO_RINGS_MIN_BYTES moved (the largest
 *     block's bytes, times N for the all-gather and the reduce-scatter) and
 *     blocks of 2 elements on, each block's first n - n/2 elements travel
 *     ring 0 (prev to next), the rest ring 1 (next to prev), positions
 *     numbered along each ring's own direction; the broadcast's chains leave
 *     the root both ways, the reduce's meet there;
 *   - each frame's link, header (ring, phase, step, offset, length, flags)
 *     and payload when the socket takes it (a borrowed payload must not
 *     change while queued): the block, slice, and for the reduce kinds the
 *     partial in its ring's order (quantised: the sender's record and codes,
 *     raw where the quantiser refuses the slice);
 *   - where a payload lands: the copying kinds straight into recvbuf at the
 *     frame's offset (never into a v layout's gaps), the reduce kinds into
 *     their scratch or quantised stage; two frames landing in one rank at
 *     once never share a byte;
 *   - a frame only reaches a rank whose expects() is 1 for its role (PREV:
 *     ring 0's data or tokens; NEXT: ring 1's data; comm hands any other to
 *     the caller's next call of the tag), and expects() is 0 as soon as the
 *     last frame for that role arrived: exactly when no more come;
 *   - have_full() never goes back, and turns 1 only with the final output
 *     in recvbuf (a reduce's non-root: once all its sends, both rings', are
 *     queued);
 *   - complete() only once every rank has its output (done token N-1,
 *     two ranks included) and no payload of ours is queued;
 *   - done tokens travel ring 0 alone, and token s leaves a rank only when
 *     it and the s-1 ranks before it are full;
 *   - tx/rx byte counts; guard bytes around every buffer (the caller's, and
 *     the pass's scratch, backup, codes image and stages) stay untouched.
 */
#include <math.h>
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
#include "coll/ring_allreduce.h" /* ECCL_RING_MAX_QUEUED, ECCL_RING_TWO_RINGS_MIN_BYTES: the pass's too */
#include "coll/ring_pass.h"
#include "proto/chan.h"
#include "proto/wire.h"
#include "quant/quant.h"
#include "util/half.h"

#define MAXN 8
#define GUARD 64
/* Unlike bytes either side of every buffer: a copy that overruns one into
 * another's guard must show. */
#define SEND_GUARD 0x5a
#define RECV_GUARD 0xa5
#define AUX_GUARD 0x3c
#define SLICE ECCL_RING_PASS_SLICE_BYTES
#define TWO_RINGS ECCL_RING_TWO_RINGS_MIN_BYTES
#define QMETA ECCL_QUANT_META_BYTES

/* ---- a host env: enough for channels and the pass ------------------------- */

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
static void fill_bytes(uint8_t *buf, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0xD1B54A32D192ED03ull + 99;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t r = rng_next(&x);
        memcpy(buf + i, &r, n - i < 8 ? n - i : 8);
    }
}

static void fill_input(uint8_t *buf, eccl_dtype t, eccl_op op, size_t count, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 12345;
    size_t es = eccl_dtype_size(t);
    if (!is_float(t)) {
        fill_bytes(buf, count * es, seed * 0x9E3779B97F4A7C15ull + 12345);
        return;
    }
    for (size_t i = 0; i < count; i++) {
        uint64_t r = rng_next(&x);
        double u = (double)(r >> 11) / 9007199254740992.0; /* [0, 1) */
        double v = op == ECCL_PROD ? 0.5 + 1.5 * u : 2.0 * u - 1.0;
        if (t == ECCL_F64) {
            memcpy(buf + i * es, &v, 8);
        } else if (t == ECCL_F32) {
            float f = (float)v;
            memcpy(buf + i * es, &f, 4);
        } else {
            /* bf16: f32's top half, truncated (cheap: inputs run to megabytes) */
            float f = (float)v;
            uint32_t bits;
            memcpy(&bits, &f, 4);
            uint16_t h = t == ECCL_F16 ? eccl_f32_to_f16(f) : (uint16_t)(bits >> 16);
            memcpy(buf + i * es, &h, 2);
        }
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
    size_t count;       /* elements per block (the chains: of the buffer); v: their sum */
    int in_place;
    uint32_t root;
    uint64_t seed;
    /* A v layout (all-gatherv, reduce-scatterv): block b has vc[b] elements
     * at element vd[b] of the blocks. */
    int v;
    size_t vc[MAXN], vd[MAXN];
    eccl_quant_type quant; /* reduce-scatter only */
    /* Quantised: nan_rank's input holds a NaN at element nan_elem. */
    int nan;
    uint32_t nan_rank;
    size_t nan_elem;
} pcase;

static pcase mk(eccl_coll_kind kind, int n, eccl_dtype t, eccl_op op, size_t count, int in_place, uint32_t root,
                uint64_t seed)
{
    pcase c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.n = n;
    c.t = t;
    c.op = op;
    c.count = count;
    c.in_place = in_place;
    c.root = root;
    c.seed = seed;
    return c;
}

/* A v layout: counts, and the all-gather's displacements (NULL: back to
 * back, as the reduce-scatter's always are). */
static pcase mkv(eccl_coll_kind kind, int n, eccl_dtype t, eccl_op op, const size_t *vc, const size_t *vd,
                 int in_place, uint64_t seed)
{
    pcase c = mk(kind, n, t, op, 0, in_place, 0, seed);
    c.v = 1;
    size_t at = 0;
    for (int b = 0; b < n; b++) {
        c.vc[b] = vc[b];
        c.vd[b] = vd ? vd[b] : at;
        at += vc[b];
        c.count += vc[b];
    }
    return c;
}

static int is_chain_kind(eccl_coll_kind k) { return k == ECCL_COLL_BROADCAST || k == ECCL_COLL_REDUCE; }
static int reduce_kind(eccl_coll_kind k) { return k == ECCL_COLL_REDUCE_SCATTER || k == ECCL_COLL_REDUCE; }
static int mod(int x, int n) { return ((x % n) + n) % n; }

static size_t es_of(const pcase *c) { return eccl_dtype_size(c->t); }
static int nblocks(const pcase *c) { return is_chain_kind(c->kind) ? 1 : c->n; }
/* Block b: its elements, and its first element within the blocks. */
static size_t bn(const pcase *c, int b) { return c->v ? c->vc[b] : c->count; }
static size_t be(const pcase *c, int b)
{
    return c->v ? c->vd[b] : is_chain_kind(c->kind) ? 0 : (size_t)b * c->count;
}
static size_t maxbn(const pcase *c)
{
    size_t m = 0;
    for (int b = 0; b < nblocks(c); b++) m = bn(c, b) > m ? bn(c, b) : m;
    return m;
}
/* Elements from the first block's start to the end of the last. */
static size_t extent(const pcase *c)
{
    size_t e = 0;
    for (int b = 0; b < nblocks(c); b++) e = be(c, b) + bn(c, b) > e ? be(c, b) + bn(c, b) : e;
    return e;
}

/* Two rings from TWO_RINGS bytes moved (the largest block's, times N for
 * the all-gather and reduce-scatter) with blocks of at least 2 elements. */
static int rings_of(const pcase *c)
{
    size_t moved = maxbn(c) * es_of(c) * (is_chain_kind(c->kind) ? 1 : (size_t)c->n);
    return moved >= TWO_RINGS && maxbn(c) >= 2 ? 2 : 1;
}
/* Ring d's part of block b: ring 0 the first n - n/2 elements, ring 1 the rest. */
static size_t pn(const pcase *c, int d, int b)
{
    size_t x = bn(c, b);
    if (rings_of(c) == 1) return d ? 0 : x;
    return d ? x / 2 : x - x / 2;
}
static size_t pe(const pcase *c, int d, int b) { return be(c, b) + (d ? bn(c, b) - bn(c, b) / 2 : 0); }
/* Elements per slice: 1 MiB, or the largest block's share if smaller. */
static size_t slice_n(const pcase *c)
{
    size_t m = maxbn(c), share = rings_of(c) == 2 ? m - m / 2 : m, cap = SLICE / es_of(c);
    return share < cap ? share : cap;
}
/* Positions grow along each ring's send direction: ring 1 numbers them the
 * other way round. */
static int pos_of(const pcase *c, int d, int r) { return d ? mod(-r, c->n) : r; }
static int rank_at(const pcase *c, int d, int q) { return d ? mod(-q, c->n) : mod(q, c->n); }
/* Who sends to r on ring d: r-1 on ring 0, r+1 on ring 1. */
static int upstream(const pcase *c, int d, int r) { return rank_at(c, d, pos_of(c, d, r) - 1); }
/* A chain's position: the broadcast's chains start at the root, the
 * reduce's end there. */
static int dist_of(const pcase *c, int d, int r)
{
    int q = pos_of(c, d, r) - pos_of(c, d, (int)c->root);
    return mod(c->kind == ECCL_COLL_BROADCAST ? q : q - 1, c->n);
}
static uint32_t tokens_of(const pcase *c) { return (uint32_t)c->n - 1; }
static int has_output(const pcase *c, int r) { return c->kind != ECCL_COLL_REDUCE || (uint32_t)r == c->root; }
/* Bytes of rank r's output. */
static size_t out_len(const pcase *c, int r)
{
    switch (c->kind) {
    case ECCL_COLL_ALLGATHER: return extent(c) * es_of(c);
    case ECCL_COLL_REDUCE_SCATTER: return bn(c, r) * es_of(c);
    default: return has_output(c, r) ? c->count * es_of(c) : 0;
    }
}
/* The smallest count (per block, or of the buffer) that takes two rings. */
static size_t two_rings_count(eccl_coll_kind k, int n, eccl_dtype t)
{
    size_t per = eccl_dtype_size(t) * (is_chain_kind(k) ? 1 : (size_t)n);
    return (TWO_RINGS + per - 1) / per;
}

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

static double absd(double x) { return x < 0 ? -x : x; }
/* Bound of one ulp of x in f32 (normal or not). */
static double ulp_bound(double x) { return absd(x) * 0x1p-23 + 0x1p-149; }

/* The partial the hops-th rank of a chain on ring d holds over elements
 * [e0, e0 + ne): ranks rank_at(d, first), rank_at(d, first + 1), ... each
 * adding its own data, in that order. Quantised, every rank after the first
 * dequantises what its upstream sent (that partial, quantised as it left;
 * raw where the quantiser refuses it) before adding: *bound (if set) grows
 * by quant.h's error of each rounding and the f32 additions' rounding. */
static void chain_partial(const pcase *c, const uint8_t *const *in, int d, int first, int hops, size_t e0, size_t ne,
                          uint8_t *out, double *bound)
{
    static uint8_t codes[SLICE];
    size_t es = es_of(c), off = e0 * es;
    memcpy(out, in[rank_at(c, d, first)] + off, ne * es);
    for (int h = 1; h < hops; h++) {
        eccl_quant_meta m;
        if (c->quant != ECCL_QUANT_NONE && eccl_quant_quantize(c->quant, c->t, out, ne, codes, &m) == ECCL_OK) {
            assert_int_equal(eccl_quant_dequantize(&m, codes, ne, out), ECCL_OK);
            double big = absd(m.min) > absd(m.max) ? absd(m.min) : absd(m.max);
            if (bound) *bound += (double)eccl_quant_meta_scale(&m) * (0.5 + 0x1p-12) + ulp_bound(big);
        }
        eccl_reduce_into(out, in[rank_at(c, d, first + h)] + off, ne, c->t, c->op);
        if (bound) *bound += ulp_bound(c->n + 1.0);
    }
}

/* One DATA frame of the model: its header, and what its payload holds. */
typedef struct mframe {
    eccl_wire_data w;
    int blk;
    int first, hops; /* the reduce kinds: the partial of chain_partial */
    size_t e0, ne;   /* the elements it carries */
} mframe;

/* ---- the harness ----------------------------------------------------------- */

/* A payload landing in two parts: recv was called, recv_done not yet. */
typedef struct landing {
    int open;
    eccl_wire_data w;
    uint8_t *dst;
    size_t got;
} landing;

enum { AUX_SCRATCH, AUX_BACKUP, AUX_QIMG, AUX_QSTAGE, AUX_COUNT };

typedef struct sim {
    eccl_env env;
    pcase c;
    int n, rings;
    const eccl_coll_algo *alg;
    eccl_ring_pass p[MAXN];
    /* link[i][0]: rank i's link to next: ring 0 and the tokens, taken by
     * next in its PREV role. link[i][1]: to prev: ring 1, taken by prev in
     * its NEXT role. */
    eccl_chan link[MAXN][2];
    int prev_open[MAXN]; /* link[i][1] is handed to pump (else NULL) */
    int late;            /* PREV links open after a rank's first pumps */
    /* Buffers: each region GUARD bytes past both ends of what the call sees. */
    uint8_t *send_reg[MAXN], *recv_reg[MAXN];
    size_t send_len[MAXN], recv_len[MAXN];
    const uint8_t *send[MAXN];
    uint8_t *recv[MAXN];
    uint8_t *orig_send[MAXN], *orig_recv[MAXN]; /* the regions before the call */
    /* The pass's own memory (scratch, backup, codes image, stages): the
     * sizes it asked for, guarded too. */
    uint8_t *aux_reg[MAXN][AUX_COUNT], *aux[MAXN][AUX_COUNT];
    size_t aux_len[MAXN][AUX_COUNT];
    const uint8_t *in[MAXN];   /* each rank's contribution, kept aside (cd) */
    const uint8_t *want[MAXN]; /* the output each rank must end with (cd) */
    /* The model's frames, by sender and ring. */
    mframe *mf[MAXN][2];
    uint32_t nmf[MAXN][2];
    uint8_t *tmp, *qtmp;      /* model payloads */
    uint8_t *lbuf[MAXN][2];   /* the payload taken off link[i][side] */
    landing land[MAXN][2];    /* by receiving rank and ring */
    /* The schedule: 0 round robin, else a xorshift state. */
    uint64_t rng;
    size_t frames; /* taken off a link */
    /* Stopping at frame `stop`: mid != 0 stops between recv and recv_done
     * with half the payload landed, as a link dying mid-frame leaves it. */
    size_t stop;
    int mid;
    /* Malformed variants of every frame are tried before it is delivered. */
    int fuzz;
    size_t rejected; /* variants refused (with the state untouched) */
    /* What the observer saw, by rank (and ring, or link side: the same). */
    uint32_t q_seen[MAXN][2];                /* frames of link[i][side] already inspected */
    uint32_t data_q[MAXN][2], tok_q[MAXN];   /* queued by rank i */
    uint32_t data_out[MAXN][2];              /* of rank i's, taken by the socket */
    uint32_t data_rx[MAXN][2], tok_rx[MAXN]; /* delivered to rank i (recv_done) */
    eccl_wire_data last_rx[MAXN][2];         /* the last data frame rank i took */
    int has_last_rx[MAXN][2];
    int full[MAXN], done[MAXN];
    uint32_t raw_seen; /* quantised calls: frames that travelled raw */
} sim;

static size_t with_guards(size_t x) { return x + GUARD * 2; }

/* One region: `len` bytes the call sees, guards on both sides. */
static uint8_t *region(size_t len, uint8_t **reg, size_t *reg_len, uint8_t guard)
{
    *reg_len = with_guards(len);
    *reg = malloc(*reg_len);
    assert_non_null(*reg);
    memset(*reg, guard, GUARD);
    memset(*reg + GUARD + len, guard, GUARD);
    return *reg + GUARD; /* the caller fills it, if it must */
}

/* Each rank's contribution, what its output buffer held before, and the
 * output it must end with, for the last case asked: restore tests run one
 * case once per stop point, and generating these dominated their time.
 * Quantised: each output element's exact value and error bound too. */
static struct {
    int valid;
    pcase c;
    uint8_t *in[MAXN], *old[MAXN], *want[MAXN];
    double *exact[MAXN], *bound[MAXN];
} cd;

static int same_case(const pcase *a, const pcase *b)
{
    return a->kind == b->kind && a->n == b->n && a->t == b->t && a->op == b->op && a->count == b->count &&
           a->root == b->root && a->seed == b->seed && a->v == b->v &&
           memcmp(a->vc, b->vc, sizeof a->vc) == 0 && memcmp(a->vd, b->vd, sizeof a->vd) == 0 &&
           a->quant == b->quant && a->nan == b->nan && a->nan_rank == b->nan_rank && a->nan_elem == b->nan_elem;
}

static void case_data_free(void)
{
    for (int r = 0; r < MAXN; r++) {
        free(cd.in[r]);
        free(cd.old[r]);
        free(cd.want[r]);
        free(cd.exact[r]);
        free(cd.bound[r]);
        cd.in[r] = cd.old[r] = cd.want[r] = NULL;
        cd.exact[r] = cd.bound[r] = NULL;
    }
    cd.valid = 0;
}

/* Reduced output of rank r (block r of the reduce-scatter, the root's
 * buffer of the reduce): integers by the independent loop (their order
 * cannot matter; test_reference shows the kernels agree, which the
 * megabyte blocks use instead: the loop would dominate the run time),
 * floats by the kernels along each ring's own order, slice by slice (which
 * fixes their bits, quantised ones included). */
static void reduced_output(const pcase *c, int r, uint8_t *out, double *bound)
{
    const uint8_t *const *in = (const uint8_t *const *)cd.in;
    int n = c->n, blk = c->kind == ECCL_COLL_REDUCE_SCATTER ? r : 0;
    size_t es = es_of(c), base = be(c, blk), S = slice_n(c);
    if (!is_float(c->t) && bn(c, blk) * es <= (64u << 10)) {
        naive_int_reduce(out, in, n, base * es, bn(c, blk), c->t, c->op);
        return;
    }
    int owner = c->kind == ECCL_COLL_REDUCE_SCATTER ? r : (int)c->root;
    for (int d = 0; d < rings_of(c); d++) {
        size_t left = pn(c, d, blk);
        for (size_t k = 0; k * S < left; k++) {
            size_t e0 = pe(c, d, blk) + k * S, ne = left - k * S < S ? left - k * S : S;
            double b = 0;
            chain_partial(c, in, d, pos_of(c, d, owner) + 1, n, e0, ne, out + (e0 - base) * es, &b);
            if (bound)
                for (size_t e = 0; e < ne; e++) bound[e0 - base + e] = b;
        }
    }
    if (c->op == ECCL_AVG) eccl_reduce_scale_div(out, bn(c, blk), c->t, (uint32_t)n);
}

/* Whether rank r's f32 output is within the bound of the exact sums (NaN
 * where they are NaN); the first element that is not, else SIZE_MAX. */
static size_t quant_miss(const pcase *c, int r, const uint8_t *out)
{
    for (size_t e = 0; e < out_len(c, r) / 4; e++) {
        float f;
        memcpy(&f, out + e * 4, 4);
        if (isnan(cd.exact[r][e]) ? !isnan(f) : !(absd((double)f - cd.exact[r][e]) <= cd.bound[r][e])) return e;
    }
    return SIZE_MAX;
}

static void case_data(const pcase *c)
{
    if (cd.valid && same_case(&cd.c, c)) return;
    case_data_free();
    int n = c->n;
    size_t es = es_of(c);
    for (int r = 0; r < n; r++) {
        size_t in_n = c->kind == ECCL_COLL_REDUCE_SCATTER ? extent(c)
                      : c->kind == ECCL_COLL_ALLGATHER    ? bn(c, r)
                                                          : c->count;
        cd.in[r] = malloc(in_n * es + 1);
        cd.old[r] = malloc(out_len(c, r) + 1);
        assert_true(cd.in[r] && cd.old[r]);
        fill_input(cd.in[r], c->t, c->op, in_n, c->seed * 131 + (uint64_t)r);
        if (c->nan && (uint32_t)r == c->nan_rank) {
            float x = NAN;
            assert_true(c->t == ECCL_F32 && c->nan_elem < in_n);
            memcpy(cd.in[r] + c->nan_elem * 4, &x, 4);
        }
        fill_bytes(cd.old[r], out_len(c, r), c->seed * 7 + (uint64_t)r);
    }
    for (int r = 0; r < n; r++) {
        if (!has_output(c, r)) continue;
        size_t len = out_len(c, r);
        cd.want[r] = malloc(len + 1);
        assert_non_null(cd.want[r]);
        switch (c->kind) {
        case ECCL_COLL_ALLGATHER:
            /* Every block where its displacement says; the gaps as they were. */
            memcpy(cd.want[r], cd.old[r], len);
            for (int x = 0; x < n; x++) memcpy(cd.want[r] + be(c, x) * es, cd.in[x], bn(c, x) * es);
            break;
        case ECCL_COLL_BROADCAST: memcpy(cd.want[r], cd.in[c->root], len); break;
        default: {
            double *bound = NULL;
            if (c->quant != ECCL_QUANT_NONE) {
                /* The exact sums, and the bound: per hop, quant.h's error of
                 * the slice's record and the addition's rounding; AVG
                 * divides both once, rounding once more. */
                size_t m = len / 4 + 1, base = be(c, r);
                cd.exact[r] = malloc(m * sizeof(double));
                cd.bound[r] = bound = malloc(m * sizeof(double));
                assert_true(cd.exact[r] && bound);
                for (size_t e = 0; e < len / 4; e++) {
                    double sum = 0;
                    for (int x = 0; x < n; x++) {
                        float f;
                        memcpy(&f, cd.in[x] + (base + e) * 4, 4);
                        sum += f;
                    }
                    cd.exact[r][e] = c->op == ECCL_AVG ? sum / n : sum;
                }
            }
            reduced_output(c, r, cd.want[r], bound);
            if (bound) {
                for (size_t e = 0; e < len / 4; e++)
                    bound[e] = (c->op == ECCL_AVG ? bound[e] / n : bound[e]) + ulp_bound(n + 1.0);
                /* The documented bound holds for the documented schedule: a
                 * check of the bound, and of this model. */
                size_t miss = quant_miss(c, r, cd.want[r]);
                if (miss != SIZE_MAX) fail_msg("the model's rank %d element %zu is off the per-hop bound", r, miss);
            }
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
    size_t es = es_of(c), b = c->count * es;
    case_data(c);
    for (int r = 0; r < n; r++) {
        s->in[r] = cd.in[r];
        s->want[r] = cd.want[r];
        s->send[r] = NULL;
        s->recv[r] = NULL;
        size_t ol = out_len(c, r);
        switch (c->kind) {
        case ECCL_COLL_ALLGATHER:
            s->recv[r] = region(ol, &s->recv_reg[r], &s->recv_len[r], RECV_GUARD);
            memcpy(s->recv[r], cd.old[r], ol);
            if (c->in_place) s->send[r] = s->recv[r] + be(c, r) * es;
            else s->send[r] = region(bn(c, r) * es, &s->send_reg[r], &s->send_len[r], SEND_GUARD);
            memcpy((uint8_t *)s->send[r], s->in[r], bn(c, r) * es);
            break;
        case ECCL_COLL_REDUCE_SCATTER:
            s->send[r] = region(extent(c) * es, &s->send_reg[r], &s->send_len[r], SEND_GUARD);
            memcpy((uint8_t *)s->send[r], s->in[r], extent(c) * es);
            if (c->in_place) {
                s->recv[r] = (uint8_t *)s->send[r] + be(c, r) * es;
            } else {
                s->recv[r] = region(ol, &s->recv_reg[r], &s->recv_len[r], RECV_GUARD);
                memcpy(s->recv[r], cd.old[r], ol);
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

/* Ring d's part of block blk in slices, as rank r sends them at step g. */
static void model_slices(sim *s, int r, int d, int g, int blk, int first, int hops)
{
    const pcase *c = &s->c;
    size_t es = es_of(c), S = slice_n(c), left = pn(c, d, blk);
    for (size_t k = 0; k * S < left; k++) {
        mframe *m = &s->mf[r][d][s->nmf[r][d]++];
        memset(m, 0, sizeof *m);
        m->blk = blk;
        m->first = first;
        m->hops = hops;
        m->e0 = pe(c, d, blk) + k * S;
        m->ne = left - k * S < S ? left - k * S : S;
        m->w.tag = 77;
        m->w.epoch = 3;
        m->w.ring = (uint8_t)d;
        m->w.phase = phase_of(c->kind);
        m->w.step = (uint16_t)g;
        m->w.offset = m->e0 * es;
        m->w.len = (uint32_t)(m->ne * es);
        if (c->quant != ECCL_QUANT_NONE) {
            /* Quantised, unless the partial holds a NaN: then it goes raw. */
            int nan = 0;
            for (int h = 0; h < hops && c->nan; h++)
                nan |= rank_at(c, d, first + h) == (int)c->nan_rank && c->nan_elem >= m->e0 &&
                       c->nan_elem < m->e0 + m->ne;
            if (!nan) {
                m->w.flags = ECCL_WIRE_DATA_QUANT;
                m->w.len = (uint32_t)(QMETA + m->ne);
            }
        }
    }
}

/* Every frame each rank sends, by ring, as ring_pass.h documents them. At
 * step g position p of a ring sends: the all-gather block p-g, the
 * reduce-scatter its partial of block p-g-1 (a chain from the block's
 * position + 1 to p); the chains their one block, down the chain. */
static void build_model(sim *s)
{
    const pcase *c = &s->c;
    int n = c->n;
    size_t S = slice_n(c), per = S ? (maxbn(c) + S - 1) / S + 1 : 1;
    for (int r = 0; r < n; r++)
        for (int d = 0; d < 2; d++) {
            s->mf[r][d] = malloc(sizeof(mframe) * (size_t)n * per);
            assert_non_null(s->mf[r][d]);
            s->nmf[r][d] = 0;
            if (d >= s->rings) continue;
            int q = pos_of(c, d, r);
            switch (c->kind) {
            case ECCL_COLL_ALLGATHER:
                for (int g = 0; g < n - 1; g++) model_slices(s, r, d, g, rank_at(c, d, q - g), 0, 0);
                break;
            case ECCL_COLL_REDUCE_SCATTER:
                for (int g = 0; g < n - 1; g++) {
                    int blk = rank_at(c, d, q - g - 1);
                    model_slices(s, r, d, g, blk, pos_of(c, d, blk) + 1, g + 1);
                }
                break;
            default:
                if (dist_of(c, d, r) < n - 1)
                    model_slices(s, r, d, 0, 0, pos_of(c, d, (int)c->root) + 1, dist_of(c, d, r) + 1);
                break;
            }
        }
}

static uint32_t sends_of(const sim *s, int r, int d) { return s->nmf[r][d]; }
static uint32_t recvs_of(const sim *s, int r, int d) { return s->nmf[upstream(&s->c, d, r)][d]; }
static uint64_t model_bytes(const sim *s, int r, int d)
{
    uint64_t x = 0;
    for (uint32_t j = 0; j < s->nmf[r][d]; j++) x += s->mf[r][d][j].w.len;
    return x;
}

static uint8_t *aux_region(sim *s, int r, int a, size_t len)
{
    size_t reg_len;
    if (!len) return NULL;
    s->aux_len[r][a] = len;
    s->aux[r][a] = region(len, &s->aux_reg[r][a], &reg_len, AUX_GUARD);
    return s->aux[r][a];
}

static void sim_init(sim *s, const pcase *c, uint64_t sched_seed, int late)
{
    memset(s, 0, sizeof *s);
    s->c = *c;
    s->n = c->n;
    s->rings = rings_of(c);
    s->env = host_env();
    s->alg = is_chain_kind(c->kind) ? &eccl_chain_pass_algo : &eccl_ring_pass_algo;
    s->rng = sched_seed;
    s->late = late;
    s->stop = SIZE_MAX;
    s->tmp = malloc(SLICE + 64);
    s->qtmp = malloc(SLICE + 64);
    assert_true(s->tmp && s->qtmp);
    sim_setup_buffers(s);
    size_t es = es_of(c);
    for (int r = 0; r < s->n; r++) {
        eccl_coll_call call = {.env = &s->env, .kind = c->kind, .root = c->root, .tag = 77, .epoch = 3,
                               .sendbuf = s->send[r], .recvbuf = s->recv[r], .count = c->count,
                               .vcounts = c->v ? s->c.vc : NULL, .vdispls = c->v ? s->c.vd : NULL,
                               .dtype = c->t, .op = c->op, .quant = c->quant, .rank = (uint32_t)r,
                               .nranks = (uint32_t)s->n};
        size_t sb = eccl_ring_pass_scratch_bytes(&call), ob = eccl_ring_pass_output_bytes(&call);
        /* What the layout needs: partials of every block (reduce-scatter)
         * or of the buffer (reduce); a backup of every output byte, which
         * comm/ops.c hands only to a call whose buffers overlap. */
        size_t want_sb = c->kind == ECCL_COLL_REDUCE_SCATTER ? extent(c) * es
                         : c->kind == ECCL_COLL_REDUCE      ? c->count * es
                                                            : 0;
        assert_int_equal(sb, want_sb);
        assert_int_equal(ob, out_len(c, r));
        eccl_ring_pass_init(&s->p[r], &call, aux_region(s, r, AUX_SCRATCH, sb),
                            c->in_place ? aux_region(s, r, AUX_BACKUP, ob) : NULL);
        assert_int_equal(s->p[r].nrings, s->rings);
        if (c->quant != ECCL_QUANT_NONE) {
            /* Each direction's stage holds a whole quantised slice. */
            size_t qb = eccl_ring_pass_quant_bytes(&s->p[r]), qsb = eccl_ring_pass_qstage_bytes(&s->p[r]);
            if (qsb < (size_t)s->rings * (QMETA + slice_n(c)))
                fail_msg("%d ring(s) of %zu-element slices: %zu stage bytes", s->rings, slice_n(c), qsb);
            eccl_ring_pass_set_quant(&s->p[r], aux_region(s, r, AUX_QIMG, qb), aux_region(s, r, AUX_QSTAGE, qsb));
        }
        for (int side = 0; side < 2; side++) {
            assert_int_equal(eccl_chan_init(&s->link[r][side], &s->env, NULL, 64), ECCL_OK);
            s->lbuf[r][side] = malloc(SLICE + 64);
            assert_non_null(s->lbuf[r][side]);
        }
        s->prev_open[r] = !late;
    }
    build_model(s);
}

static void sim_fini(sim *s)
{
    for (int r = 0; r < s->n; r++) {
        for (int side = 0; side < 2; side++) {
            eccl_chan_close(&s->link[r][side]);
            free(s->lbuf[r][side]);
            free(s->mf[r][side]);
        }
        for (int a = 0; a < AUX_COUNT; a++) free(s->aux_reg[r][a]);
        free(s->send_reg[r]);
        free(s->recv_reg[r]);
        free(s->orig_send[r]);
        free(s->orig_recv[r]);
    }
    free(s->tmp);
    free(s->qtmp);
}

static void decode_frame(const eccl_frame *f, eccl_wire_data *w)
{
    eccl_wire_header h;
    assert_int_equal(eccl_wire_header_decode(f->head, &h), ECCL_OK);
    assert_int_equal(h.type, ECCL_MSG_DATA);
    assert_int_equal(eccl_wire_data_decode(f->head + ECCL_WIRE_HEADER_SIZE, h.length, w), ECCL_OK);
    assert_int_equal(f->payload_len, w->len);
}

static int is_full(sim *s, int r) { return s->alg->have_full(&s->p[r]); }
static int role_of(int d) { return d ? ECCL_ROLE_NEXT : ECCL_ROLE_PREV; }
static const char *side_name(int side) { return side ? "prev" : "next"; }
/* Who takes the frames of rank i's link on `side`. */
static int peer_of(const sim *s, int i, int side) { return mod(side ? i - 1 : i + 1, s->n); }

/* Frames rank i queued since the last look: tokens are checked here, when
 * they are sent (a token must never claim more than is true). */
static void inspect_queued(sim *s, int i)
{
    for (int side = 0; side < 2; side++) {
        uint32_t k = 0;
        for (const eccl_frame *f = s->link[i][side].out_head; f; f = f->next, k++) {
            if (k < s->q_seen[i][side]) continue;
            eccl_wire_data w;
            decode_frame(f, &w);
            assert_int_equal(w.tag, 77);
            assert_int_equal(w.epoch, 3);
            if (w.phase != ECCL_PHASE_DONE) {
                if (w.ring != side)
                    fail_msg("rank %d queued a ring-%u frame on its link to %s", i, w.ring, side_name(side));
                s->data_q[i][side]++;
                if (s->data_q[i][side] > sends_of(s, i, side))
                    fail_msg("rank %d queued %u ring-%d data frames, %u expected", i, s->data_q[i][side], side,
                             sends_of(s, i, side));
                continue;
            }
            if (side) fail_msg("rank %d sent a done token towards prev: tokens go ring 0 alone", i);
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
        s->q_seen[i][side] = k;
    }
}

/* The output region of rank r (NULL: none). */
static const uint8_t *out_of(const sim *s, int r, size_t *len)
{
    *len = out_len(&s->c, r);
    return has_output(&s->c, r) ? s->recv[r] : NULL;
}

static void expect_bytes(sim *s, int r)
{
    uint64_t tx = 0, rx = 0;
    s->alg->bytes(&s->p[r], &tx, &rx);
    uint64_t want_tx = model_bytes(s, r, 0) + model_bytes(s, r, 1);
    uint64_t want_rx = model_bytes(s, upstream(&s->c, 0, r), 0) + model_bytes(s, upstream(&s->c, 1, r), 1);
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
                fail_msg("rank %d of %d (%s, %d ring(s)): have_full with an output that is not final", r, s->n,
                         kind_name(c->kind), s->rings);
            for (int d = 0; d < 2; d++)
                if (!out && s->data_q[r][d] != sends_of(s, r, d))
                    fail_msg("rank %d (no output) full with %u of %u ring-%d sends queued", r, s->data_q[r][d],
                             sends_of(s, r, d), d);
            s->full[r] = 1;
        }
        for (int role = 0; role < ECCL_ROLE_COUNT; role++)
            if (role != ECCL_ROLE_PREV && role != ECCL_ROLE_NEXT && s->alg->expects(op, role))
                fail_msg("rank %d expects frames in role %d: the pass hears from prev and next only", r, role);
        /* PREV: ring 0's data and the tokens; NEXT: ring 1's data. */
        uint32_t left[2] = {(recvs_of(s, r, 0) - s->data_rx[r][0]) + (tokens_of(c) - s->tok_rx[r]),
                            recvs_of(s, r, 1) - s->data_rx[r][1]};
        for (int d = 0; d < 2; d++) {
            int e = s->alg->expects(op, role_of(d));
            if (e != (left[d] > 0))
                fail_msg("rank %d of %d (%s, %d ring(s)): expects(%s) %d with %u frames still to come", r, s->n,
                         kind_name(c->kind), s->rings, d ? "next" : "prev", e, left[d]);
        }
        if (!s->done[r] && s->alg->complete(&s->p[r])) {
            s->done[r] = 1;
            if (!f) fail_msg("rank %d complete without its own output", r);
            for (int x = 0; x < s->n; x++)
                if (!is_full(s, x)) fail_msg("rank %d complete while rank %d is not full", r, x);
            for (int side = 0; side < 2; side++) {
                for (const eccl_frame *q = s->link[r][side].out_head; q; q = q->next)
                    if (q->payload_len) fail_msg("rank %d complete with a payload still queued", r);
                if (s->land[r][side].open) fail_msg("rank %d complete with a frame landing", r);
                assert_int_equal(s->data_q[r][side], sends_of(s, r, side));
            }
            assert_int_equal(s->tok_q[r], tokens_of(c));
            assert_int_equal(s->tok_rx[r], tokens_of(c));
            expect_bytes(s, r);
        }
    }
}

/* comm's pump: the PREV link is NULL until it exists. A late one opens at
 * random after a pump (round robin: after the first). */
static void pump(sim *s, int i)
{
    if (s->done[i]) return; /* comm retires an op once complete */
    eccl_coll_links l = {{0}, NULL, NULL, 0};
    l.role[ECCL_ROLE_NEXT] = &s->link[i][0];
    l.role[ECCL_ROLE_PREV] = s->prev_open[i] ? &s->link[i][1] : NULL;
    assert_int_equal(s->alg->pump(&s->p[i], &l), ECCL_OK);
    inspect_queued(s, i);
    observe(s);
    if (!s->prev_open[i] && s->late != 2 && (!s->rng || rng_next(&s->rng) % 8 == 0)) s->prev_open[i] = 1;
}

/* The payload model frame m of ring d must carry when the socket takes it. */
static const uint8_t *model_payload(sim *s, int d, const mframe *m)
{
    const pcase *c = &s->c;
    size_t es = es_of(c);
    switch (c->kind) {
    case ECCL_COLL_ALLGATHER: return s->in[m->blk] + (m->e0 - be(c, m->blk)) * es;
    case ECCL_COLL_BROADCAST: return s->in[c->root] + m->e0 * es;
    default:
        chain_partial(c, s->in, d, m->first, m->hops, m->e0, m->ne, s->tmp, NULL);
        if (m->w.flags & ECCL_WIRE_DATA_QUANT) {
            eccl_quant_meta q;
            assert_int_equal(eccl_quant_quantize(c->quant, c->t, s->tmp, m->ne, s->qtmp + QMETA, &q), ECCL_OK);
            assert_int_equal(eccl_wire_qdata_encode(&q, s->qtmp), ECCL_OK);
            return s->qtmp;
        }
        return s->tmp;
    }
}

static void check_sent_frame(sim *s, int i, int d, const eccl_wire_data *w, const uint8_t *payload)
{
    if (s->data_out[i][d] >= sends_of(s, i, d)) fail_msg("rank %d sent more ring-%d frames than it should", i, d);
    const mframe *m = &s->mf[i][d][s->data_out[i][d]];
    if (w->phase != m->w.phase || w->step != m->w.step || w->offset != m->w.offset || w->len != m->w.len ||
        w->flags != m->w.flags || w->ring != m->w.ring)
        fail_msg("rank %d ring-%d frame %u: ring %u phase %u step %u offset %llu len %u flags %u; expected ring %u "
                 "phase %u step %u offset %llu len %u flags %u",
                 i, d, s->data_out[i][d], w->ring, w->phase, w->step, (unsigned long long)w->offset, w->len,
                 w->flags, m->w.ring, m->w.phase, m->w.step, (unsigned long long)m->w.offset, m->w.len, m->w.flags);
    assert_non_null(payload);
    if (memcmp(payload, model_payload(s, d, m), w->len) != 0)
        fail_msg("rank %d of %d (%s %s %s) ring-%d frame %u (block %d): payload differs from the model", i, s->n,
                 kind_name(s->c.kind), eccl_dtype_name(s->c.t), eccl_op_name(s->c.op), d, s->data_out[i][d],
                 m->blk);
    if (s->c.quant != ECCL_QUANT_NONE && !(w->flags & ECCL_WIRE_DATA_QUANT)) s->raw_seen++;
    s->data_out[i][d]++;
}

/* Malformed variants of the frame `w` about to reach rank `to` in `role`:
 * each must be refused with ECCL_ERR_PROTOCOL, leaving the state machine as
 * it was (comm then drops the link and the op fails: restore must still
 * work). */
static void try_bad(sim *s, int to, int role, const eccl_wire_data *w)
{
    eccl_ring_pass before;
    memcpy(&before, &s->p[to], sizeof before);
    void *dst = (void *)&dst;
    eccl_result rc = s->alg->recv(&s->p[to], role, w, &dst);
    if (rc != ECCL_ERR_PROTOCOL)
        fail_msg("rank %d of %d (%s, %d ring(s)): malformed frame (role %d ring %u phase %u step %u offset %llu len "
                 "%u flags %u) got %s",
                 to, s->n, kind_name(s->c.kind), s->rings, role, w->ring, w->phase, w->step,
                 (unsigned long long)w->offset, w->len, w->flags, eccl_strerror(rc));
    if (memcmp(&before, &s->p[to], sizeof before) != 0) fail_msg("rank %d: a refused frame changed the state", to);
    s->rejected++;
}

/* Whether w is the frame rank `to` expects next on ring d (the model's). */
static int is_next_expected(const sim *s, int to, int d, const eccl_wire_data *w)
{
    if (s->data_rx[to][d] >= recvs_of(s, to, d)) return 0;
    const eccl_wire_data *m = &s->mf[upstream(&s->c, d, to)][d][s->data_rx[to][d]].w;
    return w->ring == m->ring && w->phase == m->phase && w->step == m->step && w->offset == m->offset &&
           w->len == m->len && w->flags == m->flags;
}

static void fuzz_frame(sim *s, int to, int d, const eccl_wire_data *good, const eccl_frame *second)
{
    const pcase *c = &s->c;
    size_t es = es_of(c);
    int role = role_of(d), other = role_of(!d);
    eccl_wire_data w;
#define BAD(stmt)                         \
    do {                                  \
        w = *good;                        \
        stmt;                             \
        try_bad(s, to, role, &w);         \
    } while (0)
    /* The wrong role: a ring-0 frame from next, a ring-1 frame from prev,
     * any frame from the tree's roles. (A role with a frame landing reads
     * nothing else: comm's links are serial.) */
    for (int r = 0; r < ECCL_ROLE_COUNT; r++)
        if (r != role && (r != other || !s->land[to][!d].open)) try_bad(s, to, r, good);
    BAD(w.ring = (uint8_t)!d);
    /* ... relabelled for the other ring, on the other role. */
    w = *good;
    w.ring = (uint8_t)!d;
    if (!s->land[to][!d].open && !is_next_expected(s, to, !d, &w)) try_bad(s, to, other, &w);
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
        BAD(w.offset += maxbn(c) * es);     /* another block */
        BAD(w.offset += 1ull << 40);
        BAD(w.len -= (uint32_t)es);
        BAD(w.len += (uint32_t)es);
        BAD(w.len = 0);
        BAD(w.flags |= ECCL_WIRE_DATA_BULK);
        size_t ne = good->flags & ECCL_WIRE_DATA_QUANT ? good->len - QMETA : good->len / es;
        if (c->quant == ECCL_QUANT_NONE) {
            BAD(w.flags = ECCL_WIRE_DATA_QUANT); /* a plain call never takes codes */
            BAD((w.flags = ECCL_WIRE_DATA_QUANT, w.len = (uint32_t)(QMETA + ne)));
        } else if (QMETA + ne != ne * es) {
            /* Codes with a raw slice's length, a raw slice with the codes'
             * (either way round: raw with its own length is fine). */
            BAD(w.flags ^= ECCL_WIRE_DATA_QUANT);
            BAD(w.len = (uint32_t)(w.flags & ECCL_WIRE_DATA_QUANT ? ne * es : QMETA + ne));
        }
        /* The frame after it, first: FIFO broken. */
        if (second) {
            eccl_wire_data w2;
            decode_frame(second, &w2);
            if (w2.phase != ECCL_PHASE_DONE) try_bad(s, to, role, &w2);
        }
    }
    /* The frame the rank took last on this ring, again. */
    if (s->has_last_rx[to][d]) try_bad(s, to, role, &s->last_rx[to][d]);
    /* A token on ring 1, where there are none. */
    if (!s->land[to][1].open) {
        eccl_wire_data t = {.tag = 77, .epoch = 3, .ring = 1, .phase = ECCL_PHASE_DONE,
                            .step = (uint16_t)(s->tok_rx[to] + 1)};
        try_bad(s, to, ECCL_ROLE_NEXT, &t);
    }
    /* Data to every rank and ring that receives none (the chains' first
     * ranks; ring 1 of a one-ring call). */
    for (int r = 0; r < s->n; r++)
        for (int e = 0; e < 2; e++) {
            if (recvs_of(s, r, e) || !c->count || s->land[r][e].open) continue;
            eccl_wire_data x = {.tag = 77, .epoch = 3, .ring = (uint8_t)e, .phase = phase_of(c->kind), .step = 0,
                                .offset = pe(c, e, 0) * es, .len = (uint32_t)(slice_n(c) * es)};
            try_bad(s, r, role_of(e), &x);
        }
#undef BAD
}

/* Where a payload lands: the copying kinds straight into recvbuf at its
 * offset; the reduce kinds' partials into scratch, except those that
 * become output of an out-of-place call (the reduce's root, the
 * reduce-scatter's last step), which land where the output goes; codes
 * into the stage; and never on bytes another frame landing in the rank is
 * using. */
static void check_dst(sim *s, int to, int d, const eccl_wire_data *w, const uint8_t *dst)
{
    const pcase *c = &s->c;
    size_t es = es_of(c);
    if (w->flags & ECCL_WIRE_DATA_QUANT) {
        const uint8_t *st = s->aux[to][AUX_QSTAGE];
        if (!st || dst < st || dst + w->len > st + s->aux_len[to][AUX_QSTAGE])
            fail_msg("rank %d: ring-%d codes land outside the stage it asked for", to, d);
    } else if (reduce_kind(c->kind)) {
        int output = c->kind == ECCL_COLL_REDUCE ? (uint32_t)to == c->root : w->step == s->n - 2;
        const uint8_t *want = !output || c->in_place ? s->aux[to][AUX_SCRATCH] + w->offset
                              : c->kind == ECCL_COLL_REDUCE ? s->recv[to] + w->offset
                                                            : s->recv[to] + w->offset - be(c, to) * es;
        if (dst != want)
            fail_msg("rank %d: a ring-%d partial lands off %s", to, d, want == s->aux[to][AUX_SCRATCH] + w->offset ? "scratch" : "its output");
    } else if (dst != s->recv[to] + w->offset) {
        fail_msg("rank %d: a ring-%d %s frame does not land at its offset in recvbuf", to, d, kind_name(c->kind));
    }
    const landing *o = &s->land[to][!d];
    if (o->open && o->w.len && dst < o->dst + o->w.len && o->dst < dst + w->len)
        fail_msg("rank %d: frames of both rings land on the same bytes", to);
}

static eccl_result deliver_end(sim *s, int i, int side)
{
    int to = peer_of(s, i, side);
    landing *l = &s->land[to][side];
    eccl_wire_data w = l->w;
    if (w.len) memcpy(l->dst + l->got, s->lbuf[i][side] + l->got, w.len - l->got);
    l->open = 0;
    assert_int_equal(s->alg->recv_done(&s->p[to], role_of(side), &w), ECCL_OK);
    if (w.phase == ECCL_PHASE_DONE) {
        s->tok_rx[to]++;
    } else {
        s->data_rx[to][side]++;
        s->last_rx[to][side] = w;
        s->has_last_rx[to][side] = 1;
    }
    observe(s);
    return ECCL_OK;
}

/* Takes the head frame off rank i's link on `side` and hands it to the
 * rank at the other end; `split`: half its payload lands now, the rest
 * later (deliver_end). ECCL_ERR_AGAIN: stopped mid-frame (s->mid). */
static eccl_result deliver_begin(sim *s, int i, int side, int split)
{
    eccl_chan *ch = &s->link[i][side];
    const eccl_frame *f = ch->out_head;
    eccl_wire_data w;
    decode_frame(f, &w);
    int to = peer_of(s, i, side), role = role_of(side);
    landing *l = &s->land[to][side];
    assert_false(l->open);
    if (w.phase != ECCL_PHASE_DONE) check_sent_frame(s, i, side, &w, f->payload);
    if (w.len) memcpy(s->lbuf[i][side], f->payload, w.len);
    if (s->fuzz) fuzz_frame(s, to, side, &w, f->next);
    pop_frame(ch);
    s->q_seen[i][side]--;
    s->frames++;
    /* comm hands a frame to the op only while it expects one. */
    if (!s->alg->expects(&s->p[to], role))
        fail_msg("rank %d got a ring-%d frame it does not expect (role %d)", to, side, role);
    void *dst = NULL;
    eccl_result rc = s->alg->recv(&s->p[to], role, &w, &dst);
    if (rc != ECCL_OK)
        fail_msg("rank %d refused a well-formed frame (role %d ring %u phase %u step %u offset %llu len %u): %s", to,
                 role, w.ring, w.phase, w.step, (unsigned long long)w.offset, w.len, eccl_strerror(rc));
    if (w.len) {
        assert_non_null(dst);
        check_dst(s, to, side, &w, dst);
    } else {
        assert_null(dst);
    }
    l->open = 1;
    l->w = w;
    l->dst = dst;
    l->got = 0;
    if (w.len && s->mid && s->frames == s->stop) {
        memcpy(dst, s->lbuf[i][side], w.len / 2);
        memset((uint8_t *)dst + w.len / 2, 0xee, w.len - w.len / 2);
        return ECCL_ERR_AGAIN;
    }
    if (split && w.len >= 2) {
        l->got = w.len / 2;
        memcpy(dst, s->lbuf[i][side], l->got);
        observe(s);
        return ECCL_OK;
    }
    return deliver_end(s, i, side);
}

static eccl_result deliver(sim *s, int i, int side) { return deliver_begin(s, i, side, 0); }

static int all_done(const sim *s)
{
    for (int r = 0; r < s->n; r++)
        if (!s->done[r]) return 0;
    return 1;
}

/* Links (2 * rank + side) with a frame to take or one landing. */
static int active_links(const sim *s, int *out)
{
    int m = 0;
    for (int i = 0; i < s->n; i++)
        for (int side = 0; side < 2; side++)
            if (s->link[i][side].out_head || s->land[peer_of(s, i, side)][side].open) out[m++] = 2 * i + side;
    return m;
}

static eccl_result step_link(sim *s, int id, int split)
{
    int i = id / 2, side = id % 2;
    if (s->land[peer_of(s, i, side)][side].open) return deliver_end(s, i, side);
    if (s->frames >= s->stop) return ECCL_ERR_AGAIN;
    return deliver_begin(s, i, side, split);
}

/* Nothing to deliver: a late PREV link opens (else the run is stuck). */
static int open_a_prev(sim *s)
{
    for (int j = 0; j < s->n; j++) {
        int i = (int)((s->rng ? rng_next(&s->rng) : 0) % (uint64_t)s->n + (uint64_t)j) % s->n;
        if (!s->prev_open[i]) {
            s->prev_open[i] = 1;
            return 1;
        }
    }
    return 0;
}

/* Runs until every rank completes (ECCL_OK) or frame s->stop is reached
 * (ECCL_ERR_AGAIN: that many frames were taken, the last one whole
 * unless s->mid, others perhaps landing). */
static eccl_result sim_run(sim *s)
{
    int links[2 * MAXN];
    for (;;) {
        int m = active_links(s, links);
        if (all_done(s)) {
            if (m) fail_msg("every rank complete with frames left on a link");
            return ECCL_OK;
        }
        if (s->rng == 0 || m == 0) {
            /* Random orders pump from a random rank on and stop at the
             * first that sends, so a rank may take frames before its first
             * pump: comm replays frames that came before the call so. */
            int from = s->rng ? (int)(rng_next(&s->rng) % (uint64_t)s->n) : 0, closed = 0;
            for (int j = 0; j < s->n; j++) closed |= !s->prev_open[j];
            for (int j = 0; j < s->n && (!s->rng || !active_links(s, links)); j++) pump(s, (from + j) % s->n);
            m = active_links(s, links);
            if (m == 0 && all_done(s)) continue; /* nothing to send at all (count 0, N == 2) */
            if (m == 0) {
                /* A late PREV link that opened during these pumps has
                 * not been used yet: go round again. */
                if (!open_a_prev(s) && !closed) fail_msg("stuck: no frame queued and not every rank complete");
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
    const uint8_t *regs[2 + AUX_COUNT] = {s->send_reg[r], s->recv_reg[r]};
    size_t lens[2 + AUX_COUNT] = {s->send_len[r], s->recv_len[r]};
    uint8_t guard[2 + AUX_COUNT] = {SEND_GUARD, RECV_GUARD};
    static const char *const names[2 + AUX_COUNT] = {"send", "recv", "scratch", "backup", "codes image", "stage"};
    for (int a = 0; a < AUX_COUNT; a++) {
        regs[2 + a] = s->aux_reg[r][a];
        lens[2 + a] = with_guards(s->aux_len[r][a]);
        guard[2 + a] = AUX_GUARD;
    }
    for (int k = 0; k < 2 + AUX_COUNT; k++) {
        if (!regs[k]) continue;
        for (size_t i = 0; i < GUARD; i++)
            if (regs[k][i] != guard[k] || regs[k][lens[k] - 1 - i] != guard[k])
                fail_msg("rank %d: a byte next to its %s buffer was written", r, names[k]);
    }
}

/* After a run: every output, the inputs untouched, byte counts. */
static void check_results(sim *s)
{
    const pcase *c = &s->c;
    size_t es = es_of(c);
    for (int r = 0; r < s->n; r++) {
        size_t len;
        const uint8_t *out = out_of(s, r, &len);
        if (out && memcmp(out, s->want[r], len) != 0) {
            size_t e = 0;
            while (memcmp(out + e * es, s->want[r] + e * es, es) == 0) e++;
            fail_msg("%s n=%d root=%u %s %s count=%zu v=%d quant=%d in_place=%d rings=%d: rank %d element %zu wrong",
                     kind_name(c->kind), s->n, c->root, eccl_dtype_name(c->t), eccl_op_name(c->op), c->count, c->v,
                     c->quant, c->in_place, s->rings, r, e);
        }
        /* Quantised: each value within the per-hop bound of the exact sum. */
        if (out && c->quant != ECCL_QUANT_NONE) {
            size_t miss = quant_miss(c, r, out);
            if (miss != SIZE_MAX) fail_msg("rank %d element %zu is off the per-hop bound", r, miss);
        }
        check_guards(s, r);
        /* sendbuf is never written, but for the block of it that is the
         * output in place (already checked above). */
        if (s->send_reg[r]) {
            size_t skip_at = SIZE_MAX, skip = 0;
            if (c->in_place && c->kind == ECCL_COLL_REDUCE_SCATTER) {
                skip_at = GUARD + be(c, r) * es;
                skip = bn(c, r) * es;
            }
            if (c->in_place && c->kind == ECCL_COLL_REDUCE && (uint32_t)r == c->root) {
                skip_at = GUARD;
                skip = c->count * es;
            }
            size_t len1 = skip_at < s->send_len[r] ? skip_at : s->send_len[r];
            size_t from2 = skip_at < s->send_len[r] ? skip_at + skip : s->send_len[r];
            if (memcmp(s->send_reg[r], s->orig_send[r], len1) != 0 ||
                memcmp(s->send_reg[r] + from2, s->orig_send[r] + from2, s->send_len[r] - from2) != 0)
                fail_msg("%s n=%d in_place=%d: rank %d's sendbuf was written", kind_name(c->kind), s->n,
                         c->in_place, r);
        }
        expect_bytes(s, r);
        assert_true(s->full[r] && s->done[r]);
        assert_false(s->alg->expects(&s->p[r], ECCL_ROLE_PREV));
        assert_false(s->alg->expects(&s->p[r], ECCL_ROLE_NEXT));
        for (int d = 0; d < 2; d++) assert_int_equal(s->data_rx[r][d], recvs_of(s, r, d));
    }
}

/* Every rank's restore: in place, recvbuf (and so sendbuf) bit for bit as
 * before; out of place, sendbuf untouched (all a retry reads; the output
 * is then unspecified, eccl.h). */
static void restore_all(sim *s)
{
    for (int r = 0; r < s->n; r++) s->alg->restore(&s->p[r]);
    for (int r = 0; r < s->n; r++) {
        if (s->c.in_place && s->recv_reg[r] && memcmp(s->recv_reg[r], s->orig_recv[r], s->recv_len[r]) != 0)
            fail_msg("%s n=%d root=%u count=%zu v=%d in_place=%d rings=%d, stopped at frame %zu%s: rank %d recvbuf "
                     "not restored",
                     kind_name(s->c.kind), s->n, s->c.root, s->c.count, s->c.v, s->c.in_place, s->rings, s->frames,
                     s->mid ? " mid-frame" : "", r);
        if (s->send_reg[r] && memcmp(s->send_reg[r], s->orig_send[r], s->send_len[r]) != 0)
            fail_msg("%s n=%d count=%zu in_place=%d, stopped at frame %zu: rank %d sendbuf not as before",
                     kind_name(s->c.kind), s->n, s->c.count, s->c.in_place, s->frames, r);
        check_guards(s, r);
    }
}

/* run_case flags */
#define FUZZ 1
#define LATE 2

static uint32_t last_raw_seen; /* of the last run_case */

/* One whole call; returns the frames it took. */
static size_t run_case(const pcase *c, uint64_t sched_seed, int flags)
{
    sim *s = malloc(sizeof *s);
    assert_non_null(s);
    sim_init(s, c, sched_seed, flags & LATE ? 1 : 0);
    s->fuzz = flags & FUZZ;
    assert_int_equal(sim_run(s), ECCL_OK);
    check_results(s);
    if (s->fuzz && s->frames) assert_true(s->rejected > 0);
    /* Every frame expected: one more is refused, whatever it is. */
    for (int r = 0; r < s->n; r++) {
        for (int d = 0; d < 2; d++)
            if (s->has_last_rx[r][d]) try_bad(s, r, role_of(d), &s->last_rx[r][d]);
        eccl_wire_data t = {.tag = 77, .epoch = 3, .phase = ECCL_PHASE_DONE, .step = (uint16_t)s->n};
        try_bad(s, r, ECCL_ROLE_PREV, &t);
        t.step = (uint16_t)(s->n - 1);
        try_bad(s, r, ECCL_ROLE_PREV, &t);
        t.ring = 1;
        try_bad(s, r, ECCL_ROLE_NEXT, &t);
    }
    size_t frames = s->frames;
    last_raw_seen = s->raw_seen;
    sim_fini(s);
    free(s);
    return frames;
}

/* Stopped after every possible number of delivered frames (from `first`, every stride-th),
 * whole or mid-frame, every rank's restore gives recvbuf back bit for bit
 * (in place; out of place its output is unspecified), and sendbuf is as it was. */
static void restore_case(const pcase *c, uint64_t sched_seed, size_t first, size_t stride, int flags)
{
    size_t total = run_case(c, sched_seed, flags);
    for (size_t stop = first; stop <= total; stop += stride) {
        for (int mid = 0; mid < 2; mid++) {
            if (mid && stop == 0) continue;
            sim *s = malloc(sizeof *s);
            assert_non_null(s);
            sim_init(s, c, sched_seed, flags & LATE ? 1 : 0);
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
    /* ... and ring 1's order is ring 0's backwards: another order. */
    pcase c = mk(ECCL_COLL_REDUCE_SCATTER, R, ECCL_F32, ECCL_SUM, C, 0, 0, 0);
    chain_partial(&c, (const uint8_t *const *)in, 0, 1, R, 0, C, a, NULL);
    chain_partial(&c, (const uint8_t *const *)in, 1, pos_of(&c, 1, 0) + 1, R, 0, C, b, NULL);
    assert_true(memcmp(a, b, sizeof a) != 0);
    for (int r = 0; r < R; r++) free(in[r]);
}

/* The model's geometry, by hand: positions and blocks on ring 1, the
 * chains' order both ways, halves, the threshold. */
static void test_model(void **state)
{
    (void)state;
    pcase c = mk(ECCL_COLL_ALLGATHER, 5, ECCL_U8, ECCL_SUM, 7, 0, 0, 0);
    static const int pos1[5] = {0, 4, 3, 2, 1};
    for (int r = 0; r < 5; r++) {
        assert_int_equal(pos_of(&c, 1, r), pos1[r]);
        assert_int_equal(rank_at(&c, 1, pos1[r]), r);
        assert_int_equal(upstream(&c, 0, r), mod(r - 1, 5));
        assert_int_equal(upstream(&c, 1, r), mod(r + 1, 5));
    }
    /* The broadcast from 3 runs 3, 4, 0, 1, 2 on ring 0 and 3, 2, 1, 0, 4 on
     * ring 1; the reduce to 3 runs 4, 0, 1, 2, 3 and 2, 1, 0, 4, 3. */
    c = mk(ECCL_COLL_BROADCAST, 5, ECCL_U8, ECCL_SUM, 7, 0, 3, 0);
    static const int b0[5] = {3, 4, 0, 1, 2}, b1[5] = {3, 2, 1, 0, 4};
    for (int k = 0; k < 5; k++) {
        assert_int_equal(dist_of(&c, 0, b0[k]), k);
        assert_int_equal(dist_of(&c, 1, b1[k]), k);
    }
    c.kind = ECCL_COLL_REDUCE;
    static const int r0[5] = {4, 0, 1, 2, 3}, r1[5] = {2, 1, 0, 4, 3};
    for (int k = 0; k < 5; k++) {
        assert_int_equal(dist_of(&c, 0, r0[k]), k);
        assert_int_equal(dist_of(&c, 1, r1[k]), k);
    }
    /* 256 KiB moved takes two rings, a byte less one. */
    c = mk(ECCL_COLL_ALLGATHER, 4, ECCL_F32, ECCL_SUM, TWO_RINGS / 16, 0, 0, 0);
    assert_int_equal(two_rings_count(c.kind, 4, ECCL_F32), c.count);
    assert_int_equal(rings_of(&c), 2);
    assert_int_equal(pn(&c, 0, 1), c.count / 2);
    c.count--;
    assert_int_equal(rings_of(&c), 1);
    c.count = TWO_RINGS / 16 + 1; /* odd: ring 0 has the extra element */
    assert_int_equal(pn(&c, 0, 2), c.count / 2 + 1);
    assert_int_equal(pn(&c, 1, 2), c.count / 2);
    assert_int_equal(pe(&c, 1, 2), 2 * c.count + c.count / 2 + 1);
    c = mk(ECCL_COLL_REDUCE, 4, ECCL_F32, ECCL_SUM, TWO_RINGS / 4, 0, 0, 0); /* the chains: the block alone */
    assert_int_equal(rings_of(&c), 2);
    c.count--;
    assert_int_equal(rings_of(&c), 1);
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
                    a[i]->have_full && a[i]->restore && a[i]->bytes);
    }
}

/* Every kind, world, dtype and op on small blocks (0, 1 and 7 elements: one
 * ring), in and out of place, several roots, each under its own order. */
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
                                pcase c = mk(kinds[ki], ns[ni], (eccl_dtype)t, (eccl_op)op, counts[ci], ip,
                                             roots[ri], seed);
                                /* Alternate round robin and random orders,
                                 * some with PREV links opening late. */
                                run_case(&c, seed % 2 ? seed * 2654435761u : 0, seed % 3 ? 0 : LATE);
                                seed++;
                            }
                }
}

/* Shares of several 1 MiB slices (blocks over 2 MiB: two rings), one a
 * whole multiple of the slice and others not, so the pipeline overlaps
 * steps, the last slice is short, and ring 1's shorter share skips ring 0's
 * last slot. */
static void test_multislice(void **state)
{
    (void)state;
    static const struct {
        eccl_dtype t;
        eccl_op op;
        size_t count;
    } sz[] = {
        {ECCL_U8, ECCL_SUM, 2 * SLICE + 1},          /* ring 0: 2 slices, the last one byte; ring 1: 1 */
        {ECCL_F32, ECCL_SUM, SLICE / 4 * 4},         /* exactly 2 slices each */
        {ECCL_F64, ECCL_MAX, SLICE / 8 * 2 + 7},     /* 2 slices each, the last 4 and 3 elements */
        {ECCL_BF16, ECCL_AVG, SLICE / 2 * 4 + 1001}, /* 3 slices each */
    };
    uint64_t seed = 500;
    for (size_t ki = 0; ki < NK; ki++)
        for (size_t ni = 0; ni < NN; ni++)
            for (size_t si = 0; si < sizeof sz / sizeof *sz; si++) {
                /* Keep it fast: the 4 MiB blocks take two ranks (three
                 * for the chains), the wider worlds one size each. */
                int chain = is_chain_kind(kinds[ki]);
                if (ns[ni] == 8 && (!chain || si != 0)) continue;
                if (ns[ni] == 5 && si != (chain ? 2 : 0)) continue;
                if (ns[ni] == 3 && (si == 1 || (si == 3 && !chain))) continue;
                pcase c = mk(kinds[ki], ns[ni], sz[si].t, sz[si].op, sz[si].count, (int)((si + ni) % 2),
                             (uint32_t)(si % (size_t)ns[ni]), seed);
                run_case(&c, seed % 3 ? seed : 0, seed % 2 ? LATE : 0);
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
            pcase c = mk(kinds[ki], ns[ni], ECCL_F32, ECCL_SUM, 13, (int)(ni % 2), (uint32_t)(ni % 2), 900 + ki);
            for (uint64_t seed = 1; seed <= 40; seed++) run_case(&c, seed * 0x2545F4914F6CDD1Dull, 0);
        }
    /* Several slices in flight on both rings, so orders interleave within
     * a step too. */
    static const int few[] = {3, 5};
    for (size_t ki = 0; ki < NK; ki++)
        for (int a = 0; a < 2; a++) {
            pcase c = mk(kinds[ki], few[a], ECCL_F32, ECCL_AVG, SLICE / 4 * 2 + 5, a, 1, 950 + ki);
            for (uint64_t seed = 1; seed <= 3; seed++) run_case(&c, seed * 7919, seed == 2 ? LATE : 0);
        }
}

/* Stopped after every possible number of delivered frames, whole or
 * mid-frame, every rank's restore gives recvbuf back bit for bit (in place),
 * and sendbuf is as it was. */
static void test_restore_anywhere(void **state)
{
    (void)state;
    for (size_t ki = 0; ki < NK; ki++)
        for (size_t ni = 0; ni < NN; ni++)
            for (int ip = 0; ip < 2; ip++) {
                uint32_t root = (uint32_t)(ns[ni] - 1 - ip);
                pcase c = mk(kinds[ki], ns[ni], ECCL_I32, ECCL_SUM, 7, ip, root, 300 + ni);
                restore_case(&c, 0, 0, 1, 0);
                c.t = ECCL_F16;
                c.op = ECCL_AVG;
                c.count = 1;
                restore_case(&c, 4242 + ki, 0, 1, 0);
            }
    /* Several slices: stops inside a step's pipeline, on both rings. (Three
     * ranks of the all-gather and reduce-scatter move 6 MiB a run: every
     * third stop, in place; test_v_layouts stops inside two-slice blocks
     * of three ranks too.) */
    for (size_t ki = 0; ki < NK; ki++)
        for (int ip = 0; ip < 2; ip++) {
            pcase c = mk(kinds[ki], 3, ECCL_U16, ECCL_MAX, SLICE + 9, ip, (uint32_t)ip, 777);
            if (is_chain_kind(c.kind)) restore_case(&c, 99, 0, 1, 0);
            else if (ip) restore_case(&c, 99, ki, 3, 0);
            c.n = 2;
            restore_case(&c, 0, 0, 1, ip ? LATE : 0);
        }
}

/* Malformed frames at every point of a run: the wrong collective's phase,
 * step, offset, length, QUANT or BULK flag, ring, role (a ring-1 frame from
 * prev, a ring-0 frame from next, either one relabelled), a token out of
 * order, at N == 2 or on ring 1, the frame after the next (FIFO broken),
 * the last frame again, data to a rank and ring that receives none; and
 * after the last expected frame, any frame. Each is refused with
 * ECCL_ERR_PROTOCOL and changes nothing. */
static void test_malformed(void **state)
{
    (void)state;
    for (size_t ki = 0; ki < NK; ki++)
        for (size_t ni = 0; ni < NN; ni++) {
            pcase c = mk(kinds[ki], ns[ni], ECCL_I16, ECCL_MIN, 5, (int)(ni % 2), (uint32_t)(ni % 3), 60 + ni);
            run_case(&c, 0, FUZZ);
            run_case(&c, 31337, FUZZ);
            c.count = SLICE + 3; /* two rings, two slices each */
            if (ns[ni] <= 3) run_case(&c, 0, FUZZ);
        }
}

/* Every data frame delivered (both rings'), no token yet. */
static void deliver_data_only(sim *s)
{
    for (;;) {
        for (int i = 0; i < s->n; i++) pump(s, i);
        int moved = 0;
        for (int i = 0; i < s->n; i++)
            for (int side = 0; side < 2; side++) {
                const eccl_frame *f = s->link[i][side].out_head;
                if (!f) continue;
                eccl_wire_data w;
                decode_frame(f, &w);
                if (w.phase == ECCL_PHASE_DONE) continue;
                assert_int_equal(deliver(s, i, side), ECCL_OK);
                moved = 1;
            }
        if (!moved) break;
    }
}

/* The completion round, step by step: with every data frame delivered and
 * every rank full, no rank completes until its token N-1, two ranks
 * included (one token each way: a link that breaks without a loss leaves
 * both ranks, who must agree). Only PREV waits for tokens: NEXT expects
 * nothing more. */
static void test_completion(void **state)
{
    (void)state;
    for (size_t ki = 0; ki < NK; ki++)
        for (int n = 2; n <= 5; n++)
            for (int two = 0; two < 2; two++) {
                size_t count = two ? two_rings_count(kinds[ki], n, ECCL_U32) : 3;
                pcase c = mk(kinds[ki], n, ECCL_U32, ECCL_SUM, count, 0, (uint32_t)(n - 1), 5);
                sim *s = malloc(sizeof *s);
                assert_non_null(s);
                sim_init(s, &c, 0, 0);
                assert_int_equal(s->rings, two ? 2 : 1);
                deliver_data_only(s);
                for (int r = 0; r < n; r++) {
                    assert_true(is_full(s, r));
                    for (int d = 0; d < 2; d++) assert_int_equal(s->data_rx[r][d], recvs_of(s, r, d));
                    assert_false(s->alg->complete(&s->p[r]));
                    assert_true(s->alg->expects(&s->p[r], ECCL_ROLE_PREV));
                    assert_false(s->alg->expects(&s->p[r], ECCL_ROLE_NEXT));
                }
                /* Tokens now, ring 0 alone: each rank completes with token N-1 exactly. */
                for (int i = 0; i < n; i++) {
                    assert_non_null(s->link[i][0].out_head);
                    assert_null(s->link[i][1].out_head);
                }
                assert_int_equal(sim_run(s), ECCL_OK);
                for (int r = 0; r < n; r++) assert_int_equal(s->tok_rx[r], n - 1);
                check_results(s);
                sim_fini(s);
                free(s);
            }
}

/* The queue's cap (ECCL_RING_MAX_QUEUED, per link) holds sends back: a
 * rank may be full with sends still to queue. A reduce's non-root has no
 * output: it is full once every one of its sends, both rings', is queued
 * (not yet taken by the socket), and not before. No rank completes with a
 * send not yet queued, even once its queues ran dry. */
static void test_queue_cap(void **state)
{
    (void)state;
    /* 6 slices a ring: more than the cap lets out at once on either link. */
    size_t count = 12 * (size_t)SLICE;
    assert_true(count / 2 > ECCL_RING_MAX_QUEUED);
    pcase c = mk(ECCL_COLL_REDUCE, 2, ECCL_U8, ECCL_SUM, count, 0, 0, 8);
    sim *s = malloc(sizeof *s);
    assert_non_null(s);
    sim_init(s, &c, 0, 0);
    assert_int_equal(s->rings, 2);
    int start = 1; /* the first rank of both chains to root 0 of two: receives nothing */
    assert_int_equal(sends_of(s, start, 0), 6);
    assert_int_equal(sends_of(s, start, 1), 6);
    assert_false(is_full(s, start));
    pump(s, start);
    for (int d = 0; d < 2; d++) assert_true(s->data_q[start][d] > 0 && s->data_q[start][d] < 6);
    assert_false(is_full(s, start));
    /* Ring 0 drained alone: all of it queued, ring 1 still held back. */
    while (s->data_q[start][0] < 6) {
        assert_false(is_full(s, start));
        assert_int_equal(deliver(s, start, 0), ECCL_OK);
        pump(s, start);
    }
    assert_true(s->data_q[start][1] < 6);
    assert_false(is_full(s, start));
    while (s->data_q[start][1] < 6) {
        assert_false(is_full(s, start));
        assert_int_equal(deliver(s, start, 1), ECCL_OK);
        pump(s, start);
    }
    /* All queued, some still on the links: full, not complete. */
    assert_non_null(s->link[start][1].out_head);
    assert_true(is_full(s, start));
    assert_false(s->alg->complete(&s->p[start]));
    assert_int_equal(sim_run(s), ECCL_OK);
    check_results(s);
    sim_fini(s);

    /* A broadcast's root of two is full at once (its output is its own
     * copy) and has no token to wait for: with both its queues drained and
     * sends still held back, it must not complete. */
    pcase b = mk(ECCL_COLL_BROADCAST, 2, ECCL_U8, ECCL_SUM, count, 0, 0, 9);
    sim_init(s, &b, 0, 0);
    pump(s, 0);
    assert_true(is_full(s, 0));
    assert_true(s->data_q[0][0] < 6 && s->data_q[0][1] < 6);
    while (s->link[0][0].out_head) assert_int_equal(deliver(s, 0, 0), ECCL_OK);
    assert_false(s->alg->complete(&s->p[0]));
    while (s->link[0][1].out_head) assert_int_equal(deliver(s, 0, 1), ECCL_OK);
    assert_false(s->alg->complete(&s->p[0]));
    assert_int_equal(sim_run(s), ECCL_OK);
    check_results(s);
    sim_fini(s);
    free(s);

    /* Every kind, two and three ranks, under random orders that let queues
     * drain between pumps. */
    for (size_t ki = 0; ki < NK; ki++)
        for (int n = 2; n <= 3; n++) {
            pcase r = mk(kinds[ki], n, ECCL_U8, ECCL_MAX, count / 2 + 5, n == 3, 1, 10 + ki);
            run_case(&r, 17 + ki, 0);
        }
}

/* Sizes either side of ECCL_RING_TWO_RINGS_MIN_BYTES moved (the largest
 * block's bytes times N for the all-gather and reduce-scatter, the block's
 * for the chains): an element below takes ring 0 alone, the threshold and
 * an element above both rings, with even and odd halves; every kind, world
 * and a mix of dtypes, in order and at random, PREV links late. */
static void test_two_rings(void **state)
{
    (void)state;
    static const eccl_dtype ts[] = {ECCL_U8, ECCL_F32, ECCL_BF16, ECCL_I64, ECCL_F64};
    static const int wn[] = {2, 3, 4, 5, 8};
    uint64_t seed = 1200;
    for (size_t ki = 0; ki < NK; ki++)
        for (int wi = 0; wi < 5; wi++) {
            int n = wn[wi];
            eccl_dtype t = ts[(ki + (size_t)wi) % 5];
            eccl_op op = is_float(t) ? (wi % 2 ? ECCL_AVG : ECCL_SUM) : (wi % 2 ? ECCL_SUM : ECCL_MIN);
            size_t hi = two_rings_count(kinds[ki], n, t);
            for (int dc = -1; dc <= 1; dc++) {
                pcase c = mk(kinds[ki], n, t, op, hi + (size_t)(ptrdiff_t)dc, (wi + dc + 1) % 2,
                             (uint32_t)((2 * wi + 1) % n), seed++);
                assert_int_equal(rings_of(&c), dc < 0 ? 1 : 2);
                run_case(&c, 0, 0);
                run_case(&c, seed * 0x9E3779B97F4A7C15ull, LATE);
            }
        }
}

/* Pumps everyone and delivers whatever is queued, until nothing moves. */
static void drain(sim *s)
{
    for (int moved = 1; moved;) {
        moved = 0;
        for (int i = 0; i < s->n; i++) pump(s, i);
        for (int i = 0; i < s->n; i++)
            for (int side = 0; side < 2; side++)
                while (s->link[i][side].out_head) {
                    assert_int_equal(deliver(s, i, side), ECCL_OK);
                    moved = 1;
                }
    }
}

/* comm hands pump a NULL PREV link until that link exists: ring 1's frames
 * wait, nothing else does. With no PREV link at all, ring 0 runs to its end
 * while no rank is full (but a broadcast's root: its own copy) and none
 * completes; then, the links opening one by one, a rank whose link is still
 * missing has sent nothing on ring 1, so its neighbour down ring 1 is not
 * full; once all are open the call ends as any other. */
static void test_late_prev(void **state)
{
    (void)state;
    static const int wn[] = {2, 3, 5};
    for (size_t ki = 0; ki < NK; ki++)
        for (int wi = 0; wi < 3; wi++) {
            int n = wn[wi];
            pcase c = mk(kinds[ki], n, ECCL_F32, ECCL_SUM, two_rings_count(kinds[ki], n, ECCL_F32) + 1, 0,
                         (uint32_t)(1 % n), 1300 + ki);
            sim *s = malloc(sizeof *s);
            assert_non_null(s);
            sim_init(s, &c, 0, 1);
            s->late = 2; /* they open here alone */
            assert_int_equal(s->rings, 2);
            drain(s);
            for (int r = 0; r < n; r++) {
                assert_int_equal(s->data_rx[r][0], recvs_of(s, r, 0));
                assert_int_equal(s->data_q[r][1], 0);
                assert_int_equal(s->data_rx[r][1], 0);
                assert_int_equal(is_full(s, r), c.kind == ECCL_COLL_BROADCAST && (uint32_t)r == c.root);
                assert_false(s->done[r]);
                assert_int_equal(s->alg->expects(&s->p[r], ECCL_ROLE_NEXT), recvs_of(s, r, 1) > 0);
            }
            for (int k = 0; k < n; k++) {
                s->prev_open[n == 2 ? 1 - k : (k * 2 + 1) % n] = 1; /* every rank, shuffled (n odd) */
                drain(s);
                for (int r = 0; r < n; r++)
                    if (!s->prev_open[r] && sends_of(s, r, 1)) {
                        assert_int_equal(s->data_q[r][1], 0);
                        assert_int_equal(s->data_rx[mod(r - 1, n)][1], 0);
                        assert_false(is_full(s, mod(r - 1, n)));
                        assert_false(s->done[r]);
                    }
            }
            assert_int_equal(sim_run(s), ECCL_OK);
            check_results(s);
            sim_fini(s);
            free(s);
        }
}

/* The v layouts: blocks of any size, empty ones included, where the
 * all-gatherv's displacements put them (out of order, with gaps nobody
 * may write); the reduce-scatterv's back to back. */
#define BIGV (SLICE / 4 * 2 + 3)
static const struct vlayout {
    int n;
    eccl_dtype t;
    size_t vc[MAXN], vd[MAXN];
} vlayouts[] = {
    /* one ring: gaps, an empty block sitting in one */
    {4, ECCL_I32, {3, 0, 7, 1}, {0, 5, 10, 20}},
    /* two rings: a block of two slices each way, an empty one, one of 5
     * elements (3 and 2) */
    {3, ECCL_F32, {BIGV, 0, 5}, {0, BIGV + 10, BIGV + 20}},
    /* one block in five, displacements out of order */
    {5, ECCL_U16, {0, 0, 9, 0, 0}, {40, 3, 17, 0, 26}},
    /* nothing at all */
    {3, ECCL_U8, {0, 0, 0}, {0, 0, 0}},
    /* two rings by the largest block alone (64 KiB times 4, though the
     * blocks hold 64 KiB + 1 in all); a 1-element block goes ring 0 alone */
    {4, ECCL_U8, {65536, 0, 0, 1}, {10, 65550, 65560, 0}},
    /* ... a byte less: one ring */
    {4, ECCL_U8, {65535, 0, 0, 1}, {10, 65550, 65560, 0}},
    /* two ranks, two rings, the blocks in reverse order */
    {2, ECCL_F64, {1, 40000}, {40001, 0}},
    /* eight ranks, two rings, small blocks whose ring-1 halves are 0 to 3
     * elements, 3-element gaps */
    {8, ECCL_F32, {1, 2, 3, 4, 5, 6, 7, 8192}, {0, 4, 9, 15, 22, 30, 39, 49}},
};
#define NV (sizeof vlayouts / sizeof *vlayouts)

static pcase vcase(size_t li, eccl_coll_kind kind, int in_place, uint64_t seed)
{
    const struct vlayout *l = &vlayouts[li];
    eccl_op op = !is_float(l->t) ? (seed % 2 ? ECCL_SUM : ECCL_MIN) : seed % 2 ? ECCL_AVG : ECCL_SUM;
    return mkv(kind, l->n, l->t, op, l->vc, kind == ECCL_COLL_ALLGATHER ? l->vd : NULL, in_place, seed);
}

static void test_v_layouts(void **state)
{
    (void)state;
    static const int want_rings[NV] = {1, 2, 1, 1, 2, 1, 2, 2};
    uint64_t seed = 1400;
    for (size_t li = 0; li < NV; li++)
        for (int k = 0; k < 2; k++)
            for (int ip = 0; ip < 2; ip++) {
                pcase c = vcase(li, k ? ECCL_COLL_REDUCE_SCATTER : ECCL_COLL_ALLGATHER, ip, seed++);
                assert_int_equal(rings_of(&c), want_rings[li]);
                run_case(&c, 0, 0);
                run_case(&c, seed * 0x2545F4914F6CDD1Dull, 0);
                run_case(&c, seed * 7919, LATE);
            }
    /* Restore at every stop (every third for the two-slice layout), and
     * malformed frames, on both kinds. */
    for (int k = 0; k < 2; k++) {
        eccl_coll_kind kind = k ? ECCL_COLL_REDUCE_SCATTER : ECCL_COLL_ALLGATHER;
        static const size_t every[] = {0, 2, 4, 6, 7};
        for (size_t i = 0; i < sizeof every / sizeof *every; i++) {
            pcase c = vcase(every[i], kind, (int)i % 2, 1450 + i);
            restore_case(&c, 31 + i, 0, every[i] == 7 ? 4 : 1, 0);
            run_case(&c, 0, FUZZ);
            run_case(&c, 63 + i, FUZZ);
        }
        pcase c = vcase(1, kind, k, 1460);
        restore_case(&c, 5, (size_t)k, 3, LATE);
    }
}

static pcase qcase(int n, eccl_op op, size_t count, int in_place, uint64_t seed)
{
    pcase c = mk(ECCL_COLL_REDUCE_SCATTER, n, ECCL_F32, op, count, in_place, 0, seed);
    c.quant = ECCL_QUANT_MINMAX_U8;
    return c;
}

/* Quantised reduce-scatter (MINMAX codes on f32): every partial leaves its
 * sender as a record and codes (raw where the quantiser refuses the slice),
 * and the receiver dequantises before adding its own: the frames' bytes and
 * the results are the model's, bit for bit, each value within the per-hop
 * bound of the exact sum, codes landing in each direction's own stage. */
static void test_quant(void **state)
{
    (void)state;
    static const int wn[] = {2, 3, 5};
    uint64_t seed = 1500;
    for (int wi = 0; wi < 3; wi++)
        for (int a = 0; a < 2; a++)
            for (int two = 0; two < 2; two++) {
                int n = wn[wi];
                size_t count = two ? two_rings_count(ECCL_COLL_REDUCE_SCATTER, n, ECCL_F32) + 1 : 37;
                pcase c = qcase(n, a ? ECCL_AVG : ECCL_SUM, count, (wi + two) % 2, seed++);
                assert_int_equal(rings_of(&c), two ? 2 : 1);
                run_case(&c, 0, 0);
                run_case(&c, seed * 0x9E3779B97F4A7C15ull, 0);
                run_case(&c, seed * 7919, LATE);
                assert_int_equal(last_raw_seen, 0);
            }
    /* Shares of two slices each way. */
    pcase m = qcase(2, ECCL_SUM, SLICE / 4 * 2 + 6, 0, seed++);
    run_case(&m, 0, 0);
    run_case(&m, 99, 0);
    /* A v layout, quantised: an empty block, one of two slices each way. */
    const struct vlayout *l = &vlayouts[1];
    pcase v = mkv(ECCL_COLL_REDUCE_SCATTER, l->n, ECCL_F32, ECCL_AVG, l->vc, NULL, 1, seed++);
    v.quant = ECCL_QUANT_MINMAX_U8;
    run_case(&v, 0, 0);
    run_case(&v, 5, LATE);
    /* Restore at every stop, malformed frames (codes with a raw slice's
     * length and back, codes to a plain call's ranks: test_malformed). */
    pcase r = qcase(3, ECCL_AVG, two_rings_count(ECCL_COLL_REDUCE_SCATTER, 3, ECCL_F32), 1, seed++);
    restore_case(&r, 77, 0, 1, 0);
    restore_case(&r, 0, 0, 1, LATE);
    run_case(&r, 0, FUZZ);
    run_case(&r, 31, FUZZ);
    r.n = 2;
    r.count = 5;
    restore_case(&r, 0, 0, 1, 0);
    run_case(&r, 0, FUZZ);
}

/* A NaN in a slice: the quantiser refuses it, so the slice travels raw
 * from the rank that holds the NaN on (the hops before it quantise), the
 * owner's element is NaN, the rest within the bound; in ring 0's half of
 * the block or ring 1's, one ring or two. */
static void test_quant_nan(void **state)
{
    (void)state;
    for (int two = 0; two < 2; two++)
        for (int d = 0; d < 1 + two; d++)
            for (int hop = 0; hop < 5; hop++) {
                int n = 5;
                size_t count = two ? two_rings_count(ECCL_COLL_REDUCE_SCATTER, n, ECCL_F32) + 1 : 23;
                pcase c = qcase(n, hop % 2 ? ECCL_AVG : ECCL_SUM, count, hop % 2, 1600 + (uint64_t)hop);
                /* block 2's chain on ring d runs from its position + 1 round to 2 */
                int blk = 2;
                c.nan = 1;
                c.nan_rank = (uint32_t)rank_at(&c, d, pos_of(&c, d, blk) + 1 + hop);
                c.nan_elem = pe(&c, d, blk) + pn(&c, d, blk) / 2;
                run_case(&c, 0, hop == 2 ? FUZZ : 0);
                /* sent raw from the hop holding the NaN to the last: none if that is the owner */
                assert_int_equal(last_raw_seen, (uint32_t)(n - 1 - hop));
                run_case(&c, 1234 + (uint64_t)hop, hop % 2 ? LATE : 0);
                assert_int_equal(last_raw_seen, (uint32_t)(n - 1 - hop));
            }
}

/* Codes from a peer with other options (a record of another type or
 * dtype, or one that does not decode) are refused by recv_done with
 * ECCL_ERR_PROTOCOL before any value is written: recvbuf as it was, and
 * restore still exact. Two ranks: the first frame is the last step's, the
 * one that writes the output. */
static void test_quant_bad_record(void **state)
{
    (void)state;
    for (int d = 0; d < 2; d++)
        for (int v = 0; v < 3; v++) {
            pcase c = qcase(2, ECCL_SUM, two_rings_count(ECCL_COLL_REDUCE_SCATTER, 2, ECCL_F32), 0, 1700);
            sim *s = malloc(sizeof *s);
            assert_non_null(s);
            sim_init(s, &c, 0, 0);
            pump(s, 0);
            pump(s, 1);
            eccl_chan *ch = &s->link[1][d]; /* to rank 0, ring d */
            eccl_wire_data w;
            decode_frame(ch->out_head, &w);
            assert_int_equal(w.flags, ECCL_WIRE_DATA_QUANT);
            uint8_t *bad = s->lbuf[1][d];
            memcpy(bad, ch->out_head->payload, w.len);
            eccl_quant_meta m;
            const uint8_t *codes;
            assert_int_equal(eccl_wire_qdata_decode(bad, w.len, &m, &codes), ECCL_OK);
            eccl_quant_meta x;
            memset(&x, 0, sizeof x);
            x.count = m.count;
            if (v == 0) { /* AFFINE's all-zero record: valid, not ours */
                x.type = ECCL_QUANT_AFFINE_U8;
                x.dtype = ECCL_F32;
            } else { /* f16 codes */
                x.type = ECCL_QUANT_MINMAX_U8;
                x.dtype = ECCL_F16;
                x.min = -1.0f;
                x.max = 1.0f;
            }
            assert_int_equal(eccl_wire_qdata_encode(&x, bad), ECCL_OK);
            if (v == 2) memcpy(bad + 8, (float[]){2.0f}, 4); /* min above max: no record */
            pop_frame(ch);
            s->q_seen[1][d]--;
            void *dst = NULL;
            assert_int_equal(s->alg->recv(&s->p[0], role_of(d), &w, &dst), ECCL_OK);
            assert_non_null(dst);
            memcpy(dst, bad, w.len);
            assert_int_equal(s->alg->recv_done(&s->p[0], role_of(d), &w), ECCL_ERR_PROTOCOL);
            assert_memory_equal(s->recv_reg[0], s->orig_recv[0], s->recv_len[0]);
            restore_all(s);
            sim_fini(s);
            free(s);
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
        cmocka_unit_test(test_model),
        cmocka_unit_test(test_algo_table),
        cmocka_unit_test(test_exact_small),
        cmocka_unit_test(test_multislice),
        cmocka_unit_test(test_orders),
        cmocka_unit_test(test_restore_anywhere),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_completion),
        cmocka_unit_test(test_queue_cap),
        cmocka_unit_test(test_two_rings),
        cmocka_unit_test(test_late_prev),
        cmocka_unit_test(test_v_layouts),
        cmocka_unit_test(test_quant),
        cmocka_unit_test(test_quant_nan),
        cmocka_unit_test(test_quant_bad_record),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    case_data_free();
    return rc;
}
