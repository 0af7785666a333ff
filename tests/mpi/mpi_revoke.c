/* mpi_revoke: MPIX_Comm_revoke and MPIX_Comm_is_revoked (ULFM), checked
 * against the proposal's text.
 *
 * An ordinary MPI program (mpi.h only): `eccl-run -np N mpi_revoke`, N >= 3.
 * What the text says and this checks:
 * - a revoke ends the calls of every rank on the communicator, those in
 *   flight (a receive whose send never comes, a collective a rank never
 *   joins) and those made later, with MPIX_ERR_REVOKED; every rank then
 *   sees it revoked;
 * - it is local to that communicator: calls on others in flight at the
 *   time (messages with and without payloads, blocking collectives of all
 *   ranks and of some, nonblocking collectives) complete as if nothing
 *   happened, with exact values;
 * - MPIX_Comm_agree and MPIX_Comm_shrink still work on a revoked
 *   communicator, and a communicator shrunk from it works;
 * - MPIX_Comm_agree on a communicator of some ranks (each half of the
 *   world) gives each half the AND of its flags; with `kill` (under
 *   eccl-run --keep-going) the last rank dies instead of agreeing: its
 *   half's survivors agree without it and get MPIX_ERR_PROC_FAILED, the
 *   other half is untouched, and an agreement on the world tells everyone.
 * Exits non-zero after naming each wrong value.
 */
#include <mpi.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PAYLOAD 4096 /* ints: a message with a payload after its header */

static int rank, size, failures;

static void check(int ok, const char *what, long long value)
{
    if (!ok && failures++ < 20)
        fprintf(stderr, "mpi_revoke: rank %d of %d: %s (%lld)\n", rank, size, what, value);
}

static void pause_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

