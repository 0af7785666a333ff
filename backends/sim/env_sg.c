/* The sim env: SimGrid clock, a mutex in plain memory and a semaphore-based
 * condition variable (see sg_internal.h), actors as threads, a simulated device
 * (dev_sim: host memory or phantom buffers, with simulated compute time;
 * with devices, a simulated GPU per rank whose device memory core stages
 * through host mirrors), log lines stamped with simulated time. */
/* mmap flags MAP_ANONYMOUS, MAP_NORESERVE (phantom region). */
#define _DEFAULT_SOURCE
#include "env_sg.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/mman.h>

#include <simgrid/engine.h>
#include <xbt/dynar.h>

#include "coll/reduce.h"
#include "proto/wire.h"
#include "eccl_core.h"
#include "sg_internal.h"

/* "HOST:0" binds hand out ports from here (deterministic, per world). */
#define FIRST_PORT 40000u
/* Address space reserved for phantom buffers: 4 x the largest buffer a
 * scenario takes (2^26 f32), so a call's send, recv, backup and staging
 * get distinct addresses. Costs no memory: nothing is ever mapped in. */
#define PHANTOM_REGION (4ull << 30)
/* Shortest sleep SimGrid takes as given: its default timing precision. */
#define DEV_MIN_SLEEP_S 1e-9
/* Address space reserved for simulated device memory (buffers = cuda):
 * never reused, so it bounds the device bytes a run allocates in all
 * (1 TiB: 1,024 ranks x 2 x 256 MiB twice over); reserved smaller down to
 * 16 GiB where the machine refuses that much. Costs no memory. */
#define DEVMEM_REGION (1ull << 40)
#define DEVMEM_REGION_MIN (1ull << 34)
#define DEVMEM_ALIGN 4096u
/* Mailbox lanes of a master's env (sg_env.lanes): a 100k-rank burst leaves
 * a few hundred messages a lane. */
#define MASTER_LANES 256u

uint64_t eccl_sg_now_ns(void)
{
    return (uint64_t)llround(simgrid_get_clock() * 1e9);
}

static int format_prefix(char *buf, size_t size, const char *who)
{
    uint64_t t = eccl_sg_now_ns();
    return snprintf(buf, size, "[%4llu.%09llu] %-8s ", (unsigned long long)(t / 1000000000u),
                    (unsigned long long)(t % 1000000000u), who);
}

void eccl_sg_printf(const char *who, const char *fmt, ...)
{
    char line[1024];
    int n = format_prefix(line, sizeof line, who);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* One process, one actor running at a time: lines never interleave. */
    puts(line);
}

/* ---- clock --------------------------------------------------------------- */

static uint64_t sg_now(void *ctx)
{
    (void)ctx;
    return eccl_sg_now_ns();
}

/* Bookkeeping a coordinator did without a message of its own (the entries
 * of a relay's batch): CPU time, slept with the messages' at the next wait. */
static void sg_work(void *ctx, uint64_t units)
{
    sg_env *e = ctx;
    e->msg_debt_s += (double)units * e->work_cost_s;
}

static const eccl_clock_ops sg_clock_ops = {
    .size = sizeof(eccl_clock_ops),
    .now_ns = sg_now,
    .work = sg_work,
};

/* ---- sync ---------------------------------------------------------------- */
/* eccl_mutex is SimGrid's own handle, cast; eccl_cond is an sg_cv. */

struct eccl_thread {
    eccl_sg_world *w;
    sg_actor_t actor;
    void (*fn)(void *);
    void *arg;
};

struct sg_lock_waiter {
    sg_sem_t sem;
    aid_t pid;
    sg_lock_waiter *next;
};

void eccl_sg_lock(sg_lock *m)
{
    if (!m->held) {
        m->held = 1; /* no simcall: nobody else runs until we make one */
        return;
    }
    /* On the heap, not the stack: if this actor is killed while it waits,
     * unlock finds the node (and frees it) instead of a dead frame. */
    sg_lock_waiter *w = malloc(sizeof *w);
    if (!w) abort(); /* a lost lock would hang the rank silently */
    w->sem = sg_sem_init(0);
    w->pid = sg_actor_self_get_pid();
    w->next = NULL;
    if (m->tail) m->tail->next = w;
    else m->head = w;
    m->tail = w;
    sg_sem_acquire(w->sem);
    /* unlock handed the mutex to us (held stayed 1) and unlinked w. */
    sg_sem_destroy(w->sem);
    free(w);
}

void eccl_sg_unlock(sg_lock *m)
{
    while (m->head) {
        sg_lock_waiter *w = m->head;
        m->head = w->next;
        if (!m->head) m->tail = NULL;
        if (sg_actor_by_pid(w->pid)) {
            sg_sem_release(w->sem); /* ownership passes: held stays 1 */
            return;
        }
        /* Killed while it waited (its whole process is going). */
        sg_sem_destroy(w->sem);
        free(w);
    }
    m->held = 0;
}

static eccl_result sg_mutex_create_(void *ctx, eccl_mutex **out)
{
    (void)ctx;
    *out = calloc(1, sizeof(sg_lock));
    return *out ? ECCL_OK : ECCL_ERR_NO_MEMORY;
}

static void sg_mutex_destroy_(void *ctx, eccl_mutex *m)
{
    (void)ctx;
    free(m);
}

static void sg_lock_(void *ctx, eccl_mutex *m)
{
    (void)ctx;
    eccl_sg_lock((sg_lock *)m);
}

static void sg_unlock_(void *ctx, eccl_mutex *m)
{
    (void)ctx;
    eccl_sg_unlock((sg_lock *)m);
}

struct sg_waiter {
    sg_sem_t sem;
    int queued; /* still in the cv's list: nobody committed to wake it */
    sg_waiter *next;
};

int eccl_sg_cv_wait(sg_cv *cv, sg_lock *m, double timeout_s)
{
    sg_waiter w = {.sem = cv->spare ? cv->spare : sg_sem_init(0), .queued = 1, .next = NULL};
    cv->spare = NULL;
    sg_waiter **pp = &cv->head;
    while (*pp) pp = &(*pp)->next;
    *pp = &w; /* FIFO: deterministic wake order */
    if (m) eccl_sg_unlock(m);
    int timed_out = 0;
    if (timeout_s < 0)
        sg_sem_acquire(w.sem);
    else
        timed_out = sg_sem_acquire_timeout(w.sem, timeout_s) != 0;
    if (timed_out) {
        if (w.queued) {
            for (pp = &cv->head; *pp; pp = &(*pp)->next) {
                if (*pp == &w) {
                    *pp = w.next;
                    break;
                }
            }
        } else {
            /* A broadcast took us off the list and will release our
             * semaphore: wait for it, so it never touches a dead frame. */
            sg_sem_acquire(w.sem);
        }
    }
    if (cv->spare) sg_sem_destroy(w.sem);
    else cv->spare = w.sem;
    if (m) eccl_sg_lock(m);
    return timed_out;
}

