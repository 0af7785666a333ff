/* The real env: clock, sync, dev (host memory) and log ops, plus the glue
 * that hands them to core together with the TCP net ops. */
#include "env_real.h"

#include <errno.h>
#include <fcntl.h>
#include <fiu-local.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "coll/reduce.h"
#include "util/config.h"
#include "auth_real.h"
#include "dev_cuda.h"
#include "net_ibv.h"
#include "net_shm.h"
#include "net_tcp.h"
#include "net_tls.h"
#include "chaos.h"
#ifdef ECCL_HAVE_IBV
#include "net/ibv.h"
#endif

/* eccl_env comes first so destroy can get back from the public pointer. */
typedef struct env_real {
    eccl_env env;
    uint64_t t0_ns; /* log timestamps count from here */
    eccl_real_cuda *cuda; /* device tensors (dev_cuda.h); opens nothing until needed */
    eccl_real_auth *auth; /* the job's secret; NULL: ECCL_AUTH=0 */
    uint64_t *chaos_wires; /* ECCL_CHAOS_WIRES, mapped; NULL: none */
    size_t chaos_wires_len;
} env_real;

/* pthread names are limited to 16 bytes including the NUL. */
#define THREAD_NAME_MAX 16

struct eccl_mutex {
    pthread_mutex_t m;
};

struct eccl_cond {
    pthread_cond_t c;
};

struct eccl_thread {
    pthread_t tid;
    void (*fn)(void *);
    void *arg;
    char name[THREAD_NAME_MAX];
};

