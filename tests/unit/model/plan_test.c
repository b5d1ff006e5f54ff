/* plan: the planner reproduces the seeds' own figures. Seed 000 "Capacity Planning"
 * (1M devices every 10 s, 10 metrics, 100 B rows, 30 days, aggregates ~10 %, RF 3:
 * 8.64 MB, 8.64 TB, 259 TB, 285 TB, 855 TB, 100,000 writes/s), every row of seed
 * 002's bucket decision matrix (size and mark), the verdict boundaries, the bucket
 * advice and the common-mistake warnings. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *fmt(double bytes, int sig)
{
    static char b[8][32];
    static int k;
    k = (k + 1) % 8;
    return bdb_plan_fmt_bytes(bytes, sig, b[k], sizeof b[k]);
}

static void seed_capacity_planning(void **state)
{
    (void)state;
    bdb_plan_in in;
    bdb_plan_in_default(&in);
    bdb_plan_out o;
    char err[128];
    assert_int_equal(bdb_plan_compute(&in, &o, err, sizeof err), 0);
    /* "1 million devices reporting every 10 seconds, 100,000 writes per second,
     * 10 metrics per report -> 1 million metrics per second"; RF 3 -> 300K/s */
    assert_true(fabs(o.reports_per_s - 100000) < 1e-6);
    assert_true(fabs(o.samples_per_s - 1e6) < 1e-6);
    assert_true(fabs(o.replica_writes_per_s - 3e6) < 1e-3);
    assert_true(fabs(o.reports_per_day - 8640) < 1e-9);
    assert_string_equal(fmt(o.device_day_bytes, 3), "8.64 MB");
    assert_string_equal(fmt(o.fleet_day_bytes, 3), "8.64 TB");
    assert_string_equal(fmt(o.retention_bytes, 3), "259 TB");
    assert_string_equal(fmt(o.total_bytes, 3), "285 TB");
    assert_string_equal(fmt(o.cluster_bytes, 3), "855 TB");
    /* seed 000 "Sizing analysis": hourly partition 3,600 rows x 100 B = 360 KB */
    assert_true(fabs(o.buckets[2].rows - 3600) < 1e-9);
    assert_string_equal(o.buckets[2].name, "1h");
    assert_string_equal(fmt(o.buckets[2].bytes, 2), "360 KB");
    /* 1 row/s: only a daily bucket reaches 1 MB; daily is the recommended default */
    assert_string_equal(o.buckets[o.recommended].name, "1d");
    assert_int_equal(o.buckets[4].verdict, BDB_PLAN_SMALL_OK);
    /* the server's learner puts 1 report per 10 s in MEDIUM: 1 h, 360 KB, too small */
    assert_string_equal(o.buckets[o.server_auto].name, "1h");
    assert_int_equal(o.nwarnings, 1);
    assert_non_null(strstr(o.warnings[0], "automatic bucket"));
}

/* Seed 002 "Bucket Size Decision Matrix": write rate (rows/s into one partition), row
 * size, then daily, hourly and 10-minute partitions as the seed prints them. */
static const struct {
    double rate, row;
    const char *daily, *hourly, *ten;
} matrix[] = {
    {1, 100, "8.6 MB \xe2\x9c\x93", "360 KB", "60 KB"},
    {10, 100, "86 MB \xe2\x9c\x93", "3.6 MB \xe2\x9c\x93", "600 KB"},
    {100, 100, "860 MB \xe2\x9c\x97", "36 MB \xe2\x9c\x93", "6 MB \xe2\x9c\x93"},
    {1000, 100, "8.6 GB \xe2\x9c\x97", "360 MB \xe2\x9c\x97", "60 MB \xe2\x9c\x93"},
    {10000, 100, "86 GB \xe2\x9c\x97", "3.6 GB \xe2\x9c\x97", "600 MB \xe2\x9c\x97"},
    {1, 1000, "86 MB \xe2\x9c\x93", "3.6 MB \xe2\x9c\x93", "600 KB"},
    {10, 1000, "860 MB \xe2\x9c\x97", "36 MB \xe2\x9c\x93", "6 MB \xe2\x9c\x93"},
    {100, 1000, "8.6 GB \xe2\x9c\x97", "360 MB \xe2\x9c\x97", "60 MB \xe2\x9c\x93"},
};

