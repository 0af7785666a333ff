/* Relays in real processes on loopback (tests/cluster.h): peers that reach
 * the master only through relays form one job with peers that do not, the
 * death of a relay costs the job the peers behind it and nothing else, and
 * a peer whose first coordinator is unreachable comes in through the next
 * address of its list. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster.h"

enum { RELAY_A = CLUSTER_MAX_PEERS - 2, RELAY_B = CLUSTER_MAX_PEERS - 1 };

static void route_peer(cluster *cl, int index, const char *first, int fallback)
{
    char list[sizeof cl->sh->slot[index].master_of];
    snprintf(list, sizeof list, "%s%s%s", first, fallback ? "," : "",
             fallback ? cl->sh->master_addr : "");
    memcpy(cl->sh->slot[index].master_of, list, sizeof list);
}

/* SIGSTOP, and back once it has taken effect (kill only queues it). */
static void freeze(cluster *cl, int index)
{
    int st;
    kill(cl->pid[index], SIGSTOP);
    while (waitpid(cl->pid[index], &st, WUNTRACED) < 0 && errno == EINTR) {
    }
}

/* Peers 0..n-1 (relays never exit by themselves). */
static int wait_peers(cluster *cl, int n, uint64_t timeout_ms)
{
    int bad = 0;
    for (int i = 0; i < n; i++) bad |= cluster_wait(cl, i, timeout_ms) != 0;
    return bad;
}

static int same_hashes(cluster *cl, int n)
{
    for (int i = 1; i < n; i++) {
        if (cl->sh->slot[i].n_hash != cl->sh->slot[0].n_hash ||
            memcmp(cl->sh->slot[i].hash, cl->sh->slot[0].hash,
                   (size_t)cl->sh->slot[0].n_hash * sizeof cl->sh->slot[0].hash[0]))
            return 0;
    }
    return cl->sh->slot[0].n_hash > 0;
}

/* n peers behind two relays (the first half behind A), each with the master
 * as its fallback, spawned into one job of n; returns once every one has
 * set `finished` (its first round done), 0 on success. */
static int first_round_done(cluster *cl, void *arg)
{
    int n = *(int *)arg;
    for (int i = 0; i < n; i++)
        if (atomic_load(&cl->sh->slot[i].finished) < 1) return 0;
    return 1;
}

static int two_relay_job(cluster *cl, int n, cluster_body body)
{
    cluster_opts o = {.no_linger = 1}; /* relays never finish: nobody to wait for */
    assert_int_equal(cluster_init(cl, &o), 0);
    assert_int_equal(cluster_fork_relay(cl, RELAY_A), 0);
    assert_int_equal(cluster_fork_relay(cl, RELAY_B), 0);
    for (int i = 0; i < n; i++) route_peer(cl, i, cl->sh->slot[i < n / 2 ? RELAY_A : RELAY_B].addr, 1);
    for (int i = 0; i < n; i++) assert_int_equal(cluster_spawn(cl, i, (uint32_t)n, body, NULL), 0);
    return cluster_wait_for(cl, first_round_done, &n, 60000);
}

/* ---- one job across two relays and the master ------------------------------ */

static int six_body(eccl_comm *c, int index, void *arg)
{
    (void)arg;
    return cluster_after_join(c, index, 6, 4, index % 2);
}

/* Six peers: two behind relay A, two behind relay B (under the master, or
 * under A when `nested`), two straight to the master; four all-reduces. */