uint64_t eccl_real_now_ns(void)
{
    struct timespec ts;
    /* Cannot fail for CLOCK_MONOTONIC with a valid pointer. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- clock --------------------------------------------------------------- */

static uint64_t real_now_ns(void *ctx)
{
    (void)ctx;
    return eccl_real_now_ns();
}

static const eccl_clock_ops real_clock_ops = {
    .size = sizeof(eccl_clock_ops),
    .now_ns = real_now_ns,
};

/* ---- sync ---------------------------------------------------------------- */

static eccl_result real_mutex_create(void *ctx, eccl_mutex **out)
{
    eccl_mutex *m = malloc(sizeof(*m));
    int rc;

    if (!m)
        return ECCL_ERR_NO_MEMORY;
    rc = pthread_mutex_init(&m->m, NULL);
    if (rc != 0) {
        eccl_real_log(ctx, ECCL_LOG_ERROR, "pthread_mutex_init: %s", strerror(rc));
        free(m);
        return ECCL_ERR_SYSTEM;
    }
    *out = m;
    return ECCL_OK;
}

static void real_mutex_destroy(void *ctx, eccl_mutex *m)
{
    (void)ctx;
    if (!m)
        return;
    pthread_mutex_destroy(&m->m);
    free(m);
}

static void real_lock(void *ctx, eccl_mutex *m)
{
    (void)ctx;
    pthread_mutex_lock(&m->m);
}

static void real_unlock(void *ctx, eccl_mutex *m)
{
    (void)ctx;
    pthread_mutex_unlock(&m->m);
}

static eccl_result real_cond_create(void *ctx, eccl_cond **out)
{
    eccl_cond *c = malloc(sizeof(*c));
    pthread_condattr_t attr;
    int rc;

    if (!c)
        return ECCL_ERR_NO_MEMORY;
    rc = pthread_condattr_init(&attr);
    if (rc == 0) {
        /* Deadlines are monotonic ns (eccl_real_now_ns), so the cond must
         * measure them on the same clock; a wall-clock step must not fire or
         * postpone a timeout. */
        rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        if (rc == 0)
            rc = pthread_cond_init(&c->c, &attr);
        pthread_condattr_destroy(&attr);
    }
    if (rc != 0) {
        eccl_real_log(ctx, ECCL_LOG_ERROR, "pthread_cond_init: %s", strerror(rc));
        free(c);
        return ECCL_ERR_SYSTEM;
    }
    *out = c;
    return ECCL_OK;
}

static void real_cond_destroy(void *ctx, eccl_cond *c)
{
    (void)ctx;
    if (!c)
        return;
    pthread_cond_destroy(&c->c);
    free(c);
}

static eccl_result real_cond_wait(void *ctx, eccl_cond *c, eccl_mutex *m,
                                  uint64_t deadline_ns)
{
    struct timespec ts;
    int rc;

    (void)ctx;
    if (deadline_ns == 0) {
        pthread_cond_wait(&c->c, &m->m);
        return ECCL_OK;
    }
    ts.tv_sec = (time_t)(deadline_ns / 1000000000u);
    ts.tv_nsec = (long)(deadline_ns % 1000000000u);
    rc = pthread_cond_timedwait(&c->c, &m->m, &ts);
    return rc == ETIMEDOUT ? ECCL_ERR_TIMEOUT : ECCL_OK;
}

static void real_cond_broadcast(void *ctx, eccl_cond *c)
{
    (void)ctx;
    pthread_cond_broadcast(&c->c);
}

static void *thread_main(void *p)
{
    eccl_thread *t = p;

    /* Best effort: a name only helps debuggers and top -H. */
    pthread_setname_np(pthread_self(), t->name);
    t->fn(t->arg);
    return NULL;
}

static eccl_result real_spawn(void *ctx, const char *name, void (*fn)(void *),
                              void *arg, eccl_thread **out)
{
    eccl_thread *t = calloc(1, sizeof(*t));
    sigset_t block, old;
    int rc;

    if (!t)
        return ECCL_ERR_NO_MEMORY;
    t->fn = fn;
    t->arg = arg;
    snprintf(t->name, sizeof(t->name), "%s", name ? name : "eccl");

    /* The new thread inherits the creator's signal mask; creating it with
     * SIGPIPE blocked leaves no window in which a write to a dead peer could
     * kill the process. The net code uses MSG_NOSIGNAL as well, because the
     * application's own threads may call into it. */
    sigemptyset(&block);
    sigaddset(&block, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    rc = pthread_create(&t->tid, NULL, thread_main, t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        eccl_real_log(ctx, ECCL_LOG_ERROR, "pthread_create(%s): %s", t->name,
                      strerror(rc));
        free(t);
        return ECCL_ERR_SYSTEM;
    }
    *out = t;
    return ECCL_OK;
}

static void real_join(void *ctx, eccl_thread *t)
{
    (void)ctx;
    if (!t)
        return;
    pthread_join(t->tid, NULL);
    free(t);
}

static void real_yield(void *ctx)
{
    (void)ctx;
    sched_yield();
}

static const eccl_sync_ops real_sync_ops = {
    .size = sizeof(eccl_sync_ops),
    .mutex_create = real_mutex_create,
    .mutex_destroy = real_mutex_destroy,
    .lock = real_lock,
    .unlock = real_unlock,
    .cond_create = real_cond_create,
    .cond_destroy = real_cond_destroy,
    .cond_wait = real_cond_wait,
    .cond_broadcast = real_cond_broadcast,
    .spawn = real_spawn,
    .join = real_join,
    .yield = real_yield,
};

/* ---- dev: host memory ---------------------------------------------------- */

/* A cache line, so reduce loops vectorise without peeling and two staging
 * buffers never share a line between threads. */
#define DEV_ALIGN 64

static eccl_result real_alloc(void *ctx, size_t bytes, void **out)
{
    fiu_return_on("eccl/dev/alloc", ECCL_ERR_NO_MEMORY);
    void *p = NULL;
    /* posix_memalign(0) may return NULL, which callers would take for
     * failure. */
    int rc = posix_memalign(&p, DEV_ALIGN, bytes ? bytes : 1);

    if (rc != 0) {
        eccl_real_log(ctx, ECCL_LOG_WARN, "alloc of %zu bytes: %s", bytes,
                      strerror(rc));
        return ECCL_ERR_NO_MEMORY;
    }
    *out = p;
    return ECCL_OK;
}

static void real_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static void real_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    /* Core copies a buffer onto itself for in-place calls; memcpy on
     * identical pointers is undefined. */
    if (bytes && dst != src)
        memcpy(dst, src, bytes);
}

static void real_reduce(void *ctx, void *dst, const void *src, size_t count,
                        eccl_dtype dtype, eccl_op op)
{
    (void)ctx;
    eccl_reduce_into(dst, src, count, dtype, op);
}

static void real_scale_div(void *ctx, void *x, size_t count, eccl_dtype dtype,
                           uint32_t divisor)
{
    (void)ctx;
    eccl_reduce_scale_div(x, count, dtype, divisor);
}

static eccl_result real_mem_kind(void *ctx, const void *p, size_t bytes, eccl_mem_kind *kind,
                                 int *device)
{
    env_real *r = ctx;
    if (!r->cuda) { /* no memory for the device state: host memory only */
        *kind = ECCL_MEM_HOST;
        *device = -1;
        return ECCL_OK;
    }
    return eccl_real_cuda_mem_kind(r->cuda, p, bytes, kind, device);
}

static eccl_result real_host_alloc(void *ctx, size_t bytes, void **out)
{
    /* Pinned memory: the device-resident ring's staging, the allocation an
     * out-of-place call of a new size makes (it keeps no device backup). */
    fiu_return_on("eccl/dev/host_alloc", ECCL_ERR_NO_MEMORY);
    return eccl_real_cuda_host_alloc(((env_real *)ctx)->cuda, bytes, out);
}

static void real_host_free(void *ctx, void *p, size_t bytes)
{
    eccl_real_cuda_host_free(((env_real *)ctx)->cuda, p, bytes);
}

static eccl_result real_to_host(void *ctx, int device, void *stream, void *host, const void *dev,
                                size_t bytes)
{
    return eccl_real_cuda_to_host(((env_real *)ctx)->cuda, device, stream, host, dev, bytes);
}

static eccl_result real_to_device(void *ctx, int device, void *stream, void *dev, const void *host,
                                  size_t bytes)
{
    return eccl_real_cuda_to_device(((env_real *)ctx)->cuda, device, stream, dev, host, bytes);
}

#define CUDA_OF(ctx) (((env_real *)(ctx))->cuda)

static eccl_result real_d_alloc(void *ctx, int device, size_t bytes, void **out)
{
    /* The same failpoint as a host backup's: the device-resident ring's
     * backup is the allocation a call of a new size makes. */
    fiu_return_on("eccl/dev/alloc", ECCL_ERR_NO_MEMORY);
    return eccl_real_cuda_d_alloc(CUDA_OF(ctx), device, bytes, out);
}

static void real_d_free(void *ctx, void *p) { eccl_real_cuda_d_free(CUDA_OF(ctx), p); }

static eccl_result real_d_copy(void *ctx, int device, void *dst, const void *src, size_t bytes)
{
    return eccl_real_cuda_d_copy(CUDA_OF(ctx), device, dst, src, bytes);
}

static eccl_result real_d_reduce(void *ctx, int device, void *dst, const void *src, size_t count,
                                 eccl_dtype dtype, eccl_op op)
{
    return eccl_real_cuda_d_reduce(CUDA_OF(ctx), device, dst, src, count, dtype, op);
}

static eccl_result real_d_scale_div(void *ctx, int device, void *x, size_t count, eccl_dtype dtype,
                                    uint32_t divisor)
{
    return eccl_real_cuda_d_scale_div(CUDA_OF(ctx), device, x, count, dtype, divisor);
}

static eccl_result real_d_sync(void *ctx, int device) { return eccl_real_cuda_d_sync(CUDA_OF(ctx), device); }

static eccl_result real_d_order(void *ctx, int device, void *stream, int library_waits)
{
    return eccl_real_cuda_d_order(CUDA_OF(ctx), device, stream, library_waits);
}

static const eccl_dev_ops real_dev_ops = {
    .size = sizeof(eccl_dev_ops),
    .alloc = real_alloc,
    .free = real_free,
    .copy = real_copy,
    .reduce = real_reduce,
    .scale_div = real_scale_div,
    .mem_kind = real_mem_kind,
    .host_alloc = real_host_alloc,
    .host_free = real_host_free,
    .to_host = real_to_host,
    .to_device = real_to_device,
    .d_alloc = real_d_alloc,
    .d_free = real_d_free,
    .d_copy = real_d_copy,
    .d_reduce = real_d_reduce,
    .d_scale_div = real_d_scale_div,
    .d_sync = real_d_sync,
    .d_order = real_d_order,
};

/* ---- log ----------------------------------------------------------------- */

static int format_line(char *buf, size_t size, const env_real *r, uint64_t t,
                       int level, const char *line)
{
    static const char letters[] = "?EWIDT";

    return snprintf(buf, size, "[eccl %llu.%06llu %s] %c %s\n",
                    (unsigned long long)(t / 1000000000u),
                    (unsigned long long)(t % 1000000000u / 1000u), r->env.name,
                    letters[level <= ECCL_LOG_TRACE ? level : 0], line);
}

static void real_log_write(void *ctx, int level, const char *line)
{
    env_real *r = ctx;
    char stack[1024];
    char *buf = stack;
    uint64_t t;
    int n;

    if (level <= ECCL_LOG_NONE || level > r->env.log_level)
        return;
    if (!line)
        line = "";
    t = eccl_real_now_ns() - r->t0_ns;
    /* The whole line goes out in one write(): stderr is unbuffered, and
     * lines of concurrent threads and processes sharing it must not
     * interleave (writes up to PIPE_BUF are atomic on pipes). */
    n = format_line(stack, sizeof(stack), r, t, level, line);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(stack)) {
        buf = malloc((size_t)n + 1);
        if (buf) {
            format_line(buf, (size_t)n + 1, r, t, level, line);
        } else {
            /* Keep what fits rather than lose the line. */
            buf = stack;
            n = (int)sizeof(stack) - 1;
            stack[n - 1] = '\n';
        }
    }
    for (size_t off = 0; off < (size_t)n;) {
        ssize_t w = write(STDERR_FILENO, buf + off, (size_t)n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    if (buf != stack)
        free(buf);
}

static const eccl_log_ops real_log_ops = {
    .size = sizeof(eccl_log_ops),
    .write = real_log_write,
};

void eccl_real_log(eccl_env *env, int level, const char *fmt, ...)
{
    char line[512];
    va_list ap;

    if (!env || level > env->log_level || level <= ECCL_LOG_NONE)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    env->log->write(env->log_ctx, level, line);
}

/* Returns the level, or -1 if `s` names none. */
static int parse_log_level(const char *s)
{
    static const char *const names[] = {"none", "error", "warn",
                                        "info", "debug", "trace"};

    if (s[0] >= '0' && s[0] <= '5' && s[1] == '\0')
        return s[0] - '0';
    for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++)
        if (strcasecmp(s, names[i]) == 0)
            return i;
    if (strcasecmp(s, "warning") == 0)
        return ECCL_LOG_WARN;
    return -1;
}

/* ---- config: environment variables -------------------------------------- */

/* ECCL_TUNE, the dispatcher's rules (core/coll/dispatch.h), may also come
 * from the file ECCL_TUNE_FILE names (what eccl-tune writes): read whole,
 * or not at all (the dispatcher warns when the file gave nothing). */
/* Reads the file at path whole into buf[len], NUL-terminated: 1, or 0 when
 * it cannot be opened or read, or does not fit (errno 0: too large). */
static int read_whole_file(const char *path, char *buf, size_t len)
{
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    if (!f)
        return 0;
    size_t n = fread(buf, 1, len, f);
    int whole = n < len && !ferror(f);
    fclose(f);
    if (!whole) {
        errno = n < len ? EIO : 0;
        return 0;
    }
    buf[n] = '\0';
    return 1;
}

static int read_tune_file(char *buf, size_t len)
{
    return read_whole_file(getenv("ECCL_TUNE_FILE"), buf, len);
}

/* A trace dump (core/trace/trace.h) as a file of ECCL_TRACE_DIR, or of the
 * current directory for one asked for by the program (automatic dumps,
 * of failed calls, only where ECCL_TRACE_DIR says so):
 * eccl-trace-<peer>-<pid>-<n>.txt, written whole under a temporary name
 * and renamed, so a reader never sees half a dump. */
static eccl_result real_trace_dump(void *ctx, uint64_t peer_id, uint32_t n, int automatic, const char *text,
                                   size_t len)
{
    env_real *r = ctx;
    const char *dir = getenv("ECCL_TRACE_DIR");
    char path[4096], tmp[4096 + 8];

    fiu_return_on("eccl/trace/dump", ECCL_ERR_SYSTEM);
    if (!dir || !*dir) {
        if (automatic)
            return ECCL_ERR_UNSUPPORTED;
        dir = ".";
    }
    int k = snprintf(path, sizeof path, "%s/eccl-trace-%llu-%ld-%u.txt", dir, (unsigned long long)peer_id,
                     (long)getpid(), n);
    if (k < 0 || (size_t)k >= sizeof path)
        return ECCL_ERR_INVALID_ARG;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        eccl_real_log(&r->env, ECCL_LOG_WARN, "trace dump %s: %s", tmp, strerror(errno));
        return ECCL_ERR_SYSTEM;
    }
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, text + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    if (close(fd) != 0 || done < len || rename(tmp, path) != 0) {
        eccl_real_log(&r->env, ECCL_LOG_WARN, "trace dump %s: %s", path, strerror(errno));
        unlink(tmp);
        return ECCL_ERR_SYSTEM;
    }
    eccl_real_log(&r->env, ECCL_LOG_INFO, "trace written to %s", path);
    return ECCL_OK;
}

