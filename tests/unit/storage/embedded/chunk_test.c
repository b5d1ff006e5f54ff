/* chunk: round trips through both encodings, the encoder's choice, limits, and
 * damaged input. Values are compared bit for bit: -0.0 must not come back as 0.0. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "storage/embedded/chunk.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;

static void rng_seed(uint64_t s)
{
    rng_state = s ? s : 1;
}

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static uint64_t bits_of(double v)
{
    uint64_t b;
    memcpy(&b, &v, 8);
    return b;
}

static double from_bits(uint64_t b)
{
    double v;
    memcpy(&v, &b, 8);
    return v;
}

/* Iterates p and checks it yields exactly ts/vals. */
static void check_decodes(const uint8_t *p, size_t len, const int64_t *ts, const double *vals,
                          size_t n)
{
    assert_int_equal(bdb_chunk_count(p, len), n);
    bdb_chunk_iter it;
    assert_int_equal(bdb_chunk_iter_init(&it, p, len), BDB_OK);
    for (size_t i = 0; i < n; i++) {
        int64_t t;
        double v;
        assert_int_equal(bdb_chunk_iter_next(&it, &t, &v), 1);
        assert_true(t == ts[i]);
        assert_true(bits_of(v) == bits_of(vals[i]));
    }
    int64_t t;
    double v;
    assert_int_equal(bdb_chunk_iter_next(&it, &t, &v), 0);
    assert_int_equal(bdb_chunk_iter_next(&it, &t, &v), 0);
}

/* Round trip through the appender and through bdb_chunk_encode; returns the encoding
 * the encoder chose and, if asked, the two sizes. */
static int roundtrip(const int64_t *ts, const double *vals, size_t n, size_t *app_len,
                     size_t *enc_len)
{
    bdb_chunk_app a;
    bdb_chunk_app_init(&a);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(bdb_chunk_app_append(&a, ts[i], vals[i]), BDB_OK);
    size_t alen;
    const uint8_t *ap = bdb_chunk_app_bytes(&a, &alen);
    assert_int_equal(ap[0], BDB_CHUNK_XOR);
    check_decodes(ap, alen, ts, vals, n);

    /* A prefix in out must survive: encode appends. */
    bdb_buf out;
    bdb_buf_init(&out);
    bdb_buf_append(&out, "pre", 3);
    assert_int_equal(bdb_chunk_encode(ts, vals, n, &out), BDB_OK);
    assert_memory_equal(out.data, "pre", 3);
    size_t elen = out.len - 3;
    int enc = out.data[3];
    check_decodes(out.data + 3, elen, ts, vals, n);
    /* The encoder never does worse than the appender, and its XOR is the same bytes. */
    assert_true(elen <= alen);
    if (enc == BDB_CHUNK_XOR) {
        assert_int_equal(elen, alen);
        assert_memory_equal(out.data + 3, ap, alen);
    }
    if (app_len) *app_len = alen;
    if (enc_len) *enc_len = elen;
    bdb_buf_free(&out);
    bdb_chunk_app_free(&a);
    return enc;
}

static void test_edge_values(void **state)
{
    (void)state;
    const double vals[] = {0.0,      -0.0,     1e308,        -1e308,       DBL_MAX,
                           -DBL_MAX, DBL_MIN,  -DBL_MIN,     DBL_TRUE_MIN, -DBL_TRUE_MIN,
                           1e-310,   INFINITY, -INFINITY,    1.0,          0.1,
                           -0.0,     0.0,      123456789.125};
    const int64_t ts[] = {INT64_MIN,
                          INT64_MIN + 1,
                          -4000000000000000000,
                          -1700000000000,
                          -1,
                          0,
                          1,
                          2,
                          1700000000000,
                          1700000000001,
                          1700000010001,
                          1700000010002,
                          INT64_MAX / 2,
                          INT64_MAX / 2 + 7,
                          INT64_MAX - 1000,
                          INT64_MAX - 3,
                          INT64_MAX - 1,
                          INT64_MAX};
    size_t n = sizeof(vals) / sizeof(vals[0]);
    assert_int_equal(n, sizeof(ts) / sizeof(ts[0]));
    assert_int_equal(roundtrip(ts, vals, n, NULL, NULL), BDB_CHUNK_XOR);
    /* Every prefix too, so each sample position meets each edge value. */
    for (size_t k = 1; k < n; k++)
        roundtrip(ts + (n - k), vals, k, NULL, NULL);
}

