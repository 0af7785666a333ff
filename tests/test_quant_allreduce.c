/* The quantised ring all-reduce, in one process: N ring state machines
 * (core/coll/ring_allreduce.c) wired by a harness that takes each queued
 * DATA frame off a sender's channel and hands it to the receiving rank,
 * exactly as comm.c would after the socket. No threads, no sockets: every
 * interleaving is deterministic, so parity, error, byte counts, restores
 * and malformed frames can be checked precisely. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coll/reduce.h"
#include "coll/ring_allreduce.h"
#include "proto/chan.h"
#include "proto/wire.h"
#include "quant/quant.h"
#include "util/half.h"

#define MAXN 8

/* ---- a host env: enough for channels and the ring ------------------------- */

#include "host_env.h"

/* ---- the harness ----------------------------------------------------------- */

typedef struct ring_sim {
    eccl_env env;
    int n;
    eccl_ring_allreduce r[MAXN];
    eccl_chan link[MAXN][2]; /* [0]: ring 0 to the next rank; [1]: ring 1 to the previous */
    uint8_t *staging[MAXN][2];
    uint8_t *backup[MAXN];
    uint8_t *img[MAXN];
    /* Called with each frame before delivery; may change the payload copy. */
    void (*tamper)(eccl_wire_data *w, uint8_t *payload, void *arg);
    void *tamper_arg;
    uint8_t *scratch;
    size_t frames;
} ring_sim;

static void sim_init(ring_sim *s, int n, const eccl_coll_call *base, const uint8_t *const *send,
                     uint8_t *const *recv)
{
    memset(s, 0, sizeof *s);
    s->env = host_env();
    s->n = n;
    s->scratch = malloc(ECCL_WIRE_MAX_DATA);
    assert_non_null(s->scratch);
    for (int i = 0; i < n; i++) {
        eccl_coll_call c = *base;
        c.env = &s->env;
        c.rank = (uint32_t)i;
        c.nranks = (uint32_t)n;
        c.sendbuf = send[i];
        c.recvbuf = recv[i];
        size_t sb = eccl_ring_staging_bytes_q(c.count, c.dtype, c.quant);
        for (int k = 0; k < 2; k++) {
            s->staging[i][k] = malloc(sb + 1);
            assert_non_null(s->staging[i][k]);
            assert_int_equal(eccl_chan_init(&s->link[i][k], &s->env, NULL, 64), ECCL_OK);
        }
        s->backup[i] = malloc(c.count * eccl_dtype_size(c.dtype) + 1);
        assert_non_null(s->backup[i]);
        eccl_ring_allreduce_init(&s->r[i], &c, s->staging[i], s->backup[i]);
        if (c.quant != ECCL_QUANT_NONE) {
            size_t qb = eccl_ring_quant_bytes(&s->r[i]);
            assert_true(qb > 0);
            s->img[i] = malloc(qb);
            assert_non_null(s->img[i]);
            eccl_ring_allreduce_set_quant(&s->r[i], s->img[i]);
        }
    }
}

static void sim_fini(ring_sim *s)
{
    for (int i = 0; i < s->n; i++) {
        for (int k = 0; k < 2; k++) {
            eccl_chan_close(&s->link[i][k]);
            free(s->staging[i][k]);
        }
        free(s->backup[i]);
        free(s->img[i]);
    }
    free(s->scratch);
}

/* Delivers one frame from rank i's link k; the result of recv/recv_done. */
static eccl_result deliver(ring_sim *s, int i, int k)
{
    eccl_chan *ch = &s->link[i][k];
    eccl_frame *f = ch->out_head;
    eccl_wire_header h;
    eccl_wire_data w;
    assert_int_equal(eccl_wire_header_decode(f->head, &h), ECCL_OK);
    assert_int_equal(eccl_wire_data_decode(f->head + ECCL_WIRE_HEADER_SIZE, h.length, &w), ECCL_OK);
    if (w.len) memcpy(s->scratch, f->payload, w.len);
    pop_frame(ch);
    s->frames++;
    if (s->tamper) s->tamper(&w, s->scratch, s->tamper_arg);
    int to = k == 0 ? (i + 1) % s->n : (i + s->n - 1) % s->n;
    int ring = w.phase == ECCL_PHASE_DONE ? 0 : k;
    void *dst = NULL;
    eccl_result rc = eccl_ring_allreduce_recv(&s->r[to], ring, &w, &dst);
    if (rc != ECCL_OK) return rc;
    if (dst && w.len) memcpy(dst, s->scratch, w.len);
    return eccl_ring_allreduce_recv_done(&s->r[to], ring, &w);
}

