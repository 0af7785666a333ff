/* Relays in real processes on loopback (tests/cluster.h): peers that reach
 * the master only through relays form one job with peers that do not, the
 * death of a relay costs the job the peers behind it and nothing else, and
 * a peer whose first coordinator is unreachable comes in through the next
 * address of its list. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"

enum { RELAY_A = CLUSTER_MAX_PEERS - 2, RELAY_B = CLUSTER_MAX_PEERS - 1 };

static void route_peer(cluster *cl, int index, const char *first, int fallback)
{
    char list[sizeof cl->sh->slot[index].master_of];
    snprintf(list, sizeof list, "%s%s%s", first, fallback ? "," : "",
             fallback ? cl->sh->master_addr : "");
    memcpy(cl->sh->slot[index].master_of, list, sizeof list);
}

/* Peers 0..n-1 (relays never exit by themselves). */
static int wait_peers(cluster *cl, int n, uint64_t timeout_ms)
{
    int bad = 0;
    for (int i = 0; i < n; i++) bad |= cluster_wait(cl, i, timeout_ms) != 0;
    return bad;
}

static int same_hashes(cluster *cl, int n)
{
    for (int i = 1; i < n; i++) {
        if (cl->sh->slot[i].n_hash != cl->sh->slot[0].n_hash ||
            memcmp(cl->sh->slot[i].hash, cl->sh->slot[0].hash,
                   (size_t)cl->sh->slot[0].n_hash * sizeof cl->sh->slot[0].hash[0]))
            return 0;
    }
    return cl->sh->slot[0].n_hash > 0;
}

/* ---- one job across two relays and the master ------------------------------ */

static int six_body(eccl_comm *c, int index, void *arg)
{
    (void)arg;
    return cluster_after_join(c, index, 6, 4, index % 2);
}

static void test_relay_job(void **state)
{
    (void)state;
    cluster cl;
    cluster_opts o = {.no_linger = 1}; /* relays never finish: nobody to wait for */
    assert_int_equal(cluster_init(&cl, &o), 0);
    assert_int_equal(cluster_fork_relay(&cl, RELAY_A), 0);
    assert_int_equal(cluster_fork_relay(&cl, RELAY_B), 0);
    /* Two peers per relay, two straight to the master. */
    for (int i = 0; i < 4; i++) route_peer(&cl, i, cl.sh->slot[i < 2 ? RELAY_A : RELAY_B].addr, 0);
    for (int i = 0; i < 6; i++) assert_int_equal(cluster_spawn(&cl, i, 6, six_body, NULL), 0);
    int rc = wait_peers(&cl, 6, 60000);
    for (int i = 0; i < 6; i++) cluster_dump_slot(&cl, i);
    assert_int_equal(rc, 0);
    for (int i = 0; i < 6; i++) assert_int_equal(cl.sh->slot[i].world, 6);
    assert_true(same_hashes(&cl, 6));
    cluster_fini(&cl);
}

/* ---- a relay dies mid-job --------------------------------------------------- */

enum { V_LOST = 0 };
enum { CTL_KILLED = 0 };

/* Peers 0 and 1 are behind relay A, 2 and 3 behind B, which dies once all
 * four finished their first all-reduces. A's peers must lose B's to a view
 * change and go on at world 2; B's must hear their master is lost. */
