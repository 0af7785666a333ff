/* workload = diloco: examples/diloco_loop.c workers under seeded churn
 * (kills and respawns), judged line by line by churn_check.c. */
#include "sim_sg.h"

static void dl_rank_main(int argc, char **argv);

static void dl_start_worker(sim *s, rank_state *r, uint64_t at_ns)
{
    r->lives++;
    r->running = 1;
    r->returned = 0;
    r->status = 0;
    r->exit_status = -1;
    r->arrive_ns = at_ns;
    r->life = s->dl_lives++;
    s->dl_live++;
    r->pid = eccl_scn_sg_start_actor(s->w, r->name, r->host, dl_rank_main, r);
}

static void dl_worker_ended(sim *s, rank_state *r)
{
    r->running = 0;
    s->dl_live--;
}

/* A crash of the rank's process (with one rank per host: of its host). */
static void dl_kill(sim *s, rank_state *r)
{
    if (s->cfg->ranks_per_host == 1) eccl_sg_world_kill_host(s->w, r->host);
    else eccl_sg_world_kill_process(s->w, r->pid);
    r->killed++;
    s->dl_kills++;
    dl_worker_ended(s, r);
    eccl_scn_sg_add_event(s, r->idx, "killed", -1, -1, NULL, NULL);
}

/* A new worker where one was killed (its host back on first). */
static void dl_respawn(sim *s, rank_state *r)
{
    if (s->cfg->ranks_per_host == 1 && eccl_sg_world_host_on(s->w, r->host) != ECCL_OK) s->job.oom = 1;
    eccl_scn_sg_add_event(s, r->idx, "host_on", -1, -1, NULL, NULL);
    s->dl_spawns++;
    dl_start_worker(s, r, eccl_sg_now_ns());
}

/* May rank r be killed now: a worker holding the state may go only while
 * two other holders stay (with none left the state is gone by definition);
 * with corrupt_at, rank 1's first worker lives until it has corrupted. */
static int dl_victim_ok(const sim *s, const rank_state *r, int holders)
{
    if (!r->running) return 0;
    if (s->cfg->corrupt_at && r->idx == 1 && r->lives == 1 &&
        (r->last_rev == UINT64_MAX || r->last_rev < s->cfg->corrupt_at))
        return 0;
    return !churn_check_holds_state(&s->chk, r->life) || holders >= 3;
}

/* Every interval (seeded, in [lo, hi]) until `until`: kill a random worker
 * (while more than min are alive) or start one on a random free rank
 * (while fewer than max are alive), a coin deciding when both are allowed.
 * Decisions read the simulation's state at seeded simulated times: the
 * same seed gives the same run. */
