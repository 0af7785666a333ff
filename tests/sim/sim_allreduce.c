/* The core on SimGrid: a master and 4 ranks as actors on a flat cluster.
 *
 * Each rank connects, is admitted until the world is 4, runs three f32 SUM
 * all-reduces with real bytes and checks every element bit for bit. During
 * the fourth, node-4 is crashed (host off); the survivors must fail with
 * ECCL_ERR_PEER_LOST, find their buffer exactly as before the call, and
 * succeed on retry with world 3. Every line carries the simulated time, so
 * two runs print the same bytes.
 *
 * Each good tag also runs a small all-reduce (SMALL_COUNT elements,
 * checked the same way), so that sizes below the recursive all-reduce's
 * halving threshold run too.
 *
 * Usage: sim_allreduce PLATFORM.xml [LOG_LEVEL 0-5] [ECCL_ALGO] [SimGrid --cfg=...]
 * ECCL_ALGO (e.g. allreduce=recursive) forces the ranks' algorithm, which
 * every call must then report. Exit status: 0 when every check passed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_common.h"

#define NRANKS 4
#define COUNT (256u * 1024u) /* f32 elements: 1 MiB per rank */
#define VICTIM 4             /* the rank on node-4 dies ... */
#define KILL_TAG 3           /* ... during this all-reduce */
#define GOOD_TAGS 3
#define SMALL_COUNT 1000u    /* f32 elements of the small all-reduces */
#define SMALL_TAG 100u       /* + the good tag */

typedef struct scenario {
    sim_base b;    /* first; done: ranks finished or killed, stop at NRANKS */
    int algo;      /* the algorithm ECCL_ALGO forces, -1: none */
    uint64_t op_ns;/* how long the victim's last good all-reduce took */
    uint64_t kill_at_ns;
} scenario;

typedef struct rank_arg {
    scenario *s;
    int idx; /* 1..NRANKS, also the host node-idx */
} rank_arg;

#define CHECK(s, who, cond, ...) SIM_CHECK(&(s)->b, who, cond, __VA_ARGS__)

/* An all-reduce algorithm's name as ECCL_ALGO spells it, or -1. */
static int algo_parse(const char *name)
{
    if (strcmp(name, "ring") == 0) return ECCL_ALGO_RING;
    if (strcmp(name, "tree") == 0) return ECCL_ALGO_TREE;
    if (strcmp(name, "recursive") == 0) return ECCL_ALGO_RECURSIVE;
    return -1;
}

/* Small integers: every order of float additions gives the exact sum, so the
 * expected result is known bit for bit whatever the ring order. */
static float value(int idx, uint32_t j, uint64_t tag)
{
    return (float)(idx * 1000 + (int)((j * 7u + (uint32_t)tag * 13u) % 4096u));
}

static void fill_n(float *buf, uint32_t count, int idx, uint64_t tag)
{
    for (uint32_t j = 0; j < count; j++) buf[j] = value(idx, j, tag);
}

static void fill(float *buf, int idx, uint64_t tag) { fill_n(buf, COUNT, idx, tag); }

/* Returns the number of elements that differ from the sum over `alive`. */
static uint32_t check_sum_n(const float *buf, uint32_t count, const int *alive, int n, uint64_t tag)
{
    uint32_t bad = 0;
    for (uint32_t j = 0; j < count; j++) {
        float want = 0;
        for (int i = 0; i < n; i++) want += value(alive[i], j, tag);
        if (memcmp(&want, &buf[j], sizeof want) != 0) bad++;
    }
    return bad;
}

static uint32_t check_sum(const float *buf, const int *alive, int n, uint64_t tag)
{
    return check_sum_n(buf, COUNT, alive, n, tag);
}

/* ---- actors -------------------------------------------------------------- */

static void killer_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    scenario *s = sg_actor_self_get_data();
    sg_actor_sleep_until((double)s->kill_at_ns / 1e9);
    eccl_sg_printf("killer", "crashing node-%d (host off) mid all-reduce", VICTIM);
    eccl_sg_world_kill_host(s->b.w, "node-4");
    s->b.done++;
}

