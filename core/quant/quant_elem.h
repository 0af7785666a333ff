/* One element of the 8-bit quantiser (definitions and guarantees: quant.h),
 * written once for core/quant/quant.c (C, compiled with -ffp-contract=off)
 * and for the CUDA plugin's quantise/dequantise kernels and their CPU twins
 * (nvcc --fmad=false; the twins' host code -ffp-contract=off): every
 * binary32 operation below is one IEEE operation rounded to nearest, on
 * every platform, so codes and dequantised values are bit-identical. FLT_MIN
 * is a literal; no flush-to-zero anywhere (eccl never enables it). */
#ifndef ECCL_CORE_QUANT_QUANT_ELEM_H
#define ECCL_CORE_QUANT_QUANT_ELEM_H

#include <float.h>
#include <stddef.h>
#include <stdint.h>

#include "eccl.h"
#include "quant/quant.h"
#include "util/half.h"
#include "util/hd.h"

#define ECCL_Q_EXP_MASK 0x7f800000u

ECCL_HD int eccl_q_finite(float x)
{
    return (eccl_f32_bits(x) & ECCL_Q_EXP_MASK) != ECCL_Q_EXP_MASK;
}

/* The chunk scan, one element at a time: running min, max and a "NaN or
 * infinity seen" flag. On inputs the quantiser accepts (all finite) the
 * result is the same in any order and with any grouping: min and max of
 * finite values are unique numbers, and the only tie that could pick
 * different bits, -0.0 against +0.0, is normalised to +0.0 afterwards
 * (eccl_quant_meta_from_range). That is what lets the GPU scan in parallel.
 * Start values for an empty partial: mn = +inf, mx = -inf, bad = 0
 * (any finite x replaces them, and a chunk holding an infinity is refused
 * whatever mn and mx say). */
ECCL_HD void eccl_q_scan_step(float x, float *mn, float *mx, uint32_t *bad)
{
    *bad |= (uint32_t)((eccl_f32_bits(x) & ECCL_Q_EXP_MASK) == ECCL_Q_EXP_MASK);
    *mn = x < *mn ? x : *mn;
    *mx = x > *mx ? x : *mx;
}

ECCL_HD float eccl_q_minmax_scale(float mn, float mx)
{
    float d = mx - mn;
    float s = d / 255.0f;
    if (d > 0.0f && s < FLT_MIN)
        s = FLT_MIN;
    return s;
}

/* s > 0 and mn <= x <= mx, so t is in [0.5, 255.5 + rounding]. Any code
 * that would dequantise to mx becomes 255, the max itself included: then
 * D(255) = mx is in every dequantised chunk, and requantising it cannot
 * move a value from a code below 255 to 255. (Both happen only when s was
 * raised to FLT_MIN or s < ulp(mx); otherwise they change nothing.) */
ECCL_HD uint8_t eccl_q_minmax_code(float x, float mn, float mx, float s)
{
    float t = (x - mn) / s + 0.5f;
    t = t < 255.0f ? t : 255.0f;
    uint8_t q = (uint8_t)(int32_t)t;
    return x == mx || mn + (float)q * s >= mx ? 255 : q;
}

ECCL_HD float eccl_q_minmax_value(uint8_t q, float mn, float mx, float s)
{
    float v = mn + (float)q * s;
    v = v < mx ? v : mx;
    return q == 255 ? mx : v;
}

/* c = zero_point + 0.5f; s > 0. */
ECCL_HD uint8_t eccl_q_affine_code(float x, float s, float c)
{
    float t = x / s + c;
    t = t > 0.0f ? t : 0.0f;
    t = t < 255.0f ? t : 255.0f;
    return (uint8_t)(int32_t)t;
}

ECCL_HD float eccl_q_affine_value(uint8_t q, int32_t zp, float s)
{
    return (float)((int32_t)q - zp) * s;
}

/* Loads and stores per dtype: f16/bf16 widen exactly and narrow to nearest
 * even (util/half.h). */
ECCL_HD float eccl_q_load(const void *p, size_t i, unsigned dtype)
{
    switch (dtype) {
    case ECCL_F16: return eccl_f16_to_f32(((const uint16_t *)p)[i]);
    case ECCL_BF16: return eccl_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

ECCL_HD void eccl_q_store(void *p, size_t i, unsigned dtype, float v)
{
    switch (dtype) {
    case ECCL_F16: ((uint16_t *)p)[i] = eccl_f32_to_f16(v); break;
    case ECCL_BF16: ((uint16_t *)p)[i] = eccl_f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

#ifdef __cplusplus
extern "C" {
#endif

/* The metadata eccl_quant_quantize makes for a chunk of `count` values
 * whose scan (eccl_q_scan_step over every element) gave mn, mx and bad
 * (count == 0: pass mn = mx = 0, bad = 0). ECCL_ERR_INVALID_ARG, *meta
 * untouched, exactly where eccl_quant_quantize refuses such a chunk (bad
 * set, unknown type or dtype, unrepresentable range). Lets a device scan the
 * chunk and the host derive the metadata with the CPU's own code; the codes
 * then follow from the metadata alone (eccl_quant_code_params). */
eccl_result eccl_quant_meta_from_range(eccl_quant_type type, eccl_dtype dtype, size_t count,
                                       float mn, float mx, uint32_t bad, eccl_quant_meta *meta);

#ifdef __cplusplus
}
#endif

#endif /* ECCL_CORE_QUANT_QUANT_ELEM_H */
