/* One element of every reduction: the arithmetic of reduce.h, written once
 * for core/coll/reduce.c's vectorised loops (C) and for the CUDA plugin's
 * kernels and their CPU twins (backends/cuda, nvcc). The semantics are
 * those of reduce.h; this file only says how one element is computed.
 *
 * Naming: eccl_re_<op>_<type>(a, b) is the new dst value for dst a and
 * src b; eccl_re_div_<type>(a, divisor) is AVG's final step. SUM and PROD on
 * integers are per width (w8..w64, unsigned: wrap-around is defined and
 * two's complement makes the bits right for the signed dtypes too), MIN and
 * MAX per signedness. f16 and bf16 travel as their uint16_t bit patterns.
 *
 * Every function is a select or straight-line arithmetic (no branches, no
 * state), so it inlines into a loop the compiler can still vectorise, and
 * on a GPU it is a handful of instructions with no divergence. */
#ifndef ECCL_CORE_COLL_REDUCE_ELEM_H
#define ECCL_CORE_COLL_REDUCE_ELEM_H

#include <stdint.h>

#include "util/half.h"
#include "util/hd.h"

/* ---- integers ------------------------------------------------------------
 * The casts to the wide type W keep u8/u16 from being promoted to int, where
 * a product could overflow (undefined behaviour in C). */
#define ECCL_RE_WRAP(bits, U, W)                                               \
    ECCL_HD U eccl_re_sum_w##bits(U a, U b) { return (U)((W)a + (W)b); }        \
    ECCL_HD U eccl_re_prod_w##bits(U a, U b) { return (U)((W)a * (W)b); }
ECCL_RE_WRAP(8, uint8_t, uint32_t)
ECCL_RE_WRAP(16, uint16_t, uint32_t)
ECCL_RE_WRAP(32, uint32_t, uint32_t)
ECCL_RE_WRAP(64, uint64_t, uint64_t)
#undef ECCL_RE_WRAP

#define ECCL_RE_MINMAX(name, T)                                                \
    ECCL_HD T eccl_re_min_##name(T a, T b) { return b < a ? b : a; }            \
    ECCL_HD T eccl_re_max_##name(T a, T b) { return b > a ? b : a; }
ECCL_RE_MINMAX(i8, int8_t)
ECCL_RE_MINMAX(u8, uint8_t)
ECCL_RE_MINMAX(i16, int16_t)
ECCL_RE_MINMAX(u16, uint16_t)
ECCL_RE_MINMAX(i32, int32_t)
ECCL_RE_MINMAX(u32, uint32_t)
ECCL_RE_MINMAX(i64, int64_t)
ECCL_RE_MINMAX(u64, uint64_t)
#undef ECCL_RE_MINMAX

/* Signed narrow types divide in int64_t: the divisor is a uint32_t, and
 * mixing it with a signed int32_t would convert the dividend to unsigned.
 * C (and CUDA) division truncates toward zero. */
ECCL_HD int8_t eccl_re_div_i8(int8_t a, uint32_t d) { return (int8_t)((int64_t)a / (int64_t)d); }
ECCL_HD uint8_t eccl_re_div_u8(uint8_t a, uint32_t d) { return (uint8_t)((uint32_t)a / d); }
ECCL_HD int16_t eccl_re_div_i16(int16_t a, uint32_t d) { return (int16_t)((int64_t)a / (int64_t)d); }
ECCL_HD uint16_t eccl_re_div_u16(uint16_t a, uint32_t d) { return (uint16_t)((uint32_t)a / d); }
ECCL_HD int32_t eccl_re_div_i32(int32_t a, uint32_t d) { return (int32_t)((int64_t)a / (int64_t)d); }
ECCL_HD uint32_t eccl_re_div_u32(uint32_t a, uint32_t d) { return a / d; }
ECCL_HD int64_t eccl_re_div_i64(int64_t a, uint32_t d) { return a / (int64_t)d; }
ECCL_HD uint64_t eccl_re_div_u64(uint64_t a, uint32_t d) { return a / (uint64_t)d; }

/* ---- f32 and f64 -----------------------------------------------------------
 * SUM/PROD/DIV: one IEEE operation in the element's precision (the plugin is
 * compiled with --fmad=false, and nothing here could be contracted anyway).
 * MIN/MAX: b replaces a only when a is a number and b is a NaN or smaller
 * (larger): !(b >= a) is true for b < a and for a NaN b. So a NaN dst wins,
 * then a NaN src, and ties (-0.0 vs +0.0) keep dst. The result is an
 * operand's exact bits: SSE2, NEON and GPUs move floats through registers
 * unchanged. (A NaN *produced* by SUM/PROD/DIV has the hardware's bits:
 * x86 keeps the first NaN operand's payload, quieted, and makes 0xFFC00000
 * from inf - inf; NVIDIA GPUs always make 0x7FFFFFFF. reduce.h leaves those
 * bits unspecified; tests compare them as "some NaN".) */
