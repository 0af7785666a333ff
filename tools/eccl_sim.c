/* eccl-sim: runs a scenario file on the simulator backend.
 *
 *   eccl-sim run FILE [--seed S] [--out DIR] [--log-level 0-5] [--verbose]
 *
 * The scenario (format: scenarios/README.md) describes a generated platform,
 * N ranks running the very worker loop eccl-worker runs
 * (examples/worker_loop.c, eccl_worker_run) as SimGrid actors, and a fault
 * plan. After the run the outcome is checked; the results go to DIR (default
 * results/<name>/ under the current directory): platform.xml, events.tsv,
 * ranks.tsv, summary.tsv, plot.gp and plot.png (rendered with gnuplot when it
 * is installed).
 *
 * Exit status: 0 every check passed, 1 a check failed (or the outputs could
 * not be written), 2 usage or scenario error.
 *
 * Like everything the simulation links, this file holds no mutable global:
 * the scenario, its PRNG and its results hang off one struct in main().
 * Everything written to the TSVs comes from the simulated clock and the
 * seeded PRNG, so the same file and seed give the same bytes.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <xbt/config.h>
#include <xbt/log.h>

#include "eccl.h"
#include "env_sg.h"
#include "worker_loop_sg.h"

#define MAX_RANKS 100000
#define MAX_HOSTS 2000000 /* clos and wan: generated hosts */
#define MAX_REGIONS 64     /* wan: a link per pair of regions */
#define MAX_LINE 1024

/* ---- scenario ------------------------------------------------------------ */

typedef struct kill_spec {
    int rank;      /* 1..ranks: the host node-<rank> goes off */
    int at_iter;   /* >= 0: when the rank begins this iteration's all-reduce ... */
    uint64_t at_ns; /* ... otherwise at this simulated time */
} kill_spec;

typedef enum platform_kind { PLATFORM_FLAT, PLATFORM_CLOS, PLATFORM_WAN } platform_kind;

typedef struct scenario_cfg {
    char name[64];
    char platform[16];
    platform_kind kind;
    int hosts, ranks, iters, world_min;
    long count;
    double bandwidth_Bps, latency_s, jitter_s, stagger_s;
    /* platform = clos: host-to-host latencies, same rack < zone < DC < other DC */
    int hosts_per_rack, racks_per_zone, zones_per_dc, dcs;
    double oversubscription, zone_latency_s, dc_latency_s, inter_dc_latency_s;
    /* platform = wan: host-to-host latencies, same site < region < other region */
    int regions, sites_per_region, hosts_per_site;
    double site_latency_s, site_bandwidth_Bps, region_latency_s, region_bandwidth_Bps,
        flow_bandwidth_Bps; /* 0: no per-flow cap */
    /* the simulated device: buffers = host|phantom, kernel rates (0: free) */
    int phantom;
    double reduce_rate_Bps, copy_rate_Bps;
    int expect_survivors; /* -1: ranks - kills */
    int have_seed;
    uint64_t seed;
    int nkills;
    kill_spec *kills;
} scenario_cfg;

/* ---- run state ----------------------------------------------------------- */

typedef struct sim sim;

typedef struct rank_state {
    sim *s;
    int idx; /* 1..ranks, also the host node-idx */
    char name[16];
    char host[24];
    uint64_t arrive_ns; /* staggered start, plus seeded jitter */
    int kill;           /* index into cfg.kills, -1 when never killed */
    int kill_armed;     /* its killer actor was started */
    int killed, returned, status;
    int exit_status; /* from its event=exit line; -1 before */
    int oks, last_ok_iter, last_ok_world, failed_ops;
    int phantom_oks;           /* event=ok lines that said values=phantom */
    int hashed_oks;            /* event=ok lines with a result hash */
    uint64_t begin_ns, op_ns; /* last event=begin; last begin-to-ok time */
    uint64_t *hashes;          /* per iter, from its event=ok lines */
} rank_state;

typedef struct event_row {
    uint64_t t_ns;
    int rank;
    char event[16];
    int iter, world; /* -1: none */
    char ms[24];     /* as the loop printed it, "-" when none */
    char hash[24];   /* event=ok: the result's hash, "phantom", else "-" */
} event_row;

struct sim {
    const scenario_cfg *cfg;
    eccl_sg_world *w;
    const char *master_addr;
    int verbose;
    int done; /* ranks returned or killed; the master stops at cfg->ranks */
    int nkilled;
    int next_milestone; /* the next iteration whose completion is announced */
    int *oks_at;        /* per iter: live ranks that finished it */
    rank_state *rk;
    event_row *ev;
    size_t nev, cap_ev;
    int oom;
    /* Every good all-reduce, begin to ok, all ranks: count, sum, minimum. */
    uint64_t ar_n, ar_sum_ns, ar_min_ns;
};

/* ---- small helpers ------------------------------------------------------- */

__attribute__((format(printf, 3, 4))) static int cfg_error(const char *file, int line,
                                                           const char *fmt, ...)
{
    va_list ap;
    if (line > 0)
        fprintf(stderr, "eccl-sim: %s:%d: ", file, line);
    else
        fprintf(stderr, "eccl-sim: %s: ", file);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return -1;
}

/* splitmix64: the only source of randomness, seeded from the scenario seed. */
static uint64_t prng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) (n > 0), without modulo bias worth speaking of at 64 bits. */
static uint64_t prng_below(uint64_t *state, uint64_t n) { return prng_next(state) % n; }

static char *trim(char *p)
{
    while (*p == ' ' || *p == '\t') p++;
    size_t n = strlen(p);
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\r' || p[n - 1] == '\n'))
        p[--n] = '\0';
    return p;
}

static int parse_long(const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

static int parse_u64(const char *v, uint64_t *out)
{
    char *end;
    if (*v == '-' || *v == '+') return -1;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end) return -1;
    *out = x;
    return 0;
}

/* A number followed by one of the units (factor each); strict. */
typedef struct unit {
    const char *name;
    double factor;
} unit;

static int parse_quantity(const char *v, const unit *units, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || !isfinite(x) || x < 0) return -1;
    while (*end == ' ') end++;
    for (const unit *u = units; u->name; u++) {
        if (strcmp(end, u->name) == 0) {
            *out = x * u->factor;
            return 0;
        }
    }
    return -1;
}

static const unit bandwidth_units[] = {
    {"Bps", 1.0},   {"kBps", 1e3},    {"KBps", 1e3},      {"MBps", 1e6},   {"GBps", 1e9},
    {"TBps", 1e12}, {"bps", 1.0 / 8}, {"kbps", 1e3 / 8},  {"Mbps", 1e6 / 8}, {"Gbps", 1e9 / 8},
    {"Tbps", 1e12 / 8}, {NULL, 0},
};

static const unit time_units[] = {
    {"s", 1.0}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}, {NULL, 0},
};

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

