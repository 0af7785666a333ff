/* MPI groups (MPI 4.1, 7.3): ordered sets of processes, local objects.
 * A process is named by its rank in MPI_COMM_WORLD at MPI_Init, which
 * stays its name for the job (a shrunk communicator renumbers ranks, not
 * processes). MPI_Comm_group and MPI_Comm_create are the communicators'
 * (eccl_mpi.c); everything here is local. */
#pragma GCC visibility push(default)
#include "mpi.h"
#pragma GCC visibility pop

#include "groups.h"

#include <stdlib.h>
#include <string.h>

#include "shim.h"

/* Handles from GROUP_BASE on, an index into `groups`; MPI_GROUP_EMPTY is
 * a handle of its own and never freed. */
#define GROUP_BASE 0x48000100
#define GROUP_MAX 65536
struct group {
    int used;
    int n;
    int *procs;
};
static struct {
    struct group *slots;
    int n, cap;
} groups;

const int *mpi_group_procs(MPI_Group group, int *n)
{
    unsigned slot = (unsigned)group - GROUP_BASE;

    if (group == MPI_GROUP_EMPTY) {
        *n = 0;
        return (const int *)&groups; /* any non-NULL pointer: nothing is read */
    }
    if (slot >= (unsigned)groups.n || !groups.slots[slot].used)
        return NULL;
    *n = groups.slots[slot].n;
    return groups.slots[slot].procs;
}

static const int *group_arg(const char *call, MPI_Group group, int *n)
{
    mpi_require_initialized(call);
    const int *procs = mpi_group_procs(group, n);
    if (procs == NULL)
        mpi_fatal(MPI_ERR_GROUP, "%s: invalid group handle 0x%x", call, (unsigned)group);
    return procs;
}

static int group_free(const void *entry)
{
    return !((const struct group *)entry)->used;
}

MPI_Group mpi_group_new(const char *call, const int *procs, int n)
{
    if (n == 0)
        return MPI_GROUP_EMPTY;
    void *table = groups.slots;
    int slot = mpi_table_slot(call, "groups", &table, &groups.n, &groups.cap, sizeof *groups.slots,
                              GROUP_MAX, group_free);
    groups.slots = table;
    if (slot < 0)
        mpi_fatal(MPI_ERR_GROUP, "%s: more than %d groups at once", call, GROUP_MAX);
    int *copy = malloc((size_t)n * sizeof *copy);
    if (copy == NULL)
        mpi_fatal(MPI_ERR_NO_MEM, "%s: no memory for a group of %d", call, n);
    memcpy(copy, procs, (size_t)n * sizeof *copy);
    groups.slots[slot] = (struct group){1, n, copy};
    return (MPI_Group)(GROUP_BASE + slot);
}

static int *scratch(const char *call, int n)
{
    int *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    if (p == NULL)
        mpi_fatal(MPI_ERR_NO_MEM, "%s: no memory", call);
    return p;
}

static int index_of(const int *procs, int n, int proc)
{
    for (int i = 0; i < n; i++)
        if (procs[i] == proc)
            return i;
    return MPI_UNDEFINED;
}

static void out_arg(const char *call, const void *p)
{
    if (p == NULL)
        mpi_fatal(MPI_ERR_ARG, "%s: NULL argument", call);
}

int MPI_Group_size(MPI_Group group, int *size)
{
    out_arg("MPI_Group_size", size);
    group_arg("MPI_Group_size", group, size);
    return MPI_SUCCESS;
}

int MPI_Group_rank(MPI_Group group, int *rank)
{
    int n;
    const int *procs = group_arg("MPI_Group_rank", group, &n);

    out_arg("MPI_Group_rank", rank);
    *rank = index_of(procs, n, mpi_my_proc());
    return MPI_SUCCESS;
}

int MPI_Group_translate_ranks(MPI_Group group1, int n, const int ranks1[], MPI_Group group2,
                              int ranks2[])
{
    static const char call[] = "MPI_Group_translate_ranks";
    int n1, n2;
    const int *p1 = group_arg(call, group1, &n1), *p2 = group_arg(call, group2, &n2);

    if (n < 0 || (n > 0 && (ranks1 == NULL || ranks2 == NULL)))
        mpi_fatal(MPI_ERR_ARG, "%s: bad count or NULL array", call);
    for (int i = 0; i < n; i++) {
        if (ranks1[i] == MPI_PROC_NULL) {
            ranks2[i] = MPI_PROC_NULL;
            continue;
        }
        if (ranks1[i] < 0 || ranks1[i] >= n1)
            mpi_fatal(MPI_ERR_RANK, "%s: rank %d is not in a group of %d", call, ranks1[i], n1);
        ranks2[i] = index_of(p2, n2, p1[ranks1[i]]);
    }
    return MPI_SUCCESS;
}

int MPI_Group_compare(MPI_Group group1, MPI_Group group2, int *result)
{
    static const char call[] = "MPI_Group_compare";
    int n1, n2, same_order = 1, same_set = 1;
    const int *p1 = group_arg(call, group1, &n1), *p2 = group_arg(call, group2, &n2);

    out_arg(call, result);
    if (n1 != n2) {
        *result = MPI_UNEQUAL;
        return MPI_SUCCESS;
    }
    for (int i = 0; i < n1; i++) {
        same_order &= p1[i] == p2[i];
        same_set &= index_of(p2, n2, p1[i]) != MPI_UNDEFINED;
    }
    *result = same_order ? MPI_IDENT : same_set ? MPI_SIMILAR : MPI_UNEQUAL;
    return MPI_SUCCESS;
}

