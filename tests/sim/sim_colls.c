/* The core's other collectives on SimGrid: a master and 4 ranks as actors
 * on a flat cluster, as sim_allreduce does for all-reduce.
 *
 * World 4, every output checked element by element (real bytes, f32 small
 * integers, so every sum is exact whatever the order), every byte of the
 * output buffer outside the result checked untouched: an all-gather, a
 * reduce-scatter, a broadcast and a reduce from non-zero roots, an
 * all-gatherv with uneven blocks (one empty, one of several slices, gaps
 * between them), a barrier whose ranks enter at different times, an
 * all-to-all (every block from its own sender for its own receiver) and a
 * ring of sends and receives over peer links.
 *
 * Then node-4 is crashed (host off) halfway through an all-gather of 3 MiB
 * per rank, timed from the good all-gather of that size before it. The
 * survivors must fail with ECCL_ERR_PEER_LOST with the output buffer bit
 * for bit as before the call, re-read their rank and world (which waits out
 * the view change) and get the exact world-3 result on retry. node-4 comes
 * back as a new process and is admitted; the same crash hits it 3/4 of the
 * way through a reduce-scatter (4 MiB per rank in, 1 MiB out), when some
 * survivors have written output that must be put back; same checks.
 *
 * Replicated outputs (all-gather, broadcast, all-gatherv, the retried
 * all-gather) are hashed on every rank, and main checks the hashes agree.
 * Every line carries the simulated time, so two runs print the same bytes.
 *
 * Broadcast and reduce run the chain (ECCL_ALGO=broadcast=chain,
 * reduce=chain, a setting of the simulated world), or with ALGO
 * "binomial" the binomial tree over peer links, and then the crashes hit
 * them instead: node-4 (rank 3)
 * heads rank 0's subtree in trees rooted at rank 1, so it is crashed
 * halfway through a broadcast from rank 1 (rank 0 cannot get all of it),
 * comes back, and is crashed halfway through a reduce to rank 1 (the root
 * cannot get rank 3's partial): every survivor fails with its output as
 * before and gets the exact world-3 result on retry.
 *
 * With ALGO "bruck" the all-gathers (the first crash's included) run
 * Bruck's rounds over peer links instead of the ring (the same bytes per
 * rank: world - 1 blocks each way), the rest as in the default run.
 * With ALGO "recursive" the reduce-scatters run recursive halving over
 * peer links (coll/rec_reduce_scatter.h; ECCL_ALGO=reduce_scatter=
 * recursive), the crash of node-4 mid reduce-scatter included; its bytes
 * on the wire are not the ring's (an extra rank sends its whole input),
 * so only the algorithm is checked in info there.
 *
 * Usage: sim_colls PLATFORM.xml [LOG_LEVEL 0-5] [ALGO chain|binomial|bruck|recursive] [SimGrid --cfg=...]
 * Exit status: 0 when every check passed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_common.h"

#define NRANKS 4
#define VICTIM 4 /* the rank on node-4 dies, twice */
/* f32 elements. All-gather: 3 MiB and a partial slice per rank. */
#define AG_COUNT (3u * 262144u + 1000u)
#define RS_COUNT (262144u + 777u) /* reduce-scatter: per rank out, x world in */
#define BC_COUNT 300001u          /* broadcast, reduce: two slices */
#define BC_ROOT 2u
#define RD_ROOT 1u
#define A2A_COUNT 100003u /* all-to-all: per block */
#define P2P_COUNT 300001u /* send/receive: two slices */
/* Every output lives in a buffer this large; all of it is checked. */
#define REGION ((size_t)NRANKS * AG_COUNT)
#define SEND_MAX ((size_t)NRANKS * RS_COUNT) /* the largest input */
#define WATCHDOG_S 20.0 /* simulated: the whole run takes some 30 ms */

/* Tags, one per call (the retries of a failed call reuse its tag). */
enum {
    T_AG = 0,  /* all-gather, world 4 (timed on node-4) */
    T_RS,      /* reduce-scatter, world 4 */
    T_BC,      /* broadcast from rank BC_ROOT */
    T_RD,      /* reduce to rank RD_ROOT */
    T_AGV,     /* all-gatherv */
    T_BAR,     /* barrier */
    T_KAG,     /* all-gather, node-4 crashed halfway */
    T_RS2,     /* reduce-scatter after node-4 rejoined (timed there) */
    T_KRS,     /* reduce-scatter, node-4 crashed halfway */
    T_BC1,     /* binomial: broadcast from rank 1 (timed on node-4) */
    T_A2A,     /* all-to-all, world 4 */
    T_P2P,     /* every rank sends to the next and receives from the previous */
    NTAGS
};

/* The all-gatherv's layout (world 4): an uneven block, an empty one, one of
 * two slices, a small one; gaps before, between and after them. */
