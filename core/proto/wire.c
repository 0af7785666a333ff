/* Wire codec. Every field goes through a bounded cursor (wbuf / rbuf) that
 * moves byte by byte, so the encoding is independent of host endianness and
 * alignment, and an overrun only sets a flag: callers check it once at the
 * end instead of after every field. */
#include "proto/wire.h"

#include <stdlib.h>
#include <string.h>

/* ---- bounded writer ------------------------------------------------------ */

typedef struct wbuf {
    uint8_t *p;
    size_t cap;
    size_t pos;
    int bad; /* overran cap or met an invalid field */
} wbuf;

static void put_u8(wbuf *w, uint8_t v)
{
    if (w->bad || w->pos >= w->cap) {
        w->bad = 1;
        return;
    }
    w->p[w->pos++] = v;
}

static void put_u16(wbuf *w, uint16_t v)
{
    put_u8(w, (uint8_t)v);
    put_u8(w, (uint8_t)(v >> 8));
}

static void put_u32(wbuf *w, uint32_t v)
{
    put_u16(w, (uint16_t)v);
    put_u16(w, (uint16_t)(v >> 16));
}

static void put_u64(wbuf *w, uint64_t v)
{
    put_u32(w, (uint32_t)v);
    put_u32(w, (uint32_t)(v >> 32));
}

/* s is a fixed ECCL_ADDR_MAX array that a caller may have filled without a
 * NUL; the scan stops at the array's end rather than trusting one. */
static void put_str(wbuf *w, const char *s)
{
    size_t n = 0;
    while (n < ECCL_ADDR_MAX && s[n] != '\0')
        n++;
    if (n > ECCL_WIRE_MAX_ADDR) {
        w->bad = 1;
        return;
    }
    put_u16(w, (uint16_t)n);
    for (size_t i = 0; i < n; i++)
        put_u8(w, (uint8_t)s[i]);
}

/* ---- bounded reader ------------------------------------------------------ */

typedef struct rbuf {
    const uint8_t *p;
    size_t len;
    size_t pos;
    int bad;
} rbuf;

static uint8_t get_u8(rbuf *r)
{
    if (r->bad || r->pos >= r->len) {
        r->bad = 1;
        return 0;
    }
    return r->p[r->pos++];
}

static uint16_t get_u16(rbuf *r)
{
    uint16_t lo = get_u8(r);
    return (uint16_t)(lo | (uint16_t)get_u8(r) << 8);
}

static uint32_t get_u32(rbuf *r)
{
    uint32_t lo = get_u16(r);
    return lo | (uint32_t)get_u16(r) << 16;
}

static uint64_t get_u64(rbuf *r)
{
    uint64_t lo = get_u32(r);
    return lo | (uint64_t)get_u32(r) << 32;
}

/* An embedded NUL is rejected: the decoded C string would silently lose the
 * tail, and the frame would no longer re-encode to the same bytes. */
static void get_str(rbuf *r, char *dst)
{
    uint16_t n = get_u16(r);
    memset(dst, 0, ECCL_ADDR_MAX);
    if (r->bad || n > ECCL_WIRE_MAX_ADDR || n > r->len - r->pos) {
        r->bad = 1;
        return;
    }
    for (uint16_t i = 0; i < n; i++) {
        dst[i] = (char)r->p[r->pos++];
        if (dst[i] == '\0') {
            r->bad = 1;
            return;
        }
    }
}

/* ---- per-type layouts ---------------------------------------------------- */

#define STR_MAX (2u + ECCL_WIRE_MAX_ADDR)
#define PEER_REF_MAX (8u + STR_MAX)
#define OP_FLAG_SIZE 9u
#define SYNC_KEY_MAX (STR_MAX + 8u + 8u + 1u)
#define SYNC_FETCH_SIZE 16u
#define SYNC_REQ_MAX (4u + 8u + 1u + 1u + 4u + ECCL_WIRE_MAX_SYNC_KEYS * SYNC_KEY_MAX)
#define SYNC_PLAN_MAX \
    (4u + 4u + 4u + 8u + 4u + 4u + ECCL_WIRE_MAX_SYNC_KEYS * SYNC_FETCH_SIZE + \
     ECCL_WIRE_MAX_SYNC_SRCS * PEER_REF_MAX)

#define PEER_QUERY_MAX (8u + ECCL_WIRE_MAX_PEER_REFS * 4u)
#define PEER_REPLY_MAX (8u + ECCL_WIRE_MAX_PEER_REFS * (4u + PEER_REF_MAX))
#define RING_MAX (16u + 3u * PEER_REF_MAX + ECCL_WIRE_TREE_CHILDREN * 8u + 8u)
#define RING_SEG_MAX (24u + 3u * PEER_REF_MAX + 16u + 4u + ECCL_WIRE_MAX_SEG * 4u)

static uint32_t max_length(uint16_t type)
{
    switch (type) {
    case ECCL_MSG_REGISTER: return 8u + STR_MAX;
    case ECCL_MSG_HEARTBEAT:
    case ECCL_MSG_PENDING_QUERY:
    case ECCL_MSG_TOPO_VOTE:
    case ECCL_MSG_LEAVE: return 0;
    case ECCL_MSG_RING_READY:
    case ECCL_MSG_TOPO_DONE:
    case ECCL_MSG_VIEW_QUERY: return 4;
    case ECCL_MSG_COLL_DONE: return 8 + 4 + 8 + 1 + 1 + 4;
    case ECCL_MSG_VIEW_REPORT:
    case ECCL_MSG_VIEW_DECIDE: return 8u + ECCL_WIRE_MAX_OPS * OP_FLAG_SIZE;
    case ECCL_MSG_WELCOME: return 12;
    case ECCL_MSG_REPAIR_ASK:
    case ECCL_MSG_TRACE_ASK:
    case ECCL_MSG_LATE_REPORT:
    case ECCL_MSG_SLOW_NOTICE: return 16;
    case ECCL_MSG_LINK_RATE:
    case ECCL_MSG_SLOW_LINK: return 32;
    case ECCL_MSG_NOTICE_POST:
    case ECCL_MSG_NOTICE: return 24;
    case ECCL_MSG_COLL_STATS: return 16;
    case ECCL_MSG_REPAIR_DATA:
    case ECCL_MSG_REPAIR_PUT: return 16u + ECCL_WIRE_MAX_REPAIR;
    case ECCL_MSG_PENDING_REPLY: return 4;
    case ECCL_MSG_RING: return RING_MAX;
    case ECCL_MSG_RING_SEG: return RING_SEG_MAX;
    case ECCL_MSG_KICK:
    case ECCL_MSG_LEAVE_DONE: return 4;
    case ECCL_MSG_P2P_HELLO: return 28; /* 20 without a pool, 24 for PEER */
    case ECCL_MSG_DATA: return ECCL_WIRE_MAX_DATA;
    case ECCL_MSG_SYNC_REQ: return SYNC_REQ_MAX;
    case ECCL_MSG_SYNC_PLAN: return SYNC_PLAN_MAX;
    case ECCL_MSG_SYNC_REPORT:
    case ECCL_MSG_SYNC_DONE: return 16;
    case ECCL_MSG_SYNC_FETCH: return 16u + STR_MAX;
    case ECCL_MSG_OPT_REQ: return 16;
    case ECCL_MSG_OPT_BW: return 36;
    case ECCL_MSG_OPT_PROBE: return 16u + PEER_REF_MAX;
    case ECCL_MSG_OPT_DONE: return 15u + 8u + 16u;
    case ECCL_MSG_RELAY_HELLO: return 4;
    case ECCL_MSG_BATCH: return ECCL_WIRE_MAX_BATCH;
    case ECCL_MSG_PEER_QUERY: return PEER_QUERY_MAX;
    case ECCL_MSG_PEER_REPLY: return PEER_REPLY_MAX;
    case ECCL_MSG_REGISTER_SEG: return ECCL_WIRE_REGISTER_SEG_MAX;
    default: return 0;
    }
}

/* Every bound is a compile-time constant, so an oversized table entry fails
 * the build instead of a frame at run time. */
_Static_assert(8u + ECCL_WIRE_MAX_OPS * OP_FLAG_SIZE <= ECCL_WIRE_MAX_CONTROL,
               "VIEW_* payload exceeds the control bound");
