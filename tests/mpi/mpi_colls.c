/* mpi_colls: checks every collective of the MPI subset, element by element.
 *
 * An ordinary MPI program (mpi.h only): run it as `eccl-run -np N mpi_colls
 * N`, or alone as `mpi_colls 1`. Each collective runs over several types,
 * ops, counts (small ones and ones past 64 KiB, which eccl moves by
 * another algorithm), roots and in place; every received element is
 * compared with what the rank computes on its own from the inputs every
 * rank is known to have sent. Exits non-zero, after naming each wrong
 * value, if any rank saw one.
 */
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int rank, size, failures;

#define MAX_REPORTS 20

static void failf(const char *what, long long index, double got, double want)
{
    if (failures++ < MAX_REPORTS)
        fprintf(stderr, "mpi_colls: rank %d of %d: %s: element %lld is %.17g, want %.17g\n", rank,
                size, what, index, got, want);
}

static void check(int ok, const char *what)
{
    if (!ok && failures++ < MAX_REPORTS)
        fprintf(stderr, "mpi_colls: rank %d of %d: %s\n", rank, size, what);
}

/* ---- typed elements ---------------------------------------------------------- */

struct type_desc {
    MPI_Datatype type;
    const char *name;
    size_t size;
    int is_signed;
    int is_float;
};

static const struct type_desc types[] = {
    {MPI_CHAR, "MPI_CHAR", 1, (char)-1 < 0, 0},
    {MPI_SIGNED_CHAR, "MPI_SIGNED_CHAR", 1, 1, 0},
    {MPI_UNSIGNED_CHAR, "MPI_UNSIGNED_CHAR", 1, 0, 0},
    {MPI_SHORT, "MPI_SHORT", sizeof(short), 1, 0},
    {MPI_UNSIGNED_SHORT, "MPI_UNSIGNED_SHORT", sizeof(unsigned short), 0, 0},
    {MPI_INT, "MPI_INT", sizeof(int), 1, 0},
    {MPI_UNSIGNED, "MPI_UNSIGNED", sizeof(unsigned), 0, 0},
    {MPI_LONG, "MPI_LONG", sizeof(long), 1, 0},
    {MPI_UNSIGNED_LONG, "MPI_UNSIGNED_LONG", sizeof(unsigned long), 0, 0},
    {MPI_LONG_LONG, "MPI_LONG_LONG", sizeof(long long), 1, 0},
    {MPI_UNSIGNED_LONG_LONG, "MPI_UNSIGNED_LONG_LONG", sizeof(unsigned long long), 0, 0},
    {MPI_FLOAT, "MPI_FLOAT", sizeof(float), 1, 1},
    {MPI_DOUBLE, "MPI_DOUBLE", sizeof(double), 1, 1},
    {MPI_INT8_T, "MPI_INT8_T", 1, 1, 0},
    {MPI_INT16_T, "MPI_INT16_T", 2, 1, 0},
    {MPI_INT32_T, "MPI_INT32_T", 4, 1, 0},
    {MPI_INT64_T, "MPI_INT64_T", 8, 1, 0},
    {MPI_UINT8_T, "MPI_UINT8_T", 1, 0, 0},
    {MPI_UINT16_T, "MPI_UINT16_T", 2, 0, 0},
    {MPI_UINT32_T, "MPI_UINT32_T", 4, 0, 0},
    {MPI_UINT64_T, "MPI_UINT64_T", 8, 0, 0},
};
#define NTYPES (sizeof types / sizeof types[0])

/* Values stay small (|v| <= 127 for every reduction with 4 ranks) so that
 * every type holds every partial result exactly. */
static void store(const struct type_desc *t, void *buf, size_t i, long long v)
{
    char *p = (char *)buf + i * t->size;

    if (t->is_float) {
        if (t->size == sizeof(float)) {
            float f = (float)v;
            memcpy(p, &f, sizeof f);
        } else {
            double d = (double)v;
            memcpy(p, &d, sizeof d);
        }
        return;
    }
    switch (t->size) {
    case 1: { int8_t x = (int8_t)v; memcpy(p, &x, 1); break; }
    case 2: { int16_t x = (int16_t)v; memcpy(p, &x, 2); break; }
    case 4: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    default: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
    }
}

