/* 8-bit quantisation of float chunks, for a quantised all-reduce.
 *
 * The owner of a chunk quantises it once into (metadata, codes): one uint8
 * code per element plus a fixed-size metadata record that travels with the
 * chunk. Every peer that receives the chunk dequantises it with
 * eccl_quant_dequantize, a pure function of (metadata, codes) whose results
 * are bit-identical on every peer: it uses only IEEE binary32 operations
 * that each round once (no fused multiply-add: quant.c is compiled with
 * -ffp-contract=off), in round-to-nearest with subnormals honoured (eccl
 * never enables flush-to-zero; a GPU port must not either, i.e. no
 * --use_fast_math / -ftz=true).
 *
 * BIT-PARITY RULE: the owner must not keep its precise values. It must
 * replace them by the dequantised ones -- eccl_quant_roundtrip does both
 * steps in place -- and then forward the same (metadata, codes) unchanged.
 * Otherwise the owner would keep precision that no other peer received, and
 * the peers' buffers (and everything computed from them) would diverge.
 *
 * Values are f32, f16 or bf16 (eccl_dtype). f16 and bf16 are widened to f32
 * exactly (core/util/half.h), computed in f32, and dequantised values are
 * rounded back to the chunk's dtype (nearest, ties to even).
 *
 * Inputs: NaN or infinity anywhere in a chunk is rejected
 * (ECCL_ERR_INVALID_ARG, outputs untouched): quantisation has no code for
 * them, and silently clamping would hide a diverged training run; the caller
 * decides (abort the collective, or send that chunk unquantised). A chunk
 * whose range cannot be represented (max - min overflows f32, or a grid end
 * overflows the dtype) is rejected the same way. Empty chunks are fine.
 * -0.0 may come back as +0.0.
 *
 * ---- ECCL_QUANT_MINMAX_U8 ------------------------------------------------
 * Carried: min and max of the chunk (min == max for a constant chunk).
 * Derived by everyone: d = max - min; s = d / 255, raised to FLT_MIN when
 * d > 0 and d / 255 < FLT_MIN (s is never subnormal).
 *   code  q = 0 if s == 0; else, with t = trunc(min(((x - min) / s) + 0.5,
 *           255)): 255 if x == max or min + t * s >= max, else t
 *   value D(q) = max if q == 255, else min(min + q * s, max)
 * min gets code 0 and max code 255, and D(0) = min, D(255) = max exactly
 * (-0.0 is stored as +0.0), so quantising a dequantised chunk gives back the
 * same metadata. Error: |x - D(q)| <= s * (1/2 + 2^-12) + ulp(max(|min|,
 * |max|)).
 *
 * ---- ECCL_QUANT_AFFINE_U8 --------------------------------------------------
 * Carried: scale s and zero_point z. value D(q) = (q - z) * s, so the code z
 * is exactly 0.0. The quantiser takes lo = min(min, 0), hi = max(max, 0),
 * and s = (hi - lo) / 255 rounded DOWN to 16 significant bits (at least
 * FLT_MIN; 0 when hi == lo), z = the code of 0 (round-half-down of -lo / s),
 * checking that lo and hi land on codes 0 and 255 (else s is lowered by one
 * unit in its 16th bit; a safety net for rounding at exactly 255 steps), and
 * taking s = 0, z = 0 when every value would get code z (only possible when
 * all |x| < FLT_MIN / 2, which then dequantise to 0):
 *   code  q = trunc(clamp((x / s) + (z + 0.5), 0, 255))   (0 if s == 0)
 * With 16 significant bits, (q - z) * s (an 8-bit integer times s) is exact,
 * which makes quantising a dequantised f32 chunk give back the same
 * metadata and the same codes, always. The price of rounding s down: the
 * codes may cover slightly less than [lo, hi], so |x - D(q)| <= s * (1/2 +
 * 2^-6) at the two ends (s * (1/2 + 2^-15) inside).
 *
 * ---- round trips -----------------------------------------------------------
 * Quantising the output of eccl_quant_roundtrip again gives the same
 * metadata and codes (so the round trip is idempotent):
 * - AFFINE f32: always (D is exact and lo, hi sit on codes 0 and 255).
 * - MINMAX f32: the metadata always (min and max are reproduced exactly);
 *   the codes whenever s >= 2 ulp(max(|min|, |max|)), where rounding errors
 *   stay under half a step. Nearly constant chunks (s below that) are not
 *   covered by the argument; 3 million random chunks across the whole f32
 *   range found no counterexample, but none is promised.
 * - f16/bf16: rounding the dequantised values to the dtype breaks the
 *   exactness the arguments rely on; no promise is made.
 * Peers never need this (they forward the codes they received, they do not
 * requantise); it matters to anyone who quantises a buffer twice.
 */