void eccl_sg_cv_fini(sg_cv *cv)
{
    if (cv->spare) sg_sem_destroy(cv->spare);
    cv->spare = NULL;
}

void eccl_sg_cv_broadcast(sg_cv *cv)
{
    sg_waiter *list = cv->head;
    cv->head = NULL;
    /* Mark all first, with no simcall in between: a waiter whose timeout
     * fires while we release the others then waits for its release instead
     * of returning (and freeing its frame) under our feet. */
    for (sg_waiter *w = list; w; w = w->next) w->queued = 0;
    while (list) {
        sg_waiter *n = list->next;
        sg_sem_release(list->sem);
        list = n;
    }
}

static eccl_result sg_cond_create_(void *ctx, eccl_cond **out)
{
    (void)ctx;
    sg_cv *cv = calloc(1, sizeof *cv);
    *out = (eccl_cond *)cv;
    return cv ? ECCL_OK : ECCL_ERR_NO_MEMORY;
}

static void sg_cond_destroy_(void *ctx, eccl_cond *c)
{
    (void)ctx;
    eccl_sg_cv_fini((sg_cv *)c);
    free(c);
}

static eccl_result sg_cond_wait_(void *ctx, eccl_cond *c, eccl_mutex *m, uint64_t deadline_ns)
{
    ((sg_env *)ctx)->w->waits++;
    if (deadline_ns == 0) {
        eccl_sg_cv_wait((sg_cv *)c, (sg_lock *)m, -1);
        return ECCL_OK;
    }
    uint64_t now = eccl_sg_now_ns();
    if (now >= deadline_ns) return ECCL_ERR_TIMEOUT;
    eccl_sg_cv_wait((sg_cv *)c, (sg_lock *)m, (double)(deadline_ns - now) / 1e9);
    return eccl_sg_now_ns() >= deadline_ns ? ECCL_ERR_TIMEOUT : ECCL_OK;
}

static void sg_cond_broadcast_(void *ctx, eccl_cond *c)
{
    (void)ctx;
    eccl_sg_cv_broadcast((sg_cv *)c);
}

static void thread_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    eccl_thread *t = sg_actor_self_get_data();
    t->fn(t->arg);
    eccl_net_sg_drain_self(t->w);
}

static eccl_result sg_spawn_(void *ctx, const char *name, void (*fn)(void *), void *arg,
                             eccl_thread **out)
{
    sg_env *e = ctx;
    eccl_thread *t = calloc(1, sizeof *t);
    if (!t) return ECCL_ERR_NO_MEMORY;
    char full[64];
    /* Actor names show in SimGrid's own diagnostics: say whose it is. */
    snprintf(full, sizeof full, "%s/%s", e->env.name, name ? name : "eccl");
    t->w = e->w;
    t->fn = fn;
    t->arg = arg;
    t->actor = sg_actor_init(full, e->host);
    if (!t->actor) {
        free(t);
        return ECCL_ERR_SYSTEM;
    }
    sg_actor_set_data(t->actor, t);
    /* join needs the handle after the actor ended. */
    sg_actor_ref(t->actor);
    sg_actor_start(t->actor, thread_main, 0, NULL);
    *out = t;
    return ECCL_OK;
}

static void sg_join_(void *ctx, eccl_thread *t)
{
    (void)ctx;
    if (!t) return;
    sg_actor_join(t->actor, -1);
    sg_actor_unref(t->actor);
    free(t);
}

static void sg_yield_(void *ctx)
{
    (void)ctx;
    sg_actor_yield();
}

static const eccl_sync_ops sg_sync_ops = {
    .size = sizeof(eccl_sync_ops),
    .mutex_create = sg_mutex_create_,
    .mutex_destroy = sg_mutex_destroy_,
    .lock = sg_lock_,
    .unlock = sg_unlock_,
    .cond_create = sg_cond_create_,
    .cond_destroy = sg_cond_destroy_,
    .cond_wait = sg_cond_wait_,
    .cond_broadcast = sg_cond_broadcast_,
    .spawn = sg_spawn_,
    .join = sg_join_,
    .yield = sg_yield_,
};

/* ---- dev_sim: host memory or phantom buffers, simulated compute time ---- */

static int sg_is_phantom(void *ctx, const void *p)
{
    const sg_env *e = ctx;
    return eccl_sg_is_phantom(e->w, p);
}

/* Simulated time of a device kernel over `bytes` at `Bps`: the calling
 * actor sleeps. A sleep, not sg_actor_execute, because a GPU copy or
 * reduction runs on the device, bound by its memory bandwidth, not on the
 * host CPU SimGrid's host speed models: executing would share one host
 * speed between every actor on the host (receivers, progress engines, and
 * with several ranks per host, their GPUs), and tie the rate to the
 * platform's host speed. Core calls dev ops synchronously from its
 * progress actor, as a kernel launch followed by a stream sync: frames
 * already handed to the net keep flowing meanwhile (the receiver actors do
 * not wait for it), the progress actor sends nothing new until it is done. */
static void dev_sleep(sg_env *e, double seconds)
{
    /* SimGrid 3.32 cannot sleep less than its timing precision (1 ns by
     * default; it logs and the sleep is not exact): small kernels add up
     * here until they are worth a sleep, so their total is still charged. */
    e->dev_debt_s += seconds;
    if (e->dev_debt_s < DEV_MIN_SLEEP_S) return;
    double t = e->dev_debt_s;
    e->dev_debt_s = 0;
    e->w->waits++;
    sg_actor_sleep_for(t);
}

static void dev_cost(sg_env *e, size_t bytes, double Bps)
{
    if (Bps <= 0 || bytes == 0) return;
    dev_sleep(e, (double)bytes / Bps);
}

static eccl_result sg_alloc(void *ctx, size_t bytes, void **out)
{
    sg_env *e = ctx;
    if (e->w->dev.phantom && bytes > ECCL_SG_PHANTOM_MIN)
        return eccl_sg_phantom_alloc(e->w, bytes, out);
    /* aligned_alloc wants a multiple of the alignment. */
    size_t n = bytes ? (bytes + 63) / 64 * 64 : 64;
    void *p = aligned_alloc(64, n);
    if (!p) return ECCL_ERR_NO_MEMORY;
    *out = p;
    return ECCL_OK;
}

static void sg_free_(void *ctx, void *p)
{
    sg_env *e = ctx;
    if (!eccl_sg_is_phantom(e->w, p)) free(p);
}

/* Phantom on either side: no byte moves (a real destination keeps what it
 * held; the values of an op on phantom buffers are not real anyway). */
static void sg_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    sg_env *e = ctx;
    if (bytes && dst != src && !eccl_sg_is_phantom(e->w, dst) && !eccl_sg_is_phantom(e->w, src))
        memcpy(dst, src, bytes);
    dev_cost(e, bytes, e->w->dev.copy_Bps);
}

