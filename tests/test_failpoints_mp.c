/* Multi-process fault-injection tests on loopback (tests/cluster.h): the
 * library's libfiu failpoints (backends/real: eccl/net/{connect,accept,send,
 * recv,listen}, eccl/dev/alloc) fired inside one peer process while the
 * others run normally.
 *
 * Every failpoint is armed through fiu_enable_external with a callback that
 * counts its firings into the peer's slot (and, for one-shot failures, fires
 * exactly once even when two threads race for it), so every test also proves
 * that the failure it is about really happened.
 *
 * Outcomes are recorded per call (cluster_record) and judged by the parent,
 * so a library bug shows up as a parent assertion with every peer's story
 * dumped, while the children still finish (bounded retries, bounded waits). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <fiu.h>
#include <fiu-control.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"

/* ---- shared-area layout --------------------------------------------------------- */

enum { CTL_ARM = 0, CTL_GO = 1, CTL_RETRY = 2 };
enum {
    V_FIRED = 8,      /* how often the armed failpoint failed a call */
    V_ARMED = 9,      /* 1 once the failpoint is armed */
    V_ARM_NS = 10,    /* cluster_now_ns() when it was armed */
    V_FIRST_DONE = 11 /* 1 once the first attempt of the faulted tag returned */
};

/* ---- failpoints (child side) ------------------------------------------------------ */

static atomic_int g_fp_once;  /* fail the first call only */
static atomic_int g_fp_spent; /* the one-shot failure happened */

static int fp_decide(const char *name, int *failnum, void **failinfo, unsigned int *flags)
{
    (void)name, (void)failnum, (void)failinfo, (void)flags;
    if (atomic_load(&g_fp_once) && atomic_exchange(&g_fp_spent, 1)) return 0;
    cluster_slot *s = cluster_self();
    if (s) atomic_fetch_add(&s->val[V_FIRED], 1);
    return 1;
}

static int fp_init(void)
{
    static int inited;
    if (!inited) {
        if (fiu_init(0) != 0) return -1;
        inited = 1;
    }
    return 0;
}

/* Arms `name` in this process: once (one-shot) or until fp_disarm. */
static int fp_arm(const char *name, int once)
{
    if (fp_init() != 0) return -1;
    atomic_store(&g_fp_once, once);
    atomic_store(&g_fp_spent, 0);
    if (fiu_enable_external(name, 1, NULL, once ? FIU_ONETIME : 0, fp_decide) != 0) return -1;
    cluster_slot *s = cluster_self();
    if (s) {
        atomic_store(&s->val[V_ARM_NS], (long long)cluster_now_ns());
        atomic_store(&s->val[V_ARMED], 1);
    }
    return 0;
}

static void fp_disarm(const char *name) { fiu_disable(name); }

static long long fired(const cluster *cl, int index)
{
    return atomic_load(&cl->sh->slot[index].val[V_FIRED]);
}

/* ---- helpers ---------------------------------------------------------------------------- */

static const cluster_event *first_event(const cluster_slot *s, uint64_t tag, int nth)
{
    int n = atomic_load(&s->n_events);
    for (int i = 0; i < n; i++)
        if (s->ev[i].tag == tag && nth-- == 0) return &s->ev[i];
    return NULL;
}

static int count_events(const cluster_slot *s, uint64_t tag)
{
    int n = atomic_load(&s->n_events), k = 0;
    for (int i = 0; i < n; i++) k += s->ev[i].tag == tag;
    return k;
}

/* Arms `name` for one failure, then sets the parent's ctl[armed_ctl] (if
 * >= 0) for peers that wait to act until it is armed, waits up to 10 s for
 * it to fire in this process and disarms it. -1 if it cannot be armed. */
static int fail_once_and_wait(const char *name, int armed_ctl)
{
    if (fp_arm(name, 1) != 0) return -1;
    if (armed_ctl >= 0) atomic_store(&cluster_shm()->ctl[armed_ctl], 1);
    uint64_t until = cluster_now_ns() + 10 * CL_SEC;
    while (atomic_load(&cluster_self()->val[V_FIRED]) == 0 && cluster_now_ns() < until) cluster_sleep_ms(1);
    fp_disarm(name);
    return 0;
}

static void dump_all(cluster *cl, int n)
{
    for (int d = 0; d < n; d++) cluster_dump_slot(cl, d);
}

/* A failed parent-side check prints every peer's calls first. */
#define FCHECK(cond)                                                                      \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s: `%s` does not hold (line %d)\n", what, #cond, __LINE__); \
            dump_all(cl, n);                                                              \
            fail();                                                                       \
        }                                                                                 \
    } while (0)

typedef struct progress_arg {
    int n;
    long long at_least;
    int skip; /* an index to ignore, or -1 */
    int started; /* look at `started` instead of `finished` */
} progress_arg;

static int progressed(cluster *cl, void *argp)
{
    const progress_arg *p = argp;
    for (int i = 0; i < p->n; i++) {
        if (i == p->skip) continue;
        const cluster_slot *s = &cl->sh->slot[i];
        if (atomic_load(p->started ? &s->started : &s->finished) < p->at_least) return 0;
    }
    return 1;
}

static int val_set(cluster *cl, void *argp)
{
    const int *iv = argp; /* {index, val} */
    return atomic_load(&cl->sh->slot[iv[0]].val[iv[1]]) != 0;
}

/* ---- faults inside an all-reduce ------------------------------------------------------------ */

enum fault {
    F_MASTER_RECV,  /* persistent eccl/net/recv: master link and ring links fail */
    F_MASTER_SEND,  /* persistent eccl/net/send: ring links, then the heartbeat, fail */
    F_LINK_RECV,    /* one eccl/net/recv on a ring link: the op stalls to its timeout */
    F_ALLOC,        /* one allocation of a larger call: eccl/dev/alloc (its
                     * staging), or the device-resident ring's pinned staging */
    /* ECCL_NET=ibv only: one RDMA fault in the victim's NIC or transport */
    F_IBV_COMPLETION, /* a write completes with an error (mock) */
    F_IBV_QP_ERROR,   /* a queue pair goes to ERROR mid-transfer (mock) */
    F_IBV_PORT_DOWN,  /* the port goes down: every queue pair errors (mock) */
    F_IBV_REG,        /* registering a buffer fails (net_ibv) */
    F_IBV_POST,       /* posting a write fails (net_ibv) */
    /* net_shm only (the default between host-mates): one fault of a payload
     * that moves through memory */
    F_SHM_READ,       /* reading the sender's buffer fails */
    F_SHM_CTL         /* a request-to-send or FIN cannot go */
};

/* A fault of the transport under one link: fires once, breaks that link. */
static int net_fault(enum fault f) { return f >= F_IBV_COMPLETION; }
static int shm_fault(enum fault f) { return f >= F_SHM_READ; }

typedef struct fault_arg {
    enum fault f;
    int n, victim;
    int ops;           /* all-reduces in flight at the faulted point (async) */
    size_t warm_count; /* f32 elements of the warm-up calls */
    size_t count;      /* f32 elements of the faulted calls */
} fault_arg;

#define WARM 2
#define TAG_WARM0 10
#define TAG_FAULT 100 /* the faulted calls: TAG_FAULT .. TAG_FAULT + ops - 1 */
#define MAX_OPS 2

static const char *fault_fp(enum fault f)
{
    switch (f) {
    case F_MASTER_RECV: return "eccl/net/recv";
    case F_MASTER_SEND: return "eccl/net/send";
    case F_LINK_RECV: return "eccl/net/recv";
    case F_IBV_COMPLETION: return "eccl/mock_ibv/completion_error";
    case F_IBV_QP_ERROR: return "eccl/mock_ibv/qp_error";
    case F_IBV_PORT_DOWN: return "eccl/mock_ibv/port_down";
    case F_IBV_REG: return "eccl/net_ibv/reg_mr";
    case F_IBV_POST: return "eccl/net_ibv/post";
    case F_SHM_READ:
        /* The resident ring's slices leave from device memory, which a
         * host-mate maps (CUDA IPC) once its first call told the sender it
         * can: the warm-up calls come first. */
        return getenv("ECCL_TEST_MOCK_CUDA") && getenv("ECCL_DEVICE_RING_MIN_BYTES") ? "eccl/net_shm/ipc"
                                                                                  : "eccl/net_shm/read";
    case F_SHM_CTL: return "eccl/net_shm/ctl";
    default:
        /* Device buffers of the resident ring's size (tests/CMakeLists.txt,
         * the _cuda_resident run) allocate pinned staging and, out of
         * place, no backup. */
        return getenv("ECCL_TEST_MOCK_CUDA") && getenv("ECCL_DEVICE_RING_MIN_BYTES") ? "eccl/dev/host_alloc"
                                                                                  : "eccl/dev/alloc";
    }
}

