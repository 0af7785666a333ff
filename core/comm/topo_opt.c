/* eccl_comm_optimize_topology: bandwidth probes and the ring order
 * (docs/protocol.md). */
#include "comm/comm_internal.h"

/* ---- topology optimisation (docs/protocol.md) ------------------------------------ */

/* The bytes every probe frame carries. They mean nothing, so where the
 * env's dev has phantom memory (the simulator's scale runs) they are
 * phantom: the net charges their wire time and copies none (a 50 ms probe
 * at 10 GB/s per pair is otherwise half a gigabyte of memcpy per pair). */
static uint8_t *probe_filler_alloc(eccl_comm *c)
{
    void *p = NULL;
    if (eccl_dev_has_phantom(c->env))
        return c->env->dev->alloc(c->env->dev_ctx, COMM_PROBE_SLICE, &p) == ECCL_OK ? p : NULL;
    return calloc(1, COMM_PROBE_SLICE);
}

static void probe_filler_free(eccl_comm *c, uint8_t *filler)
{
    if (!filler) return;
    if (eccl_dev_has_phantom(c->env)) c->env->dev->free(c->env->dev_ctx, filler);
    else free(filler);
}

/* Our probe of the round is over: report what it measured (nothing if it
 * failed: the master leaves the link unmeasured). Its links close at the
 * next comm_probe_pump (this may run inside one of their reads). */
static void probe_end(eccl_comm *c, int ok)
{
    comm_opt *o = &c->opt;
    if (!o->probing) return;
    o->probing = 0;
    const char *why = o->broken ? "connection failed" : !ok ? "unanswered"
                      : o->acked == 0 ? "no answer" : NULL;
    if (why) {
        o->failed++;
        ECCL_WARN(c->env, "bandwidth probe to peer %llu failed: %s", (unsigned long long)o->target,
                  why);
    }
    ok = !why;
    eccl_msg m = {.type = ECCL_MSG_OPT_BW};
    m.u.opt_bw.seq = o->seq;
    m.u.opt_bw.round = o->round;
    m.u.opt_bw.target = o->target;
    m.u.opt_bw.bytes = ok ? o->acked : 0;
    m.u.opt_bw.ns = ok ? o->last_ack_ns - o->start_ns : 0;
    if (c->master_open) comm_master_send(c, &m);
}

/* The master names our target for this round: open the connections; the
 * frames go out from comm_probe_pump. */
eccl_result comm_opt_on_probe(eccl_comm *c, const eccl_msg_opt_probe *p)
{
    comm_opt *o = &c->opt;
    if (!o->active || o->done || p->seq != o->seq) return ECCL_OK; /* stale */
    if (o->probing || !p->target.peer_id || p->target.peer_id == c->peer_id ||
        p->probe_conns == 0 || p->probe_conns > ECCL_TOPO_MAX_CONNS)
        return ECCL_ERR_PROTOCOL;
    uint64_t now = now_ns(c);
    o->probing = 1;
    o->round = p->round;
    o->conns = p->probe_conns;
    o->target = p->target.peer_id;
    o->stop_ns = now + (uint64_t)p->probe_ms * MS;
    o->give_up_ns = o->stop_ns + (uint64_t)c->params.peer_timeout_ms * MS;
    o->start_ns = now;
    o->last_ack_ns = o->acked = 0;
    o->sent = 0;
    o->broken = 0;
    o->probes++;
    if (!o->filler && !(o->filler = probe_filler_alloc(c))) o->broken = 1;
    for (uint32_t k = 0; k < o->conns && !o->broken; k++) {
        eccl_result rc;
        p2p_link *l = comm_link_connect_in(c, &c->side_links, &p->target, ECCL_LINK_PROBE, p->round,
                                     0, 0, &rc);
        if (l) l->probe_sender = 1;
        if (!l || rc != ECCL_OK) o->broken = 1;
    }
    if (o->broken) probe_end(c, 0);
    return ECCL_OK;
}

eccl_result comm_opt_on_done(eccl_comm *c, const eccl_msg_opt_done *d)
{
    comm_opt *o = &c->opt;
    if (!o->active || o->done || d->seq != o->seq) return ECCL_OK; /* stale */
    o->done = 1;
    o->fin = *d;
    o->probing = 0;
    return ECCL_OK;
}

/* Keeps every probe connection's window full until stop_ns, ends the probe
 * once every frame is answered (or at give_up_ns), and closes the links of
 * a probe that is over. */
void comm_probe_pump(eccl_comm *c)
{
    comm_opt *o = &c->opt;
    uint64_t now = now_ns(c);
    int waiting = 0;
    for (p2p_link *l = c->side_links, *n; l; l = n) {
        n = l->next;
        if (!link_is_probe(l) || !l->probe_sender) continue;
        if (!o->probing) {
            comm_link_close(c, l);
            continue;
        }
        /* A process descheduled for the whole window (a loaded machine)
         * still sends a frame: a slow probe measures a slow link, where one
         * that sent nothing measured nothing ("no answer") and left its
         * pair out of the ring search. */
        while ((now < o->stop_ns || !o->sent) && l->probe_unacked < COMM_PROBE_WINDOW) {
            eccl_wire_data d = {.tag = o->seq, .epoch = o->round, .phase = ECCL_PHASE_PROBE,
                                .len = COMM_PROBE_SLICE};
            if (eccl_chan_send_data(&l->ch, &d, o->filler, NULL) != ECCL_OK) {
                o->broken = 1;
                break;
            }
            l->probe_unacked++;
            o->sent++;
            o->tx += COMM_PROBE_SLICE;
        }
        if (l->ch.out_head) eccl_chan_flush(&l->ch);
        waiting += l->probe_unacked > 0;
    }
    if (o->probing && (o->broken || now >= o->give_up_ns || (now >= o->stop_ns && !waiting)))
        probe_end(c, now < o->give_up_ns);
}

