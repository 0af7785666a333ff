#define _POSIX_C_SOURCE 200809L /* scandir, alphasort, mkstemp, fdopen */
/* The analysis behind `eccl-trace analyze` (docs/trace.md), also run by the
 * scenario engine on a run's traces: reads every rank's collective trace in
 * DIR (eccl-trace-*.txt), reports the first collective that did not
 * complete everywhere, what each rank of its world was doing, slow ranks,
 * and the likely culprit; optionally draws the time line with gnuplot. */
#include "trace_analyze.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_DUMPS 65536

struct call {
    uint64_t seq, tag, bytes, posted_ns;
    int64_t epoch, started, first, data, end; /* µs after posted; -1: not reached */
    uint32_t rank, world;
    char coll[24], algo[16], result[24];
};

struct wait {
    uint64_t tag, peer;
    int64_t epoch; /* the call's (older files: the dump's) */
    uint32_t rank;
    char role[16];
};

/* A link whose socket holds a frame of a call this rank has not made. */
struct held {
    uint64_t peer, tag, bytes;
};

/* A link's rate in, as the receiving rank measured it (rx_* of its link
 * line): the last window it told the master, else since it opened. */
struct rx {
    uint64_t from, bytes, us;
};

struct dump {
    char path[512];
    uint64_t peer, now_ns;
    uint32_t rank, world, epoch, n_calls, n_waits, n_held, n_rx;
    char why[64];
    struct call *calls;
    struct wait *waits;
    struct held *held;
    struct rx *rx;
};

/* The value of `key=` in a line of space-separated key=value words. */
static int field(const char *line, const char *key, char *out, size_t len)
{
    size_t k = strlen(key);
    for (const char *p = line; (p = strstr(p, key)) != NULL; p += k) {
        if ((p == line || p[-1] == ' ') && p[k] == '=') {
            const char *v = p + k + 1;
            size_t n = strcspn(v, " \n");
            if (n >= len) n = len - 1;
            memcpy(out, v, n);
            out[n] = 0;
            return 1;
        }
    }
    out[0] = 0;
    return 0;
}

static uint64_t u64(const char *line, const char *key)
{
    char v[32];
    return field(line, key, v, sizeof v) ? strtoull(v, NULL, 10) : 0;
}

/* A phase time: "-" (not reached) is -1. */
static int64_t phase(const char *line, const char *key)
{
    char v[32];
    if (!field(line, key, v, sizeof v) || v[0] == '-' || !v[0]) return -1;
    return (int64_t)strtoll(v, NULL, 10);
}

/* Room for element n of an array whose capacity is 8, then doubles. */
static void *grow(void *p, uint32_t n, size_t size)
{
    if (n != 0 && (n < 8 || (n & (n - 1)) != 0)) return p;
    void *q = realloc(p, (n ? 2 * (size_t)n : 8) * size);
    if (!q) {
        fprintf(stderr, "eccl-trace: out of memory\n");
        exit(2);
    }
    return q;
}

