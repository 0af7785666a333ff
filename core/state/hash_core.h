/* The building blocks of the shared-state hashes (definitions: hash.h),
 * written once for core/state/hash.c (C, the streaming CPU version) and for
 * the CUDA plugin's hash kernels and their CPU twins (nvcc): the lane step,
 * the fold, the segment term and the final mix of ECCL_HASH_SIMPLE; the
 * slice-by-8 loop and the GF(2) combine of CRC-32C. Pure functions, no
 * state. */
#ifndef ECCL_CORE_STATE_HASH_CORE_H
#define ECCL_CORE_STATE_HASH_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "util/hd.h"

/* ---- little-endian loads ---------------------------------------------------
 * Assembled from bytes, so the result does not depend on the host's byte
 * order; gcc and clang turn the pattern into one load on little-endian
 * hosts. */
ECCL_HD uint64_t eccl_load_le64(const uint8_t *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 |
           (uint64_t)p[3] << 24 | (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 |
           (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

ECCL_HD uint32_t eccl_load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- ECCL_HASH_SIMPLE ------------------------------------------------------ */

#define ECCL_HS_M1 UINT64_C(0x9E3779B97F4A7C15)
#define ECCL_HS_M2 UINT64_C(0xC2B2AE3D27D4EB4F)
#define ECCL_HS_SEED UINT64_C(0xCBF29CE484222325)
#define ECCL_HS_KSEG UINT64_C(0x165667B19E3779F9)
#define ECCL_HS_KLEN UINT64_C(0x27D4EB2F165667C5)
#define ECCL_HS_LANES 16                 /* = ECCL_HASH_SIMPLE_LANES */
#define ECCL_HS_SEG_WORDS (65536 / 8)    /* = ECCL_HASH_SIMPLE_SEGMENT_BYTES / 8 */

ECCL_HD uint64_t eccl_hs_fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= UINT64_C(0xFF51AFD7ED558CCD);
    k ^= k >> 33;
    k *= UINT64_C(0xC4CEB9FE1A85EC53);
    k ^= k >> 33;
    return k;
}

ECCL_HD uint64_t eccl_hs_rotl64(uint64_t x, unsigned r)
{
    return (x << r) | (x >> (64 - r));
}

/* Lane l's state before its first word. */
ECCL_HD uint64_t eccl_hs_lane_seed(unsigned l)
{
    return ECCL_HS_SEED + (uint64_t)l * ECCL_HS_M1;
}

ECCL_HD uint64_t eccl_hs_lane_step(uint64_t h, uint64_t w)
{
    h = (h ^ (w * ECCL_HS_M2)) * ECCL_HS_M1;
    return h ^ (h >> 32);
}

/* The segment digest from the 16 lane states (hash.h, step 4). */
ECCL_HD uint64_t eccl_hs_fold_lanes(const uint64_t *lane)
{
    uint64_t x[ECCL_HS_LANES];
    for (unsigned l = 0; l < ECCL_HS_LANES; l++)
        x[l] = eccl_hs_fmix64(lane[l]);
    for (unsigned k = ECCL_HS_LANES / 2; k >= 1; k /= 2)
        for (unsigned i = 0; i < k; i++)
            x[i] = eccl_hs_fmix64(x[2 * i] ^ eccl_hs_rotl64(x[2 * i + 1], 31));
    return x[0];
}

/* Segment g's term of the sum (step 5): terms add modulo 2^64, so segments
 * can be hashed in any order and summed by any reduction tree. */
ECCL_HD uint64_t eccl_hs_segment_term(uint64_t digest, uint64_t g)
{
    return eccl_hs_fmix64(digest ^ (g * ECCL_HS_KSEG));
}

/* The hash from the sum of all segment terms and the length in bytes. */
ECCL_HD uint64_t eccl_hs_finish(uint64_t acc, uint64_t total_bytes)
{
    return eccl_hs_fmix64(acc ^ eccl_hs_fmix64(total_bytes ^ ECCL_HS_KLEN));
}

/* ---- CRC-32C -----------------------------------------------------------------
 * Reflected polynomial; bit 31 of a register is the coefficient of x^0. */
#define ECCL_CRC32C_POLY 0x82F63B78u

/* Slice-by-8 over p[0..n) on the raw register (no pre/post inversion); t is
 * crc32c_table.h's table (the host's or the device's copy). */
ECCL_HD uint32_t eccl_crc32c_raw(uint32_t crc, const uint8_t *b, size_t n, const uint32_t (*t)[256])
{
    while (n >= 8) {
        uint32_t one = eccl_load_le32(b) ^ crc;
        uint32_t two = eccl_load_le32(b + 4);
        crc = t[7][one & 0xff] ^ t[6][(one >> 8) & 0xff] ^ t[5][(one >> 16) & 0xff] ^
              t[4][one >> 24] ^ t[3][two & 0xff] ^ t[2][(two >> 8) & 0xff] ^
              t[1][(two >> 16) & 0xff] ^ t[0][two >> 24];
        b += 8;
        n -= 8;
    }
    while (n-- > 0)
        crc = (crc >> 8) ^ t[0][(crc ^ *b++) & 0xff];
    return crc;
}

/* a * b mod P in GF(2) (zlib's multmodp): bitwise, no table, so it needs
 * nothing but registers on a GPU. */
ECCL_HD uint32_t eccl_crc32c_multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = UINT32_C(1) << 31, p = 0;
    for (int i = 0; i < 32; i++) {
        p ^= (a & m) ? b : 0;
        m >>= 1;
        b = (b & 1) ? (b >> 1) ^ ECCL_CRC32C_POLY : b >> 1;
    }
    return p;
}

/* x^(8n) mod P: square-and-multiply over the bits of n, starting from x^8
 * (x is bit 30, 1 << 30). */
ECCL_HD uint32_t eccl_crc32c_x8n(uint64_t n)
{
    uint32_t p = UINT32_C(1) << 31; /* x^0 */
    uint32_t q = UINT32_C(1) << 30; /* x^1 */
    for (int i = 0; i < 3; i++)
        q = eccl_crc32c_multmodp(q, q); /* x^8 */
    while (n) {
        if (n & 1)
            p = eccl_crc32c_multmodp(q, p);
        q = eccl_crc32c_multmodp(q, q);
        n >>= 1;
    }
    return p;
}

/* The CRC-32C of A || B from crc_a = CRC(A), crc_b = CRC(B) and |B| (the
 * standard combine, zlib's crc32_combine; valid with the pre/post inversion
 * because the inversions of A's tail and of B's start cancel in GF(2)).
 * shift = eccl_crc32c_x8n(len_b), passed in so that a loop over equal
 * chunks computes it once. (0, 0) is the identity on either side. */
ECCL_HD uint32_t eccl_crc32c_combine_shift(uint32_t crc_a, uint32_t crc_b, uint32_t shift)
{
    return eccl_crc32c_multmodp(shift, crc_a) ^ crc_b;
}

#endif /* ECCL_CORE_STATE_HASH_CORE_H */
