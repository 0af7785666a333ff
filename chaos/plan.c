/* The chaos plan: parsing (format: chaos/README.md) and what it asks of a
 * path at a given time. Rules apply in file order: for a link's latency,
 * jitter and bandwidth the last active rule that matches wins; partitions
 * and slow hosts add up. */
#define _POSIX_C_SOURCE 200809L /* strtok_r */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chaos.h"

#define HOST_MAX 64

typedef enum rule_kind { R_LINK, R_RESET, R_PARTITION, R_SLOW, R_KILL, R_WIRE } rule_kind;

#define VIA_MAX 16 /* wires a link's route crosses, each way */

typedef struct rule {
    rule_kind kind;
    char a[HOST_MAX], b[HOST_MAX]; /* b unused by slow and kill */
    uint64_t from_ns, until_ns;    /* active in [from, until); until UINT64_MAX: to the end */
    int have_latency, have_jitter, have_bandwidth;
    uint64_t latency_ns, jitter_ns;
    double bandwidth_Bps;
    double rate_per_s; /* reset */
    double factor;     /* slow */
    uint64_t at_ns;    /* kill at=: UINT64_MAX when by frames */
    uint16_t frame_type;
    uint64_t frames;
    /* link via=, back=: the wires its traffic crosses from a to b, and
     * from b to a (back: via reversed unless given); flow=: each
     * connection's own cap. wire: its id (a; b unused). */
    int nvia[2], have_via;
    uint16_t via[2][VIA_MAX];
    double flow_Bps;
    int have_flow;
    uint16_t wire;
} rule;

struct eccl_chaos_plan {
    uint64_t seed;
    size_t buffer_bytes;
    rule *rules;
    size_t n;
    char (*wires)[HOST_MAX]; /* wire names, by id */
    size_t nwires;
};

typedef struct unit {
    const char *name;
    double factor;
} unit;

static const unit time_units[] = {{"s", 1.0}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}, {NULL, 0}};
static const unit bandwidth_units[] = {
    {"Bps", 1.0},      {"kBps", 1e3},     {"KBps", 1e3},      {"MBps", 1e6},      {"GBps", 1e9},
    {"TBps", 1e12},    {"bps", 1.0 / 8},  {"kbps", 1e3 / 8},  {"Mbps", 1e6 / 8},  {"Gbps", 1e9 / 8},
    {"Tbps", 1e12 / 8}, {NULL, 0},
};
static const unit size_units[] = {{"B", 1.0}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
                                  {NULL, 0}};

int eccl_chaos_parse_quantity(const char *v, eccl_chaos_unit kind, double *out)
{
    const unit *units = kind == ECCL_CHAOS_TIME ? time_units : kind == ECCL_CHAOS_BANDWIDTH ? bandwidth_units
                                                                                            : size_units;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || !isfinite(x) || x < 0) return -1;
    while (*end == ' ' || *end == '\t') end++;
    for (const unit *u = units; u->name; u++) {
        if (strcmp(end, u->name) == 0) {
            *out = x * u->factor;
            return 0;
        }
    }
    return -1;
}

/* Frame types a kill may count, by the names of enum eccl_msg_type
 * (core/proto/wire.h); a number is taken as is. */
static const struct {
    const char *name;
    uint16_t type;
} frame_names[] = {
    {"REGISTER", 1},     {"HEARTBEAT", 2},  {"PENDING_QUERY", 3}, {"TOPO_VOTE", 4},  {"RING_READY", 5},
    {"COLL_DONE", 7},    {"VIEW_REPORT", 8}, {"SYNC_REQ", 9},     {"SYNC_REPORT", 10}, {"LEAVE", 14},
    {"P2P_HELLO", 64},   {"DATA", 65},      {"SYNC_FETCH", 66},   {"BATCH", 81},
};

