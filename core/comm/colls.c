/* The collectives' public API: arguments, device staging, submission,
 * blocking and async completion. */
#include "comm/comm_internal.h"

/* ---- collectives: submitting a call ------------------------------------------- */

/* Mutex held. Queues `call` (arguments already checked), made when the
 * world was `world` and we were `rank` (the layout the caller meant), and
 * starts it if it can. `barrier`: the call is a barrier's one-byte
 * all-reduce on the request's own bytes. `kick`: wake the background
 * poller so it takes the new op into account; a blocking call that drives
 * progress itself skips that. */
static eccl_result coll_submit(eccl_comm *c, const eccl_coll_call *call, uint32_t world,
                               uint32_t rank, const eccl_stage *stage, int barrier, int kick,
                               eccl_request **out)
{
    eccl_result rc = comm_usable(c);
    if (rc != ECCL_OK) return rc;
    int p2p = call->kind == ECCL_COLL_SEND || call->kind == ECCL_COLL_RECV;
    if ((call->tag & ECCL_P2P_TAG_BIT) && !p2p) return ECCL_ERR_INVALID_ARG; /* reserved (coll/p2p.h) */
    if (c->sync.active) return ECCL_ERR_BUSY; /* shared-state sync of this group */
    /* A call of the tag may only still be finishing behind its caller. */
    for (const eccl_request *o = c->ops; o; o = o->next)
        if (o->call.tag == call->tag && !comm_op_user_done(o)) return ECCL_ERR_BUSY;
    if (c->n_ops >= ECCL_WIRE_MAX_OPS) return ECCL_ERR_BUSY;
    eccl_request *r = calloc(1, sizeof *r);
    if (!r) return ECCL_ERR_NO_MEMORY;
    r->comm = c;
    r->call = *call;
    if (!r->call.ring_epoch) r->call.ring_epoch = c->call_epoch; /* op_start's pin */
    r->call.on_device = stage->resident;
    r->call.device = stage->device;
    if (barrier) {
        r->call.sendbuf = &r->barrier_buf[0];
        r->call.recvbuf = &r->barrier_buf[1];
    }
    r->called_world = world;
    r->called_rank = rank;
    r->stage = *stage;
    r->state = OP_QUEUED;
    uint64_t now = now_ns(c);
    r->deadline_ns = now + (uint64_t)c->params.op_timeout_ms * MS;
    r->posted_ns = now;
    r->gap_ns = c->returned_ns && now > c->returned_ns ? now - c->returned_ns : 0;
    comm_trace_post(c, r, now);
    r->next = c->ops;
    c->ops = r;
    c->n_ops++;
    if (comm_aborted_take(c, call->tag)) {
        r->call.nranks = c->world;
        comm_op_finish(c, r, ECCL_ERR_PEER_LOST);
    } else if (call->count == 0 && !call->svcounts) {
        /* (An all-to-allv with nothing for us still owes its peers the
         * done tokens they wait for.) */
        r->call.nranks = c->world;
        comm_op_finish(c, r, c->world < 2 ? ECCL_ERR_TOO_FEW_PEERS : ECCL_OK);
    } else {
        c->trace_now = now; /* an op started here starts now: no clock read for its trace */
        comm_ops_advance(c);
        c->trace_now = 0;
        comm_flush_and_complete(c);
    }
    if (kick) eccl_engine_kick(&c->eng);
    *out = r;
    return ECCL_OK;
}

/* ---- all-reduce ---------------------------------------------------------- */

/* Whether the caller's options struct holds `field` (it may predate it):
 * fields past its end keep their defaults. */
#define OPTS_HAS(o, field) \
    ((o) != NULL && (o)->size >= offsetof(eccl_allreduce_opts, field) + sizeof(o)->field)

/* The quantisation an options struct asks for, if the call can take it. */
static eccl_result quant_check(const eccl_comm *c, const eccl_allreduce_opts *opts, eccl_dtype dtype, eccl_op op,
                               eccl_quant_type *quant)
{
    if (opts && !OPTS_HAS(opts, quant)) return ECCL_ERR_INVALID_ARG;
    *quant = OPTS_HAS(opts, quant) ? opts->quant : ECCL_QUANT_NONE;
    if (*quant == ECCL_QUANT_NONE) return ECCL_OK;
    if (*quant != ECCL_QUANT_MINMAX_U8 && *quant != ECCL_QUANT_AFFINE_U8) return ECCL_ERR_INVALID_ARG;
    if (op != ECCL_SUM && op != ECCL_AVG) return ECCL_ERR_INVALID_ARG;
    if (dtype == ECCL_F64) return ECCL_ERR_UNSUPPORTED;
    if (dtype != ECCL_F32 && dtype != ECCL_F16 && dtype != ECCL_BF16) return ECCL_ERR_INVALID_ARG;
    /* The quantiser reads and writes tensor bytes itself: phantom memory
     * has none (its staging would be phantom too). */
    return eccl_dev_has_phantom(c->env) ? ECCL_ERR_UNSUPPORTED : ECCL_OK;
}

