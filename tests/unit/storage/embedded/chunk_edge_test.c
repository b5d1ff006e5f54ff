/* chunk_edge: the chunk codec's edges that chunk_test.c does not reach.
 *
 *  - Allocation failures: every allocation of an encoding (each form, with more samples
 *    than the packer's stack scratch holds) fails in turn into a checked buffer. The
 *    result is BDB_ERR_NOMEM with the buffer's oom flag set, or BDB_OK with exactly the
 *    bytes an undisturbed encoding gives; never other bytes.
 *  - Damaged DECIMAL chunks (the old layout, still read from block files): an
 *    exponent past 15 or a header cut short counts 0 samples and does not iterate; an
 *    overlong value varint is BDB_ERR_CORRUPT, never a sample.
 *  - A chunk handed over with more bytes than any stream may hold (16 MiB) reads the
 *    same samples as its own bytes do. */
#include "storage/embedded/chunk/chunk.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/buf.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define N 300 /* more than the packer's 128-sample stack scratch */
#define T0 INT64_C(1700000000000)

static void samples(int64_t *ts, double *v)
{
    for (int i = 0; i < N; i++) {
        ts[i] = T0 + 1000 * i + (i % 7 == 0);
        v[i] = (double)(2150 + (i * 37) % 91) / 100.0; /* two decimals: DECIMAL-able */
    }
}

static void test_alloc_failures(void **state)
{
    (void)state;
    int64_t ts[N];
    double v[N];
    samples(ts, v);
    int forms[] = {BDB_CHUNK_FORM_AUTO, BDB_CHUNK_FORM_XOR, BDB_CHUNK_FORM_DECIMAL,
                   BDB_CHUNK_FORM_DELTA, BDB_CHUNK_FORM_DOD};
    int nomem = 0;
    for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
        bdb_buf want;
        bdb_buf_init_checked(&want);
        assert_int_equal(bdb_chunk_encode_as(ts, v, N, forms[f], &want), BDB_OK);
        for (uint64_t nth = 1; nth <= 12; nth++) {
            bdb_buf got;
            bdb_buf_init_checked(&got);
            bdb_alloc_fail_arm(BDB_ALLOC_FAIL_NTH, nth);
            int rc = bdb_chunk_encode_as(ts, v, N, forms[f], &got);
            uint64_t injected = bdb_alloc_fail_injected();
            bdb_alloc_fail_disarm();
            if (rc == BDB_OK) {
                assert_int_equal(got.len, want.len);
                assert_memory_equal(got.data, want.data, want.len);
            } else {
                assert_int_equal(rc, BDB_ERR_NOMEM);
                assert_int_equal(injected, 1);
                nomem++;
            }
            bdb_buf_free(&got);
        }
        bdb_buf_free(&want);
    }
    assert_true(nomem >= 5); /* each form reported at least one */
}

/* The DECIMAL chunk of the samples: header (kind, count u16, exponent), uvarint length
 * of the timestamp stream, the stream, then one varint per value. */
static uint8_t *decimal_chunk(size_t *len, size_t *values_at)
{
    int64_t ts[N];
    double v[N];
    samples(ts, v);
    bdb_buf b;
    bdb_buf_init_checked(&b);
    assert_int_equal(bdb_chunk_encode_as(ts, v, N, BDB_CHUNK_FORM_DECIMAL, &b), BDB_OK);
    assert_int_equal(b.data[0], BDB_CHUNK_DECIMAL);
    assert_int_equal(b.data[3], 2);
    const uint8_t *p = b.data + 4;
    uint64_t tsb = 0;
    for (int shift = 0;; shift += 7) {
        uint8_t c = *p++;
        tsb |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            break;
    }
    *values_at = (size_t)(p - b.data) + tsb;
    *len = b.len;
    return b.data;
}

static void test_damaged_decimal(void **state)
{
    (void)state;
    size_t len, vat;
    uint8_t *c = decimal_chunk(&len, &vat);
    assert_int_equal(bdb_chunk_count(c, len), N);
    bdb_chunk_iter it;

    /* Exponent 16: no such decimal. */
    c[3] = 16;
    assert_int_equal(bdb_chunk_count(c, len), 0);
    assert_int_equal(bdb_chunk_iter_init(&it, c, len), BDB_ERR_CORRUPT);
    c[3] = 2;
    /* Cut inside the header. */
    assert_int_equal(bdb_chunk_count(c, 3), 0);
    assert_int_equal(bdb_chunk_iter_init(&it, c, 3), BDB_ERR_CORRUPT);

    /* The first value's varint runs 11 bytes: the first sample is refused. */
    assert_true(vat + 11 <= len);
    uint8_t *d = malloc(len);
    assert_non_null(d);
    memcpy(d, c, len);
    memset(d + vat, 0xff, 11);
    int64_t t;
    double v;
    assert_int_equal(bdb_chunk_iter_init(&it, d, len), BDB_OK);
    assert_int_equal(bdb_chunk_iter_next(&it, &t, &v), BDB_ERR_CORRUPT);
    assert_true(bdb_chunk_iter_next(&it, &t, &v) != 1);
    free(d);
    free(c);
}

static void test_oversized_buffer(void **state)
{
    (void)state;
    int64_t ts[N];
    double v[N];
    samples(ts, v);
    int forms[] = {BDB_CHUNK_FORM_XOR, BDB_CHUNK_FORM_DECIMAL, BDB_CHUNK_FORM_DELTA};
    size_t big = ((size_t)1 << 24) + 64;
    uint8_t *buf = calloc(1, big);
    assert_non_null(buf);
    for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
        bdb_buf b;
        bdb_buf_init_checked(&b);
        assert_int_equal(bdb_chunk_encode_as(ts, v, N, forms[f], &b), BDB_OK);
        memset(buf, 0xa5, big);
        memcpy(buf, b.data, b.len);
        bdb_chunk_iter it;
        assert_int_equal(bdb_chunk_iter_init(&it, buf, big), BDB_OK);
        int64_t t;
        double x;
        for (int i = 0; i < N; i++) {
            assert_int_equal(bdb_chunk_iter_next(&it, &t, &x), 1);
            assert_int_equal(t, ts[i]);
            assert_true(x == v[i]);
        }
        assert_int_equal(bdb_chunk_iter_next(&it, &t, &x), 0);
        bdb_buf_free(&b);
    }
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_damaged_decimal),
        cmocka_unit_test(test_oversized_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