static void sg_reduce(void *ctx, void *dst, const void *src, size_t count, eccl_dtype dtype,
                      eccl_op op)
{
    sg_env *e = ctx;
    if (!eccl_sg_is_phantom(e->w, dst) && !eccl_sg_is_phantom(e->w, src))
        eccl_reduce_into(dst, src, count, dtype, op);
    dev_cost(e, count * eccl_dtype_size(dtype), e->w->dev.reduce_Bps);
}

static void sg_scale_div(void *ctx, void *x, size_t count, eccl_dtype dtype, uint32_t divisor)
{
    sg_env *e = ctx;
    if (!eccl_sg_is_phantom(e->w, x)) eccl_reduce_scale_div(x, count, dtype, divisor);
    dev_cost(e, count * eccl_dtype_size(dtype), e->w->dev.reduce_Bps);
}


/* ---- simulated CUDA devices (buffers = cuda) ------------------------------
 * Device memory: addresses in the world's device region (PROT_NONE, never
 * mapped in), so nothing can read or write it as host memory; the bytes of
 * an allocation (host bytes only) live in a backing store of its device,
 * reached only through to_host / to_device (core) and device_read /
 * device_write (the program). */

typedef struct sg_dev_alloc {
    size_t off;              /* in the world's device region */
    size_t bytes;
    unsigned char *backing;  /* the bytes; NULL with phantom bytes */
} sg_dev_alloc;

struct eccl_sg_device {
    eccl_sg_world *w;
    sg_dev_alloc *allocs;    /* live allocations, in no order */
    size_t nallocs, cap;
    eccl_sg_device *next;    /* in w->devices */
};

static int in_devmem(const eccl_sg_world *w, const void *p)
{
    const unsigned char *q = p;
    return w->devmem_base && q >= w->devmem_base && q < w->devmem_base + w->devmem_size;
}

/* The allocation of d that holds p[0..bytes), or NULL. */
static sg_dev_alloc *dev_find(const eccl_sg_device *d, const void *p, size_t bytes)
{
    if (!d || !in_devmem(d->w, p)) return NULL;
    const size_t off = (size_t)((const unsigned char *)p - d->w->devmem_base);
    for (size_t i = 0; i < d->nallocs; i++) {
        sg_dev_alloc *a = &d->allocs[i];
        if (off >= a->off && off - a->off < a->bytes && bytes <= a->bytes - (off - a->off)) return a;
    }
    return NULL;
}

static unsigned char *dev_bytes(const eccl_sg_device *d, const sg_dev_alloc *a, const void *p)
{
    return a->backing + ((size_t)((const unsigned char *)p - d->w->devmem_base) - a->off);
}

eccl_result eccl_sg_device_create(eccl_sg_world *w, eccl_sg_device **out)
{
    if (!w || !out || !w->dev.devices || !w->devmem_base) return ECCL_ERR_INVALID_ARG;
    eccl_sg_device *d = calloc(1, sizeof *d);
    if (!d) return ECCL_ERR_NO_MEMORY;
    d->w = w;
    d->next = w->devices;
    w->devices = d;
    *out = d;
    return ECCL_OK;
}

eccl_result eccl_sg_device_alloc(eccl_sg_device *d, size_t bytes, void **out)
{
    if (!d || !out) return ECCL_ERR_INVALID_ARG;
    eccl_sg_world *w = d->w;
    const size_t n = bytes ? (bytes + DEVMEM_ALIGN - 1) / DEVMEM_ALIGN * DEVMEM_ALIGN : DEVMEM_ALIGN;
    if (n < bytes || n > w->devmem_size - w->devmem_next) return ECCL_ERR_NO_MEMORY;
    if (d->nallocs == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 4;
        sg_dev_alloc *a = realloc(d->allocs, cap * sizeof *a);
        if (!a) return ECCL_ERR_NO_MEMORY;
        d->allocs = a;
        d->cap = cap;
    }
    sg_dev_alloc a = {.off = w->devmem_next, .bytes = bytes ? bytes : 1, .backing = NULL};
    if (!w->dev.phantom) {
        /* Zeroed, so a tensor read before written is the same in every run. */
        a.backing = calloc(1, a.bytes);
        if (!a.backing) return ECCL_ERR_NO_MEMORY;
    }
    w->devmem_next += n;
    d->allocs[d->nallocs++] = a;
    *out = w->devmem_base + a.off;
    return ECCL_OK;
}

void eccl_sg_device_free(eccl_sg_device *d, void *p)
{
    if (!d || !in_devmem(d->w, p)) return;
    const size_t off = (size_t)((unsigned char *)p - d->w->devmem_base);
    for (size_t i = 0; i < d->nallocs; i++) {
        if (d->allocs[i].off != off) continue;
        free(d->allocs[i].backing);
        d->allocs[i] = d->allocs[--d->nallocs];
        return;
    }
}

eccl_result eccl_sg_device_write(eccl_sg_device *d, void *dev, const void *host, size_t bytes)
{
    const sg_dev_alloc *a = dev_find(d, dev, bytes);
    if (!a) return ECCL_ERR_INVALID_ARG;
    if (a->backing && bytes) memcpy(dev_bytes(d, a, dev), host, bytes);
    return ECCL_OK;
}

eccl_result eccl_sg_device_read(eccl_sg_device *d, void *host, const void *dev, size_t bytes)
{
    const sg_dev_alloc *a = dev_find(d, dev, bytes);
    if (!a) return ECCL_ERR_INVALID_ARG;
    if (a->backing && bytes) memcpy(host, dev_bytes(d, a, dev), bytes);
    return ECCL_OK;
}

static void devices_free(eccl_sg_world *w)
{
    for (eccl_sg_device *d = w->devices, *n; d; d = n) {
        n = d->next;
        for (size_t i = 0; i < d->nallocs; i++) free(d->allocs[i].backing);
        free(d->allocs);
        free(d);
    }
    w->devices = NULL;
    if (w->devmem_base) munmap(w->devmem_base, w->devmem_size);
    w->devmem_base = NULL;
}

/* Device memory is the rank's own device's (device 0); any other pointer
 * outside the device region is host memory; one inside it that is not an
 * allocation of this rank's device is a pointer the runtime does not know. */
static eccl_result sg_mem_kind(void *ctx, const void *p, size_t bytes, eccl_mem_kind *kind, int *device)
{
    sg_env *e = ctx;
    *kind = ECCL_MEM_HOST;
    *device = -1;
    if (!e->device || !in_devmem(e->w, p)) return ECCL_OK;
    if (!dev_find(e->device, p, bytes)) {
        eccl_sg_log(e, ECCL_LOG_WARN, "device pointer (%zu bytes) not inside one allocation of this "
                    "rank's device", bytes);
        return ECCL_ERR_INVALID_ARG;
    }
    *kind = ECCL_MEM_DEVICE;
    *device = 0;
    return ECCL_OK;
}