/* Mutex held. `kick`: wake the background poller so it takes the new op
 * into account; a blocking call that drives progress itself skips that. */
static eccl_result allreduce_submit(eccl_comm *c, const void *sendbuf, void *recvbuf,
                                    size_t count, eccl_dtype dtype, eccl_op op,
                                    uint64_t tag, const eccl_allreduce_opts *opts,
                                    const eccl_stage *stage, int kick, eccl_request **out)
{
    if ((unsigned)dtype >= ECCL_DTYPE_COUNT || (unsigned)op >= ECCL_OP_COUNT)
        return ECCL_ERR_INVALID_ARG;
    eccl_quant_type quant;
    eccl_result rc = quant_check(c, opts, dtype, op, &quant);
    if (rc != ECCL_OK) return rc;
    if (count && (!sendbuf || !recvbuf)) return ECCL_ERR_INVALID_ARG;
    if (count > SIZE_MAX / 16 / eccl_dtype_size(dtype)) return ECCL_ERR_INVALID_ARG;
    eccl_coll_call call = {.kind = ECCL_COLL_ALLREDUCE, .tag = tag, .sendbuf = sendbuf,
                           .recvbuf = recvbuf, .count = count, .dtype = dtype, .op = op,
                           .quant = quant, .ring_epoch = OPTS_HAS(opts, ring_epoch) ? opts->ring_epoch : 0};
    return coll_submit(c, &call, c->world, c->rank, stage, 0, kick, out);
}

static int request_done(void *arg) { return comm_op_user_done(arg); }


/* Frees a finished request; *stage gets its staging, to be ended by the
 * caller once the engine's mutex is released (the copy to the device may
 * take a while, and must not hold up other ops' progress). */
static eccl_result request_reap(eccl_request *r, eccl_reduce_info *info, eccl_stage *stage)
{
    eccl_result rc = r->result;
    if (rc == ECCL_ERR_PEER_LOST) r->comm->seen_world = 0; /* the caller now knows */
    *stage = r->stage;
    if (info) {
        memset(info, 0, sizeof *info);
        info->world_size = r->call.nranks;
        if (r->alg) {
            info->algorithm = r->alg->id;
            r->alg->bytes(op_state(r), &info->tx_bytes, &info->rx_bytes);
        }
    }
    if (r->state != OP_DONE) {
        /* Returned early: its round finishes behind the caller, who is done
         * with it; comm_ops_sweep frees it then. */
        r->orphan = 1;
        memset(&r->stage, 0, sizeof r->stage);
        return rc;
    }
    comm_op_unlink(r->comm, r);
    comm_request_free(r->comm, r);
    return rc;
}

eccl_result eccl_allreduce_async(eccl_comm *c, const void *sendbuf, void *recvbuf,
                                 size_t count, eccl_dtype dtype, eccl_op op,
                                 uint64_t tag, eccl_request **req)
{
    return eccl_allreduce_ex_async(c, sendbuf, recvbuf, count, dtype, op, tag, NULL, req);
}

/* Mutex held: drives progress until the op is done (it enforces its own
 * deadline), then frees it. */
static eccl_result request_finish(eccl_comm *c, eccl_request *r, eccl_reduce_info *info,
                                  eccl_stage *stage)
{
    eccl_engine_drive(&c->eng, request_done, r, ECCL_NO_DEADLINE);
    if (!comm_op_user_done(r)) comm_op_finish(c, r, c->phase == PHASE_FAILED ? c->fatal : ECCL_ERR_CLOSED);
    return request_reap(r, info, stage);
}

eccl_result eccl_wait(eccl_request *r, eccl_reduce_info *info)
{
    if (!r) return ECCL_ERR_INVALID_ARG;
    eccl_comm *c = r->comm;
    eccl_stage stage;
    eccl_engine_lock(&c->eng);
    eccl_result rc = request_finish(c, r, info, &stage);
    eccl_engine_unlock(&c->eng);
    return eccl_stage_end(&stage, rc);
}

eccl_result eccl_test(eccl_request *r, int *done, eccl_reduce_info *info)
{
    if (!r || !done) return ECCL_ERR_INVALID_ARG;
    eccl_comm *c = r->comm;
    eccl_stage stage = {0};
    eccl_engine_lock(&c->eng);
    /* Nobody else moves the op forward: this test does, one look a call. */
    if (!c->progress_thread && !comm_op_user_done(r)) eccl_engine_poll_once(&c->eng);
    *done = comm_op_user_done(r);
    eccl_result rc = *done ? request_reap(r, info, &stage) : ECCL_OK;
    eccl_engine_unlock(&c->eng);
    return eccl_stage_end(&stage, rc);
}

