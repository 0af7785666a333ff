/* Runs a parsed scenario on SimGrid: eccl-sim's engine. */
#ifndef ECCL_SCN_RUN_SG_H
#define ECCL_SCN_RUN_SG_H

#include "scenario.h"

/* Before it: simgrid_init (SimGrid's own options) and the platform written
 * to platform_path (eccl_scn_write_platform). Loads the platform, sets the
 * actors' stacks, runs cfg's workload, checks it and writes its results to
 * outdir. Returns eccl-sim's exit status: 0 every check passed, 1 a check
 * failed or the outputs could not be written, 2 a scenario error found on
 * the loaded platform. May _exit past 4,096 ranks once everything is
 * written (ECCL_SIM_TEARDOWN set: never). */
int eccl_scn_sg_run(eccl_scenario *cfg, const char *file, const char *outdir, const char *platform_path,
                    int log_level, int verbose);

#endif
