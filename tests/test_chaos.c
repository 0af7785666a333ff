/* The chaos env (chaos/chaos.h): its plan, and its net around the real TCP
 * net. Times are asserted only as floors (a byte must never arrive before
 * the plan lets it), which a slow machine cannot break. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chaos.h"
#include "env.h"
#include "env_real.h"
#include "proto/wire.h"

#define MS 1000000ull
#define SEC 1000000000ull
#define SOON (10 * SEC) /* "eventually": generous for a loaded box */

static eccl_chaos_plan *plan_ok(const char *text)
{
    char err[160] = "";
    eccl_chaos_plan *p = NULL;
    eccl_result rc = eccl_chaos_plan_parse(text, err, sizeof err, &p);
    if (rc != ECCL_OK) fprintf(stderr, "plan: %s\n", err);
    assert_int_equal(rc, ECCL_OK);
    return p;
}

static void plan_bad(const char *text, const char *want)
{
    char err[160] = "";
    eccl_chaos_plan *p = NULL;
    assert_int_equal(eccl_chaos_plan_parse(text, err, sizeof err, &p), ECCL_ERR_INVALID_ARG);
    assert_null(p);
    if (!strstr(err, want)) fprintf(stderr, "error \"%s\" lacks \"%s\"\n", err, want);
    assert_non_null(strstr(err, want));
}

static void test_plan_parse_errors(void **state)
{
    (void)state;
    plan_bad("link a b latency=1ms\nfrob a b\n", "line 2: unknown rule \"frob\"");
    plan_bad("link a b\n", "line 1: link: needs latency=");
    plan_bad("link a latency=1ms\n", "line 1: link: want two hosts");
    plan_bad("link a b latency=1 ms\n", "bad option \"latency=1\"");
    plan_bad("link a b latency=-1ms\n", "bad option \"latency=-1ms\"");
    plan_bad("link a b bandwidth=0Bps\n", "bad option");
    plan_bad("link a b latency=1ms from=2s until=1s\n", "until must be after from");
    plan_bad("reset a b rate=2\n", "bad option \"rate=2\"");
    plan_bad("reset a b\n", "needs rate=R/s");
    plan_bad("slow a factor=0.5\n", "bad option");
    plan_bad("kill a\n", "needs at=TIME or after=FRAME:N");
    plan_bad("kill a at=1s after=DATA:3\n", "one of them");
    plan_bad("kill a after=NOPE:3\n", "bad option");
    plan_bad("kill a after=DATA:0\n", "bad option");
    plan_bad("seed = x\n", "seed");
    plan_bad("buffer = 1B\n", "buffer");
    plan_bad("color = red\n", "unknown setting");
    plan_bad("wire w\n", "line 1: wire: needs bandwidth=");
    plan_bad("link a b via=w\n", "bad option \"via=w\""); /* a wire is declared before its use */
    plan_bad("wire w bandwidth=1MBps\nlink a b via=w,nope\n", "line 2: link: bad option");
    plan_bad("wire w bandwidth=1MBps\nlink a b flow=0Bps\n", "bad option");
}

static void test_plan_wires(void **state)
{
    (void)state;
    eccl_chaos_plan *p = plan_ok("wire a.up bandwidth=100MBps\n"
                                 "wire core bandwidth=1GBps\n"
                                 "wire b.down bandwidth=50MBps\n"
                                 "wire b.up bandwidth=100MBps\n"
                                 "wire a.down bandwidth=100MBps\n"
                                 "link a b latency=1ms via=a.up,core,b.down back=b.up,core,a.down flow=20MBps\n"
                                 "link a c via=a.up,core\n"
                                 "wire core bandwidth=500MBps from=2s\n"
                                 "slow c factor=2 from=3s\n");
    assert_int_equal(eccl_chaos_plan_wires(p), 5);
    eccl_chaos_wire w[ECCL_CHAOS_VIA_MAX];
    assert_int_equal(eccl_chaos_plan_route(p, "a", "b", 0, w), 3);
    assert_int_equal(w[0].id, 0);
    assert_int_equal(w[1].id, 1);
    assert_int_equal(w[2].id, 2);
    assert_true(w[2].bandwidth_Bps == 50e6);
    assert_int_equal(eccl_chaos_plan_route(p, "b", "a", 0, w), 3); /* back= */
    assert_int_equal(w[0].id, 3);
    assert_int_equal(w[2].id, 4);
    assert_int_equal(eccl_chaos_plan_route(p, "c", "a", 0, w), 2); /* no back=: via reversed */
    assert_int_equal(w[0].id, 1);
    assert_int_equal(w[1].id, 0);
    assert_int_equal(eccl_chaos_plan_route(p, "a", "b", 2 * SEC, w), 3);
    assert_true(w[1].bandwidth_Bps == 500e6); /* the later wire line, while active */
    assert_int_equal(eccl_chaos_plan_route(p, "a", "c", 3 * SEC, w), 2);
    assert_true(w[1].bandwidth_Bps == 250e6); /* slow c: every link of c */
    assert_int_equal(eccl_chaos_plan_route(p, "b", "c", 0, w), 0); /* no via: no wires */
    eccl_chaos_path x;
    eccl_chaos_plan_path(p, "b", "a", 0, &x);
    assert_true(x.flow_Bps == 20e6);
    assert_int_equal(x.latency_ns, 1 * MS);
    eccl_chaos_plan_free(p);
}

