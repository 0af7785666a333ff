/* The job workload's observer (job.h): rank state from the workers' lines,
 * events, progress, roles from the fault plan, the checks and the outputs.
 * No runner here: eccl-sim and eccl-emu feed it the same lines. */
#define _GNU_SOURCE /* qsort_r */
#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chaos.h"
#include "job.h"

#include "trace_analyze.h"
#include "results.h"

void eccl_scn_job_say(const eccl_scn_job *j, const char *who, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    j->hooks.say(j->hooks.ctx, who, line);
}

int eccl_scn_job_init(eccl_scn_job *j, const eccl_scenario *cfg, const char *tool, const eccl_scn_job_hooks *h)
{
    memset(j, 0, sizeof *j);
    j->cfg = cfg;
    j->tool = tool;
    j->hooks = *h;
    j->fault_ns = j->detect_ns = j->slow_ns = j->slow_named_ns = UINT64_MAX;
    j->rk = calloc((size_t)cfg->ranks, sizeof *j->rk);
    j->oks_at = calloc((size_t)cfg->iters + 1, sizeof *j->oks_at);
    j->ref_hash = calloc((size_t)cfg->iters + 1, sizeof *j->ref_hash);
    if (!j->rk || !j->oks_at || !j->ref_hash) {
        eccl_scn_job_free(j);
        return -1;
    }
    return 0;
}

void eccl_scn_job_free(eccl_scn_job *j)
{
    free(j->rk);
    free(j->oks_at);
    free(j->ref_hash);
    free(j->ev);
    j->rk = NULL;
    j->oks_at = NULL;
    j->ref_hash = NULL;
    j->ev = NULL;
}

/* ---- ranks and events ---------------------------------------------------- */

void eccl_scn_job_rank_init(eccl_scn_job *j, rank_state *r, int idx, uint64_t *rng)
{
    const eccl_scenario *cfg = j->cfg;
    r->job = j;
    r->idx = idx;
    r->pend_iter = -1;
    snprintf(r->name, sizeof r->name, "rank%d", idx);
    snprintf(r->host, sizeof r->host, "node-%d", eccl_scn_rank_host(cfg, idx));
    r->arrive_ns = (uint64_t)llround(cfg->stagger_s * 1e9) * (uint64_t)idx;
    uint64_t jitter_ns = (uint64_t)llround(cfg->jitter_s * 1e9);
    if (jitter_ns) r->arrive_ns += eccl_scn_prng_below(rng, jitter_ns);
}

/* r outlived the call of its last result hash: it counts (parity). */
static void parity_settle(eccl_scn_job *j, rank_state *r)
{
    if (r->pend_iter < 0) return;
    if (!j->ref_hash[r->pend_iter]) j->ref_hash[r->pend_iter] = r->pend_hash;
    else if (j->ref_hash[r->pend_iter] != r->pend_hash) j->parity_bad++;
    r->pend_iter = -1;
}

void eccl_scn_job_worker_starts(rank_state *r, uint64_t at_ns, int start_world)
{
    r->lives++;
    r->running = 1;
    r->counted = 0;
    r->arrive_ns = at_ns;
    r->start_world = start_world;
    r->returned = 0;
    r->status = 0;
    r->exit_status = -1;
    r->oks = r->phantom_oks = r->hashed_oks = 0;
    parity_settle(r->job, r); /* a previous worker's, unless it was killed */
    r->first_ok_iter = r->last_ok_iter = -1;
    r->last_ok_world = r->min_ok_world = r->max_ok_world = -1;
    r->failed_ops = 0;
    r->rejoins = 0;
    r->begin_ns = r->op_ns = 0;
}

void eccl_scn_job_worker_arrived(rank_state *r)
{
    r->counted = 1;
    r->job->running++;
}

/* Host buffers: every good step was checked and hashed by the loop.
 * Phantom: every one ran on phantom buffers (there are no values). */
int eccl_scn_job_values_ok(const eccl_scenario *cfg, const rank_state *r)
{
    return cfg->phantom ? r->phantom_oks == r->oks : r->hashed_oks == r->oks;
}

/* rank 0 in events.tsv: a platform event (link_off, link_on, slow_link). */
void eccl_scn_job_add_event(eccl_scn_job *j, uint64_t now, int rank, const char *event, int iter, int world,
                            const char *ms, const char *hash)
{
    if (j->nev == j->cap_ev) {
        size_t cap = j->cap_ev ? 2 * j->cap_ev : 256;
        event_row *n = realloc(j->ev, cap * sizeof *n);
        if (!n) {
            j->oom = 1;
            return;
        }
        j->ev = n;
        j->cap_ev = cap;
    }
    event_row *e = &j->ev[j->nev++];
    if (j->hooks.event_added) j->hooks.event_added(j->hooks.ctx, j->nev);
    e->t_ns = now;
    e->rank = rank;
    snprintf(e->event, sizeof e->event, "%s", event);
    e->iter = iter;
    e->world = world;
    snprintf(e->ms, sizeof e->ms, "%s", ms ? ms : "-");
    snprintf(e->hash, sizeof e->hash, "%s", hash ? hash : "-");
}

/* Announces every iteration all running workers are through (a worker that
 * joined at step f counts as through the steps before f). */
void eccl_scn_job_progress(eccl_scn_job *j)
{
    while (j->next_milestone < j->cfg->iters && j->running > 0 &&
           j->oks_at[j->next_milestone] >= j->running) {
        eccl_scn_job_say(j, j->tool, "progress iter=%d/%d ranks_done=%d", j->next_milestone + 1,
                         j->cfg->iters, j->oks_at[j->next_milestone]);
        j->next_milestone++;
    }
}

void eccl_scn_job_worker_ended(rank_state *r)
{
    eccl_scn_job *j = r->job;
    if (r->counted) j->running--;
    r->counted = 0;
    r->running = 0;
    if (++r->ends == r->nstarts) j->done++;
}

void eccl_scn_job_fault(eccl_scn_job *j, uint64_t now)
{
    if (j->fault_ns == UINT64_MAX) j->fault_ns = now;
}

