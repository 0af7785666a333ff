/* The scenario parser (scenarios/engine/scenario.h): key = value lines,
 * each key checked against its table entry, then the plan as a whole. */
#define _GNU_SOURCE /* program_invocation_short_name */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scenario.h"
#include "chaos.h" /* the quantities: one syntax for plans and scenarios */
#include "bench_rows.h"
#include "tool_util.h"
#include "coll/dispatch.h"

int eccl_scn_error(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    if (line > 0)
        fprintf(stderr, "%s: %s:%d: ", program_invocation_short_name, file, line);
    else
        fprintf(stderr, "%s: %s: ", program_invocation_short_name, file);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return -1;
}

const char *eccl_scn_fault_name(eccl_scn_fault_kind k)
{
    static const char *const names[] = {"kill", "host_off", "host_on", "join",
                                        "link_off", "link_on", "slow_link"};
    return names[k];
}

static char *trim(char *p)
{
    while (*p == ' ' || *p == '\t') p++;
    size_t n = strlen(p);
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\r' || p[n - 1] == '\n'))
        p[--n] = '\0';
    return p;
}

int eccl_scn_parse_long(const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

int eccl_scn_parse_u64(const char *v, uint64_t *out)
{
    char *end;
    if (*v == '-' || *v == '+') return -1;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end) return -1;
    *out = x;
    return 0;
}

static int valid_name(const char *v)
{
    if (!*v || strlen(v) >= 64 || v[0] == '.') return 0;
    for (const char *p = v; *p; p++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.'))
            return 0;
    }
    return 1;
}

/* A time at the start of p (number, optional spaces, unit); *rest points
 * past it, trimmed. */
static int parse_time_prefix(char *p, uint64_t *ns, char **rest)
{
    char *end;
    errno = 0;
    double x = strtod(p, &end);
    if (errno || end == p || !isfinite(x) || x < 0 || x > 1e6) return -1;
    while (*end == ' ' || *end == '\t') end++;
    size_t n = 0; /* the unit: a lowercase word */
    while (end[n] >= 'a' && end[n] <= 'z' && n < 8) n++;
    char q[64];
    double secs;
    if ((size_t)(end + n - p) >= sizeof q || (end[n] && end[n] != ' ' && end[n] != '\t')) return -1;
    memcpy(q, p, (size_t)(end + n - p));
    q[end + n - p] = '\0';
    if (eccl_chaos_parse_quantity(q, ECCL_CHAOS_TIME, &secs)) return -1;
    *ns = (uint64_t)llround(secs * 1e9);
    *rest = trim(end + n);
    return 0;
}

/* Splits "LHS @ RHS" of a fault line (copied into buf). */
static int split_at(const char *v, char *buf, size_t size, char **lhs, char **rhs)
{
    if (strlen(v) >= size) return -1;
    strcpy(buf, v);
    char *at = strchr(buf, '@');
    if (!at) return -1;
    *at = '\0';
    *lhs = trim(buf);
    *rhs = trim(at + 1);
    return 0;
}

/* kill = R @ iter I   |   kill = R @ T<unit> */
static int parse_kill(const char *v, eccl_scn_fault *k)
{
    char buf[MAX_LINE], *lhs, *when;
    if (split_at(v, buf, sizeof buf, &lhs, &when)) return -1;
    long r;
    if (eccl_scn_parse_long(lhs, 1, MAX_RANKS, &r)) return -1;
    k->kind = F_KILL;
    k->rank = (int)r;
    if (strncmp(when, "iter", 4) == 0 && (when[4] == ' ' || when[4] == '\t')) {
        long it;
        if (eccl_scn_parse_long(trim(when + 5), 0, INT_MAX, &it)) return -1;
        k->at_iter = (int)it;
        k->at_ns = 0;
        return 0;
    }
    char *rest;
    if (parse_time_prefix(when, &k->at_ns, &rest) || *rest) return -1;
    k->at_iter = -1;
    return 0;
}

/* stall = R @ iter I for TIME: rank R's worker waits TIME before its
 * iteration-I all-reduce (whole milliseconds). */
static int parse_stall(const char *v, eccl_scenario *c)
{
    char buf[MAX_LINE], *lhs, *when, *rest;
    long r, it;
    if (split_at(v, buf, sizeof buf, &lhs, &when) || eccl_scn_parse_long(lhs, 1, MAX_RANKS, &r)) return -1;
    if (strncmp(when, "iter", 4) != 0 || (when[4] != ' ' && when[4] != '\t')) return -1;
    char *num = trim(when + 5), *sp = strpbrk(num, " \t");
    if (!sp) return -1;
    *sp = 0;
    if (eccl_scn_parse_long(num, 0, INT_MAX, &it)) return -1;
    char *f = trim(sp + 1);
    if (strncmp(f, "for", 3) != 0 || (f[3] != ' ' && f[3] != '\t')) return -1;
    uint64_t ns;
    if (parse_time_prefix(trim(f + 4), &ns, &rest) || *rest || ns == 0 || ns % 1000000 || ns > 3600000000000ull)
        return -1;
    c->stall_rank = (int)r;
    c->stall_iter = (int)it;
    c->stall_ms = (int)(ns / 1000000);
    return 0;
}

/* host_off | host_on | join = R @ TIME */
static int parse_host_fault(const char *v, eccl_scn_fault_kind kind, eccl_scn_fault *k)
{
    char buf[MAX_LINE], *lhs, *when, *rest;
    long r;
    if (split_at(v, buf, sizeof buf, &lhs, &when) || eccl_scn_parse_long(lhs, 1, MAX_RANKS, &r) ||
        parse_time_prefix(when, &k->at_ns, &rest) || *rest)
        return -1;
    k->kind = kind;
    k->rank = (int)r;
    k->at_iter = -1;
    return 0;
}

/* LINK[,LINK...]: names as the platform gives them, or node-K. */
static int parse_links(char *lhs, eccl_scn_fault *k)
{
    k->nlinks = 0;
    for (char *tok = lhs, *next; tok; tok = next) {
        next = strchr(tok, ',');
        if (next) *next++ = '\0';
        tok = trim(tok);
        if (k->nlinks == MAX_FAULT_LINKS || !valid_name(tok)) return -1;
        snprintf(k->links[k->nlinks++], LINK_NAME_MAX, "%s", tok);
    }
    return k->nlinks > 0 ? 0 : -1;
}

/* link_off | link_on = LINKS @ TIME
 * partition = LINKS @ TIME [heal TIME]      (heal: a second entry, link_on)
 * slow_link = LINKS @ TIME {factor F | bandwidth BW | latency LAT}... */
static int parse_link_fault(const char *v, const char *key, eccl_scn_fault *k, eccl_scn_fault *heal,
                            int *have_heal)
{
    char buf[MAX_LINE], *lhs, *when, *rest;
    *have_heal = 0;
    if (split_at(v, buf, sizeof buf, &lhs, &when) || parse_links(lhs, k) ||
        parse_time_prefix(when, &k->at_ns, &rest))
        return -1;
    k->at_iter = -1;
    if (strcmp(key, "link_off") == 0 || strcmp(key, "link_on") == 0) {
        k->kind = key[6] == 'f' ? F_LINK_OFF : F_LINK_ON;
        return *rest ? -1 : 0;
    }
    if (strcmp(key, "partition") == 0) {
        k->kind = F_LINK_OFF;
        k->partition = 1;
        if (!*rest) return 0;
        if (strncmp(rest, "heal", 4) != 0 || (rest[4] != ' ' && rest[4] != '\t')) return -1;
        *heal = *k;
        heal->kind = F_LINK_ON;
        heal->partition = 0;
        char *after;
        if (parse_time_prefix(trim(rest + 5), &heal->at_ns, &after) || *after ||
            heal->at_ns <= k->at_ns)
            return -1;
        *have_heal = 1;
        return 0;
    }
    k->kind = F_SLOW;
    int given = 0;
    while (*rest) {
        char *word = rest, *val = rest + strcspn(rest, " \t");
        if (!*val) return -1;
        *val++ = '\0';
        val = trim(val);
        char *vend = val + strcspn(val, " \t");
        char save = *vend;
        *vend = '\0';
        double q;
        char *qend;
        if (strcmp(word, "factor") == 0) {
            errno = 0;
            q = strtod(val, &qend);
            if (errno || qend == val || *qend || !isfinite(q) || q <= 0 || q > 1e6) return -1;
            k->factor = q;
        } else if (strcmp(word, "bandwidth") == 0) {
            if (eccl_chaos_parse_quantity(val, ECCL_CHAOS_BANDWIDTH, &q) || q <= 0) return -1;
            k->bw_Bps = q;
        } else if (strcmp(word, "latency") == 0) {
            if (eccl_chaos_parse_quantity(val, ECCL_CHAOS_TIME, &q) || q > 10) return -1;
            k->lat_s = (double)llround(q * 1e9) / 1e9;
            k->have_lat = 1;
        } else {
            return -1;
        }
        given++;
        *vend = save;
        rest = trim(vend);
    }
    /* A factor scales both; an override says what it sets. */
    if (!given || (k->factor > 0 && (k->bw_Bps > 0 || k->have_lat))) return -1;
    return 0;
}

/* Every key but the repeatable fault keys; the line it was given on is kept so
 * that a key the chosen platform does not take is reported where it stands. */
