/* MPI datatypes: the predefined table and the derived-type constructors
 * (types.h says how a type is laid out). Semantics from MPI 4.1,
 * chapter 5: a constructor's type map is its children's maps at their
 * displacements; lb and ub are the least and greatest of them (a child's
 * lb and ub as set by MPI_Type_create_resized count as its bounds), and
 * without such explicit bounds ub is rounded up to the largest alignment
 * of the leaves (5.1.6's epsilon), as C pads a struct. */
/* Only MPI's names leave the library (CMakeLists.txt: hidden visibility). */
#pragma GCC visibility push(default)
#include "mpi.h"
#pragma GCC visibility pop

#include "types.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

/* eccl's element type of a C type of this size and signedness. */
#define SIGNED_DTYPE(t)                                                                  \
    (sizeof(t) == 1 ? ECCL_I8 : sizeof(t) == 2 ? ECCL_I16 : sizeof(t) == 4 ? ECCL_I32 \
                                                                           : ECCL_I64)
#define UNSIGNED_DTYPE(t)                                                                \
    (sizeof(t) == 1 ? ECCL_U8 : sizeof(t) == 2 ? ECCL_U16 : sizeof(t) == 4 ? ECCL_U32 \
                                                                           : ECCL_U64)

_Static_assert(sizeof(float) == 4 && sizeof(double) == 8, "MPI_FLOAT/MPI_DOUBLE map to f32/f64");
_Static_assert(sizeof(long long) == 8, "MPI_LONG_LONG maps to a 64-bit eccl type");

/* The pair types' C layouts (MPI 4.1, 6.9.4), as ops.c has them. */
struct float_int { float v; int i; };
struct double_int { double v; int i; };
struct long_int { long v; int i; };
struct two_int { int v; int i; };
struct short_int { short v; int i; };
struct ldouble_int { long double v; int i; };

/* Indexed by handle - MPI_CHAR. Each is one block of its extent
 * (blocks_of). MPI_CHAR is not one of MPI's reducible
 * types, but programs reduce it anyway and other MPIs let them: it reduces
 * as the platform's char. MPI_BYTE is raw memory: the bitwise operations
 * only. The types eccl has no arithmetic on reduce here (ops.h). */
#define TYPE(handle, name_, T, size, ct, on, dt)                                               \
    {.name = (name_), .extent = sizeof(T), .data_size = (size), .ctype = (ct), .on_eccl = (on), \
     .dtype = (dt), .true_ub = sizeof(T), .packed = sizeof(T), .base = (handle), .nbase = 1,  \
     .align = _Alignof(T), .committed = 1, .nblocks = 1}
#define PLAIN(handle, T, ct, on, dt) TYPE(handle, #handle, T, sizeof(T), ct, on, dt)
#define PAIR(handle, S, T, ct) TYPE(handle, #handle, struct S, sizeof(T) + sizeof(int), ct, 0, ECCL_U8)

