/* mpi_groups: groups (MPI 4.1, 7.3) and communicators of some ranks, or of
 * all in another order (7.4.2: MPI_Comm_split, MPI_Comm_create), with
 * every collective and messages on them, checked against the standard.
 *
 * An ordinary MPI program (mpi.h only): `eccl-run -np N mpi_groups`, or
 * alone. Every expected value is computed from what each rank is known to
 * contribute. Exits non-zero after naming each wrong value.
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, failures;

static void check(int ok, const char *what, long long index)
{
    if (!ok && failures++ < 30)
        fprintf(stderr, "mpi_groups: rank %d of %d: %s (%lld)\n", rank, size, what, index);
}

/* ---- groups (7.3) ---------------------------------------------------------------- */

static void test_groups(void)
{
    MPI_Group world, evens, odds, rev, u, x, d, r3;
    int n, r, res;

    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_size(world, &n);
    MPI_Group_rank(world, &r);
    check(n == size && r == rank, "MPI_Comm_group of the world: size and rank", r);
    int *ranks = malloc((size_t)size * sizeof *ranks), *out = malloc((size_t)size * sizeof *out);
    int ne = 0;
    for (int i = 0; i < size; i += 2)
        ranks[ne++] = i;
    MPI_Group_incl(world, ne, ranks, &evens);
    MPI_Group_excl(world, ne, ranks, &odds);
    MPI_Group_size(evens, &n);
    check(n == (size + 1) / 2, "MPI_Group_incl's size", n);
    MPI_Group_size(odds, &n);
    check(n == size / 2, "MPI_Group_excl's size", n);
    MPI_Group_rank(evens, &r);
    check(r == (rank % 2 == 0 ? rank / 2 : MPI_UNDEFINED), "MPI_Group_rank in a group", r);
    /* translate: evens' rank k is world rank 2 k; in odds it is none. */
    for (int k = 0; k < ne; k++)
        ranks[k] = k;
    MPI_Group_translate_ranks(evens, ne, ranks, world, out);
    for (int k = 0; k < ne; k++)
        check(out[k] == 2 * k, "MPI_Group_translate_ranks to the world", k);
    MPI_Group_translate_ranks(evens, ne, ranks, odds, out);
    for (int k = 0; k < ne; k++)
        check(out[k] == MPI_UNDEFINED, "MPI_Group_translate_ranks to a disjoint group", k);
    /* union of evens and odds: the world's processes, evens first. */
    MPI_Group_union(evens, odds, &u);
    MPI_Group_compare(u, world, &res);
    check(res == (size > 2 ? MPI_SIMILAR : MPI_IDENT), "union of evens and odds is the world, reordered", res);
    MPI_Group_intersection(evens, odds, &x);
    MPI_Group_size(x, &n);
    check(n == 0 && x == MPI_GROUP_EMPTY, "the intersection of evens and odds is empty", n);
    MPI_Group_difference(world, odds, &d);
    MPI_Group_compare(d, evens, &res);
    check(res == MPI_IDENT, "world minus odds is evens", res);
    /* range_incl: the world reversed (first size - 1, last 0, stride -1). */
    int range[1][3] = {{size - 1, 0, -1}};
    MPI_Group_range_incl(world, 1, range, &rev);
    MPI_Group_rank(rev, &r);
    check(r == size - 1 - rank, "MPI_Group_range_incl reversed", r);
    int every3[1][3] = {{0, size - 1, 3}};
    MPI_Group_range_excl(world, 1, every3, &r3);
    MPI_Group_size(r3, &n);
    check(n == size - (size + 2) / 3, "MPI_Group_range_excl of every third", n);
    MPI_Group_compare(rev, world, &res);
    check(res == (size > 1 ? MPI_SIMILAR : MPI_IDENT), "reversed world is similar", res);
    MPI_Group_free(&r3);
    MPI_Group_free(&d);
    MPI_Group_free(&x);
    MPI_Group_free(&u);
    MPI_Group_free(&rev);
    MPI_Group_free(&odds);
    MPI_Group_free(&evens);
    MPI_Group_free(&world);
    check(world == MPI_GROUP_NULL, "MPI_Group_free sets MPI_GROUP_NULL", 0);
    free(out);
    free(ranks);
}

/* ---- every collective on a communicator ------------------------------------------
 * comm's rank r is world rank `who[r]`; every value names its sender. */

static int val(int world_rank, int i)
{
    return world_rank * 1000 + i;
}

