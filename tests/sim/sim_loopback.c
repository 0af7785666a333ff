/* Two ranks on one host talk through that host's loopback, and it costs
 * what the scenario configured.
 *
 * Runs on a platform eccl-sim generated (platform.xml of a scenario with
 * ranks_per_host > 1) and checks, on the host HOST:
 *   - the route HOST -> HOST is one link, <cluster>_link_K_loopback, with the
 *     bandwidth BW and latency LAT given on the command line;
 *   - a send between two envs on HOST (the sim net every rank uses: a conn,
 *     a message into the far env's mailbox) costs LAT + bytes / BW: two sizes
 *     give the slope (must be BW) and the intercept (LAT, plus the net's few
 *     header bytes per message at BW);
 *   - two such sends at once take as long as one (the loopback is a FATPIPE:
 *     every flow gets the whole bandwidth);
 *   - a send from HOST to OTHER (another host) does not use the loopback and
 *     costs at least what its route says (sum of latencies + bytes / its
 *     narrowest link; more where SimGrid's ACK flow, crosstraffic, shares a
 *     link that carries both directions, as a Clos uplink does).
 *
 * With a sixth argument `latency`, the same under the latency net model
 * (eccl_sg_world_set_net_model): every check above holds, and the send to
 * OTHER costs exactly its route's latency + bytes / narrowest link (there
 * is no flow, so no ACK cross-traffic either).
 *
 * With `small` instead, the flow model with small messages on the latency
 * path (eccl_sg_world_set_flow_min_bytes): every check above holds, and a
 * conn that sends a large message (a flow) and at once a small one (the
 * latency path, which would overtake it) delivers them in stream order,
 * the small one's bytes after the large one's; a small message alone
 * costs exactly its route (latency + (size + header) / narrowest link).
 *
 * Usage: sim_loopback PLATFORM.xml HOST OTHER BW_Bps LAT_s [latency|small]
 * Exit status: 0 when every check passed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <simgrid/link.h>
#include <xbt/config.h>
#include <xbt/dynar.h>
#include <xbt/log.h>

#include "env.h"
#include "env_sg.h"

#define S1 1000000u /* bytes: both below the net's largest message (4 MiB) */
#define S2 3000000u
#define HEADER_MAX 256 /* the net's per-message header, at most (bytes) */
#define NPAIRS 4
#define S_SMALL 100u /* below SMALL_BYTES: the latency path in `small` mode */
#define SMALL_BYTES 1024u

typedef struct pair pair;
typedef struct test {
    eccl_sg_world *w;
    double bw, lat;
    int failures;
    pair *pairs;
} test;

/* A sender on `src` and a receiver on `dst`; the sender sends each of
 * `sizes` at start + 10 ms x i, the receiver notes when the last byte of
 * each arrived. */
struct pair {
    test *t;
    const char *name, *src, *dst;
    double start_s;
    unsigned sizes[2];
    int nsizes;
    double gap_s;             /* between the sends (0: back to back) */
    unsigned char fill[2];    /* every byte of each send */
    char addr[ECCL_ADDR_MAX]; /* the receiver's listener, once bound */
    uint64_t sent_ns[2], got_ns[2];
};

#define CHECK(t, cond, ...)                                 \
    do {                                                    \
        if (!(cond)) {                                      \
            eccl_sg_printf("loopback", "FAIL " __VA_ARGS__); \
            (t)->failures++;                                \
        }                                                   \
    } while (0)

/* Waits until `want` is ready on env (user pointer), or fails the test. */
static int wait_for(test *t, eccl_env *env, void *want)
{
    for (int i = 0; i < 100000; i++) {
        void *ready[8];
        int n = env->net->wait(env->net_ctx, eccl_sg_now_ns() + 1000000000ull, ready, 8);
        for (int j = 0; j < n; j++)
            if (ready[j] == want) return 0;
    }
    CHECK(t, 0, "wait: nothing ready");
    return -1;
}

