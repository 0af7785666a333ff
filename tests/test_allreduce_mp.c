/* Multi-process all-reduce on loopback: a master and N peer processes
 * (tests/cluster.h). Every peer checks every element of its result against
 * an independently computed expectation, and the parent compares the result
 * hashes of all peers (bit parity). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fiu-control.h>
#include <fiu.h>

#include "cluster.h"

#define ALL_DTYPES ((1u << ECCL_DTYPE_COUNT) - 1)
#define DT(t) (1u << (t))
#define MODE_OUT 1
#define MODE_IN 2

static const char *mode_name(int in_place) { return in_place ? "in-place" : "out-of-place"; }

/* The algorithm every all-reduce must report when ECCL_ALGO forces one
 * (UINT32_MAX: the dispatcher's own choice). Set by the parent before it
 * spawns the peers, which inherit it. */
static uint32_t g_forced_algo = UINT32_MAX;

/* Whether a call of `bytes` runs the device-resident ring (the _resident
 * device suite moves every buffer to the device and sets
 * ECCL_DEVICE_RING_MIN_BYTES): that ring alone runs it, forced or not. */
static int device_resident(size_t bytes)
{
    const char *min = getenv("ECCL_DEVICE_RING_MIN_BYTES");
    return min && *min && bytes >= strtoull(min, NULL, 10);
}

/* Runs one all-reduce of the contributions of peers 0..n-1 and checks it
 * completely: result code, info, every element, sendbuf untouched when out
 * of place. Pushes the result hash for the parity check. */
static int one_allreduce(eccl_comm *c, int index, int n, eccl_dtype t, eccl_op op,
                         enum cluster_pattern pat, size_t count, int in_place, uint64_t tag,
                         uint8_t *send, uint8_t *recv, uint8_t *want)
{
    int idx[CLUSTER_MAX_PEERS];
    for (int i = 0; i < n; i++) idx[i] = i;
    size_t bytes = count * eccl_dtype_size(t);
    cluster_fill(send, t, count, index, tag, pat);
    uint8_t *out = in_place ? send : recv;
    if (!in_place) memset(recv, 0xa5, bytes);
    uint64_t send_hash = cluster_fnv1a(send, bytes);
    eccl_reduce_info info;
    memset(&info, 0xff, sizeof info);
    eccl_result rc = eccl_allreduce(c, send, out, count, t, op, tag, &info);
    CL_CHECK(rc == ECCL_OK, "%s %s %zu x %s tag %llu: %s", mode_name(in_place), eccl_op_name(op),
             count, eccl_dtype_name(t), (unsigned long long)tag, eccl_strerror(rc));
    CL_CHECK(info.world_size == (uint32_t)n, "info.world_size %u, want %d", info.world_size, n);
    /* The dispatcher (coll/dispatch.c): up to 64 KiB, recursive doubling
     * among three or four ranks, the tree among more; the ring otherwise. */
    uint32_t algo = device_resident(bytes)     ? ECCL_ALGO_RING
                    : g_forced_algo != UINT32_MAX ? g_forced_algo
                    : bytes > 65536 || n < 3 ? ECCL_ALGO_RING
                    : n <= 4                 ? ECCL_ALGO_RECURSIVE
                                             : ECCL_ALGO_TREE;
    CL_CHECK(count == 0 || info.algorithm == algo, "%zu bytes at N=%d ran algorithm %u, want %u",
             bytes, n, info.algorithm, algo);
    if (count > 0) {
        CL_CHECK(info.tx_bytes > 0 && info.rx_bytes > 0, "tx %llu rx %llu bytes for %zu elements",
                 (unsigned long long)info.tx_bytes, (unsigned long long)info.rx_bytes, count);
    } else {
        CL_CHECK(info.tx_bytes == 0 && info.rx_bytes == 0, "tx %llu rx %llu for count 0",
                 (unsigned long long)info.tx_bytes, (unsigned long long)info.rx_bytes);
    }
    if (!in_place)
        CL_CHECK(cluster_fnv1a(send, bytes) == send_hash, "out-of-place %s %s modified sendbuf",
                 eccl_op_name(op), eccl_dtype_name(t));
    if (cluster_expected(want, t, count, op, idx, n, tag, pat) == 0) {
        size_t first = 0, bad = cluster_mismatches(out, want, t, count, &first);
        CL_CHECK(bad == 0,
                 "%s %s %zu x %s (pattern %d, tag %llu, rank of %d): %zu wrong elements, first "
                 "[%zu] = %.9g, want %.9g",
                 mode_name(in_place), eccl_op_name(op), count, eccl_dtype_name(t), (int)pat,
                 (unsigned long long)tag, n, bad, first, cluster_load(out, t, first),
                 cluster_load(want, t, first));
    }
    cluster_push_hash(cluster_fnv1a(out, bytes));
    return 0;
}

/* ---- every dtype x every op ------------------------------------------------ */

typedef struct matrix_arg {
    int n;
    unsigned dtypes;
    int modes;
    size_t count;
    int int_random; /* also full-range random integers (wrap-around) */
    int float_random; /* random reals: parity (and exact MIN/MAX) only */
    const char *algo_env; /* ECCL_ALGO of every peer (NULL: unset) */
    uint32_t algo;        /* ... and the algorithm it forces */
} matrix_arg;

static int matrix_body(eccl_comm *c, int index, void *argp)
{
    const matrix_arg *a = argp;
    size_t cap = a->count * 8 + 64;
    uint8_t *send = malloc(cap), *recv = malloc(cap), *want = malloc(cap);
    CL_CHECK(send && recv && want, "out of memory");
    uint64_t tag = 1;
    for (int t = 0; t < ECCL_DTYPE_COUNT; t++) {
        if (!(a->dtypes & DT(t))) continue;
        int is_f = t == ECCL_F16 || t == ECCL_BF16 || t == ECCL_F32 || t == ECCL_F64;
        for (int op = 0; op < ECCL_OP_COUNT; op++) {
            enum cluster_pattern pats[2];
            int np = 0;
            if (!a->float_random || !is_f) pats[np++] = op == ECCL_PROD ? CL_PAT_PROD : CL_PAT_SMALL;
            if ((a->int_random && !is_f) || (a->float_random && is_f)) pats[np++] = CL_PAT_RANDOM;
            for (int p = 0; p < np; p++) {
                for (int m = 0; m < 2; m++) {
                    if (!(a->modes & (m ? MODE_IN : MODE_OUT))) continue;
                    if (one_allreduce(c, index, a->n, (eccl_dtype)t, (eccl_op)op, pats[p], a->count,
                                      m, tag++, send, recv, want))
                        return 1;
                }
            }
        }
    }
    free(send);
    free(recv);
    free(want);
    return 0;
}

