#include "coll/dispatch.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"

/* Measured on loopback (tools/peers/RESULTS.md; docs/performance.md,
 * "The recursive all-reduce"): up to 64 KiB, recursive doubling wins at
 * three and four ranks (eccl-bench -n 20, medians of 5 runs, µs at 8 B /
 * 4 KiB / 32 KiB: N=4 182 / 199 / 252 against the tree's 275 / 268 / 294
 * and the ring's 232 / 292 / 359; N=3 144 / 116 / 183 against 109 / 145 /
 * 171 and 111 / 118 / 218, 0.75-0.98 of the ring run by run), the tree
 * from five on (N=6 346 / 337 / 465 against 386 / 499 / 595, N=8 470 /
 * 489 / 547 against 832 / 810 / 1048: at 8 processes on 2 cores the
 * doubling's N log N data and token messages cost more than the tree's
 * 4 (N-1)). Two ranks and everything larger take each collective's first
 * candidate (the ring, whose two ranks swap small buffers; the chain):
 * from 128 KiB on the ring and the halving recursive all-reduce are within
 * the noise of each other up to 4 MiB and the ring wins at 16 MiB.
 *
 * Broadcast and reduce: the binomial tree (coll/binomial.h) against the
 * chain, Release eccl-bench on the 2-core loopback box (-n 20 -w 3,
 * interleaved runs under other agents' load, medians of 21 runs at 8 B..16 MiB
 * x8 and of 4-6 at 32 KiB..8 MiB x2; binomial / chain time):
 *   broadcast N=2: 256 KiB 0.65-0.81, 512 KiB 0.85, 1 MiB 1.06, 4 MiB 1.61
 *             N=3: 128 KiB 0.91, 256 KiB-2 MiB 0.71-0.85, 4 MiB 0.96
 *             N=4: <= 128 KiB 1.15-1.29, 256 KiB-4 MiB 0.74-0.97, 16 MiB 0.98
 *             N=6: 128 KiB 1.19, 256 KiB-4 MiB 0.62-0.97
 *             N=8: <= 128 KiB 0.98-1.28 (one sweep of three 0.74-0.89),
 *                  256 KiB-4 MiB 0.47-0.97, 16 MiB 0.88
 *   reduce    N=2: 256 KiB 0.72-0.82 between 1.11 (64 KiB) and 1.33 (512 KiB)
 *             N=3: 64 KiB-2 MiB 0.59-0.93, 8 MiB 1.10
 *             N=4: <= 128 KiB 0.91-1.17, 256 KiB-2 MiB 0.60-0.95, 4 MiB 1.07
 *             N=6: 64 KiB-2 MiB 0.63-0.91, 4 MiB 0.96, 8 MiB 1.40
 *             N=8: <= 128 KiB 0.79-1.16, 256 KiB-2 MiB 0.60-0.93, 4 MiB 1.20,
 *                  16 MiB 1.12
 * From 256 KiB the chain splits each call over both ring directions and
 * loses most there; small calls are within the box's noise (8 ranks on 2
 * cores: a hop waits for a core, and ranks that spin while they wait take
 * it, more of them in a tree; with ECCL_SPIN_NS=0 the tree's small
 * broadcast at N=8 was 0.67-0.79), large ones move the same bytes either
 * way and the reduce's tree folds more. So: the tree for (128 KiB, 4 MiB]
 * broadcasts and (128 KiB, 2 MiB] reduces from three ranks on, for
 * (128 KiB, 512 KiB] broadcasts of two; like the all-reduce rule, past the
 * largest N measured (8) the tree's lead in depth only grows.
 *
 * Broadcasts where every rank shares one host through shared memory
 * (ECCL_DISPATCH_ONE_HOST; the sweeps above ran over TCP loopback): the
 * chain's small hops each wait for the next rank's wake-up where the tree
 * has log2 N rounds. Release eccl-bench --coll broadcast -b 8 -e 128K -f 8
 * -n 300 -w 30, ECCL_ALGO forcing either, five interleaved rounds, medians,
 * binomial / chain time at 8 B / 64 B / 512 B / 4 KiB / 32 KiB:
 *   N=4 0.96 0.88 0.94 0.90 1.08;  N=8 0.72 0.87 0.82 0.87 0.73
 * (over TCP loopback, ECCL_SHM=0, two rounds: N=4 1.1-1.6, N=8 0.74-0.95).
 * So the tree up to 4 MiB from three ranks there.
 *
 * All-gather: Bruck's rounds (coll/bruck.h) against the ring pass, Release
 * eccl-bench --coll allgather -b 8 -e 4M -f 4 -n 20 -w 3, ECCL_ALGO forcing
 * either, runs interleaved on the loaded 2-core box (load average 5-8 from
 * other builds), medians of 15 runs at N = 3, 4, 8 and of 9 at N = 5, 6;
 * µs at 32 B / 2 KiB / 32 KiB / 512 KiB of output, Bruck / ring time:
 *   N=3 174 / 173 / 185 / 492 against 182 / 121 / 151 / 525: 0.96, 1.43, 1.22, 0.94
 *   N=4 281 / 294 / 310 / 839 against 261 / 205 / 251 / 849: 1.08, 1.44, 1.24, 0.99
 *   N=5 396 / 480 / 501 / 1205 against 364 / 450 / 595 / 1277: 1.09, 1.07, 0.84, 0.94
 *   N=6 525 / 561 / 609 / 1491 against 609 / 577 / 777 / 1754: 0.86, 0.97, 0.78, 0.85
 *   N=8 927 / 871 / 957 / 2578 against 975 / 1105 / 1198 / 3181: 0.95, 0.79, 0.80, 0.81
 * and within 0.9-1.07 at 2 MiB everywhere. At three and four ranks Bruck
 * has no fewer hops than the ring (2 rounds + 2 barrier rounds against
 * N-1 steps + N-1 tokens: 4 and 6) and its peer links cost more per hop
 * on this box (the recursive all-reduce shows the same at N = 3); from six
 * on its 2 ceil(log2 N) hops win up to 512 KiB (N=8: 2 KiB-512 KiB won in
 * 9-12 runs of 15), while five is mixed. So: Bruck for all-gathers of at
 * most 512 KiB from six ranks on; past the largest N measured its lead in
 * depth only grows, as for the trees above.
 *
 * Reduce-scatter: recursive halving (coll/rec_reduce_scatter.h) against
 * the ring pass, Release eccl-bench -b 8 -e 4M -f 4 -n 20 -w 3 (input
 * bytes), both algorithms back to back in each of 17 interleaved rounds at
 * N = 3, 4, 8 and 8 at N = 5, 6, on the 2-core box at load 6-9 from other
 * agents; medians of the per-round recursive / ring time:
 *   N=3  24 B..2 MiB 1.06-1.40 (ring median 156-169 µs up to 8 KiB)
 *   N=4  <= 8 KiB 1.08-2.14, 32 KiB 0.96, 128 KiB 1.21, 512 KiB 0.65,
 *        2 MiB 1.00 (ring 339-387 µs up to 8 KiB, recursive 422-691)
 *   N=5  <= 512 KiB 0.90-1.11, 2 MiB 1.35
 *   N=6  <= 32 KiB 0.62-1.05 (four sizes of six at 0.62-0.73; medians
 *        631-707 µs against 786-1117), 128 KiB-2 MiB 0.81-1.04
 *   N=8  <= 32 KiB 0.67-0.99 (medians 1037-1281 µs against 1195-1621),
 *        128 KiB-2 MiB 0.88-1.03
 * At three ranks halving folds the third in and out (five hops to the
 * ring's four); at four, every rank of the halving is busy at once and
 * spins while it waits, four processes on two cores (with ECCL_SPIN_NS=0
 * its 128 B call took 0.69-0.94 of the ring's at N=4, 4 rounds; at N=3
 * still 0.89-1.22). So on this box it pays from six ranks on, for
 * small calls, where its log2 p exchanges replace the ring's 2 (N-1)
 * hops; from 128 KiB both move the same bytes and the ring keeps its
 * pipelined directions.
 *
 * Retuned on the idle box (session 3; the measurements above ran beside
 * other agents' builds, load 5-13, which punishes algorithms whose every
 * rank is busy at once): three eccl-tune sweeps (--np 2,4,8 -b 8 -e 4M
 * -f 8 -n 20 -w 3 --repeat 3, docs/performance.md) agreed that from three
 * ranks on recursive halving beats the ring for reduce-scatters up to
 * 256 KiB of input, Bruck's rounds the ring for all-gathers up to 256 KiB
 * of output (one sweep of three mixed at N = 4), and the binomial tree the
 * chain for reduces of every size up to 256 KiB; so those rules start at
 * three ranks and the reduce's chain rule for small calls is gone. Small
 * broadcasts and all-reduces were mixed across the sweeps and keep their
 * rules.
 *
 * All-gather by recursive doubling (coll/rec_allgather.h), session 11,
 * on the idle box: Release eccl-bench --coll allgather -b 64K -e 8M -n 30
 * -w 3, ECCL_ALGO forcing ring, bruck, recursive, interleaved, medians of
 * 3 runs, µs of recursive / ring at 256 KiB / 512 KiB / 1 MiB / 2 MiB /
 * 4 MiB / 8 MiB of output:
 *   N=2 37/66 71/103 202/212 395/478 726/1078 1409/1809
 *   N=3 165/186 275/294 537/536 1042/1084 1989/2201 4006/4308
 *   N=4 366/402 288/659 587/924 1144/1309 2664/2948 4898/5588
 *   N=6 485/525 695/803 1172/1142 1948/2364 4223/4875 8708/8923
 *   N=8 745/841 1069/1241 1800/2167 3478/3600 6671/6963 15597/15317
 * Against Open MPI's default in the same session (N=4: 0.85-1.29
 * of its speed from 512 KiB, the ring 0.42-1.13; N=8: 0.75-0.95 from
 * 128 KiB, the ring 0.62-0.92). Every world up to eight ranks won or tied
 * from 256 KiB to 8 MiB, so: recursive doubling there, and for two
 * ranks below too (tied with the ring at 64-128 KiB); Bruck keeps the
 * smaller calls from three ranks (ahead at N=4 up to 256 KiB); past
 * eight ranks and 8 MiB, unmeasured, the ring stays.
 *
 * Host-regular worlds (eccl_coll_call.local_size = L >= 2 ranks on each of
 * H >= 2 hosts, so N >= 4; where the hierarchical all-reduce,
 * coll/hier_allreduce.h, may run) get rules of their own, from
 * `eccl-tune --sim` sweeps of simulated clusters, since loopback has no
 * NIC to spare and cannot show what the hierarchy is for (the tables are
 * in docs/performance.md, "The dispatcher on simulated clusters"):
 *   - fitted on scenarios/tune/clos_{2,4,8}ppn.scn (L = 2, 4, 8, 100 Gb/s
 *     NICs, N = 8..64, 8 B..8 MiB): recursive doubling up to 2 KiB (about
 *     twice the tree's speed there), above it the hierarchy while its
 *     sub-rings are short (H <= 8: at 512 KiB 0.6-0.85 of the ring's
 *     time); at H = 16 and L = 2 recursive halving beat it 2-4x;
 *   - judged on two platforms it was not fitted on (holdout_6ppn,
 *     holdout_4ppn_slow: L = 4, 6, N not powers of two, slower NICs): the
 *     hierarchy also won at H = 10 and 16 with L >= 4, by 1.2-2.8x, and
 *     the fits' Bruck and recursive halving for large all-gathers and
 *     reduce-scatters (every size from nine ranks) lost 1.3-4x to the
 *     ring, which the power-of-two worlds and fast NICs of the fit had
 *     hidden. So: the hierarchy above 2 KiB from four ranks a host, and
 *     with two or three while H <= 8; large all-gathers and
 *     reduce-scatters keep the loopback rules (the ring above 256 KiB);
 *   - broadcast: the binomial tree up to 4 MiB (0.15-0.92 of the chain's
 *     time in every sweep); reduce: the tree up to 128 KiB and the chain
 *     above up to 16 ranks, the tree at every size beyond.
 * The simulator is harder on pipelines than a network is: net_sg sends
 * each frame as a flow of its own, so k frames queued on one link share it
 * and all land together, where a TCP stream delivers the first after one
 * frame's time (backends/sim/README.md). A chain or ring that queues
 * several 1 MiB slices ahead cannot forward the first early, so past
 * 4 MiB, where the chain queues that deep, its simulated losses are left
 * out: the broadcast keeps the loopback rule (the chain) there.
 * Judged again on two fresh platforms (judge_2ppn, judge_8ppn), this table
 * picked the best algorithm at 84% and 91% of the sizes (the table before
 * it: 53% and 60%), its wrong picks costing +12% and +10% on average over
 * all sizes (before: +36% and +45%), counting the chain's simulated losses
 * past 4 MiB against it. A site with real hosts measures with
 * eccl-tune; its ECCL_TUNE rules come first.
 *
 * The sweeps ran worlds of 6 to 96 ranks, so their all-reduce rules stop
 * at N = 96 (issue 25: applied at 96K ranks, recursive doubling made every
 * rank of an 8-byte call open ceil(log2 N) = 17 peer links, one after
 * another on the call's critical path, where the tree opens at most
 * three). Beyond, the alpha-beta model decides, counting links:
 *   - up to 64 KiB the tree, as for every other world: 2 log2 N latencies
 *     against recursive doubling's log2 N, but each of recursive doubling's
 *     rounds on a first call waits for a new connection (a TCP handshake
 *     and eccl's hello, or a QP brought up: one to several round trips,
 *     each costing about as much as the round itself), and every rank then
 *     keeps log2 N links and their buffers where the tree keeps three;
 *   - above, recursive halving and doubling: its 2 log2 N steps against the
 *     hierarchy's 2 (L - 1) + 2 (H - 1), whose inter-host sub-rings grow with
 *     the hosts (at H = 12,000 a 1 MiB call is some 24,000 steps of a few
 *     bytes), at the same bytes per rank; the sweeps already showed it
 *     overtaking the hierarchy from H = 16 at L = 2. Its log2 N links are
 *     paid once per comm and amortised by calls this large.
 * Broadcast and reduce keep their binomial rules at any N: log depth, and
 * a rank opens links to its parent and, on average, one child. */
