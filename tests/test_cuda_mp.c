/* Device buffers end to end, on whatever CUDA runtime the loader finds: the
 * mocked one (mocks/cudart, LD_LIBRARY_PATH) in CI, the real one on a GPU
 * machine. What the wrapped suites (tests/cuda_wrap.c) cannot show:
 *   - stream semantics: the input is read after the caller's stream, and a
 *     control run without the stream reads stale bytes (so the check bites);
 *   - kinds: host and device buffers mixed in one call are refused, pinned
 *     host and device are two kinds, managed memory is device-like;
 *   - no plugin: a device pointer gets ECCL_ERR_UNSUPPORTED, host works;
 *   - device faults are data: a failed mirror allocation, a failed copy in,
 *     a sticky error, a failed copy out after the collective succeeded;
 *   - the trap: a host dereference of device memory kills the process.
 * Without a usable runtime (no device) every test skips with a message. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>
#include <fiu-control.h>
#include <fiu.h>

#include "cluster.h"

#define CUCHK(call)                                                                       \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess) {                                                          \
            cluster_fail("%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

/* ---- stream order ----------------------------------------------------------- */

typedef struct stream_arg {
    int use_stream; /* 0: the control, which must see stale bytes */
    size_t bytes;
} stream_arg;

/* Every peer fills its device buffer with index + 1 through a memset queued
 * on a non-blocking stream that the mock runs late, then all-reduces (u8
 * SUM). With the stream named, each byte must be 1 + 2 = 3; without, the
 * library reads before the memset ran. */
static int stream_body(eccl_comm *c, int index, void *argp)
{
    const stream_arg *a = argp;
    cudaStream_t u;
    void *d;
    CUCHK(cudaStreamCreateWithFlags(&u, cudaStreamNonBlocking));
    CUCHK(cudaMalloc(&d, a->bytes));
    CUCHK(cudaMemset(d, 0, a->bytes));
    CUCHK(cudaDeviceSynchronize()); /* cudaMemset may return before it ran */
    /* The mock delays every queued op alike, so a queue ahead of the
     * memset is what makes it land late: ten ops on u before it, against
     * the two the library queues on its own stream. */
    for (int k = 0; k < 10; k++) CUCHK(cudaMemsetAsync(d, 0, a->bytes, u));
    CUCHK(cudaMemsetAsync(d, index + 1, a->bytes, u));
    eccl_allreduce_opts o;
    eccl_allreduce_opts_init(&o);
    o.stream = a->use_stream ? (void *)u : NULL;
    eccl_reduce_info info;
    CL_OK(eccl_allreduce_ex(c, d, d, a->bytes, ECCL_U8, ECCL_SUM, 1, &o, &info));
    /* Work queued on the stream after the call sees the result. */
    unsigned char *h = malloc(a->bytes);
    CL_CHECK(h != NULL, "malloc");
    CUCHK(cudaMemcpyAsync(h, d, a->bytes, cudaMemcpyDeviceToHost, u));
    CUCHK(cudaStreamSynchronize(u));
    size_t threes = 0;
    for (size_t i = 0; i < a->bytes; i++) threes += h[i] == 3;
    cluster_self()->val[1] = h[0];
    cluster_self()->val[0] = (long long)threes;
    free(h);
    CUCHK(cudaFree(d));
    CUCHK(cudaStreamDestroy(u));
    return 0;
}

