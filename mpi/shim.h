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

/* This process's rank in MPI_COMM_WORLD at MPI_Init: its name in groups. */
int mpi_my_proc(void);

#endif /* ECCL_MPI_SHIM_H */
