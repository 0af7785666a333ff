/* Reduce-scatter by recursive halving over peer links, for any number of
 * ranks: log2 p exchanges instead of the ring pass's N-1 steps and N-1
 * token hops. A resumable state machine behind coll/algo.h
 * (ECCL_ALGO_RECURSIVE for reduce-scatter and reduce-scatterv): its list
 * of steps run by coll/peer_steps.h.
 *
 * Blocks. The input is N blocks, block b being what rank b receives
 * (block b has vcounts[b] elements at vdispls[b], the blocks back to back;
 * uniform: count elements at b * count). p is the largest power of two
 * <= N, L = log2 p, e = N - p. Ranks p..N-1 are "extra"; the core ranks
 * 0..p-1 halve over SETS of blocks: core index c stands for block c and,
 * if c < e, block c + p. A range [a, b) of core indices is then at most
 * two contiguous runs of elements, A = blocks a..b-1 and B = blocks
 * min(a,e)+p .. min(b,e)+p-1, and its "compact layout" is A then B. The
 * compact layout of the whole range [0, p) is the input's own layout.
 *
 *   FOLD    extra p+i sends its whole input to core rank i; i combines
 *           (its input) op (p+i's), in that order, into scratch
 *   HALVE   k = 0..L-1, highest bit first: before step k core rank v holds
 *           the aligned range R of p >> k core indices containing v; with
 *           h = p >> (k+1) the partner is v ^ h, the lower of the two
 *           keeps the lower half of R, the higher the upper half. Each
 *           sends its partial of the half it gives away (its A and B runs:
 *           up to two contiguous pieces, in compact order) and combines
 *           (lower's partial) op (higher's) over the half it keeps. After
 *           L steps core rank v holds blocks v and v + p (if v < e) fully
 *           reduced; it writes block v to recvbuf
 *   RESULT  core rank i sends block i + p to extra rank p+i, which
 *           receives it straight into recvbuf
 *
 * The fold order, fixed whatever the timing: core rank v's partial
 * before step k is the reduction over the 2^k core ranks that differ from
 * v in their k highest bits, (its pair's lower partial) op (the higher),
 * the highest bit combined first; a leaf (k = 0) is core rank i's input,
 * op p+i's for i < e. So the result is the cube tree over the core ranks
 * in bit-reversed order, at p = 4 ((leaf 0 op leaf 2) op (leaf 1 op leaf
 * 3)), not rec_allreduce's ((0 op 1) op (2 op 3)): halving from the
 * highest bit keeps every range contiguous in core index. MIN/MAX keep the
 * first of two NaNs, so order matters beyond rounding. Each block is
 * computed by its one owner (rank b if b < p, else rank b - p) and copied,
 * never recomputed. AVG reduces as SUM; the owner divides its block(s) by
 * N once, after the last step.
 *
 * Frames. Every frame is at most ECCL_RING_PASS_SLICE_BYTES: a step's data
 * travels as piece A's slices then piece B's (a frame never straddles the
 * two), each frame's offset being its byte offset in the compact layout
 * of what the step sends (FOLD: the input; RESULT: the block); a step
 * with nothing to send still sends one empty frame, so every step has
 * frames. step = the step's number as a folder numbers it (FOLD 0, HALVE k
 * at k + 1, RESULT L + 1). A received slice is combined as soon as the
 * step before is complete.
 *
 * Scratch (core ranks; an extra needs none): a folder's fold regions (the
 * extra's input as it lands, then the combined input), then per step k
 * the partner's partial of the kept half (the higher rank combines into
 * it, making it its partial) and, on the lower rank, a fresh region for
 * the combination. A partner can run ahead (its later steps do not wait
 * for ours), so every step's received data has its own region, and what
 * a step sent is never written again (the next step's partial goes to a
 * fresh region): nothing on the wire changes under the socket.
 *
 * Completion: the dissemination barrier of coll/dissem.h, with its own
 * phase (RECRS_DONE): once a rank's output is final (have_full) and all its steps are
 * done, round k = 0..ceil(log2 N)-1 sends an empty token to rank + 2^k and
 * waits for rank - 2^k's (mod N), round k > 0 leaving only after round
 * k-1's arrived (one round at two ranks). complete() also waits for every frame
 * of ours to be written.
 *
 * Frames from one rank come in the order it sends them, so a rank always
 * knows the next frame each partner owes it: data of its steps with that
 * partner in step order, then that partner's token; anything else is
 * ECCL_ERR_PROTOCOL, and expects(PEER + r) is 0 as soon as r owes nothing
 * more. pump asks links->peer for every rank it still sends to or hears
 * from, so a lower rank that only listens (a FOLD, a token) opens the link.
 *
 * Failure and in place: recvbuf is backed up whole right before its first
 * write (core: the result copy after the last step; extra: the first
 * RESULT slice), and restore puts it back. sendbuf is never written but
 * for block `rank` in place (recvbuf == sendbuf + block rank's
 * displacement), and that block is never read after recvbuf's first write:
 * a core rank never sends its own block (it always keeps the half holding
 * it) and reads it from sendbuf only while combining FOLD or step 0,
 * before the last step's end writes recvbuf; an extra's whole input has been received by its core rank (every
 * FOLD frame written) before RESULT, which alone writes recvbuf, can
 * come. Host memory only (a device call's host mirror included), exact
 * values: no quantised calls.
 */
