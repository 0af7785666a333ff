/* Quantised all-reduce and eccl_allreduce_multiple_with_retry across
 * processes on loopback (tests/cluster.h): bit parity across peers, error
 * within the documented bound, tx bytes, a peer lost mid quantised call, and
 * a batch that loses a peer half-way. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include "cluster.h"

/* Largest |error| of a quantised all-reduce of n contributions with
 * |x| < amax, following the header's model: each reduce-scatter hop and
 * the owner quantise a partial of at most h contributions (range <= 2 h
 * amax) with error <= range / 255 * (1/2 + 2^-6); f16/bf16 also round each
 * partial to the dtype. */
static double quant_bound(int n, double amax, eccl_dtype t, eccl_op op)
{
    double b = 0, eps = t == ECCL_F32 ? 0x1p-23 : t == ECCL_F16 ? 0x1p-10 : 0x1p-7;
    for (int h = 1; h <= n; h++) b += 2.0 * h * amax / 255.0 * (0.5 + 0x1p-6) + h * amax * eps * 2;
    return op == ECCL_AVG ? b / n : b;
}

/* Checks out against the exact reduction (in double) of the CL_PAT_RANDOM
 * contributions of peers idx[0..m); *max_err gets the largest error. */
static int check_quant(const void *out, eccl_dtype t, eccl_op op, size_t count, const int *idx, int m,
                       uint64_t seed, double *max_err, const char *what)
{
    size_t es = eccl_dtype_size(t);
    uint8_t *tmp = malloc(count * es);
    double *exact = calloc(count, sizeof *exact);
    CL_CHECK(tmp && exact, "oom");
    for (int i = 0; i < m; i++) {
        cluster_fill(tmp, t, count, idx[i], seed, CL_PAT_RANDOM);
        for (size_t e = 0; e < count; e++) exact[e] += cluster_load(tmp, t, e);
    }
    double bound = quant_bound(m, 4.0, t, op), worst = 0;
    size_t at = 0;
    for (size_t e = 0; e < count; e++) {
        double want = op == ECCL_AVG ? exact[e] / m : exact[e];
        double err = fabs(cluster_load(out, t, e) - want);
        if (!(err <= worst)) {
            worst = err;
            at = e;
        }
    }
    free(tmp);
    free(exact);
    if (max_err) *max_err = worst;
    CL_CHECK(worst <= bound, "%s: error %.4g at [%zu] over the bound %.4g (%s %s, %d peers)", what, worst, at,
             bound, eccl_dtype_name(t), eccl_op_name(op), m);
    return 0;
}

/* ---- parity and accuracy ------------------------------------------------------- */

typedef struct parity_arg {
    int n;
} parity_arg;