static const size_t agv_counts[NRANKS] = {70001, 0, 262149, 4567};
static const size_t agv_displs[NRANKS] = {5, 70013, 70017, 332177};
#define AGV_END 336761u /* past the last block, with a gap */
_Static_assert(SEND_MAX >= (size_t)NRANKS * A2A_COUNT && SEND_MAX >= P2P_COUNT &&
                   REGION >= (size_t)NRANKS * A2A_COUNT,
               "all-to-all and send/receive fit");
_Static_assert(SEND_MAX >= AG_COUNT && SEND_MAX >= BC_COUNT && SEND_MAX >= 262149u &&
                   AGV_END <= REGION && BC_COUNT <= REGION,
               "every input fits in send, every output in recv");

typedef struct scenario scenario;

typedef struct rank_arg {
    scenario *s;
    int idx;      /* 1..NRANKS, also the host node-idx */
    int newcomer; /* node-4's second process */
} rank_arg;

struct scenario {
    sim_base b; /* first; done: survivors finished + crashes; stop at 5 */
    int finished; /* survivors that reached the end of the script */
    int kills;
    uint64_t victim_ns[NTAGS]; /* how long node-4's good calls took */
    uint64_t kill_at_ns;
    const char *kill_what; /* the collective the crash hits */
    uint64_t hash[NTAGS][NRANKS + 1]; /* output hash by tag and node */
    int hashed[NTAGS][NRANKS + 1];
    uint64_t bar_enter_ns[NRANKS + 1];
    rank_arg again; /* node-4's second process */
    float *sentinel; /* REGION elements: sentinel(i) at i */
    int bino;        /* broadcast and reduce run the binomial tree */
    int bruck;       /* all-gathers run Bruck's rounds */
    int rec_rs;      /* reduce-scatter runs recursive halving */
};

#define CHECK(s, who, cond, ...) SIM_CHECK(&(s)->b, who, cond, __VA_ARGS__)

/* Small integers: every order of float additions gives the exact sum (four
 * of them stay far below 2^24), so results are known bit for bit. Inputs
 * depend on the sender's rank: a block in the wrong place shows. */
static float value(int64_t rank, size_t j, uint64_t tag)
{
    return (float)(rank * 1000 + (int64_t)((j * 7u + tag * 13u) % 4096u));
}

/* What an output buffer holds before a call: negative, so never a value.
 * main keeps one copy of the whole region (scenario.sentinel). */
static float sentinel(size_t i) { return -(float)(1 + i % 1021u); }

