/* A relay: one node of the coordinator's tree (docs/protocol.md, "Relays").
 *
 * Peers connect to a relay exactly as to the master; the relay speaks for
 * them to its parent (the master, or another relay) over one connection,
 * in BATCH frames: everything its children said during one step goes up
 * as one frame, everything the parent decided for them comes down as one.
 * It keeps its children alive itself (heartbeats both ways, silence and
 * hang-ups turned into "gone" entries), so the parent only watches its own
 * children: the master's message and timer load per decision is its
 * fan-out, not the job's size. The relay decides nothing: it holds no
 * membership, so its death loses no decision. The parent drops the peers
 * behind a dead relay and they come back through another coordinator.
 *
 * It does keep a book of its peers (id and address, from the WELCOMEs and
 * REGISTERs that pass it), so that the master can hand it a new ring's
 * share as one RING_SEG, which it expands into its peers' RINGs (wire.h).
 */
#include "eccl_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/tree_allreduce.h"
#include "proto/chan.h"
#include "proto/gate.h"
#include "proto/wire.h"
#include "sched/engine.h"
#include "state/hash.h"
#include "util/config.h"
#include "util/log.h"

#define RELAY_RBUF 512u
#define RELAY_BATCH_RBUF (ECCL_WIRE_HEADER_SIZE + ECCL_WIRE_MAX_BATCH)
#define RELAY_DEFAULT_TIMEOUT_MS 5000u
#ifndef RELAY_COALESCE_US
#define RELAY_COALESCE_US 20u
#endif
#define MS 1000000ull
#define RELAY_RETRY_NS (50 * MS)      /* first reconnect to the parent */
#define RELAY_RETRY_MAX_NS (1000 * MS)
#define NO_HANDLE UINT32_MAX

typedef struct rkid rkid;

/* Where one of our handles leads: a child, or a peer behind a child relay. */
typedef struct rroute {
    rkid *kid; /* NULL once gone */
    uint32_t sub; /* the child relay's handle, NO_HANDLE for the child itself */
    uint32_t gen, n_gen; /* entries staged for it in staging generation `gen` */
    int told;            /* the parent has had an entry for it: it knows the handle */
    eccl_wire_peer_ref book; /* its id (0 until its WELCOME passed) and address */
} rroute;

/* An entry staged for the parent's next batch (see up_put). */
typedef struct rstaged {
    uint32_t handle;
    uint32_t round;  /* its handle's entries staged before it, this batch */
    uint32_t cls;    /* 0: in handle order (a handle's first entry, gone
                        entries); 1: grouped with identical frames */
    uint32_t off, len; /* its frame in the staging arena */
    uint64_t key;      /* class 1: a hash of the frame (the sort needs no arena) */
} rstaged;

struct rkid {
    eccl_chan ch; /* first: ready pointers are channels */
    rkid *next, **pprev;
    uint32_t handle;        /* ours for it, NO_HANDLE until its first frame */
    uint64_t timeout_ns;
    uint64_t heartbeat_at;
    int is_relay;
    uint32_t *map;          /* a child relay's handle -> ours */
    uint32_t n_map, cap_map;
    eccl_wire_batch out;    /* a child relay's frames, sent at the end of the step */
    eccl_result out_err;    /* an entry `out` could not take: drop the child */
    rkid *dirty_next;       /* on the relay's dirty list: `out` or `out_err` to act on */
    int dirty;
    int ack_owed;           /* a child relay's batch not answered yet */
};

struct eccl_relay {
    eccl_env *env;
    eccl_env_release_fn env_release;
    eccl_engine eng;
    struct {
        int kind;
        eccl_listener *l;
    } listener;
    char addr[ECCL_ADDR_MAX];
    char parent_addr[ECCL_ADDR_MAX];
    eccl_chan up; /* first of its own struct: ready pointer */
    int up_open;
    uint64_t up_retry_at, up_backoff, retries;
    uint64_t up_heartbeat_at;
    uint64_t timeout_ns;
    uint64_t auth_refused; /* children refused: they did not prove the job's secret */
    eccl_gate gate;        /* accepted children still proving it */
    rkid *kids, *graveyard;
    rroute *route;
    uint32_t n_route, cap_route;
    eccl_wire_batch out; /* for the parent (built from `staged` when sent) */
    eccl_result up_err;  /* an entry `out` could not take: break the link */
    /* Entries for the parent, staged until the batch goes (up_put). */
    rstaged *staged;
    uint32_t n_staged, cap_staged;
    uint8_t *arena;
    size_t arena_len, arena_cap;
    uint32_t gen;        /* staging generation: one per batch sent */
    int up_unanswered;   /* a batch went up and the parent has not spoken since */
    rkid *dirty;         /* child relays with something for the end of the step */
    uint64_t coalesce_ns; /* ECCL_RELAY_COALESCE_US: hold the parent's batch this long */
    uint64_t up_since;    /* when the parent's batch got its first entry (0: empty) */
    uint64_t scan_at;
    int running;
};

static uint64_t now_ns(const eccl_relay *r) { return eccl_engine_now(&r->eng); }

