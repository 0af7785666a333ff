#include "proto/chan.h"

#include <stdlib.h>
#include <string.h>

#include "util/config.h"
#include "util/log.h"

#define CHAN_MAX_IOV 16
/* First read-ahead size. Most channels only ever carry a few control
 * frames; a simulated 100k-rank job holds 400k of them. */
#define CHAN_RBUF_START 512u

static void chan_fail(eccl_chan *ch, eccl_result rc)
{
    if (ch->error == ECCL_OK) ch->error = rc;
}

static void chan_update_interest(eccl_chan *ch)
{
    if (ch->closed || !ch->conn) return;
    /* A bulk payload on its way needs no stream bytes: its completion is
     * reported through `wait` whatever the interest. */
    int rd = !ch->paused && !ch->held && !ch->bulk_rx;
    int wr = eccl_chan_has_output(ch);
    if (rd == ch->cur_read && wr == ch->cur_write) return;
    ch->cur_read = rd;
    ch->cur_write = wr;
    ch->env->net->set_interest(ch->env->net_ctx, ch->conn, rd, wr);
}

eccl_result eccl_chan_init(eccl_chan *ch, const eccl_env *env, eccl_conn *conn,
                           uint32_t rbuf_cap)
{
    memset(ch, 0, sizeof *ch);
    ch->kind = ECCL_HANDLE_CHAN;
    ch->env = env;
    ch->conn = conn;
    ch->cur_read = 1;
    ch->rbuf_max = rbuf_cap < 64 ? 64 : rbuf_cap;
    ch->rbuf_cap = ch->rbuf_max < CHAN_RBUF_START ? ch->rbuf_max : CHAN_RBUF_START;
    ch->phantom_net = eccl_dev_has_phantom(env);
    /* Memory against a malloc per burst of frames: the simulator sets it
     * (a 96K-rank run holds some 600K channels, most idle); off by default,
     * so a real rank's receive path allocates nothing once warm. */
    ch->rbuf_release = eccl_config_uint(env, "ECCL_CHAN_RELEASE_READAHEAD", 0, 1, 0) != 0;
    ch->last_rx_ns = env->clock->now_ns(env->clock_ctx);
    return ECCL_OK; /* the read-ahead comes with the first bytes (chan_take) */
}

static void frame_release(eccl_chan *ch, eccl_frame *f)
{
    if (f->inflight) (*f->inflight)--;
    if (f->head != f->inline_head) {
        free(f->head);
        f->head = f->inline_head;
    }
    f->next = ch->free_frames;
    ch->free_frames = f;
}