/* kill = R @ iter I   |   kill = R @ T<unit> */
static int parse_kill(const char *v, kill_spec *k)
{
    char buf[128];
    if (strlen(v) >= sizeof buf) return -1;
    strcpy(buf, v);
    char *at = strchr(buf, '@');
    if (!at) return -1;
    *at = '\0';
    long r;
    if (parse_long(trim(buf), 1, MAX_RANKS, &r)) return -1;
    k->rank = (int)r;
    char *when = trim(at + 1);
    if (strncmp(when, "iter", 4) == 0 && (when[4] == ' ' || when[4] == '\t')) {
        long it;
        if (parse_long(trim(when + 5), 0, INT_MAX, &it)) return -1;
        k->at_iter = (int)it;
        k->at_ns = 0;
        return 0;
    }
    double t;
    if (parse_quantity(when, time_units, &t) || t > 1e6) return -1;
    k->at_iter = -1;
    k->at_ns = (uint64_t)llround(t * 1e9);
    return 0;
}

/* Every key but the repeatable `kill`; the line it was given on is kept so
 * that a key the chosen platform does not take is reported where it stands. */
enum {
    K_NAME, K_PLATFORM, K_BW, K_LAT, K_RANKS, K_COUNT, K_ITERS, K_EXPECT, K_SEED, K_JITTER,
    K_STAGGER, K_WORLD_MIN, K_BUFFERS, K_REDUCE_RATE, K_COPY_RATE,
    K_HOSTS,                                                        /* flat */
    K_HOSTS_PER_RACK, K_RACKS_PER_ZONE, K_ZONES_PER_DC, K_DCS, K_OVERSUB, K_ZONE_LAT, K_DC_LAT,
    K_INTER_DC_LAT,                                                 /* clos */
    K_REGIONS, K_SITES_PER_REGION, K_HOSTS_PER_SITE, K_SITE_LAT, K_SITE_BW, K_REGION_LAT,
    K_REGION_BW, K_FLOW_BW,                                         /* wan */
    K_NKEYS
};

typedef enum key_kind { KK_SPECIAL, KK_INT, KK_BW, KK_TIME, KK_RATIO } key_kind;

typedef struct key_def {
    const char *name;
    key_kind kind;
    size_t off; /* of the int or double field (KK_INT, KK_BW, KK_TIME, KK_RATIO) */
    long lo, hi; /* KK_INT range */
} key_def;

#define CFG_OFF(f) offsetof(scenario_cfg, f)
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
};
#undef CFG_OFF

/* Which keys a platform takes: required ones, then optional ones; -1 ends. */
static const int common_required[] = {K_NAME, K_PLATFORM, K_BW, K_LAT, K_RANKS, K_COUNT,
                                      K_ITERS, -1};
static const int common_optional[] = {K_EXPECT, K_SEED, K_JITTER, K_STAGGER, K_WORLD_MIN,
                                      K_BUFFERS, K_REDUCE_RATE, K_COPY_RATE, -1};
static const int flat_required[] = {K_HOSTS, -1};
static const int flat_optional[] = {-1};
static const int clos_required[] = {K_HOSTS_PER_RACK, K_RACKS_PER_ZONE, K_ZONES_PER_DC, K_DCS, -1};
static const int clos_optional[] = {K_OVERSUB, K_ZONE_LAT, K_DC_LAT, K_INTER_DC_LAT, -1};
static const int wan_required[] = {K_REGIONS, K_SITES_PER_REGION, K_HOSTS_PER_SITE,
                                   K_REGION_LAT, K_REGION_BW, -1};
static const int wan_optional[] = {K_SITE_LAT, K_SITE_BW, K_FLOW_BW, -1};

static int in_list(const int *list, int k)
{
    for (; *list >= 0; list++)
        if (*list == k) return 1;
    return 0;
}

/* One value of a table key into its field; -1 after printing why. */
static int parse_key_value(const char *file, int lineno, const key_def *d, const char *val,
                           scenario_cfg *c)
{
    char *base = (char *)c + d->off;
    long x;
    double q;
    switch (d->kind) {
    case KK_INT:
        if (parse_long(val, d->lo, d->hi, &x))
            return cfg_error(file, lineno, "%s: \"%s\": want an integer in %ld..%ld", d->name, val,
                             d->lo, d->hi);
        *(int *)(void *)base = (int)x;
        return 0;
    case KK_BW:
        if (parse_quantity(val, bandwidth_units, &q) || q <= 0)
            return cfg_error(file, lineno, "%s: \"%s\": want a positive number with a unit (Bps "
                             "kBps MBps GBps TBps, or bps Kbps Mbps Gbps Tbps)", d->name, val);
        *(double *)(void *)base = q;
        return 0;
    case KK_TIME:
        if (parse_quantity(val, time_units, &q) || q > 10)
            return cfg_error(file, lineno, "%s: \"%s\": want a time (s ms us ns) up to 10s",
                             d->name, val);
        *(double *)(void *)base = (double)llround(q * 1e9) / 1e9; /* whole ns */
        return 0;
    case KK_RATIO: {
        char *end;
        errno = 0;
        q = strtod(val, &end);
        if (errno || end == val || *end || !isfinite(q) || q < 1 || q > 1e6)
            return cfg_error(file, lineno, "%s: \"%s\": want a number >= 1 (e.g. 1, 3, 2.5)",
                             d->name, val);
        *(double *)(void *)base = q;
        return 0;
    }
    case KK_SPECIAL:
        break;
    }
    return cfg_error(file, lineno, "%s: internal error", d->name);
}

