#include "coll/ring_allreduce.h"

#include <string.h>

#include "quant/quant.h"
#include "util/log.h"

/* Element range of chunk c of a ring's share: N nearly equal chunks. */
static void chunk_range(const eccl_ring_allreduce *r, const eccl_ring_dir *d,
                        uint32_t c, size_t *off, size_t *len)
{
    size_t q = d->elem_count / r->call.nranks, rem = d->elem_count % r->call.nranks;
    *off = d->elem_off + (size_t)c * q + (c < rem ? c : rem);
    *len = q + (c < rem ? 1 : 0);
}

static uint32_t steps(const eccl_ring_allreduce *r) { return 2 * (r->call.nranks - 1); }

static uint32_t mod_n(const eccl_ring_allreduce *r, int64_t x)
{
    int64_t n = r->call.nranks;
    return (uint32_t)(((x % n) + n) % n);
}

/* Chunk sent (recv=0) or received (recv=1) at global step g. */
static uint32_t step_chunk(const eccl_ring_allreduce *r, const eccl_ring_dir *d,
                           uint32_t g, int recv)
{
    int64_t p = d->pos;
    if (g < r->call.nranks - 1) return mod_n(r, p - g - recv);
    int64_t s = g - (r->call.nranks - 1);
    return mod_n(r, p + 1 - s - recv);
}

static uint32_t chunk_slices(const eccl_ring_allreduce *r, size_t len)
{
    return (uint32_t)((len + r->slice_elems - 1) / r->slice_elems);
}

/* Element range of slice k of the chunk handled at step g. */
static void slice_range(const eccl_ring_allreduce *r, const eccl_ring_dir *d,
                        uint32_t g, int recv, uint32_t k, size_t *off, size_t *len)
{
    size_t coff, clen;
    chunk_range(r, d, step_chunk(r, d, g, recv), &coff, &clen);
    size_t start = (size_t)k * r->slice_elems;
    *off = coff + start;
    *len = clen - start < r->slice_elems ? clen - start : r->slice_elems;
}

/* Skips steps whose chunk is empty; returns 1 while the cursor is valid. */
static int cursor_settle(const eccl_ring_allreduce *r, const eccl_ring_dir *d,
                         uint32_t *g, uint32_t *k, int recv)
{
    while (*g < steps(r)) {
        size_t off, len;
        chunk_range(r, d, step_chunk(r, d, *g, recv), &off, &len);
        if (*k < chunk_slices(r, len)) return 1;
        (*g)++;
        *k = 0;
    }
    return 0;
}

/* ---- quantised images ------------------------------------------------------ */

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

/* Slices of a ring's chunks 0..c-1 (chunk lengths: q + 1 for the first
 * `rem`, q for the rest). */
static size_t slices_before(const eccl_ring_allreduce *r, const eccl_ring_dir *d, uint32_t c)
{
    size_t n = r->call.nranks, q = d->elem_count / n, rem = d->elem_count % n;
    size_t big = c < rem ? c : rem;
    return big * ceil_div(q + 1, r->slice_elems) + (c - big) * ceil_div(q, r->slice_elems);
}

/* Bytes of one ring's share of an image: one record per slice plus one code
 * per value. */
static size_t ring_img_bytes(const eccl_ring_allreduce *r, const eccl_ring_dir *d)
{
    return d->elem_count + ECCL_QUANT_META_BYTES * slices_before(r, d, r->call.nranks);
}

/* Where slice k of the chunk handled at step g (sending: recv 0) sits in an
 * image. A chunk's slot is the same whichever step names it. */
static uint8_t *qslot(const eccl_ring_allreduce *r, int img, uint32_t ring, uint32_t g, int recv,
                      uint32_t k)
{
    const eccl_ring_dir *d = &r->dir[ring];
    uint32_t c = step_chunk(r, d, g, recv);
    size_t coff, clen;
    chunk_range(r, d, c, &coff, &clen);
    size_t at = (ring ? ring_img_bytes(r, &r->dir[0]) : 0) + (coff - d->elem_off) +
                (size_t)k * r->slice_elems +
                ECCL_QUANT_META_BYTES * (slices_before(r, d, c) + k);
    return r->qimg[img] + at;
}

