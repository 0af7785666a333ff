/* The worker loop behind eccl-worker (and tests/sim/sim_worker):
 *
 *   connect; loop { admit pending peers; all-reduce; on peer loss check the
 *   buffer came back untouched and retry on the survivors; verify }
 *
 * A peer admitted later starts where the others are: after joining and after
 * every topology change, peers agree on the step with an all-reduce MAX.
 *
 * Every peer contributes the same values, so the expected sum is
 * world_size * x whoever is left, and every peer prints a hash of its
 * result so bit-parity across peers can be checked by whoever reads the
 * output. One line per event, as key=value pairs, through the launch.
 *
 * With phantom buffers from the launch (the simulator's scale runs) the
 * buffers have no values: the loop skips filling and checking them and
 * reports completion and time only; the protocol is the same. With device
 * buffers (launch.device) the values live in host copies the loop moves
 * to and from the device through the launch; the library gets the device
 * pointers and stages them itself.
 */
#include "worker_loop.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float contribution(int iter, size_t i) { return (float)((iter * 31 + (int)(i % 1021)) % 17 + 1); }

/* The two all-reduce buffers, from the launch when it has its own memory. */
static int alloc_buffers(const eccl_launch *L, size_t bytes, float **send, float **recv)
{
    void *s = NULL, *r = NULL;
    if (L->buffer_alloc) {
        if (L->buffer_alloc(L->ctx, bytes, &s) != ECCL_OK) return 0;
        if (L->buffer_alloc(L->ctx, bytes, &r) != ECCL_OK) {
            if (L->buffer_free) L->buffer_free(L->ctx, s);
            return 0;
        }
    } else {
        s = malloc(bytes);
        r = malloc(bytes);
        if (!s || !r) {
            free(s);
            free(r);
            return 0;
        }
    }
    *send = s;
    *recv = r;
    return 1;
}

static void free_buffers(const eccl_launch *L, float *send, float *recv)
{
    if (!L->buffer_alloc) {
        free(send);
        free(recv);
    } else if (L->buffer_free) {
        L->buffer_free(L->ctx, send);
        L->buffer_free(L->ctx, recv);
    }
}

/* The step all members of the current ring agree on: the furthest one,
 * and the world they agreed in (*world), which is the same on every
 * member: whether there are enough members to go on is decided on it, not
 * on the world each reads afterwards (a member that read it after a loss
 * the others had not seen yet waited alone for the starting world while
 * they went on without it, until every call timed out). The tag is unique
 * per ring epoch, which every member has just entered, and far above the
 * steps' own tags (iteration numbers); bit 63 is reserved for
 * point-to-point (eccl.h). */
static eccl_result agree_on_step(eccl_comm *comm, int *iter, int64_t *world)
{
    int64_t epoch = 0;
    eccl_comm_get_attr(comm, ECCL_ATTR_WORLD_SIZE, world);
    eccl_comm_get_attr(comm, ECCL_ATTR_EPOCH, &epoch);
    if (*world < 2) return ECCL_OK;
    uint64_t step = (uint64_t)*iter;
    eccl_reduce_info info = {0};
    eccl_result rc = eccl_allreduce(comm, &step, &step, 1, ECCL_U64, ECCL_MAX,
                                    (1ull << 62) | (uint64_t)epoch, &info);
    if (rc == ECCL_OK) {
        *iter = (int)step;
        *world = info.world_size;
    }
    return rc;
}

/* A communicator that has connected (registered; admitted or pending). */
static eccl_result join(const eccl_launch *L, const eccl_comm_params *params, eccl_comm **comm,
                        int64_t *id)
{
    eccl_result rc = L->comm_create(L->ctx, params, comm);
    if (rc == ECCL_OK) rc = eccl_comm_connect(*comm);
    if (rc != ECCL_OK) {
        eccl_launch_emit(L, 1, "eccl-worker: connect: %s", eccl_strerror(rc));
        eccl_comm_destroy(*comm);
        *comm = NULL;
        return rc;
    }
    eccl_comm_get_attr(*comm, ECCL_ATTR_PEER_ID, id);
    eccl_launch_emit(L, 0, "event=connected peer=%lld pid=%d", (long long)*id, L->pid);
    return ECCL_OK;
}

