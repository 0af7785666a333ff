/* The collective trace across real processes (docs/trace.md): three peers
 * on loopback with ECCL_TRACE_DIR set. All run two all-reduces; peer 0
 * dumps its trace on request (eccl_comm_trace_dump); then peer 2 withholds
 * the third call while the others post it. Their calls time out, the
 * master asks every member for its trace (TRACE_ASK), and `eccl-trace
 * analyze` must name peer 2's rank as the culprit that never called it,
 * and the others as waiting, and draw the time line. A failpoint makes a
 * dump fail cleanly. Then: a healthy job dumped on the operator's ask, a
 * slow rank named, a dump on a signal to one process, and one from every
 * rank whose communicator lost the master between calls. */
#include <dirent.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <fiu.h>
#include <fiu-control.h>

#include "cluster.h"

#define COUNT 1024
#define WITHHELD_TAG 3

enum { V_RANK, V_RC3, V_DUMP_RC, V_FAIL_RC, V_SLOW_PEER, V_LOST_RC };

static char dir[64];

static void set(int k, long long v) { atomic_store(&cluster_self()->val[k], v); }
static long long val(cluster *cl, int i, int k) { return atomic_load(&cl->sh->slot[i].val[k]); }

static int body(eccl_comm *c, int index, void *arg)
{
    (void)arg;
    uint32_t rank, world;
    float b[COUNT];
    CL_CHECK(cluster_rank_world(c, &rank, &world) == 0, "rank");
    set(V_RANK, rank);
    for (uint64_t tag = 1; tag <= 2; tag++) {
        for (int i = 0; i < COUNT; i++) b[i] = (float)index;
        CL_OK(eccl_allreduce(c, b, b, COUNT, ECCL_F32, ECCL_SUM, tag, NULL));
    }
    if (index == 0) {
        set(V_DUMP_RC, eccl_comm_trace_dump(c, "after two calls"));
        /* A dump that cannot be written fails cleanly, and the next works. */
        CL_CHECK(fiu_init(0) == 0, "fiu_init");
        CL_CHECK(fiu_enable("eccl/trace/dump", 1, NULL, FIU_ONETIME) == 0, "fiu_enable");
        set(V_FAIL_RC, eccl_comm_trace_dump(c, "failpoint"));
    }
    if (index == 2) {
        /* Elsewhere while the others wait; its call comes after theirs
         * failed, and fails once as theirs did (the master aborted it). */
        cluster_sleep_ms(4000);
    }
    for (int i = 0; i < COUNT; i++) b[i] = 1;
    eccl_result rc = eccl_allreduce(c, b, b, COUNT, ECCL_F32, ECCL_SUM, WITHHELD_TAG, NULL);
    set(V_RC3, rc);
    return 0;
}

/* Files of dir starting with `prefix`, and the first one's text. */
static int files(const char *prefix, char *first, size_t len)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        if (n++ == 0 && first) {
            char path[512];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            FILE *f = fopen(path, "r");
            size_t k = f ? fread(first, 1, len - 1, f) : 0;
            first[k] = 0;
            if (f) fclose(f);
        }
    }
    closedir(d);
    return n;
}

/* `eccl-trace analyze` on dir (with `extra` arguments): its report into out,
 * echoed; returns its exit status. */
static int analyze(const char *extra, char *out, size_t len)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s analyze %s%s", ECCL_TRACE_BIN, dir, extra);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t k = fread(out, 1, len - 1, p);
    out[k] = 0;
    int status = pclose(p);
    printf("%s", out);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void test_withheld_call(void **state)
{
    cluster *cl = *state;
    snprintf(dir, sizeof dir, "/tmp/eccl-trace-test-XXXXXX");
    assert_non_null(mkdtemp(dir));
    setenv("ECCL_TRACE_DIR", dir, 1);
    cluster_opts o = {.op_timeout_ms = 1500};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, 3, body, NULL), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    unsetenv("ECCL_TRACE_DIR");

    assert_int_equal(val(cl, 0, V_DUMP_RC), ECCL_OK);
    assert_int_equal(val(cl, 0, V_FAIL_RC), ECCL_ERR_SYSTEM);
    for (int i = 0; i < 3; i++) {
        printf("    peer %d: rank %lld, tag 3: %s\n", i, val(cl, i, V_RANK),
               eccl_strerror((eccl_result)val(cl, i, V_RC3)));
        assert_int_not_equal(val(cl, i, V_RC3), ECCL_OK); /* nobody completed the withheld call */
    }
    /* Every peer wrote a trace: peer 0 on request, and all three when the
     * master asked; no temporary file is left. */
    char text[8192];
    assert_true(files("eccl-trace-", text, sizeof text) >= 4);
    assert_int_equal(strncmp(text, "eccl-trace 1\ncomm peer=", 23), 0);
    assert_int_equal(files("eccl-trace-", NULL, 0), files("eccl-trace-", NULL, 0));
    DIR *d = opendir(dir);
    for (struct dirent *e; (e = readdir(d)) != NULL;) assert_null(strstr(e->d_name, ".tmp"));
    closedir(d);

    /* The analyzer names peer 2's rank. */
    char cmd[512], out[8192] = "", plot[128];
    snprintf(plot, sizeof plot, " --plot %s/timeline.png", dir);
    assert_int_equal(analyze(plot, out, sizeof out), 1); /* a call did not complete everywhere */
    char want[128];
    snprintf(want, sizeof want, "first call not completed everywhere: tag %d (allreduce", WITHHELD_TAG);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof want, "culprit: rank %lld (peer ", val(cl, 2, V_RANK));
    const char *culprit = strstr(out, want);
    assert_non_null(culprit);
    snprintf(want, sizeof want, ") never called tag %d", WITHHELD_TAG);
    assert_true(strstr(culprit, want) != NULL && strstr(culprit, want) < strchr(culprit, '\n'));
    for (int i = 0; i < 2; i++) {
        snprintf(want, sizeof want, "rank %lld (peer", val(cl, i, V_RANK));
        const char *line = strstr(out, want);
        assert_non_null(line);
        assert_null(strncmp(strchr(line, ':'), ": never", 7) == 0 ? line : NULL);
    }
    /* The time line (gnuplot: scripts/deps.sh installs it). */
    char png[128];
    snprintf(png, sizeof png, "%s/timeline.png", dir);
    FILE *f = fopen(png, "rb");
    unsigned char magic[4] = {0};
    assert_non_null(f);
    assert_int_equal(fread(magic, 1, 4, f), 4);
    fclose(f);
    assert_memory_equal(magic, "\x89PNG", 4);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    cluster_fini(cl);
}

