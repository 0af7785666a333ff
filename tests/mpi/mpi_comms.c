/* mpi_comms: communicators made by MPI_Comm_dup, MPI_Comm_split and
 * MPI_Comm_split_type (MPI 4.1, 7.4), checked against the standard.
 *
 * An ordinary MPI program (mpi.h only): `eccl-run -np N mpi_comms`, or
 * alone. A duplicate is a separate communication context (7.4.2): a
 * message sent on one communicator is never received on another, even
 * with the same source and tag, and collectives on several interleave
 * freely when every rank calls each communicator's in the same order.
 * Exits non-zero after naming each wrong value.
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>

static int rank, size, failures;

static void check(int ok, const char *what, long long index)
{
    if (!ok && failures++ < 20)
        fprintf(stderr, "mpi_comms: rank %d of %d: %s (%lld)\n", rank, size, what, index);
}

int main(int argc, char **argv)
{
    MPI_Comm dup, dup2, split, shared, self_dup, none;
    int result, r, n;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_dup(dup, &dup2);
    MPI_Comm_rank(dup, &r);
    MPI_Comm_size(dup, &n);
    check(r == rank && n == size, "a duplicate's rank and size", r);
    MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_WORLD, &result);
    check(result == MPI_IDENT, "MPI_IDENT", result);
    MPI_Comm_compare(MPI_COMM_WORLD, dup, &result);
    check(result == MPI_CONGRUENT, "a duplicate is MPI_CONGRUENT", result);
    MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_SELF, &result);
    check(result == (size == 1 ? MPI_CONGRUENT : MPI_UNEQUAL), "MPI_COMM_SELF against the world",
          result);

    /* Messages: the same source and tag on three communicators, received
     * in the other order: each lands on its own communicator. */
    int to = (rank + 1) % size, from = (rank + size - 1) % size, got[3] = {-1, -1, -1};
    int out[3] = {1000 + rank, 2000 + rank, 3000 + rank};
    MPI_Request req[6];
    MPI_Isend(&out[0], 1, MPI_INT, to, 7, MPI_COMM_WORLD, &req[0]);
    MPI_Isend(&out[1], 1, MPI_INT, to, 7, dup, &req[1]);
    MPI_Isend(&out[2], 1, MPI_INT, to, 7, dup2, &req[2]);
    MPI_Irecv(&got[2], 1, MPI_INT, from, 7, dup2, &req[3]);
    MPI_Irecv(&got[1], 1, MPI_INT, from, 7, dup, &req[4]);
    MPI_Irecv(&got[0], 1, MPI_INT, from, 7, MPI_COMM_WORLD, &req[5]);
    MPI_Waitall(6, req, MPI_STATUSES_IGNORE);
    for (int k = 0; k < 3; k++)
        check(got[k] == 1000 * (k + 1) + from, "a message kept its communicator", k);

    /* Collectives on two communicators at once, started in one order. */
    long long a = rank, b = 10 * rank, sa, sb;
    MPI_Iallreduce(&a, &sa, 1, MPI_LONG_LONG, MPI_SUM, dup, &req[0]);
    MPI_Iallreduce(&b, &sb, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD, &req[1]);
    MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
    check(sa == (long long)size * (size - 1) / 2, "MPI_Iallreduce on a duplicate", sa);
    check(sb == 10LL * size * (size - 1) / 2, "MPI_Iallreduce on the world beside it", sb);

    /* MPI_Comm_split: one color, keys that keep the order. */
    MPI_Comm_split(MPI_COMM_WORLD, 5, 2 * rank, &split);
    MPI_Comm_rank(split, &r);
    check(r == rank, "MPI_Comm_split's rank", r);
    int bval = rank == size - 1 ? 77 : 0;
    MPI_Bcast(&bval, 1, MPI_INT, size - 1, split);
    check(bval == 77, "MPI_Bcast on a split", bval);
    MPI_Comm_split(dup, MPI_UNDEFINED, 0, &none);
    check(none == MPI_COMM_NULL, "MPI_UNDEFINED everywhere: MPI_COMM_NULL", 0);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared);
    MPI_Comm_size(shared, &n);
    check(n == size, "MPI_COMM_TYPE_SHARED: every rank of this job shares the host", n);
    int gath[64];
    MPI_Allgather(&rank, 1, MPI_INT, gath, 1, MPI_INT, shared);
    for (int k = 0; k < size; k++) check(gath[k] == k, "MPI_Allgather on the shared communicator", k);

    /* A duplicate of MPI_COMM_SELF: a world of one. */
    MPI_Comm_dup(MPI_COMM_SELF, &self_dup);
    MPI_Comm_size(self_dup, &n);
    MPI_Comm_compare(self_dup, MPI_COMM_SELF, &result);
    check(n == 1 && result == MPI_CONGRUENT, "a duplicate of MPI_COMM_SELF", n);
    long long s1 = 0;
    MPI_Allreduce(&a, &s1, 1, MPI_LONG_LONG, MPI_SUM, self_dup);
    check(s1 == rank, "MPI_Allreduce on a world of one", s1);

    MPI_Comm_free(&dup2);
    MPI_Comm_free(&self_dup);
    MPI_Comm_free(&split);
    MPI_Comm_free(&shared);
    check(dup2 == MPI_COMM_NULL, "MPI_Comm_free sets MPI_COMM_NULL", 0);
    /* A communicator made after frees still has its own context. */
    MPI_Comm again;
    MPI_Comm_dup(dup, &again);
    MPI_Barrier(again);
    MPI_Comm_free(&again);
    MPI_Comm_free(&dup);

    int all_failures = 0;
    MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    if (rank == 0 && all_failures == 0) printf("mpi_comms: %d ranks: all checks passed\n", size);
    return all_failures != 0;
}