static long long load(const struct type_desc *t, const void *buf, size_t i)
{
    const char *p = (const char *)buf + i * t->size;

    if (t->is_float) {
        if (t->size == sizeof(float)) {
            float f;
            memcpy(&f, p, sizeof f);
            return (long long)f;
        }
        double d;
        memcpy(&d, p, sizeof d);
        return (long long)d;
    }
    switch (t->size) {
    case 1: {
        if (t->is_signed) { int8_t x; memcpy(&x, p, 1); return x; }
        uint8_t x; memcpy(&x, p, 1); return x;
    }
    case 2: {
        if (t->is_signed) { int16_t x; memcpy(&x, p, 2); return x; }
        uint16_t x; memcpy(&x, p, 2); return x;
    }
    case 4: {
        if (t->is_signed) { int32_t x; memcpy(&x, p, 4); return x; }
        uint32_t x; memcpy(&x, p, 4); return x;
    }
    default: {
        int64_t x;
        memcpy(&x, p, 8);
        return (long long)x;
    }
    }
}

/* Rank r's element i for a reduction by op: products stay within
 * 2^ranks, sums within 8 * ranks, min/max operands are distinct enough to
 * tell which rank's value won, and negative where the type allows. */
static long long input(const struct type_desc *t, MPI_Op op, int r, size_t i)
{
    if (op == MPI_PROD)
        return 1 + (long long)((i + (size_t)r) % 2);
    if (op == MPI_SUM)
        return (long long)((size_t)(r + 1) * (i % 7 + 1)) % 9 - (t->is_signed ? 4 : 0);
    return (long long)((i * 3 + (size_t)r * 5) % 11) - (t->is_signed ? 5 : 0);
}

static long long expected(const struct type_desc *t, MPI_Op op, size_t i)
{
    long long acc = input(t, op, 0, i);

    for (int r = 1; r < size; r++) {
        long long v = input(t, op, r, i);

        if (op == MPI_SUM)
            acc += v;
        else if (op == MPI_PROD)
            acc *= v;
        else if (op == MPI_MIN)
            acc = v < acc ? v : acc;
        else
            acc = v > acc ? v : acc;
    }
    return acc;
}

static const MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};
static const char *const op_names[] = {"MPI_SUM", "MPI_PROD", "MPI_MIN", "MPI_MAX"};
#define NOPS 4

