/* eccl-worker: the PCCL-style training loop as a process.
 *
 * The loop itself lives in worker_loop.c, written against eccl.h and the
 * launch interface only, so that tests/sim/sim_worker.c runs the very same
 * loop as SimGrid actors. This file parses the command line; the process
 * launch is launch_real.c. One line per event on stdout, as key=value pairs.
 */
#define _GNU_SOURCE
#include <eccl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker_loop.h"

/* --help asks for the text: stdout and success; a bad command line: stderr, 2. */
static void usage(const char *argv0, FILE *out, int status)
{
    fprintf(out,
            "usage: %s --master HOST:PORT [--count ELEMENTS] [--iters N] [--world-min N]\n"
            "          [--start-world N] [--group G] [--wait-ms MS] [--optimize-at ITER]\n"
            "          [--rejoins N] [--step-ms MS] [--peer-timeout-ms MS] [--op-timeout-ms MS]\n"
            "          [--stall-at ITER --stall-ms MS]\n"
            "--master may list fallbacks, RELAY,MASTER: a worker whose relay (or master)\n"
            "dies joins again through the next one, up to --rejoins times (default 0)\n",
            argv0);
    exit(status);
}

static void parse(int argc, char **argv, eccl_worker_options *o)
{
    static const struct option longs[] = {
        {"master", required_argument, 0, 'm'}, {"count", required_argument, 0, 'c'},
        {"iters", required_argument, 0, 'i'},  {"world-min", required_argument, 0, 'w'},
        {"group", required_argument, 0, 'g'},  {"wait-ms", required_argument, 0, 't'},
        {"start-world", required_argument, 0, 's'}, {"optimize-at", required_argument, 0, 'o'},
        {"rejoins", required_argument, 0, 'r'}, {"step-ms", required_argument, 0, 'S'},
        {"peer-timeout-ms", required_argument, 0, 'T'}, {"op-timeout-ms", required_argument, 0, 'O'},
        {"stall-at", required_argument, 0, 'a'}, {"stall-ms", required_argument, 0, 'A'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    *o = (eccl_worker_options){.count = 1u << 20, .iters = 10, .world_min = 2, .wait_ms = 30000};
    int ch;
    while ((ch = getopt_long(argc, argv, "m:c:i:w:s:g:t:o:r:S:T:O:a:A:h", longs, NULL)) != -1) {
        switch (ch) {
        case 'm': o->master = optarg; break;
        case 'c': o->count = strtoull(optarg, NULL, 0); break;
        case 'i': o->iters = atoi(optarg); break;
        case 'w': o->world_min = atoi(optarg); break;
        case 's': o->start_world = atoi(optarg); break;
        case 'g': o->group = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 't': o->wait_ms = atoi(optarg); break;
        case 'o': o->optimize_at = atoi(optarg); break;
        case 'r': o->rejoins = atoi(optarg); break;
        case 'S': o->step_ms = atoi(optarg); break;
        case 'T': o->peer_timeout_ms = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'O': o->op_timeout_ms = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'a': o->stall_at = atoi(optarg); break;
        case 'A': o->stall_ms = atoi(optarg); break;
        case 'h': usage(argv[0], stdout, 0); break;
        default: usage(argv[0], stderr, 2);
        }
    }
    if (!o->master || o->count == 0 || o->iters < 0 || o->world_min < 1 || o->step_ms < 0 ||
        o->stall_ms < 0 || o->stall_at < 0)
        usage(argv[0], stderr, 2);
}

int main(int argc, char **argv)
{
    eccl_worker_options o;
    parse(argc, argv, &o);
    eccl_launch launch;
    eccl_launch_real(&launch);
    return eccl_worker_run(&launch, &o);
}
