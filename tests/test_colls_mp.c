/* All-gather, reduce-scatter, broadcast, reduce and barrier across real
 * processes on loopback (tests/cluster.h): every element of every result
 * checked against an independent expectation, replicated outputs compared
 * bit for bit across peers, the fault contract (a peer killed mid-call:
 * every survivor fails with its input intact and, in place, its output put back, the retry runs on the
 * survivors), OCCL's order freedom, and the argument checks.
 *
 * Data is filled by ring rank (ECCL_ATTR_RANK), not by spawn index: block r
 * of an all-gather is rank r's.
 *
 * Broadcast and reduce run the chain or the binomial tree over peer links,
 * as the dispatcher picks (coll/dispatch.h). The tests of either set
 * ECCL_ALGO in the parent before the ranks are forked (they inherit it)
 * and check info.algorithm; the others accept what the dispatcher's table
 * picks. The binomial ones: exact results at N = 3, 5, 6 with roots all
 * round, async calls in different orders, and a peer killed where it heads
 * a subtree (so some survivor cannot have its output): PEER_LOST with
 * every output as before, exact on the survivors.
 *
 * All-gathers run the ring pass, Bruck's all-gather over peer links
 * (coll/bruck.h) or, uniform ones only, recursive doubling (coll/
 * rec_allgather.h), as the dispatcher picks; the Bruck tests force it with
 * ECCL_ALGO=allgather=bruck: exact at N = 3, 5 (several slices per block),
 * 6, all-gatherv with empty blocks and gaps, async all-gathers of
 * different sizes in different orders, and a peer killed mid-call (no
 * survivor can hold its block): PEER_LOST with every output as before,
 * then the retry exact on the N-1 survivors. The recursive doubling tests
 * force it ("allgather=recursive") and cover the same but all-gatherv:
 * exact at N = 3, 5 (an extra rank folding in, several slices a piece), 6
 * (two extras), async calls in different orders, a core rank killed mid
 * DOUBLE (N = 4) and an extra mid FOLD (N = 5).
 *
 * Reduce-scatter runs the ring pass or recursive halving (coll/
 * rec_reduce_scatter.h), as the dispatcher picks; the recursive tests
 * force the latter ("reduce_scatter=recursive") and check info.algorithm:
 * exact at N = 3, 5, 6 (extra ranks folding in, several slices a piece),
 * reduce-scatterv (empty blocks, one spanning slices), async calls in
 * different orders, and a core or an extra rank killed mid-call (every
 * survivor PEER_LOST with its output as before, the retry exact at N-1). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fiu-control.h>
#include <fiu.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster.h"
#include "proto/wire.h"

enum kind { K_ALLGATHER, K_REDUCE_SCATTER, K_BROADCAST, K_REDUCE, K_ALLREDUCE, K_COUNT };
static const char *const kind_names[K_COUNT] = {"all-gather", "reduce-scatter", "broadcast", "reduce",
                                                "all-reduce"};

static int reducing(int k) { return k == K_REDUCE_SCATTER || k == K_REDUCE || k == K_ALLREDUCE; }

/* The algorithm broadcast and reduce must report: what the test forced
 * through ECCL_ALGO, or -1 (not forced: the chain or the binomial tree,
 * as the dispatcher's table picks). Set in the parent before the ranks
 * fork (algo_setup), so every rank sees the test's value. */
static int g_rooted_algo = -1;
/* The same for all-gathers: forced, or -1 (the ring, Bruck's or, uniform
 * only, recursive doubling). */
static int g_allgather_algo = -1;

static int algo_setup(void **state, const char *algo, int id)
{
    char spec[64];
    snprintf(spec, sizeof spec, "broadcast=%s,reduce=%s", algo, algo);
    setenv("ECCL_ALGO", spec, 1);
    g_rooted_algo = id;
    return cluster_test_setup(state);
}

static int algo_teardown(void **state)
{
    unsetenv("ECCL_ALGO");
    g_rooted_algo = -1;
    g_allgather_algo = -1;
    return cluster_test_teardown(state);
}

static int binomial_setup(void **state) { return algo_setup(state, "binomial", ECCL_ALGO_BINOMIAL); }
static int chain_setup(void **state) { return algo_setup(state, "chain", ECCL_ALGO_CHAIN); }
static int bruck_setup(void **state)
{
    setenv("ECCL_ALGO", "allgather=bruck", 1);
    g_allgather_algo = ECCL_ALGO_BRUCK;
    return cluster_test_setup(state);
}
static int recag_setup(void **state)
{
    setenv("ECCL_ALGO", "allgather=recursive", 1);
    g_allgather_algo = ECCL_ALGO_RECURSIVE;
    return cluster_test_setup(state);
}

/* The algorithm an all-gather (v: all-gatherv) may report: recursive
 * doubling takes the uniform layout only. */
static int allgather_algo_ok(uint32_t algo, int v)
{
    return g_allgather_algo < 0
               ? algo == ECCL_ALGO_RING || algo == ECCL_ALGO_BRUCK || (!v && algo == ECCL_ALGO_RECURSIVE)
               : algo == (uint32_t)g_allgather_algo;
}

/* The algorithm reduce-scatter must report: forced, or -1 (the ring or
 * recursive halving, as the table picks). */
static int g_rs_algo = -1;

static int recursive_setup(void **state)
{
    setenv("ECCL_ALGO", "reduce_scatter=recursive", 1);
    g_rs_algo = ECCL_ALGO_RECURSIVE;
    return cluster_test_setup(state);
}

static int recursive_teardown(void **state)
{
    unsetenv("ECCL_ALGO");
    g_rs_algo = -1;
    return cluster_test_teardown(state);
}

static int rs_algo_ok(uint32_t algo)
{
    return g_rs_algo < 0 ? algo == ECCL_ALGO_RING || algo == ECCL_ALGO_RECURSIVE : algo == (uint32_t)g_rs_algo;
}

/* One call's buffers: sized for the largest layout (world * count). */
typedef struct call_bufs {
    uint8_t *send, *recv, *want, *scratch;
    size_t cap;
} call_bufs;

static int bufs_alloc(call_bufs *b, size_t bytes)
{
    b->cap = bytes + 64;
    b->send = malloc(b->cap);
    b->recv = malloc(b->cap);
    b->want = malloc(b->cap);
    b->scratch = malloc(b->cap);
    return b->send && b->recv && b->want && b->scratch ? 0 : -1;
}

static void bufs_free(call_bufs *b)
{
    free(b->send);
    free(b->recv);
    free(b->want);
    free(b->scratch);
}

typedef struct coll_args {
    int kind;
    eccl_dtype t;
    eccl_op op;
    enum cluster_pattern pat;
    size_t count; /* per block: sendcount, recvcount, or the buffer */
    int in_place;
    uint32_t root;
    uint64_t tag;
} coll_args;

/* The call's input and output pointers for `rank` of `n`, with the input
 * filled; *out_bytes gets the bytes of output this rank has (0: none). */
/* The bytes of the input prepare() points at. */
static size_t input_bytes(const coll_args *a, uint32_t rank, uint32_t n)
{
    size_t bsz = a->count * eccl_dtype_size(a->t);
    return a->kind == K_REDUCE_SCATTER ? n * bsz : a->kind == K_BROADCAST && rank != a->root ? 0 : bsz;
}

static void prepare(const coll_args *a, call_bufs *b, uint32_t rank, uint32_t n, const void **in,
                    void **out, size_t *out_bytes)
{
    size_t bsz = a->count * eccl_dtype_size(a->t);
    *in = b->send;
    *out = b->recv;
    memset(b->recv, 0xa5, b->cap);
    switch (a->kind) {
    case K_ALLGATHER:
        *out_bytes = n * bsz;
        if (a->in_place) {
            cluster_fill(b->recv + rank * bsz, a->t, a->count, (int)rank, a->tag, a->pat);
            *in = b->recv + rank * bsz;
        } else {
            cluster_fill(b->send, a->t, a->count, (int)rank, a->tag, a->pat);
        }
        break;
    case K_REDUCE_SCATTER:
        *out_bytes = bsz;
        cluster_fill(b->send, a->t, n * a->count, (int)rank, a->tag, a->pat);
        if (a->in_place) *out = b->send + rank * bsz;
        break;
    case K_BROADCAST:
        *out_bytes = bsz;
        if (rank == a->root) cluster_fill(b->send, a->t, a->count, (int)rank, a->tag, a->pat);
        else *in = NULL;
        if (rank == a->root && a->in_place) *out = b->send;
        break;
    case K_REDUCE:
        *out_bytes = rank == a->root ? bsz : 0;
        cluster_fill(b->send, a->t, a->count, (int)rank, a->tag, a->pat);
        if (rank != a->root) *out = NULL;
        else if (a->in_place) *out = b->send;
        break;
    default:
        *out_bytes = bsz;
        cluster_fill(b->send, a->t, a->count, (int)rank, a->tag, a->pat);
        if (a->in_place) *out = b->send;
        break;
    }
}

