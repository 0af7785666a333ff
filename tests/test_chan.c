/* Channel tests over a scripted in-memory conn: what a handler may rely on
 * when eccl_chan_read hands it a decoded control message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/chan.h"

/* ---- a fake env: recv serves a byte script, send swallows ---------------- */

typedef struct script {
    const uint8_t *bytes;
    size_t len, pos;
} script;

static eccl_result fake_send(void *ctx, eccl_conn *c, const eccl_iov *iov, int n, size_t *sent)
{
    (void)ctx, (void)c;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += iov[i].len;
    *sent = total;
    return ECCL_OK;
}

static eccl_result fake_recv(void *ctx, eccl_conn *c, void *buf, size_t len, size_t *got)
{
    (void)c;
    script *s = ctx;
    size_t n = s->len - s->pos < len ? s->len - s->pos : len;
    if (buf && n) memcpy(buf, s->bytes + s->pos, n);
    s->pos += n;
    *got = n;
    return ECCL_OK;
}

static void fake_set_interest(void *ctx, eccl_conn *c, int rd, int wr)
{
    (void)ctx, (void)c, (void)rd, (void)wr;
}

static void fake_close(void *ctx, eccl_conn *c)
{
    (void)ctx, (void)c;
}

static const eccl_net_ops fake_net = {
    .size = sizeof(eccl_net_ops),
    .send = fake_send,
    .recv = fake_recv,
    .set_interest = fake_set_interest,
    .close = fake_close,
};

static uint64_t fake_now(void *ctx)
{
    (void)ctx;
    return 0;
}

static const eccl_clock_ops fake_clock = {sizeof(eccl_clock_ops), fake_now, NULL};
static const eccl_dev_ops fake_dev = {.size = sizeof(eccl_dev_ops)};

/* ---- the handler --------------------------------------------------------- */

typedef struct seen {
    const eccl_wire_op_flag *want; /* entries the VIEW messages carry */
    uint32_t n_want;
    int views;
} seen;

static eccl_result on_msg(void *owner, eccl_chan *ch, const eccl_msg *m)
{
    (void)ch;
    seen *s = owner;
    assert_true(m->type == ECCL_MSG_VIEW_REPORT || m->type == ECCL_MSG_VIEW_DECIDE);
    assert_int_equal(m->u.view.n_ops, s->n_want);
    /* The entries are read from the frame's payload. Were it freed before
     * this call, an allocation of its size here would get it back (and
     * ASan would see the reads below): clobber one and check the entries. */
    size_t len = 8 + (size_t)s->n_want * 9;
    uint8_t *clobber = malloc(len);
    assert_non_null(clobber);
    memset(clobber, 0xEE, len);
    for (uint32_t i = 0; i < s->n_want; i++) {
        eccl_wire_op_flag e = eccl_wire_view_op(&m->u.view, i);
        assert_int_equal(e.tag, s->want[i].tag);
        assert_int_equal(e.flag, s->want[i].flag);
    }
    free(clobber);
    s->views++;
    return ECCL_OK;
}

static eccl_result on_data(void *owner, eccl_chan *ch, const eccl_wire_data *d, void **dst)
{
    (void)owner, (void)ch, (void)d, (void)dst;
    return ECCL_ERR_PROTOCOL;
}

static eccl_result on_data_done(void *owner, eccl_chan *ch, const eccl_wire_data *d)
{
    (void)owner, (void)ch, (void)d;
    return ECCL_ERR_PROTOCOL;
}

static const eccl_chan_handler handler = {on_msg, on_data, on_data_done};

/* Two VIEW frames back to back, each read ahead in one recv or trickled:
 * every entry reaches the handler intact, through the borrowed payload. */
/* An env whose net reads the script. */
static eccl_env script_env(script *sc)
{
    eccl_env env = {0};
    env.net = &fake_net;
    env.net_ctx = sc;
    env.clock = &fake_clock;
    env.dev = &fake_dev;
    env.log_level = ECCL_LOG_NONE;
    return env;
}

