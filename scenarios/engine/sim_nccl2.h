/* The baseline eccl's bootstrap is measured against: NCCL 2.x's bootstrap
 * (bootstrap.cc of NCCL 2.7 .. 2.22: bootstrapRoot, bootstrapInit,
 * bootstrapAllGather), as a program over an eccl_env's net ops, so that the
 * simulator charges it with the very network model (net_sg: handshakes,
 * listen backlog, refusals, per-message cost at the root) that charges eccl.
 * eccl-sim runs it as `workload = nccl2_bootstrap` (scenarios/README.md,
 * "Baseline: NCCL 2.x bootstrap").
 *
 * The protocol, as NCCL 2.x does it with blocking sockets:
 *  1. every rank listens twice (a socket for its peers, one for the root),
 *     connects to the root (the unique id's address; a refused connect is
 *     retried every 1 ms, 20,000 times at most), sends its info (rank,
 *     nranks, both listen addresses) and closes; the root, one thread,
 *     accepts and reads one rank at a time;
 *  2. once the root has all N, it connects to each rank's root socket in
 *     turn (rank 0, 1, ..., N-1) and sends it the peer address of its ring
 *     successor (rank + 1 mod N);
 *  3. each rank connects to its successor, accepts its predecessor, and
 *     runs the ring all-gather of every rank's peer address: N - 1 steps,
 *     each sending the slot received in the step before (its own first)
 *     and receiving the next one.
 * Every message is NCCL's bootstrapNetSend: a 4-byte length, then the
 * payload, in one send call. Addresses travel in NCCL's 28-byte slots
 * (sizeof(union ncclSocketAddress)), NUL-padded strings here.
 *
 * No mutable global and no system call: all state hangs off the call. A
 * blocking call is a wait on the env for exactly the socket it blocks on
 * (interest off on every other conn and listener), so a thread blocked in
 * recv ignores the rest, as a thread in a blocking system call does.
 */
#ifndef ECCL_TOOLS_SIM_NCCL2_H
#define ECCL_TOOLS_SIM_NCCL2_H

#include <stddef.h>
#include <stdint.h>

#include "env.h"

/* sizeof(union ncclSocketAddress) (sockaddr_in6): an address slot. */
#define ECCL_NCCL2_ADDR_BYTES 28
/* NCCL 2.x staggers the ranks' connects to the root above this many ranks. */
#define ECCL_NCCL2_STAGGER_ABOVE 128
/* NCCL 2.x: SLEEP_INT (1 ms) between refused connects, RETRY_REFUSED_TIMES. */
#define ECCL_NCCL2_RETRY_NS 1000000ull
#define ECCL_NCCL2_RETRY_MAX 20000

/* What a run reports as it goes (mark's `what`). */
enum {
    ECCL_NCCL2_SENT,      /* rank: its info is with the root (sent and closed) */
    ECCL_NCCL2_NEXT,      /* rank: the root told it its successor */
    ECCL_NCCL2_RING,      /* rank: ring connected (successor) and accepted (predecessor) */
    ECCL_NCCL2_DONE,      /* rank: its table is complete */
    ECCL_NCCL2_GATHERED,  /* root: every rank's info is in */
    ECCL_NCCL2_SCATTERED  /* root: every rank has its successor's address */
};

typedef struct eccl_nccl2_options {
    const char *root_addr; /* the unique id: where the root listens */
    int nranks;
    int rank;              /* a rank's run: 0 .. nranks-1 */
    const char *host;      /* a rank's run: it listens on HOST:0 */
    /* NCCL 2.x: with more than ECCL_NCCL2_STAGGER_ABOVE ranks, rank r
     * sleeps r x this before it connects to the root (1 ms in NCCL); 0:
     * no stagger. */
    uint64_t stagger_ns;
    /* Simulated time at which a blocked call gives up (NCCL 2.x has no
     * timeout: this is the launcher that kills a hung job). */
    uint64_t deadline_ns;
    /* Stop once the ring is formed: the all-gather's timing is computed
     * by eccl_nccl2_replay instead of run message by message. */
    int replay;
    /* Test only: this rank flips a byte of the first slot it forwards that
     * is not its own (step 1), so its successors' tables go wrong. */
    int corrupt;
} eccl_nccl2_options;

