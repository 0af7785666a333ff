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
 *   - the trap: a host dereference of device memory kills the process;
 *   - all-gather, reduce-scatter, broadcast and reduce on device buffers
 *     (their layout-bound mirror): every element read back, the rest of
 *     every device buffer untouched, mixing refused, and a failed call (no
 *     mirror, a peer killed mid-call) writing no device byte.
 * Without a usable runtime (no device) every test skips with a message. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
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

/* ---- all-gather, reduce-scatter, broadcast, reduce on device buffers --------- */

/* The four layout-bound collectives run on a pinned host mirror laid out as
 * eccl.h's layouts (core/comm/stage.c, eccl_stage_begin_layout): the input
 * goes to its block of the mirror, the call runs in place there, and only a
 * success copies the output range back. What must hold, read back from the
 * device element by element: every output right, in and out of place;
 * every other device byte of the call (an input, the rest of an in-place
 * buffer, a non-root's unused buffer) as it was; mixed host and device
 * buffers refused before anything is sent; and a failed call (no mirror, a
 * peer killed mid-call) writes no device byte. */

enum { D_ALLGATHER, D_REDUCE_SCATTER, D_BROADCAST, D_REDUCE, D_ALLTOALL, D_SENDRECV, D_KINDS };
static const char *const dkind_names[D_KINDS] = {"all-gather", "reduce-scatter", "broadcast", "reduce",
                                                 "all-to-all", "send/receive"};

/* All-to-all: rank r's block for rank d is contribution r * PEERS + d. */
static int a2a_block(uint32_t from, uint32_t to) { return (int)(from * CLUSTER_MAX_PEERS + to); }

/* What a rank passes off the root for the buffer the call does not use
 * there (the broadcast's sendbuf, the reduce's recvbuf). */
enum { OFF_NULL, OFF_DEVICE, OFF_HOST };

typedef struct dcall {
    int kind;
    eccl_dtype t;
    eccl_op op;
    size_t count; /* per block: sendcount, recvcount, or the buffer */
    int in_place;
    uint32_t root;
    uint64_t tag;
    int async;    /* the _async form and eccl_wait */
    int off_root; /* OFF_* */
} dcall;

/* One call's memory as this rank made it: up to two device allocations,
 * the images they held at the call, and a pageable buffer off the root. */
typedef struct dmem {
    uint32_t rank, n;
    void *dev[2];
    size_t bytes[2];
    uint8_t *before[2];
    uint8_t *host, *host_before;
    size_t host_bytes;
    const void *in;
    void *out;
    size_t out_bytes; /* output this rank has (0: none) */
} dmem;

/* A device allocation holding `img`. */
static int dmem_put(dmem *m, int k, const uint8_t *img, size_t bytes)
{
    m->bytes[k] = bytes;
    m->before[k] = malloc(bytes);
    CL_CHECK(m->before[k] != NULL, "malloc");
    memcpy(m->before[k], img, bytes);
    CUCHK(cudaMalloc(&m->dev[k], bytes));
    CUCHK(cudaMemcpy(m->dev[k], img, bytes, cudaMemcpyHostToDevice));
    return 0;
}

static void dmem_free(dmem *m)
{
    for (int k = 0; k < 2; k++) {
        if (m->dev[k]) cudaFree(m->dev[k]);
        free(m->before[k]);
    }
    free(m->host);
    free(m->host_before);
    memset(m, 0, sizeof *m);
}

/* Lays out rank `rank` of `n`'s buffers for `a` as test_colls_mp does on
 * the host: inputs filled by rank, outputs holding stale 0x3c bytes, and a
 * non-root's unused buffer 0x77 (it must stay so). */
