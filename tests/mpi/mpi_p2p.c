/* mpi_p2p: checks the point-to-point calls of the MPI subset, byte by byte.
 *
 * An ordinary MPI program (mpi.h only): run it as `eccl-run -np N mpi_p2p
 * N` (N >= 2), or alone as `mpi_p2p 1` (then only the messages to itself
 * and to MPI_PROC_NULL). Every byte received is compared with what its
 * sender is known to have sent (the pattern names sender, receiver, tag
 * and position), and every status with what MPI says it holds. Covered:
 * ring shifts both ways (MPI_Sendrecv, and MPI_Send before MPI_Recv for
 * eager messages), ping-pong of every size up to several MB between rank 0
 * and every other rank, MPI_Sendrecv both ways under one tag, several
 * messages of one tag in flight at once (received in the order sent),
 * receives posted in another order than the sends, receive buffers larger
 * than the message (MPI_Get_count), MPI_Waitall over an exchange with
 * every rank, MPI_Test, requests pending across collectives (MPI's
 * progress rule), messages to oneself in both communicators, and
 * MPI_PROC_NULL. Exits non-zero, after naming each wrong value, if any
 * rank saw one.
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int rank, size, failures;

#define MAX_REPORTS 20

static void failf(const char *fmt, const char *what, long long a, long long b)
{
    if (failures++ < MAX_REPORTS) {
        fprintf(stderr, "mpi_p2p: rank %d of %d: %s: ", rank, size, what);
        fprintf(stderr, fmt, a, b);
        fputc('\n', stderr);
    }
}

static void check(int ok, const char *what)
{
    if (!ok && failures++ < MAX_REPORTS)
        fprintf(stderr, "mpi_p2p: rank %d of %d: %s\n", rank, size, what);
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes != 0 ? bytes : 1);

    if (p == NULL) {
        fprintf(stderr, "mpi_p2p: out of memory (%zu bytes)\n", bytes);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

/* The byte `from` sends to `to` under `tag` at position i. */
static unsigned char pattern(int from, int to, int tag, size_t i)
{
    return (unsigned char)(from * 67 + to * 29 + tag * 7 + (int)(i * 13 % 251) + 1);
}

static void fill(unsigned char *buf, int from, int to, int tag, size_t n)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = pattern(from, to, tag, i);
}

static void check_bytes(const char *what, const unsigned char *got, int from, int to, int tag,
                        size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != pattern(from, to, tag, i)) {
            failf("byte %lld is %lld", what, (long long)i, got[i]);
            return;
        }
}

#define GUARD 0xa5

/* got: the received status must say (source, tag, bytes). */
static void check_status(const char *what, const MPI_Status *st, int source, int tag, int bytes)
{
    int count = -1;

    MPI_Get_count(st, MPI_BYTE, &count);
    if (st->MPI_SOURCE != source)
        failf("MPI_SOURCE %lld, want %lld", what, st->MPI_SOURCE, source);
    if (st->MPI_TAG != tag)
        failf("MPI_TAG %lld, want %lld", what, st->MPI_TAG, tag);
    if (count != bytes)
        failf("MPI_Get_count %lld bytes, want %lld", what, count, bytes);
}

static const int sizes[] = {0, 1, 2, 3, 8, 100, 239, 240, 241, 256, 1000, 4096, 65535, 65536,
                            65537, 1 << 20, (1 << 20) + 1, 3 << 20, (4 << 20) + 7, 8 << 20};
#define N_SIZES (int)(sizeof sizes / sizeof sizes[0])
#define MAX_SIZE (8 << 20)

/* ---- ring shifts -------------------------------------------------------------- */

static void test_ring_sendrecv(void)
{
    unsigned char *out = xmalloc(MAX_SIZE), *in = xmalloc(MAX_SIZE + 1);
    char what[128];

    for (int dir = 1; dir >= -1; dir -= 2) {
        int right = (rank + dir + size) % size, left = (rank - dir + size) % size;

        for (int s = 0; s < N_SIZES; s++) {
            int n = sizes[s], tag = 10 + s;
            MPI_Status st;

            snprintf(what, sizeof what, "ring shift %s, %d bytes", dir > 0 ? "up" : "down", n);
            fill(out, rank, right, tag, (size_t)n);
            in[n] = GUARD;
            MPI_Sendrecv(out, n, MPI_BYTE, right, tag, in, n + 1, MPI_BYTE, left, tag,
                         MPI_COMM_WORLD, &st);
            check_bytes(what, in, left, rank, tag, (size_t)n);
            check(in[n] == GUARD, "ring shift wrote past the message");
            check_status(what, &st, left, tag, n);
        }
    }
    free(out);
    free(in);
}