void eccl_scn_job_host_off(rank_state *r, uint64_t now, const char *event)
{
    eccl_scn_job *j = r->job;
    if (r->running) {
        r->killed++;
        r->pend_iter = -1; /* killed: its last result binds nobody */
        /* Its finished steps no longer count towards the live workers' progress. */
        for (int i = 0; i <= r->last_ok_iter && i < j->cfg->iters; i++) j->oks_at[i]--;
        eccl_scn_job_worker_ended(r);
    } else if (r->returned) {
        r->kill_missed++; /* it had finished: the fault came too late */
    } else {
        return; /* already killed (a host_off after a kill of one of its ranks) */
    }
    eccl_scn_job_add_event(j, now, r->idx, event, r->last_ok_iter + 1, -1, NULL, NULL);
    eccl_scn_job_fault(j, now);
    eccl_scn_job_progress(j);
}

int eccl_scn_job_field_int(const char *line, const char *key, int *out)
{
    const char *p = strstr(line, key);
    return p && sscanf(p + strlen(key), "%d", out) == 1;
}

void eccl_scn_job_line(rank_state *r, uint64_t now, const char *line)
{
    eccl_scn_job *j = r->job;
    if (strncmp(line, "event=", 6) != 0) return;
    char event[16] = "", ms[24] = "";
    sscanf(line + 6, "%15[a-z_]", event);
    /* The loop prints ms=%.1f; the runner's clock gives the time since
     * this rank's event=begin to the nanosecond. */
    if (strstr(line, " ms=")) {
        uint64_t d = now - r->begin_ns;
        snprintf(ms, sizeof ms, "%llu.%06llu", (unsigned long long)(d / 1000000u),
                 (unsigned long long)(d % 1000000u));
    }
    int iter = -1, world = -1;
    eccl_scn_job_field_int(line, " iter=", &iter);
    eccl_scn_job_field_int(line, " world=", &world);
    /* The result's hash (host buffers) or "phantom", for events.tsv. */
    char hash[24] = "";
    const char *hp = strstr(line, " hash=");
    if (hp) sscanf(hp + 6, "%16[0-9a-f]", hash);
    else if (strstr(line, " values=phantom")) snprintf(hash, sizeof hash, "phantom");
    eccl_scn_job_add_event(j, now, r->idx, event, iter, world, ms[0] ? ms : NULL, hash[0] ? hash : NULL);
    const int after_fault = j->fault_ns != UINT64_MAX && j->detect_ns == UINT64_MAX;

    if (strcmp(event, "connected") == 0) {
        const char *p = strstr(line, " peer=");
        unsigned long long id = 0;
        if (p && sscanf(p + 6, "%llu", &id) == 1) r->peer_id = id;
    } else if (strcmp(event, "slow_link_seen") == 0) {
        const char *f = strstr(line, " from="), *t = strstr(line, " to=");
        unsigned long long from = 0, to = 0;
        if (f && t && sscanf(f + 6, "%llu", &from) == 1 && sscanf(t + 4, "%llu", &to) == 1) {
            /* The last link named: it is cleared again when an end of it
             * leaves, as every rank does at the end. */
            if (from) j->slow_from = from, j->slow_to = to;
            if (from && j->slow_named_ns == UINT64_MAX) j->slow_named_ns = now;
        }
    } else if (strcmp(event, "begin") == 0) {
        r->begin_ns = now;
        /* Bootstrap: the first worker's first all-reduce begins once it is
         * connected, admitted, on the ring and agreed on the step. */
        if (r->lives == 1 && !r->late && !r->first_begin_ns) r->first_begin_ns = now;
        /* The victim starts the fatal step: crash it halfway through, by the
         * time its last good step took (as tests/sim/sim_worker does). */
        if (r->kill_iter >= 0 && iter == r->kill_iter && !r->kill_armed) {
            r->kill_armed = 1;
            j->hooks.arm_kill(j->hooks.ctx, r, now + r->op_ns / 2);
        }
    } else if (strcmp(event, "ok") == 0) {
        unsigned long long h = 0;
        r->oks++;
        r->phantom_oks += strcmp(hash, "phantom") == 0;
        r->op_ns = now - r->begin_ns;
        j->ar_n++;
        j->ar_sum_ns += r->op_ns;
        const char *ap = strstr(line, " algo=");
        for (uint32_t a = 0; ap && a < ECCL_ALGO_COUNT; a++) {
            size_t len = strlen(eccl_algorithm_name(a));
            if (strncmp(ap + 6, eccl_algorithm_name(a), len) == 0 && (ap[6 + len] == ' ' || !ap[6 + len]))
                j->ar_by_algo[a]++;
        }
        if (j->ar_n == 1 || r->op_ns < j->ar_min_ns) j->ar_min_ns = r->op_ns;
        if (j->slow_ns != UINT64_MAX && r->begin_ns >= j->slow_ns) {
            j->after_n++;
            j->after_sum_ns += r->op_ns;
        } else if ((j->slow_ns == UINT64_MAX || now < j->slow_ns) && iter > 0) {
            /* Not iteration 0: it also waits for the last rank to arrive. */
            j->before_n++;
            j->before_sum_ns += r->op_ns;
        }
        /* A survivor saw the failure: an all-reduce done in a smaller world. */
        if (after_fault && r->last_ok_world >= 0 && world < r->last_ok_world) j->detect_ns = now;
        if (r->first_ok_iter < 0) r->first_ok_iter = iter;
        r->last_ok_iter = iter;
        r->last_ok_world = world;
        if (r->min_ok_world < 0 || world < r->min_ok_world) r->min_ok_world = world;
        if (world > r->max_ok_world) r->max_ok_world = world;
        if (iter >= 0 && iter < j->cfg->iters) {
            /* Every rank that finished an iteration holds the same bits. */
            if (hp && sscanf(hp + 6, "%llx", &h) == 1) {
                parity_settle(j, r); /* it lived on past its previous one */
                r->pend_iter = iter;
                r->pend_hash = h;
                r->hashed_oks++;
            }
            /* A late worker's first step: it is through the ones before. */
            if (r->oks == 1)
                for (int i = 0; i < iter; i++) j->oks_at[i]++;
            j->oks_at[iter]++;
            eccl_scn_job_progress(j);
        }
    } else if (strcmp(event, "peer_lost") == 0 || strcmp(event, "timeout") == 0 ||
               strcmp(event, "too_few_peers") == 0 || strcmp(event, "master_lost") == 0) {
        r->failed_ops++;
        r->rejoins += event[0] == 'm';
        j->ar_failed++;
        if (after_fault) j->detect_ns = now;
    } else if (strcmp(event, "exit") == 0) {
        eccl_scn_job_field_int(line, " status=", &r->exit_status);
    } else if (strcmp(event, "optimized") == 0) {
        /* Like a slow_link: all-reduces split into before and after. */
        if (j->slow_ns == UINT64_MAX) j->slow_ns = now;
        j->optimized++;
    }
}