static int dcall_prepare(const dcall *a, uint32_t rank, uint32_t n, dmem *m)
{
    memset(m, 0, sizeof *m);
    m->rank = rank;
    m->n = n;
    size_t b = a->count * eccl_dtype_size(a->t);
    int root = rank == a->root;
    uint8_t *img = malloc(n * b + 1);
    CL_CHECK(img != NULL, "malloc");
    int rc = 0;
    switch (a->kind) {
    case D_ALLGATHER:
        memset(img, 0x3c, n * b);
        if (a->in_place) cluster_fill(img + rank * b, a->t, a->count, (int)rank, a->tag, CL_PAT_SMALL);
        rc |= dmem_put(m, 0, img, n * b);
        m->out = m->dev[0];
        m->out_bytes = n * b;
        if (a->in_place) {
            m->in = (uint8_t *)m->dev[0] + rank * b;
        } else {
            cluster_fill(img, a->t, a->count, (int)rank, a->tag, CL_PAT_SMALL);
            rc |= dmem_put(m, 1, img, b);
            m->in = m->dev[1];
        }
        break;
    case D_REDUCE_SCATTER:
        cluster_fill(img, a->t, n * a->count, (int)rank, a->tag, CL_PAT_SMALL);
        rc |= dmem_put(m, 0, img, n * b);
        m->in = m->dev[0];
        m->out_bytes = b;
        if (a->in_place) {
            m->out = (uint8_t *)m->dev[0] + rank * b;
        } else {
            memset(img, 0x3c, b);
            rc |= dmem_put(m, 1, img, b);
            m->out = m->dev[1];
        }
        break;
    case D_BROADCAST:
        if (root && a->in_place) cluster_fill(img, a->t, a->count, (int)rank, a->tag, CL_PAT_SMALL);
        else memset(img, 0x3c, b);
        rc |= dmem_put(m, 0, img, b);
        m->out = m->dev[0];
        m->out_bytes = b;
        if (root) {
            if (a->in_place) {
                m->in = m->dev[0];
            } else {
                cluster_fill(img, a->t, a->count, (int)rank, a->tag, CL_PAT_SMALL);
                rc |= dmem_put(m, 1, img, b);
                m->in = m->dev[1];
            }
        } else if (a->off_root == OFF_DEVICE) {
            memset(img, 0x77, b);
            rc |= dmem_put(m, 1, img, b);
            m->in = m->dev[1];
        } else if (a->off_root == OFF_HOST) {
            m->host_bytes = b;
        }
        break;
    case D_ALLTOALL:
        for (uint32_t d = 0; d < n; d++)
            cluster_fill(img + d * b, a->t, a->count, a2a_block(rank, d), a->tag, CL_PAT_SMALL);
        rc |= dmem_put(m, 0, img, n * b);
        m->in = m->dev[0];
        m->out_bytes = n * b;
        if (a->in_place) {
            m->out = m->dev[0];
        } else {
            memset(img, 0x3c, n * b);
            rc |= dmem_put(m, 1, img, n * b);
            m->out = m->dev[1];
        }
        break;
    case D_SENDRECV: /* to rank + 1, from rank - 1 */
        cluster_fill(img, a->t, a->count, (int)rank, a->tag, CL_PAT_SMALL);
        rc |= dmem_put(m, 0, img, b);
        m->in = m->dev[0];
        memset(img, 0x3c, b);
        rc |= dmem_put(m, 1, img, b);
        m->out = m->dev[1];
        m->out_bytes = b;
        break;
    default: /* reduce */
        cluster_fill(img, a->t, a->count, (int)rank, a->tag, CL_PAT_SMALL);
        rc |= dmem_put(m, 0, img, b);
        m->in = m->dev[0];
        if (root) {
            m->out_bytes = b;
            if (a->in_place) {
                m->out = m->dev[0];
            } else {
                memset(img, 0x3c, b);
                rc |= dmem_put(m, 1, img, b);
                m->out = m->dev[1];
            }
        } else if (a->off_root == OFF_DEVICE) {
            memset(img, 0x77, b);
            rc |= dmem_put(m, 1, img, b);
            m->out = m->dev[1];
        } else if (a->off_root == OFF_HOST) {
            m->host_bytes = b;
        }
        break;
    }
    free(img);
    if (m->host_bytes) {
        m->host = malloc(m->host_bytes);
        m->host_before = malloc(m->host_bytes);
        CL_CHECK(m->host && m->host_before, "malloc");
        memset(m->host, 0x77, m->host_bytes);
        memcpy(m->host_before, m->host, m->host_bytes);
        if (a->kind == D_BROADCAST) m->in = m->host;
        else m->out = m->host;
    }
    return rc;
}

