/* Conformance of mocks/ibverbs (libibverbs.so.1 on CPUs): real verbs code,
 * two processes (fork) or two NICs in one process, the rules a real RC NIC
 * enforces, and the failpoints. Every test is bounded by alarm(). */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <fiu.h>
#ifdef ECCL_MOCK_IBV_FAILPOINTS
#include <fiu-control.h>
#endif
#include <infiniband/verbs.h>

#define LW IBV_ACCESS_LOCAL_WRITE
#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

/* Helpers return 0/-1 and say why, so both the cmocka parent and a forked
 * child (which reports through its exit status) can use them. */
#define CHK(c)                                                               \
  do {                                                                       \
    if (!(c)) {                                                              \
      fprintf(stderr, "[%d] %s:%d: check failed: %s\n", (int)getpid(),       \
              __FILE__, __LINE__, #c);                                       \
      return -1;                                                             \
    }                                                                        \
  } while (0)

struct ep {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *scq, *rcq;
  struct ibv_qp *qp;
  struct ibv_mr *mr;
  uint8_t *buf;
  size_t len;
};

struct info {
  union ibv_gid gid;
  uint32_t qpn, rkey;
  uint64_t addr, len;
};

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int ep_open(struct ep *e, size_t len, int access, int cqe, uint32_t wr) {
  memset(e, 0, sizeof *e);
  int n = 0;
  struct ibv_device **l = ibv_get_device_list(&n);
  CHK(l && n >= 1);
  e->ctx = ibv_open_device(l[0]);
  ibv_free_device_list(l);
  CHK(e->ctx);
  CHK((e->pd = ibv_alloc_pd(e->ctx)));
  CHK((e->scq = ibv_create_cq(e->ctx, cqe, NULL, NULL, 0)));
  CHK((e->rcq = ibv_create_cq(e->ctx, cqe, NULL, NULL, 0)));
  struct ibv_qp_init_attr ia = {.send_cq = e->scq, .recv_cq = e->rcq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = wr, .max_recv_wr = wr, .max_send_sge = 2,
                                        .max_recv_sge = 2, .max_inline_data = 64}};
  CHK((e->qp = ibv_create_qp(e->pd, &ia)));
  e->len = len;
  CHK((e->buf = calloc(1, len)));
  CHK((e->mr = ibv_reg_mr(e->pd, e->buf, len, access)));
  return 0;
}

static void ep_close(struct ep *e) {
  if (e->qp)
    ibv_destroy_qp(e->qp);
  if (e->mr)
    ibv_dereg_mr(e->mr);
  if (e->scq)
    ibv_destroy_cq(e->scq);
  if (e->rcq)
    ibv_destroy_cq(e->rcq);
  if (e->pd)
    ibv_dealloc_pd(e->pd);
  if (e->ctx)
    ibv_close_device(e->ctx);
  free(e->buf);
  memset(e, 0, sizeof *e);
}

static void ep_info(const struct ep *e, struct info *i) {
  memset(i, 0, sizeof *i);
  ibv_query_gid(e->ctx, 1, 0, &i->gid);
  i->qpn = e->qp->qp_num;
  i->rkey = e->mr->rkey;
  i->addr = (uintptr_t)e->buf;
  i->len = e->len;
}

static int to_init(struct ep *e) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = RW};
  CHK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
  return 0;
}

static int to_rtr(struct ep *e, const struct info *r, uint8_t min_rnr_timer) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = r->qpn,
                          .max_dest_rd_atomic = 1, .min_rnr_timer = min_rnr_timer,
                          .ah_attr = {.is_global = 1, .port_num = 1, .grh = {.dgid = r->gid, .hop_limit = 1}}};
  CHK(ibv_modify_qp(e->qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
  return 0;
}

/* Local ACK timeout: 4.096 us * 2^18 * (retry_cnt 7 + 1) = 8.6 s for a peer
 * to reach RTR, so a loaded machine does not fail the connection race. */
static uint8_t g_timeout = 18;

static int to_rts(struct ep *e, uint8_t rnr_retry) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS, .timeout = g_timeout, .retry_cnt = 7, .rnr_retry = rnr_retry,
                          .max_rd_atomic = 1};
  CHK(ibv_modify_qp(e->qp, &a,
                    IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_MAX_QP_RD_ATOMIC) == 0);
  return 0;
}

static int ep_connect(struct ep *e, const struct info *r, uint8_t rnr_retry, uint8_t min_rnr_timer) {
  CHK(to_init(e) == 0);
  CHK(to_rtr(e, r, min_rnr_timer) == 0);
  CHK(to_rts(e, rnr_retry) == 0);
  return 0;
}

/* One completion within ms; 1 got one, 0 none, -1 the CQ failed. */
static int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, int ms) {
  uint64_t end = now_ms() + (uint64_t)ms;
  for (;;) {
    int r = ibv_poll_cq(cq, 1, wc);
    if (r)
      return r < 0 ? -1 : 1;
    if (now_ms() > end)
      return 0;
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
}

static int qp_state(struct ibv_qp *qp) {
  struct ibv_qp_attr a;
  struct ibv_qp_init_attr ia;
  ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);
  return a.qp_state;
}

static int post_write(struct ep *e, enum ibv_wr_opcode op, uint64_t wr_id, void *local, uint32_t len,
                      uint64_t raddr, uint32_t rkey, uint32_t imm) {
  struct ibv_sge sge = {.addr = (uintptr_t)local, .length = len, .lkey = e->mr->lkey};
  struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = len ? 1 : 0, .opcode = op,
                           .send_flags = IBV_SEND_SIGNALED, .imm_data = imm};
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  struct ibv_send_wr *bad = NULL;
  return ibv_post_send(e->qp, &wr, &bad);
}

static int post_recv(struct ep *e, uint64_t wr_id, void *addr, uint32_t len) {
  struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = e->mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = len ? 1 : 0};
  struct ibv_recv_wr *bad = NULL;
  return ibv_post_recv(e->qp, &wr, &bad);
}

