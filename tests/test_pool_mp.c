/* Concurrent all-reduces over a pool of ring connections per neighbour
 * (eccl_comm_params.p2p_pool_size, ECCL_P2P_POOL), multi-process on
 * loopback (tests/cluster.h):
 *   - many async ops in flight with pools of 1, 2, 4 (and mixed sizes):
 *     every element checked, bit parity across peers, a duplicate tag
 *     refused, connections opened lazily (ECCL_ATTR_RING_LINKS);
 *   - a small op completes while a large op on another connection cannot
 *     (ordered by the test, not by timing), and the same schedule with a
 *     pool of one is head-of-line blocked (the control);
 *   - a peer killed with K ops in flight: every op fails PEER_LOST with
 *     its buffer restored (or succeeded everywhere), retries succeed;
 *   - one recv failing on one pool connection: the op on it fails
 *     (TIMEOUT / PEER_LOST, restored), an op on another connection runs
 *     through meanwhile;
 *   - the ECCL_P2P_POOL override;
 *   - peers_pending with all-reduces in flight on every peer, then a
 *     newcomer admitted; update_topology and sync_shared_state refused with
 *     ECCL_ERR_BUSY while an op is in flight locally. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fiu.h>
#include <signal.h>
#include <fiu-control.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"

#define MAX_K 8
enum { CTL_GO = 0, CTL_GO_L = 1, CTL_ARM = 2, CTL_DUP = 3 };
#define TAG_GATE 150
enum {
    V_POOL = 0,        /* ECCL_ATTR_P2P_POOL */
    V_LINKS0 = 1,      /* ECCL_ATTR_RING_LINKS before any op */
    V_LINKS = 2,       /* ... after the ops */
    V_L_DONE_AT_S = 3, /* the large op was done when the small one returned */
    V_ISSUED = 4,      /* the faulted ops are issued */
    V_FIRED = 8,       /* failpoint firings */
    V_ARMED = 9
};

static int all_idx[CLUSTER_MAX_PEERS] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

static int val_at_least(cluster *cl, void *argp)
{
    const long long *a = argp; /* {index, val, at least} */
    return atomic_load(&cl->sh->slot[a[0]].val[a[1]]) >= a[2];
}

static int started_at_least(cluster *cl, void *argp)
{
    const long long *a = argp; /* {n, skip, at least} */
    for (int i = 0; i < a[0]; i++)
        if (i != a[1] && atomic_load(&cl->sh->slot[i].started) < a[2]) return 0;
    return 1;
}

static const cluster_event *event_of(const cluster_slot *s, uint64_t tag, int nth)
{
    int n = atomic_load(&s->n_events);
    for (int i = 0; i < n; i++)
        if (s->ev[i].tag == tag && nth-- == 0) return &s->ev[i];
    return NULL;
}

static void dump_all(cluster *cl, int n)
{
    for (int i = 0; i < n; i++) cluster_dump_slot(cl, i);
}

#define FCHECK(cond)                                                                  \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "`%s` does not hold (line %d)\n", #cond, __LINE__);       \
            dump_all(cl, n);                                                          \
            fail();                                                                   \
        }                                                                             \
    } while (0)

static void assert_parity(cluster *cl, const int *who, int m)
{
    int nh = cl->sh->slot[who[0]].n_hash;
    assert_true(nh > 0);
    for (int p = 1; p < m; p++) {
        assert_int_equal(cl->sh->slot[who[p]].n_hash, nh);
        for (int k = 0; k < nh; k++)
            assert_true(cl->sh->slot[who[p]].hash[k] == cl->sh->slot[who[0]].hash[k]);
    }
}

/* ---- many ops in flight ------------------------------------------------------------ */

typedef struct conc_arg {
    int n;
    int rounds;
} conc_arg;

/* Ring-sized and small buffers: at N=3 the small ones take the tree, at
 * N=2 the ring's one-step exchange. */
static const size_t conc_counts[MAX_K] = {65537, 300000, 1u << 20, 1000, 2u << 20, 100003, 1u << 18, 17};