static int runtime_usable(void)
{
    /* Asked in a child: the parent forks peers and must not start CUDA. */
    pid_t pid = fork();
    if (pid == 0) {
        int n = 0;
        _exit(cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

#define SKIP_WITHOUT_RUNTIME()                                                    \
    do {                                                                          \
        if (!runtime_usable()) {                                                  \
            printf("SKIP: no usable CUDA runtime (no device, or no mock on "      \
                   "LD_LIBRARY_PATH)\n");                                          \
            skip();                                                               \
        }                                                                         \
    } while (0)

static void run_stream(cluster *cl, int use_stream)
{
    SKIP_WITHOUT_RUNTIME();
    stream_arg a = {use_stream, 1u << 20};
    /* Each op queued on the mock waits 50 ms (children inherit this). */
    setenv("ECCL_MOCK_CUDA_DELAY_US", "50000", 1);
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, 2, stream_body, &a), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    unsetenv("ECCL_MOCK_CUDA_DELAY_US");
    for (int p = 0; p < 2; p++) {
        long long threes = cl->sh->slot[p].val[0];
        if (use_stream && threes != (long long)a.bytes)
            fail_msg("peer %d: %lld of %zu bytes are 3 (byte 0: %lld): the input was read before the "
                     "stream's memset", p, threes, a.bytes, (long long)cl->sh->slot[p].val[1]);
        if (!use_stream && threes == (long long)a.bytes)
            fail_msg("peer %d: the control (no stream named) saw the memset: the check cannot fail", p);
    }
    cluster_fini(cl);
}

static void test_stream_orders_input(void **state) { run_stream(*state, 1); }
static void test_stream_control_reads_stale(void **state)
{
    /* Needs the mock's delayed queues: a GPU may well finish the memset
     * before the library's copy whatever the ordering. */
    if (!getenv("ECCL_TEST_MOCK_CUDA")) {
        printf("SKIP: the control needs the mock's ECCL_MOCK_CUDA_DELAY_US\n");
        skip();
    }
    run_stream(*state, 0);
}

/* ---- kinds, no plugin ------------------------------------------------------- */

/* World of one: a call that passes the buffer checks ends TOO_FEW_PEERS. */
static int kinds_body(eccl_comm *c, int index, void *arg)
{
    (void)index;
    (void)arg;
    const size_t n = 256, bytes = n * 4;
    void *dev, *dev2, *pinned, *managed;
    char host[1024];
    CUCHK(cudaMalloc(&dev, bytes));
    CUCHK(cudaMalloc(&dev2, bytes));
    CUCHK(cudaMallocHost(&pinned, bytes));
    CUCHK(cudaMallocManaged(&managed, bytes, cudaMemAttachGlobal));
    CL_EXPECT_RC(eccl_allreduce(c, dev, host, n, ECCL_F32, ECCL_SUM, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allreduce(c, host, dev, n, ECCL_F32, ECCL_SUM, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allreduce(c, dev, pinned, n, ECCL_F32, ECCL_SUM, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allreduce(c, dev, dev2, n, ECCL_F32, ECCL_SUM, 1, NULL), ECCL_ERR_TOO_FEW_PEERS);
    CL_EXPECT_RC(eccl_allreduce(c, dev, managed, n, ECCL_F32, ECCL_SUM, 1, NULL), ECCL_ERR_TOO_FEW_PEERS);
    CL_EXPECT_RC(eccl_allreduce(c, pinned, host, n, ECCL_F32, ECCL_SUM, 1, NULL), ECCL_ERR_TOO_FEW_PEERS);
    /* Past the end of an allocation: the runtime does not know it. */
    CL_EXPECT_RC(eccl_allreduce(c, (char *)dev + (64u << 20), (char *)dev + (64u << 20), n, ECCL_F32, ECCL_SUM,
                                1, NULL),
                 ECCL_ERR_INVALID_ARG);
    CUCHK(cudaFree(dev));
    CUCHK(cudaFree(dev2));
    CUCHK(cudaFreeHost(pinned));
    CUCHK(cudaFree(managed));
    return 0;
}

static int no_plugin_body(eccl_comm *c, int index, void *arg)
{
    (void)index;
    (void)arg;
    void *dev;
    float host[16] = {0};
    CUCHK(cudaMalloc(&dev, sizeof host));
    CL_EXPECT_RC(eccl_allreduce(c, dev, dev, 16, ECCL_F32, ECCL_SUM, 1, NULL), ECCL_ERR_UNSUPPORTED);
    CL_EXPECT_RC(eccl_allreduce(c, host, host, 16, ECCL_F32, ECCL_SUM, 2, NULL), ECCL_ERR_TOO_FEW_PEERS);
    CUCHK(cudaFree(dev));
    return 0;
}

static void run_single(cluster *cl, cluster_body body)
{
    SKIP_WITHOUT_RUNTIME();
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, 1, body, NULL), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    cluster_fini(cl);
}

static void test_kinds(void **state) { run_single(*state, kinds_body); }

static void test_no_plugin_unsupported(void **state)
{
    const char *was = getenv("ECCL_CUDA_PLUGIN");
    char *saved = was ? strdup(was) : NULL;
    setenv("ECCL_CUDA_PLUGIN", "/nonexistent/libeccl_cuda.so.0", 1);
    run_single(*state, no_plugin_body);
    if (saved) setenv("ECCL_CUDA_PLUGIN", saved, 1);
    else unsetenv("ECCL_CUDA_PLUGIN");
    free(saved);
}

/* ---- device faults ---------------------------------------------------------- */

/* Fails the n-th call of a failpoint (counting from 1), once. */
static int nth_call(const char *name, int *failnum, void **failinfo, unsigned int *flags)
{
    (void)name;
    (void)failinfo;
    (void)flags;
    static int calls;
    int want = (int)(intptr_t)*failinfo;
    *failnum = 1;
    return ++calls == want;
}

static int read_back(void *dev, void *host, size_t bytes)
{
    return cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
}

/* Two peers, i32 SUM of 4096 elements: each failure leaves the device buffer
 * as it was (checked by reading it back) or breaks the context for good. */
static int faults_body(eccl_comm *c, int index, void *arg)
{
    (void)arg;
    const size_t n = 4096, bytes = n * 4;
    int32_t *h = malloc(bytes), *back = malloc(bytes);
    CL_CHECK(h && back, "malloc");
    for (size_t i = 0; i < n; i++) h[i] = (int32_t)(i * 7 + (size_t)index);
    void *d;
    CUCHK(cudaMalloc(&d, bytes));
    CUCHK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));

    /* 1. The pinned mirror cannot be allocated: NO_MEMORY before anything is
     *    sent (on both peers, so neither waits for the other). */
    fiu_enable("eccl/mock_cudart/malloc", 1, NULL, 0);
    CL_EXPECT_RC(eccl_allreduce(c, d, d, n, ECCL_I32, ECCL_SUM, 1, NULL), ECCL_ERR_NO_MEMORY);
    fiu_disable("eccl/mock_cudart/malloc");
    CL_CHECK(read_back(d, back, bytes) == 0 && !memcmp(back, h, bytes), "device buffer changed by a failed call");

    /* 2. It works, and the sum is right. */
    CL_OK(eccl_allreduce(c, d, d, n, ECCL_I32, ECCL_SUM, 2, NULL));
    CL_CHECK(read_back(d, back, bytes) == 0, "read back");
    for (size_t i = 0; i < n; i++)
        CL_CHECK(back[i] == (int32_t)(2 * i * 7 + 1), "element %zu: %d", i, back[i]);
    memcpy(h, back, bytes);

    /* 3. Peer 1's copy out (the second copy of its call) fails after the
     *    collective succeeded everywhere: it reports DEVICE, peer 0 OK, and
     *    peer 1's context is broken for good (a sticky error). */
    if (index == 1) fiu_enable_external("eccl/mock_cudart/memcpy", 1, (void *)(intptr_t)2, 0, nth_call);
    eccl_result rc = eccl_allreduce(c, d, d, n, ECCL_I32, ECCL_SUM, 3, NULL);
    if (index == 1) {
        fiu_disable("eccl/mock_cudart/memcpy");
        CL_EXPECT_RC(rc, ECCL_ERR_DEVICE);
        /* Sticky: the next call fails at once, before anything is sent. */
        CL_EXPECT_RC(eccl_allreduce(c, d, d, n, ECCL_I32, ECCL_SUM, 4, NULL), ECCL_ERR_DEVICE);
    } else {
        CL_EXPECT_RC(rc, ECCL_OK);
        CL_CHECK(read_back(d, back, bytes) == 0, "read back");
        for (size_t i = 0; i < n; i++) CL_CHECK(back[i] == 2 * h[i], "element %zu", i);
    }
    free(h);
    free(back);
    if (index == 0) CUCHK(cudaFree(d));
    return 0;
}

static void test_device_faults(void **state)
{
    SKIP_WITHOUT_RUNTIME();
    if (!getenv("ECCL_TEST_MOCK_CUDA")) {
        printf("SKIP: the fault injections are the mock's failpoints\n");
        skip();
    }
    cluster *cl = *state;
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, 2, faults_body, NULL), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    cluster_fini(cl);
}

/* The device-resident ring (a 4 MiB call): peer 1's device fails in the
 * middle of the ring: its third copy (a sticky error: the context is
 * broken for good), or a reduction kernel's launch (not sticky). Peer 1
 * returns DEVICE; peer 0 returns PEER_LOST (the master re-forms the ring
 * when a peer gives up on its own) or TIMEOUT, with its device buffer
 * restored bit for bit by the device backup. After a launch failure both
 * call again and get the right sum. */
typedef struct resident_fault {
    int launch; /* 0: the third copy fails; 1: a kernel launch fails */
} resident_fault;

static int resident_fault_body(eccl_comm *c, int index, void *arg)
{
    const resident_fault *f = arg;
    const size_t n = 1u << 20, bytes = n * 4;
    int32_t *h = malloc(bytes), *back = malloc(bytes);
    CL_CHECK(h && back, "malloc");
    for (size_t i = 0; i < n; i++) h[i] = (int32_t)(i * 3 + (size_t)index);
    void *d;
    CUCHK(cudaMalloc(&d, bytes));
    CUCHK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    /* A clean call first: the resident ring works and sums. */
    CL_OK(eccl_allreduce(c, d, d, n, ECCL_I32, ECCL_SUM, 1, NULL));
    CL_CHECK(read_back(d, back, bytes) == 0, "read back");
    for (size_t i = 0; i < n; i++) CL_CHECK(back[i] == (int32_t)(2 * i * 3 + 1), "element %zu", i);
    memcpy(h, back, bytes);
    const char *fp = f->launch ? "eccl/mock_cudart/launch" : "eccl/mock_cudart/memcpy";
    if (index == 1) {
        if (f->launch) fiu_enable(fp, 1, NULL, FIU_ONETIME);
        else fiu_enable_external(fp, 1, (void *)(intptr_t)3, 0, nth_call);
    }
    eccl_result rc = eccl_allreduce(c, d, d, n, ECCL_I32, ECCL_SUM, 2, NULL);
    if (index == 1) {
        fiu_disable(fp);
        CL_EXPECT_RC(rc, ECCL_ERR_DEVICE);
        if (!f->launch) return 0; /* sticky: this peer is done */
    } else {
        CL_CHECK(rc == ECCL_ERR_PEER_LOST || rc == ECCL_ERR_TIMEOUT, "peer 0: %s", eccl_strerror(rc));
        CL_CHECK(read_back(d, back, bytes) == 0 && !memcmp(back, h, bytes),
                 "peer 0's device buffer changed by a failed call");
        if (!f->launch) return 0;
    }
    /* A failed launch broke nothing. Peer 1's backup restored what the
     * failed call had written, so both peers still hold their inputs, and
     * the retry sums them. */
    CL_CHECK(read_back(d, back, bytes) == 0 && !memcmp(back, h, bytes),
             "peer %d's device buffer changed by a failed call", index);
    /* The ring the master re-forms after peer 1 gave up may abort the first
     * try as well (PEER_LOST, restored): retry as any caller would. */
    eccl_result retry = ECCL_ERR_PEER_LOST;
    for (int attempt = 0; attempt < 5 && retry == ECCL_ERR_PEER_LOST; attempt++)
        retry = eccl_allreduce(c, d, d, n, ECCL_I32, ECCL_SUM, 3, NULL);
    CL_EXPECT_RC(retry, ECCL_OK);
    CL_CHECK(read_back(d, back, bytes) == 0, "read back");
    for (size_t i = 0; i < n; i++)
        CL_CHECK(back[i] == (int32_t)(4 * i * 3 + 2), "retry: element %zu: %d", i, back[i]);
    free(h);
    free(back);
    CUCHK(cudaFree(d));
    return 0;
}

static void run_resident_fault(cluster *cl, int launch)
{
    SKIP_WITHOUT_RUNTIME();
    if (!getenv("ECCL_TEST_MOCK_CUDA")) {
        printf("SKIP: the fault injections are the mock's failpoints\n");
        skip();
    }
    cluster_opts o = {.op_timeout_ms = 3000, .no_linger = 1};
    resident_fault f = {launch};
    setenv("ECCL_DEVICE_RING_MIN_BYTES", "1048576", 1); /* children inherit it */
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, 2, resident_fault_body, &f), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    unsetenv("ECCL_DEVICE_RING_MIN_BYTES");
    cluster_fini(cl);
}

