/* The opening handshake (core/proto/auth.h) between two ends in one
 * process, with the real backend's secret, MAC and nonces
 * (backends/real/auth_real.c): the same secret passes; a different one,
 * a replayed or reflected handshake, frames or garbage where the HELLO
 * belongs fail both ends or the one that checks; the settings that name
 * the secret and their refusals; the failpoints of the MAC and nonce
 * source; and a bounded fuzz of what a stranger may send. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <fiu-control.h>
#include <fiu.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth_real.h"
#include "env_real.h"
#include "proto/auth.h"
#include "proto/wire.h"
#include "util/rand.h"

#define SECRET_A "the-first-secret-of-this-test"
#define SECRET_B "the-other-secret-of-this-test"

/* An env whose auth table holds `secret` (settings as given; NULL: unset). */
static eccl_env *env_with(const char *secret, const char *file, const char *off)
{
    if (secret) setenv("ECCL_AUTH_SECRET", secret, 1);
    else unsetenv("ECCL_AUTH_SECRET");
    if (file) setenv("ECCL_AUTH_SECRET_FILE", file, 1);
    else unsetenv("ECCL_AUTH_SECRET_FILE");
    if (off) setenv("ECCL_AUTH", off, 1);
    else unsetenv("ECCL_AUTH");
    eccl_env *env = NULL;
    eccl_result rc = eccl_env_real_create("auth", 0, &env);
    return rc == ECCL_OK ? env : NULL;
}

static eccl_result create_rc(const char *secret, const char *file, const char *off)
{
    eccl_env *env = env_with(secret, file, off);
    if (!env) {
        /* What failed: create again for its result (it logs it). */
        eccl_env *again = NULL;
        eccl_result rc = eccl_env_real_create("auth", 0, &again);
        assert_null(again);
        return rc;
    }
    eccl_env_real_destroy(env);
    return ECCL_OK;
}

/* Moves what `from` has to say into `to`, as a stream would (all of it at
 * once, or byte by byte); returns the first error. */
static eccl_result pass(eccl_auth *from, eccl_auth *to, int bytewise)
{
    while (from->out_sent < from->out_len) {
        size_t want;
        uint8_t *into = eccl_auth_want(to, &want);
        if (want == 0) return ECCL_OK;
        size_t n = from->out_len - from->out_sent;
        if (n > want) n = want;
        if (bytewise) n = 1;
        memcpy(into, from->out + from->out_sent, n);
        from->out_sent += (uint32_t)n;
        eccl_result rc = eccl_auth_got(to, n);
        if (rc != ECCL_OK) return rc;
    }
    return ECCL_OK;
}

/* Runs both ends to the end; the dialler's and the acceptor's results. */
static void run(eccl_auth *d, eccl_auth *a, int bytewise, eccl_result *rd, eccl_result *ra)
{
    *rd = *ra = ECCL_OK;
    for (int round = 0; round < 4; round++) {
        if (*ra == ECCL_OK) *ra = pass(d, a, bytewise);
        if (*rd == ECCL_OK) *rd = pass(a, d, bytewise);
    }
}

static void test_same_secret(void **state)
{
    (void)state;
    eccl_env *e1 = env_with(SECRET_A, NULL, NULL), *e2 = env_with(SECRET_A, NULL, NULL);
    assert_non_null(e1);
    assert_non_null(e2);
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        eccl_auth d, a;
        assert_int_equal(eccl_auth_start(&d, e1, 1), ECCL_OK);
        assert_int_equal(eccl_auth_start(&a, e2, 0), ECCL_OK);
        assert_memory_not_equal(d.mine, a.mine, sizeof d.mine); /* fresh nonces */
        eccl_result rd, ra;
        run(&d, &a, bytewise, &rd, &ra);
        assert_int_equal(rd, ECCL_OK);
        assert_int_equal(ra, ECCL_OK);
        assert_true(eccl_auth_done(&d));
        assert_true(eccl_auth_done(&a));
        size_t n;
        eccl_auth_want(&d, &n);
        assert_int_equal(n, 0); /* what follows is frames */
    }
    eccl_env_real_destroy(e1);
    eccl_env_real_destroy(e2);
}

