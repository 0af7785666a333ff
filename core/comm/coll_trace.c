/* The communicator's collective trace (core/trace/trace.h): a record per
 * call, its phases as the op reaches them, one per ring epoch, and the
 * dump (docs/trace.md) with what each unfinished call still waits for. */
#include <inttypes.h>

#include "comm/comm_internal.h"

/* The env's count of asks from outside (eccl_trace_ops.asked), or 0. */
static uint64_t asks(const eccl_comm *c)
{
    const eccl_trace_ops *t = c->env->trace;
    if (!t || t->size < offsetof(eccl_trace_ops, asked) + sizeof t->asked || !t->asked) return 0;
    return t->asked(c->env->trace_ctx);
}

void comm_trace_init(eccl_comm *c)
{
    eccl_trace_init(&c->trace, (uint32_t)eccl_config_uint(c->env, "ECCL_TRACE_RECORDS", 0, 1u << 20,
                                                          ECCL_TRACE_RECORDS));
    c->trace_asks = asks(c); /* asks before this comm existed are not for it */
}

void comm_trace_poll(eccl_comm *c)
{
    uint64_t a = asks(c);
    if (a == c->trace_asks) return;
    c->trace_asks = a;
    comm_trace_dump(c, "signal", 0);
}

static uint64_t call_bytes(const eccl_coll_call *call)
{
    return (uint64_t)call->count * eccl_dtype_size(call->dtype);
}

void comm_trace_post(eccl_comm *c, eccl_request *r, uint64_t now)
{
    eccl_trace_rec *t = eccl_trace_add(&c->trace, ECCL_TRACE_CALL);
    if (!t) return;
    r->trace_seq = t->seq;
    t->tag = r->call.tag;
    t->coll = (uint8_t)r->call.kind;
    t->algo = UINT8_MAX;
    t->dtype = (uint8_t)r->call.dtype;
    t->bytes = call_bytes(&r->call);
    t->epoch = (int64_t)c->epoch;
    t->rank = c->rank;
    t->world = c->world;
    t->posted_ns = now;
}

void comm_trace_phase(eccl_comm *c, const eccl_request *r, enum comm_trace_phase phase, uint64_t now)
{
    eccl_trace_rec *t = r->trace_seq ? eccl_trace_find(&c->trace, r->trace_seq) : NULL;
    if (!t) return;
    uint32_t *at = phase == TRACE_STARTED ? &t->started_us
                   : phase == TRACE_FIRST ? &t->first_us
                   : phase == TRACE_DATA  ? &t->data_us
                                          : &t->end_us;
    if (*at) return; /* the first time counts */
    if (!now) now = phase == TRACE_STARTED && c->trace_now ? c->trace_now : now_ns(c);
    *at = eccl_trace_since(t, now);
    if (phase == TRACE_STARTED) {
        t->algo = r->alg ? (uint8_t)r->alg->id : UINT8_MAX;
        t->epoch = (int64_t)r->call.epoch;
        t->rank = r->call.rank;
        t->world = r->call.nranks;
    } else if (phase == TRACE_END) {
        t->result = (int8_t)r->result;
        if (!t->data_us && r->result == ECCL_OK) t->data_us = *at;
    }
}

void comm_trace_epoch(eccl_comm *c)
{
    eccl_trace_rec *t = eccl_trace_add(&c->trace, ECCL_TRACE_EPOCH);
    if (!t) return;
    t->epoch = (int64_t)c->epoch;
    t->rank = c->rank;
    t->world = c->world;
    t->posted_ns = now_ns(c);
}

/* An op whose algorithm ran and that has not ended: running, frozen by a
 * view change, or failing right now (comm_op_finish dumps before it ends). */
static int unfinished(const eccl_request *r)
{
    return r->started && r->state != OP_DONE && r->state != OP_QUEUED;
}