/* ---- upward ----------------------------------------------------------------
 * Flow control: at most one batch is unanswered. The parent answers every
 * batch (its own batch for us, or a heartbeat when it has nothing), and
 * until then what our children say is staged, not sent. A parent that is
 * busy thus gets fewer, fuller batches instead of one per child frame
 * (the registration burst of a 96K-rank start-up was one frame per rank at
 * the master, 2 us each: most of its bootstrap). A staging area that
 * would pass ECCL_WIRE_MAX_BATCH goes anyway: memory stays bounded.
 *
 * Folding: when the batch goes, its entries are sorted by (round, class,
 * frame, handle), `round` being how many entries of the same handle were
 * staged before it, so each peer's frames keep their order; identical
 * frames of a round (votes, RING_READY of one epoch, a peers-pending
 * query: whatever order the children sent them in) then sit together in
 * handle order and fold into spans (wire.h): the parent takes a count
 * per relay, not an entry per peer. A handle's first entry (the parent
 * learns the handle from it, in order) and gone entries stay in handle
 * order, ahead of the grouped ones of their round. */

static void up_send(eccl_relay *r)
{
    uint32_t len;
    uint8_t *f = eccl_wire_batch_take(&r->out, &len);
    if (f && r->up_open && eccl_chan_send_frame(&r->up, f, len) == ECCL_OK) {
        eccl_chan_flush(&r->up);
        r->up_unanswered = 1;
    } else if (f && !r->up_open) {
        free(f);
    }
}

static void up_send_cb(void *r) { up_send(r); }

/* A total order (a handle has one entry per round); frames that hash
 * alike but differ only miss a fold. */
static int staged_cmp(const void *a, const void *b)
{
    const rstaged *x = a, *y = b;
    if (x->round != y->round) return x->round < y->round ? -1 : 1;
    if (x->cls != y->cls) return x->cls < y->cls ? -1 : 1;
    if (x->cls == 1) {
        if (x->len != y->len) return x->len < y->len ? -1 : 1;
        if (x->key != y->key) return x->key < y->key ? -1 : 1;
    }
    return (x->handle > y->handle) - (x->handle < y->handle);
}

/* Staged entry i as its handle's first REGISTER (0: it is something else;
 * a second REGISTER goes alone, for the parent to drop its peer alone). */
static int staged_register(const eccl_relay *r, uint32_t i, eccl_msg_register *out)
{
    const rstaged *e = &r->staged[i];
    eccl_msg m;
    if (!e->len || e->cls != 0 || eccl_wire_entry_type(r->arena + e->off) != ECCL_MSG_REGISTER ||
        eccl_wire_decode_entry(r->arena + e->off, e->len, &m) != ECCL_OK)
        return 0;
    *out = m.u.reg;
    return 1;
}

/* The sorted staging area's REGISTERs from entry i on, for handles h,
 * h+1, ... with one group and timeout (a job's start-up burst: newcomers
 * get handles as they first speak, so theirs are consecutive), as one
 * REGISTER_SEG (wire.h) into *frame; returns how many entries it took, 0
 * when fewer than two would go (the entry goes as it is). */
static uint32_t register_seg(eccl_relay *r, uint32_t i, uint8_t **frame, uint32_t *frame_len)
{
    eccl_msg_register first, next;
    if (!staged_register(r, i, &first)) return 0;
    uint32_t h0 = r->staged[i].handle, n = 1;
    size_t bytes = 12u + 2u + strlen(first.p2p_addr);
    while (i + n < r->n_staged && n < ECCL_WIRE_MAX_SEG && r->staged[i + n].handle == h0 + n &&
           staged_register(r, i + n, &next) && next.peer_group == first.peer_group &&
           next.peer_timeout_ms == first.peer_timeout_ms &&
           bytes + 2u + strlen(next.p2p_addr) <= ECCL_WIRE_REGISTER_SEG_MAX) {
        bytes += 2u + strlen(next.p2p_addr);
        n++;
    }
    if (n < 2) return 0;
    char(*addr)[ECCL_ADDR_MAX] = malloc(n * sizeof *addr);
    const char **addrs = malloc(n * sizeof *addrs);
    size_t cap = ECCL_WIRE_HEADER_SIZE + bytes;
    uint8_t *f = malloc(cap);
    size_t len = 0;
    if (addr && addrs && f) {
        for (uint32_t k = 0; k < n; k++) {
            staged_register(r, i + k, &next);
            memcpy(addr[k], next.p2p_addr, ECCL_ADDR_MAX);
            addrs[k] = addr[k];
        }
        eccl_msg m = {.type = ECCL_MSG_REGISTER_SEG};
        m.u.register_seg = (eccl_msg_register_seg){.peer_group = first.peer_group,
                                                   .peer_timeout_ms = first.peer_timeout_ms,
                                                   .n = n,
                                                   .addrs = addrs};
        len = eccl_wire_encode(&m, f, cap);
    }
    free(addr);
    free(addrs);
    if (!len) { /* out of memory: they go one by one */
        free(f);
        return 0;
    }
    *frame = f;
    *frame_len = (uint32_t)len;
    return n;
}

/* Sends what is staged, sorted (above), in as many batches as it takes. */
static void up_flush(eccl_relay *r)
{
    if (!r->n_staged) return;
    qsort(r->staged, r->n_staged, sizeof *r->staged, staged_cmp);
    for (uint32_t i = 0; i < r->n_staged && r->up_err == ECCL_OK;) {
        const rstaged *e = &r->staged[i];
        uint8_t *seg = NULL;
        uint32_t seg_len = 0, took = register_seg(r, i, &seg, &seg_len);
        eccl_result rc = took ? eccl_wire_batch_put(&r->out, up_send_cb, r, e->handle, NULL, seg, seg_len)
                              : eccl_wire_batch_put(&r->out, up_send_cb, r, e->handle, NULL,
                                                    e->len ? r->arena + e->off : NULL, e->len);
        free(seg);
        if (rc != ECCL_OK) r->up_err = rc;
        i += took ? took : 1;
    }
    r->n_staged = 0;
    r->arena_len = 0;
    r->gen++;
    if (r->up_err == ECCL_OK) up_send(r);
    else eccl_wire_batch_free(&r->out);
}

