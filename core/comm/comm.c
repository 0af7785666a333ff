/* The communicator: a peer's side of the run.
 *
 * One mutex (the engine's) guards everything here. The master link carries
 * membership and the fault protocol; p2p links carry collective data and are
 * rebuilt for every ring epoch: the ring's links when the epoch starts, the
 * tree's (small buffers, coll/tree_allreduce.h) when first used. A
 * collective never waits for the master on its fast path: it runs
 * peer-to-peer and finishes with its completion round (done tokens, or the
 * tree's DONE/COMMIT waves). The master steps in only when membership changes:
 *
 *   VIEW_QUERY(e)   freeze every op of epoch e; report which hold the result
 *   VIEW_DECIDE(e)  drop epoch-e links; commit or abort (restore) each op
 *   RING(e+1)       wire the new ring; queued ops start on it
 */
#include "comm/comm_internal.h"

static const eccl_chan_handler master_handler;


/* A full ring of `n` entries of `elem` bytes (the next write at *head) in
 * twice the room, at most `max` entries, oldest first: the next write goes
 * to n. Out of memory or at `max`, it stays as it is, and the caller
 * overwrites its oldest entry. */
void comm_ring_grow(void **buf, uint32_t *cap, uint32_t *head, uint32_t n, size_t elem,
                    uint32_t max)
{
    if (*cap >= max) return;
    uint32_t ncap = *cap * 2 < max ? *cap * 2 : max;
    uint8_t *nb = malloc((size_t)ncap * elem);
    if (!nb) return;
    for (uint32_t i = 0; i < n; i++)
        memcpy(nb + i * elem, (const uint8_t *)*buf + (size_t)((*head + *cap - n + i) % *cap) * elem,
               elem);
    free(*buf);
    *buf = nb;
    *cap = ncap;
    *head = n;
}

/* When to try again: now plus the current delay, which then doubles. The
 * delay is jittered down by up to half, by a hash of this peer's own
 * address and its attempt count (core has no random source, and this keeps
 * the simulator deterministic): peers refused together must not all come
 * back together. Without it 100k simulated peers retried in lockstep
 * waves, each wave mostly refused again by the master's full backlog. */
uint64_t comm_retry_at(eccl_comm *c, uint64_t *backoff)
{
    if (*backoff < COMM_RETRY_NS) *backoff = COMM_RETRY_NS;
    uint64_t salt[2] = {eccl_hash(ECCL_HASH_SIMPLE, c->p2p_addr, strlen(c->p2p_addr)),
                        c->retries++};
    uint64_t jitter = eccl_hash(ECCL_HASH_SIMPLE, salt, sizeof salt) % (*backoff / 2);
    uint64_t at = now_ns(c) + *backoff - jitter;
    *backoff = *backoff * 2 > COMM_RETRY_MAX_NS ? COMM_RETRY_MAX_NS : *backoff * 2;
    return at;
}

/* The master is retried until connect_timeout, and not a moment later.
 * The next address of the list is tried at once: only a whole round of
 * refusals earns a back-off (a dead relay must not delay its peers' way in
 * through the master by a back-off period). */
static void master_retry_schedule(eccl_comm *c)
{
    uint64_t at = c->master_turn % c->n_master_addrs ? now_ns(c) : comm_retry_at(c, &c->master_backoff);
    c->master_retry_at = at < c->master_deadline ? at : c->master_deadline;
}

/* ---- master link ---------------------------------------------------------- */

eccl_result comm_master_send(eccl_comm *c, const eccl_msg *m)
{
    if (c->phase == PHASE_FAILED) return c->fatal;
    eccl_result rc = eccl_chan_send_msg(&c->master, m);
    if (rc == ECCL_OK) rc = eccl_chan_flush(&c->master);
    /* A send that finds the master's connection broken brings the news a
     * read would: this call says MASTER_LOST whether or not a read noticed
     * first (it was a transport code, ECCL_ERR_CLOSED, for a call that raced
     * the reader), and the next engine step fails the communicator. Not
     * here: a handler of the master's own channel may be on the stack, and
     * failing closes that channel. While registering, the caller retries the
     * master instead; running out of memory for a frame is no lost master. */
    if (rc != ECCL_OK && rc != ECCL_ERR_NO_MEMORY && c->phase != PHASE_REGISTERING) {
        c->master_broken = 1;
        rc = ECCL_ERR_MASTER_LOST;
    }
    return rc;
}

/* An attempt to register that broke before the welcome (reset, closed, or
 * silent for peer_timeout_ms): a relay that died or froze while we dialled
 * it can still have taken the connection (its kernel did). Nothing was
 * decided about us yet, so this is a refusal like any other: the next
 * address, until connect_timeout (the caller schedules it). */
static void master_attempt_failed(eccl_comm *c, eccl_result why)
{
    ECCL_INFO(c->env, "registering through %s failed (%s): trying the next address",
              c->master_addrs[(c->master_turn - 1) % c->n_master_addrs], eccl_strerror(why));
    eccl_chan_close(&c->master);
    c->master_open = 0;
}

