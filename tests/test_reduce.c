/* Reduction kernels (core/coll/reduce.c), the f16/bf16 conversions they use
 * (core/util/half.h), and the dtype/op/result helpers (core/util/types.c).
 *
 * Expected values are written out by hand (wrap-around and rounding worked
 * out in the comments); the long-vector tests then compare the vectorised
 * kernels against a one-element-at-a-time reference written independently
 * here, and the conversions are checked exhaustively. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coll/reduce.h"
#include "eccl.h"
#include "util/half.h"
#include "util/types.h"
#include "kat_kernels.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* ---- helpers ------------------------------------------------------------- */

static uint64_t elem_bits(const void *p, size_t size)
{
    switch (size) {
    case 1: { uint8_t v; memcpy(&v, p, 1); return v; }
    case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
    case 8: { uint64_t v; memcpy(&v, p, 8); return v; }
    }
    /* No dtype has another size; reading 8 bytes here would run past a
     * narrower element (e.g. the last u16 of an array). */
    fail_msg("elem_bits: element size %zu", size);
    return 0;
}

static void expect_elems(const char *what, eccl_dtype dt, size_t es, const void *got,
                         const void *want, size_t n, int line)
{
    for (size_t i = 0; i < n; i++) {
        const unsigned char *g = (const unsigned char *)got + i * es;
        const unsigned char *w = (const unsigned char *)want + i * es;
        if (memcmp(g, w, es) != 0)
            fail_msg("line %d: %s %s [%zu]: got 0x%llx, want 0x%llx", line,
                     eccl_dtype_name(dt), what, i,
                     (unsigned long long)elem_bits(g, es),
                     (unsigned long long)elem_bits(w, es));
    }
}

/* Reduces a copy of a with b and compares with want, bit for bit. SUM is
 * also run as AVG, which must reduce identically. */
static void check_reduce(eccl_dtype dt, eccl_op op, const void *a, const void *b,
                         const void *want, size_t es, size_t n, int line)
{
    _Alignas(16) unsigned char buf[512];
    size_t bytes = n * es;
    assert_true(bytes <= sizeof buf);
    memcpy(buf, a, bytes);
    eccl_reduce_into(buf, b, n, dt, op);
    expect_elems(eccl_op_name(op), dt, es, buf, want, n, line);
    if (op == ECCL_SUM) {
        memcpy(buf, a, bytes);
        eccl_reduce_into(buf, b, n, dt, ECCL_AVG);
        expect_elems("avg (reduce step)", dt, es, buf, want, n, line);
    }
}

static void check_scale(eccl_dtype dt, const void *x, uint32_t divisor,
                        const void *want, size_t es, size_t n, int line)
{
    _Alignas(16) unsigned char buf[512];
    size_t bytes = n * es;
    assert_true(bytes <= sizeof buf);
    memcpy(buf, x, bytes);
    eccl_reduce_scale_div(buf, n, dt, divisor);
    expect_elems("scale_div", dt, es, buf, want, n, line);
}

/* The element size comes from the arrays, and must be the dtype's: a table
 * typed narrower than its dtype would be read past its end. */
#define CHECK_REDUCE(dt, op, a, b, want)                                       \
    do {                                                                       \
        assert_int_equal(sizeof((a)[0]), eccl_dtype_size(dt));                 \
        assert_int_equal(sizeof(a), sizeof(b));                                \
        assert_int_equal(sizeof(a), sizeof(want));                             \
        check_reduce(dt, op, a, b, want, sizeof((a)[0]), N(a), __LINE__);      \
    } while (0)

#define CHECK_SCALE(dt, x, divisor, want)                                      \
    do {                                                                       \
        assert_int_equal(sizeof((x)[0]), eccl_dtype_size(dt));                 \
        assert_int_equal(sizeof(x), sizeof(want));                             \
        check_scale(dt, x, divisor, want, sizeof((x)[0]), N(x), __LINE__);     \
    } while (0)

/* Every op for one dtype; AVG is SUM followed by division by 3, which
 * shows truncation toward zero on negative sums. */
#define CHECK_ALL_OPS(dt, a, b, sum, prod, mn, mx, avg3)                       \
    do {                                                                       \
        CHECK_REDUCE(dt, ECCL_SUM, a, b, sum);                                 \
        CHECK_REDUCE(dt, ECCL_PROD, a, b, prod);                               \
        CHECK_REDUCE(dt, ECCL_MIN, a, b, mn);                                  \
        CHECK_REDUCE(dt, ECCL_MAX, a, b, mx);                                  \
        CHECK_SCALE(dt, sum, 3, avg3);                                         \
    } while (0)

/* ---- integers: wrap-around, signed negatives, truncating division -------- */

static void test_i8(void **state)
{
    (void)state;
    const int8_t a[] = {127, -128, -100, 5, 0, -7, 16};
    const int8_t b[] = {1, -1, -100, -7, 0, 3, 16};
    /* 128 wraps to -128, -129 to 127, -200 to 56 */
    const int8_t sum[] = {-128, 127, 56, -2, 0, -4, 32};
    /* -128 * -1 = 128 wraps to -128; 10000 = 39 * 256 + 16; 256 wraps to 0 */
    const int8_t prod[] = {127, -128, 16, -35, 0, -21, 0};
    const int8_t mn[] = {1, -128, -100, -7, 0, -7, 16};
    const int8_t mx[] = {127, -1, -100, 5, 0, 3, 16};
    /* -128 / 3 = -42.67 -> -42; -2 / 3 -> 0; -4 / 3 -> -1 */
    const int8_t avg3[] = {-42, 42, 18, 0, 0, -1, 10};
    CHECK_ALL_OPS(ECCL_I8, a, b, sum, prod, mn, mx, avg3);
}

static void test_u8(void **state)
{
    (void)state;
    const uint8_t a[] = {255, 200, 0, 16, 7};
    const uint8_t b[] = {1, 100, 0, 16, 9};
    const uint8_t sum[] = {0, 44, 0, 32, 16};     /* 256 -> 0, 300 -> 44 */
    const uint8_t prod[] = {255, 32, 0, 0, 63};   /* 20000 = 78 * 256 + 32 */
    const uint8_t mn[] = {1, 100, 0, 16, 7};
    const uint8_t mx[] = {255, 200, 0, 16, 9};
    const uint8_t avg3[] = {0, 14, 0, 10, 5};
    CHECK_ALL_OPS(ECCL_U8, a, b, sum, prod, mn, mx, avg3);
}

static void test_i16(void **state)
{
    (void)state;
    const int16_t a[] = {32767, -32768, -200, 300, -5};
    const int16_t b[] = {1, -1, -200, 300, 7};
    const int16_t sum[] = {-32768, 32767, -400, 600, 2};
    /* 40000 - 65536 = -25536; 90000 - 65536 = 24464 */
    const int16_t prod[] = {32767, -32768, -25536, 24464, -35};
    const int16_t mn[] = {1, -32768, -200, 300, -5};
    const int16_t mx[] = {32767, -1, -200, 300, 7};
    const int16_t avg3[] = {-10922, 10922, -133, 200, 0};
    CHECK_ALL_OPS(ECCL_I16, a, b, sum, prod, mn, mx, avg3);
}

