/* All-gather, reduce-scatter, broadcast and reduce as one pipelined pass
 * along ring 0 (from prev, to next): a resumable state machine.
 *
 * The work is cut into blocks of B = count elements (one per rank for the
 * all-gather and the reduce-scatter, one in all for the chains), each
 * block into slices, and the pass into steps. At step g a rank sends one
 * block and receives another, slice by slice; slice k of step g leaves
 * only once slice k of step g-1 came in, so steps overlap like a pipeline
 * and every link carries the slices in one order, (g, k) by (g, k):
 *
 *   all-gather      N-1 steps: at step g position p sends block p-g (its own
 *                   at g = 0, copied into recvbuf first) and receives block
 *                   p-g-1 straight into recvbuf.
 *   reduce-scatter  N-1 steps: at step g position p sends its partial of
 *                   block p-g-1 (its own data at g = 0) and receives the
 *                   partial of block p-g-2 into scratch, where its own data
 *                   is added; the last step's block is p, its own: the sum
 *                   of every rank's, in ring order from p+1 round to p.
 *   broadcast       one step along the chain root, root+1, ..., root-1:
 *                   each rank but the last forwards what it received.
 *   reduce          one step along the chain root+1, ..., root: each rank
 *                   adds its data to the partial and forwards it; the root
 *                   adds its own last.
 *
 * Bit-parity: every value is reduced exactly once, in a fixed order (AVG
 * divides once, at the end), and replicated outputs are copied, never
 * recomputed, so every rank holding a block holds the same bits.
 *
 * Completion is all-reduce's ring protocol (coll/ring_allreduce.h): once a
 * rank's output is final (have_full) it passes done tokens around ring 0,
 * and returns only with token N-1, so the master's "commit iff every
 * survivor has its output" never contradicts a rank that returned. A rank
 * with no output (a reduce off the root) has it once its part is sent.
 *
 * Failure: every byte of recvbuf is backed up right before it is first
 * written, so restore puts back exactly what the op changed; sendbuf is
 * never written (in place, the only block of it that is recvbuf is written
 * like any other output).
 */
#ifndef ECCL_CORE_COLL_RING_PASS_H
#define ECCL_CORE_COLL_RING_PASS_H

#include "coll/algo.h"
#include "coll/call.h"
#include "env.h"
#include "proto/chan.h"

/* Slices this big: enough to amortise a frame, small enough to pipeline. */
#define ECCL_RING_PASS_SLICE_BYTES (1u << 20)

typedef struct eccl_ring_pass {
    eccl_coll_call call;
    size_t esize;
    size_t block;          /* bytes of the largest block */
    size_t slice;          /* bytes per slice (a multiple of esize) */
    uint32_t nslices;      /* per block; 0 for an empty block */
    uint32_t nsteps;
    uint32_t dist;         /* chains: this rank's distance from the chain's start */
    int sends, recvs;      /* chains: the last rank sends nothing, the first receives nothing */
    uint32_t send_i, recv_i; /* next slice to send / receive: step * nslices + slice */
    uint32_t saved_i;      /* received slices whose output range was backed up */
    int own_saved;         /* the output range of our own copy was backed up */
    int own_done;          /* our own copy into recvbuf was made */
    uint8_t *scratch;      /* reduce kinds: partials land here */
    uint8_t *backup;       /* recvbuf as it was, range by range */
    uint32_t inflight;     /* our frames the socket has not taken yet */
    uint32_t done_sent, done_recv;
    int have_full;
    uint64_t tx_bytes, rx_bytes;
} eccl_ring_pass;

/* Scratch bytes the call needs (0: none): partials for the reduce kinds. */
size_t eccl_ring_pass_scratch_bytes(const eccl_coll_call *call);
/* Bytes of recvbuf this rank writes, which backup must hold (0: none). */
size_t eccl_ring_pass_output_bytes(const eccl_coll_call *call);

/* Plans `call` (a copy is kept) for call->rank of call->nranks (>= 2). */
void eccl_ring_pass_init(eccl_ring_pass *p, const eccl_coll_call *call, uint8_t *scratch,
                         uint8_t *backup);

/* The all-gather and reduce-scatter (ECCL_ALGO_RING), and broadcast and
 * reduce (ECCL_ALGO_CHAIN): the same engine. */
extern const eccl_coll_algo eccl_ring_pass_algo;
extern const eccl_coll_algo eccl_chain_pass_algo;

#endif
