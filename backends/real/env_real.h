/* The real backend: POSIX threads and clock, epoll + TCP, host memory.
 *
 * One env per master or communicator, so each owns its own epoll instance and
 * wake-up eventfd and no two progress threads ever share a readiness set.
 */
#ifndef ECCL_BACKENDS_REAL_ENV_REAL_H
#define ECCL_BACKENDS_REAL_ENV_REAL_H

#include <stdint.h>

#include "env.h"

/* Builds a complete env. `name` prefixes its log lines (truncated to fit
 * eccl_env.name; NULL means ""). The log level comes from ECCL_LOG_LEVEL
 * (none/error/warn/info/debug/trace or 0-5; default warn), the socket buffer
 * size from ECCL_SOCKET_BUF (bytes; default 4 MiB, 0 = kernel autotuning),
 * env->spin_ns from ECCL_SPIN_NS (default 50000).
 * `data_links`: the env of a communicator, whose peer links may be RDMA
 * (ECCL_NET, see net_create); 0: TCP only (the master's control path).
 * ECCL_NET=ibv where RDMA cannot run fails with ECCL_ERR_UNSUPPORTED and a
 * log line saying why. Free with eccl_env_real_destroy. */
eccl_result eccl_env_real_create(const char *name, int data_links, eccl_env **out);

/* Frees the env and its epoll instance. Every conn, listener, mutex, cond
 * and thread made through it must be closed, destroyed or joined first.
 * NULL is fine. */
void eccl_env_real_destroy(eccl_env *env);

/* CLOCK_MONOTONIC in nanoseconds: the real backend's one time base, shared by
 * the clock ops, cond_wait deadlines and net wait deadlines. */
uint64_t eccl_real_now_ns(void);

/* Formats and emits a log line through env->log if `level` passes
 * env->log_level. For backend code; core has its own logging macros. */
void eccl_real_log(eccl_env *env, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* ECCL_BACKENDS_REAL_ENV_REAL_H */
