/* mpi.h of libeccl_mpi: the subset of MPI that eccl can run.
 *
 * Ordinary MPI programs that stay within this subset compile against this
 * header unmodified and run on eccl under `eccl-run -np N prog` (see
 * mpi/README.md). Everything here is MPI's own C binding; nothing in it
 * names eccl.
 *
 * Handles are plain ints, as in MPICH, with a distinct range per kind so
 * that a datatype passed where an op belongs is caught instead of being
 * read as some other op. Every error is fatal (MPI_ERRORS_ARE_FATAL, MPI's
 * default): the library prints what went wrong on stderr and ends the
 * process with a non-zero status, so a call either does what MPI says or
 * the job fails. The calls declared under "fail loudly" exist so that
 * programs which mention them still compile; calling one ends the job.
 */
#ifndef ECCL_MPI_H
#define ECCL_MPI_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* MPI_Reduce_scatter_block (MPI 2.2) and MPI_IN_PLACE everywhere are the
 * newest features used; programs testing for MPI 3 get what they ask for
 * in the calls below or a compile error, never a silent fallback. */
#define MPI_VERSION 3
#define MPI_SUBVERSION 1

typedef int MPI_Comm;
typedef int MPI_Datatype;
typedef int MPI_Op;
typedef int MPI_Request;
typedef int MPI_Info;
typedef int MPI_Errhandler;
typedef int MPI_Group;
typedef ptrdiff_t MPI_Aint;

typedef struct MPI_Status {
    int MPI_SOURCE;
    int MPI_TAG;
    int MPI_ERROR;
    /* Not MPI's: bytes received, read by MPI_Get_count. */
    long long eccl_mpi_bytes;
} MPI_Status;

/* ---- constants ------------------------------------------------------------ */

#define MPI_SUCCESS 0
#define MPI_ERR_BUFFER 1
#define MPI_ERR_COUNT 2
#define MPI_ERR_TYPE 3
#define MPI_ERR_TAG 4
#define MPI_ERR_COMM 5
#define MPI_ERR_RANK 6
#define MPI_ERR_ROOT 7
#define MPI_ERR_OP 8
#define MPI_ERR_ARG 9
#define MPI_ERR_REQUEST 10
#define MPI_ERR_TRUNCATE 11
#define MPI_ERR_UNSUPPORTED_OPERATION 12
#define MPI_ERR_NO_MEM 13
#define MPI_ERR_OTHER 14
#define MPI_ERR_INTERN 15
#define MPI_ERR_UNKNOWN 16
#define MPI_ERR_IN_STATUS 17
/* ULFM (mpi-ext.h): a rank of the communicator was lost. */
#define MPIX_ERR_PROC_FAILED 18
#define MPI_ERR_GROUP 19
/* ULFM: the communicator was revoked (MPIX_Comm_revoke). */
#define MPIX_ERR_REVOKED 20
#define MPI_ERR_LASTCODE 20

#define MPI_ANY_SOURCE (-1)
#define MPI_ANY_TAG (-1)
#define MPI_PROC_NULL (-2)
#define MPI_ROOT (-3)
#define MPI_UNDEFINED (-32766)

#define MPI_MAX_PROCESSOR_NAME 256
#define MPI_MAX_ERROR_STRING 256

#define MPI_THREAD_SINGLE 0
#define MPI_THREAD_FUNNELED 1
#define MPI_THREAD_SERIALIZED 2
#define MPI_THREAD_MULTIPLE 3

#define MPI_IN_PLACE ((void *)-1)
#define MPI_STATUS_IGNORE ((MPI_Status *)0)
#define MPI_STATUSES_IGNORE ((MPI_Status *)0)

#define MPI_COMM_NULL ((MPI_Comm)0)
#define MPI_COMM_WORLD ((MPI_Comm)0x44000001)
#define MPI_COMM_SELF ((MPI_Comm)0x44000002)

#define MPI_GROUP_NULL ((MPI_Group)0)
#define MPI_GROUP_EMPTY ((MPI_Group)0x48000001)

#define MPI_REQUEST_NULL ((MPI_Request)0)
#define MPI_INFO_NULL ((MPI_Info)0)
#define MPI_ERRHANDLER_NULL ((MPI_Errhandler)0)
#define MPI_ERRORS_ARE_FATAL ((MPI_Errhandler)0x54000001)
#define MPI_ERRORS_RETURN ((MPI_Errhandler)0x54000002)

