#include "state/sync.h"

#include <stdlib.h>
#include <string.h>

static int same_key(const eccl_wire_sync_key *a, const eccl_wire_sync_key *b)
{
    return a->bytes == b->bytes && a->hash == b->hash && a->dtype == b->dtype &&
           strcmp(a->key, b->key) == 0;
}

static int same_content(const eccl_sync_voter *a, const eccl_sync_voter *b)
{
    if (a->hash_type != b->hash_type || a->n_keys != b->n_keys) return 0;
    for (uint32_t k = 0; k < a->n_keys; k++)
        if (!same_key(&a->keys[k], &b->keys[k])) return 0;
    return 1;
}

/* Whether `p` can take the elected set `e` into its buffers: the same hash
 * type and key names, each with the same size and dtype. */
static int compatible(const eccl_sync_voter *p, const eccl_sync_voter *e)
{
    if (p->hash_type != e->hash_type || p->n_keys != e->n_keys) return 0;
    for (uint32_t k = 0; k < p->n_keys; k++) {
        const eccl_wire_sync_key *a = &p->keys[k], *b = &e->keys[k];
        if (a->bytes != b->bytes || a->dtype != b->dtype || strcmp(a->key, b->key) != 0) return 0;
    }
    return 1;
}

static int votes(const eccl_sync_voter *p)
{
    return p->result == ECCL_OK && p->strategy != ECCL_SYNC_RECEIVE_ONLY;
}

/* A newcomer's vote counts only when no member that took part in the last
 * good round votes: a wave of joiners holding the initial state must not
 * outvote the group and set its training back (a 1,000-rank churn run lost
 * revisions that way). */
static int counts(const eccl_sync_voter *p, int members_vote)
{
    return votes(p) && (!members_vote || !p->newcomer);
}

void eccl_sync_election_free(eccl_sync_election *e)
{
    free(e->fetch);
    e->fetch = NULL;
    e->n_fetch = 0;
}

eccl_result eccl_sync_elect(eccl_sync_voter *v, uint32_t n, int have_last, uint64_t last,
                            eccl_sync_election *out)
{
    eccl_result rc = ECCL_OK;
    uint32_t *cls = NULL, *count = NULL;
    uint64_t *minid = NULL, *load = NULL;
    memset(out, 0, sizeof *out);
    out->elected = UINT32_MAX;
    if (n == 0) return ECCL_OK;
    cls = malloc(n * sizeof *cls);
    count = calloc(n, sizeof *count);
    minid = malloc(n * sizeof *minid);
    load = calloc(n, sizeof *load);
    if (!cls || !count || !minid || !load) {
        rc = ECCL_ERR_NO_MEMORY;
        goto fail;
    }
    /* 1. revisions */
    for (uint32_t i = 0; i < n; i++) {
        v[i].result = ECCL_OK;
        v[i].source = v[i].elected = 0;
        if (!v[i].newcomer && have_last && v[i].revision != last + 1)
            v[i].result = ECCL_ERR_INVALID_ARG;
    }
    int members_vote = 0;
    for (uint32_t i = 0; i < n; i++) members_vote |= votes(&v[i]) && !v[i].newcomer;
    /* 2., 3. classes (named by their first member) and votes. Classes are
     * few (usually one or two), so comparing with each class's first
     * member costs O(n * classes * keys). */
    for (uint32_t i = 0; i < n; i++) {
        minid[i] = UINT64_MAX;
        cls[i] = i;
        if (v[i].result != ECCL_OK) continue;
        for (uint32_t j = 0; j < i; j++) {
            if (cls[j] == j && v[j].result == ECCL_OK && same_content(&v[i], &v[j])) {
                cls[i] = j;
                break;
            }
        }
        if (counts(&v[i], members_vote)) {
            count[cls[i]]++;
            if (v[i].id < minid[cls[i]]) minid[cls[i]] = v[i].id;
        }
    }
    uint32_t best = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++) {
        if (cls[i] != i || count[i] == 0) continue;
        if (best == UINT32_MAX || count[i] > count[best] ||
            (count[i] == count[best] && minid[i] < minid[best]))
            best = i;
    }
    if (best == UINT32_MAX) {
        for (uint32_t i = 0; i < n; i++) v[i].result = ECCL_ERR_INVALID_ARG;
        goto fail;
    }
    out->elected = best;
    /* 4. the elected revision */
    int have_old = 0;
    uint64_t rev = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (v[i].result != ECCL_OK || cls[i] != best) continue;
        if (!v[i].newcomer && have_last) {
            have_old = 1;
            rev = v[i].revision;
        } else if (!have_old && votes(&v[i]) && v[i].revision > rev) {
            rev = v[i].revision;
        }
    }
    out->revision = rev;
    /* 5. who is kicked, who is left out, who fetches what */
    uint32_t n_fetch = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (v[i].result != ECCL_OK) continue;
        if (cls[i] == best) {
            v[i].elected = 1;
            v[i].source = votes(&v[i]);
        } else if (v[i].strategy == ECCL_SYNC_SEND_ONLY) {
            v[i].result = ECCL_ERR_KICKED;
        } else if (!compatible(&v[i], &v[best])) {
            v[i].result = ECCL_ERR_INVALID_ARG;
        } else {
            for (uint32_t k = 0; k < v[i].n_keys; k++)
                n_fetch += v[i].keys[k].hash != v[best].keys[k].hash;
        }
    }
    if (n_fetch) {
        out->fetch = malloc(n_fetch * sizeof *out->fetch);
        if (!out->fetch) {
            rc = ECCL_ERR_NO_MEMORY;
            goto fail;
        }
    }
    /* 6. sources: the elected voters, at most the plan's bound of them */
    uint32_t *src = cls; /* reused: class ids are no longer needed past here */
    uint32_t n_src = 0;
    for (uint32_t i = 0; i < n; i++) {
        int in_best = v[i].elected;
        if (in_best && v[i].source && n_src < ECCL_WIRE_MAX_SYNC_SRCS) src[n_src++] = i;
        else if (in_best) v[i].source = 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (v[i].result != ECCL_OK || v[i].elected) continue;
        for (uint32_t k = 0; k < v[i].n_keys; k++) {
            const eccl_wire_sync_key *e = &v[best].keys[k];
            if (v[i].keys[k].hash == e->hash) continue;
            uint32_t pick = 0;
            for (uint32_t s = 1; s < n_src; s++)
                if (load[s] < load[pick]) pick = s;
            load[pick] += e->bytes ? e->bytes : 1;
            out->fetch[out->n_fetch++] = (eccl_sync_assign){i, k, src[pick], e->hash};
        }
    }
fail:
    if (rc != ECCL_OK) eccl_sync_election_free(out);
    free(cls);
    free(count);
    free(minid);
    free(load);
    return rc;
}