#define RULE(coll, n0, n1, bytes, alg, l0, l1)                                                          \
    {.kind = ECCL_COLL_##coll, .algo = ECCL_ALGO_##alg, .nmin = (n0), .nmax = (n1), .max_bytes = (bytes), \
     .lmin = (l0), .lmax = (l1)}
#define ANY UINT32_MAX
#define ALL_BYTES UINT64_MAX

/* The table, first match wins; one copy shared by every comm (a simulated
 * 96K-rank run holds 96K comms). Host-regular worlds (ppn 2 and more)
 * first: the simulated sweeps above; then every world: loopback. */
static const eccl_dispatch_rule builtin[] = {
    RULE(ALLREDUCE, 4, 96, 2048, RECURSIVE, 2, ANY),
    RULE(ALLREDUCE, 4, 16, ALL_BYTES, HIER, 2, 2), /* two or three a host: while hosts H = N / L <= 8 */
    RULE(ALLREDUCE, 4, 24, ALL_BYTES, HIER, 3, 3),
    RULE(ALLREDUCE, 4, 96, ALL_BYTES, HIER, 4, ANY),
    RULE(ALLREDUCE, 4, 96, ALL_BYTES, RECURSIVE, 2, 3),
    RULE(BROADCAST, 4, ANY, 4194304, BINOMIAL, 2, ANY),
    RULE(REDUCE, 4, 16, 131072, BINOMIAL, 2, ANY),
    RULE(REDUCE, 4, 16, ALL_BYTES, CHAIN, 2, ANY),
    RULE(REDUCE, 17, ANY, ALL_BYTES, BINOMIAL, 2, ANY),
    /* Host-regular beyond the sweeps' 96 ranks: the alpha-beta model,
     * counting links (see above). */
    RULE(ALLREDUCE, 97, ANY, 65536, TREE, 2, ANY),
    RULE(ALLREDUCE, 97, ANY, ALL_BYTES, RECURSIVE, 2, ANY),

    /* Every rank on one host, through shared memory (above). */
    RULE(BROADCAST, 3, ANY, 4194304, BINOMIAL, ECCL_DISPATCH_ONE_HOST, ECCL_DISPATCH_ONE_HOST),

    RULE(ALLREDUCE, 3, 4, 65536, RECURSIVE, 0, ANY),
    RULE(ALLREDUCE, 3, ANY, 65536, TREE, 0, ANY),
    RULE(BROADCAST, 2, 2, 131072, CHAIN, 0, ANY),
    RULE(BROADCAST, 2, 2, 524288, BINOMIAL, 0, ANY),
    RULE(BROADCAST, 3, ANY, 131072, CHAIN, 0, ANY),
    RULE(BROADCAST, 3, ANY, 4194304, BINOMIAL, 0, ANY),
    RULE(REDUCE, 3, ANY, 2097152, BINOMIAL, 0, ANY),
    RULE(ALLGATHER, 3, ANY, 262144, BRUCK, 0, ANY),
    RULE(ALLGATHER, 2, 8, 8388608, RECURSIVE, 0, ANY),
    RULE(REDUCE_SCATTER, 3, ANY, 262144, RECURSIVE, 0, ANY),
};

