/* workload = diloco, runner-neutral (diloco.h): the churn's decisions, the
 * workers' lines, the verdict and the outputs. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diloco.h"
#include "results.h"

/* The churn's next decision: `interval` after the last, until `until`. */
static void draw_next(eccl_scn_dl *d)
{
    const eccl_scenario *c = d->job->cfg;
    if (!c->have_churn || d->next_ns == UINT64_MAX) {
        d->next_ns = UINT64_MAX;
        return;
    }
    d->next_ns += c->churn_lo_ns + eccl_scn_prng_below(&d->rng, c->churn_hi_ns - c->churn_lo_ns + 1);
    if (d->next_ns >= c->churn_until_ns) d->next_ns = UINT64_MAX;
}

int eccl_scn_dl_init(eccl_scn_dl *d, eccl_scn_job *j)
{
    const eccl_scenario *c = j->cfg;
    memset(d, 0, sizeof *d);
    d->job = j;
    if (churn_check_init(&d->chk, 1u << 16, 0) != 0) return -1;
    d->rng = c->churn_have_seed ? c->churn_seed : c->seed ^ 0x636875726eull;
    d->next_ns = 0;
    draw_next(d);
    return 0;
}

void eccl_scn_dl_worker_starts(eccl_scn_dl *d, rank_state *r, uint64_t at_ns)
{
    r->lives++;
    r->running = 1;
    r->returned = 0;
    r->status = 0;
    r->exit_status = -1;
    r->arrive_ns = at_ns;
    r->life = d->lives++;
    d->live++;
}

void eccl_scn_dl_respawns(eccl_scn_dl *d, rank_state *r, uint64_t now)
{
    eccl_scn_job_add_event(d->job, now, r->idx, "host_on", -1, -1, NULL, NULL);
    d->spawns++;
    eccl_scn_dl_worker_starts(d, r, now);
}

static void worker_ended(eccl_scn_dl *d, rank_state *r)
{
    r->running = 0;
    d->live--;
}

void eccl_scn_dl_worker_returned(eccl_scn_dl *d, rank_state *r, int status)
{
    r->status = status;
    r->returned = 1;
    if (status != 0) d->bad_exits++;
    worker_ended(d, r);
}

void eccl_scn_dl_killed(eccl_scn_dl *d, rank_state *r, uint64_t now)
{
    r->killed++;
    d->kills++;
    worker_ended(d, r);
    eccl_scn_job_add_event(d->job, now, r->idx, "killed", -1, -1, NULL, NULL);
}

void eccl_scn_dl_line(eccl_scn_dl *d, rank_state *r, uint64_t now, const char *line)
{
    churn_check_line(&d->chk, r->life, line, (double)now / 1e9);
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
        eccl_scn_job_add_event(d->job, now, r->idx, event, rev, world, NULL, hash[0] ? hash : NULL);
}

/* May rank r be killed now: a worker holding the state may go only while
 * two other holders stay (with none left the state is gone by definition);
 * with corrupt_at, rank 1's first worker lives until it has corrupted. */
static int victim_ok(const eccl_scn_dl *d, const rank_state *r, int holders)
{
    const eccl_scenario *c = d->job->cfg;
    if (!r->running) return 0;
    if (c->corrupt_at && r->idx == 1 && r->lives == 1 && (r->last_rev == UINT64_MAX || r->last_rev < c->corrupt_at))
        return 0;
    return !churn_check_holds_state(&d->chk, r->life) || holders >= 3;
}

/* Every interval (seeded, in [lo, hi]) until `until`: kill a random worker
 * (while more than min are alive) or start one on a random free rank
 * (while fewer than max are alive), a coin deciding when both are allowed.
 * Decisions read the run's state at the decision's time: with the same
 * lines at the same times, the same decisions. */
int eccl_scn_dl_decide(eccl_scn_dl *d, int *kill, rank_state **out)
{
    eccl_scn_job *j = d->job;
    const eccl_scenario *c = j->cfg;
    int alive = 0, holders = 0, cand = 0, free_ranks = 0, acted = 0;
    for (int i = 0; i < c->ranks; i++) {
        const rank_state *r = &j->rk[i];
        if (!r->running) {
            free_ranks++;
            continue;
        }
        alive++;
        holders += churn_check_holds_state(&d->chk, r->life);
    }
    for (int i = 0; i < c->ranks; i++) cand += victim_ok(d, &j->rk[i], holders);
    const int can_kill = alive > c->churn_min && cand > 0;
    const int can_spawn = alive < c->churn_max && free_ranks > 0;
    const int do_kill = can_kill && (!can_spawn || (eccl_splitmix64(&d->rng) & 1));
    if (do_kill) {
        uint64_t pick = eccl_scn_prng_below(&d->rng, (uint64_t)cand);
        for (int i = 0; i < c->ranks && !acted; i++) {
            rank_state *r = &j->rk[i];
            if (!victim_ok(d, r, holders) || pick-- > 0) continue;
            eccl_scn_job_say(j, j->tool, "churn: kill rank=%d (%s); %d alive", r->idx,
                             churn_check_holds_state(&d->chk, r->life) ? "holder" : "newcomer", alive - 1);
            *kill = 1, *out = r, acted = 1;
        }
    } else if (can_spawn) {
        uint64_t pick = eccl_scn_prng_below(&d->rng, (uint64_t)free_ranks);
        for (int i = 0; i < c->ranks && !acted; i++) {
            rank_state *r = &j->rk[i];
            if (r->running || pick-- > 0) continue;
            eccl_scn_job_say(j, j->tool, "churn: start rank=%d; %d alive", r->idx, alive + 1);
            *kill = 0, *out = r, acted = 1;
        }
    }
    draw_next(d);
    return acted;
}

