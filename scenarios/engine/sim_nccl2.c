/* NCCL 2.x's bootstrap over an eccl_env (see sim_nccl2.h). */
#include "sim_nccl2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One thread's blocking view of its env. */
typedef struct nc {
    eccl_env *env;
    const eccl_nccl2_options *o;
    const eccl_nccl2_hooks *h;
    eccl_nccl2_result *res;
} nc;

/* The info a rank sends the root (NCCL's struct extInfo). */
#define INFO_BYTES (8 + 2 * ECCL_NCCL2_ADDR_BYTES)

static uint64_t nc_now(const nc *b) { return b->env->clock->now_ns(b->env->clock_ctx); }

static int nc_fail(nc *b, const char *what, eccl_result rc)
{
    const char *how = rc == ECCL_ERR_TIMEOUT   ? "timed out (nccl2_timeout)"
                      : rc == ECCL_ERR_CLOSED  ? "connection closed or reset by the peer"
                      : rc == ECCL_ERR_CONNECT ? "connection refused"
                                               : eccl_strerror(rc);
    if (!b->res->why[0]) snprintf(b->res->why, sizeof b->res->why, "%s: %s", what, how);
    return -1;
}

/* Blocks until `user` (a conn's or listener's) is reported ready. Every
 * other object has its interest off, so anything else reported is a bug
 * here, which would spin forever if tolerated: it fails instead. */
static eccl_result nc_block(nc *b, void *user)
{
    void *ready[8];
    for (;;) {
        if (nc_now(b) >= b->o->deadline_ns) return ECCL_ERR_TIMEOUT;
        int n = b->env->net->wait(b->env->net_ctx, b->o->deadline_ns, ready, 8);
        for (int i = 0; i < n; i++)
            if (ready[i] == user) return ECCL_OK;
        if (n > 0) {
            snprintf(b->res->why, sizeof b->res->why, "internal: a socket not waited on is ready");
            return ECCL_ERR_SYSTEM;
        }
    }
}

/* The CPU time of what the thread took since it last waited: a poll makes
 * the env charge it now (a master's env charges per message taken when it
 * next waits), so the root pays each rank's message before the next. */
static void nc_settle(nc *b)
{
    void *ready[1];
    b->env->net->wait(b->env->net_ctx, 0, ready, 1);
}

/* ncclSocketConnect: a blocking connect, retried every 1 ms while refused
 * (20,000 times at most, then an error), as NCCL 2.x does. */
static eccl_result nc_connect(nc *b, const char *addr, void *user, eccl_conn **out)
{
    const eccl_net_ops *net = b->env->net;
    void *ctx = b->env->net_ctx;
    for (int tries = 0;;) {
        eccl_conn *c = NULL;
        eccl_result rc = net->connect(ctx, addr, user, &c);
        if (rc != ECCL_OK) return rc;
        /* Writable once the handshake ended, up or refused. */
        net->set_interest(ctx, c, 0, 1);
        rc = nc_block(b, user);
        /* Sending nothing reports how the handshake ended (ECCL_ERR_CONNECT:
         * refused), as connect() returns in NCCL. */
        size_t sent = 0;
        if (rc == ECCL_OK) rc = net->send(ctx, c, NULL, 0, &sent);
        if (rc == ECCL_OK) {
            net->set_interest(ctx, c, 0, 0);
            *out = c;
            return ECCL_OK;
        }
        net->close(ctx, c);
        if (rc != ECCL_ERR_CONNECT) return rc;
        b->res->refused++;
        if (++tries >= ECCL_NCCL2_RETRY_MAX) return ECCL_ERR_CONNECT;
        if (nc_now(b) + ECCL_NCCL2_RETRY_NS >= b->o->deadline_ns) return ECCL_ERR_TIMEOUT;
        b->h->sleep_ns(b->h->ctx, ECCL_NCCL2_RETRY_NS);
    }
}

