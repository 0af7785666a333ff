/* mocks/cudart: a CUDA runtime (libcudart.so.13) that runs on CPUs.
 *
 * Built against the toolkit's own cuda_runtime_api.h so every prototype,
 * enum and struct is the real one; exported under the real version node
 * (libcudart.map) so objects built by nvcc -cudart shared load against it
 * when LD_LIBRARY_PATH points here. See README.md for the rules it keeps.
 *
 * Locking, outermost first:
 *   g.mu      streams, events, queued ops, stream workers (one condition
 *             variable, g.cv, broadcast on every state change: a mock runs a
 *             handful of threads, simplicity beats a wake-up per waiter);
 *   T.lock    the allocation table (rwlock: twins translate concurrently);
 *   g.reg     the kernel registry (__cudaRegisterFunction, twins).
 * A worker never holds g.mu while it copies or runs a twin. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef FIU_ENABLE
#include <fiu.h>
#else
#define fiu_init(flags) 0
#define fiu_fail(name) 0
#endif

#include "twin.h"

#define EXPORT __attribute__((visibility("default")))

/* nvcc's registration/launch ABI (crt/host_runtime.h, crt/device_functions.h
 * are C++ only): the same prototypes, spelled in C. */
EXPORT void **__cudaRegisterFatBinary(void *fatCubin);
EXPORT void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
EXPORT void __cudaUnregisterFatBinary(void **fatCubinHandle);
EXPORT void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                   const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                                   dim3 *bDim, dim3 *gDim, int *wSize);
EXPORT void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                              const char *deviceName, int ext, size_t size, int constant, int global);
EXPORT char __cudaInitModule(void **fatCubinHandle);
EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                            struct CUstream_st *stream);
EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                              void *stream);
EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *fun);
EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                      size_t sharedMem, cudaStream_t stream);

/* ------------------------------------------------------------------ config */

#define MAX_DEVICES 16
#define DEV_ALIGN 256    /* cudaMalloc's alignment guarantee */
#define POISON 0xCB      /* fresh device memory: not zero, as on a GPU */
#define MAX_SHMEM (48 * 1024) /* dynamic shared memory without opt-in */

static struct {
    int ndev;          /* ECCL_MOCK_CUDA_DEVICES, default 1 */
    size_t cap;        /* ECCL_MOCK_CUDA_MEM_MB per device, default 16 GiB */
    unsigned delay_us; /* ECCL_MOCK_CUDA_DELAY_US before each queued op */
    int poison;        /* ECCL_MOCK_CUDA_POISON, default 1 */
    int hmm;           /* ECCL_MOCK_CUDA_HMM: kernels may read pageable memory */
    size_t page;
} cfg;

static long env_long(const char *name, long def, long lo, long hi)
{
    const char *s = getenv(name);
    if (!s || !*s) return def;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi) {
        fprintf(stderr, "mock cudart: ignoring %s=%s (want %ld..%ld)\n", name, s, lo, hi);
        return def;
    }
    return v;
}

/* ------------------------------------------------------------------ state */

struct stream;
struct event;

struct dev {
    _Atomic int sticky;     /* cudaError_t that broke the context, 0 if none */
    struct stream *legacy;  /* the legacy default stream, created lazily */
    size_t used;            /* device bytes charged (T.lock) */
};

static struct {
    pthread_once_t once;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_mutex_t reg;
    struct dev dev[MAX_DEVICES];
    struct stream *streams; /* every live stream, legacy ones included */
    struct event *events;   /* every live event */
    _Atomic int used;       /* a context exists: fork() children may not use it */
    _Atomic int forked;
    _Atomic uint64_t serials; /* IPC exports so far */
    uint64_t nonce;           /* this process's, in its memfds' names */
} g = {
    .once = PTHREAD_ONCE_INIT,
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .cv = PTHREAD_COND_INITIALIZER,
    .reg = PTHREAD_MUTEX_INITIALIZER,
};

static _Thread_local cudaError_t tls_err;
static _Thread_local int tls_dev;

/* Records e as this thread's last error (as every failing runtime call
 * does) and returns it. */
static cudaError_t rec(cudaError_t e)
{
    if (e != cudaSuccess) tls_err = e;
    return e;
}

static cudaError_t sticky(int d)
{
    return (cudaError_t)atomic_load(&g.dev[d].sticky);
}

/* An asynchronous fault: the context is broken for good (first error
 * wins), as a GPU's is after an illegal address. Caller broadcasts g.cv. */
static void set_sticky(int d, cudaError_t e)
{
    int zero = 0;
    atomic_compare_exchange_strong(&g.dev[d].sticky, &zero, (int)e);
}

static void init_once(void)
{
    cfg.page = (size_t)sysconf(_SC_PAGESIZE);
    cfg.ndev = (int)env_long("ECCL_MOCK_CUDA_DEVICES", 1, 1, MAX_DEVICES);
    cfg.cap = (size_t)env_long("ECCL_MOCK_CUDA_MEM_MB", 16384, 0, 1L << 30) << 20;
    cfg.delay_us = (unsigned)env_long("ECCL_MOCK_CUDA_DELAY_US", 0, 0, 10 * 1000 * 1000);
    cfg.poison = (int)env_long("ECCL_MOCK_CUDA_POISON", 1, 0, 1);
    cfg.hmm = (int)env_long("ECCL_MOCK_CUDA_HMM", 0, 0, 1);
    if (getrandom(&g.nonce, sizeof g.nonce, GRND_NONBLOCK) != (ssize_t)sizeof g.nonce)
        g.nonce = (uint64_t)time(NULL) ^ (uint64_t)getpid() << 32;
}

/* Every call that needs a context starts here. A fork()ed child of a
 * process that used CUDA cannot use it (the real driver answers
 * cudaErrorInitializationError; the child also lacks the worker threads). */
static cudaError_t enter(void)
{
    pthread_once(&g.once, init_once);
    if (atomic_load(&g.forked)) return cudaErrorInitializationError;
    atomic_store(&g.used, 1);
    return cudaSuccess;
}

#define ENTER()                                   \
    do {                                          \
        cudaError_t e_ = enter();                 \
        if (e_ != cudaSuccess) return rec(e_);    \
    } while (0)

/* ENTER, then the current device's sticky error if it is broken. */
#define ENTER_DEV()                                              \
    do {                                                         \
        ENTER();                                                 \
        cudaError_t s_ = sticky(tls_dev);                        \
        if (s_ != cudaSuccess) return rec(s_);                   \
    } while (0)

/* ---------------------------------------------------------- allocations */

enum akind { A_NONE = 0, A_DEVICE, A_HOST, A_REGISTERED, A_MANAGED };

struct alloc {
    uintptr_t res;      /* reservation: [res, res + res_len) incl. slack and guard */
    size_t res_len;
    uintptr_t ptr;      /* what the caller got: [ptr, ptr + size) is valid */
    size_t size;
    char *shadow;       /* A_DEVICE: the bytes of ptr live at shadow */
    char *shadow_map;   /* A_DEVICE: the shadow mapping (res_len bytes) */
    size_t charged;     /* bytes counted against the device's capacity */
    int kind, device;
    unsigned flags;
    int freeing;        /* cudaFreeAsync queued: a second free is an error */
    /* IPC (A_DEVICE only). Exporter: the shadow was moved into a memfd,
     * kept open so that importers can open it through /proc. */
    int exported, ipc_fd;
    uint64_t serial;    /* exported: names the memfd; imported: the exporter's */
    /* Importer: the entry is another process's allocation, mapped here. */
    int imported, refs;
    pid_t peer;
};

static struct {
    pthread_rwlock_t lock;
    struct alloc **v;   /* sorted by res; reservations never overlap */
    size_t n, cap;
} T = {.lock = PTHREAD_RWLOCK_INITIALIZER};

/* The entry whose reservation holds a, or NULL. T.lock held. */
static struct alloc *t_find(uintptr_t a)
{
    size_t lo = 0, hi = T.n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (T.v[mid]->res <= a) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return NULL;
    struct alloc *e = T.v[lo - 1];
    return a - e->res < e->res_len ? e : NULL;
}

/* Does [res, res + len) overlap an entry? T.lock held. */
static int t_overlaps(uintptr_t res, size_t len)
{
    size_t lo = 0, hi = T.n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (T.v[mid]->res < res + len) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && T.v[lo - 1]->res + T.v[lo - 1]->res_len > res;
}

/* T.lock held for writing. */
static int t_insert(struct alloc *e)
{
    if (T.n == T.cap) {
        size_t cap = T.cap ? 2 * T.cap : 64;
        struct alloc **v = realloc(T.v, cap * sizeof *v);
        if (!v) return -1;
        T.v = v;
        T.cap = cap;
    }
    size_t i = T.n;
    while (i > 0 && T.v[i - 1]->res > e->res) {
        T.v[i] = T.v[i - 1];
        i--;
    }
    T.v[i] = e;
    T.n++;
    return 0;
}

/* T.lock held for writing. */
static void t_remove(struct alloc *e)
{
    size_t i = 0;
    while (i < T.n && T.v[i] != e) i++;
    if (i == T.n) return;
    memmove(&T.v[i], &T.v[i + 1], (T.n - i - 1) * sizeof *T.v);
    T.n--;
}

