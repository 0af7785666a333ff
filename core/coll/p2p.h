/* Send and receive: one rank's buffer into another's, over the peer link
 * between them (coll/algo.h, ECCL_ROLE_PEER), with the collectives' fault
 * contract.
 *
 * Two messages:
 *   DATA  the sender's buffer in 1 MiB slices (the last one marked)
 *   ACK   the receiver holds every byte
 * The receiver returns once it holds every byte (and its ACK is written),
 * the sender once ACK came. The transfer is done exactly when the receiver
 * holds every byte, and the view change decides on that: a frozen receive
 * reports itself as the receiving party (ECCL_VIEW_RECEIVER), and the
 * master commits the tag iff the receiver holds it, or, when no receiver
 * is left to say, iff the sender saw its ACK (core/master). A committed
 * send succeeds without its ACK. So a party that returned is never
 * contradicted: a receiver that returned holds; a sender that returned
 * had ACK, so its receiver held.
 *
 * Tags: a point-to-point op runs under the tag eccl_p2p_tag derives from
 * the caller's tag, the two ranks and the epoch the call was made in (the
 * top bit set: collective tags must leave it clear), so a send and a
 * receive with one user tag, or the same tag between other pairs, never
 * meet; frames, reports and the master's decisions all carry the derived
 * tag. A call made in one epoch that starts in another fails with
 * ECCL_ERR_PEER_LOST like any layout-bound call (its ranks are the old
 * world's).
 *
 * Failure: the receive buffer is backed up before the first byte lands and
 * restored on abort; the send buffer is never written. */
#ifndef ECCL_CORE_COLL_P2P_H
#define ECCL_CORE_COLL_P2P_H

#include "coll/algo.h"
#include "coll/call.h"
#include "env.h"
#include "proto/chan.h"

#define ECCL_P2P_SLICE_BYTES (1u << 20)
/* The bit every derived point-to-point tag has and no collective tag may. */
#define ECCL_P2P_TAG_BIT (1ull << 63)

/* The tag a send from rank `src` to rank `dst` with user tag `tag`, called
 * in `epoch`, runs under (the receive computes the same). */
uint64_t eccl_p2p_tag(uint64_t tag, uint32_t src, uint32_t dst, uint32_t epoch);

typedef struct eccl_p2p {
    eccl_coll_call call;  /* kind SEND or RECV; root: the other rank */
    size_t bytes;
    uint8_t *backup;      /* the receive buffer as it was */
    uint64_t done;        /* bytes sent / received */
    int ack;              /* the sender: ACK came */
    int ack_sent;         /* the receiver: ACK queued */
    uint32_t inflight;
    uint64_t tx_bytes, rx_bytes;
} eccl_p2p;

/* Plans `call` (a copy is kept); the receiver's `backup` holds call->count
 * elements and is filled now (frames may replay before the first pump). */
void eccl_p2p_init(eccl_p2p *p, const eccl_coll_call *call, uint8_t *backup);

extern const eccl_coll_algo eccl_p2p_algo;

#endif /* ECCL_CORE_COLL_P2P_H */