static void test_u16(void **state)
{
    (void)state;
    const uint16_t a[] = {65535, 40000, 0, 256, 3};
    const uint16_t b[] = {1, 40000, 5, 256, 65535};
    /* 80000 - 65536 = 14464; 65538 -> 2 */
    const uint16_t sum[] = {0, 14464, 5, 512, 2};
    /* 40000^2 = 24414 * 65536 + 4096; 3 * 65535 = 196605 = 2 * 65536 + 65533.
     * 65535 * 65535 would overflow int if u16 were promoted to int. */
    const uint16_t prod[] = {65535, 4096, 0, 0, 65533};
    const uint16_t mn[] = {1, 40000, 0, 256, 3};
    const uint16_t mx[] = {65535, 40000, 5, 256, 65535};
    const uint16_t avg3[] = {0, 4821, 1, 170, 0};
    CHECK_ALL_OPS(ECCL_U16, a, b, sum, prod, mn, mx, avg3);

    const uint16_t big[] = {65535, 65535};
    const uint16_t sq[] = {1, 1}; /* 65535^2 = (2^16 - 1)^2 = 1 mod 2^16 */
    CHECK_REDUCE(ECCL_U16, ECCL_PROD, big, big, sq);
}

static void test_i32(void **state)
{
    (void)state;
    const int32_t a[] = {INT32_MAX, INT32_MIN, -2000000000, 65536, -3};
    const int32_t b[] = {1, -1, -2000000000, 65536, 5};
    /* -4e9 + 2^32 = 294967296 */
    const int32_t sum[] = {INT32_MIN, INT32_MAX, 294967296, 131072, 2};
    /* 4e18 mod 2^32 = 2643460096 -> -1651507200; 2^32 -> 0 */
    const int32_t prod[] = {INT32_MAX, INT32_MIN, -1651507200, 0, -15};
    const int32_t mn[] = {1, INT32_MIN, -2000000000, 65536, -3};
    const int32_t mx[] = {INT32_MAX, -1, -2000000000, 65536, 5};
    const int32_t avg3[] = {-715827882, 715827882, 98322432, 43690, 0};
    CHECK_ALL_OPS(ECCL_I32, a, b, sum, prod, mn, mx, avg3);

    /* The divisor is unsigned; a signed dividend must stay signed. */
    const int32_t neg[] = {-7, -1, INT32_MIN};
    const int32_t half[] = {-3, 0, -1073741824};
    CHECK_SCALE(ECCL_I32, neg, 2, half);
    const int32_t huge[] = {0, 0, -1}; /* INT32_MIN / 2^31 = -1 */
    CHECK_SCALE(ECCL_I32, neg, 0x80000000u, huge);
}

static void test_u32(void **state)
{
    (void)state;
    const uint32_t a[] = {UINT32_MAX, 3000000000u, 0, 65536, 7};
    const uint32_t b[] = {1, 3000000000u, 9, 65536, UINT32_MAX};
    const uint32_t sum[] = {0, 1705032704u, 9, 131072, 6};
    const uint32_t prod[] = {UINT32_MAX, 3800301568u, 0, 0, 4294967289u};
    const uint32_t mn[] = {1, 3000000000u, 0, 65536, 7};
    const uint32_t mx[] = {UINT32_MAX, 3000000000u, 9, 65536, UINT32_MAX};
    const uint32_t avg3[] = {0, 568344234u, 3, 43690, 2};
    CHECK_ALL_OPS(ECCL_U32, a, b, sum, prod, mn, mx, avg3);
}

static void test_i64(void **state)
{
    (void)state;
    const int64_t a[] = {INT64_MAX, INT64_MIN, -5000000000000000000, 4294967296, -3};
    const int64_t b[] = {1, -1, -5000000000000000000, 4294967296, 5};
    /* -1e19 + 2^64 = 8446744073709551616 */
    const int64_t sum[] = {INT64_MIN, INT64_MAX, 8446744073709551616, 8589934592, 2};
    const int64_t prod[] = {INT64_MAX, INT64_MIN, -9051522149004607488, 0, -15};
    const int64_t mn[] = {1, INT64_MIN, -5000000000000000000, 4294967296, -3};
    const int64_t mx[] = {INT64_MAX, -1, -5000000000000000000, 4294967296, 5};
    const int64_t avg3[] = {-3074457345618258602, 3074457345618258602,
                            2815581357903183872, 2863311530, 0};
    CHECK_ALL_OPS(ECCL_I64, a, b, sum, prod, mn, mx, avg3);
}

static void test_u64(void **state)
{
    (void)state;
    const uint64_t a[] = {UINT64_MAX, 10000000000000000000u, 0, 4294967296, 7};
    const uint64_t b[] = {1, 10000000000000000000u, 9, 4294967296, UINT64_MAX};
    const uint64_t sum[] = {0, 1553255926290448384u, 9, 8589934592, 6};
    const uint64_t prod[] = {UINT64_MAX, 687399551400673280u, 0, 0,
                             18446744073709551609u};
    const uint64_t mn[] = {1, 10000000000000000000u, 0, 4294967296, 7};
    const uint64_t mx[] = {UINT64_MAX, 10000000000000000000u, 9, 4294967296, UINT64_MAX};
    const uint64_t avg3[] = {0, 517751975430149461u, 3, 2863311530, 2};
    CHECK_ALL_OPS(ECCL_U64, a, b, sum, prod, mn, mx, avg3);
}

/* ---- native floats: rounding, overflow, subnormals, signed zeros --------- */

static void test_f32(void **state)
{
    (void)state;
    const float a[] = {1.5f, -2.0f, 1.0f, 0x1p127f, -0.0f, 3.0f, 0x1p-149f, 0x1.000002p0f};
    const float b[] = {2.25f, 0.5f, 0x1p-24f, 0x1p127f, 0.0f, -3.0f, 0x1p-149f, 0x1p-24f};
    /* 1 + 2^-24 is a tie, to even (1); (1 + 2^-23) + 2^-24 is a tie, to even
     * (1 + 2^-22); 2^128 overflows; -0 + +0 and 3 + -3 are +0. */
    const float sum[] = {3.75f, -1.5f, 1.0f, INFINITY, 0.0f, 0.0f, 0x1p-148f, 0x1.000004p0f};
    /* 2^-298 underflows to +0; -0 * +0 = -0 */
    const float prod[] = {3.375f, -1.0f, 0x1p-24f, INFINITY, -0.0f, -9.0f, 0.0f, 0x1.000002p-24f};
    /* equal operands (-0 vs +0, and 2^127, 2^-149) keep dst */
    const float mn[] = {1.5f, -2.0f, 0x1p-24f, 0x1p127f, -0.0f, -3.0f, 0x1p-149f, 0x1p-24f};
    const float mx[] = {2.25f, 0.5f, 1.0f, 0x1p127f, -0.0f, 3.0f, 0x1p-149f, 0x1.000002p0f};
    /* 1/3 rounds to 0x1.555556p-2; 2^-148 / 3 = (2/3) * 2^-149 rounds up to
     * the smallest subnormal */
    const float avg3[] = {1.25f, -0.5f, 0x1.555556p-2f, INFINITY, 0.0f, 0.0f,
                          0x1p-149f, 0x1.55555ap-2f};
    CHECK_ALL_OPS(ECCL_F32, a, b, sum, prod, mn, mx, avg3);

    const float minus[] = {0.0f, -0.0f};
    const float plus[] = {-0.0f, 0.0f};
    CHECK_REDUCE(ECCL_F32, ECCL_MIN, minus, plus, minus); /* ties keep dst */
    CHECK_REDUCE(ECCL_F32, ECCL_MAX, minus, plus, minus);
}