static void test_collectives(MPI_Comm comm, const int *who, const char *name)
{
    int me, n;

    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    check(who[me] == rank, name, me);
    enum { C = 5 };
    int *all = malloc((size_t)n * C * sizeof *all), *all2 = malloc((size_t)n * C * sizeof *all2);
    int mine[C], got[C];
    for (int i = 0; i < C; i++)
        mine[i] = val(rank, i);

    MPI_Barrier(comm);
    /* broadcast from every root */
    for (int root = 0; root < n; root++) {
        memcpy(got, mine, sizeof got);
        MPI_Bcast(got, C, MPI_INT, root, comm);
        for (int i = 0; i < C; i++)
            check(got[i] == val(who[root], i), "MPI_Bcast on a subset", root * C + i);
    }
    /* all-reduce: the sum of the members' values; reduce to the last */
    long long sum[C] = {0};
    for (int r = 0; r < n; r++)
        for (int i = 0; i < C; i++)
            sum[i] += val(who[r], i);
    MPI_Allreduce(mine, got, C, MPI_INT, MPI_SUM, comm);
    for (int i = 0; i < C; i++)
        check(got[i] == sum[i], "MPI_Allreduce on a subset", i);
    double dmine = rank + 0.25, dmax;
    MPI_Allreduce(&dmine, &dmax, 1, MPI_DOUBLE, MPI_MAX, comm);
    int top = 0;
    for (int r = 0; r < n; r++)
        top = who[r] > top ? who[r] : top;
    check(dmax == top + 0.25, "MPI_Allreduce MAX of doubles on a subset", 0);
    memset(got, 0, sizeof got);
    MPI_Reduce(mine, got, C, MPI_INT, MPI_SUM, n - 1, comm);
    if (me == n - 1)
        for (int i = 0; i < C; i++)
            check(got[i] == sum[i], "MPI_Reduce on a subset", i);
    /* an operation computed in the shim (on eccl's all-gather) */
    int band = 0x7f ^ (1 << (rank % 7)), band_all;
    MPI_Allreduce(&band, &band_all, 1, MPI_INT, MPI_BAND, comm);
    int want = 0x7f;
    for (int r = 0; r < n; r++)
        want &= 0x7f ^ (1 << (who[r] % 7));
    check(band_all == want, "MPI_BAND on a subset", 0);
    /* scan: the sum over ranks 0 .. me */
    int pre;
    MPI_Scan(&mine[0], &pre, 1, MPI_INT, MPI_SUM, comm);
    int want_pre = 0;
    for (int r = 0; r <= me; r++)
        want_pre += val(who[r], 0);
    check(pre == want_pre, "MPI_Scan on a subset", me);
    /* all-gather, in place too */
    MPI_Allgather(mine, C, MPI_INT, all, C, MPI_INT, comm);
    for (int r = 0; r < n; r++)
        for (int i = 0; i < C; i++)
            check(all[r * C + i] == val(who[r], i), "MPI_Allgather on a subset", r * C + i);
    memset(all2, 0, (size_t)n * C * sizeof *all2);
    memcpy(all2 + me * C, mine, sizeof mine);
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_INT, all2, C, MPI_INT, comm);
    check(memcmp(all, all2, (size_t)n * C * sizeof *all) == 0, "MPI_Allgather in place on a subset", 0);
    /* all-to-all: block r of rank s is val(s, r) */
    for (int r = 0; r < n; r++)
        for (int i = 0; i < C; i++)
            all[r * C + i] = val(rank, r * C + i);
    MPI_Alltoall(all, C, MPI_INT, all2, C, MPI_INT, comm);
    for (int r = 0; r < n; r++)
        for (int i = 0; i < C; i++)
            check(all2[r * C + i] == val(who[r], me * C + i), "MPI_Alltoall on a subset", r * C + i);
    MPI_Alltoall(MPI_IN_PLACE, 0, MPI_INT, all, C, MPI_INT, comm);
    check(memcmp(all, all2, (size_t)n * C * sizeof *all) == 0, "MPI_Alltoall in place on a subset", 0);
    /* reduce-scatter of blocks: block me summed over the members */
    for (int r = 0; r < n; r++)
        for (int i = 0; i < C; i++)
            all[r * C + i] = val(rank, r * C + i);
    MPI_Reduce_scatter_block(all, got, C, MPI_INT, MPI_SUM, comm);
    for (int i = 0; i < C; i++) {
        long long w = 0;
        for (int r = 0; r < n; r++)
            w += val(who[r], me * C + i);
        check(got[i] == w, "MPI_Reduce_scatter_block on a subset", i);
    }
    /* gather to and scatter from the first */
    MPI_Gather(mine, C, MPI_INT, all, C, MPI_INT, 0, comm);
    if (me == 0)
        for (int r = 0; r < n; r++)
            for (int i = 0; i < C; i++)
                check(all[r * C + i] == val(who[r], i), "MPI_Gather on a subset", r * C + i);
    MPI_Scatter(all, C, MPI_INT, got, C, MPI_INT, 0, comm);
    for (int i = 0; i < C; i++)
        check(got[i] == val(rank, i), "MPI_Scatter on a subset", i);
    /* messages: a ring shift in the communicator's ranks */
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    MPI_Sendrecv(mine, C, MPI_INT, next, 9, got, C, MPI_INT, prev, 9, comm, MPI_STATUS_IGNORE);
    for (int i = 0; i < C; i++)
        check(got[i] == val(who[prev], i), "MPI_Sendrecv on a subset", i);
    free(all2);
    free(all);
}