static void up_drop_staged(eccl_relay *r)
{
    r->n_staged = 0;
    r->arena_len = 0;
    r->gen++;
    eccl_wire_batch_free(&r->out);
}

/* For the parent: staged for its next batch (message m encoded, or frame
 * f as it is, or neither: a gone entry). An entry that cannot be staged
 * breaks the link (at the end of the step): the parent would wait for it
 * forever. */
static void up_put(eccl_relay *r, uint32_t h, const eccl_msg *m, const uint8_t *f, uint32_t len)
{
    if (r->up_err != ECCL_OK) return;
    eccl_result rc = ECCL_OK;
    if (m && (m->type == ECCL_MSG_DATA || m->type == ECCL_MSG_BATCH || m->type == ECCL_MSG_RELAY_HELLO))
        rc = ECCL_ERR_INVALID_ARG;
    size_t max = m ? ECCL_WIRE_HEADER_SIZE + eccl_wire_max_length(m->type) : len;
    if (rc == ECCL_OK && r->arena_len + max > r->arena_cap) {
        size_t cap = r->arena_cap ? r->arena_cap : 4096;
        while (cap < r->arena_len + max) cap *= 2;
        uint8_t *n = realloc(r->arena, cap);
        if (n) r->arena = n, r->arena_cap = cap;
        else rc = ECCL_ERR_NO_MEMORY;
    }
    if (rc == ECCL_OK && r->n_staged == r->cap_staged) {
        uint32_t cap = r->cap_staged ? 2 * r->cap_staged : 64;
        rstaged *n = realloc(r->staged, cap * sizeof *n);
        if (n) r->staged = n, r->cap_staged = cap;
        else rc = ECCL_ERR_NO_MEMORY;
    }
    uint32_t flen = 0;
    if (rc == ECCL_OK && m) {
        flen = (uint32_t)eccl_wire_encode(m, r->arena + r->arena_len, max);
        if (!flen) rc = ECCL_ERR_INVALID_ARG;
    } else if (rc == ECCL_OK && len) {
        memcpy(r->arena + r->arena_len, f, len);
        flen = len;
    }
    if (rc != ECCL_OK) {
        r->up_err = rc;
        return;
    }
    rroute *rt = &r->route[h];
    if (rt->gen != r->gen) rt->gen = r->gen, rt->n_gen = 0;
    rstaged *e = &r->staged[r->n_staged++];
    e->handle = h;
    e->round = rt->n_gen++;
    e->cls = flen && rt->told;
    e->off = (uint32_t)r->arena_len;
    e->len = flen;
    e->key = e->cls ? eccl_hash(ECCL_HASH_SIMPLE, r->arena + r->arena_len, flen) : 0;
    rt->told = 1;
    r->arena_len += flen;
    /* Bounded: past a full batch's worth it goes, answered or not. */
    if (r->arena_len + (size_t)r->n_staged * 12u >= ECCL_WIRE_MAX_BATCH) up_flush(r);
}

/* A new handle of ours, leading to kid (sub: its relay's handle). */
static uint32_t route_new(eccl_relay *r, rkid *kid, uint32_t sub)
{
    if (r->n_route == r->cap_route) {
        uint32_t cap = r->cap_route ? 2 * r->cap_route : 64;
        rroute *n = realloc(r->route, cap * sizeof *n);
        if (!n) return NO_HANDLE;
        r->route = n;
        r->cap_route = cap;
    }
    r->route[r->n_route] = (rroute){.kid = kid, .sub = sub};
    return r->n_route++;
}

/* ---- children -------------------------------------------------------------- */

static void kid_send(rkid *k, const eccl_msg *m)
{
    if (eccl_chan_send_msg(&k->ch, m) == ECCL_OK) eccl_chan_flush(&k->ch);
}

static void kid_batch_flush(rkid *k)
{
    uint32_t len;
    uint8_t *f = eccl_wire_batch_take(&k->out, &len);
    if (f) k->ack_owed = 0;
    if (f && eccl_chan_send_frame(&k->ch, f, len) == ECCL_OK) eccl_chan_flush(&k->ch);
}

static void kid_batch_flush_cb(void *k) { kid_batch_flush(k); }

static void kid_mark_dirty(eccl_relay *r, rkid *k)
{
    if (k->dirty) return;
    k->dirty = 1;
    k->dirty_next = r->dirty;
    r->dirty = k;
}

/* Drops a child; `tell` says the parent has not decided it itself, so it
 * hears of the loss (a gone entry per handle). */
static void kid_drop(eccl_relay *r, rkid *k, int tell)
{
    if (k->ch.closed) return;
    eccl_gate_leave(&r->gate, k);
    if (k->is_relay) {
        for (uint32_t i = 0; i < k->n_map; i++) {
            uint32_t h = k->map[i];
            if (h == NO_HANDLE || r->route[h].kid != k) continue;
            r->route[h].kid = NULL;
            if (tell) up_put(r, h, NULL, NULL, 0);
        }
    } else if (k->handle != NO_HANDLE) {
        r->route[k->handle].kid = NULL;
        if (tell) up_put(r, k->handle, NULL, NULL, 0);
    }
    *k->pprev = k->next;
    if (k->next) k->next->pprev = k->pprev;
    eccl_chan_close(&k->ch);
    eccl_wire_batch_free(&k->out);
    k->next = r->graveyard;
    r->graveyard = k;
}