/* MPI_Comm_compare's results; MPI_Comm_split_type's type. */
#define MPI_IDENT 0
#define MPI_CONGRUENT 1
#define MPI_SIMILAR 2
#define MPI_UNEQUAL 3
#define MPI_COMM_TYPE_SHARED 1

#define MPI_DATATYPE_NULL ((MPI_Datatype)0)
#define MPI_CHAR ((MPI_Datatype)0x4c000001)
#define MPI_SIGNED_CHAR ((MPI_Datatype)0x4c000002)
#define MPI_UNSIGNED_CHAR ((MPI_Datatype)0x4c000003)
#define MPI_BYTE ((MPI_Datatype)0x4c000004)
#define MPI_SHORT ((MPI_Datatype)0x4c000005)
#define MPI_UNSIGNED_SHORT ((MPI_Datatype)0x4c000006)
#define MPI_INT ((MPI_Datatype)0x4c000007)
#define MPI_UNSIGNED ((MPI_Datatype)0x4c000008)
#define MPI_LONG ((MPI_Datatype)0x4c000009)
#define MPI_UNSIGNED_LONG ((MPI_Datatype)0x4c00000a)
#define MPI_LONG_LONG ((MPI_Datatype)0x4c00000b)
#define MPI_LONG_LONG_INT MPI_LONG_LONG
#define MPI_UNSIGNED_LONG_LONG ((MPI_Datatype)0x4c00000c)
#define MPI_FLOAT ((MPI_Datatype)0x4c00000d)
#define MPI_DOUBLE ((MPI_Datatype)0x4c00000e)
#define MPI_INT8_T ((MPI_Datatype)0x4c00000f)
#define MPI_INT16_T ((MPI_Datatype)0x4c000010)
#define MPI_INT32_T ((MPI_Datatype)0x4c000011)
#define MPI_INT64_T ((MPI_Datatype)0x4c000012)
#define MPI_UINT8_T ((MPI_Datatype)0x4c000013)
#define MPI_UINT16_T ((MPI_Datatype)0x4c000014)
#define MPI_UINT32_T ((MPI_Datatype)0x4c000015)
#define MPI_UINT64_T ((MPI_Datatype)0x4c000016)
#define MPI_LONG_DOUBLE ((MPI_Datatype)0x4c000017)
#define MPI_C_BOOL ((MPI_Datatype)0x4c000018)
#define MPI_C_FLOAT_COMPLEX ((MPI_Datatype)0x4c000019)
#define MPI_C_COMPLEX MPI_C_FLOAT_COMPLEX
#define MPI_C_DOUBLE_COMPLEX ((MPI_Datatype)0x4c00001a)
#define MPI_C_LONG_DOUBLE_COMPLEX ((MPI_Datatype)0x4c00001b)
/* The pairs of MPI_MAXLOC and MPI_MINLOC: struct { T value; int index; },
 * padding included (MPI_Type_get_extent says how much). */
#define MPI_FLOAT_INT ((MPI_Datatype)0x4c00001c)
#define MPI_DOUBLE_INT ((MPI_Datatype)0x4c00001d)
#define MPI_LONG_INT ((MPI_Datatype)0x4c00001e)
#define MPI_2INT ((MPI_Datatype)0x4c00001f)
#define MPI_SHORT_INT ((MPI_Datatype)0x4c000020)
#define MPI_LONG_DOUBLE_INT ((MPI_Datatype)0x4c000021)

/* Every predefined operation on the types MPI defines it for (MPI 4.1,
 * 6.9.2): MPI_SUM, PROD, MIN and MAX on eccl's kernels where eccl has the
 * type; the rest, the prefix reductions and MPI_Op_create's functions are
 * computed on each rank from every rank's input (an all-gather, or a gather
 * to the root), in rank order: the same bits on every rank. */