/* ---- the plan ------------------------------------------------------------ */

int eccl_scn_fault_order_cmp(const void *a, const void *b, void *ctx)
{
    const eccl_scenario *c = ctx;
    int x = *(const int *)a, y = *(const int *)b;
    uint64_t tx = c->faults[x].at_ns, ty = c->faults[y].at_ns;
    if (tx != ty) return tx < ty ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* The links a set of faults turns off, with their state during the walk. */
typedef struct cut_links {
    int n;
    uintptr_t *l;
    int *off;
} cut_links;

static int is_off(const cut_links *u, uintptr_t l)
{
    for (int i = 0; i < u->n; i++)
        if (u->l[i] == l) return u->off[i];
    return 0;
}

/* 1 when the route a -> b crosses no link that is off. */
static int route_up(const eccl_scn_routes *routes, const cut_links *u, int a, int b)
{
    uintptr_t ids[ECCL_SCN_ROUTE_MAX];
    int n = routes->route(routes->ctx, a, b, ids);
    for (int i = 0; i < n; i++)
        if (is_off(u, ids[i])) return 0;
    return 1;
}

/* Walks the link faults in time order and finds, per rank, the longest
 * stretch during which its route to or from the master (node-0) crosses a
 * link that is off (r->cut_ns; UINT64_MAX when it lasts to the end). A cut
 * of at least peer_timeout + 100 ms drops the rank (master and worker both
 * time out; 100 ms covers the messages that were on the wire at the cut);
 * one of at most peer_timeout / 2 is invisible (heartbeats go every
 * peer_timeout / 4 and held messages flow on heal); in between, the outcome
 * depends on heartbeat phase, and the scenario is refused. While a stretch
 * of constant link state lasts more than peer_timeout / 2, every two ranks
 * that reach the master must reach each other, or the job would hang in a
 * ring that crosses the cut: refused too (a partition must split the
 * platform into groups). 0, or -1 after printing why. */
static int analyse_cuts(const char *file, const eccl_scenario *c, const eccl_scn_routes *routes,
                        rank_state *rk)
{
    int nlink = 0;
    for (int i = 0; i < c->nfaults; i++)
        if (c->faults[i].kind == F_LINK_OFF || c->faults[i].kind == F_LINK_ON) nlink++;
    if (nlink == 0) return 0;
    if (c->ranks > 512)
        return eccl_scn_error(file, 0, "link faults: at most 512 ranks (the partition check "
                         "compares the routes of every two ranks)");
    int *ord = calloc((size_t)nlink, sizeof *ord);
    cut_links u = {0, calloc((size_t)nlink * 2 * MAX_FAULT_LINKS, sizeof(uintptr_t)),
                   calloc((size_t)nlink * 2 * MAX_FAULT_LINKS, sizeof(int))};
    uint64_t *since = calloc((size_t)c->ranks + 1, sizeof *since);
    int *reach = calloc((size_t)c->ranks + 1, sizeof *reach);
    int rc = 0;
    if (!ord || !u.l || !u.off || !since || !reach) {
        rc = eccl_scn_error(file, 0, "out of memory");
        goto out;
    }
    int n = 0;
    for (int i = 0; i < c->nfaults; i++) {
        const eccl_scn_fault *f = &c->faults[i];
        if (f->kind != F_LINK_OFF && f->kind != F_LINK_ON) continue;
        ord[n++] = i;
        const uintptr_t *ids;
        const int nids = routes->fault_links(routes->ctx, i, &ids);
        for (int j = 0; j < nids; j++) {
            int seen = 0;
            for (int k = 0; k < u.n; k++) seen |= u.l[k] == ids[j];
            if (!seen) u.l[u.n++] = ids[j];
        }
    }
    qsort_r(ord, (size_t)n, sizeof *ord, eccl_scn_fault_order_cmp, (void *)c);
    for (int r = 1; r <= c->ranks; r++) since[r] = UINT64_MAX;
    for (int i = 0; i < n && rc == 0;) {
        const uint64_t t = c->faults[ord[i]].at_ns;
        int first = i, partition_line = 0;
        for (; i < n && c->faults[ord[i]].at_ns == t; i++) {
            const eccl_scn_fault *f = &c->faults[ord[i]];
            const uintptr_t *ids;
            const int nids = routes->fault_links(routes->ctx, ord[i], &ids);
            for (int j = 0; j < nids; j++)
                for (int k = 0; k < u.n; k++)
                    if (u.l[k] == ids[j]) u.off[k] = f->kind == F_LINK_OFF;
            if (f->partition) partition_line = f->line;
        }
        const uint64_t end = i < n ? c->faults[ord[i]].at_ns : UINT64_MAX;
        int cut_any = 0;
        for (int r = 1; r <= c->ranks; r++) {
            const int h = eccl_scn_rank_host(c, r);
            reach[r] = route_up(routes, &u, 0, h) && route_up(routes, &u, h, 0);
            cut_any |= !reach[r];
            if (!reach[r] && since[r] == UINT64_MAX) since[r] = t;
            if (reach[r] && since[r] != UINT64_MAX) {
                if (t - since[r] > rk[r - 1].cut_ns) rk[r - 1].cut_ns = t - since[r];
                since[r] = UINT64_MAX;
            }
        }
        if (partition_line && !cut_any) {
            rc = eccl_scn_error(file, partition_line, "partition: cuts no rank off the master "
                           "(node-0)");
            break;
        }
        const uint64_t half = (uint64_t)llround(c->peer_timeout_s * 0.5e9);
        if (end - t <= half) continue;
        for (int a = 1; a <= c->ranks && rc == 0; a++) {
            if (!reach[a]) continue;
            for (int b = a + 1; b <= c->ranks && rc == 0; b++) {
                const int ha = eccl_scn_rank_host(c, a), hb = eccl_scn_rank_host(c, b);
                if (reach[b] && !(route_up(routes, &u, ha, hb) && route_up(routes, &u, hb, ha)))
                    rc = eccl_scn_error(file, c->faults[ord[first]].line,
                                   "ranks %d and %d both reach the master but not each other: "
                                   "not a partition into groups", a, b);
            }
        }
    }
    for (int r = 1; r <= c->ranks && rc == 0; r++) {
        if (since[r] != UINT64_MAX) rk[r - 1].cut_ns = UINT64_MAX;
        const uint64_t cut = rk[r - 1].cut_ns;
        const double t = c->peer_timeout_s;
        if (cut == 0) continue;
        if (cut != UINT64_MAX && (double)cut / 1e9 > t / 2 && (double)cut / 1e9 < t + 0.1)
            rc = eccl_scn_error(file, 0, "rank %d is cut off from the master for %.3fs: between "
                           "peer_timeout/2 (%.3fs) and peer_timeout + 100ms (%.3fs) whether it "
                           "is dropped depends on heartbeat phase", r, (double)cut / 1e9,
                           t / 2, t + 0.1);
    }
out:
    free(ord);
    free(u.l);
    free(u.off);
    free(since);
    free(reach);
    return rc;
}

int eccl_scn_job_plan(const char *file, eccl_scenario *c, eccl_scn_job *j, const eccl_scn_routes *routes,
                      int *order, int *norder)
{
    *norder = 0;
    for (int i = 0; i < c->nfaults; i++) {
        const eccl_scn_fault *f = &c->faults[i];
        rank_state *r = f->rank > 0 ? &j->rk[f->rank - 1] : NULL;
        if (f->kind == F_JOIN) {
            r->late = 1;
            r->arrive_ns = f->at_ns;
            continue;
        }
        if (f->kind == F_KILL && f->at_iter >= 0) {
            r->kill_iter = f->at_iter;
            continue;
        }
        if (f->kind == F_HOST_ON) {
            int first, last;
            eccl_scn_host_ranks(c, eccl_scn_rank_host(c, f->rank), &first, &last);
            for (int q = first; q <= last; q++) j->rk[q - 1].nstarts++;
        }
        order[(*norder)++] = i;
    }
    qsort_r(order, (size_t)*norder, sizeof *order, eccl_scn_fault_order_cmp, c);
    if (analyse_cuts(file, c, routes, j->rk)) return -1;
    /* chaos = FILE: a kill rule takes down every rank of its host (the
     * parser has checked the plan). */
    eccl_chaos_plan *chaos = NULL;
    if (c->chaos_plan && eccl_chaos_plan_parse(c->chaos_plan, NULL, 0, &chaos) != ECCL_OK)
        return eccl_scn_error(file, 0, "chaos: the plan cannot be read again");
    /* A rank's last host event says whether its host ends on. */
    int expected = 0;
    for (int i = 0; i < c->ranks; i++) {
        rank_state *r = &j->rk[i];
        int off = r->kill_iter >= 0, host_events = r->late || off;
        if (chaos) {
            uint16_t type;
            uint64_t frames, at;
            eccl_chaos_plan_kill(chaos, r->host, &type, &frames, &at);
            if (frames || at != UINT64_MAX) {
                if (host_events) {
                    eccl_chaos_plan_free(chaos);
                    return eccl_scn_error(file, 0, "rank %d: killed by the chaos plan and the subject of the "
                                          "fault plan: give it one or the other", r->idx);
                }
                r->chaos_kill = 1;
                off = host_events = 1;
            }
        }
        for (int k = 0; k < *norder; k++) {
            const eccl_scn_fault *f = &c->faults[order[k]];
            if (f->rank != r->idx &&
                !(f->rank > 0 && eccl_scn_host_wide(f->kind) && eccl_scn_rank_host(c, f->rank) == eccl_scn_rank_host(c, r->idx)))
                continue;
            host_events = 1;
            off = f->kind == F_KILL || f->kind == F_HOST_OFF;
        }
        const double cut_s = r->cut_ns == UINT64_MAX ? 1e300 : (double)r->cut_ns / 1e9;
        const int dropped = cut_s >= c->peer_timeout_s + 0.1;
        if (dropped && host_events) {
            eccl_chaos_plan_free(chaos);
            return eccl_scn_error(file, 0, "rank %d is both cut off by link faults and the subject "
                             "of host events: give it one or the other", r->idx);
        }
        r->role = off ? ROLE_KILLED : dropped ? ROLE_DROPPED
                  : (r->late || r->nstarts > 1) ? ROLE_JOINER : ROLE_SURVIVOR;
        expected += r->role == ROLE_SURVIVOR || r->role == ROLE_JOINER;
    }
    eccl_chaos_plan_free(chaos);
    if (c->expect_survivors < 0) c->expect_survivors = expected;
    return 0;
}

/* ---- the verdict --------------------------------------------------------- */

void eccl_scn_summary_head(FILE *f, const eccl_scenario *c)
{
    eccl_results_kv_str(f, "scenario", c->name);
    eccl_results_kv_u64(f, "seed", c->seed);
    eccl_results_kv_str(f, "platform", c->platform);
    eccl_results_kv_i64(f, "hosts", c->hosts);
    eccl_results_kv_i64(f, "ranks", c->ranks);
    eccl_results_kv_i64(f, "count", c->count);
}

/* The timeline plot draws a row per rank: past PLOT_RANKS_MAX ranks, more
 * rows than the picture has pixels. gnuplot then spent as long drawing
 * them as a tenth of the simulation (2.4 s of user time at 10k ranks,
 * reading 80,000 events five times over; some 25 s at 96K). So above it the
 * plot reads plot.tsv: the events of every stride-th rank, and the marks
 * the plot draws for any rank (failed all-reduces, kills, host changes)
 * whatever its rank. */
#define PLOT_RANKS_MAX 1000

static int plot_stride(const eccl_scenario *c)
{
    return c->ranks > PLOT_RANKS_MAX ? (c->ranks + PLOT_RANKS_MAX - 1) / PLOT_RANKS_MAX : 1;
}

static int plot_keeps(const event_row *e, int stride)
{
    if (stride <= 1 || e->rank % stride == 0) return 1;
    static const char *const marks[] = {"peer_lost", "timeout", "too_few_peers",
                                        "killed", "host_off", "host_on"};
    for (size_t i = 0; i < sizeof marks / sizeof *marks; i++)
        if (!strcmp(e->event, marks[i])) return 1;
    return 0;
}

static int write_event_rows(const eccl_scn_job *s, const char *dir, const char *name, int stride)
{
    FILE *f = eccl_results_open(dir, name);
    if (!f) return -1;
    fputs("time_s\trank\tevent\titer\tworld\tms\thash\n", f);
    for (size_t i = 0; i < s->nev; i++) {
        const event_row *e = &s->ev[i];
        if (!plot_keeps(e, stride)) continue;
        char t[32], it[16] = "-", wo[16] = "-";
        eccl_results_fmt_time(t, sizeof t, e->t_ns);
        if (e->iter >= 0) snprintf(it, sizeof it, "%d", e->iter);
        if (e->world >= 0) snprintf(wo, sizeof wo, "%d", e->world);
        fprintf(f, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", t, e->rank, e->event, it, wo, e->ms,
                e->hash);
    }
    return fclose(f) == 0 ? 0 : -1;
}

int eccl_scn_job_write_events(const eccl_scn_job *s, const char *dir)
{
    return write_event_rows(s, dir, "events.tsv", 1);
}

static int write_plot_script(const eccl_scn_job *s, const eccl_scenario *c, const char *dir, const char *clock)
{
    const int stride = plot_stride(c);
    const char *data = stride > 1 ? "plot.tsv" : "events.tsv";
    if (stride > 1 && write_event_rows(s, dir, data, stride)) return -1;
    char every[64] = "";
    if (stride > 1) snprintf(every, sizeof every, ", every %d-th rank drawn", stride);
    FILE *f = eccl_results_open(dir, "plot.gp");
    if (!f) return -1;
    fprintf(f,
            "# Generated by %s for scenario %s: one row per rank, %s time\n"
            "# across. Run in this directory: gnuplot plot.gp  (reads %s)\n"
            "set terminal pngcairo size 1000,%d font \",10\"\n"
            "set output \"plot.png\"\n"
            "set datafile separator \"\\t\"\n"
            "set title \"%s: %d ranks x %d iterations of %ld f32 (all-reduce timeline%s)\"\n"
            "set xlabel \"%s time (ms)\"\n"
            "set ylabel \"rank\"\n"
            "set yrange [0.5:%d.5]\n"
            "%s"
            "set grid xtics\n"
            "set key outside bottom center horizontal\n"
            "set style arrow 1 nohead lw 6 lc rgb \"#2a9d3f\"\n"
            "set style arrow 2 nohead lw 6 lc rgb \"#d62728\"\n"
            "ok(e) = e eq \"ok\"\n"
            "failed(e) = e eq \"peer_lost\" || e eq \"timeout\" || e eq \"too_few_peers\"\n"
            "# Each all-reduce ends at time_s after taking ms: a bar from its start to its end.\n"
            "plot \"%s\" skip 1 using (ok(strcol(3)) ? $1*1000 - $6 : NaN):2:6:(0) \\\n"
            "       with vectors arrowstyle 1 title \"all-reduce ok\", \\\n"
            "     \"\" skip 1 using (failed(strcol(3)) ? $1*1000 - $6 : NaN):2:6:(0) \\\n"
            "       with vectors arrowstyle 2 title \"all-reduce failed (peer lost)\", \\\n"
            "     \"\" skip 1 using (strcol(3) eq \"killed\" || strcol(3) eq \"host_off\" ? "
            "$1*1000 : NaN):2 \\\n"
            "       with points pt 2 ps 3 lw 3 lc rgb \"black\" title \"host off (kill, "
            "host_off)\", \\\n"
            "     \"\" skip 1 using (strcol(3) eq \"host_on\" ? $1*1000 : NaN):2 \\\n"
            "       with points pt 8 ps 2 lw 2 lc rgb \"#1f5fbf\" title \"host on (new worker)\", \\\n"
            "     \"\" skip 1 using (strcol(3) eq \"exit\" ? $1*1000 : NaN):2 \\\n"
            "       with points pt 7 ps 1.2 lc rgb \"#1f5fbf\" title \"worker exit\"\n",
            s->tool, c->name, clock, data, 200 + 40 * (c->ranks < 40 ? c->ranks : 40), c->name, c->ranks,
            c->iters, c->count, every, clock, c->ranks,
            /* a label a rank, as long as there is room for one */
            stride > 1 ? "set ytics\n" : "set ytics 1\n", data);
    return fclose(f) == 0 ? 0 : -1;
}



int eccl_scn_job_trace_dir(const char *outdir, char *dir, size_t len)
{
    if ((size_t)snprintf(dir, len, "%s/traces", outdir) >= len || eccl_results_mkdir(dir)) return -1;
    /* An earlier run's traces would read as this one's. */
    DIR *d = opendir(dir);
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char path[1024];
        if (strncmp(e->d_name, "eccl-trace-", 11) != 0) continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < sizeof path) unlink(path);
    }
    closedir(d);
    return 0;
}