enum {
    K_NAME, K_PLATFORM, K_BW, K_LAT, K_RANKS, K_COUNT, K_ITERS, K_EXPECT, K_SEED, K_JITTER,
    K_STAGGER, K_WORLD_MIN, K_BUFFERS, K_REDUCE_RATE, K_COPY_RATE, K_STEP, K_PEER_TIMEOUT,
    K_EXPECT_SLOWDOWN, K_MASTER_MSG_COST, K_RANKS_PER_HOST, K_LOOPBACK_BW, K_LOOPBACK_LAT, K_SHM_BW,
    K_TLS_RATE, K_WORKLOAD, K_CHURN, K_DURATION, K_MAX_STALL, K_CORRUPT_AT,     /* workload = diloco */
    K_HOSTS,                                                        /* flat */
    K_HOSTS_PER_RACK, K_RACKS_PER_ZONE, K_ZONES_PER_DC, K_DCS, K_OVERSUB, K_ZONE_LAT, K_DC_LAT,
    K_INTER_DC_LAT,                                                 /* clos */
    K_REGIONS, K_SITES_PER_REGION, K_HOSTS_PER_SITE, K_SITE_LAT, K_SITE_BW, K_REGION_LAT,
    K_REGION_BW, K_FLOW_BW,                                         /* wan */
    K_OPTIMIZE_AT, K_EXPECT_SPEEDUP,
    K_DEV_COPY_RATE, K_DEV_COPY_LAT, K_DEVICE_RING,                 /* buffers = cuda */
    K_TRANSPORT, K_IB_QPS, K_IB_MIN_BYTES, K_IB_CHUNK_BYTES,
    K_RELAYS, K_RELAY_FANOUT, K_PROGRESS_THREAD, K_NET_MODEL, K_FLOW_MIN_SIZE,
    K_NCCL2_STAGGER, K_NCCL2_TIMEOUT, K_NCCL2_ALLGATHER, K_NCCL2_CORRUPT, /* nccl2_bootstrap */
    K_COLL, K_MINBYTES, K_MAXBYTES, K_STEPFACTOR, K_WARMUP, K_ALGO, K_BENCH_CORRUPT, /* bench */
    K_CONCURRENT,
    K_POOL, K_TCP_WINDOW,                                           /* TCP streams */
    K_CHAOS,
    K_TRACE, K_EXPECT_CULPRIT, K_STALL, K_OP_TIMEOUT,               /* the collective trace */
    K_EXPECT_SLOW_LINK,
    K_NKEYS
};

typedef enum key_kind { KK_SPECIAL, KK_INT, KK_BW, KK_TIME, KK_RATIO } key_kind;

typedef struct key_def {
    const char *name;
    key_kind kind;
    size_t off; /* of the int or double field (KK_INT, KK_BW, KK_TIME, KK_RATIO) */
    long lo, hi; /* KK_INT range */
} key_def;

#define CFG_OFF(f) offsetof(eccl_scenario, f)
static const key_def key_defs[K_NKEYS] = {
    [K_NAME] = {"name", KK_SPECIAL, 0, 0, 0},
    [K_PLATFORM] = {"platform", KK_SPECIAL, 0, 0, 0},
    [K_BW] = {"bandwidth", KK_BW, CFG_OFF(bandwidth_Bps), 0, 0},
    [K_LAT] = {"latency", KK_TIME, CFG_OFF(latency_s), 0, 0},
    [K_RANKS] = {"ranks", KK_INT, CFG_OFF(ranks), 1, MAX_RANKS},
    [K_COUNT] = {"count", KK_SPECIAL, 0, 0, 0},
    [K_ITERS] = {"iters", KK_INT, CFG_OFF(iters), 1, 1000000},
    [K_EXPECT] = {"expect_survivors", KK_INT, CFG_OFF(expect_survivors), 0, MAX_RANKS},
    [K_SEED] = {"seed", KK_SPECIAL, 0, 0, 0},
    [K_JITTER] = {"jitter", KK_TIME, CFG_OFF(jitter_s), 0, 0},
    [K_STAGGER] = {"stagger", KK_TIME, CFG_OFF(stagger_s), 0, 0},
    [K_WORLD_MIN] = {"world_min", KK_INT, CFG_OFF(world_min), 1, MAX_RANKS},
    [K_BUFFERS] = {"buffers", KK_SPECIAL, 0, 0, 0},
    [K_REDUCE_RATE] = {"reduce_rate", KK_BW, CFG_OFF(reduce_rate_Bps), 0, 0},
    [K_COPY_RATE] = {"copy_rate", KK_BW, CFG_OFF(copy_rate_Bps), 0, 0},
    [K_DEV_COPY_RATE] = {"device_copy_rate", KK_BW, CFG_OFF(dev_copy_Bps), 0, 0},
    [K_DEV_COPY_LAT] = {"device_copy_latency", KK_TIME, CFG_OFF(dev_copy_latency_s), 0, 0},
    [K_DEVICE_RING] = {"device_ring", KK_INT, CFG_OFF(device_ring), 0, 1},
    [K_TRANSPORT] = {"transport", KK_SPECIAL, 0, 0, 0},
    [K_IB_QPS] = {"ib_qps", KK_INT, CFG_OFF(ib_qps), 1, 16},
    [K_IB_MIN_BYTES] = {"ib_min_bytes", KK_SPECIAL, 0, 0, 0},
    [K_IB_CHUNK_BYTES] = {"ib_chunk_bytes", KK_SPECIAL, 0, 0, 0},
    [K_RELAYS] = {"relays", KK_INT, CFG_OFF(relays), 0, MAX_RANKS},
    [K_RELAY_FANOUT] = {"relay_fanout", KK_INT, CFG_OFF(relay_fanout), 2, MAX_RANKS},
    [K_PROGRESS_THREAD] = {"progress_thread", KK_INT, CFG_OFF(progress_thread), 0, 1},
    [K_NET_MODEL] = {"net_model", KK_SPECIAL, 0, 0, 0},
    [K_FLOW_MIN_SIZE] = {"flow_min_size", KK_SPECIAL, 0, 0, 0},
    [K_STEP] = {"step", KK_TIME, CFG_OFF(step_s), 0, 0},
    [K_PEER_TIMEOUT] = {"peer_timeout", KK_TIME, CFG_OFF(peer_timeout_s), 0, 0},
    [K_EXPECT_SLOWDOWN] = {"expect_slowdown", KK_RATIO, CFG_OFF(expect_slowdown), 0, 0},
    [K_MASTER_MSG_COST] = {"master_msg_cost", KK_TIME, CFG_OFF(master_msg_cost_s), 0, 0},
    [K_RANKS_PER_HOST] = {"ranks_per_host", KK_INT, CFG_OFF(ranks_per_host), 1, MAX_RANKS_PER_HOST},
    [K_LOOPBACK_BW] = {"loopback_bandwidth", KK_BW, CFG_OFF(loopback_bandwidth_Bps), 0, 0},
    [K_LOOPBACK_LAT] = {"loopback_latency", KK_TIME, CFG_OFF(loopback_latency_s), 0, 0},
    [K_SHM_BW] = {"shm_bandwidth", KK_BW, CFG_OFF(shm_bandwidth_Bps), 0, 0},
    [K_TLS_RATE] = {"tls_rate", KK_BW, CFG_OFF(tls_Bps), 0, 0},
    [K_WORKLOAD] = {"workload", KK_SPECIAL, 0, 0, 0},
    [K_CHURN] = {"churn", KK_SPECIAL, 0, 0, 0},
    [K_DURATION] = {"duration", KK_SPECIAL, 0, 0, 0},
    [K_MAX_STALL] = {"max_stall", KK_SPECIAL, 0, 0, 0},
    [K_CORRUPT_AT] = {"corrupt_at", KK_SPECIAL, 0, 0, 0},
    [K_HOSTS] = {"hosts", KK_INT, CFG_OFF(hosts), 2, MAX_RANKS + 1},
    [K_HOSTS_PER_RACK] = {"hosts_per_rack", KK_INT, CFG_OFF(hosts_per_rack), 1, MAX_HOSTS},
    [K_RACKS_PER_ZONE] = {"racks_per_zone", KK_INT, CFG_OFF(racks_per_zone), 1, MAX_HOSTS},
    [K_ZONES_PER_DC] = {"zones_per_dc", KK_INT, CFG_OFF(zones_per_dc), 1, MAX_HOSTS},
    [K_DCS] = {"dcs", KK_INT, CFG_OFF(dcs), 1, MAX_HOSTS},
    [K_OVERSUB] = {"oversubscription", KK_RATIO, CFG_OFF(oversubscription), 0, 0},
    [K_ZONE_LAT] = {"zone_latency", KK_TIME, CFG_OFF(zone_latency_s), 0, 0},
    [K_DC_LAT] = {"dc_latency", KK_TIME, CFG_OFF(dc_latency_s), 0, 0},
    [K_INTER_DC_LAT] = {"inter_dc_latency", KK_TIME, CFG_OFF(inter_dc_latency_s), 0, 0},
    [K_REGIONS] = {"regions", KK_INT, CFG_OFF(regions), 1, MAX_REGIONS},
    [K_SITES_PER_REGION] = {"sites_per_region", KK_INT, CFG_OFF(sites_per_region), 1, MAX_HOSTS},
    [K_HOSTS_PER_SITE] = {"hosts_per_site", KK_INT, CFG_OFF(hosts_per_site), 1, MAX_HOSTS},
    [K_SITE_LAT] = {"site_latency", KK_TIME, CFG_OFF(site_latency_s), 0, 0},
    [K_SITE_BW] = {"site_bandwidth", KK_BW, CFG_OFF(site_bandwidth_Bps), 0, 0},
    [K_REGION_LAT] = {"region_latency", KK_TIME, CFG_OFF(region_latency_s), 0, 0},
    [K_REGION_BW] = {"region_bandwidth", KK_BW, CFG_OFF(region_bandwidth_Bps), 0, 0},
    [K_FLOW_BW] = {"flow_bandwidth", KK_BW, CFG_OFF(flow_bandwidth_Bps), 0, 0},
    [K_OPTIMIZE_AT] = {"optimize_at", KK_INT, CFG_OFF(optimize_at), 1, 1000000},
    [K_EXPECT_SPEEDUP] = {"expect_speedup", KK_RATIO, CFG_OFF(expect_speedup), 0, 0},
    [K_NCCL2_STAGGER] = {"nccl2_root_stagger", KK_SPECIAL, 0, 0, 0},
    [K_NCCL2_TIMEOUT] = {"nccl2_timeout", KK_SPECIAL, 0, 0, 0},
    [K_NCCL2_ALLGATHER] = {"nccl2_allgather", KK_SPECIAL, 0, 0, 0},
    [K_NCCL2_CORRUPT] = {"nccl2_corrupt", KK_INT, CFG_OFF(nccl2_corrupt), 1, MAX_RANKS},
    [K_COLL] = {"coll", KK_SPECIAL, 0, 0, 0},
    [K_MINBYTES] = {"minbytes", KK_SPECIAL, 0, 0, 0},
    [K_MAXBYTES] = {"maxbytes", KK_SPECIAL, 0, 0, 0},
    [K_STEPFACTOR] = {"stepfactor", KK_INT, CFG_OFF(bench_stepfactor), 2, 1024},
    [K_WARMUP] = {"warmup", KK_INT, CFG_OFF(bench_warmup), 0, 1000000},
    [K_ALGO] = {"algo", KK_SPECIAL, 0, 0, 0},
    [K_BENCH_CORRUPT] = {"bench_corrupt", KK_INT, CFG_OFF(bench_corrupt), 1, MAX_RANKS},
    [K_CONCURRENT] = {"concurrent", KK_INT, CFG_OFF(bench_concurrent), 1, MAX_CONCURRENT},
    [K_POOL] = {"pool", KK_INT, CFG_OFF(pool), 1, MAX_POOL},
    [K_TCP_WINDOW] = {"tcp_window", KK_SPECIAL, 0, 0, 0},
    [K_CHAOS] = {"chaos", KK_SPECIAL, 0, 0, 0},
    [K_TRACE] = {"trace", KK_INT, CFG_OFF(trace), 0, 1},
    [K_EXPECT_CULPRIT] = {"expect_culprit", KK_INT, CFG_OFF(expect_culprit), 1, MAX_RANKS},
    [K_EXPECT_SLOW_LINK] = {"expect_slow_link", KK_INT, CFG_OFF(expect_slow_link), 1, MAX_RANKS},
    [K_STALL] = {"stall", KK_SPECIAL, 0, 0, 0},
    [K_OP_TIMEOUT] = {"op_timeout", KK_TIME, CFG_OFF(op_timeout_s), 0, 0},
};
#undef CFG_OFF

