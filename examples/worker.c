/* eccl-worker: the PCCL-style training loop, written against eccl.h only.
 *
 *   connect; loop { admit pending peers; all-reduce; on peer loss check the
 *   buffer came back untouched and retry on the survivors; verify }
 *
 * A peer admitted later starts where the others are: after joining and after
 * every topology change, peers agree on the step with an all-reduce MAX.
 *
 * Every peer contributes the same values, so the expected sum is
 * world_size * x whoever is left, and every peer prints a hash of its
 * result so bit-parity across peers can be checked by whoever reads the
 * output. One line per event on stdout, as key=value pairs.
 */
#define _GNU_SOURCE
#include <eccl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct options {
    const char *master;
    size_t count;
    int iters;
    int world_min;
    int start_world; /* wait for this many peers before the first step */
    uint32_t group;
    int wait_ms;   /* give up after waiting this long for enough peers */
} options;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* FNV-1a over 32-bit words (buffers here are f32): fast enough for 64 MiB. */
static uint64_t fnv1a(const float *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        uint32_t w;
        memcpy(&w, &p[i], sizeof w);
        h = (h ^ w) * 1099511628211ull;
    }
    return h;
}

static float contribution(int iter, size_t i) { return (float)((iter * 31 + (int)(i % 1021)) % 17 + 1); }

/* The step all members of the current ring agree on: the furthest one.
 * The tag is unique per ring epoch, which every member has just entered. */
static eccl_result agree_on_step(eccl_comm *comm, int *iter)
{
    int64_t world = 0, epoch = 0;
    eccl_comm_get_attr(comm, ECCL_ATTR_WORLD_SIZE, &world);
    eccl_comm_get_attr(comm, ECCL_ATTR_EPOCH, &epoch);
    if (world < 2) return ECCL_OK;
    uint64_t step = (uint64_t)*iter;
    eccl_result rc = eccl_allreduce(comm, &step, &step, 1, ECCL_U64, ECCL_MAX,
                                    (1ull << 63) | (uint64_t)epoch, NULL);
    if (rc == ECCL_OK) *iter = (int)step;
    return rc;
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s --master HOST:PORT [--count ELEMENTS] [--iters N] [--world-min N]\n"
            "          [--start-world N] [--group G] [--wait-ms MS]\n",
            argv0);
    exit(2);
}

