/* The hierarchical all-reduce on loopback, multi-process (tests/cluster.h):
 * workers emulate hosts with p2p_host 127.0.0.(1 + host) (all of
 * 127.0.0.0/8 is loopback on Linux), and the master groups ranks by host.
 *
 *   - host-regular worlds (2 x 2, 3 x 2, 2 x 3) run ECCL_ALGO=allreduce=hier
 *     and report ECCL_ALGO_HIER, every element exact, every peer's result
 *     bits the same, sendbuf untouched;
 *   - without ECCL_ALGO the built-in table picks it above 64 KiB, and the
 *     recursive all-reduce below;
 *   - the master's grouping: peers that register one at a time in
 *     host-interleaved order (A, B, A, B) still get host-contiguous ranks
 *     and the hierarchy; hosts of unequal sizes (3 + 1) are not regular:
 *     forcing hier falls back to another algorithm;
 *   - a peer killed mid-call: the survivors agree (all fail with PEER_LOST,
 *     recvbuf bit-identical to before, or all see it committed), and the
 *     retry at N-1, no longer host-regular, runs another algorithm, exact.
 */
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

#define HIER_ENV "allreduce=hier"
static const char *const host_names[] = {"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"};

/* Peer i on host host_of[i]. */
static void hosts_opts(cluster_opts *o, const int *host_of, int n)
{
    for (int i = 0; i < n; i++) o->p2p_host_of[i] = host_names[host_of[i]];
}

/* Every peer must have produced the same number of results with the same
 * bits. */
static void assert_parity(cluster *cl, int n)
{
    int nh = cl->sh->slot[0].n_hash;
    assert_true(nh > 0);
    for (int p = 1; p < n; p++) {
        assert_int_equal(cl->sh->slot[p].n_hash, nh);
        for (int k = 0; k < nh; k++)
            if (cl->sh->slot[p].hash[k] != cl->sh->slot[0].hash[k])
                fail_msg("parity: result %d differs between peer 0 and peer %d", k, p);
    }
}

typedef struct hier_arg {
    int n;
    const int *host_of;  /* peer index -> host */
    uint32_t want_algo;  /* every call above `small` bytes */
    uint32_t small_algo; /* every call of at most `small` bytes (UINT32_MAX: want_algo) */
    size_t small;
} hier_arg;

static int check_out(const uint8_t *out, eccl_dtype t, eccl_op op, enum cluster_pattern pat, size_t count, int n,
                     uint64_t seed, const char *what)
{
    int idx[CLUSTER_MAX_PEERS];
    for (int i = 0; i < n; i++) idx[i] = i;
    return cluster_check_values(out, t, op, pat, count, idx, n, seed, what);
}

/* One all-reduce, checked completely: result, algorithm, every element,
 * sendbuf untouched out of place; its result hash pushed for parity. */
static int one_call(eccl_comm *c, int index, const hier_arg *a, eccl_dtype t, eccl_op op, size_t count,
                    int in_place, uint64_t tag, uint8_t *send, uint8_t *recv)
{
    size_t bytes = count * eccl_dtype_size(t);
    enum cluster_pattern pat = op == ECCL_PROD ? CL_PAT_PROD : CL_PAT_SMALL;
    cluster_fill(send, t, count, index, tag, pat);
    uint8_t *out = in_place ? send : recv;
    if (!in_place) memset(recv, 0xa5, bytes);
    uint64_t send_hash = cluster_fnv1a(send, bytes);
    eccl_reduce_info info;
    memset(&info, 0xff, sizeof info);
    CL_OK(eccl_allreduce(c, send, out, count, t, op, tag, &info));
    CL_CHECK(info.world_size == (uint32_t)a->n, "world %u", info.world_size);
    uint32_t want = bytes <= a->small && a->small_algo != UINT32_MAX ? a->small_algo : a->want_algo;
    CL_CHECK(count == 0 || info.algorithm == want, "%zu x %s %s at N=%d ran %s, want %s", count,
             eccl_dtype_name(t), eccl_op_name(op), a->n, eccl_algorithm_name(info.algorithm),
             eccl_algorithm_name(want));
    if (!in_place) CL_CHECK(cluster_fnv1a(send, bytes) == send_hash, "out of place: sendbuf written");
    char what[96];
    snprintf(what, sizeof what, "%s %s %zu x %s", in_place ? "in-place" : "out-of-place", eccl_op_name(op), count,
             eccl_dtype_name(t));
    if (check_out(out, t, op, pat, count, a->n, tag, what)) return 1;
    cluster_push_hash(cluster_fnv1a(out, bytes));
    return 0;
}