/* A healthy job: every peer runs its calls and waits; the master is told
 * to ask every member (eccl_master_trace_all, eccl-master's SIGUSR2). */
static int healthy_body(eccl_comm *c, int index, void *arg)
{
    int slow = arg != NULL && index == 1; /* test_slow_rank: peer 1 computes 40 ms before each call */
    float b[COUNT];
    uint32_t rank, world;
    CL_CHECK(cluster_rank_world(c, &rank, &world) == 0, "rank");
    set(V_RANK, rank);
    for (uint64_t tag = 1; tag <= (arg ? 10 : 3); tag++) {
        if (slow) cluster_sleep_ms(40);
        for (int i = 0; i < COUNT; i++) b[i] = (float)index;
        CL_OK(eccl_allreduce(c, b, b, COUNT, ECCL_F32, ECCL_SUM, tag, NULL));
    }
    /* The late peer as the master names it (late.c): it reports itself
     * after a few calls; the notice comes to every member. */
    int64_t slow_peer = 0;
    for (int t = 0; t < (arg ? 300 : 1) && !slow_peer; t++) {
        CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_SLOW_PEER, &slow_peer));
        if (!slow_peer && arg) cluster_sleep_ms(10);
    }
    set(V_SLOW_PEER, slow_peer);
    set(V_RC3, 1); /* done: the parent may ask */
    CL_CHECK(cluster_wait_ctl(0, 1, 30000) == 0, "never released");
    return 0;
}

/* The operator's ask; the analyzer's report into out (its exit status). */
static int ask_and_analyze(cluster *cl, void *arg, int n, char *out, size_t len)
{
    snprintf(dir, sizeof dir, "/tmp/eccl-trace-test-XXXXXX");
    assert_non_null(mkdtemp(dir));
    setenv("ECCL_TRACE_DIR", dir, 1);
    cluster_opts o = {0};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, n, healthy_body, arg), 0);
    for (int i = 0; i < n; i++)
        for (int t = 0; t < 3000 && !val(cl, i, V_RC3); t++) cluster_sleep_ms(10);
    atomic_store(&cl->sh->master_cmd, 2);
    char text[8192];
    for (int t = 0; t < 1000 && files("eccl-trace-", NULL, 0) < n; t++) cluster_sleep_ms(10);
    assert_int_equal(files("eccl-trace-", text, sizeof text), n); /* one each, nothing else */
    assert_non_null(strstr(text, " why=operator\n"));
    atomic_store(&cl->sh->ctl[0], 1);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    unsetenv("ECCL_TRACE_DIR");
    int status = analyze("", out, len);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    return status;
}

/* Peer 1 computes 40 ms before each of its calls: the others wait for it
 * every time, and the analyzer names it (and only it) as a slow rank; while
 * the job ran, it found itself late and the master told every member.
 * Four ranks: each hears a partner before it sends (late.c). */
static void test_slow_rank(void **state)
{
    cluster *cl = *state;
    char out[8192], want[128];
    static int slow = 1;

    assert_int_equal(ask_and_analyze(cl, &slow, 4, out, sizeof out), 0); /* nothing stalled */
    snprintf(want, sizeof want, "slow rank: peer %lld (rank %lld)", (long long)cl->sh->slot[1].peer_id,
             val(cl, 1, V_RANK));
    assert_non_null(strstr(out, want));
    assert_null(strstr(strstr(out, want) + 1, "slow rank:")); /* one named */
    /* And while the job ran: every member was told (ECCL_ATTR_SLOW_PEER). */
    for (int i = 0; i < 4; i++) assert_int_equal(val(cl, i, V_SLOW_PEER), (long long)cl->sh->slot[1].peer_id);
    cluster_fini(cl);
}