static void test_plan_paths(void **state)
{
    (void)state;
    eccl_chaos_plan *p = plan_ok("# a comment line\n"
                                 "seed = 9\n"
                                 "link * * latency=1ms\n"
                                 "link a b latency=10ms jitter=2ms bandwidth=100MBps   # a -> b and b -> a\n"
                                 "link a b latency=20ms from=1s until=2s\n"
                                 "partition a c from=5s until=6s\n"
                                 "slow c factor=4 from=3s\n"
                                 "reset b c rate=0.5/s\n"
                                 "kill b after=DATA:3\n"
                                 "kill c at=7s\n");
    eccl_chaos_path x;
    assert_int_equal(eccl_chaos_plan_seed(p), 9);
    eccl_chaos_plan_path(p, "b", "a", 0, &x); /* either way round */
    assert_int_equal(x.latency_ns, 10 * MS);
    assert_int_equal(x.jitter_ns, 2 * MS);
    assert_true(x.bandwidth_Bps == 100e6);
    assert_false(x.partitioned);
    eccl_chaos_plan_path(p, "a", "b", 1500 * MS, &x); /* the later rule wins while active */
    assert_int_equal(x.latency_ns, 20 * MS);
    assert_int_equal(x.jitter_ns, 2 * MS); /* not given by it: kept */
    eccl_chaos_plan_path(p, "a", "d", 0, &x); /* the wildcard */
    assert_int_equal(x.latency_ns, 1 * MS);
    assert_true(x.bandwidth_Bps == 0);
    eccl_chaos_plan_path(p, "a", "c", 5 * SEC, &x);
    assert_true(x.partitioned);
    assert_int_equal(x.latency_ns, 4 * MS); /* slow c, from 3 s */
    eccl_chaos_plan_path(p, "c", "a", 6 * SEC, &x); /* healed */
    assert_false(x.partitioned);
    eccl_chaos_plan_path(p, "c", "b", 0, &x);
    assert_true(x.reset_per_s == 0.5);
    assert_int_equal(eccl_chaos_plan_next_change(p, 0), 1 * SEC);
    assert_int_equal(eccl_chaos_plan_next_change(p, 1 * SEC), 2 * SEC);
    assert_int_equal(eccl_chaos_plan_next_change(p, 6 * SEC), UINT64_MAX);
    uint16_t type;
    uint64_t frames, at;
    eccl_chaos_plan_kill(p, "b", &type, &frames, &at);
    assert_int_equal(type, 65);
    assert_int_equal(frames, 3);
    assert_int_equal(at, UINT64_MAX);
    eccl_chaos_plan_kill(p, "c", &type, &frames, &at);
    assert_int_equal(frames, 0);
    assert_int_equal(at, 7 * SEC);
    eccl_chaos_plan_kill(p, "a", &type, &frames, &at);
    assert_int_equal(frames, 0);
    assert_int_equal(at, UINT64_MAX);
    eccl_chaos_plan_free(p);
}

/* ---- the net around TCP: a plain server env, a chaos client env --------- */

typedef struct rig {
    eccl_env *es, *ec;
    eccl_listener *l;
    eccl_conn *cs, *cc;
    char bound[ECCL_ADDR_MAX];
    int luser, suser, cuser;
    int kills;
    uint64_t wrap_before, wrap_after; /* the chaos clock's 0 lies between them */
} rig;

