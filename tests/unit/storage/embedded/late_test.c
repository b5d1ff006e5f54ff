/* db_tier_late: late data and rewrites of flushed times, through the public API
 * (background = 0: every flush and maintenance run is explicit).
 *
 * Every check compares each tier window of [from, to) with the raw samples of the same
 * interval: count, min and max exactly, the sum to 1e-12, p50/p95/p99 within 1%, and
 * no tier window without raw samples. Covered: events hours and days late (new times
 * and rewrites of flushed times) at every tier after the flush that recomputes them,
 * after compaction and after reopen; a rewrite of a flushed time counted once; the late
 * counters, the listing and the recompute hook; a crash image taken with acked late
 * rewrites in the WAL only (the dirty marks are rebuilt by the replay); the fallback
 * when the minute tier of an hour has expired. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "agg/rollup.h"
#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/tier/db_tier.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIN BDB_MS_MIN
#define HOUR BDB_MS_HOUR
#define DAY BDB_MS_DAY
#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */
#define BOUND (0.01 * (1 + 1e-9))

static char tmpdir[64], datadir[128];
static uint64_t rng_state;
static int64_t fake_now;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int setup(void **st)
{
    (void)st;
    eu_scratch(tmpdir, sizeof tmpdir, "late", EU_TMPFS, datadir, sizeof datadir);
    bdb_log_set_level(BDB_LOG_ERROR);
    rng_state = 0x9e3779b97f4a7c15ull;
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    return eu_cleanup(tmpdir);
}

static bdb_db *open_db(const char *dir)
{
    bdb_db_opts o;
    eu_opts(&o, dir, eu_clock, &fake_now);
    o.late_threshold_ms = HOUR;
    o.sync_mode = BDB_WAL_SYNC_PERIODIC; /* the crash images are copies, not power cuts */
    return eu_open(&o);
}

static void put(bdb_db *db, const char *dev, int64_t ts, double temp)
{
    eu_put(db, "t1", dev, "temp", ts, temp, 0);
}

