/* net_shm (backends/real/net_shm.c): host-mates' payloads through memory.
 * Both ends live in this process, each with an env of its own: reading
 * one's own memory through process_vm_readv is exactly what a host-mate
 * does, and every step can be ordered at will. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fiu-control.h>
#include <fiu.h>

#include "env.h"
#include "env_real.h"
#include "net_shm.h"
#include "net_tcp.h"

#define SEC 1000000000ull
#define SOON (5 * SEC) /* "eventually", generous for a loaded box */
#define MSG (1u << 20) /* above the default ECCL_SHM_MIN_BYTES */

static uint64_t now_ns(const eccl_env *env) { return env->clock->now_ns(env->clock_ctx); }

static int setup(void **state)
{
    (void)state;
    unsetenv("ECCL_NET");
    unsetenv("ECCL_SHM");
    unsetenv("ECCL_SHM_MIN_BYTES");
    setenv("ECCL_LOG_LEVEL", "error", 1);
    return 0;
}

static eccl_env *mk_env(void)
{
    eccl_env *env = NULL;
    assert_int_equal(eccl_env_real_create("t", 1, &env), ECCL_OK);
    return env;
}

/* Two envs of one process, a listener on a's side and a conn each way of
 * it: `ca` connected by b, `ac` accepted by a. */
typedef struct pair {
    eccl_env *a, *b;
    eccl_listener *l;
    eccl_conn *ac, *bc;
    char bound[ECCL_ADDR_MAX];
    int lu, au, bu; /* their addresses are the user pointers */
} pair;

/* A word each way settles the set-up (the hellos ride before core's first
 * bytes; an acceptor reads 4 bytes before it knows what its peer speaks,
 * and core's first frame is longer). */
static void pair_settle(pair *p)
{
    const char out[4] = "word";
    char in_a[4], in_b[4];
    size_t a_got = 0, b_got = 0, a_sent = 0, b_sent = 0, k;
    uint64_t deadline = now_ns(p->a) + SOON;
    while (a_got < 4 || b_got < 4) {
        eccl_iov ia = {out + a_sent, 4 - a_sent}, ib = {out + b_sent, 4 - b_sent};
        if (b_sent < 4) {
            assert_int_equal(p->b->net->send(p->b->net_ctx, p->bc, &ib, 1, &k), ECCL_OK);
            b_sent += k;
        }
        if (a_sent < 4) {
            assert_int_equal(p->a->net->send(p->a->net_ctx, p->ac, &ia, 1, &k), ECCL_OK);
            a_sent += k;
        }
        assert_int_equal(p->a->net->recv(p->a->net_ctx, p->ac, in_a + a_got, 4 - a_got, &k), ECCL_OK);
        a_got += k;
        assert_int_equal(p->b->net->recv(p->b->net_ctx, p->bc, in_b + b_got, 4 - b_got, &k), ECCL_OK);
        b_got += k;
        assert_true(now_ns(p->a) < deadline);
    }
    assert_memory_equal(in_a, out, 4);
    assert_memory_equal(in_b, out, 4);
}

/* Called between b's dial and a's accept, when set. */
static void (*after_dial)(void);

/* a listens on `listen`, b dials `addr` (NULL: a's listener as bound), a
 * accepts. b is a host-mate with net_shm, or with `b_plain` a process with
 * ECCL_SHM=0 (net_tcp: it writes exactly what it is given). */
static void pair_dial(pair *p, const char *listen, const char *addr, int b_plain)
{
    memset(p, 0, sizeof *p);
    p->a = mk_env();
    if (b_plain) setenv("ECCL_SHM", "0", 1);
    p->b = mk_env();
    unsetenv("ECCL_SHM");
    assert_true(b_plain == (p->b->net == &eccl_net_tcp_ops));
    /* b's own listener names its host: only a host-mate gets a hello. */
    eccl_listener *bl = NULL;
    char bb[ECCL_ADDR_MAX];
    assert_int_equal(p->b->net->listen(p->b->net_ctx, "127.0.0.1:0", &p->bu, &bl, bb), ECCL_OK);
    p->b->net->close_listener(p->b->net_ctx, bl);
    assert_int_equal(p->a->net->listen(p->a->net_ctx, listen, &p->lu, &p->l, p->bound), ECCL_OK);
    assert_int_equal(p->b->net->connect(p->b->net_ctx, addr ? addr : p->bound, &p->bu, &p->bc), ECCL_OK);
    if (after_dial) after_dial();
    uint64_t deadline = now_ns(p->a) + SOON;
    eccl_result r;
    while ((r = p->a->net->accept(p->a->net_ctx, p->l, &p->au, &p->ac)) == ECCL_ERR_AGAIN)
        assert_true(now_ns(p->a) < deadline);
    assert_int_equal(r, ECCL_OK);
}

