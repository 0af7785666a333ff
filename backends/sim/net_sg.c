/* eccl_net_ops over SimGrid mailboxes: TCP-like byte streams between envs.
 *
 * Every env owns one mailbox and one receiver actor. A conn's bytes travel as
 * messages (one per send call) put asynchronously into the far env's
 * mailbox, so each costs the platform's latency plus size/bandwidth;
 * the receiver pulls them off one at a time (FIFO, so a stream stays in
 * order), appends the bytes to the conn's receive queue and wakes the env's
 * waiters. Handshake: connect sends SYN to the listener's env, which creates
 * the server-side conn in the listener's backlog and answers SYNACK (or RST
 * when the backlog is full or the listener gone): one round trip, as TCP.
 *
 * Messages name conns by id, never by pointer: a conn may be closed and
 * freed while messages for it are in flight; those are dropped.
 *
 * Send never blocks and never pushes back (an unbounded socket buffer): the
 * sender's bytes are on the wire at once and arrive after the network delay.
 *
 * Phantom payload (an iov with a NULL base, see env.h): a DATA message is a
 * list of segments, real bytes or phantom lengths; all of it is charged on
 * the wire, only the real bytes are copied. The receiving conn keeps the
 * phantom stretches as "holes" at their stream positions: a read stops
 * where a hole begins, a NULL-buffer read consumes it, and a read into a
 * real buffer gets zeros for it (a phantom sender, a real receiver: the
 * values of a phantom op are not real anyway).
 * Faults (env_sg.h): before a message goes on the wire its path is checked.
 * A far env whose host went off (or rebooted since) never receives again:
 * the message is dropped, nothing arrives, and no error comes back, as with
 * a silent host on a real network. A route crossing a link that is off
 * holds the message in its conn (TCP retransmitting) until the route is up
 * again; a conn that holds anything holds what follows too, so the stream
 * stays in order. Neither is ever posted to SimGrid, which keeps us clear
 * of its behaviour for puts towards dead actors and off hosts.
 */
#include <xbt/dynar.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <simgrid/engine.h>

#include "sg_internal.h"
#include "util/addr.h"

/* Bytes of header charged on the wire per message (TCP/IP + our envelope). */
#define MSG_OVERHEAD 64
/* Most bytes one send call takes; the rest waits for the next call. */
#define SEND_MAX (4u << 20)
/* wire_time counts DATA messages this big or bigger: smaller ones cost
 * their latency more than their bytes (core's rates.c alike). */
#define WIRE_TIME_MIN (64u << 10)
/* Connections a listener holds before accept; more are refused (RST).
 * The real backend's listen backlog (backends/real/net_tcp.c). */
#define BACKLOG_MAX 1024

/* M_FABRIC: between simulated NICs (verbs_sg.c), not of any conn. */
enum { M_SYN, M_SYNACK, M_RST, M_DATA, M_FIN, M_STOP, M_FABRIC };
enum { C_CONNECTING, C_UP, C_FAILED };

/* One stretch of a DATA message: `len` real bytes (the next ones of
 * `data`) or `len` phantom bytes. */
typedef struct sg_seg {
    size_t len;
    int phantom;
} sg_seg;

typedef struct sg_msg {
    int type;
    uint64_t seq;       /* DATA and FIN: position in the conn's stream */
    struct sg_msg *ooo; /* in the conn's out-of-order list or its receive
                           queue (receiver side), or in its held list
                           (sender side); one at a time */
    uint64_t to_env;    /* the env it goes to (kept while held) */
    sg_host_t src_host; /* the sender's host and boot: where replies go */
    int src_boot;
    uint64_t dst;       /* conn id (listener id for SYN) */
    uint64_t src;       /* sender's conn id */
    uint64_t src_env;   /* sender's env id */
    long src_pid;       /* the actor that put it, -1 if detached */
    uint64_t put_seq;   /* its place in that actor's outbox */
    size_t len;         /* stream bytes, phantom ones included (the wire cost) */
    size_t real;        /* DATA: the real bytes of len, data[0..real) */
    int nseg;           /* DATA: segments in seg; 0 = data holds all len bytes */
    size_t fabric_len; /* FABRIC: bytes of data (len is the wire cost) */
    int shm;            /* sent by a comm's env (net_shm's twin may apply) */
    sg_seg *seg;        /* points into this allocation, after data */
    unsigned char data[];
} sg_msg;

/* A phantom stretch of a conn's receive stream, at stream position pos. */
typedef struct sg_hole {
    uint64_t pos;
    size_t len;
    struct sg_hole *next;
} sg_hole;

struct eccl_conn {
    uint64_t id;
    sg_env *env;
    void *user;
    int state;
    int want_read, want_write;
    int edge;       /* handshake finished (up or failed): report once */
    int watch_hangup; /* report eof/reset even with read interest off */
    int eof;        /* FIN arrived: queued bytes, then CLOSED */
    int reset;      /* the peer crashed: CLOSED at once */
    uint64_t peer_id, peer_env;
    /* wire_time: large DATA messages' bytes and their time on the wire */
    uint64_t wire_bytes;
    double wire_s;
    sg_host_t peer_host;       /* the far env's host and boot (the listener's */
    int peer_boot;             /* while connecting) */
    sg_msg *held, *held_tail;  /* waiting for a route that is down */
    double pace_s;             /* tcp_window: the stream may send again at this
                                  simulated time (its bytes so far drained at
                                  window / RTT) */
    size_t unacked;            /* tcp_window: wire bytes sent and not yet taken
                                  by the far end's receiver */
    uint64_t tx_seq, rx_seq;   /* next DATA/FIN sequence to send / to take */
    sg_msg *ooo;               /* arrived early, sorted by seq */
    /* The real bytes of the receive stream are the DATA messages that
     * brought them, read in place and freed once read: a conn at rest
     * holds no buffer (a simulated 96K-rank job has a million conns). */
    sg_msg *rxq, *rxq_tail;
    size_t rx_off;             /* bytes of rxq's data already read */
    size_t rx_len;             /* real bytes queued, from rx_off on */
    uint64_t rx_in, rx_out;    /* stream bytes appended / consumed, holes too */
    sg_hole *holes, *holes_tail; /* phantom stretches not consumed yet */
    size_t hole_bytes;
    eccl_listener *backlog_of; /* not accepted yet */
    eccl_conn *next, *prev;    /* in env->conns */
    size_t cand_idx;           /* in env->cand, when in_cand */
    int in_cand;
    eccl_conn *bl_next;        /* in the listener's backlog */
    char addr[ECCL_ADDR_MAX];
};

struct eccl_listener {
    uint64_t id;
    sg_env *env;
    void *user;
    eccl_conn *bl_head, *bl_tail;
    int bl_len;
    eccl_listener *next;     /* in env->listeners */
    eccl_listener *reg_next; /* next bound listener with the same registry key */
    int quiet;               /* wait does not report it (eccl_sg_listener_set_interest) */
    char addr[ECCL_ADDR_MAX];
};

/* ---- outboxes -------------------------------------------------------------
 * Puts are not detached. SimGrid 3.32 keeps every detached comm of the whole
 * simulation in one std::list (the maestro's activities) and takes each out
 * with list::remove, a walk of the whole list, when it ends: with thousands
 * of messages in flight at once (a master's broadcast, every rank closing
 * its links at the end) that walk was 65% of a 4,096-rank run, and 10,000
 * ranks never finished. A comm that is not detached sits in its sending
 * actor's own list instead, which stays as short as what that actor has in
 * flight, but only if the sender collects it with a wait: sg_comm_test
 * finishes a comm without taking it off the list (no simcall of the issuer
 * is registered), and SimGrid cancels the comms an actor still owns when it
 * ends. So every actor keeps an outbox of its puts, oldest first; the
 * receiver marks a message's entry done when it takes the message (found
 * by the sender's pid, never by pointer: the outbox may be gone by then);
 * each new put first collects the done entries at the front, each wait
 * answered at once; an actor waits out the rest before it ends
 * (eccl_net_sg_drain_self). A put that is never taken (its receiver
 * stopped, or a host went off) stays unmarked and would hold up the ones
 * behind it, so once the outbox doubles past OUTBOX_COMPACT entries, a
 * sweep collects the done ones wherever they are (amortised O(1) a put).
 * Nothing here blocks the sender: the simulated timing is the network's. */
#define OUTBOX_COMPACT 64

typedef struct sg_outbox_slot {
    sg_comm_t c;
    sg_msg *m;    /* the payload: the receiver's once taken (done), else ours */
    uint64_t seq; /* the put's sequence in this actor: slots stay sorted */
    int done;
} sg_outbox_slot;

typedef struct sg_outbox {
    long pid;
    sg_outbox_slot *s; /* slots start .. start+n-1 of cap are in use */
    size_t start, n, cap;
    size_t sweep_at;   /* sweep when n reaches it */
    uint64_t next_seq;
    struct sg_outbox *next, *prev; /* in w->outbox_list */
} sg_outbox;

static sg_outbox *outbox_self(eccl_sg_world *w, long pid)
{
    sg_outbox *ob = sg_idmap_get(&w->outboxes, (uint64_t)pid);
    if (ob) return ob;
    ob = calloc(1, sizeof *ob);
    if (!ob) return NULL;
    ob->pid = pid;
    ob->sweep_at = OUTBOX_COMPACT;
    if (sg_idmap_put(&w->outboxes, (uint64_t)pid, ob)) {
        free(ob);
        return NULL;
    }
    ob->next = w->outbox_list;
    if (ob->next) ob->next->prev = ob;
    w->outbox_list = ob;
    return ob;
}

