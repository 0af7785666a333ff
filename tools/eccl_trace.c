/* eccl-trace analyze DIR [--plot FILE.png]: reads every rank's collective
 * trace in DIR (eccl-trace-*.txt, docs/trace.md) and says which collective
 * did not complete everywhere first, what each rank of its world was doing
 * (never posted it, posted and waits on whom, failed, done, or wrote no
 * trace at all) and the likely culprit; --plot draws every rank's calls on
 * one time line with gnuplot (trace_analyze.c). Exit status: 0 when every
 * traced call completed everywhere, 1 when one did not (the report says
 * which), 2 for a usage error or an unreadable directory. */
#include <stdio.h>
#include <string.h>

#include "trace_analyze.h"

static const char usage_text[] =
    "usage: eccl-trace analyze DIR [--plot FILE.png]\n"
    "  Reads every rank's collective trace in DIR (eccl-trace-*.txt, written where\n"
    "  ECCL_TRACE_DIR points; docs/trace.md) and prints the first call that did not\n"
    "  complete everywhere, what each rank was doing, and the likely culprit.\n"
    "  --plot FILE.png  every rank's calls on one time line (gnuplot)\n"
    "  Exit status: 0 all completed, 1 one did not, 2 usage error or no traces.\n";

static int usage(void)
{
    fputs(usage_text, stderr);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (argc < 3 || strcmp(argv[1], "analyze") != 0) return usage();
    const char *dir = argv[2], *png = NULL;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--plot") == 0 && i + 1 < argc) png = argv[++i];
        else return usage();
    }
    eccl_trace_verdict v;
    return eccl_trace_analyze(dir, png, stdout, &v);
}