/* One image: the codes of every direction's chunks. */
static size_t ring_img_half(const eccl_ring_allreduce *r)
{
    return ring_img_bytes(r, &r->dir[0]) + (r->nrings == 2 ? ring_img_bytes(r, &r->dir[1]) : 0);
}

size_t eccl_ring_quant_bytes(const eccl_ring_allreduce *r)
{
    return r->exchange ? 0 : 2 * ring_img_half(r);
}

size_t eccl_ring_staging_bytes_q(size_t count, eccl_dtype dtype, eccl_quant_type quant)
{
    size_t b = eccl_ring_staging_bytes(count, dtype);
    return quant == ECCL_QUANT_NONE ? b : b + ECCL_QUANT_META_BYTES + b / eccl_dtype_size(dtype);
}

void eccl_ring_allreduce_set_quant(eccl_ring_allreduce *r, uint8_t *img)
{
    size_t half = ring_img_half(r);
    size_t base = eccl_ring_staging_bytes(r->call.count, r->call.dtype);
    r->qimg[0] = img;
    r->qimg[1] = img + half;
    for (int i = 0; i < 2; i++) r->dir[i].qstage = r->dir[i].staging ? r->dir[i].staging + base : NULL;
}

void eccl_ring_allreduce_set_slots(eccl_ring_allreduce *r, uint8_t *slots)
{
    size_t each = eccl_ring_staging_bytes(r->call.count, r->call.dtype);
    for (int i = 0; i < ECCL_RING_DEV_SLOTS; i++) r->slot[i] = (eccl_ring_slot){slots + (size_t)i * each, 0, 0};
}

/* ---- device-resident ring ----------------------------------------------------------- */

static int on_device(const eccl_ring_allreduce *r) { return r->call.on_device; }

/* Records the op's first device failure; the op then stops moving bytes
 * and comm fails it with ECCL_ERR_DEVICE. */
static eccl_result dev_fail(eccl_ring_allreduce *r, eccl_result rc)
{
    if (rc != ECCL_OK && r->dev_error == ECCL_OK) r->dev_error = rc == ECCL_ERR_NO_MEMORY ? rc : ECCL_ERR_DEVICE;
    return rc;
}

static eccl_result dcopy(eccl_ring_allreduce *r, void *dst, const void *src, size_t bytes)
{
    const eccl_env *e = r->call.env;
    return dev_fail(r, e->dev->d_copy(e->dev_ctx, r->call.device, dst, src, bytes));
}

static eccl_result dsync(eccl_ring_allreduce *r)
{
    const eccl_env *e = r->call.env;
    return dev_fail(r, e->dev->d_sync(e->dev_ctx, r->call.device));
}

/* A send slot whose last frame the socket took and that no copy is filling,
 * or NULL: all are busy. */
static eccl_ring_slot *free_slot(eccl_ring_allreduce *r)
{
    for (int i = 0; i < ECCL_RING_DEV_SLOTS; i++)
        if (r->slot[i].inflight == 0 && !r->slot[i].filling) return &r->slot[i];
    return NULL;
}

/* A slice landed in staging: reduce it into recvbuf on the device (or copy
 * it, in the all-gather), in the host path's operand order, and wait, since
 * the next frame lands in the same staging. */
static void dev_recv_done(eccl_ring_allreduce *r, eccl_ring_dir *d, const eccl_wire_data *w, size_t n)
{
    if (r->dev_error != ECCL_OK) return;
    const eccl_env *e = r->call.env;
    int dv = r->call.device;
    uint8_t *dst = r->call.recvbuf + w->offset;
    eccl_result rc;
    if (d->recv_g < r->call.nranks - 1) {
        if (r->call.sendbuf == r->call.recvbuf) {
            rc = e->dev->d_reduce(e->dev_ctx, dv, dst, d->staging, n, r->call.dtype, r->call.op);
        } else {
            rc = e->dev->d_copy(e->dev_ctx, dv, dst, d->staging, n * r->esize);
            if (rc == ECCL_OK)
                rc = e->dev->d_reduce(e->dev_ctx, dv, dst, r->call.sendbuf + w->offset, n, r->call.dtype,
                                      r->call.op);
        }
        if (rc == ECCL_OK && d->recv_g == r->call.nranks - 2 && r->call.op == ECCL_AVG)
            rc = e->dev->d_scale_div(e->dev_ctx, dv, dst, n, r->call.dtype, r->call.nranks);
    } else {
        rc = e->dev->d_copy(e->dev_ctx, dv, dst, d->staging, n * r->esize);
    }
    if (dev_fail(r, rc) == ECCL_OK) dsync(r);
}