#ifndef ECCL_CORE_COLL_REC_REDUCE_SCATTER_H
#define ECCL_CORE_COLL_REC_REDUCE_SCATTER_H

#include "coll/algo.h"
#include "coll/call.h"
#include "coll/peer_steps.h"
#include "env.h"
#include "proto/chan.h"

#define ECCL_RECRS_MAX_LEVELS 32
#define ECCL_RECRS_MAX_STEPS (ECCL_RECRS_MAX_LEVELS + 2)

enum eccl_recrs_step_kind {
    ECCL_RECRS_FOLD_SEND,
    ECCL_RECRS_FOLD_RECV,
    ECCL_RECRS_HALVE,
    ECCL_RECRS_RESULT_SEND,
    ECCL_RECRS_RESULT_RECV
};

/* One step of a rank's list: with whom, and what it sends (up to two
 * pieces, byte offsets into the source of the step's data) and receives
 * (up to two pieces, landing back to back in compact order). */
typedef struct eccl_recrs_step {
    uint8_t kind;  /* enum eccl_recrs_step_kind */
    uint8_t phase; /* enum eccl_data_phase of its frames */
    int lower;     /* this rank is the lower of the pair */
    uint32_t peer; /* the partner's rank */
    uint32_t level;
    size_t tx_off[2], tx_len[2]; /* bytes */
    size_t rx_len[2];            /* bytes */
    /* HALVE: where the kept half's two pieces are in the source of our
     * partial (its compact layout before the step), bytes. */
    size_t keep_off[2];
} eccl_recrs_step;

typedef struct eccl_rec_rs {
    eccl_peer_steps steps; /* first: the engine (coll/peer_steps.h) runs the list */
    eccl_coll_call call;
    size_t esize;
    size_t total;        /* elements of the input (every block) */
    uint32_t p, levels, rem; /* largest power of two <= N, its log2, N - p */
    int extra, folder;   /* a rank >= p; a rank < N - p (it has an extra) */
    uint8_t *scratch;    /* see eccl_rec_rs_scratch_bytes */
    uint8_t *backup;     /* recvbuf as it was */
    int saved;           /* recvbuf is in backup */
    uint32_t counters[3 * ECCL_RECRS_MAX_STEPS]; /* the engine's, by step */
} eccl_rec_rs;

/* Scratch bytes call->rank needs (0: none): a folder's two copies of the
 * input, then per step k the kept half (p >> (k+1) core indices, as many
 * blocks again for those below e), twice on the lower rank of the pair:
 * uniform blocks of B bytes, at most 2 (p - 1 + e log2 p) B besides the
 * fold's copies, the most on rank 0. */
size_t eccl_rec_rs_scratch_bytes(const eccl_coll_call *call);
/* Bytes of recvbuf the call writes, which backup must hold. */
size_t eccl_rec_rs_output_bytes(const eccl_coll_call *call);

/* Plans `call` (a copy is kept; kind ECCL_COLL_REDUCE_SCATTER, uniform or
 * v layout, the v arrays read during the call) for call->rank of
 * call->nranks (>= 2), with ECCL_RING_PASS_SLICE_BYTES frames. */
void eccl_rec_rs_init(eccl_rec_rs *a, const eccl_coll_call *call, uint8_t *scratch, uint8_t *backup);
/* The same with the frame size given (tests: every rank of a call must be
 * given the same). slice_bytes is rounded down to whole elements, at least
 * one. */
void eccl_rec_rs_init_ex(eccl_rec_rs *a, const eccl_coll_call *call, uint8_t *scratch, uint8_t *backup,
                         size_t slice_bytes);
/* Step s of this rank's list (s < a->nsteps). */
void eccl_rec_rs_step(const eccl_rec_rs *a, uint32_t s, eccl_recrs_step *st);

/* The state machine behind coll/algo.h. */
extern const eccl_coll_algo eccl_rec_rs_algo;

#endif /* ECCL_CORE_COLL_REC_REDUCE_SCATTER_H */