/* "wait" lines: the links each unfinished op still expects frames over. */
static void format_waits(const eccl_comm *c, char *buf, size_t len, size_t *used)
{
    static const char *const fixed[ECCL_ROLE_COUNT] = {"prev", "next", "parent", "child0", "child1",
                                                      "child2", "child3"};
    for (const eccl_request *r = c->ops; r; r = r->next) {
        if (!unfinished(r)) continue;
        uint32_t n = comm_op_waits(c, r, NULL, 0);
        eccl_trace_wait *w = n ? malloc(n * sizeof *w) : NULL;
        if (!w) continue;
        n = comm_op_waits(c, r, w, n);
        for (uint32_t i = 0; i < n; i++) {
            char role[16];
            if (w[i].role < ECCL_ROLE_COUNT) snprintf(role, sizeof role, "%s", fixed[w[i].role]);
            else snprintf(role, sizeof role, "peer");
            size_t room = len > *used ? len - *used : 0;
            int k = snprintf(buf + *used, room,
                             "wait tag=%" PRIu64 " epoch=%" PRIu32 " role=%s rank=%" PRIu32 " peer=%" PRIu64
                             " returned=%d\n",
                             r->call.tag, r->call.epoch, role, w[i].rank, w[i].peer_id, r->returned);
            if (k > 0 && (size_t)k < room) *used += (size_t)k;
        }
        free(w);
    }
    /* "link" lines: a link with frames we could not write yet, frames
     * kept aside for calls not made here yet, or a frame held in the
     * connection, unread, until its call is made (what a peer's call may
     * wait behind); or one whose rate in is measured (rates.c). */
    for (const p2p_link *l = c->links; l; l = l->next) {
        /* Its rate in: since it opened, and over the last window told to
         * the master (rates.c); 0 where it does not count. */
        int counts = comm_rate_counts(c, l);
        if (!l->ch.out_head && !l->early && !l->ch.held && !counts) continue;
        int role = comm_link_role(c, l);
        char name[16];
        if (role >= 0 && role < ECCL_ROLE_COUNT) snprintf(name, sizeof name, "%s", fixed[role]);
        else snprintf(name, sizeof name, ECCL_ROLE_IS_PEER(role) ? "peer" : "none");
        char held[48] = "-";
        if (l->ch.held) snprintf(held, sizeof held, "%" PRIu64 " held_bytes=%" PRIu32, l->ch.data.tag, l->ch.data.len);
        size_t room = len > *used ? len - *used : 0;
        int k = snprintf(buf + *used, room,
                         "link peer=%" PRIu64 " role=%s rank=%" PRIu32 " queued=%zu lazy=%d early=%zu held_tag=%s"
                         " rx_bytes=%" PRIu64 " rx_us=%" PRIu64 " win_bytes=%" PRIu64 " win_us=%" PRIu64 "\n",
                         l->peer_id, name, ECCL_ROLE_IS_PEER(role) ? ECCL_ROLE_PEER_RANK(role) : UINT32_MAX,
                         l->ch.queued_bytes, l->ch.lazy_only, l->early_bytes, held, counts ? l->rx_bytes : 0,
                         counts ? l->rx_ns / 1000 : 0, counts ? l->rx_win_bytes : 0, counts ? l->rx_win_ns / 1000 : 0);
        if (k > 0 && (size_t)k < room) *used += (size_t)k;
    }
}

/* One word of `why`: what the reader greps for. */
static void word_of(const char *why, char out[64])
{
    size_t i = 0;
    for (; why && why[i] && i < 63; i++)
        out[i] = (why[i] == ' ' || why[i] == '\t' || why[i] == '\n' || why[i] == '=') ? '_' : why[i];
    out[i] = 0;
    if (!i) snprintf(out, 64, "asked");
}

eccl_result comm_trace_dump(eccl_comm *c, const char *why, int automatic)
{
    if (!c->env->trace || c->env->trace->size < offsetof(eccl_trace_ops, dump) + sizeof c->env->trace->dump ||
        !c->env->trace->dump)
        return ECCL_ERR_UNSUPPORTED;
    /* Room for every record (a call line is at most ~400 bytes) and every
     * wait line (at most ~96). */
    size_t waits = 0, used = 0;
    for (const eccl_request *r = c->ops; r; r = r->next)
        if (unfinished(r)) waits += comm_op_waits(c, r, NULL, 0);
    for (p2p_link *l = c->links; l; l = l->next) waits += 3, comm_rate_measured(c, l);
    size_t len = 1024 + (size_t)c->trace.n * 420 + waits * 96;
    char *buf = malloc(len), w[64];
    if (!buf) return ECCL_ERR_NO_MEMORY;
    word_of(why, w);
    int k = snprintf(buf, len,
                     "eccl-trace %d\ncomm peer=%" PRIu64 " rank=%" PRIu32 " world=%" PRIu32 " epoch=%" PRIu64
                     " now_ns=%" PRIu64 " records=%" PRIu32 " dropped=%" PRIu64 " why=%s\n",
                     ECCL_TRACE_VERSION, c->peer_id, c->rank, c->world, (uint64_t)c->epoch, now_ns(c), c->trace.n,
                     c->trace.next_seq - 1 - c->trace.n, w);
    used = k > 0 ? (size_t)k : 0;
    eccl_trace_format(&c->trace, 0, buf, len - 8, &used);
    format_waits(c, buf, len - 8, &used);
    used += (size_t)snprintf(buf + used, len - used, "end\n");
    eccl_result rc = c->env->trace->dump(c->env->trace_ctx, c->peer_id, ++c->trace_dumps, automatic, buf, used);
    free(buf);
    return rc;
}

eccl_result eccl_comm_trace_dump(eccl_comm *c, const char *why)
{
    if (!c) return ECCL_ERR_INVALID_ARG;
    eccl_engine_lock(&c->eng);
    eccl_result rc = comm_trace_dump(c, why, 0);
    eccl_engine_unlock(&c->eng);
    return rc;
}