static eccl_result master_open(eccl_comm *c)
{
    eccl_conn *conn = NULL;
    eccl_result rc = eccl_chan_init(&c->master, c->env, NULL, COMM_RBUF_MASTER);
    if (rc != ECCL_OK) return rc;
    const char *addr = c->master_addrs[c->master_turn++ % c->n_master_addrs];
    rc = c->env->net->connect(c->env->net_ctx, addr, &c->master, &conn);
    if (rc != ECCL_OK) {
        eccl_chan_close(&c->master);
        return rc;
    }
    c->master_open = 1;
    rc = eccl_chan_attach(&c->master, conn, 1);
    if (rc != ECCL_OK) {
        master_attempt_failed(c, rc);
        return rc;
    }
    eccl_msg m = {.type = ECCL_MSG_REGISTER};
    m.u.reg.peer_group = c->params.peer_group;
    m.u.reg.peer_timeout_ms = c->params.peer_timeout_ms;
    snprintf(m.u.reg.p2p_addr, sizeof m.u.reg.p2p_addr, "%s", c->p2p_addr);
    rc = comm_master_send(c, &m);
    if (rc != ECCL_OK) master_attempt_failed(c, rc);
    return rc == ECCL_ERR_NO_MEMORY ? rc : rc != ECCL_OK ? ECCL_ERR_CONNECT : ECCL_OK;
}


static eccl_result master_on_msg(void *owner, eccl_chan *ch, const eccl_msg *m)
{
    eccl_comm *c = owner;
    (void)ch;
    switch (m->type) {
    case ECCL_MSG_WELCOME:
        if (c->phase != PHASE_REGISTERING) return ECCL_ERR_PROTOCOL;
        c->peer_id = m->u.welcome.peer_id;
        snprintf(c->env->name, sizeof c->env->name, "peer %llu",
                 (unsigned long long)c->peer_id);
        c->phase = m->u.welcome.accepted ? PHASE_ACCEPTED : PHASE_PENDING;
        ECCL_INFO(c->env, "registered (%s)", m->u.welcome.accepted ? "accepted" : "pending");
        return ECCL_OK;
    case ECCL_MSG_RING:
        return comm_on_ring(c, &m->u.ring);
    case ECCL_MSG_TOPO_DONE:
        c->topo_done_seen++;
        if (c->phase == PHASE_PENDING) c->phase = PHASE_ACCEPTED;
        return ECCL_OK;
    case ECCL_MSG_PENDING_REPLY:
        c->pending_value = m->u.pending.pending;
        c->pending_replies++;
        return ECCL_OK;
    case ECCL_MSG_VIEW_QUERY:
        return comm_on_view_query(c, m->u.epoch.epoch);
    case ECCL_MSG_VIEW_DECIDE:
        return comm_on_view_decide(c, &m->u.view);
    case ECCL_MSG_REPAIR_ASK:
        return comm_on_repair_ask(c, &m->u.repair);
    case ECCL_MSG_REPAIR_PUT:
        return comm_on_repair_put(c, &m->u.repair);
    case ECCL_MSG_TRACE_ASK: {
        char why[64];
        if (m->u.trace_ask.result == ECCL_OK) /* eccl_master_trace_all */
            snprintf(why, sizeof why, "operator");
        else
            snprintf(why, sizeof why, "asked:tag_%llu_%s", (unsigned long long)m->u.trace_ask.tag,
                     m->u.trace_ask.result == ECCL_ERR_TIMEOUT ? "timed_out" : "failed");
        comm_trace_dump(c, why, 1);
        return ECCL_OK;
    }
    case ECCL_MSG_NOTICE:
        comm_on_notice(c, &m->u.notice);
        return ECCL_OK;
    case ECCL_MSG_SLOW_NOTICE:
        comm_late_on_notice(c, &m->u.late);
        return ECCL_OK;
    case ECCL_MSG_SLOW_LINK:
        comm_rates_on_notice(c, &m->u.link);
        return ECCL_OK;
    case ECCL_MSG_KICK:
        ECCL_WARN(c->env, "kicked by the master: %s", eccl_strerror((eccl_result)m->u.kick.reason));
        comm_fail(c, ECCL_ERR_KICKED);
        return ECCL_OK;
    case ECCL_MSG_HEARTBEAT:
        return ECCL_OK;
    case ECCL_MSG_SYNC_PLAN:
        return comm_sync_on_plan(c, &m->u.sync_plan);
    case ECCL_MSG_SYNC_DONE:
        return comm_sync_on_done(c, &m->u.sync_result);
    case ECCL_MSG_OPT_PROBE:
        return comm_opt_on_probe(c, &m->u.opt_probe);
    case ECCL_MSG_OPT_DONE:
        return comm_opt_on_done(c, &m->u.opt_done);
    case ECCL_MSG_PEER_REPLY:
        return comm_on_peer_reply(c, &m->u.peer_reply);
    case ECCL_MSG_LEAVE_DONE:
        if (!c->leaving || c->left) return ECCL_ERR_PROTOCOL;
        c->left = 1;
        c->leave_result = (eccl_result)m->u.leave_done.result;
        /* Refused (a member was lost first): an ordinary member again. */
        c->leaving = c->leave_result == ECCL_OK;
        return ECCL_OK;
    default:
        return ECCL_ERR_PROTOCOL;
    }
}