#define MPI_OP_NULL ((MPI_Op)0)
#define MPI_SUM ((MPI_Op)0x58000001)
#define MPI_PROD ((MPI_Op)0x58000002)
#define MPI_MIN ((MPI_Op)0x58000003)
#define MPI_MAX ((MPI_Op)0x58000004)
#define MPI_LAND ((MPI_Op)0x58000005)
#define MPI_BAND ((MPI_Op)0x58000006)
#define MPI_LOR ((MPI_Op)0x58000007)
#define MPI_BOR ((MPI_Op)0x58000008)
#define MPI_LXOR ((MPI_Op)0x58000009)
#define MPI_BXOR ((MPI_Op)0x5800000a)
#define MPI_MAXLOC ((MPI_Op)0x5800000b)
#define MPI_MINLOC ((MPI_Op)0x5800000c)

/* ---- environment ---------------------------------------------------------- */

int MPI_Init(int *argc, char ***argv);
int MPI_Init_thread(int *argc, char ***argv, int required, int *provided);
int MPI_Initialized(int *flag);
int MPI_Finalized(int *flag);
int MPI_Finalize(void);
int MPI_Abort(MPI_Comm comm, int errorcode);
int MPI_Get_version(int *version, int *subversion);
int MPI_Get_processor_name(char *name, int *resultlen);
int MPI_Error_string(int errorcode, char *string, int *resultlen);
double MPI_Wtime(void);
double MPI_Wtick(void);

int MPI_Comm_rank(MPI_Comm comm, int *rank);
int MPI_Comm_size(MPI_Comm comm, int *size);
int MPI_Error_class(int errorcode, int *errorclass);

typedef void MPI_User_function(void *invec, void *inoutvec, int *len, MPI_Datatype *datatype);
int MPI_Op_create(MPI_User_function *user_fn, int commute, MPI_Op *op);
int MPI_Op_free(MPI_Op *op);
int MPI_Op_commutative(MPI_Op op, int *commute);
int MPI_Reduce_local(const void *inbuf, void *inoutbuf, int count, MPI_Datatype datatype,
                     MPI_Op op);
int MPI_Get_count(const MPI_Status *status, MPI_Datatype datatype, int *count);

/* ---- datatypes -----------------------------------------------------------------
 *
 * The predefined types above and derived ones built from them; a derived
 * type is committed before it is used in communication. Every call below
 * takes any of them (a reduction with a predefined op: a type whose every
 * element is one predefined type; with a user op: any whose data lies
 * within its extent). */

int MPI_Type_size(MPI_Datatype datatype, int *size);
int MPI_Type_get_extent(MPI_Datatype datatype, MPI_Aint *lb, MPI_Aint *extent);
int MPI_Type_get_true_extent(MPI_Datatype datatype, MPI_Aint *true_lb, MPI_Aint *true_extent);
int MPI_Type_contiguous(int count, MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Type_vector(int count, int blocklength, int stride, MPI_Datatype oldtype,
                    MPI_Datatype *newtype);
int MPI_Type_create_hvector(int count, int blocklength, MPI_Aint stride, MPI_Datatype oldtype,
                            MPI_Datatype *newtype);
int MPI_Type_indexed(int count, const int array_of_blocklengths[],
                     const int array_of_displacements[], MPI_Datatype oldtype,
                     MPI_Datatype *newtype);
int MPI_Type_create_hindexed(int count, const int array_of_blocklengths[],
                             const MPI_Aint array_of_displacements[], MPI_Datatype oldtype,
                             MPI_Datatype *newtype);
int MPI_Type_create_indexed_block(int count, int blocklength, const int array_of_displacements[],
                                  MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Type_create_hindexed_block(int count, int blocklength,
                                   const MPI_Aint array_of_displacements[], MPI_Datatype oldtype,
                                   MPI_Datatype *newtype);
int MPI_Type_create_struct(int count, const int array_of_blocklengths[],
                           const MPI_Aint array_of_displacements[],
                           const MPI_Datatype array_of_types[], MPI_Datatype *newtype);
int MPI_Type_create_resized(MPI_Datatype oldtype, MPI_Aint lb, MPI_Aint extent,
                            MPI_Datatype *newtype);
int MPI_Type_dup(MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Type_commit(MPI_Datatype *datatype);
int MPI_Type_free(MPI_Datatype *datatype);
int MPI_Get_address(const void *location, MPI_Aint *address);
MPI_Aint MPI_Aint_add(MPI_Aint base, MPI_Aint disp);
MPI_Aint MPI_Aint_diff(MPI_Aint addr1, MPI_Aint addr2);

/* ---- collectives ------------------------------------------------------------ */

int MPI_Barrier(MPI_Comm comm);
int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm);
int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
               MPI_Op op, int root, MPI_Comm comm);
int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                  MPI_Op op, MPI_Comm comm);
int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                  void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                   void *recvbuf, const int recvcounts[], const int displs[],
                   MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Reduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[],
                       MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                             MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                 void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                  MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                  const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Alltoallw(const void *sendbuf, const int sendcounts[], const int sdispls[],
                  const MPI_Datatype sendtypes[], void *recvbuf, const int recvcounts[],
                  const int rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm);
