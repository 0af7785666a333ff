/* The fault plan on the loaded platform: link names resolved to SimGrid
 * links, partitions analysed for who they cut off and for how long, and
 * every rank's expected role (survivor, joiner, victim, dropped). */
#include "sim_sg.h"

/* The links of one name: node-K is host K's own link (both directions: the
 * first link of its route out and the last of its route in); any other name
 * is a link of platform.xml. 0, or -1 when there is no such link. */
static int resolve_link(const eccl_scenario *c, const char *name, fault_links *out)
{
    int k;
    char tail;
    if (sscanf(name, "node-%d%c", &k, &tail) == 1 && k >= 0 && k < c->hosts) {
        char self[24], other[24];
        snprintf(self, sizeof self, "node-%d", k);
        snprintf(other, sizeof other, "node-%d", k == 0 ? 1 : 0);
        sg_host_t a = sg_host_by_name(self), b = sg_host_by_name(other);
        if (!a || !b) return -1;
        for (int dir = 0; dir < 2; dir++) {
            xbt_dynar_t links = xbt_dynar_new(sizeof(sg_link_t), NULL);
            sg_host_get_route(dir ? b : a, dir ? a : b, links);
            unsigned long n = xbt_dynar_length(links);
            if (n > 0) {
                sg_link_t l = xbt_dynar_get_as(links, dir ? n - 1 : 0, sg_link_t);
                if (out->n == 0 || out->l[out->n - 1] != l) out->l[out->n++] = l;
            }
            xbt_dynar_free(&links);
        }
        return out->n > 0 ? 0 : -1;
    }
    size_t n = sg_link_count();
    sg_link_t *all = sg_link_list();
    int found = -1;
    for (size_t i = 0; i < n && all; i++) {
        if (strcmp(sg_link_get_name(all[i]), name) == 0) {
            out->l[out->n++] = all[i];
            found = 0;
            break;
        }
    }
    free(all);
    return found;
}

int eccl_scn_sg_resolve_links(const char *file, const eccl_scenario *c, fault_links *fl)
{
    for (int i = 0; i < c->nfaults; i++) {
        const eccl_scn_fault *f = &c->faults[i];
        for (int j = 0; j < f->nlinks; j++)
            if (resolve_link(c, f->links[j], &fl[i]))
                return eccl_scn_error(file, f->line, "%s: \"%s\": no such link (node-K is host K's "
                                 "link; other names as in platform.xml)", eccl_scn_fault_name(f->kind),
                                 f->links[j]);
    }
    return 0;
}

int eccl_scn_sg_order_cmp(const void *a, const void *b, void *ctx)
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
    sg_link_t *l;
    int *off;
} cut_links;

static int is_off(const cut_links *u, sg_link_t l)
{
    for (int i = 0; i < u->n; i++)
        if (u->l[i] == l) return u->off[i];
    return 0;
}