static int conc_body(eccl_comm *c, int index, void *argp)
{
    const conc_arg *a = argp;
    cluster_slot *self = cluster_self();
    int64_t pool = 0, links = 0;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_P2P_POOL, &pool));
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RING_LINKS, &links));
    atomic_store(&self->val[V_POOL], pool);
    atomic_store(&self->val[V_LINKS0], links);
    float *send[MAX_K], *recv[MAX_K];
    for (int j = 0; j < MAX_K; j++) {
        send[j] = malloc(conc_counts[j] * sizeof(float));
        recv[j] = malloc(conc_counts[j] * sizeof(float));
        CL_CHECK(send[j] && recv[j], "oom");
    }
    for (int round = 0; round < a->rounds; round++) {
        int in_place = round & 1;
        eccl_request *req[MAX_K];
        for (int j = 0; j < MAX_K; j++) {
            uint64_t tag = 100 + (uint64_t)j;
            cluster_fill(send[j], ECCL_F32, conc_counts[j], index, tag + 1000 * (uint64_t)round,
                         CL_PAT_SMALL);
            float *out = in_place ? send[j] : recv[j];
            CL_OK(eccl_allreduce_async(c, send[j], out, conc_counts[j], ECCL_F32, ECCL_SUM, tag,
                                       &req[j]));
        }
        /* A tag in flight is refused, and touches nothing. Peer 0 checks
         * while the others have not called the tag yet: it cannot be done. */
        eccl_request *gate = NULL, *dup = NULL;
        float gbuf[4] = {1, 2, 3, 4}, probe[4] = {1, 2, 3, 4};
        if (index == 0) {
            CL_OK(eccl_allreduce_async(c, gbuf, gbuf, 4, ECCL_F32, ECCL_SUM, TAG_GATE, &gate));
            CL_EXPECT_RC(eccl_allreduce_async(c, probe, probe, 4, ECCL_F32, ECCL_SUM, TAG_GATE, &dup),
                         ECCL_ERR_BUSY);
            CL_CHECK(probe[0] == 1 && probe[3] == 4 && dup == NULL, "a refused call touched its buffer");
            atomic_store(&cluster_shm()->ctl[CTL_DUP], round + 1);
        } else {
            uint64_t dl = cluster_now_ns() + 30 * CL_SEC;
            while (atomic_load(&cluster_shm()->ctl[CTL_DUP]) < round + 1) {
                CL_CHECK(cluster_now_ns() < dl, "peer 0 never checked the duplicate");
                cluster_sleep_ms(1);
            }
            CL_OK(eccl_allreduce_async(c, gbuf, gbuf, 4, ECCL_F32, ECCL_SUM, TAG_GATE, &gate));
        }
        CL_OK(eccl_wait(gate, NULL));
        CL_CHECK(gbuf[0] == (float)a->n && gbuf[3] == (float)(4 * a->n), "gate result");
        /* Waited in reverse order: completion does not depend on it. */
        for (int j = MAX_K - 1; j >= 0; j--) {
            eccl_reduce_info info;
            eccl_result rc = eccl_wait(req[j], &info);
            CL_CHECK(rc == ECCL_OK, "round %d op %d: %s", round, j, eccl_strerror(rc));
            CL_CHECK(info.world_size == (uint32_t)a->n, "world %u", info.world_size);
        }
        for (int j = 0; j < MAX_K; j++) {
            float *out = in_place ? send[j] : recv[j];
            if (cluster_check_values(out, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, conc_counts[j], all_idx,
                                     a->n, 100 + (uint64_t)j + 1000 * (uint64_t)round, "concurrent"))
                return 1;
            cluster_push_hash(cluster_fnv1a(out, conc_counts[j] * sizeof(float)));
        }
        atomic_store(&self->finished, round + 1);
    }
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RING_LINKS, &links));
    atomic_store(&self->val[V_LINKS], links);
    for (int j = 0; j < MAX_K; j++) {
        free(send[j]);
        free(recv[j]);
    }
    return 0;
}

/* How many of our pool's connections the ops of conc_body need: one per
 * residue tag % pool among the ops that run on the ring. */
static int links_needed(int n, uint32_t pool)
{
    int used[64] = {0}, k = 0;
    for (int j = 0; j < MAX_K; j++) {
        int ring = n == 2 || conc_counts[j] * sizeof(float) > 65536;
        uint32_t r = (uint32_t)((100 + j) % pool);
        if (ring && !used[r]) used[r] = 1, k++;
    }
    return k;
}

static void run_concurrent(cluster *cl, int n, uint32_t pool, const uint32_t *pool_of)
{
    conc_arg a = {.n = n, .rounds = 2};
    cluster_opts o = {.p2p_pool_size = pool};
    if (pool_of) memcpy(o.pool_size_of, pool_of, (size_t)n * sizeof *pool_of);
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, n, conc_body, &a), 0);
    if (cluster_wait_all(cl, 120000) != 0) fail_msg("a peer failed (see above)");
    for (int i = 0; i < n; i++) {
        const cluster_slot *s = &cl->sh->slot[i];
        uint32_t p = pool_of ? pool_of[i] : pool;
        FCHECK(atomic_load(&s->val[V_POOL]) == p);
        /* Lazy: connection 0 opens with the ring, the rest on demand. */
        FCHECK(atomic_load(&s->val[V_LINKS0]) == 1);
        FCHECK(atomic_load(&s->val[V_LINKS]) == links_needed(n, p));
    }
    assert_parity(cl, all_idx, n);
    printf("    N=%d pools", n);
    for (int i = 0; i < n; i++) printf(" %lld", (long long)atomic_load(&cl->sh->slot[i].val[V_POOL]));
    printf(": %d ops in flight x 2 rounds ok, parity ok; ring links to next after: %lld\n", MAX_K,
           (long long)atomic_load(&cl->sh->slot[0].val[V_LINKS]));
    cluster_fini(cl);
}