static uint64_t now(const eccl_env *env) { return env->clock->now_ns(env->clock_ctx); }

static void count_kill(void *arg) { ((rig *)arg)->kills++; }

/* The server listens on 127.0.0.1; the client, host 127.0.0.2 by the
 * plan's names, dials it through the chaos net. */
static void rig_open(rig *r, const char *plan_text, int connect)
{
    memset(r, 0, sizeof *r);
    assert_int_equal(eccl_env_real_create("server", 0, &r->es), ECCL_OK);
    assert_int_equal(eccl_env_real_create("client", 0, &r->ec), ECCL_OK);
    eccl_chaos_plan *plan = plan_ok(plan_text);
    r->wrap_before = now(r->ec);
    assert_int_equal(eccl_chaos_wrap(r->ec, plan, "127.0.0.2", count_kill, r), ECCL_OK);
    r->wrap_after = now(r->ec);
    assert_true(eccl_chaos_wrapped(r->ec));
    assert_int_equal(r->es->net->listen(r->es->net_ctx, "127.0.0.1:0", &r->luser, &r->l, r->bound), ECCL_OK);
    if (connect) assert_int_equal(r->ec->net->connect(r->ec->net_ctx, r->bound, &r->cuser, &r->cc), ECCL_OK);
}

static void rig_accept(rig *r)
{
    uint64_t deadline = now(r->es) + SOON;
    void *ready[8];
    for (;;) {
        eccl_result rc = r->es->net->accept(r->es->net_ctx, r->l, &r->suser, &r->cs);
        if (rc == ECCL_OK) return;
        assert_int_equal(rc, ECCL_ERR_AGAIN);
        assert_true(now(r->es) < deadline);
        /* the client's side must be driven too: its connect is a send away */
        r->ec->net->wait(r->ec->net_ctx, now(r->ec) + 1 * MS, ready, 8);
        r->es->net->wait(r->es->net_ctx, now(r->es) + 10 * MS, ready, 8);
    }
}

static void rig_close(rig *r)
{
    if (r->cc) r->ec->net->close(r->ec->net_ctx, r->cc);
    if (r->cs) r->es->net->close(r->es->net_ctx, r->cs);
    r->es->net->close_listener(r->es->net_ctx, r->l);
    eccl_env_real_destroy(r->ec);
    eccl_env_real_destroy(r->es);
}

/* Sends all of buf on env's conn, driving env's waits. */
static void send_all(eccl_env *env, eccl_conn *c, void *user, const void *buf, size_t len)
{
    uint64_t deadline = now(env) + SOON;
    size_t done = 0;
    env->net->set_interest(env->net_ctx, c, 1, 1);
    while (done < len) {
        eccl_iov iov = {(char *)buf + done, len - done};
        size_t sent = 0;
        assert_int_equal(env->net->send(env->net_ctx, c, &iov, 1, &sent), ECCL_OK);
        done += sent;
        if (done < len) {
            void *ready[8];
            assert_true(now(env) < deadline);
            env->net->wait(env->net_ctx, now(env) + 10 * MS, ready, 8);
        }
    }
    env->net->set_interest(env->net_ctx, c, 1, 0);
    (void)user;
}

/* Receives exactly len bytes; while waiting, `other` is driven too (the
 * chaos side releases what it holds only in its own calls). Returns when
 * the last byte came. */
static uint64_t recv_all(eccl_env *env, eccl_conn *c, void *buf, size_t len, eccl_env *other)
{
    uint64_t deadline = now(env) + SOON;
    size_t done = 0;
    while (done < len) {
        size_t got = 0;
        assert_int_equal(env->net->recv(env->net_ctx, c, (char *)buf + done, len - done, &got), ECCL_OK);
        done += got;
        if (done < len) {
            void *ready[8];
            assert_true(now(env) < deadline);
            if (other) other->net->wait(other->net_ctx, now(other) + 1 * MS, ready, 8);
            env->net->wait(env->net_ctx, now(env) + 1 * MS, ready, 8);
        }
    }
    return now(env);
}

