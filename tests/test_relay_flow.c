/* A relay's upward flow (core/master/relay.c, "upward"), seen from both
 * ends over loopback TCP: the test plays the relay's parent and its
 * children with plain sockets, and then a relay against the real master.
 *
 * - The relay holds at most one batch unanswered: what children say
 *   meanwhile waits, and goes in one batch once the parent speaks.
 * - Identical frames of consecutive handles fold into one span whatever
 *   order the children sent them in; each child's own frames keep their
 *   order; a handle's first entry comes in handle order.
 * - A stepping span of WELCOMEs from the parent reaches each child as its
 *   own WELCOME.
 * - A RING_SEG from the parent reaches each child of its run as that
 *   child's own RING, filled in from the relay's book (the addresses its
 *   children registered, the ids their WELCOMEs carried); one that names a
 *   child the relay never booked breaks the parent link and reaches no one.
 * - The master answers every batch of a relay, with a heartbeat when it
 *   has nothing to say, and drops a relay that sends a stepping span up.
 * - Newcomers that register during one batch go up as one REGISTER_SEG; a
 *   child relay's passes its parent relay refolded; the master registers
 *   its newcomers as their REGISTERs would, and drops a relay whose
 *   REGISTER_SEG names a handle it knows, or a peer that sends one. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "eccl.h"
#include "proto/wire.h"
#include "raw_peer.h"

/* The next frame that is not a heartbeat: a batch. */
static uint8_t *read_batch(int fd, eccl_msg *m)
{
    uint8_t *f = raw_read_msg(fd, m);
    assert_int_equal(m->type, ECCL_MSG_BATCH);
    return f;
}

typedef struct entry {
    uint32_t handle, count;
    uint16_t type;
} entry;

static uint32_t entries(const eccl_msg *b, entry *e, uint32_t max)
{
    uint32_t pos = 0, n = 0, h, c, len;
    const uint8_t *f;
    int step;
    while (eccl_wire_batch_next_step(&b->u.batch, &pos, &h, &c, &step, &f, &len)) {
        assert_true(n < max);
        eccl_wire_header hdr = {0};
        if (len) assert_int_equal(eccl_wire_header_decode(f, &hdr), ECCL_OK);
        e[n++] = (entry){h, c, len ? hdr.type : 0};
    }
    return n;
}

/* Entry `at` of batch b is a REGISTER_SEG of these n addresses. */
static void assert_register_seg(const eccl_msg *b, uint32_t at, const char *const *addr, uint32_t n)
{
    uint32_t pos = 0, h, c, len;
    const uint8_t *f = NULL;
    for (uint32_t k = 0; k <= at; k++) assert_true(eccl_wire_batch_next(&b->u.batch, &pos, &h, &c, &f, &len));
    eccl_msg m;
    assert_int_equal(eccl_wire_decode_entry(f, len, &m), ECCL_OK);
    assert_int_equal(m.type, ECCL_MSG_REGISTER_SEG);
    assert_int_equal(m.u.register_seg.n, n);
    char got[ECCL_ADDR_MAX];
    uint32_t p = 0, i = 0;
    while (eccl_wire_register_seg_next(&m.u.register_seg, &p, &i, got)) assert_string_equal(got, addr[i - 1]);
    assert_int_equal(i, n);
}

static eccl_msg reg_msg(int i)
{
    eccl_msg m = {.type = ECCL_MSG_REGISTER};
    snprintf(m.u.reg.p2p_addr, sizeof m.u.reg.p2p_addr, "127.0.0.1:%d", 40000 + i);
    return m;
}

/* A relay whose parent is the test: its address into raddr, the parent's
 * listener into *lfd; returns the parent's end of the relay's link, its
 * RELAY_HELLO read. */
static int relay_under_test(char raddr[64], int *lfd, eccl_relay **r)
{
    char paddr[64];
    *lfd = raw_listen(paddr, sizeof paddr);
    assert_int_equal(eccl_relay_create("127.0.0.1:0", paddr, r), ECCL_OK);
    assert_int_equal(eccl_relay_address(*r, raddr, 64), ECCL_OK);
    assert_int_equal(eccl_relay_run(*r), ECCL_OK);
    assert_true(raw_readable(*lfd, 5000));
    int up = accept(*lfd, NULL, NULL);
    if (up >= 0) raw_auth(up, 0);
    assert_true(up >= 0);
    eccl_wire_header h;
    free(raw_read_frame(up, &h));
    assert_int_equal(h.type, ECCL_MSG_RELAY_HELLO);
    return up;
}