/* One copy over the bus: latency + bytes / rate, slept by the caller (who
 * blocks until the bytes are there, as the interface says). */
static void dev_copy_cost(sg_env *e, size_t bytes)
{
    dev_sleep(e, e->w->dev.dev_copy_latency_s + (double)bytes / e->w->dev.dev_copy_Bps);
}

static eccl_result sg_to_host(void *ctx, int device, void *stream, void *host, const void *dev,
                              size_t bytes)
{
    sg_env *e = ctx;
    (void)stream; /* one stream: every kernel of the rank is synchronous */
    const sg_dev_alloc *a = device == 0 ? dev_find(e->device, dev, bytes) : NULL;
    if (!a) return ECCL_ERR_DEVICE;
    if (bytes && !eccl_sg_is_phantom(e->w, host)) {
        if (a->backing) memcpy(host, dev_bytes(e->device, a, dev), bytes);
        else memset(host, 0, bytes); /* a phantom tensor into a small real mirror */
    }
    dev_copy_cost(e, bytes);
    return ECCL_OK;
}

static eccl_result sg_to_device(void *ctx, int device, void *stream, void *dev, const void *host,
                                size_t bytes)
{
    sg_env *e = ctx;
    (void)stream;
    const sg_dev_alloc *a = device == 0 ? dev_find(e->device, dev, bytes) : NULL;
    if (!a) return ECCL_ERR_DEVICE;
    dev_copy_cost(e, bytes);
    if (bytes && a->backing && !eccl_sg_is_phantom(e->w, host))
        memcpy(dev_bytes(e->device, a, dev), host, bytes);
    return ECCL_OK;
}

/* ---- the device-resident ring's ops (env.h d_*) ----
 * A simulated device runs one call at a time, finished when it returns, so
 * d_sync and d_order have nothing to wait for. */

/* Where p[0..bytes) is: *bytes_at gets its bytes (NULL: phantom), *on_dev
 * whether they are device memory. ECCL_ERR_DEVICE for a device pointer
 * outside this rank's allocations (an illegal address on a GPU). */
static eccl_result dev_ptr(sg_env *e, const void *p, size_t bytes, unsigned char **bytes_at, int *on_dev)
{
    *on_dev = in_devmem(e->w, p);
    if (*on_dev) {
        const sg_dev_alloc *a = dev_find(e->device, p, bytes);
        if (!a) return ECCL_ERR_DEVICE;
        *bytes_at = a->backing ? dev_bytes(e->device, a, p) : NULL;
    } else {
        *bytes_at = eccl_sg_is_phantom(e->w, p) ? NULL : (unsigned char *)p;
    }
    return ECCL_OK;
}

static eccl_result sg_d_alloc(void *ctx, int device, size_t bytes, void **out)
{
    sg_env *e = ctx;
    return device == 0 ? eccl_sg_device_alloc(e->device, bytes, out) : ECCL_ERR_INVALID_ARG;
}

static void sg_d_free(void *ctx, void *p) { eccl_sg_device_free(((sg_env *)ctx)->device, p); }

static eccl_result sg_d_copy(void *ctx, int device, void *dst, const void *src, size_t bytes)
{
    sg_env *e = ctx;
    unsigned char *d, *s;
    int d_dev, s_dev;
    if (device != 0 || dev_ptr(e, dst, bytes, &d, &d_dev) != ECCL_OK ||
        dev_ptr(e, src, bytes, &s, &s_dev) != ECCL_OK)
        return ECCL_ERR_DEVICE;
    if (bytes && d) {
        if (s) memmove(d, s, bytes);
        else memset(d, 0, bytes); /* phantom bytes into a real buffer read as zeros */
    }
    /* Over the bus unless both sides are on the device. */
    if (d_dev && s_dev) dev_cost(e, bytes, e->w->dev.copy_Bps);
    else dev_copy_cost(e, bytes);
    return ECCL_OK;
}

static eccl_result sg_d_reduce(void *ctx, int device, void *dst, const void *src, size_t count,
                               eccl_dtype dtype, eccl_op op)
{
    sg_env *e = ctx;
    size_t bytes = count * eccl_dtype_size(dtype);
    unsigned char *d, *s;
    int d_dev, s_dev;
    if (device != 0 || dev_ptr(e, dst, bytes, &d, &d_dev) != ECCL_OK || !d_dev ||
        dev_ptr(e, src, bytes, &s, &s_dev) != ECCL_OK)
        return ECCL_ERR_DEVICE;
    if (d && s) eccl_reduce_into(d, s, count, dtype, op);
    if (!s_dev) dev_copy_cost(e, bytes); /* the kernel reads pinned memory over the bus */
    dev_cost(e, bytes, e->w->dev.reduce_Bps);
    return ECCL_OK;
}

static eccl_result sg_d_scale_div(void *ctx, int device, void *x, size_t count, eccl_dtype dtype,
                                  uint32_t divisor)
{
    sg_env *e = ctx;
    size_t bytes = count * eccl_dtype_size(dtype);
    unsigned char *p;
    int on_dev;
    if (device != 0 || dev_ptr(e, x, bytes, &p, &on_dev) != ECCL_OK || !on_dev) return ECCL_ERR_DEVICE;
    if (p) eccl_reduce_scale_div(p, count, dtype, divisor);
    dev_cost(e, bytes, e->w->dev.reduce_Bps);
    return ECCL_OK;
}

static eccl_result sg_d_sync(void *ctx, int device)
{
    (void)ctx;
    return device == 0 ? ECCL_OK : ECCL_ERR_DEVICE;
}

static eccl_result sg_d_order(void *ctx, int device, void *stream, int library_waits)
{
    (void)stream, (void)library_waits;
    return sg_d_sync(ctx, device);
}

/* The settings of a simulated process: from its scenario, never from the
 * host process's environment (the same scenario must run the same way
 * anywhere). */
