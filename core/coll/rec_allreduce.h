/* Recursive all-reduce over peer links, for any number of ranks: recursive
 * doubling for small buffers, recursive halving then doubling (Rabenseifner)
 * for large ones. A resumable state machine behind coll/algo.h
 * (ECCL_ALGO_RECURSIVE): its list of steps run by coll/peer_steps.h.
 *
 * Ranks. p is the largest power of two <= N, L = log2 p, and the N - p
 * ranks p..N-1 are "extra": extra rank p+i folds into rank i (i < N - p)
 * first and gets the result back from it at the end (the standard scheme
 * for any N). Ranks 0..p-1 form the power-of-two core; the partner of core
 * rank v at level k is v ^ 2^k. Each rank walks a fixed list of steps:
 *
 *   FOLD    extra p+i sends its whole input to i; i combines
 *           (its input) op (p+i's), in that order
 *   DOUBLE  doubling, k = 0..L-1: partners swap their whole partials and
 *           both compute (the lower rank's partial) op (the higher's)
 *   HALVE   halving, k = 0..L-1: the range [lo, hi) a rank holds (the
 *           whole buffer at k = 0) is cut at element lo + (hi - lo) / 2; the lower rank
 *           of the pair keeps the lower half, sends its partial of the
 *           other half and combines (lower's) op (higher's) over the half
 *           it keeps; after L steps rank v holds its block, fully reduced
 *   GATHER  doubling back, k = L-1..0: partners swap the ranges they hold,
 *           which land straight in recvbuf, unchanged
 *   RESULT  i sends the result to p+i
 *
 * Small buffers take FOLD, DOUBLE, RESULT; large ones (eccl_rec_allreduce_
 * halving: ECCL_REC_HALVING_MIN_SAVED) FOLD, HALVE, GATHER, RESULT. Every frame is at
 * most ECCL_RING_PASS_SLICE_BYTES: a step's range travels in slices, and a
 * received slice is combined as soon as the step before is complete. An
 * empty range still travels as one empty frame, so every step has frames.
 *
 * Bit-parity: two ranks that compute the same value compute it from the
 * same operands in the same order (lower op higher: MIN/MAX keep the first
 * of two NaNs, so order matters beyond rounding); a halving block is
 * computed by one rank and copied, never recomputed. AVG reduces as SUM
 * and divides once at the end (doubling: the identical result on every
 * core rank; halving: each block by its one owner).
 *
 * Completion: once a rank's output is final (have_full) and all its data
 * frames are queued, a dissemination barrier of empty tokens runs over
 * peer links (coll/dissem.h): round k = 0..ceil(log2 N)-1 sends a token to
 * rank + 2^k and waits for rank - 2^k's (mod N); the token of round k > 0
 * leaves only after round k-1's arrived. After the last round every rank is known to
 * be full, so a rank returns success only once the master's "commit iff
 * every survivor holds it" can no longer contradict it. Two ranks run it
 * too (coll/dissem.h says why). complete() also waits for every frame of
 * ours to be written.
 *
 * Frames from one rank come in the order it sends them (one link per
 * pair), so a rank always knows the next frame each partner owes it:
 * data of its steps with that partner in step order, then that partner's
 * token; anything else is ECCL_ERR_PROTOCOL, and expects(PEER + r) is 0 as
 * soon as r owes nothing more. A partner can run ahead (its later steps do
 * not wait for ours), so every step's received data lands in its own
 * scratch region, and sent data is never written again while it may be on
 * the wire: DOUBLE writes each level's partial to a fresh place (the
 * higher rank into the partial it received, the lower into a region of
 * its own, the last level into recvbuf), HALVE never writes a range it
 * sent before GATHER brings it back (which the partner sends only after
 * it received ours), and in place the doubling input is copied to scratch
 * first (the last level's write into recvbuf would otherwise race the
 * first level's send).
 *
 * Links: pump asks links->peer for every rank it still sends to or hears
 * from, so a lower rank that only receives from a higher one (a FOLD, a
 * token) still opens the link (the lower rank of a pair connects).
 *
 * Failure: recvbuf is backed up one half at a time (the level-1 halves:
 * HALVE writes one, GATHER the other) right before the first write to it,
 * so restore puts back exactly what the op changed. sendbuf is never
 * written (in place it is recvbuf). Host memory only, exact values: no
 * quantised or device-resident calls.
 */
