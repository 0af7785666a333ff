/* All-to-all(v) across real processes on loopback (tests/cluster.h): every
 * block checked against its sender's independent fill, gaps nobody may
 * write, in place, OCCL's order freedom mixed with other collectives, the
 * argument checks, and the fault contract (a peer killed mid-call: every
 * survivor fails with its input intact, the retry runs on the rest).
 *
 * Rank i's block for rank j is filled as contribution i * CLUSTER_MAX_PEERS
 * + j, so a block sent to the wrong rank, or taken from the wrong sender,
 * shows. Ranks are ring ranks (ECCL_ATTR_RANK), not spawn indices. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fiu-control.h>
#include <fiu.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"

#define GARBAGE 0xa5

static int block_id(uint32_t from, uint32_t to) { return (int)(from * CLUSTER_MAX_PEERS + to); }

/* One v layout: counts[i][j] elements from rank i to rank j, every
 * receive block i at rdispls[i] with a gap of `gap` elements before it,
 * send blocks back to back. */
typedef struct layout {
    uint32_t n;
    size_t counts[CLUSTER_MAX_PEERS][CLUSTER_MAX_PEERS];
    size_t scount[CLUSTER_MAX_PEERS], sdispl[CLUSTER_MAX_PEERS];
    size_t rcount[CLUSTER_MAX_PEERS], rdispl[CLUSTER_MAX_PEERS];
    size_t sext, rext; /* elements */
} layout;

static void layout_for(layout *l, uint32_t rank, size_t gap)
{
    l->sext = l->rext = 0;
    for (uint32_t j = 0; j < l->n; j++) {
        l->scount[j] = l->counts[rank][j];
        l->sdispl[j] = l->sext;
        l->sext += l->scount[j];
        l->rcount[j] = l->counts[j][rank];
        l->rdispl[j] = l->rext + gap;
        l->rext += gap + l->rcount[j];
    }
}

/* Checks every receive block of `recv` (layout l) and that every other
 * element still holds GARBAGE. */
static int check_recv(const uint8_t *recv, const layout *l, eccl_dtype t, uint32_t rank, uint64_t seed,
                      const char *what)
{
    size_t es = eccl_dtype_size(t);
    uint8_t *want = malloc(l->rext * es + 1);
    CL_CHECK(want != NULL, "oom");
    memset(want, GARBAGE, l->rext * es + 1);
    for (uint32_t i = 0; i < l->n; i++)
        cluster_fill(want + l->rdispl[i] * es, t, l->rcount[i], block_id(i, rank), seed, CL_PAT_RANDOM);
    size_t first = 0, bad = cluster_mismatches(recv, want, t, l->rext, &first);
    free(want);
    CL_CHECK(bad == 0, "%s: rank %u of %u: %zu wrong elements, first at %zu", what, rank, l->n, bad, first);
    return 0;
}

/* ---- uniform all-to-all: types, sizes, in place --------------------------------- */

static int uniform_call(eccl_comm *c, eccl_dtype t, size_t count, int in_place, uint64_t tag)
{
    uint32_t rank, n;
    CL_CHECK(cluster_rank_world(c, &rank, &n) == 0, "attrs");
    size_t es = eccl_dtype_size(t), bytes = (size_t)n * count * es;
    uint8_t *send = malloc(bytes + 1), *recv = malloc(bytes + 1);
    CL_CHECK(send && recv, "oom");
    for (uint32_t j = 0; j < n; j++) cluster_fill(send + j * count * es, t, count, block_id(rank, j), tag, CL_PAT_RANDOM);
    memset(recv, GARBAGE, bytes + 1);
    send[bytes] = GARBAGE;
    uint8_t *out = in_place ? send : recv;
    uint64_t send_hash = cluster_fnv1a(send, bytes);
    eccl_reduce_info info;
    eccl_result rc = eccl_alltoall(c, send, out, count, t, tag, &info);
    CL_CHECK(rc == ECCL_OK, "alltoall %zu x %s %s: %s", count, eccl_dtype_name(t), in_place ? "in place" : "",
             eccl_strerror(rc));
    CL_CHECK(info.world_size == n && info.algorithm == ECCL_ALGO_PAIRWISE, "info %u %u", info.world_size,
             info.algorithm);
    CL_CHECK(info.tx_bytes == (uint64_t)(n - 1) * count * es && info.rx_bytes == info.tx_bytes,
             "tx %llu rx %llu", (unsigned long long)info.tx_bytes, (unsigned long long)info.rx_bytes);
    layout l = {.n = n};
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < n; j++) l.counts[i][j] = count;
    layout_for(&l, rank, 0);
    if (check_recv(out, &l, t, rank, tag, "alltoall")) return 1;
    CL_CHECK(out[bytes] == GARBAGE, "wrote past the end");
    if (!in_place) CL_CHECK(cluster_fnv1a(send, bytes) == send_hash, "sendbuf changed");
    free(send);
    free(recv);
    return 0;
}

