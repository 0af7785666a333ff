/* eccl-run: mpirun for libeccl_mpi programs on one machine.
 *
 * Starts an eccl master in-process on 127.0.0.1 (a free port) and N copies
 * of the program with ECCL_MPI_MASTER, ECCL_MPI_SIZE and
 * ECCL_MPI_TIMEOUT_MS in their environment; their MPI_Init joins that
 * master and waits until all N are in. Then it only watches: the first copy
 * that fails (a non-zero status or a signal) is reported and the others
 * are stopped, as is everything once --timeout passes, so the launcher
 * never waits without bound. Every copy dies with the launcher
 * (PR_SET_PDEATHSIG).
 */
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "eccl.h"
#include "tool_util.h"

enum { EXIT_USAGE = 2, EXIT_CANNOT_RUN = 127 };

#define RUN_MAX_NP 4096
#define RUN_DEFAULT_TIMEOUT_S 600
/* 30 days, which also keeps the limit in milliseconds within the uint32
 * that eccl's op_timeout_ms holds. */
#define RUN_MAX_TIMEOUT_S (30u * 24 * 3600)

struct run_opts {
    uint64_t np;
    uint64_t timeout_s;
    char **prog_argv; /* the program and its arguments, NULL-terminated */
    int keep_going;   /* --keep-going: a failed process does not stop the others */
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: eccl-run -np N [--timeout S] [--keep-going] [--] PROGRAM [ARGS...]\n"
            "\n"
            "Runs N copies of PROGRAM, an MPI program linked with libeccl_mpi, on this\n"
            "machine as one MPI_COMM_WORLD of N ranks over eccl (an eccl master runs\n"
            "inside eccl-run on 127.0.0.1). PROGRAM is looked up in PATH unless it\n"
            "contains a '/'.\n"
            "\n"
            "  -np N, -n N, --np N  number of processes, 1..%d\n"
            "  --timeout S          stop every process after S seconds (default %d,\n"
            "                       at most %u)\n"
            "  --keep-going         a process that fails does not stop the others (for\n"
            "                       programs that survive lost ranks: MPI_ERRORS_RETURN\n"
            "                       and MPIX_Comm_shrink)\n"
            "  -h, --help           show this help\n"
            "\n"
            "Exit status: 0 when every process exits 0; otherwise the first failed\n"
            "process's exit status, or 128 + the signal that killed it (the others are\n"
            "then stopped: SIGTERM, SIGKILL %d ms later); 124 after --timeout; 127\n"
            "when PROGRAM cannot be run; 2 for a usage error; 1 when eccl-run itself\n"
            "fails. With --keep-going: the number of processes that failed (at most\n"
            "100), each reported as it ends, or 0.\n",
            RUN_MAX_NP, RUN_DEFAULT_TIMEOUT_S, RUN_MAX_TIMEOUT_S, TOOL_STOP_GRACE_MS);
}

__attribute__((format(printf, 1, 2)))
static int usage_error(const char *fmt, ...)
{
    va_list ap;

    fputs("eccl-run: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'eccl-run --help'.\n", stderr);
    return EXIT_USAGE;
}

/* Returns -1 to go on, otherwise the exit status. Options end at the first
 * argument that is not one (or at "--"): everything after belongs to the
 * program, so its own options need no quoting. */
static int parse_args(int argc, char **argv, struct run_opts *o)
{
    int i, np_set = 0;

    o->np = 0;
    o->timeout_s = RUN_DEFAULT_TIMEOUT_S;
    o->keep_going = 0;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-')
            break;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return EXIT_SUCCESS;
        }
        if (strcmp(a, "-np") == 0 || strcmp(a, "-n") == 0 || strcmp(a, "--np") == 0) {
            if (i + 1 >= argc)
                return usage_error("%s needs an argument", a);
            if (tool_parse_u64(argv[++i], 1, RUN_MAX_NP, &o->np) != 0)
                return usage_error("%s wants a process count in 1..%d, got '%s'", a, RUN_MAX_NP,
                                   argv[i]);
            np_set = 1;
        } else if (strcmp(a, "--keep-going") == 0) {
            o->keep_going = 1;
        } else if (strcmp(a, "--timeout") == 0) {
            if (i + 1 >= argc)
                return usage_error("%s needs an argument", a);
            if (tool_parse_u64(argv[++i], 1, RUN_MAX_TIMEOUT_S, &o->timeout_s) != 0)
                return usage_error("--timeout wants seconds in 1..%u, got '%s'",
                                   RUN_MAX_TIMEOUT_S, argv[i]);
        } else {
            return usage_error("unknown option '%s'", a);
        }
    }
    if (!np_set)
        return usage_error("-np N is required");
    if (i >= argc)
        return usage_error("no program to run");
    o->prog_argv = &argv[i];
    return -1;
}