static int parse_frame_type(const char *v, size_t len, uint16_t *out)
{
    for (size_t i = 0; i < sizeof frame_names / sizeof *frame_names; i++)
        if (strlen(frame_names[i].name) == len && memcmp(frame_names[i].name, v, len) == 0) {
            *out = frame_names[i].type;
            return 0;
        }
    char buf[8];
    if (len == 0 || len >= sizeof buf) return -1;
    memcpy(buf, v, len);
    buf[len] = '\0';
    char *end;
    unsigned long t = strtoul(buf, &end, 10);
    if (*end || t == 0 || t > 65535) return -1;
    *out = (uint16_t)t;
    return 0;
}

static uint64_t to_ns(double s) { return (uint64_t)llround(s * 1e9); }

__attribute__((format(printf, 4, 5))) static eccl_result fail(char *err, size_t errlen, int line,
                                                              const char *fmt, ...)
{
    if (err && errlen) {
        int k = snprintf(err, errlen, "line %d: ", line);
        va_list ap;
        va_start(ap, fmt);
        if (k >= 0 && (size_t)k < errlen) vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return ECCL_ERR_INVALID_ARG;
}

/* The id of wire `name`; -1 when the plan has declared none such. */
static int wire_id(const eccl_chaos_plan *p, const char *name, size_t len)
{
    for (size_t i = 0; i < p->nwires; i++)
        if (strlen(p->wires[i]) == len && !strncmp(p->wires[i], name, len)) return (int)i;
    return -1;
}

/* A comma-separated list of declared wires into ids[]; their count, or -1. */
static int wire_list(const eccl_chaos_plan *p, const char *val, uint16_t *ids)
{
    int n = 0;
    for (const char *w = val; *w;) {
        const char *comma = strchr(w, ',');
        size_t len = comma ? (size_t)(comma - w) : strlen(w);
        int id = wire_id(p, w, len);
        if (id < 0 || n == VIA_MAX) return -1;
        ids[n++] = (uint16_t)id;
        w += len + (comma != NULL);
    }
    return n > 0 ? n : -1;
}

/* One `key=value` option of a rule line into r; -1 when unknown or bad. */
static int rule_option(const eccl_chaos_plan *p, rule *r, const char *key, const char *val)
{
    double x;
    if (!strcmp(key, "from") || !strcmp(key, "until")) {
        if (eccl_chaos_parse_quantity(val, ECCL_CHAOS_TIME, &x)) return -1;
        *(!strcmp(key, "from") ? &r->from_ns : &r->until_ns) = to_ns(x);
        return 0;
    }
    switch (r->kind) {
    case R_LINK:
        if (!strcmp(key, "latency") && !eccl_chaos_parse_quantity(val, ECCL_CHAOS_TIME, &x))
            return r->latency_ns = to_ns(x), r->have_latency = 1, 0;
        if (!strcmp(key, "jitter") && !eccl_chaos_parse_quantity(val, ECCL_CHAOS_TIME, &x))
            return r->jitter_ns = to_ns(x), r->have_jitter = 1, 0;
        if (!strcmp(key, "bandwidth") && !eccl_chaos_parse_quantity(val, ECCL_CHAOS_BANDWIDTH, &x) && x > 0)
            return r->bandwidth_Bps = x, r->have_bandwidth = 1, 0;
        if (!strcmp(key, "flow") && !eccl_chaos_parse_quantity(val, ECCL_CHAOS_BANDWIDTH, &x) && x > 0)
            return r->flow_Bps = x, r->have_flow = 1, 0;
        if (!strcmp(key, "via") || !strcmp(key, "back")) {
            const int d = key[0] == 'b';
            r->nvia[d] = wire_list(p, val, r->via[d]);
            if (r->nvia[d] < 0) return -1;
            r->have_via |= 1 << d;
            return 0;
        }
        return -1;
    case R_WIRE:
        if (!strcmp(key, "bandwidth") && !eccl_chaos_parse_quantity(val, ECCL_CHAOS_BANDWIDTH, &x) && x > 0)
            return r->bandwidth_Bps = x, r->have_bandwidth = 1, 0;
        return -1;
    case R_RESET: {
        char *end;
        if (strcmp(key, "rate")) return -1;
        errno = 0;
        x = strtod(val, &end);
        if (errno || end == val || strcmp(end, "/s") || !isfinite(x) || x <= 0) return -1;
        r->rate_per_s = x;
        return 0;
    }
    case R_SLOW: {
        char *end;
        if (strcmp(key, "factor")) return -1;
        errno = 0;
        x = strtod(val, &end);
        if (errno || end == val || *end || !isfinite(x) || x < 1) return -1;
        r->factor = x;
        return 0;
    }
    case R_KILL:
        if (!strcmp(key, "at") && !eccl_chaos_parse_quantity(val, ECCL_CHAOS_TIME, &x))
            return r->at_ns = to_ns(x), 0;
        if (!strcmp(key, "after")) {
            const char *colon = strchr(val, ':');
            char *end;
            if (!colon || parse_frame_type(val, (size_t)(colon - val), &r->frame_type)) return -1;
            errno = 0;
            unsigned long long n = strtoull(colon + 1, &end, 10);
            if (errno || end == colon + 1 || *end || n == 0 || colon[1] == '-') return -1;
            r->frames = n;
            return 0;
        }
        return -1;
    case R_PARTITION:
        return -1;
    }
    return -1;
}

static int copy_host(char *dst, const char *src)
{
    size_t n = strlen(src);
    if (n == 0 || n >= HOST_MAX || strchr(src, '=')) return -1; /* an option where a host belongs */
    memcpy(dst, src, n + 1);
    return 0;
}

eccl_result eccl_chaos_plan_parse(const char *text, char *err, size_t errlen, eccl_chaos_plan **out)
{
    if (!text || !out) return ECCL_ERR_INVALID_ARG;
    eccl_chaos_plan *p = calloc(1, sizeof *p);
    if (!p) return ECCL_ERR_NO_MEMORY;
    p->seed = 1;
    p->buffer_bytes = 4u << 20;
    size_t cap = 0;
    eccl_result rc = ECCL_OK;
    int lineno = 0;
    for (const char *s = text; *s && rc == ECCL_OK;) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        char line[512];
        lineno++;
        if (len >= sizeof line) {
            rc = fail(err, errlen, lineno, "longer than %zu characters", sizeof line - 1);
            break;
        }
        memcpy(line, s, len);
        line[len] = '\0';
        s = nl ? nl + 1 : s + len;
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *tok[16];
        int nt = 0;
        for (char *save = NULL, *t = strtok_r(line, " \t\r", &save); t; t = strtok_r(NULL, " \t\r", &save)) {
            if (nt == 16) {
                rc = fail(err, errlen, lineno, "too many words");
                break;
            }
            tok[nt++] = t;
        }
        if (rc != ECCL_OK || nt == 0) continue;
        if (nt == 3 && !strcmp(tok[1], "=")) { /* seed = N, buffer = SIZE */
            double x;
            char *end;
            if (!strcmp(tok[0], "seed")) {
                errno = 0;
                unsigned long long v = strtoull(tok[2], &end, 10);
                if (errno || end == tok[2] || *end || tok[2][0] == '-') {
                    rc = fail(err, errlen, lineno, "seed: \"%s\" is not an unsigned integer", tok[2]);
                    break;
                }
                p->seed = v;
            } else if (!strcmp(tok[0], "buffer")) {
                if (eccl_chaos_parse_quantity(tok[2], ECCL_CHAOS_SIZE, &x) || x < 4096 || x > 1e9) {
                    rc = fail(err, errlen, lineno, "buffer: \"%s\": want 4KiB..1GiB (B, KiB, MiB, GiB)", tok[2]);
                    break;
                }
                p->buffer_bytes = (size_t)x;
            } else {
                rc = fail(err, errlen, lineno, "unknown setting \"%s\" (seed, buffer)", tok[0]);
            }
            continue;
        }
        static const char *const kinds[] = {"link", "reset", "partition", "slow", "kill", "wire"};
        rule r = {.from_ns = 0, .until_ns = UINT64_MAX, .at_ns = UINT64_MAX};
        int k = -1;
        for (int i = 0; i < 6; i++)
            if (!strcmp(tok[0], kinds[i])) k = i;
        if (k < 0) {
            rc = fail(err, errlen, lineno, "unknown rule \"%s\" (link, reset, partition, slow, kill, wire; or "
                      "seed = N, buffer = SIZE)", tok[0]);
            break;
        }
        r.kind = (rule_kind)k;
        const int hosts = r.kind == R_SLOW || r.kind == R_KILL || r.kind == R_WIRE ? 1 : 2;
        if (nt < 1 + hosts || copy_host(r.a, tok[1]) || (hosts == 2 && copy_host(r.b, tok[2]))) {
            rc = fail(err, errlen, lineno, "%s: want %s then options", kinds[k], hosts == 2 ? "two hosts" : "a host");
            break;
        }
        for (int i = 1 + hosts; i < nt; i++) {
            char *eq = strchr(tok[i], '=');
            if (eq) *eq = '\0';
            if (!eq || rule_option(p, &r, tok[i], eq + 1)) {
                rc = fail(err, errlen, lineno, "%s: bad option \"%s%s%s\"", kinds[k], tok[i], eq ? "=" : "",
                          eq ? eq + 1 : "");
                break;
            }
        }
        if (rc != ECCL_OK) break;
        if (r.until_ns <= r.from_ns) {
            rc = fail(err, errlen, lineno, "%s: until must be after from", kinds[k]);
            break;
        }
        if (r.kind == R_WIRE) { /* a wire's first line names it; later ones change its bandwidth */
            int id = wire_id(p, r.a, strlen(r.a));
            if (id < 0) {
                void *m = p->nwires >= UINT16_MAX ? NULL : realloc(p->wires, (p->nwires + 1) * sizeof *p->wires);
                if (!m) {
                    rc = ECCL_ERR_NO_MEMORY;
                    break;
                }
                p->wires = m;
                memcpy(p->wires[p->nwires], r.a, sizeof r.a);
                id = (int)p->nwires++;
            }
            r.wire = (uint16_t)id;
        }
        if (r.kind == R_LINK && r.have_via == 1) { /* back: the way there, reversed */
            r.nvia[1] = r.nvia[0];
            for (int i = 0; i < r.nvia[0]; i++) r.via[1][i] = r.via[0][r.nvia[0] - 1 - i];
        }
        if ((r.kind == R_RESET && r.rate_per_s <= 0) || (r.kind == R_SLOW && r.factor < 1) ||
            (r.kind == R_KILL && (r.at_ns == UINT64_MAX) == (r.frames == 0)) ||
            (r.kind == R_LINK && !r.have_latency && !r.have_jitter && !r.have_bandwidth && !r.have_via &&
             !r.have_flow) ||
            (r.kind == R_WIRE && !r.have_bandwidth)) {
            static const char *const need[] = {"latency=, jitter=, bandwidth=, flow= or via=", "rate=R/s", "",
                                               "factor=F (>= 1)", "at=TIME or after=FRAME:N (one of them)",
                                               "bandwidth="};
            rc = fail(err, errlen, lineno, "%s: needs %s", kinds[k], need[k]);
            break;
        }
        if (p->n == cap) {
            size_t nc = cap ? 2 * cap : 8;
            rule *nr = realloc(p->rules, nc * sizeof *nr);
            if (!nr) {
                rc = ECCL_ERR_NO_MEMORY;
                break;
            }
            p->rules = nr, cap = nc;
        }
        p->rules[p->n++] = r;
    }
    if (rc != ECCL_OK) {
        eccl_chaos_plan_free(p);
        return rc;
    }
    *out = p;
    return ECCL_OK;
}