static double skewed(void)
{
    double u = ((double)(rng() >> 11) + 0.5) / 9007199254740992.0;
    return exp(4 * u) - 1;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Every tier window of dev/temp whose start is in [from, to) against raw. Returns the
 * windows checked at the tier res_only (or all when 0) that differ: the tests assert
 * 0, and use the count to show the check can fail. */
static size_t mismatches_from(bdb_db *db, const char *dev, int64_t from, int64_t to, int res0)
{
    size_t bad = 0;
    for (int res = res0; res <= BDB_RES_1D; res++) {
        int64_t w = bdb_res_width((enum bdb_res)res);
        int64_t lo = bdb_align_down(from, w), hi = bdb_align_down(to - 1, w) + w;
        bdb_samples s[1];
        memset(s, 0, sizeof s);
        const char *m[1] = {"temp"};
        assert_int_equal(bdb_db_read(db, "t1", dev, m, 1, lo, hi, s, NULL), BDB_OK);
        bdb_rollup r;
        bdb_rollup_init(&r, w);
        assert_int_equal(bdb_db_tier_read(db, "t1", dev, m, 1, (enum bdb_res)res, lo, hi, &r),
                         BDB_OK);
        double *vals = malloc((s->n + 1) * sizeof *vals);
        size_t i = 0, nw = 0;
        while (i < s->n) {
            int64_t ws = bdb_align_down(s->ts[i], w);
            size_t j = i;
            long double sum = 0;
            double mn = s->v[i], mx = s->v[i];
            for (; j < s->n && s->ts[j] < ws + w; j++) {
                sum += s->v[j];
                mn = fmin(mn, s->v[j]);
                mx = fmax(mx, s->v[j]);
                vals[j - i] = s->v[j];
            }
            size_t n = j - i;
            const bdb_window *tw = bdb_rollup_find(&r, ws);
            int ok = tw && bdb_stats_count(&tw->st) == n && bdb_stats_min(&tw->st) == mn &&
                     bdb_stats_max(&tw->st) == mx &&
                     fabsl(bdb_stats_sum(&tw->st) - sum) <= 1e-12L * fabsl(sum) + 1e-12L;
            qsort(vals, n, sizeof *vals, cmp_d);
            const double qs[] = {0.5, 0.95, 0.99};
            for (int k = 0; k < 3 && ok; k++) {
                double x = vals[(size_t)floor(qs[k] * (double)(n - 1))];
                ok = fabs(bdb_sketch_quantile(&tw->sk, qs[k]) - x) <= BOUND * fabs(x);
            }
            bad += !ok;
            nw++;
            i = j;
        }
        bad += r.n != nw; /* a tier window without raw samples */
        free(vals);
        bdb_rollup_free(&r);
        bdb_samples_free(s);
    }
    return bad;
}

static size_t mismatches(bdb_db *db, const char *dev, int64_t from, int64_t to)
{
    return mismatches_from(db, dev, from, to, BDB_RES_1M);
}

/* Two days of one sample a minute at second 30, then "now" is the end of day 2. */
static void write_base(bdb_db *db, const char *dev)
{
    for (int64_t t = T0; t < T0 + 2 * DAY; t += MIN)
        put(db, dev, t + 30000, skewed());
}

struct hook_seen {
    uint64_t calls[BDB_TIERS];
};

static void on_recompute(void *ctx, const char *tn, const char *dev, const char *metric,
                         enum bdb_res res, int64_t start)
{
    struct hook_seen *h = ctx;
    assert_string_equal(tn, "t1");
    assert_string_equal(metric, "temp");
    assert_true(dev != NULL && start % bdb_res_width(res) == 0);
    h->calls[res - 1]++;
}

static int count_late(void *ctx, const bdb_late_event *e)
{
    (*(int *)ctx)++;
    assert_true(e->newest - e->ts > HOUR);
    return 0;
}

/* Events hours and days late, new times and rewrites of flushed times. */
static void late_batch(bdb_db *db, const char *dev)
{
    /* 3 hours late: new times in flushed minutes */
    for (int i = 0; i < 20; i++)
        put(db, dev, T0 + 2 * DAY - 3 * HOUR + i * 7000 + 1, 500.0 + i);
    /* 1.5 days late: rewrites of flushed times (raw keeps the new value) */
    for (int i = 0; i < 30; i++)
        put(db, dev, T0 + DAY / 2 + i * 37 * MIN + 30000, -3.0 - i);
    /* a day late, rewriting one time twice in the same flush interval */
    put(db, dev, T0 + DAY + 5 * MIN + 30000, 1e6);
    put(db, dev, T0 + DAY + 5 * MIN + 30000, 2e6);
}

static void test_late_hours_and_days(void **st)
{
    (void)st;
    fake_now = T0 + 2 * DAY;
    bdb_db *db = open_db(datadir);
    struct hook_seen hs = {{0}};
    bdb_db_tier_set_recompute_hook(db, on_recompute, &hs);
    write_base(db, "dev");
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(mismatches(db, "dev", T0, T0 + 2 * DAY), 0);
    late_batch(db, "dev");
    bdb_late_stats ls;
    bdb_db_late_get_stats(db, &ls);
    assert_int_equal(ls.late_events, 52);
    assert_true(ls.pending > 0);
    int nlisted = 0;
    bdb_db_late_recent(db, "t1", "dev", count_late, &nlisted);
    assert_int_equal(nlisted, 52);
    /* before the flush: reads put the raw windows in place of the marked minutes */
    assert_int_equal(mismatches(db, "dev", T0, T0 + 2 * DAY), 0);
    assert_int_equal(mismatches(db, "dev", T0 + DAY / 2 + 5, T0 + DAY + 3 * HOUR), 0);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(mismatches(db, "dev", T0, T0 + 2 * DAY), 0);
    bdb_db_late_get_stats(db, &ls);
    assert_int_equal(ls.pending, 0);
    assert_true(ls.recomputed[0] >= 31 && ls.recomputed[1] >= 2 && ls.recomputed[2] == 2);
    for (int k = 0; k < BDB_TIERS; k++)
        assert_int_equal(hs.calls[k], ls.recomputed[k]);
    /* late again into minutes recomputed already, then compaction and reopen */
    late_batch(db, "dev");
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(mismatches(db, "dev", T0, T0 + 2 * DAY), 0);
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    bdb_tier_stats ts;
    bdb_db_tier_get_stats(db, &ts);
    assert_int_equal(ts.files[0], 0); /* the 1m tier is derived from raw: no files */
    assert_int_equal(ts.files[1], 1); /* one 30-day file: replacing ones merged in */
    assert_int_equal(mismatches(db, "dev", T0, T0 + 2 * DAY), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db(datadir);
    assert_int_equal(mismatches(db, "dev", T0, T0 + 2 * DAY), 0);
    bdb_db_late_get_stats(db, &ls);
    assert_int_equal(ls.late_events, 0); /* counters are per process */
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* The known double count of docs/AGGREGATION.md "Rewrites": a rewrite of a flushed
 * time within the late threshold (not a late event) is exact after its flush. */
static void test_rewrite_of_flushed_time(void **st)
{
    (void)st;
    fake_now = T0 + DAY;
    bdb_db *db = open_db(datadir);
    for (int i = 0; i < 120; i++)
        put(db, "dev", T0 + i * 1000, i);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    put(db, "dev", T0 + 119 * 1000, -50); /* the newest time, rewritten */
    put(db, "dev", T0 + 30 * 1000, 1e3);  /* 89 s behind: not late */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(mismatches(db, "dev", T0, T0 + DAY), 0);
    bdb_late_stats ls;
    bdb_db_late_get_stats(db, &ls);
    assert_int_equal(ls.late_events, 0);
    assert_int_equal(ls.recomputed[0], 2);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A crash image taken while acked late rewrites are only in the WAL: the dirty set is
 * in memory only, and the replay rebuilds it, so the first flush after open still
 * recomputes their windows. */
static void test_crash_keeps_recompute(void **st)
{
    (void)st;
    fake_now = T0 + 2 * DAY;
    bdb_db *db = open_db(datadir);
    write_base(db, "dev");
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    late_batch(db, "dev");
    char crash[256];
    snprintf(crash, sizeof crash, "%s/crash", tmpdir);
    /* the state kill -9 leaves: WAL fsynced, no flush */
    eu_copy_tree(datadir, crash, EU_SKIP_LOCK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db(crash);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(mismatches(db, "dev", T0, T0 + 2 * DAY), 0);
    bdb_late_stats ls;
    bdb_db_late_get_stats(db, &ls);
    assert_true(ls.recomputed[0] >= 31);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db(crash);
    assert_int_equal(mismatches(db, "dev", T0, T0 + 2 * DAY), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A device's horizon after open is the newest event time of the committed catalog: a
 * rewrite of a flushed time that is not late (89 s behind) is still recomputed after
 * a clean reopen and after a crash image, so no window counts a sample twice. */
static void test_rewrite_after_reopen(void **st)
{
    (void)st;
    fake_now = T0 + DAY;
    for (int crash = 0; crash < 2; crash++) {
        char dir[256];
        snprintf(dir, sizeof dir, "%s/reopen%d", tmpdir, crash);
        bdb_db *db = open_db(dir);
        for (int i = 0; i < 120; i++)
            put(db, "dev", T0 + i * 1000, i);
        assert_int_equal(bdb_db_flush(db), BDB_OK);
        if (!crash) {
            assert_int_equal(bdb_db_close(db), BDB_OK);
            db = open_db(dir);
        }
        put(db, "dev", T0 + 119 * 1000, -50); /* the newest flushed time, rewritten */
        put(db, "dev", T0 + 30 * 1000, 1e3);  /* 89 s behind: not late */
        if (crash) {
            char img[256];
            snprintf(img, sizeof img, "%s/reopen-img", tmpdir);
            eu_copy_tree(dir, img, EU_SKIP_LOCK); /* WAL holds the rewrites, no flush */
            assert_int_equal(bdb_db_close(db), BDB_OK);
            db = open_db(img);
        }
        assert_int_equal(bdb_db_flush(db), BDB_OK);
        assert_int_equal(mismatches(db, "dev", T0, T0 + DAY), 0);
        bdb_late_stats ls;
        bdb_db_late_get_stats(db, &ls);
        assert_int_equal(ls.late_events, 0);
        assert_int_equal(ls.recomputed[0], 2);
        assert_int_equal(bdb_db_close(db), BDB_OK);
    }
}

/* Out-of-order samples of a device with nothing in a committed tier file are no
 * rewrite: no mark, no recompute (each used to cost a recompute from raw in the first
 * flush after open), live and replayed from the WAL alike; the windows are right. */
static void test_new_device_no_marks(void **st)
{
    (void)st;
    fake_now = T0 + DAY;
    char dir[256], img[300];
    snprintf(dir, sizeof dir, "%s/fresh", tmpdir);
    snprintf(img, sizeof img, "%s/fresh-img", tmpdir);
    bdb_db *db = open_db(dir);
    for (int i = 0; i < 60; i++) /* pairs sent newest first */
        put(db, "dev", T0 + (i ^ 1) * 1000, i);
    bdb_late_stats ls;
    bdb_db_late_get_stats(db, &ls);
    assert_int_equal(ls.dirty_marks, 0);
    eu_copy_tree(dir, img, EU_SKIP_LOCK); /* a crash before the first flush */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(mismatches(db, "dev", T0, T0 + DAY), 0);
    bdb_db_late_get_stats(db, &ls);
    assert_int_equal(ls.dirty_marks + ls.recomputed[0], 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db(img); /* the replay creates the device: still nothing committed */
    bdb_db_late_get_stats(db, &ls);
    assert_int_equal(ls.dirty_marks, 0);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(mismatches(db, "dev", T0, T0 + DAY), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static int64_t short_1m(void *ctx, const char *tn, enum bdb_res res, int64_t dflt)
{
    (void)ctx;
    (void)tn;
    return res == BDB_RES_1M ? DAY : dflt;
}

/* A late event into an hour whose minutes are past the 1m tier's retention: the 1m
 * tier is derived from raw data, which still holds the hour, so the hour and the day
 * are rebuilt exactly (no fallback). */
static void test_rebuilt_when_minutes_expired(void **st)
{
    (void)st;
    fake_now = T0 + 2 * DAY;
    bdb_db *db = open_db(datadir);
    bdb_db_tier_set_retention_hook(db, short_1m, NULL);
    write_base(db, "dev");
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    fake_now = T0 + 3 * DAY; /* the minutes of day 1 are past the 1m tier's retention */
    put(db, "dev", T0 + 2 * HOUR + 1, 42);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_late_stats ls;
    bdb_db_late_get_stats(db, &ls);
    assert_int_equal(ls.fallbacks, 0);
    assert_true(ls.recomputed[1] >= 1);
    assert_int_equal(mismatches_from(db, "dev", T0, T0 + 2 * DAY, BDB_RES_1H), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A late event into an hour whose raw data has expired cannot be rebuilt from it: its
 * windows stay partial (counted as a fallback) instead of being replaced by a window
 * that lost the other minutes. */
static void test_fallback_when_raw_expired(void **st)
{
    (void)st;
    fake_now = T0 + 2 * DAY;
    bdb_db_opts o;
    eu_opts(&o, datadir, eu_clock, &fake_now);
    o.late_threshold_ms = HOUR;
    o.sync_mode = BDB_WAL_SYNC_PERIODIC;
    o.retention_ms = 2 * DAY;
    bdb_db *db = eu_open(&o);
    write_base(db, "dev");
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    const char *m[1] = {"temp"};
    bdb_rollup r;
    bdb_rollup_init(&r, HOUR);
    assert_int_equal(
        bdb_db_tier_read(db, "t1", "dev", m, 1, BDB_RES_1H, T0 + 2 * HOUR, T0 + 3 * HOUR, &r),
        BDB_OK);
    assert_int_equal(r.n, 1);
    uint64_t before = bdb_stats_count(&r.w[0].st);
    fake_now = T0 + 4 * DAY + 1; /* all of the raw data is past its retention */
    put(db, "dev", T0 + 2 * HOUR + 1, 42);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_late_stats ls;
    bdb_db_late_get_stats(db, &ls);
    assert_int_equal(ls.fallbacks, 1);
    assert_int_equal(ls.recomputed[0], 0);
    /* the partial window merged: the hour counts the late sample once more */
    assert_int_equal(
        bdb_db_tier_read(db, "t1", "dev", m, 1, BDB_RES_1H, T0 + 2 * HOUR, T0 + 3 * HOUR, &r),
        BDB_OK);
    assert_int_equal(r.n, 1);
    assert_int_equal(bdb_stats_count(&r.w[0].st), before + 1);
    bdb_rollup_free(&r);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_late_hours_and_days, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rewrite_of_flushed_time, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_keeps_recompute, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rewrite_after_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_new_device_no_marks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rebuilt_when_minutes_expired, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fallback_when_raw_expired, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
