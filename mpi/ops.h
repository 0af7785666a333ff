/* Local reductions of libeccl_mpi: MPI's predefined operations applied on
 * this rank, for what eccl has no kernel for (the logical and bitwise
 * operations, MPI_MAXLOC and MPI_MINLOC on the pair types, long double,
 * C _Bool and the complex types), for the prefix reductions eccl does not
 * have (MPI_Scan, MPI_Exscan) and for MPI_Reduce_local. Semantics from the
 * MPI standard (4.1, section 6.9.2): which operation applies to which type
 * class, MPI_MAXLOC/MINLOC's tie rule (the lower index). */
#ifndef ECCL_MPI_OPS_H
#define ECCL_MPI_OPS_H

#include <stddef.h>

/* The C layout behind a predefined MPI datatype. */
enum mpi_ctype {
    CT_BYTE, /* raw bits: the bitwise operations only */
    CT_SCHAR, CT_UCHAR, CT_SHORT, CT_USHORT, CT_INT, CT_UINT, CT_LONG, CT_ULONG, CT_LLONG,
    CT_ULLONG, CT_I8, CT_I16, CT_I32, CT_I64, CT_U8, CT_U16, CT_U32, CT_U64, /* C integer */
    CT_FLOAT, CT_DOUBLE, CT_LDOUBLE,                                        /* floating point */
    CT_BOOL,                                                                /* logical */
    CT_CFLOAT, CT_CDOUBLE, CT_CLDOUBLE,                                     /* complex */
    CT_FLOAT_INT, CT_DOUBLE_INT, CT_LONG_INT, CT_2INT, CT_SHORT_INT, CT_LDOUBLE_INT, /* pairs */
    CT_COUNT
};

/* MPI's predefined operations, in the order of their handles. */
enum mpi_opcode {
    OPC_SUM, OPC_PROD, OPC_MIN, OPC_MAX, OPC_LAND, OPC_BAND, OPC_LOR, OPC_BOR, OPC_LXOR,
    OPC_BXOR, OPC_MAXLOC, OPC_MINLOC, OPC_COUNT
};

/* inout[i] = in[i] op inout[i] for i < n (MPI's order for user functions
 * too: invec op inoutvec). */
typedef void (*mpi_local_fn)(const void *in, void *inout, size_t n);

/* The operation on the type, or NULL where MPI defines none (MPI_BAND on
 * a float, MPI_SUM on a pair, anything but the bitwise ones on MPI_BYTE). */
mpi_local_fn mpi_local_op(enum mpi_opcode op, enum mpi_ctype type);

#endif /* ECCL_MPI_OPS_H */
