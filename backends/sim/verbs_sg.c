/* A simulated RDMA NIC under core's net_ibv protocol (transport ibv).
 *
 * The protocol (core/net/ibv.c) is the code the real backend runs over
 * libibverbs; here it runs over net_sg's streams and this NIC, which
 * implements the verbs it calls (eccl_verbs) on libibverbs' own structs.
 * One NIC per comm env (as the real backend opens one device context per
 * communicator), on the env's host. Nothing is global: a NIC hangs off its
 * env, and peers are found through the world by env id.
 *
 * The fabric. An RDMA write is a message from the sender's env to the
 * target's (eccl_net_sg_fabric_post), charged its payload on the network
 * like any net_sg message, so its cost follows the platform. The target's
 * receiver actor applies it into the target's memory (every rank lives in
 * this process) and answers with an ACK; the sender's work completion comes
 * with the ACK, as RC's does. The payload is copied at post time (the mock
 * does the same, docs/transports.md says what that does not validate);
 * phantom memory (env_sg.h) carries its size only, never a byte.
 *
 * The verbs rules kept, because net_ibv relies on each:
 *  - the QP state machine RESET -> INIT -> RTR -> RTS (ERR from anywhere);
 *    posts need RTS (sends) or INIT+ (receives); a QP in ERR flushes;
 *  - a write lands only in a region registered on the target's NIC with
 *    that rkey, REMOTE_WRITE access and the whole range inside it; else
 *    IBV_WC_REM_ACCESS_ERR at the sender, and both QPs go to ERR (the
 *    target's posted receives flush);
 *  - the local buffer must lie in a region with that lkey
 *    (IBV_WC_LOC_PROT_ERR);
 *  - per-QP ordering: writes carry a PSN and the target applies them in
 *    PSN order whatever order the network delivers them in;
 *  - RDMA_WRITE_WITH_IMM consumes a posted receive and completes it with
 *    the immediate; with none posted the write waits (RNR, retried
 *    forever: rnr_retry 7), and so do the writes behind it on that QP;
 *  - completions arrive in order per QP; a CQ that overflows fails every
 *    later poll; an armed CQ raises one event on its channel, which makes
 *    net_sg's wait report the conn (eccl_net_sg_watch);
 *  - a peer that is dead (killed, host off, or unreachable: a link of the
 *    route down) never answers: the writes still waiting for it, and any
 *    posted later, complete with IBV_WC_RETRY_EXC_ERR and the QP goes to
 *    ERR. So a `kill` reaches survivors as a broken link, as with TCP.
 * Not modelled: the retry window itself (the error is raised when the
 * death happens or at the post, not after timeout x retry_cnt), MTU
 * packetisation, PSN wrap, atomics, reads, sends, SRQs, several SGEs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "net/ibv.h"
#include "sg_internal.h"

#define GID_TAG "ESG1" /* a simulated NIC's GID: tag + env id */

enum fab_kind { FAB_WRITE, FAB_ACK, FAB_NAK };

/* What travels between NICs; a write's payload follows (unless phantom). */
typedef struct fab_msg {
    int kind;
    int with_imm;
    int phantom;          /* the payload has no bytes (phantom source) */
    uint32_t src_qpn, dst_qpn;
    uint32_t imm;         /* as posted (network order) */
    uint32_t status;      /* NAK: the sender's completion status */
    uint32_t len;
    uint64_t src_env;
    uint64_t psn;
    uint64_t raddr;
    uint32_t rkey;
} fab_msg;

typedef struct sg_mr {
    struct ibv_mr mr;
    int access;
    struct sg_mr *next;
} sg_mr;

typedef struct sg_chan sg_chan;

typedef struct sg_cq {
    struct ibv_cq cq;
    struct ibv_wc *ring;
    int cap, head, n;
    int armed;
    int overflow;
    struct sg_cq *next;
} sg_cq;

typedef struct sg_cq_event {
    sg_cq *cq;
    struct sg_cq_event *next;
} sg_cq_event;

struct sg_chan {
    struct ibv_comp_channel ch;
    sg_event_source src; /* pending = events queued */
    int watched;
    sg_cq_event *head, *tail;
    struct sg_chan *next;
};

/* A write waiting at its target: arrived ahead of its PSN, or behind an
 * RNR. The payload follows the struct. */
typedef struct sg_wire {
    fab_msg m;
    struct sg_wire *next;
    unsigned char data[];
} sg_wire;

/* A signaled send waiting for its ACK. */
typedef struct sg_send {
    uint64_t wr_id;
    uint64_t psn;
    uint32_t len;
    int acked;
    struct sg_send *next;
} sg_send;

