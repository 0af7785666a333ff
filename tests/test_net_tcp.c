/* The real backend: TCP net ops over epoll, clock, sync, dev and log. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <fiu-control.h>
#include <fiu.h>

#include "env.h"
#include "env_real.h"
#include "net_tcp.h"

/* Whether the library was built with ECCL_FAILPOINTS; a build that turns
 * them off can say so with -DECCL_TEST_FAILPOINTS=0. */
#ifndef ECCL_TEST_FAILPOINTS
#define ECCL_TEST_FAILPOINTS 1
#endif

#define MS 1000000ull
#define SEC 1000000000ull
/* Bounds for "eventually": generous, so a loaded CI box never flakes. */
#define SOON (5 * SEC)
#define BIG (64u << 20)

static uint64_t now_ns(const eccl_env *env)
{
    return env->clock->now_ns(env->clock_ctx);
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static eccl_env *mk_env(const char *name)
{
    eccl_env *env = NULL;
    assert_int_equal(eccl_env_real_create(name, 0, &env), ECCL_OK);
    assert_non_null(env);
    return env;
}

static int setup(void **state)
{
    (void)state;
    unsetenv("ECCL_LOG_LEVEL");
    unsetenv("ECCL_SOCKET_BUF");
    unsetenv("ECCL_SPIN_NS");
    return 0;
}

/* Runs `wait` once with a short deadline; returns 1 if `user` was reported. */
static int wait_for(eccl_env *env, void *user, uint64_t timeout_ns)
{
    void *ready[8];
    int n = env->net->wait(env->net_ctx, now_ns(env) + timeout_ns, ready, 8);

    assert_true(n >= 0 && n <= 8);
    for (int i = 0; i < n; i++)
        if (ready[i] == user)
            return 1;
    return 0;
}

/* A listener on envs, a conn from envc to it, accepted; the client side has
 * finished its handshake. */
typedef struct pair {
    eccl_env *es, *ec;
    eccl_listener *l;
    eccl_conn *cs, *cc;
    char bound[ECCL_ADDR_MAX];
    int luser, suser, cuser; /* addresses serve as user pointers */
} pair;

static void pair_open(pair *p, eccl_env *es, eccl_env *ec)
{
    uint64_t deadline;
    eccl_result r;
    size_t got;
    char c;

    memset(p, 0, sizeof(*p));
    p->es = es;
    p->ec = ec;
    assert_int_equal(es->net->listen(es->net_ctx, "127.0.0.1:0", &p->luser, &p->l, p->bound),
                     ECCL_OK);
    assert_int_equal(ec->net->connect(ec->net_ctx, p->bound, &p->cuser, &p->cc), ECCL_OK);
    deadline = now_ns(es) + SOON;
    for (;;) {
        r = es->net->accept(es->net_ctx, p->l, &p->suser, &p->cs);
        if (r == ECCL_OK)
            break;
        assert_int_equal(r, ECCL_ERR_AGAIN);
        assert_true(now_ns(es) < deadline);
        wait_for(es, &p->luser, 100 * MS);
    }
    /* recv settles the client's handshake; nothing has been sent yet. */
    assert_int_equal(ec->net->recv(ec->net_ctx, p->cc, &c, 1, &got), ECCL_OK);
    assert_int_equal(got, 0);
}

static void pair_close(pair *p)
{
    if (p->cs)
        p->es->net->close(p->es->net_ctx, p->cs);
    if (p->cc)
        p->ec->net->close(p->ec->net_ctx, p->cc);
    if (p->l)
        p->es->net->close_listener(p->es->net_ctx, p->l);
}

/* ---- clock, sync, dev ---------------------------------------------------- */

static void test_clock_monotonic(void **state)
{
    eccl_env *env = mk_env("clock");
    uint64_t prev = now_ns(env), t0 = prev;

    (void)state;
    assert_int_equal(env->clock->size, sizeof(eccl_clock_ops));
    for (int i = 0; i < 100000; i++) {
        uint64_t t = now_ns(env);
        assert_true(t >= prev);
        prev = t;
    }
    sleep_ms(20);
    assert_true(now_ns(env) - t0 >= 20 * MS);
    eccl_env_real_destroy(env);
}

static void test_cond_deadline_times_out(void **state)
{
    eccl_env *env = mk_env("cond");
    const eccl_sync_ops *s = env->sync;
    eccl_mutex *m;
    eccl_cond *c;
    uint64_t t0, deadline;
    eccl_result r;

    (void)state;
    assert_int_equal(s->size, sizeof(eccl_sync_ops));
    assert_int_equal(s->mutex_create(env->sync_ctx, &m), ECCL_OK);
    assert_int_equal(s->cond_create(env->sync_ctx, &c), ECCL_OK);
    s->lock(env->sync_ctx, m);
    t0 = now_ns(env);
    deadline = t0 + 100 * MS;
    do {
        r = s->cond_wait(env->sync_ctx, c, m, deadline);
        assert_true(r == ECCL_OK || r == ECCL_ERR_TIMEOUT);
        assert_true(now_ns(env) - t0 < SOON);
    } while (r != ECCL_ERR_TIMEOUT);
    assert_true(now_ns(env) >= deadline);
    /* A deadline already past times out at once. */
    assert_int_equal(s->cond_wait(env->sync_ctx, c, m, now_ns(env) - 1), ECCL_ERR_TIMEOUT);
    s->unlock(env->sync_ctx, m);
    s->cond_destroy(env->sync_ctx, c);
    s->mutex_destroy(env->sync_ctx, m);
    eccl_env_real_destroy(env);
}

typedef struct flag_arg {
    eccl_env *env;
    eccl_mutex *m;
    eccl_cond *c;
    int flag;
    char name[16];
} flag_arg;

static void set_flag(void *p)
{
    flag_arg *a = p;

    pthread_getname_np(pthread_self(), a->name, sizeof(a->name));
    sleep_ms(20);
    a->env->sync->lock(a->env->sync_ctx, a->m);
    a->flag = 1;
    a->env->sync->cond_broadcast(a->env->sync_ctx, a->c);
    a->env->sync->unlock(a->env->sync_ctx, a->m);
}

static void test_spawn_join_broadcast(void **state)
{
    eccl_env *env = mk_env("spawn");
    const eccl_sync_ops *s = env->sync;
    flag_arg a = {.env = env};
    eccl_thread *t;
    uint64_t t0;

    (void)state;
    assert_int_equal(s->mutex_create(env->sync_ctx, &a.m), ECCL_OK);
    assert_int_equal(s->cond_create(env->sync_ctx, &a.c), ECCL_OK);
    t0 = now_ns(env);
    assert_int_equal(s->spawn(env->sync_ctx, "abcdefghijklmnopqrstuvwxyz", set_flag, &a, &t),
                     ECCL_OK);
    s->lock(env->sync_ctx, a.m);
    while (!a.flag) {
        /* A far deadline: only the broadcast ends this wait. */
        eccl_result r = s->cond_wait(env->sync_ctx, a.c, a.m, now_ns(env) + 60 * SEC);
        assert_int_equal(r, ECCL_OK);
        assert_true(now_ns(env) - t0 < SOON);
    }
    s->unlock(env->sync_ctx, a.m);
    s->join(env->sync_ctx, t);
    /* pthread names hold 15 characters. */
    assert_string_equal(a.name, "abcdefghijklmno");
    s->cond_destroy(env->sync_ctx, a.c);
    s->mutex_destroy(env->sync_ctx, a.m);
    eccl_env_real_destroy(env);
}

static void test_dev_host(void **state)
{
    eccl_env *env = mk_env("dev");
    const eccl_dev_ops *d = env->dev;
    static const size_t sizes[] = {0, 1, 63, 64, 1000, 1u << 20};
    float a[3] = {1, 2, 3}, b[3] = {10, 20, 30};
    float *x;

    (void)state;
    assert_int_equal(d->size, sizeof(eccl_dev_ops));
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        void *p = NULL;
        assert_int_equal(d->alloc(env->dev_ctx, sizes[i], &p), ECCL_OK);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 64, 0);
        memset(p, 0xab, sizes[i]);
        d->free(env->dev_ctx, p);
    }
    assert_int_equal(d->alloc(env->dev_ctx, sizeof(a), (void **)&x), ECCL_OK);
    d->copy(env->dev_ctx, x, a, sizeof(a));
    d->copy(env->dev_ctx, x, x, sizeof(a));
    assert_memory_equal(x, a, sizeof(a));
    d->reduce(env->dev_ctx, x, b, 3, ECCL_F32, ECCL_SUM);
    assert_true(x[0] == 11.0f && x[1] == 22.0f && x[2] == 33.0f);
    d->scale_div(env->dev_ctx, x, 3, ECCL_F32, 2);
    assert_true(x[0] == 5.5f && x[1] == 11.0f && x[2] == 16.5f);
    d->free(env->dev_ctx, x);
    eccl_env_real_destroy(env);
}