/* Past 64 KiB for every type of 2 bytes or more: eccl's ring path. */
static const int counts[] = {1, 13, 40000};
#define NCOUNTS 3

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes != 0 ? bytes : 1);

    if (p == NULL) {
        fprintf(stderr, "mpi_colls: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

static void label(char *buf, size_t len, const char *call, const struct type_desc *t, int op,
                  int count, int in_place)
{
    snprintf(buf, len, "%s %s %s count %d%s", call, t->name, op >= 0 ? op_names[op] : "", count,
             in_place ? " in place" : "");
}

/* ---- reductions ------------------------------------------------------------ */

static void test_allreduce(void)
{
    char what[160];

    for (size_t ti = 0; ti < NTYPES; ti++)
        for (int o = 0; o < NOPS; o++)
            for (int c = 0; c < NCOUNTS; c++)
                for (int in_place = 0; in_place < 2; in_place++) {
                    const struct type_desc *t = &types[ti];
                    size_t n = (size_t)counts[c];
                    char *send = xmalloc(n * t->size), *recv = xmalloc(n * t->size);

                    label(what, sizeof what, "MPI_Allreduce", t, o, counts[c], in_place);
                    for (size_t i = 0; i < n; i++)
                        store(t, in_place ? recv : send, i, input(t, ops[o], rank, i));
                    MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, counts[c], t->type, ops[o],
                                  MPI_COMM_WORLD);
                    for (size_t i = 0; i < n; i++) {
                        long long got = load(t, recv, i), want = expected(t, ops[o], i);
                        if (got != want)
                            failf(what, (long long)i, (double)got, (double)want);
                    }
                    free(send);
                    free(recv);
                }
}

static void test_reduce(void)
{
    static const size_t picks[] = {5, 12, 1}; /* MPI_INT, MPI_DOUBLE, MPI_SIGNED_CHAR */
    char what[160];

    for (int root = 0; root < size; root++)
        for (size_t k = 0; k < sizeof picks / sizeof picks[0]; k++)
            for (int o = 0; o < NOPS; o++)
                for (int in_place = 0; in_place < 2; in_place++) {
                    const struct type_desc *t = &types[picks[k]];
                    int count = counts[(root + o) % NCOUNTS];
                    size_t n = (size_t)count;
                    int at_root = rank == root;
                    char *send = xmalloc(n * t->size), *recv = xmalloc(n * t->size);

                    label(what, sizeof what, "MPI_Reduce", t, o, count, in_place && at_root);
                    for (size_t i = 0; i < n; i++) {
                        store(t, in_place && at_root ? recv : send, i, input(t, ops[o], rank, i));
                    }
                    /* recvbuf matters at the root only: the others pass NULL. */
                    MPI_Reduce(in_place && at_root ? MPI_IN_PLACE : send, at_root ? recv : NULL,
                               count, t->type, ops[o], root, MPI_COMM_WORLD);
                    for (size_t i = 0; at_root && i < n; i++) {
                        long long got = load(t, recv, i), want = expected(t, ops[o], i);
                        if (got != want)
                            failf(what, (long long)i, (double)got, (double)want);
                    }
                    free(send);
                    free(recv);
                }
}

static void test_reduce_scatter_block(void)
{
    static const size_t picks[] = {5, 12, 17, 10}; /* INT, DOUBLE, UINT8_T, ULL */
    static const int blocks[] = {1, 7, 20000};
    char what[160];

    for (size_t k = 0; k < sizeof picks / sizeof picks[0]; k++)
        for (int o = 0; o < NOPS; o++)
            for (int b = 0; b < 3; b++)
                for (int in_place = 0; in_place < 2; in_place++) {
                    const struct type_desc *t = &types[picks[k]];
                    size_t n = (size_t)blocks[b], total = n * (size_t)size;
                    char *send = xmalloc(total * t->size), *recv = xmalloc(total * t->size);

                    label(what, sizeof what, "MPI_Reduce_scatter_block", t, o, blocks[b],
                          in_place);
                    for (size_t i = 0; i < total; i++)
                        store(t, in_place ? recv : send, i, input(t, ops[o], rank, i));
                    MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : send, recv, blocks[b],
                                             t->type, ops[o], MPI_COMM_WORLD);
                    for (size_t i = 0; i < n; i++) {
                        size_t g = (size_t)rank * n + i;
                        long long got = load(t, recv, i), want = expected(t, ops[o], g);
                        if (got != want)
                            failf(what, (long long)i, (double)got, (double)want);
                    }
                    free(send);
                    free(recv);
                }
}

