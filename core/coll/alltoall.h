/* All-to-all(v) by pairwise exchange over peer links (ECCL_ALGO_PAIRWISE).
 *
 * Rank i's send block j goes to rank j and lands as its receive block i.
 * Every rank sends each peer its block directly, over the peer link to that
 * rank (coll/algo.h, ECCL_ROLE_PEER), in 1 MiB slices, peers visited from
 * rank+1 round to rank-1 so that at any moment the ranks load different
 * links; its own block is a local copy. Links open lazily: a link that is
 * not up yet simply holds its frames back.
 *
 * Completion: once a rank holds every block of its output it sends an
 * empty done token to every peer, and it returns only when it has the
 * tokens of every peer: then every rank is known to hold its output, so
 * the master's "commit iff every survivor holds it" never contradicts a
 * rank that returned. One round on links that exist anyway, where the
 * ring's done tokens would cost N-1 hops.
 *
 * Layouts: uniform (count elements per block, block j at j * count), or v:
 * send block j has scounts[j] elements at element sdispls[j] of sendbuf,
 * receive block i rcounts[i] at rdispls[i] of recvbuf. Rank i's scounts[j]
 * must equal rank j's rcounts[i]; a peer that sends more, or sends its done
 * token before its whole block, breaks the op as a malformed frame.
 * Buffers that overlap (in place; a device call's mirror) send from a copy
 * of the send blocks taken before anything is received.
 *
 * Failure: the receive blocks are backed up before the first byte lands
 * (all at once, at the start: the op writes all of them), so restore puts
 * back exactly what the call found; sendbuf is never written (unless it is
 * recvbuf). */
#ifndef ECCL_CORE_COLL_ALLTOALL_H
#define ECCL_CORE_COLL_ALLTOALL_H

#include "coll/algo.h"
#include "coll/call.h"
#include "env.h"
#include "proto/chan.h"

#define ECCL_A2A_SLICE_BYTES (1u << 20)

/* Per peer: what went out and came in. */
typedef struct eccl_a2a_peer {
    uint64_t sent, got;    /* bytes of the block sent to / received from it */
    uint8_t done_sent, done_recv;
} eccl_a2a_peer;

typedef struct eccl_a2a {
    eccl_coll_call call;
    size_t esize;
    eccl_a2a_peer *peer;   /* [nranks] */
    const uint8_t *src;         /* the send blocks: sendbuf, or `copy` */
    uint8_t *copy;              /* overlapping buffers: the send extent, copied */
    uint8_t *backup;            /* the receive extent as it was */
    int started;                /* backup and copy taken, own block placed */
    uint32_t n_full;            /* peers whose whole block arrived */
    uint32_t n_done;            /* done tokens received */
    uint32_t inflight;          /* our frames the socket has not taken yet */
    uint64_t tx_bytes, rx_bytes;
} eccl_a2a;

/* The extents: bytes from sendbuf (recvbuf) to the end of its last block. */
size_t eccl_a2a_send_extent(const eccl_coll_call *call);
size_t eccl_a2a_recv_extent(const eccl_coll_call *call);
/* Whether the call needs a copy of its send extent (its buffers overlap). */
int eccl_a2a_overlaps(const eccl_coll_call *call);

/* Plans `call` (a copy is kept) for call->rank of call->nranks (>= 2):
 * `peer` holds nranks zeroed entries, `backup` the receive extent, `copy`
 * the send extent when the buffers overlap (else NULL). */
void eccl_a2a_init(eccl_a2a *a, const eccl_coll_call *call, eccl_a2a_peer *peer,
                        uint8_t *backup, uint8_t *copy);

extern const eccl_coll_algo eccl_a2a_algo;

#endif /* ECCL_CORE_COLL_ALLTOALL_H */
