/* libeccl_mpi: the MPI subset of mpi/include/mpi.h on top of eccl.
 *
 * One eccl communicator is MPI_COMM_WORLD. MPI_Init joins the master that
 * eccl-run started (ECCL_MPI_MASTER) and votes peers in until the world
 * holds ECCL_MPI_SIZE of them; the MPI rank is then the eccl ring rank,
 * which stays put because nobody joins or leaves afterwards (a loss is
 * fatal, below). Without eccl-run's environment the process is a world of
 * one, as MPI's singleton init.
 *
 * Tags: every eccl collective carries a tag that must be the same on every
 * rank for the same call. MPI ranks call a communicator's collectives in
 * the same order, so a per-communicator counter, bumped once per eccl call
 * by every rank alike, is that tag. This holds only if every rank makes
 * the same eccl calls for one MPI call: each decision below that skips or
 * adds an eccl call depends on arguments MPI requires to agree across
 * ranks (counts, roots), or on data every rank has just gathered.
 * Point-to-point messages take no part in that counter: they run under
 * eccl's send/receive tags, which eccl keeps apart from the collectives'
 * (a fixed-size header, then the payload; "point-to-point: the engine"
 * below says how MPI's matching maps onto eccl's).
 *
 * Errors are fatal, as under MPI's default handler MPI_ERRORS_ARE_FATAL:
 * a bad argument, a call eccl cannot do, or an eccl failure prints one
 * line on stderr and ends the process with the MPI error class as its
 * exit status; eccl-run then stops the other ranks. The one exception is
 * a lost rank on a communicator with MPI_ERRORS_RETURN (ULFM, "error
 * handlers and ULFM" below): MPIX_ERR_PROC_FAILED is returned instead.
 * Derived datatypes reach eccl packed (types.c; "derived datatypes in
 * calls" below).
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "eccl.h"
#include "ops.h"
#include "shim.h"
#include "tool_util.h"

/* The library is built with hidden visibility; only MPI's names leave it
 * (tool_util's helpers, compiled in, stay private). */
#pragma GCC visibility push(default)
#include "mpi.h"
#pragma GCC visibility pop

#include "groups.h"
#include "types.h"

/* ---- state ------------------------------------------------------------------ */

/* What the process knows of MPI_COMM_WORLD. The shim serves one thread at a
 * time (MPI_THREAD_SERIALIZED at most), so plain globals do. */
static struct {
    int initialized;
    int finalized;
    int rank;
    int size;
    eccl_comm *comm;   /* NULL in a world of one: nothing to talk to */
    int64_t epoch;     /* eccl's ring generation once everyone was in */
    uint64_t next_tag; /* the world's collective call counter */
    /* Each process's eccl peer id (MPI_Init's all-gather), by world rank:
     * a process no longer on eccl's ring has failed (learn_failures). */
    uint64_t *peer_ids;
    /* The processes known to have failed, in the order this rank learnt
     * of it (MPIX_Comm_get_failed's order). */
    int *failed, n_failed;
} world;

/* Communicators made by MPI_Comm_dup/split/split_type/create and
 * MPIX_Comm_shrink: all of eccl's ring in ring order, or some of its ranks
 * or all in another order (a subset: `ranks`; its collectives run as
 * messages, "collectives of a subset communicator"), each with a space of
 * eccl tags of its own (two for a subset), so that its collectives and
 * messages never meet another's. The space is its id, agreed by the ranks
 * that make it ("communicators" below). Those of MPI_COMM_SELF (a world of
 * one, never on eccl) take no id. */
#define COMM_HANDLE_BASE 0x44000100
#define COMM_ID_MAX 0x7ffd /* 15 bits of an eccl tag (take_tag, p2p_tag) */
/* Tag spaces past the ids: MPIX_Comm_shrink's and MPIX_Comm_agree's votes
 * (and MPI_Finalize's after a loss), whose tags every survivor can name
 * alike however many calls the failure cut short on each. */
#define SHRINK_SPACE 0x7ffeull
#define AGREE_SPACE 0x7fffull
struct mpi_comm {
    int used;
    int of_self;       /* made from MPI_COMM_SELF: a world of one */
    uint32_t id;       /* its tag space */
    uint64_t next_tag; /* its collective call counter */
    int errors_return; /* MPI_ERRORS_RETURN: a process failure is returned, not fatal */
    int failed;        /* a rank of it was lost (MPIX_ERR_PROC_FAILED from now on) */
    int acked;         /* MPIX_Comm_failure_ack since */
    int n_acked;       /* the first n_acked of its known failures are acknowledged */
    /* Made by MPIX_Comm_shrink: the survivors of eccl's ring `epoch`, this
     * rank `rank` of `size` there; otherwise the world's (world.epoch). */
    int shrunk, rank, size;
    int64_t epoch;
    int64_t ring_size; /* made by MPIX_Comm_shrink or from such: the ranks of ring `epoch` */
    int revoked;       /* MPIX_Comm_revoke here or on a rank of it: calls fail MPIX_ERR_REVOKED */
    uint32_t agreements, shrinks; /* MPIX_Comm_agree/shrink calls on it: their tags */
    /* Some of the ring's ranks, or all in another order (MPI_Comm_split,
     * MPI_Comm_create): its rank i is ranks[i] on eccl's ring, and its
     * collectives run as messages between its ranks ("subset
     * communicators"); rank and size are its own. NULL: every rank of the
     * ring, in ring order. */
    int *ranks;
    /* Its ranks as MPI_COMM_WORLD numbered them at MPI_Init, for groups;
     * NULL: the ring's numbering (a ring that never lost a rank). */
    int *procs;
};

static struct {
    struct mpi_comm *slots;
    int n, cap;
    uint32_t next_id; /* ids 1 .. COMM_ID_MAX; the world's is 0 */
    struct mpi_comm world, self; /* MPI_COMM_WORLD's and MPI_COMM_SELF's state */
    MPI_Comm current;            /* the communicator of the call under way */
    int error;                   /* its process-failure error, returned at its end */
    int64_t pinned;              /* the ring eccl's calls are pinned to now (pin_to) */
    /* A revoke's re-form cut the call under way short: it runs again, as
     * it was, on the new ring (check_coll; RUN_COLL, step_done), its
     * collective under the tag it had (take_tag). */
    int retry, reuse_tag;
    int revoked_fatal; /* comms.error is a revoke of an MPI_ERRORS_ARE_FATAL communicator */
    uint64_t last_tag;
    /* eccl notices kept: revokes (for communicators this rank may make
     * later too) and agreements on communicators of some ranks. */
    eccl_notice *notes;
    int n_notes, cap_notes, n_revokes;
} comms = {.world = {.used = 1}, .self = {.used = 1, .of_self = 1}};

/* A communicator as a collective sees it. MPI_COMM_SELF is a world of one
 * and never reaches eccl, so it needs no tag counter. */
struct comm_view {
    int rank;
    int size;
    eccl_comm *ecomm;
    uint64_t *next_tag;
    uint32_t id; /* its eccl tag space */
    const int *ranks; /* a subset communicator's ring ranks (struct mpi_comm), or NULL */
};

/* A world of one (no eccl communicator): every collective is the local copy
 * it degenerates to, in place or not. 1 when the call is done. */
static int alone(const struct comm_view *v, void *dst, const void *src, size_t bytes)
{
    if (v->ecomm != NULL)
        return 0;
    if (src != dst && src != MPI_IN_PLACE && bytes != 0)
        memcpy(dst, src, bytes);
    return 1;
}

/* ---- errors ----------------------------------------------------------------- */

static const struct {
    int code;
    const char *name;
    const char *text;
} error_classes[] = {
    {MPI_SUCCESS, "MPI_SUCCESS", "no error"},
    {MPI_ERR_BUFFER, "MPI_ERR_BUFFER", "invalid buffer pointer"},
    {MPI_ERR_COUNT, "MPI_ERR_COUNT", "invalid count argument"},
    {MPI_ERR_TYPE, "MPI_ERR_TYPE", "invalid datatype"},
    {MPI_ERR_TAG, "MPI_ERR_TAG", "invalid tag"},
    {MPI_ERR_COMM, "MPI_ERR_COMM", "invalid communicator"},
    {MPI_ERR_RANK, "MPI_ERR_RANK", "invalid rank"},
    {MPI_ERR_ROOT, "MPI_ERR_ROOT", "invalid root"},
    {MPI_ERR_OP, "MPI_ERR_OP", "invalid or unsupported reduction operation"},
    {MPI_ERR_ARG, "MPI_ERR_ARG", "invalid argument"},
    {MPI_ERR_REQUEST, "MPI_ERR_REQUEST", "invalid request"},
    {MPI_ERR_TRUNCATE, "MPI_ERR_TRUNCATE", "message sizes do not match"},
    {MPI_ERR_UNSUPPORTED_OPERATION, "MPI_ERR_UNSUPPORTED_OPERATION",
     "operation not supported by eccl"},
    {MPI_ERR_NO_MEM, "MPI_ERR_NO_MEM", "out of memory"},
    {MPI_ERR_OTHER, "MPI_ERR_OTHER", "eccl failed (see the message before)"},
    {MPI_ERR_INTERN, "MPI_ERR_INTERN", "internal error"},
    {MPI_ERR_UNKNOWN, "MPI_ERR_UNKNOWN", "unknown error"},
    {MPI_ERR_IN_STATUS, "MPI_ERR_IN_STATUS", "error code is in status"},
    {MPIX_ERR_PROC_FAILED, "MPIX_ERR_PROC_FAILED", "a process of the communicator failed"},
    {MPI_ERR_GROUP, "MPI_ERR_GROUP", "invalid group"},
    {MPIX_ERR_REVOKED, "MPIX_ERR_REVOKED", "the communicator was revoked"},
};

static const char *error_name(int code)
{
    for (size_t i = 0; i < sizeof error_classes / sizeof error_classes[0]; i++)
        if (error_classes[i].code == code)
            return error_classes[i].name;
    return "MPI_ERR_UNKNOWN";
}

/* One line on stderr in one write: ranks share the launcher's stderr, and
 * a line written piecemeal would interleave with another rank's. */
__attribute__((format(printf, 1, 0)))
static void say(const char *fmt, va_list ap)
{
    char line[1024];
    int len = vsnprintf(line, sizeof line - 1, fmt, ap);

    if (len < 0)
        return;
    if ((size_t)len > sizeof line - 2)
        len = (int)sizeof line - 2;
    line[len++] = '\n';
    fflush(stderr);
    if (write(STDERR_FILENO, line, (size_t)len) < 0)
        return; /* nowhere left to say it */
}

__attribute__((format(printf, 1, 2)))
static void sayf(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    say(fmt, ap);
    va_end(ap);
}

/* "eccl_mpi: <what> (rank R of N, <MPI error class>)" and the end of the
 * process: exit status = the error class, never 0. stdout is flushed so
 * the program's output up to the failure is not lost, but no atexit
 * handler runs: eccl's threads are still going. */
void mpi_fatal(int mpi_error, const char *fmt, ...)
{
    char what[768];
    va_list ap;

    fflush(stdout);
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (world.initialized && !world.finalized)
        sayf("eccl_mpi: %s (rank %d of %d, %s)", what, world.rank, world.size,
             error_name(mpi_error));
    else
        sayf("eccl_mpi: %s (%s)", what, error_name(mpi_error));
    _exit(mpi_error);
}

static int mpi_error_of(eccl_result rc)
{
    switch (rc) {
    case ECCL_ERR_INVALID_ARG: return MPI_ERR_ARG;
    case ECCL_ERR_NO_MEMORY: return MPI_ERR_NO_MEM;
    case ECCL_ERR_UNSUPPORTED: return MPI_ERR_UNSUPPORTED_OPERATION;
    default: return MPI_ERR_OTHER;
    }
}

static void check_eccl(const char *call, const char *what, eccl_result rc)
{
    if (rc != ECCL_OK)
        mpi_fatal(mpi_error_of(rc), "%s: %s failed: %s", call, what, eccl_strerror(rc));
}

static struct mpi_comm *comm_state(MPI_Comm comm);
static int reformed_now(struct mpi_comm *c);
static int is_revoked(struct mpi_comm *c);
static void revoked_error(const char *call, const struct mpi_comm *c);

/* After an eccl op of the current call's communicator (comms.current),
 * pinned to the ring the communicator was made on (pin_to). A lost rank
 * (eccl's ECCL_ERR_PEER_LOST: under the op, or before it, the ring having
 * changed since the communicator was made; a link broken under the op; a
 * ring left with this rank alone) fails it. Under MPI_ERRORS_RETURN that
 * is MPIX_ERR_PROC_FAILED for this call and every later one on the
 * communicator (ULFM); otherwise, and for every other failure, fatal. */
static int lost_rank(eccl_result rc)
{
    return rc == ECCL_ERR_PEER_LOST || rc == ECCL_ERR_CONNECT || rc == ECCL_ERR_TOO_FEW_PEERS;
}

static void check_coll(const char *call, const char *what, eccl_result rc)
{
    struct mpi_comm *c = comm_state(comms.current);

    if (rc == ECCL_OK)
        return;
    /* A revoke re-forms eccl's ring, which fails every call in flight:
     * those of the revoked communicator fail MPIX_ERR_REVOKED, the others
     * run again on the new ring. */
    if (lost_rank(rc) && c != NULL && !c->of_self) {
        int reformed = reformed_now(c);
        if (is_revoked(c)) {
            revoked_error(call, c);
            return;
        }
        if (reformed) {
            comms.retry = 1;
            return;
        }
    }
    if (lost_rank(rc) && c != NULL && c->errors_return) {
        c->failed = 1;
        if (comms.error == MPI_SUCCESS)
            comms.error = MPIX_ERR_PROC_FAILED;
        return;
    }
    check_eccl(call, what, rc);
}

/* The ring comm's calls belong to, and in *size its number of ranks. */
static int64_t ring_of(const struct mpi_comm *c, int64_t *size)
{
    if (c != NULL && c->shrunk) {
        *size = c->ring_size;
        return c->epoch;
    }
    *size = world.size;
    return world.epoch;
}

/* eccl's calls for comm belong to the ring comm was made on (its ranks
 * are that ring's): pinned there (eccl_comm_pin_epoch), a call made once a
 * loss has re-formed the ring fails at once instead of running on the new
 * ring, where the others, which saw the loss in their calls, never come:
 * they went on to MPIX_Comm_shrink. Every survivor's call of a collective
 * ends alike: committed on the old ring by eccl's view change (a late
 * caller gets the committed result), or failed. */
static void pin_to(MPI_Comm comm)
{
    int64_t size, epoch = ring_of(comm_state(comm), &size);

    if (world.comm == NULL || epoch == comms.pinned)
        return;
    check_eccl("pinning eccl's calls to the communicator's ring", "eccl_comm_pin_epoch",
               eccl_comm_pin_epoch(world.comm, (uint64_t)epoch));
    comms.pinned = epoch;
}

/* Ring `from` was re-formed as `to` with the same processes in the same
 * order (a revoke's re-form: the master keeps its members' order): every
 * communicator of `from` belongs to `to` now. */
static void follow_reform(int64_t from, int64_t to)
{
    if (world.epoch == from)
        world.epoch = to;
    for (int i = 0; i < comms.n; i++)
        if (comms.slots[i].used && comms.slots[i].shrunk && comms.slots[i].epoch == from)
            comms.slots[i].epoch = to;
}

/* Whether c's ring, now ring `epoch` of `size` ranks, was only re-formed
 * (1: c follows it, if it did not yet) rather than cut by a loss (0). An
 * MPI job takes no newcomers, so a ring of as many ranks has the same
 * processes. A call that failed without a loss ran on a ring since
 * re-formed (perhaps one c already follows: a call made before another's
 * failure moved c on). */
static int ring_reformed(struct mpi_comm *c, int64_t epoch, int64_t size)
{
    int64_t had, pinned = ring_of(c, &had);

    if (size != had)
        return 0;
    if (epoch != pinned)
        follow_reform(pinned, epoch);
    return 1;
}

/* ring_reformed for the ring of now (reading it waits for a view change
 * under way to end). */
static int reformed_now(struct mpi_comm *c)
{
    int64_t epoch, size;

    if (world.comm == NULL)
        return 0;
    check_eccl("reading eccl's ring", "eccl_comm_get_attr",
               eccl_comm_get_attr(world.comm, ECCL_ATTR_EPOCH, &epoch));
    check_eccl("reading eccl's ring", "eccl_comm_get_attr",
               eccl_comm_get_attr(world.comm, ECCL_ATTR_WORLD_SIZE, &size));
    return ring_reformed(c, epoch, size);
}

/* MPIX_Comm_revoke's word (eccl_comm_notify): "REVOKE" above the id. */
#define REVOKE_NOTICE 0x5245564f4b450000ull
#define REVOKE_ID_MASK 0xffffull

/* MPIX_Comm_agree's word on a communicator of some ranks (sub_agree):
 * 'A', the communicator's id, the agreement's number (9 bits), the flag. */
#define AGREE_NOTICE (0x41ull << 56)
#define AGREE_KEY_MASK 0xffffffff00000000ull

static uint64_t agree_key(uint32_t id, uint32_t number)
{
    return AGREE_NOTICE | (uint64_t)(id & 0x7fffu) << 41 | (uint64_t)(number & 0x1ffu) << 32;
}

static int proc_of(const struct mpi_comm *c, int i);

/* Whether eccl peer `from` is one of c's processes. */
static int member_of(const struct mpi_comm *c, uint64_t from)
{
    int size = c->shrunk || c->ranks != NULL ? c->size : world.size;

    for (int i = 0; i < size; i++)
        if (world.peer_ids[proc_of(c, i)] == from)
            return 1;
    return 0;
}

/* Whether an agreement's word is for a communicator of this rank's, from
 * one of its processes: others' (disjoint communicators of other ranks)
 * are dropped as they come. This rank made each of its communicators
 * before any word for it can come: a communicator is made by a collective
 * call that returns nowhere before every rank joined it. */
static int agree_is_ours(const eccl_notice *n)
{
    uint32_t id = (uint32_t)(n->word >> 41) & 0x7fffu;

    for (int i = 0; i < comms.n; i++)
        if (comms.slots[i].used && comms.slots[i].ranks != NULL && comms.slots[i].id == id &&
            member_of(&comms.slots[i], n->from))
            return 1;
    return 0;
}

/* Takes eccl's notices: the revokes and this rank's agreements among them
 * join comms.notes. */
static void take_notices(void)
{
    eccl_notice got[16];
    size_t n;

    if (world.comm == NULL)
        return;
    do {
        check_eccl("reading eccl's notices", "eccl_comm_notices", eccl_comm_notices(world.comm, got, 16, &n));
        for (size_t k = 0; k < n; k++) {
            int revoke = (got[k].word & ~REVOKE_ID_MASK) == REVOKE_NOTICE;
            if (!revoke && (got[k].word >> 56 != AGREE_NOTICE >> 56 || !agree_is_ours(&got[k])))
                continue;
            if (comms.n_notes == comms.cap_notes) {
                int cap = comms.cap_notes ? 2 * comms.cap_notes : 8;
                eccl_notice *t = realloc(comms.notes, (size_t)cap * sizeof *t);
                if (t == NULL)
                    mpi_fatal(MPI_ERR_NO_MEM, "keeping eccl's notices: out of memory");
                comms.notes = t;
                comms.cap_notes = cap;
            }
            comms.notes[comms.n_notes++] = got[k];
            comms.n_revokes += revoke;
        }
    } while (n == 16);
}

/* Whether c was revoked: here, or by one of its processes (disjoint
 * communicators may share an id: a revoke names its poster). */
static int is_revoked(struct mpi_comm *c)
{
    if (c->revoked || c->of_self || world.comm == NULL)
        return c->revoked;
    take_notices();
    for (int k = 0; k < comms.n_notes && !c->revoked; k++)
        c->revoked = comms.notes[k].word == (REVOKE_NOTICE | c->id) && member_of(c, comms.notes[k].from);
    return c->revoked;
}

/* A call on revoked c: MPIX_ERR_REVOKED under MPI_ERRORS_RETURN, or the
 * end of the job. */
static void revoked_error(const char *call, const struct mpi_comm *c)
{
    if (!c->errors_return)
        mpi_fatal(MPIX_ERR_REVOKED, "%s: the communicator was revoked (MPIX_Comm_revoke)", call);
    comms.error = MPIX_ERR_REVOKED;
}

void mpi_require_initialized(const char *call)
{
    if (!world.initialized)
        mpi_fatal(MPI_ERR_OTHER, "%s called before MPI_Init", call);
    if (world.finalized)
        mpi_fatal(MPI_ERR_OTHER, "%s called after MPI_Finalize", call);
}

/* ---- handles ------------------------------------------------------------------ */

static const struct mpi_type *type_of(const char *call, MPI_Datatype datatype)
{
    const struct mpi_type *t = mpi_type_get(datatype);

    if (t == NULL)
        mpi_fatal(MPI_ERR_TYPE, "%s: invalid datatype handle 0x%x", call, (unsigned)datatype);
    return t;
}

/* The predefined operations, in handle order (ops.h's enum mpi_opcode):
 * the first four are eccl's. */
static const char *const op_names[OPC_COUNT] = {
    "MPI_SUM",  "MPI_PROD", "MPI_MIN",  "MPI_MAX",    "MPI_LAND",   "MPI_BAND",
    "MPI_LOR",  "MPI_BOR",  "MPI_LXOR", "MPI_BXOR",   "MPI_MAXLOC", "MPI_MINLOC",
};
static const eccl_op eccl_ops[] = {ECCL_SUM, ECCL_PROD, ECCL_MIN, ECCL_MAX};

/* Operations of MPI_Op_create: handles from USER_OP_BASE on, an index
 * into user_ops; a freed slot has fn NULL and is taken again. */
#define USER_OP_BASE 0x58001000
#define USER_OP_MAX 1024
static struct user_op {
    MPI_User_function *fn;
    int commute;
} user_ops[USER_OP_MAX];

/* How a reduction runs: on eccl (its kernel), or here in rank order (a
 * predefined operation eccl lacks, or a user's function). */
struct reduction {
    int on_eccl;
    eccl_op eop;
    mpi_local_fn local;
    MPI_User_function *user;
    MPI_Datatype datatype; /* what a user's function is told */
};

/* An operation of MPI_Op_create, not freed. */
static int user_op(MPI_Op op)
{
    unsigned user = (unsigned)op - USER_OP_BASE;

    return user < USER_OP_MAX && user_ops[user].fn != NULL;
}

/* The reduction of (op, type), or a fatal error where MPI defines none. */
static struct reduction reduction_of(const char *call, MPI_Op op, MPI_Datatype datatype,
                                     const struct mpi_type *type)
{
    struct reduction r = {0};
    unsigned index = (unsigned)op - (unsigned)MPI_SUM, user = (unsigned)op - USER_OP_BASE;

    if (user_op(op)) {
        r.user = user_ops[user].fn;
        r.datatype = datatype;
        return r;
    }
    if (index >= OPC_COUNT)
        mpi_fatal(MPI_ERR_OP, "%s: invalid op handle 0x%x", call, (unsigned)op);
    r.local = mpi_local_op((enum mpi_opcode)index, type->ctype);
    if (r.local == NULL)
        mpi_fatal(MPI_ERR_OP, "%s: %s on %s: MPI defines no such operation on %s", call,
              op_names[index], 
              type->name, type->name);
    r.on_eccl = index < sizeof eccl_ops / sizeof eccl_ops[0] && type->on_eccl;
    r.eop = r.on_eccl ? eccl_ops[index] : ECCL_SUM;
    return r;
}

/* inout = in op inout, n elements. */
static void reduce_here(const struct reduction *r, const void *in, void *inout, size_t n)
{
    if (r->user != NULL) {
        int len = (int)n; /* n comes from an int count */
        MPI_Datatype dt = r->datatype;
        r->user((void *)in, inout, &len, &dt);
    } else {
        r->local(in, inout, n);
    }
}

/* The state of a communicator handle, or NULL for none. */
static struct mpi_comm *comm_state(MPI_Comm comm)
{
    unsigned slot = (unsigned)comm - COMM_HANDLE_BASE;

    if (comm == MPI_COMM_WORLD)
        return &comms.world;
    if (comm == MPI_COMM_SELF)
        return &comms.self;
    return slot < (unsigned)comms.n && comms.slots[slot].used ? &comms.slots[slot] : NULL;
}

/* What the call under way returns, the process failure it met or
 * MPI_SUCCESS; the next call starts clean. */
static int call_result(void)
{
    int e = comms.error;

    comms.error = MPI_SUCCESS;
    if (e == MPIX_ERR_REVOKED && comms.revoked_fatal)
        mpi_fatal(e, "a call on a communicator that was revoked (MPIX_Comm_revoke), whose error handler is "
                  "MPI_ERRORS_ARE_FATAL");
    return e;
}

/* A local call's end (a failed or revoked communicator still has its
 * size, group, ...), and that of the calls that serve such one (agree,
 * shrink): its error is not returned. */
