/* net_tls (net_tls.h): an eccl_net_ops table over another one, each conn a
 * TLS 1.3 session through two memory BIOs. Core's user pointers go through
 * to the inner net untouched, so `wait` is the inner one's: a conn is
 * reported when its socket is, and every send or recv first moves what TLS
 * has to write, so handshake records and a write the socket took only in
 * part leave on the next call of either. A recv that returns short has
 * drained both the socket and TLS's own buffer (core's "dry" rule). */
#include "net_tls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fiu-local.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "env_real.h"
#include "proto/auth.h"
#include "util/config.h"

#define PSK_IDENTITY "eccl-psk-1"
#define PSK_LABEL "eccl-tls-psk-1"
#define IO_CHUNK 16384u
/* TLS's own read buffer (read-ahead): ciphertext comes off the socket in
 * reads this large, as the clear stream reads a payload into its place. */
#define READ_BUFFER (256u << 10)
/* Ciphertext a conn holds for its socket before its sends take no more
 * plaintext (back-pressure, as a full socket buffer gives). */
#define OUT_MAX (256u << 10)

enum tls_mode { TLS_OFF, TLS_PSK, TLS_CERT };

typedef struct tls_net {
    const eccl_net_ops *inner;
    void *inner_ctx;
    eccl_env *env;
    SSL_CTX *client, *server;
    BIO_METHOD *bio; /* TLS's ciphertext straight to and from the inner conn */
    enum tls_mode mode;
    uint8_t psk[ECCL_AUTH_MAC_BYTES];
    uint64_t failures; /* conns whose TLS broke: logged now and then */
} tls_net;

typedef struct tconn {
    tls_net *n;
    eccl_conn *in;
    SSL *ssl;
    uint8_t *out;        /* ciphertext the socket has not taken yet */
    size_t out_len, out_cap, out_sent;
    int want_read, want_write; /* core's interest */
    int set_read, set_write;   /* the inner conn's */
    eccl_result err;     /* from now on, what send and recv say */
    int said;            /* its failure is logged */
} tconn;

/* OpenSSL's reason for what just failed into buf ("" if it gave none); its
 * error queue emptied. */
static void ssl_reason(char *buf, size_t len)
{
    unsigned long e = ERR_get_error();
    buf[0] = '\0';
    if (e) ERR_error_string_n(e, buf, len);
    ERR_clear_error();
}

static void fail(tls_net *n, tconn *c, eccl_result rc, const char *what)
{
    if (c->err == ECCL_OK) c->err = rc;
    if (c->said || rc != ECCL_ERR_AUTH) return;
    c->said = 1;
    char buf[256];
    ssl_reason(buf, sizeof buf);
    /* Strangers can make these at will: a line now and then. */
    if (eccl_auth_log_due(++n->failures))
        eccl_real_log(n->env, ECCL_LOG_WARN, "TLS %s (%llu conns so far): %s", what, (unsigned long long)n->failures,
                      buf[0] ? buf : "the peer broke it off");
}

/* Sends what the socket takes of c->out (after a failed handshake too: its
 * alert tells the peer why). */
static void pump_out(tls_net *n, tconn *c)
{
    if (c->err != ECCL_OK && c->err != ECCL_ERR_AUTH) return;
    while (c->out_sent < c->out_len) {
        eccl_iov iov = {c->out + c->out_sent, c->out_len - c->out_sent};
        size_t sent = 0;
        eccl_result rc = n->inner->send(n->inner_ctx, c->in, &iov, 1, &sent);
        if (rc != ECCL_OK) {
            if (c->err == ECCL_OK) c->err = rc;
            return;
        }
        if (!sent) return;
        c->out_sent += sent;
    }
    c->out_len = c->out_sent = 0;
}

/* ---- the BIO under each SSL: the inner conn, with c->out behind it -------- */

/* Ciphertext for the socket: straight to it when nothing waits, the rest
 * onto c->out. Always takes all of it (TLS then never has a write to
 * retry), or fails the conn. */
