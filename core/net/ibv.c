/* eccl_net_ops over RC queue pairs, with the stream part delegated to a
 * stream net: net_ibv's protocol, shared by the real backend (libibverbs
 * over net_tcp, backends/real/net_ibv.c) and the simulator (a simulated NIC
 * over net_sg, backends/sim/verbs_sg.c). See ibv.h for what they lend it.
 *
 * A conn to an "ibv:HOST:PORT" address is a TCP stream plus `nqps` RC queue
 * pairs on one completion queue. The stream carries core's frames and, first
 * of all, one hello each way (queue pair numbers, GID, LID, the address and
 * rkey of the clear-to-send FIFO), so connection set-up needs no other
 * channel. A bulk message (eccl_net_ops.isend/irecv) then moves like this:
 *
 *   receiver: irecv(buf) registers buf, writes a CTS {addr, rkey, len, seq,
 *             chunks} into the sender's FIFO slot seq % FIFO_SLOTS with
 *             RDMA_WRITE_WITH_IMM (imm: NOTIFY | seq)
 *   sender:   the CTS's completion names the slot; the isend with that seq
 *             is written straight from the caller's buffer into buf, in
 *             `chunks` pieces spread over the queue pairs, each an
 *             RDMA_WRITE_WITH_IMM (imm: chunk << 24 | seq)
 *   receiver: counts the pieces of seq as their completions come in, in
 *             whatever order the queue pairs deliver them; done when all
 *             have landed and their bytes add up to len.
 *
 * Zero copies on either side; the CTS is the credit (a sender writes only
 * where a receiver said it may), so back-pressure needs nothing more; at most
 * FIFO_SLOTS receives are outstanding per conn. imm carries the low 24 bits
 * of seq: a write of any other seq than the oldest outstanding ones is a
 * protocol error, and a write of an earlier connection cannot arrive at all
 * (its queue pairs are destroyed, and ours accept only the peer's).
 *
 * Failure: a completion with an error status, a queue pair in ERROR (a
 * port going down puts them all there), a closed stream or a failed post
 * break the conn: every later call on it returns ECCL_ERR_CLOSED, which core
 * reads as the peer being lost. Closing a conn destroys its queue pairs
 * first: once ibv_destroy_qp returns, the NIC writes nothing more for them,
 * so no bulk write can land in a buffer after close (core closes links
 * before a failed call returns and restores the buffer).
 *
 * Threading is the stream net's: calls on one env are serialised, except
 * wait and wake, which are the stream net's own (the port's watch_channel
 * makes it report a conn's user pointer when its completion channel has an
 * event).
 */
#include "net/ibv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/addr.h"
#include "util/config.h"
#include "util/log.h"

#define QPS_MAX 16
#define FIFO_SLOTS 16 /* clear-to-sends outstanding per conn */
#define SQ_DEPTH 64   /* per queue pair */
#define RQ_DEPTH 64   /* receives kept posted per queue pair */
#define IMM_NOTIFY 0x80000000u
#define IMM_SEQ_MASK 0x00ffffffu
#define HELLO_MAGIC "ECIB"
#define HELLO_VERSION 1

#define DEFAULT_QPS 4
#define DEFAULT_MIN_BYTES 8192
#define DEFAULT_CHUNK_BYTES (128u << 10)

/* Immediate data travels in network byte order (verbs' imm_data is
 * __be32); <endian.h>'s htobe32 is a glibc extension core does not use. */
static uint32_t be32_from_host(uint32_t x)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return __builtin_bswap32(x);
#else
    return x;
#endif
}
#define be32_to_host be32_from_host


/* ---- state ------------------------------------------------------------------ */

/* A registration; with ECCL_IB_REG_CACHE it outlives the transfer. */
typedef struct reg {
    struct reg *next;
    struct ibv_mr *mr;
    const uint8_t *base;
    size_t len;
    int access;
    int refs;
    uint64_t used; /* LRU stamp */
} reg;

typedef struct ibv_ctx {
    eccl_env *env;
    eccl_ibv_port p; /* the stream net and the readiness hooks */
    eccl_verbs v;
    eccl_ibv_device d; /* d.name points at `name` */
    int nqps;
    size_t min_bytes, chunk_bytes;
    int cache_max; /* registrations kept after use; 0 = none */
    int cached;
    uint64_t clock;
    reg *regs;
    char name[64];
} ibv_ctx;

/* The hello each side writes first on an RDMA conn (little-endian). */
typedef struct hello {
    char magic[4];
    uint8_t version, nqps;
    uint16_t lid;
    uint8_t gid[16];
    uint32_t qpn[QPS_MAX];
    uint64_t fifo_addr;
    uint32_t fifo_rkey;
    uint32_t mtu;
} hello;

/* A clear-to-send, as written into the sender's FIFO. */
typedef struct cts {
    uint64_t addr;
    uint32_t rkey;
    uint32_t len;
    uint32_t seq;
    uint32_t chunks;
} cts;