#define ECCL_RE_TAKE_MIN(x, y) ((x) == (x) && !((y) >= (x)))
#define ECCL_RE_TAKE_MAX(x, y) ((x) == (x) && !((y) <= (x)))

#define ECCL_RE_NATIVE(name, T)                                                \
    ECCL_HD T eccl_re_sum_##name(T a, T b) { return a + b; }                    \
    ECCL_HD T eccl_re_prod_##name(T a, T b) { return a * b; }                   \
    ECCL_HD T eccl_re_min_##name(T a, T b) { return ECCL_RE_TAKE_MIN(a, b) ? b : a; } \
    ECCL_HD T eccl_re_max_##name(T a, T b) { return ECCL_RE_TAKE_MAX(a, b) ? b : a; } \
    ECCL_HD T eccl_re_div_##name(T a, uint32_t d) { return a / (T)d; }
ECCL_RE_NATIVE(f32, float)
ECCL_RE_NATIVE(f64, double)
#undef ECCL_RE_NATIVE

/* ---- f16 and bf16 ------------------------------------------------------------
 * SUM/PROD widen to f32, combine and round back once (exactly the correctly
 * rounded result, reduce.h). These are the full conversions; reduce.c's
 * blocked fast path uses only their ordinary-range pieces and gives the same
 * bits (tests/test_reduce.c checks it exhaustively). DIV divides in f32 and
 * rounds once more (reduce.h: the rare double rounding is the same on every
 * platform). */
ECCL_HD uint16_t eccl_re_sum_f16(uint16_t a, uint16_t b)
{
    return eccl_f32_to_f16(eccl_f16_to_f32(a) + eccl_f16_to_f32(b));
}
ECCL_HD uint16_t eccl_re_prod_f16(uint16_t a, uint16_t b)
{
    return eccl_f32_to_f16(eccl_f16_to_f32(a) * eccl_f16_to_f32(b));
}
ECCL_HD uint16_t eccl_re_div_f16(uint16_t a, uint32_t d)
{
    return eccl_f32_to_f16(eccl_f16_to_f32(a) / (float)d);
}
ECCL_HD uint16_t eccl_re_sum_bf16(uint16_t a, uint16_t b)
{
    return eccl_f32_to_bf16(eccl_bf16_to_f32(a) + eccl_bf16_to_f32(b));
}
ECCL_HD uint16_t eccl_re_prod_bf16(uint16_t a, uint16_t b)
{
    return eccl_f32_to_bf16(eccl_bf16_to_f32(a) * eccl_bf16_to_f32(b));
}
ECCL_HD uint16_t eccl_re_div_bf16(uint16_t a, uint32_t d)
{
    return eccl_f32_to_bf16(eccl_bf16_to_f32(a) / (float)d);
}

/* MIN/MAX on f16 and bf16 select one operand's original bits, which is what
 * widening, comparing in f32 and narrowing back would give (the round trip is
 * exact), but compare in 16-bit integers: sign-magnitude mapped to a signed
 * value orders like the numbers it encodes, with -0 and +0 both 0. That skips
 * the conversions and vectorises on any SIMD. `inf` is the +infinity pattern;
 * any magnitude above it is a NaN. Bitwise & and | (not && and ||): no
 * short-circuit branch in a vectorised loop. */
ECCL_HD int16_t eccl_re_half_key(uint16_t h)
{
    int16_t mag = (int16_t)(h & 0x7fff);
    return (int16_t)((h & 0x8000) ? -mag : mag);
}

#define ECCL_RE_HALF_IS_NAN(h, inf) ((int16_t)((h) & 0x7fff) > (inf))
#define ECCL_RE_HALF_TAKE_MIN(a, b, inf)                                        \
    ((ECCL_RE_HALF_IS_NAN(a, inf) == 0) &                                      \
     (ECCL_RE_HALF_IS_NAN(b, inf) | (eccl_re_half_key(b) < eccl_re_half_key(a))))
#define ECCL_RE_HALF_TAKE_MAX(a, b, inf)                                        \
    ((ECCL_RE_HALF_IS_NAN(a, inf) == 0) &                                      \
     (ECCL_RE_HALF_IS_NAN(b, inf) | (eccl_re_half_key(b) > eccl_re_half_key(a))))

ECCL_HD uint16_t eccl_re_min_f16(uint16_t a, uint16_t b)
{
    return ECCL_RE_HALF_TAKE_MIN(a, b, 0x7c00) ? b : a;
}
ECCL_HD uint16_t eccl_re_max_f16(uint16_t a, uint16_t b)
{
    return ECCL_RE_HALF_TAKE_MAX(a, b, 0x7c00) ? b : a;
}
ECCL_HD uint16_t eccl_re_min_bf16(uint16_t a, uint16_t b)
{
    return ECCL_RE_HALF_TAKE_MIN(a, b, 0x7f80) ? b : a;
}
ECCL_HD uint16_t eccl_re_max_bf16(uint16_t a, uint16_t b)
{
    return ECCL_RE_HALF_TAKE_MAX(a, b, 0x7f80) ? b : a;
}

#endif /* ECCL_CORE_COLL_REDUCE_ELEM_H */
