/* libFuzzer harness for chunks. Two jobs per input:
 *  1. decode the raw bytes as a chunk of any encoding: never crash or overread,
 *     samples strictly increasing, a clean end only after exactly the header's count;
 *     and again as a bare PACKED chunk of a block file;
 *  2. derive samples from the bytes, encode them with the appender (STREAM),
 *     bdb_chunk_encode and every form of bdb_chunk_encode_as (XOR, old DECIMAL, PACKED
 *     deltas and deltas of deltas), require all to decode to the same bits and the
 *     encoder to pick the smallest of XOR and the two PACKED forms.
 * Needs src/storage/embedded/chunk*.c and src/common/buf.c (and -lm). */
#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "storage/embedded/chunk/chunk.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SAMPLES 2048

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            abort();                                                                               \
    } while (0)

static void decode_any(const uint8_t *p, size_t len)
{
    bdb_chunk_iter it;
    int rc = bdb_chunk_iter_init(&it, p, len);
    if (rc != BDB_OK) {
        CHECK(rc == BDB_ERR_CORRUPT);
        return;
    }
    uint32_t count = bdb_chunk_count(p, len), got = 0;
    int64_t t, prev = 0;
    double v;
    while ((rc = bdb_chunk_iter_next(&it, &t, &v)) == 1) {
        CHECK(got == 0 || t > prev);
        prev = t;
        CHECK(++got <= count);
    }
    CHECK(rc == 0 || rc == BDB_ERR_CORRUPT);
    CHECK(rc != 0 || got == count);
}

/* The raw bytes as a bare PACKED chunk of a block (version 3), with a first timestamp
 * and a count taken from the input's first bytes: the same promises as decode_any. */
static void decode_bare(const uint8_t *p, size_t len)
{
    if (len < 4)
        return;
    int64_t min_ts =
        (int64_t)((uint64_t)p[len - 1] << 40 | (uint64_t)p[len - 2] << 16) - (1ll << 46);
    uint32_t count = (uint32_t)(p[len - 3] | p[len - 4] << 8);
    bdb_chunk_iter it;
    int rc = bdb_chunk_iter_init_bare(&it, p, len - 4, min_ts, count);
    if (rc != BDB_OK) {
        CHECK(rc == BDB_ERR_CORRUPT);
        return;
    }
    uint32_t got = 0;
    int64_t t, prev = 0;
    double v;
    while ((rc = bdb_chunk_iter_next(&it, &t, &v)) == 1) {
        CHECK(got == 0 ? t == min_ts : t > prev);
        prev = t;
        CHECK(++got <= count);
    }
    CHECK(rc == 0 || rc == BDB_ERR_CORRUPT);
    CHECK(rc != 0 || got == count);
}

/* Big-endian bytes from the input, zeros once it runs out. */
typedef struct {
    const uint8_t *p;
    size_t n;
} source;

static uint64_t take(source *s, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++) {
        v <<= 8;
        if (s->n) {
            v |= *s->p++;
            s->n--;
        }
    }
    return v;
}

static void check_decodes(const uint8_t *p, size_t len, const int64_t *ts, const double *vals,
                          size_t n)
{
    bdb_chunk_iter it;
    CHECK(bdb_chunk_iter_init(&it, p, len) == BDB_OK);
    CHECK(bdb_chunk_count(p, len) == n);
    int64_t t;
    double v;
    for (size_t i = 0; i < n; i++) {
        CHECK(bdb_chunk_iter_next(&it, &t, &v) == 1);
        CHECK(t == ts[i] && memcmp(&v, &vals[i], sizeof(v)) == 0);
    }
    CHECK(bdb_chunk_iter_next(&it, &t, &v) == 0);
    /* A PACKED chunk as a block stores it, bare: the same samples, and the header must
     * agree with the entry. */
    size_t rest;
    int br = bdb_chunk_bare_offset(p, len, ts[0], (uint32_t)n, &rest);
    if (bdb_chunk_kind(p[0]) != BDB_CHUNK_PACKED) {
        CHECK(br == BDB_ERR_NOTFOUND);
        return;
    }
    CHECK(br == BDB_OK && rest > 1 && rest <= len);
    CHECK(bdb_chunk_bare_offset(p, len, ts[0], (uint32_t)n + 1, &rest) == BDB_ERR_INVALID);
    CHECK(bdb_chunk_bare_offset(p, len, ts[0] ^ 1, (uint32_t)n, &rest) == BDB_ERR_INVALID);
    CHECK(bdb_chunk_bare_offset(p, len, ts[0], (uint32_t)n, &rest) == BDB_OK);
    static uint8_t bare[1 << 20];
    if (len - rest + 1 > sizeof bare)
        return;
    bare[0] = p[0];
    memcpy(bare + 1, p + rest, len - rest);
    CHECK(bdb_chunk_iter_init_bare(&it, bare, len - rest + 1, ts[0], (uint32_t)n) == BDB_OK);
    for (size_t i = 0; i < n; i++) {
        CHECK(bdb_chunk_iter_next(&it, &t, &v) == 1);
        CHECK(t == ts[i] && memcmp(&v, &vals[i], sizeof(v)) == 0);
    }
    CHECK(bdb_chunk_iter_next(&it, &t, &v) == 0);
}

/* Encodes in one form and checks the bytes; returns the length, 0 if the form cannot
 * hold the samples. */
static size_t check_form(const int64_t *ts, const double *vals, size_t n, int form, bdb_buf *out)
{
    out->len = 0;
    int rc = bdb_chunk_encode_as(ts, vals, n, form, out);
    if (rc != BDB_OK) {
        CHECK(rc == BDB_ERR_INVALID && out->len == 0);
        return 0;
    }
    check_decodes(out->data, out->len, ts, vals, n);
    return out->len;
}

