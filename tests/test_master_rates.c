/* The master's slow-link detector (core/comm/rates.c, docs/trace.md "Slow
 * links while the job runs"), driven by scripted members over loopback
 * TCP: each reports the rate of its link from its ring predecessor
 * (LINK_RATE); one link far under the others' two windows in a row is
 * named to every member (SLOW_LINK) and in the metrics, and cleared once it
 * recovers or one of its ends leaves; a malformed report drops its sender;
 * ECCL_SLOW_LINK_FACTOR=0 turns the detector off. And the members' call
 * counts (COLL_STATS) add up in the metrics. */
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

#define N 5
#define MBPS 1000000ull

/* The member whose ring rank is r's predecessor. */
static const raw_member *prev_of(const raw_member *p, int i)
{
    for (int j = 0; j < N; j++)
        if (p[j].fd >= 0 && p[j].rank == (p[i].rank + N - 1) % N) return &p[j];
    return NULL;
}

/* Member i reports its link in at `mbps` MB/s (1 MiB in the window). */
static void rate(const raw_member *p, int i, uint64_t mbps)
{
    eccl_msg m = {.type = ECCL_MSG_LINK_RATE};
    m.u.link.from = prev_of(p, i)->id;
    m.u.link.bytes = 1u << 20;
    m.u.link.ns = m.u.link.bytes * 1000000000ull / (mbps * MBPS);
    raw_send(p[i].fd, &m);
}

/* A window: every member reports, member `slow` (-1: none) at `slow_mbps`,
 * the others at 100 MB/s; the slow one last. */
static void window(const raw_member *p, int slow, uint64_t slow_mbps)
{
    for (int i = 0; i < N; i++)
        if (i != slow && p[i].fd >= 0) rate(p, i, 100);
    if (slow >= 0) rate(p, slow, slow_mbps);
}

/* Every open member is told the link from -> to is slow (from 0: none is). */
static void expect_named(const raw_member *p, uint64_t from, uint64_t to)
{
    for (int i = 0; i < N; i++) {
        if (p[i].fd < 0) continue;
        eccl_msg m;
        uint8_t *k;
        raw_expect(p[i].fd, ECCL_MSG_SLOW_LINK, &m, &k);
        assert_int_equal(m.u.link.from, from);
        assert_int_equal(m.u.link.to, to);
        free(k);
    }
}

static void metrics(eccl_master *mst, char *buf, size_t len)
{
    assert_int_equal(eccl_master_metrics(mst, buf, len, NULL), ECCL_OK);
}

/* 5 MB/s among links of 100: named after its second window, in the
 * metrics; back at 100 MB/s: cleared. */
static void test_named_and_cleared(void **state)
{
    (void)state;
    raw_member p[N];
    eccl_master *mst = raw_group_start(p, N);
    window(p, 2, 5);
    assert_false(raw_readable(p[0].fd, 200)); /* one window is not enough */
    window(p, 2, 5);
    expect_named(p, prev_of(p, 2)->id, p[2].id);
    char text[16384], want[160];
    metrics(mst, text, sizeof text);
    snprintf(want, sizeof want, "eccl_master_group_slow_link{group=\"0\",from=\"%llu\",to=\"%llu\"} 1\n",
             (unsigned long long)prev_of(p, 2)->id, (unsigned long long)p[2].id);
    assert_non_null(strstr(text, want));
    snprintf(want, sizeof want, "eccl_master_link_rate_bytes_per_second{from=\"%llu\",to=\"%llu\"} 5e+06\n",
             (unsigned long long)prev_of(p, 2)->id, (unsigned long long)p[2].id);
    assert_non_null(strstr(text, want));
    snprintf(want, sizeof want, "eccl_master_link_bytes_total{from=\"%llu\",to=\"%llu\"} 2097152\n",
             (unsigned long long)prev_of(p, 2)->id, (unsigned long long)p[2].id);
    assert_non_null(strstr(text, want));
    assert_non_null(strstr(text, "eccl_master_slow_links_total 1\n"));
    window(p, 2, 5); /* still slow: told once */
    assert_false(raw_readable(p[0].fd, 200));
    window(p, 2, 100);
    expect_named(p, 0, 0);
    metrics(mst, text, sizeof text);
    assert_null(strstr(text, "eccl_master_group_slow_link{"));
    raw_group_stop(mst, p, N);
}

/* A link under the reference but within the factor (30 of 100 MB/s, the
 * factor 4) is not named. */
