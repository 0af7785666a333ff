/* eccl-master: runs one eccl master (coordinator), or with --relay one
 * relay of the coordinator's tree, until SIGINT or SIGTERM; SIGUSR2 asks
 * every member for its collective trace.
 *
 * The bound address is printed on stdout so that a launcher can start the
 * master on port 0 and read back the port it got. */
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eccl.h"
#include "metrics_http.h"
#include "tool_util.h"

enum { EXIT_USAGE = 2 };

static void usage(FILE *out)
{
    fprintf(out,
            "usage: eccl-master --listen HOST:PORT [--relay PARENT] [--quiet]\n"
            "\n"
            "Runs an eccl master until SIGINT or SIGTERM. On SIGUSR2 every member\n"
            "writes its collective trace where ECCL_TRACE_DIR points (docs/trace.md).\n"
            "\n"
            "  -l, --listen HOST:PORT  address to bind; PORT 0 picks a free port\n"
            "  -r, --relay PARENT      run a relay instead: peers connect to it as to\n"
            "                          the master, it speaks for them to PARENT (the\n"
            "                          master or another relay, HOST:PORT)\n"
            "  -m, --metrics HOST:PORT serve the master's metrics (Prometheus text)\n"
            "                          at http://HOST:PORT/metrics; PORT 0 picks a\n"
            "                          free port (printed); off by default\n"
            "  -q, --quiet             print nothing but errors (not even the\n"
            "                          'eccl-master listening on' line)\n"
            "  -h, --help              show this help\n");
}

__attribute__((format(printf, 1, 2)))
static int usage_error(const char *fmt, ...)
{
    va_list ap;

    fputs("eccl-master: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'eccl-master --help'.\n", stderr);
    return EXIT_USAGE;
}

struct master_opts {
    const char *listen;
    const char *relay;
    const char *metrics;
    int quiet;
};

/* Returns -1 to continue, otherwise the exit status. */
static int parse_args(int argc, char **argv, struct master_opts *opts)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"relay", required_argument, NULL, 'r'},
        {"metrics", required_argument, NULL, 'm'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":l:r:m:qh", longopts, NULL)) != -1) {
        switch (c) {
        case 'l':
            opts->listen = optarg;
            break;
        case 'r':
            opts->relay = optarg;
            break;
        case 'm':
            opts->metrics = optarg;
            break;
        case 'q':
            opts->quiet = 1;
            break;
        case 'h':
            usage(stdout);
            return EXIT_SUCCESS;
        case ':':
            return usage_error("%s needs an argument", argv[optind - 1]);
        default:
            if (optopt != 0)
                return usage_error("unknown option '-%c'", optopt);
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (opts->listen == NULL)
        return usage_error("--listen HOST:PORT is required");
    if (tool_check_hostport(opts->listen) != 0)
        return usage_error("--listen wants HOST:PORT, got '%s'", opts->listen);
    if (opts->relay && tool_check_hostport(opts->relay) != 0)
        return usage_error("--relay wants HOST:PORT, got '%s'", opts->relay);
    if (opts->metrics && opts->relay)
        return usage_error("--metrics is the master's: a relay has none of its own");
    return -1;
}

static int fail(const char *what, eccl_result r)
{
    fprintf(stderr, "eccl-master: %s: %s\n", what, eccl_strerror(r));
    return EXIT_FAILURE;
}

int main(int argc, char **argv)
{
    struct master_opts opts = {0};
    eccl_master *master = NULL;
    eccl_relay *relay = NULL;
    metrics_http *metrics = NULL;
    char addr[256];
    sigset_t stop_signals;
    eccl_result r;
    int status, sig;

    status = parse_args(argc, argv, &opts);
    if (status >= 0)
        return status;

    /* Blocked before the master exists so that its progress thread inherits
     * the mask: the signals must reach sigwait below, not kill the process
     * halfway through a frame. */
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGUSR2); /* not a stop: every member writes its trace */
    if (pthread_sigmask(SIG_BLOCK, &stop_signals, NULL) != 0) {
        fputs("eccl-master: cannot block SIGINT/SIGTERM/SIGUSR2\n", stderr);
        return EXIT_FAILURE;
    }
    /* A peer that vanishes mid-write must cost a connection, not the master. */
    signal(SIGPIPE, SIG_IGN);

    if (opts.relay) {
        r = eccl_relay_create(opts.listen, opts.relay, &relay);
        if (r != ECCL_OK)
            return fail("creating the relay", r);
        r = eccl_relay_run(relay);
        if (r == ECCL_OK)
            r = eccl_relay_address(relay, addr, sizeof addr);
    } else {
        r = eccl_master_create(opts.listen, &master);
        if (r != ECCL_OK)
            return fail("creating the master", r);
        r = eccl_master_run(master);
        if (r == ECCL_OK)
            r = eccl_master_address(master, addr, sizeof addr);
    }
    if (r != ECCL_OK) {
        status = fail("starting", r);
        goto out;
    }
    if (!opts.quiet) {
        printf("eccl-master %slistening on %s\n", relay ? "relay " : "", addr);
        fflush(stdout);
    }
    if (opts.metrics) {
        unsigned port = 0;
        if (metrics_http_start(opts.metrics, master, &metrics, &port) != 0) {
            status = EXIT_FAILURE;
            goto out;
        }
        if (!opts.quiet) {
            printf("eccl-master metrics on http://%.*s:%u/metrics\n",
                   (int)(strrchr(opts.metrics, ':') - opts.metrics), opts.metrics, port);
            fflush(stdout);
        }
    }

    for (;;) {
        if (sigwait(&stop_signals, &sig) != 0) {
            fputs("eccl-master: sigwait failed; stopping\n", stderr);
            break;
        }
        if (sig != SIGUSR2)
            break;
        if (master) {
            r = eccl_master_trace_all(master);
            fprintf(stderr, "eccl-master: SIGUSR2: %s\n",
                    r == ECCL_OK ? "asked every member for its collective trace" : eccl_strerror(r));
        } else {
            fputs("eccl-master: SIGUSR2: a relay has no members of its own to ask; signal the master\n",
                  stderr);
        }
    }

    r = relay ? eccl_relay_stop(relay) : eccl_master_stop(master);
    status = r == ECCL_OK ? EXIT_SUCCESS : fail("stopping", r);
out:
    metrics_http_stop(metrics);
    eccl_relay_destroy(relay);
    eccl_master_destroy(master);
    return status;
}