static eccl_result dcall_issue(eccl_comm *c, const dcall *a, const void *in, void *out)
{
    eccl_request *r = NULL, **req = a->async ? &r : NULL;
    eccl_result rc;
    if (a->kind == D_SENDRECV) {
        int64_t rank, n;
        if (eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank) != ECCL_OK ||
            eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &n) != ECCL_OK)
            return ECCL_ERR_INVALID_ARG;
        eccl_request *s;
        rc = eccl_send_async(c, in, a->count, a->t, (uint32_t)((rank + 1) % n), a->tag, &s);
        if (rc != ECCL_OK) return rc;
        eccl_result rr = eccl_recv(c, out, a->count, a->t, (uint32_t)((rank + n - 1) % n), a->tag, NULL);
        rc = eccl_wait(s, NULL);
        return rr != ECCL_OK ? rr : rc;
    }
    switch (a->kind) {
    case D_ALLGATHER:
        rc = req ? eccl_allgather_async(c, in, out, a->count, a->t, a->tag, req)
                 : eccl_allgather(c, in, out, a->count, a->t, a->tag, NULL);
        break;
    case D_REDUCE_SCATTER: {
        /* Forced to recursive halving (test_colls_device_recursive), a
         * blocking call reports it ran that. */
        const char *forced = getenv("ECCL_ALGO");
        eccl_reduce_info info;
        rc = req ? eccl_reduce_scatter_async(c, in, out, a->count, a->t, a->op, a->tag, req)
                 : eccl_reduce_scatter(c, in, out, a->count, a->t, a->op, a->tag, &info);
        if (!req && rc == ECCL_OK && forced && strcmp(forced, "reduce_scatter=recursive") == 0 &&
            info.algorithm != ECCL_ALGO_RECURSIVE) {
            fprintf(stderr, "reduce-scatter forced to recursive ran algorithm %u\n", info.algorithm);
            return ECCL_ERR_PROTOCOL;
        }
        break;
    }
    case D_BROADCAST:
        rc = req ? eccl_broadcast_async(c, in, out, a->count, a->t, a->root, a->tag, req)
                 : eccl_broadcast(c, in, out, a->count, a->t, a->root, a->tag, NULL);
        break;
    case D_ALLTOALL:
        rc = req ? eccl_alltoall_async(c, in, out, a->count, a->t, a->tag, req)
                 : eccl_alltoall(c, in, out, a->count, a->t, a->tag, NULL);
        break;
    default:
        rc = req ? eccl_reduce_async(c, in, out, a->count, a->t, a->op, a->root, a->tag, req)
                 : eccl_reduce(c, in, out, a->count, a->t, a->op, a->root, a->tag, NULL);
        break;
    }
    if (req && rc == ECCL_OK) rc = eccl_wait(r, NULL);
    return rc;
}

/* Reads back every device byte of the call: on success the output range
 * must hold the expected values (element by element) and every other byte
 * what it held before; on failure every byte must be as before. */
static int dcall_check(const dcall *a, const dmem *m, eccl_result rc)
{
    size_t es = eccl_dtype_size(a->t), b = a->count * es;
    uint8_t *want = NULL;
    if (rc == ECCL_OK && m->out_bytes) {
        want = malloc(m->out_bytes + b + 1);
        CL_CHECK(want != NULL, "malloc");
        int idx[CLUSTER_MAX_PEERS];
        for (uint32_t i = 0; i < m->n; i++) idx[i] = (int)i;
        switch (a->kind) {
        case D_ALLGATHER:
            for (uint32_t i = 0; i < m->n; i++) cluster_fill(want + i * b, a->t, a->count, (int)i, a->tag, CL_PAT_SMALL);
            break;
        case D_BROADCAST: cluster_fill(want, a->t, a->count, (int)a->root, a->tag, CL_PAT_SMALL); break;
        case D_ALLTOALL:
            for (uint32_t i = 0; i < m->n; i++)
                cluster_fill(want + i * b, a->t, a->count, a2a_block(i, m->rank), a->tag, CL_PAT_SMALL);
            break;
        case D_SENDRECV:
            cluster_fill(want, a->t, a->count, (int)((m->rank + m->n - 1) % m->n), a->tag, CL_PAT_SMALL);
            break;
        case D_REDUCE_SCATTER: {
            uint8_t *all = malloc(m->n * b + 1);
            CL_CHECK(all != NULL, "malloc");
            CL_CHECK(cluster_expected(all, a->t, m->n * a->count, a->op, idx, (int)m->n, a->tag, CL_PAT_SMALL) == 0,
                     "expected");
            memcpy(want, all + m->rank * b, b);
            free(all);
            break;
        }
        default:
            CL_CHECK(cluster_expected(want, a->t, a->count, a->op, idx, (int)m->n, a->tag, CL_PAT_SMALL) == 0,
                     "expected");
            break;
        }
    }
    for (int k = 0; k < 2; k++) {
        if (!m->dev[k]) continue;
        uint8_t *got = malloc(m->bytes[k]);
        CL_CHECK(got != NULL, "malloc");
        CUCHK(cudaMemcpy(got, m->dev[k], m->bytes[k], cudaMemcpyDeviceToHost));
        const uint8_t *base = m->dev[k], *o = m->out;
        size_t at = SIZE_MAX;
        if (want && o >= base && o < base + m->bytes[k]) at = (size_t)(o - base);
        if (at != SIZE_MAX) {
            size_t first = 0, bad = cluster_mismatches(got + at, want, a->t, m->out_bytes / es, &first);
            CL_CHECK(bad == 0,
                     "%s %s %s %zu x %s rank %u of %u root %u%s: %zu wrong elements on the device, first [%zu] = "
                     "%.9g, want %.9g",
                     dkind_names[a->kind], a->in_place ? "in-place" : "out-of-place", eccl_op_name(a->op), a->count,
                     eccl_dtype_name(a->t), m->rank, m->n, a->root, a->async ? " async" : "", bad, first,
                     cluster_load(got + at, a->t, first), cluster_load(want, a->t, first));
        }
        /* Every byte outside the output range: as before the call. */
        size_t lo = at == SIZE_MAX ? m->bytes[k] : at, hi = at == SIZE_MAX ? m->bytes[k] : at + m->out_bytes;
        CL_CHECK(memcmp(got, m->before[k], lo) == 0 && memcmp(got + hi, m->before[k] + hi, m->bytes[k] - hi) == 0,
                 "%s %s rank %u of %u root %u (%s): device buffer %d changed outside the output", dkind_names[a->kind],
                 a->in_place ? "in-place" : "out-of-place", m->rank, m->n, a->root, eccl_strerror(rc), k);
        free(got);
    }
    CL_CHECK(!m->host || memcmp(m->host, m->host_before, m->host_bytes) == 0,
             "%s rank %u: the unused host buffer off the root was written", dkind_names[a->kind], m->rank);
    free(want);
    return 0;
}