/* Every rank sends before it receives: only eager messages can, as under
 * any MPI. */
static void test_ring_send_first(void)
{
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    unsigned char out[240] = {0}, in[240] = {0};
    MPI_Status st;

    for (int n = 0; n <= 240; n += 60) {
        fill(out, rank, right, 3, (size_t)n);
        MPI_Send(out, n, MPI_BYTE, right, 3, MPI_COMM_WORLD);
        MPI_Recv(in, (int)sizeof in, MPI_BYTE, left, 3, MPI_COMM_WORLD, &st);
        check_bytes("ring shift, MPI_Send first", in, left, rank, 3, (size_t)n);
        check_status("ring shift, MPI_Send first", &st, left, 3, n);
    }
}

/* ---- ping-pong ------------------------------------------------------------------ */

static void test_pingpong(void)
{
    unsigned char *out = xmalloc(MAX_SIZE), *in = xmalloc(MAX_SIZE);
    char what[128];

    for (int peer = 1; peer < size; peer++) {
        if (rank != 0 && rank != peer)
            continue;
        for (int s = 0; s < N_SIZES; s++) {
            int n = sizes[s], other = rank == 0 ? peer : 0;
            MPI_Status st;

            snprintf(what, sizeof what, "ping-pong 0-%d, %d bytes", peer, n);
            fill(out, rank, other, 5, (size_t)n);
            if (rank == 0) {
                MPI_Send(out, n, MPI_BYTE, other, 5, MPI_COMM_WORLD);
                MPI_Recv(in, n, MPI_BYTE, other, 5, MPI_COMM_WORLD, &st);
            } else {
                MPI_Recv(in, n, MPI_BYTE, other, 5, MPI_COMM_WORLD, &st);
                MPI_Send(out, n, MPI_BYTE, other, 5, MPI_COMM_WORLD);
            }
            check_bytes(what, in, other, rank, 5, (size_t)n);
            check_status(what, &st, other, 5, n);
        }
    }
    free(out);
    free(in);
}

/* ---- pairs ---------------------------------------------------------------------------- */

/* This rank's partner in round `round` of a round-robin over the ranks
 * (the circle method), or -1 when it sits out. */
static int partner(int round)
{
    int n = size % 2 == 0 ? size : size + 1, p;

    if (rank == n - 1)
        p = round;
    else if (rank == round)
        p = n - 1;
    else
        p = ((2 * round - rank) % (n - 1) + (n - 1)) % (n - 1);
    return p >= size || p == rank ? -1 : p;
}

static int rounds(void)
{
    return size % 2 == 0 ? size - 1 : size;
}

/* Both ways with one tag, blocking: MPI_Sendrecv to and from the partner. */
static void test_sendrecv_one_tag(void)
{
    static const int ns[] = {4, 5000, (2 << 20) + 3};
    unsigned char *out = xmalloc((2 << 20) + 3), *in = xmalloc((2 << 20) + 3);

    for (int round = 0; round < rounds(); round++) {
        int p = partner(round);

        if (p < 0)
            continue;
        for (int k = 0; k < 3; k++) {
            MPI_Status st;

            fill(out, rank, p, 9, (size_t)ns[k]);
            MPI_Sendrecv(out, ns[k], MPI_BYTE, p, 9, in, ns[k], MPI_BYTE, p, 9, MPI_COMM_WORLD,
                         &st);
            check_bytes("MPI_Sendrecv both ways, one tag", in, p, rank, 9, (size_t)ns[k]);
            check_status("MPI_Sendrecv both ways, one tag", &st, p, 9, ns[k]);
        }
    }
    free(out);
    free(in);
}

/* Several messages of one tag in flight at once, each told apart by its
 * contents (the k-th carries tag 20 + k in its pattern), received in the
 * order sent; then receives posted first and completed in reverse. */
