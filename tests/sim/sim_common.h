/* What the checked sim programs (sim_allreduce, sim_colls) share: a master
 * actor, admission, actor start, checks that count failures, a hash for
 * buffers, the platform set-up. Header-only (static inline), one per
 * program: every simulated rank lives in one process, so nothing here is
 * global.
 */
#ifndef ECCL_TESTS_SIM_COMMON_H
#define ECCL_TESTS_SIM_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <xbt/config.h>

#include "eccl.h"
#include "env_sg.h"

/* The first member of a program's scenario: sim_master_main gets the
 * scenario as its actor data and reads only this. */
typedef struct sim_base {
    eccl_sg_world *w;
    const char *master_addr;
    int done;     /* actors finished or killed; the master stops at stop_at */
    int stop_at;
    int failures; /* failed checks */
} sim_base;

/* A failed check: a "FAIL ..." line and one more failure in b. */
#define SIM_CHECK(b, who, cond, ...)                    \
    do {                                                \
        if (!(cond)) {                                  \
            eccl_sg_printf(who, "FAIL " __VA_ARGS__);   \
            (b)->failures++;                            \
        }                                               \
    } while (0)

static inline uint64_t sim_fnv1a(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* The same, a 64-bit word at a time (the tail byte by byte): for buffers
 * of many MiB, hashed on every rank after every call. */
static inline uint64_t sim_fnv1a64(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, sizeof w);
        h = (h ^ w) * 1099511628211ull;
    }
    for (; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static inline double sim_ms(uint64_t ns) { return (double)ns / 1e6; }

static inline void sim_start_actor(const char *name, const char *host, xbt_main_func_t fn,
                                   void *data)
{
    sg_actor_t a = sg_actor_init(name, sg_host_by_name(host));
    sg_actor_set_data(a, data);
    sg_actor_start(a, fn, 0, NULL);
}

/* The master: serves until b->done reaches b->stop_at. */
static inline void sim_master_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sim_base *b = sg_actor_self_get_data();
    eccl_master *m = NULL;
    eccl_result rc = eccl_sg_master_create(b->w, b->master_addr, &m);
    if (rc == ECCL_OK) rc = eccl_master_run(m);
    SIM_CHECK(b, "master", rc == ECCL_OK, "master start: %s", eccl_strerror(rc));
    if (rc != ECCL_OK) return;
    eccl_sg_printf("master", "serving on %s", b->master_addr);
    while (b->done < b->stop_at) sg_actor_sleep_for(0.001);
    eccl_master_destroy(m);
    eccl_sg_printf("master", "stopped");
}

/* Admits pending peers (every accepted peer calls it) until the world has
 * at least `world` peers. */
static inline eccl_result sim_admit(eccl_comm *c, int64_t world)
{
    for (;;) {
        int64_t w = 0;
        eccl_result rc = eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &w);
        if (rc != ECCL_OK || w >= world) return rc;
        uint32_t pending = 0;
        rc = eccl_comm_peers_pending(c, &pending);
        if (rc != ECCL_OK) return rc;
        if (pending > 0) {
            rc = eccl_comm_update_topology(c);
            if (rc != ECCL_OK) return rc;
        } else {
            sg_actor_sleep_for(0.001);
        }
    }
}

/* simgrid_init, CM02 (no latency or bandwidth correction factors: a message
 * costs exactly what the platform file says, latency + size / bandwidth),
 * the platform argv[1]. 0, or 2 after a usage line when it is missing. */
static inline int sim_setup(int *argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    simgrid_init(argc, argv);
    if (*argc < 2) {
        fprintf(stderr, "usage: %s PLATFORM.xml [LOG_LEVEL 0-5]\n", argv[0]);
        return 2;
    }
    sg_cfg_set_string("network/model", "CM02");
    simgrid_load_platform(argv[1]);
    return 0;
}

#endif /* ECCL_TESTS_SIM_COMMON_H */
