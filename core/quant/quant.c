/* 8-bit quantisation; the definitions and guarantees are in quant.h.
 *
 * Compiled with -ffp-contract=off (CMakeLists.txt): `min + q * s` must be a
 * multiply and an add, each rounded, on every peer; a compiler that fused
 * them into one FMA on some targets and not others would break bit-parity.
 * The kernels are plain indexed loops with selects, one per dtype, the
 * shape compilers vectorise (as in core/coll/reduce.c). */
#include "quant/quant.h"

#include <float.h>
#include <string.h>

#include "quant/quant_elem.h"
#include "util/half.h"

/* x87's extended-precision intermediates (FLT_EVAL_METHOD 2) would round
 * differently from SSE/NEON/GPU binary32: refuse to build rather than
 * diverge (on i386, build with -mfpmath=sse -msse2). */
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "eccl's quantisation needs binary32 arithmetic evaluated in binary32 (FLT_EVAL_METHOD == 0)"
#endif

#define EXP_MASK ECCL_Q_EXP_MASK

/* The definitions of quant.h, one element at a time, live in
 * quant/quant_elem.h, shared with the CUDA plugin's kernels: the loops below
 * and the checks inline the same helpers, so the quantiser, its checks and
 * the device cannot drift apart. */
#define f32_finite eccl_q_finite
#define minmax_scale eccl_q_minmax_scale
#define minmax_code eccl_q_minmax_code
#define minmax_value eccl_q_minmax_value
#define affine_code eccl_q_affine_code
#define affine_value eccl_q_affine_value

/* ---- kernels, one set per dtype ---------------------------------------------- */

#define LOAD_F32(p, i) (((const float *)(p))[i])
#define LOAD_F16(p, i) eccl_f16_to_f32(((const uint16_t *)(p))[i])
#define LOAD_BF16(p, i) eccl_bf16_to_f32(((const uint16_t *)(p))[i])
#define STORE_F32(p, i, v) (((float *)(p))[i] = (v))
#define STORE_F16(p, i, v) (((uint16_t *)(p))[i] = eccl_f32_to_f16(v))
#define STORE_BF16(p, i, v) (((uint16_t *)(p))[i] = eccl_f32_to_bf16(v))

#define DEFINE_KERNELS(sfx, LOAD, STORE)                                                       \
    /* min and max of n >= 1 values; nonzero if any is NaN or infinite. */                     \
    static int scan_##sfx(const void *src, size_t n, float *mn_out, float *mx_out)             \
    {                                                                                          \
        float mn = LOAD(src, 0), mx = mn;                                                      \
        uint32_t bad = 0;                                                                      \
        for (size_t i = 0; i < n; i++)                                                         \
            eccl_q_scan_step(LOAD(src, i), &mn, &mx, &bad);                                    \
        *mn_out = mn;                                                                          \
        *mx_out = mx;                                                                          \
        return bad != 0;                                                                       \
    }                                                                                          \
    static void code_minmax_##sfx(const void *restrict src, size_t n, uint8_t *restrict codes, \
                                  float mn, float mx, float s)                                 \
    {                                                                                          \
        for (size_t i = 0; i < n; i++)                                                         \
            codes[i] = minmax_code(LOAD(src, i), mn, mx, s);                                   \
    }                                                                                          \
    static void code_affine_##sfx(const void *restrict src, size_t n, uint8_t *restrict codes, \
                                  float s, float c)                                            \
    {                                                                                          \
        for (size_t i = 0; i < n; i++)                                                         \
            codes[i] = affine_code(LOAD(src, i), s, c);                                        \
    }                                                                                          \
    static void value_minmax_##sfx(const uint8_t *restrict codes, size_t n, void *restrict dst, \
                                   float mn, float mx, float s)                                \
    {                                                                                          \
        for (size_t i = 0; i < n; i++)                                                         \
            STORE(dst, i, minmax_value(codes[i], mn, mx, s));                                  \
    }                                                                                          \
    static void value_affine_##sfx(const uint8_t *restrict codes, size_t n, void *restrict dst, \
                                   int32_t zp, float s)                                        \
    {                                                                                          \
        for (size_t i = 0; i < n; i++)                                                         \
            STORE(dst, i, affine_value(codes[i], zp, s));                                      \
    }