static int same(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static float sum(int64_t world, size_t j, uint64_t tag)
{
    float v = 0;
    for (int64_t q = 0; q < world; q++) v += value(q, j, tag);
    return v;
}

/* ---- one rank's view and buffers ----------------------------------------- */

typedef struct rk {
    scenario *s;
    eccl_comm *c;
    const char *who;
    int idx;
    int64_t rank, world;
    float *send; /* SEND_MAX elements */
    float *recv; /* REGION elements */
} rk;

/* Rank and world of the ring the next call runs on (after a PEER_LOST this
 * waits for the new ring). */
static eccl_result layout(rk *k)
{
    eccl_result rc = eccl_comm_get_attr(k->c, ECCL_ATTR_RANK, &k->rank);
    if (rc == ECCL_OK) rc = eccl_comm_get_attr(k->c, ECCL_ATTR_WORLD_SIZE, &k->world);
    CHECK(k->s, k->who, rc == ECCL_OK, "rank and world: %s", eccl_strerror(rc));
    eccl_sg_printf(k->who, "rank %lld of %lld", (long long)k->rank, (long long)k->world);
    return rc;
}

static void fill_sentinel(const rk *k)
{
    memcpy(k->recv, k->s->sentinel, REGION * sizeof(float));
}

/* Elements of recv[from, to) that are not the sentinel. */
static size_t untouched_bad(const rk *k, size_t from, size_t to)
{
    if (from >= to ||
        memcmp(k->recv + from, k->s->sentinel + from, (to - from) * sizeof(float)) == 0)
        return 0;
    size_t bad = 0;
    for (size_t i = from; i < to; i++) bad += !same(k->recv[i], sentinel(i));
    return bad;
}

/* A collective under test: inputs for the caller's rank and world (output
 * buffer all sentinel), the call, the number of wrong elements of the whole
 * output buffer (result, and sentinel everywhere else), and how many
 * elements from the start of recv make the output (hashed). The ring pass
 * algorithm it must report and, for the one-ring collectives, the block it
 * moves world - 1 times each way (0: not checked). */
typedef struct coll {
    const char *name;
    uint32_t algo;
    size_t block;
    void (*prepare)(rk *k, uint64_t tag);
    eccl_result (*run)(rk *k, uint64_t tag, eccl_reduce_info *info);
    size_t (*check)(const rk *k, uint64_t tag);
    size_t (*out_count)(const rk *k);
} coll;

/* all-gather: block b of recv is rank b's send */
static void ag_prepare(rk *k, uint64_t tag)
{
    for (size_t j = 0; j < AG_COUNT; j++) k->send[j] = value(k->rank, j, tag);
    fill_sentinel(k);
}
static eccl_result ag_run(rk *k, uint64_t tag, eccl_reduce_info *info)
{
    return eccl_allgather(k->c, k->send, k->recv, AG_COUNT, ECCL_F32, tag, info);
}
static size_t ag_check(const rk *k, uint64_t tag)
{
    size_t bad = 0;
    for (int64_t b = 0; b < k->world; b++)
        for (size_t j = 0; j < AG_COUNT; j++)
            bad += !same(k->recv[(size_t)b * AG_COUNT + j], value(b, j, tag));
    return bad + untouched_bad(k, (size_t)k->world * AG_COUNT, REGION);
}
static size_t ag_out(const rk *k) { return (size_t)k->world * AG_COUNT; }

/* reduce-scatter: recv is block `rank` of the sum of every rank's send */
static void rs_prepare(rk *k, uint64_t tag)
{
    for (size_t j = 0; j < (size_t)k->world * RS_COUNT; j++) k->send[j] = value(k->rank, j, tag);
    fill_sentinel(k);
}
static eccl_result rs_run(rk *k, uint64_t tag, eccl_reduce_info *info)
{
    return eccl_reduce_scatter(k->c, k->send, k->recv, RS_COUNT, ECCL_F32, ECCL_SUM, tag, info);
}
static size_t rs_check(const rk *k, uint64_t tag)
{
    size_t bad = 0, base = (size_t)k->rank * RS_COUNT;
    for (size_t j = 0; j < RS_COUNT; j++) bad += !same(k->recv[j], sum(k->world, base + j, tag));
    return bad + untouched_bad(k, RS_COUNT, REGION);
}
static size_t rs_out(const rk *k) { return RS_COUNT; }

/* broadcast: root's send in everyone's recv (send NULL off the root) */
static void bc_prepare_from(rk *k, uint64_t tag, uint32_t root)
{
    for (size_t j = 0; j < BC_COUNT; j++) k->send[j] = k->rank == (int64_t)root ? value(root, j, tag) : 0;
    fill_sentinel(k);
}
static eccl_result bc_run_from(rk *k, uint64_t tag, eccl_reduce_info *info, uint32_t root)
{
    const float *send = k->rank == (int64_t)root ? k->send : NULL;
    return eccl_broadcast(k->c, send, k->recv, BC_COUNT, ECCL_F32, root, tag, info);
}
static size_t bc_check_from(const rk *k, uint64_t tag, uint32_t root)
{
    size_t bad = 0;
    for (size_t j = 0; j < BC_COUNT; j++) bad += !same(k->recv[j], value(root, j, tag));
    return bad + untouched_bad(k, BC_COUNT, REGION);
}
static void bc_prepare(rk *k, uint64_t tag) { bc_prepare_from(k, tag, BC_ROOT); }
static eccl_result bc_run(rk *k, uint64_t tag, eccl_reduce_info *info) { return bc_run_from(k, tag, info, BC_ROOT); }
static size_t bc_check(const rk *k, uint64_t tag) { return bc_check_from(k, tag, BC_ROOT); }
static size_t bc_out(const rk *k) { return BC_COUNT; }
/* ... from rank RD_ROOT (1), where rank 3 heads rank 0's binomial subtree */
static void bc1_prepare(rk *k, uint64_t tag) { bc_prepare_from(k, tag, RD_ROOT); }
static eccl_result bc1_run(rk *k, uint64_t tag, eccl_reduce_info *info) { return bc_run_from(k, tag, info, RD_ROOT); }
static size_t bc1_check(const rk *k, uint64_t tag) { return bc_check_from(k, tag, RD_ROOT); }

/* reduce: the sum in the root's recv; every other recv untouched */
static void rd_prepare(rk *k, uint64_t tag)
{
    for (size_t j = 0; j < BC_COUNT; j++) k->send[j] = value(k->rank, j, tag);
    fill_sentinel(k);
}
static eccl_result rd_run(rk *k, uint64_t tag, eccl_reduce_info *info)
{
    return eccl_reduce(k->c, k->send, k->recv, BC_COUNT, ECCL_F32, ECCL_SUM, RD_ROOT, tag, info);
}
static size_t rd_check(const rk *k, uint64_t tag)
{
    if (k->rank != (int64_t)RD_ROOT) return untouched_bad(k, 0, REGION);
    size_t bad = 0;
    for (size_t j = 0; j < BC_COUNT; j++) bad += !same(k->recv[j], sum(k->world, j, tag));
    return bad + untouched_bad(k, BC_COUNT, REGION);
}

/* all-gatherv (world 4): rank b's agv_counts[b] elements at agv_displs[b] */
static void agv_prepare(rk *k, uint64_t tag)
{
    for (size_t j = 0; j < agv_counts[k->rank]; j++) k->send[j] = value(k->rank, j, tag);
    fill_sentinel(k);
}
static eccl_result agv_run(rk *k, uint64_t tag, eccl_reduce_info *info)
{
    return eccl_allgatherv(k->c, k->send, k->recv, agv_counts, agv_displs, ECCL_F32, tag, info);
}
static size_t agv_check(const rk *k, uint64_t tag)
{
    size_t bad = 0, at = 0;
    for (int b = 0; b < NRANKS; b++) {
        bad += untouched_bad(k, at, agv_displs[b]);
        for (size_t j = 0; j < agv_counts[b]; j++)
            bad += !same(k->recv[agv_displs[b] + j], value(b, j, tag));
        at = agv_displs[b] + agv_counts[b];
    }
    return bad + untouched_bad(k, at, REGION);
}
static size_t agv_out(const rk *k) { return AGV_END; }

/* all-to-all: rank r's block for rank d holds value(r * NRANKS + d) */
static void a2a_prepare(rk *k, uint64_t tag)
{
    for (int64_t d = 0; d < k->world; d++)
        for (size_t j = 0; j < A2A_COUNT; j++)
            k->send[(size_t)d * A2A_COUNT + j] = value(k->rank * NRANKS + d, j, tag);
    fill_sentinel(k);
}
static eccl_result a2a_run(rk *k, uint64_t tag, eccl_reduce_info *info)
{
    return eccl_alltoall(k->c, k->send, k->recv, A2A_COUNT, ECCL_F32, tag, info);
}
static size_t a2a_check(const rk *k, uint64_t tag)
{
    size_t bad = 0;
    for (int64_t s = 0; s < k->world; s++)
        for (size_t j = 0; j < A2A_COUNT; j++)
            bad += !same(k->recv[(size_t)s * A2A_COUNT + j], value(s * NRANKS + k->rank, j, tag));
    return bad + untouched_bad(k, (size_t)k->world * A2A_COUNT, REGION);
}
static size_t a2a_out(const rk *k) { return (size_t)k->world * A2A_COUNT; }

/* send/receive: to the next rank, from the previous one, both at once */
static void p2p_prepare(rk *k, uint64_t tag)
{
    for (size_t j = 0; j < P2P_COUNT; j++) k->send[j] = value(k->rank, j, tag);
    fill_sentinel(k);
}
static eccl_result p2p_run(rk *k, uint64_t tag, eccl_reduce_info *info)
{
    uint32_t n = (uint32_t)k->world, me = (uint32_t)k->rank;
    eccl_request *s, *r;
    eccl_result rc = eccl_send_async(k->c, k->send, P2P_COUNT, ECCL_F32, (me + 1) % n, tag, &s);
    if (rc != ECCL_OK) return rc;
    rc = eccl_recv_async(k->c, k->recv, P2P_COUNT, ECCL_F32, (me + n - 1) % n, tag, &r);
    eccl_result rs = eccl_wait(s, NULL);
    if (rc == ECCL_OK) rc = eccl_wait(r, info);
    return rc != ECCL_OK ? rc : rs;
}
static size_t p2p_check(const rk *k, uint64_t tag)
{
    size_t bad = 0;
    for (size_t j = 0; j < P2P_COUNT; j++) bad += !same(k->recv[j], value((k->rank + k->world - 1) % k->world, j, tag));
    return bad + untouched_bad(k, P2P_COUNT, REGION);
}
static size_t p2p_out(const rk *k) { return P2P_COUNT; }

static const coll ALLTOALL = {"alltoall", ECCL_ALGO_PAIRWISE, A2A_COUNT, a2a_prepare, a2a_run, a2a_check, a2a_out};
static const coll SENDRECV = {"sendrecv", ECCL_ALGO_DIRECT, 0, p2p_prepare, p2p_run, p2p_check, p2p_out};

static const coll ALLGATHER = {"allgather", ECCL_ALGO_RING, AG_COUNT,
                               ag_prepare, ag_run, ag_check, ag_out};
static const coll REDUCE_SCATTER = {"reduce_scatter", ECCL_ALGO_RING, RS_COUNT,
                                    rs_prepare, rs_run, rs_check, rs_out};
static const coll BROADCAST = {"broadcast", ECCL_ALGO_CHAIN, 0,
                               bc_prepare, bc_run, bc_check, bc_out};
static const coll REDUCE = {"reduce", ECCL_ALGO_CHAIN, 0, rd_prepare, rd_run, rd_check, bc_out};
static const coll BROADCAST1 = {"broadcast", ECCL_ALGO_CHAIN, 0, bc1_prepare, bc1_run, bc1_check, bc_out};
static const coll ALLGATHERV = {"allgatherv", ECCL_ALGO_RING, 0,
                                agv_prepare, agv_run, agv_check, agv_out};

/* What the call reports: the world it was laid out on, the algorithm (the
 * rooted ones' chain is the binomial tree in binomial runs), and for a
 * one-ring collective world - 1 blocks sent and received. */
static int info_ok(const rk *k, const coll *cl, const eccl_reduce_info *info)
{
    uint64_t wire = (uint64_t)(k->world - 1) * cl->block * sizeof(float);
    uint32_t algo = cl->algo == ECCL_ALGO_CHAIN && k->s->bino ? ECCL_ALGO_BINOMIAL : cl->algo;
    if (k->s->bruck && (cl == &ALLGATHER || cl == &ALLGATHERV)) algo = ECCL_ALGO_BRUCK;
    if (cl == &REDUCE_SCATTER && k->s->rec_rs)
        return info->world_size == k->world && info->algorithm == ECCL_ALGO_RECURSIVE;
    return info->world_size == k->world && info->algorithm == algo &&
           (cl->block == 0 || (info->tx_bytes == wire && info->rx_bytes == wire));
}

static const char *algo_name(uint32_t a)
{
    return a == ECCL_ALGO_RING    ? "ring"
           : a == ECCL_ALGO_TREE  ? "tree"
           : a == ECCL_ALGO_CHAIN ? "chain"
           : a == ECCL_ALGO_BINOMIAL ? "binomial"
           : a == ECCL_ALGO_PAIRWISE ? "pairwise"
           : a == ECCL_ALGO_DIRECT ? "direct"
           : a == ECCL_ALGO_RECURSIVE ? "recursive"
           : a == ECCL_ALGO_BRUCK ? "bruck"
                                  : "?";
}

static uint64_t out_hash(const rk *k, const coll *cl)
{
    return sim_fnv1a64(k->recv, cl->out_count(k) * sizeof(float));
}

/* Records this node's output hash of a call, for main's comparison. */
static void record(rk *k, uint64_t tag, uint64_t h)
{
    k->s->hash[tag][k->idx] = h;
    k->s->hashed[tag][k->idx] = 1;
}

/* A call that must succeed on the current world; returns its duration. */
static uint64_t checked(rk *k, const coll *cl, uint64_t tag)
{
    cl->prepare(k, tag);
    eccl_reduce_info info = {0};
    uint64_t t0 = eccl_sg_now_ns();
    eccl_result rc = cl->run(k, tag, &info);
    uint64_t dt = eccl_sg_now_ns() - t0;
    size_t bad = rc == ECCL_OK ? cl->check(k, tag) : REGION;
    CHECK(k->s, k->who, rc == ECCL_OK && bad == 0 && info_ok(k, cl, &info),
          "%s tag %llu: %s, world %u, %s, tx %llu rx %llu, %zu wrong elements", cl->name,
          (unsigned long long)tag, eccl_strerror(rc), info.world_size, algo_name(info.algorithm),
          (unsigned long long)info.tx_bytes, (unsigned long long)info.rx_bytes, bad);
    uint64_t h = out_hash(k, cl);
    eccl_sg_printf(k->who, "%s tag %llu: %s world %u %s in %.3f ms tx %llu rx %llu out %016llx",
                   cl->name, (unsigned long long)tag, eccl_strerror(rc), info.world_size,
                   algo_name(info.algorithm), sim_ms(dt), (unsigned long long)info.tx_bytes,
                   (unsigned long long)info.rx_bytes, (unsigned long long)h);
    record(k, tag, h);
    return dt;
}

/* ---- the crash ------------------------------------------------------------ */

static void killer2_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    scenario *s = sg_actor_self_get_data();
    sg_actor_sleep_until((double)s->kill_at_ns / 1e9);
    eccl_sg_printf("killer", "crashing node-%d (host off) mid %s", VICTIM, s->kill_what);
    eccl_sg_world_kill_host(s->b.w, "node-4");
    s->kills++;
    s->b.done++;
}

