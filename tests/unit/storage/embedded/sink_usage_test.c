/* db_sink_usage's pure part: the per-(tenant, expiry day) table of confirmed sink
 * bytes and its file.
 *
 * Covered: the encoded row size; expiry days (no TTL = forever, floor for negative
 * times, overflow); a tenant's bytes leave exactly when the day holding their expiry
 * is over, never before; tenants are kept apart; merging adds and takes off without
 * going below zero (the crash-window correction); prune; the file round-trips both
 * tables and the WAL cut, and every kind of damage is refused with a message naming
 * what is wrong (checksum, version, magic, counts, truncation, trailing bytes). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "storage/embedded/sink/db_sink_usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define DAY INT64_C(86400000)

static void test_row_bytes_and_days(void **state)
{
    (void)state;
    /* tenant 2 + device 2 + metric 3 + bucket 8 + sub 4 + time 8 + value 8 + TTL 4 */
    assert_int_equal(bdb_sku_row_bytes(2, 2, 3), 39);
    assert_int_equal(bdb_sku_day(5 * DAY + 1, 0), BDB_SKU_FOREVER);
    assert_int_equal(bdb_sku_day(5 * DAY + 1, -1), BDB_SKU_FOREVER);
    assert_int_equal(bdb_sku_day(5 * DAY, DAY), 6);
    assert_int_equal(bdb_sku_day(5 * DAY, DAY - 1), 5);
    assert_int_equal(bdb_sku_day(-1, 0), BDB_SKU_FOREVER);
    assert_int_equal(bdb_sku_day(-DAY - 1, 1), -1); /* floor, not toward zero */
    assert_int_equal(bdb_sku_day(INT64_MAX - 5, DAY), BDB_SKU_FOREVER);
}

static void test_expiry_and_tenants(void **state)
{
    (void)state;
    bdb_sku *t = bdb_sku_new();
    assert_non_null(t);
    int64_t d = 20000; /* a day index */
    assert_int_equal(bdb_sku_add(t, "a", 1, d, 100), BDB_OK);
    assert_int_equal(bdb_sku_add(t, "a", 1, d + 2, 30), BDB_OK);
    assert_int_equal(bdb_sku_add(t, "a", 1, d, 11), BDB_OK); /* same day: summed */
    assert_int_equal(bdb_sku_add(t, "a", 1, BDB_SKU_FOREVER, 5), BDB_OK);
    assert_int_equal(bdb_sku_add(t, "b", 1, d, 7), BDB_OK);
    assert_int_equal(bdb_sku_tenant(t, "a", 1, d * DAY), 146);
    assert_int_equal(bdb_sku_tenant(t, "a", 1, (d + 1) * DAY - 1), 146); /* last ms of d */
    assert_int_equal(bdb_sku_tenant(t, "a", 1, (d + 1) * DAY), 35);      /* d is over */
    assert_int_equal(bdb_sku_tenant(t, "a", 1, (d + 3) * DAY), 5);       /* forever stays */
    assert_int_equal(bdb_sku_tenant(t, "b", 1, d * DAY), 7);
    assert_int_equal(bdb_sku_tenant(t, "c", 1, d * DAY), 0);
    assert_int_equal(bdb_sku_tenant(t, "ab", 2, d * DAY), 0);
    bdb_sku_prune(t, (d + 1) * DAY);
    assert_int_equal(bdb_sku_tenant(t, "a", 1, 0), 35); /* pruned days are gone for good */
    assert_int_equal(bdb_sku_tenant(t, "b", 1, 0), 0);
    bdb_sku_free(t);
}

static void test_merge(void **state)
{
    (void)state;
    bdb_sku *cur = bdb_sku_new(), *delta = bdb_sku_new();
    assert_int_equal(bdb_sku_add(cur, "a", 1, 10, 100), BDB_OK);
    assert_int_equal(bdb_sku_add(delta, "a", 1, 10, 40), BDB_OK);
    assert_int_equal(bdb_sku_add(delta, "a", 1, 11, 9), BDB_OK);
    assert_int_equal(bdb_sku_add(delta, "n", 1, 11, 3), BDB_OK);
    assert_int_equal(bdb_sku_merge(cur, delta, 1), BDB_OK);
    assert_int_equal(bdb_sku_tenant(cur, "a", 1, 0), 149);
    assert_int_equal(bdb_sku_tenant(cur, "n", 1, 0), 3);
    assert_int_equal(bdb_sku_merge(cur, delta, -1), BDB_OK);
    assert_int_equal(bdb_sku_tenant(cur, "a", 1, 0), 100);
    assert_int_equal(bdb_sku_tenant(cur, "n", 1, 0), 0);
    /* taking off more than there is stops at zero */
    assert_int_equal(bdb_sku_merge(cur, delta, -1), BDB_OK);
    assert_int_equal(bdb_sku_merge(cur, delta, -1), BDB_OK);
    assert_int_equal(bdb_sku_merge(cur, delta, -1), BDB_OK);
    assert_int_equal(bdb_sku_tenant(cur, "a", 1, 0), 0);
    bdb_sku_free(cur);
    bdb_sku_free(delta);
}

