/* A host env for tests that drive core's state machines in one process:
 * channels and collectives on plain host memory, a clock that stands still,
 * no log. No sockets: the tests move frames themselves (pop_frame). */
#ifndef ECCL_TESTS_HOST_ENV_H
#define ECCL_TESTS_HOST_ENV_H

#include <stdlib.h>
#include <string.h>

#include "coll/reduce.h"
#include "env.h"
#include "proto/chan.h"

static uint64_t h_now(void *ctx) { (void)ctx; return 0; }
static const eccl_clock_ops h_clock = {sizeof h_clock, h_now, NULL};
static eccl_result h_alloc(void *ctx, size_t bytes, void **out)
{
    (void)ctx;
    *out = malloc(bytes ? bytes : 1);
    return *out ? ECCL_OK : ECCL_ERR_NO_MEMORY;
}
static void h_free(void *ctx, void *p) { (void)ctx; free(p); }
static void h_copy(void *ctx, void *d, const void *s, size_t n) { (void)ctx; if (n) memmove(d, s, n); }
static void h_reduce(void *ctx, void *d, const void *s, size_t n, eccl_dtype t, eccl_op op)
{
    (void)ctx;
    eccl_reduce_into(d, s, n, t, op);
}
static void h_div(void *ctx, void *x, size_t n, eccl_dtype t, uint32_t k)
{
    (void)ctx;
    eccl_reduce_scale_div(x, n, t, k);
}
static const eccl_dev_ops h_dev = {.size = sizeof h_dev, .alloc = h_alloc, .free = h_free, .copy = h_copy,
                                   .reduce = h_reduce, .scale_div = h_div};
static void h_log(void *ctx, int level, const char *line) { (void)ctx, (void)level, (void)line; }
static const eccl_log_ops h_logops = {sizeof h_logops, h_log};

static inline eccl_env host_env(void)
{
    eccl_env e;
    memset(&e, 0, sizeof e);
    e.clock = &h_clock;
    e.dev = &h_dev;
    e.log = &h_logops;
    return e;
}

/* Takes the head frame off a channel as if the socket had written it. */
static inline void pop_frame(eccl_chan *ch)
{
    eccl_frame *f = ch->out_head;
    ch->out_head = f->next;
    if (!ch->out_head) ch->out_tail = NULL;
    ch->queued_bytes -= f->head_len + f->payload_len;
    if (f->inflight) (*f->inflight)--;
    f->inflight = NULL;
    f->next = ch->free_frames;
    ch->free_frames = f;
}

#endif /* ECCL_TESTS_HOST_ENV_H */