static void test_same_tag_in_flight(void)
{
    static const int ns[] = {100, 300000, 8, 2 << 20};
    unsigned char *out[4], *in[4];
    MPI_Request reqs[4];
    MPI_Status sts[4];

    for (int k = 0; k < 4; k++) {
        out[k] = xmalloc((size_t)ns[k]);
        in[k] = xmalloc((size_t)ns[k]);
    }
    for (int round = 0; round < rounds(); round++) {
        int p = partner(round);

        if (p < 0)
            continue;
        /* The lower rank sends, the higher receives; then the other way. */
        for (int turn = 0; turn < 2; turn++) {
            int sending = (rank < p) == (turn == 0);

            for (int k = 0; k < 4; k++)
                fill(out[k], rank, p, 20 + k, (size_t)ns[k]);
            if (sending) {
                for (int k = 0; k < 4; k++)
                    MPI_Isend(out[k], ns[k], MPI_BYTE, p, 1, MPI_COMM_WORLD, &reqs[k]);
                MPI_Waitall(4, reqs, MPI_STATUSES_IGNORE);
            } else if (turn == 0) {
                for (int k = 0; k < 4; k++) {
                    MPI_Recv(in[k], ns[k], MPI_BYTE, p, 1, MPI_COMM_WORLD, &sts[k]);
                    check_bytes("MPI_Isend x4, one tag, then MPI_Recv x4", in[k], p, rank,
                                20 + k, (size_t)ns[k]);
                    check_status("MPI_Isend x4, one tag, then MPI_Recv x4", &sts[k], p, 1,
                                 ns[k]);
                }
            } else {
                for (int k = 0; k < 4; k++)
                    MPI_Irecv(in[k], ns[k], MPI_BYTE, p, 1, MPI_COMM_WORLD, &reqs[k]);
                for (int k = 3; k >= 0; k--) {
                    MPI_Wait(&reqs[k], &sts[k]);
                    check(reqs[k] == MPI_REQUEST_NULL, "MPI_Wait left the request");
                    check_bytes("MPI_Irecv x4, one tag, waited in reverse", in[k], p, rank,
                                20 + k, (size_t)ns[k]);
                    check_status("MPI_Irecv x4, one tag, waited in reverse", &sts[k], p, 1,
                                 ns[k]);
                }
            }
        }
    }
    for (int k = 0; k < 4; k++) {
        free(out[k]);
        free(in[k]);
    }
}

/* Large messages under two tags, received in the other order than sent:
 * the first message's payload must not hold up the second. */
static void test_other_order(void)
{
    int n = 3 << 20;
    unsigned char *a = xmalloc((size_t)n), *b = xmalloc((size_t)n);

    for (int round = 0; round < rounds(); round++) {
        int p = partner(round);
        MPI_Request reqs[2];
        MPI_Status st;

        if (p < 0)
            continue;
        if (rank < p) {
            fill(a, rank, p, 31, (size_t)n);
            fill(b, rank, p, 32, (size_t)n);
            MPI_Isend(a, n, MPI_BYTE, p, 31, MPI_COMM_WORLD, &reqs[0]);
            MPI_Isend(b, n, MPI_BYTE, p, 32, MPI_COMM_WORLD, &reqs[1]);
            MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
        } else {
            MPI_Recv(b, n, MPI_BYTE, p, 32, MPI_COMM_WORLD, &st);
            check_bytes("tag 32 received before tag 31", b, p, rank, 32, (size_t)n);
            MPI_Recv(a, n, MPI_BYTE, p, 31, MPI_COMM_WORLD, &st);
            check_bytes("tag 31 received after tag 32", a, p, rank, 31, (size_t)n);
        }
        /* Many small ones under 5 tags, received tag by tag, last tag
         * first: their headers wait at the receiver. */
        if (rank < p) {
            unsigned char msg[16];

            for (int i = 0; i < 500; i++) {
                fill(msg, rank, p, 40 + i, sizeof msg);
                MPI_Send(msg, (int)sizeof msg, MPI_BYTE, p, 40 + i % 5, MPI_COMM_WORLD);
            }
        } else {
            unsigned char msg[16];

            for (int t = 4; t >= 0; t--)
                for (int i = t; i < 500; i += 5) {
                    MPI_Recv(msg, (int)sizeof msg, MPI_BYTE, p, 40 + t, MPI_COMM_WORLD, &st);
                    check_bytes("500 eager messages under 5 tags, received tag by tag", msg, p,
                                rank, 40 + i, sizeof msg);
                }
        }
    }
    free(a);
    free(b);
}

