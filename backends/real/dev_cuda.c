#include "dev_cuda.h"

#include <dlfcn.h>
#include <errno.h>
#include <fiu-local.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../cuda/plugin.h"
#include "env_real.h"

/* ---- the plugin: loaded once per process ------------------------------------ */

static pthread_once_t plugin_once = PTHREAD_ONCE_INIT;
static const eccl_cuda_plugin *plugin;
static char plugin_why[512];

/* The fields this libeccl calls; a plugin built before them is refused. */
#define PLUGIN_MIN_SIZE (offsetof(eccl_cuda_plugin, last_error) + sizeof(void *))

static void *open_beside_libeccl(void)
{
    Dl_info di;
    if (!dladdr((void *)open_beside_libeccl, &di) || !di.dli_fname) return NULL;
    const char *slash = strrchr(di.dli_fname, '/');
    if (!slash) return NULL;
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%.*s/%s", (int)(slash - di.dli_fname), di.dli_fname,
                     ECCL_CUDA_PLUGIN_SONAME);
    if (n < 0 || (size_t)n >= sizeof path) return NULL;
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

static void plugin_load(void)
{
    const char *named = getenv("ECCL_CUDA_PLUGIN");
    void *h;
    if (fiu_fail("eccl/dev/cuda_load")) {
        snprintf(plugin_why, sizeof plugin_why, "failpoint eccl/dev/cuda_load");
        return;
    }
    if (named && *named) {
        h = dlopen(named, RTLD_NOW | RTLD_LOCAL);
    } else {
        h = open_beside_libeccl();
        if (!h) h = dlopen(ECCL_CUDA_PLUGIN_SONAME, RTLD_NOW | RTLD_LOCAL);
    }
    if (!h) {
        const char *e = dlerror();
        snprintf(plugin_why, sizeof plugin_why, "cannot load %s: %s",
                 named && *named ? named : ECCL_CUDA_PLUGIN_SONAME, e ? e : "unknown error");
        return;
    }
    const eccl_cuda_plugin *p = dlsym(h, ECCL_CUDA_PLUGIN_SYMBOL);
    if (!p || p->size < PLUGIN_MIN_SIZE) {
        snprintf(plugin_why, sizeof plugin_why, "%s: no usable %s table", ECCL_CUDA_PLUGIN_SONAME,
                 ECCL_CUDA_PLUGIN_SYMBOL);
        dlclose(h);
        return;
    }
    /* Never unloaded: the CUDA runtime underneath does not support it well,
     * and other envs of this process may use it any time. */
    plugin = p;
}

/* ---- per env --------------------------------------------------------------- */

#define MIRRORS_MAX 16

typedef struct mirror {
    void *p;
    size_t cap;
} mirror;

struct eccl_real_cuda {
    eccl_env *env;
    pthread_mutex_t mu;
    int tried;           /* open attempted (success or not) */
    eccl_result open_rc; /* its result */
    void *ctx;           /* the plugin's context, once open */
    _Atomic int home;    /* device of the last device buffer seen: where imports map */
    int keep;            /* mirrors kept for reuse */
    int nfree;
    mirror free_list[MIRRORS_MAX];
};

eccl_real_cuda *eccl_real_cuda_new(eccl_env *env)
{
    eccl_real_cuda *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->env = env;
    pthread_mutex_init(&c->mu, NULL);
    c->keep = 4;
    const char *k = getenv("ECCL_CUDA_MIRRORS");
    if (k && *k) {
        char *end;
        long v = strtol(k, &end, 10);
        if (*end || v < 0 || v > MIRRORS_MAX)
            eccl_real_log(env, ECCL_LOG_WARN, "ECCL_CUDA_MIRRORS=\"%s\" is not 0..%d; using %d", k,
                          MIRRORS_MAX, c->keep);
        else
            c->keep = (int)v;
    }
    return c;
}

