/* eccl_comm_optimize_topology on loopback: every peer measures its probes,
 * the master solves and re-forms the ring, collectives run on the new
 * ring; the store is kept across calls; failpoints on the probes and on
 * the rewiring (connect, accept, send, recv); a member lost mid-call;
 * conflicts with other calls.
 * (The gain itself is shown on a simulated WAN: scenarios/ci/topo_wan.scn.) */
#include <fiu-control.h>
#include <fiu.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cluster.h"

enum {
    V_RC,       /* first optimize call */
    V_CHANGED,
    V_PAIRS,
    V_PROBES,
    V_FAILED,
    V_EXACT,
    V_UNMEASURED,
    V_FIRED,    /* failpoint hits in this process */
    V_RC2,      /* second call */
    V_PAIRS2,
    V_CHANGED2,
    V_IN_CALL,  /* 1 while inside the first call */
    V_TRIES,
    V_WORLD,
    V_MOON,     /* info.moonshot of the first call */
    V_MOON2     /* ... and of the second */
};

static long long val(cluster *cl, int i, int k) { return atomic_load(&cl->sh->slot[i].val[k]); }
static void set(int k, long long v) { atomic_store(&cluster_self()->val[k], v); }

/* libfiu: fail the calls whose numbers (0-based, counted from arming) are
 * listed, and count each failure into the slot. At call number g_mark the
 * call passes but raises CTL_REWIRING for every process: the rewiring
 * has begun (see fp_mode). */
enum { CTL_LEFT_OUT = 0, CTL_REWIRING = 1 };
static atomic_int g_calls;
static int g_fail_at[2] = {-1, -1}, g_mark = -1;

static int fp_decide(const char *name, int *failnum, void **failinfo, unsigned int *flags)
{
    (void)name, (void)failnum, (void)failinfo, (void)flags;
    int n = atomic_fetch_add(&g_calls, 1);
    if (n == g_mark) atomic_store(&cluster_shm()->ctl[CTL_REWIRING], 1);
    if (n != g_fail_at[0] && n != g_fail_at[1]) return 0;
    atomic_fetch_add(&cluster_self()->val[V_FIRED], 1);
    return 1;
}

/* Once CTL_REWIRING is up: fail the first call in this process, once. */
static atomic_int g_rewire_spent;

static int rewiring(void) { return atomic_load(&cluster_shm()->ctl[CTL_REWIRING]) != 0; }

static int fp_decide_rewiring(const char *name, int *failnum, void **failinfo, unsigned int *flags)
{
    (void)failnum, (void)failinfo, (void)flags;
    if (!rewiring() || atomic_exchange(&g_rewire_spent, 1))
        return 0;
    atomic_fetch_add(&cluster_self()->val[V_FIRED], 1);
    if (getenv("FP_DEBUG"))
        fprintf(stderr, "FIRED %s in peer %d\n", name, cluster_self_index());
    return 1;
}

static int fp_init(void)
{
    static int inited;
    if (!inited && fiu_init(0) != 0) return -1;
    inited = 1;
    return 0;
}

static int fp_arm(const char *name, int first, int second, int mark)
{
    if (fp_init() != 0) return -1;
    atomic_store(&g_calls, 0);
    g_fail_at[0] = first;
    g_fail_at[1] = second;
    g_mark = mark;
    return fiu_enable_external(name, 1, NULL, 0, fp_decide);
}

static int fp_arm_rewiring(const char *name)
{
    if (fp_init() != 0) return -1;
    atomic_store(&g_rewire_spent, 0);
    return fiu_enable_external(name, 1, NULL, 0, fp_decide_rewiring);
}

#define AR_COUNT (1u << 16)
#define CONNS 2