typedef struct eccl_nccl2_hooks {
    void *ctx;
    /* Sleeps the calling thread (a refused connect's back-off, the stagger). */
    void (*sleep_ns)(void *ctx, uint64_t ns);
    /* Whether the env's wait reports l (eccl_sg_listener_set_interest). */
    void (*listener_interest)(void *ctx, eccl_env *env, eccl_listener *l, int on);
    /* A rank's peer listen address, as bound: the truth its table entries
     * are checked against. */
    void (*listening)(void *ctx, int rank, const char *addr);
    /* A phase reached (rank -1: the root). */
    void (*mark)(void *ctx, int rank, int what);
    /* Entry `slot` of rank's table as it lands, at all-gather step `step`
     * (-1: its own, before the first step); addr is ECCL_NCCL2_ADDR_BYTES. */
    void (*entry)(void *ctx, int rank, int step, int slot, const char *addr);
} eccl_nccl2_hooks;

typedef struct eccl_nccl2_result {
    int refused;  /* connects refused (then retried) */
    char why[96]; /* the failure, "" on success */
} eccl_nccl2_result;

/* The root's thread (bootstrapRoot): listens on root_addr and serves all
 * nranks. 0 on success; -1 with res->why. Closes whatever it opened. */
int eccl_nccl2_root_run(eccl_env *env, const eccl_nccl2_options *o, const eccl_nccl2_hooks *h,
                        eccl_nccl2_result *res);
/* One rank (bootstrapInit + its all-gather). 0 when its table is complete
 * (or, with replay, once its ring is formed); -1 with res->why. */
int eccl_nccl2_rank_run(eccl_env *env, const eccl_nccl2_options *o, const eccl_nccl2_hooks *h,
                        eccl_nccl2_result *res);

/* The ring all-gather's timing without its N x (N-1) messages, for runs
 * too big to simulate them one by one. Rank r (0-based) was ready to send
 * its first slot at start_s[r]; a slot from its predecessor p (r - 1; N - 1
 * for rank 0) costs what net_sg charges one message on that route alone:
 * lat_s[r] + wire_s[r] (eccl_sg_route_cost). As in the run, a send never
 * blocks and a receive waits for its slot; as on a TCP stream, a conn's
 * messages arrive in order, each at least wire_s[r] after the one before
 * (they queue on the narrowest link). With R_r(-1) = start_s[r], for the
 * steps i = 0 .. N-2:
 *     A_r(i) = max(R_p(i-1) + lat_s[r] + wire_s[r], A_r(i-1) + wire_s[r])
 *     R_r(i) = max(R_r(i-1), A_r(i))
 * (the slot of step i leaves p when p has received step i-1's, arrives at
 * A_r(i), is received at R_r(i)); done_s[r] = R_r(N-2). O(N^2) time, O(N)
 * memory; -1 when out of memory, else 0.
 *
 * Why not the messages themselves at scale: N x (N-1) messages are 9.2e9 at
 * 96k ranks, and net_sg carries each send as a flow of its own, sharing the
 * route with the conn's other flows in flight instead of queueing behind
 * them: when a rank forwards a burst of k buffered slots, all k arrive
 * together after latency + k x wire, where a TCP stream delivers the first
 * after latency + wire. In NCCL's ring every rank forwards such a burst
 * once the last ring link forms, so a message-level run adds about
 * N^2 / 2 x wire to the all-gather (tests/sim: the two agree where wire is
 * negligible). */
int eccl_nccl2_replay(int n, const double *start_s, const double *lat_s, const double *wire_s,
                      double *done_s);

#endif
