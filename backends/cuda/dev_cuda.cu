/* libeccl_cuda.so's table (plugin.h) over the CUDA runtime.
 *
 * One context per communicator env: a non-blocking stream of its own per
 * device (created on first use, so a process that touches one GPU opens
 * nothing on the others) and one event per device for stream ordering. A
 * mutex serialises the context: the API threads of one communicator may
 * stage buffers concurrently. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kernels.h"
#include "plugin.h"

#define MAX_DEVICES 64

typedef struct cuda_ctx {
    pthread_mutex_t mu;
    int ndev;
    cudaStream_t stream[MAX_DEVICES];
    cudaEvent_t event[MAX_DEVICES];
    char last[160];
} cuda_ctx;

/* Records why a call failed and maps the CUDA error to a result. Clears the
 * calling thread's last-error slot so that the next check sees only new
 * errors (a sticky error comes back from every later call anyway). */
static eccl_result fail(cuda_ctx *c, cudaError_t e, const char *what)
{
    (void)cudaGetLastError();
    snprintf(c->last, sizeof c->last, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
    return e == cudaErrorMemoryAllocation ? ECCL_ERR_NO_MEMORY : ECCL_ERR_DEVICE;
}

#define CU(c, call)                                          \
    do {                                                     \
        cudaError_t e_ = (call);                             \
        if (e_ != cudaSuccess) return fail((c), e_, #call);  \
    } while (0)

/* Mutex held: makes `device` current on this thread and returns its stream. */
static eccl_result stream_of(cuda_ctx *c, int device, cudaStream_t *out)
{
    if (device < 0 || device >= c->ndev) {
        snprintf(c->last, sizeof c->last, "device %d: the process sees %d", device, c->ndev);
        return ECCL_ERR_INVALID_ARG;
    }
    CU(c, cudaSetDevice(device));
    if (!c->stream[device]) {
        CU(c, cudaStreamCreateWithFlags(&c->stream[device], cudaStreamNonBlocking));
        cudaError_t e = cudaEventCreateWithFlags(&c->event[device], cudaEventDisableTiming);
        if (e != cudaSuccess) {
            cudaStreamDestroy(c->stream[device]);
            c->stream[device] = NULL;
            return fail(c, e, "cudaEventCreateWithFlags");
        }
    }
    *out = c->stream[device];
    return ECCL_OK;
}

static eccl_result p_open(void **out, char *why, size_t why_len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        (void)cudaGetLastError();
        snprintf(why, why_len, "CUDA runtime: %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
        return ECCL_ERR_UNSUPPORTED;
    }
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    if (!c) return ECCL_ERR_NO_MEMORY;
    pthread_mutex_init(&c->mu, NULL);
    c->ndev = n < MAX_DEVICES ? n : MAX_DEVICES;
    snprintf(c->last, sizeof c->last, "no error");
    *out = c;
    return ECCL_OK;
}

static void p_close(void *ctx)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (!c) return;
    for (int d = 0; d < c->ndev; d++) {
        if (!c->stream[d]) continue;
        cudaSetDevice(d);
        cudaStreamSynchronize(c->stream[d]);
        cudaEventDestroy(c->event[d]);
        cudaStreamDestroy(c->stream[d]);
    }
    (void)cudaGetLastError();
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static eccl_result p_mem_kind(void *ctx, const void *p, eccl_mem_kind *kind, int *device)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
        /* Invalid value: a pointer CUDA does not know. Anything else is
         * the context's own failure (a sticky error), not the caller's. */
        pthread_mutex_lock(&c->mu);
        eccl_result rc = fail(c, e, "cudaPointerGetAttributes");
        pthread_mutex_unlock(&c->mu);
        return e == cudaErrorInvalidValue ? ECCL_ERR_INVALID_ARG : rc;
    }
    *device = a.device;
    switch (a.type) {
    case cudaMemoryTypeDevice: *kind = ECCL_MEM_DEVICE; break;
    case cudaMemoryTypeManaged: *kind = ECCL_MEM_MANAGED; break;
    case cudaMemoryTypeHost: *kind = ECCL_MEM_HOST_REGISTERED; break;
    default: *kind = ECCL_MEM_HOST; *device = -1; break;
    }
    return ECCL_OK;
}

