/* workload = job (the default) on SimGrid: N ranks run eccl-worker's loop
 * as actors under the fault plan; job.c judges each rank by the role the
 * plan gives it and writes events.tsv, ranks.tsv, summary.tsv and the
 * timeline plot. */
#include "sim_sg.h"

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

int eccl_scn_sg_job(sim *s, eccl_scenario *cfg, const char *file, const char *outdir)
{
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
