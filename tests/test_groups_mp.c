/* Peer groups on loopback: collectives and shared state stay inside a
 * group, a peer lost in one group aborts that group's ops only, and
 * membership stays global (a join into one group is voted by all).
 *
 * Peers 0 and 1 form group 0; peers 2, 3 (and later 4) form group 1. */
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

#define N_OPS 4
#define OP_COUNT (1u << 20) /* f32: 4 MiB each */
#define STATE_COUNT 4096

enum {
    V_EPOCH0,     /* epoch after the first all-reduce */
    V_EPOCH1,     /* ... after the join into group 1 */
    V_SYNC_RX,
    V_SYNC_REV,
    V_OPS_OK,     /* ops of the loss phase that succeeded */
    V_OPS_LOST,   /* ... that failed with PEER_LOST, buffer restored */
    V_WORLD_LOST, /* world size right after the loss phase */
    V_PENDING,    /* peers_pending answer that admitted peer 4 */
    V_WORLD_END,
    V_READY       /* 1: the loss-phase ops are issued */
};

enum { CTL_KILLED = 0, CTL_SPAWNED_4 = 1 };

static void set(int k, long long v) { atomic_store(&cluster_self()->val[k], v); }
static long long val(cluster *cl, int i, int k) { return atomic_load(&cl->sh->slot[i].val[k]); }

static int group_of(int index) { return index < 2 ? 0 : 1; }

/* The members of index's group at phase `late` (peer 3 replaced by 4). */
static int members(int index, int late, int idx[2])
{
    if (group_of(index) == 0) idx[0] = 0, idx[1] = 1;
    else idx[0] = 2, idx[1] = late ? 4 : 3;
    return 2;
}

static int checked_allreduce(eccl_comm *c, int index, int late, uint64_t tag)
{
    int idx[2], n = members(index, late, idx);
    float *b = malloc(OP_COUNT * sizeof *b);
    CL_CHECK(b != NULL, "oom");
    cluster_fill(b, ECCL_F32, OP_COUNT, index, tag, CL_PAT_SMALL);
    eccl_reduce_info info;
    eccl_result rc = eccl_allreduce(c, b, b, OP_COUNT, ECCL_F32, ECCL_SUM, tag, &info);
    int bad = rc != ECCL_OK || info.world_size != 2 ||
              cluster_check_values(b, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, OP_COUNT, idx, n, tag,
                                   "group all-reduce") != 0;
    free(b);
    CL_CHECK(!bad, "tag %llu: %s, world %u", (unsigned long long)tag, eccl_strerror(rc),
             info.world_size);
    return 0;
}

/* Both groups hold different tensors under the same key, at different
 * revisions: a global vote would tie 2:2 and make one group fetch the
 * other's, or reject a revision. Per group, nobody fetches anything. */
static int sync_state(eccl_comm *c, int index)
{
    static float w[STATE_COUNT];
    cluster_fill(w, ECCL_F32, STATE_COUNT, group_of(index), 77, CL_PAT_RANDOM);
    uint64_t before = cluster_fnv1a(w, sizeof w);
    eccl_tensor_info t = {.key = "w", .data = w, .count = STATE_COUNT, .dtype = ECCL_F32};
    eccl_shared_state st = {.revision = group_of(index) ? 1 : 5, .count = 1, .infos = &t};
    eccl_sync_info si;
    CL_OK(eccl_comm_sync_shared_state(c, &st, ECCL_SYNC_ENFORCE_POPULAR, ECCL_HASH_SIMPLE, &si));
    set(V_SYNC_RX, (long long)si.rx_bytes);
    set(V_SYNC_REV, (long long)si.revision);
    CL_CHECK(cluster_fnv1a(w, sizeof w) == before, "the group's tensor changed");
    return 0;
}

/* Peer 3 is killed with group 1's ops in flight on peer 2 (peer 3 never
 * issues its own). Group 0's ops are in flight across the kill too: peer 0
 * issues before it, peer 1 after. */
static int loss_phase(eccl_comm *c, int index)
{
    if (index == 3) {
        set(V_READY, 1);
        for (;;) cluster_sleep_ms(1000); /* killed here */
    }
    if (index == 1) CL_CHECK(cluster_wait_ctl(CTL_KILLED, 1, 30000) == 0, "no kill");
    float *b[N_OPS];
    uint64_t pre[N_OPS];
    eccl_request *r[N_OPS];
    for (int k = 0; k < N_OPS; k++) {
        b[k] = malloc(OP_COUNT * sizeof *b[k]);
        CL_CHECK(b[k] != NULL, "oom");
        cluster_fill(b[k], ECCL_F32, OP_COUNT, index, 20 + k, CL_PAT_SMALL);
        pre[k] = cluster_fnv1a(b[k], OP_COUNT * sizeof *b[k]);
        CL_OK(eccl_allreduce_async(c, b[k], b[k], OP_COUNT, ECCL_F32, ECCL_SUM, 20 + k, &r[k]));
    }
    set(V_READY, 1);
    int ok = 0, lost = 0, idx[2];
    members(index, 0, idx);
    for (int k = 0; k < N_OPS; k++) {
        eccl_reduce_info info;
        eccl_result rc = eccl_wait(r[k], &info);
        if (rc == ECCL_OK) {
            ok++;
            CL_CHECK(cluster_check_values(b[k], ECCL_F32, ECCL_SUM, CL_PAT_SMALL, OP_COUNT, idx, 2,
                                          20 + k, "op across the other group's loss") == 0,
                     "op %d", k);
        } else if (rc == ECCL_ERR_PEER_LOST) {
            lost++;
            CL_CHECK(cluster_fnv1a(b[k], OP_COUNT * sizeof *b[k]) == pre[k],
                     "op %d: buffer not restored", k);
        } else {
            CL_CHECK(0, "op %d: %s", k, eccl_strerror(rc));
        }
        free(b[k]);
    }
    set(V_OPS_OK, ok);
    set(V_OPS_LOST, lost);
    int64_t world = 0;
    eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &world);
    set(V_WORLD_LOST, world);
    return 0;
}