static void test_view_payload_outlives_handler(void **state)
{
    (void)state;
    enum { N = 40 };
    eccl_wire_op_flag ops[N];
    for (uint32_t i = 0; i < N; i++)
        ops[i] = (eccl_wire_op_flag){0x1111111111111111ull * (i % 15 + 1) + i, (uint8_t)(i % 3 == 0)};
    size_t cap = 2 * (ECCL_WIRE_HEADER_SIZE + 8 + N * 9);
    uint8_t *bytes = malloc(cap);
    assert_non_null(bytes);
    eccl_msg m = {.type = ECCL_MSG_VIEW_REPORT};
    m.u.view.epoch = 7;
    m.u.view.n_ops = N;
    m.u.view.ops = ops;
    size_t len = eccl_wire_encode(&m, bytes, cap);
    assert_int_equal(len, cap / 2);
    m.type = ECCL_MSG_VIEW_DECIDE;
    assert_int_equal(eccl_wire_encode(&m, bytes + len, cap - len), len);

    const uint32_t rbufs[] = {64, 4096}; /* frames split across reads, or not */
    for (size_t k = 0; k < 2; k++) {
        script sc = {bytes, cap, 0};
        eccl_env env = script_env(&sc);
        eccl_chan ch;
        assert_int_equal(eccl_chan_init(&ch, &env, (eccl_conn *)&sc, rbufs[k]), ECCL_OK);
        seen s = {ops, N, 0};
        for (int tries = 0; tries < 100 && s.views < 2; tries++)
            assert_int_equal(eccl_chan_read(&ch, &handler, &s, SIZE_MAX), ECCL_OK);
        assert_int_equal(s.views, 2);
        assert_int_equal(sc.pos, cap);
        eccl_chan_close(&ch);
    }
    free(bytes);
}

static int release_config(void *ctx, const char *name, char *buf, size_t len)
{
    (void)ctx;
    if (strcmp(name, "ECCL_CHAN_RELEASE_READAHEAD") != 0 || len < 2) return 0;
    memcpy(buf, "1", 2);
    return 1;
}

static const eccl_config_ops release_on = {.size = sizeof(eccl_config_ops), .get = release_config};

/* The read-ahead comes with the first bytes. Once a small frame is drained
 * it stays by default (a warm receive path allocates nothing) and goes back
 * only where ECCL_CHAN_RELEASE_READAHEAD is set (the simulator). */
static void test_readahead_kept_unless_released(void **state)
{
    (void)state;
    uint8_t bytes[64];
    eccl_msg m = {.type = ECCL_MSG_VIEW_REPORT};
    m.u.view.epoch = 3;
    size_t len = eccl_wire_encode(&m, bytes, sizeof bytes);
    assert_true(len > 0);
    for (int release = 0; release < 2; release++) {
        script sc = {bytes, len, 0};
        eccl_env env = script_env(&sc);
        if (release) env.config = &release_on;
        eccl_chan ch;
        assert_int_equal(eccl_chan_init(&ch, &env, (eccl_conn *)&sc, 4096), ECCL_OK);
        assert_null(ch.rbuf);
        seen s = {NULL, 0, 0};
        for (int tries = 0; tries < 10 && s.views < 1; tries++)
            assert_int_equal(eccl_chan_read(&ch, &handler, &s, SIZE_MAX), ECCL_OK);
        assert_int_equal(s.views, 1);
        /* One more read finds the conn dry, with the frame drained. */
        assert_int_equal(eccl_chan_read(&ch, &handler, &s, SIZE_MAX), ECCL_OK);
        if (release) assert_null(ch.rbuf);
        else assert_non_null(ch.rbuf);
        eccl_chan_close(&ch);
    }
}

/* ---- lazy frames: a net that records each write ------------------------- */

typedef struct wire_log {
    uint8_t bytes[1024];
    size_t len;
    int writes;
    int want_write; /* the interest last set */
} wire_log;

static eccl_result log_send(void *ctx, eccl_conn *c, const eccl_iov *iov, int n, size_t *sent)
{
    (void)c;
    wire_log *w = ctx;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        assert_true(w->len + iov[i].len <= sizeof w->bytes);
        memcpy(w->bytes + w->len, iov[i].base, iov[i].len);
        w->len += iov[i].len;
        total += iov[i].len;
    }
    w->writes++;
    *sent = total;
    return ECCL_OK;
}

static void log_set_interest(void *ctx, eccl_conn *c, int rd, int wr)
{
    (void)c, (void)rd;
    ((wire_log *)ctx)->want_write = wr;
}

static const eccl_net_ops log_net = {
    .size = sizeof(eccl_net_ops),
    .send = log_send,
    .set_interest = log_set_interest,
    .close = fake_close,
};