void eccl_chaos_plan_free(eccl_chaos_plan *p)
{
    if (!p) return;
    free(p->rules);
    free(p->wires);
    free(p);
}

uint64_t eccl_chaos_plan_seed(const eccl_chaos_plan *p) { return p->seed; }
size_t eccl_chaos_plan_buffer(const eccl_chaos_plan *p) { return p->buffer_bytes; }

uint64_t eccl_chaos_plan_next_change(const eccl_chaos_plan *p, uint64_t t)
{
    uint64_t next = UINT64_MAX;
    for (size_t i = 0; i < p->n; i++) {
        const rule *r = &p->rules[i];
        if (r->from_ns > t && r->from_ns < next) next = r->from_ns;
        if (r->until_ns > t && r->until_ns < next) next = r->until_ns;
    }
    return next;
}

static int host_is(const char *pattern, const char *host) { return !strcmp(pattern, "*") || !strcmp(pattern, host); }

static int active(const rule *r, uint64_t t) { return t >= r->from_ns && t < r->until_ns; }

/* A two-host rule matches the pair either way round. */
static int pair_matches(const rule *r, const char *x, const char *y)
{
    return (host_is(r->a, x) && host_is(r->b, y)) || (host_is(r->a, y) && host_is(r->b, x));
}

void eccl_chaos_plan_path(const eccl_chaos_plan *p, const char *self, const char *peer, uint64_t t_ns,
                          eccl_chaos_path *out)
{
    memset(out, 0, sizeof *out);
    double slow = 1;
    for (size_t i = 0; i < p->n; i++) {
        const rule *r = &p->rules[i];
        if (!active(r, t_ns)) continue;
        switch (r->kind) {
        case R_LINK:
            if (!pair_matches(r, self, peer)) break;
            if (r->have_latency) out->latency_ns = r->latency_ns;
            if (r->have_jitter) out->jitter_ns = r->jitter_ns;
            if (r->have_bandwidth) out->bandwidth_Bps = r->bandwidth_Bps;
            if (r->have_flow) out->flow_Bps = r->flow_Bps;
            break;
        case R_RESET:
            if (pair_matches(r, self, peer)) out->reset_per_s = r->rate_per_s;
            break;
        case R_PARTITION:
            if (pair_matches(r, self, peer)) out->partitioned = 1;
            break;
        case R_SLOW:
            if (host_is(r->a, self) || host_is(r->a, peer)) slow *= r->factor;
            break;
        case R_KILL:
        case R_WIRE:
            break;
        }
    }
    out->latency_ns = (uint64_t)llround((double)out->latency_ns * slow);
    out->jitter_ns = (uint64_t)llround((double)out->jitter_ns * slow);
    if (out->bandwidth_Bps > 0) out->bandwidth_Bps /= slow;
    if (out->flow_Bps > 0) out->flow_Bps /= slow;
}