static void test_relay_holds_one_batch_and_folds(void **state)
{
    (void)state;
    char raddr[64];
    int lfd;
    eccl_relay *r = NULL;
    int up = relay_under_test(raddr, &lfd, &r);
    eccl_wire_header h;

    /* Child 0 registers: one batch goes up, and stays unanswered. */
    int kid[3];
    kid[0] = raw_dial(raddr);
    eccl_msg m = reg_msg(0), b;
    raw_send(kid[0], &m);
    entry e[8];
    uint8_t *f = read_batch(up, &b);
    assert_int_equal(entries(&b, e, 8), 1);
    assert_int_equal(e[0].handle, 0);
    assert_int_equal(e[0].type, ECCL_MSG_REGISTER);
    free(f);
    /* Children 1 and 2 register meanwhile: nothing goes up... */
    for (int i = 1; i < 3; i++) {
        kid[i] = raw_dial(raddr);
        m = reg_msg(i);
        raw_send(kid[i], &m);
        usleep(50000);
    }
    usleep(100000);
    assert_false(raw_readable(up, 0));
    /* ...until the parent speaks: then both, in one batch, as one
     * REGISTER_SEG for handles 1 and 2 with their addresses in order. */
    eccl_msg hb = {.type = ECCL_MSG_HEARTBEAT};
    raw_send(up, &hb);
    f = read_batch(up, &b);
    assert_int_equal(entries(&b, e, 8), 1);
    assert_int_equal(e[0].handle, 1);
    assert_int_equal(e[0].count, 1);
    assert_int_equal(e[0].type, ECCL_MSG_REGISTER_SEG);
    assert_register_seg(&b, 0, (const char *[]){"127.0.0.1:40001", "127.0.0.1:40002"}, 2);
    free(f);

    /* Unanswered again: the children say RING_READY in reverse handle
     * order, child 0 then a peers-pending query. */
    eccl_msg rr = {.type = ECCL_MSG_RING_READY};
    rr.u.epoch.epoch = 1;
    eccl_msg pq = {.type = ECCL_MSG_PENDING_QUERY};
    raw_send(kid[2], &rr);
    usleep(20000);
    raw_send(kid[1], &rr);
    usleep(20000);
    raw_send(kid[0], &rr);
    raw_send(kid[0], &pq);
    usleep(100000);
    assert_false(raw_readable(up, 0));
    raw_send(up, &hb);
    /* One span for the three votes, then child 0's query after its vote. */
    f = read_batch(up, &b);
    assert_int_equal(entries(&b, e, 8), 2);
    assert_int_equal(e[0].handle, 0);
    assert_int_equal(e[0].count, 3);
    assert_int_equal(e[0].type, ECCL_MSG_RING_READY);
    assert_int_equal(e[1].handle, 0);
    assert_int_equal(e[1].count, 1);
    assert_int_equal(e[1].type, ECCL_MSG_PENDING_QUERY);
    free(f);

    /* Down: a stepping span of WELCOMEs (consecutive ids for consecutive
     * handles, one entry) reaches each child as its own WELCOME. */
    eccl_wire_batch wb = {0};
    eccl_msg w = {.type = ECCL_MSG_WELCOME};
    for (uint32_t i = 0; i < 3; i++) {
        w.u.welcome.peer_id = 50 + i;
        assert_int_equal(eccl_wire_batch_add(&wb, i, &w), ECCL_OK);
    }
    assert_int_equal(wb.n, 1);
    uint32_t blen;
    uint8_t *bf = eccl_wire_batch_take(&wb, &blen);
    assert_int_equal(write(up, bf, blen), (ssize_t)blen);
    free(bf);
    for (int i = 0; i < 3; i++) {
        eccl_msg got;
        for (;;) {
            f = raw_read_frame(kid[i], &h);
            if (h.type != ECCL_MSG_HEARTBEAT) break;
            free(f);
        }
        assert_int_equal(h.type, ECCL_MSG_WELCOME);
        assert_int_equal(eccl_wire_decode(h.type, f + ECCL_WIRE_HEADER_SIZE, h.length, &got), ECCL_OK);
        assert_int_equal(got.u.welcome.peer_id, 50 + (uint64_t)i);
        free(f);
    }

    /* A child that hangs up is a gone entry, after what it said. */
    raw_send(up, &hb);
    raw_send(kid[1], &rr);
    close(kid[1]);
    f = read_batch(up, &b);
    uint32_t n = entries(&b, e, 8);
    if (n == 1) { /* the hang-up came in the next batch */
        assert_int_equal(e[0].type, ECCL_MSG_RING_READY);
        free(f);
        raw_send(up, &hb);
        f = read_batch(up, &b);
        n = entries(&b, e, 8);
        assert_int_equal(n, 1);
        assert_int_equal(e[0].type, 0);
    } else {
        assert_int_equal(n, 2);
        assert_int_equal(e[0].type, ECCL_MSG_RING_READY);
        assert_int_equal(e[1].type, 0);
    }
    assert_int_equal(e[n - 1].handle, 1);
    free(f);

    close(kid[0]);
    close(kid[2]);
    close(up);
    close(lfd);
    eccl_relay_destroy(r);
}