/* Unmaps what e owns and frees it (already out of the table). */
static void alloc_release(struct alloc *e)
{
    switch (e->kind) {
    case A_DEVICE:
        munmap((void *)e->res, e->res_len);
        munmap(e->shadow_map, e->res_len);
        if (e->exported) close(e->ipc_fd);
        break;
    case A_HOST:
    case A_MANAGED:
        munmap((void *)e->res, e->res_len);
        break;
    default:
        break; /* registered: the caller's memory */
    }
    free(e);
}

static size_t round_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

/* Device memory: the address handed out lies in a PROT_NONE reservation (a
 * host dereference faults, exactly as on a GPU); the bytes live in a
 * separate private "shadow" mapping that only the mock's copies and kernel
 * twins touch. The block is placed at the END of its pages (still 256-byte
 * aligned) and followed by a PROT_NONE guard page in both mappings, so a
 * twin that runs past the end faults instead of scribbling. */
static cudaError_t dev_alloc(void **out, size_t size, int d)
{
    if (fiu_fail("eccl/mock_cudart/malloc")) return cudaErrorMemoryAllocation;
    size_t body = round_up(size, DEV_ALIGN);
    size_t map_len = round_up(size, cfg.page);
    size_t res_len = map_len + cfg.page;
    struct alloc *e = calloc(1, sizeof *e);
    if (!e) return cudaErrorMemoryAllocation;
    pthread_rwlock_wrlock(&T.lock);
    if (g.dev[d].used + map_len > cfg.cap || g.dev[d].used + map_len < map_len) {
        pthread_rwlock_unlock(&T.lock);
        free(e);
        return cudaErrorMemoryAllocation;
    }
    g.dev[d].used += map_len;
    pthread_rwlock_unlock(&T.lock);

    void *res = mmap(NULL, res_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *sh = mmap(NULL, res_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                    -1, 0);
    if (res == MAP_FAILED || sh == MAP_FAILED || mprotect((char *)sh + map_len, cfg.page, PROT_NONE)) {
        if (res != MAP_FAILED) munmap(res, res_len);
        if (sh != MAP_FAILED) munmap(sh, res_len);
        free(e);
        pthread_rwlock_wrlock(&T.lock);
        g.dev[d].used -= map_len;
        pthread_rwlock_unlock(&T.lock);
        return cudaErrorMemoryAllocation;
    }
    e->res = (uintptr_t)res;
    e->res_len = res_len;
    e->ptr = e->res + (map_len - body);
    e->size = size;
    e->shadow_map = sh;
    e->shadow = (char *)sh + (map_len - body);
    e->charged = map_len;
    e->kind = A_DEVICE;
    e->device = d;
    if (cfg.poison) memset(e->shadow, POISON, size);
    pthread_rwlock_wrlock(&T.lock);
    int rc = t_insert(e);
    if (rc) g.dev[d].used -= map_len;
    pthread_rwlock_unlock(&T.lock);
    if (rc) {
        alloc_release(e);
        return cudaErrorMemoryAllocation;
    }
    *out = (void *)e->ptr;
    return cudaSuccess;
}

/* Host-accessible memory the runtime owns (pinned, managed). */
static cudaError_t host_alloc(void **out, size_t size, int kind, unsigned flags)
{
    size_t len = round_up(size, cfg.page);
    struct alloc *e = calloc(1, sizeof *e);
    if (!e) return cudaErrorMemoryAllocation;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        free(e);
        return cudaErrorMemoryAllocation;
    }
    e->res = e->ptr = (uintptr_t)p;
    e->res_len = len;
    e->size = size;
    e->kind = kind;
    e->device = tls_dev;
    e->flags = flags;
    pthread_rwlock_wrlock(&T.lock);
    int rc = t_insert(e);
    pthread_rwlock_unlock(&T.lock);
    if (rc) {
        alloc_release(e);
        return cudaErrorMemoryAllocation;
    }
    *out = p;
    return cudaSuccess;
}

/* What a pointer is, for copies: its kind (A_NONE: pageable host memory the
 * runtime does not know) and device. [p, p + n) must lie inside a known
 * allocation entirely, else cudaErrorInvalidValue: the real copy engine
 * would fault past the end; the mock refuses rather than write. */
static cudaError_t classify(const void *p, size_t n, int *kind, int *dev)
{
    uintptr_t a = (uintptr_t)p;
    cudaError_t rc = cudaSuccess;
    pthread_rwlock_rdlock(&T.lock);
    struct alloc *e = t_find(a);
    if (!e) {
        *kind = A_NONE;
        *dev = -1;
    } else {
        *kind = e->kind;
        *dev = e->device;
        if (a < e->ptr || a - e->ptr > e->size || n > e->size - (a - e->ptr)) rc = cudaErrorInvalidValue;
    }
    pthread_rwlock_unlock(&T.lock);
    return rc;
}

/* Where the bytes of [p, p + n) are, at execution time. `kind` is what the
 * pointer was when the op was queued: device memory freed since is an
 * illegal address (NULL), never a host write to a recycled address. */
static void *xlate(const void *p, size_t n, int kind)
{
    uintptr_t a = (uintptr_t)p;
    void *r = NULL;
    pthread_rwlock_rdlock(&T.lock);
    struct alloc *e = t_find(a);
    if (!e) {
        if (kind == A_NONE) r = (void *)p;
    } else if (a >= e->ptr && a - e->ptr <= e->size && n <= e->size - (a - e->ptr)) {
        r = e->kind == A_DEVICE ? e->shadow + (a - e->ptr) : (void *)p;
    }
    pthread_rwlock_unlock(&T.lock);
    return r;
}

/* The twins' pointer map (twin.h): device memory of the stream's device ->
 * its shadow; pinned, registered and managed memory -> itself; anything
 * else -> NULL (an illegal address), since a GPU without HMM/ATS cannot
 * reach pageable host memory; ECCL_MOCK_CUDA_HMM=1 lets it through. A
 * pointer into a device reservation but outside the allocation (the slack
 * before it, the guard after it) is NULL, and so is another device's memory
 * (peer access is not modelled). */
static void *twin_ptr(void *ctx, const void *dev)
{
    int d = *(const int *)ctx;
    uintptr_t a = (uintptr_t)dev;
    void *r = NULL;
    pthread_rwlock_rdlock(&T.lock);
    struct alloc *e = t_find(a);
    if (!e) {
        if (cfg.hmm) r = (void *)dev;
    } else if (a >= e->ptr && a - e->ptr < e->size) {
        if (e->kind != A_DEVICE) r = (void *)dev;
        else if (e->device == d) r = e->shadow + (a - e->ptr);
    }
    pthread_rwlock_unlock(&T.lock);
    return r;
}

/* -------------------------------------------------------- streams, events */

enum opk { OP_COPY, OP_MEMSET, OP_KERNEL, OP_RECORD, OP_WAIT, OP_FREE };

struct dep {
    struct stream *s;
    uint64_t pos; /* satisfied once s->completed >= pos */
};

struct op {
    struct op *next;
    int kind;
    struct dep *deps; /* implicit legacy-stream synchronisation */
    int ndeps;
    /* OP_COPY / OP_MEMSET */
    void *dst;
    const void *src;
    size_t n;
    int dst_kind, src_kind, value;
    void *staging; /* a pageable source copied at call time (freed after) */
    /* OP_KERNEL */
    eccl_twin_task *task;
    eccl_twin_dim grid, block;
    size_t shmem;
    /* OP_RECORD / OP_WAIT */
    struct event *ev;
    uint64_t gen;
    /* OP_FREE */
    struct alloc *freed;
};

struct stream {
    struct stream *next_all;
    int device;
    unsigned flags;
    int legacy;
    struct op *head, *tail;
    uint64_t enqueued, completed; /* ops queued / finished, ever */
    pthread_t thr;
    int thr_started, stop, dead;
    int refs; /* the owner (until destroyed) + each dep naming it */
};

struct event {
    struct event *next_all;
    int device;
    unsigned flags;
    uint64_t gen;      /* records made (the latest is what counts) */
    uint64_t done_gen; /* highest record reached */
    struct timespec t; /* when done_gen was reached */
    int refs, dead;    /* the owner + each queued op naming it */
};

static void stream_unref(struct stream *s) /* g.mu held */
{
    if (--s->refs > 0) return;
    struct stream **pp = &g.streams;
    while (*pp && *pp != s) pp = &(*pp)->next_all;
    if (*pp) *pp = s->next_all;
    free(s);
}

static void event_unref(struct event *ev) /* g.mu held */
{
    if (--ev->refs > 0) return;
    struct event **pp = &g.events;
    while (*pp && *pp != ev) pp = &(*pp)->next_all;
    if (*pp) *pp = ev->next_all;
    free(ev);
}

static void op_free(struct op *o) /* g.mu held */
{
    for (int i = 0; i < o->ndeps; i++) stream_unref(o->deps[i].s);
    free(o->deps);
    if (o->ev) event_unref(o->ev);
    if (o->task) o->task->discard(o->task);
    free(o->staging);
    free(o);
}

static struct stream *stream_new(int d, unsigned flags, int legacy) /* g.mu held */
{
    struct stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->device = d;
    s->flags = flags;
    s->legacy = legacy;
    s->refs = 1;
    s->next_all = g.streams;
    g.streams = s;
    return s;
}