size_t eccl_chaos_plan_wires(const eccl_chaos_plan *p) { return p->nwires; }

int eccl_chaos_plan_route(const eccl_chaos_plan *p, const char *from, const char *to, uint64_t t_ns,
                          eccl_chaos_wire *out)
{
    const rule *link = NULL;
    double slow = 1;
    for (size_t i = 0; i < p->n; i++) {
        const rule *r = &p->rules[i];
        if (!active(r, t_ns)) continue;
        if (r->kind == R_LINK && r->have_via && pair_matches(r, from, to)) link = r;
        if (r->kind == R_SLOW && (host_is(r->a, from) || host_is(r->a, to))) slow *= r->factor;
    }
    if (!link) return 0;
    const int d = !(host_is(link->a, from) && host_is(link->b, to));
    for (int k = 0; k < link->nvia[d]; k++) {
        out[k].id = link->via[d][k];
        out[k].bandwidth_Bps = 0;
        for (size_t i = 0; i < p->n; i++) { /* its bandwidth now: the last active line wins */
            const rule *r = &p->rules[i];
            if (r->kind == R_WIRE && r->wire == out[k].id && active(r, t_ns)) out[k].bandwidth_Bps = r->bandwidth_Bps;
        }
        out[k].bandwidth_Bps /= slow;
    }
    return link->nvia[d];
}

void eccl_chaos_plan_kill(const eccl_chaos_plan *p, const char *self, uint16_t *frame_type, uint64_t *frames,
                          uint64_t *at_ns)
{
    *frame_type = 0, *frames = 0, *at_ns = UINT64_MAX;
    for (size_t i = 0; i < p->n; i++) {
        const rule *r = &p->rules[i];
        if (r->kind != R_KILL || strcmp(r->a, self)) continue; /* a kill names its host: no "*" */
        if (r->frames) *frame_type = r->frame_type, *frames = r->frames;
        else if (r->at_ns < *at_ns) *at_ns = r->at_ns;
    }
}