/* 1 when the route a -> b crosses no link that is off. */
static int route_up(const cut_links *u, int a, int b)
{
    char ha[24], hb[24];
    snprintf(ha, sizeof ha, "node-%d", a);
    snprintf(hb, sizeof hb, "node-%d", b);
    xbt_dynar_t links = xbt_dynar_new(sizeof(sg_link_t), NULL);
    sg_host_get_route(sg_host_by_name(ha), sg_host_by_name(hb), links);
    int up = 1;
    unsigned long n = xbt_dynar_length(links);
    for (unsigned long i = 0; i < n && up; i++)
        up = !is_off(u, xbt_dynar_get_as(links, i, sg_link_t));
    xbt_dynar_free(&links);
    return up;
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
static int analyse_cuts(const char *file, const eccl_scenario *c, const fault_links *fl,
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
    cut_links u = {0, calloc((size_t)nlink * 2 * MAX_FAULT_LINKS, sizeof(sg_link_t)),
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
        for (int j = 0; j < fl[i].n; j++) {
            int seen = 0;
            for (int k = 0; k < u.n; k++) seen |= u.l[k] == fl[i].l[j];
            if (!seen) u.l[u.n++] = fl[i].l[j];
        }
    }
    qsort_r(ord, (size_t)n, sizeof *ord, eccl_scn_sg_order_cmp, (void *)c);
    for (int r = 1; r <= c->ranks; r++) since[r] = UINT64_MAX;
    for (int i = 0; i < n && rc == 0;) {
        const uint64_t t = c->faults[ord[i]].at_ns;
        int first = i, partition_line = 0;
        for (; i < n && c->faults[ord[i]].at_ns == t; i++) {
            const eccl_scn_fault *f = &c->faults[ord[i]];
            for (int j = 0; j < fl[ord[i]].n; j++)
                for (int k = 0; k < u.n; k++)
                    if (u.l[k] == fl[ord[i]].l[j]) u.off[k] = f->kind == F_LINK_OFF;
            if (f->partition) partition_line = f->line;
        }
        const uint64_t end = i < n ? c->faults[ord[i]].at_ns : UINT64_MAX;
        int cut_any = 0;
        for (int r = 1; r <= c->ranks; r++) {
            const int h = eccl_scn_rank_host(c, r);
            reach[r] = route_up(&u, 0, h) && route_up(&u, h, 0);
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
                if (reach[b] && !(route_up(&u, ha, hb) && route_up(&u, hb, ha)))
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

/* Expected roles (from the host plan and the cuts), the timed faults in
 * firing order, and expect_survivors unless given. 0, or -1 after printing
 * why. */
int eccl_scn_sg_plan_roles(const char *file, eccl_scenario *c, sim *s)
{
    s->order = calloc((size_t)c->nfaults + 1, sizeof *s->order);
    if (!s->order) return eccl_scn_error(file, 0, "out of memory");
    for (int i = 0; i < c->nfaults; i++) {
        const eccl_scn_fault *f = &c->faults[i];
        rank_state *r = f->rank > 0 ? &s->rk[f->rank - 1] : NULL;
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
            for (int q = first; q <= last; q++) s->rk[q - 1].nstarts++;
        }
        s->order[s->norder++] = i;
    }
    qsort_r(s->order, (size_t)s->norder, sizeof *s->order, eccl_scn_sg_order_cmp, c);
    if (analyse_cuts(file, c, s->flinks, s->rk)) return -1;
    /* A rank's last host event says whether its host ends on. */
    int expected = 0;
    for (int i = 0; i < c->ranks; i++) {
        rank_state *r = &s->rk[i];
        int off = r->kill_iter >= 0, host_events = r->late || off;
        for (int k = 0; k < s->norder; k++) {
            const eccl_scn_fault *f = &c->faults[s->order[k]];
            if (f->rank != r->idx &&
                !(f->rank > 0 && eccl_scn_host_wide(f->kind) && eccl_scn_rank_host(c, f->rank) == eccl_scn_rank_host(c, r->idx)))
                continue;
            host_events = 1;
            off = f->kind == F_KILL || f->kind == F_HOST_OFF;
        }
        const double cut_s = r->cut_ns == UINT64_MAX ? 1e300 : (double)r->cut_ns / 1e9;
        const int dropped = cut_s >= c->peer_timeout_s + 0.1;
        if (dropped && host_events)
            return eccl_scn_error(file, 0, "rank %d is both cut off by link faults and the subject "
                             "of host events: give it one or the other", r->idx);
        r->role = off ? ROLE_KILLED : dropped ? ROLE_DROPPED
                  : (r->late || r->nstarts > 1) ? ROLE_JOINER : ROLE_SURVIVOR;
        expected += r->role == ROLE_SURVIVOR || r->role == ROLE_JOINER;
    }
    if (c->expect_survivors < 0) c->expect_survivors = expected;
    return 0;
}