static void rank_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    rank_arg *a = sg_actor_self_get_data();
    scenario *s = a->s;
    char who[16];
    snprintf(who, sizeof who, "rank%d", a->idx);

    /* Staggered arrivals: the first rank founds the group, the others join. */
    sg_actor_sleep_for(0.001 * a->idx);
    eccl_comm_params p;
    eccl_comm_params_init(&p);
    p.master_addr = s->b.master_addr;
    p.p2p_host = sg_host_self_get_name();
    eccl_comm *c = NULL;
    eccl_result rc = eccl_sg_comm_create(s->b.w, &p, &c);
    if (rc == ECCL_OK) rc = eccl_comm_connect(c);
    CHECK(s, who, rc == ECCL_OK, "connect: %s", eccl_strerror(rc));
    if (rc != ECCL_OK) goto out;
    int64_t id = 0, rank = 0, world = 0;
    eccl_comm_get_attr(c, ECCL_ATTR_PEER_ID, &id);
    eccl_sg_printf(who, "connected as peer %lld", (long long)id);
    rc = sim_admit(c, NRANKS);
    CHECK(s, who, rc == ECCL_OK, "admission: %s", eccl_strerror(rc));
    if (rc != ECCL_OK) goto out;
    eccl_comm_get_attr(c, ECCL_ATTR_RANK, &rank);
    eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &world);
    eccl_sg_printf(who, "admitted: rank %lld of %lld", (long long)rank, (long long)world);

    float *buf = malloc(COUNT * sizeof *buf), *before = malloc(COUNT * sizeof *before);
    if (!buf || !before) abort();
    int all[NRANKS] = {1, 2, 3, 4}, survivors[NRANKS - 1] = {1, 2, 3};

    for (uint64_t tag = 0; tag < GOOD_TAGS; tag++) {
        fill(buf, a->idx, tag);
        eccl_reduce_info info = {0};
        uint64_t t0 = eccl_sg_now_ns();
        rc = eccl_allreduce(c, buf, buf, COUNT, ECCL_F32, ECCL_SUM, tag, &info);
        uint64_t dt = eccl_sg_now_ns() - t0;
        uint32_t bad = rc == ECCL_OK ? check_sum(buf, all, NRANKS, tag) : COUNT;
        CHECK(s, who, rc == ECCL_OK && bad == 0 && info.world_size == NRANKS,
              "tag %llu: %s, world %u, %u wrong elements", (unsigned long long)tag,
              eccl_strerror(rc), info.world_size, bad);
        eccl_sg_printf(who, "tag %llu: %s world %u in %.3f ms tx %llu rx %llu hash %016llx",
                       (unsigned long long)tag, eccl_strerror(rc), info.world_size, sim_ms(dt),
                       (unsigned long long)info.tx_bytes, (unsigned long long)info.rx_bytes,
                       (unsigned long long)sim_fnv1a(buf, COUNT * sizeof *buf));
        if (a->idx == VICTIM) s->op_ns = dt;
        CHECK(s, who, s->algo < 0 || info.algorithm == (uint32_t)s->algo, "tag %llu ran algorithm %u",
              (unsigned long long)tag, info.algorithm);
        /* A small one: below the recursive all-reduce's halving size. */
        fill_n(before, SMALL_COUNT, a->idx, SMALL_TAG + tag);
        rc = eccl_allreduce(c, before, buf, SMALL_COUNT, ECCL_F32, ECCL_SUM, SMALL_TAG + tag, &info);
        bad = rc == ECCL_OK ? check_sum_n(buf, SMALL_COUNT, all, NRANKS, SMALL_TAG + tag) : SMALL_COUNT;
        CHECK(s, who, rc == ECCL_OK && bad == 0 && (s->algo < 0 || info.algorithm == (uint32_t)s->algo),
              "small tag %llu: %s, algorithm %u, %u wrong elements", (unsigned long long)(SMALL_TAG + tag),
              eccl_strerror(rc), info.algorithm, bad);
        eccl_sg_printf(who, "small tag %llu: %s algorithm %u hash %016llx", (unsigned long long)(SMALL_TAG + tag),
                       eccl_strerror(rc), info.algorithm,
                       (unsigned long long)sim_fnv1a(buf, SMALL_COUNT * sizeof *buf));
    }

    uint64_t tag = KILL_TAG;
    fill(buf, a->idx, tag);
    memcpy(before, buf, COUNT * sizeof *buf);
    if (a->idx == VICTIM) {
        s->kill_at_ns = eccl_sg_now_ns() + s->op_ns / 2;
        sim_start_actor("killer", "node-0", killer_main, s);
        rc = eccl_allreduce(c, buf, buf, COUNT, ECCL_F32, ECCL_SUM, tag, NULL);
        /* Only reached if the crash came too late. */
        CHECK(s, who, 0, "victim finished tag %llu (%s) before the crash",
              (unsigned long long)tag, eccl_strerror(rc));
        s->b.done++; /* the killer still counts the host */
        goto out_bufs;
    }
    for (int attempt = 1;; attempt++) {
        eccl_reduce_info info = {0};
        uint64_t t0 = eccl_sg_now_ns();
        rc = eccl_allreduce(c, buf, buf, COUNT, ECCL_F32, ECCL_SUM, tag, &info);
        uint64_t dt = eccl_sg_now_ns() - t0;
        if (rc == ECCL_ERR_PEER_LOST) {
            int same = memcmp(buf, before, COUNT * sizeof *buf) == 0;
            CHECK(s, who, same, "tag %llu: PEER_LOST but the buffer changed",
                  (unsigned long long)tag);
            eccl_sg_printf(who, "tag %llu attempt %d: %s after %.3f ms, buffer %s",
                           (unsigned long long)tag, attempt, eccl_strerror(rc), sim_ms(dt),
                           same ? "restored" : "CHANGED");
            CHECK(s, who, attempt < 3, "tag %llu: %d failed attempts", (unsigned long long)tag,
                  attempt);
            if (attempt < 3) continue;
            break;
        }
        uint32_t bad = rc == ECCL_OK ? check_sum(buf, survivors, NRANKS - 1, tag) : COUNT;
        CHECK(s, who, rc == ECCL_OK && bad == 0 && info.world_size == NRANKS - 1,
              "tag %llu attempt %d: %s, world %u, %u wrong elements", (unsigned long long)tag,
              attempt, eccl_strerror(rc), info.world_size, bad);
        CHECK(s, who, attempt > 1, "tag %llu: succeeded without noticing the crash",
              (unsigned long long)tag);
        CHECK(s, who, s->algo < 0 || info.algorithm == (uint32_t)s->algo, "the retry ran algorithm %u",
              info.algorithm);
        eccl_sg_printf(who, "tag %llu attempt %d: %s world %u in %.3f ms hash %016llx",
                       (unsigned long long)tag, attempt, eccl_strerror(rc), info.world_size,
                       sim_ms(dt), (unsigned long long)sim_fnv1a(buf, COUNT * sizeof *buf));
        break;
    }
    eccl_sg_printf(who, "done");
    s->b.done++;
