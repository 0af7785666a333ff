/* RDMA over libibverbs, layered on net_tcp (internal to the real backend):
 * core's net_ibv protocol (core/net/ibv.h) over the dlopen()ed libibverbs.
 *
 * Streams (core's frames) stay TCP; a DATA payload of at least
 * ECCL_IB_MIN_BYTES travels as bulk: the receiver names its destination in a
 * clear-to-send, the sender RDMA-writes it there from its own buffer, split
 * across ECCL_IB_QPS queue pairs. docs/transports.md has the protocol and
 * every setting. libibverbs is dlopen()ed: libeccl never links it.
 */
#ifndef ECCL_BACKENDS_REAL_NET_IBV_H
#define ECCL_BACKENDS_REAL_NET_IBV_H

#include "env.h"

/* Opens the RDMA device that ECCL_IB_HCA names (default: the first with an
 * active port) over a new net_tcp context for `env`. ECCL_ERR_UNSUPPORTED,
 * with *why saying what is missing (no libibverbs, no device, port down),
 * when RDMA cannot run here; `why` has room for 160 bytes. */
eccl_result eccl_net_ibv_create(eccl_env *env, void **out, char *why);
/* *out is then a context of core's eccl_ibv_net_ops (core/net/ibv.h). */
/* Every conn and listener must be closed first; closes the device.
 * NULL is fine. */
void eccl_net_ibv_destroy(void *ctx);

/* The verbs net_ibv calls, NULL-terminated: what a libibverbs must export
 * for it (the mock's coverage test reads this list). */
extern const char *const eccl_net_ibv_symbols[];

#endif /* ECCL_BACKENDS_REAL_NET_IBV_H */