/* Returns 0, or -1 after printing why. */
static int parse_scenario(const char *file, scenario_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->world_min = 2;
    c->stagger_s = 1e-3;
    c->expect_survivors = -1;
    c->oversubscription = 1;
    int key_line[K_NKEYS] = {0}; /* 0: not given */
    FILE *f = fopen(file, "r");
    if (!f) return cfg_error(file, 0, "cannot open: %s", strerror(errno));
    char raw[MAX_LINE];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(raw, sizeof raw, f)) {
        lineno++;
        if (!strchr(raw, '\n') && !feof(f)) {
            rc = cfg_error(file, lineno, "line too long");
            break;
        }
        char *hash = strchr(raw, '#');
        if (hash) *hash = '\0';
        char *line = trim(raw);
        if (!*line) continue;
        char *eq = strchr(line, '=');
        if (!eq) {
            rc = cfg_error(file, lineno, "expected `key = value`, got \"%s\"", line);
            break;
        }
        *eq = '\0';
        char *key = trim(line), *val = trim(eq + 1);
        if (!*val) {
            rc = cfg_error(file, lineno, "%s: empty value", key);
            break;
        }
        if (strcmp(key, "kill") == 0) {
            kill_spec k;
            if (parse_kill(val, &k)) {
                rc = cfg_error(file, lineno, "kill: \"%s\": want `RANK @ iter I` or `RANK @ TIME` "
                               "(TIME with a unit: s ms us ns)", val);
            } else {
                for (int i = 0; i < c->nkills; i++)
                    if (c->kills[i].rank == k.rank)
                        rc = cfg_error(file, lineno, "kill: rank %d is already killed", k.rank);
                if (rc == 0) {
                    kill_spec *nk = realloc(c->kills, (size_t)(c->nkills + 1) * sizeof *nk);
                    if (!nk) {
                        rc = cfg_error(file, lineno, "out of memory");
                    } else {
                        c->kills = nk;
                        c->kills[c->nkills++] = k;
                    }
                }
            }
            continue;
        }
        int id = -1;
        for (int k = 0; k < K_NKEYS; k++)
            if (strcmp(key, key_defs[k].name) == 0) id = k;
        if (id < 0) {
            rc = cfg_error(file, lineno, "unknown key \"%s\" (see scenarios/README.md)", key);
            break;
        }
        if (key_line[id]) {
            rc = cfg_error(file, lineno, "%s given twice (first on line %d)", key, key_line[id]);
            break;
        }
        key_line[id] = lineno;
        if (id == K_NAME) {
            if (!valid_name(val))
                rc = cfg_error(file, lineno, "name: \"%s\": use 1-63 of [A-Za-z0-9._-], not "
                               "starting with '.'", val);
            else
                strcpy(c->name, val);
        } else if (id == K_PLATFORM) {
            if (strcmp(val, "flat") == 0) c->kind = PLATFORM_FLAT;
            else if (strcmp(val, "clos") == 0) c->kind = PLATFORM_CLOS;
            else if (strcmp(val, "wan") == 0) c->kind = PLATFORM_WAN;
            else rc = cfg_error(file, lineno, "platform: \"%s\": want flat, clos or wan", val);
            if (rc == 0) strcpy(c->platform, val);
        } else if (id == K_COUNT) {
            if (parse_long(val, 1, 1L << 26, &c->count))
                rc = cfg_error(file, lineno, "count: \"%s\": want an integer in 1..%ld", val,
                               1L << 26);
        } else if (id == K_BUFFERS) {
            if (strcmp(val, "host") == 0) c->phantom = 0;
            else if (strcmp(val, "phantom") == 0) c->phantom = 1;
            else rc = cfg_error(file, lineno, "buffers: \"%s\": want host or phantom", val);
        } else if (id == K_SEED) {
            if (parse_u64(val, &c->seed))
                rc = cfg_error(file, lineno, "seed: \"%s\": want an unsigned 64-bit integer", val);
            else
                c->have_seed = 1;
        } else {
            rc = parse_key_value(file, lineno, &key_defs[id], val, c);
        }
    }
    if (rc == 0 && ferror(f)) rc = cfg_error(file, 0, "read error");
    fclose(f);
    if (rc) return rc;
    if (!key_line[K_PLATFORM]) return cfg_error(file, 0, "missing required key \"platform\"");

    const int *req = flat_required, *opt = flat_optional;
    if (c->kind == PLATFORM_CLOS) req = clos_required, opt = clos_optional;
    if (c->kind == PLATFORM_WAN) req = wan_required, opt = wan_optional;
    int bad = -1; /* the first, in file order, of the keys this platform does not take */
    for (int k = 0; k < K_NKEYS; k++)
        if (key_line[k] && !in_list(common_required, k) && !in_list(common_optional, k) &&
            !in_list(req, k) && !in_list(opt, k) && (bad < 0 || key_line[k] < key_line[bad]))
            bad = k;
    if (bad >= 0)
        return cfg_error(file, key_line[bad], "%s: not a key of platform = %s (see "
                         "scenarios/README.md)", key_defs[bad].name, c->platform);
    for (const int *k = common_required; *k >= 0; k++)
        if (!key_line[*k]) return cfg_error(file, 0, "missing required key \"%s\"", key_defs[*k].name);
    for (const int *k = req; *k >= 0; k++)
        if (!key_line[*k])
            return cfg_error(file, 0, "missing required key \"%s\" (platform = %s)",
                             key_defs[*k].name, c->platform);

    if (c->kind == PLATFORM_CLOS) {
        long long n = (long long)c->hosts_per_rack * c->racks_per_zone;
        n *= c->zones_per_dc;
        n *= c->dcs;
        if (n > MAX_HOSTS)
            return cfg_error(file, key_line[K_DCS], "clos: hosts_per_rack x racks_per_zone x "
                             "zones_per_dc x dcs = %lld hosts, at most %d", n, MAX_HOSTS);
        c->hosts = (int)n;
        /* NCCLX's 1 : 7 : 15 : 30 unless given. */
        if (!key_line[K_ZONE_LAT]) c->zone_latency_s = 7 * c->latency_s;
        if (!key_line[K_DC_LAT]) c->dc_latency_s = 15 * c->latency_s;
        if (!key_line[K_INTER_DC_LAT]) c->inter_dc_latency_s = 30 * c->latency_s;
        if (c->zone_latency_s < c->latency_s)
            return cfg_error(file, key_line[K_ZONE_LAT], "zone_latency: below latency");
        if (c->dc_latency_s < c->zone_latency_s)
            return cfg_error(file, key_line[K_DC_LAT] ? key_line[K_DC_LAT] : key_line[K_ZONE_LAT],
                             "dc_latency: below zone_latency");
        if (c->inter_dc_latency_s < c->dc_latency_s)
            return cfg_error(file, key_line[K_INTER_DC_LAT] ? key_line[K_INTER_DC_LAT]
                                                            : key_line[K_DC_LAT],
                             "inter_dc_latency: below dc_latency");
    } else if (c->kind == PLATFORM_WAN) {
        long long n = (long long)c->regions * c->sites_per_region;
        n *= c->hosts_per_site;
        if (n > MAX_HOSTS)
            return cfg_error(file, key_line[K_HOSTS_PER_SITE], "wan: regions x sites_per_region x "
                             "hosts_per_site = %lld hosts, at most %d", n, MAX_HOSTS);
        c->hosts = (int)n;
        if (!key_line[K_SITE_LAT]) c->site_latency_s = c->latency_s;
        if (!key_line[K_SITE_BW]) c->site_bandwidth_Bps = c->hosts_per_site * c->bandwidth_Bps;
        if (c->site_latency_s < c->latency_s)
            return cfg_error(file, key_line[K_SITE_LAT], "site_latency: below latency");
        if (c->region_latency_s < c->site_latency_s)
            return cfg_error(file, key_line[K_REGION_LAT], "region_latency: below site_latency "
                             "(which is latency unless given)");
    }
    if (c->hosts < c->ranks + 1)
        return cfg_error(file, 0, "%d hosts: need ranks + 1 = %d (host 0 runs the master)",
                         c->hosts, c->ranks + 1);
    for (int i = 0; i < c->nkills; i++) {
        if (c->kills[i].rank > c->ranks)
            return cfg_error(file, 0, "kill: rank %d: ranks are 1..%d", c->kills[i].rank, c->ranks);
        if (c->kills[i].at_iter >= c->iters)
            return cfg_error(file, 0, "kill: iter %d: iterations are 0..%d", c->kills[i].at_iter,
                             c->iters - 1);
    }
    if (c->expect_survivors < 0) c->expect_survivors = c->ranks - c->nkills;
    if (c->expect_survivors > c->ranks)
        return cfg_error(file, 0, "expect_survivors = %d: only %d ranks", c->expect_survivors,
                         c->ranks);
    return 0;
}

/* ---- the platforms ------------------------------------------------------- */

/* Every host is node-K, K = 0 .. hosts-1, numbered in the order the platform
 * nests them (rack after rack, site after site): node-0 runs the master, rank
 * R runs on node-R. Latencies go out in ns (SimGrid reads fractions). */

static void xml_head(FILE *f, const scenario_cfg *c, const char *what)
{
    fprintf(f,
            "<?xml version='1.0'?>\n"
            "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
            "<!-- Generated by eccl-sim for scenario %s: %s. -->\n"
            "<platform version=\"4.1\">\n",
            c->name, what);
}