/* Ranks of one host are contiguous: the master grouped them. */
static int check_grouped(eccl_comm *c, int index, const hier_arg *a)
{
    int64_t rank;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank));
    cluster_shared *sh = cluster_shm();
    atomic_store(&sh->slot[index].val[0], rank + 1);
    for (int i = 0; i < a->n; i++)
        while (!atomic_load(&sh->slot[i].val[0])) cluster_sleep_ms(1);
    int per_host[4] = {0};
    for (int i = 0; i < a->n; i++) per_host[a->host_of[i]]++;
    int L = per_host[a->host_of[0]], regular = 1, hosts = 0;
    for (int h = 0; h < 4; h++) {
        if (per_host[h]) hosts++;
        if (per_host[h] && per_host[h] != L) regular = 0;
    }
    if (!regular || L < 2 || hosts < 2) return 0;
    for (int i = 0; i < a->n; i++) {
        long long ri = atomic_load(&sh->slot[i].val[0]) - 1;
        for (int j = 0; j < a->n; j++) {
            long long rj = atomic_load(&sh->slot[j].val[0]) - 1;
            int same_host = a->host_of[i] == a->host_of[j];
            CL_CHECK(same_host == (ri / L == rj / L), "peers %d (host %d, rank %lld) and %d (host %d, rank %lld): "
                     "a host's ranks are not contiguous", i, a->host_of[i], ri, j, a->host_of[j], rj);
        }
    }
    return 0;
}

static int hier_body(eccl_comm *c, int index, void *argp)
{
    const hier_arg *a = argp;
    if (check_grouped(c, index, a)) return 1;
    /* The master counts each peer's host-mates (ECCL_ATTR_HOST_RANKS). */
    int64_t host_ranks = 0, want = 0;
    for (int j = 0; j < a->n; j++) want += a->host_of[j] == a->host_of[index];
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_HOST_RANKS, &host_ranks));
    CL_CHECK(host_ranks == want, "peer %d: %lld ranks on its host, want %lld", index, (long long)host_ranks,
             (long long)want);
    /* Counts: empty, under L, one per rank, odd, and 2.8 MB (shards of
     * more than one 1 MiB slice at L = 2). */
    static const size_t counts[] = {0, 1, 3, 6, 1001, 700001};
    size_t cap = 700001 * 8 + 64;
    uint8_t *send = malloc(cap), *recv = malloc(cap);
    CL_CHECK(send && recv, "oom");
    uint64_t tag = 1;
    static const eccl_dtype dts[] = {ECCL_I32, ECCL_U8, ECCL_F32, ECCL_F64, ECCL_BF16};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (int op = 0; op < ECCL_OP_COUNT; op++)
            for (int ip = 0; ip < 2; ip++) {
                size_t count = counts[(d * ECCL_OP_COUNT + (size_t)op + (size_t)ip) % 5];
                if (one_call(c, index, a, dts[d], (eccl_op)op, count, ip, tag++, send, recv)) return 1;
            }
    for (int ip = 0; ip < 2; ip++)
        if (one_call(c, index, a, ECCL_F32, ECCL_SUM, counts[5], ip, tag++, send, recv)) return 1;
    free(send);
    free(recv);
    return 0;
}

static void run_hier(cluster *cl, const hier_arg *a, const char *algo_env)
{
    cluster_opts o = {.algo_env = algo_env};
    hosts_opts(&o, a->host_of, a->n);
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, a->n, hier_body, (void *)a), 0);
    assert_int_equal(cluster_wait_all(cl, 120000), 0);
    for (int p = 0; p < a->n; p++) assert_int_equal(cl->sh->slot[p].world, a->n);
    assert_parity(cl, a->n);
    cluster_fini(cl);
}

/* Hosts as spawned: peer i on host i / L, or interleaved. */
static const int hosts_2x2[] = {0, 0, 1, 1};
static const int hosts_3x2[] = {0, 0, 1, 1, 2, 2};
static const int hosts_2x3_mixed[] = {0, 1, 0, 1, 0, 1};

static void test_forced_2x2(void **state)
{
    hier_arg a = {4, hosts_2x2, ECCL_ALGO_HIER, UINT32_MAX, 0};
    run_hier(*state, &a, HIER_ENV);
}

static void test_forced_3x2(void **state)
{
    hier_arg a = {6, hosts_3x2, ECCL_ALGO_HIER, UINT32_MAX, 0};
    run_hier(*state, &a, HIER_ENV);
}

