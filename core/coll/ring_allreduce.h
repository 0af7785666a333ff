/* Ring all-reduce as a resumable state machine.
 *
 * The buffer is split between two rings running in opposite directions, so
 * both directions of every link carry data at once (small buffers use one
 * ring). Each ring splits its share into one chunk per rank and each chunk
 * into slices: reduce-scatter (N-1 steps) then all-gather (N-1 steps), where
 * sending slice k of step g waits only for slice k of step g-1, so steps
 * overlap like a pipeline.
 *
 * Bit-parity: the owner of a chunk reduces it once, in ring order, and the
 * all-gather forwards that result unchanged; AVG divides at the owner.
 *
 * Two ranks with a small buffer skip the ring: each sends its whole buffer
 * (one step instead of two) and both reduce rank 0's data with rank 1's, in
 * that order, so the bits agree.
 *
 * Completion: holding the full result is not enough to return, because a
 * peer lost later could leave another survivor without it. After the
 * all-gather each rank passes done tokens around ring 0: token s says "the
 * sender and the s-1 ranks before it hold the full result". A rank returns
 * once it holds the result and has token N-1. If a peer is lost first, the
 * master asks every survivor whether it holds the result and commits the op
 * only if all do (see core/comm), so survivors never disagree. Two ranks
 * (the exchange too) pass one token each way: a loss leaves one survivor,
 * but a link that breaks without one leaves both, and a rank that returned
 * while the other never got its data would contradict the master. A small
 * call returns before the tokens, keeping a copy of its result (settled,
 * coll/algo.h). Either way a rank returns only once the socket has taken
 * all its frames, so the caller may reuse the buffers at once.
 *
 * Quantised (call->quant != ECCL_QUANT_NONE; never the exchange): every
 * reduce-scatter slice travels as a quantised DATA frame (ECCL_WIRE_DATA_QUANT:
 * 24-byte record + one code per value), quantised by its sender from the
 * partial sum it holds; the receiver dequantises it and adds its own
 * contribution exactly as in the plain path. The owner of a chunk, once it
 * is fully reduced (and divided, for AVG), quantises each slice ONCE into
 * the all-gather image and overwrites its recvbuf slice with the
 * dequantised values, which is what every other peer will compute from the
 * same record and codes (core/quant: a pure function). The all-gather then
 * lands each slice's frame in the image and forwards those very bytes, so
 * every peer holds bit-identical values. A slice the quantiser refuses (NaN,
 * infinity, a range wider than the dtype) travels raw instead, in either
 * phase, and is treated exactly like a slice of the plain path: a raw
 * all-gather slice is forwarded from recvbuf, which the image records by a
 * 0 in the slot's first byte (no record has type 0).
 *
 * Device-resident (call->on_device; plain, never the exchange): sendbuf
 * and recvbuf are device memory the host never touches. Each outgoing slice
 * is copied by the device into one of the op's pinned send slots and sent
 * from there once the copy is done (the next slice is copied while this
 * one is on the wire), or, on a link that carries device memory (a
 * host-mate maps it: eccl_chan_device_bulk), sent from the device buffer
 * itself once the device work that wrote it is done; each incoming slice lands in pinned staging and a
 * kernel on the library's stream reduces it into recvbuf (or copies it, in
 * the all-gather), in the host path's operand order; the backup is device
 * memory, saved slice by slice before the first write as above. All of it
 * goes through the env's d_* dev ops. A device failure fails the op with
 * ECCL_ERR_DEVICE (dev_error), never the link.
 */
#ifndef ECCL_CORE_COLL_RING_ALLREDUCE_H
#define ECCL_CORE_COLL_RING_ALLREDUCE_H

#include "coll/algo.h"
#include "coll/call.h"
#include "env.h"
#include "proto/chan.h"

/* Default slice: big enough to amortise a frame, small enough to pipeline. */
#define ECCL_RING_SLICE_BYTES (1u << 20)
/* Below this many bytes one ring is used: latency beats bandwidth. */
#define ECCL_RING_TWO_RINGS_MIN_BYTES (256u << 10)
/* Two ranks exchange whole buffers up to this size. */
#define ECCL_RING_EXCHANGE_MAX_BYTES (64u << 10)
/* Stop queueing on a link once this much is waiting for the socket. */
#define ECCL_RING_MAX_QUEUED (4u << 20)
/* Device-resident ring: pinned send slots of one slice each, shared by both
 * rings (slices queued at once, so 8 MiB on the wire). */
#define ECCL_RING_DEV_SLOTS 8

typedef struct eccl_ring_slot {
    uint8_t *p;        /* pinned host memory, one slice */
    uint32_t inflight; /* 1 while its frame waits for the socket */
    int filling;       /* a device copy into it is under way */
} eccl_ring_slot;

