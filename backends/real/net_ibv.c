/* The real backend's RDMA transport: net_ibv's protocol (core/net/ibv.c)
 * over libibverbs, dlopen()ed (libeccl never links it), with net_tcp as its
 * stream net.
 *
 * What lives here is what only a real process has: loading libibverbs,
 * opening the device ECCL_IB_HCA names, the completion channel's fd in
 * net_tcp's epoll set (so net_tcp's wait reports the conn's user pointer
 * when a completion event arrives), and libfiu failpoints. The protocol
 * itself is core's, the very code the simulator runs over its simulated NIC
 * (backends/sim/verbs_sg.c).
 */
#include "net_ibv.h"

#include <dlfcn.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fiu-local.h>

#include "env_real.h"
#include "net/ibv.h"
#include "net_tcp.h"
#include "util/config.h"

/* ---- libibverbs, loaded at run time -------------------------------------- */

/* Every exported verb net_ibv calls. ibv_post_send/recv, ibv_poll_cq and
 * ibv_req_notify_cq are verbs.h inlines through context->ops: no symbol. */
#define VERBS(X)                                                                              \
    X(get_device_list, struct ibv_device **, (int *))                                         \
    X(free_device_list, void, (struct ibv_device **))                                         \
    X(get_device_name, const char *, (struct ibv_device *))                                   \
    X(open_device, struct ibv_context *, (struct ibv_device *))                               \
    X(close_device, int, (struct ibv_context *))                                              \
    X(query_port, int, (struct ibv_context *, uint8_t, struct ibv_port_attr *))               \
    X(query_gid, int, (struct ibv_context *, uint8_t, int, union ibv_gid *))                  \
    X(alloc_pd, struct ibv_pd *, (struct ibv_context *))                                      \
    X(dealloc_pd, int, (struct ibv_pd *))                                                     \
    X(reg_mr, struct ibv_mr *, (struct ibv_pd *, void *, size_t, int))                        \
    X(dereg_mr, int, (struct ibv_mr *))                                                       \
    X(create_comp_channel, struct ibv_comp_channel *, (struct ibv_context *))                 \
    X(destroy_comp_channel, int, (struct ibv_comp_channel *))                                 \
    X(create_cq, struct ibv_cq *, (struct ibv_context *, int, void *, struct ibv_comp_channel *, \
                                   int))                                                      \
    X(destroy_cq, int, (struct ibv_cq *))                                                     \
    X(get_cq_event, int, (struct ibv_comp_channel *, struct ibv_cq **, void **))             \
    X(ack_cq_events, void, (struct ibv_cq *, unsigned int))                                   \
    X(create_qp, struct ibv_qp *, (struct ibv_pd *, struct ibv_qp_init_attr *))               \
    X(modify_qp, int, (struct ibv_qp *, struct ibv_qp_attr *, int))                           \
    X(destroy_qp, int, (struct ibv_qp *))                                                     \
    X(wc_status_str, const char *, (enum ibv_wc_status))

typedef struct verbs {
    void *lib;
#define X(name, ret, args) ret(*name) args;
    VERBS(X)
#undef X
} verbs;

const char *const eccl_net_ibv_symbols[] = {
#define X(name, ret, args) "ibv_" #name,
    VERBS(X)
#undef X
    NULL};

static int verbs_load(verbs *v, char *why)
{
    v->lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!v->lib) {
        snprintf(why, 160, "cannot load libibverbs.so.1 (%s)", dlerror());
        return -1;
    }
#define X(name, ret, args)                                                                    \
    if (!(*(void **)&v->name = dlsym(v->lib, "ibv_" #name))) {                                 \
        snprintf(why, 160, "libibverbs.so.1 lacks ibv_" #name);                                \
        return -1;                                                                            \
    }
    VERBS(X)
#undef X
    return 0;
}

/* verbs.h's inlines, reached through the device's ops as libibverbs'
 * own callers reach them. */
static int real_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    return ibv_post_send(qp, wr, bad);
}

static int real_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    return ibv_post_recv(qp, wr, bad);
}

