/* Inputs and frames for the tests that drive the peer-link collectives'
 * state machines in one process (test_rec_allreduce, test_rec_reduce_scatter,
 * test_hier_allreduce, test_bruck, test_rec_allgather):
 * seeded data whose bits change with any other order of operations, and a
 * queued DATA frame's header. Include after cmocka.h. */
#ifndef ECCL_TESTS_COLL_DATA_H
#define ECCL_TESTS_COLL_DATA_H

#include <stdint.h>
#include <string.h>

#include "env.h"
#include "proto/chan.h"
#include "proto/wire.h"
#include "util/half.h"

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

__attribute__((unused)) /* a test of copies only has no dtype arithmetic */
static int is_float(eccl_dtype t) { return t >= ECCL_F16; }

/* Random bits for integers; random finite values with full mantissas for
 * floats (another order of operations gives other bits), PROD's near 1. */
__attribute__((unused))
static void fill_input(uint8_t *buf, eccl_dtype t, eccl_op op, size_t count, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 12345;
    size_t es = eccl_dtype_size(t);
    for (size_t i = 0; i < count; i++) {
        uint64_t r = rng_next(&x);
        if (!is_float(t)) {
            memcpy(buf + i * es, &r, es);
            continue;
        }
        double u = (double)(r >> 11) / 9007199254740992.0;
        double v = op == ECCL_PROD ? 0.5 + 1.5 * u : 2.0 * u - 1.0;
        if (t == ECCL_F64) {
            memcpy(buf + i * es, &v, 8);
        } else if (t == ECCL_F32) {
            float f = (float)v;
            memcpy(buf + i * es, &f, 4);
        } else {
            float f = (float)v;
            uint32_t bits;
            memcpy(&bits, &f, 4);
            uint16_t h = t == ECCL_F16 ? eccl_f32_to_f16(f) : (uint16_t)(bits >> 16);
            memcpy(buf + i * es, &h, 2);
        }
    }
}

static void fill_bytes(uint8_t *buf, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0xD1B54A32D192ED03ull + 99;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t r = rng_next(&x);
        memcpy(buf + i, &r, n - i < 8 ? n - i : 8);
    }
}

/* The DATA header of a queued frame (its payload length must match). */
static void decode_frame(const eccl_frame *f, eccl_wire_data *w)
{
    eccl_wire_header h;
    assert_int_equal(eccl_wire_header_decode(f->head, &h), ECCL_OK);
    assert_int_equal(h.type, ECCL_MSG_DATA);
    assert_int_equal(eccl_wire_data_decode(f->head + ECCL_WIRE_HEADER_SIZE, h.length, w), ECCL_OK);
    assert_int_equal(f->payload_len, w->len);
}

/* The peer-link algorithms' geometry, as the tests' models see it: the
 * largest power of two <= n, ceil(log2 p), and the rounds of the
 * dissemination barrier (none for two ranks). */
static inline int pow2_of(int n)
{
    int p = 1;
    while (p * 2 <= n) p *= 2;
    return p;
}
static inline int log2_of(int p)
{
    int l = 0;
    while ((1 << l) < p) l++;
    return l;
}

#endif /* ECCL_TESTS_COLL_DATA_H */