static int master_fault(enum fault f) { return f == F_MASTER_RECV || f == F_MASTER_SEND; }

typedef struct bufs {
    float *send[MAX_OPS], *recv[MAX_OPS];
} bufs;

/* Checks a successful call's result for whoever took part. */
static int check_ok(const fault_arg *a, const float *recv, size_t count, uint32_t world, uint64_t tag,
                    const char *what)
{
    int idx[CLUSTER_MAX_PEERS], m = 0;
    if (world == (uint32_t)a->n) {
        for (int i = 0; i < a->n; i++) idx[m++] = i;
    } else {
        CL_CHECK(master_fault(a->f) && world == (uint32_t)a->n - 1,
                 "%s: tag %llu succeeded with world %u (n %d)", what, (unsigned long long)tag,
                 world, a->n);
        for (int i = 0; i < a->n; i++)
            if (i != a->victim) idx[m++] = i;
    }
    if (cluster_check_values(recv, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, count, idx, m, tag, what)) return 1;
    cluster_push_hash(cluster_fnv1a(recv, count * sizeof *recv));
    return 0;
}

/* One blocking, recorded call; a failure must leave recvbuf as it was. */
static eccl_result recorded(eccl_comm *c, const float *send, float *recv, size_t count, uint64_t tag,
                            eccl_reduce_info *info)
{
    size_t bytes = count * sizeof *recv;
    /* The input: what a failure promises out of place (in place, the
     * buffer is put back bit for bit). */
    uint64_t pre = cluster_fnv1a(send, bytes);
    memset(info, 0, sizeof *info);
    uint64_t t0 = cluster_now_ns();
    eccl_result rc = eccl_allreduce(c, send, recv, count, ECCL_F32, ECCL_SUM, tag, info);
    uint64_t t1 = cluster_now_ns();
    uint64_t post = cluster_fnv1a(send, bytes);
    cluster_record(tag, rc, info->world_size, t0, t1, pre, post);
    return rc;
}

/* Retries `tag` until it succeeds (at most 3 more attempts) and checks the
 * result. `rc` is the outcome of the attempt already made. */
static int settle(eccl_comm *c, const fault_arg *a, const float *send, float *recv, uint64_t tag,
                  eccl_result rc, uint32_t world)
{
    size_t bytes = a->count * sizeof *recv;
    int attempts = 1;
    while (rc != ECCL_OK) {
        CL_CHECK(rc == ECCL_ERR_PEER_LOST || rc == ECCL_ERR_TIMEOUT || rc == ECCL_ERR_NO_MEMORY,
                 "tag %llu attempt %d: %s is not a retryable outcome", (unsigned long long)tag,
                 attempts, eccl_strerror(rc));
        CL_CHECK(attempts < 4, "tag %llu still fails after %d attempts (%s)",
                 (unsigned long long)tag, attempts, eccl_strerror(rc));
        uint64_t h = cluster_fnv1a(send, bytes);
        eccl_reduce_info info;
        rc = recorded(c, send, recv, a->count, tag, &info);
        world = info.world_size;
        attempts++;
        if (rc != ECCL_OK)
            CL_CHECK(cluster_fnv1a(send, bytes) == h, "tag %llu attempt %d failed (%s) but its input changed",
                     (unsigned long long)tag, attempts, eccl_strerror(rc));
    }
    return check_ok(a, recv, a->count, world, tag, "after the fault");
}

/* The victim after MASTER_LOST: every later call fails at once with it and
 * touches nothing. */
static int master_lost_after(eccl_comm *c, float *buf, size_t count)
{
    size_t bytes = count * sizeof *buf;
    uint64_t h = cluster_fnv1a(buf, bytes);
    uint64_t t0 = cluster_now_ns();
    CL_EXPECT_RC(eccl_allreduce(c, buf, buf, count, ECCL_F32, ECCL_SUM, TAG_FAULT + 50, NULL),
                 ECCL_ERR_MASTER_LOST);
    uint64_t dt = cluster_now_ns() - t0;
    CL_CHECK(dt < 200 * CL_MS, "a call on a failed communicator took %.1f ms", (double)dt / 1e6);
    CL_CHECK(cluster_fnv1a(buf, bytes) == h, "a refused call changed the buffer");
    eccl_request *req = NULL;
    CL_EXPECT_RC(eccl_allreduce_async(c, buf, buf, count, ECCL_F32, ECCL_SUM, TAG_FAULT + 51, &req),
                 ECCL_ERR_MASTER_LOST);
    CL_CHECK(cluster_fnv1a(buf, bytes) == h, "a refused async call changed the buffer");
    uint32_t pending = 0;
    CL_EXPECT_RC(eccl_comm_peers_pending(c, &pending), ECCL_ERR_MASTER_LOST);
    CL_EXPECT_RC(eccl_comm_update_topology(c), ECCL_ERR_MASTER_LOST);
    CL_EXPECT_RC(eccl_comm_connect(c), ECCL_ERR_MASTER_LOST);
    return 0;
}

