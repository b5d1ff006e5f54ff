/* db_tier_late at its edges, through the public API (background = 0: every flush
 * explicit), each tier window compared with a recomputation from the raw samples
 * (count, min, max exactly, sum to 1e-12).
 *
 * Covered: a fresh engine answers "nothing late" without creating the late state,
 * so even with every allocation failing (stats with the configured threshold, an
 * empty listing, no marked windows); the
 * argument errors of the late and tier readers; the marked windows of one tenant
 * (other tenants' marks, marks outside the range, duplicates, more than 16 windows);
 * the listing's tenant and device filters, early stop and its 256-event bound; reads
 * whose range lies before, after or around the marked minutes at every tier; a
 * marked minute whose raw data expired before its flush (the tier's window is kept at
 * read, the flush falls back to the partial window); one time rewritten by three
 * flushes and a minute of more than 256 samples rewritten (the newest block wins in
 * the recompute). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "agg/rollup.h"
#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/fleet/db_fleet.h"
#include "storage/embedded/tier/db_tier.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIN BDB_MS_MIN
#define HOUR BDB_MS_HOUR
#define DAY BDB_MS_DAY
#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */

static char tmpdir[64], datadir[128];
static int64_t fake_now;
static int64_t raw_retention;

static int setup(void **st)
{
    (void)st;
    /* tmpfs when there is one: every flush fsyncs */
    eu_scratch(tmpdir, sizeof tmpdir, "ledge", EU_TMPFS, datadir, sizeof datadir);
    bdb_log_set_level(BDB_LOG_ERROR);
    raw_retention = 0;
    fake_now = T0 + DAY;
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    return eu_cleanup(tmpdir);
}

static bdb_db *open_db(void)
{
    bdb_db_opts o;
    eu_opts(&o, datadir, eu_clock, &fake_now);
    o.late_threshold_ms = HOUR;
    o.retention_ms = raw_retention;
    o.sync_mode = BDB_WAL_SYNC_PERIODIC;
    return eu_open(&o);
}

static void put(bdb_db *db, const char *tn, const char *dev, int64_t ts, double v)
{
    eu_put(db, tn, dev, "temp", ts, v, 0);
}

/* Tier windows of t1/dev/temp at res whose start is in [from, to) that differ from
 * raw, plus tier windows raw does not have. */
static size_t diff_res(bdb_db *db, const char *dev, enum bdb_res res, int64_t from, int64_t to)
{
    int64_t w = bdb_res_width(res);
    return eu_tier_diff(db, "t1", dev, "temp", res, bdb_align_down(from, w),
                        bdb_align_down(to - 1, w) + w, from, to);
}

static size_t diff_all(bdb_db *db, const char *dev, int64_t from, int64_t to)
{
    size_t bad = 0;
    for (int res = BDB_RES_1M; res <= BDB_RES_1D; res++)
        bad += diff_res(db, dev, (enum bdb_res)res, from, to);
    return bad;
}

static int count_cb(void *ctx, const bdb_late_event *e)
{
    (void)e;
    (*(int *)ctx)++;
    return 0;
}

/* A fresh engine: nothing late, nothing marked, and the readers say so without
 * allocating the late state; the argument errors. */
