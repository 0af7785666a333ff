/* Logging through the env table. Lines above env->log_level are never
 * formatted, so disabled trace logging costs one comparison. */
#ifndef ECCL_CORE_UTIL_LOG_H
#define ECCL_CORE_UTIL_LOG_H

#include "env.h"

#if defined(__GNUC__)
#define ECCL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define ECCL_PRINTF(a, b)
#endif

void eccl_log_emit(const eccl_env *env, int level, const char *fmt, ...) ECCL_PRINTF(3, 4);

#define ECCL_LOG(env, level, ...)                                  \
    do {                                                           \
        if ((env)->log_level >= (level)) eccl_log_emit((env), (level), __VA_ARGS__); \
    } while (0)
#define ECCL_ERROR(env, ...) ECCL_LOG(env, ECCL_LOG_ERROR, __VA_ARGS__)
#define ECCL_WARN(env, ...) ECCL_LOG(env, ECCL_LOG_WARN, __VA_ARGS__)
#define ECCL_INFO(env, ...) ECCL_LOG(env, ECCL_LOG_INFO, __VA_ARGS__)
#define ECCL_DEBUG(env, ...) ECCL_LOG(env, ECCL_LOG_DEBUG, __VA_ARGS__)
#define ECCL_TRACE(env, ...) ECCL_LOG(env, ECCL_LOG_TRACE, __VA_ARGS__)

/* Evaluates an eccl_result expression; on failure logs where and jumps to
 * the function's single `fail:` label with `rc` set. */
#define ECCL_CHECK(env, expr)                                                  \
    do {                                                                       \
        rc = (expr);                                                           \
        if (rc != ECCL_OK) {                                                   \
            ECCL_DEBUG(env, "%s:%d: %s -> %s", __FILE__, __LINE__, #expr,      \
                       eccl_strerror(rc));                                     \
            goto fail;                                                         \
        }                                                                      \
    } while (0)

#endif
