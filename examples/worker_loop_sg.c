#include "worker_loop_sg.h"

#include <simgrid/actor.h>
#include <simgrid/host.h>

static eccl_result sg_comm_create(void *ctx, const eccl_comm_params *params, eccl_comm **out)
{
    eccl_worker_sg *s = ctx;
    eccl_comm_params p = *params;
    p.p2p_host = sg_host_self_get_name();
    return eccl_sg_comm_create_on(s->world, s->device, &p, out);
}

static void sg_sleep_ms(void *ctx, int ms)
{
    (void)ctx;
    sg_actor_sleep_for(ms / 1e3);
}

static double sg_now_ms(void *ctx)
{
    (void)ctx;
    return (double)eccl_sg_now_ns() / 1e6;
}

static void sg_print(void *ctx, int to_stderr, const char *line)
{
    eccl_worker_sg *s = ctx;
    s->print(s->user, to_stderr, line);
}

/* Phantom mode: the buffers are addresses in the world's phantom region,
 * so a rank's 2 x count x 4 bytes cost no memory; nothing to free. */
static eccl_result sg_phantom_buffer(void *ctx, size_t bytes, void **out)
{
    eccl_worker_sg *s = ctx;
    return eccl_sg_phantom_alloc(s->world, bytes, out);
}

/* Simulated devices: the buffers are device memory of the rank's device,
 * filled and read through it (no simulated time: the program's own kernels),
 * freed with it. */
static eccl_result sg_device_buffer(void *ctx, size_t bytes, void **out)
{
    eccl_worker_sg *s = ctx;
    return s->device ? eccl_sg_device_alloc(s->device, bytes, out) : ECCL_ERR_NO_MEMORY;
}

static void sg_device_buffer_free(void *ctx, void *p)
{
    eccl_worker_sg *s = ctx;
    eccl_sg_device_free(s->device, p);
}

static eccl_result sg_device_write(void *ctx, void *dev, const void *host, size_t bytes)
{
    eccl_worker_sg *s = ctx;
    return eccl_sg_device_write(s->device, dev, host, bytes);
}

static eccl_result sg_device_read(void *ctx, void *host, const void *dev, size_t bytes)
{
    eccl_worker_sg *s = ctx;
    return eccl_sg_device_read(s->device, host, dev, bytes);
}

void eccl_worker_sg_init(eccl_worker_sg *s, eccl_sg_world *world,
                         void (*print)(void *user, int to_stderr, const char *line), void *user)
{
    s->world = world;
    s->device = NULL;
    s->print = print;
    s->user = user;
    s->launch = (eccl_launch){
        .ctx = s,
        .comm_create = sg_comm_create,
        .sleep_ms = sg_sleep_ms,
        .now_ms = sg_now_ms,
        .print = sg_print,
        .pid = (int)sg_actor_self_get_pid(),
    };
    if (eccl_sg_world_dev(world)->devices) {
        /* One GPU per rank (the world owns it: a killed rank's stays). */
        if (eccl_sg_device_create(world, &s->device) != ECCL_OK) s->device = NULL;
        s->launch.buffer_alloc = sg_device_buffer;
        s->launch.buffer_free = sg_device_buffer_free;
        s->launch.buffer_write = sg_device_write;
        s->launch.buffer_read = sg_device_read;
        s->launch.device = 1;
        s->launch.phantom = eccl_sg_world_dev(world)->phantom;
    } else if (eccl_sg_world_dev(world)->phantom) {
        s->launch.buffer_alloc = sg_phantom_buffer;
        s->launch.phantom = 1;
    }
}