/* Which keys a platform takes: required ones, then optional ones; -1 ends. */
static const int common_required[] = {K_NAME, K_PLATFORM, K_BW, K_LAT, K_RANKS, K_COUNT,
                                      K_ITERS, -1};
static const int common_optional[] = {K_EXPECT, K_SEED, K_JITTER, K_STAGGER, K_WORLD_MIN,
                                      K_BUFFERS, K_REDUCE_RATE, K_COPY_RATE, K_STEP,
                                      K_PEER_TIMEOUT, K_EXPECT_SLOWDOWN, K_MASTER_MSG_COST,
                                      K_RANKS_PER_HOST, K_LOOPBACK_BW, K_LOOPBACK_LAT, K_SHM_BW,
                                      K_TLS_RATE, K_OPTIMIZE_AT, K_EXPECT_SPEEDUP, K_WORKLOAD, K_CHURN,
                                      K_DURATION, K_MAX_STALL, K_CORRUPT_AT, K_DEV_COPY_RATE,
                                      K_DEV_COPY_LAT, K_DEVICE_RING, K_TRANSPORT, K_IB_QPS,
                                      K_IB_MIN_BYTES, K_IB_CHUNK_BYTES, K_NCCL2_STAGGER,
                                      K_NCCL2_TIMEOUT, K_NCCL2_ALLGATHER, K_NCCL2_CORRUPT, K_RELAYS,
                                      K_RELAY_FANOUT, K_PROGRESS_THREAD, K_NET_MODEL, K_FLOW_MIN_SIZE, K_COLL, K_MINBYTES, K_MAXBYTES,
                                      K_STEPFACTOR, K_WARMUP, K_ALGO, K_BENCH_CORRUPT, K_CONCURRENT,
                                      K_POOL, K_TCP_WINDOW, K_CHAOS, K_TRACE, K_EXPECT_CULPRIT, K_STALL,
                                      K_OP_TIMEOUT, K_EXPECT_SLOW_LINK, -1};
static const int flat_required[] = {K_HOSTS, -1};
static const int flat_optional[] = {-1};
static const int clos_required[] = {K_HOSTS_PER_RACK, K_RACKS_PER_ZONE, K_ZONES_PER_DC, K_DCS, -1};
static const int clos_optional[] = {K_OVERSUB, K_ZONE_LAT, K_DC_LAT, K_INTER_DC_LAT, -1};
/* region_latency is required unless region_rtt gives every pair (checked
 * with the pairs). */
static const int wan_required[] = {K_REGIONS, K_SITES_PER_REGION, K_HOSTS_PER_SITE, K_REGION_BW, -1};
static const int wan_optional[] = {K_SITE_LAT, K_SITE_BW, K_FLOW_BW, K_REGION_LAT, -1};

/* trace, expect_culprit, stall, op_timeout: the job workload's (the worker
 * loop runs the stall; the job's checker reads the traces). */
static int check_trace_keys(const char *file, const int *key_line, eccl_scenario *c)
{
    static const int keys[] = {K_TRACE, K_EXPECT_CULPRIT, K_STALL, K_OP_TIMEOUT, -1};
    for (const int *k = keys; *k >= 0; k++)
        if (key_line[*k] && (c->diloco || c->nccl2 || c->bench))
            return eccl_scn_error(file, key_line[*k], "%s: the job workload only", key_defs[*k].name);
    if (key_line[K_EXPECT_CULPRIT] && !c->trace)
        return eccl_scn_error(file, key_line[K_EXPECT_CULPRIT], "expect_culprit: needs trace = 1");
    if (c->expect_culprit > c->ranks)
        return eccl_scn_error(file, key_line[K_EXPECT_CULPRIT], "expect_culprit: rank %d: ranks are 1..%d",
                              c->expect_culprit, c->ranks);
    if (key_line[K_STALL] && c->stall_rank > c->ranks)
        return eccl_scn_error(file, key_line[K_STALL], "stall: rank %d: ranks are 1..%d", c->stall_rank, c->ranks);
    if (key_line[K_STALL] && c->stall_iter >= c->iters)
        return eccl_scn_error(file, key_line[K_STALL], "stall: iteration %d: want one below iters", c->stall_iter);
    if (key_line[K_OP_TIMEOUT] &&
        (c->op_timeout_s < 0.001 || c->op_timeout_s > 3600 ||
         fabs(c->op_timeout_s * 1e3 - (double)llround(c->op_timeout_s * 1e3)) > 1e-9))
        return eccl_scn_error(file, key_line[K_OP_TIMEOUT], "op_timeout: want whole milliseconds, 1ms..3600s");
    return 0;
}

static int in_list(const int *list, int k)
{
    for (; *list >= 0; list++)
        if (*list == k) return 1;
    return 0;
}

/* One value of a table key into its field; -1 after printing why. */
/* churn = interval=T1..T2 [min=N] [max=N] [seed=S] [until=T] */
static int parse_churn(const char *v, eccl_scenario *c)
{
    char buf[MAX_LINE];
    if (strlen(v) >= sizeof buf) return -1;
    strcpy(buf, v);
    int have_interval = 0;
    c->have_churn = 1;
    c->churn_min = 2;
    c->churn_max = 0;
    for (char *tok = strtok(buf, " \t"); tok; tok = strtok(NULL, " \t")) {
        char *eq = strchr(tok, '=');
        if (!eq) return -1;
        *eq++ = '\0';
        long x;
        double q;
        if (strcmp(tok, "interval") == 0) {
            char *dots = strstr(eq, "..");
            if (!dots) return -1;
            *dots = '\0';
            double a, b;
            if (eccl_chaos_parse_quantity(eq, ECCL_CHAOS_TIME, &a) || eccl_chaos_parse_quantity(dots + 2, ECCL_CHAOS_TIME, &b) ||
                a <= 0 || b < a || b > 1e4)
                return -1;
            c->churn_lo_ns = (uint64_t)llround(a * 1e9);
            c->churn_hi_ns = (uint64_t)llround(b * 1e9);
            have_interval = 1;
        } else if (strcmp(tok, "min") == 0) {
            if (eccl_scn_parse_long(eq, 2, MAX_RANKS, &x)) return -1;
            c->churn_min = (int)x;
        } else if (strcmp(tok, "max") == 0) {
            if (eccl_scn_parse_long(eq, 2, MAX_RANKS, &x)) return -1;
            c->churn_max = (int)x;
        } else if (strcmp(tok, "seed") == 0) {
            if (eccl_scn_parse_u64(eq, &c->churn_seed)) return -1;
            c->churn_have_seed = 1;
        } else if (strcmp(tok, "until") == 0) {
            if (eccl_chaos_parse_quantity(eq, ECCL_CHAOS_TIME, &q) || q <= 0 || q > 1e5) return -1;
            c->churn_until_ns = (uint64_t)llround(q * 1e9);
        } else {
            return -1;
        }
    }
    return have_interval ? 0 : -1;
}

