/* What a rank measures for the master's metrics and detectors: its calls
 * (COLL_STATS: how many returned ECCL_OK, of how many bytes, every
 * ECCL_STATS_MS and on leaving) and its links' rates.
 *
 * Link rates: how fast each link in delivers, measured where the bytes
 * land. A DATA frame of COMM_RATE_MIN bytes or more is timed from the moment
 * its header is read and its payload has a place (the rest of it still on
 * the way) to the moment it is in place: a slow wire stretches that, a
 * sender that is late does not (it writes a whole frame at once). On each
 * heartbeat a link that carried COMM_RATE_REPORT bytes since its last report
 * sends the master one LINK_RATE (from, bytes, ns); where the net knows
 * the bytes' time on the wire (the simulator: a frame arrives there whole)
 * that counts instead; the master compares the
 * group's links and names one far under their upper quartile to every
 * member (SLOW_LINK), which ECCL_ATTR_SLOW_LINK_FROM / _TO return (docs/trace.md,
 * "Slow links while the job runs"). A rank slow to read (its CPU busy
 * elsewhere) makes its links in look slow too: the name is the link's ends. */
#include "comm/comm_internal.h"
#include "util/addr.h"
#include "util/config.h"

#define STATS_MS_DEFAULT 10000u

void comm_rate_begin(eccl_comm *c, p2p_link *l, const eccl_wire_data *d)
{
    l->rx_at_ns = d->len >= COMM_RATE_MIN && !c->net_wire_time ? now_ns(c) : 0;
}

void comm_rate_done(eccl_comm *c, p2p_link *l, const eccl_wire_data *d)
{
    if (!l->rx_at_ns) return;
    l->rx_bytes += d->len;
    l->rx_ns += now_ns(c) - l->rx_at_ns;
    l->rx_at_ns = 0;
}

/* Whether l's far end is known to be on another host: links between
 * host-mates (loopback, shared memory) are not compared with the network's,
 * and one whose far end this rank cannot place is not reported. */
static int crosses_hosts(const eccl_comm *c, const p2p_link *l)
{
    const char *addr = comm_peer_addr_of(c, l);
    if (!addr) return 0;
    size_t la, lb;
    const char *a = eccl_addr_host(addr, &la), *b = eccl_addr_host(c->p2p_addr, &lb);
    return la != lb || memcmp(a, b, la) != 0;
}

int comm_rate_counts(const eccl_comm *c, const p2p_link *l)
{
    return l->rx_bytes && l->peer_id && crosses_hosts(c, l);
}

int comm_rate_measured(eccl_comm *c, p2p_link *l)
{
    /* A net that knows the bytes' time on the wire (the simulator, whose
     * frames arrive whole) counts for the link. */
    if (c->net_wire_time && l->ch.conn) c->env->net->wire_time(c->env->net_ctx, l->ch.conn, &l->rx_bytes, &l->rx_ns);
    return comm_rate_counts(c, l);
}

void comm_rates_report(eccl_comm *c)
{
    if (c->stats_every_ns && now_ns(c) >= c->stats_at_ns) {
        if (c->stats_at_ns) comm_stats_flush(c);
        c->stats_at_ns = now_ns(c) + c->stats_every_ns;
    }
    for (p2p_link *l = c->links; l; l = l->next) {
        if (!comm_rate_measured(c, l) || l->rx_bytes - l->rx_told_bytes < COMM_RATE_REPORT) continue;
        eccl_msg m = {.type = ECCL_MSG_LINK_RATE};
        m.u.link.from = l->peer_id;
        m.u.link.bytes = l->rx_bytes - l->rx_told_bytes;
        m.u.link.ns = l->rx_ns - l->rx_told_ns;
        if (!m.u.link.ns) m.u.link.ns = 1;
        l->rx_told_bytes = l->rx_bytes, l->rx_told_ns = l->rx_ns;
        l->rx_win_bytes = m.u.link.bytes, l->rx_win_ns = m.u.link.ns;
        comm_master_send(c, &m);
    }
}

void comm_rates_on_notice(eccl_comm *c, const eccl_msg_link *m)
{
    int named = m->from && (m->from != c->slow_link_from || m->to != c->slow_link_to);
    if (named)
        ECCL_INFO(c->env, "the master names the link from peer %llu to peer %llu as slow (%.3g B/s)",
                  (unsigned long long)m->from, (unsigned long long)m->to,
                  m->ns ? (double)m->bytes * 1e9 / (double)m->ns : 0.0);
    else if (!m->from && c->slow_link_from)
        ECCL_INFO(c->env, "the master names no link as slow any more");
    c->slow_link_from = m->from;
    c->slow_link_to = m->to;
    /* Where traces are kept: every member's rates as the link is named,
     * for `eccl-trace analyze` to compare (docs/trace.md). */
    if (named) comm_trace_dump(c, "slow_link", 1);
}

void comm_stats_init(eccl_comm *c)
{
    c->stats_every_ns =
        (uint64_t)eccl_config_uint(c->env, "ECCL_STATS_MS", 0, 86400000u, STATS_MS_DEFAULT) * 1000000u;
    c->stats_at_ns = 0; /* the first heartbeat sets it: the clock is not ours yet */
}

void comm_stats_note(eccl_comm *c, const eccl_request *r)
{
    c->calls_ok++;
    c->calls_bytes += (uint64_t)r->call.count * eccl_dtype_size(r->call.dtype);
}

void comm_stats_flush(eccl_comm *c)
{
    if (!c->stats_every_ns || c->calls_ok == c->calls_told || !c->master_open) return;
    eccl_msg m = {.type = ECCL_MSG_COLL_STATS};
    m.u.stats.calls = c->calls_ok - c->calls_told;
    m.u.stats.bytes = c->calls_bytes - c->calls_bytes_told;
    if (comm_master_send(c, &m) != ECCL_OK) return;
    c->calls_told = c->calls_ok, c->calls_bytes_told = c->calls_bytes;
}