static int fault_body(eccl_comm *c, int index, void *argp)
{
    const fault_arg *a = argp;
    cluster_slot *self = cluster_self();
    const int victim = index == a->victim;
    size_t cap = a->count > a->warm_count ? a->count : a->warm_count;
    bufs b;
    memset(&b, 0, sizeof b);
    for (int j = 0; j < a->ops; j++) {
        b.send[j] = malloc(cap * sizeof(float));
        b.recv[j] = malloc(cap * sizeof(float));
        CL_CHECK(b.send[j] && b.recv[j], "oom");
    }
    int all[CLUSTER_MAX_PEERS];
    for (int i = 0; i < a->n; i++) all[i] = i;

    /* Warm-up: the ring works, and (F_ALLOC) the buffer cache holds only
     * buffers smaller than the faulted call needs. */
    for (int k = 0; k < WARM; k++) {
        uint64_t tag = TAG_WARM0 + (uint64_t)k;
        cluster_fill(b.send[0], ECCL_F32, a->warm_count, index, tag, CL_PAT_SMALL);
        eccl_reduce_info info;
        eccl_result rc = recorded(c, b.send[0], b.recv[0], a->warm_count, tag, &info);
        CL_CHECK(rc == ECCL_OK, "warm-up tag %llu: %s", (unsigned long long)tag, eccl_strerror(rc));
        CL_CHECK(info.world_size == (uint32_t)a->n, "warm-up world %u", info.world_size);
        if (cluster_check_values(b.recv[0], ECCL_F32, ECCL_SUM, CL_PAT_SMALL, a->warm_count, all, a->n, tag, "warm-up"))
            return 1;
        atomic_store(&self->finished, k + 1);
    }

    /* The parent orders who enters the faulted calls first. */
    CL_CHECK(cluster_wait_ctl(victim ? CTL_ARM : CTL_GO, 1, 30000) == 0, "never released");
    for (int j = 0; j < a->ops; j++) {
        uint64_t tag = TAG_FAULT + (uint64_t)j;
        cluster_fill(b.send[j], ECCL_F32, a->count, index, tag, CL_PAT_SMALL);
        cluster_fill(b.recv[j], ECCL_F32, a->count, index, 999 + tag, CL_PAT_SMALL); /* stale */
    }
    if (victim)
        CL_CHECK(fp_arm(fault_fp(a->f), a->f == F_LINK_RECV || a->f == F_ALLOC || net_fault(a->f)) == 0,
                 "fiu");
    atomic_store(&self->started, WARM + 1);

    eccl_result rc[MAX_OPS];
    uint32_t world[MAX_OPS] = {0};
    size_t bytes = a->count * sizeof(float);
    if (a->ops == 1) {
        eccl_reduce_info info;
        uint64_t pre = cluster_fnv1a(b.send[0], bytes);
        rc[0] = recorded(c, b.send[0], b.recv[0], a->count, TAG_FAULT, &info);
        world[0] = info.world_size;
        if (rc[0] != ECCL_OK)
            CL_CHECK(cluster_fnv1a(b.send[0], bytes) == pre, "failed (%s) but its input changed",
                     eccl_strerror(rc[0]));
    } else {
        eccl_request *req[MAX_OPS];
        uint64_t pre[MAX_OPS], t0[MAX_OPS];
        for (int j = 0; j < a->ops; j++) {
            pre[j] = cluster_fnv1a(b.send[j], bytes);
            t0[j] = cluster_now_ns();
            rc[j] = eccl_allreduce_async(c, b.send[j], b.recv[j], a->count, ECCL_F32, ECCL_SUM,
                                         TAG_FAULT + (uint64_t)j, &req[j]);
            /* The victim's comm may have failed already: its broken ring
             * link brings a view query it cannot read. */
            CL_CHECK(rc[j] == ECCL_OK || (victim && rc[j] == ECCL_ERR_MASTER_LOST),
                     "eccl_allreduce_async tag %d: %s", TAG_FAULT + j, eccl_strerror(rc[j]));
            if (rc[j] != ECCL_OK) req[j] = NULL;
        }
        for (int j = 0; j < a->ops; j++) {
            eccl_reduce_info info;
            memset(&info, 0, sizeof info);
            if (req[j]) rc[j] = eccl_wait(req[j], &info);
            uint64_t t1 = cluster_now_ns();
            world[j] = info.world_size;
            uint64_t post = cluster_fnv1a(b.send[j], bytes);
            cluster_record(TAG_FAULT + (uint64_t)j, rc[j], world[j], t0[j], t1, pre[j], post);
            if (rc[j] != ECCL_OK)
                CL_CHECK(post == pre[j], "tag %d failed (%s) but its input changed", TAG_FAULT + j,
                         eccl_strerror(rc[j]));
        }
    }
    atomic_store(&self->val[V_FIRST_DONE], 1);

    if (victim && master_fault(a->f)) {
        for (int j = 0; j < a->ops; j++)
            CL_CHECK(rc[j] == ECCL_ERR_MASTER_LOST, "tag %d: %s, want MASTER_LOST", TAG_FAULT + j,
                     eccl_strerror(rc[j]));
        fp_disarm(fault_fp(a->f)); /* what follows tests the communicator, not the failpoint */
        return master_lost_after(c, b.recv[0], a->count);
    }
    if (victim) {
        fp_disarm(fault_fp(a->f));
        /* Retry only once the others know how the faulted call ended: an
         * early retry would simply complete their pending call. */
        CL_CHECK(cluster_wait_ctl(CTL_RETRY, 1, 60000) == 0, "never told to retry");
    }
    for (int j = 0; j < a->ops; j++)
        if (settle(c, a, b.send[j], b.recv[j], TAG_FAULT + (uint64_t)j, rc[j], world[j])) return 1;
    atomic_store(&self->finished, WARM + 1);
    for (int j = 0; j < a->ops; j++) {
        free(b.send[j]);
        free(b.recv[j]);
    }
    return 0;
}

typedef struct fault_plan {
    fault_arg a;
    cluster_opts o;
    int victim_first;      /* the victim enters the faulted call first */
    unsigned others_delay; /* ms between the first and the second group */
} fault_plan;

/* Forms the ring, warms up, lets both groups into the faulted calls in the
 * planned order, and (non-master faults) lets the victim retry once every
 * other peer's first attempt returned. */
static void run_fault(cluster *cl, fault_plan *p)
{
    const fault_arg *a = &p->a;
    const int n = a->n, v = a->victim;
    const char *what = "fault run";
    assert_int_equal(cluster_init(cl, &p->o), 0);
    assert_int_equal(cluster_spawn_n(cl, n, fault_body, &p->a), 0);
    progress_arg warm = {n, WARM, -1, 0};
    assert_int_equal(cluster_wait_for(cl, progressed, &warm, 30000), 0);
    if (p->victim_first) {
        atomic_store(&cl->sh->ctl[CTL_ARM], 1);
        int iv[2] = {v, V_ARMED}; /* set right before its call */
        assert_int_equal(cluster_wait_for(cl, val_set, iv, 10000), 0);
        cluster_sleep_ms(p->others_delay);
        atomic_store(&cl->sh->ctl[CTL_GO], 1);
    } else {
        atomic_store(&cl->sh->ctl[CTL_GO], 1);
        progress_arg os = {n, WARM + 1, v, 1};
        assert_int_equal(cluster_wait_for(cl, progressed, &os, 10000), 0);
        cluster_sleep_ms(p->others_delay);
        atomic_store(&cl->sh->ctl[CTL_ARM], 1);
    }
    if (!master_fault(a->f)) {
        uint64_t deadline = cluster_now_ns() + ((uint64_t)p->o.op_timeout_ms + 10000) * CL_MS;
        for (;;) {
            int done = 1;
            for (int i = 0; i < n; i++)
                done &= atomic_load(&cl->sh->slot[i].val[V_FIRST_DONE]) != 0 || !cluster_alive(cl, i);
            if (done || cluster_now_ns() > deadline) break;
            cluster_sleep_ms(1);
        }
        atomic_store(&cl->sh->ctl[CTL_RETRY], 1);
    }
    if (cluster_wait_all(cl, 60000) != 0) {
        fprintf(stderr, "%s: a peer failed (see above)\n", what);
        fail();
    }
    FCHECK(atomic_load(&cl->sh->slot[v].val[V_ARMED]) == 1);
}

static const char *rc_name(int32_t rc) { return eccl_strerror((eccl_result)rc); }

/* Persistent failures of every recv or every send in one peer: its master
 * link breaks (at the next message either way: a heartbeat, or the view
 * query its broken ring links bring), so its two all-reduces in flight
 * (or still being issued) and every later call fail
 * with MASTER_LOST, buffers restored; it closes the master link, the master
 * drops it, and the survivors' same two calls fail with PEER_LOST (restored)
 * and succeed on retry with world N-1. */
static void run_master_fault(cluster *cl, enum fault f)
{
    fault_plan p;
    memset(&p, 0, sizeof p);
    p.a = (fault_arg){.f = f, .n = 3, .victim = 1, .ops = 2, .warm_count = 65536, .count = 65536};
    p.o = (cluster_opts){.peer_timeout_ms = 2000, .op_timeout_ms = 10000};
    p.victim_first = 0; /* the survivors are blocked in both calls first */
    p.others_delay = 100;
    run_fault(cl, &p);
    const int n = p.a.n, v = p.a.victim;
    const char *what = fault_fp(f);
    const cluster_slot *vs = &cl->sh->slot[v];
    FCHECK(fired(cl, v) >= 1);
    uint64_t arm_ns = (uint64_t)atomic_load(&vs->val[V_ARM_NS]);
    uint64_t lost_ns = 0;
    for (int j = 0; j < p.a.ops; j++) {
        const cluster_event *e = first_event(vs, TAG_FAULT + (uint64_t)j, 0);
        FCHECK(e != NULL);
        FCHECK(e->result == ECCL_ERR_MASTER_LOST);
        FCHECK(e->pre_hash == e->post_hash);
        /* The master's heartbeat (recv) or ours (send) comes every
         * peer_timeout/4; allow a whole peer_timeout and scheduling. */
        FCHECK(e->end_ns - arm_ns < ((uint64_t)p.o.peer_timeout_ms + 1000) * CL_MS);
        if (e->end_ns > lost_ns) lost_ns = e->end_ns;
    }
    double worst_ms = 0;
    for (int j = 0; j < p.a.ops; j++) {
        uint64_t tag = TAG_FAULT + (uint64_t)j;
        int32_t outcome = -1;
        for (int i = 0; i < n; i++) {
            if (i == v) continue;
            const cluster_slot *s = &cl->sh->slot[i];
            const cluster_event *e = first_event(s, tag, 0);
            FCHECK(e != NULL);
            if (outcome < 0) outcome = e->result;
            FCHECK(e->result == outcome); /* the survivors agree */
            /* The victim never relayed a byte: nobody can hold the result. */
            FCHECK(e->result == ECCL_ERR_PEER_LOST);
            FCHECK(e->pre_hash == e->post_hash);
            double after = ((double)e->end_ns - (double)lost_ns) / 1e6;
            if (after > worst_ms) worst_ms = after;
            FCHECK(after < 2000.0);
            const cluster_event *r = first_event(s, tag, 1);
            FCHECK(r != NULL);
            FCHECK(r->result == ECCL_OK);
            FCHECK(r->world == (uint32_t)n - 1);
        }
    }
    /* Both survivors ended with the same bits (values were checked there). */
    int s0 = v == 0 ? 1 : 0;
    for (int i = 0; i < n; i++) {
        if (i == v || i == s0) continue;
        FCHECK(cl->sh->slot[i].n_hash == cl->sh->slot[s0].n_hash);
        for (int k = 0; k < cl->sh->slot[s0].n_hash; k++)
            FCHECK(cl->sh->slot[i].hash[k] == cl->sh->slot[s0].hash[k]);
    }
    printf("    %s fired %lld times; victim's %d calls -> MASTER_LOST %.1f ms after arming; "
           "survivors -> PEER_LOST at most %.1f ms later, retry OK on %d peers\n",
           what, fired(cl, v), p.a.ops, (double)(lost_ns - arm_ns) / 1e6, worst_ms, n - 1);
    cluster_fini(cl);
}

