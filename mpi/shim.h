/* What the files of libeccl_mpi share (all hidden: only MPI_* leaves the
 * library). */
#ifndef ECCL_MPI_SHIM_H
#define ECCL_MPI_SHIM_H

/* "eccl_mpi: <what> (rank R of N, <MPI error class>)" on stderr and the
 * end of the process, with the error class as its status. */
__attribute__((noreturn, format(printf, 2, 3)))
void mpi_fatal(int mpi_error, const char *fmt, ...);

/* Fatal unless MPI_Init has run and MPI_Finalize has not. */
void mpi_require_initialized(const char *call);

/* A slot for a new handle in a table of `size`-byte entries (*table, *n
 * used of *cap): the first entry is_free says is free, else a new one at
 * the end, the table doubled when full; -1 once *n reaches max. Fatal
 * (MPI_ERR_NO_MEM, naming `call` and `what`) when it cannot grow. */
#include <stddef.h>
int mpi_table_slot(const char *call, const char *what, void **table, int *n, int *cap, size_t size, int max,
                   int (*is_free)(const void *entry));

/* This process's rank in MPI_COMM_WORLD at MPI_Init: its name in groups. */
int mpi_my_proc(void);

#endif /* ECCL_MPI_SHIM_H */