static void outbox_free(eccl_sg_world *w, sg_outbox *ob)
{
    sg_idmap_del(&w->outboxes, (uint64_t)ob->pid);
    if (ob->prev) ob->prev->next = ob->next;
    else w->outbox_list = ob->next;
    if (ob->next) ob->next->prev = ob->prev;
    free(ob->s);
    free(ob);
}

/* Room for one more slot at the end; -1 when out of memory. */
static int outbox_reserve(sg_outbox *ob)
{
    if (ob->start + ob->n < ob->cap) return 0;
    if (ob->start > 0) {
        memmove(ob->s, ob->s + ob->start, ob->n * sizeof *ob->s);
        ob->start = 0;
        return 0;
    }
    size_t cap = ob->cap ? ob->cap * 2 : 8;
    sg_outbox_slot *ns = realloc(ob->s, cap * sizeof *ns);
    if (!ns) return -1;
    ob->s = ns;
    ob->cap = cap;
    return 0;
}

/* Waits for the comms of the done slots (of every slot with `all`), then
 * drops the done slots. A put whose wait fails was never taken: its
 * payload is ours to free. A put that arrived but was not taken yet (its
 * receiver may be stopping, or dead with its host) keeps its slot, without
 * the comm, until it is taken or the world ends. Every wait is a simcall,
 * during which receivers mark slots where they stand: slots move only
 * after the waits. */
static void outbox_sweep(sg_outbox *ob, int all)
{
    for (size_t i = 0; i < ob->n; i++) {
        sg_outbox_slot *s = &ob->s[ob->start + i];
        if (!s->c || !(all || s->done)) continue;
        sg_comm_t c = s->c;
        s->c = NULL;
        if (sg_comm_wait(c) != SG_OK && !s->done) {
            free(s->m);
            s->done = 1;
        }
    }
    size_t keep = 0;
    for (size_t i = 0; i < ob->n; i++)
        if (!ob->s[ob->start + i].done) ob->s[ob->start + keep++] = ob->s[ob->start + i];
    ob->n = keep;
}

/* Collects the done puts: each wait is answered at once and takes the
 * comm off this actor's SimGrid list. */
static void outbox_collect(sg_outbox *ob)
{
    while (ob->n > 0 && ob->s[ob->start].done) {
        sg_comm_t c = ob->s[ob->start].c;
        ob->start++; /* before the wait: see outbox_sweep */
        ob->n--;
        if (c) sg_comm_wait(c);
    }
    if (ob->n < ob->sweep_at) return;
    outbox_sweep(ob, 0);
    ob->sweep_at = ob->n * 2 > OUTBOX_COMPACT ? ob->n * 2 : OUTBOX_COMPACT;
}

/* The receiver took put `seq` of actor `pid`: it is over. */
static void outbox_mark(eccl_sg_world *w, long pid, uint64_t seq)
{
    sg_outbox *ob = sg_idmap_get(&w->outboxes, (uint64_t)pid);
    if (!ob) return;
    const sg_outbox_slot *s = ob->s + ob->start;
    size_t lo = 0, hi = ob->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s[mid].seq < seq) lo = mid + 1;
        else hi = mid;
    }
    if (lo < ob->n && s[lo].seq == seq) ob->s[ob->start + lo].done = 1;
}

void eccl_net_sg_drain_self(eccl_sg_world *w)
{
    sg_outbox *ob = sg_idmap_get(&w->outboxes, (uint64_t)sg_actor_self_get_pid());
    if (!ob) return;
    /* Each wait ends with its transfer (a permanent receiver takes every
     * put at once) or when the transfer fails with a host or a link. */
    outbox_sweep(ob, 1);
    if (ob->n == 0) outbox_free(w, ob);
}

void eccl_net_sg_free_outboxes(eccl_sg_world *w)
{
    while (w->outbox_list) {
        sg_outbox *ob = w->outbox_list;
        /* The simulation is over: a put nobody took (its transfer failed,
         * it sits in a mailbox nobody reads, or its sender's actor died
         * with it pending) still owns its payload. */
        for (size_t i = 0; i < ob->n; i++) {
            sg_outbox_slot *s = &ob->s[ob->start + i];
            if (!s->done) free(s->m);
            if (s->c) sg_comm_unref(s->c);
        }
        outbox_free(w, ob);
    }
    sg_idmap_free(&w->outboxes);
}

/* ---- messages ------------------------------------------------------------ */

static void msg_free(void *p) { free(p); }

/* The mailbox of put number i to env e (sg_env.lanes). */
static sg_mailbox_t env_lane(const sg_env *e, uint64_t i)
{
    return i >= e->lanes_from ? e->lanes[i % e->nlanes] : e->mbox;
}

/* Whether a message for mailbox `to` may still go, and if so the env it is
 * for. An env whose receiver is gone (destroyed, or stopping past its
 * M_STOP) never takes another message: SimGrid would keep the put in the
 * mailbox forever (the permanent receiver went with the actor). A sender
 * whose env died (its host went off, or its process was killed) sends
 * nothing more: the kill happened at the killer's instant, even if this
 * actor runs after it in the same round (SimGrid would drop such a put
 * anyway, a simcall of an actor being killed is never handled, but only
 * after a lane counted it, and the receiver would wait for it forever).
 * Dropping either changes nothing anyone can observe. */
static sg_env *post_target(eccl_sg_world *w, uint64_t to, const sg_msg *m)
{
    sg_env *d = sg_idmap_get(&w->env_ids, to);
    if (!d || d->rx_done) return NULL;
    const sg_env *src = sg_idmap_get(&w->env_ids, m->src_env);
    return src && src->dead ? NULL : d;
}

/* The mailbox this put goes to (sg_env.lanes). Call with no simcall
 * between it and the put: puts are numbered in the order they are made. */
static sg_mailbox_t post_lane(sg_env *d)
{
    if (d->nlanes > 1 && !d->rx_ready) {
        d->rx_early++; /* waits in mbox unstarted */
        return d->mbox;
    }
    return env_lane(d, d->rx_posted++);
}

/* ---- the latency net (eccl_sg_world_set_net_model) ----------------------- */
/* A message is due at its route's latency + (size + MSG_OVERHEAD) / the
 * route's bandwidth after it is sent (what CM02 gives a flow alone on its
 * route, see eccl_net_sg_route_cost), and lands in its destination env's
 * arrivals; that env's next wait takes it. No SimGrid comm, no flow
 * sharing, no receiver actor: a bootstrap's control frames are latency
 * bound, and each comm costs SimGrid a dozen simcalls, an LMM variable and
 * a receiver's wake-up. */

typedef struct sg_arrival {
    double t;
    uint64_t seq;
    sg_msg *m;
} sg_arrival;

struct sg_route_memo {
    const_sg_host_t a, b;
    double lat, bw;
};

#define ROUTE_MEMO_SLOTS (1u << 16) /* direct-mapped: a route's cost is pure */
/* A timed wait may end a rounding error short of a due time. */
#define ARRIVAL_SLACK_S 1e-12

static void route_of(eccl_sg_world *w, const_sg_host_t a, const_sg_host_t b, double *lat, double *bw)
{
    if (!w->route_memo) w->route_memo = calloc(ROUTE_MEMO_SLOTS, sizeof *w->route_memo);
    struct sg_route_memo *r = NULL;
    if (w->route_memo) { /* without it (out of memory) every cost is computed */
        uint64_t h = ((uint64_t)(uintptr_t)a * 0x9E3779B97F4A7C15ull) ^ (uint64_t)(uintptr_t)b;
        h *= 0xBF58476D1CE4E5B9ull;
        r = &w->route_memo[(h >> 40) & (ROUTE_MEMO_SLOTS - 1)];
        if (r->a == a && r->b == b) {
            *lat = r->lat;
            *bw = r->bw;
            return;
        }
    }
    *lat = sg_host_get_route_latency(a, b);
    *bw = sg_host_get_route_bandwidth(a, b);
    if (r) *r = (struct sg_route_memo){a, b, *lat, *bw};
}

