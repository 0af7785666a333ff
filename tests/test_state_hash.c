/* Shared-state hashes (core/state/hash.c).
 *
 * The ECCL_HASH_SIMPLE known answers below were computed by an independent
 * Python transcription of the definition in hash.h, not by the C code: they
 * freeze the function, so any change to it (which would make peers of
 * different versions disagree) fails here. CRC32C is checked against the
 * standard check value, the RFC 3720 (B.4) vectors, and a bit-at-a-time CRC
 * written here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "state/hash.h"
#include "kat_kernels.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* ---- helpers ------------------------------------------------------------- */

/* Deterministic test data: (i * a + b) mod 256, the pattern the Python
 * reference uses. */
static uint8_t *pattern(size_t n, unsigned a, unsigned b)
{
    uint8_t *p = malloc(n ? n : 1);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * a + b);
    return p;
}

/* xorshift64*, seeded per test, for random contents and splits. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * UINT64_C(0x2545F4914F6CDD1D);
}

static uint8_t *random_bytes(size_t n, uint64_t seed)
{
    uint8_t *p = malloc(n ? n : 1);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(rng_next(&seed) >> 56);
    return p;
}

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void assert_all_distinct(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof *v, u64_cmp);
    for (size_t i = 0; i + 1 < n; i++)
        if (v[i] == v[i + 1])
            fail_msg("hash 0x%016llx appears twice", (unsigned long long)v[i]);
}

static uint32_t crc32c_bitwise(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static uint64_t simple_oneshot(const void *p, size_t n)
{
    return eccl_hash(ECCL_HASH_SIMPLE, p, n);
}

/* ---- ECCL_HASH_SIMPLE ---------------------------------------------------- */

static void test_simple_known_answers(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        size_t n;
        uint64_t want;
    } str[] = {
        {"", 0, UINT64_C(0xacb65bc0832c5445)},
        {"a", 1, UINT64_C(0xe02e525c4716644d)},
        {"abc", 3, UINT64_C(0x5b9a598ac2066c51)},
        {"abc", 4, UINT64_C(0x6f778babdf0400d6)}, /* "abc\0" */
        {"123456789", 9, UINT64_C(0xbc4dd1cc38afe4f4)},
    };
    for (size_t i = 0; i < N(str); i++) {
        uint64_t got = simple_oneshot(str[i].s, str[i].n);
        if (got != str[i].want)
            fail_msg("SIMPLE(\"%s\", %zu) = 0x%016llx, want 0x%016llx", str[i].s, str[i].n,
                     (unsigned long long)got, (unsigned long long)str[i].want);
    }

    /* Pattern i * 7 + 3: within one segment, exactly one segment, and three
     * segments plus a partial stripe and a partial word. */
    static const struct {
        size_t n;
        uint64_t want;
    } pat[] = {
        {1000, UINT64_C(0x49a90e32e92cb154)},
        {65536, UINT64_C(0x681cbd9a980bd0cf)},
        {200003, UINT64_C(0x5731013d8a43b6a7)},
    };
    for (size_t i = 0; i < N(pat); i++) {
        uint8_t *p = pattern(pat[i].n, 7, 3);
        uint64_t got = simple_oneshot(p, pat[i].n);
        free(p);
        if (got != pat[i].want)
            fail_msg("SIMPLE(pattern, %zu) = 0x%016llx, want 0x%016llx", pat[i].n,
                     (unsigned long long)got, (unsigned long long)pat[i].want);
    }
}

/* Zero-padding of the last word must not let lengths collide: all-zero
 * inputs of every length from 0 to 2 stripes past a segment are distinct. */
static void test_simple_length_sensitivity(void **state)
{
    (void)state;
    assert_int_not_equal(simple_oneshot("abc", 3), simple_oneshot("abc\0", 4));
    assert_int_not_equal(simple_oneshot("", 0), simple_oneshot("\0", 1));

    size_t max = ECCL_HASH_SIMPLE_SEGMENT_BYTES + 256;
    uint8_t *zeros = calloc(max, 1);
    uint64_t *h = malloc((max + 1) * sizeof *h);
    assert_non_null(zeros);
    assert_non_null(h);
    for (size_t n = 0; n <= max; n++)
        h[n] = simple_oneshot(zeros, n);
    assert_all_distinct(h, max + 1);
    free(zeros);
    free(h);
}