_Static_assert(RING_MAX <= ECCL_WIRE_MAX_CONTROL, "RING payload exceeds the control bound");
_Static_assert(RING_SEG_MAX <= ECCL_WIRE_MAX_CONTROL, "RING_SEG payload exceeds the control bound");
_Static_assert(16u + ECCL_WIRE_MAX_REPAIR <= ECCL_WIRE_MAX_CONTROL, "REPAIR exceeds the control bound");
_Static_assert(SYNC_REQ_MAX <= ECCL_WIRE_MAX_CONTROL, "SYNC_REQ exceeds the control bound");
_Static_assert(SYNC_PLAN_MAX <= ECCL_WIRE_MAX_CONTROL, "SYNC_PLAN exceeds the control bound");
_Static_assert(PEER_REPLY_MAX <= ECCL_WIRE_MAX_CONTROL, "PEER_REPLY exceeds the control bound");
_Static_assert(ECCL_WIRE_MAX_ADDR <= UINT16_MAX, "address length is a u16");
/* Decoded messages live on the stacks of core's threads, which the
 * simulator runs as one actor (one stack) per rank: no inline lists. */
_Static_assert(sizeof(eccl_msg) <= 512, "eccl_msg must stay small");

/* Types with no payload: max_length() alone cannot tell them from unknown. */
static int known_type(uint16_t type)
{
    return max_length(type) != 0 || type == ECCL_MSG_HEARTBEAT ||
           type == ECCL_MSG_PENDING_QUERY || type == ECCL_MSG_TOPO_VOTE ||
           type == ECCL_MSG_LEAVE;
}

uint32_t eccl_wire_max_length(uint16_t type)
{
    return max_length(type);
}

/* The semantic checks shared by encode and decode, so both sides agree on
 * what a valid message is. */
static int local_size_ok(uint32_t local_size, uint32_t world_size)
{
    return local_size == 0 ||
           (local_size >= 2 && world_size % local_size == 0 && world_size / local_size >= 2);
}

static int ring_ok(const eccl_msg_ring *m)
{
    /* local_size: 0, or L >= 2 dividing the world into two hosts or more. */
    return m->world_size != 0 && m->rank < m->world_size && m->host_ranks <= m->world_size &&
           local_size_ok(m->local_size, m->world_size);
}

/* A run of 1..ECCL_WIRE_MAX_SEG ranks inside the world. */
static int ring_seg_ok(const eccl_msg_ring_seg *m)
{
    return m->n >= 1 && m->n <= ECCL_WIRE_MAX_SEG && m->first_rank < m->world_size &&
           m->n <= m->world_size - m->first_rank && m->host_ranks <= m->world_size &&
           local_size_ok(m->local_size, m->world_size);
}

/* A hello that carries pool fields: a real pool, this connection inside it,
 * and only ring links have pools. */
static int hello_pool_ok(const eccl_msg_p2p_hello *m)
{
    return m->pool_size >= 2 && m->pool_size <= ECCL_WIRE_MAX_POOL && m->pool < m->pool_size &&
           m->purpose == ECCL_LINK_RING;
}

/* A report's flag holds ECCL_VIEW_HELD | ECCL_VIEW_RECEIVER; a decision's
 * is 0 or 1. */
static uint8_t view_flag_max(uint16_t type)
{
    return type == ECCL_MSG_VIEW_REPORT
               ? (uint8_t)(ECCL_VIEW_HELD | ECCL_VIEW_RECEIVER | ECCL_VIEW_REPAIRABLE | ECCL_VIEW_SOURCE)
               : 1;
}

static int coll_ok(const eccl_msg_coll *m)
{
    return m->dtype < ECCL_DTYPE_COUNT && m->op < ECCL_OP_COUNT;
}

static int sync_req_head_ok(const eccl_msg_sync_req *m)
{
    return m->strategy <= 2 && (m->hash_type == 1 || m->hash_type == 2) &&
           m->n_keys <= ECCL_WIRE_MAX_SYNC_KEYS;
}

/* A key entry is valid if its key is non-empty, after `prev` (strictly, in
 * strcmp order: sorted and unique) and its dtype is known. */
static int sync_key_ok(const eccl_wire_sync_key *k, const char *prev)
{
    return k->key[0] != '\0' && k->dtype < ECCL_DTYPE_COUNT &&
           (!prev || strcmp(prev, k->key) < 0);
}

static int sync_plan_head_ok(const eccl_msg_sync_plan *m)
{
    if (m->n_fetch > ECCL_WIRE_MAX_SYNC_KEYS || m->n_src > ECCL_WIRE_MAX_SYNC_SRCS) return 0;
    return m->result == ECCL_OK || (m->n_fetch == 0 && m->n_src == 0);
}

/* Fetches name each key once, in ascending key order, from a listed source. */
static int sync_fetch_ok(const eccl_wire_sync_fetch *f, const eccl_wire_sync_fetch *prev,
                         uint32_t n_src)
{
    return f->src < n_src && f->key < ECCL_WIRE_MAX_SYNC_KEYS && (!prev || prev->key < f->key);
}

/* ---- header -------------------------------------------------------------- */

void eccl_wire_header_encode(uint16_t type, uint32_t length, uint8_t *out)
{
    wbuf w = {out, ECCL_WIRE_HEADER_SIZE, 0, 0};
    put_u32(&w, ECCL_WIRE_MAGIC);
    put_u16(&w, ECCL_WIRE_VERSION);
    put_u16(&w, type);
    put_u32(&w, length);
    put_u32(&w, 0);
}

int eccl_wire_is_frame_start(const uint8_t *in)
{
    rbuf r = {in, 4, 0, 0};
    return get_u32(&r) == ECCL_WIRE_MAGIC;
}

eccl_result eccl_wire_header_decode(const uint8_t *in, eccl_wire_header *out)
{
    rbuf r = {in, ECCL_WIRE_HEADER_SIZE, 0, 0};
    out->magic = get_u32(&r);
    out->version = get_u16(&r);
    out->type = get_u16(&r);
    out->length = get_u32(&r);
    out->reserved = get_u32(&r);
    if (out->magic != ECCL_WIRE_MAGIC || out->version != ECCL_WIRE_VERSION ||
        !known_type(out->type) || out->reserved != 0 ||
        out->length > max_length(out->type))
        return ECCL_ERR_PROTOCOL;
    return ECCL_OK;
}

/* ---- control messages ---------------------------------------------------- */

static void put_peer_ref(wbuf *w, const eccl_wire_peer_ref *p)
{
    put_u64(w, p->peer_id);
    put_str(w, p->addr);
}

static void get_peer_ref(rbuf *r, eccl_wire_peer_ref *p)
{
    p->peer_id = get_u64(r);
    get_str(r, p->addr);
}