static void rank_main(int argc, char **argv);

/* Crashes node-4 mid all-gather, then brings it back with a new process. */
static void killer1_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    scenario *s = sg_actor_self_get_data();
    sg_actor_sleep_until((double)s->kill_at_ns / 1e9);
    eccl_sg_printf("killer", "crashing node-%d (host off) mid %s", VICTIM, s->kill_what);
    eccl_sg_world_kill_host(s->b.w, "node-4");
    s->kills++;
    s->b.done++;
    sg_actor_sleep_for(0.001);
    eccl_sg_printf("killer", "node-%d back on: a new process joins", VICTIM);
    eccl_sg_world_host_on(s->b.w, "node-4");
    s->again = (rank_arg){.s = s, .idx = VICTIM, .newcomer = 1};
    sim_start_actor("rank4b", "node-4", rank_main, &s->again);
}

/* node-4's side of a crashed call: the killer strikes `quarters` / 4 of the
 * way through, by how long the good call `good_tag` took. */
static void victim_call(rk *k, const coll *cl, uint64_t tag, uint64_t good_tag, int quarters,
                        xbt_main_func_t killer)
{
    cl->prepare(k, tag);
    k->s->kill_at_ns = eccl_sg_now_ns() + k->s->victim_ns[good_tag] * (uint64_t)quarters / 4;
    k->s->kill_what = cl->name;
    sim_start_actor("killer", "node-0", killer, k->s);
    eccl_result rc = cl->run(k, tag, NULL);
    /* Only reached if the crash came too late: wait for it. */
    CHECK(k->s, k->who, 0, "victim finished %s tag %llu (%s) before the crash", cl->name,
          (unsigned long long)tag, eccl_strerror(rc));
    sg_actor_sleep_for(1.0);
}

