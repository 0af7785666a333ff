/* mocks/ibverbs: libibverbs.so.1 for machines without an RDMA NIC
 * (README.md). Every opened device is a mock NIC: a Unix stream socket
 * named after its GID plus one service thread. A connected RC QP opens one
 * stream connection to the target NIC; work requests travel in order on
 * it, the target's service thread validates them against its own MR and QP
 * tables, applies them, and acks; the ack becomes the sender's completion.
 * One mutex per NIC guards its tables, queues, CQs and connections. Sockets
 * are non-blocking: what cannot be written now waits in the connection's
 * output queue for the service thread, so no verb ever blocks on a peer
 * (a stopped peer process only delays completions, as a slow link would). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <signal.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <fiu.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_DEVICES 16
#define MAX_SGE 16
#define MAX_WR 16384
#define MAX_CQE (1 << 20)
#define MAX_INLINE 256
#define MAX_MSG (1u << 30)
#define WIRE_MAGIC 0xEC1B0001u

enum { W_WRITE, W_WRITE_IMM, W_SEND, W_SEND_IMM };

struct wire {
  uint32_t magic, op, dst_qpn, src_qpn;
  uint8_t src_gid[16];
  uint64_t seq, raddr;
  uint32_t rkey, len, imm, rnr_retry;
  uint32_t retry_cnt, timeout; /* the sender's transport retry budget */
};
struct ack {
  uint64_t seq;
  uint32_t status, pad;
};

struct mnic;
struct mqp;

struct mmr {
  struct ibv_mr mr;
  int access;
  struct mmr *next;
};
struct mcq {
  struct ibv_cq cq;
  struct ibv_wc *ring;
  int cap, head, count, overflow, armed;
  struct mcq *next;
};
struct mchan {
  struct ibv_comp_channel ch;
  int wfd;
};
struct swr {
  uint64_t wr_id, seq;
  enum ibv_wc_opcode op;
  uint32_t len;
  int signaled;
  enum ibv_wc_status preset; /* not on the wire: complete with this at the head */
  int local;
};
struct rwr {
  uint64_t wr_id;
  int nsge;
  struct ibv_sge sge[MAX_SGE];
  enum ibv_wc_status preset;
};
struct obuf {
  struct obuf *next;
  size_t len, off;
  /* data follows */
};
struct conn {
  int fd, dead, eof, inbound, held; /* held: 0, or the apply() verdict it waits out */
  struct mqp *qp; /* outbound: the QP that owns it; NULL once destroyed */
  struct obuf *out, **out_tail; /* not yet written */
  size_t got;                   /* bytes of the current header/ack + payload read */
  struct ack ack;               /* outbound: the ack being read */
  struct wire hdr;              /* inbound: the message being read or held */
  uint8_t *buf;
  size_t bufcap;
  uint64_t deadline_us; /* held (RNR) messages: 0 = wait forever */
  struct conn *next;
};
struct mqp {
  struct ibv_qp qp;
  struct ibv_qp_attr attr;
  struct ibv_qp_cap cap;
  int sq_sig_all, doomed, peer_gone, rnr_waiting;
  struct swr *sq;
  int sq_head, sq_count;
  struct rwr *rq;
  int rq_head, rq_count;
  uint64_t next_seq;
  struct conn *out;
  struct mqp *next;
};
struct mnic {
  pthread_mutex_t lock;
  int idx, lfd, wake[2], stop, port_down;
  union ibv_gid gid;
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  pthread_t thr;
  uint32_t next_qpn, next_key;
  struct mmr *mrs;
  struct mqp *qps;
  struct mcq *cqs;
  struct conn *conns;
  struct verbs_context vctx; /* must be last: ends in struct ibv_context */
};

static struct ibv_device g_devs[MAX_DEVICES];
static int g_ndevs;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static atomic_uint g_gen;
static int g_trace; /* ECCL_MOCK_IBV_TRACE=1: one stderr line per error verdict */

#define TRACE(...)                                                             \
  do {                                                                         \
    if (g_trace)                                                               \
      fprintf(stderr, "mock_ibv[%d]: " __VA_ARGS__), fputc('\n', stderr);      \
  } while (0)

#define NIC(ctx) ((struct mnic *)((char *)(ctx) - offsetof(struct mnic, vctx.context)))
#define QP(q) ((struct mqp *)(q))
#define CQ(c) ((struct mcq *)(c))

static uint64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void wake(struct mnic *n) {
  char c = 1;
  ssize_t r = write(n->wake[1], &c, 1);
  (void)r; /* a full pipe already wakes the thread */
}

static int read_all(int fd, void *p, size_t len) {
  uint8_t *b = p;
  while (len) {
    ssize_t r = read(fd, b, len);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    b += r;
    len -= (size_t)r;
  }
  return 0;
}

static struct conn *conn_new(int fd, struct mqp *q) {
  struct conn *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK)) {
    free(c);
    return NULL;
  }
  c->fd = fd;
  c->qp = q;
  c->inbound = !q;
  c->out_tail = &c->out;
  return c;
}

static void conn_free(struct conn *c) {
  while (c->out) {
    struct obuf *b = c->out;
    c->out = b->next;
    free(b);
  }
  close(c->fd);
  free(c->buf);
  free(c);
}