static void drop_result(void)
{
    comms.error = MPI_SUCCESS;
    comms.revoked_fatal = 0;
}

static struct comm_view view_of(const char *call, MPI_Comm comm)
{
    struct comm_view v = {0, 1, NULL, NULL, 0, NULL};

    mpi_require_initialized(call);
    struct mpi_comm *c = comm_state(comm);

    if (c == NULL)
        mpi_fatal(MPI_ERR_COMM, "%s: invalid communicator 0x%x (not MPI_COMM_WORLD, MPI_COMM_SELF or "
              "one made from them and not freed)", call, (unsigned)comm);
    comms.current = comm;
    if (c->shrunk || c->ranks != NULL) {
        v.rank = c->rank;
        v.size = c->size;
        v.ecomm = c->size > 1 ? world.comm : NULL;
        v.ranks = c->ranks;
    } else if (!c->of_self) {
        v.rank = world.rank;
        v.size = world.size;
        v.ecomm = world.comm;
    }
    v.next_tag = comm == MPI_COMM_WORLD ? &world.next_tag : &c->next_tag;
    v.id = c->id;
    /* A communicator that lost a rank fails every call on it (the ranks
     * MPI names are no longer eccl's) until the program shrinks it; a
     * revoked one too, for good (the local calls, agree and shrink drop
     * the error: call_result). */
    if (c->failed && comms.error == MPI_SUCCESS)
        comms.error = MPIX_ERR_PROC_FAILED;
    if (comms.error == MPI_SUCCESS && is_revoked(c)) {
        comms.error = MPIX_ERR_REVOKED;
        comms.revoked_fatal = !c->errors_return; /* ends the job if the call returns it */
    }
    return v;
}

/* The next collective's eccl tag: the communicator's id above 40 bits of
 * its call counter. */
static uint64_t take_tag(const struct comm_view *v)
{
    if (comms.reuse_tag) {
        comms.reuse_tag = 0;
        return comms.last_tag;
    }
    comms.last_tag = (uint64_t)v->id << 40 | ((*v->next_tag)++ & ((1ull << 40) - 1));
    return comms.last_tag;
}

/* ---- argument checks and sizes ------------------------------------------------ */

static size_t count_of(const char *call, const char *what, int count)
{
    if (count < 0)
        mpi_fatal(MPI_ERR_COUNT, "%s: negative %s %d", call, what, count);
    return (size_t)count;
}

static size_t mul_size(const char *call, size_t a, size_t b)
{
    if (b != 0 && a > SIZE_MAX / b)
        mpi_fatal(MPI_ERR_COUNT, "%s: buffer size overflows (%zu x %zu)", call, a, b);
    return a * b;
}

/* count elements of `type`, in bytes. */
static size_t bytes_of(const char *call, const char *what, int count, const struct mpi_type *type)
{
    return mul_size(call, count_of(call, what, count), type->extent);
}

static void check_buffer(const char *call, const char *what, const void *buf, size_t bytes)
{
    if (bytes != 0 && buf == NULL)
        mpi_fatal(MPI_ERR_BUFFER, "%s: %s is NULL", call, what);
}

static void check_root(const char *call, int root, const struct comm_view *v)
{
    if (root < 0 || root >= v->size)
        mpi_fatal(MPI_ERR_ROOT, "%s: root %d is not a rank of a communicator of %d", call, root,
              v->size);
}

static void *scratch_alloc(const char *call, size_t bytes)
{
    void *p = malloc(bytes != 0 ? bytes : 1);

    if (p == NULL)
        mpi_fatal(MPI_ERR_NO_MEM, "%s: cannot allocate %zu bytes of scratch", call, bytes);
    return p;
}

/* Address of element `displ` (may be negative, as MPI allows) of `base`. */
static char *at(void *base, int displ, size_t esize)
{
    return (char *)base + (ptrdiff_t)displ * (ptrdiff_t)esize;
}

/* ---- point-to-point: the engine ------------------------------------------------------
 *
 * A message to another rank is one or two eccl send/receive pairs:
 *
 *   the header  always P2P_HEADER_BYTES: the message's size in bytes, its
 *               MPI tag and sequence number (checks), and its first
 *               P2P_INLINE bytes
 *   the payload the rest, only if the message is longer than P2P_INLINE
 *
 * eccl pairs a send with the receive of the same tag and exact size; an MPI
 * receive's count is only an upper bound. The header has one size for all
 * messages, so the receiver can always post it, learns the true size from
 * it (a message larger than the receive buffer is MPI_ERR_TRUNCATE), and
 * then posts the payload's receive of that exact size.
 *
 * The payload is sent only once the header's send is done, which is once
 * the receiver holds the header, i.e. once its MPI receive was posted and
 * matched: the payload's receive follows at once. Sent earlier, a payload
 * would reach a receiver that has not called for it: eccl parks such
 * frames only up to 64 KiB each and 1 MiB per link and leaves the rest in
 * the socket, where they would hold up every later frame of the link,
 * the header's own FIN among them (a deadlock). Headers are small and
 * parked, so a receiver may post its receives in any order, as long as no
 * more than about 3000 headers from one rank wait for their receives at
 * once (the 1 MiB).
 *
 * eccl tags (bit 63 is eccl's): bit 62 payload, bits 31..61 the MPI tag,
 * bits 16..30 the communicator's id (struct comm_view), bits 0..15 the
 * message's sequence number among the messages of its (communicator, peer,
 * MPI tag, direction), counted alike by sender and receiver. eccl
 * folds the two ranks (and which one sends) into the tag it runs the pair
 * under, so tags need not name the peer, and a send and a receive of one
 * MPI tag between the same two ranks never meet. The k-th send of (rank,
 * tag) pairs with the k-th receive posted for it: MPI's non-overtaking
 * order. Sequence numbers wrap at 2^16, beyond the messages that can be
 * in flight at once (P2P_MAX_OPS, and about 3000 parked headers a pair).
 *
 * Eager sends: a message that fits in the header (P2P_INLINE bytes or
 * fewer) is copied there, so MPI_Send returns at once and an MPI_Isend's
 * request is complete at once, as under other MPIs' eager protocol (a
 * program that sends before it receives on both sides works for such
 * messages); the eccl send goes on detached until the receiver takes it.
 * A larger MPI_Send returns once the receiver holds every byte (eccl's
 * send is synchronous).
 *
 * Progress: eccl's own thread moves every posted op, but the step after a
 * header (posting the payload) is the shim's. Waits therefore block in
 * eccl only when no other request will need such a step; otherwise they
 * poll every request. Collectives do the same while such requests exist,
 * so a request whose partner is posted completes even while this rank
 * waits in another call (MPI's progress rule).
 *
 * Messages to this rank itself never reach eccl (it refuses them): the
 * data is copied into a queue at once and taken by the matching receive
 * (or a receive posted earlier takes it directly). A receive from itself
 * that nothing can satisfy while it waits is a certain deadlock: fatal. */

#define P2P_HEADER_BYTES 256
#define P2P_TAG_PAYLOAD (1ull << 62)
#define P2P_SEQ_MASK 0xffffu
/* eccl runs at most ECCL_WIRE_MAX_OPS (4096) ops per communicator at once;
 * past this many of the shim's, a new one first waits for older ones. */
#define P2P_MAX_OPS 4000
/* MPI_Request handles: a distinct range, as the other handle kinds. */
#define REQUEST_HANDLE_BASE 0x6c000000
#define REQUEST_HANDLE_MAX 0x00ffffff

struct p2p_header {
    uint64_t bytes; /* the message's size */
    uint32_t tag;   /* its MPI tag and sequence number: checks */
    uint32_t seq;
    unsigned char data[P2P_HEADER_BYTES - 16];
};
_Static_assert(sizeof(struct p2p_header) == P2P_HEADER_BYTES, "the header has no padding");
#define P2P_INLINE sizeof(((struct p2p_header *)0)->data)

enum { REQ_SEND, REQ_RECV, REQ_COLL };

/* What a collective leaves to do once eccl is done with it: scratch that
 * eccl reads until then (counts, layouts), and a block to move into place
 * (an in-place reduce-scatter's result, to the front of recvbuf). */
struct stage;
/* A subset communicator's nonblocking collective, started (sub_begin): the
 * messages it posted, and what it does once they are all in (a fold of
 * `all`, blocks `stride` apart, into `out` if out is not NULL; scratch
 * to free). */
struct sub_later {
    struct request **parts;
    int n_parts, size;
    const char *all;
    size_t stride, count;
    eccl_dtype dtype;
    eccl_op op;
    void *out;
    void *scratch[4];
    int n_scratch;
};
struct coll_after {
    void *scratch[2];
    char *move_to;
    const char *move_from;
    size_t move_bytes;
    struct stage *stages; /* derived datatypes' buffers, unpacked last (set by coll_request) */
};
#define NOTHING_AFTER ((struct coll_after){{NULL, NULL}, NULL, NULL, 0, NULL})
enum { STEP_HEADER, STEP_PAYLOAD, STEP_DONE };

/* An eccl collective as a nonblocking call started it: kept, so that one
 * cut short by a revoke's re-form of another communicator starts again on
 * the new ring, under the same tag (coll_finish). The arrays it names are
 * the call's scratch, alive until it ends (struct coll_after). */
enum ecall_kind {
    EC_BARRIER, EC_BROADCAST, EC_ALLGATHER, EC_ALLGATHERV, EC_ALLTOALL, EC_ALLTOALLV,
    EC_ALLREDUCE, EC_REDUCE, EC_REDUCE_SCATTER, EC_REDUCE_SCATTERV
};
struct ecall {
    enum ecall_kind kind;
    eccl_comm *comm;
    const void *send;
    void *recv;
    size_t count;
    const size_t *v[4]; /* counts and displacements, in the eccl call's order */
    eccl_dtype dtype;
    eccl_op op;
    uint32_t root;
    uint64_t tag;
};

struct request {
    int kind;       /* REQ_SEND, REQ_RECV, or REQ_COLL (a nonblocking collective) */
    int error;      /* its result: MPI_SUCCESS, or a process failure (ERRORS_RETURN) */
    int step;
    int self;       /* to or from this rank itself: never on eccl */
    int handle;     /* index in the handle table while the program holds it, or -1 */
    int detached;   /* nobody waits for it any more: freed once done */
    MPI_Comm comm;  /* MPI_COMM_NULL once freed (MPI_Comm_free) */
    int freed_errors_return; /* then: its error handler's (struct mpi_comm) */
    uint32_t comm_id; /* its tag space (struct comm_view) */
    int peer;       /* MPI rank, or MPI_PROC_NULL */
    int ring_peer;  /* the peer's rank on eccl's ring */
    int tag;
    uint32_t seq;
    char *buf;
    size_t bytes;   /* send: the message; receive: the buffer's room */
    size_t got;     /* receive: the message's size */
    eccl_request *op; /* the eccl op in flight */
    struct request *prev, *next; /* on p2p.active while op is, or on p2p.self_waiting */
    const char *call;             /* REQ_COLL: the MPI call that started it */
    struct coll_after after;      /* REQ_COLL */
    struct ecall ecall;           /* REQ_COLL: its eccl call */
    struct sub_later *later;      /* REQ_COLL of a subset communicator (no eccl op): its messages */
    struct stage *stages;         /* REQ_SEND, REQ_RECV: a derived datatype's scratch */
    struct p2p_header hdr;
};

/* A message sent to this rank itself, not received yet. */
struct self_msg {
    struct self_msg *next;
    MPI_Comm comm;
    int tag;
    size_t bytes;
    unsigned char data[];
};

/* Sequence numbers of one (communicator, peer, MPI tag). */
struct seq_entry {
    uint64_t key; /* comm id << 48 | peer << 31 | tag; empty slots: key 0 with used 0 */
    uint32_t sent, received;
    int used;
};

static struct {
    struct request *active; /* requests with an eccl op in flight */
    int active_ops;
    struct request *self_waiting; /* receives from this rank, in posting order */
    struct self_msg *self_queue, **self_tail;
    struct request **handles;  /* the program's requests */
    int *free_handles;
    int n_handles, n_free, cap_handles;
    struct seq_entry *seqs;
    size_t n_seqs, cap_seqs;
    long long sent, received; /* messages, for MPI_Finalize's check */
    struct request *subs; /* subset communicators' nonblocking collectives under way */
    struct sub_later *starting; /* the one whose messages are being posted (sub_begin) */
} p2p;

static struct seq_entry *seq_of(uint32_t comm_id, int peer, int tag)
{
    uint64_t key = (uint64_t)comm_id << 48 | (uint64_t)(uint32_t)peer << 31 | (uint32_t)tag;
    size_t i;

    if (2 * (p2p.n_seqs + 1) > p2p.cap_seqs) {
        size_t cap = p2p.cap_seqs != 0 ? 2 * p2p.cap_seqs : 64;
        struct seq_entry *old = p2p.seqs, *fresh = calloc(cap, sizeof *fresh);

        if (fresh == NULL)
            mpi_fatal(MPI_ERR_NO_MEM, "point-to-point: cannot grow the sequence table to %zu", cap);
        for (size_t j = 0; j < p2p.cap_seqs; j++) {
            if (!old[j].used)
                continue;
            for (i = (size_t)(old[j].key * 0x9e3779b97f4a7c15ull >> 20) & (cap - 1);
                 fresh[i].used; i = (i + 1) & (cap - 1))
                ;
            fresh[i] = old[j];
        }
        free(old);
        p2p.seqs = fresh;
        p2p.cap_seqs = cap;
    }
    for (i = (size_t)(key * 0x9e3779b97f4a7c15ull >> 20) & (p2p.cap_seqs - 1);
         p2p.seqs[i].used && p2p.seqs[i].key != key; i = (i + 1) & (p2p.cap_seqs - 1))
        ;
    if (!p2p.seqs[i].used) {
        p2p.seqs[i].used = 1;
        p2p.seqs[i].key = key;
        p2p.n_seqs++;
    }
    return &p2p.seqs[i];
}

static uint64_t p2p_tag(const struct request *r, int payload)
{
    return (payload ? P2P_TAG_PAYLOAD : 0) | (uint64_t)(uint32_t)r->tag << 31 |
           (uint64_t)r->comm_id << 16 | (r->seq & P2P_SEQ_MASK);
}

static void unlink_request(struct request **list, struct request *r)
{
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        *list = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
}

static void push_request(struct request **list, struct request *r)
{
    r->prev = NULL;
    r->next = *list;
    if (*list != NULL)
        (*list)->prev = r;
    *list = r;
}

/* At the end: the self receives wait in posting order. */
static void append_request(struct request **list, struct request *r)
{
    struct request **p = list, *last = NULL;

    while (*p != NULL) {
        last = *p;
        p = &(*p)->next;
    }
    r->prev = last;
    r->next = NULL;
    *p = r;
}

/* ---- derived datatypes in calls ----------------------------------------------------
 *
 * The calls below work on predefined types in buffers that hold elements
 * one after the other. A derived type reaches them as its twin (types.h):
 * k = nbase elements of its base type per element, or k = its packed
 * bytes as MPI_BYTE where its leaves differ. The program's data is packed
 * into scratch before the call (in) and unpacked from it at the call's end
 * (out: when a blocking call returns, when a nonblocking one's request
 * completes, when a receive arrives); a dense type's twin is the program's
 * buffer itself. A reduction with a user's operation keeps the derived type,
 * whose handle its function is given, in scratch of the program's layout
 * that holds the type's data and nothing else. */

struct stage {
    struct stage *next;
    const struct mpi_type *type; /* held until the stage ends */
    char *user, *scratch;
    int out;         /* unpacked at the end */
    int same_layout; /* scratch in the program's layout (a user's operation) */
    size_t n;        /* ranges of elements: first[i] .. first[i] + count[i] - 1, */
    size_t *first, *count; /* packed from (first[i] - lo) * packed in scratch */
    size_t lo;
    void *owned;     /* arrays that live as long as the stage (counts, displacements) */
};

/* The stages of the call under way, until a request takes them. */
static struct stage *staged;

struct twin {
    void *buf;
    MPI_Datatype type;
    int k; /* twin elements per element */
};

/* count * k as a count of the twin; fatal past an int. */
static int scaled(const char *call, int count, int k)
{
    int n;

    if (count < 0)
        mpi_fatal(MPI_ERR_COUNT, "%s: negative count %d", call, count);
    if (__builtin_mul_overflow(count, k, &n))
        mpi_fatal(MPI_ERR_COUNT, "%s: %d elements of this derived datatype are more than %d of "
                  "its base type", call, count, INT_MAX);
    return n;
}

/* A derived type fit for communication: committed. */
static const struct mpi_type *committed_type(const char *call, MPI_Datatype datatype)
{
    const struct mpi_type *t = type_of(call, datatype);

    if (t->derived && !t->committed)
        mpi_fatal(MPI_ERR_TYPE, "%s: a derived datatype used before MPI_Type_commit", call);
    return t;
}

static struct twin twin_of(const char *call, const struct mpi_type *t, void *buf,
                           MPI_Datatype datatype)
{
    if (!t->derived)
        return (struct twin){buf, datatype, 1};
    if (t->base != MPI_DATATYPE_NULL) {
        if (t->nbase > INT_MAX)
            mpi_fatal(MPI_ERR_TYPE, "%s: a derived datatype of more than %d elements", call, INT_MAX);
        return (struct twin){buf, t->base, (int)t->nbase};
    }
    if (t->packed > INT_MAX)
        mpi_fatal(MPI_ERR_TYPE, "%s: a derived datatype of more than %d bytes", call, INT_MAX);
    return (struct twin){buf, MPI_BYTE, (int)t->packed};
}

/* A new stage of `ranges` ranges for buf, its scratch `bytes`. */
static struct stage *new_stage(const char *call, const struct mpi_type *t, void *buf,
                               size_t ranges, size_t bytes, int in, int out)
{
    struct stage *st = scratch_alloc(call, sizeof *st + 2 * ranges * sizeof(size_t));

    memset(st, 0, sizeof *st + 2 * ranges * sizeof(size_t));
    st->type = t;
    st->user = buf;
    st->out = out;
    st->n = ranges;
    st->first = (size_t *)(st + 1);
    st->count = st->first + ranges;
    /* A stage of no range only owns what stage_v made (its arrays): no
     * scratch. Else at least a byte: a twin's buffer is never NULL. */
    st->scratch = ranges ? scratch_alloc(call, bytes ? bytes : 1) : NULL;
    if (!in && bytes)
        memset(st->scratch, 0, bytes); /* nothing of the program's, and nothing stale */
    mpi_type_hold(t);
    st->next = staged;
    staged = st;
    return st;
}

static void stage_pack(struct stage *st)
{
    for (size_t i = 0; i < st->n; i++)
        if (st->count[i] != 0)
            mpi_type_pack(st->type, st->user, st->first[i], st->count[i],
                          st->scratch + (st->first[i] - st->lo) * st->type->packed);
}

/* `elems` elements of datatype at buf, for a call that reads them (in)
 * and/or writes them (out). MPI_IN_PLACE, NULL and no elements stay as
 * they are. */
static struct twin stage(const char *call, void *buf, MPI_Datatype datatype, size_t elems, int in,
                         int out)
{
    const struct mpi_type *t = committed_type(call, datatype);
    struct twin tw = twin_of(call, t, buf, datatype);

    if (!t->derived || mpi_type_dense(t) || buf == NULL || buf == MPI_IN_PLACE || elems == 0)
        return tw;
    if (t->packed != 0 && elems > SIZE_MAX / t->packed)
        mpi_fatal(MPI_ERR_COUNT, "%s: buffer size overflows", call);
    struct stage *st = new_stage(call, t, buf, 1, elems * t->packed, in, out);
    st->count[0] = elems;
    if (in)
        stage_pack(st);
    tw.buf = st->scratch;
    return tw;
}

/* The same for a `v` layout: n blocks, block i counts[i] elements at
 * element displs[i]; the twin's counts and displacements (in its elements)
 * into *tcounts and *tdispls, alive until the stage ends. */
static struct twin stage_v(const char *call, void *buf, MPI_Datatype datatype, size_t n,
                           const int counts[], const int displs[], int in, int out,
                           const int **tcounts, const int **tdispls)
{
    const struct mpi_type *t = committed_type(call, datatype);
    struct twin tw = twin_of(call, t, buf, datatype);
    long long lo = 0, hi = 0;
    int any = 0;

    *tcounts = counts;
    *tdispls = displs;
    if (!t->derived || counts == NULL || displs == NULL)
        return tw;
    for (size_t i = 0; i < n; i++)
        if (counts[i] > 0) {
            if (!any || displs[i] < lo) lo = displs[i];
            if (!any || (long long)displs[i] + counts[i] > hi) hi = (long long)displs[i] + counts[i];
            any = 1;
        }
    int dense = mpi_type_dense(t) || buf == NULL || buf == MPI_IN_PLACE || !any;
    int *arrays = scratch_alloc(call, mul_size(call, 2 * n, sizeof *arrays));
    for (size_t i = 0; i < n; i++) {
        arrays[i] = scaled(call, counts[i], tw.k);
        arrays[n + i] = scaled(call, dense ? displs[i] : (int)(displs[i] - lo), tw.k);
    }
    *tcounts = arrays;
    *tdispls = arrays + n;
    size_t bytes = dense ? 0 : mul_size(call, (size_t)(hi - lo), t->packed);
    struct stage *st = dense ? new_stage(call, t, buf, 0, 0, 0, 0) : new_stage(call, t, buf, n, bytes, in, out);
    st->owned = arrays;
    if (dense)
        return tw;
    st->lo = (size_t)lo;
    for (size_t i = 0; i < n; i++) {
        st->first[i] = (size_t)displs[i];
        st->count[i] = counts[i] > 0 ? (size_t)counts[i] : 0;
    }
    if (in)
        stage_pack(st);
    tw.buf = st->scratch;
    return tw;
}

/* A reduction's buffer: a predefined operation runs on the twin, which
 * must be of one base type; a user's operation on the derived type itself,
 * in scratch of the program's layout (its data within the extent). */
static struct twin stage_reduce(const char *call, void *buf, MPI_Datatype datatype, MPI_Op op,
                                size_t elems, int in, int out)
{
    const struct mpi_type *t = committed_type(call, datatype);

    if (!t->derived)
        return (struct twin){buf, datatype, 1};
    if (!user_op(op)) {
        if (t->base == MPI_DATATYPE_NULL)
            mpi_fatal(MPI_ERR_OP, "%s: a predefined operation on a derived datatype whose "
                      "elements are not all of one predefined type", call);
        return stage(call, buf, datatype, elems, in, out);
    }
    if (mpi_type_dense(t) || buf == NULL || buf == MPI_IN_PLACE || elems == 0)
        return (struct twin){buf, datatype, 1};
    if (t->true_lb < 0 || t->true_ub > (MPI_Aint)t->extent)
        mpi_fatal(MPI_ERR_UNSUPPORTED_OPERATION, "%s: a user operation on a derived datatype "
                  "with data outside [0, extent) is not supported by eccl", call);
    struct stage *st = new_stage(call, t, buf, 1, mul_size(call, elems, t->extent), 0, out);
    st->same_layout = 1;
    st->count[0] = elems;
    if (in)
        mpi_type_copy_blocks(t, buf, elems, st->scratch);
    return (struct twin){st->scratch, datatype, 1};
}

/* Ends the stages of list s: unpacks those that write (when `unpack`, at
 * most `bytes` packed bytes: a short message) and frees them. */
static void end_stages(struct stage *s, int unpack, size_t bytes)
{
    while (s != NULL) {
        struct stage *next = s->next;
        for (size_t i = 0; unpack && s->out && i < s->n; i++) {
            if (s->count[i] == 0)
                continue;
            if (s->same_layout) {
                mpi_type_copy_blocks(s->type, s->scratch, s->count[i], s->user);
                continue;
            }
            size_t at = (s->first[i] - s->lo) * s->type->packed;
            if (at >= bytes)
                continue;
            mpi_type_unpack(s->type, s->scratch + at, s->first[i], s->count[i], s->user, bytes - at);
        }
        mpi_type_drop(s->type);
        free(s->scratch);
        free(s->owned);
        free(s);
        s = next;
    }
}

/* The stages of the call under way, for the request that now owns them. */
static struct stage *take_stages(void)
{
    struct stage *s = staged;

    staged = NULL;
    return s;
}

/* The end of a call that staged: its output unpacked if it succeeded. */
static int staged_end(int result)
{
    end_stages(take_stages(), result == MPI_SUCCESS, SIZE_MAX);
    return result;
}

/* A send whose buffer the program may reuse: done, or eager (copied into
 * its header). A receive: done. */
static int user_done(const struct request *r)
{
    return r->step == STEP_DONE || (r->kind == REQ_SEND && r->bytes <= P2P_INLINE);
}

static void free_request(struct request *r)
{
    end_stages(r->stages, 0, 0);
    free(r);
}