static eccl_result issue(eccl_comm *c, const coll_args *a, const void *in, void *out,
                         eccl_reduce_info *info, eccl_request **req)
{
    switch (a->kind) {
    case K_ALLGATHER:
        return req ? eccl_allgather_async(c, in, out, a->count, a->t, a->tag, req)
                   : eccl_allgather(c, in, out, a->count, a->t, a->tag, info);
    case K_REDUCE_SCATTER:
        return req ? eccl_reduce_scatter_async(c, in, out, a->count, a->t, a->op, a->tag, req)
                   : eccl_reduce_scatter(c, in, out, a->count, a->t, a->op, a->tag, info);
    case K_BROADCAST:
        return req ? eccl_broadcast_async(c, in, out, a->count, a->t, a->root, a->tag, req)
                   : eccl_broadcast(c, in, out, a->count, a->t, a->root, a->tag, info);
    case K_REDUCE:
        return req ? eccl_reduce_async(c, in, out, a->count, a->t, a->op, a->root, a->tag, req)
                   : eccl_reduce(c, in, out, a->count, a->t, a->op, a->root, a->tag, info);
    default:
        return req ? eccl_allreduce_async(c, in, out, a->count, a->t, a->op, a->tag, req)
                   : eccl_allreduce(c, in, out, a->count, a->t, a->op, a->tag, info);
    }
}

/* The expected output of `rank` of `n` into b->want; 0, or -1 when the
 * pattern has no exact expectation (random floats: parity only). */
static int expect(const coll_args *a, call_bufs *b, uint32_t rank, uint32_t n)
{
    size_t bsz = a->count * eccl_dtype_size(a->t);
    int idx[CLUSTER_MAX_PEERS];
    for (uint32_t i = 0; i < n; i++) idx[i] = (int)i;
    switch (a->kind) {
    case K_ALLGATHER:
        for (uint32_t i = 0; i < n; i++) cluster_fill(b->want + i * bsz, a->t, a->count, (int)i, a->tag, a->pat);
        return 0;
    case K_BROADCAST:
        cluster_fill(b->want, a->t, a->count, (int)a->root, a->tag, a->pat);
        return 0;
    case K_REDUCE_SCATTER:
        if (cluster_expected(b->scratch, a->t, n * a->count, a->op, idx, (int)n, a->tag, a->pat) != 0) return -1;
        memcpy(b->want, b->scratch + rank * bsz, bsz);
        return 0;
    default:
        return cluster_expected(b->want, a->t, a->count, a->op, idx, (int)n, a->tag, a->pat);
    }
}

/* Runs one call and checks all of it: result, info, every element of the
 * output, the input untouched (apart from an in-place output block).
 * Pushes the hash of replicated outputs for the parity check. */
static int one_call(eccl_comm *c, const coll_args *a, call_bufs *b)
{
    int64_t rank64, n64;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank64));
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &n64));
    uint32_t rank = (uint32_t)rank64, n = (uint32_t)n64;
    const void *in;
    void *out;
    size_t out_bytes, bsz = a->count * eccl_dtype_size(a->t);
    prepare(a, b, rank, n, &in, &out, &out_bytes);
    uint64_t send_hash = cluster_fnv1a(b->send, b->cap);
    eccl_reduce_info info;
    memset(&info, 0xff, sizeof info);
    eccl_result rc = issue(c, a, in, out, &info, NULL);
    CL_CHECK(rc == ECCL_OK, "%s %s %s %zu x %s root %u tag %llu: %s", kind_names[a->kind],
             a->in_place ? "in-place" : "out-of-place", eccl_op_name(a->op), a->count,
             eccl_dtype_name(a->t), a->root, (unsigned long long)a->tag, eccl_strerror(rc));
    CL_CHECK(info.world_size == n, "info.world_size %u, want %u", info.world_size, n);
    if (a->kind == K_BROADCAST || a->kind == K_REDUCE)
        CL_CHECK(g_rooted_algo < 0 ? info.algorithm == ECCL_ALGO_CHAIN || info.algorithm == ECCL_ALGO_BINOMIAL
                                   : info.algorithm == (uint32_t)g_rooted_algo,
                 "%s ran algorithm %u, want %d", kind_names[a->kind], info.algorithm, g_rooted_algo);
    else if (a->kind == K_ALLGATHER)
        CL_CHECK(allgather_algo_ok(info.algorithm, 0), "all-gather ran algorithm %u, want %d", info.algorithm,
                 g_allgather_algo);
    else if (a->kind == K_REDUCE_SCATTER)
        CL_CHECK(rs_algo_ok(info.algorithm), "reduce-scatter ran algorithm %u, want %d", info.algorithm, g_rs_algo);
    else
        CL_CHECK(a->kind == K_ALLREDUCE || info.algorithm == ECCL_ALGO_RING, "%s ran algorithm %u",
                 kind_names[a->kind], info.algorithm);
    if (a->count == 0)
        CL_CHECK(info.tx_bytes == 0 && info.rx_bytes == 0, "count 0 moved bytes");
    /* Out of place the input is never written; in place only the output
     * block of it is (reduce-scatter), or it is the output. */
    if (!a->in_place)
        CL_CHECK(cluster_fnv1a(b->send, b->cap) == send_hash, "%s changed sendbuf", kind_names[a->kind]);
    if (a->in_place && a->kind == K_REDUCE_SCATTER) {
        memcpy(b->scratch, b->send, b->cap);
        cluster_fill(b->scratch, a->t, n * a->count, (int)rank, a->tag, a->pat);
        memcpy(b->scratch + rank * bsz, b->send + rank * bsz, bsz);
        CL_CHECK(memcmp(b->scratch, b->send, n * bsz) == 0, "in-place reduce-scatter wrote other blocks");
    }
    if (!out) return 0; /* a reduce off the root: it has no output */
    if (a->kind == K_REDUCE && rank != a->root) return 0;
    if (expect(a, b, rank, n) == 0) {
        size_t first = 0, bad = cluster_mismatches(out, b->want, a->t, out_bytes / eccl_dtype_size(a->t), &first);
        CL_CHECK(bad == 0, "%s %s %s %zu x %s rank %u of %u root %u: %zu wrong elements, first [%zu] = %.9g, want %.9g",
                 kind_names[a->kind], a->in_place ? "in-place" : "out-of-place", eccl_op_name(a->op), a->count,
                 eccl_dtype_name(a->t), rank, n, a->root, bad, first, cluster_load(out, a->t, first),
                 cluster_load(b->want, a->t, first));
    }
    if (a->kind == K_ALLGATHER || a->kind == K_BROADCAST || a->kind == K_ALLREDUCE)
        cluster_push_hash(cluster_fnv1a(out, out_bytes));
    return 0;
}

/* ---- the matrix: every kind, dtype, op, mode and several roots ------------- */

typedef struct matrix_arg {
    int n;
    size_t count;
    unsigned dtypes; /* bit per eccl_dtype */
    int random;      /* also random data: full-range integers, real floats (parity only) */
    unsigned kinds;  /* bit per kind below K_ALLREDUCE; 0: all of them */
} matrix_arg;

static int matrix_body(eccl_comm *c, int index, void *argp)
{
    (void)index;
    const matrix_arg *m = argp;
    call_bufs b;
    CL_CHECK(bufs_alloc(&b, (size_t)m->n * m->count * 8) == 0, "out of memory");
    uint64_t tag = 1;
    for (int k = 0; k < K_ALLREDUCE; k++) {
        if (m->kinds && !(m->kinds & (1u << k))) continue;
        for (int t = 0; t < ECCL_DTYPE_COUNT; t++) {
            if (!(m->dtypes & (1u << t))) continue;
            int nops = reducing(k) ? ECCL_OP_COUNT : 1;
            for (int op = 0; op < nops; op++) {
                enum cluster_pattern pats[2] = {op == ECCL_PROD ? CL_PAT_PROD : CL_PAT_SMALL, CL_PAT_RANDOM};
                for (int p = 0; p < (m->random ? 2 : 1); p++) {
                    for (int in_place = 0; in_place < 2; in_place++) {
                        coll_args a = {k, (eccl_dtype)t, (eccl_op)op, pats[p], m->count, in_place,
                                       (uint32_t)(tag % (uint64_t)m->n), tag};
                        tag++;
                        if (one_call(c, &a, &b)) return 1;
                    }
                }
            }
        }
    }
    bufs_free(&b);
    return 0;
}

static void assert_parity(cluster *cl, int n)
{
    int nh = cl->sh->slot[0].n_hash;
    assert_true(nh > 0);
    for (int p = 1; p < n; p++) {
        assert_int_equal(cl->sh->slot[p].n_hash, nh);
        for (int k = 0; k < nh; k++)
            if (cl->sh->slot[p].hash[k] != cl->sh->slot[0].hash[k]) {
                fprintf(stderr, "parity: result %d differs between peer 0 and peer %d\n", k, p);
                fail();
            }
    }
}

static void run_matrix(cluster *cl, const matrix_arg *m)
{
    uint64_t t0 = cluster_now_ns();
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, m->n, matrix_body, (void *)m), 0);
    assert_int_equal(cluster_wait_all(cl, 120000), 0);
    /* Reduce-scatter alone replicates nothing: no parity to compare. */
    if (m->kinds != (1u << K_REDUCE_SCATTER)) assert_parity(cl, m->n);
    printf("    N=%d, %zu elements per block: %d replicated results agree, %.2f s\n", m->n, m->count,
           cl->sh->slot[0].n_hash, (double)(cluster_now_ns() - t0) / 1e9);
    cluster_fini(cl);
}