static int xfer(int fd, void *p, size_t n, int rd) {
  uint8_t *b = p;
  while (n) {
    ssize_t r = rd ? read(fd, b, n) : write(fd, b, n);
    if (r <= 0)
      return -1;
    b += r;
    n -= (size_t)r;
  }
  return 0;
}

static int exchange(int fd, const struct info *mine, struct info *peer) {
  CHK(xfer(fd, (void *)mine, sizeof *mine, 0) == 0);
  CHK(xfer(fd, peer, sizeof *peer, 1) == 0);
  return 0;
}

/* ---- forked peers ---------------------------------------------------------- */

static int g_mode;

static pid_t spawn(int (*fn)(int fd), int *fd) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
    return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    return -1;
  }
  if (pid == 0) {
    close(sv[0]);
    alarm(30);
    _exit(fn(sv[1]) ? 1 : 0);
  }
  close(sv[1]);
  *fd = sv[0];
  return pid;
}

static void reap(pid_t pid, int fd) {
  int st = 0;
  close(fd);
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

/* The child: a target that posts nrecv receives, then runs its check. */
static int child_write_imm(int fd) {
  struct ep e;
  struct info me, peer;
  CHK(ep_open(&e, 8192, RW, 16, 16) == 0);
  CHK(to_init(&e) == 0);
  CHK(post_recv(&e, 77, NULL, 0) == 0);
  ep_info(&e, &me);
  CHK(exchange(fd, &me, &peer) == 0);
  CHK(to_rtr(&e, &peer, 12) == 0 && to_rts(&e, 7) == 0);
  struct ibv_wc wc;
  CHK(wait_wc(e.rcq, &wc, 10000) == 1);
  CHK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 77);
  CHK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && (wc.wc_flags & IBV_WC_WITH_IMM));
  CHK(wc.imm_data == htonl(0xC0FFEE) && wc.byte_len == 4096);
  CHK(wc.src_qp == peer.qpn && wc.qp_num == e.qp->qp_num);
  for (int i = 0; i < 4096; i++)
    CHK(e.buf[100 + i] == (uint8_t)(i * 7 + 1));
  CHK(e.buf[99] == 0 && e.buf[4196] == 0);
  ep_close(&e);
  return 0;
}

static void test_write_with_imm(void **state) {
  alarm(30);
  int fd = -1;
  pid_t pid = spawn(child_write_imm, &fd);
  assert_true(pid > 0);
  struct ep e;
  struct info me, peer;
  assert_int_equal(ep_open(&e, 8192, RW, 16, 16), 0);
  for (int i = 0; i < 4096; i++)
    e.buf[i] = (uint8_t)(i * 7 + 1);
  ep_info(&e, &me);
  assert_int_equal(exchange(fd, &me, &peer), 0);
  assert_int_equal(ep_connect(&e, &peer, 7, 12), 0);
  assert_int_equal(post_write(&e, IBV_WR_RDMA_WRITE_WITH_IMM, 5, e.buf, 4096, peer.addr + 100, peer.rkey,
                              htonl(0xC0FFEE)), 0);
  struct ibv_wc wc;
  assert_int_equal(wait_wc(e.scq, &wc, 10000), 1);
  assert_int_equal(wc.status, IBV_WC_SUCCESS);
  assert_int_equal(wc.opcode, IBV_WC_RDMA_WRITE);
  assert_int_equal(wc.wr_id, 5);
  reap(pid, fd);
  ep_close(&e);
  alarm(0);
}

#define NORD 1000

static int child_ordering(int fd) {
  struct ep e;
  struct info me, peer;
  CHK(ep_open(&e, NORD * 8, RW, 2 * NORD, 2 * NORD) == 0);
  CHK(to_init(&e) == 0);
  for (int i = 0; i < NORD; i++)
    CHK(post_recv(&e, (uint64_t)i, NULL, 0) == 0);
  ep_info(&e, &me);
  CHK(exchange(fd, &me, &peer) == 0);
  CHK(to_rtr(&e, &peer, 12) == 0 && to_rts(&e, 7) == 0);
  uint64_t *slot = (uint64_t *)e.buf;
  for (int i = 0; i < NORD; i++) {
    struct ibv_wc wc;
    CHK(wait_wc(e.rcq, &wc, 10000) == 1);
    CHK(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)i && ntohl(wc.imm_data) == (uint32_t)i);
    CHK(slot[i] == (uint64_t)i + 1); /* the plain write before it landed first */
  }
  ep_close(&e);
  return 0;
}

static void test_ordering(void **state) {
  alarm(60);
  int fd = -1;
  pid_t pid = spawn(child_ordering, &fd);
  assert_true(pid > 0);
  struct ep e;
  struct info me, peer;
  assert_int_equal(ep_open(&e, NORD * 8, RW, 2 * NORD, 2 * NORD), 0);
  ep_info(&e, &me);
  assert_int_equal(exchange(fd, &me, &peer), 0);
  assert_int_equal(ep_connect(&e, &peer, 7, 12), 0);
  uint64_t *v = (uint64_t *)e.buf;
  for (int i = 0; i < NORD; i++) {
    v[i] = (uint64_t)i + 1;
    struct ibv_sge sge = {.addr = (uintptr_t)&v[i], .length = 8, .lkey = e.mr->lkey};
    struct ibv_send_wr imm = {.wr_id = (uint64_t)i, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                              .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl((uint32_t)i)};
    struct ibv_send_wr w = {.wr_id = 1000000 + (uint64_t)i, .sg_list = &sge, .num_sge = 1,
                            .opcode = IBV_WR_RDMA_WRITE, .next = &imm};
    w.wr.rdma.remote_addr = peer.addr + 8 * (uint64_t)i;
    w.wr.rdma.rkey = peer.rkey;
    imm.wr.rdma.remote_addr = peer.addr;
    imm.wr.rdma.rkey = peer.rkey;
    struct ibv_send_wr *bad;
    assert_int_equal(ibv_post_send(e.qp, &w, &bad), 0);
  }
  for (int i = 0; i < NORD; i++) {
    struct ibv_wc wc;
    assert_int_equal(wait_wc(e.scq, &wc, 10000), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_int_equal(wc.wr_id, i); /* unsignaled plain writes: no completion */
  }
  reap(pid, fd);
  ep_close(&e);
  alarm(0);
}

static int child_send_recv(int fd) {
  struct ep e;
  struct info me, peer;
  CHK(ep_open(&e, 4096, LW, 16, 16) == 0);
  CHK(to_init(&e) == 0);
  CHK(post_recv(&e, 1, e.buf, 256) == 0);
  CHK(post_recv(&e, 2, e.buf + 256, 256) == 0);
  ep_info(&e, &me);
  CHK(exchange(fd, &me, &peer) == 0);
  CHK(to_rtr(&e, &peer, 12) == 0 && to_rts(&e, 7) == 0);
  struct ibv_wc wc;
  CHK(wait_wc(e.rcq, &wc, 10000) == 1);
  CHK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 1 && wc.opcode == IBV_WC_RECV && wc.byte_len == 100);
  CHK(!(wc.wc_flags & IBV_WC_WITH_IMM) && wc.src_qp == peer.qpn);
  for (int i = 0; i < 100; i++)
    CHK(e.buf[i] == (uint8_t)(i + 3));
  /* 300 bytes into a 256-byte receive: local length error, QP broken. */
  CHK(wait_wc(e.rcq, &wc, 10000) == 1);
  CHK(wc.wr_id == 2 && wc.status == IBV_WC_LOC_LEN_ERR);
  CHK(qp_state(e.qp) == IBV_QPS_ERR);
  char done;
  CHK(xfer(fd, &done, 1, 1) == 0);
  ep_close(&e);
  return 0;
}

