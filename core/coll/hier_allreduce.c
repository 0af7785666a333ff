#include "coll/hier_allreduce.h"

#include <string.h>

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

/* A byte offset of the buffer inside our shard. */
static size_t in_shard(const eccl_hier_allreduce *a, size_t off) { return off - a->sh_at * a->esize; }

/* recvbuf, whole, right before its first write. */
static void save(eccl_hier_allreduce *a)
{
    if (a->saved) return;
    eccl_coll_save(&a->call, a->backup, 0, a->bytes);
    a->saved = 1;
}

/* ---- init ------------------------------------------------------------------------ */

static const eccl_peer_steps_ops hier_steps; /* the list, for the engine: below */

void eccl_hier_allreduce_init_ex(eccl_hier_allreduce *a, const eccl_coll_call *call, uint8_t *scratch,
                                 uint8_t *backup, size_t slice_bytes)
{
    memset(a, 0, sizeof *a);
    a->call = *call;
    a->backup = backup;
    a->esize = eccl_dtype_size(call->dtype);
    a->bytes = call->count * a->esize;
    a->L = call->local_size;
    a->H = call->nranks / a->L;
    a->host = call->rank / a->L;
    a->local = call->rank % a->L;
    eccl_hier_part(0, call->count, a->L, a->local, &a->sh_at, &a->sh_n);
    uint32_t nsteps = nsteps_of(a->L, a->H);
    size_t cb = counters_bytes(nsteps), sh = a->sh_n * a->esize;
    /* N >= 4: the barrier's rounds always run. */
    eccl_peer_steps_init(&a->steps, &hier_steps, call, slice_bytes, nsteps, (uint32_t *)(void *)scratch);
    a->rs_rx = scratch + cb;               /* L-1 shards: from local rank l-k at k-1 */
    a->acc = a->rs_rx + (size_t)(a->L - 1) * sh;
    a->ring_rx = a->acc + sh;              /* chunk c at its place in the shard */
}

void eccl_hier_allreduce_init(eccl_hier_allreduce *a, const eccl_coll_call *call, uint8_t *scratch,
                              uint8_t *backup)
{
    eccl_hier_allreduce_init_ex(a, call, scratch, backup, ECCL_RING_PASS_SLICE_BYTES);
}

/* ---- the list, for the engine (coll/peer_steps.h) ----------------------------------- */

static void hier_step(const void *op, uint32_t s, eccl_peer_step *ps)
{
    const eccl_hier_allreduce *a = op;
    eccl_hier_step st;
    eccl_hier_allreduce_step(a, s, &st);
    ps->phase = st.phase;
    ps->wire_step = st.wire_step;
    ps->tx = (eccl_peer_range){.on = 1, .peer = st.tx_peer, .at = st.tx_at * a->esize, .len = {st.tx_n * a->esize, 0}};
    ps->rx = (eccl_peer_range){.on = 1, .peer = st.rx_peer, .at = st.rx_at * a->esize, .len = {st.rx_n * a->esize, 0}};
}

/* Our shard as a range: the RS block folds it slice by slice. */
static eccl_peer_range shard(const eccl_hier_allreduce *a)
{
    return (eccl_peer_range){.on = 1, .at = a->sh_at * a->esize, .len = {a->sh_n * a->esize, 0}};
}

/* Folds every slice of our shard that all L-1 local senders delivered:
 * in_0 op in_1 op ... op in_{L-1}, into the accumulator. */
static void rs_fold(eccl_hier_allreduce *a)
{
    eccl_peer_steps *e = &a->steps;
    eccl_peer_range sr = shard(a);
    uint32_t L = a->L, l = a->local, avail = eccl_peer_slices(e, &sr);
    size_t sh = a->sh_n * a->esize;
    for (uint32_t s = 0; s < L - 1; s++)
        if (e->rx_got[s] < avail) avail = e->rx_got[s];
    for (; a->rs_done < avail; a->rs_done++) {
        eccl_peer_slice sl;
        eccl_peer_slice_of(e, &sr, a->rs_done, &sl);
        size_t off = sl.off, len = sl.len, o = in_shard(a, off);
        for (uint32_t m = 0; m < L; m++) {
            uint32_t k = (l + L - m) % L; /* m is k ranks before us */
            const uint8_t *src = m == l ? a->call.sendbuf + off : a->rs_rx + (size_t)(k - 1) * sh + o;
            if (m == 0) eccl_coll_copy(&a->call, a->acc + o, src, len);
            else eccl_coll_reduce(&a->call, a->acc + o, src, len);
        }
    }
    for (uint32_t s = 0; s < L - 1; s++) e->rx_done[s] = e->rx_got[s];
}

/* The RS block is one step to the engine: it is complete once every send
 * left and the whole shard is folded. */
static int hier_settle(void *op)
{
    eccl_hier_allreduce *a = op;
    eccl_peer_steps *e = &a->steps;
    if (e->cur >= a->L - 1) return 1;
    rs_fold(a);
    for (uint32_t s = 0; s < a->L - 1; s++) {
        eccl_peer_step st;
        hier_step(a, s, &st);
        if (e->tx_i[s] < eccl_peer_slices(e, &st.tx)) return 0;
    }
    eccl_peer_range sr = shard(a);
    if (a->rs_done < eccl_peer_slices(e, &sr)) return 0;
    e->cur = a->L - 1;
    return 1;
}

