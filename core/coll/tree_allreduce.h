/* Tree all-reduce for small buffers: log-depth in messages and latency.
 *
 * The ranks form a binary tree in rank order (rank r's parent is (r-1)/2, its
 * children 2r+1 and 2r+2). Four waves, each one message per tree edge:
 *
 *   UP      a rank reduces its children's partials into its own (own op
 *           child 1 op child 2, always in that order) and sends the partial
 *           to its parent; the root ends up with the full result
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

enum eccl_tree_role { ECCL_TREE_PARENT = 0, ECCL_TREE_CHILD0 = 1, ECCL_TREE_CHILD1 = 2 };

/* Rank of the peer in `role` of `rank` in a tree of `nranks`, or UINT32_MAX
 * when there is none (the root's parent, a leaf's children). */
uint32_t eccl_tree_peer(uint32_t rank, uint32_t nranks, enum eccl_tree_role role);

typedef struct eccl_tree_allreduce {
    eccl_coll_call call;
    uint8_t *backup;       /* recvbuf as it was, saved before the first write */
    uint8_t *partial[2];   /* children's partials land here; [0] then holds ours */
    size_t bytes;
    int nchildren;
    int up_recvd[2];       /* child i's partial is in partial[i] */
    int done_recvd[2];     /* child i holds the result, and so does its subtree */
    int up_sent, down_sent, done_sent, commit_sent;
    int saved;             /* backup taken */
    int have_full;         /* recvbuf holds the result */
    int committed;         /* every rank holds it (root: knows; others: told) */
    uint32_t inflight;     /* our frames the socket has not taken yet */
    uint64_t tx_bytes, rx_bytes;
} eccl_tree_allreduce;

/* Plans `call` (a copy is kept) for call->rank of call->nranks (>= 2).
 * partial[2] must each hold call->count elements, backup as many bytes as
 * recvbuf. */
void eccl_tree_allreduce_init(eccl_tree_allreduce *t, const eccl_coll_call *call,
                              uint8_t *partial[2], uint8_t *backup);
/* Queues every frame that is ready; link[role] may be NULL when that link
 * is not up (its frames wait). */
eccl_result eccl_tree_allreduce_pump(eccl_tree_allreduce *t, eccl_chan *link[3]);
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