/* Under n->lock: writes what the socket takes now; -1 when the peer is gone. */
static int conn_flush(struct conn *c) {
  while (c->out) {
    struct obuf *b = c->out;
    ssize_t r = send(c->fd, (uint8_t *)(b + 1) + b->off, b->len - b->off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0; /* the service thread polls for POLLOUT */
    if (r <= 0)
      return -1;
    b->off += (size_t)r;
    if (b->off < b->len)
      return 0;
    c->out = b->next;
    if (!c->out)
      c->out_tail = &c->out;
    free(b);
  }
  return 0;
}

/* Under n->lock: queues b (ownership passes) and writes what it can. */
static int conn_send(struct conn *c, struct obuf *b) {
  b->next = NULL;
  b->off = 0;
  *c->out_tail = b;
  c->out_tail = &b->next;
  return conn_flush(c);
}

/* ---- devices ---------------------------------------------------------- */

static void devs_init(void) {
  const char *e = getenv("ECCL_MOCK_IBV_DEVICES");
  int n = e ? atoi(e) : 1;
  const char *t = getenv("ECCL_MOCK_IBV_TRACE");
  g_trace = t && *t && *t != '0';
  if (n < 0)
    n = 0;
  if (n > MAX_DEVICES)
    n = MAX_DEVICES;
  for (int i = 0; i < n; i++) {
    struct ibv_device *d = &g_devs[i];
    d->node_type = IBV_NODE_CA;
    d->transport_type = IBV_TRANSPORT_IB;
    snprintf(d->name, sizeof d->name, "mock_ibv%d", i);
    snprintf(d->dev_name, sizeof d->dev_name, "uverbs%d", i);
    snprintf(d->dev_path, sizeof d->dev_path, "/sys/class/infiniband_verbs/uverbs%d", i);
    snprintf(d->ibdev_path, sizeof d->ibdev_path, "/sys/class/infiniband/mock_ibv%d", i);
  }
  g_ndevs = n;
}

EXPORT struct ibv_device **ibv_get_device_list(int *num_devices) {
  pthread_once(&g_once, devs_init);
  struct ibv_device **l = calloc((size_t)g_ndevs + 1, sizeof *l);
  if (!l) {
    errno = ENOMEM;
    return NULL;
  }
  for (int i = 0; i < g_ndevs; i++)
    l[i] = &g_devs[i];
  if (num_devices)
    *num_devices = g_ndevs;
  return l;
}

EXPORT void ibv_free_device_list(struct ibv_device **list) { free(list); }

EXPORT const char *ibv_get_device_name(struct ibv_device *device) { return device->name; }

EXPORT __be64 ibv_get_device_guid(struct ibv_device *device) {
  return htobe64(0xEC0C000000000000ull | (uint64_t)(device - g_devs));
}

EXPORT int ibv_fork_init(void) { return 0; }

/* ---- completion queues ------------------------------------------------ */

static void qp_to_error(struct mnic *n, struct mqp *q);

/* Under n->lock. A full CQ overflows: it keeps what it holds, reports an
 * error from then on, and every QP that completes into it goes to ERROR
 * (real HW raises IBV_EVENT_CQ_ERR and breaks the QPs). */
static void cq_push(struct mnic *n, struct mcq *c, const struct ibv_wc *wc) {
  if (c->overflow)
    return;
  if (c->count == c->cap) {
    c->overflow = 1;
    for (struct mqp *q = n->qps; q; q = q->next)
      if (CQ(q->qp.send_cq) == c || CQ(q->qp.recv_cq) == c)
        qp_to_error(n, q);
    return;
  }
  c->ring[(c->head + c->count) % c->cap] = *wc;
  c->count++;
  if (c->armed && c->cq.channel) {
    struct ibv_cq *p = &c->cq;
    ssize_t r = write(((struct mchan *)c->cq.channel)->wfd, &p, sizeof p);
    (void)r;
    c->armed = 0;
  }
}

static void send_done(struct mnic *n, struct mqp *q, const struct swr *w, enum ibv_wc_status st) {
  if (st == IBV_WC_SUCCESS && !w->signaled)
    return;
  struct ibv_wc wc = {.wr_id = w->wr_id, .status = st, .opcode = w->op, .qp_num = q->qp.qp_num};
  if (st == IBV_WC_SUCCESS)
    wc.byte_len = w->len;
  cq_push(n, CQ(q->qp.send_cq), &wc);
}

static void recv_done(struct mnic *n, struct mqp *q, const struct rwr *r, enum ibv_wc_status st) {
  struct ibv_wc wc = {.wr_id = r->wr_id, .status = st, .opcode = IBV_WC_RECV, .qp_num = q->qp.qp_num};
  cq_push(n, CQ(q->qp.recv_cq), &wc);
}

static int poll_cq_op(struct ibv_cq *cq, int num, struct ibv_wc *wc) {
  struct mcq *c = CQ(cq);
  struct mnic *n = NIC(cq->context);
  pthread_mutex_lock(&n->lock);
  int k = 0;
  while (k < num && c->count) {
    wc[k++] = c->ring[c->head];
    c->head = (c->head + 1) % c->cap;
    c->count--;
  }
  int ovf = c->overflow;
  pthread_mutex_unlock(&n->lock);
  if (k == 0 && ovf) {
    errno = EOVERFLOW;
    return -1;
  }
  return k;
}

static int req_notify_op(struct ibv_cq *cq, int solicited_only) {
  struct mnic *n = NIC(cq->context);
  if (!cq->channel)
    return EINVAL;
  pthread_mutex_lock(&n->lock);
  CQ(cq)->armed = 1;
  pthread_mutex_unlock(&n->lock);
  return 0;
}

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context) {
  struct mchan *m = calloc(1, sizeof *m);
  int p[2];
  if (!m || pipe2(p, O_CLOEXEC)) {
    free(m);
    return NULL;
  }
  /* Events are written under the NIC lock: never block on an unread pipe
   * (a full pipe already holds an event for the reader). */
  fcntl(p[1], F_SETFL, O_NONBLOCK);
  m->ch.context = context;
  m->ch.fd = p[0];
  m->wfd = p[1];
  return &m->ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel) {
  struct mchan *m = (struct mchan *)channel;
  close(m->ch.fd);
  close(m->wfd);
  free(m);
  return 0;
}

EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context) {
  struct ibv_cq *p;
  if (read_all(channel->fd, &p, sizeof p))
    return -1;
  *cq = p;
  if (cq_context)
    *cq_context = p->cq_context;
  return 0;
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents) {}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                                    struct ibv_comp_channel *channel, int comp_vector) {
  struct mnic *n = NIC(context);
  if (cqe < 1 || cqe > MAX_CQE) {
    errno = EINVAL;
    return NULL;
  }
  struct mcq *c = calloc(1, sizeof *c);
  if (!c || !(c->ring = calloc((size_t)cqe, sizeof *c->ring))) {
    free(c);
    errno = ENOMEM;
    return NULL;
  }
  c->cap = cqe;
  c->cq.context = context;
  c->cq.channel = channel;
  c->cq.cq_context = cq_context;
  c->cq.cqe = cqe;
  pthread_mutex_init(&c->cq.mutex, NULL);
  pthread_cond_init(&c->cq.cond, NULL);
  pthread_mutex_lock(&n->lock);
  c->next = n->cqs;
  n->cqs = c;
  pthread_mutex_unlock(&n->lock);
  return &c->cq;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq) {
  struct mnic *n = NIC(cq->context);
  struct mcq *c = CQ(cq);
  pthread_mutex_lock(&n->lock);
  for (struct mqp *q = n->qps; q; q = q->next)
    if (CQ(q->qp.send_cq) == c || CQ(q->qp.recv_cq) == c) {
      pthread_mutex_unlock(&n->lock);
      return EBUSY;
    }
  for (struct mcq **pp = &n->cqs; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  pthread_mutex_unlock(&n->lock);
  pthread_mutex_destroy(&c->cq.mutex);
  pthread_cond_destroy(&c->cq.cond);
  free(c->ring);
  free(c);
  return 0;
}

/* ---- QP error paths (all under n->lock) -------------------------------- */

static void sq_pop(struct mqp *q) {
  q->sq_head = (q->sq_head + 1) % (int)q->cap.max_send_wr;
  q->sq_count--;
}

/* ERROR: every outstanding WR, send and receive, completes as flushed. */
static void qp_to_error(struct mnic *n, struct mqp *q) {
  if (q->attr.qp_state == IBV_QPS_ERR)
    return;
  q->attr.qp_state = IBV_QPS_ERR;
  q->qp.state = IBV_QPS_ERR;
  q->doomed = 0;
  while (q->sq_count) {
    struct swr w = q->sq[q->sq_head];
    sq_pop(q);
    w.signaled = 1;
    send_done(n, q, &w, IBV_WC_WR_FLUSH_ERR);
  }
  while (q->rq_count) {
    struct rwr r = q->rq[q->rq_head];
    q->rq_head = (q->rq_head + 1) % (int)q->cap.max_recv_wr;
    q->rq_count--;
    recv_done(n, q, &r, IBV_WC_WR_FLUSH_ERR);
  }
}

/* The oldest outstanding send fails with st, the QP breaks. */
static void qp_fail(struct mnic *n, struct mqp *q, enum ibv_wc_status st) {
  if (q->attr.qp_state == IBV_QPS_ERR)
    return;
  if (q->sq_count) {
    struct swr w = q->sq[q->sq_head];
    sq_pop(q);
    send_done(n, q, &w, st);
  }
  qp_to_error(n, q);
}

/* Completes the local (never sent) WRs at the head of the send queue. */
static void drain_local(struct mnic *n, struct mqp *q) {
  while (q->sq_count && q->sq[q->sq_head].local) {
    struct swr w = q->sq[q->sq_head];
    sq_pop(q);
    send_done(n, q, &w, w.preset);
    if (w.preset != IBV_WC_SUCCESS)
      qp_to_error(n, q);
  }
}

static void nic_port_down(struct mnic *n) {
  n->port_down = 1;
  for (struct mqp *q = n->qps; q; q = q->next)
    if (q->attr.qp_state != IBV_QPS_RESET)
      qp_to_error(n, q);
}

/* ---- the target side: applying incoming operations ---------------------- */

static struct mmr *mr_by_key(struct mnic *n, uint32_t key, int rkey) {
  for (struct mmr *m = n->mrs; m; m = m->next)
    if ((rkey ? m->mr.rkey : m->mr.lkey) == key)
      return m;
  return NULL;
}

static int in_mr(const struct mmr *m, uint64_t addr, uint64_t len) {
  uint64_t b = (uintptr_t)m->mr.addr;
  return addr >= b && len <= m->mr.length && addr - b <= m->mr.length - len;
}

static const unsigned rnr_timer_us[32] = {
    655360, 10,   20,   30,   40,   60,    80,    120,   160,   240,   320,
    480,    640,  960,  1280, 1920, 2560,  3840,  5120,  7680,  10240, 15360,
    20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};

enum { APPLIED, RNR, NOT_READY };

/* Under n->lock. Returns RNR when the operation needs a receive WR and none
 * is posted; otherwise the status for the sender in *st. */
static int apply(struct mnic *n, const struct wire *h, const uint8_t *payload, enum ibv_wc_status *st) {
  struct mqp *q = NULL;
  for (struct mqp *x = n->qps; x; x = x->next)
    if (x->qp.qp_num == h->dst_qpn)
      q = x;
  /* Not yet ready to receive (RESET/INIT): a real responder drops the
   * packets and the requester retransmits; the QP may get to RTR in time. */
  if (q && (q->attr.qp_state == IBV_QPS_RESET || q->attr.qp_state == IBV_QPS_INIT))
    return NOT_READY;
  /* No such QP, broken, or not connected to the sender: dropped, and the
   * requester's retries run out (at once: the mock does not wait them out). */
  if (!q || q->attr.qp_state == IBV_QPS_ERR || q->attr.dest_qp_num != h->src_qpn ||
      memcmp(q->attr.ah_attr.grh.dgid.raw, h->src_gid, 16)) {
    *st = IBV_WC_RETRY_EXC_ERR;
    return APPLIED;
  }
  int is_write = h->op == W_WRITE || h->op == W_WRITE_IMM;
  if (is_write && h->len) {
    struct mmr *m = mr_by_key(n, h->rkey, 1);
    if (!m || !(m->access & IBV_ACCESS_REMOTE_WRITE) || !(q->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) ||
        m->mr.pd != q->qp.pd || !in_mr(m, h->raddr, h->len)) {
      qp_to_error(n, q);
      *st = IBV_WC_REM_ACCESS_ERR;
      return APPLIED;
    }
  }
  if (h->op != W_WRITE && q->rq_count == 0)
    return RNR;
  if (is_write && h->len)
    memcpy((void *)(uintptr_t)h->raddr, payload, h->len);
  if (h->op == W_WRITE) {
    *st = IBV_WC_SUCCESS;
    return APPLIED;
  }
  struct rwr r = q->rq[q->rq_head];
  q->rq_head = (q->rq_head + 1) % (int)q->cap.max_recv_wr;
  q->rq_count--;
  if (r.preset != IBV_WC_SUCCESS) {
    recv_done(n, q, &r, r.preset);
    qp_to_error(n, q);
    *st = IBV_WC_REM_OP_ERR;
    return APPLIED;
  }
  struct ibv_wc wc = {.wr_id = r.wr_id, .status = IBV_WC_SUCCESS, .byte_len = h->len, .qp_num = q->qp.qp_num,
                      .src_qp = h->src_qpn};
  if (is_write) {
    wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
  } else {
    uint64_t room = 0;
    for (int i = 0; i < r.nsge; i++)
      room += r.sge[i].length;
    if (room < h->len) {
      recv_done(n, q, &r, IBV_WC_LOC_LEN_ERR);
      qp_to_error(n, q);
      *st = IBV_WC_REM_INV_REQ_ERR;
      return APPLIED;
    }
    size_t off = 0;
    for (int i = 0; i < r.nsge && off < h->len; i++) {
      size_t k = h->len - off < r.sge[i].length ? h->len - off : r.sge[i].length;
      memcpy((void *)(uintptr_t)r.sge[i].addr, payload + off, k);
      off += k;
    }
    wc.opcode = IBV_WC_RECV;
  }
  if (h->op != W_SEND) {
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.imm_data = h->imm; /* as sent: network order, as real verbs */
  }
  cq_push(n, CQ(q->qp.recv_cq), &wc);
  *st = IBV_WC_SUCCESS;
  return APPLIED;
}

static void send_ack(struct conn *c, uint64_t seq, enum ibv_wc_status st) {
  if (st != IBV_WC_SUCCESS)
    TRACE("qpn %#x <- qpn %#x seq %llu op %u: %s", (int)getpid(), c->hdr.dst_qpn, c->hdr.src_qpn,
          (unsigned long long)seq, c->hdr.op, ibv_wc_status_str(st));
  struct obuf *b = malloc(sizeof *b + sizeof(struct ack));
  if (!b) {
    c->dead = 1; /* the sender sees the connection drop: retries exhausted */
    return;
  }
  struct ack a = {.seq = seq, .status = (uint32_t)st};
  memcpy(b + 1, &a, sizeof a);
  b->len = sizeof a;
  if (conn_send(c, b)) {
    TRACE("ack to qpn %#x failed (%s)", (int)getpid(), c->hdr.src_qpn, strerror(errno));
    c->dead = 1; /* the sender is gone */
  }
}

/* Under n->lock: a fresh message, or a held one tried again. A message
 * that cannot be applied yet (RNR, or the target QP not at RTR) is held —
 * nothing more is read from its connection, which keeps the QP's order —
 * until it applies or the sender's retry budget runs out. */
static void handle_msg(struct mnic *n, struct conn *c) {
  enum ibv_wc_status st;
  int v = apply(n, &c->hdr, c->buf, &st);
  if (v == APPLIED) {
    c->held = 0;
    send_ack(c, c->hdr.seq, st);
    return;
  }
  if (c->held != v) {
    uint64_t wait_us;
    if (v == RNR) {
      struct mqp *q = NULL;
      for (struct mqp *x = n->qps; x; x = x->next)
        if (x->qp.qp_num == c->hdr.dst_qpn)
          q = x;
      uint32_t retry = c->hdr.rnr_retry;
      if (retry == 0) {
        c->held = 0;
        send_ack(c, c->hdr.seq, IBV_WC_RNR_RETRY_EXC_ERR);
        return;
      }
      wait_us = retry == 7 ? 0 : retry * (uint64_t)rnr_timer_us[q->attr.min_rnr_timer & 31];
    } else {
      /* Local ACK timeout 4.096 us * 2^timeout, retry_cnt retransmissions. */
      uint32_t t = c->hdr.timeout & 31;
      wait_us = t == 0 ? 0 : (c->hdr.retry_cnt + 1) * ((4096ull << t) / 1000);
    }
    c->held = v;
    c->deadline_us = wait_us ? now_us() + wait_us : 0;
    return;
  }
  if (c->deadline_us && now_us() >= c->deadline_us) {
    c->held = 0;
    send_ack(c, c->hdr.seq, v == RNR ? IBV_WC_RNR_RETRY_EXC_ERR : IBV_WC_RETRY_EXC_ERR);
  }
}

/* Under n->lock: an ack for the oldest outstanding send of c's QP. */
static void handle_ack(struct mnic *n, struct conn *c, const struct ack *a) {
  struct mqp *q = c->qp;
  if (!q || q->attr.qp_state == IBV_QPS_ERR || !q->sq_count || q->sq[q->sq_head].seq != a->seq)
    return;
  enum ibv_wc_status st = (enum ibv_wc_status)a->status;
  if (st == IBV_WC_SUCCESS && fiu_fail("eccl/mock_ibv/qp_error")) {
    qp_to_error(n, q); /* broke mid-transfer: the data landed, the WR flushes */
    return;
  }
  if (st == IBV_WC_SUCCESS && fiu_fail("eccl/mock_ibv/completion_error"))
    st = IBV_WC_GENERAL_ERR;
  struct swr w = q->sq[q->sq_head];
  sq_pop(q);
  send_done(n, q, &w, st);
  if (st != IBV_WC_SUCCESS)
    qp_to_error(n, q);
  drain_local(n, q);
}

/* Under n->lock: c's target NIC vanished. Outstanding sends: retries
 * exhausted. None: the next post finds out. */
static void out_gone(struct mnic *n, struct conn *c) {
  TRACE("connection of qpn %#x lost (%s)", (int)getpid(), c->qp ? c->qp->qp.qp_num : 0, strerror(errno));
  c->eof = 1;
  if (c->qp) {
    c->qp->peer_gone = 1;
    if (c->qp->sq_count)
      qp_fail(n, c->qp, IBV_WC_RETRY_EXC_ERR);
  }
}

/* Under n->lock: reads what is there, never blocks. Returns -1 at EOF or on
 * an error. Inbound: whole messages, each applied as it completes, until one
 * is held. Outbound: acks. */
static int conn_read(struct mnic *n, struct conn *c) {
  for (int budget = 64; budget > 0 && !c->held && !c->dead; budget--) {
    uint8_t *dst;
    size_t want;
    size_t hsz = c->inbound ? sizeof c->hdr : sizeof c->ack;
    if (c->got < hsz) {
      dst = (uint8_t *)(c->inbound ? (void *)&c->hdr : (void *)&c->ack) + c->got;
      want = hsz - c->got;
    } else {
      dst = c->buf + (c->got - hsz);
      want = hsz + c->hdr.len - c->got;
    }
    ssize_t r = want ? read(c->fd, dst, want) : 0;
    if (want && r < 0 && errno == EINTR)
      continue;
    if (want && r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    if (want && r <= 0)
      return -1;
    c->got += (size_t)(want ? r : 0);
    if (c->got < hsz)
      continue;
    if (!c->inbound) {
      c->got = 0;
      handle_ack(n, c, &c->ack);
      continue;
    }
    if (c->got == hsz && c->hdr.len) { /* header complete: room for the payload */
      if (c->hdr.magic != WIRE_MAGIC || c->hdr.len > MAX_MSG)
        return -1;
      if (c->hdr.len > c->bufcap) {
        free(c->buf);
        c->buf = malloc(c->hdr.len);
        c->bufcap = c->buf ? c->hdr.len : 0;
        if (!c->buf)
          return -1;
      }
      continue;
    }
    if (c->got < hsz + c->hdr.len)
      continue;
    if (c->hdr.magic != WIRE_MAGIC)
      return -1;
    c->got = 0;
    handle_msg(n, c);
  }
  return 0;
}

static void *service(void *arg) {
  struct mnic *n = arg;
  struct pollfd *pfd = NULL;
  struct conn **pc = NULL;
  size_t cap = 0;
  pthread_mutex_lock(&n->lock);
  while (!n->stop) {
    size_t k = 0, nconn = 0;
    int timeout = -1;
    uint64_t now = now_us();
    for (struct conn **pp = &n->conns; *pp;) {
      struct conn *c = *pp;
      if (c->dead) {
        *pp = c->next;
        conn_free(c);
        continue;
      }
      if (c->held) {
        handle_msg(n, c);
        if (c->held && c->deadline_us) {
          uint64_t ms = (c->deadline_us > now ? c->deadline_us - now : 0) / 1000 + 1;
          if (timeout < 0 || ms < (uint64_t)timeout)
            timeout = (int)ms;
        }
        if (!c->held && c->inbound && conn_read(n, c)) /* what waited behind it */
          c->dead = 1;
      }
      nconn++;
      pp = &c->next;
    }
    if (nconn + 2 > cap) {
      cap = 2 * (nconn + 2);
      pfd = realloc(pfd, cap * sizeof *pfd);
      pc = realloc(pc, cap * sizeof *pc);
      if (!pfd || !pc)
        abort();
    }
    pfd[k++] = (struct pollfd){.fd = n->wake[0], .events = POLLIN};
    pfd[k++] = (struct pollfd){.fd = n->lfd, .events = POLLIN};
    for (struct conn *c = n->conns; c; c = c->next) {
      short ev = (short)((!c->held && !c->eof ? POLLIN : 0) | (c->out && !c->eof ? POLLOUT : 0));
      if (ev && !c->dead) {
        pc[k] = c;
        pfd[k++] = (struct pollfd){.fd = c->fd, .events = ev};
      }
    }
    pthread_mutex_unlock(&n->lock);
    int r = poll(pfd, k, timeout);
    pthread_mutex_lock(&n->lock);
    if (r <= 0)
      continue;
    if (pfd[0].revents) {
      char buf[64];
      while (read(n->wake[0], buf, sizeof buf) > 0)
        ;
    }
    if (pfd[1].revents & POLLIN) {
      int fd = accept4(n->lfd, NULL, NULL, SOCK_CLOEXEC);
      struct conn *c = fd >= 0 ? conn_new(fd, NULL) : NULL;
      if (c) {
        c->next = n->conns;
        n->conns = c;
      } else if (fd >= 0) {
        close(fd);
      }
    }
    for (size_t i = 2; i < k; i++) {
      struct conn *c = pc[i];
      if (!pfd[i].revents || c->dead || c->eof)
        continue;
      int bad = (pfd[i].revents & POLLOUT) && conn_flush(c);
      if (!bad && (pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
        bad = conn_read(n, c);
      if (!bad)
        continue;
      if (c->inbound) {
        TRACE("inbound connection closed (got %zu, len %u, %s)", (int)getpid(), c->got, c->hdr.len, strerror(errno));
        c->dead = 1; /* the sender closed (QP destroyed, process gone) */
      }
      else
        out_gone(n, c); /* the fd stays until the QP lets go of it */
    }
  }
  pthread_mutex_unlock(&n->lock);
  free(pfd);
  free(pc);
  return NULL;
}

/* ---- contexts ----------------------------------------------------------- */

static void fill_port(struct mnic *n, struct ibv_port_attr *a) {
  memset(a, 0, sizeof *a);
  a->state = n->port_down ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = IBV_MTU_4096;
  a->gid_tbl_len = 1;
  a->port_cap_flags = 0;
  a->max_msg_sz = MAX_MSG;
  a->pkey_tbl_len = 1;
  a->lid = (uint16_t)(n->idx + 1);
  a->sm_lid = 1;
  a->lmc = 0;
  a->max_vl_num = 1;
  a->active_width = 2;  /* 4x */
  a->active_speed = 32; /* EDR */
  a->phys_state = n->port_down ? 3 : 5; /* Disabled / LinkUp */
  a->link_layer = IBV_LINK_LAYER_INFINIBAND;
}

static int port_query(struct mnic *n, uint8_t port, struct ibv_port_attr *a) {
  if (port != 1)
    return EINVAL;
  pthread_mutex_lock(&n->lock);
  if (fiu_fail("eccl/mock_ibv/port_down"))
    nic_port_down(n);
  else
    n->port_down = 0;
  fill_port(n, a);
  pthread_mutex_unlock(&n->lock);
  return 0;
}

static int query_port_op(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *a, size_t len) {
  struct ibv_port_attr t;
  int rc = port_query(NIC(ctx), port, &t);
  if (!rc)
    memcpy(a, &t, len < sizeof t ? len : sizeof t);
  return rc;
}

EXPORT int(ibv_query_port)(struct ibv_context *context, uint8_t port_num, struct _compat_ibv_port_attr *port_attr) {
  struct ibv_port_attr t;
  int rc = port_query(NIC(context), port_num, &t);
  if (!rc) /* the old layout: everything before flags */
    memcpy(port_attr, &t, offsetof(struct ibv_port_attr, flags));
  return rc;
}

EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid) {
  if (port_num != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *gid = NIC(context)->gid;
  return 0;
}

EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *a) {
  struct mnic *n = NIC(context);
  memset(a, 0, sizeof *a);
  snprintf(a->fw_ver, sizeof a->fw_ver, "eccl-mock-1");
  a->node_guid = ibv_get_device_guid(context->device);
  a->sys_image_guid = a->node_guid;
  a->max_mr_size = UINT64_MAX;
  a->page_size_cap = 0xfffff000;
  a->vendor_id = 0xEC;
  a->vendor_part_id = (uint32_t)n->idx;
  a->max_qp = 1 << 16;
  a->max_qp_wr = MAX_WR;
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN;
  a->max_sge = MAX_SGE;
  a->max_cq = 1 << 16;
  a->max_cqe = MAX_CQE;
  a->max_mr = 1 << 20;
  a->max_pd = 1 << 16;
  a->max_qp_rd_atom = 16;
  a->max_qp_init_rd_atom = 16;
  a->atomic_cap = IBV_ATOMIC_NONE;
  a->max_pkeys = 1;
  a->phys_port_cnt = 1;
  return 0;
}

static void sweep_stale(const char *dir);
static int post_send_op(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int post_recv_op(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device) {
  pthread_once(&g_once, devs_init);
  int idx = (int)(device - g_devs);
  if (idx < 0 || idx >= g_ndevs) {
    errno = ENODEV;
    return NULL;
  }
  struct mnic *n = calloc(1, sizeof *n);
  if (!n) {
    errno = ENOMEM;
    return NULL;
  }
  unsigned gen = atomic_fetch_add(&g_gen, 1);
  uint32_t pid = (uint32_t)getpid();
  n->idx = idx;
  n->lfd = n->wake[0] = n->wake[1] = -1;
  n->gid.raw[0] = 0xfe;
  n->gid.raw[1] = 0x80;
  n->gid.raw[2] = 0xec;
  n->gid.raw[3] = 0xc1;
  for (int i = 0; i < 4; i++)
    n->gid.raw[8 + i] = (uint8_t)(pid >> (24 - 8 * i));
  n->gid.raw[12] = (uint8_t)(idx >> 8);
  n->gid.raw[13] = (uint8_t)idx;
  n->gid.raw[14] = (uint8_t)(gen >> 8);
  n->gid.raw[15] = (uint8_t)gen;
  n->next_qpn = ((pid & 0xff) << 16) | ((gen & 0xff) << 8) | 0x11;
  n->next_key = (pid << 12) ^ (gen << 20) ^ 0x1000u;
  pthread_mutex_init(&n->lock, NULL);

  char dir[80];
  const char *d = getenv("ECCL_MOCK_IBV_DIR");
  if (!d || !*d) {
    snprintf(dir, sizeof dir, "/tmp/eccl-mock-ibv-%u", (unsigned)getuid());
    d = dir;
  }
  if (mkdir(d, 0700) && errno != EEXIST)
    goto fail;
  sweep_stale(d);
  int w = snprintf(n->path, sizeof n->path, "%s/", d);
  if (w < 0 || (size_t)w + 33 > sizeof n->path) {
    errno = ENAMETOOLONG;
    goto fail;
  }
  for (int i = 0; i < 16; i++)
    w += snprintf(n->path + w, sizeof n->path - (size_t)w, "%02x", n->gid.raw[i]);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, n->path, sizeof n->path);
  n->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (n->lfd < 0)
    goto fail;
  unlink(n->path); /* a stale file from a dead process that had our pid */
  if (bind(n->lfd, (struct sockaddr *)&sa, sizeof sa) || listen(n->lfd, 128))
    goto fail;
  if (pipe2(n->wake, O_CLOEXEC | O_NONBLOCK))
    goto fail;

  struct ibv_context *c = &n->vctx.context;
  c->device = device;
  c->cmd_fd = -1;
  c->async_fd = -1;
  c->num_comp_vectors = 1;
  c->abi_compat = __VERBS_ABI_IS_EXTENDED;
  pthread_mutex_init(&c->mutex, NULL);
  c->ops.poll_cq = poll_cq_op;
  c->ops.req_notify_cq = req_notify_op;
  c->ops.post_send = post_send_op;
  c->ops.post_recv = post_recv_op;
  n->vctx.sz = sizeof n->vctx;
  n->vctx.query_port = query_port_op;
  int e = pthread_create(&n->thr, NULL, service, n);
  if (e) {
    errno = e;
    goto fail;
  }
  return c;
fail:
  e = errno;
  if (n->lfd >= 0) {
    close(n->lfd);
    unlink(n->path);
  }
  if (n->wake[0] >= 0) {
    close(n->wake[0]);
    close(n->wake[1]);
  }
  pthread_mutex_destroy(&n->lock);
  free(n);
  errno = e;
  return NULL;
}

static void qp_free(struct mqp *q);

/* Sockets of NICs whose process died without closing them (SIGKILL): the
 * GID's bytes 8..11 are the owner's pid. A connect to a stale one is
 * refused anyway; this only keeps the directory from filling up. */
static void sweep_stale(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d))) {
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)], hex[9];
    if (strlen(e->d_name) != 32 || strspn(e->d_name, "0123456789abcdef") != 32)
      continue;
    memcpy(hex, e->d_name + 16, 8);
    hex[8] = 0;
    pid_t pid = (pid_t)strtoul(hex, NULL, 16);
    if (pid > 0 && kill(pid, 0) && errno == ESRCH &&
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path)
      unlink(path);
  }
  closedir(d);
}