static void put_payload(wbuf *w, const eccl_msg *m)
{
    switch (m->type) {
    case ECCL_MSG_REGISTER:
        put_u32(w, m->u.reg.peer_group);
        put_u32(w, m->u.reg.peer_timeout_ms);
        put_str(w, m->u.reg.p2p_addr);
        break;
    case ECCL_MSG_HEARTBEAT:
    case ECCL_MSG_PENDING_QUERY:
    case ECCL_MSG_TOPO_VOTE:
    case ECCL_MSG_LEAVE:
        break;
    case ECCL_MSG_WELCOME:
        put_u64(w, m->u.welcome.peer_id);
        put_u32(w, m->u.welcome.accepted);
        break;
    case ECCL_MSG_PENDING_REPLY:
        put_u32(w, m->u.pending.pending);
        break;
    case ECCL_MSG_RING:
        if (!ring_ok(&m->u.ring))
            w->bad = 1;
        put_u32(w, m->u.ring.peer_group);
        put_u32(w, m->u.ring.epoch);
        put_u32(w, m->u.ring.world_size);
        put_u32(w, m->u.ring.rank);
        put_peer_ref(w, &m->u.ring.next);
        put_peer_ref(w, &m->u.ring.prev);
        put_peer_ref(w, &m->u.ring.tree_parent);
        for (uint32_t k = 0; k < ECCL_WIRE_TREE_CHILDREN; k++) put_u64(w, m->u.ring.tree_child[k]);
        put_u32(w, m->u.ring.local_size);
        put_u32(w, m->u.ring.host_ranks);
        break;
    case ECCL_MSG_REGISTER_SEG: {
        const eccl_msg_register_seg *g = &m->u.register_seg;
        if (g->n < 1 || g->n > ECCL_WIRE_MAX_SEG || !g->addrs == !g->packed) {
            w->bad = 1;
            break;
        }
        put_u32(w, g->peer_group);
        put_u32(w, g->peer_timeout_ms);
        put_u32(w, g->n);
        uint32_t pos = 0, i = 0;
        char addr[ECCL_ADDR_MAX];
        while (!w->bad && eccl_wire_register_seg_next(g, &pos, &i, addr)) put_str(w, addr);
        if (i != g->n) w->bad = 1;
        break;
    }
    case ECCL_MSG_RING_SEG: {
        const eccl_msg_ring_seg *g = &m->u.ring_seg;
        if (!ring_seg_ok(g) || !g->handles == !g->packed) {
            w->bad = 1;
            break;
        }
        put_u32(w, g->peer_group);
        put_u32(w, g->epoch);
        put_u32(w, g->world_size);
        put_u32(w, g->first_rank);
        put_u32(w, g->local_size);
        put_u32(w, g->host_ranks);
        put_peer_ref(w, &g->prev);
        put_peer_ref(w, &g->next);
        put_peer_ref(w, &g->root_parent);
        put_u64(w, g->root_child[0]);
        put_u64(w, g->root_child[1]);
        put_u32(w, g->n);
        for (uint32_t i = 0; i < g->n; i++) put_u32(w, eccl_wire_ring_seg_handle(g, i));
        break;
    }
    case ECCL_MSG_RING_READY:
    case ECCL_MSG_TOPO_DONE:
    case ECCL_MSG_VIEW_QUERY:
        put_u32(w, m->u.epoch.epoch);
        break;
    case ECCL_MSG_COLL_DONE:
        if (!coll_ok(&m->u.coll))
            w->bad = 1;
        put_u64(w, m->u.coll.tag);
        put_u32(w, m->u.coll.epoch);
        put_u64(w, m->u.coll.count);
        put_u8(w, m->u.coll.dtype);
        put_u8(w, m->u.coll.op);
        put_u32(w, m->u.coll.result);
        break;
    case ECCL_MSG_VIEW_REPORT:
    case ECCL_MSG_VIEW_DECIDE:
        if (m->u.view.n_ops > ECCL_WIRE_MAX_OPS ||
            (m->u.view.n_ops > 0 && !m->u.view.ops == !m->u.view.packed)) {
            w->bad = 1;
            break;
        }
        put_u32(w, m->u.view.epoch);
        put_u32(w, m->u.view.n_ops);
        for (uint32_t i = 0; i < m->u.view.n_ops && !w->bad; i++) {
            eccl_wire_op_flag e = eccl_wire_view_op(&m->u.view, i);
            if (e.flag > view_flag_max(m->type))
                w->bad = 1;
            put_u64(w, e.tag);
            put_u8(w, e.flag);
        }
        break;
    case ECCL_MSG_KICK:
        put_u32(w, m->u.kick.reason);
        break;
    case ECCL_MSG_TRACE_ASK:
        put_u64(w, m->u.trace_ask.tag);
        put_u32(w, m->u.trace_ask.epoch);
        put_u32(w, m->u.trace_ask.result);
        break;
    case ECCL_MSG_NOTICE_POST:
    case ECCL_MSG_NOTICE:
        put_u64(w, m->u.notice.word);
        put_u64(w, m->u.notice.from);
        put_u32(w, m->u.notice.epoch);
        put_u32(w, m->u.notice.reform);
        break;
    case ECCL_MSG_LATE_REPORT:
    case ECCL_MSG_SLOW_NOTICE:
        put_u64(w, m->u.late.peer_id);
        put_u32(w, m->u.late.late_us);
        put_u32(w, m->u.late.calls);
        break;
    case ECCL_MSG_LINK_RATE:
    case ECCL_MSG_SLOW_LINK:
        put_u64(w, m->u.link.from);
        put_u64(w, m->u.link.to);
        put_u64(w, m->u.link.bytes);
        put_u64(w, m->u.link.ns);
        break;
    case ECCL_MSG_COLL_STATS:
        put_u64(w, m->u.stats.calls);
        put_u64(w, m->u.stats.bytes);
        break;
    case ECCL_MSG_REPAIR_ASK:
    case ECCL_MSG_REPAIR_DATA:
    case ECCL_MSG_REPAIR_PUT: {
        const eccl_msg_repair *q = &m->u.repair;
        uint32_t max = m->type == ECCL_MSG_REPAIR_ASK ? 0 : ECCL_WIRE_MAX_REPAIR;
        if (q->len > max || (q->len && !q->bytes) || w->cap - w->pos < 16u + q->len) {
            w->bad = 1;
            break;
        }
        put_u32(w, q->epoch);
        put_u64(w, q->tag);
        put_u32(w, q->len);
        if (q->len) memcpy(w->p + w->pos, q->bytes, q->len);
        w->pos += q->len;
        break;
    }
    case ECCL_MSG_LEAVE_DONE:
        put_u32(w, m->u.leave_done.result);
        break;
    case ECCL_MSG_P2P_HELLO:
        put_u64(w, m->u.hello.peer_id);
        put_u32(w, m->u.hello.peer_group);
        put_u32(w, m->u.hello.epoch);
        put_u32(w, m->u.hello.purpose | (m->u.hello.pool_size > 1 ? ECCL_WIRE_HELLO_POOL : 0));
        if (m->u.hello.purpose > ECCL_LINK_LAST) w->bad = 1;
        if (m->u.hello.pool_size > 1) {
            put_u32(w, m->u.hello.pool);
            put_u32(w, m->u.hello.pool_size);
            if (!hello_pool_ok(&m->u.hello)) w->bad = 1;
        } else if (m->u.hello.pool != 0) {
            w->bad = 1;
        }
        if (m->u.hello.purpose == ECCL_LINK_PEER) put_u32(w, m->u.hello.rank);
        else if (m->u.hello.rank != 0) w->bad = 1; /* only a PEER hello carries one */
        break;
    case ECCL_MSG_SYNC_REQ: {
        const eccl_msg_sync_req *q = &m->u.sync_req;
        if (!sync_req_head_ok(q) || (q->n_keys > 0 && !q->keys == !q->packed)) {
            w->bad = 1;
            break;
        }
        put_u32(w, q->seq);
        put_u64(w, q->revision);
        put_u8(w, q->strategy);
        put_u8(w, q->hash_type);
        put_u32(w, q->n_keys);
        eccl_wire_sync_key k, prev = {{0}, 0, 0, 0};
        uint32_t pos = 0, i = 0;
        while (!w->bad && eccl_wire_sync_req_next(q, &pos, &i, &k)) {
            if (memchr(k.key, '\0', sizeof k.key) == NULL || !sync_key_ok(&k, i > 1 ? prev.key : NULL))
                w->bad = 1;
            put_str(w, k.key);
            put_u64(w, k.bytes);
            put_u64(w, k.hash);
            put_u8(w, k.dtype);
            prev = k;
        }
        if (i != q->n_keys) w->bad = 1;
        break;
    }
    case ECCL_MSG_SYNC_PLAN: {
        const eccl_msg_sync_plan *p = &m->u.sync_plan;
        if (!sync_plan_head_ok(p) || (p->n_fetch > 0 && !p->fetch == !p->packed) ||
            (p->n_src > 0 && !p->src == !p->packed)) {
            w->bad = 1;
            break;
        }
        put_u32(w, p->seq);
        put_u32(w, p->result);
        put_u32(w, p->round);
        put_u64(w, p->revision);
        put_u32(w, p->n_fetch);
        put_u32(w, p->n_src);
        for (uint32_t i = 0; i < p->n_fetch && !w->bad; i++) {
            eccl_wire_sync_fetch f = eccl_wire_sync_plan_fetch(p, i), prev;
            if (i > 0) prev = eccl_wire_sync_plan_fetch(p, i - 1);
            if (!sync_fetch_ok(&f, i > 0 ? &prev : NULL, p->n_src)) w->bad = 1;
            put_u32(w, f.key);
            put_u32(w, f.src);
            put_u64(w, f.hash);
        }
        for (uint32_t i = 0; i < p->n_src && !w->bad; i++) {
            eccl_wire_peer_ref r;
            eccl_wire_sync_plan_src(p, i, &r);
            put_peer_ref(w, &r);
        }
        break;
    }
    case ECCL_MSG_SYNC_REPORT:
    case ECCL_MSG_SYNC_DONE:
        put_u32(w, m->u.sync_result.seq);
        put_u32(w, m->u.sync_result.result);
        put_u64(w, m->u.sync_result.revision);
        break;
    case ECCL_MSG_SYNC_FETCH:
        if (m->u.sync_fetch.key[0] == '\0') w->bad = 1;
        put_u32(w, m->u.sync_fetch.round);
        put_u32(w, m->u.sync_fetch.id);
        put_u64(w, m->u.sync_fetch.bytes);
        put_str(w, m->u.sync_fetch.key);
        break;
    case ECCL_MSG_OPT_REQ:
        put_u32(w, m->u.opt_req.seq);
        put_u32(w, m->u.opt_req.probe_ms);
        put_u32(w, m->u.opt_req.probe_conns);
        put_u32(w, m->u.opt_req.max_rounds);
        break;
    case ECCL_MSG_OPT_PROBE:
        put_u32(w, m->u.opt_probe.seq);
        put_u32(w, m->u.opt_probe.round);
        put_u32(w, m->u.opt_probe.probe_ms);
        put_u32(w, m->u.opt_probe.probe_conns);
        put_peer_ref(w, &m->u.opt_probe.target);
        break;
    case ECCL_MSG_OPT_BW:
        put_u32(w, m->u.opt_bw.seq);
        put_u32(w, m->u.opt_bw.round);
        put_u32(w, m->u.opt_bw.result);
        put_u64(w, m->u.opt_bw.target);
        put_u64(w, m->u.opt_bw.bytes);
        put_u64(w, m->u.opt_bw.ns);
        break;
    case ECCL_MSG_OPT_DONE:
        if (m->u.opt_done.changed > 1 || m->u.opt_done.exact > 1 || m->u.opt_done.moonshot > 1)
            w->bad = 1;
        put_u32(w, m->u.opt_done.seq);
        put_u32(w, m->u.opt_done.result);
        put_u32(w, m->u.opt_done.epoch);
        put_u8(w, m->u.opt_done.changed);
        put_u8(w, m->u.opt_done.exact);
        put_u8(w, m->u.opt_done.moonshot);
        put_u32(w, m->u.opt_done.pairs);
        put_u32(w, m->u.opt_done.unmeasured);
        put_u64(w, m->u.opt_done.old_bps);
        put_u64(w, m->u.opt_done.new_bps);
        break;
    case ECCL_MSG_RELAY_HELLO:
        put_u32(w, m->u.relay_hello.timeout_ms);
        break;
    case ECCL_MSG_PEER_QUERY: {
        const eccl_msg_peer_query *q = &m->u.peer_query;
        if (q->n > ECCL_WIRE_MAX_PEER_REFS || (q->n > 0 && !q->ranks == !q->packed)) {
            w->bad = 1;
            break;
        }
        put_u32(w, q->epoch);
        put_u32(w, q->n);
        for (uint32_t i = 0; i < q->n; i++) {
            uint32_t rank = eccl_wire_peer_query_rank(q, i);
            if (i > 0 && rank <= eccl_wire_peer_query_rank(q, i - 1)) w->bad = 1;
            put_u32(w, rank);
        }
        break;
    }
    case ECCL_MSG_PEER_REPLY: {
        const eccl_msg_peer_reply *p = &m->u.peer_reply;
        if (p->n > ECCL_WIRE_MAX_PEER_REFS || (p->n > 0 && !p->entries == !p->packed)) {
            w->bad = 1;
            break;
        }
        put_u32(w, p->epoch);
        put_u32(w, p->n);
        uint32_t pos = 0, i = 0;
        eccl_wire_peer_entry e;
        while (!w->bad && eccl_wire_peer_reply_next(p, &pos, &i, &e)) {
            put_u32(w, e.rank);
            put_peer_ref(w, &e.ref);
        }
        if (i != p->n) w->bad = 1; /* a packed list shorter than it says */
        break;
    }
    case ECCL_MSG_BATCH: {
        /* Re-encoding a decoded batch (tests, forwarding): entries as they are. */
        uint32_t pos = 0, h, c, n = 0, fl;
        const uint8_t *f;
        int step;
        while (eccl_wire_batch_next_step(&m->u.batch, &pos, &h, &c, &step, &f, &fl)) n++;
        if (n != m->u.batch.n || pos != m->u.batch.len || w->cap - w->pos < 4u + pos) {
            w->bad = 1;
            break;
        }
        put_u32(w, n);
        if (pos) memcpy(w->p + w->pos, m->u.batch.packed, pos);
        w->pos += pos;
        break;
    }
    default: /* DATA and unknown types have no control layout */
        w->bad = 1;
        break;
    }
}

