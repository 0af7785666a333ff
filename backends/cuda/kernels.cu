/* The CUDA plugin's kernels (kernels.h): reductions, AVG's divide, the
 * shared-state hashes and the quantiser, bit-identical to core/ because the
 * per-element code IS core's: coll/reduce_elem.h, state/hash_core.h,
 * quant/quant_elem.h and util/half.h are C headers whose helpers are
 * __host__ __device__ under nvcc (util/hd.h).
 *
 * ---- one body, two runners -------------------------------------------------
 * Every kernel takes ONE argument, a plain struct K::Args, by value. Its body
 * is written as __host__ __device__ functions of (args, thread index, thread
 * count) plus, where threads cooperate, explicit phases. From one K:
 *   - `extern "C" __global__ void name(K::Args)` runs K::dev on the GPU;
 *   - `extern "C" eccl_twin_task *name_twin(void **args)` (twin.h) copies the
 *     Args at launch and later runs K::twin, which executes the same phases
 *     for every block and thread of the grid, in order, on one CPU thread,
 *     after mapping every pointer of Args through the mock's ptr().
 * Three kernel shapes cover everything:
 *   - Elementwise: each thread runs K::thread(a, t, nt) (a grid-stride loop).
 *     The twin calls it for t = 0..nt-1; threads touch disjoint elements, so
 *     running them one after another is the same computation.
 *   - Block reduce (R): phase 1 every thread computes R::thread(a, t, nt)
 *     into shared memory; phase 2 an ORDERED tree (stride s = 1, 2, 4, ...:
 *     slot t absorbs slot t + s, so partials combine left to right and a
 *     non-commutative combine like CRC's stays correct); phase 3 thread 0
 *     writes. The twin keeps a shared array per block and runs the same three
 *     phases with the same tree, so it is the same algorithm, not merely an
 *     equivalent one (it would expose a tree that depended on commutativity).
 *   - The SIMPLE hash's segment kernel: groups of 16 threads (one per lane)
 *     each own a 64 KiB segment; phase 1 each lane runs its chain into
 *     shared memory, phase 2 the group's lane 0 folds the 16 states with
 *     core's eccl_hs_fold_lanes. The twin runs the 16 lanes, then the fold,
 *     per group.
 * Launches are 1-D with blockDim.x == ECCL_K_BLOCK (the reductions' trees
 * and the hash's groups assume it); a twin refuses anything else.
 *
 * ---- NaN bits ----------------------------------------------------------------
 * Float SUM/PROD/DIV on a NaN, or making one (inf - inf), give the hardware's
 * NaN bits, which reduce.h leaves unspecified: x86 (and hence the twins)
 * keeps the first NaN operand's payload, an NVIDIA GPU returns 0x7FFFFFFF.
 * Peers still agree (each element is computed once and forwarded); tests
 * compare such results as "a NaN" (tests/kat_kernels.h). Everything else --
 * MIN/MAX (selects), integer ops, every non-NaN float result, hashes, codes
 * and dequantised values -- is bit-identical. */
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "twin.h"

#include "coll/reduce_elem.h"
#include "quant/quant_elem.h"
#include "state/crc32c_table.h"
#include "state/hash_core.h"
#include "util/half.h"

#define ECCL_K_BLOCK 256u
/* At most 132 SMs (H100 SXM) x 8 resident blocks of 256 threads: enough to
 * fill the GPU; larger inputs loop (grid-stride) instead of launching more
 * blocks that would only queue. */
#define ECCL_K_MAX_BLOCKS (132u * 8u)
/* CRC-32C: bytes per per-thread chunk; the fold combines ceil(n / 4096)
 * chunk CRCs. */
#define ECCL_K_CRC_CHUNK 4096u

#define HDM __host__ __device__ __forceinline__
#define TWIN_EXPORT extern "C" __attribute__((visibility("default")))

/* ---- twin plumbing ------------------------------------------------------------ */

/* Maps dev[0..bytes) to the mock's bytes; false if any of it is outside one
 * allocation (first and last byte must map contiguously). An empty range
 * maps to NULL: the kernel reads none of it, and its address may be one past
 * the end of an allocation, which maps to nothing. */
static bool map_range(eccl_twin_ptr_fn ptr, void *ctx, const void *dev, size_t bytes, void **out)
{
    if (bytes == 0) {
        *out = NULL;
        return true;
    }
    if (dev == NULL)
        return false;
    char *h = (char *)ptr(ctx, dev);
    if (h == NULL)
        return false;
    if (bytes > 1 && (char *)ptr(ctx, (const char *)dev + bytes - 1) != h + bytes - 1)
        return false;
    *out = h;
    return true;
}

template <class P> static bool map_ptr(eccl_twin_ptr_fn ptr, void *ctx, P *&p, size_t bytes)
{
    void *h;
    if (!map_range(ptr, ctx, (const void *)p, bytes, &h))
        return false;
    p = (P *)h;
    return true;
}

template <class K> struct twin_task {
    eccl_twin_task base;
    typename K::Args a;
};

