/* The collective trace (NCCLX's CollTrace): each communicator's record of
 * its last calls (what, when each phase was reached, how it ended) and of
 * the ring epochs it went through, in a ring that grows to its limit and
 * then overwrites its oldest record, so a call costs a few stores and no
 * allocation once the ring is grown. Written out as text (docs/trace.md:
 * "eccl-trace 1") on request and when a call fails; `eccl-trace analyze`
 * reads every rank's. The records are the comm's (the engine's mutex
 * guards them); this file knows nothing of comms. */
#ifndef ECCL_CORE_TRACE_TRACE_H
#define ECCL_CORE_TRACE_TRACE_H

#include <stddef.h>
#include <stdint.h>

#define ECCL_TRACE_VERSION 1
#define ECCL_TRACE_RECORDS 256u /* the default limit (ECCL_TRACE_RECORDS) */
#define ECCL_TRACE_START 8u     /* the ring's first size: most comms of a big simulation call little */

enum eccl_trace_kind {
    ECCL_TRACE_CALL = 0, /* a collective or a send/receive */
    ECCL_TRACE_EPOCH = 1 /* a new ring epoch (a view change) */
};

/* Phase times are microseconds after `posted_ns`, plus one: 0 is "not
 * reached", so a phase reached within the first microsecond reads 1. */
typedef struct eccl_trace_rec {
    uint64_t seq;        /* this comm's record number, from 1 */
    uint64_t tag;
    uint64_t bytes;      /* the call's input bytes on this rank */
    uint64_t posted_ns;  /* the env's clock: the call posted, or the epoch begun */
    int64_t epoch;
    uint32_t rank, world;
    uint32_t started_us; /* the algorithm ran (after a queue, or at once) */
    uint32_t first_us;   /* the first frame of it arrived */
    uint32_t data_us;    /* its data were complete (the result in place) */
    uint32_t end_us;     /* it ended: the caller has its result */
    uint8_t kind, coll, algo, dtype;
    int8_t result;       /* the eccl_result it ended with */
} eccl_trace_rec;

typedef struct eccl_trace {
    eccl_trace_rec *recs;
    uint32_t cap, max; /* slots allocated; the limit (0: off) */
    uint32_t n, head;  /* records held; the next slot */
    uint64_t next_seq;
} eccl_trace;

void eccl_trace_init(eccl_trace *t, uint32_t max);

/* An eccl_result as one word (without ECCL_ERR_, lower case: "ok",
 * "peer_lost", ...): how the trace file and the master's metrics name it. */
const char *eccl_trace_result_word(int result);
void eccl_trace_free(eccl_trace *t);

/* A new record (zeroed, but for its seq and kind; the oldest goes when the
 * ring is at its limit), or NULL: tracing is off, or the ring could not
 * grow and holds nothing. */
eccl_trace_rec *eccl_trace_add(eccl_trace *t, int kind);

/* Record `seq`, or NULL once it was overwritten (or never was). */
eccl_trace_rec *eccl_trace_find(eccl_trace *t, uint64_t seq);

/* Record i from the oldest (i < n). */
const eccl_trace_rec *eccl_trace_at(const eccl_trace *t, uint32_t i);

/* `now_ns` as a phase time of r (see above), saturating. */
uint32_t eccl_trace_since(const eccl_trace_rec *r, uint64_t now_ns);

/* The lines of records `from` on (kind, fields: docs/trace.md), appended
 * to buf[*used, len) as far as they fit whole; returns how many records
 * were written. */
uint32_t eccl_trace_format(const eccl_trace *t, uint32_t from, char *buf, size_t len, size_t *used);

#endif /* ECCL_CORE_TRACE_TRACE_H */