static void fill(bdb_sku *cur, bdb_sku *last)
{
    for (int i = 0; i < 50; i++) {
        char name[16];
        int n = snprintf(name, sizeof name, "tenant%d", i % 7);
        assert_int_equal(bdb_sku_add(cur, name, (size_t)n, 19000 + i, (uint64_t)i * 1000 + 1),
                         BDB_OK);
    }
    assert_int_equal(bdb_sku_add(cur, "tenant0", 7, BDB_SKU_FOREVER, 77), BDB_OK);
    assert_int_equal(bdb_sku_add(last, "tenant3", 7, 19003, 12), BDB_OK);
}

static int decode(const bdb_buf *b, char *err, size_t errlen)
{
    bdb_sku *cur = bdb_sku_new(), *last = bdb_sku_new();
    uint64_t upto = 0;
    int rc = bdb_sku_decode(b->data, b->len, cur, last, &upto, err, errlen);
    bdb_sku_free(cur);
    bdb_sku_free(last);
    return rc;
}

static void recrc(bdb_buf *b)
{
    bdb_put_u32le(b->data + b->len - 4, (uint32_t)crc32(0, b->data, (uInt)(b->len - 4)));
}

static void test_file_round_trip_and_damage(void **state)
{
    (void)state;
    bdb_sku *cur = bdb_sku_new(), *last = bdb_sku_new();
    fill(cur, last);
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_sku_encode(cur, last, 4242, &b);

    bdb_sku *c2 = bdb_sku_new(), *l2 = bdb_sku_new();
    assert_int_equal(bdb_sku_add(c2, "stale", 5, 1, 1), BDB_OK); /* cleared by decode */
    uint64_t upto = 0;
    char err[160] = "";
    assert_int_equal(bdb_sku_decode(b.data, b.len, c2, l2, &upto, err, sizeof err), BDB_OK);
    assert_int_equal(upto, 4242);
    assert_int_equal(bdb_sku_tenant(c2, "stale", 5, 0), 0);
    for (int i = 0; i < 7; i++) {
        char name[16];
        int n = snprintf(name, sizeof name, "tenant%d", i);
        assert_int_equal(bdb_sku_tenant(c2, name, (size_t)n, 0),
                         bdb_sku_tenant(cur, name, (size_t)n, 0));
        assert_int_equal(bdb_sku_tenant(c2, name, (size_t)n, 19030 * DAY),
                         bdb_sku_tenant(cur, name, (size_t)n, 19030 * DAY));
    }
    assert_int_equal(bdb_sku_tenant(l2, "tenant3", 7, 0), 12);
    assert_int_equal(bdb_sku_tenant(l2, "tenant0", 7, 0), 0);

    /* every bit flip is caught */
    for (size_t i = 0; i < b.len; i++) {
        b.data[i] ^= 0x10;
        assert_int_equal(decode(&b, err, sizeof err), BDB_ERR_CORRUPT);
        b.data[i] ^= 0x10;
    }
    b.data[20] ^= 1;
    decode(&b, err, sizeof err);
    assert_non_null(strstr(err, "checksum"));
    b.data[20] ^= 1;
    /* damage under a valid checksum: version, counts, magic */
    bdb_put_u32le(b.data + 8, 2);
    recrc(&b);
    assert_int_equal(decode(&b, err, sizeof err), BDB_ERR_CORRUPT);
    assert_non_null(strstr(err, "version 2"));
    bdb_put_u32le(b.data + 8, 1);
    bdb_put_u64le(b.data + 20, UINT64_C(1) << 40);
    recrc(&b);
    assert_int_equal(decode(&b, err, sizeof err), BDB_ERR_CORRUPT);
    assert_non_null(strstr(err, "entry counts"));
    bdb_put_u64le(b.data + 20, 51); /* the real counts are 51 + 1 */
    bdb_put_u64le(b.data + 28, 0);  /* one fewer entry than there is: bytes left over */
    recrc(&b);
    assert_int_equal(decode(&b, err, sizeof err), BDB_ERR_CORRUPT);
    assert_non_null(strstr(err, "after the last entry"));
    bdb_put_u64le(b.data + 28, 2); /* one more than there is: truncated */
    recrc(&b);
    assert_int_equal(decode(&b, err, sizeof err), BDB_ERR_CORRUPT);
    assert_non_null(strstr(err, "truncated"));
    b.data[0] = 'X';
    recrc(&b);
    assert_int_equal(decode(&b, err, sizeof err), BDB_ERR_CORRUPT);
    assert_non_null(strstr(err, "magic"));
    /* every truncation is refused */
    bdb_buf_reset(&b);
    bdb_sku_encode(cur, last, 4242, &b);
    size_t full = b.len;
    for (size_t n = 0; n < full; n++) {
        b.len = n;
        assert_int_equal(decode(&b, err, sizeof err), BDB_ERR_CORRUPT);
    }
    bdb_buf_free(&b);
    bdb_sku_free(cur);
    bdb_sku_free(last);
    bdb_sku_free(c2);
    bdb_sku_free(l2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_bytes_and_days),
        cmocka_unit_test(test_expiry_and_tenants),
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_file_round_trip_and_damage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