/* Every peer must have produced the same number of results with the same
 * bits. */
static void assert_parity(cluster *cl, int n)
{
    int nh = cl->sh->slot[0].n_hash;
    assert_true(nh > 0);
    int bad = 0;
    for (int p = 1; p < n; p++) {
        assert_int_equal(cl->sh->slot[p].n_hash, nh);
        for (int k = 0; k < nh; k++) {
            if (cl->sh->slot[p].hash[k] != cl->sh->slot[0].hash[k]) {
                if (bad++ < 10)
                    fprintf(stderr, "parity: result %d differs: peer 0 %016llx, peer %d %016llx\n",
                            k, (unsigned long long)cl->sh->slot[0].hash[k], p,
                            (unsigned long long)cl->sh->slot[p].hash[k]);
            }
        }
    }
    assert_int_equal(bad, 0);
}

static void run_matrix(cluster *cl, const matrix_arg *a)
{
    uint64_t t0 = cluster_now_ns();
    cluster_opts o = {.algo_env = a->algo_env};
    g_forced_algo = a->algo_env ? a->algo : UINT32_MAX;
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, a->n, matrix_body, (void *)a), 0);
    assert_int_equal(cluster_wait_all(cl, 90000), 0);
    g_forced_algo = UINT32_MAX;
    for (int p = 0; p < a->n; p++) assert_int_equal(cl->sh->slot[p].world, a->n);
    assert_parity(cl, a->n);
    printf("    N=%d: %d all-reduces of %zu elements per peer, %.2f s\n", a->n,
           cl->sh->slot[0].n_hash, a->count, (double)(cluster_now_ns() - t0) / 1e9);
    cluster_fini(cl);
}

/* N=3: all 12 dtypes x all 5 ops, in and out of place, plus full-range
 * random integers (wrap-around sums and products). */
static void test_matrix_n3(void **state)
{
    matrix_arg a = {.n = 3, .dtypes = ALL_DTYPES, .modes = MODE_IN | MODE_OUT, .count = 1031,
                    .int_random = 1};
    run_matrix(*state, &a);
}

static void test_matrix_n2(void **state)
{
    matrix_arg a = {.n = 2, .dtypes = ALL_DTYPES, .modes = MODE_IN | MODE_OUT, .count = 517,
                    .int_random = 1};
    run_matrix(*state, &a);
}

/* Large enough for two rings and several slices per chunk for 8-byte types. */
static void test_matrix_n4_two_rings(void **state)
{
    matrix_arg a = {.n = 4,
                    .dtypes = DT(ECCL_I8) | DT(ECCL_U16) | DT(ECCL_I32) | DT(ECCL_U64) |
                              DT(ECCL_F16) | DT(ECCL_BF16) | DT(ECCL_F32) | DT(ECCL_F64),
                    .modes = MODE_IN,
                    .count = 1200007};
    run_matrix(*state, &a);
}

static void test_matrix_n8(void **state)
{
    matrix_arg a = {.n = 8,
                    .dtypes = DT(ECCL_I8) | DT(ECCL_U32) | DT(ECCL_I64) | DT(ECCL_F16) |
                              DT(ECCL_BF16) | DT(ECCL_F32) | DT(ECCL_F64),
                    .modes = MODE_IN | MODE_OUT,
                    .count = 263,
                    .int_random = 1};
    run_matrix(*state, &a);
}

/* Non-integer floats: the exact sum is unknown (rounding depends on the
 * order), but every peer must end with the same bits; MIN/MAX are exact. */
static void test_random_floats_parity_n3(void **state)
{
    matrix_arg a = {.n = 3,
                    .dtypes = DT(ECCL_F16) | DT(ECCL_BF16) | DT(ECCL_F32) | DT(ECCL_F64),
                    .modes = MODE_IN | MODE_OUT,
                    .count = 300007,
                    .float_random = 1};
    run_matrix(*state, &a);
}

static void test_random_floats_parity_n5(void **state)
{
    matrix_arg a = {.n = 5,
                    .dtypes = DT(ECCL_BF16) | DT(ECCL_F32) | DT(ECCL_F64),
                    .modes = MODE_OUT,
                    .count = 40009,
                    .float_random = 1};
    run_matrix(*state, &a);
}

/* ---- counts ------------------------------------------------------------------ */

typedef struct counts_arg {
    int n;
    size_t counts[8];
    int n_counts;
} counts_arg;

static int counts_body(eccl_comm *c, int index, void *argp)
{
    const counts_arg *a = argp;
    static const struct {
        eccl_dtype t;
        eccl_op op;
    } kinds[] = {{ECCL_F32, ECCL_SUM}, {ECCL_I16, ECCL_MAX}, {ECCL_U8, ECCL_SUM},
                 {ECCL_F64, ECCL_AVG}, {ECCL_BF16, ECCL_MIN}};
    size_t maxc = 0;
    for (int i = 0; i < a->n_counts; i++) maxc = a->counts[i] > maxc ? a->counts[i] : maxc;
    size_t cap = maxc * 8 + 64;
    uint8_t *send = malloc(cap), *recv = malloc(cap), *want = malloc(cap);
    CL_CHECK(send && recv && want, "out of memory");
    uint64_t tag = 1;
    /* count 0 needs no buffer at all. It completes locally, with the world
     * as this peer sees it: checked first, while no peer can have left. */
    eccl_reduce_info info;
    CL_OK(eccl_allreduce(c, NULL, NULL, 0, ECCL_F32, ECCL_SUM, tag++, &info));
    CL_CHECK(info.world_size == (uint32_t)a->n && info.tx_bytes == 0 && info.rx_bytes == 0,
             "count 0 with NULL buffers: world %u tx %llu rx %llu", info.world_size,
             (unsigned long long)info.tx_bytes, (unsigned long long)info.rx_bytes);
    for (int i = 0; i < a->n_counts; i++)
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
            for (int m = 0; m < 2; m++)
                if (one_allreduce(c, index, a->n, kinds[k].t, kinds[k].op, CL_PAT_SMALL,
                                  a->counts[i], m, tag++, send, recv, want))
                    return 1;
    free(send);
    free(recv);
    free(want);
    return 0;
}

static void run_counts(cluster *cl, counts_arg *a)
{
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, a->n, counts_body, a), 0);
    assert_int_equal(cluster_wait_all(cl, 90000), 0);
    assert_parity(cl, a->n);
    cluster_fini(cl);
}

/* 0, 1, N-1, N, N+1 and an odd prime above a million (two rings, uneven
 * chunks, several slices). */
static void test_counts_n3(void **state)
{
    counts_arg a = {.n = 3, .counts = {0, 1, 2, 3, 4, 1000003}, .n_counts = 6};
    run_counts(*state, &a);
}

