/* Runs a multi-process suite with device buffers: linked into a second build
 * of the suite with -Wl,--wrap for the all-reduce entry points, it moves each
 * call's buffers to CUDA device memory (cudaMalloc, under mocks/cudart on a
 * CPU box), calls the library with the device pointers, and copies the
 * device output back over the host buffer the test checks -- whether the
 * call succeeded or not. So every assertion of the suite (results, parity,
 * "on failure the buffer holds what it held before, bit for bit") is checked
 * against what the library left in DEVICE memory.
 *
 * ECCL_TEST_DEVICE_PEERS=all (default) | odd | even: which peers use device
 * buffers, by the parity of their master-assigned peer id, for suites of
 * mixed host and device peers. Any CUDA failure here aborts the peer (the
 * harness reports it): the wrapper never hides an error. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eccl.h"

eccl_result __real_eccl_allreduce(eccl_comm *, const void *, void *, size_t, eccl_dtype, eccl_op, uint64_t,
                                  eccl_reduce_info *);
eccl_result __real_eccl_allreduce_ex(eccl_comm *, const void *, void *, size_t, eccl_dtype, eccl_op,
                                     uint64_t, const eccl_allreduce_opts *, eccl_reduce_info *);
eccl_result __real_eccl_allreduce_async(eccl_comm *, const void *, void *, size_t, eccl_dtype, eccl_op,
                                        uint64_t, eccl_request **);
eccl_result __real_eccl_allreduce_ex_async(eccl_comm *, const void *, void *, size_t, eccl_dtype, eccl_op,
                                           uint64_t, const eccl_allreduce_opts *, eccl_request **);
eccl_result __real_eccl_wait(eccl_request *, eccl_reduce_info *);
eccl_result __real_eccl_test(eccl_request *, int *, eccl_reduce_info *);

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "cuda_wrap: %s: %s\n", #call, cudaGetErrorString(e_));                 \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

typedef struct staged {
    void *host_out;
    void *dev_in, *dev_out;
    size_t bytes;
} staged;

static int device_peer(eccl_comm *c)
{
    const char *which = getenv("ECCL_TEST_DEVICE_PEERS");
    if (!which || !*which || !strcmp(which, "all")) return 1;
    int64_t id = 0;
    if (eccl_comm_get_attr(c, ECCL_ATTR_PEER_ID, &id) != ECCL_OK) return 1;
    return !strcmp(which, "odd") ? (id & 1) != 0 : (id & 1) == 0;
}

/* Host buffers in, device buffers out (contents copied); 0: leave on host. */
static int stage_in(eccl_comm *c, const void *send, void *recv, size_t count, eccl_dtype dtype, staged *s)
{
    memset(s, 0, sizeof *s);
    size_t es = eccl_dtype_size(dtype);
    /* What the library refuses goes to it unchanged, to be refused. */
    if (!c || !es || !count || count > SIZE_MAX / 16 / es || !send || !recv || !device_peer(c)) return 0;
    size_t bytes = count * es;
    s->host_out = recv;
    s->bytes = bytes;
    CU(cudaMalloc(&s->dev_out, bytes));
    CU(cudaMemcpy(s->dev_out, recv, bytes, cudaMemcpyHostToDevice));
    if (send == recv) {
        s->dev_in = s->dev_out;
    } else {
        CU(cudaMalloc(&s->dev_in, bytes));
        CU(cudaMemcpy(s->dev_in, send, bytes, cudaMemcpyHostToDevice));
    }
    return 1;
}

static void stage_out(staged *s)
{
    if (!s->bytes) return;
    CU(cudaMemcpy(s->host_out, s->dev_out, s->bytes, cudaMemcpyDeviceToHost));
    if (s->dev_in != s->dev_out) CU(cudaFree(s->dev_in));
    CU(cudaFree(s->dev_out));
    s->bytes = 0;
}

eccl_result __wrap_eccl_allreduce_ex(eccl_comm *c, const void *send, void *recv, size_t count,
                                     eccl_dtype dtype, eccl_op op, uint64_t tag,
                                     const eccl_allreduce_opts *opts, eccl_reduce_info *info)
{
    staged s;
    if (!stage_in(c, send, recv, count, dtype, &s))
        return __real_eccl_allreduce_ex(c, send, recv, count, dtype, op, tag, opts, info);
    eccl_result rc = __real_eccl_allreduce_ex(c, s.dev_in, s.dev_out, count, dtype, op, tag, opts, info);
    stage_out(&s);
    return rc;
}