static int parity_body(eccl_comm *c, int index, void *argp)
{
    const parity_arg *a = argp;
    static const struct {
        eccl_dtype t;
        eccl_op op;
        eccl_quant_type q;
        size_t count;
        int in_place;
    } cases[] = {
        {ECCL_F32, ECCL_SUM, ECCL_QUANT_MINMAX_U8, 1000, 0},
        {ECCL_F32, ECCL_AVG, ECCL_QUANT_AFFINE_U8, 1000, 1},
        {ECCL_F32, ECCL_SUM, ECCL_QUANT_MINMAX_U8, 3000001, 1}, /* two rings, several slices */
        {ECCL_F32, ECCL_AVG, ECCL_QUANT_AFFINE_U8, 3000001, 0},
        {ECCL_BF16, ECCL_SUM, ECCL_QUANT_MINMAX_U8, 400003, 0},
        {ECCL_F16, ECCL_AVG, ECCL_QUANT_AFFINE_U8, 400003, 1},
        {ECCL_F32, ECCL_SUM, ECCL_QUANT_MINMAX_U8, 3, 1},       /* fewer values than peers */
    };
    int idx[CLUSTER_MAX_PEERS];
    for (int i = 0; i < a->n; i++) idx[i] = i;
    size_t cap = 3000001 * 4 + 64;
    uint8_t *send = malloc(cap), *recv = malloc(cap);
    CL_CHECK(send && recv, "oom");
    eccl_allreduce_opts o;
    eccl_allreduce_opts_init(&o);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint64_t tag = 100 + k;
        size_t bytes = cases[k].count * eccl_dtype_size(cases[k].t);
        cluster_fill(send, cases[k].t, cases[k].count, index, tag, CL_PAT_RANDOM);
        uint8_t *out = cases[k].in_place ? send : recv;
        o.quant = cases[k].q;
        eccl_reduce_info info;
        uint64_t t0 = cluster_now_ns();
        CL_OK(eccl_allreduce_ex(c, send, out, cases[k].count, cases[k].t, cases[k].op, tag, &o, &info));
        uint64_t dt = cluster_now_ns() - t0;
        CL_CHECK(info.world_size == (uint32_t)a->n && info.algorithm == ECCL_ALGO_RING, "world %u algo %u",
                 info.world_size, info.algorithm);
        double err = 0;
        if (check_quant(out, cases[k].t, cases[k].op, cases[k].count, idx, a->n, tag, &err, "quantised"))
            return 1;
        cluster_push_hash(cluster_fnv1a(out, bytes));
        if (cases[k].count >= 1000000 && cases[k].t == ECCL_F32) {
            /* The same call unquantised: bytes on the wire and time. */
            cluster_fill(send, cases[k].t, cases[k].count, index, tag, CL_PAT_RANDOM);
            eccl_reduce_info plain;
            uint64_t t1 = cluster_now_ns();
            CL_OK(eccl_allreduce(c, send, out, cases[k].count, cases[k].t, cases[k].op, tag + 1000, &plain));
            uint64_t dt1 = cluster_now_ns() - t1;
            double ratio = (double)info.tx_bytes / (double)plain.tx_bytes;
            if (index == 0)
                printf("    N=%d %zu x f32 %s %s: tx %llu B vs %llu B plain (%.4f), max error %.4g; "
                       "%.1f ms vs %.1f ms plain\n",
                       a->n, cases[k].count, eccl_op_name(cases[k].op),
                       cases[k].q == ECCL_QUANT_MINMAX_U8 ? "minmax" : "affine",
                       (unsigned long long)info.tx_bytes, (unsigned long long)plain.tx_bytes, ratio, err,
                       (double)dt / 1e6, (double)dt1 / 1e6);
            fflush(stdout);
            CL_CHECK(ratio > 0.25 && ratio < 0.2505, "tx ratio %.4f", ratio);
            CL_CHECK(info.rx_bytes * 4 < plain.rx_bytes + plain.rx_bytes / 100, "rx %llu vs %llu",
                     (unsigned long long)info.rx_bytes, (unsigned long long)plain.rx_bytes);
        }
    }
    /* Arguments the quantised path refuses before anything is sent. */
    o.quant = ECCL_QUANT_MINMAX_U8;
    CL_EXPECT_RC(eccl_allreduce_ex(c, send, recv, 10, ECCL_I32, ECCL_SUM, 1, &o, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allreduce_ex(c, send, recv, 10, ECCL_F32, ECCL_MAX, 1, &o, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allreduce_ex(c, send, recv, 10, ECCL_F32, ECCL_PROD, 1, &o, NULL), ECCL_ERR_INVALID_ARG);
    CL_EXPECT_RC(eccl_allreduce_ex(c, send, recv, 10, ECCL_F64, ECCL_SUM, 1, &o, NULL), ECCL_ERR_UNSUPPORTED);
    o.quant = (eccl_quant_type)7;
    CL_EXPECT_RC(eccl_allreduce_ex(c, send, recv, 10, ECCL_F32, ECCL_SUM, 1, &o, NULL), ECCL_ERR_INVALID_ARG);
    o.quant = ECCL_QUANT_MINMAX_U8;
    o.size = 0;
    CL_EXPECT_RC(eccl_allreduce_ex(c, send, recv, 10, ECCL_F32, ECCL_SUM, 1, &o, NULL), ECCL_ERR_INVALID_ARG);
    /* NULL options: the plain path, exact. */
    cluster_fill(send, ECCL_I32, 1000, index, 7, CL_PAT_SMALL);
    CL_OK(eccl_allreduce_ex(c, send, recv, 1000, ECCL_I32, ECCL_SUM, 7, NULL, NULL));
    CL_CHECK(cluster_check_values(recv, ECCL_I32, ECCL_SUM, CL_PAT_SMALL, 1000, idx, a->n, 7, "opts NULL") == 0,
             "values");
    free(send);
    free(recv);
    return 0;
}

static void run_parity(cluster *cl, int n)
{
    parity_arg a = {n};
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, n, parity_body, &a), 0);
    assert_int_equal(cluster_wait_all(cl, 120000), 0);
    int nh = cl->sh->slot[0].n_hash;
    assert_true(nh == 7);
    for (int p = 1; p < n; p++) {
        assert_int_equal(cl->sh->slot[p].n_hash, nh);
        for (int k = 0; k < nh; k++) {
            if (cl->sh->slot[p].hash[k] != cl->sh->slot[0].hash[k])
                fail_msg("parity: result %d of peer %d differs from peer 0's", k, p);
        }
    }
    cluster_fini(cl);
}