EXPORT int ibv_close_device(struct ibv_context *context) {
  struct mnic *n = NIC(context);
  pthread_mutex_lock(&n->lock);
  n->stop = 1;
  pthread_mutex_unlock(&n->lock);
  wake(n);
  pthread_join(n->thr, NULL);
  /* Acks still queued are owed to senders whose data was applied: deliver
   * them (for up to a second in all: a stopped peer must not hang close). */
  uint64_t end = now_us() + 1000000;
  for (struct conn *c = n->conns; c; c = c->next)
    while (c->out && !c->dead && !c->eof) {
      uint64_t t = now_us();
      struct pollfd p = {.fd = c->fd, .events = POLLOUT};
      if (t >= end || poll(&p, 1, (int)((end - t) / 1000) + 1) <= 0 || conn_flush(c))
        break;
    }
  /* Whatever the application did not destroy goes with the device. */
  while (n->conns) {
    struct conn *c = n->conns;
    n->conns = c->next;
    conn_free(c);
  }
  while (n->qps) {
    struct mqp *q = n->qps;
    n->qps = q->next;
    qp_free(q);
  }
  while (n->cqs) {
    struct mcq *c = n->cqs;
    n->cqs = c->next;
    free(c->ring);
    free(c);
  }
  while (n->mrs) {
    struct mmr *m = n->mrs;
    n->mrs = m->next;
    free(m);
  }
  close(n->lfd);
  unlink(n->path);
  close(n->wake[0]);
  close(n->wake[1]);
  pthread_mutex_destroy(&n->lock);
  pthread_mutex_destroy(&context->mutex);
  free(n);
  return 0;
}