/* ---- the book ----------------------------------------------------------------- */

static void book_address(rroute *rt, const eccl_msg_register *reg)
{
    memcpy(rt->book.addr, reg->p2p_addr, sizeof rt->book.addr);
}

/* A child relay's entry: its handle `h` becomes one of ours. The entry is
 * frame f (len 0: gone) as the child sent it, or message m (a newcomer of
 * the child's REGISTER_SEG, which we fold again with ours). */
static eccl_result kid_relay_entry(eccl_relay *r, rkid *k, uint32_t h, const eccl_msg *m,
                                   const uint8_t *f, uint32_t len)
{
    int gone = !m && !len;
    if (h > k->n_map) return ECCL_ERR_PROTOCOL; /* handles come in order */
    if (h == k->n_map) {
        if (gone) return ECCL_OK; /* gone before it said anything */
        if (k->n_map == k->cap_map) {
            uint32_t cap = k->cap_map ? 2 * k->cap_map : 64;
            uint32_t *n = realloc(k->map, cap * sizeof *n);
            if (!n) return ECCL_ERR_NO_MEMORY;
            k->map = n;
            k->cap_map = cap;
        }
        uint32_t ours = route_new(r, k, h);
        if (ours == NO_HANDLE) return ECCL_ERR_NO_MEMORY;
        k->map[k->n_map++] = ours;
    }
    uint32_t ours = k->map[h];
    if (ours == NO_HANDLE || r->route[ours].kid != k) return ECCL_OK; /* dropped above */
    if (gone) {
        r->route[ours].kid = NULL;
        k->map[h] = NO_HANDLE;
    }
    eccl_msg d;
    if (!m && len && eccl_wire_entry_type(f) == ECCL_MSG_REGISTER && eccl_wire_decode_entry(f, len, &d) == ECCL_OK)
        m = &d;
    if (m && m->type == ECCL_MSG_REGISTER) book_address(&r->route[ours], &m->u.reg);
    up_put(r, ours, m == &d ? NULL : m, f, len);
    return ECCL_OK;
}

/* A child relay's REGISTER_SEG at its handle h: each newcomer as if it had
 * come alone. */
static eccl_result kid_register_seg(eccl_relay *r, rkid *k, uint32_t h, const uint8_t *f, uint32_t len)
{
    eccl_msg seg;
    if (eccl_wire_decode_entry(f, len, &seg) != ECCL_OK) return ECCL_ERR_PROTOCOL;
    const eccl_msg_register_seg *s = &seg.u.register_seg;
    eccl_msg m = {.type = ECCL_MSG_REGISTER};
    m.u.reg.peer_group = s->peer_group;
    m.u.reg.peer_timeout_ms = s->peer_timeout_ms;
    uint32_t pos = 0, i = 0;
    while (eccl_wire_register_seg_next(s, &pos, &i, m.u.reg.p2p_addr)) {
        eccl_result rc = kid_relay_entry(r, k, h + i - 1, &m, NULL, 0);
        if (rc != ECCL_OK) return rc;
    }
    return ECCL_OK;
}

static eccl_result kid_on_msg(void *owner, eccl_chan *ch, const eccl_msg *m)
{
    eccl_relay *r = owner;
    rkid *k = (rkid *)ch;
    if (m->type == ECCL_MSG_HEARTBEAT) return ECCL_OK; /* ours to answer, not the parent's */
    if (m->type == ECCL_MSG_RELAY_HELLO) {
        if (k->is_relay || k->handle != NO_HANDLE) return ECCL_ERR_PROTOCOL;
        k->is_relay = 1;
        if (m->u.relay_hello.timeout_ms) k->timeout_ns = (uint64_t)m->u.relay_hello.timeout_ms * MS;
        return ECCL_OK;
    }
    if (k->is_relay) {
        if (m->type != ECCL_MSG_BATCH) return ECCL_ERR_PROTOCOL;
        uint32_t pos = 0, h, count, len;
        const uint8_t *f;
        /* Answered at the end of the step (flow control, see up_send). */
        k->ack_owed = 1;
        kid_mark_dirty(r, k);
        while (eccl_wire_batch_next(&m->u.batch, &pos, &h, &count, &f, &len)) {
            /* A span: its handles map to ours one by one, and fold again
             * upward where ours are consecutive too. */
            eccl_clock_work(r->env, 1);
            if (len && eccl_wire_entry_type(f) == ECCL_MSG_REGISTER_SEG) {
                eccl_result rc = count == 1 ? kid_register_seg(r, k, h, f, len) : ECCL_ERR_PROTOCOL;
                if (rc != ECCL_OK) return rc;
                continue;
            }
            for (uint32_t i = 0; i < count; i++) {
                eccl_result rc = kid_relay_entry(r, k, h + i, NULL, f, len);
                if (rc != ECCL_OK) return rc;
            }
        }
        /* Stopped early: a stepping span, which only goes down. */
        return pos == m->u.batch.len ? ECCL_OK : ECCL_ERR_PROTOCOL;
    }
    /* A peer speaks for itself only. */
    if (m->type == ECCL_MSG_BATCH || m->type == ECCL_MSG_REGISTER_SEG) return ECCL_ERR_PROTOCOL;
    if (m->type == ECCL_MSG_REGISTER && m->u.reg.peer_timeout_ms)
        k->timeout_ns = (uint64_t)m->u.reg.peer_timeout_ms * MS; /* we watch it now */
    if (k->handle == NO_HANDLE && (k->handle = route_new(r, k, NO_HANDLE)) == NO_HANDLE)
        return ECCL_ERR_NO_MEMORY;
    if (m->type == ECCL_MSG_REGISTER) book_address(&r->route[k->handle], &m->u.reg);
    up_put(r, k->handle, m, NULL, 0);
    return ECCL_OK;
}