static void test_latency_both_ways(void **state)
{
    (void)state;
    rig r;
    rig_open(&r, "link 127.0.0.2 127.0.0.1 latency=30ms\n", 1);
    rig_accept(&r);
    char out[100], in[100];
    for (int i = 0; i < 100; i++) out[i] = (char)i;
    uint64_t t0 = now(r.ec);
    send_all(r.ec, r.cc, &r.cuser, out, sizeof out);
    uint64_t t1 = recv_all(r.es, r.cs, in, sizeof in, r.ec);
    assert_memory_equal(in, out, sizeof out);
    assert_true(t1 - t0 >= 30 * MS); /* held by the sender */
    uint64_t t2 = now(r.es);
    send_all(r.es, r.cs, &r.suser, out, 50);
    uint64_t t3 = recv_all(r.ec, r.cc, in, 50, NULL);
    assert_memory_equal(in, out, 50);
    assert_true(t3 - t2 >= 30 * MS); /* held by the receiver: the dialling side shapes both ways */
    eccl_chaos_stats st;
    eccl_chaos_get_stats(r.ec, &st);
    assert_int_equal(st.shaped_conns, 1);
    assert_int_equal(st.delayed_bytes, 150);
    rig_close(&r);
}

/* Moves len bytes client -> server on each of n rigs at once, driving every
 * side's waits; returns how long the last byte took from the first send. */
static uint64_t transfer(rig **rs, int n, size_t len)
{
    char *out = malloc(len), *in = malloc(len);
    assert_non_null(out);
    assert_non_null(in);
    for (size_t i = 0; i < len; i++) out[i] = (char)(i * 7);
    size_t done[4] = {0}, rcvd[4] = {0};
    const uint64_t t0 = now(rs[0]->ec), deadline = t0 + SOON;
    for (int k = 0; k < n; k++) rs[k]->ec->net->set_interest(rs[k]->ec->net_ctx, rs[k]->cc, 1, 1);
    for (int busy = 1; busy;) {
        busy = 0;
        for (int k = 0; k < n; k++) {
            rig *r = rs[k];
            if (rcvd[k] == len) continue;
            busy = 1;
            /* The tx line holds the plan's buffer: sending the rest needs the waits to drain it. */
            if (done[k] < len) {
                eccl_iov iov = {out + done[k], len - done[k]};
                size_t sent = 0;
                assert_int_equal(r->ec->net->send(r->ec->net_ctx, r->cc, &iov, 1, &sent), ECCL_OK);
                done[k] += sent;
            }
            size_t got = 0;
            assert_int_equal(r->es->net->recv(r->es->net_ctx, r->cs, in + rcvd[k], len - rcvd[k], &got), ECCL_OK);
            rcvd[k] += got;
            if (rcvd[k] == len) assert_memory_equal(in, out, len);
            void *ready[8];
            r->ec->net->wait(r->ec->net_ctx, now(r->ec) + 1 * MS, ready, 8);
        }
        assert_true(now(rs[0]->ec) < deadline);
    }
    free(out);
    free(in);
    return now(rs[0]->es) - t0;
}

static void test_bandwidth(void **state)
{
    (void)state;
    rig r, *rs[] = {&r};
    rig_open(&r, "link * * bandwidth=10MBps\nbuffer = 256KiB\n", 1);
    rig_accept(&r);
    assert_true(transfer(rs, 1, 1u << 20) >= 104 * MS); /* 1 MiB at 10 MB/s: at least 104 ms */
    rig_close(&r);
}

/* flow=: each connection's own cap, as a per-flow link caps every flow. */
static void test_flow_cap(void **state)
{
    (void)state;
    rig r, *rs[] = {&r};
    rig_open(&r, "link * * flow=10MBps\nbuffer = 256KiB\n", 1);
    rig_accept(&r);
    assert_true(transfer(rs, 1, 1u << 20) >= 104 * MS);
    rig_close(&r);
}

/* Two chaos nets (two processes of a job) over one shared wire: 512 KiB
 * each through 10 MB/s take at least the 104 ms of the whole MiB, not the
 * 52 ms each would alone. */