static void test_quant_parity_n2(void **state) { run_parity(*state, 2); }
static void test_quant_parity_n3(void **state) { run_parity(*state, 3); }
static void test_quant_parity_n5(void **state) { run_parity(*state, 5); }

/* ---- a peer lost mid quantised call ------------------------------------------------- */

#define KILL_TAG0 500
#define KILL_WARM 2
#define CTL_GATE 0   /* victim index + 1: it never joins tag KILL_TAG0 + KILL_WARM */
#define CTL_KILLED 1 /* victim index + 1 once killed */
#define V_AT_GATE 0

typedef struct kill_arg {
    int n;
    size_t count;
} kill_arg;

static int kill_body(eccl_comm *c, int index, void *argp)
{
    const kill_arg *a = argp;
    size_t count = a->count, bytes = count * 4;
    uint8_t *buf = malloc(bytes);
    CL_CHECK(buf, "oom");
    cluster_slot *self = cluster_self();
    eccl_allreduce_opts o;
    eccl_allreduce_opts_init(&o);
    o.quant = ECCL_QUANT_MINMAX_U8;
    int after = 0, attempts = 0, refill = 1;
    uint64_t k = 0;
    while (k < 20) {
        uint64_t tag = KILL_TAG0 + k;
        if (k == KILL_WARM && atomic_load(&cluster_shm()->ctl[CTL_GATE]) == index + 1) {
            atomic_store(&self->val[V_AT_GATE], 1);
            for (;;) cluster_sleep_ms(1000);
        }
        if (refill) cluster_fill(buf, ECCL_F32, count, index, tag, CL_PAT_RANDOM);
        uint64_t pre = cluster_fnv1a(buf, bytes);
        eccl_reduce_info info;
        memset(&info, 0, sizeof info);
        uint64_t t0 = cluster_now_ns();
        /* `started` only once the op is submitted: the gated kill must find
         * it in flight (setting up a call can take a while, e.g. staging
         * device buffers, and an op submitted after the loss is simply run
         * on the survivors). */
        eccl_request *req = NULL;
        eccl_result rc = eccl_allreduce_ex_async(c, buf, buf, count, ECCL_F32, ECCL_SUM, tag, &o, &req);
        atomic_store(&self->started, (long long)k + 1);
        if (rc == ECCL_OK) rc = eccl_wait(req, &info);
        uint64_t t1 = cluster_now_ns();
        uint64_t post = cluster_fnv1a(buf, bytes);
        cluster_record(tag, rc, info.world_size, t0, t1, pre, post);
        int killed = (int)atomic_load(&cluster_shm()->ctl[CTL_KILLED]) - 1;
        if (rc == ECCL_OK) {
            int idx[CLUSTER_MAX_PEERS], m = 0;
            for (int i = 0; i < a->n; i++)
                if (info.world_size == (uint32_t)a->n || i != killed) idx[m++] = i;
            CL_CHECK(m == (int)info.world_size, "world %u, killed %d", info.world_size, killed);
            if (check_quant(buf, ECCL_F32, ECCL_SUM, count, idx, m, tag, NULL, "kill loop")) return 1;
            atomic_store(&self->finished, (long long)k + 1);
            if (info.world_size == (uint32_t)a->n - 1 && ++after >= 2) break;
            k++;
            refill = 1;
            attempts = 0;
        } else if (rc == ECCL_ERR_PEER_LOST) {
            CL_CHECK(post == pre, "tag %llu failed but the buffer changed", (unsigned long long)tag);
            CL_CHECK(++attempts <= 3, "tag %llu failed %d times", (unsigned long long)tag, attempts);
            refill = 0; /* in place: the restored buffer is our contribution again */
        } else {
            CL_CHECK(0, "tag %llu: unexpected %s", (unsigned long long)tag, eccl_strerror(rc));
        }
    }
    CL_CHECK(k < 20, "never settled on the survivors");
    free(buf);
    return 0;
}