DEFINE_KERNELS(f32, LOAD_F32, STORE_F32)
DEFINE_KERNELS(f16, LOAD_F16, STORE_F16)
DEFINE_KERNELS(bf16, LOAD_BF16, STORE_BF16)

#define DISPATCH(dtype, name, ...)                                                             \
    do {                                                                                       \
        switch (dtype) {                                                                       \
        case ECCL_F32: name##_f32(__VA_ARGS__); break;                                         \
        case ECCL_F16: name##_f16(__VA_ARGS__); break;                                         \
        default: name##_bf16(__VA_ARGS__); break;                                              \
        }                                                                                      \
    } while (0)

static int dtype_ok(unsigned dtype)
{
    return dtype == ECCL_F32 || dtype == ECCL_F16 || dtype == ECCL_BF16;
}

/* x rounded to the dtype and widened back. */
static float in_dtype(float x, unsigned dtype)
{
    switch (dtype) {
    case ECCL_F16: return eccl_f16_to_f32(eccl_f32_to_f16(x));
    case ECCL_BF16: return eccl_bf16_to_f32(eccl_f32_to_bf16(x));
    default: return x;
    }
}

static int exact_in_dtype(float x, unsigned dtype)
{
    return eccl_f32_bits(in_dtype(x, dtype)) == eccl_f32_bits(x);
}

/* ---- metadata ------------------------------------------------------------------- */

/* AFFINE grid ends, finite in f32 and in the dtype. */
static int affine_grid_ok(float s, int32_t zp, unsigned dtype)
{
    float lo = affine_value(0, zp, s), hi = affine_value(255, zp, s);
    return f32_finite(in_dtype(lo, dtype)) && f32_finite(in_dtype(hi, dtype));
}

