/* eccl-emu shapes every host pair by eccl_scn_route, the platform model's
 * routes written out in C; eccl-sim runs the platform XML the same model
 * writes. This checks that the two agree: for every pair of the first
 * hosts of each scenario given, SimGrid's route latency (the sum of its
 * links') and bandwidth (its narrowest link's) against eccl_scn_route's.
 *
 *   check_routes WORKDIR SCENARIO...     exit 0: all agree
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <simgrid/engine.h>
#include <simgrid/host.h>

#include "scenario.h"

#define MAX_CHECKED_HOSTS 40

static int check(const char *file, const char *dir)
{
    eccl_scenario c;
    if (eccl_scn_parse(file, &c)) return 1;
    char xml[512];
    snprintf(xml, sizeof xml, "%s/%s.xml", dir, c.name);
    if (eccl_scn_write_platform(&c, xml)) {
        fprintf(stderr, "check_routes: cannot write %s\n", xml);
        return 1;
    }
    int argc = 1;
    char *argv[] = {"check_routes", NULL};
    simgrid_init(&argc, argv);
    simgrid_load_platform(xml);
    simgrid_run_until(0.0); /* seals the zones: routes exist */
    const int hosts = c.hosts < MAX_CHECKED_HOSTS ? c.hosts : MAX_CHECKED_HOSTS;
    int bad = 0, pairs = 0;
    for (int a = 0; a < hosts; a++)
        for (int b = 0; b < hosts; b++) {
            if (a == b) continue;
            char ha[24], hb[24];
            snprintf(ha, sizeof ha, "node-%d", a);
            snprintf(hb, sizeof hb, "node-%d", b);
            const double sg_lat = sg_host_get_route_latency(sg_host_by_name(ha), sg_host_by_name(hb));
            const double sg_bw = sg_host_get_route_bandwidth(sg_host_by_name(ha), sg_host_by_name(hb));
            eccl_scn_hop h[ECCL_SCN_HOPS_MAX];
            const int n = eccl_scn_route(&c, a, b, h);
            double lat = 0, bw = 0;
            for (int i = 0; i < n; i++) {
                lat += h[i].latency_s;
                if (bw == 0 || h[i].bandwidth_Bps < bw) bw = h[i].bandwidth_Bps;
            }
            pairs++;
            if (fabs(lat - sg_lat) > 1e-9 * (1 + sg_lat) || fabs(bw - sg_bw) > 1e-6 * sg_bw) {
                if (bad++ < 5)
                    printf("%s: node-%d -> node-%d: SimGrid %.9f s %.6g B/s, eccl_scn_route %.9f s %.6g B/s\n",
                           c.name, a, b, sg_lat, sg_bw, lat, bw);
            }
        }
    printf("%s: %d host pairs, %d disagree\n", c.name, pairs, bad);
    eccl_scn_free(&c);
    return bad != 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: check_routes WORKDIR SCENARIO\n");
        return 2;
    }
    return check(argv[2], argv[1]);
}