/* Deltas alternate around a base so each delta-of-delta bucket edge is crossed in
 * both directions, including the full 64-bit escape. */
static void test_timestamp_buckets(void **state)
{
    (void)state;
    const int64_t dods[] = {
        0,       1,         -1,        63,           -64,           64,        -65,
        2047,    -2048,     2048,      -2049,        524287,        -524288,   524288,
        -524289, INT32_MAX, INT32_MIN, 2147483648LL, -2147483649LL, 1LL << 40, -(1LL << 40)};
    enum { N = 2 + 2 * (sizeof(dods) / sizeof(dods[0])) };
    int64_t ts[N];
    double ints[N], rnd[N];
    const int64_t base = 1LL << 41;
    ts[0] = -5000;
    ts[1] = ts[0] + base;
    size_t n = 2;
    for (size_t k = 0; k < sizeof(dods) / sizeof(dods[0]); k++) {
        ts[n] = ts[n - 1] + base + dods[k];
        n++;
        ts[n] = ts[n - 1] + base;
        n++;
    }
    rng_seed(7);
    double v = 100;
    for (size_t i = 0; i < n; i++) {
        v += (double)(rng() % 2001) - 1000;
        ints[i] = v;
        rnd[i] = from_bits(rng());
    }
    /* Integers make the encoder pick DECIMAL, whose timestamps share the bucket code. */
    assert_int_equal(roundtrip(ts, ints, n, NULL, NULL), BDB_CHUNK_DECIMAL);
    assert_int_equal(roundtrip(ts, rnd, n, NULL, NULL), BDB_CHUNK_XOR);
}

static void test_huge_gaps(void **state)
{
    (void)state;
    int64_t ts[64];
    double vals[64];
    rng_seed(11);
    ts[0] = INT64_MIN;
    for (size_t i = 1; i < 64; i++) {
        /* Gaps of up to 2^57 ms, then a jump to the top of the range. */
        unsigned shift = 7 + (unsigned)(rng() % 57);
        uint64_t gap = 1 + (rng() >> shift);
        ts[i] = ts[i - 1] + (int64_t)gap;
        vals[i] = (double)i;
    }
    vals[0] = 0;
    ts[63] = INT64_MAX;
    roundtrip(ts, vals, 64, NULL, NULL);
    int64_t two[2] = {INT64_MIN, INT64_MAX};
    double tv[2] = {1.5, -2.25};
    roundtrip(two, tv, 2, NULL, NULL);
}

static void test_equal_values(void **state)
{
    (void)state;
    enum { N = 1000 };
    int64_t ts[N];
    double vals[N];
    for (size_t i = 0; i < N; i++) {
        ts[i] = 1700000000000 + 15000 * (int64_t)i;
        vals[i] = 42.125;
    }
    size_t alen, elen;
    roundtrip(ts, vals, N, &alen, &elen);
    /* One bit for the regular timestamp and one for the repeated value. */
    assert_true(alen <= 3 + 6 + 8 + 3 + (N * 2 + 7) / 8);
    assert_true(elen <= alen);

    /* Runs of equal values between changes of every kind. */
    rng_seed(3);
    for (size_t i = 0; i < N; i++)
        vals[i] = (i % 10 < 6 && i > 0) ? vals[i - 1] : from_bits(rng());
    roundtrip(ts, vals, N, NULL, NULL);
}

static void test_random_doubles(void **state)
{
    (void)state;
    enum { N = 4096 };
    static int64_t ts[N];
    static double vals[N];
    rng_seed(12345);
    int64_t t = -123456789;
    for (size_t i = 0; i < N; i++) {
        t += 1 + (int64_t)(rng() % 100000);
        ts[i] = t;
        switch (i % 4) {
        case 0:
            vals[i] = from_bits(rng()); /* any bit pattern, NaN payloads included */
            break;
        case 1:
            vals[i] = (double)(rng() >> 11) / 9007199254740992.0 * 1000.0;
            break;
        case 2:
            vals[i] = -vals[i - 1];
            break;
        default:
            vals[i] = from_bits(bits_of(vals[i - 1]) ^ (rng() & 0xffff));
        }
    }
    assert_int_equal(roundtrip(ts, vals, N, NULL, NULL), BDB_CHUNK_XOR);
}