static int matrix_body(eccl_comm *c, int index, void *arg)
{
    (void)index;
    size_t big = *(size_t *)arg;
    const eccl_dtype types[] = {ECCL_U8, ECCL_BF16, ECCL_F32, ECCL_F64};
    uint64_t tag = 100;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
        for (int in_place = 0; in_place < 2; in_place++)
            for (size_t count = 1; count <= 7; count += 6)
                if (uniform_call(c, types[k], count, in_place, tag++)) return 1;
    /* Blocks of several slices each. */
    if (big && (uniform_call(c, ECCL_F32, big, 0, tag++) || uniform_call(c, ECCL_F32, big, 1, tag++))) return 1;
    return 0;
}

static void run_matrix(cluster *cl, int n, size_t big)
{
    assert_int_equal(cluster_run(cl, NULL, n, matrix_body, &big, 120000), 0);
}

static void test_matrix_n2(void **state) { run_matrix(*state, 2, 0); }
static void test_matrix_n3(void **state) { run_matrix(*state, 3, 0); }
static void test_matrix_n4_large(void **state) { run_matrix(*state, 4, 600007); }

/* ---- all-to-allv: uneven, empty, gaps, in place -------------------------------- */

static int v_call(eccl_comm *c, layout *l, eccl_dtype t, int in_place, uint64_t tag)
{
    uint32_t rank, n;
    CL_CHECK(cluster_rank_world(c, &rank, &n) == 0 && n == l->n, "attrs");
    layout_for(l, rank, in_place ? 0 : 3);
    size_t es = eccl_dtype_size(t);
    uint8_t *send = malloc(l->sext * es + 1), *recv = malloc(l->rext * es + 1);
    CL_CHECK(send && recv, "oom");
    memset(recv, GARBAGE, l->rext * es + 1);
    if (in_place) {
        /* The receive layout is the send layout: block j for rank j. */
        for (uint32_t j = 0; j < n; j++)
            cluster_fill(recv + l->rdispl[j] * es, t, l->rcount[j], block_id(rank, j), tag, CL_PAT_RANDOM);
    } else {
        for (uint32_t j = 0; j < n; j++)
            cluster_fill(send + l->sdispl[j] * es, t, l->scount[j], block_id(rank, j), tag, CL_PAT_RANDOM);
    }
    eccl_result rc = in_place ? eccl_alltoallv(c, recv, NULL, NULL, recv, l->rcount, l->rdispl, t, tag, NULL)
                              : eccl_alltoallv(c, send, l->scount, l->sdispl, recv, l->rcount, l->rdispl, t, tag,
                                               NULL);
    CL_CHECK(rc == ECCL_OK, "alltoallv: %s", eccl_strerror(rc));
    if (check_recv(recv, l, t, rank, tag, in_place ? "alltoallv in place" : "alltoallv")) return 1;
    CL_CHECK(recv[l->rext * es] == GARBAGE, "wrote past the end");
    free(send);
    free(recv);
    return 0;
}

static int v_body(eccl_comm *c, int index, void *arg)
{
    (void)index, (void)arg;
    uint32_t rank, n;
    CL_CHECK(cluster_rank_world(c, &rank, &n) == 0, "attrs");
    layout l = {.n = n};
    for (uint64_t round = 0; round < 3; round++) {
        /* Uneven, with empty blocks, and rank 1 sending and receiving
         * nothing at all (it still owes everyone its done token). */
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t j = 0; j < n; j++)
                l.counts[i][j] = i == 1 || j == 1 ? 0 : (i * 7 + j * 3 + round) % 5 * (round == 2 ? 100003 : 1);
        if (v_call(c, &l, ECCL_F32, 0, 200 + round)) return 1;
        /* In place needs counts[i][j] == counts[j][i]. */
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t j = 0; j < n; j++) l.counts[i][j] = (i + j + round) % 4;
        if (v_call(c, &l, ECCL_U8, 1, 300 + round)) return 1;
    }
    return 0;
}

static void test_v_n5(void **state)
{
    cluster *cl = *state;
    assert_int_equal(cluster_run(cl, NULL, 5, v_body, NULL, 120000), 0);
}

