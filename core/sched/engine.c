#include "sched/engine.h"

#include <string.h>

#include "util/config.h"

#define ENGINE_MAX_READY 64
/* After a blocking call returns, the background thread stays parked this
 * long: an application calling collectives back to back then never wakes
 * it, and anything that arrives meanwhile waits at most this long. */
#define ENGINE_LINGER_NS 2000000ull
/* How often a parked background thread looks at the clock. */
#define ENGINE_PARK_NS 10000000ull
/* A driving caller polls flat out this long after the last event (where
 * the host has no more ranks than CPUs: eccl_engine_set_host_ranks), then
 * polls and yields until e->spin_ns, then sleeps. */
#define ENGINE_PURE_SPIN_NS 10000ull
/* A yield this long lost the CPU to other work (eccl_engine_drive): yields
 * to ranks of the job, which spin and yield themselves, come back in
 * microseconds; a busy thread keeps the CPU until its slice ends
 * (milliseconds). Spinning then stops for ENGINE_CALM_MIN_NS, twice as long
 * each time it is lost again within ENGINE_CALM_AGAIN_NS of the calm it
 * ended (or the calm's length, if longer: a busy thread's slice outlasts a
 * 1 ms calm), up to ENGINE_CALM_MAX_NS: steady load leaves a look every
 * second, and a short burst (the job's own processes starting) costs a
 * millisecond or two. A 10 ms first calm, taken during start-up, made the
 * first calls after it sleep (4 ranks on 2 CPUs, 1,000 8-byte broadcasts
 * after 50 warm-ups, 10 runs: median 14.4 us a call, 8.1 with 1 ms, 8.3
 * with no calm at all; the next sizes alike). */
#define ENGINE_YIELD_LOST_NS 500000ull
#define ENGINE_CALM_MIN_NS 1000000ull
#define ENGINE_CALM_AGAIN_NS 10000000ull
#define ENGINE_CALM_MAX_NS 1000000000ull

static void engine_calm(eccl_engine *e, uint64_t now)
{
    uint64_t window = e->calm_ns > ENGINE_CALM_AGAIN_NS ? e->calm_ns : ENGINE_CALM_AGAIN_NS;
    int again = e->calm_at && now < e->calm_at + window;
    uint64_t twice = 2 * e->calm_ns;
    e->calm_ns = !again ? ENGINE_CALM_MIN_NS : twice < ENGINE_CALM_MAX_NS ? twice : ENGINE_CALM_MAX_NS;
    e->calm_at = now + e->calm_ns;
}

eccl_result eccl_engine_init(eccl_engine *e, const eccl_env *env,
                             const eccl_engine_ops *ops, void *owner)
{
    memset(e, 0, sizeof *e);
    e->env = env;
    e->ops = ops;
    e->owner = owner;
    e->next_deadline = 0; /* the owner's timers are unknown until its first step */
    e->spin_ns = env->spin_ns;
    e->pure_spin_ns = ENGINE_PURE_SPIN_NS;
    e->park_until_idle = eccl_config_uint(env, "ECCL_ENGINE_PARK_UNTIL_IDLE", 0, 1, 0) != 0;
    eccl_result rc = env->sync->mutex_create(env->sync_ctx, &e->mu);
    if (rc != ECCL_OK) return rc;
    rc = env->sync->cond_create(env->sync_ctx, &e->cv);
    if (rc != ECCL_OK) {
        env->sync->mutex_destroy(env->sync_ctx, e->mu);
        e->mu = NULL;
    }
    return rc;
}

void eccl_engine_fini(eccl_engine *e)
{
    if (e->cv) e->env->sync->cond_destroy(e->env->sync_ctx, e->cv);
    if (e->mu) e->env->sync->mutex_destroy(e->env->sync_ctx, e->mu);
    e->cv = NULL;
    e->mu = NULL;
}

void eccl_engine_lock(eccl_engine *e) { e->env->sync->lock(e->env->sync_ctx, e->mu); }
void eccl_engine_unlock(eccl_engine *e) { e->env->sync->unlock(e->env->sync_ctx, e->mu); }

uint64_t eccl_engine_now(const eccl_engine *e)
{
    return e->env->clock->now_ns(e->env->clock_ctx);
}

/* Mutex held on entry and exit; released around the wait. */
static int engine_poll(eccl_engine *e, uint64_t deadline, int bg)
{
    void *ready[ENGINE_MAX_READY];
    if (deadline != 0 && e->ops->idle) e->ops->idle(e->owner);
    if (bg) e->bg_polling = 1;
    else e->pollers++;
    eccl_engine_unlock(e);
    int n = e->env->net->wait(e->env->net_ctx, deadline, ready, ENGINE_MAX_READY);
    eccl_engine_lock(e);
    if (bg) e->bg_polling = 0;
    else e->pollers--;
    int again = 0;
    e->next_deadline = e->ops->step(e->owner, ready, n < 0 ? 0 : n, &again);
    e->again = again;
    /* A look that found nothing: idle as well (a spinning caller never
     * blocks before its spin ends). */
    if (n <= 0 && deadline == 0 && e->ops->idle) e->ops->idle(e->owner);
    if (e->pollers == 0 && !e->bg_polling) e->ops->reap(e->owner);
    /* Another caller inside `wait` may be waiting for what this step did. */
    if (e->pollers > 0) e->env->net->wake(e->env->net_ctx);
    return n;
}