static void test_f64(void **state)
{
    (void)state;
    const double a[] = {1.5, -2.0, 1.0, 0x1p1023, -0.0, 3.0, 0x1p-1074, 0x1.0000000000001p0};
    const double b[] = {2.25, 0.5, 0x1p-53, 0x1p1023, 0.0, -3.0, 0x1p-1074, 0x1p-53};
    const double sum[] = {3.75, -1.5, 1.0, INFINITY, 0.0, 0.0, 0x1p-1073, 0x1.0000000000002p0};
    const double prod[] = {3.375, -1.0, 0x1p-53, INFINITY, -0.0, -9.0, 0.0, 0x1.0000000000001p-53};
    const double mn[] = {1.5, -2.0, 0x1p-53, 0x1p1023, -0.0, -3.0, 0x1p-1074, 0x1p-53};
    const double mx[] = {2.25, 0.5, 1.0, 0x1p1023, -0.0, 3.0, 0x1p-1074, 0x1.0000000000001p0};
    const double avg3[] = {1.25, -0.5, 0x1.5555555555555p-2, INFINITY, 0.0, 0.0,
                           0x1p-1074, 0x1.5555555555558p-2};
    CHECK_ALL_OPS(ECCL_F64, a, b, sum, prod, mn, mx, avg3);

    /* A world size above 2^24 is exact in double. */
    const double big[] = {16777217.0 * 3.0};
    const double one[] = {3.0};
    CHECK_SCALE(ECCL_F64, big, 16777217u, one);
}

/* ---- f16 / bf16: rounding ties, overflow, subnormals, signed zeros ------- */

static void test_f16(void **state)
{
    (void)state;
    /* 0x3c00 = 1, 0x1000 = 2^-11 (half an ulp of 1), 0x7bff = 65504 (max),
     * 0x4c00 = 16, 0x4800 = 8, 0x0001 = 2^-24 (min subnormal), 0x0400 =
     * 2^-14 (min normal), 0x03ff = max subnormal, 0x3800 = 0.5, 0x3a00 =
     * 0.75, 0x5c00 = 256, 0x3555 = 0.333251953125, 0x4200 = 3, 0xc500 = -5,
     * 0x3e00 = 1.5. */
    const uint16_t a[] = {0x3c00, 0x3c01, 0x3c00, 0x7bff, 0x7bff, 0x7bff,
                          0x0001, 0x0400, 0x8000, 0x8000, 0x03ff, 0xfbff,
                          0x3c00, 0x0003, 0x0001, 0x5c00, 0x3555, 0xc500};
    const uint16_t b[] = {0x1000, 0x1000, 0x1001, 0x7bff, 0x4c00, 0x4800,
                          0x0001, 0x8001, 0x8000, 0x0000, 0x0001, 0xfbff,
                          0xbc00, 0x3800, 0x3a00, 0x5c00, 0x4200, 0x3e00};
    /* 1 + 2^-11: tie, to even 1. 0x3c01 + 2^-11: tie, to even 0x3c02. Just
     * above the tie rounds up. 65504 + 16 = 65520: tie between 65504 (odd)
     * and 65536, so infinity; 65504 + 8 stays. Subnormal sums; 2^-14 - 2^-24
     * is the largest subnormal, and max subnormal + min subnormal the
     * smallest normal. -0 + -0 = -0, -0 + +0 = +0, 1 + -1 = +0.
     * 0.333251953125 + 3 = 1706.625 * 2^-9 -> 1707 * 2^-9 = 0x42ab. */
    const uint16_t sum[] = {0x3c00, 0x3c02, 0x3c01, 0x7c00, 0x7c00, 0x7bff,
                            0x0002, 0x03ff, 0x8000, 0x0000, 0x0400, 0xfc00,
                            0x0000, 0x3800, 0x3a00, 0x6000, 0x42ab, 0xc300};
    /* 2^-24 * 0.5 = 2^-25: tie between 0 and 2^-24, to even 0. 3 * 2^-24 *
     * 0.5 = 1.5 * 2^-24: tie, to even 2. 0.75 * 2^-24 rounds up to 2^-24.
     * 2^-14 * -2^-24 underflows to -0; -0 * +0 = -0. 256 * 256 = 65536
     * overflows. 0.333251953125 * 3 = 0.999755859375, exactly halfway
     * between 0x3bff and 1: to even, 1. */
    const uint16_t prod[] = {0x1000, 0x1001, 0x1001, 0x7c00, 0x7c00, 0x7c00,
                             0x0000, 0x8000, 0x0000, 0x8000, 0x0000, 0x7c00,
                             0xbc00, 0x0002, 0x0001, 0x7c00, 0x3c00, 0xc780};
    const uint16_t mn[] = {0x1000, 0x1000, 0x1001, 0x7bff, 0x4c00, 0x4800,
                           0x0001, 0x8001, 0x8000, 0x8000, 0x0001, 0xfbff,
                           0xbc00, 0x0003, 0x0001, 0x5c00, 0x3555, 0xc500};
    const uint16_t mx[] = {0x3c00, 0x3c01, 0x3c00, 0x7bff, 0x7bff, 0x7bff,
                           0x0001, 0x0400, 0x8000, 0x8000, 0x03ff, 0xfbff,
                           0x3c00, 0x3800, 0x3a00, 0x5c00, 0x4200, 0x3e00};
    CHECK_REDUCE(ECCL_F16, ECCL_SUM, a, b, sum);
    CHECK_REDUCE(ECCL_F16, ECCL_PROD, a, b, prod);
    CHECK_REDUCE(ECCL_F16, ECCL_MIN, a, b, mn);
    CHECK_REDUCE(ECCL_F16, ECCL_MAX, a, b, mx);

    /* 3 / 3 = 1; 1 / 3 -> 0x3555; 2^-24 / 3 -> 0; 3 * 2^-24 / 3 = 2^-24;
     * -inf stays; 65504 / 3 = 1364.67 * 16 -> 1365 * 16 = 0x7555; -5 / 3 =
     * -1706.67 * 2^-10 -> 0xbeab; -2^-24 / 3 -> -0. */
    const uint16_t x[] = {0x4200, 0x3c00, 0x0001, 0x0003, 0xfc00, 0x7bff, 0xc500, 0x8001};
    const uint16_t d3[] = {0x3c00, 0x3555, 0x0000, 0x0001, 0xfc00, 0x7555, 0xbeab, 0x8000};
    CHECK_SCALE(ECCL_F16, x, 3, d3);
    /* 2^-24 / 2: tie, to 0; 3 * 2^-24 / 2: tie, to 2 * 2^-24; -2^-24 / 2:
     * tie, to -0. */
    const uint16_t d2[] = {0x3e00, 0x3800, 0x0000, 0x0002, 0xfc00, 0x77ff, 0xc100, 0x8000};
    CHECK_SCALE(ECCL_F16, x, 2, d2);
    /* 65504 / 65535 = 0.99953 -> 0x3bff */
    const uint16_t max_f16[] = {0x7bff};
    const uint16_t near_one[] = {0x3bff};
    CHECK_SCALE(ECCL_F16, max_f16, 65535, near_one);
}

