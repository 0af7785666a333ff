/* The dispatcher: which algorithm runs a call, from (collective, bytes, N,
 * ranks per host).
 *
 * A call's setup (core/comm/ops.c) knows which algorithms CAN run it (a
 * quantised call only on the ring, a tree only from three ranks, ...) and
 * asks the dispatcher which one SHOULD, as a mask of candidates. The answer
 * comes from, in order:
 *   1. ECCL_ALGO, a setting that forces an algorithm per collective
 *      ("allreduce=recursive,broadcast=binomial"; "all=ring"): for tests,
 *      sweeps and users who know better. A forced algorithm that cannot run
 *      the call is passed over, never half-run.
 *   2. ECCL_TUNE, a table of rules (eccl-tune writes one from measured
 *      sweeps; the real backend reads it from the file ECCL_TUNE_FILE
 *      names when ECCL_TUNE itself is not set), one per line, the first
 *      that matches wins:
 *          <collective> <nmin>-<nmax> <max bytes> <algorithm> [ppn=<min>-<max>]
 *      e.g. "allreduce 3-64 65536 tree"; '#' starts a comment. The
 *      topology word, optional, limits the rule to worlds whose ranks per
 *      host (the epoch's local_size: L when each of two hosts or more
 *      holds L >= 2 ranks, contiguous; 0 for any other world, one host
 *      or one rank per host included) lie in the range; "ppn=4" is
 *      "ppn=4-4". "ppn=all" limits it to worlds whose ranks all share one
 *      host and reach each other through shared memory (net_shm); a rule
 *      without the word, or whose range starts at 0, matches those too. eccl-tune writes it for sweeps of emulated or simulated
 *      hosts (--hosts, --sim), whose winners need not hold elsewhere.
 *   3. The built-in table (dispatch.c): for host-regular worlds from
 *      sweeps of simulated clusters (scenarios/tune/), for the others
 *      measured on loopback (tools/peers/RESULTS.md).
 *   4. The first candidate.
 * `bytes` is a call's size as eccl-bench reports it (nccl-tests): the
 * all-reduce's, broadcast's and reduce's buffer, the all-gather's output,
 * the reduce-scatter's and all-to-all's input.
 *
 * A rule's text is parsed once, at comm creation; a line that does not
 * parse is skipped with a warning naming it (a typo never takes effect
 * silently). */
#ifndef ECCL_CORE_COLL_DISPATCH_H
#define ECCL_CORE_COLL_DISPATCH_H

#include <stdint.h>

#include "coll/call.h"
#include "env.h"

#define ECCL_DISPATCH_MAX_RULES 128u
#define ECCL_DISPATCH_TEXT_MAX (16u << 10) /* the longest ECCL_TUNE setting */
#define ECCL_ALGO_NONE 0xffu               /* not forced */

typedef struct eccl_dispatch_rule {
    uint8_t kind;  /* eccl_coll_kind */
    uint8_t algo;  /* eccl_algorithm */
    uint32_t nmin, nmax;
    uint64_t max_bytes;
    uint32_t lmin, lmax; /* ranks per host (eccl_coll_call.local_size); both ECCL_DISPATCH_ONE_HOST: "ppn=all" */
} eccl_dispatch_rule;

typedef struct eccl_dispatch {
    uint8_t forced[ECCL_COLL_KIND_COUNT]; /* ECCL_ALGO_NONE: pick */
    uint32_t n_rules, cap_rules;          /* tuned rules (the built-in ones come after) */
    eccl_dispatch_rule *rules;
} eccl_dispatch;

/* Reads ECCL_ALGO and ECCL_TUNE from env's settings. ECCL_ERR_NO_MEMORY only. */
eccl_result eccl_dispatch_init(eccl_dispatch *d, const eccl_env *env);
void eccl_dispatch_free(eccl_dispatch *d);

/* Appends the rules of `text` (the format above); returns how many lines
 * were skipped as malformed (each warned about through env). */
uint32_t eccl_dispatch_add_rules(eccl_dispatch *d, const eccl_env *env, const char *text);

/* The topology a pick is asked for: the epoch's local_size, or this for a
 * world of two ranks or more all on one host, through shared memory
 * (comm_dispatch_topology in core/comm/ops.c). */
#define ECCL_DISPATCH_ONE_HOST UINT32_MAX

/* The algorithm for a call among `candidates` (a mask of
 * ECCL_DISPATCH_BIT(algo), never 0); `local_size` as above. */
#define ECCL_DISPATCH_BIT(algo) (1u << (algo))
eccl_algorithm eccl_dispatch_pick(const eccl_dispatch *d, eccl_coll_kind kind, uint32_t nranks,
                                  uint32_t local_size, uint64_t bytes, uint32_t candidates);

/* Names, as ECCL_ALGO and ECCL_TUNE spell them: NULL / -1 if unknown. */
const char *eccl_dispatch_algo_name(eccl_algorithm a);
const char *eccl_dispatch_coll_name(eccl_coll_kind k);
int eccl_dispatch_algo_parse(const char *s, size_t len);
int eccl_dispatch_coll_parse(const char *s, size_t len);

#endif /* ECCL_CORE_COLL_DISPATCH_H */
