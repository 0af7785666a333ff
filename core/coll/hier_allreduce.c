#include "coll/hier_allreduce.h"

#include <string.h>

#include "coll/ring_allreduce.h" /* ECCL_RING_MAX_QUEUED */
#include "coll/ring_pass.h"      /* ECCL_RING_PASS_SLICE_BYTES */

/* ---- geometry ------------------------------------------------------------------ */

void eccl_hier_part(size_t at, size_t n, uint32_t parts, uint32_t i, size_t *part_at, size_t *part_n)
{
    /* i n / parts without the product: n = q parts + r. */
    size_t q = n / parts, r = n % parts;
    size_t lo = (size_t)i * q + (size_t)i * r / parts;
    size_t hi = (size_t)(i + 1) * q + (size_t)(i + 1) * r / parts;
    *part_at = at + lo;
    *part_n = hi - lo;
}

int eccl_hier_allreduce_can(const eccl_coll_call *c)
{
    uint32_t L = c->local_size;
    return c->kind == ECCL_COLL_ALLREDUCE && L >= 2 && c->nranks % L == 0 && c->nranks / L >= 2 &&
           c->rank < c->nranks;
}

static uint32_t nsteps_of(uint32_t L, uint32_t H) { return 2 * (L - 1) + 2 * (H - 1); }

/* The per-step counters (tx_i, rx_got, rx_done) lead the scratch, padded
 * to 16 bytes so the data regions after them stay aligned. */
static size_t counters_bytes(uint32_t nsteps) { return ((size_t)3 * nsteps * sizeof(uint32_t) + 15) / 16 * 16; }

static size_t shard_bytes(const eccl_coll_call *c)
{
    size_t at, n;
    eccl_hier_part(0, c->count, c->local_size, c->rank % c->local_size, &at, &n);
    return n * eccl_dtype_size(c->dtype);
}

size_t eccl_hier_allreduce_scratch_bytes(const eccl_coll_call *c)
{
    uint32_t L = c->local_size, H = c->nranks / L;
    return counters_bytes(nsteps_of(L, H)) + (size_t)(L + 1) * shard_bytes(c);
}

void eccl_hier_allreduce_step(const eccl_hier_allreduce *a, uint32_t s, eccl_hier_step *st)
{
    uint32_t L = a->L, H = a->H, l = a->local, h = a->host, base = h * L;
    memset(st, 0, sizeof *st);
    if (s < L - 1) {
        uint32_t k = s + 1, to = (l + k) % L, from = (l + L - k) % L;
        st->kind = ECCL_HIER_RS;
        st->phase = ECCL_PHASE_HIER_RS;
        st->wire_step = (uint16_t)k;
        st->index = k;
        st->tx_peer = base + to;
        eccl_hier_part(0, a->call.count, L, to, &st->tx_at, &st->tx_n);
        st->rx_peer = base + from;
        st->rx_at = a->sh_at;
        st->rx_n = a->sh_n;
        return;
    }
    s -= L - 1;
    if (s < 2 * (H - 1)) {
        int rs = s < H - 1;
        uint32_t j = rs ? s : s - (H - 1);
        /* Reduce-scatter: send chunk h-j, combine h-j-1; all-gather: send
         * chunk h+1-j (ours at j = 0), receive h-j. */
        uint32_t txc = rs ? (h + H - j) % H : (h + 1 + H - j) % H;
        uint32_t rxc = rs ? (h + 2 * H - j - 1) % H : (h + H - j) % H;
        st->kind = rs ? ECCL_HIER_INTER_RS : ECCL_HIER_INTER_AG;
        st->phase = ECCL_PHASE_HIER_INTER;
        st->wire_step = (uint16_t)s;
        st->index = j;
        st->tx_peer = ((h + 1) % H) * L + l;
        st->rx_peer = ((h + H - 1) % H) * L + l;
        eccl_hier_part(a->sh_at, a->sh_n, H, txc, &st->tx_at, &st->tx_n);
        eccl_hier_part(a->sh_at, a->sh_n, H, rxc, &st->rx_at, &st->rx_n);
        return;
    }
    s -= 2 * (H - 1);
    uint32_t k = s + 1, to = (l + k) % L, from = (l + L - k) % L;
    st->kind = ECCL_HIER_AG;
    st->phase = ECCL_PHASE_HIER_AG;
    st->wire_step = (uint16_t)k;
    st->index = k;
    st->tx_peer = base + to;
    st->tx_at = a->sh_at;
    st->tx_n = a->sh_n;
    st->rx_peer = base + from;
    eccl_hier_part(0, a->call.count, L, from, &st->rx_at, &st->rx_n);
}