typedef struct sg_qp {
    struct ibv_qp qp;
    struct sg_nic *nic;
    int max_send, max_recv;
    uint64_t peer_env;
    uint32_t peer_qpn;
    uint64_t sq_psn, rq_psn;
    sg_send *sends, *sends_tail; /* outstanding, in PSN order */
    int nsends;
    uint64_t *recvs; /* posted receives' wr_ids, a ring */
    int recv_head, nrecvs;
    sg_wire *ooo;            /* ahead of rq_psn, sorted */
    sg_wire *held, *held_tail; /* at rq_psn and after, in order, waiting for a receive */
    sg_wire *early;          /* arrived while the QP was in INIT */
    struct sg_qp *next;
} sg_qp;

/* A fabric message waiting for the end of the NIC operation that made it. */
typedef struct sg_out {
    uint64_t to_env;
    size_t len, wire;
    struct sg_out *next;
    unsigned char data[];
} sg_out;

typedef struct sg_nic {
    struct ibv_context ctx; /* first: every verb finds the NIC from it */
    struct ibv_pd pd;
    sg_env *e;
    eccl_verbs verbs;
    eccl_ibv_device dev; /* what the protocol was given */
    uint32_t next_qpn, next_key;
    sg_mr *mrs;
    sg_cq *cqs;
    sg_chan *chans;
    sg_qp *qps;
    void *proto; /* core's net_ibv context */
    /* Posting a message and waking waiters are simcalls, during which other
     * actors run and may change or free this NIC's objects: a NIC operation
     * only queues them, and nic_flush sends them when it is over. */
    sg_out *out, *out_tail;
    int wake; /* a completion event was queued: wake the env's waiters */
} sg_nic;

static sg_nic *nic_of(struct ibv_context *c) { return (sg_nic *)(void *)c; }

/* Queues data[0..len) for env to_env, charged `wire` bytes. */
static void nic_send(sg_nic *nic, uint64_t to_env, const void *hdr, size_t hlen, const void *body,
                     size_t blen, size_t wire)
{
    sg_out *o = malloc(sizeof *o + hlen + blen);
    if (!o) abort(); /* a lost write or answer would hang a rank silently */
    o->to_env = to_env;
    o->len = hlen + blen;
    o->wire = wire;
    o->next = NULL;
    memcpy(o->data, hdr, hlen);
    if (blen) memcpy(o->data + hlen, body, blen);
    if (nic->out_tail) nic->out_tail->next = o;
    else nic->out = o;
    nic->out_tail = o;
}

/* Ends a NIC operation: sends what it queued and wakes the env's waiters.
 * Touches nothing of the NIC after taking its queue (the simcalls below
 * let other actors run, the NIC's owner may detach it meanwhile); the env
 * outlives the call (its owner or its receiver actor is the caller). */
static void nic_flush(sg_nic *nic)
{
    sg_env *e = nic->e;
    sg_out *o = nic->out;
    int wake = nic->wake;
    nic->out = nic->out_tail = NULL;
    nic->wake = 0;
    while (o) {
        sg_out *n = o->next;
        /* Refused: the target died since. Its death failed the writes
         * that wait for it (eccl_verbs_sg_peers_dead); an answer to a dead
         * sender is nobody's. */
        (void)eccl_net_sg_fabric_post(e, o->to_env, o->data, o->len, o->wire);
        free(o);
        o = n;
    }
    if (wake) eccl_sg_cv_broadcast(&e->cv);
}

static sg_qp *qp_find(sg_nic *nic, uint32_t qpn)
{
    for (sg_qp *q = nic->qps; q; q = q->next)
        if (q->qp.qp_num == qpn) return q;
    return NULL;
}

/* ---- completions ----------------------------------------------------------- */

static void cq_push(sg_cq *cq, const struct ibv_wc *wc)
{
    if (cq->overflow) return;
    if (cq->n == cq->cap) {
        cq->overflow = 1;
    } else {
        cq->ring[(cq->head + cq->n) % cq->cap] = *wc;
        cq->n++;
    }
    if (!cq->armed || !cq->cq.channel) return;
    cq->armed = 0;
    sg_chan *ch = (sg_chan *)(void *)cq->cq.channel;
    sg_cq_event *ev = malloc(sizeof *ev);
    if (!ev) abort(); /* a lost event would hang the rank silently */
    ev->cq = cq;
    ev->next = NULL;
    if (ch->tail) ch->tail->next = ev;
    else ch->head = ev;
    ch->tail = ev;
    ch->src.pending++;
    nic_of(ch->ch.context)->wake = 1;
}

static void complete(sg_qp *q, int send, uint64_t wr_id, enum ibv_wc_status st, uint32_t len,
                     int with_imm, uint32_t imm)
{
    struct ibv_wc wc;
    memset(&wc, 0, sizeof wc);
    wc.wr_id = wr_id;
    wc.status = st;
    wc.opcode = send ? IBV_WC_RDMA_WRITE : IBV_WC_RECV_RDMA_WITH_IMM;
    wc.byte_len = len;
    wc.qp_num = q->qp.qp_num;
    if (with_imm) {
        wc.wc_flags = IBV_WC_WITH_IMM;
        wc.imm_data = imm;
    }
    cq_push((sg_cq *)(void *)(send ? q->qp.send_cq : q->qp.recv_cq), &wc);
}

