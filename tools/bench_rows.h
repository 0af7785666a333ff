/* What eccl-bench measures and prints, shared by eccl-bench (ranks as
 * processes) and eccl-sim's `workload = bench` (ranks as simulated actors,
 * scenarios/engine/sim_bench.h), so that both print the same rows from the same check
 * values and eccl-tune reads either. */
#ifndef ECCL_TOOLS_BENCH_ROWS_H
#define ECCL_TOOLS_BENCH_ROWS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "eccl.h"

/* eccl-bench's --coll names, in this order. */
enum bench_coll {
    COLL_ALLREDUCE,
    COLL_ALLGATHER,
    COLL_REDUCE_SCATTER,
    COLL_BROADCAST,
    COLL_REDUCE,
    COLL_ALLTOALL,
    COLL_BARRIER, /* no data: one row of 0 bytes (eccl-bench only) */
    COLL_COUNT
};

extern const char *const bench_coll_names[COLL_COUNT];
/* The collective of a name; -1 when none. */
int bench_coll_parse(const char *name);
/* Its size is world blocks of a per-rank count (all-gather, reduce-scatter,
 * all-to-all). */
int bench_blocked(int coll);
/* It reduces (the row's redop column names the op, else "none"). */
int bench_reduces(int coll);
/* nccl-tests' bus bandwidth factors: what each rank's links carry per byte
 * of size, so the numbers compare across collectives and world sizes:
 * 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and
 * all-to-all, 1 for broadcast and reduce (and the barrier, of 0 bytes). */
double bench_busbw_factor(int coll, int64_t nranks);
/* A row's algorithm bandwidth in GB/s: `concurrent` calls of `bytes` each
 * (eccl-bench --inflight / --concurrent, eccl-sim's `concurrent`) done in
 * time_us, as nccl-tests counts bytes: size / time. */
double bench_algbw(size_t bytes, uint64_t concurrent, double time_us);

int64_t bench_floor_log2(int64_t v);

/* The check pattern uses (i * 3) mod 13 and, for prod, i mod 3, so every
 * contribution and every expected value repeats with period lcm(13, 3). */
#define BENCH_PATTERN_PERIOD 39
/* Magnitude of sum/avg/min/max contributions: 6 when nranks * 6 stays
 * exact (below exact_limit, the dtype's largest exact integer run), smaller
 * for more ranks. */
int64_t bench_amplitude(int64_t exact_limit, int64_t nranks);
/* Element j of rank's input: small integers, chosen so that every partial
 * result any reduction order can form is exact in the dtype; then the
 * expected value needs no tolerance (except float avg) and does not depend
 * on the library's reduction order. */
int64_t bench_contribution(int64_t exact_limit, int is_signed, eccl_op op, int64_t nranks, int64_t rank, size_t j);

/* The column header (a `#` line) and one row, as eccl-bench prints them. */
void bench_print_columns(FILE *f);
void bench_print_row(FILE *f, size_t bytes, size_t count, const char *type, const char *redop, double time_us,
                     double algbw, double busbw, const char *wrong, const char *algo);

#endif
