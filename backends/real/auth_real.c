/* The real backend's eccl_auth_ops: the job's secret, OpenSSL's HMAC-SHA256,
 * CSPRNG and constant-time compare. */
#include "auth_real.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fiu-local.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "env_real.h"
#include "util/config.h"

struct eccl_real_auth {
    size_t len;
    uint8_t key[ECCL_AUTH_SECRET_MAX];
};

static eccl_result real_nonce(void *ctx, uint8_t *out, size_t n)
{
    (void)ctx;
    fiu_return_on("eccl/auth/nonce", ECCL_ERR_SYSTEM);
    return RAND_bytes(out, (int)n) == 1 ? ECCL_OK : ECCL_ERR_SYSTEM;
}

static eccl_result real_mac(void *ctx, const uint8_t *msg, size_t len, uint8_t out[ECCL_AUTH_MAC_BYTES])
{
    const eccl_real_auth *a = ctx;
    unsigned int got = 0;
    fiu_return_on("eccl/auth/mac", ECCL_ERR_SYSTEM);
    if (!HMAC(EVP_sha256(), a->key, (int)a->len, msg, len, out, &got) || got != ECCL_AUTH_MAC_BYTES)
        return ECCL_ERR_SYSTEM;
    return ECCL_OK;
}

static int real_equal(void *ctx, const void *a, const void *b, size_t n)
{
    (void)ctx;
    return CRYPTO_memcmp(a, b, n) == 0;
}

const eccl_auth_ops eccl_real_auth_ops = {
    .size = sizeof(eccl_auth_ops),
    .nonce = real_nonce,
    .mac = real_mac,
    .equal = real_equal,
};

/* Trailing line ends and blanks are not the secret (a file written by echo,
 * a variable set from one). */
static size_t trimmed(const uint8_t *s, size_t n)
{
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    return n;
}

/* The file's bytes into a->key; ECCL_ERR_AUTH, logged, when it cannot be
 * used. */
static eccl_result read_secret_file(eccl_env *env, const char *path, eccl_real_auth *a)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        eccl_real_log(env, ECCL_LOG_ERROR, "ECCL_AUTH_SECRET_FILE %s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return ECCL_ERR_AUTH;
    }
    /* As ssh does with keys: a secret others can read is no secret. */
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        eccl_real_log(env, ECCL_LOG_ERROR,
                      "ECCL_AUTH_SECRET_FILE %s can be read or written by others (mode %03o): chmod 600 it", path,
                      (unsigned)(st.st_mode & 0777));
        close(fd);
        return ECCL_ERR_AUTH;
    }
    size_t n = 0;
    for (;;) {
        ssize_t got = read(fd, a->key + n, sizeof a->key - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            eccl_real_log(env, ECCL_LOG_ERROR, "ECCL_AUTH_SECRET_FILE %s: %s", path, strerror(errno));
            close(fd);
            return ECCL_ERR_AUTH;
        }
        if (got == 0) break;
        n += (size_t)got;
        if (n == sizeof a->key) {
            eccl_real_log(env, ECCL_LOG_ERROR, "ECCL_AUTH_SECRET_FILE %s holds over %u bytes", path,
                          (unsigned)ECCL_AUTH_SECRET_MAX - 1);
            close(fd);
            return ECCL_ERR_AUTH;
        }
    }
    close(fd);
    a->len = trimmed(a->key, n);
    return ECCL_OK;
}

/* The settings that name the secret; an empty one is unset. */
static void secret_settings(const char **path, const char **value)
{
    *path = getenv("ECCL_AUTH_SECRET_FILE");
    *value = getenv("ECCL_AUTH_SECRET");
    if (*path && !**path) *path = NULL;
    if (*value && !**value) *value = NULL;
}

eccl_result eccl_real_auth_create(eccl_env *env, eccl_real_auth **out)
{
    *out = NULL;
    if (eccl_config_uint(env, "ECCL_AUTH", 0, 1, 1) == 0) return ECCL_OK; /* explicitly off */
    const char *path, *value;
    secret_settings(&path, &value);
    if (path && value) {
        eccl_real_log(env, ECCL_LOG_ERROR, "both ECCL_AUTH_SECRET_FILE and ECCL_AUTH_SECRET are set: set one");
        return ECCL_ERR_AUTH;
    }
    if (!path && !value) {
        eccl_real_log(env, ECCL_LOG_ERROR,
                      "no secret for this job: set ECCL_AUTH_SECRET_FILE (a file only its owner can read) or "
                      "ECCL_AUTH_SECRET to the same secret on every process, or ECCL_AUTH=0 to let anyone who "
                      "reaches the ports join (eccl-bench --np, eccl-run and the other launchers make one up)");
        return ECCL_ERR_AUTH;
    }
    eccl_real_auth *a = calloc(1, sizeof *a);
    if (!a) return ECCL_ERR_NO_MEMORY;
    eccl_result rc = ECCL_OK;
    if (path) {
        rc = read_secret_file(env, path, a);
    } else {
        a->len = trimmed((const uint8_t *)value, strlen(value));
        if (a->len >= sizeof a->key) {
            eccl_real_log(env, ECCL_LOG_ERROR, "ECCL_AUTH_SECRET holds over %u bytes", (unsigned)ECCL_AUTH_SECRET_MAX - 1);
            rc = ECCL_ERR_AUTH;
        } else {
            memcpy(a->key, value, a->len);
        }
    }
    if (rc == ECCL_OK && a->len < ECCL_AUTH_SECRET_MIN) {
        eccl_real_log(env, ECCL_LOG_ERROR, "the job's secret (%s) has %zu bytes; it needs at least %u",
                      path ? "ECCL_AUTH_SECRET_FILE" : "ECCL_AUTH_SECRET", a->len,
                      (unsigned)ECCL_AUTH_SECRET_MIN);
        rc = ECCL_ERR_AUTH;
    }
    if (rc != ECCL_OK) {
        eccl_real_auth_free(a);
        return rc;
    }
    *out = a;
    return ECCL_OK;
}

void eccl_real_auth_free(eccl_real_auth *a)
{
    if (!a) return;
    OPENSSL_cleanse(a, sizeof *a);
    free(a);
}

/* For launchers (eccl.h): 64 hex digits of fresh randomness as the job's
 * secret, where the settings name none and do not turn authentication off. */
eccl_result eccl_auth_job_secret(void)
{
    const char *off = getenv("ECCL_AUTH"), *path, *value;
    secret_settings(&path, &value);
    if ((off && strcmp(off, "0") == 0) || path || value) return ECCL_OK;
    uint8_t raw[32];
    char hex[2 * sizeof raw + 1];
    if (RAND_bytes(raw, sizeof raw) != 1) return ECCL_ERR_SYSTEM;
    for (size_t i = 0; i < sizeof raw; i++) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    eccl_result rc = setenv("ECCL_AUTH_SECRET", hex, 1) == 0 ? ECCL_OK : ECCL_ERR_SYSTEM;
    OPENSSL_cleanse(raw, sizeof raw);
    OPENSSL_cleanse(hex, sizeof hex);
    return rc;
}