static void test_bf16(void **state)
{
    (void)state;
    /* 0x3f80 = 1, 0x3b80 = 2^-8 (half an ulp of 1), 0x7f7f = max finite,
     * 0x7b00 = 2^119 (half an ulp of it), 0x0001 = 2^-133 (min subnormal),
     * 0x0080 = 2^-126 (min normal), 0x3f00 = 0.5, 0x3f40 = 0.75, 0x5f80 =
     * 2^64, 0x3eab = 0.333984375, 0x4040 = 3, 0xc0a0 = -5, 0x3fc0 = 1.5. */
    const uint16_t a[] = {0x3f80, 0x3f81, 0x3f80, 0x7f7f, 0x7f7f, 0x7f7e,
                          0x0001, 0x0080, 0x8000, 0x8000, 0x007f, 0xff7f,
                          0x3f80, 0x0003, 0x0001, 0x5f80, 0x3eab, 0xc0a0};
    const uint16_t b[] = {0x3b80, 0x3b80, 0x3b81, 0x7f7f, 0x7b00, 0x7b00,
                          0x0001, 0x8001, 0x8000, 0x0000, 0x0001, 0xff7f,
                          0xbf80, 0x3f00, 0x3f40, 0x5f80, 0x4040, 0x3fc0};
    /* Ties to even as for f16; max + half an ulp: tie with an odd mantissa,
     * so infinity; 0x7f7e + the same: tie, even, stays. */
    const uint16_t sum[] = {0x3f80, 0x3f82, 0x3f81, 0x7f80, 0x7f80, 0x7f7e,
                            0x0002, 0x007f, 0x8000, 0x0000, 0x0080, 0xff80,
                            0x0000, 0x3f00, 0x3f40, 0x6000, 0x4055, 0xc060};
    /* 2^-133 * 0.5: tie, to 0; 3 * 2^-134: tie, to 2 * 2^-133; 2^128
     * overflows; 0.333984375 * 3 = 1.001953125 rounds down to 1. */
    const uint16_t prod[] = {0x3b80, 0x3b81, 0x3b81, 0x7f80, 0x7f80, 0x7f80,
                             0x0000, 0x8000, 0x0000, 0x8000, 0x0000, 0x7f80,
                             0xbf80, 0x0002, 0x0001, 0x7f80, 0x3f80, 0xc0f0};
    const uint16_t mn[] = {0x3b80, 0x3b80, 0x3b81, 0x7f7f, 0x7b00, 0x7b00,
                           0x0001, 0x8001, 0x8000, 0x8000, 0x0001, 0xff7f,
                           0xbf80, 0x0003, 0x0001, 0x5f80, 0x3eab, 0xc0a0};
    const uint16_t mx[] = {0x3f80, 0x3f81, 0x3f80, 0x7f7f, 0x7f7f, 0x7f7e,
                           0x0001, 0x0080, 0x8000, 0x8000, 0x007f, 0xff7f,
                           0x3f80, 0x3f00, 0x3f40, 0x5f80, 0x4040, 0x3fc0};
    CHECK_REDUCE(ECCL_BF16, ECCL_SUM, a, b, sum);
    CHECK_REDUCE(ECCL_BF16, ECCL_PROD, a, b, prod);
    CHECK_REDUCE(ECCL_BF16, ECCL_MIN, a, b, mn);
    CHECK_REDUCE(ECCL_BF16, ECCL_MAX, a, b, mx);

    /* 3 / 3 = 1; 1 / 3 -> 0x3eab; 2^-133 / 2: tie, to 0; 3 * 2^-133 / 2:
     * tie, to 2 * 2^-133; -inf stays; -5 / 3 -> 0xbfd5; -2^-133 / 3 -> -0. */
    const uint16_t x[] = {0x4040, 0x3f80, 0x0001, 0x0003, 0xff80, 0xc0a0, 0x8001};
    const uint16_t d3[] = {0x3f80, 0x3eab, 0x0000, 0x0001, 0xff80, 0xbfd5, 0x8000};
    CHECK_SCALE(ECCL_BF16, x, 3, d3);
    const uint16_t d2[] = {0x3fc0, 0x3f00, 0x0000, 0x0002, 0xff80, 0xc020, 0x8000};
    CHECK_SCALE(ECCL_BF16, x, 2, d2);
}

/* ---- NaN and infinity, every float dtype --------------------------------- */

typedef struct float_fmt {
    eccl_dtype dt;
    uint64_t qnan1, qnan2, snan, pinf, ninf, one, five, pzero, nzero;
} float_fmt;

static const float_fmt float_fmts[] = {
    {ECCL_F16, 0x7e01, 0xfe02, 0x7c01, 0x7c00, 0xfc00, 0x3c00, 0x4500, 0x0000, 0x8000},
    {ECCL_BF16, 0x7fc1, 0xffc2, 0x7f81, 0x7f80, 0xff80, 0x3f80, 0x40a0, 0x0000, 0x8000},
    {ECCL_F32, 0x7fc00001, 0xffc00002, 0x7f800001, 0x7f800000, 0xff800000,
     0x3f800000, 0x40a00000, 0, 0x80000000},
    {ECCL_F64, 0x7ff8000000000001, 0xfff8000000000002, 0x7ff0000000000001,
     0x7ff0000000000000, 0xfff0000000000000, 0x3ff0000000000000,
     0x4014000000000000, 0, 0x8000000000000000},
};

static void put_bits(unsigned char *buf, size_t i, size_t es, uint64_t v)
{
    switch (es) {
    case 2: { uint16_t x = (uint16_t)v; memcpy(buf + i * es, &x, es); break; }
    case 4: { uint32_t x = (uint32_t)v; memcpy(buf + i * es, &x, es); break; }
    default: memcpy(buf + i * es, &v, es); break;
    }
}

static double as_double(eccl_dtype dt, const void *p)
{
    switch (dt) {
    case ECCL_F16: { uint16_t h; memcpy(&h, p, 2); return eccl_f16_to_f32(h); }
    case ECCL_BF16: { uint16_t h; memcpy(&h, p, 2); return eccl_bf16_to_f32(h); }
    case ECCL_F32: { float f; memcpy(&f, p, 4); return f; }
    default: { double d; memcpy(&d, p, 8); return d; }
    }
}

/* Expected result of one element: bits, or any NaN (arithmetic NaNs carry a
 * platform-defined payload), or the named infinity. */
enum { EXACT, ANY_NAN };
typedef struct expect {
    int kind;
    uint64_t bits;
} expect;

static void check_special(const float_fmt *f, eccl_op op, const uint64_t *a,
                          const uint64_t *b, const expect *want, size_t n)
{
    size_t es = eccl_dtype_size(f->dt);
    _Alignas(16) unsigned char d[256], s[256];
    for (size_t i = 0; i < n; i++) {
        put_bits(d, i, es, a[i]);
        put_bits(s, i, es, b[i]);
    }
    eccl_reduce_into(d, s, n, f->dt, op);
    for (size_t i = 0; i < n; i++) {
        uint64_t got = elem_bits(d + i * es, es);
        if (want[i].kind == ANY_NAN) {
            if (!isnan(as_double(f->dt, d + i * es)))
                fail_msg("%s %s [%zu]: got 0x%llx, want a NaN", eccl_dtype_name(f->dt),
                         eccl_op_name(op), i, (unsigned long long)got);
        } else if (got != want[i].bits) {
            fail_msg("%s %s [%zu]: got 0x%llx, want 0x%llx", eccl_dtype_name(f->dt),
                     eccl_op_name(op), i, (unsigned long long)got,
                     (unsigned long long)want[i].bits);
        }
    }
}

