/* A framed channel over one env conn: an outbound queue of frames written
 * with gather I/O, and an inbound parser that decodes control frames and lets
 * its owner place DATA payloads straight into their destination.
 *
 * Frames are pooled per channel, so steady-state data traffic allocates
 * nothing. DATA payloads are borrowed: the caller keeps them valid until the
 * frame is sent or the channel is closed (eccl_chan_close drops the queue).
 */
#ifndef ECCL_CORE_PROTO_CHAN_H
#define ECCL_CORE_PROTO_CHAN_H

#include "env.h"
#include "proto/auth.h"
#include "proto/wire.h"

/* What a ready user pointer from env->net->wait points at: core objects that
 * own a conn or listener start with this tag. */
enum eccl_handle_kind { ECCL_HANDLE_CHAN = 1, ECCL_HANDLE_LISTENER = 2 };

typedef struct eccl_frame {
    struct eccl_frame *next;
    const void *payload;   /* borrowed DATA bytes, or NULL */
    size_t payload_len;
    int phantom;           /* payload is phantom memory: its size goes, no bytes */
    size_t sent;           /* bytes of head+payload already written */
    uint32_t head_len;
    uint32_t *inflight;    /* decremented once the frame is written or dropped */
    uint8_t *head;         /* points into `inline_head` or an owned buffer */
    uint8_t inline_head[ECCL_WIRE_HEADER_SIZE + ECCL_WIRE_DATA_HEADER_SIZE];
} eccl_frame;

/* A DATA payload on its way as bulk (eccl_net_ops.isend): its inflight
 * counter is held until the net reports the transfer done. */
typedef struct eccl_chan_bulk {
    struct eccl_chan_bulk *next;
    eccl_bulk *req;
    uint32_t *inflight;
} eccl_chan_bulk;

typedef struct eccl_chan eccl_chan;

typedef struct eccl_chan_handler {
    /* A decoded control frame. An error return closes the channel. *m, and
     * the payload a VIEW_* message borrows, live only until this returns. */
    eccl_result (*on_msg)(void *owner, eccl_chan *ch, const eccl_msg *m);
    /* A DATA frame's header arrived: set *dst to where its d->len payload
     * bytes go (NULL = read and drop them). ECCL_ERR_AGAIN holds the frame:
     * reading stops until eccl_chan_resume. Another error closes. */
    eccl_result (*on_data)(void *owner, eccl_chan *ch, const eccl_wire_data *d,
                           void **dst);
    /* The payload is in place. */
    eccl_result (*on_data_done)(void *owner, eccl_chan *ch,
                                const eccl_wire_data *d);
} eccl_chan_handler;

struct eccl_chan {
    int kind;              /* ECCL_HANDLE_CHAN; must stay first */
    const eccl_env *env;
    eccl_conn *conn;
    eccl_result error;     /* first failure, ECCL_OK while healthy */
    int closed;
    int held;              /* a DATA frame waits for its destination */
    int paused;            /* owner turned reading off */
    int more;              /* stopped on budget with bytes left to parse */
    int dry;               /* the last recv came up short: wait for `wait` */
    int cur_read, cur_write; /* interest last given to the backend */
    /* outbound */
    eccl_frame *out_head, *out_tail, *free_frames;
    size_t queued_bytes;
    int lazy_only;         /* every queued frame is lazy (eccl_chan_send_lazy):
                              eccl_chan_flush leaves them for later */
    /* inbound parser */
    uint8_t in_head[ECCL_WIRE_HEADER_SIZE + ECCL_WIRE_DATA_HEADER_SIZE];
    uint32_t in_head_got;
    eccl_wire_header hdr;
    eccl_wire_data data;
    uint8_t *in_payload;   /* control payload being read (owned) */
    uint8_t *in_dst;       /* DATA destination, NULL = dropping */
    int in_skip;           /* the payload is consumed without storing it (the
                              destination is phantom, or dropped on a net
                              that carries phantom payload) */
    int phantom_net;       /* the env's dev has phantom memory: phantom
                              payloads travel as sizes and a short recv is
                              not proof the conn is drained */
    uint32_t in_got;
    uint8_t *rbuf;         /* read-ahead: small frames cost one recv */
    uint32_t rbuf_cap, rbuf_pos, rbuf_len;
    uint32_t rbuf_max;     /* rbuf doubles up to this when a read fills it */
    int rbuf_release;      /* ECCL_CHAN_RELEASE_READAHEAD: an ungrown rbuf is
                              freed once drained (chan_take) */
    uint64_t last_rx_ns;
    /* bulk payloads (a conn whose net moves them out of the stream) */
    eccl_chan_bulk *bulk_tx, *bulk_free; /* isends in flight, oldest first */
    eccl_bulk *bulk_rx;    /* the irecv of the DATA frame being received */
    uint8_t *bulk_scratch; /* its destination when the owner dropped it */
    int in_bulk;           /* the frame being received came as bulk */
    int bulk_rx_done;      /* ...and has landed */
    /* The opening handshake (proto/auth.h) while it runs: frames wait in
     * the queue, unsent and unread, until it is done; then freed. NULL
     * when done or where the env has no secret. */
    eccl_auth *auth;
    const char *auth_why;  /* why the handshake failed (ECCL_ERR_AUTH), for the owner's log */
};