static const struct mpi_type predefined[] = {
    PLAIN(MPI_CHAR, char, (char)-1 < 0 ? CT_SCHAR : CT_UCHAR, 1, (char)-1 < 0 ? ECCL_I8 : ECCL_U8),
    PLAIN(MPI_SIGNED_CHAR, signed char, CT_SCHAR, 1, ECCL_I8),
    PLAIN(MPI_UNSIGNED_CHAR, unsigned char, CT_UCHAR, 1, ECCL_U8),
    PLAIN(MPI_BYTE, unsigned char, CT_BYTE, 0, ECCL_U8),
    PLAIN(MPI_SHORT, short, CT_SHORT, 1, SIGNED_DTYPE(short)),
    PLAIN(MPI_UNSIGNED_SHORT, unsigned short, CT_USHORT, 1, UNSIGNED_DTYPE(unsigned short)),
    PLAIN(MPI_INT, int, CT_INT, 1, SIGNED_DTYPE(int)),
    PLAIN(MPI_UNSIGNED, unsigned, CT_UINT, 1, UNSIGNED_DTYPE(unsigned)),
    PLAIN(MPI_LONG, long, CT_LONG, 1, SIGNED_DTYPE(long)),
    PLAIN(MPI_UNSIGNED_LONG, unsigned long, CT_ULONG, 1, UNSIGNED_DTYPE(unsigned long)),
    PLAIN(MPI_LONG_LONG, long long, CT_LLONG, 1, SIGNED_DTYPE(long long)),
    PLAIN(MPI_UNSIGNED_LONG_LONG, unsigned long long, CT_ULLONG, 1,
          UNSIGNED_DTYPE(unsigned long long)),
    PLAIN(MPI_FLOAT, float, CT_FLOAT, 1, ECCL_F32),
    PLAIN(MPI_DOUBLE, double, CT_DOUBLE, 1, ECCL_F64),
    PLAIN(MPI_INT8_T, int8_t, CT_I8, 1, ECCL_I8),
    PLAIN(MPI_INT16_T, int16_t, CT_I16, 1, ECCL_I16),
    PLAIN(MPI_INT32_T, int32_t, CT_I32, 1, ECCL_I32),
    PLAIN(MPI_INT64_T, int64_t, CT_I64, 1, ECCL_I64),
    PLAIN(MPI_UINT8_T, uint8_t, CT_U8, 1, ECCL_U8),
    PLAIN(MPI_UINT16_T, uint16_t, CT_U16, 1, ECCL_U16),
    PLAIN(MPI_UINT32_T, uint32_t, CT_U32, 1, ECCL_U32),
    PLAIN(MPI_UINT64_T, uint64_t, CT_U64, 1, ECCL_U64),
    PLAIN(MPI_LONG_DOUBLE, long double, CT_LDOUBLE, 0, ECCL_U8),
    PLAIN(MPI_C_BOOL, _Bool, CT_BOOL, 0, ECCL_U8),
    PLAIN(MPI_C_FLOAT_COMPLEX, float _Complex, CT_CFLOAT, 0, ECCL_U8),
    PLAIN(MPI_C_DOUBLE_COMPLEX, double _Complex, CT_CDOUBLE, 0, ECCL_U8),
    PLAIN(MPI_C_LONG_DOUBLE_COMPLEX, long double _Complex, CT_CLDOUBLE, 0, ECCL_U8),
    PAIR(MPI_FLOAT_INT, float_int, float, CT_FLOAT_INT),
    PAIR(MPI_DOUBLE_INT, double_int, double, CT_DOUBLE_INT),
    PAIR(MPI_LONG_INT, long_int, long, CT_LONG_INT),
    PAIR(MPI_2INT, two_int, int, CT_2INT),
    PAIR(MPI_SHORT_INT, short_int, short, CT_SHORT_INT),
    PAIR(MPI_LONG_DOUBLE_INT, ldouble_int, long double, CT_LDOUBLE_INT),
};
#define N_PREDEFINED (sizeof predefined / sizeof predefined[0])

/* Derived types: handles from DERIVED_BASE on, an index into `derived`;
 * a slot is taken again once its handle is freed and no call holds it. */
#define DERIVED_BASE 0x4c100000
#define DERIVED_MAX 65536
struct derived {
    struct mpi_type t;
    struct mpi_block *blocks;
    int live; /* the program holds the handle */
    int held; /* calls in flight that use it */
};
static struct {
    struct derived *slots;
    int n, cap;
} types;

const struct mpi_type *mpi_type_get(MPI_Datatype handle)
{
    unsigned index = (unsigned)handle - (unsigned)MPI_CHAR;
    unsigned slot = (unsigned)handle - DERIVED_BASE;

    if (index < N_PREDEFINED)
        return &predefined[index];
    if (slot < (unsigned)types.n && types.slots[slot].live)
        return &types.slots[slot].t;
    return NULL;
}

static struct derived *derived_of(const struct mpi_type *t)
{
    return (struct derived *)((char *)t - offsetof(struct derived, t));
}

static void release_if_unused(struct derived *d)
{
    if (d->live || d->held)
        return;
    free(d->blocks);
    d->blocks = NULL;
    d->t.blocks = NULL;
}

void mpi_type_hold(const struct mpi_type *t)
{
    if (t->derived)
        derived_of(t)->held++;
}

void mpi_type_drop(const struct mpi_type *t)
{
    if (!t->derived)
        return;
    struct derived *d = derived_of(t);
    d->held--;
    release_if_unused(d);
}

/* A type's blocks; a predefined type's one block in *one. */
static const struct mpi_block *blocks_of(const struct mpi_type *t, struct mpi_block *one)
{
    *one = (struct mpi_block){0, t->extent};
    return t->derived ? t->blocks : one;
}

int mpi_type_dense(const struct mpi_type *t)
{
    if (!t->derived)
        return 1;
    return t->extent == 0 ? t->nblocks == 0
                          : t->nblocks == 1 && t->blocks[0].off == 0 && t->blocks[0].len == t->extent;
}