/* A cluster of hosts node-first .. node-(first+n-1), each on a private link
 * (bw, lat_ns) to a backbone that never limits and adds no latency; its
 * router `gw` is where the cluster meets the zone above. */
static void xml_cluster(FILE *f, const char *indent, const char *id, int first, int n, double bw,
                        double lat_ns, const char *gw)
{
    fprintf(f,
            "%s<cluster id=\"%s\" prefix=\"node-\" suffix=\"\" radical=\"%d-%d\" speed=\"1Gf\"\n"
            "%s         bw=\"%.17gBps\" lat=\"%.17gns\" bb_bw=\"%.17gBps\" bb_lat=\"0s\"\n"
            "%s         router_id=\"%s\"/>\n",
            indent, id, first, first + n - 1, indent, bw, lat_ns, bw * n, indent, gw);
}

/* A zone holding nothing but the router `gw`: the hub the children of a
 * Floyd zone all link to (zoneRoutes join zones, so the hub is one). */
static void xml_hub(FILE *f, const char *indent, const char *id, const char *gw)
{
    fprintf(f, "%s<zone id=\"%s\" routing=\"None\"><router id=\"%s\"/></zone>\n", indent, id, gw);
}

static void xml_link(FILE *f, const char *indent, const char *id, double bw, double lat_ns,
                     const char *policy)
{
    fprintf(f, "%s<link id=\"%s\" bandwidth=\"%.17gBps\" latency=\"%.17gns\"%s%s%s/>\n", indent,
            id, bw, lat_ns, policy ? " sharing_policy=\"" : "", policy ? policy : "",
            policy ? "\"" : "");
}

static void xml_zone_route(FILE *f, const char *indent, const char *src, const char *dst,
                           const char *gw_src, const char *gw_dst, const char *link,
                           const char *link2)
{
    fprintf(f,
            "%s<zoneRoute src=\"%s\" dst=\"%s\" gw_src=\"%s\" gw_dst=\"%s\"><link_ctn id=\"%s\"/>",
            indent, src, dst, gw_src, gw_dst, link);
    if (link2) fprintf(f, "<link_ctn id=\"%s\"/>", link2);
    fputs("</zoneRoute>\n", f);
}

static void write_flat(FILE *f, const scenario_cfg *c)
{
    char what[64];
    snprintf(what, sizeof what, "a flat cluster of %d hosts", c->hosts);
    xml_head(f, c, what);
    fprintf(f,
            "  <cluster id=\"flat\" prefix=\"node-\" suffix=\"\" radical=\"0-%d\" speed=\"1Gf\"\n"
            "           bw=\"%.17gBps\" lat=\"%lluns\" bb_bw=\"%.17gBps\" bb_lat=\"0s\"/>\n",
            c->hosts - 1, c->bandwidth_Bps, (unsigned long long)llround(c->latency_s * 1e9),
            c->bandwidth_Bps * c->hosts);
}

/* Clos: racks (clusters) under zones under DCs under a core, each level a
 * Floyd zone of its children and a hub they link up to. With L the same-rack
 * latency and Z, D, X the same-zone, same-DC and inter-DC ones (host to host):
 *   host link        L/2        (x2 on every path)
 *   rack uplink      (Z - L)/2  (rack router - zone hub)
 *   zone uplink      (D - Z)/2  (zone hub - DC hub)
 *   DC uplink        (X - D)/2  (DC hub - core)
 * so a pair in the same rack sees L, same zone Z, same DC D, else X. Each
 * uplink carries its children's bandwidth / oversubscription. */
static void write_clos(FILE *f, const scenario_cfg *c)
{
    char what[160];
    snprintf(what, sizeof what, "a Clos of %d dcs x %d zones x %d racks x %d hosts = %d hosts",
             c->dcs, c->zones_per_dc, c->racks_per_zone, c->hosts_per_rack, c->hosts);
    xml_head(f, c, what);
    double L = c->latency_s * 1e9, Z = c->zone_latency_s * 1e9, D = c->dc_latency_s * 1e9,
           X = c->inter_dc_latency_s * 1e9;
    double rack_bw = c->hosts_per_rack * c->bandwidth_Bps / c->oversubscription;
    double zone_bw = c->racks_per_zone * rack_bw / c->oversubscription;
    double dc_bw = c->zones_per_dc * zone_bw / c->oversubscription;
    char id[64], gw[64], hub[64], hubgw[64], link[64];
    int host = 0;
    fputs("  <zone id=\"clos\" routing=\"Floyd\">\n", f);
    for (int d = 0; d < c->dcs; d++) {
        fprintf(f, "    <zone id=\"dc-%d\" routing=\"Floyd\">\n", d);
        for (int z = 0; z < c->zones_per_dc; z++) {
            fprintf(f, "      <zone id=\"zone-%d-%d\" routing=\"Floyd\">\n", d, z);
            snprintf(hub, sizeof hub, "zone-%d-%d-hub", d, z);
            snprintf(hubgw, sizeof hubgw, "zone-%d-%d-gw", d, z);
            for (int r = 0; r < c->racks_per_zone; r++) {
                snprintf(id, sizeof id, "rack-%d-%d-%d", d, z, r);
                snprintf(gw, sizeof gw, "rack-%d-%d-%d-gw", d, z, r);
                xml_cluster(f, "        ", id, host, c->hosts_per_rack, c->bandwidth_Bps, L / 2,
                            gw);
                host += c->hosts_per_rack;
            }
            xml_hub(f, "        ", hub, hubgw);
            for (int r = 0; r < c->racks_per_zone; r++) {
                snprintf(link, sizeof link, "up-rack-%d-%d-%d", d, z, r);
                xml_link(f, "        ", link, rack_bw, (Z - L) / 2, NULL);
            }
            for (int r = 0; r < c->racks_per_zone; r++) {
                snprintf(id, sizeof id, "rack-%d-%d-%d", d, z, r);
                snprintf(gw, sizeof gw, "rack-%d-%d-%d-gw", d, z, r);
                snprintf(link, sizeof link, "up-rack-%d-%d-%d", d, z, r);
                xml_zone_route(f, "        ", id, hub, gw, hubgw, link, NULL);
            }
            fputs("      </zone>\n", f);
        }
        snprintf(hub, sizeof hub, "dc-%d-hub", d);
        snprintf(hubgw, sizeof hubgw, "dc-%d-gw", d);
        xml_hub(f, "      ", hub, hubgw);
        for (int z = 0; z < c->zones_per_dc; z++) {
            snprintf(link, sizeof link, "up-zone-%d-%d", d, z);
            xml_link(f, "      ", link, zone_bw, (D - Z) / 2, NULL);
        }
        for (int z = 0; z < c->zones_per_dc; z++) {
            snprintf(id, sizeof id, "zone-%d-%d", d, z);
            snprintf(gw, sizeof gw, "zone-%d-%d-gw", d, z);
            snprintf(link, sizeof link, "up-zone-%d-%d", d, z);
            xml_zone_route(f, "      ", id, hub, gw, hubgw, link, NULL);
        }
        fputs("    </zone>\n", f);
    }
    xml_hub(f, "    ", "core-hub", "core-gw");
    for (int d = 0; d < c->dcs; d++) {
        snprintf(link, sizeof link, "up-dc-%d", d);
        xml_link(f, "    ", link, dc_bw, (X - D) / 2, NULL);
    }
    for (int d = 0; d < c->dcs; d++) {
        snprintf(id, sizeof id, "dc-%d", d);
        snprintf(gw, sizeof gw, "dc-%d-gw", d);
        snprintf(link, sizeof link, "up-dc-%d", d);
        xml_zone_route(f, "    ", id, "core-hub", gw, "core-gw", link, NULL);
    }
    fputs("  </zone>\n", f);
}

