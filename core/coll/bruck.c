#include "coll/bruck.h"

#include <string.h>

#include "coll/ring_allreduce.h" /* ECCL_RING_MAX_QUEUED */
#include "coll/ring_pass.h"      /* ECCL_RING_PASS_SLICE_BYTES */

/* ---- layout ------------------------------------------------------------------ */

static size_t blk_bytes(const eccl_bruck *b, uint32_t o)
{
    return (b->call.vcounts ? b->call.vcounts[o] : b->call.count) * b->esize;
}

static size_t blk_at(const eccl_bruck *b, uint32_t o)
{
    return (b->call.vcounts ? b->call.vdispls[o] : (size_t)o * b->call.count) * b->esize;
}

size_t eccl_bruck_output_bytes(const eccl_coll_call *c)
{
    size_t es = eccl_dtype_size(c->dtype), end = 0;
    if (!c->vcounts) return (size_t)c->nranks * c->count * es;
    for (uint32_t o = 0; o < c->nranks; o++) {
        size_t e = (c->vdispls[o] + c->vcounts[o]) * es;
        if (e > end) end = e;
    }
    return end;
}

uint32_t eccl_bruck_round_blocks(uint32_t nranks, uint32_t k)
{
    uint64_t step = (uint64_t)1 << k;
    return (uint32_t)(step < nranks - step ? step : nranks - step);
}

static uint32_t origin(const eccl_bruck *b, uint64_t from, uint32_t j)
{
    return (uint32_t)((from + j) % b->call.nranks);
}

/* Round k's partners: we send to rank - 2^k and hear from rank + 2^k. */
static uint32_t tx_peer(const eccl_bruck *b, uint32_t k)
{
    uint64_t n = b->call.nranks;
    return (uint32_t)(((uint64_t)b->call.rank + n - ((uint64_t)1 << k) % n) % n);
}

static uint32_t rx_peer(const eccl_bruck *b, uint32_t k)
{
    return origin(b, b->call.rank, (uint32_t)(((uint64_t)1 << k) % b->call.nranks));
}

/* The frames of round k's list starting at origin `first`: runs of
 * adjacent non-empty blocks, each in slices; at least one (empty) frame.
 * Returns how many; frame `want` (if < that) in *off, *len. The sender
 * and the receiver of a round call it with the same `first`. */
static uint32_t frames(const eccl_bruck *b, uint32_t first, uint32_t k, uint32_t want, size_t *off,
                       size_t *len)
{
    uint32_t m = eccl_bruck_round_blocks(b->call.nranks, k), n = 0;
    size_t run_at = 0, run_len = 0;
    *off = 0;
    *len = 0;
    for (uint32_t j = 0; j <= m; j++) {
        size_t at = 0, bytes = 0;
        if (j < m) {
            uint32_t o = origin(b, first, j);
            at = blk_at(b, o);
            bytes = blk_bytes(b, o);
            if (!bytes) continue;
            if (run_len && run_at + run_len == at) {
                run_len += bytes;
                continue;
            }
        }
        /* The run so far ends here: its slices. */
        uint32_t ns = (uint32_t)((run_len + b->slice - 1) / b->slice);
        if (want >= n && want < n + ns) {
            size_t start = (size_t)(want - n) * b->slice;
            *off = run_at + start;
            *len = run_len - start < b->slice ? run_len - start : b->slice;
        }
        n += ns;
        run_at = at;
        run_len = bytes;
    }
    return n ? n : 1;
}

static void save_block(eccl_bruck *b, uint32_t o)
{
    size_t at = blk_at(b, o);
    eccl_coll_save(&b->call, b->backup, at, blk_bytes(b, o));
}

/* Backs up the blocks round k brings, once, before its first write. */
static void save_round(eccl_bruck *b, uint32_t k)
{
    if (b->saved >> k & 1u) return;
    uint32_t m = eccl_bruck_round_blocks(b->call.nranks, k), first = rx_peer(b, k);
    for (uint32_t j = 0; j < m; j++) save_block(b, origin(b, first, j));
    b->saved |= (uint64_t)1 << k;
}

/* ---- init ---------------------------------------------------------------------- */