/* Wraps an open conn; the conn's user pointer must be `ch`. `rbuf_cap` is
 * the largest read-ahead: large for data links, small where many channels
 * live (the master's). The read-ahead starts small and grows only on a
 * conn whose reads fill it. */
eccl_result eccl_chan_init(eccl_chan *ch, const eccl_env *env, eccl_conn *conn,
                           uint32_t rbuf_cap);
/* Closes the conn (if any), drops the queue and frees pooled frames. The
 * struct itself stays valid (owners free it once no poller can see it). */
void eccl_chan_close(eccl_chan *ch);

/* Gives an initialised channel its conn, just connected (dialer 1) or
 * accepted (0); where the env has a secret this starts the handshake
 * (proto/auth.h), which must succeed before any frame leaves or is read.
 * ECCL_ERR_NO_MEMORY or the nonce source's error fail the channel. */
eccl_result eccl_chan_attach(eccl_chan *ch, eccl_conn *conn, int dialer);
/* Accepts a connection from `l` into `ch` (eccl_chan_init with rbuf_cap);
 * `user` is what the net's wait reports for it, usually ch. On failure
 * nothing is left open; ECCL_ERR_AGAIN: none waiting. */
eccl_result eccl_chan_accept(eccl_chan *ch, const eccl_env *env, eccl_listener *l, void *user,
                             uint32_t rbuf_cap);
/* on_data / on_data_done of a channel that carries control frames only (the
 * master's, a relay's): a DATA frame is a protocol error. */
eccl_result eccl_chan_refuse_data(void *owner, eccl_chan *ch, const eccl_wire_data *d, void **dst);
eccl_result eccl_chan_refuse_data_done(void *owner, eccl_chan *ch, const eccl_wire_data *d);

/* Queues a control message. */
eccl_result eccl_chan_send_msg(eccl_chan *ch, const eccl_msg *m);
/* Queues a whole encoded control frame; the channel owns `frame` (malloc'd)
 * from the call on, whatever it returns. A relay forwards frames this way
 * without decoding them. */
eccl_result eccl_chan_send_frame(eccl_chan *ch, uint8_t *frame, uint32_t len);
/* Queues a DATA frame with a borrowed payload of d->len bytes. If
 * `inflight` is set, *inflight counts the frame until the socket has taken
 * all of it (or the channel dropped it): only then may the payload change. */
eccl_result eccl_chan_send_data(eccl_chan *ch, const eccl_wire_data *d,
                                const void *payload, uint32_t *inflight);
/* The smallest payload this channel's conn moves as bulk; 0 = none. */
size_t eccl_chan_bulk_min(const eccl_chan *ch);
/* Whether payloads of at least eccl_chan_bulk_min bytes in buf's device
 * allocation (memory of `device`) may leave through
 * eccl_chan_send_data_device: the conn carries device memory (env.h,
 * bulk_device). */
int eccl_chan_device_bulk(const eccl_chan *ch, const void *buf, int device);
/* eccl_chan_send_data for a payload in device memory, sent as bulk
 * straight from the device: only where eccl_chan_device_bulk said yes and
 * d->len >= eccl_chan_bulk_min. */
eccl_result eccl_chan_send_data_device(eccl_chan *ch, const eccl_wire_data *d, const void *payload, int device,
                                       uint32_t *inflight);
/* Queues an empty DATA frame (a completion token) that may wait: it
 * leaves with the next frame queued behind it, or at eccl_chan_flush_lazy,
 * so a stream of small calls sends each token in the same write as the
 * next call's data instead of a write of its own. The owner must call
 * eccl_chan_flush_lazy before it could wait for the far end. */
eccl_result eccl_chan_send_lazy(eccl_chan *ch, const eccl_wire_data *d);
/* Writes what the socket takes now; a queue of lazy frames alone stays. */
eccl_result eccl_chan_flush(eccl_chan *ch);
/* The same, lazy frames included. */
eccl_result eccl_chan_flush_lazy(eccl_chan *ch);
/* Bytes wait that eccl_chan_flush would write: the handshake's while it
 * runs, else frames. */
static inline int eccl_chan_has_output(const eccl_chan *ch)
{
    return ch->auth ? ch->auth->out_sent < ch->auth->out_len : ch->out_head && !ch->lazy_only;
}
/* Advances bulk transfers, then reads and dispatches frames until the
 * socket is dry, `budget` bytes were
 * read (then `more` is set: call again soon, `wait` will not report bytes
 * already read ahead), or a frame is held. Returns the channel's error, if
 * any; ECCL_OK otherwise. */
eccl_result eccl_chan_read(eccl_chan *ch, const eccl_chan_handler *h,
                           void *owner, size_t budget);
/* Turns reading off (1) or on (0), e.g. to stop a frozen link. */
void eccl_chan_pause(eccl_chan *ch, int paused);

#endif