static void test_send_recv(void **state) {
  alarm(30);
  int fd = -1;
  pid_t pid = spawn(child_send_recv, &fd);
  assert_true(pid > 0);
  struct ep e;
  struct info me, peer;
  assert_int_equal(ep_open(&e, 4096, LW, 16, 16), 0);
  for (int i = 0; i < 300; i++)
    e.buf[i] = (uint8_t)(i + 3);
  ep_info(&e, &me);
  assert_int_equal(exchange(fd, &me, &peer), 0);
  assert_int_equal(ep_connect(&e, &peer, 7, 12), 0);
  assert_int_equal(post_write(&e, IBV_WR_SEND, 9, e.buf, 100, 0, 0, 0), 0);
  struct ibv_wc wc;
  assert_int_equal(wait_wc(e.scq, &wc, 10000), 1);
  assert_int_equal(wc.status, IBV_WC_SUCCESS);
  assert_int_equal(wc.opcode, IBV_WC_SEND);
  assert_int_equal(post_write(&e, IBV_WR_SEND, 10, e.buf, 300, 0, 0, 0), 0);
  assert_int_equal(wait_wc(e.scq, &wc, 10000), 1);
  assert_int_equal(wc.wr_id, 10);
  assert_int_equal(wc.status, IBV_WC_REM_INV_REQ_ERR);
  assert_int_equal(qp_state(e.qp), IBV_QPS_ERR);
  assert_int_equal(xfer(fd, "d", 1, 0), 0);
  reap(pid, fd);
  ep_close(&e);
  alarm(0);
}

/* A target that posts g_mode receives, waits for "done", then reports its
 * QP's state and the receives' fate: state byte + first wc status. */
static int child_target(int fd) {
  struct ep e;
  struct info me, peer;
  CHK(ep_open(&e, 4096, g_mode == 3 ? LW : RW, 16, 16) == 0);
  CHK(to_init(&e) == 0);
  if (g_mode != 0)
    CHK(post_recv(&e, 42, NULL, 0) == 0);
  ep_info(&e, &me);
  CHK(exchange(fd, &me, &peer) == 0);
  CHK(to_rtr(&e, &peer, 1) == 0 && to_rts(&e, 7) == 0);
  CHK(xfer(fd, "r", 1, 0) == 0); /* at RTS before the bad write breaks the QP */
  char done;
  CHK(xfer(fd, &done, 1, 1) == 0);
  uint8_t rep[2] = {(uint8_t)qp_state(e.qp), 0xff};
  struct ibv_wc wc;
  if (ibv_poll_cq(e.rcq, 1, &wc) == 1)
    rep[1] = (uint8_t)wc.status;
  CHK(xfer(fd, rep, 2, 0) == 0);
  ep_close(&e);
  return 0;
}

/* mode 0: no receive posted (RNR); 1: wrong rkey; 2: past the MR's end;
 * 3: MR without REMOTE_WRITE. */
static void run_target(int mode, enum ibv_wc_status want, int want_target_state, int want_recv) {
  alarm(30);
  g_mode = mode;
  int fd = -1;
  pid_t pid = spawn(child_target, &fd);
  assert_true(pid > 0);
  struct ep e;
  struct info me, peer;
  assert_int_equal(ep_open(&e, 4096, RW, 16, 16), 0);
  ep_info(&e, &me);
  assert_int_equal(exchange(fd, &me, &peer), 0);
  assert_int_equal(ep_connect(&e, &peer, mode == 0 ? 2 : 7, 12), 0);
  uint64_t raddr = peer.addr;
  uint32_t rkey = peer.rkey, len = 64;
  if (mode == 1)
    rkey ^= 0x5a5a00;
  if (mode == 2) {
    raddr = peer.addr + peer.len - 8;
    len = 16;
  }
  char ready;
  assert_int_equal(xfer(fd, &ready, 1, 1), 0);
  uint64_t t0 = now_ms();
  assert_int_equal(post_write(&e, IBV_WR_RDMA_WRITE_WITH_IMM, 3, e.buf, len, raddr, rkey, 1), 0);
  struct ibv_wc wc;
  assert_int_equal(wait_wc(e.scq, &wc, 10000), 1);
  assert_int_equal(wc.status, want);
  assert_int_equal(wc.wr_id, 3);
  assert_true(now_ms() - t0 < 5000);
  assert_int_equal(qp_state(e.qp), IBV_QPS_ERR);
  /* The QP in ERROR flushes what is posted after. */
  assert_int_equal(post_write(&e, IBV_WR_RDMA_WRITE, 4, e.buf, 8, peer.addr, peer.rkey, 0), 0);
  assert_int_equal(wait_wc(e.scq, &wc, 1000), 1);
  assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
  assert_int_equal(wc.wr_id, 4);
  uint8_t rep[2];
  assert_int_equal(xfer(fd, "d", 1, 0), 0);
  assert_int_equal(xfer(fd, rep, 2, 1), 0);
  assert_int_equal(rep[0], want_target_state);
  assert_int_equal(rep[1], want_recv);
  reap(pid, fd);
  ep_close(&e);
  alarm(0);
}

