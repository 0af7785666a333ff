/* 8-bit quantisation (core/quant/quant.c).
 *
 * The dequantisation known answers were computed with exact rational
 * arithmetic (Python fractions) from the formulas in quant.h; at 59 of the
 * 255 MINMAX codes an FMA would give different bits, so a build that fused
 * `min + q * s` fails here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "util/half.h"
#include "kat_kernels.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const eccl_quant_type TYPES[] = {ECCL_QUANT_MINMAX_U8, ECCL_QUANT_AFFINE_U8};
static const eccl_dtype DTYPES[] = {ECCL_F32, ECCL_F16, ECCL_BF16};

/* ---- helpers ------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * UINT64_C(0x2545F4914F6CDD1D);
}

/* uniform in [0, 1) */
static double rng_unit(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) * 0x1p-53;
}

static float ulpf(float x)
{
    x = fabsf(x);
    return nextafterf(x, INFINITY) - x;
}

static size_t dsize(eccl_dtype dt)
{
    return dt == ECCL_F32 ? 4 : 2;
}

static float get(eccl_dtype dt, const void *p, size_t i)
{
    if (dt == ECCL_F32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == ECCL_F16 ? eccl_f16_to_f32(h) : eccl_bf16_to_f32(h);
}

static void put(eccl_dtype dt, void *p, size_t i, float v)
{
    if (dt == ECCL_F32)
        ((float *)p)[i] = v;
    else if (dt == ECCL_F16)
        ((uint16_t *)p)[i] = eccl_f32_to_f16(v);
    else
        ((uint16_t *)p)[i] = eccl_f32_to_bf16(v);
}

/* The chunk shapes the property tests run on. */
enum { SHAPES = 9 };
static void fill(eccl_dtype dt, void *p, size_t n, int shape, uint64_t *rng)
{
    for (size_t i = 0; i < n; i++) {
        double u = rng_unit(rng), v;
        switch (shape) {
        case 0: v = 2 * u - 1; break;                          /* [-1, 1) */
        case 1: v = (2 * u - 1) * 1e-3; break;                 /* small gradients */
        case 2: v = 5 + 3 * u; break;                          /* all positive */
        case 3: v = -7 - 2 * u; break;                         /* all negative */
        case 4: v = (u - 0.3) * 3e4; break;                    /* wide, f16-sized */
        case 5: v = (2 * u - 1) * pow(10, 8 * u - 4); break;   /* heavy-tailed */
        case 6: v = i % 3 ? 0 : u - 0.5; break;                /* sparse */
        case 7: v = 0.25 + 1e-3 * u; break;                    /* offset, narrow */
        default: v = (i * 37 % 101) / 8.0 - 6; break;           /* on a coarse grid */
        }
        put(dt, p, i, (float)v);
    }
}

static void quant_ok(eccl_quant_type t, eccl_dtype dt, const void *src, size_t n, uint8_t *codes,
                     eccl_quant_meta *m)
{
    assert_int_equal(eccl_quant_quantize(t, dt, src, n, codes, m), ECCL_OK);
    assert_int_equal(m->type, t);
    assert_int_equal(m->dtype, dt);
    assert_int_equal(m->count, n);
    assert_int_equal(eccl_quant_meta_check(m), ECCL_OK);
}

/* ---- error bounds ---------------------------------------------------------- */

/* |x - x'| within quant.h's bound, plus half an ulp of the dtype for the
 * final rounding of f16/bf16 values. Also: D(0) = min, D(255) = max. */
static void check_bound(eccl_quant_type t, eccl_dtype dt, const void *x, const void *xq, size_t n,
                        const eccl_quant_meta *m, const uint8_t *codes)
{
    float s = eccl_quant_meta_scale(m);
    float mx_abs = 0;
    for (size_t i = 0; i < n; i++)
        mx_abs = fmaxf(mx_abs, fabsf(get(dt, x, i)));
    double frac = t == ECCL_QUANT_MINMAX_U8 ? 0.5 + 0x1p-12 : 0.5 + 0x1p-6;
    for (size_t i = 0; i < n; i++) {
        float a = get(dt, x, i), b = get(dt, xq, i);
        double slack = (double)ulpf(mx_abs);
        if (s == 0.0f && t == ECCL_QUANT_AFFINE_U8)
            slack += (double)FLT_MIN / 2; /* a chunk of values below FLT_MIN / 2 */
        if (dt != ECCL_F32)
            slack += (double)fabsf(b) * (dt == ECCL_F16 ? 0x1p-11 : 0x1p-8) + 0x1p-24;
        double err = fabs((double)a - (double)b);
        if (err > (double)s * frac + slack)
            fail_msg("type %d dtype %d [%zu]: x=%.9g x'=%.9g code %u s=%.9g err=%.9g", t, dt, i,
                     (double)a, (double)b, codes[i], (double)s, err);
    }
}

static void test_error_bounds(void **state)
{
    (void)state;
    enum { NMAX = 1000 };
    static float x[NMAX], xq[NMAX];
    static uint8_t codes[NMAX];
    static const size_t sizes[] = {1, 2, 3, 17, 256, NMAX};
    uint64_t rng = 1;

    for (size_t ti = 0; ti < N(TYPES); ti++)
        for (size_t di = 0; di < N(DTYPES); di++)
            for (int shape = 0; shape < SHAPES; shape++)
                for (size_t si = 0; si < N(sizes); si++) {
                    eccl_quant_type t = TYPES[ti];
                    eccl_dtype dt = DTYPES[di];
                    size_t n = sizes[si];
                    eccl_quant_meta m;
                    if (dt == ECCL_F16 && shape == 5)
                        continue; /* beyond f16's range */
                    fill(dt, x, n, shape, &rng);
                    memcpy(xq, x, n * dsize(dt));
                    assert_int_equal(eccl_quant_roundtrip(t, dt, xq, n, codes, &m), ECCL_OK);
                    assert_int_equal(eccl_quant_meta_check(&m), ECCL_OK);
                    check_bound(t, dt, x, xq, n, &m, codes);
                }
}

/* ---- bit-parity ------------------------------------------------------------------ */

/* What the owner keeps after eccl_quant_roundtrip is, bit for bit, what a
 * receiver of (encoded meta, codes) computes. */
static void test_owner_matches_receivers(void **state)
{
    (void)state;
    enum { NN = 777 };
    static float x[NN], y[NN];
    static uint8_t codes[NN];
    uint8_t wire[ECCL_QUANT_META_BYTES];
    uint64_t rng = 2;

    for (size_t ti = 0; ti < N(TYPES); ti++)
        for (size_t di = 0; di < N(DTYPES); di++)
            for (int shape = 0; shape < SHAPES; shape++) {
                eccl_quant_meta m, r;
                if (DTYPES[di] == ECCL_F16 && shape == 5)
                    continue;
                fill(DTYPES[di], x, NN, shape, &rng);
                assert_int_equal(eccl_quant_roundtrip(TYPES[ti], DTYPES[di], x, NN, codes, &m),
                                 ECCL_OK);
                assert_int_equal(eccl_quant_meta_encode(&m, wire), ECCL_OK);
                assert_int_equal(eccl_quant_meta_decode(wire, &r), ECCL_OK);
                memset(y, 0xa5, sizeof y);
                assert_int_equal(eccl_quant_dequantize(&r, codes, NN, y), ECCL_OK);
                assert_memory_equal(x, y, NN * dsize(DTYPES[di]));
            }
}

static void test_dequant_known_answers(void **state)
{
    (void)state;
    /* MINMAX, min = 0.1f, max = 0.7f: s = 0x3b1a33cd. Codes 6, 15, 20, 24
     * are ones where fma(q, s, min) rounds differently. */
    static const uint8_t mm_codes[] = {0, 1, 2, 3, 100, 127, 128, 200, 254, 255, 6, 15, 20, 24};
    static const uint32_t mm_want[] = {0x3dcccccd, 0x3dd19e6b, 0x3dd6700a, 0x3ddb41a8, 0x3eababab,
                                       0x3ecc3298, 0x3ecd6700, 0x3f121212, 0x3f3298ff, 0x3f333333,
                                       0x3de9b684, 0x3e0a8a8a, 0x3e169696, 0x3e2039d4};
    eccl_quant_meta m = {.type = ECCL_QUANT_MINMAX_U8, .dtype = ECCL_F32,
                         .min = eccl_f32_from_bits(0x3dcccccd),
                         .max = eccl_f32_from_bits(0x3f333333), .count = N(mm_codes)};
    float out[N(mm_codes)];
    assert_int_equal(eccl_f32_bits(eccl_quant_meta_scale(&m)), 0x3b1a33cdu);
    assert_int_equal(eccl_quant_dequantize(&m, mm_codes, N(mm_codes), out), ECCL_OK);
    for (size_t i = 0; i < N(mm_codes); i++)
        if (eccl_f32_bits(out[i]) != mm_want[i])
            fail_msg("MINMAX code %u: got 0x%08x, want 0x%08x", mm_codes[i],
                     eccl_f32_bits(out[i]), mm_want[i]);

    /* AFFINE, s = 0x3c23d700 (~0.01, 16 significant bits), zero point 100. */
    static const uint8_t af_codes[] = {0, 1, 99, 100, 101, 254, 255};
    static const uint32_t af_want[] = {0xbf7ffff0, 0xbf7d7094, 0xbc23d700, 0x00000000,
                                       0x3c23d700, 0x3fc51eac, 0x3fc6665a};
    eccl_quant_meta a = {.type = ECCL_QUANT_AFFINE_U8, .dtype = ECCL_F32, .zero_point = 100,
                         .scale = eccl_f32_from_bits(0x3c23d700), .count = N(af_codes)};
    float aout[N(af_codes)];
    assert_int_equal(eccl_quant_dequantize(&a, af_codes, N(af_codes), aout), ECCL_OK);
    for (size_t i = 0; i < N(af_codes); i++)
        assert_int_equal(eccl_f32_bits(aout[i]), af_want[i]);
}

/* ---- special chunks ----------------------------------------------------------------- */

static void test_constant_chunks(void **state)
{
    (void)state;
    float x[5] = {3.5f, 3.5f, 3.5f, 3.5f, 3.5f}, y[5];
    uint8_t codes[5];
    eccl_quant_meta m;

    /* MINMAX: scale 0, every value exact. */
    memcpy(y, x, sizeof x);
    assert_int_equal(eccl_quant_roundtrip(ECCL_QUANT_MINMAX_U8, ECCL_F32, y, 5, codes, &m), ECCL_OK);
    assert_true(m.min == 3.5f && m.max == 3.5f);
    assert_true(eccl_quant_meta_scale(&m) == 0.0f);
    assert_memory_equal(x, y, sizeof x);

    /* AFFINE keeps zero on the grid, so the constant is the top code. */
    memcpy(y, x, sizeof x);
    assert_int_equal(eccl_quant_roundtrip(ECCL_QUANT_AFFINE_U8, ECCL_F32, y, 5, codes, &m), ECCL_OK);
    assert_int_equal(m.zero_point, 0);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(codes[i], 255);
        assert_true(fabsf(y[i] - 3.5f) <= m.scale * (0.5f + 0x1p-6f));
    }

    /* All zeros (and -0.0): scale 0, values +0.0. */
    float z[4] = {0.0f, -0.0f, 0.0f, -0.0f};
    for (size_t ti = 0; ti < N(TYPES); ti++) {
        float w[4];
        memcpy(w, z, sizeof z);
        assert_int_equal(eccl_quant_roundtrip(TYPES[ti], ECCL_F32, w, 4, codes, &m), ECCL_OK);
        assert_true(eccl_quant_meta_scale(&m) == 0.0f);
        for (int i = 0; i < 4; i++)
            assert_int_equal(eccl_f32_bits(w[i]), 0u);
    }
}

