#include "coll/p2p.h"

#include <string.h>

#include "coll/ring_allreduce.h" /* ECCL_RING_MAX_QUEUED */

/* A frame's step. */
enum { P2P_DATA = 0, P2P_LAST = 1, P2P_ACK = 2 };

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull; /* splitmix64's finaliser */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t eccl_p2p_tag(uint64_t tag, uint32_t src, uint32_t dst, uint32_t epoch)
{
    uint64_t x = mix(tag);
    x = mix(x ^ ((uint64_t)src << 32 | dst));
    x = mix(x ^ epoch);
    return x | ECCL_P2P_TAG_BIT;
}

static int sender(const eccl_p2p *p) { return p->call.kind == ECCL_COLL_SEND; }

void eccl_p2p_init(eccl_p2p *p, const eccl_coll_call *call, uint8_t *backup)
{
    memset(p, 0, sizeof *p);
    p->call = *call;
    p->bytes = call->count * eccl_dtype_size(call->dtype);
    p->backup = backup;
    if (!sender(p)) call->env->dev->copy(call->env->dev_ctx, backup, call->recvbuf, p->bytes);
}

static eccl_result send_token(eccl_p2p *p, eccl_chan *link, uint16_t step)
{
    eccl_wire_data t = {.tag = p->call.tag, .epoch = p->call.epoch, .phase = ECCL_PHASE_P2P, .step = step};
    return eccl_chan_send_data(link, &t, NULL, &p->inflight);
}

static eccl_result p2p_pump(void *op, const eccl_coll_links *links)
{
    eccl_p2p *p = op;
    eccl_chan *link = links->peer(links->ctx, p->call.root);
    if (!link) return ECCL_OK; /* opening: the frames wait */
    if (!sender(p)) {
        if (p->done == p->bytes && !p->ack_sent) {
            eccl_result rc = send_token(p, link, P2P_ACK);
            if (rc != ECCL_OK) return rc;
            p->ack_sent = 1;
        }
        return ECCL_OK;
    }
    while (p->done < p->bytes && link->queued_bytes < ECCL_RING_MAX_QUEUED) {
        size_t len = p->bytes - p->done < ECCL_P2P_SLICE_BYTES ? p->bytes - p->done : ECCL_P2P_SLICE_BYTES;
        eccl_wire_data w = {.tag = p->call.tag, .epoch = p->call.epoch, .phase = ECCL_PHASE_P2P,
                            .step = p->done + len == p->bytes ? P2P_LAST : P2P_DATA, .offset = p->done,
                            .len = (uint32_t)len};
        eccl_result rc = eccl_chan_send_data(link, &w, p->call.sendbuf + p->done, &p->inflight);
        if (rc != ECCL_OK) return rc;
        p->done += len;
        p->tx_bytes += len;
    }
    return ECCL_OK;
}

static eccl_result p2p_recv(void *op, int role, const eccl_wire_data *w, void **dst)
{
    eccl_p2p *p = op;
    if (role != ECCL_ROLE_PEER + (int)p->call.root || w->phase != ECCL_PHASE_P2P || w->ring != 0 ||
        w->flags != 0)
        return ECCL_ERR_PROTOCOL;
    *dst = NULL;
    if (sender(p)) /* only ACK comes back, once, after every byte left */
        return w->step == P2P_ACK && w->len == 0 && !p->ack && p->done == p->bytes ? ECCL_OK : ECCL_ERR_PROTOCOL;
    /* Slices in order; the last one must end exactly at our count (a
     * sender of another size is a malformed peer). */
    int last = w->step == P2P_LAST;
    if ((w->step != P2P_DATA && !last) || w->offset != p->done || w->len == 0 || w->len > p->bytes - p->done ||
        w->len > ECCL_P2P_SLICE_BYTES || last != (p->done + w->len == p->bytes))
        return ECCL_ERR_PROTOCOL;
    *dst = p->call.recvbuf + p->done; /* backed up at init */
    return ECCL_OK;
}

static eccl_result p2p_recv_done(void *op, int role, const eccl_wire_data *w)
{
    eccl_p2p *p = op;
    (void)role;
    if (w->step == P2P_ACK) {
        p->ack = 1;
    } else {
        p->done += w->len;
        p->rx_bytes += w->len;
    }
    return ECCL_OK;
}

static int p2p_have_full(const void *op)
{
    const eccl_p2p *p = op;
    return sender(p) ? p->ack : p->done == p->bytes;
}

static int p2p_complete(void *op)
{
    const eccl_p2p *p = op;
    if (p->inflight) return 0;
    return sender(p) ? p->ack : p->ack_sent;
}

static int p2p_expects(const void *op, int role)
{
    const eccl_p2p *p = op;
    return role == ECCL_ROLE_PEER + (int)p->call.root && (sender(p) ? !p->ack : p->done < p->bytes);
}

static void p2p_restore(void *op)
{
    eccl_p2p *p = op;
    if (!sender(p)) p->call.env->dev->copy(p->call.env->dev_ctx, p->call.recvbuf, p->backup, p->bytes);
}

static void p2p_bytes(const void *op, uint64_t *tx, uint64_t *rx)
{
    const eccl_p2p *p = op;
    *tx = p->tx_bytes;
    *rx = p->rx_bytes;
}

const eccl_coll_algo eccl_p2p_algo = {
    .id = ECCL_ALGO_DIRECT,
    .roles = ECCL_ROLES_PEERS,
    .pump_needs = 0,
    .pump = p2p_pump,
    .recv = p2p_recv,
    .recv_done = p2p_recv_done,
    .complete = p2p_complete,
    .expects = p2p_expects,
    .have_full = p2p_have_full,
    .restore = p2p_restore,
    .bytes = p2p_bytes,
};
