/* workload = nccl2_bootstrap: the NCCL 2.x baseline.
 * The root (bootstrapRoot) on node-0, where eccl's master would be, on an env
 * charged per message as the master's; each rank (bootstrapInit and its ring
 * all-gather) on its host, arriving as the worker's ranks do. Both run
 * sim_nccl2.c over net_sg. The checker: the root served everyone, and
 * every rank's table is complete and correct, entry by entry as it lands (entry
 * j is the address rank j bound; held per rank as its last slot only, so a
 * 96k-rank run needs no N x N table). NCCL 2.x has no fault tolerance: a rank
 * that dies fails the bootstrap (its neighbours see the stream end and give up,
 * the rest time out at nccl2_timeout). */
#include "sim_sg.h"

typedef struct n2_rank {
    uint64_t sent_ns, next_ns, ring_ns, done_ns; /* phases reached; 0: not */
    uint32_t entries, bad_entries, order_bad;
    int refused;
    int returned, failed, killed;
    char addr[ECCL_NCCL2_ADDR_BYTES]; /* its peer listen address: the truth */
    char why[64];
} n2_rank;

typedef struct n2_run {
    sim *s;
    n2_rank *rk;
    uint64_t gathered_ns, scattered_ns;
    int root_returned, root_failed, root_refused;
    char root_why[96];
    int done, next_report; /* ranks with a complete table; the next tenth announced */
    eccl_nccl2_hooks hooks;
} n2_run;

static void n2_sleep(void *ctx, uint64_t ns)
{
    (void)ctx;
    sg_actor_sleep_for((double)ns / 1e9);
}

static void n2_listener_interest(void *ctx, eccl_env *env, eccl_listener *l, int on)
{
    (void)ctx;
    eccl_sg_listener_set_interest(env, l, on);
}

static void n2_listening(void *ctx, int rank, const char *addr)
{
    n2_run *run = ctx;
    memcpy(run->rk[rank].addr, addr, ECCL_NCCL2_ADDR_BYTES);
}

static void n2_mark(void *ctx, int rank, int what)
{
    n2_run *run = ctx;
    sim *s = run->s;
    const uint64_t now = eccl_sg_now_ns();
    if (rank < 0) {
        const int gathered = what == ECCL_NCCL2_GATHERED;
        if (gathered) run->gathered_ns = now;
        else run->scattered_ns = now;
        eccl_sg_printf("eccl-sim", "nccl2 root: %s (%d ranks)",
                       gathered ? "every rank's info in" : "every rank told its ring successor",
                       s->cfg->ranks);
        eccl_scn_sg_add_event(s, 0, gathered ? "root_gathered" : "root_scattered", -1, -1, NULL, NULL);
        return;
    }
    n2_rank *x = &run->rk[rank];
    static const char *const names[] = {"sent", "next", "ring", "done"};
    uint64_t *at[] = {&x->sent_ns, &x->next_ns, &x->ring_ns, &x->done_ns};
    *at[what] = now;
    eccl_scn_sg_add_event(s, rank + 1, names[what], -1, -1, NULL, NULL);
    if (what != ECCL_NCCL2_DONE) return;
    /* Progress: each tenth of the ranks with a complete table. */
    run->done++;
    while (run->next_report <= 10 && run->done * 10 >= run->next_report * s->cfg->ranks) {
        if (run->next_report > 0)
            eccl_sg_printf("eccl-sim", "progress ranks_done=%d/%d", run->done, s->cfg->ranks);
        run->next_report++;
    }
}

static void n2_entry(void *ctx, int rank, int step, int slot, const char *addr)
{
    n2_run *run = ctx;
    const int n = run->s->cfg->ranks;
    n2_rank *x = &run->rk[rank];
    x->entries++;
    /* The ring's order: own first, then rank - step - 1 at each step. */
    const int want = step < 0 ? rank : (rank - step - 1 + n) % n;
    if (slot != want || slot < 0 || slot >= n) {
        x->order_bad++;
        return;
    }
    if (memcmp(addr, run->rk[slot].addr, ECCL_NCCL2_ADDR_BYTES) != 0) x->bad_entries++;
}

