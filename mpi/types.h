/* MPI datatypes of libeccl_mpi: the predefined ones, and the derived ones
 * programs build from them (MPI 4.1, chapter 5: contiguous, vector,
 * hvector, indexed, hindexed, indexed_block, hindexed_block, struct,
 * resized, dup).
 *
 * A type is seen two ways. In the program's buffers an element of it is
 * `extent` bytes from the next, its data at the byte blocks of `blocks`
 * (offsets from the element's address, in type-map order, adjacent ones
 * merged). On the wire, and in every buffer the shim hands eccl, an
 * element is `packed` bytes: its blocks one after the other, which is the
 * layout of `nbase` elements of the predefined type `base` when all its
 * leaves are of one predefined type. A predefined type is one block of its
 * whole extent (a pair type's padding included), so it packs as it is. */
#ifndef ECCL_MPI_TYPES_H
#define ECCL_MPI_TYPES_H

#include <stddef.h>

#include "eccl.h"
#include "mpi.h"
#include "ops.h"

struct mpi_block {
    MPI_Aint off;
    size_t len;
};

struct mpi_type {
    const char *name;
    size_t extent;        /* ub - lb: an element's stride in the program's buffers */
    size_t data_size;     /* MPI_Type_size */
    enum mpi_ctype ctype; /* for the local reductions (ops.h); CT_COUNT: a derived type */
    int on_eccl;          /* eccl has MPI_SUM/PROD/MIN/MAX on it, as dtype */
    eccl_dtype dtype;
    /* The layouts (above). A predefined type: one block {0, extent},
     * lb 0, packed = extent, base itself, nbase 1. */
    MPI_Aint lb, true_lb, true_ub;
    size_t packed;
    MPI_Datatype base; /* every leaf's predefined type, or MPI_DATATYPE_NULL */
    size_t nbase;
    size_t align;      /* the largest alignment of its leaves (the extent's rounding) */
    int sticky;        /* lb and extent set by MPI_Type_create_resized: no rounding */
    int derived;
    int committed;     /* derived: MPI_Type_commit called (communication needs it) */
    size_t nblocks;
    const struct mpi_block *blocks; /* derived only (a predefined type: one block, {0, extent}) */
};

/* The type of a handle: predefined, or derived and not freed; NULL for
 * anything else. */
const struct mpi_type *mpi_type_get(MPI_Datatype handle);

/* A derived type's data must outlive a call that uses it, though the
 * program may free its handle meanwhile (MPI 5.1.5): hold and drop. */
void mpi_type_hold(const struct mpi_type *t);
void mpi_type_drop(const struct mpi_type *t);

/* One block at offset 0 as long as the extent: the program's buffer
 * already is the packed layout. */
int mpi_type_dense(const struct mpi_type *t);

/* Elements first .. first + count - 1 of the program's buffer `user`
 * (element i at user + i * extent) into `packed`, one after the other. */
void mpi_type_pack(const struct mpi_type *t, const void *user, size_t first, size_t count,
                   void *packed);

/* The reverse, stopping after `bytes` packed bytes (a short message). */
void mpi_type_unpack(const struct mpi_type *t, const void *packed, size_t first, size_t count,
                     void *user, size_t bytes);

/* The same elements' data copied between two buffers of the program's
 * layout, leaving every other byte of `to` as it was. */
void mpi_type_copy_blocks(const struct mpi_type *t, const void *from, size_t count, void *to);

#endif /* ECCL_MPI_TYPES_H */
