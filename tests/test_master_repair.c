/* The master's side of the commit rule (docs/protocol.md, "The commit
 * rule"), driven by scripted peers over loopback TCP against the real
 * master, so every interleaving is reached on purpose:
 *
 * - a replicated tag that some members hold and the rest can take commits:
 *   the master asks the first holder in ring order for its bytes
 *   (REPAIR_ASK), hands them to those that lack them (REPAIR_PUT, before
 *   the decision) and commits it for all;
 * - the holder it asked dies before answering (the holder killed during
 *   the repair), or answers empty: it asks the next one; with none left
 *   the tag aborts;
 * - a member that did not report the tag (has not called it) takes the
 *   bytes as well, as a record for its call; one that reported it and
 *   cannot take it makes the tag abort, as before;
 * - two members lost at once: the survivors' view is decided as one.
 *
 * A scripted peer registers, is admitted by the first one's vote, wires
 * its ring (RING_READY) and then answers VIEW_QUERY with the report the
 * test writes for it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eccl.h"
#include "proto/wire.h"
#include "raw_peer.h"

#define N_PEERS 5
#define TAG 77u

/* Drops the members in `gone` (a bitmask) at once; the survivors get the
 * query. */
static uint32_t lose(raw_member *p, unsigned gone)
{
    for (int i = 0; i < N_PEERS; i++) {
        if (!(gone & (1u << i))) continue;
        close(p[i].fd);
        p[i].fd = -1;
    }
    uint32_t epoch = 0;
    for (int i = 0; i < N_PEERS; i++) {
        if (p[i].fd < 0) continue;
        eccl_msg m;
        uint8_t *k;
        raw_expect(p[i].fd, ECCL_MSG_VIEW_QUERY, &m, &k);
        epoch = m.u.epoch.epoch;
        free(k);
    }
    return epoch;
}

static void report(const raw_member *p, uint32_t epoch, uint8_t flag)
{
    eccl_wire_op_flag op = {TAG, flag};
    eccl_msg rep = {.type = ECCL_MSG_VIEW_REPORT};
    rep.u.view.epoch = epoch;
    rep.u.view.n_ops = flag == 0xFF ? 0 : 1; /* 0xFF: does not report the tag */
    rep.u.view.ops = &op;
    raw_send(p->fd, &rep);
}

/* The survivor of lowest ring rank among `among` (bitmask), or -1. */
static int first_in_ring(const raw_member *p, unsigned among)
{
    int best = -1;
    for (int i = 0; i < N_PEERS; i++)
        if ((among & (1u << i)) && p[i].fd >= 0 && (best < 0 || p[i].rank < p[best].rank)) best = i;
    return best;
}

static void answer_ask(const raw_member *p, uint32_t epoch, const char *bytes)
{
    eccl_msg m;
    uint8_t *k;
    raw_expect(p->fd, ECCL_MSG_REPAIR_ASK, &m, &k);
    assert_int_equal(m.u.repair.tag, TAG);
    assert_int_equal(m.u.repair.epoch, epoch);
    free(k);
    if (!bytes) return; /* it dies, or the caller answers otherwise */
    eccl_msg d = {.type = ECCL_MSG_REPAIR_DATA};
    d.u.repair.epoch = epoch;
    d.u.repair.tag = TAG;
    d.u.repair.len = (uint32_t)strlen(bytes);
    d.u.repair.bytes = (const uint8_t *)bytes;
    raw_send(p->fd, &d);
}

/* Each survivor's decision on TAG (and, for a taker, the PUT before it). */
static void expect_decision(const raw_member *p, unsigned takers, int commit, const char *bytes)
{
    for (int i = 0; i < N_PEERS; i++) {
        if (p[i].fd < 0) continue;
        eccl_msg m;
        uint8_t *k;
        if (commit && (takers & (1u << i))) {
            raw_expect(p[i].fd, ECCL_MSG_REPAIR_PUT, &m, &k);
            assert_int_equal(m.u.repair.tag, TAG);
            assert_int_equal(m.u.repair.len, strlen(bytes));
            assert_memory_equal(m.u.repair.bytes, bytes, strlen(bytes));
            free(k);
        }
        raw_expect(p[i].fd, ECCL_MSG_VIEW_DECIDE, &m, &k);
        assert_int_equal(m.u.view.n_ops, 1);
        assert_int_equal(eccl_wire_view_op(&m.u.view, 0).tag, TAG);
        assert_int_equal(eccl_wire_view_op(&m.u.view, 0).flag, commit);
        free(k);
        raw_expect(p[i].fd, ECCL_MSG_RING, &m, &k); /* the survivors' next epoch */
        free(k);
    }
}

#define HOLD (ECCL_VIEW_HELD | ECCL_VIEW_SOURCE)
#define TAKE ECCL_VIEW_REPAIRABLE
#define BIT(i) (1u << (i))

