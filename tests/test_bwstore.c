/* The master's bandwidth store (core/topo/bwstore.h): set, get, forget and
 * the cost matrix, checked against a plain array model under random churn. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "topo/bwstore.h"

static void test_basics(void **state)
{
    (void)state;
    eccl_bw_store s;
    eccl_bw_store_init(&s);
    assert_true(eccl_bw_store_get(&s, 1, 2) == 0);
    assert_int_equal(eccl_bw_store_set(&s, 1, 2, 1e9), ECCL_OK);
    assert_int_equal(eccl_bw_store_set(&s, 2, 1, 5e8), ECCL_OK);
    assert_true(eccl_bw_store_get(&s, 1, 2) == 1e9);
    assert_true(eccl_bw_store_get(&s, 2, 1) == 5e8); /* asymmetric */
    assert_int_equal(eccl_bw_store_set(&s, 1, 2, 2e9), ECCL_OK);
    assert_true(eccl_bw_store_get(&s, 1, 2) == 2e9);
    assert_int_equal(s.count, 2);
    /* Refused: no id 0, no self link, no non-positive or non-finite rate. */
    assert_int_equal(eccl_bw_store_set(&s, 0, 2, 1), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_bw_store_set(&s, 3, 0, 1), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_bw_store_set(&s, 3, 3, 1), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_bw_store_set(&s, 3, 4, 0), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_bw_store_set(&s, 3, 4, -1), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_bw_store_set(&s, 3, 4, NAN), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_bw_store_set(&s, 3, 4, INFINITY), ECCL_ERR_INVALID_ARG);
    assert_int_equal(s.count, 2);

    uint64_t ids[3] = {2, 1, 7};
    double cost[9];
    eccl_bw_store_costs(&s, ids, 3, cost);
    assert_true(cost[0] == 0 && cost[4] == 0 && cost[8] == 0);
    assert_true(cost[0 * 3 + 1] == 1 / 5e8); /* 2 -> 1 */
    assert_true(cost[1 * 3 + 0] == 1 / 2e9); /* 1 -> 2 */
    assert_true(isinf(cost[0 * 3 + 2]) && isinf(cost[2 * 3 + 1]));

    eccl_bw_store_forget(&s, 1);
    assert_int_equal(s.count, 0);
    assert_true(eccl_bw_store_get(&s, 2, 1) == 0);
    eccl_bw_store_fini(&s);
}

/* Random sets and forgets over 40 peers against a dense model: every
 * lookup, the count and every forget agree (backward-shift deletion keeps
 * each probe run intact, or a later get would miss). */
static void test_model(void **state)
{
    (void)state;
    enum { N = 40 };
    static double model[N + 1][N + 1];
    uint64_t x = 12345;
    eccl_bw_store s;
    eccl_bw_store_init(&s);
    for (int step = 0; step < 20000; step++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t a = 1 + (x >> 33) % N, b = 1 + (x >> 17) % N;
        if ((x >> 8) % 97 == 0) {
            eccl_bw_store_forget(&s, a);
            for (int k = 1; k <= N; k++) model[a][k] = model[k][a] = 0;
        } else if (a != b) {
            double bps = (double)(1 + (x >> 40) % 1000000);
            assert_int_equal(eccl_bw_store_set(&s, a, b, bps), ECCL_OK);
            model[a][b] = bps;
        }
        if (step % 500 == 0 || step > 19900) {
            size_t count = 0;
            for (uint64_t i = 1; i <= N; i++) {
                for (uint64_t j = 1; j <= N; j++) {
                    assert_true(eccl_bw_store_get(&s, i, j) == model[i][j]);
                    count += model[i][j] > 0;
                }
            }
            assert_int_equal(s.count, count);
        }
    }
    eccl_bw_store_fini(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basics),
        cmocka_unit_test(test_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
