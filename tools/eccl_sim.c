/* eccl-sim: runs a scenario file on the simulator backend.
 *
 *   eccl-sim run FILE [--seed S] [--out DIR] [--log-level 0-5] [--verbose]
 *
 * A thin command over the scenario engine (scenarios/engine: the parser,
 * the platforms, the SimGrid runner and its workloads; results/src: the
 * writer). The scenario (format: scenarios/README.md) describes a
 * generated platform, N ranks running the very worker loop eccl-worker runs
 * (examples/worker_loop.c, eccl_worker_run) as SimGrid actors, and a fault
 * plan. After the run the outcome is checked; the results go to DIR (default
 * results/<name>/ under the current directory): platform.xml, events.tsv,
 * ranks.tsv, summary.tsv, plot.gp and plot.png (rendered with gnuplot when it
 * is installed; past 1,000 ranks from plot.tsv, a sample of the ranks).
 *
 * `workload = bench` instead runs eccl-bench's measurement on the platform
 * (scenarios/engine/sim_bench.h) and prints its rows; `diloco` and `nccl2_bootstrap`
 * are the other workloads (scenarios/README.md).
 *
 * Exit status: 0 every check passed, 1 a check failed (or the outputs could
 * not be written), 2 usage or scenario error.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <simgrid/engine.h>

#include "eccl.h"
#include "env.h" /* ECCL_LOG_* */
#include "results.h"
#include "run_sg.h"
#include "scenario.h"

/* help: asked for (stdout, success) or a bad command line (stderr, 2). */
static int usage(const char *argv0, int help)
{
    fprintf(help ? stdout : stderr,
            "usage: %s run FILE [--seed S] [--out DIR] [--log-level 0-5] [--verbose]\n"
            "  Runs the scenario FILE (format: scenarios/README.md) on the simulator and\n"
            "  writes its results to DIR (default: results/<scenario name>/).\n"
            "  SimGrid's own --cfg=... and --log=... options are accepted too.\n"
            "  Exit status: 0 all checks passed, 1 a check failed, 2 usage or scenario error.\n",
            argv0);
    return help ? 0 : 2;
}


int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* Before SimGrid, which answers --help with its configuration list. */
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) return usage(argv[0], 1);
    /* Takes SimGrid's own --cfg=... and --log=... options out of argv. */
    simgrid_init(&argc, argv);
    if (argc < 3 || strcmp(argv[1], "run") != 0) return usage(argv[0], 0);
    const char *file = argv[2], *out = NULL;
    int have_seed = 0, verbose = 0, log_level = ECCL_LOG_WARN;
    uint64_t seed = 0;
    for (int i = 3; i < argc; i++) {
        long x;
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            if (eccl_scn_parse_u64(argv[++i], &seed)) {
                fprintf(stderr, "eccl-sim: --seed %s: want an unsigned 64-bit integer\n", argv[i]);
                return 2;
            }
            have_seed = 1;
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else if (strcmp(argv[i], "--log-level") == 0 && i + 1 < argc) {
            if (eccl_scn_parse_long(argv[++i], 0, 5, &x)) return usage(argv[0], 0);
            log_level = (int)x;
        } else if (strcmp(argv[i], "--verbose") == 0) {
            verbose = 1;
        } else {
            return usage(argv[0], 0);
        }
    }

    eccl_scenario cfg;
    if (eccl_scn_parse(file, &cfg)) {
        eccl_scn_free(&cfg);
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
    if (eccl_results_mkdir(outdir) ||
        snprintf(platform_path, sizeof platform_path, "%s/platform.xml", outdir) >=
            (int)sizeof platform_path ||
        eccl_scn_write_platform(&cfg, platform_path)) {
        fprintf(stderr, "eccl-sim: cannot create %s: %s\n", outdir, strerror(errno));
        eccl_scn_free(&cfg);
        return 1;
    }
    return eccl_scn_sg_run(&cfg, file, outdir, platform_path, log_level, verbose);
}
