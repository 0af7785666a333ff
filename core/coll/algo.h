/* An algorithm behind one face: what core/comm needs to run any collective.
 *
 * An algorithm is a resumable state machine over links named by role. It
 * never touches a socket or the master: comm hands it the links of the
 * current epoch, feeds it the DATA frames that arrive for its tag, asks it
 * whether it is complete, and, when a view change aborts the op, tells it
 * to put the caller's output back as it was. Every algorithm keeps the
 * same promises (core/comm relies on them for the fault contract):
 *
 *   - recvbuf is backed up before any byte of it is first written, and
 *     restore() puts back every byte written so far;
 *   - have_full() says whether this rank's own output is final (or, for a
 *     rank with no output, its own part is sent): the master commits an op
 *     after a loss iff every survivor says so;
 *   - complete() is 1 only once every rank is known to have its output
 *     (the completion round: done tokens or the tree's COMMIT) and every
 *     frame of ours has left, so a rank that returned success is never
 *     contradicted by the master, and the caller may reuse its buffers;
 *   - settled() (NULL: never) says the output is final and every data
 *     frame of ours has left, so nothing more reads or writes the caller's
 *     buffers: what remains is the completion round's empty tokens. A
 *     small replicated call may then return early (docs/protocol.md, "The
 *     commit rule"), its op running on behind the caller;
 *   - expects(role) says whether more frames of this call will come over
 *     the link in that role: once 0, a frame with the same tag belongs to
 *     the caller's next call of the tag (OCCL's order freedom rests on it);
 *   - owes_token(role) (with settled) says whether a completion token of
 *     ours that is not queued yet will go over the link in that role (one
 *     that waits for another's: the dissemination barrier's round k, the
 *     ring's next done token, the trees' DONE and COMMIT). A caller that
 *     returned early may have started its next calls meanwhile; core/comm
 *     keeps their frames off that link until the token is queued, since a
 *     peer that has not called them yet may have to hold a big one back
 *     unread on its connection, and the token behind it with it.
 */
#ifndef ECCL_CORE_COLL_ALGO_H
#define ECCL_CORE_COLL_ALGO_H

#include "eccl_core.h"
#include "proto/chan.h"

/* The links of one epoch by what they are to this rank. A socket carries
 * both directions: the link to `next` sends ring 0 and receives ring 1. */
enum eccl_coll_role {
    ECCL_ROLE_PREV = 0,   /* ring: receives ring 0, sends ring 1 */
    ECCL_ROLE_NEXT = 1,   /* ring: sends ring 0, receives ring 1 */
    ECCL_ROLE_PARENT = 2, /* the tree of coll/tree_allreduce.h */
    ECCL_ROLE_CHILD0 = 3, /* its children: CHILD0 + k, k < ECCL_WIRE_TREE_CHILDREN */
    ECCL_ROLE_COUNT = ECCL_ROLE_CHILD0 + ECCL_WIRE_TREE_CHILDREN
};

/* Role ECCL_ROLE_PEER + r is the link to rank r of the epoch: algorithms
 * that talk to any rank (all-to-all, recursive doubling, binomial trees)
 * run over these. They open lazily, keyed by rank: the lower rank connects
 * once it has asked the master for the address (the address book,
 * core/comm/peers.c), the higher one accepts. */
#define ECCL_ROLE_PEER 8
#define ECCL_ROLE_IS_PEER(role) ((role) >= ECCL_ROLE_PEER)
#define ECCL_ROLE_PEER_RANK(role) ((uint32_t)((role) - ECCL_ROLE_PEER))
_Static_assert(ECCL_ROLE_COUNT <= ECCL_ROLE_PEER, "the fixed roles overlap the peer roles");

#define ECCL_ROLE_BIT(role) (1u << (role))
/* In `roles`: the op runs over peer links (any rank). */
#define ECCL_ROLES_PEERS (1u << 31)
#define ECCL_ROLES_RING (ECCL_ROLE_BIT(ECCL_ROLE_PREV) | ECCL_ROLE_BIT(ECCL_ROLE_NEXT))
#define ECCL_ROLES_TREE (ECCL_ROLE_BIT(ECCL_ROLE_COUNT) - ECCL_ROLE_BIT(ECCL_ROLE_PARENT))

/* What pump sends over: the fixed roles' links (NULL: not open), and the
 * peer links by rank. peer(ctx, r) returns the link to rank r, or NULL
 * while it is not open yet: asking starts opening it, and pump is called
 * again once anything changes, so an algorithm simply sends to whichever
 * of its partners are reachable and keeps the rest for later. */
typedef struct eccl_coll_links {
    eccl_chan *role[ECCL_ROLE_COUNT];
    eccl_chan *(*peer)(void *ctx, uint32_t rank);
    void *ctx;
    /* The caller has, or may have before the round ends, returned early
     * with a kept copy (docs/protocol.md, "Returning early"): the
     * completion tokens are off its path and may wait for the next frame
     * on their link (eccl_coll_send_token). */
    int lazy_tokens;
} eccl_coll_links;

/* Queues an empty completion token on ch: lazily (links->lazy_tokens),
 * and then never counted in `inflight`, since nothing waits for its write;
 * otherwise at once, counted where `inflight` is given. */
static inline eccl_result eccl_coll_send_token(int lazy, eccl_chan *ch, const eccl_wire_data *t,
                                               uint32_t *inflight)
{
    return lazy ? eccl_chan_send_lazy(ch, t) : eccl_chan_send_data(ch, t, NULL, inflight);
}

/* The link to rank r (NULL while it is not open yet: asking starts
 * opening it), for algorithms over peer links. */
static inline eccl_chan *eccl_coll_peer(const eccl_coll_links *links, uint32_t rank)
{
    return links->peer ? links->peer(links->ctx, rank) : NULL;
}

/* The peer-link algorithms' geometry: ceil(log2 n) (0 for n <= 1), and the
 * largest power of two <= n (n >= 1). */
static inline uint32_t eccl_ceil_log2(uint32_t n)
{
    uint32_t r = 0;
    while (((uint64_t)1 << r) < n) r++;
    return r;
}

static inline uint32_t eccl_floor_pow2(uint32_t n)
{
    uint32_t p = 1;
    while (p <= n / 2) p *= 2;
    return p;
}

typedef struct eccl_coll_algo {
    eccl_algorithm id;   /* reported in eccl_reduce_info.algorithm */
    /* Roles whose links the op runs over (tree links open lazily, when an
     * op of this algorithm first runs), and those that must be open before
     * pump may be called at all (others may be NULL in pump's array).
     * ECCL_ROLES_PEERS in `roles`: peer links, never needed up front. */
    uint32_t roles, pump_needs;
    eccl_result (*pump)(void *op, const eccl_coll_links *links);
    eccl_result (*recv)(void *op, int role, const eccl_wire_data *d, void **dst);
    eccl_result (*recv_done)(void *op, int role, const eccl_wire_data *d);
    int (*complete)(void *op);
    int (*expects)(const void *op, int role);
    int (*have_full)(const void *op);
    int (*settled)(const void *op);
    int (*owes_token)(const void *op, int role);
    void (*restore)(void *op);
    /* A failure of the op's own making (a device copy), ECCL_OK if none:
     * comm fails the op with it, never the link. NULL: it makes none. */
    eccl_result (*error)(const void *op);
    void (*bytes)(const void *op, uint64_t *tx, uint64_t *rx);
} eccl_coll_algo;

#endif /* ECCL_CORE_COLL_ALGO_H */