static void test_master_link_recv_fails(void **state) { run_master_fault(*state, F_MASTER_RECV); }
static void test_master_link_send_fails(void **state) { run_master_fault(*state, F_MASTER_SEND); }

/* ---- leaving together --------------------------------------------------------------------- */

enum { V_LEAVE_FIRST = 12, V_LEAVE_FINAL = 13, V_LEAVE_WORLD = 14 };

/* Peer 0's master link breaks as it votes to leave (every send fails): its
 * eccl_comm_leave fails at once, not after a wait, and it is dropped (its
 * communicator closes, or at its peer timeout): a loss before the vote
 * passed. The others' vote then fails with PEER_LOST if they voted before
 * the drop, or passes among the two of them if after; never a hang. Either
 * way they end as two that left together. */
static int leave_fault_body(eccl_comm *c, int index, void *argp)
{
    (void)argp;
    cluster_slot *self = cluster_self();
    int32_t buf[64];
    /* Every peer is wired (admission's last steps are done) before the
     * failpoint breaks peer 0's sends. */
    cluster_fill(buf, ECCL_I32, 64, index, 1, CL_PAT_SMALL);
    CL_OK(eccl_allreduce(c, buf, buf, 64, ECCL_I32, ECCL_SUM, 1, NULL));
    if (index == 0) CL_CHECK(fp_arm("eccl/net/send", 0) == 0, "cannot arm eccl/net/send");
    eccl_result rc = eccl_comm_leave(c);
    atomic_store(&self->val[V_LEAVE_FIRST], (long long)rc);
    if (index == 0) {
        fp_disarm("eccl/net/send");
        return 0;
    }
    if (rc == ECCL_ERR_PEER_LOST) rc = eccl_comm_leave(c);
    atomic_store(&self->val[V_LEAVE_FINAL], (long long)rc);
    int64_t w = 0;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &w));
    atomic_store(&self->val[V_LEAVE_WORLD], w);
    return 0;
}

static void test_leave_master_send_fails(void **state)
{
    cluster *cl = *state;
    cluster_opts o = {.peer_timeout_ms = 2000, .op_timeout_ms = 20000, .no_linger = 1};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, 3, leave_fault_body, NULL), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    assert_true(fired(cl, 0) >= 1);
    long long victim = atomic_load(&cl->sh->slot[0].val[V_LEAVE_FIRST]);
    assert_int_equal(victim, ECCL_ERR_MASTER_LOST); /* a broken master link, whoever saw it first */
    int lost = 0;
    for (int i = 1; i < 3; i++) {
        const cluster_slot *s = &cl->sh->slot[i];
        long long first = atomic_load(&s->val[V_LEAVE_FIRST]);
        assert_true(first == ECCL_OK || first == ECCL_ERR_PEER_LOST);
        lost += first == ECCL_ERR_PEER_LOST;
        assert_int_equal(atomic_load(&s->val[V_LEAVE_FINAL]), ECCL_OK);
        assert_int_equal(atomic_load(&s->val[V_LEAVE_WORLD]), 2);
    }
    printf("    eccl/net/send fired %lld times: the voter's leave -> %s; the others' first "
           "vote failed by the loss on %d of 2, then all left as two\n", fired(cl, 0),
           eccl_strerror((eccl_result)victim), lost);
    cluster_fini(cl);
}

/* Prints the outcomes of the faulted tag, peer by peer. */
static void print_attempts(cluster *cl, int n, uint64_t tag)
{
    for (int i = 0; i < n; i++) {
        const cluster_slot *s = &cl->sh->slot[i];
        char line[256];
        size_t used = 0;
        line[0] = '\0';
        for (int k = 0; k < count_events(s, tag) && used < sizeof line - 40; k++) {
            const cluster_event *e = first_event(s, tag, k);
            used += (size_t)snprintf(line + used, sizeof line - used, "%s%s (%.0f ms)", k ? ", " : "",
                                     rc_name(e->result), (double)e->elapsed_ns / 1e6);
        }
        printf("      peer %d: %s\n", i, line);
    }
}

/* Every peer eventually succeeds with world N, all with the same bits. */
static void check_all_settled(cluster *cl, int n, uint64_t tag, const char *what)
{
    for (int i = 0; i < n; i++) {
        const cluster_slot *s = &cl->sh->slot[i];
        int k = count_events(s, tag);
        FCHECK(k >= 2);
        const cluster_event *last = first_event(s, tag, k - 1);
        FCHECK(last->result == ECCL_OK);
        FCHECK(last->world == (uint32_t)n);
        FCHECK(cl->sh->slot[i].n_hash == cl->sh->slot[0].n_hash);
        for (int h = 0; h < cl->sh->slot[0].n_hash; h++)
            FCHECK(cl->sh->slot[i].hash[h] == cl->sh->slot[0].hash[h]);
    }
}

/* One recv on a ring link of one peer fails mid-call: the link drops, and
 * the frames on it with it. Both ends see the link break under a running
 * op and tell the master (comm_ops_link_lost), which re-forms the ring at
 * once: every peer's call fails with PEER_LOST, restored, long before
 * op_timeout (before that notice the victim stalled to its own timeout),
 * and everyone's retry succeeds on the same N peers. The victim enters the
 * call first; the master's heartbeats are made rare (peer_timeout 10 min)
 * so the one-shot recv failure lands on a ring link, not the master link. */
static void test_ring_link_recv_once(void **state)
{
    cluster *cl = *state;
    fault_plan p;
    memset(&p, 0, sizeof p);
    p.a = (fault_arg){.f = F_LINK_RECV, .n = 3, .victim = 1, .ops = 1, .warm_count = 262144,
                      .count = 262144};
    p.o = (cluster_opts){.peer_timeout_ms = 600000, .op_timeout_ms = 20000};
    p.victim_first = 1;
    p.others_delay = 200;
    run_fault(cl, &p);
    const int n = p.a.n, v = p.a.victim;
    const char *what = "ring link recv once";
    FCHECK(fired(cl, v) == 1);
    const cluster_event *ve = first_event(&cl->sh->slot[v], TAG_FAULT, 0);
    FCHECK(ve != NULL);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const cluster_event *e = first_event(&cl->sh->slot[i], TAG_FAULT, 0);
        FCHECK(e != NULL);
        FCHECK(e->result == ECCL_ERR_PEER_LOST); /* the re-formed ring settled it, not a timeout */
        FCHECK(e->pre_hash == e->post_hash);
        FCHECK(e->elapsed_ns < (uint64_t)p.o.op_timeout_ms * CL_MS);
        double after = ((double)e->end_ns - (double)ve->end_ns) / 1e6;
        if (after > worst) worst = after;
    }
    check_all_settled(cl, n, TAG_FAULT, what);
    printf("    victim PEER_LOST after %.0f ms (op_timeout %u); others at most %.1f ms later; "
           "outcomes of tag %d:\n",
           (double)ve->elapsed_ns / 1e6, p.o.op_timeout_ms, worst, TAG_FAULT);
    print_attempts(cl, n, TAG_FAULT);
    cluster_fini(cl);
}

