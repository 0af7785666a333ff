/* The process launch of the worker loops (eccl-worker, eccl-diloco). */
#define _GNU_SOURCE
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "worker_loop.h"

static eccl_result real_comm_create(void *ctx, const eccl_comm_params *params, eccl_comm **out)
{
    (void)ctx;
    return eccl_comm_create(params, out);
}

static void real_sleep_ms(void *ctx, int ms)
{
    (void)ctx;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double real_now_ms(void *ctx)
{
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void real_print(void *ctx, int to_stderr, const char *line)
{
    (void)ctx;
    fprintf(to_stderr ? stderr : stdout, "%s\n", line);
}

void eccl_launch_real(eccl_launch *L)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* one event per line, as it happens */
    *L = (eccl_launch){
        .comm_create = real_comm_create,
        .sleep_ms = real_sleep_ms,
        .now_ms = real_now_ms,
        .print = real_print,
        .pid = (int)getpid(),
    };
}
