/* Ring order as an asymmetric travelling-salesman problem (ATSP).
 *
 * The master holds a matrix of measured per-link costs (cost[i*n + j] is the
 * cost of sending from peer i to peer j, e.g. seconds per byte = 1/bandwidth)
 * and wants the ring order that makes a ring all-reduce fastest. This module
 * is pure: it reads the matrix, writes a tour, and touches nothing else — no
 * clock, no randomness but a caller-given seed, no globals. Time limits come
 * in as a work budget plus an optional should_stop callback the caller binds
 * to env time.
 *
 * Objective (eccl_tsp_objective). A tour is ranked lexicographically:
 *   1. fewest unmeasured links (cost +inf), so they are used only when no
 *      ring avoids them;
 *   2. ECCL_TSP_BOTTLENECK (the default): the smallest slowest link, then
 *      the smallest sum;  ECCL_TSP_SUM: the smallest sum, then the smallest
 *      slowest link.
 * Why bottleneck first: in a ring all-reduce every one of the 2(n-1) steps
 * moves a chunk over every link at once and ends when the slowest link
 * finishes, so the time is 2(n-1)(S/n)·max_cost plus latencies. The slowest
 * link is the bandwidth term; the sum (which PCCL minimises) is what a
 * latency-bound or pipelined-chain schedule pays, and as a tie-break it keeps
 * the other links fast and off shared paths. ECCL_TSP_SUM gives PCCL's order.
 *
 * Solvers.
 *   - n <= exact_max_n (default 12, at most 16): Held–Karp dynamic
 *     programming, provably optimal for the objective above, O(n² 2ⁿ) time,
 *     18·(n-1)·2ⁿ⁻¹ bytes (8.8 MB at n = 16). The bottleneck objective takes two passes (min-max,
 *     then min-sum over links no slower than the optimum's slowest).
 *   - otherwise: a greedy-matching tour and nearest-neighbour tours from
 *     several deterministic starts, each improved by local search over
 *     candidate lists (the K cheapest links out of and into every peer):
 *     or-opt (move a run of 1-3 peers elsewhere, same direction), segment
 *     exchange (the reversal-free 3-opt move A B C -> A C B, natural for
 *     ATSP) and 2-opt (segment reversal, costed exactly: the reversed links
 *     are priced in their new direction). The bottleneck objective first
 *     squeezes the slowest link (links at the current max count as bad until
 *     none can be removed), then minimises the sum under that max.
 *   - eccl_tsp_improve ("moonshot"): iterated local search from a given tour
 *     — a random segment-exchange kick (the ATSP double bridge; half local,
 *     half anywhere), local search, keep if better — for as long as the
 *     budget allows. Call it again with more budget or another seed; it
 *     never returns a worse tour than it was given.
 *
 * Determinism: the output depends only on the inputs (matrix, options, seed,
 * input tour) and the answers should_stop gives; no wall clock, no address-
 * dependent order. The tour is written in canonical rotation, tour[0] == 0,
 * so the same ring is the same bytes for every caller.
 *
 * Memory: each call allocates its workspace once (opts->alloc, or malloc as
 * the rest of core/ does) and frees it before returning; nothing is kept.
 */
#ifndef ECCL_CORE_TOPO_TSP_H
#define ECCL_CORE_TOPO_TSP_H

#include <stddef.h>
#include <stdint.h>

#include "eccl.h"

/* Largest n any entry point accepts (keeps the packed penalty counts of the
 * local search far from int64 overflow; a ring that long needs a hierarchy,
 * not one n² matrix). */
#define ECCL_TSP_MAX_N 16384u
/* Held–Karp bounds for opts->exact_max_n. */
#define ECCL_TSP_EXACT_DEFAULT 12u
#define ECCL_TSP_EXACT_LIMIT 16u

typedef enum eccl_tsp_objective {
    ECCL_TSP_BOTTLENECK = 0, /* min slowest link, then min sum (default) */
    ECCL_TSP_SUM = 1         /* min sum, then min slowest link (PCCL) */
} eccl_tsp_objective;