out_bufs:
    free(buf);
    free(before);
    eccl_comm_destroy(c);
    return;
out:
    eccl_comm_destroy(c);
    s->b.done++;
}

int main(int argc, char **argv)
{
    if (sim_setup(&argc, argv) != 0) return 2;
    scenario s = {.b = {.master_addr = "node-0:5000", .stop_at = NRANKS}, .algo = -1};
    int level = argc > 2 ? atoi(argv[2]) : ECCL_LOG_WARN;
    if (eccl_sg_world_create(level, &s.b.w) != ECCL_OK) return 1;
    if (argc > 3) {
        /* "allreduce=NAME": the algorithm every call must report. */
        const char *eq = strchr(argv[3], '=');
        s.algo = eq ? algo_parse(eq + 1) : -1;
        if (strncmp(argv[3], "allreduce=", 10) != 0 || s.algo < 0 ||
            eccl_sg_world_set_algo(s.b.w, argv[3]) != ECCL_OK) {
            fprintf(stderr, "sim_allreduce: ECCL_ALGO \"%s\" is not allreduce=ring|tree|recursive\n", argv[3]);
            return 2;
        }
        eccl_sg_printf("main", "ECCL_ALGO=%s", argv[3]);
    }
    rank_arg args[NRANKS];
    sim_start_actor("master", "node-0", sim_master_main, &s);
    for (int i = 0; i < NRANKS; i++) {
        char name[16], host[16];
        args[i].s = &s;
        args[i].idx = i + 1;
        snprintf(name, sizeof name, "rank%d", i + 1);
        snprintf(host, sizeof host, "node-%d", i + 1);
        sim_start_actor(name, host, rank_main, &args[i]);
    }
    simgrid_run();
    eccl_sg_printf("main", "simulation over: %d ranks done, %d failed checks", s.b.done,
                   s.b.failures);
    eccl_sg_world_destroy(s.b.w);
    fflush(stdout);
    return s.b.failures == 0 && s.b.done == NRANKS ? 0 : 1;
}