/* One dump; 0 if it is not an eccl-trace 1 file. */
static int read_dump(const char *path, struct dump *d)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    if (!f) {
        fprintf(stderr, "eccl-trace: %s: %s\n", path, strerror(errno));
        return 0;
    }
    memset(d, 0, sizeof *d);
    snprintf(d->path, sizeof d->path, "%s", path);
    int ok = fgets(line, sizeof line, f) && strcmp(line, "eccl-trace 1\n") == 0, ended = 0;
    while (ok && fgets(line, sizeof line, f)) {
        if (strncmp(line, "comm ", 5) == 0) {
            d->peer = u64(line, "peer");
            d->rank = (uint32_t)u64(line, "rank");
            d->world = (uint32_t)u64(line, "world");
            d->epoch = (uint32_t)u64(line, "epoch");
            d->now_ns = u64(line, "now_ns");
            field(line, "why", d->why, sizeof d->why);
        } else if (strncmp(line, "call ", 5) == 0) {
            d->calls = grow(d->calls, d->n_calls, sizeof *d->calls);
            struct call *c = &d->calls[d->n_calls++];
            c->seq = u64(line, "seq");
            c->tag = u64(line, "tag");
            c->bytes = u64(line, "bytes");
            c->posted_ns = u64(line, "posted_ns");
            c->epoch = (int64_t)u64(line, "epoch");
            c->rank = (uint32_t)u64(line, "rank");
            c->world = (uint32_t)u64(line, "world");
            c->started = phase(line, "started_us");
            c->first = phase(line, "first_us");
            c->data = phase(line, "data_us");
            c->end = phase(line, "end_us");
            field(line, "coll", c->coll, sizeof c->coll);
            field(line, "algo", c->algo, sizeof c->algo);
            field(line, "result", c->result, sizeof c->result);
        } else if (strncmp(line, "wait ", 5) == 0) {
            d->waits = grow(d->waits, d->n_waits, sizeof *d->waits);
            struct wait *w = &d->waits[d->n_waits++];
            char ep[32];
            w->tag = u64(line, "tag");
            w->epoch = field(line, "epoch", ep, sizeof ep) ? strtoll(ep, NULL, 10) : (int64_t)d->epoch;
            w->peer = u64(line, "peer");
            w->rank = (uint32_t)u64(line, "rank");
            field(line, "role", w->role, sizeof w->role);
        } else if (strncmp(line, "link ", 5) == 0) {
            char t[32];
            uint64_t win = u64(line, "win_bytes"), all = u64(line, "rx_bytes");
            if (win || all) {
                d->rx = grow(d->rx, d->n_rx, sizeof *d->rx);
                struct rx *x = &d->rx[d->n_rx++];
                x->from = u64(line, "peer");
                x->bytes = win ? win : all;
                x->us = win ? u64(line, "win_us") : u64(line, "rx_us");
            }
            if (!field(line, "held_tag", t, sizeof t) || t[0] == '-' || !t[0]) continue;
            d->held = grow(d->held, d->n_held, sizeof *d->held);
            struct held *h = &d->held[d->n_held++];
            h->peer = u64(line, "peer");
            h->tag = strtoull(t, NULL, 10);
            h->bytes = u64(line, "held_bytes");
        } else if (strcmp(line, "end\n") == 0) {
            ended = 1;
        }
    }
    fclose(f);
    if (!ok || !ended) {
        fprintf(stderr, "eccl-trace: %s: not a whole eccl-trace 1 file: skipped\n", path);
        free(d->calls);
        free(d->waits);
    }
    return ok && ended;
}

static int is_trace_file(const struct dirent *e)
{
    size_t len = strlen(e->d_name);
    return strncmp(e->d_name, "eccl-trace-", 11) == 0 && len > 15 && strcmp(e->d_name + len - 4, ".txt") == 0;
}

static void free_dumps(struct dump *d, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        free(d[i].calls);
        free(d[i].waits);
        free(d[i].held);
        free(d[i].rx);
    }
    free(d);
}

/* A peer's record of call (tag, epoch) across its dumps: the one of its
 * newest dump that has it (an ended call over a running one); that dump in
 * *from where from is not NULL. */
static const struct call *record_of(const struct dump *d, uint32_t n, uint64_t peer, uint64_t tag, int64_t epoch,
                                    const struct dump **from)
{
    const struct call *best = NULL;
    const struct dump *best_in = NULL;
    for (uint32_t i = 0; i < n; i++) {
        if (d[i].peer != peer) continue;
        for (uint32_t k = d[i].n_calls; k-- > 0;) {
            const struct call *c = &d[i].calls[k];
            if (c->tag != tag || c->epoch != epoch) continue;
            if (!best || (c->end >= 0 && best->end < 0) ||
                ((c->end >= 0) == (best->end >= 0) && d[i].now_ns > best_in->now_ns))
                best = c, best_in = &d[i];
            break;
        }
    }
    if (from) *from = best_in;
    return best;
}

