/* The PCCL-style worker loop, written against eccl.h and a tiny launch
 * interface only, so the same source runs as a process (examples/worker.c)
 * and as a SimGrid actor (tests/sim/sim_worker.c).
 *
 * The loop makes no system call of its own: it creates its communicator,
 * sleeps, reads the clock and prints through `eccl_launch`. It holds no
 * mutable global, since simulated workers share one process.
 */
#ifndef ECCL_EXAMPLES_WORKER_LOOP_H
#define ECCL_EXAMPLES_WORKER_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include "eccl.h"

typedef struct eccl_launch {
    void *ctx; /* handed back to every op */
    /* Real: eccl_comm_create. Sim: eccl_sg_comm_create on the actor's world. */
    eccl_result (*comm_create)(void *ctx, const eccl_comm_params *params, eccl_comm **out);
    void (*sleep_ms)(void *ctx, int ms);
    double (*now_ms)(void *ctx); /* monotonic */
    /* One line, without its newline; to_stderr for diagnostics. */
    void (*print)(void *ctx, int to_stderr, const char *line);
    int pid; /* printed in event=connected */
    /* Where the loop's two all-reduce buffers (send, recv) come from: one
     * call each. NULL: malloc (host memory). Lets a launch hand out memory
     * the loop cannot: device memory, or the simulator's phantom buffers,
     * so that 10k simulated ranks x 64 MiB need no real bytes. */
    eccl_result (*buffer_alloc)(void *ctx, size_t bytes, void **out);
    void (*buffer_free)(void *ctx, void *p);
    /* 1: buffer_alloc's buffers are phantom (addresses with no bytes behind
     * them). The loop then never writes, hashes or checks their values: it
     * reports completion and time only (values=phantom on event=ok,
     * restored=unchecked on a failed step). */
    int phantom;
    /* 1: buffer_alloc's buffers are device memory the loop must not touch
     * (the simulator's `buffers = cuda`, or CUDA): the loop fills and reads
     * them through buffer_write / buffer_read (device = host bytes, host =
     * device bytes; both required then), keeping host copies of its own for
     * the values, and hands the device pointers to the library. With
     * phantom too, there are no bytes to move and neither is called. */
    int device;
    eccl_result (*buffer_write)(void *ctx, void *dev, const void *host, size_t bytes);
    eccl_result (*buffer_read)(void *ctx, void *host, const void *dev, size_t bytes);
} eccl_launch;

/* One line through L->print (printf-style, truncated at 511 bytes). */
void eccl_launch_emit(const eccl_launch *L, int to_stderr, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* FNV-1a over the 32-bit words of an f32 buffer: the loops' result and
 * model hashes, printed for parity checks. */
uint64_t eccl_launch_hash_f32(const float *p, size_t n);
/* The process launch (eccl-worker, eccl-diloco): eccl_comm_create,
 * nanosleep, CLOCK_MONOTONIC, stdout/stderr lines, getpid. Defined in
 * launch_real.c, which only processes link. */
void eccl_launch_real(eccl_launch *L);

typedef struct eccl_worker_options {
    const char *master;
    size_t count;    /* f32 elements */
    int iters;
    int world_min;
    int start_world; /* wait for this many peers before the first step */
    uint32_t group;
    int wait_ms;     /* give up after waiting this long for enough peers */
    int step_ms;     /* compute time of a training step, slept before each
                        iteration's all-reduce (once per iteration); 0: none */
    uint32_t peer_timeout_ms; /* the communicator's peer_timeout_ms; 0: default */
    uint32_t op_timeout_ms;   /* the communicator's op_timeout_ms; 0: default */
    int stall_at, stall_ms;   /* before iteration stall_at's all-reduce (its
                                 first try), wait stall_ms more: a rank whose
                                 program withholds a call while its
                                 communicator lives on; stall_ms 0: never */
    int optimize_at;  /* before this iteration every peer calls
                         eccl_comm_optimize_topology (once); 0: never */
    int rejoins;      /* times a lost master (ECCL_ERR_MASTER_LOST: the master
                         or the relay in front of it died) is answered by a new
                         communicator that joins as a newcomer, through the
                         next address of `master` ("RELAY,MASTER"); 0: it ends
                         the loop with status 1 */
} eccl_worker_options;

/* Connects, runs o->iters checked all-reduces, retrying on the survivors
 * after a peer loss, and prints one key=value line per event. Returns the
 * exit status: 0 when every step succeeded and checked out. */
int eccl_worker_run(const eccl_launch *L, const eccl_worker_options *o);

#endif /* ECCL_EXAMPLES_WORKER_LOOP_H */