/* The master (or our relay) is gone: join again as a newcomer, if allowed.
 * The buffers are the caller's and stay. */
static int rejoin(const eccl_launch *L, eccl_worker_options *o, const eccl_comm_params *params,
                  eccl_comm **comm, int64_t *id, int iter)
{
    if (o->rejoins <= 0) return 0;
    o->rejoins--;
    eccl_launch_emit(L, 0, "event=master_lost peer=%lld iter=%d", (long long)*id, iter);
    eccl_comm_destroy(*comm);
    o->start_world = 0; /* the job runs: wait for nobody */
    return join(L, params, comm, id) == ECCL_OK;
}

int eccl_worker_run(const eccl_launch *L, const eccl_worker_options *opts)
{
    eccl_worker_options o = *opts;
    eccl_comm_params params;
    eccl_comm_params_init(&params);
    params.master_addr = o.master;
    params.peer_group = o.group;
    if (o.peer_timeout_ms) params.peer_timeout_ms = o.peer_timeout_ms;
    if (o.op_timeout_ms) params.op_timeout_ms = o.op_timeout_ms;
    eccl_comm *comm = NULL;
    int64_t id = 0;
    eccl_result rc = join(L, &params, &comm, &id);
    /* Our relay may die while we register: come in through the next one. */
    while (rc == ECCL_ERR_MASTER_LOST && o.rejoins > 0) {
        o.rejoins--;
        eccl_launch_emit(L, 0, "event=master_lost peer=%lld iter=0", (long long)id);
        rc = join(L, &params, &comm, &id);
    }
    if (rc != ECCL_OK) return 1;

    float *send = NULL, *recv = NULL;
    if (!alloc_buffers(L, o.count * sizeof(float), &send, &recv)) {
        eccl_launch_emit(L, 1, "eccl-worker: cannot allocate 2 x %zu bytes", o.count * sizeof(float));
        eccl_comm_destroy(comm);
        return 1;
    }
    const int phantom = L->buffer_alloc && L->phantom;
    /* Device buffers: the values live in host copies (hsend, hrecv), moved
     * to and from the device through the launch. */
    const int device = L->buffer_alloc && L->device && !phantom;
    float *hsend = send, *hrecv = recv;
    if (device) {
        hsend = malloc(o.count * sizeof(float));
        hrecv = malloc(o.count * sizeof(float));
        if (!hsend || !hrecv || !L->buffer_write || !L->buffer_read) {
            eccl_launch_emit(L, 1, "eccl-worker: cannot set up host copies of the device buffers");
            free(hsend);
            free(hrecv);
            free_buffers(L, send, recv);
            eccl_comm_destroy(comm);
            return 1;
        }
    }
    int status = 0, iter = 0, agreed = 0, computed = -1, optimized = 0, stalled = 0;
    int64_t slow_from = 0, slow_to = 0; /* the slow link last seen named */
    int64_t world = 0; /* the agreed step's (agree_on_step) */
    double waiting_since = 0;
    while (iter < o.iters) {
        uint32_t pending = 0;
        rc = eccl_comm_peers_pending(comm, &pending);
        int64_t members = 0;
        eccl_comm_get_attr(comm, ECCL_ATTR_WORLD_SIZE, &members);
        /* Before the first step, newcomers gather until they complete the
         * starting world, then come in together: every admission re-forms
         * the whole ring, so admitting a 10k-rank start-up as it trickles
         * in would cost O(N) rounds of O(N) messages. The decision rests
         * only on what every member was told alike (the vote's count and
         * the world), so all members take it together. */
        int gather = members < o.start_world && members + (int64_t)pending < o.start_world;
        if (rc == ECCL_OK && pending > 0 && !gather) {
            rc = eccl_comm_update_topology(comm);
            agreed = 0;
            /* Back to the top, where newcomers start: everyone asks again. */
            if (rc == ECCL_OK) continue;
        }
        if (rc == ECCL_OK && !agreed) {
            rc = agree_on_step(comm, &iter, &world);
            agreed = rc == ECCL_OK;
            if (rc == ECCL_ERR_PEER_LOST) continue;
        }
        if (rc == ECCL_ERR_TIMEOUT) {
            /* A member that has not asked or called yet, past op_timeout
             * (its program stalls; `stall` in a scenario): the query or
             * the agreement is settled alike everywhere; ask again. */
            agreed = 0;
            continue;
        }
        if (rc == ECCL_ERR_MASTER_LOST && rejoin(L, &o, &params, &comm, &id, iter)) {
            agreed = 0;
            continue;
        }
        if (rc != ECCL_OK) {
            eccl_launch_emit(L, 0, "event=error peer=%lld iter=%d what=membership error=\"%s\"", (long long)id,
                 iter, eccl_strerror(rc));
            status = 1;
            break;
        }
        if (world < o.world_min || world < o.start_world) {
            if (waiting_since == 0) waiting_since = L->now_ms(L->ctx);
            if (L->now_ms(L->ctx) - waiting_since > o.wait_ms) {
                eccl_launch_emit(L, 0, "event=gave_up peer=%lld iter=%d world=%lld", (long long)id, iter,
                     (long long)world);
                status = 1;
                break;
            }
            L->sleep_ms(L->ctx, 10);
            agreed = 0; /* every waiting member asks again, together */
            continue;
        }
        waiting_since = 0;
        o.start_world = 0; /* only the first step waits for everyone */
        if (o.optimize_at > 0 && iter == o.optimize_at && !optimized) {
            /* Every member reaches this iteration together (agreed step),
             * so all of them call it; a loss mid-call is retried. */
            eccl_topo_info ti;
            double t0 = L->now_ms(L->ctx);
            rc = eccl_comm_optimize_topology(comm, NULL, &ti);
            double ms = L->now_ms(L->ctx) - t0;
            if (rc == ECCL_ERR_PEER_LOST || rc == ECCL_ERR_TIMEOUT) {
                eccl_launch_emit(L, 0, "event=optimize_failed peer=%lld iter=%d error=\"%s\"", (long long)id,
                     iter, eccl_strerror(rc));
                agreed = 0;
                continue;
            }
            if (rc != ECCL_OK) {
                eccl_launch_emit(L, 0, "event=error peer=%lld iter=%d what=optimize error=\"%s\"",
                     (long long)id, iter, eccl_strerror(rc));
                status = 1;
                break;
            }
            optimized = 1;
            eccl_launch_emit(L, 0,
                 "event=optimized peer=%lld iter=%d world=%lld changed=%d pairs=%u "
                 "old_bps=%.4g new_bps=%.4g call_ms=%.1f",
                 (long long)id, iter, (long long)world, ti.changed, ti.pairs_measured,
                 ti.old_bottleneck_bps, ti.new_bottleneck_bps, ms);
        }
        if (o.step_ms > 0 && computed != iter) {
            /* The step's compute, once per iteration (a retry after a
             * peer loss reuses the gradients). */
            L->sleep_ms(L->ctx, o.step_ms);
            computed = iter;
        }
        if (o.stall_ms > 0 && iter == o.stall_at && !stalled) {
            eccl_launch_emit(L, 0, "event=stall peer=%lld iter=%d ms=%d", (long long)id, iter, o.stall_ms);
            L->sleep_ms(L->ctx, o.stall_ms);
            stalled = 1;
        }

        for (size_t i = 0; i < o.count && !phantom; i++) {
            hsend[i] = contribution(iter, i);
            hrecv[i] = (float)iter; /* stale: the call overwrites it */
        }
        if (device && (L->buffer_write(L->ctx, send, hsend, o.count * sizeof(float)) != ECCL_OK ||
                       L->buffer_write(L->ctx, recv, hrecv, o.count * sizeof(float)) != ECCL_OK)) {
            eccl_launch_emit(L, 0, "event=error peer=%lld iter=%d what=device_write", (long long)id, iter);
            status = 1;
            break;
        }
        /* The failure promise out of place: the input intact, which is all
         * the retry below reads (the output is then unspecified, eccl.h). */
        uint64_t before = phantom ? 0 : eccl_launch_hash_f32(hsend, o.count);
        eccl_reduce_info info = {0};
        eccl_launch_emit(L, 0, "event=begin peer=%lld iter=%d world=%lld", (long long)id, iter,
             (long long)world);
        double t0 = L->now_ms(L->ctx);
        rc = eccl_allreduce(comm, send, recv, o.count, ECCL_F32, ECCL_SUM, (uint64_t)iter, &info);
        double ms = L->now_ms(L->ctx) - t0;
        /* What the call left in the device output, read back (untimed). */
        if (device && L->buffer_read(L->ctx, hrecv, recv, o.count * sizeof(float)) != ECCL_OK) {
            eccl_launch_emit(L, 0, "event=error peer=%lld iter=%d what=device_read", (long long)id, iter);
            status = 1;
            break;
        }
        if (rc == ECCL_ERR_PEER_LOST || rc == ECCL_ERR_TOO_FEW_PEERS || rc == ECCL_ERR_TIMEOUT) {
            /* The device input, read back into hrecv (free: the output is
             * written afresh before the retry). */
            const float *in = hsend;
            if (device) in = L->buffer_read(L->ctx, hrecv, send, o.count * sizeof(float)) == ECCL_OK ? hrecv : NULL;
            int intact = phantom || (in && eccl_launch_hash_f32(in, o.count) == before);
            eccl_launch_emit(L, 0, "event=%s peer=%lld iter=%d world=%lld ms=%.1f intact=%s",
                 rc == ECCL_ERR_PEER_LOST ? "peer_lost"
                 : rc == ECCL_ERR_TIMEOUT  ? "timeout"
                                           : "too_few_peers",
                 (long long)id, iter, (long long)world, ms,
                 phantom ? "unchecked" : intact ? "yes" : "NO");
            if (!intact) status = 1;
            if (rc == ECCL_ERR_TOO_FEW_PEERS) L->sleep_ms(L->ctx, 10);
            agreed = 0; /* the world shrank: agreed afresh */
            continue;   /* retry this iteration with whoever is left */
        }
        if (rc == ECCL_ERR_MASTER_LOST && rejoin(L, &o, &params, &comm, &id, iter)) {
            agreed = 0;
            continue;
        }
        if (rc != ECCL_OK) {
            eccl_launch_emit(L, 0, "event=error peer=%lld iter=%d error=\"%s\"", (long long)id, iter,
                 eccl_strerror(rc));
            status = 1;
            break;
        }
        if (phantom) {
            eccl_launch_emit(L, 0, "event=ok peer=%lld iter=%d world=%u ms=%.1f algo=%s values=phantom",
                 (long long)id, iter, info.world_size, ms, eccl_algorithm_name(info.algorithm));
            iter++;
            continue;
        }
        size_t wrong = 0;
        for (size_t i = 0; i < o.count; i++)
            wrong += hrecv[i] != (float)info.world_size * contribution(iter, i);
        eccl_launch_emit(L, 0, "event=ok peer=%lld iter=%d world=%u ms=%.1f algo=%s wrong=%zu hash=%016llx",
             (long long)id, iter, info.world_size, ms, eccl_algorithm_name(info.algorithm), wrong,
             (unsigned long long)eccl_launch_hash_f32(hrecv, o.count));
        if (wrong) status = 1;
        /* The slow link the master names (comm/rates.c), when it changes. */
        int64_t from = 0, to = 0;
        if (eccl_comm_get_attr(comm, ECCL_ATTR_SLOW_LINK_FROM, &from) == ECCL_OK &&
            eccl_comm_get_attr(comm, ECCL_ATTR_SLOW_LINK_TO, &to) == ECCL_OK &&
            (from != slow_from || to != slow_to)) {
            eccl_launch_emit(L, 0, "event=slow_link_seen peer=%lld iter=%d from=%lld to=%lld", (long long)id, iter,
                 (long long)from, (long long)to);
            slow_from = from, slow_to = to;
        }
        iter++;
    }
    eccl_comm_destroy(comm);
    free_buffers(L, send, recv);
    if (device) {
        free(hsend);
        free(hrecv);
    }
    eccl_launch_emit(L, 0, "event=exit peer=%lld status=%d", (long long)id, status);
    return status;
}