size_t eccl_ring_staging_bytes(size_t count, eccl_dtype dtype)
{
    size_t es = eccl_dtype_size(dtype);
    size_t slice = ECCL_RING_SLICE_BYTES / es * es;
    size_t bytes = count * es;
    /* Covers an exchange too: it is at most one slice. */
    return bytes < slice ? bytes : slice;
}

void eccl_ring_allreduce_init(eccl_ring_allreduce *r, const eccl_coll_call *call,
                              uint8_t *staging[2], uint8_t *backup)
{
    memset(r, 0, sizeof *r);
    r->call = *call;
    r->backup = backup;
    r->esize = eccl_dtype_size(call->dtype);
    r->slice_elems = ECCL_RING_SLICE_BYTES / r->esize;
    size_t bytes = call->count * r->esize;
    r->exchange = call->quant == ECCL_QUANT_NONE && call->nranks == 2 && !call->on_device &&
                  bytes <= ECCL_RING_EXCHANGE_MAX_BYTES;
    if (r->exchange) {
        /* One swap: ring bookkeeping stays empty. */
        r->nrings = 1;
        r->dir[0].staging = staging ? staging[0] : NULL;
        r->dir[0].send_g = r->dir[0].recv_g = r->dir[1].send_g = r->dir[1].recv_g = steps(r);
        return;
    }
    r->nrings = bytes >= ECCL_RING_TWO_RINGS_MIN_BYTES && call->count >= 2u * call->nranks ? 2 : 1;
    size_t first = r->nrings == 2 ? call->count / 2 : call->count;
    r->dir[0].elem_off = 0;
    r->dir[0].elem_count = first;
    r->dir[0].pos = call->rank;
    r->dir[1].elem_off = first;
    r->dir[1].elem_count = call->count - first;
    /* The reverse ring sends to the previous rank: number positions so that
     * they grow along its send direction too. */
    r->dir[1].pos = (call->nranks - call->rank) % call->nranks;
    for (int i = 0; i < 2; i++) {
        r->dir[i].staging = staging ? staging[i] : NULL;
        cursor_settle(r, &r->dir[i], &r->dir[i].send_g, &r->dir[i].send_k, 0);
        cursor_settle(r, &r->dir[i], &r->dir[i].recv_g, &r->dir[i].recv_k, 1);
        r->dir[i].saved_g = r->dir[i].recv_g;
        r->dir[i].saved_k = r->dir[i].recv_k;
    }
    r->have_full = r->dir[0].recv_g >= steps(r) && r->dir[1].recv_g >= steps(r);
}

static int send_ready(const eccl_ring_allreduce *r, const eccl_ring_dir *d)
{
    if (d->send_g >= steps(r)) return 0;
    if (d->send_g == 0) return 1;
    /* Slice k of step g forwards what slice k of step g-1 brought in. */
    return d->recv_g > d->send_g - 1 ||
           (d->recv_g == d->send_g - 1 && d->recv_k > d->send_k);
}

static eccl_result pump_tokens(eccl_ring_allreduce *r, eccl_chan *link)
{
    if (!r->have_full) return ECCL_OK;
    uint32_t want = r->done_recv + 1 < r->call.nranks - 1 ? r->done_recv + 1 : r->call.nranks - 1;
    while (r->done_sent < want) {
        eccl_wire_data t = {.tag = r->call.tag, .epoch = r->call.epoch, .ring = 0,
                            .phase = ECCL_PHASE_DONE,
                            .step = (uint16_t)(r->done_sent + 1)};
        eccl_result rc = eccl_coll_send_token(r->lazy_tokens, link, &t, NULL);
        if (rc != ECCL_OK) return rc;
        r->done_sent++;
    }
    return ECCL_OK;
}

/* The next slice ring i sends: its DATA header, where its values are, and
 * their count. */