/* A link that breaks holding frames of a call not made here yet: two
 * ranks, rank 0 broadcasts 4 KiB (tag 200, a chain of one hop: it returns
 * once its frame is written) while rank 1 has not called it, so rank 1's
 * progress thread holds the frame as an early frame on its accepted link
 * from rank 0. Then one read on that link fails (rank 0's next broadcast,
 * tag 201, brings it): the link and the early frame are gone, and rank 0's
 * ops are done, so only rank 1 can tell the master (comm_ops_link_lost's
 * early-frames branch). The re-formed ring commits both tags from rank 0's
 * report, and rank 1's late calls take rank 0's bytes from the records, at
 * once (before that notice the first of them stalled to op_timeout and
 * only then asked the master). Heartbeats are rare so no read on the
 * master link comes first. */
enum { CTL_ROOT_SENT = 3, CTL_LATE_ARMED = 4 };
#define EARLY_COUNT 1024u
#define TAG_EARLY 200

static int early_body(eccl_comm *c, int index, void *argp)
{
    (void)index, (void)argp;
    int64_t rank = -1;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank));
    float buf[EARLY_COUNT], want[EARLY_COUNT];
    for (uint64_t tag = TAG_EARLY; tag < TAG_EARLY + 2; tag++) {
        if (rank == 0 && tag == TAG_EARLY + 1)
            CL_CHECK(cluster_wait_ctl(CTL_LATE_ARMED, 1, 30000) == 0, "rank 1 never armed");
        if (rank != 0) continue;
        cluster_fill(buf, ECCL_F32, EARLY_COUNT, 0, tag, CL_PAT_SMALL);
        CL_OK(eccl_broadcast(c, buf, buf, EARLY_COUNT, ECCL_F32, 0, tag, NULL));
        atomic_store(&cluster_shm()->ctl[CTL_ROOT_SENT], 1);
    }
    if (rank == 0) return 0;
    CL_CHECK(cluster_wait_ctl(CTL_ROOT_SENT, 1, 30000) == 0, "rank 0 never broadcast");
    cluster_sleep_ms(100); /* the progress thread takes the frame in */
    CL_CHECK(fail_once_and_wait("eccl/net/recv_accepted", CTL_LATE_ARMED) == 0, "fiu");
    cluster_sleep_ms(300); /* the view change settles */
    for (uint64_t tag = TAG_EARLY; tag < TAG_EARLY + 2; tag++) {
        cluster_fill(want, ECCL_F32, EARLY_COUNT, 0, tag, CL_PAT_SMALL);
        memset(buf, 0, sizeof buf);
        eccl_reduce_info info = {0};
        uint64_t t0 = cluster_now_ns();
        eccl_result rc = eccl_broadcast(c, NULL, buf, EARLY_COUNT, ECCL_F32, 0, tag, &info);
        cluster_record(tag, rc, info.world_size, t0, cluster_now_ns(), 0, 0);
        CL_CHECK(rc == ECCL_OK, "late broadcast tag %llu: %s", (unsigned long long)tag, eccl_strerror(rc));
        CL_CHECK(memcmp(buf, want, sizeof buf) == 0, "late broadcast tag %llu: not rank 0's bytes",
                 (unsigned long long)tag);
    }
    return 0;
}

static void test_link_broke_holding_early_frames(void **state)
{
    cluster *cl = *state;
    const int n = 2;
    const char *what = "link broke holding early frames";
    cluster_opts o = {.peer_timeout_ms = 600000, .op_timeout_ms = 20000};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, n, early_body, NULL), 0);
    if (cluster_wait_all(cl, 90000) != 0) fail_msg("a peer failed (see above)");
    int late = -1;
    for (int i = 0; i < n; i++)
        if (fired(cl, i)) late = i;
    FCHECK(late >= 0 && fired(cl, late) == 1);
    double worst = 0;
    for (uint64_t tag = TAG_EARLY; tag < TAG_EARLY + 2; tag++) {
        const cluster_event *e = first_event(&cl->sh->slot[late], tag, 0);
        FCHECK(e != NULL && e->result == ECCL_OK && e->world == 2);
        FCHECK(e->elapsed_ns < (uint64_t)o.op_timeout_ms * CL_MS / 2); /* settled, not timed out */
        if ((double)e->elapsed_ns / 1e6 > worst) worst = (double)e->elapsed_ns / 1e6;
    }
    printf("    the late rank's link broke holding tag %d's frame: both late broadcasts took rank 0's bytes "
           "in at most %.1f ms (op_timeout %u)\n", TAG_EARLY, worst, o.op_timeout_ms);
    cluster_fini(cl);
}

/* The write of a lazy completion token fails (chan.h, eccl_chan_send_lazy):
 * two ranks, an 8-byte broadcast from rank 0 (both return early; a
 * broadcast, which the device suites leave in host memory, where a call
 * can return early), then nothing more from either for a while, so rank
 * 1's done token waits in its queue until its engine goes idle, and that
 * write is the one that fails (the heartbeats are rare, the master link
 * quiet). The link breaks with rank 0's op still waiting for the token:
 * the re-formed ring settles it (both hold the result), so both calls
 * stand as returned, and the next broadcast runs on the new ring. */
enum { CTL_LAZY_SETTLED = 5 };
#define TAG_LAZY 300

static int lazy_body(eccl_comm *c, int index, void *argp)
{
    (void)index, (void)argp;
    int64_t rank = -1;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank));
    for (uint64_t tag = TAG_LAZY; tag < TAG_LAZY + 2; tag++) {
        float x[2] = {(float)(rank + 1), (float)tag}, y[2] = {0, 0};
        eccl_reduce_info info = {0};
        uint64_t t0 = cluster_now_ns();
        eccl_result rc = eccl_broadcast(c, x, y, 2, ECCL_F32, 0, tag, &info);
        cluster_record(tag, rc, info.world_size, t0, cluster_now_ns(), 0, 0);
        CL_CHECK(rc == ECCL_OK, "broadcast tag %llu: %s", (unsigned long long)tag, eccl_strerror(rc));
        CL_CHECK(y[0] == 1.0f && y[1] == (float)tag, "broadcast tag %llu: %g %g", (unsigned long long)tag,
                 (double)y[0], (double)y[1]);
        if (tag > TAG_LAZY) break;
        if (rank == 1) {
            CL_CHECK(fail_once_and_wait("eccl/net/send", -1) == 0, "fiu");
            cluster_sleep_ms(300); /* the view change settles */
            atomic_store(&cluster_shm()->ctl[CTL_LAZY_SETTLED], 1);
        } else {
            CL_CHECK(cluster_wait_ctl(CTL_LAZY_SETTLED, 1, 30000) == 0, "rank 1 never settled");
        }
    }
    return 0;
}

static void test_lazy_token_send_fails(void **state)
{
    cluster *cl = *state;
    const int n = 2;
    const char *what = "lazy token send fails";
    cluster_opts o = {.peer_timeout_ms = 600000, .op_timeout_ms = 20000};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, n, lazy_body, NULL), 0);
    if (cluster_wait_all(cl, 90000) != 0) fail_msg("a peer failed (see above)");
    FCHECK(fired(cl, 0) + fired(cl, 1) == 1); /* in rank 1, whichever slot it took */
    for (int i = 0; i < n; i++) {
        const cluster_event *e = first_event(&cl->sh->slot[i], TAG_LAZY + 1, 0);
        FCHECK(e != NULL && e->result == ECCL_OK && e->world == 2);
    }
    printf("    rank 1's lazy token write failed; both broadcasts stood, the next ran on the re-formed ring\n");
    cluster_fini(cl);
}

/* One transport fault in one peer, in the middle of a call whose slices
 * travel outside the stream: as RDMA writes (ECCL_NET=ibv), or read out of
 * the sender's memory (net_shm, the default between host-mates; ECCL_SHM=0
 * turns it off); skipped where the transport under test is the other one.
 * The link it hits breaks on both ends (the victim closes it, its peer
 * sees the queue pairs, the control socket or the stream go), the ops on it
 * stall until the master re-forms the ring or op_timeout, and every peer's
 * first attempt fails with PEER_LOST or TIMEOUT with its buffer restored
 * bit for bit; no byte lands after that (the hashes would differ). The
 * retry succeeds on the same N peers with identical bits everywhere. */
