/* cass_agg: the row blobs of the tier and fleet tables. A window encoded into a row
 * decodes to the same statistics (the double-double sum and M2 bit for bit), the same
 * quantiles and, for fleet rows, the same device set; a decoded row merged with a
 * partial window gives what merging the windows directly gives; a blob of another
 * start, another version, trailing or truncated bytes is refused; a version 1 blob (rows
 * of earlier versions) still decodes, to the same window, in more bytes. Partition days
 * and table names. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "agg/fleet.h"
#include "agg/rollup.h"
#include "bucketdb/bdb.h"
#include "storage/cassandra/cass_agg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_MS INT64_C(60000)
#define DAY_MS INT64_C(86400000)

/* A minute rollup over two days of readings with a large mean and a small spread
 * (where a plain double sum would lose digits). */
static void fill(bdb_rollup *r, int64_t t0, int n, unsigned seed)
{
    srand(seed);
    for (int i = 0; i < n; i++) {
        double v = 1e9 + (rand() % 1000) / 1000.0 - 0.5;
        assert_int_equal(bdb_rollup_add(r, t0 + (int64_t)i * 7919, v), BDB_OK);
    }
}

static void assert_same_window(const bdb_window *a, const bdb_window *b)
{
    assert_true(a->start == b->start);
    assert_true(a->st.count == b->st.count);
    assert_memory_equal(&a->st.min, &b->st.min, sizeof(double));
    assert_memory_equal(&a->st.max, &b->st.max, sizeof(double));
    assert_memory_equal(&a->st.sum_hi, &b->st.sum_hi, sizeof(double));
    assert_memory_equal(&a->st.sum_lo, &b->st.sum_lo, sizeof(double));
    assert_memory_equal(&a->st.m2, &b->st.m2, sizeof(double));
    for (double q = 0.5; q < 1.0; q += 0.245) {
        double x = bdb_sketch_quantile(&a->sk, q), y = bdb_sketch_quantile(&b->sk, q);
        assert_memory_equal(&x, &y, sizeof x);
    }
}

static void test_window_roundtrip(void **state)
{
    (void)state;
    bdb_rollup r, back;
    bdb_rollup_init(&r, MIN_MS);
    bdb_rollup_init(&back, MIN_MS);
    fill(&r, 1718409600000, 3000, 1);
    assert_true(r.n > 100);
    bdb_buf b;
    bdb_buf_init(&b);
    for (size_t i = 0; i < r.n; i++) {
        bdb_buf_reset(&b);
        cass_agg_encode_window(&r, &r.w[i], &b);
        assert_int_equal(b.data[0], CASS_AGG_BLOB_VERSION);
        assert_int_equal(cass_agg_decode_window(&back, r.w[i].start, b.data, b.len), BDB_OK);
    }
    assert_int_equal(back.n, r.n);
    for (size_t i = 0; i < r.n; i++)
        assert_same_window(&r.w[i], &back.w[i]);
    /* Decoding a row again replaces the window (a retried read page, a re-put row). */
    assert_int_equal(cass_agg_decode_window(&back, r.w[r.n - 1].start, b.data, b.len), BDB_OK);
    assert_int_equal(back.n, r.n);
    assert_same_window(&r.w[r.n - 1], &back.w[r.n - 1]);
    bdb_buf_free(&b);
    bdb_rollup_free(&r);
    bdb_rollup_free(&back);
}

/* An hour row read back and merged with the head's partial of the same hour equals the
 * hour built from all readings: what a read on the Cassandra backend does. */