/* Runs until every rank completes, a frame is refused (its result), or
 * max_frames were delivered (ECCL_ERR_AGAIN). */
static eccl_result sim_run(ring_sim *s, size_t max_frames)
{
    for (;;) {
        int done = 1, moved = 0;
        for (int i = 0; i < s->n; i++) {
            eccl_chan *l[2] = {&s->link[i][0], &s->link[i][1]};
            assert_int_equal(eccl_ring_allreduce_pump(&s->r[i], l), ECCL_OK);
        }
        for (int i = 0; i < s->n; i++) {
            for (int k = 0; k < 2; k++) {
                if (!s->link[i][k].out_head) continue;
                if (s->frames >= max_frames) return ECCL_ERR_AGAIN;
                eccl_result rc = deliver(s, i, k);
                if (rc != ECCL_OK) return rc;
                moved = 1;
            }
        }
        for (int i = 0; i < s->n; i++) done &= eccl_ring_allreduce_complete(&s->r[i]);
        if (done) return ECCL_OK;
        assert_true(moved); /* else the ring is stuck */
    }
}

/* ---- data ------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Uniform in [-1, 1), stored in dtype t. */
static void fill(void *buf, eccl_dtype t, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        float v = (float)((double)(rng_next(&x) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        if (t == ECCL_F32) ((float *)buf)[i] = v;
        else if (t == ECCL_F16) ((uint16_t *)buf)[i] = eccl_f32_to_f16(v);
        else ((uint16_t *)buf)[i] = eccl_f32_to_bf16(v);
    }
}

static double load(const void *buf, eccl_dtype t, size_t i)
{
    if (t == ECCL_F32) return ((const float *)buf)[i];
    if (t == ECCL_F16) return eccl_f16_to_f32(((const uint16_t *)buf)[i]);
    return eccl_bf16_to_f32(((const uint16_t *)buf)[i]);
}

typedef struct run_result {
    uint64_t tx, rx;    /* summed over ranks */
    double max_err;     /* largest |result - exact| */
    double mean_err;
    double bound;       /* what max_err was checked against */
} run_result;

/* One all-reduce over n ranks; checks parity (every rank's bytes equal)
 * and the error bound against the exact result computed in double. */
static run_result run_one(int n, eccl_dtype t, eccl_op op, eccl_quant_type q, size_t count,
                          int in_place, uint64_t seed)
{
    size_t es = eccl_dtype_size(t), bytes = count * es;
    uint8_t *send[MAXN] = {0}, *recv[MAXN] = {0};
    if (n < 2 || n > MAXN) fail_msg("run_one: %d ranks, the simulated ring holds 2..%d", n, MAXN);
    for (int i = 0; i < n; i++) {
        send[i] = malloc(bytes + 1);
        recv[i] = in_place ? send[i] : malloc(bytes + 1);
        assert_true(send[i] && recv[i]);
        fill(send[i], t, count, seed + (uint64_t)i);
        if (!in_place) fill(recv[i], t, count, seed + 1000 + (uint64_t)i);
    }
    double *exact = calloc(count ? count : 1, sizeof *exact);
    assert_non_null(exact);
    for (int i = 0; i < n; i++)
        for (size_t e = 0; e < count; e++) exact[e] += load(send[i], t, e);
    if (op == ECCL_AVG)
        for (size_t e = 0; e < count; e++) exact[e] /= n;
    eccl_coll_call call = {.tag = 7, .epoch = 1, .count = count, .dtype = t, .op = op, .quant = q};
    ring_sim *s = malloc(sizeof *s);
    assert_non_null(s);
    sim_init(s, n, &call, (const uint8_t *const *)send, recv);
    assert_int_equal(sim_run(s, SIZE_MAX), ECCL_OK);
    run_result res = {0};
    for (int i = 0; i < n; i++) {
        res.tx += s->r[i].tx_bytes;
        res.rx += s->r[i].rx_bytes;
        if (memcmp(recv[i], recv[0], bytes) != 0) {
            size_t e = 0;
            while (memcmp(recv[i] + e * es, recv[0] + e * es, es) == 0) e++;
            fail_msg("parity: rank %d differs from rank 0 at element %zu (%.9g vs %.9g), n=%d %s %s q=%d "
                     "count=%zu in_place=%d", i, e, load(recv[i], t, e), load(recv[0], t, e), n,
                     eccl_dtype_name(t), eccl_op_name(op), (int)q, count, in_place);
        }
    }
    /* Each hop quantises a partial of at most h contributions in [-1, 1):
     * range <= 2h, error <= range / 255 * (1/2 + 2^-6); the owner's
     * quantisation of the result adds one more with h = n; AVG divides.
     * f16/bf16 round each partial and the result to the dtype too. */
    double bound = 0;
    for (int h = 1; h <= n; h++) bound += 2.0 * h / 255.0 * (0.5 + 0x1p-6);
    if (q == ECCL_QUANT_NONE) bound = 0;
    double eps = t == ECCL_F32 ? 0x1p-23 : t == ECCL_F16 ? 0x1p-10 : 0x1p-7;
    bound += 2.0 * n * n * eps; /* a dtype rounding of a value <= n per step */
    if (op == ECCL_AVG) bound /= n;
    double sum = 0;
    for (size_t e = 0; e < count; e++) {
        double err = fabs(load(recv[0], t, e) - exact[e]);
        sum += err;
        if (err > res.max_err) res.max_err = err;
        if (err > bound)
            fail_msg("element %zu: %.9g, exact %.9g: error %.3g over the bound %.3g (n=%d %s %s q=%d)", e,
                     load(recv[0], t, e), exact[e], err, bound, n, eccl_dtype_name(t), eccl_op_name(op),
                     (int)q);
    }
    res.mean_err = count ? sum / (double)count : 0;
    res.bound = bound;
    sim_fini(s);
    free(s);
    free(exact);
    for (int i = 0; i < n; i++) {
        if (!in_place) free(recv[i]);
        free(send[i]);
    }
    return res;
}

/* ---- tests ------------------------------------------------------------------- */

static void test_parity_matrix(void **state)
{
    (void)state;
    static const int ns[] = {2, 3, 4, 5, 8};
    static const eccl_dtype ts[] = {ECCL_F32, ECCL_F16, ECCL_BF16};
    static const size_t counts[] = {1, 2, 7, 100, 4099};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof ts / sizeof *ts; b++)
            for (size_t c = 0; c < sizeof counts / sizeof *counts; c++)
                for (int q = 1; q <= 2; q++)
                    for (int op = 0; op < 2; op++)
                        run_one(ns[a], ts[b], op ? ECCL_AVG : ECCL_SUM, (eccl_quant_type)q, counts[c],
                                (int)((a + c + (size_t)q) % 2), 11 * a + 3 * c + b);
}

