/* The collective trace's ring (core/trace/trace.h): records in order, the
 * oldest overwritten at the limit, a record found by its seq until then,
 * growth from a small ring keeping the order, tracing off, and the text
 * lines of docs/trace.md. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "coll/dispatch.h"
#include "trace/trace.h"

static void test_ring_wraps(void **state)
{
    (void)state;
    eccl_trace t;
    eccl_trace_init(&t, 20);
    for (uint64_t i = 1; i <= 50; i++) {
        eccl_trace_rec *r = eccl_trace_add(&t, ECCL_TRACE_CALL);
        assert_non_null(r);
        assert_int_equal(r->seq, i);
        r->tag = 1000 + i;
        /* every earlier record still held is found, and is the one added */
        if (i > 1) {
            eccl_trace_rec *prev = eccl_trace_find(&t, i - 1);
            assert_non_null(prev);
            assert_int_equal(prev->tag, 1000 + i - 1);
        }
    }
    assert_int_equal(t.n, 20);
    assert_true(t.cap <= 20);
    for (uint32_t i = 0; i < t.n; i++) assert_int_equal(eccl_trace_at(&t, i)->seq, 31 + i); /* oldest first */
    assert_null(eccl_trace_find(&t, 30)); /* overwritten */
    assert_null(eccl_trace_find(&t, 51)); /* not yet */
    assert_null(eccl_trace_find(&t, 0));
    assert_int_equal(eccl_trace_find(&t, 31)->tag, 1031);
    assert_int_equal(eccl_trace_find(&t, 50)->tag, 1050);
    eccl_trace_free(&t);
}

static void test_grows_from_small(void **state)
{
    (void)state;
    eccl_trace t;
    eccl_trace_init(&t, 1000);
    for (uint64_t i = 1; i <= ECCL_TRACE_START; i++) eccl_trace_add(&t, ECCL_TRACE_CALL)->tag = i;
    assert_int_equal(t.cap, ECCL_TRACE_START); /* nothing more until it is full */
    eccl_trace_add(&t, ECCL_TRACE_EPOCH)->epoch = 7;
    assert_int_equal(t.cap, 2 * ECCL_TRACE_START);
    for (uint32_t i = 0; i < ECCL_TRACE_START; i++) assert_int_equal(eccl_trace_at(&t, i)->tag, i + 1);
    assert_int_equal(eccl_trace_at(&t, ECCL_TRACE_START)->kind, ECCL_TRACE_EPOCH);
    assert_int_equal(eccl_trace_find(&t, 3)->tag, 3);
    eccl_trace_free(&t);
}

static void test_off(void **state)
{
    (void)state;
    eccl_trace t;
    eccl_trace_init(&t, 0);
    assert_null(eccl_trace_add(&t, ECCL_TRACE_CALL));
    assert_int_equal(t.n, 0);
    assert_null(t.recs);
    eccl_trace_free(&t);
}

static void test_phase_times(void **state)
{
    (void)state;
    eccl_trace_rec r = {.posted_ns = 1000000};
    assert_int_equal(eccl_trace_since(&r, 1000000), 1);      /* at once: 0 µs, stored as 1 */
    assert_int_equal(eccl_trace_since(&r, 1000999), 1);
    assert_int_equal(eccl_trace_since(&r, 1002500), 3);      /* 2 µs */
    assert_int_equal(eccl_trace_since(&r, 999), 1);          /* a clock behind: never 0 */
    assert_int_equal(eccl_trace_since(&r, UINT64_MAX), UINT32_MAX);
}

static void test_format(void **state)
{
    (void)state;
    eccl_trace t;
    eccl_trace_init(&t, 8);
    eccl_trace_rec *e = eccl_trace_add(&t, ECCL_TRACE_EPOCH);
    e->epoch = 3, e->rank = 1, e->world = 4, e->posted_ns = 42;
    eccl_trace_rec *c = eccl_trace_add(&t, ECCL_TRACE_CALL);
    c->tag = 77, c->coll = ECCL_COLL_ALLREDUCE, c->algo = ECCL_ALGO_RING, c->dtype = ECCL_F32, c->bytes = 4096;
    c->epoch = 3, c->rank = 1, c->world = 4, c->posted_ns = 100;
    c->started_us = 1, c->first_us = 13, c->data_us = 0, c->end_us = 0; /* running */
    eccl_trace_rec *d = eccl_trace_add(&t, ECCL_TRACE_CALL);
    d->tag = 78, d->coll = ECCL_COLL_BROADCAST, d->algo = UINT8_MAX, d->dtype = ECCL_U8;
    d->end_us = 6, d->result = 5; /* timeout */
    char buf[2048];
    size_t used = 0;
    assert_int_equal(eccl_trace_format(&t, 0, buf, sizeof buf, &used), 3);
    buf[used] = 0;
    assert_non_null(strstr(buf, "epoch seq=1 epoch=3 rank=1 world=4 at_ns=42\n"));
    assert_non_null(strstr(buf, "call seq=2 tag=77 coll=allreduce algo=ring bytes=4096 dtype=f32 epoch=3 rank=1 "
                                "world=4 posted_ns=100 started_us=0 first_us=12 data_us=- end_us=- "
                                "result=running\n"));
    assert_non_null(strstr(buf, "call seq=3 tag=78 coll=broadcast algo=none"));
    assert_non_null(strstr(buf, "end_us=5 result=timeout\n"));
    /* Too small a buffer: whole lines only. */
    used = 0;
    assert_int_equal(eccl_trace_format(&t, 0, buf, 60, &used), 1);
    assert_true(used < 60 && buf[used - 1] == '\n');
    eccl_trace_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_wraps), cmocka_unit_test(test_grows_from_small), cmocka_unit_test(test_off),
        cmocka_unit_test(test_phase_times), cmocka_unit_test(test_format),
    };
    return cmocka_run_group_tests_name("trace", tests, NULL, NULL);
}
