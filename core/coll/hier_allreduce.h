/* Hierarchical (two-level) all-reduce over peer links, for worlds whose
 * ranks share hosts ("Big Send-off"): a resumable state machine behind
 * coll/algo.h (ECCL_ALGO_HIER), its list of steps run by coll/peer_steps.h
 * (the intra-host reduce-scatter's steps as one block: it folds them
 * together).
 *
 * Topology. The master sends local_size = L in each epoch's RING message
 * when the world is host-regular: the ranks of each host (the HOST of the
 * p2p address peers reach it on) contiguous in rank order, every host with
 * the same L >= 2 ranks, H = N / L >= 2 hosts (core/master/master.c). Rank
 * r is local rank l = r % L of host h = r / L. Shard j of the buffer is
 * elements [j count / L, (j+1) count / L) (empty when count < L); within
 * shard l, chunk c is its [c n / H, (c+1) n / H) for n its elements.
 *
 * Each rank walks a fixed list of steps:
 *
 *   RS     intra-host reduce-scatter, k = 1..L-1: send shard l+k of our
 *          input to local rank l+k, receive shard l of local rank l-k's
 *          (mod L) into a scratch region of its own. Every send leaves at
 *          once (they read only sendbuf); shard l is folded slice by slice
 *          once every local rank's slice is in: in_0 op in_1 op ... op
 *          in_{L-1} (local rank order, whatever order they came in), into
 *          a scratch accumulator: the host's partial y_h.
 *   INTER  the sub-ring of local rank l (host h-1 -> h -> h+1, mod H) all-
 *          reduces shard l: a ring reduce-scatter, j = 0..H-2, sends chunk
 *          h-j (y_h's at j = 0, else the one combined at j-1) and combines
 *          chunk h-j-1 as (what came) op (y_h's), so chunk c is y_c op
 *          y_{c+1} op ... op y_{c+H-1} (hosts mod H, from host c on), made
 *          once, by host c-1; then a ring all-gather, j = 0..H-2, forwards
 *          final chunks unchanged, straight into recvbuf. Pipelined as any
 *          ring: a slice leaves as soon as its source is final (step 0's
 *          once the fold passed it, a later step's once the step before
 *          combined or received that slice: the same chunk, cut the same
 *          way), one step ahead of the steps done.
 *   AG     intra-host all-gather, k = 1..L-1: send the final shard l (from
 *          recvbuf) to local rank l+k, receive shard l-k straight into
 *          recvbuf.
 *
 * So every value of the result is computed once, by one rank, and copied:
 * the replicas are bit-identical (MIN/MAX keep the first of two NaNs, so
 * the fixed operand order matters beyond rounding). AVG reduces as SUM and
 * the chunk's owner divides by N once, before its first copy leaves.
 *
 * Frames are at most ECCL_RING_PASS_SLICE_BYTES; a range travels in slices
 * and an empty range as one empty frame, so every step has frames. They
 * carry the phase (ECCL_PHASE_HIER_RS / _INTER / _AG), step = the distance
 * k (RS, AG) or the ring step (INTER: RS 0..H-2, AG H-1..2H-3), offset =
 * the slice's byte offset in the buffer.
 *
 * Order freedom: a partner can run ahead (local ranks' RS sends do not
 * wait for anything; a host's ring steps wait only for its ring
 * predecessor), so every RS sender has its own scratch region, every ring
 * reduce-scatter chunk lands at its own place, and nothing we sent is
 * written again while it may be on the wire: sendbuf never; the
 * accumulator and the combined chunks once each, before they are sent;
 * recvbuf only with final values, and in place only in ranges whose sends
 * the writer's own sender must have delivered first (a local rank sends us
 * its final shard only after it had all of ours). Frames from one rank
 * come in its order (one link per pair), and with each partner our list
 * and its list name the same steps in the same order, so a rank always
 * knows the next frame each partner owes it; anything else is
 * ECCL_ERR_PROTOCOL, and expects(PEER + r) is 0 as soon as r owes nothing.
 *
 * Completion: once the last AG step is done (have_full), the dissemination
 * barrier of coll/dissem.h over all N ranks (tokens ECCL_PHASE_HIER_DONE);
 * complete() only after its last round and once every frame of ours is
 * written.
 *
 * Failure: recvbuf is backed up whole right before its first write (the
 * first final chunk, or the first final slice that lands), so restore
 * puts back exactly what the op changed. Host memory only, exact values:
 * no quantised or device-resident calls.
 */