/* Two rings and several slices per chunk (1 MiB slices). */
static void test_parity_two_rings_multislice(void **state)
{
    (void)state;
    static const int ns[] = {2, 3, 5};
    for (size_t a = 0; a < 3; a++) {
        for (int in_place = 0; in_place < 2; in_place++) {
            run_result r = run_one(ns[a], ECCL_F32, ECCL_SUM, ECCL_QUANT_MINMAX_U8, 1500001, in_place, 5 + a);
            printf("    n=%d f32 SUM minmax 1.5M values %s: max error %.4g (bound %.4g), mean %.4g\n", ns[a],
                   in_place ? "in place" : "out of place", r.max_err, r.bound, r.mean_err);
        }
        run_one(ns[a], ECCL_BF16, ECCL_AVG, ECCL_QUANT_AFFINE_U8, 1200003, 1, 9 + a);
    }
}

static void test_tx_bytes(void **state)
{
    (void)state;
    static const int ns[] = {2, 4, 8};
    for (size_t a = 0; a < 3; a++) {
        size_t count = 1u << 20;
        run_result plain = run_one(ns[a], ECCL_F32, ECCL_SUM, ECCL_QUANT_NONE, count, 0, 3);
        run_result mm = run_one(ns[a], ECCL_F32, ECCL_SUM, ECCL_QUANT_MINMAX_U8, count, 0, 3);
        run_result af = run_one(ns[a], ECCL_F32, ECCL_SUM, ECCL_QUANT_AFFINE_U8, count, 0, 3);
        double r1 = (double)mm.tx / (double)plain.tx, r2 = (double)af.tx / (double)plain.tx;
        printf("    n=%d, 4 MiB f32: tx %llu B plain, %llu B minmax (%.4f), %llu B affine (%.4f); "
               "max error minmax %.4g affine %.4g, mean %.4g / %.4g\n",
               ns[a], (unsigned long long)plain.tx, (unsigned long long)mm.tx, r1,
               (unsigned long long)af.tx, r2, mm.max_err, af.max_err, mm.mean_err, af.mean_err);
        assert_true(r1 > 0.25 && r1 < 0.2505);
        assert_true(r2 > 0.25 && r2 < 0.2505);
        assert_true(mm.rx == mm.tx);
        run_result h = run_one(ns[a], ECCL_F16, ECCL_SUM, ECCL_QUANT_NONE, count, 0, 3);
        run_result hq = run_one(ns[a], ECCL_F16, ECCL_SUM, ECCL_QUANT_MINMAX_U8, count, 0, 3);
        assert_true((double)hq.tx / (double)h.tx < 0.501);
    }
}

