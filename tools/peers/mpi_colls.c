/* mpi_colls: Open MPI peer benchmark for every collective eccl is compared
 * on, in nccl-tests' conventions. Not part of the CMake build (CI has no
 * MPI): scripts/bench_colls_vs_peers.sh builds it with mpicc.
 *
 *   mpirun -np N mpi_colls [-f F] [-n ITERS] [-w WARMUP] [-t BUDGET_S] [-c 0|1]
 *          COLL [MINBYTES [MAXBYTES]]
 *
 * COLL: allreduce allgather reduce_scatter broadcast reduce alltoall barrier.
 * Sizes default to 8 B .. 256 MiB by factor 2 and take K/M/G suffixes
 * (powers of 2). Bytes follow nccl-tests: the whole buffer for allreduce,
 * broadcast and reduce; the receive buffer (world * sendcount) for
 * allgather; the send buffer (world * recvcount) for reduce_scatter and
 * alltoall. Where a size is not a multiple of world * 4 it is rounded down
 * (but to at least one float per rank, so at N=8 the smallest allgather,
 * reduce_scatter and alltoall row is 32 B) and sizes that round to an
 * already measured one are skipped: a row's bytes are the bytes moved.
 * float32, MPI_SUM, root 0.
 *
 * Per size: one checked call (inputs from a pattern, every rank verifies its
 * output), WARMUP untimed calls, a barrier, then ITERS timed calls. The time
 * is the max over ranks of each rank's mean per-call time. Without -n the
 * count scales with size (2^30 / bytes, clamped to [3, 1000]) and is cut so
 * the timed loop takes about BUDGET_S seconds (default 0.5), judged from the
 * slowest rank's warm-up, but never below 3. One line per size on rank 0:
 *   mpi coll=C n=N bytes=B time_us=T algbw_GBs=A busbw_GBs=X
 * busbw = algbw * 2(n-1)/n (allreduce), (n-1)/n (allgather, reduce_scatter,
 * alltoall), 1 (broadcast, reduce). barrier prints one line with bytes=0.
 * A failed check goes to stderr and makes the exit status 1.
 */
#include <mpi.h>

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum coll { ALLREDUCE, ALLGATHER, REDUCE_SCATTER, BROADCAST, REDUCE, ALLTOALL, BARRIER, NCOLLS };

static const char *const coll_names[NCOLLS] = {
    "allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall", "barrier",
};

#define ESIZE sizeof(float)
#define PERIOD 13 /* the check pattern repeats with this period */
#define ROOT 0

struct opts {
    enum coll coll;
    size_t minbytes, maxbytes;
    size_t factor;
    long iters;  /* 0: scaled by size and budget */
    long warmup; /* -1: scaled by iters */
    double budget_s;
    int check;
};

/* Element counts of one size: per-rank send and receive, and the bytes the
 * row reports. */
struct shape {
    size_t send, recv, block, bytes;
};

static int rank, world;

static void die(const char *fmt, const char *arg)
{
    if (rank == 0) {
        fprintf(stderr, "mpi_colls: ");
        fprintf(stderr, fmt, arg);
        fprintf(stderr, "\n");
    }
    MPI_Finalize();
    exit(2);
}

static size_t parse_size(const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = 0;
    if (errno || end == s)
        die("bad size '%s'", s);
    switch (*end) {
    case 'K': case 'k': shift = 10; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
    default: break;
    }
    if (*end != '\0' || v > (ULLONG_MAX >> shift))
        die("bad size '%s'", s);
    return (size_t)(v << shift);
}

static long parse_long(const char *s, long lo)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo)
        die("bad number '%s'", s);
    return v;
}

static void parse(int argc, char **argv, struct opts *o)
{
    int c;
    *o = (struct opts){.minbytes = 8, .maxbytes = (size_t)256 << 20, .factor = 2,
                       .iters = 0, .warmup = -1, .budget_s = 0.5, .check = 1};
    while ((c = getopt(argc, argv, "f:n:w:t:c:h")) != -1) {
        switch (c) {
        case 'f': o->factor = (size_t)parse_long(optarg, 2); break;
        case 'n': o->iters = parse_long(optarg, 1); break;
        case 'w': o->warmup = parse_long(optarg, 0); break;
        case 't': {
            char *end;
            o->budget_s = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || !(o->budget_s >= 0))
                die("bad budget '%s'", optarg);
            break;
        }
        case 'c': o->check = (int)parse_long(optarg, 0); break;
        default:
            die("%s", "usage: mpi_colls [-f F] [-n ITERS] [-w WARMUP] [-t BUDGET_S] [-c 0|1] "
                      "COLL [MINBYTES [MAXBYTES]]");
        }
    }
    if (optind >= argc)
        die("%s", "missing COLL (allreduce allgather reduce_scatter broadcast reduce alltoall barrier)");
    o->coll = NCOLLS;
    for (int i = 0; i < NCOLLS; i++)
        if (strcmp(argv[optind], coll_names[i]) == 0)
            o->coll = (enum coll)i;
    if (o->coll == NCOLLS)
        die("unknown collective '%s'", argv[optind]);
    if (optind + 1 < argc)
        o->minbytes = o->maxbytes = parse_size(argv[optind + 1]);
    if (optind + 2 < argc)
        o->maxbytes = parse_size(argv[optind + 2]);
    if (optind + 3 < argc)
        die("unexpected argument '%s'", argv[optind + 3]);
    if (o->minbytes < 1 || o->minbytes > o->maxbytes)
        die("%s", "need 1 <= MINBYTES <= MAXBYTES");
    if (o->maxbytes / ESIZE > (size_t)INT_MAX)
        die("%s", "MAXBYTES too large for int counts");
}

