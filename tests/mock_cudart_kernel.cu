// Kernels for tests/test_mock_cudart.c, built by nvcc -cudart shared like
// backends/cuda: an axpy kernel with its CPU twin (twin.h), written once as
// a __host__ __device__ body; a kernel with no twin; launchers that use
// nvcc's <<<>>> so the mock sees exactly what compiled plugin code does.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <new>

#include "twin.h"

static __host__ __device__ void axpy_body(float *y, const float *x, float a, unsigned long i)
{
    y[i] = a * x[i] + y[i];
}

extern "C" __global__ void mock_axpy(float *y, const float *x, float a, unsigned long n)
{
    unsigned long i = blockIdx.x * (unsigned long)blockDim.x + threadIdx.x;
    if (i < n) axpy_body(y, x, a, i);
}

namespace {
struct axpy_task {
    eccl_twin_task base;
    float *y;
    const float *x;
    float a;
    unsigned long n;
};

// Maps [p, p + n) through the mock; NULL unless all of it is one
// contiguous, valid range (a kernel reading past the end is an illegal
// address, not a silent read).
template <typename T> T *map_range(eccl_twin_ptr_fn ptr, void *ctx, T *p, unsigned long n)
{
    T *b = static_cast<T *>(ptr(ctx, p));
    if (!b || n == 0) return b;
    T *e = static_cast<T *>(ptr(ctx, p + n - 1));
    return e == b + n - 1 ? b : nullptr;
}

int axpy_run(eccl_twin_task *t, eccl_twin_dim grid, eccl_twin_dim block, size_t, eccl_twin_ptr_fn ptr,
             void *ctx)
{
    axpy_task *k = reinterpret_cast<axpy_task *>(t);
    unsigned long n = k->n, threads = (unsigned long)grid.x * block.x;
    unsigned long used = n < threads ? n : threads;
    int rc = 0;
    if (used) {
        float *y = map_range(ptr, ctx, k->y, used);
        const float *x = map_range(ptr, ctx, k->x, used);
        if (!y || !x) rc = -1;
        else
            for (unsigned long i = 0; i < used; i++) axpy_body(y, x, k->a, i);
    }
    std::free(k);
    return rc;
}

void axpy_discard(eccl_twin_task *t)
{
    std::free(t);
}
} // namespace

extern "C" __attribute__((visibility("default"))) eccl_twin_task *mock_axpy_twin(void **args)
{
    axpy_task *k = static_cast<axpy_task *>(std::malloc(sizeof *k));
    if (!k) return nullptr;
    k->base.run = axpy_run;
    k->base.discard = axpy_discard;
    k->y = *static_cast<float **>(args[0]);
    k->x = *static_cast<const float **>(args[1]);
    k->a = *static_cast<float *>(args[2]);
    k->n = *static_cast<unsigned long *>(args[3]);
    return &k->base;
}

// No twin: the mock must refuse to launch it.
extern "C" __global__ void mock_notwin(int *p)
{
    *p = 1;
}

extern "C" int mock_launch_axpy(float *y, const float *x, float a, unsigned long n, unsigned grid,
                                unsigned block, cudaStream_t st)
{
    mock_axpy<<<grid, block, 0, st>>>(y, x, a, n);
    return (int)cudaGetLastError();
}

extern "C" int mock_launch_notwin(int *p, cudaStream_t st)
{
    mock_notwin<<<1, 1, 0, st>>>(p);
    return (int)cudaGetLastError();
}

extern "C" const void *mock_axpy_fn(void)
{
    return reinterpret_cast<const void *>(mock_axpy);
}

extern "C" const void *mock_notwin_fn(void)
{
    return reinterpret_cast<const void *>(mock_notwin);
}
