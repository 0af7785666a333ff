/* Device staging: how a collective on device tensors runs on host memory.
 *
 * Core moves bytes with the env's net and reduces with the env's dev ops on
 * host memory. A call whose buffers are on a device (CUDA device or managed
 * memory) runs on a pinned host *mirror*: before the call, the input is
 * copied into the mirror after the work queued on the caller's stream; the
 * collective runs in place on the mirror; only after it succeeded is the
 * mirror copied to the device output and the stream made to wait for that.
 * So the failure promise holds with no backup on the device at all: on any
 * failure the device output was never written.
 *
 * Why a whole mirror and not slices overlapped with the wire: it is the one
 * shape that keeps every algorithm (ring, tree, exchange, quantised) and
 * every failure path unchanged, and it costs two copies over the bus per
 * call. docs/devices.md measures it and says what a pipelined path would
 * change. */
#ifndef ECCL_CORE_COMM_STAGE_H
#define ECCL_CORE_COMM_STAGE_H

#include <stddef.h>

#include "env.h"

typedef struct eccl_stage {
    const eccl_env *env;
    int active;     /* the buffers are on a device; the mirror stands in */
    int resident;   /* ...or the call runs on them itself (the device-resident
                     * ring): no mirror, only stream ordering */
    int device;
    void *stream;   /* the caller's cudaStream_t (NULL: legacy default) */
    void *mirror;   /* pinned host memory, `bytes` */
    size_t bytes;
    void *dev_out;  /* the device output, written on success */
    size_t out_at, out_bytes; /* ... from this range of the mirror */
} eccl_stage;

/* Looks at one call's input and output (bytes each). Host memory: the stage
 * stays inactive and *in, *out are left alone. Device memory: allocates the
 * mirror, copies *in into it and points *in and *out at it (the collective
 * then runs in place). Errors, with nothing allocated: ECCL_ERR_INVALID_ARG
 * (host and device memory mixed, two devices, or a pointer the device
 * runtime does not know), ECCL_ERR_UNSUPPORTED (device memory and no device
 * runtime), ECCL_ERR_NO_MEMORY, ECCL_ERR_DEVICE (the copy failed). */
eccl_result eccl_stage_begin(eccl_stage *st, const eccl_env *env, const void **in, void **out,
                             size_t bytes, void *stream);

/* As eccl_stage_begin, but a call of at least `resident_min` bytes (0:
 * none) on device buffers whose env can run the device-resident ring gets
 * no mirror: st->resident is set, the library's stream is made to wait for
 * `stream`, and *in, *out stay the device pointers. */
eccl_result eccl_stage_begin_resident(eccl_stage *st, const eccl_env *env, const void **in, void **out,
                                      size_t bytes, void *stream, size_t resident_min);

/* Where a call's input and output sit in its mirror, when they are not one
 * buffer of one size (all-gather, reduce-scatter, and the rooted calls,
 * whose input or output may be absent: NULL, or 0 bytes). */
typedef struct eccl_stage_layout {
    size_t in_bytes, in_at;   /* the input goes to mirror + in_at */
    size_t out_bytes, out_at; /* the output comes from mirror + out_at */
    size_t mirror_bytes;
} eccl_stage_layout;

/* eccl_stage_begin for a layout: on device memory *in becomes mirror +
 * in_at and *out mirror + out_at (either stays NULL if it was), and the
 * collective runs on the mirror as if in place. */
eccl_result eccl_stage_begin_layout(eccl_stage *st, const eccl_env *env, const void **in, void **out,
                                    const eccl_stage_layout *lay, void *stream);

/* Ends a stage with the collective's result: on ECCL_OK copies the mirror
 * to the device output (ECCL_ERR_DEVICE if that copy fails); frees the
 * mirror either way. A resident stage on ECCL_OK makes the caller's stream
 * wait for the library's and waits for it (the op restored the output
 * itself on failure). Returns the final result. An inactive stage returns
 * `result` unchanged. */
eccl_result eccl_stage_end(eccl_stage *st, eccl_result result);

#endif /* ECCL_CORE_COMM_STAGE_H */
