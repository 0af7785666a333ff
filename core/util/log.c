#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>

void eccl_log_emit(const eccl_env *env, int level, const char *fmt, ...)
{
    /* The backend prefixes env->name and the time. */
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    env->log->write(env->log_ctx, level, line);
}