static void run_net_fault(cluster *cl, enum fault f)
{
    const char *net = getenv("ECCL_NET"), *shm = getenv("ECCL_SHM");
    int ibv = net && strcmp(net, "ibv") == 0, no_shm = ibv || (shm && strcmp(shm, "0") == 0);
    if (!shm_fault(f) && !ibv) {
        printf("    skipped: RDMA faults run with ECCL_NET=ibv (ctest: test_failpoints_mp_ibv)\n");
        skip();
    }
    if (shm_fault(f) && no_shm) {
        printf("    skipped: shared-memory faults run with net_shm (ECCL_NET tcp or auto, ECCL_SHM not 0)\n");
        skip();
    }
    fault_plan p;
    memset(&p, 0, sizeof p);
    p.a = (fault_arg){.f = f, .n = 3, .victim = 1, .ops = 1, .warm_count = 1u << 20,
                      .count = 1u << 20};
    p.o = (cluster_opts){.peer_timeout_ms = 600000, .op_timeout_ms = 2500};
    p.victim_first = 0;
    p.others_delay = 100;
    /* Host payloads go through the inboxes by default: these read them out
     * of the sender's memory (children inherit it). */
    if (shm_fault(f)) setenv("ECCL_SHM_HOST_BULK_BYTES", "262144", 1);
    run_fault(cl, &p);
    unsetenv("ECCL_SHM_HOST_BULK_BYTES");
    const int n = p.a.n, v = p.a.victim;
    const char *what = fault_fp(f);
    printf("    %s fired %lld times; outcomes of tag %d (op_timeout %u ms):\n", what, fired(cl, v),
           TAG_FAULT, p.o.op_timeout_ms);
    print_attempts(cl, n, TAG_FAULT);
    FCHECK(fired(cl, v) == 1);
    for (int i = 0; i < n; i++) {
        const cluster_event *e = first_event(&cl->sh->slot[i], TAG_FAULT, 0);
        FCHECK(e != NULL);
        FCHECK(e->result == ECCL_ERR_PEER_LOST || e->result == ECCL_ERR_TIMEOUT);
        FCHECK(e->pre_hash == e->post_hash);
    }
    check_all_settled(cl, n, TAG_FAULT, what);
    cluster_fini(cl);
}

static void test_ibv_completion_error(void **state) { run_net_fault(*state, F_IBV_COMPLETION); }
static void test_ibv_qp_error(void **state) { run_net_fault(*state, F_IBV_QP_ERROR); }
static void test_ibv_port_down(void **state) { run_net_fault(*state, F_IBV_PORT_DOWN); }
static void test_ibv_reg_fails(void **state) { run_net_fault(*state, F_IBV_REG); }
static void test_ibv_post_fails(void **state) { run_net_fault(*state, F_IBV_POST); }
static void test_shm_read_fails(void **state) { run_net_fault(*state, F_SHM_READ); }
static void test_shm_ctl_fails(void **state) { run_net_fault(*state, F_SHM_CTL); }

/* The backup allocation of one peer's call fails (its first call of a new,
 * larger size): NO_MEMORY at once, buffer untouched. It tells the master,
 * which re-forms the ring, so the others' same call (they entered it first)
 * fails with PEER_LOST, restored, well before op_timeout; then everyone
 * retries the tag and succeeds with world N. */
static void test_alloc_fails(void **state)
{
    cluster *cl = *state;
    fault_plan p;
    memset(&p, 0, sizeof p);
    p.a = (fault_arg){.f = F_ALLOC, .n = 3, .victim = 1, .ops = 1, .warm_count = 4096,
                      .count = 1u << 20};
    p.o = (cluster_opts){.op_timeout_ms = 3000};
    p.victim_first = 0;
    p.others_delay = 100;
    run_fault(cl, &p);
    const int n = p.a.n, v = p.a.victim;
    const char *what = "dev alloc once";
    printf("    outcomes of tag %d (op_timeout %u ms):\n", TAG_FAULT, p.o.op_timeout_ms);
    print_attempts(cl, n, TAG_FAULT);
    FCHECK(fired(cl, v) == 1);
    const cluster_event *ve = first_event(&cl->sh->slot[v], TAG_FAULT, 0);
    FCHECK(ve != NULL);
    FCHECK(ve->result == ECCL_ERR_NO_MEMORY);
    FCHECK(ve->pre_hash == ve->post_hash);
    /* At once, not at the op timeout: a bound in behaviour, not a speed
     * target (200 ms failed under load, 314 ms on a busy 2-core box). */
    FCHECK(ve->elapsed_ns < (uint64_t)p.o.op_timeout_ms * CL_MS / 2);
    for (int i = 0; i < n; i++) {
        if (i == v) continue;
        const cluster_event *e = first_event(&cl->sh->slot[i], TAG_FAULT, 0);
        FCHECK(e != NULL);
        FCHECK(e->pre_hash == e->post_hash);
        FCHECK(e->result == ECCL_ERR_PEER_LOST);
        FCHECK(e->elapsed_ns < (uint64_t)p.o.op_timeout_ms / 2 * CL_MS);
    }
    check_all_settled(cl, n, TAG_FAULT, what);
    cluster_fini(cl);
}

/* ---- faults while a newcomer joins ---------------------------------------------------------- */

#define AFTER_OPS 3

typedef struct join_arg {
    int n0, n1;
    int victim;        /* an existing peer that arms `fp` when told, or -1 */
    const char *fp;
} join_arg;

typedef struct job_state {
    const join_arg *a;
    int armed;
} job_state;

/* The victim arms its failpoint between two calls once the parent says so. */
static int arm_when_told(int index, void *argp)
{
    job_state *st = argp;
    if (index != st->a->victim || st->armed || !atomic_load(&cluster_shm()->ctl[CTL_ARM])) return 0;
    CL_CHECK(fp_arm(st->a->fp, 1) == 0, "fiu");
    st->armed = 1;
    return 0;
}

/* A member of the running job: small all-reduces and the agreed admission
 * check between them, until the newcomer is in. */
static int job_body(eccl_comm *c, int index, void *argp)
{
    const join_arg *a = argp;
    job_state st = {a, 0};
    cluster_join_seen seen;
    int failed = cluster_job_until_join(c, index, a->n0, a->n1, 30000, arm_when_told, &st, &seen);
    if (st.armed) fp_disarm(a->fp);
    return failed ? 1 : cluster_after_join(c, index, a->n1, AFTER_OPS, 0);
}

static int newcomer_body(eccl_comm *c, int index, void *argp)
{
    const join_arg *a = argp;
    return cluster_after_join(c, index, a->n1, AFTER_OPS, 0);
}

/* A newcomer made by hand, to fail its very first connect to the master:
 * create, arm eccl/net/connect once, connect (retried 50 ms later; returns
 * once voted in), then the job's calls. */
static int newcomer_proc(cluster *cl, int index, void *argp)
{
    const join_arg *a = argp;
    cluster_slot *self = cluster_self();
    eccl_comm_params p;
    eccl_comm_params_init(&p);
    p.master_addr = cl->sh->master_addr;
    p.peer_timeout_ms = cl->opts.peer_timeout_ms;
    p.op_timeout_ms = cl->opts.op_timeout_ms;
    p.connect_timeout_ms = cl->opts.connect_timeout_ms;
    eccl_comm *c = NULL;
    CL_OK(eccl_comm_create(&p, &c));
    CL_CHECK(fp_arm("eccl/net/connect", 1) == 0, "fiu");
    uint64_t t0 = cluster_now_ns();
    eccl_result rc = eccl_comm_connect(c);
    uint64_t t1 = cluster_now_ns();
    cluster_record(0, rc, 0, t0, t1, 0, 0);
    fp_disarm("eccl/net/connect");
    CL_CHECK(rc == ECCL_OK, "eccl_comm_connect after a failed first connect: %s", eccl_strerror(rc));
    CL_CHECK(atomic_load(&self->val[V_FIRED]) == 1, "the connect failpoint fired %lld times",
             (long long)atomic_load(&self->val[V_FIRED]));
    CL_CHECK(t1 - t0 < (uint64_t)p.connect_timeout_ms * CL_MS, "connect took %.1f ms",
             (double)(t1 - t0) / 1e6);
    self->admit_ns = t1 - t0;
    if (cluster_after_join(c, index, a->n1, AFTER_OPS, 0)) return 1;
    /* Leave only once the others are past their last call too. */
    uint64_t deadline = cluster_now_ns() + 30 * CL_SEC;
    for (;;) {
        int busy = 0;
        for (int i = 0; i < a->n0; i++) busy += atomic_load(&cl->sh->slot[i].phase) <= CL_PHASE_RUNNING;
        if (!busy || cluster_now_ns() > deadline) break;
        cluster_sleep_ms(1);
    }
    eccl_comm_destroy(c);
    return 0;
}