static eccl_result master_on_data(void *owner, eccl_chan *ch, const eccl_wire_data *d,
                                  void **dst)
{
    (void)owner, (void)ch, (void)d, (void)dst;
    return ECCL_ERR_PROTOCOL;
}

static eccl_result master_on_data_done(void *owner, eccl_chan *ch, const eccl_wire_data *d)
{
    (void)owner, (void)ch, (void)d;
    return ECCL_ERR_PROTOCOL;
}

static const eccl_chan_handler master_handler = {master_on_msg, master_on_data,
                                                 master_on_data_done};

/* ---- progress ----------------------------------------------------------------- */

static void accept_links(eccl_comm *c)
{
    for (;;) {
        p2p_link *l = comm_link_new(c);
        if (!l) return;
        eccl_conn *conn = NULL;
        eccl_result rc = c->env->net->accept(c->env->net_ctx, c->listener.l, l, &conn);
        if (rc != ECCL_OK) {
            comm_link_close(c, l);
            if (rc != ECCL_ERR_AGAIN)
                ECCL_WARN(c->env, "p2p accept failed: %s", eccl_strerror(rc));
            return;
        }
        if (eccl_chan_attach(&l->ch, conn, 0) != ECCL_OK) {
            comm_link_close(c, l);
            return;
        }
        /* Until it proves the secret: a bounded few per host and in all. */
        void *evict = NULL;
        if (!eccl_gate_enter(&c->gate, l, &l->ch, eccl_gate_host_of(c->env, conn), now_ns(c), &evict))
            comm_link_close(c, l);
        if (evict) comm_link_close(c, evict);
    }
}

void comm_link_service(eccl_comm *c, p2p_link *l)
{
    if (l->ch.closed) return;
    eccl_chan_read(&l->ch, &comm_link_handler, c, COMM_READ_BUDGET);
    if (l->ch.error == ECCL_OK) eccl_chan_flush(&l->ch);
    if (l->ch.error == ECCL_ERR_AUTH && eccl_auth_log_due(++c->auth_refused))
        ECCL_WARN(c->env, "%s peer link failed authentication (%llu so far): %s",
                  l->outgoing ? "a dialled" : "an accepted", (unsigned long long)c->auth_refused,
                  l->ch.auth_why ? l->ch.auth_why : "its TLS handshake failed");
    if (l->ch.error != ECCL_OK && (link_is_sync(l) || link_is_probe(l))) {
        if (link_is_sync(l)) comm_sync_link_lost(c, l);
        if (link_is_probe(l) && l->probe_sender) c->opt.broken = 1;
        comm_link_close(c, l);
        return;
    }
    if (l->ch.error != ECCL_OK) {
        /* A broken link stalls its ops; the master's view change resolves
         * them (comm_ops_link_lost asks for one). Meanwhile keep trying to
         * reach `next`: a connect can fail after it started (refused,
         * reset), and the neighbour may well be alive. Not while leaving: the neighbour
         * most likely left too (a dial would be refused), and if it died
         * the master re-forms the ring anyway. */
        int redial = !c->frozen && !c->leaving;
        if (l == c->link_next || l == c->link_prev)
            ECCL_INFO(c->env, "link to peer %llu lost: %s", (unsigned long long)l->peer_id,
                      eccl_strerror(l->ch.error));
        if (l == c->link_next && redial)
            c->next_retry_at = comm_retry_at(c, &c->next_backoff);
        /* Likewise a connection of our pool: the next op mapped to it
         * reopens it, once the back-off passed. */
        if (c->pslot && l->pool && l == c->pslot[l->pool].next && redial) {
            ECCL_INFO(c->env, "pool link %u to peer %llu lost: %s", l->pool,
                      (unsigned long long)l->peer_id, eccl_strerror(l->ch.error));
            c->pslot[l->pool].retry_at = comm_retry_at(c, &c->pslot[l->pool].backoff);
        }
        /* Its frames are lost (the view change settles their ops), but
         * the next tree op needs the parent again. */
        if (l == c->link_tree[ECCL_TREE_PARENT] && redial)
            c->parent_retry_at = comm_retry_at(c, &c->parent_backoff);
        if (redial) comm_ops_link_lost(c, l);
        comm_link_close(c, l);
    }
}

static void master_service(eccl_comm *c)
{
    if (!c->master_open) return;
    eccl_result rc = eccl_chan_read(&c->master, &master_handler, c, SIZE_MAX);
    if (rc == ECCL_OK && c->master_open) rc = eccl_chan_flush(&c->master);
    if (!c->master_open || c->phase == PHASE_FAILED) return;
    if ((rc == ECCL_ERR_CONNECT || rc == ECCL_ERR_CLOSED) && c->phase == PHASE_REGISTERING) {
        /* The master may not be up yet, or what we dialled went away. */
        master_attempt_failed(c, rc);
        master_retry_schedule(c);
        return;
    }
    /* A master that does not share our secret (or refuses ours) will not
     * later: no retry. */
    if (rc == ECCL_ERR_AUTH)
        ECCL_ERROR(c->env, "the master link failed authentication: %s",
                   c->master.auth_why ? c->master.auth_why : "the TLS handshake failed (a different secret or certificate?)");
    if (rc != ECCL_OK)
        comm_fail(c, rc == ECCL_ERR_PROTOCOL || rc == ECCL_ERR_AUTH ? rc : ECCL_ERR_MASTER_LOST);
}