static int dcall_where(eccl_comm *c, uint32_t *rank, uint32_t *n)
{
    int64_t r, w;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &r));
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &w));
    *rank = (uint32_t)r;
    *n = (uint32_t)w;
    return 0;
}

/* One call that must succeed, checked. */
static int one_dcall(eccl_comm *c, const dcall *a)
{
    uint32_t rank, n;
    dmem m;
    if (dcall_where(c, &rank, &n) || dcall_prepare(a, rank, n, &m)) return 1;
    eccl_result rc = dcall_issue(c, a, m.in, m.out);
    CL_CHECK(rc == ECCL_OK, "%s %s %s x %zu root %u tag %llu%s: %s", dkind_names[a->kind],
             a->in_place ? "in-place" : "out-of-place", eccl_dtype_name(a->t), a->count, a->root,
             (unsigned long long)a->tag, a->async ? " async" : "", eccl_strerror(rc));
    int bad = dcall_check(a, &m, rc);
    dmem_free(&m);
    return bad;
}

/* Host and device memory mixed in one call: refused on the spot, with no
 * device byte written. Each peer names itself the root of its rooted
 * calls, so every peer's call is one that mixes (all are refused locally;
 * none waits for another). Pinned host memory is host memory. */
static int mixing_checks(eccl_comm *c, uint32_t rank)
{
    const size_t count = 64;
    void *d1, *d2, *pinned;
    uint8_t host[64 * 4 * CLUSTER_MAX_PEERS];
    uint8_t img[64 * 4 * CLUSTER_MAX_PEERS], got[64 * 4 * CLUSTER_MAX_PEERS];
    memset(img, 0x5e, sizeof img);
    memset(host, 0x11, sizeof host);
    CUCHK(cudaMalloc(&d1, sizeof img));
    CUCHK(cudaMalloc(&d2, sizeof img));
    CUCHK(cudaMallocHost(&pinned, sizeof img));
    CUCHK(cudaMemcpy(d1, img, sizeof img, cudaMemcpyHostToDevice));
    CUCHK(cudaMemcpy(d2, img, sizeof img, cudaMemcpyHostToDevice));
    const eccl_result inval = ECCL_ERR_INVALID_ARG;
    CL_EXPECT_RC(eccl_allgather(c, d1, host, count, ECCL_I32, 1, NULL), inval);
    CL_EXPECT_RC(eccl_allgather(c, host, d2, count, ECCL_I32, 1, NULL), inval);
    CL_EXPECT_RC(eccl_allgather(c, pinned, d2, count, ECCL_I32, 1, NULL), inval);
    CL_EXPECT_RC(eccl_reduce_scatter(c, d1, host, count, ECCL_I32, ECCL_SUM, 1, NULL), inval);
    CL_EXPECT_RC(eccl_reduce_scatter(c, host, d2, count, ECCL_I32, ECCL_SUM, 1, NULL), inval);
    CL_EXPECT_RC(eccl_broadcast(c, host, d2, count, ECCL_I32, rank, 1, NULL), inval);
    CL_EXPECT_RC(eccl_broadcast(c, d1, pinned, count, ECCL_I32, rank, 1, NULL), inval);
    CL_EXPECT_RC(eccl_reduce(c, d1, host, count, ECCL_I32, ECCL_SUM, rank, 1, NULL), inval);
    CL_EXPECT_RC(eccl_reduce(c, host, d2, count, ECCL_I32, ECCL_SUM, rank, 1, NULL), inval);
    eccl_request *r = NULL;
    CL_EXPECT_RC(eccl_allgather_async(c, d1, host, count, ECCL_I32, 1, &r), inval);
    CL_EXPECT_RC(eccl_reduce_async(c, host, d2, count, ECCL_I32, ECCL_SUM, rank, 1, &r), inval);
    CUCHK(cudaMemcpy(got, d1, sizeof got, cudaMemcpyDeviceToHost));
    CL_CHECK(memcmp(got, img, sizeof img) == 0, "a refused call wrote device memory");
    CUCHK(cudaMemcpy(got, d2, sizeof got, cudaMemcpyDeviceToHost));
    CL_CHECK(memcmp(got, img, sizeof img) == 0, "a refused call wrote device memory");
    for (size_t i = 0; i < sizeof host; i++) CL_CHECK(host[i] == 0x11, "a refused call wrote host memory");
    CUCHK(cudaFree(d1));
    CUCHK(cudaFree(d2));
    CUCHK(cudaFreeHost(pinned));
    return 0;
}