/* A survivor's side: PEER_LOST with the input as before (these calls are
 * out of place: their outputs are then unspecified, eccl.h), then the
 * world-3 result on retry, laid out on the re-read rank and world. */
static void survivor_call(rk *k, const coll *cl, uint64_t tag)
{
    cl->prepare(k, tag);
    float *before = malloc(SEND_MAX * sizeof(float));
    if (!before) abort();
    memcpy(before, k->send, SEND_MAX * sizeof(float));
    const uint64_t h0 = sim_fnv1a64(before, SEND_MAX * sizeof(float));
    const int64_t world0 = k->world;
    for (int attempt = 1;; attempt++) {
        eccl_reduce_info info = {0};
        uint64_t t0 = eccl_sg_now_ns();
        eccl_result rc = cl->run(k, tag, &info);
        uint64_t dt = eccl_sg_now_ns() - t0;
        if (rc == ECCL_ERR_PEER_LOST) {
            uint64_t h = sim_fnv1a64(k->send, SEND_MAX * sizeof(float));
            int kept = memcmp(k->send, before, SEND_MAX * sizeof(float)) == 0 && h == h0;
            CHECK(k->s, k->who, kept, "%s tag %llu: PEER_LOST but the input changed", cl->name,
                  (unsigned long long)tag);
            eccl_sg_printf(k->who,
                           "%s tag %llu attempt %d: %s after %.3f ms, input %016llx %s %016llx",
                           cl->name, (unsigned long long)tag, attempt, eccl_strerror(rc),
                           sim_ms(dt), (unsigned long long)h, kept ? "as before:" : "CHANGED, was",
                           (unsigned long long)h0);
            CHECK(k->s, k->who, attempt < 3, "%s tag %llu: %d failed attempts", cl->name,
                  (unsigned long long)tag, attempt);
            if (attempt >= 3 || layout(k) != ECCL_OK) break;
            cl->prepare(k, tag); /* the inputs of the new rank in the new world */
            continue;
        }
        size_t bad = rc == ECCL_OK ? cl->check(k, tag) : REGION;
        CHECK(k->s, k->who,
              rc == ECCL_OK && bad == 0 && k->world == world0 - 1 && info_ok(k, cl, &info),
              "%s tag %llu attempt %d: %s, world %u, %s, tx %llu rx %llu, %zu wrong elements",
              cl->name, (unsigned long long)tag, attempt, eccl_strerror(rc), info.world_size,
              algo_name(info.algorithm), (unsigned long long)info.tx_bytes,
              (unsigned long long)info.rx_bytes, bad);
        CHECK(k->s, k->who, attempt > 1, "%s tag %llu: succeeded without noticing the crash",
              cl->name, (unsigned long long)tag);
        uint64_t h = out_hash(k, cl);
        eccl_sg_printf(k->who,
                       "%s tag %llu attempt %d: %s world %u %s in %.3f ms tx %llu rx %llu "
                       "out %016llx",
                       cl->name, (unsigned long long)tag, attempt, eccl_strerror(rc),
                       info.world_size, algo_name(info.algorithm), sim_ms(dt),
                       (unsigned long long)info.tx_bytes, (unsigned long long)info.rx_bytes,
                       (unsigned long long)h);
        record(k, tag, h);
        break;
    }
    free(before);
}