/* Two host-mates' envs with a settled conn. */
static void pair_open_to(pair *p, const char *listen, const char *addr)
{
    pair_dial(p, listen, addr, 0);
    pair_settle(p);
}

static void pair_close(pair *p)
{
    if (p->ac) p->a->net->close(p->a->net_ctx, p->ac);
    if (p->bc) p->b->net->close(p->b->net_ctx, p->bc);
    p->a->net->close_listener(p->a->net_ctx, p->l);
    eccl_env_real_destroy(p->a);
    eccl_env_real_destroy(p->b);
}

/* Progress both ends, and test req (of `env`) until it is done or fails;
 * returns the outcome. */
static eccl_result finish(pair *p, eccl_env *env, eccl_bulk *req)
{
    uint64_t deadline = now_ns(env) + SOON;
    for (;;) {
        int done = 0;
        if (p->bc) p->b->net->progress(p->b->net_ctx, p->bc);
        eccl_conn *c = env == p->a ? p->ac : p->bc;
        eccl_result rc = env->net->progress(env->net_ctx, c);
        if (rc == ECCL_OK) rc = env->net->test(env->net_ctx, req, &done);
        if (rc != ECCL_OK || done) return rc;
        if (p->ac) p->a->net->progress(p->a->net_ctx, p->ac);
        assert_true(now_ns(env) < deadline);
    }
}

/* One message of MSG bytes from a to b (from_a) or b to a, both ends
 * driven to the end; the bytes must arrive as sent. */
static void one_transfer(pair *p, int from_a, const uint8_t *src, uint8_t *dst)
{
    eccl_env *se = from_a ? p->a : p->b, *re = from_a ? p->b : p->a;
    eccl_conn *sc = from_a ? p->ac : p->bc, *rc = from_a ? p->bc : p->ac;
    eccl_bulk *t, *r;
    assert_int_equal(se->net->isend(se->net_ctx, sc, src, MSG, &t), ECCL_OK);
    assert_int_equal(re->net->irecv(re->net_ctx, rc, dst, MSG, &r), ECCL_OK);
    assert_int_equal(finish(p, re, r), ECCL_OK);
    assert_int_equal(finish(p, se, t), ECCL_OK);
    assert_memory_equal(src, dst, MSG);
}

static void fill(uint8_t *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)(i * 31 + seed * 7 + (i >> 12));
}

/* Host-mates agree on memory; more messages than the slots in flight go,
 * in order, each read once into its receive. */
static void test_bulk_through_memory(void **state)
{
    (void)state;
    pair p;
    pair_open_to(&p, "127.0.0.1:0", NULL);
    assert_int_equal(strncmp(p.bound, ECCL_SHM_ADDR_PREFIX, strlen(ECCL_SHM_ADDR_PREFIX)), 0);
    assert_int_equal(p.a->net->bulk_min(p.a->net_ctx, p.ac), 256u << 10);
    assert_int_equal(p.b->net->bulk_min(p.b->net_ctx, p.bc), 256u << 10);
    enum { N = 9 };
    uint8_t *src = malloc((size_t)N * MSG), *dst = calloc(N, MSG);
    assert_non_null(src);
    assert_non_null(dst);
    eccl_bulk *tx[N], *rx[N];
    for (int i = 0; i < N; i++) {
        fill(src + (size_t)i * MSG, MSG, (unsigned)i);
        assert_int_equal(p.b->net->isend(p.b->net_ctx, p.bc, src + (size_t)i * MSG, MSG, &tx[i]), ECCL_OK);
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(p.a->net->irecv(p.a->net_ctx, p.ac, dst + (size_t)i * MSG, MSG, &rx[i]), ECCL_OK);
        assert_int_equal(finish(&p, p.a, rx[i]), ECCL_OK);
    }
    for (int i = 0; i < N; i++) assert_int_equal(finish(&p, p.b, tx[i]), ECCL_OK);
    assert_memory_equal(src, dst, (size_t)N * MSG);
    /* And the other way, on the same conn. */
    memset(src, 0, MSG);
    one_transfer(&p, 1, dst, src);
    free(src);
    free(dst);
    pair_close(&p);
}