/* Sensor-like values: a random walk with d decimals and jittered 10 s timestamps. */
static void make_sensor(int64_t *ts, double *vals, size_t n, int decimals, uint64_t seed)
{
    static const double scale[] = {1, 10, 100, 1000};
    rng_seed(seed);
    int64_t m = 20 * (int64_t)scale[decimals];
    for (size_t i = 0; i < n; i++) {
        ts[i] = 1700000000000 + 10000 * (int64_t)i + (int64_t)(rng() % 50);
        m += (int64_t)(rng() % 7) - 3;
        /* Exactly what parsing the printed reading would give. */
        vals[i] = (double)m / scale[decimals];
    }
}

static void test_decimal_smaller_for_sensors(void **state)
{
    (void)state;
    enum { N = 8640 };
    static int64_t ts[N];
    static double vals[N];
    for (int d = 1; d <= 3; d++) {
        make_sensor(ts, vals, N, d, 100 + (uint64_t)d);
        size_t alen, elen;
        assert_int_equal(roundtrip(ts, vals, N, &alen, &elen), BDB_CHUNK_DECIMAL);
        assert_true(elen < alen / 2);
        assert_true(elen < 3 * (size_t)N); /* ~2 bytes a sample, far below XOR */
    }
    /* The plain 10 s, 0.1-step walk of the size report. */
    double v = 200;
    for (size_t i = 0; i < N; i++) {
        ts[i] = 1700000000000 + 10000 * (int64_t)i;
        v += (double)(int)(rng() % 3) - 1;
        vals[i] = v / 10;
    }
    size_t elen;
    assert_int_equal(roundtrip(ts, vals, N, NULL, &elen), BDB_CHUNK_DECIMAL);
    assert_true(elen < 3 * (size_t)N / 2);
}

/* A walk of mantissas at exponent e, plus one value that may spoil it. */
static int encode_with(int e, int64_t m0, double spoiler)
{
    enum { N = 200 };
    int64_t ts[N];
    double vals[N];
    const double p10 = pow(10, e);
    rng_seed(99 + (uint64_t)e);
    int64_t m = m0;
    for (size_t i = 0; i < N; i++) {
        ts[i] = 1000 * (int64_t)i;
        m += (int64_t)(rng() % 21) - 10;
        vals[i] = (double)m / p10;
    }
    if (!isnan(spoiler)) vals[N / 2] = spoiler;
    return roundtrip(ts, vals, N, NULL, NULL);
}

static void test_decimal_detection_exact(void **state)
{
    (void)state;
    for (int e = 0; e <= 15; e++)
        assert_int_equal(encode_with(e, 1000000, NAN), BDB_CHUNK_DECIMAL);
    /* Each of these has no exact m * 10^-e with |m| < 2^53 and e <= 15 (or breaks the
     * chunk's exponent), so the chunk must fall back to XOR and still round trip. */
    const double spoilers[] = {-0.0,     1e300,        -1e300,
                               DBL_MIN,  DBL_TRUE_MIN, 5e-320,
                               INFINITY, 0.1 + 0.2,    9007199254740992.0,
                               1e-16,    1.0 / 3.0,    M_PI};
    for (size_t k = 0; k < sizeof(spoilers) / sizeof(spoilers[0]); k++)
        assert_int_equal(encode_with(1, 500, spoilers[k]), BDB_CHUNK_XOR);
    /* Fine on its own, but at the chunk's exponent 3 its mantissa exceeds 2^53. */
    assert_int_equal(encode_with(3, 500, 1e13 + 1), BDB_CHUNK_XOR);
    /* Largest mantissa and smallest step still qualify. */
    assert_int_equal(encode_with(0, 500, 9007199254740991.0), BDB_CHUNK_DECIMAL);
    assert_int_equal(encode_with(15, 500, 1e-15), BDB_CHUNK_DECIMAL);
    assert_int_equal(encode_with(2, -500000, -123.45), BDB_CHUNK_DECIMAL);
}

