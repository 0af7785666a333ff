#include "topo/bwstore.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64's finaliser over both ids: any fixed good mixer will do. */
static size_t slot_of(const eccl_bw_store *s, uint64_t src, uint64_t dst)
{
    uint64_t x = src * 0x9E3779B97F4A7C15ull ^ dst;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    return (size_t)x & (s->cap - 1);
}

void eccl_bw_store_init(eccl_bw_store *s) { memset(s, 0, sizeof *s); }

void eccl_bw_store_fini(eccl_bw_store *s)
{
    free(s->slot);
    memset(s, 0, sizeof *s);
}

static eccl_bw_entry *find(const eccl_bw_store *s, uint64_t src, uint64_t dst)
{
    if (!s->cap) return NULL;
    for (size_t i = slot_of(s, src, dst);; i = (i + 1) & (s->cap - 1)) {
        eccl_bw_entry *e = &s->slot[i];
        if (e->src == 0) return NULL;
        if (e->src == src && e->dst == dst) return e;
    }
}

/* Places an entry known to be absent (the table has a free slot). */
static void place(eccl_bw_store *s, const eccl_bw_entry *e)
{
    size_t i = slot_of(s, e->src, e->dst);
    while (s->slot[i].src) i = (i + 1) & (s->cap - 1);
    s->slot[i] = *e;
}

static eccl_result grow(eccl_bw_store *s)
{
    size_t cap = s->cap ? 2 * s->cap : 64;
    eccl_bw_entry *n = calloc(cap, sizeof *n);
    if (!n) return ECCL_ERR_NO_MEMORY;
    eccl_bw_store old = *s;
    s->slot = n;
    s->cap = cap;
    for (size_t i = 0; i < old.cap; i++)
        if (old.slot[i].src) place(s, &old.slot[i]);
    free(old.slot);
    return ECCL_OK;
}

eccl_result eccl_bw_store_set(eccl_bw_store *s, uint64_t src, uint64_t dst, double bps)
{
    if (!src || !dst || src == dst || !(bps > 0) || isinf(bps)) return ECCL_ERR_INVALID_ARG;
    eccl_bw_entry *e = find(s, src, dst);
    if (e) {
        e->bps = bps;
        return ECCL_OK;
    }
    /* Keep the load at most 1/2: probes stay short. */
    if (2 * (s->count + 1) > s->cap) {
        eccl_result rc = grow(s);
        if (rc != ECCL_OK) return rc;
    }
    place(s, &(eccl_bw_entry){src, dst, bps});
    s->count++;
    return ECCL_OK;
}

double eccl_bw_store_get(const eccl_bw_store *s, uint64_t src, uint64_t dst)
{
    const eccl_bw_entry *e = find(s, src, dst);
    return e ? e->bps : 0;
}

/* Backward-shift deletion: pull later members of the probe run into the
 * hole, so lookups never need tombstones. */
static void remove_at(eccl_bw_store *s, size_t hole)
{
    size_t mask = s->cap - 1;
    s->slot[hole].src = 0;
    for (size_t i = (hole + 1) & mask; s->slot[i].src; i = (i + 1) & mask) {
        size_t home = slot_of(s, s->slot[i].src, s->slot[i].dst);
        /* Movable iff its home is not in (hole, i] (cyclically). */
        if (((i - home) & mask) >= ((i - hole) & mask)) {
            s->slot[hole] = s->slot[i];
            s->slot[i].src = 0;
            hole = i;
        }
    }
    s->count--;
}

void eccl_bw_store_forget(eccl_bw_store *s, uint64_t id)
{
    /* A removal shifts later entries of its run into the hole: stay on the
     * slot until what sits there survives. Entries only ever move to an
     * earlier slot of their run, or (a run that wraps) from the front,
     * already swept, to the end: nothing unswept lands behind us. */
    for (size_t i = 0; i < s->cap;) {
        if (s->slot[i].src && (s->slot[i].src == id || s->slot[i].dst == id)) remove_at(s, i);
        else i++;
    }
}

void eccl_bw_store_costs(const eccl_bw_store *s, const uint64_t *ids, uint32_t n, double *cost)
{
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < n; j++) {
            double bps = i == j ? 0 : eccl_bw_store_get(s, ids[i], ids[j]);
            cost[(size_t)i * n + j] = i == j ? 0 : bps > 0 ? 1.0 / bps : INFINITY;
        }
    }
}
