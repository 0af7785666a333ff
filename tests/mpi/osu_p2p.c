/* OSU-micro-benchmarks-style point-to-point tests between ranks 0 and 1,
 * written as any MPI benchmark is (mpi.h, MPI_Wtime, blocking and
 * non-blocking sends): it must build and run unmodified on libeccl_mpi and
 * on any MPI, for comparison.
 *
 *   osu_p2p latency [-m MAX] [-i ITERS] [-x WARMUP]
 *       osu_latency: ping-pong (rank 0 MPI_Send then MPI_Recv, rank 1 the
 *       reverse); one-way latency = round trip / 2, and the bandwidth that
 *       makes (size / one-way latency)
 *   osu_p2p bw [-m MAX] [-i ITERS] [-x WARMUP] [-w WINDOW]
 *       osu_bw: rank 0 posts WINDOW MPI_Isends (default 64), MPI_Waitall,
 *       then waits for rank 1's 4-byte ack; rank 1 posts WINDOW MPI_Irecvs
 *
 * Sizes double from 1 byte (0 first, for latency) to MAX (default 4 MiB).
 * Ranks beyond 1 only wait. Every received buffer is validated (OSU's -c):
 * the exit status counts the sizes with a wrong byte. */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char byte_at(long size, long i, int from)
{
    return (unsigned char)((size * 7 + i * 13 + from * 101) % 251);
}

static void fill(unsigned char *buf, long size, int from)
{
    for (long i = 0; i < size; i++)
        buf[i] = byte_at(size, i, from);
}

/* The first n bytes of a buffer of `size` that `from` filled. */
static int wrong(const unsigned char *buf, long n, long size, int from)
{
    for (long i = 0; i < n; i++)
        if (buf[i] != byte_at(size, i, from))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    long max_bytes = 4L << 20, iters = 1000, warmup = 100, window = 64;
    int rank, size, bw, bad_sizes = 0;
    unsigned char *send, *recv;
    MPI_Request *reqs;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2 || (strcmp(argv[1], "latency") != 0 && strcmp(argv[1], "bw") != 0) ||
        size < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: osu_p2p latency|bw [-m MAX_BYTES] [-i ITERS] [-x WARMUP] "
                            "[-w WINDOW] (2 ranks or more)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    bw = strcmp(argv[1], "bw") == 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        long v = atol(argv[i + 1]);
        if (strcmp(argv[i], "-m") == 0 && v >= 1)
            max_bytes = v;
        else if (strcmp(argv[i], "-i") == 0 && v >= 1)
            iters = v;
        else if (strcmp(argv[i], "-x") == 0 && v >= 0)
            warmup = v;
        else if (strcmp(argv[i], "-w") == 0 && v >= 1)
            window = v;
        else {
            if (rank == 0)
                fprintf(stderr, "osu_p2p: bad option %s %s\n", argv[i], argv[i + 1]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    send = malloc((size_t)max_bytes);
    recv = malloc((size_t)max_bytes);
    reqs = malloc((size_t)window * sizeof *reqs);
    if (send == NULL || recv == NULL || reqs == NULL)
        MPI_Abort(MPI_COMM_WORLD, 1);
    if (rank == 0) {
        if (bw)
            printf("# OSU-style MPI Bandwidth Test (window %ld)\n%-10s%20s\n", window, "# Size",
                   "Bandwidth (MB/s)");
        else
            printf("# OSU-style MPI Latency Test (ping-pong)\n%-10s%18s%20s\n", "# Size",
                   "Latency (us)", "Bandwidth (MB/s)");
    }
    for (long bytes = bw ? 1 : 0; bytes <= max_bytes; bytes = bytes != 0 ? bytes * 2 : 1) {
        int count = (int)bytes, bad = 0, any_bad = 0;
        double start = 0.0, elapsed;

        fill(send, bytes, rank);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank <= 1) {
            for (long k = 0; k < iters + warmup; k++) {
                if (k == warmup)
                    start = MPI_Wtime();
                if (!bw && rank == 0) {
                    MPI_Send(send, count, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
                    MPI_Recv(recv, count, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else if (!bw) {
                    MPI_Recv(recv, count, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(send, count, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
                } else if (rank == 0) {
                    for (long w = 0; w < window; w++)
                        MPI_Isend(send, count, MPI_CHAR, 1, 100, MPI_COMM_WORLD, &reqs[w]);
                    MPI_Waitall((int)window, reqs, MPI_STATUSES_IGNORE);
                    MPI_Recv(recv, 4, MPI_CHAR, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    for (long w = 0; w < window; w++)
                        MPI_Irecv(recv, count, MPI_CHAR, 0, 100, MPI_COMM_WORLD, &reqs[w]);
                    MPI_Waitall((int)window, reqs, MPI_STATUSES_IGNORE);
                    MPI_Send(send, 4 < count ? 4 : count, MPI_CHAR, 0, 101, MPI_COMM_WORLD);
                }
            }
            elapsed = MPI_Wtime() - start;
            /* bw: rank 0's recv holds the ack (the first bytes of rank 1's
             * buffer, up to 4). */
            bad = wrong(recv, bw && rank == 0 ? (bytes < 4 ? bytes : 4) : bytes, bytes, 1 - rank);
            if (rank == 0 && bw)
                printf("%-10ld%20.2f\n", bytes,
                       (double)bytes * (double)iters * (double)window / elapsed / 1e6);
            else if (rank == 0)
                printf("%-10ld%18.2f%20.2f\n", bytes, elapsed * 1e6 / (2.0 * (double)iters),
                       (double)bytes / (elapsed / (2.0 * (double)iters)) / 1e6);
        }
        MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (rank == 0 && any_bad)
            printf("%-10ld  WRONG RESULT\n", bytes);
        bad_sizes += any_bad;
    }
    free(send);
    free(recv);
    free(reqs);
    MPI_Finalize();
    return bad_sizes;
}