static void test_reduce_scatter(void)
{
    static const size_t picks[] = {5, 11}; /* MPI_INT, MPI_FLOAT */
    char what[160];
    int *rcounts = xmalloc((size_t)size * sizeof *rcounts);

    for (int shape = 0; shape < 3; shape++) {
        size_t total = 0, mine_off = 0;

        /* Uneven with an empty block, uneven and large, and even. */
        for (int r = 0; r < size; r++) {
            rcounts[r] = shape == 0 ? r : shape == 1 ? 9000 + 1000 * r : 6;
            if (r < rank)
                mine_off += (size_t)rcounts[r];
            total += (size_t)rcounts[r];
        }
        for (size_t k = 0; k < sizeof picks / sizeof picks[0]; k++)
            for (int o = 0; o < NOPS; o++)
                for (int in_place = 0; in_place < 2; in_place++) {
                    const struct type_desc *t = &types[picks[k]];
                    char *send = xmalloc(total * t->size), *recv = xmalloc(total * t->size);

                    label(what, sizeof what, "MPI_Reduce_scatter", t, o, rcounts[rank], in_place);
                    for (size_t i = 0; i < total; i++)
                        store(t, in_place ? recv : send, i, input(t, ops[o], rank, i));
                    MPI_Reduce_scatter(in_place ? MPI_IN_PLACE : send, recv, rcounts, t->type,
                                       ops[o], MPI_COMM_WORLD);
                    for (size_t i = 0; i < (size_t)rcounts[rank]; i++) {
                        long long got = load(t, recv, i), want = expected(t, ops[o], mine_off + i);
                        if (got != want)
                            failf(what, (long long)i, (double)got, (double)want);
                    }
                    free(send);
                    free(recv);
                }
    }
    free(rcounts);
}

/* ---- data movement --------------------------------------------------------- */

/* The byte rank `from` contributes at position i (addressed to `to` where
 * that matters): every byte tells sender, receiver and position apart. */
static unsigned char pattern(int from, int to, size_t i)
{
    return (unsigned char)(from * 67 + to * 29 + (int)(i * 13 % 251) + 1);
}

static void check_bytes(const char *what, const unsigned char *got, int from, int to, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != pattern(from, to, i)) {
            failf(what, (long long)i, got[i], pattern(from, to, i));
            return;
        }
}

#define GUARD 0xa5

static void check_guard(const char *what, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != GUARD) {
            failf(what, (long long)i, p[i], GUARD);
            return;
        }
}

static void test_bcast(void)
{
    static const int sizes[] = {0, 1, 1000, 300000};
    char what[160];

    for (int root = 0; root < size; root++)
        for (int s = 0; s < 4; s++) {
            size_t n = (size_t)sizes[s];
            unsigned char *buf = xmalloc(n + 1);

            snprintf(what, sizeof what, "MPI_Bcast root %d bytes %zu", root, n);
            for (size_t i = 0; i < n; i++)
                buf[i] = rank == root ? pattern(root, 0, i) : 0;
            buf[n] = GUARD;
            MPI_Bcast(buf, sizes[s], MPI_BYTE, root, MPI_COMM_WORLD);
            check_bytes(what, buf, root, 0, n);
            check_guard(what, buf + n, 1);
            free(buf);
        }
    /* Typed: doubles from the last rank. */
    {
        double v[5];
        for (int i = 0; i < 5; i++)
            v[i] = rank == size - 1 ? 0.5 + i : -1.0;
        MPI_Bcast(v, 5, MPI_DOUBLE, size - 1, MPI_COMM_WORLD);
        for (int i = 0; i < 5; i++)
            if (v[i] != 0.5 + i)
                failf("MPI_Bcast MPI_DOUBLE", i, v[i], 0.5 + i);
    }
}

static void test_allgather(void)
{
    static const int ints[] = {1, 5, 20000};
    char what[160];

    for (int c = 0; c < 3; c++)
        for (int mode = 0; mode < 3; mode++) {
            /* mode 0: out of place, 1: in place, 2: sent as MPI_INT and
             * received as MPI_BYTE (same bytes, other type signature). */
            size_t block = (size_t)ints[c] * sizeof(int), all = block * (size_t)size;
            unsigned char *send = xmalloc(block), *recv = xmalloc(all + 1);

            snprintf(what, sizeof what, "MPI_Allgather ints %d mode %d", ints[c], mode);
            memset(recv, 0, all);
            recv[all] = GUARD;
            for (size_t i = 0; i < block; i++)
                (mode == 1 ? recv + (size_t)rank * block : send)[i] = pattern(rank, 0, i);
            if (mode == 2)
                MPI_Allgather(send, ints[c], MPI_INT, recv, (int)block, MPI_BYTE, MPI_COMM_WORLD);
            else
                MPI_Allgather(mode == 1 ? MPI_IN_PLACE : send, ints[c], MPI_INT, recv, ints[c],
                              MPI_INT, MPI_COMM_WORLD);
            for (int r = 0; r < size; r++)
                check_bytes(what, recv + (size_t)r * block, r, 0, block);
            check_guard(what, recv + all, 1);
            free(send);
            free(recv);
        }
}