static void wires_free(sg_wire *w)
{
    while (w) {
        sg_wire *n = w->next;
        free(w);
        w = n;
    }
}

/* The QP breaks: the first outstanding send gets `first`, the others and
 * every posted receive flush, and what waits here is dropped. */
static void qp_error(sg_qp *q, enum ibv_wc_status first)
{
    if (q->qp.state == IBV_QPS_ERR) return;
    q->qp.state = IBV_QPS_ERR;
    for (sg_send *s = q->sends, *n; s; s = n) {
        n = s->next;
        complete(q, 1, s->wr_id, first, 0, 0, 0);
        first = IBV_WC_WR_FLUSH_ERR;
        free(s);
    }
    q->sends = q->sends_tail = NULL;
    q->nsends = 0;
    for (; q->nrecvs > 0; q->nrecvs--) {
        complete(q, 0, q->recvs[q->recv_head], IBV_WC_WR_FLUSH_ERR, 0, 0, 0);
        q->recv_head = (q->recv_head + 1) % q->max_recv;
    }
    wires_free(q->ooo);
    wires_free(q->held);
    wires_free(q->early);
    q->ooo = q->held = q->held_tail = q->early = NULL;
}

/* ---- the fabric ------------------------------------------------------------ */

static void fab_answer(sg_qp *q, const fab_msg *w, int kind, enum ibv_wc_status st)
{
    fab_msg a = {.kind = kind,
                 .src_qpn = q->qp.qp_num,
                 .dst_qpn = w->src_qpn,
                 .src_env = q->nic->e->id,
                 .psn = w->psn,
                 .status = (uint32_t)st};
    nic_send(q->nic, w->src_env, &a, sizeof a, NULL, 0, 0);
}

static sg_mr *mr_by_rkey(sg_nic *nic, uint32_t rkey)
{
    for (sg_mr *r = nic->mrs; r; r = r->next)
        if (r->mr.rkey == rkey) return r;
    return NULL;
}

/* Applies the writes at the head of q's in-order queue; stops at a write
 * with immediate data while no receive is posted (RNR). */
static void qp_apply(sg_qp *q)
{
    eccl_sg_world *w = q->nic->e->w;
    while (q->held && q->qp.state != IBV_QPS_ERR) {
        sg_wire *x = q->held;
        const fab_msg *m = &x->m;
        if (m->with_imm && q->nrecvs == 0) return;
        q->held = x->next;
        if (!q->held) q->held_tail = NULL;
        sg_mr *r = mr_by_rkey(q->nic, m->rkey);
        if (!r || !(r->access & IBV_ACCESS_REMOTE_WRITE) || m->raddr < (uint64_t)(uintptr_t)r->mr.addr ||
            m->raddr + m->len > (uint64_t)(uintptr_t)r->mr.addr + r->mr.length) {
            eccl_sg_log(q->nic->e, ECCL_LOG_DEBUG, "rdma write of %u bytes to rkey %u: remote access error",
                        m->len, m->rkey);
            fab_answer(q, m, FAB_NAK, IBV_WC_REM_ACCESS_ERR);
            free(x);
            qp_error(q, IBV_WC_REM_ACCESS_ERR);
            return;
        }
        void *dst = (void *)(uintptr_t)m->raddr;
        if (m->len > 0 && !eccl_sg_is_phantom(w, dst)) {
            /* A phantom source into real memory reads as zeros, as net_sg's
             * holes do. */
            if (m->phantom) memset(dst, 0, m->len);
            else memcpy(dst, x->data, m->len);
        }
        w->rdma_writes++;
        if (m->with_imm) {
            uint64_t wr_id = q->recvs[q->recv_head];
            q->recv_head = (q->recv_head + 1) % q->max_recv;
            q->nrecvs--;
            complete(q, 0, wr_id, IBV_WC_SUCCESS, m->len, 1, m->imm);
        }
        fab_answer(q, m, FAB_ACK, IBV_WC_SUCCESS);
        free(x);
    }
}

static sg_wire *wire_new(const fab_msg *m, const unsigned char *payload)
{
    size_t body = m->phantom ? 0 : m->len;
    sg_wire *x = malloc(sizeof *x + body);
    if (!x) abort(); /* a lost write would hang the rank silently */
    x->m = *m;
    x->next = NULL;
    memcpy(x->data, payload, body);
    return x;
}

/* The sender's retries run out: what a NIC does for a packet to a QPN it
 * does not have, or to a QP in ERR (it drops it, nothing answers), with the
 * retry window cut short. */
static void nak_dropped(sg_nic *nic, const fab_msg *m)
{
    fab_msg a = {.kind = FAB_NAK,
                 .src_qpn = m->dst_qpn,
                 .dst_qpn = m->src_qpn,
                 .src_env = nic->e->id,
                 .psn = m->psn,
                 .status = IBV_WC_RETRY_EXC_ERR};
    nic_send(nic, m->src_env, &a, sizeof a, NULL, 0, 0);
}