/* Every single-bit flip of a 1 KiB buffer (8 stripes: every bit position of
 * every word of every lane) changes the hash, and all 8192 flipped hashes
 * and the original are pairwise distinct. */
static void test_simple_every_bit_flip(void **state)
{
    (void)state;
    size_t n = 1024;
    uint8_t *p = random_bytes(n, 1);
    uint64_t *h = malloc((n * 8 + 1) * sizeof *h);
    assert_non_null(h);
    h[0] = simple_oneshot(p, n);
    for (size_t bit = 0; bit < n * 8; bit++) {
        p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        h[bit + 1] = simple_oneshot(p, n);
        p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    assert_int_equal(simple_oneshot(p, n), h[0]);
    assert_all_distinct(h, n * 8 + 1);
    free(p);
    free(h);
}

/* Across segments: in each of 3 full segments and the partial fourth, flip
 * the lowest, a middle and the top bit of the first and the last word of
 * every lane, and of the zero-padded last word's real bytes. */
static void test_simple_lane_independence(void **state)
{
    (void)state;
    const size_t seg = ECCL_HASH_SIMPLE_SEGMENT_BYTES;
    const size_t n = 3 * seg + 1000 + 5; /* partial 4th segment, partial last word */
    uint8_t *p = random_bytes(n, 2);
    uint64_t base = simple_oneshot(p, n);
    size_t words = (n + 7) / 8;
    static const unsigned bits[] = {0, 7, 31, 32, 63};

    for (size_t w = 0; w < words; w++) {
        size_t in_seg = w % (seg / 8);
        size_t seg_words = w / (seg / 8) < 3 ? seg / 8 : words % (seg / 8);
        int first_or_last_of_lane =
            in_seg < ECCL_HASH_SIMPLE_LANES || in_seg + ECCL_HASH_SIMPLE_LANES >= seg_words;
        if (!first_or_last_of_lane)
            continue;
        for (size_t b = 0; b < N(bits); b++) {
            size_t byte = w * 8 + bits[b] / 8;
            if (byte >= n)
                continue; /* padding, not input */
            p[byte] ^= (uint8_t)(1u << (bits[b] % 8));
            if (simple_oneshot(p, n) == base)
                fail_msg("flipping bit %u of word %zu does not change the hash", bits[b], w);
            p[byte] ^= (uint8_t)(1u << (bits[b] % 8));
        }
    }

    /* Moving data between lanes (swapping two different words of one
     * stripe) or between segments changes the hash too. */
    uint8_t tmp[8];
    memcpy(tmp, p + 8, 8);
    memcpy(p + 8, p + 16, 8);
    memcpy(p + 16, tmp, 8);
    assert_int_not_equal(simple_oneshot(p, n), base);
    memcpy(p + 16, p + 8, 8);
    memcpy(p + 8, tmp, 8);
    assert_int_equal(simple_oneshot(p, n), base);
    memcpy(tmp, p, 8);
    memcpy(p, p + seg, 8);
    memcpy(p + seg, tmp, 8);
    assert_int_not_equal(simple_oneshot(p, n), base);
    free(p);
}

static uint64_t simple_chunked(const uint8_t *p, size_t n, size_t chunk)
{
    eccl_hash_simple s;
    eccl_hash_simple_init(&s);
    for (size_t off = 0; off < n; off += chunk)
        eccl_hash_simple_update(&s, p + off, n - off < chunk ? n - off : chunk);
    return eccl_hash_simple_final(&s);
}

static void test_simple_chunked_equals_oneshot(void **state)
{
    (void)state;
    const size_t n = 3 * ECCL_HASH_SIMPLE_SEGMENT_BYTES + 12345;
    uint8_t *p = random_bytes(n, 3);
    uint64_t want = simple_oneshot(p, n);

    /* Multiples of the word, stripe and segment, and sizes that split words. */
    static const size_t chunks[] = {1,    3,     7,     8,     13,    16,    100,   127,
                                    128,  129,   1000,  4096,  65535, 65536, 65537, 131072,
                                    200000};
    for (size_t i = 0; i < N(chunks); i++)
        if (simple_chunked(p, n, chunks[i]) != want)
            fail_msg("chunks of %zu bytes differ from one call", chunks[i]);

    /* Random splits, with empty updates and final() peeks in between. */
    uint64_t seed = 4;
    for (int round = 0; round < 20; round++) {
        eccl_hash_simple s;
        eccl_hash_simple_init(&s);
        size_t off = 0;
        while (off < n) {
            size_t k = (size_t)(rng_next(&seed) % 70000);
            if (k > n - off)
                k = n - off;
            eccl_hash_simple_update(&s, p + off, k);
            off += k;
            assert_int_equal(eccl_hash_simple_final(&s), simple_oneshot(p, off));
            eccl_hash_simple_update(&s, p + off, 0);
        }
        assert_int_equal(eccl_hash_simple_final(&s), want);
    }

    /* The generic interface gives the same. */
    eccl_hash_ctx c;
    assert_int_equal(eccl_hash_init(&c, ECCL_HASH_SIMPLE), ECCL_OK);
    eccl_hash_update(&c, p, 5);
    eccl_hash_update(&c, p + 5, n - 5);
    assert_int_equal(eccl_hash_final(&c), want);
    free(p);
}

/* The hash reads bytes, not host words: an unaligned copy hashes the same. */
static void test_simple_alignment(void **state)
{
    (void)state;
    const size_t n = 5000;
    uint8_t *p = random_bytes(n + 8, 5);
    uint64_t want = simple_oneshot(p, n);
    for (size_t off = 1; off < 8; off++) {
        memmove(p + off, p + off - 1, n);
        assert_int_equal(simple_oneshot(p + off, n), want);
    }
    free(p);
}

/* ---- ECCL_HASH_CRC32C ----------------------------------------------------- */

static void test_crc32c_vectors(void **state)
{
    (void)state;
    uint8_t buf[48];

    assert_int_equal(eccl_hash_crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(eccl_hash(ECCL_HASH_CRC32C, "123456789", 9), UINT64_C(0xE3069283));
    assert_int_equal(eccl_hash_crc32c(0, NULL, 0), 0u);

    /* RFC 3720, B.4 */
    memset(buf, 0, 32);
    assert_int_equal(eccl_hash_crc32c(0, buf, 32), 0x8A9136AAu);
    memset(buf, 0xff, 32);
    assert_int_equal(eccl_hash_crc32c(0, buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    assert_int_equal(eccl_hash_crc32c(0, buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    assert_int_equal(eccl_hash_crc32c(0, buf, 32), 0x113FDB5Cu);
    static const uint8_t read_pdu[48] = {
        0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
        0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    };
    assert_int_equal(eccl_hash_crc32c(0, read_pdu, sizeof read_pdu), 0xD9963A56u);
}

/* Slice-by-8 against a bit-at-a-time CRC: every length to 300 at every
 * alignment (which reaches every entry of all eight tables), and every split
 * point of a chained computation. */
static void test_crc32c_matches_bitwise(void **state)
{
    (void)state;
    uint8_t *p = random_bytes(4096 + 8, 6);
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n <= 300; n++)
            assert_int_equal(eccl_hash_crc32c(0, p + off, n), crc32c_bitwise(0, p + off, n));
    assert_int_equal(eccl_hash_crc32c(0, p, 4096), crc32c_bitwise(0, p, 4096));

    uint32_t want = eccl_hash_crc32c(0, p, 777);
    for (size_t cut = 0; cut <= 777; cut++)
        assert_int_equal(eccl_hash_crc32c(eccl_hash_crc32c(0, p, cut), p + cut, 777 - cut), want);

    eccl_hash_ctx c;
    assert_int_equal(eccl_hash_init(&c, ECCL_HASH_CRC32C), ECCL_OK);
    eccl_hash_update(&c, p, 100);
    eccl_hash_update(&c, p + 100, 677);
    assert_int_equal(eccl_hash_final(&c), want);

    /* Every single-byte message: table 0 alone, each entry. */
    for (unsigned b = 0; b < 256; b++) {
        uint8_t x = (uint8_t)b;
        assert_int_equal(eccl_hash_crc32c(0, &x, 1), crc32c_bitwise(0, &x, 1));
    }
    free(p);
}

/* ---- generic interface and sets -------------------------------------------- */

static void test_invalid_type(void **state)
{
    (void)state;
    eccl_hash_ctx c;
    assert_int_equal(eccl_hash_init(&c, (eccl_hash_type)0), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_hash_init(&c, (eccl_hash_type)3), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_hash_init(NULL, ECCL_HASH_SIMPLE), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_hash((eccl_hash_type)99, "x", 1), 0);

    eccl_hash_entry e = {.key = "k", .data = "x", .bytes = 1};
    uint64_t out = 7;
    assert_int_equal(eccl_hash_set((eccl_hash_type)0, &e, 1, &out), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_hash_set_combine((eccl_hash_type)0, &e, 1, &out), ECCL_ERR_INVALID_ARG);
    assert_int_equal(out, 7);
}

static void test_set_known_answers(void **state)
{
    (void)state;
    uint8_t *weights = pattern(100, 7, 3);
    uint8_t *bias = pattern(12, 5, 1);
    uint8_t step[8] = {42, 0, 0, 0, 0, 0, 0, 0};
    eccl_hash_entry e[3] = {
        {.key = "weights", .data = weights, .bytes = 100},
        {.key = "bias", .data = bias, .bytes = 12},
        {.key = "step", .data = step, .bytes = 8},
    };
    uint64_t out = 0;

    assert_int_equal(eccl_hash_set(ECCL_HASH_SIMPLE, e, 3, &out), ECCL_OK);
    assert_int_equal(out, UINT64_C(0x2493d92990c409b2));
    /* sorted in place, entry hashes filled */
    assert_string_equal(e[0].key, "bias");
    assert_string_equal(e[1].key, "step");
    assert_string_equal(e[2].key, "weights");
    assert_int_equal(e[2].hash, simple_oneshot(weights, 100));

    assert_int_equal(eccl_hash_set(ECCL_HASH_CRC32C, e, 3, &out), ECCL_OK);
    assert_int_equal(out, UINT64_C(0x64c71be4));
    free(weights);
    free(bias);
}

static void test_set_order_and_sensitivity(void **state)
{
    (void)state;
    enum { K = 6 };
    static const char *const keys[K] = {"layer.0.w", "layer.0.b", "layer.1.w",
                                        "layer.10.w", "\xc3\xa9t\xc3\xa9", "a"};
    uint8_t *data[K];
    eccl_hash_entry e[K];
    uint64_t base, h;

    for (int i = 0; i < K; i++) {
        data[i] = random_bytes(100 + (size_t)i * 37, 10 + (uint64_t)i);
        e[i] = (eccl_hash_entry){.key = keys[i], .data = data[i], .bytes = 100 + (size_t)i * 37};
    }
    assert_int_equal(eccl_hash_set(ECCL_HASH_SIMPLE, e, K, &base), ECCL_OK);
    /* the high-bit key sorts last (unsigned byte order) */
    assert_string_equal(e[K - 1].key, keys[4]);

    /* Any input order gives the same set hash. */
    uint64_t seed = 11;
    for (int round = 0; round < 20; round++) {
        for (int i = K - 1; i > 0; i--) {
            int j = (int)(rng_next(&seed) % (uint64_t)(i + 1));
            eccl_hash_entry t = e[i];
            e[i] = e[j];
            e[j] = t;
        }
        assert_int_equal(eccl_hash_set(ECCL_HASH_SIMPLE, e, K, &h), ECCL_OK);
        assert_int_equal(h, base);
    }

    /* Precomputed entry hashes: combine alone gives the same. */
    for (int i = 0; i < K; i++)
        e[i].data = NULL;
    assert_int_equal(eccl_hash_set_combine(ECCL_HASH_SIMPLE, e, K, &h), ECCL_OK);
    assert_int_equal(h, base);

    /* A changed byte, a renamed key, a dropped entry: all change it. */
    for (int i = 0; i < K; i++)
        e[i] = (eccl_hash_entry){.key = keys[i], .data = data[i], .bytes = 100 + (size_t)i * 37};
    data[2][50] ^= 1;
    assert_int_equal(eccl_hash_set(ECCL_HASH_SIMPLE, e, K, &h), ECCL_OK);
    assert_int_not_equal(h, base);
    data[2][50] ^= 1;
    for (int i = 0; i < K; i++)
        e[i] = (eccl_hash_entry){.key = keys[i], .data = data[i], .bytes = 100 + (size_t)i * 37};
    e[0].key = "layer.0.v";
    assert_int_equal(eccl_hash_set(ECCL_HASH_SIMPLE, e, K, &h), ECCL_OK);
    assert_int_not_equal(h, base);
    for (int i = 0; i < K; i++)
        e[i] = (eccl_hash_entry){.key = keys[i], .data = data[i], .bytes = 100 + (size_t)i * 37};
    assert_int_equal(eccl_hash_set(ECCL_HASH_SIMPLE, e, K - 1, &h), ECCL_OK);
    assert_int_not_equal(h, base);

    /* Moving a byte from one tensor's end to the next one's start keeps the
     * concatenation but not the set hash (lengths are hashed). */
    eccl_hash_entry a[2] = {{.key = "a", .data = "xy", .bytes = 2}, {.key = "b", .data = "z", .bytes = 1}};
    eccl_hash_entry b[2] = {{.key = "a", .data = "x", .bytes = 1}, {.key = "b", .data = "yz", .bytes = 2}};
    uint64_t ha, hb;
    assert_int_equal(eccl_hash_set(ECCL_HASH_SIMPLE, a, 2, &ha), ECCL_OK);
    assert_int_equal(eccl_hash_set(ECCL_HASH_SIMPLE, b, 2, &hb), ECCL_OK);
    assert_int_not_equal(ha, hb);

    /* The empty set is a set. */
    assert_int_equal(eccl_hash_set(ECCL_HASH_SIMPLE, NULL, 0, &h), ECCL_OK);
    assert_int_equal(h, simple_oneshot(NULL, 0));

    for (int i = 0; i < K; i++)
        free(data[i]);
}

static void test_set_rejects(void **state)
{
    (void)state;
    uint64_t out = 123;
    eccl_hash_entry dup[3] = {{.key = "x", .data = "1", .bytes = 1},
                              {.key = "y", .data = "2", .bytes = 1},
                              {.key = "x", .data = "3", .bytes = 1}};
    assert_int_equal(eccl_hash_set(ECCL_HASH_SIMPLE, dup, 3, &out), ECCL_ERR_INVALID_ARG);
    eccl_hash_entry nokey[1] = {{.key = NULL, .data = "1", .bytes = 1}};
    assert_int_equal(eccl_hash_set(ECCL_HASH_SIMPLE, nokey, 1, &out), ECCL_ERR_INVALID_ARG);
    eccl_hash_entry nodata[1] = {{.key = "x", .data = NULL, .bytes = 1}};
    assert_int_equal(eccl_hash_set(ECCL_HASH_SIMPLE, nodata, 1, &out), ECCL_ERR_INVALID_ARG);
    assert_int_equal(eccl_hash_set(ECCL_HASH_SIMPLE, NULL, 1, &out), ECCL_ERR_INVALID_ARG);
    assert_int_equal(out, 123);
    eccl_hash_entry ok[1] = {{.key = "x", .data = "1", .bytes = 1}};
    assert_int_equal(eccl_hash_set(ECCL_HASH_SIMPLE, ok, 1, NULL), ECCL_ERR_INVALID_ARG);
    /* a zero-length tensor may have no data */
    eccl_hash_entry empty[1] = {{.key = "x", .data = NULL, .bytes = 0}};
    assert_int_equal(eccl_hash_set(ECCL_HASH_SIMPLE, empty, 1, &out), ECCL_OK);
}

/* The known-answer table shared with the device kernels' test
 * (tests/kat_kernels.h), at two alignments: the hashes are defined on bytes. */
static void test_kernel_kat(void **state)
{
    (void)state;
    size_t maxn = kat_hash_lengths[KAT_HASH_CASES - 1];
    uint8_t *buf = malloc(maxn + 8);
    assert_non_null(buf);
    for (size_t off = 0; off < 8; off += 3) {
        kat_bytes(buf + off, maxn, KAT_HASH_SEED);
        for (unsigned c = 0; c < KAT_HASH_CASES; c++) {
            assert_int_equal(eccl_hash(ECCL_HASH_SIMPLE, buf + off, kat_hash_lengths[c]),
                             kat_hash_simple_expect[c]);
            assert_int_equal(eccl_hash(ECCL_HASH_CRC32C, buf + off, kat_hash_lengths[c]),
                             kat_hash_crc32c_expect[c]);
        }
    }
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simple_known_answers),
        cmocka_unit_test(test_simple_length_sensitivity),
        cmocka_unit_test(test_simple_every_bit_flip),
        cmocka_unit_test(test_simple_lane_independence),
        cmocka_unit_test(test_simple_chunked_equals_oneshot),
        cmocka_unit_test(test_simple_alignment),
        cmocka_unit_test(test_crc32c_vectors),
        cmocka_unit_test(test_crc32c_matches_bitwise),
        cmocka_unit_test(test_invalid_type),
        cmocka_unit_test(test_set_known_answers),
        cmocka_unit_test(test_set_order_and_sensitivity),
        cmocka_unit_test(test_set_rejects),
        cmocka_unit_test(test_kernel_kat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