static void test_concurrent_pool1_n3(void **state) { run_concurrent(*state, 3, 1, NULL); }
static void test_concurrent_pool2_n3(void **state) { run_concurrent(*state, 3, 2, NULL); }
static void test_concurrent_pool4_n3(void **state) { run_concurrent(*state, 3, 4, NULL); }
static void test_concurrent_pool4_n2(void **state) { run_concurrent(*state, 2, 4, NULL); }
/* Each pool's size is its opener's: peers need not agree. */
static void test_concurrent_mixed_n4(void **state)
{
    const uint32_t pools[4] = {1, 4, 2, 3};
    run_concurrent(*state, 4, 0, pools);
}

/* ---- no head-of-line blocking -------------------------------------------------------- */

#define TAG_L 1 /* connection 1 of a pool of 2 */
#define TAG_S 2 /* connection 0 */
#define L_COUNT (8u << 20) /* 32 MiB of f32: far over what a link keeps aside */
#define S_COUNT (64u << 10) /* 256 KiB: the ring at N=2 */

/* Peer 0 issues the large op, then the small one; peer 1 issues only the
 * small one, and the large one only once peer 0 saw its small one return
 * (CTL_GO_L). So peer 0's small op can complete only if its frames are not
 * queued behind the large op's, which peer 1 will not take yet. */
static int hol_body(eccl_comm *c, int index, void *argp)
{
    (void)argp;
    cluster_slot *self = cluster_self();
    float *l = malloc((size_t)L_COUNT * sizeof(float)), *s = malloc((size_t)S_COUNT * sizeof(float));
    CL_CHECK(l && s, "oom");
    cluster_fill(l, ECCL_F32, L_COUNT, index, TAG_L, CL_PAT_SMALL);
    cluster_fill(s, ECCL_F32, S_COUNT, index, TAG_S, CL_PAT_SMALL);
    uint64_t lpre = cluster_fnv1a(l, (size_t)L_COUNT * sizeof(float));
    uint64_t spre = cluster_fnv1a(s, (size_t)S_COUNT * sizeof(float));
    eccl_reduce_info info = {0};
    eccl_result rl = ECCL_OK, rs;
    uint64_t t0 = cluster_now_ns(), tl0 = t0;
    if (index == 0) {
        eccl_request *lr = NULL, *sr = NULL;
        CL_OK(eccl_allreduce_async(c, l, l, L_COUNT, ECCL_F32, ECCL_SUM, TAG_L, &lr));
        CL_OK(eccl_allreduce_async(c, s, s, S_COUNT, ECCL_F32, ECCL_SUM, TAG_S, &sr));
        t0 = cluster_now_ns();
        rs = eccl_wait(sr, &info);
        uint64_t t1 = cluster_now_ns();
        cluster_record(TAG_S, rs, info.world_size, t0, t1, spre,
                       cluster_fnv1a(s, (size_t)S_COUNT * sizeof(float)));
        int done = 0;
        eccl_result rt = eccl_test(lr, &done, &info);
        atomic_store(&self->val[V_L_DONE_AT_S], done);
        atomic_store(&cluster_shm()->ctl[CTL_GO_L], 1);
        rl = done ? rt : eccl_wait(lr, &info);
    } else {
        rs = eccl_allreduce(c, s, s, S_COUNT, ECCL_F32, ECCL_SUM, TAG_S, &info);
        cluster_record(TAG_S, rs, info.world_size, t0, cluster_now_ns(), spre,
                       cluster_fnv1a(s, (size_t)S_COUNT * sizeof(float)));
        CL_CHECK(cluster_wait_ctl(CTL_GO_L, 1, 60000) == 0, "never told to run the large op");
        tl0 = cluster_now_ns();
        rl = eccl_allreduce(c, l, l, L_COUNT, ECCL_F32, ECCL_SUM, TAG_L, &info);
    }
    cluster_record(TAG_L, rl, info.world_size, tl0, cluster_now_ns(), lpre,
                   cluster_fnv1a(l, (size_t)L_COUNT * sizeof(float)));
    if (rs == ECCL_OK && cluster_check_values(s, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, S_COUNT, all_idx, 2,
                                              TAG_S, "small op"))
        return 1;
    if (rl == ECCL_OK && cluster_check_values(l, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, L_COUNT, all_idx, 2,
                                              TAG_L, "large op"))
        return 1;
    free(l);
    free(s);
    return 0;
}

/* Pool of 2: the small op completes on both peers while the large one has
 * not (peer 1 has not even called it), then the large one completes. */
static void test_small_passes_large_pool2(void **state)
{
    cluster *cl = *state;
    const int n = 2;
    cluster_opts o = {.p2p_pool_size = 2, .op_timeout_ms = 30000};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, n, hol_body, NULL), 0);
    if (cluster_wait_all(cl, 120000) != 0) fail_msg("a peer failed (see above)");
    for (int i = 0; i < n; i++) {
        const cluster_event *s = event_of(&cl->sh->slot[i], TAG_S, 0);
        const cluster_event *l = event_of(&cl->sh->slot[i], TAG_L, 0);
        FCHECK(s && l);
        FCHECK(s->result == ECCL_OK && l->result == ECCL_OK);
        FCHECK(s->world == 2 && l->world == 2);
    }
    /* Completion order, not timing: the large op was still running. */
    FCHECK(atomic_load(&cl->sh->slot[0].val[V_L_DONE_AT_S]) == 0);
    printf("    small op returned in %.1f ms with the 32 MiB op in flight on the other connection\n",
           (double)event_of(&cl->sh->slot[0], TAG_S, 0)->elapsed_ns / 1e6);
    cluster_fini(cl);
}

