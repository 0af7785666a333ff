/* The known-answer table shared by the CPU tests (test_reduce,
 * test_state_hash, test_quant) and the device test (test_cuda_kernels): the
 * same deterministic inputs, and for each the ECCL_HASH_SIMPLE hash of what
 * the computation must produce. The CPU code and the GPU kernels are both
 * checked against these literals, so neither can drift from the other, nor
 * both together from the values frozen here.
 *
 * How the literals were produced: tests/kat_kernels.c (target
 * eccl_kat_gen, `eccl_kat_gen > table.txt`) runs the CPU code (eccl_reduce,
 * eccl_reduce_scale_div, eccl_hash, eccl_quant_quantize/dequantize) on the
 * inputs below and prints the arrays; they were pasted in once, from the
 * tree where reduce_elem.h/hash_core.h/quant_elem.h were introduced, and
 * the same program built against the sources from before that refactoring
 * printed byte-identical arrays. Regenerate
 * ONLY for a deliberate change of semantics, and say so in the commit.
 *
 * NaN bits: reduce.h leaves the bits of a NaN that SUM/PROD/AVG make or pass
 * through unspecified (x86 keeps the payload, ARM and NVIDIA GPUs differ), so
 * for float dtypes and those ops every NaN is replaced by one canonical
 * pattern before hashing (kat_canon_nans). MIN/MAX results are selects and
 * are hashed as they are, payloads included.
 *
 * Header-only (static inline) so that each test needs no extra source file. */
#ifndef ECCL_TESTS_KAT_KERNELS_H
#define ECCL_TESTS_KAT_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coll/reduce.h"
#include "eccl.h"
#include "quant/quant.h"
#include "state/hash.h"
#include "util/half.h"

/* Tables a test may not use (each test checks its own part). */
#define KAT_UNUSED __attribute__((unused))

/* ---- deterministic inputs ---------------------------------------------------------- */

static inline uint64_t kat_mix(uint64_t x) /* splitmix64's finaliser */
{
    x += UINT64_C(0x9E3779B97F4A7C15);
    x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
    return x ^ (x >> 31);
}

static inline uint64_t kat_rand(uint64_t seed, size_t i)
{
    return kat_mix(kat_mix(seed) ^ (uint64_t)i);
}

/* Element i of a reduce input. `specials`: about 3 in 8 elements are edge
 * values -- integers: 0, -1 / all ones, MIN, MAX (SUM and PROD then wrap);
 * floats: +-0, NaNs with random payloads (quiet and signalling), +-inf,
 * subnormals, the largest finite value, values that overflow when added --
 * the rest ordinary. Without `specials` every float is an ordinary normal
 * value, so reduce.c's f16 fast path (whole blocks of normals) runs too. */
