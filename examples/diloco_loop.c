/* The DiLoCo-shaped loop behind eccl-diloco and eccl-sim's diloco workload;
 * see diloco_loop.h for the shape and what it checks. */
#include "diloco_loop.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t eccl_diloco_hash(const float *model, size_t count) { return eccl_launch_hash_f32(model, count); }

void eccl_diloco_options_init(eccl_diloco_options *o)
{
    *o = (eccl_diloco_options){.count = 65536};
}

/* The model every peer starts from (a newcomer's copy is replaced by the
 * group's at its first sync anyway). Integers below 2^20: exact in f32. */
static float initial_value(size_t i) { return (float)((i * 2654435761u) & 0xFFFFFu); }

/* This revision's outer gradient, the same on every peer: a small integer,
 * so that the all-reduced sum is exactly world x delta in f32. */
static float delta_value(uint64_t rev, size_t i)
{
    return (float)((int)((rev * 31u + i * 7u) % 9u) - 4);
}

/* The outer optimiser: the next model from the current one and the sum.
 * Integer arithmetic on values below 2^20, so every peer gets the very same
 * bits whatever its compiler does with floats. */
static float advance_value(float m, float sum, size_t i)
{
    uint32_t mi = (uint32_t)m;
    uint32_t si = (uint32_t)(int32_t)sum;
    return (float)((mi * 5u + si + 7u + (uint32_t)i) & 0xFFFFFu);
}

static int retryable(eccl_result rc)
{
    return rc == ECCL_ERR_PEER_LOST || rc == ECCL_ERR_TOO_FEW_PEERS || rc == ECCL_ERR_TIMEOUT ||
           rc == ECCL_ERR_BUSY;
}

/* A tensor the library sees (`lib`) and the host copy the loop computes on
 * (`host`). They are one buffer, unless the launch gives device memory
 * (L->device: the simulator's `buffers = cuda`): then the loop moves the
 * bytes across itself, before and after each call, and the library stages
 * the device tensor as it would a CUDA one. */
typedef struct tensor {
    float *host;
    void *lib;
} tensor;

static int on_device(const eccl_launch *L) { return L->device && L->buffer_alloc && !L->phantom; }

static eccl_result tensor_alloc(const eccl_launch *L, tensor *t, size_t count)
{
    t->host = malloc(count * sizeof(float));
    t->lib = t->host;
    if (!t->host) return ECCL_ERR_NO_MEMORY;
    if (on_device(L) && L->buffer_alloc(L->ctx, count * sizeof(float), &t->lib) != ECCL_OK) {
        t->lib = NULL;
        return ECCL_ERR_NO_MEMORY;
    }
    return ECCL_OK;
}

static void tensor_free(const eccl_launch *L, tensor *t)
{
    if (t->lib && t->lib != t->host) L->buffer_free(L->ctx, t->lib);
    free(t->host);
}

static eccl_result to_lib(const eccl_launch *L, const tensor *t, size_t count)
{
    return t->lib == t->host ? ECCL_OK : L->buffer_write(L->ctx, t->lib, t->host, count * sizeof(float));
}

static eccl_result from_lib(const eccl_launch *L, const tensor *t, size_t count)
{
    return t->lib == t->host ? ECCL_OK : L->buffer_read(L->ctx, t->host, t->lib, count * sizeof(float));
}