static void cell(double rate, double row, double bucket_s, const char *want)
{
    double bytes = bdb_plan_partition_bytes(rate, bucket_s, row);
    const char *mark = bdb_plan_verdict_mark(bdb_plan_verdict_of(bytes));
    char got[64];
    snprintf(got, sizeof got, "%s%s%s", fmt(bytes, 2), *mark ? " " : "", mark);
    if (strcmp(got, want))
        fail_msg("%g/s x %g B x %g s: got '%s', want '%s'", rate, row, bucket_s, got, want);
}

static void seed_decision_matrix(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof matrix / sizeof matrix[0]; i++) {
        cell(matrix[i].rate, matrix[i].row, 86400, matrix[i].daily);
        cell(matrix[i].rate, matrix[i].row, 3600, matrix[i].hourly);
        cell(matrix[i].rate, matrix[i].row, 600, matrix[i].ten);
    }
}

/* The same matrix through bdb_plan_compute: one device, 1 metric per report at the
 * matrix's rate, so every bucket row agrees with the direct arithmetic. */
static void matrix_through_compute(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof matrix / sizeof matrix[0]; i++) {
        bdb_plan_in in;
        bdb_plan_in_default(&in);
        in.devices = 1;
        in.metrics = 1;
        in.interval_s = 1 / matrix[i].rate;
        in.row_bytes = matrix[i].row;
        bdb_plan_out o;
        char err[128];
        assert_int_equal(bdb_plan_compute(&in, &o, err, sizeof err), 0);
        const char *mark = bdb_plan_verdict_mark(o.buckets[4].verdict);
        char got[64];
        snprintf(got, sizeof got, "%s%s%s", fmt(o.buckets[4].bytes, 2), *mark ? " " : "", mark);
        assert_string_equal(got, matrix[i].daily);
        assert_int_equal(o.buckets[4].verdict, bdb_plan_verdict_of(o.buckets[4].bytes));
    }
}

static void verdicts_and_format(void **state)
{
    (void)state;
    assert_int_equal(bdb_plan_verdict_of(999999), BDB_PLAN_TOO_SMALL);
    assert_int_equal(bdb_plan_verdict_of(1e6), BDB_PLAN_SMALL_OK);
    assert_int_equal(bdb_plan_verdict_of(10e6), BDB_PLAN_TARGET);
    assert_int_equal(bdb_plan_verdict_of(100e6), BDB_PLAN_TARGET);
    assert_int_equal(bdb_plan_verdict_of(100e6 + 1), BDB_PLAN_RISKY);
    assert_int_equal(bdb_plan_verdict_of(1e9), BDB_PLAN_RISKY);
    assert_int_equal(bdb_plan_verdict_of(1e9 + 1), BDB_PLAN_FAILING);
    assert_string_equal(fmt(999.6e6, 3), "1 GB");
    assert_string_equal(fmt(25.9e9, 3), "25.9 GB"); /* seed 002 mistake 1's monthly bucket */
    assert_string_equal(fmt(512, 3), "512 B");
    assert_string_equal(fmt(0, 3), "0 B");
}