/* A receive into a derived datatype's scratch unpacks what arrived. */
static void finish_request(struct request *r)
{
    r->step = STEP_DONE;
    if (r->kind == REQ_RECV && r->error == MPI_SUCCESS) {
        end_stages(r->stages, 1, r->got);
        r->stages = NULL;
    }
    if (r->detached)
        free_request(r);
}

/* Whoever waited for r is done with it: freed now, or once its op ends. */
static void let_go(struct request *r)
{
    if (r->step == STEP_DONE)
        free_request(r);
    else
        r->detached = 1;
}

static int progress_all(void);

static void poll_pause(unsigned *round);

/* Posts r's next eccl op (to or from another rank). A new message's first
 * op (`fresh`) waits while the shim has P2P_MAX_OPS in flight; a payload
 * takes its header's place. */
static void post_step(const char *call, struct request *r, int fresh)
{
    eccl_result rc;
    unsigned round = 0;

    while (fresh && p2p.active_ops >= P2P_MAX_OPS)
        if (progress_all() == 0)
            poll_pause(&round);
    pin_to(r->comm);
    if (r->step == STEP_HEADER)
        rc = r->kind == REQ_SEND
                 ? eccl_send_async(world.comm, &r->hdr, sizeof r->hdr, ECCL_U8,
                                   (uint32_t)r->ring_peer, p2p_tag(r, 0), &r->op)
                 : eccl_recv_async(world.comm, &r->hdr, sizeof r->hdr, ECCL_U8,
                                   (uint32_t)r->ring_peer, p2p_tag(r, 0), &r->op);
    else
        rc = r->kind == REQ_SEND
                 ? eccl_send_async(world.comm, r->buf + P2P_INLINE, r->bytes - P2P_INLINE, ECCL_U8,
                                   (uint32_t)r->ring_peer, p2p_tag(r, 1), &r->op)
                 : eccl_recv_async(world.comm, r->buf + P2P_INLINE, r->got - P2P_INLINE, ECCL_U8,
                                   (uint32_t)r->ring_peer, p2p_tag(r, 1), &r->op);
    check_eccl(call, r->kind == REQ_SEND ? "eccl_send_async" : "eccl_recv_async", rc);
    push_request(&p2p.active, r);
    p2p.active_ops++;
}

/* r's eccl op ended with rc: on to the next step. */
static void coll_finish(struct request *r, eccl_result rc);

/* r's eccl op ended with rc: checked as a call on r's communicator (a
 * process failure there is r's error, MPI_SUCCESS otherwise), without
 * touching the call under way, inside which the op may have ended. */
static int check_request(struct request *r, const char *call, const char *what, eccl_result rc)
{
    MPI_Comm was = comms.current;
    int pending = comms.error, pending_retry = comms.retry, retry;

    if (r->comm == MPI_COMM_NULL) {
        /* Its communicator was freed meanwhile (MPI_Comm_free): judged by
         * the handler it had. */
        r->error = lost_rank(rc) && r->freed_errors_return ? MPIX_ERR_PROC_FAILED : MPI_SUCCESS;
        if (r->error == MPI_SUCCESS)
            check_eccl(call, what, rc); /* fatal unless rc is ECCL_OK */
        return 0;
    }
    comms.current = r->comm;
    comms.error = MPI_SUCCESS;
    comms.retry = 0;
    check_coll(call, what, rc);
    r->error = call_result();
    retry = comms.retry;
    comms.current = was;
    comms.error = pending;
    comms.retry = pending_retry;
    return retry; /* 1: cut short by a revoke's re-form, r's op must run again */
}

static void step_done(struct request *r, eccl_result rc)
{
    char call[96];

    if (r->kind == REQ_COLL) {
        coll_finish(r, rc);
        return;
    }
    snprintf(call, sizeof call, "%s rank %d (tag %d)",
             r->kind == REQ_SEND ? "a send to" : "a receive from", r->peer, r->tag);
    r->op = NULL;
    unlink_request(&p2p.active, r);
    p2p.active_ops--;
    /* A process failure ends the message; a revoke's re-form of another
     * communicator's posts its step again, on the new ring, where its
     * peer does the same (a message's two parties see one outcome). */
    if (check_request(r, call, r->kind == REQ_SEND ? "eccl_send" : "eccl_recv", rc)) {
        post_step(call, r, 0);
        return;
    }
    if (r->error != MPI_SUCCESS) {
        finish_request(r);
        return;
    }
    if (r->kind == REQ_RECV && r->step == STEP_HEADER) {
        if (r->hdr.tag != (uint32_t)r->tag || r->hdr.seq != (r->seq & P2P_SEQ_MASK))
            mpi_fatal(MPI_ERR_INTERN, "%s: the header says tag %u message %u, message %u expected",
                  call, r->hdr.tag, r->hdr.seq, r->seq & P2P_SEQ_MASK);
        if (r->hdr.bytes > r->bytes)
            mpi_fatal(MPI_ERR_TRUNCATE, "%s: the message has %llu bytes, more than the receive "
                  "buffer's %zu", call, (unsigned long long)r->hdr.bytes, r->bytes);
        r->got = (size_t)r->hdr.bytes;
        if (r->got != 0)
            memcpy(r->buf, r->hdr.data, r->got < P2P_INLINE ? r->got : P2P_INLINE);
    }
    if (r->step == STEP_HEADER && (r->kind == REQ_SEND ? r->bytes : r->got) > P2P_INLINE) {
        r->step = STEP_PAYLOAD;
        post_step(call, r, 0);
        return;
    }
    finish_request(r);
}

static int sub_progress(void);

/* One look at every op in flight; the number that ended. */
static int progress_all(void)
{
    int ended = 0;

    for (struct request *r = p2p.active, *next; r != NULL; r = next) {
        int done = 0;
        eccl_result rc;

        next = r->next;
        rc = eccl_test(r->op, &done, NULL);
        if (rc != ECCL_OK || done) {
            /* step_done may post r again (at the list's head) or free
             * it; next is still on the list either way. */
            step_done(r, rc);
            ended++;
        }
    }
    return ended + sub_progress();
}

/* Whether some request other than `except` will need this rank to post its
 * next step (the payload after the header): then no wait may block in
 * eccl. A receive's size is unknown until its header comes; one whose
 * buffer holds no more than the header carries cannot have a payload. */
static int p2p_needs_progress(const struct request *except)
{
    for (const struct request *r = p2p.active; r != NULL; r = r->next)
        if (r != except && r->step == STEP_HEADER && r->bytes > P2P_INLINE)
            return 1;
    return 0;
}

/* A poll loop's pause: yield first, then sleep a little. */
static void poll_pause(unsigned *round)
{
    struct timespec pause = {0, *round < 1000 ? 10000 : 100000};

    if (*round < 100)
        sched_yield();
    else
        nanosleep(&pause, NULL);
    (*round)++;
}

/* Waits for eccl request `op` (a collective's) while the point-to-point
 * requests move on. */
static eccl_result wait_progressing(eccl_request *op, eccl_reduce_info *info)
{
    unsigned round = 0;

    for (;;) {
        int done = 0;
        eccl_result rc;

        if (!p2p_needs_progress(NULL))
            return eccl_wait(op, info);
        rc = eccl_test(op, &done, info);
        if (rc != ECCL_OK || done)
            return rc;
        if (progress_all() != 0)
            round = 0;
        else
            poll_pause(&round);
    }
}

/* A subset communicator's forms of the eccl collectives (below). */
#define SUB_DECLARE(fn, ...) static eccl_result sub_##fn(__VA_ARGS__, eccl_reduce_info *info);
SUB_DECLARE(barrier_op, eccl_comm *, uint64_t)
SUB_DECLARE(eccl_broadcast, eccl_comm *, const void *, void *, size_t, eccl_dtype, uint32_t, uint64_t)
SUB_DECLARE(eccl_allgather, eccl_comm *, const void *, void *, size_t, eccl_dtype, uint64_t)
SUB_DECLARE(eccl_allgatherv, eccl_comm *, const void *, void *, const size_t *, const size_t *,
            eccl_dtype, uint64_t)
SUB_DECLARE(eccl_alltoall, eccl_comm *, const void *, void *, size_t, eccl_dtype, uint64_t)
SUB_DECLARE(eccl_alltoallv, eccl_comm *, const void *, const size_t *, const size_t *, void *,
            const size_t *, const size_t *, eccl_dtype, uint64_t)
SUB_DECLARE(eccl_allreduce, eccl_comm *, const void *, void *, size_t, eccl_dtype, eccl_op, uint64_t)
SUB_DECLARE(eccl_reduce, eccl_comm *, const void *, void *, size_t, eccl_dtype, eccl_op, uint32_t,
            uint64_t)
SUB_DECLARE(eccl_reduce_scatter, eccl_comm *, const void *, void *, size_t, eccl_dtype, eccl_op,
            uint64_t)
SUB_DECLARE(eccl_reduce_scatterv, eccl_comm *, const void *, void *, const size_t *, eccl_dtype,
            eccl_op, uint64_t)

/* Runs collective `fn` of eccl: as it is, unless a point-to-point request
 * may need this rank's help meanwhile (p2p_needs_progress); then as
 * fn##_async, waited for while those requests move on. A subset
 * communicator's runs as messages (sub_<fn>). Nothing once the call has
 * failed. The arguments are fn's but the last (info). */