static int real_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) { return ibv_poll_cq(cq, n, wc); }

static int real_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    return ibv_req_notify_cq(cq, solicited_only);
}

/* ---- state ------------------------------------------------------------------ */

typedef struct real_ibv {
    eccl_env *env;
    void *tcp;       /* the stream net, whose epoll set the channels join */
    verbs v;         /* what dlsym found */
    eccl_verbs table;/* what the protocol calls */
    struct ibv_context *dev;
    struct ibv_pd *pd;
    uint8_t port;
    uint16_t lid;
    enum ibv_mtu mtu;
    char name[64];
    void *proto;     /* core's net_ibv context: the env's net_ctx */
} real_ibv;

/* ---- the port: net_tcp and the completion channels' fds ------------------- */

static void port_stream_addr(void *ctx, eccl_conn *s, char *addr)
{
    (void)ctx;
    eccl_net_tcp_conn_addr(s, addr);
}

static void port_watch_hangup(void *ctx, eccl_conn *s, int on)
{
    eccl_net_tcp_watch_hangup(((real_ibv *)ctx)->tcp, s, on);
}

static int port_hung_up(void *ctx, eccl_conn *s)
{
    (void)ctx;
    return eccl_net_tcp_hung_up(s);
}

static eccl_result port_watch_channel(void *ctx, struct ibv_comp_channel *ch, void *user)
{
    return eccl_net_tcp_watch_fd(((real_ibv *)ctx)->tcp, ch->fd, user, 0);
}

static void port_unwatch_channel(void *ctx, struct ibv_comp_channel *ch)
{
    eccl_net_tcp_unwatch_fd(((real_ibv *)ctx)->tcp, ch->fd);
}

/* ibv_get_cq_event blocks on the channel's fd: only call it when the fd
 * is readable. */