static void test_negative_range(void **state)
{
    (void)state;
    enum { NN = 300 };
    float x[NN], y[NN];
    uint8_t codes[NN];
    eccl_quant_meta m;
    for (int i = 0; i < NN; i++)
        x[i] = -5.0f + 3.0f * (float)i / (NN - 1); /* [-5, -2] */

    memcpy(y, x, sizeof x);
    assert_int_equal(eccl_quant_roundtrip(ECCL_QUANT_MINMAX_U8, ECCL_F32, y, NN, codes, &m), ECCL_OK);
    assert_true(m.min == -5.0f && m.max == -2.0f);
    assert_int_equal(codes[0], 0);
    assert_int_equal(codes[NN - 1], 255);
    assert_true(y[0] == -5.0f && y[NN - 1] == -2.0f);
    check_bound(ECCL_QUANT_MINMAX_U8, ECCL_F32, x, y, NN, &m, codes);

    /* AFFINE widens to [-5, 0]: 0 is the top code. */
    memcpy(y, x, sizeof x);
    assert_int_equal(eccl_quant_roundtrip(ECCL_QUANT_AFFINE_U8, ECCL_F32, y, NN, codes, &m), ECCL_OK);
    assert_int_equal(m.zero_point, 255);
    assert_int_equal(codes[0], 0);
    check_bound(ECCL_QUANT_AFFINE_U8, ECCL_F32, x, y, NN, &m, codes);
    for (int i = 0; i < NN; i++)
        assert_true(y[i] <= 0.0f);
}