static uint32_t first_ag(const eccl_hier_allreduce *a) { return a->L - 1 + 2 * (a->H - 1); }

/* Frames a range of `bytes` travels in: an empty one still sends one. */
static uint32_t nslices(const eccl_hier_allreduce *a, size_t bytes)
{
    return bytes ? (uint32_t)((bytes + a->slice - 1) / a->slice) : 1;
}

static uint32_t n_tx(const eccl_hier_allreduce *a, const eccl_hier_step *st) { return nslices(a, st->tx_n * a->esize); }
static uint32_t n_rx(const eccl_hier_allreduce *a, const eccl_hier_step *st) { return nslices(a, st->rx_n * a->esize); }

/* Slice j of the range of n elements at element `at`: its byte offset in
 * the buffer, and *len. */
static size_t slice_at(const eccl_hier_allreduce *a, size_t at, size_t n, uint32_t j, size_t *len)
{
    size_t start = (size_t)j * a->slice, bytes = n * a->esize;
    *len = start >= bytes ? 0 : bytes - start < a->slice ? bytes - start : a->slice;
    return at * a->esize + start;
}

/* A byte offset of the buffer inside our shard. */
static size_t in_shard(const eccl_hier_allreduce *a, size_t off) { return off - a->sh_at * a->esize; }

static void copy(const eccl_hier_allreduce *a, void *dst, const void *src, size_t n)
{
    if (n) a->call.env->dev->copy(a->call.env->dev_ctx, dst, src, n);
}

static void reduce(const eccl_hier_allreduce *a, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        a->call.env->dev->reduce(a->call.env->dev_ctx, dst, src, bytes / a->esize, a->call.dtype, a->call.op);
}

/* recvbuf, whole, right before its first write. */
static void save(eccl_hier_allreduce *a)
{
    if (a->saved) return;
    copy(a, a->backup, a->call.recvbuf, a->bytes);
    a->saved = 1;
}

/* ---- init ------------------------------------------------------------------------ */

void eccl_hier_allreduce_init_ex(eccl_hier_allreduce *a, const eccl_coll_call *call, uint8_t *scratch,
                                 uint8_t *backup, size_t slice_bytes)
{
    memset(a, 0, sizeof *a);
    a->call = *call;
    a->backup = backup;
    a->esize = eccl_dtype_size(call->dtype);
    a->bytes = call->count * a->esize;
    a->slice = slice_bytes / a->esize * a->esize;
    if (a->slice == 0) a->slice = a->esize;
    a->L = call->local_size;
    a->H = call->nranks / a->L;
    a->host = call->rank / a->L;
    a->local = call->rank % a->L;
    eccl_hier_part(0, call->count, a->L, a->local, &a->sh_at, &a->sh_n);
    a->nsteps = nsteps_of(a->L, a->H);
    size_t cb = counters_bytes(a->nsteps), sh = a->sh_n * a->esize;
    memset(scratch, 0, cb);
    a->tx_i = (uint32_t *)(void *)scratch;
    a->rx_got = a->tx_i + a->nsteps;
    a->rx_done = a->rx_got + a->nsteps;
    a->rs_rx = scratch + cb;               /* L-1 shards: from local rank l-k at k-1 */
    a->acc = a->rs_rx + (size_t)(a->L - 1) * sh;
    a->ring_rx = a->acc + sh;              /* chunk c at its place in the shard */
    eccl_dissem_init(&a->bar, call->rank, call->nranks); /* N >= 4: its rounds always run */
}