int main(int argc, char **argv)
{
    MPI_Comm a, a2, b, halves, shrunk;
    int rc, flag, v, sum;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 3) {
        fprintf(stderr, "mpi_revoke: run it on 3 ranks or more\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    MPI_Comm_dup(MPI_COMM_WORLD, &a2);
    MPI_Comm_dup(MPI_COMM_WORLD, &b);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &halves);
    MPIX_Comm_is_revoked(a, &flag);
    check(flag == 0, "a new communicator is not revoked", flag);

    /* 1. Rank 0 revokes `a` while the others wait in calls on it that
     * cannot complete without it: odd ranks in a receive from it, even
     * ones in an all-reduce it never joins. */
    if (rank == 0) {
        pause_ms(200);
        rc = MPIX_Comm_revoke(a);
        check(rc == MPI_SUCCESS, "MPIX_Comm_revoke", rc);
    } else if (rank % 2 == 1) {
        rc = MPI_Recv(&v, 1, MPI_INT, 0, 1, a, MPI_STATUS_IGNORE);
        check(rc == MPIX_ERR_REVOKED, "a receive in flight on the revoked communicator", rc);
    } else {
        v = 1;
        rc = MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, a);
        check(rc == MPIX_ERR_REVOKED, "an all-reduce in flight on the revoked communicator", rc);
    }
    MPIX_Comm_is_revoked(a, &flag);
    check(flag == 1, "every rank sees the communicator revoked", flag);
    rc = MPI_Barrier(a);
    check(rc == MPIX_ERR_REVOKED, "a barrier after the revoke", rc);
    rc = MPI_Send(&v, 1, MPI_INT, (rank + 1) % size, 2, a);
    check(rc == MPIX_ERR_REVOKED, "a send after the revoke", rc);
    rc = MPIX_Comm_revoke(a);
    check(rc == MPI_SUCCESS, "revoking it again", rc);
    rc = MPI_Comm_size(a, &v);
    check(rc == MPI_SUCCESS && v == size, "a revoked communicator's size", v);

    /* 2. Rank 0 revokes `a2` while every other rank has messages and
     * collectives of other communicators in flight that wait for rank 0:
     * each completes, exactly. */
    int *out = malloc(PAYLOAD * sizeof *out), *in = malloc(PAYLOAD * sizeof *in);
    int small_out = 100 + rank, small_in = -1, to = (rank + 1) % size, from = (rank + size - 1) % size;
    MPI_Request req[6];
    int isum = -1, *gathered = malloc((size_t)size * sizeof *gathered);
    for (int i = 0; i < PAYLOAD; i++)
        out[i] = rank * PAYLOAD + i, in[i] = -1;
    if (rank == 0) {
        pause_ms(200);
        MPIX_Comm_revoke(a2);
    }
    MPI_Irecv(in, PAYLOAD, MPI_INT, from, 3, b, &req[0]);
    MPI_Irecv(&small_in, 1, MPI_INT, from, 4, b, &req[1]);
    MPI_Isend(out, PAYLOAD, MPI_INT, to, 3, b, &req[2]);
    MPI_Isend(&small_out, 1, MPI_INT, to, 4, b, &req[3]);
    v = rank + 1;
    MPI_Iallreduce(&v, &isum, 1, MPI_INT, MPI_SUM, b, &req[4]);
    MPI_Iallgather(&v, 1, MPI_INT, gathered, 1, MPI_INT, b, &req[5]);
    rc = MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, halves);
    int half_sum = 0;
    for (int r = rank % 2; r < size; r += 2)
        half_sum += r + 1;
    check(rc == MPI_SUCCESS && sum == half_sum, "an all-reduce of half the ranks across the revoke", sum);
    rc = MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, b);
    check(rc == MPI_SUCCESS && sum == size * (size + 1) / 2, "an all-reduce of every rank across the revoke", sum);
    rc = MPI_Waitall(6, req, MPI_STATUSES_IGNORE);
    check(rc == MPI_SUCCESS, "messages and nonblocking collectives across the revoke", rc);
    check(isum == size * (size + 1) / 2, "a nonblocking all-reduce across the revoke", isum);
    for (int r = 0; r < size; r++)
        check(gathered[r] == r + 1, "a nonblocking all-gather across the revoke", r);
    for (int i = 0; i < PAYLOAD; i++)
        if (in[i] != from * PAYLOAD + i) {
            check(0, "a message's payload across the revoke", i);
            break;
        }
    check(small_in == 100 + from, "a small message across the revoke", small_in);
    rc = MPI_Bcast(&v, 1, MPI_INT, 0, a2);
    check(rc == MPIX_ERR_REVOKED, "a broadcast on the second revoked communicator", rc);

    /* 3. Agreement and shrinking still work on a revoked communicator. */
    flag = rank == 1 ? 6 : 7;
    rc = MPIX_Comm_agree(a, &flag);
    check(rc == MPI_SUCCESS && flag == 6, "MPIX_Comm_agree on the revoked communicator", flag);
    rc = MPIX_Comm_shrink(a, &shrunk);
    check(rc == MPI_SUCCESS, "MPIX_Comm_shrink of the revoked communicator", rc);
    MPI_Comm_size(shrunk, &v);
    check(v == size, "nobody failed: the shrunk communicator has every rank", v);
    MPIX_Comm_is_revoked(shrunk, &flag);
    check(flag == 0, "the shrunk communicator is not revoked", flag);
    v = rank + 1;
    rc = MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, shrunk);
    check(rc == MPI_SUCCESS && sum == size * (size + 1) / 2, "an all-reduce on the shrunk communicator", sum);

    /* 4. Agreement on each half (a communicator of some ranks). */
    int kill = argc > 1 && strcmp(argv[1], "kill") == 0, victim = size - 1;
    int half_size, want = 0x7fffffff;
    MPI_Comm_size(halves, &half_size);
    for (int r = rank % 2; r < size; r += 2)
        if (!(kill && r == victim))
            want &= 0x7fffffff ^ (1 << r);
    if (kill && rank == victim)
        raise(SIGKILL);
    flag = 0x7fffffff ^ (1 << rank);
    rc = MPIX_Comm_agree(halves, &flag);
    int half_lost = kill && rank % 2 == victim % 2;
    check(flag == want, "MPIX_Comm_agree on a half: the AND of its live ranks' flags", flag);
    check(rc == (half_lost ? MPIX_ERR_PROC_FAILED : MPI_SUCCESS), "MPIX_Comm_agree's result on a half", rc);
    flag = 1;
    rc = MPIX_Comm_agree(MPI_COMM_WORLD, &flag);
    check(rc == (kill ? MPIX_ERR_PROC_FAILED : MPI_SUCCESS) && flag == 1, "MPIX_Comm_agree on the world", rc);

    MPI_Comm_free(&shrunk);
    MPI_Comm_free(&halves);
    MPI_Comm_free(&b);
    MPI_Comm_free(&a2);
    MPI_Comm_free(&a);
    free(out);
    free(in);
    free(gathered);
    if (failures == 0 && rank == 0)
        printf("mpi_revoke: all checks passed on %d ranks%s\n", size, kill ? ", one killed" : "");
    MPI_Finalize();
    return failures != 0;
}