/* A sender that lets go of its buffer (its conn closes: the call failed)
 * while the receiver has not read it: the read is refused, never
 * delivered as if whole. */
static void test_sender_let_go(void **state)
{
    (void)state;
    pair p;
    pair_open_to(&p, "127.0.0.1:0", NULL);
    uint8_t *src = malloc(MSG), *dst = calloc(1, MSG);
    assert_non_null(src);
    assert_non_null(dst);
    fill(src, MSG, 1);
    eccl_bulk *tx, *rx;
    assert_int_equal(p.b->net->isend(p.b->net_ctx, p.bc, src, MSG, &tx), ECCL_OK);
    p.b->net->close(p.b->net_ctx, p.bc); /* the RTS went; its live word is cleared */
    p.bc = NULL;
    assert_int_equal(p.a->net->irecv(p.a->net_ctx, p.ac, dst, MSG, &rx), ECCL_OK);
    assert_int_equal(finish(&p, p.a, rx), ECCL_ERR_CLOSED);
    free(src);
    free(dst);
    pair_close(&p);
}

/* Hosts differ (127.0.0.1 dials 127.0.0.2): plain TCP, no hello; and a
 * failed probe: plain TCP after the hellos. Payloads then stay in the
 * stream (bulk_min 0 both ends), and the stream works. */
static void test_plain_when_not_host_mates(void **state)
{
    (void)state;
    pair p;
    pair_open_to(&p, "127.0.0.2:0", NULL);
    assert_int_equal(p.a->net->bulk_min(p.a->net_ctx, p.ac), 0);
    assert_int_equal(p.b->net->bulk_min(p.b->net_ctx, p.bc), 0);
    pair_close(&p);

    assert_int_equal(fiu_enable("eccl/net_shm/probe", 1, NULL, 0), 0);
    pair_open_to(&p, "127.0.0.1:0", NULL);
    fiu_disable("eccl/net_shm/probe");
    assert_int_equal(p.a->net->bulk_min(p.a->net_ctx, p.ac), 0);
    assert_int_equal(p.b->net->bulk_min(p.b->net_ctx, p.bc), 0);
    pair_close(&p);
}

/* A process without net_shm (ECCL_SHM=0: net_tcp) dials "shm:HOST:PORT"
 * as HOST:PORT; the acceptor hands its first bytes to core as they came. */
static void test_plain_peer_replayed(void **state)
{
    (void)state;
    pair p;
    pair_dial(&p, "127.0.0.1:0", NULL, 1);
    uint64_t deadline = now_ns(p.a) + SOON;
    const char msg[] = "core's first frame";
    char in[sizeof msg] = "";
    size_t sent = 0, got = 0, k;
    while (got < sizeof msg) {
        eccl_iov iov = {msg + sent, sizeof msg - sent};
        if (sent < sizeof msg) {
            assert_int_equal(p.b->net->send(p.b->net_ctx, p.bc, &iov, 1, &k), ECCL_OK);
            sent += k;
        }
        assert_int_equal(p.a->net->recv(p.a->net_ctx, p.ac, in + got, sizeof msg - got, &k), ECCL_OK);
        got += k;
        assert_true(now_ns(p.a) < deadline);
    }
    assert_string_equal(in, msg);
    assert_int_equal(p.a->net->bulk_min(p.a->net_ctx, p.ac), 0);
    pair_close(&p);
}

/* A dialler that opens with the hello's magic and then garbage (another
 * version, a zero pid): the acceptor refuses the conn as malformed, with
 * ECCL_ERR_PROTOCOL, and hands core none of its bytes. */