/* A NaN or infinity in a slice: that slice travels raw, bit for bit as the
 * plain path would carry it, and parity holds. */
static void test_nonfinite_travels_raw(void **state)
{
    (void)state;
    for (int n = 2; n <= 5; n++) {
        for (int in_place = 0; in_place < 2; in_place++) {
            size_t count = 3000;
            uint8_t *send[MAXN], *recv[MAXN];
            for (int i = 0; i < n; i++) {
                send[i] = malloc(count * 4);
                recv[i] = in_place ? send[i] : malloc(count * 4);
                fill(send[i], ECCL_F32, count, 50 + (uint64_t)i);
            }
            ((float *)send[n - 1])[17] = NAN;
            ((float *)send[0])[18] = INFINITY;
            eccl_coll_call call = {.tag = 1, .epoch = 1, .count = count, .dtype = ECCL_F32, .op = ECCL_SUM,
                                   .quant = ECCL_QUANT_MINMAX_U8};
            ring_sim *s = malloc(sizeof *s);
            sim_init(s, n, &call, (const uint8_t *const *)send, recv);
            assert_int_equal(sim_run(s, SIZE_MAX), ECCL_OK);
            for (int i = 0; i < n; i++) {
                assert_memory_equal(recv[i], recv[0], count * 4);
                assert_true(isnan(((float *)recv[i])[17]));
                assert_true(isinf(((float *)recv[i])[18]));
            }
            /* Other slices were still quantised: the plain path sends
             * 2 (n - 1) buffers in all. */
            uint64_t tx = 0;
            for (int i = 0; i < n; i++) tx += s->r[i].tx_bytes;
            assert_true(tx < 0.8 * 2.0 * (n - 1) * (double)count * 4);
            sim_fini(s);
            free(s);
            for (int i = 0; i < n; i++) {
                if (!in_place) free(recv[i]);
                free(send[i]);
            }
        }
    }
}

/* Stopped after any number of frames, every rank's restore gives back
 * recvbuf exactly as it was. */