/* Peers 0, 1 and 2 vote peer 4 into group 1: peers_pending is a vote of
 * every accepted peer, whatever its group. */
static int join_phase(eccl_comm *c)
{
    uint32_t pending = 0;
    CL_CHECK(cluster_wait_ctl(CTL_SPAWNED_4, 1, 30000) == 0, "peer 4 never spawned");
    uint64_t until = cluster_now_ns() + 30 * CL_SEC;
    while (pending == 0 && cluster_now_ns() < until) {
        CL_OK(eccl_comm_peers_pending(c, &pending));
        if (pending == 0) cluster_sleep_ms(5);
    }
    set(V_PENDING, pending);
    CL_CHECK(pending == 1, "pending %u", pending);
    CL_OK(eccl_comm_update_topology(c));
    int64_t epoch = 0;
    eccl_comm_get_attr(c, ECCL_ATTR_EPOCH, &epoch);
    set(V_EPOCH1, epoch);
    return 0;
}

static int groups_body(eccl_comm *c, int index, void *arg)
{
    (void)arg;
    int64_t epoch = 0;
    if (index == 4) return checked_allreduce(c, index, 1, 40); /* joined group 1 */
    if (index == 0) {
        /* Alone at first: wait for the three others, admit them at once. */
        uint32_t pending = 0;
        uint64_t until = cluster_now_ns() + 30 * CL_SEC;
        while (pending < 3 && cluster_now_ns() < until) {
            CL_OK(eccl_comm_peers_pending(c, &pending));
            cluster_sleep_ms(2);
        }
        CL_CHECK(pending == 3, "pending %u", pending);
        CL_OK(eccl_comm_update_topology(c));
    }
    if (checked_allreduce(c, index, 0, 10)) return 1;
    eccl_comm_get_attr(c, ECCL_ATTR_EPOCH, &epoch);
    set(V_EPOCH0, epoch);
    if (sync_state(c, index)) return 1;
    if (loss_phase(c, index)) return 1;
    if (join_phase(c)) return 1;
    return checked_allreduce(c, index, 1, 40);
}

static int all_ready(cluster *cl, void *arg)
{
    (void)arg;
    for (int i = 0; i < 4; i++)
        if (i != 1 && !val(cl, i, V_READY)) return 0;
    return 1;
}

static int peer0_running(cluster *cl, void *arg)
{
    (void)arg;
    return atomic_load(&cl->sh->slot[0].phase) == CL_PHASE_RUNNING;
}

static void test_groups(void **state)
{
    cluster *cl = *state;
    cluster_opts o = {.no_linger = 1, .peer_group_of = {0, 0, 1, 1, 1}};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn(cl, 0, 1, groups_body, NULL), 0);
    /* Peer 0 first: the first peer to register is accepted alone. */
    assert_int_equal(cluster_wait_for(cl, peer0_running, NULL, 30000), 0);
    for (int i = 1; i < 4; i++) assert_int_equal(cluster_spawn(cl, i, 2, groups_body, NULL), 0);
    assert_int_equal(cluster_wait_for(cl, all_ready, NULL, 60000), 0);
    cluster_sleep_ms(100); /* peer 2's ops reach their wait on peer 3 */
    cluster_kill(cl, 3);
    atomic_store(&cl->sh->ctl[CTL_KILLED], 1);
    assert_int_equal(cluster_spawn(cl, 4, 2, groups_body, NULL), 0);
    atomic_store(&cl->sh->ctl[CTL_SPAWNED_4], 1);
    assert_int_equal(cluster_wait_all(cl, 90000), 0);
    for (int i = 0; i < 3; i++) {
        printf("    peer %d (group %d): sync rev %lld rx %lld; loss phase: %lld ok, %lld lost, "
               "world %lld; epoch %lld -> %lld\n",
               i, group_of(i), val(cl, i, V_SYNC_REV), val(cl, i, V_SYNC_RX), val(cl, i, V_OPS_OK),
               val(cl, i, V_OPS_LOST), val(cl, i, V_WORLD_LOST), val(cl, i, V_EPOCH0),
               val(cl, i, V_EPOCH1));
        /* Shared state: each group elected its own set, nothing moved. */
        assert_int_equal(val(cl, i, V_SYNC_RX), 0);
        assert_int_equal(val(cl, i, V_SYNC_REV), group_of(i) ? 1 : 5);
        assert_int_equal(val(cl, i, V_PENDING), 1);
    }
    /* Group 0 never noticed the loss: every op committed, the ring stayed. */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(val(cl, i, V_OPS_OK), N_OPS);
        assert_int_equal(val(cl, i, V_WORLD_LOST), 2);
        assert_int_equal(val(cl, i, V_EPOCH1), val(cl, i, V_EPOCH0));
    }
    /* Group 1's survivor: every op aborted with its buffer restored, then
     * the join re-formed its ring. */
    assert_int_equal(val(cl, 2, V_OPS_LOST), N_OPS);
    assert_int_equal(val(cl, 2, V_WORLD_LOST), 1);
    assert_true(val(cl, 2, V_EPOCH1) > val(cl, 2, V_EPOCH0));
    cluster_fini(cl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_groups, cluster_test_setup, cluster_test_teardown),
    };
    return cmocka_run_group_tests_name("groups_mp", tests, NULL, NULL);
}