/* Peer 4 lost; peers 0-3 report the tag with flags[0..3]. */
static eccl_master *start_reported(raw_member *p, const uint8_t *flags, uint32_t *epoch)
{
    eccl_master *mst = raw_group_start(p, N_PEERS);
    *epoch = lose(p, BIT(4));
    for (int i = 0; i < 4; i++) report(&p[i], *epoch, flags[i]);
    return mst;
}

/* 0 and 2 report the tag held, 1 and 3 that they can take it. */
static eccl_master *start_two_holders(raw_member *p, uint32_t *epoch)
{
    static const uint8_t flags[4] = {HOLD, TAKE, HOLD, TAKE};
    return start_reported(p, flags, epoch);
}

static void test_repair_commits(void **state)
{
    (void)state;
    raw_member p[N_PEERS];
    uint32_t e;
    eccl_master *mst = start_two_holders(p, &e);
    int src = first_in_ring(p, BIT(0) | BIT(2));
    answer_ask(&p[src], e, "sum of five");
    /* The other holder is not asked: its next message is the decision. */
    expect_decision(p, BIT(1) | BIT(3), 1, "sum of five");
    raw_group_stop(mst, p, N_PEERS);
}

/* The holder asked dies before it answers: the next one is asked; the
 * dead one's loss does not start another query before this decision. */
static void test_repair_holder_killed(void **state)
{
    (void)state;
    raw_member p[N_PEERS];
    uint32_t e;
    eccl_master *mst = start_two_holders(p, &e);
    int first = first_in_ring(p, BIT(0) | BIT(2)), second = first == 0 ? 2 : 0;
    answer_ask(&p[first], e, NULL);
    close(p[first].fd);
    p[first].fd = -1;
    answer_ask(&p[second], e, "sum of five");
    expect_decision(p, BIT(1) | BIT(3), 1, "sum of five");
    raw_group_stop(mst, p, N_PEERS);
}

/* The holder asked answers empty (it no longer has the op), and so does
 * the next: nobody is left to ask, and the tag aborts everywhere. */
static void test_repair_no_holder_left(void **state)
{
    (void)state;
    raw_member p[N_PEERS];
    uint32_t e;
    eccl_master *mst = start_two_holders(p, &e);
    int first = first_in_ring(p, BIT(0) | BIT(2)), second = first == 0 ? 2 : 0;
    answer_ask(&p[first], e, "");
    answer_ask(&p[second], e, "");
    expect_decision(p, 0, 0, NULL);
    raw_group_stop(mst, p, N_PEERS);
}

/* Two members lost at once, the only holders among them: the survivors
 * hold nothing to hand over, and the tag aborts. A second case: the
 * survivors include a holder, so the tag commits. */
static void test_repair_two_losses(void **state)
{
    (void)state;
    raw_member p[N_PEERS];
    eccl_master *mst = raw_group_start(p, N_PEERS);
    uint32_t e = lose(p, BIT(3) | BIT(4));
    for (int i = 0; i < 3; i++) report(&p[i], e, TAKE);
    expect_decision(p, 0, 0, NULL);
    raw_group_stop(mst, p, N_PEERS);

    mst = raw_group_start(p, N_PEERS);
    e = lose(p, BIT(0) | BIT(4));
    const uint8_t flags[N_PEERS] = {0, TAKE, TAKE, HOLD, 0};
    for (int i = 1; i < 4; i++) report(&p[i], e, flags[i]);
    answer_ask(&p[3], e, "x");
    expect_decision(p, BIT(1) | BIT(2), 1, "x");
    raw_group_stop(mst, p, N_PEERS);
}

/* A member that did not report the tag (it has not called it: a
 * broadcast's rank while the others returned early) gets the bytes too,
 * as a record for its call of the tag, and the tag commits. */
static void test_repair_unreported_member_takes(void **state)
{
    (void)state;
    raw_member p[N_PEERS];
    static const uint8_t flags[4] = {HOLD, TAKE, HOLD, 0xFF};
    uint32_t e;
    eccl_master *mst = start_reported(p, flags, &e);
    answer_ask(&p[first_in_ring(p, BIT(0) | BIT(2))], e, "root's bytes");
    expect_decision(p, BIT(1) | BIT(3), 1, "root's bytes");
    raw_group_stop(mst, p, N_PEERS);
}

/* The old rule where the new one does not apply: a member that reported
 * the tag, lacks it and cannot take it (not replicated, too big): abort,
 * and nobody is asked. */
static void test_repair_needs_every_reporter(void **state)
{
    (void)state;
    raw_member p[N_PEERS];
    static const uint8_t flags[4] = {HOLD, TAKE, HOLD, 0};
    uint32_t e;
    eccl_master *mst = start_reported(p, flags, &e);
    expect_decision(p, 0, 0, NULL);
    raw_group_stop(mst, p, N_PEERS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repair_commits),
        cmocka_unit_test(test_repair_holder_killed),
        cmocka_unit_test(test_repair_no_holder_left),
        cmocka_unit_test(test_repair_two_losses),
        cmocka_unit_test(test_repair_unreported_member_takes),
        cmocka_unit_test(test_repair_needs_every_reporter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