static inline void kat_fill(eccl_dtype dt, void *buf, size_t n, uint64_t seed, int specials)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = kat_rand(seed, i);
        unsigned cls = specials ? (unsigned)(r >> 59) : 31u; /* 0..31 */
        uint64_t sign = (r >> 58) & 1;
        switch (dt) {
        case ECCL_I8: case ECCL_U8: case ECCL_I16: case ECCL_U16:
        case ECCL_I32: case ECCL_U32: case ECCL_I64: case ECCL_U64: {
            size_t sz = eccl_dtype_size(dt);
            int sgn = dt == ECCL_I8 || dt == ECCL_I16 || dt == ECCL_I32 || dt == ECCL_I64;
            uint64_t top = UINT64_C(1) << (8 * sz - 1);
            uint64_t v = cls == 0 ? 0 : cls == 1 ? ~UINT64_C(0) : cls == 2 ? (sgn ? top : 0)
                       : cls == 3 ? (sgn ? top - 1 : ~UINT64_C(0)) : r;
            memcpy((char *)buf + i * sz, &v, sz); /* little-endian low bytes */
            break;
        }
        case ECCL_F32: {
            uint32_t m = (uint32_t)r & 0x7fffffu, b;
            switch (cls) {
            case 0: b = 0; break;
            case 1: b = 0x7f800000u | (m ? m : 1); break;                 /* NaN, maybe signalling */
            case 2: b = 0x7f800000u; break;                               /* inf */
            case 3: b = m ? m : 1; break;                                 /* subnormal */
            case 4: b = 0x7f7fffffu; break;                               /* FLT_MAX */
            case 5: b = 0x7f000000u | m; break;                           /* huge: sums overflow */
            default: b = ((100u + (unsigned)((r >> 32) % 50)) << 23) | m; /* 2^-27 .. 2^22 */
            }
            b |= (uint32_t)sign << 31;
            memcpy((char *)buf + i * 4, &b, 4);
            break;
        }
        case ECCL_F64: {
            uint64_t m = r & UINT64_C(0xfffffffffffff), b;
            switch (cls) {
            case 0: b = 0; break;
            case 1: b = UINT64_C(0x7ff0000000000000) | (m ? m : 1); break;
            case 2: b = UINT64_C(0x7ff0000000000000); break;
            case 3: b = m ? m : 1; break;
            case 4: b = UINT64_C(0x7fefffffffffffff); break;
            case 5: b = UINT64_C(0x7fe0000000000000) | m; break;
            default: b = ((uint64_t)(1000u + (unsigned)((r >> 40) % 50)) << 52) | m;
            }
            b |= sign << 63;
            memcpy((char *)buf + i * 8, &b, 8);
            break;
        }
        case ECCL_F16: {
            uint16_t m = (uint16_t)(r & 0x3ffu), b;
            switch (cls) {
            case 0: b = 0; break;
            case 1: b = (uint16_t)(0x7c00u | (m ? m : 1)); break;
            case 2: b = 0x7c00u; break;
            case 3: b = m ? m : 1; break;
            case 4: b = 0x7bffu; break;                                            /* 65504 */
            case 5: b = (uint16_t)(0x7800u | m); break;                            /* 2^15.. */
            case 6: b = (uint16_t)(0x0400u | m); break;                            /* smallest normals */
            default: b = (uint16_t)(((8u + (unsigned)((r >> 32) % 14)) << 10) | m); /* 2^-7 .. 2^6 */
            }
            b = (uint16_t)(b | (sign << 15));
            memcpy((char *)buf + i * 2, &b, 2);
            break;
        }
        case ECCL_BF16: {
            uint16_t m = (uint16_t)(r & 0x7fu), b;
            switch (cls) {
            case 0: b = 0; break;
            case 1: b = (uint16_t)(0x7f80u | (m ? m : 1)); break;
            case 2: b = 0x7f80u; break;
            case 3: b = m ? m : 1; break;
            case 4: b = 0x7f7fu; break;
            case 5: b = (uint16_t)(0x7f00u | m); break;
            default: b = (uint16_t)(((110u + (unsigned)((r >> 32) % 30)) << 7) | m);
            }
            b = (uint16_t)(b | (sign << 15));
            memcpy((char *)buf + i * 2, &b, 2);
            break;
        }
        default: break;
        }
    }
}

/* Finite float values for the quantiser: ordinary magnitudes whose range
 * depends on the seed (mixed signs when `mixed`, else all >= 0). */
static inline void kat_fill_quant(eccl_dtype dt, void *buf, size_t n, uint64_t seed, int mixed)
{
    float scale = (float)(1u << (kat_mix(seed) % 12)) / 64.0f;
    for (size_t i = 0; i < n; i++) {
        uint64_t r = kat_rand(seed, i);
        float v = (float)(int64_t)(r % 2000001u) / 1000000.0f * scale; /* 0 .. 2 * scale */
        if (mixed)
            v -= scale;
        if (dt == ECCL_F32) {
            memcpy((char *)buf + 4 * i, &v, 4);
        } else {
            uint16_t h = dt == ECCL_F16 ? eccl_f32_to_f16(v) : eccl_f32_to_bf16(v);
            memcpy((char *)buf + 2 * i, &h, 2);
        }
    }
}

static inline void kat_bytes(uint8_t *buf, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t r = kat_rand(seed, i / 8);
        for (size_t k = 0; k < 8 && i + k < n; k++)
            buf[i + k] = (uint8_t)(r >> (8 * k));
    }
}

/* ---- hashing results ------------------------------------------------------------------ */

static inline int kat_is_float(eccl_dtype dt)
{
    return dt == ECCL_F16 || dt == ECCL_BF16 || dt == ECCL_F32 || dt == ECCL_F64;
}

/* Replaces every NaN of a float buffer by the dtype's canonical quiet NaN. */
static inline void kat_canon_nans(eccl_dtype dt, void *buf, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (dt) {
        case ECCL_F16: case ECCL_BF16: {
            uint16_t h, inf = dt == ECCL_F16 ? 0x7c00 : 0x7f80, q = dt == ECCL_F16 ? 0x7e00 : 0x7fc0;
            memcpy(&h, (char *)buf + 2 * i, 2);
            if ((h & 0x7fff) > inf)
                memcpy((char *)buf + 2 * i, &q, 2);
            break;
        }
        case ECCL_F32: {
            uint32_t b, q = 0x7fc00000u;
            memcpy(&b, (char *)buf + 4 * i, 4);
            if ((b & 0x7fffffffu) > 0x7f800000u)
                memcpy((char *)buf + 4 * i, &q, 4);
            break;
        }
        case ECCL_F64: {
            uint64_t b, q = UINT64_C(0x7ff8000000000000);
            memcpy(&b, (char *)buf + 8 * i, 8);
            if ((b & UINT64_C(0x7fffffffffffffff)) > UINT64_C(0x7ff0000000000000))
                memcpy((char *)buf + 8 * i, &q, 8);
            break;
        }
        default: break;
        }
    }
}