static void test_wire_shared(void **state)
{
    (void)state;
    const char *plan = "wire w bandwidth=10MBps\nlink * * via=w\nbuffer = 256KiB\n";
    uint64_t shared[1] = {0};
    rig a, b, *rs[] = {&a, &b};
    rig_open(&a, plan, 1);
    rig_open(&b, plan, 1);
    assert_int_equal(eccl_chaos_set_wires(a.ec, shared, 1), ECCL_OK);
    assert_int_equal(eccl_chaos_set_wires(b.ec, shared, 1), ECCL_OK);
    /* Both clocks start at the same origin, as eccl-emu's ECCL_CHAOS_T0 makes them. */
    eccl_chaos_set_origin(a.ec, a.wrap_before);
    eccl_chaos_set_origin(b.ec, a.wrap_before);
    assert_int_equal(eccl_chaos_set_wires(a.ec, shared, 0), ECCL_ERR_INVALID_ARG); /* fewer than the plan's */
    assert_int_equal(eccl_chaos_set_wires(a.es, shared, 1), ECCL_ERR_INVALID_ARG); /* not a chaos net */
    rig_accept(&a);
    rig_accept(&b);
    assert_true(transfer(rs, 2, 512u << 10) >= 104 * MS);
    assert_true(shared[0] >= 104 * MS); /* the wire's bucket: busy that long at least */
    rig_close(&a);
    rig_close(&b);
}

/* Closing a conn whose bytes are still held delivers them, as closing a TCP
 * socket does; destroying the env waits for them (a process's last words
 * before it exits reach its peer). */
static void test_close_delivers_held_bytes(void **state)
{
    (void)state;
    rig r;
    rig_open(&r, "link * * latency=30ms\n", 1);
    rig_accept(&r);
    char out[100], in[100];
    for (int i = 0; i < 100; i++) out[i] = (char)(3 * i);
    const uint64_t t0 = now(r.ec);
    send_all(r.ec, r.cc, &r.cuser, out, sizeof out);
    r.ec->net->close(r.ec->net_ctx, r.cc); /* the 100 bytes are still in the tx line */
    r.cc = NULL;
    eccl_env_real_destroy(r.ec); /* lingers until they are out */
    assert_true(now(r.es) - t0 >= 30 * MS);
    recv_all(r.es, r.cs, in, sizeof in, NULL);
    assert_memory_equal(in, out, sizeof out);
    size_t got = 1;
    uint64_t deadline = now(r.es) + SOON;
    eccl_result rc;
    while ((rc = r.es->net->recv(r.es->net_ctx, r.cs, in, sizeof in, &got)) == ECCL_OK && got == 0) {
        void *ready[8];
        assert_true(now(r.es) < deadline);
        r.es->net->wait(r.es->net_ctx, now(r.es) + 10 * MS, ready, 8);
    }
    assert_int_equal(rc, ECCL_ERR_CLOSED); /* then the end of the stream */
    r.es->net->close(r.es->net_ctx, r.cs);
    r.es->net->close_listener(r.es->net_ctx, r.l);
    eccl_env_real_destroy(r.es);
}

/* Bytes due that core does not want (no read interest) must not make the
 * wait return at once, again and again: it sleeps to its deadline (a
 * simulated clock would otherwise never move on). */
static void test_wait_sleeps_past_unwanted_bytes(void **state)
{
    (void)state;
    rig r;
    rig_open(&r, "link * * latency=1ms\n", 1);
    rig_accept(&r);
    r.ec->net->set_interest(r.ec->net_ctx, r.cc, 0, 0);
    char out[10] = "0123456789";
    send_all(r.es, r.cs, &r.suser, out, sizeof out);
    void *ready[8];
    const uint64_t until = now(r.ec) + 50 * MS;
    while (now(r.ec) < until) r.ec->net->wait(r.ec->net_ctx, until, ready, 8); /* the chunk comes in, falls due */
    const uint64_t t0 = now(r.ec);
    assert_int_equal(r.ec->net->wait(r.ec->net_ctx, t0 + 30 * MS, ready, 8), 0);
    assert_true(now(r.ec) - t0 >= 30 * MS);
    char in[10];
    r.ec->net->set_interest(r.ec->net_ctx, r.cc, 1, 0);
    recv_all(r.ec, r.cc, in, sizeof in, NULL); /* still there for core */
    assert_memory_equal(in, out, sizeof out);
    rig_close(&r);
}