static void test_malformed_hello(void **state)
{
    (void)state;
    pair p;
    pair_dial(&p, "127.0.0.1:0", NULL, 1);
    uint64_t deadline = now_ns(p.a) + SOON;
    eccl_result r;
    uint8_t junk[80]; /* the hello's size */
    memset(junk, 0xee, sizeof junk);
    memcpy(junk, "ESHM", 4);
    size_t sent = 0, k;
    char in[8];
    for (;;) {
        eccl_iov iov = {junk + sent, sizeof junk - sent};
        if (sent < sizeof junk) {
            assert_int_equal(p.b->net->send(p.b->net_ctx, p.bc, &iov, 1, &k), ECCL_OK);
            sent += k;
        }
        r = p.a->net->recv(p.a->net_ctx, p.ac, in, sizeof in, &k);
        if (r != ECCL_OK) break;
        assert_int_equal(k, 0);
        assert_true(now_ns(p.a) < deadline);
    }
    assert_int_equal(r, ECCL_ERR_PROTOCOL);
    pair_close(&p);
}

/* The abstract unix names on this host (autobound: "@" and 5 hex digits),
 * at most max, into names[i] (without the '@'). */
static int abstract_names(char names[][8], int max)
{
    FILE *f = fopen("/proc/net/unix", "r");
    assert_non_null(f);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < max) {
        char *at = strchr(line, '@');
        if (!at || strlen(at) < 7 || (at[6] != '\n' && at[6] != '\0')) continue;
        memcpy(names[n], at + 1, 5);
        names[n++][5] = '\0';
    }
    fclose(f);
    return n;
}

static int known(char names[][8], int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], name)) return 1;
    return 0;
}

/* Anyone on the host can write to an abstract socket until it is
 * connected (then the kernel refuses strangers): the dialler's control
 * socket is open from its dial until the acceptor's hello names the peer.
 * A stranger's request-to-send (seq 0, an address that is no buffer) sent
 * in that window is dropped, and the first transfer to the dialler runs as
 * if it never came. */
static char g_names_before[256][8];
static int g_nb, g_stranger_sent;

static void send_stranger_rts(void)
{
    static char after[256][8];
    int na = abstract_names(after, 256);
    int s = socket(AF_UNIX, SOCK_DGRAM, 0);
    assert_true(s >= 0);
    struct { /* net_shm's ctl_msg, whole: only the sender check can drop it */
        uint32_t type, flags;
        uint64_t seq, addr, len;
        uint8_t ipc[64];
    } fake = {1, 0, 0, 4096, MSG, {0}};
    for (int i = 0; i < na; i++) {
        if (known(g_names_before, g_nb, after[i])) continue;
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        memcpy(sa.sun_path + 1, after[i], 5);
        socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 6);
        g_stranger_sent += sendto(s, &fake, sizeof fake, 0, (struct sockaddr *)&sa, len) == (ssize_t)sizeof fake;
    }
    close(s);
}

static void test_stranger_datagram_dropped(void **state)
{
    (void)state;
    g_nb = abstract_names(g_names_before, 256);
    g_stranger_sent = 0;
    after_dial = send_stranger_rts;
    pair p;
    pair_open_to(&p, "127.0.0.1:0", NULL);
    after_dial = NULL;
    assert_true(g_stranger_sent >= 1); /* the dialler's control socket */
    assert_int_equal(p.b->net->bulk_min(p.b->net_ctx, p.bc), 256u << 10);
    uint8_t *src = malloc(MSG), *dst = calloc(1, MSG);
    assert_non_null(src);
    assert_non_null(dst);
    fill(src, MSG, 3);
    one_transfer(&p, 1, src, dst);
    free(src);
    free(dst);
    pair_close(&p);
}

/* The two failure paths of a transfer: the read of the peer's memory, and
 * a control message. Each breaks the link with ECCL_ERR_CLOSED; the
 * collectives above treat it as any broken link (test_failpoints_mp). */
static void test_transfer_failpoints(void **state)
{
    (void)state;
    const char *fps[] = {"eccl/net_shm/read", "eccl/net_shm/ctl"};
    for (int f = 0; f < 2; f++) {
        pair p;
        pair_open_to(&p, "127.0.0.1:0", NULL);
        uint8_t *src = calloc(1, MSG), *dst = calloc(1, MSG);
        assert_non_null(src);
        assert_non_null(dst);
        eccl_bulk *tx, *rx;
        assert_int_equal(fiu_enable(fps[f], 1, NULL, FIU_ONETIME), 0);
        eccl_result rc = p.b->net->isend(p.b->net_ctx, p.bc, src, MSG, &tx);
        if (f == 1) {
            assert_int_equal(rc, ECCL_ERR_CLOSED); /* the RTS could not go */
        } else {
            assert_int_equal(rc, ECCL_OK);
            assert_int_equal(p.a->net->irecv(p.a->net_ctx, p.ac, dst, MSG, &rx), ECCL_OK);
            assert_int_equal(finish(&p, p.a, rx), ECCL_ERR_CLOSED);
        }
        fiu_disable(fps[f]);
        free(src);
        free(dst);
        pair_close(&p);
    }
}