/* The control: the same schedule over a single connection. The small op's
 * frames queue behind the large op's, which peer 1 leaves in the socket:
 * the small op cannot complete, times out (restored), and the master's
 * view change fails the rest (restored). Proves the pool test above
 * exercises head-of-line blocking. */
static void test_small_blocked_pool1(void **state)
{
    cluster *cl = *state;
    const int n = 2;
    cluster_opts o = {.p2p_pool_size = 1, .op_timeout_ms = 3000};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, n, hol_body, NULL), 0);
    if (cluster_wait_all(cl, 120000) != 0) fail_msg("a peer failed (see above)");
    int small_failed = 0;
    for (int i = 0; i < n; i++) {
        const cluster_event *s = event_of(&cl->sh->slot[i], TAG_S, 0);
        const cluster_event *l = event_of(&cl->sh->slot[i], TAG_L, 0);
        FCHECK(s && l);
        small_failed += s->result != ECCL_OK;
        FCHECK(s->result == ECCL_OK || s->pre_hash == s->post_hash);
        FCHECK(l->result == ECCL_OK || l->pre_hash == l->post_hash);
        FCHECK(s->result == ECCL_OK || s->result == ECCL_ERR_TIMEOUT || s->result == ECCL_ERR_PEER_LOST);
    }
    FCHECK(small_failed > 0);
    printf("    pool of 1: small op -> %s / %s (head-of-line blocked), buffers restored\n",
           eccl_strerror((eccl_result)event_of(&cl->sh->slot[0], TAG_S, 0)->result),
           eccl_strerror((eccl_result)event_of(&cl->sh->slot[1], TAG_S, 0)->result));
    cluster_fini(cl);
}

/* ---- a peer lost with K ops in flight ------------------------------------------------- */

#define LOSS_K 4
#define LOSS_COUNT (4u << 20) /* 16 MiB each */
#define TAG_LOSS 200

static atomic_int g_recvs;

static int die_at_16th(const char *name, int *failnum, void **failinfo, unsigned int *flags)
{
    (void)name, (void)failnum, (void)failinfo, (void)flags;
    if (atomic_fetch_add(&g_recvs, 1) + 1 >= 16) raise(SIGKILL);
    return 0;
}