/* A dump a rank writes while its job runs on: the master named a slow
 * link (core/comm/rates.c), and every member wrote its rates then, in the
 * middle of whatever calls it had running. A call running there may have
 * ended a moment later, and one its peers had posted may come next: such a
 * dump shows neither a stall nor a call never made. A call that does stall
 * fails somewhere, and that failure makes every member write a dump of its
 * own (TRACE_ASK). */
static int in_motion(const struct dump *d) { return strcmp(d->why, "slow_link") == 0; }

/* A dump of the peer written while it was in `epoch`, or NULL; with
 * `settled`, not one written in motion. */
static const struct dump *dump_in(const struct dump *d, uint32_t n, uint64_t peer, int64_t epoch, int settled)
{
    for (uint32_t i = 0; i < n; i++)
        if (d[i].peer == peer && (int64_t)d[i].epoch == epoch && !(settled && in_motion(&d[i]))) return &d[i];
    return NULL;
}

/* A dump its communicator wrote as it failed for the master's loss (in a
 * call or between calls: core/comm/ops.c, comm_fail). */
static int lost_master(const struct dump *d) { return strcmp(d->why, "comm_failed:master_lost") == 0; }

/* Whether the peer's communicator lost the master while it was in `epoch`. */
static int lost_master_in(const struct dump *d, uint32_t n, uint64_t peer, int64_t epoch)
{
    for (uint32_t i = 0; i < n; i++)
        if (d[i].peer == peer && (int64_t)d[i].epoch == epoch && lost_master(&d[i])) return 1;
    return 0;
}

/* One more rank cut off (the first ECCL_TRACE_MAX_CUT are kept). */
static void add_cut(eccl_trace_verdict *v, uint32_t rank, uint64_t peer)
{
    if (v->n_cut < ECCL_TRACE_MAX_CUT) v->cut_rank[v->n_cut] = rank, v->cut_peer[v->n_cut++] = peer;
}

/* No call failed, yet some communicators lost the master between calls
 * (comm_failed:master_lost, say in a membership step right after a call
 * every rank completed): the cut-off side is the culprit when not every
 * rank of its world was cut. Returns 1 when it names them, else 0. */
static int cut_between_calls(FILE *out, const struct dump *d, uint32_t n, eccl_trace_verdict *v)
{
    uint32_t world = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!lost_master(&d[i])) continue;
        uint32_t k = 0;
        while (k < v->n_cut && v->cut_peer[k] != d[i].peer) k++;
        if (k < v->n_cut) continue;
        add_cut(v, d[i].rank, d[i].peer);
        if (d[i].world > world) world = d[i].world;
    }
    if (!v->n_cut) return 0;
    fprintf(out, "but rank(s)");
    for (uint32_t k = 0; k < v->n_cut; k++)
        fprintf(out, "%s %u (peer %" PRIu64 ")", k ? "," : "", v->cut_rank[k], v->cut_peer[k]);
    if (v->n_cut == world) {
        fprintf(out, " lost the master between calls: every rank did (the master, or its host, went)\n");
        return 1;
    }
    v->culprit = ECCL_TRACE_CUT_OFF, v->rank = v->cut_rank[0], v->peer = v->cut_peer[0];
    fprintf(out, " lost the master between calls\nculprit: rank(s) above, cut off from the master (a partition, a "
                 "broken link to the master's side, or its host), while the others did not\n");
    return 1;
}

/* The caller has its result: it ended well, or it returned early and its
 * completion round runs on (docs/protocol.md, "The commit rule": a result
 * any survivor returned is committed). */
static int complete(const struct call *c)
{
    return c && (c->end >= 0 ? strcmp(c->result, "ok") == 0 : c->data >= 0);
}