/* ---- communicators of some ranks --------------------------------------------------- */

static void test_split(void)
{
    MPI_Comm half, rev, third, none;
    int r, n, res;
    int *who = malloc((size_t)size * sizeof *who);

    /* by parity, keys that reverse the order within each */
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half);
    MPI_Comm_size(half, &n);
    MPI_Comm_rank(half, &r);
    int k = 0;
    for (int w = size - 1; w >= 0; w--)
        if (w % 2 == rank % 2)
            who[k++] = w;
    check(n == k, "a parity split's size", n);
    test_collectives(half, who, "a parity split, reversed: rank");
    /* the world reversed: one color, keys going down */
    MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev);
    for (int i = 0; i < size; i++)
        who[i] = size - 1 - i;
    test_collectives(rev, who, "the world reversed: rank");
    MPI_Comm_compare(rev, MPI_COMM_WORLD, &res);
    check(res == (size > 1 ? MPI_SIMILAR : MPI_CONGRUENT), "MPI_Comm_compare of the reversed world", res);
    /* a split of a split: thirds of the parity halves, and one that
     * leaves every rank but the first of each half out */
    MPI_Comm_split(half, r % 3, r, &third);
    int m = 0;
    for (int i = 0; i < n; i++) {
        int w = 0, c = 0;
        for (int x = size - 1; x >= 0; x--)
            if (x % 2 == rank % 2 && c++ == i)
                w = x;
        if (i % 3 == r % 3)
            who[m++] = w;
    }
    test_collectives(third, who, "a split of a split: rank");
    MPI_Comm_split(half, r == 0 ? 1 : MPI_UNDEFINED, 0, &none);
    check((r == 0) == (none != MPI_COMM_NULL), "MPI_UNDEFINED gives MPI_COMM_NULL", r);
    if (none != MPI_COMM_NULL) {
        MPI_Comm_size(none, &n);
        check(n == 1, "a communicator of one", n);
        MPI_Barrier(none);
        MPI_Comm_free(&none);
    }
    /* the world's collectives still run on eccl beside them */
    int one = 1, all;
    MPI_Allreduce(&one, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    check(all == size, "MPI_COMM_WORLD after the splits", all);
    MPI_Comm_free(&third);
    MPI_Comm_free(&rev);
    MPI_Comm_free(&half);
    free(who);
}

static void test_create(void)
{
    MPI_Group world, top;
    MPI_Comm comm, dup;
    int keep = size > 2 ? size - 1 : size, res;
    int *ranks = malloc((size_t)size * sizeof *ranks), *who = malloc((size_t)size * sizeof *who);

    /* the last `keep` ranks, in reverse: a group of them makes a communicator */
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    for (int i = 0; i < keep; i++)
        ranks[i] = who[i] = size - 1 - i;
    MPI_Group_incl(world, keep, ranks, &top);
    MPI_Comm_create(MPI_COMM_WORLD, top, &comm);
    int in = rank >= size - keep;
    check(in == (comm != MPI_COMM_NULL), "MPI_Comm_create: members get a communicator", rank);
    if (comm != MPI_COMM_NULL) {
        test_collectives(comm, who, "MPI_Comm_create's communicator: rank");
        MPI_Comm_dup(comm, &dup);
        MPI_Comm_compare(comm, dup, &res);
        check(res == MPI_CONGRUENT, "a duplicate of a subset is congruent", res);
        test_collectives(dup, who, "a duplicate of a subset: rank");
        MPI_Group g;
        MPI_Comm_group(dup, &g);
        MPI_Group_compare(g, top, &res);
        check(res == MPI_IDENT, "MPI_Comm_group of the new communicator is the group", res);
        MPI_Group_free(&g);
        MPI_Comm_free(&dup);
        MPI_Comm_free(&comm);
    }
    /* the world's group: a duplicate, congruent */
    MPI_Comm_create(MPI_COMM_WORLD, world, &comm);
    MPI_Comm_compare(comm, MPI_COMM_WORLD, &res);
    check(res == MPI_CONGRUENT, "MPI_Comm_create of the world's group", res);
    MPI_Comm_free(&comm);
    MPI_Group_free(&top);
    MPI_Group_free(&world);
    free(who);
    free(ranks);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    test_groups();
    test_split();
    test_create();
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi_groups: %s (%d ranks, %d wrong)\n", all == 0 ? "ok" : "FAILED", size, all);
    MPI_Finalize();
    return all != 0;
}