enum conn_mode { MODE_PLAIN, MODE_HELLO, MODE_READY };

struct eccl_bulk {
    struct eccl_bulk *next; /* isends of the conn, in seq order */
    eccl_conn *c;
    int is_send;
    uint32_t seq;
    uint8_t *buf;
    size_t len;
    reg *r;
    uint32_t chunks;       /* pieces (from the CTS) */
    uint32_t chunks_done;  /* sends: acknowledged; receives: landed */
    size_t bytes_landed;   /* receives */
    int posted;            /* sends: the writes are on the queue pairs */
    int done;
};

struct eccl_conn {
    ibv_ctx *n;
    eccl_conn *s; /* the TCP stream */
    void *user;
    int mode;
    int acceptor;
    int want_read, want_write;
    eccl_result err;
    char addr[ECCL_ADDR_MAX];
    /* set-up */
    hello out, in;
    size_t out_sent, in_got;
    int out_built;
    size_t prefix_len, prefix_pos; /* a plain peer's first bytes, kept in `in` */
    /* verbs */
    int nqps;
    struct ibv_comp_channel *chan;
    struct ibv_cq *cq;
    struct ibv_qp *qp[QPS_MAX];
    cts *fifo, *cts_out; /* the peer writes our FIFO; we write from cts_out */
    struct ibv_mr *fifo_mr, *cts_mr;
    int watching;
    /* sends */
    eccl_bulk *tx_head, *tx_tail;
    uint32_t tx_seq;  /* seq of the next isend */
    uint32_t cts_got; /* clear-to-sends received */
    /* receives */
    eccl_bulk *rx[FIFO_SLOTS];
    uint32_t rx_seq;  /* seq of the next irecv */
    uint32_t rx_free; /* oldest seq whose slot is not yet free */
    eccl_bulk *spare; /* finished requests, reused: no allocation per transfer */
};

struct eccl_listener {
    eccl_listener *s;
    void *user;
};

#define LOG(n, level, ...) ECCL_LOG((n)->env, (level), __VA_ARGS__)

static int failpoint(const ibv_ctx *n, const char *name);

static void conn_break(eccl_conn *c, const char *fmt, const char *what)
{
    if (c->err != ECCL_OK) return;
    c->err = ECCL_ERR_CLOSED;
    char line[192];
    snprintf(line, sizeof line, fmt, what);
    LOG(c->n, ECCL_LOG_WARN, "rdma link to %s lost: %s", c->addr, line);
}

/* ---- registrations ------------------------------------------------------- */

static void reg_free(ibv_ctx *n, reg *r)
{
    n->v.dereg_mr(r->mr);
    free(r);
}

/* A registration covering buf[0..len) with `access`. */
static reg *reg_get(ibv_ctx *n, const void *buf, size_t len, int access)
{
    const uint8_t *b = buf;
    for (reg *r = n->regs; r; r = r->next) {
        if (r->access == access && b >= r->base && b + len <= r->base + r->len) {
            r->refs++;
            r->used = ++n->clock;
            return r;
        }
    }
    if (failpoint(n, "eccl/net_ibv/reg_mr")) return NULL;
    reg *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->mr = n->v.reg_mr(n->d.pd, (void *)buf, len, access);
    if (!r->mr) {
        LOG(n, ECCL_LOG_WARN, "ibv_reg_mr of %zu bytes: %s", len, strerror(errno));
        free(r);
        return NULL;
    }
    r->base = b;
    r->len = len;
    r->access = access;
    r->refs = 1;
    r->used = ++n->clock;
    r->next = n->regs;
    n->regs = r;
    n->cached++;
    return r;
}

/* Drops a use; without a cache (or over its size) unused registrations go,
 * least recently used first. */
static void reg_put(ibv_ctx *n, reg *r)
{
    if (!r) return;
    r->refs--;
    while (n->cached > n->cache_max) {
        reg **victim = NULL;
        for (reg **p = &n->regs; *p; p = &(*p)->next)
            if ((*p)->refs == 0 && (!victim || (*p)->used < (*victim)->used)) victim = p;
        if (!victim) break;
        reg *v = *victim;
        *victim = v->next;
        n->cached--;
        reg_free(n, v);
    }
}

/* ---- queue pairs ------------------------------------------------------------ */

static int post_recv(eccl_conn *c, int i)
{
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = NULL, .num_sge = 0}, *bad;
    return c->n->v.post_recv(c->qp[i], &wr, &bad);
}