static eccl_result p_host_alloc(void *ctx, size_t bytes, void **out)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    pthread_mutex_lock(&c->mu);
    cudaError_t e = cudaHostAlloc(out, bytes, cudaHostAllocPortable | cudaHostAllocMapped);
    eccl_result rc = e == cudaSuccess ? ECCL_OK : fail(c, e, "cudaHostAlloc");
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void p_host_free(void *ctx, void *p)
{
    (void)ctx;
    if (p) cudaFreeHost(p);
}

static eccl_result p_dev_alloc(void *ctx, int device, size_t bytes, void **out)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    cudaStream_t s;
    pthread_mutex_lock(&c->mu);
    eccl_result rc = stream_of(c, device, &s);
    if (rc == ECCL_OK) {
        cudaError_t e = cudaMalloc(out, bytes);
        if (e != cudaSuccess) rc = fail(c, e, "cudaMalloc");
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void p_dev_free(void *ctx, void *p)
{
    (void)ctx;
    if (p) cudaFree(p);
}

/* The user's stream -> ours (before), ours -> the user's (after). */
static eccl_result order(cuda_ctx *c, int device, void *user_stream, int library_waits)
{
    cudaStream_t s;
    eccl_result rc = stream_of(c, device, &s);
    if (rc != ECCL_OK) return rc;
    cudaStream_t u = (cudaStream_t)user_stream;
    if (library_waits) {
        CU(c, cudaEventRecord(c->event[device], u));
        CU(c, cudaStreamWaitEvent(s, c->event[device], 0));
    } else {
        CU(c, cudaEventRecord(c->event[device], s));
        CU(c, cudaStreamWaitEvent(u, c->event[device], 0));
    }
    return ECCL_OK;
}

static eccl_result p_order(void *ctx, int device, void *user_stream, int library_waits)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    pthread_mutex_lock(&c->mu);
    eccl_result rc = order(c, device, user_stream, library_waits);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static eccl_result sync_locked(cuda_ctx *c, int device)
{
    cudaStream_t s;
    eccl_result rc = stream_of(c, device, &s);
    if (rc != ECCL_OK) return rc;
    CU(c, cudaStreamSynchronize(s));
    return ECCL_OK;
}

static eccl_result p_sync(void *ctx, int device)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    pthread_mutex_lock(&c->mu);
    eccl_result rc = sync_locked(c, device);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static eccl_result copy_locked(cuda_ctx *c, int device, void *dst, const void *src, size_t bytes)
{
    cudaStream_t s;
    eccl_result rc = stream_of(c, device, &s);
    if (rc != ECCL_OK) return rc;
    CU(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    return ECCL_OK;
}

static eccl_result p_copy(void *ctx, int device, void *dst, const void *src, size_t bytes)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    pthread_mutex_lock(&c->mu);
    eccl_result rc = copy_locked(c, device, dst, src, bytes);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Kernel launchers report their own failures; keep the CUDA text too. */
static eccl_result kernel_result(cuda_ctx *c, eccl_result rc, const char *what)
{
    if (rc == ECCL_ERR_DEVICE || rc == ECCL_ERR_NO_MEMORY) {
        cudaError_t e = cudaPeekAtLastError();
        snprintf(c->last, sizeof c->last, "%s: %s", what, cudaGetErrorName(e));
    }
    return rc;
}

static eccl_result p_reduce(void *ctx, int device, void *dst, const void *src, size_t count,
                            eccl_dtype dtype, eccl_op op)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    cudaStream_t s;
    pthread_mutex_lock(&c->mu);
    eccl_result rc = stream_of(c, device, &s);
    if (rc == ECCL_OK) rc = kernel_result(c, eccl_cuda_reduce(dst, src, count, dtype, op, s), "reduce");
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static eccl_result p_scale_div(void *ctx, int device, void *x, size_t count, eccl_dtype dtype,
                               uint32_t divisor)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    cudaStream_t s;
    pthread_mutex_lock(&c->mu);
    eccl_result rc = stream_of(c, device, &s);
    if (rc == ECCL_OK)
        rc = kernel_result(c, eccl_cuda_scale_div(x, count, dtype, divisor, s), "scale_div");
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static eccl_result p_hash(void *ctx, int device, eccl_hash_type type, const void *p, size_t bytes,
                          uint64_t *out)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    cudaStream_t s;
    pthread_mutex_lock(&c->mu);
    eccl_result rc = stream_of(c, device, &s);
    if (rc == ECCL_OK) rc = kernel_result(c, eccl_cuda_hash(type, p, bytes, out, s), "hash");
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static const char *p_last_error(void *ctx)
{
    return ((cuda_ctx *)ctx)->last;
}

/* ---- IPC ---------------------------------------------------------------------- */

/* cuMemGetAddressRange_v2, through the runtime (no link against libcuda). */
typedef int (*addr_range_fn)(unsigned long long *base, size_t *size, unsigned long long p);

static addr_range_fn addr_range(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    static addr_range_fn fn;
    pthread_once(&once, [] {
        void *p = NULL;
        cudaDriverEntryPointQueryResult st;
        if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000, cudaEnableDefault, &st) ==
                cudaSuccess &&
            st == cudaDriverEntryPointSuccess)
            fn = (addr_range_fn)p;
        (void)cudaGetLastError();
    });
    return fn;
}

