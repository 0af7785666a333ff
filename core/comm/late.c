/* Calling late: a rank that posts its calls well after its partners (it
 * computes longer, or waits on something else) holds every collective up.
 * It is the one rank that can tell without a shared clock: its partners'
 * first frames are already waiting when it posts (kept aside as early
 * frames, or held unread on the link when too big), on its own clock. Each call
 * that ends well records that lead, as far as the rank spent it outside
 * calls (since its previous call returned); when most of the last
 * COMM_LATE_CALLS are over ECCL_LATE_MS (default 10 ms) the rank tells the
 * master (LATE_REPORT, with their median), and again when most are below
 * half of it. The master
 * logs it and names the group's late peer to every member (SLOW_NOTICE),
 * which ECCL_ATTR_SLOW_PEER returns (docs/trace.md, "Slow ranks while the
 * job runs"). Healthy ranks send nothing. A rank that hears from nobody
 * before it sends (a leaf of the tree all-reduce) cannot see its own
 * lateness this way. */
#include <stdlib.h>

#include "comm/comm_internal.h"

#define LATE_MS_DEFAULT 10u

void comm_late_init(eccl_comm *c)
{
    c->late_limit_us = (uint32_t)eccl_config_uint(c->env, "ECCL_LATE_MS", 0, 3600000u, LATE_MS_DEFAULT) * 1000u;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Whether lead (µs) is over the limit, and under half of it. */
static int over(const eccl_comm *c, uint32_t us) { return us > c->late_limit_us; }
static int under(const eccl_comm *c, uint32_t us) { return us < c->late_limit_us / 2; }

void comm_late_note(eccl_comm *c, const eccl_request *r)
{
    if (!c->late_limit_us || r->call.kind == ECCL_COLL_SEND || r->call.kind == ECCL_COLL_RECV) return;
    uint64_t lead = r->heard_early_ns && r->heard_early_ns < r->posted_ns ? r->posted_ns - r->heard_early_ns : 0;
    /* Only what it spent outside calls: a rank whose previous call ended
     * later than its partners' (the last hop of a WAN ring, say) posts
     * after them too, with no time of its own in between. */
    if (r->gap_ns < lead) lead = r->gap_ns;
    uint32_t us = lead / 1000 > UINT32_MAX ? UINT32_MAX : (uint32_t)(lead / 1000);
    /* The ring counts its leads over the limit and under half of it, so
     * a call costs a few stores; the median is taken only to be told. */
    if (c->n_late == COMM_LATE_CALLS) {
        uint32_t old = c->late_us[c->late_head];
        c->late_over -= over(c, old);
        c->late_under -= under(c, old);
    } else {
        c->n_late++;
    }
    c->late_us[c->late_head] = us;
    c->late_head = (c->late_head + 1) % COMM_LATE_CALLS;
    c->late_over += over(c, us);
    c->late_under += under(c, us);
    if (c->n_late < COMM_LATE_CALLS / 2) return;
    /* Told when most leads are over the limit, and when most are clearly
     * under it again (below half): a rank on the edge does not flap. */
    int late = c->late_told_us ? 2 * c->late_under <= c->n_late : 2 * c->late_over > c->n_late;
    if (late == (c->late_told_us != 0)) return;
    uint32_t v[COMM_LATE_CALLS];
    for (uint32_t i = 0; i < c->n_late; i++) v[i] = c->late_us[i];
    qsort(v, c->n_late, sizeof *v, cmp_u32);
    uint32_t median = v[c->n_late / 2];
    c->late_told_us = late ? (median ? median : 1) : 0;
    if (late)
        ECCL_WARN(c->env, "this rank calls late: its calls start a median %.1f ms after its partners' first frames "
                          "(over %u calls); every collective waits for it",
                  median / 1e3, c->n_late);
    else
        ECCL_INFO(c->env, "this rank no longer calls late (median %.1f ms)", median / 1e3);
    eccl_msg m = {.type = ECCL_MSG_LATE_REPORT};
    m.u.late.late_us = c->late_told_us;
    m.u.late.calls = c->n_late;
    if (c->master_open) comm_master_send(c, &m);
}

void comm_late_on_notice(eccl_comm *c, const eccl_msg_late *m)
{
    if (m->peer_id != c->slow_peer && m->peer_id)
        ECCL_INFO(c->env, "the master names peer %llu as calling late (a median %.1f ms)",
                  (unsigned long long)m->peer_id, m->late_us / 1e3);
    else if (m->peer_id != c->slow_peer)
        ECCL_INFO(c->env, "the master names no peer as calling late any more (was %llu)",
                  (unsigned long long)c->slow_peer);
    c->slow_peer = m->peer_id;
    c->slow_us = m->late_us;
}