/* Whether a (dtype, op) result is compared with NaNs canonicalised. */
static inline int kat_nan_free_compare(eccl_dtype dt, eccl_op op)
{
    return kat_is_float(dt) && (op == ECCL_SUM || op == ECCL_PROD || op == ECCL_AVG);
}

/* SIMPLE hash of a reduce result (copy canonicalised where NaN bits are
 * unspecified). */
static inline uint64_t kat_result_hash(eccl_dtype dt, eccl_op op, const void *buf, size_t n)
{
    size_t bytes = n * eccl_dtype_size(dt);
    if (!kat_nan_free_compare(dt, op))
        return eccl_hash(ECCL_HASH_SIMPLE, buf, bytes);
    void *c = malloc(bytes ? bytes : 1);
    if (c == NULL)
        return 0;
    memcpy(c, buf, bytes);
    kat_canon_nans(dt, c, n);
    uint64_t h = eccl_hash(ECCL_HASH_SIMPLE, c, bytes);
    free(c);
    return h;
}

/* ---- reduce cases ------------------------------------------------------------------------
 * For each dtype, op (ECCL_SUM..ECCL_MAX in eccl_op order) and case: dst and
 * src from kat_fill, then eccl_reduce_into(dst, src); for ECCL_AVG additionally
 * eccl_reduce_scale_div(dst, KAT_AVG_DIVISOR). */
typedef struct kat_reduce_case {
    size_t n;
    int specials;
} kat_reduce_case;

#define KAT_REDUCE_CASES 4
#define KAT_AVG_DIVISOR 3u
static const KAT_UNUSED kat_reduce_case kat_reduce_cases[KAT_REDUCE_CASES] = {
    {1, 1}, {7, 1}, {4099, 1}, {4099, 0},
};

static inline uint64_t kat_seed_dst(eccl_dtype dt, unsigned c) { return 1000u + 16u * dt + c; }
static inline uint64_t kat_seed_src(eccl_dtype dt, unsigned c) { return 5000u + 16u * dt + c; }

/* The CPU computation of one case into dst (n elements); src is scratch. */
static inline void kat_reduce_cpu(eccl_dtype dt, eccl_op op, unsigned c, void *dst, void *src)
{
    const kat_reduce_case *k = &kat_reduce_cases[c];
    kat_fill(dt, dst, k->n, kat_seed_dst(dt, c), k->specials);
    kat_fill(dt, src, k->n, kat_seed_src(dt, c), k->specials);
    eccl_reduce_into(dst, src, k->n, dt, op);
    if (op == ECCL_AVG)
        eccl_reduce_scale_div(dst, k->n, dt, KAT_AVG_DIVISOR);
}

/* ---- hash cases ----------------------------------------------------------------------------- */
#define KAT_HASH_CASES 10
static const KAT_UNUSED size_t kat_hash_lengths[KAT_HASH_CASES] = {
    0, 1, 7, 8, 9, 65535, 65536, 65537, 1048576 + 24, 3 * 1048576 + 5,
};
#define KAT_HASH_SEED 77u

/* ---- quant cases ------------------------------------------------------------------------------
 * For each dtype (f32, f16, bf16: index kat_quant_dtypes), type (MINMAX,
 * AFFINE) and case: src from kat_fill_quant (case 4 has a NaN planted at
 * n / 2 and must be refused), then eccl_quant_quantize and
 * eccl_quant_dequantize. Expected: the result code, and the hashes of the
 * encoded metadata, of the codes and of the dequantised values (0 when
 * refused). */
typedef struct kat_quant_case {
    size_t n;
    int mixed;
    int plant_nan;
} kat_quant_case;

#define KAT_QUANT_CASES 5
static const KAT_UNUSED kat_quant_case kat_quant_cases[KAT_QUANT_CASES] = {
    {1, 1, 0}, {7, 1, 0}, {4099, 1, 0}, {70001, 0, 0}, {100, 1, 1},
};
static const KAT_UNUSED eccl_dtype kat_quant_dtypes[3] = {ECCL_F32, ECCL_F16, ECCL_BF16};

typedef struct kat_quant_expect {
    int rc;
    uint64_t meta, codes, values;
} kat_quant_expect;

static inline void kat_quant_input(eccl_dtype dt, unsigned c, void *src)
{
    const kat_quant_case *k = &kat_quant_cases[c];
    kat_fill_quant(dt, src, k->n, 9000u + 16u * dt + c, k->mixed);
    if (k->plant_nan) {
        if (dt == ECCL_F32) {
            uint32_t q = 0x7fc00001u;
            memcpy((char *)src + 4 * (k->n / 2), &q, 4);
        } else {
            uint16_t q = dt == ECCL_F16 ? 0x7e01 : 0x7fc1;
            memcpy((char *)src + 2 * (k->n / 2), &q, 2);
        }
    }
}