static int kill_body(eccl_comm *c, int index, void *arg)
{
    (void)arg;
    if (cluster_after_join(c, index, 4, 2, 0)) return 1;
    atomic_store(&cluster_self()->finished, 1);
    if (cluster_wait_ctl(CTL_KILLED, 1, 30000)) return 1;
    float x[64], y[64];
    for (int i = 0; i < 64; i++) x[i] = (float)index;
    eccl_result rc = ECCL_ERR_PEER_LOST;
    eccl_reduce_info info = {0};
    uint64_t deadline = cluster_now_ns() + 30 * CL_SEC;
    for (uint64_t tag = 100; rc != ECCL_OK && cluster_now_ns() < deadline; tag++) {
        rc = eccl_allreduce(c, x, y, 64, ECCL_F32, ECCL_SUM, tag, &info);
        if (rc == ECCL_ERR_MASTER_LOST) break;
        if (rc != ECCL_OK) usleep(10000);
    }
    if (index >= 2) {
        CL_CHECK(rc == ECCL_ERR_MASTER_LOST, "behind the dead relay: %s, want MASTER_LOST",
                 eccl_strerror(rc));
        atomic_store(&cluster_self()->val[V_LOST], 1);
        return 0;
    }
    CL_CHECK(rc == ECCL_OK && info.world_size == 2, "survivor: %s at world %u", eccl_strerror(rc),
             info.world_size);
    CL_CHECK(y[0] == 1.0f, "survivors' sum %g, want 1", (double)y[0]);
    return cluster_after_join(c, index, 2, 3, 1);
}

static int all_finished_first(cluster *cl, void *arg)
{
    (void)arg;
    for (int i = 0; i < 4; i++)
        if (atomic_load(&cl->sh->slot[i].finished) < 1) return 0;
    return 1;
}

static void test_relay_killed_mid_job(void **state)
{
    (void)state;
    cluster cl;
    cluster_opts o = {.peer_timeout_ms = 2000, .no_linger = 1};
    assert_int_equal(cluster_init(&cl, &o), 0);
    assert_int_equal(cluster_fork_relay(&cl, RELAY_A), 0);
    assert_int_equal(cluster_fork_relay(&cl, RELAY_B), 0);
    for (int i = 0; i < 4; i++) route_peer(&cl, i, cl.sh->slot[i < 2 ? RELAY_A : RELAY_B].addr, 1);
    for (int i = 0; i < 4; i++) assert_int_equal(cluster_spawn(&cl, i, 4, kill_body, NULL), 0);
    int rc = cluster_wait_for(&cl, all_finished_first, NULL, 60000);
    if (rc == 0) {
        cluster_kill(&cl, RELAY_B);
        atomic_store(&cl.sh->ctl[CTL_KILLED], 1);
        rc = wait_peers(&cl, 4, 60000);
    }
    for (int i = 0; i < 4; i++) cluster_dump_slot(&cl, i);
    assert_int_equal(rc, 0);
    assert_int_equal(atomic_load(&cl.sh->slot[2].val[V_LOST]), 1);
    assert_int_equal(atomic_load(&cl.sh->slot[3].val[V_LOST]), 1);
    assert_true(same_hashes(&cl, 2));
    cluster_fini(&cl);
}

/* ---- the fallback address ----------------------------------------------------- */

static int two_body(eccl_comm *c, int index, void *arg)
{
    (void)arg;
    return cluster_after_join(c, index, 2, 2, 0);
}

/* Peer 0's list starts with a relay that is gone (its port refuses): it
 * comes in through the master, the next address, before connect_timeout. */
static void test_fallback_address(void **state)
{
    (void)state;
    cluster cl;
    cluster_opts o = {.no_linger = 1}; /* relays never finish: nobody to wait for */
    assert_int_equal(cluster_init(&cl, &o), 0);
    assert_int_equal(cluster_fork_relay(&cl, RELAY_A), 0);
    char dead[64];
    snprintf(dead, sizeof dead, "%s", cl.sh->slot[RELAY_A].addr);
    cluster_kill(&cl, RELAY_A);
    route_peer(&cl, 0, dead, 1);
    for (int i = 0; i < 2; i++) assert_int_equal(cluster_spawn(&cl, i, 2, two_body, NULL), 0);
    int rc = wait_peers(&cl, 2, 60000);
    for (int i = 0; i < 2; i++) cluster_dump_slot(&cl, i);
    assert_int_equal(rc, 0);
    assert_true(same_hashes(&cl, 2));
    cluster_fini(&cl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_relay_job, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_relay_killed_mid_job, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_fallback_address, cluster_test_setup,
                                        cluster_test_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