/* A checked f32 SUM over the n peers of the run; its hash is pushed. */
static int checked_allreduce(eccl_comm *c, int index, int n, uint64_t tag)
{
    float *b = malloc(AR_COUNT * sizeof *b);
    CL_CHECK(b != NULL, "oom");
    cluster_fill(b, ECCL_F32, AR_COUNT, index, tag, CL_PAT_SMALL);
    eccl_reduce_info info;
    eccl_result rc = eccl_allreduce(c, b, b, AR_COUNT, ECCL_F32, ECCL_SUM, tag, &info);
    int idx[CLUSTER_MAX_PEERS], k = 0;
    for (int i = 0; i < CLUSTER_MAX_PEERS && k < n; i++)
        if (i != (int)atomic_load(&cluster_shm()->ctl[CTL_LEFT_OUT]) - 1) idx[k++] = i;
    int bad = rc != ECCL_OK || info.world_size != (uint32_t)n ||
              cluster_check_values(b, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, AR_COUNT, idx, n, tag,
                                   "all-reduce after optimize") != 0;
    cluster_push_hash(cluster_fnv1a(b, AR_COUNT * sizeof *b));
    free(b);
    CL_CHECK(!bad, "all-reduce tag %llu: %s, world %u", (unsigned long long)tag,
             eccl_strerror(rc), info.world_size);
    return 0;
}

static void record(const eccl_topo_info *in, eccl_result rc)
{
    set(V_RC, rc);
    set(V_CHANGED, in->changed);
    set(V_PAIRS, in->pairs_measured);
    set(V_PROBES, in->probes_sent);
    set(V_FAILED, in->probes_failed);
    set(V_EXACT, in->exact);
    set(V_UNMEASURED, in->unmeasured_links);
    set(V_MOON, in->moonshot);
}

/* FP_PROBE: rank 0's first probe connect (to its ring next) fails, so the
 * old ring holds an unmeasured link and any ring without it is better: the
 * ring must change. The other modes add a failure in the rewiring. It
 * starts in rank 0 at its first connect after the probes, which is to its
 * new next (its old next link is the unmeasured one):
 * FP_PROBE_AND_REWIRE fails that connect. FP_REWIRE_* let it pass, and then
 * fail once: the next accept in each other peer; the next send in rank 0
 * (the hello on its new link, as a rule); the first recv on an accepted
 * link in each other peer (the new link's hello: a recv on the master's
 * link, which the process dialled, is not a candidate, and neither is a
 * link whose hello was read before the rewiring began, since its next
 * bytes may be the first all-reduce's). */
enum fp_mode {
    FP_NONE,
    FP_PROBE,
    FP_PROBE_AND_REWIRE,
    FP_REWIRE_ACCEPT,
    FP_REWIRE_SEND,
    FP_REWIRE_RECV
};
static const char *const rewire_fp[] = {
    [FP_REWIRE_ACCEPT] = "eccl/net/accept",
    [FP_REWIRE_SEND] = "eccl/net/send",
    [FP_REWIRE_RECV] = "eccl/net/recv_hello",
};

/* Optimize, all-reduce, optimize again (only what failed to measure), all-reduce. */
static int opt_body(eccl_comm *c, int index, void *arg)
{
    enum fp_mode mode = (enum fp_mode)(intptr_t)arg;
    int64_t rank = -1, world = 0;
    eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank);
    eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &world);
    eccl_topo_opts o;
    eccl_topo_opts_init(&o);
    o.probe_ms = 30;
    o.probe_conns = CONNS;
    int armed = mode != FP_NONE && rank == 0;
    if (armed) {
        /* rank 0 probes world-1 targets: 1 connect in the broken round,
         * CONNS in each of the others; the next one rewires. */
        int rewire = 1 + CONNS * ((int)world - 2);
        CL_CHECK(fp_arm("eccl/net/connect", 0, mode == FP_PROBE_AND_REWIRE ? rewire : -1,
                        mode >= FP_REWIRE_ACCEPT ? rewire : -1) == 0,
                 "fiu");
    }
    const char *late = mode >= FP_REWIRE_ACCEPT ? rewire_fp[mode] : NULL;
    int late_here = late && (mode == FP_REWIRE_SEND) == (rank == 0);
    if (late_here) CL_CHECK(fp_arm_rewiring(late) == 0, "fiu");
    eccl_topo_info info;
    eccl_result rc = eccl_comm_optimize_topology(c, &o, &info);
    if (armed) fiu_disable("eccl/net/connect");
    if (late_here) fiu_disable(late);
    record(&info, rc);
    CL_OK(rc);
    CL_CHECK(checked_allreduce(c, index, (int)world, 100) == 0, "first all-reduce");
    rc = eccl_comm_optimize_topology(c, &o, &info);
    set(V_RC2, rc);
    set(V_PAIRS2, info.pairs_measured);
    set(V_CHANGED2, info.changed);
    CL_OK(rc);
    CL_CHECK(checked_allreduce(c, index, (int)world, 101) == 0, "second all-reduce");
    return 0;
}

