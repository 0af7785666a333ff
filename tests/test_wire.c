/* Wire codec tests: exact layouts, bounds, every rejection path, and a
 * seeded random sweep that only accepts "decoded and re-encodes to the same
 * bytes" or ECCL_ERR_PROTOCOL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "proto/wire.h"

#define FRAME_CAP (ECCL_WIRE_HEADER_SIZE + ECCL_WIRE_MAX_CONTROL)

static const uint16_t control_types[] = {
    ECCL_MSG_REGISTER,     ECCL_MSG_HEARTBEAT,   ECCL_MSG_PENDING_QUERY,
    ECCL_MSG_TOPO_VOTE,    ECCL_MSG_RING_READY,
    ECCL_MSG_COLL_DONE,    ECCL_MSG_VIEW_REPORT, ECCL_MSG_WELCOME,
    ECCL_MSG_PENDING_REPLY, ECCL_MSG_RING,       ECCL_MSG_TOPO_DONE,
    ECCL_MSG_VIEW_QUERY,   ECCL_MSG_VIEW_DECIDE, ECCL_MSG_KICK,
    ECCL_MSG_P2P_HELLO,    ECCL_MSG_SYNC_REQ,    ECCL_MSG_SYNC_REPORT,
    ECCL_MSG_SYNC_PLAN,    ECCL_MSG_SYNC_DONE,   ECCL_MSG_SYNC_FETCH,
    ECCL_MSG_OPT_REQ,      ECCL_MSG_OPT_BW,      ECCL_MSG_OPT_PROBE,
    ECCL_MSG_OPT_DONE,     ECCL_MSG_PEER_QUERY,  ECCL_MSG_PEER_REPLY,
    ECCL_MSG_LEAVE,        ECCL_MSG_LEAVE_DONE,  ECCL_MSG_REPAIR_DATA,
    ECCL_MSG_REPAIR_ASK,   ECCL_MSG_REPAIR_PUT,  ECCL_MSG_RING_SEG,
    ECCL_MSG_REGISTER_SEG, ECCL_MSG_TRACE_ASK,   ECCL_MSG_LATE_REPORT,
    ECCL_MSG_SLOW_NOTICE,  ECCL_MSG_LINK_RATE,    ECCL_MSG_SLOW_LINK,
    ECCL_MSG_COLL_STATS,   ECCL_MSG_NOTICE_POST, ECCL_MSG_NOTICE,
};
#define N_CONTROL (sizeof(control_types) / sizeof(control_types[0]))

/* Unused numbers: 0, a hole (6), the next free number of each range, and
 * the far ends. A new type takes its number out of this list. */
static const uint16_t unknown_types[] = {0, 6, 20, 31, 52, 63, 67, 83, 0x100, 0xFFFF};
#define N_UNKNOWN (sizeof(unknown_types) / sizeof(unknown_types[0]))

/* ---- helpers ------------------------------------------------------------- */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t next(rng *r)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}

static uint32_t below(rng *r, uint32_t n)
{
    return (uint32_t)(next(r) % n);
}

/* The entries that fill_extreme / fill_random views point at: a view
 * carries no list of its own, its encoder reads the caller's array. */
static eccl_wire_op_flag view_store[ECCL_WIRE_MAX_OPS];
static uint8_t repair_store[ECCL_WIRE_MAX_REPAIR];
/* ... and shared-state lists. */
static eccl_wire_sync_key key_store[ECCL_WIRE_MAX_SYNC_KEYS];
static eccl_wire_sync_fetch fetch_store[ECCL_WIRE_MAX_SYNC_KEYS];
static eccl_wire_peer_ref src_store[ECCL_WIRE_MAX_SYNC_SRCS];
/* ... and the address book's lists: one past the bound, so that an encoder
 * which forgot the bound would read valid entries and produce a frame the
 * test can see, instead of reading past the array. */
static uint32_t rank_store[ECCL_WIRE_MAX_PEER_REFS + 1];
static eccl_wire_peer_entry entry_store[ECCL_WIRE_MAX_PEER_REFS + 1];
static uint32_t handle_store[ECCL_WIRE_MAX_SEG + 1];
static char addr_store[ECCL_WIRE_MAX_SEG + 1][ECCL_ADDR_MAX];
static const char *addr_ptrs[ECCL_WIRE_MAX_SEG + 1];
/* The most REGISTER_SEG addresses of the longest length the bound takes. */
#define REG_SEG_MAX_LONG ((ECCL_WIRE_REGISTER_SEG_BOUND - 12u) / (2u + ECCL_WIRE_MAX_ADDR))

static eccl_msg *new_msg(uint16_t type)
{
    eccl_msg *m = calloc(1, sizeof(*m));
    assert_non_null(m);
    m->type = type;
    return m;
}

/* Decoding from the tail of a heap block makes any read past `length` an
 * out-of-bounds access that ASan reports, instead of a silent read of slack. */
typedef struct arena {
    uint8_t *base;
    size_t cap;
} arena;

static arena arena_new(size_t cap)
{
    arena a = {malloc(cap), cap};
    assert_non_null(a.base);
    return a;
}

static uint8_t *at_tail(arena *a, const uint8_t *src, size_t len)
{
    assert_true(len <= a->cap);
    uint8_t *p = a->base + (a->cap - len);
    if (len)
        memcpy(p, src, len);
    return p;
}

static eccl_result decode_tail(arena *a, uint16_t type, const uint8_t *src,
                               uint32_t len, eccl_msg *out)
{
    return eccl_wire_decode(type, at_tail(a, src, len), len, out);
}

static void fill_str(char *dst, size_t len, char c)
{
    memset(dst, 0, ECCL_ADDR_MAX);
    memset(dst, c, len);
}

static void assert_msg_equal(const eccl_msg *a, const eccl_msg *b)
{
    assert_int_equal(a->type, b->type);
    switch (a->type) {
    case ECCL_MSG_REGISTER:
        assert_int_equal(a->u.reg.peer_group, b->u.reg.peer_group);
        assert_int_equal(a->u.reg.peer_timeout_ms, b->u.reg.peer_timeout_ms);
        assert_string_equal(a->u.reg.p2p_addr, b->u.reg.p2p_addr);
        break;
    case ECCL_MSG_WELCOME:
        assert_int_equal(a->u.welcome.peer_id, b->u.welcome.peer_id);
        assert_int_equal(a->u.welcome.accepted, b->u.welcome.accepted);
        break;
    case ECCL_MSG_PENDING_REPLY:
        assert_int_equal(a->u.pending.pending, b->u.pending.pending);
        break;
    case ECCL_MSG_RING:
        assert_int_equal(a->u.ring.peer_group, b->u.ring.peer_group);
        assert_int_equal(a->u.ring.epoch, b->u.ring.epoch);
        assert_int_equal(a->u.ring.world_size, b->u.ring.world_size);
        assert_int_equal(a->u.ring.rank, b->u.ring.rank);
        assert_int_equal(a->u.ring.next.peer_id, b->u.ring.next.peer_id);
        assert_string_equal(a->u.ring.next.addr, b->u.ring.next.addr);
        assert_int_equal(a->u.ring.prev.peer_id, b->u.ring.prev.peer_id);
        assert_string_equal(a->u.ring.prev.addr, b->u.ring.prev.addr);
        assert_int_equal(a->u.ring.tree_parent.peer_id, b->u.ring.tree_parent.peer_id);
        assert_string_equal(a->u.ring.tree_parent.addr, b->u.ring.tree_parent.addr);
        for (uint32_t k = 0; k < ECCL_WIRE_TREE_CHILDREN; k++)
            assert_int_equal(a->u.ring.tree_child[k], b->u.ring.tree_child[k]);
        assert_int_equal(a->u.ring.local_size, b->u.ring.local_size);
        assert_int_equal(a->u.ring.host_ranks, b->u.ring.host_ranks);
        break;
    case ECCL_MSG_REGISTER_SEG: {
        const eccl_msg_register_seg *x = &a->u.register_seg, *y = &b->u.register_seg;
        assert_int_equal(x->peer_group, y->peer_group);
        assert_int_equal(x->peer_timeout_ms, y->peer_timeout_ms);
        assert_int_equal(x->n, y->n);
        uint32_t px = 0, ix = 0, py = 0, iy = 0;
        char ax[ECCL_ADDR_MAX], ay[ECCL_ADDR_MAX];
        while (eccl_wire_register_seg_next(x, &px, &ix, ax)) {
            assert_true(eccl_wire_register_seg_next(y, &py, &iy, ay));
            assert_memory_equal(ax, ay, ECCL_ADDR_MAX);
        }
        assert_int_equal(ix, x->n);
        assert_int_equal(iy, y->n);
        break;
    }
    case ECCL_MSG_RING_SEG: {
        const eccl_msg_ring_seg *x = &a->u.ring_seg, *y = &b->u.ring_seg;
        assert_int_equal(x->peer_group, y->peer_group);
        assert_int_equal(x->epoch, y->epoch);
        assert_int_equal(x->world_size, y->world_size);
        assert_int_equal(x->first_rank, y->first_rank);
        assert_int_equal(x->local_size, y->local_size);
        assert_int_equal(x->host_ranks, y->host_ranks);
        const eccl_wire_peer_ref *rx[3] = {&x->prev, &x->next, &x->root_parent};
        const eccl_wire_peer_ref *ry[3] = {&y->prev, &y->next, &y->root_parent};
        for (int k = 0; k < 3; k++) {
            assert_int_equal(rx[k]->peer_id, ry[k]->peer_id);
            assert_string_equal(rx[k]->addr, ry[k]->addr);
        }
        assert_int_equal(x->root_child[0], y->root_child[0]);
        assert_int_equal(x->root_child[1], y->root_child[1]);
        assert_int_equal(x->n, y->n);
        for (uint32_t i = 0; i < x->n; i++)
            assert_int_equal(eccl_wire_ring_seg_handle(x, i), eccl_wire_ring_seg_handle(y, i));
        break;
    }
    case ECCL_MSG_RING_READY:
    case ECCL_MSG_TOPO_DONE:
    case ECCL_MSG_VIEW_QUERY:
        assert_int_equal(a->u.epoch.epoch, b->u.epoch.epoch);
        break;
    case ECCL_MSG_COLL_DONE:
        assert_int_equal(a->u.coll.tag, b->u.coll.tag);
        assert_int_equal(a->u.coll.epoch, b->u.coll.epoch);
        assert_int_equal(a->u.coll.count, b->u.coll.count);
        assert_int_equal(a->u.coll.dtype, b->u.coll.dtype);
        assert_int_equal(a->u.coll.op, b->u.coll.op);
        assert_int_equal(a->u.coll.result, b->u.coll.result);
        break;
    case ECCL_MSG_VIEW_REPORT:
    case ECCL_MSG_VIEW_DECIDE:
        assert_int_equal(a->u.view.epoch, b->u.view.epoch);
        assert_int_equal(a->u.view.n_ops, b->u.view.n_ops);
        for (uint32_t i = 0; i < a->u.view.n_ops; i++) {
            eccl_wire_op_flag x = eccl_wire_view_op(&a->u.view, i);
            eccl_wire_op_flag y = eccl_wire_view_op(&b->u.view, i);
            assert_int_equal(x.tag, y.tag);
            assert_int_equal(x.flag, y.flag);
        }
        break;
    case ECCL_MSG_KICK:
        assert_int_equal(a->u.kick.reason, b->u.kick.reason);
        break;
    case ECCL_MSG_TRACE_ASK:
        assert_int_equal(a->u.trace_ask.tag, b->u.trace_ask.tag);
        assert_int_equal(a->u.trace_ask.epoch, b->u.trace_ask.epoch);
        assert_int_equal(a->u.trace_ask.result, b->u.trace_ask.result);
        break;
    case ECCL_MSG_NOTICE_POST:
    case ECCL_MSG_NOTICE:
        assert_int_equal(a->u.notice.word, b->u.notice.word);
        assert_int_equal(a->u.notice.from, b->u.notice.from);
        assert_int_equal(a->u.notice.epoch, b->u.notice.epoch);
        assert_int_equal(a->u.notice.reform, b->u.notice.reform);
        break;
    case ECCL_MSG_LATE_REPORT:
    case ECCL_MSG_SLOW_NOTICE:
        assert_int_equal(a->u.late.peer_id, b->u.late.peer_id);
        assert_int_equal(a->u.late.late_us, b->u.late.late_us);
        assert_int_equal(a->u.late.calls, b->u.late.calls);
        break;
    case ECCL_MSG_LINK_RATE:
    case ECCL_MSG_SLOW_LINK:
        assert_int_equal(a->u.link.from, b->u.link.from);
        assert_int_equal(a->u.link.to, b->u.link.to);
        assert_int_equal(a->u.link.bytes, b->u.link.bytes);
        assert_int_equal(a->u.link.ns, b->u.link.ns);
        break;
    case ECCL_MSG_COLL_STATS:
        assert_int_equal(a->u.stats.calls, b->u.stats.calls);
        assert_int_equal(a->u.stats.bytes, b->u.stats.bytes);
        break;
    case ECCL_MSG_REPAIR_ASK:
    case ECCL_MSG_REPAIR_DATA:
    case ECCL_MSG_REPAIR_PUT:
        assert_int_equal(a->u.repair.epoch, b->u.repair.epoch);
        assert_int_equal(a->u.repair.tag, b->u.repair.tag);
        assert_int_equal(a->u.repair.len, b->u.repair.len);
        if (a->u.repair.len) assert_memory_equal(a->u.repair.bytes, b->u.repair.bytes, a->u.repair.len);
        break;
    case ECCL_MSG_LEAVE_DONE:
        assert_int_equal(a->u.leave_done.result, b->u.leave_done.result);
        break;
    case ECCL_MSG_P2P_HELLO:
        assert_int_equal(a->u.hello.peer_id, b->u.hello.peer_id);
        assert_int_equal(a->u.hello.peer_group, b->u.hello.peer_group);
        assert_int_equal(a->u.hello.epoch, b->u.hello.epoch);
        assert_int_equal(a->u.hello.purpose, b->u.hello.purpose);
        assert_int_equal(a->u.hello.pool, b->u.hello.pool);
        assert_int_equal(a->u.hello.pool_size, b->u.hello.pool_size);
        assert_int_equal(a->u.hello.rank, b->u.hello.rank);
        break;
    case ECCL_MSG_SYNC_REQ: {
        const eccl_msg_sync_req *x = &a->u.sync_req, *y = &b->u.sync_req;
        assert_int_equal(x->seq, y->seq);
        assert_int_equal(x->revision, y->revision);
        assert_int_equal(x->strategy, y->strategy);
        assert_int_equal(x->hash_type, y->hash_type);
        assert_int_equal(x->n_keys, y->n_keys);
        uint32_t px = 0, py = 0, ix = 0, iy = 0;
        eccl_wire_sync_key kx, ky;
        while (eccl_wire_sync_req_next(x, &px, &ix, &kx)) {
            assert_true(eccl_wire_sync_req_next(y, &py, &iy, &ky));
            assert_string_equal(kx.key, ky.key);
            assert_int_equal(kx.bytes, ky.bytes);
            assert_int_equal(kx.hash, ky.hash);
            assert_int_equal(kx.dtype, ky.dtype);
        }
        assert_int_equal(ix, iy);
        break;
    }
    case ECCL_MSG_SYNC_PLAN: {
        const eccl_msg_sync_plan *x = &a->u.sync_plan, *y = &b->u.sync_plan;
        assert_int_equal(x->seq, y->seq);
        assert_int_equal(x->result, y->result);
        assert_int_equal(x->round, y->round);
        assert_int_equal(x->revision, y->revision);
        assert_int_equal(x->n_fetch, y->n_fetch);
        assert_int_equal(x->n_src, y->n_src);
        for (uint32_t i = 0; i < x->n_fetch; i++) {
            eccl_wire_sync_fetch fx = eccl_wire_sync_plan_fetch(x, i);
            eccl_wire_sync_fetch fy = eccl_wire_sync_plan_fetch(y, i);
            assert_int_equal(fx.key, fy.key);
            assert_int_equal(fx.src, fy.src);
            assert_int_equal(fx.hash, fy.hash);
        }
        for (uint32_t i = 0; i < x->n_src; i++) {
            eccl_wire_peer_ref rx, ry;
            eccl_wire_sync_plan_src(x, i, &rx);
            eccl_wire_sync_plan_src(y, i, &ry);
            assert_int_equal(rx.peer_id, ry.peer_id);
            assert_string_equal(rx.addr, ry.addr);
        }
        break;
    }
    case ECCL_MSG_SYNC_REPORT:
    case ECCL_MSG_SYNC_DONE:
        assert_int_equal(a->u.sync_result.seq, b->u.sync_result.seq);
        assert_int_equal(a->u.sync_result.result, b->u.sync_result.result);
        assert_int_equal(a->u.sync_result.revision, b->u.sync_result.revision);
        break;
    case ECCL_MSG_SYNC_FETCH:
        assert_int_equal(a->u.sync_fetch.round, b->u.sync_fetch.round);
        assert_int_equal(a->u.sync_fetch.id, b->u.sync_fetch.id);
        assert_int_equal(a->u.sync_fetch.bytes, b->u.sync_fetch.bytes);
        assert_string_equal(a->u.sync_fetch.key, b->u.sync_fetch.key);
        break;
    case ECCL_MSG_OPT_REQ:
        assert_memory_equal(&a->u.opt_req, &b->u.opt_req, sizeof a->u.opt_req);
        break;
    case ECCL_MSG_OPT_PROBE:
        assert_int_equal(a->u.opt_probe.seq, b->u.opt_probe.seq);
        assert_int_equal(a->u.opt_probe.round, b->u.opt_probe.round);
        assert_int_equal(a->u.opt_probe.probe_ms, b->u.opt_probe.probe_ms);
        assert_int_equal(a->u.opt_probe.probe_conns, b->u.opt_probe.probe_conns);
        assert_int_equal(a->u.opt_probe.target.peer_id, b->u.opt_probe.target.peer_id);
        assert_string_equal(a->u.opt_probe.target.addr, b->u.opt_probe.target.addr);
        break;
    case ECCL_MSG_OPT_BW:
        assert_memory_equal(&a->u.opt_bw, &b->u.opt_bw, sizeof a->u.opt_bw);
        break;
    case ECCL_MSG_OPT_DONE: {
        const eccl_msg_opt_done *x = &a->u.opt_done, *y = &b->u.opt_done;
        assert_int_equal(x->seq, y->seq);
        assert_int_equal(x->result, y->result);
        assert_int_equal(x->epoch, y->epoch);
        assert_int_equal(x->changed, y->changed);
        assert_int_equal(x->exact, y->exact);
        assert_int_equal(x->moonshot, y->moonshot);
        assert_int_equal(x->pairs, y->pairs);
        assert_int_equal(x->unmeasured, y->unmeasured);
        assert_int_equal(x->old_bps, y->old_bps);
        assert_int_equal(x->new_bps, y->new_bps);
        break;
    }
    case ECCL_MSG_PEER_QUERY: {
        const eccl_msg_peer_query *x = &a->u.peer_query, *y = &b->u.peer_query;
        assert_int_equal(x->epoch, y->epoch);
        assert_int_equal(x->n, y->n);
        for (uint32_t i = 0; i < x->n; i++)
            assert_int_equal(eccl_wire_peer_query_rank(x, i), eccl_wire_peer_query_rank(y, i));
        break;
    }
    case ECCL_MSG_PEER_REPLY: {
        const eccl_msg_peer_reply *x = &a->u.peer_reply, *y = &b->u.peer_reply;
        assert_int_equal(x->epoch, y->epoch);
        assert_int_equal(x->n, y->n);
        uint32_t px = 0, py = 0, ix = 0, iy = 0;
        eccl_wire_peer_entry ex, ey;
        while (eccl_wire_peer_reply_next(x, &px, &ix, &ex)) {
            assert_true(eccl_wire_peer_reply_next(y, &py, &iy, &ey));
            assert_int_equal(ex.rank, ey.rank);
            assert_int_equal(ex.ref.peer_id, ey.ref.peer_id);
            assert_string_equal(ex.ref.addr, ey.ref.addr);
        }
        /* Both walks end together, after all n entries. */
        assert_false(eccl_wire_peer_reply_next(y, &py, &iy, &ey));
        assert_int_equal(ix, x->n);
        break;
    }
    default:
        break;
    }
}

