/* The engine's spinning policy (sched/engine.h, eccl_engine_set_host_ranks):
 * a blocked caller spins env->spin_ns while its host holds at most four
 * ranks per CPU, and sleeps at once when it holds more than 4 x
 * env->ncpus, unless ECCL_SPIN_NS was set explicitly; it polls flat out
 * for 10 us before it yields between polls only while the host has a CPU
 * per rank; and it stops spinning for a while after a yield lost the CPU
 * to other work (eccl_engine_drive), on a clock the test moves itself. */
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

/* The policy for a host of ncpus CPUs and host_ranks ranks: its spin, and
 * in *pure how long of it is flat out (NULL: not asked). */
static uint64_t policy(uint32_t ncpus, uint32_t host_ranks, uint64_t *pure)
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
    if (pure) *pure = e.pure_spin_ns;
    return e.spin_ns;
}

static uint64_t spin_for(uint32_t ncpus, uint32_t host_ranks) { return policy(ncpus, host_ranks, NULL); }

static uint64_t pure_spin_for(uint32_t ncpus, uint32_t host_ranks)
{
    uint64_t pure;
    policy(ncpus, host_ranks, &pure);
    return pure;
}

static void test_spins_with_a_cpu_each(void **state)
{
    (void)state;
    g_spin_setting = NULL;
    assert_int_equal(spin_for(2, 1), 50000);
    assert_int_equal(spin_for(2, 2), 50000);
    assert_int_equal(spin_for(2, 4), 50000);
    assert_int_equal(spin_for(2, 8), 50000); /* four ranks per CPU */
    assert_int_equal(spin_for(16, 8), 50000);
}

static void test_sleeps_when_oversubscribed(void **state)
{
    (void)state;
    g_spin_setting = NULL;
    assert_int_equal(spin_for(2, 9), 0);
    assert_int_equal(spin_for(2, 16), 0);
    assert_int_equal(spin_for(1, 5), 0);
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
    assert_int_equal(spin_for(2, 16), 50000);
    g_spin_setting = NULL;
}

/* Flat out only with a CPU per rank: past that a spinner yields after
 * every empty look, whatever ECCL_SPIN_NS says; unknown counts keep it. */
static void test_yields_at_once_with_fewer_cpus_than_ranks(void **state)
{
    (void)state;
    g_spin_setting = NULL;
    assert_int_equal(pure_spin_for(2, 1), 10000);
    assert_int_equal(pure_spin_for(2, 2), 10000);
    assert_int_equal(pure_spin_for(16, 8), 10000);
    assert_int_equal(pure_spin_for(2, 3), 0);
    assert_int_equal(pure_spin_for(2, 4), 0);
    assert_int_equal(pure_spin_for(2, 8), 0);
    assert_int_equal(pure_spin_for(2, 0), 10000);
    assert_int_equal(pure_spin_for(0, 64), 10000);
    g_spin_setting = "50000";
    assert_int_equal(pure_spin_for(2, 4), 0);
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
    eccl_engine_set_host_ranks(&e, 16);
    assert_int_equal(e.spin_ns, 0);
    eccl_engine_set_host_ranks(&e, 4);
    assert_int_equal(e.spin_ns, 50000);
    assert_int_equal(e.pure_spin_ns, 0);
    eccl_engine_set_host_ranks(&e, 2);
    assert_int_equal(e.pure_spin_ns, 10000);
}

/* ---- the calm after a lost yield (eccl_engine_drive) -------------------- */

static uint64_t g_now;      /* the fake clock */
static uint64_t g_yield_ns; /* how long a yield keeps the CPU away */
static uint64_t g_stop_at;  /* done() once the clock passes it */
static uint64_t g_timer_ns = 5000000; /* the owner's next timer, this far on */
static uint32_t g_spins, g_sleeps, g_yields;

static uint64_t f_now(void *ctx) { (void)ctx; return g_now; }
static const eccl_clock_ops f_clock = {sizeof f_clock, f_now, NULL};
static void f_lock(void *ctx, eccl_mutex *m) { (void)ctx, (void)m; }
static void f_yield(void *ctx)
{
    (void)ctx;
    g_yields++;
    g_now += g_yield_ns;
}
static const eccl_sync_ops f_sync = {.size = sizeof f_sync, .lock = f_lock, .unlock = f_lock, .yield = f_yield};
/* Nothing ever arrives: a look costs 1 us, a sleep lasts until its deadline. */
static int f_wait(void *ctx, uint64_t deadline_ns, void **ready, int max)
{
    (void)ctx, (void)ready, (void)max;
    if (deadline_ns == 0) {
        g_spins++;
        g_now += 1000;
    } else {
        g_sleeps++;
        g_now = deadline_ns;
    }
    return 0;
}
static void f_wake(void *ctx) { (void)ctx; }
static const eccl_net_ops f_net = {.size = sizeof f_net, .wait = f_wait, .wake = f_wake};
static uint64_t f_step(void *owner, void **ready, int n, int *again)
{
    (void)owner, (void)ready, (void)n;
    *again = 0;
    return g_now + g_timer_ns; /* a sleep ends there */
}
static void f_reap(void *owner) { (void)owner; }
static const eccl_engine_ops f_ops = {f_step, f_reap, NULL};
static int f_done(void *arg) { (void)arg; return g_now >= g_stop_at; }