template <class K>
static int twin_run(eccl_twin_task *t, eccl_twin_dim grid, eccl_twin_dim block, size_t shared_mem,
                    eccl_twin_ptr_fn ptr, void *ctx)
{
    (void)shared_mem;
    twin_task<K> *tt = (twin_task<K> *)t;
    typename K::Args a = tt->a;
    free(tt);
    if (grid.y != 1 || grid.z != 1 || block.y != 1 || block.z != 1 || block.x != ECCL_K_BLOCK ||
        grid.x == 0)
        return -1;
    if (!a.map(ptr, ctx))
        return -1;
    K::twin(a, grid.x, block.x);
    return 0;
}

template <class K> static void twin_discard(eccl_twin_task *t)
{
    free(t);
}

template <class K> static eccl_twin_task *twin_bind(void **args)
{
    twin_task<K> *t = (twin_task<K> *)malloc(sizeof *t);
    if (t == NULL)
        return NULL;
    t->base.run = twin_run<K>;
    t->base.discard = twin_discard<K>;
    memcpy(&t->a, args[0], sizeof t->a);
    return &t->base;
}

#define ECCL_KERNEL(name, K)                                                                      \
    extern "C" __global__ void __launch_bounds__(ECCL_K_BLOCK) name(K::Args a) { K::dev(a); }    \
    TWIN_EXPORT eccl_twin_task *name##_twin(void **args) { return twin_bind<K>(args); }

/* ---- the three shapes ---------------------------------------------------------- */

template <class K> struct elementwise {
    typedef typename K::Args Args;
    static __device__ void dev(const Args &a)
    {
        K::thread(a, (size_t)blockIdx.x * blockDim.x + threadIdx.x, (size_t)gridDim.x * blockDim.x);
    }
    static void twin(const Args &a, unsigned grid, unsigned block)
    {
        size_t nt = (size_t)grid * block;
        for (size_t t = 0; t < nt; t++)
            K::thread(a, t, nt);
    }
};

template <class R> struct block_reduce {
    typedef typename R::Args Args;
    typedef typename R::T T;
    static __device__ void dev(const Args &a)
    {
        __shared__ T sh[ECCL_K_BLOCK];
        unsigned t = threadIdx.x;
        sh[t] = R::thread(a, (size_t)blockIdx.x * blockDim.x + t, (size_t)gridDim.x * blockDim.x);
        __syncthreads();
        for (unsigned s = 1; s < ECCL_K_BLOCK; s *= 2) {
            if (t % (2 * s) == 0)
                sh[t] = R::combine(sh[t], sh[t + s]);
            __syncthreads();
        }
        if (t == 0)
            R::write(a, blockIdx.x, sh[0]);
    }
    static void twin(const Args &a, unsigned grid, unsigned block)
    {
        T sh[ECCL_K_BLOCK];
        size_t nt = (size_t)grid * block;
        for (unsigned b = 0; b < grid; b++) {
            for (unsigned t = 0; t < ECCL_K_BLOCK; t++)
                sh[t] = R::thread(a, (size_t)b * block + t, nt);
            for (unsigned s = 1; s < ECCL_K_BLOCK; s *= 2)
                for (unsigned t = 0; t < ECCL_K_BLOCK; t += 2 * s)
                    sh[t] = R::combine(sh[t], sh[t + s]);
            R::write(a, b, sh[0]);
        }
    }
};

static unsigned blocks_for(size_t threads_wanted)
{
    size_t b = (threads_wanted + ECCL_K_BLOCK - 1) / ECCL_K_BLOCK;
    if (b < 1)
        b = 1;
    return b > ECCL_K_MAX_BLOCKS ? ECCL_K_MAX_BLOCKS : (unsigned)b;
}

/* ---- reduce and scale_div --------------------------------------------------------
 * 16-byte vector loads and stores where both pointers are 16-byte aligned
 * (the usual case: cudaMalloc'd buffers, chunk offsets that are multiples of
 * 16), the element helper applied to each lane of the vector; then the tail
 * (or everything, unaligned) one element at a time. Which elements take
 * which path changes no result: each element is computed by the same
 * helper either way. */

union vec16 {
    uint4 q;
    uint8_t b[16];
};

HDM void load16(vec16 *v, const void *p)
{
#ifdef __CUDA_ARCH__
    v->q = *(const uint4 *)p;
#else
    memcpy(v->b, p, 16);
#endif
}

HDM void store16(void *p, const vec16 *v)
{
#ifdef __CUDA_ARCH__
    *(uint4 *)p = v->q;
#else
    memcpy(p, v->b, 16);
#endif
}

struct reduce_args {
    void *dst;
    const void *src;
    size_t n;
    bool map(eccl_twin_ptr_fn ptr, void *ctx, size_t esize)
    {
        return map_ptr(ptr, ctx, dst, n * esize) && map_ptr(ptr, ctx, src, n * esize);
    }
};