/* ECCL_TRACE_SIGNAL=USR1 (or USR2, or a number): that signal asks every
 * communicator of the process for its trace. The handler only counts; the
 * communicators' progress engines see the count change (within a timer
 * period when idle) and write their traces. Installed once a process, by
 * the first env created with the setting; never without it (a library
 * takes no signal the program did not give it). */
static atomic_ullong trace_signals;

static void on_trace_signal(int sig)
{
    (void)sig;
    atomic_fetch_add(&trace_signals, 1);
}

static uint64_t real_trace_asked(void *ctx)
{
    (void)ctx;
    return atomic_load(&trace_signals);
}

static void trace_signal_install(env_real *r)
{
    static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
    static int installed;
    const char *v = getenv("ECCL_TRACE_SIGNAL");
    if (!v || !*v) return;
    int sig = strcmp(v, "USR1") == 0 || strcmp(v, "SIGUSR1") == 0   ? SIGUSR1
              : strcmp(v, "USR2") == 0 || strcmp(v, "SIGUSR2") == 0 ? SIGUSR2
                                                                     : atoi(v);
    if (sig <= 0 || sig >= NSIG || sig == SIGKILL || sig == SIGSTOP) {
        eccl_real_log(&r->env, ECCL_LOG_WARN, "ECCL_TRACE_SIGNAL=%s is not USR1, USR2 or a signal number: ignored", v);
        return;
    }
    pthread_mutex_lock(&once);
    if (!installed) {
        struct sigaction sa = {.sa_handler = on_trace_signal, .sa_flags = SA_RESTART};
        sigemptyset(&sa.sa_mask);
        if (sigaction(sig, &sa, NULL) == 0) installed = 1;
        else eccl_real_log(&r->env, ECCL_LOG_WARN, "ECCL_TRACE_SIGNAL: sigaction(%d): %s", sig, strerror(errno));
    }
    pthread_mutex_unlock(&once);
}

