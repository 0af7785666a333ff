/* The CUDA plugin's kernels (backends/cuda/kernels.h) against the CPU code
 * and the shared known-answer table (tests/kat_kernels.h): every launcher,
 * every dtype x op, the hashes at awkward lengths and alignments, the
 * quantiser including its refusals. Inputs go to device memory with
 * cudaMemcpy and results come back the same way, so under mocks/cudart
 * (device memory not host-addressable) a kernel that touched a host pointer
 * would fault.
 *
 * Runs on whatever libcudart.so.13 the loader finds: a GPU's (real kernels),
 * mocks/cudart (the CPU twins), or none usable -- then it prints
 * "SKIP: no CUDA device (...)" and exits 77. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kat_kernels.h"
#include "kernels.h"

static cudaStream_t stream;

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    assert_int_equal(cudaMalloc(&p, bytes ? bytes : 1), cudaSuccess);
    return p;
}

static void h2d(void *d, const void *h, size_t n)
{
    if (n)
        assert_int_equal(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice), cudaSuccess);
}

static void d2h(void *h, const void *d, size_t n)
{
    if (n)
        assert_int_equal(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost), cudaSuccess);
}

/* Equal bytes, or -- where reduce.h leaves NaN bits unspecified -- equal
 * after canonicalising NaNs. */
static void assert_same_result(eccl_dtype dt, eccl_op op, void *got, void *want, size_t n,
                               const char *what)
{
    size_t bytes = n * eccl_dtype_size(dt);
    if (kat_nan_free_compare(dt, op)) {
        kat_canon_nans(dt, got, n);
        kat_canon_nans(dt, want, n);
    }
    if (memcmp(got, want, bytes) != 0) {
        size_t i = 0;
        while (i < bytes && ((uint8_t *)got)[i] == ((uint8_t *)want)[i])
            i++;
        fail_msg("%s %s %s n=%zu: first difference at byte %zu", what, eccl_dtype_name(dt),
                 eccl_op_name(op), n, i);
    }
}

/* reduce (+ scale_div for AVG) against the table and eccl_reduce, at an
 * aligned and a one-element-offset device address (the vector and the
 * scalar paths). */
static void test_reduce_kat(void **state)
{
    (void)state;
    const size_t maxb = 8 * 4099 + 16;
    uint8_t *dst = malloc(maxb), *src = malloc(maxb), *want = malloc(maxb), *got = malloc(maxb);
    uint8_t *d_dst = dev_alloc(maxb), *d_src = dev_alloc(maxb);
    assert_true(dst && src && want && got);
    for (int dt = 0; dt < ECCL_DTYPE_COUNT; dt++)
        for (int op = 0; op < ECCL_OP_COUNT; op++)
            for (unsigned c = 0; c < KAT_REDUCE_CASES; c++)
                for (size_t shift = 0; shift < 2; shift++) {
                    size_t n = kat_reduce_cases[c].n, esz = eccl_dtype_size((eccl_dtype)dt);
                    size_t off = shift * esz;
                    kat_reduce_cpu((eccl_dtype)dt, (eccl_op)op, c, want, src);
                    kat_fill((eccl_dtype)dt, dst, n, kat_seed_dst((eccl_dtype)dt, c), kat_reduce_cases[c].specials);
                    kat_fill((eccl_dtype)dt, src, n, kat_seed_src((eccl_dtype)dt, c), kat_reduce_cases[c].specials);
                    h2d(d_dst + off, dst, n * esz);
                    h2d(d_src + off, src, n * esz);
                    assert_int_equal(eccl_cuda_reduce(d_dst + off, d_src + off, n, (eccl_dtype)dt,
                                                      (eccl_op)op, stream),
                                     ECCL_OK);
                    if (op == ECCL_AVG)
                        assert_int_equal(eccl_cuda_scale_div(d_dst + off, n, (eccl_dtype)dt, KAT_AVG_DIVISOR,
                                                             stream),
                                         ECCL_OK);
                    assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
                    d2h(got, d_dst + off, n * esz);
                    uint64_t h = kat_result_hash((eccl_dtype)dt, (eccl_op)op, got, n);
                    if (h != kat_reduce_expect[dt][op][c])
                        fail_msg("device KAT %s %s case %u shift %zu: %016llx, table %016llx",
                                 eccl_dtype_name((eccl_dtype)dt), eccl_op_name((eccl_op)op), c, shift,
                                 (unsigned long long)h, (unsigned long long)kat_reduce_expect[dt][op][c]);
                    assert_same_result((eccl_dtype)dt, (eccl_op)op, got, want, n, "reduce");
                }
    cudaFree(d_dst);
    cudaFree(d_src);
    free(dst);
    free(src);
    free(want);
    free(got);
}