typedef struct dcolls_arg {
    size_t count, large;
} dcolls_arg;

/* Three peers: the refusals, a failed mirror allocation for each kind (on
 * every peer, so none waits: NO_MEMORY and no device byte written), then
 * every kind in and out of place, blocking and async, with every root and
 * every kind of unused buffer off the root; then blocks of two slices. */
static int dcolls_body(eccl_comm *c, int index, void *argp)
{
    (void)index;
    const dcolls_arg *g = argp;
    uint32_t rank, n;
    if (dcall_where(c, &rank, &n)) return 1;
    if (mixing_checks(c, rank)) return 1;
    uint64_t tag = 100;
    if (getenv("ECCL_TEST_MOCK_CUDA")) {
        for (int k = 0; k < D_KINDS; k++) {
            dcall a = {k, ECCL_I32, ECCL_SUM, g->count, k % 2 && k != D_SENDRECV, 0, tag++, k >= 2, OFF_NULL};
            dmem m;
            if (dcall_prepare(&a, rank, n, &m)) return 1;
            fiu_enable("eccl/mock_cudart/malloc", 1, NULL, 0);
            eccl_result rc = dcall_issue(c, &a, m.in, m.out);
            fiu_disable("eccl/mock_cudart/malloc");
            CL_EXPECT_RC(rc, ECCL_ERR_NO_MEMORY);
            if (dcall_check(&a, &m, rc)) return 1;
            dmem_free(&m);
        }
    }
    static const struct {
        eccl_dtype t;
        eccl_op op;
    } types[] = {{ECCL_I32, ECCL_SUM}, {ECCL_F32, ECCL_AVG}, {ECCL_BF16, ECCL_MAX}};
    for (int k = 0; k < D_KINDS; k++)
        for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
            for (int in_place = 0; in_place < (k == D_SENDRECV ? 1 : 2); in_place++) {
                int rooted = k == D_BROADCAST || k == D_REDUCE;
                for (int off = 0; off < (rooted ? 3 : 1); off++) {
                    dcall a = {k, types[ti].t, types[ti].op, g->count, in_place, (uint32_t)(tag % n), tag,
                               (int)(tag % 2), off};
                    tag++;
                    if (one_dcall(c, &a)) return 1;
                }
            }
    /* Blocks of more than one slice (1 MiB), not a multiple of it. */
    for (int k = 0; k < D_KINDS; k++) {
        dcall a = {k, ECCL_F32, ECCL_SUM, g->large, k % 2 && k != D_SENDRECV, (uint32_t)k % n, tag++, 0, OFF_NULL};
        if (one_dcall(c, &a)) return 1;
    }
    return 0;
}

