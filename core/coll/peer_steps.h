/* The engine of the peer-link step algorithms (the recursive all-reduce,
 * coll/rec_allreduce.h; the recursive reduce-scatter,
 * coll/rec_reduce_scatter.h; the hierarchical all-reduce,
 * coll/hier_allreduce.h): a rank walks a fixed list of steps, each
 * sending one range to one peer and receiving one range from one peer
 * (often the same), in frames of at most `slice` bytes, and then runs the
 * dissemination barrier of coll/dissem.h. The algorithms differ only in
 * their lists and in what their bytes are; the state machine behind
 * coll/algo.h (pump, recv, recv_done, complete, expects, have_full,
 * bytes) is this one.
 *
 * Frames. A range is up to two pieces of bytes travelling back to back
 * (a reduce-scatter's half is two runs of blocks); each piece is cut into
 * slices, a frame never straddles the two, and a range with no bytes still
 * travels as one empty frame, so every step that moves data has frames.
 * A frame carries the step's phase and wire step (the same number on
 * both ends of a pair), offset = where the range starts on the wire plus
 * the slice's place in the pieces laid back to back.
 *
 * Order. Frames from one rank come in the order it sends them (one link
 * per pair), and with each partner both lists name the same steps in the
 * same order, so a rank always knows the next frame each partner owes it:
 * the next slice of the first step from `cur` on that it still owes, then
 * its barrier token; anything else is ECCL_ERR_PROTOCOL, and expects(PEER
 * + r) is 0 as soon as r owes nothing. A partner can run ahead, so a
 * received slice lands at once where the algorithm says (rx_dst) and is
 * combined only once it is the current step's (combine, in slice order);
 * a step is complete once all its slices are queued and combined.
 *
 * Sending. By default only the current step's slices leave (a step's
 * data is what the steps before it made); an algorithm whose sends may run
 * ahead says per step how many may have left by now (tx_ready), and every
 * step from `cur` on is then pumped, in step order. A link takes slices
 * while its queue is under ECCL_RING_MAX_QUEUED.
 *
 * Completion: once the output is final (have_full: a step_done said so)
 * and every step is complete, the barrier's tokens (phase done_phase);
 * complete() also waits for every frame of ours to be written.
 *
 * The algorithm's state starts with its eccl_peer_steps, so the engine's
 * face takes the algorithm's op as it is (ECCL_PEER_STEPS_ALGO builds the
 * table) and hands the same pointer to the callbacks. The op must not move
 * after init (the step counters may live in it). Backing up and restoring
 * recvbuf stay the algorithm's: it knows what it writes (rx_dst and
 * combine back up before they write recvbuf).
 */
#ifndef ECCL_CORE_COLL_PEER_STEPS_H
#define ECCL_CORE_COLL_PEER_STEPS_H

#include "coll/algo.h"
#include "coll/call.h"
#include "coll/dissem.h"
#include "proto/chan.h"
#include "proto/wire.h"

/* What one step moves one way. */
typedef struct eccl_peer_range {
    int on;          /* the step moves data this way at all (else no frame, not even an empty one) */
    uint32_t peer;   /* the rank it goes to / comes from */
    size_t at;       /* the wire offset of the range's first byte */
    size_t len[2];   /* bytes of its two pieces (the second often empty) */
} eccl_peer_range;

/* Step s as the engine sees it. */
typedef struct eccl_peer_step {
    uint8_t phase;      /* enum eccl_data_phase of its frames */
    uint16_t wire_step; /* the step number its frames carry */
    eccl_peer_range tx, rx;
} eccl_peer_step;

/* One slice of a range: its piece, its first byte within the piece, its
 * offset on the wire and its bytes. */
typedef struct eccl_peer_slice {
    int piece;
    size_t start, off, len;
} eccl_peer_slice;

/* The algorithm's description: op is its state (the eccl_peer_steps first),
 * s a step of its list. */