void mpi_type_pack(const struct mpi_type *t, const void *user, size_t first, size_t count,
                   void *packed)
{
    char *out = packed;
    const char *in = user;

    if (mpi_type_dense(t)) {
        memcpy(out, in + first * t->extent, count * t->packed);
        return;
    }
    for (size_t e = first; e < first + count; e++)
        for (size_t b = 0; b < t->nblocks; b++) {
            memcpy(out, in + (MPI_Aint)(e * t->extent) + t->blocks[b].off, t->blocks[b].len);
            out += t->blocks[b].len;
        }
}

void mpi_type_unpack(const struct mpi_type *t, const void *packed, size_t first, size_t count,
                     void *user, size_t bytes)
{
    const char *in = packed;
    char *out = user;

    if (mpi_type_dense(t)) {
        size_t all = count * t->packed;
        memcpy(out + first * t->extent, in, bytes < all ? bytes : all);
        return;
    }
    for (size_t e = first; e < first + count; e++)
        for (size_t b = 0; b < t->nblocks; b++) {
            size_t len = t->blocks[b].len < bytes ? t->blocks[b].len : bytes;
            memcpy(out + (MPI_Aint)(e * t->extent) + t->blocks[b].off, in, len);
            in += len;
            bytes -= len;
            if (bytes == 0)
                return;
        }
}

void mpi_type_copy_blocks(const struct mpi_type *t, const void *from, size_t count, void *to)
{
    struct mpi_block one;
    const struct mpi_block *blocks = blocks_of(t, &one);

    for (size_t e = 0; e < count; e++)
        for (size_t b = 0; b < t->nblocks; b++) {
            MPI_Aint at = (MPI_Aint)(e * t->extent) + blocks[b].off;
            memcpy((char *)to + at, (const char *)from + at, blocks[b].len);
        }
}

/* ---- constructors --------------------------------------------------------------- */

/* A piece of a new type: `len` copies of `t` one extent apart, the first
 * at byte `disp`. */
struct piece {
    MPI_Aint disp;
    size_t len;
    const struct mpi_type *t;
};

static const struct mpi_type *child_of(const char *call, MPI_Datatype handle)
{
    const struct mpi_type *t = mpi_type_get(handle);

    if (t == NULL)
        mpi_fatal(MPI_ERR_TYPE, "%s: invalid datatype handle 0x%x", call, (unsigned)handle);
    return t;
}

static size_t count_arg(const char *call, const char *what, int n)
{
    if (n < 0)
        mpi_fatal(MPI_ERR_COUNT, "%s: negative %s %d", call, what, n);
    return (size_t)n;
}

/* a * b + c as a byte offset, or a fatal error where it overflows. */
static MPI_Aint offset(const char *call, MPI_Aint a, MPI_Aint b, MPI_Aint c)
{
    MPI_Aint r;

    if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r))
        mpi_fatal(MPI_ERR_ARG, "%s: a displacement overflows", call);
    return r;
}

static int derived_free(const void *entry)
{
    const struct derived *d = entry;
    return !d->live && !d->held;
}

static struct derived *new_slot(const char *call, MPI_Datatype *newtype)
{
    if (newtype == NULL)
        mpi_fatal(MPI_ERR_ARG, "%s: newtype is NULL", call);
    void *table = types.slots;
    int slot = mpi_table_slot(call, "datatypes", &table, &types.n, &types.cap, sizeof *types.slots,
                              DERIVED_MAX, derived_free);
    types.slots = table;
    if (slot < 0)
        mpi_fatal(MPI_ERR_TYPE, "%s: more than %d derived datatypes at once", call, DERIVED_MAX);
    memset(&types.slots[slot], 0, sizeof types.slots[slot]);
    *newtype = (MPI_Datatype)(DERIVED_BASE + (unsigned)slot);
    return &types.slots[slot];
}

