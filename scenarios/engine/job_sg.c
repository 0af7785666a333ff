/* workload = job (the default) on SimGrid: N ranks run eccl-worker's loop
 * as actors under the fault plan; job.c judges each rank by the role the
 * plan gives it and writes events.tsv, ranks.tsv, summary.tsv and the
 * timeline plot. */
#include "sim_sg.h"
#include "chaos.h"

/* summary.tsv's rows of the simulation's deterministic costs (job.h's
 * write_costs): messages, conns, waits, malloc's peaks. */
static void write_costs(void *ctx, FILE *sf)
{
    const sim *s = ctx;
    eccl_results_kv_u64(sf, "messages", eccl_sg_world_messages(s->w));
    eccl_results_kv_u64(sf, "conns", eccl_sg_world_conns(s->w));
    eccl_results_kv_u64(sf, "waits", eccl_sg_world_waits(s->w));
    eccl_results_kv_u64(sf, "heap_peak_bytes", s->heap_peak);
    eccl_results_kv_u64(sf, "mmap_peak_bytes", s->mmap_peak);
}

static void write_tail(void *ctx, FILE *sf)
{
    const sim *s = ctx;
    eccl_scn_sg_write_transport(sf, s, s->cfg);
}

/* ---- chaos = FILE: the plan around every rank's simulated env ---------- */

/* The plan kills the rank whose env it wraps, from inside one of its net
 * calls: a killer actor does it now, as it does a fault plan's kill, and
 * the calling actor stops here, never to return into the library. */
static void sg_chaos_kill(void *arg)
{
    rank_state *r = arg;
    eccl_sg_printf("eccl-sim", "the chaos plan kills rank=%d host=%s", r->idx, r->host);
    eccl_scn_sg_kill_rank_at(rank_sim(r), r, eccl_sg_now_ns());
    sg_actor_suspend(sg_actor_self());
}

/* A rank's comm env is made in its worker actor, whose data is the rank. */
static eccl_result sg_chaos_wrap(void *ctx, eccl_env *env)
{
    sim *s = ctx;
    rank_state *r = sg_actor_self_get_data();
    eccl_chaos_plan *plan;
    eccl_result rc = eccl_chaos_plan_parse(s->cfg->chaos_plan, NULL, 0, &plan);
    if (rc != ECCL_OK) return rc;
    rc = eccl_chaos_wrap(env, plan, r->host, sg_chaos_kill, r);
    if (rc != ECCL_OK) {
        eccl_chaos_plan_free(plan);
        return rc;
    }
    eccl_chaos_set_origin(env, 0); /* the plan's times are the scenario's */
    return ECCL_OK;
}

static void sg_chaos_unwrap(void *ctx, eccl_env *env)
{
    (void)ctx;
    eccl_chaos_unwrap(env);
}

int eccl_scn_sg_job(sim *s, eccl_scenario *cfg, const char *file, const char *outdir)
{
    if (cfg->chaos_plan) {
        const eccl_sg_env_hooks hooks = {.ctx = s, .created = sg_chaos_wrap, .destroying = sg_chaos_unwrap};
        eccl_sg_world_set_env_hooks(s->w, &hooks);
    }
    /* Every random choice comes from this one stream, in this order. */
    uint64_t rng = cfg->seed;
    for (int i = 0; i < cfg->ranks; i++) {
        rank_state *r = &s->job.rk[i];
        eccl_scn_job_rank_init(&s->job, r, i + 1, &rng); /* the first to arrive founds the group */
        r->kill_iter = -1;
        r->nstarts = 1;
    }
    /* Faults name links and ranks of the loaded platform: a scenario error
     * found here is still exit status 2. */
    if (eccl_scn_sg_resolve_links(file, cfg, s->flinks) || eccl_scn_sg_plan_roles(file, cfg, s)) {
        eccl_sg_world_destroy(s->w);
        return 2;
    }
    if (cfg->expect_survivors > cfg->ranks) {
        fprintf(stderr, "eccl-sim: %s: expect_survivors = %d: only %d ranks\n", file,
                cfg->expect_survivors, cfg->ranks);
        return 2;
    }
    char traces[1024];
    if (cfg->trace && (eccl_scn_job_trace_dir(outdir, traces, sizeof traces) ||
                       eccl_sg_world_set_trace_dir(s->w, traces) != ECCL_OK)) {
        fprintf(stderr, "eccl-sim: cannot prepare %s/traces\n", outdir);
        return 1;
    }
    char rph[32] = ""; /* said only when not the default */
    if (cfg->ranks_per_host > 1) snprintf(rph, sizeof rph, " ranks_per_host=%d", cfg->ranks_per_host);
    eccl_sg_printf("eccl-sim", "scenario=%s seed=%llu platform=%s hosts=%d ranks=%d%s iters=%d "
                   "count=%ld buffers=%s faults=%d out=%s", cfg->name,
                   (unsigned long long)cfg->seed, cfg->platform, cfg->hosts, cfg->ranks, rph,
                   cfg->iters, cfg->count, eccl_scn_buffers_name(cfg), cfg->nfaults, outdir);

    int initial = 0; /* ranks that start with the job: the first step waits for them all */
    for (int i = 0; i < cfg->ranks; i++) initial += !s->job.rk[i].late;
    eccl_scn_sg_start_actor(s->w, "master", "node-0", eccl_scn_sg_master_main, s);
    if (s->norder > 0) eccl_scn_sg_start_actor(s->w, "faults", "node-0", eccl_scn_sg_plan_main, s);
    if (eccl_scn_sg_start_relays(s) != 0) {
        fprintf(stderr, "eccl-sim: out of memory for %d relays\n", cfg->relays);
        return 2;
    }
    for (int i = 0; i < cfg->ranks; i++)
        eccl_scn_sg_start_worker(&s->job.rk[i], s->job.rk[i].arrive_ns, s->job.rk[i].late ? 0 : initial);
    simgrid_run();
    uint64_t end_ns = eccl_sg_now_ns();

    const eccl_scn_job_report rep = {.clock = "simulated", .end_key = "sim_time_s", .write_costs = write_costs,
                                     .write_tail = write_tail, .ctx = s};
    const int rc = eccl_scn_job_finish(&s->job, outdir, end_ns, &rep);
    if (cfg->ranks >= FAST_EXIT_RANKS && !getenv("ECCL_SIM_TEARDOWN")) {
        /* Everything is written: the process's end frees it all at once. */
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    eccl_scn_sg_free(s, cfg);
    return rc;
}
