/* Host-mates without the network stack: net_tcp, plus single-copy bulk
 * payloads between processes of one machine (docs/transports.md, "net_shm").
 * Internal to the real backend. */
#ifndef ECCL_BACKENDS_REAL_NET_SHM_H
#define ECCL_BACKENDS_REAL_NET_SHM_H

#include "dev_cuda.h"
#include "env.h"

extern const eccl_net_ops eccl_net_shm_ops;

/* A listener's address that says "payloads from a process on my host may
 * come through memory": the prefix before HOST:PORT. Such a listener takes
 * plain stream connections too, and the stream nets connect to it as to
 * HOST:PORT. */
#define ECCL_SHM_ADDR_PREFIX "shm:"

/* The net context for `env`, with a net_tcp of its own for the streams;
 * device payloads go through `cuda`'s IPC (NULL: host memory only).
 * ECCL_ERR_UNSUPPORTED (and `why`, 160 bytes) when this machine cannot move
 * memory between processes (no cross-memory attach, a control queue too
 * short): the caller then uses plain TCP. */
eccl_result eccl_net_shm_create(eccl_env *env, eccl_real_cuda *cuda, void **out, char *why);
/* Every conn and listener must be closed first. NULL is fine. */
void eccl_net_shm_destroy(void *ctx);

#endif /* ECCL_BACKENDS_REAL_NET_SHM_H */