static void test_rnr(void **state) { run_target(0, IBV_WC_RNR_RETRY_EXC_ERR, IBV_QPS_RTS, 0xff); }
static void test_wrong_rkey(void **state) { run_target(1, IBV_WC_REM_ACCESS_ERR, IBV_QPS_ERR, IBV_WC_WR_FLUSH_ERR); }
static void test_past_mr_end(void **state) { run_target(2, IBV_WC_REM_ACCESS_ERR, IBV_QPS_ERR, IBV_WC_WR_FLUSH_ERR); }
static void test_no_remote_write(void **state) {
  run_target(3, IBV_WC_REM_ACCESS_ERR, IBV_QPS_ERR, IBV_WC_WR_FLUSH_ERR);
}

static int child_victim(int fd) {
  struct ep e;
  struct info me, peer;
  CHK(ep_open(&e, 4096, RW, 16, 16) == 0);
  ep_info(&e, &me);
  CHK(exchange(fd, &me, &peer) == 0);
  CHK(ep_connect(&e, &peer, 7, 12) == 0);
  CHK(xfer(fd, "r", 1, 0) == 0);
  for (;;)
    pause(); /* until SIGKILL */
}

static void test_peer_killed(void **state) {
  alarm(30);
  int fd = -1;
  pid_t pid = spawn(child_victim, &fd);
  assert_true(pid > 0);
  struct ep e;
  struct info me, peer;
  assert_int_equal(ep_open(&e, 4096, RW, 16, 16), 0);
  ep_info(&e, &me);
  assert_int_equal(exchange(fd, &me, &peer), 0);
  assert_int_equal(ep_connect(&e, &peer, 7, 12), 0);
  char r;
  assert_int_equal(xfer(fd, &r, 1, 1), 0);
  struct ibv_wc wc;
  assert_int_equal(post_write(&e, IBV_WR_RDMA_WRITE, 1, e.buf, 64, peer.addr, peer.rkey, 0), 0);
  assert_int_equal(wait_wc(e.scq, &wc, 10000), 1);
  assert_int_equal(wc.status, IBV_WC_SUCCESS);
  kill(pid, SIGKILL);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  close(fd);
  uint64_t t0 = now_ms();
  assert_int_equal(post_write(&e, IBV_WR_RDMA_WRITE, 2, e.buf, 64, peer.addr, peer.rkey, 0), 0);
  assert_int_equal(post_write(&e, IBV_WR_RDMA_WRITE, 3, e.buf, 64, peer.addr, peer.rkey, 0), 0);
  assert_int_equal(wait_wc(e.scq, &wc, 10000), 1);
  assert_int_equal(wc.wr_id, 2);
  assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR);
  assert_int_equal(wait_wc(e.scq, &wc, 10000), 1);
  assert_int_equal(wc.wr_id, 3);
  assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
  assert_true(now_ms() - t0 < 5000);
  assert_int_equal(qp_state(e.qp), IBV_QPS_ERR);
  ep_close(&e);
  alarm(0);
}

#define BIG (1u << 20)
#define NBIG 48

static int child_stopped(int fd) {
  struct ep e;
  struct info me, peer;
  CHK(ep_open(&e, BIG, RW, 16, 16) == 0);
  ep_info(&e, &me);
  CHK(exchange(fd, &me, &peer) == 0);
  CHK(ep_connect(&e, &peer, 7, 12) == 0);
  CHK(xfer(fd, "r", 1, 0) == 0);
  char done;
  CHK(xfer(fd, &done, 1, 1) == 0);
  /* The writes were applied under the NIC's lock; taking it orders them
   * before our reads (for ThreadSanitizer; the sender's completions and
   * the "done" byte already did, across processes). */
  CHK(qp_state(e.qp) == IBV_QPS_RTS);
  for (uint32_t i = 0; i < BIG; i++) /* the last write's bytes */
    CHK(e.buf[i] == (uint8_t)(i + NBIG - 1));
  ep_close(&e);
  return 0;
}

/* A stopped peer process (its NIC's thread stopped with it) only delays
 * completions: posting never blocks, even with far more queued than a socket
 * buffer holds, and everything completes once it runs again. */