/* Different secrets: each end finds the other's proof wrong. A secret
 * from a file with a trailing newline is the same secret. */
static void test_different_secret_fails_both(void **state)
{
    (void)state;
    eccl_env *e1 = env_with(SECRET_A, NULL, NULL), *e2 = env_with(SECRET_B, NULL, NULL);
    eccl_auth d, a;
    assert_int_equal(eccl_auth_start(&d, e1, 1), ECCL_OK);
    assert_int_equal(eccl_auth_start(&a, e2, 0), ECCL_OK);
    eccl_result rd, ra;
    run(&d, &a, 0, &rd, &ra);
    assert_int_equal(rd, ECCL_ERR_AUTH);
    assert_int_equal(ra, ECCL_ERR_AUTH);
    assert_non_null(strstr(d.why, "proof does not match"));
    assert_non_null(strstr(a.why, "proof does not match"));
    assert_false(eccl_auth_done(&d));
    assert_false(eccl_auth_done(&a));
    eccl_env_real_destroy(e2);

    char path[] = "/tmp/eccl-auth-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, SECRET_A "\n", sizeof SECRET_A), (ssize_t)sizeof SECRET_A);
    close(fd);
    e2 = env_with(NULL, path, NULL);
    assert_non_null(e2);
    assert_int_equal(eccl_auth_start(&d, e1, 1), ECCL_OK);
    assert_int_equal(eccl_auth_start(&a, e2, 0), ECCL_OK);
    run(&d, &a, 0, &rd, &ra);
    assert_int_equal(rd, ECCL_OK);
    assert_int_equal(ra, ECCL_OK);
    unlink(path);
    eccl_env_real_destroy(e1);
    eccl_env_real_destroy(e2);
}

/* A recorded dialler's bytes replayed to a new acceptor: its fresh nonce
 * is not in the old proof. */
static void test_replay_fails(void **state)
{
    (void)state;
    eccl_env *e = env_with(SECRET_A, NULL, NULL);
    eccl_auth d, a;
    assert_int_equal(eccl_auth_start(&d, e, 1), ECCL_OK);
    assert_int_equal(eccl_auth_start(&a, e, 0), ECCL_OK);
    eccl_result rd, ra;
    run(&d, &a, 0, &rd, &ra);
    assert_int_equal(rd, ECCL_OK);
    assert_int_equal(ra, ECCL_OK);
    uint8_t recorded[sizeof d.out];
    memcpy(recorded, d.out, d.out_len);

    eccl_auth again;
    assert_int_equal(eccl_auth_start(&again, e, 0), ECCL_OK);
    size_t n;
    uint8_t *into = eccl_auth_want(&again, &n);
    eccl_result rc = ECCL_OK;
    for (size_t at = 0; n && rc == ECCL_OK; into = eccl_auth_want(&again, &n)) {
        memcpy(into, recorded + at, n);
        at += n;
        rc = eccl_auth_got(&again, n);
    }
    assert_int_equal(rc, ECCL_ERR_AUTH);
    assert_non_null(strstr(again.why, "proof does not match"));
    eccl_env_real_destroy(e);
}

/* Someone without the secret plays two acceptors against each other: each
 * one's HELLO to the other, then each one's PROOF to the other. An
 * acceptor's proof is no dialler's (the role byte): both refuse. Its own
 * HELLO sent back to an end is refused before any proof. */