static struct shape shape_of(enum coll c, size_t nominal)
{
    struct shape s = {0, 0, 0, 0};
    size_t n = (size_t)world;
    switch (c) {
    case ALLREDUCE: case BROADCAST: case REDUCE:
        s.block = s.send = s.recv = nominal / ESIZE ? nominal / ESIZE : 1;
        s.bytes = s.send * ESIZE;
        break;
    case ALLGATHER:
        s.block = nominal / ESIZE / n ? nominal / ESIZE / n : 1;
        s.send = s.block;
        s.recv = n * s.block;
        s.bytes = s.recv * ESIZE;
        break;
    case REDUCE_SCATTER:
        s.block = nominal / ESIZE / n ? nominal / ESIZE / n : 1;
        s.send = n * s.block;
        s.recv = s.block;
        s.bytes = s.send * ESIZE;
        break;
    case ALLTOALL:
        s.block = nominal / ESIZE / n ? nominal / ESIZE / n : 1;
        s.send = s.recv = n * s.block;
        s.bytes = s.send * ESIZE;
        break;
    default:
        break;
    }
    return s;
}

static double busbw_factor(enum coll c)
{
    double n = world;
    switch (c) {
    case ALLREDUCE: return 2.0 * (n - 1) / n;
    case ALLGATHER: case REDUCE_SCATTER: case ALLTOALL: return (n - 1) / n;
    default: return 1.0;
    }
}

/* Rank r's contribution at index i, and the sum over all ranks. */
static float val(int r, size_t i) { return (float)(((size_t)r * 7 + i) % PERIOD); }
/* alltoall: what src sends to dst at index j of dst's block. */
static float a2a(int src, int dst, size_t j) { return (float)(((size_t)src * 5 + (size_t)dst * 3 + j) % PERIOD); }

static float sums[PERIOD];

static void fill_inputs(enum coll c, const struct shape *s, float *send, float *recv)
{
    for (size_t i = 0; i < s->recv; i++)
        recv[i] = -1.0f;
    if (c == ALLTOALL) {
        for (int d = 0; d < world; d++)
            for (size_t j = 0; j < s->block; j++)
                send[(size_t)d * s->block + j] = a2a(rank, d, j);
    } else if (c == BROADCAST) {
        if (rank == ROOT)
            for (size_t i = 0; i < s->recv; i++)
                recv[i] = val(ROOT, i);
    } else {
        for (size_t i = 0; i < s->send; i++)
            send[i] = val(rank, i);
    }
}

/* Wrong elements in this rank's output after one call on fill_inputs(). */
static size_t count_wrong(enum coll c, const struct shape *s, const float *recv)
{
    size_t wrong = 0;
    switch (c) {
    case ALLREDUCE:
        for (size_t i = 0; i < s->recv; i++)
            wrong += recv[i] != sums[i % PERIOD];
        break;
    case REDUCE:
        if (rank == ROOT)
            for (size_t i = 0; i < s->recv; i++)
                wrong += recv[i] != sums[i % PERIOD];
        break;
    case REDUCE_SCATTER:
        for (size_t j = 0; j < s->block; j++)
            wrong += recv[j] != sums[((size_t)rank * s->block + j) % PERIOD];
        break;
    case ALLGATHER:
        for (int r = 0; r < world; r++)
            for (size_t j = 0; j < s->block; j++)
                wrong += recv[(size_t)r * s->block + j] != val(r, j);
        break;
    case BROADCAST:
        for (size_t i = 0; i < s->recv; i++)
            wrong += recv[i] != val(ROOT, i);
        break;
    case ALLTOALL:
        for (int r = 0; r < world; r++)
            for (size_t j = 0; j < s->block; j++)
                wrong += recv[(size_t)r * s->block + j] != a2a(r, rank, j);
        break;
    default:
        break;
    }
    return wrong;
}