/* cudaStream_t -> stream. 0 and cudaStreamLegacy are the current device's
 * legacy default stream; cudaStreamPerThread is treated as it too (the
 * per-thread default stream is not modelled). A destroyed or made-up
 * handle is cudaErrorInvalidResourceHandle, not a crash. g.mu held. */
static cudaError_t resolve(cudaStream_t h, struct stream **out)
{
    if (h == NULL || h == cudaStreamLegacy || h == cudaStreamPerThread) {
        struct dev *dv = &g.dev[tls_dev];
        if (!dv->legacy && !(dv->legacy = stream_new(tls_dev, 0, 1))) return cudaErrorMemoryAllocation;
        *out = dv->legacy;
        return cudaSuccess;
    }
    for (struct stream *s = g.streams; s; s = s->next_all)
        if (s == (struct stream *)h && !s->dead) {
            *out = s;
            return cudaSuccess;
        }
    return cudaErrorInvalidResourceHandle;
}

static struct event *find_event(cudaEvent_t h) /* g.mu held */
{
    for (struct event *ev = g.events; ev; ev = ev->next_all)
        if (ev == (struct event *)h && !ev->dead) return ev;
    return NULL;
}

static int blocking(const struct stream *s)
{
    return !s->legacy && !(s->flags & cudaStreamNonBlocking);
}

static int op_ready(const struct stream *s, const struct op *o) /* g.mu held */
{
    if (sticky(s->device)) return 1; /* a broken context drains without running */
    for (int i = 0; i < o->ndeps; i++)
        if (o->deps[i].s->completed < o->deps[i].pos) return 0;
    if (o->kind == OP_WAIT && o->ev->done_gen < o->gen) return 0;
    return 1;
}

/* Runs one op on the worker (g.mu not held). Returns the asynchronous error
 * that breaks the context, or cudaSuccess. */
static cudaError_t op_exec(struct stream *s, struct op *o)
{
    switch (o->kind) {
    case OP_COPY: {
        if (fiu_fail("eccl/mock_cudart/sticky")) return cudaErrorIllegalAddress;
        /* A copy the DMA engine could not finish: the runtime reports
         * cudaErrorLaunchFailure ("unspecified launch failure"), sticky. */
        if (fiu_fail("eccl/mock_cudart/memcpy")) return cudaErrorLaunchFailure;
        void *d = xlate(o->dst, o->n, o->dst_kind);
        const void *src = o->staging ? o->staging : xlate(o->src, o->n, o->src_kind);
        if (!d || !src) return cudaErrorIllegalAddress;
        memmove(d, src, o->n);
        return cudaSuccess;
    }
    case OP_MEMSET: {
        if (fiu_fail("eccl/mock_cudart/sticky")) return cudaErrorIllegalAddress;
        void *d = xlate(o->dst, o->n, o->dst_kind);
        if (!d) return cudaErrorIllegalAddress;
        memset(d, o->value, o->n);
        return cudaSuccess;
    }
    case OP_KERNEL: {
        eccl_twin_task *t = o->task;
        o->task = NULL; /* run() frees it, whatever it returns */
        if (fiu_fail("eccl/mock_cudart/sticky")) {
            t->discard(t);
            return cudaErrorIllegalAddress;
        }
        int d = s->device;
        return t->run(t, o->grid, o->block, o->shmem, twin_ptr, &d) ? cudaErrorIllegalAddress : cudaSuccess;
    }
    case OP_FREE: {
        struct alloc *e = o->freed;
        pthread_rwlock_wrlock(&T.lock);
        t_remove(e);
        g.dev[e->device].used -= e->charged;
        pthread_rwlock_unlock(&T.lock);
        alloc_release(e);
        o->freed = NULL;
        return cudaSuccess;
    }
    default:
        return cudaSuccess; /* records and waits act under g.mu */
    }
}

/* One per stream, started on its first op: runs the queue in order. */
static void *worker(void *arg)
{
    struct stream *s = arg;
    pthread_mutex_lock(&g.mu);
    for (;;) {
        while (!s->stop && !(s->head && op_ready(s, s->head))) pthread_cond_wait(&g.cv, &g.mu);
        if (s->stop) break;
        struct op *o = s->head;
        s->head = o->next;
        if (!s->head) s->tail = NULL;
        int broken = sticky(s->device) != cudaSuccess;
        pthread_mutex_unlock(&g.mu);

        /* The knob that makes asynchrony observable: a caller that reads
         * a result without synchronising sees stale bytes. */
        if (cfg.delay_us) usleep(cfg.delay_us);
        cudaError_t e = cudaSuccess;
        if (!broken || o->kind == OP_FREE) e = op_exec(s, o);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);

        pthread_mutex_lock(&g.mu);
        if (o->kind == OP_RECORD && o->gen > o->ev->done_gen) {
            o->ev->done_gen = o->gen;
            o->ev->t = now;
        }
        if (e != cudaSuccess) set_sticky(s->device, e);
        s->completed++;
        op_free(o);
        pthread_cond_broadcast(&g.cv);
    }
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* Queues o on s, adding the legacy default stream's implicit
 * synchronisation: an op on the legacy stream waits for everything queued
 * so far on the device's blocking streams, and an op on a blocking stream
 * waits for everything queued so far on the legacy stream. Non-blocking
 * streams take part in neither. On failure o is freed. g.mu held. */
static cudaError_t enqueue(struct stream *s, struct op *o)
{
    int nd = 0, cap = 0;
    for (struct stream *t = g.streams; t; t = t->next_all) cap++;
    o->deps = cap ? calloc((size_t)cap, sizeof *o->deps) : NULL;
    if (cap && !o->deps) goto nomem;
    for (struct stream *t = g.streams; t; t = t->next_all) {
        if (t == s || t->device != s->device || t->completed == t->enqueued) continue;
        if ((s->legacy && blocking(t)) || (blocking(s) && t->legacy)) {
            o->deps[nd].s = t;
            o->deps[nd].pos = t->enqueued;
            t->refs++;
            nd++;
        }
    }
    o->ndeps = nd;
    if (!s->thr_started) {
        if (pthread_create(&s->thr, NULL, worker, s)) goto nomem;
        s->thr_started = 1;
    }
    o->next = NULL;
    if (s->tail) s->tail->next = o;
    else s->head = o;
    s->tail = o;
    s->enqueued++;
    pthread_cond_broadcast(&g.cv);
    return cudaSuccess;
nomem:
    op_free(o);
    return cudaErrorMemoryAllocation;
}

/* Blocks until s has completed pos ops, or its device breaks: waiters on a
 * broken context get the error, they never hang. g.mu held. */
static cudaError_t wait_pos(struct stream *s, uint64_t pos)
{
    while (s->completed < pos && !sticky(s->device)) pthread_cond_wait(&g.cv, &g.mu);
    return sticky(s->device);
}

/* Waits for everything queued so far on device d's streams (legacy_sync:
 * only the legacy and the blocking ones). g.mu held. */
static cudaError_t wait_device(int d, int legacy_sync)
{
    /* Snapshot first: work queued while we wait is not ours to wait for. */
    size_t n = 0;
    for (struct stream *t = g.streams; t; t = t->next_all) n++;
    struct dep *v = n ? calloc(n, sizeof *v) : NULL;
    if (n && !v) return cudaErrorMemoryAllocation;
    size_t k = 0;
    for (struct stream *t = g.streams; t; t = t->next_all) {
        if (t->device != d || (legacy_sync && !blocking(t) && !t->legacy)) continue;
        v[k].s = t;
        v[k].pos = t->enqueued;
        t->refs++;
        k++;
    }
    cudaError_t rc = cudaSuccess;
    for (size_t i = 0; i < k; i++) {
        if (rc == cudaSuccess) rc = wait_pos(v[i].s, v[i].pos);
    }
    for (size_t i = 0; i < k; i++) stream_unref(v[i].s);
    free(v);
    return rc != cudaSuccess ? rc : sticky(d);
}

static cudaError_t stream_sync_locked(struct stream *s)
{
    /* Synchronising the legacy stream waits for the blocking streams too,
     * as if an empty op were queued on it and waited for. */
    if (s->legacy) return wait_device(s->device, 1);
    return wait_pos(s, s->enqueued);
}

/* ------------------------------------------------------------- device */

EXPORT cudaError_t cudaGetDeviceCount(int *count)
{
    ENTER();
    if (!count) return rec(cudaErrorInvalidValue);
    *count = cfg.ndev;
    return cudaSuccess;
}

EXPORT cudaError_t cudaGetDevice(int *device)
{
    ENTER();
    if (!device) return rec(cudaErrorInvalidValue);
    *device = tls_dev;
    return cudaSuccess;
}

