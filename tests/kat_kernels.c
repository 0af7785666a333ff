/* eccl-kat-gen: prints the known-answer arrays of tests/kat_kernels.h,
 * computed with the CPU code. Run once when the table is (re)frozen:
 *     eccl_kat_gen > /tmp/t && <paste between the @@KAT_TABLE markers>
 * Never part of a test run: a table regenerated from the code under test
 * would check nothing. */
#include <inttypes.h>
#include <stdio.h>

#include "kat_kernels.h"

int main(void)
{
    static uint8_t dst[8 * 4099], src[8 * 4099];

    printf("static const KAT_UNUSED uint64_t kat_reduce_expect[ECCL_DTYPE_COUNT][ECCL_OP_COUNT][KAT_REDUCE_CASES] = {\n");
    for (int dt = 0; dt < ECCL_DTYPE_COUNT; dt++) {
        printf("    { /* %s */\n", eccl_dtype_name((eccl_dtype)dt));
        for (int op = 0; op < ECCL_OP_COUNT; op++) {
            printf("        {");
            for (unsigned c = 0; c < KAT_REDUCE_CASES; c++) {
                kat_reduce_cpu((eccl_dtype)dt, (eccl_op)op, c, dst, src);
                printf("%sUINT64_C(0x%016" PRIx64 ")", c ? ", " : "",
                       kat_result_hash((eccl_dtype)dt, (eccl_op)op, dst, kat_reduce_cases[c].n));
            }
            printf("}, /* %s */\n", eccl_op_name((eccl_op)op));
        }
        printf("    },\n");
    }
    printf("};\n\n");

    size_t maxn = kat_hash_lengths[KAT_HASH_CASES - 1];
    uint8_t *buf = malloc(maxn + 1);
    if (buf == NULL)
        return 1;
    kat_bytes(buf, maxn, KAT_HASH_SEED);
    const char *names[2] = {"simple", "crc32c"};
    eccl_hash_type types[2] = {ECCL_HASH_SIMPLE, ECCL_HASH_CRC32C};
    for (int t = 0; t < 2; t++) {
        /* Case i hashes the first kat_hash_lengths[i] bytes of one stream. */
        printf("static const KAT_UNUSED uint64_t kat_hash_%s_expect[KAT_HASH_CASES] = {\n", names[t]);
        for (unsigned c = 0; c < KAT_HASH_CASES; c++)
            printf("    UINT64_C(0x%016" PRIx64 "), /* %zu bytes */\n",
                   eccl_hash(types[t], buf, kat_hash_lengths[c]), kat_hash_lengths[c]);
        printf("};\n\n");
    }
    free(buf);

    printf("static const KAT_UNUSED kat_quant_expect kat_quant_expect_table[3][2][KAT_QUANT_CASES] = {\n");
    for (int d = 0; d < 3; d++) {
        printf("    { /* %s */\n", eccl_dtype_name(kat_quant_dtypes[d]));
        for (int t = 0; t < 2; t++) {
            printf("        { /* %s */\n", t ? "AFFINE_U8" : "MINMAX_U8");
            for (unsigned c = 0; c < KAT_QUANT_CASES; c++) {
                kat_quant_expect e = kat_quant_cpu(kat_quant_dtypes[d],
                                                   t ? ECCL_QUANT_AFFINE_U8 : ECCL_QUANT_MINMAX_U8, c);
                printf("            {%s, UINT64_C(0x%016" PRIx64 "), UINT64_C(0x%016" PRIx64
                       "), UINT64_C(0x%016" PRIx64 ")},\n",
                       e.rc == ECCL_OK ? "ECCL_OK" : e.rc == ECCL_ERR_INVALID_ARG ? "ECCL_ERR_INVALID_ARG" : "-1",
                       e.meta, e.codes, e.values);
            }
            printf("        },\n");
        }
        printf("    },\n");
    }
    printf("};\n");
    return 0;
}