static void run_opt(cluster *cl, enum fp_mode mode)
{
    const int n = 4;
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, n, opt_body, (void *)(intptr_t)mode), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    long long fired = 0;
    for (int i = 0; i < n; i++) {
        printf("    peer %d: %s changed=%lld pairs=%lld probes=%lld failed=%lld exact=%lld "
               "unmeasured=%lld; again: pairs=%lld changed=%lld\n",
               i, eccl_strerror((eccl_result)val(cl, i, V_RC)), val(cl, i, V_CHANGED),
               val(cl, i, V_PAIRS), val(cl, i, V_PROBES), val(cl, i, V_FAILED),
               val(cl, i, V_EXACT), val(cl, i, V_UNMEASURED), val(cl, i, V_PAIRS2),
               val(cl, i, V_CHANGED2));
        fired += val(cl, i, V_FIRED);
        assert_int_equal(val(cl, i, V_RC), ECCL_OK);
        assert_int_equal(val(cl, i, V_RC2), ECCL_OK);
        /* Every ordered pair once, less the failed probe; nothing twice. */
        assert_int_equal(val(cl, i, V_PAIRS), n * (n - 1) - (mode != FP_NONE));
        assert_int_equal(val(cl, i, V_PROBES), n - 1);
        assert_int_equal(val(cl, i, V_EXACT), 1);
        assert_int_equal(val(cl, i, V_UNMEASURED), 0);
        /* The second call measures only what the first could not. With
         * nothing new the ring stays; with the failed link measured now it
         * may move again. */
        assert_int_equal(val(cl, i, V_PAIRS2), mode != FP_NONE);
        if (mode == FP_NONE) assert_int_equal(val(cl, i, V_CHANGED2), 0);
        assert_int_equal(val(cl, i, V_CHANGED2), val(cl, 0, V_CHANGED2));
        /* One decision for all. */
        assert_int_equal(val(cl, i, V_CHANGED), val(cl, 0, V_CHANGED));
        for (int k = 0; k < 2; k++)
            assert_true(cl->sh->slot[i].hash[k] == cl->sh->slot[0].hash[k]);
    }
    long long failed = 0;
    for (int i = 0; i < n; i++) failed += val(cl, i, V_FAILED);
    assert_int_equal(failed, mode != FP_NONE);
    if (mode >= FP_REWIRE_ACCEPT)
        assert_true(fired >= 2); /* the probe's connect, then each armed peer once at most */
    else
        assert_int_equal(fired, mode == FP_NONE ? 0 : mode == FP_PROBE ? 1 : 2);
    if (mode != FP_NONE) assert_int_equal(val(cl, 0, V_CHANGED), 1);
    cluster_fini(cl);
}

static void test_opt_basic(void **state) { run_opt(*state, FP_NONE); }
static void test_opt_probe_fails(void **state) { run_opt(*state, FP_PROBE); }
static void test_opt_rewire_connect_fails(void **state) { run_opt(*state, FP_PROBE_AND_REWIRE); }
static void test_opt_rewire_accept_fails(void **state) { run_opt(*state, FP_REWIRE_ACCEPT); }
static void test_opt_rewire_send_fails(void **state) { run_opt(*state, FP_REWIRE_SEND); }
static void test_opt_rewire_recv_fails(void **state) { run_opt(*state, FP_REWIRE_RECV); }

/* ---- the moonshot ------------------------------------------------------------------- */

/* 13 peers: one more than the exact solver takes. The master's foreground
 * solve gets one work unit (ECCL_TOPO_SOLVE_WORK=1), so it keeps the ring it
 * has; the moonshot searches on from that ring between the calls. The
 * second call measures only what failed (nothing, as a rule) and must adopt
 * the moonshot's ring: it is strictly better than what the foreground finds
 * again, on any matrix where the admission order is not a local optimum.
 * The control: a 14th peer leaves between the calls, which discards the
 * search (it was for other members), and the second call must not adopt. */
#define MOON_N 13