static void test_stopped_peer(void **state) {
  alarm(60);
  int fd = -1;
  pid_t pid = spawn(child_stopped, &fd);
  assert_true(pid > 0);
  struct ep e;
  struct info me, peer;
  assert_int_equal(ep_open(&e, (size_t)BIG * NBIG, RW, 2 * NBIG, 2 * NBIG), 0);
  for (size_t k = 0; k < NBIG; k++)
    for (uint32_t i = 0; i < BIG; i++)
      e.buf[k * BIG + i] = (uint8_t)(i + k);
  ep_info(&e, &me);
  assert_int_equal(exchange(fd, &me, &peer), 0);
  assert_int_equal(ep_connect(&e, &peer, 7, 12), 0);
  char r;
  assert_int_equal(xfer(fd, &r, 1, 1), 0);
  assert_int_equal(kill(pid, SIGSTOP), 0);
  int st;
  assert_int_equal(waitpid(pid, &st, WUNTRACED), pid);
  assert_true(WIFSTOPPED(st));
  uint64_t t0 = now_ms();
  for (size_t k = 0; k < NBIG; k++)
    assert_int_equal(post_write(&e, IBV_WR_RDMA_WRITE, k, e.buf + k * BIG, BIG, peer.addr, peer.rkey, 0), 0);
  assert_true(now_ms() - t0 < 3000);
  struct ibv_wc wc;
  assert_int_equal(wait_wc(e.scq, &wc, 200), 0);
  assert_int_equal(kill(pid, SIGCONT), 0);
  for (size_t k = 0; k < NBIG; k++) {
    assert_int_equal(wait_wc(e.scq, &wc, 20000), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_int_equal(wc.wr_id, k);
  }
  assert_int_equal(xfer(fd, "d", 1, 0), 0);
  reap(pid, fd);
  ep_close(&e);
  alarm(0);
}

/* ---- one process, two NICs ------------------------------------------------- */

static void pair_open(struct ep *a, struct ep *b, int cqe, uint8_t rnr_retry) {
  struct info ia, ib;
  assert_int_equal(ep_open(a, 4096, RW, cqe, 16), 0);
  assert_int_equal(ep_open(b, 4096, RW, cqe, 16), 0);
  ep_info(a, &ia);
  ep_info(b, &ib);
  assert_false(memcmp(&ia.gid, &ib.gid, sizeof ia.gid) == 0);
  assert_int_equal(ep_connect(a, &ib, rnr_retry, 1), 0);
  assert_int_equal(ep_connect(b, &ia, rnr_retry, 1), 0);
}

/* A payload far larger than a Unix socket buffer: the socket takes only its
 * head at post time and the NIC's service thread must write the rest. The
 * warm-up write first connects the QP and lets that thread go back to sleep
 * in poll(), so the big post finds it asleep, with nothing after it that
 * could wake it by chance: it completes only if the post itself does. */
#define HUGE_WRITE (64u << 20)

static void test_huge_write_completes_alone(void **state) {
  alarm(60);
  struct ep a, b;
  struct info ia, ib;
  assert_int_equal(ep_open(&a, HUGE_WRITE, RW, 16, 16), 0);
  assert_int_equal(ep_open(&b, HUGE_WRITE, RW, 16, 16), 0);
  ep_info(&a, &ia);
  ep_info(&b, &ib);
  assert_int_equal(ep_connect(&a, &ib, 7, 1), 0);
  assert_int_equal(ep_connect(&b, &ia, 7, 1), 0);
  for (uint32_t i = 0; i < HUGE_WRITE; i++)
    a.buf[i] = (uint8_t)(i * 13 + (i >> 16));
  struct ibv_wc wc;
  assert_int_equal(post_write(&a, IBV_WR_RDMA_WRITE, 1, a.buf, 8, ib.addr, ib.rkey, 0), 0);
  assert_int_equal(wait_wc(a.scq, &wc, 5000), 1);
  assert_int_equal(wc.status, IBV_WC_SUCCESS);
  usleep(50 * 1000); /* both service threads back in poll() */
  assert_int_equal(post_recv(&b, 21, NULL, 0), 0);
  assert_int_equal(post_write(&a, IBV_WR_RDMA_WRITE_WITH_IMM, 2, a.buf, HUGE_WRITE, ib.addr, ib.rkey,
                              htonl(0xB16)), 0);
  /* Generous: this checks that it completes at all, not how fast. */
  assert_int_equal(wait_wc(a.scq, &wc, 20000), 1);
  assert_int_equal(wc.wr_id, 2);
  assert_int_equal(wc.status, IBV_WC_SUCCESS);
  assert_int_equal(wait_wc(b.rcq, &wc, 5000), 1);
  assert_int_equal(wc.status, IBV_WC_SUCCESS);
  assert_int_equal(wc.wr_id, 21);
  assert_int_equal(wc.byte_len, HUGE_WRITE);
  assert_int_equal(wc.imm_data, htonl(0xB16));
  assert_memory_equal(b.buf, a.buf, HUGE_WRITE);
  ep_close(&a);
  ep_close(&b);
  alarm(0);
}

static void test_library_and_device(void **state) {
  alarm(20);
  Dl_info dl;
  assert_true(dladdr((void *)ibv_get_device_list, &dl));
  assert_non_null(strstr(dl.dli_fname, "mocks/ibverbs/libibverbs.so"));
  int n = 0;
  struct ibv_device **l = ibv_get_device_list(&n);
  assert_int_equal(n, 1);
  assert_string_equal(ibv_get_device_name(l[0]), "mock_ibv0");
  assert_null(l[1]);
  struct ibv_context *ctx = ibv_open_device(l[0]);
  ibv_free_device_list(l);
  assert_non_null(ctx);
  struct ibv_device_attr da;
  assert_int_equal(ibv_query_device(ctx, &da), 0);
  assert_int_equal(da.phys_port_cnt, 1);
  struct ibv_port_attr pa;
  assert_int_equal(ibv_query_port(ctx, 1, &pa), 0);
  assert_int_equal(pa.state, IBV_PORT_ACTIVE);
  assert_int_equal(pa.active_mtu, IBV_MTU_4096);
  assert_true(pa.lid != 0);
  assert_int_not_equal(ibv_query_port(ctx, 2, &pa), 0);
  union ibv_gid g;
  assert_int_equal(ibv_query_gid(ctx, 1, 0, &g), 0);
  assert_int_equal(g.raw[0], 0xfe);
  uint32_t pid = ((uint32_t)g.raw[8] << 24) | ((uint32_t)g.raw[9] << 16) | ((uint32_t)g.raw[10] << 8) | g.raw[11];
  assert_int_equal(pid, (uint32_t)getpid());
  assert_int_equal(ibv_fork_init(), 0);
  assert_string_equal(ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR), "remote access error");
  /* Extended verbs the mock does not implement answer EOPNOTSUPP. */
  struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
  assert_non_null(cq);
  struct ibv_modify_cq_attr mca = {0};
  assert_int_equal(ibv_modify_cq(cq, &mca), EOPNOTSUPP);
  assert_int_equal(ibv_destroy_cq(cq), 0);
  ibv_close_device(ctx);
  alarm(0);
}