#define RUN_COLL(call, fn, ...)                                                           \
    do {                                                                                  \
        eccl_reduce_info info_ = {0};                                                     \
        eccl_result rc_;                                                                  \
        if (comms.error != MPI_SUCCESS)                                                   \
            break;                                                                        \
        comms.retry = 0;                                                                  \
        if (comm_state(comms.current)->ranks != NULL) {                                   \
            rc_ = sub_##fn(__VA_ARGS__, &info_);                                          \
        } else if (pin_to(comms.current), p2p_needs_progress(NULL)) {                     \
            eccl_request *coll_op_ = NULL;                                                \
            check_eccl(call, #fn "_async", fn##_async(__VA_ARGS__, &coll_op_));           \
            rc_ = wait_progressing(coll_op_, &info_);                                     \
        } else {                                                                          \
            rc_ = fn(__VA_ARGS__, &info_);                                                \
        }                                                                                 \
        comms.reuse_tag = 0;                                                              \
        check_coll(call, #fn, rc_);                                                       \
        /* Cut short by a revoke's re-form: again, under the same tag. */                \
        if (comms.retry)                                                                  \
            comms.reuse_tag = 1;                                                          \
    } while (comms.retry)

static struct request *new_request(const char *call, int kind, MPI_Comm comm, int peer, int tag,
                                   void *buf, size_t bytes);
static MPI_Request handle_of(const char *call, struct request *r);

/* ---- nonblocking collectives ----------------------------------------------------------
 *
 * MPI_I<coll> runs the blocking call's code with an MPI_Request to fill:
 * the eccl collective starts as fn##_async and its op joins the requests
 * in flight (progress_all tests it with the point-to-point ones; eccl's
 * thread moves it), and what the blocking call does after eccl returns
 * (struct coll_after) waits for the op's end. A collective's status is
 * empty. Calls that are done before they reach eccl (a world of one, no
 * data) return a request that is complete at once. */

/* fn##_keep(k, fn's arguments but the last): k describes the call. */
static void barrier_op_keep(struct ecall *k, eccl_comm *comm, uint64_t tag)
{
    *k = (struct ecall){.kind = EC_BARRIER, .comm = comm, .tag = tag};
}

static void eccl_broadcast_keep(struct ecall *k, eccl_comm *comm, const void *send, void *recv,
                                size_t count, eccl_dtype dtype, uint32_t root, uint64_t tag)
{
    *k = (struct ecall){.kind = EC_BROADCAST, .comm = comm, .send = send, .recv = recv, .count = count,
                        .dtype = dtype, .root = root, .tag = tag};
}

static void eccl_allgather_keep(struct ecall *k, eccl_comm *comm, const void *send, void *recv,
                                size_t count, eccl_dtype dtype, uint64_t tag)
{
    *k = (struct ecall){.kind = EC_ALLGATHER, .comm = comm, .send = send, .recv = recv, .count = count,
                        .dtype = dtype, .tag = tag};
}

static void eccl_allgatherv_keep(struct ecall *k, eccl_comm *comm, const void *send, void *recv,
                                 const size_t *counts, const size_t *displs, eccl_dtype dtype,
                                 uint64_t tag)
{
    *k = (struct ecall){.kind = EC_ALLGATHERV, .comm = comm, .send = send, .recv = recv,
                        .v = {counts, displs}, .dtype = dtype, .tag = tag};
}

static void eccl_alltoall_keep(struct ecall *k, eccl_comm *comm, const void *send, void *recv,
                               size_t count, eccl_dtype dtype, uint64_t tag)
{
    *k = (struct ecall){.kind = EC_ALLTOALL, .comm = comm, .send = send, .recv = recv, .count = count,
                        .dtype = dtype, .tag = tag};
}

static void eccl_alltoallv_keep(struct ecall *k, eccl_comm *comm, const void *send, const size_t *sendcounts,
                                const size_t *sdispls, void *recv, const size_t *recvcounts,
                                const size_t *rdispls, eccl_dtype dtype, uint64_t tag)
{
    *k = (struct ecall){.kind = EC_ALLTOALLV, .comm = comm, .send = send, .recv = recv,
                        .v = {sendcounts, sdispls, recvcounts, rdispls}, .dtype = dtype, .tag = tag};
}

static void eccl_allreduce_keep(struct ecall *k, eccl_comm *comm, const void *send, void *recv,
                                size_t count, eccl_dtype dtype, eccl_op op, uint64_t tag)
{
    *k = (struct ecall){.kind = EC_ALLREDUCE, .comm = comm, .send = send, .recv = recv, .count = count,
                        .dtype = dtype, .op = op, .tag = tag};
}

static void eccl_reduce_keep(struct ecall *k, eccl_comm *comm, const void *send, void *recv, size_t count,
                             eccl_dtype dtype, eccl_op op, uint32_t root, uint64_t tag)
{
    *k = (struct ecall){.kind = EC_REDUCE, .comm = comm, .send = send, .recv = recv, .count = count,
                        .dtype = dtype, .op = op, .root = root, .tag = tag};
}

static void eccl_reduce_scatter_keep(struct ecall *k, eccl_comm *comm, const void *send, void *recv,
                                     size_t count, eccl_dtype dtype, eccl_op op, uint64_t tag)
{
    *k = (struct ecall){.kind = EC_REDUCE_SCATTER, .comm = comm, .send = send, .recv = recv,
                        .count = count, .dtype = dtype, .op = op, .tag = tag};
}

static void eccl_reduce_scatterv_keep(struct ecall *k, eccl_comm *comm, const void *send, void *recv,
                                      const size_t *counts, eccl_dtype dtype, eccl_op op, uint64_t tag)
{
    *k = (struct ecall){.kind = EC_REDUCE_SCATTERV, .comm = comm, .send = send, .recv = recv,
                        .v = {counts}, .dtype = dtype, .op = op, .tag = tag};
}

/* Starts the kept call k (its _async form). */
static eccl_result ecall_start(const struct ecall *k, eccl_request **op)
{
    switch (k->kind) {
    case EC_BARRIER: return eccl_barrier_async(k->comm, k->tag, op);
    case EC_BROADCAST:
        return eccl_broadcast_async(k->comm, k->send, k->recv, k->count, k->dtype, k->root, k->tag, op);
    case EC_ALLGATHER: return eccl_allgather_async(k->comm, k->send, k->recv, k->count, k->dtype, k->tag, op);
    case EC_ALLGATHERV:
        return eccl_allgatherv_async(k->comm, k->send, k->recv, k->v[0], k->v[1], k->dtype, k->tag, op);
    case EC_ALLTOALL: return eccl_alltoall_async(k->comm, k->send, k->recv, k->count, k->dtype, k->tag, op);
    case EC_ALLTOALLV:
        return eccl_alltoallv_async(k->comm, k->send, k->v[0], k->v[1], k->recv, k->v[2], k->v[3], k->dtype,
                                    k->tag, op);
    case EC_ALLREDUCE:
        return eccl_allreduce_async(k->comm, k->send, k->recv, k->count, k->dtype, k->op, k->tag, op);
    case EC_REDUCE:
        return eccl_reduce_async(k->comm, k->send, k->recv, k->count, k->dtype, k->op, k->root, k->tag, op);
    case EC_REDUCE_SCATTER:
        return eccl_reduce_scatter_async(k->comm, k->send, k->recv, k->count, k->dtype, k->op, k->tag, op);
    case EC_REDUCE_SCATTERV:
        return eccl_reduce_scatterv_async(k->comm, k->send, k->recv, k->v[0], k->dtype, k->op, k->tag, op);
    }
    return ECCL_ERR_INVALID_ARG;
}

static void run_after(struct coll_after *a)
{
    if (a->move_bytes != 0 && a->move_to != a->move_from)
        memmove(a->move_to, a->move_from, a->move_bytes);
    free(a->scratch[0]);
    free(a->scratch[1]);
    end_stages(a->stages, 1, SIZE_MAX);
    *a = NOTHING_AFTER;
}

static void coll_finish(struct request *r, eccl_result rc)
{
    r->op = NULL;
    unlink_request(&p2p.active, r);
    p2p.active_ops--;
    if (check_request(r, r->call, r->call, rc)) {
        /* Cut short by a revoke's re-form: again, on the new ring. */
        pin_to(r->comm);
        check_eccl(r->call, "starting it again", ecall_start(&r->ecall, &r->op));
        push_request(&p2p.active, r);
        p2p.active_ops++;
        return;
    }
    run_after(&r->after);
    finish_request(r);
}

static MPI_Request coll_request(const char *call, eccl_request *op, struct coll_after after,
                                const struct ecall *k)
{
    struct request *r = new_request(call, REQ_COLL, comms.current, MPI_PROC_NULL, 0, NULL, 0);

    r->call = call;
    r->after = after;
    r->after.stages = take_stages();
    if (k != NULL)
        r->ecall = *k;
    if (op == NULL) {
        run_after(&r->after);
        r->step = STEP_DONE;
    } else {
        r->op = op;
        r->step = STEP_PAYLOAD; /* nothing for the shim to post */
        push_request(&p2p.active, r);
        p2p.active_ops++;
    }
    return handle_of(call, r);
}

/* A subset communicator's nonblocking collective: sub_<fn> posts its
 * messages and leaves the rest for when they are in (sub_progress). */
static void sub_begin(const char *call)
{
    p2p.starting = scratch_alloc(call, sizeof *p2p.starting);
    memset(p2p.starting, 0, sizeof *p2p.starting);
}

static MPI_Request sub_request(const char *call, struct coll_after after)
{
    struct request *r = new_request(call, REQ_COLL, comms.current, MPI_PROC_NULL, 0, NULL, 0);

    r->call = call;
    r->after = after;
    r->after.stages = take_stages();
    r->later = p2p.starting;
    p2p.starting = NULL;
    r->step = STEP_PAYLOAD;
    push_request(&p2p.subs, r);
    sub_progress(); /* nothing to wait for (a world of one message-less) ends now */
    return handle_of(call, r);
}

/* A call done before it reached eccl: its result (a process failure of
 * its communicator, or MPI_SUCCESS), and for a nonblocking one a request
 * complete at once (none on failure). */
static int done_now(const char *call, MPI_Request *nb)
{
    int e = call_result();

    if (nb != NULL)
        *nb = e != MPI_SUCCESS ? MPI_REQUEST_NULL : coll_request(call, NULL, NOTHING_AFTER, NULL);
    return e;
}

/* The request argument of an MPI_I<coll>. */
static MPI_Request *nb_arg(const char *call, MPI_Request *request)
{
    if (request == NULL)
        mpi_fatal(MPI_ERR_REQUEST, "%s: request is NULL", call);
    return request;
}

/* A collective that is several eccl calls and work between them (a
 * reduction computed here) has no nonblocking form yet. */
static void blocking_only(const char *call, MPI_Request *nb, const char *what)
{
    if (nb != NULL)
        mpi_fatal(MPI_ERR_UNSUPPORTED_OPERATION, "%s: %s is computed here from every rank's input, "
              "which has no nonblocking form yet (the blocking call does it)", call, what);
}

/* Collective fn of eccl, blocking (nb NULL: RUN_COLL, then `after`) or
 * started for MPI request *nb. */
#define COLL(call, nb, after, fn, ...)                                                    \
    do {                                                                                  \
        struct coll_after after_ = (after);                                               \
        if ((nb) == NULL) {                                                               \
            RUN_COLL(call, fn, __VA_ARGS__);                                              \
            run_after(&after_);                                                           \
        } else {                                                                          \
            eccl_request *nb_op_ = NULL;                                                  \
            if (comms.error != MPI_SUCCESS) {                                             \
                run_after(&after_);                                                       \
                *(nb) = MPI_REQUEST_NULL;                                                 \
            } else if (comm_state(comms.current)->ranks != NULL) {                        \
                eccl_reduce_info sub_info_;                                               \
                sub_begin(call);                                                          \
                (void)sub_##fn(__VA_ARGS__, &sub_info_);                                  \
                *(nb) = sub_request(call, after_);                                        \
            } else {                                                                      \
                struct ecall k_;                                                          \
                fn##_keep(&k_, __VA_ARGS__);                                              \
                pin_to(comms.current);                                                    \
                check_eccl(call, #fn "_async", ecall_start(&k_, &nb_op_));                \
                *(nb) = coll_request(call, nb_op_, after_, &k_);                          \
            }                                                                             \
        }                                                                                 \
    } while (0)

/* Until r is done (for a send: until its buffer may be reused). */
static void wait_request(const char *call, struct request *r)
{
    unsigned round = 0;

    while (!user_done(r)) {
        if (r->self)
            mpi_fatal(MPI_ERR_OTHER, "%s: a receive from this rank itself (tag %d) has no matching "
                  "send, and none can come while this rank waits (a deadlock)", call, r->tag);
        if (progress_all() != 0) {
            round = 0;
            continue;
        }
        if (r->op != NULL && !p2p_needs_progress(r)) {
            eccl_request *op = r->op;

            step_done(r, eccl_wait(op, NULL));
            continue;
        }
        poll_pause(&round);
    }
}

/* ---- requests ------------------------------------------------------------------------ */

static struct request *new_request(const char *call, int kind, MPI_Comm comm, int peer, int tag,
                                   void *buf, size_t bytes)
{
    struct request *r = calloc(1, sizeof *r);

    if (r == NULL)
        mpi_fatal(MPI_ERR_NO_MEM, "%s: cannot allocate a request", call);
    r->kind = kind;
    r->step = STEP_HEADER;
    r->handle = -1;
    r->comm = comm;
    r->peer = peer;
    r->tag = tag;
    r->buf = buf;
    r->bytes = bytes;
    return r;
}

/* A handle for r, which the program now holds. */
static MPI_Request handle_of(const char *call, struct request *r)
{
    int index;

    if (p2p.n_free > 0) {
        index = p2p.free_handles[--p2p.n_free];
    } else {
        if (p2p.n_handles == p2p.cap_handles) {
            int cap = p2p.cap_handles != 0 ? 2 * p2p.cap_handles : 64;
            struct request **h = realloc(p2p.handles, (size_t)cap * sizeof *h);
            int *f = h != NULL ? realloc(p2p.free_handles, (size_t)cap * sizeof *f) : NULL;

            if (h != NULL)
                p2p.handles = h;
            if (f == NULL || cap > REQUEST_HANDLE_MAX)
                mpi_fatal(MPI_ERR_NO_MEM, "%s: cannot hold %d requests", call, cap);
            p2p.free_handles = f;
            p2p.cap_handles = cap;
        }
        index = p2p.n_handles++;
    }
    p2p.handles[index] = r;
    r->handle = index;
    return (MPI_Request)(REQUEST_HANDLE_BASE + index);
}

static struct request *request_of(const char *call, MPI_Request handle)
{
    unsigned index = (unsigned)handle - (unsigned)REQUEST_HANDLE_BASE;

    if (index >= (unsigned)p2p.n_handles || p2p.handles[index] == NULL)
        mpi_fatal(MPI_ERR_REQUEST, "%s: invalid request 0x%x (not made by MPI_Isend or MPI_Irecv, "
              "or already completed)", call, (unsigned)handle);
    return p2p.handles[index];
}

/* The program lets go of r's handle (and of r). */
static void drop_handle(struct request *r)
{
    p2p.handles[r->handle] = NULL;
    p2p.free_handles[p2p.n_free++] = r->handle;
    r->handle = -1;
    let_go(r);
}

static void empty_status(MPI_Status *status)
{
    if (status == MPI_STATUS_IGNORE)
        return;
    status->MPI_SOURCE = MPI_ANY_SOURCE;
    status->MPI_TAG = MPI_ANY_TAG;
    status->MPI_ERROR = MPI_SUCCESS;
    status->eccl_mpi_bytes = 0;
}

static void fill_status(const struct request *r, MPI_Status *status)
{
    if (status == MPI_STATUS_IGNORE)
        return;
    empty_status(status);
    status->MPI_ERROR = r->error;
    if (r->kind != REQ_RECV)
        return;
    status->MPI_SOURCE = r->peer;
    status->MPI_TAG = r->peer == MPI_PROC_NULL ? MPI_ANY_TAG : r->tag;
    status->eccl_mpi_bytes = (long long)r->got;
}

/* ---- messages to oneself ----------------------------------------------------------------- */

static void self_deliver(const char *call, struct request *r, const void *data, size_t bytes)
{
    if (bytes > r->bytes)
        mpi_fatal(MPI_ERR_TRUNCATE, "%s: a message of %zu bytes from this rank itself (tag %d) is "
              "more than the receive buffer's %zu", call, bytes, r->tag, r->bytes);
    if (bytes != 0)
        memcpy(r->buf, data, bytes);
    r->got = bytes;
    finish_request(r);
}

/* A send to this rank itself: to the first receive waiting for it, or
 * queued. Either way done at once. */
static void self_send(const char *call, MPI_Comm comm, int tag, const void *buf, size_t bytes)
{
    struct self_msg *m;

    for (struct request *r = p2p.self_waiting; r != NULL; r = r->next)
        if (r->comm == comm && r->tag == tag) {
            unlink_request(&p2p.self_waiting, r);
            self_deliver(call, r, buf, bytes);
            return;
        }
    if (bytes > SIZE_MAX - sizeof *m || (m = malloc(sizeof *m + bytes)) == NULL)
        mpi_fatal(MPI_ERR_NO_MEM, "%s: cannot hold a message of %zu bytes to this rank itself", call,
              bytes);
    m->next = NULL;
    m->comm = comm;
    m->tag = tag;
    m->bytes = bytes;
    if (bytes != 0)
        memcpy(m->data, buf, bytes);
    if (p2p.self_tail == NULL)
        p2p.self_tail = &p2p.self_queue;
    *p2p.self_tail = m;
    p2p.self_tail = &m->next;
}

/* A receive from this rank itself: the first queued message of its tag, or
 * it waits for a later send. */
static void self_recv(const char *call, struct request *r)
{
    for (struct self_msg **p = &p2p.self_queue, *m; (m = *p) != NULL; p = &m->next)
        if (m->comm == r->comm && m->tag == r->tag) {
            *p = m->next;
            if (p2p.self_tail == &m->next)
                p2p.self_tail = p;
            self_deliver(call, r, m->data, m->bytes);
            free(m);
            return;
        }
    append_request(&p2p.self_waiting, r);
}

/* ---- environment ---------------------------------------------------------------- */

/* ECCL_MPI_* as eccl-run sets them; a malformed value is fatal rather than
 * a silent singleton. */
static uint64_t env_number(const char *name, const char *text, uint64_t min, uint64_t max)
{
    uint64_t value;

    if (tool_parse_u64(text, min, max, &value) != 0)
        mpi_fatal(MPI_ERR_ARG, "MPI_Init: %s=\"%s\" is not a number in %llu..%llu", name, text,
              (unsigned long long)min, (unsigned long long)max);
    return value;
}

static void join_world(const char *master, int size, uint32_t timeout_ms)
{
    eccl_comm_params params;
    int64_t accepted = 0, rank = -1;
    eccl_result rc;

    eccl_comm_params_init(&params);
    params.master_addr = master;
    /* MPI has no collective timeout: one rank may compute for a long time
     * before it joins a call. The job's own limit (eccl-run --timeout)
     * bounds every wait instead; a dead peer is still noticed within
     * peer_timeout_ms by eccl's heartbeats. */
    params.op_timeout_ms = timeout_ms;
    check_eccl("MPI_Init", "eccl_comm_create", eccl_comm_create(&params, &world.comm));
    rc = eccl_comm_connect(world.comm);
    if (rc != ECCL_OK)
        mpi_fatal(mpi_error_of(rc), "MPI_Init: cannot join the eccl master at %s: %s", master,
              eccl_strerror(rc));
    rc = tool_admit_world(world.comm, size, timeout_ms, &accepted);
    if (rc != ECCL_OK)
        mpi_fatal(mpi_error_of(rc), "MPI_Init: waiting for %d ranks (%lld joined): %s", size,
              (long long)accepted, eccl_strerror(rc));
    if (accepted != size)
        mpi_fatal(MPI_ERR_OTHER, "MPI_Init: %lld ranks joined, %d expected", (long long)accepted,
              size);
    check_eccl("MPI_Init", "reading the rank",
               eccl_comm_get_attr(world.comm, ECCL_ATTR_RANK, &rank));
    check_eccl("MPI_Init", "reading the ring epoch",
               eccl_comm_get_attr(world.comm, ECCL_ATTR_EPOCH, &world.epoch));
    world.rank = (int)rank;
    /* Out of MPI_Init only once every rank is: one that saw the world
     * complete and went on could otherwise be lost (killed, say) while the
     * others still wait for the world to fill, which it never would again.
     * A rank lost before this barrier ends the job, whatever the error
     * handler: none is set yet. One lost after it (the ring may have
     * changed by the time this rank looks) is the next call's to see: the
     * world's epoch is the one read above, when all were in. Before it,
     * an all-gather of every process's eccl peer id: with them a rank later
     * tells which processes left the ring (learn_failures). (The all-gather
     * alone is no such barrier: a rank holding its result may return while
     * others still wait for its last blocks, and die; the soak of
     * scripts/soak_ulfm.sh lost 2 runs of 100 so, victims killed 0.16 and
     * 0.24 ms after MPI_Init.) */
    int64_t my_id = 0;
    eccl_reduce_info info = {0};
    check_eccl("MPI_Init", "reading the peer id", eccl_comm_get_attr(world.comm, ECCL_ATTR_PEER_ID, &my_id));
    uint64_t mine = (uint64_t)my_id;
    world.peer_ids = scratch_alloc("MPI_Init", mul_size("MPI_Init", (size_t)size, sizeof *world.peer_ids));
    world.failed = scratch_alloc("MPI_Init", mul_size("MPI_Init", (size_t)size, sizeof *world.failed));
    check_eccl("MPI_Init", "eccl_allgather",
               eccl_allgather(world.comm, &mine, world.peer_ids, 1, ECCL_U64, world.next_tag++, &info));
    if (info.world_size != (uint32_t)size)
        mpi_fatal(MPI_ERR_OTHER, "MPI_Init: a rank was lost before every rank was in (%u of %d)",
                  info.world_size, size);
    check_eccl("MPI_Init", "eccl_barrier", eccl_barrier(world.comm, world.next_tag++));
}

/* A rank of a multi-rank world that exits with status 0 without
 * MPI_Finalize is an erroneous program, and to its peers a lost rank: say
 * so, and make the status say failure. A non-zero status already does. */
static void exit_without_finalize(int status, void *unused)
{
    if (status != 0 || world.comm == NULL || world.finalized)
        return;
    mpi_fatal(MPI_ERR_OTHER, "the process exited without calling MPI_Finalize");
}

static void init_world(const char *call)
{
    const char *master = getenv("ECCL_MPI_MASTER");
    const char *size_text = getenv("ECCL_MPI_SIZE");
    const char *timeout_text = getenv("ECCL_MPI_TIMEOUT_MS");
    uint32_t timeout_ms;
    eccl_comm_params defaults;

    if (world.finalized)
        mpi_fatal(MPI_ERR_OTHER, "%s called after MPI_Finalize", call);
    if (world.initialized)
        mpi_fatal(MPI_ERR_OTHER, "%s called twice", call);
    world.rank = 0;
    world.size = 1;
    world.next_tag = 1;
    if ((master == NULL) != (size_text == NULL))
        mpi_fatal(MPI_ERR_ARG, "%s: ECCL_MPI_MASTER and ECCL_MPI_SIZE go together (eccl-run sets "
              "both)", call);
    if (master != NULL)
        world.size = (int)env_number("ECCL_MPI_SIZE", size_text, 1, INT_MAX);
    eccl_comm_params_init(&defaults);
    timeout_ms = timeout_text != NULL
                     ? (uint32_t)env_number("ECCL_MPI_TIMEOUT_MS", timeout_text, 1, UINT32_MAX)
                     : defaults.op_timeout_ms;
    /* A world of one has nobody to talk to: its collectives are copies. */
    if (world.size > 1) {
        join_world(master, world.size, timeout_ms);
        if (on_exit(exit_without_finalize, NULL) != 0)
            mpi_fatal(MPI_ERR_INTERN, "%s: on_exit failed", call);
    }
    world.initialized = 1;
}

int MPI_Init(int *argc, char ***argv)
{
    init_world("MPI_Init");
    return MPI_SUCCESS;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    if (required < MPI_THREAD_SINGLE || required > MPI_THREAD_MULTIPLE)
        mpi_fatal(MPI_ERR_ARG, "MPI_Init_thread: invalid thread level %d", required);
    if (provided == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Init_thread: provided is NULL");
    init_world("MPI_Init_thread");
    /* eccl itself is thread-safe, but the world's tag counter is not: MPI
     * calls from several threads must be serialized by the program. MPI
     * lets a library provide less than required; the program checks. */
    *provided = required < MPI_THREAD_SERIALIZED ? required : MPI_THREAD_SERIALIZED;
    return MPI_SUCCESS;
}

int MPI_Initialized(int *flag)
{
    if (flag == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Initialized: flag is NULL");
    *flag = world.initialized;
    return MPI_SUCCESS;
}

int MPI_Finalized(int *flag)
{
    if (flag == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Finalized: flag is NULL");
    *flag = world.finalized;
    return MPI_SUCCESS;
}

static int64_t survivors_allreduce(const char *call, uint64_t space, uint32_t which, void *in,
                                   void *out, size_t n, eccl_dtype dtype, size_t esize,
                                   eccl_op op, int vote_epoch, int64_t *rank, int64_t *size);

int MPI_Finalize(void)
{
    /* Messages sent and receives posted, this rank's, then the world's. */
    long long mine[4] = {1, 0, 0, 0}, all[4] = {0, 0, 0, 0};
    int pending = 0;

    mpi_require_initialized("MPI_Finalize");
    /* MPI: every request is completed before MPI_Finalize. One that is not
     * could never be, and its peer would wait for it until the timeout. */
    for (int i = 0; i < p2p.n_handles; i++)
        pending += p2p.handles[i] != NULL && !user_done(p2p.handles[i]);
    if (pending != 0)
        mpi_fatal(MPI_ERR_REQUEST, "MPI_Finalize: %d request(s) of MPI_Isend or MPI_Irecv were "
              "never completed by MPI_Wait, MPI_Waitall or MPI_Test", pending);
    mine[1] = p2p.sent;
    mine[2] = p2p.received;
    int lost = comms.world.failed, revoked = 0;
    for (int i = 0; i < comms.n; i++)
        lost |= comms.slots[i].used && comms.slots[i].failed;
    if (lost) {
        /* Ranks were lost, and the program went on without them
         * (MPI_ERRORS_RETURN): the survivors finish together. Messages to
         * or from the lost ones can never be matched, and each survivor's
         * calls were cut short at its own point: no counts to compare, a
         * vote of whoever is left, and their messages in flight end as
         * they may (the lost rank's with it). */
        int64_t rank, size;
        long long one = 1, here = 0;

        survivors_allreduce("MPI_Finalize", AGREE_SPACE, 0xffffffffu, &one, &here, 1, ECCL_I64,
                            sizeof one, ECCL_SUM, 0, &rank, &size);
        comms.world.errors_return = 1;
    } else if (world.comm != NULL) {
        /* Every rank has finished its collectives and its receives, and
         * nobody was lost before: this call's own world size says so. No
         * request needs this rank's help now (the eager sends still in
         * flight need none), so the call may block. A revoke's re-form
         * may cut it short: it runs again on the new ring. Messages of a
         * revoked communicator may have ended unmatched: a rank that knows
         * of a revoke says so, and the counts are not compared. */
        eccl_reduce_info info;
        uint64_t tag = world.next_tag++;
        eccl_result rc;

        take_notices();
        mine[3] = comms.n_revokes != 0;
        do {
            pin_to(MPI_COMM_WORLD);
            rc = eccl_allreduce(world.comm, mine, all, 4, ECCL_I64, ECCL_SUM, tag, &info);
        } while (lost_rank(rc) && reformed_now(&comms.world));
        check_eccl("MPI_Finalize", "eccl_allreduce", rc);
        revoked = all[3] != 0;
        if (all[0] != world.size || info.world_size != (uint32_t)world.size)
            mpi_fatal(MPI_ERR_OTHER, "MPI_Finalize: only %lld of %d ranks got here: the others were "
                  "lost", all[0], world.size);
    } else {
        memcpy(all, mine, sizeof all);
    }
    /* Every receive posted is done (above, on every rank), each with its
     * own send: any send more is one nobody received, and an eager one of
     * them would keep its sender here until the timeout. */
    if (!lost && !revoked && all[1] != all[2])
        mpi_fatal(MPI_ERR_OTHER, "MPI_Finalize: %lld message(s) sent were never received (MPI "
              "requires every send to be matched before MPI_Finalize)", all[1] - all[2]);
    /* The eager sends still in flight: their receivers hold them. No rank
     * has left yet (none gets past eccl_comm_leave below before this loop
     * ended on every rank), so a changed ring here is a real loss. */
    while (p2p.active != NULL) {
        struct request *r = p2p.active;

        step_done(r, eccl_wait(r->op, NULL));
    }
    if (world.comm != NULL) {
        /* The world leaves as a whole, agreed through the master: no rank
         * goes before every rank's sends and receives are settled (the
         * loop above, on each), so nothing of a rank that left is needed
         * any more, and its going is no loss: no ring re-forms among the
         * others, nobody dials a rank already gone. A rank lost before
         * the agreement fails it (after earlier losses the survivors go
         * all the same). The ring epoch is not read after it, since ranks
         * go at once. */
        eccl_result rc = eccl_comm_leave(world.comm);

        if (!lost || rc != ECCL_ERR_PEER_LOST)
            check_eccl("MPI_Finalize", "eccl_comm_leave", rc);
        eccl_comm_destroy(world.comm);
        world.comm = NULL;
    }
    free(world.peer_ids);
    free(world.failed);
    world.finalized = 1;
    return MPI_SUCCESS;
}

int MPI_Abort(MPI_Comm comm, int errorcode)
{
    /* The status must say failure even for errorcode 0; the launcher stops
     * the other ranks when this one exits. */
    int status = errorcode & 0xff;

    fflush(stdout);
    sayf("eccl_mpi: MPI_Abort(errorcode %d) on rank %d of %d", errorcode, world.rank, world.size);
    _exit(status != 0 ? status : 1);
}

int MPI_Get_version(int *version, int *subversion)
{
    if (version == NULL || subversion == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Get_version: NULL argument");
    *version = MPI_VERSION;
    *subversion = MPI_SUBVERSION;
    return MPI_SUCCESS;
}

int MPI_Get_processor_name(char *name, int *resultlen)
{
    if (name == NULL || resultlen == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Get_processor_name: NULL argument");
    if (gethostname(name, MPI_MAX_PROCESSOR_NAME) != 0)
        mpi_fatal(MPI_ERR_OTHER, "MPI_Get_processor_name: gethostname: %s", strerror(errno));
    /* gethostname need not terminate a truncated name. */
    name[MPI_MAX_PROCESSOR_NAME - 1] = '\0';
    *resultlen = (int)strlen(name);
    return MPI_SUCCESS;
}

int MPI_Error_string(int errorcode, char *string, int *resultlen)
{
    if (string == NULL || resultlen == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Error_string: NULL argument");
    for (size_t i = 0; i < sizeof error_classes / sizeof error_classes[0]; i++)
        if (error_classes[i].code == errorcode) {
            *resultlen = snprintf(string, MPI_MAX_ERROR_STRING, "%s: %s", error_classes[i].name,
                                  error_classes[i].text);
            return MPI_SUCCESS;
        }
    mpi_fatal(MPI_ERR_ARG, "MPI_Error_string: %d is not an error code", errorcode);
}

double MPI_Wtime(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double MPI_Wtick(void)
{
    struct timespec res;

    if (clock_getres(CLOCK_MONOTONIC, &res) != 0)
        return 1e-9;
    return (double)res.tv_sec + (double)res.tv_nsec * 1e-9;
}

int MPI_Comm_rank(MPI_Comm comm, int *rank)
{
    struct comm_view v = view_of("MPI_Comm_rank", comm);

    if (rank == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Comm_rank: rank is NULL");
    *rank = v.rank;
    drop_result(); /* a local call: a failed or revoked communicator still has its rank */
    return MPI_SUCCESS;
}

int MPI_Comm_size(MPI_Comm comm, int *size)
{
    struct comm_view v = view_of("MPI_Comm_size", comm);

    if (size == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Comm_size: size is NULL");
    *size = v.size;
    drop_result(); /* a local call: a failed or revoked communicator still has its size */
    return MPI_SUCCESS;
}

/* Every error code of this library is an error class of its own. */
int MPI_Error_class(int errorcode, int *errorclass)
{
    if (errorclass == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Error_class: errorclass is NULL");
    if (errorcode < MPI_SUCCESS || errorcode > MPI_ERR_LASTCODE)
        mpi_fatal(MPI_ERR_ARG, "MPI_Error_class: %d is no error code", errorcode);
    *errorclass = errorcode;
    return MPI_SUCCESS;
}

int MPI_Get_count(const MPI_Status *status, MPI_Datatype datatype, int *count)
{
    const struct mpi_type *type = type_of("MPI_Get_count", datatype);

    if (status == NULL || count == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Get_count: NULL argument");
    /* Messages travel packed (a derived type's data without its gaps). */
    long long packed = (long long)type->packed;
    if (status->eccl_mpi_bytes < 0 || packed == 0 || status->eccl_mpi_bytes % packed != 0 ||
        status->eccl_mpi_bytes / packed > INT_MAX)
        *count = status->eccl_mpi_bytes == 0 ? 0 : MPI_UNDEFINED;
    else
        *count = (int)(status->eccl_mpi_bytes / packed);
    return MPI_SUCCESS;
}

/* ---- collectives ------------------------------------------------------------------
 *
 * Calls that only move data (broadcast, gathers, all-to-all) go to eccl as
 * bytes (ECCL_U8): MPI lets the send and receive types differ as long as
 * the byte counts agree. Reductions go with the element type. A count of 0
 * skips eccl on every rank alike (MPI requires the counts to agree). */

/* eccl_barrier in the shape of the other collectives (an info argument),
 * for COLL. */
static eccl_result barrier_op(eccl_comm *comm, uint64_t tag, eccl_reduce_info *info)
{
    info->world_size = 0; /* none to tell: check_coll reads the ring's epoch */
    return eccl_barrier(comm, tag);
}

static eccl_result barrier_op_async(eccl_comm *comm, uint64_t tag, eccl_request **op)
{
    return eccl_barrier_async(comm, tag, op);
}

static int barrier(const char *call, MPI_Comm comm, MPI_Request *nb)
{
    struct comm_view v = view_of(call, comm);

    if (v.ecomm == NULL)
        return done_now(call, nb);
    COLL(call, nb, NOTHING_AFTER, barrier_op, v.ecomm, take_tag(&v));
    return call_result();
}

int MPI_Barrier(MPI_Comm comm)
{
    return barrier("MPI_Barrier", comm, NULL);
}

int MPI_Ibarrier(MPI_Comm comm, MPI_Request *request)
{
    return barrier("MPI_Ibarrier", comm, nb_arg("MPI_Ibarrier", request));
}

static int bcast_packed(const char *call, void *buffer, int count, MPI_Datatype datatype, int root,
                 MPI_Comm comm, MPI_Request *nb)
{
    struct comm_view v = view_of(call, comm);
    size_t bytes = bytes_of(call, "count", count, type_of(call, datatype));

    check_root(call, root, &v);
    check_buffer(call, "buffer", buffer, bytes);
    if (v.ecomm == NULL || bytes == 0)
        return done_now(call, nb);
    COLL(call, nb, NOTHING_AFTER, eccl_broadcast, v.ecomm, buffer, buffer, bytes, ECCL_U8,
         (uint32_t)root, take_tag(&v));
    return call_result();
}

/* Each collective with derived datatypes: its buffers staged, then the
 * call on their twins ("derived datatypes in calls"). */
static int bcast(const char *call, void *buffer, int count, MPI_Datatype datatype, int root,
                 MPI_Comm comm, MPI_Request *nb)
{
    int is_root = view_of(call, comm).rank == root;
    struct twin b = stage(call, buffer, datatype, count_of(call, "count", count), is_root, !is_root);

    return staged_end(bcast_packed(call, b.buf, scaled(call, count, b.k), b.type, root, comm, nb));
}

int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    return bcast("MPI_Bcast", buffer, count, datatype, root, comm, NULL);
}

int MPI_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
               MPI_Request *request)
{
    return bcast("MPI_Ibcast", buffer, count, datatype, root, comm, nb_arg("MPI_Ibcast", request));
}

/* ---- reductions here ------------------------------------------------------------------
 *
 * What eccl has no kernel for (struct reduction's local or user function)
 * and the prefix reductions run here: every rank's input travels to every
 * rank that needs a result (an all-gather, N times the input in scratch,
 * or a gather to the root), and each folds the ranks' blocks in rank order,
 * the same order everywhere, so every rank gets the same bits and a
 * non-commutative operation is applied as MPI orders it:
 * x_lo op (x_lo+1 op (... op x_hi)). */

/* out = the fold of ranks lo..hi's blocks of `all` (one per `stride`
 * bytes), n elements of `ext` bytes from byte `off` of each. */
static void fold_ranks(const struct reduction *r, const char *all, size_t stride, size_t off,
                       size_t n, size_t ext, int lo, int hi, void *out)
{
    memcpy(out, all + (size_t)hi * stride + off, n * ext);
    for (int k = hi - 1; k >= lo; k--)
        reduce_here(r, all + (size_t)k * stride + off, out, n);
}

/* Every rank's `block` bytes at sendbuf, in rank order, into new scratch
 * (the caller frees it). */
static char *gather_all(const char *call, struct comm_view *v, const void *sendbuf, size_t block)
{
    char *all = scratch_alloc(call, mul_size(call, block, (size_t)v->size));

    RUN_COLL(call, eccl_allgather, v->ecomm, sendbuf, all, block, ECCL_U8, take_tag(v));
    return all;
}

/* A rooted gather (gather 1) or scatter (0) in bytes, on eccl_alltoallv:
 * each rank sends `mine` bytes at mine_buf to the root, or receives them
 * there; at the root, rank r's share is counts[r] bytes at displs[r] of
 * root_buf. The root's own share (its counts[root] and its `mine`) is 0
 * when it is in place. `counts` is scratch, freed once eccl is done (with
 * displs, which must live in the same allocation). */
static void rooted_bytes(const char *call, struct comm_view *v, int root, int gather,
                         void *mine_buf, size_t mine, void *root_buf, size_t *counts,
                         const size_t *displs, MPI_Request *nb)
{
    /* Stand-ins for buffers with nothing in them: eccl wants a pointer,
     * and two distinct ones (equal ones would read as in place). */
    static char no_send, no_recv;
    size_t size = (size_t)v->size;
    size_t *zero = scratch_alloc(call, mul_size(call, 3 * size, sizeof *zero));
    size_t *one = zero + size, *one_displs = zero + 2 * size;
    int is_root = v->rank == root;

    memset(zero, 0, 3 * size * sizeof *zero);
    one[root] = mine;
    const size_t *rc = is_root ? counts : zero, *rd = is_root ? displs : zero;
    void *rbuf = is_root && root_buf != NULL ? root_buf : NULL;
    void *mbuf = mine != 0 ? mine_buf : NULL;
    /* counts (displs in the same scratch) and ours: eccl reads them until the end. */
    struct coll_after after = {{zero, counts}, NULL, NULL, 0, NULL};
    if (gather)
        COLL(call, nb, after, eccl_alltoallv, v->ecomm, mbuf != NULL ? mbuf : &no_send, one,
             one_displs, rbuf != NULL ? rbuf : &no_recv, rc, rd, ECCL_U8, take_tag(v));
    else
        COLL(call, nb, after, eccl_alltoallv, v->ecomm, rbuf != NULL ? rbuf : &no_send, rc, rd,
             mbuf != NULL ? mbuf : &no_recv, one, one_displs, ECCL_U8, take_tag(v));
}

/* Rank r's share of n * ext bytes each, at r * n * ext: counts and
 * displacements for rooted_bytes, in new scratch. */
static size_t *even_shares(const char *call, size_t size, size_t bytes)
{
    size_t *c = scratch_alloc(call, mul_size(call, 2 * size, sizeof *c));

    for (size_t r = 0; r < size; r++) {
        c[r] = bytes;
        c[size + r] = mul_size(call, r, bytes);
    }
    return c;
}

static int reduce_packed(const char *call, const void *sendbuf, void *recvbuf, int count,
                  MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm, MPI_Request *nb)
{
    struct comm_view v = view_of(call, comm);
    const struct mpi_type *type = type_of(call, datatype);
    struct reduction red = reduction_of(call, op, datatype, type);
    size_t n = count_of(call, "count", count), bytes = mul_size(call, n, type->extent);
    int is_root = v.rank == root;

    check_root(call, root, &v);
    if (sendbuf == MPI_IN_PLACE) {
        if (!is_root)
            mpi_fatal(MPI_ERR_BUFFER, "%s: MPI_IN_PLACE is for the root only", call);
        sendbuf = recvbuf;
    }
    check_buffer(call, "sendbuf", sendbuf, bytes);
    if (is_root)
        check_buffer(call, "recvbuf", recvbuf, bytes);
    if (alone(&v, recvbuf, sendbuf, bytes) || n == 0)
        return done_now(call, nb);
    if (!red.on_eccl) {
        blocking_only(call, nb, "this operation");
        size_t *shares = even_shares(call, (size_t)v.size, bytes);
        char *all = is_root ? scratch_alloc(call, mul_size(call, bytes, (size_t)v.size)) : NULL;

        rooted_bytes(call, &v, root, 1, (void *)sendbuf, bytes, all, shares, shares + v.size, NULL);
        if (is_root)
            fold_ranks(&red, all, bytes, 0, n, type->extent, 0, v.size - 1, recvbuf);
        free(all);
        return call_result();
    }
    /* recvbuf is significant at the root only: the others may pass
     * anything, so eccl gets NULL there. */
    COLL(call, nb, NOTHING_AFTER, eccl_reduce, v.ecomm, sendbuf, is_root ? recvbuf : NULL, n,
         type->dtype, red.eop, (uint32_t)root, take_tag(&v));
    return call_result();
}

static int reduce(const char *call, const void *sendbuf, void *recvbuf, int count,
                  MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm, MPI_Request *nb)
{
    int is_root = view_of(call, comm).rank == root, in_place = sendbuf == MPI_IN_PLACE;
    size_t n = count_of(call, "count", count);
    struct twin r = {recvbuf, datatype, 1}, s = {(void *)sendbuf, datatype, 1};

    if (!in_place)
        s = stage_reduce(call, (void *)sendbuf, datatype, op, n, 1, 0);
    if (is_root) /* recvbuf means nothing elsewhere */
        r = stage_reduce(call, recvbuf, datatype, op, n, in_place, 1);
    struct twin t = in_place ? r : s;
    return staged_end(reduce_packed(call, s.buf, r.buf, scaled(call, count, t.k), t.type, op, root,
                                    comm, nb));
}

int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               int root, MPI_Comm comm)
{
    return reduce("MPI_Reduce", sendbuf, recvbuf, count, datatype, op, root, comm, NULL);
}

int MPI_Ireduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                int root, MPI_Comm comm, MPI_Request *request)
{
    return reduce("MPI_Ireduce", sendbuf, recvbuf, count, datatype, op, root, comm,
                  nb_arg("MPI_Ireduce", request));
}

/* The reductions whose result every rank gets: rank i's result folds
 * ranks 0 .. size - 1 (MPI_Allreduce), 0 .. i (MPI_Scan) or 0 .. i - 1
 * (MPI_Exscan, which leaves rank 0's recvbuf as it was: MPI says it is
 * undefined there). Only MPI_Allreduce has an eccl kernel. */
enum fold_upto { FOLD_ALL, FOLD_TO_ME, FOLD_BELOW_ME };

static int fold_reduce_packed(const char *call, const void *sendbuf, void *recvbuf, int count,
                       MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, enum fold_upto upto,
                       MPI_Request *nb)
{
    struct comm_view v = view_of(call, comm);
    const struct mpi_type *type = type_of(call, datatype);
    struct reduction red = reduction_of(call, op, datatype, type);
    size_t n = count_of(call, "count", count), bytes = mul_size(call, n, type->extent);

    if (sendbuf == MPI_IN_PLACE)
        sendbuf = recvbuf;
    check_buffer(call, "sendbuf", sendbuf, bytes);
    check_buffer(call, "recvbuf", recvbuf, bytes);
    if (n == 0)
        return done_now(call, nb);
    if (v.ecomm == NULL) {
        if (upto != FOLD_BELOW_ME && sendbuf != recvbuf)
            memcpy(recvbuf, sendbuf, bytes);
        return done_now(call, nb);
    }
    if (upto == FOLD_ALL && red.on_eccl) {
        COLL(call, nb, NOTHING_AFTER, eccl_allreduce, v.ecomm, sendbuf, recvbuf, n, type->dtype,
             red.eop, take_tag(&v));
        return call_result();
    }
    blocking_only(call, nb, "this operation");
    char *all = gather_all(call, &v, sendbuf, bytes);
    int hi = upto == FOLD_ALL ? v.size - 1 : upto == FOLD_TO_ME ? v.rank : v.rank - 1;

    if (hi >= 0)
        fold_ranks(&red, all, bytes, 0, n, type->extent, 0, hi, recvbuf);
    free(all);
    return call_result();
}

static int fold_reduce(const char *call, const void *sendbuf, void *recvbuf, int count,
                       MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, enum fold_upto upto,
                       MPI_Request *nb)
{
    int in_place = sendbuf == MPI_IN_PLACE;
    size_t n = count_of(call, "count", count);
    /* MPI_Exscan leaves rank 0's recvbuf as it was: it goes in too. */
    struct twin r = stage_reduce(call, recvbuf, datatype, op, n, in_place || upto == FOLD_BELOW_ME, 1);
    struct twin s = in_place ? r : stage_reduce(call, (void *)sendbuf, datatype, op, n, 1, 0);

    return staged_end(fold_reduce_packed(call, in_place ? MPI_IN_PLACE : s.buf, r.buf,
                                         scaled(call, count, r.k), r.type, op, comm, upto, nb));
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                  MPI_Op op, MPI_Comm comm)
{
    return fold_reduce("MPI_Allreduce", sendbuf, recvbuf, count, datatype, op, comm, FOLD_ALL,
                       NULL);
}

int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                   MPI_Op op, MPI_Comm comm, MPI_Request *request)
{
    return fold_reduce("MPI_Iallreduce", sendbuf, recvbuf, count, datatype, op, comm, FOLD_ALL,
                       nb_arg("MPI_Iallreduce", request));
}

int MPI_Scan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
             MPI_Comm comm)
{
    return fold_reduce("MPI_Scan", sendbuf, recvbuf, count, datatype, op, comm, FOLD_TO_ME, NULL);
}

int MPI_Exscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               MPI_Comm comm)
{
    return fold_reduce("MPI_Exscan", sendbuf, recvbuf, count, datatype, op, comm, FOLD_BELOW_ME,
                       NULL);
}

int MPI_Reduce_local(const void *inbuf, void *inoutbuf, int count, MPI_Datatype datatype,
                     MPI_Op op)
{
    static const char call[] = "MPI_Reduce_local";

    mpi_require_initialized(call);
    size_t elems = count_of(call, "count", count);
    struct twin in = stage_reduce(call, (void *)inbuf, datatype, op, elems, 1, 0);
    struct twin io = stage_reduce(call, inoutbuf, datatype, op, elems, 1, 1);
    const struct mpi_type *type = type_of(call, io.type);
    struct reduction red = reduction_of(call, op, io.type, type);
    size_t n = (size_t)scaled(call, count, io.k), bytes = mul_size(call, n, type->extent);

    check_buffer(call, "inbuf", in.buf, bytes);
    check_buffer(call, "inoutbuf", io.buf, bytes);
    if (n != 0)
        reduce_here(&red, in.buf, io.buf, n);
    return staged_end(MPI_SUCCESS);
}

int MPI_Op_create(MPI_User_function *user_fn, int commute, MPI_Op *op)
{
    mpi_require_initialized("MPI_Op_create");
    if (user_fn == NULL || op == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Op_create: NULL argument");
    for (int i = 0; i < USER_OP_MAX; i++)
        if (user_ops[i].fn == NULL) {
            user_ops[i] = (struct user_op){user_fn, commute};
            *op = (MPI_Op)(USER_OP_BASE + i);
            return MPI_SUCCESS;
        }
    mpi_fatal(MPI_ERR_NO_MEM, "MPI_Op_create: %d operations exist already", USER_OP_MAX);
}

int MPI_Op_free(MPI_Op *op)
{
    unsigned user = op != NULL ? (unsigned)*op - USER_OP_BASE : USER_OP_MAX;

    mpi_require_initialized("MPI_Op_free");
    if (user >= USER_OP_MAX || user_ops[user].fn == NULL)
        mpi_fatal(MPI_ERR_OP, "MPI_Op_free: not an operation of MPI_Op_create");
    user_ops[user].fn = NULL;
    *op = MPI_OP_NULL;
    return MPI_SUCCESS;
}

int MPI_Op_commutative(MPI_Op op, int *commute)
{
    unsigned user = (unsigned)op - USER_OP_BASE, index = (unsigned)op - (unsigned)MPI_SUM;

    if (commute == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Op_commutative: commute is NULL");
    if (user < USER_OP_MAX && user_ops[user].fn != NULL)
        *commute = user_ops[user].commute;
    else if (index < OPC_COUNT)
        *commute = 1;
    else
        mpi_fatal(MPI_ERR_OP, "MPI_Op_commutative: invalid op handle 0x%x", (unsigned)op);
    return MPI_SUCCESS;
}

/* The bytes a rank contributes must be the bytes every rank expects from
 * it (MPI's type-signature rule, checked here as sizes). */
static void check_match(const char *call, size_t send_bytes, size_t recv_bytes)
{
    if (send_bytes != recv_bytes)
        mpi_fatal(MPI_ERR_TRUNCATE, "%s: this rank sends %zu bytes where %zu are expected", call,
              send_bytes, recv_bytes);
}

static int allgather_packed(const char *call, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                     void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm,
                     MPI_Request *nb)
{
    struct comm_view v = view_of(call, comm);
    size_t block = bytes_of(call, "recvcount", recvcount, type_of(call, recvtype));

    check_buffer(call, "recvbuf", recvbuf, mul_size(call, block, (size_t)v.size));
    if (sendbuf != MPI_IN_PLACE) {
        check_match(call, bytes_of(call, "sendcount", sendcount, type_of(call, sendtype)), block);
        check_buffer(call, "sendbuf", sendbuf, block);
    }
    if (alone(&v, recvbuf, sendbuf, block))
        return done_now(call, nb);
    if (block == 0)
        return done_now(call, nb);
    /* In place, this rank's block already sits at its slot of recvbuf:
     * eccl's in-place form. */
    if (sendbuf == MPI_IN_PLACE)
        sendbuf = (char *)recvbuf + (size_t)v.rank * block;
    COLL(call, nb, NOTHING_AFTER, eccl_allgather, v.ecomm, sendbuf, recvbuf, block, ECCL_U8,
         take_tag(&v));
    return call_result();
}

/* The buffers of an all-gather (a send block for all) or an all-to-all
 * (one for each rank: send_each), staged; the twins' counts into *sc, *rc. */
static void stage_blocks(const char *call, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                         void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm, int send_each,
                         struct twin *s, struct twin *r, int *sc, int *rc)
{
    size_t size = (size_t)view_of(call, comm).size;
    int in_place = sendbuf == MPI_IN_PLACE;

    *s = (struct twin){(void *)sendbuf, sendtype, 1};
    if (!in_place)
        *s = stage(call, (void *)sendbuf, sendtype,
                   mul_size(call, count_of(call, "sendcount", sendcount), send_each ? size : 1), 1, 0);
    *r = stage(call, recvbuf, recvtype, mul_size(call, count_of(call, "recvcount", recvcount), size),
               in_place, 1);
    *sc = in_place ? sendcount : scaled(call, sendcount, s->k);
    *rc = scaled(call, recvcount, r->k);
}

static int allgather(const char *call, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                     void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm,
                     MPI_Request *nb)
{
    struct twin s, r;
    int sc, rc;

    stage_blocks(call, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, 0, &s, &r, &sc, &rc);
    return staged_end(allgather_packed(call, s.buf, sc, s.type, r.buf, rc, r.type, comm, nb));
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    return allgather("MPI_Allgather", sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                     comm, NULL);
}

int MPI_Iallgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)
{
    return allgather("MPI_Iallgather", sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                     comm, nb_arg("MPI_Iallgather", request));
}

static int allgatherv_packed(const char *call, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                      void *recvbuf, const int recvcounts[], const int displs[],
                      MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *nb)
{
    struct comm_view v = view_of(call, comm);
    const struct mpi_type *rtype = type_of(call, recvtype);
    size_t size = (size_t)v.size, total = 0, mine_bytes, *counts, *offsets;
    const void *mine;
    char *base;
    int lowest;

    if (recvcounts == NULL || displs == NULL)
        mpi_fatal(MPI_ERR_ARG, "%s: recvcounts or displs is NULL", call);
    lowest = displs[0];
    for (size_t r = 0; r < size; r++) {
        size_t b = bytes_of(call, "recvcounts[]", recvcounts[r], rtype);

        check_buffer(call, "recvbuf", recvbuf, b);
        total += b;
        lowest = displs[r] < lowest ? displs[r] : lowest;
    }
    mine_bytes = (size_t)recvcounts[v.rank] * rtype->extent;
    if (sendbuf == MPI_IN_PLACE) {
        mine = at(recvbuf, displs[v.rank], rtype->extent);
    } else {
        check_match(call, bytes_of(call, "sendcount", sendcount, type_of(call, sendtype)),
                    mine_bytes);
        check_buffer(call, "sendbuf", sendbuf, mine_bytes);
        mine = sendbuf;
    }
    if (v.ecomm == NULL) {
        if (sendbuf != MPI_IN_PLACE && mine_bytes != 0)
            memcpy(at(recvbuf, displs[0], rtype->extent), mine, mine_bytes);
        return done_now(call, nb);
    }
    if (total == 0)
        return done_now(call, nb);
    /* eccl_allgatherv in bytes. Its displacements are unsigned and MPI's
     * may be negative, so they are taken from the lowest block on. */
    base = at(recvbuf, lowest, rtype->extent);
    counts = scratch_alloc(call, mul_size(call, 2 * size, sizeof *counts));
    offsets = counts + size;
    for (size_t r = 0; r < size; r++) {
        counts[r] = (size_t)recvcounts[r] * rtype->extent;
        offsets[r] = (size_t)((long long)displs[r] - lowest) * rtype->extent;
    }
    COLL(call, nb, ((struct coll_after){{counts, NULL}, NULL, NULL, 0, NULL}), eccl_allgatherv, v.ecomm,
         mine, base, counts, offsets, ECCL_U8, take_tag(&v));
    return call_result();
}

static int allgatherv(const char *call, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                      void *recvbuf, const int recvcounts[], const int displs[],
                      MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *nb)
{
    size_t size = (size_t)view_of(call, comm).size;
    int in_place = sendbuf == MPI_IN_PLACE;
    struct twin s = {(void *)sendbuf, sendtype, 1}, r;
    const int *rc, *rd;

    if (!in_place)
        s = stage(call, (void *)sendbuf, sendtype, count_of(call, "sendcount", sendcount), 1, 0);
    r = stage_v(call, recvbuf, recvtype, size, recvcounts, displs, in_place, 1, &rc, &rd);
    return staged_end(allgatherv_packed(call, s.buf, in_place ? sendcount : scaled(call, sendcount, s.k),
                                        s.type, r.buf, rc, rd, r.type, comm, nb));
}

int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm)
{
    return allgatherv("MPI_Allgatherv", sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                      recvtype, comm, NULL);
}

int MPI_Iallgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                    const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                    MPI_Comm comm, MPI_Request *request)
{
    return allgatherv("MPI_Iallgatherv", sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                      recvtype, comm, nb_arg("MPI_Iallgatherv", request));
}

static int reduce_scatter_block_packed(const char *call, const void *sendbuf, void *recvbuf,
                                int recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                MPI_Request *nb)
{
    struct comm_view v = view_of(call, comm);
    const struct mpi_type *type = type_of(call, datatype);
    struct reduction red = reduction_of(call, op, datatype, type);
    size_t n = count_of(call, "recvcount", recvcount), block = mul_size(call, n, type->extent);
    size_t row = mul_size(call, block, (size_t)v.size);
    char *result;

    check_buffer(call, "recvbuf", recvbuf, block);
    if (sendbuf != MPI_IN_PLACE)
        check_buffer(call, "sendbuf", sendbuf, row);
    if (alone(&v, recvbuf, sendbuf, block) || n == 0)
        return done_now(call, nb);
    if (!red.on_eccl) { /* every rank's whole input, this rank's block of it */
        blocking_only(call, nb, "this operation");
        char *all = gather_all(call, &v, sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, row);

        fold_ranks(&red, all, row, (size_t)v.rank * block, n, type->extent, 0, v.size - 1, recvbuf);
        free(all);
        return call_result();
    }
    /* MPI in place: the blocks fill recvbuf and the result goes to its
     * front; eccl's in-place result lands where this rank's block was. */
    result = sendbuf == MPI_IN_PLACE ? (char *)recvbuf + (size_t)v.rank * block : recvbuf;
    COLL(call, nb, ((struct coll_after){{NULL, NULL}, recvbuf, result, block, NULL}), eccl_reduce_scatter,
         v.ecomm, sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, result, n, type->dtype, red.eop,
         take_tag(&v));
    return call_result();
}

static int reduce_scatter_block(const char *call, const void *sendbuf, void *recvbuf,
                                int recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                MPI_Request *nb)
{
    size_t size = (size_t)view_of(call, comm).size, n = count_of(call, "recvcount", recvcount);
    int in_place = sendbuf == MPI_IN_PLACE;
    struct twin r = stage_reduce(call, recvbuf, datatype, op, in_place ? mul_size(call, n, size) : n,
                                 in_place, 1);
    struct twin s = in_place ? r : stage_reduce(call, (void *)sendbuf, datatype, op,
                                                mul_size(call, n, size), 1, 0);

    return staged_end(reduce_scatter_block_packed(call, in_place ? MPI_IN_PLACE : s.buf, r.buf,
                                                  scaled(call, recvcount, r.k), r.type, op, comm, nb));
}

int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                             MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    return reduce_scatter_block("MPI_Reduce_scatter_block", sendbuf, recvbuf, recvcount, datatype,
                                op, comm, NULL);
}

int MPI_Ireduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                              MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request)
{
    return reduce_scatter_block("MPI_Ireduce_scatter_block", sendbuf, recvbuf, recvcount, datatype,
                                op, comm, nb_arg("MPI_Ireduce_scatter_block", request));
}

static int reduce_scatter_packed(const char *call, const void *sendbuf, void *recvbuf,
                          const int recvcounts[], MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                          MPI_Request *nb)
{
    struct comm_view v = view_of(call, comm);
    const struct mpi_type *type = type_of(call, datatype);
    struct reduction red = reduction_of(call, op, datatype, type);
    size_t size = (size_t)v.size, total = 0, before = 0, esize = type->extent, mine, *counts;
    char *result;

    if (recvcounts == NULL)
        mpi_fatal(MPI_ERR_ARG, "%s: recvcounts is NULL", call);
    counts = scratch_alloc(call, mul_size(call, size, sizeof *counts));
    for (size_t r = 0; r < size; r++) {
        counts[r] = count_of(call, "recvcounts[]", recvcounts[r]);
        before += r < (size_t)v.rank ? counts[r] : 0;
        total += counts[r];
    }
    mine = mul_size(call, counts[v.rank], esize);
    check_buffer(call, "recvbuf", recvbuf,
                 sendbuf == MPI_IN_PLACE ? mul_size(call, total, esize) : mine);
    if (sendbuf != MPI_IN_PLACE)
        check_buffer(call, "sendbuf", sendbuf, mul_size(call, total, esize));
    if (v.ecomm == NULL || total == 0) {
        if (v.ecomm == NULL && sendbuf != MPI_IN_PLACE && mine != 0)
            memcpy(recvbuf, sendbuf, mine);
        free(counts);
        return done_now(call, nb);
    }
    if (!red.on_eccl) { /* every rank's whole input, this rank's share of it */
        blocking_only(call, nb, "this operation");
        size_t row = mul_size(call, total, esize);
        char *all = gather_all(call, &v, sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, row);

        if (counts[v.rank] != 0)
            fold_ranks(&red, all, row, before * esize, counts[v.rank], esize, 0, v.size - 1,
                       recvbuf);
        free(all);
        free(counts);
        return call_result();
    }
    /* MPI in place: the blocks fill recvbuf and the result goes to its
     * front; eccl's in-place result lands where this rank's block was. */
    result = sendbuf == MPI_IN_PLACE ? (char *)recvbuf + before * esize : recvbuf;
    COLL(call, nb, ((struct coll_after){{counts, NULL}, recvbuf, result, mine, NULL}),
         eccl_reduce_scatterv, v.ecomm, sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, result, counts,
         type->dtype, red.eop, take_tag(&v));
    return call_result();
}

static int reduce_scatter(const char *call, const void *sendbuf, void *recvbuf,
                          const int recvcounts[], MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                          MPI_Request *nb)
{
    struct comm_view v = view_of(call, comm);
    size_t size = (size_t)v.size, total = 0;
    int in_place = sendbuf == MPI_IN_PLACE, *counts = NULL;

    if (recvcounts == NULL)
        mpi_fatal(MPI_ERR_ARG, "%s: recvcounts is NULL", call);
    for (size_t i = 0; i < size; i++)
        total += count_of(call, "recvcounts[]", recvcounts[i]);
    size_t mine = (size_t)recvcounts[v.rank];
    struct twin r = stage_reduce(call, recvbuf, datatype, op, in_place ? total : mine, in_place, 1);
    struct twin s = in_place ? r : stage_reduce(call, (void *)sendbuf, datatype, op, total, 1, 0);
    if (r.k != 1) { /* the twin's counts (the call copies them) */
        counts = scratch_alloc(call, mul_size(call, size, sizeof *counts));
        for (size_t i = 0; i < size; i++)
            counts[i] = scaled(call, recvcounts[i], r.k);
    }
    int e = reduce_scatter_packed(call, in_place ? MPI_IN_PLACE : s.buf, r.buf,
                                  counts != NULL ? counts : recvcounts, r.type, op, comm, nb);
    free(counts);
    return staged_end(e);
}

int MPI_Reduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[],
                       MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    return reduce_scatter("MPI_Reduce_scatter", sendbuf, recvbuf, recvcounts, datatype, op, comm,
                          NULL);
}

int MPI_Ireduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[],
                        MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request)
{
    return reduce_scatter("MPI_Ireduce_scatter", sendbuf, recvbuf, recvcounts, datatype, op, comm,
                          nb_arg("MPI_Ireduce_scatter", request));
}

/* All-to-all on eccl's own (pairwise exchange over peer links), in bytes.
 * In place, recvbuf holds the blocks to send, as eccl's in-place form. */
static int alltoall_packed(const char *call, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                    void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm,
                    MPI_Request *nb)
{
    struct comm_view v = view_of(call, comm);
    size_t block = bytes_of(call, "recvcount", recvcount, type_of(call, recvtype));
    size_t row = mul_size(call, block, (size_t)v.size);

    check_buffer(call, "recvbuf", recvbuf, row);
    if (sendbuf != MPI_IN_PLACE) {
        check_match(call, bytes_of(call, "sendcount", sendcount, type_of(call, sendtype)), block);
        check_buffer(call, "sendbuf", sendbuf, row);
    }
    if (alone(&v, recvbuf, sendbuf, block))
        return done_now(call, nb);
    /* MPI requires every rank's block to be the same size: 0 on one is 0
     * on all, and they all skip eccl alike. */
    if (block == 0)
        return done_now(call, nb);
    COLL(call, nb, NOTHING_AFTER, eccl_alltoall, v.ecomm,
         sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, recvbuf, 
             block, ECCL_U8, take_tag(&v));
    return call_result();
}

static int alltoall(const char *call, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                    void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm,
                    MPI_Request *nb)
{
    struct twin s, r;
    int sc, rc;

    stage_blocks(call, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, 1, &s, &r, &sc, &rc);
    return staged_end(alltoall_packed(call, s.buf, sc, s.type, r.buf, rc, r.type, comm, nb));
}

int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    return alltoall("MPI_Alltoall", sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                    comm, NULL);
}

int MPI_Ialltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)
{
    return alltoall("MPI_Ialltoall", sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                    comm, nb_arg("MPI_Ialltoall", request));
}

