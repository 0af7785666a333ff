/* eccl-bench: collective latency and bandwidth, in the style of nccl-tests'
 * all_reduce_perf, all_gather_perf, reduce_scatter_perf, broadcast_perf and
 * reduce_perf (--coll picks; all-reduce by default).
 *
 * Either joins a running master (--master) as one rank, or (--np N) starts a
 * master in-process and N rank processes of its own. Rank 0 prints one row
 * per message size; time is the slowest rank's average, and size and busbw
 * follow nccl-tests so numbers compare: size is the all-gather's output and
 * the reduce-scatter's input (world * count elements), the whole buffer
 * otherwise; busbw is algbw times 2(n-1)/n for all-reduce, (n-1)/n for
 * all-gather and reduce-scatter, 1 for broadcast and reduce (root 0).
 *
 * --device puts the buffers in CUDA device memory. The program links only
 * libeccl, so it still starts where there is no CUDA: the runtime is loaded
 * with dlopen, and only for --device.
 */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "eccl.h"
#include "bench_rows.h"
#include "results.h"
#include "tool_util.h"

enum { EXIT_USAGE = 2 };

#define BENCH_ALIGN 64
#define BENCH_MAX_NP 4096
#define BENCH_TAG_BASE 1
#define BENCH_MAX_INFLIGHT 64

#define PATTERN_PERIOD BENCH_PATTERN_PERIOD

struct bench_opts {
    const char *argv0;
    enum bench_coll coll;
    size_t minbytes;
    size_t maxbytes;
    uint64_t stepfactor;
    uint64_t iters;
    uint64_t warmup;
    uint64_t check;
    uint64_t inplace;
    eccl_dtype dtype;
    eccl_op op;
    uint64_t np;           /* 0: join --master as one rank */
    const char *master;
    uint64_t world;
    int world_set;
    uint64_t group;
    int group_set;
    uint64_t timeout_ms;   /* 0: the library's defaults */
    uint64_t inflight;     /* all-reduces in flight per timed iteration */
    int device;            /* buffers in CUDA device memory */
    const char *p2p_host;  /* eccl_comm_params.p2p_host (NULL: the library's) */
    uint64_t hosts;        /* --np: emulated hosts (0: all ranks on 127.0.0.1) */
    const char *out;       /* --out: rank 0 writes the run's results there */
};

struct dtype_desc {
    const char *name;      /* nccl-tests spelling, shown in the output */
    const char *alias;     /* eccl spelling, also accepted by -d */
    size_t size;
    int is_float;
    int is_signed;
    int mant_bits;         /* floats: explicit mantissa bits */
    /* Largest magnitude every partial sum or product of check values may
     * reach: inside the type's range for integers, and an exactly
     * representable integer for floats (2^(mant_bits+1)). */
    int64_t exact_limit;
};

/* The check's own table, not eccl_dtype_size(): the library is what is
 * under test. */
static const struct dtype_desc dtypes[ECCL_DTYPE_COUNT] = {
    [ECCL_I8] = {"int8", "i8", 1, 0, 1, 0, INT8_MAX},
    [ECCL_U8] = {"uint8", "u8", 1, 0, 0, 0, UINT8_MAX},
    [ECCL_I16] = {"int16", "i16", 2, 0, 1, 0, INT16_MAX},
    [ECCL_U16] = {"uint16", "u16", 2, 0, 0, 0, UINT16_MAX},
    [ECCL_I32] = {"int32", "i32", 4, 0, 1, 0, INT64_C(1) << 30},
    [ECCL_U32] = {"uint32", "u32", 4, 0, 0, 0, INT64_C(1) << 30},
    [ECCL_I64] = {"int64", "i64", 8, 0, 1, 0, INT64_C(1) << 30},
    [ECCL_U64] = {"uint64", "u64", 8, 0, 0, 0, INT64_C(1) << 30},
    [ECCL_F16] = {"half", "f16", 2, 1, 1, 10, INT64_C(1) << 11},
    [ECCL_BF16] = {"bfloat16", "bf16", 2, 1, 1, 7, INT64_C(1) << 8},
    [ECCL_F32] = {"float", "f32", 4, 1, 1, 23, INT64_C(1) << 24},
    [ECCL_F64] = {"double", "f64", 8, 1, 1, 52, INT64_C(1) << 30},
};

static const char *const op_names[ECCL_OP_COUNT] = {
    [ECCL_SUM] = "sum", [ECCL_AVG] = "avg", [ECCL_PROD] = "prod",
    [ECCL_MIN] = "min", [ECCL_MAX] = "max",
};

/* The few CUDA runtime calls --device needs, found with dlsym. cudaError_t
 * and cudaMemcpyKind are C enums: int on every ABI CUDA runs on. */
#define CUDA_RUNTIME_SONAME "libcudart.so.13"
enum { CUDA_SUCCESS = 0, CUDA_MEMCPY_H2D = 1, CUDA_MEMCPY_D2H = 2 };

struct cuda_api {
    int (*mem_alloc)(void **ptr, size_t bytes);                          /* cudaMalloc */
    int (*mem_free)(void *ptr);                                          /* cudaFree */
    int (*copy)(void *dst, const void *src, size_t bytes, int kind);     /* cudaMemcpy */
    int (*device_count)(int *count);                                     /* cudaGetDeviceCount */
    int (*set_device)(int device);                                       /* cudaSetDevice */
    const char *(*error_string)(int err);                                /* cudaGetErrorString */
    int ndevices;
};

/* One rank's run: the communicator, buffers and the tag counter. */
struct bench_run {
    const struct bench_opts *opts;
    const struct dtype_desc *dt;
    eccl_comm *comm;
    int64_t rank;
    int64_t nranks;
    /* Every rank issues the same sequence of calls, so a counter bumped
     * once per call yields the same tag on every rank for the same call. */
    uint64_t next_tag;
    void *send;
    void *recv;            /* NULL in place */
    void *more[BENCH_MAX_INFLIGHT]; /* --inflight: the other ops' outputs */
    /* --device: send, recv and more[] are device memory; the check fills
     * and reads this host buffer and copies it to and from them. */
    struct cuda_api cuda;
    void *scratch;
    double busbw_sum;
    unsigned rows;
    uint64_t wrong_total;
    uint32_t algo;         /* the algorithm the row's last call ran (eccl_reduce_info) */
    FILE *tsv;             /* --out, rank 0: bench.tsv, a row per size as printed */
};

/* Check values of this rank and the reduction every rank must end with. */
struct pattern {
    int64_t mine[PATTERN_PERIOD];
    double expect[PATTERN_PERIOD];
    double tol;
};

/* ---- errors ----------------------------------------------------------------- */

