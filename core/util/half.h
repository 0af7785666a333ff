/* IEEE binary16 (f16) and bfloat16 (bf16) <-> binary32 conversions.
 *
 * Written with integer operations on the bit patterns instead of _Float16,
 * F16C or compiler builtins, so that every platform (and, later, a GPU port of
 * these same lines) produces the same bits: all peers must agree bit for bit
 * on every reduced value.
 *
 * Guarantees, checked exhaustively by tests/test_reduce.c:
 * - widening is exact, and narrowing a widened value gives back the original
 *   bits, NaN payloads and signalling NaNs included;
 * - narrowing rounds to nearest, ties to even, overflows to infinity, rounds
 *   into and out of subnormals correctly, and keeps the sign of zero;
 * - a NaN stays a NaN: its top payload bits are kept, and only when they are
 *   all zero (the result would read as infinity) is the quiet bit set.
 *
 * Every function is straight-line code (selects, no branches) so that loops
 * over them vectorise. No float operation here rounds: the few that appear
 * are exact by construction, so the rounding mode and flush-to-zero or
 * denormals-are-zero settings cannot change a result.
 */
#ifndef ECCL_CORE_UTIL_HALF_H
#define ECCL_CORE_UTIL_HALF_H

#include <stdint.h>
#include <string.h>

#include "util/hd.h"

/* memcpy is the type-punning idiom that is defined in C and that compilers
 * turn into a register move. In device code the CUDA intrinsics say the
 * same thing directly (a reinterpretation of the 32 bits, no conversion:
 * PTX mov.b32), so nothing depends on nvcc optimising a local memcpy away. */
ECCL_HD uint32_t eccl_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

ECCL_HD float eccl_f32_from_bits(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* Branch-free select: all-ones mask if c, else 0; then pick x or y. Writing
 * selects as masks keeps every path computed for every element, so compilers
 * emit straight-line code that vectorises, and no float operation sits behind
 * a condition where -ftrapping-math would stop it being speculated. */
#define ECCL_HALF_MASK(c) ((uint32_t)0 - (uint32_t)(c))
#define ECCL_HALF_SEL(m, x, y) (((m) & (x)) | (~(m) & (y)))

/* The normal-range pieces of the conversions, exposed so that a loop that
 * has checked its whole block is in range (reduce.c's fast path) can skip
 * the rest and still get the same bits. */

/* Exponent field 1..30: neither zero, subnormal, infinite nor NaN. */
ECCL_HD int eccl_f16_is_normal(uint16_t h)
{
    return (h & 0x7c00u) - 0x0400u < 0x7800u;
}

/* Exact for normal h: rebias the exponent from 15 to 127. */
ECCL_HD float eccl_f16_normal_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    return eccl_f32_from_bits(sign | ((((uint32_t)h & 0x7fffu) << 13) + (112u << 23)));
}

/* True for 2^-14 <= |f| < 65520, where narrowing is the normal-range
 * rounding alone. 65520 is halfway between the largest f16 (65504, odd
 * mantissa) and 65536; ties to even round it up, to infinity. (Values just
 * under 2^-14 that round up to it are left to the subnormal path.) */
ECCL_HD int eccl_f32_in_f16_normal_range(float f)
{
    return (eccl_f32_bits(f) & 0x7fffffffu) - 0x38800000u < 0x477ff000u - 0x38800000u;
}

/* Rounds a = |f|'s bits to the f16 magnitude, valid when
 * eccl_f32_in_f16_normal_range(f): rebias, then round to nearest even on the
 * 13 dropped bits. Adding 0xfff plus the lowest kept bit carries exactly when
 * the dropped part is above one half, or equal to it with an odd kept part; a
 * carry out of the mantissa correctly bumps the exponent. Works on bits, not a
 * float argument, so that no NaN ever travels through a float register. */
ECCL_HD uint32_t eccl_f16_round_normal_bits(uint32_t a)
{
    return (a - (112u << 23) + 0x0fffu + ((a >> 13) & 1u)) >> 13;
}

ECCL_HD uint16_t eccl_f32_to_f16_normal(float f)
{
    uint32_t x = eccl_f32_bits(f);
    return (uint16_t)(((x >> 16) & 0x8000u) | eccl_f16_round_normal_bits(x & 0x7fffffffu));
}

