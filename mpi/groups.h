/* MPI groups of libeccl_mpi (groups.c): ordered sets of processes, each
 * named by its rank in MPI_COMM_WORLD at MPI_Init. */
#ifndef ECCL_MPI_GROUPS_H
#define ECCL_MPI_GROUPS_H

#include "mpi.h"

/* A new group of the n processes procs (MPI_GROUP_EMPTY for none). */
MPI_Group mpi_group_new(const char *call, const int *procs, int n);

/* A group's processes and their number, or NULL for an invalid handle. */
const int *mpi_group_procs(MPI_Group group, int *n);

#endif /* ECCL_MPI_GROUPS_H */