static void test_nan_inf(void **state)
{
    (void)state;
    for (size_t k = 0; k < N(float_fmts); k++) {
        const float_fmt *f = &float_fmts[k];
        const uint64_t a[] = {f->qnan1, f->one, f->qnan1, f->pinf, f->pinf,
                              f->ninf, f->snan, f->one, f->pinf, f->qnan1,
                              f->pinf, f->pzero, f->ninf};
        const uint64_t b[] = {f->one, f->qnan2, f->qnan2, f->ninf, f->one,
                              f->five, f->one, f->snan, f->qnan2, f->pinf,
                              f->pzero, f->ninf, f->nzero};
        const expect nan = {ANY_NAN, 0};
#define X(v) {EXACT, (v)}
        /* MIN/MAX keep the first NaN operand's exact bits, signalling or
         * not: dst's if it is a NaN, else src's. */
        const expect mn[] = {X(f->qnan1), X(f->qnan2), X(f->qnan1), X(f->ninf),
                             X(f->one), X(f->ninf), X(f->snan), X(f->snan),
                             X(f->qnan2), X(f->qnan1), X(f->pzero), X(f->ninf),
                             X(f->ninf)};
        const expect mx[] = {X(f->qnan1), X(f->qnan2), X(f->qnan1), X(f->pinf),
                             X(f->pinf), X(f->five), X(f->snan), X(f->snan),
                             X(f->qnan2), X(f->qnan1), X(f->pinf), X(f->pzero),
                             X(f->nzero)};
        /* inf + -inf = NaN; inf + 1 = inf; -inf + 5 = -inf; inf + 0 = inf */
        const expect sum[] = {nan, nan, nan, nan, X(f->pinf), X(f->ninf), nan,
                              nan, nan, nan, X(f->pinf), X(f->ninf), X(f->ninf)};
        /* inf * -inf = -inf; inf * 0, 0 * -inf and -inf * -0 are NaN */
        const expect prod[] = {nan, nan, nan, X(f->ninf), X(f->pinf),
                               X(f->ninf), nan, nan, nan, nan, nan, nan, nan};
#undef X
        check_special(f, ECCL_MIN, a, b, mn, N(a));
        check_special(f, ECCL_MAX, a, b, mx, N(a));
        check_special(f, ECCL_SUM, a, b, sum, N(a));
        check_special(f, ECCL_AVG, a, b, sum, N(a));
        check_special(f, ECCL_PROD, a, b, prod, N(a));

        /* scale_div keeps infinities and NaNs NaN. */
        size_t es = eccl_dtype_size(f->dt);
        _Alignas(16) unsigned char x[64];
        put_bits(x, 0, es, f->pinf);
        put_bits(x, 1, es, f->ninf);
        put_bits(x, 2, es, f->qnan1);
        eccl_reduce_scale_div(x, 3, f->dt, 7);
        assert_int_equal(elem_bits(x, es), f->pinf);
        assert_int_equal(elem_bits(x + es, es), f->ninf);
        assert_true(isnan(as_double(f->dt, x + 2 * es)));
    }
}

/* ---- count 0, odd counts, invalid arguments, divisor 0 and 1 ------------- */