/* Peers spawned at once, hosts alternating by index: whatever order they
 * register in, the master groups them. */
static void test_forced_2x3_mixed(void **state)
{
    hier_arg a = {6, hosts_2x3_mixed, ECCL_ALGO_HIER, UINT32_MAX, 0};
    run_hier(*state, &a, HIER_ENV);
}

/* The built-in table of host-regular worlds: above 2 KiB the hierarchy
 * (two hosts), below the recursive all-reduce. */
static void test_default_2x2(void **state)
{
    hier_arg a = {4, hosts_2x2, ECCL_ALGO_HIER, ECCL_ALGO_RECURSIVE, 2048};
    run_hier(*state, &a, NULL);
}

/* 3 + 1: not host-regular, forcing hier falls back (the ring above 64 KiB,
 * the recursive all-reduce below). */
static void test_irregular_3_1(void **state)
{
    static const int hosts[] = {0, 0, 0, 1};
    hier_arg a = {4, hosts, ECCL_ALGO_RING, ECCL_ALGO_RECURSIVE, 65536};
    run_hier(*state, &a, HIER_ENV);
}

/* Peers register one at a time, hosts A, B, A, B: each is admitted right
 * after the ones before it, so without the master's grouping the ring
 * order would interleave hosts and the world would not be regular. */
static int registered(cluster *cl, void *arg)
{
    int i = *(int *)arg;
    return atomic_load(&cl->sh->slot[i].phase) >= CL_PHASE_ADMITTING;
}

static void test_interleaved_joins(void **state)
{
    cluster *cl = *state;
    static const int hosts[] = {0, 1, 0, 1};
    hier_arg a = {4, hosts, ECCL_ALGO_HIER, UINT32_MAX, 0};
    cluster_opts o = {.algo_env = HIER_ENV};
    hosts_opts(&o, hosts, 4);
    assert_int_equal(cluster_init(cl, &o), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(cluster_spawn(cl, i, 4, hier_body, &a), 0);
        assert_int_equal(cluster_wait_for(cl, registered, &i, 30000), 0);
        cluster_sleep_ms(100); /* admitted before the next registers, most runs */
    }
    assert_int_equal(cluster_wait_all(cl, 120000), 0);
    assert_parity(cl, 4);
    cluster_fini(cl);
}

/* ---- a peer killed mid-call ------------------------------------------------ */

#define KILL_AFTER 2
#define TAG_FAULT 77
#define V_ENTERED 2
#define V_OUTCOME 3 /* 1: success at N (committed), 2: PEER_LOST, 3: success at N-1 */
static atomic_int g_sends;

static int die_on_kth(const char *name, int *failnum, void **failinfo, unsigned int *flags)
{
    (void)name, (void)failnum, (void)failinfo, (void)flags;
    if (atomic_fetch_add(&g_sends, 1) + 1 >= KILL_AFTER) raise(SIGKILL);
    return 0;
}

typedef struct kill_arg {
    int n, victim_rank, in_place;
    size_t count;
    const int *host_of;
} kill_arg;

/* f32 SUM of small integers filled by rank (exact), checked for the world
 * it reports; *algo_out: the algorithm it ran. */
static int rank_call(eccl_comm *c, float *send, float *recv, size_t count, int in_place, uint64_t tag,
                     eccl_result *rc_out, uint32_t *world_out, uint32_t *algo_out)
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
    *algo_out = info.algorithm;
    return check_out((uint8_t *)out, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, count, (int)info.world_size, tag,
                     "by rank");
}