static int sg_config_get(void *ctx, const char *name, char *buf, size_t len)
{
    const sg_env *e = ctx;
    const eccl_sg_net_cfg *net = &e->w->net;
    size_t v = 0;
    /* The progress engine's parked thread skips its looks at the clock
     * while a call drives (core/sched/engine.h): same behaviour, and
     * a simulated rank no longer wakes every 10 ms of simulated time. */
    if (strcmp(name, "ECCL_ENGINE_PARK_UNTIL_IDLE") == 0) v = 1;
    /* Idle channels give their read-ahead back (core/proto/chan.c): what
     * lets a simulated 96K-rank job fit, at a malloc per burst of frames. */
    else if (strcmp(name, "ECCL_CHAN_RELEASE_READAHEAD") == 0) v = 1;
    else if (strcmp(name, "ECCL_PROGRESS_THREAD") == 0 && e->w->no_progress_thread)
        return snprintf(buf, len, "0") == 1;
    /* No trace records unless the run keeps traces (eccl_sg_world_set_trace_dir):
     * a 96K-rank run would hold some 55 MB of them. */
    else if (strcmp(name, "ECCL_TRACE_RECORDS") == 0 && !e->w->trace_dir)
        return snprintf(buf, len, "0") == 1;
    else if (strcmp(name, "ECCL_ALGO") == 0 && e->w->algo[0])
        return (size_t)snprintf(buf, len, "%s", e->w->algo) < len;
    else if (strcmp(name, "ECCL_P2P_POOL") == 0 && e->w->p2p_pool) v = e->w->p2p_pool;
    else if (e->device && strcmp(name, "ECCL_DEVICE_RING_MIN_BYTES") == 0) v = e->w->dev.resident_min;
    else if (!e->ibv) v = 0;
    else if (strcmp(name, "ECCL_IB_QPS") == 0) v = net->qps;
    else if (strcmp(name, "ECCL_IB_MIN_BYTES") == 0) v = net->min_bytes;
    else if (strcmp(name, "ECCL_IB_CHUNK_BYTES") == 0) v = net->chunk_bytes;
    if (!v) return 0;
    int n = snprintf(buf, len, "%zu", v);
    return n > 0 && (size_t)n < len;
}

static const eccl_config_ops sg_config_ops = {.size = sizeof(eccl_config_ops), .get = sg_config_get};

/* A trace dump as a file of the run's trace folder. Written whole at once
 * (the simulation does nothing else meanwhile): no reader sees half. */
static eccl_result sg_trace_dump(void *ctx, uint64_t peer_id, uint32_t n, int automatic, const char *text, size_t len)
{
    (void)automatic;
    const sg_env *e = ctx;
    if (!e->w->trace_dir) return ECCL_ERR_UNSUPPORTED;
    char path[4096];
    int k = snprintf(path, sizeof path, "%s/eccl-trace-%llu-%llu-%u.txt", e->w->trace_dir,
                     (unsigned long long)peer_id, (unsigned long long)e->id, n);
    if (k < 0 || (size_t)k >= sizeof path) return ECCL_ERR_SYSTEM;
    FILE *f = fopen(path, "w");
    if (!f) return ECCL_ERR_SYSTEM;
    int ok = fwrite(text, 1, len, f) == len;
    ok = (fclose(f) == 0) && ok;
    return ok ? ECCL_OK : ECCL_ERR_SYSTEM;
}

static const eccl_trace_ops sg_trace_ops = {.size = sizeof(eccl_trace_ops), .dump = sg_trace_dump};

/* The mirror: host memory (phantom above ECCL_SG_PHANTOM_MIN with phantom
 * bytes, as any staging buffer). Pinning is not modelled: the copy rate is
 * the pinned one, and no mirror is cached. */
static eccl_result sg_host_alloc(void *ctx, size_t bytes, void **out) { return sg_alloc(ctx, bytes, out); }

static void sg_host_free(void *ctx, void *p, size_t bytes)
{
    (void)bytes;
    sg_free_(ctx, p);
}

/* One table per kind of bytes. Host buffers: no is_phantom, so core and the
 * net behave exactly as on the real backend. The device ops answer "host
 * memory" for every buffer of a rank without a simulated device (and of
 * the master), so such ranks never stage anything. */
#define SG_DEV_OPS(phantom_fn)                                                                    \
    {                                                                                             \
        .size = sizeof(eccl_dev_ops), .alloc = sg_alloc, .free = sg_free_, .copy = sg_copy,       \
        .reduce = sg_reduce, .scale_div = sg_scale_div, .is_phantom = phantom_fn,                 \
        .mem_kind = sg_mem_kind, .host_alloc = sg_host_alloc, .host_free = sg_host_free,          \
        .to_host = sg_to_host, .to_device = sg_to_device, .d_alloc = sg_d_alloc,                  \
        .d_free = sg_d_free, .d_copy = sg_d_copy, .d_reduce = sg_d_reduce,                        \
        .d_scale_div = sg_d_scale_div, .d_sync = sg_d_sync, .d_order = sg_d_order,                \
    }
static const eccl_dev_ops sg_dev_host_ops = SG_DEV_OPS(NULL);
static const eccl_dev_ops sg_dev_phantom_ops = SG_DEV_OPS(sg_is_phantom);

int eccl_sg_is_phantom(const eccl_sg_world *w, const void *p)
{
    const unsigned char *q = p;
    return w->phantom_base && q >= w->phantom_base && q < w->phantom_base + w->phantom_size;
}

eccl_result eccl_sg_phantom_alloc(eccl_sg_world *w, size_t bytes, void **out)
{
    if (!w || !out || !w->phantom_base || bytes > w->phantom_size / 2) return ECCL_ERR_INVALID_ARG;
    size_t n = (bytes + 4095) / 4096 * 4096;
    if (w->phantom_next + n > w->phantom_size) w->phantom_next = 0;
    *out = w->phantom_base + w->phantom_next;
    w->phantom_next += n;
    return ECCL_OK;
}

const eccl_sg_dev_cfg *eccl_sg_world_dev(const eccl_sg_world *w) { return &w->dev; }

eccl_result eccl_sg_world_set_dev(eccl_sg_world *w, const eccl_sg_dev_cfg *cfg)
{
    if (!w || !cfg || w->envs || cfg->reduce_Bps < 0 || cfg->copy_Bps < 0)
        return ECCL_ERR_INVALID_ARG;
    if (cfg->devices && (!(cfg->dev_copy_Bps > 0) || !isfinite(cfg->dev_copy_Bps) ||
                         !(cfg->dev_copy_latency_s >= 0) || !isfinite(cfg->dev_copy_latency_s)))
        return ECCL_ERR_INVALID_ARG;
    if (cfg->devices && !w->devmem_base) {
        /* Address space only (PROT_NONE, nothing mapped in): as much as the
         * machine lets us reserve, from DEVMEM_REGION down. */
        for (size_t n = DEVMEM_REGION; n >= DEVMEM_REGION_MIN && !w->devmem_base; n /= 2) {
            void *p = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (p == MAP_FAILED) continue;
            w->devmem_base = p;
            w->devmem_size = n;
            w->devmem_next = 0;
        }
        if (!w->devmem_base) return ECCL_ERR_NO_MEMORY;
    }
    if (cfg->phantom && !w->phantom_base) {
        /* PROT_NONE: a stray read or write of phantom bytes faults at once. */
        const size_t size = cfg->phantom_region ? cfg->phantom_region : PHANTOM_REGION;
        void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) return ECCL_ERR_NO_MEMORY;
        w->phantom_base = p;
        w->phantom_size = size;
        w->phantom_next = 0;
    }
    w->dev = *cfg;
    return ECCL_OK;
}