static void test_counts_n8(void **state)
{
    counts_arg a = {.n = 8, .counts = {0, 1, 7, 8, 9, 65537}, .n_counts = 6};
    run_counts(*state, &a);
}

/* ---- 256 MiB ---------------------------------------------------------------- */

#define BIG_COUNT (64u << 20) /* f32 elements: 256 MiB */

static int big_body(eccl_comm *c, int index, void *argp)
{
    (void)argp;
    size_t bytes = (size_t)BIG_COUNT * 4;
    uint8_t *buf = malloc(bytes), *want = malloc(bytes);
    CL_CHECK(buf && want, "cannot allocate 2 x 256 MiB");
    int idx[2] = {0, 1};
    cluster_fill(buf, ECCL_F32, BIG_COUNT, index, 77, CL_PAT_SMALL);
    uint64_t pre = cluster_fnv1a(buf, bytes);
    eccl_reduce_info info;
    uint64_t t0 = cluster_now_ns();
    eccl_result rc = eccl_allreduce(c, buf, buf, BIG_COUNT, ECCL_F32, ECCL_SUM, 77, &info);
    uint64_t dt = cluster_now_ns() - t0;
    uint64_t post = cluster_fnv1a(buf, bytes);
    cluster_record(77, rc, info.world_size, t0, t0 + dt, pre, post);
    CL_OK(rc);
    CL_CHECK(info.world_size == 2, "world %u", info.world_size);
    CL_CHECK(cluster_expected(want, ECCL_F32, BIG_COUNT, ECCL_SUM, idx, 2, 77, CL_PAT_SMALL) == 0,
             "expected");
    size_t first = 0, bad = cluster_mismatches(buf, want, ECCL_F32, BIG_COUNT, &first);
    CL_CHECK(bad == 0, "%zu wrong elements, first [%zu] = %g want %g", bad, first,
             cluster_load(buf, ECCL_F32, first), cluster_load(want, ECCL_F32, first));
    cluster_push_hash(post);
    free(buf);
    free(want);
    return 0;
}

/* One 256 MiB f32 all-reduce (64M elements) in place at N=2. */
static void test_big_256mib_n2(void **state)
{
    cluster *cl = *state;
    /* ~1 s expected. 768 MiB of buffers per peer: on a loaded host page
     * faults and copies can starve heartbeats past the 2 s default, which
     * is not what this test is about. */
    cluster_opts o = {.op_timeout_ms = 30000, .peer_timeout_ms = 10000};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, 2, big_body, NULL), 0);
    assert_int_equal(cluster_wait_all(cl, 120000), 0);
    assert_parity(cl, 2);
    for (int p = 0; p < 2; p++) {
        const cluster_event *e = &cl->sh->slot[p].ev[0];
        printf("    peer %d: 256 MiB f32 in-place all-reduce at N=2 took %.3f s (%.0f MB/s)\n", p,
               (double)e->elapsed_ns / 1e9, 268.435456 / ((double)e->elapsed_ns / 1e9));
    }
    cluster_fini(cl);
}

/* Two peers, buffers much larger than what one link queues at a time
 * (ECCL_RING_MAX_QUEUED, 4 MiB): a peer that has received everything must
 * still send the rest of its own share before it may return, or the other
 * peer never completes. In and out of place, back to back. */
#define MID_COUNT (16u << 20) /* f32: 64 MiB */
static int mid_body(eccl_comm *c, int index, void *argp)
{
    (void)argp;
    size_t bytes = (size_t)MID_COUNT * 4;
    uint8_t *send = malloc(bytes), *recv = malloc(bytes), *want = malloc(bytes);
    CL_CHECK(send && recv && want, "oom");
    int idx[2] = {0, 1};
    for (int k = 0; k < 4; k++) {
        int in_place = k % 2;
        uint64_t tag = 30 + (uint64_t)k;
        cluster_fill(send, ECCL_F32, MID_COUNT, index, tag, CL_PAT_SMALL);
        uint8_t *out = in_place ? send : recv;
        eccl_reduce_info info;
        uint64_t t0 = cluster_now_ns();
        eccl_result rc = eccl_allreduce(c, send, out, MID_COUNT, ECCL_F32, ECCL_SUM, tag, &info);
        uint64_t t1 = cluster_now_ns();
        cluster_record(tag, rc, info.world_size, t0, t1, 0, 0);
        CL_CHECK(rc == ECCL_OK, "64 MiB %s call %d: %s after %.0f ms", mode_name(in_place), k,
                 eccl_strerror(rc), (double)(t1 - t0) / 1e6);
        cluster_expected(want, ECCL_F32, MID_COUNT, ECCL_SUM, idx, 2, tag, CL_PAT_SMALL);
        size_t first = 0, bad = cluster_mismatches(out, want, ECCL_F32, MID_COUNT, &first);
        CL_CHECK(bad == 0, "64 MiB call %d: %zu wrong elements", k, bad);
        cluster_push_hash(cluster_fnv1a(out, bytes));
    }
    free(send);
    free(recv);
    free(want);
    return 0;
}

static void test_large_n2(void **state)
{
    cluster *cl = *state;
    /* The hang this catches never ends; 20 s only keeps a loaded machine's
     * 64 MiB call (mock-CUDA staging at 12 MB/s under 6 busy loops) from
     * looking like one. */
    cluster_opts o = {.op_timeout_ms = 20000, .peer_timeout_ms = 5000};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, 2, mid_body, NULL), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    assert_parity(cl, 2);
    cluster_fini(cl);
}

/* ---- tags and the async API --------------------------------------------------- */

static int check_result(const uint8_t *out, eccl_dtype t, eccl_op op, enum cluster_pattern pat,
                        size_t count, int n, uint64_t seed, const char *what)
{
    int idx[CLUSTER_MAX_PEERS];
    for (int i = 0; i < n; i++) idx[i] = i;
    return cluster_check_values(out, t, op, pat, count, idx, n, seed, what);
}

