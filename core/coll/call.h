/* One collective call as every algorithm sees it: what the caller asked
 * for, and the epoch and position it runs in. The request keeps one and
 * hands a copy to the algorithm it picks (comm.c, op_start). */
#ifndef ECCL_CORE_COLL_CALL_H
#define ECCL_CORE_COLL_CALL_H

#include <stddef.h>
#include <stdint.h>

#include "env.h"

/* Which collective. */
typedef enum eccl_coll_kind {
    ECCL_COLL_ALLREDUCE = 0,
    ECCL_COLL_ALLGATHER,      /* count: elements each rank contributes */
    ECCL_COLL_REDUCE_SCATTER, /* count: elements each rank receives */
    ECCL_COLL_BROADCAST,      /* count: the buffer; root's sendbuf to all */
    ECCL_COLL_REDUCE,         /* count: the buffer; the result at root only */
    ECCL_COLL_ALLTOALL,       /* count: elements of each block (see svcounts) */
    ECCL_COLL_SEND,           /* count: the buffer; root: the receiving rank */
    ECCL_COLL_RECV,           /* count: the buffer; root: the sending rank */
    ECCL_COLL_KIND_COUNT
} eccl_coll_kind;

typedef struct eccl_coll_call {
    const eccl_env *env;
    eccl_coll_kind kind;
    uint32_t root;        /* broadcast and reduce */
    uint64_t tag;
    uint32_t epoch;
    const uint8_t *sendbuf;
    uint8_t *recvbuf;
    size_t count;         /* all-gather(v), reduce-scatter(v): see vcounts */
    /* The v layouts (all-gatherv, reduce-scatterv; NULL otherwise): block b
     * has vcounts[b] elements at element vdispls[b] of the blocks (the
     * all-gather's output, the reduce-scatter's input, where they are the
     * blocks' running sum). count is then the sum of vcounts. */
    const size_t *vcounts, *vdispls;
    /* All-to-allv: vcounts / vdispls lay out the receive blocks (block i
     * from rank i), svcounts / svdispls the send blocks (block j to rank
     * j); count is then the receive blocks' total. NULL: uniform blocks of
     * count elements. */
    const size_t *svcounts, *svdispls;
    eccl_dtype dtype;
    eccl_op op;
    eccl_quant_type quant; /* ECCL_QUANT_NONE: exact values (ring only otherwise) */
    /* Nonzero: the call belongs to the ring of this epoch
     * (eccl_allreduce_opts.ring_epoch); another ring fails it at its start. */
    uint64_t ring_epoch;
    /* Nonzero: sendbuf and recvbuf are memory of CUDA device `device`, and
     * the call runs the device-resident ring (ring_allreduce.h; plain, ring
     * only). Zero (the default of any initialiser): host memory. */
    int on_device;
    int device;
    uint32_t rank, nranks;
    /* Ranks per host when the epoch's world is host-regular (ranks of a
     * host contiguous, L >= 2 each, two hosts or more), else 0: where the
     * hierarchical all-reduce (coll/hier_allreduce.h) may run. */
    uint32_t local_size;
} eccl_coll_call;

/* The call's device ops on its bytes (host memory, or a device call's host
 * mirror): a copy, and dst = dst op src over whole elements. Nothing for an
 * empty range. */
static inline void eccl_coll_copy(const eccl_coll_call *c, void *dst, const void *src, size_t bytes)
{
    if (bytes) c->env->dev->copy(c->env->dev_ctx, dst, src, bytes);
}

static inline void eccl_coll_reduce(const eccl_coll_call *c, void *dst, const void *src, size_t bytes)
{
    if (bytes) c->env->dev->reduce(c->env->dev_ctx, dst, src, bytes / eccl_dtype_size(c->dtype), c->dtype, c->op);
}

/* Whether in_bytes of sendbuf and out_bytes of recvbuf share any byte. */
static inline int eccl_coll_overlaps(const eccl_coll_call *c, size_t in_bytes, size_t out_bytes)
{
    uintptr_t s = (uintptr_t)c->sendbuf, r = (uintptr_t)c->recvbuf;
    return c->sendbuf && in_bytes && out_bytes && s < r + out_bytes && r < s + in_bytes;
}

/* The backup of an output range, before its first write, and putting it
 * back after a failure. `backup` is NULL for a call whose input and output
 * do not overlap (comm/ops.c): its input is intact, which is all a retry
 * reads, and its output after a failure is unspecified (eccl.h), so it
 * pays for no copy. In place, the output is the retry's input: it is put
 * back bit for bit. */
static inline void eccl_coll_save(const eccl_coll_call *c, uint8_t *backup, size_t at, size_t bytes)
{
    if (backup) eccl_coll_copy(c, backup + at, c->recvbuf + at, bytes);
}

static inline void eccl_coll_put_back(const eccl_coll_call *c, const uint8_t *backup, size_t at, size_t bytes)
{
    if (backup) eccl_coll_copy(c, c->recvbuf + at, backup + at, bytes);
}

#endif /* ECCL_CORE_COLL_CALL_H */