static void test_row_merges_with_partial(void **state)
{
    (void)state;
    int64_t h = 1718409600000;
    bdb_rollup all, flushed, head, got;
    bdb_rollup_init(&all, 60 * MIN_MS);
    bdb_rollup_init(&flushed, 60 * MIN_MS);
    bdb_rollup_init(&head, 60 * MIN_MS);
    bdb_rollup_init(&got, 60 * MIN_MS);
    for (int i = 0; i < 500; i++) {
        double v = sin(i) * 100 + 20;
        int64_t ts = h + (int64_t)i * 7000;
        bdb_rollup_add(&all, ts, v);
        bdb_rollup_add(i < 300 ? &flushed : &head, ts, v);
    }
    bdb_buf b;
    bdb_buf_init(&b);
    cass_agg_encode_window(&flushed, &flushed.w[0], &b);
    assert_int_equal(cass_agg_decode_window(&got, h, b.data, b.len), BDB_OK);
    assert_int_equal(bdb_rollup_merge(&got, &head), BDB_OK);
    assert_int_equal(got.n, 1);
    assert_true(got.w[0].st.count == 500);
    assert_true(bdb_stats_min(&got.w[0].st) == bdb_stats_min(&all.w[0].st));
    assert_true(bdb_stats_max(&got.w[0].st) == bdb_stats_max(&all.w[0].st));
    assert_true(fabs(bdb_stats_sum(&got.w[0].st) - bdb_stats_sum(&all.w[0].st)) < 1e-9);
    assert_true(fabs(got.w[0].st.m2 - all.w[0].st.m2) < 1e-6 * all.w[0].st.m2);
    double q1 = bdb_sketch_quantile(&got.w[0].sk, 0.95),
           q2 = bdb_sketch_quantile(&all.w[0].sk, 0.95);
    assert_memory_equal(&q1, &q2, sizeof q1); /* the sketch merges byte for byte */
    bdb_buf_free(&b);
    bdb_rollup_free(&all);
    bdb_rollup_free(&flushed);
    bdb_rollup_free(&head);
    bdb_rollup_free(&got);
}

static void test_window_rejects(void **state)
{
    (void)state;
    bdb_rollup r, back;
    bdb_rollup_init(&r, MIN_MS);
    bdb_rollup_init(&back, MIN_MS);
    fill(&r, 0, 50, 2);
    bdb_buf b;
    bdb_buf_init(&b);
    cass_agg_encode_window(&r, &r.w[0], &b);
    int64_t s = r.w[0].start;
    /* another row's window_start (of the same day: the blob's index is the day's) */
    assert_int_equal(cass_agg_decode_window(&back, s + MIN_MS, b.data, b.len), BDB_ERR_CORRUPT);
    /* truncated, trailing byte, unknown version, empty */
    assert_int_equal(cass_agg_decode_window(&back, s, b.data, b.len - 1), BDB_ERR_CORRUPT);
    bdb_buf_putc(&b, 0);
    assert_int_equal(cass_agg_decode_window(&back, s, b.data, b.len), BDB_ERR_CORRUPT);
    b.len--;
    b.data[0] = CASS_AGG_BLOB_VERSION + 1;
    assert_int_equal(cass_agg_decode_window(&back, s, b.data, b.len), BDB_ERR_CORRUPT);
    assert_int_equal(cass_agg_decode_window(&back, s, b.data, 0), BDB_ERR_CORRUPT);
    assert_int_equal(back.n, 0);
    /* a blob of two windows (not a row), in either version */
    assert_true(r.n >= 2);
    bdb_buf_reset(&b);
    bdb_buf_putc(&b, CASS_AGG_BLOB_VERSION);
    bdb_rollup_write_c(&r, INT64_MIN, INT64_MAX, 0, BDB_C2, &b); /* day 0 */
    assert_int_equal(cass_agg_decode_window(&back, s, b.data, b.len), BDB_ERR_CORRUPT);
    bdb_buf_reset(&b);
    bdb_buf_putc(&b, CASS_AGG_BLOB_VERSION_1);
    bdb_rollup_write(&r, INT64_MIN, INT64_MAX, &b);
    assert_int_equal(cass_agg_decode_window(&back, s, b.data, b.len), BDB_ERR_CORRUPT);
    assert_int_equal(back.n, 0);
    bdb_buf_free(&b);
    bdb_rollup_free(&r);
    bdb_rollup_free(&back);
}

/* Rows written by earlier versions (blob version 1: the version 1 window encoding) read
 * as before; version 2 takes a fraction of their bytes. Six two-decimal readings a
 * minute, as a fleet reporting every 10 s sends (deterministic sizes). */