static const eccl_trace_ops real_trace_ops = {
    .size = sizeof(eccl_trace_ops),
    .dump = real_trace_dump,
    .asked = real_trace_asked,
};

static int real_config_get(void *ctx, const char *name, char *buf, size_t len)
{
    (void)ctx;
    const char *v = getenv(name);
    if (!v && strcmp(name, "ECCL_TUNE") == 0)
        return read_tune_file(buf, len);
    if (!v || strlen(v) >= len)
        return 0;
    memcpy(buf, v, strlen(v) + 1);
    return 1;
}

static const eccl_config_ops real_config_ops = {
    .size = sizeof(eccl_config_ops),
    .get = real_config_get,
};

/* ---- env ----------------------------------------------------------------- */

/* Polling this long after the last event before sleeping in epoll keeps a
 * small collective's round trips off the scheduler (a sleep and wake-up cost
 * several microseconds each), while an idle caller stops burning a core after
 * a fraction of a millisecond. */
#define DEFAULT_SPIN_NS 50000u

/* CPUs this process may run on (its affinity mask, as taskset or a
 * container's cpuset limits it), else those online; 0 if neither says. */
static uint32_t usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return (uint32_t)CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)n : 0;
}

/* The net of a communicator: ECCL_NET=tcp|ibv, unset or "auto" = ibv when
 * this machine has an RDMA device with an active port, else tcp. */
