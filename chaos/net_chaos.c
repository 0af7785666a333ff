/* The chaos net (chaos.h): an eccl_net_ops table over another one.
 *
 * A connection this net opened ("shaped") holds its bytes in two delay
 * lines: what core sends waits in `tx` until it is due, then goes to the
 * inner conn; what the inner conn delivers waits in `rx` until it is due,
 * then core may read it. A chunk starts at the latest of now, the pair's
 * bucket, the conn's own (flow=) and the buckets of the wires it crosses,
 * and is due when its slowest of them has carried it, plus latency and
 * jitter, never before the chunk ahead of it (a stream does not reorder).
 * Each bucket is then busy for size / its bandwidth. Each line holds at most the plan's buffer:
 * a full tx line makes send take 0 bytes (core then waits for writable),
 * a full rx line stops reading the inner conn (TCP's window does the rest).
 * Under a partition nothing moves either way and connects are refused;
 * when it heals, what was held flows, as after TCP's retransmissions.
 * A reset closes the inner conn: both ends see ECCL_ERR_CLOSED.
 *
 * Accepted connections pass through untouched (the dialling side shapes
 * them), but their frames count towards a kill like any other.
 *
 * Closing a shaped conn whose tx line still holds bytes does what closing a
 * TCP socket does: they are still delivered. The conn lingers, unseen by
 * core, until its line is flushed (or it fails); the net's unwrap (the
 * env's destroy, a process's end) waits for lingering conns up to
 * LINGER_NS, as the kernel would go on sending after close.
 *
 * `wait` runs the inner wait until the next chunk is due (or a rule starts
 * or ends), then moves what is due and reports the conns core can act on.
 * Conns closed while a wait runs are freed when no wait runs any more: the
 * inner wait may still hand their pointers back.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chaos.h"
#include "proto/auth.h"
#include "proto/wire.h"
#include "util/addr.h"
#include "util/log.h"
#include "util/rand.h"

#define HOST_MAX 64
#define SLICE (64u << 10) /* read from the inner conn, and queue a write, this much at a time */
#define LINGER_NS 5000000000ull /* unwrap waits this long at most for closed conns' bytes */

enum { K_CONN = 1, K_LISTENER = 2 };

typedef struct chunk {
    struct chunk *next;
    uint64_t due_ns;
    size_t len, off;
    unsigned char data[];
} chunk;

typedef struct line { /* one direction of a shaped conn */
    chunk *head, *tail;
    size_t bytes;
} line;

typedef struct pair { /* this net's traffic with one peer host */
    struct pair *next;
    char host[HOST_MAX];
    uint64_t free_at[2]; /* when the send / receive bucket is free again */
} pair;

typedef struct cconn {
    int kind; /* K_CONN: the inner wait hands conns and listeners back alike */
    struct cconn *next;
    eccl_conn *inner; /* NULL once reset, or when the connect was refused */
    void *user;
    pair *pair;       /* NULL: accepted, passed through */
    uint64_t flow_free_at[2]; /* its own send / receive bucket (flow=) */
    uint64_t rng;     /* splitmix64 state: this conn's jitter and reset draws */
    line tx, rx;
    int want_read, want_write;   /* core's interest */
    int inner_write;             /* a chunk is due but the inner conn took only part of it */
    int set_read, set_write;     /* the interest last set on the inner conn */
    int ready;                   /* the inner wait reported it */
    eccl_result err;             /* from now on, what send and recv say (reset, refused, failed send) */
    eccl_result rx_end;          /* the inner conn's end of stream or error, once rx is drained */
    uint64_t next_reset_ns;      /* UINT64_MAX: none drawn */
    /* Frame boundaries of what core sends, for kills by frame. */
    unsigned char hdr[ECCL_WIRE_HEADER_SIZE];
    size_t hdr_have;
    uint64_t body_left;
    int not_frames; /* a header failed to decode: counting stopped */
    int past_start; /* the stream's first header-sized bytes went by */
    int closed; /* core closed it while a wait ran: freed after */
    int lingering; /* core closed it with bytes in tx: they go first */
} cconn;

typedef struct clistener {
    int kind; /* K_LISTENER */
    struct clistener *next;
    eccl_listener *inner;
    void *user;
    int closed;
} clistener;