static void receiver_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    pair *p = sg_actor_self_get_data();
    eccl_env *env = NULL;
    eccl_listener *l = NULL;
    eccl_conn *c = NULL;
    char listen_addr[ECCL_ADDR_MAX];
    snprintf(listen_addr, sizeof listen_addr, "%s:0", p->dst);
    if (eccl_sg_env_create(p->t->w, "rx", &env) != ECCL_OK ||
        env->net->listen(env->net_ctx, listen_addr, p, &l, p->addr) != ECCL_OK) {
        CHECK(p->t, 0, "%s: listen", p->name);
        return;
    }
    while (env->net->accept(env->net_ctx, l, &c, &c) == ECCL_ERR_AGAIN)
        if (wait_for(p->t, env, p)) return;
    static unsigned char buf[S2];
    for (int i = 0; i < p->nsizes; i++) {
        size_t wrong = 0;
        size_t have = 0;
        while (have < p->sizes[i]) {
            size_t got = 0;
            eccl_result rc = env->net->recv(env->net_ctx, c, buf, p->sizes[i] - have, &got);
            if (rc != ECCL_OK) {
                CHECK(p->t, 0, "%s: recv: %s", p->name, eccl_strerror(rc));
                return;
            }
            for (size_t k = 0; k < got; k++) wrong += buf[k] != p->fill[i];
            have += got;
            if (have < p->sizes[i] && got == 0 && wait_for(p->t, env, &c)) return;
        }
        p->got_ns[i] = eccl_sg_now_ns();
        CHECK(p->t, wrong == 0, "%s: send %d: %zu of its %u bytes are another send's", p->name, i,
              wrong, p->sizes[i]);
    }
    env->net->close(env->net_ctx, c);
    env->net->close_listener(env->net_ctx, l);
    eccl_sg_env_destroy(env);
}

static void sender_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    pair *p = sg_actor_self_get_data();
    while (!p->addr[0]) sg_actor_sleep_for(1e-6);
    eccl_env *env = NULL;
    eccl_conn *c = NULL;
    if (eccl_sg_env_create(p->t->w, "tx", &env) != ECCL_OK ||
        env->net->connect(env->net_ctx, p->addr, p, &c) != ECCL_OK) {
        CHECK(p->t, 0, "%s: connect", p->name);
        return;
    }
    static unsigned char bytes[S2];
    for (int i = 0; i < p->nsizes; i++) {
        sg_actor_sleep_until(p->start_s + p->gap_s * i);
        memset(bytes, p->fill[i], p->sizes[i]);
        eccl_iov iov = {bytes, p->sizes[i]};
        size_t sent = 0;
        p->sent_ns[i] = eccl_sg_now_ns();
        eccl_result rc = env->net->send(env->net_ctx, c, &iov, 1, &sent);
        CHECK(p->t, rc == ECCL_OK && sent == p->sizes[i], "%s: send %u bytes: %s, %zu sent",
              p->name, p->sizes[i], eccl_strerror(rc), sent);
    }
    sg_actor_sleep_for(0.05);
    env->net->close(env->net_ctx, c);
    eccl_sg_env_destroy(env);
}

/* The route a -> b: its links' latency sum and narrowest bandwidth; *lo: how
 * many of its links are loopbacks. Returns the number of links. */
static unsigned long route(const char *a, const char *b, double *lat, double *bw, int *lo,
                           sg_link_t *first)
{
    xbt_dynar_t links = xbt_dynar_new(sizeof(sg_link_t), NULL);
    sg_host_get_route(sg_host_by_name(a), sg_host_by_name(b), links);
    unsigned long n = xbt_dynar_length(links);
    *lat = 0;
    *bw = INFINITY;
    *lo = 0;
    for (unsigned long i = 0; i < n; i++) {
        sg_link_t l = xbt_dynar_get_as(links, i, sg_link_t);
        const char *name = sg_link_get_name(l);
        size_t len = strlen(name);
        *lat += sg_link_get_latency(l);
        if (sg_link_get_bandwidth(l) < *bw) *bw = sg_link_get_bandwidth(l);
        *lo += len > 9 && strcmp(name + len - 9, "_loopback") == 0;
        if (i == 0 && first) *first = l;
    }
    xbt_dynar_free(&links);
    return n;
}

static double delta_s(const pair *p, int i) { return (double)(p->got_ns[i] - p->sent_ns[i]) / 1e9; }