static int arrival_before(const sg_arrival *x, const sg_arrival *y)
{
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

/* The bytes the wire charges for m on its way to env d: its length (and
 * header); between two comm envs of one host with net_shm's twin on
 * (eccl_sg_world_set_shm) what takes as long on the route: a payload of
 * ECCL_SG_SHM_MIN_BYTES or more, its bytes at the memory's rate and two
 * more latencies (one copy, an announcement, an acknowledgement); anything
 * smaller, its bytes twice at that rate (a copy into the peer's inbox, one
 * out). Master links are TCP in the real backend: unchanged. */
static double wire_len(eccl_sg_world *w, const sg_msg *m, const sg_env *d)
{
    double len = (double)(m->len + MSG_OVERHEAD);
    if (w->shm_bw <= 0 || m->src_host != d->host || !m->shm || !d->data_links ||
        (m->type != M_DATA && m->type != M_FIN))
        return len;
    double lat, bw;
    route_of(w, m->src_host, d->host, &lat, &bw);
    if (m->type == M_DATA && m->len >= ECCL_SG_SHM_MIN_BYTES) return len * bw / w->shm_bw + 2 * lat * bw;
    return 2 * len * bw / w->shm_bw;
}

static void arrival_push(eccl_sg_world *w, sg_env *d, sg_msg *m)
{
    if (d->dead) {
        free(m);
        return;
    }
    if (d->narr == d->cap_arr) {
        size_t cap = d->cap_arr ? 2 * d->cap_arr : 8;
        sg_arrival *a = realloc(d->arr, cap * sizeof *a);
        if (!a) { /* lost, as a full socket buffer would drop it */
            free(m);
            return;
        }
        d->arr = a;
        d->cap_arr = cap;
    }
    double lat, bw;
    route_of(w, m->src_host, d->host, &lat, &bw);
    sg_arrival x = {simgrid_get_clock() + lat + wire_len(w, m, d) / bw, w->arrival_seq++, m};
    size_t i = d->narr++;
    while (i > 0 && arrival_before(&x, &d->arr[(i - 1) / 2])) {
        d->arr[i] = d->arr[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    d->arr[i] = x;
    /* Due before whatever its waiter sleeps towards: wake it to sleep less. */
    if (i == 0) eccl_sg_cv_broadcast(&d->cv);
}

static sg_msg *arrival_pop(sg_env *e)
{
    sg_msg *m = e->arr[0].m;
    sg_arrival last = e->arr[--e->narr];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= e->narr) break;
        if (c + 1 < e->narr && arrival_before(&e->arr[c + 1], &e->arr[c])) c++;
        if (!arrival_before(&e->arr[c], &last)) break;
        e->arr[i] = e->arr[c];
        i = c;
    }
    if (e->narr > 0) e->arr[i] = last;
    return m;
}

static void arrivals_free(sg_env *e)
{
    for (size_t i = 0; i < e->narr; i++) free(e->arr[i].m);
    free(e->arr);
    e->arr = NULL;
    e->narr = e->cap_arr = 0;
}

static void deliver_taken(sg_env *e, sg_msg *m);
static void stream_acked(eccl_sg_world *w, const sg_msg *m);

/* Takes what is due, as the receiver actor would have when it arrived.
 * A sender that died meanwhile loses it: SimGrid fails the comm of an
 * actor that is killed or whose host goes off. */
static void arrivals_take(sg_env *e)
{
    double now = simgrid_get_clock();
    int any = 0;
    while (e->narr > 0 && e->arr[0].t <= now + ARRIVAL_SLACK_S) {
        sg_msg *m = arrival_pop(e);
        const sg_env *src = sg_idmap_get(&e->w->env_ids, m->src_env);
        if ((src && src->dead) || !sg_host_is_on(m->src_host) ||
            eccl_sg_host_boot(m->src_host) != m->src_boot) {
            free(m);
            continue;
        }
        deliver_taken(e, m);
        any = 1;
    }
    /* Another waiter of this env (a progress thread beside a caller) may
     * be waiting for what came. */
    if (any) eccl_sg_cv_broadcast(&e->cv);
}

/* Latency path (the latency net, a flow model's small messages): what is
 * due reaches the env whatever its owner calls, as the receiver actor
 * would have delivered it meanwhile. */
static void latency_catch_up(sg_env *e)
{
    if (e->narr > 0) arrivals_take(e);
}

/* Seconds until the next arrival is due, or -1 without one. */
static double arrival_in(const sg_env *e)
{
    if (e->narr == 0) return -1;
    double d = e->arr[0].t - simgrid_get_clock();
    return d > 0 ? d : 0;
}

void eccl_net_sg_free_routes(eccl_sg_world *w)
{
    free(w->route_memo);
    w->route_memo = NULL;
}

/* `detached`: for puts made by an actor that is not the sender's (fault
 * injection releasing held messages), which would cancel them when it
 * ends and never collects them. */
static void post_as(eccl_sg_world *w, uint64_t to, sg_msg *m, int detached)
{
    m->to_env = to;
    sg_env *d = post_target(w, to, m);
    if (!d) {
        free(m);
        return;
    }
    w->messages++;
    if (w->latency_net || (d->shared_rx && m->len < w->flow_min_bytes)) {
        m->src_pid = -1;
        arrival_push(w, d, m);
        return;
    }
    long size = (long)llround(wire_len(w, m, d));
    long pid = sg_actor_self_get_pid();
    sg_outbox *ob = detached ? NULL : outbox_self(w, pid);
    if (ob && outbox_reserve(ob) == 0) {
        outbox_collect(ob);
        /* The collect's waits are simcalls: look again. */
        d = post_target(w, to, m);
        if (!d) {
            free(m);
            return;
        }
        m->src_pid = pid;
        m->put_seq = ob->next_seq++;
        /* The slot first: the put is a simcall, and the receiver may take
         * the message (and mark its slot) before it returns. Only this
         * actor moves its outbox's slots, so the index holds. */
        size_t at = ob->start + ob->n++;
        ob->s[at] = (sg_outbox_slot){NULL, m, m->put_seq, 0};
        ob->s[at].c = sg_mailbox_put_async(post_lane(d), m, size);
        return;
    }
    /* Detached (or out of memory for the outbox). put_init, not put_async:
     * SimGrid 3.32 only detaches a comm that has not started yet (detach
     * then starts it); if the transfer fails, SimGrid frees the payload
     * with msg_free. */
    m->src_pid = -1;
    sg_comm_t c = sg_mailbox_put_init(post_lane(d), m, size);
    sg_comm_detach(c, msg_free);
}

static void post(eccl_sg_world *w, uint64_t to, sg_msg *m) { post_as(w, to, m, 0); }

static sg_msg *msg_new(sg_env *e, int type, uint64_t dst, uint64_t src, size_t len)
{
    sg_msg *m = malloc(sizeof *m + len);
    if (!m) return NULL;
    m->nseg = 0;
    m->fabric_len = 0;
    m->seg = NULL;
    m->type = type;
    m->dst = dst;
    m->src = src;
    m->src_env = e->id;
    m->src_host = e->host;
    m->src_boot = e->boot;
    m->shm = e->data_links;
    m->to_env = 0;
    m->len = len;
    m->real = 0;
    m->seq = 0;
    m->ooo = NULL;
    return m;
}

/* ---- paths --------------------------------------------------------------- */

int eccl_net_sg_route_up(const eccl_sg_world *w, const_sg_host_t a, const_sg_host_t b)
{
    if (w->links_off == 0) return 1; /* the common case: no route lookup */
    xbt_dynar_t links = xbt_dynar_new(sizeof(sg_link_t), NULL);
    sg_host_get_route(a, b, links);
    int up = 1;
    unsigned long n = xbt_dynar_length(links);
    for (unsigned long i = 0; i < n && up; i++) {
        const sg_link_state *st = sg_link_get_data(xbt_dynar_get_as(links, i, sg_link_t));
        if (st && st->off) up = 0;
    }
    xbt_dynar_free(&links);
    return up;
}

enum { FATE_SEND, FATE_HOLD, FATE_DROP };

/* What becomes of a message from `e` to an env on `host` made in `boot`. */
static int fate(const sg_env *e, const_sg_host_t host, int boot)
{
    if (!host || !sg_host_is_on(host) || eccl_sg_host_boot(host) != boot) return FATE_DROP;
    return eccl_net_sg_route_up(e->w, e->host, host) ? FATE_SEND : FATE_HOLD;
}

/* A message with no conn behind it (a refusal, a reset): lost unless its
 * path is up now. */
/* The env's CPU time for one message (eccl_sg_world_set_master_msg_cost). */
static void charge_msg(const sg_env *e)
{
    if (e->msg_cost_s > 0) {
        e->w->waits++;
        sg_actor_sleep_for(e->msg_cost_s);
    }
}

static void send_ctl(sg_env *e, uint64_t to, const_sg_host_t host, int boot, int type,
                     uint64_t dst, uint64_t src)
{
    if (fate(e, host, boot) != FATE_SEND) return;
    sg_msg *m = msg_new(e, type, dst, src, 0);
    if (m) post(e->w, to, m);
}

static void held_free(eccl_conn *c)
{
    while (c->held) {
        sg_msg *n = c->held->ooo;
        free(c->held);
        c->held = n;
    }
    c->held_tail = NULL;
}

/* A message of conn `c` (to its peer, or a SYN to a listener): on the wire
 * now, held behind earlier held ones or for a route that is down, or
 * dropped when the far env is gone for good. Takes `m`. */
static void conn_post(eccl_conn *c, uint64_t to, sg_msg *m)
{
    int f = fate(c->env, c->peer_host, c->peer_boot);
    if (f == FATE_DROP) {
        free(m);
        held_free(c);
        return;
    }
    if (f == FATE_SEND && !c->held) {
        post(c->env->w, to, m);
        return;
    }
    m->to_env = to;
    m->ooo = NULL;
    if (c->held_tail) c->held_tail->ooo = m;
    else c->held = m;
    c->held_tail = m;
}

void eccl_net_sg_release_held(eccl_sg_world *w)
{
    /* Take everything that may go now off its conn first, with no simcall
     * in between (post is one: other actors run, and may close conns),
     * then post it. Conns and envs are walked in creation order, and each
     * conn's messages keep their order (seq numbers sort out the rest). */
    sg_msg *go = NULL, **tail = &go;
    for (sg_env *e = w->envs; e; e = e->next) {
        if (e->dead) continue;
        for (eccl_conn *c = e->conns; c; c = c->next) {
            if (!c->held) continue;
            int f = fate(e, c->peer_host, c->peer_boot);
            if (f == FATE_DROP) held_free(c);
            if (f != FATE_SEND) continue;
            *tail = c->held;
            tail = &c->held_tail->ooo;
            c->held = c->held_tail = NULL;
        }
    }
    while (go) {
        sg_msg *n = go->ooo;
        go->ooo = NULL;
        post_as(w, go->to_env, go, 1);
        go = n;
    }
}

/* ---- lookup -------------------------------------------------------------- */

/* Ids are unique in the world (never reused): one map finds any conn. */
static eccl_conn *conn_by_id(sg_env *e, uint64_t id)
{
    eccl_conn *c = sg_idmap_get(&e->w->conn_ids, id);
    return c && c->env == e ? c : NULL;
}

static sg_env *env_by_id(eccl_sg_world *w, uint64_t id) { return sg_idmap_get(&w->env_ids, id); }

/* ---- ready candidates ---------------------------------------------------- */
/* wait only looks at conns something happened to since they were last found
 * not ready (data, a handshake's end, a reset, new interest, an accept):
 * the master's env has a conn per rank, and walking them all on every
 * wake-up made large worlds quadratic. A conn found ready stays a candidate
 * (readiness is level-triggered: unread bytes, write interest). */
static void cand_add(eccl_conn *c)
{
    sg_env *e = c->env;
    if (c->in_cand) return;
    if (e->ncand == e->cand_cap) {
        size_t cap = e->cand_cap ? e->cand_cap * 2 : 16;
        eccl_conn **q = realloc(e->cand, cap * sizeof *q);
        if (!q) abort(); /* a lost wake-up would hang the rank silently */
        e->cand = q;
        e->cand_cap = cap;
    }
    c->cand_idx = e->ncand;
    e->cand[e->ncand++] = c;
    c->in_cand = 1;
}

static void cand_del(eccl_conn *c)
{
    sg_env *e = c->env;
    if (!c->in_cand) return;
    eccl_conn *last = e->cand[--e->ncand];
    e->cand[c->cand_idx] = last;
    last->cand_idx = c->cand_idx;
    c->in_cand = 0;
}

static void conn_link(sg_env *e, eccl_conn *c)
{
    c->next = NULL;
    c->prev = e->conns_tail;
    if (e->conns_tail) e->conns_tail->next = c;
    else e->conns = c;
    e->conns_tail = c;
}

static void conn_unlink(sg_env *e, eccl_conn *c)
{
    cand_del(c);
    if (c->prev) c->prev->next = c->next;
    else e->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    else e->conns_tail = c->prev;
    c->next = c->prev = NULL;
}

static void backlog_unlink(eccl_listener *l, eccl_conn *c)
{
    eccl_conn *prev = NULL;
    for (eccl_conn *p = l->bl_head; p; prev = p, p = p->bl_next) {
        if (p != c) continue;
        if (prev) prev->bl_next = c->bl_next;
        else l->bl_head = c->bl_next;
        if (l->bl_tail == c) l->bl_tail = prev;
        l->bl_len--;
        c->backlog_of = NULL;
        return;
    }
}

/* The registry: bound listeners by address, hashed (a rank binds and is
 * connected to by address; a list walk each time was quadratic). */
static eccl_listener *registry_find(eccl_sg_world *w, const char *addr)
{
    eccl_listener *l = sg_idmap_get(&w->registry, sg_idmap_strkey(addr));
    while (l && strcmp(l->addr, addr) != 0) l = l->reg_next;
    return l;
}

static int registry_add(eccl_sg_world *w, eccl_listener *l)
{
    uint64_t k = sg_idmap_strkey(l->addr);
    l->reg_next = sg_idmap_get(&w->registry, k);
    return sg_idmap_put(&w->registry, k, l);
}

static void registry_remove(eccl_sg_world *w, eccl_listener *l)
{
    uint64_t k = sg_idmap_strkey(l->addr);
    eccl_listener *head = sg_idmap_get(&w->registry, k);
    if (head == l) {
        if (l->reg_next) sg_idmap_put(&w->registry, k, l->reg_next);
        else sg_idmap_del(&w->registry, k);
        l->reg_next = NULL;
        return;
    }
    for (eccl_listener *p = head; p; p = p->reg_next) {
        if (p->reg_next == l) {
            p->reg_next = l->reg_next;
            l->reg_next = NULL;
            return;
        }
    }
}

static eccl_conn *conn_new(sg_env *e, void *user, const char *addr)
{
    eccl_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->id = ++e->w->next_id;
    c->env = e;
    c->user = user;
    c->want_read = 1;
    snprintf(c->addr, sizeof c->addr, "%s", addr ? addr : "?");
    if (sg_idmap_put(&e->w->conn_ids, c->id, c)) {
        free(c);
        return NULL;
    }
    return c;
}

static void conn_free(eccl_conn *c)
{
    sg_idmap_del(&c->env->w->conn_ids, c->id);
    while (c->holes) {
        sg_hole *n = c->holes->next;
        free(c->holes);
        c->holes = n;
    }
    held_free(c);
    sg_msg *lists[2] = {c->ooo, c->rxq};
    for (int i = 0; i < 2; i++) {
        for (sg_msg *m = lists[i], *n; m; m = n) {
            n = m->ooo;
            free(m);
        }
    }
    free(c);
}

/* ---- receiver ------------------------------------------------------------ */

static void on_syn(sg_env *e, sg_msg *m)
{
    eccl_listener *l = NULL;
    for (eccl_listener *p = e->listeners; p; p = p->next)
        if (p->id == m->dst) l = p;
    if (!l || l->bl_len >= BACKLOG_MAX) {
        send_ctl(e, m->src_env, m->src_host, m->src_boot, M_RST, m->src, 0);
        return;
    }
    eccl_conn *c = conn_new(e, NULL, "?");
    if (!c) {
        send_ctl(e, m->src_env, m->src_host, m->src_boot, M_RST, m->src, 0);
        return;
    }
    c->state = C_UP;
    c->peer_id = m->src;
    c->peer_env = m->src_env;
    c->peer_host = m->src_host;
    c->peer_boot = m->src_boot;
    c->backlog_of = l;
    snprintf(c->addr, sizeof c->addr, "eccl-env-%llu#%llu", (unsigned long long)m->src_env,
             (unsigned long long)m->src);
    conn_link(e, c);
    if (l->bl_tail) l->bl_tail->bl_next = c;
    else l->bl_head = c;
    l->bl_tail = c;
    l->bl_len++;
    sg_msg *ack = msg_new(e, M_SYNACK, m->src, c->id, 0);
    if (ack) conn_post(c, m->src_env, ack);
}

static int hole_append(eccl_conn *c, size_t n)
{
    sg_hole *t = c->holes_tail;
    if (t && t->pos + t->len == c->rx_in) {
        t->len += n; /* back to back: one hole */
    } else {
        sg_hole *h = malloc(sizeof *h);
        if (!h) return -1;
        h->pos = c->rx_in;
        h->len = n;
        h->next = NULL;
        if (t) t->next = h;
        else c->holes = h;
        c->holes_tail = h;
    }
    c->hole_bytes += n;
    return 0;
}

/* Appends m's bytes to c's stream: 1 if it kept m (its real bytes are
 * read from it), 0 if m may go, -1 without memory. */
static int stream_append(eccl_conn *c, sg_msg *m)
{
    for (int i = 0; i < m->nseg; i++) {
        const sg_seg *g = &m->seg[i];
        if (g->phantom && hole_append(c, g->len)) return -1;
        c->rx_in += g->len;
    }
    if (m->nseg == 0) c->rx_in += m->len;
    if (m->real == 0) return 0;
    m->ooo = NULL;
    if (c->rxq_tail) c->rxq_tail->ooo = m;
    else c->rxq = m;
    c->rxq_tail = m;
    c->rx_len += m->real;
    return 1;
}

/* Returns 1 if it kept `m`. */
static int take_in_order(eccl_conn *c, sg_msg *m)
{
    c->rx_seq++;
    if (m->type == M_FIN) {
        c->eof = 1;
    } else if (!c->eof && !c->reset) {
        int kept = stream_append(c, m);
        if (kept >= 0) return kept;
        c->reset = 1;
    }
    return 0;
}

/* Returns 1 if it kept `m` (queued out of order, or its bytes unread). */
/* wire_time: a large DATA message arrived. Its time on the wire is what
 * its route's bandwidth now charges it alone (CM02 without the latency):
 * the link's capacity, not what sharing or the receiver's queue left of it
 * (a permanent receiver takes messages in the order they were put, so a
 * fast link's message may wait behind a slow one's: timing the arrivals
 * would blame the fast link). */
static void wire_note(sg_env *e, eccl_conn *c, const sg_msg *m)
{
    double bw = sg_host_get_route_bandwidth(m->src_host, e->host);
    if (!(bw > 0)) return;
    c->wire_s += (double)m->len / bw;
    c->wire_bytes += m->len;
}

static void sg_wire_time(void *ctx, eccl_conn *c, uint64_t *bytes, uint64_t *ns)
{
    (void)ctx;
    *bytes = c->wire_bytes;
    *ns = (uint64_t)llround(c->wire_s * 1e9);
}

static int deliver(sg_env *e, sg_msg *m)
{
    eccl_sg_log(e, ECCL_LOG_TRACE, "deliver type %d dst %llu len %zu", m->type,
                (unsigned long long)m->dst, m->len);
    if (m->type == M_SYN) {
        on_syn(e, m);
        return 0;
    }
    if (m->type == M_FABRIC) {
        if (e->fabric_rx) e->fabric_rx(e, m->data, m->fabric_len);
        return 0;
    }
    eccl_conn *c = conn_by_id(e, m->dst);
    if (!c) {
        /* Closed before the server's answer came: tell the server side, as
         * a TCP stack would answer a segment for an unknown connection. */
        if (m->type == M_SYNACK) send_ctl(e, m->src_env, m->src_host, m->src_boot, M_FIN, m->src, 0);
        return 0;
    }
    cand_add(c);
    if (m->type == M_DATA && m->len >= WIRE_TIME_MIN) wire_note(e, c, m);
    if (m->type == M_DATA || m->type == M_FIN) {
        /* Messages of one stream travel in parallel (the mailbox has a
         * permanent receiver), so a small one can overtake a big one sent
         * before it: put the stream back in order. */
        if (m->seq != c->rx_seq) {
            sg_msg **pp = &c->ooo;
            while (*pp && (*pp)->seq < m->seq) pp = &(*pp)->ooo;
            m->ooo = *pp;
            *pp = m;
            return 1;
        }
        int kept = take_in_order(c, m);
        while (c->ooo && c->ooo->seq == c->rx_seq) {
            sg_msg *q = c->ooo;
            c->ooo = q->ooo;
            if (!take_in_order(c, q)) free(q);
        }
        return kept;
    }
    switch (m->type) {
    case M_SYNACK:
        if (c->state != C_CONNECTING) return 0;
        c->state = C_UP;
        c->edge = 1;
        c->peer_id = m->src;
        c->peer_env = m->src_env;
        break;
    case M_RST:
        if (c->state != C_CONNECTING) return 0;
        eccl_sg_log(e, ECCL_LOG_DEBUG, "connect to %s: refused", c->addr);
        c->state = C_FAILED;
        c->edge = 1;
        break;
    default:
        break;
    }
    return 0;
}

/* A message taken off the wire (receiver actor or latency net): its CPU
 * cost, then its effect. */
static void deliver_taken(sg_env *e, sg_msg *m)
{
    if (m->type == M_DATA) e->msg_debt_s += e->msg_cost_s;
    if (m->type == M_DATA && e->w->tcp_window > 0) stream_acked(e->w, m);
    if (!deliver(e, m)) free(m);
}

static void receiver_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sg_env *e = sg_actor_self_get_data();
    /* A receiver only serves others: it must not keep the simulation
     * alive once every rank and master has finished. */
    sg_actor_daemonize(sg_actor_self());
    /* A permanent receiver makes every put start at once instead of
     * waiting in the mailbox for our get: bytes flow while we are busy
     * (like TCP into a socket buffer), concurrent flows share bandwidth,
     * and, above all, SimGrid 3.32 aborts (CommImpl::start, "Assertion
     * from_->is_on() failed") when a get matches a detached put still
     * queued from a host that has been turned off since. rx_ready before
     * the simcall (sg_env.lanes): the puts of this round are handled in the
     * order their actors ran, so those made after this line start at once
     * and those made before it wait in mbox unstarted. */
    e->rx_ready = 1;
    sg_mailbox_set_receiver(sg_mailbox_get_name(e->mbox));
    for (unsigned i = 1; i < e->nlanes; i++) {
        char name[48];
        snprintf(name, sizeof name, "eccl-env-%llu.%u", (unsigned long long)e->id, i);
        e->lanes[i] = sg_mailbox_by_name(name);
        sg_mailbox_set_receiver(name);
    }
    /* No simcall from here to the first get: no put falls in between. */
    if (e->nlanes > 1) e->lanes_from = e->rx_posted;
    /* After M_STOP (rx_done) the loop only empties the mailbox: what came
     * behind it was taken in at once (a permanent receiver's puts end when
     * they arrive) and nobody will get it; from rx_done on, nothing more is
     * put (post_as), so rx_posted is all there will be. */
    while (!e->rx_done || e->rx_taken < e->rx_posted || e->rx_early > 0) {
        void *p = NULL;
        /* As SimGrid would pick in one mailbox: the oldest started put,
         * else an unstarted one (early), else the next put to come. */
        sg_mailbox_t lane;
        if (e->rx_taken >= e->rx_posted && e->rx_early > 0) {
            e->rx_early--;
            lane = e->mbox;
        } else {
            lane = env_lane(e, e->rx_taken++);
        }
        sg_comm_t comm = sg_mailbox_get_async(lane, &p);
        /* sg_comm_wait turns SimGrid's exceptions (a sender's host went
         * down mid-transfer) into an error code; sg_mailbox_get would
         * throw them through this C frame. */
        e->w->waits++;
        sg_error_t err = sg_comm_wait(comm);
        if (err != SG_OK || !p) continue;
        sg_msg *m = p;
        if (m->src_pid >= 0) outbox_mark(e->w, m->src_pid, m->put_seq);
        if (m->type == M_STOP || e->rx_done) {
            /* from M_STOP on, post() drops what comes for us */
            if (m->type == M_STOP) e->rx_done = 1;
            free(m);
            continue;
        }
        /* A frame costs its owner a recv: charged to the owner's next wait
         * (sg_wait), not slept here. A receiver that slept per message would
         * leave the rest queued in SimGrid's mailbox, whose every get
         * shifts the whole queue (quadratic: 18% of a 10,000-rank run).
         * Handshakes and FINs are the kernel's work: free. */
        deliver_taken(e, m);
        eccl_sg_cv_broadcast(&e->cv);
    }
    eccl_net_sg_drain_self(e->w);
}

