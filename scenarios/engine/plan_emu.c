/* eccl-emu's chaos plan: the scenario's platform and link faults as rules
 * of the chaos env (chaos/README.md), one plan for every process of the
 * job.
 *
 * A host pair is shaped by its route (eccl_scn_route, the same formulas as
 * the SimGrid platform): its one-way latency is the sum of its links', and
 * its bytes cross the route's links as chaos `wire`s, buckets every process
 * of the job shares (ECCL_CHAOS_WIRES), so that flows over one link share
 * it as SimGrid's do. As in SimGrid's platform, a host's own link is split
 * duplex (node-K.up, node-K.down: a wire each way), the other links carry
 * both directions on one wire, a cluster's backbone never limits (not a
 * wire), and the WAN's per-flow cap (flow_bandwidth) caps each connection
 * (flow=). Two ranks of one host talk over the real loopback, unshaped.
 * Link faults are walked in time order: while a pair's route crosses a link
 * that is off, a `partition` rule holds it; a slow_link changes its wires'
 * bandwidth and the latency of the pairs whose routes cross it from then on
 * (the last matching rule wins).
 */
#include <ctype.h>
#include <math.h> /* qsort_r: _GNU_SOURCE, which the tool defines */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "run_emu.h"

void eccl_scn_emu_host_addr(int host, char *buf, size_t len)
{
    snprintf(buf, len, "127.77.%d.%d", (host + 1) >> 8, (host + 1) & 0xff);
}

/* A link's state while the faults are walked: off, or changed by a slow_link. */
typedef struct link_state {
    char name[LINK_NAME_MAX];
    int off, changed;
    double bandwidth_Bps, latency_s;
} link_state;

typedef struct pair_state {
    int off;
    uint64_t off_since;
    double latency_s;
} pair_state;

static link_state *find_link(link_state *ls, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(ls[i].name, name)) return &ls[i];
    return NULL;
}

/* The pair's route under the links' current states: cut or not, and its
 * latency (its bandwidth is its wires'). */
static void pair_now(const eccl_scenario *c, int a, int b, link_state *ls, int nls, pair_state *out)
{
    eccl_scn_hop h[ECCL_SCN_HOPS_MAX];
    const int n = eccl_scn_route(c, a, b, h);
    out->off = 0;
    out->latency_s = 0;
    for (int i = 0; i < n; i++) {
        const link_state *l = find_link(ls, nls, h[i].name);
        out->off |= l && l->off;
        out->latency_s += l && l->changed ? l->latency_s : h[i].latency_s;
    }
}

/* Whether a fault's link name is on some route between the job's hosts
 * (node-K, or a link of platform.xml that a route crosses); its base
 * bandwidth and latency then. */
static int link_known(const eccl_scenario *c, int hosts, const char *name, double *bw, double *lat)
{
    for (int a = 0; a < hosts; a++)
        for (int b = a + 1; b < hosts; b++) {
            eccl_scn_hop h[ECCL_SCN_HOPS_MAX];
            const int n = eccl_scn_route(c, a, b, h);
            for (int i = 0; i < n; i++)
                if (!strcmp(h[i].name, name)) {
                    *bw = h[i].bandwidth_Bps;
                    *lat = h[i].latency_s;
                    return 1;
                }
        }
    return 0;
}

static void addr_pair(int a, int b, char *x, char *y, size_t len)
{
    eccl_scn_emu_host_addr(a, x, len);
    eccl_scn_emu_host_addr(b, y, len);
}

/* The wire a hop of a route from `from` is: node-K's link a wire each way,
 * a backbone none (""). */
static void hop_wire(const eccl_scn_hop *h, int from, char *out, size_t len)
{
    int k;
    char tail;
    const size_t n = strlen(h->name), bb = strlen("_backbone");
    if (sscanf(h->name, "node-%d%c", &k, &tail) == 1) snprintf(out, len, "%s.%s", h->name, k == from ? "up" : "down");
    else if (n > bb && !strcmp(h->name + n - bb, "_backbone")) out[0] = '\0';
    else snprintf(out, len, "%s", h->name);
}

/* `link A B latency=... via=... back=... [flow=...]`: the pair's base rule. */
static void write_route(FILE *f, const eccl_scenario *c, int a, int b)
{
    char x[32], y[32];
    addr_pair(a, b, x, y, sizeof x);
    eccl_scn_hop h[ECCL_SCN_HOPS_MAX];
    const int n = eccl_scn_route(c, a, b, h);
    double lat = 0, flow = 0;
    for (int i = 0; i < n; i++) {
        lat += h[i].latency_s;
        if (h[i].per_flow && (flow == 0 || h[i].bandwidth_Bps < flow)) flow = h[i].bandwidth_Bps;
    }
    fprintf(f, "link %s %s latency=%lluns", x, y, (unsigned long long)llround(lat * 1e9));
    for (int way = 0; way < 2; way++) {
        const char *sep = way ? " back=" : " via=";
        for (int k = 0; k < n; k++) {
            const eccl_scn_hop *hk = &h[way ? n - 1 - k : k];
            char w[LINK_NAME_MAX + 8];
            if (hk->per_flow) continue;
            hop_wire(hk, way ? b : a, w, sizeof w);
            if (!w[0]) continue;
            fprintf(f, "%s%s", sep, w);
            sep = ",";
        }
    }
    if (flow > 0) fprintf(f, " flow=%.17gBps", flow);
    fputc('\n', f);
}