/* Key i of a sorted list: a fixed-width hex prefix, padded to `len`. */
static void sync_key_name(char *dst, uint32_t i, size_t len)
{
    memset(dst, 0, ECCL_ADDR_MAX);
    snprintf(dst, ECCL_ADDR_MAX, "%03x", i);
    for (size_t k = 3; k < len; k++) dst[k] = 'z';
}

/* Every field at its smallest legal value (is_max == 0) or its largest. */
static void fill_extreme(eccl_msg *m, uint16_t type, int is_max)
{
    const uint64_t v64 = is_max ? UINT64_MAX : 0;
    const uint32_t v32 = is_max ? UINT32_MAX : 0;
    const size_t slen = is_max ? ECCL_WIRE_MAX_ADDR : 0;
    memset(m, 0, sizeof(*m));
    m->type = type;
    switch (type) {
    case ECCL_MSG_REGISTER:
        m->u.reg.peer_group = v32;
        m->u.reg.peer_timeout_ms = v32;
        fill_str(m->u.reg.p2p_addr, slen, 'a');
        break;
    case ECCL_MSG_WELCOME:
        m->u.welcome.peer_id = v64;
        m->u.welcome.accepted = v32;
        break;
    case ECCL_MSG_PENDING_REPLY:
        m->u.pending.pending = v32;
        break;
    case ECCL_MSG_RING:
        m->u.ring.peer_group = v32;
        m->u.ring.epoch = v32;
        m->u.ring.world_size = is_max ? UINT32_MAX : 1;
        m->u.ring.rank = is_max ? UINT32_MAX - 1 : 0;
        m->u.ring.next.peer_id = v64;
        fill_str(m->u.ring.next.addr, slen, 'n');
        m->u.ring.prev.peer_id = v64;
        fill_str(m->u.ring.prev.addr, slen, 'p');
        m->u.ring.tree_parent.peer_id = v64;
        fill_str(m->u.ring.tree_parent.addr, slen, 't');
        for (uint32_t k = 0; k < ECCL_WIRE_TREE_CHILDREN; k++) m->u.ring.tree_child[k] = v64;
        /* UINT32_MAX = 65537 x 65535: hosts of 65537 ranks. */
        m->u.ring.local_size = is_max ? 65537u : 0;
        m->u.ring.host_ranks = is_max ? m->u.ring.world_size : 0;
        break;
    case ECCL_MSG_REGISTER_SEG: {
        eccl_msg_register_seg *g = &m->u.register_seg;
        g->peer_group = g->peer_timeout_ms = v32;
        g->n = is_max ? REG_SEG_MAX_LONG : 1;
        for (uint32_t i = 0; i < g->n; i++) {
            fill_str(addr_store[i], slen, (char)('a' + i % 26));
            addr_ptrs[i] = addr_store[i];
        }
        g->addrs = addr_ptrs;
        break;
    }
    case ECCL_MSG_RING_SEG: {
        eccl_msg_ring_seg *g = &m->u.ring_seg;
        g->peer_group = g->epoch = v32;
        g->world_size = is_max ? UINT32_MAX : 1;
        g->n = is_max ? ECCL_WIRE_MAX_SEG : 1;
        g->first_rank = g->world_size - g->n; /* the run ends the world */
        g->local_size = is_max ? 65537u : 0;
        g->host_ranks = is_max ? g->world_size : 0;
        g->prev.peer_id = g->next.peer_id = g->root_parent.peer_id = v64;
        fill_str(g->prev.addr, slen, 'p');
        fill_str(g->next.addr, slen, 'n');
        fill_str(g->root_parent.addr, slen, 'r');
        g->root_child[0] = g->root_child[1] = v64;
        g->handles = handle_store;
        for (uint32_t i = 0; i < g->n; i++) handle_store[i] = is_max ? UINT32_MAX - i : 0;
        break;
    }
    case ECCL_MSG_RING_READY:
    case ECCL_MSG_TOPO_DONE:
    case ECCL_MSG_VIEW_QUERY:
        m->u.epoch.epoch = v32;
        break;
    case ECCL_MSG_COLL_DONE:
        m->u.coll.tag = v64;
        m->u.coll.epoch = v32;
        m->u.coll.count = v64;
        m->u.coll.dtype = is_max ? ECCL_DTYPE_COUNT - 1 : 0;
        m->u.coll.op = is_max ? ECCL_OP_COUNT - 1 : 0;
        m->u.coll.result = v32;
        break;
    case ECCL_MSG_VIEW_REPORT:
    case ECCL_MSG_VIEW_DECIDE:
        m->u.view.epoch = v32;
        m->u.view.n_ops = is_max ? ECCL_WIRE_MAX_OPS : 0;
        m->u.view.ops = view_store;
        for (uint32_t i = 0; i < m->u.view.n_ops; i++) {
            view_store[i].tag = UINT64_MAX - i;
            view_store[i].flag = (uint8_t)(i & 1);
        }
        break;
    case ECCL_MSG_KICK:
        m->u.kick.reason = v32;
        break;
    case ECCL_MSG_TRACE_ASK:
        m->u.trace_ask.tag = v64;
        m->u.trace_ask.epoch = v32;
        m->u.trace_ask.result = v32;
        break;
    case ECCL_MSG_NOTICE_POST:
    case ECCL_MSG_NOTICE:
        m->u.notice.word = v64;
        m->u.notice.from = v64 ^ 9u;
        m->u.notice.epoch = v32;
        m->u.notice.reform = v32 & 1u;
        break;
    case ECCL_MSG_LATE_REPORT:
    case ECCL_MSG_SLOW_NOTICE:
        m->u.late.peer_id = v64;
        m->u.late.late_us = v32;
        m->u.late.calls = v32 ^ 5u;
        break;
    case ECCL_MSG_LINK_RATE:
    case ECCL_MSG_SLOW_LINK:
        m->u.link.from = v64;
        m->u.link.to = v64 ^ 3u;
        m->u.link.bytes = v64 >> 7;
        m->u.link.ns = v32;
        break;
    case ECCL_MSG_COLL_STATS:
        m->u.stats.calls = v32;
        m->u.stats.bytes = v64;
        break;
    case ECCL_MSG_REPAIR_ASK:
    case ECCL_MSG_REPAIR_DATA:
    case ECCL_MSG_REPAIR_PUT:
        m->u.repair.epoch = v32;
        m->u.repair.tag = v64;
        m->u.repair.len = is_max && type != ECCL_MSG_REPAIR_ASK ? ECCL_WIRE_MAX_REPAIR : 0;
        m->u.repair.bytes = m->u.repair.len ? repair_store : NULL;
        for (uint32_t i = 0; i < m->u.repair.len; i++) repair_store[i] = (uint8_t)(255 - i);
        break;
    case ECCL_MSG_LEAVE_DONE:
        m->u.leave_done.result = v32;
        break;
    case ECCL_MSG_P2P_HELLO:
        m->u.hello.peer_id = v64;
        m->u.hello.peer_group = v32;
        m->u.hello.epoch = v32;
        /* The longest hello is a pooled ring link's; the shortest has none. */
        m->u.hello.purpose = is_max ? ECCL_LINK_RING : ECCL_LINK_SYNC;
        m->u.hello.pool = is_max ? ECCL_WIRE_MAX_POOL - 1 : 0;
        m->u.hello.pool_size = is_max ? ECCL_WIRE_MAX_POOL : 1;
        break;
    case ECCL_MSG_SYNC_REQ:
        m->u.sync_req.seq = v32;
        m->u.sync_req.revision = v64;
        m->u.sync_req.strategy = is_max ? 2 : 0;
        m->u.sync_req.hash_type = is_max ? 2 : 1;
        m->u.sync_req.n_keys = is_max ? ECCL_WIRE_MAX_SYNC_KEYS : 0;
        m->u.sync_req.keys = key_store;
        for (uint32_t i = 0; i < m->u.sync_req.n_keys; i++) {
            sync_key_name(key_store[i].key, i, ECCL_WIRE_MAX_KEY);
            key_store[i].bytes = UINT64_MAX - i;
            key_store[i].hash = UINT64_MAX;
            key_store[i].dtype = ECCL_DTYPE_COUNT - 1;
        }
        break;
    case ECCL_MSG_SYNC_PLAN:
        m->u.sync_plan.seq = v32;
        m->u.sync_plan.result = 0; /* lists only with success */
        m->u.sync_plan.round = v32;
        m->u.sync_plan.revision = v64;
        m->u.sync_plan.n_fetch = is_max ? ECCL_WIRE_MAX_SYNC_KEYS : 0;
        m->u.sync_plan.n_src = is_max ? ECCL_WIRE_MAX_SYNC_SRCS : 0;
        m->u.sync_plan.fetch = fetch_store;
        m->u.sync_plan.src = src_store;
        for (uint32_t i = 0; i < m->u.sync_plan.n_fetch; i++)
            fetch_store[i] = (eccl_wire_sync_fetch){i, i % ECCL_WIRE_MAX_SYNC_SRCS, UINT64_MAX};
        for (uint32_t i = 0; i < m->u.sync_plan.n_src; i++) {
            src_store[i].peer_id = UINT64_MAX - i;
            fill_str(src_store[i].addr, slen, 's');
        }
        break;
    case ECCL_MSG_SYNC_REPORT:
    case ECCL_MSG_SYNC_DONE:
        m->u.sync_result.seq = v32;
        m->u.sync_result.result = v32;
        m->u.sync_result.revision = v64;
        break;
    case ECCL_MSG_SYNC_FETCH:
        m->u.sync_fetch.round = v32;
        m->u.sync_fetch.id = v32;
        m->u.sync_fetch.bytes = v64;
        fill_str(m->u.sync_fetch.key, is_max ? ECCL_WIRE_MAX_KEY : 1, 'k');
        break;
    case ECCL_MSG_OPT_REQ:
        m->u.opt_req = (eccl_msg_opt_req){v32, v32, v32, v32};
        break;
    case ECCL_MSG_OPT_PROBE:
        m->u.opt_probe.seq = m->u.opt_probe.round = v32;
        m->u.opt_probe.probe_ms = m->u.opt_probe.probe_conns = v32;
        m->u.opt_probe.target.peer_id = v64;
        fill_str(m->u.opt_probe.target.addr, slen, 't');
        break;
    case ECCL_MSG_OPT_BW:
        m->u.opt_bw = (eccl_msg_opt_bw){v32, v32, v32, v64, v64, v64};
        break;
    case ECCL_MSG_OPT_DONE:
        m->u.opt_done = (eccl_msg_opt_done){v32, v32, v32, is_max, is_max, is_max, v32, v32, v64, v64};
        break;
    case ECCL_MSG_PEER_QUERY:
        /* The largest ranks there are, still strictly increasing. */
        m->u.peer_query.epoch = v32;
        m->u.peer_query.n = is_max ? ECCL_WIRE_MAX_PEER_REFS : 0;
        m->u.peer_query.ranks = rank_store;
        for (uint32_t i = 0; i < m->u.peer_query.n; i++)
            rank_store[i] = UINT32_MAX - (ECCL_WIRE_MAX_PEER_REFS - 1) + i;
        break;
    case ECCL_MSG_PEER_REPLY:
        m->u.peer_reply.epoch = v32;
        m->u.peer_reply.n = is_max ? ECCL_WIRE_MAX_PEER_REFS : 0;
        m->u.peer_reply.entries = entry_store;
        for (uint32_t i = 0; i < m->u.peer_reply.n; i++) {
            entry_store[i].rank = UINT32_MAX - i;
            entry_store[i].ref.peer_id = UINT64_MAX - i;
            fill_str(entry_store[i].ref.addr, slen, 'r');
        }
        break;
    default:
        break;
    }
}

static void rand_str(rng *r, char *dst)
{
    size_t n = below(r, 8) == 0 ? ECCL_WIRE_MAX_ADDR : below(r, ECCL_WIRE_MAX_ADDR + 1);
    memset(dst, 0, ECCL_ADDR_MAX);
    for (size_t i = 0; i < n; i++)
        dst[i] = (char)(1 + below(r, 255));
}