/* ---- actors --------------------------------------------------------------- */

/* Ends a run that hangs (a check's failure that leaves a peer waiting). */
static void watchdog_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    scenario *s = sg_actor_self_get_data();
    sg_actor_daemonize(sg_actor_self());
    sg_actor_sleep_until(WATCHDOG_S);
    CHECK(s, "watchdog", 0, "still running after %.0f s of simulated time", WATCHDOG_S);
    sg_actor_kill_all();
}

/* Ranks enter at different times; none may leave before the last entered. */
static void barrier(rk *k, uint64_t tag)
{
    sg_actor_sleep_for(0.0002 * (double)(k->rank + 1));
    k->s->bar_enter_ns[k->idx] = eccl_sg_now_ns();
    uint64_t t0 = eccl_sg_now_ns();
    eccl_result rc = eccl_barrier(k->c, tag);
    uint64_t now = eccl_sg_now_ns(), last = 0;
    int entered = 0;
    for (int i = 1; i <= NRANKS; i++) {
        uint64_t e = k->s->bar_enter_ns[i];
        entered += e > 0 && e <= now;
        if (e > last) last = e;
    }
    CHECK(k->s, k->who, rc == ECCL_OK && entered == NRANKS,
          "barrier tag %llu: %s, left with %d of %d ranks entered", (unsigned long long)tag,
          eccl_strerror(rc), entered, NRANKS);
    eccl_sg_printf(k->who, "barrier tag %llu: %s in %.3f ms, last entry at %.3f ms",
                   (unsigned long long)tag, eccl_strerror(rc), sim_ms(now - t0), sim_ms(last));
}

