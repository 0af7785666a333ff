/* Conformance tests for mocks/cudart: the rules a real CUDA runtime
 * enforces, checked on a box without a GPU. Linked against the mock itself
 * (test_is_the_mock proves which libcudart answered).
 *
 * ECCL_MOCK_CUDA_DELAY_US is set to 10 ms before the first CUDA call, so
 * every queued op really is late: ordering tests fail if the ordering they
 * check is not implemented (each has a control that shows the race).
 * A sticky error breaks a context for good, so those tests, and the ones
 * that need other knobs, run in a fresh copy of this program
 * (fork + exec /proc/self/exe --child NAME). */
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <fiu-control.h>
#include <fiu.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

/* tests/mock_cudart_kernel.cu */
int mock_launch_axpy(float *y, const float *x, float a, unsigned long n, unsigned grid, unsigned block,
                     cudaStream_t st);
int mock_launch_notwin(int *p, cudaStream_t st);
const void *mock_axpy_fn(void);
const void *mock_notwin_fn(void);

#define DELAY_US "10000"
#define OK(x) assert_int_equal((x), cudaSuccess)

static int under_valgrind(void)
{
    const char *p = getenv("LD_PRELOAD");
    return p && strstr(p, "vgpreload");
}

/* This program, to re-run: argv[0] when it is a path (under valgrind
 * /proc/self/exe is valgrind's tool), else /proc/self/exe. */
static const char *self = "/proc/self/exe";

/* Runs `--child name` in a fresh process with one extra environment entry;
 * returns its exit status (128 + signal if killed). */
static int run_child(const char *name, const char *env)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (env) putenv((char *)env);
        execl(self, "test_mock_cudart", "--child", name, (char *)NULL);
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_is_the_mock(void **state)
{
    Dl_info di;
    assert_true(dladdr((void *)cudaMalloc, &di));
    assert_non_null(strstr(di.dli_fname, "mocks/cudart/libcudart.so.13"));
    int v;
    OK(cudaRuntimeGetVersion(&v));
    assert_int_equal(v, CUDART_VERSION);
    OK(cudaGetDeviceCount(&v));
    assert_int_equal(v, 1);
    assert_int_equal(cudaSetDevice(1), cudaErrorInvalidDevice);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidDevice);
    OK(cudaGetLastError());
    assert_string_equal(cudaGetErrorName(cudaErrorIllegalAddress), "cudaErrorIllegalAddress");
    OK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, 0));
    assert_int_equal(v, 9);
}

/* A host dereference of device memory faults, as on a GPU; cudaMemcpy
 * reaches the very same byte. */
static void test_device_memory_not_host_addressable(void **state)
{
    char *d;
    OK(cudaMalloc((void **)&d, 1000));
    assert_int_equal((uintptr_t)d % 256, 0);
    char v = 0x5a, back = 0;
    OK(cudaMemcpy(d + 999, &v, 1, cudaMemcpyHostToDevice));
    OK(cudaMemcpy(&back, d + 999, 1, cudaMemcpyDeviceToHost));
    assert_int_equal(back, 0x5a);
    if (!under_valgrind()) { /* memcheck reports the read instead of faulting */
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            signal(SIGSEGV, SIG_DFL); /* not cmocka's handler: die as a program would */
            volatile char c = *(volatile char *)(d + 999);
            (void)c;
            _exit(0);
        }
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFSIGNALED(st));
        assert_int_equal(WTERMSIG(st), SIGSEGV);
    }
    OK(cudaFree(d));
}