static void test_fresh_and_invalid(void **st)
{
    (void)st;
    bdb_db *db = open_db();
    for (int i = 0; i < 10; i++)
        put(db, "t1", "dev", T0 + i * 1000, i);
    /* every allocation fails: the readers need none to say "nothing late" */
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_FROM, 1);
    bdb_late_stats ls;
    bdb_db_late_get_stats(db, &ls);
    int n = 0;
    int rc_recent = bdb_db_late_recent(db, NULL, NULL, count_cb, &n);
    int64_t *starts = (int64_t *)&n;
    size_t ns = 7;
    int rc_marked = bdb_db_late_marked_windows(db, "t1", BDB_RES_1H, T0, T0 + DAY, &starts, &ns);
    bdb_alloc_fail_disarm();
    assert_int_equal(ls.late_events, 0);
    assert_int_equal(ls.pending, 0);
    assert_int_equal(ls.threshold_ms, HOUR); /* configured, even before any mark */
    assert_int_equal(rc_recent, BDB_OK);
    assert_int_equal(n, 0);
    assert_int_equal(rc_marked, BDB_OK);
    assert_null(starts);
    assert_int_equal(ns, 0);
    assert_int_equal(diff_all(db, "dev", T0, T0 + DAY), 0);
    /* argument errors and unknown names */
    assert_int_equal(bdb_db_late_marked_windows(db, "t1", BDB_RES_RAW, T0, T0 + DAY, &starts, &ns),
                     BDB_ERR_INVALID);
    assert_int_equal(bdb_db_late_marked_windows(db, "t1", BDB_RES_1H, T0, T0, &starts, &ns),
                     BDB_ERR_INVALID);
    assert_int_equal(bdb_db_late_marked_windows(db, "nope", BDB_RES_1H, T0, T0 + DAY, &starts, &ns),
                     BDB_OK);
    assert_int_equal(ns, 0);
    assert_int_equal(bdb_db_fleet_dirty(db, "t1", "temp", BDB_RES_1M, T0, T0 + DAY, &starts, &ns),
                     BDB_ERR_INVALID);
    assert_int_equal(bdb_db_fleet_dirty(db, "t1", "temp", BDB_RES_1H, T0 + DAY, T0, &starts, &ns),
                     BDB_OK); /* an empty range: nothing */
    assert_int_equal(ns, 0);
    const char *m[1] = {"temp"};
    bdb_rollup r;
    bdb_rollup_init(&r, MIN);
    assert_int_equal(bdb_db_tier_read(db, "nope", "dev", m, 1, BDB_RES_1M, T0, T0 + DAY, &r),
                     BDB_ERR_NOTFOUND);
    assert_int_equal(bdb_db_tier_read(db, "t1", "nope", m, 1, BDB_RES_1M, T0, T0 + DAY, &r),
                     BDB_ERR_NOTFOUND);
    assert_int_equal(bdb_db_tier_read(db, "t1", "dev", m, 1, BDB_RES_RAW, T0, T0 + DAY, &r),
                     BDB_ERR_INVALID);
    assert_int_equal(bdb_db_tier_read(db, "t1", "dev", m, 1, BDB_RES_1M, T0 + DAY, T0, &r),
                     BDB_ERR_INVALID);
    assert_int_equal(bdb_db_tier_read(db, "t1", "dev", m, 1, BDB_RES_1H, T0, T0 + DAY, &r),
                     BDB_ERR_INVALID); /* out initialized with another width */
    /* an open end reads the same windows as a bounded one */
    assert_int_equal(bdb_db_tier_read(db, "t1", "dev", m, 1, BDB_RES_1M, T0, INT64_MAX, &r),
                     BDB_OK);
    assert_int_equal(r.n, 1);
    assert_int_equal(bdb_stats_count(&r.w[0].st), 10);
    bdb_rollup_free(&r);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static int64_t i64_at(const int64_t *v, size_t n, int64_t x)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == x)
            return 1;
    return 0;
}

/* Marked windows of one tenant: other tenants' marks, marks outside the range and
 * repeated windows are left out; more than 16 windows; none after the flush. */
