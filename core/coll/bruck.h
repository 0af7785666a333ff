/* Bruck's all-gather over peer links, for any number of ranks: log depth
 * for small all-gathers, where the ring pass's N-1 steps (and N-1
 * completion hops) cost most. A resumable state machine behind
 * coll/algo.h (ECCL_ALGO_BRUCK); all-gather and all-gatherv.
 *
 * Rounds. After round k-1 rank r holds the blocks of origins r, r+1, ...,
 * r+2^k-1 (mod N). Round k = 0..ceil(log2 N)-1 sends rank r - 2^k the
 * first m_k = min(2^k, N - 2^k) of them, origins r..r+m_k-1, and receives
 * as many from rank r + 2^k, origins r+2^k..r+2^k+m_k-1; after the last
 * round r holds all N. A block is named by its origin, so each lands
 * straight at its place in recvbuf (block o at o * count elements, or at
 * vdispls[o] for a v layout): no rotation at the end, no packing. Round
 * k's blocks leave only once rounds 0..k-1 have all arrived (they are
 * what it forwards; round 0 sends our own block alone). The partners of
 * the rounds are N - 1 distinct ranks (2^k - 2^j < N), so each link
 * carries one round's data one way.
 *
 * Frames. A round's block list is sent as runs: consecutive origins whose
 * bytes are adjacent in recvbuf (the uniform layout has at most two, split
 * at the wrap from N-1 to 0), empty blocks skipped, each run in slices of
 * ECCL_RING_PASS_SLICE_BYTES, straight from recvbuf. Frames carry phase
 * ECCL_PHASE_BRUCK, step = the round, offset = the slice's byte offset in
 * recvbuf's layout, and len. A round with no bytes at all still sends one
 * empty frame (offset 0), so every round has frames and the receiver
 * knows it ended. Sender and receiver cut the same list the same way, so
 * a rank knows exactly which frame each partner owes it next: anything
 * else is ECCL_ERR_PROTOCOL.
 *
 * Nothing sent is ever written again: every block of recvbuf is written
 * once (our own copied in at init, before any frame leaves; the others by
 * the one round that brings them), so frames borrow recvbuf while queued
 * and a partner running ahead lands in blocks we have not sent yet.
 *
 * Completion: once a rank holds every block (have_full) and its data
 * frames are queued, the dissemination barrier of coll/dissem.h runs with
 * tokens of phase ECCL_PHASE_BRUCK_DONE (one each way at N = 2); complete() also
 * waits for every frame of ours to be written. expects(PEER + r) is 1
 * while r owes us a round's frames or a token.
 *
 * Failure: the blocks a round writes are backed up right before its first
 * frame lands (our own block before the copy at init), at their own
 * offsets in the backup, so restore puts back exactly what the op
 * changed. sendbuf is never written. Host memory (a device call's host
 * mirror, comm/stage.h, is host memory), exact values only.
 */
#ifndef ECCL_CORE_COLL_BRUCK_H
#define ECCL_CORE_COLL_BRUCK_H

#include "coll/algo.h"
#include "coll/call.h"
#include "coll/dissem.h"
#include "env.h"
#include "proto/chan.h"

#define ECCL_BRUCK_MAX_ROUNDS 32

typedef struct eccl_bruck {
    eccl_coll_call call;
    size_t esize;
    size_t slice;                 /* bytes per frame (a multiple of esize) */
    uint32_t rounds;              /* ceil(log2 N) */
    uint32_t n_tx[ECCL_BRUCK_MAX_ROUNDS], n_rx[ECCL_BRUCK_MAX_ROUNDS]; /* frames, by round */
    uint32_t tx_i[ECCL_BRUCK_MAX_ROUNDS];   /* frames queued */
    uint32_t rx_got[ECCL_BRUCK_MAX_ROUNDS]; /* frames landed */
    uint32_t rx_rounds;           /* rounds 0..rx_rounds-1 have all landed */
    uint64_t saved;               /* round k's blocks are in backup, by bit */
    int own_saved;                /* our own block is in backup */
    uint8_t *backup;              /* recvbuf's blocks as they were, at their offsets */
    int have_full;
    uint32_t inflight;            /* our frames the socket has not taken yet */
    eccl_dissem bar;              /* the completion round */
    uint64_t tx_bytes, rx_bytes;
} eccl_bruck;

/* Bytes from recvbuf's first block to the end of its last: what backup
 * must hold. */
size_t eccl_bruck_output_bytes(const eccl_coll_call *call);

/* Plans `call` (an all-gather(v); a copy is kept) for call->rank of
 * call->nranks (>= 2) with ECCL_RING_PASS_SLICE_BYTES frames, and copies
 * our own block into recvbuf (backed up first) unless it is there. */
void eccl_bruck_init(eccl_bruck *b, const eccl_coll_call *call, uint8_t *backup);
/* The same with the frame size given (tests: every rank of a call must be
 * given the same), rounded down to whole elements, at least one. */
void eccl_bruck_init_ex(eccl_bruck *b, const eccl_coll_call *call, uint8_t *backup, size_t slice_bytes);

/* Round k's block count m_k = min(2^k, N - 2^k). */
uint32_t eccl_bruck_round_blocks(uint32_t nranks, uint32_t k);

/* The state machine behind coll/algo.h. */
extern const eccl_coll_algo eccl_bruck_algo;

#endif /* ECCL_CORE_COLL_BRUCK_H */