/* The ranks `ranks` (n of them, distinct, in the group) of group, in
 * that order (incl), or every other rank in group order (excl). */
static int select_ranks(const char *call, MPI_Group group, int n, const int ranks[], int incl,
                        MPI_Group *newgroup)
{
    int size;
    const int *procs = group_arg(call, group, &size);

    out_arg(call, newgroup);
    if (n < 0 || n > size || (n > 0 && ranks == NULL))
        mpi_fatal(MPI_ERR_ARG, "%s: bad count %d for a group of %d", call, n, size);
    int *picked = scratch(call, size), *out = scratch(call, size), k = 0;
    memset(picked, 0, (size_t)size * sizeof *picked);
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= size || picked[ranks[i]])
            mpi_fatal(MPI_ERR_RANK, "%s: rank %d is not a distinct rank of a group of %d", call,
                      ranks[i], size);
        picked[ranks[i]] = 1;
        if (incl)
            out[k++] = procs[ranks[i]];
    }
    if (!incl)
        for (int i = 0; i < size; i++)
            if (!picked[i])
                out[k++] = procs[i];
    *newgroup = mpi_group_new(call, out, k);
    free(out);
    free(picked);
    return MPI_SUCCESS;
}

int MPI_Group_incl(MPI_Group group, int n, const int ranks[], MPI_Group *newgroup)
{
    return select_ranks("MPI_Group_incl", group, n, ranks, 1, newgroup);
}

int MPI_Group_excl(MPI_Group group, int n, const int ranks[], MPI_Group *newgroup)
{
    return select_ranks("MPI_Group_excl", group, n, ranks, 0, newgroup);
}

/* The ranks of n triplets (first, last, stride), in order (7.3.2). */
static int range_ranks(const char *call, MPI_Group group, int n, int ranges[][3], int incl,
                       MPI_Group *newgroup)
{
    int size, k = 0;
    group_arg(call, group, &size);
    if (n < 0 || (n > 0 && ranges == NULL))
        mpi_fatal(MPI_ERR_ARG, "%s: bad count %d", call, n);
    int *ranks = scratch(call, size);
    for (int i = 0; i < n; i++) {
        int first = ranges[i][0], last = ranges[i][1], stride = ranges[i][2];
        if (stride == 0 || (stride > 0 && first > last && last >= 0) ||
            (stride < 0 && first < last))
            mpi_fatal(MPI_ERR_ARG, "%s: range (%d, %d, %d) is empty or has stride 0", call, first,
                      last, stride);
        for (int r = first; stride > 0 ? r <= last : r >= last; r += stride) {
            if (k == size || r < 0 || r >= size)
                mpi_fatal(MPI_ERR_RANK, "%s: range (%d, %d, %d) leaves a group of %d or repeats a rank",
                          call, first, last, stride, size);
            ranks[k++] = r;
        }
    }
    int e = select_ranks(call, group, k, ranks, incl, newgroup);
    free(ranks);
    return e;
}

int MPI_Group_range_incl(MPI_Group group, int n, int ranges[][3], MPI_Group *newgroup)
{
    return range_ranks("MPI_Group_range_incl", group, n, ranges, 1, newgroup);
}

int MPI_Group_range_excl(MPI_Group group, int n, int ranges[][3], MPI_Group *newgroup)
{
    return range_ranks("MPI_Group_range_excl", group, n, ranges, 0, newgroup);
}

/* union: group1's, then group2's not in group1; intersection: group1's
 * in group2; difference: group1's not in group2; each in group1's order
 * first (7.3.2). */
enum set_op { UNION, INTERSECTION, DIFFERENCE };

static int set_op(const char *call, MPI_Group group1, MPI_Group group2, enum set_op op,
                  MPI_Group *newgroup)
{
    int n1, n2, k = 0;
    const int *p1 = group_arg(call, group1, &n1), *p2 = group_arg(call, group2, &n2);

    out_arg(call, newgroup);
    int *out = scratch(call, n1 + n2);
    for (int i = 0; i < n1; i++) {
        int in2 = index_of(p2, n2, p1[i]) != MPI_UNDEFINED;
        if (op == UNION || (op == INTERSECTION) == in2)
            out[k++] = p1[i];
    }
    if (op == UNION)
        for (int i = 0; i < n2; i++)
            if (index_of(p1, n1, p2[i]) == MPI_UNDEFINED)
                out[k++] = p2[i];
    *newgroup = mpi_group_new(call, out, k);
    free(out);
    return MPI_SUCCESS;
}

int MPI_Group_union(MPI_Group group1, MPI_Group group2, MPI_Group *newgroup)
{
    return set_op("MPI_Group_union", group1, group2, UNION, newgroup);
}

int MPI_Group_intersection(MPI_Group group1, MPI_Group group2, MPI_Group *newgroup)
{
    return set_op("MPI_Group_intersection", group1, group2, INTERSECTION, newgroup);
}

int MPI_Group_difference(MPI_Group group1, MPI_Group group2, MPI_Group *newgroup)
{
    return set_op("MPI_Group_difference", group1, group2, DIFFERENCE, newgroup);
}

int MPI_Group_free(MPI_Group *group)
{
    static const char call[] = "MPI_Group_free";
    int n;

    out_arg(call, group);
    group_arg(call, *group, &n);
    if (*group != MPI_GROUP_EMPTY) {
        struct group *g = &groups.slots[(unsigned)*group - GROUP_BASE];
        free(g->procs);
        *g = (struct group){0, 0, NULL};
    }
    *group = MPI_GROUP_NULL;
    return MPI_SUCCESS;
}
