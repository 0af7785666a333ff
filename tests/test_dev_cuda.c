/* backends/real/dev_cuda.c without a device runtime: how a pointer is told
 * to be host memory. The probe asks the kernel to read the word at the
 * pointer (rt_sigprocmask with an invalid `how`, else process_vm_readv
 * through our own pid, which it keeps rather than asking the kernel per
 * buffer; a forked child must then probe its own memory, not its
 * parent's). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <fiu-control.h>
#include <fiu.h>

#include "env_real.h"

static int host_kind(eccl_env *env, const void *p)
{
    eccl_mem_kind kind;
    int dev;
    return env->dev->mem_kind(env->dev_ctx, p, 8, &kind, &dev) == ECCL_OK && kind == ECCL_MEM_HOST;
}

/* A page readable in the parent is made unreadable in the child (as device
 * memory is to the host), and the child maps a page the parent never had:
 * each must be judged by the child's own memory. */
static void test_probe_after_fork(void **state)
{
    (void)state;
    eccl_env *env = NULL;
    assert_int_equal(eccl_env_real_create("probe", 1, &env), ECCL_OK);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *gone = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(gone != MAP_FAILED);
    assert_true(host_kind(env, gone)); /* the probe has run here: the pid is kept */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int bad = mprotect(gone, page, PROT_NONE) != 0 || host_kind(env, gone);
        uint8_t *fresh = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        bad |= fresh == MAP_FAILED || !host_kind(env, fresh);
        _exit(bad);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_true(host_kind(env, gone)); /* still ours, readable */
    munmap(gone, page);
    eccl_env_real_destroy(env);
}

/* Pages as the probe meets them: readable, inaccessible (as device memory
 * is), and a pointer at the last byte of a readable page that an
 * inaccessible one follows (what the probe reads stays on p's page). */
static int kinds_right(void)
{
    eccl_env *env = NULL;
    if (eccl_env_real_create("probe", 1, &env) != ECCL_OK) return 0;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *two = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int ok = two != MAP_FAILED && mprotect(two + page, page, PROT_NONE) == 0;
    ok = ok && host_kind(env, two) && host_kind(env, two + page - 1) && !host_kind(env, two + page) &&
         !host_kind(env, two + page + 7);
    if (two != MAP_FAILED) munmap(two, 2 * page);
    eccl_env_real_destroy(env);
    return ok;
}

/* Run in a child: the probe is chosen once per process, at its first use. */
static int in_child(int (*check)(void))
{
    pid_t pid = fork();
    if (pid == 0) _exit(check() ? 0 : 1);
    int st = 0;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void test_probe_kinds(void **state)
{
    (void)state;
    assert_true(in_child(kinds_right));
}

/* A kernel (or sandbox) whose rt_sigprocmask does not answer as the probe
 * needs: process_vm_readv judges, and judges the same. */
static int kinds_right_refused(void)
{
    fiu_init(0);
    return fiu_enable("eccl/cuda/probe_mask", 1, NULL, 0) == 0 && kinds_right();
}

static void test_probe_mask_refused(void **state)
{
    (void)state;
    assert_true(in_child(kinds_right_refused));
}

/* A buffer in the heap (malloc's, below the break) is host memory without
 * a probe. Seen here on a heap page made inaccessible: the probe would say
 * "not host" (test_probe_kinds), the heap rule does not look. The rule
 * trusts the heap; a caller that takes its pages' access away is on its
 * own. */
static int heap_judged_by_rule(void)
{
    eccl_env *env = NULL;
    if (eccl_env_real_create("probe", 1, &env) != ECCL_OK) return 0;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *buf = NULL;
    int ok = posix_memalign(&buf, page, 4 * page) == 0;
    uint8_t *hidden = ok ? (uint8_t *)buf + page : NULL;
    ok = ok && (uint8_t *)buf + 4 * page <= (uint8_t *)sbrk(0); /* from the heap, as small blocks are */
    ok = ok && host_kind(env, buf) && mprotect(hidden, page, PROT_NONE) == 0;
    int by_rule = ok && host_kind(env, hidden);
    if (ok) mprotect(hidden, page, PROT_READ | PROT_WRITE);
    free(buf);
    eccl_env_real_destroy(env);
    return by_rule;
}

static void test_heap_needs_no_probe(void **state)
{
    (void)state;
    assert_true(in_child(heap_judged_by_rule));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe_kinds),
        cmocka_unit_test(test_probe_mask_refused),
        cmocka_unit_test(test_probe_after_fork),
        cmocka_unit_test(test_heap_needs_no_probe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