eccl_result eccl_allreduce(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                           eccl_dtype dtype, eccl_op op, uint64_t tag,
                           eccl_reduce_info *info)
{
    return eccl_allreduce_ex(c, sendbuf, recvbuf, count, dtype, op, tag, NULL, info);
}

void eccl_allreduce_opts_init(eccl_allreduce_opts *opts)
{
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    opts->size = sizeof *opts;
    opts->quant = ECCL_QUANT_NONE;
    opts->stream = NULL;
}

/* Before the engine's mutex: device buffers are swapped for a host mirror
 * holding the input (stage.h). The copy may take a while, and must not hold
 * up other ops' progress. Arguments the submit would refuse are left to it. */
static eccl_result allreduce_stage(eccl_comm *c, const void **sendbuf, void **recvbuf,
                                   size_t count, eccl_dtype dtype, const eccl_allreduce_opts *opts,
                                   eccl_stage *stage)
{
    void *stream = OPTS_HAS(opts, stream) ? opts->stream : NULL;
    size_t es = eccl_dtype_size(dtype);
    if (!es || !count || !*sendbuf || !*recvbuf || count > SIZE_MAX / 16 / es) {
        memset(stage, 0, sizeof *stage);
        return ECCL_OK;
    }
    eccl_quant_type quant = OPTS_HAS(opts, quant) ? opts->quant : ECCL_QUANT_NONE;
    return eccl_stage_begin_resident(stage, c->env, sendbuf, recvbuf, count * es, stream,
                                     quant == ECCL_QUANT_NONE ? c->resident_min : 0);
}

eccl_result eccl_allreduce_ex_async(eccl_comm *c, const void *sendbuf, void *recvbuf,
                                    size_t count, eccl_dtype dtype, eccl_op op, uint64_t tag,
                                    const eccl_allreduce_opts *opts, eccl_request **req)
{
    if (!c || !req) return ECCL_ERR_INVALID_ARG;
    eccl_stage stage;
    eccl_result rc = allreduce_stage(c, &sendbuf, &recvbuf, count, dtype, opts, &stage);
    if (rc != ECCL_OK) return rc;
    eccl_engine_lock(&c->eng);
    rc = allreduce_submit(c, sendbuf, recvbuf, count, dtype, op, tag, opts, &stage, 1, req);
    eccl_engine_unlock(&c->eng);
    if (rc != ECCL_OK) eccl_stage_end(&stage, rc);
    return rc;
}

eccl_result eccl_allreduce_ex(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                              eccl_dtype dtype, eccl_op op, uint64_t tag,
                              const eccl_allreduce_opts *opts, eccl_reduce_info *info)
{
    if (!c) return ECCL_ERR_INVALID_ARG;
    eccl_request *r = NULL;
    eccl_stage stage;
    eccl_result rc = allreduce_stage(c, &sendbuf, &recvbuf, count, dtype, opts, &stage);
    if (rc != ECCL_OK) return rc;
    eccl_engine_lock(&c->eng);
    eccl_result sub = allreduce_submit(c, sendbuf, recvbuf, count, dtype, op, tag, opts, &stage, 0, &r);
    if (sub == ECCL_OK) {
        rc = request_finish(c, r, info, &stage); /* the request hands its stage back */
    } else {
        rc = sub;
    }
    eccl_engine_unlock(&c->eng);
    return eccl_stage_end(&stage, rc);
}

/* ---- all-gather, reduce-scatter, broadcast, reduce, barrier ------------------- */

/* Checks a layout-bound call against the world it is made in. */
static eccl_result coll_check(const eccl_coll_call *call, uint32_t world, uint32_t rank)
{
    int reducing = call->kind == ECCL_COLL_REDUCE_SCATTER || call->kind == ECCL_COLL_REDUCE;
    if ((unsigned)call->dtype >= ECCL_DTYPE_COUNT || (reducing && (unsigned)call->op >= ECCL_OP_COUNT))
        return ECCL_ERR_INVALID_ARG;
    int p2p = call->kind == ECCL_COLL_SEND || call->kind == ECCL_COLL_RECV;
    int rooted = call->kind == ECCL_COLL_BROADCAST || call->kind == ECCL_COLL_REDUCE || p2p;
    if (rooted && call->root >= world) return ECCL_ERR_INVALID_ARG;
    if (p2p && call->root == rank) return ECCL_ERR_INVALID_ARG; /* no send to oneself */
    /* Blocks of world * count elements must stay far from overflow (the v
     * layouts were checked as they were read). */
    if (!call->vcounts && call->count > SIZE_MAX / 16 / eccl_dtype_size(call->dtype) / (world ? world : 1))
        return ECCL_ERR_INVALID_ARG;
    if (!call->count) return ECCL_OK;
    int root = rank == call->root;
    int need_in = call->kind == ECCL_COLL_SEND || (call->kind != ECCL_COLL_BROADCAST && call->kind != ECCL_COLL_RECV) || root;
    int need_out = call->kind == ECCL_COLL_RECV || (call->kind != ECCL_COLL_REDUCE && call->kind != ECCL_COLL_SEND) || root;
    return (need_in && !call->sendbuf) || (need_out && !call->recvbuf) ? ECCL_ERR_INVALID_ARG : ECCL_OK;
}