/* The next frame of fd that is not a heartbeat, decoded into m. */
static void read_decoded(int fd, eccl_msg *m)
{
    eccl_wire_header h;
    uint8_t *f;
    for (;;) {
        f = raw_read_frame(fd, &h);
        if (h.type != ECCL_MSG_HEARTBEAT) break;
        free(f);
    }
    assert_int_equal(eccl_wire_decode(h.type, f + ECCL_WIRE_HEADER_SIZE, h.length, m), ECCL_OK);
    free(f);
}

static void send_one(int up, uint32_t handle, const eccl_msg *m)
{
    eccl_wire_batch wb = {0};
    assert_int_equal(eccl_wire_batch_add(&wb, handle, m), ECCL_OK);
    uint32_t len;
    uint8_t *f = eccl_wire_batch_take(&wb, &len);
    assert_int_equal(write(up, f, len), (ssize_t)len);
    free(f);
}

static void assert_ref(const eccl_wire_peer_ref *r, uint64_t id, const char *addr)
{
    assert_int_equal(r->peer_id, id);
    assert_string_equal(r->addr, addr);
}

static void test_relay_expands_ring_seg(void **state)
{
    (void)state;
    char raddr[64];
    int lfd;
    eccl_relay *r = NULL;
    int up = relay_under_test(raddr, &lfd, &r);

    /* Three children register (handles 0..2) and are welcomed as 50..52. */
    int kid[3];
    eccl_msg b, hb = {.type = ECCL_MSG_HEARTBEAT};
    for (int i = 0; i < 3; i++) {
        kid[i] = raw_dial(raddr);
        eccl_msg m = reg_msg(i);
        raw_send(kid[i], &m);
        free(read_batch(up, &b));
        raw_send(up, &hb);
    }
    eccl_wire_batch wb = {0};
    eccl_msg w = {.type = ECCL_MSG_WELCOME};
    for (uint32_t i = 0; i < 3; i++) {
        w.u.welcome.peer_id = 50 + i;
        assert_int_equal(eccl_wire_batch_add(&wb, i, &w), ECCL_OK);
    }
    uint32_t blen;
    uint8_t *bf = eccl_wire_batch_take(&wb, &blen);
    assert_int_equal(write(up, bf, blen), (ssize_t)blen);
    free(bf);
    eccl_msg got;
    for (int i = 0; i < 3; i++) read_decoded(kid[i], &got);

    /* Ranks 1..3 of 5 are handles 2, 0, 1 in that order: rank 1 is the
     * run's root (parent 11 outside; children ranks 2 and 3, then run root
     * 12), and the run's ends lead to 9 and 10. */
    const uint32_t handles[] = {2, 0, 1};
    eccl_msg seg = {.type = ECCL_MSG_RING_SEG};
    seg.u.ring_seg = (eccl_msg_ring_seg){.peer_group = 0, .epoch = 4, .world_size = 5, .first_rank = 1,
                                         .host_ranks = 3, .root_child = {12, 0}, .n = 3,
                                         .handles = handles};
    seg.u.ring_seg.prev.peer_id = 9;
    strcpy(seg.u.ring_seg.prev.addr, "p:9");
    seg.u.ring_seg.next.peer_id = 10;
    strcpy(seg.u.ring_seg.next.addr, "n:10");
    seg.u.ring_seg.root_parent.peer_id = 11;
    strcpy(seg.u.ring_seg.root_parent.addr, "r:11");
    send_one(up, 2, &seg);
    const struct {
        int kid;
        uint32_t rank;
        uint64_t prev, next, parent, child[3];
        const char *prev_addr, *next_addr, *parent_addr;
    } want[] = {
        {2, 1, 9, 50, 11, {50, 51, 12}, "p:9", "127.0.0.1:40000", "r:11"},
        {0, 2, 52, 51, 52, {0, 0, 0}, "127.0.0.1:40002", "127.0.0.1:40001", "127.0.0.1:40002"},
        {1, 3, 50, 10, 52, {0, 0, 0}, "127.0.0.1:40000", "n:10", "127.0.0.1:40002"},
    };
    for (int i = 0; i < 3; i++) {
        memset(&got, 0, sizeof got);
        read_decoded(kid[want[i].kid], &got);
        assert_int_equal(got.type, ECCL_MSG_RING);
        const eccl_msg_ring *g = &got.u.ring;
        assert_int_equal(g->epoch, 4);
        assert_int_equal(g->world_size, 5);
        assert_int_equal(g->rank, want[i].rank);
        assert_int_equal(g->host_ranks, 3);
        assert_ref(&g->prev, want[i].prev, want[i].prev_addr);
        assert_ref(&g->next, want[i].next, want[i].next_addr);
        assert_ref(&g->tree_parent, want[i].parent, want[i].parent_addr);
        for (int k = 0; k < 3; k++) assert_int_equal(g->tree_child[k], want[i].child[k]);
        assert_int_equal(g->tree_child[3], 0);
    }

    /* A run naming handle 3, which no child registered: the relay breaks
     * its parent link (the parent sees the end of the stream) and none of
     * its children hears a thing. */
    const uint32_t stranger[] = {1, 3};
    seg.u.ring_seg.n = 2;
    seg.u.ring_seg.handles = stranger;
    send_one(up, 1, &seg);
    assert_true(raw_readable(up, 5000));
    uint8_t byte;
    ssize_t n;
    while ((n = read(up, &byte, 1)) > 0) {
    }
    assert_int_equal(n, 0);
    for (int i = 0; i < 3; i++) {
        uint8_t head[ECCL_WIRE_HEADER_SIZE];
        while (raw_readable(kid[i], 200)) {
            n = recv(kid[i], head, sizeof head, MSG_WAITALL);
            if (n <= 0) break; /* the relay let its children go with the parent */
            eccl_wire_header kh;
            assert_int_equal(n, (ssize_t)sizeof head);
            assert_int_equal(eccl_wire_header_decode(head, &kh), ECCL_OK);
            assert_int_equal(kh.type, ECCL_MSG_HEARTBEAT); /* no payload */
        }
        close(kid[i]);
    }
    close(up);
    close(lfd);
    eccl_relay_destroy(r);
}