void eccl_hier_allreduce_init(eccl_hier_allreduce *a, const eccl_coll_call *call, uint8_t *scratch,
                              uint8_t *backup)
{
    eccl_hier_allreduce_init_ex(a, call, scratch, backup, ECCL_RING_PASS_SLICE_BYTES);
}

/* ---- progress ---------------------------------------------------------------------- */

/* Folds every slice of our shard that all L-1 local senders delivered:
 * in_0 op in_1 op ... op in_{L-1}, into the accumulator. */
static void rs_fold(eccl_hier_allreduce *a)
{
    uint32_t L = a->L, l = a->local, avail = nslices(a, a->sh_n * a->esize);
    size_t sh = a->sh_n * a->esize;
    for (uint32_t s = 0; s < L - 1; s++)
        if (a->rx_got[s] < avail) avail = a->rx_got[s];
    for (; a->rs_done < avail; a->rs_done++) {
        size_t len, off = slice_at(a, a->sh_at, a->sh_n, a->rs_done, &len), o = in_shard(a, off);
        for (uint32_t m = 0; m < L; m++) {
            uint32_t k = (l + L - m) % L; /* m is k ranks before us */
            const uint8_t *src = m == l ? a->call.sendbuf + off : a->rs_rx + (size_t)(k - 1) * sh + o;
            if (m == 0) copy(a, a->acc + o, src, len);
            else reduce(a, a->acc + o, src, len);
        }
    }
    for (uint32_t s = 0; s < L - 1; s++) a->rx_done[s] = a->rx_got[s];
}

/* Received slice j of ring step st (the current one) is in place. */
static void combine(eccl_hier_allreduce *a, const eccl_hier_step *st, uint32_t j)
{
    if (st->kind != ECCL_HIER_INTER_RS) return; /* the gathers landed as they are */
    size_t len, off = slice_at(a, st->rx_at, st->rx_n, j, &len), o = in_shard(a, off);
    /* (what came: hosts from the chunk's first on) op (ours). */
    reduce(a, a->ring_rx + o, a->acc + o, len);
    if (st->index + 2 < a->H) return;
    /* The last reduce-scatter step: this chunk is final, ours to own. */
    if (a->call.op == ECCL_AVG && len)
        a->call.env->dev->scale_div(a->call.env->dev_ctx, a->ring_rx + o, len / a->esize, a->call.dtype,
                                    a->call.nranks);
    save(a);
    copy(a, a->call.recvbuf + off, a->ring_rx + o, len);
}

/* Combines what landed and moves past every step that is complete (all
 * its slices queued and combined; the RS block as one). */
static void advance(eccl_hier_allreduce *a)
{
    while (a->cur < a->nsteps) {
        if (a->cur < a->L - 1) {
            rs_fold(a);
            for (uint32_t s = 0; s < a->L - 1; s++) {
                eccl_hier_step st;
                eccl_hier_allreduce_step(a, s, &st);
                if (a->tx_i[s] < n_tx(a, &st)) return;
            }
            if (a->rs_done < nslices(a, a->sh_n * a->esize)) return;
            a->cur = a->L - 1;
            continue;
        }
        eccl_hier_step st;
        eccl_hier_allreduce_step(a, a->cur, &st);
        while (a->rx_done[a->cur] < a->rx_got[a->cur]) combine(a, &st, a->rx_done[a->cur]++);
        if (a->rx_done[a->cur] < n_rx(a, &st) || a->tx_i[a->cur] < n_tx(a, &st)) return;
        a->cur++;
        if (a->cur == a->nsteps) a->have_full = 1;
    }
}

/* How many of step s's slices may leave now (their source is final): RS
 * all at once (they read sendbuf); AG all once the ring is done (they read
 * the whole final shard); a ring step all once the steps before it are
 * done, and, one step ahead of those, slice by slice, pipelined as in any
 * ring: the ring's first step sends a slice of y_h's chunk h once the fold
 * passed its end, a later one forwards slice i of the chunk the step before
 * received once that slice is combined (the same chunk, cut the same way)
 * and that step's own sends all left (one link: frames in step order). */
