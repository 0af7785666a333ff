/* Compiled, never run: proves mpi/include/mpi.h stands alone, is clean C99
 * under -pedantic-errors and, compiled as C++, usable from C++. Uses each
 * kind of declaration so a typo in any of them fails the build. */
#include <mpi.h>

#include <mpi.h> /* the include guard must hold */
#include <mpi-ext.h>

typedef char mpi_check_version[MPI_VERSION >= 3 ? 1 : -1];

static void header_op(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)in;
    (void)inout;
    (void)len;
    (void)type;
}

static int header_use(int *argc, char ***argv)
{
    int rank = 0, size = 0, provided = 0, flag = 0, len = 0, counts[1] = {1}, displs[1] = {0};
    double x = 1.0, y = 0.0, t = MPI_Wtime() + MPI_Wtick();
    char name[MPI_MAX_PROCESSOR_NAME], err[MPI_MAX_ERROR_STRING];
    MPI_Comm comm = MPI_COMM_WORLD;
    MPI_Datatype types[] = {MPI_CHAR, MPI_SIGNED_CHAR, MPI_UNSIGNED_CHAR, MPI_BYTE, MPI_SHORT,
                            MPI_UNSIGNED_SHORT, MPI_INT, MPI_UNSIGNED, MPI_LONG,
                            MPI_UNSIGNED_LONG, MPI_LONG_LONG, MPI_LONG_LONG_INT,
                            MPI_UNSIGNED_LONG_LONG, MPI_FLOAT, MPI_DOUBLE, MPI_INT8_T,
                            MPI_INT16_T, MPI_INT32_T, MPI_INT64_T, MPI_UINT8_T, MPI_UINT16_T,
                            MPI_UINT32_T, MPI_UINT64_T, MPI_LONG_DOUBLE, MPI_C_BOOL,
                            MPI_C_COMPLEX, MPI_C_FLOAT_COMPLEX, MPI_C_DOUBLE_COMPLEX,
                            MPI_C_LONG_DOUBLE_COMPLEX, MPI_FLOAT_INT, MPI_DOUBLE_INT,
                            MPI_LONG_INT, MPI_2INT, MPI_SHORT_INT, MPI_LONG_DOUBLE_INT,
                            MPI_DATATYPE_NULL};
    MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX, MPI_LAND, MPI_BAND, MPI_LOR,
                    MPI_BOR, MPI_LXOR, MPI_BXOR, MPI_MAXLOC, MPI_MINLOC, MPI_OP_NULL};
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Status status;
    MPI_Aint extent = 0;
    int codes[] = {MPI_SUCCESS, MPI_ERR_BUFFER, MPI_ERR_COUNT, MPI_ERR_TYPE, MPI_ERR_TAG,
                   MPI_ERR_COMM, MPI_ERR_RANK, MPI_ERR_ROOT, MPI_ERR_OP, MPI_ERR_ARG,
                   MPI_ERR_REQUEST, MPI_ERR_TRUNCATE, MPI_ERR_UNSUPPORTED_OPERATION,
                   MPI_ERR_NO_MEM, MPI_ERR_OTHER, MPI_ERR_INTERN, MPI_ERR_UNKNOWN,
                   MPI_ERR_LASTCODE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_PROC_NULL, MPI_ROOT,
                   MPI_UNDEFINED, MPI_THREAD_SINGLE, MPI_THREAD_FUNNELED,
                   MPI_THREAD_SERIALIZED, MPI_THREAD_MULTIPLE};

    (void)t;
    (void)extent;
    (void)codes;
    MPI_Init(argc, argv);
    MPI_Init_thread(argc, argv, MPI_THREAD_SINGLE, &provided);
    MPI_Initialized(&flag);
    MPI_Finalized(&flag);
    MPI_Get_version(&rank, &size);
    MPI_Get_processor_name(name, &len);
    MPI_Error_string(MPI_ERR_OTHER, err, &len);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(MPI_COMM_SELF, &size);
    MPI_Type_size(types[0], &len);
    MPI_Get_count(&status, MPI_INT, &len);
    MPI_Barrier(comm);
    MPI_Bcast(&x, 1, MPI_DOUBLE, 0, comm);
    MPI_Reduce(&x, &y, 1, MPI_DOUBLE, ops[0], 0, comm);
    MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, comm);
    MPI_Allgather(&x, 1, MPI_DOUBLE, &y, 1, MPI_DOUBLE, comm);
    MPI_Allgatherv(&x, 1, MPI_DOUBLE, &y, counts, displs, MPI_DOUBLE, comm);
    MPI_Reduce_scatter(&x, &y, counts, MPI_DOUBLE, MPI_SUM, comm);
    MPI_Reduce_scatter_block(&x, &y, 1, MPI_DOUBLE, MPI_SUM, comm);
    MPI_Alltoall(&x, 1, MPI_DOUBLE, &y, 1, MPI_DOUBLE, comm);
    MPI_Alltoallv(&x, counts, displs, MPI_DOUBLE, &y, counts, displs, MPI_DOUBLE, comm);
    MPI_Gather(&x, 1, MPI_DOUBLE, &y, 1, MPI_DOUBLE, 0, comm);
    MPI_Gatherv(&x, 1, MPI_DOUBLE, &y, counts, displs, MPI_DOUBLE, 0, comm);
    MPI_Scatter(&x, 1, MPI_DOUBLE, &y, 1, MPI_DOUBLE, 0, comm);
    MPI_Scatterv(&x, counts, displs, MPI_DOUBLE, &y, 1, MPI_DOUBLE, 0, comm);
    MPI_Scan(&x, &y, 1, MPI_DOUBLE, MPI_SUM, comm);
    MPI_Exscan(&x, &y, 1, MPI_DOUBLE, MPI_SUM, comm);
    {
        MPI_Op user = MPI_OP_NULL;
        MPI_Aint lb = 0;
        MPI_Op_create(header_op, 1, &user);
        MPI_Op_commutative(user, &flag);
        MPI_Reduce_local(&x, &y, 1, MPI_DOUBLE, user);
        MPI_Op_free(&user);
        MPI_Type_get_extent(MPI_DOUBLE_INT, &lb, &extent);
        MPI_Error_class(MPI_ERR_OP, &flag);
    }
    MPI_Ibarrier(comm, &req);
    MPI_Ibcast(&x, 1, MPI_DOUBLE, 0, comm, &req);
    MPI_Ireduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, 0, comm, &req);
    MPI_Iallreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, comm, &req);
    MPI_Iallgather(&x, 1, MPI_DOUBLE, &y, 1, MPI_DOUBLE, comm, &req);
    MPI_Iallgatherv(&x, 1, MPI_DOUBLE, &y, counts, displs, MPI_DOUBLE, comm, &req);
    MPI_Ireduce_scatter_block(&x, &y, 1, MPI_DOUBLE, MPI_SUM, comm, &req);
    MPI_Ireduce_scatter(&x, &y, counts, MPI_DOUBLE, MPI_SUM, comm, &req);
    MPI_Ialltoall(&x, 1, MPI_DOUBLE, &y, 1, MPI_DOUBLE, comm, &req);
    MPI_Ialltoallv(&x, counts, displs, MPI_DOUBLE, &y, counts, displs, MPI_DOUBLE, comm, &req);
    MPI_Igather(&x, 1, MPI_DOUBLE, &y, 1, MPI_DOUBLE, 0, comm, &req);
    MPI_Igatherv(&x, 1, MPI_DOUBLE, &y, counts, displs, MPI_DOUBLE, 0, comm, &req);
    MPI_Iscatter(&x, 1, MPI_DOUBLE, &y, 1, MPI_DOUBLE, 0, comm, &req);
    MPI_Iscatterv(&x, counts, displs, MPI_DOUBLE, &y, 1, MPI_DOUBLE, 0, comm, &req);
    MPI_Waitany(1, &req, &len, &status);
    MPI_Comm_compare(comm, MPI_COMM_SELF, &flag);
    {
        MPI_Errhandler eh = MPI_ERRHANDLER_NULL;
        MPI_Comm survivors = MPI_COMM_NULL;
        MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
        MPI_Comm_get_errhandler(comm, &eh);
        MPI_Errhandler_free(&eh);
        MPI_Comm_set_errhandler(comm, MPI_ERRORS_ARE_FATAL);
        MPIX_Comm_failure_ack(comm);
        if (MPIX_Comm_agree(comm, &flag) == MPIX_ERR_PROC_FAILED)
            MPIX_Comm_shrink(comm, &survivors);
        if (MPIX_Comm_is_revoked(comm, &flag) == MPI_SUCCESS && !flag)
            flag = MPIX_Comm_revoke(comm) == MPIX_ERR_REVOKED;
        flag = MPI_ERR_IN_STATUS;
    }
    flag = MPI_IDENT + MPI_CONGRUENT + MPI_SIMILAR + MPI_UNEQUAL;
    MPI_Testall(1, &req, &flag, MPI_STATUSES_IGNORE);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    MPI_Waitall(1, &req, MPI_STATUSES_IGNORE);
    if (flag) {
        MPI_Send(&x, 1, MPI_DOUBLE, 0, 0, comm);
        MPI_Recv(&y, 1, MPI_DOUBLE, MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &status);
        MPI_Isend(&x, 1, MPI_DOUBLE, 0, 0, comm, &req);
        MPI_Irecv(&y, 1, MPI_DOUBLE, 0, 0, comm, &req);
        MPI_Test(&req, &flag, &status);
        MPI_Sendrecv(&x, 1, MPI_DOUBLE, 0, 0, &y, 1, MPI_DOUBLE, 0, 0, comm, &status);
        MPI_Gather(&x, 1, MPI_DOUBLE, &y, 1, MPI_DOUBLE, 0, comm);
        MPI_Scatter(&x, 1, MPI_DOUBLE, &y, 1, MPI_DOUBLE, 0, comm);
        MPI_Comm_dup(comm, &comm);
        MPI_Comm_split(comm, 0, 0, &comm);
        MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &comm);
        MPI_Comm_free(&comm);
        MPI_Abort(comm, 1);
    }
    return MPI_Finalize() + status.MPI_SOURCE + status.MPI_TAG + status.MPI_ERROR +
           (comm == MPI_COMM_NULL);
}

int main(int argc, char **argv)
{
    return header_use(&argc, &argv);
}