static const char *const algo_names[ECCL_ALGO_COUNT] = {"ring", "tree", "chain", "recursive",
                                                         "binomial", "pairwise", "direct", "bruck", "hier"};
static const char *const coll_names[ECCL_COLL_KIND_COUNT] = {"allreduce", "allgather", "reduce_scatter",
                                                             "broadcast", "reduce", "alltoall", "send", "recv"};

const char *eccl_dispatch_algo_name(eccl_algorithm a)
{
    return (unsigned)a < ECCL_ALGO_COUNT ? algo_names[a] : NULL;
}

const char *eccl_algorithm_name(uint32_t algorithm)
{
    return algorithm < ECCL_ALGO_COUNT ? algo_names[algorithm] : "?";
}

const char *eccl_dispatch_coll_name(eccl_coll_kind k)
{
    return (unsigned)k < ECCL_COLL_KIND_COUNT ? coll_names[k] : NULL;
}

static int name_index(const char *const *names, int n, const char *s, size_t len)
{
    for (int i = 0; i < n; i++)
        if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0) return i;
    return -1;
}

int eccl_dispatch_algo_parse(const char *s, size_t len)
{
    return name_index(algo_names, ECCL_ALGO_COUNT, s, len);
}

int eccl_dispatch_coll_parse(const char *s, size_t len)
{
    return name_index(coll_names, ECCL_COLL_KIND_COUNT, s, len);
}

