#include "raw_peer.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth_real.h"
#include "env_real.h"
#include "proto/auth.h"

int raw_listen(char *addr, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(fd, 16), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    snprintf(addr, len, "127.0.0.1:%u", ntohs(sa.sin_port));
    return fd;
}

int raw_dial(const char *addr)
{
    const char *colon = strrchr(addr, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1)),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (int i = 0; i < 200; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fd >= 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            raw_auth(fd, 1);
            return fd;
        }
        close(fd);
        usleep(10000);
    }
    fail_msg("cannot reach %s", addr);
    return -1;
}

void raw_auth(int fd, int dialer)
{
    /* An env for its auth table alone (a real one: the settings' secret). */
    static eccl_env *env;
    if (!env) assert_int_equal(eccl_env_real_create("raw", 0, &env), ECCL_OK);
    if (!env->auth) return; /* ECCL_AUTH=0 */
    eccl_auth a;
    assert_int_equal(eccl_auth_start(&a, env, dialer), ECCL_OK);
    for (;;) {
        if (a.out_sent < a.out_len) {
            assert_int_equal(write(fd, a.out + a.out_sent, a.out_len - a.out_sent), (ssize_t)(a.out_len - a.out_sent));
            a.out_sent = a.out_len;
        }
        size_t n;
        uint8_t *into = eccl_auth_want(&a, &n);
        if (n == 0) break;
        raw_read_full(fd, into, n);
        assert_int_equal(eccl_auth_got(&a, n), ECCL_OK);
    }
    assert_true(eccl_auth_done(&a));
}

void raw_send(int fd, const eccl_msg *m)
{
    static uint8_t buf[ECCL_WIRE_HEADER_SIZE + ECCL_WIRE_MAX_CONTROL];
    size_t n = eccl_wire_encode(m, buf, sizeof buf);
    assert_true(n > 0);
    assert_int_equal(write(fd, buf, n), (ssize_t)n);
}

int raw_readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 1;
}

void raw_read_full(int fd, uint8_t *p, size_t n)
{
    while (n) {
        assert_true(raw_readable(fd, 5000));
        ssize_t k = read(fd, p, n);
        assert_true(k > 0);
        p += k;
        n -= (size_t)k;
    }
}

uint8_t *raw_read_frame(int fd, eccl_wire_header *h)
{
    uint8_t head[ECCL_WIRE_HEADER_SIZE];
    raw_read_full(fd, head, sizeof head);
    assert_int_equal(eccl_wire_header_decode(head, h), ECCL_OK);
    uint8_t *f = malloc(ECCL_WIRE_HEADER_SIZE + h->length + 1);
    assert_non_null(f);
    memcpy(f, head, sizeof head);
    raw_read_full(fd, f + ECCL_WIRE_HEADER_SIZE, h->length);
    return f;
}

uint8_t *raw_read_msg(int fd, eccl_msg *m)
{
    for (;;) {
        eccl_wire_header h;
        uint8_t *f = raw_read_frame(fd, &h);
        if (h.type == ECCL_MSG_HEARTBEAT) {
            free(f);
            continue;
        }
        assert_int_equal(eccl_wire_decode(h.type, f + ECCL_WIRE_HEADER_SIZE, h.length, m), ECCL_OK);
        return f;
    }
}

void raw_expect(int fd, uint16_t type, eccl_msg *m, uint8_t **keep)
{
    *keep = raw_read_msg(fd, m);
    if (m->type != type) fail_msg("message %u, want %u", m->type, type);
}

void raw_take_ring(raw_member *p)
{
    eccl_msg m;
    uint8_t *k;
    raw_expect(p->fd, ECCL_MSG_RING, &m, &k);
    p->rank = m.u.ring.rank;
    p->epoch = m.u.ring.epoch;
    free(k);
    eccl_msg rr = {.type = ECCL_MSG_RING_READY};
    rr.u.epoch.epoch = p->epoch;
    raw_send(p->fd, &rr);
}

eccl_master *raw_group_start(raw_member *p, int n)
{
    char maddr[64];
    eccl_master *mst = NULL;
    assert_int_equal(eccl_master_create("127.0.0.1:0", &mst), ECCL_OK);
    assert_int_equal(eccl_master_address(mst, maddr, sizeof maddr), ECCL_OK);
    assert_int_equal(eccl_master_run(mst), ECCL_OK);
    eccl_msg m;
    uint8_t *k;
    for (int i = 0; i < n; i++) {
        p[i].fd = raw_dial(maddr);
        eccl_msg reg = {.type = ECCL_MSG_REGISTER};
        reg.u.reg.peer_timeout_ms = 60000; /* the script sends no heartbeats */
        snprintf(reg.u.reg.p2p_addr, sizeof reg.u.reg.p2p_addr, "127.0.0.1:%d", 41000 + i);
        raw_send(p[i].fd, &reg);
        raw_expect(p[i].fd, ECCL_MSG_WELCOME, &m, &k);
        assert_int_equal(m.u.welcome.accepted, i == 0);
        p[i].id = m.u.welcome.peer_id;
        free(k);
        if (i == 0) raw_take_ring(&p[0]);
    }
    /* The first one votes the others in: a view change of its group of one. */
    eccl_msg vote = {.type = ECCL_MSG_TOPO_VOTE};
    raw_send(p[0].fd, &vote);
    raw_expect(p[0].fd, ECCL_MSG_VIEW_QUERY, &m, &k);
    eccl_msg rep = {.type = ECCL_MSG_VIEW_REPORT};
    rep.u.view.epoch = m.u.epoch.epoch;
    free(k);
    raw_send(p[0].fd, &rep);
    raw_expect(p[0].fd, ECCL_MSG_VIEW_DECIDE, &m, &k);
    free(k);
    for (int i = 0; i < n; i++) raw_take_ring(&p[i]);
    for (int i = 0; i < n; i++) {
        raw_expect(p[i].fd, ECCL_MSG_TOPO_DONE, &m, &k);
        free(k);
    }
    return mst;
}

void raw_group_stop(eccl_master *mst, raw_member *p, int n)
{
    for (int i = 0; i < n; i++)
        if (p[i].fd >= 0) close(p[i].fd);
    eccl_master_stop(mst);
    eccl_master_destroy(mst);
}