/* ---- log ----------------------------------------------------------------- */

static void sg_log_write(void *ctx, int level, const char *line)
{
    sg_env *e = ctx;
    static const char letters[] = "?EWIDT";
    if (level <= ECCL_LOG_NONE || level > e->env.log_level) return;
    char who[48];
    snprintf(who, sizeof who, "%s", e->env.name);
    eccl_sg_printf(who, "%c %s", letters[level <= ECCL_LOG_TRACE ? level : 0], line ? line : "");
}

static const eccl_log_ops sg_log_ops = {
    .size = sizeof(eccl_log_ops),
    .write = sg_log_write,
};

void eccl_sg_log(const sg_env *e, int level, const char *fmt, ...)
{
    if (level <= ECCL_LOG_NONE || level > e->env.log_level) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    e->env.log->write(e->env.log_ctx, level, line);
}

/* ---- world and env ------------------------------------------------------- */

eccl_result eccl_sg_world_create(int log_level, eccl_sg_world **out)
{
    if (!out) return ECCL_ERR_INVALID_ARG;
    eccl_sg_world *w = calloc(1, sizeof *w);
    if (!w) return ECCL_ERR_NO_MEMORY;
    w->log_level = log_level;
    w->next_port = FIRST_PORT;
    *out = w;
    return ECCL_OK;
}

sg_host_t eccl_sg_world_host(eccl_sg_world *w, const char *name)
{
    int k;
    char tail;
    if (!w->node_hosts) {
        /* Every node-K of the platform, once: SimGrid's own lookup walks
         * every zone each time. */
        size_t n = sg_host_count();
        sg_host_t *all = sg_host_list();
        w->node_hosts = calloc(n ? n : 1, sizeof *w->node_hosts);
        if (all && w->node_hosts) {
            w->n_node_hosts = n;
            for (size_t i = 0; i < n; i++)
                if (sscanf(sg_host_get_name(all[i]), "node-%d%c", &k, &tail) == 1 && k >= 0 && (size_t)k < n)
                    w->node_hosts[k] = all[i];
        }
        free(all);
    }
    if (sscanf(name, "node-%d%c", &k, &tail) == 1 && k >= 0 && (size_t)k < w->n_node_hosts &&
        w->node_hosts[k])
        return w->node_hosts[k];
    return sg_host_by_name(name);
}

static void env_unlink(sg_env *e)
{
    if (e->prev) e->prev->next = e->next;
    else e->w->envs = e->next;
    if (e->next) e->next->prev = e->prev;
    e->next = e->prev = NULL;
    sg_idmap_del(&e->w->env_ids, e->id);
}

void eccl_sg_world_destroy(eccl_sg_world *w)
{
    if (!w) return;
    /* What is left belongs to killed hosts (or to objects a program never
     * destroyed): their actors are gone, so free without simcalls. */
    for (sg_env *e = w->envs, *n; e; e = n) {
        n = e->next;
#ifdef ECCL_SG_HAVE_IBV
        eccl_verbs_sg_free_dead(e);
#endif
        eccl_net_sg_free_dead(e);
        eccl_sg_cv_fini(&e->cv);
        free(e->cand);
        free(e->lanes);
        free(e);
    }
    free(w->node_hosts);
    free(w->trace_dir);
    sg_idmap_free(&w->env_ids);
    sg_idmap_free(&w->conn_ids);
    sg_idmap_free(&w->registry);
    eccl_net_sg_free_outboxes(w);
    eccl_net_sg_free_routes(w);
    eccl_net_sg_free_host_rx(w);
    if (w->phantom_base) munmap(w->phantom_base, w->phantom_size);
    devices_free(w);
    /* Hosts and links outlive the world (SimGrid's engine owns them): take
     * our state off them before freeing it. */
    for (sg_host_state *h = w->host_states, *n; h; h = n) {
        n = h->next;
        sg_host_set_data(h->host, NULL);
        free(h);
    }
    for (sg_link_state *l = w->link_states, *n; l; l = n) {
        n = l->next;
        sg_link_set_data(l->link, NULL);
        free(l);
    }
    free(w);
}

/* data_links: a comm's env, whose peer links take the world's transport
 * (the master's control path is always net_sg's streams). */
static eccl_result env_create(eccl_sg_world *w, const char *name, eccl_sg_device *device,
                              int data_links, unsigned nlanes, eccl_env **out)
{
    if (!w || !out || (device && device->w != w)) return ECCL_ERR_INVALID_ARG;
    sg_env *e = calloc(1, sizeof *e);
    if (!e) return ECCL_ERR_NO_MEMORY;
    e->w = w;
    e->id = ++w->next_id;
    e->host = sg_host_self();
    e->owner = sg_actor_self_get_pid();
    e->boot = eccl_sg_host_boot(e->host);
    snprintf(e->env.name, sizeof e->env.name, "%s", name ? name : "");
    e->env.log_level = w->log_level;
    /* Spinning burns no simulated time, so a spinning caller would never
     * let the clock reach anything: always sleep in wait. */
    e->env.spin_ns = 0;
    e->env.net = &eccl_net_sg_ops;
    e->env.net_ctx = e;
    e->env.clock = &sg_clock_ops;
    e->env.clock_ctx = e;
    e->env.sync = &sg_sync_ops;
    e->env.sync_ctx = e;
    e->device = device;
    e->env.dev = w->dev.phantom ? &sg_dev_phantom_ops : &sg_dev_host_ops;
    e->env.dev_ctx = e;
    e->env.log = &sg_log_ops;
    e->env.log_ctx = e;
    /* Settings of a simulated rank come from its scenario (through
     * eccl_comm_params, and for a device rank sg_config_ops, which reads the
     * world's), never from the environment of the process that happens to
     * host all the ranks: the same scenario and seed give the same run
     * anywhere. */
    const int ibv = data_links && w->net.ibv;
    e->ibv = ibv;
    e->data_links = data_links;
    e->env.config = &sg_config_ops;
    e->env.config_ctx = e;
    e->env.trace = &sg_trace_ops;
    e->env.trace_ctx = e;
    eccl_result rc = eccl_net_sg_start(e, nlanes);
    if (rc != ECCL_OK) {
        free(e->lanes);
        free(e);
        return rc;
    }
    if (sg_idmap_put(&w->env_ids, e->id, e)) {
        eccl_net_sg_stop(e);
        free(e->lanes);
        free(e);
        return ECCL_ERR_NO_MEMORY;
    }
    e->next = w->envs;
    e->prev = NULL;
    if (w->envs) w->envs->prev = e;
    w->envs = e;
    if (ibv) {
#ifdef ECCL_SG_HAVE_IBV
        rc = eccl_verbs_sg_attach(e);
#else
        rc = ECCL_ERR_UNSUPPORTED;
#endif
        if (rc != ECCL_OK) {
            eccl_sg_env_destroy(&e->env);
            return rc;
        }
    }
    *out = &e->env;
    return ECCL_OK;
}