/* One side of an all-to-allv layout in bytes, for eccl: displacements
 * taken from the lowest non-empty block (MPI's may be negative, eccl's may
 * not), which is returned; empty blocks are left at 0. */
static char *bytes_layout(const char *call, const char *name, void *buf, const char *what,
                          const int counts[], const int displs[], const struct mpi_type *type,
                          size_t size, size_t *bcounts, size_t *bdispls)
{
    int lowest = INT_MAX;

    for (size_t r = 0; r < size; r++) {
        bcounts[r] = bytes_of(call, what, counts[r], type);
        check_buffer(call, name, buf, bcounts[r]);
        if (bcounts[r] != 0 && displs[r] < lowest)
            lowest = displs[r];
    }
    if (lowest == INT_MAX)
        lowest = 0;
    for (size_t r = 0; r < size; r++)
        bdispls[r] = bcounts[r] == 0 ? 0
                                     : mul_size(call, (size_t)((long long)displs[r] - lowest),
                                                type->extent);
    return buf == NULL ? NULL : at(buf, lowest, type->extent);
}

/* eccl_alltoallv in bytes. MPI requires rank i's send block for rank j
 * to be as large as rank j's receive block from rank i, so no counts
 * travel: eccl checks each block as it comes (a mismatch breaks the call).
 * This rank's own block, the one pair a rank can check alone, is checked
 * here. In place (MPI_IN_PLACE: the data to send is in recvbuf, laid out
 * as received) is eccl's in-place form. */