typedef struct chaos_net {
    eccl_env *env; /* the env it is wrapped into: its clock, sync and log */
    const eccl_net_ops *inner;
    void *inner_ctx;
    eccl_chaos_plan *plan;
    char self[HOST_MAX];
    void (*kill)(void *);
    void *kill_arg;
    int killing;
    uint64_t t0;
    uint16_t kill_type;
    uint64_t kill_frames, kill_at_ns, frames;
    eccl_mutex *mu;
    cconn *conns, *grave;
    clistener *listeners, *grave_l;
    int waiters;
    uint64_t conn_seq;
    pair *pairs;
    uint64_t *wires;  /* per wire of the plan: when it is free again */
    size_t nwires;
    uint64_t *own_wires; /* this process's, until the env hands shared ones */
    eccl_chaos_stats stats;
} chaos_net;

static uint64_t now_ns(chaos_net *n)
{
    const uint64_t t = n->env->clock->now_ns(n->env->clock_ctx);
    return t > n->t0 ? t - n->t0 : 0;
}
static void lock(chaos_net *n) { n->env->sync->lock(n->env->sync_ctx, n->mu); }
static void unlock(chaos_net *n) { n->env->sync->unlock(n->env->sync_ctx, n->mu); }

/* The host of an address, as the master groups ranks (util/addr.h). */
static void host_of(const char *addr, char *out)
{
    size_t len;
    const char *host = eccl_addr_host(addr, &len);
    if (len >= HOST_MAX) len = HOST_MAX - 1;
    memcpy(out, host, len);
    out[len] = '\0';
}

static pair *get_pair(chaos_net *n, const char *host)
{
    for (pair *p = n->pairs; p; p = p->next)
        if (!strcmp(p->host, host)) return p;
    pair *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    snprintf(p->host, sizeof p->host, "%s", host);
    p->next = n->pairs;
    n->pairs = p;
    return p;
}

static void line_free(line *l)
{
    for (chunk *c = l->head, *next; c; c = next) next = c->next, free(c);
    memset(l, 0, sizeof *l);
}

/* Appends room for len bytes due at due_ns (never before the chunk ahead),
 * for the caller to fill; NULL when out of memory. */
static chunk *line_push(line *l, size_t len, uint64_t due_ns)
{
    chunk *c = malloc(sizeof *c + len);
    if (!c) return NULL;
    c->next = NULL, c->len = len, c->off = 0;
    c->due_ns = l->tail && l->tail->due_ns > due_ns ? l->tail->due_ns : due_ns;
    if (l->tail) l->tail->next = c;
    else l->head = c;
    l->tail = c;
    l->bytes += len;
    return c;
}

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* Time to carry len bytes at bw (0: no limit). */
static uint64_t carry_ns(size_t len, double bw) { return bw > 0 ? (uint64_t)llround((double)len * 1e9 / bw) : 0; }

/* Takes a wire from `start` for `busy` ns: its bucket becomes the later of
 * its time and start, plus busy. Other processes may take it at once
 * (shared buckets): compare-and-swap. */