/* ---- PDs and MRs ---------------------------------------------------------- */

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context) {
  struct ibv_pd *pd = calloc(1, sizeof *pd);
  if (!pd) {
    errno = ENOMEM;
    return NULL;
  }
  pd->context = context;
  return pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd) {
  struct mnic *n = NIC(pd->context);
  pthread_mutex_lock(&n->lock);
  int busy = 0;
  for (struct mmr *m = n->mrs; m; m = m->next)
    busy |= m->mr.pd == pd;
  for (struct mqp *q = n->qps; q; q = q->next)
    busy |= q->qp.pd == pd;
  pthread_mutex_unlock(&n->lock);
  if (busy)
    return EBUSY;
  free(pd);
  return 0;
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                       unsigned int access) {
  struct mnic *n = NIC(pd->context);
  /* Remote write needs local write (verbs spec); iova must be the address:
   * the mock fabric addresses remote memory by virtual address. */
  if (!addr || !length || iova != (uintptr_t)addr ||
      ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))) {
    errno = EINVAL;
    return NULL;
  }
  struct mmr *m = calloc(1, sizeof *m);
  if (!m) {
    errno = ENOMEM;
    return NULL;
  }
  m->access = (int)access;
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  pthread_mutex_lock(&n->lock);
  n->next_key += 0x101;
  if (n->next_key == 0)
    n->next_key = 0x101;
  m->mr.lkey = m->mr.rkey = n->next_key;
  m->mr.handle = n->next_key;
  m->next = n->mrs;
  n->mrs = m;
  pthread_mutex_unlock(&n->lock);
  return &m->mr;
}

