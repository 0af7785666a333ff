/* The simulated NIC (backends/sim/verbs_sg.c) keeps the verbs rules that
 * net_ibv's protocol relies on. Two envs with NICs on node-1 and node-2 of
 * a flat platform, their queue pairs connected by hand through the verbs
 * table the protocol gets, and one case per rule:
 *   - a WRITE_WITH_IMM into a registered region lands, costs at least the
 *     route (10 us + bytes / 10 GB/s), completes on both sides (the
 *     receiver with the immediate and the byte count);
 *   - with no receive posted it waits (RNR), and so does the write behind
 *     it on the same QP; posting a receive lets both land, in order;
 *   - a write with a wrong rkey, or past its region's end, lands nowhere:
 *     IBV_WC_REM_ACCESS_ERR at the sender, both QPs in ERR, the target's
 *     posted receives flushed;
 *   - a local buffer outside its lkey's region: IBV_WC_LOC_PROT_ERR;
 *   - a post before RTS is refused (EINVAL);
 *   - the target's host killed with a write outstanding: the sender's
 *     completion is IBV_WC_RETRY_EXC_ERR.
 * Usage: sim_verbs PLATFORM.xml (tests/sim/flat5.xml). Exit 0 = all passed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <xbt/config.h>
#include <xbt/log.h>

#include "net/ibv.h"
#include "sg_internal.h"

#define BIG (1u << 20)

typedef struct test {
    eccl_sg_world *w;
    sg_env *a, *b; /* sender side on node-1, target side on node-2 */
    int b_ready, done;
    int failures;
} test;

#define CHECK(t, cond, ...)                                                  \
    do {                                                                     \
        if (!(cond)) {                                                       \
            (t)->failures++;                                                 \
            eccl_sg_printf("sim_verbs", "FAIL " __VA_ARGS__);                   \
        }                                                                    \
    } while (0)

/* One end of a connected pair: a CQ and a QP on one env's NIC. */
typedef struct end {
    const eccl_ibv_device *d;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
} end;

static void end_open(end *e, const sg_env *env)
{
    e->d = eccl_verbs_sg_device(env);
    e->cq = e->d->verbs->create_cq(e->d->dev, 64, NULL, NULL, 0);
    struct ibv_qp_init_attr ia = {.send_cq = e->cq,
                                  .recv_cq = e->cq,
                                  .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
                                          .max_recv_sge = 1},
                                  .qp_type = IBV_QPT_RC};
    e->qp = e->d->verbs->create_qp(e->d->pd, &ia);
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
    e->d->verbs->modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int end_rtr(end *e, const end *peer)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096,
                            .dest_qp_num = peer->qp->qp_num,
                            .ah_attr = {.is_global = 1, .port_num = 1, .grh = {.dgid = peer->d->gid}}};
    return e->d->verbs->modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                                 IBV_QP_DEST_QPN | IBV_QP_RQ_PSN);
}

static int end_rts(end *e)
{
    struct ibv_qp_attr s = {.qp_state = IBV_QPS_RTS};
    return e->d->verbs->modify_qp(e->qp, &s, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

static void connect_pair(end *x, end *y)
{
    end_rtr(x, y);
    end_rtr(y, x);
    end_rts(x);
    end_rts(y);
}

static int post_recv(end *e, uint64_t id)
{
    struct ibv_recv_wr wr = {.wr_id = id}, *bad;
    return e->d->verbs->post_recv(e->qp, &wr, &bad);
}

static int write_imm(end *e, uint64_t id, const void *src, uint32_t len, uint32_t lkey,
                     uint64_t raddr, uint32_t rkey, uint32_t imm)
{
    struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)src, .length = len, .lkey = lkey};
    struct ibv_send_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
                             .imm_data = imm, .wr = {.rdma = {.remote_addr = raddr, .rkey = rkey}}},
                       *bad;
    return e->d->verbs->post_send(e->qp, &wr, &bad);
}

/* The next completion of e within `for_s` of simulated time; 0 if none. */
static int next_wc(end *e, struct ibv_wc *wc, double for_s)
{
    double until = simgrid_get_clock() + for_s;
    for (;;) {
        int n = e->d->verbs->poll_cq(e->cq, 1, wc);
        if (n != 0) return n;
        if (simgrid_get_clock() >= until) return 0;
        sg_actor_sleep_for(1e-6);
    }
}

static void target_main(int argc, char **argv)
{
    (void)argc, (void)argv;
    test *t = sg_actor_self_get_data();
    eccl_env *env = NULL;
    if (eccl_sg_env_create(t->w, "target", &env) != ECCL_OK ||
        eccl_verbs_sg_attach((sg_env *)env) != ECCL_OK) {
        t->failures++;
        t->done = 1;
        return;
    }
    t->b = (sg_env *)env;
    t->b_ready = 1;
    /* Killed with its host in the last case. */
    while (!t->done) sg_actor_sleep_for(1e-3);
}