/* A receive buffer larger than the message; types that differ. */
static void test_larger_buffer(void)
{
    static const int ints[] = {0, 1, 60, 61, 100, 250000};
    int *out = xmalloc(1000000 * sizeof(int)), *in = xmalloc(1000000 * sizeof(int));

    for (int round = 0; round < rounds(); round++) {
        int p = partner(round);

        if (p < 0)
            continue;
        for (int k = 0; k < 6; k++) {
            MPI_Status st;
            int count = -1;

            for (int i = 0; i < ints[k]; i++)
                out[i] = rank * 1000003 + i;
            for (int i = 0; i < 1000000; i++)
                in[i] = -7;
            MPI_Sendrecv(out, ints[k], MPI_INT, p, 2, in, 1000000, MPI_INT, p, 2, MPI_COMM_WORLD,
                         &st);
            for (int i = 0; i < ints[k]; i++)
                if (in[i] != p * 1000003 + i) {
                    failf("element %lld is %lld", "larger receive buffer", i, in[i]);
                    break;
                }
            check(in[ints[k]] == -7, "a receive wrote past the message");
            MPI_Get_count(&st, MPI_INT, &count);
            if (count != ints[k])
                failf("MPI_Get_count says %lld ints, want %lld", "larger receive buffer", count,
                      ints[k]);
            MPI_Get_count(&st, MPI_DOUBLE, &count);
            if (ints[k] % 2 != 0 && count != MPI_UNDEFINED)
                failf("MPI_Get_count in doubles of %lld ints: %lld, want MPI_UNDEFINED",
                      "larger receive buffer", ints[k], count);
            check_status("larger receive buffer", &st, p, 2, ints[k] * (int)sizeof(int));
        }
        /* Sent as ints, received as bytes. */
        {
            MPI_Status st;

            for (int i = 0; i < 10; i++)
                out[i] = i * 3;
            MPI_Sendrecv(out, 10, MPI_INT, p, 4, in, 4000, MPI_BYTE, p, 4, MPI_COMM_WORLD, &st);
            check(memcmp(in, out, 10 * sizeof(int)) == 0, "MPI_INT sent, MPI_BYTE received");
            check_status("MPI_INT sent, MPI_BYTE received", &st, p, 4, 10 * (int)sizeof(int));
        }
    }
    free(out);
    free(in);
}

/* Every rank exchanges with every other at once: MPI_Irecv and MPI_Isend
 * to all, one MPI_Waitall. */
static void test_waitall_exchange(void)
{
    size_t n = (size_t)size;
    MPI_Request *reqs = xmalloc(2 * n * sizeof *reqs);
    MPI_Status *sts = xmalloc(2 * n * sizeof *sts);
    unsigned char **out = xmalloc(n * sizeof *out), **in = xmalloc(n * sizeof *in);

    for (int r = 0; r < size; r++) {
        size_t bytes = (size_t)(r == rank ? 0 : 1000 * (rank + 1) * (r + 1) + (r % 2) * 200000);
        size_t from = (size_t)(r == rank ? 0 : 1000 * (r + 1) * (rank + 1) + (rank % 2) * 200000);

        out[r] = xmalloc(bytes);
        in[r] = xmalloc(from + 10);
        fill(out[r], rank, r, 50, bytes);
        if (r == rank) {
            reqs[r] = reqs[n + (size_t)r] = MPI_REQUEST_NULL;
            continue;
        }
        MPI_Irecv(in[r], (int)from + 10, MPI_BYTE, r, 50, MPI_COMM_WORLD, &reqs[r]);
        MPI_Isend(out[r], (int)bytes, MPI_BYTE, r, 50, MPI_COMM_WORLD, &reqs[n + (size_t)r]);
    }
    MPI_Waitall(2 * size, reqs, sts);
    for (int r = 0; r < size; r++) {
        int from = r == rank ? 0 : 1000 * (r + 1) * (rank + 1) + (rank % 2) * 200000;

        check(reqs[r] == MPI_REQUEST_NULL && reqs[n + (size_t)r] == MPI_REQUEST_NULL,
              "MPI_Waitall left a request");
        if (r == rank) {
            check(sts[r].MPI_SOURCE == MPI_ANY_SOURCE && sts[r].MPI_TAG == MPI_ANY_TAG,
                  "MPI_Waitall: MPI_REQUEST_NULL's status is not empty");
            continue;
        }
        check_bytes("MPI_Waitall exchange", in[r], r, rank, 50, (size_t)from);
        check_status("MPI_Waitall exchange", &sts[r], r, 50, from);
    }
    for (int r = 0; r < size; r++) {
        free(out[r]);
        free(in[r]);
    }
    free(out);
    free(in);
    free(reqs);
    free(sts);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

    nanosleep(&ts, NULL);
}