static void n2_root_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    n2_run *run = sg_actor_self_get_data();
    sim *s = run->s;
    const eccl_scenario *c = s->cfg;
    eccl_env *env = NULL;
    eccl_nccl2_result res;
    memset(&res, 0, sizeof res);
    const eccl_nccl2_options o = {.root_addr = s->master_addr, .nranks = c->ranks,
                                  .deadline_ns = c->nccl2_timeout_ns};
    int rc = -1;
    if (eccl_sg_env_create_master(s->w, "nccl2-root", &env) != ECCL_OK)
        snprintf(res.why, sizeof res.why, "root: cannot create its env");
    else
        rc = eccl_nccl2_root_run(env, &o, &run->hooks, &res);
    eccl_sg_env_destroy(env);
    run->root_returned = 1;
    run->root_failed = rc != 0;
    run->root_refused = res.refused;
    snprintf(run->root_why, sizeof run->root_why, "%s", res.why);
    if (rc != 0) {
        eccl_sg_printf("eccl-sim", "nccl2 root failed: %s", res.why);
        eccl_scn_sg_add_event(s, 0, "root_failed", -1, -1, NULL, NULL);
    }
}

static void n2_rank_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    rank_state *r = sg_actor_self_get_data();
    sim *s = rank_sim(r);
    n2_run *run = s->n2;
    const eccl_scenario *c = s->cfg;
    n2_rank *x = &run->rk[r->idx - 1];
    if (r->arrive_ns > eccl_sg_now_ns()) sg_actor_sleep_until((double)r->arrive_ns / 1e9);
    eccl_env *env = NULL;
    eccl_nccl2_result res;
    memset(&res, 0, sizeof res);
    const eccl_nccl2_options o = {.root_addr = s->master_addr, .nranks = c->ranks,
                                  .rank = r->idx - 1, .host = r->host,
                                  .stagger_ns = c->nccl2_stagger_ns,
                                  .deadline_ns = c->nccl2_timeout_ns, .replay = c->nccl2_replay,
                                  .corrupt = r->idx == c->nccl2_corrupt};
    int rc = -1;
    if (eccl_sg_env_create(s->w, r->name, &env) != ECCL_OK)
        snprintf(res.why, sizeof res.why, "cannot create its env");
    else
        rc = eccl_nccl2_rank_run(env, &o, &run->hooks, &res);
    eccl_sg_env_destroy(env);
    x->returned = 1;
    x->failed = rc != 0;
    x->refused = res.refused;
    snprintf(x->why, sizeof x->why, "%.63s", res.why);
    if (rc != 0) {
        if (s->verbose) eccl_sg_printf(r->name, "nccl2 bootstrap failed: %s", res.why);
        eccl_scn_sg_add_event(s, r->idx, "failed", -1, -1, NULL, NULL);
    }
}

/* The fault plan: crashes (kill) and silent host failures (host_off), in
 * time order, then file order. */
static void n2_plan_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    sim *s = sg_actor_self_get_data();
    const eccl_scenario *c = s->cfg;
    for (int k = 0; k < s->norder; k++) {
        const eccl_scn_fault *f = &c->faults[s->order[k]];
        sg_actor_sleep_until((double)f->at_ns / 1e9);
        rank_state *r = &s->job.rk[f->rank - 1];
        int first = f->rank, last = f->rank;
        if (f->kind == F_HOST_OFF) {
            eccl_scn_host_ranks(c, eccl_scn_rank_host(c, f->rank), &first, &last);
            eccl_sg_printf("eccl-sim", "host_off rank=%d host=%s (silent)", r->idx, r->host);
            eccl_sg_world_host_off(s->w, r->host);
        } else if (c->ranks_per_host == 1) {
            eccl_sg_printf("eccl-sim", "kill rank=%d host=%s", r->idx, r->host);
            eccl_sg_world_kill_host(s->w, r->host);
        } else {
            eccl_sg_printf("eccl-sim", "kill rank=%d host=%s (its process)", r->idx, r->host);
            if (!s->n2->rk[r->idx - 1].returned) eccl_sg_world_kill_process(s->w, r->pid);
        }
        for (int q = first; q <= last; q++) {
            n2_rank *x = &s->n2->rk[q - 1];
            if (x->returned || x->killed) continue; /* over already, or down */
            x->killed = 1;
            eccl_scn_sg_add_event(s, q, f->kind == F_HOST_OFF ? "host_off" : "killed", -1, -1, NULL, NULL);
        }
    }
}

