/* The fault plan on the loaded platform: link names resolved to SimGrid
 * links, and the routes the plan's analysis (job.c: who a partition cuts
 * off and for how long, every rank's expected role) walks. */
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
                if (out->n == 0 || out->l[out->n - 1] != l) {
                    out->id[out->n] = (uintptr_t)l;
                    out->l[out->n++] = l;
                }
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
            out->id[out->n] = (uintptr_t)all[i];
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

/* The partition analysis's view of the loaded platform: SimGrid's links
 * and routes, a link's id its handle. */
static int sg_fault_links(void *ctx, int fault, const uintptr_t **ids)
{
    const fault_links *fl = &((const sim *)ctx)->flinks[fault];
    *ids = fl->id;
    return fl->n;
}

static int sg_route(void *ctx, int a, int b, uintptr_t *ids)
{
    (void)ctx;
    char ha[24], hb[24];
    snprintf(ha, sizeof ha, "node-%d", a);
    snprintf(hb, sizeof hb, "node-%d", b);
    xbt_dynar_t links = xbt_dynar_new(sizeof(sg_link_t), NULL);
    sg_host_get_route(sg_host_by_name(ha), sg_host_by_name(hb), links);
    unsigned long n = xbt_dynar_length(links);
    if (n > ECCL_SCN_ROUTE_MAX) n = ECCL_SCN_ROUTE_MAX; /* generated routes have at most 8 */
    for (unsigned long i = 0; i < n; i++) ids[i] = (uintptr_t)xbt_dynar_get_as(links, i, sg_link_t);
    xbt_dynar_free(&links);
    return (int)n;
}

int eccl_scn_sg_plan_roles(const char *file, eccl_scenario *c, sim *s)
{
    s->order = calloc((size_t)c->nfaults + 1, sizeof *s->order);
    if (!s->order) return eccl_scn_error(file, 0, "out of memory");
    const eccl_scn_routes routes = {.ctx = s, .fault_links = sg_fault_links, .route = sg_route};
    return eccl_scn_job_plan(file, c, &s->job, &routes, s->order, &s->norder);
}
