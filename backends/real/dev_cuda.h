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

/* The device-resident ring's ops (the d_* fields of eccl_dev_ops); only
 * after mem_kind reported a device, so the plugin is open. */
eccl_result eccl_real_cuda_d_alloc(eccl_real_cuda *c, int device, size_t bytes, void **out);
void eccl_real_cuda_d_free(eccl_real_cuda *c, void *p);
eccl_result eccl_real_cuda_d_copy(eccl_real_cuda *c, int device, void *dst, const void *src, size_t bytes);
eccl_result eccl_real_cuda_d_reduce(eccl_real_cuda *c, int device, void *dst, const void *src, size_t count,
                                    eccl_dtype dtype, eccl_op op);
eccl_result eccl_real_cuda_d_scale_div(eccl_real_cuda *c, int device, void *x, size_t count, eccl_dtype dtype,
                                       uint32_t divisor);
eccl_result eccl_real_cuda_d_sync(eccl_real_cuda *c, int device);
eccl_result eccl_real_cuda_d_order(eccl_real_cuda *c, int device, void *stream, int library_waits);

/* CUDA IPC between host-mates (net_shm). Whether the plugin is open and can
 * do it at all; never opens it (a process whose buffers are all host memory
 * never loads CUDA for a peer's sake). */
int eccl_real_cuda_has_ipc(eccl_real_cuda *c);
/* The device of the last device buffer this env saw (0 before any): where a
 * host-mate's memory is mapped, so a rank never opens a context on a GPU it
 * does not use. */
int eccl_real_cuda_home_device(eccl_real_cuda *c);
/* The plugin's ipc_export/ipc_open/ipc_close (plugin.h);
 * ECCL_ERR_UNSUPPORTED without IPC. */
eccl_result eccl_real_cuda_ipc_export(eccl_real_cuda *c, int device, const void *p, void *handle, size_t *offset);
eccl_result eccl_real_cuda_ipc_open(eccl_real_cuda *c, int device, const void *handle, void **base);
void eccl_real_cuda_ipc_close(eccl_real_cuda *c, int device, void *base);
/* dst = src (an imported pointer) on `device`, waited for. */
eccl_result eccl_real_cuda_ipc_read(eccl_real_cuda *c, int device, void *dst, const void *src, size_t bytes);

#endif /* ECCL_BACKENDS_REAL_DEV_CUDA_H */