/* Whether the peers of d (ids[0 .. n_ids)) all completed call (tag,
 * epoch), as far as their traces tell (a dump in motion tells nothing of
 * a call it caught running or had not seen yet). */
static int done_everywhere(const struct dump *d, uint32_t n, const uint64_t *ids, uint32_t n_ids, uint64_t tag,
                           int64_t epoch)
{
    for (uint32_t j = 0; j < n_ids; j++) {
        const struct dump *from;
        const struct call *o = record_of(d, n, ids[j], tag, epoch, &from);
        if (o ? !complete(o) && !(o->end < 0 && in_motion(from)) : dump_in(d, n, ids[j], epoch, 1) != NULL)
            return 0;
    }
    return 1;
}

static void plot(FILE *out, const struct dump *d, uint32_t n, uint64_t t0, const char *png)
{
    char data[] = "/tmp/eccl-trace-plot-XXXXXX";
    int fd = mkstemp(data);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        fprintf(stderr, "eccl-trace: --plot: cannot write a temporary file\n");
        return;
    }
    /* One segment per call: rank, start (ms), length (ms), ended 1/0. */
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < d[i].n_calls; k++) {
            const struct call *c = &d[i].calls[k];
            double s = (double)(c->posted_ns - t0) / 1e6;
            double e = c->end >= 0 ? (double)c->end / 1e3 : (double)(d[i].now_ns - c->posted_ns) / 1e6;
            fprintf(f, "%u %.6f %.6f %d\n", d[i].rank, s, e, complete(c));
        }
    fclose(f);
    /* The script as a file of its own: no shell quoting in the way. */
    char script[] = "/tmp/eccl-trace-gp-XXXXXX";
    int sfd = mkstemp(script);
    FILE *g = sfd >= 0 ? fdopen(sfd, "w") : NULL;
    if (!g) {
        fprintf(stderr, "eccl-trace: --plot: cannot write a temporary file\n");
        unlink(data);
        return;
    }
    fprintf(g,
            "set terminal png size 1200,600\nset output '%s'\nset xlabel 'ms since the first call'\n"
            "set ylabel 'rank'\nset title 'eccl collective trace: each call from posted to end (red: not "
            "completed)'\nplot '%s' using 2:1:3:(0):($4 > 0 ? 0x3060c0 : 0xd02020) with vectors nohead lw 6 "
            "lc rgb variable notitle\n",
            png, data);
    fclose(g);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "gnuplot %s", script);
    int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "eccl-trace: --plot: gnuplot failed (status %d; is it installed?)\n", rc);
    else fprintf(out, "time line: %s\n", png);
    unlink(script);
    unlink(data);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t median(int64_t *v, uint32_t n)
{
    qsort(v, n, sizeof *v, cmp_i64);
    return n ? v[n / 2] : 0;
}

/* Slow ranks: over the calls every rank of their world recorded, how much
 * later than the first rank each posted its call (same-host clocks). A
 * rank whose median over five calls or more is over 10 ms (ranks of a busy
 * host drift apart by a few) and over four times the largest median of the
 * others holds every call up: it computes longer, or waits on
 * something else, before it calls. At most SLOW_SAMPLES lateness values
 * are kept in all (the first calls, as many as fit: said when fewer than
 * all). Returns how many were named. */