EXPORT cudaError_t cudaSetDevice(int device)
{
    ENTER();
    if (device < 0 || device >= cfg.ndev) return rec(cudaErrorInvalidDevice);
    tls_dev = device;
    return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceSynchronize(void)
{
    ENTER_DEV();
    pthread_mutex_lock(&g.mu);
    cudaError_t rc = wait_device(tls_dev, 0);
    pthread_mutex_unlock(&g.mu);
    return rec(rc);
}

/* An H100 SXM's answers, where they are cheap to give; the rest is
 * cudaErrorInvalidValue so a caller relying on one shows up. */
EXPORT cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    ENTER();
    if (!value) return rec(cudaErrorInvalidValue);
    if (device < 0 || device >= cfg.ndev) return rec(cudaErrorInvalidDevice);
    int v;
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: v = 1024; break;
    case cudaDevAttrMaxBlockDimX: v = 1024; break;
    case cudaDevAttrMaxBlockDimY: v = 1024; break;
    case cudaDevAttrMaxBlockDimZ: v = 64; break;
    case cudaDevAttrMaxGridDimX: v = 2147483647; break;
    case cudaDevAttrMaxGridDimY: v = 65535; break;
    case cudaDevAttrMaxGridDimZ: v = 65535; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: v = MAX_SHMEM; break;
    case cudaDevAttrWarpSize: v = 32; break;
    case cudaDevAttrMultiProcessorCount: v = 132; break;
    case cudaDevAttrComputeCapabilityMajor: v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: v = 0; break;
    case cudaDevAttrUnifiedAddressing: v = 1; break;
    case cudaDevAttrCanMapHostMemory: v = 1; break;
    case cudaDevAttrManagedMemory: v = 1; break;
    case cudaDevAttrConcurrentManagedAccess: v = 1; break;
    case cudaDevAttrMemoryPoolsSupported: v = 1; break;
    case cudaDevAttrPageableMemoryAccess: v = cfg.hmm; break;
    case cudaDevAttrIntegrated: v = 0; break;
    case cudaDevAttrPciDeviceId: v = device; break;
    case cudaDevAttrPciBusId: v = device + 1; break;
    case cudaDevAttrPciDomainId: v = 0; break;
    default: return rec(cudaErrorInvalidValue);
    }
    *value = v;
    return cudaSuccess;
}

EXPORT cudaError_t cudaDriverGetVersion(int *driverVersion)
{
    if (!driverVersion) return rec(cudaErrorInvalidValue);
    *driverVersion = CUDART_VERSION;
    return cudaSuccess;
}

EXPORT cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
    if (!runtimeVersion) return rec(cudaErrorInvalidValue);
    *runtimeVersion = CUDART_VERSION;
    return cudaSuccess;
}

/* Returns and clears this thread's last error; a broken context's error
 * cannot be cleared (it comes back every time, as on the real runtime). */
EXPORT cudaError_t cudaGetLastError(void)
{
    cudaError_t e = tls_err;
    tls_err = cudaSuccess;
    cudaError_t s = sticky(tls_dev);
    return s != cudaSuccess ? s : e;
}

EXPORT cudaError_t cudaPeekAtLastError(void)
{
    cudaError_t s = sticky(tls_dev);
    return s != cudaSuccess ? s : tls_err;
}

static const struct {
    cudaError_t e;
    const char *name, *text;
} errs[] = {
#define E(x, t) {x, #x, t}
    E(cudaSuccess, "no error"),
    E(cudaErrorInvalidValue, "invalid argument"),
    E(cudaErrorMemoryAllocation, "out of memory"),
    E(cudaErrorInitializationError, "initialization error"),
    E(cudaErrorMissingConfiguration, "__global__ function call is not configured"),
    E(cudaErrorInvalidConfiguration, "invalid configuration argument"),
    E(cudaErrorInvalidDevice, "invalid device ordinal"),
    E(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"),
    E(cudaErrorInvalidDeviceFunction, "invalid device function"),
    E(cudaErrorNoDevice, "no CUDA-capable device is detected"),
    E(cudaErrorInvalidResourceHandle, "invalid resource handle"),
    E(cudaErrorNotReady, "device not ready"),
    E(cudaErrorIllegalAddress, "an illegal memory access was encountered"),
    E(cudaErrorLaunchOutOfResources, "too many resources requested for launch"),
    E(cudaErrorLaunchFailure, "unspecified launch failure"),
    E(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped"),
    E(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region"),
    E(cudaErrorNotSupported, "operation not supported"),
#undef E
};

EXPORT const char *cudaGetErrorString(cudaError_t error)
{
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
        if (errs[i].e == error) return errs[i].text;
    return "unrecognized error code";
}

EXPORT const char *cudaGetErrorName(cudaError_t error)
{
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
        if (errs[i].e == error) return errs[i].name;
    return "cudaErrorUnknown";
}

/* ------------------------------------------------------------- memory */

EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    ENTER_DEV();
    if (!devPtr) return rec(cudaErrorInvalidValue);
    *devPtr = NULL;
    if (size == 0) return cudaSuccess; /* as CUDA: success, NULL */
    return rec(dev_alloc(devPtr, size, tls_dev));
}

/* Stream-ordered allocation: the mock allocates at once (the memory is
 * usable in stream order, and earlier too -- pools are not modelled). */
EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    ENTER_DEV();
    if (!devPtr) return rec(cudaErrorInvalidValue);
    pthread_mutex_lock(&g.mu);
    struct stream *s;
    cudaError_t rc = resolve(hStream, &s);
    pthread_mutex_unlock(&g.mu);
    if (rc) return rec(rc);
    *devPtr = NULL;
    if (size == 0) return cudaSuccess;
    return rec(dev_alloc(devPtr, size, s->device));
}

/* Takes e out of the table for cudaFree/cudaFreeHost: it must be exactly
 * the start of an allocation of kind k1 or k2 not being freed already. */
static cudaError_t take(void *p, int k1, int k2, struct alloc **out)
{
    pthread_rwlock_wrlock(&T.lock);
    struct alloc *e = t_find((uintptr_t)p);
    if (!e || e->ptr != (uintptr_t)p || (e->kind != k1 && e->kind != k2) || e->freeing || e->imported) {
        pthread_rwlock_unlock(&T.lock);
        return cudaErrorInvalidValue;
    }
    t_remove(e);
    if (e->kind == A_DEVICE) g.dev[e->device].used -= e->charged;
    pthread_rwlock_unlock(&T.lock);
    *out = e;
    return cudaSuccess;
}

/* Device memory may still be in use by queued work: cudaFree synchronises
 * the device first, as the real one does. */
static cudaError_t free_sync(void *p, int k1, int k2)
{
    int kind, d;
    if (classify(p, 1, &kind, &d) || (kind != k1 && kind != k2)) return cudaErrorInvalidValue;
    pthread_mutex_lock(&g.mu);
    cudaError_t rc = wait_device(d >= 0 ? d : tls_dev, 0);
    pthread_mutex_unlock(&g.mu);
    if (rc) return rc;
    struct alloc *e;
    if ((rc = take(p, k1, k2, &e))) return rc;
    alloc_release(e);
    return cudaSuccess;
}

EXPORT cudaError_t cudaFree(void *devPtr)
{
    ENTER_DEV();
    if (!devPtr) return cudaSuccess;
    return rec(free_sync(devPtr, A_DEVICE, A_MANAGED));
}

EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    ENTER_DEV();
    if (!devPtr) return cudaSuccess;
    pthread_mutex_lock(&g.mu);
    struct stream *s;
    cudaError_t rc = resolve(hStream, &s);
    if (rc) goto out;
    pthread_rwlock_wrlock(&T.lock);
    struct alloc *e = t_find((uintptr_t)devPtr);
    if (!e || e->ptr != (uintptr_t)devPtr || e->kind != A_DEVICE || e->freeing || e->imported) {
        pthread_rwlock_unlock(&T.lock);
        rc = cudaErrorInvalidValue;
        goto out;
    }
    e->freeing = 1;
    pthread_rwlock_unlock(&T.lock);
    struct op *o = calloc(1, sizeof *o);
    if (!o) {
        rc = cudaErrorMemoryAllocation;
        goto out;
    }
    o->kind = OP_FREE;
    o->freed = e;
    rc = enqueue(s, o);
out:
    pthread_mutex_unlock(&g.mu);
    return rec(rc);
}

EXPORT cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    ENTER_DEV();
    if (!pHost || (flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined)))
        return rec(cudaErrorInvalidValue);
    *pHost = NULL;
    if (fiu_fail("eccl/mock_cudart/malloc")) return rec(cudaErrorMemoryAllocation);
    if (size == 0) return cudaSuccess;
    return rec(host_alloc(pHost, size, A_HOST, flags));
}

EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

EXPORT cudaError_t cudaFreeHost(void *ptr)
{
    ENTER_DEV();
    if (!ptr) return cudaSuccess;
    return rec(free_sync(ptr, A_HOST, A_HOST));
}

EXPORT cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    ENTER_DEV();
    if (!devPtr || size == 0 || (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost))
        return rec(cudaErrorInvalidValue);
    *devPtr = NULL;
    if (fiu_fail("eccl/mock_cudart/malloc")) return rec(cudaErrorMemoryAllocation);
    return rec(host_alloc(devPtr, size, A_MANAGED, flags));
}