/* The rank (1..ranks) whose worker is `peer` (by its connected line); 0:
 * none, or peer 0. */
static int rank_of_peer(const eccl_scn_job *s, unsigned long long peer)
{
    for (int i = 0; peer && i < s->cfg->ranks; i++)
        if (s->rk[i].peer_id == peer) return i + 1;
    return 0;
}

/* expect_slow_link's verdict on a link named from -> to (peer ids): the
 * expected rank if it is one of the link's ends, else the link's receiving
 * rank (0: none named); its ends' ranks in *rf, *rt. */
static int slow_link_rank(const eccl_scn_job *s, unsigned long long from, unsigned long long to, int *rf, int *rt)
{
    *rf = rank_of_peer(s, from), *rt = rank_of_peer(s, to);
    int want = s->cfg->expect_slow_link;
    return *rf == want || *rt == want ? want : *rt;
}

/* trace = 1: the ranks' traces (OUTDIR/traces) analysed as `eccl-trace
 * analyze` does, the report in trace_analysis.txt; expect_culprit = R: it
 * must name rank R's worker (by the peer id its connected line gave).
 * Returns the failed checks. */
static int trace_check(eccl_scn_job *s, const char *outdir)
{
    const eccl_scenario *cfg = s->cfg;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/traces", outdir);
    FILE *f = eccl_results_open(outdir, "trace_analysis.txt");
    eccl_trace_verdict v;
    int rc = eccl_trace_analyze(dir, NULL, f ? f : stdout, &v);
    if (f) fclose(f);
    static const char *const kinds[] = {"none", "never_called", "no_trace", "waited_on", "cut_off"};
    s->trace_culprit = "-";
    if (rc == 2) {
        int want = cfg->expect_culprit || cfg->expect_slow_link;
        eccl_scn_job_say(s, s->tool, "%s trace: no trace was written", want ? "FAIL" : "note");
        return want;
    }
    int named = v.culprit != ECCL_TRACE_NONE ? rank_of_peer(s, v.peer) : 0;
    /* Cut off: every rank that lost the master is the culprit's side; the
     * expected one among them counts. */
    for (uint32_t k = 0; cfg->expect_culprit && v.culprit == ECCL_TRACE_CUT_OFF && k < v.n_cut; k++)
        if (v.cut_peer[k] && s->rk[cfg->expect_culprit - 1].peer_id == v.cut_peer[k]) named = cfg->expect_culprit;
    s->trace_culprit = kinds[v.culprit];
    s->trace_rank = named;
    char tag[32] = "-";
    if (v.incomplete) snprintf(tag, sizeof tag, "%llu", (unsigned long long)v.tag);
    int ok = !cfg->expect_culprit || named == cfg->expect_culprit;
    eccl_scn_job_say(s, s->tool, "%s trace: first incomplete tag=%s culprit=%s rank=%d peer=%llu%s", ok ? "ok" : "FAIL",
                     tag, kinds[v.culprit], named, (unsigned long long)v.peer,
                     cfg->expect_culprit ? (ok ? " (expected)" : " (expected another rank)") : "");
    if (!cfg->expect_slow_link) return !ok;
    /* expect_slow_link: the traces name a slow link of rank R's too (each
     * rank writes one as the master names it: comm/rates.c). */
    int from, to;
    s->trace_slow_link_rank = slow_link_rank(s, v.slow_link_from, v.slow_link_to, &from, &to);
    int link_ok = s->trace_slow_link_rank == cfg->expect_slow_link;
    eccl_scn_job_say(s, s->tool, "%s trace: slow link rank %d -> rank %d (%d named; expected an end at rank %d)",
                     link_ok ? "ok" : "FAIL", from, to, v.slow_links, cfg->expect_slow_link);
    return !ok + !link_ok;
}