/* Where input and output sit in a device call's host mirror: the layouts
 * of eccl.h, so the call runs on the mirror as if in place. */
static eccl_stage_layout coll_layout(const eccl_coll_call *call, uint32_t world, uint32_t rank)
{
    size_t es = eccl_dtype_size(call->dtype), b = call->count * es;
    int root = rank == call->root;
    if (call->kind == ECCL_COLL_ALLTOALL) {
        /* The mirror runs it in place: the send blocks are copied aside
         * before anything lands (coll/alltoall.h). */
        eccl_coll_call c = *call;
        c.rank = rank;
        c.nranks = world;
        size_t se = eccl_a2a_send_extent(&c), re = eccl_a2a_recv_extent(&c);
        return (eccl_stage_layout){se, 0, re, 0, se > re ? se : re};
    }
    if (call->vcounts) {
        size_t mine = call->vcounts[rank] * es, at = call->vdispls[rank] * es, extent = 0;
        for (uint32_t i = 0; i < world; i++)
            if ((call->vdispls[i] + call->vcounts[i]) * es > extent)
                extent = (call->vdispls[i] + call->vcounts[i]) * es;
        return call->kind == ECCL_COLL_ALLGATHER ? (eccl_stage_layout){mine, at, extent, 0, extent}
                                                 : (eccl_stage_layout){extent, 0, mine, at, extent};
    }
    switch (call->kind) {
    case ECCL_COLL_SEND: return (eccl_stage_layout){b, 0, 0, 0, b};
    case ECCL_COLL_RECV: return (eccl_stage_layout){0, 0, b, 0, b};
    case ECCL_COLL_ALLGATHER: return (eccl_stage_layout){b, rank * b, world * b, 0, world * b};
    case ECCL_COLL_REDUCE_SCATTER: return (eccl_stage_layout){world * b, 0, b, rank * b, world * b};
    case ECCL_COLL_BROADCAST: return (eccl_stage_layout){root ? b : 0, 0, b, 0, b};
    default: return (eccl_stage_layout){b, 0, root ? b : 0, 0, b};
    }
}

/* A v layout, copied for the request (the caller's arrays may go once the
 * call returns): counts, then displacements (the all-gather's as given,
 * the reduce-scatter's the running sum). NULL *out: not a v call. */
static eccl_result v_layout(eccl_coll_call *call, const size_t *counts, const size_t *displs, uint32_t world,
                            size_t **out)
{
    *out = NULL;
    if (!counts) return ECCL_OK;
    int ag = call->kind == ECCL_COLL_ALLGATHER;
    if ((ag && !displs) || !world || (unsigned)call->dtype >= ECCL_DTYPE_COUNT) return ECCL_ERR_INVALID_ARG;
    size_t lim = SIZE_MAX / 16 / eccl_dtype_size(call->dtype), total = 0;
    size_t *a = malloc(2 * (size_t)world * sizeof *a);
    if (!a) return ECCL_ERR_NO_MEMORY;
    for (uint32_t i = 0; i < world; i++) {
        size_t d = ag ? displs[i] : total;
        if (counts[i] > lim || d > lim - counts[i] || total > lim - counts[i]) {
            free(a);
            return ECCL_ERR_INVALID_ARG;
        }
        a[i] = counts[i];
        a[world + i] = d;
        total += counts[i];
    }
    call->vcounts = a;
    call->vdispls = a + world;
    call->count = total;
    *out = a;
    return ECCL_OK;
}

