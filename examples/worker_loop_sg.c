#include "worker_loop_sg.h"

#include <simgrid/actor.h>
#include <simgrid/host.h>

static eccl_result sg_comm_create(void *ctx, const eccl_comm_params *params, eccl_comm **out)
{
    eccl_worker_sg *s = ctx;
    eccl_comm_params p = *params;
    p.p2p_host = sg_host_self_get_name();
    return eccl_sg_comm_create(s->world, &p, out);
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

void eccl_worker_sg_init(eccl_worker_sg *s, eccl_sg_world *world,
                         void (*print)(void *user, int to_stderr, const char *line), void *user)
{
    s->world = world;
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
    if (eccl_sg_world_dev(world)->phantom) {
        s->launch.buffer_alloc = sg_phantom_buffer;
        s->launch.phantom = 1;
    }
}