static eccl_result net_create(env_real *r)
{
    const char *want = getenv("ECCL_NET");
    /* TLS covers a byte stream: the plain TCP one (net_tls.h). */
    if (eccl_net_tls_asked(&r->env)) {
        if (want && *want && strcmp(want, "tcp") != 0 && strcmp(want, "auto") != 0)
            eccl_real_log(&r->env, ECCL_LOG_WARN, "ECCL_TLS: TLS runs over TCP, not ECCL_NET=%s", want);
        r->env.net = &eccl_net_tcp_ops;
        return eccl_net_tcp_create(&r->env, &r->env.net_ctx);
    }
    int is_auto = !want || !*want || strcmp(want, "auto") == 0;
    if (!is_auto && strcmp(want, "tcp") != 0 && strcmp(want, "ibv") != 0) {
        eccl_real_log(&r->env, ECCL_LOG_ERROR, "ECCL_NET=\"%s\" is not tcp, ibv or auto", want);
        return ECCL_ERR_INVALID_ARG;
    }
    if (is_auto || strcmp(want, "ibv") == 0) {
        char why[160] = "built without <infiniband/verbs.h>";
#ifdef ECCL_HAVE_IBV
        eccl_result rc = eccl_net_ibv_create(&r->env, &r->env.net_ctx, why);
#else
        eccl_result rc = ECCL_ERR_UNSUPPORTED;
#endif
        if (rc == ECCL_OK) {
            r->env.net = &eccl_ibv_net_ops;
            return ECCL_OK;
        }
        if (!is_auto || rc != ECCL_ERR_UNSUPPORTED) {
            eccl_real_log(&r->env, ECCL_LOG_ERROR, "ECCL_NET=ibv: %s",
                          rc == ECCL_ERR_UNSUPPORTED ? why : eccl_strerror(rc));
            return rc;
        }
        eccl_real_log(&r->env, ECCL_LOG_INFO, "no RDMA (%s): using TCP", why);
    }
    /* Host-mates' payloads through memory unless ECCL_SHM=0. */
    if (eccl_config_uint(&r->env, "ECCL_SHM", 0, 1, 1)) {
        char why[160] = "";
        eccl_result rc = eccl_net_shm_create(&r->env, r->cuda, &r->env.net_ctx, why);
        if (rc == ECCL_OK) {
            r->env.net = &eccl_net_shm_ops;
            return ECCL_OK;
        }
        if (rc != ECCL_ERR_UNSUPPORTED) return rc;
        eccl_real_log(&r->env, ECCL_LOG_INFO, "no shared memory between processes (%s): TCP only", why);
    }
    r->env.net = &eccl_net_tcp_ops;
    return eccl_net_tcp_create(&r->env, &r->env.net_ctx);
}