#define ALL_DTYPES ((1u << ECCL_DTYPE_COUNT) - 1)
#define DT(t) (1u << (t))

static void test_matrix_n2(void **state)
{
    matrix_arg m = {2, 517, ALL_DTYPES, 1, 0};
    run_matrix(*state, &m);
}

static void test_matrix_n3(void **state)
{
    matrix_arg m = {3, 1031, ALL_DTYPES, 1, 0};
    run_matrix(*state, &m);
}

static void test_matrix_n5_one_element(void **state)
{
    matrix_arg m = {5, 1, DT(ECCL_I8) | DT(ECCL_F16) | DT(ECCL_F64), 0, 0};
    run_matrix(*state, &m);
}

/* Several slices per block, block sizes that do not divide a slice. */
static void test_matrix_n4_large(void **state)
{
    matrix_arg m = {4, 600007, DT(ECCL_F32) | DT(ECCL_BF16), 0, 0};
    run_matrix(*state, &m);
}

/* ---- broadcast and reduce on the binomial tree --------------------------------
 * Roots go round with the tags (root = tag mod N), so every rank of every
 * world roots some call of every dtype. */

#define ROOTED ((1u << K_BROADCAST) | (1u << K_REDUCE))

static void test_binomial_matrix_n3(void **state)
{
    matrix_arg m = {3, 1031, ALL_DTYPES, 1, ROOTED};
    run_matrix(*state, &m);
}

/* Several slices per call (f32: 2.3 MiB, three slices; bf16: two). */
static void test_binomial_matrix_n5_slices(void **state)
{
    matrix_arg m = {5, 600007, DT(ECCL_F32) | DT(ECCL_BF16), 0, ROOTED};
    run_matrix(*state, &m);
}

static void test_binomial_matrix_n6(void **state)
{
    matrix_arg m = {6, 77, DT(ECCL_I8) | DT(ECCL_U32) | DT(ECCL_F16) | DT(ECCL_F64), 1, ROOTED};
    run_matrix(*state, &m);
}

static void test_binomial_matrix_n6_one_element(void **state)
{
    matrix_arg m = {6, 1, DT(ECCL_U8) | DT(ECCL_F32), 0, ROOTED};
    run_matrix(*state, &m);
}

/* ---- the v layouts: blocks of different sizes, empty ones, gaps -------------- */

/* Rank r's block in layout `v`: some empty, one spanning several slices. */
static size_t v_count(int v, uint32_t r)
{
    static const size_t counts[3][6] = {{3, 0, 1000, 7, 0, 1},
                                        {600007, 1, 0, 300000, 5, 2},
                                        {0, 0, 17, 0, 0, 0}};
    return counts[v][r % 6];
}

static int v_body(eccl_comm *c, int index, void *argp)
{
    (void)index, (void)argp;
    int64_t rank64, n64;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank64));
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &n64));
    uint32_t rank = (uint32_t)rank64, n = (uint32_t)n64;
    uint64_t tag = 500;
    for (int v = 0; v < 3; v++) {
        size_t counts[CLUSTER_MAX_PEERS], displs[CLUSTER_MAX_PEERS], total = 0, extent = 0, before = 0;
        for (uint32_t r = 0; r < n; r++) {
            counts[r] = v_count(v, r);
            displs[r] = extent + 11 * r; /* gaps between blocks, which nobody may write */
            extent = displs[r] + counts[r];
            total += counts[r];
            if (r < rank) before += counts[r];
        }
        const eccl_dtype types[2] = {ECCL_F32, ECCL_I16};
        for (int ti = 0; ti < 2; ti++) {
            eccl_dtype t = types[ti];
            size_t es = eccl_dtype_size(t);
            for (int in_place = 0; in_place < 2; in_place++, tag++) {
                uint8_t *send = malloc(total * es + 64), *recv = malloc(extent * es + 64), *want = malloc(extent * es + 64);
                CL_CHECK(send && recv && want, "oom");
                /* all-gatherv: every block where displs says, the gaps untouched */
                memset(recv, 0x5a, extent * es);
                memcpy(want, recv, extent * es);
                for (uint32_t r = 0; r < n; r++) cluster_fill(want + displs[r] * es, t, counts[r], (int)r, tag, CL_PAT_SMALL);
                const void *in = send;
                if (in_place) {
                    cluster_fill(recv + displs[rank] * es, t, counts[rank], (int)rank, tag, CL_PAT_SMALL);
                    in = recv + displs[rank] * es;
                } else {
                    cluster_fill(send, t, counts[rank], (int)rank, tag, CL_PAT_SMALL);
                }
                eccl_reduce_info info;
                eccl_result rc = eccl_allgatherv(c, in, recv, counts, displs, t, tag, &info);
                CL_CHECK(rc == ECCL_OK, "allgatherv layout %d: %s", v, eccl_strerror(rc));
                CL_CHECK(allgather_algo_ok(info.algorithm, 1), "allgatherv ran algorithm %u, want %d", info.algorithm,
                         g_allgather_algo);
                size_t first = 0, bad = cluster_mismatches(recv, want, t, extent, &first);
                CL_CHECK(bad == 0, "allgatherv layout %d %s %s: %zu wrong, first [%zu]", v, eccl_dtype_name(t),
                         in_place ? "in place" : "out of place", bad, first);
                cluster_push_hash(cluster_fnv1a(recv, extent * es));
                /* reduce-scatterv: block `rank` of the sum of every rank's blocks */
                uint8_t *sum = malloc(total * es + 64);
                int idx[CLUSTER_MAX_PEERS];
                for (uint32_t r = 0; r < n; r++) idx[r] = (int)r;
                CL_CHECK(sum && cluster_expected(sum, t, total, ECCL_SUM, idx, (int)n, tag, CL_PAT_SMALL) == 0, "expect");
                cluster_fill(send, t, total, (int)rank, tag, CL_PAT_SMALL);
                memset(recv, 0x5a, counts[rank] * es + 8);
                void *out = in_place ? send + before * es : recv;
                rc = eccl_reduce_scatterv(c, send, out, counts, t, ECCL_SUM, tag + 1000, &info);
                CL_CHECK(rc == ECCL_OK, "reduce_scatterv layout %d: %s", v, eccl_strerror(rc));
                CL_CHECK(rs_algo_ok(info.algorithm), "reduce_scatterv ran algorithm %u, want %d", info.algorithm,
                         g_rs_algo);
                bad = cluster_mismatches(out, sum + before * es, t, counts[rank], &first);
                CL_CHECK(bad == 0, "reduce_scatterv layout %d %s: %zu wrong, first [%zu]", v, eccl_dtype_name(t), bad,
                         first);
                if (!in_place)
                    CL_CHECK(((uint8_t *)recv)[counts[rank] * es] == 0x5a, "reduce_scatterv wrote past its block");
                free(sum);
                free(send);
                free(recv);
                free(want);
            }
        }
    }
    /* A v call needs its counts (and the all-gather its displacements). */
    float x = 0, y[CLUSTER_MAX_PEERS] = {0};
    size_t ones[CLUSTER_MAX_PEERS];
    for (uint32_t r = 0; r < n; r++) ones[r] = 1;
    CL_EXPECT_RC(eccl_allgatherv(c, &x, y, NULL, ones, ECCL_F32, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allgatherv(c, &x, y, ones, NULL, ECCL_F32, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_reduce_scatterv(c, y, &x, NULL, ECCL_F32, ECCL_SUM, 1, NULL), ECCL_ERR_INVALID_ARG);
    ones[0] = SIZE_MAX / 2;
    CL_EXPECT_RC(eccl_reduce_scatterv(c, y, &x, ones, ECCL_F32, ECCL_SUM, 1, NULL), ECCL_ERR_INVALID_ARG);
    return 0;
}

static void run_v(cluster *cl, int n)
{
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, n, v_body, NULL), 0);
    assert_int_equal(cluster_wait_all(cl, 120000), 0);
    assert_parity(cl, n);
    cluster_fini(cl);
}

static void test_v_n3(void **state) { run_v(*state, 3); }
static void test_v_n5(void **state) { run_v(*state, 5); }

/* ---- all-gathers on Bruck's rounds ----------------------------------------------- */

#define ALLGATHER (1u << K_ALLGATHER)

static void test_bruck_matrix_n3(void **state)
{
    matrix_arg m = {3, 1031, ALL_DTYPES, 1, ALLGATHER};
    run_matrix(*state, &m);
}

/* Several slices per block (f32: 2.3 MiB, three slices; bf16: two), runs
 * of up to two blocks cut at the wrap. */
static void test_bruck_matrix_n5_slices(void **state)
{
    matrix_arg m = {5, 600007, DT(ECCL_F32) | DT(ECCL_BF16), 0, ALLGATHER};
    run_matrix(*state, &m);
}

static void test_bruck_matrix_n6(void **state)
{
    matrix_arg m = {6, 77, DT(ECCL_I8) | DT(ECCL_U32) | DT(ECCL_F16) | DT(ECCL_F64), 1, ALLGATHER};
    run_matrix(*state, &m);
}