/* The first byte picks the value style (bits 0-1), the timestamp unit (bits 2-3: the
 * timestamps are multiples of 10^k ms) and the decimal exponent (bits 4-7); then per
 * sample one control byte, a delta of 1 to 4 bytes (optionally shifted, to reach the
 * wide buckets) and the value's bytes. */
static void roundtrip_derived(const uint8_t *data, size_t size)
{
    static int64_t ts[MAX_SAMPLES];
    static double vals[MAX_SAMPLES];
    static const double pow10[16] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                     1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
    static const int64_t units[4] = {1, 10, 100, 1000};
    if (size < 9)
        return;
    source s = {data, size};
    unsigned mode = (unsigned)take(&s, 1);
    unsigned e = mode >> 4;
    int64_t unit = units[(mode >> 2) & 3];
    int64_t t = (int64_t)take(&s, 8);
    t -= t % unit;
    int64_t mant = 0;
    size_t n = 0;
    while (s.n > 0 && n < MAX_SAMPLES) {
        unsigned ctl = (unsigned)take(&s, 1);
        if (n > 0) {
            uint64_t d = 1 + take(&s, 1 + (ctl & 3));
            if (ctl & 4)
                d <<= (ctl >> 3) & 31;
            if (d > (uint64_t)INT64_MAX / (uint64_t)unit)
                break;
            d *= (uint64_t)unit;
            if (d > (uint64_t)INT64_MAX - (uint64_t)t)
                break;
            t = (int64_t)((uint64_t)t + d);
        }
        uint64_t bits;
        double v;
        switch ((mode + (ctl >> 6)) & 3) {
        case 0:
            bits = take(&s, 8);
            memcpy(&v, &bits, sizeof(v));
            break;
        case 1: /* an exact decimal: a small step, an extreme, or a 24-bit mantissa */
            if (ctl & 0x20)
                mant += (int8_t)take(&s, 1);
            else if (ctl & 0x10)
                mant = (int64_t)(take(&s, 7) & ((1ull << 54) - 1)) - ((1ll << 53) - 1);
            else
                mant = (int64_t)take(&s, 3) - (1 << 23);
            if (mant >= (1ll << 53) || mant <= -(1ll << 53))
                mant = 0;
            v = (double)mant / pow10[e];
            break;
        case 2:
            v = n ? vals[n - 1] : 0.0;
            break;
        default:
            v = n ? -vals[n - 1] : -0.0;
        }
        ts[n] = t;
        vals[n] = v;
        n++;
    }
    if (n == 0)
        return;

    bdb_chunk_app a;
    bdb_chunk_app_init(&a);
    for (size_t i = 0; i < n; i++)
        CHECK(bdb_chunk_app_append(&a, ts[i], vals[i]) == BDB_OK);
    CHECK(bdb_chunk_app_append(&a, ts[n - 1], 0.0) == BDB_ERR_INVALID);
    size_t alen;
    const uint8_t *ap = bdb_chunk_app_bytes(&a, &alen);
    check_decodes(ap, alen, ts, vals, n);

    bdb_buf out, f;
    bdb_buf_init(&out);
    bdb_buf_init(&f);
    CHECK(ap[0] == BDB_CHUNK_STREAM && bdb_chunk_count(ap, alen) == n);
    CHECK(bdb_chunk_encode(ts, vals, n, &out) == BDB_OK);
    check_decodes(out.data, out.len, ts, vals, n);
    CHECK(out.data[0] == BDB_CHUNK_XOR || bdb_chunk_kind(out.data[0]) == BDB_CHUNK_PACKED);

    size_t xlen = check_form(ts, vals, n, BDB_CHUNK_FORM_XOR, &f);
    CHECK(f.data[0] == BDB_CHUNK_XOR);
    if (out.data[0] == BDB_CHUNK_XOR)
        CHECK(out.len == xlen && memcmp(out.data, f.data, xlen) == 0);
    size_t dec = check_form(ts, vals, n, BDB_CHUNK_FORM_DECIMAL, &f);
    CHECK(!dec || f.data[0] == BDB_CHUNK_DECIMAL);
    size_t delta = check_form(ts, vals, n, BDB_CHUNK_FORM_DELTA, &f);
    CHECK(!delta || (f.data[0] & 0x90) == BDB_CHUNK_PACKED);
    size_t dod = check_form(ts, vals, n, BDB_CHUNK_FORM_DOD, &f);
    CHECK(!dod || (f.data[0] & 0x90) == (BDB_CHUNK_PACKED | BDB_CHUNK_PACKED_DOD));
    CHECK((dec == 0) == (delta == 0) && (delta == 0) == (dod == 0));
    CHECK(delta || out.data[0] == BDB_CHUNK_XOR);
    size_t best = xlen;
    if (delta && delta < best)
        best = delta;
    if (dod && dod < best)
        best = dod;
    CHECK(out.len == best);
    /* The timestamp unit is the coarsest that divides them all. */
    if (delta) {
        int64_t u = units[f.data[0] >> 5 & 3];
        for (size_t i = 0; i < n; i++)
            CHECK(ts[i] % u == 0);
        if (u < 1000) {
            size_t i = 0;
            while (i < n && ts[i] % (u * 10) == 0)
                i++;
            CHECK(i < n);
        }
    }
    bdb_buf_free(&f);
    bdb_buf_free(&out);
    bdb_chunk_app_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    decode_any(data, size);
    decode_bare(data, size);
    roundtrip_derived(data, size);
    return 0;
}