static void churn_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sim *s = sg_actor_self_get_data();
    const eccl_scenario *c = s->cfg;
    uint64_t rng = c->churn_have_seed ? c->churn_seed : c->seed ^ 0x636875726eull;
    uint64_t t = 0;
    for (;;) {
        t += c->churn_lo_ns + eccl_scn_prng_below(&rng, c->churn_hi_ns - c->churn_lo_ns + 1);
        if (t >= c->churn_until_ns) break;
        sg_actor_sleep_until((double)t / 1e9);
        int alive = 0, holders = 0, cand = 0, free_ranks = 0;
        for (int i = 0; i < c->ranks; i++) {
            const rank_state *r = &s->job.rk[i];
            if (!r->running) {
                free_ranks++;
                continue;
            }
            alive++;
            holders += churn_check_holds_state(&s->chk, r->life);
        }
        for (int i = 0; i < c->ranks; i++) cand += dl_victim_ok(s, &s->job.rk[i], holders);
        const int can_kill = alive > c->churn_min && cand > 0;
        const int can_spawn = alive < c->churn_max && free_ranks > 0;
        const int do_kill = can_kill && (!can_spawn || (eccl_splitmix64(&rng) & 1));
        if (do_kill) {
            uint64_t pick = eccl_scn_prng_below(&rng, (uint64_t)cand);
            for (int i = 0; i < c->ranks; i++) {
                rank_state *r = &s->job.rk[i];
                if (!dl_victim_ok(s, r, holders) || pick-- > 0) continue;
                eccl_sg_printf("eccl-sim", "churn: kill rank=%d (%s); %d alive", r->idx,
                               churn_check_holds_state(&s->chk, r->life) ? "holder" : "newcomer",
                               alive - 1);
                dl_kill(s, r);
                break;
            }
        } else if (can_spawn) {
            uint64_t pick = eccl_scn_prng_below(&rng, (uint64_t)free_ranks);
            for (int i = 0; i < c->ranks; i++) {
                rank_state *r = &s->job.rk[i];
                if (r->running || pick-- > 0) continue;
                eccl_sg_printf("eccl-sim", "churn: start rank=%d; %d alive", r->idx, alive + 1);
                dl_respawn(s, r);
                break;
            }
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
    const double t = (double)eccl_sg_now_ns() / 1e9;
    churn_check_line(&s->chk, r->life, line, t);
    char event[16] = "", hash[24] = "", v[32];
    if (sscanf(line, "event=%15[a-z_]", event) != 1) return;
    int world = -1, rev = -1;
    if (churn_field(line, "world", v, sizeof v)) world = atoi(v);
    if (churn_field(line, "revision", v, sizeof v)) {
        uint64_t x = strtoull(v, NULL, 10);
        rev = x > INT_MAX ? INT_MAX : (int)x;
        if (!strcmp(event, "rev")) r->last_rev = x;
    }
    churn_field(line, "hash", hash, sizeof hash);
    if (!strcmp(event, "exit")) eccl_scn_job_field_int(line, " status=", &r->exit_status);
    if (!strcmp(event, "rev") || !strcmp(event, "joined") || !strcmp(event, "retry") ||
        !strcmp(event, "corrupt") || !strcmp(event, "error") || !strcmp(event, "gave_up") ||
        !strcmp(event, "exit") || !strcmp(event, "connected"))
        eccl_scn_sg_add_event(s, r->idx, event, rev, world, NULL, hash[0] ? hash : NULL);
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
    r->status = eccl_diloco_run(&sim_launch.launch, &o);
    r->returned = 1;
    if (r->status != 0) s->dl_bad_exits++;
    dl_worker_ended(s, r);
}

static int dl_write_plot(const eccl_scenario *c, const char *dir)
{
    char who[128], title[192];
    snprintf(who, sizeof who, "eccl-sim for scenario %s (workload = diloco)", c->name);
    snprintf(title, sizeof title, "%s: %d ranks, DiLoCo loop of %ld f32 under churn", c->name, c->ranks,
             c->count);
    return eccl_results_churn_plot(dir, who, "simulated time", title, "host_on");
}

/* Runs the diloco workload on the loaded platform and judges it; returns
 * the exit status. */
/* transport = ibv: which transport and how many RDMA writes landed (a
 * run whose payloads all stayed in the streams shows 0). Only then, so
 * other scenarios' summaries stay as they were. */
int eccl_scn_sg_diloco(sim *s, eccl_scenario *cfg, const char *outdir)
{
    if (churn_check_init(&s->chk, 1u << 16, 0) != 0) return 1;
    uint64_t rng = cfg->seed;
    for (int i = 0; i < cfg->ranks; i++) {
        rank_state *r = &s->job.rk[i];
        eccl_scn_job_rank_init(&s->job, r, i + 1, &rng);
        r->kill_iter = -1;
        r->last_rev = UINT64_MAX;
    }
    char churn[160] = "none";
    if (cfg->have_churn)
        snprintf(churn, sizeof churn, "interval=%.3f..%.3fs,min=%d,max=%d,until=%.3fs",
                 (double)cfg->churn_lo_ns / 1e9, (double)cfg->churn_hi_ns / 1e9, cfg->churn_min,
                 cfg->churn_max, (double)cfg->churn_until_ns / 1e9);
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
    const uint64_t end_ns = eccl_sg_now_ns();
    churn_check_finish(&s->chk, (double)cfg->duration_s);

    /* A worker's last life either was killed or stopped with status 0. */
    int failures = 0, bad_ranks = 0;
    FILE *rf = eccl_results_open(outdir, "ranks.tsv");
    if (rf) fputs("rank\thost\tworkers\tkilled\treturned\tstatus\tlast_revision\tcheck\n", rf);
    for (int i = 0; i < cfg->ranks; i++) {
        const rank_state *r = &s->job.rk[i];
        const int ok = r->lives == r->killed || (r->returned && r->status == 0 && r->exit_status == 0);
        bad_ranks += !ok;
        char last[24] = "-";
        if (r->last_rev != UINT64_MAX) snprintf(last, sizeof last, "%llu", (unsigned long long)r->last_rev);
        if (rf)
            fprintf(rf, "%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", r->idx, r->host, r->lives, r->killed,
                    r->returned, r->status, last, ok ? "pass" : "FAIL");
        if (!ok)
            eccl_sg_printf("eccl-sim", "FAIL rank=%d workers=%d killed=%d returned=%d status=%d",
                           r->idx, r->lives, r->killed, r->returned, r->status);
    }
    const churn_check *k = &s->chk;
    const char *why = NULL;
    if (s->job.oom) why = "internal";
    else if (k->parity_breaks) why = "parity";
    else if (k->corrupt) why = "corruption";
    else if (k->order_breaks) why = "order";
    else if (k->errors || s->dl_bad_exits || bad_ranks) why = "worker_failed";
    else if (k->max_stall_s > cfg->max_stall_s) why = "stall";
    else if (k->revisions == 0) why = "no_progress";
    else if (cfg->have_churn && s->dl_kills == 0) why = "no_kills";
    failures += why != NULL;
    if (why && k->first_problem[0]) eccl_sg_printf("eccl-sim", "first problem: %s", k->first_problem);

    char sim_time[32], stall[32];
    eccl_results_fmt_time(sim_time, sizeof sim_time, end_ns);
    eccl_results_fmt_time(stall, sizeof stall, (uint64_t)llround(k->max_stall_s * 1e9));
    int io_err = rf ? (fclose(rf) != 0) : 1;
    io_err |= eccl_scn_job_write_events(&s->job, outdir) != 0;
    FILE *sf = eccl_results_summary_open(outdir);
    if (sf) {
        eccl_scn_summary_head(sf, cfg);
        eccl_results_kv_str(sf, "workload", "diloco");
        eccl_results_kv(sf, "duration_s", "%.9f", cfg->duration_s);
        eccl_results_kv_str(sf, "churn", churn);
        eccl_results_kv_u64(sf, "revisions", k->revisions);
        eccl_results_kv_u64(sf, "max_revision", k->max_rev == UINT64_MAX ? 0 : k->max_rev);
        eccl_results_kv_u64(sf, "parity_breaks", k->parity_breaks);
        eccl_results_kv_u64(sf, "corrupt", k->corrupt);
        eccl_results_kv_u64(sf, "errors", k->errors);
        eccl_results_kv_i64(sf, "bad_ranks", bad_ranks);
        eccl_results_kv_str(sf, "max_stall_s", stall);
        eccl_results_kv_i64(sf, "kills", s->dl_kills);
        eccl_results_kv_i64(sf, "spawned", s->dl_spawns);
        eccl_results_kv_u64(sf, "joins", k->joins);
        eccl_results_kv_u64(sf, "retries", k->retries);
        eccl_results_kv_str(sf, "checks", failures ? "fail" : "pass");
        eccl_results_kv_str(sf, "reason", why ? why : "-");
        eccl_results_kv_u64(sf, "events", s->job.nev);
        eccl_results_kv_str(sf, "sim_time_s", sim_time);
        eccl_scn_sg_write_transport(sf, s, cfg);
        io_err |= eccl_results_close(sf) != 0;
    } else {
        io_err = 1;
    }
    io_err |= dl_write_plot(cfg, outdir) != 0;
    const char *plot = io_err ? "none" : eccl_results_plot_png(outdir, &io_err);
    printf("scenario=%s seed=%llu ranks=%d workload=diloco checks=%s%s%s revisions=%llu "
           "max_revision=%llu parity_breaks=%llu corrupt=%llu errors=%llu max_stall_s=%s "
           "kills=%d joins=%llu spawned=%d sim_time_s=%s events=%zu out=%s plot=%s\n",
           cfg->name, (unsigned long long)cfg->seed, cfg->ranks, failures ? "fail" : "pass",
           why ? " reason=" : "", why ? why : "", (unsigned long long)k->revisions,
           (unsigned long long)(k->max_rev == UINT64_MAX ? 0 : k->max_rev),
           (unsigned long long)k->parity_breaks, (unsigned long long)k->corrupt,
           (unsigned long long)k->errors, stall, s->dl_kills, (unsigned long long)k->joins,
           s->dl_spawns, sim_time, s->job.nev, outdir, plot);
    churn_check_free(&s->chk);
    return failures == 0 && !io_err ? 0 : 1;
}