EXPORT cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    ENTER_DEV();
    unsigned ok = cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterIoMemory |
                  cudaHostRegisterReadOnly;
    if (!ptr || size == 0 || (flags & ~ok)) return rec(cudaErrorInvalidValue);
    struct alloc *e = calloc(1, sizeof *e);
    if (!e) return rec(cudaErrorMemoryAllocation);
    e->res = e->ptr = (uintptr_t)ptr;
    e->res_len = e->size = size;
    e->kind = A_REGISTERED;
    e->device = tls_dev;
    e->flags = flags;
    cudaError_t rc = cudaSuccess;
    pthread_rwlock_wrlock(&T.lock);
    if (t_overlaps(e->res, size)) rc = cudaErrorHostMemoryAlreadyRegistered;
    else if (t_insert(e)) rc = cudaErrorMemoryAllocation;
    pthread_rwlock_unlock(&T.lock);
    if (rc) free(e);
    return rec(rc);
}

EXPORT cudaError_t cudaHostUnregister(void *ptr)
{
    ENTER_DEV();
    pthread_rwlock_wrlock(&T.lock);
    struct alloc *e = t_find((uintptr_t)ptr);
    if (!e || e->kind != A_REGISTERED || e->ptr != (uintptr_t)ptr) {
        pthread_rwlock_unlock(&T.lock);
        return rec(cudaErrorHostMemoryNotRegistered);
    }
    t_remove(e);
    pthread_rwlock_unlock(&T.lock);
    /* Queued copies may still read it: the real call synchronises too. */
    pthread_mutex_lock(&g.mu);
    wait_device(e->device, 0);
    pthread_mutex_unlock(&g.mu);
    free(e);
    return cudaSuccess;
}

/* UVA: a pinned or registered host pointer is its own device pointer. */
EXPORT cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags)
{
    ENTER_DEV();
    int kind, d;
    if (!pDevice || flags || classify(pHost, 1, &kind, &d) || (kind != A_HOST && kind != A_REGISTERED))
        return rec(cudaErrorInvalidValue);
    *pDevice = pHost;
    return cudaSuccess;
}

EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    ENTER_DEV();
    if (!attributes) return rec(cudaErrorInvalidValue);
    memset(attributes, 0, sizeof *attributes);
    pthread_rwlock_rdlock(&T.lock);
    struct alloc *e = t_find((uintptr_t)ptr);
    /* Inside a device reservation but outside the allocation (the slack,
     * the guard) is an address nobody handed out: unregistered. */
    if (e && ((uintptr_t)ptr < e->ptr || (uintptr_t)ptr - e->ptr >= e->size)) e = NULL;
    if (!e) {
        /* CUDA >= 11: memory it does not know is a success, not an error. */
        attributes->type = cudaMemoryTypeUnregistered;
        attributes->device = -2;
    } else {
        attributes->device = e->device;
        attributes->devicePointer = (void *)ptr;
        switch (e->kind) {
        case A_DEVICE: attributes->type = cudaMemoryTypeDevice; break;
        case A_MANAGED:
            attributes->type = cudaMemoryTypeManaged;
            attributes->hostPointer = (void *)ptr;
            break;
        default:
            attributes->type = cudaMemoryTypeHost;
            attributes->hostPointer = (void *)ptr;
            break;
        }
    }
    pthread_rwlock_unlock(&T.lock);
    return cudaSuccess;
}

/* ---------------------------------------------------- driver entry points */

/* The driver functions the runtime hands out (cudaGetDriverEntryPointByVersion):
 * cuMemGetAddressRange, which finds the base of an allocation that
 * cudaIpcGetMemHandle needs. CUresult values are cuda.h's. */
#define CU_SUCCESS 0
#define CU_ERROR_INVALID_VALUE 1
#define CU_ERROR_NOT_FOUND 500

static int mock_cuMemGetAddressRange(unsigned long long *pbase, size_t *psize, unsigned long long dptr)
{
    if (enter() != cudaSuccess) return 3; /* CUDA_ERROR_NOT_INITIALIZED */
    int rc = CU_ERROR_NOT_FOUND;
    pthread_rwlock_rdlock(&T.lock);
    struct alloc *e = t_find((uintptr_t)dptr);
    if (e && e->kind == A_DEVICE && dptr >= e->ptr && dptr - e->ptr < e->size) {
        if (pbase) *pbase = e->ptr;
        if (psize) *psize = e->size;
        rc = CU_SUCCESS;
    }
    pthread_rwlock_unlock(&T.lock);
    return rc;
}

EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                                     unsigned long long flags,
                                                     enum cudaDriverEntryPointQueryResult *driverStatus)
{
    ENTER();
    (void)flags;
    if (!symbol || !funcPtr) return rec(cudaErrorInvalidValue);
    int v = 0;
    cudaDriverGetVersion(&v);
    if (cudaVersion > (unsigned)v) return rec(cudaErrorInvalidValue);
    *funcPtr = NULL;
    enum cudaDriverEntryPointQueryResult st = cudaDriverEntryPointSymbolNotFound;
    if (strcmp(symbol, "cuMemGetAddressRange") == 0) {
        /* _v2 (size_t sizes) since CUDA 3.2, the only one a 64-bit build has */
        if (cudaVersion >= 3020) {
            *funcPtr = (void *)mock_cuMemGetAddressRange;
            st = cudaDriverEntryPointSuccess;
        } else {
            st = cudaDriverEntryPointVersionNotSufficent;
        }
    }
    if (driverStatus) *driverStatus = st;
    return cudaSuccess;
}

/* ---------------------------------------------------------------- IPC */

/* What a cudaIpcMemHandle_t holds here: where the exporter's memfd is
 * (pid, fd) and what it must be called there (nonce, serial), so a handle
 * of freed memory, a dead exporter or a recycled pid or fd number is
 * refused instead of mapping someone else's file. */
#define IPC_MAGIC 0x4d434950u /* "PICM" */

struct ipc_handle {
    uint32_t magic;
    int32_t pid;
    int32_t fd;
    int32_t device;
    uint64_t nonce, serial;
    uint64_t size;    /* what the exporter allocated */
    uint64_t map_len; /* the shadow mapping's length, guard page excluded */
    uint64_t off;     /* where the allocation starts in it */
};
_Static_assert(sizeof(struct ipc_handle) <= CUDA_IPC_HANDLE_SIZE, "fits cudaIpcMemHandle_t");

static void memfd_name(char *out, size_t len, pid_t pid, uint64_t nonce, uint64_t serial)
{
    snprintf(out, len, "eccl-mock-cuda-%d-%016llx-%llu", (int)pid, (unsigned long long)nonce,
             (unsigned long long)serial);
}

/* Moves e's shadow into a memfd mapped at the same address (MAP_FIXED
 * replaces the private pages in one step; the guard page stays). T.lock
 * held for writing, the device idle: nothing writes the old pages. */
static cudaError_t make_shareable(struct alloc *e)
{
    size_t map_len = e->res_len - cfg.page;
    uint64_t serial = atomic_fetch_add(&g.serials, 1) + 1;
    char name[96];
    memfd_name(name, sizeof name, getpid(), g.nonce, serial);
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) return cudaErrorMapBufferObjectFailed;
    size_t done = 0;
    if (ftruncate(fd, (off_t)map_len) != 0) goto fail;
    while (done < map_len) {
        ssize_t k = pwrite(fd, e->shadow_map + done, map_len - done, (off_t)done);
        if (k <= 0) goto fail;
        done += (size_t)k;
    }
    if (mmap(e->shadow_map, map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
        goto fail;
    e->exported = 1;
    e->ipc_fd = fd;
    e->serial = serial;
    return cudaSuccess;
fail:
    close(fd);
    return cudaErrorMapBufferObjectFailed;
}

EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    ENTER_DEV();
    int kind, d;
    if (!handle || !devPtr || classify(devPtr, 1, &kind, &d) || kind != A_DEVICE)
        return rec(cudaErrorInvalidValue);
    /* The first export moves the bytes: queued work must not be writing
     * them meanwhile (the real call does not wait; only timing differs).
     * Later exports, one per message in eccl, return at once. */
    pthread_rwlock_rdlock(&T.lock);
    struct alloc *x = t_find((uintptr_t)devPtr);
    int shared = x && x->exported;
    pthread_rwlock_unlock(&T.lock);
    cudaError_t rc = cudaSuccess;
    if (!shared) {
        pthread_mutex_lock(&g.mu);
        rc = wait_device(d, 0);
        pthread_mutex_unlock(&g.mu);
        if (rc) return rec(rc);
    }
    pthread_rwlock_wrlock(&T.lock);
    struct alloc *e = t_find((uintptr_t)devPtr);
    /* The base of a cudaMalloc allocation of this process, as documented
     * (a real runtime given an interior pointer exports the whole
     * allocation, and the importer cannot tell the offset). */
    if (!e || e->kind != A_DEVICE || e->ptr != (uintptr_t)devPtr || e->imported || e->freeing)
        rc = cudaErrorInvalidValue;
    else if (!e->exported)
        rc = make_shareable(e);
    if (rc == cudaSuccess) {
        struct ipc_handle h = {.magic = IPC_MAGIC, .pid = getpid(), .fd = e->ipc_fd, .device = e->device,
                               .nonce = g.nonce, .serial = e->serial, .size = e->size,
                               .map_len = e->res_len - cfg.page, .off = e->ptr - e->res};
        memset(handle, 0, sizeof *handle);
        memcpy(handle->reserved, &h, sizeof h);
    }
    pthread_rwlock_unlock(&T.lock);
    return rec(rc);
}

