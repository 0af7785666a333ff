/* All-gather by recursive doubling over peer links, for any number of
 * ranks: log2 p pairwise exchanges of doubling ranges. It moves the bytes
 * the ring pass and Bruck's rounds move, in log depth like Bruck's, but
 * each round swaps with ONE partner over one link both ways, where
 * Bruck's sends to one rank and hears from another (on loopback, Open
 * MPI's recursive-doubling all-gather moved 0.90-1.09 GB/s at N = 4 and
 * 1-8 MiB, its Bruck 0.52-0.76: docs/performance.md). A resumable state machine behind
 * coll/algo.h (ECCL_ALGO_RECURSIVE for the all-gather): its list of steps
 * run by coll/peer_steps.h. Uniform layout only (block b of `count`
 * elements at b * count in recvbuf); all-gatherv takes the ring or Bruck.
 *
 * Ranks. p is the largest power of two <= N, L = log2 p, e = N - p. Ranks
 * p..N-1 are "extra": extra p+i (i < e) hands its block to core rank i
 * first and gets everything back from it at the end. Core rank v's GROUP
 * at level k is the 2^k core ranks [g, g + 2^k), g = v & ~(2^k - 1), and
 * their blocks: run A, blocks g..g+2^k-1, and run B, the blocks of their
 * extras, p+g .. p+min(g+2^k, e)-1 (empty if g >= e). Each rank walks a
 * fixed list of steps:
 *
 *   FOLD    extra p+i sends its block to core rank i (one piece)
 *   DOUBLE  k = 0..L-1: core rank v swaps with v ^ 2^k: it sends its
 *           group's runs A and B (what it holds after step k-1) and
 *           receives the partner's group's runs, straight into recvbuf
 *   RESULT  core rank i sends extra p+i every block but p+i's: blocks
 *           0..p+i-1, then p+i+1..N-1 (two pieces)
 *
 * Frames. Every frame is at most ECCL_RING_PASS_SLICE_BYTES: a step's
 * range travels as its first piece's slices, then its second's (a frame
 * never straddles the two); a range with no bytes (blocks of 0 elements)
 * still travels as one empty frame. phase: ECCL_PHASE_RECAG_FOLD,
 * _DOUBLE, _RESULT; step = the step's number as a core rank with an extra
 * numbers it (FOLD 0, DOUBLE k at k + 1, RESULT L + 1); offset = the
 * byte offset in recvbuf of the range's first piece, plus the slice's
 * place in the pieces laid back to back.
 *
 * Nothing sent is ever written again: every block of recvbuf is written
 * once (our own copied in at init, before any frame leaves, unless the
 * call is in place; every other block by the one step that brings it),
 * every send reads recvbuf, and a step sends only what the steps before
 * it brought (the engine sends only the current step's slices). A partner
 * running ahead lands in blocks we neither hold nor send yet.
 *
 * Completion: the dissemination barrier of coll/dissem.h (tokens of phase
 * ECCL_PHASE_RECAG_DONE; one each way at N = 2) once a rank's output is final
 * (core: after the last DOUBLE; extra: after RESULT) and all its steps
 * are done. complete() also waits for every frame of ours to be written.
 *
 * Failure: the blocks a step writes are backed up right before its first
 * slice lands (our own block before the copy at init), at their own
 * offsets in the backup, so restore puts back exactly what the op
 * changed. sendbuf is never written. Host memory (a device call's host
 * mirror, comm/stage.h, is host memory), exact values only.
 */
#ifndef ECCL_CORE_COLL_REC_ALLGATHER_H
#define ECCL_CORE_COLL_REC_ALLGATHER_H

#include "coll/algo.h"
#include "coll/call.h"
#include "coll/peer_steps.h"
#include "env.h"

#define ECCL_RECAG_MAX_LEVELS 32
#define ECCL_RECAG_MAX_STEPS (ECCL_RECAG_MAX_LEVELS + 2)

typedef struct eccl_rec_ag {
    eccl_peer_steps steps; /* first: the engine (coll/peer_steps.h) runs the list */
    eccl_coll_call call;
    size_t block;            /* bytes of one block */
    uint32_t p, levels, rem; /* largest power of two <= N, its log2, N - p */
    int extra, folder;       /* a rank >= p; a rank < N - p (it has an extra) */
    uint8_t *backup;         /* recvbuf's blocks as they were, at their offsets */
    uint64_t saved;          /* step s's blocks are in backup, by bit */
    int own_saved;           /* our own block is in backup */
    uint32_t counters[3 * ECCL_RECAG_MAX_STEPS]; /* the engine's, by step */
} eccl_rec_ag;

/* Plans `call` (a copy is kept; kind ECCL_COLL_ALLGATHER, uniform layout)
 * for call->rank of call->nranks (>= 2) with ECCL_RING_PASS_SLICE_BYTES
 * frames, and copies our own block into recvbuf (backed up first) unless
 * it is there. backup: the output extent the ring pass's would hold
 * (eccl_ring_pass_output_bytes), or NULL where nothing is restored. */
void eccl_rec_ag_init(eccl_rec_ag *a, const eccl_coll_call *call, uint8_t *backup);
/* The same with the frame size given (tests: every rank of a call must be
 * given the same), rounded down to whole elements, at least one. */
void eccl_rec_ag_init_ex(eccl_rec_ag *a, const eccl_coll_call *call, uint8_t *backup, size_t slice_bytes);

/* The state machine behind coll/algo.h. */
extern const eccl_coll_algo eccl_rec_ag_algo;

#endif /* ECCL_CORE_COLL_REC_ALLGATHER_H */