/* A random but valid message of a random control type. */
static void fill_random(rng *r, eccl_msg *m)
{
    uint16_t type = control_types[below(r, N_CONTROL)];
    fill_extreme(m, type, 0);
    switch (type) {
    case ECCL_MSG_REGISTER:
        m->u.reg.peer_group = (uint32_t)next(r);
        m->u.reg.peer_timeout_ms = (uint32_t)next(r);
        rand_str(r, m->u.reg.p2p_addr);
        break;
    case ECCL_MSG_WELCOME:
        m->u.welcome.peer_id = next(r);
        m->u.welcome.accepted = below(r, 2);
        break;
    case ECCL_MSG_PENDING_REPLY:
        m->u.pending.pending = (uint32_t)next(r);
        break;
    case ECCL_MSG_RING:
        m->u.ring.peer_group = (uint32_t)next(r);
        m->u.ring.epoch = (uint32_t)next(r);
        m->u.ring.world_size = 1 + below(r, UINT32_MAX);
        m->u.ring.rank = below(r, m->u.ring.world_size);
        m->u.ring.next.peer_id = next(r);
        rand_str(r, m->u.ring.next.addr);
        m->u.ring.prev.peer_id = next(r);
        rand_str(r, m->u.ring.prev.addr);
        /* Sometimes host-regular: L of 2..world/2 ranks, dividing it. */
        if (m->u.ring.world_size >= 4 && next(r) % 2) {
            uint32_t L = 2 + below(r, m->u.ring.world_size / 2 - 1);
            m->u.ring.world_size -= m->u.ring.world_size % L;
            m->u.ring.rank = below(r, m->u.ring.world_size);
            m->u.ring.local_size = L;
        }
        m->u.ring.host_ranks = below(r, m->u.ring.world_size) + (uint32_t)(next(r) % 2);
        for (uint32_t k = 0, nc = below(r, ECCL_WIRE_TREE_CHILDREN + 1); k < nc; k++)
            m->u.ring.tree_child[k] = next(r);
        break;
    case ECCL_MSG_REGISTER_SEG: {
        eccl_msg_register_seg *g = &m->u.register_seg;
        g->peer_group = (uint32_t)next(r);
        g->peer_timeout_ms = (uint32_t)next(r);
        g->n = 1 + below(r, REG_SEG_MAX_LONG);
        for (uint32_t i = 0; i < g->n; i++) {
            rand_str(r, addr_store[i]);
            addr_ptrs[i] = addr_store[i];
        }
        g->addrs = addr_ptrs;
        break;
    }
    case ECCL_MSG_RING_SEG: {
        eccl_msg_ring_seg *g = &m->u.ring_seg;
        g->peer_group = (uint32_t)next(r);
        g->epoch = (uint32_t)next(r);
        g->world_size = 1 + below(r, UINT32_MAX);
        g->n = 1 + below(r, g->world_size < ECCL_WIRE_MAX_SEG ? g->world_size : ECCL_WIRE_MAX_SEG);
        g->first_rank = below(r, g->world_size - g->n + 1);
        g->host_ranks = below(r, g->world_size) + (uint32_t)(next(r) % 2);
        g->prev.peer_id = next(r);
        rand_str(r, g->prev.addr);
        g->next.peer_id = next(r);
        rand_str(r, g->next.addr);
        if (next(r) % 2) {
            g->root_parent.peer_id = next(r);
            rand_str(r, g->root_parent.addr);
        }
        g->root_child[0] = next(r) % 2 ? next(r) : 0;
        g->root_child[1] = g->root_child[0] && next(r) % 2 ? next(r) : 0;
        g->handles = handle_store;
        for (uint32_t i = 0; i < g->n; i++) handle_store[i] = (uint32_t)next(r);
        break;
    }
    case ECCL_MSG_RING_READY:
    case ECCL_MSG_TOPO_DONE:
    case ECCL_MSG_VIEW_QUERY:
        m->u.epoch.epoch = (uint32_t)next(r);
        break;
    case ECCL_MSG_COLL_DONE:
        m->u.coll.tag = next(r);
        m->u.coll.epoch = (uint32_t)next(r);
        m->u.coll.count = next(r);
        m->u.coll.dtype = (uint8_t)below(r, ECCL_DTYPE_COUNT);
        m->u.coll.op = (uint8_t)below(r, ECCL_OP_COUNT);
        m->u.coll.result = (uint32_t)next(r);
        break;
    case ECCL_MSG_VIEW_REPORT:
    case ECCL_MSG_VIEW_DECIDE:
        m->u.view.epoch = (uint32_t)next(r);
        m->u.view.n_ops = below(r, 64) == 0 ? below(r, ECCL_WIRE_MAX_OPS + 1) : below(r, 16);
        for (uint32_t i = 0; i < m->u.view.n_ops; i++) {
            view_store[i].tag = next(r);
            view_store[i].flag = (uint8_t)below(r, 2);
        }
        break;
    case ECCL_MSG_KICK:
        m->u.kick.reason = (uint32_t)next(r);
        break;
    case ECCL_MSG_TRACE_ASK:
        m->u.trace_ask.tag = next(r);
        m->u.trace_ask.epoch = (uint32_t)next(r);
        m->u.trace_ask.result = (uint32_t)next(r);
        break;
    case ECCL_MSG_REPAIR_ASK:
    case ECCL_MSG_REPAIR_DATA:
    case ECCL_MSG_REPAIR_PUT:
        m->u.repair.epoch = (uint32_t)next(r);
        m->u.repair.tag = next(r);
        m->u.repair.len = type == ECCL_MSG_REPAIR_ASK ? 0 : below(r, ECCL_WIRE_MAX_REPAIR + 1);
        m->u.repair.bytes = m->u.repair.len ? repair_store : NULL;
        for (uint32_t i = 0; i < m->u.repair.len; i++) repair_store[i] = (uint8_t)next(r);
        break;
    case ECCL_MSG_LEAVE_DONE:
        m->u.leave_done.result = (uint32_t)next(r);
        break;
    case ECCL_MSG_P2P_HELLO:
        m->u.hello.peer_id = next(r);
        m->u.hello.peer_group = (uint32_t)next(r);
        m->u.hello.epoch = (uint32_t)next(r);
        m->u.hello.purpose = (uint32_t)below(r, ECCL_LINK_LAST + 1);
        m->u.hello.pool = 0;
        m->u.hello.pool_size = 1;
        if (m->u.hello.purpose == ECCL_LINK_RING && below(r, 2)) {
            m->u.hello.pool_size = 2 + below(r, ECCL_WIRE_MAX_POOL - 1);
            m->u.hello.pool = below(r, m->u.hello.pool_size);
        }
        /* Only a PEER link names its rank; the others decode it as 0. */
        m->u.hello.rank = m->u.hello.purpose == ECCL_LINK_PEER ? (uint32_t)next(r) : 0;
        break;
    case ECCL_MSG_SYNC_REQ:
        m->u.sync_req.seq = (uint32_t)next(r);
        m->u.sync_req.revision = next(r);
        m->u.sync_req.strategy = (uint8_t)below(r, 3);
        m->u.sync_req.hash_type = (uint8_t)(1 + below(r, 2));
        m->u.sync_req.n_keys = below(r, 16);
        for (uint32_t i = 0; i < m->u.sync_req.n_keys; i++) {
            sync_key_name(key_store[i].key, i * 7, 3 + below(r, ECCL_WIRE_MAX_KEY - 2));
            key_store[i].bytes = next(r);
            key_store[i].hash = next(r);
            key_store[i].dtype = (uint8_t)below(r, ECCL_DTYPE_COUNT);
        }
        break;
    case ECCL_MSG_SYNC_PLAN:
        m->u.sync_plan.seq = (uint32_t)next(r);
        m->u.sync_plan.round = (uint32_t)next(r);
        m->u.sync_plan.revision = next(r);
        m->u.sync_plan.n_src = 1 + below(r, 8);
        m->u.sync_plan.n_fetch = below(r, 16);
        for (uint32_t i = 0, key = 0; i < m->u.sync_plan.n_fetch; i++) {
            key += 1 + below(r, 20);
            fetch_store[i] = (eccl_wire_sync_fetch){key, below(r, m->u.sync_plan.n_src), next(r)};
        }
        for (uint32_t i = 0; i < m->u.sync_plan.n_src; i++) {
            src_store[i].peer_id = next(r);
            rand_str(r, src_store[i].addr);
        }
        break;
    case ECCL_MSG_SYNC_REPORT:
    case ECCL_MSG_SYNC_DONE:
        m->u.sync_result.seq = (uint32_t)next(r);
        m->u.sync_result.result = (uint32_t)next(r);
        m->u.sync_result.revision = next(r);
        break;
    case ECCL_MSG_SYNC_FETCH:
        m->u.sync_fetch.round = (uint32_t)next(r);
        m->u.sync_fetch.id = (uint32_t)next(r);
        m->u.sync_fetch.bytes = next(r);
        rand_str(r, m->u.sync_fetch.key);
        if (!m->u.sync_fetch.key[0]) m->u.sync_fetch.key[0] = 'k';
        break;
    case ECCL_MSG_OPT_REQ:
        m->u.opt_req = (eccl_msg_opt_req){(uint32_t)next(r), (uint32_t)next(r), (uint32_t)next(r),
                                          (uint32_t)next(r)};
        break;
    case ECCL_MSG_OPT_PROBE:
        m->u.opt_probe.seq = (uint32_t)next(r);
        m->u.opt_probe.round = (uint32_t)next(r);
        m->u.opt_probe.probe_ms = (uint32_t)next(r);
        m->u.opt_probe.probe_conns = (uint32_t)next(r);
        m->u.opt_probe.target.peer_id = next(r);
        rand_str(r, m->u.opt_probe.target.addr);
        break;
    case ECCL_MSG_OPT_BW:
        m->u.opt_bw = (eccl_msg_opt_bw){(uint32_t)next(r), (uint32_t)next(r), (uint32_t)next(r),
                                        next(r), next(r), next(r)};
        break;
    case ECCL_MSG_OPT_DONE:
        m->u.opt_done = (eccl_msg_opt_done){(uint32_t)next(r), (uint32_t)next(r), (uint32_t)next(r),
                                            (uint8_t)below(r, 2), (uint8_t)below(r, 2),
                                            (uint8_t)below(r, 2), (uint32_t)next(r),
                                            (uint32_t)next(r), next(r), next(r)};
        break;
    case ECCL_MSG_PEER_QUERY: {
        /* Sorted and unique: every step is at least 1, and a start below
         * `step` plus 256 steps below it stay under 257 * step, so no rank
         * wraps. Half the steps are short, for runs of neighbours. */
        const uint32_t step = UINT32_MAX / (ECCL_WIRE_MAX_PEER_REFS + 1);
        m->u.peer_query.epoch = (uint32_t)next(r);
        m->u.peer_query.n = below(r, 16) == 0 ? below(r, ECCL_WIRE_MAX_PEER_REFS + 1) : below(r, 8);
        uint32_t rank = below(r, step);
        for (uint32_t i = 0; i < m->u.peer_query.n; i++) {
            rank_store[i] = rank;
            rank += 1 + (below(r, 2) ? below(r, 4) : below(r, step - 1));
        }
        break;
    }
    case ECCL_MSG_PEER_REPLY:
        m->u.peer_reply.epoch = (uint32_t)next(r);
        m->u.peer_reply.n = below(r, 16) == 0 ? below(r, ECCL_WIRE_MAX_PEER_REFS + 1) : below(r, 8);
        for (uint32_t i = 0; i < m->u.peer_reply.n; i++) {
            entry_store[i].rank = (uint32_t)next(r);
            entry_store[i].ref.peer_id = next(r);
            rand_str(r, entry_store[i].ref.addr);
        }
        break;
    default:
        break;
    }
}

/* Full round trip plus every length-based rejection for one valid message:
 * the frame is exact, each shorter cap fails, each payload prefix and one
 * trailing byte are rejected. Returns the frame size. */
static size_t check_message(const eccl_msg *m, uint8_t *frame, arena *a)
{
    size_t n = eccl_wire_encode(m, frame, FRAME_CAP);
    assert_true(n >= ECCL_WIRE_HEADER_SIZE);

    eccl_wire_header h;
    assert_int_equal(eccl_wire_header_decode(frame, &h), ECCL_OK);
    assert_int_equal(h.type, m->type);
    assert_int_equal(h.length, n - ECCL_WIRE_HEADER_SIZE);
    assert_true(h.length <= eccl_wire_max_length(m->type));

    const uint8_t *payload = frame + ECCL_WIRE_HEADER_SIZE;
    eccl_msg *d = new_msg(0);
    assert_int_equal(decode_tail(a, h.type, payload, h.length, d), ECCL_OK);
    assert_msg_equal(m, d);

    uint8_t *again = malloc(FRAME_CAP);
    assert_non_null(again);
    assert_int_equal(eccl_wire_encode(d, again, FRAME_CAP), n);
    assert_memory_equal(frame, again, n);

    /* A cap one short must fail cleanly; smaller caps take the same path. */
    for (size_t cap = n; cap-- > 0 && cap + 64 >= n;)
        assert_int_equal(eccl_wire_encode(m, again, cap), 0);
    assert_int_equal(eccl_wire_encode(m, again, 0), 0);

    for (uint32_t p = 0; p < h.length; p++)
        assert_int_equal(decode_tail(a, h.type, payload, p, d), ECCL_ERR_PROTOCOL);

    memcpy(again, payload, h.length);
    again[h.length] = 0;
    assert_int_equal(decode_tail(a, h.type, again, h.length + 1, d), ECCL_ERR_PROTOCOL);

    free(again);
    free(d);
    return n;
}

/* ---- tests --------------------------------------------------------------- */

static void test_max_length(void **state)
{
    (void)state;
    const struct {
        uint16_t type;
        uint32_t max;
    } want[] = {
        {ECCL_MSG_REGISTER, 8 + 2 + ECCL_WIRE_MAX_ADDR},
        {ECCL_MSG_HEARTBEAT, 0},
        {ECCL_MSG_PENDING_QUERY, 0},
        {ECCL_MSG_TOPO_VOTE, 0},
        {ECCL_MSG_LEAVE, 0},
        {ECCL_MSG_LEAVE_DONE, 4},
        {ECCL_MSG_RING_READY, 4},
        {ECCL_MSG_COLL_DONE, 26},
        {ECCL_MSG_VIEW_REPORT, 8 + ECCL_WIRE_MAX_OPS * 9},
        {ECCL_MSG_WELCOME, 12},
        {ECCL_MSG_PENDING_REPLY, 4},
        {ECCL_MSG_RING, 16 + 3 * (8 + 2 + ECCL_WIRE_MAX_ADDR) + ECCL_WIRE_TREE_CHILDREN * 8 + 8},
        {ECCL_MSG_RING_SEG, 24 + 3 * (8 + 2 + ECCL_WIRE_MAX_ADDR) + 16 + 4 + ECCL_WIRE_MAX_SEG * 4},
        {ECCL_MSG_TOPO_DONE, 4},
        {ECCL_MSG_VIEW_QUERY, 4},
        {ECCL_MSG_VIEW_DECIDE, 8 + ECCL_WIRE_MAX_OPS * 9},
        {ECCL_MSG_KICK, 4},
        {ECCL_MSG_REPAIR_ASK, 16},
        {ECCL_MSG_TRACE_ASK, 16},
        {ECCL_MSG_REPAIR_DATA, 16 + ECCL_WIRE_MAX_REPAIR},
        {ECCL_MSG_REPAIR_PUT, 16 + ECCL_WIRE_MAX_REPAIR},
        {ECCL_MSG_P2P_HELLO, 28},
        {ECCL_MSG_DATA, ECCL_WIRE_MAX_DATA},
        {ECCL_MSG_SYNC_REQ, 18 + ECCL_WIRE_MAX_SYNC_KEYS * (2 + ECCL_WIRE_MAX_KEY + 17)},
        {ECCL_MSG_SYNC_PLAN, 28 + ECCL_WIRE_MAX_SYNC_KEYS * 16 +
                                 ECCL_WIRE_MAX_SYNC_SRCS * (8 + 2 + ECCL_WIRE_MAX_ADDR)},
        {ECCL_MSG_SYNC_REPORT, 16},
        {ECCL_MSG_SYNC_DONE, 16},
        {ECCL_MSG_SYNC_FETCH, 16 + 2 + ECCL_WIRE_MAX_KEY},
        {ECCL_MSG_OPT_REQ, 16},
        {ECCL_MSG_OPT_BW, 36},
        {ECCL_MSG_OPT_PROBE, 16 + 8 + 2 + ECCL_WIRE_MAX_ADDR},
        {ECCL_MSG_OPT_DONE, 39},
        {ECCL_MSG_PEER_QUERY, 8 + ECCL_WIRE_MAX_PEER_REFS * 4},
        {ECCL_MSG_PEER_REPLY, 8 + ECCL_WIRE_MAX_PEER_REFS * (4 + 8 + 2 + ECCL_WIRE_MAX_ADDR)},
        {ECCL_MSG_REGISTER_SEG, 12 + (ECCL_WIRE_REGISTER_SEG_BOUND - 12) / (2 + ECCL_WIRE_MAX_ADDR) * (2 + ECCL_WIRE_MAX_ADDR)},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        assert_int_equal(eccl_wire_max_length(want[i].type), want[i].max);
        if (want[i].type != ECCL_MSG_DATA)
            assert_true(want[i].max <= ECCL_WIRE_MAX_CONTROL);
    }
    for (size_t i = 0; i < N_UNKNOWN; i++)
        assert_int_equal(eccl_wire_max_length(unknown_types[i]), 0);
}

static void test_roundtrip_extremes(void **state)
{
    (void)state;
    uint8_t *frame = malloc(FRAME_CAP);
    eccl_msg *m = new_msg(0);
    arena a = arena_new(FRAME_CAP);
    for (size_t i = 0; i < N_CONTROL; i++) {
        fill_extreme(m, control_types[i], 0);
        check_message(m, frame, &a);
        fill_extreme(m, control_types[i], 1);
        size_t n = check_message(m, frame, &a);
        /* The maximal message is exactly as long as the advertised bound. */
        assert_int_equal(n - ECCL_WIRE_HEADER_SIZE, eccl_wire_max_length(control_types[i]));
    }
    free(a.base);
    free(m);
    free(frame);
}

static void test_golden_bytes(void **state)
{
    (void)state;
    eccl_msg *m = new_msg(ECCL_MSG_REGISTER);
    m->u.reg.peer_group = 0x0A0B0C0D;
    m->u.reg.peer_timeout_ms = 5000;
    strcpy(m->u.reg.p2p_addr, "h:1");
    uint8_t frame[64];
    static const uint8_t want[] = {
        'E', 'C', 'C', 'L', 8, 0, 1, 0, 13, 0, 0, 0, 0, 0, 0, 0,
        0x0D, 0x0C, 0x0B, 0x0A, 0x88, 0x13, 0, 0, 3, 0, 'h', ':', '1',
    };
    assert_int_equal(eccl_wire_encode(m, frame, sizeof(frame)), sizeof(want));
    assert_memory_equal(frame, want, sizeof(want));

    m->type = ECCL_MSG_COLL_DONE;
    m->u.coll = (eccl_msg_coll){0x0102030405060708ull, 0x11121314u,
                                0x2122232425262728ull, ECCL_F32, ECCL_MAX, 6};
    static const uint8_t coll[] = {
        8, 7, 6, 5, 4, 3, 2, 1, 0x14, 0x13, 0x12, 0x11,
        0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21, ECCL_F32, ECCL_MAX, 6, 0, 0, 0,
    };
    assert_int_equal(eccl_wire_encode(m, frame, sizeof(frame)), 16 + sizeof(coll));
    assert_int_equal(frame[6], ECCL_MSG_COLL_DONE);
    assert_int_equal(frame[8], sizeof(coll));
    assert_memory_equal(frame + 16, coll, sizeof(coll));

    /* The address book. A query: u32 epoch, u32 n, n u32 ranks. */
    const uint32_t ranks[] = {0, 0x0100, 0xA0B0C0D0u};
    memset(m, 0, sizeof *m);
    m->type = ECCL_MSG_PEER_QUERY;
    m->u.peer_query = (eccl_msg_peer_query){.epoch = 0x01020304u, .n = 3, .ranks = ranks};
    static const uint8_t query[] = {
        'E', 'C', 'C', 'L', 8, 0, 13, 0, 20, 0, 0, 0, 0, 0, 0, 0,
        4, 3, 2, 1, 3, 0, 0, 0,
        0, 0, 0, 0, 0, 1, 0, 0, 0xD0, 0xC0, 0xB0, 0xA0,
    };
    assert_int_equal(eccl_wire_encode(m, frame, sizeof(frame)), sizeof(query));
    assert_memory_equal(frame, query, sizeof(query));

    /* A reply: u32 epoch, u32 n, then per entry u32 rank and a peer ref
     * (u64 id, u16 address length, the address without NUL). */
    const eccl_wire_peer_entry entries[] = {{2, {0x1122334455667788ull, "h:1"}}, {0x0105, {9, ""}}};
    memset(m, 0, sizeof *m);
    m->type = ECCL_MSG_PEER_REPLY;
    m->u.peer_reply = (eccl_msg_peer_reply){.epoch = 7, .n = 2, .entries = entries};
    static const uint8_t reply[] = {
        'E', 'C', 'C', 'L', 8, 0, 43, 0, 39, 0, 0, 0, 0, 0, 0, 0,
        7, 0, 0, 0, 2, 0, 0, 0,
        2, 0, 0, 0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 3, 0, 'h', ':', '1',
        5, 1, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    };
    assert_int_equal(eccl_wire_encode(m, frame, sizeof(frame)), sizeof(reply));
    assert_memory_equal(frame, reply, sizeof(reply));

    /* A PEER link's hello: the 20-byte hello, then the sender's rank. */
    memset(m, 0, sizeof *m);
    m->type = ECCL_MSG_P2P_HELLO;
    m->u.hello = (eccl_msg_p2p_hello){.peer_id = 0x0102030405060708ull, .peer_group = 0x11121314u,
                                      .epoch = 0x21222324u, .purpose = ECCL_LINK_PEER,
                                      .pool_size = 1, .rank = 0x31323334u};
    static const uint8_t hello[] = {
        'E', 'C', 'C', 'L', 8, 0, 64, 0, 24, 0, 0, 0, 0, 0, 0, 0,
        8, 7, 6, 5, 4, 3, 2, 1, 0x14, 0x13, 0x12, 0x11, 0x24, 0x23, 0x22, 0x21,
        ECCL_LINK_PEER, 0, 0, 0, 0x34, 0x33, 0x32, 0x31,
    };
    assert_int_equal(eccl_wire_encode(m, frame, sizeof(frame)), sizeof(hello));
    assert_memory_equal(frame, hello, sizeof(hello));
    free(m);
}