/* MPI_Test until done, the sender late; requests pending across
 * collectives, which must not stop them (MPI's progress rule). */
static void test_test_and_progress(void)
{
    int n = 2 << 20;
    unsigned char *out = xmalloc((size_t)n), *in = xmalloc((size_t)n);

    for (int round = 0; round < rounds(); round++) {
        int p = partner(round), flag = 0, polls = 0, one = 1, sum = 0;
        MPI_Request req;
        MPI_Status st;

        if (p < 0) {
            /* The collectives below are everyone's. */
            MPI_Barrier(MPI_COMM_WORLD);
            MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            continue;
        }
        fill(out, rank, p, 60, (size_t)n);
        if (rank < p) {
            MPI_Irecv(in, n, MPI_BYTE, p, 60, MPI_COMM_WORLD, &req);
            while (!flag) {
                MPI_Test(&req, &flag, &st);
                polls++;
            }
            check(req == MPI_REQUEST_NULL, "MPI_Test left a done request");
            check_bytes("MPI_Test", in, p, rank, 60, (size_t)n);
            check_status("MPI_Test", &st, p, 60, n);
        } else {
            sleep_ms(50);
            MPI_Send(out, n, MPI_BYTE, p, 60, MPI_COMM_WORLD);
        }
        /* Both ways pending across a barrier and an all-reduce. */
        {
            MPI_Request reqs[2];

            fill(out, rank, p, 61, (size_t)n);
            MPI_Irecv(in, n, MPI_BYTE, p, 61, MPI_COMM_WORLD, &reqs[0]);
            MPI_Isend(out, n, MPI_BYTE, p, 61, MPI_COMM_WORLD, &reqs[1]);
            MPI_Barrier(MPI_COMM_WORLD);
            MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            check(sum == size, "MPI_Allreduce with requests pending");
            MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
            check_bytes("requests pending across collectives", in, p, rank, 61, (size_t)n);
        }
    }
    /* The partner's send is waited for while this rank is in an
     * all-to-all: the payload must still be taken. */
    if (size >= 2 && rank < 2) {
        MPI_Request req;
        int p = 1 - rank;
        int *a2a_out = xmalloc((size_t)size * sizeof(int));
        int *a2a_in = xmalloc((size_t)size * sizeof(int));

        if (rank == 0) {
            MPI_Irecv(in, n, MPI_BYTE, p, 62, MPI_COMM_WORLD, &req);
        } else {
            fill(out, rank, p, 62, (size_t)n);
            MPI_Isend(out, n, MPI_BYTE, p, 62, MPI_COMM_WORLD, &req);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        }
        for (int r = 0; r < size; r++)
            a2a_out[r] = rank * 100 + r;
        MPI_Alltoall(a2a_out, 1, MPI_INT, a2a_in, 1, MPI_INT, MPI_COMM_WORLD);
        if (rank == 0) {
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            check_bytes("a receive pending across MPI_Alltoall", in, p, rank, 62, (size_t)n);
        }
        for (int r = 0; r < size; r++)
            check(a2a_in[r] == r * 100 + rank, "MPI_Alltoall with a request pending");
        free(a2a_out);
        free(a2a_in);
    } else if (size >= 2) {
        int *a2a_out = xmalloc((size_t)size * sizeof(int));
        int *a2a_in = xmalloc((size_t)size * sizeof(int));

        for (int r = 0; r < size; r++)
            a2a_out[r] = rank * 100 + r;
        MPI_Alltoall(a2a_out, 1, MPI_INT, a2a_in, 1, MPI_INT, MPI_COMM_WORLD);
        for (int r = 0; r < size; r++)
            check(a2a_in[r] == r * 100 + rank, "MPI_Alltoall with a request pending");
        free(a2a_out);
        free(a2a_in);
    }
    free(out);
    free(in);
}

/* ---- oneself, MPI_PROC_NULL -------------------------------------------------------- */