static void six_peer_job(int nested)
{
    cluster cl;
    cluster_opts o = {.no_linger = 1}; /* relays never finish: nobody to wait for */
    assert_int_equal(cluster_init(&cl, &o), 0);
    assert_int_equal(cluster_fork_relay(&cl, RELAY_A), 0);
    assert_int_equal(cluster_fork_relay_under(&cl, RELAY_B, nested ? RELAY_A : -1), 0);
    for (int i = 0; i < 4; i++) route_peer(&cl, i, cl.sh->slot[i < 2 ? RELAY_A : RELAY_B].addr, 0);
    for (int i = 0; i < 6; i++) assert_int_equal(cluster_spawn(&cl, i, 6, six_body, NULL), 0);
    int rc = wait_peers(&cl, 6, 60000);
    for (int i = 0; i < 6; i++) cluster_dump_slot(&cl, i);
    assert_int_equal(rc, 0);
    for (int i = 0; i < 6; i++) assert_int_equal(cl.sh->slot[i].world, 6);
    assert_true(same_hashes(&cl, 6));
    cluster_fini(&cl);
}

static void test_relay_job(void **state)
{
    (void)state;
    six_peer_job(0);
}

/* ---- a relay under a relay ------------------------------------------------------ */

/* The master sees the peers behind both relays as relay A's, so A's
 * RING_SEG names handles that lead to relay B: A fills in their RINGs from
 * the addresses and ids it booked as B's batches and the WELCOMEs passed
 * it, and B passes them on. The tree (forced) runs over those edges. */
static void test_relay_under_relay(void **state)
{
    (void)state;
    setenv("ECCL_ALGO", "allreduce=tree", 1); /* the peers inherit it */
    six_peer_job(1);
    unsetenv("ECCL_ALGO");
}

/* ---- a relay dies mid-job --------------------------------------------------- */

enum { V_LOST = 0 };
enum { CTL_KILLED = 0 };

/* Peers 0 and 1 are behind relay A, 2 and 3 behind B, which dies once all
 * four finished their first all-reduces. A's peers must lose B's to a view
 * change and go on at world 2; B's must hear their master is lost. The
 * relay carries only master traffic: a call all four make before any of
 * them has seen the hang-up still completes at world 4 (peer links do not
 * pass the relay), so such calls may come first, on every rank alike. */
static int kill_body(eccl_comm *c, int index, void *arg)
{
    (void)arg;
    if (cluster_after_join(c, index, 4, 2, 0)) return 1;
    atomic_store(&cluster_self()->finished, 1);
    if (cluster_wait_ctl(CTL_KILLED, 1, 30000)) return 1;
    float x[64], y[64];
    for (int i = 0; i < 64; i++) x[i] = (float)index;
    eccl_result rc = ECCL_ERR_PEER_LOST;
    eccl_reduce_info info = {0};
    uint64_t deadline = cluster_now_ns() + 30 * CL_SEC;
    for (uint64_t tag = 100; cluster_now_ns() < deadline; tag++) {
        rc = eccl_allreduce(c, x, y, 64, ECCL_F32, ECCL_SUM, tag, &info);
        if (rc == ECCL_ERR_MASTER_LOST) break;
        if (rc == ECCL_OK && info.world_size == 4) {
            CL_CHECK(y[0] == 6.0f, "a call before the loss was seen: sum %g, want 6", (double)y[0]);
            continue;
        }
        if (rc == ECCL_OK) break;
        usleep(10000);
    }
    if (index >= 2) {
        CL_CHECK(rc == ECCL_ERR_MASTER_LOST, "behind the dead relay: %s, want MASTER_LOST",
                 eccl_strerror(rc));
        atomic_store(&cluster_self()->val[V_LOST], 1);
        return 0;
    }
    CL_CHECK(rc == ECCL_OK && info.world_size == 2, "survivor: %s at world %u", eccl_strerror(rc),
             info.world_size);
    CL_CHECK(y[0] == 1.0f, "survivors' sum %g, want 1", (double)y[0]);
    return cluster_after_join(c, index, 2, 3, 1);
}

