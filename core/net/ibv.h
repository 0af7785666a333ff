/* net_ibv's protocol: an eccl_net_ops over RC queue pairs, written against
 * three things its backend lends it, so that the real backend and the
 * simulator run this very code (docs/transports.md has the protocol):
 *
 *  - a stream net (eccl_net_ops + ctx) that carries core's frames and the
 *    hellos: net_tcp in the real backend, net_sg in the simulator;
 *  - a verbs table (eccl_verbs): libibverbs dlopen()ed, or the simulator's
 *    NIC (backends/sim/verbs_sg.c);
 *  - hooks (eccl_ibv_port): the stream net's extras (peer address, hang-up
 *    while not reading), completion-channel readiness (the stream net's
 *    `wait` must report a conn's user pointer when its channel has an
 *    event), and failpoints.
 *
 * Like the rest of core/ it makes no system call and holds no global:
 * settings come from eccl_config_get (ECCL_IB_QPS, ECCL_IB_MIN_BYTES,
 * ECCL_IB_CHUNK_BYTES, ECCL_IB_REG_CACHE), the device is opened by the
 * backend. Calls on one context are serialised by core, as for any net.
 */
#ifndef ECCL_CORE_NET_IBV_H
#define ECCL_CORE_NET_IBV_H

#include <infiniband/verbs.h>

#include "env.h"

/* The verbs the protocol calls once a device is open, with libibverbs'
 * signatures (the real table points at libibverbs; ibv_post_send,
 * ibv_post_recv, ibv_poll_cq and ibv_req_notify_cq are inlines there and
 * get wrappers). get_cq_event is only called after channel_ready said an
 * event is there, so it never blocks. */
typedef struct eccl_verbs {
    struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
    int (*dereg_mr)(struct ibv_mr *);
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *);
    int (*destroy_comp_channel)(struct ibv_comp_channel *);
    struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
    int (*destroy_cq)(struct ibv_cq *);
    int (*req_notify_cq)(struct ibv_cq *, int);
    int (*get_cq_event)(struct ibv_comp_channel *, struct ibv_cq **, void **);
    void (*ack_cq_events)(struct ibv_cq *, unsigned int);
    int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
    struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
    int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
    int (*destroy_qp)(struct ibv_qp *);
    int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
    int (*post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
    const char *(*wc_status_str)(enum ibv_wc_status);
} eccl_verbs;

/* What the backend lends beside the verbs; every field is required unless
 * it says otherwise. `ctx` is passed to every hook. */
typedef struct eccl_ibv_port {
    void *ctx;
    /* The stream net. Its listener and conn user pointers are the
     * protocol's callers' (the protocol passes them through). */
    const eccl_net_ops *stream;
    void *stream_ctx;
    /* The peer of stream conn s, "HOST:PORT" (ECCL_ADDR_MAX bytes): for
     * log lines. */
    void (*stream_addr)(void *ctx, eccl_conn *s, char *addr);
    /* While on, `wait` reports s's user pointer when the peer closes or
     * resets s, even with read interest off (a bulk receive waits). */
    void (*watch_hangup)(void *ctx, eccl_conn *s, int on);
    /* 1 once the peer closed or reset s. */
    int (*hung_up)(void *ctx, eccl_conn *s);
    /* From watch to unwatch, the stream net's `wait` reports `user`
     * whenever ch has a completion event not yet taken. */
    eccl_result (*watch_channel)(void *ctx, struct ibv_comp_channel *ch, void *user);
    void (*unwatch_channel)(void *ctx, struct ibv_comp_channel *ch);
    /* 1 when get_cq_event on ch would return an event at once. */
    int (*channel_ready)(void *ctx, struct ibv_comp_channel *ch);
    /* Optional (NULL: never): 1 when failpoint `name` (eccl/net_ibv/...)
     * fires now. */
    int (*failpoint)(void *ctx, const char *name);
} eccl_ibv_port;

/* An open device: the backend opened it and keeps it open until after
 * eccl_ibv_destroy. */
typedef struct eccl_ibv_device {
    const eccl_verbs *verbs; /* outlives the context */
    struct ibv_context *dev;
    struct ibv_pd *pd;
    uint8_t port;
    uint16_t lid;
    union ibv_gid gid;
    int gid_index;
    enum ibv_mtu mtu;
    const char *name; /* for log lines (copied) */
} eccl_ibv_device;

extern const eccl_net_ops eccl_ibv_net_ops;

/* A protocol context for `env` (logging, settings) over `port` and `dev`
 * (both copied). ECCL_ERR_NO_MEMORY is the only failure. */
eccl_result eccl_ibv_create(eccl_env *env, const eccl_ibv_port *port, const eccl_ibv_device *dev,
                            void **out);
/* Every conn and listener must be closed first; frees the registrations
 * it still caches. The device, the port and the stream net stay the
 * backend's. NULL is fine. */
void eccl_ibv_destroy(void *ctx);
/* The port's ctx, for a backend that finds its own state from the net's. */
void *eccl_ibv_port_ctx(void *ctx);

/* A listener's address that says "this peer speaks RDMA": the prefix before
 * HOST:PORT. Such a listener takes plain stream connections too, and the
 * stream nets connect to it as to HOST:PORT, so peers with and without RDMA
 * mix. */
#define ECCL_IBV_ADDR_PREFIX "ibv:"

#endif /* ECCL_CORE_NET_IBV_H */
