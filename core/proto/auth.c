#include "proto/auth.h"

#include <string.h>

#include "proto/wire.h"

#define LABEL "eccl-auth-1"
#define LABEL_BYTES (sizeof LABEL - 1)

/* MAC(secret, LABEL | role | first nonce | second nonce). */
static eccl_result proof(const eccl_auth *a, uint8_t role, const uint8_t *first, const uint8_t *second,
                         uint8_t out[ECCL_AUTH_MAC_BYTES])
{
    uint8_t msg[LABEL_BYTES + 1 + 2 * ECCL_AUTH_NONCE_BYTES];
    memcpy(msg, LABEL, LABEL_BYTES);
    msg[LABEL_BYTES] = role;
    memcpy(msg + LABEL_BYTES + 1, first, ECCL_AUTH_NONCE_BYTES);
    memcpy(msg + LABEL_BYTES + 1 + ECCL_AUTH_NONCE_BYTES, second, ECCL_AUTH_NONCE_BYTES);
    return a->env->auth->mac(a->env->auth_ctx, msg, sizeof msg, out);
}

eccl_result eccl_auth_start(eccl_auth *a, const eccl_env *env, int dialer)
{
    memset(a, 0, sizeof *a);
    a->env = env;
    a->dialer = dialer != 0;
    if (!env->auth) {
        a->why = "this end has no secret";
        return ECCL_ERR_AUTH;
    }
    eccl_result rc = env->auth->nonce(env->auth_ctx, a->mine, sizeof a->mine);
    if (rc != ECCL_OK) return rc;
    memcpy(a->out, ECCL_AUTH_MAGIC, ECCL_AUTH_MAGIC_BYTES);
    memcpy(a->out + ECCL_AUTH_MAGIC_BYTES, a->mine, sizeof a->mine);
    a->out_len = ECCL_AUTH_HELLO_BYTES;
    return ECCL_OK;
}

uint8_t *eccl_auth_want(eccl_auth *a, size_t *n)
{
    /* The magic first on its own: a wrong one is told before the rest. */
    uint32_t upto = a->in_got < ECCL_AUTH_MAGIC_BYTES ? ECCL_AUTH_MAGIC_BYTES
                    : a->in_got < ECCL_AUTH_HELLO_BYTES ? ECCL_AUTH_HELLO_BYTES
                                                       : (uint32_t)sizeof a->in;
    *n = a->why ? 0 : upto - a->in_got;
    return a->in + a->in_got;
}

static eccl_result refuse(eccl_auth *a, const char *why)
{
    a->why = why;
    return ECCL_ERR_AUTH;
}

eccl_result eccl_auth_got(eccl_auth *a, size_t n)
{
    if (a->why) return ECCL_ERR_AUTH;
    a->in_got += (uint32_t)n;
    /* A TLS record (a handshake or an alert: type 22 or 21, version 3.x)
     * where the HELLO belongs; it may be shorter than the magic (an alert
     * is 7 bytes), so it is told apart as soon as its first bytes are in. */
    if (a->in_got >= 2 && a->in_got <= ECCL_AUTH_MAGIC_BYTES && (a->in[0] == 21 || a->in[0] == 22) && a->in[1] == 3)
        return refuse(a, "the other end speaks TLS (ECCL_TLS is set there and not here)");
    if (a->in_got == ECCL_AUTH_MAGIC_BYTES && memcmp(a->in, ECCL_AUTH_MAGIC, ECCL_AUTH_MAGIC_BYTES) != 0) {
        /* A frame header where the HELLO belongs: the other end runs
         * without a secret. */
        return refuse(a, eccl_wire_is_frame_start(a->in)
                             ? "the other end sent frames without authenticating (no secret set there, or ECCL_AUTH=0)"
                             : "the other end's first bytes are not an eccl handshake");
    }
    if (a->in_got == ECCL_AUTH_HELLO_BYTES) {
        memcpy(a->theirs, a->in + ECCL_AUTH_MAGIC_BYTES, sizeof a->theirs);
        if (memcmp(a->theirs, a->mine, sizeof a->mine) == 0)
            return refuse(a, "the other end sent our own nonce back (a reflected handshake)");
        eccl_result rc = proof(a, a->dialer ? 'D' : 'A', a->mine, a->theirs, a->out + a->out_len);
        if (rc != ECCL_OK) return rc;
        a->out_len += ECCL_AUTH_PROOF_BYTES;
    }
    if (a->in_got == sizeof a->in) {
        uint8_t want[ECCL_AUTH_MAC_BYTES];
        eccl_result rc = proof(a, a->dialer ? 'A' : 'D', a->theirs, a->mine, want);
        if (rc != ECCL_OK) return rc;
        if (!a->env->auth->equal(a->env->auth_ctx, want, a->in + ECCL_AUTH_HELLO_BYTES, sizeof want))
            return refuse(a, "the other end's proof does not match this end's secret (a different or missing secret)");
        a->verified = 1;
    }
    return ECCL_OK;
}