static void test_bruck_matrix_n6_one_element(void **state)
{
    matrix_arg m = {6, 1, DT(ECCL_U8) | DT(ECCL_F32), 0, ALLGATHER};
    run_matrix(*state, &m);
}

static void test_bruck_v_n3(void **state) { run_v(*state, 3); }
static void test_bruck_v_n6(void **state) { run_v(*state, 6); }

/* ---- quantised reduce-scatter -------------------------------------------------- */

#define Q_COUNT 300000 /* elements per block: several 1 MiB slices of f32 */

static int quant_body(eccl_comm *c, int index, void *argp)
{
    (void)index, (void)argp;
    int64_t rank64, n64;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank64));
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &n64));
    uint32_t rank = (uint32_t)rank64, n = (uint32_t)n64;
    size_t total = (size_t)n * Q_COUNT;
    float *send = malloc(total * sizeof *send), *recv = malloc(Q_COUNT * sizeof *recv), *other = malloc(total * 4);
    double *exact = calloc(Q_COUNT, sizeof *exact);
    CL_CHECK(send && recv && other && exact, "oom");
    const eccl_op ops[2] = {ECCL_SUM, ECCL_AVG};
    for (int oi = 0; oi < 2; oi++) {
        uint64_t tag = 700 + (uint64_t)oi;
        memset(exact, 0, Q_COUNT * sizeof *exact);
        for (uint32_t r = 0; r < n; r++) {
            cluster_fill(other, ECCL_F32, total, (int)r, tag, CL_PAT_RANDOM);
            /* One value of rank 0's block 1 is NaN: its slice travels raw. */
            if (r == 0) other[Q_COUNT + 5] = __builtin_nanf("");
            for (size_t i = 0; i < Q_COUNT; i++) exact[i] += other[(size_t)rank * Q_COUNT + i];
            if (r == rank) memcpy(send, other, total * sizeof *send);
        }
        eccl_allreduce_opts o;
        eccl_allreduce_opts_init(&o);
        o.quant = ECCL_QUANT_MINMAX_U8;
        eccl_reduce_info info;
        eccl_result rc = eccl_reduce_scatter_ex(c, send, recv, Q_COUNT, ECCL_F32, ops[oi], tag, &o, &info);
        CL_CHECK(rc == ECCL_OK, "quantised reduce-scatter %s: %s", eccl_op_name(ops[oi]), eccl_strerror(rc));
        /* About a quarter of the plain path's bytes (codes plus records);
         * rank 0 adds its NaN to block 1 and sends that slice (at most
         * 1 MiB) raw instead. */
        uint64_t plain = (uint64_t)(n - 1) * Q_COUNT * sizeof(float);
        uint64_t raw = rank == 0 ? 1u << 20 : 0;
        CL_CHECK(info.tx_bytes < plain * 3 / 10 + raw && info.tx_bytes > plain / 5,
                 "%s: tx %llu bytes, plain %llu", eccl_op_name(ops[oi]), (unsigned long long)info.tx_bytes,
                 (unsigned long long)plain);
        /* Each hop rounds the partial by at most half a code step of its
         * slice's range: |partial of k values| < 4k, so 8k / 510 per hop. */
        double bound = 0, worst = 0;
        for (uint32_t k = 1; k < n; k++) bound += 8.0 * k / 510.0;
        bound += 1e-4 * n;
        for (size_t i = 0; i < Q_COUNT; i++) {
            double want = ops[oi] == ECCL_AVG ? exact[i] / n : exact[i];
            double b = ops[oi] == ECCL_AVG ? bound / n : bound;
            if (rank == 1 && i == 5) {
                CL_CHECK(recv[i] != recv[i], "the NaN did not propagate: %g", (double)recv[i]);
                continue;
            }
            double err = recv[i] > want ? recv[i] - want : want - recv[i];
            if (err > worst) worst = err;
            CL_CHECK(err <= b, "%s [%zu] = %.7g, want %.7g (error %.3g > bound %.3g)", eccl_op_name(ops[oi]), i,
                     (double)recv[i], want, err, b);
        }
        CL_CHECK(worst > 0, "no rounding at all: were the partials quantised?");
    }
    /* What quantisation cannot take. */
    eccl_allreduce_opts o;
    eccl_allreduce_opts_init(&o);
    o.quant = ECCL_QUANT_AFFINE_U8;
    CL_EXPECT_RC(eccl_reduce_scatter_ex(c, send, recv, 4, ECCL_I32, ECCL_SUM, 9, &o, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_reduce_scatter_ex(c, send, recv, 4, ECCL_F64, ECCL_SUM, 9, &o, NULL), ECCL_ERR_UNSUPPORTED);
    CL_EXPECT_RC(eccl_reduce_scatter_ex(c, send, recv, 4, ECCL_F32, ECCL_MAX, 9, &o, NULL), ECCL_ERR_INVALID_ARG);
    /* AFFINE, asynchronous, on bf16: runs too. */
    eccl_request *req;
    cluster_fill(send, ECCL_BF16, total, (int)rank, 10, CL_PAT_SMALL);
    CL_OK(eccl_reduce_scatter_ex_async(c, send, recv, Q_COUNT, ECCL_BF16, ECCL_SUM, 10, &o, &req));
    CL_OK(eccl_wait(req, NULL));
    free(send);
    free(recv);
    free(other);
    free(exact);
    return 0;
}

static void test_quant_reduce_scatter_n4(void **state)
{
    cluster *cl = *state;
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, 4, quant_body, NULL), 0);
    assert_int_equal(cluster_wait_all(cl, 120000), 0);
    cluster_fini(cl);
}

/* ---- count 0, and the argument checks ------------------------------------ */

