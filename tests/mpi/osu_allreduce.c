/* An OSU-micro-benchmarks-style MPI_Allreduce latency test, written as any
 * MPI benchmark is (mpi.h, MPI_Wtime, MPI_Reduce of the timings): it must
 * build and run on libeccl_mpi unmodified. Sizes double from 4 bytes to
 * -m MAX (default 1 MiB); -i iterations and -x warm-up calls per size.
 * Every call's result is validated (OSU's -c): the exit status counts the
 * sizes with a wrong element. */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    long max_bytes = 1 << 20, iters = 100, warmup = 10;
    int rank, size, bad_sizes = 0;
    float *send, *recv;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i + 1 < argc; i += 2) {
        long v = atol(argv[i + 1]);
        if (strcmp(argv[i], "-m") == 0 && v >= 4)
            max_bytes = v;
        else if (strcmp(argv[i], "-i") == 0 && v >= 1)
            iters = v;
        else if (strcmp(argv[i], "-x") == 0 && v >= 0)
            warmup = v;
        else {
            if (rank == 0)
                fprintf(stderr, "usage: osu_allreduce [-m MAX_BYTES] [-i ITERS] [-x WARMUP]\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    send = malloc((size_t)max_bytes);
    recv = malloc((size_t)max_bytes);
    if (send == NULL || recv == NULL)
        MPI_Abort(MPI_COMM_WORLD, 1);
    if (rank == 0) {
        printf("# OSU-style MPI Allreduce Latency Test (%d ranks)\n", size);
        printf("%-10s%18s%18s%18s%12s\n", "# Size", "Avg Latency(us)", "Min Latency(us)",
               "Max Latency(us)", "Iterations");
    }
    for (long bytes = 4; bytes <= max_bytes; bytes *= 2) {
        int count = (int)(bytes / (long)sizeof(float)), wrong = 0, any_wrong = 0;
        double start, mine, lo, hi, sum;

        for (int i = 0; i < count; i++)
            send[i] = (float)(rank + 1) * (float)(i % 17);
        for (long k = 0; k < warmup; k++)
            MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        start = MPI_Wtime();
        for (long k = 0; k < iters; k++)
            MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        mine = (MPI_Wtime() - start) * 1e6 / (double)iters;
        for (int i = 0; i < count; i++)
            wrong |= recv[i] != (float)(size * (size + 1) / 2) * (float)(i % 17);
        MPI_Reduce(&mine, &lo, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
        MPI_Reduce(&mine, &hi, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        MPI_Allreduce(&wrong, &any_wrong, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        bad_sizes += any_wrong;
        if (rank == 0)
            printf("%-10ld%18.2f%18.2f%18.2f%12ld%s\n", bytes, sum / size, lo, hi, iters,
                   any_wrong ? "  WRONG RESULT" : "");
    }
    free(send);
    free(recv);
    MPI_Finalize();
    return bad_sizes;
}