static void parse(int argc, char **argv, options *o)
{
    static const struct option longs[] = {
        {"master", required_argument, 0, 'm'}, {"count", required_argument, 0, 'c'},
        {"iters", required_argument, 0, 'i'},  {"world-min", required_argument, 0, 'w'},
        {"group", required_argument, 0, 'g'},  {"wait-ms", required_argument, 0, 't'},
        {"start-world", required_argument, 0, 's'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    *o = (options){NULL, 1u << 20, 10, 2, 0, 0, 30000};
    int ch;
    while ((ch = getopt_long(argc, argv, "m:c:i:w:s:g:t:h", longs, NULL)) != -1) {
        switch (ch) {
        case 'm': o->master = optarg; break;
        case 'c': o->count = strtoull(optarg, NULL, 0); break;
        case 'i': o->iters = atoi(optarg); break;
        case 'w': o->world_min = atoi(optarg); break;
        case 's': o->start_world = atoi(optarg); break;
        case 'g': o->group = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 't': o->wait_ms = atoi(optarg); break;
        default: usage(argv[0]);
        }
    }
    if (!o->master || o->count == 0 || o->iters < 0 || o->world_min < 1) usage(argv[0]);
}

int main(int argc, char **argv)
{
    options o;
    parse(argc, argv, &o);
    setvbuf(stdout, NULL, _IOLBF, 0);

    eccl_comm_params params;
    eccl_comm_params_init(&params);
    params.master_addr = o.master;
    params.peer_group = o.group;
    eccl_comm *comm = NULL;
    eccl_result rc = eccl_comm_create(&params, &comm);
    if (rc == ECCL_OK) rc = eccl_comm_connect(comm);
    if (rc != ECCL_OK) {
        fprintf(stderr, "eccl-worker: connect: %s\n", eccl_strerror(rc));
        eccl_comm_destroy(comm);
        return 1;
    }
    int64_t id = 0;
    eccl_comm_get_attr(comm, ECCL_ATTR_PEER_ID, &id);
    printf("event=connected peer=%lld pid=%d\n", (long long)id, (int)getpid());

    float *send = malloc(o.count * sizeof *send), *recv = malloc(o.count * sizeof *recv);
    if (!send || !recv) return 1;
    int status = 0, iter = 0, agreed = 0;
    double waiting_since = 0;
    while (iter < o.iters) {
        uint32_t pending = 0;
        rc = eccl_comm_peers_pending(comm, &pending);
        if (rc == ECCL_OK && pending > 0) {
            rc = eccl_comm_update_topology(comm);
            agreed = 0;
            /* Back to the top, where newcomers start: everyone asks again. */
            if (rc == ECCL_OK) continue;
        }
        if (rc == ECCL_OK && !agreed) {
            rc = agree_on_step(comm, &iter);
            agreed = rc == ECCL_OK;
            if (rc == ECCL_ERR_PEER_LOST) continue;
        }
        if (rc != ECCL_OK) {
            printf("event=error peer=%lld iter=%d what=membership error=\"%s\"\n", (long long)id,
                   iter, eccl_strerror(rc));
            status = 1;
            break;
        }
        int64_t world = 0;
        eccl_comm_get_attr(comm, ECCL_ATTR_WORLD_SIZE, &world);
        if (world < o.world_min || world < o.start_world) {
            if (waiting_since == 0) waiting_since = now_ms();
            if (now_ms() - waiting_since > o.wait_ms) {
                printf("event=gave_up peer=%lld iter=%d world=%lld\n", (long long)id, iter,
                       (long long)world);
                status = 1;
                break;
            }
            usleep(10000);
            continue;
        }
        waiting_since = 0;
        o.start_world = 0; /* only the first step waits for everyone */

        for (size_t i = 0; i < o.count; i++) {
            send[i] = contribution(iter, i);
            recv[i] = (float)iter; /* arbitrary content the call must not lose */
        }
        uint64_t before = fnv1a(recv, o.count);
        eccl_reduce_info info = {0};
        printf("event=begin peer=%lld iter=%d world=%lld\n", (long long)id, iter, (long long)world);
        double t0 = now_ms();
        rc = eccl_allreduce(comm, send, recv, o.count, ECCL_F32, ECCL_SUM, (uint64_t)iter, &info);
        double ms = now_ms() - t0;
        if (rc == ECCL_ERR_PEER_LOST || rc == ECCL_ERR_TOO_FEW_PEERS || rc == ECCL_ERR_TIMEOUT) {
            int restored = fnv1a(recv, o.count) == before;
            printf("event=%s peer=%lld iter=%d world=%lld ms=%.1f restored=%s\n",
                   rc == ECCL_ERR_PEER_LOST ? "peer_lost"
                   : rc == ECCL_ERR_TIMEOUT  ? "timeout"
                                             : "too_few_peers",
                   (long long)id, iter, (long long)world, ms, restored ? "yes" : "NO");
            if (!restored) status = 1;
            if (rc == ECCL_ERR_TOO_FEW_PEERS) usleep(10000);
            continue; /* retry this iteration with whoever is left */
        }
        if (rc != ECCL_OK) {
            printf("event=error peer=%lld iter=%d error=\"%s\"\n", (long long)id, iter,
                   eccl_strerror(rc));
            status = 1;
            break;
        }
        size_t wrong = 0;
        for (size_t i = 0; i < o.count; i++)
            wrong += recv[i] != (float)info.world_size * contribution(iter, i);
        printf("event=ok peer=%lld iter=%d world=%u ms=%.1f wrong=%zu hash=%016llx\n",
               (long long)id, iter, info.world_size, ms, wrong,
               (unsigned long long)fnv1a(recv, o.count));
        if (wrong) status = 1;
        iter++;
    }
    free(send);
    free(recv);
    eccl_comm_destroy(comm);
    printf("event=exit peer=%lld status=%d\n", (long long)id, status);
    return status;
}