static void test_partition_refuses_and_holds(void **state)
{
    (void)state;
    rig r;
    rig_open(&r, "partition 127.0.0.2 127.0.0.1 until=100ms\n", 1);
    /* Dialled during the partition: refused, and a wait says so. */
    void *ready[8];
    int seen = 0;
    uint64_t deadline = now(r.ec) + SOON;
    while (!seen) {
        int k = r.ec->net->wait(r.ec->net_ctx, now(r.ec) + 100 * MS, ready, 8);
        for (int i = 0; i < k; i++) seen |= ready[i] == &r.cuser;
        assert_true(now(r.ec) < deadline);
    }
    char b = 1;
    size_t got = 0;
    assert_int_equal(r.ec->net->recv(r.ec->net_ctx, r.cc, &b, 1, &got), ECCL_ERR_CONNECT);
    eccl_iov iov = {&b, 1};
    assert_int_equal(r.ec->net->send(r.ec->net_ctx, r.cc, &iov, 1, &got), ECCL_ERR_CONNECT);
    eccl_chaos_stats st;
    eccl_chaos_get_stats(r.ec, &st);
    assert_int_equal(st.refused, 1);
    rig_close(&r);

    /* Up before a partition: bytes sent during it arrive after it heals,
     * at 300 ms of the chaos clock, whose 0 is no earlier than wrap_before:
     * a floor that holds however slow the machine. */
    rig_open(&r, "partition 127.0.0.2 127.0.0.1 from=150ms until=300ms\n", 1);
    rig_accept(&r);
    while (now(r.ec) - r.wrap_after < 150 * MS) r.ec->net->wait(r.ec->net_ctx, now(r.ec) + 10 * MS, ready, 8);
    char out[10] = "partition", in[10];
    send_all(r.ec, r.cc, &r.cuser, out, sizeof out);
    uint64_t t = recv_all(r.es, r.cs, in, sizeof in, r.ec);
    assert_memory_equal(in, out, sizeof out);
    assert_true(t - r.wrap_before >= 300 * MS);
    rig_close(&r);
}

/* Reads env's conn until it fails; returns how. */
static eccl_result recv_until_error(eccl_env *env, eccl_conn *c, uint64_t deadline)
{
    for (;;) {
        char b;
        size_t got;
        void *ready[8];
        env->net->wait(env->net_ctx, now(env) + 5 * MS, ready, 8);
        eccl_result rc = env->net->recv(env->net_ctx, c, &b, 1, &got);
        if (rc != ECCL_OK) return rc;
        assert_true(now(env) < deadline);
    }
}

static void test_reset(void **state)
{
    (void)state;
    rig r;
    rig_open(&r, "reset 127.0.0.2 127.0.0.1 rate=1000/s\n", 1);
    rig_accept(&r);
    uint64_t deadline = now(r.ec) + SOON;
    assert_int_equal(recv_until_error(r.ec, r.cc, deadline), ECCL_ERR_CLOSED);
    /* The other end sees the stream end. */
    assert_int_equal(recv_until_error(r.es, r.cs, deadline), ECCL_ERR_CLOSED);
    eccl_chaos_stats st;
    eccl_chaos_get_stats(r.ec, &st);
    assert_int_equal(st.resets, 1);
    rig_close(&r);
}

static void test_kill_after_frames(void **state)
{
    (void)state;
    rig r;
    rig_open(&r, "kill 127.0.0.2 after=DATA:2\n", 1);
    rig_accept(&r);
    unsigned char buf[3 * (16 + 5) + 16];
    /* A heartbeat, then DATA frames of 5 bytes, sent a byte at a time: the
     * count must follow frame boundaries however the stream is cut. */
    eccl_wire_header_encode(ECCL_MSG_HEARTBEAT, 0, buf);
    for (int i = 0; i < 3; i++) {
        eccl_wire_header_encode(ECCL_MSG_DATA, 5, buf + 16 + i * 21);
        memset(buf + 32 + i * 21, 65, 5); /* payload bytes that look like a type */
    }
    size_t total = 16 + 3 * 21, killed_at = 0;
    for (size_t i = 0; i < total; i++) {
        send_all(r.ec, r.cc, &r.cuser, buf + i, 1);
        if (r.kills && !killed_at) killed_at = i + 1;
    }
    assert_int_equal(r.kills, 1);
    assert_int_equal(killed_at, 16 + 21 + 16); /* the second DATA header */
    rig_close(&r);
}