static int args_body(eccl_comm *c, int index, void *argp)
{
    (void)index, (void)argp;
    float buf[64] = {0}, out[64 * 4] = {0};
    eccl_request *req = NULL;
    int64_t rank;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank));
    /* Roots outside the world, NULL buffers where the call needs them. */
    CL_EXPECT_RC(eccl_broadcast(c, buf, out, 4, ECCL_F32, 3, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_reduce(c, buf, out, 4, ECCL_F32, ECCL_SUM, 7, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allgather(c, NULL, out, 4, ECCL_F32, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_reduce_scatter(c, buf, NULL, 4, ECCL_F32, ECCL_SUM, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_reduce_scatter(c, buf, out, 4, ECCL_F32, ECCL_OP_COUNT, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allgather(c, buf, out, 4, ECCL_DTYPE_COUNT, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allgather(c, buf, out, SIZE_MAX / 4, ECCL_F32, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allgather_async(c, buf, out, 4, ECCL_F32, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_barrier_async(c, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allgather(NULL, buf, out, 4, ECCL_F32, 1, NULL), ECCL_ERR_INVALID_ARG);
    /* The root's NULL is wrong; elsewhere a NULL the call does not read is fine. */
    CL_EXPECT_RC(eccl_broadcast(c, rank == 0 ? NULL : buf, out, 4, ECCL_F32, 0, 2, NULL),
                 rank == 0 ? ECCL_ERR_INVALID_ARG : ECCL_OK);
    if (rank == 0) CL_OK(eccl_broadcast(c, buf, out, 4, ECCL_F32, 0, 2, NULL)); /* the others wait for it */
    CL_OK(eccl_reduce(c, buf, rank == 1 ? out : NULL, 4, ECCL_F32, ECCL_SUM, 1, 3, NULL));
    /* Count 0: done at once, nothing moved. */
    eccl_reduce_info info;
    CL_OK(eccl_allgather(c, buf, out, 0, ECCL_F32, 4, &info));
    CL_CHECK(info.world_size == 3 && info.tx_bytes == 0, "count 0: world %u tx %llu", info.world_size,
             (unsigned long long)info.tx_bytes);
    /* A tag in flight is refused, whatever the collective. Rank 0 calls
     * late, so nobody else's call can have finished by then. */
    if (rank == 0) cluster_sleep_ms(300);
    CL_OK(eccl_allgather_async(c, buf, out, 64, ECCL_F32, 5, &req));
    if (rank != 0) {
        CL_EXPECT_RC(eccl_broadcast(c, buf, out, 4, ECCL_F32, 0, 5, NULL), ECCL_ERR_BUSY);
        CL_EXPECT_RC(eccl_barrier(c, 5), ECCL_ERR_BUSY);
    }
    CL_OK(eccl_wait(req, NULL));
    CL_OK(eccl_barrier(c, 6));
    return 0;
}

static void test_args_n3(void **state)
{
    cluster *cl = *state;
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, 3, args_body, NULL), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    cluster_fini(cl);
}

/* ---- the dispatcher hears when every rank shares one host ------------------- */

/* A small broadcast at N = 4 runs the binomial tree where every rank is on
 * this one host and talks through shared memory (net_shm), the chain over
 * TCP loopback (ECCL_SHM=0): coll/dispatch.c's one-host rule, which each
 * rank applies from what the master told it (host_ranks) and its own
 * listener, so every rank must pick alike (the result checks it). */
static int one_host_body(eccl_comm *c, int index, void *argp)
{
    (void)index;
    const uint32_t want = *(const uint32_t *)argp;
    int64_t rank;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank));
    for (uint64_t round = 0; round < 3; round++) {
        float buf[16];
        for (int i = 0; i < 16; i++) buf[i] = rank == (int64_t)round ? (float)(round * 100 + (uint64_t)i) : -1.0f;
        eccl_reduce_info info;
        memset(&info, 0xff, sizeof info);
        CL_OK(eccl_broadcast(c, buf, buf, 16, ECCL_F32, (uint32_t)round, 300 + round, &info));
        CL_CHECK(info.algorithm == want, "broadcast ran algorithm %u, want %u", info.algorithm, want);
        for (int i = 0; i < 16; i++)
            CL_CHECK(buf[i] == (float)(round * 100 + (uint64_t)i), "round %llu element %d: %g",
                     (unsigned long long)round, i, (double)buf[i]);
    }
    return 0;
}

static void run_one_host(void **state, uint32_t want)
{
    cluster *cl = *state;
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, 4, one_host_body, &want), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    cluster_fini(cl);
}

/* Over the verbs net (the _ibv variant of this suite) the listener is
 * net_ibv's: the chain, as over TCP. */
static void test_broadcast_one_host_tree(void **state)
{
    const char *net = getenv("ECCL_NET");
    run_one_host(state, net && strcmp(net, "ibv") == 0 ? ECCL_ALGO_CHAIN : ECCL_ALGO_BINOMIAL);
}

static int plain_tcp_setup(void **state)
{
    setenv("ECCL_SHM", "0", 1);
    return cluster_test_setup(state);
}
static int plain_tcp_teardown(void **state)
{
    unsetenv("ECCL_SHM");
    return cluster_test_teardown(state);
}
static void test_broadcast_one_host_tcp_chain(void **state) { run_one_host(state, ECCL_ALGO_CHAIN); }

/* ---- barrier: nobody leaves before the last one enters ---------------------- */

#define V_ENTER 0
#define V_LEAVE 1

static int barrier_body(eccl_comm *c, int index, void *argp)
{
    const int n = *(const int *)argp;
    cluster_shared *sh = cluster_shm();
    for (uint64_t round = 0; round < 3; round++) {
        /* A different peer is late in each round. */
        if ((uint64_t)index == round % (uint64_t)n) cluster_sleep_ms(150);
        atomic_store(&sh->slot[index].val[V_ENTER], (long long)cluster_now_ns());
        CL_OK(eccl_barrier(c, 100 + round));
        uint64_t left = cluster_now_ns();
        for (int i = 0; i < n; i++) {
            long long entered = atomic_load(&sh->slot[i].val[V_ENTER]);
            CL_CHECK(entered != 0 && (uint64_t)entered <= left,
                     "round %llu: left the barrier before peer %d entered", (unsigned long long)round, i);
        }
        /* Nobody may enter the next round's barrier before all read this one's entries. */
        CL_OK(eccl_barrier(c, 200 + round));
    }
    return 0;
}

static void test_barrier_n4(void **state)
{
    cluster *cl = *state;
    int n = 4;
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, n, barrier_body, &n), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    cluster_fini(cl);
}

/* ---- OCCL: async calls issued in different orders never deadlock ------------- */

#define ORDER_OPS 6

/* argp: NULL, every kind once; else (*argp == ORDER_ROOTED) broadcasts
 * and reduces alone, of several sizes and roots (the binomial tree's trees
 * differ per root), (ORDER_ALLGATHERS) all-gathers alone, or
 * (ORDER_RSCATTERS) reduce-scatters alone, of several sizes. */
#define ORDER_ROOTED 1
#define ORDER_ALLGATHERS 2
#define ORDER_RSCATTERS 3
static int order_body(eccl_comm *c, int index, void *argp)
{
    int mode = argp ? *(const int *)argp : 0, rooted = mode == ORDER_ROOTED;
    int64_t rank64, n64;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank64));
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &n64));
    coll_args a[ORDER_OPS];
    call_bufs b[ORDER_OPS];
    /* Big enough that frames of calls not issued yet wait in the sockets. */
    size_t counts[ORDER_OPS] = {300000, 200001, 500000, 7, 400000, 0};
    if (rooted) counts[0] = 1, counts[1] = 700001, counts[2] = 13, counts[3] = 300000, counts[4] = 2;
    if (mode == ORDER_ALLGATHERS) counts[0] = 3, counts[1] = 300001, counts[2] = 0, counts[3] = 17, counts[4] = 100000;
    if (mode == ORDER_RSCATTERS) counts[0] = 1, counts[1] = 300001, counts[2] = 13, counts[3] = 200000, counts[4] = 0;
    for (int j = 0; j < ORDER_OPS; j++) {
        int kind = rooted                       ? (j % 2 ? K_REDUCE : K_BROADCAST)
                   : mode == ORDER_ALLGATHERS   ? K_ALLGATHER
                   : mode == ORDER_RSCATTERS    ? K_REDUCE_SCATTER
                                                : j % K_COUNT;
        uint32_t root = (uint32_t)((rooted ? j * 3 + 1 : j) % n64);
        a[j] = (coll_args){kind, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, counts[j], j % 2, root, (uint64_t)(1000 + j)};
        CL_CHECK(bufs_alloc(&b[j], (size_t)n64 * counts[j] * 4) == 0, "oom");
    }
    for (int round = 0; round < 3; round++) {
        eccl_request *req[ORDER_OPS] = {NULL};
        int order[ORDER_OPS];
        for (int j = 0; j < ORDER_OPS; j++) order[j] = (j + index * (round + 1)) % ORDER_OPS;
        if (index % 2) /* and reversed on every other peer */
            for (int j = 0; j < ORDER_OPS / 2; j++) {
                int t = order[j];
                order[j] = order[ORDER_OPS - 1 - j];
                order[ORDER_OPS - 1 - j] = t;
            }
        const void *in[ORDER_OPS];
        void *out[ORDER_OPS];
        size_t ob;
        for (int j = 0; j < ORDER_OPS; j++) {
            int o = order[j];
            a[o].tag = 1000 + (uint64_t)round * 100 + (uint64_t)o;
            if (o == ORDER_OPS - 1) {
                CL_OK(eccl_barrier_async(c, a[o].tag, &req[o]));
                continue;
            }
            prepare(&a[o], &b[o], (uint32_t)rank64, (uint32_t)n64, &in[o], &out[o], &ob);
            CL_OK(issue(c, &a[o], in[o], out[o], NULL, &req[o]));
        }
        for (int j = ORDER_OPS - 1; j >= 0; j--) {
            int o = order[j];
            CL_CHECK(eccl_wait(req[o], NULL) == ECCL_OK, "round %d: op %d (%s) failed", round, o,
                     o == ORDER_OPS - 1 ? "barrier" : kind_names[a[o].kind]);
            if (o == ORDER_OPS - 1 || !out[o] || (a[o].kind == K_REDUCE && (uint32_t)rank64 != a[o].root)) continue;
            size_t bsz = a[o].count * 4, first = 0;
            size_t n_out = a[o].kind == K_ALLGATHER ? (size_t)n64 * a[o].count : a[o].count;
            CL_CHECK(expect(&a[o], &b[o], (uint32_t)rank64, (uint32_t)n64) == 0, "no expectation");
            size_t bad = cluster_mismatches(out[o], b[o].want, ECCL_F32, n_out, &first);
            CL_CHECK(bad == 0, "round %d: %s: %zu wrong elements (first %zu)", round, kind_names[a[o].kind], bad,
                     first);
            (void)bsz;
        }
    }
    for (int j = 0; j < ORDER_OPS; j++) bufs_free(&b[j]);
    return 0;
}

static void test_orders_n4(void **state)
{
    cluster *cl = *state;
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, 4, order_body, NULL), 0);
    assert_int_equal(cluster_wait_all(cl, 120000), 0);
    cluster_fini(cl);
}

/* The binomial tree's peer links open while calls of different trees wait
 * for each other. */
static void test_binomial_orders_n5(void **state)
{
    cluster *cl = *state;
    static int rooted = ORDER_ROOTED;
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, 5, order_body, &rooted), 0);
    assert_int_equal(cluster_wait_all(cl, 120000), 0);
    cluster_fini(cl);
}

/* Bruck's peer links open while all-gathers of other sizes wait. */
static void test_bruck_orders_n5(void **state)
{
    cluster *cl = *state;
    static int allgathers = ORDER_ALLGATHERS;
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, 5, order_body, &allgathers), 0);
    assert_int_equal(cluster_wait_all(cl, 120000), 0);
    cluster_fini(cl);
}

/* ---- the fault contract: a peer killed mid-call ---------------------------------
 *
 * The victim arms a failpoint on its transport's send path whose callback
 * kills the process on the K-th send of the faulted call: it dies with
 * some of its slices out, so the survivors' outputs are partly written
 * when the loss is noticed. Every survivor must fail with PEER_LOST and its
 * output exactly as before (hash), then retry on the survivors and get the
 * right result for the world of N-1. */

#define KILL_AFTER_SENDS 2 /* of the several MB each victim sends */
#define TAG_FAULT 77
#define V_ENTERED 2
#define V_LOST 3

static atomic_int g_sends;
static int g_kill_after = KILL_AFTER_SENDS;

static int die_on_kth(const char *name, int *failnum, void **failinfo, unsigned int *flags)
{
    (void)name, (void)failnum, (void)failinfo, (void)flags;
    if (atomic_fetch_add(&g_sends, 1) + 1 >= g_kill_after) raise(SIGKILL);
    return 0; /* the send itself goes through */
}