void eccl_real_cuda_free(eccl_real_cuda *c)
{
    if (!c) return;
    for (int i = 0; i < c->nfree; i++) plugin->host_free(c->ctx, c->free_list[i].p);
    if (c->ctx) plugin->close(c->ctx);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Opens the plugin's context once; later calls return the first answer. */
static eccl_result cuda_open(eccl_real_cuda *c)
{
    pthread_mutex_lock(&c->mu);
    if (!c->tried) {
        c->tried = 1;
        pthread_once(&plugin_once, plugin_load);
        char why[256] = "";
        if (!plugin) {
            c->open_rc = ECCL_ERR_UNSUPPORTED;
            eccl_real_log(c->env, ECCL_LOG_WARN, "device memory needs the CUDA plugin: %s", plugin_why);
        } else if ((c->open_rc = plugin->open(&c->ctx, why, sizeof why)) != ECCL_OK) {
            c->ctx = NULL;
            eccl_real_log(c->env, ECCL_LOG_WARN, "device memory: %s", why);
        }
    }
    eccl_result rc = c->open_rc;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int cuda_is_open(eccl_real_cuda *c)
{
    pthread_mutex_lock(&c->mu);
    int open = c->ctx != NULL;
    pthread_mutex_unlock(&c->mu);
    return open;
}

/* Our pid, for host_readable: read once, not per probe (getpid is a system
 * call of its own, and a call probes each of its buffers). A forked child
 * reads its own again (pthread_atfork): with the parent's it would probe
 * the parent's memory. */
static atomic_int self_pid;
static pthread_once_t self_pid_once = PTHREAD_ONCE_INIT;
static void self_pid_forget(void) { atomic_store(&self_pid, 0); }
static void self_pid_watch_forks(void) { pthread_atfork(NULL, NULL, self_pid_forget); }

static pid_t self_pid_get(void)
{
    pthread_once(&self_pid_once, self_pid_watch_forks);
    int pid = atomic_load_explicit(&self_pid, memory_order_relaxed);
    if (!pid) {
        pid = (int)getpid();
        atomic_store_explicit(&self_pid, pid, memory_order_relaxed);
    }
    return (pid_t)pid;
}

/* 1 if the host can read the byte at p, 0 if it cannot (device memory is
 * mapped inaccessible to the host), -1 if the kernel will not say. One
 * system call, and no signal: a fault is reported as EFAULT. */
static int host_readable_vm(const void *p)
{
    char b;
    struct iovec local = {&b, 1}, remote = {(void *)p, 1};
    if (process_vm_readv(self_pid_get(), &local, 1, &remote, 1, 0) == 1) return 1;
    return errno == EFAULT ? 0 : -1;
}

/* The same answer for a fraction of the cost: rt_sigprocmask with an
 * invalid `how` copies the 8-byte set in (EFAULT where it cannot), then
 * refuses `how` (EINVAL), and changes nothing. process_vm_readv pins the
 * page and looks the process up: 20 % of all CPU time of a stream of 8-byte
 * broadcasts at N = 2, which probe two buffers a call. The 8 bytes read
 * are the aligned word holding p, on p's page. */
#define PROBE_HOW_INVALID (-1) /* neither SIG_BLOCK, SIG_UNBLOCK nor SIG_SETMASK */
static int host_readable_mask(const void *p)
{
    long r = syscall(SYS_rt_sigprocmask, PROBE_HOW_INVALID, (void *)((uintptr_t)p & ~(uintptr_t)7), NULL, 8);
    if (r < 0 && errno == EINVAL) return 1;
    return r < 0 && errno == EFAULT ? 0 : -1;
}

/* Whether host_readable_mask answers as described on this kernel: a word of
 * ours reads, a page with no access does not (a kernel, or a sandbox, that
 * looks at `how` first would call everything readable). */
static atomic_int mask_probe_works; /* 0: not checked yet, 1: works, -1: does not */

static int mask_probe_check(void)
{
    long word = 0;
    int ok = host_readable_mask(&word) == 1;
    long page = sysconf(_SC_PAGESIZE);
    void *none = mmap(NULL, (size_t)page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (none == MAP_FAILED) return -1;
    ok = ok && host_readable_mask((char *)none + page / 2) == 0;
    munmap(none, (size_t)page);
    int fail = 0;
    fiu_do_on("eccl/cuda/probe_mask", fail = 1);
    return ok && !fail ? 1 : -1;
}

static int host_readable(const void *p)
{
    int works = atomic_load_explicit(&mask_probe_works, memory_order_relaxed);
    if (!works) {
        works = mask_probe_check();
        atomic_store_explicit(&mask_probe_works, works, memory_order_relaxed);
    }
    return works > 0 ? host_readable_mask(p) : host_readable_vm(p);
}

/* Where the process's heap starts (/proc/self/stat, field 47: start_brk),
 * read once: 1 where it cannot be read, which leaves the heap rule below
 * off. A forked child has its parent's. */
static atomic_uintptr_t heap_start;

static uintptr_t heap_start_read(void)
{
    uintptr_t at = 1;
    FILE *f = fopen("/proc/self/stat", "r");
    char line[2048];
    if (f && fgets(line, sizeof line, f)) {
        /* Fields after the command's closing parenthesis (the command
         * itself may hold spaces and parentheses): state is field 3. */
        char *p = strrchr(line, ')');
        int field = 2;
        unsigned long long v = 0;
        char *save = NULL;
        for (char *tok = p ? strtok_r(p + 1, " ", &save) : NULL; tok; tok = strtok_r(NULL, " ", &save))
            if (++field == 47) {
                v = strtoull(tok, NULL, 10);
                break;
            }
        if (v) at = (uintptr_t)v;
    }
    if (f) fclose(f);
    return at;
}

/* Whether [p, p + bytes) lies in the heap between its start and the
 * current break: malloc's anonymous memory, host memory that no device
 * mapping can share an address with. Small buffers come from there, and
 * a probe is a system call (two a call, 12 % of an 8-byte all-reduce
 * between two host-mates). No failpoint here: libfiu takes a lock per
 * look, on every call. */
static int in_heap(const void *p, size_t bytes)
{
    uintptr_t lo = atomic_load_explicit(&heap_start, memory_order_relaxed);
    if (!lo) {
        lo = heap_start_read();
        atomic_store_explicit(&heap_start, lo, memory_order_relaxed);
    }
    uintptr_t a = (uintptr_t)p, hi = (uintptr_t)sbrk(0);
    return lo > 1 && a >= lo && hi > a && bytes <= hi - a;
}

static eccl_result plugin_error(eccl_real_cuda *c, eccl_result rc, const char *what)
{
    if (rc != ECCL_OK) eccl_real_log(c->env, ECCL_LOG_WARN, "%s: %s", what, plugin->last_error(c->ctx));
    return rc;
}

eccl_result eccl_real_cuda_mem_kind(eccl_real_cuda *c, const void *p, size_t bytes, eccl_mem_kind *kind,
                                    int *device)
{
    *device = -1;
    if (in_heap(p, bytes ? bytes : 1)) {
        *kind = ECCL_MEM_HOST;
        return ECCL_OK;
    }
    /* Elsewhere one allocation is one kind: its first byte tells. */
    if (!cuda_is_open(c)) {
        /* Readable: host memory, as far as anything without a device
         * runtime can tell (and loading one for every host buffer would
         * cost host-only users a CUDA context). */
        int readable = host_readable(p);
        if (readable == 1) {
            *kind = ECCL_MEM_HOST;
            return ECCL_OK;
        }
        eccl_result rc = cuda_open(c);
        if (rc != ECCL_OK) {
            if (readable == -1) { /* the kernel will not say: assume host, as before devices */
                *kind = ECCL_MEM_HOST;
                return ECCL_OK;
            }
            return ECCL_ERR_UNSUPPORTED;
        }
    }
    eccl_result rc = plugin->mem_kind(c->ctx, p, kind, device);
    if (rc != ECCL_OK) return plugin_error(c, rc, "which memory");
    if (*kind == ECCL_MEM_DEVICE) atomic_store(&c->home, *device);
    if (*kind == ECCL_MEM_HOST && host_readable(p) == 0) {
        eccl_real_log(c->env, ECCL_LOG_WARN, "%p is neither host memory nor known to CUDA", p);
        return ECCL_ERR_INVALID_ARG;
    }
    return ECCL_OK;
}

eccl_result eccl_real_cuda_host_alloc(eccl_real_cuda *c, size_t bytes, void **out)
{
    eccl_result rc = cuda_open(c);
    if (rc != ECCL_OK) return rc;
    pthread_mutex_lock(&c->mu);
    /* The smallest cached mirror that fits, if it is not wastefully big. */
    int best = -1;
    for (int i = 0; i < c->nfree; i++)
        if (c->free_list[i].cap >= bytes && c->free_list[i].cap / 2 <= bytes &&
            (best < 0 || c->free_list[i].cap < c->free_list[best].cap))
            best = i;
    if (best >= 0) {
        *out = c->free_list[best].p;
        memmove(&c->free_list[best], &c->free_list[best + 1],
                (size_t)(c->nfree - best - 1) * sizeof c->free_list[0]);
        c->nfree--;
        pthread_mutex_unlock(&c->mu);
        return ECCL_OK;
    }
    pthread_mutex_unlock(&c->mu);
    return plugin_error(c, plugin->host_alloc(c->ctx, bytes, out), "pinned mirror");
}

/* Keeps the `keep` most recently freed mirrors, oldest first: a workload
 * that moves on to other sizes (a size sweep, a new model) replaces the old
 * mirrors instead of paying cudaHostAlloc on every call. */
void eccl_real_cuda_host_free(eccl_real_cuda *c, void *p, size_t bytes)
{
    if (!p) return;
    void *evict = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->keep == 0) {
        evict = p;
    } else {
        if (c->nfree == c->keep) {
            evict = c->free_list[0].p;
            memmove(&c->free_list[0], &c->free_list[1], (size_t)(c->nfree - 1) * sizeof c->free_list[0]);
            c->nfree--;
        }
        c->free_list[c->nfree++] = (mirror){p, bytes};
    }
    pthread_mutex_unlock(&c->mu);
    if (evict) plugin->host_free(c->ctx, evict);
}

eccl_result eccl_real_cuda_to_host(eccl_real_cuda *c, int device, void *stream, void *host, const void *dev,
                                   size_t bytes)
{
    eccl_result rc = cuda_open(c);
    if (rc == ECCL_OK) rc = plugin->order(c->ctx, device, stream, 1);
    if (rc == ECCL_OK) rc = plugin->copy(c->ctx, device, host, dev, bytes);
    if (rc == ECCL_OK) rc = plugin->sync(c->ctx, device);
    return c->ctx ? plugin_error(c, rc, "device to host") : rc;
}

eccl_result eccl_real_cuda_to_device(eccl_real_cuda *c, int device, void *stream, void *dev,
                                     const void *host, size_t bytes)
{
    eccl_result rc = cuda_open(c);
    if (rc == ECCL_OK) rc = plugin->copy(c->ctx, device, dev, host, bytes);
    if (rc == ECCL_OK) rc = plugin->order(c->ctx, device, stream, 0);
    if (rc == ECCL_OK) rc = plugin->sync(c->ctx, device);
    return c->ctx ? plugin_error(c, rc, "host to device") : rc;
}

/* ---- the device-resident ring's ops (core/env.h, d_*) --------------------------- */

eccl_result eccl_real_cuda_d_alloc(eccl_real_cuda *c, int device, size_t bytes, void **out)
{
    return plugin_error(c, plugin->dev_alloc(c->ctx, device, bytes, out), "device backup");
}

void eccl_real_cuda_d_free(eccl_real_cuda *c, void *p)
{
    if (p) plugin->dev_free(c->ctx, p);
}

eccl_result eccl_real_cuda_d_copy(eccl_real_cuda *c, int device, void *dst, const void *src, size_t bytes)
{
    return plugin_error(c, plugin->copy(c->ctx, device, dst, src, bytes), "device copy");
}

eccl_result eccl_real_cuda_d_reduce(eccl_real_cuda *c, int device, void *dst, const void *src, size_t count,
                                    eccl_dtype dtype, eccl_op op)
{
    return plugin_error(c, plugin->reduce(c->ctx, device, dst, src, count, dtype, op), "device reduce");
}

eccl_result eccl_real_cuda_d_scale_div(eccl_real_cuda *c, int device, void *x, size_t count, eccl_dtype dtype,
                                       uint32_t divisor)
{
    return plugin_error(c, plugin->scale_div(c->ctx, device, x, count, dtype, divisor), "device divide");
}

eccl_result eccl_real_cuda_d_sync(eccl_real_cuda *c, int device)
{
    return plugin_error(c, plugin->sync(c->ctx, device), "device work");
}

eccl_result eccl_real_cuda_d_order(eccl_real_cuda *c, int device, void *stream, int library_waits)
{
    return plugin_error(c, plugin->order(c->ctx, device, stream, library_waits), "stream order");
}

/* ---- CUDA IPC (net_shm's device payloads) ---------------------------------------- */

int eccl_real_cuda_has_ipc(eccl_real_cuda *c)
{
    return c && cuda_is_open(c) &&
           plugin->size >= offsetof(eccl_cuda_plugin, ipc_close) + sizeof plugin->ipc_close;
}

int eccl_real_cuda_home_device(eccl_real_cuda *c) { return atomic_load(&c->home); }

eccl_result eccl_real_cuda_ipc_export(eccl_real_cuda *c, int device, const void *p, void *handle, size_t *offset)
{
    if (!eccl_real_cuda_has_ipc(c)) return ECCL_ERR_UNSUPPORTED;
    eccl_result rc = plugin->ipc_export(c->ctx, device, p, handle, offset);
    if (rc != ECCL_OK)
        eccl_real_log(c->env, ECCL_LOG_DEBUG, "no CUDA IPC for %p: %s", p, plugin->last_error(c->ctx));
    return rc;
}

eccl_result eccl_real_cuda_ipc_open(eccl_real_cuda *c, int device, const void *handle, void **base)
{
    if (!eccl_real_cuda_has_ipc(c)) return ECCL_ERR_UNSUPPORTED;
    return plugin_error(c, plugin->ipc_open(c->ctx, device, handle, base), "a host-mate's device memory");
}

void eccl_real_cuda_ipc_close(eccl_real_cuda *c, int device, void *base)
{
    if (base && eccl_real_cuda_has_ipc(c)) plugin->ipc_close(c->ctx, device, base);
}

eccl_result eccl_real_cuda_ipc_read(eccl_real_cuda *c, int device, void *dst, const void *src, size_t bytes)
{
    eccl_result rc = plugin->copy(c->ctx, device, dst, src, bytes);
    if (rc == ECCL_OK) rc = plugin->sync(c->ctx, device);
    return plugin_error(c, rc, "reading a host-mate's device memory");
}
