/* The launch of a worker that runs as a SimGrid actor: communicators on the
 * simulation's world, bound to the actor's host; simulated sleep and clock;
 * phantom all-reduce buffers when the world's device is phantom; with
 * simulated devices (buffers = cuda) a device of the rank's own, on which
 * its comms are created and its all-reduce buffers allocated.
 * Lines go to the caller's `print`, with the caller's own pointer. */
#ifndef ECCL_EXAMPLES_WORKER_LOOP_SG_H
#define ECCL_EXAMPLES_WORKER_LOOP_SG_H

#include "env_sg.h"
#include "worker_loop.h"

typedef struct eccl_worker_sg {
    eccl_launch launch; /* pass &this->launch to eccl_worker_run */
    eccl_sg_world *world;
    eccl_sg_device *device; /* the rank's simulated GPU (buffers = cuda), else NULL */
    void (*print)(void *user, int to_stderr, const char *line);
    void *user;
} eccl_worker_sg;

/* Fills `s` for the calling actor; `s` must outlive eccl_worker_run. */
void eccl_worker_sg_init(eccl_worker_sg *s, eccl_sg_world *world,
                         void (*print)(void *user, int to_stderr, const char *line), void *user);

#endif