size_t eccl_wire_encode(const eccl_msg *msg, uint8_t *out, size_t cap)
{
    if (cap < ECCL_WIRE_HEADER_SIZE)
        return 0;
    wbuf w = {out + ECCL_WIRE_HEADER_SIZE, cap - ECCL_WIRE_HEADER_SIZE, 0, 0};
    put_payload(&w, msg);
    /* Never a frame the decoder refuses: within its type's bound, however
     * large the buffer. */
    if (w.bad || w.pos > max_length(msg->type))
        return 0;
    eccl_wire_header_encode(msg->type, (uint32_t)w.pos, out);
    return ECCL_WIRE_HEADER_SIZE + w.pos;
}

static void get_payload(rbuf *r, uint16_t type, eccl_msg *m)
{
    switch (type) {
    case ECCL_MSG_REGISTER:
        m->u.reg.peer_group = get_u32(r);
        m->u.reg.peer_timeout_ms = get_u32(r);
        get_str(r, m->u.reg.p2p_addr);
        break;
    case ECCL_MSG_HEARTBEAT:
    case ECCL_MSG_PENDING_QUERY:
    case ECCL_MSG_TOPO_VOTE:
    case ECCL_MSG_LEAVE:
        break;
    case ECCL_MSG_WELCOME:
        m->u.welcome.peer_id = get_u64(r);
        m->u.welcome.accepted = get_u32(r);
        break;
    case ECCL_MSG_PENDING_REPLY:
        m->u.pending.pending = get_u32(r);
        break;
    case ECCL_MSG_RING:
        m->u.ring.peer_group = get_u32(r);
        m->u.ring.epoch = get_u32(r);
        m->u.ring.world_size = get_u32(r);
        m->u.ring.rank = get_u32(r);
        get_peer_ref(r, &m->u.ring.next);
        get_peer_ref(r, &m->u.ring.prev);
        get_peer_ref(r, &m->u.ring.tree_parent);
        for (uint32_t k = 0; k < ECCL_WIRE_TREE_CHILDREN; k++) m->u.ring.tree_child[k] = get_u64(r);
        m->u.ring.local_size = get_u32(r);
        m->u.ring.host_ranks = get_u32(r);
        if (!ring_ok(&m->u.ring))
            r->bad = 1;
        break;
    case ECCL_MSG_REGISTER_SEG: {
        /* The whole list is checked here, so that a walk over it cannot fail. */
        eccl_msg_register_seg *g = &m->u.register_seg;
        g->peer_group = get_u32(r);
        g->peer_timeout_ms = get_u32(r);
        g->n = get_u32(r);
        g->addrs = NULL;
        g->packed = r->p + r->pos;
        g->packed_len = (uint32_t)(r->len - r->pos);
        if (r->bad || g->n < 1 || g->n > ECCL_WIRE_MAX_SEG) {
            r->bad = 1;
            break;
        }
        char addr[ECCL_ADDR_MAX];
        for (uint32_t i = 0; i < g->n && !r->bad; i++) get_str(r, addr);
        if (r->pos != r->len) r->bad = 1;
        break;
    }
    case ECCL_MSG_RING_SEG: {
        eccl_msg_ring_seg *g = &m->u.ring_seg;
        g->peer_group = get_u32(r);
        g->epoch = get_u32(r);
        g->world_size = get_u32(r);
        g->first_rank = get_u32(r);
        g->local_size = get_u32(r);
        g->host_ranks = get_u32(r);
        get_peer_ref(r, &g->prev);
        get_peer_ref(r, &g->next);
        get_peer_ref(r, &g->root_parent);
        g->root_child[0] = get_u64(r);
        g->root_child[1] = get_u64(r);
        g->n = get_u32(r);
        g->handles = NULL;
        if (r->bad || !ring_seg_ok(g) || (size_t)g->n * 4u != r->len - r->pos) {
            r->bad = 1;
            break;
        }
        g->packed = r->p + r->pos;
        r->pos = r->len;
        break;
    }
    case ECCL_MSG_RING_READY:
    case ECCL_MSG_TOPO_DONE:
    case ECCL_MSG_VIEW_QUERY:
        m->u.epoch.epoch = get_u32(r);
        break;
    case ECCL_MSG_COLL_DONE:
        m->u.coll.tag = get_u64(r);
        m->u.coll.epoch = get_u32(r);
        m->u.coll.count = get_u64(r);
        m->u.coll.dtype = get_u8(r);
        m->u.coll.op = get_u8(r);
        m->u.coll.result = get_u32(r);
        if (!coll_ok(&m->u.coll))
            r->bad = 1;
        break;
    case ECCL_MSG_VIEW_REPORT:
    case ECCL_MSG_VIEW_DECIDE:
        m->u.view.epoch = get_u32(r);
        m->u.view.n_ops = get_u32(r);
        m->u.view.ops = NULL;
        /* The count is checked against both the bound and the bytes that are
         * actually there before the loop, so a lying count costs nothing. */
        if (r->bad || m->u.view.n_ops > ECCL_WIRE_MAX_OPS ||
            (size_t)m->u.view.n_ops * OP_FLAG_SIZE > r->len - r->pos) {
            r->bad = 1;
            break;
        }
        /* Entries stay where they are: validated here, read in place later
         * by eccl_wire_view_op (no 4096-entry copy on anyone's stack). */
        m->u.view.packed = r->p + r->pos;
        for (uint32_t i = 0; i < m->u.view.n_ops; i++) {
            if (m->u.view.packed[(size_t)i * OP_FLAG_SIZE + 8] > view_flag_max(type)) {
                r->bad = 1;
                break;
            }
        }
        r->pos += (size_t)m->u.view.n_ops * OP_FLAG_SIZE;
        break;
    case ECCL_MSG_KICK:
        m->u.kick.reason = get_u32(r);
        break;
    case ECCL_MSG_TRACE_ASK:
        m->u.trace_ask.tag = get_u64(r);
        m->u.trace_ask.epoch = get_u32(r);
        m->u.trace_ask.result = get_u32(r);
        break;
    case ECCL_MSG_NOTICE_POST:
    case ECCL_MSG_NOTICE:
        m->u.notice.word = get_u64(r);
        m->u.notice.from = get_u64(r);
        m->u.notice.epoch = get_u32(r);
        m->u.notice.reform = get_u32(r);
        break;
    case ECCL_MSG_LATE_REPORT:
    case ECCL_MSG_SLOW_NOTICE:
        m->u.late.peer_id = get_u64(r);
        m->u.late.late_us = get_u32(r);
        m->u.late.calls = get_u32(r);
        break;
    case ECCL_MSG_LINK_RATE:
    case ECCL_MSG_SLOW_LINK:
        m->u.link.from = get_u64(r);
        m->u.link.to = get_u64(r);
        m->u.link.bytes = get_u64(r);
        m->u.link.ns = get_u64(r);
        break;
    case ECCL_MSG_COLL_STATS:
        m->u.stats.calls = get_u64(r);
        m->u.stats.bytes = get_u64(r);
        break;
    case ECCL_MSG_REPAIR_ASK:
    case ECCL_MSG_REPAIR_DATA:
    case ECCL_MSG_REPAIR_PUT:
        m->u.repair.epoch = get_u32(r);
        m->u.repair.tag = get_u64(r);
        m->u.repair.len = get_u32(r);
        m->u.repair.bytes = NULL;
        if (r->bad || m->u.repair.len > (type == ECCL_MSG_REPAIR_ASK ? 0 : ECCL_WIRE_MAX_REPAIR) ||
            m->u.repair.len != r->len - r->pos) {
            r->bad = 1;
            break;
        }
        if (m->u.repair.len) m->u.repair.bytes = r->p + r->pos;
        r->pos += m->u.repair.len;
        break;
    case ECCL_MSG_LEAVE_DONE:
        m->u.leave_done.result = get_u32(r);
        break;
    case ECCL_MSG_P2P_HELLO:
        m->u.hello.peer_id = get_u64(r);
        m->u.hello.peer_group = get_u32(r);
        m->u.hello.epoch = get_u32(r);
        m->u.hello.purpose = get_u32(r);
        m->u.hello.pool = 0;
        m->u.hello.pool_size = 1;
        if (m->u.hello.purpose & ECCL_WIRE_HELLO_POOL) {
            m->u.hello.purpose &= ~ECCL_WIRE_HELLO_POOL;
            m->u.hello.pool = get_u32(r);
            m->u.hello.pool_size = get_u32(r);
            if (!hello_pool_ok(&m->u.hello)) r->bad = 1;
        }
        if (m->u.hello.purpose > ECCL_LINK_LAST) r->bad = 1;
        m->u.hello.rank = m->u.hello.purpose == ECCL_LINK_PEER ? get_u32(r) : 0;
        break;
    case ECCL_MSG_SYNC_REQ: {
        eccl_msg_sync_req *q = &m->u.sync_req;
        q->seq = get_u32(r);
        q->revision = get_u64(r);
        q->strategy = get_u8(r);
        q->hash_type = get_u8(r);
        q->n_keys = get_u32(r);
        q->keys = NULL;
        if (r->bad || !sync_req_head_ok(q)) {
            r->bad = 1;
            break;
        }
        /* Validated once here, read in place later (no 512-entry copy). */
        size_t start = r->pos;
        char prev[ECCL_ADDR_MAX];
        for (uint32_t i = 0; i < q->n_keys && !r->bad; i++) {
            eccl_wire_sync_key k;
            get_str(r, k.key);
            k.bytes = get_u64(r);
            k.hash = get_u64(r);
            k.dtype = get_u8(r);
            if (!r->bad && !sync_key_ok(&k, i > 0 ? prev : NULL)) r->bad = 1;
            memcpy(prev, k.key, sizeof prev);
        }
        q->packed = r->p + start;
        q->packed_len = (uint32_t)(r->pos - start);
        break;
    }
    case ECCL_MSG_SYNC_PLAN: {
        eccl_msg_sync_plan *p = &m->u.sync_plan;
        p->seq = get_u32(r);
        p->result = get_u32(r);
        p->round = get_u32(r);
        p->revision = get_u64(r);
        p->n_fetch = get_u32(r);
        p->n_src = get_u32(r);
        p->fetch = NULL;
        p->src = NULL;
        if (r->bad || !sync_plan_head_ok(p) ||
            (size_t)p->n_fetch * SYNC_FETCH_SIZE > r->len - r->pos) {
            r->bad = 1;
            break;
        }
        p->packed = r->p + r->pos;
        eccl_wire_sync_fetch f, prev = {0, 0, 0};
        for (uint32_t i = 0; i < p->n_fetch && !r->bad; i++) {
            f.key = get_u32(r);
            f.src = get_u32(r);
            f.hash = get_u64(r);
            if (!sync_fetch_ok(&f, i > 0 ? &prev : NULL, p->n_src)) r->bad = 1;
            prev = f;
        }
        for (uint32_t i = 0; i < p->n_src && !r->bad; i++) {
            eccl_wire_peer_ref ref;
            get_peer_ref(r, &ref);
        }
        break;
    }
    case ECCL_MSG_SYNC_REPORT:
    case ECCL_MSG_SYNC_DONE:
        m->u.sync_result.seq = get_u32(r);
        m->u.sync_result.result = get_u32(r);
        m->u.sync_result.revision = get_u64(r);
        break;
    case ECCL_MSG_SYNC_FETCH:
        m->u.sync_fetch.round = get_u32(r);
        m->u.sync_fetch.id = get_u32(r);
        m->u.sync_fetch.bytes = get_u64(r);
        get_str(r, m->u.sync_fetch.key);
        if (m->u.sync_fetch.key[0] == '\0') r->bad = 1;
        break;
    case ECCL_MSG_OPT_REQ:
        m->u.opt_req.seq = get_u32(r);
        m->u.opt_req.probe_ms = get_u32(r);
        m->u.opt_req.probe_conns = get_u32(r);
        m->u.opt_req.max_rounds = get_u32(r);
        break;
    case ECCL_MSG_OPT_PROBE:
        m->u.opt_probe.seq = get_u32(r);
        m->u.opt_probe.round = get_u32(r);
        m->u.opt_probe.probe_ms = get_u32(r);
        m->u.opt_probe.probe_conns = get_u32(r);
        get_peer_ref(r, &m->u.opt_probe.target);
        break;
    case ECCL_MSG_OPT_BW:
        m->u.opt_bw.seq = get_u32(r);
        m->u.opt_bw.round = get_u32(r);
        m->u.opt_bw.result = get_u32(r);
        m->u.opt_bw.target = get_u64(r);
        m->u.opt_bw.bytes = get_u64(r);
        m->u.opt_bw.ns = get_u64(r);
        break;
    case ECCL_MSG_OPT_DONE:
        m->u.opt_done.seq = get_u32(r);
        m->u.opt_done.result = get_u32(r);
        m->u.opt_done.epoch = get_u32(r);
        m->u.opt_done.changed = get_u8(r);
        m->u.opt_done.exact = get_u8(r);
        m->u.opt_done.moonshot = get_u8(r);
        m->u.opt_done.pairs = get_u32(r);
        m->u.opt_done.unmeasured = get_u32(r);
        m->u.opt_done.old_bps = get_u64(r);
        m->u.opt_done.new_bps = get_u64(r);
        if (m->u.opt_done.changed > 1 || m->u.opt_done.exact > 1 || m->u.opt_done.moonshot > 1)
            r->bad = 1;
        break;
    case ECCL_MSG_RELAY_HELLO:
        m->u.relay_hello.timeout_ms = get_u32(r);
        break;
    case ECCL_MSG_PEER_QUERY: {
        eccl_msg_peer_query *q = &m->u.peer_query;
        q->epoch = get_u32(r);
        q->n = get_u32(r);
        q->ranks = NULL;
        if (r->bad || q->n > ECCL_WIRE_MAX_PEER_REFS || (size_t)q->n * 4u != r->len - r->pos) {
            r->bad = 1;
            break;
        }
        q->packed = r->p + r->pos;
        for (uint32_t i = 0, prev = 0; i < q->n; i++) {
            uint32_t rank = get_u32(r);
            if (i > 0 && rank <= prev) r->bad = 1;
            prev = rank;
        }
        break;
    }
    case ECCL_MSG_PEER_REPLY: {
        eccl_msg_peer_reply *p = &m->u.peer_reply;
        p->epoch = get_u32(r);
        p->n = get_u32(r);
        p->entries = NULL;
        if (r->bad || p->n > ECCL_WIRE_MAX_PEER_REFS) {
            r->bad = 1;
            break;
        }
        size_t start = r->pos;
        for (uint32_t i = 0; i < p->n && !r->bad; i++) {
            eccl_wire_peer_entry e;
            e.rank = get_u32(r);
            get_peer_ref(r, &e.ref);
        }
        p->packed = r->p + start;
        p->packed_len = (uint32_t)(r->pos - start);
        break;
    }
    case ECCL_MSG_BATCH: {
        m->u.batch.n = get_u32(r);
        if (r->bad) break;
        m->u.batch.packed = r->p + r->pos;
        m->u.batch.len = (uint32_t)(r->len - r->pos);
        /* Every entry is checked now, so delivery can trust the bounds. */
        uint32_t pos = 0, h, c, fl, n = 0;
        const uint8_t *f;
        int step;
        while (eccl_wire_batch_next_step(&m->u.batch, &pos, &h, &c, &step, &f, &fl)) n++;
        if (n != m->u.batch.n || pos != m->u.batch.len) r->bad = 1;
        r->pos = r->len;
        break;
    }
    default:
        r->bad = 1;
        break;
    }
}