static const uint8_t *next_send(const eccl_ring_allreduce *r, uint32_t i, eccl_wire_data *w, size_t *len)
{
    const eccl_ring_dir *d = &r->dir[i];
    size_t off;
    slice_range(r, d, d->send_g, 0, d->send_k, &off, len);
    int rs = d->send_g < r->call.nranks - 1;
    *w = (eccl_wire_data){.tag = r->call.tag, .epoch = r->call.epoch, .ring = (uint8_t)i,
                          .phase = rs ? ECCL_PHASE_REDUCE_SCATTER : ECCL_PHASE_ALL_GATHER,
                          .step = (uint16_t)(rs ? d->send_g : d->send_g - (r->call.nranks - 1)),
                          .offset = off * r->esize, .len = (uint32_t)(*len * r->esize)};
    return (d->send_g == 0 ? r->call.sendbuf : r->call.recvbuf) + off * r->esize;
}

/* Whether ring i's slices may leave from the device buffers themselves:
 * both (the first step sends the input, later ones the output) are memory
 * the link can carry. */
static void ask_direct(eccl_ring_allreduce *r, eccl_chan *link[2])
{
    r->direct_asked = 1;
    for (uint32_t i = 0; i < r->nrings; i++)
        r->direct[i] = eccl_chan_device_bulk(link[i], r->call.sendbuf, r->call.device) &&
                       (r->call.recvbuf == r->call.sendbuf ||
                        eccl_chan_device_bulk(link[i], r->call.recvbuf, r->call.device));
}

/* The device-resident pump: every slice that is ready and has a way out
 * (a free send slot it is copied into, or the link itself reading device
 * memory) is taken; one wait covers all the copies and the device work
 * that wrote the slices; then the frames are queued. While they are on the
 * wire, the next pump takes the next slices. */
static eccl_result pump_device(eccl_ring_allreduce *r, eccl_chan *link[2])
{
    struct {
        eccl_ring_slot *sl; /* NULL: straight from the device buffer */
        const uint8_t *src;
        uint32_t ring;
        eccl_wire_data w;
    } out[ECCL_RING_DEV_SLOTS];
    int n = 0;
    eccl_result rc = ECCL_OK;
    if (!r->direct_asked) ask_direct(r, link);
    for (uint32_t i = 0; i < r->nrings && r->dev_error == ECCL_OK; i++) {
        eccl_ring_dir *d = &r->dir[i];
        size_t queued = link[i]->queued_bytes;
        size_t direct_min = r->direct[i] ? eccl_chan_bulk_min(link[i]) : 0;
        while (send_ready(r, d) && queued < ECCL_RING_MAX_QUEUED && n < ECCL_RING_DEV_SLOTS) {
            size_t len;
            eccl_wire_data w;
            const uint8_t *src = next_send(r, i, &w, &len);
            eccl_ring_slot *sl = NULL;
            if (!direct_min || w.len < direct_min) {
                if (!(sl = free_slot(r)) || dcopy(r, sl->p, src, w.len) != ECCL_OK) break;
                sl->filling = 1;
            }
            out[n].sl = sl;
            out[n].src = src;
            out[n].ring = i;
            out[n++].w = w;
            queued += w.len;
            d->send_k++;
            cursor_settle(r, d, &d->send_g, &d->send_k, 0);
        }
    }
    if (n && dsync(r) == ECCL_OK) {
        for (int k = 0; k < n && rc == ECCL_OK; k++) {
            eccl_chan *ch = link[out[k].ring];
            rc = out[k].sl ? eccl_chan_send_data(ch, &out[k].w, out[k].sl->p, &out[k].sl->inflight)
                           : eccl_chan_send_data_device(ch, &out[k].w, out[k].src, r->call.device, &r->inflight);
            if (rc == ECCL_OK) r->tx_bytes += out[k].w.len;
        }
    }
    for (int k = 0; k < n; k++)
        if (out[k].sl) out[k].sl->filling = 0;
    return rc != ECCL_OK ? rc : pump_tokens(r, link[0]);
}