/* Received slice sl of ring step s (the current one) is in place. */
static void hier_combine(void *op, uint32_t s, const eccl_peer_slice *sl)
{
    eccl_hier_allreduce *a = op;
    eccl_hier_step st;
    eccl_hier_allreduce_step(a, s, &st);
    if (st.kind != ECCL_HIER_INTER_RS) return; /* the gathers landed as they are */
    size_t len = sl->len, off = sl->off, o = in_shard(a, off);
    /* (what came: hosts from the chunk's first on) op (ours). */
    eccl_coll_reduce(&a->call, a->ring_rx + o, a->acc + o, len);
    if (st.index + 2 < a->H) return;
    /* The last reduce-scatter step: this chunk is final, ours to own. */
    if (a->call.op == ECCL_AVG && len)
        a->call.env->dev->scale_div(a->call.env->dev_ctx, a->ring_rx + o, len / a->esize, a->call.dtype,
                                    a->call.nranks);
    save(a);
    eccl_coll_copy(&a->call, a->call.recvbuf + off, a->ring_rx + o, len);
}

/* How many of step s's slices may leave now (their source is final): RS
 * all at once (they read sendbuf); AG all once the ring is done (they read
 * the whole final shard); a ring step all once the steps before it are
 * done, and, one step ahead of those, slice by slice, pipelined as in any
 * ring: the ring's first step sends a slice of y_h's chunk h once the fold
 * passed its end, a later one forwards slice i of the chunk the step before
 * received once that slice is combined (the same chunk, cut the same way)
 * and that step's own sends all left (one link: frames in step order). */
static uint32_t hier_tx_ready(const void *op, uint32_t s, const eccl_peer_step *st)
{
    const eccl_hier_allreduce *a = op;
    const eccl_peer_steps *e = &a->steps;
    uint32_t want = eccl_peer_slices(e, &st->tx), rs_end = a->L - 1;
    if (s < rs_end) return want;
    if (s >= first_ag(a)) return e->cur >= first_ag(a) ? want : 0;
    if (e->cur >= s) return want;
    if (s == rs_end) {
        eccl_peer_range sr = shard(a);
        size_t folded = (size_t)a->rs_done * e->slice, base = in_shard(a, st->tx.at);
        if (a->rs_done == eccl_peer_slices(e, &sr)) return want;
        uint32_t i = 0;
        for (; i < want; i++) {
            eccl_peer_slice sl;
            eccl_peer_slice_of(e, &st->tx, i, &sl);
            if (base + sl.start + sl.len > folded) break;
        }
        return i;
    }
    if (s != e->cur + 1) return 0;
    eccl_peer_step before;
    hier_step(a, s - 1, &before);
    /* Both steps send to `next`: the pump's order (step cur first, stopped
     * only by that link's queue) already keeps this; stated, not assumed. */
    if (e->tx_i[s - 1] < eccl_peer_slices(e, &before.tx)) return 0;
    return e->rx_done[s - 1] < want ? e->rx_done[s - 1] : want;
}

/* Where a slice of step s leaves from. */
static const uint8_t *hier_tx_src(const void *op, uint32_t s, const eccl_peer_slice *sl)
{
    const eccl_hier_allreduce *a = op;
    eccl_hier_step st;
    eccl_hier_allreduce_step(a, s, &st);
    switch (st.kind) {
    case ECCL_HIER_RS: return a->call.sendbuf + sl->off;
    case ECCL_HIER_INTER_RS: return (st.index == 0 ? a->acc : a->ring_rx) + in_shard(a, sl->off);
    default: return a->call.recvbuf + sl->off; /* final values */
    }
}

/* Where a received slice of step s lands: each RS sender its own region,
 * each ring reduce-scatter chunk its own place, final values recvbuf. */
static uint8_t *hier_rx_dst(void *op, uint32_t s, const eccl_peer_slice *sl)
{
    eccl_hier_allreduce *a = op;
    eccl_hier_step st;
    eccl_hier_allreduce_step(a, s, &st);
    switch (st.kind) {
    case ECCL_HIER_RS: return a->rs_rx + (size_t)(st.index - 1) * a->sh_n * a->esize + in_shard(a, sl->off);
    case ECCL_HIER_INTER_RS: return a->ring_rx + in_shard(a, sl->off);
    default: /* final values: straight into recvbuf, backed up first */
        save(a);
        return a->call.recvbuf + sl->off;
    }
}

static const eccl_peer_steps_ops hier_steps = {
    .done_phase = ECCL_PHASE_HIER_DONE,
    .step = hier_step,
    .tx_ready = hier_tx_ready,
    .tx_src = hier_tx_src,
    .rx_dst = hier_rx_dst,
    .combine = hier_combine,
    .settle = hier_settle, /* the output is final once the last AG step is: no step_done */
};

/* ---- the algorithm face ------------------------------------------------------------ */

static void hier_restore(void *op)
{
    eccl_hier_allreduce *a = op;
    if (a->saved) eccl_coll_put_back(&a->call, a->backup, 0, a->bytes);
}

const eccl_coll_algo eccl_hier_allreduce_algo = ECCL_PEER_STEPS_ALGO(ECCL_ALGO_HIER, hier_restore);