/* The env's net: the chaos net first, if any, then TLS, then the one they
 * wrap. */
static void destroy_net(eccl_env *env)
{
    eccl_chaos_unwrap(env);
    eccl_net_tls_unwrap(env);
#ifdef ECCL_HAVE_IBV
    if (env->net == &eccl_ibv_net_ops) {
        eccl_net_ibv_destroy(env->net_ctx);
        return;
    }
#endif
    if (env->net == &eccl_net_shm_ops)
        eccl_net_shm_destroy(env->net_ctx);
    else
        eccl_net_tcp_destroy(env->net_ctx);
}

#define CHAOS_PLAN_MAX (1u << 20)

/* The chaos plan's kill: this process dies as a crash would end it. */
static void chaos_kill(void *arg)
{
    (void)arg;
    raise(SIGKILL);
}

/* ECCL_CHAOS_WIRES=FILE: the plan's wire buckets, shared by every process
 * of a job through a file they all map (eccl-emu creates it, 8 bytes a
 * wire, zeroed). A file that cannot be mapped, or is too small for the
 * plan, fails the creation as a bad plan does. */
static eccl_result chaos_map_wires(env_real *r)
{
    const char *path = getenv("ECCL_CHAOS_WIRES");
    if (!path || !*path)
        return ECCL_OK;
    errno = 0;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat st;
    void *m = MAP_FAILED;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(uint64_t))
        m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int err = errno;
    if (fd >= 0)
        close(fd);
    if (m == MAP_FAILED || eccl_chaos_set_wires(&r->env, m, (size_t)st.st_size / sizeof(uint64_t)) != ECCL_OK) {
        eccl_real_log(&r->env, ECCL_LOG_ERROR, "ECCL_CHAOS_WIRES=%s: %s", path,
                      m == MAP_FAILED ? (fd < 0 || err ? strerror(err) : "empty") : "smaller than the plan's wires");
        if (m != MAP_FAILED)
            munmap(m, (size_t)st.st_size);
        eccl_chaos_unwrap(&r->env);
        return ECCL_ERR_INVALID_ARG;
    }
    r->chaos_wires = m;
    r->chaos_wires_len = (size_t)st.st_size;
    return ECCL_OK;
}