/* The signal that asked eccl-run to stop, for tool_reap; any thread (the
 * master's included) may run the handler. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    stop_signal = sig;
}

static int install_stop_handlers(void)
{
    static const int signals[] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction sa;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
        if (sigaction(signals[i], &sa, NULL) != 0)
            return -1;
    return 0;
}

static int eccl_failed(eccl_result r, const char *what)
{
    if (r == ECCL_OK)
        return 0;
    fprintf(stderr, "eccl-run: %s: %s\n", what, eccl_strerror(r));
    return 1;
}

/* The environment every copy inherits: how to reach the master, how many
 * ranks to wait for, and the job's limit (their collectives' timeout). */
static int export_job(const char *master_addr, const struct run_opts *o)
{
    char size[24], timeout_ms[24];

    snprintf(size, sizeof size, "%llu", (unsigned long long)o->np);
    snprintf(timeout_ms, sizeof timeout_ms, "%llu", (unsigned long long)o->timeout_s * 1000u);
    if (setenv("ECCL_MPI_MASTER", master_addr, 1) != 0 || setenv("ECCL_MPI_SIZE", size, 1) != 0 ||
        setenv("ECCL_MPI_TIMEOUT_MS", timeout_ms, 1) != 0) {
        perror("eccl-run: setenv");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct run_opts opts;
    eccl_master *master = NULL;
    char addr[256];
    pid_t *pids = NULL;
    int status;

    /* First thing: a shell starts background jobs with SIGINT ignored, so
     * until the handler is in, an interrupt would be lost. SIGPIPE keeps
     * its default: the library never raises it on its sockets
     * (MSG_NOSIGNAL), and an ignored disposition would be inherited by the
     * programs through exec. */
    if (install_stop_handlers() != 0) {
        perror("eccl-run: sigaction");
        return EXIT_FAILURE;
    }
    status = parse_args(argc, argv, &opts);
    if (status >= 0)
        return status;
    status = EXIT_FAILURE;
    if (eccl_auth_job_secret() != ECCL_OK) { /* the programs inherit it */
        fprintf(stderr, "eccl-run: cannot make the job's secret\n");
        return EXIT_FAILURE;
    }
    pids = calloc(opts.np, sizeof *pids);
    if (pids == NULL) {
        perror("eccl-run: calloc");
        return EXIT_FAILURE;
    }
    if (eccl_failed(eccl_master_create("127.0.0.1:0", &master), "creating the master")) {
        free(pids);
        return EXIT_FAILURE;
    }
    /* The environment is set before the master's thread starts: setenv is
     * not safe with other threads about. */
    if (eccl_failed(eccl_master_address(master, addr, sizeof addr), "reading the master address") ||
        export_job(addr, &opts) != 0 || eccl_failed(eccl_master_run(master), "starting the master"))
        goto out;
    if (tool_spawn("eccl-run", opts.prog_argv[0], opts.prog_argv, 1, pids, opts.np) != 0) {
        status = EXIT_CANNOT_RUN;
        goto out;
    }
    status = tool_reap("eccl-run", pids, opts.np, opts.timeout_s * 1000u, opts.keep_going,
                       &stop_signal);
out:
    if (eccl_master_stop(master) != ECCL_OK && status == EXIT_SUCCESS)
        status = EXIT_FAILURE;
    eccl_master_destroy(master);
    free(pids);
    return status;
}
