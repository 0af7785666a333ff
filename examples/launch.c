/* Helpers both worker loops (worker_loop.c, diloco_loop.c) share: no
 * system call, no global, so they run in the simulator too. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "worker_loop.h"

void eccl_launch_emit(const eccl_launch *L, int to_stderr, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    L->print(L->ctx, to_stderr, line);
}

uint64_t eccl_launch_hash_f32(const float *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        uint32_t w;
        memcpy(&w, &p[i], sizeof w);
        h = (h ^ w) * 1099511628211ull;
    }
    return h;
}