/* Latency net: takes the env's arrivals when they are due, whatever its
 * owner does, until the env stops. */
static void latency_receiver_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sg_env *e = sg_actor_self_get_data();
    sg_actor_daemonize(sg_actor_self());
    while (!e->rx_done) {
        latency_catch_up(e);
        e->w->waits++;
        eccl_sg_cv_wait(&e->cv, NULL, arrival_in(e));
    }
}

static eccl_result receiver_start(sg_env *e, void (*main_fn)(int, char **))
{
    char name[48];
    snprintf(name, sizeof name, "eccl-rx-%llu", (unsigned long long)e->id);
    e->receiver = sg_actor_init(name, e->host);
    if (!e->receiver) return ECCL_ERR_SYSTEM;
    sg_actor_set_data(e->receiver, e);
    sg_actor_ref(e->receiver);
    sg_actor_start(e->receiver, main_fn, 0, NULL);
    return ECCL_OK;
}

/* ---- host receivers -------------------------------------------------------
 * Under the flow model, the envs of a host that need no lanes (ranks, and
 * any env but a coordinator's or an RDMA rank's) share one mailbox and one
 * receiver actor, which hands each message to the env it names (to_env).
 * A receiver per env was a second actor per rank: at 96K ranks 96K more
 * stacks and actors (about 14 KB a rank, the whole memory gap between the
 * flow and latency models), all to block on one get each. The price: the
 * host's mailbox delivers in put order across its envs, so a message that
 * landed for one rank can wait behind one still on the wire for another
 * rank of the host (the head-of-line block of the pitfalls, now across a
 * host's processes as it already was across an env's conns). A host that
 * goes off takes its receiver with it; its next boot gets a new one (and a
 * new mailbox: the old one may still hold puts nobody will take). */