eccl_result __wrap_eccl_allreduce(eccl_comm *c, const void *send, void *recv, size_t count, eccl_dtype dtype,
                                  eccl_op op, uint64_t tag, eccl_reduce_info *info)
{
    return __wrap_eccl_allreduce_ex(c, send, recv, count, dtype, op, tag, NULL, info);
}

/* Requests in flight with device buffers, to copy back when they end. */
#define MAX_INFLIGHT 1024
static pthread_mutex_t inflight_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    eccl_request *req;
    staged s;
} inflight[MAX_INFLIGHT];

static void inflight_end(eccl_request *req)
{
    staged s = {0};
    pthread_mutex_lock(&inflight_mu);
    for (int i = 0; i < MAX_INFLIGHT; i++)
        if (inflight[i].req == req) {
            s = inflight[i].s;
            inflight[i].req = NULL;
            break;
        }
    pthread_mutex_unlock(&inflight_mu);
    stage_out(&s);
}

eccl_result __wrap_eccl_allreduce_ex_async(eccl_comm *c, const void *send, void *recv, size_t count,
                                           eccl_dtype dtype, eccl_op op, uint64_t tag,
                                           const eccl_allreduce_opts *opts, eccl_request **req)
{
    staged s;
    if (!stage_in(c, send, recv, count, dtype, &s))
        return __real_eccl_allreduce_ex_async(c, send, recv, count, dtype, op, tag, opts, req);
    eccl_result rc = __real_eccl_allreduce_ex_async(c, s.dev_in, s.dev_out, count, dtype, op, tag, opts, req);
    if (rc != ECCL_OK) {
        stage_out(&s);
        return rc;
    }
    pthread_mutex_lock(&inflight_mu);
    int i = 0;
    while (i < MAX_INFLIGHT && inflight[i].req) i++;
    if (i == MAX_INFLIGHT) {
        fprintf(stderr, "cuda_wrap: more than %d requests in flight\n", MAX_INFLIGHT);
        abort();
    }
    inflight[i].req = *req;
    inflight[i].s = s;
    pthread_mutex_unlock(&inflight_mu);
    return rc;
}

eccl_result __wrap_eccl_allreduce_async(eccl_comm *c, const void *send, void *recv, size_t count,
                                        eccl_dtype dtype, eccl_op op, uint64_t tag, eccl_request **req)
{
    return __wrap_eccl_allreduce_ex_async(c, send, recv, count, dtype, op, tag, NULL, req);
}

eccl_result __wrap_eccl_wait(eccl_request *req, eccl_reduce_info *info)
{
    eccl_result rc = __real_eccl_wait(req, info);
    if (req) inflight_end(req);
    return rc;
}

eccl_result __wrap_eccl_test(eccl_request *req, int *done, eccl_reduce_info *info)
{
    eccl_result rc = __real_eccl_test(req, done, info);
    if (req && done && *done) inflight_end(req);
    return rc;
}

eccl_result __real_eccl_comm_sync_shared_state(eccl_comm *, eccl_shared_state *, eccl_sync_strategy,
                                               eccl_hash_type, eccl_sync_info *);

/* Shared state: every tensor with bytes moves to the device for the call
 * and comes back after it, whatever the result. */
eccl_result __wrap_eccl_comm_sync_shared_state(eccl_comm *c, eccl_shared_state *st, eccl_sync_strategy strategy,
                                               eccl_hash_type ht, eccl_sync_info *info)
{
    if (!c || !st || !st->count || !st->infos || !device_peer(c))
        return __real_eccl_comm_sync_shared_state(c, st, strategy, ht, info);
    eccl_tensor_info *dev = calloc(st->count, sizeof *dev);
    staged *s = calloc(st->count, sizeof *s);
    if (!dev || !s) abort();
    for (size_t i = 0; i < st->count; i++) {
        dev[i] = st->infos[i];
        if (stage_in(c, st->infos[i].data, st->infos[i].data, st->infos[i].count, st->infos[i].dtype, &s[i]))
            dev[i].data = s[i].dev_out;
    }
    eccl_shared_state shadow = {.revision = st->revision, .count = st->count, .infos = dev};
    eccl_result rc = __real_eccl_comm_sync_shared_state(c, &shadow, strategy, ht, info);
    st->revision = shadow.revision;
    for (size_t i = 0; i < st->count; i++) stage_out(&s[i]);
    free(dev);
    free(s);
    return rc;
}