static void test_state_machine(void **state) {
  alarm(20);
  g_timeout = 14; /* about 0.5 s: the expiry below is timed */
  struct ep a, b;
  struct info ia, ib;
  assert_int_equal(ep_open(&a, 4096, RW, 16, 16), 0);
  assert_int_equal(ep_open(&b, 4096, RW, 16, 16), 0);
  ep_info(&a, &ia);
  ep_info(&b, &ib);
  struct ibv_recv_wr rwr = {.wr_id = 1}, *rbad = NULL;
  assert_int_equal(ibv_post_recv(a.qp, &rwr, &rbad), EINVAL); /* RESET */
  assert_ptr_equal(rbad, &rwr);
  struct ibv_qp_attr x = {.qp_state = IBV_QPS_RTR};
  assert_int_equal(ibv_modify_qp(a.qp, &x, IBV_QP_STATE), EINVAL); /* RESET -> RTR */
  x = (struct ibv_qp_attr){.qp_state = IBV_QPS_INIT, .port_num = 1};
  assert_int_equal(ibv_modify_qp(a.qp, &x, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX), EINVAL);
  assert_int_equal(to_init(&a), 0);
  assert_int_equal(qp_state(a.qp), IBV_QPS_INIT);
  assert_int_equal(ibv_post_recv(a.qp, &rwr, &rbad), 0);
  struct ibv_send_wr swr = {.wr_id = 2, .opcode = IBV_WR_RDMA_WRITE}, *sbad = NULL;
  assert_int_equal(ibv_post_send(a.qp, &swr, &sbad), EINVAL); /* INIT */
  assert_ptr_equal(sbad, &swr);
  x = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = ib.qpn,
                           .ah_attr = {.is_global = 0, .dlid = 1, .port_num = 1}};
  assert_int_equal(ibv_modify_qp(a.qp, &x,
                                 IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
                   EINVAL); /* no GRH: the fabric routes by GID */
  assert_int_equal(ibv_modify_qp(a.qp, &x, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN), EINVAL);
  assert_int_equal(to_rtr(&a, &ib, 1), 0);
  assert_int_equal(ibv_post_send(a.qp, &swr, &sbad), EINVAL); /* RTR */
  x = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7};
  assert_int_equal(ibv_modify_qp(a.qp, &x, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT),
                   EINVAL); /* RNR_RETRY and MAX_QP_RD_ATOMIC missing */
  assert_int_equal(to_rts(&a, 7), 0);
  assert_int_equal(ep_connect(&b, &ia, 7, 1), 0);
  /* Bad opcode: the post fails and names it. */
  swr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  assert_int_equal(ibv_post_send(a.qp, &swr, &sbad), EINVAL);
  /* Connected: a write lands and consumes b's receive. */
  assert_int_equal(post_recv(&b, 50, NULL, 0), 0);
  memset(a.buf, 0x5c, 64);
  assert_int_equal(post_write(&a, IBV_WR_RDMA_WRITE_WITH_IMM, 7, a.buf, 64, ib.addr + 64, ib.rkey, 9), 0);
  struct ibv_wc wc;
  assert_int_equal(wait_wc(a.scq, &wc, 5000), 1);
  assert_int_equal(wc.status, IBV_WC_SUCCESS);
  assert_int_equal(b.buf[64], 0x5c);
  assert_int_equal(b.buf[127], 0x5c);
  assert_int_equal(b.buf[128], 0);
  assert_int_equal(wait_wc(b.rcq, &wc, 5000), 1);
  assert_int_equal(wc.wr_id, 50);
  assert_int_equal(wc.imm_data, 9);
  /* b had no receive: RNR retries forever (7) until one is posted. */
  assert_int_equal(post_write(&a, IBV_WR_RDMA_WRITE_WITH_IMM, 8, a.buf, 0, 0, 0, 10), 0);
  assert_int_equal(wait_wc(a.scq, &wc, 100), 0);
  assert_int_equal(post_recv(&b, 99, NULL, 0), 0);
  assert_int_equal(wait_wc(a.scq, &wc, 5000), 1);
  assert_int_equal(wc.status, IBV_WC_SUCCESS);
  assert_int_equal(wait_wc(b.rcq, &wc, 5000), 1);
  assert_int_equal(wc.wr_id, 99);
  assert_int_equal(wc.imm_data, 10);
  /* A message for a QP not yet at RTR is retransmitted until it gets
   * there (here: b back through RESET/INIT)... */
  x = (struct ibv_qp_attr){.qp_state = IBV_QPS_RESET};
  assert_int_equal(ibv_modify_qp(b.qp, &x, IBV_QP_STATE), 0);
  assert_int_equal(to_init(&b), 0);
  assert_int_equal(post_write(&a, IBV_WR_RDMA_WRITE, 12, a.buf, 8, ib.addr, ib.rkey, 0), 0);
  assert_int_equal(wait_wc(a.scq, &wc, 50), 0);
  assert_int_equal(to_rtr(&b, &ia, 1), 0);
  assert_int_equal(wait_wc(a.scq, &wc, 5000), 1);
  assert_int_equal(wc.wr_id, 12);
  assert_int_equal(wc.status, IBV_WC_SUCCESS);
  /* ...or until the sender's retries (timeout 4.096us*2^14, retry_cnt 7:
   * about 0.54 s) run out. */
  assert_int_equal(ibv_modify_qp(b.qp, &x, IBV_QP_STATE), 0);
  assert_int_equal(to_init(&b), 0);
  uint64_t t0 = now_ms();
  assert_int_equal(post_write(&a, IBV_WR_RDMA_WRITE, 13, a.buf, 8, ib.addr, ib.rkey, 0), 0);
  assert_int_equal(wait_wc(a.scq, &wc, 5000), 1);
  assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR);
  assert_true(now_ms() - t0 >= 400);
  assert_int_equal(qp_state(a.qp), IBV_QPS_ERR);
  assert_int_equal(to_rtr(&b, &ia, 1), 0);
  /* Back to RESET and forward again. */
  assert_int_equal(ibv_modify_qp(a.qp, &x, IBV_QP_STATE), 0);
  assert_int_equal(ep_connect(&a, &ib, 7, 1), 0);
  assert_int_equal(post_write(&a, IBV_WR_RDMA_WRITE, 11, a.buf, 8, ib.addr, ib.rkey, 0), 0);
  assert_int_equal(wait_wc(a.scq, &wc, 5000), 1);
  assert_int_equal(wc.status, IBV_WC_SUCCESS);
  ep_close(&a);
  ep_close(&b);
  g_timeout = 18;
  alarm(0);
}