/* ---- log ----------------------------------------------------------------- */

static void test_log_level_parsing(void **state)
{
    static const struct {
        const char *value; /* NULL = unset */
        int level;
    } cases[] = {
        {NULL, ECCL_LOG_WARN},   {"", ECCL_LOG_WARN},      {"none", ECCL_LOG_NONE},
        {"ERROR", ECCL_LOG_ERROR}, {"Warn", ECCL_LOG_WARN}, {"info", ECCL_LOG_INFO},
        {"debug", ECCL_LOG_DEBUG}, {"TRACE", ECCL_LOG_TRACE}, {"0", 0},
        {"1", 1}, {"2", 2}, {"3", 3}, {"4", 4}, {"5", 5},
        {"6", ECCL_LOG_WARN},    {"bogus", ECCL_LOG_WARN}, {"55", ECCL_LOG_WARN},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        eccl_env *env;
        if (cases[i].value)
            setenv("ECCL_LOG_LEVEL", cases[i].value, 1);
        else
            unsetenv("ECCL_LOG_LEVEL");
        env = mk_env("lvl");
        assert_int_equal(env->log_level, cases[i].level);
        eccl_env_real_destroy(env);
    }
    unsetenv("ECCL_LOG_LEVEL");
}

/* Calls the env's log write with stderr redirected to a pipe; returns what
 * came out (NUL-terminated, in buf). */