/* ---- batches ------------------------------------------------------------------- */

#define BATCH_ENTRY_HEAD 8u  /* handle, length */
#define BATCH_SPAN_HEAD 12u  /* handle | SPAN, length, count */

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A frame a batch may carry: a valid control header whose length is the
 * rest of the frame, and not a relay's own frame. */
static int batch_frame_ok(const uint8_t *f, uint32_t len)
{
    eccl_wire_header h;
    return len >= ECCL_WIRE_HEADER_SIZE && eccl_wire_header_decode(f, &h) == ECCL_OK &&
           h.type != ECCL_MSG_DATA && h.type != ECCL_MSG_BATCH &&
           h.type != ECCL_MSG_RELAY_HELLO && h.length == len - ECCL_WIRE_HEADER_SIZE;
}

uint16_t eccl_wire_entry_type(const uint8_t *f)
{
    return (uint16_t)(f[6] | f[7] << 8);
}

eccl_result eccl_wire_decode_entry(const uint8_t *f, uint32_t len, eccl_msg *out)
{
    if (!batch_frame_ok(f, len)) return ECCL_ERR_PROTOCOL;
    return eccl_wire_decode(eccl_wire_entry_type(f), f + ECCL_WIRE_HEADER_SIZE, len - ECCL_WIRE_HEADER_SIZE, out);
}