/* The far end closes fd (what it still sends meanwhile is read away). */
static void assert_closes(int fd)
{
    int closed = 0;
    for (int i = 0; i < 50 && !closed; i++) {
        uint8_t junk[256];
        assert_true(raw_readable(fd, 5000));
        ssize_t k = read(fd, junk, sizeof junk);
        closed = k <= 0;
    }
    assert_true(closed);
}

/* A REGISTER_SEG of reg_msg(first .. first + n - 1)'s addresses. */
static eccl_msg seg_msg(int first, uint32_t n, char (*store)[ECCL_ADDR_MAX], const char **addrs)
{
    for (uint32_t i = 0; i < n; i++) {
        eccl_msg r = reg_msg(first + (int)i);
        memcpy(store[i], r.u.reg.p2p_addr, ECCL_ADDR_MAX);
        addrs[i] = store[i];
    }
    eccl_msg m = {.type = ECCL_MSG_REGISTER_SEG};
    m.u.register_seg.n = n;
    m.u.register_seg.addrs = addrs;
    return m;
}

/* A child relay's REGISTER_SEG passes a relay refolded into the relay's
 * own handles (one entry again); a plain peer that sends one speaks for
 * others, and is dropped before it gets a handle. */
static void test_relay_refolds_register_seg(void **state)
{
    (void)state;
    char raddr[64];
    int lfd;
    eccl_relay *r = NULL;
    int up = relay_under_test(raddr, &lfd, &r);
    char store[3][ECCL_ADDR_MAX];
    const char *addrs[3];

    /* A peer first, so the child relay's handles are not ours. */
    int peer = raw_dial(raddr);
    eccl_msg m = reg_msg(9), b;
    raw_send(peer, &m);
    entry e[4];
    uint8_t *f = read_batch(up, &b);
    assert_int_equal(entries(&b, e, 4), 1);
    assert_int_equal(e[0].type, ECCL_MSG_REGISTER);
    free(f);

    int sub = raw_dial(raddr);
    eccl_msg hello = {.type = ECCL_MSG_RELAY_HELLO};
    raw_send(sub, &hello);
    m = seg_msg(0, 3, store, addrs);
    send_one(sub, 0, &m);
    usleep(100000);
    eccl_msg hb = {.type = ECCL_MSG_HEARTBEAT};
    raw_send(up, &hb);
    f = read_batch(up, &b);
    assert_int_equal(entries(&b, e, 4), 1);
    assert_int_equal(e[0].handle, 1);
    assert_int_equal(e[0].type, ECCL_MSG_REGISTER_SEG);
    assert_register_seg(&b, 0, addrs, 3);
    free(f);

    /* A span of REGISTER_SEGs means nothing: the child relay goes (a
     * gone entry for each of its three handles). */
    eccl_wire_batch wb = {0};
    m = seg_msg(3, 2, store, addrs);
    assert_int_equal(eccl_wire_batch_add(&wb, 3, &m), ECCL_OK);
    assert_int_equal(eccl_wire_batch_add(&wb, 4, &m), ECCL_OK);
    assert_int_equal(wb.n, 1);
    uint32_t len;
    uint8_t *frame = eccl_wire_batch_take(&wb, &len);
    assert_int_equal(write(sub, frame, len), (ssize_t)len);
    free(frame);
    assert_closes(sub);
    close(sub);
    raw_send(up, &hb);
    f = read_batch(up, &b);
    assert_int_equal(entries(&b, e, 4), 3);
    for (uint32_t i = 0; i < 3; i++) {
        assert_int_equal(e[i].handle, 1 + i);
        assert_int_equal(e[i].type, 0);
    }
    free(f);

    /* A peer's own REGISTER_SEG: dropped, and nothing goes up for it. */
    int liar = raw_dial(raddr);
    m = seg_msg(5, 2, store, addrs);
    raw_send(liar, &m);
    assert_closes(liar);
    close(liar);
    raw_send(up, &hb);
    usleep(100000);
    assert_false(raw_readable(up, 0));

    close(peer);
    close(up);
    close(lfd);
    eccl_relay_destroy(r);
}