#define SLOW_SAMPLES (1u << 24)
#define SLOW_CALLS_MAX 4096u
static int slow_ranks(FILE *out, const struct dump *d, uint32_t n, const uint64_t *ids, uint32_t n_ids)
{
    uint32_t cap = n_ids ? SLOW_SAMPLES / n_ids : 0;
    if (cap > SLOW_CALLS_MAX) cap = SLOW_CALLS_MAX;
    if (cap < 5) return 0; /* too many ranks to judge five calls of each */
    int64_t *late = malloc((size_t)n_ids * cap * sizeof *late), *med = calloc(n_ids, sizeof *med);
    const struct call **rec = malloc(n_ids * sizeof *rec);
    uint32_t calls = 0, skipped = 0;
    int named = 0;
    if (!late || !med || !rec) {
        free(late);
        free(med);
        free(rec);
        return 0;
    }
    /* The calls of one peer (the first read), each judged once. */
    for (uint32_t i = 0; i < n; i++) {
        if (d[i].peer != ids[0]) continue;
        for (uint32_t c = 0; c < d[i].n_calls; c++) {
            const struct call *x = &d[i].calls[c];
            uint64_t first = UINT64_MAX;
            if (x->world != n_ids) continue;
            uint32_t j = 0;
            for (; j < n_ids; j++) {
                rec[j] = record_of(d, n, ids[j], x->tag, x->epoch, NULL);
                if (!rec[j]) break;
                if (rec[j]->posted_ns < first) first = rec[j]->posted_ns;
            }
            if (j < n_ids) continue;
            if (calls == cap) {
                skipped++;
                continue;
            }
            for (j = 0; j < n_ids; j++) late[(size_t)j * cap + calls] = (int64_t)(rec[j]->posted_ns - first);
            calls++;
        }
        break;
    }
    /* The two largest medians: "the others" of a rank is the largest but
     * its own. */
    uint32_t top = 0;
    int64_t second = 0;
    for (uint32_t j = 0; j < n_ids; j++) {
        med[j] = median(&late[(size_t)j * cap], calls);
        if (j == 0 || med[j] > med[top]) {
            if (j) second = med[top];
            top = j;
        } else if (med[j] > second) {
            second = med[j];
        }
    }
    for (uint32_t j = 0; j < n_ids && calls >= 5; j++) {
        int64_t others = j == top ? second : med[top];
        if (med[j] > 10000000 && med[j] > 4 * others) {
            const struct call *last = NULL;
            for (uint32_t i = 0; i < n && !last; i++)
                if (d[i].peer == ids[j] && d[i].n_calls) last = &d[i].calls[d[i].n_calls - 1];
            fprintf(out, "slow rank: peer %" PRIu64 " (rank %u) posted its calls a median %.3f ms after the first rank, "
                   "over %u calls every rank recorded (the others: at most %.3f ms)\n",
                   ids[j], last ? last->rank : 0, (double)med[j] / 1e6, calls, (double)others / 1e6);
            named++;
        }
    }
    if (skipped)
        fprintf(out, "slow ranks: judged over the first %u calls every rank recorded (%u more left out: %u ranks)\n",
                calls, skipped, n_ids);
    free(late);
    free(med);
    free(rec);
    return named;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Slow links: the rates ranks measured on their links from other hosts
 * (link lines' rx_*, each receiver's latest dump), against the upper
 * quartile of them all, as the master judges them while the job runs
 * (core/comm/rates.c): a link under a quarter of it is named, the slowest
 * in the verdict. At least three links of 1 MiB or more. Returns how many
 * were named. */
#define SLOW_LINK_MIN_BYTES (1u << 20)
static int slow_links(FILE *out, const struct dump *d, uint32_t n, eccl_trace_verdict *v)
{
    uint32_t k = 0, cap = 0;
    for (uint32_t i = 0; i < n; i++) cap += d[i].n_rx;
    struct link {
        uint64_t from, to;
        double bps;
    } *l = cap ? malloc(cap * sizeof *l) : NULL;
    double *r = cap ? malloc(cap * sizeof *r) : NULL;
    if (!l || !r) {
        free(l);
        free(r);
        return 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        /* The receiver's latest dump only. */
        int latest = 1;
        for (uint32_t j = 0; j < n && latest; j++)
            latest = !(d[j].peer == d[i].peer && (d[j].now_ns > d[i].now_ns || (d[j].now_ns == d[i].now_ns && j > i)));
        for (uint32_t x = 0; latest && x < d[i].n_rx; x++) {
            const struct rx *e = &d[i].rx[x];
            if (e->bytes < SLOW_LINK_MIN_BYTES || !e->us) continue;
            l[k] = (struct link){e->from, d[i].peer, (double)e->bytes * 1e6 / (double)e->us};
            r[k] = l[k].bps;
            k++;
        }
    }
    int named = 0;
    if (k >= 3) {
        qsort(r, k, sizeof *r, cmp_double);
        double ref = r[3 * k / 4], worst = 0;
        for (uint32_t i = 0; i < k; i++) {
            if (l[i].bps * 4 >= ref) continue;
            fprintf(out, "slow link: peer %" PRIu64 " -> peer %" PRIu64 ": %.3g B/s where the links do %.3g B/s "
                         "(upper quartile of %u)\n", l[i].from, l[i].to, l[i].bps, ref, k);
            if (!named++ || l[i].bps < worst)
                worst = l[i].bps, v->slow_link_from = l[i].from, v->slow_link_to = l[i].to;
        }
    }
    free(l);
    free(r);
    return named;
}

int eccl_trace_analyze(const char *dir, const char *png, FILE *out, eccl_trace_verdict *v)
{
    memset(v, 0, sizeof *v);
    /* In name order: the same directory gives the same report. */
    struct dirent **names = NULL;
    int n_names = scandir(dir, &names, is_trace_file, alphasort);
    if (n_names < 0) {
        fprintf(stderr, "eccl-trace: %s: %s\n", dir, strerror(errno));
        return 2;
    }
    struct dump *all = NULL;
    uint32_t n_all = 0;
    for (int i = 0; i < n_names; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (n_all < MAX_DUMPS) {
            all = grow(all, n_all, sizeof *all);
            if (read_dump(path, &all[n_all])) n_all++;
        }
        free(names[i]);
    }
    free(names);
    if (n_all == 0) {
        fprintf(stderr, "eccl-trace: no eccl-trace-*.txt in %s\n", dir);
        free(all);
        return 2;
    }
    struct dump *d = all;
    uint32_t n = n_all, n_ids = 0;
    uint64_t *ids = calloc(n, sizeof *ids);
    if (!ids) {
        fprintf(stderr, "eccl-trace: out of memory\n");
        free_dumps(all, n_all);
        return 2;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = 0;
        while (j < n_ids && ids[j] != d[i].peer) j++;
        if (j == n_ids) ids[n_ids++] = d[i].peer;
    }
    uint64_t t0 = UINT64_MAX;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < d[i].n_calls; k++)
            if (d[i].calls[k].posted_ns < t0) t0 = d[i].calls[k].posted_ns;
    fprintf(out, "%u trace(s) from %u peer(s)\n", n, n_ids);
    /* The first call (by when it was first posted) that some peer did not
     * complete: failed, still running, or never posted by a peer whose
     * trace was written in its epoch. */
    const struct call *first = NULL;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < d[i].n_calls; k++) {
            const struct call *c = &d[i].calls[k];
            if (first && c->posted_ns >= first->posted_ns) continue;
            if (!done_everywhere(d, n, ids, n_ids, c->tag, c->epoch)) first = c;
        }
    if (png) plot(out, d, n, t0 == UINT64_MAX ? 0 : t0, png);
    v->slow = slow_ranks(out, d, n, ids, n_ids);
    v->slow_links = slow_links(out, d, n, v);
    if (!first) {
        fprintf(out, "every traced call completed on every rank that wrote a trace\n");
        int rc = cut_between_calls(out, d, n, v);
        free(ids);
        free_dumps(all, n_all);
        return rc;
    }
    uint32_t world = first->world;
    v->incomplete = 1;
    v->tag = first->tag;
    fprintf(out, "first call not completed everywhere: tag %" PRIu64 " (%s, %s, %" PRIu64 " bytes), epoch %" PRId64
           ", world %u, first posted at %.3f ms\n",
           first->tag, first->coll, first->algo, first->bytes, first->epoch, world,
           (double)(first->posted_ns - t0) / 1e6);
    /* Each rank of that world: which peer it was, and what it did. */
    uint32_t *waited = calloc(world ? world : 1, sizeof *waited);
    uint64_t *peer_of = calloc(world ? world : 1, sizeof *peer_of); /* 0: not known */
    if (!waited || !peer_of) {
        fprintf(stderr, "eccl-trace: out of memory\n");
        exit(2);
    }
    int never = -1, silent = -1;
    v->n_cut = 0;
    for (uint32_t r = 0; r < world; r++) {
        uint64_t peer = 0;
        const struct call *c = NULL;
        int found = 0;
        for (uint32_t j = 0; j < n_ids && !found; j++) {
            const struct call *o = record_of(d, n, ids[j], first->tag, first->epoch, NULL);
            const struct dump *at = dump_in(d, n, ids[j], first->epoch, 0);
            if ((o && o->rank == r) || (!o && at && at->rank == r)) peer = ids[j], c = o, found = 1;
        }
        if (found) peer_of[r] = peer;
        if (!found) {
            fprintf(out, "  rank %u: no trace (dead, stopped, or it could not write one)\n", r);
            if (silent < 0) silent = (int)r;
            continue;
        }
        if (!c) {
            if (lost_master_in(d, n, peer, first->epoch)) {
                /* Cut off before it could post it: not a rank elsewhere. */
                fprintf(out, "  rank %u (peer %" PRIu64 "): lost the master before it posted it\n", r, peer);
                add_cut(v, r, peer);
                continue;
            }
            const struct dump *at = dump_in(d, n, peer, first->epoch, 1);
            if (!at) {
                /* Its one dump of the epoch was taken mid-job, before it
                 * posted the call; none came when the call failed. */
                fprintf(out, "  rank %u (peer %" PRIu64 "): no trace since one written mid-job (a slow link), before "
                             "it posted it\n", r, peer);
                if (silent < 0) silent = (int)r;
                continue;
            }
            const struct call *last = at->n_calls ? &at->calls[at->n_calls - 1] : NULL;
            fprintf(out, "  rank %u (peer %" PRIu64 "): never posted it", r, peer);
            if (last)
                fprintf(out, "; its last call then: tag %" PRIu64 " (%s), %s", last->tag, last->coll,
                       last->end >= 0 ? last->result : "running");
            fprintf(out, "\n");
            if (never < 0) never = (int)r;
            continue;
        }
        /* Lost the master, in this call or after it in this epoch: cut off
         * from it (a partition, a broken link to its side, its host gone). */
        int cut = (c->end >= 0 && strcmp(c->result, "master_lost") == 0) || lost_master_in(d, n, peer, first->epoch);
        if (cut) add_cut(v, r, peer);
        if (c->end >= 0)
            fprintf(out, "  rank %u (peer %" PRIu64 "): %s after %.3f ms", r, peer, c->result, (double)c->end / 1e3);
        else if (c->data >= 0)
            fprintf(out, "  rank %u (peer %" PRIu64 "): returned its result after %.3f ms (its completion round runs on)", r,
                   peer, (double)c->data / 1e3);
        else
            fprintf(out, "  rank %u (peer %" PRIu64 "): posted, still running%s", r, peer,
                   c->first >= 0 ? "" : ", nothing heard yet");
        /* What it waited on, in any of its dumps while the call ran. */
        int any = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (d[i].peer != peer) continue;
            for (uint32_t w = 0; w < d[i].n_waits; w++) {
                const struct wait *x = &d[i].waits[w];
                if (x->tag != first->tag || x->epoch != first->epoch) continue;
                fprintf(out, "%s %s rank %u", any ? "," : "; waiting on", x->role, x->rank);
                if (x->rank < world) waited[x->rank]++;
                if (x->rank < world && x->peer && !peer_of[x->rank]) peer_of[x->rank] = x->peer;
                any = 1;
            }
            if (any) {
                /* A link it waits on that is held behind a frame of a call
                 * it has not made: what it waits for may sit behind it. */
                for (uint32_t h = 0; h < d[i].n_held; h++)
                    fprintf(out, "; its link from peer %" PRIu64 " holds a %" PRIu64 "-byte frame of tag %" PRIu64
                            " (a call it has not made yet): whatever follows on that link waits behind it",
                            d[i].held[h].peer, d[i].held[h].bytes, d[i].held[h].tag);
                v->held += d[i].n_held;
                break;
            }
        }
        if (cut && strcmp(c->result, "master_lost") != 0) fprintf(out, "; then lost the master");
        fprintf(out, "\n");
    }
    /* The culprit: the ranks that lost the master while others did not (a
     * partition), else a rank that never called it, else one that wrote no
     * trace, else the rank the most others wait on. Every rank losing the
     * master names nobody: the master itself went. */
    uint32_t most = 0;
    for (uint32_t r = 1; r < world; r++)
        if (waited[r] > waited[most]) most = r;
    if (v->n_cut && v->n_cut < world) v->culprit = ECCL_TRACE_CUT_OFF, v->rank = v->cut_rank[0];
    else if (never >= 0) v->culprit = ECCL_TRACE_NEVER_CALLED, v->rank = (uint32_t)never;
    else if (silent >= 0) v->culprit = ECCL_TRACE_NO_TRACE, v->rank = (uint32_t)silent;
    else if (world && waited[most]) v->culprit = ECCL_TRACE_WAITED_ON, v->rank = most;
    if (v->culprit != ECCL_TRACE_NONE) v->peer = peer_of[v->rank];
    char who[64] = "";
    if (v->peer) snprintf(who, sizeof who, " (peer %" PRIu64 ")", v->peer);
    if (v->culprit == ECCL_TRACE_NEVER_CALLED)
        fprintf(out, "culprit: rank %u%s never called tag %" PRIu64 " (its process answered: it is alive and elsewhere)\n",
                v->rank, who, first->tag);
    else if (v->culprit == ECCL_TRACE_CUT_OFF) {
        fprintf(out, "culprit: rank(s)");
        for (uint32_t i = 0; i < v->n_cut; i++)
            fprintf(out, "%s %u (peer %" PRIu64 ")", i ? "," : "", v->cut_rank[i], v->cut_peer[i]);
        fprintf(out, " lost the master: cut off from it (a partition, a broken link to the master's side, or "
                     "its host), while the others did not\n");
    } else if (v->culprit == ECCL_TRACE_NO_TRACE)
        fprintf(out, "culprit: rank %u%s wrote no trace: dead, stopped, or cut off from the master\n", v->rank, who);
    else if (v->culprit == ECCL_TRACE_WAITED_ON && v->held)
        fprintf(out, "culprit: rank %u%s, which %u rank(s) wait on, whose frames may sit behind a frame of a call "
                "the waiting rank has not made (above): calls made in an order that blocks a link\n",
                v->rank, who, waited[most]);
    else if (v->culprit == ECCL_TRACE_WAITED_ON)
        fprintf(out, "culprit: rank %u%s, which %u rank(s) wait on: a slow rank, or a slow or broken link to it\n",
                v->rank, who, waited[most]);
    else if (v->n_cut && v->n_cut == world)
        fprintf(out, "culprit: none among the ranks: every rank lost the master (the master, or its host, went)\n");
    else
        fprintf(out, "culprit: none found (every rank posted it and waits on nobody: see the failures above)\n");
    free(waited);
    free(peer_of);
    free(ids);
    free_dumps(all, n_all);
    return 1;
}