/* The next whitespace-separated word of [*p, end): its start and length. */
static size_t word(const char **p, const char *end, const char **w)
{
    while (*p < end && (**p == ' ' || **p == '\t')) (*p)++;
    *w = *p;
    while (*p < end && **p != ' ' && **p != '\t') (*p)++;
    return (size_t)(*p - *w);
}

/* A decimal number filling the word exactly, at most `max`. */
static int number(const char *w, size_t len, uint64_t max, uint64_t *out)
{
    uint64_t n = 0;
    if (!len) return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned d = (unsigned)(w[i] - '0');
        if (d > 9 || n > (max - d) / 10) return 0;
        n = n * 10 + d;
    }
    *out = n;
    return 1;
}

/* "A-B" or "A": a range of 32-bit numbers; 0 if malformed. */
static int range(const char *w, size_t len, uint64_t *lo, uint64_t *hi)
{
    const char *dash = memchr(w, '-', len);
    if (!dash) {
        if (!number(w, len, UINT32_MAX, lo)) return 0;
        *hi = *lo;
        return 1;
    }
    return number(w, (size_t)(dash - w), UINT32_MAX, lo) &&
           number(dash + 1, len - (size_t)(dash + 1 - w), UINT32_MAX, hi) && *lo <= *hi;
}