/* "eccl-bench: <what>: <why>" on stderr; returns 1. */
__attribute__((format(printf, 2, 0)))
static int report_failed(const char *why, const char *fmt, va_list ap)
{
    fputs("eccl-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, ": %s\n", why);
    return 1;
}

__attribute__((format(printf, 2, 3)))
static int eccl_failed(eccl_result r, const char *fmt, ...)
{
    if (r == ECCL_OK)
        return 0;
    va_list ap;
    va_start(ap, fmt);
    report_failed(eccl_strerror(r), fmt, ap);
    va_end(ap);
    return 1;
}

__attribute__((format(printf, 3, 4)))
static int cuda_failed(const struct cuda_api *c, int err, const char *fmt, ...)
{
    if (err == CUDA_SUCCESS)
        return 0;
    char why[160];
    snprintf(why, sizeof why, "%s (CUDA error %d)", c->error_string(err), err);
    va_list ap;
    va_start(ap, fmt);
    report_failed(why, fmt, ap);
    va_end(ap);
    return 1;
}

/* ---- --device: the CUDA runtime, loaded at run time ------------------------- */

/* Loads the runtime and counts the devices. Never unloaded: the runtime does
 * not support it well. Returns 0, or 1 after saying why. */
static int cuda_load(struct cuda_api *c)
{
    void *lib = dlopen(CUDA_RUNTIME_SONAME, RTLD_NOW);
    void *sym[6];
    static const char *const names[6] = {
        "cudaMalloc", "cudaFree", "cudaMemcpy",
        "cudaGetDeviceCount", "cudaSetDevice", "cudaGetErrorString",
    };
    int err;

    if (lib == NULL) {
        fprintf(stderr, "eccl-bench: --device: cannot load the CUDA runtime: %s\n", dlerror());
        return 1;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        sym[i] = dlsym(lib, names[i]);
        if (sym[i] == NULL) {
            fprintf(stderr, "eccl-bench: --device: %s has no %s\n", CUDA_RUNTIME_SONAME,
                    names[i]);
            return 1;
        }
    }
    c->mem_alloc = (int (*)(void **, size_t))sym[0];
    c->mem_free = (int (*)(void *))sym[1];
    c->copy = (int (*)(void *, const void *, size_t, int))sym[2];
    c->device_count = (int (*)(int *))sym[3];
    c->set_device = (int (*)(int))sym[4];
    c->error_string = (const char *(*)(int))sym[5];
    c->ndevices = 0;
    err = c->device_count(&c->ndevices);
    if (cuda_failed(c, err, "--device: no usable CUDA device"))
        return 1;
    if (c->ndevices <= 0) {
        fprintf(stderr, "eccl-bench: --device: no CUDA device\n");
        return 1;
    }
    return 0;
}

/* ---- options ---------------------------------------------------------------- */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: eccl-bench (--np N | --master HOST:PORT [--world N]) [options]\n"
            "\n"
            "  -b, --minbytes SIZE      smallest message (default 8); K/M/G/T = 2^10..2^40\n"
            "  -e, --maxbytes SIZE      largest message (default 64M)\n"
            "  -f, --stepfactor N       size multiplier between rows (default 2)\n"
            "  -n, --iters N            timed iterations per size (default 20)\n"
            "  -w, --warmup_iters N     untimed iterations per size (default 5)\n"
            "  -c, --check 0|1          verify results, count #wrong (default 1)\n"
            "  -d, --datatype NAME      i8 u8 i16 u16 i32 u32 i64 u64 f16 bf16 f32 f64,\n"
            "                           or int8..uint64 int half bfloat16 float double\n"
            "                           (default float)\n"
            "  -o, --op NAME            sum avg prod min max (default sum)\n"
            "  -I, --inplace 0|1        in-place calls (default 0)\n"
            "      --coll NAME          allreduce allgather reduce_scatter broadcast reduce alltoall\n"
            "                           barrier (default allreduce; barrier: one row of 0 bytes,\n"
            "                           whatever -b/-e say, nothing to check)\n"
            "      --np N               start a master and N local rank processes\n"
            "      --master HOST:PORT   join this master as one rank\n"
            "      --world N            with --master: peers to admit before measuring\n"
            "                           (default 2)\n"
            "      --group G            peer group (default 0)\n"
            "      --hosts H            with --np: rank process i on 127.0.0.(1 + i H / N),\n"
            "                           H emulated hosts of N / H ranks each (the\n"
            "                           hierarchical all-reduce's topology; default: one)\n"
            "      --p2p-host HOST      with --master: the address peers reach this rank on\n"
            "      --timeout-ms MS      connect, operation and admission timeout\n"
            "                           (default: the library's)\n"
            "      --inflight K         K async all-reduces (tags differ) in flight per\n"
            "                           timed iteration, out of place; the row's time is\n"
            "                           the K calls' and its bandwidth counts K buffers\n"
            "                           (default 1: blocking calls)\n"
            "      --concurrent K       the same as --inflight K (eccl-sim's `concurrent`);\n"
            "                           ECCL_P2P_POOL=K gives each its own connection\n"
            "      --device             buffers in CUDA device memory (" CUDA_RUNTIME_SONAME "\n"
            "                           is loaded at start; rank r uses device r mod the\n"
            "                           device count). Per rank: ranks with host and with\n"
            "                           device buffers may be mixed (--np passes it to\n"
            "                           every rank; the header shows rank 0's)\n"
            "      --out DIR            rank 0 writes DIR/bench.tsv (the rows), summary.tsv\n"
            "                           and plot.gp / plot.png (results/README.md)\n"
            "  -h, --help               show this help\n");
}

__attribute__((format(printf, 1, 2)))
static int usage_error(const char *fmt, ...)
{
    va_list ap;

    fputs("eccl-bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'eccl-bench --help'.\n", stderr);
    return EXIT_USAGE;
}

static int parse_dtype(const char *name, eccl_dtype *out)
{
    if (strcmp(name, "int") == 0) {
        *out = ECCL_I32;
        return 0;
    }
    for (int t = 0; t < ECCL_DTYPE_COUNT; t++) {
        if (strcmp(name, dtypes[t].name) == 0 || strcmp(name, dtypes[t].alias) == 0) {
            *out = (eccl_dtype)t;
            return 0;
        }
    }
    return -1;
}

static int parse_op(const char *name, eccl_op *out)
{
    for (int op = 0; op < ECCL_OP_COUNT; op++) {
        if (strcmp(name, op_names[op]) == 0) {
            *out = (eccl_op)op;
            return 0;
        }
    }
    return -1;
}

enum {
    OPT_NP = 256,
    OPT_MASTER,
    OPT_WORLD,
    OPT_GROUP,
    OPT_TIMEOUT,
    OPT_INFLIGHT,
    OPT_DEVICE,
    OPT_COLL,
    OPT_P2P_HOST,
    OPT_HOSTS,
    OPT_OUT,
};

/* Handles one option that takes a number. Returns 0 or the exit status. */
static int parse_number(int c, const char *arg, struct bench_opts *o)
{
    struct { int c; const char *name; uint64_t min, max; uint64_t *dst; } spec[] = {
        {'f', "--stepfactor", 2, 1024, &o->stepfactor},
        {'n', "--iters", 1, UINT32_MAX, &o->iters},
        {'w', "--warmup_iters", 0, UINT32_MAX, &o->warmup},
        {'c', "--check", 0, 1, &o->check},
        {'I', "--inplace", 0, 1, &o->inplace},
        {OPT_NP, "--np", 2, BENCH_MAX_NP, &o->np},
        {OPT_WORLD, "--world", 2, INT32_MAX, &o->world},
        {OPT_GROUP, "--group", 0, UINT32_MAX, &o->group},
        {OPT_TIMEOUT, "--timeout-ms", 1, UINT32_MAX, &o->timeout_ms},
        {OPT_INFLIGHT, "--inflight", 1, BENCH_MAX_INFLIGHT, &o->inflight},
        {OPT_HOSTS, "--hosts", 1, 254, &o->hosts},
    };

    for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
        if (spec[i].c != c)
            continue;
        if (tool_parse_u64(arg, spec[i].min, spec[i].max, spec[i].dst) != 0)
            return usage_error("%s wants an integer in [%" PRIu64 ", %" PRIu64 "], got '%s'",
                               spec[i].name, spec[i].min, spec[i].max, arg);
        return 0;
    }
    return usage_error("internal: no spec for option %d", c);
}