/* The victim, once the n - 1 others entered the faulted call (so the loss
 * finds them inside it): dies at its kill_after-th send from now on
 * (0: KILL_AFTER_SENDS). */
static int arm_victim(int n, int index, int kill_after)
{
    cluster_shared *sh = cluster_shm();
    for (int i = 0; i < n; i++)
        if (i != index)
            while (!atomic_load(&sh->slot[i].val[V_ENTERED])) cluster_sleep_ms(1);
    cluster_sleep_ms(30);
    if (kill_after) g_kill_after = kill_after;
    if (fiu_init(0) != 0) return -1;
    return cluster_hook_sends(die_on_kth);
}

typedef struct fault_arg {
    int kind, n;
    size_t count;
    int victim_rank;
    uint32_t root; /* a survivor's rank in both worlds */
    int kill_after; /* the victim's sends of the call before it dies (0: KILL_AFTER_SENDS) */
} fault_arg;

static int fault_body(eccl_comm *c, int index, void *argp)
{
    const fault_arg *f = argp;
    int64_t rank;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank));
    call_bufs b;
    CL_CHECK(bufs_alloc(&b, (size_t)f->n * f->count * 4) == 0, "oom");
    coll_args a = {f->kind, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, f->count, 0, f->root, 10};
    CL_CHECK(one_call(c, &a, &b) == 0, "warm-up"); /* the full world works */
    a.tag = TAG_FAULT;
    cluster_shared *sh = cluster_shm();
    if (rank == f->victim_rank) CL_CHECK(arm_victim(f->n, index, f->kill_after) == 0, "fiu");
    const void *in;
    void *out;
    size_t ob;
    prepare(&a, &b, (uint32_t)rank, (uint32_t)f->n, &in, &out, &ob);
    /* In place, the failure puts the output back bit for bit; out of place
     * it leaves the input intact (the output is then unspecified). */
    if (out && out != in) memset(out, 0x3c, ob);
    size_t ib = input_bytes(&a, (uint32_t)rank, (uint32_t)f->n);
    int in_place = cluster_overlaps(in, ib, out, ob);
    uint64_t pre = in_place ? cluster_fnv1a(out, ob) : in ? cluster_fnv1a(in, ib) : 0;
    atomic_store(&sh->slot[index].val[V_ENTERED], 1);
    eccl_result rc = issue(c, &a, in, out, NULL, NULL);
    CL_CHECK(rank != f->victim_rank, "the victim survived its failpoint");
    if (rc == ECCL_OK) {
        /* Entered only after the view change (a loaded machine): the call
         * ran on the survivors from the start. The parent checks that
         * someone saw the loss. */
        int64_t w;
        CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &w));
        CL_CHECK(w == f->n - 1, "%s succeeded at world %lld with a peer killed", kind_names[f->kind], (long long)w);
        bufs_free(&b);
        return 0;
    }
    CL_CHECK(rc == ECCL_ERR_PEER_LOST, "%s with a peer killed mid-call: %s, want PEER_LOST", kind_names[f->kind],
             eccl_strerror(rc));
    if (in_place) CL_CHECK(cluster_fnv1a(out, ob) == pre, "%s failed but its output changed", kind_names[f->kind]);
    else CL_CHECK(!in || cluster_fnv1a(in, ib) == pre, "%s failed but its input changed", kind_names[f->kind]);
    atomic_store(&sh->slot[index].val[V_LOST], 1);
    int64_t world;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &world));
    CL_CHECK(world == f->n - 1, "world %lld after the loss", (long long)world);
    a.tag = TAG_FAULT; /* the same call again */
    CL_CHECK(one_call(c, &a, &b) == 0, "the retry");
    bufs_free(&b);
    return 0;
}

static void run_fault(cluster *cl, const fault_arg *f)
{
    cluster_opts o = {0};
    o.no_linger = 0;
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, f->n, fault_body, (void *)f), 0);
    /* The victim dies of its own SIGKILL; everyone else passes. */
    assert_true(cluster_wait_self_killed(cl, f->n, f->victim_rank, 60000) >= 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    int lost = 0;
    for (int i = 0; i < f->n; i++) lost += (int)atomic_load(&cl->sh->slot[i].val[V_LOST]);
    assert_true(lost >= 1); /* the restore path ran */
    cluster_fini(cl);
}

/* 8 MB blocks: the victim dies a frame or two into the call. */
static void test_kill_allgather(void **state)
{
    fault_arg f = {K_ALLGATHER, 4, 2000000, 2, 0, 0};
    run_fault(*state, &f);
}

static void test_kill_reduce_scatter(void **state)
{
    fault_arg f = {K_REDUCE_SCATTER, 4, 2000000, 1, 0, 0};
    run_fault(*state, &f);
}

static void test_kill_broadcast(void **state)
{
    fault_arg f = {K_BROADCAST, 4, 4000000, 1, 0, 0}; /* root 0 -> 1 (dies) -> 2 -> 3 */
    run_fault(*state, &f);
}

static void test_kill_reduce(void **state)
{
    fault_arg f = {K_REDUCE, 4, 4000000, 3, 1, 0}; /* chain 2, 3 (dies), 0 -> root 1 */
    run_fault(*state, &f);
}

/* ---- the commit rule: a replicated result any survivor holds commits -----------
 *
 * Small calls (at most ECCL_WIRE_MAX_REPAIR bytes of output) of the
 * collectives whose output is the same on every rank. The victim dies at
 * its K-th send of the faulted call, or right after the call returned if
 * it returned before that send (early, before its completion round), so
 * some survivors may hold the result, even have returned it, and others
 * not when the loss is noticed. Whatever K: the survivors agree,
 * all ECCL_OK with the full world's result (bit-identical) or all
 * PEER_LOST with buffers as promised. Where a survivor surely holds it (the
 * chain's root, before the victim forwards), the call must commit: the
 * master hands the result to those that lack it (docs/protocol.md, "The
 * commit rule"). */

#define V_OK 4
#define V_WORLD 5
#define V_DYING 6
#define V_SEEN_WORLD 7 /* the smallest world a survivor saw after its call */

typedef struct repair_arg {
    int kind, n;
    size_t count;
    int victim_rank, kill_after, in_place;
    int must_commit;
    /* This rank calls only once the victim is dead and the master had time
     * to settle the tag without it (0: none; rank 0 is the root). */
    int late_rank;
    /* The late rank cannot keep the result the master hands it (its
     * staging allocations fail meanwhile): it drops out, the others
     * commit. */
    int fail_record;
} repair_arg;

static atomic_int g_failed_allocs;

static int fail_and_count(const char *name, int *failnum, void **failinfo, unsigned int *flags)
{
    (void)name, (void)failnum, (void)failinfo, (void)flags;
    atomic_fetch_add(&g_failed_allocs, 1);
    return 1;
}

