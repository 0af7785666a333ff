/* The CUDA device plugin's ABI: what libeccl asks of libeccl_cuda.so.
 *
 * libeccl never links the CUDA runtime: backends/real/dev_cuda_load.c
 * dlopen()s libeccl_cuda.so.0 (beside libeccl, then the loader's search
 * path) the first time a buffer is not host memory, and reads one symbol,
 * ECCL_CUDA_PLUGIN_SYMBOL, a table of these functions. The plugin links
 * libcudart.so.13 -- the real one on a GPU machine, mocks/cudart on a CPU box
 * (LD_LIBRARY_PATH) -- so a box without a CUDA runtime fails the dlopen and
 * device pointers get ECCL_ERR_UNSUPPORTED; host buffers never load it.
 *
 * Plain C, versioned like the env tables: `size` first, fields only ever
 * appended. Every function is thread-safe unless it says otherwise; a
 * context serialises its own work on its own stream.
 *
 * Errors: ECCL_ERR_NO_MEMORY (an allocation failed), ECCL_ERR_DEVICE (a
 * launch or copy failed, or the device context is broken -- a sticky error:
 * every later call on that context fails too), ECCL_ERR_INVALID_ARG (a
 * pointer CUDA does not know, a bad dtype/op). Never blocks forever: a copy
 * or kernel the device never finishes is a hung GPU, which no library can
 * time out safely; everything else returns. */
#ifndef ECCL_BACKENDS_CUDA_PLUGIN_H
#define ECCL_BACKENDS_CUDA_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "eccl.h"
#include "util/mem_kind.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ECCL_CUDA_PLUGIN_SYMBOL "eccl_cuda_plugin_v1"
#define ECCL_CUDA_PLUGIN_SONAME "libeccl_cuda.so.0"
/* cudaIpcMemHandle_t's size (CUDA_IPC_HANDLE_SIZE). */
#define ECCL_CUDA_IPC_HANDLE_BYTES 64

typedef struct eccl_cuda_plugin {
    size_t size; /* sizeof(eccl_cuda_plugin) as the plugin was built */

    /* A context: a stream of the library's own (non-blocking) per device,
     * created on first use, and two events. why[why_len] gets one line on
     * failure (no device, driver too old, ...): ECCL_ERR_UNSUPPORTED. */
    eccl_result (*open)(void **ctx, char *why, size_t why_len);
    void (*close)(void *ctx);

    /* What p points at (cudaPointerGetAttributes): host (unknown to CUDA),
     * device (with its ordinal), managed, or host-registered/pinned. */
    eccl_result (*mem_kind)(void *ctx, const void *p, eccl_mem_kind *kind, int *device);

    /* Pinned host memory (cudaHostAlloc, portable + mapped): what the
     * network reads and writes when a tensor is on the device. */
    eccl_result (*host_alloc)(void *ctx, size_t bytes, void **out);
    void (*host_free)(void *ctx, void *p);
    /* Device memory on `device` (backups, scratch). */
    eccl_result (*dev_alloc)(void *ctx, int device, size_t bytes, void **out);
    void (*dev_free)(void *ctx, void *p);

    /* Stream ordering (NCCL's semantics). `user_stream` is a cudaStream_t
     * (NULL: the legacy default stream). library_waits: the context's
     * stream waits for everything queued on user_stream so far (the
     * collective reads its input only after the caller's work); else
     * user_stream waits for everything queued on the context's stream so
     * far (work the caller queues later sees the result). */
    eccl_result (*order)(void *ctx, int device, void *user_stream, int library_waits);
    /* Blocks until the context's stream on `device` is idle; reports a
     * failed copy or kernel (ECCL_ERR_DEVICE). */
    eccl_result (*sync)(void *ctx, int device);

    /* Queued on the context's stream; `sync` waits for them. dst/src may be
     * device or pinned host memory (UVA: the direction is inferred). */
    eccl_result (*copy)(void *ctx, int device, void *dst, const void *src, size_t bytes);
    /* dst[i] = dst[i] (op) src[i], bit-identical to core/coll/reduce.c. src
     * may be pinned host memory (read over the bus). */
    eccl_result (*reduce)(void *ctx, int device, void *dst, const void *src, size_t count,
                          eccl_dtype dtype, eccl_op op);
    /* x[i] = x[i] / divisor: AVG's last step, as eccl_reduce_scale_div. */
    eccl_result (*scale_div)(void *ctx, int device, void *x, size_t count, eccl_dtype dtype,
                             uint32_t divisor);
    /* The shared-state hash of p[0..bytes) on the device, bit-identical to
     * eccl_hash(type, ...) on the host. Synchronous: returns the value. */
    eccl_result (*hash)(void *ctx, int device, eccl_hash_type type, const void *p, size_t bytes,
                        uint64_t *out);
    /* The CUDA error behind the context's last failed call ("cudaErrorX:
     * text"), for the caller's log; never NULL. */
    const char *(*last_error)(void *ctx);

    /* ---- CUDA IPC between processes of one host (added later: check
     * `size`). Synchronous, and never touch the context's stream. ---- */
    /* A handle for the cudaMalloc allocation holding p (found with the
     * driver's cuMemGetAddressRange, since cudaIpcGetMemHandle wants its
     * base) and p's offset in it. ECCL_ERR_UNSUPPORTED: memory legacy IPC
     * cannot export (not cudaMalloc's: a pool, a VMM mapping, an import). */
    eccl_result (*ipc_export)(void *ctx, int device, const void *p, void *handle, size_t *offset);
    /* Maps a host-mate's handle into `device`; *base is the allocation's
     * start here. Opening a handle again returns the same base and counts.
     * ECCL_ERR_INVALID_ARG: the handle cannot be mapped (its memory or its
     * process is gone); ECCL_ERR_DEVICE: this context is broken. */
    eccl_result (*ipc_open)(void *ctx, int device, const void *handle, void **base);
    /* Undoes one ipc_open. */
    void (*ipc_close)(void *ctx, int device, void *base);
} eccl_cuda_plugin;

#ifdef __cplusplus
}
#endif

#endif /* ECCL_BACKENDS_CUDA_PLUGIN_H */
