/* TCP over one epoll instance per env (internal to the real backend). */
#ifndef ECCL_BACKENDS_REAL_NET_TCP_H
#define ECCL_BACKENDS_REAL_NET_TCP_H

#include "env.h"

extern const eccl_net_ops eccl_net_tcp_ops;

/* Creates the net context for `env` (its epoll instance and eventfd). The
 * context logs through `env`, which must outlive it. */
eccl_result eccl_net_tcp_create(eccl_env *env, void **out);
/* Every conn and listener must be closed first. NULL is fine. */
void eccl_net_tcp_destroy(void *ctx);

/* The conn's socket, for tests and debugging; never close it. */
int eccl_net_tcp_conn_fd(const eccl_conn *c);

/* The eventfd that `wake` writes: a write to it from anywhere (another
 * process holding a copy) wakes `wait` as `wake` does. */
int eccl_net_tcp_wake_fd(void *ctx);

/* For a net layered on this one (net_ibv), which shares its epoll set. */
/* The peer's "HOST:PORT" (ECCL_ADDR_MAX bytes), for log lines. */
void eccl_net_tcp_conn_addr(const eccl_conn *c, char *addr);
/* While not reading, still report the peer closing the stream (on: 1). */
void eccl_net_tcp_watch_hangup(void *ctx, eccl_conn *c, int on);
/* 1 once the peer closed or reset the stream (reads nothing). */
int eccl_net_tcp_hung_up(const eccl_conn *c);
/* `wait` reports `user` whenever fd is readable (level-triggered), or,
 * with `edge`, once each time data arrives (edge-triggered: the caller need
 * not drain it at once, but waits for the next arrival after that), until
 * unwatched; the caller owns fd. */
eccl_result eccl_net_tcp_watch_fd(void *ctx, int fd, void *user, int edge);
void eccl_net_tcp_unwatch_fd(void *ctx, int fd);

#endif /* ECCL_BACKENDS_REAL_NET_TCP_H */
