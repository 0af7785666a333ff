/* eccl-diloco: the DiLoCo-shaped worker loop (diloco_loop.c) as a process,
 * the worker eccl-churn starts and kills. The loop runs until killed (or
 * until --stop-after-ms); one key=value line per event on stdout. */
#define _GNU_SOURCE
#include <eccl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diloco_loop.h"

static void usage(FILE *out, int status)
{
    fprintf(out,
            "usage: eccl-diloco --master HOST:PORT [--count ELEMENTS] [--step-ms MS]\n"
            "                   [--peer-timeout-ms MS] [--op-timeout-ms MS] [--wait-ms MS]\n"
            "                   [--stop-after-ms MS] [--corrupt-at REVISION]\n"
            "\n"
            "A DiLoCo-shaped worker: admit newcomers, sync the shared model, all-reduce\n"
            "the step's delta (checked element by element), advance the model; one\n"
            "'event=rev peer= revision= hash= ...' line per revision. Runs until killed.\n"
            "--corrupt-at R (tests only) flips one bit of the model at revision R.\n");
    exit(status);
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {
        {"master", required_argument, 0, 'm'},       {"count", required_argument, 0, 'c'},
        {"step-ms", required_argument, 0, 's'},      {"peer-timeout-ms", required_argument, 0, 'p'},
        {"op-timeout-ms", required_argument, 0, 'o'}, {"wait-ms", required_argument, 0, 'w'},
        {"stop-after-ms", required_argument, 0, 'a'}, {"corrupt-at", required_argument, 0, 'x'},
        {"help", no_argument, 0, 'h'},               {0, 0, 0, 0}};
    eccl_diloco_options o;
    eccl_diloco_options_init(&o);
    int ch;
    while ((ch = getopt_long(argc, argv, "m:c:s:p:o:w:a:x:h", longs, NULL)) != -1) {
        switch (ch) {
        case 'm': o.master = optarg; break;
        case 'c': o.count = strtoull(optarg, NULL, 0); break;
        case 's': o.step_ms = atoi(optarg); break;
        case 'p': o.peer_timeout_ms = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'o': o.op_timeout_ms = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'w': o.wait_ms = atoi(optarg); break;
        case 'a': o.stop_after_ms = strtod(optarg, NULL); break;
        case 'x': o.corrupt_at = strtoull(optarg, NULL, 0); break;
        case 'h': usage(stdout, 0); break;
        default: usage(stderr, 2);
        }
    }
    if (!o.master || o.count == 0 || o.step_ms < 0 || optind < argc) usage(stderr, 2);
    eccl_launch launch;
    eccl_launch_real(&launch);
    if (o.stop_after_ms > 0) o.stop_after_ms += launch.now_ms(NULL);
    return eccl_diloco_run(&launch, &o);
}