#define ASYNC_N 3
static int tags_body(eccl_comm *c, int index, void *argp)
{
    (void)argp;
    const int n = ASYNC_N;
    eccl_reduce_info info;

    /* Consecutive blocking calls, each with its own tag and shape. */
    for (int k = 0; k < 16; k++) {
        size_t count = (size_t)k * 37 + 1;
        int32_t buf[16 * 37 + 1];
        cluster_fill(buf, ECCL_I32, count, index, 100 + k, CL_PAT_SMALL);
        CL_OK(eccl_allreduce(c, buf, buf, count, ECCL_I32, ECCL_SUM, 100 + k, &info));
        if (check_result((uint8_t *)buf, ECCL_I32, ECCL_SUM, CL_PAT_SMALL, count, n, 100 + k,
                         "consecutive"))
            return 1;
    }

    /* Three in flight at once, issued in a different order on every peer
     * and waited for in yet another order. */
    {
        static const struct {
            eccl_dtype t;
            eccl_op op;
            size_t count;
        } sh[3] = {{ECCL_F32, ECCL_SUM, 300000}, {ECCL_I64, ECCL_MAX, 777}, {ECCL_BF16, ECCL_AVG, 50001}};
        uint8_t *buf[3];
        eccl_request *req[3] = {NULL, NULL, NULL};
        for (int i = 0; i < 3; i++) {
            buf[i] = malloc(sh[i].count * 8);
            CL_CHECK(buf[i], "oom");
            cluster_fill(buf[i], sh[i].t, sh[i].count, index, 200 + i, CL_PAT_SMALL);
        }
        for (int j = 0; j < 3; j++) {
            int i = (j + index) % 3;
            CL_OK(eccl_allreduce_async(c, buf[i], buf[i], sh[i].count, sh[i].t, sh[i].op, 200 + i,
                                       &req[i]));
            CL_CHECK(req[i] != NULL, "no request");
        }
        for (int j = 0; j < 3; j++) {
            int i = (2 * index + 2 - j + 3) % 3;
            CL_OK(eccl_wait(req[i], &info));
            CL_CHECK(info.world_size == (uint32_t)n && info.tx_bytes > 0 && info.rx_bytes > 0,
                     "async info: world %u tx %llu rx %llu", info.world_size,
                     (unsigned long long)info.tx_bytes, (unsigned long long)info.rx_bytes);
            if (check_result(buf[i], sh[i].t, sh[i].op, CL_PAT_SMALL, sh[i].count, n, 200 + i,
                             "concurrent async"))
                return 1;
            free(buf[i]);
        }
    }

    /* eccl_test polling until done. */
    {
        size_t count = 1u << 20;
        float *buf = malloc(count * 4);
        CL_CHECK(buf, "oom");
        cluster_fill(buf, ECCL_F32, count, index, 300, CL_PAT_SMALL);
        eccl_request *req = NULL;
        CL_OK(eccl_allreduce_async(c, buf, buf, count, ECCL_F32, ECCL_SUM, 300, &req));
        int done = 0;
        long polls = 0;
        uint64_t deadline = cluster_now_ns() + 20 * CL_SEC;
        while (!done && cluster_now_ns() < deadline) {
            eccl_result rc = eccl_test(req, &done, &info);
            polls++;
            CL_CHECK(rc == ECCL_OK, "eccl_test: %s", eccl_strerror(rc));
            if (!done) usleep(100);
        }
        CL_CHECK(done, "eccl_test never reported completion (%ld polls)", polls);
        CL_CHECK(info.world_size == (uint32_t)n, "world %u", info.world_size);
        atomic_store(&cluster_self()->val[0], polls);
        if (check_result((uint8_t *)buf, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, count, n, 300, "polled"))
            return 1;
        free(buf);
    }

    /* A tag already in flight is refused; so is a topology update. Peer 0
     * holds tag 400 in flight (the others have not called it yet, so it
     * cannot complete) while it checks. */
    {
        size_t count = 4096;
        int32_t *buf = malloc(count * 4), *other = malloc(count * 4);
        CL_CHECK(buf && other, "oom");
        cluster_fill(buf, ECCL_I32, count, index, 400, CL_PAT_SMALL);
        eccl_request *req = NULL, *dup = NULL;
        if (index == 0) {
            CL_OK(eccl_allreduce_async(c, buf, buf, count, ECCL_I32, ECCL_SUM, 400, &req));
            CL_EXPECT_RC(eccl_allreduce_async(c, other, other, count, ECCL_I32, ECCL_SUM, 400, &dup),
                         ECCL_ERR_BUSY);
            CL_CHECK(dup == NULL, "a refused call returned a request");
            CL_EXPECT_RC(eccl_allreduce(c, other, other, count, ECCL_I32, ECCL_SUM, 400, NULL),
                         ECCL_ERR_BUSY);
            CL_EXPECT_RC(eccl_comm_update_topology(c), ECCL_ERR_BUSY);
            int done = 1;
            CL_OK(eccl_test(req, &done, NULL));
            CL_CHECK(!done, "tag 400 completed without the other peers");
            atomic_store(&cluster_shm()->ctl[0], 1);
        } else {
            CL_CHECK(cluster_wait_ctl(0, 1, 20000) == 0, "peer 0 never released tag 400");
            CL_OK(eccl_allreduce_async(c, buf, buf, count, ECCL_I32, ECCL_SUM, 400, &req));
        }
        CL_OK(eccl_wait(req, &info));
        if (check_result((uint8_t *)buf, ECCL_I32, ECCL_SUM, CL_PAT_SMALL, count, n, 400, "busy tag"))
            return 1;
        free(buf);
        free(other);
    }
    return 0;
}

static void test_tags_async_n3(void **state)
{
    cluster *cl = *state;
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, ASYNC_N, tags_body, NULL), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    for (int p = 0; p < ASYNC_N; p++)
        printf("    peer %d: eccl_test polled %lld times\n", p,
               (long long)atomic_load(&cl->sh->slot[p].val[0]));
    cluster_fini(cl);
}

/* The same tag again and again: the API allows reusing a tag once the call
 * that used it returned. Back-to-back reuse races the previous call's
 * done tokens on the neighbours. */
#define REUSE_ROUNDS 200
static int reuse_body(eccl_comm *c, int index, void *argp)
{
    int n = *(int *)argp;
    for (int k = 0; k < REUSE_ROUNDS; k++) {
        int32_t send[64], buf[64];
        cluster_fill(send, ECCL_I32, 64, index, (uint64_t)k, CL_PAT_SMALL);
        eccl_reduce_info info;
        uint64_t t0 = cluster_now_ns();
        eccl_result rc = eccl_allreduce(c, send, buf, 64, ECCL_I32, ECCL_SUM, 7, &info);
        CL_CHECK(rc == ECCL_OK, "round %d of tag 7: %s after %.1f ms", k, eccl_strerror(rc),
                 (double)(cluster_now_ns() - t0) / 1e6);
        if (check_result((uint8_t *)buf, ECCL_I32, ECCL_SUM, CL_PAT_SMALL, 64, n, (uint64_t)k,
                         "reused tag"))
            return 1;
        atomic_store(&cluster_self()->finished, k + 1);
    }
    return 0;
}

static void run_reuse(cluster *cl, int n)
{
    cluster_opts o = {.op_timeout_ms = 5000};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, n, reuse_body, &n), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    cluster_fini(cl);
}

static void test_tag_reuse_n2(void **state) { run_reuse(*state, 2); }
static void test_tag_reuse_n3(void **state) { run_reuse(*state, 3); }

/* ---- ECCL_PROGRESS_THREAD=0: progress inside calls only ------------------------- */