static void test_allgatherv(void)
{
    int *rcounts = xmalloc((size_t)size * sizeof *rcounts);
    int *displs = xmalloc((size_t)size * sizeof *displs);
    char what[160];

    for (int shape = 0; shape < 4; shape++)
        for (int in_place = 0; in_place < 2; in_place++) {
            int lo = 0, end = 0;
            unsigned char *send, *alloc, *recv;

            /* Uneven with gaps and an empty block; large, uneven, in
             * reverse order; the regular layout of an all-gather; and
             * blocks before recvbuf (negative displacements, which MPI
             * allows). */
            for (int r = 0; r < size; r++) {
                int rr = size - 1 - r;
                rcounts[r] = shape == 0 ? r * 3 : shape == 1 ? 70000 + r : shape == 2 ? 11 : 5;
                displs[r] = shape == 0 ? r * 3 * (r + 1) / 2 + 2 * r + 1
                          : shape == 1 ? rr * 70010 : shape == 2 ? r * 11 : -6 * (r + 1);
            }
            for (int r = 0; r < size; r++) {
                lo = displs[r] < lo ? displs[r] : lo;
                end = displs[r] + rcounts[r] > end ? displs[r] + rcounts[r] : end;
            }
            send = xmalloc((size_t)rcounts[rank]);
            alloc = xmalloc((size_t)(end - lo) + 1);
            recv = alloc - lo;
            memset(alloc, GUARD, (size_t)(end - lo) + 1);
            snprintf(what, sizeof what, "MPI_Allgatherv shape %d%s", shape,
                     in_place ? " in place" : "");
            for (size_t i = 0; i < (size_t)rcounts[rank]; i++)
                (in_place ? recv + displs[rank] : send)[i] = pattern(rank, 0, i);
            MPI_Allgatherv(in_place ? MPI_IN_PLACE : send, rcounts[rank], MPI_UNSIGNED_CHAR, recv,
                           rcounts, displs, MPI_UNSIGNED_CHAR, MPI_COMM_WORLD);
            for (int r = 0; r < size; r++)
                check_bytes(what, recv + displs[r], r, 0, (size_t)rcounts[r]);
            /* Bytes no block covers keep what they held. */
            for (int i = lo; i <= end; i++) {
                int covered = 0;
                for (int r = 0; r < size; r++)
                    covered |= i >= displs[r] && i < displs[r] + rcounts[r];
                if (!covered && recv[i] != GUARD) {
                    failf(what, i, recv[i], GUARD);
                    break;
                }
            }
            free(send);
            free(alloc);
        }
    free(rcounts);
    free(displs);
}

static void test_alltoall(void)
{
    static const int doubles[] = {1, 3, 5000};
    char what[160];

    for (int c = 0; c < 3; c++)
        for (int in_place = 0; in_place < 2; in_place++) {
            size_t block = (size_t)doubles[c] * sizeof(double), all = block * (size_t)size;
            unsigned char *send = xmalloc(all), *recv = xmalloc(all + 1);

            snprintf(what, sizeof what, "MPI_Alltoall doubles %d%s", doubles[c],
                     in_place ? " in place" : "");
            recv[all] = GUARD;
            for (int d = 0; d < size; d++)
                for (size_t i = 0; i < block; i++)
                    (in_place ? recv : send)[(size_t)d * block + i] = pattern(rank, d, i);
            MPI_Alltoall(in_place ? MPI_IN_PLACE : send, doubles[c], MPI_DOUBLE, recv, doubles[c],
                         MPI_DOUBLE, MPI_COMM_WORLD);
            for (int r = 0; r < size; r++)
                check_bytes(what, recv + (size_t)r * block, r, rank, block);
            check_guard(what, recv + all, 1);
            free(send);
            free(recv);
        }
}