ECCL_HD float eccl_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    int32_t mag = h & 0x7fff;
    /* Normal: rebias the exponent from 15 to 127. Inf/NaN: rebias once more,
     * which takes the exponent from 31 + 112 to 255 and keeps the payload. */
    uint32_t big = ((uint32_t)mag << 13) + (112u << 23);
    big += ECCL_HALF_MASK(mag >= 0x7c00) & (112u << 23);
    /* Subnormal (and zero): mag * 2^-24. The int->float conversion (mag <
     * 2^10) and the scaling by a power of two are exact and the result is a
     * normal float, so no rounding mode, flush-to-zero or denormals-are-zero
     * setting can change it; the hardware normalises for us. */
    uint32_t sub = eccl_f32_bits((float)mag * 0x1p-24f);
    return eccl_f32_from_bits(sign | ECCL_HALF_SEL(ECCL_HALF_MASK(mag >= 0x0400), big, sub));
}

ECCL_HD uint16_t eccl_f32_to_f16(float f)
{
    uint32_t x = eccl_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t a = x & 0x7fffffffu;
    int32_t sa = (int32_t)a; /* signed compares are cheaper on SSE2 */

    uint32_t normal = eccl_f16_round_normal_bits(a);

    /* Subnormal: round(|f| * 2^24) to an integer, ties to even. y = |f| *
     * 2^24 is made exactly by adding 24 to the exponent (|f| is clamped to
     * 2^-14 first, so y <= 2^10 and the conversion below is defined for every
     * element). Truncation and y - q are exact, so the rounding decision
     * depends on no rounding mode. For f32 subnormals (exponent 0) y is tiny
     * and the result is 0, as it should be. */
    uint32_t clamped = ECCL_HALF_SEL(ECCL_HALF_MASK(sa < 0x38800000), a, 0x38800000u);
    float y = eccl_f32_from_bits(clamped + (24u << 23));
    int32_t q = (int32_t)y;
    float frac = y - (float)q;
    uint32_t sub = (uint32_t)q + (uint32_t)(frac > 0.5f) +
                   ((uint32_t)(frac == 0.5f) & (uint32_t)q & 1u);

    /* NaN: keep the top payload bits; if they are all zero (the result would
     * read as infinity) set the quiet bit. (a >> 13) & 0x7fff maps the f32
     * exponent 255 onto the f16 exponent 31. */
    uint32_t nan = ((a >> 13) & 0x7fffu) | (ECCL_HALF_MASK(sa < 0x7f802000) & 0x0200u);
    uint32_t special = ECCL_HALF_SEL(ECCL_HALF_MASK(sa > 0x7f800000), nan, 0x7c00u);

    /* 0x38800000 is 2^-14, the smallest normal f16; from 0x477ff000 (65520)
     * up everything is infinity or NaN. */
    uint32_t finite = ECCL_HALF_SEL(ECCL_HALF_MASK(sa >= 0x38800000), normal, sub);
    uint32_t mag = ECCL_HALF_SEL(ECCL_HALF_MASK(sa >= 0x477ff000), special, finite);
    return (uint16_t)(sign | mag);
}

ECCL_HD float eccl_bf16_to_f32(uint16_t h)
{
    return eccl_f32_from_bits((uint32_t)h << 16);
}

/* Rounds f32 bits x to bf16, valid unless x is a NaN. bf16 shares
 * binary32's exponent, so rounding the 16 dropped bits to nearest even is all
 * there is: subnormals round like normals, and the carry out of the largest
 * finite value lands on infinity. */
ECCL_HD uint16_t eccl_bf16_round_bits(uint32_t x)
{
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

ECCL_HD int eccl_f32_is_nan(float f)
{
    return (eccl_f32_bits(f) & 0x7fffffffu) > 0x7f800000u;
}

ECCL_HD uint16_t eccl_f32_to_bf16(float f)
{
    uint32_t x = eccl_f32_bits(f);
    uint32_t hi = x >> 16;
    uint32_t nan = hi | (ECCL_HALF_MASK((hi & 0x7fu) == 0) & 0x40u);
    int32_t a = (int32_t)(x & 0x7fffffffu);
    return (uint16_t)ECCL_HALF_SEL(ECCL_HALF_MASK(a > 0x7f800000), nan, eccl_bf16_round_bits(x));
}

#endif /* ECCL_CORE_UTIL_HALF_H */