/* ---- core's bytes through the inboxes ------------------------------------------- */

/* Mappings of inboxes in this process (both ends live here). */
static int inbox_mappings(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;
    while (f && fgets(line, sizeof line, f)) n += strstr(line, "eccl-shm-inbox") != NULL;
    if (f) fclose(f);
    return n;
}

/* 3 MiB each way through 4 KiB inboxes, in odd-sized pieces: every send
 * that finds no room takes part of it (wrap-around, partial writes), `wait`
 * reports a conn with bytes to read or room to write, and every byte
 * arrives in order. */
static void test_stream_through_inboxes(void **state)
{
    (void)state;
    setenv("ECCL_SHM_RING_BYTES", "4096", 1);
    pair p;
    pair_open_to(&p, "127.0.0.1:0", NULL);
    unsetenv("ECCL_SHM_RING_BYTES");
    assert_int_equal(inbox_mappings(), 4); /* each end: its inbox and the peer's */
    const size_t total = 3u << 20;
    uint8_t *out = malloc(total), *in_a = malloc(total), *in_b = malloc(total);
    assert_true(out && in_a && in_b);
    fill(out, total, 11);
    size_t sa = 0, sb = 0, ga = 0, gb = 0, k, piece = 1;
    uint64_t deadline = now_ns(p.a) + 4 * SOON;
    while (ga < total || gb < total) {
        piece = piece * 7 % 9973 + 1;
        eccl_iov ia = {out + sa, total - sa < piece ? total - sa : piece};
        eccl_iov ib = {out + sb, total - sb < piece ? total - sb : piece};
        if (sa < total) {
            assert_int_equal(p.a->net->send(p.a->net_ctx, p.ac, &ia, 1, &k), ECCL_OK);
            sa += k;
        }
        if (sb < total) {
            assert_int_equal(p.b->net->send(p.b->net_ctx, p.bc, &ib, 1, &k), ECCL_OK);
            sb += k;
        }
        /* what is waiting is reported without blocking */
        void *ready[8];
        int n = p.b->net->wait(p.b->net_ctx, 0, ready, 8);
        int b_ready = 0;
        for (int i = 0; i < n; i++) b_ready |= ready[i] == &p.bu;
        if (sa > gb) assert_true(b_ready); /* a's bytes are in b's inbox */
        size_t want = total - gb < 5000 ? total - gb : 5000;
        assert_int_equal(p.b->net->recv(p.b->net_ctx, p.bc, in_b + gb, want, &k), ECCL_OK);
        gb += k;
        want = total - ga < 3000 ? total - ga : 3000;
        assert_int_equal(p.a->net->recv(p.a->net_ctx, p.ac, in_a + ga, want, &k), ECCL_OK);
        ga += k;
        assert_true(now_ns(p.a) < deadline);
    }
    assert_memory_equal(in_a, out, total);
    assert_memory_equal(in_b, out, total);
    free(out);
    free(in_a);
    free(in_b);
    pair_close(&p);
    assert_int_equal(inbox_mappings(), 0); /* closing unmaps both */
}

/* A thread blocked in `wait` is woken by a host-mate's bytes (the bell). */
static void *late_sender(void *arg)
{
    pair *p = arg;
    usleep(50 * 1000);
    const char w[5] = "bell!";
    eccl_iov iov = {w, sizeof w};
    size_t k = 0;
    p->b->net->send(p->b->net_ctx, p->bc, &iov, 1, &k);
    return (void *)(uintptr_t)k;
}

/* This process's file descriptors whose target starts with `kind`
 * ("anon_inode:[eventfd]", "socket:"); with `unread`, only sockets with
 * bytes waiting to be read. */