static void test_colls_device(void **state)
{
    SKIP_WITHOUT_RUNTIME();
    cluster *cl = *state;
    dcolls_arg g = {1000, (1u << 20) / 4 + 1001};
    uint64_t t0 = cluster_now_ns();
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, 3, dcolls_body, &g), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    printf("    3 peers, every collective on device buffers: %.2f s\n", (double)(cluster_now_ns() - t0) / 1e9);
    cluster_fini(cl);
}

/* The same with reduce-scatter forced to recursive halving
 * (coll/rec_reduce_scatter.h): it runs on the call's host mirror, laid
 * out as the device buffers, and every device byte is read back. */
static int recursive_setup(void **state)
{
    setenv("ECCL_ALGO", "reduce_scatter=recursive", 1);
    return cluster_test_setup(state);
}

static int recursive_teardown(void **state)
{
    unsetenv("ECCL_ALGO");
    return cluster_test_teardown(state);
}

static void test_colls_device_recursive(void **state)
{
    SKIP_WITHOUT_RUNTIME();
    cluster *cl = *state;
    dcolls_arg g = {1000, (1u << 20) / 4 + 1001};
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, 3, dcolls_body, &g), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    cluster_fini(cl);
}

/* A peer killed mid-call (test_colls_mp's run_fault, on device buffers):
 * every survivor fails with PEER_LOST and no device byte of its call
 * written (the mirror is copied back only on success), and the same call
 * again runs on the survivors with every element right. */
#define DKILL_AFTER_SENDS 2 /* of the several MB each victim sends */
#define DV_ENTERED 2
#define DV_LOST 3
#define DV_STALE 4 /* the old world was still in place when the call failed */

static atomic_int g_dsends;

static int die_on_kth_send(const char *name, int *failnum, void **failinfo, unsigned int *flags)
{
    (void)name, (void)failnum, (void)failinfo, (void)flags;
    if (atomic_fetch_add(&g_dsends, 1) + 1 >= DKILL_AFTER_SENDS) raise(SIGKILL);
    return 0; /* the send itself goes through */
}

typedef struct dfault_arg {
    int kind, n;
    size_t count;
    int victim_rank;
    uint32_t root; /* a rank in both worlds */
} dfault_arg;

static int dfault_body(eccl_comm *c, int index, void *argp)
{
    const dfault_arg *f = argp;
    uint32_t rank, n;
    if (dcall_where(c, &rank, &n)) return 1;
    dcall a = {f->kind, ECCL_F32, ECCL_SUM, f->count, 0, f->root, 10, 0, OFF_NULL};
    CL_CHECK(one_dcall(c, &a) == 0, "warm-up"); /* the full world works */
    a.tag = 77;
    cluster_shared *sh = cluster_shm();
    if ((int)rank == f->victim_rank) {
        /* The survivors enter first, so the loss finds them inside the call. */
        for (int i = 0; i < f->n; i++)
            if (i != index)
                while (!atomic_load(&sh->slot[i].val[DV_ENTERED])) cluster_sleep_ms(1);
        cluster_sleep_ms(30);
        CL_CHECK(cluster_hook_sends(die_on_kth_send) == 0, "fiu");
    }
    dmem m;
    if (dcall_prepare(&a, rank, n, &m)) return 1;
    atomic_store(&sh->slot[index].val[DV_ENTERED], 1);
    eccl_result rc = dcall_issue(c, &a, m.in, m.out);
    CL_CHECK((int)rank != f->victim_rank, "the victim survived its failpoint");
    if (rc != ECCL_OK) {
        CL_CHECK(rc == ECCL_ERR_PEER_LOST, "%s on device buffers with a peer killed mid-call: %s, want PEER_LOST",
                 dkind_names[f->kind], eccl_strerror(rc));
        atomic_store(&sh->slot[index].val[DV_LOST], 1);
    }
    /* ECCL_OK: the loss came after every survivor had its output (the
     * master committed the call), which dcall_check verifies for the world
     * the call ran in; the parent checks that someone saw the loss. */
    if (dcall_check(&a, &m, rc)) return 1;
    dmem_free(&m);
    if (rc == ECCL_OK) return 0;
    /* The call fails when the master's VIEW_DECIDE arrives; the new world
     * (ECCL_ATTR_WORLD_SIZE, RANK) is installed only by the RING message
     * that follows it, and a layout-bound call made in between would fail
     * with PEER_LOST again (its world changes before it starts). Wait for
     * the new world, noting whether it lagged (the parent reports it). */
    if (dcall_where(c, &rank, &n)) return 1;
    if (n != (uint32_t)f->n - 1) atomic_store(&sh->slot[index].val[DV_STALE], 1);
    for (uint64_t t0 = cluster_now_ns(); n != (uint32_t)f->n - 1 && cluster_now_ns() - t0 < 10 * CL_SEC;) {
        cluster_sleep_ms(1);
        if (dcall_where(c, &rank, &n)) return 1;
    }
    CL_CHECK(n == (uint32_t)f->n - 1, "world %u 10 s after the loss", n);
    return one_dcall(c, &a); /* the same call again, on the survivors */
}