static void test_relay_killed_mid_job(void **state)
{
    (void)state;
    cluster cl;
    int rc = two_relay_job(&cl, 4, kill_body);
    if (rc == 0) {
        cluster_kill(&cl, RELAY_B);
        atomic_store(&cl.sh->ctl[CTL_KILLED], 1);
        rc = wait_peers(&cl, 4, 60000);
    }
    for (int i = 0; i < 4; i++) cluster_dump_slot(&cl, i);
    assert_int_equal(rc, 0);
    assert_int_equal(atomic_load(&cl.sh->slot[2].val[V_LOST]), 1);
    assert_int_equal(atomic_load(&cl.sh->slot[3].val[V_LOST]), 1);
    assert_true(same_hashes(&cl, 2));
    cluster_fini(&cl);
}

/* ---- a relay dies mid-vote, mid-admission, mid-view-change ------------------ */

/* The test freezes a relay (SIGSTOP: it holds its peers' frames, as a relay
 * stuck in a long pause does), lets a decision start that needs them, then
 * kills it. The master must decide nothing while those frames are held
 * (the others' calls return only after the kill), then decide without the
 * relay's peers, who hear their master is lost. */
enum { CTL_FROZEN = 1, CTL_KILL_NS = 2, CTL_NEWCOMER = 3 };
enum { V_RETURNED_NS = 1, V_WORLD = 2 };

/* Everyone contributes index + 1: the sum says who took part. */
static int sum_check(eccl_comm *c, int index, uint64_t tag, float want, uint32_t world)
{
    float x[256], y[256];
    for (int i = 0; i < 256; i++) x[i] = (float)(index + 1);
    eccl_reduce_info info = {0};
    CL_OK(eccl_allreduce(c, x, y, 256, ECCL_F32, ECCL_SUM, tag, &info));
    CL_CHECK(info.world_size == world && y[0] == want && y[255] == want,
             "tag %llu: world %u sum %g, want world %u sum %g", (unsigned long long)tag,
             info.world_size, (double)y[0], world, (double)want);
    cluster_push_hash(cluster_fnv1a(y, sizeof y));
    return 0;
}

/* Peers 0, 1 behind relay A, 2, 3 behind B, then newcomer 4 straight to the
 * master. With B frozen, 2 and 3 ask peers_pending into the void: the
 * round cannot close, so 0 and 1 wait; once B dies, 0, 1 admit 4. */
static int vote_body(eccl_comm *c, int index, void *arg)
{
    (void)arg;
    cluster_slot *self = cluster_self();
    if (index == 4) return sum_check(c, index, 900, 1 + 2 + 5, 3);
    if (sum_check(c, index, 800, 1 + 2 + 3 + 4, 4)) return 1;
    atomic_store(&self->finished, 1);
    if (cluster_wait_ctl(CTL_NEWCOMER, 1, 30000)) return 1;
    for (;;) {
        uint32_t pending = 0;
        eccl_result rc = eccl_comm_peers_pending(c, &pending);
        atomic_store(&self->val[V_RETURNED_NS], (long long)cluster_now_ns());
        if (index >= 2) {
            CL_CHECK(rc == ECCL_ERR_MASTER_LOST, "behind the dead relay: %s", eccl_strerror(rc));
            atomic_store(&self->val[V_LOST], 1);
            return 0;
        }
        CL_OK(rc);
        if (pending) {
            CL_OK(eccl_comm_update_topology(c));
            break;
        }
        usleep(2000);
    }
    int64_t w = 0;
    CL_OK(eccl_comm_get_attr(c, ECCL_ATTR_WORLD_SIZE, &w));
    atomic_store(&self->val[V_WORLD], w);
    return sum_check(c, index, 900, 1 + 2 + 5, 3);
}