static uint64_t min_deadline(uint64_t a, uint64_t b) { return a < b ? a : b; }

static uint64_t timers(eccl_comm *c)
{
    uint64_t now = now_ns(c), next = ECCL_NO_DEADLINE;
    if (c->master_open && c->phase == PHASE_REGISTERING) {
        uint64_t timeout = (uint64_t)c->params.peer_timeout_ms * MS;
        if (now - c->master.last_rx_ns > timeout) {
            master_attempt_failed(c, ECCL_ERR_TIMEOUT);
            master_retry_schedule(c);
        } else {
            next = min_deadline(next, c->master.last_rx_ns + timeout + 1);
        }
    }
    if (c->phase == PHASE_REGISTERING && !c->master_open && c->master_retry_at) {
        if (now >= c->master_deadline) {
            comm_fail(c, ECCL_ERR_CONNECT);
        } else if (now >= c->master_retry_at) {
            c->master_retry_at = 0;
            if (master_open(c) != ECCL_OK) master_retry_schedule(c);
        }
        if (c->master_retry_at) next = min_deadline(next, c->master_retry_at);
    }
    if (c->master_open && c->phase != PHASE_REGISTERING) {
        uint64_t timeout = (uint64_t)c->params.peer_timeout_ms * MS;
        if (now - c->master.last_rx_ns > timeout) {
            ECCL_WARN(c->env, "master silent for %u ms", c->params.peer_timeout_ms);
            comm_fail(c, ECCL_ERR_MASTER_LOST);
            return ECCL_NO_DEADLINE;
        }
        if (now >= c->heartbeat_at) {
            eccl_msg m = {.type = ECCL_MSG_HEARTBEAT};
            comm_master_send(c, &m);
            comm_rates_report(c);
            c->heartbeat_at = now + timeout / 4;
        }
        next = min_deadline(next, min_deadline(c->heartbeat_at, c->master.last_rx_ns + timeout + 1));
    }
    if (c->next_retry_at && !c->frozen && c->world > 1 && !c->link_next) {
        if (now >= c->next_retry_at) {
            c->next_retry_at = 0;
            comm_link_connect_next(c);
        }
        if (c->next_retry_at) next = min_deadline(next, c->next_retry_at);
    }
    for (uint32_t k = 1; c->pslot && k < c->pool_out; k++) {
        struct pool_slot *ps = &c->pslot[k];
        if (!ps->retry_at || ps->next) continue;
        if (now >= ps->retry_at) ps->retry_at = 0; /* comm_ops_pump reopens it when needed */
        else next = min_deadline(next, ps->retry_at);
    }
    for (p2p_link *l; (l = eccl_gate_expired(&c->gate, now)) != NULL;) comm_link_close(c, l);
    next = min_deadline(next, eccl_gate_deadline(&c->gate));
    uint64_t peers_at = comm_peers_timers(c, now);
    if (peers_at) next = min_deadline(next, peers_at);
    if (c->parent_retry_at && !c->frozen && !c->link_tree[ECCL_TREE_PARENT]) {
        if (now >= c->parent_retry_at) {
            c->parent_retry_at = 0;
            comm_link_connect_parent(c);
        }
        if (c->parent_retry_at) next = min_deadline(next, c->parent_retry_at);
    }
    if (c->opt.probing)
        next = min_deadline(next, now < c->opt.stop_ns ? c->opt.stop_ns : c->opt.give_up_ns);
    for (eccl_request *r = c->ops; r; r = r->next) {
        /* One that returned early is the master's to settle if stuck: the
         * caller has its result. */
        if (r->state == OP_DONE || r->returned) continue;
        if (now >= r->deadline_ns) {
            comm_op_timed_out(c, r);
            if (r->state != OP_DONE) next = min_deadline(next, r->deadline_ns);
        } else {
            next = min_deadline(next, r->deadline_ns);
        }
    }
    return next;
}

static uint64_t comm_step(void *owner, void **ready, int n, int *again)
{
    eccl_comm *c = owner;
    for (int i = 0; i < n; i++) {
        int kind = *(int *)ready[i];
        if (kind == ECCL_HANDLE_LISTENER) {
            accept_links(c);
        } else if (ready[i] == &c->master) {
            master_service(c);
        } else {
            comm_link_service(c, ready[i]);
        }
    }
    uint64_t next = timers(c);
    if (c->master_broken) comm_fail(c, ECCL_ERR_MASTER_LOST); /* comm_master_send saw it */
    comm_ops_advance(c);
    *again = 0;
    p2p_link *lists[2] = {c->links, c->side_links};
    for (int k = 0; k < 2; k++) {
        for (p2p_link *l = lists[k], *nx; l; l = nx) {
            nx = l->next;
            if (l->ch.more) comm_link_service(c, l);
            else if (l->ch.out_head) eccl_chan_flush(&l->ch);
            if (l->ch.more) *again = 1;
        }
    }
    comm_ops_advance(c);
    comm_flush_and_complete(c);
    while (c->returned_finished) {
        /* A call queued behind it starts now: nothing else may come to
         * wake us (its peers wait for its frames). */
        c->returned_finished = 0;
        comm_ops_advance(c);
        comm_flush_and_complete(c);
    }
    comm_ops_sweep(c);
    comm_probe_pump(c);
    comm_trace_poll(c);
    return next;
}