static int loss_body(eccl_comm *c, int index, void *argp)
{
    const int victim = *(const int *)argp;
    cluster_slot *self = cluster_self();
    float *buf[LOSS_K], *send[LOSS_K];
    size_t bytes = (size_t)LOSS_COUNT * sizeof(float);
    for (int j = 0; j < LOSS_K; j++) {
        buf[j] = malloc(bytes);
        send[j] = malloc(bytes);
        CL_CHECK(buf[j] && send[j], "oom");
        cluster_fill(send[j], ECCL_F32, LOSS_COUNT, index, TAG_LOSS + (uint64_t)j, CL_PAT_SMALL);
        cluster_fill(buf[j], ECCL_F32, LOSS_COUNT, index, 777 + (uint64_t)j, CL_PAT_SMALL); /* stale */
    }
    if (index == victim) {
        CL_CHECK(cluster_wait_ctl(CTL_GO, 1, 30000) == 0, "never released");
        /* Dies mid-transfer: at its 16th recv after issuing, a few MiB
         * into 4 x 16 MiB, long before it could hold any result. Over
         * RDMA (ECCL_NET=ibv) the stream carries only headers, so count
         * its RDMA writes instead (16 x 256 KiB pieces); between
         * host-mates (net_shm) count its reads of a sender's memory too
         * (1 MiB slices), which is how most of its bytes arrive. */
        const char *net = getenv("ECCL_NET");
        int ibv = net && strcmp(net, "ibv") == 0;
        CL_CHECK(fiu_init(0) == 0, "fiu_init");
        CL_CHECK(fiu_enable_external(ibv ? "eccl/net_ibv/post" : "eccl/net/recv", 1, NULL, 0, die_at_16th) == 0,
                 "fiu");
        CL_CHECK(ibv || fiu_enable_external("eccl/net_shm/read", 1, NULL, 0, die_at_16th) == 0, "fiu");
    }
    eccl_request *req[LOSS_K];
    uint64_t pre[LOSS_K], t0 = cluster_now_ns();
    for (int j = 0; j < LOSS_K; j++) {
        pre[j] = cluster_fnv1a(send[j], bytes); /* out of place: the input is what a failure keeps */
        CL_OK(eccl_allreduce_async(c, send[j], buf[j], LOSS_COUNT, ECCL_F32, ECCL_SUM,
                                   TAG_LOSS + (uint64_t)j, &req[j]));
    }
    atomic_store(&self->started, 1);
    if (index == victim) {
        atomic_store(&self->val[V_ISSUED], 1);
        for (;;) cluster_sleep_ms(100);
    }
    int idx[CLUSTER_MAX_PEERS], m = 0;
    for (int j = 0; j < LOSS_K; j++) {
        eccl_reduce_info info = {0};
        eccl_result rc = eccl_wait(req[j], &info);
        uint64_t post = cluster_fnv1a(send[j], bytes);
        cluster_record(TAG_LOSS + (uint64_t)j, rc, info.world_size, t0, cluster_now_ns(), pre[j], post);
        CL_CHECK(rc == ECCL_OK || rc == ECCL_ERR_PEER_LOST, "op %d: %s", j, eccl_strerror(rc));
        if (rc != ECCL_OK) {
            CL_CHECK(post == pre[j], "op %d failed (%s) but its input changed", j, eccl_strerror(rc));
            continue;
        }
        /* It completed everywhere before the loss: the full world's sum. */
        CL_CHECK(info.world_size == 3, "world %u", info.world_size);
        if (cluster_check_values(buf[j], ECCL_F32, ECCL_SUM, CL_PAT_SMALL, LOSS_COUNT, all_idx, 3,
                                 TAG_LOSS + (uint64_t)j, "completed before the loss"))
            return 1;
    }
    /* Retry what failed, on the survivors, all in flight again. */
    for (int i = 0; i < 3; i++)
        if (i != victim) idx[m++] = i;
    int retried[LOSS_K] = {0};
    for (int j = 0; j < LOSS_K; j++) {
        const cluster_event *e = event_of(self, TAG_LOSS + (uint64_t)j, 0);
        if (e->result == ECCL_OK) continue;
        retried[j] = 1;
        CL_OK(eccl_allreduce_async(c, send[j], buf[j], LOSS_COUNT, ECCL_F32, ECCL_SUM,
                                   TAG_LOSS + (uint64_t)j, &req[j]));
    }
    for (int j = 0; j < LOSS_K; j++) {
        if (!retried[j]) continue;
        eccl_reduce_info info = {0};
        eccl_result rc = eccl_wait(req[j], &info);
        CL_CHECK(rc == ECCL_OK, "retry of op %d: %s", j, eccl_strerror(rc));
        CL_CHECK(info.world_size == 2, "retry world %u", info.world_size);
        if (cluster_check_values(buf[j], ECCL_F32, ECCL_SUM, CL_PAT_SMALL, LOSS_COUNT, idx, m,
                                 TAG_LOSS + (uint64_t)j, "retry on the survivors"))
            return 1;
        cluster_push_hash(cluster_fnv1a(buf[j], bytes));
    }
    for (int j = 0; j < LOSS_K; j++) {
        free(buf[j]);
        free(send[j]);
    }
    return 0;
}

static void test_peer_lost_k_ops_pool4(void **state)
{
    cluster *cl = *state;
    const int n = 3;
    int victim = 2;
    cluster_opts o = {.p2p_pool_size = 4, .peer_timeout_ms = 2000, .op_timeout_ms = 30000};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, n, loss_body, &victim), 0);
    long long st[3] = {n, victim, 1};
    assert_int_equal(cluster_wait_for(cl, started_at_least, st, 30000), 0);
    atomic_store(&cl->sh->ctl[CTL_GO], 1);
    for (int i = 0; i < n; i++) {
        if (i == victim) continue;
        if (cluster_wait(cl, i, 90000) != 0) {
            dump_all(cl, n);
            fail_msg("survivor %d failed", i);
        }
    }
    int lost = 0;
    for (int j = 0; j < LOSS_K; j++) {
        uint64_t tag = TAG_LOSS + (uint64_t)j;
        const cluster_event *a = event_of(&cl->sh->slot[0], tag, 0);
        const cluster_event *b = event_of(&cl->sh->slot[1], tag, 0);
        FCHECK(a && b);
        FCHECK(a->result == b->result); /* the survivors agree, op by op */
        lost += a->result == ECCL_ERR_PEER_LOST;
    }
    FCHECK(lost == LOSS_K); /* nobody could hold a result: all aborted */
    int surv[2] = {0, 1};
    assert_parity(cl, surv, 2);
    printf("    peer killed with %d ops in flight over a pool of 4: %d PEER_LOST (restored), %d had "
           "completed; retries ok on 2 peers\n",
           LOSS_K, lost, LOSS_K - lost);
    cluster_fini(cl);
}

/* ---- a failure on one pool connection -------------------------------------------------- */

static atomic_int g_fp_spent;

static int fp_decide(const char *name, int *failnum, void **failinfo, unsigned int *flags)
{
    (void)name, (void)failnum, (void)failinfo, (void)flags;
    if (atomic_exchange(&g_fp_spent, 1)) return 0;
    cluster_slot *s = cluster_self();
    if (s) atomic_fetch_add(&s->val[V_FIRED], 1);
    return 1;
}