/* A WELCOME frame's peer id (the frame checked by batch_frame_ok), or 0
 * when it is another frame. */
static uint64_t welcome_id(const uint8_t *f, uint32_t len, uint32_t *accepted)
{
    eccl_msg m;
    *accepted = 0; /* read by the caller even when this is no WELCOME */
    if (len != ECCL_WIRE_HEADER_SIZE + 12u || eccl_wire_entry_type(f) != ECCL_MSG_WELCOME ||
        eccl_wire_decode_entry(f, len, &m) != ECCL_OK)
        return 0;
    *accepted = m.u.welcome.accepted;
    return m.u.welcome.peer_id;
}

int eccl_wire_batch_next_step(const eccl_msg_batch *b, uint32_t *pos, uint32_t *handle,
                              uint32_t *count, int *step, const uint8_t **frame,
                              uint32_t *frame_len)
{
    if (*pos >= b->len || b->len - *pos < BATCH_ENTRY_HEAD) return 0;
    const uint8_t *e = b->packed + *pos;
    uint32_t h = le32(e), len = le32(e + 4), head = BATCH_ENTRY_HEAD, n = 1;
    int st = 0;
    if (h & ECCL_WIRE_BATCH_SPAN) {
        /* One frame for `n` consecutive handles: n >= 2 (one is a plain
         * entry, so every batch has one encoding), within the handle range,
         * never a gone entry (a relay reports losses one by one). */
        if (b->len - *pos < BATCH_SPAN_HEAD) return 0;
        h &= ~ECCL_WIRE_BATCH_SPAN;
        n = le32(e + 8);
        head = BATCH_SPAN_HEAD;
        st = (n & ECCL_WIRE_BATCH_STEP) != 0;
        n &= ~ECCL_WIRE_BATCH_STEP;
        if (n < 2 || n - 1 > ECCL_WIRE_BATCH_MAX_HANDLE - h || !len) return 0;
    }
    if (len > b->len - *pos - head) return 0;
    if (len && !batch_frame_ok(e + head, len)) return 0;
    if (st) {
        /* A stepping span: WELCOMEs only, ids that stay above 0. */
        uint32_t acc;
        uint64_t id = welcome_id(e + head, len, &acc);
        if (!id || id + (n - 1) < id) return 0;
    }
    *handle = h;
    *count = n;
    *step = st;
    *frame = len ? e + head : NULL;
    *frame_len = len;
    *pos += head + len;
    return 1;
}

int eccl_wire_batch_next(const eccl_msg_batch *b, uint32_t *pos, uint32_t *handle,
                         uint32_t *count, const uint8_t **frame, uint32_t *frame_len)
{
    uint32_t at = *pos;
    int step;
    if (!eccl_wire_batch_next_step(b, &at, handle, count, &step, frame, frame_len) || step)
        return 0;
    *pos = at;
    return 1;
}