/* park_until_idle: what `cond_wait(now + ENGINE_PARK_NS)` in a loop does
 * while callers drive, with the same outcome. That loop looks at `base` +
 * k x ENGINE_PARK_NS and parks again as long as a caller drives; a kick or
 * a stop ends it at once. Here the thread sleeps until the last caller
 * leaves (drive wakes it, see bg_idle), then until the first of those looks
 * after that moment, where the loop above takes over as before. Mutex held. */
static void park_while_driven(eccl_engine *e, uint64_t base)
{
    const uint64_t kicks = e->bg_kicks;
    e->bg_parked = 1;
    e->bg_idle = 1;
    while (e->waiters > 0 && e->bg_kicks == kicks)
        e->env->sync->cond_wait(e->env->sync_ctx, e->cv, e->mu, 0);
    e->bg_idle = 0;
    if (e->bg_kicks == kicks) {
        uint64_t now = eccl_engine_now(e);
        uint64_t look = base + ((now - base) / ENGINE_PARK_NS + 1) * ENGINE_PARK_NS;
        e->env->sync->cond_wait(e->env->sync_ctx, e->cv, e->mu, look);
    }
    e->bg_parked = 0;
}

static void engine_thread(void *arg)
{
    eccl_engine *e = arg;
    eccl_engine_lock(e);
    while (!e->stop) {
        uint64_t now = eccl_engine_now(e);
        if (e->waiters > 0 && e->park_until_idle) {
            park_while_driven(e, now);
            continue;
        }
        if (e->waiters > 0 || now < e->linger_until) {
            /* A caller drives progress (and the timers), or just did. */
            uint64_t until = e->waiters > 0 ? now + ENGINE_PARK_NS : e->linger_until;
            e->bg_parked = 1;
            e->env->sync->cond_wait(e->env->sync_ctx, e->cv, e->mu, until);
            e->bg_parked = 0;
            continue;
        }
        engine_poll(e, e->again ? 0 : e->next_deadline, 1);
    }
    eccl_engine_unlock(e);
}

eccl_result eccl_engine_start(eccl_engine *e, const char *name)
{
    return e->env->sync->spawn(e->env->sync_ctx, name, engine_thread, e, &e->thread);
}

void eccl_engine_stop(eccl_engine *e)
{
    eccl_engine_lock(e);
    e->stop = 1;
    e->bg_kicks++;
    e->env->sync->cond_broadcast(e->env->sync_ctx, e->cv);
    eccl_engine_unlock(e);
    e->env->net->wake(e->env->net_ctx);
    if (e->thread) e->env->sync->join(e->env->sync_ctx, e->thread);
    e->thread = NULL;
}

void eccl_engine_kick(eccl_engine *e)
{
    e->next_deadline = 0;
    e->linger_until = 0;
    e->bg_kicks++;
    if (e->bg_parked) e->env->sync->cond_broadcast(e->env->sync_ctx, e->cv);
    if (e->bg_polling || e->pollers > 0) e->env->net->wake(e->env->net_ctx);
}

void eccl_engine_poll_once(eccl_engine *e)
{
    if (e->waiters++ == 0 && e->bg_polling) e->env->net->wake(e->env->net_ctx);
    engine_poll(e, 0, 0);
    if (--e->waiters == 0 && e->bg_idle) e->env->sync->cond_broadcast(e->env->sync_ctx, e->cv);
}

eccl_result eccl_engine_drive(eccl_engine *e, int (*done)(void *), void *arg,
                              uint64_t deadline_ns)
{
    eccl_result rc = ECCL_OK;
    uint64_t now = eccl_engine_now(e);
    uint64_t last_event = now;
    /* One readiness event may wake only one of the threads blocked in
     * `wait` (epoll wakes exclusively): a background thread still inside
     * would take events meant for us and we would sleep on. Kick it out;
     * with waiters > 0 it parks. */
    if (e->waiters++ == 0 && e->bg_polling) e->env->net->wake(e->env->net_ctx);
    while (!done(arg)) {
        if (e->stop) {
            rc = ECCL_ERR_CLOSED;
            break;
        }
        if (now >= deadline_ns) {
            rc = ECCL_ERR_TIMEOUT;
            break;
        }
        uint64_t until = e->next_deadline < deadline_ns ? e->next_deadline : deadline_ns;
        int spinning = e->again || (now - last_event < e->spin_ns && now >= e->calm_at);
        if (spinning) until = 0;
        int n = engine_poll(e, until, 0);
        now = eccl_engine_now(e);
        if (n > 0) {
            last_event = now;
        } else if (spinning && now - last_event >= e->pure_spin_ns) {
            e->env->sync->yield(e->env->sync_ctx);
            uint64_t back = eccl_engine_now(e);
            if (back - now >= ENGINE_YIELD_LOST_NS) engine_calm(e, back);
            now = back;
        }
    }
    /* Polling goes back to the background thread once it stops lingering. */
    if (--e->waiters == 0) {
        e->linger_until = eccl_engine_now(e) + ENGINE_LINGER_NS;
        if (e->bg_idle) e->env->sync->cond_broadcast(e->env->sync_ctx, e->cv);
    }
    return rc;
}

void eccl_engine_set_host_ranks(eccl_engine *e, uint32_t host_ranks)
{
    char set[32];
    int explicit_spin = eccl_config_get(e->env, "ECCL_SPIN_NS", set, sizeof set);
    int oversubscribed = e->env->ncpus && host_ranks > 4ull * e->env->ncpus;
    e->spin_ns = oversubscribed && !explicit_spin ? 0 : e->env->spin_ns;
    e->pure_spin_ns = e->env->ncpus && host_ranks > e->env->ncpus ? 0 : ENGINE_PURE_SPIN_NS;
}