/* Returns -1 to go on, otherwise the exit status. */
static int parse_args(int argc, char **argv, struct bench_opts *o)
{
    static const struct option longopts[] = {
        {"minbytes", required_argument, NULL, 'b'},
        {"maxbytes", required_argument, NULL, 'e'},
        {"stepfactor", required_argument, NULL, 'f'},
        {"iters", required_argument, NULL, 'n'},
        {"warmup_iters", required_argument, NULL, 'w'},
        {"check", required_argument, NULL, 'c'},
        {"datatype", required_argument, NULL, 'd'},
        {"op", required_argument, NULL, 'o'},
        {"inplace", required_argument, NULL, 'I'},
        {"np", required_argument, NULL, OPT_NP},
        {"master", required_argument, NULL, OPT_MASTER},
        {"world", required_argument, NULL, OPT_WORLD},
        {"group", required_argument, NULL, OPT_GROUP},
        {"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
        {"inflight", required_argument, NULL, OPT_INFLIGHT},
        /* The simulator's word for it (scenario key `concurrent`). */
        {"concurrent", required_argument, NULL, OPT_INFLIGHT},
        {"device", no_argument, NULL, OPT_DEVICE},
        {"coll", required_argument, NULL, OPT_COLL},
        {"p2p-host", required_argument, NULL, OPT_P2P_HOST},
        {"hosts", required_argument, NULL, OPT_HOSTS},
        {"out", required_argument, NULL, OPT_OUT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c, status;

    *o = (struct bench_opts){
        .argv0 = argv[0],
        .minbytes = 8,
        .maxbytes = (size_t)64 << 20,
        .stepfactor = 2,
        .iters = 20,
        .warmup = 5,
        .check = 1,
        .dtype = ECCL_F32,
        .op = ECCL_SUM,
        .world = 2,
        .inflight = 1,
    };
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":b:e:f:n:w:c:d:o:I:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b':
        case 'e':
            if (tool_parse_size(optarg, c == 'b' ? &o->minbytes : &o->maxbytes) != 0)
                return usage_error("%s wants a size like 8, 256K, 64M or 1G, got '%s'",
                                   c == 'b' ? "--minbytes" : "--maxbytes", optarg);
            break;
        case 'd':
            if (parse_dtype(optarg, &o->dtype) != 0)
                return usage_error("unknown datatype '%s'", optarg);
            break;
        case 'o':
            if (parse_op(optarg, &o->op) != 0)
                return usage_error("unknown op '%s' (sum avg prod min max)", optarg);
            break;
        case OPT_MASTER:
            if (tool_check_hostport(optarg) != 0)
                return usage_error("--master wants HOST:PORT, got '%s'", optarg);
            o->master = optarg;
            break;
        case OPT_DEVICE:
            o->device = 1;
            break;
        case OPT_OUT:
            o->out = optarg;
            break;
        case OPT_P2P_HOST:
            if (optarg[0] == '\0' || strlen(optarg) > 48 || strchr(optarg, ':'))
                return usage_error("--p2p-host wants a host or IPv4 address, got '%s'", optarg);
            o->p2p_host = optarg;
            break;
        case OPT_COLL: {
            int k = 0;
            while (k < COLL_COUNT && strcmp(optarg, bench_coll_names[k]) != 0) k++;
            if (k == COLL_COUNT)
                return usage_error("unknown collective '%s' (allreduce allgather reduce_scatter "
                                   "broadcast reduce alltoall barrier)", optarg);
            o->coll = (enum bench_coll)k;
            break;
        }
        case 'h':
            usage(stdout);
            return EXIT_SUCCESS;
        case ':':
            return usage_error("%s needs an argument", argv[optind - 1]);
        case '?':
            if (optopt != 0)
                return usage_error("unknown option '-%c'", optopt);
            return usage_error("unknown option '%s'", argv[optind - 1]);
        default:
            status = parse_number(c, optarg, o);
            if (status != 0)
                return status;
            o->world_set |= c == OPT_WORLD;
            o->group_set |= c == OPT_GROUP;
            break;
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if ((o->np != 0) == (o->master != NULL))
        return usage_error("give exactly one of --np N and --master HOST:PORT");
    if (o->np != 0 && o->world_set)
        return usage_error("--world is implied by --np");
    if (o->hosts != 0 && (o->np == 0 || o->hosts > o->np))
        return usage_error("--hosts wants --np N and at most N hosts");
    if (o->np != 0 && o->p2p_host != NULL)
        return usage_error("--p2p-host is for one rank (--master); with --np use --hosts");
    if (o->inflight > 1 && o->inplace)
        return usage_error("--inflight wants out-of-place calls (-I 0): each op needs its own output");
    if (o->minbytes == 0)
        return usage_error("--minbytes must be at least 1");
    if (o->minbytes > o->maxbytes)
        return usage_error("--minbytes %zu exceeds --maxbytes %zu", o->minbytes, o->maxbytes);
    return -1;
}

/* ---- element access ----------------------------------------------------------- */

static uint32_t float_bits(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u)
{
    float f;

    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE binary16 with round-to-nearest-even, as device converters do. */
static uint16_t f32_to_f16(float f)
{
    uint32_t x = float_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t man = x & 0x7fffffu;
    int e = (int)((x >> 23) & 0xffu) - 127 + 15;
    uint32_t h, rem, halfway;
    int shift;

    if (((x >> 23) & 0xffu) == 0xffu)
        return (uint16_t)(sign | 0x7c00u | (man != 0 ? 0x200u : 0));
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        man |= 0x800000u;
        shift = 14 - e;
    } else {
        man |= (uint32_t)e << 23;
        shift = 13;
    }
    /* In the normal case the exponent rides along in man, so a rounding carry
     * out of the mantissa bumps the exponent (up to infinity), as it must. */
    h = man >> shift;
    rem = man & ((1u << shift) - 1);
    halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    float mag;

    if (e == 0) {
        mag = (float)man * 0x1p-24f;
        return sign != 0 ? -mag : mag;
    }
    if (e == 31)
        return bits_float(sign | 0x7f800000u | (man << 13));
    return bits_float(sign | ((e + 112) << 23) | (man << 13));
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t x = float_bits(f);

    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static float bf16_to_f32(uint16_t b)
{
    return bits_float((uint32_t)b << 16);
}

static void store_elem(void *buf, eccl_dtype t, size_t i, int64_t v)
{
    switch (t) {
    case ECCL_I8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case ECCL_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case ECCL_I16: ((int16_t *)buf)[i] = (int16_t)v; break;
    case ECCL_U16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
    case ECCL_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case ECCL_U32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case ECCL_I64: ((int64_t *)buf)[i] = v; break;
    case ECCL_U64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case ECCL_F16: ((uint16_t *)buf)[i] = f32_to_f16((float)v); break;
    case ECCL_BF16: ((uint16_t *)buf)[i] = f32_to_bf16((float)v); break;
    case ECCL_F32: ((float *)buf)[i] = (float)v; break;
    case ECCL_F64: ((double *)buf)[i] = (double)v; break;
    default: break;
    }
}

static double load_elem(const void *buf, eccl_dtype t, size_t i)
{
    switch (t) {
    case ECCL_I8: return ((const int8_t *)buf)[i];
    case ECCL_U8: return ((const uint8_t *)buf)[i];
    case ECCL_I16: return ((const int16_t *)buf)[i];
    case ECCL_U16: return ((const uint16_t *)buf)[i];
    case ECCL_I32: return ((const int32_t *)buf)[i];
    case ECCL_U32: return ((const uint32_t *)buf)[i];
    case ECCL_I64: return (double)((const int64_t *)buf)[i];
    case ECCL_U64: return (double)((const uint64_t *)buf)[i];
    case ECCL_F16: return f16_to_f32(((const uint16_t *)buf)[i]);
    case ECCL_BF16: return bf16_to_f32(((const uint16_t *)buf)[i]);
    case ECCL_F32: return ((const float *)buf)[i];
    case ECCL_F64: return ((const double *)buf)[i];
    default: return 0;
    }
}

/* Writes vals[i % PATTERN_PERIOD] to every element: one period element by
 * element, the rest by doubling copies, since 64 MiB per size adds up. */
static void fill_pattern(void *buf, eccl_dtype t, size_t esize, size_t count,
                         const int64_t vals[PATTERN_PERIOD])
{
    size_t done = count < PATTERN_PERIOD ? count : PATTERN_PERIOD;

    for (size_t i = 0; i < done; i++)
        store_elem(buf, t, i, vals[i]);
    while (done < count) {
        size_t n = count - done < done ? count - done : done;

        memcpy((char *)buf + done * esize, buf, n * esize);
        done += n;
    }
}

/* ---- the check ---------------------------------------------------------------- */

static double pow2(int64_t e)
{
    double v = 1;

    for (; e > 0; e--)
        v *= 2;
    for (; e < 0; e++)
        v /= 2;
    return v;
}

static void build_pattern(const struct bench_run *run, struct pattern *p)
{
    const struct dtype_desc *d = run->dt;
    eccl_op op = run->opts->op;

    for (size_t j = 0; j < PATTERN_PERIOD; j++) {
        int64_t acc = bench_contribution(d->exact_limit, d->is_signed, op, run->nranks, 0, j);

        for (int64_t r = 1; r < run->nranks; r++) {
            int64_t v = bench_contribution(d->exact_limit, d->is_signed, op, run->nranks, r, j);

            switch (op) {
            case ECCL_PROD: acc *= v; break;
            case ECCL_MIN: acc = v < acc ? v : acc; break;
            case ECCL_MAX: acc = v > acc ? v : acc; break;
            default: acc += v; break;
            }
        }
        p->mine[j] = bench_contribution(d->exact_limit, d->is_signed, op, run->nranks, run->rank, j);
        if (op != ECCL_AVG)
            p->expect[j] = (double)acc;
        else if (d->is_float)
            p->expect[j] = (double)acc / (double)run->nranks;
        else
            p->expect[j] = (double)(acc / run->nranks); /* C truncates toward zero */
    }
    /* A float average is not exact: the library may divide before summing
     * (as NCCL does), rounding each of nranks terms and partial sums, none
     * larger than amp; allow one ulp at amp per rank plus the final rounding. */
    p->tol = 0;
    if (op == ECCL_AVG && d->is_float)
        p->tol = (double)(run->nranks + 1) *
                 pow2(bench_floor_log2(bench_amplitude(d->exact_limit, run->nranks)) - d->mant_bits);
}

/* Counts elements i of buf that differ from want[(first + i) % period] by
 * more than tol (first: where buf starts in the pattern). */
static uint64_t check_buffer(const void *buf, eccl_dtype t, size_t count,
                             const double want[PATTERN_PERIOD], double tol, size_t first)
{
    uint64_t wrong = 0;

    for (size_t i = 0; i < count; i++) {
        double got = load_elem(buf, t, i);
        double w = want[(first + i) % PATTERN_PERIOD];
        double diff = got > w ? got - w : w - got;

        /* Negated so that NaN counts as wrong. */
        if (!(diff <= tol))
            wrong++;
    }
    return wrong;
}

static int allreduce(struct bench_run *run, const void *send, void *recv, size_t count,
                     eccl_dtype t, eccl_op op, const char *what)
{
    uint64_t tag = run->next_tag++;
    eccl_result r = eccl_allreduce(run->comm, send, recv, count, t, op, tag, NULL);

    return eccl_failed(r, "rank %" PRId64 ": %s (%zu x %s %s, tag %" PRIu64 ")", run->rank,
                       what, count, dtypes[t].name, op_names[op], tag);
}

/* Elements of one call's count argument for a row of `count` elements:
 * the all-gather's and reduce-scatter's are per rank. */
static size_t call_count(const struct bench_run *run, size_t count)
{
    return bench_blocked(run->opts->coll) ? count / (size_t)run->nranks : count;
}

/* A call's input and output for output buffer `base` (the row's recv, or
 * one of --inflight's): in place, everything lives in send, laid out as
 * eccl.h says (the all-gather's own block, the reduce-scatter's). */
static void call_bufs(const struct bench_run *run, size_t ccount, void *base, const void **in, void **out)
{
    size_t block = ccount * run->dt->size * (size_t)run->rank;
    uint8_t *send = run->send;
    *in = send;
    *out = run->opts->inplace ? send : base;
    if (!run->opts->inplace) return;
    if (run->opts->coll == COLL_ALLGATHER) *in = send + block;
    if (run->opts->coll == COLL_REDUCE_SCATTER) *out = send + block;
}

/* Issues the benchmarked collective: blocking when req is NULL. */
static eccl_result issue(struct bench_run *run, const void *in, void *out, size_t ccount, uint64_t tag,
                         eccl_request **req)
{
    const struct bench_opts *o = run->opts;
    eccl_comm *c = run->comm;
    eccl_reduce_info info_store, *info = req ? NULL : &info_store;
    eccl_result rc;
    switch (o->coll) {
    case COLL_ALLGATHER:
        rc = req ? eccl_allgather_async(c, in, out, ccount, o->dtype, tag, req)
                   : eccl_allgather(c, in, out, ccount, o->dtype, tag, info);
        break;
    case COLL_REDUCE_SCATTER:
        rc = req ? eccl_reduce_scatter_async(c, in, out, ccount, o->dtype, o->op, tag, req)
                   : eccl_reduce_scatter(c, in, out, ccount, o->dtype, o->op, tag, info);
        break;
    case COLL_BROADCAST:
        rc = req ? eccl_broadcast_async(c, in, out, ccount, o->dtype, 0, tag, req)
                   : eccl_broadcast(c, in, out, ccount, o->dtype, 0, tag, info);
        break;
    case COLL_REDUCE:
        rc = req ? eccl_reduce_async(c, in, out, ccount, o->dtype, o->op, 0, tag, req)
                   : eccl_reduce(c, in, out, ccount, o->dtype, o->op, 0, tag, info);
        break;
    case COLL_ALLTOALL:
        rc = req ? eccl_alltoall_async(c, in, out, ccount, o->dtype, tag, req)
                   : eccl_alltoall(c, in, out, ccount, o->dtype, tag, info);
        break;
    case COLL_BARRIER:
        return req ? eccl_barrier_async(c, tag, req) : eccl_barrier(c, tag);
    default:
        rc = req ? eccl_allreduce_async(c, in, out, ccount, o->dtype, o->op, tag, req)
                   : eccl_allreduce(c, in, out, ccount, o->dtype, o->op, tag, info);
    }
    if (rc == ECCL_OK && info) run->algo = info->algorithm;
    return rc;
}

/* One timed (or warm-up) iteration: one blocking call, or --inflight async
 * ones, each into its own output, then waits for all. */
static int round_of_calls(struct bench_run *run, size_t count, void *out, const char *what)
{
    const struct bench_opts *o = run->opts;
    size_t ccount = call_count(run, count);
    const void *in;
    void *dst;
    if (o->inflight == 1) {
        uint64_t tag = run->next_tag++;
        call_bufs(run, ccount, out, &in, &dst);
        return eccl_failed(issue(run, in, dst, ccount, tag, NULL), "rank %" PRId64 ": %s (%s, tag %" PRIu64 ")",
                           run->rank, what, bench_coll_names[o->coll], tag);
    }
    eccl_request *r[BENCH_MAX_INFLIGHT];
    int failed = 0;
    uint64_t k = 0;
    for (; k < o->inflight; k++) {
        uint64_t tag = run->next_tag++;
        call_bufs(run, ccount, k == 0 ? out : run->more[k - 1], &in, &dst);
        eccl_result rc = issue(run, in, dst, ccount, tag, &r[k]);
        if (eccl_failed(rc, "rank %" PRId64 ": %s (async, tag %" PRIu64 ")", run->rank, what, tag)) {
            failed = 1;
            break;
        }
    }
    for (uint64_t j = 0; j < k; j++) {
        eccl_reduce_info info;
        eccl_result rc = eccl_wait(r[j], &info);
        failed |= eccl_failed(rc, "rank %" PRId64 ": %s (wait)", run->rank, what);
        if (rc == ECCL_OK) run->algo = info.algorithm;
    }
    return failed;
}

/* Where the check writes and reads buf's bytes on the host: buf itself, or
 * with --device the scratch buffer that upload/download move to and from it. */
static void *host_side(const struct bench_run *run, void *buf)
{
    return run->opts->device ? run->scratch : buf;
}

/* --device: copies the first bytes of the scratch buffer to device buffer
 * dst; nothing to do for host buffers. */
static int upload(struct bench_run *run, void *dst, size_t bytes)
{
    if (!run->opts->device)
        return 0;
    return cuda_failed(&run->cuda, run->cuda.copy(dst, run->scratch, bytes, CUDA_MEMCPY_H2D),
                       "rank %" PRId64 ": copying %zu bytes to the device", run->rank, bytes);
}

/* --device: copies bytes of device buffer src into the scratch buffer. */
static int download(struct bench_run *run, const void *src, size_t bytes)
{
    if (!run->opts->device)
        return 0;
    return cuda_failed(&run->cuda, run->cuda.copy(run->scratch, src, bytes, CUDA_MEMCPY_D2H),
                       "rank %" PRId64 ": copying %zu bytes from the device", run->rank, bytes);
}

/* The check values every element i of rank r's contribution repeats. */
static void rank_values(const struct bench_run *run, int64_t r, double out[PATTERN_PERIOD])
{
    for (size_t j = 0; j < PATTERN_PERIOD; j++)
        out[j] = (double)bench_contribution(run->dt->exact_limit, run->dt->is_signed, run->opts->op, run->nranks, r, j);
}

/* One call of the check pattern; adds the mismatches to *wrong. Every rank
 * contributes its own values (the all-gather's blocks, the broadcast root's
 * buffer), so a block in the wrong place or from the wrong rank shows. */
static int checked_call(struct bench_run *run, size_t count, uint64_t *wrong)
{
    const struct bench_opts *o = run->opts;
    enum bench_coll k = o->coll;
    size_t es = run->dt->size, ccount = call_count(run, count), n = (size_t)run->nranks;
    size_t in_elems = k == COLL_REDUCE_SCATTER || k == COLL_ALLTOALL ? n * ccount : ccount;
    size_t out_elems = k == COLL_ALLGATHER || k == COLL_ALLTOALL ? n * ccount : ccount;
    int has_in = k != COLL_BROADCAST || run->rank == 0, has_out = k != COLL_REDUCE || run->rank == 0;
    struct pattern p;
    double want[PATTERN_PERIOD];
    const void *in;
    void *out;

    if (k == COLL_BARRIER) /* no bytes: nothing to check but that it returns */
        return eccl_failed(issue(run, NULL, NULL, 0, run->next_tag++, NULL), "rank %" PRId64 ": checked barrier",
                           run->rank);
    build_pattern(run, &p);
    call_bufs(run, ccount, run->recv, &in, &out);
    if (has_in) {
        /* All-to-all: block j (for rank j) from values of its own, so a
         * block sent to the wrong rank shows. */
        for (size_t j = 0; k == COLL_ALLTOALL && j < n; j++) {
            int64_t vals[PATTERN_PERIOD];
            for (size_t e = 0; e < PATTERN_PERIOD; e++)
                vals[e] = bench_contribution(run->dt->exact_limit, run->dt->is_signed, o->op, run->nranks, run->rank * (int64_t)n + (int64_t)j, e);
            fill_pattern((uint8_t *)host_side(run, (void *)in) + j * ccount * es, o->dtype, es, ccount, vals);
        }
        if (k != COLL_ALLTOALL)
            fill_pattern(host_side(run, (void *)in), o->dtype, es, in_elems, p.mine);
        if (upload(run, (void *)in, in_elems * es))
            return 1;
    }
    /* Garbage in the output, so a call that leaves it untouched shows. */
    if (!o->inplace) {
        memset(host_side(run, out), 0xa5, out_elems * es);
        if (upload(run, out, out_elems * es))
            return 1;
    }
    uint64_t tag = run->next_tag++;
    if (eccl_failed(issue(run, in, out, ccount, tag, NULL), "rank %" PRId64 ": checked %s (tag %" PRIu64 ")",
                    run->rank, bench_coll_names[k], tag))
        return 1;
    if (has_out && download(run, out, out_elems * es))
        return 1;
    switch (k) {
    case COLL_ALLGATHER:
        for (size_t r = 0; r < n; r++) {
            rank_values(run, (int64_t)r, want);
            *wrong += check_buffer((uint8_t *)host_side(run, out) + r * ccount * es, o->dtype, ccount, want, 0, 0);
        }
        break;
    case COLL_BROADCAST:
        rank_values(run, 0, want);
        *wrong += check_buffer(host_side(run, out), o->dtype, ccount, want, 0, 0);
        break;
    case COLL_ALLTOALL: /* block i: rank i's block for us */
        for (size_t r = 0; r < n; r++) {
            rank_values(run, (int64_t)r * (int64_t)n + run->rank, want);
            *wrong += check_buffer((uint8_t *)host_side(run, out) + r * ccount * es, o->dtype, ccount, want, 0, 0);
        }
        break;
    case COLL_REDUCE_SCATTER: /* block `rank` of the reduction */
        *wrong += check_buffer(host_side(run, out), o->dtype, ccount, p.expect, p.tol, (size_t)run->rank * ccount);
        break;
    default:
        if (has_out)
            *wrong += check_buffer(host_side(run, out), o->dtype, ccount, p.expect, p.tol, 0);
        break;
    }
    if (!o->inplace && has_in) {
        if (download(run, in, in_elems * es))
            return 1;
        for (size_t j = 0; k == COLL_ALLTOALL && j < n; j++) {
            rank_values(run, run->rank * (int64_t)n + (int64_t)j, want);
            *wrong += check_buffer((uint8_t *)host_side(run, (void *)in) + j * ccount * es, o->dtype, ccount,
                                   want, 0, 0);
        }
        if (k != COLL_ALLTOALL) {
            rank_values(run, run->rank, want);
            *wrong += check_buffer(host_side(run, (void *)in), o->dtype, in_elems, want, 0, 0);
        }
    }
    return 0;
}

/* ---- measurement -------------------------------------------------------------- */

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Timed runs use values the op maps to themselves, so that in place, where
 * each call feeds the next, sums and products neither overflow nor turn
 * into inf/NaN (which would time the FPU's slow paths). */
static int fill_steady(struct bench_run *run, size_t count)
{
    int64_t vals[PATTERN_PERIOD];

    for (size_t j = 0; j < PATTERN_PERIOD; j++)
        vals[j] = run->opts->op == ECCL_PROD ? 1 : 0;
    fill_pattern(host_side(run, run->send), run->opts->dtype, run->dt->size, count, vals);
    return upload(run, run->send, count * run->dt->size);
}

static void print_header(const struct bench_run *run)
{
    const struct bench_opts *o = run->opts;

    printf("# eccl-bench: nranks %" PRId64 " dtype %s op %s inplace %" PRIu64
           " iters %" PRIu64 " warmup %" PRIu64 " check %" PRIu64 " inflight %" PRIu64
           " device %d coll %s\n",
           run->nranks, run->dt->name, op_names[o->op], o->inplace, o->iters, o->warmup,
           o->check, o->inflight, o->device, bench_coll_names[o->coll]);
    bench_print_columns(stdout);
    fflush(stdout);
}

static void print_row(struct bench_run *run, size_t count, double time_us, uint64_t wrong)
{
    size_t bytes = count * run->dt->size;
    double algbw = (double)bytes * (double)run->opts->inflight / time_us / 1e3;
    double busbw = algbw * bench_busbw_factor(run->opts->coll, run->nranks);
    char wrong_text[24] = "N/A";

    run->busbw_sum += busbw;
    run->rows++;
    if (run->rank != 0)
        return;
    if (run->opts->check && run->opts->coll != COLL_BARRIER)
        snprintf(wrong_text, sizeof wrong_text, "%" PRIu64, wrong);
    const char *redop = bench_reduces(run->opts->coll) ? op_names[run->opts->op] : "none";
    /* eccl_barrier reports no algorithm (it takes no eccl_reduce_info). */
    const char *algo = run->opts->coll == COLL_BARRIER ? "-" : eccl_algorithm_name(run->algo);
    bench_print_row(stdout, bytes, count, run->dt->name, redop, time_us, algbw, busbw, wrong_text, algo);
    fflush(stdout);
    if (run->tsv)
        eccl_results_bench_row(run->tsv, bytes, count, run->dt->name, redop, time_us, algbw, busbw, wrong_text,
                               algo);
}

static int run_size(struct bench_run *run, size_t size)
{
    const struct bench_opts *o = run->opts;
    /* The all-gather's and reduce-scatter's size is world blocks. */
    size_t count = size / run->dt->size;
    if (bench_blocked(o->coll))
        count = count / (size_t)run->nranks * (size_t)run->nranks;
    void *out = o->inplace ? run->send : run->recv;
    uint64_t wrong = 0, wrong_all = 0, start;
    double time_us, time_max;

    if (count == 0 && o->coll != COLL_BARRIER)
        return 0;
    if (fill_steady(run, count))
        return 1;
    for (uint64_t k = 0; k < o->warmup; k++)
        if (round_of_calls(run, count, out, "warm-up call"))
            return 1;
    if (o->check) {
        if (checked_call(run, count, &wrong) || fill_steady(run, count))
            return 1;
    }

    start = now_ns();
    for (uint64_t k = 0; k < o->iters; k++)
        if (round_of_calls(run, count, out, "timed call"))
            return 1;
    time_us = (double)(now_ns() - start) / 1e3 / (double)o->iters;

    /* The slowest rank is the collective's time, as in nccl-tests. */
    if (allreduce(run, &time_us, &time_max, 1, ECCL_F64, ECCL_MAX, "gathering times"))
        return 1;
    if (o->check) {
        if (allreduce(run, &wrong, &wrong_all, 1, ECCL_U64, ECCL_SUM, "gathering #wrong"))
            return 1;
        run->wrong_total += wrong_all;
    }
    print_row(run, count, time_max, wrong_all);
    return 0;
}

/* ---- one rank ----------------------------------------------------------------- */

/* PCCL-style admission (tool_admit_world): every rank runs the same loop
 * until the world is complete. */
static int admit_peers(struct bench_run *run, uint64_t timeout_ms)
{
    int64_t accepted = 0;
    eccl_result rc = tool_admit_world(run->comm, (int64_t)run->opts->world, timeout_ms, &accepted);

    return eccl_failed(rc, "waiting for %" PRIu64 " peers (%" PRId64 " accepted, limit %" PRIu64
                       " ms)", run->opts->world, accepted, timeout_ms);
}

static uint64_t fnv1a(uint64_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        h ^= (v >> (8 * i)) & 0xffu;
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

/* Ranks started with different sizes or counts would issue different call
 * sequences and hang on mismatched tags; one all-reduce catches that early.
 * MAX over (h, ~h) returns (h, ~h) exactly when every rank has the same h.
 * --device is left out: it changes no call, and eccl reduces host buffers of
 * one rank with device buffers of another. */
static int agree_on_options(struct bench_run *run)
{
    const struct bench_opts *o = run->opts;
    uint64_t v[] = {o->minbytes, o->maxbytes, o->stepfactor, o->iters, o->warmup,
                    o->check, o->inplace, (uint64_t)o->dtype, (uint64_t)o->op, (uint64_t)o->coll};
    uint64_t h = UINT64_C(0xcbf29ce484222325), mine[2], all[2];

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        h = fnv1a(h, v[i]);
    mine[0] = h;
    mine[1] = ~h;
    if (allreduce(run, mine, all, 2, ECCL_U64, ECCL_MAX, "comparing options"))
        return 1;
    if (all[0] != mine[0] || all[1] != mine[1]) {
        fprintf(stderr, "eccl-bench: rank %" PRId64 ": ranks were started with different "
                "size, iteration, check, datatype, op or inplace options\n", run->rank);
        return 1;
    }
    return 0;
}

static int device_alloc(struct bench_run *run, void **buf, size_t bytes)
{
    void *p = NULL;

    if (cuda_failed(&run->cuda, run->cuda.mem_alloc(&p, bytes),
                    "rank %" PRId64 ": allocating %zu bytes of device memory", run->rank, bytes))
        return 1;
    *buf = p;
    return 0;
}

/* --device: send, recv and more[] on device rank mod count, and the host
 * scratch buffer the check goes through. */
static int alloc_device_buffers(struct bench_run *run, size_t bytes)
{
    int dev = (int)(run->rank % run->cuda.ndevices);

    if (cuda_failed(&run->cuda, run->cuda.set_device(dev),
                    "rank %" PRId64 ": selecting device %d", run->rank, dev))
        return 1;
    if ((run->scratch = aligned_alloc(BENCH_ALIGN, bytes)) == NULL)
        return eccl_failed(ECCL_ERR_NO_MEMORY, "allocating a %zu-byte host buffer", bytes);
    if (device_alloc(run, &run->send, bytes) ||
        (!run->opts->inplace && device_alloc(run, &run->recv, bytes)))
        return 1;
    for (uint64_t k = 1; k < run->opts->inflight; k++)
        if (device_alloc(run, &run->more[k - 1], bytes))
            return 1;
    return 0;
}

static void free_buffers(struct bench_run *run)
{
    void *bufs[2 + BENCH_MAX_INFLIGHT] = {run->send, run->recv};

    memcpy(&bufs[2], run->more, sizeof run->more);
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (!run->opts->device)
            free(bufs[i]);
        else if (bufs[i] != NULL)
            cuda_failed(&run->cuda, run->cuda.mem_free(bufs[i]),
                        "rank %" PRId64 ": freeing device memory", run->rank);
    }
    free(run->scratch);
}

static int alloc_buffers(struct bench_run *run)
{
    size_t bytes = run->opts->maxbytes;

    /* aligned_alloc wants a multiple of the alignment. */
    if (bytes > SIZE_MAX - BENCH_ALIGN)
        bytes = SIZE_MAX - BENCH_ALIGN;
    bytes = (bytes + BENCH_ALIGN - 1) / BENCH_ALIGN * BENCH_ALIGN;
    if (run->opts->device)
        return alloc_device_buffers(run, bytes);
    run->send = aligned_alloc(BENCH_ALIGN, bytes);
    if (!run->opts->inplace)
        run->recv = aligned_alloc(BENCH_ALIGN, bytes);
    if (run->send == NULL || (!run->opts->inplace && run->recv == NULL))
        return eccl_failed(ECCL_ERR_NO_MEMORY, "allocating %zu-byte buffers", bytes);
    for (uint64_t k = 1; k < run->opts->inflight; k++)
        if ((run->more[k - 1] = aligned_alloc(BENCH_ALIGN, bytes)) == NULL)
            return eccl_failed(ECCL_ERR_NO_MEMORY, "allocating %zu-byte buffers", bytes);
    return 0;
}

static int run_sizes(struct bench_run *run)
{
    const struct bench_opts *o = run->opts;

    if (o->coll == COLL_BARRIER) { /* no bytes: one row, whatever -b/-e say */
        if (run_size(run, 0))
            return 1;
    } else {
        for (size_t size = o->minbytes;; size *= o->stepfactor) {
            if (run_size(run, size))
                return 1;
            /* Stops before size * stepfactor passes maxbytes, or overflows. */
            if (size > o->maxbytes / o->stepfactor)
                break;
        }
    }
    if (run->rank == 0) {
        if (o->check)
            printf("# Out of bounds values : %" PRIu64 " %s\n", run->wrong_total,
                   run->wrong_total == 0 ? "OK" : "FAILED");
        printf("# Avg bus bandwidth    : %g\n",
               run->rows != 0 ? run->busbw_sum / run->rows : 0.0);
        printf("#\n");
        fflush(stdout);
    }
    if (run->wrong_total != 0) {
        fprintf(stderr, "eccl-bench: rank %" PRId64 ": %" PRIu64 " wrong elements\n",
                run->rank, run->wrong_total);
        return 1;
    }
    return 0;
}

/* --out on rank 0: the folder and bench.tsv's header, before the rows. */
static int open_results(struct bench_run *run)
{
    if (eccl_results_mkdir(run->opts->out) != 0) {
        fprintf(stderr, "eccl-bench: --out: cannot create %s: %s\n", run->opts->out, strerror(errno));
        return 1;
    }
    run->tsv = eccl_results_bench_open(run->opts->out);
    return run->tsv == NULL;
}

/* --out on rank 0, after the rows: bench.tsv closed, summary.tsv (the keys
 * eccl-sim's workload = bench writes too, results/README.md) and the plot.
 * Returns 1 when any of it could not be written. */
static int close_results(struct bench_run *run, int pass)
{
    const struct bench_opts *o = run->opts;
    int io_err = eccl_results_close(run->tsv) != 0;
    run->tsv = NULL;
    FILE *sf = eccl_results_summary_open(o->out);
    if (sf) {
        const char *net = getenv("ECCL_NET"), *algo = getenv("ECCL_ALGO");
        eccl_results_kv_str(sf, "tool", "eccl-bench");
        eccl_results_kv_i64(sf, "ranks", run->nranks);
        eccl_results_kv_str(sf, "workload", "bench");
        eccl_results_kv_str(sf, "collective", bench_coll_names[o->coll]);
        eccl_results_kv_str(sf, "algo", algo && *algo ? algo : "-");
        /* The setting: the library picks ibv where ECCL_NET is unset and an
         * RDMA port is up, and says so on its log, not through the API. */
        eccl_results_kv_str(sf, "transport", net && *net ? net : "auto");
        eccl_results_kv_u64(sf, "iters", o->iters);
        eccl_results_kv_u64(sf, "warmup", o->warmup);
        eccl_results_kv_i64(sf, "rows", run->rows);
        if (o->check)
            eccl_results_kv_u64(sf, "wrong", run->wrong_total);
        else
            eccl_results_kv_str(sf, "wrong", "N/A");
        eccl_results_kv_double(sf, "busbw_avg_GBps", run->rows ? run->busbw_sum / run->rows : 0.0);
        eccl_results_kv_str(sf, "checks", pass ? "pass" : "fail");
        eccl_results_kv_str(sf, "type", run->dt->name);
        eccl_results_kv_str(sf, "op", op_names[o->op]);
        eccl_results_kv_u64(sf, "inplace", o->inplace);
        eccl_results_kv_u64(sf, "inflight", o->inflight);
        eccl_results_kv_i64(sf, "device", o->device);
        io_err |= eccl_results_close(sf) != 0;
    } else {
        io_err = 1;
    }
    char title[160];
    snprintf(title, sizeof title, "eccl-bench: %s of %s on %" PRId64 " ranks", bench_coll_names[o->coll],
             run->dt->name, run->nranks);
    io_err |= eccl_results_bench_plot(o->out, "eccl-bench", title) != 0;
    if (!io_err) eccl_results_plot_png(o->out, &io_err);
    return io_err;
}

static int run_rank(const struct bench_opts *o)
{
    struct bench_run run = {.opts = o, .dt = &dtypes[o->dtype], .next_tag = BENCH_TAG_BASE};
    eccl_comm_params params;
    int status = EXIT_FAILURE;

    if (o->device && cuda_load(&run.cuda))
        return EXIT_FAILURE;
    eccl_comm_params_init(&params);
    params.master_addr = o->master;
    if (o->group_set)
        params.peer_group = (uint32_t)o->group;
    if (o->p2p_host != NULL)
        params.p2p_host = o->p2p_host;
    if (o->timeout_ms != 0) {
        params.connect_timeout_ms = (uint32_t)o->timeout_ms;
        params.op_timeout_ms = (uint32_t)o->timeout_ms;
    }

    if (eccl_failed(eccl_comm_create(&params, &run.comm), "creating the communicator"))
        goto out;
    if (eccl_failed(eccl_comm_connect(run.comm), "connecting to %s", o->master))
        goto out;
    if (admit_peers(&run, o->timeout_ms != 0 ? o->timeout_ms : params.op_timeout_ms))
        goto out;
    if (eccl_failed(eccl_comm_get_attr(run.comm, ECCL_ATTR_RANK, &run.rank), "reading the rank") ||
        eccl_failed(eccl_comm_get_attr(run.comm, ECCL_ATTR_WORLD_SIZE, &run.nranks),
                    "reading the world size"))
        goto out;
    if (agree_on_options(&run) || alloc_buffers(&run))
        goto out;
    if (run.rank == 0)
        print_header(&run);
    if (run.rank == 0 && o->out && open_results(&run))
        goto out;
    if (run_sizes(&run) == 0)
        status = EXIT_SUCCESS;
    if (run.tsv && close_results(&run, status == EXIT_SUCCESS))
        status = EXIT_FAILURE;
out:
    free_buffers(&run);
    if (run.comm != NULL) {
        /* Every rank measured every size: the job ends together (no new
         * ring among ranks that are leaving, nobody dials one already
         * gone, nothing on the log). After a failure a rank just goes. */
        eccl_result rc = status == EXIT_SUCCESS ? eccl_comm_leave(run.comm) : ECCL_OK;
        if (rc != ECCL_OK) {
            fprintf(stderr, "eccl-bench: rank %lld: leaving together: %s\n", (long long)run.rank, eccl_strerror(rc));
            status = EXIT_FAILURE;
        }
        eccl_comm_destroy(run.comm);
    }
    return status;
}

/* ---- --np: a master and N rank processes -------------------------------------- */

/* Enough for every option below plus argv[0], spawn_hosts' --p2p-host and
 * the terminating NULL. */
#define CHILD_ARGC_MAX 40
#define CHILD_NUM_LEN 24

struct child_argv {
    char *argv[CHILD_ARGC_MAX];
    char nums[12][CHILD_NUM_LEN];
    int argc;
    int nnums;
};

static void add_arg(struct child_argv *a, const char *flag, const char *value)
{
    a->argv[a->argc++] = (char *)flag;
    a->argv[a->argc++] = (char *)value;
}

static void add_num(struct child_argv *a, const char *flag, uint64_t value)
{
    char *num = a->nums[a->nnums++];

    snprintf(num, CHILD_NUM_LEN, "%" PRIu64, value);
    add_arg(a, flag, num);
}

/* Rebuilt from the parsed options rather than copied from our argv, which
 * holds --np, an option a child must not see. */
static void build_child_argv(const struct bench_opts *o, const char *master,
                             struct child_argv *a)
{
    a->argc = 0;
    a->nnums = 0;
    a->argv[a->argc++] = (char *)o->argv0;
    add_num(a, "-b", o->minbytes);
    add_num(a, "-e", o->maxbytes);
    add_num(a, "-f", o->stepfactor);
    add_num(a, "-n", o->iters);
    add_num(a, "-w", o->warmup);
    add_num(a, "-c", o->check);
    add_num(a, "-I", o->inplace);
    add_arg(a, "-d", dtypes[o->dtype].alias);
    add_arg(a, "-o", op_names[o->op]);
    add_arg(a, "--coll", bench_coll_names[o->coll]);
    add_arg(a, "--master", master);
    add_num(a, "--world", o->np);
    if (o->group_set)
        add_num(a, "--group", o->group);
    if (o->timeout_ms != 0)
        add_num(a, "--timeout-ms", o->timeout_ms);
    if (o->inflight != 1)
        add_num(a, "--inflight", o->inflight);
    if (o->device)
        a->argv[a->argc++] = (char *)"--device";
    if (o->out)
        add_arg(a, "--out", o->out);
    a->argv[a->argc] = NULL;
}

/* --hosts H: rank process i of N on 127.0.0.(1 + i H / N), so the master
 * sees H hosts of N / H ranks each (all of 127.0.0.0/8 is loopback on
 * Linux): what the hierarchical all-reduce needs, on one box. Spawned one
 * by one, each with its own --p2p-host. */
static int spawn_hosts(const struct bench_opts *o, struct child_argv *child, pid_t *pids)
{
    char host[CHILD_NUM_LEN];
    int at = child->argc;

    for (uint64_t i = 0; i < o->np; i++) {
        snprintf(host, sizeof host, "127.0.0.%" PRIu64, 1 + i * o->hosts / o->np);
        child->argc = at;
        add_arg(child, "--p2p-host", host);
        child->argv[child->argc] = NULL;
        if (tool_spawn("eccl-bench", "/proc/self/exe", child->argv, 0, pids + i, 1) != 0) {
            for (uint64_t j = 0; j < i; j++)
                kill(pids[j], SIGKILL);
            tool_reap("eccl-bench", pids, i, 0, 0, NULL);
            return -1;
        }
    }
    return 0;
}

static int launch_local(const struct bench_opts *o)
{
    eccl_master *master = NULL;
    char addr[256];
    struct child_argv child;
    pid_t *pids = NULL;
    int status = EXIT_FAILURE;
    struct cuda_api cuda;

    /* One clear error here rather than one per rank. The ranks exec a fresh
     * image, so the runtime this process started does not leak into them. */
    if (o->device && cuda_load(&cuda))
        return EXIT_FAILURE;
    /* The job's secret, made up here unless set: the ranks inherit it. */
    if (eccl_failed(eccl_auth_job_secret(), "making the job's secret") ||
        eccl_failed(eccl_master_create("127.0.0.1:0", &master), "creating the master"))
        return EXIT_FAILURE;
    if (eccl_failed(eccl_master_run(master), "starting the master") ||
        eccl_failed(eccl_master_address(master, addr, sizeof addr), "reading the master address"))
        goto out;
    pids = calloc(o->np, sizeof *pids);
    if (pids == NULL) {
        eccl_failed(ECCL_ERR_NO_MEMORY, "allocating %" PRIu64 " process ids", o->np);
        goto out;
    }
    build_child_argv(o, addr, &child);
    if ((o->hosts ? spawn_hosts(o, &child, pids)
                  : tool_spawn("eccl-bench", "/proc/self/exe", child.argv, 0, pids, o->np)) == 0 &&
        tool_reap("eccl-bench", pids, o->np, 0, 0, NULL) == 0)
        status = EXIT_SUCCESS;
out:
    free(pids);
    if (eccl_failed(eccl_master_stop(master), "stopping the master"))
        status = EXIT_FAILURE;
    eccl_master_destroy(master);
    return status;
}

int main(int argc, char **argv)
{
    struct bench_opts opts;
    int status = parse_args(argc, argv, &opts);

    if (status >= 0)
        return status;
    /* A peer that dies mid-transfer must surface as an eccl error, not end
     * this process with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    return opts.np != 0 ? launch_local(&opts) : run_rank(&opts);
}
