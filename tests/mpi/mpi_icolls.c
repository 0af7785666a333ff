/* mpi_icolls: the nonblocking collectives (MPI 4.1, 6.12), checked against
 * what their blocking twins give.
 *
 * An ordinary MPI program (mpi.h only): `eccl-run -np N mpi_icolls`, or
 * alone. Every rank starts several collectives at once, with messages in
 * flight beside them, and completes them in another order than it started
 * them (MPI_Waitany, MPI_Testall loops, MPI_Wait last-first): MPI requires
 * only that every rank starts them in the same order. All of it on
 * MPI_COMM_WORLD, then on its ranks in reverse order and on each half of
 * them (MPI_Comm_split: communicators whose collectives the library runs
 * as messages). Exits non-zero after naming each wrong value.
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, failures;
static const char *on; /* the communicator's name */

static void check(int ok, const char *what, long long index)
{
    if (!ok && failures++ < 20)
        fprintf(stderr, "mpi_icolls: %s: rank %d of %d: %s (element %lld)\n", on, rank, size, what, index);
}

enum { N = 3000 }; /* past the eager size: bulk transfers in eccl */

static void run(MPI_Comm comm, const char *name)
{
    on = name;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);

    double *sum = malloc(N * sizeof *sum), *mx = malloc(N * sizeof *mx);
    int *bc = malloc(N * sizeof *bc), *gath = malloc((size_t)size * 4 * sizeof *gath);
    int *a2a_in = malloc((size_t)size * 2 * sizeof *a2a_in);
    int *a2a_out = malloc((size_t)size * 2 * sizeof *a2a_out);
    long long *red = malloc(N * sizeof *red), *rs_in = malloc((size_t)size * 2 * sizeof *rs_in);
    long long rs_out[2];
    int mine[4], scat[4], *scat_src = malloc((size_t)size * 4 * sizeof *scat_src);
    char ping[600], pong[600];
    MPI_Request req[10];
    int root = size - 1, peer = (rank + 1) % size, from = (rank + size - 1) % size;

    for (int i = 0; i < N; i++) {
        sum[i] = rank + i * 0.5;
        mx[i] = (double)((rank * 31 + i) % 97);
        bc[i] = rank == root ? i * 3 + 1 : -1;
        red[i] = rank * 1000 + i;
    }
    for (int j = 0; j < 4; j++) mine[j] = rank * 10 + j;
    for (int i = 0; i < 2 * size; i++) {
        a2a_in[i] = rank * 100 + i;
        rs_in[i] = rank + i;
    }
    for (int i = 0; rank == root && i < 4 * size; i++) scat_src[i] = 7 * i;
    memset(ping, 'a' + rank % 26, sizeof ping);

    /* Started in one order on every rank, a ring of messages among them. */
    MPI_Iallreduce(MPI_IN_PLACE, sum, N, MPI_DOUBLE, MPI_SUM, comm, &req[0]);
    MPI_Ibcast(bc, N, MPI_INT, root, comm, &req[1]);
    MPI_Irecv(pong, sizeof pong, MPI_CHAR, from, 9, comm, &req[2]);
    MPI_Iallgather(mine, 4, MPI_INT, gath, 4, MPI_INT, comm, &req[3]);
    MPI_Isend(ping, sizeof ping, MPI_CHAR, peer, 9, comm, &req[4]);
    MPI_Ialltoall(a2a_in, 2, MPI_INT, a2a_out, 2, MPI_INT, comm, &req[5]);
    MPI_Ireduce(rank == 0 ? MPI_IN_PLACE : red, red, N, MPI_LONG_LONG, MPI_MAX, 0, comm,
                &req[6]);
    MPI_Ireduce_scatter_block(rs_in, rs_out, 2, MPI_LONG_LONG, MPI_SUM, comm, &req[7]);
    MPI_Iscatter(scat_src, 4, MPI_INT, scat, 4, MPI_INT, root, comm, &req[8]);
    MPI_Ibarrier(comm, &req[9]);

    /* A blocking collective while they run: it comes after them in every
     * rank's order. */
    double m;
    MPI_Allreduce(&mx[0], &m, 1, MPI_DOUBLE, MPI_MAX, comm);

    /* Completed in another order: the barrier and the scatter by Testall,
     * the rest by Waitany, then nothing is left. */
    int flag = 0, done = 0, index;
    while (!flag) MPI_Testall(2, &req[8], &flag, MPI_STATUSES_IGNORE);
    for (;;) {
        MPI_Status st;
        MPI_Waitany(8, req, &index, &st);
        if (index == MPI_UNDEFINED) break;
        done++;
        if (index == 2) {
            int got;
            MPI_Get_count(&st, MPI_CHAR, &got);
            check(st.MPI_SOURCE == from && st.MPI_TAG == 9 && got == (int)sizeof pong,
                  "MPI_Irecv's status", 0);
        }
    }
    check(done == 8, "MPI_Waitany completed each request once", done);
    MPI_Wait(&req[0], MPI_STATUS_IGNORE); /* MPI_REQUEST_NULL now: a no-op */

    double want_m = 0;
    for (int r = 0; r < size; r++)
        if ((double)((r * 31) % 97) > want_m) want_m = (double)((r * 31) % 97);
    check(m == want_m, "the blocking MPI_Allreduce among them", 0);
    for (int i = 0; i < N; i++) {
        double want = 0;
        for (int r = 0; r < size; r++) want += r + i * 0.5;
        check(sum[i] == want, "MPI_Iallreduce", i);
        check(bc[i] == i * 3 + 1, "MPI_Ibcast", i);
        if (rank == 0) check(red[i] == (long long)(size - 1) * 1000 + i, "MPI_Ireduce", i);
    }
    for (int i = 0; i < 4 * size; i++) check(gath[i] == (i / 4) * 10 + i % 4, "MPI_Iallgather", i);
    for (int r = 0; r < size; r++)
        for (int k = 0; k < 2; k++)
            check(a2a_out[2 * r + k] == r * 100 + 2 * rank + k, "MPI_Ialltoall", 2 * r + k);
    for (int k = 0; k < 2; k++) {
        long long want = 0;
        for (int r = 0; r < size; r++) want += r + 2 * rank + k;
        check(rs_out[k] == want, "MPI_Ireduce_scatter_block", k);
    }
    for (int j = 0; j < 4; j++) check(scat[j] == 7 * (4 * rank + j), "MPI_Iscatter", j);
    for (size_t i = 0; i < sizeof pong; i++) check(pong[i] == 'a' + from % 26, "the message", (long long)i);

    free(sum), free(mx), free(bc), free(gath), free(a2a_in), free(a2a_out), free(red), free(rs_in);
    free(scat_src);
}

int main(int argc, char **argv)
{
    MPI_Comm reversed, half;
    int world_rank, world_size, all_failures = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    run(MPI_COMM_WORLD, "MPI_COMM_WORLD");
    MPI_Comm_split(MPI_COMM_WORLD, 0, world_size - world_rank, &reversed);
    run(reversed, "the world reversed");
    MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &half);
    run(half, "a half of the world");
    MPI_Comm_free(&half);
    MPI_Comm_free(&reversed);
    MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    if (world_rank == 0 && all_failures == 0)
        printf("mpi_icolls: %d ranks: all checks passed\n", world_size);
    return all_failures != 0;
}