/* The exporter's memfd, opened through /proc (the same ptrace rule as
 * process_vm_readv), if it still is the file the handle names. */
static int ipc_open_file(const struct ipc_handle *h)
{
    char path[64], link[160], want[112];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h->pid, (int)h->fd);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n <= 0) return -1;
    link[n] = '\0';
    char name[96];
    memfd_name(name, sizeof name, h->pid, h->nonce, h->serial);
    snprintf(want, sizeof want, "/memfd:%s", name);
    size_t wl = strlen(want);
    if (strncmp(link, want, wl) != 0 || (link[wl] != '\0' && link[wl] != ' ')) return -1;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || (uint64_t)st.st_size < h->map_len)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* An import of (pid, serial) that is not being closed. T.lock held. */
static struct alloc *t_find_import(pid_t pid, uint64_t serial)
{
    for (size_t i = 0; i < T.n; i++) {
        struct alloc *e = T.v[i];
        if (e->imported && !e->freeing && e->peer == pid && e->serial == serial) return e;
    }
    return NULL;
}

EXPORT cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
    ENTER_DEV();
    if (!devPtr || flags != cudaIpcMemLazyEnablePeerAccess) return rec(cudaErrorInvalidValue);
    struct ipc_handle h;
    memcpy(&h, handle.reserved, sizeof h);
    if (h.magic != IPC_MAGIC || h.pid <= 0 || h.fd < 0 || h.size == 0 || h.map_len == 0 ||
        h.map_len % cfg.page || h.off >= h.map_len || h.size > h.map_len - h.off)
        return rec(cudaErrorInvalidResourceHandle);
    /* The exporting process itself may not open its own handle. */
    if (h.pid == getpid()) return rec(cudaErrorDeviceUninitialized);
    if (fiu_fail("eccl/mock_cudart/ipc")) return rec(cudaErrorMapBufferObjectFailed);
    /* Opened before in this context: one more reference, the same pointer. */
    pthread_rwlock_wrlock(&T.lock);
    struct alloc *e = t_find_import(h.pid, h.serial);
    if (e) {
        e->refs++;
        *devPtr = (void *)e->ptr;
    }
    pthread_rwlock_unlock(&T.lock);
    if (e) return cudaSuccess;

    int fd = ipc_open_file(&h);
    if (fd < 0) return rec(cudaErrorInvalidResourceHandle); /* freed, or its process is gone */
    size_t res_len = h.map_len + cfg.page;
    e = calloc(1, sizeof *e);
    void *res = mmap(NULL, res_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *sh = mmap(NULL, res_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    int mapped = res != MAP_FAILED && sh != MAP_FAILED &&
                 mmap(sh, h.map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) != MAP_FAILED;
    close(fd); /* the mapping keeps the memory */
    if (!e || !mapped) {
        if (res != MAP_FAILED) munmap(res, res_len);
        if (sh != MAP_FAILED) munmap(sh, res_len);
        free(e);
        return rec(cudaErrorMapBufferObjectFailed);
    }
    e->res = (uintptr_t)res;
    e->res_len = res_len;
    e->ptr = e->res + h.off;
    e->size = h.size;
    e->shadow_map = sh;
    e->shadow = (char *)sh + h.off;
    e->kind = A_DEVICE;
    e->device = tls_dev; /* mapped into the importer's current device */
    e->imported = 1;
    e->refs = 1;
    e->peer = h.pid;
    e->serial = h.serial;
    pthread_rwlock_wrlock(&T.lock);
    struct alloc *raced = t_find_import(h.pid, h.serial);
    int rc = raced ? 0 : t_insert(e);
    if (raced) {
        raced->refs++;
        *devPtr = (void *)raced->ptr;
    } else if (rc == 0) {
        *devPtr = (void *)e->ptr;
    }
    pthread_rwlock_unlock(&T.lock);
    if (raced || rc) alloc_release(e);
    return rc ? rec(cudaErrorMemoryAllocation) : cudaSuccess;
}

EXPORT cudaError_t cudaIpcCloseMemHandle(void *devPtr)
{
    ENTER_DEV();
    pthread_rwlock_wrlock(&T.lock);
    struct alloc *e = t_find((uintptr_t)devPtr);
    if (!e || !e->imported || e->freeing || e->ptr != (uintptr_t)devPtr) {
        pthread_rwlock_unlock(&T.lock);
        return rec(cudaErrorInvalidValue);
    }
    int last = --e->refs == 0;
    if (last) e->freeing = 1; /* an open from now on maps afresh */
    int d = e->device;
    pthread_rwlock_unlock(&T.lock);
    if (!last) return cudaSuccess;
    /* Queued work may still read it, as with cudaFree. */
    pthread_mutex_lock(&g.mu);
    cudaError_t rc = wait_device(d, 0);
    pthread_mutex_unlock(&g.mu);
    pthread_rwlock_wrlock(&T.lock);
    t_remove(e);
    pthread_rwlock_unlock(&T.lock);
    alloc_release(e);
    return rec(rc);
}

/* ------------------------------------------------------------- copies */

static int host_ok(int kind)
{
    return kind != A_DEVICE;
}

static int dev_ok(int kind)
{
    return kind != A_NONE || cfg.hmm;
}

/* Checks a copy and queues it on hStream; `sync`: wait for it before
 * returning (cudaMemcpy; also any copy into pageable memory, as the real
 * runtime does). */
static cudaError_t copy_queue(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                              cudaStream_t hStream, int sync)
{
    if (count == 0) return cudaSuccess;
    if (!dst || !src) return cudaErrorInvalidValue;
    int dk, sk, dd, sd;
    if (classify(dst, count, &dk, &dd) || classify(src, count, &sk, &sd)) return cudaErrorInvalidValue;
    int good;
    switch (kind) {
    case cudaMemcpyHostToHost: good = host_ok(sk) && host_ok(dk); break;
    case cudaMemcpyHostToDevice: good = host_ok(sk) && dev_ok(dk); break;
    case cudaMemcpyDeviceToHost: good = dev_ok(sk) && host_ok(dk); break;
    case cudaMemcpyDeviceToDevice: good = dev_ok(sk) && dev_ok(dk); break;
    case cudaMemcpyDefault: good = 1; break;
    default: return cudaErrorInvalidMemcpyDirection;
    }
    if (!good) return cudaErrorInvalidValue;
    struct op *o = calloc(1, sizeof *o);
    if (!o) return cudaErrorMemoryAllocation;
    o->kind = OP_COPY;
    o->dst = dst;
    o->src = src;
    o->n = count;
    o->dst_kind = dk;
    o->src_kind = sk;
    /* From pageable memory the real runtime stages the source before it
     * returns: the caller may reuse it at once. Mirror that. */
    if (sk == A_NONE && !sync) {
        if (!(o->staging = malloc(count))) {
            free(o);
            return cudaErrorMemoryAllocation;
        }
        memcpy(o->staging, src, count);
    }
    /* Into pageable memory the call returns only once the copy is done. */
    if (dk == A_NONE) sync = 1;
    pthread_mutex_lock(&g.mu);
    struct stream *s;
    cudaError_t rc = resolve(hStream, &s);
    if (rc) {
        op_free(o);
    } else if ((rc = enqueue(s, o)) == cudaSuccess && sync) {
        rc = wait_pos(s, s->enqueued);
    }
    pthread_mutex_unlock(&g.mu);
    return rc;
}

/* Synchronous: queued on the legacy default stream (so it is ordered with
 * the blocking streams' work) and waited for. */
EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    ENTER_DEV();
    return rec(copy_queue(dst, src, count, kind, NULL, 1));
}

EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                   cudaStream_t stream)
{
    ENTER_DEV();
    return rec(copy_queue(dst, src, count, kind, stream, 0));
}

static cudaError_t memset_queue(void *devPtr, int value, size_t count, cudaStream_t hStream, int sync)
{
    if (count == 0) return cudaSuccess;
    int kind, d;
    /* The target must be memory the device can write: not pageable. */
    if (!devPtr || classify(devPtr, count, &kind, &d) || !dev_ok(kind)) return cudaErrorInvalidValue;
    struct op *o = calloc(1, sizeof *o);
    if (!o) return cudaErrorMemoryAllocation;
    o->kind = OP_MEMSET;
    o->dst = devPtr;
    o->n = count;
    o->dst_kind = kind;
    o->value = value;
    /* cudaMemset returns before the device is done unless the target is
     * host memory: documented, and what the mock does. */
    sync = sync && kind != A_DEVICE;
    pthread_mutex_lock(&g.mu);
    struct stream *s;
    cudaError_t rc = resolve(hStream, &s);
    if (rc) {
        op_free(o);
    } else if ((rc = enqueue(s, o)) == cudaSuccess && sync) {
        rc = wait_pos(s, s->enqueued);
    }
    pthread_mutex_unlock(&g.mu);
    return rc;
}

EXPORT cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    ENTER_DEV();
    return rec(memset_queue(devPtr, value, count, NULL, 1));
}

EXPORT cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    ENTER_DEV();
    return rec(memset_queue(devPtr, value, count, stream, 0));
}

/* ------------------------------------------------------------- streams */

EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    ENTER_DEV();
    if (!pStream || (flags & ~(unsigned)cudaStreamNonBlocking)) return rec(cudaErrorInvalidValue);
    pthread_mutex_lock(&g.mu);
    struct stream *s = stream_new(tls_dev, flags, 0);
    pthread_mutex_unlock(&g.mu);
    if (!s) return rec(cudaErrorMemoryAllocation);
    *pStream = (cudaStream_t)s;
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

/* The real call returns at once and lets queued work finish; the mock waits
 * for it (same results, the only difference is when the call returns) so it
 * can join the worker here: no thread outlives its stream. */
EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    ENTER_DEV();
    if (stream == NULL || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
        return rec(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&g.mu);
    struct stream *s;
    cudaError_t rc = resolve(stream, &s);
    if (rc) {
        pthread_mutex_unlock(&g.mu);
        return rec(rc);
    }
    s->dead = 1; /* no new work; its handle is invalid from now on */
    /* Drain even when broken: a broken context's workers skip their ops. */
    while (s->completed < s->enqueued) pthread_cond_wait(&g.cv, &g.mu);
    s->stop = 1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    if (s->thr_started) pthread_join(s->thr, NULL);
    pthread_mutex_lock(&g.mu);
    stream_unref(s);
    pthread_mutex_unlock(&g.mu);
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    ENTER_DEV();
    pthread_mutex_lock(&g.mu);
    struct stream *s;
    cudaError_t rc = resolve(stream, &s);
    if (!rc) rc = stream_sync_locked(s);
    pthread_mutex_unlock(&g.mu);
    return rec(rc);
}

EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    ENTER_DEV();
    pthread_mutex_lock(&g.mu);
    struct stream *s;
    cudaError_t rc = resolve(stream, &s);
    if (!rc) rc = sticky(s->device);
    if (!rc && s->completed < s->enqueued) rc = cudaErrorNotReady;
    pthread_mutex_unlock(&g.mu);
    /* NotReady is an answer, not an error: the last error stays. */
    return rc == cudaErrorNotReady ? rc : rec(rc);
}

EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    ENTER_DEV();
    if (flags & ~(unsigned)cudaEventWaitExternal) return rec(cudaErrorInvalidValue);
    pthread_mutex_lock(&g.mu);
    struct stream *s;
    struct event *ev = find_event(event);
    cudaError_t rc = resolve(stream, &s);
    if (!rc && !ev) rc = cudaErrorInvalidResourceHandle;
    /* Never recorded, or already reached: nothing to wait for (CUDA). */
    if (!rc && ev->done_gen < ev->gen) {
        struct op *o = calloc(1, sizeof *o);
        if (!o) {
            rc = cudaErrorMemoryAllocation;
        } else {
            o->kind = OP_WAIT;
            o->ev = ev;
            o->gen = ev->gen; /* the latest record now; later ones do not count */
            ev->refs++;
            rc = enqueue(s, o);
        }
    }
    pthread_mutex_unlock(&g.mu);
    return rec(rc);
}

/* ------------------------------------------------------------- events */

EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    ENTER_DEV();
    unsigned ok = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
    if (!event || (flags & ~ok)) return rec(cudaErrorInvalidValue);
    /* Interprocess events must also disable timing (CUDA's rule). */
    if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)) return rec(cudaErrorInvalidValue);
    struct event *ev = calloc(1, sizeof *ev);
    if (!ev) return rec(cudaErrorMemoryAllocation);
    ev->device = tls_dev;
    ev->flags = flags;
    ev->refs = 1;
    pthread_mutex_lock(&g.mu);
    ev->next_all = g.events;
    g.events = ev;
    pthread_mutex_unlock(&g.mu);
    *event = (cudaEvent_t)ev;
    return cudaSuccess;
}

EXPORT cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    ENTER_DEV();
    pthread_mutex_lock(&g.mu);
    struct stream *s;
    struct event *ev = find_event(event);
    cudaError_t rc = resolve(stream, &s);
    /* Event and stream must belong to the same device. */
    if (!rc && (!ev || ev->device != s->device)) rc = cudaErrorInvalidResourceHandle;
    if (!rc) {
        struct op *o = calloc(1, sizeof *o);
        if (!o) {
            rc = cudaErrorMemoryAllocation;
        } else {
            o->kind = OP_RECORD;
            o->ev = ev;
            o->gen = ++ev->gen;
            ev->refs++;
            rc = enqueue(s, o);
            if (rc) ev->gen--;
        }
    }
    pthread_mutex_unlock(&g.mu);
    return rec(rc);
}

EXPORT cudaError_t cudaEventQuery(cudaEvent_t event)
{
    ENTER_DEV();
    pthread_mutex_lock(&g.mu);
    struct event *ev = find_event(event);
    cudaError_t rc = ev ? sticky(ev->device) : cudaErrorInvalidResourceHandle;
    if (!rc && ev->done_gen < ev->gen) rc = cudaErrorNotReady;
    pthread_mutex_unlock(&g.mu);
    return rc == cudaErrorNotReady ? rc : rec(rc);
}

EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    ENTER_DEV();
    pthread_mutex_lock(&g.mu);
    struct event *ev = find_event(event);
    cudaError_t rc = ev ? cudaSuccess : cudaErrorInvalidResourceHandle;
    if (!rc) {
        uint64_t gen = ev->gen;
        ev->refs++;
        while (ev->done_gen < gen && !sticky(ev->device)) pthread_cond_wait(&g.cv, &g.mu);
        rc = sticky(ev->device);
        event_unref(ev);
    }
    pthread_mutex_unlock(&g.mu);
    return rec(rc);
}

/* The event may still be queued: it lives until its ops are done. */
EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    ENTER_DEV();
    pthread_mutex_lock(&g.mu);
    struct event *ev = find_event(event);
    if (ev) {
        ev->dead = 1;
        event_unref(ev);
    }
    pthread_mutex_unlock(&g.mu);
    return ev ? cudaSuccess : rec(cudaErrorInvalidResourceHandle);
}

EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    ENTER_DEV();
    if (!ms) return rec(cudaErrorInvalidValue);
    pthread_mutex_lock(&g.mu);
    struct event *a = find_event(start), *b = find_event(end);
    cudaError_t rc = cudaSuccess;
    if (!a || !b || a->gen == 0 || b->gen == 0 || (a->flags & cudaEventDisableTiming) ||
        (b->flags & cudaEventDisableTiming))
        rc = cudaErrorInvalidResourceHandle;
    else if (a->done_gen < a->gen || b->done_gen < b->gen)
        rc = cudaErrorNotReady;
    else
        *ms = (float)((double)(b->t.tv_sec - a->t.tv_sec) * 1e3 + (double)(b->t.tv_nsec - a->t.tv_nsec) / 1e6);
    pthread_mutex_unlock(&g.mu);
    return rec(rc);
}

/* ------------------------------------------------- kernels and their twins */

struct module {
    void *fatbin; /* what __cudaRegisterFatBinary got; &fatbin is the handle */
};

/* One per __cudaRegisterFunction. Never freed before exit: a cudaKernel_t
 * is a pointer to one, and a stale handle must stay safe to look at. */
struct kfun {
    struct kfun *next;
    const void *host_fun; /* NULL once its module is unregistered */
    void **module;
    char *name;
    int resolved;
    eccl_twin_bind_fn bind; /* "<name>_twin", NULL if none */
};

static struct kfun *kfuns;

EXPORT void **__cudaRegisterFatBinary(void *fatCubin)
{
    struct module *m = calloc(1, sizeof *m);
    if (!m) abort(); /* the real runtime has no way to fail here either */
    m->fatbin = fatCubin;
    return &m->fatbin;
}

EXPORT void __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
    (void)fatCubinHandle;
}

EXPORT void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
    if (!fatCubinHandle) return;
    pthread_mutex_lock(&g.reg);
    for (struct kfun *f = kfuns; f; f = f->next)
        if (f->module == fatCubinHandle) {
            f->host_fun = NULL; /* the object goes away; its address may be reused */
            f->module = NULL;
            f->bind = NULL;
        }
    pthread_mutex_unlock(&g.reg);
    free(fatCubinHandle); /* &m->fatbin == m */
}

EXPORT void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                   const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                                   dim3 *bDim, dim3 *gDim, int *wSize)
{
    struct kfun *f = calloc(1, sizeof *f);
    char *name = strdup(deviceName ? deviceName : deviceFun);
    if (!f || !name) abort();
    f->host_fun = hostFun;
    f->module = fatCubinHandle;
    f->name = name;
    pthread_mutex_lock(&g.reg);
    f->next = kfuns;
    kfuns = f;
    pthread_mutex_unlock(&g.reg);
}

/* Device variables are recorded by nobody: a twin has no way to reach
 * them, so a kernel that uses one has no twin anyway. */
EXPORT void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                              const char *deviceName, int ext, size_t size, int constant, int global)
{
}

EXPORT char __cudaInitModule(void **fatCubinHandle)
{
    return 1;
}

static struct kfun *kfun_by_host(const void *fun) /* g.reg held */
{
    for (struct kfun *f = kfuns; f; f = f->next)
        if (f->host_fun && f->host_fun == fun) return f;
    return NULL;
}