static void test_window_version1(void **state)
{
    (void)state;
    int64_t t0 = 1718409600000;
    bdb_rollup r, a, b1;
    bdb_rollup_init(&r, MIN_MS);
    bdb_rollup_init(&a, MIN_MS);
    bdb_rollup_init(&b1, MIN_MS);
    const double v[6] = {21.37, 21.41, 21.52, 21.48, 21.6, 21.66};
    for (int i = 0; i < 6; i++)
        assert_int_equal(bdb_rollup_add(&r, t0 + i * 10000, v[i]), BDB_OK);
    bdb_buf old, cur;
    bdb_buf_init(&old);
    bdb_buf_init(&cur);
    bdb_buf_putc(&old, CASS_AGG_BLOB_VERSION_1);
    bdb_rollup_write(&r, t0, t0 + 1, &old);
    cass_agg_encode_window(&r, &r.w[0], &cur);
    assert_int_equal(cass_agg_decode_window(&a, t0, old.data, old.len), BDB_OK);
    assert_int_equal(cass_agg_decode_window(&b1, t0, cur.data, cur.len), BDB_OK);
    assert_same_window(&a.w[0], &r.w[0]);
    assert_same_window(&b1.w[0], &r.w[0]);
    printf("a minute of six readings: blob version 1 %zu bytes, version 2 %zu bytes\n", old.len,
           cur.len);
    assert_int_equal(old.len, 77);
    assert_int_equal(cur.len, 23);
    bdb_buf_free(&old);
    bdb_buf_free(&cur);
    bdb_rollup_free(&r);
    bdb_rollup_free(&a);
    bdb_rollup_free(&b1);
}

static void test_fleet_roundtrip(void **state)
{
    (void)state;
    int64_t h = 1718409600000, width = 60 * MIN_MS;
    bdb_fleet f, back;
    bdb_fleet_init(&f, width);
    bdb_fleet_init(&back, width);
    char name[32];
    for (int d = 0; d < 40; d++) {
        bdb_rollup r;
        bdb_rollup_init(&r, MIN_MS);
        for (int i = 0; i < 200; i++)
            bdb_rollup_add(&r, h + (int64_t)(i * 997 + d * 13) * 1000 % (3 * width), d + i * 0.5);
        snprintf(name, sizeof name, "dev-%03d", d);
        assert_int_equal(bdb_fleet_add_rollup(&f, name, &r), BDB_OK);
        bdb_rollup_free(&r);
    }
    assert_int_equal(f.n, 3);
    bdb_buf b;
    bdb_buf_init(&b);
    for (size_t i = 0; i < f.n; i++) {
        bdb_buf_reset(&b);
        cass_agg_encode_fleet(&f, &f.w[i], &b);
        assert_int_equal(cass_agg_decode_fleet(&back, f.w[i].start, b.data, b.len), BDB_OK);
    }
    assert_int_equal(back.n, f.n);
    for (size_t i = 0; i < f.n; i++) {
        bdb_fleet_row x, y;
        bdb_fleet_row_of(&f, &f.w[i], &x);
        bdb_fleet_row_of(&back, &back.w[i], &y);
        assert_true(x.devices == y.devices && x.readings == y.readings);
        assert_true(x.sum == y.sum && x.min == y.min && x.max == y.max);
        assert_true(x.stddev == y.stddev);
        assert_int_equal(back.w[i].ndev, f.w[i].ndev);
        for (size_t k = 0; k < f.w[i].ndev; k++)
            assert_string_equal(back.w[i].dev[k], f.w[i].dev[k]);
    }
    assert_int_equal(cass_agg_decode_fleet(&back, f.w[0].start + 1, b.data, b.len),
                     BDB_ERR_CORRUPT);
    bdb_buf_free(&b);
    bdb_fleet_free(&f);
    bdb_fleet_free(&back);
}

static void test_days_and_tables(void **state)
{
    (void)state;
    assert_true(cass_agg_day(0) == 0);
    assert_true(cass_agg_day(DAY_MS - 1) == 0);
    assert_true(cass_agg_day(DAY_MS) == DAY_MS);
    assert_true(cass_agg_day(-1) == -DAY_MS); /* before 1970: floor, not truncation */
    assert_string_equal(cass_agg_table(BDB_RES_1M), "agg_1m");
    assert_string_equal(cass_agg_table(BDB_RES_1H), "agg_1h");
    assert_string_equal(cass_agg_table(BDB_RES_1D), "agg_1d");
    assert_null(cass_agg_table(BDB_RES_RAW));
    assert_string_equal(cass_agg_fleet_table(BDB_RES_1H), "fleet_agg_1h");
    assert_string_equal(cass_agg_fleet_table(BDB_RES_1D), "fleet_agg_1d");
    assert_null(cass_agg_fleet_table(BDB_RES_1M));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_roundtrip), cmocka_unit_test(test_row_merges_with_partial),
        cmocka_unit_test(test_window_rejects),   cmocka_unit_test(test_window_version1),
        cmocka_unit_test(test_fleet_roundtrip),  cmocka_unit_test(test_days_and_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