static void on_write_at(sg_qp *q, sg_wire *x);

static void on_write(sg_nic *nic, const fab_msg *m, const unsigned char *payload, size_t have)
{
    if (have < (m->phantom ? 0 : m->len)) return;
    sg_qp *q = qp_find(nic, m->dst_qpn);
    if (q && q->qp.state == IBV_QPS_INIT) {
        /* Not ready to receive yet: a NIC drops the packet and the sender
         * retransmits until the QP reaches RTR. Kept until then. */
        sg_wire *x = wire_new(m, payload);
        sg_wire **pp = &q->early;
        while (*pp) pp = &(*pp)->next;
        *pp = x;
        return;
    }
    if (!q || (q->qp.state != IBV_QPS_RTR && q->qp.state != IBV_QPS_RTS) ||
        q->peer_env != m->src_env || q->peer_qpn != m->src_qpn) {
        nak_dropped(nic, m);
        return;
    }
    on_write_at(q, wire_new(m, payload));
}

/* A write for q, which is this sender's twin and can receive. */
static void on_write_at(sg_qp *q, sg_wire *x)
{
    const fab_msg *m = &x->m;
    if (m->psn < q->rq_psn) {
        free(x); /* a duplicate */
        return;
    }
    if (m->psn != q->rq_psn) {
        /* Ahead of the next PSN: the network reordered two messages of the
         * QP (a small one overtook a big one). */
        sg_wire **pp = &q->ooo;
        while (*pp && (*pp)->m.psn < m->psn) pp = &(*pp)->next;
        x->next = *pp;
        *pp = x;
        return;
    }
    for (;;) {
        if (q->held_tail) q->held_tail->next = x;
        else q->held = x;
        q->held_tail = x;
        q->rq_psn++;
        if (!q->ooo || q->ooo->m.psn != q->rq_psn) break;
        x = q->ooo;
        q->ooo = x->next;
        x->next = NULL;
    }
    qp_apply(q);
}

static void on_answer(sg_nic *nic, const fab_msg *m)
{
    sg_qp *q = qp_find(nic, m->dst_qpn);
    if (!q || q->qp.state == IBV_QPS_ERR || q->peer_env != m->src_env) return;
    if (m->kind == FAB_NAK) {
        qp_error(q, (enum ibv_wc_status)m->status);
        return;
    }
    for (sg_send *s = q->sends; s; s = s->next)
        if (s->psn == m->psn) s->acked = 1;
    /* RC completes in order. */
    while (q->sends && q->sends->acked) {
        sg_send *s = q->sends;
        q->sends = s->next;
        if (!q->sends) q->sends_tail = NULL;
        q->nsends--;
        complete(q, 1, s->wr_id, IBV_WC_SUCCESS, s->len, 0, 0);
        free(s);
    }
}

static void fabric_rx(sg_env *e, const void *data, size_t len)
{
    sg_nic *nic = e->nic;
    fab_msg m;
    if (!nic || len < sizeof m) return;
    memcpy(&m, data, sizeof m);
    if (m.kind == FAB_WRITE) on_write(nic, &m, (const unsigned char *)data + sizeof m, len - sizeof m);
    else on_answer(nic, &m);
    nic_flush(nic);
}

void eccl_verbs_sg_peers_dead(eccl_sg_world *w)
{
    /* First every state change, with no simcall; then the wake-ups, by id
     * (a wake-up lets actors run, which may destroy envs). A scan of every
     * QP: deaths are rare, and QPs per rank few. */
    size_t n = 0, cap = 0;
    uint64_t *woken = NULL;
    for (sg_env *e = w->envs; e; e = e->next) {
        if (e->dead || !e->nic) continue;
        for (sg_qp *q = e->nic->qps; q; q = q->next) {
            if (!q->sends) continue;
            const sg_env *peer = sg_idmap_get(&w->env_ids, q->peer_env);
            if (!peer || peer->dead) qp_error(q, IBV_WC_RETRY_EXC_ERR);
        }
        if (!e->nic->wake) continue;
        e->nic->wake = 0;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            uint64_t *p = realloc(woken, cap * sizeof *p);
            if (!p) abort(); /* a lost wake-up would hang a rank silently */
            woken = p;
        }
        woken[n++] = e->id;
    }
    for (size_t i = 0; i < n; i++) {
        sg_env *e = sg_idmap_get(&w->env_ids, woken[i]);
        if (e) eccl_sg_cv_broadcast(&e->cv);
    }
    free(woken);
}

/* ---- verbs ----------------------------------------------------------------- */

