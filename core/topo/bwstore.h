/* The master's bandwidth store: measured bytes per second from one peer to
 * another, keyed by (source id, destination id), kept across
 * optimize_topology calls so that each call measures only the pairs it has
 * never measured (PCCL's "bandwidth store").
 *
 * An open-addressing hash table with linear probing and backward-shift
 * deletion: O(1) set and get, O(capacity) to forget a peer that left (once
 * per departure). Pure: no clock, no globals; keys are hashed with a fixed
 * mixer, so iteration order — which nothing depends on — is deterministic.
 */
#ifndef ECCL_CORE_TOPO_BWSTORE_H
#define ECCL_CORE_TOPO_BWSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "eccl.h"

typedef struct eccl_bw_entry {
    uint64_t src, dst; /* src == 0: empty slot (peer ids start at 1) */
    double bps;
} eccl_bw_entry;

typedef struct eccl_bw_store {
    eccl_bw_entry *slot;
    size_t cap;   /* a power of two, or 0 */
    size_t count;
} eccl_bw_store;

void eccl_bw_store_init(eccl_bw_store *s);
void eccl_bw_store_fini(eccl_bw_store *s);
/* Records src -> dst (overwrites). bps must be finite and > 0; src, dst
 * nonzero and different: else ECCL_ERR_INVALID_ARG. ECCL_ERR_NO_MEMORY when
 * the table cannot grow (the store is unchanged). */
eccl_result eccl_bw_store_set(eccl_bw_store *s, uint64_t src, uint64_t dst, double bps);
/* The measured bandwidth, or 0 when the pair was never measured. */
double eccl_bw_store_get(const eccl_bw_store *s, uint64_t src, uint64_t dst);
/* Forgets every pair from or to `id` (the peer left: a newcomer that reuses
 * nothing of it must be measured afresh). */
void eccl_bw_store_forget(eccl_bw_store *s, uint64_t id);
/* The solver's cost matrix for peers ids[0..n-1]: cost[i*n + j] = 1/bps of
 * ids[i] -> ids[j] (seconds per byte), +inf when unmeasured, 0 on the
 * diagonal (never read). */
void eccl_bw_store_costs(const eccl_bw_store *s, const uint64_t *ids, uint32_t n, double *cost);

#endif /* ECCL_CORE_TOPO_BWSTORE_H */