/* "<name>_twin" in the object that registered the kernel, looked up once.
 * g.reg held. */
static eccl_twin_bind_fn twin_of(struct kfun *f)
{
    if (f->resolved) return f->bind;
    f->resolved = 1;
    char sym[512];
    if ((size_t)snprintf(sym, sizeof sym, "%s%s", f->name, ECCL_TWIN_SUFFIX) >= sizeof sym) return NULL;
    Dl_info di;
    if (!dladdr(f->host_fun, &di) || !di.dli_fname) return NULL;
    void *p = NULL;
    /* NOLOAD: a handle to the object already mapped (refcount +1, undone
     * below); looking in THAT object, not the global scope, so two plugins
     * with kernels of the same name each get their own twin. */
    void *h = dlopen(di.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
    if (h) {
        p = dlsym(h, sym);
        dlclose(h);
    } else {
        /* The main program has no name dlopen knows: its exported
         * (-rdynamic) symbols are in the global scope. */
        p = dlsym(RTLD_DEFAULT, sym);
    }
    memcpy(&f->bind, &p, sizeof p); /* object pointer -> function pointer */
    return f->bind;
}

static int dim_ok(dim3 grid, dim3 block)
{
    if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z) return 0;
    if (grid.y > 65535 || grid.z > 65535 || block.x > 1024 || block.y > 1024 || block.z > 64) return 0;
    return (uint64_t)block.x * block.y * block.z <= 1024;
}

static cudaError_t launch(struct kfun *f, dim3 grid, dim3 block, void **args, size_t shmem,
                          cudaStream_t hStream)
{
    if (!f) return cudaErrorInvalidDeviceFunction;
    if (!dim_ok(grid, block)) return cudaErrorInvalidConfiguration;
    if (shmem > MAX_SHMEM) return cudaErrorInvalidValue;
    if (fiu_fail("eccl/mock_cudart/launch")) return cudaErrorLaunchOutOfResources;
    pthread_mutex_lock(&g.reg);
    eccl_twin_bind_fn bind = f->host_fun ? twin_of(f) : NULL;
    pthread_mutex_unlock(&g.reg);
    /* No twin, no kernel: the mock never pretends it ran. */
    if (!bind) return cudaErrorInvalidDeviceFunction;
    /* Arguments are captured by value now, as at a GPU launch. */
    eccl_twin_task *t = bind(args);
    if (!t) return cudaErrorMemoryAllocation;
    struct op *o = calloc(1, sizeof *o);
    if (!o) {
        t->discard(t);
        return cudaErrorMemoryAllocation;
    }
    o->kind = OP_KERNEL;
    o->task = t;
    o->grid = (eccl_twin_dim){grid.x, grid.y, grid.z};
    o->block = (eccl_twin_dim){block.x, block.y, block.z};
    o->shmem = shmem;
    pthread_mutex_lock(&g.mu);
    struct stream *s;
    cudaError_t rc = resolve(hStream, &s);
    /* A stream of another device is not the current context's. */
    if (!rc && s->device != tls_dev) rc = cudaErrorInvalidResourceHandle;
    if (rc) op_free(o); /* discards the task */
    else rc = enqueue(s, o);
    pthread_mutex_unlock(&g.mu);
    return rc;
}

EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                    size_t sharedMem, cudaStream_t stream)
{
    ENTER_DEV();
    pthread_mutex_lock(&g.reg);
    struct kfun *f = kfun_by_host(func);
    pthread_mutex_unlock(&g.reg);
    return rec(launch(f, gridDim, blockDim, args, sharedMem, stream));
}

/* <<<grid, block, shmem, stream>>> compiles to Push (here, per thread),
 * then the host stub Pops it, maps the stub to a kernel handle with
 * __cudaGetKernel and calls __cudaLaunchKernel. */
struct call_config {
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
};
#define CONFIG_DEPTH 16
static _Thread_local struct call_config tls_cfg[CONFIG_DEPTH];
static _Thread_local int tls_ncfg;

EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                            struct CUstream_st *stream)
{
    if (tls_ncfg == CONFIG_DEPTH) return 1; /* nonzero: the <<<>>> skips the call */
    tls_cfg[tls_ncfg++] = (struct call_config){gridDim, blockDim, sharedMem, stream};
    return 0;
}

EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream)
{
    if (tls_ncfg == 0) return rec(cudaErrorMissingConfiguration);
    struct call_config *c = &tls_cfg[--tls_ncfg];
    *gridDim = c->grid;
    *blockDim = c->block;
    *sharedMem = c->shmem;
    *(cudaStream_t *)stream = c->stream;
    return cudaSuccess;
}

EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *fun)
{
    if (!kernel) return rec(cudaErrorInvalidValue);
    pthread_mutex_lock(&g.reg);
    struct kfun *f = kfun_by_host(fun);
    pthread_mutex_unlock(&g.reg);
    if (!f) return rec(cudaErrorInvalidDeviceFunction);
    *kernel = (cudaKernel_t)f;
    return cudaSuccess;
}

EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                      size_t sharedMem, cudaStream_t stream)
{
    ENTER_DEV();
    struct kfun *f = NULL;
    pthread_mutex_lock(&g.reg);
    for (struct kfun *k = kfuns; k; k = k->next)
        if (k == (struct kfun *)kernel && k->host_fun) f = k;
    pthread_mutex_unlock(&g.reg);
    return rec(launch(f, gridDim, blockDim, args, sharedMem, stream));
}

EXPORT cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
    ENTER();
    if (!attr) return rec(cudaErrorInvalidValue);
    pthread_mutex_lock(&g.reg);
    struct kfun *f = kfun_by_host(func);
    pthread_mutex_unlock(&g.reg);
    if (!f) return rec(cudaErrorInvalidDeviceFunction);
    memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = 1024;
    attr->numRegs = 32;
    attr->ptxVersion = 90;
    attr->binaryVersion = 90;
    attr->maxDynamicSharedSizeBytes = MAX_SHMEM;
    return cudaSuccess;
}

/* Thrust sizes its grids with this. The mock's answer is an H100's bound
 * (2048 resident threads per SM, 32 blocks), for a kernel it knows. */
EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, const void *func,
                                                                         int blockSize, size_t dynamicSMemSize,
                                                                         unsigned int flags)
{
    ENTER();
    (void)flags;
    if (!numBlocks || blockSize <= 0 || blockSize > 1024 || dynamicSMemSize > MAX_SHMEM)
        return rec(cudaErrorInvalidValue);
    pthread_mutex_lock(&g.reg);
    struct kfun *f = kfun_by_host(func);
    pthread_mutex_unlock(&g.reg);
    if (!f) return rec(cudaErrorInvalidDeviceFunction);
    int n = 2048 / blockSize;
    *numBlocks = n < 32 ? n : 32;
    return cudaSuccess;
}

/* ------------------------------------------------------- process life */

static void atfork_prepare(void)
{
    pthread_mutex_lock(&g.mu);
}

static void atfork_parent(void)
{
    pthread_mutex_unlock(&g.mu);
}

/* The child has none of the workers: if the parent had a context, CUDA is
 * unusable in the child (cudaErrorInitializationError), as with the real
 * driver. */
static void atfork_child(void)
{
    pthread_mutex_unlock(&g.mu);
    if (atomic_load(&g.used)) atomic_store(&g.forked, 1);
}

__attribute__((constructor)) static void mock_init(void)
{
    fiu_init(0);
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* At exit: stop and join every worker (queued work is dropped, as when a
 * process exits with work on a GPU), then unmap every allocation. */
__attribute__((destructor)) static void mock_fini(void)
{
    if (atomic_load(&g.forked)) return; /* the child owns no threads */
    pthread_mutex_lock(&g.mu);
    for (struct stream *s = g.streams; s; s = s->next_all) s->stop = 1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    for (struct stream *s = g.streams; s; s = s->next_all)
        if (s->thr_started) {
            pthread_join(s->thr, NULL);
            s->thr_started = 0;
        }
    pthread_mutex_lock(&g.mu);
    for (struct stream *s = g.streams; s; s = s->next_all) {
        while (s->head) {
            struct op *o = s->head;
            s->head = o->next;
            for (int i = 0; i < o->ndeps; i++) o->deps[i].s->refs--;
            o->ndeps = 0;
            if (o->ev) o->ev->refs--;
            o->ev = NULL;
            op_free(o);
        }
    }
    while (g.streams) {
        struct stream *s = g.streams;
        g.streams = s->next_all;
        free(s);
    }
    while (g.events) {
        struct event *ev = g.events;
        g.events = ev->next_all;
        free(ev);
    }
    for (int d = 0; d < MAX_DEVICES; d++) g.dev[d].legacy = NULL;
    pthread_mutex_unlock(&g.mu);
    pthread_rwlock_wrlock(&T.lock);
    for (size_t i = 0; i < T.n; i++) alloc_release(T.v[i]);
    free(T.v);
    T.v = NULL;
    T.n = T.cap = 0;
    pthread_rwlock_unlock(&T.lock);
    pthread_mutex_lock(&g.reg);
    while (kfuns) {
        struct kfun *f = kfuns;
        kfuns = f->next;
        free(f->name);
        free(f);
    }
    pthread_mutex_unlock(&g.reg);
}