static void test_reflection_fails(void **state)
{
    (void)state;
    eccl_env *e = env_with(SECRET_A, NULL, NULL);
    eccl_auth a1, a2;
    assert_int_equal(eccl_auth_start(&a1, e, 0), ECCL_OK);
    assert_int_equal(eccl_auth_start(&a2, e, 0), ECCL_OK);
    eccl_result r1, r2;
    run(&a1, &a2, 0, &r1, &r2);
    assert_int_equal(r1, ECCL_ERR_AUTH);
    assert_int_equal(r2, ECCL_ERR_AUTH);

    eccl_auth self;
    assert_int_equal(eccl_auth_start(&self, e, 1), ECCL_OK);
    size_t n;
    uint8_t *into = eccl_auth_want(&self, &n);
    memcpy(into, self.out, n);
    assert_int_equal(eccl_auth_got(&self, n), ECCL_OK); /* the magic */
    into = eccl_auth_want(&self, &n);
    memcpy(into, self.out + ECCL_AUTH_MAGIC_BYTES, n);
    assert_int_equal(eccl_auth_got(&self, n), ECCL_ERR_AUTH);
    assert_non_null(strstr(self.why, "own nonce"));
    eccl_env_real_destroy(e);
}

/* Frames where the HELLO belongs (an end without a secret), or any other
 * bytes: refused at the magic, before a proof is made. */
static void test_frames_or_garbage_refused(void **state)
{
    (void)state;
    eccl_env *e = env_with(SECRET_A, NULL, NULL);
    eccl_msg m = {.type = ECCL_MSG_REGISTER};
    snprintf(m.u.reg.p2p_addr, sizeof m.u.reg.p2p_addr, "127.0.0.1:1");
    uint8_t frame[ECCL_WIRE_HEADER_SIZE + ECCL_WIRE_MAX_CONTROL];
    assert_true(eccl_wire_encode(&m, frame, sizeof frame) > 0);
    const uint8_t garbage[ECCL_AUTH_MAGIC_BYTES] = "GET / HT";
    const uint8_t *inputs[2] = {frame, garbage};
    const char *whys[2] = {"sent frames without authenticating", "not an eccl handshake"};
    for (int i = 0; i < 2; i++) {
        eccl_auth a;
        assert_int_equal(eccl_auth_start(&a, e, 0), ECCL_OK);
        size_t n;
        uint8_t *into = eccl_auth_want(&a, &n);
        assert_int_equal(n, ECCL_AUTH_MAGIC_BYTES);
        memcpy(into, inputs[i], n);
        assert_int_equal(eccl_auth_got(&a, n), ECCL_ERR_AUTH);
        assert_non_null(strstr(a.why, whys[i]));
        assert_int_equal(a.out_len, ECCL_AUTH_HELLO_BYTES); /* no proof was made */
        eccl_auth_want(&a, &n);
        assert_int_equal(n, 0); /* nothing more is read */
    }
    eccl_env_real_destroy(e);
}

/* The settings: the secret from the variable or a file; refusals for none,
 * both, a short one, an unreadable or group-readable file; ECCL_AUTH=0. */
static void test_settings(void **state)
{
    (void)state;
    assert_int_equal(create_rc(SECRET_A, NULL, NULL), ECCL_OK);
    assert_int_equal(create_rc(NULL, NULL, NULL), ECCL_ERR_AUTH);
    assert_int_equal(create_rc("short", NULL, NULL), ECCL_ERR_AUTH);
    assert_int_equal(create_rc("fifteen-bytes!!\n", NULL, NULL), ECCL_ERR_AUTH); /* 15 after the newline */
    assert_int_equal(create_rc(NULL, "/nonexistent/eccl-secret", NULL), ECCL_ERR_AUTH);
    char path[] = "/tmp/eccl-auth-XXXXXX";
    int fd = mkstemp(path); /* mode 600 */
    assert_true(fd >= 0);
    assert_int_equal(write(fd, SECRET_B, strlen(SECRET_B)), (ssize_t)strlen(SECRET_B));
    close(fd);
    assert_int_equal(create_rc(NULL, path, NULL), ECCL_OK);
    assert_int_equal(create_rc(SECRET_A, path, NULL), ECCL_ERR_AUTH); /* both */
    assert_int_equal(chmod(path, 0640), 0);
    assert_int_equal(create_rc(NULL, path, NULL), ECCL_ERR_AUTH);
    unlink(path);
    /* Off: no secret needed, no auth table. */
    eccl_env *e = env_with(NULL, NULL, "0");
    assert_non_null(e);
    assert_null(e->auth);
    eccl_env_real_destroy(e);
    unsetenv("ECCL_AUTH");
    /* The launchers' helper makes one up only where none is set. */
    unsetenv("ECCL_AUTH_SECRET");
    assert_int_equal(eccl_auth_job_secret(), ECCL_OK);
    const char *made = getenv("ECCL_AUTH_SECRET");
    assert_non_null(made);
    assert_int_equal(strlen(made), 64);
    char copy[65];
    snprintf(copy, sizeof copy, "%s", made);
    assert_int_equal(eccl_auth_job_secret(), ECCL_OK);
    assert_string_equal(getenv("ECCL_AUTH_SECRET"), copy);
    assert_int_equal(create_rc(copy, NULL, NULL), ECCL_OK);
}

