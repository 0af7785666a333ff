/* mpi_ulfm: an iterative job that survives lost ranks the ULFM way
 * (MPI_ERRORS_RETURN, MPIX_Comm_agree, MPIX_Comm_failure_ack,
 * MPIX_Comm_shrink), with exact results.
 *
 *   eccl-run --keep-going -np N mpi_ulfm ITERS [RANK@ITER | RANK~MICROSECONDS ...]
 *
 * Each RANK@ITER makes MPI_COMM_WORLD's rank RANK kill itself (SIGKILL,
 * no goodbye) as iteration ITER begins; each RANK~US makes it die US
 * microseconds after MPI_Init, wherever it is then (inside any collective,
 * between them, in MPIX_Comm_agree or shrink). An iteration is a step of three
 * collectives on the job's communicator: an MPI_Allreduce of every live
 * rank's contribution (world rank + 1) * (iteration + 1), an MPI_Bcast from
 * its rank 0, and an MPI_Allgather of the world ranks. The survivors agree
 * on whether the step succeeded everywhere (MPIX_Comm_agree); if not, they
 * acknowledge the failure, shrink the communicator to the survivors and
 * run the step again. Each agreed step's sum must be exactly the sum of the
 * contributions of the ranks its all-gather names, which must be in order,
 * include every rank that never dies, and, for the RANK@ITER victims, name
 * exactly those alive at that iteration. A survivor prints
 * nothing unless a check fails; the first rank of the last communicator
 * prints the verdict. Exit status 0 on a survivor that saw every check pass.
 */
#include <mpi.h>
#include <mpi-ext.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>

#define MAX_VICTIMS 16

static int world_rank, world_size, n_victims, victim[MAX_VICTIMS], dies_at[MAX_VICTIMS];
static int timed[MAX_VICTIMS]; /* dies_at is microseconds after MPI_Init */

/* 1: alive at iteration it; 0: dead; -1: a timed victim, either. */
static int alive_at(int r, int it)
{
    for (int v = 0; v < n_victims; v++)
        if (victim[v] == r && (timed[v] || dies_at[v] <= it))
            return timed[v] ? -1 : 0;
    return 1;
}

static void die(int sig)
{
    (void)sig;
    raise(SIGKILL);
}

/* One step; the first error of its calls, or MPI_SUCCESS. */
static int step(MPI_Comm comm, int it, long long *sum, int *word, int *ranks, int *n)
{
    long long mine = (long long)(world_rank + 1) * (it + 1);
    int size, rc;

    MPI_Comm_size(comm, &size);
    *n = size;
    if ((rc = MPI_Allreduce(&mine, sum, 1, MPI_LONG_LONG, MPI_SUM, comm)) != MPI_SUCCESS)
        return rc;
    int me;
    MPI_Comm_rank(comm, &me);
    *word = me == 0 ? 7 * it : -1;
    if ((rc = MPI_Bcast(word, 1, MPI_INT, 0, comm)) != MPI_SUCCESS)
        return rc;
    return MPI_Allgather(&world_rank, 1, MPI_INT, ranks, 1, MPI_INT, comm);
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 0, failures = 0, shrinks = 0;

    for (int i = 2; i < argc && n_victims < MAX_VICTIMS; i++) {
        if (sscanf(argv[i], "%d@%d", &victim[n_victims], &dies_at[n_victims]) == 2)
            n_victims++;
        else if (sscanf(argv[i], "%d~%d", &victim[n_victims], &dies_at[n_victims]) == 2)
            timed[n_victims++] = 1;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    for (int v = 0; v < n_victims; v++)
        if (timed[v] && victim[v] == world_rank) {
            struct itimerval at = {{0, 0}, {dies_at[v] / 1000000, dies_at[v] % 1000000}};
            signal(SIGALRM, die);
            setitimer(ITIMER_REAL, &at, NULL);
        }
    if (iters <= 0 || world_size > 64) {
        fprintf(stderr, "usage: mpi_ulfm ITERS [RANK@ITER ...] (at most 64 ranks)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    MPI_Comm comm = MPI_COMM_WORLD;
    long long total = 0, want_total = 0;
    for (int it = 0; it < iters; it++) {
        if (alive_at(world_rank, it) == 0)
            raise(SIGKILL);
        long long sum = 0;
        int word = -1, ranks[64], n = 0;
        for (;;) {
            int ok = step(comm, it, &sum, &word, ranks, &n) == MPI_SUCCESS;
            int rc = MPIX_Comm_agree(comm, &ok);
            if (ok && rc == MPI_SUCCESS)
                break;
            /* A rank was lost: every survivor gets here for this step. */
            MPI_Comm smaller;
            MPIX_Comm_failure_ack(comm);
            if (MPIX_Comm_shrink(comm, &smaller) != MPI_SUCCESS) {
                fprintf(stderr, "mpi_ulfm: rank %d: MPIX_Comm_shrink failed\n", world_rank);
                return 3;
            }
            if (comm != MPI_COMM_WORLD)
                MPI_Comm_free(&comm);
            comm = smaller;
            shrinks++;
        }
        /* The agreed step's members: the ranks its all-gather named. */
        long long want = 0;
        int k = 0, gathered_ok = 1;
        for (int r = 0; r < world_size; r++) {
            int in = k < n && ranks[k] == r, alive = alive_at(r, it);
            if (in) {
                want += (long long)(r + 1) * (it + 1);
                k++;
            }
            gathered_ok &= alive < 0 || in == alive;
        }
        if (sum != want || word != 7 * it || !gathered_ok || k != n) {
            if (failures++ < 10)
                fprintf(stderr, "mpi_ulfm: rank %d, iteration %d: sum %lld (want %lld), bcast %d "
                        "(want %d), %d ranks gathered (%d in order)%s\n", world_rank, it, sum, want,
                        word, 7 * it, n, k, gathered_ok ? "" : ", not the live ones");
        }
        total += sum;
        want_total += want;
    }
    /* The survivors' verdict, agreed. */
    int ok = failures == 0 && total == want_total, me;
    MPIX_Comm_agree(comm, &ok);
    MPI_Comm_rank(comm, &me);
    int size;
    MPI_Comm_size(comm, &size);
    if (me == 0)
        printf("mpi_ulfm: %d survivors of %d after %d shrinks: %s\n", size, world_size, shrinks,
               ok ? "all checks passed" : "CHECKS FAILED");
    if (comm != MPI_COMM_WORLD)
        MPI_Comm_free(&comm);
    MPI_Finalize();
    return ok ? 0 : 1;
}
