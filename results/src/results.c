/* The one writer of run outputs (results/README.md): the output folder, its
 * TSV files, times as the TSVs spell them, and plot.png rendered from
 * plot.gp by gnuplot. Used by eccl-sim; its messages name the program. */
#define _GNU_SOURCE /* program_invocation_short_name */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "results.h"

int eccl_results_mkdir(const char *dir)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0777) && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) && errno != EEXIST) return -1;
    struct stat st;
    return stat(buf, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

FILE *eccl_results_open(const char *dir, const char *name)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return NULL;
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "%s: cannot write %s: %s\n", program_invocation_short_name, path, strerror(errno));
    return f;
}

void eccl_results_fmt_time(char *buf, size_t size, uint64_t ns)
{
    snprintf(buf, size, "%llu.%09llu", (unsigned long long)(ns / 1000000000u),
             (unsigned long long)(ns % 1000000000u));
}

/* 0 rendered, 1 gnuplot missing, -1 gnuplot failed. */
static int render_plot(const char *dir)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (chdir(dir) != 0) _exit(126);
        execlp("gnuplot", "gnuplot", "plot.gp", (char *)NULL);
        _exit(errno == ENOENT ? 127 : 126);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) return -1;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 127) return 1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Renders plot.png from plot.gp; what the summary says of it. A gnuplot
 * that is missing is not an error; one that fails is (*io_err). */
const char *eccl_results_plot_png(const char *outdir, int *io_err)
{
    int pr = render_plot(outdir);
    if (pr == 1) {
        fprintf(stderr, "%s: gnuplot not found: skipping plot.png (install gnuplot-nox)\n",
                program_invocation_short_name);
        return "skipped";
    }
    if (pr < 0) {
        fprintf(stderr, "%s: gnuplot failed on %s/plot.gp\n", program_invocation_short_name, outdir);
        *io_err = 1;
        return "failed";
    }
    return "plot.png";
}
