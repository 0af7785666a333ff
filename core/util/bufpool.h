/* A cache of device staging buffers, so the all-reduce path does not
 * allocate once warmed up: backups for restore-on-abort and staging slices. */
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

void eccl_bufpool_init(eccl_bufpool *p, const eccl_env *env);
/* The smallest cached buffer of at least `bytes`, or a new one. */
eccl_buf *eccl_bufpool_get(eccl_bufpool *p, size_t bytes);
void eccl_bufpool_put(eccl_bufpool *p, eccl_buf *b);
void eccl_bufpool_fini(eccl_bufpool *p);

#endif