static void test_single_sample(void **state)
{
    (void)state;
    const double vals[] = {0.0, -0.0, 23.7, 1e308, DBL_TRUE_MIN};
    const int64_t tss[] = {0, -1, INT64_MIN, INT64_MAX, 1700000000000};
    for (size_t i = 0; i < 5; i++)
        for (size_t j = 0; j < 5; j++)
            roundtrip(&tss[j], &vals[i], 1, NULL, NULL);
}

static void test_empty_appender(void **state)
{
    (void)state;
    bdb_chunk_app a;
    bdb_chunk_app_init(&a);
    size_t len;
    const uint8_t *p = bdb_chunk_app_bytes(&a, &len);
    check_decodes(p, len, NULL, NULL, 0);
    bdb_chunk_app_free(&a);
}

static void test_max_samples(void **state)
{
    (void)state;
    enum { N = BDB_CHUNK_MAX_SAMPLES + 1 };
    int64_t *ts = malloc(N * sizeof(*ts));
    double *vals = malloc(N * sizeof(*vals));
    assert_non_null(ts);
    assert_non_null(vals);
    rng_seed(5);
    for (size_t i = 0; i < N; i++) {
        ts[i] = (int64_t)i * 1000 + (int64_t)(rng() % 10);
        vals[i] = (double)(int64_t)(rng() % 2000) / 100;
    }
    assert_int_equal(roundtrip(ts, vals, BDB_CHUNK_MAX_SAMPLES, NULL, NULL), BDB_CHUNK_DECIMAL);

    bdb_chunk_app a;
    bdb_chunk_app_init(&a);
    for (size_t i = 0; i < BDB_CHUNK_MAX_SAMPLES; i++)
        assert_int_equal(bdb_chunk_app_append(&a, ts[i], vals[i]), BDB_OK);
    assert_int_equal(bdb_chunk_app_append(&a, ts[N - 1], vals[N - 1]), BDB_ERR_LIMIT);
    size_t len;
    const uint8_t *p = bdb_chunk_app_bytes(&a, &len);
    check_decodes(p, len, ts, vals, BDB_CHUNK_MAX_SAMPLES);
    bdb_chunk_app_free(&a);

    bdb_buf out;
    bdb_buf_init(&out);
    assert_int_equal(bdb_chunk_encode(ts, vals, N, &out), BDB_ERR_INVALID);
    assert_int_equal(out.len, 0);
    bdb_buf_free(&out);
    free(ts);
    free(vals);
}

static void test_non_increasing_rejected(void **state)
{
    (void)state;
    bdb_chunk_app a;
    bdb_chunk_app_init(&a);
    assert_int_equal(bdb_chunk_app_append(&a, 100, 1.0), BDB_OK);
    assert_int_equal(bdb_chunk_app_append(&a, 200, 2.0), BDB_OK);
    assert_int_equal(bdb_chunk_app_append(&a, 200, 3.0), BDB_ERR_INVALID);
    assert_int_equal(bdb_chunk_app_append(&a, 150, 3.0), BDB_ERR_INVALID);
    assert_int_equal(bdb_chunk_app_append(&a, INT64_MIN, 3.0), BDB_ERR_INVALID);
    /* The rejected samples left no trace. */
    assert_int_equal(bdb_chunk_app_append(&a, 201, 4.0), BDB_OK);
    const int64_t ts[] = {100, 200, 201};
    const double vals[] = {1.0, 2.0, 4.0};
    size_t len;
    const uint8_t *p = bdb_chunk_app_bytes(&a, &len);
    check_decodes(p, len, ts, vals, 3);
    bdb_chunk_app_free(&a);

    bdb_buf out;
    bdb_buf_init(&out);
    bdb_buf_append(&out, "x", 1);
    const int64_t dup[] = {1, 2, 2};
    const int64_t back[] = {5, 4, 6};
    assert_int_equal(bdb_chunk_encode(dup, vals, 3, &out), BDB_ERR_INVALID);
    assert_int_equal(bdb_chunk_encode(back, vals, 3, &out), BDB_ERR_INVALID);
    assert_int_equal(bdb_chunk_encode(ts, vals, 0, &out), BDB_ERR_INVALID);
    assert_int_equal(out.len, 1);
    bdb_buf_free(&out);
}