#ifndef ECCL_CORE_COLL_HIER_ALLREDUCE_H
#define ECCL_CORE_COLL_HIER_ALLREDUCE_H

#include "coll/algo.h"
#include "coll/call.h"
#include "coll/peer_steps.h"
#include "env.h"
#include "proto/chan.h"

enum eccl_hier_step_kind {
    ECCL_HIER_RS,       /* intra-host reduce-scatter */
    ECCL_HIER_INTER_RS, /* the sub-ring's reduce-scatter */
    ECCL_HIER_INTER_AG, /* the sub-ring's all-gather */
    ECCL_HIER_AG        /* intra-host all-gather */
};

/* One step of a rank's list: to whom it sends what, from whom it receives
 * what (element ranges of the buffer), as frames number it. */
typedef struct eccl_hier_step {
    uint8_t kind;  /* enum eccl_hier_step_kind */
    uint8_t phase; /* enum eccl_data_phase of its frames */
    uint16_t wire_step;
    uint32_t index; /* k (RS, AG) or j (INTER) */
    uint32_t tx_peer, rx_peer;
    size_t tx_at, tx_n, rx_at, rx_n;
} eccl_hier_step;

typedef struct eccl_hier_allreduce {
    eccl_peer_steps steps;     /* first: the engine (coll/peer_steps.h) runs the list */
    eccl_coll_call call;
    size_t esize, bytes;
    uint32_t L, H, host, local;
    size_t sh_at, sh_n;        /* our shard: elements */
    uint32_t rs_done;          /* slices of our shard folded */
    uint8_t *rs_rx, *acc, *ring_rx;    /* scratch regions (see scratch_bytes) */
    uint8_t *backup;
    int saved;                 /* recvbuf is in backup */
} eccl_hier_allreduce;

/* Whether the call can run hierarchically: an all-reduce's layout with
 * local_size >= 2 dividing nranks into two hosts or more. */
int eccl_hier_allreduce_can(const eccl_coll_call *call);
/* Scratch bytes a rank needs: its per-step counters, L-1 received shards,
 * the host partial and the ring's received chunks (about (L+1)/L buffers). */
size_t eccl_hier_allreduce_scratch_bytes(const eccl_coll_call *call);

/* Plans `call` (a copy is kept; eccl_hier_allreduce_can holds) with
 * ECCL_RING_PASS_SLICE_BYTES frames. scratch holds
 * eccl_hier_allreduce_scratch_bytes (16-byte aligned), backup as many
 * bytes as recvbuf. */
void eccl_hier_allreduce_init(eccl_hier_allreduce *a, const eccl_coll_call *call, uint8_t *scratch,
                              uint8_t *backup);
/* The same with the frame size given (tests: every rank of a call must be
 * given the same), rounded down to whole elements, at least one. */
void eccl_hier_allreduce_init_ex(eccl_hier_allreduce *a, const eccl_coll_call *call, uint8_t *scratch,
                                 uint8_t *backup, size_t slice_bytes);
/* Step s of this rank's list (s < a->nsteps). */
void eccl_hier_allreduce_step(const eccl_hier_allreduce *a, uint32_t s, eccl_hier_step *st);
/* Elements [*at, *at + *n) of part i of n elements cut into `parts`. */
void eccl_hier_part(size_t at, size_t n, uint32_t parts, uint32_t i, size_t *part_at, size_t *part_n);

/* The state machine behind coll/algo.h. */
extern const eccl_coll_algo eccl_hier_allreduce_algo;

#endif /* ECCL_CORE_COLL_HIER_ALLREDUCE_H */