void eccl_bruck_init_ex(eccl_bruck *b, const eccl_coll_call *call, uint8_t *backup, size_t slice_bytes)
{
    memset(b, 0, sizeof *b);
    b->call = *call;
    b->backup = backup;
    b->esize = eccl_dtype_size(call->dtype);
    b->slice = slice_bytes / b->esize * b->esize;
    if (b->slice == 0) b->slice = b->esize;
    b->rounds = eccl_ceil_log2(call->nranks);
    for (uint32_t k = 0; k < b->rounds; k++) {
        size_t off, len;
        b->n_tx[k] = frames(b, call->rank, k, UINT32_MAX, &off, &len);
        b->n_rx[k] = frames(b, rx_peer(b, k), k, UINT32_MAX, &off, &len);
    }
    eccl_dissem_init(&b->bar, call->rank, call->nranks);
    /* Our own block goes into recvbuf before any frame leaves: every send
     * then reads recvbuf, and nothing is written there after it is sent. */
    uint8_t *own = call->recvbuf + blk_at(b, call->rank);
    if (own != call->sendbuf && blk_bytes(b, call->rank)) {
        save_block(b, call->rank);
        b->own_saved = 1;
        eccl_coll_copy(&b->call, own, call->sendbuf, blk_bytes(b, call->rank));
    }
}

void eccl_bruck_init(eccl_bruck *b, const eccl_coll_call *call, uint8_t *backup)
{
    eccl_bruck_init_ex(b, call, backup, ECCL_RING_PASS_SLICE_BYTES);
}

/* ---- progress ---------------------------------------------------------------------- */

/* Asks for the link of every rank we still send to or hear from: the
 * lower rank of a pair opens it, even one that only listens. */
static void touch_links(const eccl_bruck *b, const eccl_coll_links *links)
{
    for (uint32_t k = 0; k < b->rounds; k++) {
        if (b->tx_i[k] < b->n_tx[k]) (void)eccl_coll_peer(links, tx_peer(b, k));
        if (b->rx_got[k] < b->n_rx[k]) (void)eccl_coll_peer(links, rx_peer(b, k));
    }
    eccl_dissem_touch(&b->bar, links);
}

static int all_sent(const eccl_bruck *b)
{
    for (uint32_t k = 0; k < b->rounds; k++)
        if (b->tx_i[k] < b->n_tx[k]) return 0;
    return 1;
}

static eccl_result bruck_pump(void *op, const eccl_coll_links *links)
{
    eccl_bruck *b = op;
    touch_links(b, links);
    /* Round k forwards what rounds 0..k-1 brought; each round has its own
     * partner, so a round whose link is not open holds back no other. */
    for (uint32_t k = 0; k < b->rounds && k <= b->rx_rounds; k++) {
        eccl_chan *ch = b->tx_i[k] < b->n_tx[k] ? eccl_coll_peer(links, tx_peer(b, k)) : NULL;
        while (ch && b->tx_i[k] < b->n_tx[k] && ch->queued_bytes < ECCL_RING_MAX_QUEUED) {
            size_t off, len;
            (void)frames(b, b->call.rank, k, b->tx_i[k], &off, &len);
            eccl_wire_data w = {.tag = b->call.tag, .epoch = b->call.epoch, .phase = ECCL_PHASE_BRUCK,
                                .step = (uint16_t)k, .offset = off, .len = (uint32_t)len};
            eccl_result rc = eccl_chan_send_data(ch, &w, len ? b->call.recvbuf + off : NULL, &b->inflight);
            if (rc != ECCL_OK) return rc;
            b->tx_bytes += len;
            b->tx_i[k]++;
        }
    }
    if (!b->have_full || !all_sent(b)) return ECCL_OK;
    return eccl_dissem_pump(&b->bar, links, b->call.tag, b->call.epoch, ECCL_PHASE_BRUCK_DONE, &b->inflight);
}

/* The round whose data `rank` still owes us, or b->rounds: rank + 2^k is
 * the partner of one round at most. */
static uint32_t owed_round(const eccl_bruck *b, uint32_t rank)
{
    uint64_t n = b->call.nranks, d = ((uint64_t)rank + n - b->call.rank) % n;
    for (uint32_t k = 0; k < b->rounds; k++)
        if (((uint64_t)1 << k) == d) return b->rx_got[k] < b->n_rx[k] ? k : b->rounds;
    return b->rounds;
}