static long own_threads(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long n = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %ld", &n) == 1) break;
    if (f) fclose(f);
    return n;
}

static int threads_body(eccl_comm *c, int index, void *argp)
{
    atomic_store(&cluster_self()->val[1], own_threads());
    if (reuse_body(c, index, argp)) return 1;
    /* An async op completed by nothing but eccl_test polls. */
    int n = *(int *)argp;
    int32_t send[64], buf[64];
    cluster_fill(send, ECCL_I32, 64, index, 99, CL_PAT_SMALL);
    eccl_request *req = NULL;
    eccl_result rc = eccl_allreduce_async(c, send, buf, 64, ECCL_I32, ECCL_SUM, 8, &req);
    CL_CHECK(rc == ECCL_OK, "async: %s", eccl_strerror(rc));
    int done = 0;
    uint64_t t0 = cluster_now_ns();
    while (!done && rc == ECCL_OK && cluster_now_ns() - t0 < 20000000000ull) {
        rc = eccl_test(req, &done, NULL);
        if (!done) usleep(100);
    }
    CL_CHECK(rc == ECCL_OK && done, "eccl_test: %s, done %d after %.0f ms", eccl_strerror(rc), done,
             (double)(cluster_now_ns() - t0) / 1e6);
    return check_result((uint8_t *)buf, ECCL_I32, ECCL_SUM, CL_PAT_SMALL, 64, n, 99, "async by test");
}

/* With the thread off a peer has one thread fewer than with the default
 * (transports and device mocks may run their own), and back-to-back calls
 * (the workload it is for) still complete and check, on every peer, as does
 * an async op that only eccl_test polls. */
static long run_progress_thread(cluster *cl, int off)
{
    int n = 3;
    cluster_opts o = {.op_timeout_ms = 5000, .no_progress_thread = off};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, n, threads_body, &n), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    long threads = atomic_load(&cl->sh->slot[0].val[1]);
    for (int i = 1; i < n; i++) assert_int_equal(atomic_load(&cl->sh->slot[i].val[1]), threads);
    printf("    ECCL_PROGRESS_THREAD=%d: %ld thread(s) per peer, %d checked all-reduces and one async "
           "by eccl_test each\n", !off, threads, REUSE_ROUNDS);
    cluster_fini(cl);
    return threads;
}

static void test_progress_thread(void **state)
{
    long on = run_progress_thread(*state, 0);
    long off = run_progress_thread(*state, 1);
    assert_int_equal(off, on - 1);
}

/* ---- invalid arguments ------------------------------------------------------------ */

static int invalid_body(eccl_comm *c, int index, void *argp)
{
    (void)argp;
    float buf[8] = {0};
    eccl_request *req = NULL;
    CL_EXPECT_RC(eccl_allreduce(c, NULL, buf, 8, ECCL_F32, ECCL_SUM, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allreduce(c, buf, NULL, 8, ECCL_F32, ECCL_SUM, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allreduce(c, buf, buf, 8, ECCL_DTYPE_COUNT, ECCL_SUM, 1, NULL),
                 ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allreduce(c, buf, buf, 8, (eccl_dtype)-1, ECCL_SUM, 1, NULL),
                 ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allreduce(c, buf, buf, 8, ECCL_F32, ECCL_OP_COUNT, 1, NULL),
                 ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allreduce(c, buf, buf, 8, ECCL_F32, (eccl_op)77, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allreduce(c, buf, buf, SIZE_MAX, ECCL_F32, ECCL_SUM, 1, NULL),
                 ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allreduce(NULL, buf, buf, 8, ECCL_F32, ECCL_SUM, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allreduce_async(c, NULL, buf, 8, ECCL_F32, ECCL_SUM, 1, &req),
                 ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allreduce_async(c, buf, buf, 8, ECCL_F32, ECCL_SUM, 1, NULL),
                 ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_wait(NULL, NULL), ECCL_ERR_INVALID_ARG);
    int done = 0;
    CL_EXPECT_RC(eccl_test(NULL, &done, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_comm_get_attr(c, (eccl_attr)99, &(int64_t){0}), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_comm_get_attr(c, ECCL_ATTR_RANK, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_comm_peers_pending(c, NULL), ECCL_ERR_INVALID_ARG);
    /* None of that disturbed the communicator (out of place: the
     * in-place two-peer path is test_matrix_n2's business). */
    float send[8];
    cluster_fill(send, ECCL_F32, 8, index, 5, CL_PAT_SMALL);
    CL_OK(eccl_allreduce(c, send, buf, 8, ECCL_F32, ECCL_SUM, 1, NULL));
    return check_result((uint8_t *)buf, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, 8, 2, 5, "after invalid");
}

/* A communicator that never connected: calls fail with NOT_CONNECTED,
 * whatever the master is doing. */
static int unconnected_proc(cluster *cl, int index, void *arg)
{
    (void)index, (void)arg;
    eccl_comm_params p;
    eccl_comm *c = NULL;
    eccl_comm_params_init(&p);
    CL_EXPECT_RC(eccl_comm_create(&p, &c), ECCL_ERR_INVALID_ARG); /* no master_addr */
    CL_EXPECT_RC(eccl_comm_create(NULL, &c), ECCL_ERR_INVALID_ARG);
    p.master_addr = cl->sh->master_addr;
    CL_EXPECT_RC(eccl_comm_create(&p, NULL), ECCL_ERR_INVALID_ARG);
    CL_OK(eccl_comm_create(&p, &c));
    float buf[4] = {1, 2, 3, 4};
    eccl_request *req = NULL;
    uint32_t pending = 0;
    int64_t v = -1;
    CL_EXPECT_RC(eccl_allreduce(c, buf, buf, 4, ECCL_F32, ECCL_SUM, 1, NULL), ECCL_ERR_NOT_CONNECTED);
    CL_EXPECT_RC(eccl_allreduce_async(c, buf, buf, 4, ECCL_F32, ECCL_SUM, 1, &req),
                 ECCL_ERR_NOT_CONNECTED);
    CL_CHECK(req == NULL, "request from a refused call");
    CL_EXPECT_RC(eccl_allreduce(c, NULL, NULL, 0, ECCL_F32, ECCL_SUM, 1, NULL), ECCL_ERR_NOT_CONNECTED);
    CL_EXPECT_RC(eccl_comm_peers_pending(c, &pending), ECCL_ERR_NOT_CONNECTED);
    CL_EXPECT_RC(eccl_comm_update_topology(c), ECCL_ERR_NOT_CONNECTED);
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &v));
    CL_CHECK(v == 0, "world %lld before connect", (long long)v);
    CL_CHECK(buf[0] == 1 && buf[3] == 4, "buffer touched");
    eccl_comm_destroy(c);
    return 0;
}

/* Nobody listens at the master address: connect gives up with
 * ECCL_ERR_CONNECT after connect_timeout_ms, not later. */
static int no_master_proc(cluster *cl, int index, void *arg)
{
    (void)cl, (void)index;
    eccl_comm_params p;
    eccl_comm *c = NULL;
    eccl_comm_params_init(&p);
    p.master_addr = arg;
    p.connect_timeout_ms = 500;
    p.op_timeout_ms = 5000;
    CL_OK(eccl_comm_create(&p, &c));
    uint64_t t0 = cluster_now_ns();
    eccl_result rc = eccl_comm_connect(c);
    uint64_t dt = cluster_now_ns() - t0;
    CL_CHECK(rc == ECCL_ERR_CONNECT, "connect to a dead address: %s", eccl_strerror(rc));
    CL_CHECK(dt < 3 * CL_SEC, "connect took %.1f ms with a 500 ms timeout", (double)dt / 1e6);
    atomic_store(&cluster_self()->val[0], (long long)dt);
    float x = 1;
    CL_EXPECT_RC(eccl_allreduce(c, &x, &x, 1, ECCL_F32, ECCL_SUM, 1, NULL), ECCL_ERR_CONNECT);
    eccl_comm_destroy(c);
    return 0;
}

static void test_invalid_args(void **state)
{
    cluster *cl = *state;
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, 2, invalid_body, NULL), 0);
    assert_int_equal(cluster_fork(cl, 2, unconnected_proc, NULL), 0);
    /* Port 1 (tcpmux): nothing listens there on a test box, so every
     * attempt is refused at once and connect retries until its timeout. */
    static char dead[64] = "127.0.0.1:1";
    assert_int_equal(cluster_fork(cl, 3, no_master_proc, dead), 0);
    assert_int_equal(cluster_wait_all(cl, 30000), 0);
    printf("    connect to a dead master gave up after %.0f ms\n",
           (double)atomic_load(&cl->sh->slot[3].val[0]) / 1e6);
    cluster_fini(cl);
}

/* ---- a single peer ------------------------------------------------------------------ */

static int single_body(eccl_comm *c, int index, void *argp)
{
    (void)index, (void)argp;
    int64_t w = 0;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &w));
    CL_CHECK(w == 1, "world %lld", (long long)w);
    float buf[16], send[16];
    for (int i = 0; i < 16; i++) buf[i] = (float)i, send[i] = 100.0f + (float)i;
    uint64_t h = cluster_fnv1a(buf, sizeof buf);
    eccl_reduce_info info;
    CL_EXPECT_RC(eccl_allreduce(c, buf, buf, 16, ECCL_F32, ECCL_SUM, 1, &info), ECCL_ERR_TOO_FEW_PEERS);
    CL_CHECK(cluster_fnv1a(buf, sizeof buf) == h, "in-place buffer changed by a refused call");
    CL_EXPECT_RC(eccl_allreduce(c, send, buf, 16, ECCL_F32, ECCL_SUM, 2, &info), ECCL_ERR_TOO_FEW_PEERS);
    CL_CHECK(cluster_fnv1a(buf, sizeof buf) == h, "recvbuf changed by a refused call");
    CL_EXPECT_RC(eccl_allreduce(c, NULL, NULL, 0, ECCL_F32, ECCL_SUM, 3, &info), ECCL_ERR_TOO_FEW_PEERS);
    eccl_request *req = NULL;
    eccl_result rc = eccl_allreduce_async(c, buf, buf, 16, ECCL_F32, ECCL_SUM, 4, &req);
    if (rc == ECCL_OK) rc = eccl_wait(req, &info);
    CL_CHECK(rc == ECCL_ERR_TOO_FEW_PEERS, "async single peer: %s", eccl_strerror(rc));
    CL_CHECK(info.world_size == 1, "info.world_size %u", info.world_size);
    /* Alone, nothing is pending and a topology update with nobody to admit
     * must not hang. */
    uint32_t pending = 99;
    CL_OK(eccl_comm_peers_pending(c, &pending));
    CL_CHECK(pending == 0, "pending %u", pending);
    return 0;
}