static void test_kill_at_time(void **state)
{
    (void)state;
    rig r;
    rig_open(&r, "kill 127.0.0.2 at=50ms\n", 0);
    uint64_t deadline = now(r.ec) + SOON;
    void *ready[8];
    while (!r.kills) {
        r.ec->net->wait(r.ec->net_ctx, now(r.ec) + 200 * MS, ready, 8);
        assert_true(now(r.ec) < deadline);
    }
    assert_true(now(r.ec) - r.wrap_before >= 50 * MS);
    assert_int_equal(r.kills, 1);
    rig_close(&r);
}

/* ECCL_CHAOS in libeccl: a plan that cannot be read or parsed fails the
 * env's creation (a run meant to be shaped never runs unshaped). */
static void test_env_from_environment(void **state)
{
    (void)state;
    char path[] = "/tmp/test_chaos_planXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    eccl_env *env = NULL;
    setenv("ECCL_CHAOS", "/nonexistent/plan", 1);
    assert_int_equal(eccl_env_real_create("peer", 0, &env), ECCL_ERR_INVALID_ARG);
    assert_int_equal(write(fd, "link a b\n", 9), 9);
    setenv("ECCL_CHAOS", path, 1);
    assert_int_equal(eccl_env_real_create("peer", 0, &env), ECCL_ERR_INVALID_ARG);
    assert_int_equal(ftruncate(fd, 0), 0);
    assert_int_equal(pwrite(fd, "link a b latency=1ms\n", 21, 0), 21);
    assert_int_equal(eccl_env_real_create("peer", 0, &env), ECCL_OK);
    assert_true(eccl_chaos_wrapped(env));
    eccl_env_real_destroy(env);
    /* ECCL_CHAOS_T0 must be a number; ECCL_CHAOS_WIRES a file with room for
     * the plan's wires (8 bytes each). */
    setenv("ECCL_CHAOS_T0", "soon", 1);
    assert_int_equal(eccl_env_real_create("peer", 0, &env), ECCL_ERR_INVALID_ARG);
    setenv("ECCL_CHAOS_T0", "1", 1);
    assert_int_equal(ftruncate(fd, 0), 0);
    const char *wired = "wire w bandwidth=1MBps\nwire v bandwidth=1MBps\nlink a b via=w,v\n";
    assert_int_equal(pwrite(fd, wired, strlen(wired), 0), (ssize_t)strlen(wired));
    char wpath[] = "/tmp/test_chaos_wiresXXXXXX";
    int wfd = mkstemp(wpath);
    assert_true(wfd >= 0);
    setenv("ECCL_CHAOS_WIRES", "/nonexistent/wires", 1);
    assert_int_equal(eccl_env_real_create("peer", 0, &env), ECCL_ERR_INVALID_ARG);
    setenv("ECCL_CHAOS_WIRES", wpath, 1);
    assert_int_equal(eccl_env_real_create("peer", 0, &env), ECCL_ERR_INVALID_ARG); /* empty */
    assert_int_equal(ftruncate(wfd, 8), 0);
    assert_int_equal(eccl_env_real_create("peer", 0, &env), ECCL_ERR_INVALID_ARG); /* one wire of two */
    assert_int_equal(ftruncate(wfd, 16), 0);
    assert_int_equal(eccl_env_real_create("peer", 0, &env), ECCL_OK);
    assert_true(eccl_chaos_wrapped(env));
    eccl_env_real_destroy(env);
    close(wfd);
    unlink(wpath);
    unsetenv("ECCL_CHAOS_WIRES");
    unsetenv("ECCL_CHAOS_T0");
    unsetenv("ECCL_CHAOS");
    assert_int_equal(eccl_env_real_create("peer", 0, &env), ECCL_OK);
    assert_false(eccl_chaos_wrapped(env));
    eccl_env_real_destroy(env);
    close(fd);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_parse_errors),
        cmocka_unit_test(test_plan_paths),
        cmocka_unit_test(test_latency_both_ways),
        cmocka_unit_test(test_plan_wires),
        cmocka_unit_test(test_bandwidth),
        cmocka_unit_test(test_flow_cap),
        cmocka_unit_test(test_wire_shared),
        cmocka_unit_test(test_close_delivers_held_bytes),
        cmocka_unit_test(test_wait_sleeps_past_unwanted_bytes),
        cmocka_unit_test(test_partition_refuses_and_holds),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_kill_after_frames),
        cmocka_unit_test(test_kill_at_time),
        cmocka_unit_test(test_env_from_environment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
