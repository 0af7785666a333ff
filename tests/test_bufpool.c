/* core/util/bufpool: the smallest cached buffer that fits; the most
 * recently returned of equal ones; a new one when none fits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "util/bufpool.h"

static void test_best_fit(void **state)
{
    (void)state;
    eccl_bufpool p;
    eccl_bufpool_init(&p, NULL);
    size_t caps[] = {4096, 100, 3000, 1 << 20, 60, 2100};
    eccl_buf *b[6];
    for (int i = 0; i < 6; i++) assert_non_null(b[i] = eccl_bufpool_get(&p, caps[i]));
    for (int i = 0; i < 6; i++) eccl_bufpool_put(&p, b[i]);
    /* 2100 < 3000 < 4096, put in another order. */
    assert_ptr_equal(eccl_bufpool_get(&p, 2050), b[5]);
    assert_ptr_equal(eccl_bufpool_get(&p, 2050), b[2]);
    assert_ptr_equal(eccl_bufpool_get(&p, 3500), b[0]);
    assert_ptr_equal(eccl_bufpool_get(&p, 61), b[1]); /* 60 is too small, 100 the next */
    assert_ptr_equal(eccl_bufpool_get(&p, 5000), b[3]);
    assert_ptr_equal(eccl_bufpool_get(&p, 0), b[4]); /* what is left */
    eccl_buf *fresh = eccl_bufpool_get(&p, 10);  /* none cached: a new one */
    assert_non_null(fresh);
    assert_true(fresh != b[4] && fresh->cap == 10);
    eccl_bufpool_put(&p, fresh);
    for (int i = 0; i < 6; i++) eccl_bufpool_put(&p, b[i]);
    eccl_bufpool_fini(&p);
}

static void test_equal_ones_most_recent_first(void **state)
{
    (void)state;
    eccl_bufpool p;
    eccl_bufpool_init(&p, NULL);
    eccl_buf *a = eccl_bufpool_get(&p, 64), *b = eccl_bufpool_get(&p, 64), *big = eccl_bufpool_get(&p, 96);
    eccl_bufpool_put(&p, a);
    eccl_bufpool_put(&p, big);
    eccl_bufpool_put(&p, b);
    assert_ptr_equal(eccl_bufpool_get(&p, 64), b);
    assert_ptr_equal(eccl_bufpool_get(&p, 64), a);
    assert_ptr_equal(eccl_bufpool_get(&p, 64), big);
    eccl_bufpool_put(&p, a);
    eccl_bufpool_put(&p, b);
    eccl_bufpool_put(&p, big);
    eccl_bufpool_fini(&p);
    eccl_bufpool_fini(&p); /* twice: nothing left to free */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_best_fit),
        cmocka_unit_test(test_equal_ones_most_recent_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