static void test_relay_killed_mid_vote(void **state)
{
    (void)state;
    cluster cl;
    int rc = two_relay_job(&cl, 4, vote_body);
    if (rc == 0) {
        freeze(&cl, RELAY_B);
        /* A newcomer registers, the members start the vote: 2 and 3 ask
         * into the frozen relay, so no round can close. */
        rc = cluster_spawn(&cl, 4, 3, vote_body, NULL);
        atomic_store(&cl.sh->ctl[CTL_NEWCOMER], 1);
        cluster_sleep_ms(300);
        atomic_store(&cl.sh->ctl[CTL_KILL_NS], (long long)cluster_now_ns());
        cluster_kill(&cl, RELAY_B);
    }
    if (rc == 0) rc = wait_peers(&cl, 5, 60000);
    for (int i = 0; i < 5; i++) cluster_dump_slot(&cl, i);
    assert_int_equal(rc, 0);
    long long killed_at = atomic_load(&cl.sh->ctl[CTL_KILL_NS]);
    for (int i = 0; i < 2; i++) {
        /* No answer while the relay held two members' questions. */
        assert_true(atomic_load(&cl.sh->slot[i].val[V_RETURNED_NS]) > killed_at);
        assert_int_equal(atomic_load(&cl.sh->slot[i].val[V_WORLD]), 3);
    }
    for (int i = 2; i < 4; i++) assert_int_equal(atomic_load(&cl.sh->slot[i].val[V_LOST]), 1);
    cluster_fini(&cl);
}

/* Six peers, 0-2 behind A, 3-5 behind B; B frozen, then peer 2 killed
 * mid-all-reduce: the view change needs 3-5's reports, which B holds.
 * Nobody's all-reduce may end before B dies; then 0 and 1 go on alone. */
static int view_body(eccl_comm *c, int index, void *arg)
{
    (void)arg;
    cluster_slot *self = cluster_self();
    if (sum_check(c, index, 700, 21, 6)) return 1;
    atomic_store(&self->finished, 1);
    if (cluster_wait_ctl(CTL_FROZEN, 1, 30000)) return 1;
    float x[4096], y[4096];
    for (int i = 0; i < 4096; i++) x[i] = 1.0f;
    eccl_result rc = ECCL_OK;
    eccl_reduce_info info = {.world_size = 6};
    uint64_t tag = 1000;
    /* Until the view change shows: the op in flight fails (PEER_LOST), or,
     * if none was running when it froze, the next one runs at world 2. */
    for (; rc == ECCL_OK && info.world_size == 6; tag++)
        rc = eccl_allreduce(c, x, y, 4096, ECCL_F32, ECCL_SUM, tag, &info);
    atomic_store(&self->val[V_RETURNED_NS], (long long)cluster_now_ns());
    if (index >= 3) {
        /* Its ring may break first (PEER_LOST), its master is lost anyway. */
        for (int k = 0; rc == ECCL_ERR_PEER_LOST && k < 100; k++, tag++)
            rc = eccl_allreduce(c, x, y, 4096, ECCL_F32, ECCL_SUM, tag, NULL);
        CL_CHECK(rc == ECCL_ERR_MASTER_LOST, "behind the dead relay: %s", eccl_strerror(rc));
        atomic_store(&self->val[V_LOST], 1);
        return 0;
    }
    CL_CHECK(rc == ECCL_ERR_PEER_LOST || (rc == ECCL_OK && info.world_size == 2),
             "survivor: %s at world %u", eccl_strerror(rc), info.world_size);
    return sum_check(c, index, 2000, 1 + 2, 2);
}

static void test_relay_killed_mid_view_change(void **state)
{
    (void)state;
    cluster cl;
    int rc = two_relay_job(&cl, 6, view_body);
    if (rc == 0) {
        freeze(&cl, RELAY_B);
        atomic_store(&cl.sh->ctl[CTL_FROZEN], 1);
        cluster_sleep_ms(100); /* all-reduces under way */
        cluster_kill(&cl, 2);
        cluster_sleep_ms(300); /* the view change waits on B's peers */
        atomic_store(&cl.sh->ctl[CTL_KILL_NS], (long long)cluster_now_ns());
        cluster_kill(&cl, RELAY_B);
        for (int i = 0; i < 6 && rc == 0; i++)
            if (i != 2) rc = cluster_wait(&cl, i, 60000);
    }
    for (int i = 0; i < 6; i++) cluster_dump_slot(&cl, i);
    assert_int_equal(rc, 0);
    long long killed_at = atomic_load(&cl.sh->ctl[CTL_KILL_NS]);
    for (int i = 0; i < 2; i++)
        assert_true(atomic_load(&cl.sh->slot[i].val[V_RETURNED_NS]) > killed_at);
    for (int i = 3; i < 6; i++) assert_int_equal(atomic_load(&cl.sh->slot[i].val[V_LOST]), 1);
    cluster_fini(&cl);
}