/* The type whose map is the pieces', into a new handle. */
static void build(const char *call, const struct piece *p, size_t n, MPI_Datatype *newtype)
{
    struct mpi_type t = {.name = "a derived datatype", .ctype = CT_COUNT, .dtype = ECCL_U8,
                         .derived = 1, .align = 1, .base = MPI_DATATYPE_NULL};
    MPI_Aint lb = 0, ub = 0, tlb = 0, tub = 0;
    size_t nblocks = 0, cap = 0;
    struct mpi_block *blocks = NULL;
    int any = 0, same_base = 1;

    for (size_t i = 0; i < n; i++) {
        const struct mpi_type *c = p[i].t;
        if (p[i].len == 0)
            continue;
        MPI_Aint last = offset(call, (MPI_Aint)c->extent, (MPI_Aint)p[i].len - 1, p[i].disp);
        MPI_Aint plb = offset(call, 1, p[i].disp, c->lb);
        MPI_Aint pub = offset(call, 1, last, c->lb + (MPI_Aint)c->extent);
        MPI_Aint ptlb = offset(call, 1, p[i].disp, c->true_lb);
        MPI_Aint ptub = offset(call, 1, last, c->true_ub);
        if (!any || plb < lb) lb = plb;
        if (!any || pub > ub) ub = pub;
        if (!any || ptlb < tlb) tlb = ptlb;
        if (!any || ptub > tub) tub = ptub;
        if (any && t.base != c->base)
            same_base = 0;
        any = 1;
        t.base = c->base;
        t.sticky |= c->sticky;
        if (c->align > t.align)
            t.align = c->align;
        size_t data, packed, nbase;
        if (__builtin_mul_overflow(c->data_size, p[i].len, &data) ||
            __builtin_mul_overflow(c->packed, p[i].len, &packed) ||
            __builtin_mul_overflow(c->nbase, p[i].len, &nbase) ||
            __builtin_add_overflow(t.data_size, data, &t.data_size) ||
            __builtin_add_overflow(t.packed, packed, &t.packed) ||
            __builtin_add_overflow(t.nbase, nbase, &t.nbase) || t.data_size > INT_MAX)
            mpi_fatal(MPI_ERR_ARG, "%s: the type's size overflows", call);
        struct mpi_block one;
        const struct mpi_block *cb = blocks_of(c, &one);
        for (size_t k = 0; k < p[i].len; k++)
            for (size_t b = 0; b < c->nblocks; b++) {
                MPI_Aint at = offset(call, (MPI_Aint)c->extent, (MPI_Aint)k, p[i].disp + cb[b].off);
                if (nblocks > 0 && blocks[nblocks - 1].off + (MPI_Aint)blocks[nblocks - 1].len == at) {
                    blocks[nblocks - 1].len += cb[b].len;
                    continue;
                }
                if (nblocks == cap) {
                    cap = cap ? 2 * cap : 8;
                    struct mpi_block *g = realloc(blocks, cap * sizeof *g);
                    if (g == NULL)
                        mpi_fatal(MPI_ERR_NO_MEM, "%s: no memory for a type map of %zu blocks", call, cap);
                    blocks = g;
                }
                blocks[nblocks++] = (struct mpi_block){at, cb[b].len};
            }
    }
    if (!same_base || !any) {
        t.base = MPI_DATATYPE_NULL;
        t.nbase = 0;
    }
    /* 5.1.6: without explicit bounds, ub rounds up to the alignment. */
    MPI_Aint extent = ub - lb;
    if (!t.sticky && extent % (MPI_Aint)t.align != 0)
        extent += (MPI_Aint)t.align - extent % (MPI_Aint)t.align;
    t.lb = lb;
    t.extent = (size_t)extent;
    t.true_lb = tlb;
    t.true_ub = tub;
    t.nblocks = nblocks;
    t.blocks = blocks;
    struct derived *d = new_slot(call, newtype);
    d->t = t;
    d->blocks = blocks;
    d->live = 1;
}

/* Constructors take handles valid now, not only committed ones (5.1.9). */
static void check_init(const char *call)
{
    mpi_require_initialized(call);
}

int MPI_Type_contiguous(int count, MPI_Datatype oldtype, MPI_Datatype *newtype)
{
    static const char call[] = "MPI_Type_contiguous";
    check_init(call);
    struct piece p = {0, count_arg(call, "count", count), child_of(call, oldtype)};
    build(call, &p, 1, newtype);
    return MPI_SUCCESS;
}

/* count blocks of blocklength elements, block i at byte i * stride. */
static void hvector(const char *call, int count, int blocklength, MPI_Aint stride,
                    MPI_Datatype oldtype, MPI_Datatype *newtype)
{
    check_init(call);
    size_t n = count_arg(call, "count", count), len = count_arg(call, "blocklength", blocklength);
    const struct mpi_type *c = child_of(call, oldtype);
    struct piece *p = calloc(n ? n : 1, sizeof *p);

    if (p == NULL)
        mpi_fatal(MPI_ERR_NO_MEM, "%s: no memory", call);
    for (size_t i = 0; i < n; i++)
        p[i] = (struct piece){offset(call, (MPI_Aint)i, stride, 0), len, c};
    build(call, p, n, newtype);
    free(p);
}