eccl_result eccl_wire_batch_step_frame(const uint8_t *frame, uint32_t len, uint32_t i,
                                       uint8_t *out)
{
    uint32_t acc;
    uint64_t id = welcome_id(frame, len, &acc);
    if (!id) return ECCL_ERR_PROTOCOL;
    eccl_msg m = {.type = ECCL_MSG_WELCOME};
    m.u.welcome.peer_id = id + i;
    m.u.welcome.accepted = acc;
    return eccl_wire_encode(&m, out, len) == len ? ECCL_OK : ECCL_ERR_PROTOCOL;
}

/* Room for `need` more payload bytes, within the batch bound. */
static eccl_result batch_reserve(eccl_wire_batch *b, size_t need)
{
    size_t payload = b->len ? b->len - ECCL_WIRE_HEADER_SIZE : 4u;
    if (payload + need > ECCL_WIRE_MAX_BATCH) return ECCL_ERR_AGAIN;
    size_t want = ECCL_WIRE_HEADER_SIZE + payload + need;
    if (want > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < want) cap *= 2;
        uint8_t *p = realloc(b->buf, cap);
        if (!p) return ECCL_ERR_NO_MEMORY;
        b->buf = p;
        b->cap = cap;
    }
    if (!b->len) b->len = ECCL_WIRE_HEADER_SIZE + 4u; /* header and count, filled at take */
    return ECCL_OK;
}

static void batch_entry_head(eccl_wire_batch *b, uint32_t handle, uint32_t len)
{
    wbuf w = {b->buf + b->len, BATCH_ENTRY_HEAD, 0, 0};
    put_u32(&w, handle);
    put_u32(&w, len);
    b->last = b->len;
    b->len += BATCH_ENTRY_HEAD;
    b->n++;
}

/* Folds the entry just written at b->len (frame f of len bytes, inside the
 * buffer, not yet counted) into the batch's last entry when that carries
 * the same frame for the handles right next to `handle`: identical
 * decisions for the peers behind one relay travel once (docs/protocol.md,
 * "Relays"). Only the last entry grows, so no entry moves past another and
 * each peer's frames keep their order. Returns 1 when folded. */
static int batch_fold(eccl_wire_batch *b, uint32_t handle, const uint8_t *f, uint32_t len)
{
    if (!b->n || !len || handle > ECCL_WIRE_BATCH_MAX_HANDLE) return 0;
    uint8_t *e = b->buf + b->last;
    uint32_t h = le32(e), n = 1, head = BATCH_ENTRY_HEAD, step = 0;
    if (h & ECCL_WIRE_BATCH_SPAN) {
        h &= ~ECCL_WIRE_BATCH_SPAN;
        n = le32(e + 8);
        step = n & ECCL_WIRE_BATCH_STEP;
        n &= ~ECCL_WIRE_BATCH_STEP;
        head = BATCH_SPAN_HEAD;
    }
    if (le32(e + 4) != len) return 0;
    uint32_t first;
    if (!step && memcmp(e + head, f, len) == 0) {
        if (h + n == handle && handle <= ECCL_WIRE_BATCH_MAX_HANDLE) first = h;
        else if (handle + 1 == h) first = handle;
        else return 0;
    } else {
        /* A stepping span: the WELCOME of the next handle up, for the next
         * peer id (ids handed out in a relay's handle order, as they are
         * when its registrations come in one batch): one entry for the
         * relay's newcomers, which the relay expands (wire.h). */
        uint32_t acc0, acc1;
        uint64_t id0 = welcome_id(e + head, len, &acc0), id1 = welcome_id(f, len, &acc1);
        if (!(step || n == 1) || !id0 || acc0 != acc1 || id1 != id0 + n || h + n != handle)
            return 0;
        first = h;
        step = ECCL_WIRE_BATCH_STEP;
    }
    if (head == BATCH_ENTRY_HEAD) {
        /* The room the new entry's head took holds the count: shift the
         * frame up by 4 (it ends where the new entry begins). */
        memmove(e + BATCH_SPAN_HEAD, e + BATCH_ENTRY_HEAD, len);
        b->len += BATCH_SPAN_HEAD - BATCH_ENTRY_HEAD;
    }
    wbuf w = {e, BATCH_SPAN_HEAD, 0, 0};
    put_u32(&w, first | ECCL_WIRE_BATCH_SPAN);
    put_u32(&w, len);
    put_u32(&w, (n + 1) | step);
    return 1;
}

eccl_result eccl_wire_batch_add_frame(eccl_wire_batch *b, uint32_t handle,
                                      const uint8_t *frame, uint32_t frame_len)
{
    if (handle > ECCL_WIRE_BATCH_MAX_HANDLE) return ECCL_ERR_INVALID_ARG;
    if (frame_len && !batch_frame_ok(frame, frame_len)) return ECCL_ERR_INVALID_ARG;
    b->folded = 0;
    eccl_result rc = batch_reserve(b, BATCH_SPAN_HEAD + (size_t)frame_len);
    if (rc != ECCL_OK) return rc;
    if (frame_len) memcpy(b->buf + b->len + BATCH_ENTRY_HEAD, frame, frame_len);
    if (batch_fold(b, handle, b->buf + b->len + BATCH_ENTRY_HEAD, frame_len)) {
        b->folded = 1;
        return ECCL_OK;
    }
    batch_entry_head(b, handle, frame_len);
    b->len += frame_len;
    return ECCL_OK;
}

eccl_result eccl_wire_batch_add(eccl_wire_batch *b, uint32_t handle, const eccl_msg *m)
{
    if (!m) return eccl_wire_batch_add_frame(b, handle, NULL, 0);
    if (handle > ECCL_WIRE_BATCH_MAX_HANDLE || m->type == ECCL_MSG_DATA ||
        m->type == ECCL_MSG_BATCH || m->type == ECCL_MSG_RELAY_HELLO)
        return ECCL_ERR_INVALID_ARG;
    b->folded = 0;
    size_t max = ECCL_WIRE_HEADER_SIZE + max_length(m->type);
    eccl_result rc = batch_reserve(b, BATCH_SPAN_HEAD + max);
    if (rc == ECCL_ERR_AGAIN && b->n == 0) return ECCL_ERR_INVALID_ARG;
    if (rc == ECCL_ERR_AGAIN) {
        /* The bound may still fit the message as encoded: encode aside. */
        uint8_t *tmp = malloc(max);
        if (!tmp) return ECCL_ERR_NO_MEMORY;
        size_t n = eccl_wire_encode(m, tmp, max);
        rc = n ? eccl_wire_batch_add_frame(b, handle, tmp, (uint32_t)n) : ECCL_ERR_INVALID_ARG;
        free(tmp);
        return rc;
    }
    if (rc != ECCL_OK) return rc;
    uint8_t *f = b->buf + b->len + BATCH_ENTRY_HEAD;
    size_t n = eccl_wire_encode(m, f, max);
    if (!n) return ECCL_ERR_INVALID_ARG;
    if (batch_fold(b, handle, f, (uint32_t)n)) {
        b->folded = 1;
        return ECCL_OK;
    }
    batch_entry_head(b, handle, (uint32_t)n);
    b->len += n;
    return ECCL_OK;
}

eccl_result eccl_wire_batch_put(eccl_wire_batch *b, void (*flush)(void *to), void *to,
                                uint32_t handle, const eccl_msg *m, const uint8_t *frame,
                                uint32_t frame_len)
{
    for (int sent = 0;; sent = 1) {
        eccl_result rc = m ? eccl_wire_batch_add(b, handle, m)
                           : eccl_wire_batch_add_frame(b, handle, frame, frame_len);
        if (rc != ECCL_ERR_AGAIN) return rc;
        if (sent) return ECCL_ERR_INVALID_ARG; /* does not fit even alone */
        flush(to);
    }
}

uint8_t *eccl_wire_batch_take(eccl_wire_batch *b, uint32_t *frame_len)
{
    if (!b->n) return NULL;
    uint8_t *f = b->buf;
    eccl_wire_header_encode(ECCL_MSG_BATCH, (uint32_t)(b->len - ECCL_WIRE_HEADER_SIZE), f);
    wbuf w = {f + ECCL_WIRE_HEADER_SIZE, 4, 0, 0};
    put_u32(&w, b->n);
    *frame_len = (uint32_t)b->len;
    *b = (eccl_wire_batch){0};
    return f;
}