/* The founders: every collective at world 4, node-4 crashed mid
 * all-gather, its new process admitted, crashed again mid reduce-scatter. */
static void script(rk *k, int victim)
{
    scenario *s = k->s;
    uint64_t dt = checked(k, &ALLGATHER, T_AG);
    if (victim) s->victim_ns[T_AG] = dt;
    checked(k, &REDUCE_SCATTER, T_RS);
    checked(k, &BROADCAST, T_BC);
    checked(k, &REDUCE, T_RD);
    checked(k, &ALLGATHERV, T_AGV);
    barrier(k, T_BAR);
    checked(k, &ALLTOALL, T_A2A);
    checked(k, &SENDRECV, T_P2P);
    /* Binomial: the first crash hits a broadcast from rank 1, timed by the
     * good one before it. */
    const coll *kill1 = s->bino ? &BROADCAST1 : &ALLGATHER;
    uint64_t good1 = s->bino ? T_BC1 : T_AG;
    if (s->bino) {
        dt = checked(k, &BROADCAST1, T_BC1);
        if (victim) s->victim_ns[T_BC1] = dt;
    }
    if (victim) {
        victim_call(k, kill1, T_KAG, good1, 2, killer1_main);
        return;
    }
    survivor_call(k, kill1, T_KAG);
    eccl_result rc = sim_admit(k->c, NRANKS);
    CHECK(s, k->who, rc == ECCL_OK, "readmission: %s", eccl_strerror(rc));
    if (rc != ECCL_OK || layout(k) != ECCL_OK) return;
    const coll *kill2 = s->bino ? &REDUCE : &REDUCE_SCATTER;
    checked(k, kill2, T_RS2);
    survivor_call(k, kill2, T_KRS);
    s->finished++;
}

/* node-4's second process: admitted into the running job, then crashed.
 * A reduce-scatter writes its output only in the last of its world - 1
 * steps, so halfway there would be nothing to restore: the crash comes 3/4
 * of the way, when two survivors hold some or all of their output but
 * not everyone's done token (at 19/20 the call would commit at world 4). */
static void newcomer_script(rk *k)
{
    /* Binomial: a reduce to rank 1, crashed halfway (the root's result
     * needs the victim's partial: every survivor must fail). Recursive
     * halving: a quarter of the way, in the first halving step (the timed
     * call opened the peer links too; halfway the crashed call is over). */
    const coll *kill2 = k->s->bino ? &REDUCE : &REDUCE_SCATTER;
    k->s->victim_ns[T_RS2] = checked(k, kill2, T_RS2);
    victim_call(k, kill2, T_KRS, T_RS2, k->s->bino ? 2 : k->s->rec_rs ? 1 : 3, killer2_main);
}

static void rank_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    rank_arg *a = sg_actor_self_get_data();
    scenario *s = a->s;
    char who[16];
    snprintf(who, sizeof who, a->newcomer ? "rank%db" : "rank%d", a->idx);

    /* Staggered arrivals: the first rank founds the group, the others join. */
    if (!a->newcomer) sg_actor_sleep_for(0.001 * a->idx);
    eccl_comm_params p;
    eccl_comm_params_init(&p);
    p.master_addr = s->b.master_addr;
    p.p2p_host = sg_host_self_get_name();
    rk k = {.s = s, .who = who, .idx = a->idx};
    eccl_result rc = eccl_sg_comm_create(s->b.w, &p, &k.c);
    if (rc == ECCL_OK) rc = eccl_comm_connect(k.c);
    CHECK(s, who, rc == ECCL_OK, "connect: %s", eccl_strerror(rc));
    if (rc == ECCL_OK) {
        int64_t id = 0;
        eccl_comm_get_attr(k.c, ECCL_ATTR_PEER_ID, &id);
        eccl_sg_printf(who, "connected as peer %lld", (long long)id);
        rc = sim_admit(k.c, NRANKS);
        CHECK(s, who, rc == ECCL_OK, "admission: %s", eccl_strerror(rc));
    }
    if (rc == ECCL_OK) rc = layout(&k);
    if (rc == ECCL_OK) {
        k.send = malloc(SEND_MAX * sizeof(float));
        k.recv = malloc(REGION * sizeof(float));
        if (!k.send || !k.recv) abort();
        if (a->newcomer)
            newcomer_script(&k);
        else
            script(&k, a->idx == VICTIM);
        free(k.send);
        free(k.recv);
    }
    eccl_sg_printf(who, "done");
    eccl_comm_destroy(k.c);
    s->b.done++;
}