static void sender_main(int argc, char **argv)
{
    (void)argc, (void)argv;
    test *t = sg_actor_self_get_data();
    while (!t->b_ready && !t->done) sg_actor_sleep_for(1e-6);
    eccl_env *env = NULL;
    if (t->done || eccl_sg_env_create(t->w, "sender", &env) != ECCL_OK ||
        eccl_verbs_sg_attach((sg_env *)env) != ECCL_OK) {
        t->failures++;
        t->done = 1;
        return;
    }
    t->a = (sg_env *)env;
    end x, y;
    end_open(&x, t->a);
    end_open(&y, t->b);
    const eccl_verbs *v = x.d->verbs;
    uint8_t *src = malloc(BIG), *dst = calloc(1, BIG + 4096);
    for (uint32_t i = 0; i < BIG; i++) src[i] = (uint8_t)(i * 7 + 1);
    struct ibv_mr *smr = v->reg_mr(x.d->pd, src, BIG, 0);
    struct ibv_mr *dmr = v->reg_mr(y.d->pd, dst, BIG, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    struct ibv_wc wc;

    /* Not RTS yet: refused. */
    CHECK(t, write_imm(&x, 1, src, 64, smr->lkey, (uintptr_t)dst, dmr->rkey, 1) != 0,
          "a post on a QP in INIT was accepted");
    connect_pair(&x, &y);

    /* 1. A write lands, at the route's cost, and completes on both sides. */
    post_recv(&y, 100);
    double t0 = simgrid_get_clock();
    CHECK(t, write_imm(&x, 1, src, BIG, smr->lkey, (uintptr_t)dst, dmr->rkey, 0x01020304) == 0,
          "post");
    int got = next_wc(&y, &wc, 0.01);
    double took = simgrid_get_clock() - t0;
    CHECK(t, got == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
                 wc.wr_id == 100 && wc.byte_len == BIG && (wc.wc_flags & IBV_WC_WITH_IMM) &&
                 wc.imm_data == 0x01020304,
          "receiver: got %d status %d opcode %d wr_id %llu len %u imm %x", got, (int)wc.status,
          (int)wc.opcode, (unsigned long long)wc.wr_id, wc.byte_len, (unsigned)wc.imm_data);
    CHECK(t, memcmp(src, dst, BIG) == 0, "the bytes did not land");
    CHECK(t, took >= 10e-6 + BIG / 10e9, "1 MiB landed in %.9f s, under the route's cost", took);
    got = next_wc(&x, &wc, 0.01);
    CHECK(t, got == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE && wc.wr_id == 1,
          "sender: got %d status %d", got, (int)wc.status);
    eccl_sg_printf("sim_verbs", "1 MiB RDMA write landed in %.9f s", took);

    /* 2. No receive posted: it waits, and the write behind it too. */
    memset(dst, 0, BIG);
    write_imm(&x, 2, src, 4096, smr->lkey, (uintptr_t)dst, dmr->rkey, 2);
    write_imm(&x, 3, src + 4096, 4096, smr->lkey, (uintptr_t)dst + 4096, dmr->rkey, 3);
    CHECK(t, next_wc(&y, &wc, 1e-3) == 0 && next_wc(&x, &wc, 0) == 0,
          "a write with immediate completed without a posted receive");
    CHECK(t, dst[0] == 0 && dst[4096] == 0, "a write held for a receive landed");
    post_recv(&y, 200);
    post_recv(&y, 201);
    got = next_wc(&y, &wc, 0.01);
    CHECK(t, got == 1 && wc.wr_id == 200 && wc.imm_data == 2 && memcmp(dst, src, 4096) == 0,
          "first held write: got %d wr_id %llu imm %u", got, (unsigned long long)wc.wr_id,
          (unsigned)wc.imm_data);
    got = next_wc(&y, &wc, 0.01);
    CHECK(t, got == 1 && wc.wr_id == 201 && wc.imm_data == 3 && memcmp(dst + 4096, src + 4096, 4096) == 0,
          "second held write, in order: got %d wr_id %llu imm %u", got, (unsigned long long)wc.wr_id,
          (unsigned)wc.imm_data);
    CHECK(t, next_wc(&x, &wc, 0.01) == 1 && wc.wr_id == 2 && next_wc(&x, &wc, 0.01) == 1 && wc.wr_id == 3,
          "sender completions out of order or missing");

    /* 3. Per-QP order: a small write behind a big one lands after it. */
    memset(dst, 0, BIG);
    post_recv(&y, 300);
    post_recv(&y, 301);
    write_imm(&x, 4, src, BIG, smr->lkey, (uintptr_t)dst, dmr->rkey, 4);
    write_imm(&x, 5, src, 8, smr->lkey, (uintptr_t)dst, dmr->rkey, 5);
    got = next_wc(&y, &wc, 0.01);
    CHECK(t, got == 1 && wc.imm_data == 4 && wc.byte_len == BIG, "big write not first: imm %u",
          (unsigned)wc.imm_data);
    got = next_wc(&y, &wc, 0.01);
    CHECK(t, got == 1 && wc.imm_data == 5 && wc.byte_len == 8, "small write not second: imm %u",
          (unsigned)wc.imm_data);
    next_wc(&x, &wc, 0.01);
    next_wc(&x, &wc, 0.01);

    /* 4. LOC_PROT: the local buffer is not inside the lkey's region; the
     * QP breaks. */
    {
        end p, q;
        end_open(&p, t->a);
        end_open(&q, t->b);
        connect_pair(&p, &q);
        write_imm(&p, 6, src + BIG - 8, 64, smr->lkey, (uintptr_t)dst, dmr->rkey, 6);
        got = next_wc(&p, &wc, 0.01);
        CHECK(t, got == 1 && wc.status == IBV_WC_LOC_PROT_ERR && wc.wr_id == 6,
              "local protection: got %d status %d", got, (int)wc.status);
        CHECK(t, p.qp->state == IBV_QPS_ERR, "QP not in ERR after a local protection error");
        v->destroy_qp(p.qp);
        v->destroy_qp(q.qp);
        v->destroy_cq(p.cq);
        v->destroy_cq(q.cq);
    }

    /* 5. A wrong rkey, then a range past the region: remote access error,
     * both QPs in ERR, the target's receives flushed, nothing written. */
    for (int k = 0; k < 2; k++) {
        end p, q;
        end_open(&p, t->a);
        end_open(&q, t->b);
        connect_pair(&p, &q);
        post_recv(&q, 500);
        memset(dst, 0, BIG + 4096);
        uint32_t rkey = k == 0 ? dmr->rkey + 1000 : dmr->rkey;
        uint64_t at = (uintptr_t)dst + (k == 0 ? 0 : BIG - 16);
        write_imm(&p, 7, src, 64, smr->lkey, at, rkey, 7);
        got = next_wc(&p, &wc, 0.01);
        CHECK(t, got == 1 && wc.status == IBV_WC_REM_ACCESS_ERR,
              "%s: sender got %d status %d, want remote access error", k ? "past the region" : "bad rkey",
              got, (int)wc.status);
        CHECK(t, p.qp->state == IBV_QPS_ERR && q.qp->state == IBV_QPS_ERR, "QPs not in ERR: %d %d",
              (int)p.qp->state, (int)q.qp->state);
        got = next_wc(&q, &wc, 0.01);
        CHECK(t, got == 1 && wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 500,
              "target's receive not flushed: got %d status %d", got, (int)wc.status);
        int clean = 1;
        for (uint32_t i = 0; i < BIG + 4096; i++) clean &= dst[i] == 0;
        CHECK(t, clean, "a write with a bad rkey or range changed memory");
        v->destroy_qp(p.qp);
        v->destroy_qp(q.qp);
        v->destroy_cq(p.cq);
        v->destroy_cq(q.cq);
    }

    /* 6. The target's host dies with a write outstanding (held: no
     * receive posted): the sender's retries run out. */
    write_imm(&x, 8, src, 4096, smr->lkey, (uintptr_t)dst, dmr->rkey, 8);
    sg_actor_sleep_for(1e-3);
    CHECK(t, next_wc(&x, &wc, 0) == 0, "a held write completed");
    eccl_sg_world_kill_host(t->w, "node-2");
    got = next_wc(&x, &wc, 0.01);
    CHECK(t, got == 1 && wc.status == IBV_WC_RETRY_EXC_ERR && wc.wr_id == 8,
          "dead target: sender got %d status %d, want retry counter exceeded", got, (int)wc.status);
    /* And a post to it afterwards flushes on the broken QP. */
    write_imm(&x, 9, src, 64, smr->lkey, (uintptr_t)dst, dmr->rkey, 9);
    got = next_wc(&x, &wc, 0.01);
    CHECK(t, got == 1 && wc.status != IBV_WC_SUCCESS, "a post to a dead peer succeeded");

    v->destroy_qp(x.qp);
    v->destroy_cq(x.cq);
    v->dereg_mr(smr);
    eccl_verbs_sg_detach(t->a);
    eccl_sg_env_destroy(env);
    free(src);
    t->done = 1;
    eccl_sg_printf("sim_verbs", "%s", t->failures ? "FAIL" : "PASS");
    free(dst);
}

int main(int argc, char **argv)
{
    simgrid_init(&argc, argv);
    if (argc != 2) {
        fprintf(stderr, "usage: %s PLATFORM.xml\n", argv[0]);
        return 2;
    }
    xbt_log_control_set("xbt_cfg.thres:warning");
    sg_cfg_set_string("network/model", "CM02");
    simgrid_load_platform(argv[1]);
    test t = {0};
    const eccl_sg_net_cfg net = {.ibv = 1};
    if (eccl_sg_world_create(ECCL_LOG_WARN, &t.w) != ECCL_OK || eccl_sg_world_set_net(t.w, &net) != ECCL_OK)
        return 1;
    sg_actor_t b = sg_actor_init("target", sg_host_by_name("node-2"));
    sg_actor_set_data(b, &t);
    sg_actor_start(b, target_main, 0, NULL);
    sg_actor_t a = sg_actor_init("sender", sg_host_by_name("node-1"));
    sg_actor_set_data(a, &t);
    sg_actor_start(a, sender_main, 0, NULL);
    simgrid_run();
    eccl_sg_world_destroy(t.w);
    return t.failures || !t.done ? 1 : 0;
}