static int repair_body(eccl_comm *c, int index, void *argp)
{
    const repair_arg *f = argp;
    int64_t rank;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank));
    call_bufs b;
    CL_CHECK(bufs_alloc(&b, (size_t)f->n * f->count * 4) == 0, "oom");
    coll_args a = {f->kind, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, f->count, f->in_place, 0, 10};
    /* Where the late rank's record must find no memory, the warm-up is
     * smaller than the call: a buffer it leaves in the comm's pool would
     * serve the record (or an early frame, freed into the pool by the view
     * change, then the record) without the allocator, and the record would
     * be kept. */
    if (f->fail_record) a.count = f->count / 4;
    CL_CHECK(one_call(c, &a, &b) == 0, "warm-up");
    a.count = f->count;
    a.tag = TAG_FAULT;
    cluster_shared *sh = cluster_shm();
    if (rank == f->victim_rank) CL_CHECK(arm_victim(f->n, index, f->kill_after) == 0, "fiu");
    const void *in;
    void *out;
    size_t ob;
    prepare(&a, &b, (uint32_t)rank, (uint32_t)f->n, &in, &out, &ob);
    size_t ib = input_bytes(&a, (uint32_t)rank, (uint32_t)f->n);
    int in_place = cluster_overlaps(in, ib, out, ob);
    uint64_t pre = in_place ? cluster_fnv1a(out, ob) : in ? cluster_fnv1a(in, ib) : 0;
    int late = f->late_rank && rank == f->late_rank;
    /* The late rank's staging allocations fail from before anyone can die
     * (the victim waits for every V_ENTERED) until its progress thread has
     * taken the master's REPAIR_PUT, whose record's allocation fails: until
     * a survivor sees the late rank dropped (its world shrinks twice). */
    if (late && f->fail_record)
        CL_CHECK(fiu_init(0) == 0 && fiu_enable_external("eccl/dev/alloc", 1, NULL, 0, fail_and_count) == 0, "fiu");
    atomic_store(&sh->slot[index].val[V_ENTERED], 1);
    if (late) {
        /* The victim returned, early, and died; so did the others return
         * (they must not wait for us): the view change finds the tag
         * committed elsewhere and not called here. */
        for (int i = 0; i < f->n; i++) {
            if (i == index) continue;
            while (!atomic_load(&sh->slot[i].val[V_OK]) && !atomic_load(&sh->slot[i].val[V_DYING]))
                cluster_sleep_ms(1);
        }
        if (f->fail_record) {
            int dropped = 0;
            for (int ms = 0; ms < 30000 && !dropped; ms++) {
                for (int i = 0; i < f->n; i++) {
                    long long w = atomic_load(&sh->slot[i].val[V_SEEN_WORLD]);
                    dropped |= i != index && w && w <= f->n - 2;
                }
                cluster_sleep_ms(1);
            }
            fiu_disable("eccl/dev/alloc");
            CL_CHECK(dropped, "no survivor saw this rank dropped in 30 s");
            CL_CHECK(atomic_load(&g_failed_allocs) >= 1, "dropped, yet no staging allocation failed");
        }
        cluster_sleep_ms(300);
    }
    eccl_reduce_info info;
    memset(&info, 0, sizeof info);
    eccl_result rc = issue(c, &a, in, out, &info, NULL);
    /* A victim whose call returned (early: before its K-th send) dies
     * right after: a loss after one rank's return. */
    if (rank == f->victim_rank) {
        atomic_store(&sh->slot[index].val[V_DYING], 1);
        raise(SIGKILL);
    }
    if (f->fail_record && late) {
        /* Without the record we left: our call fails, and says why. */
        CL_CHECK(rc == ECCL_ERR_MASTER_LOST, "the late %s without its record: %s", kind_names[a.kind],
                 eccl_strerror(rc));
        atomic_store(&sh->slot[index].val[V_LOST], 1);
        bufs_free(&b);
        return 0;
    }
    if (rc == ECCL_OK && late) {
        /* Handed the result the others committed: the full world's (and so
         * says its info), though this call began after it shrank. */
        CL_CHECK(expect(&a, &b, (uint32_t)rank, (uint32_t)f->n) == 0, "expect");
        size_t first = 0, bad = cluster_mismatches(out, b.want, a.t, ob / 4, &first);
        CL_CHECK(bad == 0, "the late %s got %zu wrong elements, first [%zu] = %.9g, want %.9g", kind_names[a.kind],
                 bad, first, cluster_load(out, a.t, first), cluster_load(b.want, a.t, first));
        CL_CHECK(info.world_size == (uint32_t)f->n, "the late %s reports world %u, want the result's, %d",
                 kind_names[a.kind], info.world_size, f->n);
    }
    if (rc == ECCL_OK && f->fail_record && !late) {
        /* Watches the late rank leave (the victim's loss, then its own):
         * the late rank keeps its failpoint armed until then. */
        atomic_store(&sh->slot[index].val[V_OK], 1);
        int64_t w = f->n;
        for (int ms = 0; ms < 30000 && w > f->n - 2; ms++) {
            CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &w));
            atomic_store(&sh->slot[index].val[V_SEEN_WORLD], w);
            cluster_sleep_ms(1);
        }
    }
    if (rc == ECCL_OK) {
        atomic_store(&sh->slot[index].val[V_OK], 1);
        atomic_store(&sh->slot[index].val[V_WORLD], info.world_size);
        /* Run in the full world (committed or repaired): its result. */
        if (info.world_size == (uint32_t)f->n && expect(&a, &b, (uint32_t)rank, (uint32_t)f->n) == 0) {
            size_t first = 0, bad = cluster_mismatches(out, b.want, a.t, ob / 4, &first);
            CL_CHECK(bad == 0, "%s committed with %zu wrong elements, first [%zu] = %.9g, want %.9g",
                     kind_names[a.kind], bad, first, cluster_load(out, a.t, first), cluster_load(b.want, a.t, first));
        }
        cluster_push_hash(cluster_fnv1a(out, ob));
        bufs_free(&b);
        return 0;
    }
    CL_CHECK(rc == ECCL_ERR_PEER_LOST, "%s with a peer killed mid-call: %s", kind_names[a.kind], eccl_strerror(rc));
    if (in_place) CL_CHECK(cluster_fnv1a(out, ob) == pre, "%s failed but its output changed", kind_names[a.kind]);
    else CL_CHECK(!in || cluster_fnv1a(in, ib) == pre, "%s failed but its input changed", kind_names[a.kind]);
    atomic_store(&sh->slot[index].val[V_LOST], 1);
    CL_CHECK(one_call(c, &a, &b) == 0, "the retry");
    bufs_free(&b);
    return 0;
}

static void run_repair(cluster *cl, const repair_arg *f)
{
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, f->n, repair_body, (void *)f), 0);
    int victim = cluster_wait_self_killed(cl, f->n, f->victim_rank, 60000);
    assert_true(victim >= 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    int ok = 0, lost = 0, full = 0, first = -1;
    for (int i = 0; i < f->n; i++) {
        if (i == victim) continue;
        ok += (int)atomic_load(&cl->sh->slot[i].val[V_OK]);
        lost += (int)atomic_load(&cl->sh->slot[i].val[V_LOST]);
        full += atomic_load(&cl->sh->slot[i].val[V_WORLD]) == f->n;
        if (!atomic_load(&cl->sh->slot[i].val[V_OK])) continue;
        /* Committed: the same bytes everywhere (the warm-up's hash first). */
        if (first < 0) first = i;
        assert_int_equal(cl->sh->slot[i].n_hash, cl->sh->slot[first].n_hash);
        assert_true(cl->sh->slot[i].hash[cl->sh->slot[i].n_hash - 1] ==
                    cl->sh->slot[first].hash[cl->sh->slot[first].n_hash - 1]);
    }
    printf("    %s, victim rank %d at its send %d: %d survivors OK (%d in the full world), %d PEER_LOST\n",
           kind_names[f->kind], f->victim_rank, f->kill_after, ok, full, lost);
    if (f->fail_record) {
        /* The late rank's loss comes after the commit: it binds nobody. */
        assert_int_equal(ok, f->n - 2);
        assert_int_equal(full, f->n - 2);
        assert_int_equal(lost, 1);
        cluster_fini(cl);
        return;
    }
    assert_true((ok == f->n - 1 && lost == 0) || (ok == 0 && lost == f->n - 1));
    if (f->must_commit) {
        assert_int_equal(ok, f->n - 1);
        assert_int_equal(full, f->n - 1);
    }
    cluster_fini(cl);
}

/* The chain 0 -> 1 -> 2 -> 3: rank 1 dies as it forwards. The root holds
 * the result, 2 and 3 do not: repaired from the root. */
static void test_repair_broadcast_chain(void **state)
{
    repair_arg f = {K_BROADCAST, 4, 1000, 1, 1, 0, 1, 0, 0};
    run_repair(*state, &f);
}

/* In place too: the output is the input of a retry, and is written whole. */
static void test_repair_broadcast_chain_in_place(void **state)
{
    repair_arg f = {K_BROADCAST, 4, 1000, 2, 1, 1, 1, 0, 0};
    run_repair(*state, &f);
}

/* At the largest output a view change repairs (64 KiB, wire version 8):
 * the master carries the root's whole result to ranks 2 and 3. */
static void test_repair_broadcast_chain_largest(void **state)
{
    repair_arg f = {K_BROADCAST, 4, ECCL_WIRE_MAX_REPAIR / 4, 1, 1, 0, 1, 0, 0};
    run_repair(*state, &f);
}

/* Broadcast returns early too (the root and each rank once its data went
 * on): rank 3 calls only after the others returned and the victim died.
 * The master hands it the result the others committed with, which its
 * call then returns, whatever the tree (the chain or the binomial tree). */
static void run_late_caller(void **state)
{
    repair_arg f = {K_BROADCAST, 4, 1000, 1, 1000, 0, 1, 3, 0};
    run_repair(*state, &f);
}
static void test_repair_broadcast_late_caller_chain(void **state) { run_late_caller(state); }

/* The record's staging allocation fails (eccl/dev/alloc): the late rank
 * drops its master link, which fails its call with MASTER_LOST, and never
 * returns bytes it does not hold; the others keep their commit. */
static void test_repair_broadcast_late_caller_no_memory(void **state)
{
    repair_arg f = {K_BROADCAST, 4, 1000, 1, 1000, 0, 1, 3, 1};
    run_repair(*state, &f);
}
static void test_repair_broadcast_late_caller_binomial(void **state) { run_late_caller(state); }

/* Whatever the dispatcher runs and wherever the victim dies: agreement. */
static void test_repair_allreduce_kill_points(void **state)
{
    for (int k = 1; k <= 4; k++) {
        repair_arg f = {K_ALLREDUCE, 4, 1000, 3, k, k % 2, 0, 0, 0};
        run_repair(*state, &f);
    }
}

static void test_repair_allgather_kill_points(void **state)
{
    for (int k = 1; k <= 3; k++) {
        repair_arg f = {K_ALLGATHER, 5, 300, 2, k, 0, 0, 0, 0};
        run_repair(*state, &f);
    }
}

/* ---- reduce-scatter by recursive halving ---------------------------------------- */

#define RS (1u << K_REDUCE_SCATTER)

static void test_recursive_matrix_n3(void **state)
{
    matrix_arg m = {3, 1031, ALL_DTYPES, 1, RS};
    run_matrix(*state, &m);
}