/* WAN: sites (clusters) under regions (Floyd zones of their sites and a hub),
 * every pair of regions joined by one link (a Full zone). With L the
 * same-site latency, S the same-region one and R the inter-region one:
 *   host link        L/2        (x2 on every path)
 *   site uplink      (S - L)/2  (site router - region hub), site_bandwidth
 *   region link      R - S      (region hub - region hub), region_bandwidth,
 *                               shared by every flow between the two regions
 *   flow cap         0, flow_bandwidth, FATPIPE: no single flow between two
 *                               regions goes faster (when flow_bandwidth is set) */
static void write_wan(FILE *f, const scenario_cfg *c)
{
    char what[160];
    snprintf(what, sizeof what, "a WAN of %d regions x %d sites x %d hosts = %d hosts",
             c->regions, c->sites_per_region, c->hosts_per_site, c->hosts);
    xml_head(f, c, what);
    double L = c->latency_s * 1e9, S = c->site_latency_s * 1e9, R = c->region_latency_s * 1e9;
    char id[64], gw[64], hub[64], hubgw[64], link[64], cap[64];
    int host = 0;
    fputs("  <zone id=\"wan\" routing=\"Full\">\n", f);
    for (int g = 0; g < c->regions; g++) {
        fprintf(f, "    <zone id=\"region-%d\" routing=\"Floyd\">\n", g);
        snprintf(hub, sizeof hub, "region-%d-hub", g);
        snprintf(hubgw, sizeof hubgw, "region-%d-gw", g);
        for (int s = 0; s < c->sites_per_region; s++) {
            snprintf(id, sizeof id, "site-%d-%d", g, s);
            snprintf(gw, sizeof gw, "site-%d-%d-gw", g, s);
            xml_cluster(f, "      ", id, host, c->hosts_per_site, c->bandwidth_Bps, L / 2, gw);
            host += c->hosts_per_site;
        }
        xml_hub(f, "      ", hub, hubgw);
        for (int s = 0; s < c->sites_per_region; s++) {
            snprintf(link, sizeof link, "up-site-%d-%d", g, s);
            xml_link(f, "      ", link, c->site_bandwidth_Bps, (S - L) / 2, NULL);
        }
        for (int s = 0; s < c->sites_per_region; s++) {
            snprintf(id, sizeof id, "site-%d-%d", g, s);
            snprintf(gw, sizeof gw, "site-%d-%d-gw", g, s);
            snprintf(link, sizeof link, "up-site-%d-%d", g, s);
            xml_zone_route(f, "      ", id, hub, gw, hubgw, link, NULL);
        }
        fputs("    </zone>\n", f);
    }
    for (int g = 0; g < c->regions; g++)
        for (int h = g + 1; h < c->regions; h++) {
            snprintf(link, sizeof link, "wan-%d-%d", g, h);
            xml_link(f, "    ", link, c->region_bandwidth_Bps, R - S, NULL);
            if (c->flow_bandwidth_Bps > 0) {
                snprintf(cap, sizeof cap, "cap-%d-%d", g, h);
                xml_link(f, "    ", cap, c->flow_bandwidth_Bps, 0, "FATPIPE");
            }
        }
    for (int g = 0; g < c->regions; g++)
        for (int h = g + 1; h < c->regions; h++) {
            snprintf(id, sizeof id, "region-%d", g);
            snprintf(hub, sizeof hub, "region-%d", h);
            snprintf(gw, sizeof gw, "region-%d-gw", g);
            snprintf(hubgw, sizeof hubgw, "region-%d-gw", h);
            snprintf(link, sizeof link, "wan-%d-%d", g, h);
            snprintf(cap, sizeof cap, "cap-%d-%d", g, h);
            xml_zone_route(f, "    ", id, hub, gw, hubgw, link,
                           c->flow_bandwidth_Bps > 0 ? cap : NULL);
        }
    fputs("  </zone>\n", f);
}

static int write_platform(const scenario_cfg *c, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    switch (c->kind) {
    case PLATFORM_FLAT: write_flat(f, c); break;
    case PLATFORM_CLOS: write_clos(f, c); break;
    case PLATFORM_WAN: write_wan(f, c); break;
    }
    fputs("</platform>\n", f);
    return fclose(f) == 0 ? 0 : -1;
}
/* ---- events and progress ------------------------------------------------- */

static int field_int(const char *line, const char *key, int *out)
{
    const char *p = strstr(line, key);
    return p && sscanf(p + strlen(key), "%d", out) == 1;
}

static void add_event(sim *s, int rank, const char *event, int iter, int world, const char *ms,
                      const char *hash)
{
    if (s->nev == s->cap_ev) {
        size_t cap = s->cap_ev ? 2 * s->cap_ev : 256;
        event_row *n = realloc(s->ev, cap * sizeof *n);
        if (!n) {
            s->oom = 1;
            return;
        }
        s->ev = n;
        s->cap_ev = cap;
    }
    event_row *e = &s->ev[s->nev++];
    e->t_ns = eccl_sg_now_ns();
    e->rank = rank;
    snprintf(e->event, sizeof e->event, "%s", event);
    e->iter = iter;
    e->world = world;
    snprintf(e->ms, sizeof e->ms, "%s", ms ? ms : "-");
    snprintf(e->hash, sizeof e->hash, "%s", hash ? hash : "-");
}

/* Announces every iteration all live ranks are through. */
static void progress(sim *s)
{
    int alive = s->cfg->ranks - s->nkilled;
    while (s->next_milestone < s->cfg->iters && alive > 0 &&
           s->oks_at[s->next_milestone] >= alive) {
        eccl_sg_printf("eccl-sim", "progress iter=%d/%d ranks_done=%d", s->next_milestone + 1,
                       s->cfg->iters, alive);
        s->next_milestone++;
    }
}

/* ---- fault injection ----------------------------------------------------- */

static void start_actor(const char *name, const char *host, xbt_main_func_t fn, void *data)
{
    sg_actor_t a = sg_actor_init(name, sg_host_by_name(host));
    sg_actor_set_data(a, data);
    sg_actor_start(a, fn, 0, NULL);
}

typedef struct killer_arg {
    rank_state *victim;
    uint64_t at_ns;
} killer_arg;

static void killer_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    killer_arg *ka = sg_actor_self_get_data();
    rank_state *v = ka->victim;
    sim *s = v->s;
    sg_actor_sleep_until((double)ka->at_ns / 1e9);
    eccl_sg_printf("eccl-sim", "kill rank=%d host=%s", v->idx, v->host);
    eccl_sg_world_kill_host(s->w, v->host);
    v->killed = 1;
    s->nkilled++;
    /* Its finished steps no longer count towards the live ranks' progress. */
    for (int i = 0; i <= v->last_ok_iter && i < s->cfg->iters; i++) s->oks_at[i]--;
    add_event(s, v->idx, "killed", v->last_ok_iter + 1, -1, NULL, NULL);
    if (!v->returned) s->done++;
    progress(s);
    free(ka);
}

