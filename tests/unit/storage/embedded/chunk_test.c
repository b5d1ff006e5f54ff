/* chunk: round trips through every encoding and form, the encoder's choice (always the
 * smallest form), the PACKED parameters (delta or delta of delta, timestamp unit,
 * widths, escapes), sizes on telemetry-like data, the on-disk bytes of each encoding,
 * limits, and damaged input. Values are compared bit for bit: -0.0 must not come back
 * as 0.0. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "storage/embedded/chunk/chunk.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
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

/* Appends every sample to a fresh appender; checks the STREAM chunk decodes exactly
 * and returns its length. */
static size_t appended_len(const int64_t *ts, const double *vals, size_t n)
{
    bdb_chunk_app a;
    bdb_chunk_app_init(&a);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(bdb_chunk_app_append(&a, ts[i], vals[i]), BDB_OK);
    size_t len;
    const uint8_t *p = bdb_chunk_app_bytes(&a, &len);
    assert_int_equal(p[0], BDB_CHUNK_STREAM);
    check_decodes(p, len, ts, vals, n);
    bdb_chunk_app_free(&a);
    return len;
}

static int kind_of(const uint8_t *p)
{
    return bdb_chunk_kind(p[0]);
}

/* Encodes in one form; returns its length, or 0 if the form cannot hold the samples
 * (then nothing was appended). Whatever it writes must decode exactly. */
static size_t form_len(const int64_t *ts, const double *vals, size_t n, int form, bdb_buf *out)
{
    bdb_buf_reset(out);
    int rc = bdb_chunk_encode_as(ts, vals, n, form, out);
    if (rc != BDB_OK) {
        assert_int_equal(rc, BDB_ERR_INVALID);
        assert_int_equal(out->len, 0);
        return 0;
    }
    check_decodes(out->data, out->len, ts, vals, n);
    switch (form) {
    case BDB_CHUNK_FORM_XOR:
        assert_int_equal(out->data[0], BDB_CHUNK_XOR);
        break;
    case BDB_CHUNK_FORM_DECIMAL:
        assert_int_equal(out->data[0], BDB_CHUNK_DECIMAL);
        break;
    case BDB_CHUNK_FORM_DELTA:
        assert_int_equal(out->data[0] & (BDB_CHUNK_PACKED | BDB_CHUNK_PACKED_DOD),
                         BDB_CHUNK_PACKED);
        break;
    case BDB_CHUNK_FORM_DOD:
        assert_int_equal(out->data[0] & (BDB_CHUNK_PACKED | BDB_CHUNK_PACKED_DOD),
                         BDB_CHUNK_PACKED | BDB_CHUNK_PACKED_DOD);
        break;
    }
    return out->len;
}

/* Round trip through the appender, bdb_chunk_encode and every form; checks that the
 * encoder picked the smallest of XOR, DELTA and DOD. Returns the encoding the encoder
 * chose (bdb_chunk_kind) and, if asked, the XOR form's and the encoder's sizes. */
static int roundtrip(const int64_t *ts, const double *vals, size_t n, size_t *xor_len,
                     size_t *enc_len)
{
    bdb_chunk_app a;
    bdb_chunk_app_init(&a);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(bdb_chunk_app_append(&a, ts[i], vals[i]), BDB_OK);
    size_t alen;
    const uint8_t *ap = bdb_chunk_app_bytes(&a, &alen);
    assert_int_equal(ap[0], BDB_CHUNK_STREAM);
    assert_int_equal(bdb_chunk_count(ap, alen), n);
    check_decodes(ap, alen, ts, vals, n);

    /* A prefix in out must survive: encode appends. */
    bdb_buf out;
    bdb_buf_init(&out);
    bdb_buf_append(&out, "pre", 3);
    assert_int_equal(bdb_chunk_encode(ts, vals, n, &out), BDB_OK);
    assert_memory_equal(out.data, "pre", 3);
    size_t elen = out.len - 3;
    const uint8_t *ep = out.data + 3;
    int enc = kind_of(ep);
    check_decodes(ep, elen, ts, vals, n);
    /* The encoder writes XOR or PACKED, never the head's STREAM. */
    assert_true(enc == BDB_CHUNK_XOR || enc == BDB_CHUNK_PACKED);

    bdb_buf f;
    bdb_buf_init(&f);
    assert_int_equal(form_len(ts, vals, n, BDB_CHUNK_FORM_AUTO, &f), elen);
    assert_memory_equal(f.data, ep, elen);
    size_t xlen = form_len(ts, vals, n, BDB_CHUNK_FORM_XOR, &f);
    assert_int_equal(f.data[0], BDB_CHUNK_XOR);
    if (enc == BDB_CHUNK_XOR)
        assert_memory_equal(f.data, ep, elen);
    size_t dec = form_len(ts, vals, n, BDB_CHUNK_FORM_DECIMAL, &f);
    size_t delta = form_len(ts, vals, n, BDB_CHUNK_FORM_DELTA, &f);
    const int delta_first = f.len ? f.data[0] : 0;
    size_t dod = form_len(ts, vals, n, BDB_CHUNK_FORM_DOD, &f);
    /* The decimal forms stand or fall together, and only with non-decimal values. */
    assert_true((dec == 0) == (delta == 0) && (delta == 0) == (dod == 0));
    if (delta == 0)
        assert_int_equal(enc, BDB_CHUNK_XOR);
    size_t best = xlen;
    if (delta && delta < best)
        best = delta;
    if (dod && dod < best)
        best = dod;
    assert_int_equal(elen, best);
    if (enc == BDB_CHUNK_PACKED) {
        /* It is the form its flag names, byte for byte. */
        if (ep[0] & BDB_CHUNK_PACKED_DOD) {
            assert_int_equal(elen, dod);
            assert_memory_equal(f.data, ep, elen);
        } else {
            assert_int_equal(elen, delta);
            assert_int_equal(ep[0], delta_first);
        }
    }
    if (xor_len)
        *xor_len = xlen;
    if (enc_len)
        *enc_len = elen;
    bdb_buf_free(&f);
    bdb_buf_free(&out);
    bdb_chunk_app_free(&a);
    return enc;
}