/* Hashes of a quantiser outcome (meta and codes as produced, values as
 * dequantised). */
static inline kat_quant_expect kat_quant_hashes(int rc, const eccl_quant_meta *m, const uint8_t *codes,
                                                const void *values, size_t n, eccl_dtype dt)
{
    kat_quant_expect e = {rc, 0, 0, 0};
    uint8_t enc[ECCL_QUANT_META_BYTES];
    if (rc != ECCL_OK)
        return e;
    if (eccl_quant_meta_encode(m, enc) != ECCL_OK)
        return e;
    e.meta = eccl_hash(ECCL_HASH_SIMPLE, enc, sizeof enc);
    e.codes = eccl_hash(ECCL_HASH_SIMPLE, codes, n);
    e.values = eccl_hash(ECCL_HASH_SIMPLE, values, n * eccl_dtype_size(dt));
    return e;
}

/* The CPU computation of one quant case. */
static inline kat_quant_expect kat_quant_cpu(eccl_dtype dt, eccl_quant_type type, unsigned c)
{
    size_t n = kat_quant_cases[c].n, esz = eccl_dtype_size(dt);
    void *src = malloc(n * esz), *val = malloc(n * esz);
    uint8_t *codes = malloc(n);
    eccl_quant_meta m;
    kat_quant_expect e = {-1, 0, 0, 0};
    if (src && val && codes) {
        kat_quant_input(dt, c, src);
        int rc = (int)eccl_quant_quantize(type, dt, src, n, codes, &m);
        if (rc == ECCL_OK)
            rc = (int)eccl_quant_dequantize(&m, codes, n, val);
        e = kat_quant_hashes(rc, &m, codes, val, n, dt);
    }
    free(src);
    free(val);
    free(codes);
    return e;
}

