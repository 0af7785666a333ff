/* A map from nonzero 64-bit keys to pointers: open addressing, linear
 * probing, backward-shift deletion. net_sg finds conns, envs and listener
 * addresses in O(1) with it (the master's env has one conn per rank, so a
 * list walk per delivered message made large worlds quadratic). Lookups
 * only: nothing iterates it, so the order of its slots never reaches the
 * simulation (determinism). */
#ifndef ECCL_BACKENDS_SIM_IDMAP_H
#define ECCL_BACKENDS_SIM_IDMAP_H

#include <stdint.h>
#include <stdlib.h>

typedef struct sg_idmap_slot {
    uint64_t key; /* 0 = empty */
    void *val;
} sg_idmap_slot;

typedef struct sg_idmap {
    sg_idmap_slot *slot;
    size_t cap; /* a power of two, or 0 */
    size_t len;
} sg_idmap;

static inline size_t sg_idmap_hash(uint64_t k, size_t cap)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k & (cap - 1);
}

static inline void *sg_idmap_get(const sg_idmap *m, uint64_t key)
{
    if (!m->cap || !key) return NULL;
    for (size_t i = sg_idmap_hash(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->slot[i].key == key) return m->slot[i].val;
        if (m->slot[i].key == 0) return NULL;
    }
}

static inline int sg_idmap_put(sg_idmap *m, uint64_t key, void *val);

static inline int sg_idmap_grow(sg_idmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    sg_idmap_slot *old = m->slot;
    size_t ocap = m->cap;
    m->slot = calloc(cap, sizeof *m->slot);
    if (!m->slot) {
        m->slot = old;
        return -1;
    }
    m->cap = cap;
    m->len = 0;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].key) sg_idmap_put(m, old[i].key, old[i].val);
    free(old);
    return 0;
}

/* Inserts or replaces. -1 when out of memory. */
static inline int sg_idmap_put(sg_idmap *m, uint64_t key, void *val)
{
    if (!key) return -1;
    if ((m->len + 1) * 2 > m->cap && sg_idmap_grow(m)) return -1;
    for (size_t i = sg_idmap_hash(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->slot[i].key == key) {
            m->slot[i].val = val;
            return 0;
        }
        if (m->slot[i].key == 0) {
            m->slot[i].key = key;
            m->slot[i].val = val;
            m->len++;
            return 0;
        }
    }
}

static inline void sg_idmap_del(sg_idmap *m, uint64_t key)
{
    if (!m->cap || !key) return;
    size_t mask = m->cap - 1, i = sg_idmap_hash(key, m->cap);
    while (m->slot[i].key != key) {
        if (m->slot[i].key == 0) return;
        i = (i + 1) & mask;
    }
    /* Backward shift: move later members of the probe run into the gap. */
    for (size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
        if (m->slot[j].key == 0) break;
        size_t h = sg_idmap_hash(m->slot[j].key, m->cap);
        /* j's home h lies cyclically in (i, j]: it stays. */
        if (i <= j ? (i < h && h <= j) : (i < h || h <= j)) continue;
        m->slot[i] = m->slot[j];
        i = j;
    }
    m->slot[i].key = 0;
    m->slot[i].val = NULL;
    m->len--;
}

static inline void sg_idmap_free(sg_idmap *m)
{
    free(m->slot);
    m->slot = NULL;
    m->cap = m->len = 0;
}

/* FNV-1a, never 0: a string key for the map. */
static inline uint64_t sg_idmap_strkey(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h ? h : 1;
}

#endif /* ECCL_BACKENDS_SIM_IDMAP_H */