static void test_edges(void **state)
{
    (void)state;
    for (int dt = 0; dt < ECCL_DTYPE_COUNT; dt++) {
        for (int op = 0; op < ECCL_OP_COUNT; op++) {
            unsigned char d[16], s[16], keep[16];
            memset(d, 0x5a, sizeof d);
            memset(s, 0x11, sizeof s);
            memcpy(keep, d, sizeof d);
            eccl_reduce_into(d, s, 0, (eccl_dtype)dt, (eccl_op)op);
            assert_memory_equal(d, keep, sizeof d);
        }
        unsigned char x[16], keep[16];
        memset(x, 0x5a, sizeof x);
        memcpy(keep, x, sizeof x);
        eccl_reduce_scale_div(x, 0, (eccl_dtype)dt, 3);
        assert_memory_equal(x, keep, sizeof x);
        /* AVG over one peer is its own value; 0 must not trap. */
        eccl_reduce_scale_div(x, 16 / eccl_dtype_size((eccl_dtype)dt), (eccl_dtype)dt, 1);
        assert_memory_equal(x, keep, sizeof x);
        eccl_reduce_scale_div(x, 16 / eccl_dtype_size((eccl_dtype)dt), (eccl_dtype)dt, 0);
        assert_memory_equal(x, keep, sizeof x);
    }

    /* An invalid dtype or op does nothing. */
    unsigned char d[8] = {1, 2, 3, 4, 5, 6, 7, 8}, s[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    unsigned char keep[8];
    memcpy(keep, d, sizeof d);
    eccl_reduce_into(d, s, 8, ECCL_DTYPE_COUNT, ECCL_SUM);
    eccl_reduce_into(d, s, 8, (eccl_dtype)-1, ECCL_SUM);
    eccl_reduce_into(d, s, 8, ECCL_U8, ECCL_OP_COUNT);
    eccl_reduce_into(d, s, 8, ECCL_U8, (eccl_op)-1);
    eccl_reduce_scale_div(d, 8, ECCL_DTYPE_COUNT, 2);
    assert_memory_equal(d, keep, sizeof d);

    /* Odd counts stop exactly at count: the element after is untouched. */
    for (size_t n = 1; n <= 9; n += 2) {
        float fd[10], fs[10];
        for (size_t i = 0; i < 10; i++) {
            fd[i] = (float)i;
            fs[i] = 100.0f;
        }
        eccl_reduce_into(fd, fs, n, ECCL_F32, ECCL_SUM);
        for (size_t i = 0; i < 10; i++)
            assert_true(fd[i] == (i < n ? (float)i + 100.0f : (float)i));
    }
}

/* ---- long vectors against an element-by-element reference --------------- */

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64*: deterministic, so failures reproduce. */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* Fills n elements: the first `ordinary` are finite, normal, moderate values
 * (so the kernels' fast paths run), the rest are random bit patterns, which
 * hit every special value. */
static void fill(eccl_dtype dt, unsigned char *p, size_t n, size_t ordinary, uint64_t *rng)
{
    size_t es = eccl_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng_next(rng);
        if (i < ordinary) {
            int sign = (r >> 40) & 1;
            double v = ldexp((double)((r & 0xffffff) | 0x1000000), -24 - (int)((r >> 32) % 8));
            v = sign ? -v : v;
            switch (dt) {
            case ECCL_F16: r = eccl_f32_to_f16((float)v); break;
            case ECCL_BF16: r = eccl_f32_to_bf16((float)v); break;
            case ECCL_F32: { float f = (float)v; uint32_t u; memcpy(&u, &f, 4); r = u; break; }
            case ECCL_F64: memcpy(&r, &v, 8); break;
            default: break; /* integers: every pattern is ordinary */
            }
        }
        memcpy(p + i * es, &r, es); /* little-endian: the low bytes */
    }
}

static int f32_take(float a, float b, int want_min)
{
    if (isnan(a))
        return 0;
    if (isnan(b))
        return 1;
    return want_min ? b < a : b > a;
}

/* One element, written the obvious way, independently of reduce.c. */
static void ref_one(eccl_dtype dt, eccl_op op, unsigned char *d, const unsigned char *s)
{
    if (op == ECCL_AVG)
        op = ECCL_SUM;
    size_t es = eccl_dtype_size(dt);
    int is_signed = dt == ECCL_I8 || dt == ECCL_I16 || dt == ECCL_I32 || dt == ECCL_I64;
    if (dt <= ECCL_U64) {
        uint64_t ua = elem_bits(d, es), ub = elem_bits(s, es), r;
        int bits = (int)es * 8;
        uint64_t mask = bits == 64 ? ~0ULL : (1ULL << bits) - 1;
        /* sign-extend for ordering */
        int64_t sa = (int64_t)(ua << (64 - bits)) >> (64 - bits);
        int64_t sb = (int64_t)(ub << (64 - bits)) >> (64 - bits);
        switch (op) {
        case ECCL_SUM: r = (ua + ub) & mask; break;
        case ECCL_PROD: r = (ua * ub) & mask; break;
        case ECCL_MIN: r = (is_signed ? sb < sa : ub < ua) ? ub : ua; break;
        default: r = (is_signed ? sb > sa : ub > ua) ? ub : ua; break;
        }
        memcpy(d, &r, es);
        return;
    }
    if (dt == ECCL_F64) {
        double a, b, r;
        memcpy(&a, d, 8);
        memcpy(&b, s, 8);
        switch (op) {
        case ECCL_SUM: r = a + b; break;
        case ECCL_PROD: r = a * b; break;
        default: {
            int take = isnan(a) ? 0 : isnan(b) ? 1 : op == ECCL_MIN ? b < a : b > a;
            r = take ? b : a;
        }
        }
        memcpy(d, &r, 8);
        return;
    }
    if (dt == ECCL_F32) {
        float a, b, r;
        memcpy(&a, d, 4);
        memcpy(&b, s, 4);
        switch (op) {
        case ECCL_SUM: r = a + b; break;
        case ECCL_PROD: r = a * b; break;
        default: r = f32_take(a, b, op == ECCL_MIN) ? b : a;
        }
        memcpy(d, &r, 4);
        return;
    }
    uint16_t ha, hb, hr;
    memcpy(&ha, d, 2);
    memcpy(&hb, s, 2);
    float a = dt == ECCL_F16 ? eccl_f16_to_f32(ha) : eccl_bf16_to_f32(ha);
    float b = dt == ECCL_F16 ? eccl_f16_to_f32(hb) : eccl_bf16_to_f32(hb);
    if (op == ECCL_MIN || op == ECCL_MAX) {
        hr = f32_take(a, b, op == ECCL_MIN) ? hb : ha;
    } else {
        float r = op == ECCL_SUM ? a + b : a * b;
        hr = dt == ECCL_F16 ? eccl_f32_to_f16(r) : eccl_f32_to_bf16(r);
    }
    memcpy(d, &hr, 2);
}

static int is_float(eccl_dtype dt)
{
    return dt == ECCL_F16 || dt == ECCL_BF16 || dt == ECCL_F32 || dt == ECCL_F64;
}

#define LONG_N 1037 /* four 256-element blocks and an odd tail */

static void test_long_vs_reference(void **state)
{
    (void)state;
    static _Alignas(64) unsigned char d[(LONG_N + 8) * 8], s[(LONG_N + 8) * 8];
    static _Alignas(64) unsigned char ref[(LONG_N + 8) * 8];
    uint64_t rng = 0x9e3779b97f4a7c15ULL;
    for (int dt = 0; dt < ECCL_DTYPE_COUNT; dt++) {
        size_t es = eccl_dtype_size((eccl_dtype)dt);
        for (int op = 0; op < ECCL_OP_COUNT; op++) {
            /* Offsets by whole elements, so vector loops peel and tail. */
            for (size_t off = 0; off < 3; off++) {
                unsigned char *dp = d + off * es, *sp = s + (2 - off) * es;
                fill((eccl_dtype)dt, dp, LONG_N, 600, &rng);
                fill((eccl_dtype)dt, sp, LONG_N, 600, &rng);
                memcpy(ref, dp, LONG_N * es);
                for (size_t i = 0; i < LONG_N; i++)
                    ref_one((eccl_dtype)dt, (eccl_op)op, ref + i * es, sp + i * es);
                eccl_reduce_into(dp, sp, LONG_N, (eccl_dtype)dt, (eccl_op)op);
                for (size_t i = 0; i < LONG_N; i++) {
                    const unsigned char *g = dp + i * es, *w = ref + i * es;
                    if (memcmp(g, w, es) == 0)
                        continue;
                    /* arithmetic NaNs: any payload will do */
                    if (is_float((eccl_dtype)dt) && op != ECCL_MIN && op != ECCL_MAX &&
                        isnan(as_double((eccl_dtype)dt, g)) &&
                        isnan(as_double((eccl_dtype)dt, w)))
                        continue;
                    fail_msg("%s %s off %zu [%zu]: got 0x%llx, want 0x%llx",
                             eccl_dtype_name((eccl_dtype)dt), eccl_op_name((eccl_op)op),
                             off, i, (unsigned long long)elem_bits(g, es),
                             (unsigned long long)elem_bits(w, es));
                }
            }
        }
    }
}

/* Same inputs, same bytes: across repeated calls and across alignments. */
static void test_determinism(void **state)
{
    (void)state;
    static _Alignas(64) unsigned char a[(LONG_N + 8) * 8], b[(LONG_N + 8) * 8];
    static _Alignas(64) unsigned char r1[(LONG_N + 8) * 8], r2[(LONG_N + 8) * 8];
    uint64_t rng = 12345;
    for (int dt = 0; dt < ECCL_DTYPE_COUNT; dt++) {
        size_t es = eccl_dtype_size((eccl_dtype)dt);
        size_t bytes = LONG_N * es;
        for (int op = 0; op < ECCL_OP_COUNT; op++) {
            fill((eccl_dtype)dt, a, LONG_N, 300, &rng);
            fill((eccl_dtype)dt, b, LONG_N, 300, &rng);
            memcpy(r1, a, bytes);
            eccl_reduce_into(r1, b, LONG_N, (eccl_dtype)dt, (eccl_op)op);
            memcpy(r2, a, bytes);
            eccl_reduce_into(r2, b, LONG_N, (eccl_dtype)dt, (eccl_op)op);
            assert_memory_equal(r1, r2, bytes);
            /* shifted by one element: a different split into vector body and
             * scalar tail must not change a bit */
            memcpy(r2 + es, a, bytes);
            memmove(b + es, b, bytes);
            eccl_reduce_into(r2 + es, b + es, LONG_N, (eccl_dtype)dt, (eccl_op)op);
            assert_memory_equal(r1, r2 + es, bytes);
            eccl_reduce_scale_div(r1, LONG_N, (eccl_dtype)dt, 7);
            eccl_reduce_scale_div(r2 + es, LONG_N, (eccl_dtype)dt, 7);
            assert_memory_equal(r1, r2 + es, bytes);
        }
    }
}

/* ---- conversions, exhaustively ------------------------------------------- */

static void test_f16_exhaustive(void **state)
{
    (void)state;
    for (uint32_t h = 0; h <= 0xffff; h++) {
        float f = eccl_f16_to_f32((uint16_t)h);
        uint32_t fb = eccl_f32_bits(f);
        uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
        if (e == 0x1f) {
            /* infinity or NaN: payload moved up, sign kept */
            uint32_t want = ((h & 0x8000u) << 16) | 0x7f800000u | (m << 13);
            if (fb != want)
                fail_msg("f16 0x%04x -> 0x%08x, want 0x%08x", h, fb, want);
        } else {
            double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, (int)e - 25);
            if (h & 0x8000)
                v = -v;
            if ((double)f != v || !signbit(f) != !signbit(v))
                fail_msg("f16 0x%04x -> %a, want %a", h, (double)f, v);
        }
        uint16_t back = eccl_f32_to_f16(f);
        if (back != h)
            fail_msg("f16 0x%04x -> %a -> 0x%04x", h, (double)f, back);
        if (eccl_f16_is_normal((uint16_t)h) != (e != 0 && e != 0x1f))
            fail_msg("f16 0x%04x: is_normal wrong", h);
        if (eccl_f16_is_normal((uint16_t)h) &&
            eccl_f32_bits(eccl_f16_normal_to_f32((uint16_t)h)) != fb)
            fail_msg("f16 0x%04x: normal path differs", h);
    }
}