/* ---- the frozen answers (tests/kat_kernels.c printed them) ------------------------------------ */
/* @@KAT_TABLE_BEGIN@@ */
static const KAT_UNUSED uint64_t kat_reduce_expect[ECCL_DTYPE_COUNT][ECCL_OP_COUNT][KAT_REDUCE_CASES] = {
    { /* i8 */
        {UINT64_C(0x75f0900f78769b8c), UINT64_C(0xd61bcd6312b67225), UINT64_C(0x5b3fa7a8c8476ef9), UINT64_C(0xbce78dc9452dd0b2)}, /* sum */
        {UINT64_C(0x4b15cc204d925f61), UINT64_C(0xd2e3fcae8d75eed7), UINT64_C(0x0bb790614e67192d), UINT64_C(0xcfb63ef45a28f290)}, /* avg */
        {UINT64_C(0x7bcfe0b45f473c50), UINT64_C(0xc6006fa438bc1df4), UINT64_C(0xe9e38f93c6744d39), UINT64_C(0xc20b3fdb415507ab)}, /* prod */
        {UINT64_C(0x7c1be49446e90cb2), UINT64_C(0xd62d5710ba717f32), UINT64_C(0xce8e4ca51a348537), UINT64_C(0x4160fc25ae142ff8)}, /* min */
        {UINT64_C(0x7128faae03b8bff1), UINT64_C(0x807b495e49ad3bc5), UINT64_C(0xeecae16acfce85e2), UINT64_C(0x931c70ef8c66eedf)}, /* max */
    },
    { /* u8 */
        {UINT64_C(0xec7d337f0b478b5a), UINT64_C(0x57a745c0a4a67df2), UINT64_C(0x8e2b801fba082967), UINT64_C(0xfed60d45a8646815)}, /* sum */
        {UINT64_C(0x29cd7a5b30a640a5), UINT64_C(0xcb7288fad4fdbadf), UINT64_C(0xbaad6174e8ad5487), UINT64_C(0xdee6e6bb87b1866c)}, /* avg */
        {UINT64_C(0x3da70e936c66bc53), UINT64_C(0xdd1048966ac7f79e), UINT64_C(0x3ce2ff81596d07ef), UINT64_C(0x98ef04a213d5f90b)}, /* prod */
        {UINT64_C(0xe3ebff542faa42d3), UINT64_C(0x40e45feb0518c21a), UINT64_C(0x2e87eb85547ec0ee), UINT64_C(0x9891c0eb7ea9f8c3)}, /* min */
        {UINT64_C(0x2ecd60a9118be684), UINT64_C(0xf9412dcfd2456983), UINT64_C(0x9446efee288bc6f2), UINT64_C(0x933ac70689f49ce3)}, /* max */
    },
    { /* i16 */
        {UINT64_C(0x33d703fd74ba07a2), UINT64_C(0xfcb1225b6b4fc331), UINT64_C(0x8a6df0709b32ecc3), UINT64_C(0xd57f9acd2937f9f0)}, /* sum */
        {UINT64_C(0x41fa17eefb9aa75f), UINT64_C(0xe6ebe7b0e41a7914), UINT64_C(0x9dd68a0109a64f24), UINT64_C(0xb362479ad054e195)}, /* avg */
        {UINT64_C(0xed912e387cc93ccb), UINT64_C(0x8228dc2d31b8e8a7), UINT64_C(0xcc810860fdf50ccb), UINT64_C(0x2cfc025a618d9b91)}, /* prod */
        {UINT64_C(0xa9277e94bdd71574), UINT64_C(0x1d29f45449ee7af2), UINT64_C(0x09124c6989af4886), UINT64_C(0x769e5a6671b7249c)}, /* min */
        {UINT64_C(0x79d2cc2ffc04d3b2), UINT64_C(0x4cf52fb615d9e05c), UINT64_C(0x10287a7cf950f94a), UINT64_C(0x24549ab550612f1e)}, /* max */
    },
    { /* u16 */
        {UINT64_C(0x350cb3477bb1d255), UINT64_C(0xd3d34a55dfeea0a4), UINT64_C(0x2b8137b29af3b134), UINT64_C(0xc94ea75495a1edbf)}, /* sum */
        {UINT64_C(0x8c9f3998f2ae3aae), UINT64_C(0xe571c9479433e981), UINT64_C(0x47a7dd9a52f3d348), UINT64_C(0x51e3efbce8e6a9b7)}, /* avg */
        {UINT64_C(0x1a7e44fe680c86aa), UINT64_C(0x87b1694081fee377), UINT64_C(0x996cd7e445897972), UINT64_C(0xd2aed02ca9867c78)}, /* prod */
        {UINT64_C(0x1a7e44fe680c86aa), UINT64_C(0x13d8b86707b8b9d0), UINT64_C(0xce9d300ab91449e0), UINT64_C(0x571d387cadae3e03)}, /* min */
        {UINT64_C(0x350cb3477bb1d255), UINT64_C(0xd7de89062321ed56), UINT64_C(0xcf355ade226bf97d), UINT64_C(0x47c142ad4ca751cc)}, /* max */
    },
    { /* i32 */
        {UINT64_C(0xc0091d74eb2cf523), UINT64_C(0xefccbf1ebf03bf69), UINT64_C(0x86499c5599f23313), UINT64_C(0x64a2644c8b647122)}, /* sum */
        {UINT64_C(0xad85d490673696d3), UINT64_C(0x30781fc7177fdb99), UINT64_C(0xdf4e59e16948c7e6), UINT64_C(0x1f4a24a25200a659)}, /* avg */
        {UINT64_C(0x044c834a39de1d7e), UINT64_C(0xd6c2b16c26fde312), UINT64_C(0x5daea063f9928e34), UINT64_C(0x0ea1e6c3cd5ea516)}, /* prod */
        {UINT64_C(0x16f114a3f50d1b87), UINT64_C(0xc20751b1fc98c5da), UINT64_C(0x3243c79eb0788226), UINT64_C(0x4e0a10bf0cbb3cdf)}, /* min */
        {UINT64_C(0xe0e300797f20a3d3), UINT64_C(0xe933c83e857d1bae), UINT64_C(0x815cc19016d349d1), UINT64_C(0x55a19adad9f912e2)}, /* max */
    },
    { /* u32 */
        {UINT64_C(0x49e6e2cfea5d1d1c), UINT64_C(0x9a8d726c7928aeaf), UINT64_C(0x1e32926d51c94aae), UINT64_C(0x8642bef7948f68e0)}, /* sum */
        {UINT64_C(0xa2cbea600a69bf79), UINT64_C(0x5c30d73c69f730a4), UINT64_C(0x72d96ff3becb8226), UINT64_C(0x19b8a80d8fb83839)}, /* avg */
        {UINT64_C(0x8ad144ed3c0daaf9), UINT64_C(0x5e7567af1155a9a5), UINT64_C(0x2aafb32ee7c5f20e), UINT64_C(0x6ceb07dfe48201c8)}, /* prod */
        {UINT64_C(0xa2590a00b50e4389), UINT64_C(0xed40f12a101c26b0), UINT64_C(0xce54bd625c542060), UINT64_C(0x5d6881511365744d)}, /* min */
        {UINT64_C(0xad673abf0085834a), UINT64_C(0x36f73face28cd810), UINT64_C(0x14f18c664cba51ec), UINT64_C(0xd7a7436861cf2a38)}, /* max */
    },
    { /* i64 */
        {UINT64_C(0x3780491b4829f5cb), UINT64_C(0x81a8ce1fc57570e8), UINT64_C(0xa1b22e36145af526), UINT64_C(0xca2b4bc9ffe60380)}, /* sum */
        {UINT64_C(0x418211d188b2b9c0), UINT64_C(0xaa199c6877c14b29), UINT64_C(0x2c09683e37307c8e), UINT64_C(0x752bf8d8a8002b1d)}, /* avg */
        {UINT64_C(0xc25ea89a9d14f081), UINT64_C(0x365b0dcd949b422f), UINT64_C(0x0508828b9624b558), UINT64_C(0x062598c670a9abd9)}, /* prod */
        {UINT64_C(0x61eb32f6a55126f5), UINT64_C(0x11278ffbfc68c437), UINT64_C(0x94dd9952d6d83daa), UINT64_C(0x1142aee92b537d13)}, /* min */
        {UINT64_C(0x4043f3f365b5dd32), UINT64_C(0x5e09f160a7350c45), UINT64_C(0xa91232b63d54d2e5), UINT64_C(0x7c3117201bf9c2e0)}, /* max */
    },
    { /* u64 */
        {UINT64_C(0xa8506eb7588ddcd1), UINT64_C(0x10094ab60a56664f), UINT64_C(0x70db0863c8afbfeb), UINT64_C(0x9443222c5079168b)}, /* sum */
        {UINT64_C(0x4789e2bda917a864), UINT64_C(0x92ef4fafb97bff74), UINT64_C(0x748dd744ba970a2f), UINT64_C(0xc6f98f0e95dcf30b)}, /* avg */
        {UINT64_C(0xf18d19abfb5a15b6), UINT64_C(0x94f2df7cf2357e6a), UINT64_C(0xe227bcafa9af5d76), UINT64_C(0xad2c42013b4ba11d)}, /* prod */
        {UINT64_C(0xc772e74fb7cd943f), UINT64_C(0xad3fab6c76604830), UINT64_C(0xfbcc78a03fea4353), UINT64_C(0x5029769a3833d5c8)}, /* min */
        {UINT64_C(0x18e9fbe7b84c7da0), UINT64_C(0x331b5b85f578af60), UINT64_C(0xff7719ee16b6ce61), UINT64_C(0x9d1945c3420feeac)}, /* max */
    },
    { /* f16 */
        {UINT64_C(0x3ad048d500723530), UINT64_C(0x8a0f84319b4828c1), UINT64_C(0x66c7032333e34692), UINT64_C(0xcb65471192c54529)}, /* sum */
        {UINT64_C(0x3ad048d500723530), UINT64_C(0x197b32f96185262b), UINT64_C(0x0fc635d7b8c95c1a), UINT64_C(0xdbd01059e2d548dd)}, /* avg */
        {UINT64_C(0x8192ce33ec1b5446), UINT64_C(0xe4dd16926854de21), UINT64_C(0xf0f89a435ce3d31c), UINT64_C(0x14958a46df11126c)}, /* prod */
        {UINT64_C(0xa72ecd5e115bade0), UINT64_C(0xdf13594bc6e96139), UINT64_C(0x755d38dc0e73c9d3), UINT64_C(0xf2071cf6858d40b9)}, /* min */
        {UINT64_C(0x045038a1611b6a52), UINT64_C(0x999a86fdf1dc3212), UINT64_C(0x519ad94ac3c7c1b1), UINT64_C(0xb4a91717a4208d61)}, /* max */
    },
    { /* bf16 */
        {UINT64_C(0x82c567af7de7d8e1), UINT64_C(0xd91262ffe8f60c77), UINT64_C(0x6eb0fe9f3c5bbc12), UINT64_C(0xd2aed9f5678f130c)}, /* sum */
        {UINT64_C(0x01df5dd1441f9b38), UINT64_C(0x3362de34b8d66eb6), UINT64_C(0xa23e99c10fb37413), UINT64_C(0x8a69149b98b378b9)}, /* avg */
        {UINT64_C(0xb06d9b5845c1ecee), UINT64_C(0x6d5ea21c1051c357), UINT64_C(0x7b25a33cbf7fabc4), UINT64_C(0x9e74629e678569d0)}, /* prod */
        {UINT64_C(0x900fba6392afcb62), UINT64_C(0x6af30d1a8556d0a9), UINT64_C(0xffffd97fb588ee4c), UINT64_C(0xeb0f2649080cfd3a)}, /* min */
        {UINT64_C(0x4e7abf9c71788e18), UINT64_C(0xd08e34a26b857d57), UINT64_C(0x818b5f48d96dd47e), UINT64_C(0x44ec2857437c120d)}, /* max */
    },
    { /* f32 */
        {UINT64_C(0x43b53ebe39375f22), UINT64_C(0xe7363c43f1594356), UINT64_C(0x5aad2a1f73a25234), UINT64_C(0x94242b0b79022ab8)}, /* sum */
        {UINT64_C(0xf909c52f92ff2ff9), UINT64_C(0xdc6b2154b29fe2db), UINT64_C(0x5a317b02cd70761f), UINT64_C(0x858a43e2a5758e89)}, /* avg */
        {UINT64_C(0x93be485d6f49314f), UINT64_C(0x4fd742571b8d0752), UINT64_C(0x9587715596928620), UINT64_C(0x6b5eea29d1a82c3c)}, /* prod */
        {UINT64_C(0x43b53ebe39375f22), UINT64_C(0xb7eb405071a27f2c), UINT64_C(0xd99f1764e112479b), UINT64_C(0xdfc29ee9290529f0)}, /* min */
        {UINT64_C(0x9058c61bec534031), UINT64_C(0x9e88cf663cbe6d87), UINT64_C(0x86b3b857418c4f8f), UINT64_C(0x99a4411ccc33b250)}, /* max */
    },
    { /* f64 */
        {UINT64_C(0x06235cbba5d13286), UINT64_C(0xf13d227c5291fc0b), UINT64_C(0x76d15bac3b7d0954), UINT64_C(0xe5cfd617841e2aaa)}, /* sum */
        {UINT64_C(0x4e40279f8bbe463a), UINT64_C(0xba25ac0b032c6892), UINT64_C(0x45f7b39156ee7123), UINT64_C(0xd2f54d0c285a0923)}, /* avg */
        {UINT64_C(0xf629f8f857d85c46), UINT64_C(0x41d4b3c78543808a), UINT64_C(0xa654f2126f719ac9), UINT64_C(0xea3e9584393ea72d)}, /* prod */
        {UINT64_C(0xf629f8f857d85c46), UINT64_C(0xaa9033f24219f2e9), UINT64_C(0x5cf8723fc5652529), UINT64_C(0xb98d27a86fd041f0)}, /* min */
        {UINT64_C(0x06235cbba5d13286), UINT64_C(0xf2e3bbea958ad909), UINT64_C(0x67a1730f094205b6), UINT64_C(0xce4ee7e76f463936)}, /* max */
    },
};