static void test_restore_anywhere(void **state)
{
    (void)state;
    static const size_t counts[] = {10, 700001};
    for (int n = 2; n <= 4; n++) {
        for (size_t ci = 0; ci < 2; ci++) {
            for (int in_place = 0; in_place < 2; in_place++) {
                size_t count = counts[ci], bytes = count * 4;
                /* How many frames a full run takes. */
                size_t total = 0;
                for (size_t stop = 0;; stop = stop ? stop * 2 + 1 : 1) {
                    uint8_t *send[MAXN], *recv[MAXN], *orig[MAXN];
                    for (int i = 0; i < n; i++) {
                        send[i] = malloc(bytes);
                        recv[i] = in_place ? send[i] : malloc(bytes);
                        orig[i] = malloc(bytes);
                        fill(send[i], ECCL_F32, count, 70 + (uint64_t)i);
                        if (!in_place) fill(recv[i], ECCL_F32, count, 90 + (uint64_t)i);
                        memcpy(orig[i], recv[i], bytes);
                    }
                    eccl_coll_call call = {.tag = 1, .epoch = 1, .count = count, .dtype = ECCL_F32,
                                           .op = ECCL_AVG, .quant = ECCL_QUANT_AFFINE_U8};
                    ring_sim *s = malloc(sizeof *s);
                    sim_init(s, n, &call, (const uint8_t *const *)send, recv);
                    eccl_result rc = sim_run(s, stop ? stop : SIZE_MAX);
                    if (!stop) total = s->frames;
                    for (int i = 0; i < n; i++) {
                        eccl_ring_allreduce_restore(&s->r[i]);
                        assert_memory_equal(recv[i], orig[i], bytes);
                    }
                    sim_fini(s);
                    free(s);
                    for (int i = 0; i < n; i++) {
                        if (!in_place) free(recv[i]);
                        free(send[i]);
                        free(orig[i]);
                    }
                    if (!stop) assert_int_equal(rc, ECCL_OK);
                    if (stop && stop >= total) break;
                }
            }
        }
    }
}

/* ---- malformed frames ------------------------------------------------------- */

typedef struct tamper_arg {
    int what;
    int hits;
} tamper_arg;

static void tamper(eccl_wire_data *w, uint8_t *p, void *argp)
{
    tamper_arg *a = argp;
    if (!(w->flags & ECCL_WIRE_DATA_QUANT) || a->hits) return;
    switch (a->what) {
    case 0: p[0] = p[0] == ECCL_QUANT_MINMAX_U8 ? ECCL_QUANT_AFFINE_U8 : ECCL_QUANT_MINMAX_U8; break;
    case 1: p[1] = ECCL_F16; break;                    /* another dtype */
    case 2: p[16] ^= 1; break;                         /* count != codes */
    case 3: p[3] = 1; break;                           /* reserved byte */
    case 4: memset(p + 8, 0xFF, 4); break;             /* min = NaN */
    case 5: w->flags = 0; w->len -= ECCL_QUANT_META_BYTES; break; /* a raw frame of the wrong size */
    }
    a->hits++;
}

static void test_malformed_quant_frames(void **state)
{
    (void)state;
    for (int what = 0; what < 6; what++) {
        for (int phase_skip = 0; phase_skip < 2; phase_skip++) {
            int n = 3;
            size_t count = 999;
            uint8_t *buf[MAXN];
            for (int i = 0; i < n; i++) {
                buf[i] = malloc(count * 4);
                fill(buf[i], ECCL_F32, count, (uint64_t)i);
            }
            eccl_coll_call call = {.tag = 1, .epoch = 1, .count = count, .dtype = ECCL_F32, .op = ECCL_SUM,
                                   .quant = ECCL_QUANT_MINMAX_U8};
            ring_sim *s = malloc(sizeof *s);
            sim_init(s, n, &call, (const uint8_t *const *)buf, buf);
            /* phase_skip: let the reduce-scatter pass, tamper an all-gather frame */
            tamper_arg a = {what, 0};
            s->tamper = tamper;
            s->tamper_arg = &a;
            if (phase_skip) {
                s->tamper = NULL;
                assert_int_equal(sim_run(s, (size_t)n * (n - 1)), ECCL_ERR_AGAIN);
                s->tamper = tamper;
            }
            assert_int_equal(sim_run(s, SIZE_MAX), ECCL_ERR_PROTOCOL);
            assert_int_equal(a.hits, 1);
            sim_fini(s);
            free(s);
            for (int i = 0; i < n; i++) free(buf[i]);
        }
    }
    /* A quantised frame to a plain op. */
    eccl_env env = host_env();
    float buf[8] = {0};
    uint8_t st0[64], st1[64], bk[64];
    uint8_t *st[2] = {st0, st1};
    eccl_coll_call call = {.env = &env, .tag = 1, .epoch = 1, .sendbuf = (uint8_t *)buf,
                           .recvbuf = (uint8_t *)buf, .count = 8, .dtype = ECCL_F32, .op = ECCL_SUM,
                           .rank = 0, .nranks = 3};
    eccl_ring_allreduce r;
    eccl_ring_allreduce_init(&r, &call, st, bk);
    eccl_wire_data w = {.tag = 1, .epoch = 1, .phase = ECCL_PHASE_REDUCE_SCATTER, .step = 0,
                        .offset = 0, .len = ECCL_QUANT_META_BYTES + 3, .flags = ECCL_WIRE_DATA_QUANT};
    size_t off = 0, len = 0;
    (void)off, (void)len;
    void *dst = NULL;
    /* Rank 0 first receives chunk 2 (elements 6..8) on ring 0. */
    w.offset = 6 * 4;
    w.len = ECCL_QUANT_META_BYTES + 2;
    assert_int_equal(eccl_ring_allreduce_recv(&r, 0, &w, &dst), ECCL_ERR_PROTOCOL);
    w.flags = 0;
    w.len = 2 * 4;
    assert_int_equal(eccl_ring_allreduce_recv(&r, 0, &w, &dst), ECCL_OK);
}

