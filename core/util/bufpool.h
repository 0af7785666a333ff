/* A cache of buffers, so the call path does not allocate once warmed up:
 * the env's staging memory (backups for restore-on-abort, staging slices)
 * or, in a pool without an env, host memory (the ops' algorithm states). */
#ifndef ECCL_CORE_UTIL_BUFPOOL_H
#define ECCL_CORE_UTIL_BUFPOOL_H

#include "env.h"

typedef struct eccl_buf {
    struct eccl_buf *next;
    void *ptr;
    size_t cap;
} eccl_buf;

typedef struct eccl_bufpool {
    const eccl_env *env;
    eccl_buf *free_list;
} eccl_bufpool;

/* env NULL: host memory, header and bytes in one allocation, aligned for
 * any type. */
void eccl_bufpool_init(eccl_bufpool *p, const eccl_env *env);
/* The smallest cached buffer of at least `bytes`, or a new one. */
eccl_buf *eccl_bufpool_get(eccl_bufpool *p, size_t bytes);
void eccl_bufpool_put(eccl_bufpool *p, eccl_buf *b);
void eccl_bufpool_fini(eccl_bufpool *p);

#endif