typedef struct sg_host_rx {
    eccl_sg_world *w;
    sg_host_t host;
    int boot;
    sg_mailbox_t mbox;
    sg_actor_t actor;
    aid_t pid;
    struct sg_host_rx *next; /* in w->host_rx_list */
} sg_host_rx;

static void host_receiver_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sg_host_rx *hr = sg_actor_self_get_data();
    eccl_sg_world *w = hr->w;
    sg_actor_daemonize(sg_actor_self()); /* ends with the simulation */
    sg_mailbox_set_receiver(sg_mailbox_get_name(hr->mbox));
    for (;;) {
        void *p = NULL;
        sg_comm_t comm = sg_mailbox_get_async(hr->mbox, &p);
        if (sg_comm_wait(comm) != SG_OK || !p) continue; /* see receiver_main */
        sg_msg *m = p;
        if (m->src_pid >= 0) outbox_mark(w, m->src_pid, m->put_seq);
        sg_env *e = sg_idmap_get(&w->env_ids, m->to_env);
        if (!e || e->rx_done) { /* stopped or destroyed meanwhile */
            free(m);
            continue;
        }
        const uint64_t id = e->id;
        deliver_taken(e, m);
        /* deliver may have put a reply (simcalls): the env's owner may have
         * stopped and freed it meanwhile. */
        e = sg_idmap_get(&w->env_ids, id);
        if (e) eccl_sg_cv_broadcast(&e->cv);
    }
}

/* The mailbox of the receiver of e's host in e's boot, started if need be;
 * NULL when out of memory. Other envs of the host may be made while this
 * one makes simcalls: the record is published whole, after the mailbox's
 * simcall, and before the actor's (they find the mailbox and put there;
 * the receiver takes those puts once it runs). */
static sg_mailbox_t host_rx_mbox(sg_env *e)
{
    eccl_sg_world *w = e->w;
    const uint64_t key = (uint64_t)(uintptr_t)e->host;
    sg_host_rx *hr = sg_idmap_get(&w->host_rx, key);
    if (hr && hr->boot == e->boot) return hr->mbox;
    char name[96];
    snprintf(name, sizeof name, "eccl-host-%s.%d", sg_host_get_name(e->host), e->boot);
    sg_mailbox_t mbox = sg_mailbox_by_name(name);
    hr = sg_idmap_get(&w->host_rx, key); /* look again after the simcall */
    if (hr && hr->boot == e->boot) return hr->mbox;
    if (!hr) {
        hr = calloc(1, sizeof *hr);
        if (!hr || sg_idmap_put(&w->host_rx, key, hr)) {
            free(hr);
            return NULL;
        }
        hr->w = w;
        hr->host = e->host;
        hr->next = w->host_rx_list;
        w->host_rx_list = hr;
    } else if (hr->actor) {
        sg_actor_unref(hr->actor); /* died when its host went off */
    }
    hr->boot = e->boot;
    hr->mbox = mbox;
    hr->actor = NULL;
    hr->pid = -1;
    snprintf(name, sizeof name, "eccl-hrx-%s.%d", sg_host_get_name(e->host), e->boot);
    sg_actor_t a = sg_actor_init(name, e->host);
    if (!a) {
        hr->boot = -1; /* the next env of the host tries again */
        return NULL;
    }
    sg_actor_set_data(a, hr);
    sg_actor_ref(a);
    hr->actor = a;
    hr->pid = sg_actor_get_pid(a);
    sg_actor_start(a, host_receiver_main, 0, NULL);
    return mbox;
}

