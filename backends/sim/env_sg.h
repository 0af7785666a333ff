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

#include <simgrid/forward.h>

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

/* Turns a host off silently: no conn is reset, no listener refuses. Its
 * actors die with it; nothing sent to it ever arrives and nothing more
 * comes from it, so peers notice only through their own timers (as with a
 * power cut or a kernel panic on a real network). Call from an actor on
 * another host. */
eccl_result eccl_sg_world_host_off(eccl_sg_world *w, const char *host);
/* Turns the host back on, empty: its old envs stay dead, whatever runs
 * there now starts from scratch (a new process). */
eccl_result eccl_sg_world_host_on(eccl_sg_world *w, const char *host);

/* Turns a link off or back on. While a link is off, a message whose route
 * crosses it waits in its conn (a TCP send buffer retransmitting into the
 * void) and goes when the whole route is up again, in stream order; a
 * message with no conn (a refusal) is lost. Messages already on the wire
 * when the link goes off still arrive (they are past the cut). SimGrid's
 * own link state is not used: its C API cannot set it. */
eccl_result eccl_sg_world_set_link(eccl_sg_world *w, sg_link_t link, int on);

/* printf-style line to stdout with the simulated-time prefix; for programs. */
void eccl_sg_printf(const char *who, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Simulated nanoseconds since the start of the simulation. */
uint64_t eccl_sg_now_ns(void);

#endif /* ECCL_BACKENDS_SIM_ENV_SG_H */