/* The optional topology word "ppn=A-B" (or "ppn=A"): ranks per host;
 * "ppn=all": every rank on one host. */
static int topology(const char *w, size_t len, uint64_t *lo, uint64_t *hi)
{
    if (len < 5 || memcmp(w, "ppn=", 4) != 0) return 0;
    if (len == 7 && memcmp(w + 4, "all", 3) == 0) {
        *lo = *hi = ECCL_DISPATCH_ONE_HOST;
        return 1;
    }
    return range(w + 4, len - 4, lo, hi) && *lo < ECCL_DISPATCH_ONE_HOST;
}

/* Whether rule r covers a world of this topology: a one-host world is
 * matched by "ppn=all" and by the rules for any world (lmin 0). */
static int topology_matches(const eccl_dispatch_rule *r, uint32_t local_size)
{
    if (local_size == ECCL_DISPATCH_ONE_HOST) return r->lmin == 0 || r->lmin == ECCL_DISPATCH_ONE_HOST;
    return local_size >= r->lmin && local_size <= r->lmax && r->lmin != ECCL_DISPATCH_ONE_HOST;
}

/* One rule line (comment and blanks stripped); 0 if malformed. */
static int parse_rule(const char *p, const char *end, eccl_dispatch_rule *r)
{
    const char *w;
    size_t len = word(&p, end, &w);
    int kind = eccl_dispatch_coll_parse(w, len);
    if (kind < 0) return 0;
    len = word(&p, end, &w);
    uint64_t nmin, nmax, bytes;
    if (!memchr(w, '-', len) || !range(w, len, &nmin, &nmax)) return 0;
    len = word(&p, end, &w);
    if (!number(w, len, UINT64_MAX, &bytes)) return 0;
    len = word(&p, end, &w);
    int algo = eccl_dispatch_algo_parse(w, len);
    if (algo < 0) return 0;
    uint64_t lmin = 0, lmax = UINT32_MAX;
    if ((len = word(&p, end, &w)) != 0 && !topology(w, len, &lmin, &lmax)) return 0;
    if (word(&p, end, &w) != 0) return 0;
    *r = (eccl_dispatch_rule){(uint8_t)kind, (uint8_t)algo, (uint32_t)nmin, (uint32_t)nmax, bytes,
                              (uint32_t)lmin, (uint32_t)lmax};
    return 1;
}

