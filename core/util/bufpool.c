#include "util/bufpool.h"

#include <stddef.h>
#include <stdlib.h>

/* A host pool's buffer: its bytes follow the header, aligned for any type. */
#define HOST_HEAD ((sizeof(eccl_buf) + _Alignof(max_align_t) - 1) & ~(_Alignof(max_align_t) - 1))

void eccl_bufpool_init(eccl_bufpool *p, const eccl_env *env)
{
    p->env = env;
    for (int k = 0; k < ECCL_BUFPOOL_BINS; k++) p->bins[k] = NULL;
}

static int bin_of(size_t bytes) { return bytes ? 63 - __builtin_clzll((unsigned long long)bytes) : 0; }

/* The smallest buffer of bin k with at least `bytes`, unlinked; the most
 * recently put of equal ones. */
static eccl_buf *bin_take(eccl_buf **head, size_t bytes)
{
    eccl_buf **best = NULL;
    for (eccl_buf **b = head; *b; b = &(*b)->next) {
        if ((*b)->cap < bytes || (best && (*b)->cap >= (*best)->cap)) continue;
        best = b;
        if ((*b)->cap == bytes) break;
    }
    if (!best) return NULL;
    eccl_buf *b = *best;
    *best = b->next;
    return b;
}

/* Best fit by size class: a pool that served many sizes (a sweep, a
 * stream of calls that return early, each with its kept copy and its
 * peers' early frames) holds over a hundred buffers, and one list scanned
 * whole per get was a hot spot of the small-call path at eight ranks. */
eccl_buf *eccl_bufpool_get(eccl_bufpool *p, size_t bytes)
{
    for (int k = bin_of(bytes); k < ECCL_BUFPOOL_BINS; k++) {
        eccl_buf *b = p->bins[k] ? bin_take(&p->bins[k], bytes) : NULL;
        if (b) return b;
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
    int k = bin_of(b->cap);
    b->next = p->bins[k];
    p->bins[k] = b;
}

void eccl_bufpool_fini(eccl_bufpool *p)
{
    for (int k = 0; k < ECCL_BUFPOOL_BINS; k++) {
        for (eccl_buf *b = p->bins[k], *n; b; b = n) {
            n = b->next;
            if (p->env) p->env->dev->free(p->env->dev_ctx, b->ptr);
            free(b);
        }
        p->bins[k] = NULL;
    }
}