static void comm_reap(void *owner)
{
    eccl_comm *c = owner;
    for (p2p_link *l = c->graveyard, *n; l; l = n) {
        n = l->next;
        free(l);
    }
    c->graveyard = NULL;
}

/* Before the engine blocks: the completion tokens that were waiting to
 * ride with the next call's data go now (eccl_chan_send_lazy), since the
 * far end may be waiting for them to finish a call of its own. */
static void comm_idle(void *owner)
{
    eccl_comm *c = owner;
    for (p2p_link *l = c->links; l; l = l->next)
        if (l->ch.lazy_only) eccl_chan_flush_lazy(&l->ch);
}

static const eccl_engine_ops comm_engine_ops = {comm_step, comm_reap, comm_idle};

/* ---- public API ------------------------------------------------------------- */

void eccl_comm_params_init(eccl_comm_params *p)
{
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->p2p_host = NULL; /* ECCL_P2P_HOST, else 127.0.0.1 (eccl_comm_create_with_env) */
    p->p2p_pool_size = 1;
    p->connect_timeout_ms = 10000;
    p->op_timeout_ms = 60000;
    p->peer_timeout_ms = 5000;
}

/* "A,B,...": 1..COMM_MASTER_ADDRS non-empty addresses. */
static eccl_result parse_master_addrs(eccl_comm *c)
{
    const char *a = c->master_addr;
    for (;;) {
        size_t len = strcspn(a, ",");
        if (len == 0 || len >= ECCL_ADDR_MAX || c->n_master_addrs == COMM_MASTER_ADDRS)
            return ECCL_ERR_INVALID_ARG;
        memcpy(c->master_addrs[c->n_master_addrs], a, len);
        c->master_addrs[c->n_master_addrs++][len] = '\0';
        if (!a[len]) return ECCL_OK;
        a += len + 1;
    }
}

eccl_result eccl_comm_create_with_env(eccl_env *env, eccl_env_release_fn release,
                                      const eccl_comm_params *params, eccl_comm **out)
{
    eccl_result rc;
    if (!params || !out || !params->master_addr ||
        strlen(params->master_addr) >= sizeof ((eccl_comm *)0)->master_addr ||
        (params->p2p_host && strlen(params->p2p_host) + 7 >= ECCL_ADDR_MAX)) {
        release(env);
        return ECCL_ERR_INVALID_ARG;
    }
    eccl_comm *c = calloc(1, sizeof *c);
    if (!c) {
        release(env);
        return ECCL_ERR_NO_MEMORY;
    }
    c->env = env;
    c->env_release = release;
    c->params = *params;
    snprintf(c->master_addr, sizeof c->master_addr, "%s", params->master_addr);
    if (parse_master_addrs(c) != ECCL_OK) {
        free(c);
        release(env);
        return ECCL_ERR_INVALID_ARG;
    }
    /* Unset by the caller: ECCL_P2P_HOST (a deployment knob, e.g. one
     * loopback address per emulated host under eccl-emu), else loopback. */
    char host_cfg[ECCL_ADDR_MAX];
    const char *host = params->p2p_host;
    if (!host && eccl_config_get(env, "ECCL_P2P_HOST", host_cfg, sizeof host_cfg) && host_cfg[0]) {
        if (strlen(host_cfg) + 7 < ECCL_ADDR_MAX) host = host_cfg;
        else ECCL_WARN(env, "ECCL_P2P_HOST=%s: too long for an address; using 127.0.0.1", host_cfg);
    }
    snprintf(c->p2p_host, sizeof c->p2p_host, "%s", host ? host : "127.0.0.1");
    c->params.master_addr = c->master_addr;
    c->params.p2p_host = c->p2p_host;
    if (!c->params.connect_timeout_ms) c->params.connect_timeout_ms = 10000;
    if (!c->params.op_timeout_ms) c->params.op_timeout_ms = 60000;
    if (!c->params.peer_timeout_ms) c->params.peer_timeout_ms = 5000;
    if (!c->params.p2p_pool_size) c->params.p2p_pool_size = 1;
    if (c->params.p2p_pool_size > ECCL_WIRE_MAX_POOL) {
        rc = ECCL_ERR_INVALID_ARG;
        goto fail;
    }
    /* ECCL_P2P_POOL overrides the caller's pool size (a deployment knob). */
    c->params.p2p_pool_size = (uint32_t)eccl_config_uint(env, "ECCL_P2P_POOL", 1, ECCL_WIRE_MAX_POOL,
                                                         c->params.p2p_pool_size);
    c->pool_out = c->params.p2p_pool_size;
    /* Small all-reduces and all-gathers return before their completion
     * round (docs/protocol.md, "The commit rule"); 0 turns it off. */
    c->early_max = (size_t)eccl_config_uint(env, "ECCL_EARLY_RETURN_BYTES", 0, ECCL_WIRE_MAX_REPAIR,
                                            ECCL_WIRE_MAX_REPAIR);
    /* Plain all-reduces on device buffers of at least this many bytes run the
     * device-resident ring; smaller ones, quantised ones, and all of them by
     * default, a host mirror (docs/devices.md says why). 0: always the mirror. */
    c->resident_min = (size_t)eccl_config_uint(env, "ECCL_DEVICE_RING_MIN_BYTES", 0, UINT64_MAX >> 1, 0);
    if (c->resident_min && c->resident_min < COMM_RESIDENT_MIN) c->resident_min = COMM_RESIDENT_MIN;
    /* Off, the communicator progresses only inside its calls (as MPI
     * without an async progress thread): one thread less per rank, for
     * applications that call back to back. Between calls nobody answers
     * heartbeats or serves async ops, so a gap longer than the peer
     * timeout costs this peer its membership. */
    c->progress_thread = eccl_config_uint(env, "ECCL_PROGRESS_THREAD", 0, 1, 1) != 0;
    if (c->pool_out > 1 && comm_pool_alloc(c) != ECCL_OK) {
        rc = ECCL_ERR_NO_MEMORY;
        goto fail;
    }
    c->cap_recent = c->cap_aborted = COMM_RING_START;
    c->recent = malloc(c->cap_recent * sizeof *c->recent);
    c->aborted_tags = malloc(c->cap_aborted * sizeof *c->aborted_tags);
    if (!c->recent || !c->aborted_tags) {
        rc = ECCL_ERR_NO_MEMORY;
        goto fail;
    }
    if ((rc = eccl_dispatch_init(&c->dispatch, env)) != ECCL_OK || (rc = eccl_gate_init(&c->gate, env)) != ECCL_OK)
        goto fail;
    comm_trace_init(c);
    comm_late_init(c);
    c->net_wire_time = eccl_net_has_wire_time(env);
    comm_stats_init(c);
    c->listener.kind = ECCL_HANDLE_LISTENER;
    eccl_bufpool_init(&c->pool, env);
    eccl_bufpool_init(&c->states, NULL);
    ECCL_CHECK(env, eccl_engine_init(&c->eng, env, &comm_engine_ops, c));
    *out = c;
    return ECCL_OK;
fail:
    free(c->recent);
    free(c->aborted_tags);
    free(c->pslot);
    comm_peers_free(c);
    eccl_dispatch_free(&c->dispatch);
    eccl_gate_free(&c->gate);
    free(c);
    release(env);
    return rc;
}

