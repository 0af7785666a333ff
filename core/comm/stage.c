#include "comm/stage.h"

#include <string.h>

#include "util/log.h"

/* Host and host-registered memory is read by the host path directly;
 * device and managed memory goes through a mirror (managed memory too,
 * because the caller's stream may still be writing it). */
static int kind_on_device(eccl_mem_kind k) { return k == ECCL_MEM_DEVICE || k == ECCL_MEM_MANAGED; }

/* A pointer to check, or none (absent, or no bytes of it). */
static eccl_result kind_of(const eccl_env *env, const void *p, size_t bytes, eccl_mem_kind *k, int *dev)
{
    *k = ECCL_MEM_HOST;
    *dev = -1;
    if (!p || !bytes) return ECCL_OK;
    return env->dev->mem_kind(env->dev_ctx, p, bytes, k, dev);
}

static eccl_result stage_begin(eccl_stage *st, const eccl_env *env, const void **in, void **out,
                               const eccl_stage_layout *lay, void *stream, size_t resident_min)
{
    memset(st, 0, sizeof *st);
    st->env = env;
    if (lay->mirror_bytes == 0 || !eccl_dev_has_devices(env)) return ECCL_OK;
    const eccl_dev_ops *d = env->dev;
    eccl_mem_kind kin, kout;
    int din, dout;
    int has_in = *in && lay->in_bytes, has_out = *out && lay->out_bytes;
    eccl_result rc = kind_of(env, *in, lay->in_bytes, &kin, &din);
    if (rc == ECCL_OK) rc = kind_of(env, *out, lay->out_bytes, &kout, &dout);
    if (rc != ECCL_OK) return rc;
    if (!has_in) kin = kout, din = dout;
    if (!has_out) kout = kin, dout = din;
    if (kind_on_device(kin) != kind_on_device(kout)) {
        ECCL_WARN(env, "input and output are of different kinds (%d, %d): one must not be on a device "
                       "and the other not", (int)kin, (int)kout);
        return ECCL_ERR_INVALID_ARG;
    }
    if (!kind_on_device(kin)) return ECCL_OK;
    if (din != dout) {
        ECCL_WARN(env, "input on device %d, output on device %d: one call, one device", din, dout);
        return ECCL_ERR_INVALID_ARG;
    }
    if (resident_min && lay->mirror_bytes >= resident_min && eccl_dev_has_dring(env)) {
        rc = d->d_order(env->dev_ctx, din, stream, 1);
        if (rc != ECCL_OK) return rc;
        st->resident = 1;
        st->device = din;
        st->stream = stream;
        return ECCL_OK;
    }
    uint8_t *mirror;
    rc = d->host_alloc(env->dev_ctx, lay->mirror_bytes, (void **)&mirror);
    if (rc != ECCL_OK) return rc;
    if (has_in) rc = d->to_host(env->dev_ctx, din, stream, mirror + lay->in_at, *in, lay->in_bytes);
    if (rc != ECCL_OK) {
        d->host_free(env->dev_ctx, mirror, lay->mirror_bytes);
        return rc;
    }
    st->active = 1;
    st->device = din;
    st->stream = stream;
    st->mirror = mirror;
    st->bytes = lay->mirror_bytes;
    st->dev_out = has_out ? *out : NULL;
    st->out_at = lay->out_at;
    st->out_bytes = has_out ? lay->out_bytes : 0;
    if (*in) *in = mirror + lay->in_at;
    if (*out) *out = mirror + lay->out_at;
    return ECCL_OK;
}

eccl_result eccl_stage_begin(eccl_stage *st, const eccl_env *env, const void **in, void **out,
                             size_t bytes, void *stream)
{
    return eccl_stage_begin_resident(st, env, in, out, bytes, stream, 0);
}

eccl_result eccl_stage_begin_resident(eccl_stage *st, const eccl_env *env, const void **in, void **out,
                                      size_t bytes, void *stream, size_t resident_min)
{
    eccl_stage_layout lay = {bytes, 0, bytes, 0, bytes};
    return stage_begin(st, env, in, out, &lay, stream, resident_min);
}

eccl_result eccl_stage_begin_layout(eccl_stage *st, const eccl_env *env, const void **in, void **out,
                                    const eccl_stage_layout *lay, void *stream)
{
    return stage_begin(st, env, in, out, lay, stream, 0);
}

eccl_result eccl_stage_end(eccl_stage *st, eccl_result result)
{
    const eccl_dev_ops *d = st->env ? st->env->dev : NULL;
    if (st->resident) {
        st->resident = 0;
        if (result != ECCL_OK) return result;
        result = d->d_order(st->env->dev_ctx, st->device, st->stream, 0);
        return result == ECCL_OK ? d->d_sync(st->env->dev_ctx, st->device) : result;
    }
    if (!st->active) return result;
    if (result == ECCL_OK && st->out_bytes)
        result = d->to_device(st->env->dev_ctx, st->device, st->stream, st->dev_out,
                              (uint8_t *)st->mirror + st->out_at, st->out_bytes);
    d->host_free(st->env->dev_ctx, st->mirror, st->bytes);
    st->active = 0;
    st->mirror = NULL;
    return result;
}