EXPORT struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr) {
  struct mnic *n = NIC(mr->context);
  pthread_mutex_lock(&n->lock);
  for (struct mmr **pp = &n->mrs; *pp; pp = &(*pp)->next)
    if (&(*pp)->mr == mr) {
      struct mmr *m = *pp;
      *pp = m->next;
      pthread_mutex_unlock(&n->lock);
      free(m);
      return 0;
    }
  pthread_mutex_unlock(&n->lock);
  return EINVAL;
}

/* ---- QPs ------------------------------------------------------------------ */

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia) {
  struct mnic *n = NIC(pd->context);
  struct ibv_qp_cap *cap = &ia->cap;
  if (ia->qp_type != IBV_QPT_RC || ia->srq || !ia->send_cq || !ia->recv_cq ||
      ia->send_cq->context != pd->context || ia->recv_cq->context != pd->context || cap->max_send_wr < 1 ||
      cap->max_recv_wr < 1 || cap->max_send_wr > MAX_WR || cap->max_recv_wr > MAX_WR ||
      cap->max_send_sge > MAX_SGE || cap->max_recv_sge > MAX_SGE || cap->max_inline_data > MAX_INLINE) {
    errno = ia->qp_type != IBV_QPT_RC || ia->srq ? EOPNOTSUPP : EINVAL;
    return NULL;
  }
  struct mqp *q = calloc(1, sizeof *q);
  if (!q) {
    errno = ENOMEM;
    return NULL;
  }
  if (cap->max_send_sge < 1)
    cap->max_send_sge = 1;
  if (cap->max_recv_sge < 1)
    cap->max_recv_sge = 1;
  q->cap = *cap;
  q->sq = calloc(cap->max_send_wr, sizeof *q->sq);
  q->rq = calloc(cap->max_recv_wr, sizeof *q->rq);
  if (!q->sq || !q->rq) {
    free(q->sq);
    free(q->rq);
    free(q);
    errno = ENOMEM;
    return NULL;
  }
  q->sq_sig_all = ia->sq_sig_all;
  q->qp.context = pd->context;
  q->qp.qp_context = ia->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = ia->send_cq;
  q->qp.recv_cq = ia->recv_cq;
  q->qp.qp_type = IBV_QPT_RC;
  q->qp.state = IBV_QPS_RESET;
  q->attr.qp_state = IBV_QPS_RESET;
  pthread_mutex_init(&q->qp.mutex, NULL);
  pthread_cond_init(&q->qp.cond, NULL);
  pthread_mutex_lock(&n->lock);
  q->qp.qp_num = n->next_qpn++ & 0xffffff;
  q->qp.handle = q->qp.qp_num;
  q->next = n->qps;
  n->qps = q;
  pthread_mutex_unlock(&n->lock);
  return &q->qp;
}