static uint32_t tx_ready(const eccl_hier_allreduce *a, uint32_t s, const eccl_hier_step *st)
{
    uint32_t want = n_tx(a, st), rs_end = a->L - 1;
    if (s < rs_end) return want;
    if (s >= first_ag(a)) return a->cur >= first_ag(a) ? want : 0;
    if (a->cur >= s) return want;
    if (s == rs_end) {
        size_t folded = (size_t)a->rs_done * a->slice, base = in_shard(a, st->tx_at * a->esize);
        if (a->rs_done == nslices(a, a->sh_n * a->esize)) return want;
        uint32_t i = 0;
        for (size_t len; i < want; i++) {
            size_t off = slice_at(a, st->tx_at, st->tx_n, i, &len) - st->tx_at * a->esize;
            if (base + off + len > folded) break;
        }
        return i;
    }
    if (s != a->cur + 1) return 0;
    eccl_hier_step before;
    eccl_hier_allreduce_step(a, s - 1, &before);
    /* Both steps send to `next`: the pump's order (step cur first, stopped
     * only by that link's queue) already keeps this; stated, not assumed. */
    if (a->tx_i[s - 1] < n_tx(a, &before)) return 0;
    return a->rx_done[s - 1] < want ? a->rx_done[s - 1] : want;
}

/* Where slice `off` of step st leaves from. */
static const uint8_t *tx_src(const eccl_hier_allreduce *a, const eccl_hier_step *st, size_t off)
{
    switch (st->kind) {
    case ECCL_HIER_RS: return a->call.sendbuf + off;
    case ECCL_HIER_INTER_RS: return (st->index == 0 ? a->acc : a->ring_rx) + in_shard(a, off);
    default: return a->call.recvbuf + off; /* final values */
    }
}


/* Asks for the link of every rank we still send to or hear from: the
 * lower rank of a pair opens it, even one that only listens. */
static void touch_links(const eccl_hier_allreduce *a, const eccl_coll_links *links)
{
    for (uint32_t s = a->cur; s < a->nsteps; s++) {
        eccl_hier_step st;
        eccl_hier_allreduce_step(a, s, &st);
        if (a->tx_i[s] < n_tx(a, &st)) (void)eccl_coll_peer(links, st.tx_peer);
        if (a->rx_got[s] < n_rx(a, &st)) (void)eccl_coll_peer(links, st.rx_peer);
    }
    eccl_dissem_touch(&a->bar, links);
}

static eccl_result hier_pump(void *op, const eccl_coll_links *links)
{
    eccl_hier_allreduce *a = op;
    touch_links(a, links);
    advance(a);
    for (;;) {
        uint32_t before = a->cur;
        for (uint32_t s = a->cur; s < a->nsteps; s++) {
            eccl_hier_step st;
            eccl_hier_allreduce_step(a, s, &st);
            uint32_t want = tx_ready(a, s, &st);
            eccl_chan *ch = a->tx_i[s] < want ? eccl_coll_peer(links, st.tx_peer) : NULL;
            while (ch && a->tx_i[s] < want && ch->queued_bytes < ECCL_RING_MAX_QUEUED) {
                size_t len, off = slice_at(a, st.tx_at, st.tx_n, a->tx_i[s], &len);
                eccl_wire_data w = {.tag = a->call.tag, .epoch = a->call.epoch, .phase = st.phase,
                                    .step = st.wire_step, .offset = off, .len = (uint32_t)len};
                eccl_result rc = eccl_chan_send_data(ch, &w, tx_src(a, &st, off), &a->inflight);
                if (rc != ECCL_OK) return rc;
                a->tx_bytes += len;
                a->tx_i[s]++;
            }
        }
        advance(a);
        if (a->cur == before) break; /* waiting for a link, the queue or a partner */
    }
    if (a->cur < a->nsteps) return ECCL_OK;
    return eccl_dissem_pump(&a->bar, links, a->call.tag, a->call.epoch, ECCL_PHASE_HIER_DONE, &a->inflight);
}

/* The first step from `cur` on (the whole RS block while in it) whose data
 * `rank` still owes us, or a->nsteps. */