static void test_empty_payloads(void **state)
{
    (void)state;
    eccl_msg m;
    const uint8_t one = 0;
    uint16_t empty[] = {ECCL_MSG_HEARTBEAT, ECCL_MSG_PENDING_QUERY, ECCL_MSG_TOPO_VOTE,
                        ECCL_MSG_LEAVE};
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++) {
        /* No byte may be touched, so a NULL payload of length 0 is fine. */
        assert_int_equal(eccl_wire_decode(empty[i], NULL, 0, &m), ECCL_OK);
        assert_int_equal(m.type, empty[i]);
        assert_int_equal(eccl_wire_decode(empty[i], &one, 1, &m), ECCL_ERR_PROTOCOL);
    }
}

static void test_header_rejects(void **state)
{
    (void)state;
    uint8_t good[ECCL_WIRE_HEADER_SIZE], bad[ECCL_WIRE_HEADER_SIZE];
    eccl_wire_header h;
    eccl_wire_header_encode(ECCL_MSG_RING, 40, good);
    assert_int_equal(eccl_wire_header_decode(good, &h), ECCL_OK);
    assert_int_equal(h.magic, ECCL_WIRE_MAGIC);
    assert_int_equal(h.version, ECCL_WIRE_VERSION);
    assert_int_equal(h.type, ECCL_MSG_RING);
    assert_int_equal(h.length, 40);
    assert_int_equal(h.reserved, 0);
    assert_memory_equal(good, "ECCL\x08\x00\x22\x00\x28\x00\x00\x00\x00\x00\x00\x00", 16);

    for (size_t byte = 0; byte < 4; byte++) { /* magic */
        memcpy(bad, good, sizeof(bad));
        bad[byte] ^= 0x20;
        assert_int_equal(eccl_wire_header_decode(bad, &h), ECCL_ERR_PROTOCOL);
    }
    const uint16_t versions[] = {0, 7, 9, 0xFFFF}; /* 7: repairs of at most 32 KiB */
    for (size_t i = 0; i < 4; i++) {
        memcpy(bad, good, sizeof(bad));
        bad[4] = (uint8_t)versions[i];
        bad[5] = (uint8_t)(versions[i] >> 8);
        assert_int_equal(eccl_wire_header_decode(bad, &h), ECCL_ERR_PROTOCOL);
    }
    for (size_t i = 0; i < N_UNKNOWN; i++) {
        eccl_wire_header_encode(unknown_types[i], 0, bad);
        assert_int_equal(eccl_wire_header_decode(bad, &h), ECCL_ERR_PROTOCOL);
    }
    for (size_t byte = 12; byte < 16; byte++) { /* reserved */
        memcpy(bad, good, sizeof(bad));
        bad[byte] = 1;
        assert_int_equal(eccl_wire_header_decode(bad, &h), ECCL_ERR_PROTOCOL);
    }

    /* Length: the bound itself is fine, one more is not, for every type. */
    uint16_t all[N_CONTROL + 1];
    memcpy(all, control_types, sizeof(control_types));
    all[N_CONTROL] = ECCL_MSG_DATA;
    for (size_t i = 0; i < N_CONTROL + 1; i++) {
        uint32_t max = eccl_wire_max_length(all[i]);
        eccl_wire_header_encode(all[i], max, bad);
        assert_int_equal(eccl_wire_header_decode(bad, &h), ECCL_OK);
        eccl_wire_header_encode(all[i], max + 1, bad);
        assert_int_equal(eccl_wire_header_decode(bad, &h), ECCL_ERR_PROTOCOL);
        eccl_wire_header_encode(all[i], UINT32_MAX, bad);
        assert_int_equal(eccl_wire_header_decode(bad, &h), ECCL_ERR_PROTOCOL);
    }
}

static void test_encode_rejects(void **state)
{
    (void)state;
    uint8_t *frame = malloc(FRAME_CAP);
    eccl_msg *m = new_msg(0);

    m->type = ECCL_MSG_DATA;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    for (size_t i = 0; i < N_UNKNOWN; i++) {
        m->type = unknown_types[i];
        assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    }

    /* A string filling its whole array has no NUL: one byte over the bound. */
    fill_extreme(m, ECCL_MSG_REGISTER, 1);
    memset(m->u.reg.p2p_addr, 'x', ECCL_ADDR_MAX);
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    fill_extreme(m, ECCL_MSG_RING, 1);
    memset(m->u.ring.prev.addr, 'x', ECCL_ADDR_MAX);
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);

    /* REGISTER_SEG: none, too many, an address over the bound, or both
     * lists. */
    fill_extreme(m, ECCL_MSG_REGISTER_SEG, 0);
    m->u.register_seg.n = 0;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.register_seg.n = ECCL_WIRE_MAX_SEG + 1;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.register_seg.n = 1;
    memset(addr_store[0], 'x', ECCL_ADDR_MAX); /* no NUL: 64 bytes */
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    fill_extreme(m, ECCL_MSG_REGISTER_SEG, 1);
    m->u.register_seg.n++; /* one more long address: past its bound */
    addr_ptrs[m->u.register_seg.n - 1] = addr_store[0];
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    fill_extreme(m, ECCL_MSG_REGISTER_SEG, 0);
    m->u.register_seg.packed = (const uint8_t *)"";
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);

    /* RING_SEG: a run out of the world, too long, or without handles. */
    fill_extreme(m, ECCL_MSG_RING_SEG, 1);
    assert_true(eccl_wire_encode(m, frame, FRAME_CAP) > 0);
    m->u.ring_seg.first_rank++;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    fill_extreme(m, ECCL_MSG_RING_SEG, 1);
    m->u.ring_seg.n = ECCL_WIRE_MAX_SEG + 1;
    m->u.ring_seg.first_rank--;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    fill_extreme(m, ECCL_MSG_RING_SEG, 0);
    m->u.ring_seg.handles = NULL;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.ring_seg.handles = handle_store;
    m->u.ring_seg.n = 0;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);

    /* Repairs: over the bound, bytes missing, an ASK with bytes. */
    fill_extreme(m, ECCL_MSG_REPAIR_PUT, 1);
    m->u.repair.len = ECCL_WIRE_MAX_REPAIR + 1;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.repair.len = 1;
    m->u.repair.bytes = NULL;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    fill_extreme(m, ECCL_MSG_REPAIR_ASK, 0);
    m->u.repair.len = 1;
    m->u.repair.bytes = repair_store;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);

    fill_extreme(m, ECCL_MSG_RING, 0);
    m->u.ring.world_size = 0;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.ring.world_size = 4;
    m->u.ring.rank = 4;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.ring.rank = 3;
    assert_int_not_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    /* local_size: 0 or L >= 2 with world = L x H, H >= 2; both ends refuse
     * anything else (a decoder sees the same check: patch a good frame). */
    m->u.ring.local_size = 2;
    int good = eccl_wire_encode(m, frame, FRAME_CAP);
    assert_int_not_equal(good, 0);
    static const uint32_t bad_local[] = {1, 3, 4, 5, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad_local / sizeof *bad_local; i++) {
        m->u.ring.local_size = bad_local[i];
        assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    }
    m->u.ring.local_size = 2;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), good);
    {
        eccl_wire_header h;
        eccl_msg *back = new_msg(0);
        assert_int_equal(eccl_wire_header_decode(frame, &h), ECCL_OK);
        assert_int_equal(eccl_wire_decode(h.type, frame + ECCL_WIRE_HEADER_SIZE, h.length, back), ECCL_OK);
        assert_int_equal(back->u.ring.local_size, 2);
        for (size_t i = 0; i < sizeof bad_local / sizeof *bad_local; i++) {
            uint32_t v = bad_local[i];
            uint8_t *at = frame + good - 8; /* local_size: before host_ranks, little-endian */
            at[0] = (uint8_t)v, at[1] = (uint8_t)(v >> 8), at[2] = (uint8_t)(v >> 16), at[3] = (uint8_t)(v >> 24);
            assert_int_equal(eccl_wire_decode(h.type, frame + ECCL_WIRE_HEADER_SIZE, h.length, back),
                             ECCL_ERR_PROTOCOL);
        }
        free(back);
    }
    m->u.ring.local_size = 0;
    /* host_ranks: at most the world (0: not told); both ends refuse more. */
    m->u.ring.host_ranks = 4;
    good = eccl_wire_encode(m, frame, FRAME_CAP);
    assert_int_not_equal(good, 0);
    m->u.ring.host_ranks = 5;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.ring.host_ranks = 4;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), good);
    {
        eccl_wire_header h;
        eccl_msg *back = new_msg(0);
        assert_int_equal(eccl_wire_header_decode(frame, &h), ECCL_OK);
        assert_int_equal(eccl_wire_decode(h.type, frame + ECCL_WIRE_HEADER_SIZE, h.length, back), ECCL_OK);
        assert_int_equal(back->u.ring.host_ranks, 4);
        frame[good - 4] = 5; /* host_ranks: the last field, little-endian */
        assert_int_equal(eccl_wire_decode(h.type, frame + ECCL_WIRE_HEADER_SIZE, h.length, back), ECCL_ERR_PROTOCOL);
        free(back);
    }
    m->u.ring.host_ranks = 0;

    /* A hello: a pool index without a pool, a pool on a tree link, an
     * index outside the pool, a pool over the bound, a purpose that
     * smuggles the pool flag. A pool of one is the plain hello. */
    fill_extreme(m, ECCL_MSG_P2P_HELLO, 1);
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 16 + 28);
    m->u.hello.pool_size = 1;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.hello.pool = 0;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 16 + 20);
    m->u.hello.pool_size = 0;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 16 + 20);
    m->u.hello.pool_size = 2;
    m->u.hello.purpose = ECCL_LINK_TREE;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.hello.purpose = ECCL_LINK_RING;
    m->u.hello.pool = 2;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.hello.pool = 0;
    m->u.hello.pool_size = ECCL_WIRE_MAX_POOL + 1;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.hello.pool_size = 1;
    m->u.hello.purpose = ECCL_LINK_RING | ECCL_WIRE_HELLO_POOL;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    /* A PEER link carries its rank (24 bytes), and has no pool either. */
    m->u.hello.purpose = ECCL_LINK_PEER;
    m->u.hello.rank = 5;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 16 + 24);
    m->u.hello.pool_size = 2;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);

    fill_extreme(m, ECCL_MSG_COLL_DONE, 0);
    m->u.coll.dtype = ECCL_DTYPE_COUNT;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.coll.dtype = 0;
    m->u.coll.op = ECCL_OP_COUNT;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);

    fill_extreme(m, ECCL_MSG_VIEW_DECIDE, 1);
    m->u.view.n_ops = ECCL_WIRE_MAX_OPS + 1;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.view.n_ops = UINT32_MAX;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.view.n_ops = ECCL_WIRE_MAX_OPS;
    view_store[ECCL_WIRE_MAX_OPS - 1].flag = 2;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->type = ECCL_MSG_VIEW_REPORT; /* a receiving party's report may say so */
    assert_int_not_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    view_store[ECCL_WIRE_MAX_OPS - 1].flag = ECCL_VIEW_HELD | ECCL_VIEW_SOURCE;
    assert_int_not_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    view_store[ECCL_WIRE_MAX_OPS - 1].flag = 16;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->type = ECCL_MSG_VIEW_DECIDE;
    view_store[ECCL_WIRE_MAX_OPS - 1].flag = 1;
    assert_int_not_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    /* Entries need exactly one source: neither, or both, is refused. */
    m->u.view.ops = NULL;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.view.ops = view_store;
    m->u.view.packed = frame + 512;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    /* An empty list needs neither. */
    m->u.view.n_ops = 0;
    m->u.view.ops = NULL;
    m->u.view.packed = NULL;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), ECCL_WIRE_HEADER_SIZE + 8);

    free(m);
    free(frame);
}

/* Byte-level builders for payloads the encoder refuses to produce. */
static size_t le(uint8_t *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return n;
}

static size_t raw_str(uint8_t *p, uint16_t len, uint8_t c)
{
    le(p, len, 2);
    memset(p + 2, c, len);
    return 2u + len;
}

/* A RING payload (group 7, epoch 1, world 2, rank 1) whose next address
 * has `next_len` bytes; returns its length. */
static size_t ring_frame(uint8_t *buf, size_t next_len)
{
    size_t n = le(buf, 7, 4) + le(buf + 4, 1, 4) + le(buf + 8, 2, 4) + le(buf + 12, 1, 4);
    n += le(buf + n, 5, 8);
    n += raw_str(buf + n, next_len, 'n');
    n += le(buf + n, 6, 8);
    n += raw_str(buf + n, 0, 0);
    n += le(buf + n, 7, 8); /* tree parent */
    n += raw_str(buf + n, 0, 0);
    n += le(buf + n, 8, 8); /* tree children */
    n += le(buf + n, 9, 8);
    n += le(buf + n, 10, 8);
    n += le(buf + n, 0, 8);
    n += le(buf + n, 0, 4); /* local_size: not host-regular */
    n += le(buf + n, 0, 4); /* host_ranks: not told */
    return n;
}

/* A RING_SEG payload of `n` handles 100, 101, ... from first_rank on in a
 * world of `world`, not host-regular, refs with empty addresses. */
static size_t ring_seg_frame(uint8_t *buf, uint32_t world, uint32_t first_rank, uint32_t n)
{
    size_t at = le(buf, 7, 4) + le(buf + 4, 1, 4) + le(buf + 8, world, 4) + le(buf + 12, first_rank, 4);
    at += le(buf + at, 0, 4) + le(buf + at + 4, 0, 4); /* local_size, host_ranks */
    for (int k = 0; k < 3; k++) {
        at += le(buf + at, 5u + (unsigned)k, 8);
        at += raw_str(buf + at, 0, 0);
    }
    at += le(buf + at, 0, 8) + le(buf + at + 8, 0, 8); /* root children */
    at += le(buf + at, n, 4);
    for (uint32_t i = 0; i < n; i++) at += le(buf + at, 100 + i, 4);
    return at;
}

