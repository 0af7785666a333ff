/* The dissemination barrier that ends the peer-link algorithms (the
 * recursive all-reduce, coll/rec_allreduce.h; Bruck's all-gather,
 * coll/bruck.h): once a rank's output is final and its data frames are
 * queued, round k = 0..ceil(log2 N)-1 sends an empty token to rank + 2^k
 * and waits for rank - 2^k's (mod N); the token of round k > 0 leaves only
 * after round k-1's arrived. After the last round every rank knows every
 * rank is full: the completion round of coll/algo.h. Two ranks run it
 * too, one token each way, as the ring does: a loss leaves one survivor,
 * but a link that breaks without one leaves both, who must agree (a rank
 * that returned while its peer never got the data could not be
 * contradicted by the master otherwise).
 *
 * Tokens are DATA frames of the algorithm's own phase with step = k,
 * offset and len 0. A partner sends its tokens after all its data, in
 * round order, so a rank knows which token each partner owes it next
 * (eccl_dissem_owed); the algorithm checks data first, then tokens.
 *
 * Only bookkeeping: the caller owns the frames' counter and phase. */
#ifndef ECCL_CORE_COLL_DISSEM_H
#define ECCL_CORE_COLL_DISSEM_H

#include "coll/algo.h"
#include "proto/chan.h"
#include "proto/wire.h"

typedef struct eccl_dissem {
    uint32_t rank, nranks;
    uint32_t rounds;   /* ceil(log2 N) */
    uint64_t sent, recv; /* rounds' tokens, by bit */
} eccl_dissem;

void eccl_dissem_init(eccl_dissem *b, uint32_t rank, uint32_t nranks);

/* Round k's partners: we send to rank + 2^k, hear from rank - 2^k. */
uint32_t eccl_dissem_dst(const eccl_dissem *b, uint32_t k);
uint32_t eccl_dissem_src(const eccl_dissem *b, uint32_t k);

/* Asks for the link of every rank we still owe a token or await one from
 * (the lower rank of a pair opens it, even one that only listens). */
void eccl_dissem_touch(const eccl_dissem *b, const eccl_coll_links *links);

/* Queues every token that may leave now (call once the output is final
 * and every data frame is queued). */
eccl_result eccl_dissem_pump(eccl_dissem *b, const eccl_coll_links *links, uint64_t tag, uint32_t epoch,
                             uint8_t phase, uint32_t *inflight);

/* Whether a token of ours to `rank` is not sent yet. */
int eccl_dissem_owes(const eccl_dissem *b, uint32_t rank);

/* The round whose token `rank` still owes us, or b->rounds. */
uint32_t eccl_dissem_owed(const eccl_dissem *b, uint32_t rank);

/* A frame from `rank` that is no data of ours: ECCL_OK iff it is the
 * token `rank` owes us next (phase `phase`, the round's step, empty). */
eccl_result eccl_dissem_check(const eccl_dissem *b, uint32_t rank, uint8_t phase, const eccl_wire_data *d);

/* The token d (checked) arrived. */
void eccl_dissem_got(eccl_dissem *b, const eccl_wire_data *d);

/* Every token sent and received. */
int eccl_dissem_done(const eccl_dissem *b);

#endif /* ECCL_CORE_COLL_DISSEM_H */
