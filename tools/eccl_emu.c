/* eccl-emu: runs a scenario file with real processes on this box.
 *
 *   eccl-emu run FILE [--seed S] [--out DIR] [--timeout SECONDS] [--verbose]
 *
 * A thin command over the scenario engine's real-process runner
 * (scenarios/engine/run_emu.h): the same file eccl-sim runs, a real
 * eccl-master (and relays) and one eccl-worker process per rank on loopback
 * addresses, the platform and its link faults emulated by the chaos env,
 * kills as signals. The outputs are eccl-sim's (events.tsv, ranks.tsv,
 * summary.tsv, plot.gp/plot.png) on the wall clock, plus chaos.plan and
 * each process's log under logs/; `eccl-results compare` puts a sim run
 * and an emu run side by side.
 *
 * Exit status: 0 every check passed, 1 a check failed (or the outputs could
 * not be written), 2 usage or a scenario eccl-emu cannot run.
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eccl.h"
#include "results.h"
#include "run_emu.h"
#include "scenario.h"

static int usage(const char *argv0, int help)
{
    fprintf(help ? stdout : stderr,
            "usage: %s run FILE [--seed S] [--out DIR] [--timeout SECONDS] [--verbose]\n"
            "  Runs the scenario FILE (format: scenarios/README.md) with real processes on\n"
            "  loopback addresses, the platform emulated by the chaos env, and writes its\n"
            "  results to DIR (default: results/<scenario name>-emu/). At most %d ranks.\n"
            "  --timeout: the whole run (default 300 s); past it the run fails.\n"
            "  Exit status: 0 all checks passed, 1 a check failed, 2 usage or a scenario\n"
            "  eccl-emu cannot run.\n",
            argv0, ECCL_EMU_MAX_RANKS);
    return help ? 0 : 2;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (eccl_auth_job_secret() != ECCL_OK) { /* every process of the run inherits it */
        fprintf(stderr, "eccl-emu: cannot make the job's secret\n");
        return 1;
    }
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) return usage(argv[0], 1);
    if (argc < 3 || strcmp(argv[1], "run") != 0) return usage(argv[0], 0);
    const char *file = argv[2], *out = NULL;
    int have_seed = 0;
    uint64_t seed = 0;
    eccl_scn_emu_options o = {.timeout_s = 300};
    for (int i = 3; i < argc; i++) {
        long x;
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            if (eccl_scn_parse_u64(argv[++i], &seed)) {
                fprintf(stderr, "eccl-emu: --seed %s: want an unsigned 64-bit integer\n", argv[i]);
                return 2;
            }
            have_seed = 1;
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
            if (eccl_scn_parse_long(argv[++i], 1, 86400, &x)) return usage(argv[0], 0);
            o.timeout_s = (double)x;
        } else if (strcmp(argv[i], "--verbose") == 0) {
            o.verbose = 1;
        } else {
            return usage(argv[0], 0);
        }
    }
    /* The job's programs live next to this one (the build's bin/, or the
     * installed bindir). */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "eccl-emu: cannot find its own directory: %s\n", strerror(errno));
        return 2;
    }
    self[n] = '\0';
    o.bindir = dirname(self);

    eccl_scenario cfg;
    if (eccl_scn_parse(file, &cfg)) {
        eccl_scn_free(&cfg);
        return 2;
    }
    if (have_seed) cfg.seed = seed;
    else if (!cfg.have_seed) cfg.seed = 1;
    char outdir[PATH_MAX];
    if (out) snprintf(outdir, sizeof outdir, "%s", out);
    else snprintf(outdir, sizeof outdir, "results/%s-emu", cfg.name);
    char platform_path[PATH_MAX];
    if (eccl_results_mkdir(outdir) ||
        snprintf(platform_path, sizeof platform_path, "%s/platform.xml", outdir) >= (int)sizeof platform_path ||
        eccl_scn_write_platform(&cfg, platform_path)) {
        fprintf(stderr, "eccl-emu: cannot create %s: %s\n", outdir, strerror(errno));
        eccl_scn_free(&cfg);
        return 1;
    }
    const int rc = eccl_scn_emu_run(&cfg, file, outdir, &o);
    eccl_scn_free(&cfg);
    return rc;
}