static void recommendation_and_warnings(void **state)
{
    (void)state;
    bdb_plan_in in;
    bdb_plan_in_default(&in);
    bdb_plan_out o;
    char err[128];
    /* 100 rows/s: 1d 8.6 GB and 6h 216 MB are over 100 MB; 1h is 36 MB */
    in.interval_s = 0.1;
    assert_int_equal(bdb_plan_compute(&in, &o, err, sizeof err), 0);
    assert_string_equal(o.buckets[o.recommended].name, "1h");
    /* 1000 rows/s: 15m is 90 MB, the largest under 100 MB */
    in.interval_s = 0.01;
    assert_int_equal(bdb_plan_compute(&in, &o, err, sizeof err), 0);
    assert_string_equal(o.buckets[o.recommended].name, "15m");
    /* 10000 rows/s: nothing fits; smallest bucket and a warning */
    in.interval_s = 0.001;
    assert_int_equal(bdb_plan_compute(&in, &o, err, sizeof err), 0);
    assert_string_equal(o.buckets[o.recommended].name, "10m");
    assert_non_null(strstr(o.warnings[0], "bucket too large"));

    /* seed 002's mistakes: gc_grace 1 h with weekly repair, a 30-day range on hourly
     * buckets (720 partitions), an unbounded range, a chosen 10m bucket at 1 row/s */
    bdb_plan_in_default(&in);
    in.gc_grace_s = 3600;
    in.repair_interval_s = 604800;
    in.bucket_s = 600;
    in.query_range_s = 30 * 86400;
    assert_int_equal(bdb_plan_compute(&in, &o, err, sizeof err), 0);
    int gc = 0, inlist = 0, small = 0;
    for (size_t i = 0; i < o.nwarnings; i++) {
        gc += strstr(o.warnings[i], "gc_grace") != NULL;
        inlist += strstr(o.warnings[i], "large IN list") != NULL;
        small += strstr(o.warnings[i], "bucket too small: the chosen bucket") != NULL;
    }
    assert_int_equal(gc + inlist + small, 3);
    assert_true(fabs(o.partitions_per_query - 4320) < 1e-9);
    in.query_range_s = -1;
    in.gc_grace_s = 864000; /* 10 days > weekly repair: no warning */
    assert_int_equal(bdb_plan_compute(&in, &o, err, sizeof err), 0);
    int unbounded = 0;
    for (size_t i = 0; i < o.nwarnings; i++) {
        unbounded += strstr(o.warnings[i], "unbounded") != NULL;
        assert_null(strstr(o.warnings[i], "gc_grace"));
    }
    assert_int_equal(unbounded, 1);
}

static void tiers_and_hot_devices(void **state)
{
    (void)state;
    bdb_plan_in in;
    bdb_plan_in_default(&in);
    in.tier_s[0] = 60;
    in.tier_s[1] = 3600;
    in.tier_s[2] = 86400;
    in.ntiers = 3;
    bdb_plan_out o;
    char err[128];
    assert_int_equal(bdb_plan_compute(&in, &o, err, sizeof err), 0);
    /* per device per day: (1440 + 24 + 1) windows x 10 metrics x 100 B vs 8.64 MB */
    assert_true(fabs(o.agg_share - 1465.0 * 10 * 100 / 8.64e6) < 1e-12);
    /* 1,000 hot devices at 50x: fleet rates grow by 49,000 device-equivalents */
    bdb_plan_in_default(&in);
    in.hot_devices = 1000;
    in.hot_factor = 50;
    assert_int_equal(bdb_plan_compute(&in, &o, err, sizeof err), 0);
    assert_true(fabs(o.reports_per_s - (999000 + 50000) / 10.0) < 1e-6);
    /* a hot device writes 50 rows/s: 1d 432 MB, 6h 108 MB, 1h 18 MB */
    assert_string_equal(o.buckets[o.hot_bucket].name, "1h");
    int hot = 0;
    for (size_t i = 0; i < o.nwarnings; i++)
        hot += strstr(o.warnings[i], "bucket too large: a hot device with a 1d bucket") != NULL;
    assert_int_equal(hot, 1);
}

static void bad_inputs(void **state)
{
    (void)state;
    bdb_plan_in in;
    bdb_plan_out o;
    char err[128];
    bdb_plan_in_default(&in);
    in.interval_s = 0;
    assert_int_equal(bdb_plan_compute(&in, &o, err, sizeof err), -1);
    assert_string_equal(err, "interval must be > 0");
    bdb_plan_in_default(&in);
    in.rf = 0.5;
    assert_int_equal(bdb_plan_compute(&in, &o, err, sizeof err), -1);
    assert_string_equal(err, "replication must be >= 1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(seed_capacity_planning),
        cmocka_unit_test(seed_decision_matrix),
        cmocka_unit_test(matrix_through_compute),
        cmocka_unit_test(verdicts_and_format),
        cmocka_unit_test(recommendation_and_warnings),
        cmocka_unit_test(tiers_and_hot_devices),
        cmocka_unit_test(bad_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