int MPI_Type_vector(int count, int blocklength, int stride, MPI_Datatype oldtype,
                    MPI_Datatype *newtype)
{
    static const char call[] = "MPI_Type_vector";
    const struct mpi_type *c = child_of(call, oldtype);
    hvector(call, count, blocklength, offset(call, stride, (MPI_Aint)c->extent, 0), oldtype, newtype);
    return MPI_SUCCESS;
}

int MPI_Type_create_hvector(int count, int blocklength, MPI_Aint stride, MPI_Datatype oldtype,
                            MPI_Datatype *newtype)
{
    hvector("MPI_Type_create_hvector", count, blocklength, stride, oldtype, newtype);
    return MPI_SUCCESS;
}

/* Block i: lens[i] (or `len` for all, lens NULL) elements of types[i] (or
 * `one`) at displacement displs[i] (ints times `unit`) or hdispls[i]. */
static void indexed(const char *call, int count, const int lens[], int len, const int displs[],
                    const MPI_Aint hdispls[], MPI_Aint unit, const MPI_Datatype types_[],
                    MPI_Datatype one, MPI_Datatype *newtype)
{
    check_init(call);
    size_t n = count_arg(call, "count", count);
    struct piece *p = calloc(n ? n : 1, sizeof *p);

    if (p == NULL)
        mpi_fatal(MPI_ERR_NO_MEM, "%s: no memory", call);
    if (n != 0 && ((lens == NULL && len < 0) || (displs == NULL && hdispls == NULL) ||
                   (types_ == NULL && one == MPI_DATATYPE_NULL)))
        mpi_fatal(MPI_ERR_ARG, "%s: a NULL array", call);
    for (size_t i = 0; i < n; i++) {
        const struct mpi_type *c = child_of(call, types_ != NULL ? types_[i] : one);
        MPI_Aint unit_i = unit != 0 ? unit : (MPI_Aint)c->extent;
        p[i].t = c;
        p[i].len = count_arg(call, "blocklength", lens != NULL ? lens[i] : len);
        p[i].disp = hdispls != NULL ? hdispls[i] : offset(call, displs[i], unit_i, 0);
    }
    build(call, p, n, newtype);
    free(p);
}

int MPI_Type_indexed(int count, const int array_of_blocklengths[],
                     const int array_of_displacements[], MPI_Datatype oldtype,
                     MPI_Datatype *newtype)
{
    indexed("MPI_Type_indexed", count, array_of_blocklengths, -1, array_of_displacements, NULL,
            0, NULL, oldtype, newtype);
    return MPI_SUCCESS;
}

int MPI_Type_create_hindexed(int count, const int array_of_blocklengths[],
                             const MPI_Aint array_of_displacements[], MPI_Datatype oldtype,
                             MPI_Datatype *newtype)
{
    indexed("MPI_Type_create_hindexed", count, array_of_blocklengths, -1, NULL,
            array_of_displacements, 0, NULL, oldtype, newtype);
    return MPI_SUCCESS;
}

int MPI_Type_create_indexed_block(int count, int blocklength, const int array_of_displacements[],
                                  MPI_Datatype oldtype, MPI_Datatype *newtype)
{
    indexed("MPI_Type_create_indexed_block", count, NULL, blocklength, array_of_displacements,
            NULL, 0, NULL, oldtype, newtype);
    return MPI_SUCCESS;
}

int MPI_Type_create_hindexed_block(int count, int blocklength,
                                   const MPI_Aint array_of_displacements[], MPI_Datatype oldtype,
                                   MPI_Datatype *newtype)
{
    indexed("MPI_Type_create_hindexed_block", count, NULL, blocklength, NULL,
            array_of_displacements, 0, NULL, oldtype, newtype);
    return MPI_SUCCESS;
}

int MPI_Type_create_struct(int count, const int array_of_blocklengths[],
                           const MPI_Aint array_of_displacements[],
                           const MPI_Datatype array_of_types[], MPI_Datatype *newtype)
{
    indexed("MPI_Type_create_struct", count, array_of_blocklengths, -1, NULL,
            array_of_displacements, 0, array_of_types, MPI_DATATYPE_NULL, newtype);
    return MPI_SUCCESS;
}