static void test_bf16_exhaustive(void **state)
{
    (void)state;
    for (uint32_t h = 0; h <= 0xffff; h++) {
        float f = eccl_bf16_to_f32((uint16_t)h);
        if (eccl_f32_bits(f) != h << 16)
            fail_msg("bf16 0x%04x -> 0x%08x", h, eccl_f32_bits(f));
        uint16_t back = eccl_f32_to_bf16(f);
        if (back != h)
            fail_msg("bf16 0x%04x -> 0x%08x -> 0x%04x", h, eccl_f32_bits(f), back);
    }
}

/* The f16 nearest to f, ties to even, computed with libm in double. */
static uint16_t ref_f16(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (a >= 65520.0)
        return sign | 0x7c00;
    if (a < 0x1p-14)
        return (uint16_t)(sign | (uint16_t)rint(a * 0x1p24));
    int e;
    double m = frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    double q = rint(m * 2048.0);
    return (uint16_t)(sign | (uint16_t)(((e + 14) << 10) + (int)q - 1024));
}

static uint16_t ref_bf16(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (a >= 0x1.ffp127) /* halfway from the largest bf16 to 2^128 */
        return sign | 0x7f80;
    if (a < 0x1p-126)
        return (uint16_t)(sign | (uint16_t)rint(a * 0x1p133));
    int e;
    double m = frexp(a, &e);
    double q = rint(m * 256.0);
    return (uint16_t)(sign | (uint16_t)(((e + 126) << 7) + (int)q - 128));
}

static void check_narrow(float f)
{
    uint32_t fb = eccl_f32_bits(f);
    if (isnan(f))
        return;
    uint16_t got = eccl_f32_to_f16(f), want = ref_f16(f);
    if (got != want)
        fail_msg("f32 0x%08x -> f16 0x%04x, want 0x%04x", fb, got, want);
    if (eccl_f32_in_f16_normal_range(f) && eccl_f32_to_f16_normal(f) != want)
        fail_msg("f32 0x%08x: normal path 0x%04x, want 0x%04x", fb,
                 eccl_f32_to_f16_normal(f), want);
    double a = fabs((double)f);
    if (eccl_f32_in_f16_normal_range(f) != (a >= 0x1p-14 && a < 65520.0))
        fail_msg("f32 0x%08x: in_f16_normal_range wrong", fb);
    got = eccl_f32_to_bf16(f);
    want = ref_bf16(f);
    if (got != want)
        fail_msg("f32 0x%08x -> bf16 0x%04x, want 0x%04x", fb, got, want);
}

/* Every rounding boundary: for each pair of neighbouring finite f16 (and
 * bf16) values, the midpoint and the floats on either side of it. */
static void test_narrow_boundaries(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double lo = eccl_f16_to_f32((uint16_t)h);
        double hi = h == 0x7bff ? 65536.0 : eccl_f16_to_f32((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2); /* 12 significant bits: exact */
        assert_true((double)mid == (lo + hi) / 2);
        for (int sgn = 0; sgn < 2; sgn++) {
            float m = sgn ? -mid : mid;
            float below = nextafterf(m, 0.0f), above = nextafterf(m, sgn ? -INFINITY : INFINITY);
            uint16_t s = sgn ? 0x8000 : 0;
            uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
            assert_int_equal(eccl_f32_to_f16((float)(sgn ? -lo : lo)), s | h);
            assert_int_equal(eccl_f32_to_f16(below), s | h);
            assert_int_equal(eccl_f32_to_f16(m), s | even);
            assert_int_equal(eccl_f32_to_f16(above), s | (h + 1));
            check_narrow(below);
            check_narrow(m);
            check_narrow(above);
        }
    }
    for (uint32_t h = 0; h < 0x7f80; h++) {
        /* bf16 values are the top halves of f32s, so the midpoint is +0x8000
         * in the bit pattern, even across a change of exponent */
        uint32_t mid = (h << 16) + 0x8000;
        for (uint32_t sgn = 0; sgn < 2; sgn++) {
            uint32_t s = sgn << 31;
            uint16_t hs = (uint16_t)((sgn << 15) | h);
            uint16_t even = (uint16_t)((sgn << 15) | ((h & 1) ? h + 1 : h));
            assert_int_equal(eccl_f32_to_bf16(eccl_f32_from_bits(s | (mid - 1))), hs);
            assert_int_equal(eccl_f32_to_bf16(eccl_f32_from_bits(s | mid)), even);
            assert_int_equal(eccl_f32_to_bf16(eccl_f32_from_bits(s | (mid + 1))), hs + 1);
        }
    }
    /* Below half the smallest f16 subnormal everything rounds to zero. */
    assert_int_equal(eccl_f32_to_f16(0x1p-25f), 0x0000);
    assert_int_equal(eccl_f32_to_f16(nextafterf(0x1p-25f, 1.0f)), 0x0001);
    assert_int_equal(eccl_f32_to_f16(0x1p-26f), 0x0000);
    assert_int_equal(eccl_f32_to_f16(-0x1p-149f), 0x8000);
    assert_int_equal(eccl_f32_to_f16(0x1p-126f), 0x0000);
    assert_int_equal(eccl_f32_to_f16(1e30f), 0x7c00);
    assert_int_equal(eccl_f32_to_f16(-INFINITY), 0xfc00);
}

/* A sample of all 2^32 floats (every 251st pattern, and the ones next to
 * it) against the libm reference; NaNs by the payload rule. */
static void test_narrow_sampled(void **state)
{
    (void)state;
    for (uint64_t x = 0; x <= 0xffffffffu; x += 251) {
        for (uint32_t k = 0; k < 2; k++) {
            float f = eccl_f32_from_bits((uint32_t)x + k);
            if (!isnan(f)) {
                check_narrow(f);
                continue;
            }
            uint32_t fb = (uint32_t)x + k;
            uint32_t sign16 = (fb >> 16) & 0x8000;
            uint32_t top10 = (fb >> 13) & 0x3ff, top7 = (fb >> 16) & 0x7f;
            uint16_t want16 = (uint16_t)(sign16 | 0x7c00 | (top10 ? top10 : 0x200));
            uint16_t wantb = (uint16_t)(sign16 | 0x7f80 | (top7 ? top7 : 0x40));
            if (eccl_f32_to_f16(f) != want16)
                fail_msg("NaN 0x%08x -> f16 0x%04x, want 0x%04x", fb, eccl_f32_to_f16(f), want16);
            if (eccl_f32_to_bf16(f) != wantb)
                fail_msg("NaN 0x%08x -> bf16 0x%04x, want 0x%04x", fb, eccl_f32_to_bf16(f), wantb);
        }
    }
    /* NaNs whose kept payload bits would be zero get the quiet bit; others
     * keep theirs, signalling included. */
    assert_int_equal(eccl_f32_to_f16(eccl_f32_from_bits(0x7f800001)), 0x7e00);
    assert_int_equal(eccl_f32_to_f16(eccl_f32_from_bits(0x7fa00000)), 0x7d00);
    assert_int_equal(eccl_f32_to_f16(eccl_f32_from_bits(0xffc00000)), 0xfe00);
    assert_int_equal(eccl_f32_to_bf16(eccl_f32_from_bits(0x7f800001)), 0x7fc0);
    assert_int_equal(eccl_f32_to_bf16(eccl_f32_from_bits(0x7fa00000)), 0x7fa0);
    assert_int_equal(eccl_f32_to_bf16(eccl_f32_from_bits(0xffc00000)), 0xffc0);
}