int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                MPI_Comm comm);
int MPI_Scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Scatterv(const void *sendbuf, const int sendcounts[], const int displs[],
                 MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                 int root, MPI_Comm comm);
int MPI_Scan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
             MPI_Comm comm);
int MPI_Exscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               MPI_Comm comm);

/* ---- nonblocking collectives -------------------------------------------------
 *
 * Each runs as eccl's asynchronous form of the blocking call's eccl
 * collective and completes with MPI_Wait/Waitall/Waitany/Test/Testall, in
 * any order and beside other collectives and messages. The reductions
 * computed here rather than on eccl's kernels (see MPI_OP_NULL above) have
 * no nonblocking form yet: they fail loudly. */

int MPI_Ibarrier(MPI_Comm comm, MPI_Request *request);
int MPI_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
               MPI_Request *request);
int MPI_Ireduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                int root, MPI_Comm comm, MPI_Request *request);
int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                   MPI_Op op, MPI_Comm comm, MPI_Request *request);
int MPI_Iallgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request);
int MPI_Iallgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                    const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                    MPI_Comm comm, MPI_Request *request);
int MPI_Ireduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                              MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                              MPI_Request *request);
int MPI_Ireduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[],
                        MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request);
int MPI_Ialltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request);
int MPI_Ialltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                   MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                   const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm,
                   MPI_Request *request);
int MPI_Igather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                MPI_Request *request);
int MPI_Igatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                 MPI_Comm comm, MPI_Request *request);
int MPI_Iscatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                 MPI_Request *request);
int MPI_Iscatterv(const void *sendbuf, const int sendcounts[], const int displs[],
                  MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                  int root, MPI_Comm comm, MPI_Request *request);

/* ---- point-to-point ----------------------------------------------------------
 *
 * Between ranks of MPI_COMM_WORLD (and to oneself, in either communicator).
 * A receive names its source and its tag: MPI_ANY_SOURCE and MPI_ANY_TAG
 * fail loudly (eccl pairs a send only with the receive naming its sender
 * and tag). Messages of one (source, tag) arrive in the order sent; a
 * receive's count is an upper bound (MPI_Get_count tells the size), and a
 * larger message is MPI_ERR_TRUNCATE. MPI_PROC_NULL is the usual no-op.
 * Small messages (up to 240 bytes) are eager: MPI_Send returns at once;
 * a larger MPI_Send returns once the receiver holds the data. */

int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
             MPI_Comm comm);
int MPI_Recv(void *buf, int count, MPI_Datatype datatype, int source, int tag,
             MPI_Comm comm, MPI_Status *status);
int MPI_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest,
                 int sendtag, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                 int source, int recvtag, MPI_Comm comm, MPI_Status *status);
int MPI_Isend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
              MPI_Comm comm, MPI_Request *request);
int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source, int tag,
              MPI_Comm comm, MPI_Request *request);

/* ---- requests --------------------------------------------------------------- */

/* Requests of MPI_Isend, MPI_Irecv and the nonblocking collectives (whose
 * status is empty), and MPI_REQUEST_NULL (done at once, empty status). A
 * request still pending at MPI_Finalize is an error. */
int MPI_Wait(MPI_Request *request, MPI_Status *status);
int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]);
int MPI_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status);
int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status);
int MPI_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[]);