static int kill_ready(cluster *cl, void *argp)
{
    const kill_arg *a = argp;
    int gate = (int)atomic_load(&cl->sh->ctl[CTL_GATE]) - 1;
    for (int i = 0; i < a->n; i++) {
        if (i == gate) {
            if (!atomic_load(&cl->sh->slot[i].val[V_AT_GATE])) return 0;
        } else if (atomic_load(&cl->sh->slot[i].finished) < KILL_WARM ||
                   atomic_load(&cl->sh->slot[i].started) < KILL_WARM + 1) {
            return 0;
        }
    }
    return 1;
}

static void run_kill(cluster *cl, int n, int gate, int victim)
{
    kill_arg a = {n, 4u << 20};
    assert_int_equal(cluster_init(cl, NULL), 0);
    if (gate) atomic_store(&cl->sh->ctl[CTL_GATE], victim + 1);
    assert_int_equal(cluster_spawn_n(cl, n, kill_body, &a), 0);
    assert_int_equal(cluster_wait_for(cl, kill_ready, &a, 60000), 0);
    unsigned delay = 20;
    if (!gate) {
        /* A third into the call, from the fastest warm-up call. */
        uint64_t op_ns = UINT64_MAX;
        for (int i = 0; i < n; i++) {
            const cluster_slot *s = &cl->sh->slot[i];
            for (int e = 0; e < atomic_load(&s->n_events); e++)
                if (s->ev[e].tag == KILL_TAG0 + KILL_WARM - 1 && s->ev[e].elapsed_ns < op_ns)
                    op_ns = s->ev[e].elapsed_ns;
        }
        delay = op_ns == UINT64_MAX ? 2 : (unsigned)(op_ns / 3 / CL_MS);
        if (delay < 2) delay = 2;
    }
    cluster_sleep_ms(delay);
    atomic_store(&cl->sh->ctl[CTL_KILLED], victim + 1);
    cluster_kill(cl, victim);
    assert_int_equal(cluster_wait_all(cl, 90000), 0);
    /* Every survivor decided tag T alike; a failure restored the buffer. */
    uint64_t T = KILL_TAG0 + KILL_WARM;
    int32_t outcome = -1;
    for (int i = 0; i < n; i++) {
        if (i == victim) continue;
        const cluster_slot *s = &cl->sh->slot[i];
        const cluster_event *e = NULL;
        for (int j = 0; j < atomic_load(&s->n_events) && !e; j++)
            if (s->ev[j].tag == T) e = &s->ev[j];
        assert_non_null(e);
        if (outcome < 0) outcome = e->result;
        assert_int_equal(e->result, outcome);
        if (e->result == ECCL_ERR_PEER_LOST) assert_true(e->pre_hash == e->post_hash);
        else assert_int_equal(e->world, n);
    }
    if (gate) assert_int_equal(outcome, ECCL_ERR_PEER_LOST);
    /* And every survivor's results agree bit for bit, call by call. */
    int ref = victim == 0 ? 1 : 0;
    for (int i = 0; i < n; i++) {
        if (i == victim || i == ref) continue;
        const cluster_slot *s = &cl->sh->slot[i], *r = &cl->sh->slot[ref];
        assert_int_equal(atomic_load(&s->n_events), atomic_load(&r->n_events));
        for (int j = 0; j < atomic_load(&s->n_events); j++) {
            assert_true(s->ev[j].tag == r->ev[j].tag && s->ev[j].result == r->ev[j].result);
            if (s->ev[j].result == ECCL_OK) assert_true(s->ev[j].post_hash == r->ev[j].post_hash);
        }
    }
    printf("    N=%d, peer %d killed %s %u ms into quantised tag %llu: survivors %s\n", n, victim,
           gate ? "outside the call (gated)" : "mid-transfer", delay, (unsigned long long)T,
           outcome == ECCL_ERR_PEER_LOST ? "got PEER_LOST, restored, retried on N-1 with parity"
                                         : "committed it (completion round)");
    cluster_fini(cl);
}