static int bio_write(BIO *b, const char *buf, int len)
{
    tconn *c = BIO_get_data(b);
    tls_net *n = c->n;
    BIO_clear_retry_flags(b);
    size_t sent = 0;
    if (c->out_sent == c->out_len && (c->err == ECCL_OK || c->err == ECCL_ERR_AUTH)) {
        eccl_iov iov = {buf, (size_t)len};
        eccl_result rc = n->inner->send(n->inner_ctx, c->in, &iov, 1, &sent);
        if (rc != ECCL_OK) {
            if (c->err == ECCL_OK) c->err = rc;
            return len; /* the conn is gone: the bytes with it */
        }
    }
    size_t rest = (size_t)len - sent;
    if (c->out_len + rest > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : IO_CHUNK;
        while (cap < c->out_len + rest) cap *= 2;
        uint8_t *grown = realloc(c->out, cap);
        if (!grown) {
            if (c->err == ECCL_OK) c->err = ECCL_ERR_NO_MEMORY;
            return -1;
        }
        c->out = grown;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, buf + sent, rest);
    c->out_len += rest;
    return len;
}

/* Ciphertext from the socket; "retry" when it has none. */
static int bio_read(BIO *b, char *buf, int len)
{
    tconn *c = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (c->err != ECCL_OK) return -1;
    size_t got = 0;
    eccl_result rc = c->n->inner->recv(c->n->inner_ctx, c->in, buf, (size_t)len, &got);
    if (rc != ECCL_OK) {
        c->err = rc; /* end of stream or reset: the conn's error */
        return -1;
    }
    if (!got) {
        BIO_set_retry_read(b);
        return -1;
    }
    return (int)got;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b, (void)num, (void)ptr;
    return cmd == BIO_CTRL_FLUSH; /* c->out leaves with the next call */
}

static int bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static int bio_destroy(BIO *b)
{
    (void)b;
    return 1;
}

static void update_interest(tls_net *n, tconn *c)
{
    if (c->err != ECCL_OK) return;
    int handshaking = !SSL_is_init_finished(c->ssl);
    int rd = c->want_read || handshaking, wr = c->want_write || c->out_sent < c->out_len;
    if (rd == c->set_read && wr == c->set_write) return;
    c->set_read = rd, c->set_write = wr;
    n->inner->set_interest(n->inner_ctx, c->in, rd, wr);
}

/* Drives the handshake as far as the socket allows: 1 once it is done. */
static int handshake(tls_net *n, tconn *c)
{
    if (c->err != ECCL_OK || SSL_is_init_finished(c->ssl)) return c->err == ECCL_OK;
    int r = SSL_do_handshake(c->ssl);
    if (r == 1) return c->err == ECCL_OK;
    if (SSL_get_error(c->ssl, r) == SSL_ERROR_WANT_READ && c->err == ECCL_OK) return 0;
    if (c->err != ECCL_OK && c->err != ECCL_ERR_AUTH) return 0; /* the conn broke under it */
    int wrote = c->out_len > 0;
    fail(n, c, ECCL_ERR_AUTH, "handshake failed");
    /* OpenSSL sends no alert for bytes that are no TLS at all (an end
     * without ECCL_TLS): then a fatal protocol_version alert (RFC 8446
     * 6.2), which such an end's handshake recognises as TLS
     * (proto/auth.c). */
    if (!wrote && !SSL_get_shutdown(c->ssl)) {
        static const uint8_t alert[] = {21, 3, 3, 0, 2, 2, 70};
        BIO *b = SSL_get_wbio(c->ssl);
        bio_write(b, (const char *)alert, sizeof alert);
    }
    pump_out(n, c);
    return 0;
}

/* ---- the PSK, TLS 1.3 external (RFC 8446 2.2) ---------------------------- */

static tls_net *net_of(SSL *ssl) { return SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)); }

static SSL_SESSION *psk_session(SSL *ssl)
{
    static const unsigned char aes128gcm_sha256[] = {0x13, 0x01};
    const SSL_CIPHER *cipher = SSL_CIPHER_find(ssl, aes128gcm_sha256);
    SSL_SESSION *s = SSL_SESSION_new();
    if (!cipher || !s || !SSL_SESSION_set1_master_key(s, net_of(ssl)->psk, sizeof net_of(ssl)->psk) ||
        !SSL_SESSION_set_cipher(s, cipher) || !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION)) {
        SSL_SESSION_free(s);
        return NULL;
    }
    return s;
}

static int psk_use(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen, SSL_SESSION **sess)
{
    *sess = NULL;
    if (md && !EVP_MD_is_a(md, "SHA2-256")) return 1; /* another hash negotiated: no PSK fits */
    *sess = psk_session(ssl);
    *id = (const unsigned char *)PSK_IDENTITY;
    *idlen = sizeof PSK_IDENTITY - 1;
    return *sess != NULL;
}

static int psk_find(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **sess)
{
    *sess = NULL;
    if (idlen != sizeof PSK_IDENTITY - 1 || memcmp(id, PSK_IDENTITY, idlen) != 0) return 1; /* not ours */
    *sess = psk_session(ssl);
    return *sess != NULL;
}