static void run_dfault(cluster *cl, const dfault_arg *f)
{
    SKIP_WITHOUT_RUNTIME();
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, f->n, dfault_body, (void *)f), 0);
    /* The victim dies of its own SIGKILL; everyone else passes. */
    assert_true(cluster_wait_self_killed(cl, f->n, f->victim_rank, 60000) >= 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    int lost = 0;
    for (int i = 0; i < f->n; i++) lost += (int)atomic_load(&cl->sh->slot[i].val[DV_LOST]);
    assert_true(lost >= 1); /* the failure path ran */
    for (int i = 0; i < f->n; i++)
        if (atomic_load(&cl->sh->slot[i].val[DV_STALE]))
            printf("    note: peer %d's call failed before the new world was installed\n", i);
    cluster_fini(cl);
}

/* 8 MB blocks: more than a link queues at once (ECCL_RING_MAX_QUEUED), so
 * the victim makes several sends and dies a frame or two into the call.
 * Three peers; the chains' victims sit in the middle, with survivors on
 * both sides. */
static void test_colls_device_kill_allgather(void **state)
{
    dfault_arg f = {D_ALLGATHER, 3, 2000000, 1, 0};
    run_dfault(*state, &f);
}

static void test_colls_device_kill_reduce_scatter(void **state)
{
    dfault_arg f = {D_REDUCE_SCATTER, 3, 2000000, 2, 0};
    run_dfault(*state, &f);
}

static void test_colls_device_kill_broadcast(void **state)
{
    /* 16 MB: each chain's half is more than a link queues at once, so the
     * victim cannot pass all of ring 0's half on before it dies. */
    dfault_arg f = {D_BROADCAST, 3, 4000000, 1, 0}; /* root 0 -> 1 (dies) -> 2, and 0 -> 2 -> 1 */
    run_dfault(*state, &f);
}

static void test_colls_device_kill_reduce(void **state)
{
    dfault_arg f = {D_REDUCE, 3, 2000000, 0, 1}; /* 2 -> 0 (dies) -> root 1 */
    run_dfault(*state, &f);
}


/* ---- a host-mate killed while its device memory is mapped (CUDA IPC) ------ */

/* Mappings of other processes' device memory in this one (the mock names
 * each export's memfd "eccl-mock-cuda-PID-..."): *live counts those whose
 * exporter runs, *dead those whose exporter is gone. */
static void count_imports(int *live, int *dead)
{
    *live = *dead = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        const char *m = strstr(line, "eccl-mock-cuda-");
        int pid;
        if (!m || sscanf(m, "eccl-mock-cuda-%d-", &pid) != 1 || pid == (int)getpid()) continue;
        if (kill(pid, 0) == 0 || errno != ESRCH) (*live)++;
        else (*dead)++;
    }
    if (f) fclose(f);
}

#define RK_ENTERED 2
#define RK_IMPORTS 3