static void capture_log(eccl_env *env, int level, const char *line, char *buf, size_t len)
{
    int fds[2], saved;
    ssize_t n;

    assert_int_equal(pipe(fds), 0);
    saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fds[1], STDERR_FILENO) >= 0);
    env->log->write(env->log_ctx, level, line);
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    close(fds[1]);
    n = read(fds[0], buf, len - 1);
    buf[n > 0 ? n : 0] = '\0';
    close(fds[0]);
}

static void test_log_format(void **state)
{
    char long_name[100], out[8192], big[4000];
    regex_t re;
    eccl_env *env;

    (void)state;
    memset(long_name, 'n', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    setenv("ECCL_LOG_LEVEL", "info", 1);
    env = mk_env(long_name);
    unsetenv("ECCL_LOG_LEVEL");
    /* The name is cut to fit, never overflowing. */
    assert_int_equal(strlen(env->name), sizeof(env->name) - 1);
    assert_int_equal(env->log->size, sizeof(eccl_log_ops));

    capture_log(env, ECCL_LOG_WARN, "hello world", out, sizeof(out));
    assert_int_equal(regcomp(&re, "^\\[eccl [0-9]+\\.[0-9]{6} n{31}\\] W hello world\n$",
                             REG_EXTENDED | REG_NOSUB),
                     0);
    assert_int_equal(regexec(&re, out, 0, NULL, 0), 0);
    regfree(&re);

    capture_log(env, ECCL_LOG_ERROR, "e", out, sizeof(out));
    assert_non_null(strstr(out, "] E e\n"));
    capture_log(env, ECCL_LOG_INFO, "i", out, sizeof(out));
    assert_non_null(strstr(out, "] I i\n"));
    /* Above the level: nothing. */
    capture_log(env, ECCL_LOG_DEBUG, "d", out, sizeof(out));
    assert_string_equal(out, "");

    /* A line longer than the formatting buffer still comes out whole. */
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    capture_log(env, ECCL_LOG_WARN, big, out, sizeof(out));
    assert_non_null(strstr(out, big));
    assert_int_equal(out[strlen(out) - 1], '\n');
    eccl_env_real_destroy(env);
}

/* ---- net ----------------------------------------------------------------- */

static void test_listen_addresses(void **state)
{
    eccl_env *env = mk_env("listen");
    const eccl_net_ops *n = env->net;
    char bound[ECCL_ADDR_MAX], again[ECCL_ADDR_MAX];
    eccl_listener *l, *l2;
    eccl_conn *c = NULL;
    unsigned port;
    int u;

    (void)state;
    assert_int_equal(n->size, sizeof(eccl_net_ops));
    assert_int_equal(n->listen(env->net_ctx, "127.0.0.1:0", &u, &l, bound), ECCL_OK);
    assert_int_equal(sscanf(bound, "127.0.0.1:%u", &port), 1);
    assert_true(port > 0 && port < 65536);
    /* No connection pending yet. */
    assert_int_equal(n->accept(env->net_ctx, l, &u, &c), ECCL_ERR_AGAIN);
    /* The port is taken while the listener lives. */
    assert_int_equal(n->listen(env->net_ctx, bound, &u, &l2, again), ECCL_ERR_SYSTEM);
    n->close_listener(env->net_ctx, l);
    /* SO_REUSEADDR: the same port binds again at once. */
    assert_int_equal(n->listen(env->net_ctx, bound, &u, &l, again), ECCL_OK);
    assert_string_equal(bound, again);
    n->close_listener(env->net_ctx, l);
    /* Names resolve. */
    assert_int_equal(n->listen(env->net_ctx, "localhost:0", &u, &l, bound), ECCL_OK);
    assert_int_equal(strncmp(bound, "127.", 4), 0);
    n->close_listener(env->net_ctx, l);

    static const char *const bad[] = {"nonsense", "127.0.0.1:", "127.0.0.1:99999",
                                      "127.0.0.1:12x", "127.0.0.1:-1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(n->listen(env->net_ctx, bad[i], &u, &l, bound), ECCL_ERR_INVALID_ARG);
        assert_int_equal(n->connect(env->net_ctx, bad[i], &u, &c), ECCL_ERR_INVALID_ARG);
    }
    eccl_env_real_destroy(env);
}

static int get_int_opt(int fd, int level, int name)
{
    int v = -1;
    socklen_t len = sizeof(v);
    assert_int_equal(getsockopt(fd, level, name, &v, &len), 0);
    return v;
}

static int read_sysctl(const char *path)
{
    FILE *f = fopen(path, "r");
    int v = -1;
    if (f) {
        if (fscanf(f, "%d", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

static void check_socket_options(int fd, int buf)
{
    int wmax = read_sysctl("/proc/sys/net/core/wmem_max");

    assert_true(fd >= 0);
    assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    assert_int_equal(get_int_opt(fd, IPPROTO_TCP, TCP_NODELAY), 1);
    assert_int_equal(get_int_opt(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
    assert_int_equal(get_int_opt(fd, IPPROTO_TCP, TCP_KEEPIDLE), 5);
    assert_int_equal(get_int_opt(fd, IPPROTO_TCP, TCP_KEEPINTVL), 1);
    assert_int_equal(get_int_opt(fd, IPPROTO_TCP, TCP_KEEPCNT), 3);
    /* Linux doubles the request after capping it at wmem_max. */
    if (wmax > 0)
        assert_int_equal(get_int_opt(fd, SOL_SOCKET, SO_SNDBUF), 2 * (buf < wmax ? buf : wmax));
}

static void test_socket_options(void **state)
{
    eccl_env *es, *ec;
    pair p;

    (void)state;
    setenv("ECCL_SOCKET_BUF", "262144", 1);
    es = mk_env("srv");
    ec = mk_env("cli");
    unsetenv("ECCL_SOCKET_BUF");
    pair_open(&p, es, ec);
    check_socket_options(eccl_net_tcp_conn_fd(p.cc), 262144);
    check_socket_options(eccl_net_tcp_conn_fd(p.cs), 262144);
    pair_close(&p);
    eccl_env_real_destroy(es);
    eccl_env_real_destroy(ec);

    /* The default asks for 4 MiB; the kernel may cap it. */
    es = mk_env("srv");
    pair_open(&p, es, es);
    check_socket_options(eccl_net_tcp_conn_fd(p.cc), 4 << 20);
    pair_close(&p);
    eccl_env_real_destroy(es);
}

static void test_connect_reported_then_quiet(void **state)
{
    eccl_env *es = mk_env("srv"), *ec = mk_env("cli");
    char bound[ECCL_ADDR_MAX], buf[16];
    eccl_listener *l;
    eccl_conn *cc, *cs = NULL;
    int lu, su, cu, seen = 0;
    uint64_t t0;
    size_t got;

    (void)state;
    assert_int_equal(es->net->listen(es->net_ctx, "127.0.0.1:0", &lu, &l, bound), ECCL_OK);
    assert_int_equal(ec->net->connect(ec->net_ctx, bound, &cu, &cc), ECCL_OK);
    /* The finished handshake is reported although nobody asked for
     * writability. */
    t0 = now_ns(ec);
    while (!seen) {
        seen = wait_for(ec, &cu, 100 * MS);
        assert_true(now_ns(ec) - t0 < SOON);
    }
    assert_true(wait_for(es, &lu, SOON));
    assert_int_equal(es->net->accept(es->net_ctx, l, &su, &cs), ECCL_OK);
    assert_int_equal(ec->net->recv(ec->net_ctx, cc, buf, sizeof(buf), &got), ECCL_OK);
    assert_int_equal(got, 0);
    /* Once up, with read=1 write=0 and nothing to read, it stays quiet
     * (no level-triggered EPOLLOUT left behind). */
    t0 = now_ns(ec);
    assert_false(wait_for(ec, &cu, 100 * MS));
    assert_true(now_ns(ec) - t0 >= 100 * MS);
    /* write=1: reported writable at once. */
    ec->net->set_interest(ec->net_ctx, cc, 1, 1);
    assert_true(wait_for(ec, &cu, SOON));
    /* read=0 write=0: nothing is reported, not even the peer's hang-up... */
    ec->net->set_interest(ec->net_ctx, cc, 0, 0);
    es->net->close(es->net_ctx, cs);
    assert_false(wait_for(ec, &cu, 100 * MS));
    /* ...until reading is asked for again. */
    ec->net->set_interest(ec->net_ctx, cc, 1, 0);
    assert_true(wait_for(ec, &cu, SOON));
    assert_int_equal(ec->net->recv(ec->net_ctx, cc, buf, sizeof(buf), &got), ECCL_ERR_CLOSED);
    ec->net->close(ec->net_ctx, cc);
    es->net->close_listener(es->net_ctx, l);
    eccl_env_real_destroy(es);
    eccl_env_real_destroy(ec);
}

typedef struct side {
    eccl_env *env;
    eccl_conn *c;
    const uint8_t *out;
    uint8_t *in;
    size_t sent, got;
    uint32_t rng;
    int partial, reported;
    eccl_result err;
} side;

static uint32_t xorshift(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = xorshift(&seed);
        memcpy(p + i, &v, n - i < 4 ? n - i : 4);
    }
}

/* Pumps one end of a conn: sends `out` in random pieces through several
 * iovs and receives into `in` in random lengths, sleeping in `wait` when
 * neither moves. */
static void pump(void *arg)
{
    side *s = arg;
    const eccl_net_ops *n = s->env->net;
    uint64_t deadline = now_ns(s->env) + 120 * SEC;
    int writing = 0;

    while (s->sent < BIG || s->got < BIG) {
        int progress = 0, want;

        if (now_ns(s->env) > deadline) {
            s->err = ECCL_ERR_TIMEOUT;
            return;
        }
        if (s->sent < BIG) {
            eccl_iov iov[6];
            size_t off = s->sent, sent;
            int k = 0;

            while (k < 6 && off < BIG) {
                size_t len = 1 + xorshift(&s->rng) % (384u << 10);
                if (len > BIG - off)
                    len = BIG - off;
                iov[k].base = s->out + off;
                iov[k].len = len;
                off += len;
                k++;
            }
            s->err = n->send(s->env->net_ctx, s->c, iov, k, &sent);
            if (s->err != ECCL_OK)
                return;
            if (sent > 0 && sent < off - s->sent)
                s->partial++;
            s->sent += sent;
            progress |= sent > 0;
        }
        want = s->sent < BIG;
        if (want != writing) {
            n->set_interest(s->env->net_ctx, s->c, 1, want);
            writing = want;
        }
        if (s->got < BIG) {
            size_t len = 1 + xorshift(&s->rng) % (1u << 20), got;

            if (len > BIG - s->got)
                len = BIG - s->got;
            s->err = n->recv(s->env->net_ctx, s->c, s->in + s->got, len, &got);
            if (s->err != ECCL_OK)
                return;
            s->got += got;
            progress |= got > 0;
        }
        if (!progress)
            s->reported += wait_for(s->env, s, 100 * MS);
    }
}

static void test_bulk_both_directions(void **state)
{
    eccl_env *es = mk_env("srv"), *ec = mk_env("cli");
    uint8_t *a_out = malloc(BIG), *b_out = malloc(BIG);
    uint8_t *a_in = malloc(BIG), *b_in = malloc(BIG);
    side a = {0}, b = {0};
    eccl_thread *ta, *tb;
    eccl_conn *cs = NULL, *cc = NULL;
    eccl_listener *l;
    char bound[ECCL_ADDR_MAX];
    uint64_t t0;
    int lu;

    (void)state;
    assert_true(a_out && b_out && a_in && b_in);
    fill(a_out, BIG, 0x12345678u);
    fill(b_out, BIG, 0x9abcdef1u);
    memset(a_in, 0, BIG);
    memset(b_in, 0, BIG);

    /* Each side's user pointer is its side struct, so pump can tell its
     * own conn being reported. */
    assert_int_equal(es->net->listen(es->net_ctx, "127.0.0.1:0", &lu, &l, bound), ECCL_OK);
    assert_int_equal(ec->net->connect(ec->net_ctx, bound, &b, &cc), ECCL_OK);
    t0 = now_ns(es);
    while (es->net->accept(es->net_ctx, l, &a, &cs) == ECCL_ERR_AGAIN) {
        assert_true(now_ns(es) - t0 < SOON);
        wait_for(es, &lu, 100 * MS);
    }
    assert_non_null(cs);

    a = (side){.env = es, .c = cs, .out = a_out, .in = a_in, .rng = 1};
    b = (side){.env = ec, .c = cc, .out = b_out, .in = b_in, .rng = 2};
    assert_int_equal(es->sync->spawn(es->sync_ctx, "pump-a", pump, &a, &ta), ECCL_OK);
    assert_int_equal(ec->sync->spawn(ec->sync_ctx, "pump-b", pump, &b, &tb), ECCL_OK);
    es->sync->join(es->sync_ctx, ta);
    ec->sync->join(ec->sync_ctx, tb);

    assert_int_equal(a.err, ECCL_OK);
    assert_int_equal(b.err, ECCL_OK);
    assert_int_equal(a.sent, BIG);
    assert_int_equal(b.got, BIG);
    assert_true(memcmp(a_out, b_in, BIG) == 0);
    assert_true(memcmp(b_out, a_in, BIG) == 0);
    print_message("bulk: partial sends a=%d b=%d, wait reported a=%d b=%d\n", a.partial,
                  b.partial, a.reported, b.reported);

    es->net->close(es->net_ctx, cs);
    ec->net->close(ec->net_ctx, cc);
    es->net->close_listener(es->net_ctx, l);
    free(a_out);
    free(b_out);
    free(a_in);
    free(b_in);
    eccl_env_real_destroy(es);
    eccl_env_real_destroy(ec);
}

static void test_backpressure_and_writable(void **state)
{
    eccl_env *es = mk_env("srv"), *ec = mk_env("cli");
    static uint8_t chunk[1 << 16], sink[1 << 20];
    eccl_iov iov[3] = {{chunk, 1000}, {chunk, sizeof(chunk)}, {chunk, 7}};
    size_t total = 0, sent, got;
    int partial = 0;
    uint64_t t0;
    pair p;

    (void)state;
    pair_open(&p, es, ec);
    /* Nobody reads: sends shrink to partial, then to zero. */
    t0 = now_ns(ec);
    for (;;) {
        assert_int_equal(ec->net->send(ec->net_ctx, p.cc, iov, 3, &sent), ECCL_OK);
        total += sent;
        if (sent == 0)
            break;
        partial |= sent < 1000 + sizeof(chunk) + 7;
        assert_true(now_ns(ec) - t0 < SOON);
    }
    assert_true(partial);
    assert_true(total > 0);
    /* Full: not reported writable while the peer does not read. */
    ec->net->set_interest(ec->net_ctx, p.cc, 1, 1);
    assert_false(wait_for(ec, &p.cuser, 50 * MS));
    /* Drain the receiver; the sender becomes writable again. */
    t0 = now_ns(es);
    for (size_t left = total; left > 0; left -= got) {
        assert_int_equal(es->net->recv(es->net_ctx, p.cs, sink, sizeof(sink), &got), ECCL_OK);
        if (got == 0)
            wait_for(es, &p.suser, 100 * MS);
        assert_true(now_ns(es) - t0 < SOON);
    }
    assert_true(wait_for(ec, &p.cuser, SOON));
    assert_int_equal(ec->net->send(ec->net_ctx, p.cc, iov, 3, &sent), ECCL_OK);
    assert_true(sent > 0);
    pair_close(&p);
    eccl_env_real_destroy(es);
    eccl_env_real_destroy(ec);
}

static void test_connect_refused(void **state)
{
    eccl_env *env = mk_env("cli");
    char bound[ECCL_ADDR_MAX], buf[8];
    eccl_listener *l;
    eccl_conn *c;
    eccl_result r;
    uint64_t t0;
    size_t got, sent;
    eccl_iov iov = {"x", 1};
    int u;

    (void)state;
    /* A port that was just free: nothing listens there now. */
    assert_int_equal(env->net->listen(env->net_ctx, "127.0.0.1:0", &u, &l, bound), ECCL_OK);
    env->net->close_listener(env->net_ctx, l);

    assert_int_equal(env->net->connect(env->net_ctx, bound, &u, &c), ECCL_OK);
    t0 = now_ns(env);
    for (;;) {
        r = env->net->recv(env->net_ctx, c, buf, sizeof(buf), &got);
        if (r != ECCL_OK)
            break;
        assert_int_equal(got, 0);
        assert_true(now_ns(env) - t0 < SOON);
        wait_for(env, &u, 100 * MS);
    }
    assert_int_equal(r, ECCL_ERR_CONNECT);
    /* The failed conn keeps being reported, so a core that missed the error
     * still gets to it. */
    assert_true(wait_for(env, &u, SOON));
    /* Sticky, and the same from send. */
    assert_int_equal(env->net->send(env->net_ctx, c, &iov, 1, &sent), ECCL_ERR_CONNECT);
    assert_int_equal(sent, 0);
    assert_int_equal(env->net->recv(env->net_ctx, c, buf, sizeof(buf), &got), ECCL_ERR_CONNECT);
    env->net->close(env->net_ctx, c);

    /* send alone also surfaces it. */
    assert_int_equal(env->net->connect(env->net_ctx, bound, &u, &c), ECCL_OK);
    t0 = now_ns(env);
    while ((r = env->net->send(env->net_ctx, c, &iov, 1, &sent)) == ECCL_OK) {
        assert_int_equal(sent, 0);
        assert_true(now_ns(env) - t0 < SOON);
        wait_for(env, &u, 100 * MS);
    }
    assert_int_equal(r, ECCL_ERR_CONNECT);
    env->net->close(env->net_ctx, c);
    eccl_env_real_destroy(env);
}

static void test_peer_close(void **state)
{
    eccl_env *env = mk_env("one");
    static uint8_t chunk[4096];
    eccl_iov iov = {chunk, sizeof(chunk)};
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigset_t pipe_set;
    size_t got, sent;
    eccl_result r;
    uint64_t t0;
    uint8_t buf[64];
    pair p;

    (void)state;
    /* SIGPIPE stays deadly here: only MSG_NOSIGNAL keeps the test alive. */
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_UNBLOCK, &pipe_set, NULL);
    sigaction(SIGPIPE, &dfl, NULL);

    /* Clean close: data already sent arrives, then end of stream. */
    pair_open(&p, env, env);
    assert_int_equal(env->net->send(env->net_ctx, p.cs, &(eccl_iov){"bye", 3}, 1, &sent), ECCL_OK);
    assert_int_equal(sent, 3);
    env->net->close(env->net_ctx, p.cs);
    p.cs = NULL;
    t0 = now_ns(env);
    size_t total = 0;
    while ((r = env->net->recv(env->net_ctx, p.cc, buf + total, sizeof(buf) - total, &got)) ==
           ECCL_OK) {
        total += got;
        if (got == 0)
            assert_true(wait_for(env, &p.cuser, SOON));
        assert_true(now_ns(env) - t0 < SOON);
    }
    assert_int_equal(r, ECCL_ERR_CLOSED);
    assert_int_equal(total, 3);
    assert_memory_equal(buf, "bye", 3);
    /* Writing to the closed peer fails soon, without a signal. */
    t0 = now_ns(env);
    while ((r = env->net->send(env->net_ctx, p.cc, &iov, 1, &sent)) == ECCL_OK) {
        assert_true(now_ns(env) - t0 < SOON);
        wait_for(env, &p.cuser, 10 * MS);
    }
    assert_int_equal(r, ECCL_ERR_CLOSED);
    pair_close(&p);

    /* Abortive close (unread data makes the kernel send RST). */
    pair_open(&p, env, env);
    assert_int_equal(env->net->send(env->net_ctx, p.cc, &iov, 1, &sent), ECCL_OK);
    assert_true(wait_for(env, &p.suser, SOON));
    env->net->close(env->net_ctx, p.cs);
    p.cs = NULL;
    t0 = now_ns(env);
    while ((r = env->net->recv(env->net_ctx, p.cc, buf, sizeof(buf), &got)) == ECCL_OK) {
        assert_int_equal(got, 0);
        assert_true(now_ns(env) - t0 < SOON);
        wait_for(env, &p.cuser, 100 * MS);
    }
    assert_int_equal(r, ECCL_ERR_CLOSED);
    assert_int_equal(env->net->send(env->net_ctx, p.cc, &iov, 1, &sent), ECCL_ERR_CLOSED);
    pair_close(&p);
    eccl_env_real_destroy(env);
}

static void test_wait_deadline(void **state)
{
    eccl_env *env = mk_env("wait");
    void *ready[4];
    uint64_t t0, t1;

    (void)state;
    t0 = now_ns(env);
    assert_int_equal(env->net->wait(env->net_ctx, 0, ready, 4), 0);
    assert_true(now_ns(env) - t0 < SOON);

    t0 = now_ns(env);
    assert_int_equal(env->net->wait(env->net_ctx, t0 + 100 * MS, ready, 4), 0);
    t1 = now_ns(env);
    assert_true(t1 - t0 >= 100 * MS);
    assert_true(t1 - t0 < SOON);

    /* A deadline in the past is a poll. */
    t0 = now_ns(env);
    assert_int_equal(env->net->wait(env->net_ctx, t0 - 1, ready, 4), 0);
    assert_true(now_ns(env) - t0 < SOON);
    eccl_env_real_destroy(env);
}

typedef struct waker {
    eccl_env *env;
    unsigned delay_ms;
    int n;
    uint64_t elapsed;
} waker;

static void wake_later(void *p)
{
    waker *w = p;
    sleep_ms(w->delay_ms);
    w->env->net->wake(w->env->net_ctx);
}

static void wait_long(void *p)
{
    waker *w = p;
    void *ready[4];
    uint64_t t0 = now_ns(w->env);

    w->n = w->env->net->wait(w->env->net_ctx, t0 + 60 * SEC, ready, 4);
    w->elapsed = now_ns(w->env) - t0;
}

static void test_wake(void **state)
{
    eccl_env *env = mk_env("wake");
    waker w = {.env = env, .delay_ms = 50}, w1 = {.env = env}, w2 = {.env = env};
    eccl_thread *t, *t1, *t2;
    void *ready[4];
    uint64_t t0, el;

    (void)state;
    /* From another thread, into a wait that would sleep a minute. */
    assert_int_equal(env->sync->spawn(env->sync_ctx, "waker", wake_later, &w, &t), ECCL_OK);
    t0 = now_ns(env);
    assert_int_equal(env->net->wait(env->net_ctx, t0 + 60 * SEC, ready, 4), 0);
    assert_true(now_ns(env) - t0 < SOON);
    env->sync->join(env->sync_ctx, t);

    /* Before the wait: the next wait returns early. */
    env->net->wake(env->net_ctx);
    env->net->wake(env->net_ctx);
    t0 = now_ns(env);
    assert_int_equal(env->net->wait(env->net_ctx, t0 + 60 * SEC, ready, 4), 0);
    assert_true(now_ns(env) - t0 < SOON);
    /* ...and only that one: the wake-up was consumed. */
    t0 = now_ns(env);
    assert_int_equal(env->net->wait(env->net_ctx, t0 + 100 * MS, ready, 4), 0);
    el = now_ns(env) - t0;
    assert_true(el >= 100 * MS && el < SOON);

    /* Two threads inside wait: one wake ends both. */
    assert_int_equal(env->sync->spawn(env->sync_ctx, "w1", wait_long, &w1, &t1), ECCL_OK);
    assert_int_equal(env->sync->spawn(env->sync_ctx, "w2", wait_long, &w2, &t2), ECCL_OK);
    sleep_ms(100);
    env->net->wake(env->net_ctx);
    env->sync->join(env->sync_ctx, t1);
    env->sync->join(env->sync_ctx, t2);
    assert_int_equal(w1.n, 0);
    assert_int_equal(w2.n, 0);
    assert_true(w1.elapsed < SOON);
    assert_true(w2.elapsed < SOON);
    /* And the eventfd was drained after both left. */
    t0 = now_ns(env);
    assert_int_equal(env->net->wait(env->net_ctx, t0 + 50 * MS, ready, 4), 0);
    assert_true(now_ns(env) - t0 >= 50 * MS);
    eccl_env_real_destroy(env);
}

static void test_failpoints(void **state)
{
    eccl_env *env;
    char bound[ECCL_ADDR_MAX], buf[8];
    eccl_listener *l;
    eccl_conn *c = NULL;
    eccl_iov iov = {"x", 1};
    size_t n;
    int u;
    pair p;

    (void)state;
    if (!ECCL_TEST_FAILPOINTS)
        skip();
    env = mk_env("fiu");
    assert_int_equal(fiu_init(0), 0);
    pair_open(&p, env, env);

    assert_int_equal(fiu_enable("eccl/net/listen", 1, NULL, 0), 0);
    assert_int_equal(env->net->listen(env->net_ctx, "127.0.0.1:0", &u, &l, bound), ECCL_ERR_SYSTEM);
    fiu_disable("eccl/net/listen");

    assert_int_equal(fiu_enable("eccl/net/connect", 1, NULL, 0), 0);
    assert_int_equal(env->net->connect(env->net_ctx, p.bound, &u, &c), ECCL_ERR_CONNECT);
    fiu_disable("eccl/net/connect");

    assert_int_equal(fiu_enable("eccl/net/accept", 1, NULL, 0), 0);
    assert_int_equal(env->net->accept(env->net_ctx, p.l, &u, &c), ECCL_ERR_SYSTEM);
    fiu_disable("eccl/net/accept");

    assert_int_equal(fiu_enable("eccl/net/send", 1, NULL, 0), 0);
    assert_int_equal(env->net->send(env->net_ctx, p.cc, &iov, 1, &n), ECCL_ERR_CLOSED);
    fiu_disable("eccl/net/send");

    assert_int_equal(fiu_enable("eccl/net/recv", 1, NULL, 0), 0);
    assert_int_equal(env->net->recv(env->net_ctx, p.cs, buf, sizeof(buf), &n), ECCL_ERR_CLOSED);
    fiu_disable("eccl/net/recv");

    /* Disabled again: the conn still works. */
    assert_int_equal(env->net->send(env->net_ctx, p.cc, &iov, 1, &n), ECCL_OK);
    assert_int_equal(n, 1);
    pair_close(&p);
    eccl_env_real_destroy(env);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_clock_monotonic, setup),
        cmocka_unit_test_setup(test_cond_deadline_times_out, setup),
        cmocka_unit_test_setup(test_spawn_join_broadcast, setup),
        cmocka_unit_test_setup(test_dev_host, setup),
        cmocka_unit_test_setup(test_log_level_parsing, setup),
        cmocka_unit_test_setup(test_log_format, setup),
        cmocka_unit_test_setup(test_listen_addresses, setup),
        cmocka_unit_test_setup(test_socket_options, setup),
        cmocka_unit_test_setup(test_connect_reported_then_quiet, setup),
        cmocka_unit_test_setup(test_bulk_both_directions, setup),
        cmocka_unit_test_setup(test_backpressure_and_writable, setup),
        cmocka_unit_test_setup(test_connect_refused, setup),
        cmocka_unit_test_setup(test_peer_close, setup),
        cmocka_unit_test_setup(test_wait_deadline, setup),
        cmocka_unit_test_setup(test_wake, setup),
        cmocka_unit_test_setup(test_failpoints, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
