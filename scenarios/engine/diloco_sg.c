/* workload = diloco on SimGrid: examples/diloco_loop.c workers as actors
 * under seeded churn; diloco.c decides the churn and judges the run. */
#include "sim_sg.h"
#include "diloco.h"

static void dl_rank_main(int argc, char **argv);

static void dl_start_worker(sim *s, rank_state *r, uint64_t at_ns)
{
    eccl_scn_dl_worker_starts(s->dl, r, at_ns);
    r->pid = eccl_scn_sg_start_actor(s->w, r->name, r->host, dl_rank_main, r);
}

/* A crash of the rank's process (with one rank per host: of its host). */
static void dl_kill(sim *s, rank_state *r)
{
    if (s->cfg->ranks_per_host == 1) eccl_sg_world_kill_host(s->w, r->host);
    else eccl_sg_world_kill_process(s->w, r->pid);
    eccl_scn_dl_killed(s->dl, r, eccl_sg_now_ns());
}

/* A new worker where one was killed (its host back on first). */
static void dl_respawn(sim *s, rank_state *r)
{
    if (s->cfg->ranks_per_host == 1 && eccl_sg_world_host_on(s->w, r->host) != ECCL_OK) s->job.oom = 1;
    eccl_scn_dl_respawns(s->dl, r, eccl_sg_now_ns());
    r->pid = eccl_scn_sg_start_actor(s->w, r->name, r->host, dl_rank_main, r);
}

/* The churn's decisions at their seeded simulated times. */
static void churn_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sim *s = sg_actor_self_get_data();
    while (s->dl->next_ns != UINT64_MAX) {
        sg_actor_sleep_until((double)s->dl->next_ns / 1e9);
        int kill;
        rank_state *r;
        if (eccl_scn_dl_decide(s->dl, &kill, &r)) {
            if (kill) dl_kill(s, r);
            else dl_respawn(s, r);
        }
    }
    s->churn_done = 1;
}

/* The loop's lines: to the checker (simulated time) and to events.tsv. */
static void dl_print(void *ctx, int to_stderr, const char *line)
{
    rank_state *r = ctx;
    sim *s = rank_sim(r);
    if (to_stderr || s->verbose) eccl_sg_printf(r->name, "%s%s", to_stderr ? "stderr: " : "", line);
    if (to_stderr) return;
    eccl_scn_dl_line(s->dl, r, eccl_sg_now_ns(), line);
}

static void dl_rank_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    rank_state *r = sg_actor_self_get_data();
    sim *s = rank_sim(r);
    const eccl_scenario *c = s->cfg;
    if (r->arrive_ns > eccl_sg_now_ns()) sg_actor_sleep_until((double)r->arrive_ns / 1e9);
    eccl_worker_sg sim_launch;
    eccl_worker_sg_init(&sim_launch, s->w, dl_print, r);
    eccl_diloco_options o;
    eccl_diloco_options_init(&o);
    char master[2 * ECCL_ADDR_MAX + 1];
    eccl_scn_sg_rank_master(s, r, master, sizeof master);
    o.master = master;
    o.count = (size_t)c->count;
    o.step_ms = (int)llround(c->step_s * 1e3);
    o.peer_timeout_ms = (uint32_t)llround(c->peer_timeout_s * 1e3);
    o.stop_after_ms = c->duration_s * 1e3;
    if (r->idx == 1 && r->lives == 1) o.corrupt_at = c->corrupt_at;
    const int status = eccl_diloco_run(&sim_launch.launch, &o);
    eccl_scn_dl_worker_returned(s->dl, r, status);
}

static void write_tail(void *ctx, FILE *sf)
{
    const sim *s = ctx;
    eccl_scn_sg_write_transport(sf, s, s->cfg);
}

/* Runs the diloco workload on the loaded platform and judges it; returns
 * the exit status. */
int eccl_scn_sg_diloco(sim *s, eccl_scenario *cfg, const char *outdir)
{
    eccl_scn_dl dl;
    if (eccl_scn_dl_init(&dl, &s->job) != 0) return 1;
    s->dl = &dl;
    uint64_t rng = cfg->seed;
    for (int i = 0; i < cfg->ranks; i++) {
        rank_state *r = &s->job.rk[i];
        eccl_scn_job_rank_init(&s->job, r, i + 1, &rng);
        r->kill_iter = -1;
        r->last_rev = UINT64_MAX;
    }
    char churn[160];
    eccl_scn_dl_churn_words(cfg, churn, sizeof churn);
    eccl_sg_printf("eccl-sim", "scenario=%s seed=%llu platform=%s hosts=%d ranks=%d workload=diloco "
                   "count=%ld duration=%.3fs churn=%s out=%s", cfg->name,
                   (unsigned long long)cfg->seed, cfg->platform, cfg->hosts, cfg->ranks,
                   cfg->count, cfg->duration_s, churn, outdir);
    s->churn_done = !cfg->have_churn;
    eccl_scn_sg_start_actor(s->w, "master", "node-0", eccl_scn_sg_master_main, s);
    if (eccl_scn_sg_start_relays(s) != 0) {
        fprintf(stderr, "eccl-sim: out of memory for %d relays\n", cfg->relays);
        return 2;
    }
    if (cfg->have_churn) eccl_scn_sg_start_actor(s->w, "churn", "node-0", churn_main, s);
    for (int i = 0; i < cfg->ranks; i++) dl_start_worker(s, &s->job.rk[i], s->job.rk[i].arrive_ns);
    simgrid_run();
    const eccl_scn_job_report rep = {.clock = "simulated time", .end_key = "sim_time_s", .write_tail = write_tail,
                                     .ctx = s};
    const int rc = eccl_scn_dl_finish(&dl, outdir, eccl_sg_now_ns(), &rep);
    s->dl = NULL;
    return rc;
}
