/* eccl-bench's measurement as a program over the public API, for eccl-sim's
 * `workload = bench` (scenarios/README.md, "Benchmark rows (workload =
 * bench)"): every rank joins one communicator, waits until the world has
 * all of them (eccl-bench --world N), then for each size from minbytes to
 * maxbytes (times stepfactor) makes `warmup` untimed calls, one checked call
 * and `iters` timed calls back to back, as tools/eccl_bench.c's run_size
 * does, float / sum, out of place:
 *  - size and count mean what they mean in eccl-bench (nccl-tests): the
 *    all-gather's size is its output, the reduce-scatter's its input, the
 *    all-to-all's either, each world x the call's count; the whole buffer
 *    for the others (root 0);
 *  - a row's time is each rank's (clock after its last timed call less
 *    clock before its first) / iters, the maximum over ranks, gathered with
 *    an all-reduce (MAX), as eccl-bench gathers it; here the clock is the
 *    simulated one;
 *  - #wrong: the checked call's mismatches over every rank (eccl-bench's
 *    values: small integers, every partial sum exact, the input checked
 *    untouched), gathered with an all-reduce (SUM);
 *  - algo: the algorithm the library reported (eccl_reduce_info) for rank
 *    0's last timed call.
 * The calls are eccl-bench's, in its order with its tags (the options'
 * all-reduce first, then per size the warm-ups, the checked call, the timed
 * calls, the two gathering all-reduces), so the two programs drive the
 * library the same way.
 *
 * No mutable global: all state hangs off the call. The rows are the
 * caller's (filled by the comm's rank 0), printed by eccl_simbench_print_row
 * in eccl-bench's format.
 */
#ifndef ECCL_TOOLS_SIM_BENCH_H
#define ECCL_TOOLS_SIM_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "bench_rows.h"
#include "eccl.h"

typedef struct eccl_simbench_options {
    int coll;           /* enum bench_coll */
    size_t minbytes, maxbytes;
    uint64_t stepfactor, iters, warmup;
    int64_t world;      /* ranks to wait for before measuring */
    uint64_t wait_ns;   /* give up waiting for them after this much (simulated) time */
    /* Test only: this rank adds 1 to the first element of its output after
     * each checked call, before counting (its #wrong must show it). */
    int corrupt;
    /* Calls issued at once per warm-up and timed step (eccl-bench
     * --inflight K, also spelt --concurrent K), 1..ECCL_SIMBENCH_MAX_CONCURRENT:
     * K async calls with consecutive tags, each into its own output, then
     * a wait for all; the row's time is the step's and its bandwidth
     * counts K buffers. 1: blocking calls, as before. */
    uint64_t concurrent;
    /* Buffers come from hooks->alloc and hold no bytes (eccl-sim's
     * phantom buffers): nothing is filled or checked, as eccl-bench
     * --check 0 (the rows' #wrong reads N/A). */
    int phantom;
} eccl_simbench_options;

#define ECCL_SIMBENCH_MAX_CONCURRENT 64

/* Rows at most (minbytes 1, stepfactor 2, up to 2^63). */
#define ECCL_SIMBENCH_MAX_ROWS 64

typedef struct eccl_simbench_row {
    size_t bytes, count;
    double time_us;     /* the slowest rank's mean timed call */
    uint64_t wrong;     /* over every rank */
    uint32_t algo;      /* eccl_algorithm of rank 0's last timed call */
    uint32_t concurrent;/* calls per timed step (the bandwidth counts them all) */
    int checked;        /* 0: no check ran (phantom buffers): #wrong is N/A */
} eccl_simbench_row;

typedef struct eccl_simbench_hooks {
    void *ctx;
    /* A communicator of this rank (params as given, plus the backend's). */
    eccl_result (*comm_create)(void *ctx, const eccl_comm_params *params, eccl_comm **out);
    uint64_t (*now_ns)(void *ctx);
    void (*sleep_ns)(void *ctx, uint64_t ns);
    /* Phantom buffers (options.phantom): `bytes` of them; nothing to free. */
    eccl_result (*alloc_phantom)(void *ctx, size_t bytes, void **out);
} eccl_simbench_hooks;

typedef struct eccl_simbench_result {
    int64_t rank, nranks;  /* in the communicator, once admitted (-1 before) */
    int nrows;             /* filled on the comm's rank 0 */
    eccl_simbench_row rows[ECCL_SIMBENCH_MAX_ROWS];
    uint64_t wrong_total;  /* #wrong over every row (every rank knows it) */
    char why[160];         /* the failure, "" on success */
} eccl_simbench_result;

/* One rank: joins master_addr, waits for the world, measures every size.
 * 0 on success (whatever #wrong says); -1 with res->why. Frees what it
 * allocated and destroys its communicator. */
int eccl_simbench_rank_run(const eccl_simbench_hooks *h, const char *master_addr,
                           const eccl_simbench_options *o, eccl_simbench_result *res);

/* A row's algorithm bandwidth (GB/s): size x concurrent calls / time. */
double eccl_simbench_algbw(const eccl_simbench_row *row);
/* A row's bus bandwidth (GB/s): algbw x nccl-tests' factor, 2(n-1)/n for
 * all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for
 * broadcast and reduce. */
double eccl_simbench_busbw(int coll, int64_t nranks, const eccl_simbench_row *row);
/* One row as eccl-bench prints it (its column header is bench_rows.h's
 * bench_print_columns); nranks for the bus bandwidth factor. With tsv, a
 * row of bench.tsv (results.h's eccl_results_bench_row, under the header
 * eccl_results_bench_open writes). */
void eccl_simbench_print_row(FILE *f, int tsv, int coll, int64_t nranks, const eccl_simbench_row *row);

#endif