/* region_rtt = A B TIME: appended to c->region_rtts (A < B once stored). */
static int parse_region_rtt(const char *v, eccl_scenario *c, int lineno)
{
    char buf[MAX_LINE], *p = buf, *rest;
    if (strlen(v) >= sizeof buf) return -1;
    strcpy(buf, v);
    long ab[2];
    for (int i = 0; i < 2; i++) { /* two region numbers, then the time */
        char *end;
        errno = 0;
        ab[i] = strtol(p, &end, 10);
        if (errno || end == p || (*end != ' ' && *end != '\t') || ab[i] < 0 || ab[i] >= MAX_REGIONS) return -1;
        p = trim(end);
    }
    const long a = ab[0], b = ab[1];
    uint64_t ns;
    if (a == b || parse_time_prefix(p, &ns, &rest) || *rest || ns == 0 || ns > 10000000000ull) return -1;
    const double q = (double)ns / 1e9;
    struct eccl_scn_region_rtt *n = realloc(c->region_rtts, (size_t)(c->n_region_rtts + 1) * sizeof *n);
    if (!n) return -1;
    c->region_rtts = n;
    n[c->n_region_rtts++] = (struct eccl_scn_region_rtt){.a = (int)(a < b ? a : b), .b = (int)(a < b ? b : a),
                                                         .rtt_s = q,
                                                         .line = lineno};
    return 0;
}

/* The pairs of region_rtt against the platform: regions that exist, each
 * pair once, and a one-way time of at least site_latency (a path between
 * regions runs through both sites' uplinks). Without region_latency every
 * pair must be given. */
static int check_region_rtts(const char *file, eccl_scenario *c, int region_lat_line)
{
    const long pairs = (long)c->regions * (c->regions - 1) / 2;
    for (int i = 0; i < c->n_region_rtts; i++) {
        const struct eccl_scn_region_rtt *p = &c->region_rtts[i];
        if (p->b >= c->regions)
            return eccl_scn_error(file, p->line, "region_rtt: region %d: regions are 0..%d", p->b,
                                  c->regions - 1);
        for (int j = 0; j < i; j++)
            if (c->region_rtts[j].a == p->a && c->region_rtts[j].b == p->b)
                return eccl_scn_error(file, p->line, "region_rtt: regions %d and %d given twice (first on "
                                      "line %d)", p->a, p->b, c->region_rtts[j].line);
        if (p->rtt_s / 2 < c->site_latency_s)
            return eccl_scn_error(file, p->line, "region_rtt: %g s between regions %d and %d: one way (RTT / 2) "
                                  "is below site_latency (which is latency unless given)", p->rtt_s, p->a, p->b);
    }
    if (!region_lat_line && c->n_region_rtts < pairs)
        return eccl_scn_error(file, 0, "missing required key \"region_latency\" (platform = wan): "
                              "region_rtt gives %d of the %ld pairs of regions", c->n_region_rtts, pairs);
    return 0;
}

double eccl_scn_region_pair_latency(const eccl_scenario *c, int g, int h)
{
    const int a = g < h ? g : h, b = g < h ? h : g;
    for (int i = 0; i < c->n_region_rtts; i++)
        if (c->region_rtts[i].a == a && c->region_rtts[i].b == b) return c->region_rtts[i].rtt_s / 2;
    return c->region_latency_s;
}

static int parse_key_value(const char *file, int lineno, const key_def *d, const char *val,
                           eccl_scenario *c)
{
    char *base = (char *)c + d->off;
    long x;
    double q;
    switch (d->kind) {
    case KK_INT:
        if (eccl_scn_parse_long(val, d->lo, d->hi, &x))
            return eccl_scn_error(file, lineno, "%s: \"%s\": want an integer in %ld..%ld", d->name, val,
                             d->lo, d->hi);
        *(int *)(void *)base = (int)x;
        return 0;
    case KK_BW:
        if (eccl_chaos_parse_quantity(val, ECCL_CHAOS_BANDWIDTH, &q) || q <= 0)
            return eccl_scn_error(file, lineno, "%s: \"%s\": want a positive number with a unit (Bps "
                             "kBps MBps GBps TBps, or bps Kbps Mbps Gbps Tbps)", d->name, val);
        *(double *)(void *)base = q;
        return 0;
    case KK_TIME:
        if (eccl_chaos_parse_quantity(val, ECCL_CHAOS_TIME, &q) || q > 10)
            return eccl_scn_error(file, lineno, "%s: \"%s\": want a time (s ms us ns) up to 10s",
                             d->name, val);
        *(double *)(void *)base = (double)llround(q * 1e9) / 1e9; /* whole ns */
        return 0;
    case KK_RATIO: {
        char *end;
        errno = 0;
        q = strtod(val, &end);
        if (errno || end == val || *end || !isfinite(q) || q < 1 || q > 1e6)
            return eccl_scn_error(file, lineno, "%s: \"%s\": want a number >= 1 (e.g. 1, 3, 2.5)",
                             d->name, val);
        *(double *)(void *)base = q;
        return 0;
    }
    case KK_SPECIAL:
        break;
    }
    return eccl_scn_error(file, lineno, "%s: internal error", d->name);
}


typedef struct host_ev {
    int rank, idx;
    uint64_t at_ns;
} host_ev;

static int host_ev_cmp(const void *a, const void *b)
{
    const host_ev *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    if (x->at_ns != y->at_ns) return x->at_ns < y->at_ns ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Each rank's host events (its own kill and join, and every host_off and
 * host_on of its host), in time order, must make sense: a join first and
 * once, a kill only while its worker is up, host_off only while its host is
 * on, host_on only while it is off, no two at the same time, and a
 * `kill @ iter` alone. */
static int check_host_plan(const char *file, const eccl_scenario *c)
{
    const int rph = c->ranks_per_host;
    host_ev *ev = calloc((size_t)c->nfaults * (size_t)rph + 1, sizeof *ev);
    if (!ev) return eccl_scn_error(file, 0, "out of memory");
    int n = 0, rc = 0;
    for (int i = 0; i < c->nfaults; i++) {
        const eccl_scn_fault *f = &c->faults[i];
        if (f->kind > F_JOIN) continue;
        if (f->rank > c->ranks) {
            rc = eccl_scn_error(file, f->line, "%s: rank %d: ranks are 1..%d", eccl_scn_fault_name(f->kind),
                           f->rank, c->ranks);
            break;
        }
        if (f->at_iter >= c->iters) {
            rc = eccl_scn_error(file, f->line, "kill: iter %d: iterations are 0..%d", f->at_iter,
                           c->iters - 1);
            break;
        }
        int first = f->rank, last = f->rank;
        if (eccl_scn_host_wide(f->kind)) eccl_scn_host_ranks(c, eccl_scn_rank_host(c, f->rank), &first, &last);
        for (int q = first; q <= last; q++) ev[n++] = (host_ev){q, i, f->at_ns};
    }
    if (rc == 0) qsort(ev, (size_t)n, sizeof *ev, host_ev_cmp);
    /* Walked per rank: is its host on, is its worker up. */
    int host_on = 1, up = 1;
    const char *whose = rph > 1 ? " (its own or its host's)" : "";
    for (int i = 0; rc == 0 && i < n; i++) {
        const int first = i == 0 || ev[i - 1].rank != ev[i].rank;
        const int last = i == n - 1 || ev[i + 1].rank != ev[i].rank;
        const eccl_scn_fault *f = &c->faults[ev[i].idx];
        const int r = ev[i].rank;
        char host_of[24] = ""; /* with several ranks per host, which host */
        if (rph > 1) snprintf(host_of, sizeof host_of, " node-%d", eccl_scn_rank_host(c, r));
        if (first) host_on = up = 1;
        if (!first && ev[i - 1].at_ns == ev[i].at_ns) {
            rc = eccl_scn_error(file, f->line, "%s: rank %d has another host event%s at the same "
                           "time", eccl_scn_fault_name(f->kind), r, whose);
            break;
        }
        if (f->kind == F_KILL && f->at_iter >= 0 && !(first && last))
            rc = eccl_scn_error(file, f->line, "kill @ iter: rank %d has other host events%s; use "
                           "kill @ TIME", r, whose);
        else if (f->kind == F_JOIN && !first)
            rc = eccl_scn_error(file, f->line, "join: rank %d: a join must be its first host "
                           "event%s", r, whose);
        else if ((f->kind == F_KILL || f->kind == F_HOST_OFF) && !host_on)
            rc = eccl_scn_error(file, f->line, "%s: rank %d: its host%s is already off",
                           eccl_scn_fault_name(f->kind), f->rank, host_of);
        else if (f->kind == F_KILL && !up)
            rc = eccl_scn_error(file, f->line, "kill: rank %d: already killed", r);
        else if (f->kind == F_HOST_ON && host_on)
            rc = eccl_scn_error(file, f->line, "host_on: rank %d: its host%s is not off%s", f->rank,
                           host_of,
                           rph > 1 ? " (with ranks_per_host > 1 a kill takes down the "
                                     "process, not the host)" : "");
        if (f->kind == F_KILL) {
            up = 0;
            if (rph == 1) host_on = 0;
        } else if (f->kind == F_HOST_OFF) {
            host_on = up = 0;
        } else if (f->kind == F_HOST_ON) {
            host_on = up = 1;
        }
    }
    free(ev);
    return rc;
}