static int connect_done(void *arg)
{
    eccl_comm *c = arg;
    return c->phase == PHASE_FAILED || (c->phase == PHASE_ACCEPTED && c->ring_ready);
}

eccl_result eccl_comm_connect(eccl_comm *c)
{
    if (!c) return ECCL_ERR_INVALID_ARG;
    eccl_result rc = ECCL_OK;
    eccl_engine_lock(&c->eng);
    if (c->phase == PHASE_NEW) {
        char addr[ECCL_ADDR_MAX + 4];
        snprintf(addr, sizeof addr, "%s:0", c->p2p_host);
        ECCL_CHECK(c->env, c->env->net->listen(c->env->net_ctx, addr, &c->listener,
                                               &c->listener.l, c->p2p_addr));
        c->phase = PHASE_REGISTERING;
        c->master_deadline = now_ns(c) + (uint64_t)c->params.connect_timeout_ms * MS;
        rc = master_open(c);
        if (rc != ECCL_OK) {
            if (rc != ECCL_ERR_CONNECT) goto fail;
            master_retry_schedule(c);
        }
        if (c->progress_thread) ECCL_CHECK(c->env, eccl_engine_start(&c->eng, "eccl-comm"));
    }
    rc = eccl_engine_drive(&c->eng, connect_done, c,
                           now_ns(c) + (uint64_t)c->params.op_timeout_ms * MS);
    if (c->phase == PHASE_FAILED) rc = c->fatal;
fail:
    eccl_engine_unlock(&c->eng);
    return rc;
}

eccl_result comm_usable(const eccl_comm *c)
{
    if (c->phase == PHASE_FAILED) return c->fatal;
    if (c->phase != PHASE_ACCEPTED) return ECCL_ERR_NOT_CONNECTED;
    /* Left together: the others may be gone, and a call would wait for
     * them until op_timeout_ms. */
    if (c->left && c->leave_result == ECCL_OK) return ECCL_ERR_CLOSED;
    return ECCL_OK;
}

typedef struct topo_wait {
    eccl_comm *c;
    uint64_t target;
} topo_wait;

static int topo_done(void *arg)
{
    topo_wait *w = arg;
    return w->c->phase == PHASE_FAILED || (w->c->topo_done_seen >= w->target && w->c->ring_ready);
}

eccl_result eccl_comm_update_topology(eccl_comm *c)
{
    if (!c) return ECCL_ERR_INVALID_ARG;
    eccl_engine_lock(&c->eng);
    eccl_result rc = comm_usable(c);
    /* never mid-collective, never mid-sync */
    if (rc == ECCL_OK) comm_ops_settle_returned(c);
    if (rc == ECCL_OK && (c->n_ops > 0 || c->sync.active)) rc = ECCL_ERR_BUSY;
    if (rc == ECCL_OK) {
        topo_wait w = {c, c->topo_done_seen + 1};
        eccl_msg m = {.type = ECCL_MSG_TOPO_VOTE};
        rc = comm_master_send(c, &m);
        eccl_engine_kick(&c->eng);
        if (rc == ECCL_OK)
            rc = eccl_engine_drive(&c->eng, topo_done, &w,
                                   now_ns(c) + (uint64_t)c->params.op_timeout_ms * MS);
        if (c->phase == PHASE_FAILED) rc = c->fatal;
        c->seen_world = 0; /* newcomers may have joined: the caller knows */
    }
    eccl_engine_unlock(&c->eng);
    return rc;
}

