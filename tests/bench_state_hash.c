/* Throughput of the shared-state hashes: a program, not a test (speed is
 * never asserted). Usage: bench_state_hash [MiB] [reps]
 * Prints nccl-tests-style columns: type, bytes, time per call, GB/s. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "state/hash.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 64;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    size_t n = mib << 20;
    unsigned char *p = malloc(n);
    if (p == NULL || reps < 1)
        return 1;
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 2654435761u >> 13);

    static const struct {
        eccl_hash_type type;
        const char *name;
    } types[] = {{ECCL_HASH_SIMPLE, "simple"}, {ECCL_HASH_CRC32C, "crc32c"}};
    printf("# %-8s %14s %12s %10s %18s\n", "type", "bytes", "time(ms)", "GB/s", "hash");
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        uint64_t h = eccl_hash(types[t].type, p, n); /* warm up, fault pages in */
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();
            uint64_t h2 = eccl_hash(types[t].type, p, n);
            double dt = now_s() - t0;
            if (h2 != h)
                return 2;
            if (dt < best)
                best = dt;
        }
        printf("  %-8s %14zu %12.3f %10.2f 0x%016llx\n", types[t].name, n, best * 1e3,
               (double)n / best / 1e9, (unsigned long long)h);
    }
    free(p);
    return 0;
}