void eccl_wire_batch_free(eccl_wire_batch *b)
{
    free(b->buf);
    *b = (eccl_wire_batch){0};
}

/* ---- shared-state lists ---------------------------------------------------------- */

int eccl_wire_sync_req_next(const eccl_msg_sync_req *m, uint32_t *pos, uint32_t *i,
                            eccl_wire_sync_key *out)
{
    if (*i >= m->n_keys) return 0;
    if (!m->packed) {
        *out = m->keys[(*i)++];
        return 1;
    }
    /* A decoded list was validated whole: this walk cannot fail. */
    rbuf r = {m->packed, m->packed_len, *pos, 0};
    get_str(&r, out->key);
    out->bytes = get_u64(&r);
    out->hash = get_u64(&r);
    out->dtype = get_u8(&r);
    *pos = (uint32_t)r.pos;
    (*i)++;
    return !r.bad;
}

uint32_t eccl_wire_peer_query_rank(const eccl_msg_peer_query *m, uint32_t i)
{
    if (!m->packed) return m->ranks[i];
    rbuf r = {m->packed + (size_t)i * 4u, 4, 0, 0};
    return get_u32(&r);
}

uint32_t eccl_wire_ring_seg_handle(const eccl_msg_ring_seg *m, uint32_t i)
{
    if (!m->packed) return m->handles[i];
    rbuf r = {m->packed + (size_t)i * 4u, 4, 0, 0};
    return get_u32(&r);
}

int eccl_wire_register_seg_next(const eccl_msg_register_seg *m, uint32_t *pos, uint32_t *i,
                                char *out)
{
    if (*i >= m->n) return 0;
    if (!m->packed) {
        const char *a = m->addrs[(*i)++];
        /* 64 bytes without a NUL: put_str refuses it (never cut short). */
        size_t n = 0;
        while (n < ECCL_ADDR_MAX && a[n]) n++;
        memcpy(out, a, n);
        memset(out + n, 0, ECCL_ADDR_MAX - n);
        return 1;
    }
    rbuf r = {m->packed, m->packed_len, *pos, 0};
    get_str(&r, out);
    if (r.bad) return 0; /* past a list shorter than it says: *i tells */
    *pos = (uint32_t)r.pos;
    (*i)++;
    return 1;
}

int eccl_wire_peer_reply_next(const eccl_msg_peer_reply *m, uint32_t *pos, uint32_t *i,
                              eccl_wire_peer_entry *out)
{
    if (*i >= m->n) return 0;
    if (!m->packed) {
        *out = m->entries[(*i)++];
        return 1;
    }
    /* A decoded list was validated whole: this walk cannot fail. */
    rbuf r = {m->packed, m->packed_len, *pos, 0};
    out->rank = get_u32(&r);
    get_peer_ref(&r, &out->ref);
    if (r.bad) return 0; /* past a list shorter than it says: *i tells */
    *pos = (uint32_t)r.pos;
    (*i)++;
    return 1;
}

eccl_wire_sync_fetch eccl_wire_sync_plan_fetch(const eccl_msg_sync_plan *m, uint32_t i)
{
    if (!m->packed) return m->fetch[i];
    rbuf r = {m->packed + (size_t)i * SYNC_FETCH_SIZE, SYNC_FETCH_SIZE, 0, 0};
    eccl_wire_sync_fetch f;
    f.key = get_u32(&r);
    f.src = get_u32(&r);
    f.hash = get_u64(&r);
    return f;
}

void eccl_wire_sync_plan_src(const eccl_msg_sync_plan *m, uint32_t i, eccl_wire_peer_ref *out)
{
    if (!m->packed) {
        *out = m->src[i];
        return;
    }
    /* Sources are variable-length: walk past the fetches and the sources
     * before i (at most 128, validated at decode). */
    rbuf r = {m->packed, SIZE_MAX, (size_t)m->n_fetch * SYNC_FETCH_SIZE, 0};
    for (uint32_t k = 0; k <= i; k++) get_peer_ref(&r, out);
}

eccl_result eccl_wire_decode(uint16_t type, const uint8_t *payload,
                             uint32_t length, eccl_msg *out)
{
    /* The header bound is re-checked here so that a caller who skipped
     * eccl_wire_header_decode still cannot make a decoder walk a huge
     * buffer. */
    if (type == ECCL_MSG_DATA || !known_type(type) || length > max_length(type))
        return ECCL_ERR_PROTOCOL;
    rbuf r = {payload, length, 0, 0};
    out->type = type;
    get_payload(&r, type, out);
    if (r.bad || r.pos != r.len) {
        /* Leave no half-decoded fields, and no pointer into `payload`. */
        memset(&out->u, 0, sizeof out->u);
        return ECCL_ERR_PROTOCOL;
    }
    return ECCL_OK;
}

eccl_wire_op_flag eccl_wire_view_op(const eccl_msg_view *v, uint32_t i)
{
    if (!v->packed)
        return v->ops[i];
    /* Little-endian u64 tag, then the u8 flag (see put_payload). */
    rbuf r = {v->packed + (size_t)i * OP_FLAG_SIZE, OP_FLAG_SIZE, 0, 0};
    eccl_wire_op_flag e;
    e.tag = get_u64(&r);
    e.flag = get_u8(&r);
    return e;
}

/* ---- data header --------------------------------------------------------- */

void eccl_wire_data_encode(const eccl_wire_data *d, uint8_t *out)
{
    wbuf w = {out, ECCL_WIRE_DATA_HEADER_SIZE, 0, 0};
    put_u64(&w, d->tag);
    put_u32(&w, d->epoch);
    put_u8(&w, d->ring);
    put_u8(&w, d->phase);
    put_u16(&w, d->step);
    put_u64(&w, d->offset);
    put_u32(&w, d->len);
    put_u32(&w, d->flags);
}

eccl_result eccl_wire_data_decode(const uint8_t *in, uint32_t frame_length,
                                  eccl_wire_data *out)
{
    rbuf r = {in, ECCL_WIRE_DATA_HEADER_SIZE, 0, 0};
    out->tag = get_u64(&r);
    out->epoch = get_u32(&r);
    out->ring = get_u8(&r);
    out->phase = get_u8(&r);
    out->step = get_u16(&r);
    out->offset = get_u64(&r);
    out->len = get_u32(&r);
    out->flags = get_u32(&r);
    /* Widened so 32 + len cannot wrap; the MAX_DATA bound is repeated in case
     * frame_length did not come from a validated header. */
    int quant = (out->flags & ECCL_WIRE_DATA_QUANT) != 0;
    uint64_t inline_len = (out->flags & ECCL_WIRE_DATA_BULK) ? 0 : out->len;
    if ((out->flags & ~ECCL_WIRE_DATA_FLAGS_KNOWN) != 0 || out->ring > 1 ||
        (quant && ((out->phase != ECCL_PHASE_REDUCE_SCATTER && out->phase != ECCL_PHASE_ALL_GATHER &&
                    out->phase != ECCL_PHASE_SCATTER) ||
                   out->len < ECCL_QUANT_META_BYTES)) ||
        out->phase > ECCL_PHASE_LAST || frame_length > ECCL_WIRE_MAX_DATA ||
        out->len > ECCL_WIRE_MAX_DATA ||
        (uint64_t)ECCL_WIRE_DATA_HEADER_SIZE + inline_len != frame_length)
        return ECCL_ERR_PROTOCOL;
    return ECCL_OK;
}

eccl_result eccl_wire_qdata_encode(const eccl_quant_meta *m, uint8_t *payload)
{
    return eccl_quant_meta_encode(m, payload);
}

eccl_result eccl_wire_qdata_decode(const uint8_t *payload, uint32_t len, eccl_quant_meta *m,
                                   const uint8_t **codes)
{
    eccl_quant_meta meta;
    if (len < ECCL_QUANT_META_BYTES) return ECCL_ERR_PROTOCOL;
    if (eccl_quant_meta_decode(payload, &meta) != ECCL_OK) return ECCL_ERR_PROTOCOL;
    if (meta.count != (uint64_t)len - ECCL_QUANT_META_BYTES) return ECCL_ERR_PROTOCOL;
    *m = meta;
    *codes = payload + ECCL_QUANT_META_BYTES;
    return ECCL_OK;
}