template <class Op> struct reduce_k {
    typedef typename Op::T T;
    struct Args : reduce_args {
        bool map(eccl_twin_ptr_fn ptr, void *ctx) { return reduce_args::map(ptr, ctx, sizeof(T)); }
    };
    static HDM void thread(const Args &a, size_t t, size_t nt)
    {
        T *d = (T *)a.dst;
        const T *s = (const T *)a.src;
        const size_t V = 16 / sizeof(T);
        size_t nv = ((((uintptr_t)d | (uintptr_t)s) & 15) == 0) ? a.n / V : 0;
        for (size_t v = t; v < nv; v += nt) {
            vec16 x, y;
            T ex[16 / sizeof(T)], ey[16 / sizeof(T)];
            load16(&x, d + v * V);
            load16(&y, s + v * V);
            memcpy(ex, x.b, 16);
            memcpy(ey, y.b, 16);
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
            for (size_t k = 0; k < V; k++)
                ex[k] = Op::apply(ex[k], ey[k]);
            memcpy(x.b, ex, 16);
            store16(d + v * V, &x);
        }
        for (size_t i = nv * V + t; i < a.n; i += nt)
            d[i] = Op::apply(d[i], s[i]);
    }
};

struct scale_args {
    void *x;
    size_t n;
    uint32_t divisor;
};

template <class Op> struct scale_k {
    typedef typename Op::T T;
    struct Args : scale_args {
        bool map(eccl_twin_ptr_fn ptr, void *ctx) { return map_ptr(ptr, ctx, x, n * sizeof(T)); }
    };
    static HDM void thread(const Args &a, size_t t, size_t nt)
    {
        T *x = (T *)a.x;
        for (size_t i = t; i < a.n; i += nt)
            x[i] = Op::div(x[i], a.divisor);
    }
};