/* eccl/auth/nonce: the handshake cannot start; eccl/auth/mac: it fails
 * where it would make or check a proof. */
static void test_failpoints(void **state)
{
    (void)state;
    eccl_env *e = env_with(SECRET_A, NULL, NULL);
    eccl_auth d, a;
    fiu_enable("eccl/auth/nonce", 1, NULL, 0);
    assert_int_equal(eccl_auth_start(&d, e, 1), ECCL_ERR_SYSTEM);
    fiu_disable("eccl/auth/nonce");
    assert_int_equal(eccl_auth_start(&d, e, 1), ECCL_OK);
    assert_int_equal(eccl_auth_start(&a, e, 0), ECCL_OK);
    fiu_enable("eccl/auth/mac", 1, NULL, 0);
    assert_int_equal(pass(&d, &a, 0), ECCL_ERR_SYSTEM);
    fiu_disable("eccl/auth/mac");
    eccl_env_real_destroy(e);
}

/* A bounded fuzz: random bytes, or a real HELLO followed by random bytes,
 * in random pieces, never crash, never read past what is asked and never
 * pass. */
static void test_fuzz(void **state)
{
    (void)state;
    eccl_env *e = env_with(SECRET_A, NULL, NULL);
    uint64_t rng = 0x5eed;
    eccl_auth real;
    assert_int_equal(eccl_auth_start(&real, e, 1), ECCL_OK);
    for (int round = 0; round < 20000; round++) {
        eccl_auth a;
        assert_int_equal(eccl_auth_start(&a, e, 0), ECCL_OK);
        uint8_t bytes[ECCL_AUTH_HELLO_BYTES + ECCL_AUTH_PROOF_BYTES + 16];
        for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (uint8_t)eccl_splitmix64(&rng);
        size_t real_prefix = round % 3 == 0 ? 0 : round % 3 == 1 ? ECCL_AUTH_MAGIC_BYTES : ECCL_AUTH_HELLO_BYTES;
        memcpy(bytes, real.out, real_prefix);
        size_t at = 0;
        eccl_result rc = ECCL_OK;
        for (;;) {
            size_t n;
            uint8_t *into = eccl_auth_want(&a, &n);
            if (n == 0 || at == sizeof bytes) break;
            assert_true(into >= a.in && into + n <= a.in + sizeof a.in);
            size_t piece = 1 + (size_t)(eccl_splitmix64(&rng) % n);
            if (piece > sizeof bytes - at) piece = sizeof bytes - at;
            memcpy(into, bytes + at, piece);
            at += piece;
            if ((rc = eccl_auth_got(&a, piece)) != ECCL_OK) break;
        }
        assert_int_equal(rc, ECCL_ERR_AUTH);
        assert_false(a.verified);
    }
    eccl_env_real_destroy(e);
}

int main(void)
{
    fiu_init(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_secret),      cmocka_unit_test(test_different_secret_fails_both),
        cmocka_unit_test(test_replay_fails),     cmocka_unit_test(test_reflection_fails),
        cmocka_unit_test(test_frames_or_garbage_refused), cmocka_unit_test(test_settings),
        cmocka_unit_test(test_failpoints),       cmocka_unit_test(test_fuzz),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