static int kill_body(eccl_comm *c, int index, void *argp)
{
    const kill_arg *f = argp;
    int64_t rank;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank));
    float *send = malloc(f->count * 4 + 64), *recv = malloc(f->count * 4 + 64);
    CL_CHECK(send && recv, "oom");
    eccl_result rc;
    uint32_t world = 0, algo = 0;
    if (rank_call(c, send, recv, f->count, f->in_place, 10, &rc, &world, &algo)) return 1;
    CL_CHECK(rc == ECCL_OK && world == (uint32_t)f->n && algo == ECCL_ALGO_HIER, "warm-up: %s at world %u, %s",
             eccl_strerror(rc), world, eccl_algorithm_name(algo));
    cluster_shared *sh = cluster_shm();
    if (rank == f->victim_rank) {
        /* The survivors enter first, so the loss finds them inside the call. */
        for (int i = 0; i < f->n; i++)
            if (i != index)
                while (!atomic_load(&sh->slot[i].val[V_ENTERED])) cluster_sleep_ms(1);
        cluster_sleep_ms(30);
        CL_CHECK(fiu_init(0) == 0, "fiu_init");
        CL_CHECK(cluster_hook_sends(die_on_kth) == 0, "fiu");
    }
    cluster_fill(send, ECCL_F32, f->count, (int)rank, TAG_FAULT, CL_PAT_SMALL);
    float *out = f->in_place ? send : recv;
    if (!f->in_place) memset(recv, 0x3c, f->count * 4);
    /* In place the failure puts the output (send) back; out of place it
     * leaves the input (send) intact, and the output is unspecified. */
    uint64_t pre = cluster_fnv1a(send, f->count * 4);
    atomic_store(&sh->slot[index].val[V_ENTERED], 1);
    eccl_reduce_info info;
    rc = eccl_allreduce(c, send, out, f->count, ECCL_F32, ECCL_SUM, TAG_FAULT, &info);
    CL_CHECK(rank != f->victim_rank, "the victim survived its failpoint");
    if (rc == ECCL_OK) {
        CL_CHECK(info.world_size == (uint32_t)f->n || info.world_size == (uint32_t)f->n - 1, "world %u",
                 info.world_size);
        atomic_store(&sh->slot[index].val[V_OUTCOME], info.world_size == (uint32_t)f->n ? 1 : 3);
        if (info.world_size == (uint32_t)f->n - 1) {
            int64_t r2;
            CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &r2));
            CL_CHECK(r2 == rank, "renumbered and succeeded at once: the inputs belong to another rank");
            CL_CHECK(info.algorithm != ECCL_ALGO_HIER, "hier at N-1");
        }
        return check_out((uint8_t *)out, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, f->count, (int)info.world_size,
                         TAG_FAULT, "hier, a peer killed");
    }
    CL_CHECK(rc == ECCL_ERR_PEER_LOST, "a peer killed mid-call: %s, want PEER_LOST", eccl_strerror(rc));
    CL_CHECK(cluster_fnv1a(send, f->count * 4) == pre, "failed but its %s changed", f->in_place ? "output" : "input");
    atomic_store(&sh->slot[index].val[V_OUTCOME], 2);
    int64_t w;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &w));
    CL_CHECK(w == f->n - 1, "world %lld after the loss", (long long)w);
    /* The same call again, on the survivors: not host-regular any more. */
    if (rank_call(c, send, recv, f->count, f->in_place, TAG_FAULT, &rc, &world, &algo)) return 1;
    CL_CHECK(rc == ECCL_OK && world == (uint32_t)f->n - 1, "the retry: %s at world %u", eccl_strerror(rc), world);
    CL_CHECK(algo != ECCL_ALGO_HIER, "the retry at N-1 ran hier");
    free(send);
    free(recv);
    return 0;
}

static void run_kill(cluster *cl, const kill_arg *f)
{
    cluster_opts o = {.algo_env = HIER_ENV};
    hosts_opts(&o, f->host_of, f->n);
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, f->n, kill_body, (void *)f), 0);
    assert_true(cluster_wait_self_killed(cl, f->n, f->victim_rank, 60000) >= 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    int seen[4] = {0};
    for (int i = 0; i < f->n; i++) seen[atomic_load(&cl->sh->slot[i].val[V_OUTCOME]) & 3]++;
    printf("    N=%d, rank %d killed, %zu floats: %d survivors lost the call, %d saw it committed, %d entered "
           "after\n", f->n, f->victim_rank, f->count, seen[2], seen[1], seen[3]);
    assert_false(seen[1] && seen[2]); /* survivors never disagree */
    assert_true(seen[2] >= 1);        /* the restore path ran */
    cluster_fini(cl);
}

/* 8 MB: the victim dies a slice or two into the call (its intra-host
 * sends). 2 x 2, in place, local rank 1 of host 0; 3 x 2, out of place,
 * local rank 0 of host 2. */
static void test_kill_2x2(void **state)
{
    kill_arg f = {4, 1, 1, 2000000, hosts_2x2};
    run_kill(*state, &f);
}

static void test_kill_3x2(void **state)
{
    kill_arg f = {6, 4, 0, 2000001, hosts_3x2};
    run_kill(*state, &f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_forced_2x2, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_forced_3x2, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_forced_2x3_mixed, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_default_2x2, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_irregular_3_1, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_interleaved_joins, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_kill_2x2, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_kill_3x2, cluster_test_setup, cluster_test_teardown),
    };
    const char *filter = getenv("ECCL_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("hier_mp", tests, NULL, NULL);
}