/* Declares every wire the job's routes cross (its first line), once. */
static int write_wires(FILE *f, const eccl_scenario *c, int hosts)
{
    char (*seen)[LINK_NAME_MAX + 8] = NULL;
    int nseen = 0, cap = 0;
    for (int a = 0; a < hosts; a++)
        for (int b = 0; b < hosts; b++) {
            if (a == b) continue;
            eccl_scn_hop h[ECCL_SCN_HOPS_MAX];
            const int n = eccl_scn_route(c, a, b, h);
            for (int k = 0; k < n; k++) {
                char w[LINK_NAME_MAX + 8];
                if (h[k].per_flow) continue;
                hop_wire(&h[k], a, w, sizeof w);
                int dup = !w[0];
                for (int i = 0; i < nseen && !dup; i++) dup = !strcmp(seen[i], w);
                if (dup) continue;
                if (nseen == cap) {
                    cap = cap ? 2 * cap : 64;
                    void *m = realloc(seen, (size_t)cap * sizeof *seen);
                    if (!m) {
                        free(seen);
                        return -1;
                    }
                    seen = m;
                }
                snprintf(seen[nseen++], sizeof seen[0], "%s", w);
                fprintf(f, "wire %s bandwidth=%.17gBps\n", w, h[k].bandwidth_Bps);
            }
        }
    free(seen);
    return nseen;
}

/* A pair's latency from from_ns on (a slow_link). */
static void write_latency(FILE *f, int a, int b, double latency_s, uint64_t from_ns)
{
    char x[32], y[32];
    addr_pair(a, b, x, y, sizeof x);
    fprintf(f, "link %s %s latency=%lluns from=%lluns\n", x, y, (unsigned long long)llround(latency_s * 1e9),
            (unsigned long long)from_ns);
}

/* A slowed link's wires from from_ns on. */
static void write_slow_wire(FILE *f, const link_state *l, uint64_t from_ns)
{
    int k;
    char tail;
    if (sscanf(l->name, "node-%d%c", &k, &tail) == 1) {
        fprintf(f, "wire %s.up bandwidth=%.17gBps from=%lluns\n", l->name, l->bandwidth_Bps,
                (unsigned long long)from_ns);
        fprintf(f, "wire %s.down bandwidth=%.17gBps from=%lluns\n", l->name, l->bandwidth_Bps,
                (unsigned long long)from_ns);
    } else {
        fprintf(f, "wire %s bandwidth=%.17gBps from=%lluns\n", l->name, l->bandwidth_Bps, (unsigned long long)from_ns);
    }
}

static void write_partition(FILE *f, int a, int b, uint64_t from_ns, uint64_t until_ns)
{
    char x[32], y[32], until[48] = "";
    addr_pair(a, b, x, y, sizeof x);
    if (until_ns != UINT64_MAX) snprintf(until, sizeof until, " until=%lluns", (unsigned long long)until_ns);
    fprintf(f, "partition %s %s from=%lluns%s\n", x, y, (unsigned long long)from_ns, until);
}

/* chaos = FILE, after the platform's rules (its link rules win where they
 * match: the last active one does), with every host node-K written as its
 * loopback address. A seed line of it wins over the scenario's, as in
 * eccl-sim, where the file's plan alone wraps each rank. */
static void write_user_plan(FILE *f, const char *text)
{
    fputs("# chaos = FILE of the scenario, node-K as addresses:\n", f);
    for (const char *p = text; *p;) {
        int k, len;
        if (sscanf(p, "node-%d%n", &k, &len) == 1 && (p == text || (!isalnum((unsigned char)p[-1]) && p[-1] != '-'))) {
            char ip[32];
            eccl_scn_emu_host_addr(k, ip, sizeof ip);
            fputs(ip, f);
            p += len;
        } else {
            fputc(*p++, f);
        }
    }
    fputc('\n', f);
}

