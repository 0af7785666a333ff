#include "bench_rows.h"

#include <string.h>

const char *const bench_coll_names[COLL_COUNT] = {"allreduce", "allgather", "reduce_scatter",
                                                  "broadcast", "reduce",    "alltoall", "barrier"};

int bench_coll_parse(const char *name)
{
    for (int k = 0; k < COLL_COUNT; k++)
        if (strcmp(name, bench_coll_names[k]) == 0) return k;
    return -1;
}

int bench_blocked(int coll)
{
    return coll == COLL_ALLGATHER || coll == COLL_REDUCE_SCATTER || coll == COLL_ALLTOALL;
}

int bench_reduces(int coll)
{
    return coll != COLL_ALLGATHER && coll != COLL_BROADCAST && coll != COLL_ALLTOALL && coll != COLL_BARRIER;
}

double bench_busbw_factor(int coll, int64_t nranks)
{
    double n = (double)nranks;
    switch (coll) {
    case COLL_ALLREDUCE: return 2.0 * (n - 1) / n;
    case COLL_ALLGATHER:
    case COLL_REDUCE_SCATTER:
    case COLL_ALLTOALL: return (n - 1) / n;
    default: return 1.0;
    }
}

double bench_algbw(size_t bytes, uint64_t concurrent, double time_us)
{
    return (double)bytes * (double)concurrent / time_us / 1e3;
}

int64_t bench_floor_log2(int64_t v)
{
    int64_t e = 0;
    while (v > 1) {
        v >>= 1;
        e++;
    }
    return e;
}

int64_t bench_amplitude(int64_t exact_limit, int64_t nranks)
{
    int64_t amp = exact_limit / nranks;
    return amp > 6 ? 6 : amp < 1 ? 1 : amp;
}

int64_t bench_contribution(int64_t exact_limit, int is_signed, eccl_op op, int64_t nranks, int64_t rank, size_t j)
{
    int64_t base = ((rank % 13 + 1) * 7 + (int64_t)j * 3) % 13;
    if (op == ECCL_PROD) {
        /* Factors of 2 from at most log2(limit) ranks; the rest give +-1. */
        int64_t mag = rank < bench_floor_log2(exact_limit) && (rank + (int64_t)j) % 3 == 0 ? 2 : 1;
        return is_signed && (base & 1) ? -mag : mag;
    }
    int64_t amp = bench_amplitude(exact_limit, nranks);
    /* Past exact_limit / amp ranks even +-1 values could add up to an
     * inexact (or overflowing) partial sum, so further ranks contribute 0. */
    if (rank >= exact_limit / amp) return 0;
    return is_signed ? base % (2 * amp + 1) - amp : base % (amp + 1);
}

void bench_print_columns(FILE *f)
{
    fputs("#       size         count      type   redop     time(us)   algbw(GB/s)   busbw(GB/s)  #wrong  algo\n", f);
}

void bench_print_row(FILE *f, size_t bytes, size_t count, const char *type, const char *redop, double time_us,
                     double algbw, double busbw, const char *wrong, const char *algo)
{
    fprintf(f, "%12zu  %12zu  %8s  %6s  %11.2f  %12.2f  %12.2f  %6s  %s\n", bytes, count, type, redop, time_us, algbw,
            busbw, wrong, algo);
}