#ifndef ECCL_CORE_COLL_REC_ALLREDUCE_H
#define ECCL_CORE_COLL_REC_ALLREDUCE_H

#include "coll/algo.h"
#include "coll/call.h"
#include "coll/peer_steps.h"
#include "env.h"
#include "proto/chan.h"

/* Per rank, doubling sends and reduces log2 p whole buffers; halving sends
 * 2 (p-1)/p of one and reduces (p-1)/p, for log2 p more steps. A call
 * halves and doubles once that saves at least this many bytes sent plus
 * reduced per rank, B (2 log2 p - 3 + 3/p) for a buffer of B bytes (from
 * 1.5 MiB at p = 2, 439 KiB at p = 4, 228 KiB at p = 8), and has p
 * elements or more. Measured on loopback, where the crossover moves with
 * the machine's load (docs/performance.md). (A build may define it
 * otherwise: sweeps of either mode alone.) */
#ifndef ECCL_REC_HALVING_MIN_SAVED
#define ECCL_REC_HALVING_MIN_SAVED (768u << 10)
#endif
#define ECCL_REC_MAX_LEVELS 32
#define ECCL_REC_MAX_STEPS (2 * ECCL_REC_MAX_LEVELS + 2)

enum eccl_rec_step_kind {
    ECCL_REC_FOLD_SEND,
    ECCL_REC_FOLD_RECV,
    ECCL_REC_DOUBLE,
    ECCL_REC_HALVE,
    ECCL_REC_GATHER,
    ECCL_REC_RESULT_SEND,
    ECCL_REC_RESULT_RECV
};

/* One step of a rank's list: with whom, what it sends and receives
 * (element ranges of the buffer), and which of the pair is lower. */
typedef struct eccl_rec_step {
    uint8_t kind;  /* enum eccl_rec_step_kind */
    uint8_t phase; /* enum eccl_data_phase of its frames */
    int tx, rx;    /* it sends / receives */
    int lower;     /* this rank is the lower of the pair */
    uint32_t peer; /* the partner's rank */
    uint32_t level;
    size_t tx_at, tx_n, rx_at, rx_n; /* elements */
} eccl_rec_step;

typedef struct eccl_rec_allreduce {
    eccl_peer_steps steps; /* first: the engine (coll/peer_steps.h) runs the list */
    eccl_coll_call call;
    size_t esize, bytes;
    int halving;         /* HALVE + GATHER, else DOUBLE */
    uint32_t p, levels;  /* largest power of two <= N, its log2 */
    int extra, folder;   /* a rank >= p; a rank < N - p (it has an extra) */
    uint8_t *scratch;    /* received partials, by step (see scratch_bytes) */
    uint8_t *backup;     /* recvbuf as it was, half by half */
    int saved[2];        /* half h of recvbuf is in backup */
    uint32_t counters[3 * ECCL_REC_MAX_STEPS]; /* the engine's, by step */
} eccl_rec_allreduce;

/* Whether a call of this size halves and doubles (the same on every rank:
 * it depends on count, dtype and N alone). */
int eccl_rec_allreduce_halving(const eccl_coll_call *call);
/* Scratch bytes the call needs with `halving` (0: none). */
size_t eccl_rec_allreduce_scratch_bytes(const eccl_coll_call *call, int halving);

/* Plans `call` (a copy is kept) for call->rank of call->nranks (>= 2), with
 * the mode eccl_rec_allreduce_halving picks and ECCL_RING_PASS_SLICE_BYTES
 * frames. scratch holds eccl_rec_allreduce_scratch_bytes, backup as many
 * bytes as recvbuf. */
void eccl_rec_allreduce_init(eccl_rec_allreduce *a, const eccl_coll_call *call, uint8_t *scratch,
                             uint8_t *backup);
/* The same with the mode and the frame size given (tests: every rank of a
 * call must be given the same). slice_bytes is rounded down to whole
 * elements, at least one. */
void eccl_rec_allreduce_init_ex(eccl_rec_allreduce *a, const eccl_coll_call *call, uint8_t *scratch,
                                uint8_t *backup, int halving, size_t slice_bytes);
/* Step s of this rank's list (s < a->nsteps). */
void eccl_rec_allreduce_step(const eccl_rec_allreduce *a, uint32_t s, eccl_rec_step *st);

/* The state machine behind coll/algo.h. */
extern const eccl_coll_algo eccl_rec_allreduce_algo;

#endif /* ECCL_CORE_COLL_REC_ALLREDUCE_H */