/* Op structs: the element helper of reduce_elem.h for one (dtype, op). */
#define RED_OP(name, Ty, fn)                                                                      \
    struct op_##name {                                                                            \
        typedef Ty T;                                                                             \
        static HDM Ty apply(Ty a, Ty b) { return fn(a, b); }                                      \
    };                                                                                            \
    typedef elementwise<reduce_k<op_##name> > K_reduce_##name;                                    \
    ECCL_KERNEL(eccl_k_reduce_##name, K_reduce_##name)

#define DIV_OP(name, Ty, fn)                                                                      \
    struct dop_##name {                                                                           \
        typedef Ty T;                                                                             \
        static HDM Ty div(Ty a, uint32_t d) { return fn(a, d); }                                  \
    };                                                                                            \
    typedef elementwise<scale_k<dop_##name> > K_scale_##name;                                     \
    ECCL_KERNEL(eccl_k_scale_div_##name, K_scale_##name)

/* (dtype suffix, storage type for SUM/PROD, its width helper, type for
 * MIN/MAX/DIV). Signed integers SUM/PROD in their unsigned type, as reduce.c
 * does. */
#define ECCL_K_INT_TYPES(X)                                                                       \
    X(i8, uint8_t, w8, int8_t)                                                                    \
    X(u8, uint8_t, w8, uint8_t)                                                                   \
    X(i16, uint16_t, w16, int16_t)                                                                \
    X(u16, uint16_t, w16, uint16_t)                                                               \
    X(i32, uint32_t, w32, int32_t)                                                                \
    X(u32, uint32_t, w32, uint32_t)                                                               \
    X(i64, uint64_t, w64, int64_t)                                                                \
    X(u64, uint64_t, w64, uint64_t)
#define ECCL_K_FLOAT_TYPES(X)                                                                     \
    X(f16, uint16_t, f16, uint16_t)                                                               \
    X(bf16, uint16_t, bf16, uint16_t)                                                             \
    X(f32, float, f32, float)                                                                     \
    X(f64, double, f64, double)

#define X(sfx, U, W, T)                                                                           \
    RED_OP(sum_##sfx, U, eccl_re_sum_##W)                                                         \
    RED_OP(prod_##sfx, U, eccl_re_prod_##W)                                                       \
    RED_OP(min_##sfx, T, eccl_re_min_##sfx)                                                       \
    RED_OP(max_##sfx, T, eccl_re_max_##sfx)                                                       \
    DIV_OP(sfx, T, eccl_re_div_##sfx)
ECCL_K_INT_TYPES(X)
ECCL_K_FLOAT_TYPES(X)
#undef X

#define ROW(op)                                                                                   \
    {                                                                                             \
        (const void *)eccl_k_reduce_##op##_i8, (const void *)eccl_k_reduce_##op##_u8,             \
            (const void *)eccl_k_reduce_##op##_i16, (const void *)eccl_k_reduce_##op##_u16,       \
            (const void *)eccl_k_reduce_##op##_i32, (const void *)eccl_k_reduce_##op##_u32,       \
            (const void *)eccl_k_reduce_##op##_i64, (const void *)eccl_k_reduce_##op##_u64,       \
            (const void *)eccl_k_reduce_##op##_f16, (const void *)eccl_k_reduce_##op##_bf16,      \
            (const void *)eccl_k_reduce_##op##_f32, (const void *)eccl_k_reduce_##op##_f64,       \
    }

/* ---- ECCL_HASH_SIMPLE -------------------------------------------------------------- */

/* Word j of the input (zero-padded past n). On the GPU an aligned input is
 * read with one 8-byte load: NVIDIA GPUs are little-endian, so it is the
 * same value as core's byte-assembled eccl_load_le64. */
HDM uint64_t hs_word(const uint8_t *p, uint64_t n, uint64_t j, bool aligned)
{
    uint64_t off = j * 8;
    if (off + 8 <= n) {
#ifdef __CUDA_ARCH__
        if (aligned)
            return __ldg((const unsigned long long *)(p + off));
#else
        (void)aligned;
#endif
        return eccl_load_le64(p + off);
    }
    uint8_t b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (uint64_t k = 0; off + k < n; k++)
        b[k] = p[off + k];
    return eccl_load_le64(b);
}

/* Lane l's chain over segment g (hash.h, steps 1-3). */
HDM uint64_t hs_lane(const uint8_t *p, uint64_t n, uint64_t g, unsigned l, bool aligned)
{
    uint64_t words = (n + 7) / 8, base = g * ECCL_HS_SEG_WORDS;
    uint64_t segw = words - base < ECCL_HS_SEG_WORDS ? words - base : ECCL_HS_SEG_WORDS;
    uint64_t h = eccl_hs_lane_seed(l);
    for (uint64_t j = l; j < segw; j += ECCL_HS_LANES)
        h = eccl_hs_lane_step(h, hs_word(p, n, base + j, aligned));
    return h;
}

struct hs_seg_k {
    struct Args {
        const uint8_t *p;
        uint64_t n, nseg;
        uint64_t *terms; /* [nseg] */
        bool map(eccl_twin_ptr_fn ptr, void *ctx)
        {
            return map_ptr(ptr, ctx, p, n) && map_ptr(ptr, ctx, terms, nseg * 8);
        }
    };
    static const unsigned GROUPS = ECCL_K_BLOCK / ECCL_HS_LANES;
    static __device__ void dev(const Args &a)
    {
        __shared__ uint64_t sh[ECCL_K_BLOCK];
        unsigned grp = threadIdx.x / ECCL_HS_LANES, l = threadIdx.x % ECCL_HS_LANES;
        /* The group's 16 lanes: one half of a warp. The two groups of a warp
         * may run different numbers of segments, so each syncs only its own. */
        unsigned mask = 0xffffu << (threadIdx.x & 16u);
        bool aligned = ((uintptr_t)a.p & 7) == 0;
        for (uint64_t g = (uint64_t)blockIdx.x * GROUPS + grp; g < a.nseg;
             g += (uint64_t)gridDim.x * GROUPS) {
            sh[threadIdx.x] = hs_lane(a.p, a.n, g, l, aligned);
            __syncwarp(mask);
            if (l == 0)
                a.terms[g] = eccl_hs_segment_term(eccl_hs_fold_lanes(&sh[grp * ECCL_HS_LANES]), g);
            __syncwarp(mask);
        }
    }
    static void twin(const Args &a, unsigned grid, unsigned block)
    {
        (void)block;
        uint64_t sh[ECCL_K_BLOCK];
        bool aligned = ((uintptr_t)a.p & 7) == 0;
        for (unsigned b = 0; b < grid; b++)
            for (unsigned grp = 0; grp < GROUPS; grp++)
                for (uint64_t g = (uint64_t)b * GROUPS + grp; g < a.nseg; g += (uint64_t)grid * GROUPS) {
                    for (unsigned l = 0; l < ECCL_HS_LANES; l++)
                        sh[grp * ECCL_HS_LANES + l] = hs_lane(a.p, a.n, g, l, aligned);
                    a.terms[g] = eccl_hs_segment_term(eccl_hs_fold_lanes(&sh[grp * ECCL_HS_LANES]), g);
                }
    }
};
ECCL_KERNEL(eccl_k_hash_simple_segments, hs_seg_k)

/* One block: the sum of the segment terms (mod 2^64, any order), then the
 * final mix with the length. */
struct hs_sum_r {
    typedef uint64_t T;
    struct Args {
        const uint64_t *terms;
        uint64_t nseg, n;
        uint64_t *out;
        bool map(eccl_twin_ptr_fn ptr, void *ctx)
        {
            return map_ptr(ptr, ctx, terms, nseg * 8) && map_ptr(ptr, ctx, out, 8);
        }
    };
    static HDM T thread(const Args &a, size_t t, size_t nt)
    {
        uint64_t s = 0;
        for (size_t i = t; i < a.nseg; i += nt)
            s += a.terms[i];
        return s;
    }
    static HDM T combine(T x, T y) { return x + y; }
    static HDM void write(const Args &a, unsigned block, T acc)
    {
        (void)block;
        a.out[0] = eccl_hs_finish(acc, a.n);
    }
};
typedef block_reduce<hs_sum_r> K_hs_sum;
ECCL_KERNEL(eccl_k_hash_simple_sum, K_hs_sum)

/* ---- ECCL_HASH_CRC32C ----------------------------------------------------------------
 * Each thread CRCs whole 4 KiB chunks (core's slice-by-8 loop, the table in
 * global memory: read-only, cached), then one block combines the chunk CRCs
 * in order with the GF(2) shift (hash_core.h). */
__device__ const uint32_t eccl_k_crc32c_dev_table[8][256] = ECCL_CRC32C_TABLE_INIT;
#ifndef __CUDA_ARCH__ /* the twins' copy; the device pass never sees it */
static const uint32_t eccl_k_crc32c_host_table[8][256] = ECCL_CRC32C_TABLE_INIT;
#endif

HDM const uint32_t (*crc_table())[256]
{
#ifdef __CUDA_ARCH__
    return eccl_k_crc32c_dev_table;
#else
    return eccl_k_crc32c_host_table;
#endif
}

struct crc_chunks_k {
    struct Args {
        const uint8_t *p;
        uint64_t n, nch;
        uint32_t *crcs; /* [nch] */
        bool map(eccl_twin_ptr_fn ptr, void *ctx)
        {
            return map_ptr(ptr, ctx, p, n) && map_ptr(ptr, ctx, crcs, nch * 4);
        }
    };
    static HDM void thread(const Args &a, size_t t, size_t nt)
    {
        for (size_t c = t; c < a.nch; c += nt) {
            uint64_t off = (uint64_t)c * ECCL_K_CRC_CHUNK;
            uint64_t len = a.n - off < ECCL_K_CRC_CHUNK ? a.n - off : ECCL_K_CRC_CHUNK;
            a.crcs[c] = ~eccl_crc32c_raw(0xffffffffu, a.p + off, (size_t)len, crc_table());
        }
    }
};
typedef elementwise<crc_chunks_k> K_crc_chunks;
ECCL_KERNEL(eccl_k_crc32c_chunks, K_crc_chunks)

struct crc_part {
    uint32_t crc;
    uint64_t len;
};

struct crc_fold_r {
    typedef crc_part T;
    struct Args {
        const uint32_t *crcs;
        uint64_t nch, n;
        uint32_t shift_chunk; /* eccl_crc32c_x8n(ECCL_K_CRC_CHUNK) */
        uint64_t *out;
        bool map(eccl_twin_ptr_fn ptr, void *ctx)
        {
            return map_ptr(ptr, ctx, crcs, nch * 4) && map_ptr(ptr, ctx, out, 8);
        }
    };
    /* Thread t folds a contiguous run of chunks, so the ordered tree then
     * joins the runs in input order. */
    static HDM T thread(const Args &a, size_t t, size_t nt)
    {
        size_t per = (size_t)((a.nch + nt - 1) / nt);
        uint64_t lo = (uint64_t)t * per, hi = lo + per < a.nch ? lo + per : a.nch;
        T r = {0, 0};
        for (uint64_t c = lo; c < hi; c++) {
            uint64_t off = c * ECCL_K_CRC_CHUNK;
            uint64_t len = a.n - off < ECCL_K_CRC_CHUNK ? a.n - off : ECCL_K_CRC_CHUNK;
            uint32_t shift = len == ECCL_K_CRC_CHUNK ? a.shift_chunk : eccl_crc32c_x8n(len);
            r.crc = eccl_crc32c_combine_shift(r.crc, a.crcs[c], shift);
            r.len += len;
        }
        return r;
    }
    static HDM T combine(T x, T y)
    {
        T r;
        r.crc = eccl_crc32c_combine_shift(x.crc, y.crc, eccl_crc32c_x8n(y.len));
        r.len = x.len + y.len;
        return r;
    }
    static HDM void write(const Args &a, unsigned block, T r)
    {
        (void)block;
        a.out[0] = r.crc;
    }
};
typedef block_reduce<crc_fold_r> K_crc_fold;
ECCL_KERNEL(eccl_k_crc32c_fold, K_crc_fold)

/* ---- quantiser -------------------------------------------------------------------------
 * The scan (min, max, NaN/inf flag) is a block reduce to per-block partials,
 * then a one-block fold of the partials; the host derives the metadata from
 * the result with the CPU's own eccl_quant_meta_from_range, and the codes
 * kernel applies quant_elem.h per element. quant_elem.h explains why the
 * scan's result does not depend on the order. */
struct q_scan {
    float mn, mx;
    uint32_t bad;
};

HDM q_scan q_scan_empty()
{
    q_scan s;
    s.mn = eccl_f32_from_bits(0x7f800000u);
    s.mx = eccl_f32_from_bits(0xff800000u);
    s.bad = 0;
    return s;
}

/* The scan step's selects applied to partials (not eccl_q_scan_step itself:
 * an empty partial's +inf/-inf must not raise the flag). */
HDM q_scan q_scan_combine(q_scan x, q_scan y)
{
    x.mn = y.mn < x.mn ? y.mn : x.mn;
    x.mx = y.mx > x.mx ? y.mx : x.mx;
    x.bad |= y.bad;
    return x;
}

struct q_scan_r {
    typedef q_scan T;
    struct Args {
        const void *src;
        uint64_t n;
        unsigned dtype;
        q_scan *partials; /* [gridDim.x] */
        unsigned nparts;
        bool map(eccl_twin_ptr_fn ptr, void *ctx)
        {
            return map_ptr(ptr, ctx, src, n * eccl_dtype_size((eccl_dtype)dtype)) &&
                   map_ptr(ptr, ctx, partials, nparts * sizeof(q_scan));
        }
    };
    static HDM T thread(const Args &a, size_t t, size_t nt)
    {
        q_scan s = q_scan_empty();
        for (size_t i = t; i < a.n; i += nt)
            eccl_q_scan_step(eccl_q_load(a.src, i, a.dtype), &s.mn, &s.mx, &s.bad);
        return s;
    }
    static HDM T combine(T x, T y) { return q_scan_combine(x, y); }
    static HDM void write(const Args &a, unsigned block, T s) { a.partials[block] = s; }
};
typedef block_reduce<q_scan_r> K_q_scan;
ECCL_KERNEL(eccl_k_quant_scan, K_q_scan)

struct q_fold_r {
    typedef q_scan T;
    struct Args {
        const q_scan *partials;
        unsigned nparts;
        q_scan *out;
        bool map(eccl_twin_ptr_fn ptr, void *ctx)
        {
            return map_ptr(ptr, ctx, partials, nparts * sizeof(q_scan)) &&
                   map_ptr(ptr, ctx, out, sizeof(q_scan));
        }
    };
    static HDM T thread(const Args &a, size_t t, size_t nt)
    {
        q_scan s = q_scan_empty();
        for (size_t i = t; i < a.nparts; i += nt)
            s = q_scan_combine(s, a.partials[i]);
        return s;
    }
    static HDM T combine(T x, T y) { return q_scan_combine(x, y); }
    static HDM void write(const Args &a, unsigned block, T s)
    {
        (void)block;
        a.out[0] = s;
    }
};
typedef block_reduce<q_fold_r> K_q_fold;
ECCL_KERNEL(eccl_k_quant_scan_fold, K_q_fold)

struct q_code_k {
    struct Args {
        const void *src;
        uint64_t n;
        unsigned dtype, type; /* eccl_quant_type */
        float mn, mx, s;      /* MINMAX: min, max, step; AFFINE: s = scale, mn = zp + 0.5 */
        uint8_t *codes;
        bool map(eccl_twin_ptr_fn ptr, void *ctx)
        {
            return map_ptr(ptr, ctx, src, n * eccl_dtype_size((eccl_dtype)dtype)) &&
                   map_ptr(ptr, ctx, codes, n);
        }
    };
    static HDM void thread(const Args &a, size_t t, size_t nt)
    {
        if (a.type == ECCL_QUANT_MINMAX_U8)
            for (size_t i = t; i < a.n; i += nt)
                a.codes[i] = eccl_q_minmax_code(eccl_q_load(a.src, i, a.dtype), a.mn, a.mx, a.s);
        else
            for (size_t i = t; i < a.n; i += nt)
                a.codes[i] = eccl_q_affine_code(eccl_q_load(a.src, i, a.dtype), a.s, a.mn);
    }
};
typedef elementwise<q_code_k> K_q_code;
ECCL_KERNEL(eccl_k_quant_codes, K_q_code)

struct q_value_k {
    struct Args {
        const uint8_t *codes;
        uint64_t n;
        unsigned dtype, type;
        float mn, mx, s; /* MINMAX: min, max, step; AFFINE: s = scale, zp */
        int32_t zp;
        void *dst;
        bool map(eccl_twin_ptr_fn ptr, void *ctx)
        {
            return map_ptr(ptr, ctx, codes, n) &&
                   map_ptr(ptr, ctx, dst, n * eccl_dtype_size((eccl_dtype)dtype));
        }
    };
    static HDM void thread(const Args &a, size_t t, size_t nt)
    {
        if (a.type == ECCL_QUANT_MINMAX_U8)
            for (size_t i = t; i < a.n; i += nt)
                eccl_q_store(a.dst, i, a.dtype, eccl_q_minmax_value(a.codes[i], a.mn, a.mx, a.s));
        else
            for (size_t i = t; i < a.n; i += nt)
                eccl_q_store(a.dst, i, a.dtype, eccl_q_affine_value(a.codes[i], a.zp, a.s));
    }
};
typedef elementwise<q_value_k> K_q_value;
ECCL_KERNEL(eccl_k_quant_values, K_q_value)

/* ---- launchers ----------------------------------------------------------------------- */

static eccl_result launch(const void *fn, unsigned grid, void *args, cudaStream_t stream)
{
    void *argv[1] = {args};
    cudaError_t e = cudaLaunchKernel(fn, dim3(grid), dim3(ECCL_K_BLOCK), argv, 0, stream);
    cudaError_t last = cudaGetLastError(); /* clears a launch error, reports a sticky one */
    return e == cudaSuccess && last == cudaSuccess ? ECCL_OK : ECCL_ERR_DEVICE;
}

/* Stream-ordered scratch; falls back to cudaMalloc where the pool allocator
 * is not supported. *async says which free to use. */
static eccl_result scratch_alloc(void **p, size_t bytes, cudaStream_t stream, bool *async)
{
    cudaError_t e = cudaMallocAsync(p, bytes, stream);
    if (e == cudaSuccess) {
        *async = true;
        return ECCL_OK;
    }
    (void)cudaGetLastError();
    if (e == cudaErrorMemoryAllocation)
        return ECCL_ERR_NO_MEMORY;
    e = cudaMalloc(p, bytes);
    if (e == cudaSuccess) {
        *async = false;
        return ECCL_OK;
    }
    (void)cudaGetLastError();
    return e == cudaErrorMemoryAllocation ? ECCL_ERR_NO_MEMORY : ECCL_ERR_DEVICE;
}

static void scratch_free(void *p, cudaStream_t stream, bool async)
{
    if (p == NULL)
        return;
    if (async)
        (void)cudaFreeAsync(p, stream);
    else
        (void)cudaFree(p);
}

/* Waits for the stream; ECCL_ERR_DEVICE if anything on it failed. */
static eccl_result sync(cudaStream_t stream)
{
    return cudaStreamSynchronize(stream) == cudaSuccess ? ECCL_OK : ECCL_ERR_DEVICE;
}

extern "C" eccl_result eccl_cuda_reduce(void *dst, const void *src, size_t count, eccl_dtype dtype,
                                        eccl_op op, cudaStream_t stream)
{
    static const void *const sum_row[ECCL_DTYPE_COUNT] = ROW(sum);
    static const void *const prod_row[ECCL_DTYPE_COUNT] = ROW(prod);
    static const void *const min_row[ECCL_DTYPE_COUNT] = ROW(min);
    static const void *const max_row[ECCL_DTYPE_COUNT] = ROW(max);
    const void *fn;

    if ((unsigned)dtype >= ECCL_DTYPE_COUNT)
        return ECCL_ERR_INVALID_ARG;
    switch (op) {
    case ECCL_SUM:
    case ECCL_AVG: fn = sum_row[dtype]; break;
    case ECCL_PROD: fn = prod_row[dtype]; break;
    case ECCL_MIN: fn = min_row[dtype]; break;
    case ECCL_MAX: fn = max_row[dtype]; break;
    default: return ECCL_ERR_INVALID_ARG;
    }
    if (count == 0)
        return ECCL_OK;
    if (dst == NULL || src == NULL)
        return ECCL_ERR_INVALID_ARG;
    reduce_args a;
    a.dst = dst;
    a.src = src;
    a.n = count;
    /* One thread per 16 bytes. */
    return launch(fn, blocks_for((count * eccl_dtype_size(dtype) + 15) / 16), &a, stream);
}

extern "C" eccl_result eccl_cuda_scale_div(void *x, size_t count, eccl_dtype dtype, uint32_t divisor,
                                           cudaStream_t stream)
{
    static const void *const div_row[ECCL_DTYPE_COUNT] = {
        (const void *)eccl_k_scale_div_i8,   (const void *)eccl_k_scale_div_u8,
        (const void *)eccl_k_scale_div_i16,  (const void *)eccl_k_scale_div_u16,
        (const void *)eccl_k_scale_div_i32,  (const void *)eccl_k_scale_div_u32,
        (const void *)eccl_k_scale_div_i64,  (const void *)eccl_k_scale_div_u64,
        (const void *)eccl_k_scale_div_f16,  (const void *)eccl_k_scale_div_bf16,
        (const void *)eccl_k_scale_div_f32,  (const void *)eccl_k_scale_div_f64,
    };
    if ((unsigned)dtype >= ECCL_DTYPE_COUNT)
        return ECCL_ERR_INVALID_ARG;
    /* divisor 0 and 1 leave x untouched (reduce.h). */
    if (divisor <= 1 || count == 0)
        return ECCL_OK;
    if (x == NULL)
        return ECCL_ERR_INVALID_ARG;
    scale_args a;
    a.x = x;
    a.n = count;
    a.divisor = divisor;
    return launch(div_row[dtype], blocks_for(count), &a, stream);
}

extern "C" eccl_result eccl_cuda_hash(eccl_hash_type type, const void *p, size_t bytes, uint64_t *out,
                                      cudaStream_t stream)
{
    void *scratch = NULL;
    bool async = false;
    uint64_t host = 0;
    eccl_result r;

    if (out == NULL || (p == NULL && bytes > 0) ||
        (type != ECCL_HASH_SIMPLE && type != ECCL_HASH_CRC32C))
        return ECCL_ERR_INVALID_ARG;

    if (type == ECCL_HASH_SIMPLE) {
        uint64_t words = ((uint64_t)bytes + 7) / 8;
        uint64_t nseg = (words + ECCL_HS_SEG_WORDS - 1) / ECCL_HS_SEG_WORDS;
        r = scratch_alloc(&scratch, (nseg + 1) * 8, stream, &async);
        if (r != ECCL_OK)
            return r;
        uint64_t *outp = (uint64_t *)scratch, *terms = outp + 1;
        if (nseg > 0) {
            hs_seg_k::Args a;
            a.p = (const uint8_t *)p;
            a.n = bytes;
            a.nseg = nseg;
            a.terms = terms;
            r = launch((const void *)eccl_k_hash_simple_segments,
                       blocks_for(nseg * ECCL_HS_LANES), &a, stream);
        }
        if (r == ECCL_OK) {
            hs_sum_r::Args s;
            s.terms = terms;
            s.nseg = nseg;
            s.n = bytes;
            s.out = outp;
            r = launch((const void *)eccl_k_hash_simple_sum, 1, &s, stream);
        }
    } else {
        uint64_t nch = ((uint64_t)bytes + ECCL_K_CRC_CHUNK - 1) / ECCL_K_CRC_CHUNK;
        r = scratch_alloc(&scratch, 8 + nch * 4, stream, &async);
        if (r != ECCL_OK)
            return r;
        uint64_t *outp = (uint64_t *)scratch;
        uint32_t *crcs = (uint32_t *)(outp + 1);
        if (nch > 0) {
            crc_chunks_k::Args a;
            a.p = (const uint8_t *)p;
            a.n = bytes;
            a.nch = nch;
            a.crcs = crcs;
            r = launch((const void *)eccl_k_crc32c_chunks, blocks_for(nch), &a, stream);
        }
        if (r == ECCL_OK) {
            crc_fold_r::Args f;
            f.crcs = crcs;
            f.nch = nch;
            f.n = bytes;
            f.shift_chunk = eccl_crc32c_x8n(ECCL_K_CRC_CHUNK);
            f.out = outp;
            r = launch((const void *)eccl_k_crc32c_fold, 1, &f, stream);
        }
    }
    if (r == ECCL_OK && cudaMemcpyAsync(&host, scratch, 8, cudaMemcpyDeviceToHost, stream) != cudaSuccess)
        r = ECCL_ERR_DEVICE;
    scratch_free(scratch, stream, async);
    if (sync(stream) != ECCL_OK)
        r = ECCL_ERR_DEVICE;
    if (r == ECCL_OK)
        *out = host;
    return r;
}

extern "C" eccl_result eccl_cuda_quantize(eccl_quant_type type, eccl_dtype dtype, const void *src,
                                          size_t count, uint8_t *codes, eccl_quant_meta *meta,
                                          cudaStream_t stream)
{
    eccl_quant_meta m;
    q_scan host;
    void *scratch = NULL;
    bool async = false;
    eccl_result r;

    if (meta == NULL || (dtype != ECCL_F32 && dtype != ECCL_F16 && dtype != ECCL_BF16) ||
        (type != ECCL_QUANT_MINMAX_U8 && type != ECCL_QUANT_AFFINE_U8) ||
        (count > 0 && (src == NULL || codes == NULL)))
        return ECCL_ERR_INVALID_ARG;
    if (count == 0)
        return eccl_quant_meta_from_range(type, dtype, 0, 0.0f, 0.0f, 0, meta);

    unsigned grid = blocks_for(count);
    r = scratch_alloc(&scratch, (grid + 1) * sizeof(q_scan), stream, &async);
    if (r != ECCL_OK)
        return r;
    q_scan *outp = (q_scan *)scratch, *parts = outp + 1;
    q_scan_r::Args a;
    a.src = src;
    a.n = count;
    a.dtype = (unsigned)dtype;
    a.partials = parts;
    a.nparts = grid;
    r = launch((const void *)eccl_k_quant_scan, grid, &a, stream);
    if (r == ECCL_OK) {
        q_fold_r::Args f;
        f.partials = parts;
        f.nparts = grid;
        f.out = outp;
        r = launch((const void *)eccl_k_quant_scan_fold, 1, &f, stream);
    }
    if (r == ECCL_OK &&
        cudaMemcpyAsync(&host, outp, sizeof host, cudaMemcpyDeviceToHost, stream) != cudaSuccess)
        r = ECCL_ERR_DEVICE;
    scratch_free(scratch, stream, async);
    if (sync(stream) != ECCL_OK)
        r = ECCL_ERR_DEVICE;
    if (r != ECCL_OK)
        return r;

    /* The CPU's own metadata rules, refusals included (codes untouched). */
    r = eccl_quant_meta_from_range(type, dtype, count, host.mn, host.mx, host.bad, &m);
    if (r != ECCL_OK)
        return r;

    q_code_k::Args c;
    c.src = src;
    c.n = count;
    c.dtype = (unsigned)dtype;
    c.type = (unsigned)type;
    c.codes = codes;
    if (type == ECCL_QUANT_MINMAX_U8) {
        c.mn = m.min;
        c.mx = m.max;
        c.s = eccl_q_minmax_scale(m.min, m.max);
    } else {
        c.mn = (float)m.zero_point + 0.5f;
        c.mx = 0.0f;
        c.s = m.scale;
    }
    if (c.s == 0.0f)
        r = cudaMemsetAsync(codes, 0, count, stream) == cudaSuccess ? ECCL_OK : ECCL_ERR_DEVICE;
    else
        r = launch((const void *)eccl_k_quant_codes, blocks_for(count), &c, stream);
    if (sync(stream) != ECCL_OK)
        r = ECCL_ERR_DEVICE;
    if (r == ECCL_OK)
        *meta = m;
    return r;
}

extern "C" eccl_result eccl_cuda_dequantize(const eccl_quant_meta *meta, const uint8_t *codes,
                                            size_t count, void *dst, cudaStream_t stream)
{
    if (eccl_quant_meta_check(meta) != ECCL_OK || count != meta->count ||
        (count > 0 && (codes == NULL || dst == NULL)))
        return ECCL_ERR_INVALID_ARG;
    if (count == 0)
        return ECCL_OK;
    q_value_k::Args a;
    a.codes = codes;
    a.n = count;
    a.dtype = meta->dtype;
    a.type = meta->type;
    a.zp = meta->zero_point;
    if (meta->type == ECCL_QUANT_MINMAX_U8) {
        a.mn = meta->min;
        a.mx = meta->max;
        a.s = eccl_q_minmax_scale(meta->min, meta->max);
    } else {
        a.mn = a.mx = 0.0f;
        a.s = meta->scale;
    }
    a.dst = dst;
    return launch((const void *)eccl_k_quant_values, blocks_for(count), &a, stream);
}