/* Drives a call that waits `ns` with nothing arriving; counts its looks. */
static void wait_call(eccl_engine *e, uint64_t ns)
{
    g_spins = g_sleeps = g_yields = 0;
    g_stop_at = g_now + ns;
    assert_int_equal(eccl_engine_drive(e, f_done, NULL, UINT64_MAX), ECCL_OK);
}

static eccl_env calm_env(void)
{
    eccl_env env = host_env();
    env.clock = &f_clock;
    env.sync = &f_sync;
    env.net = &f_net;
    return env;
}

static void calm_engine(eccl_engine *e, const eccl_env *env)
{
    memset(e, 0, sizeof *e);
    e->env = env;
    e->ops = &f_ops;
    e->spin_ns = 50000;
    e->pure_spin_ns = 10000; /* eccl_engine_init's */
    g_now = 1000000000;
}

/* Yields that come straight back (ranks of the job that spin and yield
 * too) keep the spin: every call spins its 50 us (10 flat out, then looks
 * and yields), then sleeps. */
static void test_quick_yields_keep_spinning(void **state)
{
    (void)state;
    eccl_env env = calm_env();
    eccl_engine e;
    calm_engine(&e, &env);
    g_yield_ns = 1000;
    for (int call = 0; call < 3; call++) {
        wait_call(&e, 20000000);
        assert_in_range(g_spins, 20, 50);
        assert_true(g_yields > 10);
        assert_true(g_sleeps >= 1);
    }
    assert_int_equal(e.calm_at, 0);
}

/* With fewer CPUs than ranks every empty look is followed by a yield,
 * from the first: the rank the caller waits for may need this CPU. */
static void test_yields_between_every_look(void **state)
{
    (void)state;
    eccl_env env = calm_env();
    eccl_engine e;
    calm_engine(&e, &env);
    e.pure_spin_ns = 0;
    g_yield_ns = 1000;
    wait_call(&e, 20000000);
    assert_in_range(g_spins, 20, 30); /* 50 us of looks and yields, 1 us each */
    assert_int_equal(g_yields, g_spins);
    assert_true(g_sleeps >= 1);
}

/* A yield that keeps the CPU away 1 ms (a busy process took it) ends the
 * spin: the caller sleeps, and so do the calls of the next 1 ms. The next
 * call after that spins again; lost again within 10 ms of the calm's end
 * (longer than the calm: a busy slice outlasts it), the calm doubles, up
 * to 1 s; a loss long after starts again at 1 ms. */
static void test_lost_yield_calms(void **state)
{
    (void)state;
    eccl_env env = calm_env();
    eccl_engine e;
    calm_engine(&e, &env);
    g_timer_ns = 100000; /* sleeps end 100 us on: calls shorter than a calm */
    g_yield_ns = 1000000;
    wait_call(&e, 1000000);
    assert_int_equal(g_yields, 1); /* after 10 us of looks, then no more */
    assert_int_equal(e.calm_ns, 1000000);
    assert_in_range(e.calm_at - g_now, 1, 1000000); /* from the yield's return */
    uint64_t calm_end = e.calm_at;
    wait_call(&e, 500000); /* within the calm: sleeps at once */
    assert_int_equal(g_spins, 0);
    assert_int_equal(g_yields, 0);
    g_now = calm_end + 5000000; /* 5 ms after it: spins, loses the CPU again */
    wait_call(&e, 1000000);
    assert_true(g_spins > 0);
    assert_int_equal(g_yields, 1);
    assert_int_equal(e.calm_ns, 2000000);
    for (int i = 0; i < 12; i++) {
        g_now = e.calm_at;
        wait_call(&e, 1000000);
    }
    assert_int_equal(e.calm_ns, 1000000000); /* capped */
    g_now = e.calm_at + 2000000000ull;       /* quiet for a long while */
    wait_call(&e, 1000000);
    assert_int_equal(e.calm_ns, 1000000);
    g_now = e.calm_at + 20000000; /* 20 ms after a 1 ms calm: a new burst */
    wait_call(&e, 1000000);
    assert_int_equal(g_yields, 1);
    assert_int_equal(e.calm_ns, 1000000);
    g_timer_ns = 5000000;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spins_with_a_cpu_each),    cmocka_unit_test(test_sleeps_when_oversubscribed),
        cmocka_unit_test(test_unknown_keeps_spinning),   cmocka_unit_test(test_explicit_setting_wins),
        cmocka_unit_test(test_follows_the_epoch),        cmocka_unit_test(test_quick_yields_keep_spinning),
        cmocka_unit_test(test_lost_yield_calms),
        cmocka_unit_test(test_yields_at_once_with_fewer_cpus_than_ranks),
        cmocka_unit_test(test_yields_between_every_look),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