/* Room for one more rule (the table grows as it fills: most comms hold
 * the one built-in rule, and a simulated 96K-rank run holds 96K comms). */
static int rules_room(eccl_dispatch *d)
{
    if (d->n_rules < d->cap_rules) return 1;
    uint32_t cap = d->cap_rules ? 2 * d->cap_rules : 2;
    eccl_dispatch_rule *r = realloc(d->rules, cap * sizeof *r);
    if (!r) return 0;
    d->rules = r;
    d->cap_rules = cap;
    return 1;
}

uint32_t eccl_dispatch_add_rules(eccl_dispatch *d, const eccl_env *env, const char *text)
{
    uint32_t skipped = 0, line = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n'), *end = nl ? nl : p + strlen(p), *hash = memchr(p, '#', (size_t)(end - p));
        const char *stop = hash ? hash : end, *w;
        line++;
        const char *q = p;
        if (word(&q, stop, &w) != 0) {
            eccl_dispatch_rule r;
            if (!parse_rule(p, stop, &r)) {
                ECCL_WARN(env, "ECCL_TUNE line %u \"%.*s\" is not \"<collective> <nmin>-<nmax> <max bytes> "
                               "<algorithm> [ppn=<min>-<max>]\": skipped", line, (int)(end - p), p);
                skipped++;
            } else if (d->n_rules == ECCL_DISPATCH_MAX_RULES || !rules_room(d)) {
                ECCL_WARN(env, "ECCL_TUNE line %u: more than %u rules, or no memory; skipped", line,
                          ECCL_DISPATCH_MAX_RULES);
                skipped++;
            } else {
                d->rules[d->n_rules++] = r;
            }
        }
        p = nl ? nl + 1 : end;
    }
    return skipped;
}