/* Both ranks compute (rank 0's data) op (rank 1's data): identical bits. */
static void exchange_finish(eccl_ring_allreduce *r)
{
    const eccl_dev_ops *dev = r->call.env->dev;
    void *ctx = r->call.env->dev_ctx;
    size_t bytes = r->call.count * r->esize;
    uint8_t *in = r->dir[0].staging;
    if (r->backup) dev->copy(ctx, r->backup, r->call.recvbuf, bytes);
    r->exchange_saved = r->backup != NULL;
    if (r->call.rank == 0) {
        if (r->call.sendbuf != r->call.recvbuf) dev->copy(ctx, r->call.recvbuf, r->call.sendbuf, bytes);
        dev->reduce(ctx, r->call.recvbuf, in, r->call.count, r->call.dtype, r->call.op);
    } else {
        dev->reduce(ctx, in, r->call.sendbuf, r->call.count, r->call.dtype, r->call.op);
        dev->copy(ctx, r->call.recvbuf, in, bytes);
    }
    if (r->call.op == ECCL_AVG) dev->scale_div(ctx, r->call.recvbuf, r->call.count, r->call.dtype, 2);
    r->have_full = 1;
}

eccl_result eccl_ring_allreduce_pump(eccl_ring_allreduce *r, eccl_chan *link[2])
{
    if (on_device(r)) return pump_device(r, link);
    if (r->exchange && !r->exchange_sent) {
        eccl_wire_data w = {.tag = r->call.tag, .epoch = r->call.epoch, .phase = ECCL_PHASE_EXCHANGE,
                            .len = (uint32_t)(r->call.count * r->esize)};
        eccl_result rc = eccl_chan_send_data(link[0], &w, r->call.sendbuf, &r->inflight);
        if (rc != ECCL_OK) return rc;
        r->tx_bytes += w.len;
        r->exchange_sent = 1;
    }
    /* The result is written once our own frame has left (in place, it
     * overwrites what the socket may still be sending); the done token,
     * below, only after it. */
    if (r->exchange && r->exchange_recvd && !r->have_full && r->inflight == 0) exchange_finish(r);
    for (uint32_t i = 0; i < r->nrings; i++) {
        eccl_ring_dir *d = &r->dir[i];
        while (send_ready(r, d) && link[i]->queued_bytes < ECCL_RING_MAX_QUEUED) {
            size_t len;
            eccl_wire_data w;
            const uint8_t *src = next_send(r, i, &w, &len);
            int rs = w.phase == ECCL_PHASE_REDUCE_SCATTER;
            if (r->call.quant != ECCL_QUANT_NONE) {
                uint8_t *slot = qslot(r, !rs, i, d->send_g, 0, d->send_k);
                if (rs) {
                    /* Our partial, quantised as it leaves; raw if the
                     * quantiser refuses it (NaN, infinity). */
                    eccl_quant_meta m;
                    if (eccl_quant_quantize(r->call.quant, r->call.dtype, src, len,
                                            slot + ECCL_QUANT_META_BYTES, &m) != ECCL_OK ||
                        eccl_wire_qdata_encode(&m, slot) != ECCL_OK)
                        slot[0] = 0;
                }
                /* All-gather: the owner's record and codes, or the ones
                 * received, unchanged; a raw slice goes from recvbuf. */
                if (slot[0] != 0) {
                    src = slot;
                    w.flags = ECCL_WIRE_DATA_QUANT;
                    w.len = (uint32_t)(ECCL_QUANT_META_BYTES + len);
                }
            }
            eccl_result rc = eccl_chan_send_data(link[i], &w, src, &r->inflight);
            if (rc != ECCL_OK) return rc;
            r->tx_bytes += w.len;
            d->send_k++;
            cursor_settle(r, d, &d->send_g, &d->send_k, 0);
        }
    }
    return pump_tokens(r, link[0]);
}