aid_t eccl_net_sg_host_receiver(const eccl_sg_world *w, const_sg_host_t h)
{
    const sg_host_rx *hr = sg_idmap_get(&w->host_rx, (uint64_t)(uintptr_t)h);
    return hr && hr->actor && hr->boot == eccl_sg_host_boot(h) ? hr->pid : -1;
}

void eccl_net_sg_free_host_rx(eccl_sg_world *w)
{
    while (w->host_rx_list) {
        sg_host_rx *hr = w->host_rx_list;
        w->host_rx_list = hr->next;
        if (hr->actor) sg_actor_unref(hr->actor);
        free(hr);
    }
    sg_idmap_free(&w->host_rx);
}

eccl_result eccl_net_sg_start(sg_env *e, unsigned nlanes)
{
    e->nlanes = 1;
    e->lanes_from = UINT64_MAX;
    if (!e->w->latency_net && nlanes <= 1 && !e->ibv) {
        e->shared_rx = 1;
        e->mbox = host_rx_mbox(e);
        return e->mbox ? ECCL_OK : ECCL_ERR_NO_MEMORY;
    }
    char name[48];
    snprintf(name, sizeof name, "eccl-env-%llu", (unsigned long long)e->id);
    e->mbox = sg_mailbox_by_name(name);
    if (e->w->latency_net) {
        /* A coordinator (lanes: the master, a relay) answers handshakes while
         * it is busy, as a kernel does: it keeps a receiver actor. A rank
         * takes its arrivals in its own calls. */
        return nlanes > 1 ? receiver_start(e, latency_receiver_main) : ECCL_OK;
    }
    if (nlanes > 1) {
        /* SimGrid never frees a mailbox: lanes only where a fan-in needs
         * them (a master's env), never per rank. */
        e->lanes = calloc(nlanes, sizeof *e->lanes);
        if (!e->lanes) return ECCL_ERR_NO_MEMORY;
        /* The other lanes are made by the receiver (receiver_main): a
         * mailbox's creation is a simcall, and 255 of them here would hold
         * the master back from listening at time 0 while the ranks try to
         * connect (then all refused, they came back 50 ms later). */
        e->lanes[0] = e->mbox;
        e->nlanes = nlanes;
    }
    return receiver_start(e, receiver_main);
}

void eccl_net_sg_stop(sg_env *e)
{
    if (e->w->latency_net && !e->rx_done) {
        e->rx_done = 1; /* post_target: nothing more for us */
        if (e->receiver) {
            eccl_sg_cv_broadcast(&e->cv);
            sg_actor_join(e->receiver, -1);
            sg_actor_unref(e->receiver);
            e->receiver = NULL;
        }
        arrivals_free(e);
        return;
    }
    /* The host's receiver drops what comes for us from now on, and so
     * does the latency path (post_target). */
    if (e->shared_rx) {
        e->rx_done = 1;
        arrivals_free(e);
    }
    if (!e->receiver) return;
    /* FIFO behind anything already queued for us. */
    sg_msg *m = msg_new(e, M_STOP, 0, 0, 0);
    if (m) post(e->w, e->id, m);
    sg_actor_join(e->receiver, -1);
    sg_actor_unref(e->receiver);
    e->receiver = NULL;
}

void eccl_net_sg_free_dead(sg_env *e)
{
    for (eccl_conn *c = e->conns, *n; c; c = n) {
        n = c->next;
        conn_free(c);
    }
    e->conns = e->conns_tail = NULL;
    for (eccl_listener *l = e->listeners, *n; l; l = n) {
        n = l->next;
        free(l);
    }
    e->listeners = NULL;
    arrivals_free(e);
    if (e->receiver) sg_actor_unref(e->receiver);
    e->receiver = NULL;
}

void eccl_net_sg_crash(sg_env *e)
{
    for (eccl_listener *l = e->listeners; l; l = l->next) registry_remove(e->w, l);
    for (eccl_conn *c = e->conns; c; c = c->next) {
        if (c->state != C_UP) continue;
        sg_env *pe = env_by_id(e->w, c->peer_env);
        if (!pe || pe->dead) continue;
        eccl_conn *pc = conn_by_id(pe, c->peer_id);
        if (!pc) continue;
        pc->reset = 1;
        cand_add(pc);
        eccl_sg_cv_broadcast(&pe->cv);
    }
}

/* ---- listen / accept ----------------------------------------------------- */

static eccl_result sg_listen(void *ctx, const char *addr, void *user,
                             eccl_listener **out, char *bound)
{
    sg_env *e = ctx;
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    if (!out || !colon || colon == addr) return ECCL_ERR_INVALID_ARG;
    char *end;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (*end || port > 65535 || (size_t)(colon - addr) + 8 >= ECCL_ADDR_MAX)
        return ECCL_ERR_INVALID_ARG;
    if (port == 0) port = e->w->next_port++;
    eccl_listener *l = calloc(1, sizeof *l);
    if (!l) return ECCL_ERR_NO_MEMORY;
    snprintf(l->addr, sizeof l->addr, "%.*s:%lu", (int)(colon - addr), addr, port);
    eccl_listener *p = registry_find(e->w, l->addr);
    /* A host that went off silently keeps its listeners registered (a SYN
     * to it gets no answer, as on a real network); a new process on the
     * rebooted host takes the address over. */
    if (p && p->env->dead) registry_remove(e->w, p);
    else if (p) {
        eccl_sg_log(e, ECCL_LOG_WARN, "listen on %s: address in use", l->addr);
        free(l);
        return ECCL_ERR_SYSTEM;
    }
    if (registry_add(e->w, l)) {
        free(l);
        return ECCL_ERR_NO_MEMORY;
    }
    l->id = ++e->w->next_id;
    l->env = e;
    l->user = user;
    l->next = e->listeners;
    e->listeners = l;
    if (bound) snprintf(bound, ECCL_ADDR_MAX, "%s", l->addr);
    eccl_sg_log(e, ECCL_LOG_DEBUG, "listening on %s", l->addr);
    *out = l;
    return ECCL_OK;
}

static eccl_result sg_accept(void *ctx, eccl_listener *l, void *user, eccl_conn **out)
{
    sg_env *e = ctx;
    if (!l || !out) return ECCL_ERR_INVALID_ARG;
    latency_catch_up(e);
    if (!l->bl_head) return ECCL_ERR_AGAIN;
    /* The accept call; the backlog is looked at after it. */
    charge_msg(e);
    eccl_conn *c = l->bl_head;
    if (!c) return ECCL_ERR_AGAIN;
    backlog_unlink(l, c);
    c->user = user;
    c->want_read = 1;
    c->want_write = 0;
    cand_add(c);
    *out = c;
    return ECCL_OK;
}

static void sg_close(void *ctx, eccl_conn *c);

static void sg_close_listener(void *ctx, eccl_listener *l)
{
    sg_env *e = ctx;
    if (!l) return;
    registry_remove(e->w, l);
    while (l->bl_head) sg_close(ctx, l->bl_head);
    for (eccl_listener **pp = &e->listeners; *pp; pp = &(*pp)->next) {
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    }
    free(l);
}

void eccl_net_sg_listener_quiet(eccl_listener *l, int quiet)
{
    l->quiet = quiet != 0;
    /* Heard again with connections already waiting: the owner may be
     * asleep in wait, which only rechecks on a wake-up. */
    if (!l->quiet && l->bl_head) eccl_sg_cv_broadcast(&l->env->cv);
}

void eccl_net_sg_route_cost(const_sg_host_t from, const_sg_host_t to, size_t bytes,
                            double *latency_s, double *wire_s)
{
    /* CM02 (the model eccl-sim loads) charges a message latency + size /
     * bandwidth, with the size net_sg puts on the wire (see post_as). */
    *latency_s = sg_host_get_route_latency(from, to);
    *wire_s = (double)(bytes + MSG_OVERHEAD) / sg_host_get_route_bandwidth(from, to);
}

/* ---- conns --------------------------------------------------------------- */

static eccl_result sg_connect(void *ctx, const char *addr, void *user, eccl_conn **out)
{
    sg_env *e = ctx;
    if (!addr || !out) return ECCL_ERR_INVALID_ARG;
    /* A listener that speaks RDMA advertises "ibv:HOST:PORT" and takes
     * plain streams too (core/net/ibv.h), as net_tcp connects to it. */
    addr = eccl_addr_plain(addr);
    eccl_conn *c = conn_new(e, user, addr);
    if (!c) return ECCL_ERR_NO_MEMORY;
    e->w->conns++;
    eccl_listener *l = registry_find(e->w, addr);
    conn_link(e, c);
    cand_add(c);
    if (!l) {
        /* Nobody bound there: refused at once, reported through send/recv
         * and wait like a late failure (one path in core). */
        eccl_sg_log(e, ECCL_LOG_DEBUG, "connect to %s: nobody listening", addr);
        c->state = C_FAILED;
        c->edge = 1;
    } else {
        c->state = C_CONNECTING;
        c->peer_host = l->env->host;
        c->peer_boot = l->env->boot;
        c->peer_env = l->env->id; /* until the SYNACK: the listener's */
        sg_msg *m = msg_new(e, M_SYN, l->id, c->id, 0);
        if (m) conn_post(c, l->env->id, m);
    }
    *out = c;
    return ECCL_OK;
}