/* AFFINE: 0.0 is exactly representable, in every chunk, and comes back as
 * exactly 0.0; the code z dequantises to +0.0. */
static void test_affine_zero_exact(void **state)
{
    (void)state;
    enum { NN = 101 };
    float x[NN];
    uint8_t codes[NN];
    uint64_t rng = 3;
    for (int round = 0; round < 500; round++) {
        eccl_quant_meta m;
        double lo = -pow(10, 6 * rng_unit(&rng) - 3) * rng_unit(&rng);
        double hi = pow(10, 6 * rng_unit(&rng) - 3) * rng_unit(&rng);
        for (int i = 0; i < NN; i++)
            x[i] = (float)(lo + (hi - lo) * rng_unit(&rng));
        x[round % NN] = 0.0f;
        assert_int_equal(eccl_quant_roundtrip(ECCL_QUANT_AFFINE_U8, ECCL_F32, x, NN, codes, &m),
                         ECCL_OK);
        assert_int_equal(eccl_f32_bits(x[round % NN]), 0u);
        assert_int_equal(codes[round % NN], m.zero_point);
        uint8_t zp = m.zero_point;
        float v;
        m.count = 1;
        assert_int_equal(eccl_quant_dequantize(&m, &zp, 1, &v), ECCL_OK);
        assert_int_equal(eccl_f32_bits(v), 0u);
    }
    /* All positive: zero point 0; all negative: 255. */
    float pos[3] = {1, 2, 3}, neg[3] = {-1, -2, -3};
    eccl_quant_meta m;
    quant_ok(ECCL_QUANT_AFFINE_U8, ECCL_F32, pos, 3, codes, &m);
    assert_int_equal(m.zero_point, 0);
    quant_ok(ECCL_QUANT_AFFINE_U8, ECCL_F32, neg, 3, codes, &m);
    assert_int_equal(m.zero_point, 255);
}