/* Options. All-zero (or a NULL pointer) means the defaults. */
typedef struct eccl_tsp_opts {
    eccl_tsp_objective objective;
    /* Held–Karp for n <= exact_max_n. 0: ECCL_TSP_EXACT_DEFAULT. Values 1..3
     * turn it off from n = 4 up (n <= 3 is always solved exactly). Above
     * ECCL_TSP_EXACT_LIMIT: ECCL_ERR_INVALID_ARG. The exact solve is not
     * subject to max_work or should_stop; its cost is bounded by this limit
     * (n = 16: 1.7M label updates, twice that for the bottleneck objective;
     * 20-35 ms measured). */
    uint32_t exact_max_n;
    /* Constructions eccl_tsp_solve improves and picks the best of (0: 4;
     * clamped to n): the greedy matching, then nearest neighbour from peer
     * k*n/starts for k = 1..starts-1. */
    uint32_t starts;
    /* Candidate-list length K (0: 10; at most 64, clamped to n-1). */
    uint32_t neighbours;
    /* Work budget of the heuristic search, in work units: one per
     * candidate move evaluated, one per candidate or matrix entry a
     * construction step reads, one per link priced when a reversal is
     * checked exactly, n per tour rewrite or pricing, 3n per kick (measured:
     * 10-20 ns a unit on one x86 core at n = 256..4096, more as the matrix
     * outgrows the caches; tools/eccl_tsp_bench.c). The search never spends more (result->work <= max_work).
     * 0: unlimited. Setup — checking the matrix and building candidate
     * lists, about 3n² reads — is not counted. */
    uint64_t max_work;
    /* eccl_tsp_improve: number of kicks (0: unlimited). improve needs at
     * least one of max_work, max_kicks, should_stop, or it could not end. */
    uint64_t max_kicks;
    /* eccl_tsp_improve: seed of the kick positions (a local splitmix64). */
    uint64_t seed;
    /* Polled whenever the work count has grown by poll_every (0: 16384)
     * since the last poll; a nonzero answer ends the search and the best
     * tour so far is returned. One charge is at most 3n units, or
     * n·K·log2(n·K) for the greedy construction's sort, so the gap between
     * polls is at most poll_every plus that. Never polled by the exact
     * solver. */
    int (*should_stop)(void *arg);
    void *stop_arg;
    uint64_t poll_every;
    /* Workspace allocator: both or neither (NULL: malloc/free). */
    void *(*alloc)(void *ctx, size_t bytes);
    void (*release)(void *ctx, void *ptr);
    void *alloc_ctx;
} eccl_tsp_opts;

/* What a tour costs, and what the search did. sum and max cover the measured
 * (finite) links only; the tour's true cost is +inf when unmeasured > 0. sum
 * is added up link by link from peer 0 along the ring, so equal tours give
 * equal bits. */
typedef struct eccl_tsp_result {
    double sum;
    double max;
    uint32_t unmeasured; /* links of cost +inf in the tour */
    int exact;           /* 1: Held–Karp proved this tour optimal */
    int stopped;         /* 1: max_work or should_stop cut the search short */
    uint64_t work;       /* work units spent (see max_work) */
    uint64_t kicks;      /* improve: kicks tried */
    uint64_t accepted;   /* improve: kicks that gave a better tour */
} eccl_tsp_result;

/* Finds a good (n <= exact_max_n: optimal) ring over peers 0..n-1 and writes
 * it to tour[0..n-1] in canonical rotation (tour[0] == 0). result may be
 * NULL. cost is n*n, row-major; the diagonal is never read, every other
 * entry must be >= 0 or +inf (unmeasured).
 * Errors: ECCL_ERR_INVALID_ARG (n == 0 or > ECCL_TSP_MAX_N, a NULL cost or
 * tour, a NaN or negative cost, bad options), ECCL_ERR_NO_MEMORY; on error
 * tour and result are untouched. */
eccl_result eccl_tsp_solve(uint32_t n, const double *cost, const eccl_tsp_opts *opts,
                           uint32_t *tour, eccl_tsp_result *result);

/* Improves the ring in tour[0..n-1] (any rotation of a permutation of
 * 0..n-1) in place: local search, then kicks until max_kicks, max_work or
 * should_stop. The result is canonical and never worse than the input under
 * opts->objective; the same inputs and seed give the same bytes. For
 * n <= exact_max_n it returns the exact optimum. Errors as eccl_tsp_solve,
 * plus ECCL_ERR_INVALID_ARG for a tour that is not a permutation or for no
 * bound at all (see max_kicks). */
eccl_result eccl_tsp_improve(uint32_t n, const double *cost, const eccl_tsp_opts *opts,
                             uint32_t *tour, eccl_tsp_result *result);

/* Prices a ring (any rotation) the way solve and improve do: result->sum,
 * max, unmeasured; the rest zero. Only opts' allocator is used (opts may be
 * NULL). Errors as eccl_tsp_improve, less the bound. */
eccl_result eccl_tsp_eval(uint32_t n, const double *cost, const eccl_tsp_opts *opts,
                          const uint32_t *tour, eccl_tsp_result *result);

/* <0 when a is the better tour under obj, >0 when b is, 0 when they tie:
 * unmeasured first, then (max, sum) or (sum, max). */
int eccl_tsp_compare(eccl_tsp_objective obj, const eccl_tsp_result *a, const eccl_tsp_result *b);

#endif