static uint32_t owed_step(const eccl_hier_allreduce *a, uint32_t rank, eccl_hier_step *st)
{
    for (uint32_t s = a->cur; s < a->nsteps; s++) {
        eccl_hier_allreduce_step(a, s, st);
        if (st->rx_peer == rank && a->rx_got[s] < n_rx(a, st)) return s;
    }
    return a->nsteps;
}

static eccl_result hier_recv(void *op, int role, const eccl_wire_data *d, void **dst)
{
    eccl_hier_allreduce *a = op;
    if (!ECCL_ROLE_IS_PEER(role)) return ECCL_ERR_PROTOCOL;
    uint32_t from = ECCL_ROLE_PEER_RANK(role);
    if (from >= a->call.nranks || from == a->call.rank || d->ring != 0 || d->flags != 0) return ECCL_ERR_PROTOCOL;
    *dst = NULL;
    eccl_hier_step st;
    uint32_t s = owed_step(a, from, &st);
    if (s < a->nsteps) {
        size_t len, off = slice_at(a, st.rx_at, st.rx_n, a->rx_got[s], &len);
        if (d->phase != st.phase || d->step != st.wire_step || d->offset != off || d->len != len)
            return ECCL_ERR_PROTOCOL;
        if (!len) return ECCL_OK;
        switch (st.kind) {
        case ECCL_HIER_RS:
            *dst = a->rs_rx + (size_t)(st.index - 1) * a->sh_n * a->esize + in_shard(a, off);
            break;
        case ECCL_HIER_INTER_RS: *dst = a->ring_rx + in_shard(a, off); break;
        default: /* final values: straight into recvbuf, backed up first */
            save(a);
            *dst = a->call.recvbuf + off;
            break;
        }
        return ECCL_OK;
    }
    return eccl_dissem_check(&a->bar, from, ECCL_PHASE_HIER_DONE, d);
}

static eccl_result hier_recv_done(void *op, int role, const eccl_wire_data *d)
{
    eccl_hier_allreduce *a = op;
    if (d->phase == ECCL_PHASE_HIER_DONE) {
        eccl_dissem_got(&a->bar, d);
        return ECCL_OK;
    }
    eccl_hier_step st;
    uint32_t s = owed_step(a, ECCL_ROLE_PEER_RANK(role), &st); /* the step recv checked it against */
    if (s == a->nsteps) return ECCL_ERR_PROTOCOL;
    a->rx_bytes += d->len;
    a->rx_got[s]++;
    advance(a);
    return ECCL_OK;
}

static int hier_complete(void *op)
{
    const eccl_hier_allreduce *a = op;
    return a->have_full && a->inflight == 0 && eccl_dissem_done(&a->bar);
}

static int hier_expects(const void *op, int role)
{
    const eccl_hier_allreduce *a = op;
    if (!ECCL_ROLE_IS_PEER(role)) return 0;
    uint32_t from = ECCL_ROLE_PEER_RANK(role);
    eccl_hier_step st;
    return owed_step(a, from, &st) < a->nsteps || eccl_dissem_owed(&a->bar, from) < a->bar.rounds;
}

static int hier_have_full(const void *op) { return ((const eccl_hier_allreduce *)op)->have_full; }

static void hier_restore(void *op)
{
    eccl_hier_allreduce *a = op;
    if (a->saved) copy(a, a->call.recvbuf, a->backup, a->bytes);
}

static eccl_result hier_error(const void *op)
{
    (void)op;
    return ECCL_OK;
}

static void hier_bytes(const void *op, uint64_t *tx, uint64_t *rx)
{
    const eccl_hier_allreduce *a = op;
    *tx = a->tx_bytes;
    *rx = a->rx_bytes;
}

const eccl_coll_algo eccl_hier_allreduce_algo = {
    .id = ECCL_ALGO_HIER,
    .roles = ECCL_ROLES_PEERS,
    .pump_needs = 0, /* peer links open lazily: frames wait for theirs */
    .pump = hier_pump,
    .recv = hier_recv,
    .recv_done = hier_recv_done,
    .complete = hier_complete,
    .expects = hier_expects,
    .have_full = hier_have_full,
    .restore = hier_restore,
    .error = hier_error,
    .bytes = hier_bytes,
};