static void test_memcpy_directions_and_bounds(void **state)
{
    enum { N = 1000 };
    unsigned char *a, *b, *h, *m, pg[N], out[N];
    OK(cudaMalloc((void **)&a, N));
    OK(cudaMalloc((void **)&b, N));
    OK(cudaMallocHost((void **)&h, N));
    OK(cudaMallocManaged((void **)&m, N, cudaMemAttachGlobal));
    /* Fresh device memory is not zero (nor is a GPU's). */
    OK(cudaMemcpy(out, a, N, cudaMemcpyDeviceToHost));
    int zeros = 0;
    for (int i = 0; i < N; i++) zeros += out[i] == 0;
    assert_int_not_equal(zeros, N);

    for (int i = 0; i < N; i++) pg[i] = (unsigned char)i;
    OK(cudaMemcpy(a, pg, N, cudaMemcpyHostToDevice));
    OK(cudaMemcpy(b, a, N, cudaMemcpyDeviceToDevice));
    OK(cudaMemcpy(h, b, N, cudaMemcpyDeviceToHost));
    assert_memory_equal(h, pg, N);
    OK(cudaMemcpy(m, h, N, cudaMemcpyDefault));
    memset(out, 0, N);
    OK(cudaMemcpy(out, m, N, cudaMemcpyHostToHost));
    assert_memory_equal(out, pg, N);
    memset(out, 0, N);
    OK(cudaMemcpy(out, b, N, cudaMemcpyDefault)); /* direction inferred */
    assert_memory_equal(out, pg, N);
    OK(cudaMemcpy(h, pg, 0, cudaMemcpyHostToHost)); /* nothing to do */

    /* Past an allocation's end: refused, nothing written. */
    assert_int_equal(cudaMemcpy(a + 1, pg, N, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    assert_int_equal(cudaMemcpy(out, b + 500, 501, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    assert_int_equal(cudaMemcpy(h + 1, a, N, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    assert_int_equal(cudaMemset(a, 0, N + 1), cudaErrorInvalidValue);
    /* Explicit kinds that contradict the pointers. */
    assert_int_equal(cudaMemcpy(a, b, N, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    assert_int_equal(cudaMemcpy(a, out, N, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    assert_int_equal(cudaMemcpy(out, pg, N, cudaMemcpyDeviceToDevice), cudaErrorInvalidValue);
    assert_int_equal(cudaMemcpy(out, a, N, cudaMemcpyHostToHost), cudaErrorInvalidValue);
    assert_int_equal(cudaMemset(pg, 0, N), cudaErrorInvalidValue); /* pageable */
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    OK(cudaGetLastError());
    OK(cudaMemcpy(out, a, N, cudaMemcpyDeviceToHost));
    assert_memory_equal(out, pg, N);

    OK(cudaMemset(a + 10, 0xee, 20));
    OK(cudaMemcpy(out, a, N, cudaMemcpyDeviceToHost)); /* legacy stream: after the memset */
    assert_int_equal(out[9], 9);
    assert_int_equal(out[10], 0xee);
    assert_int_equal(out[29], 0xee);
    assert_int_equal(out[30], 30);

    /* Frees: unknown, interior, wrong kind, double. */
    assert_int_equal(cudaFree(pg), cudaErrorInvalidValue);
    assert_int_equal(cudaFree(a + 1), cudaErrorInvalidValue);
    assert_int_equal(cudaFree(h), cudaErrorInvalidValue);
    assert_int_equal(cudaFreeHost(a), cudaErrorInvalidValue);
    OK(cudaFree(a));
    assert_int_equal(cudaFree(a), cudaErrorInvalidValue);
    OK(cudaFree(b));
    OK(cudaFree(m));
    OK(cudaFreeHost(h));
    assert_int_equal(cudaFreeHost(h), cudaErrorInvalidValue);
    OK(cudaFree(NULL));
    (void)cudaGetLastError();
}

static void test_pointer_attributes(void **state)
{
    void *d, *h, *m;
    static char reg[8192], plain[64];
    OK(cudaMalloc(&d, 100));
    OK(cudaHostAlloc(&h, 100, cudaHostAllocMapped | cudaHostAllocPortable));
    OK(cudaMallocManaged(&m, 100, cudaMemAttachGlobal));
    OK(cudaHostRegister(reg, sizeof reg, cudaHostRegisterDefault));
    struct cudaPointerAttributes at;
    OK(cudaPointerGetAttributes(&at, (char *)d + 50));
    assert_int_equal(at.type, cudaMemoryTypeDevice);
    assert_int_equal(at.device, 0);
    assert_ptr_equal(at.devicePointer, (char *)d + 50);
    assert_null(at.hostPointer);
    OK(cudaPointerGetAttributes(&at, h));
    assert_int_equal(at.type, cudaMemoryTypeHost);
    assert_ptr_equal(at.hostPointer, h);
    OK(cudaPointerGetAttributes(&at, m));
    assert_int_equal(at.type, cudaMemoryTypeManaged);
    OK(cudaPointerGetAttributes(&at, reg + 100));
    assert_int_equal(at.type, cudaMemoryTypeHost);
    OK(cudaPointerGetAttributes(&at, plain));
    assert_int_equal(at.type, cudaMemoryTypeUnregistered);
    OK(cudaPointerGetAttributes(&at, (char *)d + 100)); /* one past the end: nobody's */
    assert_int_equal(at.type, cudaMemoryTypeUnregistered);

    void *dp;
    OK(cudaHostGetDevicePointer(&dp, h, 0));
    assert_ptr_equal(dp, h);
    OK(cudaHostGetDevicePointer(&dp, reg + 8, 0));
    assert_ptr_equal(dp, reg + 8);
    assert_int_equal(cudaHostGetDevicePointer(&dp, plain, 0), cudaErrorInvalidValue);
    assert_int_equal(cudaHostGetDevicePointer(&dp, d, 0), cudaErrorInvalidValue);
    assert_int_equal(cudaHostRegister(reg + 4096, 10, 0), cudaErrorHostMemoryAlreadyRegistered);
    assert_int_equal(cudaHostUnregister(plain), cudaErrorHostMemoryNotRegistered);
    OK(cudaHostUnregister(reg));
    OK(cudaPointerGetAttributes(&at, reg));
    assert_int_equal(at.type, cudaMemoryTypeUnregistered);
    OK(cudaFree(d));
    OK(cudaFreeHost(h));
    OK(cudaFree(m));
    (void)cudaGetLastError();
}

/* Async really is async: a caller that does not synchronise reads stale
 * bytes; in-order execution within a stream. */
static void test_stream_order_and_staleness(void **state)
{
    cudaStream_t s;
    OK(cudaStreamCreate(&s));
    unsigned char *d, *h;
    OK(cudaMalloc((void **)&d, 4096));
    OK(cudaMallocHost((void **)&h, 4096));
    memset(h, 1, 4096);
    OK(cudaMemsetAsync(d, 2, 4096, s));
    OK(cudaMemsetAsync(d, 3, 4096, s));
    OK(cudaMemcpyAsync(h, d, 4096, cudaMemcpyDeviceToHost, s));
    assert_int_equal(cudaStreamQuery(s), cudaErrorNotReady);
    assert_int_equal(h[0], 1); /* forgot to synchronise: stale */
    OK(cudaGetLastError());    /* NotReady is no error */
    OK(cudaStreamSynchronize(s));
    OK(cudaStreamQuery(s));
    for (int i = 0; i < 4096; i++) assert_int_equal(h[i], 3);

    /* A pageable source is staged: reusing it right after the call is fine. */
    unsigned char pg[64];
    memset(pg, 9, sizeof pg);
    OK(cudaMemcpyAsync(d, pg, sizeof pg, cudaMemcpyHostToDevice, s));
    memset(pg, 0, sizeof pg);
    /* Into pageable memory the call returns once done. */
    OK(cudaMemcpyAsync(pg, d, sizeof pg, cudaMemcpyDeviceToHost, s));
    assert_int_equal(pg[0], 9);
    assert_int_equal(pg[63], 9);

    /* cudaFreeAsync: stream-ordered, a second one is refused. */
    void *t;
    OK(cudaMallocAsync(&t, 100, s));
    OK(cudaFreeAsync(t, s));
    assert_int_equal(cudaFreeAsync(t, s), cudaErrorInvalidValue);
    OK(cudaStreamSynchronize(s));
    assert_int_equal(cudaFree(t), cudaErrorInvalidValue);
    (void)cudaGetLastError();

    OK(cudaStreamDestroy(s));
    assert_int_equal(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
    OK(cudaFree(d));
    OK(cudaFreeHost(h));
}

/* Stream a: 0, 0, 7 into d (the 7 lands ~30 ms in); stream b copies d out
 * right away. With `wait`, b waits for an event recorded after the 7. */
static unsigned char race_events(int wait)
{
    cudaStream_t a, b;
    cudaEvent_t ev;
    OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    unsigned char *d, *h;
    OK(cudaMalloc((void **)&d, 64));
    OK(cudaMallocHost((void **)&h, 64));
    OK(cudaMemset(d, 0, 64));
    OK(cudaDeviceSynchronize());
    OK(cudaMemsetAsync(d, 0, 64, a));
    OK(cudaMemsetAsync(d, 0, 64, a));
    OK(cudaMemsetAsync(d, 7, 64, a));
    OK(cudaEventRecord(ev, a));
    if (wait) {
        assert_int_equal(cudaEventQuery(ev), cudaErrorNotReady);
        OK(cudaStreamWaitEvent(b, ev, 0));
    }
    OK(cudaMemcpyAsync(h, d, 64, cudaMemcpyDeviceToHost, b));
    OK(cudaStreamSynchronize(b));
    unsigned char r = h[0];
    OK(cudaEventSynchronize(ev));
    OK(cudaEventQuery(ev));
    OK(cudaDeviceSynchronize());
    OK(cudaEventDestroy(ev));
    OK(cudaStreamDestroy(a));
    OK(cudaStreamDestroy(b));
    OK(cudaFree(d));
    OK(cudaFreeHost(h));
    return r;
}

static void test_events_and_stream_wait(void **state)
{
    assert_int_equal(race_events(0), 0); /* control: without the wait b runs ahead */
    assert_int_equal(race_events(1), 7); /* with it, b sees a's last write */

    cudaEvent_t e0, e1, never, notime;
    cudaStream_t s;
    OK(cudaStreamCreate(&s));
    OK(cudaEventCreate(&e0));
    OK(cudaEventCreate(&e1));
    OK(cudaEventCreate(&never));
    OK(cudaEventCreateWithFlags(&notime, cudaEventDisableTiming));
    OK(cudaEventQuery(never));               /* never recorded: complete */
    OK(cudaStreamWaitEvent(s, never, 0));    /* and nothing to wait for */
    OK(cudaEventSynchronize(never));
    float ms;
    assert_int_equal(cudaEventElapsedTime(&ms, e0, never), cudaErrorInvalidResourceHandle);
    OK(cudaEventRecord(e0, s));
    void *d;
    OK(cudaMalloc(&d, 16));
    OK(cudaMemsetAsync(d, 1, 16, s));
    OK(cudaEventRecord(e1, s));
    OK(cudaEventRecord(notime, s));
    assert_int_equal(cudaEventElapsedTime(&ms, e0, e1), cudaErrorNotReady);
    OK(cudaEventSynchronize(e1));
    OK(cudaEventElapsedTime(&ms, e0, e1));
    assert_true(ms >= 9.0f); /* two queued ops of 10 ms each lie between */
    assert_int_equal(cudaEventElapsedTime(&ms, e0, notime), cudaErrorInvalidResourceHandle);
    OK(cudaEventDestroy(e0));
    assert_int_equal(cudaEventQuery(e0), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
    OK(cudaEventDestroy(e1));
    OK(cudaEventDestroy(never));
    OK(cudaEventDestroy(notime));
    OK(cudaStreamDestroy(s));
    OK(cudaFree(d));
}

/* 0, 0, v into d on stream `w`, then a copy out on stream `r`. */
static unsigned char race_streams(cudaStream_t w, cudaStream_t r, unsigned char v)
{
    unsigned char *d, *h;
    OK(cudaMalloc((void **)&d, 64));
    OK(cudaMallocHost((void **)&h, 64));
    OK(cudaMemset(d, 0, 64));
    OK(cudaDeviceSynchronize());
    OK(cudaMemsetAsync(d, 0, 64, w));
    OK(cudaMemsetAsync(d, 0, 64, w));
    OK(cudaMemsetAsync(d, v, 64, w));
    OK(cudaMemcpyAsync(h, d, 64, cudaMemcpyDeviceToHost, r));
    OK(cudaStreamSynchronize(r));
    unsigned char got = h[0];
    OK(cudaDeviceSynchronize());
    OK(cudaFree(d));
    OK(cudaFreeHost(h));
    return got;
}

static void test_legacy_default_stream(void **state)
{
    cudaStream_t blk, nb;
    OK(cudaStreamCreate(&blk));
    OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    /* Legacy work waits for earlier work on blocking streams ... */
    assert_int_equal(race_streams(blk, 0, 7), 7);
    assert_int_equal(race_streams(blk, cudaStreamLegacy, 8), 8);
    /* ... blocking streams' later work waits for the legacy stream ... */
    assert_int_equal(race_streams(0, blk, 9), 9);
    /* ... non-blocking streams take part in neither (the control). */
    assert_int_equal(race_streams(nb, 0, 5), 0);
    assert_int_equal(race_streams(0, nb, 6), 0);
    assert_int_equal(race_streams(nb, blk, 4), 0);
    /* cudaMemcpy behaves as the legacy stream and waits. */
    unsigned char *d, out = 0;
    OK(cudaMalloc((void **)&d, 1));
    OK(cudaMemsetAsync(d, 0, 1, blk));
    OK(cudaMemsetAsync(d, 3, 1, blk));
    OK(cudaMemcpy(&out, d, 1, cudaMemcpyDeviceToHost));
    assert_int_equal(out, 3);
    OK(cudaFree(d));
    OK(cudaStreamDestroy(blk));
    OK(cudaStreamDestroy(nb));
}

static void test_kernel_launch(void **state)
{
    enum { N = 1000 };
    float hx[N], hy[N], out[N];
    float *x, *y;
    OK(cudaMalloc((void **)&x, sizeof hx));
    OK(cudaMalloc((void **)&y, sizeof hy));
    for (int i = 0; i < N; i++) {
        hx[i] = (float)i;
        hy[i] = 1.0f;
    }
    OK(cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice));
    OK(cudaMemcpy(y, hy, sizeof hy, cudaMemcpyHostToDevice));
    cudaStream_t s;
    OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    /* <<<>>> from nvcc-compiled code: Push/Pop/GetKernel/__cudaLaunchKernel. */
    assert_int_equal(mock_launch_axpy(y, x, 2.0f, N, 4, 256, s), cudaSuccess);
    OK(cudaStreamSynchronize(s));
    OK(cudaMemcpy(out, y, sizeof out, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) assert_true(out[i] == 2.0f * (float)i + 1.0f);

    /* cudaLaunchKernel; arguments are captured at launch time. */
    float a = 3.0f;
    unsigned long n = N;
    void *args[] = {&y, &x, &a, &n};
    OK(cudaLaunchKernel(mock_axpy_fn(), (dim3){4, 1, 1}, (dim3){256, 1, 1}, args, 0, s));
    a = 100.0f;
    OK(cudaStreamSynchronize(s));
    OK(cudaMemcpy(out, y, sizeof out, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) assert_true(out[i] == 5.0f * (float)i + 1.0f);

    /* Mapped pinned memory works from a kernel (UVA). */
    float *px, *py;
    OK(cudaHostAlloc((void **)&px, sizeof hx, cudaHostAllocMapped));
    OK(cudaHostAlloc((void **)&py, sizeof hy, cudaHostAllocMapped));
    memcpy(px, hx, sizeof hx);
    memcpy(py, hy, sizeof hy);
    assert_int_equal(mock_launch_axpy(py, px, 1.0f, N, 1, 1024, 0), cudaSuccess);
    OK(cudaDeviceSynchronize());
    assert_true(py[N - 1] == (float)(N - 1) + 1.0f);

    /* No twin, no launch; bad configurations. */
    assert_int_equal(mock_launch_notwin((int *)x, s), cudaErrorInvalidDeviceFunction);
    void *nargs[] = {&x};
    assert_int_equal(cudaLaunchKernel(mock_notwin_fn(), (dim3){1, 1, 1}, (dim3){1, 1, 1}, nargs, 0, s),
                     cudaErrorInvalidDeviceFunction);
    assert_int_equal(cudaLaunchKernel((const void *)test_kernel_launch, (dim3){1, 1, 1}, (dim3){1, 1, 1},
                                      nargs, 0, s),
                     cudaErrorInvalidDeviceFunction);
    assert_int_equal(mock_launch_axpy(y, x, 1.0f, N, 0, 256, s), cudaErrorInvalidConfiguration);
    assert_int_equal(mock_launch_axpy(y, x, 1.0f, N, 1, 2048, s), cudaErrorInvalidConfiguration);
    assert_int_equal(cudaLaunchKernel(mock_axpy_fn(), (dim3){1, 1, 1}, (dim3){0, 1, 1}, args, 0, s),
                     cudaErrorInvalidConfiguration);
    (void)cudaGetLastError();
    OK(cudaStreamSynchronize(s)); /* none of these broke anything */
    OK(cudaStreamDestroy(s));
    assert_int_equal(mock_launch_axpy(y, x, 1.0f, N, 4, 256, s), cudaErrorInvalidResourceHandle);
    OK(cudaFree(x));
    OK(cudaFree(y));
    OK(cudaFreeHost(px));
    OK(cudaFreeHost(py));
}

static void test_failpoint_malloc(void **state)
{
    void *p = NULL;
    assert_int_equal(fiu_enable("eccl/mock_cudart/malloc", 1, NULL, 0), 0);
    assert_int_equal(cudaMalloc(&p, 64), cudaErrorMemoryAllocation);
    assert_int_equal(cudaMallocAsync(&p, 64, 0), cudaErrorMemoryAllocation);
    assert_int_equal(cudaMallocHost(&p, 64), cudaErrorMemoryAllocation);
    assert_int_equal(cudaHostAlloc(&p, 64, cudaHostAllocMapped), cudaErrorMemoryAllocation);
    assert_int_equal(fiu_disable("eccl/mock_cudart/malloc"), 0);
    assert_int_equal(cudaGetLastError(), cudaErrorMemoryAllocation);
    OK(cudaMalloc(&p, 64)); /* not sticky */
    OK(cudaFree(p));
}

static void test_failpoint_launch(void **state)
{
    float *y;
    OK(cudaMalloc((void **)&y, 4 * sizeof *y));
    OK(cudaMemset(y, 0, 4 * sizeof *y));
    assert_int_equal(fiu_enable("eccl/mock_cudart/launch", 1, NULL, 0), 0);
    assert_int_equal(mock_launch_axpy(y, y, 1.0f, 4, 1, 4, 0), cudaErrorLaunchOutOfResources);
    assert_int_equal(fiu_disable("eccl/mock_cudart/launch"), 0);
    OK(cudaGetLastError());                               /* returned once, cleared */
    assert_int_equal(mock_launch_axpy(y, y, 1.0f, 4, 1, 4, 0), cudaSuccess); /* not sticky */
    OK(cudaDeviceSynchronize());
    OK(cudaFree(y));
}

static void test_capacity_limit(void **state)
{
    assert_int_equal(run_child("capacity", "ECCL_MOCK_CUDA_MEM_MB=4"), 0);
}

static void test_devices(void **state)
{
    assert_int_equal(run_child("devices", "ECCL_MOCK_CUDA_DEVICES=2"), 0);
}

static void test_sticky_kernel_illegal_address(void **state)
{
    assert_int_equal(run_child("sticky_kernel", NULL), 0);
}

static void test_sticky_kernel_pageable(void **state)
{
    assert_int_equal(run_child("sticky_pageable", NULL), 0);
}

static void test_failpoint_sticky(void **state)
{
    assert_int_equal(run_child("fp_sticky", NULL), 0);
}

static void test_failpoint_memcpy(void **state)
{
    assert_int_equal(run_child("fp_memcpy", NULL), 0);
}

/* A fork()ed child of a process with a context cannot use CUDA. */
static void test_fork_child_cannot_use_cuda(void **state)
{
    void *p;
    OK(cudaMalloc(&p, 16));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        void *q;
        _exit(cudaMalloc(&q, 16) == cudaErrorInitializationError ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    OK(cudaFree(p));
}


/* ---------------------------------------------------------------- IPC */

/* The handle travels to a fresh process (a fork of a process with a context
 * cannot use CUDA) as hex in its environment. */
static char ipc_env[32 + 2 * CUDA_IPC_HANDLE_SIZE];

static const char *handle_env(const cudaIpcMemHandle_t *h)
{
    int n = snprintf(ipc_env, sizeof ipc_env, "ECCL_TEST_IPC=");
    for (int i = 0; i < CUDA_IPC_HANDLE_SIZE; i++)
        n += snprintf(ipc_env + n, sizeof ipc_env - (size_t)n, "%02x", (unsigned char)h->reserved[i]);
    return ipc_env;
}

static void fill(float *h, size_t n, float base)
{
    for (size_t i = 0; i < n; i++) h[i] = base + (float)i;
}

#define IPC_N 1000 /* floats: not a multiple of the page */

typedef int (*addr_range_fn)(unsigned long long *base, size_t *size, unsigned long long p);

static void test_ipc_export_rules(void **state)
{
    (void)state;
    float *d, h[IPC_N];
    OK(cudaMalloc((void **)&d, sizeof h));
    cudaIpcMemHandle_t ih;
    assert_int_equal(cudaIpcGetMemHandle(&ih, d + 1), cudaErrorInvalidValue); /* not the base */
    assert_int_equal(cudaIpcGetMemHandle(&ih, h), cudaErrorInvalidValue);     /* host memory */
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    /* The base an interior pointer needs, from the driver entry point. */
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult st;
    OK(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &st));
    assert_int_equal(st, cudaDriverEntryPointSuccess);
    unsigned long long base = 0;
    size_t size = 0;
    assert_int_equal(((addr_range_fn)fn)(&base, &size, (unsigned long long)(uintptr_t)(d + 7)), 0);
    assert_ptr_equal((void *)(uintptr_t)base, d);
    assert_int_equal(size, sizeof h);
    assert_int_equal(((addr_range_fn)fn)(&base, &size, (unsigned long long)(uintptr_t)h), 500);
    OK(cudaGetDriverEntryPointByVersion("cuNoSuchThing", &fn, 12000, cudaEnableDefault, &st));
    assert_null(fn);
    assert_int_equal(st, cudaDriverEntryPointSymbolNotFound);

    /* Export waits for queued work: the 10 ms-late memset is in the bytes. */
    OK(cudaMemsetAsync(d, 0x11, sizeof h, 0));
    OK(cudaIpcGetMemHandle(&ih, d));
    unsigned char b[sizeof h];
    OK(cudaMemcpy(b, d, sizeof b, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < sizeof b; i++) assert_int_equal(b[i], 0x11);
    /* The exporting process cannot open its own handle. */
    void *mine;
    assert_int_equal(cudaIpcOpenMemHandle(&mine, ih, cudaIpcMemLazyEnablePeerAccess), cudaErrorDeviceUninitialized);
    /* Exporting twice is fine and names the same memory. */
    cudaIpcMemHandle_t again;
    OK(cudaIpcGetMemHandle(&again, d));
    assert_memory_equal(&again, &ih, sizeof ih);
    OK(cudaFree(d));
}

/* Another process maps the memory, reads what we wrote, and writes back. */
static void test_ipc_shared_between_processes(void **state)
{
    (void)state;
    float *d, h[IPC_N];
    OK(cudaMalloc((void **)&d, sizeof h));
    fill(h, IPC_N, 1.0f);
    OK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
    cudaIpcMemHandle_t ih;
    OK(cudaIpcGetMemHandle(&ih, d));
    assert_int_equal(run_child("ipc_import", handle_env(&ih)), 0);
    OK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < IPC_N; i++) assert_true(h[i] == 2.0f * (1.0f + (float)i)); /* the child's axpy */
    /* A failpoint makes the open fail. */
    assert_int_equal(run_child("ipc_fp", handle_env(&ih)), 0);
    /* Freed: the handle is invalid, and new memory gets a new handle. */
    OK(cudaFree(d));
    assert_int_equal(run_child("ipc_freed", handle_env(&ih)), 0);
    OK(cudaMalloc((void **)&d, sizeof h));
    cudaIpcMemHandle_t fresh;
    OK(cudaIpcGetMemHandle(&fresh, d));
    assert_memory_not_equal(&fresh, &ih, sizeof ih);
    OK(cudaFree(d));
}

/* The exporter is gone: its handles are invalid. */
static void test_ipc_exporter_dead(void **state)
{
    (void)state;
    assert_int_equal(run_child("ipc_orphan", NULL), 0);
}

/* ------------------------------------------------- children (fresh processes) */

#define CK(c)                                                                   \
    do {                                                                        \
        if (!(c)) {                                                             \
            fprintf(stderr, "child: %s:%d: failed: %s\n", __FILE__, __LINE__, #c); \
            return 1;                                                           \
        }                                                                       \
    } while (0)

static int child_capacity(void)
{
    void *a, *b, *c;
    CK(cudaMalloc(&a, 3u << 20) == cudaSuccess);
    CK(cudaMalloc(&b, 2u << 20) == cudaErrorMemoryAllocation);
    CK(cudaMallocAsync(&b, 2u << 20, 0) == cudaErrorMemoryAllocation);
    CK(cudaMalloc(&b, 1u << 20) == cudaSuccess); /* exactly full */
    CK(cudaMalloc(&c, 1) == cudaErrorMemoryAllocation);
    CK(cudaGetLastError() == cudaErrorMemoryAllocation);
    CK(cudaGetLastError() == cudaSuccess); /* not sticky */
    CK(cudaFree(a) == cudaSuccess);
    CK(cudaMalloc(&a, 2u << 20) == cudaSuccess);
    CK(cudaFreeAsync(a, 0) == cudaSuccess);
    CK(cudaDeviceSynchronize() == cudaSuccess); /* the async free has run */
    CK(cudaMalloc(&a, 3u << 20) == cudaSuccess);
    CK(cudaFree(a) == cudaSuccess && cudaFree(b) == cudaSuccess);
    return 0;
}

static int child_devices(void)
{
    int n;
    CK(cudaGetDeviceCount(&n) == cudaSuccess && n == 2);
    CK(cudaSetDevice(2) == cudaErrorInvalidDevice);
    CK(cudaGetLastError() == cudaErrorInvalidDevice);
    float *d0, *d1;
    CK(cudaMalloc((void **)&d0, 64) == cudaSuccess);
    CK(cudaSetDevice(1) == cudaSuccess);
    CK(cudaMalloc((void **)&d1, 64) == cudaSuccess);
    struct cudaPointerAttributes at;
    CK(cudaPointerGetAttributes(&at, d1) == cudaSuccess && at.device == 1);
    CK(cudaPointerGetAttributes(&at, d0) == cudaSuccess && at.device == 0);
    /* A kernel on device 1 reading device 0's memory: no peer access. */
    CK(mock_launch_axpy(d1, d0, 1.0f, 16, 1, 16, 0) == cudaSuccess);
    CK(cudaDeviceSynchronize() == cudaErrorIllegalAddress);
    CK(cudaMalloc((void **)&d1, 64) == cudaErrorIllegalAddress);
    CK(cudaSetDevice(0) == cudaSuccess); /* device 0 is unharmed */
    CK(cudaMemset(d0, 0, 64) == cudaSuccess);
    CK(cudaDeviceSynchronize() == cudaSuccess);
    CK(cudaFree(d0) == cudaSuccess);
    return 0;
}

static void *sync_thread(void *arg)
{
    return (void *)(intptr_t)cudaStreamSynchronize((cudaStream_t)arg);
}

/* After the fault: every call that touches the device fails, the error
 * cannot be cleared, waiters return instead of hanging. */
static int check_broken(cudaError_t want, cudaStream_t s)
{
    CK(cudaStreamSynchronize(s) == want);
    pthread_t t;
    void *r;
    CK(pthread_create(&t, NULL, sync_thread, s) == 0 && pthread_join(t, &r) == 0);
    CK((cudaError_t)(intptr_t)r == want);
    void *p;
    CK(cudaMalloc(&p, 16) == want);
    char c;
    CK(cudaMemcpy(&c, &c, 1, cudaMemcpyHostToHost) == want);
    CK(cudaDeviceSynchronize() == want);
    CK(cudaGetLastError() == want);
    CK(cudaGetLastError() == want);
    CK(cudaPeekAtLastError() == want);
    cudaEvent_t ev;
    CK(cudaEventCreate(&ev) == want);
    CK(mock_launch_axpy(NULL, NULL, 1.0f, 1, 1, 1, s) == (int)want);
    return 0;
}

static int child_sticky_kernel(void)
{
    float *y;
    cudaStream_t s;
    CK(cudaStreamCreate(&s) == cudaSuccess);
    CK(cudaMalloc((void **)&y, 100 * sizeof *y) == cudaSuccess);
    /* 101 elements of a 100-element buffer: the launch is accepted, the
     * kernel faults on the device. */
    CK(mock_launch_axpy(y, y, 1.0f, 101, 1, 128, s) == cudaSuccess);
    return check_broken(cudaErrorIllegalAddress, s);
}

static int child_sticky_pageable(void)
{
    static float y[16];
    CK(mock_launch_axpy(y, y, 1.0f, 16, 1, 16, 0) == cudaSuccess);
    return check_broken(cudaErrorIllegalAddress, 0);
}

static int child_fp_sticky(void)
{
    unsigned char *d, h[16];
    CK(cudaMalloc((void **)&d, 16) == cudaSuccess);
    CK(fiu_enable("eccl/mock_cudart/sticky", 1, NULL, FIU_ONETIME) == 0);
    CK(cudaMemsetAsync(d, 0, 16, 0) == cudaSuccess); /* fails later, on the worker */
    CK(cudaMemcpy(h, d, 16, cudaMemcpyDeviceToHost) == cudaErrorIllegalAddress);
    return check_broken(cudaErrorIllegalAddress, 0);
}

static int child_fp_memcpy(void)
{
    unsigned char *d, *h;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    CK(cudaMalloc((void **)&d, 16) == cudaSuccess);
    CK(cudaMallocHost((void **)&h, 16) == cudaSuccess);
    CK(fiu_enable("eccl/mock_cudart/memcpy", 1, NULL, 0) == 0);
    CK(cudaMemcpyAsync(h, d, 16, cudaMemcpyDeviceToHost, s) == cudaSuccess);
    return check_broken(cudaErrorLaunchFailure, s);
}


static int ipc_handle_from_env(cudaIpcMemHandle_t *h)
{
    const char *x = getenv("ECCL_TEST_IPC");
    if (!x || strlen(x) != 2 * CUDA_IPC_HANDLE_SIZE) return -1;
    for (int i = 0; i < CUDA_IPC_HANDLE_SIZE; i++) {
        unsigned v;
        if (sscanf(x + 2 * i, "%2x", &v) != 1) return -1;
        h->reserved[i] = (char)v;
    }
    return 0;
}

/* Lines of /proc/self/maps that name an imported memfd. */
static int mapped_imports(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, "eccl-mock-cuda-")) n++;
    if (f) fclose(f);
    return n;
}

static int child_ipc_import(void)
{
    cudaIpcMemHandle_t ih, bad;
    CK(ipc_handle_from_env(&ih) == 0);
    float *p, *q, h[IPC_N];
    CK(cudaIpcOpenMemHandle((void **)&p, ih, 0) == cudaErrorInvalidValue); /* flags */
    memset(&bad, 0x5a, sizeof bad);
    CK(cudaIpcOpenMemHandle((void **)&q, bad, cudaIpcMemLazyEnablePeerAccess) == cudaErrorInvalidResourceHandle);
    CK(cudaIpcOpenMemHandle((void **)&p, ih, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess);
    /* Opened again: a reference more, the same pointer. */
    CK(cudaIpcOpenMemHandle((void **)&q, ih, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess && q == p);
    struct cudaPointerAttributes at;
    CK(cudaPointerGetAttributes(&at, p) == cudaSuccess && at.type == cudaMemoryTypeDevice);
    CK(mapped_imports() > 0);
    /* Device memory: the host cannot read it, copies and kernels can. */
    CK(cudaMemcpy(h, p, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (int i = 0; i < IPC_N; i++) CK(h[i] == 1.0f + (float)i);
    CK(cudaMemcpy(p + IPC_N, h, sizeof(float), cudaMemcpyHostToDevice) == cudaErrorInvalidValue); /* past the end */
    CK(cudaGetLastError() == cudaErrorInvalidValue); /* the launch reports the last error */
    CK(mock_launch_axpy(p, p, 1.0f, IPC_N, 4, 256, 0) == cudaSuccess); /* p += p */
    CK(cudaFree(p) == cudaErrorInvalidValue); /* imported: closed, not freed */
    CK(cudaIpcCloseMemHandle(p + 1) == cudaErrorInvalidValue);
    CK(cudaIpcCloseMemHandle(p) == cudaSuccess);
    CK(cudaMemcpy(h, p, sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess); /* one reference left */
    CK(cudaIpcCloseMemHandle(p) == cudaSuccess); /* waits for the kernel, then unmaps */
    CK(cudaIpcCloseMemHandle(p) == cudaErrorInvalidValue);
    CK(cudaMemcpy(h, p, sizeof(float), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue); /* gone */
    CK(mapped_imports() == 0);
    return 0;
}

static int child_ipc_fp(void)
{
    cudaIpcMemHandle_t ih;
    void *p;
    CK(ipc_handle_from_env(&ih) == 0);
    CK(fiu_enable("eccl/mock_cudart/ipc", 1, NULL, FIU_ONETIME) == 0);
    CK(cudaIpcOpenMemHandle(&p, ih, cudaIpcMemLazyEnablePeerAccess) == cudaErrorMapBufferObjectFailed);
    CK(cudaIpcOpenMemHandle(&p, ih, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess); /* not sticky */
    CK(cudaIpcCloseMemHandle(p) == cudaSuccess);
    return 0;
}

static int child_ipc_freed(void)
{
    cudaIpcMemHandle_t ih;
    void *p;
    CK(ipc_handle_from_env(&ih) == 0);
    CK(cudaIpcOpenMemHandle(&p, ih, cudaIpcMemLazyEnablePeerAccess) == cudaErrorInvalidResourceHandle);
    CK(mapped_imports() == 0);
    return 0;
}

/* Exports in a grandchild that exits; its handle is then refused, while a
 * mapping opened before the exit stays readable (the memory lives while
 * mapped). */
static int child_ipc_orphan(void)
{
    int pipefd[2], hold[2];
    CK(pipe(pipefd) == 0 && pipe(hold) == 0);
    fflush(NULL);
    pid_t pid = fork(); /* before this process touches CUDA */
    if (pid == 0) {
        close(pipefd[0]);
        close(hold[1]);
        float *d, h[IPC_N];
        cudaIpcMemHandle_t ih;
        fill(h, IPC_N, 5.0f);
        char go;
        if (cudaMalloc((void **)&d, sizeof h) || cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice) ||
            cudaIpcGetMemHandle(&ih, d) || write(pipefd[1], &ih, sizeof ih) != (ssize_t)sizeof ih)
            _exit(1);
        /* Holds the memory until the importer is done with set-up. */
        while (read(hold[0], &go, 1) > 0) {}
        _exit(0);
    }
    close(pipefd[1]);
    close(hold[0]);
    cudaIpcMemHandle_t ih;
    CK(read(pipefd[0], &ih, sizeof ih) == (ssize_t)sizeof ih);
    float *p, h[IPC_N];
    CK(cudaIpcOpenMemHandle((void **)&p, ih, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess);
    close(pipefd[0]);
    kill(pid, SIGKILL); /* mid-life, as a crash */
    close(hold[1]);
    int st;
    CK(waitpid(pid, &st, 0) == pid);
    CK(cudaMemcpy(h, p, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (int i = 0; i < IPC_N; i++) CK(h[i] == 5.0f + (float)i);
    CK(cudaIpcCloseMemHandle(p) == cudaSuccess);
    CK(cudaIpcOpenMemHandle((void **)&p, ih, cudaIpcMemLazyEnablePeerAccess) == cudaErrorInvalidResourceHandle);
    CK(mapped_imports() == 0);
    return 0;
}

static const struct {
    const char *name;
    int (*fn)(void);
} children[] = {
    {"capacity", child_capacity},         {"devices", child_devices},
    {"sticky_kernel", child_sticky_kernel}, {"sticky_pageable", child_sticky_pageable},
    {"fp_sticky", child_fp_sticky},       {"fp_memcpy", child_fp_memcpy},
    {"ipc_import", child_ipc_import},     {"ipc_fp", child_ipc_fp},
    {"ipc_freed", child_ipc_freed},       {"ipc_orphan", child_ipc_orphan},
};

int main(int argc, char **argv)
{
    /* Before the first CUDA call (the mock reads its knobs once). */
    setenv("ECCL_MOCK_CUDA_DELAY_US", DELAY_US, 0);
    fiu_init(0);
    if (argc > 0 && strchr(argv[0], '/')) self = argv[0];
    if (argc == 3 && strcmp(argv[1], "--child") == 0) {
        for (size_t i = 0; i < sizeof children / sizeof children[0]; i++)
            if (strcmp(argv[2], children[i].name) == 0) return children[i].fn();
        fprintf(stderr, "no child %s\n", argv[2]);
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_is_the_mock),
        cmocka_unit_test(test_device_memory_not_host_addressable),
        cmocka_unit_test(test_memcpy_directions_and_bounds),
        cmocka_unit_test(test_pointer_attributes),
        cmocka_unit_test(test_stream_order_and_staleness),
        cmocka_unit_test(test_events_and_stream_wait),
        cmocka_unit_test(test_legacy_default_stream),
        cmocka_unit_test(test_kernel_launch),
        cmocka_unit_test(test_failpoint_malloc),
        cmocka_unit_test(test_failpoint_launch),
        cmocka_unit_test(test_capacity_limit),
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_sticky_kernel_illegal_address),
        cmocka_unit_test(test_sticky_kernel_pageable),
        cmocka_unit_test(test_failpoint_sticky),
        cmocka_unit_test(test_failpoint_memcpy),
        cmocka_unit_test(test_fork_child_cannot_use_cuda),
        cmocka_unit_test(test_ipc_export_rules),
        cmocka_unit_test(test_ipc_shared_between_processes),
        cmocka_unit_test(test_ipc_exporter_dead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