static void test_empty_chunk(void **state)
{
    (void)state;
    for (size_t ti = 0; ti < N(TYPES); ti++)
        for (size_t di = 0; di < N(DTYPES); di++) {
            eccl_quant_meta m;
            uint8_t wire[ECCL_QUANT_META_BYTES];
            assert_int_equal(eccl_quant_quantize(TYPES[ti], DTYPES[di], NULL, 0, NULL, &m), ECCL_OK);
            assert_int_equal(m.count, 0);
            assert_int_equal(eccl_quant_dequantize(&m, NULL, 0, NULL), ECCL_OK);
            assert_int_equal(eccl_quant_roundtrip(TYPES[ti], DTYPES[di], NULL, 0, NULL, &m), ECCL_OK);
            assert_int_equal(eccl_quant_meta_encode(&m, wire), ECCL_OK);
            assert_int_equal(eccl_quant_meta_decode(wire, &m), ECCL_OK);
        }
}

/* NaN and infinities are rejected, in every dtype, leaving outputs alone. */
static void test_non_finite_rejected(void **state)
{
    (void)state;
    static const uint32_t bad[] = {0x7fc00000u, 0xffc00001u, 0x7f800000u, 0xff800000u, 0x7f800001u};
    for (size_t ti = 0; ti < N(TYPES); ti++)
        for (size_t di = 0; di < N(DTYPES); di++)
            for (size_t b = 0; b < N(bad); b++)
                for (size_t pos = 0; pos < 9; pos += 4) {
                    eccl_dtype dt = DTYPES[di];
                    float x[9], keep[9];
                    uint8_t codes[9];
                    eccl_quant_meta m;
                    for (int i = 0; i < 9; i++)
                        put(dt, x, (size_t)i, (float)i - 4.0f);
                    put(dt, x, pos, eccl_f32_from_bits(bad[b]));
                    assert_false(isfinite(get(dt, x, pos)));
                    memcpy(keep, x, sizeof x);
                    memset(codes, 0x5a, sizeof codes);
                    memset(&m, 0x5a, sizeof m);
                    assert_int_equal(eccl_quant_quantize(TYPES[ti], dt, x, 9, codes, &m),
                                     ECCL_ERR_INVALID_ARG);
                    assert_int_equal(eccl_quant_roundtrip(TYPES[ti], dt, x, 9, codes, &m),
                                     ECCL_ERR_INVALID_ARG);
                    assert_memory_equal(x, keep, sizeof x);
                    for (int i = 0; i < 9; i++)
                        assert_int_equal(codes[i], 0x5a);
                    assert_int_equal(m.type, 0x5a);
                }
}

/* Ranges that cannot be represented are rejected; AFFINE (which works in
 * double for the range) takes what MINMAX cannot. */