/* ECCL_CHAOS=FILE puts the chaos net (chaos/chaos.h) around this env's net
 * with the plan in FILE; ECCL_CHAOS_SELF=HOST names this process's host
 * (default: the host of its first listener); ECCL_CHAOS_T0=NS, a
 * CLOCK_MONOTONIC time in ns, is when the plan's times start (default: now;
 * eccl-emu gives every process of a job the same). A plan that cannot be read or
 * parsed fails the creation: a run meant to be shaped must not run unshaped. */
static eccl_result chaos_create(env_real *r)
{
    const char *path = getenv("ECCL_CHAOS");
    if (!path || !*path)
        return ECCL_OK;
    char *text = malloc(CHAOS_PLAN_MAX + 1);
    if (!text || !read_whole_file(path, text, CHAOS_PLAN_MAX + 1)) {
        eccl_real_log(&r->env, ECCL_LOG_ERROR, "ECCL_CHAOS=%s: %s", path,
                      !text ? "out of memory" : errno ? strerror(errno) : "larger than 1 MiB");
        free(text);
        return ECCL_ERR_INVALID_ARG;
    }
    char why[160];
    eccl_chaos_plan *plan;
    eccl_result rc = eccl_chaos_plan_parse(text, why, sizeof why, &plan);
    free(text);
    if (rc != ECCL_OK) {
        eccl_real_log(&r->env, ECCL_LOG_ERROR, "ECCL_CHAOS=%s: %s", path,
                      rc == ECCL_ERR_INVALID_ARG ? why : eccl_strerror(rc));
        return rc;
    }
    rc = eccl_chaos_wrap(&r->env, plan, getenv("ECCL_CHAOS_SELF"), chaos_kill, NULL);
    if (rc != ECCL_OK) {
        eccl_chaos_plan_free(plan);
        return rc;
    }
    const char *t0 = getenv("ECCL_CHAOS_T0");
    if (t0 && *t0) {
        char *end;
        errno = 0;
        unsigned long long ns = strtoull(t0, &end, 10);
        if (errno || *end || end == t0) {
            eccl_real_log(&r->env, ECCL_LOG_ERROR, "ECCL_CHAOS_T0=%s: not a CLOCK_MONOTONIC time in ns", t0);
            eccl_chaos_unwrap(&r->env);
            return ECCL_ERR_INVALID_ARG;
        }
        eccl_chaos_set_origin(&r->env, (uint64_t)ns);
    }
    return chaos_map_wires(r);
}

