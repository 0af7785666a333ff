/* eccl-kernel-bench: throughput of the CUDA plugin's kernels
 * (backends/cuda/kernels.h) next to cudaMemcpy device-to-device and, for
 * the hash, Thrust's thrust::reduce over the same bytes (the claim to check:
 * ECCL_HASH_SIMPLE runs at least as fast as a plain Thrust reduction).
 *
 *   eccl-kernel-bench [-b 1M] [-e 1G] [-f 2] [-n 20] [-w 5]
 *
 * Sizes are bytes of input per call, from -b to -e, multiplied by -f. Each
 * point is the median of -n timed calls (cudaEvent around each call, after
 * -w warm-up calls). Output is nccl-tests style: one line per size and
 * kernel, time in microseconds and algbw = input bytes / time in GB/s (a
 * reduce also reads src and writes dst: membw = 3x algbw is its memory traffic). The
 * hash and the quantiser are synchronous (they bring a result back to the
 * host), so their time includes that round trip, as a caller sees it. */
#include <cuda_runtime.h>

#include <thrust/device_ptr.h>
#include <thrust/execution_policy.h>
#include <thrust/functional.h>
#include <thrust/reduce.h>

#include <algorithm>
#include <exception>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "kernels.h"

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    case 'M': case 'm': v *= 1024.0 * 1024; break;
    case 'K': case 'k': v *= 1024.0; break;
    default: break;
    }
    return (size_t)v;
}

#define CK(x)                                                                                     \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

struct ctx {
    uint8_t *a, *b, *codes;
    size_t bytes;
    cudaStream_t s;
    eccl_quant_meta meta;
    uint64_t sink;
};

typedef bool (*op_fn)(ctx &c);

static bool op_memcpy(ctx &c) { return cudaMemcpyAsync(c.a, c.b, c.bytes, cudaMemcpyDeviceToDevice, c.s) == cudaSuccess; }
static bool op_sum_f32(ctx &c) { return eccl_cuda_reduce(c.a, c.b, c.bytes / 4, ECCL_F32, ECCL_SUM, c.s) == ECCL_OK; }
static bool op_sum_bf16(ctx &c) { return eccl_cuda_reduce(c.a, c.b, c.bytes / 2, ECCL_BF16, ECCL_SUM, c.s) == ECCL_OK; }
static bool op_avg_f32(ctx &c) { return eccl_cuda_scale_div(c.a, c.bytes / 4, ECCL_F32, 3, c.s) == ECCL_OK; }
static bool op_simple(ctx &c) { return eccl_cuda_hash(ECCL_HASH_SIMPLE, c.b, c.bytes, &c.sink, c.s) == ECCL_OK; }
static bool op_crc(ctx &c) { return eccl_cuda_hash(ECCL_HASH_CRC32C, c.b, c.bytes, &c.sink, c.s) == ECCL_OK; }
/* Thrust reports a failed launch by throwing (under mocks/cudart its kernels
 * have no CPU twins, so they cannot run there: the row says "error"). */
static bool op_thrust(ctx &c)
{
    try {
        thrust::device_ptr<const uint64_t> p((const uint64_t *)c.b);
        c.sink = thrust::reduce(thrust::cuda::par.on(c.s), p, p + c.bytes / 8, (uint64_t)0,
                                thrust::plus<uint64_t>());
    } catch (const std::exception &) {
        (void)cudaGetLastError();
        return false;
    }
    return true;
}
static bool op_quant(ctx &c)
{
    return eccl_cuda_quantize(ECCL_QUANT_MINMAX_U8, ECCL_F32, c.b, c.bytes / 4, c.codes, &c.meta, c.s) == ECCL_OK;
}
static bool op_dequant(ctx &c)
{
    return eccl_cuda_dequantize(&c.meta, c.codes, c.bytes / 4, c.a, c.s) == ECCL_OK;
}

#define USAGE                                                   \
    "usage: %s [-b 1M] [-e 1G] [-f 2] [-n 20] [-w 5]\n"         \
    "  GB/s of every eccl kernel next to cudaMemcpy device to device\n"