static void test_unrepresentable_ranges(void **state)
{
    (void)state;
    float x[3] = {-3e38f, 0.0f, 3e38f}, y[3];
    uint8_t codes[3];
    eccl_quant_meta m;
    memcpy(y, x, sizeof x);
    assert_int_equal(eccl_quant_roundtrip(ECCL_QUANT_MINMAX_U8, ECCL_F32, y, 3, codes, &m),
                     ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_quant_roundtrip(ECCL_QUANT_AFFINE_U8, ECCL_F32, y, 3, codes, &m), ECCL_OK);
    check_bound(ECCL_QUANT_AFFINE_U8, ECCL_F32, x, y, 3, &m, codes);
    assert_int_equal(eccl_f32_bits(y[1]), 0u);

    /* f16 AFFINE near the top of the range: the grid's top end may round to
     * infinity in f16; such chunks are refused, the others come back finite. */
    int refused = 0;
    for (int k = 0; k < 400; k++) {
        uint16_t h[2] = {eccl_f32_to_f16(-(float)k * 2.0f), 0x7bff /* 65504 */};
        uint16_t hq[2];
        memcpy(hq, h, sizeof h);
        eccl_result r = eccl_quant_roundtrip(ECCL_QUANT_AFFINE_U8, ECCL_F16, hq, 2, codes, &m);
        if (r == ECCL_ERR_INVALID_ARG) {
            refused++;
            assert_memory_equal(hq, h, sizeof h);
        } else {
            assert_int_equal(r, ECCL_OK);
            assert_true(isfinite(eccl_f16_to_f32(hq[0])) && isfinite(eccl_f16_to_f32(hq[1])));
        }
    }
    assert_true(refused > 0);
}

/* ---- metadata ------------------------------------------------------------------------ */