/* Shared-state messages: everything a decoder must refuse beyond lengths. */
static void test_sync_rejects(void **state)
{
    (void)state;
    uint8_t *frame = malloc(FRAME_CAP), *bad = malloc(FRAME_CAP);
    eccl_msg *m = new_msg(0), *d = new_msg(0);
    arena a = arena_new(FRAME_CAP);
    assert_non_null(frame);
    assert_non_null(bad);

    /* SYNC_REQ with keys "a", "b": 18-byte head, then 20 bytes per key. */
    eccl_wire_sync_key keys[2] = {{"a", 8, 1, ECCL_F32}, {"b", 4, 2, ECCL_U8}};
    m->type = ECCL_MSG_SYNC_REQ;
    m->u.sync_req = (eccl_msg_sync_req){.seq = 1, .revision = 2, .strategy = 1, .hash_type = 1,
                                        .n_keys = 2, .keys = keys};
    /* The length is a constant, not n: the corruptions below copy len - 21
     * bytes, and a length the compiler can only bound by FRAME_CAP is a
     * buffer overrun waiting for an encoder change (gcc -O3 says as much). */
    enum { len = 18 + 2 * 20 };
    size_t n = eccl_wire_encode(m, frame, FRAME_CAP);
    assert_int_equal(n, ECCL_WIRE_HEADER_SIZE + len);
    const uint8_t *pl = frame + ECCL_WIRE_HEADER_SIZE;
    assert_int_equal(decode_tail(&a, ECCL_MSG_SYNC_REQ, pl, len, d), ECCL_OK);
    const struct {
        size_t at;
        uint8_t v;
    } req_bad[] = {
        {12, 3},                    /* strategy */
        {13, 0}, {13, 3},           /* hash type */
        {14, 3},                    /* count over the keys present */
        {15, 2},                    /* count over the bound */
        {18 + 20 + 2, 'a'},         /* duplicate key */
        {18 + 20 + 2, '0'},         /* unsorted */
        {18 + 2, 0},                /* embedded NUL */
        {18 + 19, ECCL_DTYPE_COUNT} /* dtype */
    };
    for (size_t i = 0; i < sizeof req_bad / sizeof req_bad[0]; i++) {
        memcpy(bad, pl, len);
        bad[req_bad[i].at] = req_bad[i].v;
        assert_int_equal(decode_tail(&a, ECCL_MSG_SYNC_REQ, bad, len, d), ECCL_ERR_PROTOCOL);
    }
    /* An empty key: length 0, the rest shifted. */
    memcpy(bad, pl, 18);
    bad[18] = 0;
    bad[19] = 0;
    memcpy(bad + 20, pl + 18 + 3, len - 18 - 3);
    assert_int_equal(decode_tail(&a, ECCL_MSG_SYNC_REQ, bad, len - 1, d), ECCL_ERR_PROTOCOL);
    /* The encoder refuses what the decoder would. */
    eccl_wire_sync_key swapped[2] = {keys[1], keys[0]};
    m->u.sync_req.keys = swapped;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.sync_req.keys = keys;
    m->u.sync_req.hash_type = 0;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.sync_req.hash_type = 1;
    m->u.sync_req.n_keys = ECCL_WIRE_MAX_SYNC_KEYS + 1;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);

    /* SYNC_PLAN: two fetches from one source. Head 28, fetches 16 each. */
    eccl_wire_sync_fetch f[2] = {{0, 0, 5}, {3, 0, 6}};
    eccl_wire_peer_ref src = {9, "127.0.0.1:1"};
    memset(m, 0, sizeof *m);
    m->type = ECCL_MSG_SYNC_PLAN;
    m->u.sync_plan = (eccl_msg_sync_plan){.seq = 1, .round = 2, .revision = 3, .n_fetch = 2,
                                          .n_src = 1, .fetch = f, .src = &src};
    n = eccl_wire_encode(m, frame, FRAME_CAP);
    assert_true(n > 0);
    uint32_t plan_len = (uint32_t)(n - ECCL_WIRE_HEADER_SIZE);
    assert_int_equal(decode_tail(&a, ECCL_MSG_SYNC_PLAN, pl, plan_len, d), ECCL_OK);
    const struct {
        size_t at;
        uint8_t v;
    } plan_bad[] = {
        {4, ECCL_ERR_PEER_LOST}, /* an error with lists */
        {20, 0x01},              /* n_fetch 0x101: over the bound */
        {24, 0}, {25, 1},        /* no sources / over the bound */
        {28 + 16 + 0, 0},        /* second key == first: not ascending */
        {28 + 16 + 4, 1},        /* source index 1 of 1 */
    };
    for (size_t i = 0; i < sizeof plan_bad / sizeof plan_bad[0]; i++) {
        memcpy(bad, pl, plan_len);
        if (plan_bad[i].at == 20) bad[21] = 1;
        else bad[plan_bad[i].at] = plan_bad[i].v;
        assert_int_equal(decode_tail(&a, ECCL_MSG_SYNC_PLAN, bad, plan_len, d), ECCL_ERR_PROTOCOL);
    }
    m->u.sync_plan.result = ECCL_ERR_TIMEOUT;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.sync_plan.result = ECCL_OK;
    f[1].src = 1;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);

    /* SYNC_FETCH: a key is never empty. */
    memset(m, 0, sizeof *m);
    m->type = ECCL_MSG_SYNC_FETCH;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    snprintf(m->u.sync_fetch.key, sizeof m->u.sync_fetch.key, "w");
    n = eccl_wire_encode(m, frame, FRAME_CAP);
    assert_int_equal(n, ECCL_WIRE_HEADER_SIZE + 16 + 3);
    memcpy(bad, pl, 16);
    bad[16] = bad[17] = 0;
    assert_int_equal(decode_tail(&a, ECCL_MSG_SYNC_FETCH, bad, 18, d), ECCL_ERR_PROTOCOL);

    /* DATA of the SYNC and PROBE phases are known phases; one past is not. */
    eccl_wire_data dd = {.phase = ECCL_PHASE_SYNC, .len = 0};
    uint8_t dh[ECCL_WIRE_DATA_HEADER_SIZE];
    eccl_wire_data_encode(&dd, dh);
    assert_int_equal(eccl_wire_data_decode(dh, ECCL_WIRE_DATA_HEADER_SIZE, &dd), ECCL_OK);
    dh[13] = ECCL_PHASE_PROBE;
    assert_int_equal(eccl_wire_data_decode(dh, ECCL_WIRE_DATA_HEADER_SIZE, &dd), ECCL_OK);
    dh[13] = ECCL_PHASE_LAST + 1;
    assert_int_equal(eccl_wire_data_decode(dh, ECCL_WIRE_DATA_HEADER_SIZE, &dd), ECCL_ERR_PROTOCOL);

    free(a.base);
    free(m);
    free(d);
    free(frame);
    free(bad);
}

static void test_decode_rejects(void **state)
{
    (void)state;
    uint8_t *buf = calloc(1, FRAME_CAP);
    eccl_msg *m = new_msg(0);
    arena a = arena_new(FRAME_CAP + 64);
    size_t n;

    assert_int_equal(decode_tail(&a, ECCL_MSG_DATA, buf, 32, m), ECCL_ERR_PROTOCOL);
    for (size_t i = 0; i < N_UNKNOWN; i++) {
        assert_int_equal(decode_tail(&a, unknown_types[i], buf, 0, m), ECCL_ERR_PROTOCOL);
        assert_int_equal(decode_tail(&a, unknown_types[i], buf, 16, m), ECCL_ERR_PROTOCOL);
    }
    /* Longer than the type's bound, even with a valid prefix. */
    for (size_t i = 0; i < N_CONTROL; i++) {
        uint32_t over = eccl_wire_max_length(control_types[i]) + 1;
        assert_int_equal(decode_tail(&a, control_types[i], buf, over, m), ECCL_ERR_PROTOCOL);
    }

    /* RING with a 64-byte next address still fits the RING bound, so only
     * the string check can catch it. */
    n = ring_frame(buf, ECCL_WIRE_MAX_ADDR + 1);
    assert_true(n <= eccl_wire_max_length(ECCL_MSG_RING));
    assert_int_equal(decode_tail(&a, ECCL_MSG_RING, buf, (uint32_t)n, m), ECCL_ERR_PROTOCOL);
    n = ring_frame(buf, ECCL_WIRE_MAX_ADDR);
    assert_int_equal(decode_tail(&a, ECCL_MSG_RING, buf, (uint32_t)n, m), ECCL_OK);
    assert_int_equal(strlen(m->u.ring.next.addr), ECCL_WIRE_MAX_ADDR);
    assert_int_equal(m->u.ring.prev.addr[0], '\0');
    assert_int_equal(m->u.ring.tree_child[1], 9);
    assert_int_equal(m->u.ring.tree_child[2], 10);
    assert_int_equal(m->u.ring.tree_child[3], 0);

    /* Semantic RING checks. */
    le(buf + 8, 0, 4);
    le(buf + 12, 0, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_RING, buf, (uint32_t)n, m), ECCL_ERR_PROTOCOL);
    le(buf + 8, 3, 4);
    le(buf + 12, 3, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_RING, buf, (uint32_t)n, m), ECCL_ERR_PROTOCOL);
    le(buf + 12, UINT32_MAX, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_RING, buf, (uint32_t)n, m), ECCL_ERR_PROTOCOL);

    /* RING_SEG: a run of 1..ECCL_WIRE_MAX_SEG ranks inside the world, and
     * exactly its handles. */
    n = ring_seg_frame(buf, 8, 6, 2);
    assert_int_equal(decode_tail(&a, ECCL_MSG_RING_SEG, buf, (uint32_t)n, m), ECCL_OK);
    assert_int_equal(m->u.ring_seg.n, 2);
    assert_int_equal(eccl_wire_ring_seg_handle(&m->u.ring_seg, 1), 101);
    assert_int_equal(decode_tail(&a, ECCL_MSG_RING_SEG, buf, (uint32_t)n - 4, m), ECCL_ERR_PROTOCOL);
    assert_int_equal(decode_tail(&a, ECCL_MSG_RING_SEG, buf, (uint32_t)n + 4, m), ECCL_ERR_PROTOCOL);
    n = ring_seg_frame(buf, 8, 7, 2); /* past the world's end */
    assert_int_equal(decode_tail(&a, ECCL_MSG_RING_SEG, buf, (uint32_t)n, m), ECCL_ERR_PROTOCOL);
    n = ring_seg_frame(buf, 8, 8, 0);
    assert_int_equal(decode_tail(&a, ECCL_MSG_RING_SEG, buf, (uint32_t)n, m), ECCL_ERR_PROTOCOL);
    n = ring_seg_frame(buf, 8, 0, 0); /* an empty run */
    assert_int_equal(decode_tail(&a, ECCL_MSG_RING_SEG, buf, (uint32_t)n, m), ECCL_ERR_PROTOCOL);
    n = ring_seg_frame(buf, UINT32_MAX, UINT32_MAX - 1, 2); /* wraps */
    assert_int_equal(decode_tail(&a, ECCL_MSG_RING_SEG, buf, (uint32_t)n, m), ECCL_ERR_PROTOCOL);

    /* REGISTER_SEG: 1..ECCL_WIRE_MAX_SEG addresses, exactly, none with a
     * NUL inside. */
    n = le(buf, 7, 4) + le(buf + 4, 9, 4) + le(buf + 8, 2, 4);
    n += le(buf + n, 3, 2);
    memcpy(buf + n, "a:1", 3);
    n += 3;
    n += le(buf + n, 4, 2);
    memcpy(buf + n, "bb:2", 4);
    n += 4;
    assert_int_equal(decode_tail(&a, ECCL_MSG_REGISTER_SEG, buf, (uint32_t)n, m), ECCL_OK);
    assert_int_equal(m->u.register_seg.n, 2);
    {
        char got[ECCL_ADDR_MAX];
        uint32_t p = 0, i = 0;
        assert_true(eccl_wire_register_seg_next(&m->u.register_seg, &p, &i, got));
        assert_string_equal(got, "a:1");
        assert_true(eccl_wire_register_seg_next(&m->u.register_seg, &p, &i, got));
        assert_string_equal(got, "bb:2");
        assert_false(eccl_wire_register_seg_next(&m->u.register_seg, &p, &i, got));
    }
    assert_int_equal(decode_tail(&a, ECCL_MSG_REGISTER_SEG, buf, (uint32_t)n - 1, m), ECCL_ERR_PROTOCOL);
    assert_int_equal(decode_tail(&a, ECCL_MSG_REGISTER_SEG, buf, (uint32_t)n + 2, m), ECCL_ERR_PROTOCOL);
    buf[n - 3] = '\0'; /* "b\0:2" */
    assert_int_equal(decode_tail(&a, ECCL_MSG_REGISTER_SEG, buf, (uint32_t)n, m), ECCL_ERR_PROTOCOL);
    buf[n - 3] = 'b';
    le(buf + 8, 3, 4); /* says three */
    assert_int_equal(decode_tail(&a, ECCL_MSG_REGISTER_SEG, buf, (uint32_t)n, m), ECCL_ERR_PROTOCOL);
    le(buf + 8, 0, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_REGISTER_SEG, buf, 12, m), ECCL_ERR_PROTOCOL);
    le(buf + 8, ECCL_WIRE_MAX_SEG + 1, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_REGISTER_SEG, buf, (uint32_t)n, m), ECCL_ERR_PROTOCOL);

    /* REPAIR_*: the length names exactly the bytes that follow; an ASK
     * carries none. */
    n = le(buf, 3, 4) + le(buf + 4, 77, 8) + le(buf + 12, 5, 4);
    memcpy(buf + n, "abcde", 5);
    assert_int_equal(decode_tail(&a, ECCL_MSG_REPAIR_PUT, buf, (uint32_t)n + 5, m), ECCL_OK);
    assert_int_equal(m->u.repair.len, 5);
    assert_memory_equal(m->u.repair.bytes, "abcde", 5);
    assert_int_equal(decode_tail(&a, ECCL_MSG_REPAIR_PUT, buf, (uint32_t)n + 4, m), ECCL_ERR_PROTOCOL);
    assert_int_equal(decode_tail(&a, ECCL_MSG_REPAIR_DATA, buf, (uint32_t)n + 6, m), ECCL_ERR_PROTOCOL);
    assert_int_equal(decode_tail(&a, ECCL_MSG_REPAIR_ASK, buf, (uint32_t)n + 5, m), ECCL_ERR_PROTOCOL);
    le(buf + 12, 0, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_REPAIR_ASK, buf, (uint32_t)n, m), ECCL_OK);
    assert_null(m->u.repair.bytes);
    le(buf + 12, ECCL_WIRE_MAX_REPAIR + 1, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_REPAIR_DATA, buf, (uint32_t)n, m), ECCL_ERR_PROTOCOL);

    /* P2P_HELLO: only known link purposes. */
    n = le(buf, 42, 8) + le(buf + 8, 0, 4) + le(buf + 12, 3, 4) + le(buf + 16, ECCL_LINK_TREE, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_P2P_HELLO, buf, (uint32_t)n, m), ECCL_OK);
    assert_int_equal(m->u.hello.purpose, ECCL_LINK_TREE);
    le(buf + 16, ECCL_LINK_PROBE, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_P2P_HELLO, buf, (uint32_t)n, m), ECCL_OK);
    le(buf + 16, ECCL_LINK_LAST + 1, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_P2P_HELLO, buf, (uint32_t)n, m), ECCL_ERR_PROTOCOL);
    /* Without the pool flag: no pool, and nothing may follow. */
    le(buf + 16, ECCL_LINK_RING, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_P2P_HELLO, buf, (uint32_t)n, m), ECCL_OK);
    assert_int_equal(m->u.hello.pool, 0);
    assert_int_equal(m->u.hello.pool_size, 1);
    le(buf + 20, 1, 4);
    le(buf + 24, 4, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_P2P_HELLO, buf, 28, m), ECCL_ERR_PROTOCOL);
    /* With it: connection 1 of 4 on a ring link. */
    le(buf + 16, ECCL_LINK_RING | ECCL_WIRE_HELLO_POOL, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_P2P_HELLO, buf, 28, m), ECCL_OK);
    assert_int_equal(m->u.hello.purpose, ECCL_LINK_RING);
    assert_int_equal(m->u.hello.pool, 1);
    assert_int_equal(m->u.hello.pool_size, 4);
    /* ... but not cut short, and not past the pool fields. */
    assert_int_equal(decode_tail(&a, ECCL_MSG_P2P_HELLO, buf, 20, m), ECCL_ERR_PROTOCOL);
    assert_int_equal(decode_tail(&a, ECCL_MSG_P2P_HELLO, buf, 24, m), ECCL_ERR_PROTOCOL);
    /* Pool semantics: a pool of one (the flag-less form is the only one),
     * over the bound, an index outside the pool, a pool on a tree link. */
    const uint32_t bad_pool[][3] = {{ECCL_LINK_RING, 0, 1},
                                    {ECCL_LINK_RING, 0, 0},
                                    {ECCL_LINK_RING, 0, ECCL_WIRE_MAX_POOL + 1},
                                    {ECCL_LINK_RING, 4, 4},
                                    {ECCL_LINK_RING, UINT32_MAX, 4},
                                    {ECCL_LINK_TREE, 0, 2},
                                    {ECCL_LINK_SYNC, 1, 2},
                                    {ECCL_LINK_SYNC + 1, 1, 2}};
    for (size_t i = 0; i < sizeof bad_pool / sizeof bad_pool[0]; i++) {
        le(buf + 16, bad_pool[i][0] | ECCL_WIRE_HELLO_POOL, 4);
        le(buf + 20, bad_pool[i][1], 4);
        le(buf + 24, bad_pool[i][2], 4);
        assert_int_equal(decode_tail(&a, ECCL_MSG_P2P_HELLO, buf, 28, m), ECCL_ERR_PROTOCOL);
    }
    le(buf + 16, ECCL_LINK_RING | ECCL_WIRE_HELLO_POOL, 4);
    le(buf + 20, ECCL_WIRE_MAX_POOL - 1, 4);
    le(buf + 24, ECCL_WIRE_MAX_POOL, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_P2P_HELLO, buf, 28, m), ECCL_OK);

    /* A PEER link names the sender's rank after the purpose word: exactly
     * 24 bytes. Without it the acceptor could not key the link. */
    le(buf + 16, ECCL_LINK_PEER, 4);
    le(buf + 20, 0xCAFE, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_P2P_HELLO, buf, 24, m), ECCL_OK);
    assert_int_equal(m->u.hello.purpose, ECCL_LINK_PEER);
    assert_int_equal(m->u.hello.rank, 0xCAFE);
    assert_int_equal(m->u.hello.pool_size, 1);
    assert_int_equal(decode_tail(&a, ECCL_MSG_P2P_HELLO, buf, 20, m), ECCL_ERR_PROTOCOL);
    assert_int_equal(decode_tail(&a, ECCL_MSG_P2P_HELLO, buf, 22, m), ECCL_ERR_PROTOCOL);
    assert_int_equal(decode_tail(&a, ECCL_MSG_P2P_HELLO, buf, 28, m), ECCL_ERR_PROTOCOL);
    /* ... with no pool: pools are for ring links only ... */
    le(buf + 16, ECCL_LINK_PEER | ECCL_WIRE_HELLO_POOL, 4);
    le(buf + 20, 0, 4);
    le(buf + 24, 2, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_P2P_HELLO, buf, 28, m), ECCL_ERR_PROTOCOL);
    /* ... and the other purposes have no rank: a word after theirs is extra,
     * and their decoded rank is 0 whatever the message held before. */
    le(buf + 16, ECCL_LINK_TREE, 4);
    le(buf + 20, 0xCAFE, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_P2P_HELLO, buf, 24, m), ECCL_ERR_PROTOCOL);
    memset(m, 0xA5, sizeof *m);
    assert_int_equal(decode_tail(&a, ECCL_MSG_P2P_HELLO, buf, 20, m), ECCL_OK);
    assert_int_equal(m->u.hello.rank, 0);

    /* OPT_DONE: the three flags are booleans. */
    memset(buf, 0, 39);
    assert_int_equal(decode_tail(&a, ECCL_MSG_OPT_DONE, buf, 39, m), ECCL_OK);
    for (int k = 12; k < 15; k++) {
        buf[k] = 2;
        assert_int_equal(decode_tail(&a, ECCL_MSG_OPT_DONE, buf, 39, m), ECCL_ERR_PROTOCOL);
        buf[k] = 1;
        assert_int_equal(decode_tail(&a, ECCL_MSG_OPT_DONE, buf, 39, m), ECCL_OK);
    }

    /* REGISTER: string length over the bound, over the remaining bytes, and
     * with an embedded NUL (it would not survive as a C string). */
    n = le(buf, 1, 4) + le(buf + 4, 1000, 4) + raw_str(buf + 8, ECCL_WIRE_MAX_ADDR + 1, 'r');
    assert_int_equal(decode_tail(&a, ECCL_MSG_REGISTER, buf, (uint32_t)n, m), ECCL_ERR_PROTOCOL);
    n = le(buf, 1, 4) + le(buf + 4, 1000, 4) + raw_str(buf + 8, 10, 'r');
    le(buf + 8, 11, 2);
    assert_int_equal(decode_tail(&a, ECCL_MSG_REGISTER, buf, (uint32_t)n, m), ECCL_ERR_PROTOCOL);
    le(buf + 8, 0xFFFF, 2);
    assert_int_equal(decode_tail(&a, ECCL_MSG_REGISTER, buf, (uint32_t)n, m), ECCL_ERR_PROTOCOL);
    le(buf + 8, 10, 2);
    assert_int_equal(decode_tail(&a, ECCL_MSG_REGISTER, buf, (uint32_t)n, m), ECCL_OK);
    assert_string_equal(m->u.reg.p2p_addr, "rrrrrrrrrr");
    buf[13] = 0;
    assert_int_equal(decode_tail(&a, ECCL_MSG_REGISTER, buf, (uint32_t)n, m), ECCL_ERR_PROTOCOL);

    /* COLL: dtype and op bounds. */
    memset(buf, 0, 26);
    assert_int_equal(decode_tail(&a, ECCL_MSG_COLL_DONE, buf, 26, m), ECCL_OK);
    buf[20] = ECCL_DTYPE_COUNT;
    assert_int_equal(decode_tail(&a, ECCL_MSG_COLL_DONE, buf, 26, m), ECCL_ERR_PROTOCOL);
    buf[20] = ECCL_DTYPE_COUNT - 1;
    buf[21] = ECCL_OP_COUNT;
    assert_int_equal(decode_tail(&a, ECCL_MSG_COLL_DONE, buf, 26, m), ECCL_ERR_PROTOCOL);
    buf[21] = 0xFF;
    assert_int_equal(decode_tail(&a, ECCL_MSG_COLL_DONE, buf, 26, m), ECCL_ERR_PROTOCOL);

    /* VIEW: too many entries (with and without the bytes for them), a count
     * larger than the bytes present, and a flag over 1. */
    memset(buf, 0, FRAME_CAP);
    le(buf + 4, ECCL_WIRE_MAX_OPS + 1, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_VIEW_REPORT, buf, 8, m), ECCL_ERR_PROTOCOL);
    assert_int_equal(decode_tail(&a, ECCL_MSG_VIEW_REPORT, buf,
                                 8 + (ECCL_WIRE_MAX_OPS + 1) * 9, m), ECCL_ERR_PROTOCOL);
    le(buf + 4, UINT32_MAX, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_VIEW_DECIDE, buf, 8, m), ECCL_ERR_PROTOCOL);
    le(buf + 4, 3, 4);
    assert_int_equal(decode_tail(&a, ECCL_MSG_VIEW_DECIDE, buf, 8 + 2 * 9, m), ECCL_ERR_PROTOCOL);
    assert_int_equal(decode_tail(&a, ECCL_MSG_VIEW_DECIDE, buf, 8 + 3 * 9, m), ECCL_OK);
    assert_int_equal(m->u.view.n_ops, 3);
    buf[8 + 2 * 9 + 8] = 2;
    assert_int_equal(decode_tail(&a, ECCL_MSG_VIEW_DECIDE, buf, 8 + 3 * 9, m), ECCL_ERR_PROTOCOL);
    buf[8 + 2 * 9 + 8] = 1;
    assert_int_equal(decode_tail(&a, ECCL_MSG_VIEW_DECIDE, buf, 8 + 3 * 9, m), ECCL_OK);
    assert_int_equal(eccl_wire_view_op(&m->u.view, 2).flag, 1);
    /* A report's flag may also name the receiving party of a point-to-point
     * tag (bit 1), a decision's never. */
    buf[8 + 2 * 9 + 8] = ECCL_VIEW_HELD | ECCL_VIEW_RECEIVER;
    assert_int_equal(decode_tail(&a, ECCL_MSG_VIEW_REPORT, buf, 8 + 3 * 9, m), ECCL_OK);
    assert_int_equal(eccl_wire_view_op(&m->u.view, 2).flag, 3);
    assert_int_equal(decode_tail(&a, ECCL_MSG_VIEW_DECIDE, buf, 8 + 3 * 9, m), ECCL_ERR_PROTOCOL);
    /* ... or whether it can take or send a replicated result (bits 2, 3). */
    buf[8 + 2 * 9 + 8] = ECCL_VIEW_REPAIRABLE;
    assert_int_equal(decode_tail(&a, ECCL_MSG_VIEW_REPORT, buf, 8 + 3 * 9, m), ECCL_OK);
    assert_int_equal(decode_tail(&a, ECCL_MSG_VIEW_DECIDE, buf, 8 + 3 * 9, m), ECCL_ERR_PROTOCOL);
    buf[8 + 2 * 9 + 8] = 16;
    assert_int_equal(decode_tail(&a, ECCL_MSG_VIEW_REPORT, buf, 8 + 3 * 9, m), ECCL_ERR_PROTOCOL);
    buf[8 + 2 * 9 + 8] = 1;
    /* A failed decode leaves no pointer into the payload behind. */
    buf[8 + 0 * 9 + 8] = 0xFF;
    assert_int_equal(decode_tail(&a, ECCL_MSG_VIEW_DECIDE, buf, 8 + 3 * 9, m), ECCL_ERR_PROTOCOL);
    assert_null(m->u.view.packed);
    assert_null(m->u.view.ops);
    assert_int_equal(m->u.view.n_ops, 0);

    free(a.base);
    free(m);
    free(buf);
}