/* The encoder's chunk: first byte and length. */
static size_t encoded(const int64_t *ts, const double *vals, size_t n, uint8_t *first)
{
    bdb_buf out;
    bdb_buf_init(&out);
    assert_int_equal(bdb_chunk_encode(ts, vals, n, &out), BDB_OK);
    size_t len = out.len;
    if (first)
        *first = out.data[0];
    bdb_buf_free(&out);
    return len;
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
    /* Integers make the encoder pick PACKED; roundtrip also runs the old DECIMAL form,
     * whose timestamps share the bucket code. */
    assert_int_equal(roundtrip(ts, ints, n, NULL, NULL), BDB_CHUNK_PACKED);
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
    size_t xlen, elen;
    roundtrip(ts, vals, N, &xlen, &elen);
    /* One bit for the regular timestamp and one for the repeated value. */
    assert_true(xlen <= 3 + 6 + 8 + 3 + (N * 2 + 7) / 8);
    assert_true(elen <= xlen);
    assert_true(appended_len(ts, vals, N) <= 3 + 6 + 8 + 5 + (N * 2 + 7) / 8);

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

static void test_packed_smaller_for_sensors(void **state)
{
    (void)state;
    enum { N = 8640 };
    static int64_t ts[N];
    static double vals[N];
    for (int d = 1; d <= 3; d++) {
        make_sensor(ts, vals, N, d, 100 + (uint64_t)d);
        size_t xlen, elen;
        assert_int_equal(roundtrip(ts, vals, N, &xlen, &elen), BDB_CHUNK_PACKED);
        assert_true(elen < xlen / 3);
        /* The head's STREAM: 9 bits of timestamp jitter and 9 of value step a sample */
        assert_true(appended_len(ts, vals, N) < 5 * (size_t)N / 2);
        /* 7 bits of timestamp jitter and 3 of value step a sample, far below XOR */
        assert_true(elen < 3 * (size_t)N / 2);
    }
    /* The plain 10 s, 0.1-step walk of the size report. */
    double v = 200;
    for (size_t i = 0; i < N; i++) {
        ts[i] = 1700000000000 + 10000 * (int64_t)i;
        v += (double)(int)(rng() % 3) - 1;
        vals[i] = v / 10;
    }
    size_t elen;
    assert_int_equal(roundtrip(ts, vals, N, NULL, &elen), BDB_CHUNK_PACKED);
    assert_true(elen < (size_t)N / 3); /* 2 bits a sample: the interval costs none */
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
    if (!isnan(spoiler))
        vals[N / 2] = spoiler;
    return roundtrip(ts, vals, N, NULL, NULL);
}

static void test_decimal_detection_exact(void **state)
{
    (void)state;
    for (int e = 0; e <= 15; e++)
        assert_int_equal(encode_with(e, 1000000, NAN), BDB_CHUNK_PACKED);
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
    assert_int_equal(encode_with(0, 500, 9007199254740991.0), BDB_CHUNK_PACKED);
    assert_int_equal(encode_with(0, 500, -9007199254740991.0), BDB_CHUNK_PACKED);
    assert_int_equal(encode_with(15, 500, 1e-15), BDB_CHUNK_PACKED);
    assert_int_equal(encode_with(2, -500000, -123.45), BDB_CHUNK_PACKED);
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
    assert_int_equal(roundtrip(ts, vals, BDB_CHUNK_MAX_SAMPLES, NULL, NULL), BDB_CHUNK_PACKED);

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
    /* the head holds a state per live series, its bytes beside it (db_int.h) */
    assert_true(sizeof(bdb_chunk_state) <= 40);
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

/* The head's STREAM chunks: exponents that grow, values that are no exact decimal,
 * mantissa jumps beyond every delta bucket, long runs of raw values; each decodes to
 * the same bits, and each costs what the layout says. */
static void test_stream_appender(void **state)
{
    (void)state;
    enum { N = 4000 };
    static int64_t ts[N];
    static double vals[N];
    for (size_t i = 0; i < N; i++)
        ts[i] = 1700000000000 + 10000 * (int64_t)i;

    /* More decimals as it goes (restarts at exponents 0, 1, 2, 3), then fewer (on the
     * chain at 3). */
    const double grow[] = {20, 21.5, 21.37, 21.375, 20, 21.5, 0, -7.125};
    assert_int_equal(appended_len(ts, grow, 8), appended_len(ts, grow, 8));
    /* 4 restarts of 10 bits + a varint byte or two, 4 deltas of at most 24 bits */
    assert_true(appended_len(ts, grow, 8) <= 3 + 9 + 4 * 3 + 4 * 3);

    /* No exact decimal: raw 64 bits each, and decimals after them start a chain. */
    const double odd[] = {1.0 / 3,     NAN,        INFINITY, -INFINITY, -0.0, 1e300,
                          DBL_MIN / 4, 0x1p53 + 2, 2.5,      1.0 / 7,   2.75, 3};
    size_t nodd = sizeof(odd) / sizeof(odd[0]);
    assert_true(appended_len(ts, odd, nodd) <= 3 + 9 + nodd * 9);

    /* Mantissa jumps beyond 32 bits restart the chain at the same exponent. */
    const double jump[] = {0, 1e15, -1e15, 1e15 + 1, 4503599627370495.0, -4503599627370495.0};
    appended_len(ts, jump, 6);

    /* Every delta bucket's edges. */
    const double edges[] = {
        0, -64, -1, 62, -2049, -1, 524286, -524289, 1.5e9, -6e8, 2147483647 - 6e8, 0, 1, 0};
    appended_len(ts, edges, sizeof(edges) / sizeof(edges[0]));

    /* A long run of random doubles (the search for an exponent backs off), then
     * decimals again, then random again. */
    rng_seed(77);
    for (size_t i = 0; i < N; i++)
        vals[i] = i >= 1500 && i < 2500 ? (double)(int64_t)(rng() % 100000) / 100
                                        : from_bits(rng() & 0x7fefffffffffffffull);
    size_t len = appended_len(ts, vals, N);
    assert_true(len <= 3 + 9 + 3000 * 9 + 1000 * 3 + 200);

    /* Any bits at all, NaN payloads included. */
    for (size_t i = 0; i < N; i++)
        vals[i] = from_bits(rng());
    appended_len(ts, vals, N);
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

    const uint8_t unknown[][4] = {{0, 1, 0, 0}, {4, 1, 0, 0}, {0x7f, 1, 0, 0}};
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

/* Builds a PACKED chunk by hand: header varints, then the bit stream from a string
 * of '0' and '1' (other characters are skipped). */
static void packed_chunk(bdb_buf *b, uint8_t first, uint64_t count, int64_t t0, int64_t m0,
                         int with_deltas, uint64_t tbase, int64_t vbase, int64_t d1,
                         const char *bits)
{
    bdb_buf_reset(b);
    bdb_buf_putc(b, first);
    bdb_buf_put_uvarint(b, count);
    bdb_buf_put_varint(b, t0);
    bdb_buf_put_varint(b, m0);
    if (!with_deltas)
        return;
    bdb_buf_put_uvarint(b, tbase);
    bdb_buf_put_varint(b, vbase);
    if (first & BDB_CHUNK_PACKED_DOD)
        bdb_buf_put_varint(b, d1);
    uint8_t byte = 0;
    unsigned nb = 0;
    for (const char *c = bits; *c; c++) {
        if (*c != '0' && *c != '1')
            continue;
        byte = (uint8_t)(byte << 1 | (*c == '1'));
        if (++nb == 8) {
            bdb_buf_putc(b, byte);
            byte = 0;
            nb = 0;
        }
    }
    if (nb)
        bdb_buf_putc(b, (uint8_t)(byte << (8 - nb)));
}

/* Decodes all of p; returns the number of samples or the error. */
static int decode_all(const uint8_t *p, size_t len, int64_t *ts, double *vals, size_t max)
{
    bdb_chunk_iter it;
    int rc = bdb_chunk_iter_init(&it, p, len);
    if (rc != BDB_OK)
        return rc;
    size_t n = 0;
    int64_t t;
    double v;
    while ((rc = bdb_chunk_iter_next(&it, &t, &v)) == 1) {
        if (n < max) {
            ts[n] = t;
            vals[n] = v;
        }
        n++;
    }
    return rc < 0 ? rc : (int)n;
}

static void test_bad_packed(void **state)
{
    (void)state;
    bdb_chunk_iter it;
    bdb_buf b;
    bdb_buf_init(&b);
    int64_t ts[4];
    double vals[4];

    /* Header: count 0, over the limit, unterminated; t0 or m0 missing. */
    const uint8_t count0[] = {BDB_CHUNK_PACKED, 0, 0, 0};
    assert_int_equal(bdb_chunk_iter_init(&it, count0, sizeof(count0)), BDB_ERR_CORRUPT);
    assert_int_equal(bdb_chunk_count(count0, sizeof(count0)), 0);
    const uint8_t count_big[] = {BDB_CHUNK_PACKED, 0x80, 0x80, 0x04, 0, 0};
    assert_int_equal(bdb_chunk_iter_init(&it, count_big, sizeof(count_big)), BDB_ERR_CORRUPT);
    assert_int_equal(bdb_chunk_count(count_big, sizeof(count_big)), 0);
    const uint8_t count_max[] = {BDB_CHUNK_PACKED, 0xff, 0xff, 0x03, 0};
    assert_int_equal(bdb_chunk_count(count_max, sizeof(count_max)), 65535);
    const uint8_t count_open[] = {BDB_CHUNK_PACKED, 0x81, 0x80, 0x80};
    assert_int_equal(bdb_chunk_iter_init(&it, count_open, sizeof(count_open)), BDB_ERR_CORRUPT);
    assert_int_equal(bdb_chunk_count(count_open, sizeof(count_open)), 0);
    const uint8_t no_m0[] = {BDB_CHUNK_PACKED, 1, 0};
    assert_int_equal(bdb_chunk_iter_init(&it, no_m0, sizeof(no_m0)), BDB_ERR_CORRUPT);
    assert_int_equal(bdb_chunk_count(no_m0, sizeof(no_m0)), 1);

    /* One sample needs no stream; the unit and exponent apply to it. */
    packed_chunk(&b, BDB_CHUNK_PACKED | 3 << 5 | 1, 1, -5, 7, 0, 0, 0, 0, "");
    assert_int_equal(decode_all(b.data, b.len, ts, vals, 4), 1);
    assert_true(ts[0] == -5000 && vals[0] == 0.7);
    /* t0 must stay inside int64 once scaled; m0 below 2^53. */
    packed_chunk(&b, BDB_CHUNK_PACKED | 3 << 5, 1, INT64_MAX / 1000, 1, 0, 0, 0, 0, "");
    assert_int_equal(decode_all(b.data, b.len, ts, vals, 4), 1);
    assert_true(ts[0] == INT64_MAX / 1000 * 1000);
    packed_chunk(&b, BDB_CHUNK_PACKED | 3 << 5, 1, INT64_MAX / 1000 + 1, 1, 0, 0, 0, 0, "");
    assert_int_equal(bdb_chunk_iter_init(&it, b.data, b.len), BDB_ERR_CORRUPT);
    packed_chunk(&b, BDB_CHUNK_PACKED | 1 << 5, 1, INT64_MIN / 10, 1, 0, 0, 0, 0, "");
    assert_int_equal(decode_all(b.data, b.len, ts, vals, 4), 1);
    assert_true(ts[0] == INT64_MIN / 10 * 10);
    packed_chunk(&b, BDB_CHUNK_PACKED | 1 << 5, 1, INT64_MIN / 10 - 1, 1, 0, 0, 0, 0, "");
    assert_int_equal(bdb_chunk_iter_init(&it, b.data, b.len), BDB_ERR_CORRUPT);
    packed_chunk(&b, BDB_CHUNK_PACKED, 1, 0, (int64_t)1 << 53, 0, 0, 0, 0, "");
    assert_int_equal(bdb_chunk_iter_init(&it, b.data, b.len), BDB_ERR_CORRUPT);
    packed_chunk(&b, BDB_CHUNK_PACKED, 1, 0, -((int64_t)1 << 53) + 1, 0, 0, 0, 0, "");
    assert_int_equal(decode_all(b.data, b.len, ts, vals, 4), 1);
    assert_true(vals[0] == -9007199254740991.0);

    /* Two samples or more need the 12 width bits. */
    packed_chunk(&b, BDB_CHUNK_PACKED, 2, 0, 0, 1, 10, 1, 0, "");
    assert_int_equal(bdb_chunk_iter_init(&it, b.data, b.len), BDB_ERR_CORRUPT);
    packed_chunk(&b, BDB_CHUNK_PACKED, 2, 0, 0, 1, 10, 1, 0, "000000 00");
    assert_int_equal(bdb_chunk_iter_init(&it, b.data, b.len), BDB_ERR_CORRUPT);
    packed_chunk(&b, BDB_CHUNK_PACKED, 3, 100, 5, 1, 10, -2, 0, "000000 000000");
    assert_int_equal(decode_all(b.data, b.len, ts, vals, 4), 3);
    assert_true(ts[2] == 120 && vals[2] == 1.0);
    /* Timestamps must increase and stay inside int64. */
    packed_chunk(&b, BDB_CHUNK_PACKED, 2, 100, 5, 1, 0, 0, 0, "000000 000000");
    assert_int_equal(decode_all(b.data, b.len, ts, vals, 4), BDB_ERR_CORRUPT);
    packed_chunk(&b, BDB_CHUNK_PACKED, 3, INT64_MAX - 1, 5, 1, 1, 0, 0, "000000 000000");
    assert_int_equal(bdb_chunk_iter_init(&it, b.data, b.len), BDB_OK);
    int64_t t;
    double v;
    assert_int_equal(bdb_chunk_iter_next(&it, &t, &v), 1);
    assert_int_equal(bdb_chunk_iter_next(&it, &t, &v), 1);
    assert_true(t == INT64_MAX);
    assert_int_equal(bdb_chunk_iter_next(&it, &t, &v), BDB_ERR_CORRUPT);
    assert_int_equal(bdb_chunk_iter_next(&it, &t, &v), BDB_ERR_CORRUPT);
    packed_chunk(&b, BDB_CHUNK_PACKED | 3 << 5, 2, INT64_MAX / 1000 - 1, 5, 1, 2, 0, 0,
                 "000000 000000");
    assert_int_equal(decode_all(b.data, b.len, ts, vals, 4), BDB_ERR_CORRUPT);
    packed_chunk(&b, BDB_CHUNK_PACKED, 2, 0, 5, 1, UINT64_MAX, 0, 0, "000000 000000");
    assert_int_equal(decode_all(b.data, b.len, ts, vals, 4), BDB_ERR_CORRUPT);
    /* A mantissa walking past 2^53, directly or through deltas of deltas. */
    packed_chunk(&b, BDB_CHUNK_PACKED, 2, 0, ((int64_t)1 << 53) - 1, 1, 1, 1, 0, "000000 000000");
    assert_int_equal(decode_all(b.data, b.len, ts, vals, 4), BDB_ERR_CORRUPT);
    packed_chunk(&b, BDB_CHUNK_PACKED | BDB_CHUNK_PACKED_DOD, 4, 0, 0, 1, 1, INT64_MAX, 1,
                 "000000 000000");
    assert_int_equal(decode_all(b.data, b.len, ts, vals, 4), BDB_ERR_CORRUPT);
    /* Deltas of deltas: d1 for sample 1, then the base as the delta's change. */
    packed_chunk(&b, BDB_CHUNK_PACKED | BDB_CHUNK_PACKED_DOD, 4, 0, 10, 1, 1, 2, 3,
                 "000000 000000");
    assert_int_equal(decode_all(b.data, b.len, ts, vals, 4), 4);
    assert_true(vals[0] == 10 && vals[1] == 13 && vals[2] == 18 && vals[3] == 25);

    /* Codes: width 2 for timestamps, 3 for values; all ones escapes. */
    packed_chunk(&b, BDB_CHUNK_PACKED, 3, 0, 0, 1, 10, 0, 0,
                 "000010 000011  01 010  11 000000 1 111 000101 101011");
    assert_int_equal(decode_all(b.data, b.len, ts, vals, 4), 3);
    assert_true(ts[1] == 9 && vals[1] == 1.0);    /* zigzag 1 = -1, zigzag 2 = +1 */
    assert_true(ts[2] == 18 && vals[2] == -21.0); /* escaped 1 = -1, escaped 43 = -22 */
    /* An escape whose bits are missing; one with L = 64. */
    packed_chunk(&b, BDB_CHUNK_PACKED, 2, 0, 0, 1, 10, 0, 0, "000001 000000 1 111111");
    assert_int_equal(decode_all(b.data, b.len, ts, vals, 4), BDB_ERR_CORRUPT);
    char bits[200];
    snprintf(bits, sizeof bits, "000001 000000 1 111111 %s",
             "0000000000000000000000000000000000000000000000000000000000000100");
    packed_chunk(&b, BDB_CHUNK_PACKED, 2, 0, 0, 1, 10, 0, 0, bits);
    assert_int_equal(decode_all(b.data, b.len, ts, vals, 4), 2);
    assert_true(ts[1] == 12);
    /* The widest codes (63 bits) read across word boundaries. */
    snprintf(bits, sizeof bits, "111111 111111 %063d %062d1", 0, 0);
    packed_chunk(&b, BDB_CHUNK_PACKED, 2, 0, 0, 1, 10, 5, 0, bits);
    assert_int_equal(decode_all(b.data, b.len, ts, vals, 4), 2);
    assert_true(ts[1] == 10 && vals[1] == 4.0);
    b.len--;
    assert_int_equal(decode_all(b.data, b.len, ts, vals, 4), BDB_ERR_CORRUPT);
    bdb_buf_free(&b);
}

/* Reads the two code widths of a PACKED chunk of two samples or more. */
static void packed_widths(const uint8_t *p, size_t len, unsigned *tw, unsigned *vw)
{
    bdb_dec d;
    bdb_dec_init(&d, p + 1, len - 1);
    for (int i = 0; i < 5 + ((p[0] & BDB_CHUNK_PACKED_DOD) != 0); i++)
        bdb_dec_uvarint(&d);
    assert_int_equal(d.err, 0);
    assert_true(bdb_dec_left(&d) >= 2);
    unsigned w = (unsigned)d.p[0] << 8 | d.p[1];
    *tw = w >> 10;
    *vw = w >> 4 & 63;
}

static size_t encode_widths(const int64_t *ts, const double *vals, size_t n, uint8_t *first,
                            unsigned *tw, unsigned *vw)
{
    bdb_buf out;
    bdb_buf_init(&out);
    assert_int_equal(bdb_chunk_encode(ts, vals, n, &out), BDB_OK);
    assert_int_equal(kind_of(out.data), BDB_CHUNK_PACKED);
    packed_widths(out.data, out.len, tw, vw);
    *first = out.data[0];
    size_t len = out.len;
    bdb_buf_free(&out);
    return len;
}

static void test_packed_choices(void **state)
{
    (void)state;
    enum { N = 720 };
    static int64_t ts[N];
    static double vals[N], walk[N];
    uint8_t first;
    unsigned tw, vw;
    size_t len;

    /* The unit is the coarsest power of ten up to 1000 dividing every timestamp. */
    static const int64_t p10[] = {1, 10, 100, 1000};
    for (int neg = 0; neg < 2; neg++)
        for (unsigned k = 0; k < 4; k++) {
            for (size_t i = 0; i < 100; i++) {
                ts[i] = p10[k] * ((neg ? -1700000000123 : 1700000000123) + 7919 * (int64_t)i);
                vals[i] = (double)(i % 7);
            }
            assert_int_equal(roundtrip(ts, vals, 100, NULL, NULL), BDB_CHUNK_PACKED);
            encoded(ts, vals, 100, &first);
            assert_int_equal(first >> 5 & 3, k);
        }
    const int64_t far[] = {INT64_MIN / 1000 * 1000, -1000, 0, INT64_MAX / 1000 * 1000};
    const double fv[] = {1, 2, 3, 4};
    for (size_t k = 1; k <= 4; k++)
        assert_int_equal(roundtrip(far + 4 - k, fv, k, NULL, NULL), BDB_CHUNK_PACKED);
    encoded(far, fv, 4, &first);
    assert_int_equal(first >> 5 & 3, 3);

    /* A random walk: deltas, 7 bits for steps of -50..50, no bits for the interval. */
    rng_seed(31);
    int64_t m = 5000;
    for (size_t i = 0; i < N; i++) {
        ts[i] = 1700000000321 + 10000 * (int64_t)i;
        m += (int64_t)(rng() % 101) - 50;
        walk[i] = (double)m / 100;
    }
    assert_int_equal(roundtrip(ts, walk, N, NULL, NULL), BDB_CHUNK_PACKED);
    encode_widths(ts, walk, N, &first, &tw, &vw);
    assert_int_equal(first & 0x1f, 2);
    assert_true(tw == 0 && vw == 7);
    /* A smooth curve: deltas of deltas, here 2 but for noise of -2..2. */
    for (size_t i = 0; i < N; i++)
        vals[i] = (double)(int64_t)(i * i + rng() % 2) / 10;
    assert_int_equal(roundtrip(ts, vals, N, NULL, NULL), BDB_CHUNK_PACKED);
    encode_widths(ts, vals, N, &first, &tw, &vw);
    assert_int_equal(first & 0x1f, BDB_CHUNK_PACKED_DOD | 1);
    assert_true(vw <= 3);
    /* A counter at a constant rate: deltas, all equal, cost nothing. */
    for (size_t i = 0; i < N; i++)
        vals[i] = (double)(1000000 + 17 * (int64_t)i);
    assert_int_equal(roundtrip(ts, vals, N, NULL, &len), BDB_CHUNK_PACKED);
    encode_widths(ts, vals, N, &first, &tw, &vw);
    assert_int_equal(first & 0x1f, 0);
    assert_true(tw == 0 && vw == 0 && len <= 17); /* 15 bytes of header, 12 bits of widths */
    /* Constant values at a regular interval: the header is all. */
    for (size_t i = 0; i < N; i++)
        vals[i] = 42.125;
    assert_int_equal(roundtrip(ts, vals, N, NULL, &len), BDB_CHUNK_PACKED);
    assert_true(len <= 17);

    /* Outliers escape instead of widening every code: spikes in the walk ... */
    size_t plain = encode_widths(ts, walk, N, &first, &tw, &vw);
    memcpy(vals, walk, sizeof(walk));
    vals[100] = 1e6;
    vals[500] = -1e6;
    vals[501] = 1e6;
    assert_int_equal(roundtrip(ts, vals, N, NULL, NULL), BDB_CHUNK_PACKED);
    size_t spiky = encode_widths(ts, vals, N, &first, &tw, &vw);
    assert_int_equal(vw, 7);
    assert_true(spiky <= plain + 4 * 9);
    /* ... and gaps in regular timestamps, on one side of the median only. */
    for (size_t i = 0; i < N; i++)
        ts[i] =
            1700000000321 + 10000 * (int64_t)i + (i >= 300 ? 10000 : 0) + (i >= 600 ? 3600000 : 0);
    assert_int_equal(roundtrip(ts, walk, N, NULL, NULL), BDB_CHUNK_PACKED);
    size_t gappy = encode_widths(ts, walk, N, &first, &tw, &vw);
    assert_true(tw == 1 && vw == 7);
    assert_true(gappy <= plain + N / 8 + 2 * 9);
    /* With few samples too (the median is then exact). */
    for (size_t n = 3; n <= 40; n++) {
        assert_int_equal(roundtrip(ts + 290, walk, n, NULL, NULL), BDB_CHUNK_PACKED);
        encode_widths(ts + 290, walk, n, &first, &tw, &vw);
        assert_true(tw <= 1);
    }

    /* Codes wider than 57 bits: random gaps near 2^59 and mantissas of 53 bits. */
    rng_seed(8);
    for (size_t i = 0; i < 12; i++) {
        ts[i] = (i ? ts[i - 1] : INT64_MIN) + 1 + (int64_t)(rng() >> 5);
        vals[i] = (double)((int64_t)(rng() >> 11) - ((int64_t)1 << 52)) * (i % 2 ? 1 : -1);
    }
    assert_int_equal(roundtrip(ts, vals, 12, NULL, NULL), BDB_CHUNK_PACKED);
    for (size_t n = 2; n <= 12; n++)
        roundtrip(ts, vals, n, NULL, NULL);
    encode_widths(ts, vals, 12, &first, &tw, &vw);
    assert_true(tw > 57 && vw > 50);
    /* The largest gap of all: a delta of 2^64 - 1 escapes with L = 64. */
    const int64_t span[] = {INT64_MIN, INT64_MIN + 1, INT64_MIN + 2, INT64_MAX};
    const double sv[] = {1, 2, 3, 4};
    assert_int_equal(roundtrip(span, sv, 4, NULL, NULL), BDB_CHUNK_PACKED);
}

/* Series like the benchmark's (bench/loadgen.c): readings with two decimals walking in
 * steps of -0.50..0.50, one every 10 s exactly, each series at its own phase. */
static void make_bench_series(int64_t *ts, double *vals, size_t n, int64_t phase)
{
    double x = floor((double)(rng() >> 11) / 9007199254740992.0 * 10000.0) / 100.0;
    for (size_t i = 0; i < n; i++) {
        ts[i] = 1795319400000 + phase + 10000 * (int64_t)i;
        double step = floor((double)(rng() >> 11) / 9007199254740992.0 * 101.0 - 50.0) / 100.0;
        x = round((x + step) * 100.0) / 100.0;
        vals[i] = x;
    }
}

/* Bytes per 100 samples of the head's STREAM chunks on the bench's walk: measured 125.9
 * (XOR, which the head appended before, takes 6.53 bytes a sample here). */
#define APPENDED_720 130

static void test_telemetry_sizes(void **state)
{
    (void)state;
    enum { N = 720, SERIES = 100 };
    static int64_t ts[N];
    static double vals[N];
    rng_seed(2718);
    size_t total30 = 0, total720 = 0;
    for (int s = 0; s < SERIES; s++) {
        make_bench_series(ts, vals, N, (s * 7919) % 10000);
        assert_int_equal(roundtrip(ts, vals, 30, NULL, NULL), BDB_CHUNK_PACKED);
        total30 += encoded(ts, vals, 30, NULL);
        total720 += encoded(ts, vals, N, NULL);
    }
    /* Measured 1.34 and 0.90 bytes a sample (the old DECIMAL chunks: 1.73 and 1.28). */
    assert_true(total30 <= SERIES * 30 * 140 / 100);
    assert_true(total720 <= SERIES * N * 93 / 100);
    /* The head's STREAM chunks of the same series: APPENDED_720 bytes a sample. */
    size_t head720 = 0;
    rng_seed(2718);
    for (int s = 0; s < SERIES; s++) {
        make_bench_series(ts, vals, N, (s * 7919) % 10000);
        head720 += appended_len(ts, vals, N);
    }
    assert_true(head720 <= SERIES * N * APPENDED_720 / 100);

    /* A counter: increments of 0..199 every 10 s, 8 bits each. */
    double c = 123456;
    for (size_t i = 0; i < N; i++) {
        ts[i] = 1795319400000 + 10000 * (int64_t)i;
        c += (double)(rng() % 200);
        vals[i] = c;
    }
    assert_true(encoded(ts, vals, N, NULL) <= N * 105 / 100);
}

/* Chunks written by earlier versions keep decoding to the same samples, and the PACKED
 * layout stays what the format comment in chunk.c says. */
static void test_format_bytes(void **state)
{
    (void)state;
    const int64_t ts[] = {1700000000000, 1700000010000, 1700000020005, 1700000029990,
                          1700000040000};
    const double dec_vals[] = {23.7, 23.8, -1.25, 1013.25, 0.01};
    const uint8_t old_decimal[] = {0x02, 0x05, 0x00, 0x02, 0x0c, 0x80, 0xa0, 0xab, 0xfe, 0xf9,
                                   0x62, 0x90, 0x4e, 0x82, 0xdb, 0x23, 0x20, 0x84, 0x25, 0x14,
                                   0xa5, 0x27, 0xa6, 0xd8, 0x0c, 0xab, 0xe0, 0x18};
    check_decodes(old_decimal, sizeof(old_decimal), ts, dec_vals, 5);
    bdb_buf b;
    bdb_buf_init(&b);
    assert_int_equal(bdb_chunk_encode_as(ts, dec_vals, 5, BDB_CHUNK_FORM_DECIMAL, &b), BDB_OK);
    assert_int_equal(b.len, sizeof(old_decimal));
    assert_memory_equal(b.data, old_decimal, sizeof(old_decimal));

    const double xor_vals[] = {23.7, 23.7, -1.0 / 3, 1e300, 0.1};
    const uint8_t old_xor[] = {0x01, 0x05, 0x00, 0x80, 0xa0, 0xab, 0xfe, 0xf9, 0x62, 0x40,
                               0x37, 0xb3, 0x33, 0x33, 0x33, 0x33, 0x33, 0x90, 0x4e, 0x41,
                               0x70, 0x7f, 0xff, 0xc5, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xce,
                               0xd9, 0x80, 0x0c, 0x1e, 0x2b, 0x16, 0x9d, 0xd5, 0x52, 0x0c,
                               0x98, 0xcc, 0x83, 0x1c, 0xfb, 0x4a, 0x23, 0x33, 0xd8, 0x0c};
    check_decodes(old_xor, sizeof(old_xor), ts, xor_vals, 5);
    bdb_buf_reset(&b);
    assert_int_equal(bdb_chunk_encode(ts, xor_vals, 5, &b), BDB_OK);
    assert_int_equal(b.len, sizeof(old_xor));
    assert_memory_equal(b.data, old_xor, sizeof(old_xor));

    /* STREAM, as chunk.c lays it out: ts 1000 (zigzag varint d0 0f), the value 1.5 as a
     * chain at exponent 1 ('111110' 0001, varint 1e: zigzag 15), ts delta 1000
     * (varint e8 07), the same mantissa ('0'). */
    const int64_t sts[] = {1000, 2000};
    const double svals[] = {1.5, 1.5};
    const uint8_t stream[] = {0x03, 0x02, 0x00, 0xd0, 0x0f, 0xf8, 0x47, 0xba, 0x01, 0xc0};
    bdb_chunk_app a;
    bdb_chunk_app_init(&a);
    assert_int_equal(bdb_chunk_app_append(&a, sts[0], svals[0]), BDB_OK);
    assert_int_equal(bdb_chunk_app_append(&a, sts[1], svals[1]), BDB_OK);
    size_t slen;
    const uint8_t *sp = bdb_chunk_app_bytes(&a, &slen);
    assert_int_equal(slen, sizeof(stream));
    assert_memory_equal(sp, stream, sizeof(stream));
    check_decodes(stream, sizeof(stream), sts, svals, 2);
    bdb_chunk_app_free(&a);

    /* Unit 1000 ms, exponent 1; count 4, t0 1700000000 s, m0 237, tbase 10 s, vbase 0;
     * widths 0 and 3, then the codes of +1, -2, +3 (zigzag 2, 3, 6). */
    const int64_t pts[] = {1700000000000, 1700000010000, 1700000020000, 1700000030000};
    const double pvals[] = {23.7, 23.8, 23.6, 23.9};
    const uint8_t packed[] = {0xe1, 0x04, 0x80, 0xc4, 0x9f, 0xd5, 0x0c,
                              0xda, 0x03, 0x0a, 0x00, 0x00, 0x34, 0xf0};
    bdb_buf_reset(&b);
    assert_int_equal(bdb_chunk_encode(pts, pvals, 4, &b), BDB_OK);
    assert_int_equal(b.len, sizeof(packed));
    assert_memory_equal(b.data, packed, sizeof(packed));
    check_decodes(packed, sizeof(packed), pts, pvals, 4);
    bdb_buf_free(&b);
}

static void test_encode_as(void **state)
{
    (void)state;
    const int64_t ts[] = {1000, 2000, 3000};
    const double dec[] = {1.5, 2.5, 3.5}, odd[] = {1.5, 1.0 / 3, 3.5}, negz[] = {1, -0.0, 2};
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_append(&b, "x", 1);
    static const int forms[] = {BDB_CHUNK_FORM_DECIMAL, BDB_CHUNK_FORM_DELTA, BDB_CHUNK_FORM_DOD};
    for (size_t f = 0; f < 3; f++) {
        assert_int_equal(bdb_chunk_encode_as(ts, odd, 3, forms[f], &b), BDB_ERR_INVALID);
        assert_int_equal(bdb_chunk_encode_as(ts, negz, 3, forms[f], &b), BDB_ERR_INVALID);
        assert_int_equal(bdb_chunk_encode_as(ts, dec, 0, forms[f], &b), BDB_ERR_INVALID);
        assert_int_equal(b.len, 1);
    }
    assert_int_equal(bdb_chunk_encode_as(ts, dec, 3, 99, &b), BDB_ERR_INVALID);
    assert_int_equal(bdb_chunk_encode_as(ts, dec, 3, -1, &b), BDB_ERR_INVALID);
    assert_int_equal(b.len, 1);
    for (size_t f = 0; f < 3; f++) {
        b.len = 1;
        assert_int_equal(bdb_chunk_encode_as(ts, dec, 3, forms[f], &b), BDB_OK);
        check_decodes(b.data + 1, b.len - 1, ts, dec, 3);
    }
    /* Deltas of deltas with one or two samples. */
    for (size_t n = 1; n <= 2; n++) {
        bdb_buf_reset(&b);
        assert_int_equal(bdb_chunk_encode_as(ts, dec, n, BDB_CHUNK_FORM_DOD, &b), BDB_OK);
        assert_true(b.data[0] & BDB_CHUNK_PACKED_DOD);
        check_decodes(b.data, b.len, ts, dec, n);
    }
    roundtrip(ts, odd, 3, NULL, NULL);
    roundtrip(ts, negz, 3, NULL, NULL);
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
        if (rc == 0)
            assert_int_equal(got, count);
    } else {
        assert_int_equal(rc, BDB_ERR_CORRUPT);
    }
    free(p);
    return rc;
}

static void test_corrupt_input(void **state)
{
    (void)state;
    enum { N = 300, CHUNKS = 9 };
    int64_t ts[N];
    double vals[N];
    bdb_buf chunks[CHUNKS];
    for (int c = 0; c < CHUNKS; c++)
        bdb_buf_init(&chunks[c]);
    /* PACKED deltas with jittered timestamps, and the same in the old DECIMAL form. */
    make_sensor(ts, vals, N, 2, 42);
    assert_int_equal(bdb_chunk_encode(ts, vals, N, &chunks[0]), BDB_OK);
    assert_int_equal(chunks[0].data[0] & 0xf0, BDB_CHUNK_PACKED);
    assert_int_equal(bdb_chunk_encode_as(ts, vals, N, BDB_CHUNK_FORM_DECIMAL, &chunks[1]), BDB_OK);
    bdb_chunk_app a;
    bdb_chunk_app_init(&a);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(bdb_chunk_app_append(&a, ts[i], vals[i]), BDB_OK);
    size_t len;
    const uint8_t *p = bdb_chunk_app_bytes(&a, &len);
    bdb_buf_append(&chunks[2], p, len);
    bdb_chunk_app_free(&a);
    /* PACKED deltas of deltas in seconds, with a gap and spikes (escapes). */
    for (size_t i = 0; i < N; i++) {
        ts[i] = 1700000000000 + 60000 * (int64_t)i + (i > 200 ? 3600000 : 0);
        vals[i] = (double)(int64_t)(3 * i * i + rng() % 3 + (i % 97 == 5 ? 100000 : 0)) / 1000;
    }
    assert_int_equal(bdb_chunk_encode(ts, vals, N, &chunks[3]), BDB_OK);
    assert_int_equal(chunks[3].data[0] & 0xf0, BDB_CHUNK_PACKED | BDB_CHUNK_PACKED_DOD | 0x60);
    /* PACKED with one and with two samples. */
    assert_int_equal(bdb_chunk_encode(ts, vals, 1, &chunks[4]), BDB_OK);
    assert_int_equal(bdb_chunk_encode(ts, vals, 2, &chunks[5]), BDB_OK);
    assert_int_equal(kind_of(chunks[5].data), BDB_CHUNK_PACKED);
    /* XOR of any bits with wide gaps; PACKED with codes wider than 57 bits. */
    rng_seed(77);
    for (size_t i = 0; i < N; i++) {
        unsigned shift = 10 + (unsigned)(rng() % 54); /* 300 gaps below 2^54 fit int64 */
        ts[i] = (i ? ts[i - 1] : INT64_MIN) + 1 + (int64_t)(rng() >> shift);
        vals[i] = from_bits(rng());
    }
    assert_int_equal(bdb_chunk_encode(ts, vals, N, &chunks[6]), BDB_OK);
    assert_int_equal(bdb_chunk_encode(ts, vals, 2, &chunks[7]), BDB_OK);
    for (size_t i = 0; i < 12; i++) {
        ts[i] = (i ? ts[i - 1] : INT64_MIN) + 1 + (int64_t)(rng() >> 5);
        vals[i] = (double)((int64_t)(rng() >> 11) - ((int64_t)1 << 52));
    }
    assert_int_equal(bdb_chunk_encode(ts, vals, 12, &chunks[8]), BDB_OK);
    assert_int_equal(kind_of(chunks[8].data), BDB_CHUNK_PACKED);

    /* Every strict truncation of a valid chunk is reported, never passed off as data. */
    size_t biggest = 0;
    for (int c = 0; c < CHUNKS; c++) {
        for (size_t cut = 0; cut < chunks[c].len; cut++)
            assert_int_equal(decode_damaged(chunks[c].data, cut), BDB_ERR_CORRUPT);
        assert_int_equal(decode_damaged(chunks[c].data, chunks[c].len), 0);
        if (chunks[c].len > biggest)
            biggest = chunks[c].len;
    }

    uint8_t *tmp = malloc(biggest);
    assert_non_null(tmp);
    size_t corrupt[CHUNKS] = {0};
    rng_seed(2024);
    for (int round = 0; round < 45000; round++) {
        const bdb_buf *src = &chunks[round % CHUNKS];
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
        if (rng() % 4 == 0)
            n = rng() % n;
        corrupt[round % CHUNKS] += decode_damaged(tmp, n) == BDB_ERR_CORRUPT;
    }
    /* Most damage must be noticed; a flip in a value payload is not detectable. */
    for (int c = 0; c < CHUNKS; c++)
        assert_true(corrupt[c] > 45000 / CHUNKS / 8);
    free(tmp);
    for (int c = 0; c < CHUNKS; c++)
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
        cmocka_unit_test(test_packed_smaller_for_sensors),
        cmocka_unit_test(test_decimal_detection_exact),
        cmocka_unit_test(test_single_sample),
        cmocka_unit_test(test_empty_appender),
        cmocka_unit_test(test_max_samples),
        cmocka_unit_test(test_non_increasing_rejected),
        cmocka_unit_test(test_appender_small),
        cmocka_unit_test(test_stream_appender),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_corrupt_input),
        cmocka_unit_test(test_bad_packed),
        cmocka_unit_test(test_packed_choices),
        cmocka_unit_test(test_telemetry_sizes),
        cmocka_unit_test(test_format_bytes),
        cmocka_unit_test(test_encode_as),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