eccl_result eccl_quant_meta_check(const eccl_quant_meta *m)
{
    if (m == NULL || !dtype_ok(m->dtype) || (uint64_t)(size_t)m->count != m->count)
        return ECCL_ERR_INVALID_ARG;
    uint32_t sb = eccl_f32_bits(m->scale), nb = eccl_f32_bits(m->min), xb = eccl_f32_bits(m->max);
    switch (m->type) {
    case ECCL_QUANT_MINMAX_U8:
        if (m->zero_point != 0 || sb != 0)
            return ECCL_ERR_INVALID_ARG;
        if (!f32_finite(m->min) || !f32_finite(m->max) || !(m->min <= m->max) ||
            !f32_finite(m->max - m->min))
            return ECCL_ERR_INVALID_ARG;
        if (!exact_in_dtype(m->min, m->dtype) || !exact_in_dtype(m->max, m->dtype))
            return ECCL_ERR_INVALID_ARG;
        return ECCL_OK;
    case ECCL_QUANT_AFFINE_U8:
        if (nb != 0 || xb != 0)
            return ECCL_ERR_INVALID_ARG;
        if (sb == 0)
            return m->zero_point == 0 ? ECCL_OK : ECCL_ERR_INVALID_ARG;
        /* positive, normal, finite, 16 significant bits */
        if (sb < 0x00800000u || sb >= EXP_MASK || (sb & 0xffu) != 0)
            return ECCL_ERR_INVALID_ARG;
        return affine_grid_ok(m->scale, m->zero_point, m->dtype) ? ECCL_OK : ECCL_ERR_INVALID_ARG;
    }
    return ECCL_ERR_INVALID_ARG;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

eccl_result eccl_quant_meta_encode(const eccl_quant_meta *m, uint8_t out[ECCL_QUANT_META_BYTES])
{
    if (out == NULL || eccl_quant_meta_check(m) != ECCL_OK)
        return ECCL_ERR_INVALID_ARG;
    out[0] = m->type;
    out[1] = m->dtype;
    out[2] = m->zero_point;
    out[3] = 0;
    put_le32(out + 4, eccl_f32_bits(m->scale));
    put_le32(out + 8, eccl_f32_bits(m->min));
    put_le32(out + 12, eccl_f32_bits(m->max));
    put_le32(out + 16, (uint32_t)m->count);
    put_le32(out + 20, (uint32_t)(m->count >> 32));
    return ECCL_OK;
}

eccl_result eccl_quant_meta_decode(const uint8_t in[ECCL_QUANT_META_BYTES], eccl_quant_meta *m)
{
    eccl_quant_meta t;
    if (in == NULL || m == NULL)
        return ECCL_ERR_INVALID_ARG;
    memset(&t, 0, sizeof t);
    t.type = in[0];
    t.dtype = in[1];
    t.zero_point = in[2];
    t.scale = eccl_f32_from_bits(get_le32(in + 4));
    t.min = eccl_f32_from_bits(get_le32(in + 8));
    t.max = eccl_f32_from_bits(get_le32(in + 12));
    t.count = (uint64_t)get_le32(in + 16) | (uint64_t)get_le32(in + 20) << 32;
    if (in[3] != 0 || eccl_quant_meta_check(&t) != ECCL_OK)
        return ECCL_ERR_PROTOCOL;
    *m = t;
    return ECCL_OK;
}

float eccl_quant_meta_scale(const eccl_quant_meta *m)
{
    if (eccl_quant_meta_check(m) != ECCL_OK)
        return 0.0f;
    return m->type == ECCL_QUANT_MINMAX_U8 ? minmax_scale(m->min, m->max) : m->scale;
}

/* ---- quantise --------------------------------------------------------------------- */

/* y >= FLT_MIN rounded toward zero to a float with 16 significant bits. */
static float round_down_16_bits(double y)
{
    float f = (float)y; /* nearest; y < FLT_MAX, so finite */
    if ((double)f > y)
        f = eccl_f32_from_bits(eccl_f32_bits(f) - 1);
    return eccl_f32_from_bits(eccl_f32_bits(f) & 0xffffff00u);
}

/* ceil(v - 0.5) clamped to [0, 255]: round-half-down of v >= 0. */
static int32_t zero_point_of(float u)
{
    double v = (double)u - 0.5;
    int32_t z;
    if (v > 255.0)
        return 255;
    z = (int32_t)v; /* toward zero; v >= -0.5 */
    if ((double)z < v)
        z++;
    return z < 0 ? 0 : z;
}

/* Chooses AFFINE's scale and zero point for lo <= 0 <= hi (see quant.h).
 * Returns 0 if the grid would overflow the dtype. */
static int affine_params(float lo, float hi, unsigned dtype, float *s_out, int32_t *zp_out)
{
    float s;
    int32_t zp = 0;
    int floor_case;

    if (!(lo < hi)) { /* both zero */
        *s_out = 0.0f;
        *zp_out = 0;
        return 1;
    }
    double y = ((double)hi - (double)lo) / 255.0;
    floor_case = y < (double)FLT_MIN;
    s = floor_case ? FLT_MIN : round_down_16_bits(y);
    for (int tries = 0;; tries++) {
        zp = zero_point_of(-lo / s);
        float c = (float)zp + 0.5f;
        /* lo and hi must land on codes 0 and 255 for the metadata to be a
         * fixed point; rounding s down normally guarantees it, except when
         * hi - lo is within rounding of 255 s, where one step lower does. */
        if (floor_case || (affine_code(lo, s, c) == 0 && affine_code(hi, s, c) == 255) ||
            tries == 3)
            break;
        s = eccl_f32_from_bits(eccl_f32_bits(s) - 0x100u);
        if (s < FLT_MIN) {
            s = FLT_MIN;
            floor_case = 1;
        }
    }
    /* A range so small that the FLT_MIN grid maps every value to the zero
     * point (all |x| < FLT_MIN / 2): call it the zero chunk, or the
     * dequantised chunk (all zeros) would requantise to different metadata. */
    if (affine_code(lo, s, (float)zp + 0.5f) == zp && affine_code(hi, s, (float)zp + 0.5f) == zp) {
        s = 0.0f;
        zp = 0;
    }
    if (!affine_grid_ok(s, zp, dtype))
        return 0;
    *s_out = s;
    *zp_out = zp;
    return 1;
}

eccl_result eccl_quant_meta_from_range(eccl_quant_type type, eccl_dtype dtype, size_t count,
                                       float mn, float mx, uint32_t bad, eccl_quant_meta *meta)
{
    eccl_quant_meta m;

    if (meta == NULL || !dtype_ok((unsigned)dtype) ||
        (type != ECCL_QUANT_MINMAX_U8 && type != ECCL_QUANT_AFFINE_U8) || bad)
        return ECCL_ERR_INVALID_ARG;
    memset(&m, 0, sizeof m);
    m.type = (uint8_t)type;
    m.dtype = (uint8_t)dtype;
    m.count = count;
    /* -0.0 would make D(0) = -0.0 + 0.0 = +0.0 differ from min's bits. */
    if (mn == 0.0f)
        mn = 0.0f;
    if (mx == 0.0f)
        mx = 0.0f;

    if (type == ECCL_QUANT_MINMAX_U8) {
        if (!f32_finite(mx - mn))
            return ECCL_ERR_INVALID_ARG;
        m.min = mn;
        m.max = mx;
    } else {
        float s;
        int32_t zp;
        if (!affine_params(mn < 0.0f ? mn : 0.0f, mx > 0.0f ? mx : 0.0f, (unsigned)dtype, &s, &zp))
            return ECCL_ERR_INVALID_ARG;
        m.scale = s;
        m.zero_point = (uint8_t)zp;
    }
    *meta = m;
    return ECCL_OK;
}

eccl_result eccl_quant_quantize(eccl_quant_type type, eccl_dtype dtype, const void *src,
                                size_t count, uint8_t *codes, eccl_quant_meta *meta)
{
    eccl_quant_meta m;
    float mn = 0.0f, mx = 0.0f;
    int bad = 0;
    eccl_result r;

    if (meta == NULL || !dtype_ok((unsigned)dtype) ||
        (type != ECCL_QUANT_MINMAX_U8 && type != ECCL_QUANT_AFFINE_U8) ||
        (count > 0 && (src == NULL || codes == NULL)))
        return ECCL_ERR_INVALID_ARG;
    if (count > 0) {
        switch (dtype) {
        case ECCL_F32: bad = scan_f32(src, count, &mn, &mx); break;
        case ECCL_F16: bad = scan_f16(src, count, &mn, &mx); break;
        default: bad = scan_bf16(src, count, &mn, &mx); break;
        }
    }
    r = eccl_quant_meta_from_range(type, dtype, count, mn, mx, (uint32_t)bad, &m);
    if (r != ECCL_OK)
        return r;

    if (type == ECCL_QUANT_MINMAX_U8) {
        float s = minmax_scale(m.min, m.max);
        if (count > 0 && s == 0.0f)
            memset(codes, 0, count);
        else if (count > 0)
            DISPATCH(dtype, code_minmax, src, count, codes, m.min, m.max, s);
    } else {
        if (count > 0 && m.scale == 0.0f)
            memset(codes, 0, count);
        else if (count > 0)
            DISPATCH(dtype, code_affine, src, count, codes, m.scale, (float)m.zero_point + 0.5f);
    }
    *meta = m;
    return ECCL_OK;
}

/* ---- dequantise ---------------------------------------------------------------------- */

eccl_result eccl_quant_dequantize(const eccl_quant_meta *meta, const uint8_t *codes, size_t count,
                                  void *dst)
{
    if (eccl_quant_meta_check(meta) != ECCL_OK || count != meta->count ||
        (count > 0 && (codes == NULL || dst == NULL)))
        return ECCL_ERR_INVALID_ARG;
    if (count == 0)
        return ECCL_OK;
    if (meta->type == ECCL_QUANT_MINMAX_U8)
        DISPATCH(meta->dtype, value_minmax, codes, count, dst, meta->min, meta->max,
                 minmax_scale(meta->min, meta->max));
    else
        DISPATCH(meta->dtype, value_affine, codes, count, dst, (int32_t)meta->zero_point,
                 meta->scale);
    return ECCL_OK;
}

eccl_result eccl_quant_roundtrip(eccl_quant_type type, eccl_dtype dtype, void *data,
                                 size_t count, uint8_t *codes, eccl_quant_meta *meta)
{
    eccl_quant_meta m;
    eccl_result r;
    if (meta == NULL)
        return ECCL_ERR_INVALID_ARG;
    r = eccl_quant_quantize(type, dtype, data, count, codes, &m);
    if (r != ECCL_OK)
        return r;
    r = eccl_quant_dequantize(&m, codes, count, data);
    if (r != ECCL_OK) /* cannot happen: the quantiser only makes valid records */
        return r;
    *meta = m;
    return ECCL_OK;
}