/* The scenario's `buffers` value. */
const char *eccl_scn_buffers_name(const eccl_scenario *c)
{
    if (c->cuda) return c->phantom ? "cuda_phantom" : "cuda";
    return c->phantom ? "phantom" : "host";
}

/* algo = TEXT: every rank's ECCL_ALGO, checked entry by entry as the
 * dispatcher reads it (core/coll/dispatch.c: `<collective|all>=<algorithm>`,
 * comma-separated), since the library would only warn and ignore a bad one. */
static int parse_algo(const char *file, int lineno, const char *val, eccl_scenario *c)
{
    if (strlen(val) >= sizeof c->algo)
        return eccl_scn_error(file, lineno, "algo: longer than %zu characters", sizeof c->algo - 1);
    for (const char *e = val; *e;) {
        const char *comma = strchr(e, ','), *end = comma ? comma : e + strlen(e);
        const char *eq = memchr(e, '=', (size_t)(end - e));
        const int all = eq && eq - e == 3 && memcmp(e, "all", 3) == 0;
        if (!eq || eccl_dispatch_algo_parse(eq + 1, (size_t)(end - eq - 1)) < 0 ||
            (!all && eccl_dispatch_coll_parse(e, (size_t)(eq - e)) < 0))
            return eccl_scn_error(file, lineno, "algo: \"%.*s\": want <collective|all>=<algorithm>[,...] "
                             "(e.g. allreduce=hier; ECCL_ALGO, docs)", (int)(end - e), e);
        e = comma ? comma + 1 : end;
    }
    strcpy(c->algo, val);
    return 0;
}

/* Returns 0, or -1 after printing why. */
/* chaos = FILE: a chaos plan (chaos/README.md) both runners apply, with
 * hosts named node-K as in the platform; FILE is relative to the scenario's
 * folder. Read and parsed here, so that a bad plan is a scenario error. */
#define CHAOS_PLAN_MAX (1 << 20)
static int read_chaos_plan(const char *file, int lineno, const char *val, eccl_scenario *c)
{
    char path[PATH_MAX];
    const char *slash = strrchr(file, '/');
    if (val[0] == '/' || !slash) snprintf(path, sizeof path, "%s", val);
    else snprintf(path, sizeof path, "%.*s/%s", (int)(slash - file), file, val);
    FILE *f = fopen(path, "r");
    char *text = f ? calloc(1, CHAOS_PLAN_MAX + 1) : NULL;
    size_t n = text ? fread(text, 1, CHAOS_PLAN_MAX + 1, f) : 0;
    if (f) fclose(f);
    if (!text || n > CHAOS_PLAN_MAX) {
        free(text);
        return eccl_scn_error(file, lineno, "chaos: %s: %s", path,
                              !f ? strerror(errno) : n > CHAOS_PLAN_MAX ? "larger than 1 MiB" : "out of memory");
    }
    char why[200];
    eccl_chaos_plan *plan = NULL;
    if (eccl_chaos_plan_parse(text, why, sizeof why, &plan) != ECCL_OK) {
        free(text);
        return eccl_scn_error(file, lineno, "chaos: %s: %s", path, why);
    }
    eccl_chaos_plan_free(plan);
    free(c->chaos_plan);
    c->chaos_plan = text;
    return 0;
}

/* The first fault that changes a link (slow_link, link_off, a partition's
 * cut), or NULL. */
static const eccl_scn_fault *link_fault(const eccl_scenario *c)
{
    for (int i = 0; i < c->nfaults; i++)
        if (c->faults[i].kind == F_SLOW || c->faults[i].kind == F_LINK_OFF) return &c->faults[i];
    return NULL;
}

/* flow_min_size (backends/sim/env_sg.h, eccl_sg_world_set_flow_min_bytes):
 * small messages off the flow model's solver, which is sound only where
 * no link changes and no stream is paced. Given at `line` (0: not given,
 * then FLOW_MIN_SIZE_DEFAULT where it is sound, else 0). */
static int check_flow_min_size(const char *file, int line, eccl_scenario *c)
{
    const char *why = NULL;
    if (link_fault(c)) why = "a slow_link, link_off or partition changes links under it";
    if (c->tcp_window > 0) why = "tcp_window paces every message of a stream";
    if (c->ibv) why = "transport = ibv moves RDMA writes as flows";
    if (!line) {
        c->flow_min_bytes = c->latency_net || why ? 0 : FLOW_MIN_SIZE_DEFAULT;
        return 0;
    }
    if (c->latency_net)
        return eccl_scn_error(file, line, "flow_min_size: a key of net_model = flow (under latency no "
                              "message is a flow)");
    if (c->flow_min_bytes > 0 && why)
        return eccl_scn_error(file, line, "flow_min_size: not with this scenario: %s", why);
    return 0;
}