eccl_result eccl_ring_allreduce_recv(eccl_ring_allreduce *r, int ring,
                                     const eccl_wire_data *w, void **dst)
{
    if (w->phase == ECCL_PHASE_DONE) {
        if (ring != 0 || w->len != 0 || w->step != r->done_recv + 1 ||
            w->step > r->call.nranks - 1)
            return ECCL_ERR_PROTOCOL;
        *dst = NULL;
        return ECCL_OK;
    }
    if (r->exchange) {
        if (ring != 0 || w->phase != ECCL_PHASE_EXCHANGE || w->step != 0 || w->offset != 0 ||
            w->len != r->call.count * r->esize || r->have_full)
            return ECCL_ERR_PROTOCOL;
        *dst = r->dir[0].staging;
        return ECCL_OK;
    }
    if ((uint32_t)ring >= r->nrings) return ECCL_ERR_PROTOCOL;
    eccl_ring_dir *d = &r->dir[ring];
    if (d->recv_g >= steps(r)) return ECCL_ERR_PROTOCOL;
    int rs = d->recv_g < r->call.nranks - 1;
    uint32_t step = rs ? d->recv_g : d->recv_g - (r->call.nranks - 1);
    size_t off, len;
    slice_range(r, d, d->recv_g, 1, d->recv_k, &off, &len);
    /* A quantised op takes quantised or raw slices (see the header); a
     * plain one only raw ones. */
    int q = (w->flags & ECCL_WIRE_DATA_QUANT) != 0;
    if (w->phase != (rs ? ECCL_PHASE_REDUCE_SCATTER : ECCL_PHASE_ALL_GATHER) ||
        w->step != step || w->offset != off * r->esize ||
        (q && r->call.quant == ECCL_QUANT_NONE) ||
        w->len != (q ? ECCL_QUANT_META_BYTES + len : len * r->esize))
        return ECCL_ERR_PROTOCOL;
    if (d->saved_g == d->recv_g && d->saved_k == d->recv_k) {
        /* First writes: every reduce-scatter slice, and the all-gather's
         * first step (our own chunk out of place, or in place the chunk we
         * only sent so far); later all-gather steps rewrite saved slices. */
        if (d->recv_g <= r->call.nranks - 1 && r->backup) { /* none out of place: call.h */
            if (on_device(r)) dcopy(r, r->backup + w->offset, r->call.recvbuf + w->offset, len * r->esize);
            else r->call.env->dev->copy(r->call.env->dev_ctx, r->backup + w->offset,
                                        r->call.recvbuf + w->offset, len * r->esize);
        }
        d->saved_k++;
        cursor_settle(r, d, &d->saved_g, &d->saved_k, 1);
    }
    if (q) {
        /* Codes are dequantised in recv_done; all-gather codes stay in
         * the image, to be forwarded as they came. */
        *dst = rs ? d->qstage : qslot(r, 1, (uint32_t)ring, d->recv_g, 1, d->recv_k);
        return ECCL_OK;
    }
    /* In place, the incoming partial cannot overwrite our own contribution,
     * so it lands in staging; out of place it lands in recvbuf and our
     * contribution comes from sendbuf. On the device everything lands in
     * (pinned) staging: the net cannot write device memory. */
    if (on_device(r)) *dst = r->dev_error == ECCL_OK ? d->staging : NULL;
    else if (rs && r->call.sendbuf == r->call.recvbuf) *dst = d->staging;
    else *dst = r->call.recvbuf + w->offset;
    return ECCL_OK;
}

