/* libFuzzer target for the opening handshake (core/proto/auth.h): the
 * input is what the far end sends an acceptor, split into pieces by its
 * own first bytes. Whatever it is, the handshake must never read past what
 * it asks for, never pass without the right proof, and fail with
 * ECCL_ERR_AUTH (and a reason) or wait for more. The MAC is a fixed
 * stand-in (this fuzzes the state machine; the real one is OpenSSL's).
 *
 * Built only with a compiler that has libFuzzer (clang); ctest runs it
 * for a bounded number of inputs (fuzz_auth_smoke). For a real campaign:
 *   build/bin/fuzz_auth -max_total_time=600 CORPUS_DIR */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/auth.h"

static eccl_result fake_nonce(void *ctx, uint8_t *out, size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++) out[i] = (uint8_t)(0xA5 ^ i);
    return ECCL_OK;
}

/* A keyed stand-in: the message's bytes folded into 32, salted. */
static eccl_result fake_mac(void *ctx, const uint8_t *msg, size_t len, uint8_t out[ECCL_AUTH_MAC_BYTES])
{
    (void)ctx;
    memset(out, 0x3c, ECCL_AUTH_MAC_BYTES);
    for (size_t i = 0; i < len; i++) out[i % ECCL_AUTH_MAC_BYTES] = (uint8_t)(out[i % ECCL_AUTH_MAC_BYTES] * 31 + msg[i]);
    return ECCL_OK;
}

static int plain_equal(void *ctx, const void *a, const void *b, size_t n)
{
    (void)ctx;
    return memcmp(a, b, n) == 0;
}

static const eccl_auth_ops fake_ops = {sizeof(eccl_auth_ops), fake_nonce, fake_mac, plain_equal};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    eccl_env env;
    memset(&env, 0, sizeof env);
    env.auth = &fake_ops;
    eccl_auth a;
    if (eccl_auth_start(&a, &env, size && (data[0] & 1)) != ECCL_OK) abort();
    size_t at = size ? 1 : 0;
    while (at < size) {
        size_t n;
        uint8_t *into = eccl_auth_want(&a, &n);
        if (n == 0) break;
        if (into < a.in || into + n > a.in + sizeof a.in) abort();
        size_t piece = 1 + data[at] % n; /* the input picks its own pieces */
        at++;
        if (piece > size - at) piece = size - at;
        if (piece == 0) break;
        memcpy(into, data + at, piece);
        at += piece;
        eccl_result rc = eccl_auth_got(&a, piece);
        if (rc != ECCL_OK) {
            if (rc != ECCL_ERR_AUTH || !a.why || a.verified) abort();
            return 0;
        }
    }
    /* Passing needs the proof the fake MAC makes for this exchange: check
     * that a pass is exactly that. */
    if (a.verified) {
        uint8_t msg[11 + 1 + 2 * ECCL_AUTH_NONCE_BYTES], want[ECCL_AUTH_MAC_BYTES];
        memcpy(msg, "eccl-auth-1", 11);
        msg[11] = a.dialer ? 'A' : 'D';
        memcpy(msg + 12, a.theirs, ECCL_AUTH_NONCE_BYTES);
        memcpy(msg + 12 + ECCL_AUTH_NONCE_BYTES, a.mine, ECCL_AUTH_NONCE_BYTES);
        fake_mac(NULL, msg, sizeof msg, want);
        if (memcmp(want, a.in + ECCL_AUTH_HELLO_BYTES, sizeof want) != 0) abort();
    }
    return 0;
}
