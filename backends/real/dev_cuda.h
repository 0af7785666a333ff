/* The real env's device tensors: the CUDA plugin (backends/cuda/plugin.h),
 * loaded on first need, behind the dev ops that core/comm/stage.c uses.
 *
 * Settings: ECCL_CUDA_PLUGIN names the plugin file (default: the
 * libeccl_cuda.so.0 beside libeccl, then the loader's search path);
 * ECCL_CUDA_MIRRORS the pinned mirrors kept for reuse per env (default 4,
 * 0 frees each at once). */
#ifndef ECCL_BACKENDS_REAL_DEV_CUDA_H
#define ECCL_BACKENDS_REAL_DEV_CUDA_H

#include "env.h"

typedef struct eccl_real_cuda eccl_real_cuda;

/* A per-env state that opens nothing until a pointer needs it. NULL when out
 * of memory (the env then treats every buffer as host memory). */
eccl_real_cuda *eccl_real_cuda_new(eccl_env *env);
/* Frees cached mirrors and closes the plugin context. NULL is fine. */
void eccl_real_cuda_free(eccl_real_cuda *c);

/* The eccl_dev_ops fields of the same names (core/env.h), for one env. */
eccl_result eccl_real_cuda_mem_kind(eccl_real_cuda *c, const void *p, size_t bytes, eccl_mem_kind *kind,
                                    int *device);
eccl_result eccl_real_cuda_host_alloc(eccl_real_cuda *c, size_t bytes, void **out);
void eccl_real_cuda_host_free(eccl_real_cuda *c, void *p, size_t bytes);
eccl_result eccl_real_cuda_to_host(eccl_real_cuda *c, int device, void *stream, void *host, const void *dev,
                                   size_t bytes);
eccl_result eccl_real_cuda_to_device(eccl_real_cuda *c, int device, void *stream, void *dev,
                                     const void *host, size_t bytes);

#endif /* ECCL_BACKENDS_REAL_DEV_CUDA_H */