static int fds_of(const char *kind, int unread)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[300], what[64];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, what, sizeof what - 1);
        if (k <= 0) continue;
        what[k] = 0;
        if (strncmp(what, kind, strlen(kind)) != 0) continue;
        int waiting = 0;
        if (unread && (ioctl(atoi(e->d_name), FIONREAD, &waiting) != 0 || waiting <= 0)) continue;
        n++;
    }
    closedir(d);
    return n;
}

#define EVENTFD "anon_inode:[eventfd]"

/* A wait blocked on an empty inbox, rung by the peer's send. */
static void wait_rung(pair *p)
{
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, late_sender, p), 0);
    uint64_t t0 = now_ns(p->a);
    void *ready[4];
    int seen = 0;
    while (!seen && now_ns(p->a) - t0 < SOON) {
        int n = p->a->net->wait(p->a->net_ctx, now_ns(p->a) + SOON, ready, 4);
        for (int i = 0; i < n; i++) seen |= ready[i] == &p->au;
    }
    void *sent;
    pthread_join(t, &sent);
    assert_int_equal((uintptr_t)sent, 5);
    assert_true(seen);
}

/* What the late sender sent, read by a. */
static void read_rung(pair *p)
{
    char in[5];
    size_t k = 0;
    assert_int_equal(p->a->net->recv(p->a->net_ctx, p->ac, in, sizeof in, &k), ECCL_OK);
    assert_int_equal(k, 5);
    assert_memory_equal(in, "bell!", 5);
}

static void test_blocked_wait_rung(void **state)
{
    (void)state;
    pair p;
    pair_open_to(&p, "127.0.0.1:0", NULL);
    assert_true(inbox_mappings() > 0);
    uint64_t t0 = now_ns(p.a);
    wait_rung(&p);
    assert_true(now_ns(p.a) - t0 < SOON);
    read_rung(&p);
    pair_close(&p);
}

/* Each end holds the other's doorbell (a copy of the eventfd its wait
 * sleeps on), and a bell is a write to it: the blocked wait wakes with no
 * byte on any stream. Closing the conns closes the copies. */
static void test_doorbell_rings(void **state)
{
    (void)state;
    int before = fds_of(EVENTFD, 0);
    pair p;
    pair_open_to(&p, "127.0.0.1:0", NULL);
    assert_int_equal(fds_of(EVENTFD, 0), before + 4); /* two envs' own, two copies */
    wait_rung(&p);
    assert_int_equal(fds_of("socket:", 1), 0);
    read_rung(&p);
    p.a->net->close(p.a->net_ctx, p.ac);
    p.b->net->close(p.b->net_ctx, p.bc);
    p.ac = p.bc = NULL;
    assert_int_equal(fds_of(EVENTFD, 0), before + 2);
    pair_close(&p);
    assert_int_equal(fds_of(EVENTFD, 0), before);
}

/* The peer's doorbell cannot be copied (another PID namespace, a seccomp
 * filter): bells go as bytes on the stream, and still wake a blocked
 * wait. */
static void test_doorbell_unavailable(void **state)
{
    (void)state;
    int before = fds_of(EVENTFD, 0);
    assert_int_equal(fiu_enable("eccl/net_shm/doorbell", 1, NULL, 0), 0);
    pair p;
    pair_open_to(&p, "127.0.0.1:0", NULL);
    fiu_disable("eccl/net_shm/doorbell");
    assert_true(inbox_mappings() > 0);
    assert_int_equal(fds_of(EVENTFD, 0), before + 2);
    wait_rung(&p);
    assert_true(fds_of("socket:", 1) >= 1); /* the bell, still on a's stream */
    read_rung(&p);
    pair_close(&p);
}

/* A host-mate that corrupts the counters of our inbox (head runs past the
 * ring): the conn breaks with ECCL_ERR_PROTOCOL, nothing is read. */
static void test_inbox_counters_checked(void **state)
{
    (void)state;
    pair p;
    pair_open_to(&p, "127.0.0.1:0", NULL);
    /* The inboxes are the only shared mappings named so; every one gets
     * an impossible head. */
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int hit = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (!strstr(line, "eccl-shm-inbox") || sscanf(line, "%lx-%lx", &lo, &hi) != 2) continue;
        uint64_t *head = (uint64_t *)lo;
        __atomic_store_n(head, *head + (1ull << 40), __ATOMIC_RELEASE);
        hit++;
    }
    if (f) fclose(f);
    assert_true(hit >= 2);
    char in[8];
    size_t k = 0;
    assert_int_equal(p.a->net->recv(p.a->net_ctx, p.ac, in, sizeof in, &k), ECCL_ERR_PROTOCOL);
    assert_int_equal(k, 0);
    pair_close(&p);
}