static int moon_body(eccl_comm *c, int index, void *arg)
{
    int leave = arg != NULL;
    eccl_topo_opts o;
    eccl_topo_opts_init(&o);
    o.probe_ms = 20;
    o.probe_conns = 1;
    eccl_topo_info info;
    eccl_result rc = eccl_comm_optimize_topology(c, &o, &info);
    record(&info, rc);
    CL_OK(rc);
    if (leave && index == MOON_N) return 0;
    cluster_sleep_ms(300); /* 4096 kicks at n = 13 take a few ms */
    int64_t world = 0;
    uint64_t until = cluster_now_ns() + 20 * CL_SEC;
    for (;;) { /* the leaver's departure settles in the background */
        eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &world);
        if (world == MOON_N || cluster_now_ns() >= until) break;
        cluster_sleep_ms(1);
    }
    CL_CHECK(world == MOON_N, "world %lld", (long long)world);
    rc = eccl_comm_optimize_topology(c, &o, &info);
    set(V_RC2, rc);
    set(V_PAIRS2, info.pairs_measured);
    set(V_CHANGED2, info.changed);
    set(V_MOON2, info.moonshot);
    CL_OK(rc);
    return checked_allreduce(c, index, MOON_N, 300);
}

static void run_moon(cluster *cl, int leave)
{
    cluster_opts co = {.no_linger = leave};
    setenv("ECCL_TOPO_SOLVE_WORK", "1", 1); /* read by the master, forked next */
    int rc = cluster_init(cl, &co);
    unsetenv("ECCL_TOPO_SOLVE_WORK");
    assert_int_equal(rc, 0);
    int n = MOON_N + leave;
    assert_int_equal(cluster_spawn_n(cl, n, moon_body, leave ? cl : NULL), 0);
    assert_int_equal(cluster_wait_all(cl, 90000), 0);
    long long failed = 0;
    for (int i = 0; i < n; i++) failed += val(cl, i, V_FAILED);
    printf("    first call: changed=%lld exact=%lld moonshot=%lld, %lld probes failed; "
           "second: pairs=%lld changed=%lld moonshot=%lld\n",
           val(cl, 0, V_CHANGED), val(cl, 0, V_EXACT), val(cl, 0, V_MOON), failed,
           val(cl, 0, V_PAIRS2), val(cl, 0, V_CHANGED2), val(cl, 0, V_MOON2));
    for (int i = 0; i < n; i++) {
        assert_int_equal(val(cl, i, V_RC), ECCL_OK);
        assert_int_equal(val(cl, i, V_EXACT), 0);
        assert_int_equal(val(cl, i, V_MOON), 0); /* nothing searched before */
        if (i == MOON_N) continue;               /* the leaver */
        assert_int_equal(val(cl, i, V_RC2), ECCL_OK);
        /* With the leaver's pairs forgotten, only what failed is missing. */
        if (!leave) assert_int_equal(val(cl, i, V_PAIRS2), failed);
        assert_int_equal(val(cl, i, V_MOON2), !leave);
        if (!leave) assert_int_equal(val(cl, i, V_CHANGED2), 1);
        assert_true(cl->sh->slot[i].hash[0] == cl->sh->slot[0].hash[0]);
    }
    cluster_fini(cl);
}

static void test_opt_moonshot_adopted(void **state) { run_moon(*state, 0); }
static void test_opt_moonshot_dropped_on_leave(void **state) { run_moon(*state, 1); }

/* ---- a member lost mid-call ------------------------------------------------------ */

static int loss_body(eccl_comm *c, int index, void *arg)
{
    (void)arg;
    eccl_topo_opts o;
    eccl_topo_opts_init(&o);
    o.probe_ms = 300; /* 3 rounds: about a second in the call */
    o.probe_conns = CONNS;
    eccl_topo_info info;
    set(V_IN_CALL, 1);
    eccl_result rc = eccl_comm_optimize_topology(c, &o, &info);
    set(V_RC, rc);
    if (index == 3) return 0; /* killed before it gets here */
    /* Retry on the survivors (the ring is re-formed without the dead). */
    o.probe_ms = 30;
    int tries = 1;
    while (rc != ECCL_OK && tries < 4) {
        rc = eccl_comm_optimize_topology(c, &o, &info);
        tries++;
    }
    set(V_TRIES, tries);
    set(V_RC2, rc);
    CL_OK(rc);
    int64_t world = 0;
    eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &world);
    set(V_WORLD, world);
    return checked_allreduce(c, index, 3, 200);
}

