/* eccl-results compare A B [--out DIR]: two runs' folders side by side
 * (results/src/compare.h, results/README.md). Exit 0 when it could compare,
 * whatever the values say; 2 on bad input (usage, a missing folder, no
 * summary.tsv, a malformed TSV: the file and line are named); 1 when an
 * output could not be written. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "compare.h"

static int usage(FILE *f, int status)
{
    fputs("usage: eccl-results compare A B [--out DIR]\n"
          "\n"
          "Prints the keys of A's and B's summary.tsv side by side, with B/A for\n"
          "numbers and same / DIFFERENT for the verdicts (checks, survivors,\n"
          "killed, joined); event counts of events.tsv as events:KIND; bench.tsv's\n"
          "rows paired by size where both have one. A and B are run folders of\n"
          "eccl-sim, eccl-emu, eccl-bench --out or eccl-churn --out.\n"
          "\n"
          "  --out DIR   also write DIR/compare.tsv and DIR/compare.gp / compare.png\n"
          "  -h, --help  show this help\n",
          f);
    return status;
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {{"out", required_argument, 0, 'o'}, {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
    const char *out = NULL;
    int ch;
    while ((ch = getopt_long(argc, argv, "+h", longs, NULL)) != -1) {
        if (ch == 'h') return usage(stdout, 0);
        return usage(stderr, 2);
    }
    /* The command first; its options may follow the folders. */
    if (optind >= argc || strcmp(argv[optind], "compare") != 0) return usage(stderr, 2);
    optind++;
    const char *dirs[2];
    int ndirs = 0;
    while (optind < argc) {
        ch = getopt_long(argc, argv, "+h", longs, NULL);
        if (ch == 'o') out = optarg;
        else if (ch == 'h') return usage(stdout, 0);
        else if (ch != -1) return usage(stderr, 2);
        else if (ndirs == 2) return usage(stderr, 2);
        else dirs[ndirs++] = argv[optind++];
    }
    if (ndirs != 2) return usage(stderr, 2);

    eccl_results_run a = {0}, b = {0};
    char why[512];
    int status = 2;
    if (eccl_results_run_load(dirs[0], &a, why, sizeof why) != 0 ||
        eccl_results_run_load(dirs[1], &b, why, sizeof why) != 0) {
        fprintf(stderr, "eccl-results: %s\n", why);
    } else {
        eccl_results_pick_labels(&a, &b);
        status = eccl_results_compare(&a, &b, stdout, out) == 0 ? 0 : 1;
    }
    eccl_results_run_free(&a);
    eccl_results_run_free(&b);
    return status;
}