enum join_how { J_SPAWN, J_FORK };

static void run_join(cluster *cl, join_arg *a, enum join_how how, const char *what)
{
    const int n = a->n1;
    assert_int_equal(cluster_init(cl, NULL), 0);
    for (int i = 0; i < a->n0; i++) assert_int_equal(cluster_spawn(cl, i, (uint32_t)a->n0, job_body, a), 0);
    progress_arg p = {a->n0, 3, -1, 0};
    assert_int_equal(cluster_wait_for(cl, progressed, &p, 30000), 0);
    if (a->victim >= 0) {
        atomic_store(&cl->sh->ctl[CTL_ARM], 1);
        int iv[2] = {a->victim, V_ARMED};
        assert_int_equal(cluster_wait_for(cl, val_set, iv, 10000), 0);
    }
    uint64_t t0 = cluster_now_ns();
    if (how == J_SPAWN) assert_int_equal(cluster_spawn(cl, a->n0, (uint32_t)n, newcomer_body, a), 0);
    else assert_int_equal(cluster_fork(cl, a->n0, newcomer_proc, a), 0);
    if (cluster_wait_all(cl, 60000) != 0) {
        fprintf(stderr, "%s: a peer failed (see above)\n", what);
        fail();
    }
    double total = (double)(cluster_now_ns() - t0) / 1e6;
    int fp_peer = a->victim >= 0 ? a->victim : a->n0;
    FCHECK(fired(cl, fp_peer) == 1);
    for (int i = 0; i < n; i++) {
        FCHECK(cl->sh->slot[i].n_hash == AFTER_OPS);
        for (int k = 0; k < AFTER_OPS; k++) FCHECK(cl->sh->slot[i].hash[k] == cl->sh->slot[0].hash[k]);
    }
    printf("    %s: failpoint fired once in peer %d; newcomer admitted after %.1f ms; "
           "all done %.1f ms after it started\n",
           what, fp_peer, (double)cl->sh->slot[a->n0].admit_ns / 1e6, total);
    cluster_fini(cl);
}

/* An existing peer's connect to its new ring neighbour fails once when the
 * newcomer is wired in: retried 50 ms later; the join completes and the
 * three peers all-reduce correctly. */
static void test_join_ring_connect_fails_once(void **state)
{
    join_arg a = {.n0 = 2, .n1 = 3, .victim = 0, .fp = "eccl/net/connect"};
    run_join(*state, &a, J_SPAWN, "ring connect once");
}

/* An existing peer's accept of its new neighbour's connection fails once:
 * the connection waits in the backlog and is accepted at the next readiness
 * report; the join completes. */
static void test_join_accept_fails_once(void **state)
{
    join_arg a = {.n0 = 2, .n1 = 3, .victim = 0, .fp = "eccl/net/accept"};
    run_join(*state, &a, J_SPAWN, "accept once");
}

/* A newcomer's first connect to the master fails: retried, it registers,
 * is voted in and all-reduces with the others, within connect_timeout. */
static void test_join_master_connect_fails_once(void **state)
{
    join_arg a = {.n0 = 2, .n1 = 3, .victim = -1, .fp = "eccl/net/connect"};
    run_join(*state, &a, J_FORK, "master connect once");
}

/* ---- a fresh peer that cannot start ----------------------------------------------------------- */

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

enum { V_LISTEN_FIRED = 0, V_CONNECT_FIRED = 1, V_CONNECT_NS = 2 };

/* Without the failpoints a fresh peer starts alone; with eccl/net/listen it
 * cannot (SYSTEM), and with every master connect failing it gives up at
 * connect_timeout (CONNECT). Each communicator is destroyed cleanly: no file
 * descriptor and no thread outlives it. */
static int fresh_proc(cluster *cl, int index, void *argp)
{
    (void)index, (void)argp;
    cluster_slot *self = cluster_self();
    CL_CHECK(fp_init() == 0, "fiu_init");
    eccl_comm_params p;
    eccl_comm_params_init(&p);
    p.master_addr = cl->sh->master_addr;
    p.connect_timeout_ms = 500;
    p.op_timeout_ms = 5000;
    int fds0 = count_dir("/proc/self/fd"), thr0 = count_dir("/proc/self/task");
    CL_CHECK(fds0 > 0 && thr0 == 1, "fds %d, threads %d at the start", fds0, thr0);

    /* listen fails */
    eccl_comm *c = NULL;
    CL_OK(eccl_comm_create(&p, &c));
    CL_CHECK(fp_arm("eccl/net/listen", 0) == 0, "fiu");
    eccl_result rc = eccl_comm_connect(c);
    fp_disarm("eccl/net/listen");
    atomic_store(&self->val[V_LISTEN_FIRED], atomic_exchange(&self->val[V_FIRED], 0));
    CL_CHECK(rc == ECCL_ERR_SYSTEM, "connect with a failing listen: %s, want %s", eccl_strerror(rc),
             eccl_strerror(ECCL_ERR_SYSTEM));
    CL_CHECK(atomic_load(&self->val[V_LISTEN_FIRED]) >= 1, "the listen failpoint never fired");
    uint32_t pending = 0;
    CL_EXPECT_RC(eccl_comm_peers_pending(c, &pending), ECCL_ERR_NOT_CONNECTED);
    eccl_comm_destroy(c);
    int fds1 = count_dir("/proc/self/fd"), thr1 = count_dir("/proc/self/task");
    CL_CHECK(fds1 == fds0 && thr1 == thr0, "after destroy (listen): fds %d -> %d, threads %d -> %d",
             fds0, fds1, thr0, thr1);

    /* every master connect fails: gives up at connect_timeout */
    c = NULL;
    CL_OK(eccl_comm_create(&p, &c));
    CL_CHECK(fp_arm("eccl/net/connect", 0) == 0, "fiu");
    uint64_t t0 = cluster_now_ns();
    rc = eccl_comm_connect(c);
    uint64_t dt = cluster_now_ns() - t0;
    fp_disarm("eccl/net/connect");
    atomic_store(&self->val[V_CONNECT_FIRED], atomic_exchange(&self->val[V_FIRED], 0));
    atomic_store(&self->val[V_CONNECT_NS], (long long)dt);
    CL_CHECK(rc == ECCL_ERR_CONNECT, "connect with a failing connect: %s after %.1f ms, want %s",
             eccl_strerror(rc), (double)dt / 1e6, eccl_strerror(ECCL_ERR_CONNECT));
    CL_CHECK(dt >= (uint64_t)(p.connect_timeout_ms - 10) * CL_MS &&
                 dt < (uint64_t)(p.connect_timeout_ms + 1000) * CL_MS,
             "gave up after %.1f ms, connect_timeout %u ms", (double)dt / 1e6, p.connect_timeout_ms);
    CL_CHECK(atomic_load(&self->val[V_CONNECT_FIRED]) >= 2, "connect tried %lld times: no retry",
             (long long)atomic_load(&self->val[V_CONNECT_FIRED]));
    eccl_comm_destroy(c);
    fds1 = count_dir("/proc/self/fd");
    thr1 = count_dir("/proc/self/task");
    CL_CHECK(fds1 == fds0 && thr1 == thr0, "after destroy (connect): fds %d -> %d, threads %d -> %d",
             fds0, fds1, thr0, thr1);

    /* and with nothing armed the same peer starts alone */
    c = NULL;
    CL_OK(eccl_comm_create(&p, &c));
    CL_OK(eccl_comm_connect(c));
    int64_t w = 0;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &w));
    CL_CHECK(w == 1, "world %lld alone", (long long)w);
    eccl_comm_destroy(c);
    fds1 = count_dir("/proc/self/fd");
    thr1 = count_dir("/proc/self/task");
    CL_CHECK(fds1 == fds0 && thr1 == thr0, "after destroy (ok): fds %d -> %d, threads %d -> %d", fds0,
             fds1, thr0, thr1);
    return 0;
}