eccl_result eccl_ring_allreduce_recv_done(eccl_ring_allreduce *r, int ring,
                                          const eccl_wire_data *w)
{
    if (w->phase == ECCL_PHASE_DONE) {
        r->done_recv = w->step;
        return ECCL_OK;
    }
    eccl_ring_dir *d = &r->dir[ring];
    r->rx_bytes += w->len;
    const eccl_dev_ops *dev = r->call.env->dev;
    if (r->exchange) {
        /* The result is written once our own frame has left (see
         * eccl_ring_allreduce_pump). */
        r->exchange_recvd = 1;
        return ECCL_OK;
    }
    int q = (w->flags & ECCL_WIRE_DATA_QUANT) != 0;
    size_t off, n;
    slice_range(r, d, d->recv_g, 1, d->recv_k, &off, &n);
    if (on_device(r)) {
        dev_recv_done(r, d, w, n);
        d->recv_k++;
        cursor_settle(r, d, &d->recv_g, &d->recv_k, 1);
        r->have_full = r->dir[0].recv_g >= steps(r) && r->dir[1].recv_g >= steps(r);
        return ECCL_OK;
    }
    uint8_t *dst = r->call.recvbuf + w->offset;
    int in_place = r->call.sendbuf == r->call.recvbuf;
    if (q) {
        /* Decoded and checked against the call before any value is
         * written: a peer with other options is a protocol error. */
        uint8_t *payload = d->recv_g < r->call.nranks - 1
                               ? d->qstage
                               : qslot(r, 1, (uint32_t)ring, d->recv_g, 1, d->recv_k);
        eccl_quant_meta m;
        const uint8_t *codes;
        if (eccl_wire_qdata_decode(payload, w->len, &m, &codes) != ECCL_OK ||
            m.type != (uint8_t)r->call.quant || m.dtype != (uint8_t)r->call.dtype || m.count != n)
            return ECCL_ERR_PROTOCOL;
        void *out = d->recv_g < r->call.nranks - 1 && in_place ? d->staging : dst;
        if (eccl_quant_dequantize(&m, codes, n, out) != ECCL_OK) return ECCL_ERR_PROTOCOL;
    } else if (r->call.quant != ECCL_QUANT_NONE && d->recv_g >= r->call.nranks - 1) {
        /* A raw all-gather slice: forwarded from recvbuf. */
        qslot(r, 1, (uint32_t)ring, d->recv_g, 1, d->recv_k)[0] = 0;
    }
    if (d->recv_g < r->call.nranks - 1) {
        if (in_place)
            dev->reduce(r->call.env->dev_ctx, dst, d->staging, n, r->call.dtype, r->call.op);
        else
            dev->reduce(r->call.env->dev_ctx, dst, r->call.sendbuf + w->offset, n, r->call.dtype, r->call.op);
        if (d->recv_g == r->call.nranks - 2 && r->call.op == ECCL_AVG)
            dev->scale_div(r->call.env->dev_ctx, dst, n, r->call.dtype, r->call.nranks);
        if (d->recv_g == r->call.nranks - 2 && r->call.quant != ECCL_QUANT_NONE) {
            /* We own this slice now: quantise it once and keep exactly the
             * values every other peer will dequantise from what we send. */
            uint8_t *slot = qslot(r, 1, (uint32_t)ring, d->recv_g, 1, d->recv_k);
            eccl_quant_meta m;
            if (eccl_quant_quantize(r->call.quant, r->call.dtype, dst, n,
                                    slot + ECCL_QUANT_META_BYTES, &m) != ECCL_OK ||
                eccl_wire_qdata_encode(&m, slot) != ECCL_OK ||
                eccl_quant_dequantize(&m, slot + ECCL_QUANT_META_BYTES, n, dst) != ECCL_OK)
                slot[0] = 0; /* dst untouched (each step is all or nothing): raw */
        }
    }
    d->recv_k++;
    cursor_settle(r, d, &d->recv_g, &d->recv_k, 1);
    r->have_full = r->dir[0].recv_g >= steps(r) && r->dir[1].recv_g >= steps(r);
    return ECCL_OK;
}

int eccl_ring_allreduce_complete(eccl_ring_allreduce *r)
{
    /* Every frame of ours queued (back-pressure may still hold some) and
     * written: the peers need them whether or not we need theirs. */
    if (r->inflight > 0) return 0;
    if (on_device(r)) {
        for (int i = 0; i < ECCL_RING_DEV_SLOTS; i++)
            if (r->slot[i].inflight) return 0;
        /* A failed device leaves the op to comm (ECCL_ERR_DEVICE). */
        if (r->dev_error != ECCL_OK) return 0;
    }
    if (!r->have_full || r->dir[0].send_g < steps(r) || r->dir[1].send_g < steps(r)) return 0;
    return r->done_recv >= r->call.nranks - 1 && r->done_sent >= r->call.nranks - 1;
}

int eccl_ring_allreduce_expects(const eccl_ring_allreduce *r, int ring)
{
    if (r->exchange) return ring == 0 && (!r->exchange_recvd || r->done_recv < 1);
    if (ring != 0) return r->dir[1].recv_g < steps(r);
    return r->dir[0].recv_g < steps(r) || r->done_recv < r->call.nranks - 1;
}

