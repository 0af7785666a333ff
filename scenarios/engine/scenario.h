/* The scenario engine's model of a scenario file (format:
 * scenarios/README.md): the platform, the ranks, the workload, the fault
 * plan and the checks, as the parser reads them. Nothing here knows which
 * runner executes the scenario (eccl-sim on SimGrid today); the parser
 * refuses unknown keys and bad values with the file, line and key.
 */
#ifndef ECCL_SCENARIO_H
#define ECCL_SCENARIO_H

#include <stddef.h>
#include <stdint.h>

#include "util/rand.h"

#define MAX_RANKS 1000000 /* 1M: the issue-15 attempt; memory, not this, is the limit */
#define MAX_HOSTS 2000000 /* clos and wan: generated hosts */
#define MAX_REGIONS 64     /* wan: a link per pair of regions */
#define MAX_RANKS_PER_HOST 64
#define MAX_POOL 64       /* pool: ECCL_P2P_POOL's range (ECCL_WIRE_MAX_POOL) */
#define MAX_CONCURRENT 64 /* concurrent: eccl-bench's --inflight limit */
/* Loopback defaults: eccl's transport is TCP, so two ranks on one host talk
 * through the kernel's loopback (scenarios/README.md, "Ranks per host"). */
#define LOOPBACK_BW_DEFAULT 5e9   /* 5 GB/s: one TCP stream over lo, copy-bound */
#define LOOPBACK_LAT_DEFAULT 5e-6 /* 5 us one way: half a TCP_RR round trip over lo */
#define MAX_LINE 1024
#define MAX_RELAY_KILLS 16
/* device_copy_rate and device_copy_latency unless given: a PCIe 5 x16 link,
 * 10 us per copy, 25 GB/s. */
#define DEV_COPY_LATENCY_DEFAULT 10e-6
#define DEV_COPY_BW_DEFAULT 25e9
#define RELAY_PORT 5100

/* ---- scenario ------------------------------------------------------------ */

/* The fault plan: one entry per line of a fault key (a `partition` with a
 * heal time gives two). Host kinds name a rank, link kinds links. */
typedef enum eccl_scn_fault_kind {
    F_KILL,     /* crash: conns reset, host off */
    F_HOST_OFF, /* silent: host off, nothing more arrives */
    F_HOST_ON,  /* host back on, a new worker starts there */
    F_JOIN,     /* the rank's first worker starts at this time */
    F_LINK_OFF,
    F_LINK_ON,
    F_SLOW      /* a link's bandwidth and/or latency change */
} eccl_scn_fault_kind;

#define FLOW_MIN_SIZE_DEFAULT 1024
#define FLOW_MIN_SIZE_MAX 65536
#define MAX_FAULT_LINKS 16 /* per line */
#define LINK_NAME_MAX 64

typedef struct eccl_scn_fault {
    eccl_scn_fault_kind kind;
    int line;       /* in the scenario file, for errors */
    int rank;       /* host kinds: 1..ranks (host_off, host_on: every rank of its host) */
    int at_iter;    /* F_KILL: >= 0 when the rank begins this iteration's all-reduce ... */
    uint64_t at_ns; /* ... otherwise at this simulated time */
    int partition;  /* F_LINK_OFF of a `partition` line: must cut someone off */
    int nlinks;     /* link kinds */
    char links[MAX_FAULT_LINKS][LINK_NAME_MAX];
    double factor, bw_Bps, lat_s; /* F_SLOW: 0 when not given */
    int have_lat;
} eccl_scn_fault;


typedef enum eccl_scn_platform { PLATFORM_FLAT, PLATFORM_CLOS, PLATFORM_WAN } eccl_scn_platform;

