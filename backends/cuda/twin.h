/* The CPU-twin ABI: how mocks/cudart runs a kernel on the CPU.
 *
 * A kernel in backends/cuda is written once, as a __host__ __device__ body
 * (ECCL_HD) over an index range, wrapped twice from the same source:
 *  - an `extern "C" __global__` kernel K that runs the body on the GPU;
 *  - an exported C function "K_twin" in the same shared object, which
 *    captures K's arguments and later runs the same body over the whole grid
 *    on one CPU thread.
 * The real CUDA runtime never looks at twins; they cost a few KiB.
 *
 * mocks/cudart's cudaLaunchKernel (and the <<<>>> path nvcc generates) finds
 * K's name from __cudaRegisterFunction, finds "K_twin" with dladdr + dlsym in
 * the object that registered K, calls it AT LAUNCH TIME (kernel arguments are
 * captured by value when the launch is made, as on a GPU), queues the task on
 * the stream and runs it on the stream's worker thread in stream order. A
 * kernel without a twin fails to launch (cudaErrorInvalidDeviceFunction):
 * the mock never pretends.
 *
 * Device memory under the mock is not host-addressable (a host dereference
 * faults, as on a GPU). A twin therefore maps every pointer argument through
 * `ptr` before touching memory: it returns the address where the mock keeps
 * those bytes (host, managed and pinned pointers map to themselves).
 *
 * C ABI, no CUDA types: the mock is C and does not need the toolkit to
 * build against this header. */
#ifndef ECCL_BACKENDS_CUDA_TWIN_H
#define ECCL_BACKENDS_CUDA_TWIN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eccl_twin_dim {
    unsigned x, y, z;
} eccl_twin_dim;

/* Maps a device address to the mock's backing bytes; NULL if `dev` is not
 * inside any allocation (the twin then stops: the mock reports an illegal
 * address on the stream, a sticky error, as a GPU would). */
typedef void *(*eccl_twin_ptr_fn)(void *ctx, const void *dev);

typedef struct eccl_twin_task eccl_twin_task;
struct eccl_twin_task {
    /* Runs the kernel body for every block and thread of grid x block, then
     * frees the task. Returns 0, or -1 if a pointer did not map (illegal
     * address). Called once, on the stream's worker thread. */
    int (*run)(eccl_twin_task *t, eccl_twin_dim grid, eccl_twin_dim block, size_t shared_mem,
               eccl_twin_ptr_fn ptr, void *ptr_ctx);
    /* Frees a task that will never run (a launch refused after binding). */
    void (*discard)(eccl_twin_task *t);
};

/* The signature of "K_twin": copies K's arguments (args[i] points at the
 * i-th argument, as cudaLaunchKernel receives them) into a new task; NULL
 * when out of memory. */
typedef eccl_twin_task *(*eccl_twin_bind_fn)(void **args);

#define ECCL_TWIN_SUFFIX "_twin"

#ifdef __cplusplus
}
#endif

#endif /* ECCL_BACKENDS_CUDA_TWIN_H */
