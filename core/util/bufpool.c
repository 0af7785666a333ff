#include "util/bufpool.h"

#include <stddef.h>
#include <stdlib.h>

/* A host pool's buffer: its bytes follow the header, aligned for any type. */
#define HOST_HEAD ((sizeof(eccl_buf) + _Alignof(max_align_t) - 1) & ~(_Alignof(max_align_t) - 1))

void eccl_bufpool_init(eccl_bufpool *p, const eccl_env *env)
{
    p->env = env;
    p->free_list = NULL;
}

/* Best fit, the most recently put of equal ones; an exact fit ends the
 * search. A pool that served many sizes (a sweep; a stream of calls that
 * return early, each with its kept copy and its peers' early frames) holds
 * over a hundred buffers, and scanning them all per get was a hot spot of
 * small calls at eight ranks (140 buffers looked at per get; with the stop,
 * 1.8: a call's sizes recur, and what it put back lies near the head). */
eccl_buf *eccl_bufpool_get(eccl_bufpool *p, size_t bytes)
{
    eccl_buf **best = NULL;
    for (eccl_buf **b = &p->free_list; *b; b = &(*b)->next) {
        if ((*b)->cap < bytes || (best && (*b)->cap >= (*best)->cap)) continue;
        best = b;
        if ((*b)->cap == bytes) break;
    }
    if (best) {
        eccl_buf *b = *best;
        *best = b->next;
        return b;
    }
    size_t cap = bytes ? bytes : 1;
    if (!p->env) {
        eccl_buf *b = malloc(HOST_HEAD + cap);
        if (!b) return NULL;
        b->cap = cap;
        b->ptr = (char *)b + HOST_HEAD;
        return b;
    }
    eccl_buf *b = malloc(sizeof *b);
    if (!b) return NULL;
    b->cap = cap;
    if (p->env->dev->alloc(p->env->dev_ctx, b->cap, &b->ptr) != ECCL_OK) {
        free(b);
        return NULL;
    }
    return b;
}

void eccl_bufpool_put(eccl_bufpool *p, eccl_buf *b)
{
    if (!b) return;
    b->next = p->free_list;
    p->free_list = b;
}

void eccl_bufpool_fini(eccl_bufpool *p)
{
    for (eccl_buf *b = p->free_list, *n; b; b = n) {
        n = b->next;
        if (p->env) p->env->dev->free(p->env->dev_ctx, b->ptr);
        free(b);
    }
    p->free_list = NULL;
}