eccl_result eccl_sg_env_create(eccl_sg_world *w, const char *name, eccl_env **out)
{
    return env_create(w, name, NULL, 0, 1, out);
}

void eccl_sg_env_destroy(eccl_env *env)
{
    if (!env) return;
    sg_env *e = (sg_env *)env;
    if (e->w->env_hooks.destroying) e->w->env_hooks.destroying(e->w->env_hooks.ctx, env);
#ifdef ECCL_SG_HAVE_IBV
    eccl_verbs_sg_detach(e);
#endif
    eccl_net_sg_stop(e);
    /* The owner's last messages (FINs, M_STOP) reach the wire before it
     * goes on, and perhaps ends. */
    eccl_net_sg_drain_self(e->w);
    env_unlink(e);
    /* Conns or listeners left open by the owner: free them quietly. */
    eccl_net_sg_free_dead(e);
    eccl_sg_cv_fini(&e->cv);
    free(e->cand);
    free(e->lanes);
    free(e);
}

eccl_result eccl_sg_world_set_net(eccl_sg_world *w, const eccl_sg_net_cfg *cfg)
{
    if (!w || !cfg) return ECCL_ERR_INVALID_ARG;
#ifndef ECCL_SG_HAVE_IBV
    if (cfg->ibv) return ECCL_ERR_UNSUPPORTED;
#endif
    w->net = *cfg;
    return ECCL_OK;
}

uint64_t eccl_sg_world_rdma_writes(const eccl_sg_world *w) { return w->rdma_writes; }
uint64_t eccl_sg_world_messages(const eccl_sg_world *w) { return w->messages; }
uint64_t eccl_sg_world_conns(const eccl_sg_world *w) { return w->conns; }
uint64_t eccl_sg_world_waits(const eccl_sg_world *w) { return w->waits; }

eccl_result eccl_sg_world_set_master_msg_cost(eccl_sg_world *w, double seconds)
{
    if (!w || !(seconds >= 0) || seconds > 1) return ECCL_ERR_INVALID_ARG;
    w->master_msg_cost_s = seconds;
    return ECCL_OK;
}

void eccl_sg_world_set_progress_thread(eccl_sg_world *w, int on) { w->no_progress_thread = !on; }

void eccl_sg_world_set_env_hooks(eccl_sg_world *w, const eccl_sg_env_hooks *h)
{
    if (!w) return;
    if (h) w->env_hooks = *h;
    else memset(&w->env_hooks, 0, sizeof w->env_hooks);
}

eccl_result eccl_sg_world_set_algo(eccl_sg_world *w, const char *spec)
{
    size_t len = spec ? strlen(spec) : 0;
    if (!w || len >= sizeof w->algo) return ECCL_ERR_INVALID_ARG;
    memcpy(w->algo, spec ? spec : "", len + 1);
    return ECCL_OK;
}

eccl_result eccl_sg_world_set_p2p_pool(eccl_sg_world *w, unsigned pool)
{
    if (!w || pool > ECCL_WIRE_MAX_POOL) return ECCL_ERR_INVALID_ARG;
    w->p2p_pool = pool;
    return ECCL_OK;
}

void eccl_sg_world_set_tcp_window(eccl_sg_world *w, double bytes) { w->tcp_window = bytes > 0 ? bytes : 0; }

eccl_result eccl_sg_world_set_net_model(eccl_sg_world *w, eccl_sg_net_model model)
{
    if (!w || (model != ECCL_SG_NET_FLOW && model != ECCL_SG_NET_LATENCY)) return ECCL_ERR_INVALID_ARG;
    if (w->envs) return ECCL_ERR_BUSY; /* envs made under the other model live on */
    w->latency_net = model == ECCL_SG_NET_LATENCY;
    return ECCL_OK;
}

void eccl_sg_world_set_flow_min_bytes(eccl_sg_world *w, size_t bytes)
{
    if (w) w->flow_min_bytes = bytes;
}

void eccl_sg_world_set_shm(eccl_sg_world *w, double bytes_per_s)
{
    if (w) w->shm_bw = bytes_per_s > 0 ? bytes_per_s : 0;
}

void eccl_sg_world_set_tls(eccl_sg_world *w, double bytes_per_s)
{
    if (w) w->tls_Bps = bytes_per_s > 0 ? bytes_per_s : 0;
}

void eccl_sg_charge_bytes(sg_env *e, size_t bytes, double Bps)
{
    dev_cost(e, bytes, Bps);
}

eccl_result eccl_sg_world_set_trace_dir(eccl_sg_world *w, const char *dir)
{
    if (!w) return ECCL_ERR_INVALID_ARG;
    char *d = dir ? strdup(dir) : NULL;
    if (dir && !d) return ECCL_ERR_NO_MEMORY;
    free(w->trace_dir);
    w->trace_dir = d;
    return ECCL_OK;
}

eccl_result eccl_sg_env_create_master(eccl_sg_world *w, const char *name, eccl_env **out)
{
    /* Every rank's control messages land here: lanes (sg_env.lanes). */
    eccl_result rc = env_create(w, name, NULL, 0, MASTER_LANES, out);
    if (rc == ECCL_OK) {
        sg_env *e = (sg_env *)*out;
        e->msg_cost_s = w->master_msg_cost_s;
        /* Decoding and handling one entry of a batch: a tenth of a
         * message, whose cost is mostly its system call. */
        e->work_cost_s = w->master_msg_cost_s / 10;
    }
    return rc;
}

void eccl_sg_listener_set_interest(eccl_env *env, eccl_listener *l, int on)
{
    (void)env;
    if (l) eccl_net_sg_listener_quiet(l, !on);
}

int eccl_sg_route_cost(const char *from, const char *to, size_t bytes, double *latency_s,
                       double *wire_s)
{
    sg_host_t a = sg_host_by_name(from), b = sg_host_by_name(to);
    if (!a || !b || !latency_s || !wire_s) return -1;
    eccl_net_sg_route_cost(a, b, bytes, latency_s, wire_s);
    return 0;
}

eccl_result eccl_sg_master_create(eccl_sg_world *w, const char *listen_addr, eccl_master **out)
{
    eccl_env *env = NULL;
    eccl_result rc = eccl_sg_env_create_master(w, "master", &env);
    if (rc != ECCL_OK) return rc;
    return eccl_master_create_with_env(env, eccl_sg_env_destroy, listen_addr, out);
}

eccl_result eccl_sg_relay_create(eccl_sg_world *w, const char *listen_addr, const char *parent_addr,
                                 eccl_relay **out)
{
    eccl_env *env = NULL;
    /* A coordinator process like the master: the same CPU time per message. */
    eccl_result rc = eccl_sg_env_create_master(w, "relay", &env);
    if (rc != ECCL_OK) return rc;
    return eccl_relay_create_with_env(env, eccl_sg_env_destroy, listen_addr, parent_addr, out);
}