static int alltoallv_packed(const char *call, const void *sendbuf, const int sendcounts[],
                     const int sdispls[], MPI_Datatype sendtype, void *recvbuf,
                     const int recvcounts[], const int rdispls[], MPI_Datatype recvtype,
                     MPI_Comm comm, MPI_Request *nb)
{
    struct comm_view v = view_of(call, comm);
    const struct mpi_type *rtype = type_of(call, recvtype), *stype = NULL;
    size_t size = (size_t)v.size, me = (size_t)v.rank, *counts;
    int in_place = sendbuf == MPI_IN_PLACE;
    /* Stand-ins for NULL buffers with nothing in them: eccl wants a
     * pointer, and two distinct ones (equal ones would read as in place). */
    static char no_send, no_recv;
    const void *sbase = NULL;
    char *rbase;

    if (recvcounts == NULL || rdispls == NULL)
        mpi_fatal(MPI_ERR_ARG, "%s: recvcounts or rdispls is NULL", call);
    if (!in_place) {
        if (sendcounts == NULL || sdispls == NULL)
            mpi_fatal(MPI_ERR_ARG, "%s: sendcounts or sdispls is NULL", call);
        stype = type_of(call, sendtype);
        check_match(call, bytes_of(call, "sendcounts[]", sendcounts[me], stype),
                    bytes_of(call, "recvcounts[]", recvcounts[me], rtype));
    }
    counts = scratch_alloc(call, mul_size(call, 4 * size, sizeof *counts));
    rbase = bytes_layout(call, "recvbuf", recvbuf, "recvcounts[]", recvcounts, rdispls, rtype,
                         size, counts, counts + size);
    if (!in_place)
        sbase = bytes_layout(call, "sendbuf", (void *)sendbuf, "sendcounts[]", sendcounts, sdispls,
                             stype, size, counts + 2 * size, counts + 3 * size);
    if (v.ecomm == NULL) {
        if (!in_place && counts[0] != 0)
            memcpy(at(recvbuf, rdispls[0], rtype->extent),
                   at((void *)sendbuf, sdispls[0], stype->extent), counts[0]);
        free(counts);
        return done_now(call, nb);
    }
    /* Every rank calls eccl, even with nothing to send or receive: the
     * others' blocks are theirs to know, not ours. */
    struct coll_after after = {{counts, NULL}, NULL, NULL, 0, NULL};
    if (in_place)
        COLL(call, nb, after, eccl_alltoallv, v.ecomm, rbase != NULL ? rbase : &no_recv, NULL, NULL,
             rbase != NULL ? rbase : &no_recv, counts, counts + size, ECCL_U8, take_tag(&v));
    else
        COLL(call, nb, after, eccl_alltoallv, v.ecomm, sbase != NULL ? sbase : &no_send,
             counts + 2 * size, counts + 3 * size, rbase != NULL ? rbase : &no_recv, counts,
             counts + size, ECCL_U8, take_tag(&v));
    return call_result();
}

static int alltoallv(const char *call, const void *sendbuf, const int sendcounts[],
                     const int sdispls[], MPI_Datatype sendtype, void *recvbuf,
                     const int recvcounts[], const int rdispls[], MPI_Datatype recvtype,
                     MPI_Comm comm, MPI_Request *nb)
{
    size_t size = (size_t)view_of(call, comm).size;
    int in_place = sendbuf == MPI_IN_PLACE;
    struct twin s = {(void *)sendbuf, sendtype, 1}, r;
    const int *sc = sendcounts, *sd = sdispls, *rc, *rd;

    if (!in_place)
        s = stage_v(call, (void *)sendbuf, sendtype, size, sendcounts, sdispls, 1, 0, &sc, &sd);
    r = stage_v(call, recvbuf, recvtype, size, recvcounts, rdispls, in_place, 1, &rc, &rd);
    return staged_end(alltoallv_packed(call, s.buf, sc, sd, s.type, r.buf, rc, rd, r.type, comm, nb));
}

int MPI_Alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                  MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int rdispls[],
                  MPI_Datatype recvtype, MPI_Comm comm)
{
    return alltoallv("MPI_Alltoallv", sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts,
                     rdispls, recvtype, comm, NULL);
}

int MPI_Ialltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                   MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                   const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)
{
    return alltoallv("MPI_Ialltoallv", sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts,
                     rdispls, recvtype, comm, nb_arg("MPI_Ialltoallv", request));
}

/* MPI_Alltoallw: each block with a type of its own, at a byte
 * displacement. Every block is packed into one scratch buffer and the
 * exchange runs as MPI_Alltoallv's in bytes; the received blocks are
 * unpacked into place at the end. Blocking only (no MPI_Ialltoallw). */
static size_t *block_sizes(const char *call, size_t size, const int counts[],
                           const MPI_Datatype types[], int **ic)
{
    size_t *offs = scratch_alloc(call, mul_size(call, size + 1, sizeof *offs));
    int *arrays = scratch_alloc(call, mul_size(call, 2 * size, sizeof *arrays));

    offs[0] = 0;
    for (size_t i = 0; i < size; i++) {
        size_t b = mul_size(call, count_of(call, "counts[]", counts[i]),
                            committed_type(call, types[i])->packed);
        if (b > INT_MAX || offs[i] + b > INT_MAX)
            mpi_fatal(MPI_ERR_COUNT, "%s: more than %d bytes to one rank or in all", call, INT_MAX);
        arrays[i] = (int)b;
        arrays[size + i] = (int)offs[i];
        offs[i + 1] = offs[i] + b;
    }
    *ic = arrays;
    return offs;
}

static void pack_blocks(size_t size, const void *buf, const int counts[], const int displs[],
                        const MPI_Datatype types[], const size_t *offs, char *packed)
{
    for (size_t i = 0; i < size; i++)
        if (counts[i] > 0)
            mpi_type_pack(mpi_type_get(types[i]), (const char *)buf + displs[i], 0,
                          (size_t)counts[i], packed + offs[i]);
}

int MPI_Alltoallw(const void *sendbuf, const int sendcounts[], const int sdispls[],
                  const MPI_Datatype sendtypes[], void *recvbuf, const int recvcounts[],
                  const int rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm)
{
    static const char call[] = "MPI_Alltoallw";
    struct comm_view v = view_of(call, comm);
    size_t size = (size_t)v.size;
    int in_place = sendbuf == MPI_IN_PLACE, *rc, *sc;

    if (recvcounts == NULL || rdispls == NULL || recvtypes == NULL ||
        (!in_place && (sendcounts == NULL || sdispls == NULL || sendtypes == NULL)))
        mpi_fatal(MPI_ERR_ARG, "%s: a NULL array", call);
    if (in_place) { /* the receive layout is the send layout */
        sendbuf = recvbuf;
        sendcounts = recvcounts;
        sdispls = rdispls;
        sendtypes = recvtypes;
    }
    size_t *roffs = block_sizes(call, size, recvcounts, recvtypes, &rc);
    size_t *soffs = block_sizes(call, size, sendcounts, sendtypes, &sc);
    char *rbuf = scratch_alloc(call, roffs[size] + 1), *sbuf = scratch_alloc(call, soffs[size] + 1);

    check_buffer(call, "recvbuf", recvbuf, roffs[size]);
    check_buffer(call, "sendbuf", sendbuf, soffs[size]);
    pack_blocks(size, sendbuf, sendcounts, sdispls, sendtypes, soffs, sbuf);
    int e = alltoallv_packed(call, sbuf, sc, sc + size, MPI_BYTE, rbuf, rc, rc + size, MPI_BYTE,
                             comm, NULL);
    if (e == MPI_SUCCESS)
        for (size_t i = 0; i < size; i++)
            if (recvcounts[i] > 0)
                mpi_type_unpack(mpi_type_get(recvtypes[i]), rbuf + roffs[i], 0, (size_t)recvcounts[i],
                                (char *)recvbuf + rdispls[i], SIZE_MAX);
    free(sbuf);
    free(rbuf);
    free(sc);
    free(rc);
    free(soffs);
    free(roffs);
    return e;
}

/* ---- point-to-point ------------------------------------------------------------------ */

static void check_tag(const char *call, int tag, int receive)
{
    if (receive && tag == MPI_ANY_TAG)
        mpi_fatal(MPI_ERR_UNSUPPORTED_OPERATION, "%s: MPI_ANY_TAG is not supported by eccl (a "
              "receive must name its tag: eccl pairs a send with the receive of its tag)", call);
    if (tag < 0)
        mpi_fatal(MPI_ERR_TAG, "%s: invalid tag %d", call, tag);
}

static void check_peer(const char *call, const struct comm_view *v, int peer, int receive)
{
    if (receive && peer == MPI_ANY_SOURCE)
        mpi_fatal(MPI_ERR_UNSUPPORTED_OPERATION, "%s: MPI_ANY_SOURCE is not supported by eccl (a "
              "receive must name its source: eccl pairs a send with the receive naming its "
              "sender)", call);
    if (peer != MPI_PROC_NULL && (peer < 0 || peer >= v->size))
        mpi_fatal(MPI_ERR_RANK, "%s: rank %d is not a rank of a communicator of %d", call, peer,
              v->size);
}

/* Request r (its peer, tag, buffer and size set) on eccl, in tag space
 * comm_id, to or from ring rank ring_peer: its sequence number, for a send
 * its header (eager data in it), and the first step posted. */
static void post_message(const char *call, struct request *r, uint32_t comm_id, int ring_peer)
{
    r->comm_id = comm_id;
    r->ring_peer = ring_peer;
    if (r->kind == REQ_SEND) {
        r->seq = seq_of(comm_id, r->peer, r->tag)->sent++;
        r->hdr.bytes = r->bytes;
        r->hdr.tag = (uint32_t)r->tag;
        r->hdr.seq = r->seq & P2P_SEQ_MASK;
        if (r->bytes != 0)
            memcpy(r->hdr.data, r->buf, r->bytes < P2P_INLINE ? r->bytes : P2P_INLINE);
    } else {
        r->seq = seq_of(comm_id, r->peer, r->tag)->received++;
    }
    post_step(call, r, 1);
}

/* A send under way (or done: eager, to oneself, to MPI_PROC_NULL). */
static struct request *start_send(const char *call, const void *buf, int count,
                                  MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)
{
    struct comm_view v = view_of(call, comm);
    struct twin tw = stage(call, (void *)buf, datatype, count_of(call, "count", count), 1, 0);
    size_t bytes = bytes_of(call, "count", scaled(call, count, tw.k), type_of(call, tw.type));
    struct request *r;

    buf = tw.buf;
    check_peer(call, &v, dest, 0);
    check_tag(call, tag, 0);
    check_buffer(call, "buf", buf, bytes);
    r = new_request(call, REQ_SEND, comm, dest, tag, (void *)buf, bytes);
    r->stages = take_stages(); /* the packed data, sent from until done */
    if ((r->error = call_result()) != MPI_SUCCESS) {
        r->step = STEP_DONE; /* its communicator failed: nothing to send to */
        return r;
    }
    if (dest == MPI_PROC_NULL) {
        r->step = STEP_DONE;
        return r;
    }
    p2p.sent++;
    if (dest == v.rank) {
        r->self = 1;
        self_send(call, comm, tag, buf, bytes);
        r->step = STEP_DONE;
        return r;
    }
    post_message(call, r, v.id, v.ranks != NULL ? v.ranks[dest] : dest);
    return r;
}

/* A receive under way (or done: from oneself, from MPI_PROC_NULL). */
static struct request *start_recv(const char *call, void *buf, int count, MPI_Datatype datatype,
                                  int source, int tag, MPI_Comm comm)
{
    struct comm_view v = view_of(call, comm);
    struct twin tw = stage(call, buf, datatype, count_of(call, "count", count), 0, 1);
    size_t bytes = bytes_of(call, "count", scaled(call, count, tw.k), type_of(call, tw.type));
    struct request *r;

    buf = tw.buf;
    check_peer(call, &v, source, 1);
    check_tag(call, tag, 1);
    check_buffer(call, "buf", buf, bytes);
    r = new_request(call, REQ_RECV, comm, source, tag, buf, bytes);
    r->stages = take_stages(); /* unpacked when the message is in (finish_request) */
    if ((r->error = call_result()) != MPI_SUCCESS) {
        r->step = STEP_DONE; /* its communicator failed: nothing will come */
        return r;
    }
    if (source == MPI_PROC_NULL) {
        r->step = STEP_DONE;
        return r;
    }
    p2p.received++;
    if (source == v.rank) {
        r->self = 1;
        self_recv(call, r);
        return r;
    }
    post_message(call, r, v.id, v.ranks != NULL ? v.ranks[source] : source);
    return r;
}

int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)
{
    struct request *r = start_send("MPI_Send", buf, count, datatype, dest, tag, comm);
    int e;

    wait_request("MPI_Send", r);
    e = r->error;
    let_go(r);
    return e;
}

int MPI_Recv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
             MPI_Status *status)
{
    struct request *r = start_recv("MPI_Recv", buf, count, datatype, source, tag, comm);
    int e;

    wait_request("MPI_Recv", r);
    fill_status(r, status);
    e = r->error;
    let_go(r);
    return e;
}

int MPI_Isend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
              MPI_Comm comm, MPI_Request *request)
{
    if (request == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Isend: request is NULL");
    *request = handle_of("MPI_Isend",
                         start_send("MPI_Isend", buf, count, datatype, dest, tag, comm));
    return MPI_SUCCESS;
}

int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
              MPI_Request *request)
{
    if (request == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Irecv: request is NULL");
    *request = handle_of("MPI_Irecv",
                         start_recv("MPI_Irecv", buf, count, datatype, source, tag, comm));
    return MPI_SUCCESS;
}

/* ---- collectives of a subset communicator -------------------------------------------
 *
 * eccl's collectives run on its whole ring. A communicator of some of the
 * ring's ranks, or of all in another order, runs each eccl collective the
 * calls above make as messages between its ranks instead, with the eccl
 * call's arguments and layouts: every rank posts the blocks it receives
 * and sends at once (sub_exchange), in the communicator's second tag space
 * (id + 1, apart from its messages), and reductions fold the ranks' blocks
 * in rank order, so every rank gets the same bits. Messages between a pair
 * of ranks match in order: every rank makes a communicator's collective
 * calls in the same order, each complete before the next. */

struct sub_block {
    const void *send;
    size_t send_bytes;
    void *recv;
    size_t recv_bytes;
};

/* A message of a subset communicator's collective: to or from its rank
 * `peer`, under way. */
static struct request *sub_message(const char *call, const struct mpi_comm *c, int kind, int peer,
                                   void *buf, size_t bytes)
{
    struct request *r = new_request(call, kind, comms.current, peer, 0, buf, bytes);

    if (kind == REQ_SEND)
        p2p.sent++;
    else
        p2p.received++;
    post_message(call, r, c->id + 1, c->ranks[peer]);
    return r;
}

/* Message q of a subset collective is done: its error (a receive of
 * another size than due is fatal), and q let go. */
static int sub_part_end(const char *call, struct request *q)
{
    int e = q->error;

    if (e == MPI_SUCCESS && q->kind == REQ_RECV && q->got != q->bytes)
        mpi_fatal(MPI_ERR_TRUNCATE, "%s: rank %d sent %zu bytes where %zu were due (the ranks' "
                  "counts do not agree)", call, q->peer, q->got, q->bytes);
    let_go(q);
    return e;
}

/* Block i of b (one per rank) to and from rank i, all at once: empty
 * blocks are not sent (both sides know the sizes) unless every pair must
 * meet (a barrier). ECCL_ERR_PEER_LOST if a rank was lost. */
static eccl_result sub_exchange(const char *call, struct sub_block *b, int every_pair,
                                eccl_reduce_info *info)
{
    struct mpi_comm *c = comm_state(comms.current);
    int size = c->size, me = c->rank, n = 0, lost = 0;
    struct request **reqs = scratch_alloc(call, mul_size(call, 2 * (size_t)size, sizeof *reqs));

    for (int i = 0; i < size; i++)
        if (i != me && (b[i].recv_bytes != 0 || every_pair))
            reqs[n++] = sub_message(call, c, REQ_RECV, i, b[i].recv, b[i].recv_bytes);
    for (int i = 0; i < size; i++)
        if (i != me && (b[i].send_bytes != 0 || every_pair))
            reqs[n++] = sub_message(call, c, REQ_SEND, i, (void *)b[i].send, b[i].send_bytes);
    if (b[me].recv_bytes != 0 && b[me].recv != b[me].send)
        memmove(b[me].recv, b[me].send, b[me].recv_bytes);
    info->world_size = (uint32_t)size;
    if (p2p.starting != NULL) { /* nonblocking: sub_progress ends it */
        p2p.starting->parts = reqs;
        p2p.starting->n_parts = n;
        p2p.starting->size = size;
        return ECCL_OK;
    }
    for (int k = 0; k < n; k++) {
        wait_request(call, reqs[k]);
        lost |= sub_part_end(call, reqs[k]) != MPI_SUCCESS;
    }
    free(reqs);
    return lost ? ECCL_ERR_PEER_LOST : ECCL_OK;
}

static struct sub_block *sub_blocks(const char *call)
{
    struct mpi_comm *c = comm_state(comms.current);
    struct sub_block *b = scratch_alloc(call, mul_size(call, (size_t)c->size, sizeof *b));

    memset(b, 0, (size_t)c->size * sizeof *b);
    return b;
}

static int sub_rank(void)
{
    return comm_state(comms.current)->rank;
}

static int sub_size(void)
{
    return comm_state(comms.current)->size;
}

static eccl_result sub_done(struct sub_block *b, void *scratch, eccl_result rc)
{
    struct sub_later *s = p2p.starting;

    free(b);
    if (s != NULL && scratch != NULL) {
        /* Nonblocking: the messages may still read or write it. */
        if (s->n_scratch == (int)(sizeof s->scratch / sizeof s->scratch[0]))
            mpi_fatal(MPI_ERR_INTERN, "a subset collective keeps more scratch than it has room for");
        s->scratch[s->n_scratch++] = scratch;
    } else {
        free(scratch);
    }
    return rc;
}

/* out = block size - 1 op (... op block 0), blocks `stride` bytes apart:
 * the same order on every rank. The shim gives eccl only its own element
 * types and operations. */
static void sub_fold(const char *all, size_t stride, size_t count, eccl_dtype dtype, eccl_op op,
                     void *out, int size)
{
    static const enum mpi_ctype ctypes[] = {
        [ECCL_I8] = CT_I8,   [ECCL_U8] = CT_U8,   [ECCL_I16] = CT_I16, [ECCL_U16] = CT_U16,
        [ECCL_I32] = CT_I32, [ECCL_U32] = CT_U32, [ECCL_I64] = CT_I64, [ECCL_U64] = CT_U64,
        [ECCL_F32] = CT_FLOAT, [ECCL_F64] = CT_DOUBLE};
    enum mpi_opcode opc = op == ECCL_SUM ? OPC_SUM : op == ECCL_PROD ? OPC_PROD
                        : op == ECCL_MIN ? OPC_MIN : OPC_MAX;
    mpi_local_fn fn = mpi_local_op(opc, ctypes[dtype]);
    size_t bytes = count * eccl_dtype_size(dtype);

    memmove(out, all + (size_t)(size - 1) * stride, bytes);
    for (int k = size - 2; k >= 0; k--)
        fn(all + (size_t)k * stride, out, count);
}

/* sub_fold now, or (nonblocking) once the messages are in. */
static void sub_fold_in(const char *all, size_t stride, size_t count, eccl_dtype dtype, eccl_op op,
                        void *out)
{
    struct sub_later *s = p2p.starting;

    if (s == NULL) {
        sub_fold(all, stride, count, dtype, op, out, sub_size());
        return;
    }
    s->all = all;
    s->stride = stride;
    s->count = count;
    s->dtype = dtype;
    s->op = op;
    s->out = out;
}

/* Ends the subset collectives whose messages are all done (progress_all);
 * how many. */
static int sub_progress(void)
{
    int ended = 0;

    for (struct request *r = p2p.subs, *next; r != NULL; r = next) {
        struct sub_later *s = r->later;
        int k = 0, e = MPI_SUCCESS;

        next = r->next;
        while (k < s->n_parts && user_done(s->parts[k]))
            k++;
        if (k < s->n_parts)
            continue;
        for (k = 0; k < s->n_parts; k++) {
            int ek = sub_part_end(r->call, s->parts[k]);
            e = e != MPI_SUCCESS ? e : ek;
        }
        if (e == MPI_SUCCESS && s->out != NULL)
            sub_fold(s->all, s->stride, s->count, s->dtype, s->op, s->out, s->size);
        for (k = 0; k < s->n_scratch; k++)
            free(s->scratch[k]);
        free(s->parts);
        free(s);
        r->later = NULL;
        unlink_request(&p2p.subs, r);
        r->error = e;
        run_after(&r->after);
        finish_request(r);
        ended++;
    }
    return ended;
}

static eccl_result sub_barrier_op(eccl_comm *comm, uint64_t tag, eccl_reduce_info *info)
{
    (void)comm, (void)tag;
    return sub_done(NULL, NULL, sub_exchange("a barrier", sub_blocks("a barrier"), 1, info));
}

static eccl_result sub_eccl_broadcast(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                                      size_t count, eccl_dtype dtype, uint32_t root, uint64_t tag,
                                      eccl_reduce_info *info)
{
    struct sub_block *b = sub_blocks("a broadcast");
    size_t bytes = count * eccl_dtype_size(dtype);
    int me = sub_rank();

    (void)comm, (void)tag;
    for (int i = 0; i < sub_size(); i++)
        if ((uint32_t)me == root)
            b[i] = (struct sub_block){sendbuf, bytes, NULL, 0};
    if ((uint32_t)me == root)
        b[me].recv = recvbuf, b[me].recv_bytes = bytes;
    else
        b[root].recv = recvbuf, b[root].recv_bytes = bytes;
    return sub_done(b, NULL, sub_exchange("a broadcast", b, 0, info));
}

static eccl_result sub_eccl_allgatherv(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                                       const size_t *recvcounts, const size_t *displs,
                                       eccl_dtype dtype, uint64_t tag, eccl_reduce_info *info)
{
    struct sub_block *b = sub_blocks("an all-gather");
    size_t es = eccl_dtype_size(dtype);
    int me = sub_rank();

    (void)comm, (void)tag;
    for (int i = 0; i < sub_size(); i++)
        b[i] = (struct sub_block){sendbuf, recvcounts[me] * es, (char *)recvbuf + displs[i] * es,
                                  recvcounts[i] * es};
    return sub_done(b, NULL, sub_exchange("an all-gather", b, 0, info));
}

static eccl_result sub_eccl_allgather(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                                      size_t sendcount, eccl_dtype dtype, uint64_t tag,
                                      eccl_reduce_info *info)
{
    size_t size = (size_t)sub_size(), *c = scratch_alloc("an all-gather", 2 * size * sizeof *c);

    for (size_t i = 0; i < size; i++) {
        c[i] = sendcount;
        c[size + i] = i * sendcount;
    }
    return sub_done(NULL, c, sub_eccl_allgatherv(comm, sendbuf, recvbuf, c, c + size, dtype, tag, info));
}

static eccl_result sub_eccl_alltoallv(eccl_comm *comm, const void *sendbuf, const size_t *sendcounts,
                                      const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                      const size_t *rdispls, eccl_dtype dtype, uint64_t tag,
                                      eccl_reduce_info *info)
{
    struct sub_block *b = sub_blocks("an all-to-all");
    size_t es = eccl_dtype_size(dtype), end = 0;
    int size = sub_size();
    char *copy = NULL;

    (void)comm, (void)tag;
    if (sendcounts == NULL) { /* in place: send from a copy of the receive layout */
        for (int i = 0; i < size; i++)
            if (recvcounts[i] != 0 && rdispls[i] + recvcounts[i] > end)
                end = rdispls[i] + recvcounts[i];
        copy = scratch_alloc("an all-to-all", end * es + 1);
        memcpy(copy, recvbuf, end * es);
        sendbuf = copy;
        sendcounts = recvcounts;
        sdispls = rdispls;
    }
    for (int i = 0; i < size; i++)
        b[i] = (struct sub_block){(const char *)sendbuf + sdispls[i] * es, sendcounts[i] * es,
                                  (char *)recvbuf + rdispls[i] * es, recvcounts[i] * es};
    return sub_done(b, copy, sub_exchange("an all-to-all", b, 0, info));
}

static eccl_result sub_eccl_alltoall(eccl_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                     eccl_dtype dtype, uint64_t tag, eccl_reduce_info *info)
{
    size_t size = (size_t)sub_size(), *c = scratch_alloc("an all-to-all", 2 * size * sizeof *c);
    int in_place = sendbuf == recvbuf;

    for (size_t i = 0; i < size; i++) {
        c[i] = count;
        c[size + i] = i * count;
    }
    return sub_done(NULL, c, sub_eccl_alltoallv(comm, in_place ? NULL : sendbuf, in_place ? NULL : c,
                                                c + size, recvbuf, c, c + size, dtype, tag, info));
}

/* Every rank's blocks for us (rank i's at i * bytes of new scratch): rank
 * j's send block for rank r starts at byte off(r) of its sendbuf. */
static eccl_result sub_gather_for_fold(const char *call, const void *sendbuf, const size_t *offs,
                                       size_t bytes, int to_all, uint32_t root, char **all,
                                       eccl_reduce_info *info)
{
    struct sub_block *b = sub_blocks(call);
    int me = sub_rank(), size = sub_size();

    *all = scratch_alloc(call, mul_size(call, bytes, (size_t)size) + 1);
    for (int i = 0; i < size; i++) {
        int target = to_all ? i : (int)root;
        b[i].send = (const char *)sendbuf + (offs != NULL ? offs[i] : 0);
        b[i].send_bytes = i == target ? bytes : 0;
        if (to_all || (uint32_t)me == root)
            b[i].recv = *all + (size_t)i * bytes, b[i].recv_bytes = bytes;
    }
    return sub_done(b, NULL, sub_exchange(call, b, 0, info));
}

static eccl_result sub_eccl_allreduce(eccl_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                      eccl_dtype dtype, eccl_op op, uint64_t tag, eccl_reduce_info *info)
{
    size_t bytes = count * eccl_dtype_size(dtype);
    char *all;
    eccl_result rc = sub_gather_for_fold("an all-reduce", sendbuf, NULL, bytes, 1, 0, &all, info);

    (void)comm, (void)tag;
    if (rc == ECCL_OK)
        sub_fold_in(all, bytes, count, dtype, op, recvbuf);
    return sub_done(NULL, all, rc);
}

static eccl_result sub_eccl_reduce(eccl_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                   eccl_dtype dtype, eccl_op op, uint32_t root, uint64_t tag,
                                   eccl_reduce_info *info)
{
    size_t bytes = count * eccl_dtype_size(dtype);
    char *all;
    eccl_result rc = sub_gather_for_fold("a reduce", sendbuf, NULL, bytes, 0, root, &all, info);

    (void)comm, (void)tag;
    if (rc == ECCL_OK && (uint32_t)sub_rank() == root)
        sub_fold_in(all, bytes, count, dtype, op, recvbuf);
    return sub_done(NULL, all, rc);
}

static eccl_result sub_eccl_reduce_scatterv(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                                            const size_t *recvcounts, eccl_dtype dtype, eccl_op op,
                                            uint64_t tag, eccl_reduce_info *info)
{
    size_t size = (size_t)sub_size(), me = (size_t)sub_rank(), es = eccl_dtype_size(dtype);
    size_t *offs = scratch_alloc("a reduce-scatter", size * sizeof *offs), at = 0;
    struct sub_block *b = sub_blocks("a reduce-scatter");
    char *all = scratch_alloc("a reduce-scatter", mul_size("a reduce-scatter", recvcounts[me] * es, size) + 1);
    size_t mine = recvcounts[me] * es;
    eccl_result rc;

    (void)comm, (void)tag;
    for (size_t i = 0; i < size; i++) {
        offs[i] = at;
        at += recvcounts[i] * es;
    }
    for (size_t i = 0; i < size; i++)
        b[i] = (struct sub_block){(const char *)sendbuf + offs[i], recvcounts[i] * es, all + i * mine, mine};
    rc = sub_exchange("a reduce-scatter", b, 0, info);
    if (rc == ECCL_OK)
        sub_fold_in(all, mine, recvcounts[me], dtype, op, recvbuf);
    free(offs);
    return sub_done(b, all, rc);
}

static eccl_result sub_eccl_reduce_scatter(eccl_comm *comm, const void *sendbuf, void *recvbuf,
                                           size_t recvcount, eccl_dtype dtype, eccl_op op, uint64_t tag,
                                           eccl_reduce_info *info)
{
    size_t size = (size_t)sub_size(), *c = scratch_alloc("a reduce-scatter", size * sizeof *c);

    for (size_t i = 0; i < size; i++)
        c[i] = recvcount;
    return sub_done(NULL, c, sub_eccl_reduce_scatterv(comm, sendbuf, recvbuf, c, dtype, op, tag, info));
}

/* The receive is posted first, so a send to oneself finds it. */
int MPI_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest,
                 int sendtag, void *recvbuf, int recvcount, MPI_Datatype recvtype, int source,
                 int recvtag, MPI_Comm comm, MPI_Status *status)
{
    static const char call[] = "MPI_Sendrecv";
    struct request *rr = start_recv(call, recvbuf, recvcount, recvtype, source, recvtag, comm);
    struct request *sr = start_send(call, sendbuf, sendcount, sendtype, dest, sendtag, comm);

    int e;

    wait_request(call, sr);
    wait_request(call, rr);
    fill_status(rr, status);
    e = sr->error != MPI_SUCCESS ? sr->error : rr->error;
    let_go(sr);
    let_go(rr);
    return e;
}

