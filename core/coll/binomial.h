/* Broadcast and reduce over a binomial tree of peer links: a resumable
 * state machine (coll/algo.h), ECCL_ALGO_BINOMIAL.
 *
 * The tree is rooted at call->root and laid over relative ranks
 * v = (rank - root) mod N. The parent of v > 0 is v with its lowest set bit
 * cleared; the children of v are v + 1, v + 2, v + 4, ... up to (not
 * including) v's lowest set bit (every power of two below N for the
 * root), those below N. Child v + 2^j heads the subtree of relative ranks
 * [v + 2^j, v + 2^(j+1)), so the depth is floor(log2 N) hops (the root has
 * ceil(log2 N) children): the chain's N-1 hops become log N. Every link
 * is a peer link (ECCL_ROLE_PEER + rank), asked for at every pump: it opens
 * lazily, through the master's address book, and frames for a link that is
 * not open yet simply wait.
 *
 * The buffer is cut into slices of at most ECCL_BINOMIAL_SLICE_BYTES, and
 * every link carries its slices in order, DATA(phase, step 0, offset = k *
 * slice, len), so a large call pipelines: slice k moves down (or up) one
 * level while slice k+1 follows, and pays about log N slice latencies, not
 * log N whole-buffer ones.
 *
 *   broadcast  BINO_BCAST frames down the tree. The root sends sendbuf's
 *              slices to each child, the largest subtree first; every other
 *              rank receives slice k straight into recvbuf and forwards it
 *              to its children once it is all in. The root's own output is
 *              a copy of sendbuf (none in place). Copies, never
 *              recomputed: every rank ends with the root's bits.
 *   reduce     BINO_REDUCE frames up the tree. Child j's partial of slice k
 *              lands in scratch region j (one region per child: children
 *              run at their own pace, so any of them may be ahead); once
 *              every child's slice k is in, the rank folds them in a fixed
 *              order, whatever the order they came in:
 *                  P(v) = ((P(v+1) op P(v+2)) op P(v+4) ...) op own(v)
 *              (a leaf's partial is its own data; region 0 holds the fold)
 *              and sends it up, or, at the root, writes it to recvbuf,
 *              where AVG divides once. So the result's bits depend on N and
 *              the root alone, never on timing.
 *
 * Completion (two ranks included, as the ring pass's): a rank
 * returns only once every rank is known to hold its output, so the
 * master's "commit iff every survivor holds it" never contradicts a rank
 * that returned success.
 *   DONE    (broadcast) a rank that holds all of recvbuf and has DONE from
 *           every child tells its parent: its whole subtree holds it;
 *   COMMIT  the root, once it knows (broadcast: every child's DONE; reduce:
 *           its own result, which needs every rank's part, so the data wave
 *           up is the reduce's DONE wave), tells its children, who tell
 *           theirs; a rank returns once it has COMMIT and passed it on.
 * Tokens are empty and say which collective sent them (step = the kind),
 * so calls of different collectives on one tag break the op, never mix.
 * 3 floor(log2 N) hops for a small broadcast, 2 floor(log2 N) for a
 * reduce, against the chain's 2(N-1).
 *
 * have_full: a broadcast rank once all of recvbuf is in (the root: once its
 * copy is made); the reduce's root once its result is written; every other
 * reduce rank, which has no output, once its last slice is queued.
 *
 * Failure: recvbuf is backed up range by range right before each range is
 * first written (a received slice, the root's result slice, the root's
 * copy), and restore puts back exactly those ranges; sendbuf is never
 * written (in place, the reduce's root reads each of its slices before
 * writing the result over it). Buffers are touched only through env->dev
 * (a phantom or device-mirror env works unchanged).
 */
#ifndef ECCL_CORE_COLL_BINOMIAL_H
#define ECCL_CORE_COLL_BINOMIAL_H

#include "coll/algo.h"
#include "coll/call.h"
#include "env.h"
#include "proto/chan.h"

/* Slices this big at most: each one frame. */
#define ECCL_BINOMIAL_SLICE_BYTES (1u << 20)
/* ceil(log2 N) for any 32-bit N. */
#define ECCL_BINOMIAL_MAX_CHILDREN 32
#define ECCL_BINOMIAL_NONE UINT32_MAX

typedef struct eccl_binomial {
    eccl_coll_call call;
    size_t esize, bytes;
    size_t slice;         /* bytes per slice (a multiple of esize); 0: nothing to move */
    uint32_t nslices;
    uint32_t vrank;       /* (rank - root) mod N */
    uint32_t parent;      /* its rank; ECCL_BINOMIAL_NONE at the root */
    uint32_t nchildren;
    uint32_t child[ECCL_BINOMIAL_MAX_CHILDREN];  /* ranks: relative v+1, v+2, v+4, ... */
    uint32_t send_i[ECCL_BINOMIAL_MAX_CHILDREN]; /* broadcast: slices queued to child j */
    uint32_t recv_i[ECCL_BINOMIAL_MAX_CHILDREN]; /* reduce: child j's slices in */
    uint32_t up_recv;     /* broadcast: slices in from the parent */
    uint32_t up_send;     /* reduce: slices queued to the parent */
    uint32_t folded;      /* reduce: slices whose partial (root: result) is made */
    uint32_t saved;       /* slices of recvbuf backed up (in order) */
    uint32_t done_mask;   /* broadcast: children whose DONE came */
    uint32_t commit_mask; /* children COMMIT was queued to */
    int own_saved, own_done; /* the broadcast root's copy: backed up, made */
    int done_sent, committed;
    uint8_t *scratch;     /* reduce: nchildren regions of `bytes` */
    uint8_t *backup;      /* recvbuf as it was, range by range */
    uint32_t inflight;    /* our payload frames the socket has not taken yet */
    uint64_t tx_bytes, rx_bytes;
} eccl_binomial;

/* Scratch bytes the call needs at its rank (0: none): the reduce's child
 * regions. */
size_t eccl_binomial_scratch_bytes(const eccl_coll_call *call);
/* Bytes of recvbuf the rank writes, which backup must hold (0: none). */
size_t eccl_binomial_output_bytes(const eccl_coll_call *call);
/* Children of `rank` in the tree of `nranks` rooted at `root`. */
uint32_t eccl_binomial_nchildren(uint32_t rank, uint32_t nranks, uint32_t root);

/* Plans `call` (broadcast or reduce; a copy is kept) for call->rank of
 * call->nranks (>= 2). */
void eccl_binomial_init(eccl_binomial *b, const eccl_coll_call *call, uint8_t *scratch, uint8_t *backup);

extern const eccl_coll_algo eccl_binomial_algo;

#endif /* ECCL_CORE_COLL_BINOMIAL_H */