/* ---- the master dies ------------------------------------------------------------ */

enum { CTL_MASTER_DEAD = 4 };
enum { V_LOST_NS = 3 };

/* Every peer, behind a relay or not, must hear its master is lost; those
 * behind relays at once, because their relay closes them when its own
 * parent goes, not after their 30 s peer timeout. */
static int orphan_body(eccl_comm *c, int index, void *arg)
{
    (void)arg;
    cluster_slot *self = cluster_self();
    if (sum_check(c, index, 600, 1 + 2 + 3 + 4, 4)) return 1;
    atomic_store(&self->finished, 1);
    if (cluster_wait_ctl(CTL_MASTER_DEAD, 1, 30000)) return 1;
    eccl_result rc = ECCL_OK;
    uint32_t pending = 0;
    for (int k = 0; rc == ECCL_OK && k < 100000; k++) {
        rc = eccl_comm_peers_pending(c, &pending);
        if (rc == ECCL_OK) usleep(1000);
    }
    atomic_store(&self->val[V_LOST_NS], (long long)cluster_now_ns());
    CL_CHECK(rc == ECCL_ERR_MASTER_LOST, "master gone: %s", eccl_strerror(rc));
    return 0;
}

static void test_master_lost_behind_relays(void **state)
{
    (void)state;
    cluster cl;
    cluster_opts o = {.no_linger = 1, .peer_timeout_ms = 30000, .child_alarm_s = 120};
    assert_int_equal(cluster_init(&cl, &o), 0);
    assert_int_equal(cluster_fork_relay(&cl, RELAY_A), 0);
    assert_int_equal(cluster_fork_relay(&cl, RELAY_B), 0);
    for (int i = 0; i < 4; i++) route_peer(&cl, i, cl.sh->slot[i < 2 ? RELAY_A : RELAY_B].addr, 0);
    for (int i = 0; i < 4; i++) assert_int_equal(cluster_spawn(&cl, i, 4, orphan_body, NULL), 0);
    int n = 4;
    int rc = cluster_wait_for(&cl, first_round_done, &n, 60000);
    long long killed_at = (long long)cluster_now_ns();
    if (rc == 0) {
        cluster_master_signal(&cl, SIGKILL);
        atomic_store(&cl.sh->ctl[CTL_MASTER_DEAD], 1);
        rc = wait_peers(&cl, 4, 60000);
    }
    for (int i = 0; i < 4; i++) cluster_dump_slot(&cl, i);
    assert_int_equal(rc, 0);
    /* Well inside the 30 s peer timeout: told, not timed out. */
    for (int i = 0; i < 4; i++)
        assert_true(atomic_load(&cl.sh->slot[i].val[V_LOST_NS]) - killed_at < 20 * (long long)CL_SEC);
    cluster_fini(&cl);
}

/* ---- the fallback address ----------------------------------------------------- */

static int two_body(eccl_comm *c, int index, void *arg)
{
    (void)arg;
    return cluster_after_join(c, index, 2, 2, 0);
}

/* Peer 0's list starts with a relay that is gone (its port refuses): it
 * comes in through the master, the next address, before connect_timeout. */
