/* The handshake that opens every connection when the job has a secret
 * (eccl_env.auth): both ends prove they hold it before either sends a frame.
 *
 * On connect, each end at once sends its HELLO: the magic "ECCLAUTH" and a
 * fresh 32-byte nonce. Once it has the other's HELLO it sends its PROOF:
 *     MAC(secret, "eccl-auth-1" | role | own nonce | other's nonce)
 * (role 'D' for the end that dialled, 'A' for the one that accepted), and
 * checks the other's PROOF the same way, in constant time. Only then do
 * frames flow (proto/chan.c holds them until eccl_auth_done).
 *
 * Why this is enough against someone who can reach the port but lacks the
 * secret: a proof covers the verifier's own fresh nonce, so a recorded
 * handshake replayed later proves nothing; the role byte means an acceptor's
 * proofs (which anyone can ask for by connecting) never pass as a dialler's,
 * nor the other way round. It does not hide or bind the bytes that follow
 * (someone who can rewrite the stream between two honest ends can take it
 * over after the handshake): that is what TLS is for.
 *
 * Two ends with different secrets both fail (each sees the other's proof
 * wrong): each gets ECCL_ERR_AUTH, with why() saying so. An end that sends
 * frames where the HELLO belongs (no secret set there, or ECCL_AUTH=0), a
 * TLS record (TLS set there, not here), or any other bytes, fails the same
 * way. */
#ifndef ECCL_CORE_PROTO_AUTH_H
#define ECCL_CORE_PROTO_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "env.h"

#define ECCL_AUTH_MAGIC "ECCLAUTH"
#define ECCL_AUTH_MAGIC_BYTES 8u
#define ECCL_AUTH_NONCE_BYTES 32u
#define ECCL_AUTH_HELLO_BYTES (ECCL_AUTH_MAGIC_BYTES + ECCL_AUTH_NONCE_BYTES)
#define ECCL_AUTH_PROOF_BYTES ECCL_AUTH_MAC_BYTES

typedef struct eccl_auth {
    const eccl_env *env;
    uint8_t dialer;    /* 1: we connected; 0: we accepted */
    uint8_t verified;  /* the other's proof checked out */
    uint8_t mine[ECCL_AUTH_NONCE_BYTES], theirs[ECCL_AUTH_NONCE_BYTES];
    /* What arrived: the other's HELLO, then its PROOF. */
    uint8_t in[ECCL_AUTH_HELLO_BYTES + ECCL_AUTH_PROOF_BYTES];
    uint32_t in_got;
    /* What we send: our HELLO, then (once theirs arrived) our PROOF. */
    uint8_t out[ECCL_AUTH_HELLO_BYTES + ECCL_AUTH_PROOF_BYTES];
    uint32_t out_len, out_sent;
    const char *why; /* why it failed; NULL while it has not */
} eccl_auth;

/* Starts a handshake: draws our nonce and queues our HELLO in a->out.
 * ECCL_ERR_AUTH if env has no auth table; the nonce source's error. */
eccl_result eccl_auth_start(eccl_auth *a, const eccl_env *env, int dialer);

/* Where the next bytes from the other end go, and how many are wanted
 * (0 once its PROOF is in: later bytes are frames, not ours). */
uint8_t *eccl_auth_want(eccl_auth *a, size_t *n);

/* n bytes landed where eccl_auth_want said. Checks the HELLO once whole
 * (and queues our PROOF), the PROOF once whole. ECCL_ERR_AUTH (a->why
 * says why) for anything but the right bytes; the MAC's own error. */
eccl_result eccl_auth_got(eccl_auth *a, size_t n);

/* Whether the n-th refused connection (n >= 1) is worth a log line: the
 * 1st, 2nd, 4th, 8th, ...: a flood of strangers cannot fill the log. */
static inline int eccl_auth_log_due(uint64_t n) { return (n & (n - 1)) == 0; }

/* Both proofs exchanged and the other's good: frames may flow. */
static inline int eccl_auth_done(const eccl_auth *a) { return a->verified && a->out_sent == a->out_len; }

#endif