static eccl_result bruck_recv(void *op, int role, const eccl_wire_data *d, void **dst)
{
    eccl_bruck *b = op;
    if (!ECCL_ROLE_IS_PEER(role)) return ECCL_ERR_PROTOCOL;
    uint32_t from = ECCL_ROLE_PEER_RANK(role);
    if (from >= b->call.nranks || from == b->call.rank || d->ring != 0 || d->flags != 0)
        return ECCL_ERR_PROTOCOL;
    *dst = NULL;
    uint32_t k = owed_round(b, from);
    if (k == b->rounds) return eccl_dissem_check(&b->bar, from, ECCL_PHASE_BRUCK_DONE, d);
    size_t off, len;
    (void)frames(b, from, k, b->rx_got[k], &off, &len);
    if (d->phase != ECCL_PHASE_BRUCK || d->step != k || d->offset != off || d->len != len)
        return ECCL_ERR_PROTOCOL;
    if (!len) return ECCL_OK;
    save_round(b, k);
    *dst = b->call.recvbuf + off;
    return ECCL_OK;
}

static eccl_result bruck_recv_done(void *op, int role, const eccl_wire_data *d)
{
    eccl_bruck *b = op;
    if (d->phase == ECCL_PHASE_BRUCK_DONE) {
        eccl_dissem_got(&b->bar, d);
        return ECCL_OK;
    }
    uint32_t k = owed_round(b, ECCL_ROLE_PEER_RANK(role)); /* the round recv checked it against */
    if (k == b->rounds) return ECCL_ERR_PROTOCOL;
    b->rx_bytes += d->len;
    b->rx_got[k]++;
    while (b->rx_rounds < b->rounds && b->rx_got[b->rx_rounds] == b->n_rx[b->rx_rounds]) b->rx_rounds++;
    if (b->rx_rounds == b->rounds) b->have_full = 1;
    return ECCL_OK;
}

static int bruck_settled(const void *op)
{
    const eccl_bruck *b = op;
    return b->have_full && all_sent(b) && b->inflight == 0;
}

static int bruck_complete(void *op) { return bruck_settled(op) && eccl_dissem_done(&((eccl_bruck *)op)->bar); }

static int bruck_owes_token(const void *op, int role)
{
    const eccl_bruck *b = op;
    return ECCL_ROLE_IS_PEER(role) && eccl_dissem_owes(&b->bar, ECCL_ROLE_PEER_RANK(role));
}

static int bruck_expects(const void *op, int role)
{
    const eccl_bruck *b = op;
    if (!ECCL_ROLE_IS_PEER(role)) return 0;
    uint32_t from = ECCL_ROLE_PEER_RANK(role);
    if (from >= b->call.nranks || from == b->call.rank) return 0;
    return owed_round(b, from) < b->rounds || eccl_dissem_owed(&b->bar, from) < b->bar.rounds;
}

static int bruck_have_full(const void *op) { return ((const eccl_bruck *)op)->have_full; }

static void bruck_restore(void *op)
{
    eccl_bruck *b = op;
    for (uint32_t k = 0; k < b->rounds; k++) {
        if (!(b->saved >> k & 1u)) continue;
        uint32_t m = eccl_bruck_round_blocks(b->call.nranks, k), first = rx_peer(b, k);
        for (uint32_t j = 0; j < m; j++) {
            size_t at = blk_at(b, origin(b, first, j));
            eccl_coll_put_back(&b->call, b->backup, at, blk_bytes(b, origin(b, first, j)));
        }
    }
    if (b->own_saved) {
        size_t at = blk_at(b, b->call.rank);
        eccl_coll_put_back(&b->call, b->backup, at, blk_bytes(b, b->call.rank));
    }
}

static eccl_result bruck_error(const void *op)
{
    (void)op;
    return ECCL_OK;
}

static void bruck_bytes(const void *op, uint64_t *tx, uint64_t *rx)
{
    const eccl_bruck *b = op;
    *tx = b->tx_bytes;
    *rx = b->rx_bytes;
}

const eccl_coll_algo eccl_bruck_algo = {
    .id = ECCL_ALGO_BRUCK,
    .roles = ECCL_ROLES_PEERS,
    .pump_needs = 0, /* peer links open lazily: frames wait for theirs */
    .pump = bruck_pump,
    .recv = bruck_recv,
    .recv_done = bruck_recv_done,
    .complete = bruck_complete,
    .settled = bruck_settled,
    .owes_token = bruck_owes_token,
    .expects = bruck_expects,
    .have_full = bruck_have_full,
    .restore = bruck_restore,
    .error = bruck_error,
    .bytes = bruck_bytes,
};