/* tcp_window: the most bytes a second this conn's stream sends, window /
 * RTT with RTT twice its route's one-way latency (read at each send, so a
 * slow_link that changes the latency changes the cap); 0: no cap (no
 * window, or a route without latency). */
static double stream_rate(const sg_env *e, const eccl_conn *c)
{
    if (!(e->w->tcp_window > 0) || !c->peer_host) return 0;
    double lat = sg_host_get_route_latency(e->host, c->peer_host);
    return lat > 0 ? e->w->tcp_window / (2 * lat) : 0;
}

/* tcp_window: the most wire bytes a stream keeps in flight, sent and not
 * yet taken by the far end: a window and one message more. At the stream's
 * pace it holds about half a window and a message (a message's latency,
 * then its transfer at window / RTT), so this never binds there; it binds
 * when a link does, where a paced stream would otherwise keep putting
 * messages on the link at its pace and the link's queue (SimGrid's flows
 * in progress, each a share of the link) would grow without end: a TCP
 * sender waits for acknowledgements instead. */
static size_t stream_inflight_max(const eccl_sg_world *w) { return (size_t)w->tcp_window + SEND_MAX; }

/* tcp_window: the stream's bytes in flight are at the limit (it waits for
 * stream_acked, not for a time). */
static int stream_full(const sg_env *e, const eccl_conn *c)
{
    return e->w->tcp_window > 0 && c->unacked >= stream_inflight_max(e->w);
}

/* tcp_window: whether the stream's pace, or its bytes in flight, keep it
 * from sending now. */
static int stream_paced(const sg_env *e, const eccl_conn *c)
{
    if (stream_full(e, c)) return 1;
    /* A nanosecond of slack: SimGrid's timing precision, so that a wait
     * woken at the pace never finds it a rounding error short. */
    return e->w->tcp_window > 0 && c->pace_s - simgrid_get_clock() > 1e-9;
}

/* tcp_window: the far end's receiver took a DATA message of conn `src`:
 * its bytes leave the sender's flight, and a sender held by them (its
 * conn wants to write) is told, as an acknowledgement would. */
static void stream_acked(eccl_sg_world *w, const sg_msg *m)
{
    eccl_conn *sc = sg_idmap_get(&w->conn_ids, m->src);
    if (!sc || sc->env->dead) return; /* closed, or its rank died, meanwhile */
    const size_t bytes = m->len + MSG_OVERHEAD;
    const int was_full = sc->unacked >= stream_inflight_max(w);
    sc->unacked = sc->unacked > bytes ? sc->unacked - bytes : 0;
    if (was_full && sc->unacked < stream_inflight_max(w) && sc->want_write) {
        cand_add(sc);
        eccl_sg_cv_broadcast(&sc->env->cv);
    }
}

static eccl_result sg_send(void *ctx, eccl_conn *c, const eccl_iov *iov, int n, size_t *sent)
{
    sg_env *e = ctx;
    if (sent) *sent = 0;
    if (!c || !sent || (n > 0 && !iov)) return ECCL_ERR_INVALID_ARG;
    /* First: what the far end did meanwhile is seen after it. */
    if (n > 0) charge_msg(e);
    latency_catch_up(e);
    if (c->reset) return ECCL_ERR_CLOSED;
    if (c->state == C_FAILED) return ECCL_ERR_CONNECT;
    if (c->state != C_UP) return ECCL_OK;
    /* Phantom bytes count against SEND_MAX too: they cost wire time. */
    size_t total = 0, real = 0;
    int nseg = 0, phantom = 0;
    for (int i = 0; i < n && total < SEND_MAX; i++) {
        size_t take = iov[i].len;
        if (take > SEND_MAX - total) take = SEND_MAX - total;
        total += take;
        if (iov[i].base) real += take;
        else phantom = 1;
        nseg++;
    }
    if (total == 0) return ECCL_OK;
    /* The far end closed: TCP would accept these bytes and drop them. */
    if (c->eof) {
        *sent = total;
        return ECCL_OK;
    }
    /* A full window: nothing taken now; the bytes wait in core's queue,
     * and wait reports the conn writable once the pace allows (collect). */
    if (stream_paced(e, c)) return ECCL_OK;
    /* Without phantom iovs: the bytes alone, as before. With: the real
     * bytes, then the segment list (kept aligned), in one allocation. */
    size_t seg_at = (real + _Alignof(sg_seg) - 1) / _Alignof(sg_seg) * _Alignof(sg_seg);
    sg_msg *m = msg_new(e, M_DATA, c->peer_id, c->id,
                        phantom ? seg_at + (size_t)nseg * sizeof(sg_seg) : total);
    if (!m) return ECCL_OK; /* 0 bytes sent; core retries */
    m->len = total;
    m->real = real;
    m->seq = c->tx_seq++;
    if (phantom) m->seg = (sg_seg *)(void *)(m->data + seg_at);
    size_t off = 0, real_off = 0;
    for (int i = 0; i < n && off < total; i++) {
        size_t take = iov[i].len;
        if (take > total - off) take = total - off;
        if (take == 0) continue;
        if (phantom) {
            /* Neighbours of one kind merge: fewer holes at the receiver. */
            int ph = iov[i].base == NULL;
            if (m->nseg > 0 && m->seg[m->nseg - 1].phantom == ph) m->seg[m->nseg - 1].len += take;
            else m->seg[m->nseg++] = (sg_seg){.len = take, .phantom = ph};
        }
        if (iov[i].base) {
            memcpy(m->data + real_off, iov[i].base, take);
            real_off += take;
        }
        off += take;
    }
    conn_post(c, c->peer_env, m);
    *sent = total;
    eccl_sg_charge_bytes(e, total, e->w->tls_Bps); /* their encryption (net_tls) */
    /* The stream's pace: these bytes (and their header) drain at window /
     * RTT from when the stream was last free. One message may go out at
     * once, whatever its size up to SEND_MAX; the next waits its turn. */
    const double rate = stream_rate(e, c);
    if (e->w->tcp_window > 0) c->unacked += total + MSG_OVERHEAD;
    if (rate > 0) {
        const double now = simgrid_get_clock();
        c->pace_s = (c->pace_s > now ? c->pace_s : now) + (double)(total + MSG_OVERHEAD) / rate;
    }
    return ECCL_OK;
}

static eccl_result sg_recv(void *ctx, eccl_conn *c, void *buf, size_t len, size_t *got)
{
    if (got) *got = 0;
    if (!c || !got) return ECCL_ERR_INVALID_ARG;
    latency_catch_up(ctx);
    if (c->reset) return ECCL_ERR_CLOSED;
    if (c->state == C_FAILED) return ECCL_ERR_CONNECT;
    if (c->state != C_UP || len == 0) return ECCL_OK;
    if (c->rx_len + c->hole_bytes == 0) return c->eof ? ECCL_ERR_CLOSED : ECCL_OK;
    sg_hole *h = c->holes;
    size_t n;
    if (h && h->pos == c->rx_out) {
        /* At a hole: a phantom read takes it, a real one reads zeros. */
        n = len < h->len ? len : h->len;
        if (buf) memset(buf, 0, n);
        h->pos += n;
        h->len -= n;
        c->hole_bytes -= n;
        if (h->len == 0) {
            c->holes = h->next;
            if (!c->holes) c->holes_tail = NULL;
            free(h);
        }
    } else {
        /* Real bytes up to the next hole, never across it: core reads a
         * frame's header into real memory and its phantom payload with a
         * NULL buffer, so a read must not run from one into the other. */
        size_t lim = h ? (size_t)(h->pos - c->rx_out) : c->rx_len;
        n = len < lim ? len : lim;
        for (size_t done = 0; done < n;) {
            sg_msg *q = c->rxq;
            size_t k = q->real - c->rx_off < n - done ? q->real - c->rx_off : n - done;
            if (buf) memcpy((unsigned char *)buf + done, q->data + c->rx_off, k);
            done += k;
            c->rx_off += k;
            if (c->rx_off == q->real) {
                c->rxq = q->ooo;
                if (!c->rxq) c->rxq_tail = NULL;
                c->rx_off = 0;
                free(q);
            }
        }
        c->rx_len -= n;
    }
    c->rx_out += n;
    *got = n;
    sg_env *e = ctx;
    eccl_sg_charge_bytes(e, n, e->w->tls_Bps); /* their decryption (net_tls) */
    return ECCL_OK;
}

static void sg_set_interest(void *ctx, eccl_conn *c, int read, int write)
{
    (void)ctx;
    if (!c) return;
    c->want_read = read != 0;
    c->want_write = write != 0;
    cand_add(c);
}

static void sg_close(void *ctx, eccl_conn *c)
{
    sg_env *e = ctx;
    if (!c) return;
    if (c->backlog_of) backlog_unlink(c->backlog_of, c);
    if (c->state == C_UP && !c->reset && !e->dead) {
        sg_msg *m = msg_new(e, M_FIN, c->peer_id, c->id, 0);
        if (m) {
            m->seq = c->tx_seq++;
            /* Held, it dies with the conn below: the far end, cut off,
             * finds out through its own timers. */
            conn_post(c, c->peer_env, m);
        }
    }
    conn_unlink(e, c);
    conn_free(c);
}