static void test_fresh_peer_listen_and_connect_fail(void **state)
{
    cluster *cl = *state;
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_fork(cl, 0, fresh_proc, NULL), 0);
    assert_int_equal(cluster_wait(cl, 0, 30000), 0);
    const cluster_slot *s = &cl->sh->slot[0];
    printf("    listen failpoint fired %lld times -> SYSTEM; connect failpoint fired %lld times "
           "-> CONNECT after %.1f ms (connect_timeout 500 ms); no fd or thread leaked\n",
           (long long)atomic_load(&s->val[V_LISTEN_FIRED]), (long long)atomic_load(&s->val[V_CONNECT_FIRED]),
           (double)atomic_load(&s->val[V_CONNECT_NS]) / 1e6);
    cluster_fini(cl);
}

/* ---- found on the way: the master's first heartbeat -------------------------------------------- */

/* Not a failpoint test: the recv test above showed the master's first
 * heartbeat to a peer coming ~1.25 s after it connected whatever the peer's
 * peer_timeout_ms (the master schedules it with its 5 s default before the
 * REGISTER names the peer's timeout). A peer with peer_timeout_ms below that
 * then declares an idle, healthy master lost. Two idle peers with 800 ms must
 * keep their master for 1.5 s (heartbeats every 200 ms). */
static int idle_short_timeout_body(eccl_comm *c, int index, void *argp)
{
    (void)argp;
    int idx[2] = {0, 1};
    float send[64], buf[64];
    cluster_fill(send, ECCL_F32, 64, index, 1, CL_PAT_SMALL);
    CL_OK(eccl_allreduce(c, send, buf, 64, ECCL_F32, ECCL_SUM, 1, NULL));
    if (cluster_check_values(buf, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, 64, idx, 2, 1, "before idling")) return 1;
    cluster_sleep_ms(1500);
    uint32_t pending = 0;
    eccl_result rc = eccl_comm_peers_pending(c, &pending);
    CL_CHECK(rc == ECCL_OK, "after 1.5 s idle with peer_timeout_ms 800: peers_pending -> %s",
             eccl_strerror(rc));
    cluster_fill(send, ECCL_F32, 64, index, 2, CL_PAT_SMALL);
    CL_OK(eccl_allreduce(c, send, buf, 64, ECCL_F32, ECCL_SUM, 2, NULL));
    return cluster_check_values(buf, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, 64, idx, 2, 2, "after idling");
}

static void test_short_peer_timeout_idle(void **state)
{
    cluster *cl = *state;
    cluster_opts o = {.peer_timeout_ms = 800};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, 2, idle_short_timeout_body, NULL), 0);
    assert_int_equal(cluster_wait_all(cl, 20000), 0);
    cluster_fini(cl);
}

/* The lazy tree link: the first small all-reduce of rank 2 (a leaf of the
 * 3-rank tree) opens its link to the parent, and that connect fails once.
 * The parent link is retried with back-off, so every peer still gets the
 * right result for every call, and no call fails. */
static int tree_connect_body(eccl_comm *c, int index, void *argp)
{
    (void)argp;
    int idx[3] = {0, 1, 2};
    float send[64], buf[64];
    int64_t rank = -1;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank));
    if (rank == 2) CL_CHECK(fp_arm("eccl/net/connect", 1) == 0, "cannot arm the failpoint");
    for (uint64_t tag = 1; tag <= 3; tag++) {
        eccl_reduce_info info;
        cluster_fill(send, ECCL_F32, 64, index, tag, CL_PAT_SMALL);
        uint64_t t0 = cluster_now_ns();
        eccl_result rc = eccl_allreduce(c, send, buf, 64, ECCL_F32, ECCL_SUM, tag, &info);
        cluster_record(tag, rc, 3, t0, cluster_now_ns(), 0, 0);
        CL_CHECK(rc == ECCL_OK, "tag %llu: %s", (unsigned long long)tag, eccl_strerror(rc));
        CL_CHECK(info.algorithm == ECCL_ALGO_TREE, "64 floats at N=3 ran algorithm %u", info.algorithm);
        if (cluster_check_values(buf, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, 64, idx, 3, tag, "tree")) return 1;
    }
    if (rank == 2) fp_disarm("eccl/net/connect");
    return 0;
}

static void test_tree_parent_connect_fails_once(void **state)
{
    cluster *cl = *state;
    /* The tree itself: at three ranks small calls take the recursive
     * all-reduce unless forced (coll/dispatch.c). */
    cluster_opts o = {.algo_env = "allreduce=tree"};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, 3, tree_connect_body, NULL), 0);
    assert_int_equal(cluster_wait_all(cl, 30000), 0);
    long long total = 0;
    double first_ms = 0;
    for (int i = 0; i < 3; i++) {
        total += fired(cl, i);
        const cluster_event *e = first_event(&cl->sh->slot[i], 1, 0);
        assert_non_null(e);
        if ((double)e->elapsed_ns / 1e6 > first_ms) first_ms = (double)e->elapsed_ns / 1e6;
    }
    assert_int_equal(total, 1); /* it fired, once, and the calls still succeeded */
    printf("    tree parent connect failed once; the first call took at most %.1f ms (retry "
           "back-off 50 ms), all 3 calls correct on all 3 peers\n", first_ms);
    cluster_fini(cl);
}

/* The lazy peer links (core/comm/peers.c): rank 0 of the recursive
 * all-reduce at N = 3 connects to rank 1 (its doubling partner) and rank 2
 * (its extra; and both barrier rounds), and its first connect fails. The
 * peer link is retried after its back-off, so every call still succeeds,
 * exact, on every peer. */
static int peer_connect_body(eccl_comm *c, int index, void *argp)
{
    (void)argp;
    int idx[3] = {0, 1, 2};
    float send[64], buf[64];
    int64_t rank = -1;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank));
    if (rank == 0) CL_CHECK(fp_arm("eccl/net/connect", 1) == 0, "cannot arm the failpoint");
    for (uint64_t tag = 1; tag <= 3; tag++) {
        eccl_reduce_info info;
        cluster_fill(send, ECCL_F32, 64, index, tag, CL_PAT_SMALL);
        uint64_t t0 = cluster_now_ns();
        eccl_result rc = eccl_allreduce(c, send, buf, 64, ECCL_F32, ECCL_SUM, tag, &info);
        cluster_record(tag, rc, 3, t0, cluster_now_ns(), 0, 0);
        CL_CHECK(rc == ECCL_OK, "tag %llu: %s", (unsigned long long)tag, eccl_strerror(rc));
        CL_CHECK(info.algorithm == ECCL_ALGO_RECURSIVE, "64 floats at N=3 ran algorithm %u", info.algorithm);
        if (cluster_check_values(buf, ECCL_F32, ECCL_SUM, CL_PAT_SMALL, 64, idx, 3, tag, "recursive")) return 1;
    }
    if (rank == 0) fp_disarm("eccl/net/connect");
    return 0;
}

static void test_peer_link_connect_fails_once(void **state)
{
    cluster *cl = *state;
    cluster_opts o = {.algo_env = "allreduce=recursive"};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, 3, peer_connect_body, NULL), 0);
    assert_int_equal(cluster_wait_all(cl, 30000), 0);
    long long total = 0;
    double first_ms = 0;
    for (int i = 0; i < 3; i++) {
        total += fired(cl, i);
        const cluster_event *e = first_event(&cl->sh->slot[i], 1, 0);
        assert_non_null(e);
        if ((double)e->elapsed_ns / 1e6 > first_ms) first_ms = (double)e->elapsed_ns / 1e6;
    }
    assert_int_equal(total, 1); /* it fired, once, and the calls still succeeded */
    printf("    peer link connect failed once; the first call took at most %.1f ms (retry back-off 50 ms), "
           "all 3 calls correct on all 3 peers\n", first_ms);
    cluster_fini(cl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fresh_peer_listen_and_connect_fail, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_join_ring_connect_fails_once, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_tree_parent_connect_fails_once, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_peer_link_connect_fails_once, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_join_accept_fails_once, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_join_master_connect_fails_once, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_master_link_recv_fails, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_master_link_send_fails, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_leave_master_send_fails, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_link_broke_holding_early_frames, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_lazy_token_send_fails, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_ring_link_recv_once, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_alloc_fails, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_ibv_completion_error, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_ibv_qp_error, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_ibv_port_down, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_ibv_reg_fails, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_ibv_post_fails, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_shm_read_fails, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_shm_ctl_fails, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_short_peer_timeout_idle, cluster_test_setup, cluster_test_teardown),
    };
    const char *filter = getenv("ECCL_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("failpoints_mp", tests, NULL, NULL);
}
