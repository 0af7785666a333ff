/* eccl-emu's chaos plan: the scenario's platform and link faults as rules
 * of the chaos env (chaos/README.md), one plan for every process of the
 * job.
 *
 * A host pair is shaped by its route (eccl_scn_route, the same formulas as
 * the SimGrid platform): one-way latency the sum of its links', bandwidth
 * its narrowest link's. What this leaves out, said in scenarios/README.md
 * ("eccl-emu"): a link is not shared between host pairs (two pairs over one
 * WAN link each get all of it), and two ranks of one host talk over the
 * real loopback, unshaped. Link faults are walked in time order: while a
 * pair's route crosses a link that is off, a `partition` rule holds it; a
 * slow_link gives the pairs whose routes cross it a `link` rule from then
 * on (the last matching rule wins).
 */
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
    double latency_s, bandwidth_Bps;
} pair_state;

static link_state *find_link(link_state *ls, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(ls[i].name, name)) return &ls[i];
    return NULL;
}

/* The pair's route under the links' current states. */
static void pair_now(const eccl_scenario *c, int a, int b, link_state *ls, int nls, pair_state *out)
{
    eccl_scn_hop h[ECCL_SCN_HOPS_MAX];
    const int n = eccl_scn_route(c, a, b, h);
    out->off = 0;
    out->latency_s = 0;
    out->bandwidth_Bps = 0;
    for (int i = 0; i < n; i++) {
        const link_state *l = find_link(ls, nls, h[i].name);
        double bw = h[i].bandwidth_Bps, lat = h[i].latency_s;
        if (l && l->changed) {
            bw = l->bandwidth_Bps;
            lat = l->latency_s;
        }
        out->off |= l && l->off;
        out->latency_s += lat;
        if (out->bandwidth_Bps == 0 || bw < out->bandwidth_Bps) out->bandwidth_Bps = bw;
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

static void write_link(FILE *f, int a, int b, const pair_state *p, uint64_t from_ns)
{
    char x[32], y[32], from[48] = "";
    addr_pair(a, b, x, y, sizeof x);
    if (from_ns) snprintf(from, sizeof from, " from=%lluns", (unsigned long long)from_ns);
    fprintf(f, "link %s %s latency=%lluns bandwidth=%.17gBps%s\n", x, y,
            (unsigned long long)llround(p->latency_s * 1e9), p->bandwidth_Bps, from);
}

static void write_partition(FILE *f, int a, int b, uint64_t from_ns, uint64_t until_ns)
{
    char x[32], y[32], until[48] = "";
    addr_pair(a, b, x, y, sizeof x);
    if (until_ns != UINT64_MAX) snprintf(until, sizeof until, " until=%lluns", (unsigned long long)until_ns);
    fprintf(f, "partition %s %s from=%lluns%s\n", x, y, (unsigned long long)from_ns, until);
}

int eccl_scn_emu_write_plan(const eccl_scenario *c, const char *file, const char *path)
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
    for (int a = 0; a < hosts; a++)
        for (int b = a + 1; b < hosts; b++) {
            pair_state *p = &ps[a * hosts + b];
            pair_now(c, a, b, ls, 0, p);
            write_link(f, a, b, p, 0);
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
            }
        }
        for (int a = 0; a < hosts; a++)
            for (int b = a + 1; b < hosts; b++) {
                pair_state *p = &ps[a * hosts + b], now;
                pair_now(c, a, b, ls, nls, &now);
                if (now.off && !p->off) p->off_since = t;
                if (!now.off && p->off) write_partition(f, a, b, p->off_since, t);
                p->off = now.off;
                if (now.latency_s != p->latency_s || now.bandwidth_Bps != p->bandwidth_Bps) {
                    p->latency_s = now.latency_s;
                    p->bandwidth_Bps = now.bandwidth_Bps;
                    write_link(f, a, b, p, t);
                }
            }
    }
    for (int a = 0; a < hosts; a++)
        for (int b = a + 1; b < hosts; b++)
            if (ps[a * hosts + b].off) write_partition(f, a, b, ps[a * hosts + b].off_since, UINT64_MAX);
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