static int port_channel_ready(void *ctx, struct ibv_comp_channel *ch)
{
    (void)ctx;
    struct pollfd p = {.fd = ch->fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

static int port_failpoint(void *ctx, const char *name)
{
    (void)ctx;
    (void)name;
    fiu_return_on(name, 1);
    return 0;
}

/* ---- context ------------------------------------------------------------------ */

/* Opens the device ECCL_IB_HCA names ("NAME" or "NAME:1"), or the first
 * whose port 1 is active. */
static int device_open(real_ibv *n, char *why)
{
    const char *want = getenv("ECCL_IB_HCA");
    char name[64] = "";
    if (want && *want) {
        snprintf(name, sizeof name, "%s", want);
        char *colon = strchr(name, ':');
        if (colon) {
            if (strcmp(colon + 1, "1") != 0) {
                snprintf(why, 160, "ECCL_IB_HCA=%s: only port 1 is supported", want);
                return -1;
            }
            *colon = '\0';
        }
    }
    int count = 0;
    struct ibv_device **list = n->v.get_device_list(&count);
    if (!list || count == 0) {
        snprintf(why, 160, "no RDMA device");
        if (list) n->v.free_device_list(list);
        return -1;
    }
    snprintf(why, 160, name[0] ? "no RDMA device named %s" : "no RDMA device with an active port",
             name);
    for (int i = 0; i < count && !n->dev; i++) {
        const char *dn = n->v.get_device_name(list[i]);
        if (name[0] && strcmp(dn, name) != 0) continue;
        struct ibv_context *d = n->v.open_device(list[i]);
        struct ibv_port_attr pa;
        memset(&pa, 0, sizeof pa);
        if (!d) continue;
        if (n->v.query_port(d, 1, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) {
            if (name[0]) snprintf(why, 160, "RDMA device %s: port 1 is not active", dn);
            n->v.close_device(d);
            continue;
        }
        n->dev = d;
        n->port = 1;
        n->lid = pa.lid;
        n->mtu = pa.active_mtu;
        snprintf(n->name, sizeof n->name, "%s", dn);
    }
    n->v.free_device_list(list);
    return n->dev ? 0 : -1;
}

/* Undoes what eccl_net_ibv_create did, in reverse; the protocol's context
 * is gone already. */
static void device_close(real_ibv *n)
{
    if (n->pd) n->v.dealloc_pd(n->pd);
    if (n->dev) n->v.close_device(n->dev);
    if (n->v.lib) dlclose(n->v.lib);
    eccl_net_tcp_destroy(n->tcp);
    free(n);
}

eccl_result eccl_net_ibv_create(eccl_env *env, void **out, char *why)
{
    real_ibv *n = calloc(1, sizeof *n);
    if (!n) return ECCL_ERR_NO_MEMORY;
    n->env = env;
    snprintf(why, 160, "out of memory");
    int gid_index = (int)eccl_config_uint(env, "ECCL_IB_GID_INDEX", 0, 255, 0);
    union ibv_gid gid;
    eccl_result rc;
    if (verbs_load(&n->v, why) != 0 || device_open(n, why) != 0) goto unsupported;
    if (n->v.query_gid(n->dev, n->port, gid_index, &gid) != 0) {
        snprintf(why, 160, "%s: no GID at ECCL_IB_GID_INDEX=%d", n->name, gid_index);
        goto unsupported;
    }
    if (!(n->pd = n->v.alloc_pd(n->dev))) {
        snprintf(why, 160, "%s: ibv_alloc_pd failed", n->name);
        goto unsupported;
    }
    n->table = (eccl_verbs){
        .reg_mr = n->v.reg_mr,
        .dereg_mr = n->v.dereg_mr,
        .create_comp_channel = n->v.create_comp_channel,
        .destroy_comp_channel = n->v.destroy_comp_channel,
        .create_cq = n->v.create_cq,
        .destroy_cq = n->v.destroy_cq,
        .req_notify_cq = real_req_notify_cq,
        .get_cq_event = n->v.get_cq_event,
        .ack_cq_events = n->v.ack_cq_events,
        .poll_cq = real_poll_cq,
        .create_qp = n->v.create_qp,
        .modify_qp = n->v.modify_qp,
        .destroy_qp = n->v.destroy_qp,
        .post_send = real_post_send,
        .post_recv = real_post_recv,
        .wc_status_str = n->v.wc_status_str,
    };
    if ((rc = eccl_net_tcp_create(env, &n->tcp)) != ECCL_OK) goto fail;
    const eccl_ibv_port port = {
        .ctx = n,
        .stream = &eccl_net_tcp_ops,
        .stream_ctx = n->tcp,
        .stream_addr = port_stream_addr,
        .watch_hangup = port_watch_hangup,
        .hung_up = port_hung_up,
        .watch_channel = port_watch_channel,
        .unwatch_channel = port_unwatch_channel,
        .channel_ready = port_channel_ready,
        .failpoint = port_failpoint,
    };
    const eccl_ibv_device dev = {.verbs = &n->table,
                                 .dev = n->dev,
                                 .pd = n->pd,
                                 .port = n->port,
                                 .lid = n->lid,
                                 .gid = gid,
                                 .gid_index = gid_index,
                                 .mtu = n->mtu,
                                 .name = n->name};
    if ((rc = eccl_ibv_create(env, &port, &dev, &n->proto)) != ECCL_OK) goto fail;
    *out = n->proto;
    return ECCL_OK;
unsupported:
    rc = ECCL_ERR_UNSUPPORTED;
fail:
    device_close(n);
    return rc;
}

void eccl_net_ibv_destroy(void *ctx)
{
    if (!ctx) return;
    real_ibv *n = eccl_ibv_port_ctx(ctx);
    eccl_ibv_destroy(ctx);
    device_close(n);
}