static int write_plot(const eccl_scn_dl *d, const char *dir, const char *clock)
{
    const eccl_scenario *c = d->job->cfg;
    char who[128], title[192];
    snprintf(who, sizeof who, "%s for scenario %s (workload = diloco)", d->job->tool, c->name);
    snprintf(title, sizeof title, "%s: %d ranks, DiLoCo loop of %ld f32 under churn", c->name, c->ranks, c->count);
    return eccl_results_churn_plot(dir, who, clock, title, "host_on");
}

/* The churn, in the summary's words. */
void eccl_scn_dl_churn_words(const eccl_scenario *cfg, char *churn, size_t len)
{
    snprintf(churn, len, "none");
    if (cfg->have_churn)
        snprintf(churn, len, "interval=%.3f..%.3fs,min=%d,max=%d,until=%.3fs",
                 (double)cfg->churn_lo_ns / 1e9, (double)cfg->churn_hi_ns / 1e9, cfg->churn_min,
                 cfg->churn_max, (double)cfg->churn_until_ns / 1e9);
}

int eccl_scn_dl_finish(eccl_scn_dl *d, const char *outdir, uint64_t end_ns, const eccl_scn_job_report *rep)
{
    const eccl_scenario *cfg = d->job->cfg;
    char churn[160];
    eccl_scn_dl_churn_words(cfg, churn, sizeof churn);
    churn_check_finish(&d->chk, (double)cfg->duration_s);

    /* A worker's last life either was killed or stopped with status 0. */
    int failures = 0, bad_ranks = 0;
    FILE *rf = eccl_results_open(outdir, "ranks.tsv");
    if (rf) fputs("rank\thost\tworkers\tkilled\treturned\tstatus\tlast_revision\tcheck\n", rf);
    for (int i = 0; i < cfg->ranks; i++) {
        const rank_state *r = &d->job->rk[i];
        const int ok = r->lives == r->killed || (r->returned && r->status == 0 && r->exit_status == 0);
        bad_ranks += !ok;
        char last[24] = "-";
        if (r->last_rev != UINT64_MAX) snprintf(last, sizeof last, "%llu", (unsigned long long)r->last_rev);
        if (rf)
            fprintf(rf, "%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", r->idx, r->host, r->lives, r->killed,
                    r->returned, r->status, last, ok ? "pass" : "FAIL");
        if (!ok)
            eccl_scn_job_say(d->job, d->job->tool, "FAIL rank=%d workers=%d killed=%d returned=%d status=%d",
                           r->idx, r->lives, r->killed, r->returned, r->status);
    }
    const churn_check *k = &d->chk;
    const char *why = NULL;
    if (d->job->oom) why = "internal";
    else if (k->parity_breaks) why = "parity";
    else if (k->corrupt) why = "corruption";
    else if (k->order_breaks) why = "order";
    else if (k->errors || d->bad_exits || bad_ranks) why = "worker_failed";
    else if (k->max_stall_s > cfg->max_stall_s) why = "stall";
    else if (k->revisions == 0) why = "no_progress";
    else if (cfg->have_churn && d->kills == 0) why = "no_kills";
    failures += why != NULL;
    if (why && k->first_problem[0]) eccl_scn_job_say(d->job, d->job->tool, "first problem: %s", k->first_problem);

    char sim_time[32], stall[32];
    eccl_results_fmt_time(sim_time, sizeof sim_time, end_ns);
    eccl_results_fmt_time(stall, sizeof stall, (uint64_t)llround(k->max_stall_s * 1e9));
    int io_err = rf ? (fclose(rf) != 0) : 1;
    io_err |= eccl_scn_job_write_events(d->job, outdir) != 0;
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
        eccl_results_kv_i64(sf, "kills", d->kills);
        eccl_results_kv_i64(sf, "spawned", d->spawns);
        eccl_results_kv_u64(sf, "joins", k->joins);
        eccl_results_kv_u64(sf, "retries", k->retries);
        eccl_results_kv_str(sf, "checks", failures ? "fail" : "pass");
        eccl_results_kv_str(sf, "reason", why ? why : "-");
        eccl_results_kv_u64(sf, "events", d->job->nev);
        eccl_results_kv_str(sf, rep->end_key, sim_time);
        if (rep->write_tail) rep->write_tail(rep->ctx, sf);
        io_err |= eccl_results_close(sf) != 0;
    } else {
        io_err = 1;
    }
    io_err |= write_plot(d, outdir, rep->clock) != 0;
    const char *plot = io_err ? "none" : eccl_results_plot_png(outdir, &io_err);
    printf("scenario=%s seed=%llu ranks=%d workload=diloco checks=%s%s%s revisions=%llu "
           "max_revision=%llu parity_breaks=%llu corrupt=%llu errors=%llu max_stall_s=%s "
           "kills=%d joins=%llu spawned=%d %s=%s events=%zu out=%s plot=%s\n",
           cfg->name, (unsigned long long)cfg->seed, cfg->ranks, failures ? "fail" : "pass",
           why ? " reason=" : "", why ? why : "", (unsigned long long)k->revisions,
           (unsigned long long)(k->max_rev == UINT64_MAX ? 0 : k->max_rev),
           (unsigned long long)k->parity_breaks, (unsigned long long)k->corrupt,
           (unsigned long long)k->errors, stall, d->kills, (unsigned long long)k->joins,
           d->spawns, rep->end_key, sim_time, d->job->nev, outdir, plot);
    churn_check_free(&d->chk);
    return failures == 0 && !io_err ? 0 : 1;
}