int eccl_scn_parse(const char *file, eccl_scenario *c)
{
    memset(c, 0, sizeof *c);
    c->world_min = 2;
    c->stagger_s = 1e-3;
    c->expect_survivors = -1;
    c->oversubscription = 1;
    c->ranks_per_host = 1;
    c->progress_thread = 1;
    c->loopback_bandwidth_Bps = LOOPBACK_BW_DEFAULT;
    c->loopback_latency_s = LOOPBACK_LAT_DEFAULT;
    c->dev_copy_Bps = DEV_COPY_BW_DEFAULT;
    c->dev_copy_latency_s = DEV_COPY_LATENCY_DEFAULT;
    int key_line[K_NKEYS] = {0}; /* 0: not given */
    FILE *f = fopen(file, "r");
    if (!f) return eccl_scn_error(file, 0, "cannot open: %s", strerror(errno));
    char raw[MAX_LINE];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(raw, sizeof raw, f)) {
        lineno++;
        if (!strchr(raw, '\n') && !feof(f)) {
            rc = eccl_scn_error(file, lineno, "line too long");
            break;
        }
        char *hash = strchr(raw, '#');
        if (hash) *hash = '\0';
        char *line = trim(raw);
        if (!*line) continue;
        char *eq = strchr(line, '=');
        if (!eq) {
            rc = eccl_scn_error(file, lineno, "expected `key = value`, got \"%s\"", line);
            break;
        }
        *eq = '\0';
        char *key = trim(line), *val = trim(eq + 1);
        if (!*val) {
            rc = eccl_scn_error(file, lineno, "%s: empty value", key);
            break;
        }
        if (strcmp(key, "kill_relay") == 0) {
            /* kill_relay = K @ TIME: repeatable, checked against `relays` below */
            char buf[MAX_LINE], *lhs, *when, *rest;
            long k;
            uint64_t at;
            if (c->n_relay_kills == MAX_RELAY_KILLS) {
                rc = eccl_scn_error(file, lineno, "kill_relay: at most %d", MAX_RELAY_KILLS);
                break;
            }
            if (split_at(val, buf, sizeof buf, &lhs, &when) || eccl_scn_parse_long(lhs, 1, MAX_RANKS, &k) ||
                parse_time_prefix(when, &at, &rest) || *rest) {
                rc = eccl_scn_error(file, lineno, "kill_relay: \"%s\": want K @ TIME", val);
                break;
            }
            c->relay_kills[c->n_relay_kills].relay = (int)k;
            c->relay_kills[c->n_relay_kills].at_ns = at;
            c->relay_kills[c->n_relay_kills++].line = lineno;
            continue;
        }
        if (strcmp(key, "region_rtt") == 0) {
            /* region_rtt = A B TIME: repeatable, checked against the platform below */
            if (parse_region_rtt(val, c, lineno)) {
                rc = eccl_scn_error(file, lineno, "region_rtt: \"%s\": want `A B TIME`, regions A != B "
                                    "(0-based) and a round-trip time above 0 up to 10s", val);
                break;
            }
            continue;
        }
        int fk = -1;
        static const char *const fault_keys[] = {"kill", "host_off", "host_on", "join",
                                                 "link_off", "link_on", "partition",
                                                 "slow_link"};
        for (int k = 0; k < 8; k++)
            if (strcmp(key, fault_keys[k]) == 0) fk = k;
        if (fk >= 0) {
            eccl_scn_fault fs[2];
            memset(fs, 0, sizeof fs);
            int nf = 1, bad;
            if (fk == 0) bad = parse_kill(val, &fs[0]);
            else if (fk <= 3) bad = parse_host_fault(val, (eccl_scn_fault_kind)fk, &fs[0]);
            else {
                int heal = 0;
                bad = parse_link_fault(val, key, &fs[0], &fs[1], &heal);
                nf += heal;
            }
            static const char *const want[] = {
                "`RANK @ iter I` or `RANK @ TIME` (TIME with a unit: s ms us ns)",
                "`RANK @ TIME`", "`RANK @ TIME`", "`RANK @ TIME`", "`LINK[,LINK...] @ TIME`",
                "`LINK[,LINK...] @ TIME`", "`LINK[,LINK...] @ TIME [heal TIME]` (heal later)",
                "`LINK[,LINK...] @ TIME` then `factor F` or `bandwidth BW` and/or `latency T`"};
            if (bad) {
                rc = eccl_scn_error(file, lineno, "%s: \"%s\": want %s", key, val, want[fk]);
                break;
            }
            eccl_scn_fault *nfs = realloc(c->faults, (size_t)(c->nfaults + nf) * sizeof *nfs);
            if (!nfs) {
                rc = eccl_scn_error(file, lineno, "out of memory");
                break;
            }
            c->faults = nfs;
            for (int i = 0; i < nf; i++) {
                fs[i].line = lineno;
                c->faults[c->nfaults++] = fs[i];
            }
            continue;
        }
        int id = -1;
        for (int k = 0; k < K_NKEYS; k++)
            if (strcmp(key, key_defs[k].name) == 0) id = k;
        if (id < 0) {
            rc = eccl_scn_error(file, lineno, "unknown key \"%s\" (see scenarios/README.md)", key);
            break;
        }
        if (key_line[id]) {
            rc = eccl_scn_error(file, lineno, "%s given twice (first on line %d)", key, key_line[id]);
            break;
        }
        key_line[id] = lineno;
        if (id == K_NAME) {
            if (!valid_name(val))
                rc = eccl_scn_error(file, lineno, "name: \"%s\": use 1-63 of [A-Za-z0-9._-], not "
                               "starting with '.'", val);
            else
                strcpy(c->name, val);
        } else if (id == K_PLATFORM) {
            if (strcmp(val, "flat") == 0) c->kind = PLATFORM_FLAT;
            else if (strcmp(val, "clos") == 0) c->kind = PLATFORM_CLOS;
            else if (strcmp(val, "wan") == 0) c->kind = PLATFORM_WAN;
            else rc = eccl_scn_error(file, lineno, "platform: \"%s\": want flat, clos or wan", val);
            if (rc == 0) strcpy(c->platform, val);
        } else if (id == K_COUNT) {
            if (eccl_scn_parse_long(val, 1, 1L << 26, &c->count))
                rc = eccl_scn_error(file, lineno, "count: \"%s\": want an integer in 1..%ld", val,
                               1L << 26);
        } else if (id == K_BUFFERS) {
            if (strcmp(val, "host") == 0) c->phantom = 0, c->cuda = 0;
            else if (strcmp(val, "phantom") == 0) c->phantom = 1, c->cuda = 0;
            else if (strcmp(val, "cuda") == 0) c->phantom = 0, c->cuda = 1;
            else if (strcmp(val, "cuda_phantom") == 0) c->phantom = 1, c->cuda = 1;
            else rc = eccl_scn_error(file, lineno, "buffers: \"%s\": want host, phantom, cuda or "
                                "cuda_phantom", val);
        } else if (id == K_NET_MODEL) {
            if (strcmp(val, "flow") == 0) c->latency_net = 0;
            else if (strcmp(val, "latency") == 0) c->latency_net = 1;
            else rc = eccl_scn_error(file, lineno, "net_model: \"%s\": want flow or latency", val);
        } else if (id == K_FLOW_MIN_SIZE) {
            size_t v;
            if (tool_parse_size(val, &v) || v > FLOW_MIN_SIZE_MAX)
                rc = eccl_scn_error(file, lineno, "flow_min_size: \"%s\": want a size like 0, 256 or 1K "
                                    "(0..64K)", val);
            else
                c->flow_min_bytes = v;
        } else if (id == K_TRANSPORT) {
            if (strcmp(val, "tcp") == 0) c->ibv = 0;
            else if (strcmp(val, "ibv") == 0) c->ibv = 1;
            else rc = eccl_scn_error(file, lineno, "transport: \"%s\": want tcp or ibv", val);
        } else if (id == K_IB_MIN_BYTES || id == K_IB_CHUNK_BYTES) {
            /* net_ibv's ranges (docs/transports.md) */
            long lo = id == K_IB_MIN_BYTES ? 1 : 4096;
            long *dst = id == K_IB_MIN_BYTES ? &c->ib_min_bytes : &c->ib_chunk_bytes;
            if (eccl_scn_parse_long(val, lo, 1L << 30, dst))
                rc = eccl_scn_error(file, lineno, "%s: \"%s\": want an integer in %ld..%ld",
                               key_defs[id].name, val, lo, 1L << 30);
        } else if (id == K_WORKLOAD) {
            if (strcmp(val, "worker") == 0) c->diloco = 0;
            else if (strcmp(val, "diloco") == 0) c->diloco = 1;
            else if (strcmp(val, "nccl2_bootstrap") == 0) c->nccl2 = 1;
            else if (strcmp(val, "bench") == 0) c->bench = 1;
            else rc = eccl_scn_error(file, lineno, "workload: \"%s\": want worker, diloco, "
                                "nccl2_bootstrap or bench", val);
        } else if (id == K_COLL) {
            c->bench_coll = bench_coll_parse(val);
            if (c->bench_coll == COLL_BARRIER) c->bench_coll = -1; /* eccl-bench's only: no bytes to price */
            if (c->bench_coll < 0)
                rc = eccl_scn_error(file, lineno, "coll: \"%s\": want allreduce, allgather, reduce_scatter, "
                               "broadcast, reduce or alltoall (barrier: eccl-bench only, it has no bytes)", val);
        } else if (id == K_MINBYTES || id == K_MAXBYTES) {
            /* eccl-bench's -b / -e: K M G T are powers of 1024 */
            size_t *dst = id == K_MINBYTES ? &c->bench_minbytes : &c->bench_maxbytes;
            if (tool_parse_size(val, dst) || *dst == 0 || *dst > ((size_t)1 << 40))
                rc = eccl_scn_error(file, lineno, "%s: \"%s\": want a size like 8, 256K, 64M or 1G (1..1T)",
                               key, val);
        } else if (id == K_ALGO) {
            rc = parse_algo(file, lineno, val, c);
        } else if (id == K_CHAOS) {
            rc = read_chaos_plan(file, lineno, val, c);
        } else if (id == K_TCP_WINDOW) {
            /* A size as eccl-bench's, K M G powers of 1024: 1K (a tiny
             * window) .. 1G (Linux's largest tcp_rmem is far below) */
            size_t w;
            if (tool_parse_size(val, &w) || w < 1024 || w > ((size_t)1 << 30))
                rc = eccl_scn_error(file, lineno, "tcp_window: \"%s\": want a size like 64K, 4M or 16M "
                                    "(1K..1G)", val);
            else
                c->tcp_window = (double)w;
        } else if (id == K_NCCL2_STAGGER || id == K_NCCL2_TIMEOUT) {
            double q;
            const int timeout = id == K_NCCL2_TIMEOUT;
            /* NCCL's stagger is 1 ms a rank; a launcher's timeout is long. */
            if (eccl_chaos_parse_quantity(val, ECCL_CHAOS_TIME, &q) || (timeout ? q < 1e-3 || q > 1e5 : q > 1))
                rc = eccl_scn_error(file, lineno, "%s: \"%s\": want a time (s ms us ns) %s", key, val,
                               timeout ? "in [1ms, 100000s]" : "up to 1s");
            else if (timeout) c->nccl2_timeout_ns = (uint64_t)llround(q * 1e9);
            else c->nccl2_stagger_ns = (uint64_t)llround(q * 1e9);
        } else if (id == K_NCCL2_ALLGATHER) {
            if (strcmp(val, "messages") == 0) c->nccl2_replay = 0;
            else if (strcmp(val, "replay") == 0) c->nccl2_replay = 1;
            else rc = eccl_scn_error(file, lineno, "nccl2_allgather: \"%s\": want messages or replay", val);
        } else if (id == K_CHURN) {
            if (parse_churn(val, c))
                rc = eccl_scn_error(file, lineno, "churn: \"%s\": want interval=T1..T2 [min=N] [max=N] "
                               "[seed=S] [until=T] (T2 >= T1 > 0, 2 <= min <= max)", val);
        } else if (id == K_DURATION || id == K_MAX_STALL) {
            double q;
            if (eccl_chaos_parse_quantity(val, ECCL_CHAOS_TIME, &q) || q <= 0 || q > 1e5)
                rc = eccl_scn_error(file, lineno, "%s: \"%s\": want a time (s ms us ns) in (0, 100000s]",
                               key, val);
            else if (id == K_DURATION) c->duration_s = (double)llround(q * 1e9) / 1e9;
            else c->max_stall_s = (double)llround(q * 1e9) / 1e9;
        } else if (id == K_STALL) {
            if (parse_stall(val, c))
                rc = eccl_scn_error(file, lineno, "stall: \"%s\": want `RANK @ iter I for TIME` (whole ms)", val);
        } else if (id == K_CORRUPT_AT) {
            if (eccl_scn_parse_u64(val, &c->corrupt_at) || c->corrupt_at == 0)
                rc = eccl_scn_error(file, lineno, "corrupt_at: \"%s\": want a revision >= 1", val);
        } else if (id == K_SEED) {
            if (eccl_scn_parse_u64(val, &c->seed))
                rc = eccl_scn_error(file, lineno, "seed: \"%s\": want an unsigned 64-bit integer", val);
            else
                c->have_seed = 1;
        } else {
            rc = parse_key_value(file, lineno, &key_defs[id], val, c);
        }
    }
    if (rc == 0 && ferror(f)) rc = eccl_scn_error(file, 0, "read error");
    fclose(f);
    if (rc) return rc;
    if (!key_line[K_PLATFORM]) return eccl_scn_error(file, 0, "missing required key \"platform\"");

    const int *req = flat_required, *opt = flat_optional;
    if (c->kind == PLATFORM_CLOS) req = clos_required, opt = clos_optional;
    if (c->kind == PLATFORM_WAN) req = wan_required, opt = wan_optional;
    int bad = -1; /* the first, in file order, of the keys this platform does not take */
    for (int k = 0; k < K_NKEYS; k++)
        if (key_line[k] && !in_list(common_required, k) && !in_list(common_optional, k) &&
            !in_list(req, k) && !in_list(opt, k) && (bad < 0 || key_line[k] < key_line[bad]))
            bad = k;
    if (bad >= 0)
        return eccl_scn_error(file, key_line[bad], "%s: not a key of platform = %s (see "
                         "scenarios/README.md)", key_defs[bad].name, c->platform);
    if (c->n_region_rtts && c->kind != PLATFORM_WAN)
        return eccl_scn_error(file, c->region_rtts[0].line, "region_rtt: not a key of platform = %s (see "
                              "scenarios/README.md)", c->platform);
    if (!c->cuda) {
        static const int only_cuda[] = {K_DEV_COPY_RATE, K_DEV_COPY_LAT, K_DEVICE_RING, -1};
        for (const int *k = only_cuda; *k >= 0; k++)
            if (key_line[*k])
                return eccl_scn_error(file, key_line[*k], "%s: a key of buffers = cuda or cuda_phantom",
                                 key_defs[*k].name);
    }
    if (!c->ibv) {
        static const int only_ibv[] = {K_IB_QPS, K_IB_MIN_BYTES, K_IB_CHUNK_BYTES, -1};
        for (const int *k = only_ibv; *k >= 0; k++)
            if (key_line[*k])
                return eccl_scn_error(file, key_line[*k], "%s: a key of transport = ibv", key_defs[*k].name);
    }
    for (const int *k = common_required; *k >= 0; k++)
        if (!key_line[*k] && !(c->diloco && *k == K_ITERS) &&
            !((c->nccl2 || c->bench) && (*k == K_ITERS || *k == K_COUNT)))
            return eccl_scn_error(file, 0, "missing required key \"%s\"", key_defs[*k].name);
    if (!c->bench) {
        /* algo is every workload's: a scale run forces an all-reduce with it
         * (the tree's 3 links a rank against recursive doubling's log2 N). */
        static const int only_bench[] = {K_COLL, K_MINBYTES, K_MAXBYTES, K_STEPFACTOR, K_WARMUP,
                                         K_BENCH_CORRUPT, K_CONCURRENT, -1};
        for (const int *k = only_bench; *k >= 0; k++)
            if (key_line[*k])
                return eccl_scn_error(file, key_line[*k], "%s: a key of workload = bench", key_defs[*k].name);
    } else {
        /* A platform, ranks on it and eccl's knobs: no faults, no checks
         * of a job (the rows' #wrong is the check). */
        static const int not_bench[] = {K_COUNT, K_EXPECT, K_EXPECT_SLOWDOWN, K_WORLD_MIN, K_OPTIMIZE_AT,
                                        K_EXPECT_SPEEDUP, K_STEP, K_PEER_TIMEOUT, K_RELAYS,
                                        K_RELAY_FANOUT, K_DEV_COPY_RATE, K_DEV_COPY_LAT, K_DEVICE_RING, -1};
        for (const int *k = not_bench; *k >= 0; k++)
            if (key_line[*k])
                return eccl_scn_error(file, key_line[*k], "%s: not a key of workload = bench",
                                 key_defs[*k].name);
        if (c->nfaults)
            return eccl_scn_error(file, c->faults[0].line, "%s: workload = bench takes no faults",
                             eccl_scn_fault_name(c->faults[0].kind));
        if (c->n_relay_kills)
            return eccl_scn_error(file, c->relay_kills[0].line, "kill_relay: workload = bench takes no faults");
        if (c->diloco || c->nccl2)
            return eccl_scn_error(file, key_line[K_WORKLOAD], "workload: internal error");
        /* Phantom buffers time the rows without their bytes (no #wrong:
         * eccl-bench's --check 0), so big sizes fit in memory. */
        if (c->cuda)
            return eccl_scn_error(file, key_line[K_BUFFERS], "buffers: workload = bench takes host or phantom");
        if (c->phantom && c->bench_corrupt)
            return eccl_scn_error(file, key_line[K_BENCH_CORRUPT], "bench_corrupt: buffers = phantom checks "
                                  "nothing");
        if (!key_line[K_CONCURRENT]) c->bench_concurrent = 1;
        if (!key_line[K_ITERS]) c->iters = 20;
        if (!key_line[K_MINBYTES]) c->bench_minbytes = 8;
        if (!key_line[K_MAXBYTES]) c->bench_maxbytes = (size_t)1 << 20;
        if (!key_line[K_STEPFACTOR]) c->bench_stepfactor = 2;
        if (!key_line[K_WARMUP]) c->bench_warmup = 5;
        if (c->bench_minbytes > c->bench_maxbytes)
            return eccl_scn_error(file, key_line[K_MINBYTES] ? key_line[K_MINBYTES] : key_line[K_MAXBYTES],
                             "minbytes %zu exceeds maxbytes %zu", c->bench_minbytes, c->bench_maxbytes);
        if (c->ranks < 2)
            return eccl_scn_error(file, key_line[K_RANKS], "ranks: workload = bench wants at least 2");
        if (c->bench_corrupt > c->ranks)
            return eccl_scn_error(file, key_line[K_BENCH_CORRUPT], "bench_corrupt: rank %d: ranks are 1..%d",
                             c->bench_corrupt, c->ranks);
    }
    if (!c->nccl2) {
        static const int only_nccl2[] = {K_NCCL2_STAGGER, K_NCCL2_TIMEOUT, K_NCCL2_ALLGATHER,
                                         K_NCCL2_CORRUPT, -1};
        for (const int *k = only_nccl2; *k >= 0; k++)
            if (key_line[*k])
                return eccl_scn_error(file, key_line[*k], "%s: a key of workload = nccl2_bootstrap",
                                 key_defs[*k].name);
    } else {
        /* No collectives, no eccl knobs: arrivals, the platform, the
         * root's cost per message and a fault plan of crashes. */
        static const int not_nccl2[] = {K_ITERS, K_COUNT, K_EXPECT, K_EXPECT_SLOWDOWN, K_WORLD_MIN,
                                        K_OPTIMIZE_AT, K_EXPECT_SPEEDUP, K_STEP, K_PEER_TIMEOUT,
                                        K_BUFFERS, K_REDUCE_RATE, K_COPY_RATE, K_TRANSPORT,
                                        K_CHURN, K_DURATION, K_MAX_STALL, K_CORRUPT_AT, K_ALGO, -1};
        for (const int *k = not_nccl2; *k >= 0; k++)
            if (key_line[*k])
                return eccl_scn_error(file, key_line[*k], "%s: not a key of workload = nccl2_bootstrap",
                                 key_defs[*k].name);
        for (int i = 0; i < c->nfaults; i++) {
            const eccl_scn_fault *fs = &c->faults[i];
            if ((fs->kind != F_KILL && fs->kind != F_HOST_OFF) || fs->at_iter >= 0)
                return eccl_scn_error(file, fs->line, "%s: workload = nccl2_bootstrap takes `kill = R @ "
                                 "TIME` and `host_off = R @ TIME` only", eccl_scn_fault_name(fs->kind));
        }
        if (c->nccl2_corrupt > c->ranks)
            return eccl_scn_error(file, key_line[K_NCCL2_CORRUPT], "nccl2_corrupt: rank %d: ranks are "
                             "1..%d", c->nccl2_corrupt, c->ranks);
        if (c->nccl2_corrupt && c->nccl2_replay)
            return eccl_scn_error(file, key_line[K_NCCL2_CORRUPT], "nccl2_corrupt: needs "
                             "nccl2_allgather = messages (a replay moves no slots)");
        if (!key_line[K_NCCL2_STAGGER]) c->nccl2_stagger_ns = 1000000; /* NCCL 2.x: 1 ms a rank */
        if (!key_line[K_NCCL2_TIMEOUT]) c->nccl2_timeout_ns = 600ull * 1000000000ull;
        c->iters = 0;
    }
    if (c->diloco) {
        /* The churn makes the faults; the run ends by time, not by count. */
        static const int not_diloco[] = {K_ITERS, K_EXPECT, K_EXPECT_SLOWDOWN, K_WORLD_MIN,
                                         K_OPTIMIZE_AT, K_EXPECT_SPEEDUP, -1};
        for (const int *k = not_diloco; *k >= 0; k++)
            if (key_line[*k])
                return eccl_scn_error(file, key_line[*k], "%s: not a key of workload = diloco",
                                 key_defs[*k].name);
        if (c->nfaults)
            return eccl_scn_error(file, c->faults[0].line, "%s: workload = diloco takes its faults "
                             "from `churn`", eccl_scn_fault_name(c->faults[0].kind));
        if (!key_line[K_DURATION])
            return eccl_scn_error(file, 0, "missing required key \"duration\" (workload = diloco)");
        if (c->phantom)
            return eccl_scn_error(file, key_line[K_BUFFERS], "buffers: workload = diloco checks "
                             "values: host or cuda buffers only");
        if (!key_line[K_MAX_STALL]) c->max_stall_s = 5.0;
        if (c->have_churn) {
            if (c->churn_max > c->ranks)
                return eccl_scn_error(file, key_line[K_CHURN], "churn: max=%d: only %d ranks",
                                 c->churn_max, c->ranks);
            if (!c->churn_max) c->churn_max = c->ranks;
            if (c->churn_min > c->churn_max)
                return eccl_scn_error(file, key_line[K_CHURN], "churn: min above max");
            if (!c->churn_until_ns) {
                double u = c->duration_s - 0.5;
                c->churn_until_ns = u > 0 ? (uint64_t)llround(u * 1e9) : 0;
            }
        }
        c->iters = 0;
    } else {
        static const int only_diloco[] = {K_CHURN, K_DURATION, K_MAX_STALL, K_CORRUPT_AT, -1};
        for (const int *k = only_diloco; *k >= 0; k++)
            if (key_line[*k])
                return eccl_scn_error(file, key_line[*k], "%s: a key of workload = diloco",
                                 key_defs[*k].name);
    }
    if (c->chaos_plan && (c->diloco || c->nccl2 || c->bench))
        return eccl_scn_error(file, key_line[K_CHAOS], "chaos: the job workload only (its checker knows the "
                              "plan's kills)");
    if (c->chaos_plan && c->phantom)
        return eccl_scn_error(file, key_line[K_CHAOS], "chaos: a plan holds bytes: host or cuda buffers");
    for (const int *k = req; *k >= 0; k++)
        if (!key_line[*k])
            return eccl_scn_error(file, 0, "missing required key \"%s\" (platform = %s)",
                             key_defs[*k].name, c->platform);

    if (c->kind == PLATFORM_CLOS) {
        long long n = (long long)c->hosts_per_rack * c->racks_per_zone;
        n *= c->zones_per_dc;
        n *= c->dcs;
        if (n > MAX_HOSTS)
            return eccl_scn_error(file, key_line[K_DCS], "clos: hosts_per_rack x racks_per_zone x "
                             "zones_per_dc x dcs = %lld hosts, at most %d", n, MAX_HOSTS);
        c->hosts = (int)n;
        /* NCCLX's 1 : 7 : 15 : 30 unless given. */
        if (!key_line[K_ZONE_LAT]) c->zone_latency_s = 7 * c->latency_s;
        if (!key_line[K_DC_LAT]) c->dc_latency_s = 15 * c->latency_s;
        if (!key_line[K_INTER_DC_LAT]) c->inter_dc_latency_s = 30 * c->latency_s;
        if (c->zone_latency_s < c->latency_s)
            return eccl_scn_error(file, key_line[K_ZONE_LAT], "zone_latency: below latency");
        if (c->dc_latency_s < c->zone_latency_s)
            return eccl_scn_error(file, key_line[K_DC_LAT] ? key_line[K_DC_LAT] : key_line[K_ZONE_LAT],
                             "dc_latency: below zone_latency");
        if (c->inter_dc_latency_s < c->dc_latency_s)
            return eccl_scn_error(file, key_line[K_INTER_DC_LAT] ? key_line[K_INTER_DC_LAT]
                                                            : key_line[K_DC_LAT],
                             "inter_dc_latency: below dc_latency");
    } else if (c->kind == PLATFORM_WAN) {
        long long n = (long long)c->regions * c->sites_per_region;
        n *= c->hosts_per_site;
        if (n > MAX_HOSTS)
            return eccl_scn_error(file, key_line[K_HOSTS_PER_SITE], "wan: regions x sites_per_region x "
                             "hosts_per_site = %lld hosts, at most %d", n, MAX_HOSTS);
        c->hosts = (int)n;
        if (!key_line[K_SITE_LAT]) c->site_latency_s = c->latency_s;
        if (!key_line[K_SITE_BW]) c->site_bandwidth_Bps = c->hosts_per_site * c->bandwidth_Bps;
        if (c->site_latency_s < c->latency_s)
            return eccl_scn_error(file, key_line[K_SITE_LAT], "site_latency: below latency");
        if (key_line[K_REGION_LAT] && c->region_latency_s < c->site_latency_s)
            return eccl_scn_error(file, key_line[K_REGION_LAT], "region_latency: below site_latency "
                             "(which is latency unless given)");
        if (check_region_rtts(file, c, key_line[K_REGION_LAT])) return -1;
    }
    /* Host 0 runs the master alone; ranks fill node-1, node-2, ...
     * ranks_per_host at a time. */
    const int rank_hosts = (c->ranks + c->ranks_per_host - 1) / c->ranks_per_host;
    if (c->hosts < rank_hosts + 1) {
        if (c->ranks_per_host == 1)
            return eccl_scn_error(file, 0, "%d hosts: need ranks + 1 = %d (host 0 runs the master)",
                             c->hosts, c->ranks + 1);
        return eccl_scn_error(file, 0, "%d hosts: need 1 + ceil(ranks / ranks_per_host) = 1 + "
                         "ceil(%d / %d) = %d (host 0 runs the master)", c->hosts, c->ranks,
                         c->ranks_per_host, rank_hosts + 1);
    }
    /* Two ranks on one host talk through its loopback; with one rank per
     * host nothing does, so the platform only has it when asked for. */
    c->loopback = c->ranks_per_host > 1 || key_line[K_LOOPBACK_BW] || key_line[K_LOOPBACK_LAT];
    if (!key_line[K_PEER_TIMEOUT]) c->peer_timeout_s = 5.0; /* the library's default */
    if (c->master_msg_cost_s > 0.001)
        return eccl_scn_error(file, key_line[K_MASTER_MSG_COST], "master_msg_cost: at most 1ms");
    if (c->peer_timeout_s < 0.001)
        return eccl_scn_error(file, key_line[K_PEER_TIMEOUT], "peer_timeout: at least 1ms");
    /* The worker sleeps whole milliseconds. */
    if (fabs(c->step_s * 1e3 - (double)llround(c->step_s * 1e3)) > 1e-9)
        return eccl_scn_error(file, key_line[K_STEP], "step: want whole milliseconds");
    if (check_host_plan(file, c)) return -1;
    int slow = 0;
    for (int i = 0; i < c->nfaults; i++) slow |= c->faults[i].kind == F_SLOW;
    if (key_line[K_EXPECT_SLOWDOWN] && !slow)
        return eccl_scn_error(file, key_line[K_EXPECT_SLOWDOWN], "expect_slowdown: no slow_link");
    if (key_line[K_EXPECT_SLOW_LINK] && (!slow || c->diloco || c->nccl2 || c->bench))
        return eccl_scn_error(file, key_line[K_EXPECT_SLOW_LINK], "expect_slow_link: needs a slow_link, and the "
                              "job workload");
    if (c->expect_slow_link > c->ranks)
        return eccl_scn_error(file, key_line[K_EXPECT_SLOW_LINK], "expect_slow_link: rank %d: ranks are 1..%d",
                              c->expect_slow_link, c->ranks);
    if (c->optimize_at && c->optimize_at >= c->iters)
        return eccl_scn_error(file, key_line[K_OPTIMIZE_AT], "optimize_at: want an iteration below iters");
    if (c->optimize_at && slow)
        return eccl_scn_error(file, key_line[K_OPTIMIZE_AT], "optimize_at: not with slow_link (both "
                         "split the all-reduces into before and after)");
    if (c->latency_net && c->ibv)
        return eccl_scn_error(file, key_line[K_NET_MODEL], "net_model = latency: not with transport = ibv "
                         "(RDMA's bulk writes need flows that share links)");
    const eccl_scn_fault *lf = link_fault(c);
    if (c->latency_net && lf)
        return eccl_scn_error(file, lf->line, "net_model = latency: links are not simulated, "
                         "so no slow_link or link_off");
    if ((rc = check_flow_min_size(file, key_line[K_FLOW_MIN_SIZE], c)) != 0) return rc;
    if (c->relays > c->ranks)
        return eccl_scn_error(file, key_line[K_RELAYS], "relays = %d: more than the %d ranks", c->relays,
                         c->ranks);
    if (c->relays && c->nccl2)
        return eccl_scn_error(file, key_line[K_RELAYS], "relays: not a key of workload = nccl2_bootstrap");
    if (key_line[K_RELAY_FANOUT] && !c->relays)
        return eccl_scn_error(file, key_line[K_RELAY_FANOUT], "relay_fanout: no relays");
    if (key_line[K_RELAY_FANOUT] && c->diloco)
        return eccl_scn_error(file, key_line[K_RELAY_FANOUT],
                              "relay_fanout with workload = diloco: its relays sit on spare hosts, one a relay");
    if (c->relays && c->diloco && c->hosts - 1 - eccl_scn_rank_host(c, c->ranks) < c->relays)
        return eccl_scn_error(file, key_line[K_RELAYS],
                         "relays = %d with workload = diloco: needs as many hosts beyond the ranks' "
                         "(the churn crashes ranks' hosts)", c->relays);
    if (c->n_relay_kills && c->diloco)
        return eccl_scn_error(file, c->relay_kills[0].line, "kill_relay: workload = diloco makes its own faults");
    for (int i = 0; i < c->n_relay_kills; i++)
        if (c->relay_kills[i].relay > eccl_scn_relay_count(c))
            return eccl_scn_error(file, c->relay_kills[i].line, "kill_relay: relay %d of %d",
                             c->relay_kills[i].relay, eccl_scn_relay_count(c));
    if ((rc = check_trace_keys(file, key_line, c)) != 0) return rc;
    if (key_line[K_EXPECT_SPEEDUP] && !c->optimize_at)
        return eccl_scn_error(file, key_line[K_EXPECT_SPEEDUP], "expect_speedup: no optimize_at");
    if (c->expect_survivors > c->ranks)
        return eccl_scn_error(file, 0, "expect_survivors = %d: only %d ranks", c->expect_survivors,
                         c->ranks);
    return 0;
}

void eccl_scn_free(eccl_scenario *c)
{
    free(c->chaos_plan);
    c->chaos_plan = NULL;
    free(c->faults);
    c->faults = NULL;
    c->nfaults = 0;
    free(c->region_rtts);
    c->region_rtts = NULL;
    c->n_region_rtts = 0;
}