typedef struct eccl_scenario {
    char name[64];
    char platform[16];
    eccl_scn_platform kind;
    int hosts, ranks, iters, world_min;
    int ranks_per_host; /* rank R runs on node-(1 + (R-1) / ranks_per_host) */
    int loopback;       /* the clusters carry loopback links (host to itself) */
    double loopback_bandwidth_Bps, loopback_latency_s;
    double shm_bandwidth_Bps; /* net_shm's twin (eccl_sg_world_set_shm); 0: off */
    double tls_Bps;           /* net_tls's price (eccl_sg_world_set_tls); 0: off */
    long count;
    double bandwidth_Bps, latency_s, jitter_s, stagger_s;
    /* platform = clos: host-to-host latencies, same rack < zone < DC < other DC */
    int hosts_per_rack, racks_per_zone, zones_per_dc, dcs;
    double oversubscription, zone_latency_s, dc_latency_s, inter_dc_latency_s;
    /* platform = wan: host-to-host latencies, same site < region < other region */
    int regions, sites_per_region, hosts_per_site;
    double site_latency_s, site_bandwidth_Bps, region_latency_s, region_bandwidth_Bps,
        flow_bandwidth_Bps; /* 0: no per-flow cap */
    /* region_rtt = A B TIME: the round trip between regions A and B (0-based),
     * overriding region_latency for that pair (one way = RTT / 2) */
    int n_region_rtts;
    struct eccl_scn_region_rtt {
        int a, b; /* a < b once parsed */
        double rtt_s;
        int line;
    } *region_rtts;
    /* TCP streams (scenarios/README.md, "WAN TCP model"): the ranks'
     * connection-pool size (ECCL_P2P_POOL; 0: not set) and the window of
     * every stream in bytes (0: no per-stream cap) */
    int pool;
    double tcp_window;
    /* the simulated device: buffers = host|phantom|cuda|cuda_phantom, kernel
     * rates (0: free); cuda: a simulated GPU per rank, tensors staged
     * through host mirrors at dev_copy_latency_s + bytes / dev_copy_Bps */
    int phantom, cuda;
    double reduce_rate_Bps, copy_rate_Bps;
    double dev_copy_Bps, dev_copy_latency_s;
    int device_ring; /* 1: all-reduces of >= 1 MiB run core's device-resident ring */
    /* transport = tcp|ibv: the ranks' peer links (env_sg.h, eccl_sg_net_cfg);
     * ib_*: their ECCL_IB_* settings (0: the protocol's default) */
    int ibv;
    int ib_qps;
    long ib_min_bytes, ib_chunk_bytes;
    int expect_survivors; /* -1: derived from the fault plan */
    int have_seed;
    uint64_t seed;
    double step_s, peer_timeout_s; /* the worker's step compute; its peer_timeout */
    double master_msg_cost_s;      /* the master's CPU time per message */
    double expect_slowdown;        /* 0: no check */
    int optimize_at;               /* every rank calls optimize_topology before
                                      this iteration; 0: never */
    double expect_speedup;         /* 0: no check */
    int nfaults;
    eccl_scn_fault *faults;
    /* relays = K: ranks in K contiguous shares, each reaching the master
     * through a relay on the host of its share's first rank */
    int relays;
    /* relay_fanout = F: the K relays hang under a tree of relays with at
     * most F children each, so that no coordinator talks to more than F
     * relays (eccl_scn_relay_parent); 0: all K under the master */
    int relay_fanout;
    int progress_thread; /* ranks' ECCL_PROGRESS_THREAD (1, the default, or 0) */
    int latency_net;     /* net_model = latency (eccl_sg_world_set_net_model) */
    /* flow_min_size: under net_model = flow, messages to a rank below this
     * many bytes take the latency path (eccl_sg_world_set_flow_min_bytes);
     * FLOW_MIN_SIZE_DEFAULT unless links change, streams are paced or the
     * transport is ibv, where it is 0 (every message a flow) */
    size_t flow_min_bytes;
    int n_relay_kills;
    struct {
        int relay;     /* 1..eccl_scn_relay_count: the tree above the shares too */
        uint64_t at_ns;
        int line;
    } relay_kills[MAX_RELAY_KILLS];
    /* workload = diloco (examples/diloco_loop.c) under seeded churn */
    int diloco;
    double duration_s;   /* the workers vote to stop once past it */
    double max_stall_s;  /* the checker's progress bound (default 5 s) */
    uint64_t corrupt_at; /* test only: rank 1's first worker flips a bit there */
    int have_churn, churn_have_seed, churn_min, churn_max;
    uint64_t churn_seed, churn_lo_ns, churn_hi_ns, churn_until_ns; /* until 0: duration - 0.5 s */
    /* workload = nccl2_bootstrap: the NCCL 2.x baseline (scenarios/engine/sim_nccl2.h) */
    int nccl2;
    uint64_t nccl2_stagger_ns; /* per rank before connecting to the root (> 128 ranks) */
    uint64_t nccl2_timeout_ns; /* the launcher's: a hung rank gives up then */
    int nccl2_replay;          /* nccl2_allgather = replay */
    int nccl2_corrupt;         /* test only: this rank (1..ranks) corrupts a slot; 0 none */
    /* workload = bench: eccl-bench's rows (scenarios/engine/sim_bench.h); iters is its
     * timed calls per size */
    int bench;
    int bench_coll;                  /* enum bench_coll */
    size_t bench_minbytes, bench_maxbytes;
    int bench_stepfactor, bench_warmup;
    char algo[256];                  /* every rank's ECCL_ALGO ("": not set) */
    int bench_corrupt;               /* test only: this rank (1..ranks) corrupts its checked outputs */
    int bench_concurrent;            /* all-reduces issued at once per timed step (eccl-bench --inflight) */
    /* chaos = FILE: the plan's text (malloc'ed), hosts named node-K; every
     * rank's communicator env runs it (eccl-sim wraps the simulated env,
     * eccl-emu the real one); NULL: none */
    char *chaos_plan;
    /* The collective trace (docs/trace.md): trace = 1 keeps every rank's
     * (written to the run's traces/), which the checker analyses;
     * expect_culprit = R: the analysis must name rank R (0: no check).
     * stall = R @ iter I for T: rank R's worker waits stall_ms before its
     * iteration-I all-reduce (stall_rank 0: none). op_timeout: every
     * rank's op_timeout_ms (0: the library's 60 s). */
    int trace, expect_culprit;
    int stall_rank, stall_iter, stall_ms;
    double op_timeout_s;
    /* expect_slow_link = R: the master must name a slow link with rank R's
     * worker at one end, as the workers see it (ECCL_ATTR_SLOW_LINK_FROM/TO,
     * their event=slow_link_seen); 0: no check. */
    int expect_slow_link;
} eccl_scenario;