/* A running master, and the test's end of a relay link to it (its
 * RELAY_HELLO sent). */
static int relay_of_master(eccl_master **mst)
{
    char maddr[64];
    assert_int_equal(eccl_master_create("127.0.0.1:0", mst), ECCL_OK);
    assert_int_equal(eccl_master_address(*mst, maddr, sizeof maddr), ECCL_OK);
    assert_int_equal(eccl_master_run(*mst), ECCL_OK);
    int fd = raw_dial(maddr);
    eccl_msg hello = {.type = ECCL_MSG_RELAY_HELLO};
    raw_send(fd, &hello);
    return fd;
}

/* The master's answer to three newcomers' registrations, read into b:
 * the first accepted alone (its WELCOME, then its ring as a RING_SEG of
 * one rank, which the relay expands, addressed by its handle), the other
 * two with consecutive ids, so their WELCOMEs are one stepping span. */
static uint8_t *read_three_newcomers(int fd, eccl_msg *b)
{
    entry e[4];
    uint8_t *f = read_batch(fd, b);
    assert_int_equal(entries(b, e, 4), 3);
    assert_int_equal(e[0].type, ECCL_MSG_WELCOME);
    assert_int_equal(e[1].type, ECCL_MSG_RING_SEG);
    assert_int_equal(e[1].handle, 0);
    assert_int_equal(e[2].type, ECCL_MSG_WELCOME);
    assert_int_equal(e[2].handle, 1);
    assert_int_equal(e[2].count, 2);
    return f;
}