typedef struct pending_wait {
    eccl_comm *c;
    uint64_t target;
} pending_wait;

static int pending_done(void *arg)
{
    pending_wait *w = arg;
    return w->c->phase == PHASE_FAILED || w->c->pending_replies >= w->target;
}

eccl_result eccl_comm_peers_pending(eccl_comm *c, uint32_t *pending)
{
    if (!c || !pending) return ECCL_ERR_INVALID_ARG;
    eccl_engine_lock(&c->eng);
    eccl_result rc = comm_usable(c);
    if (rc == ECCL_OK && c->sync.active) rc = ECCL_ERR_BUSY;
    if (rc == ECCL_OK) {
        /* A query whose call timed out is still the master's (it answers
         * once every member asked): wait for that answer, never ask twice
         * (a second query while one is out breaks the protocol). */
        if (c->pending_asked == c->pending_replies) {
            eccl_msg m = {.type = ECCL_MSG_PENDING_QUERY};
            rc = comm_master_send(c, &m);
            if (rc == ECCL_OK) c->pending_asked++;
        }
        pending_wait w = {c, c->pending_asked};
        eccl_engine_kick(&c->eng);
        if (rc == ECCL_OK)
            rc = eccl_engine_drive(&c->eng, pending_done, &w,
                                   now_ns(c) + (uint64_t)c->params.op_timeout_ms * MS);
        if (c->phase == PHASE_FAILED) rc = c->fatal;
        if (rc == ECCL_OK) *pending = c->pending_value;
    }
    eccl_engine_unlock(&c->eng);
    return rc;
}

static int leave_decided(void *arg)
{
    const eccl_comm *c = arg;
    return c->left || c->phase == PHASE_FAILED;
}

eccl_result eccl_comm_leave(eccl_comm *c)
{
    if (!c) return ECCL_ERR_INVALID_ARG;
    eccl_engine_lock(&c->eng);
    eccl_result rc = comm_usable(c);
    /* The vote promises the others that nothing of ours is still needed:
     * not with an op in flight, nor twice. */
    if (rc == ECCL_OK) comm_ops_settle_returned(c);
    for (eccl_request *r = c->ops; rc == ECCL_OK && r; r = r->next)
        if (r->state != OP_DONE) rc = ECCL_ERR_BUSY;
    if (rc == ECCL_OK && (c->sync.active || c->leaving)) rc = ECCL_ERR_BUSY;
    if (rc == ECCL_OK) {
        comm_stats_flush(c); /* the last counts before the vote */
        eccl_msg m = {.type = ECCL_MSG_LEAVE};
        c->leaving = 1;
        c->left = 0;
        rc = comm_master_send(c, &m);
        eccl_engine_kick(&c->eng);
    }
    if (rc == ECCL_OK) {
        rc = eccl_engine_drive(&c->eng, leave_decided, c,
                               now_ns(c) + (uint64_t)c->params.op_timeout_ms * MS);
        if (rc == ECCL_OK) rc = c->leave_result;
    }
    if (c->phase == PHASE_FAILED) rc = c->fatal;
    eccl_engine_unlock(&c->eng);
    return rc;
}

static int view_settled(void *arg)
{
    const eccl_comm *c = arg;
    return !c->frozen || c->phase == PHASE_FAILED;
}

void comm_wait_view(eccl_comm *c)
{
    if (c->frozen)
        eccl_engine_drive(&c->eng, view_settled, c, now_ns(c) + (uint64_t)c->params.op_timeout_ms * MS);
}

eccl_result eccl_comm_get_attr(eccl_comm *c, eccl_attr attr, int64_t *value)
{
    if (!c || !value) return ECCL_ERR_INVALID_ARG;
    eccl_result rc = ECCL_OK;
    eccl_engine_lock(&c->eng);
    /* The ring's attributes are those of the ring calls will run on: a
     * caller that just saw ECCL_ERR_PEER_LOST lays out its retry by them. */
    if (attr == ECCL_ATTR_RANK || attr == ECCL_ATTR_WORLD_SIZE || attr == ECCL_ATTR_EPOCH ||
        attr == ECCL_ATTR_HOST_RANKS)
        comm_wait_view(c);
    if (attr == ECCL_ATTR_RANK || attr == ECCL_ATTR_WORLD_SIZE || attr == ECCL_ATTR_EPOCH) {
        c->seen_world = c->world; /* the caller's send and receive peers are named by it now */
        c->seen_rank = c->rank;
    }
    switch (attr) {
    case ECCL_ATTR_RANK: *value = c->rank; break;
    case ECCL_ATTR_WORLD_SIZE: *value = c->world; break;
    case ECCL_ATTR_PEER_ID: *value = (int64_t)c->peer_id; break;
    case ECCL_ATTR_EPOCH: *value = c->epoch; break;
    case ECCL_ATTR_HOST_RANKS: *value = c->host_ranks; break;
    case ECCL_ATTR_SLOW_PEER: *value = (int64_t)c->slow_peer; break;
    case ECCL_ATTR_SLOW_LINK_FROM: *value = (int64_t)c->slow_link_from; break;
    case ECCL_ATTR_SLOW_LINK_TO: *value = (int64_t)c->slow_link_to; break;
    case ECCL_ATTR_P2P_POOL: *value = c->pool_out; break;
    case ECCL_ATTR_RING_LINKS:
        *value = c->link_next != NULL;
        for (uint32_t k = 1; c->pslot && k < c->pool_out; k++) *value += c->pslot[k].next != NULL;
        break;
    default: rc = ECCL_ERR_INVALID_ARG;
    }
    eccl_engine_unlock(&c->eng);
    return rc;
}