/* Waits for *request and releases it; its result. */
static int wait_handle(const char *call, MPI_Request *request, MPI_Status *status)
{
    struct request *r;
    int e;

    if (*request == MPI_REQUEST_NULL) {
        empty_status(status);
        return MPI_SUCCESS;
    }
    r = request_of(call, *request);
    wait_request(call, r);
    fill_status(r, status);
    e = r->error;
    drop_handle(r);
    *request = MPI_REQUEST_NULL;
    return e;
}

int MPI_Wait(MPI_Request *request, MPI_Status *status)
{
    mpi_require_initialized("MPI_Wait");
    if (request == NULL)
        mpi_fatal(MPI_ERR_REQUEST, "MPI_Wait: request is NULL");
    return wait_handle("MPI_Wait", request, status);
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[])
{
    size_t n = count_of("MPI_Waitall", "count", count);

    mpi_require_initialized("MPI_Waitall");
    if (n != 0 && requests == NULL)
        mpi_fatal(MPI_ERR_REQUEST, "MPI_Waitall: requests is NULL");
    /* Every request ends; a failed one makes it MPI_ERR_IN_STATUS, each
     * status's MPI_ERROR saying which. */
    int e = MPI_SUCCESS;
    for (size_t i = 0; i < n; i++)
        if (wait_handle("MPI_Waitall", &requests[i],
                        statuses == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &statuses[i]) !=
            MPI_SUCCESS)
            e = MPI_ERR_IN_STATUS;
    return e;
}

int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status)
{
    struct request *r;

    mpi_require_initialized("MPI_Test");
    if (request == NULL || flag == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Test: request or flag is NULL");
    if (*request == MPI_REQUEST_NULL) {
        *flag = 1;
        empty_status(status);
        return MPI_SUCCESS;
    }
    r = request_of("MPI_Test", *request);
    progress_all();
    *flag = user_done(r);
    int e = MPI_SUCCESS;
    if (*flag) {
        fill_status(r, status);
        e = r->error;
        drop_handle(r);
        *request = MPI_REQUEST_NULL;
    }
    return e;
}


/* MPI_Waitany: the first of the active requests to complete (MPI_UNDEFINED
 * when none is active); polled, since it may be any of them. */
int MPI_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status)
{
    static const char call[] = "MPI_Waitany";
    size_t n = count_of(call, "count", count);
    unsigned round = 0;

    mpi_require_initialized(call);
    if (index == NULL || (n != 0 && requests == NULL))
        mpi_fatal(MPI_ERR_ARG, "%s: index or requests is NULL", call);
    for (;;) {
        int active = 0;

        for (size_t i = 0; i < n; i++) {
            struct request *r;

            if (requests[i] == MPI_REQUEST_NULL)
                continue;
            active = 1;
            r = request_of(call, requests[i]);
            if (user_done(r)) {
                int e = r->error;

                fill_status(r, status);
                drop_handle(r);
                requests[i] = MPI_REQUEST_NULL;
                *index = (int)i;
                return e;
            }
        }
        if (!active) {
            *index = MPI_UNDEFINED;
            empty_status(status);
            return MPI_SUCCESS;
        }
        if (progress_all() != 0)
            round = 0;
        else
            poll_pause(&round);
    }
}

/* MPI_Testall: all complete (each then released, its status filled), or
 * none released. */
int MPI_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[])
{
    static const char call[] = "MPI_Testall";
    size_t n = count_of(call, "count", count);

    mpi_require_initialized(call);
    if (flag == NULL || (n != 0 && requests == NULL))
        mpi_fatal(MPI_ERR_ARG, "%s: flag or requests is NULL", call);
    int e = MPI_SUCCESS;

    progress_all();
    *flag = 1;
    for (size_t i = 0; i < n && *flag; i++)
        if (requests[i] != MPI_REQUEST_NULL && !user_done(request_of(call, requests[i])))
            *flag = 0;
    for (size_t i = 0; i < n && *flag; i++) {
        MPI_Status *st = statuses == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &statuses[i];

        if (requests[i] == MPI_REQUEST_NULL) {
            empty_status(st);
            continue;
        }
        struct request *r = request_of(call, requests[i]);
        fill_status(r, st);
        if (r->error != MPI_SUCCESS)
            e = MPI_ERR_IN_STATUS;
        drop_handle(r);
        requests[i] = MPI_REQUEST_NULL;
    }
    return e;
}

/* ---- rooted gathers and scatters ----------------------------------------------------
 *
 * On eccl_alltoallv (rooted_bytes): only the root's blocks are non-empty,
 * so each byte travels once, rank to root or root to rank. The root's
 * buffer arguments (recvbuf of a gather, sendbuf of a scatter, their
 * counts, displacements and type) are read at the root only, as MPI says
 * they are significant there only. MPI_IN_PLACE at the root: its own block
 * stays where it is. */

/* The root's side in bytes: `count` elements of `type` a rank in rank
 * order, or (the v variants, `varying`) counts[] at displs[], as byte
 * counts and offsets from the returned base (MPI's displacements may be
 * negative). */
static char *root_layout(const char *call, const char *name, void *buf, int count, int varying,
                         const int counts[], const int displs[], const struct mpi_type *type,
                         size_t size, size_t *bcounts, size_t *bdispls)
{
    if (varying && (counts == NULL || displs == NULL))
        mpi_fatal(MPI_ERR_ARG, "%s: the root's counts or displs is NULL", call);
    if (varying)
        return bytes_layout(call, name, buf, "counts[]", counts, displs, type, size, bcounts,
                            bdispls);
    size_t block = bytes_of(call, "count", count, type);
    check_buffer(call, name, buf, mul_size(call, block, size));
    for (size_t r = 0; r < size; r++) {
        bcounts[r] = block;
        bdispls[r] = mul_size(call, r, block);
    }
    return buf;
}

/* MPI_Gather(v) (gather 1) and MPI_Scatter(v) (0): `mine` is this rank's
 * own buffer (a gather's send side, a scatter's receive side), `at_root`
 * the root's. */
static int rooted_packed(const char *call, int gather, const void *mine, int mine_count,
                  MPI_Datatype mine_type, void *at_root, int root_count, int varying,
                  const int root_counts[], const int root_displs[], MPI_Datatype root_type,
                  int root, MPI_Comm comm, MPI_Request *nb)
{
    struct comm_view v = view_of(call, comm);
    size_t size = (size_t)v.size, me;
    int is_root, in_place = mine == MPI_IN_PLACE;

    check_root(call, root, &v);
    is_root = v.rank == root;
    me = (size_t)v.rank;
    if (in_place && !is_root)
        mpi_fatal(MPI_ERR_BUFFER, "%s: MPI_IN_PLACE is for the root only", call);
    size_t mine_bytes = in_place ? 0 : bytes_of(call, "count", mine_count,
                                                type_of(call, mine_type));
    if (!in_place)
        check_buffer(call, gather ? "sendbuf" : "recvbuf", mine, mine_bytes);
    size_t *shares = scratch_alloc(call, mul_size(call, 2 * size, sizeof *shares));
    char *base = NULL;
    if (is_root) {
        base = root_layout(call, gather ? "recvbuf" : "sendbuf", at_root, root_count, varying,
                           root_counts, root_displs, type_of(call, root_type), size, shares,
                           shares + size);
        if (in_place)
            shares[me] = 0; /* its block stays where it is */
        else
            check_match(call, gather ? mine_bytes : shares[me], gather ? shares[me] : mine_bytes);
    }
    if (v.ecomm == NULL) {
        if (!in_place && mine_bytes != 0)
            memcpy(gather ? base + shares[size] : (char *)mine, gather ? mine : base + shares[size],
                   mine_bytes);
        free(shares);
        return done_now(call, nb);
    }
    rooted_bytes(call, &v, root, gather, (void *)mine, mine_bytes, base, shares, shares + size, nb);
    return call_result();
}

static int rooted(const char *call, int gather, const void *mine, int mine_count,
                  MPI_Datatype mine_type, void *at_root, int root_count, int varying,
                  const int root_counts[], const int root_displs[], MPI_Datatype root_type,
                  int root, MPI_Comm comm, MPI_Request *nb)
{
    struct comm_view v = view_of(call, comm);
    int in_place = mine == MPI_IN_PLACE;
    struct twin m = {(void *)mine, mine_type, 1}, r = {at_root, root_type, 1};
    const int *rc = root_counts, *rd = root_displs;

    if (!in_place)
        m = stage(call, (void *)mine, mine_type, count_of(call, "count", mine_count), gather, !gather);
    if (v.rank == root) { /* the root's buffer means nothing elsewhere */
        int in = !gather || in_place; /* in place, its own block stays */
        if (varying)
            r = stage_v(call, at_root, root_type, (size_t)v.size, root_counts, root_displs, in,
                        gather, &rc, &rd);
        else
            r = stage(call, at_root, root_type,
                      mul_size(call, count_of(call, "count", root_count), (size_t)v.size), in, gather);
    }
    return staged_end(rooted_packed(call, gather, m.buf,
                                    in_place ? mine_count : scaled(call, mine_count, m.k), m.type,
                                    r.buf, varying ? root_count : scaled(call, root_count, r.k),
                                    varying, rc, rd, r.type, root, comm, nb));
}

int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    return rooted("MPI_Gather", 1, sendbuf, sendcount, sendtype, recvbuf, recvcount, 0, NULL, NULL,
                  recvtype, root, comm, NULL);
}

int MPI_Igather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request *request)
{
    return rooted("MPI_Igather", 1, sendbuf, sendcount, sendtype, recvbuf, recvcount, 0, NULL, NULL,
                  recvtype, root, comm, nb_arg("MPI_Igather", request));
}

int MPI_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                MPI_Comm comm)
{
    return rooted("MPI_Gatherv", 1, sendbuf, sendcount, sendtype, recvbuf, 0, 1, recvcounts, displs,
                  recvtype, root, comm, NULL);
}

int MPI_Igatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                 MPI_Comm comm, MPI_Request *request)
{
    return rooted("MPI_Igatherv", 1, sendbuf, sendcount, sendtype, recvbuf, 0, 1, recvcounts,
                  displs, recvtype, root, comm, nb_arg("MPI_Igatherv", request));
}

int MPI_Scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    return rooted("MPI_Scatter", 0, recvbuf, recvcount, recvtype, (void *)sendbuf, sendcount, 0,
                  NULL, NULL, sendtype, root, comm, NULL);
}

int MPI_Iscatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                 MPI_Request *request)
{
    return rooted("MPI_Iscatter", 0, recvbuf, recvcount, recvtype, (void *)sendbuf, sendcount, 0,
                  NULL, NULL, sendtype, root, comm, nb_arg("MPI_Iscatter", request));
}

int MPI_Scatterv(const void *sendbuf, const int sendcounts[], const int displs[],
                 MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                 int root, MPI_Comm comm)
{
    return rooted("MPI_Scatterv", 0, recvbuf, recvcount, recvtype, (void *)sendbuf, 0, 1,
                  sendcounts, displs, sendtype, root, comm, NULL);
}

int MPI_Iscatterv(const void *sendbuf, const int sendcounts[], const int displs[],
                  MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                  int root, MPI_Comm comm, MPI_Request *request)
{
    return rooted("MPI_Iscatterv", 0, recvbuf, recvcount, recvtype, (void *)sendbuf, 0, 1,
                  sendcounts, displs, sendtype, root, comm, nb_arg("MPI_Iscatterv", request));
}

/* ---- communicators ----------------------------------------------------------------------
 *
 * A communicator is all of eccl's ring in ring order (MPI_COMM_WORLD, its
 * duplicates, MPIX_Comm_shrink's survivors), whose collectives are eccl's;
 * some of the ring's ranks or all in another order (a subset communicator:
 * MPI_Comm_split, MPI_Comm_create), whose collectives run as messages
 * (sub_exchange); or a world of one (MPI_COMM_SELF's). Each has an id, its
 * tag space (two for a subset), agreed by the ranks that make it: one past
 * the largest any of them has used (their counters differ once some of
 * them made communicators of their own), so no two communicators that
 * share a rank share an id. */

static int ring_rank_of(const struct mpi_comm *c, int i)
{
    return c->ranks != NULL ? c->ranks[i] : i;
}

/* Rank i of c as MPI_COMM_WORLD numbered it at MPI_Init. */
static int proc_of(const struct mpi_comm *c, int i)
{
    if (c->procs != NULL)
        return c->procs[i];
    return c->of_self ? world.rank : ring_rank_of(c, i);
}

int mpi_my_proc(void)
{
    return world.rank;
}

static int *int_copy(const char *call, const int *from, int n)
{
    int *to = scratch_alloc(call, mul_size(call, (size_t)(n > 0 ? n : 1), sizeof *to));

    memcpy(to, from, (size_t)n * sizeof *to);
    return to;
}

/* The id of a communicator made from v's (collective over v). */
static uint32_t agree_id(const char *call, struct comm_view *v)
{
    uint32_t mine = comms.next_id, most = mine;

    if (v->ecomm != NULL)
        RUN_COLL(call, eccl_allreduce, v->ecomm, &mine, &most, 1, ECCL_U32, ECCL_MAX, take_tag(v));
    return most + 1;
}

/* A new communicator made from `parent`'s (the call under way's): of its
 * ranks sel[0 .. n - 1] in that order (a subset communicator), or of all
 * of them as they are (sel NULL: its kind, a world of one or the ring's
 * ranks). Its error handler is its parent's. */
int mpi_table_slot(const char *call, const char *what, void **table, int *n, int *cap, size_t size, int max,
                   int (*is_free)(const void *entry))
{
    for (int i = 0; i < *n; i++)
        if (is_free((const char *)*table + (size_t)i * size))
            return i;
    if (*n >= max)
        return -1;
    if (*n == *cap) {
        int grown_cap = *cap != 0 ? 2 * *cap : 16;
        void *grown = realloc(*table, (size_t)grown_cap * size);

        if (grown == NULL)
            mpi_fatal(MPI_ERR_NO_MEM, "%s: cannot hold %d of %s", call, grown_cap, what);
        *table = grown;
        *cap = grown_cap;
    }
    return (*n)++;
}

static int comm_free_slot(const void *entry)
{
    return !((const struct mpi_comm *)entry)->used;
}

static MPI_Comm comm_new(const char *call, const struct comm_view *parent, uint32_t id,
                         const int *sel, int n)
{
    void *table = comms.slots;
    int slot = mpi_table_slot(call, "communicators", &table, &comms.n, &comms.cap, sizeof *comms.slots,
                              INT_MAX, comm_free_slot);

    comms.slots = table;
    const struct mpi_comm *from = comm_state(comms.current);
    struct mpi_comm *c = &comms.slots[slot];
    *c = (struct mpi_comm){.used = 1,
                           .of_self = sel == NULL && parent->ecomm == NULL && parent->size == 1 &&
                                      from->ranks == NULL,
                           .errors_return = from->errors_return,
                           .shrunk = from->shrunk,
                           .rank = from->rank,
                           .size = from->size,
                           .epoch = from->epoch,
                           .ring_size = from->ring_size};
    if (sel != NULL) {
        c->ranks = scratch_alloc(call, mul_size(call, (size_t)n, sizeof *c->ranks));
        c->procs = scratch_alloc(call, mul_size(call, (size_t)n, sizeof *c->procs));
        for (int k = 0; k < n; k++) {
            c->ranks[k] = ring_rank_of(from, sel[k]);
            c->procs[k] = proc_of(from, sel[k]);
            if (sel[k] == parent->rank)
                c->rank = k;
        }
        c->size = n;
    } else {
        c->ranks = from->ranks != NULL ? int_copy(call, from->ranks, from->size) : NULL;
        c->procs = from->procs != NULL ? int_copy(call, from->procs, c->ranks != NULL || from->shrunk ? from->size : 0) : NULL;
    }
    if (!c->of_self) {
        if (id + 1 > COMM_ID_MAX)
            mpi_fatal(MPI_ERR_NO_MEM, "%s: %d communicators were made, the most eccl's tags can "
                      "tell apart", call, COMM_ID_MAX / 2);
        c->id = id;
        comms.next_id = id + 1; /* id + 1: a subset's collectives */
    }
    return (MPI_Comm)(COMM_HANDLE_BASE + slot);
}

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm)
{
    static const char call[] = "MPI_Comm_dup";
    struct comm_view v = view_of(call, comm);

    if (newcomm == NULL)
        mpi_fatal(MPI_ERR_ARG, "%s: newcomm is NULL", call);
    uint32_t id = agree_id(call, &v);
    *newcomm = comms.error == MPI_SUCCESS ? comm_new(call, &v, id, NULL, 0) : MPI_COMM_NULL;
    return call_result();
}

int MPI_Comm_free(MPI_Comm *comm)
{
    unsigned slot = comm != NULL ? (unsigned)*comm - COMM_HANDLE_BASE : ~0u;

    mpi_require_initialized("MPI_Comm_free");
    if (comm == NULL || slot >= (unsigned)comms.n || !comms.slots[slot].used)
        mpi_fatal(MPI_ERR_COMM, "MPI_Comm_free: not a communicator made by MPI (MPI_COMM_WORLD "
                  "and MPI_COMM_SELF are never freed)");
    /* Its operations still in flight (an eager send, say) end as MPI
     * says, normally; they stop naming it, whose slot and handle a new
     * communicator may take. */
    for (int list = 0; list < 2; list++)
        for (struct request *r = list == 0 ? p2p.active : p2p.self_waiting; r != NULL; r = r->next)
            if (r->comm == *comm) {
                r->comm = MPI_COMM_NULL;
                r->freed_errors_return = comms.slots[slot].errors_return;
            }
    free(comms.slots[slot].ranks);
    free(comms.slots[slot].procs);
    comms.slots[slot] = (struct mpi_comm){0};
    *comm = MPI_COMM_NULL;
    return MPI_SUCCESS;
}

/* The processes of comm, in its order, into new scratch. */
static int *procs_of(const char *call, MPI_Comm comm, int *n)
{
    struct comm_view v = view_of(call, comm);
    const struct mpi_comm *c = comm_state(comm);
    int *p = scratch_alloc(call, mul_size(call, (size_t)v.size, sizeof *p));

    drop_result(); /* for local calls: a failed or revoked communicator has its processes */

    for (int i = 0; i < v.size; i++)
        p[i] = proc_of(c, i);
    *n = v.size;
    return p;
}

int MPI_Comm_group(MPI_Comm comm, MPI_Group *group)
{
    static const char call[] = "MPI_Comm_group";
    int n, *p = procs_of(call, comm, &n);

    if (group == NULL)
        mpi_fatal(MPI_ERR_ARG, "%s: group is NULL", call);
    *group = mpi_group_new(call, p, n);
    free(p);
    drop_result(); /* a local call: a failed communicator still has its group */
    return MPI_SUCCESS;
}

/* MPI_IDENT for one handle; MPI_CONGRUENT for the same processes in the
 * same order, MPI_SIMILAR in another order, MPI_UNEQUAL otherwise. */
