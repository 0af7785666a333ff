/* The simulator backend: an eccl_env over SimGrid S4U (C API, 3.32).
 *
 * Every simulated rank lives in one process, so nothing here is global: one
 * `eccl_sg_world` per simulation owns the address registry ("HOST:PORT" ->
 * listener) and the list of live envs, and every env points to it. An env is
 * bound to the SimGrid host of the actor that creates it: its receiver actor,
 * and every thread core spawns through it, run on that host, so turning the
 * host off (eccl_sg_world_kill_host) takes the whole rank down.
 *
 * All functions must be called from inside a SimGrid actor, except
 * eccl_sg_world_create / eccl_sg_world_destroy (before and after
 * simgrid_run).
 */
#ifndef ECCL_BACKENDS_SIM_ENV_SG_H
#define ECCL_BACKENDS_SIM_ENV_SG_H

#include <stdint.h>

#include "env.h"

typedef struct eccl_sg_world eccl_sg_world;

/* log_level: core lines above it are dropped (ECCL_LOG_*). Lines go to
 * stdout, prefixed with the simulated time and the env's name. */
eccl_result eccl_sg_world_create(int log_level, eccl_sg_world **out);
/* After simgrid_run returned. Envs of killed hosts are freed here. */
void eccl_sg_world_destroy(eccl_sg_world *w);

/* An env on the calling actor's host. Free with eccl_sg_env_destroy (the
 * release function core objects call). */
eccl_result eccl_sg_env_create(eccl_sg_world *w, const char *name, eccl_env **out);
void eccl_sg_env_destroy(eccl_env *env);

/* The public objects, built around a fresh sim env (as api_real.c does for
 * the real backend). */
eccl_result eccl_sg_master_create(eccl_sg_world *w, const char *listen_addr,
                                  eccl_master **out);
eccl_result eccl_sg_comm_create(eccl_sg_world *w, const eccl_comm_params *params,
                                eccl_comm **out);

/* Crashes a host: every conn of every env on it is reset (the far end's
 * recv/send return ECCL_ERR_CLOSED at once, as after a TCP RST), its
 * listeners stop accepting (connects are refused), then the host is turned
 * off, which kills all its actors. Call from an actor on another host. */
void eccl_sg_world_kill_host(eccl_sg_world *w, const char *host);

/* printf-style line to stdout with the simulated-time prefix; for programs. */
void eccl_sg_printf(const char *who, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Simulated nanoseconds since the start of the simulation. */
uint64_t eccl_sg_now_ns(void);

#endif /* ECCL_BACKENDS_SIM_ENV_SG_H */
