/* eccl-sim's stack pool (scenarios/engine/actor_stacks.h): callocs of a
 * stack's size come page-aligned and zeroed from one region, as many as it
 * holds, then from malloc; free and realloc tell the two apart. The pool is
 * process-wide, so the checks run in this order in one process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "actor_stacks.h"

#define SLICES 3

static size_t slice_bytes(void)
{
    return 4 * (size_t)sysconf(_SC_PAGESIZE);
}

static int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

static void test_no_pool_before_reserve(void **state)
{
    (void)state;
    const size_t n = slice_bytes();
    unsigned char *p = calloc(1, n);
    assert_non_null(p);
    assert_true(all_zero(p, n));
    memset(p, 0xab, n);
    free(p);
}

static void test_reserve_refusals(void **state)
{
    (void)state;
    assert_int_equal(eccl_actor_stacks_reserve(slice_bytes() + 16, SLICES), -1); /* not whole pages */
    assert_int_equal(eccl_actor_stacks_reserve(slice_bytes(), 0), -1);
    assert_int_equal(eccl_actor_stacks_reserve(slice_bytes(), SIZE_MAX / 2), -1); /* overflows */
    assert_int_equal(eccl_actor_stacks_reserve(slice_bytes(), SLICES), 0);
    assert_int_equal(eccl_actor_stacks_reserve(slice_bytes(), SLICES), -1); /* once */
}

static void test_slices_then_malloc(void **state)
{
    (void)state;
    const size_t n = slice_bytes();
    unsigned char *s[SLICES];
    for (int i = 0; i < SLICES; i++) {
        s[i] = i % 2 ? calloc(n, 1) : calloc(1, n); /* either order of the factors */
        assert_non_null(s[i]);
        assert_true((uintptr_t)s[i] % (size_t)sysconf(_SC_PAGESIZE) == 0);
        assert_true(all_zero(s[i], n));
        if (i) assert_ptr_equal(s[i], s[i - 1] + n); /* one region */
        memset(s[i], 0x5a, n);
    }
    /* The region is spent: malloc serves the next one, zeroed all the same. */
    unsigned char *extra = calloc(1, n);
    assert_non_null(extra);
    assert_true(extra < s[0] || extra >= s[0] + SLICES * n);
    assert_true(all_zero(extra, n));
    /* Any other size is malloc's. */
    unsigned char *other = calloc(1, n / 2);
    assert_true(other < s[0] || other >= s[0] + SLICES * n);
    free(other);
    free(extra);

    /* A slice given back is the next one taken, and reads as zeros again. */
    free(s[1]);
    unsigned char *again = calloc(1, n);
    assert_ptr_equal(again, s[1]);
    assert_true(all_zero(again, n));

    /* realloc: shrinking keeps the slice; growing moves the bytes to malloc
     * and gives the slice back. */
    again[0] = 7;
    again[n / 2 - 1] = 9;
    unsigned char *kept = realloc(again, n / 2);
    assert_ptr_equal(kept, s[1]);
    unsigned char *grown = realloc(kept, 2 * n);
    assert_non_null(grown);
    assert_true(grown < s[0] || grown >= s[0] + SLICES * n);
    assert_int_equal(grown[0], 7);
    assert_int_equal(grown[n / 2 - 1], 9);
    unsigned char *back = calloc(1, n);
    assert_ptr_equal(back, s[1]);
    assert_true(all_zero(back, n));

    free(grown);
    free(back);
    free(s[0]);
    free(s[2]);
}

static void test_edges(void **state)
{
    (void)state;
    free(NULL);
    volatile size_t huge = SIZE_MAX; /* hidden from the compiler's size checks */
    assert_null(calloc(huge, 2));    /* overflow: refused, as malloc's calloc does */
    char *p = realloc(NULL, 100);
    assert_non_null(p);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_pool_before_reserve),
        cmocka_unit_test(test_reserve_refusals),
        cmocka_unit_test(test_slices_then_malloc),
        cmocka_unit_test(test_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