static int all_in_call(cluster *cl, void *arg)
{
    (void)arg;
    for (int i = 0; i < 4; i++)
        if (!val(cl, i, V_IN_CALL)) return 0;
    return 1;
}

static void test_opt_member_lost(void **state)
{
    cluster *cl = *state;
    cluster_opts co = {.no_linger = 1};
    assert_int_equal(cluster_init(cl, &co), 0);
    assert_int_equal(cluster_spawn_n(cl, 4, loss_body, NULL), 0);
    assert_int_equal(cluster_wait_for(cl, all_in_call, NULL, 30000), 0);
    cluster_sleep_ms(150);
    atomic_store(&cl->sh->ctl[CTL_LEFT_OUT], 3 + 1); /* the checked sum leaves peer 3 out */
    cluster_kill(cl, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(cluster_wait(cl, i, 60000), 0);
    for (int i = 0; i < 3; i++) {
        printf("    peer %d: first call %s, %lld tries\n", i,
               eccl_strerror((eccl_result)val(cl, i, V_RC)), val(cl, i, V_TRIES));
        assert_int_equal(val(cl, i, V_RC), ECCL_ERR_PEER_LOST);
        assert_int_equal(val(cl, i, V_RC2), ECCL_OK);
        assert_int_equal(val(cl, i, V_WORLD), 3);
        assert_true(cl->sh->slot[i].hash[0] == cl->sh->slot[0].hash[0]);
    }
    cluster_fini(cl);
}

/* ---- conflicts ---------------------------------------------------------------------- */

/* Locally: an all-reduce in flight makes the call BUSY. Across peers: peer
 * 0 is in optimize_topology when peer 1 starts a shared-state sync; the
 * optimize call fails with BUSY (its round can never gather peer 1), and
 * peer 0 then joins the sync, which succeeds. */
static int conflict_body(eccl_comm *c, int index, void *arg)
{
    (void)arg;
    float x = 1;
    eccl_request *r = NULL;
    CL_OK(eccl_allreduce_async(c, &x, &x, 1, ECCL_F32, ECCL_SUM, 7, &r));
    CL_EXPECT_RC(eccl_comm_optimize_topology(c, NULL, NULL), ECCL_ERR_BUSY);
    CL_OK(eccl_wait(r, NULL));
    CL_CHECK(x == 2, "sum %g", (double)x);

    float w[64];
    for (int i = 0; i < 64; i++) w[i] = (float)i;
    eccl_tensor_info t = {.key = "w", .data = w, .count = 64, .dtype = ECCL_F32};
    eccl_shared_state st = {.revision = 1, .count = 1, .infos = &t};
    if (index == 0) {
        set(V_IN_CALL, 1);
        set(V_RC, eccl_comm_optimize_topology(c, NULL, NULL));
    } else {
        /* Let peer 0's request reach the master first. */
        uint64_t until = cluster_now_ns() + 20 * CL_SEC;
        while (!atomic_load(&cluster_shm()->slot[0].val[V_IN_CALL]) && cluster_now_ns() < until)
            cluster_sleep_ms(1);
        cluster_sleep_ms(200);
    }
    eccl_sync_info si;
    eccl_result rc = eccl_comm_sync_shared_state(c, &st, ECCL_SYNC_ENFORCE_POPULAR,
                                                 ECCL_HASH_SIMPLE, &si);
    set(V_RC2, rc);
    CL_OK(rc);
    return 0;
}

static void test_opt_conflicts(void **state)
{
    cluster *cl = *state;
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, 2, conflict_body, NULL), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    assert_int_equal(val(cl, 0, V_RC), ECCL_ERR_BUSY);
    for (int i = 0; i < 2; i++) assert_int_equal(val(cl, i, V_RC2), ECCL_OK);
    cluster_fini(cl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_opt_basic, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_opt_probe_fails, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_opt_rewire_connect_fails, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_opt_rewire_accept_fails, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_opt_rewire_send_fails, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_opt_rewire_recv_fails, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_opt_moonshot_adopted, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_opt_moonshot_dropped_on_leave, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_opt_member_lost, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_opt_conflicts, cluster_test_setup, cluster_test_teardown),
    };
    const char *filter = getenv("ECCL_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("topo_mp", tests, NULL, NULL);
}