static const KAT_UNUSED uint64_t kat_hash_simple_expect[KAT_HASH_CASES] = {
    UINT64_C(0xacb65bc0832c5445), /* 0 bytes */
    UINT64_C(0x9d4735ca25738ae3), /* 1 bytes */
    UINT64_C(0xad3308b9054a86db), /* 7 bytes */
    UINT64_C(0x33e2be8f2968c8ef), /* 8 bytes */
    UINT64_C(0x82f7f4453cf35be5), /* 9 bytes */
    UINT64_C(0x0d498d5cb5d64f41), /* 65535 bytes */
    UINT64_C(0x4a650e95a3401f77), /* 65536 bytes */
    UINT64_C(0x651b9db532e95b4e), /* 65537 bytes */
    UINT64_C(0x4a5addd51221fc3d), /* 1048600 bytes */
    UINT64_C(0xe7bbdfa2c8747e31), /* 3145733 bytes */
};

static const KAT_UNUSED uint64_t kat_hash_crc32c_expect[KAT_HASH_CASES] = {
    UINT64_C(0x0000000000000000), /* 0 bytes */
    UINT64_C(0x00000000fa125dad), /* 1 bytes */
    UINT64_C(0x00000000c18c8ea6), /* 7 bytes */
    UINT64_C(0x000000009c0cc701), /* 8 bytes */
    UINT64_C(0x00000000266b5636), /* 9 bytes */
    UINT64_C(0x0000000031ee5fe2), /* 65535 bytes */
    UINT64_C(0x000000000e5459c7), /* 65536 bytes */
    UINT64_C(0x000000000c603b2c), /* 65537 bytes */
    UINT64_C(0x00000000140f52bf), /* 1048600 bytes */
    UINT64_C(0x0000000015d57af3), /* 3145733 bytes */
};

