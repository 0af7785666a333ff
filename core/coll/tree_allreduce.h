/* Tree all-reduce for small buffers: log-depth in messages and latency.
 *
 * The tree: rank order is cut into runs (the ranks behind
 * one relay that the master hands out as one RING_SEG, docs/protocol.md;
 * every rank is a run of its own where there are no relays). Inside a run
 * of k ranks, local rank j has parent (j-1)/2 and children 2j+1, 2j+2; the
 * runs' first ranks (their roots) form the same heap over run order, so
 * run s's root has run (s-1)/2's root as parent and runs 2s+1 and 2s+2's
 * roots as children besides its own two: up to four children, depth about
 * log2(k) + log2(runs). A relay can thus fill in every edge inside its run
 * and the master sends only the root's. With runs of one rank this is the
 * plain heap (rank r's parent (r-1)/2, children 2r+1, 2r+2). Rank 0 is the
 * root. Four waves, each one message per tree edge:
 *
 *   UP      a rank reduces its children's partials into its own (child 0
 *           op own op child 1 op child 2 ..., always in that order) and
 *           sends the partial to its parent; the root ends up with the full
 *           result
 *   DOWN    the root's result travels to every rank unchanged, so every
 *           rank holds the very same bits (AVG divides once, at the root)
 *   DONE    a rank that holds the result and has DONE from its children
 *           tells its parent: the root learns that every rank holds it
 *   COMMIT  the root tells everyone, and only then does a rank return
 *
 * The last two waves are the ring's done-token round in log depth: a rank
 * returns success only once every peer is known to hold the result, so the
 * master's "commit iff every survivor holds it" never contradicts a peer
 * that already returned (core/comm). 4(N-1) messages per call instead of the
 * ring's N(N-1) for tiny buffers, and 4 log2(N) hops of latency instead of
 * 3(N-1).
 *
 * Links: every rank connects to its parent when it first needs it (lazy: a
 * job that never calls a small all-reduce opens no tree link); children
 * connect to it. Roles name the links: TREE_PARENT, TREE_CHILD0/1.
 */
#ifndef ECCL_CORE_COLL_TREE_ALLREDUCE_H
#define ECCL_CORE_COLL_TREE_ALLREDUCE_H

#include "coll/algo.h"
#include "coll/call.h"
#include "env.h"
#include "proto/chan.h"

/* Buffers up to this size take the tree (at three or more ranks): whole
 * buffers per hop cost less than the ring's 3(N-1) latencies. */
#define ECCL_TREE_MAX_BYTES (64u << 10)

/* Links by role: TREE_PARENT, then child k at TREE_CHILD0 + k. */
enum eccl_tree_role { ECCL_TREE_PARENT = 0, ECCL_TREE_CHILD0 = 1, ECCL_TREE_ROLES = 1 + ECCL_WIRE_TREE_CHILDREN };

/* The heap over `n` places, the tree inside a run (places: its ranks) and
 * over the runs (places: their roots): the parent of place j (UINT32_MAX
 * for j = 0) and its child k < 2, 2j+1+k (UINT32_MAX past n). A rank's
 * children in eccl_msg_ring.tree_child: its run's first, then, for a run's
 * root, the other runs' roots. */
uint32_t eccl_tree_heap_parent(uint32_t j);
uint32_t eccl_tree_heap_child(uint32_t j, uint32_t n, int k);

typedef struct eccl_tree_allreduce {
    eccl_coll_call call;
    uint8_t *backup;       /* recvbuf as it was, saved before the first write */
    uint8_t *partial[ECCL_WIRE_TREE_CHILDREN]; /* children's partials land here; [0] then holds ours */
    size_t bytes;
    int nchildren;
    int up_recvd[ECCL_WIRE_TREE_CHILDREN];   /* child i's partial is in partial[i] */
    int done_recvd[ECCL_WIRE_TREE_CHILDREN]; /* child i holds the result, and so does its subtree */
    int up_sent, down_sent, done_sent, commit_sent;
    int saved;             /* backup taken */
    int have_full;         /* recvbuf holds the result */
    int committed;         /* every rank holds it (root: knows; others: told) */
    uint32_t inflight;     /* our frames the socket has not taken yet */
    uint64_t tx_bytes, rx_bytes;
} eccl_tree_allreduce;

/* Plans `call` (a copy is kept) for call->rank of call->nranks (>= 2),
 * with `nchildren` children (eccl_msg_ring.tree_child). partial[i], i <
 * nchildren, must each hold call->count elements, backup as
 * many bytes as recvbuf. */
void eccl_tree_allreduce_init(eccl_tree_allreduce *t, const eccl_coll_call *call, int nchildren,
                              uint8_t *const partial[], uint8_t *backup);
/* Queues every frame that is ready; link[role] may be NULL when that link
 * is not up (its frames wait). */
eccl_result eccl_tree_allreduce_pump(eccl_tree_allreduce *t, eccl_chan *link[ECCL_TREE_ROLES]);
/* A DATA frame for this op arrived from `role`: check it is one that role
 * may send now and say where its bytes go. */
eccl_result eccl_tree_allreduce_recv(eccl_tree_allreduce *t, enum eccl_tree_role role,
                                     const eccl_wire_data *d, void **dst);
/* The frame's bytes are in place: reduce, advance. */
eccl_result eccl_tree_allreduce_recv_done(eccl_tree_allreduce *t, enum eccl_tree_role role,
                                          const eccl_wire_data *d);
/* 1 once the op may return: committed and all our frames written. */
int eccl_tree_allreduce_complete(const eccl_tree_allreduce *t);
/* Whether more frames for this op will come from `role` (see
 * eccl_ring_allreduce_expects for why tag reuse needs this). */
int eccl_tree_allreduce_expects(const eccl_tree_allreduce *t, enum eccl_tree_role role);
/* Puts recvbuf back as it was before the op. */
void eccl_tree_allreduce_restore(eccl_tree_allreduce *t);

/* The state machine behind coll/algo.h. */
extern const eccl_coll_algo eccl_tree_allreduce_algo;

#endif