eccl_result eccl_env_real_create(const char *name, int data_links, eccl_env **out)
{
    env_real *r;
    const char *lvl;
    int parsed = ECCL_LOG_WARN;
    eccl_result res;

    if (!out)
        return ECCL_ERR_INVALID_ARG;
    r = calloc(1, sizeof(*r));
    if (!r)
        return ECCL_ERR_NO_MEMORY;
    r->t0_ns = eccl_real_now_ns();
    snprintf(r->env.name, sizeof(r->env.name), "%s", name ? name : "");

    lvl = getenv("ECCL_LOG_LEVEL");
    if (lvl && *lvl)
        parsed = parse_log_level(lvl);
    r->env.log_level = parsed >= 0 ? parsed : ECCL_LOG_WARN;

    r->env.clock = &real_clock_ops;
    r->env.clock_ctx = r;
    r->env.sync = &real_sync_ops;
    r->env.sync_ctx = r;
    r->env.dev = &real_dev_ops;
    r->env.dev_ctx = r;
    r->env.log = &real_log_ops;
    r->env.log_ctx = r;
    r->env.config = &real_config_ops;
    r->env.config_ctx = r;
    r->env.trace = &real_trace_ops;
    r->env.trace_ctx = r;
    trace_signal_install(r);

    /* A typo must not silently hide the lines someone asked for. */
    if (parsed < 0)
        eccl_real_log(&r->env, ECCL_LOG_WARN,
                      "ECCL_LOG_LEVEL=\"%s\" is not none/error/warn/info/debug/trace"
                      " or 0-5; using warn",
                      lvl);

    res = eccl_real_auth_create(&r->env, &r->auth);
    if (res != ECCL_OK) {
        free(r);
        return res;
    }
    if (r->auth) {
        r->env.auth = &eccl_real_auth_ops;
        r->env.auth_ctx = r->auth;
    }
    r->env.spin_ns = eccl_config_uint(&r->env, "ECCL_SPIN_NS", 0, UINT64_MAX, DEFAULT_SPIN_NS);
    r->env.ncpus = usable_cpus();

    /* Before the net: net_shm moves device payloads through it. Opens
     * nothing until a buffer needs it; NULL (out of memory) means host
     * memory only. */
    r->cuda = eccl_real_cuda_new(&r->env);
    if (data_links) {
        res = net_create(r);
    } else {
        r->env.net = &eccl_net_tcp_ops;
        res = eccl_net_tcp_create(&r->env, &r->env.net_ctx);
    }
    if (res != ECCL_OK) {
        eccl_real_cuda_free(r->cuda);
        eccl_real_auth_free(r->auth);
        free(r);
        return res;
    }
    /* TLS next to the socket, the chaos net outside it: chaos shapes and
     * counts frames, which it sees in the clear. */
    res = eccl_net_tls_wrap(&r->env);
    if (res == ECCL_OK) res = chaos_create(r);
    if (res != ECCL_OK) {
        destroy_net(&r->env);
        eccl_real_cuda_free(r->cuda);
        eccl_real_auth_free(r->auth);
        free(r);
        return res;
    }
    *out = &r->env;
    return ECCL_OK;
}

void eccl_env_real_destroy(eccl_env *env)
{
    if (!env)
        return;
    destroy_net(env);
    env_real *r = (env_real *)env;
    if (r->chaos_wires)
        munmap(r->chaos_wires, r->chaos_wires_len); /* after the chaos net is gone */
    eccl_real_cuda_free(r->cuda);
    eccl_real_auth_free(r->auth);
    free(r);
}
