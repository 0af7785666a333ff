/* The chaos env: a decorator around any eccl_env's net (libfabric's hook
 * providers are the model: a provider that wraps another). It applies a
 * seeded plan on the way through (latency and jitter, bandwidth, resets,
 * partitions, slow hosts, kills at a time or at the N-th frame of a type),
 * so a WAN and its faults can be emulated with real processes on one box
 * (no netem here) and the same plan can sit on the simulator's net. Core
 * never knows: it sees an eccl_net_ops table like any other.
 *
 * Who shapes what. Hosts are the HOST part of "HOST:PORT" addresses (on one
 * box: loopback addresses 127.0.0.X, one per emulated host). A connection
 * is shaped by the chaos net of the process that opened it, in both
 * directions: it delays and paces what it sends, and holds what it receives
 * until that is due. The accepting side passes bytes through. So when every
 * process of a job runs the same plan, each connection is shaped exactly
 * once, and a process needs to know only its own host (`self`) and the one
 * it dials. Bulk transfers (RDMA) are not offered through the chaos net:
 * payloads ride the stream, where they are shaped. Phantom payload (the
 * simulator's NULL iov bases) cannot be held in a delay line: a shaped
 * conn's send refuses it with ECCL_ERR_UNSUPPORTED.
 *
 * The plan (chaos/README.md has the format) is text: one rule a line.
 * Times are relative to when the net was wrapped; every random draw comes
 * from the plan's seed, per connection, so the same plan, seed and order of
 * connections give the same faults.
 */
#ifndef ECCL_CHAOS_H
#define ECCL_CHAOS_H

#include <stddef.h>
#include <stdint.h>

#include "eccl.h"
#include "env.h"

typedef struct eccl_chaos_plan eccl_chaos_plan;

/* Parses a plan. On a bad line: ECCL_ERR_INVALID_ARG with "line N: why" in
 * err[errlen]. */
eccl_result eccl_chaos_plan_parse(const char *text, char *err, size_t errlen, eccl_chaos_plan **out);
void eccl_chaos_plan_free(eccl_chaos_plan *p);
uint64_t eccl_chaos_plan_seed(const eccl_chaos_plan *p);
/* Bytes a shaped connection holds per direction at most (`buffer`). */
size_t eccl_chaos_plan_buffer(const eccl_chaos_plan *p);
/* The first time after t at which a rule starts or ends (UINT64_MAX: none). */
uint64_t eccl_chaos_plan_next_change(const eccl_chaos_plan *p, uint64_t t);

/* The plan's quantities, as scenario files write them too: a number and a
 * unit (time: s ms us ns; bandwidth: Bps kBps MBps GBps TBps, bps kbps Mbps
 * Gbps Tbps; size: B KiB MiB GiB). 0, or -1 when v is not one. */
typedef enum eccl_chaos_unit { ECCL_CHAOS_TIME, ECCL_CHAOS_BANDWIDTH, ECCL_CHAOS_SIZE } eccl_chaos_unit;
int eccl_chaos_parse_quantity(const char *v, eccl_chaos_unit kind, double *out);

/* What the plan asks of `self` at simulated or real time t (ns since the
 * wrap) for bytes to `peer` (hosts as in addresses; "" matches only "*"
 * rules). Exposed for tests and for the simulator's own use. */
typedef struct eccl_chaos_path {
    uint64_t latency_ns;  /* one way */
    uint64_t jitter_ns;   /* up to this much more, drawn per chunk */
    double bandwidth_Bps; /* 0: unlimited */
    double reset_per_s;   /* rate at which a connection is reset; 0: never */
    int partitioned;      /* nothing passes; connects are refused */
    double flow_Bps;      /* each connection's own cap (flow=); 0: none */
} eccl_chaos_path;
void eccl_chaos_plan_path(const eccl_chaos_plan *p, const char *self, const char *peer, uint64_t t_ns,
                          eccl_chaos_path *out);
/* Wires: links shared by every connection that crosses them, in every
 * process of a job (`wire NAME bandwidth=BW`; a link rule's via= and back=
 * name the wires its traffic crosses each way). A wire's bucket is one
 * uint64_t, the time it is free again: the process's own unless the env
 * hands the net shared ones (eccl_chaos_set_wires). */
#define ECCL_CHAOS_VIA_MAX 16
typedef struct eccl_chaos_wire {
    uint16_t id;          /* 0 .. eccl_chaos_plan_wires() - 1 */
    double bandwidth_Bps; /* now; 0: none given now (no limit) */
} eccl_chaos_wire;
size_t eccl_chaos_plan_wires(const eccl_chaos_plan *p);
/* The wires traffic from host `from` to host `to` crosses at t, in order
 * (out has room for ECCL_CHAOS_VIA_MAX); their count. */
int eccl_chaos_plan_route(const eccl_chaos_plan *p, const char *from, const char *to, uint64_t t_ns,
                          eccl_chaos_wire *out);
/* Frame type and count, or time, at which `self` is to be killed; 0 type
 * and UINT64_MAX time when never. */
void eccl_chaos_plan_kill(const eccl_chaos_plan *p, const char *self, uint16_t *frame_type, uint64_t *frames,
                          uint64_t *at_ns);

/* Wraps env's net in place: env->net / env->net_ctx become the chaos net,
 * which forwards to the ones they were. Takes the plan. `self` is this
 * process's host (NULL or "": learned from its first listen). `kill` ends
 * this process (or the simulated host) when the plan says so; it is called
 * at most once, and must not return into the library in a state that
 * matters (a real process dies; a simulated actor is killed). */
eccl_result eccl_chaos_wrap(eccl_env *env, eccl_chaos_plan *plan, const char *self, void (*kill)(void *arg),
                            void *kill_arg);
/* The plan's times count from t0_ns on env's clock (default: the wrap), so
 * that every process of a job (eccl-emu starts them one by one) sees a rule
 * start at the same instant. */
void eccl_chaos_set_origin(eccl_env *env, uint64_t t0_ns);
/* Wire buckets shared with the other processes of a job (n of them, at
 * least the plan's wires; the real env maps ECCL_CHAOS_WIRES=FILE): the
 * times, on the plan's clock, each wire is free again, updated atomically.
 * Without it each process has buckets of its own. Not owned. */
eccl_result eccl_chaos_set_wires(eccl_env *env, uint64_t *free_at, size_t n);
/* Whether env's net is a chaos net. */
int eccl_chaos_wrapped(const eccl_env *env);
/* Puts the wrapped net back and frees the chaos net; every conn and listener
 * of it must be closed already. */
void eccl_chaos_unwrap(eccl_env *env);

/* Counters of a chaos net (tests, eccl-emu's summary). */
typedef struct eccl_chaos_stats {
    uint64_t shaped_conns;  /* connections this net opened and shapes */
    uint64_t delayed_bytes; /* bytes held and released later, both ways */
    uint64_t resets;        /* connections reset by the plan */
    uint64_t refused;       /* connects refused by a partition */
} eccl_chaos_stats;
void eccl_chaos_get_stats(const eccl_env *env, eccl_chaos_stats *out);

#endif
