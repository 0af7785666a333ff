/* Runs a parsed scenario with real processes: eccl-emu's engine.
 *
 * Every emulated host node-K gets a loopback address of its own
 * (eccl_scn_emu_host_addr); the master, the relays and one eccl-worker (or
 * eccl-bench) process per rank bind and dial from their host's address, and
 * every process wraps its net in the chaos env (chaos/) with one plan
 * generated from the scenario's platform: each host pair gets its route's
 * latency, and its bytes cross the route's links as wires whose buckets
 * every process shares (a file they map); link faults become partitions
 * and slow rules at their times. Kills are SIGKILL, a silent host_off is
 * SIGSTOP, joins and host_on start new processes. The workers' lines feed
 * the same observer as eccl-sim's (job.h), so the checks and the outputs
 * (events.tsv, ranks.tsv, summary.tsv, plot) are the same, on the wall
 * clock.
 */
#ifndef ECCL_SCN_RUN_EMU_H
#define ECCL_SCN_RUN_EMU_H

#include <stddef.h>

#include "scenario.h"

/* One box runs tens of processes, not thousands: past this eccl-emu
 * refuses and says that eccl-sim runs the scenario. */
#define ECCL_EMU_MAX_RANKS 64

typedef struct eccl_scn_emu_options {
    const char *bindir;  /* where eccl-master, eccl-worker, eccl-bench are */
    double timeout_s;    /* the whole run: past it every process is killed and the run fails */
    int verbose;         /* echo every worker line */
} eccl_scn_emu_options;

/* node-K's loopback address: 127.77.X.Y with X.Y = K + 1. */
void eccl_scn_emu_host_addr(int host, char *buf, size_t len);

/* Writes the chaos plan of the scenario's platform and link faults to
 * PATH; *nwires: the wires it declares (the shared buckets every process
 * maps). Returns 0, or -1 after printing why (a fault naming a link no
 * route of the job crosses: an error in FILE). */
int eccl_scn_emu_write_plan(const eccl_scenario *c, const char *file, const char *path, int *nwires);

/* Runs cfg's workload and judges it; outputs in outdir. Returns eccl-emu's
 * exit status: 0 every check passed, 1 a check failed (or the outputs
 * could not be written), 2 a scenario eccl-emu cannot run (said why). */
int eccl_scn_emu_run(eccl_scenario *cfg, const char *file, const char *outdir, const eccl_scn_emu_options *o);

#endif