int MPI_Type_create_resized(MPI_Datatype oldtype, MPI_Aint lb, MPI_Aint extent,
                            MPI_Datatype *newtype)
{
    static const char call[] = "MPI_Type_create_resized";
    check_init(call);
    const struct mpi_type *c = child_of(call, oldtype);
    if (extent < 0)
        mpi_fatal(MPI_ERR_ARG, "%s: negative extent %td", call, extent);
    struct piece p = {0, 1, c};
    build(call, &p, 1, newtype);
    struct mpi_type *t = &types.slots[(unsigned)*newtype - DERIVED_BASE].t;
    t->lb = lb;
    t->extent = (size_t)extent;
    t->sticky = 1;
    return MPI_SUCCESS;
}

int MPI_Type_dup(MPI_Datatype oldtype, MPI_Datatype *newtype)
{
    static const char call[] = "MPI_Type_dup";
    check_init(call);
    const struct mpi_type *c = child_of(call, oldtype);
    struct piece p = {0, 1, c};
    build(call, &p, 1, newtype);
    /* The same type: its bounds as they are, committed if it was. */
    struct mpi_type *t = &types.slots[(unsigned)*newtype - DERIVED_BASE].t;
    t->lb = c->lb;
    t->extent = c->extent;
    t->sticky = c->sticky;
    t->committed = c->committed;
    return MPI_SUCCESS;
}

static struct derived *derived_arg(const char *call, MPI_Datatype *datatype)
{
    check_init(call);
    if (datatype == NULL)
        mpi_fatal(MPI_ERR_ARG, "%s: datatype is NULL", call);
    const struct mpi_type *t = mpi_type_get(*datatype);
    if (t == NULL)
        mpi_fatal(MPI_ERR_TYPE, "%s: invalid datatype handle 0x%x", call, (unsigned)*datatype);
    if (!t->derived)
        mpi_fatal(MPI_ERR_TYPE, "%s: %s is predefined", call, t->name);
    return derived_of(t);
}

int MPI_Type_commit(MPI_Datatype *datatype)
{
    derived_arg("MPI_Type_commit", datatype)->t.committed = 1;
    return MPI_SUCCESS;
}

int MPI_Type_free(MPI_Datatype *datatype)
{
    struct derived *d = derived_arg("MPI_Type_free", datatype);

    d->live = 0;
    release_if_unused(d);
    *datatype = MPI_DATATYPE_NULL;
    return MPI_SUCCESS;
}

static const struct mpi_type *query(const char *call, MPI_Datatype datatype)
{
    check_init(call);
    return child_of(call, datatype);
}

int MPI_Type_size(MPI_Datatype datatype, int *size)
{
    const struct mpi_type *t = query("MPI_Type_size", datatype);

    if (size == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Type_size: size is NULL");
    *size = (int)t->data_size;
    return MPI_SUCCESS;
}

int MPI_Type_get_extent(MPI_Datatype datatype, MPI_Aint *lb, MPI_Aint *extent)
{
    const struct mpi_type *t = query("MPI_Type_get_extent", datatype);

    if (lb == NULL || extent == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Type_get_extent: NULL argument");
    *lb = t->lb;
    *extent = (MPI_Aint)t->extent;
    return MPI_SUCCESS;
}

int MPI_Type_get_true_extent(MPI_Datatype datatype, MPI_Aint *true_lb, MPI_Aint *true_extent)
{
    const struct mpi_type *t = query("MPI_Type_get_true_extent", datatype);

    if (true_lb == NULL || true_extent == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Type_get_true_extent: NULL argument");
    *true_lb = t->true_lb;
    *true_extent = t->true_ub - t->true_lb;
    return MPI_SUCCESS;
}

int MPI_Get_address(const void *location, MPI_Aint *address)
{
    if (address == NULL)
        mpi_fatal(MPI_ERR_ARG, "MPI_Get_address: address is NULL");
    *address = (MPI_Aint)(intptr_t)location;
    return MPI_SUCCESS;
}

MPI_Aint MPI_Aint_add(MPI_Aint base, MPI_Aint disp)
{
    return (MPI_Aint)((uintptr_t)base + (uintptr_t)disp);
}

MPI_Aint MPI_Aint_diff(MPI_Aint addr1, MPI_Aint addr2)
{
    return (MPI_Aint)((uintptr_t)addr1 - (uintptr_t)addr2);
}