#define FP_COUNT (1u << 20) /* 4 MiB: the ring */
#define TAG_F_WARM0 10      /* 10 (connection 0), 11 (connection 1) */
#define TAG_F_L 21          /* the faulted op: connection 1 */
#define TAG_F_S 22          /* the op beside it: connection 0 */

static int fp_body(eccl_comm *c, int index, void *argp)
{
    const int victim = *(const int *)argp;
    cluster_slot *self = cluster_self();
    size_t bytes = (size_t)FP_COUNT * sizeof(float);
    float *l = malloc(bytes), *s = malloc(bytes), *lsend = malloc(bytes);
    CL_CHECK(l && s && lsend, "oom");
    /* Warm-up: both connections of the pool open and work. */
    for (uint64_t tag = TAG_F_WARM0; tag < TAG_F_WARM0 + 2; tag++) {
        cluster_fill(s, ECCL_F32, FP_COUNT, index, tag, CL_PAT_SMALL);
        CL_OK(eccl_allreduce(c, s, s, FP_COUNT, ECCL_F32, ECCL_SUM, tag, NULL));
    }
    int64_t links = 0;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RING_LINKS, &links));
    CL_CHECK(links == 2, "%lld ring links after the warm-up", (long long)links);
    atomic_store(&self->finished, 1);
    CL_CHECK(cluster_wait_ctl(index == victim ? CTL_ARM : CTL_GO, 1, 30000) == 0, "never released");
    if (index == victim) {
        CL_CHECK(fiu_init(0) == 0, "fiu_init");
        atomic_store(&g_fp_spent, 0);
        CL_CHECK(fiu_enable_external("eccl/net/recv", 1, NULL, 0, fp_decide) == 0, "fiu");
        atomic_store(&self->val[V_ARMED], 1);
    }
    cluster_fill(lsend, ECCL_F32, FP_COUNT, index, TAG_F_L, CL_PAT_SMALL);
    cluster_fill(l, ECCL_F32, FP_COUNT, index, 555, CL_PAT_SMALL); /* stale */
    uint64_t lpre = cluster_fnv1a(lsend, bytes), t0 = cluster_now_ns(); /* out of place: the input */
    eccl_request *lr = NULL;
    CL_OK(eccl_allreduce_async(c, lsend, l, FP_COUNT, ECCL_F32, ECCL_SUM, TAG_F_L, &lr));
    /* Nothing else moves until the failpoint fired on the large op's
     * traffic: only then does anyone start the op beside it. */
    uint64_t deadline = cluster_now_ns() + 20 * CL_SEC;
    while (atomic_load(&cluster_shm()->slot[victim].val[V_FIRED]) == 0) {
        CL_CHECK(cluster_now_ns() < deadline, "the failpoint never fired");
        cluster_sleep_ms(1);
    }
    if (index == victim) fiu_disable("eccl/net/recv");
    /* The faulted op settles at once: both ends of the broken connection
     * tell the master, whose re-formed ring aborts it everywhere. */
    eccl_reduce_info info = {0};
    eccl_result rl = eccl_wait(lr, &info);
    uint64_t lpost = cluster_fnv1a(lsend, bytes);
    cluster_record(TAG_F_L, rl, info.world_size, t0, cluster_now_ns(), lpre, lpost);
    CL_CHECK(rl != ECCL_OK, "the faulted op succeeded");
    CL_CHECK(lpost == lpre, "the faulted op failed (%s) but its input changed", eccl_strerror(rl));
    /* The pool works on: an op over connection 0. */
    cluster_fill(s, ECCL_F32, FP_COUNT, index, TAG_F_S, CL_PAT_SMALL);
    uint64_t spre = cluster_fnv1a(s, bytes), ts = cluster_now_ns();
    eccl_result rs = eccl_allreduce(c, s, s, FP_COUNT, ECCL_F32, ECCL_SUM, TAG_F_S, &info);
    cluster_record(TAG_F_S, rs, info.world_size, ts, cluster_now_ns(), spre, cluster_fnv1a(s, bytes));
    CL_CHECK(rs == ECCL_OK, "the op on the healthy connection: %s", eccl_strerror(rs));
    if (cluster_check_values(s, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, FP_COUNT, all_idx, 3, TAG_F_S,
                             "beside the fault"))
        return 1;
    cluster_push_hash(cluster_fnv1a(s, bytes));
    /* The retry runs on everyone (a tag aborted elsewhere fails once more
     * on a peer that had not called it: not the case here). */
    for (int attempt = 0; attempt < 3; attempt++) {
        rl = eccl_allreduce(c, lsend, l, FP_COUNT, ECCL_F32, ECCL_SUM, TAG_F_L, &info);
        if (rl == ECCL_OK) break;
        CL_CHECK(rl == ECCL_ERR_PEER_LOST || rl == ECCL_ERR_TIMEOUT, "retry: %s", eccl_strerror(rl));
    }
    CL_CHECK(rl == ECCL_OK, "retry: %s", eccl_strerror(rl));
    CL_CHECK(info.world_size == 3, "retry world %u", info.world_size);
    if (cluster_check_values(l, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, FP_COUNT, all_idx, 3, TAG_F_L, "retry"))
        return 1;
    cluster_push_hash(cluster_fnv1a(l, bytes));
    free(l);
    free(s);
    free(lsend);
    return 0;
}

