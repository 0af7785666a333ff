/* eccl_allreduce_multiple_with_retry: a batch of all-reduces over the public
 * API alone (no comm internals), so it holds no lock of its own and makes
 * no system call.
 *
 * Why it is safe to retry by re-issuing: a peer loss aborts every op of the
 * broken ring on every survivor alike (the master's view decision; an op a
 * survivor had not called yet fails at its next call, see core/comm), each
 * restoring its own recvbuf, and the library re-forms the ring on the
 * survivors by itself -- the caller never calls update_topology for a loss.
 * So every survivor sees PEER_LOST for the same calls of the same tags and
 * re-issues them, and the k-th call of a tag still meets the k-th call of
 * that tag on every other peer. In place, the restored buffer is again
 * the caller's contribution, so a retry needs nothing from us.
 *
 * Window: ops are issued in batch order, at most max_in_flight at once; we
 * wait for the oldest one (the progress engine serves all of them
 * meanwhile, so order of waiting costs no throughput to speak of) and then
 * fill the window again. Every peer issues the same sequence, so an op is
 * eventually issued everywhere: no deadlock, whatever the timing.
 */
#include <stdlib.h>
#include <string.h>

#include "eccl.h"

typedef struct slot {
    size_t idx;          /* descs[idx] */
    eccl_request *req;
} slot;

static int tag_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Tags must be distinct: two in flight at once would be refused (BUSY), and
 * re-issuing one out of order would pair the wrong calls across peers. */
static eccl_result tags_distinct(const eccl_allreduce_desc *descs, size_t n)
{
    if (n < 2) return ECCL_OK;
    uint64_t *t = malloc(n * sizeof *t);
    if (!t) return ECCL_ERR_NO_MEMORY;
    for (size_t i = 0; i < n; i++) t[i] = descs[i].tag;
    qsort(t, n, sizeof *t, tag_cmp);
    eccl_result rc = ECCL_OK;
    for (size_t i = 1; i < n && rc == ECCL_OK; i++)
        if (t[i] == t[i - 1]) rc = ECCL_ERR_INVALID_ARG;
    free(t);
    return rc;
}

static eccl_result issue(eccl_comm *comm, const eccl_allreduce_desc *d, eccl_request **req)
{
    return eccl_allreduce_ex_async(comm, d->sendbuf, d->recvbuf, d->count, d->dtype, d->op, d->tag,
                                   d->opts, req);
}

eccl_result eccl_allreduce_multiple_with_retry(eccl_comm *comm, const eccl_allreduce_desc *descs,
                                               size_t n, uint32_t max_in_flight,
                                               eccl_reduce_info *infos)
{
    if (!comm || (n && !descs) || max_in_flight == 0) return ECCL_ERR_INVALID_ARG;
    if (infos) memset(infos, 0, n * sizeof *infos);
    if (n == 0) return ECCL_OK;
    eccl_result rc = tags_distinct(descs, n);
    if (rc != ECCL_OK) return rc;
    size_t window = max_in_flight < n ? max_in_flight : n;
    slot *ring = calloc(window, sizeof *ring); /* FIFO of ops in flight */
    if (!ring) return ECCL_ERR_NO_MEMORY;
    size_t head = 0, used = 0, next = 0;
    eccl_result first_err = ECCL_OK; /* stops issuing once set */
    for (;;) {
        /* Fill the window in batch order. */
        while (first_err == ECCL_OK && used < window && next < n) {
            slot *s = &ring[(head + used) % window];
            s->idx = next;
            eccl_result irc = issue(comm, &descs[next], &s->req);
            if (irc != ECCL_OK) {
                first_err = irc; /* a bad desc or a dead communicator */
                break;
            }
            used++;
            next++;
        }
        if (used == 0) break;
        slot *s = &ring[head];
        eccl_reduce_info info;
        memset(&info, 0, sizeof info);
        eccl_result wrc = eccl_wait(s->req, &info);
        s->req = NULL;
        if (wrc == ECCL_ERR_PEER_LOST && first_err == ECCL_OK) {
            /* Restored by the library; the ring is being re-formed. The
             * retry goes to the back of the window: its peers re-issue it
             * in the same order, since they saw the same failures. */
            size_t idx = s->idx;
            head = (head + 1) % window;
            used--;
            slot *t = &ring[(head + used) % window];
            t->idx = idx;
            eccl_result irc = issue(comm, &descs[idx], &t->req);
            if (irc != ECCL_OK) {
                first_err = irc;
                continue;
            }
            used++;
            continue;
        }
        if (wrc == ECCL_OK) {
            if (infos) infos[s->idx] = info;
        } else if (first_err == ECCL_OK || first_err == ECCL_ERR_PEER_LOST) {
            /* TOO_FEW_PEERS ends the batch; so does anything else. */
            first_err = wrc;
        }
        head = (head + 1) % window;
        used--;
    }
    free(ring);
    return first_err;
}