static const KAT_UNUSED kat_quant_expect kat_quant_expect_table[3][2][KAT_QUANT_CASES] = {
    { /* f32 */
        { /* MINMAX_U8 */
            {ECCL_OK, UINT64_C(0x0adba4ec632b6c47), UINT64_C(0x2fb771a4e0c1b246), UINT64_C(0xefa5737b8666518e)},
            {ECCL_OK, UINT64_C(0x89ea8c153e063822), UINT64_C(0x272623a327b2d4f7), UINT64_C(0x361b3d3cf25682a3)},
            {ECCL_OK, UINT64_C(0xaec960cb70464ffa), UINT64_C(0x77486e7f0e6e04a0), UINT64_C(0x4172045633b91cab)},
            {ECCL_OK, UINT64_C(0x657514b2dad6ad2b), UINT64_C(0xfa8ece120cec4735), UINT64_C(0xbd58a8960b8b01d5)},
            {ECCL_ERR_INVALID_ARG, UINT64_C(0x0000000000000000), UINT64_C(0x0000000000000000), UINT64_C(0x0000000000000000)},
        },
        { /* AFFINE_U8 */
            {ECCL_OK, UINT64_C(0xea01c7846e7db029), UINT64_C(0x2fb771a4e0c1b246), UINT64_C(0x9e2197f0da4150e5)},
            {ECCL_OK, UINT64_C(0x8fa9ea5784ea6568), UINT64_C(0xadd384ac3364c262), UINT64_C(0x4950ad761ec57fe5)},
            {ECCL_OK, UINT64_C(0x4cf0c6134abc9683), UINT64_C(0xa6fc230412a19118), UINT64_C(0xf3885360b2eec44d)},
            {ECCL_OK, UINT64_C(0xc101635fc46973ea), UINT64_C(0x8489d74055c560fe), UINT64_C(0x57acc508f25305b8)},
            {ECCL_ERR_INVALID_ARG, UINT64_C(0x0000000000000000), UINT64_C(0x0000000000000000), UINT64_C(0x0000000000000000)},
        },
    },
    { /* f16 */
        { /* MINMAX_U8 */
            {ECCL_OK, UINT64_C(0x98a658f6599773ed), UINT64_C(0x2fb771a4e0c1b246), UINT64_C(0x1ab8073e3e3496d8)},
            {ECCL_OK, UINT64_C(0x50409bace39c4a66), UINT64_C(0xc90b38c8135b635a), UINT64_C(0x1da3929da009db19)},
            {ECCL_OK, UINT64_C(0x295cd3aee8ceb890), UINT64_C(0xfdc213cec2427a8a), UINT64_C(0x3311d714aecee42c)},
            {ECCL_OK, UINT64_C(0x5ae088e3d1158eff), UINT64_C(0xf75d8afa097e8655), UINT64_C(0x65a383c6674a014b)},
            {ECCL_ERR_INVALID_ARG, UINT64_C(0x0000000000000000), UINT64_C(0x0000000000000000), UINT64_C(0x0000000000000000)},
        },
        { /* AFFINE_U8 */
            {ECCL_OK, UINT64_C(0x8377f0784f58aa41), UINT64_C(0x2fb771a4e0c1b246), UINT64_C(0x1ab8073e3e3496d8)},
            {ECCL_OK, UINT64_C(0xd5acfb331f8eb112), UINT64_C(0xc90b38c8135b635a), UINT64_C(0x0378f3e1d72e6bb2)},
            {ECCL_OK, UINT64_C(0xbd49ada448f03a06), UINT64_C(0x33df9e1ac178d3b1), UINT64_C(0xb17a15ece21fab5c)},
            {ECCL_OK, UINT64_C(0x56bede7fd344eac8), UINT64_C(0x3a1573388fa16c1e), UINT64_C(0x0296b65891e5635b)},
            {ECCL_ERR_INVALID_ARG, UINT64_C(0x0000000000000000), UINT64_C(0x0000000000000000), UINT64_C(0x0000000000000000)},
        },
    },
    { /* bf16 */
        { /* MINMAX_U8 */
            {ECCL_OK, UINT64_C(0x03b4f5fe026ce349), UINT64_C(0x2fb771a4e0c1b246), UINT64_C(0x2bae60884e006e9d)},
            {ECCL_OK, UINT64_C(0x10da0b1b49eaeaa9), UINT64_C(0x9c4f1e1a9cdfb701), UINT64_C(0x12e06bb7b514a598)},
            {ECCL_OK, UINT64_C(0x3277f79397fe442f), UINT64_C(0xe226ac006bab0dea), UINT64_C(0x5c31b79e287f8ab2)},
            {ECCL_OK, UINT64_C(0x5bf12f8839123a2c), UINT64_C(0xdfb71c263a421789), UINT64_C(0x23fc2ed6f3c89dc7)},
            {ECCL_ERR_INVALID_ARG, UINT64_C(0x0000000000000000), UINT64_C(0x0000000000000000), UINT64_C(0x0000000000000000)},
        },
        { /* AFFINE_U8 */
            {ECCL_OK, UINT64_C(0x9a22fb252f3aecc1), UINT64_C(0xf624f19a1d1ae99f), UINT64_C(0x2bae60884e006e9d)},
            {ECCL_OK, UINT64_C(0x69418a8edbbb57ef), UINT64_C(0x9c4f1e1a9cdfb701), UINT64_C(0x93eb0dbb7a6b214c)},
            {ECCL_OK, UINT64_C(0x6b03a7b778265ba0), UINT64_C(0x303a930a919237ee), UINT64_C(0xf159f2ea0714fdbc)},
            {ECCL_OK, UINT64_C(0xb7416d66ac63908a), UINT64_C(0xee19d76e7e2baa0b), UINT64_C(0xa8d2bf0d48f562ae)},
            {ECCL_ERR_INVALID_ARG, UINT64_C(0x0000000000000000), UINT64_C(0x0000000000000000), UINT64_C(0x0000000000000000)},
        },
    },
};
/* @@KAT_TABLE_END@@ */

#endif /* ECCL_TESTS_KAT_KERNELS_H */