void eccl_chan_close(eccl_chan *ch)
{
    /* Closing the conn frees its bulk requests and fences their writes. */
    if (ch->conn) ch->env->net->close(ch->env->net_ctx, ch->conn);
    ch->conn = NULL;
    for (eccl_chan_bulk *b = ch->bulk_tx, *n; b; b = n) {
        n = b->next;
        if (b->inflight) (*b->inflight)--;
        free(b);
    }
    for (eccl_chan_bulk *b = ch->bulk_free, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    ch->bulk_tx = ch->bulk_free = NULL;
    ch->bulk_rx = NULL;
    free(ch->bulk_scratch);
    ch->bulk_scratch = NULL;
    ch->closed = 1;
    chan_fail(ch, ECCL_ERR_CLOSED);
    for (eccl_frame *f = ch->out_head, *n; f; f = n) {
        n = f->next;
        frame_release(ch, f);
    }
    ch->out_head = ch->out_tail = NULL;
    ch->queued_bytes = 0;
    ch->lazy_only = 0;
    for (eccl_frame *f = ch->free_frames, *n; f; f = n) {
        n = f->next;
        free(f);
    }
    ch->free_frames = NULL;
    free(ch->in_payload);
    ch->in_payload = NULL;
    free(ch->rbuf);
    ch->rbuf = NULL;
    free(ch->auth);
    ch->auth = NULL;
}

static eccl_frame *frame_get(eccl_chan *ch)
{
    eccl_frame *f = ch->free_frames;
    if (f) {
        ch->free_frames = f->next;
    } else {
        f = malloc(sizeof *f);
        if (!f) return NULL;
        f->head = f->inline_head;
    }
    f->next = NULL;
    f->payload = NULL;
    f->payload_len = 0;
    f->phantom = 0;
    f->sent = 0;
    f->head_len = 0;
    f->inflight = NULL;
    return f;
}

/* A frame queued behind lazy ones takes them along. */
static void frame_enqueue(eccl_chan *ch, eccl_frame *f)
{
    ch->lazy_only = 0;
    if (ch->out_tail) ch->out_tail->next = f;
    else ch->out_head = f;
    ch->out_tail = f;
    ch->queued_bytes += f->head_len + f->payload_len;
}

eccl_result eccl_chan_attach(eccl_chan *ch, eccl_conn *conn, int dialer)
{
    ch->conn = conn;
    if (!ch->env->auth) return ECCL_OK;
    eccl_result rc = ECCL_ERR_NO_MEMORY;
    if (!(ch->auth = malloc(sizeof *ch->auth)) || (rc = eccl_auth_start(ch->auth, ch->env, dialer)) != ECCL_OK) {
        chan_fail(ch, rc);
        return rc;
    }
    /* An accepted conn is up: our HELLO leaves now, so that an end without
     * the secret, refused at its first bytes, still learns why. A dialled
     * one is still connecting: its owner's first flush sends it. */
    if (!dialer) eccl_chan_flush(ch);
    return ECCL_OK;
}

eccl_result eccl_chan_accept(eccl_chan *ch, const eccl_env *env, eccl_listener *l, void *user,
                             uint32_t rbuf_cap)
{
    eccl_conn *conn = NULL;
    eccl_result rc = env->net->accept(env->net_ctx, l, user, &conn);
    if (rc != ECCL_OK) return rc;
    rc = eccl_chan_init(ch, env, NULL, rbuf_cap);
    if (rc == ECCL_OK) rc = eccl_chan_attach(ch, conn, 0);
    else env->net->close(env->net_ctx, conn);
    if (rc != ECCL_OK) eccl_chan_close(ch);
    return rc;
}

eccl_result eccl_chan_refuse_data(void *owner, eccl_chan *ch, const eccl_wire_data *d, void **dst)
{
    (void)owner, (void)ch, (void)d, (void)dst;
    return ECCL_ERR_PROTOCOL;
}

eccl_result eccl_chan_refuse_data_done(void *owner, eccl_chan *ch, const eccl_wire_data *d)
{
    (void)owner, (void)ch, (void)d;
    return ECCL_ERR_PROTOCOL;
}

eccl_result eccl_chan_send_msg(eccl_chan *ch, const eccl_msg *m)
{
    if (ch->error != ECCL_OK) return ch->error;
    eccl_frame *f = frame_get(ch);
    if (!f) return ECCL_ERR_NO_MEMORY;
    size_t n = eccl_wire_encode(m, f->inline_head, sizeof f->inline_head);
    if (n == 0) {
        /* Too big for the inline head: encode into an owned buffer. */
        size_t cap = ECCL_WIRE_HEADER_SIZE + eccl_wire_max_length(m->type);
        uint8_t *buf = malloc(cap);
        if (buf) n = eccl_wire_encode(m, buf, cap);
        if (n == 0) {
            free(buf);
            frame_release(ch, f);
            return buf ? ECCL_ERR_INVALID_ARG : ECCL_ERR_NO_MEMORY;
        }
        f->head = buf;
    }
    f->head_len = (uint32_t)n;
    frame_enqueue(ch, f);
    return ECCL_OK;
}

eccl_result eccl_chan_send_frame(eccl_chan *ch, uint8_t *frame, uint32_t len)
{
    eccl_frame *f = ch->error == ECCL_OK ? frame_get(ch) : NULL;
    if (!f) {
        free(frame);
        return ch->error != ECCL_OK ? ch->error : ECCL_ERR_NO_MEMORY;
    }
    f->head = frame;
    f->head_len = len;
    frame_enqueue(ch, f);
    return ECCL_OK;
}

size_t eccl_chan_bulk_min(const eccl_chan *ch)
{
    if (!ch->conn || !eccl_net_has_bulk(ch->env)) return 0;
    return ch->env->net->bulk_min(ch->env->net_ctx, ch->conn);
}

/* Whether a host payload of len bytes, at least the conn's bulk_min, goes
 * as bulk: the net may keep host payloads in the stream up to a larger size
 * (eccl_net_ops.bulk_min_host). */
static int chan_host_bulk(const eccl_chan *ch, size_t len)
{
    return !eccl_net_has_bulk_min_host(ch->env) || len >= ch->env->net->bulk_min_host(ch->env->net_ctx, ch->conn);
}

int eccl_chan_device_bulk(const eccl_chan *ch, const void *buf, int device)
{
    if (ch->error != ECCL_OK || !ch->conn || !eccl_net_has_device_bulk(ch->env) || eccl_chan_bulk_min(ch) == 0)
        return 0;
    return ch->env->net->bulk_device(ch->env->net_ctx, ch->conn, buf, device);
}

/* Starts payload[0..len) (memory of `device`; -1: host memory) as the
 * conn's next bulk message; `inflight` is held until it is done. */
static eccl_result chan_bulk_send(eccl_chan *ch, const void *payload, size_t len, int device,
                                  uint32_t *inflight)
{
    eccl_chan_bulk *b = ch->bulk_free;
    if (b) ch->bulk_free = b->next;
    else if (!(b = malloc(sizeof *b))) return ECCL_ERR_NO_MEMORY;
    const eccl_net_ops *net = ch->env->net;
    eccl_result rc = device < 0 ? net->isend(ch->env->net_ctx, ch->conn, payload, len, &b->req)
                                : net->isend_device(ch->env->net_ctx, ch->conn, payload, len, device, &b->req);
    if (rc != ECCL_OK) {
        b->next = ch->bulk_free;
        ch->bulk_free = b;
        return rc;
    }
    b->next = NULL;
    b->inflight = inflight;
    if (inflight) (*inflight)++;
    eccl_chan_bulk **tail = &ch->bulk_tx;
    while (*tail) tail = &(*tail)->next;
    *tail = b;
    return ECCL_OK;
}

/* Reaps finished bulk sends and notes a landed bulk receive: one net
 * progress, then every request tested. Only eccl_chan_read calls it: the
 * progress consumes the net's readiness, and a landed receive needs the read
 * that follows to be delivered. */
static void chan_bulk_progress(eccl_chan *ch)
{
    /* Progress even with nothing outstanding: late completions (the ack of
     * a clear-to-send) still make the conn ready, and must be taken. */
    if (ch->error != ECCL_OK || !ch->conn || !eccl_net_has_bulk(ch->env)) return;
    const eccl_net_ops *net = ch->env->net;
    eccl_result prc = net->progress(ch->env->net_ctx, ch->conn);
    if (prc != ECCL_OK) {
        chan_fail(ch, prc);
        return;
    }
    for (eccl_chan_bulk **p = &ch->bulk_tx; *p;) {
        eccl_chan_bulk *b = *p;
        int done = 0;
        eccl_result rc = net->test(ch->env->net_ctx, b->req, &done);
        if (rc != ECCL_OK) {
            chan_fail(ch, rc);
            return;
        }
        if (!done) {
            p = &b->next;
            continue;
        }
        if (b->inflight) (*b->inflight)--;
        *p = b->next;
        b->next = ch->bulk_free;
        ch->bulk_free = b;
    }
    if (ch->bulk_rx) {
        int done = 0;
        eccl_result rc = net->test(ch->env->net_ctx, ch->bulk_rx, &done);
        if (rc != ECCL_OK) {
            chan_fail(ch, rc);
            return;
        }
        if (done) {
            ch->bulk_rx = NULL;
            ch->bulk_rx_done = 1;
            chan_update_interest(ch);
        }
    }
}

/* A DATA frame whose payload is host memory (device -1) or, as bulk only,
 * memory of `device`. */
static eccl_result send_data(eccl_chan *ch, const eccl_wire_data *d, const void *payload, int device,
                             uint32_t *inflight)
{
    if (ch->error != ECCL_OK) return ch->error;
    eccl_frame *f = frame_get(ch);
    if (!f) return ECCL_ERR_NO_MEMORY;
    /* Decided once per frame: the net is told by a NULL base (see env.h). */
    f->phantom = device < 0 && d->len > 0 && ch->phantom_net && eccl_dev_is_phantom(ch->env, payload);
    size_t bulk_min = f->phantom ? 0 : eccl_chan_bulk_min(ch);
    eccl_wire_data w = *d;
    if (device >= 0 && (!bulk_min || d->len < bulk_min || !eccl_net_has_device_bulk(ch->env))) {
        frame_release(ch, f);
        return ECCL_ERR_INVALID_ARG; /* the stream cannot read device memory */
    }
    if (bulk_min && d->len >= bulk_min && (device >= 0 || chan_host_bulk(ch, d->len))) {
        eccl_result rc = chan_bulk_send(ch, payload, d->len, device, inflight);
        if (rc != ECCL_OK) {
            frame_release(ch, f);
            chan_fail(ch, rc);
            return rc;
        }
        w.flags |= ECCL_WIRE_DATA_BULK;
        payload = NULL;
        inflight = NULL;
    }
    uint32_t inline_len = payload ? d->len : 0;
    eccl_wire_header_encode(ECCL_MSG_DATA, ECCL_WIRE_DATA_HEADER_SIZE + inline_len,
                            f->inline_head);
    eccl_wire_data_encode(&w, f->inline_head + ECCL_WIRE_HEADER_SIZE);
    f->head_len = ECCL_WIRE_HEADER_SIZE + ECCL_WIRE_DATA_HEADER_SIZE;
    f->payload = payload;
    f->payload_len = inline_len;
    f->inflight = inflight;
    if (inflight) (*inflight)++;
    frame_enqueue(ch, f);
    return ECCL_OK;
}

eccl_result eccl_chan_send_data(eccl_chan *ch, const eccl_wire_data *d, const void *payload, uint32_t *inflight)
{
    return send_data(ch, d, payload, -1, inflight);
}

eccl_result eccl_chan_send_data_device(eccl_chan *ch, const eccl_wire_data *d, const void *payload, int device,
                                       uint32_t *inflight)
{
    if (device < 0) return ECCL_ERR_INVALID_ARG; /* host memory: eccl_chan_send_data */
    return send_data(ch, d, payload, device, inflight);
}

eccl_result eccl_chan_send_lazy(eccl_chan *ch, const eccl_wire_data *d)
{
    int lazy = !ch->out_head || ch->lazy_only;
    eccl_wire_data w = *d;
    w.len = 0;
    eccl_result rc = eccl_chan_send_data(ch, &w, NULL, NULL);
    if (rc == ECCL_OK) ch->lazy_only = lazy;
    return rc;
}

eccl_result eccl_chan_flush_lazy(eccl_chan *ch)
{
    ch->lazy_only = 0;
    return eccl_chan_flush(ch);
}

/* Writes what the handshake has to say; 1 once it is done (ch->auth freed:
 * frames may follow), 0 while it runs or has failed. */
static int auth_flush(eccl_chan *ch)
{
    eccl_auth *a = ch->auth;
    while (ch->error == ECCL_OK && a->out_sent < a->out_len) {
        eccl_iov iov = {a->out + a->out_sent, a->out_len - a->out_sent};
        size_t sent = 0;
        eccl_result rc = ch->env->net->send(ch->env->net_ctx, ch->conn, &iov, 1, &sent);
        if (rc != ECCL_OK) chan_fail(ch, rc);
        if (rc != ECCL_OK || sent == 0) break;
        a->out_sent += (uint32_t)sent;
    }
    if (ch->error != ECCL_OK || !eccl_auth_done(a)) return 0;
    free(a);
    ch->auth = NULL;
    /* Frames that came behind their PROOF wait in the read-ahead, where no
     * readiness will report them. */
    if (ch->rbuf_pos < ch->rbuf_len) ch->more = 1;
    return 1;
}

eccl_result eccl_chan_flush(eccl_chan *ch)
{
    if (ch->auth && !auth_flush(ch)) {
        chan_update_interest(ch);
        return ch->error;
    }
    while (ch->error == ECCL_OK && eccl_chan_has_output(ch)) {
        eccl_iov iov[CHAN_MAX_IOV];
        int n = 0;
        for (eccl_frame *f = ch->out_head; f && n + 2 <= CHAN_MAX_IOV; f = f->next) {
            size_t skip = f == ch->out_head ? f->sent : 0;
            if (skip < f->head_len) {
                iov[n].base = f->head + skip;
                iov[n++].len = f->head_len - skip;
                skip = 0;
            } else {
                skip -= f->head_len;
            }
            if (f->payload_len > skip) {
                iov[n].base = f->phantom ? NULL : (const uint8_t *)f->payload + skip;
                iov[n++].len = f->payload_len - skip;
            }
        }
        size_t sent = 0;
        eccl_result rc = ch->env->net->send(ch->env->net_ctx, ch->conn, iov, n, &sent);
        if (rc != ECCL_OK) {
            chan_fail(ch, rc);
            break;
        }
        if (sent == 0) break;
        ch->queued_bytes -= sent;
        while (sent > 0) {
            eccl_frame *f = ch->out_head;
            size_t left = f->head_len + f->payload_len - f->sent;
            if (sent < left) {
                f->sent += sent;
                break;
            }
            sent -= left;
            ch->out_head = f->next;
            if (!ch->out_head) ch->out_tail = NULL;
            frame_release(ch, f);
        }
    }
    chan_update_interest(ch);
    return ch->error;
}

void eccl_chan_pause(eccl_chan *ch, int paused)
{
    ch->paused = paused;
    chan_update_interest(ch);
}

/* With ECCL_CHAN_RELEASE_READAHEAD, a drained read-ahead that never grew
 * goes back once the conn is dry: a channel that never read one in full (a
 * control or peer link, a frame now and then) holds none between frames. */
static void readahead_release(eccl_chan *ch)
{
    if (!ch->rbuf_release || ch->rbuf_pos != ch->rbuf_len || !ch->dry || ch->rbuf_cap > CHAN_RBUF_START) return;
    free(ch->rbuf);
    ch->rbuf = NULL;
    ch->rbuf_pos = ch->rbuf_len = 0;
}

/* Copies up to n read-ahead bytes (dst NULL: drops them), refilling the
 * read-ahead from the socket when it is empty. Large reads bypass the
 * read-ahead and land directly in dst. Returns bytes taken, 0 when the socket
 * is dry, -1 on error (kept in ch->error). */
static long chan_take(eccl_chan *ch, uint8_t *dst, size_t n)
{
    if (n == 0) return 0;
    if (ch->rbuf_pos == ch->rbuf_len) {
        /* A short read drained the socket: asking again would only return
         * "again"; level-triggered `wait` reports it when more arrives. */
        if (ch->dry) return 0;
        int direct = dst && n >= ch->rbuf_cap;
        if (!direct && !ch->rbuf && !(ch->rbuf = malloc(ch->rbuf_cap))) {
            chan_fail(ch, ECCL_ERR_NO_MEMORY);
            return -1;
        }
        uint8_t *into = direct ? dst : ch->rbuf;
        size_t want = direct ? n : ch->rbuf_cap, got = 0;
        eccl_result rc = ch->env->net->recv(ch->env->net_ctx, ch->conn, into, want, &got);
        if (rc != ECCL_OK) {
            chan_fail(ch, rc);
            return -1;
        }
        /* Where phantom payload can follow, the net stops a read at its
         * start: only an empty read says the conn is drained. */
        ch->dry = ch->phantom_net ? got == 0 : got < want;
        if (got == 0) readahead_release(ch); /* woken for nothing: none kept */
        if (direct || got == 0) return (long)got;
        ch->rbuf_pos = 0;
        ch->rbuf_len = (uint32_t)got;
        if (got == want && ch->rbuf_cap < ch->rbuf_max) {
            /* A full read: more was waiting, so read further ahead next
             * time. Without memory the read-ahead just stays small. */
            uint32_t cap = ch->rbuf_cap * 2 < ch->rbuf_max ? ch->rbuf_cap * 2 : ch->rbuf_max;
            uint8_t *grown = realloc(ch->rbuf, cap);
            if (grown) {
                ch->rbuf = grown;
                ch->rbuf_cap = cap;
            }
        }
    }
    size_t avail = ch->rbuf_len - ch->rbuf_pos;
    if (n > avail) n = avail;
    if (dst) memcpy(dst, ch->rbuf + ch->rbuf_pos, n);
    ch->rbuf_pos += (uint32_t)n;
    readahead_release(ch);
    return (long)n;
}

/* Consumes up to n payload bytes without storing them (phantom nets only):
 * what the read-ahead holds first, then straight from the net, which moves
 * no bytes for phantom payload. Returns as chan_take. */
static long chan_skip(eccl_chan *ch, size_t n)
{
    if (n == 0) return 0;
    if (ch->rbuf_pos < ch->rbuf_len) {
        size_t avail = ch->rbuf_len - ch->rbuf_pos;
        if (n > avail) n = avail;
        ch->rbuf_pos += (uint32_t)n;
        return (long)n;
    }
    if (ch->dry) return 0;
    size_t got = 0;
    eccl_result rc = ch->env->net->recv(ch->env->net_ctx, ch->conn, NULL, n, &got);
    if (rc != ECCL_OK) {
        chan_fail(ch, rc);
        return -1;
    }
    ch->dry = got == 0;
    return (long)got;
}

static void chan_reset_frame(eccl_chan *ch)
{
    ch->in_head_got = 0;
    ch->in_got = 0;
    ch->in_dst = NULL;
    ch->in_skip = 0;
    ch->in_bulk = 0;
    ch->bulk_rx_done = 0;
    free(ch->bulk_scratch);
    ch->bulk_scratch = NULL;
    free(ch->in_payload);
    ch->in_payload = NULL;
}

/* One step of the parser. Returns 1 if progress was made, 0 if it needs more
 * bytes from the socket, -1 if it must stop (error or held). */
static int chan_parse(eccl_chan *ch, const eccl_chan_handler *h, void *owner,
                      size_t *budget)
{
    eccl_result rc;
    if (ch->in_head_got < ECCL_WIRE_HEADER_SIZE) {
        long n = chan_take(ch, ch->in_head + ch->in_head_got,
                           ECCL_WIRE_HEADER_SIZE - ch->in_head_got);
        if (n <= 0) return (int)n;
        ch->in_head_got += (uint32_t)n;
        if (ch->in_head_got < ECCL_WIRE_HEADER_SIZE) return 1;
        rc = eccl_wire_header_decode(ch->in_head, &ch->hdr);
        if (rc != ECCL_OK && memcmp(ch->in_head, ECCL_AUTH_MAGIC, ECCL_AUTH_MAGIC_BYTES) == 0) {
            ch->auth_why = "the other end demands the job's secret and this end has none (ECCL_AUTH=0 here?)";
            rc = ECCL_ERR_AUTH;
        }
        if (rc != ECCL_OK) goto fail;
        ch->last_rx_ns = ch->env->clock->now_ns(ch->env->clock_ctx);
        if (ch->hdr.type != ECCL_MSG_DATA && ch->hdr.length > 0) {
            ch->in_payload = malloc(ch->hdr.length);
            if (!ch->in_payload) {
                rc = ECCL_ERR_NO_MEMORY;
                goto fail;
            }
        }
    }
    if (ch->hdr.type == ECCL_MSG_DATA) {
        const uint32_t full = ECCL_WIRE_HEADER_SIZE + ECCL_WIRE_DATA_HEADER_SIZE;
        if (ch->in_head_got < full) {
            long n = chan_take(ch, ch->in_head + ch->in_head_got, full - ch->in_head_got);
            if (n <= 0) return (int)n;
            ch->in_head_got += (uint32_t)n;
            if (ch->in_head_got < full) return 1;
            rc = eccl_wire_data_decode(ch->in_head + ECCL_WIRE_HEADER_SIZE,
                                       ch->hdr.length, &ch->data);
            if (rc != ECCL_OK) goto fail;
            if (ch->data.flags & ECCL_WIRE_DATA_BULK) {
                /* Only a conn that moves bulk may say so. */
                if (eccl_chan_bulk_min(ch) == 0) {
                    rc = ECCL_ERR_PROTOCOL;
                    goto fail;
                }
                ch->data.flags &= ~ECCL_WIRE_DATA_BULK;
                ch->in_bulk = ch->data.len > 0;
            }
            ch->held = 1; /* destination not decided yet */
        }
        if (ch->held) {
            void *dst = NULL;
            rc = h->on_data(owner, ch, &ch->data, &dst);
            if (rc == ECCL_ERR_AGAIN) {
                chan_update_interest(ch);
                return -1;
            }
            if (rc != ECCL_OK) goto fail;
            if (ch->in_bulk) {
                /* The sender writes the bytes whatever we do with them:
                 * a dropped payload needs somewhere to land. */
                if (!dst && !(dst = ch->bulk_scratch = malloc(ch->data.len))) {
                    rc = ECCL_ERR_NO_MEMORY;
                    goto fail;
                }
                rc = ch->env->net->irecv(ch->env->net_ctx, ch->conn, dst, ch->data.len,
                                         &ch->bulk_rx);
                if (rc != ECCL_OK) goto fail;
                /* What says where the bytes are may be here already
                 * (net_shm's request-to-send, read off its socket by an
                 * earlier progress): no readiness would come for it. */
                chan_bulk_progress(ch);
                if (ch->error != ECCL_OK) return -1;
            }
            ch->held = 0;
            ch->in_dst = dst;
            /* A phantom destination has no bytes to write: never hand it
             * to recv or memcpy. */
            ch->in_skip = ch->phantom_net && (!dst || eccl_dev_is_phantom(ch->env, dst));
            chan_update_interest(ch);
        }
        if (ch->in_bulk) {
            if (!ch->bulk_rx_done) return -1; /* chan_bulk_progress says when */
            ch->in_got = ch->data.len;
            *budget = *budget > ch->data.len ? *budget - ch->data.len : 0;
        }
        while (ch->in_got < ch->data.len) {
            size_t want = ch->data.len - ch->in_got;
            long n;
            if (ch->in_skip) {
                n = chan_skip(ch, want);
            } else if (ch->in_dst) {
                n = chan_take(ch, ch->in_dst + ch->in_got, want);
            } else {
                n = chan_take(ch, NULL, want);
            }
            if (n <= 0) return (int)n;
            ch->in_got += (uint32_t)n;
            *budget = *budget > (size_t)n ? *budget - (size_t)n : 0;
            if (*budget == 0 && ch->in_got < ch->data.len) return 0;
        }
        eccl_wire_data d = ch->data;
        chan_reset_frame(ch);
        rc = h->on_data_done(owner, ch, &d);
        if (rc != ECCL_OK) goto fail;
        return 1;
    }
    while (ch->in_got < ch->hdr.length) {
        long n = chan_take(ch, ch->in_payload + ch->in_got, ch->hdr.length - ch->in_got);
        if (n <= 0) return (int)n;
        ch->in_got += (uint32_t)n;
    }
    {
        /* A decoded message may borrow its payload (VIEW_* entries are read
         * in place), so the payload lives until on_msg returns. The channel
         * lets go of it first: the handler may read, close or re-enter the
         * channel, and the next frame starts clean. */
        uint8_t *payload = ch->in_payload;
        ch->in_payload = NULL;
        eccl_msg m;
        rc = eccl_wire_decode(ch->hdr.type, payload, ch->hdr.length, &m);
        chan_reset_frame(ch);
        if (rc == ECCL_OK) rc = h->on_msg(owner, ch, &m);
        free(payload);
        if (rc != ECCL_OK) goto fail;
    }
    return 1;
fail:
    ECCL_DEBUG(ch->env, "channel failed: %s", eccl_strerror(rc));
    chan_fail(ch, rc);
    return -1;
}

/* Reads the handshake's bytes, answers and checks them; 1 once it is done
 * (frames may be parsed), 0 while it waits for bytes or has failed. */
static int auth_read(eccl_chan *ch)
{
    for (;;) {
        size_t n;
        uint8_t *into = eccl_auth_want(ch->auth, &n);
        long got = n ? chan_take(ch, into, n) : 0;
        if (got < 0) return 0;
        if (got > 0) {
            eccl_result rc = eccl_auth_got(ch->auth, (size_t)got);
            if (rc != ECCL_OK) {
                ch->auth_why = ch->auth->why;
                chan_fail(ch, rc);
                return 0;
            }
        }
        /* Our PROOF, queued once their HELLO was in, leaves now; frames
         * queued meanwhile follow once theirs checked out. */
        if (eccl_chan_flush(ch) != ECCL_OK) return 0;
        if (!ch->auth) return 1;
        if (got == 0) return 0;
    }
}

eccl_result eccl_chan_read(eccl_chan *ch, const eccl_chan_handler *h,
                           void *owner, size_t budget)
{
    ch->more = 0;
    ch->dry = 0;
    if (ch->auth && !auth_read(ch)) return ch->error;
    chan_bulk_progress(ch);
    while (ch->error == ECCL_OK && !ch->closed && !ch->paused) {
        if (budget == 0) {
            ch->more = 1;
            break;
        }
        int r = chan_parse(ch, h, owner, &budget);
        if (r < 0) break;
        if (r == 0) {
            if (budget == 0) ch->more = 1;
            break;
        }
    }
    return ch->error;
}
