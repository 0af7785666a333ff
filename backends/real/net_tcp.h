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

#endif /* ECCL_BACKENDS_REAL_NET_TCP_H */