/* Reads FILE into *c (zeroed first; c->faults is malloc'ed: eccl_scn_free).
 * Returns 0, or -1 after printing why (file, line, key) on stderr. */
int eccl_scn_parse(const char *file, eccl_scenario *c);
void eccl_scn_free(eccl_scenario *c);

/* An error in FILE at LINE (0: the file as a whole), printed as
 * "PROGRAM: FILE:LINE: ..." on stderr. Returns -1. */
__attribute__((format(printf, 3, 4))) int eccl_scn_error(const char *file, int line, const char *fmt, ...);

/* A fault kind's key, as the file spells it. */
const char *eccl_scn_fault_name(eccl_scn_fault_kind k);
/* The scenario's `buffers` value (host, phantom, cuda, cuda_phantom). */
const char *eccl_scn_buffers_name(const eccl_scenario *c);
/* Decimal values of the file's syntax (also the commands' options): 0, or
 * -1 when V is not one in range. */
int eccl_scn_parse_long(const char *v, long lo, long hi, long *out);
int eccl_scn_parse_u64(const char *v, uint64_t *out);

/* platform = wan: host-to-host one-way latency between regions g != h
 * (region_rtt / 2 where given, else region_latency). */
double eccl_scn_region_pair_latency(const eccl_scenario *c, int g, int h);