eccl_result eccl_sg_comm_create_on(eccl_sg_world *w, eccl_sg_device *d, const eccl_comm_params *params,
                                   eccl_comm **out)
{
    eccl_env *env = NULL;
    eccl_result rc = env_create(w, "peer", d, 1, 1, &env);
    if (rc != ECCL_OK) return rc;
    if (w->env_hooks.created && (rc = w->env_hooks.created(w->env_hooks.ctx, env)) != ECCL_OK) {
        eccl_sg_env_destroy(env);
        return rc;
    }
    return eccl_comm_create_with_env(env, eccl_sg_env_destroy, params, out);
}

eccl_result eccl_sg_comm_create(eccl_sg_world *w, const eccl_comm_params *params, eccl_comm **out)
{
    return eccl_sg_comm_create_on(w, NULL, params, out);
}

int eccl_sg_host_boot(const_sg_host_t h)
{
    const sg_host_state *st = sg_host_get_data(h);
    return st ? st->boot : 0;
}

/* Marks the host's envs dead and starts a new boot, so that nothing is ever
 * posted to their mailboxes again (their receivers die with the host; what
 * a put to a mailbox whose permanent receiver is dead would do in SimGrid
 * is better not found out). -1 when out of memory. */
static int host_down(eccl_sg_world *w, sg_host_t h, int reset)
{
    sg_host_state *st = sg_host_get_data(h);
    if (!st) {
        st = calloc(1, sizeof *st);
        if (!st) return -1;
        st->host = h;
        st->next = w->host_states;
        w->host_states = st;
        sg_host_set_data(h, st);
    }
    for (sg_env *e = w->envs; e; e = e->next) {
        if (e->host != h || e->dead) continue;
        e->dead = 1;
        if (reset) eccl_net_sg_crash(e);
    }
    st->boot++;
#ifdef ECCL_SG_HAVE_IBV
    eccl_verbs_sg_peers_dead(w);
#endif
    return 0;
}

void eccl_sg_world_kill_host(eccl_sg_world *w, const char *host)
{
    sg_host_t h = w ? eccl_sg_world_host(w, host) : NULL;
    if (!w || !h || !sg_host_is_on(h)) return;
    host_down(w, h, 1);
    sg_host_turn_off(h);
}

void eccl_sg_world_kill_process(eccl_sg_world *w, aid_t pid)
{
    sg_actor_t root = sg_actor_by_pid(pid);
    if (!w || !root) return;
    sg_host_t h = sg_actor_get_host(root);
    /* The process: root and its descendants on its host (ppid chains), by
     * pid: an actor that ends while we make simcalls below is not touched. */
    xbt_dynar_t all = xbt_dynar_new(sizeof(sg_actor_t), NULL);
    sg_host_get_actor_list(h, all);
    const size_t n = xbt_dynar_length(all);
    aid_t *in = calloc(n + 1, sizeof *in);
    uint64_t *envs = calloc(n + 1, sizeof *envs);
    if (!in || !envs) {
        xbt_dynar_free(&all);
        free(in);
        free(envs);
        return;
    }
    size_t k = 0, ne = 0;
    in[k++] = pid;
    /* The host's shared receiver may be this process's child (its first
     * env made it), but it serves the host's other processes too. */
    const aid_t shared = eccl_net_sg_host_receiver(w, h);
    for (int grew = 1; grew;) {
        grew = 0;
        for (size_t i = 0; i < n; i++) {
            const_sg_actor_t a = xbt_dynar_get_as(all, i, sg_actor_t);
            const aid_t p = sg_actor_get_pid(a), pp = sg_actor_get_ppid(a);
            int member = 0, parent = 0;
            for (size_t j = 0; j < k; j++) {
                member |= in[j] == p;
                parent |= in[j] == pp;
            }
            if (parent && !member && p != shared) {
                in[k++] = p;
                grew = 1;
            }
        }
    }
    xbt_dynar_free(&all);
    /* Its envs (those whose maker it owns) go dead and take nothing
     * more (rx_done: the net posts nothing to an env whose receiver is
     * gone), all before the first simcall; then their conns are reset,
     * then the actors are killed. */
    for (sg_env *e = w->envs; e; e = e->next) {
        /* Its maker's process (its receiver, if it has one, is the maker's
         * child); a stopped env is nobody's. */
        if (e->dead || e->host != h || e->rx_done) continue;
        for (size_t j = 0; j < k; j++) {
            if (in[j] != e->owner) continue;
            e->dead = 1;
            e->rx_done = 1;
            envs[ne++] = e->id;
            break;
        }
    }
    for (size_t i = 0; i < ne; i++) {
        sg_env *e = sg_idmap_get(&w->env_ids, envs[i]);
        if (e) eccl_net_sg_crash(e);
    }
#ifdef ECCL_SG_HAVE_IBV
    eccl_verbs_sg_peers_dead(w);
#endif
    const aid_t self = sg_actor_self_get_pid();
    for (size_t i = 0; i < k; i++) {
        sg_actor_t a = in[i] == self ? NULL : sg_actor_by_pid(in[i]);
        if (a) sg_actor_kill(a);
    }
    free(in);
    free(envs);
}

eccl_result eccl_sg_world_host_off(eccl_sg_world *w, const char *host)
{
    sg_host_t h = w ? eccl_sg_world_host(w, host) : NULL;
    if (!w || !h) return ECCL_ERR_INVALID_ARG;
    if (!sg_host_is_on(h)) return ECCL_OK;
    if (host_down(w, h, 0)) return ECCL_ERR_NO_MEMORY;
    sg_host_turn_off(h);
    return ECCL_OK;
}

eccl_result eccl_sg_world_host_on(eccl_sg_world *w, const char *host)
{
    sg_host_t h = w ? eccl_sg_world_host(w, host) : NULL;
    if (!w || !h) return ECCL_ERR_INVALID_ARG;
    if (!sg_host_is_on(h)) sg_host_turn_on(h);
    return ECCL_OK;
}

eccl_result eccl_sg_world_set_link(eccl_sg_world *w, sg_link_t link, int on)
{
    if (!w || !link) return ECCL_ERR_INVALID_ARG;
    sg_link_state *st = sg_link_get_data(link);
    if (!st) {
        st = calloc(1, sizeof *st);
        if (!st) return ECCL_ERR_NO_MEMORY;
        st->link = link;
        st->next = w->link_states;
        w->link_states = st;
        sg_link_set_data(link, st);
    }
    if (st->off == !on) return ECCL_OK;
    st->off = !on;
    w->links_off += on ? -1 : 1;
    /* What waited for this link goes now (if its whole path is up). */
    if (on) eccl_net_sg_release_held(w);
    return ECCL_OK;
}