/* ECCL_ALGO: "coll=algo,coll=algo" or "all=algo". */
static void parse_forced(eccl_dispatch *d, const eccl_env *env, const char *s)
{
    while (*s) {
        const char *comma = strchr(s, ','), *end = comma ? comma : s + strlen(s);
        const char *eq = memchr(s, '=', (size_t)(end - s));
        int algo = eq ? eccl_dispatch_algo_parse(eq + 1, (size_t)(end - eq - 1)) : -1;
        int all = eq && (size_t)(eq - s) == 3 && memcmp(s, "all", 3) == 0;
        int kind = eq && !all ? eccl_dispatch_coll_parse(s, (size_t)(eq - s)) : -1;
        if (algo < 0 || (!all && kind < 0)) {
            ECCL_WARN(env, "ECCL_ALGO entry \"%.*s\" is not <collective|all>=<algorithm>: ignored",
                      (int)(end - s), s);
        } else {
            for (int k = 0; k < ECCL_COLL_KIND_COUNT; k++)
                if (all || k == kind) d->forced[k] = (uint8_t)algo;
        }
        s = comma ? comma + 1 : end;
    }
}

eccl_result eccl_dispatch_init(eccl_dispatch *d, const eccl_env *env)
{
    memset(d, 0, sizeof *d);
    memset(d->forced, ECCL_ALGO_NONE, sizeof d->forced);
    char *text = malloc(ECCL_DISPATCH_TEXT_MAX);
    if (!text) return ECCL_ERR_NO_MEMORY;
    if (eccl_config_get(env, "ECCL_ALGO", text, ECCL_DISPATCH_TEXT_MAX)) parse_forced(d, env, text);
    if (eccl_config_get(env, "ECCL_TUNE", text, ECCL_DISPATCH_TEXT_MAX)) {
        eccl_dispatch_add_rules(d, env, text);
    } else if (eccl_config_get(env, "ECCL_TUNE_FILE", text, ECCL_DISPATCH_TEXT_MAX) && text[0]) {
        ECCL_WARN(env, "ECCL_TUNE_FILE=%s gave no rules (unreadable, or over %u bytes): the built-in table applies",
                  text, ECCL_DISPATCH_TEXT_MAX);
    }
    free(text);
    return ECCL_OK;
}

void eccl_dispatch_free(eccl_dispatch *d)
{
    free(d->rules);
    d->rules = NULL;
    d->n_rules = d->cap_rules = 0;
}

eccl_algorithm eccl_dispatch_pick(const eccl_dispatch *d, eccl_coll_kind kind, uint32_t nranks,
                                  uint32_t local_size, uint64_t bytes, uint32_t candidates)
{
    uint8_t f = d->forced[kind];
    if (f != ECCL_ALGO_NONE && (candidates & ECCL_DISPATCH_BIT(f))) return (eccl_algorithm)f;
    for (uint32_t i = 0; i < d->n_rules + sizeof builtin / sizeof builtin[0]; i++) {
        const eccl_dispatch_rule *r = i < d->n_rules ? &d->rules[i] : &builtin[i - d->n_rules];
        if (r->kind == kind && nranks >= r->nmin && nranks <= r->nmax && bytes <= r->max_bytes &&
            topology_matches(r, local_size) && (candidates & ECCL_DISPATCH_BIT(r->algo)))
            return (eccl_algorithm)r->algo;
    }
    for (int a = 0; a < ECCL_ALGO_COUNT; a++)
        if (candidates & ECCL_DISPATCH_BIT(a)) return (eccl_algorithm)a;
    return ECCL_ALGO_RING;
}