/* One recv on connection 1 of a pool of 2 fails in one peer (the only
 * traffic then is the op mapped to it): the connection breaks under that
 * op, both its ends tell the master, and the re-formed ring fails the op
 * with PEER_LOST on every peer long before op_timeout, buffers restored;
 * an op over connection 0 then completes, bit-identical; retries succeed.
 * Heartbeats are made rare so the recv lands on a data link. */
static void test_pool_link_recv_fails(void **state)
{
    cluster *cl = *state;
    const int n = 3;
    int victim = 1;
    cluster_opts o = {.p2p_pool_size = 2, .peer_timeout_ms = 600000, .op_timeout_ms = 20000};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, n, fp_body, &victim), 0);
    /* Everyone warmed up, the victim enters first. */
    for (;;) {
        int ok = 1;
        for (int i = 0; i < n; i++) ok &= atomic_load(&cl->sh->slot[i].finished) >= 1;
        if (ok) break;
        for (int i = 0; i < n; i++)
            if (!cluster_alive(cl, i)) fail_msg("peer %d died", i);
        cluster_sleep_ms(1);
    }
    atomic_store(&cl->sh->ctl[CTL_ARM], 1);
    long long iv[3] = {victim, V_ARMED, 1};
    assert_int_equal(cluster_wait_for(cl, val_at_least, iv, 10000), 0);
    cluster_sleep_ms(200);
    atomic_store(&cl->sh->ctl[CTL_GO], 1);
    if (cluster_wait_all(cl, 90000) != 0) fail_msg("a peer failed (see above)");
    FCHECK(atomic_load(&cl->sh->slot[victim].val[V_FIRED]) == 1);
    const cluster_event *ve = event_of(&cl->sh->slot[victim], TAG_F_L, 0);
    FCHECK(ve != NULL);
    for (int i = 0; i < n; i++) {
        const cluster_event *s = event_of(&cl->sh->slot[i], TAG_F_S, 0);
        const cluster_event *l = event_of(&cl->sh->slot[i], TAG_F_L, 0);
        FCHECK(s && s->result == ECCL_OK && s->world == 3);
        FCHECK(l && l->result == ECCL_ERR_PEER_LOST && l->pre_hash == l->post_hash);
        FCHECK(l->elapsed_ns < (uint64_t)o.op_timeout_ms * CL_MS); /* settled, not timed out */
    }
    assert_parity(cl, all_idx, n);
    printf("    recv failed once on pool connection 1: its op -> PEER_LOST everywhere (the victim "
           "after %.0f ms, op_timeout %u), restored; then the op on connection 0 ok in %.1f ms\n",
           (double)ve->elapsed_ns / 1e6, o.op_timeout_ms,
           (double)event_of(&cl->sh->slot[0], TAG_F_S, 0)->elapsed_ns / 1e6);
    cluster_fini(cl);
}

/* ---- ECCL_P2P_POOL --------------------------------------------------------------------- */

static void run_env(cluster *cl, const char *env, uint32_t param, uint32_t want)
{
    const int n = 3;
    conc_arg a = {.n = n, .rounds = 1};
    cluster_opts o = {.p2p_pool_size = param, .pool_env = env};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, n, conc_body, &a), 0);
    if (cluster_wait_all(cl, 120000) != 0) fail_msg("a peer failed (see above)");
    for (int i = 0; i < n; i++) {
        FCHECK(atomic_load(&cl->sh->slot[i].val[V_POOL]) == want);
        FCHECK(atomic_load(&cl->sh->slot[i].val[V_LINKS]) == links_needed(n, want));
    }
    assert_parity(cl, all_idx, n);
    printf("    ECCL_P2P_POOL=\"%s\", p2p_pool_size %u: pool %u in use, %lld ring links to next\n", env,
           param, want, (long long)atomic_load(&cl->sh->slot[0].val[V_LINKS]));
    cluster_fini(cl);
}

static void test_env_overrides_param(void **state) { run_env(*state, "4", 1, 4); }
static void test_env_invalid_ignored(void **state) { run_env(*state, "65", 2, 2); }
static void test_env_garbage_ignored(void **state) { run_env(*state, "4x", 3, 3); }

/* ---- item 2: peers_pending beside collectives; no topology change under one ------------- */

#define PEND_K 4
#define PEND_COUNT 100000
#define TAG_PEND 3000

/* Members: each round puts PEND_K all-reduces in flight, asks
 * peers_pending while they run, then waits them; once a peer is pending,
 * update_topology. Every answer is recorded (event tag = round). */
