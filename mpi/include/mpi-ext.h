/* mpi-ext.h of libeccl_mpi: where Open MPI's programs look for the ULFM
 * extensions (MPIX_*). They are declared in mpi.h here, as MPICH does. */
#ifndef ECCL_MPI_EXT_H
#define ECCL_MPI_EXT_H

#include <mpi.h>

#endif /* ECCL_MPI_EXT_H */