void eccl_ring_allreduce_restore(eccl_ring_allreduce *r)
{
    const eccl_dev_ops *dev = r->call.env->dev;
    if (r->exchange) {
        if (r->exchange_saved) dev->copy(r->call.env->dev_ctx, r->call.recvbuf, r->backup, r->call.count * r->esize);
        return;
    }
    for (uint32_t i = 0; i < r->nrings; i++) {
        eccl_ring_dir *d = &r->dir[i];
        uint32_t g = 0, k = 0;
        cursor_settle(r, d, &g, &k, 1);
        /* Every saved slice, in the order they were saved. */
        while (g < d->saved_g || (g == d->saved_g && k < d->saved_k)) {
            if (g <= r->call.nranks - 1 && r->backup) {
                size_t off, len;
                slice_range(r, d, g, 1, k, &off, &len);
                if (on_device(r))
                    dcopy(r, r->call.recvbuf + off * r->esize, r->backup + off * r->esize, len * r->esize);
                else
                    dev->copy(r->call.env->dev_ctx, r->call.recvbuf + off * r->esize,
                              r->backup + off * r->esize, len * r->esize);
            }
            k++;
            cursor_settle(r, d, &g, &k, 1);
        }
    }
    /* The caller may read recvbuf once this returns. */
    if (on_device(r)) dsync(r);
}

/* ---- behind coll/algo.h ------------------------------------------------------ */

/* Ring i's frames arrive over the link in role i: ring 0 from prev, ring 1
 * from next; link[0] of the state machine sends ring 0 (to next). */
static eccl_result algo_pump(void *op, const eccl_coll_links *links)
{
    eccl_chan *ring[2] = {links->role[ECCL_ROLE_NEXT], links->role[ECCL_ROLE_PREV]};
    ((eccl_ring_allreduce *)op)->lazy_tokens = links->lazy_tokens;
    return eccl_ring_allreduce_pump(op, ring);
}

static eccl_result algo_recv(void *op, int role, const eccl_wire_data *d, void **dst)
{
    if (role != ECCL_ROLE_PREV && role != ECCL_ROLE_NEXT) return ECCL_ERR_PROTOCOL;
    /* Done tokens travel on ring 0; data only on the link of its ring. */
    if (d->phase == ECCL_PHASE_DONE) return eccl_ring_allreduce_recv(op, 0, d, dst);
    if (d->ring != role) return ECCL_ERR_PROTOCOL;
    return eccl_ring_allreduce_recv(op, role, d, dst);
}

static eccl_result algo_recv_done(void *op, int role, const eccl_wire_data *d)
{
    return eccl_ring_allreduce_recv_done(op, d->phase == ECCL_PHASE_DONE ? 0 : role, d);
}

static int algo_complete(void *op) { return eccl_ring_allreduce_complete(op); }

/* Our output final and every frame of ours written (the done tokens
 * aside): a small call may return early (coll/algo.h). Host buffers only:
 * a device op's slots are in flight until its end. */
static int algo_settled(const void *op)
{
    const eccl_ring_allreduce *r = op;
    return !on_device(r) && r->inflight == 0 && r->have_full && r->dir[0].send_g >= steps(r) &&
           r->dir[1].send_g >= steps(r);
}

/* The done tokens go to next, each after the one before came from prev. */
static int algo_owes_token(const void *op, int role)
{
    const eccl_ring_allreduce *r = op;
    return role == ECCL_ROLE_NEXT && r->done_sent < r->call.nranks - 1;
}

static int algo_expects(const void *op, int role)
{
    return (role == ECCL_ROLE_PREV || role == ECCL_ROLE_NEXT) && eccl_ring_allreduce_expects(op, role);
}

static int algo_have_full(const void *op) { return ((const eccl_ring_allreduce *)op)->have_full; }
static void algo_restore(void *op) { eccl_ring_allreduce_restore(op); }
static eccl_result algo_error(const void *op) { return ((const eccl_ring_allreduce *)op)->dev_error; }

static void algo_bytes(const void *op, uint64_t *tx, uint64_t *rx)
{
    const eccl_ring_allreduce *r = op;
    *tx = r->tx_bytes;
    *rx = r->rx_bytes;
}

const eccl_coll_algo eccl_ring_allreduce_algo = {
    .id = ECCL_ALGO_RING,
    .roles = ECCL_ROLES_RING,
    .pump_needs = ECCL_ROLES_RING,
    .pump = algo_pump,
    .recv = algo_recv,
    .recv_done = algo_recv_done,
    .complete = algo_complete,
    .settled = algo_settled,
    .owes_token = algo_owes_token,
    .expects = algo_expects,
    .have_full = algo_have_full,
    .restore = algo_restore,
    .error = algo_error,
    .bytes = algo_bytes,
};
