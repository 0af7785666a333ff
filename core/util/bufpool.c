#include "util/bufpool.h"

#include <stdlib.h>

void eccl_bufpool_init(eccl_bufpool *p, const eccl_env *env)
{
    p->env = env;
    p->free_list = NULL;
}

eccl_buf *eccl_bufpool_get(eccl_bufpool *p, size_t bytes)
{
    eccl_buf **best = NULL;
    for (eccl_buf **b = &p->free_list; *b; b = &(*b)->next)
        if ((*b)->cap >= bytes && (!best || (*b)->cap < (*best)->cap)) best = b;
    if (best) {
        eccl_buf *b = *best;
        *best = b->next;
        return b;
    }
    eccl_buf *b = malloc(sizeof *b);
    if (!b) return NULL;
    b->cap = bytes ? bytes : 1;
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
        p->env->dev->free(p->env->dev_ctx, b->ptr);
        free(b);
    }
    p->free_list = NULL;
}