static void test_self(MPI_Comm comm, const char *name)
{
    int me, n = (1 << 20) + 5;
    unsigned char *a = xmalloc((size_t)n), *b = xmalloc((size_t)n), small[64];
    MPI_Request reqs[3];
    MPI_Status st;
    char what[128];

    MPI_Comm_rank(comm, &me);
    snprintf(what, sizeof what, "%s: MPI_Send to oneself, then MPI_Recv", name);
    /* Two of one tag, received in order; one of another tag first. */
    fill(a, me, me, 70, (size_t)n);
    fill(small, me, me, 71, sizeof small);
    MPI_Send(a, n, MPI_BYTE, me, 7, comm);
    MPI_Send(small, 40, MPI_BYTE, me, 7, comm);
    MPI_Send(small, 64, MPI_BYTE, me, 8, comm);
    memset(b, 0, (size_t)n);
    MPI_Recv(b, 64, MPI_BYTE, me, 8, comm, &st);
    check_bytes(what, b, me, me, 71, 64);
    check_status(what, &st, me, 8, 64);
    MPI_Recv(b, n, MPI_BYTE, me, 7, comm, &st);
    check_bytes(what, b, me, me, 70, (size_t)n);
    check_status(what, &st, me, 7, n);
    MPI_Recv(b, n, MPI_BYTE, me, 7, comm, &st);
    check_bytes(what, b, me, me, 71, 40);
    check_status(what, &st, me, 7, 40);
    /* Receives posted first, then the sends. */
    snprintf(what, sizeof what, "%s: MPI_Irecv from oneself, then MPI_Isend", name);
    MPI_Irecv(b, n, MPI_BYTE, me, 9, comm, &reqs[0]);
    MPI_Isend(a, n, MPI_BYTE, me, 9, comm, &reqs[1]);
    MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
    check_bytes(what, b, me, me, 70, (size_t)n);
    MPI_Sendrecv(small, 10, MPI_BYTE, me, 11, b, 100, MPI_BYTE, me, 11, comm, &st);
    check_bytes("MPI_Sendrecv with oneself", b, me, me, 71, 10);
    check_status("MPI_Sendrecv with oneself", &st, me, 11, 10);
    /* MPI_PROC_NULL: no-ops, with MPI's status. */
    MPI_Send(a, n, MPI_BYTE, MPI_PROC_NULL, 1, comm);
    b[0] = 0x5a;
    MPI_Recv(b, n, MPI_BYTE, MPI_PROC_NULL, 1, comm, &st);
    check(b[0] == 0x5a, "MPI_Recv from MPI_PROC_NULL wrote");
    check_status("MPI_Recv from MPI_PROC_NULL", &st, MPI_PROC_NULL, MPI_ANY_TAG, 0);
    MPI_Irecv(b, n, MPI_BYTE, MPI_PROC_NULL, 1, comm, &reqs[0]);
    MPI_Isend(a, n, MPI_BYTE, MPI_PROC_NULL, 1, comm, &reqs[1]);
    reqs[2] = MPI_REQUEST_NULL;
    {
        int flag = 0;

        MPI_Test(&reqs[0], &flag, &st);
        check(flag && reqs[0] == MPI_REQUEST_NULL, "MPI_Test: MPI_PROC_NULL is not done");
        check_status("MPI_Irecv from MPI_PROC_NULL", &st, MPI_PROC_NULL, MPI_ANY_TAG, 0);
    }
    MPI_Waitall(3, reqs, MPI_STATUSES_IGNORE);
    MPI_Sendrecv(a, 5, MPI_BYTE, MPI_PROC_NULL, 1, b, 5, MPI_BYTE, MPI_PROC_NULL, 1, comm, &st);
    check_status("MPI_Sendrecv with MPI_PROC_NULL", &st, MPI_PROC_NULL, MPI_ANY_TAG, 0);
    free(a);
    free(b);
}

int main(int argc, char **argv)
{
    int expected_size, total = 0;

    if (argc != 2 || (expected_size = atoi(argv[1])) < 1) {
        fprintf(stderr, "usage: mpi_p2p EXPECTED_SIZE (run it under eccl-run -np N)\n");
        return 2;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check(size == expected_size, "MPI_Comm_size is not the expected size");

    test_self(MPI_COMM_SELF, "MPI_COMM_SELF");
    test_self(MPI_COMM_WORLD, "MPI_COMM_WORLD");
    if (size >= 2) {
        test_ring_sendrecv();
        test_ring_send_first();
        test_pingpong();
        test_sendrecv_one_tag();
        test_same_tag_in_flight();
        test_other_order();
        test_larger_buffer();
        test_waitall_exchange();
        test_test_and_progress();
    }

    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi_p2p: %d ranks, %d wrong value(s)\n", size, total);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