static const eccl_chan_handler kid_handler = {kid_on_msg, eccl_chan_refuse_data,
                                               eccl_chan_refuse_data_done};

static void accept_kids(eccl_relay *r)
{
    for (;;) {
        rkid *k = calloc(1, sizeof *k);
        if (!k) return;
        /* A child relay's batches are big frames: room for one. */
        eccl_result rc = eccl_chan_accept(&k->ch, r->env, r->listener.l, k, RELAY_BATCH_RBUF);
        if (rc != ECCL_OK) {
            free(k);
            if (rc != ECCL_ERR_AGAIN) ECCL_WARN(r->env, "accept failed: %s", eccl_strerror(rc));
            return;
        }
        k->handle = NO_HANDLE;
        k->timeout_ns = r->timeout_ns;
        k->heartbeat_at = now_ns(r) + k->timeout_ns / 4;
        if (!r->up_open) { /* nobody to speak to: it must find another way in */
            eccl_chan_close(&k->ch);
            free(k);
            continue;
        }
        k->next = r->kids;
        if (k->next) k->next->pprev = &k->next;
        k->pprev = &r->kids;
        r->kids = k;
        if (r->scan_at > k->heartbeat_at) r->scan_at = k->heartbeat_at;
        /* Until it proves the secret: a bounded few per host and in all. */
        void *evict = NULL;
        int in = eccl_gate_enter(&r->gate, k, &k->ch, eccl_gate_host_of(r->env, k->ch.conn), now_ns(r), &evict);
        if (evict) kid_drop(r, evict, 1);
        if (!in) kid_drop(r, k, 1);
        if (eccl_gate_deadline(&r->gate) < r->scan_at) r->scan_at = eccl_gate_deadline(&r->gate);
    }
}

static void kid_service(eccl_relay *r, rkid *k)
{
    if (k->ch.closed) return;
    eccl_result rc = eccl_chan_read(&k->ch, &kid_handler, r, SIZE_MAX);
    if (rc == ECCL_OK) rc = eccl_chan_flush(&k->ch);
    if (rc != ECCL_OK) {
        if (rc == ECCL_ERR_PROTOCOL) {
            /* The parent decides what a violation costs: it gets the
             * violating peer gone, as for a hang-up. */
            ECCL_WARN(r->env, "a child broke the protocol: dropped");
        }
        if (rc == ECCL_ERR_AUTH && eccl_auth_log_due(++r->auth_refused))
            ECCL_WARN(r->env, "refused a connection that failed authentication (%llu so far): %s",
                      (unsigned long long)r->auth_refused, k->ch.auth_why ? k->ch.auth_why : "its TLS handshake failed");
        kid_drop(r, k, 1);
    }
}

/* ---- the parent ------------------------------------------------------------- */

static void up_close(eccl_relay *r, eccl_result why);

/* Frame f (len 0: a gone entry) from the parent for our handle h: to the
 * child, or into a child relay's batch. */
static eccl_result down_deliver(eccl_relay *r, uint32_t h, const uint8_t *f, uint32_t len)
{
    rroute *rt = &r->route[h];
    rkid *k = rt->kid;
    if (!k) return ECCL_OK; /* gone here: the parent hears it from us */
    if (rt->sub != NO_HANDLE) {
        eccl_result rc = eccl_wire_batch_put(&k->out, kid_batch_flush_cb, k, rt->sub, NULL, f, len);
        if (rc != ECCL_OK || !k->out.folded) eccl_clock_work(r->env, 1);
        if (rc != ECCL_OK && k->out_err == ECCL_OK) k->out_err = rc;
        kid_mark_dirty(r, k);
        if (!len) {
            rt->kid = NULL;
            k->map[rt->sub] = NO_HANDLE;
        }
        return ECCL_OK;
    }
    if (!len) { /* the parent dropped it: it knows */
        kid_drop(r, k, 0);
        return ECCL_OK;
    }
    uint8_t *copy = malloc(len);
    if (!copy) return ECCL_ERR_NO_MEMORY;
    memcpy(copy, f, len);
    if (eccl_chan_send_frame(&k->ch, copy, len) == ECCL_OK) eccl_chan_flush(&k->ch);
    return ECCL_OK;
}

/* The book's entry for rank first_rank + i of a RING_SEG. */
static const eccl_wire_peer_ref *booked(const eccl_relay *r, const eccl_msg_ring_seg *s, uint32_t i)
{
    return &r->route[eccl_wire_ring_seg_handle(s, i)].book;
}

/* A RING_SEG (wire.h): each of its ranks' RING, from our book inside the
 * run (ring neighbours, the run's tree, coll/tree_allreduce.h) and from
 * the master's refs at its edges. Every handle must be ours and booked
 * before anything goes: the master named peers we never saw register. */