static void test_single_peer(void **state)
{
    cluster *cl = *state;
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, 1, single_body, NULL), 0);
    assert_int_equal(cluster_wait_all(cl, 30000), 0);
    cluster_fini(cl);
}

/* ---- the recursive all-reduce (ECCL_ALGO=allreduce=recursive) -------------------
 *
 * Worlds that are not powers of two (3, 5, 6: extra ranks fold in and get
 * the result back), every dtype and op exact, doubling (small) and halving
 * (large, several 1 MiB slices) sizes; async calls issued and waited for in
 * a different order on every peer, tags reused back to back; and a peer
 * killed mid-call: the survivors agree (all fail with PEER_LOST and their
 * buffers exactly as before, or all succeed), then the retry on the
 * survivors is exact. */

#define REC_ENV "allreduce=recursive"

static void test_rec_matrix_n3(void **state)
{
    matrix_arg a = {.n = 3, .dtypes = ALL_DTYPES, .modes = MODE_IN | MODE_OUT, .count = 1031,
                    .int_random = 1, .algo_env = REC_ENV, .algo = ECCL_ALGO_RECURSIVE};
    run_matrix(*state, &a);
}

static void test_rec_matrix_n5(void **state)
{
    matrix_arg a = {.n = 5, .dtypes = ALL_DTYPES, .modes = MODE_IN | MODE_OUT, .count = 77,
                    .int_random = 1, .algo_env = REC_ENV, .algo = ECCL_ALGO_RECURSIVE};
    run_matrix(*state, &a);
}

/* Halving: 2.4 MB of f32 (folds of three 1 MiB slices), odd counts. */
static void test_rec_matrix_n6_large(void **state)
{
    matrix_arg a = {.n = 6,
                    .dtypes = DT(ECCL_I8) | DT(ECCL_U16) | DT(ECCL_I32) | DT(ECCL_U64) | DT(ECCL_BF16) |
                              DT(ECCL_F32) | DT(ECCL_F64),
                    .modes = MODE_IN,
                    .count = 600001,
                    .int_random = 1,
                    .algo_env = REC_ENV,
                    .algo = ECCL_ALGO_RECURSIVE};
    run_matrix(*state, &a);
}

static void test_rec_random_floats_n5(void **state)
{
    matrix_arg a = {.n = 5, .dtypes = DT(ECCL_F16) | DT(ECCL_BF16) | DT(ECCL_F32) | DT(ECCL_F64),
                    .modes = MODE_OUT, .count = 40000, .float_random = 1, .algo_env = REC_ENV,
                    .algo = ECCL_ALGO_RECURSIVE};
    run_matrix(*state, &a);
}