int main(int argc, char **argv)
{
    simgrid_init(&argc, argv);
    int latency = argc == 7 && strcmp(argv[6], "latency") == 0;
    int small = argc == 7 && strcmp(argv[6], "small") == 0;
    if (argc != 6 && !latency && !small) {
        fprintf(stderr, "usage: %s PLATFORM.xml HOST OTHER BW_Bps LAT_s [latency|small]\n", argv[0]);
        return 2;
    }
    const char *host = argv[2], *other = argv[3];
    test t = {.bw = atof(argv[4]), .lat = atof(argv[5])};
    xbt_log_control_set("xbt_cfg.thres:warning");
    sg_cfg_set_string("network/model", "CM02"); /* as eccl-sim: latency + size / bandwidth */
    simgrid_load_platform(argv[1]);
    simgrid_run_until(0.0); /* seals it: Floyd zones compute their routes then */
    if (!sg_host_by_name(host) || !sg_host_by_name(other)) {
        fprintf(stderr, "sim_loopback: no host %s or %s in %s\n", host, other, argv[1]);
        return 2;
    }

    /* The route from the host to itself: its loopback, nothing else. */
    double lat, bw;
    int lo;
    sg_link_t l = NULL;
    unsigned long n = route(host, host, &lat, &bw, &lo, &l);
    CHECK(&t, n == 1 && lo == 1, "route %s -> %s: %lu links, %d loopbacks (want exactly the "
          "loopback)", host, host, n, lo);
    if (n == 1)
        eccl_sg_printf("loopback", "route %s -> %s: %s, %.17g B/s, %.17g s", host, host,
                       sg_link_get_name(l), sg_link_get_bandwidth(l), sg_link_get_latency(l));
    CHECK(&t, n == 1 && bw == t.bw && fabs(lat - t.lat) < 1e-12,
          "loopback of %s: %.17g B/s, %.17g s; configured %.17g B/s, %.17g s", host, bw, lat,
          t.bw, t.lat);
    double olat, obw;
    int olo;
    unsigned long on = route(host, other, &olat, &obw, &olo, NULL);
    CHECK(&t, on > 0 && olo == 0, "route %s -> %s: %lu links, %d loopbacks (want none)", host,
          other, on, olo);

    if (eccl_sg_world_create(ECCL_LOG_WARN, &t.w) != ECCL_OK) return 1;
    if (latency && eccl_sg_world_set_net_model(t.w, ECCL_SG_NET_LATENCY) != ECCL_OK) return 1;
    if (small) eccl_sg_world_set_flow_min_bytes(t.w, SMALL_BYTES);
    pair pairs[NPAIRS + 2] = {
        {&t, "one", host, host, 0.010, {S1, S2}, 2, 0.01, {1, 2}, "", {0, 0}, {0, 0}},
        {&t, "both-a", host, host, 0.100, {S2, 0}, 1, 0.01, {3, 0}, "", {0, 0}, {0, 0}},
        {&t, "both-b", host, host, 0.100, {S2, 0}, 1, 0.01, {4, 0}, "", {0, 0}, {0, 0}},
        {&t, "other", host, other, 0.200, {S2, 0}, 1, 0.01, {5, 0}, "", {0, 0}, {0, 0}},
        {&t, "order", host, other, 0.300, {S2, S_SMALL}, 2, 0, {6, 7}, "", {0, 0}, {0, 0}},
        {&t, "small", host, other, 0.400, {S_SMALL, 0}, 1, 0.01, {8, 0}, "", {0, 0}, {0, 0}},
    };
    const int npairs = small ? NPAIRS + 2 : NPAIRS;
    t.pairs = pairs;
    for (int i = 0; i < npairs; i++) {
        char name[32];
        snprintf(name, sizeof name, "rx-%s", pairs[i].name);
        sg_actor_t a = sg_actor_init(name, sg_host_by_name(pairs[i].dst));
        sg_actor_set_data(a, &pairs[i]);
        sg_actor_start(a, receiver_main, 0, NULL);
        snprintf(name, sizeof name, "tx-%s", pairs[i].name);
        a = sg_actor_init(name, sg_host_by_name(pairs[i].src));
        sg_actor_set_data(a, &pairs[i]);
        sg_actor_start(a, sender_main, 0, NULL);
    }
    simgrid_run();

    /* One pair, two sizes: slope and intercept. */
    const pair *p = &pairs[0];
    const double d1 = delta_s(p, 0), d2 = delta_s(p, 1);
    const double bw_est = (double)(S2 - S1) / (d2 - d1), lat_est = d1 - S1 / bw_est;
    eccl_sg_printf("loopback", "%s -> %s: %u bytes in %.9f s, %u bytes in %.9f s: %.6g B/s, "
                   "latency %.9f s (configured %.6g B/s, %.9f s)", host, host, S1, d1, S2, d2,
                   bw_est, lat_est, t.bw, t.lat);
    /* ns clock: the slope is good to 2 ns over (S2 - S1) / bw. */
    CHECK(&t, fabs(bw_est - t.bw) <= t.bw * 2e-9 / (d2 - d1) + 1,
          "loopback bandwidth %.9g B/s, configured %.9g", bw_est, t.bw);
    CHECK(&t, lat_est >= t.lat - 2e-9 && lat_est <= t.lat + HEADER_MAX / t.bw + 2e-9,
          "loopback latency %.9f s, configured %.9f s (+ at most %d header bytes)", lat_est,
          t.lat, HEADER_MAX);
    /* Two at once: each as fast as one alone. */
    const double da = delta_s(&pairs[1], 0), db = delta_s(&pairs[2], 0);
    eccl_sg_printf("loopback", "two sends of %u bytes at once: %.9f s and %.9f s (one alone: "
                   "%.9f s)", S2, da, db, d2);
    CHECK(&t, fabs(da - d2) <= 2e-9 && fabs(db - d2) <= 2e-9,
          "two loopback flows at once: %.9f s, %.9f s; alone %.9f s (a FATPIPE shares nothing)",
          da, db, d2);
    /* To another host: the route's own cost, not the loopback's. */
    const double dother = delta_s(&pairs[3], 0), want = olat + S2 / obw;
    eccl_sg_printf("loopback", "%s -> %s: %u bytes in %.9f s (route: %lu links, %.9f s + bytes "
                   "/ %.6g B/s = %.9f s)", host, other, S2, dother, on, olat, obw, want);
    CHECK(&t, dother >= want - 2e-9, "%s -> %s: %.9f s, its route says at least %.9f s", host,
          other, dother, want);
    CHECK(&t, !latency || dother <= want + HEADER_MAX / obw + 2e-9,
          "latency net: %s -> %s: %.9f s, its route says %.9f s (+ at most %d header bytes)", host,
          other, dother, want, HEADER_MAX);
    if (small) {
        /* Sent right behind the large one, due long before it: held for it. */
        const pair *o = &pairs[NPAIRS];
        eccl_sg_printf("loopback", "%u bytes then %u at once on one conn: arrived %.9f s and "
                       "%.9f s after the first send", S2, S_SMALL,
                       (double)(o->got_ns[0] - o->sent_ns[0]) / 1e9,
                       (double)(o->got_ns[1] - o->sent_ns[0]) / 1e9);
        CHECK(&t, o->got_ns[1] >= o->got_ns[0], "order: the small send arrived before the large one");
        const double dsmall = delta_s(&pairs[NPAIRS + 1], 0);
        const double want_small = olat + S_SMALL / obw;
        CHECK(&t, dsmall >= want_small - 2e-9 && dsmall <= want_small + HEADER_MAX / obw + 2e-9,
              "small: %.9f s, its route says %.9f s (+ at most %d header bytes)", dsmall, want_small,
              HEADER_MAX);
    }
    for (int i = 0; i < npairs; i++)
        for (int j = 0; j < pairs[i].nsizes; j++)
            CHECK(&t, pairs[i].got_ns[j] > 0, "%s: size %d never arrived", pairs[i].name, j);

    eccl_sg_world_destroy(t.w);
    eccl_sg_printf("loopback", "%s", t.failures ? "FAIL" : "PASS");
    return t.failures ? 1 : 0;
}