static void test_quant_kill_gated_n3(void **state) { run_kill(*state, 3, 1, 1); }
static void test_quant_kill_mid_n4(void **state) { run_kill(*state, 4, 0, 2); }

/* ---- a batch that loses a peer half-way -------------------------------------------- */

#define BATCH 16
#define BATCH_WINDOW 4
#define V_DOOMED 1 /* the victim saw its watched op's result: kill it now */

typedef struct batch_arg {
    int n, victim;
    size_t count;
    int watch; /* the victim asks to be killed once op `watch` has its result */
} batch_arg;

/* Every peer must run the same batch with the same window (a peer whose
 * window differs can issue a big op another peer has not called, ahead of
 * frames that peer needs). So the victim runs it too, and a thread of its
 * own watches an out-of-place result buffer: once op `watch` is written,
 * the parent kills it -- certainly mid-batch, with ops after it in flight
 * and the later ones not issued yet. */
typedef struct watch_arg {
    const volatile float *last;
} watch_arg;

static void *watcher(void *argp)
{
    watch_arg *w = argp;
    while (*w->last == 0.0f) cluster_sleep_ms(1);
    atomic_store(&cluster_self()->val[V_DOOMED], 1);
    return NULL;
}

static int batch_body(eccl_comm *c, int index, void *argp)
{
    const batch_arg *a = argp;
    size_t count = a->count;
    uint8_t *send[BATCH], *recv[BATCH];
    uint64_t in_hash[BATCH];
    eccl_allreduce_desc d[BATCH];
    eccl_allreduce_opts q;
    eccl_allreduce_opts_init(&q);
    q.quant = ECCL_QUANT_AFFINE_U8;
    for (int k = 0; k < BATCH; k++) {
        int quant = k % 2, in_place = k % 4 >= 2;
        send[k] = malloc(count * 4);
        recv[k] = in_place ? send[k] : malloc(count * 4);
        CL_CHECK(send[k] && recv[k], "oom");
        cluster_fill(send[k], quant ? ECCL_F32 : ECCL_I32, count, index, 900 + k,
                     quant ? CL_PAT_RANDOM : CL_PAT_SMALL);
        if (!in_place) memset(recv[k], 0, count * 4);
        in_hash[k] = cluster_fnv1a(send[k], count * 4);
        d[k] = (eccl_allreduce_desc){send[k], recv[k], count, quant ? ECCL_F32 : ECCL_I32, ECCL_SUM,
                                     900 + (uint64_t)k, quant ? &q : NULL};
    }
    eccl_reduce_info info[BATCH];
    if (index == a->victim) {
        pthread_t th;
        watch_arg w = {(const volatile float *)(recv[a->watch] + (count - 1) * 4)};
        CL_CHECK(recv[a->watch] != send[a->watch], "watch an out-of-place op");
        CL_CHECK(pthread_create(&th, NULL, watcher, &w) == 0, "pthread_create");
        eccl_allreduce_multiple_with_retry(c, d, BATCH, BATCH_WINDOW, info);
        for (;;) cluster_sleep_ms(1000); /* killed before or after it returns */
    }
    uint64_t t0 = cluster_now_ns();
    eccl_result rc = eccl_allreduce_multiple_with_retry(c, d, BATCH, BATCH_WINDOW, info);
    uint64_t dt = cluster_now_ns() - t0;
    if (a->n == 2) {
        /* Alone after the loss: TOO_FEW_PEERS; what succeeded before it is
         * right, the rest kept their inputs (in place: restored). */
        CL_EXPECT_RC(rc, ECCL_ERR_TOO_FEW_PEERS);
    } else {
        CL_OK(rc);
    }
    int at_n = 0, at_n1 = 0;
    for (int k = 0; k < BATCH; k++) {
        int idx[CLUSTER_MAX_PEERS], m = 0;
        for (int i = 0; i < a->n; i++)
            if (info[k].world_size == (uint32_t)a->n || i != a->victim) idx[m++] = i;
        if (a->n == 2 && info[k].world_size == 0) {
            CL_CHECK(cluster_fnv1a(send[k], count * 4) == in_hash[k], "op %d failed but its %s changed", k,
                     recv[k] == send[k] ? "buffer" : "input");
            cluster_push_hash(0);
            continue;
        }
        CL_CHECK(m == (int)info[k].world_size, "op %d: world %u", k, info[k].world_size);
        /* The victim issued op `watch`, so op watch - window had completed
         * everywhere before the kill. */
        CL_CHECK(k > a->watch - BATCH_WINDOW || m == a->n, "op %d, done before the kill, ran on %d peers", k, m);
        at_n += m == a->n;
        at_n1 += m == a->n - 1;
        if (k % 2) {
            if (check_quant(recv[k], ECCL_F32, ECCL_SUM, count, idx, m, 900 + k, NULL, "batch")) return 1;
        } else if (cluster_check_values(recv[k], ECCL_I32, ECCL_SUM, CL_PAT_SMALL, count, idx, m, 900 + k,
                                        "batch")) {
            return 1;
        }
        cluster_push_hash(cluster_fnv1a(recv[k], count * 4) ^ info[k].world_size);
    }
    /* Ops the victim could not have issued when it died ran without it. */
    if (a->n > 2) CL_CHECK(at_n1 >= BATCH - (a->watch + 1 + BATCH_WINDOW), "only %d ops after the loss", at_n1);
    cluster_self()->val[2] = at_n;
    cluster_self()->val[3] = at_n1;
    cluster_self()->val[4] = (long long)dt;
    /* Arguments. */
    CL_EXPECT_RC(eccl_allreduce_multiple_with_retry(c, d, BATCH, 0, info), ECCL_ERR_INVALID_ARG);
    eccl_allreduce_desc dup[2] = {d[0], d[0]};
    CL_EXPECT_RC(eccl_allreduce_multiple_with_retry(c, dup, 2, 2, info), ECCL_ERR_INVALID_ARG);
    CL_OK(eccl_allreduce_multiple_with_retry(c, d, 0, 1, NULL));
    for (int k = 0; k < BATCH; k++) {
        if (recv[k] != send[k]) free(recv[k]);
        free(send[k]);
    }
    return 0;
}