/* ---- arguments ---------------------------------------------------------------------- */

static int args_body(eccl_comm *c, int index, void *arg)
{
    (void)index, (void)arg;
    uint32_t rank, n;
    CL_CHECK(cluster_rank_world(c, &rank, &n) == 0, "attrs");
    float send[8] = {0}, recv[8] = {0};
    size_t ones[CLUSTER_MAX_PEERS], displs[CLUSTER_MAX_PEERS], same[CLUSTER_MAX_PEERS];
    for (uint32_t i = 0; i < n; i++) ones[i] = 1, displs[i] = i, same[i] = 0;
    CL_EXPECT_RC(eccl_alltoall(NULL, send, recv, 1, ECCL_F32, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_alltoall(c, send, recv, 1, (eccl_dtype)99, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_alltoall(c, NULL, recv, 1, ECCL_F32, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_alltoallv(c, send, ones, displs, recv, NULL, displs, ECCL_F32, 1, NULL),
                 ECCL_ERR_INVALID_ARG);
    /* Overlapping receive blocks. */
    CL_EXPECT_RC(eccl_alltoallv(c, send, ones, displs, recv, ones, same, ECCL_F32, 1, NULL), ECCL_ERR_INVALID_ARG);
    /* No send layout but not in place; a send layout half given. */
    CL_EXPECT_RC(eccl_alltoallv(c, send, NULL, NULL, recv, ones, displs, ECCL_F32, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_alltoallv(c, send, ones, NULL, recv, ones, displs, ECCL_F32, 1, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_alltoall_async(c, send, recv, 1, ECCL_F32, 1, NULL), ECCL_ERR_INVALID_ARG);
    /* Nothing above started a call: tag 1 still works, for everyone. */
    CL_OK(eccl_alltoallv(c, send, ones, displs, recv, ones, displs, ECCL_F32, 1, NULL));
    return 0;
}

static void test_args_n3(void **state)
{
    cluster *cl = *state;
    assert_int_equal(cluster_run(cl, NULL, 3, args_body, NULL, 60000), 0);
}

/* ---- OCCL: async all-to-alls and all-gathers issued in different orders -------- */

#define ORDER_OPS 6

static int order_body(eccl_comm *c, int index, void *arg)
{
    (void)index, (void)arg;
    uint32_t rank, n;
    CL_CHECK(cluster_rank_world(c, &rank, &n) == 0, "attrs");
    size_t count = 20000, bytes = (size_t)n * count * 4;
    uint8_t *send[ORDER_OPS], *recv[ORDER_OPS];
    eccl_request *req[ORDER_OPS];
    for (int k = 0; k < ORDER_OPS; k++) {
        send[k] = malloc(bytes);
        recv[k] = malloc(bytes + 1);
        CL_CHECK(send[k] && recv[k], "oom");
        memset(recv[k], GARBAGE, bytes + 1);
        uint64_t tag = 400 + (uint64_t)k;
        if (k % 2 == 0)
            for (uint32_t j = 0; j < n; j++)
                cluster_fill(send[k] + j * count * 4, ECCL_F32, count, block_id(rank, j), tag, CL_PAT_RANDOM);
        else
            cluster_fill(send[k], ECCL_F32, count, (int)rank, tag, CL_PAT_RANDOM);
    }
    /* Rotated by rank, and reversed on odd ranks. */
    for (int s = 0; s < ORDER_OPS; s++) {
        int k = (s + (int)rank) % ORDER_OPS;
        if (rank % 2) k = ORDER_OPS - 1 - k;
        uint64_t tag = 400 + (uint64_t)k;
        eccl_result rc = k % 2 == 0 ? eccl_alltoall_async(c, send[k], recv[k], count, ECCL_F32, tag, &req[k])
                                    : eccl_allgather_async(c, send[k], recv[k], count, ECCL_F32, tag, &req[k]);
        CL_CHECK(rc == ECCL_OK, "issue %d: %s", k, eccl_strerror(rc));
    }
    for (int k = 0; k < ORDER_OPS; k++) CL_OK(eccl_wait(req[k], NULL));
    layout l = {.n = n};
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < n; j++) l.counts[i][j] = count;
    layout_for(&l, rank, 0);
    for (int k = 0; k < ORDER_OPS; k += 2)
        if (check_recv(recv[k], &l, ECCL_F32, rank, 400 + (uint64_t)k, "alltoall among others")) return 1;
    for (int k = 0; k < ORDER_OPS; k++) {
        free(send[k]);
        free(recv[k]);
    }
    return 0;
}

static void test_orders_n4(void **state)
{
    cluster *cl = *state;
    assert_int_equal(cluster_run(cl, NULL, 4, order_body, NULL, 120000), 0);
}

/* ---- the fault contract: a peer killed mid-call ---------------------------------
 * The victim's failpoint SIGKILLs it on its second send of the faulted
 * call, with most of its blocks still to go, so survivors hold partly
 * written outputs when the loss is noticed. */

#define KILL_AFTER_SENDS 2
#define TAG_FAULT 77
#define V_ENTERED 2
#define V_LOST 3
#define FAULT_N 4
#define FAULT_COUNT 2000000 /* 8 MB blocks */

static atomic_int g_sends;

static int die_on_kth(const char *name, int *failnum, void **failinfo, unsigned int *flags)
{
    (void)name, (void)failnum, (void)failinfo, (void)flags;
    if (atomic_fetch_add(&g_sends, 1) + 1 >= KILL_AFTER_SENDS) raise(SIGKILL);
    return 0;
}

static int fault_body(eccl_comm *c, int index, void *arg)
{
    int victim = *(int *)arg;
    uint32_t rank, n;
    CL_CHECK(cluster_rank_world(c, &rank, &n) == 0, "attrs");
    if (uniform_call(c, ECCL_F32, 1000, 0, 10)) return 1; /* the full world works */
    cluster_shared *sh = cluster_shm();
    if ((int)rank == victim) {
        for (int i = 0; i < FAULT_N; i++)
            if (i != index)
                while (!atomic_load(&sh->slot[i].val[V_ENTERED])) cluster_sleep_ms(1);
        cluster_sleep_ms(30);
        CL_CHECK(fiu_init(0) == 0, "fiu_init");
        CL_CHECK(cluster_hook_sends(die_on_kth) == 0, "fiu");
    }
    size_t bytes = (size_t)n * FAULT_COUNT * 4;
    uint8_t *send = malloc(bytes), *recv = malloc(bytes);
    CL_CHECK(send && recv, "oom");
    for (uint32_t j = 0; j < n; j++)
        cluster_fill(send + j * (size_t)FAULT_COUNT * 4, ECCL_F32, FAULT_COUNT, block_id(rank, j), TAG_FAULT,
                     CL_PAT_RANDOM);
    memset(recv, 0x3c, bytes);
    uint64_t pre = cluster_fnv1a(send, bytes); /* out of place: a failure leaves the input intact */
    atomic_store(&sh->slot[index].val[V_ENTERED], 1);
    eccl_result rc = eccl_alltoall(c, send, recv, FAULT_COUNT, ECCL_F32, TAG_FAULT, NULL);
    CL_CHECK((int)rank != victim, "the victim survived its failpoint");
    uint64_t post = cluster_fnv1a(send, bytes);
    free(send);
    free(recv);
    if (rc == ECCL_OK) {
        /* Only when the view change came before this rank's call: its
         * layout then failed as PEER_LOST, or it ran at world n-1. */
        CL_CHECK(cluster_rank_world(c, &rank, &n) == 0 && n == FAULT_N - 1, "succeeded at world %u with a peer killed", n);
        return 0;
    }
    CL_CHECK(rc == ECCL_ERR_PEER_LOST, "alltoall with a peer killed mid-call: %s, want PEER_LOST",
             eccl_strerror(rc));
    CL_CHECK(post == pre, "alltoall failed but its input changed");
    atomic_store(&sh->slot[index].val[V_LOST], 1);
    CL_CHECK(cluster_rank_world(c, &rank, &n) == 0 && n == FAULT_N - 1, "world %u after the loss", n);
    return uniform_call(c, ECCL_F32, FAULT_COUNT / 4, 0, TAG_FAULT); /* the retry, at world n-1 */
}

static void test_kill_n4(void **state)
{
    cluster *cl = *state;
    int victim = 2;
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, FAULT_N, fault_body, &victim), 0);
    assert_true(cluster_wait_self_killed(cl, FAULT_N, victim, 60000) >= 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    int lost = 0;
    for (int i = 0; i < FAULT_N; i++) lost += (int)atomic_load(&cl->sh->slot[i].val[V_LOST]);
    assert_true(lost >= 1); /* the restore path ran */
    cluster_fini(cl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_matrix_n2, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_matrix_n3, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_matrix_n4_large, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_v_n5, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_args_n3, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_orders_n4, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_kill_n4, cluster_test_setup, cluster_test_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