/* ---- what net_ibv's protocol needs beyond the ops ------------------------ */

void eccl_net_sg_conn_addr(const eccl_conn *c, char *addr)
{
    snprintf(addr, ECCL_ADDR_MAX, "%s", c->addr);
}

void eccl_net_sg_watch_hangup(eccl_conn *c, int on)
{
    c->watch_hangup = on != 0;
    cand_add(c);
}

int eccl_net_sg_hung_up(const eccl_conn *c) { return c->reset || c->eof; }

void eccl_net_sg_watch(sg_env *e, sg_event_source *src)
{
    /* At the end: wait reports sources in the order they were watched. */
    src->next = NULL;
    src->prev = NULL;
    sg_event_source **pp = &e->sources;
    while (*pp) {
        src->prev = *pp;
        pp = &(*pp)->next;
    }
    /* No wake-up: a channel is watched when it is made, before it can
     * hold an event. */
    *pp = src;
}

void eccl_net_sg_unwatch(sg_env *e, sg_event_source *src)
{
    if (src->prev) src->prev->next = src->next;
    else if (e->sources == src) e->sources = src->next;
    if (src->next) src->next->prev = src->prev;
    src->next = src->prev = NULL;
}

int eccl_net_sg_fabric_reachable(const sg_env *from, uint64_t to_env)
{
    const sg_env *to = env_by_id(from->w, to_env);
    return to && !to->dead && !to->rx_done && fate(from, to->host, to->boot) == FATE_SEND;
}

int eccl_net_sg_fabric_post(sg_env *from, uint64_t to_env, const void *data, size_t len,
                            size_t wire_bytes)
{
    if (!eccl_net_sg_fabric_reachable(from, to_env)) return -1;
    sg_env *to = env_by_id(from->w, to_env);
    sg_msg *m = msg_new(from, M_FABRIC, 0, 0, len);
    if (!m) return -1;
    memcpy(m->data, data, len);
    m->fabric_len = len;
    m->len = wire_bytes; /* what the wire charges; data holds only len bytes */
    post(from->w, to->id, m);
    return 0;
}

/* ---- wait / wake --------------------------------------------------------- */

static int add_ready(void **ready, int n, int max, void *user)
{
    if (!user || n >= max) return n;
    for (int i = 0; i < n; i++)
        if (ready[i] == user) return n;
    ready[n] = user;
    return n + 1;
}

/* cand[0..n) by conn id, in place. Not qsort: glibc's sorts through a
 * malloc'd buffer past 1 KiB, and a master's env sorts thousands of
 * candidates on every wait under a burst. Candidates mostly come in id
 * order already (a check, then done); otherwise a heapsort. */
static void cand_sift(eccl_conn **a, size_t i, size_t n)
{
    eccl_conn *x = a[i];
    for (size_t c; (c = 2 * i + 1) < n; i = c) {
        if (c + 1 < n && a[c + 1]->id > a[c]->id) c++;
        if (a[c]->id <= x->id) break;
        a[i] = a[c];
    }
    a[i] = x;
}

static void cand_sort(eccl_conn **a, size_t n)
{
    size_t i = 1;
    while (i < n && a[i - 1]->id < a[i]->id) i++;
    if (i >= n) return;
    for (i = n / 2; i-- > 0;) cand_sift(a, i, n);
    for (size_t m = n; m-- > 1;) {
        eccl_conn *t = a[0];
        a[0] = a[m];
        a[m] = t;
        cand_sift(a, 0, m);
    }
}

/* Reports ready conns in creation order, as a walk of every conn would. */
static int collect(sg_env *e, void **ready, int max)
{
    int n = 0;
    e->pace_due_s = -1;
    if (e->ncand > 1) {
        cand_sort(e->cand, e->ncand);
        for (size_t i = 0; i < e->ncand; i++) e->cand[i]->cand_idx = i;
    }
    size_t keep = 0, i = 0;
    for (; i < e->ncand && n < max; i++) {
        eccl_conn *c = e->cand[i];
        int r = 0, w = 0, paced = 0;
        if (!c->backlog_of) {
            int bad = c->reset || c->state == C_FAILED;
            r = c->want_read && (bad || c->rx_len > 0 || c->hole_bytes > 0 || c->eof);
            r |= c->watch_hangup && (c->reset || c->eof);
            w = c->want_write && c->state != C_CONNECTING;
            /* A paced stream (tcp_window) is writable once its pace
             * allows; until then it stays a candidate, and wait sleeps no
             * later than that. */
            if (w && c->state == C_UP && !bad && stream_paced(e, c)) {
                w = 0;
                paced = 1;
                /* A full stream is woken by its acknowledgement instead. */
                if (!stream_full(e, c) && (e->pace_due_s < 0 || c->pace_s < e->pace_due_s))
                    e->pace_due_s = c->pace_s;
            }
            if (c->edge && (c->want_read || c->want_write)) {
                c->edge = 0;
                r = 1;
            }
        }
        /* Not ready: nothing will make it so without a cand_add. A pending
         * edge stays (it waits for interest). */
        if (r || w || c->edge || paced) {
            c->cand_idx = keep;
            e->cand[keep++] = c;
        } else {
            c->in_cand = 0;
        }
        if (r || w) n = add_ready(ready, n, max, c->user);
    }
    /* Those not looked at (max reached) stay, in order. */
    for (; i < e->ncand; i++) {
        e->cand[i]->cand_idx = keep;
        e->cand[keep++] = e->cand[i];
    }
    e->ncand = keep;
    for (eccl_listener *l = e->listeners; l && n < max; l = l->next)
        if (l->bl_head && !l->quiet) n = add_ready(ready, n, max, l->user);
    for (sg_event_source *s = e->sources; s && n < max; s = s->next)
        if (s->pending > 0) n = add_ready(ready, n, max, s->user);
    return n;
}

static uint64_t now_ns(void) { return eccl_sg_now_ns(); }

static int sg_wait(void *ctx, uint64_t deadline_ns, void **ready, int max)
{
    sg_env *e = ctx;
    if (!ready || max <= 0) return 0;
    int n = 0;
    if (e->msg_debt_s > 0) {
        /* The CPU time of the messages taken since the last wait: a
         * single-threaded owner handles them before anything else. */
        double t = e->msg_debt_s;
        e->msg_debt_s = 0;
        e->w->waits++;
        sg_actor_sleep_for(t);
    }
    uint64_t gen = e->wake_gen;
    int slept = 0;
    for (;;) {
        /* Woken (see below): one round for the receiver before we look. */
        if (slept) sg_actor_yield();
        latency_catch_up(e);
        n = collect(e, ready, max);
        if (n > 0 || e->wake_pending || e->wake_gen != gen || deadline_ns == 0) break;
        /* Latency net: sleep no later than the next arrival; a paced
         * stream: no later than its pace lets it send. */
        double due = arrival_in(e);
        if (e->pace_due_s >= 0) {
            double d = e->pace_due_s - simgrid_get_clock();
            if (d < 0) d = 0;
            if (due < 0 || d < due) due = d;
        }
        if (deadline_ns == UINT64_MAX) {
            e->w->waits++;
            eccl_sg_cv_wait(&e->cv, NULL, due);
            slept = 1;
            continue;
        }
        uint64_t now = now_ns();
        if (now >= deadline_ns) break;
        double left = (double)(deadline_ns - now) / 1e9;
        e->w->waits++;
        eccl_sg_cv_wait(&e->cv, NULL, due >= 0 && due < left ? due : left);
        slept = 1;
    }
    e->wake_pending = 0;
    /* No mutex (see sg_cv): nothing here is a simcall but the sleep and
     * these yields. A woken caller yields three times in all, where the
     * mutexes' simcalls used to be (the env's lock before looking, its
     * unlock and the engine's lock after): each lets the other actors of
     * this instant run first, above all the receiver, which hands over one
     * message per two simcalls of its own, so they decide how many of the
     * messages that land at one instant a woken rank finds in its step.
     * That is a scheduling artefact, but the results rest on it: with no
     * yield, phantom8's all-reduce went from 21.4 to 31.9 ms (a rank saw a
     * 4 MiB frame split at SEND_MAX without its 192-byte tail, and the
     * reductions stopped overlapping the network); with "yield until the
     * receiver is idle", 27.2 ms, and scale10k's all-reduces doubled (its
     * master served the ranks in another order). With the three, the CI
     * scenarios simulate as before but for ordering ties and a few means
     * within 2% (slowlink4, topo_wan), for a quarter of the simcalls the
     * mutexes cost. A poll that finds nothing (deadline 0
     * or past) yields once: a loop of polls must not starve this instant's
     * other actors. */
    if (slept) {
        sg_actor_yield();
        sg_actor_yield();
    } else if (n == 0) {
        sg_actor_yield();
    }
    eccl_sg_log(e, ECCL_LOG_TRACE, "wait(%llu) -> %d", (unsigned long long)deadline_ns, n);
    return n;
}

static void sg_wake(void *ctx)
{
    sg_env *e = ctx;
    e->wake_gen++;
    e->wake_pending = 1;
    eccl_sg_cv_broadcast(&e->cv);
}

const eccl_net_ops eccl_net_sg_ops = {
    .size = sizeof(eccl_net_ops),
    .listen = sg_listen,
    .accept = sg_accept,
    .close_listener = sg_close_listener,
    .connect = sg_connect,
    .send = sg_send,
    .recv = sg_recv,
    .set_interest = sg_set_interest,
    .close = sg_close,
    .wait = sg_wait,
    .wake = sg_wake,
    .wire_time = sg_wire_time,
};
