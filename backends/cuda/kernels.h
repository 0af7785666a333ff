/* Device kernels of the CUDA plugin: the reductions, AVG's divide, the
 * shared-state hashes and the quantiser, each bit-identical to its CPU
 * counterpart in core/ (one known-answer table, tests/kat_kernels.h, checks
 * both). Each kernel is written once as a __host__ __device__ body and
 * wrapped as a __global__ kernel and as its CPU twin (twin.h), so
 * mocks/cudart runs the same source on a CPU box.
 *
 * Launchers queue work on `stream` and return at once unless they say
 * "synchronous". Results: ECCL_OK; ECCL_ERR_INVALID_ARG (a dtype, op, type
 * or size the kernel does not take; nothing is queued); ECCL_ERR_NO_MEMORY
 * (scratch allocation failed); ECCL_ERR_DEVICE (the launch or a copy failed,
 * or the context holds a sticky error). Pointers are device, managed or
 * mapped pinned host memory. */
#ifndef ECCL_BACKENDS_CUDA_KERNELS_H
#define ECCL_BACKENDS_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "eccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* quant.h is a C header without its own extern "C": included here, inside
 * the block, so a C++/CUDA includer links the library's C symbols
 * (eccl_quant_meta_check, ...). */
#include "quant/quant.h"

/* dst[i] = dst[i] (op) src[i], i < count: eccl_reduce's semantics (AVG
 * reduces as SUM). dst and src must not overlap. */
eccl_result eccl_cuda_reduce(void *dst, const void *src, size_t count, eccl_dtype dtype, eccl_op op,
                             cudaStream_t stream);

/* x[i] = x[i] / divisor: eccl_reduce_scale_div's semantics. */
eccl_result eccl_cuda_scale_div(void *x, size_t count, eccl_dtype dtype, uint32_t divisor,
                                cudaStream_t stream);

/* Synchronous: *out = eccl_hash(type, p, bytes) computed on the device
 * (scratch is allocated and freed on `stream`). */
eccl_result eccl_cuda_hash(eccl_hash_type type, const void *p, size_t bytes, uint64_t *out,
                           cudaStream_t stream);

/* Synchronous: eccl_quant_quantize on the device; codes is device memory of
 * count bytes, *meta comes back to the host. ECCL_ERR_INVALID_ARG exactly
 * where the CPU quantiser refuses (NaN, infinity, unrepresentable range),
 * codes and meta then untouched. */
eccl_result eccl_cuda_quantize(eccl_quant_type type, eccl_dtype dtype, const void *src, size_t count,
                               uint8_t *codes, eccl_quant_meta *meta, cudaStream_t stream);

/* dst[i] = D(codes[i]): eccl_quant_dequantize's semantics (meta checked on
 * the host first; ECCL_ERR_INVALID_ARG leaves dst untouched). */
eccl_result eccl_cuda_dequantize(const eccl_quant_meta *meta, const uint8_t *codes, size_t count,
                                 void *dst, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* ECCL_BACKENDS_CUDA_KERNELS_H */