/* Replicated outputs: one hash on every node that made the call. */
static void compare(scenario *s, uint64_t tag, const char *name, int nodes)
{
    int n = 0, agree = 1;
    uint64_t h = s->hash[tag][1];
    for (int i = 1; i <= NRANKS; i++) {
        if (!s->hashed[tag][i]) continue;
        n++;
        agree &= s->hash[tag][i] == h;
    }
    CHECK(s, "main", n == nodes && agree, "%s tag %llu: %d outputs of %d, %s", name,
          (unsigned long long)tag, n, nodes, agree ? "one hash" : "DIFFERENT hashes");
    eccl_sg_printf("main", "%s tag %llu: %d outputs, %s %016llx", name, (unsigned long long)tag,
                   n, agree ? "one hash" : "DIFFERENT hashes, the first", (unsigned long long)h);
}

int main(int argc, char **argv)
{
    if (sim_setup(&argc, argv) != 0) return 2;
    /* Done: 3 survivors + 2 crashes of node-4. */
    scenario s = {.b = {.master_addr = "node-0:5000", .stop_at = NRANKS + 1}};
    int level = argc > 2 ? atoi(argv[2]) : ECCL_LOG_WARN;
    if (argc > 3 && strcmp(argv[3], "binomial") != 0 && strcmp(argv[3], "chain") != 0 &&
        strcmp(argv[3], "bruck") != 0 && strcmp(argv[3], "recursive") != 0) {
        fprintf(stderr, "sim_colls: ALGO is chain, binomial, bruck or recursive, not \"%s\"\n", argv[3]);
        return 2;
    }
    s.bino = argc > 3 && strcmp(argv[3], "binomial") == 0;
    s.bruck = argc > 3 && strcmp(argv[3], "bruck") == 0;
    s.rec_rs = argc > 3 && strcmp(argv[3], "recursive") == 0;
    s.sentinel = malloc(REGION * sizeof(float));
    if (!s.sentinel) abort();
    for (size_t i = 0; i < REGION; i++) s.sentinel[i] = sentinel(i);
    if (eccl_sg_world_create(level, &s.b.w) != ECCL_OK) return 1;
    /* Forced either way: the dispatcher's table would pick by size. */
    if (eccl_sg_world_set_algo(s.b.w, s.bino     ? "broadcast=binomial,reduce=binomial"
                                      : s.bruck  ? "allgather=bruck,broadcast=chain,reduce=chain,reduce_scatter=ring"
                                      : s.rec_rs ? "allgather=ring,broadcast=chain,reduce=chain,reduce_scatter=recursive"
                                                 : "allgather=ring,broadcast=chain,reduce=chain,reduce_scatter=ring") != ECCL_OK)
        return 1;
    rank_arg args[NRANKS];
    sim_start_actor("master", "node-0", sim_master_main, &s);
    sim_start_actor("watchdog", "node-0", watchdog_main, &s);
    for (int i = 0; i < NRANKS; i++) {
        char name[16], host[16];
        args[i] = (rank_arg){.s = &s, .idx = i + 1};
        snprintf(name, sizeof name, "rank%d", i + 1);
        snprintf(host, sizeof host, "node-%d", i + 1);
        sim_start_actor(name, host, rank_main, &args[i]);
    }
    simgrid_run();
    compare(&s, T_AG, ALLGATHER.name, NRANKS);
    compare(&s, T_BC, BROADCAST.name, NRANKS);
    compare(&s, T_AGV, ALLGATHERV.name, NRANKS);
    if (s.bino) compare(&s, T_BC1, BROADCAST1.name, NRANKS);
    compare(&s, T_KAG, s.bino ? BROADCAST1.name : ALLGATHER.name, NRANKS - 1);
    CHECK(&s, "main", s.finished == NRANKS - 1 && s.kills == 2,
          "%d survivors finished, %d crashes (want %d, 2)", s.finished, s.kills, NRANKS - 1);
    eccl_sg_printf("main", "simulation over: %d survivors finished, %d crashes, %d failed checks",
                   s.finished, s.kills, s.b.failures);
    eccl_sg_world_destroy(s.b.w);
    free(s.sentinel);
    fflush(stdout);
    return s.b.failures == 0 && s.finished == NRANKS - 1 && s.kills == 2 ? 0 : 1;
}