static void test_fallback_address(void **state)
{
    (void)state;
    cluster cl;
    cluster_opts o = {.no_linger = 1}; /* relays never finish: nobody to wait for */
    assert_int_equal(cluster_init(&cl, &o), 0);
    assert_int_equal(cluster_fork_relay(&cl, RELAY_A), 0);
    char dead[64];
    snprintf(dead, sizeof dead, "%s", cl.sh->slot[RELAY_A].addr);
    cluster_kill(&cl, RELAY_A);
    route_peer(&cl, 0, dead, 1);
    for (int i = 0; i < 2; i++) assert_int_equal(cluster_spawn(&cl, i, 2, two_body, NULL), 0);
    int rc = wait_peers(&cl, 2, 60000);
    for (int i = 0; i < 2; i++) cluster_dump_slot(&cl, i);
    assert_int_equal(rc, 0);
    assert_true(same_hashes(&cl, 2));
    cluster_fini(&cl);
}

/* A door on 127.0.0.1 that takes connections but never welcomes anyone:
 * what a relay dying (its kernel still completes the handshake) or frozen
 * looks like to a peer that dials it. `resets`: a child accepts each
 * connection, reads the peer's first frame and resets it; otherwise nobody accepts (the kernel's
 * backlog holds them, silent). Returns the listening fd; *child is the
 * resetting process or 0. */
static int door_open(char *addr, size_t len, int resets, pid_t *child)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 16) ||
        getsockname(fd, (struct sockaddr *)&sa, &sl))
        return -1;
    snprintf(addr, len, "127.0.0.1:%u", ntohs(sa.sin_port));
    *child = 0;
    if (!resets) return fd;
    *child = fork();
    if (*child == 0) {
        /* Bounded: the parent kills it, and it stops by itself after 60 s. */
        for (int k = 0; k < 600; k++) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (poll(&p, 1, 100) <= 0) continue;
            int c = accept(fd, NULL, NULL);
            if (c < 0) continue;
            /* After the peer's first frame: it knows the link was up. */
            struct pollfd q = {.fd = c, .events = POLLIN};
            char junk[256];
            if (poll(&q, 1, 1000) > 0 && read(c, junk, sizeof junk) < 0) {
            }
            struct linger lg = {.l_onoff = 1, .l_linger = 0};
            setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
            close(c);
        }
        _exit(0);
    }
    return *child > 0 ? fd : -1;
}

/* Peer 0's list starts with a door that takes the connection and then
 * resets it, or stays silent: either way it comes in through the master
 * before connect_timeout, and the job forms. */
static void fallback_past_door(int resets)
{
    cluster cl;
    cluster_opts o = {.peer_timeout_ms = 1000};
    assert_int_equal(cluster_init(&cl, &o), 0);
    char door[64];
    pid_t child = 0;
    int fd = door_open(door, sizeof door, resets, &child);
    assert_true(fd >= 0);
    route_peer(&cl, 0, door, 1);
    for (int i = 0; i < 2; i++) assert_int_equal(cluster_spawn(&cl, i, 2, two_body, NULL), 0);
    int rc = wait_peers(&cl, 2, 60000);
    for (int i = 0; i < 2; i++) cluster_dump_slot(&cl, i);
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    close(fd);
    assert_int_equal(rc, 0);
    assert_true(same_hashes(&cl, 2));
    cluster_fini(&cl);
}

static void test_fallback_after_reset(void **state)
{
    (void)state;
    fallback_past_door(1);
}

static void test_fallback_after_silence(void **state)
{
    (void)state;
    fallback_past_door(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_relay_job, cluster_test_setup, cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_relay_under_relay, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_relay_killed_mid_job, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_relay_killed_mid_vote, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_relay_killed_mid_view_change, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_master_lost_behind_relays, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_fallback_address, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_fallback_after_reset, cluster_test_setup,
                                        cluster_test_teardown),
        cmocka_unit_test_setup_teardown(test_fallback_after_silence, cluster_test_setup,
                                        cluster_test_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