static struct ibv_mr *v_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    sg_nic *nic = nic_of(pd->context);
    if (!addr || len == 0 || ((access & IBV_ACCESS_REMOTE_WRITE) && !(access & IBV_ACCESS_LOCAL_WRITE))) {
        errno = EINVAL;
        return NULL;
    }
    sg_mr *r = calloc(1, sizeof *r);
    if (!r) {
        errno = ENOMEM;
        return NULL;
    }
    r->mr.context = pd->context;
    r->mr.pd = pd;
    r->mr.addr = addr;
    r->mr.length = len;
    r->mr.lkey = r->mr.rkey = ++nic->next_key; /* never reused: a stale key matches nothing */
    r->access = access;
    r->next = nic->mrs;
    nic->mrs = r;
    return &r->mr;
}

static int v_dereg_mr(struct ibv_mr *mr)
{
    sg_nic *nic = nic_of(mr->context);
    for (sg_mr **pp = &nic->mrs; *pp; pp = &(*pp)->next) {
        if (&(*pp)->mr != mr) continue;
        sg_mr *r = *pp;
        *pp = r->next;
        free(r);
        return 0;
    }
    return EINVAL;
}

static struct ibv_comp_channel *v_create_comp_channel(struct ibv_context *c)
{
    sg_nic *nic = nic_of(c);
    sg_chan *ch = calloc(1, sizeof *ch);
    if (!ch) {
        errno = ENOMEM;
        return NULL;
    }
    ch->ch.context = c;
    ch->ch.fd = -1; /* readiness is net_sg's wait (sg_event_source), not an fd */
    ch->next = nic->chans;
    nic->chans = ch;
    return &ch->ch;
}

static void chan_free(sg_chan *ch)
{
    while (ch->head) {
        sg_cq_event *n = ch->head->next;
        free(ch->head);
        ch->head = n;
    }
    free(ch);
}

static int v_destroy_comp_channel(struct ibv_comp_channel *c)
{
    sg_nic *nic = nic_of(c->context);
    for (sg_chan **pp = &nic->chans; *pp; pp = &(*pp)->next) {
        if (&(*pp)->ch != c) continue;
        sg_chan *ch = *pp;
        if (ch->watched) eccl_net_sg_unwatch(nic->e, &ch->src);
        *pp = ch->next;
        chan_free(ch);
        return 0;
    }
    return EINVAL;
}

static struct ibv_cq *v_create_cq(struct ibv_context *c, int cqe, void *cq_context,
                                  struct ibv_comp_channel *channel, int vector)
{
    (void)vector;
    sg_nic *nic = nic_of(c);
    sg_cq *cq = calloc(1, sizeof *cq);
    if (cqe < 1 || !cq || !(cq->ring = calloc((size_t)cqe, sizeof *cq->ring))) {
        free(cq);
        errno = cqe < 1 ? EINVAL : ENOMEM;
        return NULL;
    }
    cq->cq.context = c;
    cq->cq.channel = channel;
    cq->cq.cq_context = cq_context;
    cq->cq.cqe = cqe;
    cq->cap = cqe;
    cq->next = nic->cqs;
    nic->cqs = cq;
    return &cq->cq;
}

static int v_destroy_cq(struct ibv_cq *c)
{
    sg_nic *nic = nic_of(c->context);
    for (sg_qp *q = nic->qps; q; q = q->next)
        if (q->qp.send_cq == c || q->qp.recv_cq == c) return EBUSY;
    for (sg_cq **pp = &nic->cqs; *pp; pp = &(*pp)->next) {
        if (&(*pp)->cq != c) continue;
        sg_cq *cq = *pp;
        *pp = cq->next;
        /* Events of it still queued on its channel go with it. */
        for (sg_chan *ch = nic->chans; ch; ch = ch->next) {
            for (sg_cq_event **ep = &ch->head; *ep;) {
                if ((*ep)->cq != cq) {
                    ep = &(*ep)->next;
                    continue;
                }
                sg_cq_event *ev = *ep;
                *ep = ev->next;
                free(ev);
                ch->src.pending--;
            }
            ch->tail = NULL;
            for (sg_cq_event *ev = ch->head; ev; ev = ev->next) ch->tail = ev;
        }
        free(cq->ring);
        free(cq);
        return 0;
    }
    return EINVAL;
}

static int v_req_notify_cq(struct ibv_cq *c, int solicited_only)
{
    (void)solicited_only;
    ((sg_cq *)(void *)c)->armed = 1;
    return 0;
}

static int v_get_cq_event(struct ibv_comp_channel *c, struct ibv_cq **cq, void **cq_context)
{
    sg_chan *ch = (sg_chan *)(void *)c;
    sg_cq_event *ev = ch->head;
    if (!ev) {
        errno = EAGAIN; /* the real one would block: callers ask channel_ready first */
        return -1;
    }
    ch->head = ev->next;
    if (!ch->head) ch->tail = NULL;
    ch->src.pending--;
    *cq = &ev->cq->cq;
    *cq_context = ev->cq->cq.cq_context;
    free(ev);
    return 0;
}

static void v_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
    cq->comp_events_completed += n;
}