static void test_operator_ask(void **state)
{
    cluster *cl = *state;
    char out[8192];

    /* Nothing stalled: the analyzer says so (exit status 0), and no rank is slow. */
    assert_int_equal(ask_and_analyze(cl, NULL, 3, out, sizeof out), 0);
    assert_non_null(strstr(out, "every traced call completed"));
    assert_null(strstr(out, "slow rank:"));
    for (int i = 0; i < 3; i++) assert_int_equal(val(cl, i, V_SLOW_PEER), 0);
    cluster_fini(cl);
}

/* ECCL_TRACE_SIGNAL=USR1: that signal to one rank's process makes it (and
 * only it) write its trace. */
static void test_signal(void **state)
{
    cluster *cl = *state;
    snprintf(dir, sizeof dir, "/tmp/eccl-trace-test-XXXXXX");
    assert_non_null(mkdtemp(dir));
    setenv("ECCL_TRACE_DIR", dir, 1);
    setenv("ECCL_TRACE_SIGNAL", "USR1", 1);
    cluster_opts o = {0};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, 3, healthy_body, NULL), 0);
    for (int i = 0; i < 3; i++)
        for (int t = 0; t < 3000 && !val(cl, i, V_RC3); t++) cluster_sleep_ms(10);
    assert_int_equal(kill(cl->pid[0], SIGUSR1), 0);
    char text[8192];
    for (int t = 0; t < 1000 && files("eccl-trace-", NULL, 0) < 1; t++) cluster_sleep_ms(10);
    cluster_sleep_ms(200); /* nobody else writes one */
    assert_int_equal(files("eccl-trace-", text, sizeof text), 1);
    assert_non_null(strstr(text, " why=signal\n"));
    char peer[64];
    snprintf(peer, sizeof peer, "comm peer=%lld ", (long long)cl->sh->slot[0].peer_id);
    assert_non_null(strstr(text, peer));
    atomic_store(&cl->sh->ctl[0], 1);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    unsetenv("ECCL_TRACE_SIGNAL");
    unsetenv("ECCL_TRACE_DIR");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    cluster_fini(cl);
}

/* Two calls, then membership steps (no call in flight) until the master
 * is gone: what the communicator's failure returns. */
static int idle_body(eccl_comm *c, int index, void *arg)
{
    (void)index, (void)arg;
    float b[COUNT] = {0};
    for (uint64_t tag = 1; tag <= 2; tag++) CL_OK(eccl_allreduce(c, b, b, COUNT, ECCL_F32, ECCL_SUM, tag, NULL));
    set(V_RC3, 1);
    eccl_result rc = ECCL_OK;
    uint32_t pending;
    for (int t = 0; t < 1500 && rc == ECCL_OK; t++) {
        rc = eccl_comm_peers_pending(c, &pending);
        cluster_sleep_ms(10);
    }
    set(V_LOST_RC, rc);
    return 0;
}

/* The master killed while every rank sits between calls: each
 * communicator's failure writes its trace (why=comm_failed:master_lost),
 * and the analyzer, seeing every rank cut off, blames none of them. */
static void test_master_lost_between_calls(void **state)
{
    cluster *cl = *state;
    snprintf(dir, sizeof dir, "/tmp/eccl-trace-test-XXXXXX");
    assert_non_null(mkdtemp(dir));
    setenv("ECCL_TRACE_DIR", dir, 1);
    cluster_opts o = {0};
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_spawn_n(cl, 3, idle_body, NULL), 0);
    for (int i = 0; i < 3; i++)
        for (int t = 0; t < 3000 && !val(cl, i, V_RC3); t++) cluster_sleep_ms(10);
    assert_int_equal(files("eccl-trace-", NULL, 0), 0); /* nothing failed yet */
    assert_int_equal(kill(cl->master_pid, SIGKILL), 0);
    assert_int_equal(cluster_wait_all(cl, 60000), 0);
    for (int i = 0; i < 3; i++) assert_int_equal(val(cl, i, V_LOST_RC), ECCL_ERR_MASTER_LOST);
    char text[8192];
    assert_int_equal(files("eccl-trace-", text, sizeof text), 3);
    assert_non_null(strstr(text, " why=comm_failed:master_lost\n"));
    unsetenv("ECCL_TRACE_DIR");
    char cmd[512], out[8192];
    assert_int_equal(analyze("", out, sizeof out), 1);
    assert_non_null(strstr(out, "every traced call completed on every rank that wrote a trace"));
    assert_non_null(strstr(out, "lost the master between calls: every rank did"));
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    cluster_fini(cl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_withheld_call, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_operator_ask, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_slow_rank, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_signal, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_master_lost_between_calls, cluster_test_setup, cluster_test_teardown),
    };
    return cmocka_run_group_tests_name("trace_mp", tests, NULL, NULL);
}