/* Writes the generated platform (SimGrid's platform XML: the hosts node-K,
 * their links and routes) to PATH. Returns 0 or -1. */
int eccl_scn_write_platform(const eccl_scenario *c, const char *path);


/* One link of a route of the generated platform. */
#define ECCL_SCN_HOPS_MAX 16
typedef struct eccl_scn_hop {
    char name[LINK_NAME_MAX]; /* as fault lines name it: node-K (host K's own link), else platform.xml's id */
    double bandwidth_Bps;
    double latency_s;
    int per_flow; /* FATPIPE: every flow gets the whole bandwidth */
} eccl_scn_hop;

/* The route from host a to host b (a != b) on the platform
 * eccl_scn_write_platform generates, link by link, in order: what a runner
 * without SimGrid (eccl-emu) shapes a host pair by. Returns the count. */
int eccl_scn_route(const eccl_scenario *c, int a, int b, eccl_scn_hop *hops);

/* The scenario's randomness: eccl_splitmix64 seeded from its seed. Uniform
 * in [0, n) (n > 0), without modulo bias worth speaking of at 64 bits. */
static inline uint64_t eccl_scn_prng_below(uint64_t *state, uint64_t n) { return eccl_splitmix64(state) % n; }

/* Rank R runs on host node-(1 + (R-1) / ranks_per_host); host K >= 1 runs
 * ranks first..last (host 0 runs the master). */
static inline int eccl_scn_rank_host(const eccl_scenario *c, int rank) { return 1 + (rank - 1) / c->ranks_per_host; }

/* The relay tree (relay_fanout): relays 0 .. relays-1 take the ranks'
 * shares; while a level has more than F relays, the next level has one per
 * F of them (relay j of a level over relays j*F .. j*F+F-1 of the level
 * below), numbered after it; the top level hangs under the master. Every
 * coordinator so has at most F relays under it, and the depth is
 * log_F(relays). How many relays there are in all: */
static inline int eccl_scn_relay_count(const eccl_scenario *c)
{
    int total = c->relays;
    for (int level = c->relays; c->relay_fanout && level > c->relay_fanout;) {
        level = (level + c->relay_fanout - 1) / c->relay_fanout;
        total += level;
    }
    return total;
}

/* Relay k's parent: another relay's index, or -1 for the master. */
static inline int eccl_scn_relay_parent(const eccl_scenario *c, int k)
{
    int first = 0;
    for (int level = c->relays; c->relay_fanout && level > c->relay_fanout;) {
        int up = (level + c->relay_fanout - 1) / c->relay_fanout;
        if (k < first + level) return first + level + (k - first) / c->relay_fanout;
        first += level;
        level = up;
    }
    return -1;
}

/* Relay k's level (0: a relay of the ranks' shares) into *level, and its
 * first leaf (where it runs). */
static inline int eccl_scn_relay_first_leaf(const eccl_scenario *c, int k, int *level)
{
    int first = 0, span = 1;
    *level = 0;
    for (int n = c->relays; k >= first + n;) {
        first += n;
        span *= c->relay_fanout;
        n = (n + c->relay_fanout - 1) / c->relay_fanout;
        ++*level;
    }
    return (k - first) * span;
}

static inline void eccl_scn_host_ranks(const eccl_scenario *c, int host, int *first, int *last)
{
    *first = (host - 1) * c->ranks_per_host + 1;
    *last = host * c->ranks_per_host < c->ranks ? host * c->ranks_per_host : c->ranks;
}

/* Whether a fault of this kind acts on the whole host of its rank (every
 * rank there), or on its rank alone. A kill is a process crash: with one
 * rank per host it takes the host down as well (eccl_sg_world_kill_host),
 * which is the same thing there, and what lets a host_on follow it. */
static inline int eccl_scn_host_wide(eccl_scn_fault_kind k) { return k == F_HOST_OFF || k == F_HOST_ON; }

#endif
