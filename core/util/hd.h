/* ECCL_HD: marks a per-element helper that must compile both as C (core/,
 * gcc or clang) and as CUDA (backends/cuda, nvcc: host and device), so that
 * the CPU code and the GPU kernels share one source and cannot drift apart
 * (the bit-parity rule, DESIGN.md).
 *
 * In C it is a plain `static inline`: the helpers inline into core/'s
 * vectorised loops exactly as the macros they replaced did. Under nvcc it
 * also makes the function __host__ __device__ (the kernels on the GPU and
 * their CPU twins under mocks/cudart run the very same lines) and forces
 * inlining, which device code needs for loops like reduce.c's to stay
 * register-only. */
#ifndef ECCL_CORE_UTIL_HD_H
#define ECCL_CORE_UTIL_HD_H

#ifdef __CUDACC__
#define ECCL_HD static __host__ __device__ __forceinline__
#else
#define ECCL_HD static inline
#endif

#endif /* ECCL_CORE_UTIL_HD_H */