static void start_killer(rank_state *v, uint64_t at_ns)
{
    killer_arg *ka = malloc(sizeof *ka);
    if (!ka) {
        v->s->oom = 1;
        return;
    }
    ka->victim = v;
    ka->at_ns = at_ns;
    char name[32];
    snprintf(name, sizeof name, "killer%d", v->idx);
    start_actor(name, "node-0", killer_main, ka);
}

/* ---- the sim launch ------------------------------------------------------ */

/* The loop's key=value lines: recorded as events, echoed with --verbose. */
static void sim_print(void *ctx, int to_stderr, const char *line)
{
    rank_state *r = ctx;
    sim *s = r->s;
    if (to_stderr || s->verbose) eccl_sg_printf(r->name, "%s%s", to_stderr ? "stderr: " : "", line);
    if (to_stderr || strncmp(line, "event=", 6) != 0) return;
    char event[16] = "", ms[24] = "";
    sscanf(line + 6, "%15[a-z_]", event);
    uint64_t now = eccl_sg_now_ns();
    /* The loop prints ms=%.1f; the simulated clock gives the exact time
     * since this rank's event=begin, to the nanosecond. */
    if (strstr(line, " ms=")) {
        uint64_t d = now - r->begin_ns;
        snprintf(ms, sizeof ms, "%llu.%06llu", (unsigned long long)(d / 1000000u),
                 (unsigned long long)(d % 1000000u));
    }
    int iter = -1, world = -1;
    field_int(line, " iter=", &iter);
    field_int(line, " world=", &world);
    /* The result's hash (host buffers) or "phantom", for events.tsv. */
    char hash[24] = "";
    const char *hp = strstr(line, " hash=");
    if (hp) sscanf(hp + 6, "%16[0-9a-f]", hash);
    else if (strstr(line, " values=phantom")) snprintf(hash, sizeof hash, "phantom");
    add_event(s, r->idx, event, iter, world, ms[0] ? ms : NULL, hash[0] ? hash : NULL);

    if (strcmp(event, "begin") == 0) {
        r->begin_ns = now;
        /* The victim starts the fatal step: crash it halfway through, by the
         * time its last good step took (as tests/sim/sim_worker does). */
        if (r->kill >= 0) {
            const kill_spec *k = &s->cfg->kills[r->kill];
            if (k->at_iter >= 0 && iter == k->at_iter && !r->kill_armed) {
                r->kill_armed = 1;
                start_killer(r, now + r->op_ns / 2);
            }
        }
    } else if (strcmp(event, "ok") == 0) {
        unsigned long long h = 0;
        r->oks++;
        r->phantom_oks += strcmp(hash, "phantom") == 0;
        r->op_ns = now - r->begin_ns;
        s->ar_n++;
        s->ar_sum_ns += r->op_ns;
        if (s->ar_n == 1 || r->op_ns < s->ar_min_ns) s->ar_min_ns = r->op_ns;
        r->last_ok_iter = iter;
        r->last_ok_world = world;
        if (iter >= 0 && iter < s->cfg->iters) {
            if (hp && sscanf(hp + 6, "%llx", &h) == 1) {
                r->hashes[iter] = h;
                r->hashed_oks++;
            }
            s->oks_at[iter]++;
            progress(s);
        }
    } else if (strcmp(event, "peer_lost") == 0 || strcmp(event, "timeout") == 0 ||
               strcmp(event, "too_few_peers") == 0) {
        r->failed_ops++;
    } else if (strcmp(event, "exit") == 0) {
        field_int(line, " status=", &r->exit_status);
    }
}

/* ---- actors -------------------------------------------------------------- */

static void master_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sim *s = sg_actor_self_get_data();
    eccl_master *m = NULL;
    eccl_result rc = eccl_sg_master_create(s->w, s->master_addr, &m);
    if (rc == ECCL_OK) rc = eccl_master_run(m);
    if (rc != ECCL_OK) {
        eccl_sg_printf("master", "FAIL master start: %s", eccl_strerror(rc));
        eccl_master_destroy(m);
        return;
    }
    while (s->done < s->cfg->ranks) sg_actor_sleep_for(0.001);
    eccl_master_destroy(m);
}

static void rank_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    rank_state *r = sg_actor_self_get_data();
    sim *s = r->s;
    sg_actor_sleep_until((double)r->arrive_ns / 1e9);
    eccl_worker_sg sim_launch;
    eccl_worker_sg_init(&sim_launch, s->w, sim_print, r);
    const eccl_launch launch = sim_launch.launch;
    /* eccl-worker --master node-0:5000 --count C --iters I --start-world N */
    const eccl_worker_options o = {
        .master = s->master_addr,
        .count = (size_t)s->cfg->count,
        .iters = s->cfg->iters,
        .world_min = s->cfg->world_min,
        .start_world = s->cfg->ranks,
        .group = 0,
        .wait_ms = 30000,
    };
    r->status = eccl_worker_run(&launch, &o);
    r->returned = 1;
    s->done++;
}

/* ---- outputs ------------------------------------------------------------- */