static void test_master_answers_every_batch(void **state)
{
    (void)state;
    eccl_master *mst = NULL;
    int fd = relay_of_master(&mst);

    /* Three registrations in one batch: the answer is a batch
     * (read_three_newcomers). */
    eccl_wire_batch wb = {0};
    for (int i = 0; i < 3; i++) {
        eccl_msg reg = reg_msg(i);
        assert_int_equal(eccl_wire_batch_add(&wb, (uint32_t)i, &reg), ECCL_OK);
    }
    uint32_t len;
    uint8_t *frame = eccl_wire_batch_take(&wb, &len);
    assert_int_equal(write(fd, frame, len), (ssize_t)len);
    free(frame);
    eccl_msg b;
    uint8_t *f = read_three_newcomers(fd, &b);
    free(f);

    /* A stale RING_READY: nothing to say, yet a heartbeat answers it at
     * once (the master's own come every quarter timeout, 1.25 s). */
    eccl_msg rr = {.type = ECCL_MSG_RING_READY};
    rr.u.epoch.epoch = 77;
    assert_int_equal(eccl_wire_batch_add(&wb, 0, &rr), ECCL_OK);
    frame = eccl_wire_batch_take(&wb, &len);
    assert_int_equal(write(fd, frame, len), (ssize_t)len);
    free(frame);
    assert_true(raw_readable(fd, 500));
    eccl_wire_header h;
    f = raw_read_frame(fd, &h);
    assert_int_equal(h.type, ECCL_MSG_HEARTBEAT);
    free(f);

    /* A stepping span only goes down: upward it breaks the protocol, and
     * the master drops the relay (its connection closes). */
    eccl_msg w = {.type = ECCL_MSG_WELCOME};
    for (uint32_t i = 0; i < 2; i++) {
        w.u.welcome.peer_id = 9 + i;
        assert_int_equal(eccl_wire_batch_add(&wb, 3 + i, &w), ECCL_OK);
    }
    assert_int_equal(wb.n, 1);
    frame = eccl_wire_batch_take(&wb, &len);
    assert_int_equal(write(fd, frame, len), (ssize_t)len);
    free(frame);
    assert_closes(fd);
    close(fd);
    eccl_master_stop(mst);
    eccl_master_destroy(mst);
}

/* A relay's REGISTER_SEG registers its newcomers as their REGISTERs would
 * (the same answer); one that names a handle the master knows already
 * breaks the protocol, and the master drops the relay. */
static void test_master_takes_register_seg(void **state)
{
    (void)state;
    eccl_master *mst = NULL;
    int fd = relay_of_master(&mst);
    char store[3][ECCL_ADDR_MAX];
    const char *addrs[3];
    eccl_msg m = seg_msg(0, 3, store, addrs), b;
    send_one(fd, 0, &m);
    uint8_t *f = read_three_newcomers(fd, &b);
    /* The first newcomer's ring is itself: its address, as registered. */
    uint32_t pos = 0, h, c, len;
    const uint8_t *rf = NULL;
    for (int k = 0; k < 2; k++) assert_true(eccl_wire_batch_next(&b.u.batch, &pos, &h, &c, &rf, &len));
    eccl_msg ring;
    assert_int_equal(eccl_wire_decode_entry(rf, len, &ring), ECCL_OK);
    assert_string_equal(ring.u.ring_seg.prev.addr, "127.0.0.1:40000");
    free(f);

    m = seg_msg(3, 2, store, addrs);
    send_one(fd, 2, &m); /* handle 2 is known: a newcomer's cannot be */
    assert_closes(fd);
    close(fd);
    eccl_master_stop(mst);
    eccl_master_destroy(mst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relay_holds_one_batch_and_folds),
        cmocka_unit_test(test_relay_expands_ring_seg),
        cmocka_unit_test(test_master_answers_every_batch),
        cmocka_unit_test(test_relay_refolds_register_seg),
        cmocka_unit_test(test_master_takes_register_seg),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
