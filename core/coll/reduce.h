/* Reduction kernels: the arithmetic of every collective, on host memory.
 *
 * Pure computation: no allocation, no I/O, no state. A backend's dev ops
 * (eccl_dev_ops.reduce / .scale_div) call these for host buffers; a GPU port
 * must reproduce the semantics below bit for bit, because all peers must end
 * a collective with identical bytes.
 *
 * Semantics, the same on every platform except where noted:
 * - Integer SUM and PROD wrap modulo 2^bits, signed dtypes included (two's
 *   complement, computed in the unsigned type so overflow is never undefined).
 * - Float SUM and PROD are one IEEE operation per element in the element's
 *   own precision; f16 and bf16 are widened to f32, combined, and rounded back
 *   to nearest even. f32's 24-bit significand is at least 2p + 2 bits for
 *   f16 (p = 11) and bf16 (p = 8), so this is exactly the correctly rounded
 *   f16/bf16 sum or product: the two roundings never compound.
 * - Float MIN and MAX propagate NaN: if dst[i] is NaN the result is dst[i],
 *   else if src[i] is NaN it is src[i] -- the bits (payload) of the first NaN
 *   operand are kept. Otherwise operands are compared as numbers, and equal
 *   ones (including -0.0 vs +0.0) keep dst[i]. The result is always the exact
 *   bits of one operand, for every dtype.
 * - The bits of a NaN *produced* by SUM/PROD/AVG (inf - inf, 0 * inf) are
 *   whatever the CPU's arithmetic makes (x86 and ARM differ in sign). Peers
 *   still agree, because the collectives compute each element once and
 *   forward the result unchanged.
 * - AVG reduces as SUM; eccl_reduce_scale_div divides once at the end.
 */
#ifndef ECCL_CORE_COLL_REDUCE_H
#define ECCL_CORE_COLL_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "eccl.h"

/* dst[i] = dst[i] (op) src[i] for i < count. dst and src must not overlap
 * (the loops are vectorised on that promise) and must be aligned to the
 * element size. An invalid dtype or op does nothing: callers validate at the
 * API boundary. */
void eccl_reduce_into(void *restrict dst, const void *restrict src, size_t count,
                 eccl_dtype dtype, eccl_op op);

/* AVG's final step, x[i] = x[i] / divisor. f32 and f64 divide in their own
 * precision (divisors above 2^24 are first rounded to f32). f16 and bf16
 * divide in f32 and round to nearest even once more: exact for the common
 * cases, but with thousands of peers the quotient can, rarely, land one ulp
 * from the correctly rounded one (double rounding) -- the same ulp on every
 * platform. Integers use C division, which truncates toward zero (-7 / 2 ==
 * -3). divisor 0 and 1 leave x untouched: AVG over one peer is its own value,
 * and 0 is a caller bug that must not trap. */
void eccl_reduce_scale_div(void *x, size_t count, eccl_dtype dtype,
                           uint32_t divisor);

#endif /* ECCL_CORE_COLL_REDUCE_H */