int eccl_diloco_run(const eccl_launch *L, const eccl_diloco_options *opts)
{
    const eccl_diloco_options o = *opts;
    eccl_comm_params params;
    eccl_comm_params_init(&params);
    params.master_addr = o.master;
    if (o.peer_timeout_ms) params.peer_timeout_ms = o.peer_timeout_ms;
    if (o.op_timeout_ms) params.op_timeout_ms = o.op_timeout_ms;

    tensor model_t = {0}, delta_t = {0};
    if (o.count == 0 || tensor_alloc(L, &model_t, o.count) != ECCL_OK ||
        tensor_alloc(L, &delta_t, o.count + 1) != ECCL_OK) { /* + the stop vote */
        eccl_launch_emit(L, 1, "eccl-diloco: cannot allocate the model (%zu elements)", o.count);
        tensor_free(L, &model_t);
        tensor_free(L, &delta_t);
        return 1;
    }
    float *model = model_t.host, *delta = delta_t.host;
    for (size_t i = 0; i < o.count; i++) model[i] = initial_value(i);

    eccl_comm *comm = NULL;
    eccl_result rc = L->comm_create(L->ctx, &params, &comm);
    if (rc == ECCL_OK) rc = eccl_comm_connect(comm);
    if (rc != ECCL_OK) {
        eccl_launch_emit(L, 0, "event=error peer=-1 what=connect error=\"%s\"", eccl_strerror(rc));
        eccl_comm_destroy(comm);
        tensor_free(L, &model_t);
        tensor_free(L, &delta_t);
        return 1;
    }
    int64_t id = 0;
    eccl_comm_get_attr(comm, ECCL_ATTR_PEER_ID, &id);
    eccl_launch_emit(L, 0, "event=connected peer=%lld pid=%d t_ms=%.1f", (long long)id, L->pid,
         L->now_ms(L->ctx));

    eccl_tensor_info ti = {.key = "model", .data = model_t.lib, .count = o.count, .dtype = ECCL_F32};
    eccl_shared_state st = {.revision = 0, .count = 1, .infos = &ti};
    uint64_t rev = 0;   /* the model's revision */
    int have_synced = 0; /* took part in a successful sync: no longer a newcomer */
    int synced = 0;      /* synced at `rev` already */
    int status = 0, stop = 0;
    double alone_since = -1;
    while (!stop) {
        uint32_t pending = 0;
        const char *what = "pending";
        rc = eccl_comm_peers_pending(comm, &pending);
        if (rc == ECCL_OK && pending > 0) {
            what = "update_topology";
            rc = eccl_comm_update_topology(comm);
            if (rc == ECCL_OK) continue; /* everyone asks again, newcomers too */
        }
        if (rc != ECCL_OK) {
            if (retryable(rc)) {
                eccl_launch_emit(L, 0, "event=retry peer=%lld revision=%llu what=%s error=\"%s\"",
                     (long long)id, (unsigned long long)rev, what, eccl_strerror(rc));
                continue;
            }
            eccl_launch_emit(L, 0, "event=error peer=%lld revision=%llu what=%s error=\"%s\"", (long long)id,
                 (unsigned long long)rev, what, eccl_strerror(rc));
            status = 1;
            break;
        }
        int64_t world = 0;
        eccl_comm_get_attr(comm, ECCL_ATTR_WORLD_SIZE, &world);
        if (world < 2) {
            double now = L->now_ms(L->ctx);
            if (alone_since < 0) alone_since = now;
            if (o.stop_after_ms > 0 && now >= o.stop_after_ms) break; /* nobody left to vote */
            if (o.wait_ms > 0 && now - alone_since > o.wait_ms) {
                eccl_launch_emit(L, 0, "event=gave_up peer=%lld revision=%llu world=%lld", (long long)id,
                     (unsigned long long)rev, (long long)world);
                status = 1;
                break;
            }
            L->sleep_ms(L->ctx, 10);
            continue;
        }
        alone_since = -1;

        if (!synced) {
            eccl_sync_info si = {0};
            st.revision = rev; /* exactly last + 1 once synced; a newcomer's is its own business */
            rc = to_lib(L, &model_t, o.count);
            if (rc == ECCL_OK)
                rc = eccl_comm_sync_shared_state(comm, &st, ECCL_SYNC_ENFORCE_POPULAR, ECCL_HASH_SIMPLE,
                                                 &si);
            /* What the sync left in the library's tensor, fetched or not. */
            eccl_result back = from_lib(L, &model_t, o.count);
            if (rc == ECCL_OK) rc = back;
            if (rc != ECCL_OK) {
                if (rc == ECCL_ERR_PEER_LOST || rc == ECCL_ERR_TIMEOUT || rc == ECCL_ERR_BUSY) {
                    eccl_launch_emit(L, 0, "event=retry peer=%lld revision=%llu what=sync error=\"%s\"",
                         (long long)id, (unsigned long long)rev, eccl_strerror(rc));
                    continue; /* a failed round is retried at the same revision */
                }
                eccl_launch_emit(L, 0, "event=error peer=%lld revision=%llu what=sync error=\"%s\"",
                     (long long)id, (unsigned long long)rev, eccl_strerror(rc));
                status = 1;
                break;
            }
            if (have_synced && si.keys_fetched > 0) {
                /* Our model differed from the group's although we were in
                 * step with it: someone's all-reduce outcome or advance
                 * diverged. The sync repaired it; the run is still wrong. */
                eccl_launch_emit(L, 0, "event=corrupt peer=%lld revision=%llu what=diverged fetched=%u",
                     (long long)id, (unsigned long long)st.revision, si.keys_fetched);
                status = 1;
            }
            if (!have_synced)
                eccl_launch_emit(L, 0,
                     "event=joined peer=%lld revision=%llu hash=%016llx fetched=%u rx_bytes=%llu "
                     "world=%lld t_ms=%.1f",
                     (long long)id, (unsigned long long)st.revision,
                     (unsigned long long)eccl_launch_hash_f32(model, o.count), si.keys_fetched,
                     (unsigned long long)si.rx_bytes, (long long)world, L->now_ms(L->ctx));
            rev = st.revision;
            have_synced = synced = 1;
        }

        if (o.step_ms > 0) L->sleep_ms(L->ctx, o.step_ms); /* the inner steps */
        for (size_t i = 0; i < o.count; i++) delta[i] = delta_value(rev, i);
        delta[o.count] = o.stop_after_ms > 0 && L->now_ms(L->ctx) >= o.stop_after_ms;
        uint64_t before = eccl_launch_hash_f32(delta, o.count + 1);
        eccl_request *req = NULL;
        eccl_reduce_info info = {0};
        const uint64_t tag = (1ull << 62) | rev; /* one attempt per revision */
        rc = to_lib(L, &delta_t, o.count + 1);
        if (rc == ECCL_OK)
            rc = eccl_allreduce_async(comm, delta_t.lib, delta_t.lib, o.count + 1, ECCL_F32, ECCL_SUM, tag, &req);
        if (rc == ECCL_OK) rc = eccl_wait(req, &info);
        eccl_result back = from_lib(L, &delta_t, o.count + 1);
        if (rc == ECCL_OK) rc = back;
        if (rc == ECCL_ERR_PEER_LOST || rc == ECCL_ERR_TOO_FEW_PEERS || rc == ECCL_ERR_TIMEOUT) {
            int restored = eccl_launch_hash_f32(delta, o.count + 1) == before;
            eccl_launch_emit(L, 0, "event=retry peer=%lld revision=%llu what=allreduce error=\"%s\" restored=%s",
                 (long long)id, (unsigned long long)rev, eccl_strerror(rc),
                 restored ? "yes" : "NO");
            if (!restored) {
                eccl_launch_emit(L, 0, "event=corrupt peer=%lld revision=%llu what=not_restored",
                     (long long)id, (unsigned long long)rev);
                status = 1;
            }
            /* No advance; the revision still moves on (see the header). */
            rev++;
            synced = 0;
            eccl_launch_emit(L, 0, "event=rev peer=%lld revision=%llu hash=%016llx world=%lld advanced=0 t_ms=%.1f",
                 (long long)id, (unsigned long long)rev,
                 (unsigned long long)eccl_launch_hash_f32(model, o.count), (long long)world, L->now_ms(L->ctx));
            continue;
        }
        if (rc != ECCL_OK) {
            eccl_launch_emit(L, 0, "event=error peer=%lld revision=%llu what=allreduce error=\"%s\"",
                 (long long)id, (unsigned long long)rev, eccl_strerror(rc));
            status = 1;
            break;
        }
        size_t wrong = 0;
        const float w = (float)info.world_size;
        for (size_t i = 0; i < o.count; i++) wrong += delta[i] != w * delta_value(rev, i);
        if (!(delta[o.count] >= 0 && delta[o.count] <= w)) wrong++;
        if (wrong) {
            eccl_launch_emit(L, 0, "event=corrupt peer=%lld revision=%llu what=allreduce wrong=%zu world=%u",
                 (long long)id, (unsigned long long)rev, wrong, info.world_size);
            status = 1;
        }
        stop = delta[o.count] > 0;
        for (size_t i = 0; i < o.count; i++) model[i] = advance_value(model[i], delta[i], i);
        rev++;
        synced = 0;
        if (o.corrupt_at && rev == o.corrupt_at) {
            uint32_t bits;
            memcpy(&bits, &model[o.count / 2], sizeof bits);
            bits ^= 1u << 3;
            memcpy(&model[o.count / 2], &bits, sizeof bits);
        }
        eccl_launch_emit(L, 0, "event=rev peer=%lld revision=%llu hash=%016llx world=%u advanced=1 t_ms=%.1f",
             (long long)id, (unsigned long long)rev, (unsigned long long)eccl_launch_hash_f32(model, o.count),
             info.world_size, L->now_ms(L->ctx));
    }
    eccl_comm_destroy(comm);
    tensor_free(L, &model_t);
    tensor_free(L, &delta_t);
    eccl_launch_emit(L, 0, "event=exit peer=%lld revision=%llu status=%d", (long long)id,
         (unsigned long long)rev, status);
    return status;
}