/* Larger buffers than the table's, every dtype x op, against eccl_reduce:
 * more than one block, grid-stride loops, the vector path's tail. */
static void test_reduce_large(void **state)
{
    (void)state;
    const size_t n = 300007;
    uint8_t *dst = malloc(8 * n), *src = malloc(8 * n), *got = malloc(8 * n);
    uint8_t *d_dst = dev_alloc(8 * n), *d_src = dev_alloc(8 * n);
    assert_true(dst && src && got);
    for (int dt = 0; dt < ECCL_DTYPE_COUNT; dt++)
        for (int op = 0; op < ECCL_OP_COUNT; op++) {
            size_t esz = eccl_dtype_size((eccl_dtype)dt);
            kat_fill((eccl_dtype)dt, dst, n, 42 + dt, op & 1);
            kat_fill((eccl_dtype)dt, src, n, 4242 + dt, op & 1);
            h2d(d_dst, dst, n * esz);
            h2d(d_src, src, n * esz);
            eccl_reduce_into(dst, src, n, (eccl_dtype)dt, (eccl_op)op);
            assert_int_equal(eccl_cuda_reduce(d_dst, d_src, n, (eccl_dtype)dt, (eccl_op)op, stream), ECCL_OK);
            if (op == ECCL_AVG) {
                eccl_reduce_scale_div(dst, n, (eccl_dtype)dt, 7);
                assert_int_equal(eccl_cuda_scale_div(d_dst, n, (eccl_dtype)dt, 7, stream), ECCL_OK);
            }
            assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
            d2h(got, d_dst, n * esz);
            assert_same_result((eccl_dtype)dt, (eccl_op)op, got, dst, n, "reduce large");
        }
    cudaFree(d_dst);
    cudaFree(d_src);
    free(dst);
    free(src);
    free(got);
}

/* Both hashes at every table length, at offsets 0, 3 and 8 (unaligned words
 * take the byte path), against the table and the CPU. */
static void test_hash_kat(void **state)
{
    (void)state;
    size_t maxn = kat_hash_lengths[KAT_HASH_CASES - 1];
    uint8_t *buf = malloc(maxn);
    uint8_t *d = dev_alloc(maxn + 16);
    assert_non_null(buf);
    kat_bytes(buf, maxn, KAT_HASH_SEED);
    for (size_t off = 0; off <= 8; off += off == 0 ? 3 : 5) {
        h2d(d + off, buf, maxn);
        for (unsigned c = 0; c < KAT_HASH_CASES; c++) {
            size_t n = kat_hash_lengths[c];
            uint64_t s = 0, k = 0;
            assert_int_equal(eccl_cuda_hash(ECCL_HASH_SIMPLE, d + off, n, &s, stream), ECCL_OK);
            assert_int_equal(eccl_cuda_hash(ECCL_HASH_CRC32C, d + off, n, &k, stream), ECCL_OK);
            if (s != kat_hash_simple_expect[c] || k != kat_hash_crc32c_expect[c])
                fail_msg("hash KAT n=%zu off=%zu: simple %016llx (table %016llx) crc %08llx (table %08llx)",
                         n, off, (unsigned long long)s, (unsigned long long)kat_hash_simple_expect[c],
                         (unsigned long long)k, (unsigned long long)kat_hash_crc32c_expect[c]);
            assert_int_equal(s, eccl_hash(ECCL_HASH_SIMPLE, buf, n));
            assert_int_equal(k, eccl_hash(ECCL_HASH_CRC32C, buf, n));
        }
    }
    /* Lengths around segment, chunk and word boundaries. */
    static const size_t more[] = {2, 15, 16, 17, 127, 128, 129, 4095, 4096, 4097, 131071, 131072,
                                  131073, 65536 * 5 + 1, 1048576 - 1};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
        uint64_t s = 0, k = 0;
        assert_int_equal(eccl_cuda_hash(ECCL_HASH_SIMPLE, d + 8, more[i], &s, stream), ECCL_OK);
        assert_int_equal(eccl_cuda_hash(ECCL_HASH_CRC32C, d + 8, more[i], &k, stream), ECCL_OK);
        assert_int_equal(s, eccl_hash(ECCL_HASH_SIMPLE, buf, more[i]));
        assert_int_equal(k, eccl_hash(ECCL_HASH_CRC32C, buf, more[i]));
    }
    cudaFree(d);
    free(buf);
}