static void test_flush_and_local_errors(void **state) {
  alarm(20);
  struct ep a, b;
  pair_open(&a, &b, 16, 7);
  struct ibv_wc wc;
  for (int i = 0; i < 3; i++)
    assert_int_equal(post_recv(&b, (uint64_t)i, NULL, 0), 0);
  struct ibv_qp_attr x = {.qp_state = IBV_QPS_ERR};
  assert_int_equal(ibv_modify_qp(b.qp, &x, IBV_QP_STATE), 0);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(wait_wc(b.rcq, &wc, 1000), 1);
    assert_int_equal(wc.wr_id, i);
    assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
  }
  assert_int_equal(post_recv(&b, 5, NULL, 0), 0); /* posted in ERROR: flushed */
  assert_int_equal(wait_wc(b.rcq, &wc, 1000), 1);
  assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
  /* Target QP in ERROR: packets dropped, the sender's retries run out. */
  assert_int_equal(post_write(&a, IBV_WR_RDMA_WRITE, 6, a.buf, 8, (uintptr_t)b.buf, b.mr->rkey, 0), 0);
  assert_int_equal(wait_wc(a.scq, &wc, 5000), 1);
  assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR);
  ep_close(&a);
  ep_close(&b);

  /* Local protection: a bad lkey, then a range past the local MR. */
  pair_open(&a, &b, 16, 7);
  struct ibv_sge sge = {.addr = (uintptr_t)a.buf, .length = 8, .lkey = a.mr->lkey + 1};
  struct ibv_send_wr w = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                          .send_flags = IBV_SEND_SIGNALED}, *bad;
  w.wr.rdma.remote_addr = (uintptr_t)b.buf;
  w.wr.rdma.rkey = b.mr->rkey;
  assert_int_equal(ibv_post_send(a.qp, &w, &bad), 0);
  assert_int_equal(wait_wc(a.scq, &wc, 1000), 1);
  assert_int_equal(wc.status, IBV_WC_LOC_PROT_ERR);
  assert_int_equal(qp_state(a.qp), IBV_QPS_ERR);
  ep_close(&a);
  ep_close(&b);
  pair_open(&a, &b, 16, 7);
  sge = (struct ibv_sge){.addr = (uintptr_t)a.buf + 4090, .length = 8, .lkey = a.mr->lkey};
  w.wr.rdma.rkey = b.mr->rkey;
  w.wr.rdma.remote_addr = (uintptr_t)b.buf;
  assert_int_equal(ibv_post_send(a.qp, &w, &bad), 0);
  assert_int_equal(wait_wc(a.scq, &wc, 1000), 1);
  assert_int_equal(wc.status, IBV_WC_LOC_PROT_ERR);
  ep_close(&a);
  ep_close(&b);

  /* A receive into memory without LOCAL_WRITE: the receiver's error, and
   * the sender hears a remote operation error. */
  pair_open(&a, &b, 16, 7);
  struct ibv_mr *ro = ibv_reg_mr(b.pd, b.buf + 2048, 1024, 0);
  assert_non_null(ro);
  struct ibv_sge rs = {.addr = (uintptr_t)b.buf + 2048, .length = 64, .lkey = ro->lkey};
  struct ibv_recv_wr rw = {.wr_id = 8, .sg_list = &rs, .num_sge = 1}, *rbad;
  assert_int_equal(ibv_post_recv(b.qp, &rw, &rbad), 0);
  assert_int_equal(post_write(&a, IBV_WR_SEND, 9, a.buf, 16, 0, 0, 0), 0);
  assert_int_equal(wait_wc(a.scq, &wc, 5000), 1);
  assert_int_equal(wc.status, IBV_WC_REM_OP_ERR);
  assert_int_equal(wait_wc(b.rcq, &wc, 5000), 1);
  assert_int_equal(wc.status, IBV_WC_LOC_PROT_ERR);
  assert_int_equal(qp_state(b.qp), IBV_QPS_ERR);
  assert_int_equal(ibv_dereg_mr(ro), 0);
  /* Remote write access without local write is refused at registration. */
  assert_null(ibv_reg_mr(b.pd, b.buf, 64, IBV_ACCESS_REMOTE_WRITE));
  ep_close(&a);
  ep_close(&b);
  alarm(0);
}

static void test_cq_overflow(void **state) {
  alarm(20);
  struct ep a, b;
  pair_open(&a, &b, 2, 7);
  for (int i = 0; i < 3; i++)
    assert_int_equal(post_write(&a, IBV_WR_RDMA_WRITE, (uint64_t)i, a.buf, 8, (uintptr_t)b.buf, b.mr->rkey, 0), 0);
  uint64_t end = now_ms() + 5000;
  while (qp_state(a.qp) != IBV_QPS_ERR && now_ms() < end)
    usleep(1000);
  assert_int_equal(qp_state(a.qp), IBV_QPS_ERR);
  struct ibv_wc wc[4];
  assert_int_equal(ibv_poll_cq(a.scq, 4, wc), 2);
  assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
  assert_int_equal(ibv_poll_cq(a.scq, 4, wc), -1);
  ep_close(&a);
  ep_close(&b);
  alarm(0);
}