static void test_wire_flags(void **state)
{
    (void)state;
    uint8_t b[ECCL_WIRE_DATA_HEADER_SIZE];
    eccl_wire_data d = {.tag = 5, .epoch = 2, .phase = ECCL_PHASE_ALL_GATHER, .len = 30,
                        .flags = ECCL_WIRE_DATA_QUANT}, o;
    eccl_wire_data_encode(&d, b);
    assert_int_equal(eccl_wire_data_decode(b, ECCL_WIRE_DATA_HEADER_SIZE + 30, &o), ECCL_OK);
    assert_int_equal(o.flags, ECCL_WIRE_DATA_QUANT);
    d.flags = 2; /* unknown */
    eccl_wire_data_encode(&d, b);
    assert_int_equal(eccl_wire_data_decode(b, ECCL_WIRE_DATA_HEADER_SIZE + 30, &o), ECCL_ERR_PROTOCOL);
    d.flags = ECCL_WIRE_DATA_QUANT;
    d.phase = ECCL_PHASE_EXCHANGE; /* only ring phases carry codes */
    eccl_wire_data_encode(&d, b);
    assert_int_equal(eccl_wire_data_decode(b, ECCL_WIRE_DATA_HEADER_SIZE + 30, &o), ECCL_ERR_PROTOCOL);
    d.phase = ECCL_PHASE_REDUCE_SCATTER;
    d.len = 23; /* shorter than a record */
    eccl_wire_data_encode(&d, b);
    assert_int_equal(eccl_wire_data_decode(b, ECCL_WIRE_DATA_HEADER_SIZE + 23, &o), ECCL_ERR_PROTOCOL);

    float v[4] = {1, -2, 3.5f, 0};
    uint8_t p[ECCL_QUANT_META_BYTES + 4];
    eccl_quant_meta m, m2;
    const uint8_t *codes;
    assert_int_equal(eccl_quant_quantize(ECCL_QUANT_MINMAX_U8, ECCL_F32, v, 4, p + ECCL_QUANT_META_BYTES, &m),
                     ECCL_OK);
    assert_int_equal(eccl_wire_qdata_encode(&m, p), ECCL_OK);
    assert_int_equal(eccl_wire_qdata_decode(p, sizeof p, &m2, &codes), ECCL_OK);
    assert_ptr_equal(codes, p + ECCL_QUANT_META_BYTES);
    assert_int_equal(m2.count, 4);
    assert_int_equal(eccl_wire_qdata_decode(p, sizeof p - 1, &m2, &codes), ECCL_ERR_PROTOCOL);
    assert_int_equal(eccl_wire_qdata_decode(p, 10, &m2, &codes), ECCL_ERR_PROTOCOL);
    p[0] = 0;
    assert_int_equal(eccl_wire_qdata_decode(p, sizeof p, &m2, &codes), ECCL_ERR_PROTOCOL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wire_flags),
        cmocka_unit_test(test_parity_matrix),
        cmocka_unit_test(test_parity_two_rings_multislice),
        cmocka_unit_test(test_tx_bytes),
        cmocka_unit_test(test_nonfinite_travels_raw),
        cmocka_unit_test(test_restore_anywhere),
        cmocka_unit_test(test_malformed_quant_frames),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
