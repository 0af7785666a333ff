/* mpi_faults: MPI programs that must make their job fail, one per mode;
 * tests/mpi/expect_fail.sh runs each under eccl-run and checks the exit
 * status and the message. An ordinary MPI program (mpi.h only).
 *
 *   splitshrink every rank splits by its rank's parity, and rank 0 calls
 *               MPIX_Comm_shrink on its half: not on communicators of some
 *               ranks yet
 *   anysource   rank 1 receives from MPI_ANY_SOURCE, which eccl cannot
 *               match: loudly, never silently
 *   anytag      rank 1 posts a receive of MPI_ANY_TAG, likewise
 *   truncate    rank 0 sends 200 bytes (eager: its MPI_Send returns), rank
 *               1 receives them into 40: MPI_ERR_TRUNCATE
 *   selfwait    rank 1 waits for a message from itself that it never sent
 *               (a certain deadlock)
 *   badop       rank 0 calls MPI_Allreduce with MPI_BAND on MPI_FLOAT, an
 *               operation MPI does not define on floats
 *   ibadop      rank 0 calls MPI_Iallreduce with MPI_BAND, which is
 *               computed in the shim and has no nonblocking form yet
 *   uncommitted rank 0 broadcasts a derived datatype it never committed
 *               (MPI_ERR_TYPE)
 *   mixedop     rank 0 sums a struct of an int and a double: MPI's
 *               predefined operations apply to one basic type
 *   abort       rank 1 calls MPI_Abort(MPI_COMM_WORLD, 3)
 *   kill        the last rank dies of SIGKILL
 *               (in these modes the other ranks wait outside any MPI call,
 *               so that the one failure is the job's only one: eccl-run's
 *               status is its status)
 *   unreceived  rank 0 sends rank 1 a message it never receives; both
 *               reach MPI_Finalize, which must say so
 *   vanish      the last rank leaves with status 0 (_exit: not even
 *               MPI_Finalize's exit check) while the others loop in
 *               MPI_Allreduce: they must fail, not go on with fewer ranks
 *   revoked     rank 0 revokes a duplicate of the world whose handler is
 *               MPI_ERRORS_ARE_FATAL while the others wait in a barrier on
 *               it: MPIX_ERR_REVOKED ends the job
 *   nofinalize  every rank returns 0 from main without MPI_Finalize
 *   hang        every rank sleeps: only eccl-run --timeout ends the job
 *
 * A rank that fails on purpose first lets a second pass, so that the others
 * are well past the barrier that follows MPI_Init: otherwise they could
 * notice the loss at its end and fail there instead.
 *
 * The waits are bounded (30 s): a mode whose failure never comes ends
 * with status 0, which the test reports as the bug it is. */
#include <mpi.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void sleep_for_a_while(void)
{
    const struct timespec pause = {30, 0};

    nanosleep(&pause, NULL);
}

static void let_others_settle(void)
{
    const struct timespec pause = {1, 0};

    nanosleep(&pause, NULL);
}

static void allreduce_for_a_while(void)
{
    double start = MPI_Wtime();
    int one = 1, sum = 0;

    while (MPI_Wtime() - start < 30.0)
        MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int rank, size, value = 1, buf[64] = {0};

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Barrier(MPI_COMM_WORLD);

    if (strcmp(mode, "splitshrink") == 0) {
        MPI_Comm part, smaller;

        MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &part);
        if (rank == 0) {
            let_others_settle();
            MPIX_Comm_shrink(part, &smaller);
        }
        sleep_for_a_while();
    } else if (strcmp(mode, "anysource") == 0) {
        if (rank == 1) {
            let_others_settle();
            MPI_Recv(&value, 1, MPI_INT, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        sleep_for_a_while();
    } else if (strcmp(mode, "anytag") == 0) {
        if (rank == 1) {
            MPI_Request req;

            let_others_settle();
            MPI_Irecv(&value, 1, MPI_INT, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &req);
        }
        sleep_for_a_while();
    } else if (strcmp(mode, "truncate") == 0) {
        if (rank == 0)
            MPI_Send(buf, 50, MPI_INT, 1, 4, MPI_COMM_WORLD);
        else if (rank == 1) {
            let_others_settle();
            MPI_Recv(buf, 10, MPI_INT, 0, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        sleep_for_a_while();
    } else if (strcmp(mode, "selfwait") == 0) {
        if (rank == 1) {
            let_others_settle();
            MPI_Recv(&value, 1, MPI_INT, 1, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        sleep_for_a_while();
    } else if (strcmp(mode, "unreceived") == 0) {
        if (rank == 0)
            MPI_Send(&value, 1, MPI_INT, 1, 6, MPI_COMM_WORLD);
    } else if (strcmp(mode, "badop") == 0) {
        if (rank == 0) {
            let_others_settle();
            float f = 1.0f;

            MPI_Allreduce(MPI_IN_PLACE, &f, 1, MPI_FLOAT, MPI_BAND, MPI_COMM_WORLD);
        }
        sleep_for_a_while();
    } else if (strcmp(mode, "ibadop") == 0) {
        if (rank == 0) {
            MPI_Request req;

            let_others_settle();
            MPI_Iallreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_BAND, MPI_COMM_WORLD, &req);
        }
        sleep_for_a_while();
    } else if (strcmp(mode, "uncommitted") == 0) {
        if (rank == 0) {
            MPI_Datatype pair;

            let_others_settle();
            MPI_Type_contiguous(2, MPI_INT, &pair);
            MPI_Bcast(buf, 1, pair, 0, MPI_COMM_WORLD);
        }
        sleep_for_a_while();
    } else if (strcmp(mode, "mixedop") == 0) {
        if (rank == 0) {
            MPI_Datatype mixed, types[2] = {MPI_INT, MPI_DOUBLE};
            int lens[2] = {1, 1};
            MPI_Aint displs[2] = {0, 8};

            let_others_settle();
            MPI_Type_create_struct(2, lens, displs, types, &mixed);
            MPI_Type_commit(&mixed);
            MPI_Allreduce(MPI_IN_PLACE, buf, 1, mixed, MPI_SUM, MPI_COMM_WORLD);
        }
        sleep_for_a_while();
    } else if (strcmp(mode, "abort") == 0) {
        if (rank == 1) {
            let_others_settle();
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        sleep_for_a_while();
    } else if (strcmp(mode, "kill") == 0) {
        if (rank == size - 1) {
            let_others_settle();
            raise(SIGKILL);
        }
        sleep_for_a_while();
    } else if (strcmp(mode, "vanish") == 0) {
        if (rank == size - 1) {
            let_others_settle();
            _exit(0);
        }
        allreduce_for_a_while();
    } else if (strcmp(mode, "revoked") == 0) {
        MPI_Comm dup;
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        if (rank == 0) {
            let_others_settle();
            MPIX_Comm_revoke(dup);
            sleep_for_a_while();
        }
        MPI_Barrier(dup);
        fprintf(stderr, "mpi_faults: rank %d: a barrier on a revoked communicator returned\n", rank);
    } else if (strcmp(mode, "nofinalize") == 0) {
        return 0;
    } else if (strcmp(mode, "hang") == 0) {
        const struct timespec hour = {3600, 0};
        nanosleep(&hour, NULL);
    } else {
        fprintf(stderr, "usage: mpi_faults splitshrink|ibadop|anysource|anytag|truncate|selfwait|badop|abort|"
                        "kill|vanish|revoked|unreceived|nofinalize|hang\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Finalize();
    return 0;
}
