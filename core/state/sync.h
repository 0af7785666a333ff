/* Shared-state election: the master's decision for one sync round, as a pure
 * function (no I/O, no state), so that every rule is unit-tested on its own
 * (tests/test_sync_elect.c) and the master only moves messages.
 *
 * The round, end to end:
 *
 *   peer    SYNC_REQ(seq, revision, strategy, hash type, sorted keys with
 *           (bytes, hash, dtype); "may differ" tensors left out)
 *   master  once every accepted peer of the group has asked: eccl_sync_elect,
 *           then SYNC_PLAN to each: an error for this peer alone, or the
 *           elected revision and the keys to fetch from which holder
 *   peer    fetches over a SYNC link (connect on demand, HELLO purpose
 *           SYNC, then one SYNC_FETCH per key), the holder streams DATA
 *           (phase SYNC) straight from its tensor into the fetcher's, the
 *           fetcher re-hashes each key; then SYNC_REPORT(result). Only
 *           fetchers report: peers already up to date wait, serving
 *   master  all fetchers reported OK -> SYNC_DONE(OK) to all; the first
 *           failure (or a holder lost) -> SYNC_DONE(error) to all at once.
 *           A peer whose call timed out withdraws (SYNC_REPORT(TIMEOUT)):
 *           the round ends with that error everywhere
 *
 * The rules eccl_sync_elect applies, in this order:
 *  1. Revision: a peer that is not a newcomer (it took part in the group's
 *     last successful round) must be at exactly last + 1, else
 *     ECCL_ERR_INVALID_ARG and it is left out. Newcomers may be anywhere.
 *  2. Classes: peers with the same hash type and the same (key, bytes,
 *     hash, dtype) list form a class. Revisions are NOT part of a class: a
 *     newcomer whose content equals the group's is up to date whatever
 *     number it carries.
 *  3. Vote: every ENFORCE_POPULAR and SEND_ONLY peer votes for its class;
 *     RECEIVE_ONLY peers do not, and neither do newcomers while any member
 *     of the last good round votes (joiners holding the initial state must
 *     not outvote the group and set it back). The class with the most votes wins; a tie
 *     goes to the class holding the lowest voting peer id (deterministic,
 *     and favours the oldest peers, whose ids are lowest). No vote at all:
 *     everyone gets ECCL_ERR_INVALID_ARG.
 *  4. Elected revision: the revision of the class's non-newcomers (rule 1
 *     makes it last + 1), or, when the class has only newcomers, the
 *     highest revision among its voters.
 *  5. Peers outside the elected class: SEND_ONLY ones are kicked
 *     (ECCL_ERR_KICKED: they promised to be authoritative); the others must
 *     hold exactly the elected key names with the same bytes and dtype and
 *     use the same hash type (else ECCL_ERR_INVALID_ARG: the set cannot be
 *     copied into their buffers), and fetch every key whose hash differs.
 *  6. Sources: the elected class's voters (never RECEIVE_ONLY peers). Each
 *     fetch goes to the source with the fewest bytes assigned so far (ties:
 *     the lowest index), so the load spreads over every holder.
 */
#ifndef ECCL_CORE_STATE_SYNC_H
#define ECCL_CORE_STATE_SYNC_H

#include <stdint.h>

#include "eccl.h"
#include "proto/wire.h"

typedef struct eccl_sync_voter {
    /* in */
    uint64_t id;
    uint64_t revision;
    uint8_t strategy;   /* eccl_sync_strategy */
    uint8_t hash_type;  /* eccl_hash_type */
    int newcomer;
    const eccl_wire_sync_key *keys; /* sorted by key, unique */
    uint32_t n_keys;
    /* out */
    eccl_result result; /* OK, INVALID_ARG or KICKED */
    int source;         /* serves in this round */
    int elected;        /* in the elected class: up to date */
} eccl_sync_voter;

typedef struct eccl_sync_assign {
    uint32_t peer;  /* voter index of the fetcher */
    uint32_t key;   /* index into that voter's keys */
    uint32_t src;   /* voter index of the holder */
    uint64_t hash;  /* the elected hash of the key */
} eccl_sync_assign;

typedef struct eccl_sync_election {
    uint64_t revision;        /* elected */
    uint32_t elected;         /* a voter of the elected class; UINT32_MAX: none */
    eccl_sync_assign *fetch;  /* sorted by (peer, key); free with eccl_sync_election_free */
    uint32_t n_fetch;
} eccl_sync_election;

/* Decides one round over v[0..n). have_last: the group had a successful
 * round, at revision last. Fills every voter's outputs and *out. Returns
 * ECCL_ERR_NO_MEMORY (and *out empty) or ECCL_OK. */
eccl_result eccl_sync_elect(eccl_sync_voter *v, uint32_t n, int have_last, uint64_t last,
                            eccl_sync_election *out);
void eccl_sync_election_free(eccl_sync_election *e);

#endif