static int v_poll_cq(struct ibv_cq *c, int n, struct ibv_wc *wc)
{
    sg_cq *cq = (sg_cq *)(void *)c;
    if (cq->overflow) return -1;
    int k = 0;
    for (; k < n && cq->n > 0; k++) {
        wc[k] = cq->ring[cq->head];
        cq->head = (cq->head + 1) % cq->cap;
        cq->n--;
    }
    return k;
}

static struct ibv_qp *v_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia)
{
    sg_nic *nic = nic_of(pd->context);
    if (ia->qp_type != IBV_QPT_RC || !ia->send_cq || !ia->recv_cq || ia->cap.max_send_wr < 1 ||
        ia->cap.max_recv_wr < 1 || ia->cap.max_send_sge > 1 || ia->cap.max_recv_sge > 1 || ia->srq) {
        errno = EINVAL;
        return NULL;
    }
    sg_qp *q = calloc(1, sizeof *q);
    if (!q || !(q->recvs = calloc(ia->cap.max_recv_wr, sizeof *q->recvs))) {
        free(q);
        errno = ENOMEM;
        return NULL;
    }
    q->nic = nic;
    q->qp.context = pd->context;
    q->qp.qp_context = ia->qp_context;
    q->qp.pd = pd;
    q->qp.send_cq = ia->send_cq;
    q->qp.recv_cq = ia->recv_cq;
    q->qp.qp_num = ++nic->next_qpn; /* never reused: a write for an old QP finds nothing */
    q->qp.state = IBV_QPS_RESET;
    q->qp.qp_type = IBV_QPT_RC;
    q->max_send = (int)ia->cap.max_send_wr;
    q->max_recv = (int)ia->cap.max_recv_wr;
    /* At the end: QPs are found in creation order. */
    sg_qp **pp = &nic->qps;
    while (*pp) pp = &(*pp)->next;
    *pp = q;
    return &q->qp;
}

/* The env id a GID names, or 0 when it is no simulated NIC's. */
static uint64_t gid_env(const union ibv_gid *g)
{
    if (memcmp(g->raw, GID_TAG, 4) != 0) return 0;
    uint64_t id = 0;
    for (int i = 0; i < 8; i++) id |= (uint64_t)g->raw[4 + i] << (8 * i);
    return id;
}

static int v_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
    sg_qp *q = (sg_qp *)(void *)qp;
    if (!(mask & IBV_QP_STATE)) return EINVAL;
    enum ibv_qp_state from = qp->state, to = a->qp_state;
    if (to == IBV_QPS_ERR) {
        qp_error(q, IBV_WC_WR_FLUSH_ERR);
        return 0;
    }
    if (to == IBV_QPS_INIT && from == IBV_QPS_RESET) {
        if ((mask & (IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) != (IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) ||
            a->port_num != 1)
            return EINVAL;
    } else if (to == IBV_QPS_RTR && from == IBV_QPS_INIT) {
        int need = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        if ((mask & need) != need || !a->ah_attr.is_global) return EINVAL;
        uint64_t peer = gid_env(&a->ah_attr.grh.dgid);
        if (!peer) return EINVAL;
        q->peer_env = peer;
        q->peer_qpn = a->dest_qp_num;
        q->rq_psn = a->rq_psn;
    } else if (to == IBV_QPS_RTS && from == IBV_QPS_RTR) {
        if (!(mask & IBV_QP_SQ_PSN)) return EINVAL;
        q->sq_psn = a->sq_psn;
    } else {
        return EINVAL;
    }
    qp->state = to;
    if (to == IBV_QPS_RTR) {
        /* What arrived before RTR is retransmitted now. */
        sg_wire *x = q->early;
        q->early = NULL;
        while (x) {
            sg_wire *n = x->next;
            x->next = NULL;
            if (x->m.src_env == q->peer_env && x->m.src_qpn == q->peer_qpn) {
                on_write_at(q, x);
            } else {
                nak_dropped(q->nic, &x->m);
                free(x);
            }
            x = n;
        }
        nic_flush(q->nic);
    }
    return 0;
}

static int v_destroy_qp(struct ibv_qp *qp)
{
    sg_qp *q = (sg_qp *)(void *)qp;
    sg_nic *nic = q->nic;
    for (sg_qp **pp = &nic->qps; *pp; pp = &(*pp)->next) {
        if (*pp != q) continue;
        *pp = q->next;
        for (sg_send *s = q->sends, *n; s; s = n) {
            n = s->next;
            free(s);
        }
        wires_free(q->ooo);
        wires_free(q->held);
        wires_free(q->early);
        free(q->recvs);
        free(q);
        return 0;
    }
    return EINVAL;
}

static sg_mr *mr_by_lkey(sg_nic *nic, uint32_t lkey, uint64_t addr, uint32_t len)
{
    for (sg_mr *r = nic->mrs; r; r = r->next)
        if (r->mr.lkey == lkey && addr >= (uint64_t)(uintptr_t)r->mr.addr &&
            addr + len <= (uint64_t)(uintptr_t)r->mr.addr + r->mr.length)
            return r;
    return NULL;
}