static void test_meta_encoding(void **state)
{
    (void)state;
    /* The layout, byte by byte. */
    eccl_quant_meta a = {.type = ECCL_QUANT_AFFINE_U8, .dtype = ECCL_F16, .zero_point = 7,
                         .scale = 1.0f, .count = UINT64_C(0x0102030405060708)};
    static const uint8_t want[ECCL_QUANT_META_BYTES] = {
        2, ECCL_F16, 7, 0, 0x00, 0x00, 0x80, 0x3f, 0, 0, 0, 0, 0, 0, 0, 0,
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
    uint8_t wire[ECCL_QUANT_META_BYTES];
    eccl_quant_meta b;
    assert_int_equal(eccl_quant_meta_encode(&a, wire), ECCL_OK);
    assert_memory_equal(wire, want, sizeof want);
    assert_int_equal(eccl_quant_meta_decode(wire, &b), ECCL_OK);
    assert_int_equal(b.type, a.type);
    assert_int_equal(b.dtype, a.dtype);
    assert_int_equal(b.zero_point, a.zero_point);
    assert_int_equal(eccl_f32_bits(b.scale), eccl_f32_bits(a.scale));
    assert_int_equal(b.count, a.count);

    /* Round trips of real records: decode(encode(m)) == m, and encoding
     * again gives the same bytes. */
    uint64_t rng = 4;
    for (size_t ti = 0; ti < N(TYPES); ti++)
        for (size_t di = 0; di < N(DTYPES); di++)
            for (int shape = 0; shape < SHAPES; shape++) {
                float x[64];
                uint8_t codes[64], wire2[ECCL_QUANT_META_BYTES];
                eccl_quant_meta m, d;
                if (DTYPES[di] == ECCL_F16 && shape == 5)
                    continue;
                fill(DTYPES[di], x, 64, shape, &rng);
                quant_ok(TYPES[ti], DTYPES[di], x, 64, codes, &m);
                assert_int_equal(eccl_quant_meta_encode(&m, wire), ECCL_OK);
                assert_int_equal(eccl_quant_meta_decode(wire, &d), ECCL_OK);
                assert_int_equal(d.type, m.type);
                assert_int_equal(d.dtype, m.dtype);
                assert_int_equal(d.zero_point, m.zero_point);
                assert_int_equal(eccl_f32_bits(d.scale), eccl_f32_bits(m.scale));
                assert_int_equal(eccl_f32_bits(d.min), eccl_f32_bits(m.min));
                assert_int_equal(eccl_f32_bits(d.max), eccl_f32_bits(m.max));
                assert_int_equal(d.count, m.count);
                assert_int_equal(eccl_quant_meta_encode(&d, wire2), ECCL_OK);
                assert_memory_equal(wire, wire2, sizeof wire);
            }
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Every malformed record is refused by decode (ECCL_ERR_PROTOCOL, output
 * untouched), by encode and dequantize (ECCL_ERR_INVALID_ARG). */
static void test_meta_malformed(void **state)
{
    (void)state;
    uint8_t mm[ECCL_QUANT_META_BYTES] = {0}, af[ECCL_QUANT_META_BYTES] = {0};
    /* valid bases: MINMAX f32 [-1, 2], AFFINE f32 scale 0.5 zero point 10 */
    mm[0] = ECCL_QUANT_MINMAX_U8;
    mm[1] = ECCL_F32;
    put32(mm + 8, eccl_f32_bits(-1.0f));
    put32(mm + 12, eccl_f32_bits(2.0f));
    mm[16] = 4;
    af[0] = ECCL_QUANT_AFFINE_U8;
    af[1] = ECCL_F32;
    af[2] = 10;
    put32(af + 4, eccl_f32_bits(0.5f));
    af[16] = 4;
    eccl_quant_meta m;
    assert_int_equal(eccl_quant_meta_decode(mm, &m), ECCL_OK);
    assert_int_equal(eccl_quant_meta_decode(af, &m), ECCL_OK);
    /* MINMAX whose max - min overflows f32 */
    uint8_t wide[ECCL_QUANT_META_BYTES];
    memcpy(wide, mm, sizeof wide);
    put32(wide + 8, eccl_f32_bits(-3e38f));
    put32(wide + 12, eccl_f32_bits(3e38f));
    assert_int_equal(eccl_quant_meta_decode(wide, &m), ECCL_ERR_PROTOCOL);

    struct {
        const char *what;
        int affine;
        size_t off;
        int width; /* 1: byte, 4: f32 bits */
        uint32_t value;
    } cases[] = {
        {"type 0", 0, 0, 1, 0},
        {"type 3", 0, 0, 1, 3},
        {"type 255", 1, 0, 1, 255},
        {"dtype f64", 0, 1, 1, ECCL_F64},
        {"dtype i32", 1, 1, 1, ECCL_I32},
        {"dtype 200", 0, 1, 1, 200},
        {"reserved byte", 0, 3, 1, 1},
        {"minmax zero point", 0, 2, 1, 3},
        {"minmax scale set", 0, 4, 4, 0x3f800000u},
        {"minmax min NaN", 0, 8, 4, 0x7fc00000u},
        {"minmax max inf", 0, 12, 4, 0x7f800000u},
        {"minmax min > max", 0, 8, 4, 0x40800000u /* 4.0 */},
        {"affine scale NaN", 1, 4, 4, 0x7fc00000u},
        {"affine scale inf", 1, 4, 4, 0x7f800000u},
        {"affine scale negative", 1, 4, 4, 0xbf000000u},
        {"affine scale -0", 1, 4, 4, 0x80000000u},
        {"affine scale subnormal", 1, 4, 4, 0x00400000u},
        {"affine scale 17 bits", 1, 4, 4, 0x3f000080u},
        {"affine grid overflows", 1, 4, 4, 0x7e000000u},
        {"affine min set", 1, 8, 4, 0x3f800000u},
        {"affine max set", 1, 12, 4, 0x80000000u},
    };
    for (size_t i = 0; i < N(cases); i++) {
        uint8_t w[ECCL_QUANT_META_BYTES];
        memcpy(w, cases[i].affine ? af : mm, sizeof w);
        if (cases[i].width == 1)
            w[cases[i].off] = (uint8_t)cases[i].value;
        else
            put32(w + cases[i].off, cases[i].value);
        memset(&m, 0x77, sizeof m);
        if (eccl_quant_meta_decode(w, &m) != ECCL_ERR_PROTOCOL)
            fail_msg("decode accepted: %s", cases[i].what);
        assert_int_equal(m.type, 0x77);
    }

    /* Records built by hand go through the same check. */
    eccl_quant_meta bad = {.type = ECCL_QUANT_AFFINE_U8, .dtype = ECCL_F32, .zero_point = 3,
                           .scale = 0.0f, .count = 2};
    uint8_t codes[2] = {1, 2}, wire[ECCL_QUANT_META_BYTES];
    float out[2] = {42.0f, 42.0f};
    assert_int_equal(eccl_quant_meta_check(&bad), ECCL_ERR_INVALID_ARG); /* scale 0 needs zp 0 */
    assert_int_equal(eccl_quant_meta_encode(&bad, wire), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_quant_dequantize(&bad, codes, 2, out), ECCL_ERR_INVALID_ARG);
    assert_true(out[0] == 42.0f && out[1] == 42.0f);
    assert_true(eccl_quant_meta_scale(&bad) == 0.0f);
    /* MINMAX f16: min must be an f16 value. */
    eccl_quant_meta h = {.type = ECCL_QUANT_MINMAX_U8, .dtype = ECCL_F16, .min = 0.1f,
                         .max = 1.0f, .count = 2};
    assert_int_equal(eccl_quant_meta_check(&h), ECCL_ERR_INVALID_ARG);
    h.min = eccl_f16_to_f32(eccl_f32_to_f16(0.1f));
    assert_int_equal(eccl_quant_meta_check(&h), ECCL_OK);
    /* count must match the codes handed in */
    assert_int_equal(eccl_quant_dequantize(&h, codes, 1, out), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_quant_meta_check(NULL), ECCL_ERR_INVALID_ARG);
}

static void test_invalid_args(void **state)
{
    (void)state;
    float x[2] = {1, 2};
    uint8_t codes[2];
    eccl_quant_meta m;
    assert_int_equal(eccl_quant_quantize((eccl_quant_type)0, ECCL_F32, x, 2, codes, &m), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_quant_quantize((eccl_quant_type)3, ECCL_F32, x, 2, codes, &m), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_quant_quantize(ECCL_QUANT_MINMAX_U8, ECCL_F64, x, 1, codes, &m), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_quant_quantize(ECCL_QUANT_MINMAX_U8, ECCL_I8, x, 2, codes, &m), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_quant_quantize(ECCL_QUANT_MINMAX_U8, ECCL_F32, NULL, 2, codes, &m), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_quant_quantize(ECCL_QUANT_MINMAX_U8, ECCL_F32, x, 2, NULL, &m), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_quant_quantize(ECCL_QUANT_MINMAX_U8, ECCL_F32, x, 2, codes, NULL), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_quant_roundtrip(ECCL_QUANT_MINMAX_U8, ECCL_F32, x, 2, codes, NULL), ECCL_ERR_INVALID_ARG);
    assert_true(x[0] == 1 && x[1] == 2);
    uint8_t wire[ECCL_QUANT_META_BYTES] = {0};
    assert_int_equal(eccl_quant_meta_decode(NULL, &m), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_quant_meta_decode(wire, NULL), ECCL_ERR_INVALID_ARG);
    quant_ok(ECCL_QUANT_MINMAX_U8, ECCL_F32, x, 2, codes, &m);
    assert_int_equal(eccl_quant_meta_encode(&m, NULL), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_quant_dequantize(&m, NULL, 2, x), ECCL_ERR_INVALID_ARG);
}

/* ---- round trips ---------------------------------------------------------------------- */

/* Quantises x' = roundtrip(x) again: same metadata bits, same codes, and
 * x' unchanged by a second round trip. Returns 0 if the codes differ (the
 * caller decides whether that is allowed), fails on anything else. */
static int requantise_same(eccl_quant_type t, const float *x1, size_t n, const uint8_t *c1,
                           const eccl_quant_meta *m1, int need_same_codes)
{
    float x2[1024];
    uint8_t c2[1024];
    eccl_quant_meta m2;
    assert_true(n <= 1024);
    memcpy(x2, x1, n * sizeof *x1);
    assert_int_equal(eccl_quant_roundtrip(t, ECCL_F32, x2, n, c2, &m2), ECCL_OK);
    assert_int_equal(m2.zero_point, m1->zero_point);
    assert_int_equal(eccl_f32_bits(m2.scale), eccl_f32_bits(m1->scale));
    assert_int_equal(eccl_f32_bits(m2.min), eccl_f32_bits(m1->min));
    assert_int_equal(eccl_f32_bits(m2.max), eccl_f32_bits(m1->max));
    int same = memcmp(c1, c2, n) == 0;
    if (need_same_codes) {
        if (!same)
            for (size_t i = 0; i < n; i++)
                if (c1[i] != c2[i])
                    fail_msg("type %d [%zu]: code %u requantised to %u (x'=%.9g)", t, i, c1[i],
                             c2[i], (double)x1[i]);
        assert_memory_equal(x1, x2, n * sizeof *x1);
    }
    return same;
}

static void test_roundtrip_idempotent(void **state)
{
    (void)state;
    enum { NN = 1024 };
    static float x[NN];
    static uint8_t codes[NN];
    static const size_t sizes[] = {1, 2, 5, 64, NN};
    uint64_t rng = 5;

    for (int round = 0; round < 40; round++)
        for (int shape = 0; shape < SHAPES; shape++)
            for (size_t si = 0; si < N(sizes); si++) {
                eccl_quant_meta m;
                size_t n = sizes[si];
                /* AFFINE f32: always. */
                fill(ECCL_F32, x, n, shape, &rng);
                assert_int_equal(eccl_quant_roundtrip(ECCL_QUANT_AFFINE_U8, ECCL_F32, x, n, codes, &m),
                                 ECCL_OK);
                requantise_same(ECCL_QUANT_AFFINE_U8, x, n, codes, &m, 1);
                /* MINMAX f32: metadata always; codes when well-conditioned
                 * (s >= 2 ulp of the largest magnitude). */
                fill(ECCL_F32, x, n, shape, &rng);
                assert_int_equal(eccl_quant_roundtrip(ECCL_QUANT_MINMAX_U8, ECCL_F32, x, n, codes, &m),
                                 ECCL_OK);
                float big = fmaxf(fabsf(m.min), fabsf(m.max));
                int conditioned = eccl_quant_meta_scale(&m) >= 2 * ulpf(big);
                requantise_same(ECCL_QUANT_MINMAX_U8, x, n, codes, &m, conditioned);
            }

    /* Edge chunks: tiny (subnormal) values, huge values, nearly constant,
     * a value a hair under a grid point. */
    static const float edges[][4] = {
        {1e-40f, -3e-41f, 0.0f, 7e-39f},
        {-3e38f, 1e38f, 2.5e38f, 0.0f},
        {1000.0f, 1000.0001f, 1000.0002f, 1000.0f},
        {-1.0f, 1.0f, 0.0039215684f, 0.5f},
        {0x1p-126f, 0x1p-125f, -0x1p-120f, 0.0f},
        {0.0f, 3 * 0x1p-149f, 1001 * 0x1p-149f, 5 * 0x1p-149f}, /* s raised to FLT_MIN */
    };
    for (size_t e = 0; e < N(edges); e++) {
        eccl_quant_meta m;
        memcpy(x, edges[e], sizeof edges[e]);
        assert_int_equal(eccl_quant_roundtrip(ECCL_QUANT_AFFINE_U8, ECCL_F32, x, 4, codes, &m), ECCL_OK);
        check_bound(ECCL_QUANT_AFFINE_U8, ECCL_F32, edges[e], x, 4, &m, codes);
        requantise_same(ECCL_QUANT_AFFINE_U8, x, 4, codes, &m, 1);
        memcpy(x, edges[e], sizeof edges[e]);
        if (eccl_quant_roundtrip(ECCL_QUANT_MINMAX_U8, ECCL_F32, x, 4, codes, &m) == ECCL_OK) {
            check_bound(ECCL_QUANT_MINMAX_U8, ECCL_F32, edges[e], x, 4, &m, codes);
            requantise_same(ECCL_QUANT_MINMAX_U8, x, 4, codes, &m, 0);
        }
    }
}

/* The known-answer table shared with the device kernels' test
 * (tests/kat_kernels.h). */
static void test_kernel_kat(void **state)
{
    (void)state;
    for (int d = 0; d < 3; d++)
        for (int t = 0; t < 2; t++)
            for (unsigned c = 0; c < KAT_QUANT_CASES; c++) {
                kat_quant_expect e = kat_quant_cpu(kat_quant_dtypes[d],
                                                   t ? ECCL_QUANT_AFFINE_U8 : ECCL_QUANT_MINMAX_U8, c);
                const kat_quant_expect *x = &kat_quant_expect_table[d][t][c];
                assert_int_equal(e.rc, x->rc);
                assert_int_equal(e.meta, x->meta);
                assert_int_equal(e.codes, x->codes);
                assert_int_equal(e.values, x->values);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_bounds),
        cmocka_unit_test(test_owner_matches_receivers),
        cmocka_unit_test(test_dequant_known_answers),
        cmocka_unit_test(test_constant_chunks),
        cmocka_unit_test(test_negative_range),
        cmocka_unit_test(test_affine_zero_exact),
        cmocka_unit_test(test_empty_chunk),
        cmocka_unit_test(test_non_finite_rejected),
        cmocka_unit_test(test_unrepresentable_ranges),
        cmocka_unit_test(test_meta_encoding),
        cmocka_unit_test(test_meta_malformed),
        cmocka_unit_test(test_invalid_args),
        cmocka_unit_test(test_roundtrip_idempotent),
        cmocka_unit_test(test_kernel_kat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