static void test_appender_small(void **state)
{
    (void)state;
    assert_true(sizeof(bdb_chunk_app) <= 48);
    bdb_chunk_app a;
    bdb_chunk_app_init(&a);
    assert_null(a.buf); /* an idle series costs no buffer */
    assert_int_equal(bdb_chunk_app_append(&a, 1700000000000, 21.5), BDB_OK);
    assert_int_equal(a.cap, 32);
    for (int64_t i = 1; i < 2000; i++) {
        assert_int_equal(bdb_chunk_app_append(&a, 1700000000000 + 10000 * i, 21.5 + i % 3), BDB_OK);
        size_t len;
        bdb_chunk_app_bytes(&a, &len);
        assert_true(a.cap <= 2 * len + 64); /* geometric, never far ahead */
    }
    bdb_chunk_app_free(&a);
}

static void test_bad_headers(void **state)
{
    (void)state;
    bdb_chunk_iter it;
    const uint8_t xor1[] = {BDB_CHUNK_XOR, 1, 0};
    assert_int_equal(bdb_chunk_iter_init(&it, xor1, 0), BDB_ERR_CORRUPT);
    assert_int_equal(bdb_chunk_iter_init(&it, xor1, 2), BDB_ERR_CORRUPT);
    assert_int_equal(bdb_chunk_count(xor1, 2), 0);
    /* Header promises a sample the bytes do not hold. */
    assert_int_equal(bdb_chunk_iter_init(&it, xor1, 3), BDB_OK);
    int64_t t;
    double v;
    assert_int_equal(bdb_chunk_iter_next(&it, &t, &v), BDB_ERR_CORRUPT);
    assert_int_equal(bdb_chunk_iter_next(&it, &t, &v), BDB_ERR_CORRUPT);

    const uint8_t unknown[][4] = {{0, 1, 0, 0}, {3, 1, 0, 0}, {0xff, 1, 0, 0}};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(bdb_chunk_iter_init(&it, unknown[i], 4), BDB_ERR_CORRUPT);
        assert_int_equal(bdb_chunk_count(unknown[i], 4), 0);
    }
    const uint8_t dec_exp[] = {BDB_CHUNK_DECIMAL, 1, 0, 16, 0, 0};
    assert_int_equal(bdb_chunk_iter_init(&it, dec_exp, sizeof(dec_exp)), BDB_ERR_CORRUPT);
    assert_int_equal(bdb_chunk_count(dec_exp, sizeof(dec_exp)), 0);
    const uint8_t dec_short[] = {BDB_CHUNK_DECIMAL, 1, 0, 1};
    assert_int_equal(bdb_chunk_iter_init(&it, dec_short, sizeof(dec_short)), BDB_ERR_CORRUPT);
    const uint8_t dec_tslen[] = {BDB_CHUNK_DECIMAL, 1, 0, 1, 9, 0, 0};
    assert_int_equal(bdb_chunk_iter_init(&it, dec_tslen, sizeof(dec_tslen)), BDB_ERR_CORRUPT);
    const uint8_t dec_varint[] = {BDB_CHUNK_DECIMAL, 1, 0, 1, 0x80, 0x80, 0x80, 0x80, 0x01};
    assert_int_equal(bdb_chunk_iter_init(&it, dec_varint, sizeof(dec_varint)), BDB_ERR_CORRUPT);
    /* A mantissa beyond 2^53 is not something the encoder writes. */
    bdb_buf b;
    bdb_buf_init(&b);
    const uint8_t hdr[] = {BDB_CHUNK_DECIMAL, 1, 0, 0, 1, 0};
    bdb_buf_append(&b, hdr, sizeof(hdr));
    bdb_buf_put_varint(&b, (int64_t)1 << 53);
    assert_int_equal(bdb_chunk_iter_init(&it, b.data, b.len), BDB_OK);
    assert_int_equal(bdb_chunk_iter_next(&it, &t, &v), BDB_ERR_CORRUPT);
    b.len = sizeof(hdr);
    bdb_buf_put_varint(&b, ((int64_t)1 << 53) - 1);
    assert_int_equal(bdb_chunk_iter_init(&it, b.data, b.len), BDB_OK);
    assert_int_equal(bdb_chunk_iter_next(&it, &t, &v), 1);
    assert_true(t == 0 && v == 9007199254740991.0);
    bdb_buf_free(&b);
}

/* Decodes damaged bytes from an exactly sized heap copy (so ASan sees any overread).
 * Returns the final status; samples must come out strictly increasing. */