/* OCCL's order freedom: six all-reduces of both modes in flight, issued in
 * another order on every peer and waited for in yet another, rounds with
 * the same tags. A rank that returns early from a small one runs into the
 * next round while its peers finish this one: the frames of its next big
 * calls must not pass the tokens its small one still owes (docs/protocol.md,
 * "A later call's frames never pass an earlier call's token"). */
#define REC_ASYNC_K 6
#define REC_ASYNC_ROUNDS_N6 100 /* the race above: 8 of 10 idle runs failed without the rule */
typedef struct rec_async_arg {
    int n, rounds;
} rec_async_arg;

static int rec_async_body(eccl_comm *c, int index, void *argp)
{
    const rec_async_arg *arg = argp;
    int n = arg->n;
    static const struct {
        eccl_dtype t;
        eccl_op op;
        size_t count;
    } sh[REC_ASYNC_K] = {{ECCL_F32, ECCL_SUM, 300001}, {ECCL_I64, ECCL_MAX, 777},  {ECCL_BF16, ECCL_AVG, 50001},
                         {ECCL_U8, ECCL_MIN, 3},       {ECCL_F64, ECCL_SUM, 20000}, {ECCL_I32, ECCL_SUM, 1}};
    uint8_t *buf[REC_ASYNC_K];
    for (int i = 0; i < REC_ASYNC_K; i++) {
        buf[i] = malloc(sh[i].count * 8);
        CL_CHECK(buf[i], "oom");
    }
    for (int round = 0; round < arg->rounds; round++) {
        eccl_request *req[REC_ASYNC_K] = {NULL};
        int step = index % 2 ? 5 : 1; /* coprime with 6: a permutation */
        for (int i = 0; i < REC_ASYNC_K; i++)
            cluster_fill(buf[i], sh[i].t, sh[i].count, index, 500 + 10 * round + i, CL_PAT_SMALL);
        for (int j = 0; j < REC_ASYNC_K; j++) {
            int i = (index + round + step * j) % REC_ASYNC_K;
            CL_OK(eccl_allreduce_async(c, buf[i], buf[i], sh[i].count, sh[i].t, sh[i].op, 500 + i, &req[i]));
        }
        for (int j = 0; j < REC_ASYNC_K; j++) {
            int i = ((2 * index - step * j - round) % REC_ASYNC_K + REC_ASYNC_K) % REC_ASYNC_K;
            eccl_reduce_info info;
            CL_OK(eccl_wait(req[i], &info));
            uint32_t want = device_resident(sh[i].count * eccl_dtype_size(sh[i].t)) ? ECCL_ALGO_RING
                                                                                   : ECCL_ALGO_RECURSIVE;
            CL_CHECK(info.algorithm == want && info.world_size == (uint32_t)n,
                     "tag %d: algorithm %u world %u", 500 + i, info.algorithm, info.world_size);
            if (check_result(buf[i], sh[i].t, sh[i].op, CL_PAT_SMALL, sh[i].count, n, 500 + 10 * round + i,
                             "recursive async"))
                return 1;
        }
        /* In tag order: every peer pushes the same sequence. */
        for (int i = 0; i < REC_ASYNC_K; i++)
            cluster_push_hash(cluster_fnv1a(buf[i], sh[i].count * eccl_dtype_size(sh[i].t)));
    }
    for (int i = 0; i < REC_ASYNC_K; i++) free(buf[i]);
    return 0;
}

static void run_rec_async(cluster *cl, int n, int rounds)
{
    cluster_opts o = {.algo_env = REC_ENV};
    rec_async_arg arg = {n, rounds};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, n, rec_async_body, &arg), 0);
    assert_int_equal(cluster_wait_all(cl, 120000), 0);
    assert_parity(cl, n);
    cluster_fini(cl);
}

static void test_rec_async_n5(void **state) { run_rec_async(*state, 5, 3); }
static void test_rec_async_n6(void **state) { run_rec_async(*state, 6, REC_ASYNC_ROUNDS_N6); }

/* The same tag back to back: a fast peer's next call races the slow
 * one's barrier tokens. */
static void test_rec_tag_reuse_n5(void **state)
{
    cluster *cl = *state;
    int n = 5;
    cluster_opts o = {.op_timeout_ms = 5000, .algo_env = REC_ENV};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, n, reuse_body, &n), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    cluster_fini(cl);
}

/* A peer killed mid-call: its failpoint on the send path raises SIGKILL on
 * its K-th send of the faulted call (test_colls_mp's way). Inputs are
 * filled by rank, so the retry's expectation is the survivors' world. */
#define REC_KILL_AFTER 2
#define REC_TAG_FAULT 77
#define RV_ENTERED 2
#define RV_OUTCOME 3 /* 1: success at N (committed), 2: PEER_LOST, 3: success at N-1 */
static atomic_int g_rec_sends;

static int rec_die_on_kth(const char *name, int *failnum, void **failinfo, unsigned int *flags)
{
    (void)name, (void)failnum, (void)failinfo, (void)flags;
    if (atomic_fetch_add(&g_rec_sends, 1) + 1 >= REC_KILL_AFTER) raise(SIGKILL);
    return 0;
}

typedef struct rec_kill_arg {
    int n, victim_rank, in_place;
    size_t count;
} rec_kill_arg;

/* One all-reduce by rank (f32 SUM of small integers: exact); checks the
 * result for the world it reports. */
static int rec_call(eccl_comm *c, float *send, float *recv, size_t count, int in_place, uint64_t tag,
                    eccl_result *rc_out, uint32_t *world_out)
{
    int64_t rank;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank));
    cluster_fill(send, ECCL_F32, count, (int)rank, tag, CL_PAT_SMALL);
    float *out = in_place ? send : recv;
    eccl_reduce_info info;
    eccl_result rc = eccl_allreduce(c, send, out, count, ECCL_F32, ECCL_SUM, tag, &info);
    *rc_out = rc;
    if (rc != ECCL_OK) return 0;
    *world_out = info.world_size;
    uint32_t want = device_resident(count * sizeof(float)) ? ECCL_ALGO_RING : ECCL_ALGO_RECURSIVE;
    CL_CHECK(info.algorithm == want, "algorithm %u, want %u", info.algorithm, want);
    return check_result((uint8_t *)out, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, count, (int)info.world_size, tag,
                        "recursive by rank");
}