/* A view encodes from the caller's array to the documented bytes, and a
 * decoded view reads its entries in place through eccl_wire_view_op. */
static void test_view_entries(void **state)
{
    (void)state;
    /* The decoded message is small: it lives on simulated actors' stacks. */
    assert_true(sizeof(eccl_msg) <= 512);

    const eccl_wire_op_flag mine[] = {
        {0x0102030405060708ull, 1}, {0, 0}, {UINT64_MAX, 1}, {0x8000000000000001ull, 0},
        {42, 1},
    };
    const uint32_t n = sizeof(mine) / sizeof(mine[0]);
    eccl_msg m = {.type = ECCL_MSG_VIEW_REPORT};
    m.u.view.epoch = 0xA1B2C3D4u;
    m.u.view.n_ops = n;
    m.u.view.ops = mine;
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(eccl_wire_view_op(&m.u.view, i).tag, mine[i].tag);
        assert_int_equal(eccl_wire_view_op(&m.u.view, i).flag, mine[i].flag);
    }

    uint8_t frame[ECCL_WIRE_HEADER_SIZE + 8 + 5 * 9];
    assert_int_equal(eccl_wire_encode(&m, frame, sizeof(frame)), sizeof(frame));
    /* Payload layout: u32 epoch, u32 n_ops, then per entry u64 tag, u8 flag. */
    uint8_t want[8 + 5 * 9];
    size_t w = le(want, m.u.view.epoch, 4) + le(want + 4, n, 4);
    for (uint32_t i = 0; i < n; i++) {
        w += le(want + w, mine[i].tag, 8);
        want[w++] = mine[i].flag;
    }
    assert_int_equal(w, sizeof(want));
    assert_memory_equal(frame + ECCL_WIRE_HEADER_SIZE, want, sizeof(want));

    /* Decode from an exact-size heap block (ASan sees any overread). */
    uint8_t *payload = malloc(sizeof(want));
    assert_non_null(payload);
    memcpy(payload, want, sizeof(want));
    eccl_msg d;
    memset(&d, 0xA5, sizeof(d));
    assert_int_equal(eccl_wire_decode(ECCL_MSG_VIEW_REPORT, payload, sizeof(want), &d), ECCL_OK);
    assert_int_equal(d.type, ECCL_MSG_VIEW_REPORT);
    assert_int_equal(d.u.view.epoch, 0xA1B2C3D4u);
    assert_int_equal(d.u.view.n_ops, n);
    assert_null(d.u.view.ops);
    assert_ptr_equal(d.u.view.packed, payload + 8);
    for (uint32_t i = 0; i < n; i++) {
        eccl_wire_op_flag e = eccl_wire_view_op(&d.u.view, i);
        assert_int_equal(e.tag, mine[i].tag);
        assert_int_equal(e.flag, mine[i].flag);
    }

    /* A decoded view re-encodes from the borrowed entries, byte for byte,
     * also as the other view type. */
    uint8_t again[sizeof(frame)];
    assert_int_equal(eccl_wire_encode(&d, again, sizeof(again)), sizeof(frame));
    assert_memory_equal(again, frame, sizeof(frame));
    d.type = ECCL_MSG_VIEW_DECIDE;
    assert_int_equal(eccl_wire_encode(&d, again, sizeof(again)), sizeof(frame));
    assert_int_equal(again[6], ECCL_MSG_VIEW_DECIDE);
    assert_memory_equal(again + ECCL_WIRE_HEADER_SIZE, want, sizeof(want));

    /* Borrowed, not copied: the entries are read from the payload itself,
     * which is why it must outlive the message. */
    payload[8 + 4 * 9] = 43;      /* entry 4's tag, low byte */
    payload[8 + 1 * 9 + 8] = 1;   /* entry 1's flag */
    assert_int_equal(eccl_wire_view_op(&d.u.view, 4).tag, 43);
    assert_int_equal(eccl_wire_view_op(&d.u.view, 1).flag, 1);
    free(payload);

    /* The largest view, from a caller array, through a decode. */
    eccl_wire_op_flag *big = malloc(ECCL_WIRE_MAX_OPS * sizeof(*big));
    uint8_t *bigframe = malloc(FRAME_CAP);
    assert_non_null(big);
    assert_non_null(bigframe);
    rng r = {0x243F6A8885A308D3ull};
    for (uint32_t i = 0; i < ECCL_WIRE_MAX_OPS; i++)
        big[i] = (eccl_wire_op_flag){next(&r), (uint8_t)below(&r, 2)};
    m.type = ECCL_MSG_VIEW_DECIDE;
    m.u.view.n_ops = ECCL_WIRE_MAX_OPS;
    m.u.view.ops = big;
    size_t bn = eccl_wire_encode(&m, bigframe, FRAME_CAP);
    assert_int_equal(bn, ECCL_WIRE_HEADER_SIZE + eccl_wire_max_length(ECCL_MSG_VIEW_DECIDE));
    arena a = arena_new(FRAME_CAP);
    assert_int_equal(decode_tail(&a, ECCL_MSG_VIEW_DECIDE, bigframe + ECCL_WIRE_HEADER_SIZE,
                                 (uint32_t)(bn - ECCL_WIRE_HEADER_SIZE), &d),
                     ECCL_OK);
    assert_int_equal(d.u.view.n_ops, ECCL_WIRE_MAX_OPS);
    for (uint32_t i = 0; i < ECCL_WIRE_MAX_OPS; i++) {
        eccl_wire_op_flag e = eccl_wire_view_op(&d.u.view, i);
        assert_int_equal(e.tag, big[i].tag);
        assert_int_equal(e.flag, big[i].flag);
    }
    free(a.base);
    free(bigframe);
    free(big);
}

/* The address book's lists are borrowed like a view's: encoded from the
 * caller's arrays, read in place once decoded, and re-encoded from there. */
static void test_peer_book_entries(void **state)
{
    (void)state;
    enum { query_len = 8 + 5 * 4 };
    const uint32_t ranks[] = {0, 1, 7, 0x10000, UINT32_MAX};
    eccl_msg m = {.type = ECCL_MSG_PEER_QUERY};
    m.u.peer_query = (eccl_msg_peer_query){.epoch = 3, .n = 5, .ranks = ranks};
    uint8_t frame[ECCL_WIRE_HEADER_SIZE + 256], again[sizeof frame];
    assert_int_equal(eccl_wire_encode(&m, frame, sizeof frame), ECCL_WIRE_HEADER_SIZE + query_len);

    /* Decode from an exact-size heap block (ASan sees any overread). */
    uint8_t *payload = malloc(query_len);
    assert_non_null(payload);
    memcpy(payload, frame + ECCL_WIRE_HEADER_SIZE, query_len);
    eccl_msg d;
    memset(&d, 0xA5, sizeof d);
    assert_int_equal(eccl_wire_decode(ECCL_MSG_PEER_QUERY, payload, query_len, &d), ECCL_OK);
    assert_int_equal(d.u.peer_query.epoch, 3);
    assert_int_equal(d.u.peer_query.n, 5);
    assert_null(d.u.peer_query.ranks);
    assert_ptr_equal(d.u.peer_query.packed, payload + 8);
    for (uint32_t i = 0; i < 5; i++)
        assert_int_equal(eccl_wire_peer_query_rank(&d.u.peer_query, i), ranks[i]);
    assert_int_equal(eccl_wire_encode(&d, again, sizeof again), ECCL_WIRE_HEADER_SIZE + query_len);
    assert_memory_equal(again, frame, ECCL_WIRE_HEADER_SIZE + query_len);
    /* Borrowed, not copied: rank 4 is read from the payload itself. */
    payload[8 + 4 * 4] = 0xFE;
    assert_int_equal(eccl_wire_peer_query_rank(&d.u.peer_query, 4), UINT32_MAX - 1);
    /* A failed decode leaves no pointer into the payload behind. */
    le(payload + 8 + 4 * 4, 1, 4); /* rank 4 below rank 3 */
    assert_int_equal(eccl_wire_decode(ECCL_MSG_PEER_QUERY, payload, query_len, &d),
                     ECCL_ERR_PROTOCOL);
    assert_null(d.u.peer_query.packed);
    assert_null(d.u.peer_query.ranks);
    assert_int_equal(d.u.peer_query.n, 0);
    free(payload);

    /* A reply, with the shortest and the longest address. */
    eccl_wire_peer_entry entries[3] = {{5, {50, "10.0.0.5:7000"}}, {1, {10, ""}},
                                       {UINT32_MAX, {UINT64_MAX, ""}}};
    fill_str(entries[2].ref.addr, ECCL_WIRE_MAX_ADDR, 'z');
    enum { reply_len = 8 + 3 * (4 + 8 + 2) + 13 + ECCL_WIRE_MAX_ADDR };
    m = (eccl_msg){.type = ECCL_MSG_PEER_REPLY};
    m.u.peer_reply = (eccl_msg_peer_reply){.epoch = 4, .n = 3, .entries = entries};
    assert_int_equal(eccl_wire_encode(&m, frame, sizeof frame), ECCL_WIRE_HEADER_SIZE + reply_len);
    payload = malloc(reply_len);
    assert_non_null(payload);
    memcpy(payload, frame + ECCL_WIRE_HEADER_SIZE, reply_len);
    memset(&d, 0xA5, sizeof d);
    assert_int_equal(eccl_wire_decode(ECCL_MSG_PEER_REPLY, payload, reply_len, &d), ECCL_OK);
    assert_int_equal(d.u.peer_reply.epoch, 4);
    assert_int_equal(d.u.peer_reply.n, 3);
    assert_null(d.u.peer_reply.entries);
    assert_ptr_equal(d.u.peer_reply.packed, payload + 8);
    assert_int_equal(d.u.peer_reply.packed_len, reply_len - 8);
    uint32_t pos = 0, i = 0;
    eccl_wire_peer_entry e;
    for (uint32_t k = 0; k < 3; k++) {
        assert_true(eccl_wire_peer_reply_next(&d.u.peer_reply, &pos, &i, &e));
        assert_int_equal(i, k + 1);
        assert_int_equal(e.rank, entries[k].rank);
        assert_int_equal(e.ref.peer_id, entries[k].ref.peer_id);
        assert_string_equal(e.ref.addr, entries[k].ref.addr);
    }
    assert_false(eccl_wire_peer_reply_next(&d.u.peer_reply, &pos, &i, &e));
    assert_int_equal(pos, reply_len - 8);
    assert_int_equal(eccl_wire_encode(&d, again, sizeof again), ECCL_WIRE_HEADER_SIZE + reply_len);
    assert_memory_equal(again, frame, ECCL_WIRE_HEADER_SIZE + reply_len);
    /* Borrowed: the first address's first byte, read from the payload. */
    payload[8 + 4 + 8 + 2] = '9';
    pos = i = 0;
    assert_true(eccl_wire_peer_reply_next(&d.u.peer_reply, &pos, &i, &e));
    assert_string_equal(e.ref.addr, "90.0.0.5:7000");
    /* A failed decode leaves no pointer behind. */
    assert_int_equal(eccl_wire_decode(ECCL_MSG_PEER_REPLY, payload, reply_len - 1, &d),
                     ECCL_ERR_PROTOCOL);
    assert_null(d.u.peer_reply.packed);
    assert_null(d.u.peer_reply.entries);
    assert_int_equal(d.u.peer_reply.n, 0);
    assert_int_equal(d.u.peer_reply.packed_len, 0);
    free(payload);
}

/* A PEER_QUERY payload (epoch 1) that says `n` ranks and holds the first
 * `present` of `ranks`; returns its length. */
static size_t query_payload(uint8_t *buf, uint32_t n, const uint32_t *ranks, uint32_t present)
{
    size_t len = le(buf, 1, 4) + le(buf + 4, n, 4);
    for (uint32_t i = 0; i < present; i++)
        len += le(buf + len, ranks[i], 4);
    return len;
}

/* One PEER_REPLY entry with an address of `len` bytes copied as they are
 * (NULs included); returns its length. */
static size_t reply_entry(uint8_t *p, uint32_t rank, uint64_t peer_id, const char *addr,
                          uint16_t len)
{
    size_t n = le(p, rank, 4) + le(p + 4, peer_id, 8) + le(p + 12, len, 2);
    memcpy(p + n, addr, len);
    return n + len;
}

/* The address book: what the decoder must refuse beyond the cut and padded
 * payloads check_message tries, and what the encoder refuses to write. */