static void test_resident_ring_copy_fault(void **state) { run_resident_fault(*state, 0); }
static void test_resident_ring_launch_fault(void **state) { run_resident_fault(*state, 1); }

/* ---- the trap --------------------------------------------------------------- */

static int deref_proc(cluster *cl, int index, void *arg)
{
    (void)cl;
    (void)index;
    (void)arg;
    volatile unsigned char *d;
    if (cudaMalloc((void **)&d, 4096) != cudaSuccess) return 2;
    signal(SIGSEGV, SIG_DFL);
    return d[17]; /* must not return */
}

static void test_host_dereference_traps(void **state)
{
    SKIP_WITHOUT_RUNTIME();
    cluster *cl = *state;
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_fork(cl, 0, deref_proc, NULL), 0);
    cluster_wait(cl, 0, 30000);
    int st = cl->status[0];
    if (!WIFSIGNALED(st) || (WTERMSIG(st) != SIGSEGV && WTERMSIG(st) != SIGBUS))
        fail_msg("a host read of device memory did not fault (wait status 0x%x)", st);
    cluster_fini(cl);
}

int main(void)
{
    fiu_init(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stream_orders_input, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_stream_control_reads_stale, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_kinds, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_no_plugin_unsupported, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_device_faults, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_resident_ring_copy_fault, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_resident_ring_launch_fault, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_host_dereference_traps, cluster_test_setup, cluster_test_teardown),
    };
    const char *filter = getenv("ECCL_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("cuda_mp", tests, NULL, NULL);
}