static int resident_kill_body(eccl_comm *c, int index, void *arg)
{
    (void)arg;
    const size_t n = 4u << 20, bytes = n * 4; /* 16 MiB: many 1 MiB slices */
    const int victim = 1, peers = 3;
    cluster_shared *sh = cluster_shm();
    int32_t *h = malloc(bytes), *back = malloc(bytes);
    CL_CHECK(h && back, "malloc");
    for (size_t i = 0; i < n; i++) h[i] = (int32_t)(i + (size_t)index);
    void *d;
    CUCHK(cudaMalloc(&d, bytes));
    CUCHK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    /* Two clean calls: the first tells each sender that its host-mates
     * map device memory, the second sends straight from the device. */
    for (uint64_t tag = 1; tag <= 2; tag++) CL_OK(eccl_allreduce(c, d, d, n, ECCL_I32, ECCL_SUM, tag, NULL));
    CL_CHECK(read_back(d, h, bytes) == 0, "read back");
    int live, dead;
    count_imports(&live, &dead);
    atomic_store(&sh->slot[index].val[RK_IMPORTS], live);
    uint32_t rank, world;
    if (dcall_where(c, &rank, &world)) return 1;
    const int is_victim = (int)rank == victim;
    if (is_victim) {
        for (int i = 0; i < peers; i++)
            if (i != index)
                while (!atomic_load(&sh->slot[i].val[RK_ENTERED])) cluster_sleep_ms(1);
        cluster_sleep_ms(30);
        CL_CHECK(cluster_hook_sends(die_on_kth_send) == 0, "fiu");
    }
    atomic_store(&sh->slot[index].val[RK_ENTERED], 1);
    eccl_result rc = eccl_allreduce(c, d, d, n, ECCL_I32, ECCL_SUM, 3, NULL);
    CL_CHECK(!is_victim, "the victim survived its failpoint");
    CL_EXPECT_RC(rc, ECCL_ERR_PEER_LOST);
    CL_CHECK(read_back(d, back, bytes) == 0 && !memcmp(back, h, bytes),
             "peer %d's device buffer changed by a failed call", index);
    /* The links of the failed call are closed: nothing of the dead peer's
     * memory stays mapped here. */
    count_imports(&live, &dead);
    CL_CHECK(dead == 0, "%d mappings of a dead host-mate's device memory left", dead);
    /* The survivors' world re-forms; the same call again sums both inputs. */
    eccl_result retry = ECCL_ERR_PEER_LOST;
    for (int attempt = 0; attempt < 50 && retry == ECCL_ERR_PEER_LOST; attempt++) {
        retry = eccl_allreduce(c, d, d, n, ECCL_I32, ECCL_SUM, 3, NULL);
        if (retry == ECCL_ERR_PEER_LOST) cluster_sleep_ms(20);
    }
    CL_EXPECT_RC(retry, ECCL_OK);
    CL_CHECK(read_back(d, back, bytes) == 0, "read back");
    for (size_t i = 0; i < n; i++) {
        /* h holds 3 * (3i + 3) after the two calls, the same at every peer */
        CL_CHECK(back[i] == 2 * h[i], "retry: element %zu: %d, want %d", i, back[i], 2 * h[i]);
    }
    free(h);
    free(back);
    CUCHK(cudaFree(d));
    return 0;
}

/* The resident ring between host-mates sends its slices straight from
 * device memory, which the receivers map (CUDA IPC). A sender killed mid-call
 * fails the call on both survivors with their buffers restored, leaves no
 * mapping of its memory behind, and the retry on the two survivors sums. */
static void test_resident_ring_kill_unmaps(void **state)
{
    SKIP_WITHOUT_RUNTIME();
    if (!getenv("ECCL_TEST_MOCK_CUDA")) {
        printf("SKIP: the mappings are counted by the mock's names\n");
        skip();
    }
    const char *net = getenv("ECCL_NET"), *shm = getenv("ECCL_SHM");
    if ((net && strcmp(net, "ibv") == 0) || (shm && strcmp(shm, "0") == 0)) {
        printf("SKIP: CUDA IPC runs over net_shm\n");
        skip();
    }
    cluster *cl = *state;
    cluster_opts o = {.op_timeout_ms = 5000};
    setenv("ECCL_DEVICE_RING_MIN_BYTES", "1048576", 1); /* children inherit it */
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, 3, resident_kill_body, NULL), 0);
    assert_true(cluster_wait_self_killed(cl, 3, 1, 60000) >= 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    unsetenv("ECCL_DEVICE_RING_MIN_BYTES");
    for (int i = 0; i < 3; i++) {
        long k = (long)atomic_load(&cl->sh->slot[i].val[RK_IMPORTS]);
        printf("    peer %d mapped %ld host-mate allocations after the clean calls\n", i, k);
        assert_true(k >= 1); /* the device path ran */
    }
    cluster_fini(cl);
}

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
        cmocka_unit_test_setup_teardown(test_colls_device, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_colls_device_recursive, recursive_setup, recursive_teardown),
        cmocka_unit_test_setup_teardown(test_colls_device_kill_allgather, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_colls_device_kill_reduce_scatter, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_colls_device_kill_broadcast, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_colls_device_kill_reduce, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_resident_ring_kill_unmaps, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_host_dereference_traps, cluster_test_setup, cluster_test_teardown),
    };
    const char *filter = getenv("ECCL_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("cuda_mp", tests, NULL, NULL);
}