static int mkdir_p(const char *dir)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0777) && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) && errno != EEXIST) return -1;
    struct stat st;
    return stat(buf, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

static FILE *open_out(const char *dir, const char *name)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return NULL;
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "eccl-sim: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

static void fmt_time(char *buf, size_t size, uint64_t ns)
{
    snprintf(buf, size, "%llu.%09llu", (unsigned long long)(ns / 1000000000u),
             (unsigned long long)(ns % 1000000000u));
}

static int write_events(const sim *s, const char *dir)
{
    FILE *f = open_out(dir, "events.tsv");
    if (!f) return -1;
    fputs("time_s\trank\tevent\titer\tworld\tms\thash\n", f);
    for (size_t i = 0; i < s->nev; i++) {
        const event_row *e = &s->ev[i];
        char t[32], it[16] = "-", wo[16] = "-";
        fmt_time(t, sizeof t, e->t_ns);
        if (e->iter >= 0) snprintf(it, sizeof it, "%d", e->iter);
        if (e->world >= 0) snprintf(wo, sizeof wo, "%d", e->world);
        fprintf(f, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", t, e->rank, e->event, it, wo, e->ms,
                e->hash);
    }
    return fclose(f) == 0 ? 0 : -1;
}

static int write_plot_script(const scenario_cfg *c, const char *dir)
{
    FILE *f = open_out(dir, "plot.gp");
    if (!f) return -1;
    fprintf(f,
            "# Generated by eccl-sim for scenario %s: one row per rank, simulated time\n"
            "# across. Run in this directory: gnuplot plot.gp  (reads events.tsv)\n"
            "set terminal pngcairo size 1000,%d font \",10\"\n"
            "set output \"plot.png\"\n"
            "set datafile separator \"\\t\"\n"
            "set title \"%s: %d ranks x %d iterations of %ld f32 (all-reduce timeline)\"\n"
            "set xlabel \"simulated time (ms)\"\n"
            "set ylabel \"rank\"\n"
            "set yrange [0.5:%d.5]\n"
            "set ytics 1\n"
            "set grid xtics\n"
            "set key outside bottom center horizontal\n"
            "set style arrow 1 nohead lw 6 lc rgb \"#2a9d3f\"\n"
            "set style arrow 2 nohead lw 6 lc rgb \"#d62728\"\n"
            "ok(e) = e eq \"ok\"\n"
            "failed(e) = e eq \"peer_lost\" || e eq \"timeout\" || e eq \"too_few_peers\"\n"
            "# Each all-reduce ends at time_s after taking ms: a bar from its start to its end.\n"
            "plot \"events.tsv\" skip 1 using (ok(strcol(3)) ? $1*1000 - $6 : NaN):2:6:(0) \\\n"
            "       with vectors arrowstyle 1 title \"all-reduce ok\", \\\n"
            "     \"\" skip 1 using (failed(strcol(3)) ? $1*1000 - $6 : NaN):2:6:(0) \\\n"
            "       with vectors arrowstyle 2 title \"all-reduce failed (peer lost)\", \\\n"
            "     \"\" skip 1 using (strcol(3) eq \"killed\" ? $1*1000 : NaN):2 \\\n"
            "       with points pt 2 ps 3 lw 3 lc rgb \"black\" title \"host killed\", \\\n"
            "     \"\" skip 1 using (strcol(3) eq \"exit\" ? $1*1000 : NaN):2 \\\n"
            "       with points pt 7 ps 1.2 lc rgb \"#1f5fbf\" title \"worker exit\"\n",
            c->name, 200 + 40 * (c->ranks < 40 ? c->ranks : 40), c->name, c->ranks, c->iters,
            c->count, c->ranks);
    return fclose(f) == 0 ? 0 : -1;
}

/* 0 rendered, 1 gnuplot missing, -1 gnuplot failed. */
static int render_plot(const char *dir)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (chdir(dir) != 0) _exit(126);
        execlp("gnuplot", "gnuplot", "plot.gp", (char *)NULL);
        _exit(errno == ENOENT ? 127 : 126);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) return -1;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 127) return 1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* ---- main ---------------------------------------------------------------- */

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s run FILE [--seed S] [--out DIR] [--log-level 0-5] [--verbose]\n"
            "  Runs the scenario FILE (format: scenarios/README.md) on the simulator and\n"
            "  writes its results to DIR (default: results/<scenario name>/).\n"
            "  Exit status: 0 all checks passed, 1 a check failed, 2 usage or scenario error.\n",
            argv0);
    return 2;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* Takes SimGrid's own --cfg=... and --log=... options out of argv. */
    simgrid_init(&argc, argv);
    if (argc < 3 || strcmp(argv[1], "run") != 0) return usage(argv[0]);
    const char *file = argv[2], *out = NULL;
    int have_seed = 0, verbose = 0, log_level = ECCL_LOG_WARN;
    uint64_t seed = 0;
    for (int i = 3; i < argc; i++) {
        long x;
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            if (parse_u64(argv[++i], &seed)) {
                fprintf(stderr, "eccl-sim: --seed %s: want an unsigned 64-bit integer\n", argv[i]);
                return 2;
            }
            have_seed = 1;
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else if (strcmp(argv[i], "--log-level") == 0 && i + 1 < argc) {
            if (parse_long(argv[++i], 0, 5, &x)) return usage(argv[0]);
            log_level = (int)x;
        } else if (strcmp(argv[i], "--verbose") == 0) {
            verbose = 1;
        } else {
            return usage(argv[0]);
        }
    }

    scenario_cfg cfg;
    if (parse_scenario(file, &cfg)) {
        free(cfg.kills);
        return 2;
    }
    if (have_seed) cfg.seed = seed; /* --seed wins over the file's */
    else if (!cfg.have_seed) cfg.seed = 1;

    char outdir[PATH_MAX];
    if (out)
        snprintf(outdir, sizeof outdir, "%s", out);
    else
        snprintf(outdir, sizeof outdir, "results/%s", cfg.name);
    char platform_path[PATH_MAX];
    if (mkdir_p(outdir) ||
        snprintf(platform_path, sizeof platform_path, "%s/platform.xml", outdir) >=
            (int)sizeof platform_path ||
        write_platform(&cfg, platform_path)) {
        fprintf(stderr, "eccl-sim: cannot create %s: %s\n", outdir, strerror(errno));
        free(cfg.kills);
        return 1;
    }

    /* SimGrid's configuration chatter goes, its warnings stay. */
    xbt_log_control_set("xbt_cfg.thres:warning");
    /* CM02: a message costs exactly latency + size / bandwidth. */
    sg_cfg_set_string("network/model", "CM02");
    simgrid_load_platform(platform_path);

    sim *s = calloc(1, sizeof *s);
    if (!s) return 1;
    s->cfg = &cfg;
    s->verbose = verbose;
    s->master_addr = "node-0:5000";
    s->rk = calloc((size_t)cfg.ranks, sizeof *s->rk);
    s->oks_at = calloc((size_t)cfg.iters, sizeof *s->oks_at);
    uint64_t *hashes = calloc((size_t)cfg.ranks * (size_t)cfg.iters, sizeof *hashes);
    if (!s->rk || !s->oks_at || !hashes || eccl_sg_world_create(log_level, &s->w) != ECCL_OK) {
        fprintf(stderr, "eccl-sim: out of memory\n");
        return 1;
    }
    const eccl_sg_dev_cfg dev = {.phantom = cfg.phantom, .reduce_Bps = cfg.reduce_rate_Bps,
                                 .copy_Bps = cfg.copy_rate_Bps};
    if (eccl_sg_world_set_dev(s->w, &dev) != ECCL_OK) {
        fprintf(stderr, "eccl-sim: cannot set up the %s device\n", cfg.phantom ? "phantom" : "host");
        return 1;
    }
    eccl_sg_printf("eccl-sim", "scenario=%s seed=%llu platform=%s hosts=%d ranks=%d iters=%d "
                   "count=%ld buffers=%s out=%s", cfg.name, (unsigned long long)cfg.seed,
                   cfg.platform, cfg.hosts, cfg.ranks, cfg.iters, cfg.count,
                   cfg.phantom ? "phantom" : "host", outdir);

    /* Every random choice comes from this one stream, in this order. */
    uint64_t rng = cfg.seed;
    uint64_t jitter_ns = (uint64_t)llround(cfg.jitter_s * 1e9);
    uint64_t stagger_ns = (uint64_t)llround(cfg.stagger_s * 1e9);
    start_actor("master", "node-0", master_main, s);
    for (int i = 0; i < cfg.ranks; i++) {
        rank_state *r = &s->rk[i];
        r->s = s;
        r->idx = i + 1;
        r->kill = -1;
        r->exit_status = -1;
        r->last_ok_iter = -1;
        r->last_ok_world = -1;
        r->hashes = hashes + (size_t)i * (size_t)cfg.iters;
        snprintf(r->name, sizeof r->name, "rank%d", r->idx);
        snprintf(r->host, sizeof r->host, "node-%d", r->idx);
        /* Staggered arrivals (the first founds the group), plus jitter. */
        r->arrive_ns = stagger_ns * (uint64_t)r->idx;
        if (jitter_ns) r->arrive_ns += prng_below(&rng, jitter_ns);
    }
    for (int k = 0; k < cfg.nkills; k++) {
        rank_state *r = &s->rk[cfg.kills[k].rank - 1];
        r->kill = k;
        if (cfg.kills[k].at_iter == -1) start_killer(r, cfg.kills[k].at_ns);
    }
    for (int i = 0; i < cfg.ranks; i++)
        start_actor(s->rk[i].name, s->rk[i].host, rank_main, &s->rk[i]);
    simgrid_run();
    uint64_t end_ns = eccl_sg_now_ns();

    /* ---- checks ---- */
    int failures = 0, survivors = 0, killed = 0, noticed = 0;
    FILE *rf = open_out(outdir, "ranks.tsv");
    if (rf)
        fputs("rank\thost\trole\treturned\tstatus\toks\tlast_ok_iter\tlast_world\tfailed_ops\t"
              "check\n", rf);
    for (int i = 0; i < cfg.ranks; i++) {
        rank_state *r = &s->rk[i];
        int ok;
        const char *role;
        if (r->kill >= 0) {
            role = "victim";
            const kill_spec *k = &cfg.kills[r->kill];
            /* Killed before returning; an iteration trigger must have fired. */
            ok = r->killed && !r->returned && r->oks < cfg.iters;
            /* Killed during iteration I's all-reduce: exactly I good steps. */
            if (k->at_iter >= 0)
                ok = ok && r->oks == k->at_iter && r->last_ok_iter == k->at_iter - 1;
            killed += r->killed && !r->returned;
        } else {
            role = "survivor";
            ok = r->returned && r->status == 0 && r->exit_status == 0 && r->oks == cfg.iters &&
                 r->last_ok_iter == cfg.iters - 1;
            /* Host buffers: every good step was checked and hashed by the
             * loop. Phantom: every one ran on phantom buffers (no values). */
            ok = ok && (cfg.phantom ? r->phantom_oks == r->oks : r->hashed_oks == r->oks);
            survivors += ok;
            /* Saw the failure: an all-reduce failed under it, or the world shrank. */
            int saw = r->failed_ops > 0 || (r->last_ok_world >= 0 && r->last_ok_world < cfg.ranks);
            noticed += saw;
            if (cfg.nkills > 0 && !saw) ok = 0;
        }
        failures += !ok;
        eccl_sg_printf("eccl-sim", "%s rank=%d role=%s returned=%d status=%d oks=%d "
                       "last_ok_iter=%d last_world=%d failed_ops=%d",
                       ok ? "ok" : "FAIL", r->idx, role, r->returned, r->status, r->oks,
                       r->last_ok_iter, r->last_ok_world, r->failed_ops);
        if (rf)
            fprintf(rf, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", r->idx, r->host, role,
                    r->returned, r->status, r->oks, r->last_ok_iter, r->last_ok_world,
                    r->failed_ops, ok ? "pass" : "FAIL");
    }
    /* Every rank that finished an iteration holds the same bits. */
    int parity_bad = 0;
    for (int it = 0; it < cfg.iters; it++) {
        uint64_t ref = 0;
        for (int i = 0; i < cfg.ranks; i++) {
            uint64_t h = s->rk[i].hashes[it];
            if (!h) continue;
            if (!ref) ref = h;
            else if (h != ref) parity_bad++;
        }
    }
    if (cfg.phantom)
        eccl_sg_printf("eccl-sim", "values unchecked: phantom buffers carry sizes, not bytes "
                       "(checked: completion, survivors, timing)");
    if (parity_bad) {
        eccl_sg_printf("eccl-sim", "FAIL %d all-reduce results differ between ranks", parity_bad);
        failures++;
    }
    if (survivors != cfg.expect_survivors) {
        eccl_sg_printf("eccl-sim", "FAIL survivors=%d expect_survivors=%d", survivors,
                       cfg.expect_survivors);
        failures++;
    }
    if (s->oom) {
        fprintf(stderr, "eccl-sim: out of memory while recording\n");
        failures++;
    }
    const char *checks = failures ? "fail" : "pass";
    char sim_time[32], ar_mean[32] = "-", ar_min[32] = "-";
    fmt_time(sim_time, sizeof sim_time, end_ns);
    if (s->ar_n) {
        fmt_time(ar_mean, sizeof ar_mean, s->ar_sum_ns / s->ar_n);
        fmt_time(ar_min, sizeof ar_min, s->ar_min_ns);
    }

    int io_err = rf ? (fclose(rf) != 0) : 1;
    io_err |= write_events(s, outdir) != 0;
    FILE *sf = open_out(outdir, "summary.tsv");
    if (sf) {
        fprintf(sf, "key\tvalue\n");
        fprintf(sf, "scenario\t%s\nseed\t%llu\nplatform\t%s\nhosts\t%d\nranks\t%d\ncount\t%ld\n"
                    "iters\t%d\nkills\t%d\nkilled\t%d\nsurvivors\t%d\nexpect_survivors\t%d\n"
                    "survivors_noticed\t%d\nfailed_checks\t%d\nchecks\t%s\nevents\t%zu\n"
                    "sim_time_s\t%s\nallreduce_ok\t%llu\nallreduce_mean_s\t%s\n"
                    "allreduce_min_s\t%s\nbuffers\t%s\nvalues\t%s\nreduce_rate_Bps\t%.17g\n"
                    "copy_rate_Bps\t%.17g\n",
                cfg.name, (unsigned long long)cfg.seed, cfg.platform, cfg.hosts, cfg.ranks,
                cfg.count, cfg.iters, cfg.nkills, killed, survivors, cfg.expect_survivors, noticed,
                failures, checks, s->nev, sim_time, (unsigned long long)s->ar_n, ar_mean, ar_min,
                cfg.phantom ? "phantom" : "host", cfg.phantom ? "unchecked" : "checked",
                cfg.reduce_rate_Bps, cfg.copy_rate_Bps);
        io_err |= fclose(sf) != 0;
    } else {
        io_err = 1;
    }
    io_err |= write_plot_script(&cfg, outdir) != 0;
    const char *plot = "none";
    if (!io_err) {
        int pr = render_plot(outdir);
        if (pr == 1) {
            fprintf(stderr, "eccl-sim: gnuplot not found: skipping plot.png "
                            "(install gnuplot-nox)\n");
            plot = "skipped";
        } else if (pr < 0) {
            fprintf(stderr, "eccl-sim: gnuplot failed on %s/plot.gp\n", outdir);
            plot = "failed";
            io_err = 1;
        } else {
            plot = "plot.png";
        }
    }

    printf("scenario=%s seed=%llu ranks=%d killed=%d survivors=%d expect_survivors=%d iters=%d "
           "buffers=%s values=%s checks=%s sim_time_s=%s allreduce_mean_s=%s events=%zu out=%s "
           "plot=%s\n",
           cfg.name, (unsigned long long)cfg.seed, cfg.ranks, killed, survivors,
           cfg.expect_survivors, cfg.iters, cfg.phantom ? "phantom" : "host",
           cfg.phantom ? "unchecked" : "checked", checks, sim_time, ar_mean, s->nev, outdir, plot);

    eccl_sg_world_destroy(s->w);
    free(hashes);
    free(s->rk);
    free(s->oks_at);
    free(s->ev);
    free(s);
    free(cfg.kills);
    fflush(stdout);
    return failures == 0 && !io_err ? 0 : 1;
}