static int block_cmp(const void *a, const void *b)
{
    const size_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Whether the non-empty blocks (counts, displs) of `world` overlap. */
static eccl_result blocks_disjoint(const size_t *counts, const size_t *displs, uint32_t world)
{
    size_t *b = malloc(2 * (size_t)world * sizeof *b), n = 0;
    if (!b) return ECCL_ERR_NO_MEMORY;
    for (uint32_t i = 0; i < world; i++) {
        if (!counts[i]) continue;
        b[2 * n] = displs[i];
        b[2 * n + 1] = counts[i];
        n++;
    }
    qsort(b, n, 2 * sizeof *b, block_cmp);
    eccl_result rc = ECCL_OK;
    for (size_t k = 1; k < n && rc == ECCL_OK; k++)
        if (b[2 * (k - 1)] + b[2 * (k - 1) + 1] > b[2 * k]) rc = ECCL_ERR_INVALID_ARG;
    free(b);
    return rc;
}

/* All-to-allv's layouts, copied for the request: receive counts and
 * displacements, then the send ones (the receive ones again in place). */
static eccl_result a2a_layout(eccl_coll_call *call, const size_t *scounts, const size_t *sdispls,
                              const size_t *rcounts, const size_t *rdispls, uint32_t world, size_t **out)
{
    *out = NULL;
    if (!rcounts || !rdispls || !scounts != !sdispls || (!scounts && call->sendbuf != call->recvbuf) ||
        !world || (unsigned)call->dtype >= ECCL_DTYPE_COUNT)
        return ECCL_ERR_INVALID_ARG;
    if (!scounts) {
        scounts = rcounts;
        sdispls = rdispls;
    }
    size_t lim = SIZE_MAX / 16 / eccl_dtype_size(call->dtype), total = 0;
    size_t *a = malloc(4 * (size_t)world * sizeof *a);
    if (!a) return ECCL_ERR_NO_MEMORY;
    for (uint32_t i = 0; i < world; i++) {
        if (rcounts[i] > lim || rdispls[i] > lim - rcounts[i] || scounts[i] > lim ||
            sdispls[i] > lim - scounts[i] || total > lim - rcounts[i]) {
            free(a);
            return ECCL_ERR_INVALID_ARG;
        }
        a[i] = rcounts[i];
        a[world + i] = rdispls[i];
        a[2 * world + i] = scounts[i];
        a[3 * world + i] = sdispls[i];
        total += rcounts[i];
    }
    eccl_result rc = blocks_disjoint(rcounts, rdispls, world);
    if (rc != ECCL_OK) {
        free(a);
        return rc;
    }
    call->vcounts = a;
    call->vdispls = a + world;
    call->svcounts = a + 2 * world;
    call->svdispls = a + 3 * world;
    call->count = total;
    *out = a;
    return ECCL_OK;
}

/* One layout-bound call, blocking (req NULL: info gets what it did) or
 * not (*req gets the request); counts and displs: a v layout, or NULL. */
/* All-to-allv's send layout (counts, displs above are its receive one). */
typedef struct a2a_send {
    const size_t *scounts, *sdispls;
} a2a_send;

static eccl_result coll_call_a2a(eccl_comm *c, eccl_coll_call call, const size_t *counts, const size_t *displs,
                                 const a2a_send *a2a, void *stream, eccl_reduce_info *info, eccl_request **req)
{
    if (!c) return ECCL_ERR_INVALID_ARG;
    eccl_engine_lock(&c->eng);
    eccl_result rc = comm_usable(c);
    if (rc == ECCL_OK) comm_wait_view(c); /* the layout is the next ring's */
    uint32_t world = c->world, rank = c->rank, epoch = c->epoch;
    if (call.kind == ECCL_COLL_SEND || call.kind == ECCL_COLL_RECV) {
        /* `peer` is a rank of the numbering the caller last saw. If a loss
         * renumbered the world since, without the caller being told, it
         * may name another rank now (or ourselves): the call is made in
         * the world the caller meant, and fails with PEER_LOST having sent
         * nothing (op_start), as if the loss had aborted it. */
        if (!c->seen_world) {
            c->seen_world = world;
            c->seen_rank = rank;
        }
        world = c->seen_world;
        rank = c->seen_rank;
    }
    eccl_engine_unlock(&c->eng);
    if (call.kind == ECCL_COLL_SEND || call.kind == ECCL_COLL_RECV) {
        /* The pair's own tag in this epoch (coll/p2p.h). */
        if (call.tag & ECCL_P2P_TAG_BIT) return ECCL_ERR_INVALID_ARG;
        int send = call.kind == ECCL_COLL_SEND;
        call.tag = eccl_p2p_tag(call.tag, send ? rank : call.root, send ? call.root : rank, epoch);
    }
    size_t *varr = NULL;
    if (rc == ECCL_OK && call.kind == ECCL_COLL_ALLTOALL && a2a)
        rc = a2a_layout(&call, a2a->scounts, a2a->sdispls, counts, displs, world, &varr);
    else if (rc == ECCL_OK)
        rc = v_layout(&call, counts, displs, world, &varr);
    if (rc == ECCL_OK) rc = coll_check(&call, world, rank);
    if (rc != ECCL_OK) {
        free(varr);
        return rc;
    }
    eccl_stage stage;
    eccl_stage_layout lay = coll_layout(&call, world, rank);
    const void *in = call.sendbuf;
    void *out = call.recvbuf;
    rc = call.count ? eccl_stage_begin_layout(&stage, c->env, &in, &out, &lay, stream) : ECCL_OK;
    if (!call.count) memset(&stage, 0, sizeof stage);
    if (rc != ECCL_OK) {
        free(varr);
        return rc;
    }
    call.sendbuf = in;
    call.recvbuf = out;
    eccl_request *r = NULL;
    eccl_engine_lock(&c->eng);
    rc = coll_submit(c, &call, world, rank, &stage, 0, req != NULL, &r);
    if (rc == ECCL_OK) r->varr = varr; /* the request's now: freed with it */
    else free(varr);
    if (rc == ECCL_OK && !req) rc = request_finish(c, r, info, &stage);
    eccl_engine_unlock(&c->eng);
    if (!req) return eccl_stage_end(&stage, rc);
    if (rc != ECCL_OK) return eccl_stage_end(&stage, rc);
    *req = r;
    return ECCL_OK;
}

static eccl_result coll_call(eccl_comm *c, eccl_coll_call call, const size_t *counts, const size_t *displs,
                             void *stream, eccl_reduce_info *info, eccl_request **req)
{
    return coll_call_a2a(c, call, counts, displs, NULL, stream, info, req);
}

static eccl_coll_call gather_call(const void *sendbuf, void *recvbuf, size_t count, eccl_dtype dtype,
                                  uint64_t tag)
{
    return (eccl_coll_call){.kind = ECCL_COLL_ALLGATHER, .tag = tag, .sendbuf = sendbuf,
                            .recvbuf = recvbuf, .count = count, .dtype = dtype};
}

eccl_result eccl_allgather(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t sendcount,
                           eccl_dtype dtype, uint64_t tag, eccl_reduce_info *info)
{
    eccl_coll_call call = gather_call(sendbuf, recvbuf, sendcount, dtype, tag);
    return coll_call(c, call, NULL, NULL, NULL, info, NULL);
}

eccl_result eccl_allgather_async(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t sendcount,
                                 eccl_dtype dtype, uint64_t tag, eccl_request **req)
{
    if (!req) return ECCL_ERR_INVALID_ARG;
    eccl_coll_call call = gather_call(sendbuf, recvbuf, sendcount, dtype, tag);
    return coll_call(c, call, NULL, NULL, NULL, NULL, req);
}

static eccl_coll_call reducing_call(eccl_coll_kind kind, const void *sendbuf, void *recvbuf,
                                    size_t count, eccl_dtype dtype, eccl_op op, uint32_t root,
                                    uint64_t tag)
{
    return (eccl_coll_call){.kind = kind, .tag = tag, .sendbuf = sendbuf, .recvbuf = recvbuf,
                            .count = count, .dtype = dtype, .op = op, .root = root};
}

eccl_result eccl_reduce_scatter(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t recvcount,
                                eccl_dtype dtype, eccl_op op, uint64_t tag, eccl_reduce_info *info)
{
    eccl_coll_call call =
        reducing_call(ECCL_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, 0, tag);
    return coll_call(c, call, NULL, NULL, NULL, info, NULL);
}

/* Quantised or with a stream (opts NULL: eccl_reduce_scatter). */
eccl_result eccl_reduce_scatter_ex(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t recvcount,
                                   eccl_dtype dtype, eccl_op op, uint64_t tag, const eccl_allreduce_opts *opts,
                                   eccl_reduce_info *info)
{
    eccl_coll_call call =
        reducing_call(ECCL_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, 0, tag);
    if (!c || (unsigned)dtype >= ECCL_DTYPE_COUNT) return ECCL_ERR_INVALID_ARG;
    eccl_result rc = quant_check(c, opts, dtype, op, &call.quant);
    if (rc != ECCL_OK) return rc;
    return coll_call(c, call, NULL, NULL, OPTS_HAS(opts, stream) ? opts->stream : NULL, info, NULL);
}

eccl_result eccl_reduce_scatter_ex_async(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t recvcount,
                                         eccl_dtype dtype, eccl_op op, uint64_t tag,
                                         const eccl_allreduce_opts *opts, eccl_request **req)
{
    eccl_coll_call call =
        reducing_call(ECCL_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, 0, tag);
    if (!c || !req || (unsigned)dtype >= ECCL_DTYPE_COUNT) return ECCL_ERR_INVALID_ARG;
    eccl_result rc = quant_check(c, opts, dtype, op, &call.quant);
    if (rc != ECCL_OK) return rc;
    return coll_call(c, call, NULL, NULL, OPTS_HAS(opts, stream) ? opts->stream : NULL, NULL, req);
}

eccl_result eccl_reduce_scatter_async(eccl_comm *c, const void *sendbuf, void *recvbuf,
                                      size_t recvcount, eccl_dtype dtype, eccl_op op, uint64_t tag,
                                      eccl_request **req)
{
    if (!req) return ECCL_ERR_INVALID_ARG;
    eccl_coll_call call =
        reducing_call(ECCL_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, 0, tag);
    return coll_call(c, call, NULL, NULL, NULL, NULL, req);
}

eccl_result eccl_broadcast(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                           eccl_dtype dtype, uint32_t root, uint64_t tag, eccl_reduce_info *info)
{
    eccl_coll_call call =
        reducing_call(ECCL_COLL_BROADCAST, sendbuf, recvbuf, count, dtype, ECCL_SUM, root, tag);
    return coll_call(c, call, NULL, NULL, NULL, info, NULL);
}

eccl_result eccl_broadcast_async(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                                 eccl_dtype dtype, uint32_t root, uint64_t tag, eccl_request **req)
{
    if (!req) return ECCL_ERR_INVALID_ARG;
    eccl_coll_call call =
        reducing_call(ECCL_COLL_BROADCAST, sendbuf, recvbuf, count, dtype, ECCL_SUM, root, tag);
    return coll_call(c, call, NULL, NULL, NULL, NULL, req);
}

eccl_result eccl_reduce(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t count, eccl_dtype dtype,
                        eccl_op op, uint32_t root, uint64_t tag, eccl_reduce_info *info)
{
    eccl_coll_call call = reducing_call(ECCL_COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root, tag);
    return coll_call(c, call, NULL, NULL, NULL, info, NULL);
}

eccl_result eccl_reduce_async(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                              eccl_dtype dtype, eccl_op op, uint32_t root, uint64_t tag,
                              eccl_request **req)
{
    if (!req) return ECCL_ERR_INVALID_ARG;
    eccl_coll_call call = reducing_call(ECCL_COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root, tag);
    return coll_call(c, call, NULL, NULL, NULL, NULL, req);
}

eccl_result eccl_allgatherv(eccl_comm *c, const void *sendbuf, void *recvbuf, const size_t *recvcounts,
                            const size_t *displs, eccl_dtype dtype, uint64_t tag, eccl_reduce_info *info)
{
    if (!recvcounts) return ECCL_ERR_INVALID_ARG;
    eccl_coll_call call = gather_call(sendbuf, recvbuf, 0, dtype, tag);
    return coll_call(c, call, recvcounts, displs, NULL, info, NULL);
}

eccl_result eccl_allgatherv_async(eccl_comm *c, const void *sendbuf, void *recvbuf, const size_t *recvcounts,
                                  const size_t *displs, eccl_dtype dtype, uint64_t tag, eccl_request **req)
{
    if (!req || !recvcounts) return ECCL_ERR_INVALID_ARG;
    eccl_coll_call call = gather_call(sendbuf, recvbuf, 0, dtype, tag);
    return coll_call(c, call, recvcounts, displs, NULL, NULL, req);
}

eccl_result eccl_reduce_scatterv(eccl_comm *c, const void *sendbuf, void *recvbuf, const size_t *recvcounts,
                                 eccl_dtype dtype, eccl_op op, uint64_t tag, eccl_reduce_info *info)
{
    if (!recvcounts) return ECCL_ERR_INVALID_ARG;
    eccl_coll_call call = reducing_call(ECCL_COLL_REDUCE_SCATTER, sendbuf, recvbuf, 0, dtype, op, 0, tag);
    return coll_call(c, call, recvcounts, NULL, NULL, info, NULL);
}

eccl_result eccl_reduce_scatterv_async(eccl_comm *c, const void *sendbuf, void *recvbuf,
                                       const size_t *recvcounts, eccl_dtype dtype, eccl_op op, uint64_t tag,
                                       eccl_request **req)
{
    if (!req || !recvcounts) return ECCL_ERR_INVALID_ARG;
    eccl_coll_call call = reducing_call(ECCL_COLL_REDUCE_SCATTER, sendbuf, recvbuf, 0, dtype, op, 0, tag);
    return coll_call(c, call, recvcounts, NULL, NULL, NULL, req);
}

static eccl_coll_call a2a_call(const void *sendbuf, void *recvbuf, size_t count, eccl_dtype dtype, uint64_t tag)
{
    return (eccl_coll_call){.kind = ECCL_COLL_ALLTOALL, .tag = tag, .sendbuf = sendbuf, .recvbuf = recvbuf,
                            .count = count, .dtype = dtype};
}

eccl_result eccl_alltoall(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t count, eccl_dtype dtype,
                          uint64_t tag, eccl_reduce_info *info)
{
    return coll_call(c, a2a_call(sendbuf, recvbuf, count, dtype, tag), NULL, NULL, NULL, info, NULL);
}

eccl_result eccl_alltoall_async(eccl_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                                eccl_dtype dtype, uint64_t tag, eccl_request **req)
{
    if (!req) return ECCL_ERR_INVALID_ARG;
    return coll_call(c, a2a_call(sendbuf, recvbuf, count, dtype, tag), NULL, NULL, NULL, NULL, req);
}

eccl_result eccl_alltoallv(eccl_comm *c, const void *sendbuf, const size_t *sendcounts, const size_t *sdispls,
                           void *recvbuf, const size_t *recvcounts, const size_t *rdispls, eccl_dtype dtype,
                           uint64_t tag, eccl_reduce_info *info)
{
    a2a_send s = {sendcounts, sdispls};
    return coll_call_a2a(c, a2a_call(sendbuf, recvbuf, 0, dtype, tag), recvcounts, rdispls, &s, NULL, info,
                         NULL);
}

eccl_result eccl_alltoallv_async(eccl_comm *c, const void *sendbuf, const size_t *sendcounts,
                                 const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                 const size_t *rdispls, eccl_dtype dtype, uint64_t tag, eccl_request **req)
{
    if (!req) return ECCL_ERR_INVALID_ARG;
    a2a_send s = {sendcounts, sdispls};
    return coll_call_a2a(c, a2a_call(sendbuf, recvbuf, 0, dtype, tag), recvcounts, rdispls, &s, NULL, NULL,
                         req);
}

/* ---- send and receive ------------------------------------------------------------ */

static eccl_coll_call p2p_call(eccl_coll_kind kind, const void *sendbuf, void *recvbuf, size_t count,
                               eccl_dtype dtype, uint32_t peer, uint64_t tag)
{
    return (eccl_coll_call){.kind = kind, .tag = tag, .sendbuf = sendbuf, .recvbuf = recvbuf, .count = count,
                            .dtype = dtype, .root = peer};
}

eccl_result eccl_send(eccl_comm *c, const void *buf, size_t count, eccl_dtype dtype, uint32_t peer, uint64_t tag,
                      eccl_reduce_info *info)
{
    return coll_call(c, p2p_call(ECCL_COLL_SEND, buf, NULL, count, dtype, peer, tag), NULL, NULL, NULL, info, NULL);
}

eccl_result eccl_send_async(eccl_comm *c, const void *buf, size_t count, eccl_dtype dtype, uint32_t peer,
                            uint64_t tag, eccl_request **req)
{
    if (!req) return ECCL_ERR_INVALID_ARG;
    return coll_call(c, p2p_call(ECCL_COLL_SEND, buf, NULL, count, dtype, peer, tag), NULL, NULL, NULL, NULL, req);
}

eccl_result eccl_recv(eccl_comm *c, void *buf, size_t count, eccl_dtype dtype, uint32_t peer, uint64_t tag,
                      eccl_reduce_info *info)
{
    return coll_call(c, p2p_call(ECCL_COLL_RECV, NULL, buf, count, dtype, peer, tag), NULL, NULL, NULL, info, NULL);
}

eccl_result eccl_recv_async(eccl_comm *c, void *buf, size_t count, eccl_dtype dtype, uint32_t peer, uint64_t tag,
                            eccl_request **req)
{
    if (!req) return ECCL_ERR_INVALID_ARG;
    return coll_call(c, p2p_call(ECCL_COLL_RECV, NULL, buf, count, dtype, peer, tag), NULL, NULL, NULL, NULL, req);
}

/* A one-byte MAX all-reduce on the request's own bytes: it returns only
 * once every peer has entered, with all-reduce's fault contract. */
static eccl_result barrier_submit(eccl_comm *c, uint64_t tag, int kick, eccl_request **out)
{
    eccl_coll_call call = {.kind = ECCL_COLL_ALLREDUCE, .tag = tag, .count = 1, .dtype = ECCL_U8,
                           .op = ECCL_MAX};
    eccl_stage stage = {0};
    return coll_submit(c, &call, c->world, c->rank, &stage, 1, kick, out);
}

eccl_result eccl_barrier(eccl_comm *c, uint64_t tag)
{
    if (!c) return ECCL_ERR_INVALID_ARG;
    eccl_request *r;
    eccl_stage stage;
    eccl_engine_lock(&c->eng);
    eccl_result rc = barrier_submit(c, tag, 0, &r);
    if (rc == ECCL_OK) rc = request_finish(c, r, NULL, &stage);
    eccl_engine_unlock(&c->eng);
    return rc;
}

eccl_result eccl_barrier_async(eccl_comm *c, uint64_t tag, eccl_request **req)
{
    if (!c || !req) return ECCL_ERR_INVALID_ARG;
    eccl_engine_lock(&c->eng);
    eccl_result rc = barrier_submit(c, tag, 1, req);
    eccl_engine_unlock(&c->eng);
    return rc;
}