int MPI_Comm_compare(MPI_Comm comm1, MPI_Comm comm2, int *result)
{
    static const char call[] = "MPI_Comm_compare";
    int n1, n2, *p1 = procs_of(call, comm1, &n1), *p2 = procs_of(call, comm2, &n2);

    if (result == NULL)
        mpi_fatal(MPI_ERR_ARG, "%s: result is NULL", call);
    MPI_Group g1 = mpi_group_new(call, p1, n1), g2 = mpi_group_new(call, p2, n2);
    MPI_Group_compare(g1, g2, result);
    if (*result == MPI_IDENT)
        *result = comm1 == comm2 ? MPI_IDENT : MPI_CONGRUENT;
    if (g1 != MPI_GROUP_EMPTY)
        MPI_Group_free(&g1);
    if (g2 != MPI_GROUP_EMPTY)
        MPI_Group_free(&g2);
    free(p1);
    free(p2);
    drop_result();
    return MPI_SUCCESS;
}

/* sel[0 .. n - 1] if it names every rank of a communicator of `size` in
 * order (then the new one is made as a duplicate), else itself. */
static const int *subset_or_all(const int *sel, int n, int size)
{
    if (n != size)
        return sel;
    for (int k = 0; k < n; k++)
        if (sel[k] != k)
            return sel;
    return NULL;
}

/* Every rank gives (color, key); the ranks of one color make a
 * communicator, in the order of their keys, ties in their old order
 * (MPI 4.1, 7.4.2); MPI_UNDEFINED makes none. */
static int split(const char *call, MPI_Comm comm, int color, int key, MPI_Comm *newcomm)
{
    struct comm_view v = view_of(call, comm);
    int mine[3] = {color, key, (int)comms.next_id}, *all, *sel, n = 0;

    if (newcomm == NULL)
        mpi_fatal(MPI_ERR_ARG, "%s: newcomm is NULL", call);
    if (color < 0 && color != MPI_UNDEFINED)
        mpi_fatal(MPI_ERR_ARG, "%s: color %d is negative", call, color);
    all = scratch_alloc(call, mul_size(call, (size_t)v.size, sizeof mine));
    if (v.ecomm == NULL)
        memcpy(all, mine, sizeof mine);
    else
        RUN_COLL(call, eccl_allgather, v.ecomm, mine, all, sizeof mine, ECCL_U8, take_tag(&v));
    if (comms.error != MPI_SUCCESS) { /* a process failure: no new communicator */
        free(all);
        *newcomm = MPI_COMM_NULL;
        return call_result();
    }
    uint32_t most = 0;
    sel = scratch_alloc(call, mul_size(call, (size_t)v.size, sizeof *sel));
    for (int r = 0; r < v.size; r++) {
        if ((uint32_t)all[3 * r + 2] > most)
            most = (uint32_t)all[3 * r + 2];
        if (color == MPI_UNDEFINED || all[3 * r] != color)
            continue;
        /* insertion by (key, old rank): r comes after every equal key */
        int k = n++;
        while (k > 0 && all[3 * sel[k - 1] + 1] > all[3 * r + 1]) {
            sel[k] = sel[k - 1];
            k--;
        }
        sel[k] = r;
    }
    free(all);
    if (color == MPI_UNDEFINED) {
        comms.next_id = most + 1 > comms.next_id ? most + 1 : comms.next_id;
        *newcomm = MPI_COMM_NULL;
    } else {
        *newcomm = comm_new(call, &v, most + 1, subset_or_all(sel, n, v.size), n);
    }
    free(sel);
    return call_result();
}

/* The processes of group make a communicator, in the group's order; the
 * others get MPI_COMM_NULL (7.4.2). Collective over comm. */
int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm)
{
    static const char call[] = "MPI_Comm_create";
    struct comm_view v = view_of(call, comm);
    const struct mpi_comm *c = comm_state(comm);
    int n, me = -1;
    const int *procs = mpi_group_procs(group, &n);

    if (newcomm == NULL)
        mpi_fatal(MPI_ERR_ARG, "%s: newcomm is NULL", call);
    if (procs == NULL)
        mpi_fatal(MPI_ERR_GROUP, "%s: invalid group handle 0x%x", call, (unsigned)group);
    int *sel = scratch_alloc(call, mul_size(call, (size_t)(n > 0 ? n : 1), sizeof *sel));
    for (int k = 0; k < n; k++) {
        sel[k] = -1;
        for (int i = 0; i < v.size && sel[k] < 0; i++)
            if (proc_of(c, i) == procs[k])
                sel[k] = i;
        if (sel[k] < 0)
            mpi_fatal(MPI_ERR_GROUP, "%s: process %d of the group is not in the communicator", call,
                      procs[k]);
        if (sel[k] == v.rank)
            me = k;
    }
    uint32_t id = agree_id(call, &v);
    *newcomm = comms.error != MPI_SUCCESS || me < 0 ? MPI_COMM_NULL
                                                    : comm_new(call, &v, id, subset_or_all(sel, n, v.size), n);
    if (*newcomm == MPI_COMM_NULL && comms.next_id < id + 1)
        comms.next_id = id + 1;
    free(sel);
    return call_result();
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm)
{
    return split("MPI_Comm_split", comm, color, key, newcomm);
}

/* MPI_COMM_TYPE_SHARED: the ranks that share this host's memory. The
 * color is a hash of the host's name, so ranks on one host (all of an
 * eccl-run job's) split as one, and ranks on several hosts fail loudly as
 * a split into several communicators. */
int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm *newcomm)
{
    static const char call[] = "MPI_Comm_split_type";
    char host[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0, color = MPI_UNDEFINED;

    if (info != MPI_INFO_NULL)
        mpi_fatal(MPI_ERR_ARG, "%s: info must be MPI_INFO_NULL (this subset has no info objects)", call);
    if (split_type != MPI_COMM_TYPE_SHARED && split_type != MPI_UNDEFINED)
        mpi_fatal(MPI_ERR_ARG, "%s: split type %d (MPI_COMM_TYPE_SHARED or MPI_UNDEFINED)", call,
              split_type);
    if (split_type == MPI_COMM_TYPE_SHARED) {
        uint32_t h = 2166136261u; /* FNV-1a: a color >= 0 */

        MPI_Get_processor_name(host, &len);
        for (int i = 0; i < len; i++)
            h = (h ^ (unsigned char)host[i]) * 16777619u;
        color = (int)(h & 0x7fffffff);
    }
    return split(call, comm, color, key, newcomm);
}

/* ---- error handlers and ULFM ---------------------------------------------------------------
 *
 * MPI_ERRORS_RETURN on a communicator makes a process failure (a rank
 * lost under a call, or before it: check_coll) MPIX_ERR_PROC_FAILED, for
 * that call and every later one on the communicator, on every rank that
 * sees it; other errors still end the job, as under MPI_ERRORS_ARE_FATAL.
 * The survivors go on with MPIX_Comm_shrink (eccl has re-formed its ring
 * without the lost rank: the new communicator is that ring) and agree with
 * MPIX_Comm_agree. */

int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler errhandler)
{
    struct mpi_comm *c = comm_state(comm);

    mpi_require_initialized("MPI_Comm_set_errhandler");
    if (c == NULL)
        mpi_fatal(MPI_ERR_COMM, "MPI_Comm_set_errhandler: invalid communicator 0x%x", (unsigned)comm);
    if (errhandler != MPI_ERRORS_ARE_FATAL && errhandler != MPI_ERRORS_RETURN)
        mpi_fatal(MPI_ERR_ARG, "MPI_Comm_set_errhandler: MPI_ERRORS_ARE_FATAL or MPI_ERRORS_RETURN "
              "(this subset has no user handlers)");
    c->errors_return = errhandler == MPI_ERRORS_RETURN;
    return MPI_SUCCESS;
}

int MPI_Comm_get_errhandler(MPI_Comm comm, MPI_Errhandler *errhandler)
{
    struct mpi_comm *c = comm_state(comm);

    mpi_require_initialized("MPI_Comm_get_errhandler");
    if (c == NULL || errhandler == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Comm_get_errhandler: invalid communicator or NULL errhandler");
    *errhandler = c->errors_return ? MPI_ERRORS_RETURN : MPI_ERRORS_ARE_FATAL;
    return MPI_SUCCESS;
}

/* The predefined handlers are never freed: the handle just goes. */
int MPI_Errhandler_free(MPI_Errhandler *errhandler)
{
    if (errhandler == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Errhandler_free: errhandler is NULL");
    *errhandler = MPI_ERRHANDLER_NULL;
    return MPI_SUCCESS;
}

/* The ring the next eccl call runs on (waiting for one being re-formed). */
static void current_ring(const char *call, int64_t *epoch, int64_t *rank, int64_t *size)
{
    check_eccl(call, "reading the ring epoch", eccl_comm_get_attr(world.comm, ECCL_ATTR_EPOCH, epoch));
    check_eccl(call, "reading the rank", eccl_comm_get_attr(world.comm, ECCL_ATTR_RANK, rank));
    check_eccl(call, "reading the world size",
               eccl_comm_get_attr(world.comm, ECCL_ATTR_WORLD_SIZE, size));
}

/* An all-reduce of every survivor's `in` into `out` (n elements, op) on the
 * ring of the moment, under a tag of `space` that names the call (`which`,
 * the same on every survivor) and the ring, and pinned to that ring
 * (eccl_allreduce_opts.ring_epoch): tried again on the next ring while
 * ranks are lost under it. With `vote_epoch`, `in` is two int64s set
 * to the ring's epoch and its negation (MPIX_Comm_shrink's vote). Returns
 * the ring's epoch, and its rank and size. A world of one (or a ring of
 * one) just copies. */
static int64_t survivors_allreduce(const char *call, uint64_t space, uint32_t which, void *in,
                                   void *out, size_t n, eccl_dtype dtype, size_t esize,
                                   eccl_op op, int vote_epoch, int64_t *rank, int64_t *size)
{
    int64_t epoch = 0;

    *rank = 0;
    *size = 1;
    if (world.comm == NULL) {
        memcpy(out, in, n * esize);
        return 0;
    }
    for (int attempt = 0;; attempt++) {
        eccl_reduce_info info;
        eccl_result rc;

        current_ring(call, &epoch, rank, size);
        if (vote_epoch) { /* MPIX_Comm_shrink's: n = 3 + world.size */
            int64_t *vote = in;
            memset(vote, 0, n * esize);
            vote[0] = epoch;
            vote[1] = -epoch;
            vote[2] = comms.next_id;
            vote[3 + *rank] = world.rank + 1;
        }
        if (*size == 1) {
            memcpy(out, in, n * esize);
            return epoch;
        }
        /* Pinned to the ring read: a survivor that read it just before a
         * loss re-formed it must not run this tag on the new ring, where
         * those that read the new one call it by the new epoch's tag (each
         * would wait for the other until op_timeout). */
        eccl_allreduce_opts opts;
        eccl_allreduce_opts_init(&opts);
        opts.ring_epoch = (uint64_t)epoch;
        rc = eccl_allreduce_ex(world.comm, in, out, n, dtype, op,
                               space << 40 | (uint64_t)which << 8 | (uint64_t)(epoch & 0xff), &opts, &info);
        if (rc == ECCL_OK && info.world_size == (uint32_t)*size)
            return epoch;
        if (rc != ECCL_OK && rc != ECCL_ERR_PEER_LOST && rc != ECCL_ERR_CONNECT)
            check_eccl(call, "eccl_allreduce", rc);
        if (attempt == 1000)
            mpi_fatal(MPI_ERR_OTHER, "%s: the ring kept changing under 1000 tries", call);
    }
}

static int id_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* Whether process `proc` is among those known to have failed. */
static int proc_failed(int proc)
{
    for (int k = 0; k < world.n_failed; k++)
        if (world.failed[k] == proc)
            return 1;
    return 0;
}

/* What this rank knows of failures, brought up to date without a vote:
 * the processes whose eccl peers are no longer on the ring (eccl's view
 * of who is alive, asked of the master's address book) join world.failed,
 * in world rank order. A loss the master has not yet taken out of the
 * ring is not known here yet. A call the loss failed was failed by eccl's
 * view change, which ends in the new ring (reading the world size waits
 * for it), or failed at its start because the ring had changed: a program
 * that got MPIX_ERR_PROC_FAILED knows of the loss that caused it. */
static void learn_failures(const char *call)
{
    uint64_t *ring = NULL;
    int64_t size = 0;

    if (world.comm == NULL)
        return;
    for (int attempt = 0;; attempt++) {
        check_eccl(call, "reading the world size", eccl_comm_get_attr(world.comm, ECCL_ATTR_WORLD_SIZE, &size));
        if (size == world.size - world.n_failed) {
            free(ring);
            return; /* nobody left since the last look: no need to ask */
        }
        free(ring);
        ring = scratch_alloc(call, mul_size(call, (size_t)size, sizeof *ring));
        eccl_result rc = eccl_comm_peer_ids(world.comm, 0, (uint32_t)size, ring);
        if (rc == ECCL_OK)
            break;
        if (rc != ECCL_ERR_PEER_LOST)
            check_eccl(call, "eccl_comm_peer_ids", rc);
        if (attempt == 1000)
            mpi_fatal(MPI_ERR_OTHER, "%s: the ring kept changing under 1000 tries", call);
    }
    /* A process off the ring joins the list, once. */
    qsort(ring, (size_t)size, sizeof *ring, id_cmp);
    for (int p = 0; p < world.size; p++) {
        if (!proc_failed(p) && bsearch(&world.peer_ids[p], ring, (size_t)size, sizeof *ring, id_cmp) == NULL)
            world.failed[world.n_failed++] = p;
    }
    free(ring);
}

/* The processes of comm known to have failed, in the order this rank
 * learnt of them (new scratch; *n of them). */
static int *failed_of(const char *call, MPI_Comm comm, int *n)
{
    int size, *procs = procs_of(call, comm, &size);
    unsigned char *in_c = scratch_alloc(call, (size_t)world.size);

    drop_result(); /* a local call: a failed communicator still names its failures */
    learn_failures(call);
    memset(in_c, 0, (size_t)world.size);
    for (int i = 0; i < size; i++)
        in_c[procs[i]] = 1;
    *n = 0; /* the failures of comm are some of its processes: they fit in procs */
    for (int k = 0; k < world.n_failed; k++)
        if (in_c[world.failed[k]])
            procs[(*n)++] = world.failed[k];
    free(in_c);
    return procs;
}

static struct mpi_comm *ulfm_comm(const char *call, MPI_Comm comm)
{
    struct mpi_comm *c = comm_state(comm);

    mpi_require_initialized(call);
    if (c == NULL)
        mpi_fatal(MPI_ERR_COMM, "%s: invalid communicator 0x%x", call, (unsigned)comm);
    return c;
}

/* Acknowledges every failure of comm known here: MPIX_Comm_agree stops
 * reporting them, MPIX_Comm_failure_get_acked names them. */
int MPIX_Comm_failure_ack(MPI_Comm comm)
{
    static const char call[] = "MPIX_Comm_failure_ack";
    struct mpi_comm *c = ulfm_comm(call, comm);
    int n;

    free(failed_of(call, comm, &n));
    c->n_acked = n;
    c->acked = c->failed;
    return MPI_SUCCESS;
}

/* The group of comm's failures known here: all, or (acked) those acknowledged. */
static int failed_group(const char *call, MPI_Comm comm, int acked, MPI_Group *failedgrp)
{
    struct mpi_comm *c = ulfm_comm(call, comm);
    int n, *failed;

    if (failedgrp == NULL)
        mpi_fatal(MPI_ERR_ARG, "%s: failedgrp is NULL", call);
    failed = failed_of(call, comm, &n);
    *failedgrp = mpi_group_new(call, failed, acked ? c->n_acked : n); /* known failures only grow */
    free(failed);
    return MPI_SUCCESS;
}

int MPIX_Comm_failure_get_acked(MPI_Comm comm, MPI_Group *failedgrp)
{
    return failed_group("MPIX_Comm_failure_get_acked", comm, 1, failedgrp);
}

/* MPI 4.1's form (Open MPI 5): the failures known here, in the order they
 * became known; a later call's group starts with an earlier one's. */
int MPIX_Comm_get_failed(MPI_Comm comm, MPI_Group *failedgrp)
{
    return failed_group("MPIX_Comm_get_failed", comm, 0, failedgrp);
}

/* Acknowledges the first num_to_ack of MPIX_Comm_get_failed's group (all
 * of it if it has fewer); *num_acked: how many are acknowledged now. */
int MPIX_Comm_ack_failed(MPI_Comm comm, int num_to_ack, int *num_acked)
{
    static const char call[] = "MPIX_Comm_ack_failed";
    struct mpi_comm *c = ulfm_comm(call, comm);
    int n;

    if (num_to_ack < 0 || num_acked == NULL)
        mpi_fatal(MPI_ERR_ARG, "%s: num_to_ack is negative or num_acked is NULL", call);
    free(failed_of(call, comm, &n));
    if (num_to_ack > c->n_acked)
        c->n_acked = num_to_ack < n ? num_to_ack : n;
    if (c->n_acked == n)
        c->acked = c->failed;
    *num_acked = c->n_acked;
    return MPI_SUCCESS;
}

/* The survivors' votes run on eccl's whole ring: every survivor of it
 * takes part, which a communicator of some of its ranks cannot ask. */
static void not_a_subset(const char *call, const struct mpi_comm *c)
{
    if (c->ranks != NULL)
        mpi_fatal(MPI_ERR_UNSUPPORTED_OPERATION, "%s on a communicator of some ranks is not "
                  "supported by eccl yet (only on communicators of every rank)", call);
}

/* MPIX_Comm_agree on a communicator of some ranks, which has no ring of
 * its own to vote on: every rank posts its flag as an eccl notice, which
 * the master hands to every process in one order, the same for all, with
 * the ring's changes in it. A rank decides once it has, from each process
 * of c, its word or the news that it left the ring: the AND of the words
 * it has. Every survivor decides alike: the ring is read before the
 * notices are taken, and a word posted before its poster's loss came
 * before that loss, so a rank that knows of the loss already has the word
 * if there was one. The agreement's number tells it from the next. */
static unsigned sub_agree(const char *call, struct mpi_comm *c, unsigned flag, int *lost)
{
    uint64_t key = agree_key(c->id, c->agreements++);
    unsigned round = 0;

    check_eccl(call, "eccl_comm_notify", eccl_comm_notify(world.comm, key | flag, 0));
    for (;;) {
        unsigned out = ~0u;
        int decided = 1;

        learn_failures(call); /* first the ring, then the words */
        take_notices();
        *lost = 0;
        for (int i = 0; i < c->size && decided; i++) {
            uint64_t from = world.peer_ids[proc_of(c, i)];
            int heard = 0;
            for (int k = 0; k < comms.n_notes && !heard; k++)
                if ((comms.notes[k].word & AGREE_KEY_MASK) == key && comms.notes[k].from == from) {
                    heard = 1;
                    out &= (unsigned)comms.notes[k].word;
                }
            if (!heard && proc_failed(proc_of(c, i)))
                *lost = 1;
            else
                decided = heard;
        }
        if (decided) {
            int kept = 0;
            for (int k = 0; k < comms.n_notes; k++)
                if ((comms.notes[k].word & AGREE_KEY_MASK) != key || !member_of(c, comms.notes[k].from))
                    comms.notes[kept++] = comms.notes[k];
            comms.n_notes = kept;
            return out;
        }
        if (progress_all() != 0)
            round = 0;
        else
            poll_pause(&round);
    }
}

/* The bitwise AND of every surviving rank's *flag, the same on each of
 * them; MPIX_ERR_PROC_FAILED (with the value agreed all the same) where a
 * rank of comm was lost and this rank has not acknowledged it. */
int MPIX_Comm_agree(MPI_Comm comm, int *flag)
{
    static const char call[] = "MPIX_Comm_agree";
    struct comm_view v = view_of(call, comm);
    struct mpi_comm *c = comm_state(comm);
    uint8_t bits[32], all[32];
    int64_t rank, size, epoch;

    drop_result(); /* agreeing is what a failed communicator may still do */
    if (flag == NULL)
        mpi_fatal(MPI_ERR_ARG, "%s: flag is NULL", call);
    for (int i = 0; i < 32; i++)
        bits[i] = (uint8_t)((unsigned)*flag >> i & 1u);
    if (v.ecomm == NULL && v.size == 1) {
        memcpy(all, bits, sizeof all);
    } else if (c->ranks != NULL) {
        int lost;
        unsigned got = sub_agree(call, c, (unsigned)*flag, &lost);
        for (int i = 0; i < 32; i++)
            all[i] = (uint8_t)(got >> i & 1u);
        c->failed |= lost;
    } else {
        uint32_t which = (c->id << 16 | (c->agreements++ & 0xffffu)) & 0xffffffffu;
        epoch = survivors_allreduce(call, AGREE_SPACE, which, bits, all, 32, ECCL_U8, 1, ECCL_MIN,
                                    0, &rank, &size);
        if (epoch != ring_of(c, &(int64_t){0}) && !ring_reformed(c, epoch, size))
            c->failed = 1;
    }
    unsigned out = 0;
    for (int i = 0; i < 32; i++)
        out |= (unsigned)(all[i] != 0) << i;
    *flag = (int)out;
    return c->failed && !c->acked ? MPIX_ERR_PROC_FAILED : MPI_SUCCESS;
}

/* A communicator of comm's surviving ranks: eccl's ring once it has dropped
 * the lost ones, as every survivor sees it (a vote on the ring's epoch,
 * tried again while ranks are still being lost), ranks in ring order. */
int MPIX_Comm_shrink(MPI_Comm comm, MPI_Comm *newcomm)
{
    static const char call[] = "MPIX_Comm_shrink";
    struct comm_view v = view_of(call, comm);
    struct mpi_comm *c = comm_state(comm);
    int64_t rank, size, epoch = 0;

    drop_result(); /* shrinking is what a failed communicator is for */
    if (newcomm == NULL)
        mpi_fatal(MPI_ERR_ARG, "%s: newcomm is NULL", call);
    not_a_subset(call, c);
    if (v.ecomm == NULL && v.size == 1) {
        *newcomm = comm_new(call, &v, 0, NULL, 0);
        return MPI_SUCCESS;
    }
    /* The vote (survivors_allreduce): the ring's epoch, the largest
     * communicator id used, and each survivor's process at its new rank. */
    size_t n_vote = 3 + (size_t)world.size;
    int64_t *vote = scratch_alloc(call, mul_size(call, 2 * n_vote, sizeof *vote)), *got = vote + n_vote;
    for (;;) {
        uint32_t which = (c->id << 16 | (c->shrinks & 0xffffu)) & 0xffffffffu;

        epoch = survivors_allreduce(call, SHRINK_SPACE, which, vote, got, n_vote, ECCL_I64,
                                    sizeof vote[0], ECCL_MAX, 1, &rank, &size);
        if (got[0] == epoch && -got[1] == epoch)
            break; /* every survivor is on this ring */
    }
    c->shrinks++;
    int *procs = scratch_alloc(call, mul_size(call, (size_t)size, sizeof *procs));
    for (int64_t k = 0; k < size; k++)
        procs[k] = (int)got[3 + k] - 1;
    struct comm_view shrunk = {(int)rank, (int)size, size > 1 ? world.comm : NULL, NULL, 0, NULL};
    *newcomm = comm_new(call, &shrunk, (uint32_t)got[2] + 1, NULL, 0);
    free(vote);
    struct mpi_comm *n = comm_state(*newcomm);
    free(n->procs);
    n->procs = procs;
    n->of_self = 0;
    n->shrunk = 1;
    n->rank = (int)rank;
    n->size = (int)size;
    n->epoch = epoch;
    n->ring_size = size;
    n->failed = 0;
    return MPI_SUCCESS;
}

/* Revoking: every rank's calls on comm, in flight or to come, fail
 * MPIX_ERR_REVOKED. The word goes to every process through eccl's master,
 * which then re-forms the ring with the same processes: that settles
 * every call in flight (docs/protocol.md, "Notices"). The calls of the
 * other communicators that it cut short run again on the new ring
 * (check_coll). */
int MPIX_Comm_revoke(MPI_Comm comm)
{
    static const char call[] = "MPIX_Comm_revoke";
    struct comm_view v = view_of(call, comm);
    struct mpi_comm *c = comm_state(comm);

    drop_result(); /* a failed or revoked communicator may be revoked */
    if (c->revoked)
        return MPI_SUCCESS;
    c->revoked = 1;
    if (v.ecomm != NULL)
        check_eccl(call, "eccl_comm_notify",
                   eccl_comm_notify(world.comm, REVOKE_NOTICE | c->id, ECCL_NOTIFY_REFORM));
    return MPI_SUCCESS;
}

int MPIX_Comm_is_revoked(MPI_Comm comm, int *flag)
{
    static const char call[] = "MPIX_Comm_is_revoked";

    (void)view_of(call, comm);
    drop_result();
    if (flag == NULL)
        mpi_fatal(MPI_ERR_ARG, "%s: flag is NULL", call);
    *flag = is_revoked(comm_state(comm));
    return MPI_SUCCESS;
}