static int rec_kill_body(eccl_comm *c, int index, void *argp)
{
    const rec_kill_arg *f = argp;
    int64_t rank;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank));
    float *send = malloc(f->count * 4 + 64), *recv = malloc(f->count * 4 + 64);
    CL_CHECK(send && recv, "oom");
    eccl_result rc;
    uint32_t world = 0;
    if (rec_call(c, send, recv, f->count, f->in_place, 10, &rc, &world)) return 1; /* the full world works */
    CL_CHECK(rc == ECCL_OK && world == (uint32_t)f->n, "warm-up: %s at world %u", eccl_strerror(rc), world);
    cluster_shared *sh = cluster_shm();
    if (rank == f->victim_rank) {
        /* The survivors enter first, so the loss finds them inside the call. */
        for (int i = 0; i < f->n; i++)
            if (i != index)
                while (!atomic_load(&sh->slot[i].val[RV_ENTERED])) cluster_sleep_ms(1);
        cluster_sleep_ms(30);
        CL_CHECK(fiu_init(0) == 0, "fiu_init");
        CL_CHECK(cluster_hook_sends(rec_die_on_kth) == 0, "fiu");
    }
    /* What the output holds before: the input in place, stale bytes else. */
    cluster_fill(send, ECCL_F32, f->count, (int)rank, REC_TAG_FAULT, CL_PAT_SMALL);
    float *out = f->in_place ? send : recv;
    if (!f->in_place) memset(recv, 0x3c, f->count * 4);
    /* In place the failure puts the output (send) back; out of place it
     * leaves the input (send) intact, and the output is unspecified. */
    uint64_t pre = cluster_fnv1a(send, f->count * 4);
    atomic_store(&sh->slot[index].val[RV_ENTERED], 1);
    eccl_reduce_info info;
    rc = eccl_allreduce(c, send, out, f->count, ECCL_F32, ECCL_SUM, REC_TAG_FAULT, &info);
    CL_CHECK(rank != f->victim_rank, "the victim survived its failpoint");
    if (rc == ECCL_OK) {
        /* Committed (every survivor held the result when the victim died),
         * or entered only after the view change on a loaded machine. */
        CL_CHECK(info.world_size == (uint32_t)f->n || info.world_size == (uint32_t)f->n - 1, "world %u",
                 info.world_size);
        atomic_store(&sh->slot[index].val[RV_OUTCOME], info.world_size == (uint32_t)f->n ? 1 : 3);
        if (info.world_size == (uint32_t)f->n - 1) {
            /* Filled for our rank of the old world: the new one's may differ. */
            int64_t r2;
            CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &r2));
            CL_CHECK(r2 == rank, "renumbered and succeeded at once: the inputs belong to another rank");
        }
        return check_result((uint8_t *)out, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, f->count, (int)info.world_size,
                            REC_TAG_FAULT, "recursive, a peer killed");
    }
    CL_CHECK(rc == ECCL_ERR_PEER_LOST, "a peer killed mid-call: %s, want PEER_LOST", eccl_strerror(rc));
    CL_CHECK(cluster_fnv1a(send, f->count * 4) == pre, "failed but its %s changed", f->in_place ? "output" : "input");
    atomic_store(&sh->slot[index].val[RV_OUTCOME], 2);
    int64_t w;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &w));
    CL_CHECK(w == f->n - 1, "world %lld after the loss", (long long)w);
    /* The same call again, on the survivors. */
    if (rec_call(c, send, recv, f->count, f->in_place, REC_TAG_FAULT, &rc, &world)) return 1;
    CL_CHECK(rc == ECCL_OK && world == (uint32_t)f->n - 1, "the retry: %s at world %u", eccl_strerror(rc), world);
    free(send);
    free(recv);
    return 0;
}

/* One kill; returns how many survivors lost the call. */
static int run_rec_kill_once(cluster *cl, const rec_kill_arg *f)
{
    cluster_opts o = {.algo_env = REC_ENV};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, f->n, rec_kill_body, (void *)f), 0);
    assert_true(cluster_wait_self_killed(cl, f->n, f->victim_rank, 60000) >= 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    int seen[4] = {0};
    for (int i = 0; i < f->n; i++) seen[atomic_load(&cl->sh->slot[i].val[RV_OUTCOME]) & 3]++;
    printf("    N=%d, rank %d killed, %zu floats: %d survivors lost the call, %d saw it committed, %d entered "
           "after\n", f->n, f->victim_rank, f->count, seen[2], seen[1], seen[3]);
    /* Survivors never disagree: no success at N beside a loss. */
    assert_false(seen[1] && seen[2]);
    cluster_fini(cl);
    return seen[2];
}

/* The victim waits until every survivor says it is about to call, but a
 * loaded machine can still deschedule a survivor past the whole view change:
 * it then runs the call at N - 1, which is right but proves nothing about
 * the restore path. Where that path must run, the kill is repeated a few
 * times; every attempt is checked in full. */
static void run_rec_kill(cluster *cl, const rec_kill_arg *f, int must_lose)
{
    int lost = 0;
    for (int attempt = 0; attempt < (must_lose ? 4 : 1) && !lost; attempt++) lost = run_rec_kill_once(cl, f);
    if (must_lose) assert_true(lost >= 1); /* the restore path ran */
}

/* 8 MB: the victim dies a slice or two into the call. N = 3: an extra rank
 * (its fold cut short), in place; N = 5: a core rank with an extra, out of
 * place; N = 6: a core rank without one, in place. */
static void test_rec_kill_n3(void **state)
{
    rec_kill_arg f = {3, 2, 1, 2000000};
    run_rec_kill(*state, &f, 1);
}

static void test_rec_kill_n5(void **state)
{
    rec_kill_arg f = {5, 0, 0, 2000001};
    run_rec_kill(*state, &f, 1);
}

static void test_rec_kill_n6(void **state)
{
    rec_kill_arg f = {6, 3, 1, 1999999};
    run_rec_kill(*state, &f, 1);
}

/* Small (doubling): the victim may die after its last data frame, every
 * survivor full; then the master commits, else all fail: never a mix. */
static void test_rec_kill_small_n5(void **state)
{
    rec_kill_arg f = {5, 1, 0, 1000};
    run_rec_kill(*state, &f, 0);
}


int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_matrix_n3, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_matrix_n2, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_matrix_n4_two_rings, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_matrix_n8, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_random_floats_parity_n3, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_random_floats_parity_n5, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_counts_n3, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_counts_n8, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_large_n2, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_big_256mib_n2, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_tags_async_n3, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_tag_reuse_n2, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_tag_reuse_n3, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_progress_thread, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_invalid_args, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_single_peer, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_rec_matrix_n3, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_rec_matrix_n5, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_rec_matrix_n6_large, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_rec_random_floats_n5, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_rec_async_n5, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_rec_async_n6, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_rec_tag_reuse_n5, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_rec_kill_n3, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_rec_kill_n5, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_rec_kill_n6, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_rec_kill_small_n5, cluster_test_setup, cluster_test_teardown),
    };
    /* ECCL_TEST_FILTER=test_counts_* runs a subset (cmocka glob). */
    const char *filter = getenv("ECCL_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("allreduce_mp", tests, NULL, NULL);
}