/* Several slices a piece (f32: 2.3 MiB blocks), four ranks folding one in. */
static void test_recursive_matrix_n5_slices(void **state)
{
    matrix_arg m = {5, 600007, DT(ECCL_F32) | DT(ECCL_BF16), 0, RS};
    run_matrix(*state, &m);
}

static void test_recursive_matrix_n6(void **state)
{
    matrix_arg m = {6, 77, DT(ECCL_I8) | DT(ECCL_U32) | DT(ECCL_F16) | DT(ECCL_F64), 1, RS};
    run_matrix(*state, &m);
}

static void test_recursive_matrix_n6_one_element(void **state)
{
    matrix_arg m = {6, 1, DT(ECCL_U8) | DT(ECCL_F32), 0, RS};
    run_matrix(*state, &m);
}

static void test_recursive_v_n3(void **state) { run_v(*state, 3); }
static void test_recursive_v_n5(void **state) { run_v(*state, 5); }

static void test_recursive_orders_n5(void **state)
{
    cluster *cl = *state;
    static int rs = ORDER_RSCATTERS;
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, 5, order_body, &rs), 0);
    assert_int_equal(cluster_wait_all(cl, 120000), 0);
    cluster_fini(cl);
}

/* A core rank killed two frames into its first halving step (20 MB of
 * input at N = 5): no survivor can have its block, every one fails with
 * its output as before; the retry halves among four. */
static void test_recursive_kill_core(void **state)
{
    fault_arg f = {K_REDUCE_SCATTER, 5, 1000000, 1, 0, 0};
    run_fault(*state, &f);
}

/* Core rank 0 of 5 killed late in the call, on its 4th send (its 16 MB
 * of halving and RESULT leave in about five batched sends): the other
 * core ranks have written their blocks by then (caught: a restore that
 * does nothing fails here), rank 4 cannot have its own, so the survivors
 * fail and put their outputs back. */
static void test_recursive_kill_result(void **state)
{
    fault_arg f = {K_REDUCE_SCATTER, 5, 1000000, 0, 1, 4};
    run_fault(*state, &f);
}

/* An extra rank (5 of 6, folding into 1) killed mid-FOLD. */
static void test_recursive_kill_extra(void **state)
{
    fault_arg f = {K_REDUCE_SCATTER, 6, 1000000, 5, 0, 0};
    run_fault(*state, &f);
}

/* Binomial trees rooted at 1 of 6: relative ranks 0..5 are ranks 1..5, 0;
 * rank 5 (relative 4) forwards to rank 0 (relative 5), so rank 0 cannot
 * have its output once rank 5 dies two frames in. */
static void test_binomial_kill_broadcast(void **state)
{
    fault_arg f = {K_BROADCAST, 6, 4000000, 5, 1, 0};
    run_fault(*state, &f);
}

/* Rooted at 0 of 5: rank 2 folds rank 3's partial into its own and sends
 * it up, so the root cannot have its result once rank 2 dies. */
static void test_binomial_kill_reduce(void **state)
{
    fault_arg f = {K_REDUCE, 5, 4000000, 2, 0, 0};
    run_fault(*state, &f);
}

/* Bruck's all-gather: the victim dies two frames into round 0, before any
 * survivor holds its block (8 MB: eight slices), so none is full. */
static void test_bruck_kill_allgather_n4(void **state)
{
    fault_arg f = {K_ALLGATHER, 4, 2000000, 1, 0, 0};
    run_fault(*state, &f);
}

static void test_bruck_kill_allgather_n5(void **state)
{
    fault_arg f = {K_ALLGATHER, 5, 1000000, 3, 0, 0};
    run_fault(*state, &f);
}

/* ---- all-gathers by recursive doubling ------------------------------------------ */

static void test_recag_matrix_n3(void **state)
{
    matrix_arg m = {3, 1031, ALL_DTYPES, 1, ALLGATHER};
    run_matrix(*state, &m);
}

/* Several slices a piece (f32: 2.3 MiB blocks; bf16: two slices), rank 4
 * folding into 0, whose second DOUBLE carries blocks 0, 1 and 4. */
static void test_recag_matrix_n5_slices(void **state)
{
    matrix_arg m = {5, 600007, DT(ECCL_F32) | DT(ECCL_BF16), 0, ALLGATHER};
    run_matrix(*state, &m);
}

/* Two extras: RESULT to rank 4 is two pieces (blocks 0..3, then 5). */
static void test_recag_matrix_n6(void **state)
{
    matrix_arg m = {6, 77, DT(ECCL_I8) | DT(ECCL_U32) | DT(ECCL_F16) | DT(ECCL_F64), 1, ALLGATHER};
    run_matrix(*state, &m);
}

static void test_recag_matrix_n6_one_element(void **state)
{
    matrix_arg m = {6, 1, DT(ECCL_U8) | DT(ECCL_F32), 0, ALLGATHER};
    run_matrix(*state, &m);
}

/* Peer links open while all-gathers of other sizes (one of none) wait. */
static void test_recag_orders_n5(void **state)
{
    cluster *cl = *state;
    static int allgathers = ORDER_ALLGATHERS;
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, 5, order_body, &allgathers), 0);
    assert_int_equal(cluster_wait_all(cl, 120000), 0);
    cluster_fini(cl);
}

/* Core rank 1 of 4 killed at its second send of its first DOUBLE (8 MB:
 * eight slices to rank 0): its block reaches ranks 2 and 3 only through
 * rank 0, once rank 0 has all of it, so no survivor can be full. */
static void test_recag_kill_allgather_n4(void **state)
{
    fault_arg f = {K_ALLGATHER, 4, 2000000, 1, 0, 0};
    run_fault(*state, &f);
}

/* Extra rank 4 of 5 killed at its second send of its FOLD (8 MB, more
 * than a link queues at once: some of it is still owed then): block 4
 * leaves it only through that FOLD, so no survivor can be full. */
static void test_recag_kill_allgather_n5(void **state)
{
    fault_arg f = {K_ALLGATHER, 5, 2000000, 4, 0, 0};
    run_fault(*state, &f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_matrix_n2, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_matrix_n3, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_matrix_n5_one_element, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_matrix_n4_large, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_v_n3, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_v_n5, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_quant_reduce_scatter_n4, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_args_n3, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_barrier_n4, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_orders_n4, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_kill_allgather, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_kill_reduce_scatter, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_kill_broadcast, chain_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_broadcast_one_host_tree, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_broadcast_one_host_tcp_chain, plain_tcp_setup, plain_tcp_teardown),
        cmocka_unit_test_setup_teardown(test_kill_reduce, chain_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_repair_broadcast_chain, chain_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_repair_broadcast_chain_in_place, chain_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_repair_broadcast_chain_largest, chain_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_repair_broadcast_late_caller_chain, chain_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_repair_broadcast_late_caller_binomial, binomial_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_repair_broadcast_late_caller_no_memory, chain_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_repair_allreduce_kill_points, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_repair_allgather_kill_points, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_binomial_matrix_n3, binomial_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_binomial_matrix_n5_slices, binomial_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_binomial_matrix_n6, binomial_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_binomial_matrix_n6_one_element, binomial_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_binomial_orders_n5, binomial_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_binomial_kill_broadcast, binomial_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_binomial_kill_reduce, binomial_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_bruck_matrix_n3, bruck_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_bruck_matrix_n5_slices, bruck_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_bruck_matrix_n6, bruck_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_bruck_matrix_n6_one_element, bruck_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_bruck_v_n3, bruck_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_bruck_v_n6, bruck_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_bruck_orders_n5, bruck_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_bruck_kill_allgather_n4, bruck_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_bruck_kill_allgather_n5, bruck_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_recag_matrix_n3, recag_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_recag_matrix_n5_slices, recag_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_recag_matrix_n6, recag_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_recag_matrix_n6_one_element, recag_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_recag_orders_n5, recag_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_recag_kill_allgather_n4, recag_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_recag_kill_allgather_n5, recag_setup, algo_teardown),
        cmocka_unit_test_setup_teardown(test_recursive_matrix_n3, recursive_setup, recursive_teardown),
        cmocka_unit_test_setup_teardown(test_recursive_matrix_n5_slices, recursive_setup, recursive_teardown),
        cmocka_unit_test_setup_teardown(test_recursive_matrix_n6, recursive_setup, recursive_teardown),
        cmocka_unit_test_setup_teardown(test_recursive_matrix_n6_one_element, recursive_setup, recursive_teardown),
        cmocka_unit_test_setup_teardown(test_recursive_v_n3, recursive_setup, recursive_teardown),
        cmocka_unit_test_setup_teardown(test_recursive_v_n5, recursive_setup, recursive_teardown),
        cmocka_unit_test_setup_teardown(test_recursive_orders_n5, recursive_setup, recursive_teardown),
        cmocka_unit_test_setup_teardown(test_recursive_kill_core, recursive_setup, recursive_teardown),
        cmocka_unit_test_setup_teardown(test_recursive_kill_extra, recursive_setup, recursive_teardown),
        cmocka_unit_test_setup_teardown(test_recursive_kill_result, recursive_setup, recursive_teardown),
    };
    /* ECCL_TEST_FILTER=test_binomial_* (test_recursive_*, test_recag_*): a subset, as test_allreduce_mp. */
    const char *filter = getenv("ECCL_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
