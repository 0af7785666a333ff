#include "trace/trace.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/dispatch.h"
#include "eccl_core.h"

void eccl_trace_init(eccl_trace *t, uint32_t max)
{
    memset(t, 0, sizeof *t);
    t->max = max;
    t->next_seq = 1;
}

void eccl_trace_free(eccl_trace *t)
{
    free(t->recs);
    t->recs = NULL;
    t->cap = t->n = t->head = 0;
}

/* Doubles the ring (up to max), the records oldest first. */
static int grow(eccl_trace *t)
{
    uint32_t cap = t->cap ? 2 * t->cap : ECCL_TRACE_START;
    if (cap > t->max) cap = t->max;
    eccl_trace_rec *r = malloc((size_t)cap * sizeof *r);
    if (!r) return 0;
    for (uint32_t i = 0; i < t->n; i++) r[i] = *eccl_trace_at(t, i);
    free(t->recs);
    t->recs = r;
    t->cap = cap;
    t->head = t->n;
    return 1;
}

eccl_trace_rec *eccl_trace_add(eccl_trace *t, int kind)
{
    if (t->max == 0) return NULL;
    if (t->n == t->cap && t->cap < t->max && !grow(t) && t->cap == 0) return NULL;
    eccl_trace_rec *r = &t->recs[t->head];
    memset(r, 0, sizeof *r);
    r->seq = t->next_seq++;
    r->kind = (uint8_t)kind;
    t->head = (t->head + 1) % t->cap;
    if (t->n < t->cap) t->n++;
    return r;
}

const eccl_trace_rec *eccl_trace_at(const eccl_trace *t, uint32_t i)
{
    return &t->recs[(t->head + t->cap - t->n + i) % t->cap];
}

eccl_trace_rec *eccl_trace_find(eccl_trace *t, uint64_t seq)
{
    uint64_t back = t->next_seq - seq; /* 1: the newest */
    if (seq == 0 || back == 0 || back > t->n) return NULL;
    return &t->recs[(t->head + t->cap - (uint32_t)back) % t->cap];
}

uint32_t eccl_trace_since(const eccl_trace_rec *r, uint64_t now_ns)
{
    uint64_t us = now_ns > r->posted_ns ? (now_ns - r->posted_ns) / 1000 : 0;
    return us >= UINT32_MAX - 1 ? UINT32_MAX : (uint32_t)us + 1;
}

static const char *coll_name(uint8_t coll)
{
    const char *n = eccl_dispatch_coll_name((eccl_coll_kind)coll);
    return n ? n : "?";
}

static const char *algo_name(uint8_t algo)
{
    const char *n = eccl_dispatch_algo_name((eccl_algorithm)algo);
    return n ? n : "none";
}

const char *eccl_trace_result_word(int result)
{
    static const char *const words[] = {"ok",     "invalid_arg", "no_memory",     "system",     "connect",
                                        "timeout", "peer_lost",  "too_few_peers", "protocol",   "kicked",
                                        "master_lost", "busy",   "not_connected", "again",      "closed",
                                        "unsupported", "device", "auth"};
    return result >= 0 && (size_t)result < sizeof words / sizeof words[0] ? words[result] : "error";
}

/* A phase time as the file has it: "-" when not reached, else µs. */
static void phase(char out[16], uint32_t v)
{
    if (v == 0)
        snprintf(out, 16, "-");
    else
        snprintf(out, 16, "%" PRIu32, v - 1);
}

static int format_one(const eccl_trace_rec *r, char *buf, size_t len)
{
    if (r->kind == ECCL_TRACE_EPOCH)
        return snprintf(buf, len, "epoch seq=%" PRIu64 " epoch=%" PRId64 " rank=%" PRIu32 " world=%" PRIu32
                        " at_ns=%" PRIu64 "\n",
                        r->seq, r->epoch, r->rank, r->world, r->posted_ns);
    char s[16], f[16], d[16], e[16];
    phase(s, r->started_us);
    phase(f, r->first_us);
    phase(d, r->data_us);
    phase(e, r->end_us);
    return snprintf(buf, len,
                    "call seq=%" PRIu64 " tag=%" PRIu64 " coll=%s algo=%s bytes=%" PRIu64 " dtype=%s epoch=%" PRId64
                    " rank=%" PRIu32 " world=%" PRIu32 " posted_ns=%" PRIu64
                    " started_us=%s first_us=%s data_us=%s end_us=%s result=%s\n",
                    r->seq, r->tag, coll_name(r->coll), algo_name(r->algo), r->bytes,
                    eccl_dtype_name((eccl_dtype)r->dtype), r->epoch, r->rank, r->world, r->posted_ns, s, f, d,
                    e, r->end_us ? eccl_trace_result_word(r->result) : "running");
}

uint32_t eccl_trace_format(const eccl_trace *t, uint32_t from, char *buf, size_t len, size_t *used)
{
    uint32_t done = 0;
    for (uint32_t i = from; i < t->n; i++, done++) {
        size_t room = len > *used ? len - *used : 0;
        int k = format_one(eccl_trace_at(t, i), buf + *used, room);
        if (k < 0 || (size_t)k >= room) break;
        *used += (size_t)k;
    }
    return done;
}