static eccl_result p_ipc_export(void *ctx, int device, const void *p, void *handle, size_t *offset)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    addr_range_fn range = addr_range();
    unsigned long long base = 0;
    size_t size = 0;
    cudaStream_t s;
    pthread_mutex_lock(&c->mu);
    eccl_result rc = stream_of(c, device, &s);
    if (rc == ECCL_OK && (!range || range(&base, &size, (unsigned long long)(uintptr_t)p) != 0)) {
        snprintf(c->last, sizeof c->last, "cuMemGetAddressRange: %p is not device memory", p);
        rc = ECCL_ERR_UNSUPPORTED;
    }
    if (rc == ECCL_OK) {
        cudaIpcMemHandle_t h;
        cudaError_t e = cudaIpcGetMemHandle(&h, (void *)(uintptr_t)base);
        if (e != cudaSuccess) {
            fail(c, e, "cudaIpcGetMemHandle");
            rc = ECCL_ERR_UNSUPPORTED;
        } else {
            memcpy(handle, &h, sizeof h);
            *offset = (size_t)((uintptr_t)p - (uintptr_t)base);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static eccl_result p_ipc_open(void *ctx, int device, const void *handle, void **base)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    cudaStream_t s;
    pthread_mutex_lock(&c->mu);
    eccl_result rc = stream_of(c, device, &s);
    if (rc == ECCL_OK) {
        cudaIpcMemHandle_t h;
        memcpy(&h, handle, sizeof h);
        cudaError_t e = cudaIpcOpenMemHandle(base, h, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) rc = fail(c, e, "cudaIpcOpenMemHandle");
        /* The handle's fault (its memory or its process is gone), not this
         * context's: */
        if (e == cudaErrorInvalidResourceHandle || e == cudaErrorMapBufferObjectFailed || e == cudaErrorInvalidValue)
            rc = ECCL_ERR_INVALID_ARG;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void p_ipc_close(void *ctx, int device, void *base)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    pthread_mutex_lock(&c->mu);
    if (cudaSetDevice(device) == cudaSuccess) cudaIpcCloseMemHandle(base);
    (void)cudaGetLastError();
    pthread_mutex_unlock(&c->mu);
}

extern "C" __attribute__((visibility("default"))) const eccl_cuda_plugin eccl_cuda_plugin_v1 = {
    sizeof(eccl_cuda_plugin),
    p_open,
    p_close,
    p_mem_kind,
    p_host_alloc,
    p_host_free,
    p_dev_alloc,
    p_dev_free,
    p_order,
    p_sync,
    p_copy,
    p_reduce,
    p_scale_div,
    p_hash,
    p_last_error,
    p_ipc_export,
    p_ipc_open,
    p_ipc_close,
};
