/* The door of a listener: the connections it accepted that have not yet
 * proven the job's secret (proto/auth.h). Anyone who reaches the port can
 * open one, so they are bounded: at most `per_host` from one host (more
 * are closed as they arrive), at most `cap` in all (the oldest is closed
 * to make room: an honest end proves itself in a round trip, so a flood
 * churns only the flood), and each for at most `timeout_ns` (a slow or
 * silent handshake is closed). Unused (cap 0) where the env does not
 * authenticate. Knobs: ECCL_AUTH_PENDING_MAX, ECCL_AUTH_PENDING_PER_HOST,
 * ECCL_AUTH_TIMEOUT_MS (README). */
#ifndef ECCL_CORE_PROTO_GATE_H
#define ECCL_CORE_PROTO_GATE_H

#include <stdint.h>

#include "env.h"
#include "proto/chan.h"

typedef struct eccl_gate_entry {
    void *who;      /* the owner's object for the conn; NULL: left */
    const eccl_chan *ch; /* its channel: pending while ch->auth is set */
    uint64_t since; /* accepted at */
    uint64_t host;  /* a hash of its far end's HOST; 0: unknown */
} eccl_gate_entry;

typedef struct eccl_gate {
    eccl_gate_entry *e; /* oldest first from head, `used` slots (some left) */
    uint32_t cap, head, used, n;
    uint32_t per_host;
    uint64_t timeout_ns;
    /* Closed at the door (their host was full), to make room, and for
     * taking too long. */
    uint64_t refused, evicted, expired;
} eccl_gate;

/* Reads the knobs; allocates only where env authenticates. */
eccl_result eccl_gate_init(eccl_gate *g, const eccl_env *env);
void eccl_gate_free(eccl_gate *g);

/* The hash of conn's far end's HOST, through the net's peer_addr (0 where
 * the net cannot tell: no limit per host then). */
uint64_t eccl_gate_host_of(const eccl_env *env, eccl_conn *conn);

/* `who`, whose channel `ch` was just accepted from `host`: 0 if its host
 * holds per_host pending ones already (the caller closes it), else 1, with
 * *evict set to the oldest pending one, taken out, that the caller must
 * close (NULL when there was room). Without a gate (cap 0): 1. A channel
 * whose handshake is done (ch->auth NULL) is out of the gate by itself. */
int eccl_gate_enter(eccl_gate *g, void *who, const eccl_chan *ch, uint64_t host, uint64_t now, void **evict);
/* `who` is being closed: out of the gate (nothing if it is not in). Its
 * channel must not be freed before. */
void eccl_gate_leave(eccl_gate *g, void *who);
/* The oldest pending conn whose handshake has run for timeout_ns, taken
 * out (the caller closes it); NULL if none. */
void *eccl_gate_expired(eccl_gate *g, uint64_t now);
/* When the oldest pending one expires; UINT64_MAX when none is pending. */
uint64_t eccl_gate_deadline(const eccl_gate *g);

#endif