/* ---- communicators and groups ----------------------------------------------------
 *
 * Communicators of any ranks in any order (MPI_Comm_split, MPI_Comm_create
 * from a group), each with its own collectives and messages. The
 * nonblocking collectives run on communicators of all of MPI_COMM_WORLD's
 * ranks in its order (and on MPI_COMM_SELF's); on others they fail loudly
 * (MPI_ERR_UNSUPPORTED_OPERATION). Groups are local. */

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm);
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm);
int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info,
                        MPI_Comm *newcomm);
int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm);
int MPI_Comm_compare(MPI_Comm comm1, MPI_Comm comm2, int *result);
int MPI_Comm_free(MPI_Comm *comm);
int MPI_Comm_group(MPI_Comm comm, MPI_Group *group);

int MPI_Group_size(MPI_Group group, int *size);
int MPI_Group_rank(MPI_Group group, int *rank);
int MPI_Group_translate_ranks(MPI_Group group1, int n, const int ranks1[], MPI_Group group2,
                              int ranks2[]);
int MPI_Group_compare(MPI_Group group1, MPI_Group group2, int *result);
int MPI_Group_incl(MPI_Group group, int n, const int ranks[], MPI_Group *newgroup);
int MPI_Group_excl(MPI_Group group, int n, const int ranks[], MPI_Group *newgroup);
int MPI_Group_range_incl(MPI_Group group, int n, int ranges[][3], MPI_Group *newgroup);
int MPI_Group_range_excl(MPI_Group group, int n, int ranges[][3], MPI_Group *newgroup);
int MPI_Group_union(MPI_Group group1, MPI_Group group2, MPI_Group *newgroup);
int MPI_Group_intersection(MPI_Group group1, MPI_Group group2, MPI_Group *newgroup);
int MPI_Group_difference(MPI_Group group1, MPI_Group group2, MPI_Group *newgroup);
int MPI_Group_free(MPI_Group *group);

/* ---- error handlers and fault tolerance (ULFM) ---------------------------------
 *
 * MPI_ERRORS_ARE_FATAL (the default) or MPI_ERRORS_RETURN, per
 * communicator (a new one takes its parent's). Under MPI_ERRORS_RETURN a
 * lost rank makes the calls on the communicator return
 * MPIX_ERR_PROC_FAILED (buffers as eccl leaves them: inputs intact, outputs
 * undefined) instead of ending the job; every other error still ends it.
 * Run such a program with `eccl-run --keep-going`. The User-Level Failure
 * Mitigation calls (Open MPI and MPICH ship them; mpi-ext.h includes this
 * header) continue the job: */

int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler errhandler);
int MPI_Comm_get_errhandler(MPI_Comm comm, MPI_Errhandler *errhandler);
int MPI_Errhandler_free(MPI_Errhandler *errhandler);
/* A communicator of the surviving ranks, in their order. */
int MPIX_Comm_shrink(MPI_Comm comm, MPI_Comm *newcomm);
/* The bitwise AND of every survivor's *flag, the same on each; returns
 * MPIX_ERR_PROC_FAILED (the value agreed all the same) while a failure
 * of comm is not acknowledged. */
int MPIX_Comm_agree(MPI_Comm comm, int *flag);
/* Acknowledges the failures of comm known here so far (for
 * MPIX_Comm_agree), and the group of those acknowledged. */
int MPIX_Comm_failure_ack(MPI_Comm comm);
int MPIX_Comm_failure_get_acked(MPI_Comm comm, MPI_Group *failedgrp);
/* MPI 4.1's forms: the group of comm's processes known here to have failed,
 * in the order they became known (a later call's group starts with an
 * earlier one's); acknowledging the first num_to_ack of them. A process is
 * known to have failed once eccl has taken it out of its ring. */
int MPIX_Comm_get_failed(MPI_Comm comm, MPI_Group *failedgrp);
int MPIX_Comm_ack_failed(MPI_Comm comm, int num_to_ack, int *num_acked);
/* Revokes comm on every rank: their calls on it in flight and to come
 * return MPIX_ERR_REVOKED (MPIX_Comm_agree, MPIX_Comm_shrink and the local
 * calls excepted); other communicators go on. */
int MPIX_Comm_revoke(MPI_Comm comm);
int MPIX_Comm_is_revoked(MPI_Comm comm, int *flag);

#ifdef __cplusplus
}
#endif

#endif /* ECCL_MPI_H */
