/* A dissemination barrier of empty tokens over peer links, the completion
 * round of the all-reduces that run over them (coll/rec_allreduce.h,
 * coll/hier_allreduce.h).
 *
 * Once a rank's output is final and all its data frames are queued, round
 * k = 0..ceil(log2 N)-1 sends a token to rank + 2^k and waits for rank -
 * 2^k's (mod N); the token of round k > 0 leaves only after round k-1's
 * arrived. After the last round every rank is known to be full, so a rank
 * that returns success cannot be contradicted by the master's "commit iff
 * every survivor holds it". A token carries its round in `step`, offset 0,
 * length 0, and the algorithm's own phase. Rounds are bits of a uint64_t:
 * N up to 2^64. */
#ifndef ECCL_CORE_COLL_DISSEM_H
#define ECCL_CORE_COLL_DISSEM_H

#include <stdint.h>

#include "coll/algo.h"
#include "proto/wire.h"

typedef struct eccl_dissem {
    uint32_t rank, n, rounds;
    uint64_t sent, recv; /* rounds' tokens, by bit */
} eccl_dissem;

/* rounds = ceil(log2 n); with `skip_two` none at n == 2 (a loss there
 * leaves one survivor, who cannot disagree with anyone). */
void eccl_dissem_init(eccl_dissem *b, uint32_t rank, uint32_t n, int skip_two);
/* Round k's partners: we send to dst, hear from src. */
uint32_t eccl_dissem_dst(const eccl_dissem *b, uint32_t k);
uint32_t eccl_dissem_src(const eccl_dissem *b, uint32_t k);
/* Asks for the link of every partner a round still needs (the lower rank
 * of a pair opens it, even one that only listens). */
void eccl_dissem_touch(const eccl_dissem *b, const eccl_coll_links *links);
/* Sends every token that may leave now (call once our output is final). */
eccl_result eccl_dissem_pump(eccl_dissem *b, const eccl_coll_links *links, uint64_t tag, uint32_t epoch,
                             uint8_t phase, uint32_t *inflight);
/* The round whose token `from` still owes us, or b->rounds. */
uint32_t eccl_dissem_owed(const eccl_dissem *b, uint32_t from);
/* Whether d is the token `from` owes us now. */
int eccl_dissem_is_owed(const eccl_dissem *b, uint32_t from, const eccl_wire_data *d, uint8_t phase);
void eccl_dissem_got(eccl_dissem *b, uint32_t round);
/* Every round sent and heard. */
int eccl_dissem_done(const eccl_dissem *b);

#endif /* ECCL_CORE_COLL_DISSEM_H */