static void test_peer_book_rejects(void **state)
{
    (void)state;
    uint8_t *buf = calloc(1, FRAME_CAP), *frame = malloc(FRAME_CAP);
    eccl_msg *m = new_msg(0), *d = new_msg(0);
    arena a = arena_new(FRAME_CAP);
    assert_non_null(buf);
    assert_non_null(frame);
    size_t n;

    /* PEER_QUERY ranks are strictly increasing: a repeat would make the
     * master answer (and a peer connect) twice for one rank. */
    const uint32_t sorted[3] = {0, 5, UINT32_MAX};
    n = query_payload(buf, 3, sorted, 3);
    assert_int_equal(decode_tail(&a, ECCL_MSG_PEER_QUERY, buf, (uint32_t)n, d), ECCL_OK);
    const uint32_t bad_order[][3] = {
        {5, 1, 9},          /* the first pair descends */
        {1, 9, 5},          /* the last pair descends */
        {1, 5, 5},          /* a repeat */
        {0, 0, 1},          /* a repeat of the lowest rank */
        {UINT32_MAX, 0, 1}, /* the largest rank first */
    };
    for (size_t i = 0; i < sizeof bad_order / sizeof bad_order[0]; i++) {
        n = query_payload(buf, 3, bad_order[i], 3);
        assert_int_equal(decode_tail(&a, ECCL_MSG_PEER_QUERY, buf, (uint32_t)n, d),
                         ECCL_ERR_PROTOCOL);
    }

    /* n must match the ranks present: fewer, more, a stray byte. */
    static uint32_t seq[ECCL_WIRE_MAX_PEER_REFS + 1];
    for (uint32_t i = 0; i <= ECCL_WIRE_MAX_PEER_REFS; i++)
        seq[i] = i;
    const struct {
        uint32_t n, present, extra;
    } query_bad[] = {
        {3, 2, 0}, {3, 2, 2}, {2, 3, 0}, {3, 3, 1}, {0, 1, 0}, {0, 0, 3},
        /* over the bound: without the ranks, with them (the frame's bound
         * says no too), and a count that would wrap a 32-bit size */
        {ECCL_WIRE_MAX_PEER_REFS + 1, ECCL_WIRE_MAX_PEER_REFS, 0},
        {ECCL_WIRE_MAX_PEER_REFS + 1, ECCL_WIRE_MAX_PEER_REFS + 1, 0},
        {UINT32_MAX, 1, 0}, {0x40000001u, 1, 0},
    };
    for (size_t i = 0; i < sizeof query_bad / sizeof query_bad[0]; i++) {
        n = query_payload(buf, query_bad[i].n, seq, query_bad[i].present);
        memset(buf + n, 0, query_bad[i].extra);
        n += query_bad[i].extra;
        assert_int_equal(decode_tail(&a, ECCL_MSG_PEER_QUERY, buf, (uint32_t)n, d),
                         ECCL_ERR_PROTOCOL);
    }
    n = query_payload(buf, ECCL_WIRE_MAX_PEER_REFS, seq, ECCL_WIRE_MAX_PEER_REFS);
    assert_int_equal(decode_tail(&a, ECCL_MSG_PEER_QUERY, buf, (uint32_t)n, d), ECCL_OK);
    assert_int_equal(d->u.peer_query.n, ECCL_WIRE_MAX_PEER_REFS);

    /* PEER_REPLY: two entries, "a:1" and "b:2". */
    n = le(buf, 1, 4) + le(buf + 4, 2, 4);
    n += reply_entry(buf + n, 3, 30, "a:1", 3);
    const size_t second = n;
    n += reply_entry(buf + n, 4, 40, "b:2", 3);
    assert_int_equal(decode_tail(&a, ECCL_MSG_PEER_REPLY, buf, (uint32_t)n, d), ECCL_OK);
    /* n must match the entries present: more than there are, fewer (the
     * second entry is then trailing bytes), a count over the bound. */
    const uint32_t reply_bad_n[] = {3, 1, 0, ECCL_WIRE_MAX_PEER_REFS + 1, UINT32_MAX};
    for (size_t i = 0; i < sizeof reply_bad_n / sizeof reply_bad_n[0]; i++) {
        le(buf + 4, reply_bad_n[i], 4);
        assert_int_equal(decode_tail(&a, ECCL_MSG_PEER_REPLY, buf, (uint32_t)n, d),
                         ECCL_ERR_PROTOCOL);
    }
    le(buf + 4, 2, 4);
    buf[n] = 0;
    assert_int_equal(decode_tail(&a, ECCL_MSG_PEER_REPLY, buf, (uint32_t)(n + 1), d),
                     ECCL_ERR_PROTOCOL);
    assert_int_equal(decode_tail(&a, ECCL_MSG_PEER_REPLY, buf, (uint32_t)(n - 1), d),
                     ECCL_ERR_PROTOCOL);
    /* The second address: with a NUL inside (it would not survive as a C
     * string), one byte over the bound (all bytes present), a length past
     * the payload's end; the bound itself is fine. */
    char addr[ECCL_WIRE_MAX_ADDR + 1];
    memset(addr, 'b', sizeof addr);
    n = second + reply_entry(buf + second, 4, 40, "b\0" "2", 3);
    assert_int_equal(decode_tail(&a, ECCL_MSG_PEER_REPLY, buf, (uint32_t)n, d), ECCL_ERR_PROTOCOL);
    n = second + reply_entry(buf + second, 4, 40, addr, ECCL_WIRE_MAX_ADDR + 1);
    assert_true(n <= eccl_wire_max_length(ECCL_MSG_PEER_REPLY));
    assert_int_equal(decode_tail(&a, ECCL_MSG_PEER_REPLY, buf, (uint32_t)n, d), ECCL_ERR_PROTOCOL);
    le(buf + second + 12, 0xFFFF, 2);
    assert_int_equal(decode_tail(&a, ECCL_MSG_PEER_REPLY, buf, (uint32_t)n, d), ECCL_ERR_PROTOCOL);
    n = second + reply_entry(buf + second, 4, 40, addr, ECCL_WIRE_MAX_ADDR);
    assert_int_equal(decode_tail(&a, ECCL_MSG_PEER_REPLY, buf, (uint32_t)n, d), ECCL_OK);
    uint32_t pos = 0, i = 0;
    eccl_wire_peer_entry e;
    assert_true(eccl_wire_peer_reply_next(&d->u.peer_reply, &pos, &i, &e));
    assert_true(eccl_wire_peer_reply_next(&d->u.peer_reply, &pos, &i, &e));
    assert_int_equal(strlen(e.ref.addr), ECCL_WIRE_MAX_ADDR);
    /* A count over the bound with every entry there: short entries keep
     * the frame inside the type's bound, so only the count can refuse it. */
    for (uint32_t count = ECCL_WIRE_MAX_PEER_REFS; count <= ECCL_WIRE_MAX_PEER_REFS + 1; count++) {
        n = le(buf, 1, 4) + le(buf + 4, count, 4);
        for (uint32_t k = 0; k < count; k++)
            n += reply_entry(buf + n, k, k, "", 0);
        assert_true(n <= eccl_wire_max_length(ECCL_MSG_PEER_REPLY));
        assert_int_equal(decode_tail(&a, ECCL_MSG_PEER_REPLY, buf, (uint32_t)n, d),
                         count <= ECCL_WIRE_MAX_PEER_REFS ? ECCL_OK : ECCL_ERR_PROTOCOL);
    }

    /* The encoder refuses what the decoder would. The second list sources
     * for "both" are valid packed lists (ranks 1, 2; two entries of rank 0,
     * id 0, no address), so that only the one-source rule can refuse them. */
    static const uint8_t packed_ranks[8] = {1, 0, 0, 0, 2, 0, 0, 0};
    static const uint8_t packed_entries[2 * (4 + 8 + 2)];
    m->type = ECCL_MSG_PEER_QUERY;
    m->u.peer_query = (eccl_msg_peer_query){.epoch = 1, .n = 2, .ranks = sorted};
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), ECCL_WIRE_HEADER_SIZE + 8 + 2 * 4);
    const uint32_t descending[2] = {5, 3}, repeated[2] = {3, 3};
    m->u.peer_query.ranks = descending;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.peer_query.ranks = repeated;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.peer_query.ranks = seq; /* sorted, with one rank past the bound */
    m->u.peer_query.n = ECCL_WIRE_MAX_PEER_REFS + 1;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.peer_query.n = ECCL_WIRE_MAX_PEER_REFS;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP),
                     ECCL_WIRE_HEADER_SIZE + eccl_wire_max_length(ECCL_MSG_PEER_QUERY));
    /* Ranks need exactly one source: neither, or both, is refused... */
    m->u.peer_query.n = 2;
    m->u.peer_query.packed = packed_ranks;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.peer_query.ranks = NULL;
    m->u.peer_query.packed = NULL;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    /* ... and an empty list needs neither. */
    m->u.peer_query.n = 0;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), ECCL_WIRE_HEADER_SIZE + 8);

    memset(m, 0, sizeof *m);
    m->type = ECCL_MSG_PEER_REPLY;
    for (uint32_t k = 0; k <= ECCL_WIRE_MAX_PEER_REFS; k++)
        entry_store[k] = (eccl_wire_peer_entry){k, {k, "h:1"}};
    m->u.peer_reply = (eccl_msg_peer_reply){.epoch = 1, .n = ECCL_WIRE_MAX_PEER_REFS + 1,
                                            .entries = entry_store};
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.peer_reply.n = ECCL_WIRE_MAX_PEER_REFS;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP),
                     ECCL_WIRE_HEADER_SIZE + 8 + ECCL_WIRE_MAX_PEER_REFS * (4 + 8 + 2 + 3));
    /* An address filling its whole array has no NUL: one byte over. */
    memset(entry_store[ECCL_WIRE_MAX_PEER_REFS - 1].ref.addr, 'x', ECCL_ADDR_MAX);
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.peer_reply.n = 2;
    m->u.peer_reply.packed = packed_entries;
    m->u.peer_reply.packed_len = sizeof packed_entries;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.peer_reply.entries = NULL;
    m->u.peer_reply.packed = NULL;
    m->u.peer_reply.packed_len = 0;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.peer_reply.n = 0;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), ECCL_WIRE_HEADER_SIZE + 8);
    /* A packed list shorter than n: refused, never a frame that lies. */
    m->u.peer_reply.n = 3;
    m->u.peer_reply.packed = packed_entries;
    m->u.peer_reply.packed_len = sizeof packed_entries;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    /* Only a PEER hello carries a rank: elsewhere it would be dropped. */
    memset(m, 0, sizeof *m);
    m->type = ECCL_MSG_P2P_HELLO;
    m->u.hello = (eccl_msg_p2p_hello){.peer_id = 1, .purpose = ECCL_LINK_TREE, .pool_size = 1, .rank = 3};
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), 0);
    m->u.hello.rank = 0;
    assert_int_equal(eccl_wire_encode(m, frame, FRAME_CAP), ECCL_WIRE_HEADER_SIZE + 20);

    free(a.base);
    free(m);
    free(d);
    free(frame);
    free(buf);
}

static void test_data_header(void **state)
{
    (void)state;
    uint8_t b[ECCL_WIRE_DATA_HEADER_SIZE];
    eccl_wire_data d, o;

    d = (eccl_wire_data){0x0102030405060708ull, 0x11121314u, 1, ECCL_PHASE_ALL_GATHER,
                         0x2122, 0x3132333435363738ull, 0x100, 0};
    eccl_wire_data_encode(&d, b);
    static const uint8_t want[] = {
        8, 7, 6, 5, 4, 3, 2, 1, 0x14, 0x13, 0x12, 0x11, 1, 1, 0x22, 0x21,
        0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31, 0, 1, 0, 0, 0, 0, 0, 0,
    };
    assert_memory_equal(b, want, sizeof(want));
    assert_int_equal(eccl_wire_data_decode(b, 32 + 0x100, &o), ECCL_OK);
    assert_memory_equal(&d, &o, sizeof(d));

    /* Extremes: the largest slice, and the empty completion token. */
    d = (eccl_wire_data){UINT64_MAX, UINT32_MAX, 1, ECCL_PHASE_REDUCE_SCATTER,
                         UINT16_MAX, UINT64_MAX, ECCL_WIRE_MAX_DATA - 32, 0};
    eccl_wire_data_encode(&d, b);
    assert_int_equal(eccl_wire_data_decode(b, ECCL_WIRE_MAX_DATA, &o), ECCL_OK);
    assert_memory_equal(&d, &o, sizeof(d));
    d = (eccl_wire_data){0, 0, 0, ECCL_PHASE_DONE, 0, 0, 0, 0};
    eccl_wire_data_encode(&d, b);
    assert_int_equal(eccl_wire_data_decode(b, 32, &o), ECCL_OK);
    assert_memory_equal(&d, &o, sizeof(d));

    /* len must match the frame exactly. */
    assert_int_equal(eccl_wire_data_decode(b, 31, &o), ECCL_ERR_PROTOCOL);
    assert_int_equal(eccl_wire_data_decode(b, 33, &o), ECCL_ERR_PROTOCOL);
    assert_int_equal(eccl_wire_data_decode(b, 0, &o), ECCL_ERR_PROTOCOL);
    /* 32 + len must not wrap to a small frame length. */
    d.len = UINT32_MAX;
    eccl_wire_data_encode(&d, b);
    assert_int_equal(eccl_wire_data_decode(b, 31, &o), ECCL_ERR_PROTOCOL);
    /* A slice over the data bound is rejected even if consistent. */
    d.len = ECCL_WIRE_MAX_DATA - 31;
    eccl_wire_data_encode(&d, b);
    assert_int_equal(eccl_wire_data_decode(b, ECCL_WIRE_MAX_DATA + 1, &o), ECCL_ERR_PROTOCOL);

    d = (eccl_wire_data){1, 2, 0, ECCL_PHASE_REDUCE_SCATTER, 3, 4, 5, 0};
    const struct {
        size_t off;
        uint8_t v;
    } bad[] = {{12, 2}, {12, 0xFF}, {13, ECCL_PHASE_LAST + 1}, {13, 0xFF},
               {28, 1}, {29, 1},    {30, 1}, {31, 0x80}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        eccl_wire_data_encode(&d, b);
        assert_int_equal(eccl_wire_data_decode(b, 37, &o), ECCL_OK);
        b[bad[i].off] = bad[i].v;
        assert_int_equal(eccl_wire_data_decode(b, 37, &o), ECCL_ERR_PROTOCOL);
    }
}

/* Either a clean rejection or a decode that re-encodes to the same bytes.
 * Returns 1 for the latter. */
static int check_decode_outcome(arena *a, uint8_t *frame, uint16_t type,
                                const uint8_t *p, uint32_t len, eccl_msg *m)
{
    eccl_result rc = decode_tail(a, type, p, len, m);
    if (rc != ECCL_OK) {
        assert_int_equal(rc, ECCL_ERR_PROTOCOL);
        return 0;
    }
    size_t n = eccl_wire_encode(m, frame, FRAME_CAP);
    assert_int_equal(n, ECCL_WIRE_HEADER_SIZE + len);
    assert_memory_equal(frame + ECCL_WIRE_HEADER_SIZE, p, len);
    return 1;
}

static void test_random_robustness(void **state)
{
    (void)state;
    rng r = {0x9E3779B97F4A7C15ull};
    uint8_t *src = malloc(FRAME_CAP + 64);
    uint8_t *frame = malloc(FRAME_CAP);
    eccl_msg *m = new_msg(0);
    arena a = arena_new(FRAME_CAP + 64);
    unsigned ok = 0;

    for (int iter = 0; iter < 200000; iter++) {
        uint32_t mode = below(&r, 3);
        uint16_t type;
        uint32_t len;
        if (mode == 0) {
            /* Pure noise, mostly short, at any type including unknown ones. */
            type = below(&r, 8) == 0 ? (uint16_t)next(&r) : control_types[below(&r, N_CONTROL)];
            uint32_t max = eccl_wire_max_length(type);
            len = below(&r, (max < 256 ? max : 256) + 9);
            for (uint32_t i = 0; i < len; i++)
                src[i] = (uint8_t)next(&r);
        } else {
            fill_random(&r, m);
            size_t n = eccl_wire_encode(m, frame, FRAME_CAP);
            assert_true(n >= ECCL_WIRE_HEADER_SIZE);
            type = m->type;
            len = (uint32_t)(n - ECCL_WIRE_HEADER_SIZE);
            memcpy(src, frame + ECCL_WIRE_HEADER_SIZE, len);
            if (mode == 2) {
                assert_true(check_decode_outcome(&a, frame, type, src, len, m));
                ok++;
                continue;
            }
            /* Mutate: flip bytes, then maybe cut or extend. */
            for (uint32_t k = 1 + below(&r, 3); k > 0 && len > 0; k--)
                src[below(&r, len)] ^= (uint8_t)(1 + below(&r, 255));
            if (below(&r, 4) == 0 && len > 0)
                len = below(&r, len);
            else if (below(&r, 8) == 0)
                for (uint32_t k = 1 + below(&r, 8); k > 0; k--)
                    src[len++] = (uint8_t)next(&r);
        }
        ok += (unsigned)check_decode_outcome(&a, frame, type, src, len, m);
    }
    /* The sweep must exercise the accepting path, not only the rejections. */
    assert_true(ok > 50000);

    for (int iter = 0; iter < 200000; iter++) {
        eccl_wire_header h;
        uint8_t hb[ECCL_WIRE_HEADER_SIZE], back[ECCL_WIRE_HEADER_SIZE];
        for (size_t i = 0; i < sizeof(hb); i++)
            hb[i] = (uint8_t)next(&r);
        if (below(&r, 2)) {
            eccl_wire_header_encode(control_types[below(&r, N_CONTROL)],
                                    below(&r, 64), back);
            memcpy(hb, back, 8 + below(&r, 9));
        }
        eccl_result rc = eccl_wire_header_decode(hb, &h);
        if (rc == ECCL_OK) {
            eccl_wire_header_encode(h.type, h.length, back);
            assert_memory_equal(hb, back, sizeof(hb));
        } else {
            assert_int_equal(rc, ECCL_ERR_PROTOCOL);
        }

        eccl_wire_data d;
        uint8_t db[ECCL_WIRE_DATA_HEADER_SIZE], dback[ECCL_WIRE_DATA_HEADER_SIZE];
        for (size_t i = 0; i < sizeof(db); i++)
            db[i] = (uint8_t)next(&r);
        if (below(&r, 2)) {
            db[12] &= 1;
            db[13] %= 3;
            memset(db + 28, 0, 4);
        }
        uint32_t flen = (uint32_t)next(&r);
        if (below(&r, 2))
            flen = 32u + (uint32_t)(db[24] | db[25] << 8 | db[26] << 16 | (uint32_t)db[27] << 24);
        rc = eccl_wire_data_decode(db, flen, &d);
        if (rc == ECCL_OK) {
            eccl_wire_data_encode(&d, dback);
            assert_memory_equal(db, dback, sizeof(db));
            assert_int_equal(32u + (uint64_t)d.len, flen);
        } else {
            assert_int_equal(rc, ECCL_ERR_PROTOCOL);
        }
    }

    free(a.base);
    free(m);
    free(frame);
    free(src);
}

