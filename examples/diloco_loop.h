/* A DiLoCo-shaped worker loop, written against eccl.h and the launch
 * interface of worker_loop.h only, so the same source runs as a process
 * (examples/diloco.c, eccl-diloco, driven by tools/eccl_churn.c) and as a
 * SimGrid actor (eccl-sim's `workload = diloco`).
 *
 * One outer step ("revision"):
 *
 *   peers pending? -> update_topology (newcomers come in)
 *   sync the shared state {model, revision} (ENFORCE_POPULAR, HASH_SIMPLE):
 *       newcomers fetch the model from the peers that hold it
 *   all-reduce (SUM, async + wait) of this step's delta, which every peer
 *       computes alike from (revision, index): small integers in f32, so the
 *       result is exactly world x delta, and the loop checks every element
 *   advance the model deterministically from the result; revision + 1
 *   print  event=rev peer=.. revision=.. hash=.. world=.. advanced=1 t_ms=..
 *
 * A failed all-reduce (PEER_LOST, TOO_FEW_PEERS, TIMEOUT) must leave the
 * buffer as it was (checked); the model does not advance, but the revision
 * still moves on by one (advanced=0, same hash): the sync rule wants exactly
 * last + 1 from every peer of the last successful round, and each attempt's
 * tag is its revision, so a retry never meets a tag still in flight.
 *
 * Every peer of a ring sees the same outcome of an all-reduce, so every peer
 * that reports a revision must report the same hash for it: whoever reads the
 * lines checks that (scenarios/engine/churn_check.c). The loop itself flags, with
 * event=corrupt, a wrong all-reduce element, a buffer not restored after a
 * failure, and a peer that had already synced but had to fetch (its model had
 * diverged from the group's).
 *
 * No system call, no mutable global: time, sleep and output come from the
 * launch; nothing is allocated per step.
 */
#ifndef ECCL_EXAMPLES_DILOCO_LOOP_H
#define ECCL_EXAMPLES_DILOCO_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include "worker_loop.h"

typedef struct eccl_diloco_options {
    const char *master;
    size_t count;              /* f32 elements of the model; default 65536 (256 KiB) */
    int step_ms;               /* inner steps' compute, slept once per revision; 0: none */
    uint32_t peer_timeout_ms;  /* the communicator's; 0: the library default */
    uint32_t op_timeout_ms;    /* the communicator's; 0: the library default */
    /* Test only: after advancing to this revision, flip one bit of the model
     * and tell nobody (0: never). The checker must notice. */
    uint64_t corrupt_at;
    /* Stop: once the clock passes stop_after_ms, a peer votes (inside the
     * all-reduce) to stop; every peer stops after the revision in which any
     * peer voted. A peer alone past that time stops too. 0: run until killed. */
    double stop_after_ms;
    /* Alone (world < 2) for this long: give up (status 1). 0: wait forever. */
    int wait_ms;
} eccl_diloco_options;

/* Fills the defaults (master NULL). */
void eccl_diloco_options_init(eccl_diloco_options *o);

/* Connects and runs revisions until stopped or killed; one key=value line
 * per event through the launch. Returns the exit status: 0 when every step
 * checked out (and, with stop_after_ms, the group stopped together). */
int eccl_diloco_run(const eccl_launch *L, const eccl_diloco_options *o);

/* The hash printed on event=rev: FNV-1a over the model's 32-bit words. */
uint64_t eccl_diloco_hash(const float *model, size_t count);

#endif