static void test_within_factor(void **state)
{
    (void)state;
    raw_member p[N];
    eccl_master *mst = raw_group_start(p, N);
    for (int w = 0; w < 3; w++) window(p, 2, 30);
    assert_false(raw_readable(p[0].fd, 300));
    raw_group_stop(mst, p, N);
}

/* An end of the named link leaves: the new ring clears it. */
static void test_cleared_when_an_end_leaves(void **state)
{
    (void)state;
    raw_member p[N];
    eccl_master *mst = raw_group_start(p, N);
    window(p, 2, 5);
    window(p, 2, 5);
    expect_named(p, prev_of(p, 2)->id, p[2].id);
    close(p[2].fd);
    p[2].fd = -1;
    for (int i = 0; i < N; i++) {
        if (p[i].fd < 0) continue;
        eccl_msg m;
        uint8_t *k;
        raw_expect(p[i].fd, ECCL_MSG_VIEW_QUERY, &m, &k);
        eccl_msg rep = {.type = ECCL_MSG_VIEW_REPORT};
        rep.u.view.epoch = m.u.epoch.epoch;
        free(k);
        raw_send(p[i].fd, &rep);
    }
    for (int i = 0; i < N; i++) {
        if (p[i].fd < 0) continue;
        eccl_msg m;
        uint8_t *k;
        raw_expect(p[i].fd, ECCL_MSG_VIEW_DECIDE, &m, &k);
        free(k);
        raw_take_ring(&p[i]);
    }
    expect_named(p, 0, 0);
    raw_group_stop(mst, p, N);
}

/* A report without a sender, with a receiver, or of no time is a protocol
 * error: the master drops the member that sent it. */
static void test_malformed_dropped(void **state)
{
    (void)state;
    for (int bad = 0; bad < 3; bad++) {
        raw_member p[N];
        eccl_master *mst = raw_group_start(p, N);
        eccl_msg m = {.type = ECCL_MSG_LINK_RATE};
        m.u.link.from = bad == 0 ? 0 : p[0].id;
        m.u.link.to = bad == 1 ? p[1].id : 0;
        m.u.link.bytes = 1u << 20;
        m.u.link.ns = bad == 2 ? 0 : 1000000;
        raw_send(p[1].fd, &m);
        /* Dropped: its connection closes (read returns 0), the others
         * are asked for the view. */
        uint8_t b;
        assert_true(raw_readable(p[1].fd, 5000));
        assert_int_equal(read(p[1].fd, &b, 1), 0);
        eccl_msg q;
        uint8_t *k;
        raw_expect(p[0].fd, ECCL_MSG_VIEW_QUERY, &q, &k);
        free(k);
        raw_group_stop(mst, p, N);
    }
}

/* ECCL_SLOW_LINK_FACTOR=0: nothing is ever named. */
static void test_off(void **state)
{
    (void)state;
    setenv("ECCL_SLOW_LINK_FACTOR", "0", 1);
    raw_member p[N];
    eccl_master *mst = raw_group_start(p, N);
    unsetenv("ECCL_SLOW_LINK_FACTOR");
    for (int w = 0; w < 3; w++) window(p, 2, 1);
    assert_false(raw_readable(p[0].fd, 300));
    raw_group_stop(mst, p, N);
}

/* COLL_STATS: members' counts of calls that returned OK add up. */
static void test_coll_stats(void **state)
{
    (void)state;
    raw_member p[N];
    eccl_master *mst = raw_group_start(p, N);
    for (int i = 0; i < N; i++) {
        eccl_msg m = {.type = ECCL_MSG_COLL_STATS};
        m.u.stats.calls = 10u + (uint64_t)i;
        m.u.stats.bytes = 4096;
        raw_send(p[i].fd, &m);
    }
    char text[16384];
    int found = 0;
    for (int t = 0; t < 100 && !found; t++) { /* the master reads them on its own thread */
        metrics(mst, text, sizeof text);
        found = strstr(text, "eccl_master_member_collectives_total 60\n") != NULL;
        if (!found) usleep(10000);
    }
    assert_true(found);
    assert_non_null(strstr(text, "eccl_master_member_collective_bytes_total 20480\n"));
    raw_group_stop(mst, p, N);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_named_and_cleared),
        cmocka_unit_test(test_within_factor),
        cmocka_unit_test(test_cleared_when_an_end_leaves),
        cmocka_unit_test(test_malformed_dropped),
        cmocka_unit_test(test_off),
        cmocka_unit_test(test_coll_stats),
    };
    return cmocka_run_group_tests_name("master_rates", tests, NULL, NULL);
}