/* Completion queue, FIFO and nqps queue pairs in INIT with receives posted. */
static eccl_result conn_verbs_create(eccl_conn *c, int nqps)
{
    ibv_ctx *n = c->n;
    const eccl_verbs *v = &n->v;
    c->nqps = nqps;
    if (failpoint(n, "eccl/net_ibv/create_qp")) return ECCL_ERR_SYSTEM;
    if (!(c->chan = v->create_comp_channel(n->d.dev))) goto fail;
    int cqe = nqps * (SQ_DEPTH + RQ_DEPTH) + 2 * FIFO_SLOTS;
    if (!(c->cq = v->create_cq(n->d.dev, cqe, c, c->chan, 0))) goto fail;
    if (v->req_notify_cq(c->cq, 0)) goto fail;
    c->fifo = calloc(FIFO_SLOTS, sizeof(cts));
    c->cts_out = calloc(FIFO_SLOTS, sizeof(cts));
    if (!c->fifo || !c->cts_out) goto fail;
    c->fifo_mr = v->reg_mr(n->d.pd, c->fifo, FIFO_SLOTS * sizeof(cts),
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    c->cts_mr = v->reg_mr(n->d.pd, c->cts_out, FIFO_SLOTS * sizeof(cts), 0);
    if (!c->fifo_mr || !c->cts_mr) goto fail;
    for (int i = 0; i < nqps; i++) {
        struct ibv_qp_init_attr ia = {
            .send_cq = c->cq,
            .recv_cq = c->cq,
            .cap = {.max_send_wr = SQ_DEPTH, .max_recv_wr = RQ_DEPTH, .max_send_sge = 1,
                    .max_recv_sge = 1},
            .qp_type = IBV_QPT_RC,
        };
        if (!(c->qp[i] = v->create_qp(n->d.pd, &ia))) goto fail;
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                                .pkey_index = 0,
                                .port_num = n->d.port,
                                .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
        if (v->modify_qp(c->qp[i], &a,
                         IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
            goto fail;
        for (int k = 0; k < RQ_DEPTH; k++)
            if (post_recv(c, i)) goto fail;
    }
    if (n->p.watch_channel(n->p.ctx, c->chan, c->user) != ECCL_OK) goto fail;
    c->watching = 1;
    return ECCL_OK;
fail:
    LOG(n, ECCL_LOG_WARN, "rdma resources for %s: %s", c->addr, strerror(errno));
    return ECCL_ERR_SYSTEM;
}

static void conn_verbs_destroy(eccl_conn *c)
{
    ibv_ctx *n = c->n;
    const eccl_verbs *v = &n->v;
    if (c->watching) n->p.unwatch_channel(n->p.ctx, c->chan);
    /* Queue pairs first: after this no write of the peer lands here. */
    for (int i = 0; i < QPS_MAX; i++)
        if (c->qp[i]) v->destroy_qp(c->qp[i]);
    if (c->fifo_mr) v->dereg_mr(c->fifo_mr);
    if (c->cts_mr) v->dereg_mr(c->cts_mr);
    free(c->fifo);
    free(c->cts_out);
    if (c->cq) v->destroy_cq(c->cq);
    if (c->chan) v->destroy_comp_channel(c->chan);
}

static void hello_build(eccl_conn *c)
{
    ibv_ctx *n = c->n;
    memset(&c->out, 0, sizeof c->out);
    memcpy(c->out.magic, HELLO_MAGIC, 4);
    c->out.version = HELLO_VERSION;
    c->out.nqps = (uint8_t)c->nqps;
    c->out.lid = n->d.lid;
    memcpy(c->out.gid, n->d.gid.raw, 16);
    for (int i = 0; i < c->nqps; i++) c->out.qpn[i] = c->qp[i]->qp_num;
    c->out.fifo_addr = (uint64_t)(uintptr_t)c->fifo;
    c->out.fifo_rkey = c->fifo_mr->rkey;
    c->out.mtu = (uint32_t)n->d.mtu;
    c->out_built = 1;
}

/* RTR then RTS, each queue pair to its twin on the peer. */
static eccl_result conn_verbs_connect(eccl_conn *c)
{
    ibv_ctx *n = c->n;
    enum ibv_mtu mtu = c->in.mtu < (uint32_t)n->d.mtu ? (enum ibv_mtu)c->in.mtu : n->d.mtu;
    for (int i = 0; i < c->nqps; i++) {
        struct ibv_qp_attr a = {
            .qp_state = IBV_QPS_RTR,
            .path_mtu = mtu,
            .dest_qp_num = c->in.qpn[i],
            .rq_psn = 0,
            .max_dest_rd_atomic = 1,
            .min_rnr_timer = 12,
            .ah_attr = {.is_global = 1,
                        .dlid = c->in.lid,
                        .port_num = n->d.port,
                        .grh = {.sgid_index = (uint8_t)n->d.gid_index, .hop_limit = 1}},
        };
        memcpy(a.ah_attr.grh.dgid.raw, c->in.gid, 16);
        if (n->v.modify_qp(c->qp[i], &a,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
            goto fail;
        struct ibv_qp_attr s = {.qp_state = IBV_QPS_RTS,
                                .sq_psn = 0,
                                .timeout = 14,
                                .retry_cnt = 7,
                                .rnr_retry = 7,
                                .max_rd_atomic = 1};
        if (n->v.modify_qp(c->qp[i], &s,
                           IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                               IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
            goto fail;
    }
    return ECCL_OK;
fail:
    conn_break(c, "connecting queue pairs: %s", strerror(errno));
    return ECCL_ERR_CLOSED;
}

/* ---- set-up: the hellos ------------------------------------------------- */

static void conn_apply_interest(eccl_conn *c);

static int hello_valid(const eccl_conn *c)
{
    return memcmp(c->in.magic, HELLO_MAGIC, 4) == 0 && c->in.version == HELLO_VERSION &&
           c->in.nqps >= 1 && c->in.nqps <= QPS_MAX &&
           (!c->nqps || c->in.nqps == c->nqps) && c->in.mtu >= IBV_MTU_256 &&
           c->in.mtu <= IBV_MTU_4096;
}

/* Moves the hellos along; ECCL_OK while in progress or done. */
static eccl_result hello_progress(eccl_conn *c)
{
    const eccl_ibv_port *p = &c->n->p;
    eccl_result rc;
    while (c->mode == MODE_HELLO && c->err == ECCL_OK) {
        int moved = 0;
        if (c->out_built && c->out_sent < sizeof c->out) {
            size_t sent = 0;
            eccl_iov iov = {(const uint8_t *)&c->out + c->out_sent, sizeof c->out - c->out_sent};
            rc = p->stream->send(p->stream_ctx, c->s, &iov, 1, &sent);
            if (rc != ECCL_OK) return rc;
            c->out_sent += sent;
            moved |= sent > 0;
        }
        if (c->in_got < sizeof c->in) {
            /* An acceptor reads the magic alone first: a peer without RDMA
             * sends its own frames, which must not be read past. */
            size_t want = c->acceptor && c->in_got < 4 ? 4 - c->in_got : sizeof c->in - c->in_got;
            size_t got = 0;
            rc = p->stream->recv(p->stream_ctx, c->s, (uint8_t *)&c->in + c->in_got, want, &got);
            if (rc != ECCL_OK) return rc;
            c->in_got += got;
            moved |= got > 0;
            if (c->acceptor && c->in_got == 4 && memcmp(c->in.magic, HELLO_MAGIC, 4) != 0) {
                /* A peer without RDMA: plain TCP, its first bytes replayed. */
                c->prefix_len = 4;
                c->mode = MODE_PLAIN;
                conn_apply_interest(c);
                return ECCL_OK;
            }
            if (c->in_got < sizeof c->in) {
                if (!moved) break;
                continue;
            }
            if (!hello_valid(c)) {
                conn_break(c, "%s", "malformed hello");
                return ECCL_ERR_PROTOCOL;
            }
            if (c->acceptor) {
                if ((rc = conn_verbs_create(c, c->in.nqps)) != ECCL_OK) {
                    c->err = ECCL_ERR_CLOSED;
                    return ECCL_ERR_CLOSED;
                }
                hello_build(c);
            }
            if ((rc = conn_verbs_connect(c)) != ECCL_OK) return rc;
            continue; /* the acceptor's hello can go now */
        }
        if (c->out_sent == sizeof c->out) {
            c->mode = MODE_READY;
            LOG(c->n, ECCL_LOG_DEBUG, "rdma link to %s up: %d queue pairs", c->addr, c->nqps);
        } else if (!moved) {
            break;
        }
    }
    conn_apply_interest(c);
    return c->err;
}

/* ---- completions ------------------------------------------------------------ */

static eccl_result post_write(eccl_conn *c, int qp, uint64_t wr_id, const void *src, uint32_t len,
                              uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t imm)
{
    struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)src, .length = len, .lkey = lkey};
    struct ibv_send_wr wr = {.wr_id = wr_id,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                             .send_flags = IBV_SEND_SIGNALED,
                             .imm_data = be32_from_host(imm),
                             .wr = {.rdma = {.remote_addr = raddr, .rkey = rkey}}},
                       *bad;
    int e = 0;
    if (failpoint(c->n, "eccl/net_ibv/post")) e = EIO;
    if (!e) e = c->n->v.post_send(c->qp[qp], &wr, &bad);
    if (e) {
        conn_break(c, "ibv_post_send: %s", strerror(e));
        return ECCL_ERR_CLOSED;
    }
    return ECCL_OK;
}

/* wr_id of a send work request: what it was for. */
#define WR_CTS (1ull << 63)
#define WR_DATA(seq) ((uint64_t)(seq))

/* Writes every isend that has its clear-to-send. */
static void tx_pump(eccl_conn *c)
{
    for (eccl_bulk *b = c->tx_head; b && c->err == ECCL_OK; b = b->next) {
        if (b->posted) continue;
        if ((int32_t)(b->seq - c->cts_got) >= 0) break; /* no CTS yet */
        const cts *t = &c->fifo[b->seq % FIFO_SLOTS];
        if (t->seq != b->seq || t->len != b->len || t->chunks < 1 || t->chunks > (uint32_t)c->nqps) {
            conn_break(c, "%s", "clear-to-send does not match the send (protocol error)");
            return;
        }
        b->chunks = t->chunks;
        size_t piece = b->len / b->chunks;
        for (uint32_t k = 0; k < b->chunks; k++) {
            size_t off = k * piece;
            size_t len = k + 1 == b->chunks ? b->len - off : piece;
            int qp = (int)((b->seq + k) % (uint32_t)c->nqps);
            if (post_write(c, qp, WR_DATA(b->seq), b->buf + off, (uint32_t)len, b->r->mr->lkey,
                           t->addr + off, t->rkey, (k << 24) | (b->seq & IMM_SEQ_MASK)) != ECCL_OK)
                return;
        }
        b->posted = 1;
    }
}

static eccl_bulk *tx_find(eccl_conn *c, uint32_t seq)
{
    for (eccl_bulk *b = c->tx_head; b; b = b->next)
        if (b->seq == seq) return b;
    return NULL;
}

/* The outstanding receive whose seq ends in these 24 bits, or NULL. */
static eccl_bulk *rx_find(eccl_conn *c, uint32_t seq24)
{
    for (uint32_t s = c->rx_free; s != c->rx_seq; s++) {
        eccl_bulk *b = c->rx[s % FIFO_SLOTS];
        if (b && (s & IMM_SEQ_MASK) == seq24) return b;
    }
    return NULL;
}

static void on_completion(eccl_conn *c, const struct ibv_wc *wc)
{
    if (wc->status != IBV_WC_SUCCESS) {
        conn_break(c, "completion error: %s", c->n->v.wc_status_str(wc->status));
        return;
    }
    if (wc->opcode == IBV_WC_RDMA_WRITE) {
        if (wc->wr_id & WR_CTS) return;
        eccl_bulk *b = tx_find(c, (uint32_t)wc->wr_id);
        if (!b) {
            conn_break(c, "%s", "completion of an unknown write");
            return;
        }
        if (++b->chunks_done == b->chunks) b->done = 1;
        return;
    }
    if (wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc->wc_flags & IBV_WC_WITH_IMM)) {
        conn_break(c, "%s", "unexpected completion");
        return;
    }
    int qp = -1;
    for (int i = 0; i < c->nqps; i++)
        if (c->qp[i]->qp_num == wc->qp_num) qp = i;
    if (qp < 0 || post_recv(c, qp)) {
        conn_break(c, "%s", "cannot repost a receive");
        return;
    }
    uint32_t imm = be32_to_host(wc->imm_data);
    if (imm & IMM_NOTIFY) {
        /* The peer's clear-to-send for our next isend. */
        if ((imm & IMM_SEQ_MASK) != (c->cts_got & IMM_SEQ_MASK)) {
            conn_break(c, "%s", "clear-to-send out of sequence");
            return;
        }
        c->cts_got++;
        return;
    }
    eccl_bulk *b = rx_find(c, imm & IMM_SEQ_MASK);
    uint32_t chunk = (imm >> 24) & 0x7f;
    if (!b || b->done || chunk >= b->chunks) {
        conn_break(c, "%s", "write for no outstanding receive (stale or foreign)");
        return;
    }
    b->bytes_landed += wc->byte_len;
    if (++b->chunks_done == b->chunks) {
        if (b->bytes_landed != b->len) {
            conn_break(c, "%s", "pieces do not add up to the message");
            return;
        }
        b->done = 1;
    }
}

/* Takes the completion channel's events and every completion there is. */
static void conn_progress(eccl_conn *c)
{
    if (c->mode != MODE_READY || c->err != ECCL_OK) return;
    ibv_ctx *n = c->n;
    const eccl_verbs *v = &n->v;
    if (n->p.channel_ready(n->p.ctx, c->chan)) {
        struct ibv_cq *cq;
        void *cq_ctx;
        if (v->get_cq_event(c->chan, &cq, &cq_ctx) == 0) v->ack_cq_events(cq, 1);
        if (v->req_notify_cq(c->cq, 0)) {
            conn_break(c, "%s", "cannot arm the completion queue");
            return;
        }
    }
    struct ibv_wc wc[16];
    int got;
    while (c->err == ECCL_OK && (got = v->poll_cq(c->cq, 16, wc)) != 0) {
        if (got < 0) {
            conn_break(c, "%s", "completion queue overflow");
            return;
        }
        for (int i = 0; i < got && c->err == ECCL_OK; i++) on_completion(c, &wc[i]);
    }
    tx_pump(c);
}

/* ---- net ops ------------------------------------------------------------------ */

static void conn_apply_interest(eccl_conn *c)
{
    const eccl_ibv_port *p = &c->n->p;
    int rd = c->want_read, wr = c->want_write;
    if (c->mode == MODE_HELLO) {
        rd = 1;
        wr = c->out_built && c->out_sent < sizeof c->out;
    }
    p->stream->set_interest(p->stream_ctx, c->s, rd, wr);
    /* Waiting on a bulk receive, core stops reading: a peer that closes
     * meanwhile must still be noticed. */
    p->watch_hangup(p->ctx, c->s, c->rx_seq != c->rx_free);
}

static eccl_result ibv_listen(void *ctx, const char *addr, void *user, eccl_listener **out,
                              char *bound)
{
    ibv_ctx *n = ctx;
    eccl_listener *l = calloc(1, sizeof *l);
    if (!l) return ECCL_ERR_NO_MEMORY;
    char plain[ECCL_ADDR_MAX];
    eccl_result rc = n->p.stream->listen(n->p.stream_ctx, addr, user, &l->s, plain);
    if (rc != ECCL_OK) {
        free(l);
        return rc;
    }
    l->user = user;
    char mine[ECCL_ADDR_MAX];
    if (eccl_addr_prefixed(mine, sizeof mine, ECCL_IBV_ADDR_PREFIX, plain) != 0) {
        n->p.stream->close_listener(n->p.stream_ctx, l->s);
        free(l);
        return ECCL_ERR_INVALID_ARG;
    }
    if (bound) memcpy(bound, mine, sizeof mine);
    *out = l;
    return ECCL_OK;
}

static void ibv_close_listener(void *ctx, eccl_listener *l)
{
    ibv_ctx *n = ctx;
    if (!l) return;
    n->p.stream->close_listener(n->p.stream_ctx, l->s);
    free(l);
}

static eccl_conn *conn_new(ibv_ctx *n, void *user)
{
    eccl_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->n = n;
    c->user = user;
    c->want_read = 1;
    return c;
}

static void ibv_close(void *ctx, eccl_conn *c);

static eccl_result ibv_accept(void *ctx, eccl_listener *l, void *user, eccl_conn **out)
{
    ibv_ctx *n = ctx;
    eccl_conn *c = conn_new(n, user);
    if (!c) return ECCL_ERR_NO_MEMORY;
    eccl_result rc = n->p.stream->accept(n->p.stream_ctx, l->s, user, &c->s);
    if (rc != ECCL_OK) {
        free(c);
        return rc;
    }
    c->acceptor = 1;
    c->mode = MODE_HELLO; /* until the first bytes say which kind of peer */
    n->p.stream_addr(n->p.ctx, c->s, c->addr);
    *out = c;
    return ECCL_OK;
}

static eccl_result ibv_connect(void *ctx, const char *addr, void *user, eccl_conn **out)
{
    ibv_ctx *n = ctx;
    size_t plen = strlen(ECCL_IBV_ADDR_PREFIX);
    int rdma = addr && strncmp(addr, ECCL_IBV_ADDR_PREFIX, plen) == 0;
    eccl_conn *c = conn_new(n, user);
    if (!c) return ECCL_ERR_NO_MEMORY;
    snprintf(c->addr, sizeof c->addr, "%s", addr ? addr : "?");
    c->mode = rdma ? MODE_HELLO : MODE_PLAIN;
    eccl_result rc = n->p.stream->connect(n->p.stream_ctx, rdma ? addr + plen : addr, user, &c->s);
    if (rc != ECCL_OK) {
        free(c);
        return rc;
    }
    if (rdma) {
        if ((rc = conn_verbs_create(c, n->nqps)) != ECCL_OK) {
            ibv_close(n, c);
            return ECCL_ERR_CONNECT;
        }
        hello_build(c);
        conn_apply_interest(c);
    }
    *out = c;
    return ECCL_OK;
}

static eccl_result ibv_send(void *ctx, eccl_conn *c, const eccl_iov *iov, int n, size_t *sent)
{
    ibv_ctx *x = ctx;
    *sent = 0;
    if (c->err != ECCL_OK) return c->err;
    if (c->mode == MODE_HELLO) {
        eccl_result rc = hello_progress(c);
        if (rc != ECCL_OK || c->mode == MODE_HELLO) return rc;
    }
    return x->p.stream->send(x->p.stream_ctx, c->s, iov, n, sent);
}

static eccl_result ibv_recv(void *ctx, eccl_conn *c, void *buf, size_t len, size_t *got)
{
    ibv_ctx *x = ctx;
    *got = 0;
    if (c->err != ECCL_OK) return c->err;
    if (c->mode == MODE_HELLO) {
        eccl_result rc = hello_progress(c);
        if (rc != ECCL_OK || c->mode == MODE_HELLO) return rc;
    }
    if (c->prefix_pos < c->prefix_len) {
        size_t k = c->prefix_len - c->prefix_pos < len ? c->prefix_len - c->prefix_pos : len;
        memcpy(buf, (const uint8_t *)&c->in + c->prefix_pos, k);
        c->prefix_pos += k;
        *got = k;
        return ECCL_OK;
    }
    return x->p.stream->recv(x->p.stream_ctx, c->s, buf, len, got);
}

static void ibv_set_interest(void *ctx, eccl_conn *c, int read, int write)
{
    (void)ctx;
    c->want_read = read != 0;
    c->want_write = write != 0;
    conn_apply_interest(c);
}

static void bulk_free(ibv_ctx *n, eccl_bulk *b)
{
    reg_put(n, b->r);
    b->next = b->c->spare;
    b->c->spare = b;
}

static void ibv_close(void *ctx, eccl_conn *c)
{
    ibv_ctx *n = ctx;
    if (!c) return;
    /* The queue pairs go before the registrations they could write to. */
    conn_verbs_destroy(c);
    for (eccl_bulk *b = c->tx_head, *nx; b; b = nx) {
        nx = b->next;
        bulk_free(n, b);
    }
    for (int i = 0; i < FIFO_SLOTS; i++)
        if (c->rx[i]) bulk_free(n, c->rx[i]);
    while (c->spare) {
        eccl_bulk *b = c->spare;
        c->spare = b->next;
        free(b);
    }
    if (c->s) n->p.stream->close(n->p.stream_ctx, c->s);
    free(c);
}

static int ibv_wait(void *ctx, uint64_t deadline_ns, void **ready, int max)
{
    return ((ibv_ctx *)ctx)->p.stream->wait(((ibv_ctx *)ctx)->p.stream_ctx, deadline_ns, ready, max);
}

static void ibv_wake(void *ctx)
{
    ibv_ctx *n = ctx;
    n->p.stream->wake(n->p.stream_ctx);
}

static size_t ibv_bulk_min(void *ctx, eccl_conn *c)
{
    (void)ctx;
    /* Until both hellos are through, payloads go in the stream: an
     * acceptor does not know yet whether its peer speaks RDMA at all. */
    return c->mode == MODE_READY ? c->n->min_bytes : 0;
}

static eccl_result bulk_new(eccl_conn *c, const void *buf, size_t len, int is_send,
                            eccl_bulk **out)
{
    if (c->err != ECCL_OK) return c->err;
    if (c->mode != MODE_READY || len == 0 || len > UINT32_MAX) return ECCL_ERR_INVALID_ARG;
    int access = is_send ? 0 : IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    reg *r = reg_get(c->n, buf, len, access);
    if (!r) {
        conn_break(c, "%s", "cannot register a buffer");
        return ECCL_ERR_NO_MEMORY;
    }
    eccl_bulk *b = c->spare;
    if (b) c->spare = b->next;
    else if (!(b = malloc(sizeof *b))) {
        reg_put(c->n, r);
        return ECCL_ERR_NO_MEMORY;
    }
    *b = (eccl_bulk){.c = c, .is_send = is_send, .buf = (uint8_t *)buf, .len = len, .r = r};
    *out = b;
    return ECCL_OK;
}

static eccl_result ibv_isend(void *ctx, eccl_conn *c, const void *buf, size_t len,
                             eccl_bulk **req)
{
    (void)ctx;
    eccl_bulk *b;
    eccl_result rc = bulk_new(c, buf, len, 1, &b);
    if (rc != ECCL_OK) return rc;
    b->seq = c->tx_seq++;
    if (c->tx_tail) c->tx_tail->next = b;
    else c->tx_head = b;
    c->tx_tail = b;
    tx_pump(c); /* its clear-to-send may be here already */
    *req = b;
    return ECCL_OK;
}

static eccl_result ibv_irecv(void *ctx, eccl_conn *c, void *buf, size_t len, eccl_bulk **req)
{
    (void)ctx;
    if (c->mode != MODE_READY) return c->err != ECCL_OK ? c->err : ECCL_ERR_INVALID_ARG;
    if (c->rx_seq - c->rx_free >= FIFO_SLOTS) return ECCL_ERR_INVALID_ARG;
    eccl_bulk *b;
    eccl_result rc = bulk_new(c, buf, len, 0, &b);
    if (rc != ECCL_OK) return rc;
    b->seq = c->rx_seq;
    size_t chunks = (len + c->n->chunk_bytes - 1) / c->n->chunk_bytes;
    b->chunks = chunks < 1 ? 1 : chunks > (size_t)c->nqps ? (uint32_t)c->nqps : (uint32_t)chunks;
    int slot = (int)(b->seq % FIFO_SLOTS);
    c->cts_out[slot] = (cts){.addr = (uint64_t)(uintptr_t)buf,
                             .rkey = b->r->mr->rkey,
                             .len = (uint32_t)len,
                             .seq = b->seq,
                             .chunks = b->chunks};
    c->rx[slot] = b;
    c->rx_seq++;
    rc = post_write(c, 0, WR_CTS | b->seq, &c->cts_out[slot], sizeof(cts), c->cts_mr->lkey,
                    c->in.fifo_addr + (uint64_t)slot * sizeof(cts), c->in.fifo_rkey,
                    IMM_NOTIFY | (b->seq & IMM_SEQ_MASK));
    conn_apply_interest(c);
    *req = b;
    return rc;
}

/* A bulk receive whose bytes have not all landed. */
static int rx_waiting(const eccl_conn *c)
{
    for (uint32_t s = c->rx_free; s != c->rx_seq; s++) {
        const eccl_bulk *b = c->rx[s % FIFO_SLOTS];
        if (b && !b->done) return 1;
    }
    return 0;
}

static eccl_result ibv_progress(void *ctx, eccl_conn *c)
{
    (void)ctx;
    conn_progress(c);
    /* Core is not reading the stream while it waits for a bulk receive. A
     * receive that landed but is not yet tested does not count: a peer
     * that got its last write acknowledged may close at once, and its
     * data is here. */
    if (c->err == ECCL_OK && rx_waiting(c) && c->n->p.hung_up(c->n->p.ctx, c->s))
        conn_break(c, "%s", "the peer closed the stream");
    return c->err;
}

static eccl_result ibv_test(void *ctx, eccl_bulk *b, int *done)
{
    ibv_ctx *n = ctx;
    eccl_conn *c = b->c;
    *done = 0;
    if (c->err != ECCL_OK) return c->err;
    if (!b->done) return ECCL_OK;
    if (b->is_send) {
        eccl_bulk **p = &c->tx_head;
        while (*p != b) p = &(*p)->next;
        *p = b->next;
        if (c->tx_tail == b) {
            c->tx_tail = NULL;
            for (eccl_bulk *x = c->tx_head; x; x = x->next) c->tx_tail = x;
        }
    } else {
        c->rx[b->seq % FIFO_SLOTS] = NULL;
        while (c->rx_free != c->rx_seq && !c->rx[c->rx_free % FIFO_SLOTS]) c->rx_free++;
        conn_apply_interest(c);
    }
    bulk_free(n, b);
    *done = 1;
    return ECCL_OK;
}

static void ibv_peer_addr(void *ctx, eccl_conn *c, char *addr)
{
    (void)ctx;
    memcpy(addr, c->addr, ECCL_ADDR_MAX);
}

const eccl_net_ops eccl_ibv_net_ops = {
    .size = sizeof(eccl_net_ops),
    .listen = ibv_listen,
    .accept = ibv_accept,
    .close_listener = ibv_close_listener,
    .connect = ibv_connect,
    .send = ibv_send,
    .recv = ibv_recv,
    .set_interest = ibv_set_interest,
    .close = ibv_close,
    .wait = ibv_wait,
    .wake = ibv_wake,
    .bulk_min = ibv_bulk_min,
    .isend = ibv_isend,
    .irecv = ibv_irecv,
    .progress = ibv_progress,
    .test = ibv_test,
    .peer_addr = ibv_peer_addr,
};

static int failpoint(const ibv_ctx *n, const char *name)
{
    return n->p.failpoint && n->p.failpoint(n->p.ctx, name);
}

/* ---- context ------------------------------------------------------------------ */

eccl_result eccl_ibv_create(eccl_env *env, const eccl_ibv_port *port, const eccl_ibv_device *dev,
                            void **out)
{
    ibv_ctx *n = calloc(1, sizeof *n);
    if (!n) return ECCL_ERR_NO_MEMORY;
    n->env = env;
    n->p = *port;
    n->v = *dev->verbs;
    n->d = *dev;
    snprintf(n->name, sizeof n->name, "%s", dev->name ? dev->name : "?");
    n->d.name = n->name;
    n->nqps = (int)eccl_config_uint(env, "ECCL_IB_QPS", 1, QPS_MAX, DEFAULT_QPS);
    n->min_bytes = (size_t)eccl_config_uint(env, "ECCL_IB_MIN_BYTES", 1, 1ul << 30, DEFAULT_MIN_BYTES);
    n->chunk_bytes =
        (size_t)eccl_config_uint(env, "ECCL_IB_CHUNK_BYTES", 4096, 1ul << 30, DEFAULT_CHUNK_BYTES);
    n->cache_max = (int)eccl_config_uint(env, "ECCL_IB_REG_CACHE", 0, 4096, 0);
    ECCL_INFO(env, "rdma: %s port %d, GID index %d, %d queue pairs per link", n->name, n->d.port,
              n->d.gid_index, n->nqps);
    *out = n;
    return ECCL_OK;
}

void eccl_ibv_destroy(void *ctx)
{
    ibv_ctx *n = ctx;
    if (!n) return;
    while (n->regs) {
        reg *r = n->regs;
        n->regs = r->next;
        reg_free(n, r);
    }
    free(n);
}

void *eccl_ibv_port_ctx(void *ctx) { return ((ibv_ctx *)ctx)->p.ctx; }
