/* Tests for the bounded gzip inflate: round trips, the size limit at and one past,
 * multi-member bodies, zlib framing, truncated and trailing bytes, refused growth. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gzip_testutil.h"

#include "bucketdb/bdb.h"
#include "ingest/gzip.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static uint8_t *pattern(size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)("m,d=a v=1i 17\n"[i % 14]);
    return p;
}

static void round_trip(void **state)
{
    (void)state;
    size_t sizes[] = {0, 1, 65535, 65536, 65537, 300000};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        for (int wbits = 15; wbits <= 31; wbits += 16) {
            uint8_t *plain = pattern(sizes[k]);
            size_t gz_n;
            uint8_t *gz = gzt_deflate(plain, sizes[k], wbits, NULL, &gz_n);
            bdb_buf out;
            bdb_buf_init(&out);
            assert_int_equal(bdb_gzip_inflate(gz, gz_n, 1 << 20, &out, NULL, NULL), 0);
            assert_int_equal(out.len, sizes[k]);
            assert_true(sizes[k] == 0 || memcmp(out.data, plain, sizes[k]) == 0);
            bdb_buf_free(&out);
            free(gz);
            free(plain);
        }
    }
}

/* The limit counts decompressed bytes: exactly max passes, max + 1 does not, and the
 * output never holds more than max + 1 bytes however large the body would become. */
static void limit_at_and_past(void **state)
{
    (void)state;
    const size_t max = 100000;
    for (size_t n = max - 1; n <= max + 1; n++) {
        uint8_t *plain = pattern(n);
        size_t gz_n;
        uint8_t *gz = gzt_deflate(plain, n, 31, NULL, &gz_n);
        bdb_buf out;
        bdb_buf_init(&out);
        int rc = bdb_gzip_inflate(gz, gz_n, max, &out, NULL, NULL);
        assert_int_equal(rc, n <= max ? 0 : BDB_ERR_LIMIT);
        assert_true(out.len <= max + 1);
        bdb_buf_free(&out);
        free(gz);
        free(plain);
    }
    /* a bomb: 64 MiB of zeros in a body of about 64 KiB stops at max + 1 */
    size_t big = 64u << 20;
    uint8_t *zeros = calloc(1, big);
    assert_non_null(zeros);
    size_t gz_n;
    uint8_t *gz = gzt_deflate(zeros, big, 31, NULL, &gz_n);
    free(zeros);
    bdb_buf out;
    bdb_buf_init(&out);
    assert_int_equal(bdb_gzip_inflate(gz, gz_n, max, &out, NULL, NULL), BDB_ERR_LIMIT);
    assert_int_equal(out.len, max + 1);
    assert_true(out.cap < 4 * max);
    bdb_buf_free(&out);
    free(gz);
}

/* Two members decode to both halves, as gzip -dc would; the limit spans members. */
static void multi_member(void **state)
{
    (void)state;
    size_t a_n, b_n;
    uint8_t *a = gzt_deflate("first\n", 6, 31, NULL, &a_n);
    uint8_t *b = gzt_deflate("second\n", 7, 31, NULL, &b_n);
    uint8_t *ab = malloc(a_n + b_n);
    assert_non_null(ab);
    memcpy(ab, a, a_n);
    memcpy(ab + a_n, b, b_n);
    bdb_buf out;
    bdb_buf_init(&out);
    assert_int_equal(bdb_gzip_inflate(ab, a_n + b_n, 100, &out, NULL, NULL), 0);
    assert_int_equal(out.len, 13);
    assert_memory_equal(out.data, "first\nsecond\n", 13);
    bdb_buf_reset(&out);
    assert_int_equal(bdb_gzip_inflate(ab, a_n + b_n, 12, &out, NULL, NULL), BDB_ERR_LIMIT);
    bdb_buf_free(&out);
    free(ab);
    free(a);
    free(b);
}

static void corrupt_inputs(void **state)
{
    (void)state;
    size_t gz_n;
    uint8_t *gz = gzt_deflate("hello world\n", 12, 31, NULL, &gz_n);
    bdb_buf out;
    bdb_buf_init(&out);
    /* every truncation of a valid member is refused, never half-accepted */
    for (size_t cut = 0; cut < gz_n; cut++) {
        bdb_buf_reset(&out);
        assert_int_equal(bdb_gzip_inflate(gz, cut, 100, &out, NULL, NULL), BDB_ERR_CORRUPT);
    }
    /* trailing bytes that are not a gzip member */
    uint8_t *tail = malloc(gz_n + 4);
    assert_non_null(tail);
    memcpy(tail, gz, gz_n);
    memcpy(tail + gz_n, "junk", 4);
    bdb_buf_reset(&out);
    assert_int_equal(bdb_gzip_inflate(tail, gz_n + 4, 100, &out, NULL, NULL), BDB_ERR_CORRUPT);
    /* a flipped CRC byte in the trailer */
    memcpy(tail, gz, gz_n);
    tail[gz_n - 6] ^= 0x40;
    bdb_buf_reset(&out);
    assert_int_equal(bdb_gzip_inflate(tail, gz_n, 100, &out, NULL, NULL), BDB_ERR_CORRUPT);
    /* plain text is not compressed data */
    bdb_buf_reset(&out);
    assert_int_equal(bdb_gzip_inflate("m v=1 1\n", 8, 100, &out, NULL, NULL), BDB_ERR_CORRUPT);
    bdb_buf_free(&out);
    free(tail);
    free(gz);
}

static size_t granted;
static int grow_until(void *ctx, size_t extra)
{
    size_t budget = *(size_t *)ctx;
    if (granted + extra > budget)
        return -1;
    granted += extra;
    return 0;
}

/* Every byte of capacity is offered to grow() before it is allocated, and a refusal
 * stops decoding with BDB_ERR_AGAIN. */
static void growth_is_charged(void **state)
{
    (void)state;
    size_t n = 500000, gz_n;
    uint8_t *plain = pattern(n);
    uint8_t *gz = gzt_deflate(plain, n, 31, NULL, &gz_n);
    bdb_buf out;
    bdb_buf_init(&out);
    size_t budget = SIZE_MAX;
    granted = 0;
    assert_int_equal(bdb_gzip_inflate(gz, gz_n, 1 << 20, &out, grow_until, &budget), 0);
    assert_int_equal(out.len, n);
    assert_int_equal(granted, out.cap);
    bdb_buf_free(&out);
    bdb_buf_init(&out);
    budget = 200000;
    granted = 0;
    assert_int_equal(bdb_gzip_inflate(gz, gz_n, 1 << 20, &out, grow_until, &budget), BDB_ERR_AGAIN);
    assert_true(out.cap <= budget);
    assert_int_equal(granted, out.cap);
    bdb_buf_free(&out);
    free(gz);
    free(plain);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),        cmocka_unit_test(limit_at_and_past),
        cmocka_unit_test(multi_member),      cmocka_unit_test(corrupt_inputs),
        cmocka_unit_test(growth_is_charged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