static eccl_result ring_seg_expand(eccl_relay *r, const uint8_t *f, uint32_t len)
{
    eccl_msg in;
    if (eccl_wire_decode_entry(f, len, &in) != ECCL_OK) return ECCL_ERR_PROTOCOL;
    const eccl_msg_ring_seg *s = &in.u.ring_seg;
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t h = eccl_wire_ring_seg_handle(s, i);
        if (h >= r->n_route || !r->route[h].book.peer_id) return ECCL_ERR_PROTOCOL;
    }
    eccl_msg out = {.type = ECCL_MSG_RING};
    eccl_msg_ring *g = &out.u.ring;
    g->peer_group = s->peer_group;
    g->epoch = s->epoch;
    g->world_size = s->world_size;
    g->local_size = s->local_size;
    g->host_ranks = s->host_ranks;
    uint8_t frame[ECCL_WIRE_HEADER_SIZE + sizeof(eccl_msg_ring) + 64];
    for (uint32_t i = 0; i < s->n; i++) {
        g->rank = s->first_rank + i;
        g->prev = i ? *booked(r, s, i - 1) : s->prev;
        g->next = i + 1 < s->n ? *booked(r, s, i + 1) : s->next;
        g->tree_parent = i ? *booked(r, s, eccl_tree_heap_parent(i)) : s->root_parent;
        memset(g->tree_child, 0, sizeof g->tree_child);
        uint32_t nc = 0;
        for (int c = 0; c < 2; c++) {
            uint32_t j = eccl_tree_heap_child(i, s->n, c);
            if (j != UINT32_MAX) g->tree_child[nc++] = booked(r, s, j)->peer_id;
        }
        for (int c = 0; i == 0 && c < 2; c++)
            if (s->root_child[c]) g->tree_child[nc++] = s->root_child[c];
        size_t flen = eccl_wire_encode(&out, frame, sizeof frame);
        if (!flen) return ECCL_ERR_PROTOCOL;
        eccl_clock_work(r->env, 1);
        eccl_result rc = down_deliver(r, eccl_wire_ring_seg_handle(s, i), frame, (uint32_t)flen);
        if (rc != ECCL_OK) return rc;
    }
    return ECCL_OK;
}

static eccl_result up_on_msg(void *owner, eccl_chan *ch, const eccl_msg *m)
{
    eccl_relay *r = owner;
    (void)ch;
    r->up_unanswered = 0; /* the parent spoke: our last batch was taken */
    if (m->type == ECCL_MSG_HEARTBEAT) return ECCL_OK;
    if (m->type != ECCL_MSG_BATCH) return ECCL_ERR_PROTOCOL;
    uint32_t pos = 0, h0, count, len;
    const uint8_t *f0;
    int step;
    uint8_t stepped[ECCL_WIRE_HEADER_SIZE + 12u];
    while (eccl_wire_batch_next_step(&m->u.batch, &pos, &h0, &count, &step, &f0, &len)) {
        if (h0 >= r->n_route || count > r->n_route - h0) return ECCL_ERR_PROTOCOL;
        if (step && len != sizeof stepped) return ECCL_ERR_PROTOCOL;
        uint16_t type = len ? eccl_wire_entry_type(f0) : 0;
        if (type == ECCL_MSG_RING_SEG) { /* ours to expand, once */
            eccl_result rc = count == 1 && !step ? ring_seg_expand(r, f0, len) : ECCL_ERR_PROTOCOL;
            if (rc != ECCL_OK) return rc;
            continue;
        }
        /* Our children's ids, for the book: a stepping span's go up by one
         * a handle. */
        eccl_msg w;
        uint64_t id0 = type == ECCL_MSG_WELCOME && eccl_wire_decode_entry(f0, len, &w) == ECCL_OK
                           ? w.u.welcome.peer_id
                           : 0;
        /* A span is one decision for each of its handles: expanded here,
         * where each is a child's frame or an entry for a child relay
         * (folding again where its handles are consecutive). */
        for (uint32_t h = h0; h - h0 < count; h++) {
            const uint8_t *f = f0;
            if (step) {
                /* A stepping span (WELCOMEs of consecutive ids): this
                 * handle's own frame. */
                if (eccl_wire_batch_step_frame(f0, len, h - h0, stepped) != ECCL_OK)
                    return ECCL_ERR_PROTOCOL;
                f = stepped;
            }
            if (id0) r->route[h].book.peer_id = id0 + (step ? h - h0 : 0);
            eccl_result rc = down_deliver(r, h, f, len);
            if (rc != ECCL_OK) return rc;
        }
    }
    return ECCL_OK;
}

static const eccl_chan_handler up_handler = {up_on_msg, eccl_chan_refuse_data,
                                              eccl_chan_refuse_data_done};

/* Connects to the parent and says what we are. Peers can attach only while
 * this link is up. */
static eccl_result up_open(eccl_relay *r)
{
    eccl_conn *conn = NULL;
    eccl_result rc = eccl_chan_init(&r->up, r->env, NULL, RELAY_BATCH_RBUF);
    if (rc != ECCL_OK) return rc;
    rc = r->env->net->connect(r->env->net_ctx, r->parent_addr, &r->up, &conn);
    if (rc != ECCL_OK) {
        eccl_chan_close(&r->up);
        return rc;
    }
    r->up_open = 1;
    if ((rc = eccl_chan_attach(&r->up, conn, 1)) != ECCL_OK) return rc;
    r->up_err = ECCL_OK;
    r->up_unanswered = 0;
    r->n_route = 0; /* a new relay to the parent: handles start over */
    eccl_msg h = {.type = ECCL_MSG_RELAY_HELLO};
    h.u.relay_hello.timeout_ms = (uint32_t)(r->timeout_ns / MS);
    r->up_heartbeat_at = now_ns(r) + r->timeout_ns / 4;
    rc = eccl_chan_send_msg(&r->up, &h);
    return rc == ECCL_OK ? eccl_chan_flush(&r->up) : rc;
}