static void test_marked_windows(void **st)
{
    (void)st;
    fake_now = T0 + 2 * DAY;
    bdb_db *db = open_db();
    for (int64_t t = T0; t < T0 + 2 * DAY; t += 10 * MIN) {
        put(db, "t1", "dev", t, 1);
        put(db, "t2", "dev", t, 2);
    }
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    /* t1: rewrites in 20 hours of day 1 (two minutes each); t2: another hour */
    for (int h = 0; h < 20; h++) {
        put(db, "t1", "dev", T0 + h * HOUR, -h);
        put(db, "t1", "dev", T0 + h * HOUR + 10 * MIN, -h - 0.5);
    }
    put(db, "t2", "dev", T0 + 22 * HOUR, 5);
    int64_t *v = NULL;
    size_t n = 0;
    assert_int_equal(bdb_db_late_marked_windows(db, "t1", BDB_RES_1H, T0, T0 + 2 * DAY, &v, &n),
                     BDB_OK);
    assert_int_equal(n, 20);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(v[i], T0 + (int64_t)i * HOUR); /* sorted, unique */
    free(v);
    /* a range inside: from mid-hour 3 (aligned down) to hour 7 */
    assert_int_equal(
        bdb_db_late_marked_windows(db, "t1", BDB_RES_1H, T0 + 3 * HOUR + 5, T0 + 7 * HOUR, &v, &n),
        BDB_OK);
    assert_int_equal(n, 4);
    assert_true(i64_at(v, n, T0 + 3 * HOUR) && i64_at(v, n, T0 + 6 * HOUR));
    assert_false(i64_at(v, n, T0 + 7 * HOUR) || i64_at(v, n, T0 + 2 * HOUR));
    free(v);
    assert_int_equal(bdb_db_late_marked_windows(db, "t1", BDB_RES_1D, T0, T0 + 2 * DAY, &v, &n),
                     BDB_OK);
    assert_int_equal(n, 1);
    assert_int_equal(v[0], T0);
    free(v);
    assert_int_equal(bdb_db_late_marked_windows(db, "t2", BDB_RES_1M, T0, T0 + 2 * DAY, &v, &n),
                     BDB_OK);
    assert_int_equal(n, 1);
    assert_int_equal(v[0], T0 + 22 * HOUR);
    free(v);
    /* the fleet's list of windows to answer from device tiers includes the marks */
    assert_int_equal(bdb_db_fleet_dirty(db, "t1", "temp", BDB_RES_1H, T0, T0 + DAY, &v, &n),
                     BDB_OK);
    assert_int_equal(n, 20);
    free(v);
    assert_int_equal(diff_all(db, "dev", T0, T0 + 2 * DAY), 0);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_late_marked_windows(db, "t1", BDB_RES_1H, T0, T0 + 2 * DAY, &v, &n),
                     BDB_OK);
    assert_int_equal(n, 0);
    free(v);
    assert_int_equal(diff_all(db, "dev", T0, T0 + 2 * DAY), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

struct seen {
    int n;
    int stop_at;
    int64_t last_seq;
    int ordered;
};

static int seen_cb(void *ctx, const bdb_late_event *e)
{
    struct seen *s = ctx;
    if (s->n && (int64_t)e->seq >= s->last_seq)
        s->ordered = 0;
    s->last_seq = (int64_t)e->seq;
    s->n++;
    return s->stop_at && s->n == s->stop_at;
}

static int listed(bdb_db *db, const char *tn, const char *dn, int stop_at)
{
    struct seen s = {0, stop_at, 0, 1};
    assert_int_equal(bdb_db_late_recent(db, tn, dn, seen_cb, &s), BDB_OK);
    assert_true(s.ordered); /* newest first */
    return s.n;
}

/* The listing's filters, early stop and its bound of 256 events. */
static void test_listing(void **st)
{
    (void)st;
    fake_now = T0 + DAY;
    bdb_db *db = open_db();
    const char *tn[3] = {"t1", "t1", "t2"}, *dn[3] = {"a", "b", "a"};
    for (int k = 0; k < 3; k++)
        put(db, tn[k], dn[k], T0 + DAY - MIN, 0);
    /* 2 + 3 + 4 events more than an hour late */
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < k + 2; i++)
            put(db, tn[k], dn[k], T0 + i * MIN, i);
    assert_int_equal(listed(db, NULL, NULL, 0), 9);
    assert_int_equal(listed(db, "t1", NULL, 0), 5);
    assert_int_equal(listed(db, "t1", "b", 0), 3);
    assert_int_equal(listed(db, NULL, "a", 0), 6);
    assert_int_equal(listed(db, "t2", "b", 0), 0);
    assert_int_equal(listed(db, NULL, NULL, 4), 4);
    /* the list keeps the newest 256 */
    for (int i = 0; i < 300; i++)
        put(db, "t1", "b", T0 + 2 * HOUR + i * 1000, i);
    assert_int_equal(listed(db, NULL, NULL, 0), 256);
    assert_int_equal(listed(db, "t2", NULL, 0), 0); /* pushed out */
    bdb_late_stats ls;
    bdb_db_late_get_stats(db, &ls);
    assert_int_equal(ls.late_events, 309);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(diff_all(db, "b", T0, T0 + DAY), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Reads whose range lies before, after and around marked minutes, before and after
 * the flush that recomputes them; the first and last minute of an hour and a day. */
static void test_read_ranges(void **st)
{
    (void)st;
    fake_now = T0 + 3 * DAY;
    bdb_db *db = open_db();
    for (int64_t t = T0; t < T0 + 2 * DAY; t += 20000)
        put(db, "t1", "dev", t, (double)((t / 1000) % 97));
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    /* rewrites at the first and last minute of day 1's hour 5 and the day's edges */
    const int64_t at[] = {T0 + 5 * HOUR, T0 + 6 * HOUR - 20000, T0 + DAY - 20000, T0 + DAY,
                          T0 + 2 * DAY - 20000};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
        put(db, "t1", "dev", at[i], 1000.0 + (double)i);
    for (int round = 0; round < 2; round++) {
        assert_int_equal(diff_all(db, "dev", T0, T0 + 2 * DAY), 0);
        /* before, after and between the marks */
        assert_int_equal(diff_all(db, "dev", T0 + 7 * HOUR, T0 + 20 * HOUR), 0);
        assert_int_equal(diff_all(db, "dev", T0, T0 + 4 * HOUR), 0);
        assert_int_equal(diff_res(db, "dev", BDB_RES_1M, T0 + 5 * HOUR + MIN, T0 + 6 * HOUR - MIN),
                         0);
        assert_int_equal(diff_res(db, "dev", BDB_RES_1H, T0 + DAY + HOUR, T0 + 2 * DAY), 0);
        assert_int_equal(diff_res(db, "dev", BDB_RES_1D, T0 + DAY, T0 + 2 * DAY), 0);
        if (round == 0)
            assert_int_equal(bdb_db_flush(db), BDB_OK);
    }
    bdb_late_stats ls;
    bdb_db_late_get_stats(db, &ls);
    assert_int_equal(ls.recomputed[0], 5);
    assert_int_equal(ls.recomputed[2], 2);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A marked minute whose raw data expires before its flush: a read keeps the tier's
 * window (raw cannot replace it), the flush keeps the partial window (a fallback). */
static void test_raw_expired_before_flush(void **st)
{
    (void)st;
    raw_retention = 2 * DAY;
    fake_now = T0 + DAY;
    bdb_db *db = open_db();
    for (int i = 0; i < 30; i++)
        put(db, "t1", "dev", T0 + i * 1000, i);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    put(db, "t1", "dev", T0 + 5000, 100); /* rewrite of a flushed time: marks the minute */
    fake_now = T0 + 3 * DAY + HOUR;       /* raw of that minute is past its retention */
    const char *m[1] = {"temp"};
    bdb_rollup r;
    bdb_rollup_init(&r, MIN);
    assert_int_equal(bdb_db_tier_read(db, "t1", "dev", m, 1, BDB_RES_1M, T0, T0 + HOUR, &r),
                     BDB_OK);
    assert_int_equal(r.n, 1); /* kept, not removed for lack of raw samples */
    assert_true(bdb_stats_count(&r.w[0].st) >= 30);
    bdb_rollup_free(&r);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_late_stats ls;
    bdb_db_late_get_stats(db, &ls);
    assert_int_equal(ls.fallbacks, 1);
    assert_int_equal(ls.recomputed[0], 0);
    assert_int_equal(ls.pending, 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* One time rewritten by three flushes (three blocks hold it: the newest wins in the
 * recompute) and a minute of 300 samples rewritten. */
static void test_rewrites_across_blocks(void **st)
{
    (void)st;
    fake_now = T0 + DAY;
    bdb_db *db = open_db();
    for (int i = 0; i < 300; i++)
        put(db, "t1", "dev", T0 + i * 200, i);
    put(db, "t1", "dev", T0 + 2 * MIN, 7);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    for (int round = 0; round < 3; round++) {
        put(db, "t1", "dev", T0 + 10 * 200, -1.0 - round);
        put(db, "t1", "dev", T0 + 299 * 200, 50.0 + round);
        assert_int_equal(bdb_db_flush(db), BDB_OK);
        assert_int_equal(diff_all(db, "dev", T0, T0 + DAY), 0);
    }
    bdb_late_stats ls;
    bdb_db_late_get_stats(db, &ls);
    assert_int_equal(ls.recomputed[0], 3);
    const char *m[1] = {"temp"};
    bdb_rollup r;
    bdb_rollup_init(&r, MIN);
    assert_int_equal(bdb_db_tier_read(db, "t1", "dev", m, 1, BDB_RES_1M, T0, T0 + MIN, &r), BDB_OK);
    assert_int_equal(r.n, 1);
    assert_int_equal(bdb_stats_count(&r.w[0].st), 300);
    assert_true(bdb_stats_min(&r.w[0].st) == -3.0); /* the third rewrite */
    bdb_rollup_free(&r);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fresh_and_invalid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_marked_windows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_listing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_ranges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_raw_expired_before_flush, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rewrites_across_blocks, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
