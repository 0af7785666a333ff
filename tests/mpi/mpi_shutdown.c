/* Jobs whose point is their shutdown (tests/mpi/clean_exit.sh runs them
 * under load and wants exit status 0 and nothing on stderr):
 *
 *   mpi_shutdown            MPI_Init and MPI_Finalize, nothing between
 *   mpi_shutdown eager N    each rank sends N eager messages to the next
 *                           rank and receives N from the previous, then
 *                           MPI_Finalize at once: eager sends return before
 *                           their receiver holds them, so MPI_Finalize is
 *                           where they settle, while other ranks may
 *                           already be leaving. */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rank, size, bad = 0;
    long n = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc == 3 && strcmp(argv[1], "eager") == 0)
        n = strtol(argv[2], NULL, 10);
    else if (argc != 1)
        MPI_Abort(MPI_COMM_WORLD, 2);
    for (long i = 0; i < n && size > 1; i++) {
        int out = (int)i * size + rank, in = -1;

        MPI_Send(&out, 1, MPI_INT, (rank + 1) % size, 7, MPI_COMM_WORLD);
        MPI_Recv(&in, 1, MPI_INT, (rank + size - 1) % size, 7, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
        bad += in != (int)i * size + (rank + size - 1) % size;
    }
    if (bad != 0)
        fprintf(stderr, "mpi_shutdown: rank %d: %d wrong message(s)\n", rank, bad);
    MPI_Finalize();
    return bad != 0;
}