static void up_retry_schedule(eccl_relay *r)
{
    if (r->up_backoff < RELAY_RETRY_NS) r->up_backoff = RELAY_RETRY_NS;
    /* Jittered down by up to half, deterministically (core has no random
     * source): relays cut off together must not all knock together. */
    uint64_t salt[2] = {eccl_hash(ECCL_HASH_SIMPLE, r->addr, strlen(r->addr)), r->retries++};
    uint64_t jitter = eccl_hash(ECCL_HASH_SIMPLE, salt, sizeof salt) % (r->up_backoff / 2);
    r->up_retry_at = now_ns(r) + r->up_backoff - jitter;
    r->up_backoff = r->up_backoff * 2 > RELAY_RETRY_MAX_NS ? RELAY_RETRY_MAX_NS : r->up_backoff * 2;
}

/* The parent is gone: so is every path our children had to the decisions.
 * They hear it as a lost master, at once, instead of waiting out a
 * timeout; we knock on the parent's door again. */
static void up_close(eccl_relay *r, eccl_result why)
{
    if (!r->up_open) return;
    ECCL_WARN(r->env, "relay lost its parent %s: %s", r->parent_addr, eccl_strerror(why));
    eccl_chan_close(&r->up);
    r->up_open = 0;
    up_drop_staged(r);
    while (r->kids) kid_drop(r, r->kids, 0);
    up_retry_schedule(r);
}

static void up_service(eccl_relay *r)
{
    if (!r->up_open) return;
    eccl_result rc = eccl_chan_read(&r->up, &up_handler, r, SIZE_MAX);
    if (rc == ECCL_OK) rc = eccl_chan_flush(&r->up);
    if (rc == ECCL_ERR_AUTH)
        ECCL_ERROR(r->env, "the link to the parent %s failed authentication: %s", r->parent_addr,
                   r->up.auth_why ? r->up.auth_why : "the TLS handshake failed");
    if (rc != ECCL_OK) up_close(r, rc);
}

/* ---- the engine -------------------------------------------------------------- */

static void scan(eccl_relay *r, uint64_t now)
{
    r->scan_at = ECCL_NO_DEADLINE;
    for (rkid *k; (k = eccl_gate_expired(&r->gate, now)) != NULL;) kid_drop(r, k, 1);
    r->scan_at = eccl_gate_deadline(&r->gate);
    eccl_msg hb = {.type = ECCL_MSG_HEARTBEAT};
    for (rkid *k = r->kids, *n; k; k = n) {
        n = k->next;
        if (now - k->ch.last_rx_ns > k->timeout_ns) {
            kid_drop(r, k, 1);
            continue;
        }
        /* Heartbeats go in batches, as the master's (see heartbeat_slack). */
        if (now + k->timeout_ns / 16 >= k->heartbeat_at) {
            kid_send(k, &hb);
            k->heartbeat_at = now + k->timeout_ns / 4;
        }
        uint64_t t = k->ch.last_rx_ns + k->timeout_ns + 1;
        if (k->heartbeat_at < t) t = k->heartbeat_at;
        if (t < r->scan_at) r->scan_at = t;
    }
}

static uint64_t relay_step(void *owner, void **ready, int n, int *again)
{
    eccl_relay *r = owner;
    *again = 0;
    for (int i = 0; i < n; i++) {
        if (*(int *)ready[i] == ECCL_HANDLE_LISTENER) accept_kids(r);
        else if (ready[i] == &r->up) up_service(r);
        else kid_service(r, ready[i]);
    }
    uint64_t now = now_ns(r);
    if (r->up_open && now - r->up.last_rx_ns > r->timeout_ns) up_close(r, ECCL_ERR_TIMEOUT);
    if (!r->up_open && r->up_retry_at && now >= r->up_retry_at) {
        r->up_retry_at = 0;
        eccl_result rc = up_open(r);
        if (rc != ECCL_OK) {
            if (r->up_open) {
                eccl_chan_close(&r->up);
                r->up_open = 0;
            }
            up_retry_schedule(r);
        }
    }
    if (r->up_open && now >= r->up_heartbeat_at) {
        eccl_msg hb = {.type = ECCL_MSG_HEARTBEAT};
        if (eccl_chan_send_msg(&r->up, &hb) == ECCL_OK) eccl_chan_flush(&r->up);
        r->up_heartbeat_at = now + r->timeout_ns / 4;
    }
    if (now >= r->scan_at) scan(r, now);
    /* What this step heard or was told: one frame each way. Only the
     * children told something are visited: a step per arriving frame over
     * all ~sqrt(N) children was 3% of a 96K-rank simulation. Dropped ones
     * wait in the graveyard until reap, after the step. */
    while (r->dirty) {
        rkid *k = r->dirty;
        r->dirty = k->dirty_next;
        k->dirty = 0;
        if (k->out_err != ECCL_OK) {
            kid_drop(r, k, 1);
        } else if (!k->ch.closed) {
            kid_batch_flush(k);
            if (k->ack_owed) { /* nothing for it: a heartbeat answers its batch */
                eccl_msg hb = {.type = ECCL_MSG_HEARTBEAT};
                kid_send(k, &hb);
                k->ack_owed = 0;
            }
        }
    }
    uint64_t next = r->scan_at;
    if (r->up_err != ECCL_OK) {
        up_close(r, r->up_err);
    } else if (r->n_staged > 0) {
        /* Entries heard at nearly the same time travel up as one frame:
         * the parent pays per frame. While our last batch is unanswered
         * they wait for the answer (which wakes us). */
        if (!r->up_since) r->up_since = now;
        if (r->up_unanswered) {
        } else if (now - r->up_since >= r->coalesce_ns) {
            up_flush(r);
            r->up_since = 0;
        } else if (r->up_since + r->coalesce_ns < next) {
            next = r->up_since + r->coalesce_ns;
        }
    } else {
        r->up_since = 0;
    }
    if (r->up_open) {
        uint64_t t = r->up.last_rx_ns + r->timeout_ns + 1;
        if (t < next) next = t;
        if (r->up_heartbeat_at < next) next = r->up_heartbeat_at;
    } else if (r->up_retry_at && r->up_retry_at < next) {
        next = r->up_retry_at;
    }
    return next;
}