#ifndef ECCL_CORE_QUANT_QUANT_H
#define ECCL_CORE_QUANT_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "eccl.h"

/* eccl_quant_type is public (include/eccl.h: the all-reduce options):
 * ECCL_QUANT_MINMAX_U8 = 1, ECCL_QUANT_AFFINE_U8 = 2. ECCL_QUANT_NONE (0) is
 * no type a record or the quantiser accepts. */

/* Per-chunk metadata. Fields a type does not use must be zero (+0.0 for
 * floats), so a record has exactly one encoding. */
typedef struct eccl_quant_meta {
    uint8_t type;       /* eccl_quant_type */
    uint8_t dtype;      /* eccl_dtype of the values: ECCL_F32, ECCL_F16, ECCL_BF16 */
    uint8_t zero_point; /* AFFINE: the code of 0.0 */
    float scale;        /* AFFINE: the step (MINMAX derives it: eccl_quant_meta_scale) */
    float min, max;     /* MINMAX: the chunk's range */
    uint64_t count;     /* elements in the chunk (= code bytes) */
} eccl_quant_meta;

/* Wire encoding, little-endian, fixed size:
 *   [0] type  [1] dtype  [2] zero_point  [3] 0
 *   [4..8) scale  [8..12) min  [12..16) max  (IEEE binary32 bit patterns)
 *   [16..24) count (uint64) */
#define ECCL_QUANT_META_BYTES 24

/* ECCL_OK if m is a record the quantiser can produce: known type and dtype,
 * unused fields zero, finite values; MINMAX: min <= max, max - min finite,
 * min and max exact in the dtype; AFFINE: scale 0 (and zero_point 0) or a
 * normal float with 16 significant bits whose grid ends D(0), D(255) are
 * finite in the dtype. ECCL_ERR_INVALID_ARG otherwise (or for NULL). */
eccl_result eccl_quant_meta_check(const eccl_quant_meta *m);

/* ECCL_ERR_INVALID_ARG (out untouched) if eccl_quant_meta_check fails. */
eccl_result eccl_quant_meta_encode(const eccl_quant_meta *m, uint8_t out[ECCL_QUANT_META_BYTES]);

/* ECCL_ERR_PROTOCOL (m untouched) for a record eccl_quant_meta_check
 * rejects or a nonzero reserved byte: the bytes came off the wire.
 * ECCL_ERR_INVALID_ARG for NULL arguments. */
eccl_result eccl_quant_meta_decode(const uint8_t in[ECCL_QUANT_META_BYTES], eccl_quant_meta *m);

/* The step between codes: MINMAX's derived s, AFFINE's scale; 0 for an
 * invalid record. */
float eccl_quant_meta_scale(const eccl_quant_meta *m);

/* Quantises src[0..count) (dtype f32, f16 or bf16, aligned to its size)
 * into codes[0..count) and *meta. ECCL_ERR_INVALID_ARG, with codes and meta
 * untouched, for an unknown type or dtype, NULL pointers (src and codes may
 * be NULL when count is 0), NaN or infinity in src, or an unrepresentable
 * range (see above). */
eccl_result eccl_quant_quantize(eccl_quant_type type, eccl_dtype dtype, const void *src,
                                size_t count, uint8_t *codes, eccl_quant_meta *meta);

/* dst[0..count) = D(codes[i]) in meta's dtype (dst aligned to its size).
 * ECCL_ERR_INVALID_ARG, dst untouched, if meta fails eccl_quant_meta_check
 * or count != meta->count. */
eccl_result eccl_quant_dequantize(const eccl_quant_meta *meta, const uint8_t *codes, size_t count,
                                  void *dst);

/* The owner's step: quantises data[0..count) into codes and *meta, then
 * overwrites data with the dequantised values, exactly what every receiver
 * of (meta, codes) computes. Same errors as eccl_quant_quantize; on error
 * data, codes and meta are untouched. */
eccl_result eccl_quant_roundtrip(eccl_quant_type type, eccl_dtype dtype, void *data,
                                 size_t count, uint8_t *codes, eccl_quant_meta *meta);

#endif /* ECCL_CORE_QUANT_QUANT_H */