static int pend_member(eccl_comm *c, int index, void *argp)
{
    (void)argp;
    cluster_slot *self = cluster_self();
    float *buf[PEND_K];
    for (int j = 0; j < PEND_K; j++) {
        buf[j] = malloc(PEND_COUNT * sizeof(float));
        CL_CHECK(buf[j], "oom");
    }
    uint64_t deadline = cluster_now_ns() + 40 * CL_SEC;
    for (uint64_t round = 0;; round++) {
        CL_CHECK(round < 60 && cluster_now_ns() < deadline, "no newcomer after %llu rounds",
                 (unsigned long long)round);
        eccl_request *req[PEND_K];
        for (int j = 0; j < PEND_K; j++) {
            uint64_t tag = TAG_PEND + round * PEND_K + (uint64_t)j;
            cluster_fill(buf[j], ECCL_F32, PEND_COUNT, index, tag, CL_PAT_SMALL);
            CL_OK(eccl_allreduce_async(c, buf[j], buf[j], PEND_COUNT, ECCL_F32, ECCL_SUM, tag, &req[j]));
        }
        /* With the ops in flight: a topology change or a sync is refused
         * here and now (not at a timeout), and touches nothing. */
        CL_EXPECT_RC(eccl_comm_update_topology(c), ECCL_ERR_BUSY);
        eccl_tensor_info ti = {"w", buf[0], 4, ECCL_F32, 0};
        eccl_shared_state st = {0, 1, &ti};
        CL_EXPECT_RC(eccl_comm_sync_shared_state(c, &st, ECCL_SYNC_ENFORCE_POPULAR, ECCL_HASH_SIMPLE, NULL),
                     ECCL_ERR_BUSY);
        uint32_t pending = 0;
        uint64_t t0 = cluster_now_ns();
        eccl_result rc = eccl_comm_peers_pending(c, &pending);
        cluster_record(round, rc, pending, t0, cluster_now_ns(), 0, 0);
        CL_CHECK(rc == ECCL_OK, "peers_pending with ops in flight: %s", eccl_strerror(rc));
        for (int j = 0; j < PEND_K; j++) {
            eccl_reduce_info info;
            rc = eccl_wait(req[j], &info);
            CL_CHECK(rc == ECCL_OK, "round %llu op %d: %s", (unsigned long long)round, j, eccl_strerror(rc));
            if (cluster_check_values(buf[j], ECCL_F32, ECCL_SUM, CL_PAT_SMALL, PEND_COUNT, all_idx, 2,
                                     TAG_PEND + round * PEND_K + (uint64_t)j, "beside peers_pending"))
                return 1;
        }
        atomic_store(&self->finished, (long long)round + 1);
        if (pending) {
            CL_OK(eccl_comm_update_topology(c));
            break;
        }
        cluster_sleep_ms(5);
    }
    for (int j = 0; j < PEND_K; j++) free(buf[j]);
    return cluster_after_join(c, index, 3, 3, 0);
}

static int pend_newcomer(eccl_comm *c, int index, void *argp)
{
    (void)argp;
    return cluster_after_join(c, index, 3, 3, 0);
}

static void test_pending_beside_ops_then_join(void **state)
{
    cluster *cl = *state;
    const int n = 3;
    cluster_opts o = {.p2p_pool_size = 2};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn(cl, 0, 2, pend_member, NULL), 0);
    assert_int_equal(cluster_spawn(cl, 1, 2, pend_member, NULL), 0);
    for (;;) {
        if (atomic_load(&cl->sh->slot[0].finished) >= 2 && atomic_load(&cl->sh->slot[1].finished) >= 2)
            break;
        if (!cluster_alive(cl, 0) || !cluster_alive(cl, 1)) {
            dump_all(cl, 2);
            fail_msg("a member died");
        }
        cluster_sleep_ms(1);
    }
    assert_int_equal(cluster_spawn(cl, 2, 3, pend_newcomer, NULL), 0);
    if (cluster_wait_all(cl, 90000) != 0) fail_msg("a peer failed (see above)");
    /* Same answer on both members, round by round; the last one saw the
     * newcomer. */
    const cluster_slot *a = &cl->sh->slot[0], *b = &cl->sh->slot[1];
    int rounds = atomic_load(&a->n_events);
    FCHECK(rounds >= 3 && rounds == atomic_load(&b->n_events));
    for (int r = 0; r < rounds; r++) {
        FCHECK(a->ev[r].tag == (uint64_t)r && b->ev[r].tag == (uint64_t)r);
        FCHECK(a->ev[r].world == b->ev[r].world);
    }
    FCHECK(a->ev[rounds - 1].world == 1);
    for (int r = 0; r < rounds - 1; r++) FCHECK(a->ev[r].world == 0);
    assert_parity(cl, all_idx, n);
    printf("    %d rounds of %d ops in flight + peers_pending, answers equal on both members; newcomer "
           "admitted, 3 all-reduces at N=3 ok\n",
           rounds, PEND_K);
    cluster_fini(cl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_concurrent_pool1_n3, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_pool2_n3, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_pool4_n3, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_pool4_n2, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_mixed_n4, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_small_passes_large_pool2, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_small_blocked_pool1, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_peer_lost_k_ops_pool4, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_pool_link_recv_fails, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_env_overrides_param, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_env_invalid_ignored, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_env_garbage_ignored, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_pending_beside_ops_then_join, cluster_test_setup, cluster_test_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