static void take_wire(uint64_t *w, uint64_t start, uint64_t busy)
{
    uint64_t old = __atomic_load_n(w, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(w, &old, max_u64(old, start) + busy, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

/* When `len` bytes entering direction dir (0: to the peer, 1: from it) now are due. */
static uint64_t due_at(chaos_net *n, cconn *c, int dir, size_t len, uint64_t now, const eccl_chaos_path *path)
{
    eccl_chaos_wire via[ECCL_CHAOS_VIA_MAX];
    const int nvia = eccl_chaos_plan_route(n->plan, dir ? c->pair->host : n->self, dir ? n->self : c->pair->host,
                                           now, via);
    uint64_t start = max_u64(max_u64(now, c->pair->free_at[dir]), c->flow_free_at[dir]);
    for (int i = 0; i < nvia; i++)
        if (via[i].id < n->nwires) start = max_u64(start, __atomic_load_n(&n->wires[via[i].id], __ATOMIC_RELAXED));
    const uint64_t pair_ns = carry_ns(len, path->bandwidth_Bps), flow_ns = carry_ns(len, path->flow_Bps);
    uint64_t slowest = max_u64(pair_ns, flow_ns);
    c->pair->free_at[dir] = start + pair_ns;
    c->flow_free_at[dir] = start + flow_ns;
    for (int i = 0; i < nvia; i++) {
        if (via[i].id >= n->nwires) continue;
        const uint64_t busy = carry_ns(len, via[i].bandwidth_Bps);
        take_wire(&n->wires[via[i].id], start, busy);
        slowest = max_u64(slowest, busy);
    }
    uint64_t jitter = path->jitter_ns ? eccl_splitmix64(&c->rng) % (path->jitter_ns + 1) : 0;
    if (path->latency_ns || jitter || slowest) n->stats.delayed_bytes += len;
    return start + slowest + path->latency_ns + jitter;
}

/* Counts the frames in bytes core sends; 1 when the plan's kill is due. */
static int count_frames(chaos_net *n, cconn *c, const eccl_iov *iov, int niov, size_t len)
{
    if (!n->kill_frames || c->not_frames) return 0;
    for (int i = 0; i < niov && len; i++) {
        const unsigned char *p = iov[i].base;
        size_t k = iov[i].len < len ? iov[i].len : len;
        len -= k;
        while (k) {
            if (c->body_left) {
                size_t s = c->body_left < k ? (size_t)c->body_left : k;
                c->body_left -= s, k -= s;
                if (p) p += s;
                continue;
            }
            size_t s = sizeof c->hdr - c->hdr_have < k ? sizeof c->hdr - c->hdr_have : k;
            if (p) memcpy(c->hdr + c->hdr_have, p, s), p += s;
            else memset(c->hdr + c->hdr_have, 0, s);
            c->hdr_have += s, k -= s;
            if (c->hdr_have < sizeof c->hdr) break;
            c->hdr_have = 0;
            eccl_wire_header h;
            int start = !c->past_start;
            c->past_start = 1;
            if (eccl_wire_header_decode(c->hdr, &h) != ECCL_OK) {
                /* The opening handshake's HELLO and PROOF (proto/auth.h)
                 * come before the frames. */
                if (start && memcmp(c->hdr, ECCL_AUTH_MAGIC, ECCL_AUTH_MAGIC_BYTES) == 0) {
                    c->body_left = ECCL_AUTH_HELLO_BYTES + ECCL_AUTH_PROOF_BYTES - sizeof c->hdr;
                    continue;
                }
                c->not_frames = 1; /* not eccl's wire format: nothing here to count */
                return 0;
            }
            c->body_left = h.length;
            if (h.type == n->kill_type && ++n->frames == n->kill_frames) return 1;
        }
    }
    return 0;
}

/* Sets the inner conn's interest from what the lines need. */
static void inner_interest(chaos_net *n, cconn *c, const eccl_chaos_path *path)
{
    if (!c->inner) return;
    int r = !c->lingering && !path->partitioned && c->rx.bytes < eccl_chaos_plan_buffer(n->plan) &&
            c->rx_end == ECCL_OK;
    int w = c->inner_write;
    if (r != c->set_read || w != c->set_write) {
        c->set_read = r, c->set_write = w;
        n->inner->set_interest(n->inner_ctx, c->inner, r, w);
    }
}

static void reset_conn(chaos_net *n, cconn *c)
{
    if (c->inner) n->inner->close(n->inner_ctx, c->inner);
    c->inner = NULL;
    c->err = ECCL_ERR_CLOSED;
    line_free(&c->tx);
    line_free(&c->rx);
    n->stats.resets++;
}

/* Moves what is due on a shaped conn: resets, tx to the inner conn, the
 * inner conn into rx. */
static void pump(chaos_net *n, cconn *c, uint64_t now)
{
    if (c->err != ECCL_OK || !c->inner) return;
    eccl_chaos_path path;
    eccl_chaos_plan_path(n->plan, n->self, c->pair->host, now, &path);
    if (path.reset_per_s <= 0) {
        c->next_reset_ns = UINT64_MAX;
    } else if (c->next_reset_ns == UINT64_MAX) {
        double u = ((double)(eccl_splitmix64(&c->rng) >> 11) + 0.5) / 9007199254740992.0;
        c->next_reset_ns = now + (uint64_t)llround(-log(u) / path.reset_per_s * 1e9);
    } else if (now >= c->next_reset_ns) {
        reset_conn(n, c);
        return;
    }
    int want_write = 0;
    while (!path.partitioned && c->tx.head && c->tx.head->due_ns <= now) {
        chunk *h = c->tx.head;
        eccl_iov iov = {h->data + h->off, h->len - h->off};
        size_t sent = 0;
        eccl_result rc = n->inner->send(n->inner_ctx, c->inner, &iov, 1, &sent);
        if (rc != ECCL_OK) {
            c->err = rc;
            return;
        }
        h->off += sent;
        c->tx.bytes -= sent;
        if (h->off < h->len) {
            want_write = 1;
            break;
        }
        c->tx.head = h->next;
        if (!c->tx.head) c->tx.tail = NULL;
        free(h);
    }
    c->inner_write = want_write;
    const size_t cap = eccl_chaos_plan_buffer(n->plan);
    while (!c->lingering && !path.partitioned && c->rx_end == ECCL_OK && c->rx.bytes < cap) {
        unsigned char buf[SLICE];
        size_t got = 0, room = cap - c->rx.bytes < sizeof buf ? cap - c->rx.bytes : sizeof buf;
        eccl_result rc = n->inner->recv(n->inner_ctx, c->inner, buf, room, &got);
        if (rc != ECCL_OK) {
            c->rx_end = rc;
            break;
        }
        if (!got) break;
        chunk *k = line_push(&c->rx, got, due_at(n, c, 1, got, now, &path));
        if (!k) {
            c->err = ECCL_ERR_NO_MEMORY;
            return;
        }
        memcpy(k->data, buf, got);
    }
    inner_interest(n, c, &path);
}

/* Whether core can act on the conn now. */
static int actionable(chaos_net *n, const cconn *c, uint64_t now)
{
    if (c->err != ECCL_OK) return c->want_read || c->want_write;
    int rx = c->rx.head ? c->rx.head->due_ns <= now : c->rx_end != ECCL_OK;
    int tx = c->tx.bytes < eccl_chaos_plan_buffer(n->plan);
    return (c->want_read && rx) || (c->want_write && tx);
}

/* The next time something on a shaped conn falls due that this net must
 * act on (UINT64_MAX: none): a reset, a tx chunk to move (not while a
 * partition holds it: the heal is a plan change, which wakes the wait), an
 * rx chunk core wants. A chunk due already that nothing can move must not
 * count: the wait would return at once, again and again (a simulated clock
 * then never moves on). */
static uint64_t next_due(chaos_net *n, const cconn *c, uint64_t now)
{
    uint64_t t = c->next_reset_ns;
    if (c->tx.head && !c->inner_write && c->tx.head->due_ns < t) {
        eccl_chaos_path path;
        eccl_chaos_plan_path(n->plan, n->self, c->pair->host, now, &path);
        if (!path.partitioned) t = c->tx.head->due_ns;
    }
    if (c->rx.head && c->want_read && c->rx.head->due_ns < t) t = c->rx.head->due_ns;
    return t;
}

static void maybe_kill(chaos_net *n, uint64_t now, int frames_due)
{
    if (n->killing || !n->kill || (!frames_due && now < n->kill_at_ns)) return;
    n->killing = 1;
    unlock(n);
    /* Said before it happens: the kill may not return. */
    ECCL_WARN(n->env, "chaos: the plan kills %s here (%s)", n->self,
              frames_due ? "frame count reached" : "its time came");
    n->kill(n->kill_arg);
    lock(n);
}

/* ---- the ops --------------------------------------------------------------- */

static eccl_result c_listen(void *ctx, const char *addr, void *user, eccl_listener **out, char *bound)
{
    chaos_net *n = ctx;
    clistener *l = calloc(1, sizeof *l);
    if (!l) return ECCL_ERR_NO_MEMORY;
    l->kind = K_LISTENER;
    l->user = user;
    eccl_result rc = n->inner->listen(n->inner_ctx, addr, l, &l->inner, bound);
    if (rc != ECCL_OK) {
        free(l);
        return rc;
    }
    lock(n);
    if (!n->self[0]) host_of(bound, n->self); /* who we are, when nobody said */
    l->next = n->listeners;
    n->listeners = l;
    unlock(n);
    *out = (eccl_listener *)l;
    return ECCL_OK;
}

static cconn *conn_new(chaos_net *n, void *user)
{
    cconn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->kind = K_CONN;
    c->user = user;
    c->want_read = 1;
    c->set_read = 1;
    c->next_reset_ns = UINT64_MAX;
    c->rng = eccl_chaos_plan_seed(n->plan) ^ (0x5851f42d4c957f2dull * ++n->conn_seq);
    return c;
}

static eccl_result c_accept(void *ctx, eccl_listener *lp, void *user, eccl_conn **out)
{
    chaos_net *n = ctx;
    clistener *l = (clistener *)lp;
    lock(n);
    cconn *c = conn_new(n, user);
    unlock(n);
    if (!c) return ECCL_ERR_NO_MEMORY;
    eccl_result rc = n->inner->accept(n->inner_ctx, l->inner, c, &c->inner);
    if (rc != ECCL_OK) {
        free(c);
        return rc;
    }
    lock(n);
    c->next = n->conns;
    n->conns = c;
    unlock(n);
    *out = (eccl_conn *)c;
    return ECCL_OK;
}

static void c_close_listener(void *ctx, eccl_listener *lp)
{
    chaos_net *n = ctx;
    clistener *l = (clistener *)lp;
    lock(n);
    for (clistener **pp = &n->listeners; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    n->inner->close_listener(n->inner_ctx, l->inner);
    if (n->waiters) {
        l->closed = 1;
        l->next = n->grave_l;
        n->grave_l = l;
    } else {
        free(l);
    }
    unlock(n);
}

static eccl_result c_connect(void *ctx, const char *addr, void *user, eccl_conn **out)
{
    chaos_net *n = ctx;
    char host[HOST_MAX];
    host_of(addr, host);
    lock(n);
    cconn *c = conn_new(n, user);
    if (c) c->pair = get_pair(n, host);
    if (!c || !c->pair) {
        unlock(n);
        free(c);
        return ECCL_ERR_NO_MEMORY;
    }
    eccl_chaos_path path;
    eccl_chaos_plan_path(n->plan, n->self, host, now_ns(n), &path);
    n->stats.shaped_conns++;
    ECCL_DEBUG(n->env, "chaos: %s dials %s: latency %llu ns, bandwidth %.0f B/s%s", n->self, addr,
               (unsigned long long)path.latency_ns, path.bandwidth_Bps, path.partitioned ? ", partitioned" : "");
    eccl_result rc = ECCL_OK;
    if (path.partitioned) {
        /* Refused like a host that cannot be reached: send and recv say so. */
        c->err = ECCL_ERR_CONNECT;
        n->stats.refused++;
    } else {
        rc = n->inner->connect(n->inner_ctx, addr, c, &c->inner);
    }
    if (rc != ECCL_OK) {
        unlock(n);
        free(c);
        return rc;
    }
    c->next = n->conns;
    n->conns = c;
    unlock(n);
    if (c->err != ECCL_OK) n->inner->wake(n->inner_ctx); /* a wait must report it */
    *out = (eccl_conn *)c;
    return ECCL_OK;
}

static eccl_result c_send(void *ctx, eccl_conn *cp, const eccl_iov *iov, int niov, size_t *sent)
{
    chaos_net *n = ctx;
    cconn *c = (cconn *)cp;
    *sent = 0;
    lock(n);
    uint64_t now = now_ns(n);
    eccl_result rc = c->err;
    int kill = 0;
    if (rc == ECCL_OK && !c->pair) {
        rc = n->inner->send(n->inner_ctx, c->inner, iov, niov, sent);
        if (rc == ECCL_OK) kill = count_frames(n, c, iov, niov, *sent);
    } else if (rc == ECCL_OK) {
        size_t total = 0;
        for (int i = 0; i < niov; i++) {
            total += iov[i].len;
            if (!iov[i].base && iov[i].len) rc = ECCL_ERR_UNSUPPORTED; /* phantom payload: see chaos.h */
        }
        if (rc != ECCL_OK) total = 0;
        const size_t cap = eccl_chaos_plan_buffer(n->plan);
        size_t take = c->tx.bytes >= cap ? 0 : cap - c->tx.bytes < total ? cap - c->tx.bytes : total;
        if (take) {
            eccl_chaos_path path;
            eccl_chaos_plan_path(n->plan, n->self, c->pair->host, now, &path);
            /* Slices of at most SLICE bytes, each due once the wire carried
             * it: a big write arrives as a stream does, bit by bit at the
             * wire's rate, not whole at the end. */
            size_t at = 0, off = 0;
            for (int i = 0; at < take;) {
                size_t len = take - at < SLICE ? take - at : SLICE;
                chunk *k = line_push(&c->tx, len, due_at(n, c, 0, len, now, &path));
                if (!k) {
                    if (!at) rc = ECCL_ERR_NO_MEMORY; /* else: what is queued was sent */
                    break;
                }
                for (size_t got = 0; got < len;) {
                    size_t m = iov[i].len - off < len - got ? iov[i].len - off : len - got;
                    memcpy(k->data + got, (const unsigned char *)iov[i].base + off, m);
                    got += m, off += m;
                    if (off == iov[i].len) i++, off = 0;
                }
                at += len;
            }
            if (at) {
                *sent = at;
                kill = count_frames(n, c, iov, niov, at);
                pump(n, c, now);
            }
        }
    }
    maybe_kill(n, now, kill);
    unlock(n);
    return rc;
}

static eccl_result c_recv(void *ctx, eccl_conn *cp, void *buf, size_t len, size_t *got)
{
    chaos_net *n = ctx;
    cconn *c = (cconn *)cp;
    *got = 0;
    lock(n);
    eccl_result rc = c->err;
    if (rc == ECCL_OK && !c->pair) {
        rc = n->inner->recv(n->inner_ctx, c->inner, buf, len, got);
    } else if (rc == ECCL_OK) {
        uint64_t now = now_ns(n);
        pump(n, c, now);
        unsigned char *to = buf;
        while (*got < len && c->rx.head && c->rx.head->due_ns <= now) {
            chunk *h = c->rx.head;
            size_t k = h->len - h->off < len - *got ? h->len - h->off : len - *got;
            if (to) memcpy(to + *got, h->data + h->off, k);
            h->off += k, *got += k, c->rx.bytes -= k;
            if (h->off == h->len) {
                c->rx.head = h->next;
                if (!c->rx.head) c->rx.tail = NULL;
                free(h);
            }
        }
        if (c->err != ECCL_OK) rc = c->err;
        else if (!*got && !c->rx.head && c->rx_end != ECCL_OK) rc = c->rx_end;
        if (*got) pump(n, c, now); /* room again: read on */
    }
    unlock(n);
    return rc;
}

static void c_set_interest(void *ctx, eccl_conn *cp, int read, int write)
{
    chaos_net *n = ctx;
    cconn *c = (cconn *)cp;
    lock(n);
    c->want_read = read, c->want_write = write;
    if (!c->pair && c->inner) n->inner->set_interest(n->inner_ctx, c->inner, read, write);
    /* A shaped conn's readiness is ours to report: a wait blocked in the
     * inner one must look again if core can act on it now. */
    int wake = c->pair && actionable(n, c, now_ns(n));
    unlock(n);
    if (wake) n->inner->wake(n->inner_ctx);
}

static void conn_free(cconn *c)
{
    line_free(&c->tx);
    line_free(&c->rx);
    free(c);
}

/* Unlinks c from the conns, closes its inner conn and frees it (after the
 * waits, when one runs). Under the lock. */
static void conn_drop(chaos_net *n, cconn *c)
{
    for (cconn **pp = &n->conns; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    if (c->inner) n->inner->close(n->inner_ctx, c->inner);
    c->inner = NULL;
    if (n->waiters) {
        c->closed = 1;
        c->next = n->grave;
        n->grave = c;
    } else {
        conn_free(c);
    }
}

/* A lingering conn is done once its tx line is flushed or it failed. */
static int linger_done(const cconn *c) { return c->lingering && (!c->tx.head || c->err != ECCL_OK || !c->inner); }

static void c_close(void *ctx, eccl_conn *cp)
{
    chaos_net *n = ctx;
    cconn *c = (cconn *)cp;
    lock(n);
    if (c->pair && c->inner && c->err == ECCL_OK && c->tx.head) {
        /* What core sent is on its way, as on a TCP socket it closes. */
        c->lingering = 1;
        c->user = NULL;
        c->want_read = c->want_write = 0;
        line_free(&c->rx);
        unlock(n);
        n->inner->wake(n->inner_ctx); /* a wait must take it into account */
        return;
    }
    conn_drop(n, c);
    unlock(n);
}

static void bury(chaos_net *n)
{
    for (cconn *c = n->grave, *next; c; c = next) next = c->next, conn_free(c);
    for (clistener *l = n->grave_l, *next; l; l = next) next = l->next, free(l);
    n->grave = NULL, n->grave_l = NULL;
}

static int c_wait(void *ctx, uint64_t deadline_ns, void **ready, int max)
{
    chaos_net *n = ctx;
    void *inner_ready[64]; /* per call: two threads may wait at once */
    lock(n);
    n->waiters++;
    uint64_t now = now_ns(n), next = eccl_chaos_plan_next_change(n->plan, now);
    if (n->kill_at_ns < next) next = n->kill_at_ns;
    int poll = 0;
    for (cconn *c = n->conns; c; c = c->next) {
        if (!c->pair) {
            poll |= c->ready; /* reported by the inner wait, not yet to core */
            continue;
        }
        poll |= actionable(n, c, now);
        uint64_t t = next_due(n, c, now);
        if (t < next) next = t;
    }
    unlock(n);

    /* Until the caller's deadline or the next due chunk or rule change, in
     * the inner clock's terms; at once when something is ready already. */
    uint64_t dl = deadline_ns;
    if (poll) dl = 0;
    else if (dl != 0 && next != UINT64_MAX && next + n->t0 < dl) dl = next + n->t0;
    int cap = max < 64 ? max : 64;
    int k = cap > 0 ? n->inner->wait(n->inner_ctx, dl, inner_ready, cap) : 0;

    lock(n);
    now = now_ns(n);
    int out = 0;
    for (int i = 0; i < k; i++) {
        if (*(int *)inner_ready[i] == K_LISTENER) {
            clistener *l = inner_ready[i];
            if (!l->closed && out < max) ready[out++] = l->user;
        } else {
            ((cconn *)inner_ready[i])->ready = 1; /* closed ones are in the grave, alive */
        }
    }
    for (cconn *c = n->conns; c && out < max; c = c->next) {
        if (!c->pair) {
            if (c->ready) ready[out++] = c->user, c->ready = 0;
            continue;
        }
        c->ready = 0;
        pump(n, c, now);
        if (actionable(n, c, now)) ready[out++] = c->user;
    }
    for (cconn *c = n->conns, *after; c; c = after) {
        after = c->next;
        if (linger_done(c)) conn_drop(n, c);
    }
    maybe_kill(n, now, 0);
    if (--n->waiters == 0) bury(n);
    unlock(n);
    return out;
}

static void c_wake(void *ctx)
{
    chaos_net *n = ctx;
    n->inner->wake(n->inner_ctx);
}

static void c_peer_addr(void *ctx, eccl_conn *cp, char *addr)
{
    chaos_net *n = ctx;
    cconn *c = (cconn *)cp;
    const eccl_net_ops *in = n->inner;
    addr[0] = '\0';
    lock(n);
    if (c->inner && in->size >= offsetof(eccl_net_ops, peer_addr) + sizeof in->peer_addr && in->peer_addr)
        in->peer_addr(n->inner_ctx, c->inner, addr);
    unlock(n);
}

static const eccl_net_ops chaos_net_ops = {
    .size = sizeof(eccl_net_ops),
    .listen = c_listen,
    .accept = c_accept,
    .close_listener = c_close_listener,
    .connect = c_connect,
    .send = c_send,
    .recv = c_recv,
    .set_interest = c_set_interest,
    .close = c_close,
    .wait = c_wait,
    .wake = c_wake,
    .peer_addr = c_peer_addr,
    /* no bulk: payloads ride the stream, where they are shaped */
};

eccl_result eccl_chaos_wrap(eccl_env *env, eccl_chaos_plan *plan, const char *self, void (*kill)(void *arg),
                            void *kill_arg)
{
    if (!env || !plan) return ECCL_ERR_INVALID_ARG;
    chaos_net *n = calloc(1, sizeof *n);
    if (!n) return ECCL_ERR_NO_MEMORY;
    if (env->sync->mutex_create(env->sync_ctx, &n->mu) != ECCL_OK) {
        free(n);
        return ECCL_ERR_NO_MEMORY;
    }
    n->env = env;
    n->inner = env->net;
    n->inner_ctx = env->net_ctx;
    n->plan = plan;
    if (self) snprintf(n->self, sizeof n->self, "%s", self);
    n->kill = kill;
    n->kill_arg = kill_arg;
    n->t0 = env->clock->now_ns(env->clock_ctx);
    n->nwires = eccl_chaos_plan_wires(plan);
    n->wires = n->own_wires = calloc(n->nwires + 1, sizeof *n->own_wires);
    if (!n->own_wires) {
        env->sync->mutex_destroy(env->sync_ctx, n->mu);
        free(n);
        return ECCL_ERR_NO_MEMORY;
    }
    eccl_chaos_plan_kill(plan, n->self, &n->kill_type, &n->kill_frames, &n->kill_at_ns);
    env->net = &chaos_net_ops;
    env->net_ctx = n;
    return ECCL_OK;
}

int eccl_chaos_wrapped(const eccl_env *env) { return env && env->net == &chaos_net_ops; }

eccl_result eccl_chaos_set_wires(eccl_env *env, uint64_t *free_at, size_t n)
{
    if (!eccl_chaos_wrapped(env) || !free_at) return ECCL_ERR_INVALID_ARG;
    chaos_net *c = env->net_ctx;
    if (n < c->nwires) return ECCL_ERR_INVALID_ARG;
    lock(c);
    c->wires = free_at;
    unlock(c);
    return ECCL_OK;
}

void eccl_chaos_set_origin(eccl_env *env, uint64_t t0_ns)
{
    if (!eccl_chaos_wrapped(env)) return;
    chaos_net *n = env->net_ctx;
    lock(n);
    n->t0 = t0_ns;
    unlock(n);
}

/* Lets lingering conns deliver what they hold, LINGER_NS at most. No core
 * conn is left: the env is going away. */
static void linger_drain(chaos_net *n)
{
    const uint64_t limit = now_ns(n) + LINGER_NS;
    for (;;) {
        uint64_t now = now_ns(n), next = limit;
        int left = 0;
        for (cconn *c = n->conns, *nx; c; c = nx) {
            nx = c->next;
            if (!c->lingering) continue;
            pump(n, c, now);
            if (linger_done(c)) {
                conn_drop(n, c);
                continue;
            }
            left++;
            const uint64_t t = c->inner_write ? now + 1000000u : next_due(n, c, now);
            if (t < next) next = t;
        }
        if (!left || now >= limit) return;
        void *ready[8];
        n->inner->wait(n->inner_ctx, next + n->t0, ready, 8);
    }
}

void eccl_chaos_unwrap(eccl_env *env)
{
    if (!eccl_chaos_wrapped(env)) return;
    chaos_net *n = env->net_ctx;
    linger_drain(n);
    ECCL_DEBUG(env, "chaos: %s shaped %llu conns, delayed %llu bytes, reset %llu, refused %llu", n->self,
               (unsigned long long)n->stats.shaped_conns, (unsigned long long)n->stats.delayed_bytes,
               (unsigned long long)n->stats.resets, (unsigned long long)n->stats.refused);
    env->net = n->inner;
    env->net_ctx = n->inner_ctx;
    for (cconn *c = n->conns, *next; c; c = next) next = c->next, conn_free(c);
    for (clistener *l = n->listeners, *next; l; l = next) next = l->next, free(l);
    bury(n);
    for (pair *p = n->pairs, *next; p; p = next) next = p->next, free(p);
    env->sync->mutex_destroy(env->sync_ctx, n->mu);
    eccl_chaos_plan_free(n->plan);
    free(n->own_wires);
    free(n);
}

void eccl_chaos_get_stats(const eccl_env *env, eccl_chaos_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!eccl_chaos_wrapped(env)) return;
    chaos_net *n = env->net_ctx;
    lock(n);
    *out = n->stats;
    unlock(n);
}