/* bootstrapNetSend: the length, then the payload, in one send call (a
 * send call is one message on the wire and one charge at a charged env). */
static eccl_result nc_send(nc *b, eccl_conn *c, void *user, const void *p, uint32_t len)
{
    const eccl_net_ops *net = b->env->net;
    void *ctx = b->env->net_ctx;
    unsigned char hdr[4];
    memcpy(hdr, &len, sizeof hdr);
    size_t total = sizeof hdr + len, done = 0;
    while (done < total) {
        eccl_iov iov[2];
        int n = 0;
        if (done < sizeof hdr) iov[n++] = (eccl_iov){hdr + done, sizeof hdr - done};
        size_t off = done > sizeof hdr ? done - sizeof hdr : 0;
        iov[n++] = (eccl_iov){(const unsigned char *)p + off, len - off};
        size_t sent = 0;
        eccl_result rc = net->send(ctx, c, iov, n, &sent);
        if (rc != ECCL_OK) return rc;
        done += sent;
        if (done < total) {
            /* A full socket buffer: block until it drains. */
            net->set_interest(ctx, c, 0, 1);
            rc = nc_block(b, user);
            net->set_interest(ctx, c, 0, 0);
            if (rc != ECCL_OK) return rc;
        }
    }
    return ECCL_OK;
}

static eccl_result nc_read(nc *b, eccl_conn *c, void *user, void *p, size_t len)
{
    const eccl_net_ops *net = b->env->net;
    void *ctx = b->env->net_ctx;
    size_t done = 0;
    eccl_result rc = ECCL_OK;
    while (done < len) {
        size_t got = 0;
        rc = net->recv(ctx, c, (unsigned char *)p + done, len - done, &got);
        if (rc != ECCL_OK) break;
        done += got;
        if (got == 0) {
            net->set_interest(ctx, c, 1, 0);
            rc = nc_block(b, user);
            if (rc != ECCL_OK) break;
        }
    }
    net->set_interest(ctx, c, 0, 0);
    return rc;
}

/* bootstrapNetRecv: the length, which must be what the caller expects (NCCL
 * refuses a longer message as truncated), then the payload. */
static eccl_result nc_recv(nc *b, eccl_conn *c, void *user, void *p, uint32_t len)
{
    uint32_t n = 0;
    eccl_result rc = nc_read(b, c, user, &n, sizeof n);
    if (rc != ECCL_OK) return rc;
    if (n != len) return ECCL_ERR_PROTOCOL;
    return nc_read(b, c, user, p, len);
}

/* ncclSocketAccept: blocks until a connection waits in l's backlog. */
static eccl_result nc_accept(nc *b, eccl_listener *l, void *luser, void *cuser, eccl_conn **out)
{
    const eccl_net_ops *net = b->env->net;
    void *ctx = b->env->net_ctx;
    for (;;) {
        eccl_result rc = net->accept(ctx, l, cuser, out);
        if (rc == ECCL_OK) {
            net->set_interest(ctx, *out, 0, 0);
            return ECCL_OK;
        }
        if (rc != ECCL_ERR_AGAIN) return rc;
        b->h->listener_interest(b->h->ctx, b->env, l, 1);
        rc = nc_block(b, luser);
        b->h->listener_interest(b->h->ctx, b->env, l, 0);
        if (rc != ECCL_OK) return rc;
    }
}

static eccl_result nc_listen(nc *b, const char *addr, void *user, eccl_listener **l,
                             char slot[ECCL_NCCL2_ADDR_BYTES])
{
    char bound[ECCL_ADDR_MAX];
    eccl_result rc = b->env->net->listen(b->env->net_ctx, addr, user, l, bound);
    if (rc != ECCL_OK) return rc;
    b->h->listener_interest(b->h->ctx, b->env, *l, 0);
    /* An address must fit NCCL's slot, NUL-padded (it always does for the
     * simulator's "node-K:PORT"). */
    if (strlen(bound) >= ECCL_NCCL2_ADDR_BYTES) return ECCL_ERR_INVALID_ARG;
    memset(slot, 0, ECCL_NCCL2_ADDR_BYTES);
    memcpy(slot, bound, strlen(bound));
    return ECCL_OK;
}

