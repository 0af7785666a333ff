/* Local reductions of libeccl_mpi (ops.h): one loop per (operation, C
 * type), generated below, and the table that names them.
 *
 * Integer sums and products wrap (computed in unsigned long long, which C
 * defines modulo 2^64, then narrowed): MPI leaves overflow to the
 * implementation, and C's signed overflow would be undefined. The logical
 * operations give 0 or 1, as C's operators do. MIN and MAX compare with <
 * and >, so a NaN operand's fate follows C's comparisons. */
#include "ops.h"

#include <complex.h>
#include <stdint.h>

typedef unsigned long long wide;

#define LOOP(name, T, expr)                                               \
    static void name(const void *in_, void *inout_, size_t n)             \
    {                                                                     \
        const T *in = in_;                                                \
        T *io = inout_;                                                   \
        for (size_t i = 0; i < n; i++) {                                  \
            const T a = in[i], b = io[i];                                 \
            io[i] = (expr);                                               \
        }                                                                 \
    }

/* Every operation MPI defines on a C integer type. */
#define INTEGER_OPS(S, T)                                   \
    LOOP(sum_##S, T, (T)((wide)a + (wide)b))                \
    LOOP(prod_##S, T, (T)((wide)a * (wide)b))               \
    LOOP(min_##S, T, a < b ? a : b)                         \
    LOOP(max_##S, T, a > b ? a : b)                         \
    LOOP(land_##S, T, (T)(a && b))                          \
    LOOP(lor_##S, T, (T)(a || b))                           \
    LOOP(lxor_##S, T, (T)(!a != !b))                        \
    LOOP(band_##S, T, (T)(a & b))                           \
    LOOP(bor_##S, T, (T)(a | b))                            \
    LOOP(bxor_##S, T, (T)(a ^ b))

#define FLOAT_OPS(S, T)                                     \
    LOOP(sum_##S, T, a + b)                                 \
    LOOP(prod_##S, T, a * b)                                \
    LOOP(min_##S, T, a < b ? a : b)                         \
    LOOP(max_##S, T, a > b ? a : b)

#define COMPLEX_OPS(S, T)                                   \
    LOOP(sum_##S, T, a + b)                                 \
    LOOP(prod_##S, T, a * b)

INTEGER_OPS(schar, signed char)
INTEGER_OPS(uchar, unsigned char)
INTEGER_OPS(short, short)
INTEGER_OPS(ushort, unsigned short)
INTEGER_OPS(int, int)
INTEGER_OPS(uint, unsigned)
INTEGER_OPS(long, long)
INTEGER_OPS(ulong, unsigned long)
INTEGER_OPS(llong, long long)
INTEGER_OPS(ullong, unsigned long long)
INTEGER_OPS(i8, int8_t)
INTEGER_OPS(i16, int16_t)
INTEGER_OPS(i32, int32_t)
INTEGER_OPS(i64, int64_t)
INTEGER_OPS(u8, uint8_t)
INTEGER_OPS(u16, uint16_t)
INTEGER_OPS(u32, uint32_t)
INTEGER_OPS(u64, uint64_t)
FLOAT_OPS(float, float)
FLOAT_OPS(double, double)
FLOAT_OPS(ldouble, long double)
COMPLEX_OPS(cfloat, float _Complex)
COMPLEX_OPS(cdouble, double _Complex)
COMPLEX_OPS(cldouble, long double _Complex)
LOOP(land_bool, _Bool, a && b)
LOOP(lor_bool, _Bool, a || b)
LOOP(lxor_bool, _Bool, a != b)
LOOP(band_byte, unsigned char, (unsigned char)(a & b))
LOOP(bor_byte, unsigned char, (unsigned char)(a | b))
LOOP(bxor_byte, unsigned char, (unsigned char)(a ^ b))

/* The pair types' C layouts (MPI 4.1, 6.9.4: a value, then an int index,
 * with the struct's padding). MAXLOC keeps the larger value, MINLOC the
 * smaller; on a tie both keep the lower index. */
#define PAIR_OPS(S, T)                                                                     \
    typedef struct {                                                                       \
        T value;                                                                           \
        int index;                                                                         \
    } pair_##S;                                                                            \
    LOOP(maxloc_##S, pair_##S,                                                             \
         a.value > b.value ? a : b.value > a.value ? b : (a.index < b.index ? a : b))      \
    LOOP(minloc_##S, pair_##S,                                                             \
         a.value < b.value ? a : b.value < a.value ? b : (a.index < b.index ? a : b))

PAIR_OPS(float, float)
PAIR_OPS(double, double)
PAIR_OPS(long, long)
PAIR_OPS(int, int)
PAIR_OPS(short, short)
PAIR_OPS(ldouble, long double)

#define INTEGER_ROW(S)                                                                     \
    {sum_##S, prod_##S, min_##S, max_##S, land_##S, band_##S, lor_##S, bor_##S, lxor_##S,   \
     bxor_##S, NULL, NULL}
#define FLOAT_ROW(S) {sum_##S, prod_##S, min_##S, max_##S}
#define COMPLEX_ROW(S) {sum_##S, prod_##S}
#define PAIR_ROW(S) {[OPC_MAXLOC] = maxloc_##S, [OPC_MINLOC] = minloc_##S}

static const mpi_local_fn table[CT_COUNT][OPC_COUNT] = {
    [CT_BYTE] = {[OPC_BAND] = band_byte, [OPC_BOR] = bor_byte, [OPC_BXOR] = bxor_byte},
    [CT_SCHAR] = INTEGER_ROW(schar),
    [CT_UCHAR] = INTEGER_ROW(uchar),
    [CT_SHORT] = INTEGER_ROW(short),
    [CT_USHORT] = INTEGER_ROW(ushort),
    [CT_INT] = INTEGER_ROW(int),
    [CT_UINT] = INTEGER_ROW(uint),
    [CT_LONG] = INTEGER_ROW(long),
    [CT_ULONG] = INTEGER_ROW(ulong),
    [CT_LLONG] = INTEGER_ROW(llong),
    [CT_ULLONG] = INTEGER_ROW(ullong),
    [CT_I8] = INTEGER_ROW(i8),
    [CT_I16] = INTEGER_ROW(i16),
    [CT_I32] = INTEGER_ROW(i32),
    [CT_I64] = INTEGER_ROW(i64),
    [CT_U8] = INTEGER_ROW(u8),
    [CT_U16] = INTEGER_ROW(u16),
    [CT_U32] = INTEGER_ROW(u32),
    [CT_U64] = INTEGER_ROW(u64),
    [CT_FLOAT] = FLOAT_ROW(float),
    [CT_DOUBLE] = FLOAT_ROW(double),
    [CT_LDOUBLE] = FLOAT_ROW(ldouble),
    [CT_BOOL] = {[OPC_LAND] = land_bool, [OPC_LOR] = lor_bool, [OPC_LXOR] = lxor_bool},
    [CT_CFLOAT] = COMPLEX_ROW(cfloat),
    [CT_CDOUBLE] = COMPLEX_ROW(cdouble),
    [CT_CLDOUBLE] = COMPLEX_ROW(cldouble),
    [CT_FLOAT_INT] = PAIR_ROW(float),
    [CT_DOUBLE_INT] = PAIR_ROW(double),
    [CT_LONG_INT] = PAIR_ROW(long),
    [CT_2INT] = PAIR_ROW(int),
    [CT_SHORT_INT] = PAIR_ROW(short),
    [CT_LDOUBLE_INT] = PAIR_ROW(ldouble),
};

mpi_local_fn mpi_local_op(enum mpi_opcode op, enum mpi_ctype type)
{
    if ((unsigned)op >= OPC_COUNT || (unsigned)type >= CT_COUNT) return NULL;
    return table[type][op];
}