static int decode_damaged(const uint8_t *src, size_t len)
{
    uint8_t *p = malloc(len ? len : 1);
    assert_non_null(p);
    memcpy(p, src, len);
    bdb_chunk_iter it;
    int rc = bdb_chunk_iter_init(&it, p, len);
    if (rc == BDB_OK) {
        uint16_t count = bdb_chunk_count(p, len);
        int64_t t, prev = 0;
        double v;
        size_t got = 0;
        while ((rc = bdb_chunk_iter_next(&it, &t, &v)) == 1) {
            assert_true(got == 0 || t > prev);
            prev = t;
            got++;
            assert_true(got <= count);
        }
        assert_true(rc == 0 || rc == BDB_ERR_CORRUPT);
        if (rc == 0) assert_int_equal(got, count);
    } else {
        assert_int_equal(rc, BDB_ERR_CORRUPT);
    }
    free(p);
    return rc;
}

static void test_corrupt_input(void **state)
{
    (void)state;
    enum { N = 300 };
    int64_t ts[N];
    double vals[N];
    bdb_buf chunks[4];
    for (int c = 0; c < 4; c++)
        bdb_buf_init(&chunks[c]);
    make_sensor(ts, vals, N, 2, 42);
    assert_int_equal(bdb_chunk_encode(ts, vals, N, &chunks[0]), BDB_OK);
    assert_int_equal(chunks[0].data[0], BDB_CHUNK_DECIMAL);
    bdb_chunk_app a;
    bdb_chunk_app_init(&a);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(bdb_chunk_app_append(&a, ts[i], vals[i]), BDB_OK);
    size_t len;
    const uint8_t *p = bdb_chunk_app_bytes(&a, &len);
    bdb_buf_append(&chunks[1], p, len);
    bdb_chunk_app_free(&a);
    rng_seed(77);
    for (size_t i = 0; i < N; i++) {
        unsigned shift = 10 + (unsigned)(rng() % 54); /* 300 gaps below 2^54 fit int64 */
        ts[i] = (i ? ts[i - 1] : INT64_MIN) + 1 + (int64_t)(rng() >> shift);
        vals[i] = from_bits(rng());
    }
    assert_int_equal(bdb_chunk_encode(ts, vals, N, &chunks[2]), BDB_OK);
    assert_int_equal(bdb_chunk_encode(ts, vals, 2, &chunks[3]), BDB_OK);

    /* Every strict truncation of a valid chunk is reported, never passed off as data. */
    for (int c = 0; c < 4; c++)
        for (size_t cut = 0; cut < chunks[c].len; cut++)
            assert_int_equal(decode_damaged(chunks[c].data, cut), BDB_ERR_CORRUPT);

    uint8_t *tmp = malloc(chunks[2].len);
    assert_non_null(tmp);
    size_t corrupt = 0;
    rng_seed(2024);
    for (int round = 0; round < 20000; round++) {
        const bdb_buf *src = &chunks[round % 4];
        memcpy(tmp, src->data, src->len);
        size_t n = src->len;
        int flips = 1 + (int)(rng() % 4);
        for (int f = 0; f < flips; f++) {
            size_t at = rng() % n;
            if (rng() % 2)
                tmp[at] ^= (uint8_t)(1u << (rng() % 8));
            else
                tmp[at] = (uint8_t)rng();
        }
        if (rng() % 4 == 0) n = rng() % n;
        corrupt += decode_damaged(tmp, n) == BDB_ERR_CORRUPT;
    }
    /* Most damage must be noticed; a flip in a value payload is not detectable. */
    assert_true(corrupt > 2500);
    free(tmp);
    for (int c = 0; c < 4; c++)
        bdb_buf_free(&chunks[c]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edge_values),
        cmocka_unit_test(test_timestamp_buckets),
        cmocka_unit_test(test_huge_gaps),
        cmocka_unit_test(test_equal_values),
        cmocka_unit_test(test_random_doubles),
        cmocka_unit_test(test_decimal_smaller_for_sensors),
        cmocka_unit_test(test_decimal_detection_exact),
        cmocka_unit_test(test_single_sample),
        cmocka_unit_test(test_empty_appender),
        cmocka_unit_test(test_max_samples),
        cmocka_unit_test(test_non_increasing_rejected),
        cmocka_unit_test(test_appender_small),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_corrupt_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