/* Elements rank `from` sends to rank `to` in shape s. */
static int v_count(int shape, int from, int to)
{
    return shape == 0 ? (from + to) % 3 : shape == 1 ? 3000 * (from + 1) + to : 4;
}

static void test_alltoallv(void)
{
    size_t n = (size_t)size;
    int *scounts = xmalloc(n * sizeof(int)), *sdispls = xmalloc(n * sizeof(int));
    int *rcounts = xmalloc(n * sizeof(int)), *rdispls = xmalloc(n * sizeof(int));
    char what[160];

    /* shift: the displacements are counted from the end of the buffers,
     * all negative (MPI allows it; eccl's may not be). */
    for (int shape = 0; shape < 3; shape++)
        for (int in_place = 0; in_place < 2; in_place++)
            for (int shift = 0; shift < 2; shift++) {
                int send_end = 0, recv_end = 0;
                short *send, *recv, *sbase, *rbase;

                /* In place, MPI takes the data from recvbuf laid out by
                 * rcounts/rdispls: only a symmetric exchange can be (shape
                 * 1 is not). */
                if (in_place && shape == 1)
                    continue;
                /* Blocks in reverse order with a gap of 2 before each. */
                for (int d = size - 1; d >= 0; d--) {
                    scounts[d] = v_count(shape, rank, d);
                    sdispls[d] = send_end + 2;
                    send_end = sdispls[d] + scounts[d];
                    rcounts[d] = v_count(shape, d, rank);
                    rdispls[d] = recv_end + 2;
                    recv_end = rdispls[d] + rcounts[d];
                }
                send = xmalloc((size_t)send_end * sizeof *send);
                recv = xmalloc((size_t)recv_end * sizeof *recv);
                sbase = send;
                rbase = recv;
                if (shift) {
                    for (int d = 0; d < size; d++) {
                        sdispls[d] -= send_end;
                        rdispls[d] -= recv_end;
                    }
                    sbase = send + send_end;
                    rbase = recv + recv_end;
                }
                for (int i = 0; i < recv_end; i++)
                    recv[i] = -1;
                snprintf(what, sizeof what, "MPI_Alltoallv shape %d%s%s", shape,
                         in_place ? " in place" : "", shift ? " negative displs" : "");
                for (int d = 0; d < size; d++)
                    for (int i = 0; i < scounts[d]; i++)
                        (in_place ? rbase + rdispls[d] : sbase + sdispls[d])[i] =
                            (short)(rank * 1000 + d * 100 + i % 97);
                if (in_place)
                    MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, rbase, rcounts,
                                  rdispls, MPI_SHORT, MPI_COMM_WORLD);
                else
                    MPI_Alltoallv(sbase, scounts, sdispls, MPI_SHORT, rbase, rcounts, rdispls,
                                  MPI_SHORT, MPI_COMM_WORLD);
                for (int r = 0; r < size; r++)
                    for (int i = 0; i < rcounts[r]; i++) {
                        short want = (short)(r * 1000 + rank * 100 + i % 97);
                        if (rbase[rdispls[r] + i] != want) {
                            failf(what, rdispls[r] + i, rbase[rdispls[r] + i], want);
                            break;
                        }
                    }
                for (int r = 0; r < size; r++)
                    if (rbase[rdispls[r] - 1] != -1 || rbase[rdispls[r] - 2] != -1)
                        check(0, "MPI_Alltoallv wrote into a gap between blocks");
                free(send);
                free(recv);
            }
    free(scounts);
    free(sdispls);
    free(rcounts);
    free(rdispls);
}