static void qp_free(struct mqp *q) {
  pthread_mutex_destroy(&q->qp.mutex);
  pthread_cond_destroy(&q->qp.cond);
  free(q->sq);
  free(q->rq);
  free(q);
}

/* Under n->lock: the connection goes to the service thread, which closes
 * it (poll may be watching its fd right now). */
static void qp_disconnect(struct mnic *n, struct mqp *q) {
  if (q->out) {
    q->out->qp = NULL;
    q->out->dead = 1;
    shutdown(q->out->fd, SHUT_RDWR);
    q->out = NULL;
    wake(n);
  }
  q->peer_gone = 0;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp) {
  struct mqp *q = QP(qp);
  struct mnic *n = NIC(qp->context);
  pthread_mutex_lock(&n->lock);
  qp_disconnect(n, q);
  for (struct mqp **pp = &n->qps; *pp; pp = &(*pp)->next)
    if (*pp == q) {
      *pp = q->next;
      break;
    }
  pthread_mutex_unlock(&n->lock);
  qp_free(q);
  return 0;
}

#define NEED(m) (((mask) & (m)) == (m))

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
  struct mqp *q = QP(qp);
  struct mnic *n = NIC(qp->context);
  int rc = EINVAL;
  pthread_mutex_lock(&n->lock);
  enum ibv_qp_state cur = q->attr.qp_state, to = (mask & IBV_QP_STATE) ? a->qp_state : cur;
  if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != cur)
    goto out;
  if (to == IBV_QPS_RESET) {
    qp_disconnect(n, q);
    q->sq_head = q->sq_count = q->rq_head = q->rq_count = 0;
    q->doomed = 0;
    memset(&q->attr, 0, sizeof q->attr);
    q->attr.qp_state = IBV_QPS_RESET;
    q->qp.state = IBV_QPS_RESET;
    rc = 0;
    goto out;
  }
  if (to == IBV_QPS_ERR) {
    qp_to_error(n, q);
    rc = 0;
    goto out;
  }
  if (cur == IBV_QPS_RESET && to == IBV_QPS_INIT) {
    if (!NEED(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) || a->port_num != 1 || a->pkey_index != 0)
      goto out;
  } else if (cur == IBV_QPS_INIT && to == IBV_QPS_INIT) {
    if ((mask & IBV_QP_PORT) && a->port_num != 1)
      goto out;
  } else if (cur == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    /* The mock fabric routes by GID: is_global is required (as on RoCE). */
    if (!NEED(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
              IBV_QP_MIN_RNR_TIMER) ||
        !a->ah_attr.is_global || a->ah_attr.grh.sgid_index != 0 || a->path_mtu < IBV_MTU_256 ||
        a->path_mtu > IBV_MTU_4096 || a->min_rnr_timer > 31 || (a->ah_attr.port_num && a->ah_attr.port_num != 1))
      goto out;
  } else if ((cur == IBV_QPS_RTR || cur == IBV_QPS_RTS) && to == IBV_QPS_RTS) {
    if (cur == IBV_QPS_RTR &&
        !NEED(IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
      goto out;
    if (((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) || ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) ||
        ((mask & IBV_QP_TIMEOUT) && a->timeout > 31))
      goto out;
  } else {
    goto out;
  }
  struct ibv_qp_attr *s = &q->attr;
  if (mask & IBV_QP_ACCESS_FLAGS)
    s->qp_access_flags = a->qp_access_flags;
  if (mask & IBV_QP_PKEY_INDEX)
    s->pkey_index = a->pkey_index;
  if (mask & IBV_QP_PORT)
    s->port_num = a->port_num;
  if (mask & IBV_QP_AV)
    s->ah_attr = a->ah_attr;
  if (mask & IBV_QP_PATH_MTU)
    s->path_mtu = a->path_mtu;
  if (mask & IBV_QP_DEST_QPN)
    s->dest_qp_num = a->dest_qp_num;
  if (mask & IBV_QP_RQ_PSN)
    s->rq_psn = a->rq_psn;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
    s->max_dest_rd_atomic = a->max_dest_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER)
    s->min_rnr_timer = a->min_rnr_timer;
  if (mask & IBV_QP_SQ_PSN)
    s->sq_psn = a->sq_psn;
  if (mask & IBV_QP_TIMEOUT)
    s->timeout = a->timeout;
  if (mask & IBV_QP_RETRY_CNT)
    s->retry_cnt = a->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY)
    s->rnr_retry = a->rnr_retry;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
    s->max_rd_atomic = a->max_rd_atomic;
  s->qp_state = to;
  q->qp.state = to;
  rc = 0;
  wake(n); /* a held message may be waiting for this QP to reach RTR */
out:
  pthread_mutex_unlock(&n->lock);
  return rc;
}

EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *ia) {
  struct mqp *q = QP(qp);
  struct mnic *n = NIC(qp->context);
  pthread_mutex_lock(&n->lock);
  *a = q->attr;
  a->cur_qp_state = q->attr.qp_state;
  a->cap = q->cap;
  if (ia) {
    memset(ia, 0, sizeof *ia);
    ia->qp_context = qp->qp_context;
    ia->send_cq = qp->send_cq;
    ia->recv_cq = qp->recv_cq;
    ia->cap = q->cap;
    ia->qp_type = IBV_QPT_RC;
    ia->sq_sig_all = q->sq_sig_all;
  }
  pthread_mutex_unlock(&n->lock);
  return 0;
}

/* ---- posting -------------------------------------------------------------- */

static int connect_to(const struct mnic *n, const union ibv_gid *g) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  char *slash = strrchr(n->path, '/');
  int w = (int)(slash - n->path) + 1;
  memcpy(sa.sun_path, n->path, (size_t)w);
  for (int i = 0; i < 16; i++)
    w += snprintf(sa.sun_path + w, sizeof sa.sun_path - (size_t)w, "%02x", g->raw[i]);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  while (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
    if (errno == EINTR)
      continue;
    close(fd);
    return -1;
  }
  return fd;
}