static int victim_doomed(cluster *cl, void *argp)
{
    const batch_arg *a = argp;
    return atomic_load(&cl->sh->slot[a->victim].val[V_DOOMED]) != 0;
}

static void run_batch(cluster *cl, const batch_arg *a)
{
    assert_int_equal(cluster_init(cl, NULL), 0);
    assert_int_equal(cluster_spawn_n(cl, a->n, batch_body, (void *)a), 0);
    assert_int_equal(cluster_wait_for(cl, victim_doomed, (void *)a, 60000), 0);
    cluster_kill(cl, a->victim);
    assert_int_equal(cluster_wait_all(cl, 90000), 0);
    int ref = a->victim == 0 ? 1 : 0;
    for (int i = 0; i < a->n; i++) {
        if (i == a->victim) continue;
        assert_int_equal(cl->sh->slot[i].n_hash, BATCH);
        for (int k = 0; k < BATCH; k++)
            if (cl->sh->slot[i].hash[k] != cl->sh->slot[ref].hash[k])
                fail_msg("parity: op %d of peer %d differs from peer %d's", k, i, ref);
    }
    const cluster_slot *r = &cl->sh->slot[ref];
    printf("    N=%d, batch of %d x %zu values (half quantised), %d in flight, peer %d killed after op %d: "
           "%lld ops on %d peers, %lld on %d after retries, %.0f ms\n",
           a->n, BATCH, a->count, BATCH_WINDOW, a->victim, a->watch, (long long)r->val[2], a->n,
           (long long)r->val[3], a->n - 1, (double)r->val[4] / 1e6);
    cluster_fini(cl);
}

static void test_multiple_with_retry_kill_n4(void **state)
{
    batch_arg a = {4, 2, 1u << 20, 5};
    run_batch(*state, &a);
}

/* Down to one peer: TOO_FEW_PEERS, every op that did not succeed restored. */
static void test_multiple_with_retry_to_one(void **state)
{
    batch_arg a = {2, 1, 1u << 18, 1};
    run_batch(*state, &a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_quant_parity_n2, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_quant_parity_n3, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_quant_parity_n5, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_quant_kill_gated_n3, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_quant_kill_mid_n4, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_multiple_with_retry_kill_n4, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_multiple_with_retry_to_one, cluster_test_setup, cluster_test_teardown),
    };
    const char *filter = getenv("ECCL_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("quant_mp", tests, NULL, NULL);
}