static void test_quant_kat(void **state)
{
    (void)state;
    const size_t maxn = 70001;
    uint8_t *src = malloc(4 * maxn), *codes = malloc(maxn), *vals = malloc(4 * maxn);
    uint8_t *d_src = dev_alloc(4 * maxn), *d_codes = dev_alloc(maxn), *d_vals = dev_alloc(4 * maxn);
    assert_true(src && codes && vals);
    for (int di = 0; di < 3; di++)
        for (int t = 0; t < 2; t++)
            for (unsigned c = 0; c < KAT_QUANT_CASES; c++) {
                eccl_dtype dt = kat_quant_dtypes[di];
                eccl_quant_type type = t ? ECCL_QUANT_AFFINE_U8 : ECCL_QUANT_MINMAX_U8;
                size_t n = kat_quant_cases[c].n, esz = eccl_dtype_size(dt);
                eccl_quant_meta m, m0;
                memset(&m0, 0x5a, sizeof m0);
                m = m0;
                kat_quant_input(dt, c, src);
                h2d(d_src, src, n * esz);
                assert_int_equal(cudaMemset(d_codes, 0xab, n), cudaSuccess);
                int rc = (int)eccl_cuda_quantize(type, dt, d_src, n, d_codes, &m, stream);
                if (rc == ECCL_OK)
                    rc = (int)eccl_cuda_dequantize(&m, d_codes, n, d_vals, stream);
                assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
                d2h(codes, d_codes, n);
                d2h(vals, d_vals, n * esz);
                kat_quant_expect e = kat_quant_hashes(rc, &m, codes, vals, n, dt);
                const kat_quant_expect *x = &kat_quant_expect_table[di][t][c];
                if (e.rc != x->rc || e.meta != x->meta || e.codes != x->codes || e.values != x->values)
                    fail_msg("quant KAT %s %s case %u: rc %d/%d meta %d codes %d values %d",
                             eccl_dtype_name(dt), t ? "affine" : "minmax", c, e.rc, x->rc,
                             e.meta == x->meta, e.codes == x->codes, e.values == x->values);
                if (rc != ECCL_OK) { /* refused: codes and meta untouched */
                    assert_memory_equal(&m, &m0, sizeof m);
                    for (size_t i = 0; i < n; i++)
                        assert_int_equal(codes[i], 0xab);
                }
            }
    cudaFree(d_src);
    cudaFree(d_codes);
    cudaFree(d_vals);
    free(src);
    free(codes);
    free(vals);
}

static void test_invalid_args(void **state)
{
    (void)state;
    uint8_t *d = dev_alloc(64);
    uint64_t h;
    eccl_quant_meta m;
    assert_int_equal(eccl_cuda_reduce(d, d + 32, 4, ECCL_DTYPE_COUNT, ECCL_SUM, stream), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_cuda_reduce(d, d + 32, 4, ECCL_F32, ECCL_OP_COUNT, stream), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_cuda_scale_div(d, 4, ECCL_DTYPE_COUNT, 3, stream), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_cuda_hash((eccl_hash_type)99, d, 8, &h, stream), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_cuda_hash(ECCL_HASH_SIMPLE, d, 8, NULL, stream), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_cuda_quantize(ECCL_QUANT_MINMAX_U8, ECCL_I32, d, 4, d + 32, &m, stream),
                     ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_cuda_quantize(ECCL_QUANT_NONE, ECCL_F32, d, 4, d + 32, &m, stream),
                     ECCL_ERR_INVALID_ARG);
    memset(&m, 0, sizeof m);
    assert_int_equal(eccl_cuda_dequantize(&m, d, 4, d + 32, stream), ECCL_ERR_INVALID_ARG);
    /* count 0 and divisor 0/1 queue nothing and succeed */
    assert_int_equal(eccl_cuda_reduce(d, d + 32, 0, ECCL_F32, ECCL_SUM, stream), ECCL_OK);
    assert_int_equal(eccl_cuda_scale_div(d, 4, ECCL_F32, 1, stream), ECCL_OK);
    assert_int_equal(eccl_cuda_hash(ECCL_HASH_SIMPLE, NULL, 0, &h, stream), ECCL_OK);
    assert_int_equal(h, eccl_hash(ECCL_HASH_SIMPLE, NULL, 0));
    assert_int_equal(eccl_cuda_quantize(ECCL_QUANT_AFFINE_U8, ECCL_F32, NULL, 0, NULL, &m, stream), ECCL_OK);
    assert_int_equal(m.count, 0);
    cudaFree(d);
}

int main(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("SKIP: no CUDA device (%s, error %d)\n",
               e != cudaSuccess ? "cudaGetDeviceCount failed" : "cudaGetDeviceCount found 0", (int)e);
        return 77;
    }
    if (cudaStreamCreate(&stream) != cudaSuccess) {
        printf("SKIP: no CUDA device (cudaStreamCreate failed)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reduce_kat),
        cmocka_unit_test(test_reduce_large),
        cmocka_unit_test(test_hash_kat),
        cmocka_unit_test(test_quant_kat),
        cmocka_unit_test(test_invalid_args),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cudaStreamDestroy(stream);
    return rc;
}