/* expect_slow_link = R: the last slow link the master named (comm/rates.c)
 * has rank R's worker at one end. Returns the failed checks. */
static int slow_link_check(eccl_scn_job *s)
{
    const eccl_scenario *cfg = s->cfg;
    int from, to;
    s->slow_link_rank = slow_link_rank(s, s->slow_from, s->slow_to, &from, &to);
    int ok = s->slow_link_rank == cfg->expect_slow_link;
    char when[32] = "-";
    if (s->slow_named_ns != UINT64_MAX && s->slow_ns != UINT64_MAX && s->slow_named_ns >= s->slow_ns)
        eccl_results_fmt_time(when, sizeof when, s->slow_named_ns - s->slow_ns);
    eccl_scn_job_say(s, s->tool, "%s slow link: named rank %d -> rank %d (peers %llu -> %llu), %s s after the "
                     "slow_link (expected an end at rank %d)", ok ? "ok" : "FAIL", from, to, s->slow_from,
                     s->slow_to, when, cfg->expect_slow_link);
    return !ok;
}

int eccl_scn_job_finish(eccl_scn_job *s, const char *outdir, uint64_t end_ns, const eccl_scn_job_report *rep)
{
    const eccl_scenario *cfg = s->cfg;
    int failures = 0, survivors = 0, killed = 0, dropped = 0, joined = 0, noticed = 0;
    int victims = 0; /* the plan takes some worker down: survivors must notice */
    for (int i = 0; i < cfg->nfaults; i++)
        victims |= cfg->faults[i].kind == F_KILL || cfg->faults[i].kind == F_HOST_OFF;
    for (int i = 0; i < cfg->ranks; i++) victims |= s->rk[i].role == ROLE_DROPPED || s->rk[i].chaos_kill;

    FILE *rf = eccl_results_open(outdir, "ranks.tsv");
    if (rf)
        fputs("rank\thost\trole\tworkers\tkilled\treturned\tstatus\toks\tfirst_ok_iter\t"
              "last_ok_iter\tlast_world\tfailed_ops\tcut_s\tcheck\n", rf);
    for (int i = 0; i < cfg->ranks; i++) {
        rank_state *r = &s->rk[i];
        int ok = 0;
        const int finished = r->returned && r->status == 0 && r->exit_status == 0 &&
                             r->last_ok_iter == cfg->iters - 1;
        switch (r->role) {
        case ROLE_KILLED:
            /* Every worker it ran was killed while running, the last before
             * finishing; a kill @ iter I: exactly I good steps. */
            ok = r->killed == r->nstarts && !r->kill_missed && !r->returned &&
                 r->oks < cfg->iters;
            if (r->kill_iter >= 0)
                ok = ok && r->oks == r->kill_iter && r->last_ok_iter == r->kill_iter - 1;
            killed += ok;
            break;
        case ROLE_DROPPED:
            /* Cut off from the master: its worker failed before the end. */
            ok = r->returned && r->status != 0 && !r->killed && r->last_ok_iter < cfg->iters - 1;
            dropped += ok;
            break;
        case ROLE_SURVIVOR: {
            /* One that rejoined (its relay died) misses the steps the job
             * took while it was away, and only those. */
            ok = finished && (r->oks == cfg->iters || (r->rejoins && r->oks >= 1)) &&
                 !r->killed && !r->kill_missed && eccl_scn_job_values_ok(cfg, r);
            /* Saw the failure: an all-reduce failed under it, or its world shrank. */
            int saw = r->failed_ops > 0 || (r->min_ok_world >= 0 && r->min_ok_world < r->max_ok_world) ||
                      (r->last_ok_world >= 0 && r->last_ok_world < cfg->ranks);
            noticed += saw;
            if (victims && !saw) ok = 0;
            survivors += ok;
            break;
        }
        case ROLE_JOINER:
            /* Its last worker came in late and did every step from its first
             * to the job's last; any earlier one was killed while running. */
            ok = finished && r->oks >= 1 && r->oks == cfg->iters - r->first_ok_iter &&
                 r->killed == r->nstarts - 1 && !r->kill_missed && eccl_scn_job_values_ok(cfg, r);
            survivors += ok;
            joined += ok;
            break;
        }
        failures += !ok;
        char cut[32] = "-";
        if (r->cut_ns == UINT64_MAX) snprintf(cut, sizeof cut, "end");
        else if (r->cut_ns) eccl_results_fmt_time(cut, sizeof cut, r->cut_ns);
        eccl_scn_job_say(s, s->tool, "%s rank=%d role=%s workers=%d killed=%d returned=%d status=%d "
                       "oks=%d first_ok_iter=%d last_ok_iter=%d last_world=%d failed_ops=%d cut=%s",
                       ok ? "ok" : "FAIL", r->idx, role_name(r->role), r->lives, r->killed,
                       r->returned, r->status, r->oks, r->first_ok_iter, r->last_ok_iter,
                       r->last_ok_world, r->failed_ops, cut);
        if (rf)
            fprintf(rf, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", r->idx,
                    r->host, role_name(r->role), r->lives, r->killed, r->returned, r->status,
                    r->oks, r->first_ok_iter, r->last_ok_iter, r->last_ok_world, r->failed_ops,
                    cut, ok ? "pass" : "FAIL");
    }
    if (cfg->phantom)
        eccl_scn_job_say(s, s->tool, "values unchecked: phantom buffers carry sizes, not bytes "
                       "(checked: completion, survivors, timing)");
    for (int i = 0; i < cfg->ranks; i++) parity_settle(s, &s->rk[i]); /* those alive at the end */
    if (s->parity_bad) {
        eccl_scn_job_say(s, s->tool, "FAIL %d all-reduce results differ between ranks",
                       s->parity_bad);
        failures++;
    }
    if (survivors != cfg->expect_survivors) {
        eccl_scn_job_say(s, s->tool, "FAIL survivors=%d expect_survivors=%d", survivors,
                       cfg->expect_survivors);
        failures++;
    }
    /* A relay's death shows in its ranks: they lost their master and came
     * back (the others may see nothing, if it died before the first step). */
    int rejoined = 0;
    for (int i = 0; i < cfg->ranks; i++) rejoined += s->rk[i].rejoins > 0;
    if (cfg->n_relay_kills && !rejoined) {
        eccl_scn_job_say(s, s->tool, "FAIL kill_relay: no rank lost its master");
        failures++;
    }
    if (victims && s->detect_ns == UINT64_MAX) {
        eccl_scn_job_say(s, s->tool, "FAIL no survivor ever saw the failure");
        failures++;
    }
    /* Slow links: the mean all-reduce begun after the first one against the
     * mean of those done before it, in ppm of the ratio (integer: stable). */
    char before_mean[32] = "-", after_mean[32] = "-", slowdown[32] = "-";
    if (s->slow_ns != UINT64_MAX && s->before_n) eccl_results_fmt_time(before_mean, sizeof before_mean, s->before_sum_ns / s->before_n);
    if (s->after_n) eccl_results_fmt_time(after_mean, sizeof after_mean, s->after_sum_ns / s->after_n);
    if (s->slow_ns != UINT64_MAX && s->before_n && s->after_n) {
        uint64_t b = s->before_sum_ns / s->before_n, a = s->after_sum_ns / s->after_n;
        uint64_t ppm = b ? (uint64_t)((double)a * 1e6 / (double)b) : 0;
        snprintf(slowdown, sizeof slowdown, "%llu.%06llu", (unsigned long long)(ppm / 1000000u),
                 (unsigned long long)(ppm % 1000000u));
        if (cfg->expect_slowdown > 0 && (double)ppm / 1e6 < cfg->expect_slowdown) {
            eccl_scn_job_say(s, s->tool, "FAIL slowdown=%s expect_slowdown=%g", slowdown,
                           cfg->expect_slowdown);
            failures++;
        }
        if (cfg->expect_speedup > 0 && (ppm == 0 || 1e6 / (double)ppm < cfg->expect_speedup)) {
            eccl_scn_job_say(s, s->tool, "FAIL speedup=%.6f expect_speedup=%g",
                           ppm ? 1e6 / (double)ppm : 0.0, cfg->expect_speedup);
            failures++;
        }
    } else if (cfg->expect_slowdown > 0 || cfg->expect_speedup > 0) {
        eccl_scn_job_say(s, s->tool, "FAIL expect_%s: no all-reduce %s the %s",
                       cfg->expect_slowdown > 0 ? "slowdown" : "speedup",
                       s->before_n ? "began after" : "ended before",
                       cfg->expect_slowdown > 0 ? "slow_link" : "optimize_topology");
        failures++;
    }
    if (s->oom) {
        fprintf(stderr, "%s: out of memory (or a fault failed) while running\n", s->tool);
        failures++;
    }
    if (rep->failure) {
        eccl_scn_job_say(s, s->tool, "FAIL %s", rep->failure);
        failures++;
    }
    if (cfg->trace) failures += trace_check(s, outdir);
    if (cfg->expect_slow_link) failures += slow_link_check(s);
    const char *checks = failures ? "fail" : "pass";
    char end_time[32], ar_mean[32] = "-", ar_min[32] = "-", fault_t[32] = "-", detect[32] = "-";
    eccl_results_fmt_time(end_time, sizeof end_time, end_ns);
    if (s->ar_n) {
        eccl_results_fmt_time(ar_mean, sizeof ar_mean, s->ar_sum_ns / s->ar_n);
        eccl_results_fmt_time(ar_min, sizeof ar_min, s->ar_min_ns);
    }
    if (s->fault_ns != UINT64_MAX) eccl_results_fmt_time(fault_t, sizeof fault_t, s->fault_ns);
    if (s->fault_ns != UINT64_MAX && s->detect_ns != UINT64_MAX)
        eccl_results_fmt_time(detect, sizeof detect, s->detect_ns - s->fault_ns);
    int nkills = 0;
    for (int i = 0; i < cfg->nfaults; i++)
        nkills += cfg->faults[i].kind == F_KILL || cfg->faults[i].kind == F_HOST_OFF;

    /* Bootstrap: when the last rank that started with the job began its
     * first all-reduce (connected, admitted, ring formed, step agreed);
     * ranks that never began one (killed first) are left out. */
    uint64_t boot_ns = 0;
    for (int i = 0; i < cfg->ranks; i++)
        if (!s->rk[i].late && s->rk[i].first_begin_ns > boot_ns) boot_ns = s->rk[i].first_begin_ns;
    char boot[32] = "-";
    if (boot_ns) eccl_results_fmt_time(boot, sizeof boot, boot_ns);

    /* The loopback, when the platform has one ("-" otherwise). */
    char lo_bw[32] = "-", lo_lat[32] = "-";
    if (cfg->loopback) {
        snprintf(lo_bw, sizeof lo_bw, "%.17g", cfg->loopback_bandwidth_Bps);
        eccl_results_fmt_time(lo_lat, sizeof lo_lat, (uint64_t)llround(cfg->loopback_latency_s * 1e9));
    }

    int io_err = rf ? (fclose(rf) != 0) : 1;
    io_err |= eccl_scn_job_write_events(s, outdir) != 0;
    FILE *sf = eccl_results_summary_open(outdir);
    if (sf) {
        eccl_scn_summary_head(sf, cfg);
        eccl_results_kv_i64(sf, "iters", cfg->iters);
        eccl_results_kv_i64(sf, "kills", nkills);
        eccl_results_kv_i64(sf, "killed", killed);
        eccl_results_kv_i64(sf, "survivors", survivors);
        eccl_results_kv_i64(sf, "expect_survivors", cfg->expect_survivors);
        eccl_results_kv_i64(sf, "survivors_noticed", noticed);
        eccl_results_kv_i64(sf, "failed_checks", failures);
        eccl_results_kv_str(sf, "checks", checks);
        eccl_results_kv_u64(sf, "events", s->nev);
        eccl_results_kv_str(sf, rep->end_key, end_time);
        eccl_results_kv_u64(sf, "allreduce_ok", s->ar_n);
        eccl_results_kv_str(sf, "allreduce_mean_s", ar_mean);
        eccl_results_kv_str(sf, "allreduce_min_s", ar_min);
        eccl_results_kv_u64(sf, "allreduce_failed", s->ar_failed);
        eccl_results_kv_i64(sf, "faults", cfg->nfaults);
        eccl_results_kv_i64(sf, "dropped", dropped);
        eccl_results_kv_i64(sf, "joined", joined);
        eccl_results_kv_str(sf, "first_fault_s", fault_t);
        eccl_results_kv_str(sf, "detect_s", detect);
        eccl_results_kv_str(sf, "allreduce_mean_before_slow_s", before_mean);
        eccl_results_kv_str(sf, "allreduce_mean_after_slow_s", after_mean);
        eccl_results_kv_str(sf, "slowdown", slowdown);
        eccl_results_kv_str(sf, "buffers", eccl_scn_buffers_name(cfg));
        eccl_results_kv_str(sf, "values", cfg->phantom ? "unchecked" : "checked");
        if (cfg->expect_slow_link) eccl_results_kv_i64(sf, "slow_link_rank", s->slow_link_rank);
        /* Verdicts the scenario asked for (a trace taken while calls run,
         * as when a slow link is named, may show one in flight anywhere:
         * no culprit to compare unless one is expected). */
        if (cfg->trace && cfg->expect_culprit) {
            eccl_results_kv_str(sf, "trace_culprit", s->trace_culprit ? s->trace_culprit : "-");
            eccl_results_kv_i64(sf, "trace_culprit_rank", s->trace_rank);
        }
        if (cfg->trace && cfg->expect_slow_link) eccl_results_kv_i64(sf, "trace_slow_link_rank", s->trace_slow_link_rank);
        eccl_results_kv_double(sf, "reduce_rate_Bps", cfg->reduce_rate_Bps);
        eccl_results_kv_double(sf, "copy_rate_Bps", cfg->copy_rate_Bps);
        eccl_results_kv_i64(sf, "ranks_per_host", cfg->ranks_per_host);
        eccl_results_kv_str(sf, "loopback_Bps", lo_bw);
        eccl_results_kv_str(sf, "loopback_latency_s", lo_lat);
        eccl_results_kv_str(sf, "bootstrap_s", boot);
        if (rep->write_costs) rep->write_costs(rep->ctx, sf);
        /* Successful all-reduces by the algorithm that ran them (the
         * dispatcher's picks), only those that ran. */
        for (uint32_t a = 0; a < ECCL_ALGO_COUNT; a++)
            if (s->ar_by_algo[a]) {
                char key[64];
                snprintf(key, sizeof key, "allreduce_ok_%s", eccl_algorithm_name(a));
                eccl_results_kv_u64(sf, key, s->ar_by_algo[a]);
            }
        /* Only with devices, so other scenarios' summaries stay as they were. */
        if (cfg->cuda) {
            eccl_results_kv_double(sf, "device_copy_Bps", cfg->dev_copy_Bps);
            eccl_results_kv(sf, "device_copy_latency_s", "%.9f", cfg->dev_copy_latency_s);
        }
        if (rep->write_tail) rep->write_tail(rep->ctx, sf);
        io_err |= eccl_results_close(sf) != 0;
    } else {
        io_err = 1;
    }
    io_err |= write_plot_script(s, cfg, outdir, rep->clock) != 0;
    const char *plot = io_err ? "none" : eccl_results_plot_png(outdir, &io_err);

    printf("scenario=%s seed=%llu ranks=%d killed=%d dropped=%d joined=%d survivors=%d "
           "expect_survivors=%d iters=%d buffers=%s values=%s checks=%s %s=%s "
           "bootstrap_s=%s allreduce_mean_s=%s detect_s=%s slowdown=%s events=%zu out=%s plot=%s\n",
           cfg->name, (unsigned long long)cfg->seed, cfg->ranks, killed, dropped, joined, survivors,
           cfg->expect_survivors, cfg->iters, eccl_scn_buffers_name(cfg),
           cfg->phantom ? "unchecked" : "checked", checks, rep->end_key, end_time, boot, ar_mean, detect, slowdown,
           s->nev, outdir, plot);

    return failures == 0 && !io_err ? 0 : 1;
}