typedef struct eccl_peer_steps_ops {
    uint8_t done_phase; /* the barrier tokens' phase */
    /* Step s of this rank's list. */
    void (*step)(const void *op, uint32_t s, eccl_peer_step *st);
    /* NULL: the current step's slices may all leave, a later step's none.
     * Else how many of step s's slices may have left by now (s >= cur). */
    uint32_t (*tx_ready)(const void *op, uint32_t s, const eccl_peer_step *st);
    /* Where slice sl of step s's range leaves from. */
    const uint8_t *(*tx_src)(const void *op, uint32_t s, const eccl_peer_slice *sl);
    /* Where the received slice sl (not empty) of step s lands; in recvbuf
     * only once the bytes it overwrites are backed up. */
    uint8_t *(*rx_dst)(void *op, uint32_t s, const eccl_peer_slice *sl);
    /* Received slice sl of step s (the current one) is in place: combine
     * it. NULL: slices land as they are. */
    void (*combine)(void *op, uint32_t s, const eccl_peer_slice *sl);
    /* Step s is complete: what its end finishes. 1: the output is final
     * now. NULL: the output is final once the last step is. */
    int (*step_done)(void *op, uint32_t s);
    /* NULL, or run before the engine moves past complete steps: the
     * algorithm moves `cur` past leading steps it completes as a block of
     * its own, and returns 0 while the engine must wait for them. */
    int (*settle)(void *op);
} eccl_peer_steps_ops;

typedef struct eccl_peer_steps {
    const eccl_peer_steps_ops *ops;
    uint64_t tag;
    uint32_t epoch;
    size_t slice;                      /* bytes per frame (a multiple of the element) */
    uint32_t nsteps, cur;              /* steps, and the first one not complete */
    uint32_t *tx_i, *rx_got, *rx_done; /* per step: slices queued, landed, combined */
    eccl_dissem bar;                   /* the completion round */
    int have_full;
    uint32_t inflight;                 /* our frames the socket has not taken yet */
    uint64_t tx_bytes, rx_bytes;
} eccl_peer_steps;

/* Starts `nsteps` steps of `call` (its tag, epoch, rank, N and element
 * size) with frames of slice_bytes rounded down to whole elements, at
 * least one; counters holds 3 nsteps (zeroed here). */
void eccl_peer_steps_init(eccl_peer_steps *e, const eccl_peer_steps_ops *ops, const eccl_coll_call *call,
                          size_t slice_bytes, uint32_t nsteps, uint32_t *counters);

/* Frames range r travels in (0 if it is not on). */
uint32_t eccl_peer_slices(const eccl_peer_steps *e, const eccl_peer_range *r);
/* Slice j of range r (j below its frames). */
void eccl_peer_slice_of(const eccl_peer_steps *e, const eccl_peer_range *r, uint32_t j, eccl_peer_slice *sl);

/* The face behind coll/algo.h (op: the algorithm's state). */
eccl_result eccl_peer_steps_pump(void *op, const eccl_coll_links *links);
eccl_result eccl_peer_steps_recv(void *op, int role, const eccl_wire_data *d, void **dst);
eccl_result eccl_peer_steps_recv_done(void *op, int role, const eccl_wire_data *d);
int eccl_peer_steps_complete(void *op);
int eccl_peer_steps_settled(const void *op);
int eccl_peer_steps_expects(const void *op, int role);
int eccl_peer_steps_owes_token(const void *op, int role);
int eccl_peer_steps_have_full(const void *op);
eccl_result eccl_peer_steps_error(const void *op);
void eccl_peer_steps_bytes(const void *op, uint64_t *tx, uint64_t *rx);

/* The algorithm table of a step algorithm: all but its id and restore are
 * the engine's. */
#define ECCL_PEER_STEPS_ALGO(algo_id, restore_fn)                                                    \
    {                                                                                                \
        .id = (algo_id), .roles = ECCL_ROLES_PEERS,                                                  \
        .pump_needs = 0, /* peer links open lazily: frames wait for theirs */                        \
        .pump = eccl_peer_steps_pump, .recv = eccl_peer_steps_recv,                                  \
        .recv_done = eccl_peer_steps_recv_done, .complete = eccl_peer_steps_complete,                \
        .expects = eccl_peer_steps_expects, .have_full = eccl_peer_steps_have_full,                  \
        .settled = eccl_peer_steps_settled, .owes_token = eccl_peer_steps_owes_token,                \
        .restore = (restore_fn), .error = eccl_peer_steps_error, .bytes = eccl_peer_steps_bytes,     \
    }

#endif /* ECCL_CORE_COLL_PEER_STEPS_H */