static void relay_reap(void *owner)
{
    eccl_relay *r = owner;
    for (rkid *k = r->graveyard, *n; k; k = n) {
        n = k->next;
        free(k->map);
        free(k);
    }
    r->graveyard = NULL;
}

static const eccl_engine_ops relay_engine_ops = {relay_step, relay_reap, NULL};

/* ---- public API ----------------------------------------------------------------- */

eccl_result eccl_relay_create_with_env(eccl_env *env, eccl_env_release_fn release,
                                       const char *listen_addr, const char *parent_addr,
                                       eccl_relay **out)
{
    if (!listen_addr || !parent_addr || !out || strlen(listen_addr) >= ECCL_ADDR_MAX ||
        strlen(parent_addr) >= ECCL_ADDR_MAX) {
        release(env);
        return ECCL_ERR_INVALID_ARG;
    }
    eccl_relay *r = calloc(1, sizeof *r);
    if (!r) {
        release(env);
        return ECCL_ERR_NO_MEMORY;
    }
    r->env = env;
    r->env_release = release;
    r->listener.kind = ECCL_HANDLE_LISTENER;
    r->scan_at = ECCL_NO_DEADLINE;
    snprintf(r->parent_addr, sizeof r->parent_addr, "%s", parent_addr);
    snprintf(env->name, sizeof env->name, "relay");
    r->coalesce_ns = eccl_config_uint(env, "ECCL_RELAY_COALESCE_US", 0, 1000, RELAY_COALESCE_US) * 1000;
    r->timeout_ns = eccl_config_uint(env, "ECCL_RELAY_TIMEOUT_MS", 10, 3600000,
                                     RELAY_DEFAULT_TIMEOUT_MS) * MS;
    eccl_result rc = eccl_gate_init(&r->gate, env);
    if (rc != ECCL_OK) goto fail;
    rc = eccl_engine_init(&r->eng, env, &relay_engine_ops, r);
    if (rc != ECCL_OK) {
        eccl_gate_free(&r->gate);
        goto fail;
    }
    rc = env->net->listen(env->net_ctx, listen_addr, &r->listener, &r->listener.l, r->addr);
    if (rc != ECCL_OK) {
        ECCL_ERROR(env, "relay cannot listen on %s: %s", listen_addr, eccl_strerror(rc));
        eccl_engine_fini(&r->eng);
        eccl_gate_free(&r->gate);
        goto fail;
    }
    *out = r;
    return ECCL_OK;
fail:
    free(r);
    release(env);
    return rc;
}

eccl_result eccl_relay_address(const eccl_relay *r, char *buf, size_t len)
{
    if (!r || !buf || len == 0 || strlen(r->addr) >= len) return ECCL_ERR_INVALID_ARG;
    memcpy(buf, r->addr, strlen(r->addr) + 1);
    return ECCL_OK;
}

eccl_result eccl_relay_run(eccl_relay *r)
{
    if (!r) return ECCL_ERR_INVALID_ARG;
    if (r->running) return ECCL_ERR_BUSY;
    /* Before any child can knock: a child that finds no parent is turned
     * away. A parent not up yet is retried with back-off. */
    if (!r->up_open && !r->up_retry_at && up_open(r) != ECCL_OK) {
        if (r->up_open) eccl_chan_close(&r->up);
        r->up_open = 0;
        up_retry_schedule(r);
    }
    eccl_result rc = eccl_engine_start(&r->eng, "eccl-relay");
    if (rc == ECCL_OK) r->running = 1;
    return rc;
}

eccl_result eccl_relay_stop(eccl_relay *r)
{
    if (!r) return ECCL_ERR_INVALID_ARG;
    if (r->running) eccl_engine_stop(&r->eng);
    r->running = 0;
    while (r->kids) kid_drop(r, r->kids, 0);
    if (r->up_open) eccl_chan_close(&r->up);
    r->up_open = 0;
    r->up_retry_at = 0;
    if (r->listener.l) r->env->net->close_listener(r->env->net_ctx, r->listener.l);
    r->listener.l = NULL;
    relay_reap(r);
    return ECCL_OK;
}

void eccl_relay_destroy(eccl_relay *r)
{
    if (!r) return;
    eccl_relay_stop(r);
    eccl_wire_batch_free(&r->out);
    free(r->staged);
    free(r->arena);
    free(r->route);
    eccl_engine_fini(&r->eng);
    eccl_gate_free(&r->gate);
    r->env_release(r->env);
    free(r);
}
