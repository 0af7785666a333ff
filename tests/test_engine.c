/* The engine's spinning policy (sched/engine.h, eccl_engine_set_host_ranks):
 * a blocked caller spins env->spin_ns while its host holds at most two
 * ranks per CPU, and sleeps at once when it holds more than 2 x
 * env->ncpus, unless ECCL_SPIN_NS was set explicitly. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "host_env.h"
#include "sched/engine.h"

static const char *g_spin_setting; /* ECCL_SPIN_NS as the config table holds it; NULL: unset */

static int cfg_get(void *ctx, const char *name, char *buf, size_t len)
{
    (void)ctx;
    if (!g_spin_setting || strcmp(name, "ECCL_SPIN_NS") != 0) return 0;
    return (size_t)snprintf(buf, len, "%s", g_spin_setting) < len;
}
static const eccl_config_ops cfg = {sizeof cfg, cfg_get};

static uint64_t spin_for(uint32_t ncpus, uint32_t host_ranks)
{
    eccl_env env = host_env();
    env.config = &cfg;
    env.spin_ns = 50000;
    env.ncpus = ncpus;
    eccl_engine e;
    memset(&e, 0, sizeof e);
    e.env = &env;
    e.spin_ns = env.spin_ns;
    eccl_engine_set_host_ranks(&e, host_ranks);
    return e.spin_ns;
}

static void test_spins_with_a_cpu_each(void **state)
{
    (void)state;
    g_spin_setting = NULL;
    assert_int_equal(spin_for(2, 1), 50000);
    assert_int_equal(spin_for(2, 2), 50000);
    assert_int_equal(spin_for(2, 4), 50000); /* two ranks per CPU */
    assert_int_equal(spin_for(16, 8), 50000);
}

static void test_sleeps_when_oversubscribed(void **state)
{
    (void)state;
    g_spin_setting = NULL;
    assert_int_equal(spin_for(2, 5), 0);
    assert_int_equal(spin_for(2, 8), 0);
    assert_int_equal(spin_for(1, 3), 0);
    assert_int_equal(spin_for(UINT32_MAX, UINT32_MAX), 50000); /* no overflow */
}

/* Unknown counts (a master that did not say, an env that cannot tell)
 * keep the configured spin. */
static void test_unknown_keeps_spinning(void **state)
{
    (void)state;
    g_spin_setting = NULL;
    assert_int_equal(spin_for(2, 0), 50000);
    assert_int_equal(spin_for(0, 64), 50000);
}

/* An explicit ECCL_SPIN_NS is what the user asked for, oversubscribed or
 * not (env->spin_ns holds its value). */
static void test_explicit_setting_wins(void **state)
{
    (void)state;
    g_spin_setting = "50000";
    assert_int_equal(spin_for(2, 8), 50000);
    g_spin_setting = NULL;
}

/* The policy follows each epoch: a host that empties spins again. */
static void test_follows_the_epoch(void **state)
{
    (void)state;
    g_spin_setting = NULL;
    eccl_env env = host_env();
    env.config = &cfg;
    env.spin_ns = 50000;
    env.ncpus = 2;
    eccl_engine e;
    memset(&e, 0, sizeof e);
    e.env = &env;
    e.spin_ns = env.spin_ns;
    eccl_engine_set_host_ranks(&e, 8);
    assert_int_equal(e.spin_ns, 0);
    eccl_engine_set_host_ranks(&e, 4);
    assert_int_equal(e.spin_ns, 50000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spins_with_a_cpu_each),    cmocka_unit_test(test_sleeps_when_oversubscribed),
        cmocka_unit_test(test_unknown_keeps_spinning),   cmocka_unit_test(test_explicit_setting_wins),
        cmocka_unit_test(test_follows_the_epoch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