/* ---- relay batches ------------------------------------------------------------- */

/* Decodes a whole frame built by eccl_wire_batch_take. */
static eccl_result decode_frame(const uint8_t *f, uint32_t len, eccl_msg *m)
{
    eccl_wire_header h;
    eccl_result rc = eccl_wire_header_decode(f, &h);
    if (rc != ECCL_OK) return rc;
    assert_int_equal(h.length, len - ECCL_WIRE_HEADER_SIZE);
    return eccl_wire_decode(h.type, f + ECCL_WIRE_HEADER_SIZE, h.length, m);
}

static void test_batch_roundtrip(void **state)
{
    (void)state;
    eccl_wire_batch b = {0};
    uint32_t len = 0;
    assert_null(eccl_wire_batch_take(&b, &len)); /* nothing to send */
    eccl_msg reg = {.type = ECCL_MSG_REGISTER};
    reg.u.reg.peer_group = 7;
    snprintf(reg.u.reg.p2p_addr, sizeof reg.u.reg.p2p_addr, "10.0.0.1:4242");
    eccl_msg hb = {.type = ECCL_MSG_HEARTBEAT};
    assert_int_equal(eccl_wire_batch_add(&b, 0, &reg), ECCL_OK);
    assert_int_equal(eccl_wire_batch_add(&b, 3, NULL), ECCL_OK); /* gone */
    assert_int_equal(eccl_wire_batch_add(&b, 1, &hb), ECCL_OK);
    eccl_msg data = {.type = ECCL_MSG_DATA};
    assert_int_equal(eccl_wire_batch_add(&b, 2, &data), ECCL_ERR_INVALID_ARG);
    eccl_msg nested = {.type = ECCL_MSG_RELAY_HELLO};
    assert_int_equal(eccl_wire_batch_add(&b, 2, &nested), ECCL_ERR_INVALID_ARG);
    uint8_t *f = eccl_wire_batch_take(&b, &len);
    assert_non_null(f);
    assert_null(b.buf);
    eccl_msg m;
    assert_int_equal(decode_frame(f, len, &m), ECCL_OK);
    assert_int_equal(m.type, ECCL_MSG_BATCH);
    assert_int_equal(m.u.batch.n, 3);
    uint32_t pos = 0, h, c, fl;
    const uint8_t *e;
    assert_true(eccl_wire_batch_next(&m.u.batch, &pos, &h, &c, &e, &fl));
    assert_int_equal(h, 0);
    assert_int_equal(c, 1);
    eccl_msg in;
    assert_int_equal(decode_frame(e, fl, &in), ECCL_OK);
    assert_int_equal(in.type, ECCL_MSG_REGISTER);
    assert_int_equal(in.u.reg.peer_group, 7);
    assert_string_equal(in.u.reg.p2p_addr, "10.0.0.1:4242");
    assert_true(eccl_wire_batch_next(&m.u.batch, &pos, &h, &c, &e, &fl));
    assert_int_equal(h, 3);
    assert_int_equal(fl, 0);
    assert_null(e);
    assert_true(eccl_wire_batch_next(&m.u.batch, &pos, &h, &c, &e, &fl));
    assert_int_equal(h, 1);
    assert_int_equal(decode_frame(e, fl, &in), ECCL_OK);
    assert_int_equal(in.type, ECCL_MSG_HEARTBEAT);
    assert_false(eccl_wire_batch_next(&m.u.batch, &pos, &h, &c, &e, &fl));
    /* Re-encoded as decoded: the same bytes (a relay may forward it). */
    uint8_t again[1024];
    assert_int_equal(eccl_wire_encode(&m, again, sizeof again), len);
    assert_memory_equal(again, f, len);

    /* Every corruption of an entry is caught at decode. */
    eccl_wire_header hdr;
    assert_int_equal(eccl_wire_header_decode(f, &hdr), ECCL_OK);
    uint8_t *p = f + ECCL_WIRE_HEADER_SIZE;
    uint32_t plen = hdr.length;
    p[0] = 4; /* count says 4, 3 follow */
    assert_int_equal(eccl_wire_decode(ECCL_MSG_BATCH, p, plen, &m), ECCL_ERR_PROTOCOL);
    p[0] = 3;
    p[8] ^= 0xff; /* first entry's length runs past the end */
    p[9] ^= 0xff;
    assert_int_equal(eccl_wire_decode(ECCL_MSG_BATCH, p, plen, &m), ECCL_ERR_PROTOCOL);
    p[8] ^= 0xff;
    p[9] ^= 0xff;
    p[12] ^= 1; /* the inner frame's magic */
    assert_int_equal(eccl_wire_decode(ECCL_MSG_BATCH, p, plen, &m), ECCL_ERR_PROTOCOL);
    p[12] ^= 1;
    assert_int_equal(eccl_wire_decode(ECCL_MSG_BATCH, p, plen - 1, &m), ECCL_ERR_PROTOCOL);
    assert_int_equal(eccl_wire_decode(ECCL_MSG_BATCH, p, plen, &m), ECCL_OK);
    free(f);
}


/* Reads every entry of a decoded batch into (handle, count, frame length). */
static uint32_t batch_entries(const eccl_msg_batch *mb, uint32_t (*out)[3], uint32_t max)
{
    uint32_t pos = 0, h, c, fl, n = 0;
    const uint8_t *e;
    while (n < max && eccl_wire_batch_next(mb, &pos, &h, &c, &e, &fl)) {
        out[n][0] = h, out[n][1] = c, out[n][2] = fl;
        n++;
    }
    return n;
}

/* The same frame for consecutive handles folds into one span entry, in
 * either direction; anything else (another frame, a gap, a gone entry, a
 * handle in between) starts a new entry, so no frame passes another. */
static void test_batch_span(void **state)
{
    (void)state;
    eccl_wire_batch b = {0};
    eccl_msg done = {.type = ECCL_MSG_TOPO_DONE}, other = {.type = ECCL_MSG_TOPO_DONE};
    done.u.epoch.epoch = 5;
    other.u.epoch.epoch = 6;
    for (uint32_t h = 10; h < 14; h++) {
        assert_int_equal(eccl_wire_batch_add(&b, h, &done), ECCL_OK);
        assert_int_equal(b.folded, h > 10);
    }
    assert_int_equal(eccl_wire_batch_add(&b, 9, &done), ECCL_OK); /* below the span */
    assert_true(b.folded);
    assert_int_equal(eccl_wire_batch_add(&b, 14, &other), ECCL_OK); /* another frame */
    assert_false(b.folded);
    assert_int_equal(eccl_wire_batch_add(&b, 16, &other), ECCL_OK); /* a gap */
    assert_false(b.folded);
    assert_int_equal(eccl_wire_batch_add(&b, 17, NULL), ECCL_OK); /* gone: never folded */
    assert_int_equal(eccl_wire_batch_add(&b, 18, NULL), ECCL_OK);
    assert_false(b.folded);
    assert_int_equal(eccl_wire_batch_add(&b, ECCL_WIRE_BATCH_SPAN, &done), ECCL_ERR_INVALID_ARG);
    assert_int_equal(b.n, 5);
    uint32_t len;
    uint8_t *f = eccl_wire_batch_take(&b, &len);
    eccl_msg m;
    assert_int_equal(decode_frame(f, len, &m), ECCL_OK);
    assert_int_equal(m.u.batch.n, 5);
    uint32_t got[8][3];
    assert_int_equal(batch_entries(&m.u.batch, got, 8), 5);
    const uint32_t want[5][3] = {{9, 5, 20}, {14, 1, 20}, {16, 1, 20}, {17, 1, 0}, {18, 1, 0}};
    assert_memory_equal(got, want, sizeof want);
    uint8_t again[512];
    assert_int_equal(eccl_wire_encode(&m, again, sizeof again), len);
    assert_memory_equal(again, f, len);

    /* Malformed spans are refused at decode: the payload is the count,
     * then the span (handle | SPAN, length, count, frame). */
    eccl_wire_header hdr;
    assert_int_equal(eccl_wire_header_decode(f, &hdr), ECCL_OK);
    uint8_t *p = f + ECCL_WIRE_HEADER_SIZE;
    assert_int_equal(p[4 + 3], 0x80); /* the span flag */
    assert_int_equal(p[4 + 8], 5);    /* its count */
    p[4 + 8] = 1; /* a span of one: a plain entry has one encoding */
    assert_int_equal(eccl_wire_decode(ECCL_MSG_BATCH, p, hdr.length, &m), ECCL_ERR_PROTOCOL);
    p[4 + 8] = 0;
    assert_int_equal(eccl_wire_decode(ECCL_MSG_BATCH, p, hdr.length, &m), ECCL_ERR_PROTOCOL);
    p[4 + 8] = 5;
    p[4 + 0] = 0xff, p[4 + 1] = 0xff, p[4 + 2] = 0xff, p[4 + 3] = 0xff; /* past the last handle */
    assert_int_equal(eccl_wire_decode(ECCL_MSG_BATCH, p, hdr.length, &m), ECCL_ERR_PROTOCOL);
    p[4 + 0] = 0xfb, p[4 + 1] = 0xff, p[4 + 2] = 0xff, p[4 + 3] = 0xff; /* ends at the last: fine */
    assert_int_equal(eccl_wire_decode(ECCL_MSG_BATCH, p, hdr.length, &m), ECCL_OK);
    p[4 + 0] = 9, p[4 + 1] = 0, p[4 + 2] = 0, p[4 + 3] = 0x80;
    p[4 + 12 + 1] ^= 1; /* the span's frame */
    assert_int_equal(eccl_wire_decode(ECCL_MSG_BATCH, p, hdr.length, &m), ECCL_ERR_PROTOCOL);
    p[4 + 12 + 1] ^= 1;
    assert_int_equal(eccl_wire_decode(ECCL_MSG_BATCH, p, 4 + 10, &m), ECCL_ERR_PROTOCOL); /* cut in its head */
    assert_int_equal(eccl_wire_decode(ECCL_MSG_BATCH, p, hdr.length, &m), ECCL_OK);
    free(f);

    /* A gone span (length 0) does not exist: one by one, as a relay
     * reports losses. */
    uint8_t gone[4 + 12] = {1, 0, 0, 0, 3, 0, 0, 0x80, 0, 0, 0, 0, 2, 0, 0, 0};
    assert_int_equal(eccl_wire_decode(ECCL_MSG_BATCH, gone, sizeof gone, &m), ECCL_ERR_PROTOCOL);
}

/* WELCOMEs of consecutive ids for consecutive handles fold into one
 * stepping span (ids handed out in a relay's handle order); the relay
 * expands it into each handle's own WELCOME. A stepping span is no plain
 * entry: eccl_wire_batch_next stops at it, and one whose frame is not a
 * WELCOME, or whose ids would wrap, is refused at decode. */
static void test_batch_step(void **state)
{
    (void)state;
    eccl_wire_batch b = {0};
    eccl_msg w = {.type = ECCL_MSG_WELCOME};
    for (uint32_t h = 3; h < 7; h++) {
        w.u.welcome.peer_id = 100 + h;
        assert_int_equal(eccl_wire_batch_add(&b, h, &w), ECCL_OK);
        assert_int_equal(b.folded, h > 3);
    }
    w.u.welcome.peer_id = 200; /* not the next id */
    assert_int_equal(eccl_wire_batch_add(&b, 7, &w), ECCL_OK);
    assert_false(b.folded);
    w.u.welcome.peer_id = 201;
    w.u.welcome.accepted = 1; /* another answer */
    assert_int_equal(eccl_wire_batch_add(&b, 8, &w), ECCL_OK);
    assert_false(b.folded);
    w.u.welcome.peer_id = 202; /* the handle below: ids only step up */
    assert_int_equal(eccl_wire_batch_add(&b, 7, &w), ECCL_OK);
    assert_false(b.folded);
    assert_int_equal(b.n, 4);
    uint32_t len;
    uint8_t *f = eccl_wire_batch_take(&b, &len);
    eccl_msg m;
    assert_int_equal(decode_frame(f, len, &m), ECCL_OK);
    uint32_t pos = 0, h, c, fl;
    int step;
    const uint8_t *e;
    assert_true(eccl_wire_batch_next_step(&m.u.batch, &pos, &h, &c, &step, &e, &fl));
    assert_int_equal(h, 3);
    assert_int_equal(c, 4);
    assert_true(step);
    uint8_t one[64];
    for (uint32_t i = 0; i < c; i++) {
        eccl_msg d;
        assert_int_equal(eccl_wire_batch_step_frame(e, fl, i, one), ECCL_OK);
        assert_int_equal(decode_frame(one, fl, &d), ECCL_OK);
        assert_int_equal(d.type, ECCL_MSG_WELCOME);
        assert_int_equal(d.u.welcome.peer_id, 103 + i);
        assert_int_equal(d.u.welcome.accepted, 0);
    }
    assert_true(eccl_wire_batch_next_step(&m.u.batch, &pos, &h, &c, &step, &e, &fl));
    assert_int_equal(h, 7);
    assert_int_equal(c, 1);
    assert_false(step);
    uint32_t pos2 = 0;
    assert_false(eccl_wire_batch_next(&m.u.batch, &pos2, &h, &c, &e, &fl)); /* stops at it */
    assert_int_equal(pos2, 0);
    uint8_t again[512];
    assert_int_equal(eccl_wire_encode(&m, again, sizeof again), len);
    assert_memory_equal(again, f, len);

    /* A stepping span of a frame that is no WELCOME; ids that would wrap. */
    eccl_wire_header hdr;
    assert_int_equal(eccl_wire_header_decode(f, &hdr), ECCL_OK);
    uint8_t *p = f + ECCL_WIRE_HEADER_SIZE;
    assert_int_equal(p[4 + 11], 0x80); /* the step flag, in the count */
    uint8_t *frame = p + 4 + 12;
    frame[6] = ECCL_MSG_PENDING_REPLY; /* same length (12), another type */
    assert_int_equal(eccl_wire_decode(ECCL_MSG_BATCH, p, hdr.length, &m), ECCL_ERR_PROTOCOL);
    frame[6] = ECCL_MSG_WELCOME;
    memset(frame + ECCL_WIRE_HEADER_SIZE, 0xff, 8); /* id 2^64 - 1, then 0 */
    assert_int_equal(eccl_wire_decode(ECCL_MSG_BATCH, p, hdr.length, &m), ECCL_ERR_PROTOCOL);
    memset(frame + ECCL_WIRE_HEADER_SIZE, 0, 8); /* id 0 */
    assert_int_equal(eccl_wire_decode(ECCL_MSG_BATCH, p, hdr.length, &m), ECCL_ERR_PROTOCOL);
    frame[ECCL_WIRE_HEADER_SIZE] = 103;
    assert_int_equal(eccl_wire_decode(ECCL_MSG_BATCH, p, hdr.length, &m), ECCL_OK);
    assert_int_equal(eccl_wire_batch_step_frame(p + 4 + 12 + 12 + 8 + 20, 12, 0, one),
                     ECCL_ERR_PROTOCOL); /* not a frame at all */
    free(f);
}

/* The owner's send, as eccl_wire_batch_put calls it: counts, and empties
 * the batch as taking it would. */
static eccl_wire_batch *g_put_batch;
static void count_send(void *to)
{
    (*(uint32_t *)to)++;
    eccl_wire_batch_free(g_put_batch);
}

/* A batch never passes its bound: a full one says so, and takes the entry
 * once it has been sent. */
static void test_batch_bound(void **state)
{
    (void)state;
    eccl_wire_batch b = {0};
    eccl_msg reg = {.type = ECCL_MSG_REGISTER};
    memset(reg.u.reg.p2p_addr, 'a', ECCL_WIRE_MAX_ADDR);
    uint32_t added = 0;
    eccl_result rc;
    /* Frames differ (the group), so none folds into a span. */
    while ((rc = eccl_wire_batch_add(&b, added, &reg)) == ECCL_OK) reg.u.reg.peer_group = ++added;
    assert_int_equal(rc, ECCL_ERR_AGAIN);
    assert_true(added > 1000);
    uint32_t len;
    uint8_t *f = eccl_wire_batch_take(&b, &len);
    assert_true(len <= ECCL_WIRE_HEADER_SIZE + ECCL_WIRE_MAX_BATCH);
    eccl_msg m;
    assert_int_equal(decode_frame(f, len, &m), ECCL_OK);
    assert_int_equal(m.u.batch.n, added);
    free(f);
    assert_int_equal(eccl_wire_batch_add(&b, added, &reg), ECCL_OK);
    eccl_wire_batch_free(&b);
    reg.u.reg.peer_group = 0;

    /* put: the owner is asked to send exactly when the batch is full, and
     * the entry then starts the next batch. */
    uint32_t sends = 0, n = 0;
    g_put_batch = &b;
    while (sends == 0) {
        assert_int_equal(eccl_wire_batch_put(&b, count_send, &sends, n, &reg, NULL, 0), ECCL_OK);
        reg.u.reg.peer_group = ++n;
    }
    assert_int_equal(n, added + 1);
    assert_int_equal(b.n, 1);
    eccl_wire_batch_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_roundtrip),
        cmocka_unit_test(test_batch_bound),
        cmocka_unit_test(test_batch_span),
        cmocka_unit_test(test_batch_step),
        cmocka_unit_test(test_max_length),
        cmocka_unit_test(test_roundtrip_extremes),
        cmocka_unit_test(test_golden_bytes),
        cmocka_unit_test(test_empty_payloads),
        cmocka_unit_test(test_header_rejects),
        cmocka_unit_test(test_encode_rejects),
        cmocka_unit_test(test_decode_rejects),
        cmocka_unit_test(test_sync_rejects),
        cmocka_unit_test(test_view_entries),
        cmocka_unit_test(test_peer_book_entries),
        cmocka_unit_test(test_peer_book_rejects),
        cmocka_unit_test(test_data_header),
        cmocka_unit_test(test_random_robustness),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