int eccl_scn_emu_write_plan(const eccl_scenario *c, const char *file, const char *path, int *nwires)
{
    /* node-0 (the master) and every host a rank runs on; relays sit on
     * their ranks' hosts. */
    const int hosts = 1 + eccl_scn_rank_host(c, c->ranks);
    const int npairs = hosts * hosts;
    int *ord = calloc((size_t)c->nfaults + 1, sizeof *ord);
    link_state *ls = calloc((size_t)c->nfaults * MAX_FAULT_LINKS + 1, sizeof *ls);
    pair_state *ps = calloc((size_t)npairs, sizeof *ps);
    FILE *f = fopen(path, "w");
    int rc = 0, nls = 0, n = 0;
    if (!ord || !ls || !ps || !f) {
        fprintf(stderr, "eccl-emu: %s: cannot write the plan\n", path);
        rc = -1;
        goto out;
    }
    for (int i = 0; i < c->nfaults; i++) {
        const eccl_scn_fault *fl = &c->faults[i];
        if (fl->kind != F_LINK_OFF && fl->kind != F_LINK_ON && fl->kind != F_SLOW) continue;
        ord[n++] = i;
        for (int j = 0; j < fl->nlinks; j++) {
            double bw, lat;
            if (find_link(ls, nls, fl->links[j])) continue;
            if (!link_known(c, hosts, fl->links[j], &bw, &lat)) {
                rc = eccl_scn_error(file, fl->line, "%s: \"%s\": no such link on the routes between the "
                                    "job's hosts (node-K is host K's link; other names as in platform.xml)",
                                    eccl_scn_fault_name(fl->kind), fl->links[j]);
                goto out;
            }
            link_state *l = &ls[nls++];
            snprintf(l->name, sizeof l->name, "%s", fl->links[j]);
            l->bandwidth_Bps = bw;
            l->latency_s = lat;
        }
    }
    qsort_r(ord, (size_t)n, sizeof *ord, eccl_scn_fault_order_cmp, (void *)c);

    fprintf(f, "# Generated by eccl-emu for scenario %s: the platform's %d hosts as loopback addresses\n"
               "# (node-K is 127.77.X.Y with X.Y = K + 1), each pair shaped by its route.\n"
               "seed = %llu\n",
            c->name, hosts, (unsigned long long)c->seed);
    /* tcp_window: a stream carries at most a window per round trip. The
     * chaos net holds at most `buffer` bytes a direction until they are
     * due, one way's latency later: half the window per one-way latency is
     * the window per RTT. */
    if (c->tcp_window > 0)
        fprintf(f, "buffer = %lluB\n", (unsigned long long)llround(c->tcp_window / 2 < 4096 ? 4096 : c->tcp_window / 2));
    *nwires = write_wires(f, c, hosts);
    if (*nwires < 0) {
        fprintf(stderr, "eccl-emu: out of memory\n");
        rc = -1;
        goto out;
    }
    for (int a = 0; a < hosts; a++)
        for (int b = a + 1; b < hosts; b++) {
            pair_now(c, a, b, ls, 0, &ps[a * hosts + b]);
            write_route(f, c, a, b);
        }
    for (int i = 0; i < n;) {
        const uint64_t t = c->faults[ord[i]].at_ns;
        for (; i < n && c->faults[ord[i]].at_ns == t; i++) {
            const eccl_scn_fault *fl = &c->faults[ord[i]];
            for (int j = 0; j < fl->nlinks; j++) {
                link_state *l = find_link(ls, nls, fl->links[j]);
                if (fl->kind != F_SLOW) {
                    l->off = fl->kind == F_LINK_OFF;
                    continue;
                }
                /* As the simulator changes the link: a factor of what it
                 * carries now, or the values given. */
                l->changed = 1;
                if (fl->factor > 0) {
                    l->bandwidth_Bps /= fl->factor;
                    l->latency_s *= fl->factor;
                }
                if (fl->bw_Bps > 0) l->bandwidth_Bps = fl->bw_Bps;
                if (fl->have_lat) l->latency_s = fl->lat_s;
                write_slow_wire(f, l, t);
            }
        }
        for (int a = 0; a < hosts; a++)
            for (int b = a + 1; b < hosts; b++) {
                pair_state *p = &ps[a * hosts + b], now;
                pair_now(c, a, b, ls, nls, &now);
                if (now.off && !p->off) p->off_since = t;
                if (!now.off && p->off) write_partition(f, a, b, p->off_since, t);
                p->off = now.off;
                if (now.latency_s != p->latency_s) write_latency(f, a, b, now.latency_s, t);
                p->latency_s = now.latency_s;
            }
    }
    for (int a = 0; a < hosts; a++)
        for (int b = a + 1; b < hosts; b++)
            if (ps[a * hosts + b].off) write_partition(f, a, b, ps[a * hosts + b].off_since, UINT64_MAX);
    if (c->chaos_plan) write_user_plan(f, c->chaos_plan);
out:
    if (f && fclose(f) != 0 && rc == 0) {
        fprintf(stderr, "eccl-emu: %s: cannot write the plan\n", path);
        rc = -1;
    }
    free(ord);
    free(ls);
    free(ps);
    return rc;
}