/* A probe frame arrived. The target drops the filler and answers each
 * frame with an empty one (step 1); the sender counts the answers. */
eccl_result comm_probe_on_data(eccl_comm *c, p2p_link *l, const eccl_wire_data *d, void **dst)
{
    (void)c;
    if (d->phase != ECCL_PHASE_PROBE || d->step != (l->probe_sender ? 1 : 0) ||
        (l->probe_sender && (d->len || !l->probe_unacked)))
        return ECCL_ERR_PROTOCOL;
    *dst = NULL;
    return ECCL_OK;
}

eccl_result comm_probe_on_data_done(eccl_comm *c, p2p_link *l, const eccl_wire_data *d)
{
    comm_opt *o = &c->opt;
    if (!l->probe_sender) {
        eccl_wire_data a = {.tag = d->tag, .epoch = d->epoch, .phase = ECCL_PHASE_PROBE, .step = 1};
        return eccl_chan_send_data(&l->ch, &a, NULL, NULL);
    }
    l->probe_unacked--;
    if (!o->probing) return ECCL_OK;
    /* Timed from the probe's start to the last answer: the connection
     * set-up and one round trip count too (a few percent of a probe). Not
     * from the first answer: concurrent frames may all complete together
     * (the simulator shares a link fairly between them). */
    o->acked += COMM_PROBE_SLICE;
    o->last_ack_ns = now_ns(c);
    return ECCL_OK;
}

/* ---- topology optimisation (public) ----------------------------------------------- */

void eccl_topo_opts_init(eccl_topo_opts *opts)
{
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    opts->probe_ms = 50;
    opts->probe_conns = 4;
}

static int opt_done(void *arg)
{
    eccl_comm *c = arg;
    return c->phase == PHASE_FAILED ||
           (c->opt.done && (c->opt.fin.result != ECCL_OK || c->ring_ready));
}

eccl_result eccl_comm_optimize_topology(eccl_comm *c, const eccl_topo_opts *opts,
                                        eccl_topo_info *info)
{
    eccl_topo_opts defaults;
    if (!opts) {
        eccl_topo_opts_init(&defaults);
        opts = &defaults;
    }
    if (!c || opts->probe_ms == 0 || opts->probe_conns == 0 ||
        opts->probe_conns > ECCL_TOPO_MAX_CONNS)
        return ECCL_ERR_INVALID_ARG;
    if (info) memset(info, 0, sizeof *info);
    eccl_engine_lock(&c->eng);
    eccl_result rc = comm_usable(c);
    /* One major operation per peer group at a time (DESIGN.md). */
    if (rc == ECCL_OK) comm_ops_settle_returned(c);
    if (rc == ECCL_OK && (c->n_ops > 0 || c->sync.active)) rc = ECCL_ERR_BUSY;
    if (rc != ECCL_OK) {
        eccl_engine_unlock(&c->eng);
        return rc;
    }
    comm_opt *o = &c->opt;
    uint32_t seq = o->seq + 1;
    memset(o, 0, sizeof *o);
    o->active = 1;
    o->seq = seq;
    eccl_msg m = {.type = ECCL_MSG_OPT_REQ};
    m.u.opt_req = (eccl_msg_opt_req){seq, opts->probe_ms, opts->probe_conns, opts->max_rounds};
    rc = comm_master_send(c, &m);
    eccl_engine_kick(&c->eng);
    if (rc == ECCL_OK)
        rc = eccl_engine_drive(&c->eng, opt_done, c,
                               now_ns(c) + (uint64_t)c->params.op_timeout_ms * MS);
    if (c->phase == PHASE_FAILED) {
        rc = c->fatal;
    } else if (o->done) {
        rc = (eccl_result)o->fin.result;
    } else {
        /* Timed out: withdraw, so the master ends the call for the others
         * instead of waiting on us. */
        if (rc == ECCL_OK) rc = ECCL_ERR_TIMEOUT;
        eccl_msg w = {.type = ECCL_MSG_OPT_BW};
        w.u.opt_bw.seq = seq;
        w.u.opt_bw.result = (uint32_t)rc;
        if (c->master_open) comm_master_send(c, &w);
    }
    if (info) {
        info->changed = o->fin.changed;
        info->exact = o->fin.exact;
        info->moonshot = o->fin.moonshot;
        info->pairs_measured = o->fin.pairs;
        info->unmeasured_links = o->fin.unmeasured;
        info->probes_sent = o->probes;
        info->probes_failed = o->failed;
        info->probe_bytes = o->tx;
        info->old_bottleneck_bps = (double)o->fin.old_bps;
        info->new_bottleneck_bps = (double)o->fin.new_bps;
    }
    o->probing = 0;
    c->seen_world = 0; /* a new ring order renumbers: the caller knows */
    comm_side_links_close(c, ECCL_LINK_PROBE); /* drops frames that borrow the filler */
    probe_filler_free(c, o->filler);
    o->filler = NULL;
    o->active = 0;
    eccl_engine_unlock(&c->eng);
    return rc;
}