/* ---- notices (eccl_comm_notify) ---------------------------------------------- */

#define COMM_NOTICES_MAX 4096u

void comm_on_notice(eccl_comm *c, const eccl_msg_notice *m)
{
    if (c->n_notices == c->cap_notices) {
        uint32_t cap = c->cap_notices ? 2 * c->cap_notices : 8;
        eccl_notice *t = cap <= COMM_NOTICES_MAX ? realloc(c->notices, cap * sizeof *t) : NULL;
        if (!t) {
            if (eccl_auth_log_due(++c->notices_dropped))
                ECCL_WARN(c->env, "%llu notices dropped: %u wait untaken (eccl_comm_notices)",
                          (unsigned long long)c->notices_dropped, c->n_notices);
            return;
        }
        c->notices = t;
        c->cap_notices = cap;
    }
    c->notices[c->n_notices++] = (eccl_notice){m->word, m->from, m->epoch, (int)m->reform};
}

eccl_result eccl_comm_notify(eccl_comm *c, uint64_t word, int flags)
{
    if (!c || (flags & ~ECCL_NOTIFY_REFORM)) return ECCL_ERR_INVALID_ARG;
    eccl_engine_lock(&c->eng);
    eccl_result rc = comm_usable(c);
    if (rc == ECCL_OK) {
        eccl_msg m = {.type = ECCL_MSG_NOTICE_POST};
        m.u.notice.word = word;
        m.u.notice.epoch = c->epoch;
        m.u.notice.reform = (flags & ECCL_NOTIFY_REFORM) != 0;
        rc = comm_master_send(c, &m);
        eccl_engine_kick(&c->eng);
    }
    eccl_engine_unlock(&c->eng);
    return rc;
}

eccl_result eccl_comm_notices(eccl_comm *c, eccl_notice *out, size_t max, size_t *n)
{
    if (!c || !n || (max && !out)) return ECCL_ERR_INVALID_ARG;
    eccl_engine_lock(&c->eng);
    size_t k = c->n_notices < max ? c->n_notices : max;
    memcpy(out, c->notices, k * sizeof *out);
    memmove(c->notices, c->notices + k, (c->n_notices - k) * sizeof *c->notices);
    c->n_notices -= (uint32_t)k;
    *n = k;
    eccl_engine_unlock(&c->eng);
    return ECCL_OK;
}

eccl_result eccl_comm_pin_epoch(eccl_comm *c, uint64_t epoch)
{
    if (!c) return ECCL_ERR_INVALID_ARG;
    eccl_engine_lock(&c->eng);
    c->call_epoch = epoch;
    eccl_engine_unlock(&c->eng);
    return ECCL_OK;
}

void eccl_comm_destroy(eccl_comm *c)
{
    if (!c) return;
    /* Calls that returned early finish their completion round first: the
     * others may still need our tokens or our copy of the result, and
     * leaving now would be a loss to them. */
    eccl_engine_lock(&c->eng);
    if (c->phase != PHASE_FAILED) comm_ops_settle_returned(c);
    eccl_engine_unlock(&c->eng);
    if (c->eng.thread) eccl_engine_stop(&c->eng);
    comm_ops_fail_all(c, ECCL_ERR_CLOSED);
    for (eccl_request *r = c->ops, *n; r; r = n) {
        n = r->next;
        eccl_stage_end(&r->stage, ECCL_ERR_CLOSED); /* frees a mirror never waited for */
        comm_request_free(c, r);
    }
    if (c->master_open) {
        comm_stats_flush(c);
        eccl_chan_flush(&c->master);
        eccl_chan_close(&c->master);
    }
    if (c->listener.l) c->env->net->close_listener(c->env->net_ctx, c->listener.l);
    comm_reap(c);
    comm_records_free(c); /* their bytes go back to the pool first */
    eccl_bufpool_fini(&c->pool);
    eccl_bufpool_fini(&c->states);
    eccl_engine_fini(&c->eng);
    c->env_release(c->env);
    free(c->notices);
    free(c->recent);
    free(c->aborted_tags);
    free(c->pslot);
    comm_peers_free(c);
    eccl_dispatch_free(&c->dispatch);
    eccl_gate_free(&c->gate);
    eccl_trace_free(&c->trace);
    free(c);
}