/* An address slot as a string for connect. */
static void slot_str(const char slot[ECCL_NCCL2_ADDR_BYTES], char *out)
{
    memcpy(out, slot, ECCL_NCCL2_ADDR_BYTES);
    out[ECCL_NCCL2_ADDR_BYTES] = '\0';
}

/* ---- the root (bootstrapRoot) --------------------------------------------- */

int eccl_nccl2_root_run(eccl_env *env, const eccl_nccl2_options *o, const eccl_nccl2_hooks *h,
                        eccl_nccl2_result *res)
{
    nc b = {env, o, h, res};
    const eccl_net_ops *net = env->net;
    void *ctx = env->net_ctx;
    const int n = o->nranks;
    char u_listen, u_conn; /* user pointers: only their addresses matter */
    memset(res, 0, sizeof *res);
    /* Per rank: its root socket, its peer socket (as NCCL's root keeps). */
    char *root_of = calloc((size_t)n, ECCL_NCCL2_ADDR_BYTES);
    char *peer_of = calloc((size_t)n, ECCL_NCCL2_ADDR_BYTES);
    unsigned char *seen = calloc((size_t)n, 1);
    eccl_listener *l = NULL;
    char me[ECCL_NCCL2_ADDR_BYTES];
    int rc = -1;
    eccl_result e;
    if (!root_of || !peer_of || !seen) {
        nc_fail(&b, "root", ECCL_ERR_NO_MEMORY);
        goto out;
    }
    if ((e = nc_listen(&b, o->root_addr, &u_listen, &l, me)) != ECCL_OK) {
        nc_fail(&b, "root listen", e);
        l = NULL;
        goto out;
    }
    /* Receive addresses from all ranks, one connection at a time. */
    for (int got = 0; got < n; got++) {
        eccl_conn *c = NULL;
        unsigned char info[INFO_BYTES];
        if ((e = nc_accept(&b, l, &u_listen, &u_conn, &c)) != ECCL_OK) {
            nc_fail(&b, "root accept", e);
            goto out;
        }
        e = nc_recv(&b, c, &u_conn, info, INFO_BYTES);
        net->close(ctx, c);
        nc_settle(&b);
        if (e != ECCL_OK) {
            nc_fail(&b, "root recv", e);
            goto out;
        }
        int32_t rank, nranks;
        memcpy(&rank, info, 4);
        memcpy(&nranks, info + 4, 4);
        /* NCCL's root: "mismatch in rank count from procs", "rank %d of %d
         * ranks has already checked in". */
        if (nranks != n || rank < 0 || rank >= n || seen[rank]) {
            snprintf(res->why, sizeof res->why, "root: bad info (rank %d of %d; %s)", (int)rank,
                     (int)nranks, rank >= 0 && rank < n && seen[rank] ? "checked in twice" : "mismatch");
            goto out;
        }
        seen[rank] = 1;
        memcpy(root_of + (size_t)rank * ECCL_NCCL2_ADDR_BYTES, info + 8, ECCL_NCCL2_ADDR_BYTES);
        memcpy(peer_of + (size_t)rank * ECCL_NCCL2_ADDR_BYTES, info + 8 + ECCL_NCCL2_ADDR_BYTES,
               ECCL_NCCL2_ADDR_BYTES);
    }
    h->mark(h->ctx, -1, ECCL_NCCL2_GATHERED);
    /* Send the connect handle for the next rank in the ring, rank by rank. */
    for (int r = 0; r < n; r++) {
        char to[ECCL_NCCL2_ADDR_BYTES + 1];
        eccl_conn *c = NULL;
        slot_str(root_of + (size_t)r * ECCL_NCCL2_ADDR_BYTES, to);
        if ((e = nc_connect(&b, to, &u_conn, &c)) != ECCL_OK) {
            nc_fail(&b, "root connect", e);
            goto out;
        }
        e = nc_send(&b, c, &u_conn, peer_of + (size_t)((r + 1) % n) * ECCL_NCCL2_ADDR_BYTES,
                    ECCL_NCCL2_ADDR_BYTES);
        net->close(ctx, c);
        if (e != ECCL_OK) {
            nc_fail(&b, "root send", e);
            goto out;
        }
    }
    h->mark(h->ctx, -1, ECCL_NCCL2_SCATTERED);
    rc = 0;
out:
    if (l) net->close_listener(ctx, l);
    free(root_of);
    free(peer_of);
    free(seen);
    return rc;
}