static void test_comp_channel(void **state) {
  alarm(20);
  struct ep a, b;
  pair_open(&a, &b, 16, 7);
  struct ibv_comp_channel *ch = ibv_create_comp_channel(a.ctx);
  assert_non_null(ch);
  struct ibv_cq *cq = ibv_create_cq(a.ctx, 8, (void *)0x1234, ch, 0);
  assert_non_null(cq);
  assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
  /* A second QP on a's NIC whose send CQ has the channel, to b's QP. */
  struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp *qp = ibv_create_qp(a.pd, &ia);
  assert_non_null(qp);
  struct ibv_qp *saved = a.qp;
  a.qp = qp;
  struct info ib;
  ep_info(&b, &ib);
  ib.qpn = b.qp->qp_num;
  /* b's QP is connected to a's first QP: a write from this one is dropped. */
  assert_int_equal(ep_connect(&a, &ib, 7, 1), 0);
  assert_int_equal(post_write(&a, IBV_WR_RDMA_WRITE, 1, a.buf, 8, (uintptr_t)b.buf, b.mr->rkey, 0), 0);
  struct ibv_cq *ev = NULL;
  void *evctx = NULL;
  assert_int_equal(ibv_get_cq_event(ch, &ev, &evctx), 0);
  assert_ptr_equal(ev, cq);
  assert_ptr_equal(evctx, (void *)0x1234);
  ibv_ack_cq_events(ev, 1);
  struct ibv_wc wc;
  assert_int_equal(ibv_poll_cq(cq, 1, &wc), 1);
  assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR);
  assert_int_equal(ibv_destroy_cq(cq), EBUSY);
  assert_int_equal(ibv_destroy_qp(qp), 0);
  a.qp = saved;
  assert_int_equal(ibv_destroy_cq(cq), 0);
  assert_int_equal(ibv_destroy_comp_channel(ch), 0);
  ep_close(&a);
  ep_close(&b);
  alarm(0);
}

#ifdef ECCL_MOCK_IBV_FAILPOINTS
static void test_fp_completion_error(void **state) {
  alarm(20);
  struct ep a, b;
  pair_open(&a, &b, 16, 7);
  assert_int_equal(fiu_enable("eccl/mock_ibv/completion_error", 1, NULL, FIU_ONETIME), 0);
  assert_int_equal(post_write(&a, IBV_WR_RDMA_WRITE, 1, a.buf, 8, (uintptr_t)b.buf, b.mr->rkey, 0), 0);
  struct ibv_wc wc;
  assert_int_equal(wait_wc(a.scq, &wc, 5000), 1);
  fiu_disable("eccl/mock_ibv/completion_error");
  assert_int_equal(wc.status, IBV_WC_GENERAL_ERR);
  assert_int_equal(qp_state(a.qp), IBV_QPS_ERR);
  ep_close(&a);
  ep_close(&b);
  alarm(0);
}

static void test_fp_qp_error(void **state) {
  alarm(20);
  struct ep a, b;
  pair_open(&a, &b, 16, 7);
  assert_int_equal(fiu_enable("eccl/mock_ibv/qp_error", 1, NULL, FIU_ONETIME), 0);
  a.buf[0] = 0x77;
  assert_int_equal(post_write(&a, IBV_WR_RDMA_WRITE, 1, a.buf, 8, (uintptr_t)b.buf, b.mr->rkey, 0), 0);
  assert_int_equal(post_write(&a, IBV_WR_RDMA_WRITE, 2, a.buf, 8, (uintptr_t)b.buf, b.mr->rkey, 0), 0);
  struct ibv_wc wc;
  assert_int_equal(wait_wc(a.scq, &wc, 5000), 1);
  assert_int_equal(wc.wr_id, 1);
  assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
  assert_int_equal(wait_wc(a.scq, &wc, 5000), 1);
  assert_int_equal(wc.wr_id, 2);
  assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
  fiu_disable("eccl/mock_ibv/qp_error");
  assert_int_equal(qp_state(a.qp), IBV_QPS_ERR);
  assert_int_equal(b.buf[0], 0x77); /* the data had landed: broke mid-transfer */
  ep_close(&a);
  ep_close(&b);
  alarm(0);
}

static void test_fp_port_down(void **state) {
  alarm(20);
  struct ep a, b;
  pair_open(&a, &b, 16, 7);
  assert_int_equal(post_recv(&a, 1, NULL, 0), 0);
  assert_int_equal(fiu_enable("eccl/mock_ibv/port_down", 1, NULL, 0), 0);
  struct ibv_port_attr pa;
  assert_int_equal(ibv_query_port(a.ctx, 1, &pa), 0);
  assert_int_equal(pa.state, IBV_PORT_DOWN);
  assert_int_equal(qp_state(a.qp), IBV_QPS_ERR);
  struct ibv_wc wc;
  assert_int_equal(wait_wc(a.rcq, &wc, 1000), 1);
  assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
  /* A post on the downed NIC of b fails too. */
  assert_int_equal(post_write(&b, IBV_WR_RDMA_WRITE, 2, b.buf, 8, (uintptr_t)a.buf, a.mr->rkey, 0), 0);
  assert_int_equal(wait_wc(b.scq, &wc, 1000), 1);
  assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
  fiu_disable("eccl/mock_ibv/port_down");
  assert_int_equal(ibv_query_port(a.ctx, 1, &pa), 0);
  assert_int_equal(pa.state, IBV_PORT_ACTIVE);
  ep_close(&a);
  ep_close(&b);
  alarm(0);
}
#endif

int main(void) {
  (void)fiu_init(0);
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_library_and_device),
      cmocka_unit_test(test_state_machine),
      cmocka_unit_test(test_flush_and_local_errors),
      cmocka_unit_test(test_cq_overflow),
      cmocka_unit_test(test_comp_channel),
      cmocka_unit_test(test_huge_write_completes_alone),
      cmocka_unit_test(test_write_with_imm),
      cmocka_unit_test(test_ordering),
      cmocka_unit_test(test_send_recv),
      cmocka_unit_test(test_rnr),
      cmocka_unit_test(test_wrong_rkey),
      cmocka_unit_test(test_past_mr_end),
      cmocka_unit_test(test_no_remote_write),
      cmocka_unit_test(test_peer_killed),
      cmocka_unit_test(test_stopped_peer),
#ifdef ECCL_MOCK_IBV_FAILPOINTS
      cmocka_unit_test(test_fp_completion_error),
      cmocka_unit_test(test_fp_qp_error),
      cmocka_unit_test(test_fp_port_down),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