/* Events in time order, ties as they were recorded: the replayed "done"
 * rows are appended after the run. */
static int n2_event_cmp(const void *a, const void *b)
{
    const event_row *x = a, *y = b;
    if (x->t_ns != y->t_ns) return x->t_ns < y->t_ns ? -1 : 1;
    /* iter holds the row's recording order here (then reset): stable. */
    return x->iter < y->iter ? -1 : x->iter > y->iter;
}

static int n2_write_plot(const eccl_scenario *c, const char *dir)
{
    FILE *f = eccl_results_open(dir, "plot.gp");
    if (!f) return -1;
    fprintf(f,
            "# Generated by eccl-sim for scenario %s (workload = nccl2_bootstrap): when\n"
            "# each rank reached each phase of NCCL 2.x's bootstrap. Run in this directory:\n"
            "# gnuplot plot.gp  (reads ranks.tsv)\n"
            "set terminal pngcairo size 1000,600 font \",10\"\n"
            "set output \"plot.png\"\n"
            "set datafile separator \"\\t\"\n"
            "set datafile missing \"-\"\n"
            "set title \"%s: NCCL 2.x bootstrap of %d ranks (all-gather: %s)\"\n"
            "set xlabel \"rank\"\n"
            "set ylabel \"simulated time (s)\"\n"
            "set key outside bottom center horizontal\n"
            "plot \"ranks.tsv\" skip 1 using 1:4 with dots lc rgb \"#1f5fbf\" title \"info sent to root\", \\\n"
            "     \"\" skip 1 using 1:5 with dots lc rgb \"#9467bd\" title \"successor from root\", \\\n"
            "     \"\" skip 1 using 1:6 with dots lc rgb \"#ff7f0e\" title \"ring formed\", \\\n"
            "     \"\" skip 1 using 1:7 with dots lc rgb \"#2a9d3f\" title \"table complete\"\n",
            c->name, c->name, c->ranks, c->nccl2_replay ? "replayed" : "messages");
    return fclose(f) == 0 ? 0 : -1;
}

static void n2_fmt(char *buf, size_t size, uint64_t ns)
{
    if (ns) eccl_results_fmt_time(buf, size, ns);
    else snprintf(buf, size, "-");
}