static void call(enum coll c, const struct shape *s, float *send, float *recv)
{
    MPI_Comm w = MPI_COMM_WORLD;
    switch (c) {
    case ALLREDUCE: MPI_Allreduce(send, recv, (int)s->send, MPI_FLOAT, MPI_SUM, w); break;
    case ALLGATHER: MPI_Allgather(send, (int)s->block, MPI_FLOAT, recv, (int)s->block, MPI_FLOAT, w); break;
    case REDUCE_SCATTER: MPI_Reduce_scatter_block(send, recv, (int)s->block, MPI_FLOAT, MPI_SUM, w); break;
    case BROADCAST: MPI_Bcast(recv, (int)s->recv, MPI_FLOAT, ROOT, w); break;
    case REDUCE: MPI_Reduce(send, recv, (int)s->send, MPI_FLOAT, MPI_SUM, ROOT, w); break;
    case ALLTOALL: MPI_Alltoall(send, (int)s->block, MPI_FLOAT, recv, (int)s->block, MPI_FLOAT, w); break;
    case BARRIER: MPI_Barrier(w); break;
    default: break;
    }
}

static double max_over_ranks(double v)
{
    double m;
    MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

/* Measures one size; returns the number of wrong elements over all ranks. */
static unsigned long long run_size(const struct opts *o, const struct shape *s)
{
    size_t bytes = s->bytes ? s->bytes : 1;
    float *send = malloc((s->send ? s->send : 1) * ESIZE);
    float *recv = malloc((s->recv ? s->recv : 1) * ESIZE);
    unsigned long long wrong = 0, total = 0;
    long iters = o->iters, warmup = o->warmup;
    double t0, t;

    if (send == NULL || recv == NULL) {
        fprintf(stderr, "mpi_colls: rank %d: out of memory at %zu bytes\n", rank, s->bytes);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    /* Touch every page before timing, and check one call. */
    fill_inputs(o->coll, s, send, recv);
    if (o->check) {
        MPI_Barrier(MPI_COMM_WORLD);
        call(o->coll, s, send, recv);
        wrong = count_wrong(o->coll, s, recv);
    }
    if (iters == 0) {
        long scaled = (long)(((size_t)1 << 30) / bytes);
        iters = scaled < 3 ? 3 : (scaled > 1000 ? 1000 : scaled);
    }
    if (warmup < 0)
        warmup = iters / 10 < 1 ? 1 : (iters / 10 > 20 ? 20 : iters / 10);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (long i = 0; i < warmup; i++)
        call(o->coll, s, send, recv);
    t = max_over_ranks((MPI_Wtime() - t0) / (double)(warmup ? warmup : 1));
    if (o->iters == 0 && warmup > 0 && t * (double)iters > o->budget_s) {
        long fit = (long)(o->budget_s / t);
        iters = fit < 3 ? 3 : fit;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (long i = 0; i < iters; i++)
        call(o->coll, s, send, recv);
    t = max_over_ranks((MPI_Wtime() - t0) / (double)iters);
    MPI_Reduce(&wrong, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, ROOT, MPI_COMM_WORLD);
    if (rank == 0) {
        double algbw = (double)s->bytes / t / 1e9;
        printf("mpi coll=%s n=%d bytes=%zu time_us=%.1f algbw_GBs=%.3f busbw_GBs=%.3f\n",
               coll_names[o->coll], world, s->bytes, t * 1e6, algbw,
               algbw * busbw_factor(o->coll));
        fflush(stdout);
        if (total)
            fprintf(stderr, "mpi_colls: CHECK FAILED coll=%s n=%d bytes=%zu wrong=%llu\n",
                    coll_names[o->coll], world, s->bytes, total);
    }
    free(send);
    free(recv);
    return total;
}

int main(int argc, char **argv)
{
    struct opts o;
    unsigned long long wrong = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    parse(argc, argv, &o);
    for (int r = 0; r < world; r++)
        for (size_t i = 0; i < PERIOD; i++)
            sums[i] += val(r, i);

    if (o.coll == BARRIER) {
        struct shape s = {0, 0, 0, 0};
        wrong += run_size(&o, &s);
    } else {
        size_t last = 0;
        for (size_t b = o.minbytes; b <= o.maxbytes; b *= o.factor) {
            struct shape s = shape_of(o.coll, b);
            if (s.bytes != last)
                wrong += run_size(&o, &s);
            last = s.bytes;
            if (b > o.maxbytes / o.factor)
                break;
        }
    }
    MPI_Finalize();
    return wrong ? 1 : 0;
}
