/* The progress engine of one master or communicator.
 *
 * A background thread polls the owner's connections whenever no API call is
 * waiting. A blocking API call does not hand off to that thread: it drives
 * progress itself (spinning briefly, then sleeping in env->net->wait), which
 * saves two thread wake-ups per small collective. Several threads may be
 * inside `wait` at once; `step` always runs with the mutex held, and objects
 * a step closes are freed by `reap` only once no thread is inside `wait`, so a
 * stale ready pointer never dangles.
 */
#ifndef ECCL_CORE_SCHED_ENGINE_H
#define ECCL_CORE_SCHED_ENGINE_H

#include "env.h"

#define ECCL_NO_DEADLINE UINT64_MAX

typedef struct eccl_engine_ops {
    /* Handles ready handles (some may be closed since: skip them) and due
     * timers. Returns the next timer deadline (ECCL_NO_DEADLINE if none) and
     * sets *again when work is pending that needs no event (poll at once). */
    uint64_t (*step)(void *owner, void **ready, int n, int *again);
    /* Frees what steps closed; called when no thread is inside `wait`. */
    void (*reap)(void *owner);
    /* Optional: the engine is about to block in `wait` (a deadline in the
     * future): whatever was left to go later must go now, or the far end
     * may wait for it while we wait for the far end. */
    void (*idle)(void *owner);
} eccl_engine_ops;

typedef struct eccl_engine {
    const eccl_env *env;
    const eccl_engine_ops *ops;
    void *owner;
    eccl_mutex *mu;
    eccl_cond *cv;
    eccl_thread *thread;
    int stop;
    int waiters;          /* API calls driving progress */
    int pollers;          /* API calls inside env->net->wait */
    int bg_polling;       /* the background thread is inside env->net->wait */
    int bg_parked;        /* ... or asleep on the condition variable */
    int again;
    uint64_t next_deadline;
    uint64_t linger_until;/* background thread stays parked until then */
    /* Setting ECCL_ENGINE_PARK_UNTIL_IDLE = 1 (the simulator sets it; off by
     * default): while callers drive, the parked background thread sleeps
     * until the last one leaves instead of looking at the clock every
     * ENGINE_PARK_NS, and then sleeps to the look it would have made next:
     * it takes over polling at the same times (to the nanosecond by which
     * the old loop's float round trips in the simulator drift), without the
     * looks that find a caller still driving. Each look costs the real backend next to
     * nothing and the simulator a simulated wake-up (a timer, two context
     * switches) per rank per 10 ms: 400 per rank in a 4 s, 100k-rank run. */
    int park_until_idle;
    int bg_idle;          /* parked until the last caller leaves */
    uint64_t bg_kicks;    /* kicks and stops, to tell them from that */
    uint64_t spin_ns;     /* a driving caller polls this long; env->spin_ns
                             until eccl_engine_set_host_ranks says otherwise */
    uint64_t pure_spin_ns; /* a driving caller polls flat out this long
                              after the last event, then yields between
                              polls (eccl_engine_set_host_ranks) */
    uint64_t calm_at;     /* a caller sleeps at once until then: a yield
                             lost the CPU to other work (eccl_engine_drive) */
    uint64_t calm_ns;     /* the last calm's length */
} eccl_engine;

eccl_result eccl_engine_init(eccl_engine *e, const eccl_env *env,
                             const eccl_engine_ops *ops, void *owner);
/* Starts the background thread. */
eccl_result eccl_engine_start(eccl_engine *e, const char *name);
/* Stops and joins the background thread; call without the mutex. */
void eccl_engine_stop(eccl_engine *e);
void eccl_engine_fini(eccl_engine *e);

void eccl_engine_lock(eccl_engine *e);
void eccl_engine_unlock(eccl_engine *e);
/* Mutex held: runs progress until done(arg) is true (ECCL_OK), the clock
 * passes deadline_ns (ECCL_ERR_TIMEOUT) or the engine stops (ECCL_ERR_CLOSED).
 * It polls flat out for pure_spin_ns after the last event, then polls
 * and yields until spin_ns, then sleeps in the net's wait. A yield that
 * comes back ENGINE_YIELD_LOST_NS or more later gave the CPU to a thread that
 * keeps it for whole time slices: other work wants these CPUs, and a rank
 * that spins then takes the CPU the rank it waits for needs (an 8-byte
 * all-reduce of 4 ranks on 2 CPUs beside two busy loops: 2.2-2.3 ms a call
 * spinning, 0.11-0.13 ms sleeping). Callers then sleep at once for a while
 * (engine.c, ENGINE_CALM_*), and look again after. */
eccl_result eccl_engine_drive(eccl_engine *e, int (*done)(void *), void *arg,
                              uint64_t deadline_ns);
/* Mutex held: one look at the net without waiting, and the step it
 * triggers: what a test call does where no background thread progresses. */
void eccl_engine_poll_once(eccl_engine *e);
/* Mutex held: new work without a driving caller (an async op, a message to
 * send) or an earlier timer: make the background thread poll now. */
void eccl_engine_kick(eccl_engine *e);
/* How many ranks share this process's host (0: unknown). With more ranks
 * than CPUs a spinning caller yields after every poll that found nothing:
 * flat out (ENGINE_PURE_SPIN_NS), it kept the CPU that a rank it waits
 * for needed (3 ranks on 2 CPUs, 64 B all-reduce 22-34 us a call against
 * 11-14 yielding; 4 ranks 27-55 against 18-28; two ranks, each with its
 * own CPU, keep the flat-out spin: a yield there only adds a system call
 * between looks). Yielding so, spinning beats sleeping up to four ranks
 * per CPU (8 ranks on 2 CPUs, eccl-bench -n 1000, 3 interleaved rounds,
 * spinning / sleeping: 64 B all-reduce 54-91 / 114-153 us, 64 KiB
 * 124-205 / 280-485, 64 B all-gather 61-93 / 108-137, barrier 44-71 /
 * 108-140, small broadcasts within noise; 16 ranks: mixed or worse, 64 B
 * all-gather 662-682 / 419-616): with more than 4 x env->ncpus ranks on
 * the host the caller sleeps at once. (Spinning flat out for 10 us first,
 * sleeping had won from three ranks per CPU.) Under load from other
 * processes a yield comes back late and the caller calms (engine.c). An
 * explicit ECCL_SPIN_NS setting always wins. Call with the engine's mutex
 * held. */
void eccl_engine_set_host_ranks(eccl_engine *e, uint32_t host_ranks);
uint64_t eccl_engine_now(const eccl_engine *e);

#endif