/* The DATA frame at *pos of the log: its header fields, its payload skipped. */
static eccl_wire_data next_data(const wire_log *w, size_t *pos)
{
    eccl_wire_header h;
    eccl_wire_data d;
    assert_true(*pos + ECCL_WIRE_HEADER_SIZE <= w->len);
    assert_int_equal(eccl_wire_header_decode(w->bytes + *pos, &h), ECCL_OK);
    assert_int_equal(h.type, ECCL_MSG_DATA);
    assert_int_equal(eccl_wire_data_decode(w->bytes + *pos + ECCL_WIRE_HEADER_SIZE, h.length, &d), ECCL_OK);
    *pos += ECCL_WIRE_HEADER_SIZE + h.length;
    return d;
}

/* Lazy tokens stay queued, unwritten and without write interest, until a
 * frame queued behind them takes them along in the same write (in order),
 * or eccl_chan_flush_lazy sends them; behind an eager frame a lazy one
 * goes with it. */
static void test_lazy_frames_ride_along(void **state)
{
    (void)state;
    wire_log w = {0};
    eccl_env env = {0};
    env.net = &log_net;
    env.net_ctx = &w;
    env.clock = &fake_clock;
    env.dev = &fake_dev;
    env.log_level = ECCL_LOG_NONE;
    eccl_chan ch;
    assert_int_equal(eccl_chan_init(&ch, &env, (eccl_conn *)&w, 4096), ECCL_OK);
    const uint8_t payload[5] = {1, 2, 3, 4, 5};
    eccl_wire_data t = {.tag = 9, .phase = ECCL_PHASE_DONE, .step = 1};
    eccl_wire_data d = {.tag = 10, .phase = ECCL_PHASE_EXCHANGE, .len = sizeof payload};

    assert_int_equal(eccl_chan_send_lazy(&ch, &t), ECCL_OK);
    t.step = 2;
    assert_int_equal(eccl_chan_send_lazy(&ch, &t), ECCL_OK);
    assert_false(eccl_chan_has_output(&ch));
    assert_int_equal(eccl_chan_flush(&ch), ECCL_OK);
    assert_int_equal(w.writes, 0);
    assert_int_equal(w.want_write, 0);

    assert_int_equal(eccl_chan_send_data(&ch, &d, payload, NULL), ECCL_OK);
    assert_true(eccl_chan_has_output(&ch));
    assert_int_equal(eccl_chan_flush(&ch), ECCL_OK);
    assert_int_equal(w.writes, 1); /* both tokens and the data, one write */
    size_t pos = 0;
    eccl_wire_data got = next_data(&w, &pos);
    assert_true(got.tag == 9 && got.step == 1 && got.len == 0);
    got = next_data(&w, &pos);
    assert_true(got.tag == 9 && got.step == 2 && got.len == 0);
    got = next_data(&w, &pos);
    assert_true(got.tag == 10 && got.len == sizeof payload);
    assert_int_equal(pos, w.len);
    assert_null(ch.out_head);

    /* Alone, at flush_lazy. */
    t.step = 3;
    assert_int_equal(eccl_chan_send_lazy(&ch, &t), ECCL_OK);
    assert_int_equal(eccl_chan_flush(&ch), ECCL_OK);
    assert_int_equal(w.writes, 1);
    assert_int_equal(eccl_chan_flush_lazy(&ch), ECCL_OK);
    assert_int_equal(w.writes, 2);
    got = next_data(&w, &pos);
    assert_true(got.tag == 9 && got.step == 3);

    /* Behind an eager frame not written yet: it goes with it. */
    assert_int_equal(eccl_chan_send_data(&ch, &d, payload, NULL), ECCL_OK);
    t.step = 4;
    assert_int_equal(eccl_chan_send_lazy(&ch, &t), ECCL_OK);
    assert_true(eccl_chan_has_output(&ch));
    assert_int_equal(eccl_chan_flush(&ch), ECCL_OK);
    assert_int_equal(w.writes, 3);
    got = next_data(&w, &pos);
    assert_true(got.tag == 10);
    got = next_data(&w, &pos);
    assert_true(got.tag == 9 && got.step == 4);
    assert_int_equal(pos, w.len);

    /* Closing drops a lazy queue like any other. */
    assert_int_equal(eccl_chan_send_lazy(&ch, &t), ECCL_OK);
    eccl_chan_close(&ch);
    assert_false(eccl_chan_has_output(&ch));
    assert_int_equal(w.writes, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_view_payload_outlives_handler),
        cmocka_unit_test(test_readahead_kept_unless_released),
        cmocka_unit_test(test_lazy_frames_ride_along),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
