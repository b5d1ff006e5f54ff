/* libFuzzer harness for the bounded gzip inflate of request bodies.
 *
 * The first input byte picks the output limit and an in-flight budget for the growth
 * callback; the rest is the compressed body. Beyond "no crash, no leak" it checks the
 * contract: the output never exceeds limit + 1 bytes nor the granted capacity, a
 * success is stable under a smaller limit (exactly len passes, len - 1 is refused) and
 * survives a compress/inflate round trip unchanged. */
#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "ingest/gzip.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "invariant failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

typedef struct {
    size_t budget, granted;
} budget;

static int grow(void *ctx, size_t extra)
{
    budget *b = ctx;
    if (b->granted + extra > b->budget)
        return -1;
    b->granted += extra;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const size_t limits[] = {0, 1, 100, 4096, 65536, 1 << 20};
    size_t max = limits[data[0] % 6];
    budget bud = {.budget = (data[0] & 0x80) ? 200000 : SIZE_MAX};
    const uint8_t *in = data + 1;
    size_t n = size - 1;

    bdb_buf out;
    bdb_buf_init(&out);
    int rc = bdb_gzip_inflate(in, n, max, &out, grow, &bud);
    CHECK(rc == 0 || rc == BDB_ERR_LIMIT || rc == BDB_ERR_CORRUPT || rc == BDB_ERR_AGAIN);
    CHECK(out.len <= max + 1);
    CHECK(out.cap <= bud.granted);
    CHECK(rc != BDB_ERR_LIMIT || out.len == max + 1);
    if (rc == 0) {
        /* the same body with exactly its size as limit passes, one less is refused */
        bdb_buf again;
        bdb_buf_init(&again);
        CHECK(bdb_gzip_inflate(in, n, out.len, &again, NULL, NULL) == 0);
        CHECK(again.len == out.len && (!out.len || !memcmp(again.data, out.data, out.len)));
        if (out.len) {
            bdb_buf_reset(&again);
            CHECK(bdb_gzip_inflate(in, n, out.len - 1, &again, NULL, NULL) == BDB_ERR_LIMIT);
        }
        /* round trip through zlib's own gzip writer */
        uLongf cap = compressBound((uLong)out.len) + 32;
        uint8_t *z = malloc(cap);
        CHECK(z);
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        CHECK(deflateInit2(&zs, 1, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) == Z_OK);
        zs.next_in = out.data;
        zs.avail_in = (uInt)out.len;
        zs.next_out = z;
        zs.avail_out = (uInt)cap;
        CHECK(deflate(&zs, Z_FINISH) == Z_STREAM_END);
        size_t zn = cap - zs.avail_out;
        deflateEnd(&zs);
        bdb_buf_reset(&again);
        CHECK(bdb_gzip_inflate(z, zn, max, &again, NULL, NULL) == 0);
        CHECK(again.len == out.len && (!out.len || !memcmp(again.data, out.data, out.len)));
        free(z);
        bdb_buf_free(&again);
    }
    bdb_buf_free(&out);
    return 0;
}
