#include "churn_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int churn_field(const char *line, const char *key, char *out, size_t len)
{
    size_t k = strlen(key);
    for (const char *p = line; (p = strstr(p, key)) != NULL; p++) {
        if ((p == line || p[-1] == ' ') && p[k] == '=') {
            p += k + 1;
            size_t n = strcspn(p, " \n");
            if (n >= len) n = len - 1;
            memcpy(out, p, n);
            out[n] = 0;
            return 1;
        }
    }
    return 0;
}

static int field_u64(const char *line, const char *key, int base, uint64_t *out)
{
    char v[40], *end;
    if (!churn_field(line, key, v, sizeof v) || !v[0]) return 0;
    *out = strtoull(v, &end, base);
    return *end == 0;
}

int churn_check_init(churn_check *c, size_t window, double t_start)
{
    memset(c, 0, sizeof *c);
    c->win = malloc(window * sizeof *c->win);
    if (!c->win) return -1;
    for (size_t i = 0; i < window; i++) c->win[i].rev = UINT64_MAX;
    c->window = window;
    c->t_start = c->last_progress = t_start;
    c->max_rev = UINT64_MAX;
    c->first_break_rev = UINT64_MAX;
    return 0;
}

void churn_check_free(churn_check *c)
{
    free(c->win);
    free(c->w);
    c->win = NULL;
    c->w = NULL;
}

static churn_worker_rec *rec(churn_check *c, size_t worker)
{
    if (worker >= c->nw) {
        size_t n = c->nw ? c->nw : 64;
        while (n <= worker) n *= 2;
        churn_worker_rec *w = realloc(c->w, n * sizeof *w);
        if (!w) return NULL;
        for (size_t i = c->nw; i < n; i++) w[i] = (churn_worker_rec){.last_rev = UINT64_MAX};
        c->w = w;
        c->nw = n;
    }
    return &c->w[worker];
}

int churn_check_holds_state(const churn_check *c, size_t worker)
{
    return worker < c->nw && (c->w[worker].joined || c->w[worker].last_rev != UINT64_MAX);
}

static void problem(churn_check *c, size_t worker, const char *line)
{
    if (!c->first_problem[0])
        snprintf(c->first_problem, sizeof c->first_problem, "worker %zu: %s", worker, line);
}

static void progress_at(churn_check *c, double t)
{
    if (t - c->last_progress > c->max_stall_s) {
        c->max_stall_s = t - c->last_progress;
        c->max_stall_at = c->last_progress;
    }
    c->last_progress = t;
}

static void on_rev(churn_check *c, size_t worker, churn_worker_rec *w, const char *line, double t)
{
    uint64_t rev, hash, adv;
    if (!field_u64(line, "revision", 10, &rev) || !field_u64(line, "hash", 16, &hash) ||
        !field_u64(line, "advanced", 10, &adv)) {
        c->errors++;
        problem(c, worker, line);
        return;
    }
    if (w) {
        if (w->last_rev != UINT64_MAX && rev <= w->last_rev) {
            c->order_breaks++;
            problem(c, worker, line);
        }
        w->last_rev = rev;
    }
    churn_rev_slot *s = &c->win[rev % c->window];
    if (s->rev != rev) {
        if (s->rev != UINT64_MAX && s->rev > rev) {
            c->late++; /* the window moved past it: cannot be judged */
            return;
        }
        *s = (churn_rev_slot){.rev = rev, .hash = hash, .advanced = (int)adv};
        if (adv) {
            c->revisions++;
            if (c->max_rev == UINT64_MAX || rev > c->max_rev) {
                c->max_rev = rev;
                progress_at(c, t);
            }
        }
    } else if (s->hash != hash || s->advanced != (int)adv) {
        if (!s->broken) {
            s->broken = 1;
            c->parity_breaks++;
            if (c->first_break_rev == UINT64_MAX) c->first_break_rev = rev;
            problem(c, worker, line);
        }
    }
    s->reports++;
}

void churn_check_line(churn_check *c, size_t worker, const char *line, double t)
{
    char ev[24];
    c->lines++;
    if (!churn_field(line, "event", ev, sizeof ev)) return;
    churn_worker_rec *w = rec(c, worker);
    if (!strcmp(ev, "rev")) {
        on_rev(c, worker, w, line, t);
    } else if (!strcmp(ev, "joined")) {
        c->joins++;
        if (w) w->joined = 1;
    } else if (!strcmp(ev, "retry")) {
        c->retries++;
    } else if (!strcmp(ev, "corrupt")) {
        c->corrupt++;
        if (w) w->corrupt++;
        problem(c, worker, line);
    } else if (!strcmp(ev, "error") || !strcmp(ev, "gave_up")) {
        c->errors++;
        if (w) w->errors++;
        problem(c, worker, line);
    } else if (!strcmp(ev, "exit")) {
        uint64_t st;
        if (!field_u64(line, "status", 10, &st) || st != 0) {
            c->errors++;
            if (w) w->errors++;
            problem(c, worker, line);
        }
    }
}

void churn_check_finish(churn_check *c, double t)
{
    if (t - c->last_progress > c->max_stall_s) {
        c->max_stall_s = t - c->last_progress;
        c->max_stall_at = c->last_progress;
    }
}
