/* eccl-bench's measurement over the public API, for eccl-sim's
 * `workload = bench` (sim_bench.h): its calls, check values (float / sum,
 * out of place) and rows (tools/bench_rows.h). */
#include "sim_bench.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "results.h"

#define BENCH_ALIGN 64
#define BENCH_TAG_BASE 1 /* eccl-bench's first tag */
#define PATTERN_PERIOD BENCH_PATTERN_PERIOD
/* float: every partial sum of integers up to 2^24 is exact. */
#define F32_EXACT_LIMIT (INT64_C(1) << 24)

typedef struct run {
    const eccl_simbench_options *o;
    const eccl_simbench_hooks *h;
    eccl_simbench_result *res;
    eccl_comm *comm;
    int64_t rank, nranks;
    uint64_t next_tag;
    float *send, *recv;
    float *more[ECCL_SIMBENCH_MAX_CONCURRENT]; /* concurrent > 1: calls 2..K's outputs */
    uint32_t algo; /* of the last call of a timed step */
} run;

__attribute__((format(printf, 2, 3))) static int fail(run *r, const char *fmt, ...)
{
    if (r->res->why[0]) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->res->why, sizeof r->res->why, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- eccl-bench's check values, float / sum -------------------------------- */

static void rank_values(int64_t nranks, int64_t rank, float out[PATTERN_PERIOD])
{
    for (size_t j = 0; j < PATTERN_PERIOD; j++) out[j] = (float)bench_contribution(F32_EXACT_LIMIT, 1, ECCL_SUM, nranks, rank, j);
}

static void fill_pattern(float *buf, size_t count, const float vals[PATTERN_PERIOD])
{
    size_t done = count < PATTERN_PERIOD ? count : PATTERN_PERIOD;
    memcpy(buf, vals, done * sizeof *buf);
    while (done < count) {
        size_t n = count - done < done ? count - done : done;
        memcpy(buf + done, buf, n * sizeof *buf);
        done += n;
    }
}

/* Elements of buf that differ from want[(first + i) % period]. */
static uint64_t check_buffer(const float *buf, size_t count, const float want[PATTERN_PERIOD], size_t first)
{
    uint64_t wrong = 0;
    for (size_t i = 0; i < count; i++)
        if (!(buf[i] == want[(first + i) % PATTERN_PERIOD])) wrong++; /* NaN counts as wrong */
    return wrong;
}

/* ---- calls ------------------------------------------------------------------ */

static size_t call_count(const run *r, size_t count)
{
    return bench_blocked(r->o->coll) ? count / (size_t)r->nranks : count;
}

/* The benchmarked collective with the next tag (eccl-bench's issue(): root
 * 0, float, sum): blocking, or async into *req when req is not NULL. */
static eccl_result issue_req(run *r, const void *in, void *out, size_t ccount, eccl_request **req)
{
    eccl_comm *c = r->comm;
    eccl_reduce_info info;
    const uint64_t tag = r->next_tag++;
    eccl_result rc;
    switch (r->o->coll) {
    case COLL_ALLGATHER:
        rc = req ? eccl_allgather_async(c, in, out, ccount, ECCL_F32, tag, req)
                 : eccl_allgather(c, in, out, ccount, ECCL_F32, tag, &info);
        break;
    case COLL_REDUCE_SCATTER:
        rc = req ? eccl_reduce_scatter_async(c, in, out, ccount, ECCL_F32, ECCL_SUM, tag, req)
                 : eccl_reduce_scatter(c, in, out, ccount, ECCL_F32, ECCL_SUM, tag, &info);
        break;
    case COLL_BROADCAST:
        rc = req ? eccl_broadcast_async(c, in, out, ccount, ECCL_F32, 0, tag, req)
                 : eccl_broadcast(c, in, out, ccount, ECCL_F32, 0, tag, &info);
        break;
    case COLL_REDUCE:
        rc = req ? eccl_reduce_async(c, in, out, ccount, ECCL_F32, ECCL_SUM, 0, tag, req)
                 : eccl_reduce(c, in, out, ccount, ECCL_F32, ECCL_SUM, 0, tag, &info);
        break;
    case COLL_ALLTOALL:
        rc = req ? eccl_alltoall_async(c, in, out, ccount, ECCL_F32, tag, req)
                 : eccl_alltoall(c, in, out, ccount, ECCL_F32, tag, &info);
        break;
    default:
        rc = req ? eccl_allreduce_async(c, in, out, ccount, ECCL_F32, ECCL_SUM, tag, req)
                 : eccl_allreduce(c, in, out, ccount, ECCL_F32, ECCL_SUM, tag, &info);
        break;
    }
    if (rc == ECCL_OK && !req) r->algo = info.algorithm;
    return rc;
}

static eccl_result issue(run *r, const void *in, void *out, size_t ccount) { return issue_req(r, in, out, ccount, NULL); }

/* One warm-up or timed step (eccl-bench's round_of_calls): one blocking
 * call, or `concurrent` async ones, each into its own output, then a wait
 * for all of them. */
static int round_of_calls(run *r, size_t ccount, size_t size, const char *what)
{
    const uint64_t k_all = r->o->concurrent;
    if (k_all <= 1) {
        eccl_result rc = issue(r, r->send, r->recv, ccount);
        if (rc != ECCL_OK) return fail(r, "%s %s of %zu bytes: %s", what, bench_coll_names[r->o->coll], size, eccl_strerror(rc));
        return 0;
    }
    eccl_request *req[ECCL_SIMBENCH_MAX_CONCURRENT];
    eccl_result first = ECCL_OK;
    uint64_t k = 0;
    for (; k < k_all; k++) {
        first = issue_req(r, r->send, k == 0 ? r->recv : r->more[k - 1], ccount, &req[k]);
        if (first != ECCL_OK) break;
    }
    /* Every call issued is waited for, even after a failure. */
    for (uint64_t j = 0; j < k; j++) {
        eccl_reduce_info info;
        eccl_result rc = eccl_wait(req[j], &info);
        if (rc == ECCL_OK) r->algo = info.algorithm;
        else if (first == ECCL_OK) first = rc;
    }
    if (first != ECCL_OK)
        return fail(r, "%s %s of %zu bytes (%" PRIu64 " at once): %s", what, bench_coll_names[r->o->coll], size,
                    k_all, eccl_strerror(first));
    return 0;
}

/* One all-reduce of the bench's own (options, times, #wrong). */
static int gather(run *r, const void *in, void *out, size_t count, eccl_dtype t, eccl_op op, const char *what)
{
    const uint64_t tag = r->next_tag++;
    eccl_result rc = eccl_allreduce(r->comm, in, out, count, t, op, tag, NULL);
    if (rc != ECCL_OK) return fail(r, "%s (tag %" PRIu64 "): %s", what, tag, eccl_strerror(rc));
    return 0;
}

/* eccl-bench's checked_call, out of place on host buffers: every rank
 * contributes its own values, the output starts as garbage, the input must
 * come back untouched. */
static int checked_call(run *r, size_t count, uint64_t *wrong)
{
    const int k = r->o->coll;
    const size_t ccount = call_count(r, count), n = (size_t)r->nranks;
    const size_t in_elems = k == COLL_REDUCE_SCATTER || k == COLL_ALLTOALL ? n * ccount : ccount;
    const size_t out_elems = k == COLL_ALLGATHER || k == COLL_ALLTOALL ? n * ccount : ccount;
    const int has_in = k != COLL_BROADCAST || r->rank == 0;
    const int has_out = k != COLL_REDUCE || r->rank == 0;
    float mine[PATTERN_PERIOD], want[PATTERN_PERIOD], expect[PATTERN_PERIOD];
    rank_values(r->nranks, r->rank, mine);
    for (size_t j = 0; j < PATTERN_PERIOD; j++) {
        int64_t acc = 0;
        for (int64_t q = 0; q < r->nranks; q++) acc += bench_contribution(F32_EXACT_LIMIT, 1, ECCL_SUM, r->nranks, q, j);
        expect[j] = (float)acc;
    }
    if (has_in) {
        for (size_t j = 0; k == COLL_ALLTOALL && j < n; j++) {
            rank_values(r->nranks, r->rank * (int64_t)n + (int64_t)j, want);
            fill_pattern(r->send + j * ccount, ccount, want);
        }
        if (k != COLL_ALLTOALL) fill_pattern(r->send, in_elems, mine);
    }
    memset(r->recv, 0xa5, out_elems * sizeof(float));
    eccl_result rc = issue(r, r->send, r->recv, ccount);
    if (rc != ECCL_OK)
        return fail(r, "checked %s of %zu bytes: %s", bench_coll_names[k], count * sizeof(float), eccl_strerror(rc));
    if (r->o->corrupt && has_out) r->recv[0] += 1.0f;
    switch (k) {
    case COLL_ALLGATHER:
        for (size_t q = 0; q < n; q++) {
            rank_values(r->nranks, (int64_t)q, want);
            *wrong += check_buffer(r->recv + q * ccount, ccount, want, 0);
        }
        break;
    case COLL_BROADCAST:
        rank_values(r->nranks, 0, want);
        *wrong += check_buffer(r->recv, ccount, want, 0);
        break;
    case COLL_ALLTOALL: /* block q: rank q's block for us */
        for (size_t q = 0; q < n; q++) {
            rank_values(r->nranks, (int64_t)q * (int64_t)n + r->rank, want);
            *wrong += check_buffer(r->recv + q * ccount, ccount, want, 0);
        }
        break;
    case COLL_REDUCE_SCATTER: /* block `rank` of the reduction */
        *wrong += check_buffer(r->recv, ccount, expect, (size_t)r->rank * ccount);
        break;
    default:
        if (has_out) *wrong += check_buffer(r->recv, ccount, expect, 0);
        break;
    }
    if (has_in) {
        for (size_t j = 0; k == COLL_ALLTOALL && j < n; j++) {
            rank_values(r->nranks, r->rank * (int64_t)n + (int64_t)j, want);
            *wrong += check_buffer(r->send + j * ccount, ccount, want, 0);
        }
        if (k != COLL_ALLTOALL) *wrong += check_buffer(r->send, in_elems, mine, 0);
    }
    return 0;
}

/* Timed calls use zeros (a sum maps them to themselves), as eccl-bench's
 * fill_steady. */
static void fill_steady(run *r, size_t count) { memset(r->send, 0, count * sizeof(float)); }

/* eccl-bench's run_size. */
static int run_size(run *r, size_t size)
{
    const eccl_simbench_options *o = r->o;
    size_t count = size / sizeof(float);
    if (bench_blocked(o->coll)) count = count / (size_t)r->nranks * (size_t)r->nranks;
    if (count == 0) return 0;
    const size_t ccount = call_count(r, count);
    /* Phantom buffers have no bytes to fill or check (eccl-bench --check 0). */
    const int check = !o->phantom;
    if (check) fill_steady(r, count);
    for (uint64_t k = 0; k < o->warmup; k++)
        if (round_of_calls(r, ccount, size, "warm-up")) return -1;
    uint64_t wrong = 0, wrong_all = 0;
    if (check) {
        if (checked_call(r, count, &wrong)) return -1;
        fill_steady(r, count);
    }

    const uint64_t start = r->h->now_ns(r->h->ctx);
    for (uint64_t k = 0; k < o->iters; k++)
        if (round_of_calls(r, ccount, size, "timed")) return -1;
    double time_us = (double)(r->h->now_ns(r->h->ctx) - start) / 1e3 / (double)o->iters, time_max = 0;
    /* The slowest rank is the collective's time, as in nccl-tests. */
    if (gather(r, &time_us, &time_max, 1, ECCL_F64, ECCL_MAX, "gathering times") ||
        (check && gather(r, &wrong, &wrong_all, 1, ECCL_U64, ECCL_SUM, "gathering #wrong")))
        return -1;
    r->res->wrong_total += wrong_all;
    if (r->rank == 0 && r->res->nrows < ECCL_SIMBENCH_MAX_ROWS)
        r->res->rows[r->res->nrows++] = (eccl_simbench_row){.bytes = count * sizeof(float), .count = count,
                                                            .time_us = time_max, .wrong = wrong_all,
                                                            .algo = r->algo,
                                                            .concurrent = (uint32_t)o->concurrent,
                                                            .checked = check};
    return 0;
}

/* Every member runs the same loop until the world is complete, newcomers
 * let in together once they complete it (the worker loop's gathering:
 * examples/worker_loop.c), as eccl-bench --world N waits for N. */
static int admit_world(run *r)
{
    const uint64_t deadline = r->h->now_ns(r->h->ctx) + r->o->wait_ns;
    for (;;) {
        int64_t members = 0;
        uint32_t pending = 0;
        eccl_result rc = eccl_comm_get_attr(r->comm, ECCL_ATTR_WORLD_SIZE, &members);
        if (rc == ECCL_OK && members >= r->o->world) return 0;
        if (rc == ECCL_OK) rc = eccl_comm_peers_pending(r->comm, &pending);
        if (rc == ECCL_OK && pending > 0 && members + (int64_t)pending >= r->o->world) {
            rc = eccl_comm_update_topology(r->comm);
            if (rc == ECCL_OK) continue;
        }
        if (rc != ECCL_OK) return fail(r, "waiting for %" PRId64 " ranks: %s", r->o->world, eccl_strerror(rc));
        if (r->h->now_ns(r->h->ctx) >= deadline)
            return fail(r, "waiting for %" PRId64 " ranks: %" PRId64 " after %.3f s", r->o->world, members,
                        (double)r->o->wait_ns / 1e9);
        r->h->sleep_ns(r->h->ctx, 1000000); /* 1 ms, as tool_admit_world */
    }
}

int eccl_simbench_rank_run(const eccl_simbench_hooks *h, const char *master_addr,
                           const eccl_simbench_options *o, eccl_simbench_result *res)
{
    memset(res, 0, sizeof *res);
    res->rank = res->nranks = -1;
    run r = {.o = o, .h = h, .res = res, .next_tag = BENCH_TAG_BASE};
    eccl_comm_params params;
    eccl_comm_params_init(&params);
    params.master_addr = master_addr;
    eccl_result rc = h->comm_create(h->ctx, &params, &r.comm);
    if (rc == ECCL_OK) rc = eccl_comm_connect(r.comm);
    if (rc != ECCL_OK) {
        fail(&r, "connecting to %s: %s", master_addr, eccl_strerror(rc));
        goto out;
    }
    if (admit_world(&r)) goto out;
    if (eccl_comm_get_attr(r.comm, ECCL_ATTR_RANK, &r.rank) != ECCL_OK ||
        eccl_comm_get_attr(r.comm, ECCL_ATTR_WORLD_SIZE, &r.nranks) != ECCL_OK) {
        fail(&r, "reading the rank");
        goto out;
    }
    res->rank = r.rank;
    res->nranks = r.nranks;
    /* eccl-bench's agree_on_options: one all-reduce of two u64 (MAX)
     * before the sizes. Every rank here runs the same options; the call is
     * kept so the call sequence (and the tags) are eccl-bench's. */
    uint64_t mine[2] = {o->minbytes ^ o->maxbytes, ~(o->minbytes ^ o->maxbytes)}, all[2];
    if (gather(&r, mine, all, 2, ECCL_U64, ECCL_MAX, "comparing options")) goto out;
    size_t bytes = (o->maxbytes + BENCH_ALIGN - 1) / BENCH_ALIGN * BENCH_ALIGN;
    const uint64_t nbufs = 1 + (o->concurrent > 1 ? o->concurrent : 1); /* send, then the outputs */
    for (uint64_t b = 0; b < nbufs; b++) {
        void *p = NULL;
        if (o->phantom) {
            if (!h->alloc_phantom || h->alloc_phantom(h->ctx, bytes, &p) != ECCL_OK) p = NULL;
        } else {
            p = aligned_alloc(BENCH_ALIGN, bytes);
        }
        if (!p) {
            fail(&r, "allocating %" PRIu64 " x %zu bytes%s", nbufs, bytes, o->phantom ? " (phantom)" : "");
            goto out;
        }
        if (b == 0) r.send = p;
        else if (b == 1) r.recv = p;
        else r.more[b - 2] = p;
    }
    for (size_t size = o->minbytes;; size *= o->stepfactor) {
        if (run_size(&r, size)) goto out;
        /* Stops before size * stepfactor passes maxbytes, or overflows. */
        if (size > o->maxbytes / o->stepfactor) break;
    }
out:
    if (!o->phantom) { /* phantom buffers are the world's */
        free(r.send);
        free(r.recv);
        for (uint64_t k = 0; k + 1 < o->concurrent && k < ECCL_SIMBENCH_MAX_CONCURRENT; k++) free(r.more[k]);
    }
    if (r.comm) eccl_comm_destroy(r.comm);
    return res->why[0] ? -1 : 0;
}

/* ---- rows ------------------------------------------------------------------- */

double eccl_simbench_algbw(const eccl_simbench_row *row)
{
    return bench_algbw(row->bytes, row->concurrent ? row->concurrent : 1, row->time_us);
}

double eccl_simbench_busbw(int coll, int64_t nranks, const eccl_simbench_row *row)
{
    return eccl_simbench_algbw(row) * bench_busbw_factor(coll, nranks);
}

void eccl_simbench_print_row(FILE *f, int tsv, int coll, int64_t nranks, const eccl_simbench_row *row)
{
    double algbw = eccl_simbench_algbw(row);
    double busbw = eccl_simbench_busbw(coll, nranks, row);
    const char *redop = bench_reduces(coll) ? "sum" : "none";
    char wrong[24] = "N/A"; /* eccl-bench's, without a check */
    if (row->checked) snprintf(wrong, sizeof wrong, "%" PRIu64, row->wrong);
    if (tsv)
        eccl_results_bench_row(f, row->bytes, row->count, "float", redop, row->time_us, algbw, busbw, wrong,
                               eccl_algorithm_name(row->algo));
    else
        bench_print_row(f, row->bytes, row->count, "float", redop, row->time_us, algbw, busbw, wrong,
                        eccl_algorithm_name(row->algo));
}