/* ---- the ops ---------------------------------------------------------------- */

static eccl_result wrap_conn(tls_net *n, eccl_conn *in, int server, eccl_conn **out)
{
    tconn *c = calloc(1, sizeof *c);
    BIO *b = NULL;
    fiu_do_on("eccl/net_tls/new", { free(c); c = NULL; });
    if (!c || !(c->ssl = SSL_new(server ? n->server : n->client)) || !(b = BIO_new(n->bio))) {
        if (c) SSL_free(c->ssl);
        free(c);
        n->inner->close(n->inner_ctx, in);
        return ECCL_ERR_NO_MEMORY;
    }
    c->n = n;
    c->in = in;
    BIO_set_data(b, c);
    SSL_set_bio(c->ssl, b, b); /* one BIO both ways: SSL takes our one reference */
    if (server) SSL_set_accept_state(c->ssl);
    else SSL_set_connect_state(c->ssl);
    c->want_read = c->set_read = 1; /* a new conn reads, as every net's */
    handshake(n, c); /* the client's hello leaves once connected */
    update_interest(n, c);
    *out = (eccl_conn *)c;
    return ECCL_OK;
}

static eccl_result t_listen(void *ctx, const char *addr, void *user, eccl_listener **out, char *bound)
{
    tls_net *n = ctx;
    return n->inner->listen(n->inner_ctx, addr, user, out, bound);
}

static eccl_result t_accept(void *ctx, eccl_listener *l, void *user, eccl_conn **out)
{
    tls_net *n = ctx;
    eccl_conn *in = NULL;
    eccl_result rc = n->inner->accept(n->inner_ctx, l, user, &in);
    return rc != ECCL_OK ? rc : wrap_conn(n, in, 1, out);
}

static void t_close_listener(void *ctx, eccl_listener *l)
{
    tls_net *n = ctx;
    n->inner->close_listener(n->inner_ctx, l);
}

static eccl_result t_connect(void *ctx, const char *addr, void *user, eccl_conn **out)
{
    tls_net *n = ctx;
    eccl_conn *in = NULL;
    eccl_result rc = n->inner->connect(n->inner_ctx, addr, user, &in);
    return rc != ECCL_OK ? rc : wrap_conn(n, in, 0, out);
}

/* Plaintext into TLS: 1 if it took all n bytes (a memory BIO always does). */
static int seal(tls_net *n, tconn *c, const void *p, size_t len)
{
    if (SSL_write(c->ssl, p, (int)len) != (int)len) {
        fail(n, c, ECCL_ERR_CLOSED, "write failed");
        return 0;
    }
    return c->err == ECCL_OK;
}

/* Small pieces (a frame's header, a small payload) are gathered into one
 * record, so a frame costs one record and one write, as it does in the
 * clear; large ones go straight in. */
static eccl_result t_send(void *ctx, eccl_conn *cp, const eccl_iov *iov, int niov, size_t *sent)
{
    tls_net *n = ctx;
    tconn *c = (tconn *)cp;
    uint8_t stage[IO_CHUNK];
    size_t staged = 0;
    *sent = 0;
    pump_out(n, c);
    if (handshake(n, c)) {
        for (int i = 0; i < niov && c->err == ECCL_OK; i++) {
            const uint8_t *p = iov[i].base;
            size_t len = iov[i].len;
            while (len && c->err == ECCL_OK && c->out_len - c->out_sent < OUT_MAX) {
                if (!staged && len >= IO_CHUNK) {
                    size_t k = len < OUT_MAX ? len : OUT_MAX;
                    if (!seal(n, c, p, k)) break;
                    *sent += k, p += k, len -= k;
                    continue;
                }
                size_t k = len < IO_CHUNK - staged ? len : IO_CHUNK - staged;
                memcpy(stage + staged, p, k);
                staged += k, p += k, len -= k;
                if (staged == IO_CHUNK) {
                    if (!seal(n, c, stage, staged)) break;
                    *sent += staged;
                    staged = 0;
                }
            }
            if (len) break; /* full, or failed: the rest waits */
        }
        if (staged && c->err == ECCL_OK && seal(n, c, stage, staged)) *sent += staged;
        pump_out(n, c);
    }
    update_interest(n, c);
    /* Bytes TLS took are the peer's once sent: report them even when the
     * conn failed after (the next call says so). */
    return *sent ? ECCL_OK : c->err;
}

