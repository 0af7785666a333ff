/* Guard-less actor stacks from one reserved region (actor_stacks.h).
 *
 * SimGrid has no hook for its stack allocation, so eccl-sim defines calloc,
 * free and realloc itself: sizes other than a stack's, and pointers outside
 * the region, go on to the allocator below (glibc's, or a tracer's such as
 * heaptrack's, found with RTLD_NEXT once the libraries are loaded). This is
 * the one object of eccl-sim with process-wide mutable state, as any
 * allocator has; it holds nothing a rank can see, so it sits outside the
 * seam's globals check (backends/sim/CMakeLists.txt).
 */
#include "actor_stacks.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* glibc's own entry points: what the wrappers call until the allocator below
 * is known (the libraries' constructors allocate before ours runs). */
extern void *__libc_calloc(size_t n, size_t size);
extern void __libc_free(void *p);
extern void *__libc_realloc(void *p, size_t size);

static struct {
    void *(*calloc_below)(size_t, size_t);
    void (*free_below)(void *);
    void *(*realloc_below)(void *, size_t);
    pthread_mutex_t lock;
    char *base;         /* count slices of `slice` bytes; NULL: no pool */
    size_t slice, count;
    size_t used;        /* slices handed out at least once */
    uint32_t *returned; /* indexes of slices given back, a stack */
    size_t n_returned;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

__attribute__((constructor)) static void find_allocator_below(void)
{
    pool.calloc_below = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
    pool.free_below = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    pool.realloc_below = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
}

int eccl_actor_stacks_reserve(size_t stack_bytes, size_t count)
{
    const long page = sysconf(_SC_PAGESIZE);
    if (pool.base || !count || count > UINT32_MAX || page <= 0 || stack_bytes % (size_t)page) return -1;
    if (stack_bytes > SIZE_MAX / count) return -1;
    void *region = mmap(NULL, stack_bytes * count, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (region == MAP_FAILED) return -1;
    void *returned = mmap(NULL, count * sizeof *pool.returned, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (returned == MAP_FAILED) {
        munmap(region, stack_bytes * count);
        return -1;
    }
    pool.returned = returned;
    pool.slice = stack_bytes;
    pool.count = count;
    pool.base = region; /* last: the wrappers test it first */
    return 0;
}

static int in_pool(const void *p)
{
    return pool.base && (uintptr_t)p - (uintptr_t)pool.base < pool.slice * pool.count;
}

/* A fresh slice is untouched and a returned one was emptied by free: both
 * read as zeros, as calloc promises. NULL when all are in use. */
static void *take_slice(void)
{
    size_t i = SIZE_MAX;
    pthread_mutex_lock(&pool.lock);
    if (pool.n_returned) i = pool.returned[--pool.n_returned];
    else if (pool.used < pool.count) i = pool.used++;
    pthread_mutex_unlock(&pool.lock);
    return i == SIZE_MAX ? NULL : pool.base + i * pool.slice;
}

void *calloc(size_t n, size_t size)
{
    size_t bytes;
    if (pool.base && !__builtin_mul_overflow(n, size, &bytes) && bytes == pool.slice) {
        void *p = take_slice();
        if (p) return p;
    }
    return pool.calloc_below ? pool.calloc_below(n, size) : __libc_calloc(n, size);
}

void free(void *p)
{
    if (!in_pool(p)) {
        if (pool.free_below) pool.free_below(p);
        else __libc_free(p);
        return;
    }
    /* Its pages go back to the system now and read as zeros when the slice
     * is taken again. */
    madvise(p, pool.slice, MADV_DONTNEED);
    pthread_mutex_lock(&pool.lock);
    pool.returned[pool.n_returned++] = (uint32_t)(((uintptr_t)p - (uintptr_t)pool.base) / pool.slice);
    pthread_mutex_unlock(&pool.lock);
}

void *realloc(void *p, size_t size)
{
    if (!in_pool(p)) return pool.realloc_below ? pool.realloc_below(p, size) : __libc_realloc(p, size);
    if (size <= pool.slice) return p;
    void *q = pool.realloc_below ? pool.realloc_below(NULL, size) : __libc_realloc(NULL, size);
    if (q) {
        memcpy(q, p, pool.slice);
        free(p);
    }
    return q;
}