static int post_send_op(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  struct mqp *q = QP(qp);
  struct mnic *n = NIC(qp->context);
  int rc = 0;
  pthread_mutex_lock(&n->lock);
  if (q->attr.qp_state == IBV_QPS_RTS && fiu_fail("eccl/mock_ibv/port_down"))
    nic_port_down(n);
  if (q->attr.qp_state == IBV_QPS_RTS && !q->out && !q->peer_gone) {
    union ibv_gid g = q->attr.ah_attr.grh.dgid;
    pthread_mutex_unlock(&n->lock); /* connecting to our own NIC needs its thread */
    int fd = connect_to(n, &g);
    pthread_mutex_lock(&n->lock);
    struct conn *c = NULL;
    if (q->attr.qp_state != IBV_QPS_RTS || q->out || q->peer_gone) {
      if (fd >= 0) /* changed meanwhile: another post connected, or a reset */
        close(fd);
      fd = -2;
    } else if (fd >= 0 && (c = conn_new(fd, q))) {
      c->next = n->conns;
      n->conns = c;
      q->out = c;
      wake(n);
    } else if (fd != -2) {
      if (fd >= 0)
        close(fd);
      q->peer_gone = 1; /* nobody listens at that GID */
    }
  }
  for (; wr; wr = wr->next) {
    enum ibv_qp_state st = q->attr.qp_state;
    if (st != IBV_QPS_RTS && st != IBV_QPS_ERR) {
      rc = EINVAL;
      break;
    }
    int op;
    enum ibv_wc_opcode wop;
    switch (wr->opcode) {
    case IBV_WR_RDMA_WRITE: op = W_WRITE; wop = IBV_WC_RDMA_WRITE; break;
    case IBV_WR_RDMA_WRITE_WITH_IMM: op = W_WRITE_IMM; wop = IBV_WC_RDMA_WRITE; break;
    case IBV_WR_SEND: op = W_SEND; wop = IBV_WC_SEND; break;
    case IBV_WR_SEND_WITH_IMM: op = W_SEND_IMM; wop = IBV_WC_SEND; break;
    default: rc = EINVAL; break;
    }
    if (rc)
      break;
    if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->cap.max_send_sge) {
      rc = EINVAL;
      break;
    }
    uint64_t len = 0;
    for (int i = 0; i < wr->num_sge; i++)
      len += wr->sg_list[i].length;
    if ((wr->send_flags & IBV_SEND_INLINE) && len > q->cap.max_inline_data) {
      rc = EINVAL;
      break;
    }
    if (q->sq_count >= (int)q->cap.max_send_wr) {
      rc = ENOMEM;
      break;
    }
    struct swr *w = &q->sq[(q->sq_head + q->sq_count) % (int)q->cap.max_send_wr];
    *w = (struct swr){.wr_id = wr->wr_id, .op = wop, .len = (uint32_t)len, .seq = q->next_seq++,
                      .signaled = q->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED)};
    q->sq_count++;
    if (st == IBV_QPS_ERR) {
      w->local = 1;
      w->preset = IBV_WC_WR_FLUSH_ERR;
      continue;
    }
    enum ibv_wc_status pre = IBV_WC_SUCCESS;
    if (q->doomed) {
      pre = IBV_WC_WR_FLUSH_ERR;
    } else if (len > MAX_MSG) {
      pre = IBV_WC_LOC_LEN_ERR;
    } else if (!(wr->send_flags & IBV_SEND_INLINE)) {
      for (int i = 0; i < wr->num_sge && !pre; i++) {
        struct mmr *m = mr_by_key(n, wr->sg_list[i].lkey, 0);
        if (!m || m->mr.pd != qp->pd || !in_mr(m, wr->sg_list[i].addr, wr->sg_list[i].length))
          pre = IBV_WC_LOC_PROT_ERR;
      }
    }
    if (!pre && q->peer_gone)
      pre = IBV_WC_RETRY_EXC_ERR;
    struct obuf *m = pre ? NULL : malloc(sizeof *m + sizeof(struct wire) + len);
    if (!pre && !m)
      pre = IBV_WC_GENERAL_ERR;
    if (pre) {
      w->local = 1;
      w->preset = pre;
      q->doomed = 1; /* later WRs flush once this one completes */
      continue;
    }
    m->len = sizeof(struct wire) + len;
    struct wire *h = (struct wire *)(m + 1);
    *h = (struct wire){.magic = WIRE_MAGIC, .op = (uint32_t)op, .dst_qpn = q->attr.dest_qp_num,
                         .src_qpn = qp->qp_num, .seq = w->seq, .raddr = wr->wr.rdma.remote_addr,
                         .rkey = wr->wr.rdma.rkey, .len = (uint32_t)len, .imm = wr->imm_data,
                         .rnr_retry = q->attr.rnr_retry, .retry_cnt = q->attr.retry_cnt,
                         .timeout = q->attr.timeout};
    memcpy(h->src_gid, n->gid.raw, 16);
    uint8_t *p = (uint8_t *)(h + 1);
    for (int i = 0; i < wr->num_sge; i++) {
      memcpy(p, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
      p += wr->sg_list[i].length;
    }
    if (conn_send(q->out, m))
      out_gone(n, q->out); /* fails it and what is behind it */
  }
  /* What the socket did not take waits for the service thread, which may
   * be asleep in a poll() that does not watch this socket for POLLOUT. */
  if (q->out && q->out->out)
    wake(n);
  if (rc && bad)
    *bad = wr;
  drain_local(n, q);
  pthread_mutex_unlock(&n->lock);
  return rc;
}

static int post_recv_op(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  struct mqp *q = QP(qp);
  struct mnic *n = NIC(qp->context);
  int rc = 0;
  pthread_mutex_lock(&n->lock);
  for (; wr; wr = wr->next) {
    if (q->attr.qp_state == IBV_QPS_RESET) {
      rc = EINVAL;
      break;
    }
    if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->cap.max_recv_sge) {
      rc = EINVAL;
      break;
    }
    if (q->rq_count >= (int)q->cap.max_recv_wr) {
      rc = ENOMEM;
      break;
    }
    struct rwr r = {.wr_id = wr->wr_id, .nsge = wr->num_sge};
    for (int i = 0; i < wr->num_sge; i++) {
      r.sge[i] = wr->sg_list[i];
      struct mmr *m = mr_by_key(n, wr->sg_list[i].lkey, 0);
      if (!m || m->mr.pd != qp->pd || !(m->access & IBV_ACCESS_LOCAL_WRITE) ||
          !in_mr(m, wr->sg_list[i].addr, wr->sg_list[i].length))
        r.preset = IBV_WC_LOC_PROT_ERR; /* reported when a message consumes it */
    }
    if (q->attr.qp_state == IBV_QPS_ERR) {
      recv_done(n, q, &r, IBV_WC_WR_FLUSH_ERR);
      continue;
    }
    q->rq[(q->rq_head + q->rq_count) % (int)q->cap.max_recv_wr] = r;
    q->rq_count++;
  }
  if (rc && bad)
    *bad = wr;
  pthread_mutex_unlock(&n->lock);
  wake(n); /* a message may be waiting (RNR) for this receive */
  return rc;
}

EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status) {
  static const char *const s[] = {
      [IBV_WC_SUCCESS] = "success",
      [IBV_WC_LOC_LEN_ERR] = "local length error",
      [IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
      [IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
      [IBV_WC_LOC_PROT_ERR] = "local protection error",
      [IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
      [IBV_WC_MW_BIND_ERR] = "memory management operation error",
      [IBV_WC_BAD_RESP_ERR] = "bad response error",
      [IBV_WC_LOC_ACCESS_ERR] = "local access error",
      [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
      [IBV_WC_REM_ACCESS_ERR] = "remote access error",
      [IBV_WC_REM_OP_ERR] = "remote operation error",
      [IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
      [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
      [IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
      [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
      [IBV_WC_REM_ABORT_ERR] = "aborted error",
      [IBV_WC_INV_EECN_ERR] = "invalid EE context number",
      [IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
      [IBV_WC_FATAL_ERR] = "fatal error",
      [IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
      [IBV_WC_GENERAL_ERR] = "general error",
      [IBV_WC_TM_ERR] = "TM error",
      [IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
  };
  if ((unsigned)status >= sizeof s / sizeof *s || !s[status])
    return "unknown";
  return s[status];
}