static eccl_result t_recv(void *ctx, eccl_conn *cp, void *buf, size_t len, size_t *got)
{
    tls_net *n = ctx;
    tconn *c = (tconn *)cp;
    *got = 0;
    pump_out(n, c);
    if (handshake(n, c)) {
        while (*got < len && c->err == ECCL_OK) {
            size_t want = len - *got;
            int r = SSL_read(c->ssl, (uint8_t *)buf + *got, want > INT32_MAX ? INT32_MAX : (int)want);
            if (r > 0) {
                *got += (size_t)r;
                continue;
            }
            int e = SSL_get_error(c->ssl, r);
            if (e == SSL_ERROR_WANT_READ && c->err == ECCL_OK) break; /* drained: socket and TLS alike */
            if (e == SSL_ERROR_ZERO_RETURN) c->err = ECCL_ERR_CLOSED;
            else if (c->err == ECCL_OK) fail(n, c, ECCL_ERR_AUTH, "a record failed its check");
        }
        pump_out(n, c); /* what reading made TLS say */
    }
    update_interest(n, c);
    return *got ? ECCL_OK : c->err;
}

static void t_set_interest(void *ctx, eccl_conn *cp, int read, int write)
{
    tls_net *n = ctx;
    tconn *c = (tconn *)cp;
    c->want_read = read, c->want_write = write;
    if (c->err != ECCL_OK) {
        /* Errors are reported whenever any interest is on. */
        n->inner->set_interest(n->inner_ctx, c->in, read, write);
        return;
    }
    update_interest(n, c);
}

static void t_close(void *ctx, eccl_conn *cp)
{
    tls_net *n = ctx;
    tconn *c = (tconn *)cp;
    if (!c) return;
    n->inner->close(n->inner_ctx, c->in);
    SSL_free(c->ssl); /* and its BIOs */
    free(c->out);
    free(c);
}

static int t_wait(void *ctx, uint64_t deadline_ns, void **ready, int max)
{
    tls_net *n = ctx;
    return n->inner->wait(n->inner_ctx, deadline_ns, ready, max);
}

static void t_wake(void *ctx)
{
    tls_net *n = ctx;
    n->inner->wake(n->inner_ctx);
}

static void t_peer_addr(void *ctx, eccl_conn *cp, char *addr)
{
    tls_net *n = ctx;
    tconn *c = (tconn *)cp;
    addr[0] = '\0';
    if (n->inner->size >= offsetof(eccl_net_ops, peer_addr) + sizeof n->inner->peer_addr && n->inner->peer_addr)
        n->inner->peer_addr(n->inner_ctx, c->in, addr);
}

static const eccl_net_ops tls_net_ops = {
    .size = sizeof(eccl_net_ops),
    .listen = t_listen,
    .accept = t_accept,
    .close_listener = t_close_listener,
    .connect = t_connect,
    .send = t_send,
    .recv = t_recv,
    .set_interest = t_set_interest,
    .close = t_close,
    .wait = t_wait,
    .wake = t_wake,
    /* no bulk: payloads ride the stream, where TLS covers them */
    .peer_addr = t_peer_addr,
};

/* ---- set-up ------------------------------------------------------------------- */

