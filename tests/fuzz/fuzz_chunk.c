/* libFuzzer harness for chunks. Two jobs per input:
 *  1. decode the raw bytes as a chunk: never crash or overread, samples strictly
 *     increasing, a clean end only after exactly the header's count;
 *  2. derive samples from the bytes, encode them with the appender and with
 *     bdb_chunk_encode, and require both to decode to the same bits.
 * Needs src/storage/embedded/chunk.c and src/common/buf.c (and -lm). */
#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "storage/embedded/chunk.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SAMPLES 2048

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
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
}

/* The first byte picks the value style and decimal exponent; then per sample one
 * control byte, a delta of 1 to 4 bytes (optionally shifted, to reach the wide
 * buckets) and the value's bytes. */
static void roundtrip_derived(const uint8_t *data, size_t size)
{
    static int64_t ts[MAX_SAMPLES];
    static double vals[MAX_SAMPLES];
    static const double pow10[16] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                     1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
    if (size < 9) return;
    source s = {data, size};
    unsigned mode = (unsigned)take(&s, 1);
    unsigned e = mode >> 4;
    int64_t t = (int64_t)take(&s, 8);
    size_t n = 0;
    while (s.n > 0 && n < MAX_SAMPLES) {
        unsigned ctl = (unsigned)take(&s, 1);
        if (n > 0) {
            uint64_t d = 1 + take(&s, 1 + (ctl & 3));
            if (ctl & 4) d <<= (ctl >> 3) & 31;
            if (d > (uint64_t)INT64_MAX - (uint64_t)t) break;
            t = (int64_t)((uint64_t)t + d);
        }
        uint64_t bits;
        double v;
        switch ((mode + (ctl >> 6)) & 3) {
        case 0:
            bits = take(&s, 8);
            memcpy(&v, &bits, sizeof(v));
            break;
        case 1: /* an exact decimal with a mantissa in [-2^23, 2^23) */
            v = (double)((int64_t)take(&s, 3) - (1 << 23)) / pow10[e];
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
    if (n == 0) return;

    bdb_chunk_app a;
    bdb_chunk_app_init(&a);
    for (size_t i = 0; i < n; i++)
        CHECK(bdb_chunk_app_append(&a, ts[i], vals[i]) == BDB_OK);
    CHECK(bdb_chunk_app_append(&a, ts[n - 1], 0.0) == BDB_ERR_INVALID);
    size_t alen;
    const uint8_t *ap = bdb_chunk_app_bytes(&a, &alen);
    check_decodes(ap, alen, ts, vals, n);

    bdb_buf out;
    bdb_buf_init(&out);
    CHECK(bdb_chunk_encode(ts, vals, n, &out) == BDB_OK);
    check_decodes(out.data, out.len, ts, vals, n);
    CHECK(out.len <= alen);
    if (out.data[0] == BDB_CHUNK_XOR) CHECK(out.len == alen && memcmp(out.data, ap, alen) == 0);
    bdb_buf_free(&out);
    bdb_chunk_app_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    decode_any(data, size);
    roundtrip_derived(data, size);
    return 0;
}