/* ---- the rest -------------------------------------------------------------- */

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Rank 0 arrives 300 ms late: nobody may leave the barrier before. */
static void test_barrier(void)
{
    const struct timespec late = {0, 300000000};
    double start, waited;

    MPI_Barrier(MPI_COMM_WORLD);
    start = now();
    if (rank == 0)
        nanosleep(&late, NULL);
    MPI_Barrier(MPI_COMM_WORLD);
    waited = now() - start;
    if (waited < 0.29)
        failf("MPI_Barrier left before rank 0 arrived (seconds)", 0, waited, 0.3);
}

static void test_environment(int expected_size)
{
    int flag = 0, len = 0, version = 0, subversion = 0, tsize = 0, count = -1;
    int *ranks = xmalloc((size_t)size * sizeof *ranks);
    char name[MPI_MAX_PROCESSOR_NAME], err[MPI_MAX_ERROR_STRING];
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Status status;
    double t0 = MPI_Wtime(), self = 0;

    check(size == expected_size, "MPI_Comm_size is not the size asked for");
    MPI_Initialized(&flag);
    check(flag == 1, "MPI_Initialized says no");
    MPI_Finalized(&flag);
    check(flag == 0, "MPI_Finalized says yes before MPI_Finalize");
    MPI_Get_version(&version, &subversion);
    check(version >= 2, "MPI_Get_version is below 2");
    MPI_Get_processor_name(name, &len);
    check(len > 0 && (size_t)len == strlen(name), "MPI_Get_processor_name");
    MPI_Error_string(MPI_ERR_TRUNCATE, err, &len);
    check(len > 0 && (size_t)len == strlen(err), "MPI_Error_string");
    MPI_Type_size(MPI_DOUBLE, &tsize);
    check(tsize == (int)sizeof(double), "MPI_Type_size(MPI_DOUBLE)");
    MPI_Type_size(MPI_SHORT, &tsize);
    check(tsize == (int)sizeof(short), "MPI_Type_size(MPI_SHORT)");
    MPI_Wait(&req, &status);
    MPI_Get_count(&status, MPI_INT, &count);
    check(req == MPI_REQUEST_NULL && count == 0, "MPI_Wait(MPI_REQUEST_NULL) empty status");
    check(MPI_Wtime() >= t0 && MPI_Wtick() > 0 && MPI_Wtick() < 1, "MPI_Wtime/MPI_Wtick");

    /* Ranks are 0..size-1, each exactly once. */
    MPI_Allgather(&rank, 1, MPI_INT, ranks, 1, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++)
        check(ranks[r] == r, "MPI_Allgather of the ranks is not 0..size-1");
    free(ranks);

    /* MPI_COMM_SELF: a world of one. */
    MPI_Comm_rank(MPI_COMM_SELF, &len);
    MPI_Comm_size(MPI_COMM_SELF, &tsize);
    check(len == 0 && tsize == 1, "MPI_COMM_SELF is not rank 0 of 1");
    {
        double mine = rank + 0.25;
        MPI_Allreduce(&mine, &self, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_SELF);
        check(self == mine, "MPI_Allreduce on MPI_COMM_SELF");
    }
}

int main(int argc, char **argv)
{
    int provided = -1, expected_size, total = 0;

    if (argc != 2 || (expected_size = atoi(argv[1])) < 1) {
        fprintf(stderr, "usage: mpi_colls EXPECTED_SIZE (run it under eccl-run -np N)\n");
        return 2;
    }
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check(provided >= MPI_THREAD_SINGLE && provided <= MPI_THREAD_MULTIPLE,
          "MPI_Init_thread: invalid provided level");

    test_environment(expected_size);
    test_barrier();
    test_allreduce();
    test_reduce();
    test_bcast();
    test_allgather();
    test_allgatherv();
    test_reduce_scatter_block();
    test_reduce_scatter();
    test_alltoall();
    test_alltoallv();

    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi_colls: %d ranks, %d wrong value(s)\n", size, total);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