/* ---- types.c ------------------------------------------------------------- */

static void test_strerror(void **state)
{
    (void)state;
    const char *seen[ECCL_ERR_AUTH + 1];
    for (int r = ECCL_OK; r <= ECCL_ERR_AUTH; r++) {
        const char *s = eccl_strerror((eccl_result)r);
        assert_non_null(s);
        assert_true(strlen(s) > 0);
        assert_string_not_equal(s, "unknown error");
        for (int q = 0; q < r; q++)
            assert_string_not_equal(s, seen[q]);
        seen[r] = s;
    }
    assert_string_equal(eccl_strerror((eccl_result)(ECCL_ERR_AUTH + 1)), "unknown error");
    assert_string_equal(eccl_strerror((eccl_result)1000), "unknown error");
    assert_string_equal(eccl_strerror((eccl_result)-1), "unknown error");
}

static void test_dtype_and_op_names(void **state)
{
    (void)state;
    static const struct {
        eccl_dtype dt;
        size_t size;
        const char *name;
    } dts[] = {
        {ECCL_I8, 1, "i8"},   {ECCL_U8, 1, "u8"},     {ECCL_I16, 2, "i16"},
        {ECCL_U16, 2, "u16"}, {ECCL_I32, 4, "i32"},   {ECCL_U32, 4, "u32"},
        {ECCL_I64, 8, "i64"}, {ECCL_U64, 8, "u64"},   {ECCL_F16, 2, "f16"},
        {ECCL_BF16, 2, "bf16"}, {ECCL_F32, 4, "f32"}, {ECCL_F64, 8, "f64"},
    };
    assert_int_equal(N(dts), ECCL_DTYPE_COUNT);
    for (size_t i = 0; i < N(dts); i++) {
        assert_int_equal(eccl_dtype_size(dts[i].dt), dts[i].size);
        assert_string_equal(eccl_dtype_name(dts[i].dt), dts[i].name);
        eccl_dtype parsed = ECCL_DTYPE_COUNT;
        assert_int_equal(eccl_dtype_parse(dts[i].name, &parsed), 0);
        assert_int_equal(parsed, dts[i].dt);
    }
    assert_int_equal(eccl_dtype_size(ECCL_DTYPE_COUNT), 0);
    assert_int_equal(eccl_dtype_size((eccl_dtype)-1), 0);
    assert_string_equal(eccl_dtype_name(ECCL_DTYPE_COUNT), "?");
    assert_string_equal(eccl_dtype_name((eccl_dtype)-1), "?");

    static const char *const ops[] = {"sum", "avg", "prod", "min", "max"};
    assert_int_equal(N(ops), ECCL_OP_COUNT);
    for (int op = 0; op < ECCL_OP_COUNT; op++) {
        assert_string_equal(eccl_op_name((eccl_op)op), ops[op]);
        eccl_op parsed = ECCL_OP_COUNT;
        assert_int_equal(eccl_op_parse(ops[op], &parsed), 0);
        assert_int_equal(parsed, op);
    }
    assert_string_equal(eccl_op_name(ECCL_OP_COUNT), "?");
    assert_string_equal(eccl_op_name((eccl_op)-1), "?");
}

static void test_parse(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        eccl_dtype dt;
    } aliases[] = {
        {"float", ECCL_F32}, {"float32", ECCL_F32}, {"double", ECCL_F64},
        {"half", ECCL_F16},  {"bfloat16", ECCL_BF16}, {"int", ECCL_I32},
    };
    for (size_t i = 0; i < N(aliases); i++) {
        eccl_dtype dt = ECCL_DTYPE_COUNT;
        assert_int_equal(eccl_dtype_parse(aliases[i].s, &dt), 0);
        assert_int_equal(dt, aliases[i].dt);
    }
    static const char *const bad[] = {"", "F32", "f33", "f3", "f320", "float64",
                                      " f32", "f32 ", "?", "sum"};
    for (size_t i = 0; i < N(bad); i++) {
        eccl_dtype dt = ECCL_U16;
        assert_int_equal(eccl_dtype_parse(bad[i], &dt), -1);
        assert_int_equal(dt, ECCL_U16); /* untouched on failure */
    }
    eccl_dtype dt = ECCL_U16;
    assert_int_equal(eccl_dtype_parse(NULL, &dt), -1);
    assert_int_equal(dt, ECCL_U16);
    assert_int_equal(eccl_dtype_parse("f32", NULL), -1);

    static const char *const bad_ops[] = {"", "Sum", "mean", "sum ", "f32", "?"};
    for (size_t i = 0; i < N(bad_ops); i++) {
        eccl_op op = ECCL_MAX;
        assert_int_equal(eccl_op_parse(bad_ops[i], &op), -1);
        assert_int_equal(op, ECCL_MAX);
    }
    eccl_op op = ECCL_MAX;
    assert_int_equal(eccl_op_parse(NULL, &op), -1);
    assert_int_equal(op, ECCL_MAX);
    assert_int_equal(eccl_op_parse("sum", NULL), -1);
}

/* The known-answer table shared with the device kernels' test
 * (tests/kat_kernels.h): the CPU must still produce the frozen results. */
static void test_kernel_kat(void **state)
{
    (void)state;
    static uint8_t dst[8 * 4099], src[8 * 4099];
    for (int dt = 0; dt < ECCL_DTYPE_COUNT; dt++)
        for (int op = 0; op < ECCL_OP_COUNT; op++)
            for (unsigned c = 0; c < KAT_REDUCE_CASES; c++) {
                kat_reduce_cpu((eccl_dtype)dt, (eccl_op)op, c, dst, src);
                uint64_t h = kat_result_hash((eccl_dtype)dt, (eccl_op)op, dst, kat_reduce_cases[c].n);
                if (h != kat_reduce_expect[dt][op][c])
                    fail_msg("KAT %s %s case %u: %016llx, table %016llx", eccl_dtype_name((eccl_dtype)dt),
                             eccl_op_name((eccl_op)op), c, (unsigned long long)h,
                             (unsigned long long)kat_reduce_expect[dt][op][c]);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_i8),
        cmocka_unit_test(test_u8),
        cmocka_unit_test(test_i16),
        cmocka_unit_test(test_u16),
        cmocka_unit_test(test_i32),
        cmocka_unit_test(test_u32),
        cmocka_unit_test(test_i64),
        cmocka_unit_test(test_u64),
        cmocka_unit_test(test_f32),
        cmocka_unit_test(test_f64),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_nan_inf),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_long_vs_reference),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_f16_exhaustive),
        cmocka_unit_test(test_bf16_exhaustive),
        cmocka_unit_test(test_narrow_boundaries),
        cmocka_unit_test(test_narrow_sampled),
        cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_dtype_and_op_names),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_kernel_kat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
