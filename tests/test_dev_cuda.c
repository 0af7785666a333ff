/* backends/real/dev_cuda.c without a device runtime: how a pointer is told
 * to be host memory. The probe reads one byte through our own pid, which
 * it keeps rather than asking the kernel per buffer; a forked child must
 * then probe its own memory, not its parent's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe_after_fork),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