static int post_one(sg_qp *q, const struct ibv_send_wr *wr)
{
    sg_nic *nic = q->nic;
    if (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) return EINVAL;
    if (wr->num_sge > 1 || (wr->num_sge == 1 && !wr->sg_list)) return EINVAL;
    if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR) return EINVAL;
    if (q->nsends >= q->max_send) return ENOMEM;
    if (q->qp.state == IBV_QPS_ERR) {
        /* Posted to a broken QP: it flushes. */
        complete(q, 1, wr->wr_id, IBV_WC_WR_FLUSH_ERR, 0, 0, 0);
        return 0;
    }
    uint32_t len = wr->num_sge ? wr->sg_list->length : 0;
    uint64_t addr = wr->num_sge ? wr->sg_list->addr : 0;
    /* Every write is signaled here (net_ibv's are): one entry each. */
    sg_send *s = calloc(1, sizeof *s);
    if (!s) return ENOMEM;
    s->wr_id = wr->wr_id;
    s->psn = q->sq_psn++;
    s->len = len;
    if (q->sends_tail) q->sends_tail->next = s;
    else q->sends = s;
    q->sends_tail = s;
    q->nsends++;
    if (len > 0 && !mr_by_lkey(nic, wr->sg_list->lkey, addr, len)) {
        qp_error(q, IBV_WC_LOC_PROT_ERR);
        return 0;
    }
    const void *src = (const void *)(uintptr_t)addr;
    int phantom = len > 0 && eccl_sg_is_phantom(nic->e->w, src);
    size_t body = phantom ? 0 : len;
    fab_msg m = {.kind = FAB_WRITE,
                 .with_imm = wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM,
                 .phantom = phantom,
                 .src_qpn = q->qp.qp_num,
                 .dst_qpn = q->peer_qpn,
                 .imm = wr->imm_data,
                 .len = len,
                 .src_env = nic->e->id,
                 .psn = s->psn,
                 .raddr = wr->wr.rdma.remote_addr,
                 .rkey = wr->wr.rdma.rkey};
    if (!eccl_net_sg_fabric_reachable(nic->e, q->peer_env)) {
        qp_error(q, IBV_WC_RETRY_EXC_ERR); /* nobody will ever answer */
        return 0;
    }
    /* The payload is copied now: a buffer changed before the completion
     * cannot corrupt the transfer here (as with the mock). */
    nic_send(nic, q->peer_env, &m, sizeof m, src, body, len);
    return 0;
}

static int v_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    sg_nic *nic = ((sg_qp *)(void *)qp)->nic;
    int e = 0;
    for (; wr && !e; wr = wr->next) {
        e = post_one((sg_qp *)(void *)qp, wr);
        if (e) *bad = wr;
    }
    nic_flush(nic);
    return e;
}

static int v_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    sg_qp *q = (sg_qp *)(void *)qp;
    int e = 0;
    for (; wr && !e; wr = wr->next) {
        if (q->qp.state == IBV_QPS_RESET || wr->num_sge > 1) e = EINVAL;
        else if (q->nrecvs >= q->max_recv) e = ENOMEM;
        if (e) {
            *bad = wr;
        } else if (q->qp.state == IBV_QPS_ERR) {
            complete(q, 0, wr->wr_id, IBV_WC_WR_FLUSH_ERR, 0, 0, 0);
        } else {
            q->recvs[(q->recv_head + q->nrecvs) % q->max_recv] = wr->wr_id;
            q->nrecvs++;
        }
    }
    qp_apply(q); /* a write held for a receive may land now */
    nic_flush(q->nic);
    return e;
}

static const char *v_wc_status_str(enum ibv_wc_status st)
{
    switch (st) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    default: return "unknown";
    }
}

/* ---- the port: net_sg ------------------------------------------------------ */

static void port_stream_addr(void *ctx, eccl_conn *s, char *addr)
{
    (void)ctx;
    eccl_net_sg_conn_addr(s, addr);
}

static void port_watch_hangup(void *ctx, eccl_conn *s, int on)
{
    (void)ctx;
    eccl_net_sg_watch_hangup(s, on);
}

static int port_hung_up(void *ctx, eccl_conn *s)
{
    (void)ctx;
    return eccl_net_sg_hung_up(s);
}

static eccl_result port_watch_channel(void *ctx, struct ibv_comp_channel *c, void *user)
{
    sg_nic *nic = ctx;
    sg_chan *ch = (sg_chan *)(void *)c;
    if (ch->watched) return ECCL_ERR_INVALID_ARG;
    ch->src.user = user;
    ch->watched = 1;
    eccl_net_sg_watch(nic->e, &ch->src);
    return ECCL_OK;
}