typedef struct eccl_ring_dir {
    size_t elem_off;      /* this ring's share of the buffer, in elements */
    size_t elem_count;
    uint32_t pos;         /* my position along this ring's send direction */
    uint32_t send_g, send_k; /* next slice to send: global step, slice */
    uint32_t recv_g, recv_k; /* next slice expected */
    uint32_t saved_g, saved_k; /* next slice to back up before writing it */
    uint8_t *staging;     /* in-place reduce-scatter lands here first */
    uint8_t *qstage;      /* quantised reduce-scatter frames land here */
} eccl_ring_dir;

typedef struct eccl_ring_allreduce {
    eccl_coll_call call;
    uint8_t *backup;      /* what recvbuf held, saved slice by slice */
    int exchange_saved;
    size_t esize;
    uint32_t nrings;
    int exchange;         /* two ranks, small buffer: one swap */
    int lazy_tokens;      /* done tokens may wait: eccl_coll_links's, at each pump */
    int exchange_sent;
    int exchange_recvd;   /* the peer's buffer is in staging */
    uint32_t inflight;    /* our frames the socket has not taken yet */
    size_t slice_elems;
    eccl_ring_dir dir[2];
    uint32_t done_sent;   /* done tokens sent (ring 0) */
    uint32_t done_recv;   /* highest done token received */
    int have_full;
    uint64_t tx_bytes, rx_bytes;
    /* quantised: [0] reduce-scatter, [1] all-gather images; each holds, per
     * slice, the frame's payload (24-byte record + codes), ring 0's slices
     * then ring 1's, each ring's in chunk and slice order */
    uint8_t *qimg[2];
    /* device-resident: the send slots, and the first device failure */
    eccl_ring_slot slot[ECCL_RING_DEV_SLOTS];
    eccl_result dev_error;
    /* ...and per ring, whether its slices may leave straight from the
     * device buffers (the link carries device memory: a host-mate maps
     * it), asked once, at the first pump */
    int direct[2];
    int direct_asked;
} eccl_ring_allreduce;

/* Plans `call` (a copy is kept) for call->rank of call->nranks (>= 2).
 * staging[2] must each hold
 * eccl_ring_staging_bytes() bytes; backup as many bytes as recvbuf. Each
 * slice of recvbuf is copied to backup right before it is first written
 * (not all up front: sending starts at once, and the slice is in cache when
 * the socket writes it), so eccl_ring_allreduce_restore can undo the op. */
void eccl_ring_allreduce_init(eccl_ring_allreduce *r, const eccl_coll_call *call,
                              uint8_t *staging[2], uint8_t *backup);
/* Device-resident calls: after init, the ECCL_RING_DEV_SLOTS pinned send
 * slots of eccl_ring_staging_bytes each (staging[] must be pinned too, and
 * backup device memory). */
void eccl_ring_allreduce_set_slots(eccl_ring_allreduce *r, uint8_t *slots);
/* Quantised calls: after init and before the first pump, hands the op
 * `img`, of eccl_ring_quant_bytes(r) bytes, for its two images; staging[i]
 * must then hold eccl_ring_staging_bytes_q() bytes. */
void eccl_ring_allreduce_set_quant(eccl_ring_allreduce *r, uint8_t *img);
size_t eccl_ring_quant_bytes(const eccl_ring_allreduce *r);
/* eccl_ring_staging_bytes, plus room for one quantised slice when quant. */
size_t eccl_ring_staging_bytes_q(size_t count, eccl_dtype dtype, eccl_quant_type quant);
/* Puts back every slice of recvbuf the op has written (or is writing). */
void eccl_ring_allreduce_restore(eccl_ring_allreduce *r);
size_t eccl_ring_staging_bytes(size_t count, eccl_dtype dtype);

/* Queues every slice and token that is ready. link[0] carries ring 0 to the
 * next rank, link[1] ring 1 to the previous rank. */
eccl_result eccl_ring_allreduce_pump(eccl_ring_allreduce *r, eccl_chan *link[2]);
/* A DATA frame for this op arrived on `ring`'s receive link: check it is the
 * next one expected and say where its bytes go. */
eccl_result eccl_ring_allreduce_recv(eccl_ring_allreduce *r, int ring,
                                     const eccl_wire_data *d, void **dst);
/* The frame's bytes are in place: reduce, advance. */
eccl_result eccl_ring_allreduce_recv_done(eccl_ring_allreduce *r, int ring,
                                          const eccl_wire_data *d);
/* Finishes what waited for our frames to leave; 1 once the op may return. */
int eccl_ring_allreduce_complete(eccl_ring_allreduce *r);
/* Whether more frames for this op will arrive on the link that receives
 * `ring` (ring 0 also carries the done tokens). A link delivers one call's
 * frames before the next call's, so once this is 0 a frame with the same
 * tag belongs to the caller's next call with that tag. */
int eccl_ring_allreduce_expects(const eccl_ring_allreduce *r, int ring);

/* The state machine behind coll/algo.h. */
extern const eccl_coll_algo eccl_ring_allreduce_algo;

#endif