int main(int argc, char **argv)
{
    size_t minb = 1 << 20, maxb = (size_t)1 << 30;
    double factor = 2;
    int iters = 20, warm = 5;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf(USAGE, argv[0]);
            return 0;
        }
    if (argc % 2 == 0) {
        fprintf(stderr, USAGE, argv[0]);
        return 2;
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-b")) minb = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-e")) maxb = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-f")) factor = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-w")) warm = atoi(argv[i + 1]);
        else { fprintf(stderr, USAGE, argv[0]); return 2; }
    }
    if (factor <= 1 || iters < 1 || minb < 16 || maxb < minb) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "no CUDA device\n");
        return 1;
    }
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    int cc[2] = {0, 0};
    CK(cudaDeviceGetAttribute(&cc[0], cudaDevAttrComputeCapabilityMajor, 0));
    CK(cudaDeviceGetAttribute(&cc[1], cudaDevAttrComputeCapabilityMinor, 0));
    ctx c;
    memset(&c, 0, sizeof c);
    CK(cudaStreamCreate(&c.s));
    CK(cudaMalloc(&c.a, maxb));
    CK(cudaMalloc(&c.b, maxb));
    CK(cudaMalloc(&c.codes, maxb / 4 + 1));
    /* 0x3c bytes: f32 0.0115, bf16 0.0115 -- finite, normal values. */
    CK(cudaMemset(c.a, 0x3c, maxb));
    CK(cudaMemset(c.b, 0x3c, maxb));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    struct { const char *name; op_fn fn; } ops[] = {
        {"memcpy_d2d", op_memcpy},     {"reduce_f32_sum", op_sum_f32}, {"reduce_bf16_sum", op_sum_bf16},
        {"avg_div_f32", op_avg_f32},   {"hash_simple", op_simple},     {"thrust_reduce_u64", op_thrust},
        {"hash_crc32c", op_crc},       {"quantize_f32", op_quant},     {"dequantize_f32", op_dequant},
    };
    printf("# eccl-kernel-bench on device 0 (sm_%d%d, %d SMs), median of %d after %d warm-up\n", cc[0], cc[1],
           sms, iters, warm);
    printf("#\n# %12s  %-18s  %10s  %9s  %9s\n", "size(B)", "kernel", "time(us)", "algbw", "membw");
    for (double sz = (double)minb; sz <= (double)maxb * 1.0000001; sz *= factor) {
        c.bytes = (size_t)sz & ~(size_t)15;
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
            std::vector<float> t;
            bool ok = true;
            if (ops[k].fn == op_dequant && !op_quant(c))
                ok = false;
            for (int i = 0; ok && i < warm; i++)
                ok = ops[k].fn(c);
            for (int i = 0; ok && i < iters; i++) {
                float ms;
                CK(cudaEventRecord(e0, c.s));
                ok = ops[k].fn(c);
                CK(cudaEventRecord(e1, c.s));
                CK(cudaEventSynchronize(e1));
                CK(cudaEventElapsedTime(&ms, e0, e1));
                t.push_back(ms);
            }
            if (!ok) {
                printf("  %12zu  %-18s  %10s\n", c.bytes, ops[k].name, "error");
                continue;
            }
            std::sort(t.begin(), t.end());
            double us = t[t.size() / 2] * 1000.0, algbw = (double)c.bytes / us / 1e3;
            double traffic = ops[k].fn == op_sum_f32 || ops[k].fn == op_sum_bf16 ? 3.0
                           : ops[k].fn == op_memcpy ? 2.0 : ops[k].fn == op_avg_f32 ? 2.0 : 1.0;
            printf("  %12zu  %-18s  %10.1f  %9.2f  %9.2f\n", c.bytes, ops[k].name, us, algbw,
                   algbw * traffic);
        }
        fflush(stdout);
    }
    cudaFree(c.a);
    cudaFree(c.b);
    cudaFree(c.codes);
    return 0;
}