/* ---- a rank (bootstrapInit, bootstrapAllGather) --------------------------- */

int eccl_nccl2_rank_run(eccl_env *env, const eccl_nccl2_options *o, const eccl_nccl2_hooks *h,
                        eccl_nccl2_result *res)
{
    nc b = {env, o, h, res};
    const eccl_net_ops *net = env->net;
    void *ctx = env->net_ctx;
    const int n = o->nranks, me = o->rank;
    /* user pointers: their addresses tell the sockets apart */
    char u_listen, u_listen_root, u_root, u_send, u_recv;
    eccl_listener *listen_peer = NULL, *listen_root = NULL;
    eccl_conn *c = NULL, *ring_send = NULL, *ring_recv = NULL;
    unsigned char info[INFO_BYTES];
    char peer_addr[ECCL_NCCL2_ADDR_BYTES], root_addr[ECCL_NCCL2_ADDR_BYTES];
    char next[ECCL_NCCL2_ADDR_BYTES], slot[ECCL_NCCL2_ADDR_BYTES];
    char where[ECCL_ADDR_MAX], to[ECCL_NCCL2_ADDR_BYTES + 1];
    eccl_result e;
    int rc = -1;
    memset(res, 0, sizeof *res);
    snprintf(where, sizeof where, "%s:0", o->host);
    /* A socket for the other ranks, one for the root. */
    if ((e = nc_listen(&b, where, &u_listen, &listen_peer, peer_addr)) != ECCL_OK) {
        listen_peer = NULL;
        nc_fail(&b, "listen", e);
        goto out;
    }
    h->listening(h->ctx, me, peer_addr);
    if ((e = nc_listen(&b, where, &u_listen_root, &listen_root, root_addr)) != ECCL_OK) {
        listen_root = NULL;
        nc_fail(&b, "listen", e);
        goto out;
    }
    /* "Stagger connection times to avoid an overload of the root". */
    if (n > ECCL_NCCL2_STAGGER_ABOVE && o->stagger_ns && me > 0)
        h->sleep_ns(h->ctx, (uint64_t)me * o->stagger_ns);
    /* Send info on my listening sockets to the root. */
    int32_t r32 = me, n32 = n;
    memcpy(info, &r32, 4);
    memcpy(info + 4, &n32, 4);
    memcpy(info + 8, root_addr, ECCL_NCCL2_ADDR_BYTES);
    memcpy(info + 8 + ECCL_NCCL2_ADDR_BYTES, peer_addr, ECCL_NCCL2_ADDR_BYTES);
    if ((e = nc_connect(&b, o->root_addr, &u_root, &c)) != ECCL_OK) {
        nc_fail(&b, "connect to root", e);
        goto out;
    }
    e = nc_send(&b, c, &u_root, info, INFO_BYTES);
    net->close(ctx, c);
    c = NULL;
    if (e != ECCL_OK) {
        nc_fail(&b, "send to root", e);
        goto out;
    }
    h->mark(h->ctx, me, ECCL_NCCL2_SENT);
    /* Get my ring successor's address from the root. */
    if ((e = nc_accept(&b, listen_root, &u_listen_root, &u_root, &c)) != ECCL_OK) {
        nc_fail(&b, "accept from root", e);
        goto out;
    }
    e = nc_recv(&b, c, &u_root, next, ECCL_NCCL2_ADDR_BYTES);
    net->close(ctx, c);
    c = NULL;
    net->close_listener(ctx, listen_root);
    listen_root = NULL;
    if (e != ECCL_OK) {
        nc_fail(&b, "recv from root", e);
        goto out;
    }
    h->mark(h->ctx, me, ECCL_NCCL2_NEXT);
    /* Connect to my successor, then accept my predecessor. */
    slot_str(next, to);
    if ((e = nc_connect(&b, to, &u_send, &ring_send)) != ECCL_OK) {
        nc_fail(&b, "ring connect", e);
        goto out;
    }
    if ((e = nc_accept(&b, listen_peer, &u_listen, &u_recv, &ring_recv)) != ECCL_OK) {
        nc_fail(&b, "ring accept", e);
        goto out;
    }
    h->mark(h->ctx, me, ECCL_NCCL2_RING);
    if (o->replay) {
        rc = 0;
        goto out;
    }
    /* The all-gather: at step i send the slot of rank me - i (own first),
     * receive the slot of rank me - i - 1 from the left. */
    memcpy(slot, peer_addr, sizeof slot);
    h->entry(h->ctx, me, -1, me, slot);
    for (int i = 0; i < n - 1; i++) {
        if (o->corrupt && i == 1) slot[0] ^= 0x20; /* test only: see corrupt */
        if ((e = nc_send(&b, ring_send, &u_send, slot, ECCL_NCCL2_ADDR_BYTES)) != ECCL_OK) {
            nc_fail(&b, "allgather send", e);
            goto out;
        }
        if ((e = nc_recv(&b, ring_recv, &u_recv, slot, ECCL_NCCL2_ADDR_BYTES)) != ECCL_OK) {
            nc_fail(&b, "allgather recv", e);
            goto out;
        }
        h->entry(h->ctx, me, i, (me - i - 1 + n) % n, slot);
    }
    h->mark(h->ctx, me, ECCL_NCCL2_DONE);
    rc = 0;
out:
    /* Closed, not dropped: the far ends see the end of the stream (NCCL's
     * process exiting), so a failure travels around the ring. */
    if (c) net->close(ctx, c);
    if (ring_send) net->close(ctx, ring_send);
    if (ring_recv) net->close(ctx, ring_recv);
    if (listen_root) net->close_listener(ctx, listen_root);
    if (listen_peer) net->close_listener(ctx, listen_peer);
    return rc;
}

/* ---- the all-gather's timing, replayed ------------------------------------ */

int eccl_nccl2_replay(int n, const double *start_s, const double *lat_s, const double *wire_s,
                      double *done_s)
{
    if (n <= 0) return 0;
    double *arrived = malloc((size_t)n * sizeof *arrived); /* A_r of the step before */
    if (!arrived) return -1;
    memcpy(done_s, start_s, (size_t)n * sizeof *done_s);
    for (int i = 0; i < n - 1; i++) {
        /* In place, from the last rank down: done_s[r - 1] still holds
         * R(i - 1) when rank r reads it; rank 0 reads the last rank's,
         * saved before it was overwritten. */
        const double last = done_s[n - 1];
        for (int r = n - 1; r >= 0; r--) {
            const double sent = r > 0 ? done_s[r - 1] : last;
            double a = sent + lat_s[r] + wire_s[r];
            if (i > 0 && arrived[r] + wire_s[r] > a) a = arrived[r] + wire_s[r];
            arrived[r] = a;
            if (a > done_s[r]) done_s[r] = a;
        }
    }
    free(arrived);
    return 0;
}