/* The peer's inbox cannot be mapped (another mount namespace's /proc, a
 * file that is not what the hello says): the conn is plain TCP, bulk
 * included, and no inbox stays mapped. */
static void test_inbox_unmappable(void **state)
{
    (void)state;
    assert_int_equal(fiu_enable("eccl/net_shm/inbox", 1, NULL, 0), 0);
    pair p;
    pair_open_to(&p, "127.0.0.1:0", NULL);
    fiu_disable("eccl/net_shm/inbox");
    assert_int_equal(p.b->net->bulk_min(p.b->net_ctx, p.bc), 0);
    assert_int_equal(p.a->net->bulk_min(p.a->net_ctx, p.ac), 0);
    assert_int_equal(inbox_mappings(), 0);
    pair_close(&p);
}

/* ECCL_SHM_RING_BYTES=0 on one side: no inbox anywhere, frames over TCP,
 * bulk payloads still through memory. */
static void test_inboxes_off(void **state)
{
    (void)state;
    setenv("ECCL_SHM_RING_BYTES", "0", 1);
    pair p;
    pair_dial(&p, "127.0.0.1:0", NULL, 0); /* both envs read it: a's too */
    unsetenv("ECCL_SHM_RING_BYTES");
    pair_settle(&p);
    assert_int_equal(inbox_mappings(), 0);
    assert_int_equal(p.b->net->bulk_min(p.b->net_ctx, p.bc), 256u << 10);
    pair_close(&p);
}

/* Which host payloads go as bulk: none where the conn has inboxes (they
 * carry every size), from ECCL_SHM_HOST_BULK_BYTES when set, and from
 * ECCL_SHM_MIN_BYTES where there are no inboxes. */
static void test_host_payloads_through_inboxes(void **state)
{
    (void)state;
    pair p;
    pair_open_to(&p, "127.0.0.1:0", NULL);
    assert_int_equal(p.a->net->bulk_min(p.a->net_ctx, p.ac), 256u << 10);
    assert_true(p.a->net->bulk_min_host(p.a->net_ctx, p.ac) == SIZE_MAX);
    assert_true(p.b->net->bulk_min_host(p.b->net_ctx, p.bc) == SIZE_MAX);
    pair_close(&p);
    setenv("ECCL_SHM_HOST_BULK_BYTES", "1048576", 1);
    pair_open_to(&p, "127.0.0.1:0", NULL);
    unsetenv("ECCL_SHM_HOST_BULK_BYTES");
    assert_int_equal(p.a->net->bulk_min_host(p.a->net_ctx, p.ac), 1u << 20);
    pair_close(&p);
    setenv("ECCL_SHM_RING_BYTES", "0", 1);
    pair_open_to(&p, "127.0.0.1:0", NULL);
    unsetenv("ECCL_SHM_RING_BYTES");
    assert_int_equal(p.a->net->bulk_min_host(p.a->net_ctx, p.ac), 256u << 10);
    pair_close(&p);
}

int main(void)
{
    fiu_init(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_bulk_through_memory, setup),
        cmocka_unit_test_setup(test_sender_let_go, setup),
        cmocka_unit_test_setup(test_plain_when_not_host_mates, setup),
        cmocka_unit_test_setup(test_plain_peer_replayed, setup),
        cmocka_unit_test_setup(test_malformed_hello, setup),
        cmocka_unit_test_setup(test_stream_through_inboxes, setup),
        cmocka_unit_test_setup(test_blocked_wait_rung, setup),
        cmocka_unit_test_setup(test_doorbell_rings, setup),
        cmocka_unit_test_setup(test_doorbell_unavailable, setup),
        cmocka_unit_test_setup(test_inbox_counters_checked, setup),
        cmocka_unit_test_setup(test_inboxes_off, setup),
        cmocka_unit_test_setup(test_inbox_unmappable, setup),
        cmocka_unit_test_setup(test_host_payloads_through_inboxes, setup),
        cmocka_unit_test_setup(test_stranger_datagram_dropped, setup),
        cmocka_unit_test_setup(test_transfer_failpoints, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