static void port_unwatch_channel(void *ctx, struct ibv_comp_channel *c)
{
    sg_nic *nic = ctx;
    sg_chan *ch = (sg_chan *)(void *)c;
    if (!ch->watched) return;
    eccl_net_sg_unwatch(nic->e, &ch->src);
    ch->watched = 0;
}

static int port_channel_ready(void *ctx, struct ibv_comp_channel *c)
{
    (void)ctx;
    return ((sg_chan *)(void *)c)->src.pending > 0;
}

/* ---- attach / detach ------------------------------------------------------- */

eccl_result eccl_verbs_sg_attach(sg_env *e)
{
    sg_nic *nic = calloc(1, sizeof *nic);
    if (!nic) return ECCL_ERR_NO_MEMORY;
    nic->e = e;
    nic->ctx.num_comp_vectors = 1;
    nic->ctx.cmd_fd = nic->ctx.async_fd = -1;
    nic->pd.context = &nic->ctx;
    nic->verbs = (eccl_verbs){
        .reg_mr = v_reg_mr,
        .dereg_mr = v_dereg_mr,
        .create_comp_channel = v_create_comp_channel,
        .destroy_comp_channel = v_destroy_comp_channel,
        .create_cq = v_create_cq,
        .destroy_cq = v_destroy_cq,
        .req_notify_cq = v_req_notify_cq,
        .get_cq_event = v_get_cq_event,
        .ack_cq_events = v_ack_cq_events,
        .poll_cq = v_poll_cq,
        .create_qp = v_create_qp,
        .modify_qp = v_modify_qp,
        .destroy_qp = v_destroy_qp,
        .post_send = v_post_send,
        .post_recv = v_post_recv,
        .wc_status_str = v_wc_status_str,
    };
    eccl_ibv_device *dev = &nic->dev;
    *dev = (eccl_ibv_device){.verbs = &nic->verbs,
                           .dev = &nic->ctx,
                           .pd = &nic->pd,
                           .port = 1,
                           .lid = (uint16_t)e->id,
                           .gid_index = 0,
                           .mtu = IBV_MTU_4096,
                           .name = "simnic"};
    memcpy(dev->gid.raw, GID_TAG, 4);
    for (int i = 0; i < 8; i++) dev->gid.raw[4 + i] = (uint8_t)(e->id >> (8 * i));
    const eccl_ibv_port port = {
        .ctx = nic,
        .stream = &eccl_net_sg_ops,
        .stream_ctx = e,
        .stream_addr = port_stream_addr,
        .watch_hangup = port_watch_hangup,
        .hung_up = port_hung_up,
        .watch_channel = port_watch_channel,
        .unwatch_channel = port_unwatch_channel,
        .channel_ready = port_channel_ready,
        .failpoint = NULL,
    };
    eccl_result rc = eccl_ibv_create(&e->env, &port, dev, &nic->proto);
    if (rc != ECCL_OK) {
        free(nic);
        return rc;
    }
    e->nic = nic;
    e->fabric_rx = fabric_rx;
    e->env.net = &eccl_ibv_net_ops;
    e->env.net_ctx = nic->proto;
    return ECCL_OK;
}

const eccl_ibv_device *eccl_verbs_sg_device(const sg_env *e) { return e->nic ? &e->nic->dev : NULL; }

void eccl_verbs_sg_free_dead(sg_env *e)
{
    sg_nic *nic = e->nic;
    if (!nic) return;
    e->nic = NULL;
    e->fabric_rx = NULL;
    /* The protocol's conns a killed rank never closed point into what
     * follows; they die with the process, as the rank's communicator
     * does. Its context and registrations go (no simcall in either). */
    if (nic->proto) eccl_ibv_destroy(nic->proto);
    nic->proto = NULL;
    while (nic->qps) {
        sg_qp *q = nic->qps;
        nic->qps = q->next;
        for (sg_send *s = q->sends, *n; s; s = n) {
            n = s->next;
            free(s);
        }
        wires_free(q->ooo);
        wires_free(q->held);
        wires_free(q->early);
        free(q->recvs);
        free(q);
    }
    while (nic->cqs) {
        sg_cq *cq = nic->cqs;
        nic->cqs = cq->next;
        free(cq->ring);
        free(cq);
    }
    while (nic->chans) {
        sg_chan *ch = nic->chans;
        nic->chans = ch->next;
        if (ch->watched) eccl_net_sg_unwatch(e, &ch->src);
        chan_free(ch);
    }
    while (nic->mrs) {
        sg_mr *r = nic->mrs;
        nic->mrs = r->next;
        free(r);
    }
    free(nic);
}

void eccl_verbs_sg_detach(sg_env *e)
{
    sg_nic *nic = e->nic;
    if (!nic) return;
    /* The protocol deregisters what it cached; its conns are closed. */
    eccl_ibv_destroy(nic->proto);
    nic->proto = NULL;
    e->env.net = &eccl_net_sg_ops;
    e->env.net_ctx = e;
    eccl_verbs_sg_free_dead(e);
}