int eccl_scn_sg_nccl2(sim *s, eccl_scenario *cfg, const char *outdir)
{
    const int n = cfg->ranks;
    n2_run *run = calloc(1, sizeof *run);
    int *order = calloc((size_t)cfg->nfaults + 1, sizeof *order);
    if (!run || !order || !(run->rk = calloc((size_t)n, sizeof *run->rk))) {
        fprintf(stderr, "eccl-sim: out of memory\n");
        if (run) free(run->rk);
        free(run);
        free(order);
        return 1;
    }
    run->s = s;
    run->hooks = (eccl_nccl2_hooks){.ctx = run, .sleep_ns = n2_sleep,
                                    .listener_interest = n2_listener_interest,
                                    .listening = n2_listening, .mark = n2_mark, .entry = n2_entry};
    s->n2 = run;
    /* The same arrivals as the worker's ranks: the same seed gives the
     * eccl twin of a scenario the same start-up. */
    uint64_t rng = cfg->seed;
    for (int i = 0; i < n; i++) eccl_scn_job_rank_init(&s->job, &s->job.rk[i], i + 1, &rng);
    for (int i = 0; i < cfg->nfaults; i++) order[i] = i;
    qsort_r(order, (size_t)cfg->nfaults, sizeof *order, eccl_scn_fault_order_cmp, cfg);
    s->order = order;
    s->norder = cfg->nfaults;
    char rph[32] = "";
    if (cfg->ranks_per_host > 1) snprintf(rph, sizeof rph, " ranks_per_host=%d", cfg->ranks_per_host);
    eccl_sg_printf("eccl-sim", "scenario=%s seed=%llu platform=%s hosts=%d ranks=%d%s "
                   "workload=nccl2_bootstrap allgather=%s root_stagger=%.6fs timeout=%.3fs "
                   "master_msg_cost=%.9fs faults=%d out=%s", cfg->name,
                   (unsigned long long)cfg->seed, cfg->platform, cfg->hosts, n, rph,
                   cfg->nccl2_replay ? "replay" : "messages", (double)cfg->nccl2_stagger_ns / 1e9,
                   (double)cfg->nccl2_timeout_ns / 1e9, cfg->master_msg_cost_s, cfg->nfaults,
                   outdir);
    eccl_scn_sg_start_actor(s->w, "nccl2-root", "node-0", n2_root_main, run);
    if (s->norder > 0) eccl_scn_sg_start_actor(s->w, "faults", "node-0", n2_plan_main, s);
    for (int i = 0; i < n; i++) s->job.rk[i].pid = eccl_scn_sg_start_actor(s->w, s->job.rk[i].name, s->job.rk[i].host, n2_rank_main, &s->job.rk[i]);
    simgrid_run();
    uint64_t end_ns = eccl_sg_now_ns();

    /* Replay: the all-gather's timing from when each rank's ring was up
     * and each hop's cost over the same network model (sim_nccl2.h). */
    int replayed = 0, all_ring = 1;
    for (int i = 0; i < n; i++) all_ring &= run->rk[i].ring_ns > 0 && !run->rk[i].failed &&
                                             !run->rk[i].killed && run->rk[i].returned;
    if (cfg->nccl2_replay && all_ring && !run->root_failed) {
        double *start = malloc((size_t)n * sizeof *start), *lat = malloc((size_t)n * sizeof *lat),
               *wire = malloc((size_t)n * sizeof *wire), *done = malloc((size_t)n * sizeof *done);
        int routes = start && lat && wire && done;
        for (int i = 0; routes && i < n; i++) {
            start[i] = (double)run->rk[i].ring_ns / 1e9;
            /* A slot message: NCCL's 4-byte length and its 28 bytes. */
            routes = eccl_sg_route_cost(s->job.rk[(i + n - 1) % n].host, s->job.rk[i].host,
                                        4 + ECCL_NCCL2_ADDR_BYTES, &lat[i], &wire[i]) == 0;
        }
        if (routes) {
            eccl_sg_printf("eccl-sim", "nccl2 all-gather: replaying %d ranks x %d steps", n, n - 1);
            if (eccl_nccl2_replay(n, start, lat, wire, done) == 0) {
                replayed = 1;
                for (int i = 0; i < n; i++) {
                    run->rk[i].done_ns = (uint64_t)llround(done[i] * 1e9);
                    eccl_scn_sg_add_event(s, i + 1, "done", -1, -1, NULL, NULL);
                    if (s->job.nev) s->job.ev[s->job.nev - 1].t_ns = run->rk[i].done_ns;
                    if (run->rk[i].done_ns > end_ns) end_ns = run->rk[i].done_ns;
                }
            }
        }
        free(start);
        free(lat);
        free(wire);
        free(done);
        if (!replayed) s->job.oom = 1;
    }
    if (s->job.oom) {
        fprintf(stderr, "eccl-sim: out of memory while running\n");
    }
    /* Events in time order (replayed rows land where they belong). */
    for (size_t i = 0; i < s->job.nev; i++) s->job.ev[i].iter = (int)i;
    qsort(s->job.ev, s->job.nev, sizeof *s->job.ev, n2_event_cmp);
    for (size_t i = 0; i < s->job.nev; i++) s->job.ev[i].iter = -1;

    /* ---- checks ---- */
    int failed = 0, killed = 0, incomplete = 0, refused = run->root_refused;
    uint64_t bad = 0, misordered = 0, entries = 0, boot_ns = 0, boot_min_ns = 0, ring_ns = 0;
    const char *why = NULL;
    char first_why[128] = "";
    FILE *rf = eccl_results_open(outdir, "ranks.tsv");
    if (rf)
        fputs("rank\thost\tarrive_s\tsent_s\tnext_s\tring_s\tdone_s\trefused\tentries\t"
              "bad_entries\tstatus\tcheck\n", rf);
    for (int i = 0; i < n; i++) {
        const n2_rank *x = &run->rk[i];
        const rank_state *r = &s->job.rk[i];
        refused += x->refused;
        bad += x->bad_entries;
        misordered += x->order_bad;
        entries += x->entries;
        killed += x->killed;
        /* Complete: every entry landed, each in the ring's order and each
         * the address its rank bound; with a replay, the ring was formed
         * (its entries are not moved). */
        const int table_ok = cfg->nccl2_replay
                                 ? replayed
                                 : x->entries == (uint32_t)n && !x->bad_entries && !x->order_bad;
        const int ok = x->returned && !x->failed && !x->killed && x->done_ns && table_ok;
        const char *status = x->killed     ? "killed"
                             : !x->returned ? "hung"
                             : x->failed    ? "failed"
                             : !table_ok    ? "bad_table"
                                            : "ok";
        if (!ok) {
            failed++;
            incomplete += x->returned && !x->failed && !table_ok;
            if (!first_why[0])
                snprintf(first_why, sizeof first_why, "rank %d: %s%s%s", r->idx, status,
                         x->why[0] ? ": " : "", x->why);
        }
        if (x->done_ns > boot_ns) boot_ns = x->done_ns;
        if (x->done_ns && (!boot_min_ns || x->done_ns < boot_min_ns)) boot_min_ns = x->done_ns;
        if (x->ring_ns > ring_ns) ring_ns = x->ring_ns;
        if (rf) {
            char t[5][32];
            eccl_results_fmt_time(t[0], sizeof t[0], r->arrive_ns);
            n2_fmt(t[1], sizeof t[1], x->sent_ns);
            n2_fmt(t[2], sizeof t[2], x->next_ns);
            n2_fmt(t[3], sizeof t[3], x->ring_ns);
            n2_fmt(t[4], sizeof t[4], x->done_ns);
            fprintf(rf, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%u\t%u\t%s\t%s\n", r->idx, r->host, t[0],
                    t[1], t[2], t[3], t[4], x->refused, x->entries, x->bad_entries + x->order_bad,
                    status, ok ? "pass" : "FAIL");
        }
    }
    if (s->job.oom) why = "internal";
    else if (killed) why = "killed";
    else if (!run->root_returned || run->root_failed) why = "root_failed";
    else if (bad || misordered) why = "bad_entries";
    else if (failed) why = "rank_failed";
    const int failures = why != NULL;
    if (failures) {
        eccl_sg_printf("eccl-sim", "FAIL nccl2 bootstrap: %s (%d of %d ranks failed their check)",
                       why, failed, n);
        if (run->root_why[0]) eccl_sg_printf("eccl-sim", "root: %s", run->root_why);
        if (first_why[0]) eccl_sg_printf("eccl-sim", "first: %s", first_why);
        if (bad || misordered)
            eccl_sg_printf("eccl-sim", "%llu table entries differ from the address their rank "
                           "bound, %llu out of the ring's order", (unsigned long long)bad,
                           (unsigned long long)misordered);
    }
    /* Only a bootstrap every rank finished has a time. */
    char boot[32] = "-", boot_min[32] = "-", gathered[32], scattered[32], ring[32], sim_time[32];
    if (!failures) {
        eccl_results_fmt_time(boot, sizeof boot, boot_ns);
        eccl_results_fmt_time(boot_min, sizeof boot_min, boot_min_ns);
    }
    n2_fmt(gathered, sizeof gathered, run->gathered_ns);
    n2_fmt(scattered, sizeof scattered, run->scattered_ns);
    n2_fmt(ring, sizeof ring, all_ring ? ring_ns : 0);
    eccl_results_fmt_time(sim_time, sizeof sim_time, end_ns);
    int io_err = rf ? (fclose(rf) != 0) : 1;
    io_err |= eccl_scn_job_write_events(&s->job, outdir) != 0;
    FILE *sf = eccl_results_summary_open(outdir);
    if (sf) {
        eccl_results_kv_str(sf, "scenario", cfg->name);
        eccl_results_kv_u64(sf, "seed", cfg->seed);
        eccl_results_kv_str(sf, "platform", cfg->platform);
        eccl_results_kv_i64(sf, "hosts", cfg->hosts);
        eccl_results_kv_i64(sf, "ranks", n);
        eccl_results_kv_i64(sf, "ranks_per_host", cfg->ranks_per_host);
        eccl_results_kv_str(sf, "workload", "nccl2_bootstrap");
        eccl_results_kv_str(sf, "allgather", cfg->nccl2_replay ? "replay" : "messages");
        eccl_results_kv_time(sf, "root_stagger_s", cfg->nccl2_stagger_ns);
        eccl_results_kv_time(sf, "timeout_s", cfg->nccl2_timeout_ns);
        eccl_results_kv_time(sf, "master_msg_cost_s", (uint64_t)llround(cfg->master_msg_cost_s * 1e9));
        eccl_results_kv_str(sf, "checks", failures ? "fail" : "pass");
        eccl_results_kv_str(sf, "reason", why ? why : "-");
        eccl_results_kv_str(sf, "bootstrap_s", boot);
        eccl_results_kv_str(sf, "bootstrap_min_s", boot_min);
        eccl_results_kv_str(sf, "root_gathered_s", gathered);
        eccl_results_kv_str(sf, "root_scattered_s", scattered);
        eccl_results_kv_str(sf, "ring_formed_s", ring);
        eccl_results_kv_i64(sf, "refused", refused);
        eccl_results_kv_i64(sf, "failed_ranks", failed);
        eccl_results_kv_i64(sf, "killed", killed);
        eccl_results_kv_i64(sf, "incomplete", incomplete);
        eccl_results_kv_u64(sf, "entries_checked", entries);
        eccl_results_kv_u64(sf, "bad_entries", bad + misordered);
        eccl_results_kv_u64(sf, "events", s->job.nev);
        eccl_results_kv_str(sf, "sim_time_s", sim_time);
        io_err |= eccl_results_close(sf) != 0;
    } else {
        io_err = 1;
    }
    io_err |= n2_write_plot(cfg, outdir) != 0;
    const char *plot = io_err ? "none" : eccl_results_plot_png(outdir, &io_err);
    printf("scenario=%s seed=%llu ranks=%d workload=nccl2_bootstrap allgather=%s checks=%s%s%s "
           "bootstrap_s=%s root_gathered_s=%s root_scattered_s=%s ring_formed_s=%s refused=%d "
           "failed=%d killed=%d bad_entries=%llu sim_time_s=%s events=%zu out=%s plot=%s\n",
           cfg->name, (unsigned long long)cfg->seed, n, cfg->nccl2_replay ? "replay" : "messages",
           failures ? "fail" : "pass", why ? " reason=" : "", why ? why : "", boot, gathered,
           scattered, ring, refused, failed, killed, (unsigned long long)(bad + misordered),
           sim_time, s->job.nev, outdir, plot);
    free(run->rk);
    free(run);
    s->n2 = NULL;
    return failures == 0 && !io_err ? 0 : 1;
}

