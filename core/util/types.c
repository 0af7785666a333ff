#include "util/types.h"

#include <string.h>

const char *eccl_strerror(eccl_result result)
{
    /* Indexed by the enum's values, which eccl.h fixes explicitly; the
     * designated initialisers keep the table right if the order is edited. */
    static const char *const text[] = {
        [ECCL_OK] = "success",
        [ECCL_ERR_INVALID_ARG] = "invalid argument: a NULL pointer or an out-of-range value",
        [ECCL_ERR_NO_MEMORY] = "out of memory: an allocation failed",
        [ECCL_ERR_SYSTEM] = "the operating system refused a request (see the log)",
        [ECCL_ERR_CONNECT] = "could not connect to the master or a peer",
        [ECCL_ERR_TIMEOUT] = "the operation timed out",
        [ECCL_ERR_PEER_LOST] = "a peer left during the operation; inputs are intact",
        [ECCL_ERR_TOO_FEW_PEERS] = "the collective needs at least two peers",
        [ECCL_ERR_PROTOCOL] = "protocol error: a malformed or unexpected message",
        [ECCL_ERR_KICKED] = "this peer was removed by the master",
        [ECCL_ERR_MASTER_LOST] = "the connection to the master was lost",
        [ECCL_ERR_BUSY] = "busy: the tag is already in flight, or the object is in the wrong state",
        [ECCL_ERR_NOT_CONNECTED] = "not connected: eccl_comm_connect has not succeeded",
        [ECCL_ERR_AGAIN] = "the operation would block; try again",
        [ECCL_ERR_CLOSED] = "the object is shutting down",
        [ECCL_ERR_UNSUPPORTED] = "not supported by this build or backend",
        [ECCL_ERR_DEVICE] = "the device failed a copy or kernel, or its context is broken (see the log)",
        [ECCL_ERR_AUTH] = "authentication failed: the other end does not hold this job's secret, or no secret is set (see the log)",
    };
    /* Compare as unsigned: an enum may be signed, and a negative value cast
     * in from an int must land on "unknown error", not index the table. */
    if ((unsigned)result >= sizeof text / sizeof text[0] || text[result] == NULL)
        return "unknown error";
    return text[result];
}

static const struct {
    const char *name;
    size_t size;
} dtype_info[ECCL_DTYPE_COUNT] = {
    [ECCL_I8] = {"i8", 1},    [ECCL_U8] = {"u8", 1},
    [ECCL_I16] = {"i16", 2},  [ECCL_U16] = {"u16", 2},
    [ECCL_I32] = {"i32", 4},  [ECCL_U32] = {"u32", 4},
    [ECCL_I64] = {"i64", 8},  [ECCL_U64] = {"u64", 8},
    [ECCL_F16] = {"f16", 2},  [ECCL_BF16] = {"bf16", 2},
    [ECCL_F32] = {"f32", 4},  [ECCL_F64] = {"f64", 8},
};

static const char *const op_names[ECCL_OP_COUNT] = {
    [ECCL_SUM] = "sum", [ECCL_AVG] = "avg", [ECCL_PROD] = "prod",
    [ECCL_MIN] = "min", [ECCL_MAX] = "max",
};

size_t eccl_dtype_size(eccl_dtype dtype)
{
    return (unsigned)dtype < ECCL_DTYPE_COUNT ? dtype_info[dtype].size : 0;
}

const char *eccl_dtype_name(eccl_dtype dtype)
{
    return (unsigned)dtype < ECCL_DTYPE_COUNT ? dtype_info[dtype].name : "?";
}

const char *eccl_op_name(eccl_op op)
{
    return (unsigned)op < ECCL_OP_COUNT ? op_names[op] : "?";
}

int eccl_dtype_parse(const char *s, eccl_dtype *out)
{
    static const struct {
        const char *name;
        eccl_dtype dtype;
    } aliases[] = {
        {"float", ECCL_F32}, {"float32", ECCL_F32}, {"double", ECCL_F64},
        {"half", ECCL_F16},  {"bfloat16", ECCL_BF16}, {"int", ECCL_I32},
    };
    if (s == NULL || out == NULL)
        return -1;
    for (int i = 0; i < ECCL_DTYPE_COUNT; i++) {
        if (strcmp(s, dtype_info[i].name) == 0) {
            *out = (eccl_dtype)i;
            return 0;
        }
    }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        if (strcmp(s, aliases[i].name) == 0) {
            *out = aliases[i].dtype;
            return 0;
        }
    }
    return -1;
}

int eccl_op_parse(const char *s, eccl_op *out)
{
    if (s == NULL || out == NULL)
        return -1;
    for (int i = 0; i < ECCL_OP_COUNT; i++) {
        if (strcmp(s, op_names[i]) == 0) {
            *out = (eccl_op)i;
            return 0;
        }
    }
    return -1;
}