static SSL_CTX *new_ctx(tls_net *n, int server)
{
    SSL_CTX *x = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!x) return NULL;
    SSL_CTX_set_app_data(x, n);
    SSL_CTX_set_min_proto_version(x, TLS1_3_VERSION);
    /* Whole writes: a memory BIO takes every record of one. */
    SSL_CTX_clear_mode(x, SSL_MODE_ENABLE_PARTIAL_WRITE);
    SSL_CTX_set_num_tickets(x, 0); /* no resumption: every conn does the handshake */
    SSL_CTX_set_read_ahead(x, 1);
    SSL_CTX_set_default_read_buffer_len(x, READ_BUFFER);
    if (n->mode == TLS_PSK) {
        SSL_CTX_set_ciphersuites(x, "TLS_AES_128_GCM_SHA256");
        if (server) SSL_CTX_set_psk_find_session_callback(x, psk_find);
        else SSL_CTX_set_psk_use_session_callback(x, psk_use);
        return x;
    }
    char cert[1024], key[1024], ca[1024];
    if (!eccl_config_get(n->env, "ECCL_TLS_CERT", cert, sizeof cert) ||
        !eccl_config_get(n->env, "ECCL_TLS_KEY", key, sizeof key) ||
        !eccl_config_get(n->env, "ECCL_TLS_CA", ca, sizeof ca)) {
        eccl_real_log(n->env, ECCL_LOG_ERROR, "ECCL_TLS=cert needs ECCL_TLS_CERT, ECCL_TLS_KEY and ECCL_TLS_CA");
        SSL_CTX_free(x);
        return NULL;
    }
    const char *what = NULL;
    if (SSL_CTX_use_certificate_chain_file(x, cert) != 1) what = "ECCL_TLS_CERT";
    else if (SSL_CTX_use_PrivateKey_file(x, key, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(x) != 1)
        what = "ECCL_TLS_KEY";
    else if (SSL_CTX_load_verify_locations(x, ca, NULL) != 1) what = "ECCL_TLS_CA";
    if (what) {
        char buf[256];
        ssl_reason(buf, sizeof buf);
        eccl_real_log(n->env, ECCL_LOG_ERROR, "ECCL_TLS=cert: %s: %s", what, buf);
        SSL_CTX_free(x);
        return NULL;
    }
    /* Both ends show a certificate the CA signed: that is membership. */
    SSL_CTX_set_verify(x, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    return x;
}

/* ECCL_TLS's mode; -1 for a value that names none. */
static int tls_mode_of(const eccl_env *env, char *mode, size_t len)
{
    snprintf(mode, len, "off");
    eccl_config_get(env, "ECCL_TLS", mode, len);
    if (strcmp(mode, "psk") == 0) return TLS_PSK;
    if (strcmp(mode, "cert") == 0) return TLS_CERT;
    return !mode[0] || strcmp(mode, "off") == 0 || strcmp(mode, "0") == 0 ? TLS_OFF : -1;
}

int eccl_net_tls_asked(const eccl_env *env)
{
    char mode[16];
    return tls_mode_of(env, mode, sizeof mode) > TLS_OFF;
}

eccl_result eccl_net_tls_wrap(eccl_env *env)
{
    char mode[16];
    int m = tls_mode_of(env, mode, sizeof mode);
    if (m < 0) {
        eccl_real_log(env, ECCL_LOG_ERROR, "ECCL_TLS=\"%s\" is not off, psk or cert", mode);
        return ECCL_ERR_INVALID_ARG;
    }
    if (m == TLS_OFF) return ECCL_OK;
    tls_net *n = calloc(1, sizeof *n);
    if (!n) return ECCL_ERR_NO_MEMORY;
    n->env = env;
    n->mode = (enum tls_mode)m;
    n->inner = env->net;
    n->inner_ctx = env->net_ctx;
    if (!(n->bio = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "eccl-conn")) ||
        !BIO_meth_set_write(n->bio, bio_write) || !BIO_meth_set_read(n->bio, bio_read) ||
        !BIO_meth_set_ctrl(n->bio, bio_ctrl) || !BIO_meth_set_create(n->bio, bio_create) ||
        !BIO_meth_set_destroy(n->bio, bio_destroy)) {
        BIO_meth_free(n->bio);
        free(n);
        return ECCL_ERR_NO_MEMORY;
    }
    if (m == TLS_PSK) {
        if (!env->auth) {
            eccl_real_log(env, ECCL_LOG_ERROR, "ECCL_TLS=psk derives its key from the job's secret: set one "
                                               "(ECCL_AUTH_SECRET_FILE), or use ECCL_TLS=cert");
            BIO_meth_free(n->bio);
            free(n);
            return ECCL_ERR_AUTH;
        }
        eccl_result rc = env->auth->mac(env->auth_ctx, (const uint8_t *)PSK_LABEL, sizeof PSK_LABEL - 1, n->psk);
        if (rc != ECCL_OK) {
            BIO_meth_free(n->bio);
            free(n);
            return rc;
        }
    }
    if (!(n->client = new_ctx(n, 0)) || !(n->server = new_ctx(n, 1))) {
        SSL_CTX_free(n->client);
        OPENSSL_cleanse(n->psk, sizeof n->psk);
        BIO_meth_free(n->bio);
        free(n);
        return ECCL_ERR_AUTH;
    }
    env->net = &tls_net_ops;
    env->net_ctx = n;
    return ECCL_OK;
}

void eccl_net_tls_unwrap(eccl_env *env)
{
    if (env->net != &tls_net_ops) return;
    tls_net *n = env->net_ctx;
    env->net = n->inner;
    env->net_ctx = n->inner_ctx;
    SSL_CTX_free(n->client);
    SSL_CTX_free(n->server);
    OPENSSL_cleanse(n->psk, sizeof n->psk);
    BIO_meth_free(n->bio);
    free(n);
}
