/* The late path, the tier reads and the fleet's lists under allocation failure:
 * every allocation of an operation fails in turn (common/alloc.h, BDB_ALLOC_FAIL_NTH,
 * N = 1, 2, ... until a run reaches no injected failure). Documented outcome
 * (ARCHITECTURE.md "Functions that can fail", db_tier.h, db_fleet.h): the call
 * returns BDB_OK with the exact answer, or BDB_ERR_NOMEM and nothing half-applied:
 *   - the first write with an out-of-order sample (it creates the late state): the
 *     write is whole or absent, and after a flush the tiers equal raw;
 *   - a flush that recomputes late minutes (with the fleet's recompute hook): a failed
 *     flush keeps everything and the retry makes the tiers equal raw, with no mark left;
 *   - tier reads at 1m, 1h and 1d fixed from raw around marked minutes, the marked
 *     windows and the fleet's list of windows: exact or BDB_ERR_NOMEM;
 *   - loading the fleet's list of recomputed windows: BDB_ERR_NOMEM, then loaded whole
 *     at the next use.
 * Leaks: the ASan build runs unit tests with detect_leaks=1. Figures: "late alloc sweep
 * <op>: N allocations failed in turn, ...". */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "agg/fleet.h"
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
#define MAX_SITES 5000            /* bound of every sweep */

static char tmpdir[64], datadir[128];

static int64_t clock_fn(void *ctx)
{
    (void)ctx;
    return T0 + 2 * DAY;
}

static int setup(void **st)
{
    (void)st;
    /* tmpfs when there is one: every flush fsyncs */
    eu_scratch(tmpdir, sizeof tmpdir, "lalloc", EU_TMPFS, datadir, sizeof datadir);
    bdb_log_set_level(BDB_LOG_ERROR + 1);
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
    eu_opts(&o, datadir, clock_fn, NULL);
    o.late_threshold_ms = HOUR;
    o.sync_mode = BDB_WAL_SYNC_PERIODIC;
    return eu_open(&o);
}

static bdb_batch *batch_of(const char *dev, const int64_t *ts, const double *v, size_t n)
{
    bdb_batch *b = bdb_batch_new();
    for (size_t i = 0; i < n; i++) {
        bdb_batch_begin(b, dev, strlen(dev), ts[i], 0);
        bdb_batch_metric(b, "temp", 4, v[i]);
        assert_int_equal(bdb_batch_end(b), 1);
    }
    return b;
}

static void put(bdb_db *db, const char *dev, int64_t ts, double v)
{
    eu_put(db, "t1", dev, "temp", ts, v, 0);
}

/* Tier windows at res over [T0, T0 + 2 days) that differ from raw (count, min, max,
 * sum), plus windows raw does not have. */
static size_t diff_res(bdb_db *db, const char *dev, enum bdb_res res)
{
    return eu_tier_diff(db, "t1", dev, "temp", res, T0, T0 + 2 * DAY, T0, T0 + 2 * DAY);
}

static size_t diff_all(bdb_db *db, const char *dev)
{
    return diff_res(db, dev, BDB_RES_1M) + diff_res(db, dev, BDB_RES_1H) +
           diff_res(db, dev, BDB_RES_1D);
}

/* Base: 5 hours of one sample every 10 minutes for dev, three in the minutes the
 * rewrites below go to, flushed. */
static bdb_db *base(void)
{
    tu_rm_rf(datadir);
    bdb_db *db = open_db();
    bdb_db_fleet_attach(db);
    for (int64_t t = T0; t < T0 + 5 * HOUR; t += 10 * MIN) {
        put(db, "dev", t, (double)((t / MIN) % 17));
        if (t == T0 + 10 * MIN || t == T0 + 2 * HOUR + 10 * MIN) { /* in order: not late */
            put(db, "dev", t + 20000, 4.5);
            put(db, "dev", t + 40000, 5.5);
        }
    }
    bdb_late_stats ls;
    bdb_db_late_get_stats(db, &ls);
    assert_int_equal(ls.dirty_marks, 0);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    return db;
}

/* Rewrites of flushed times and late new times in hours 0 and 2 of the base (over an
 * hour behind the newest event: late events too). */
static void late_rewrites(bdb_db *db)
{
    for (int h = 0; h < 3; h += 2) {
        put(db, "dev", T0 + h * HOUR + 10 * MIN + 40000, -1.0 - h);
        put(db, "dev", T0 + h * HOUR + 25 * MIN + 7, 100.0 + h);
    }
}

static void report(const char *op, uint64_t n, uint64_t nomem)
{
    printf("late alloc sweep %s: %llu allocations failed in turn, %llu runs answered "
           "BDB_ERR_NOMEM, the rest exact\n",
           op, (unsigned long long)n, (unsigned long long)nomem);
}

/* The first out-of-order write of a fresh engine creates the late state. */
static void test_first_late_write(void **st)
{
    (void)st;
    const int64_t ts[3] = {T0 + 5 * MIN, T0 + 2 * MIN, T0 + 2 * MIN + 1};
    const double v[3] = {1, 2, 3};
    uint64_t n = 0, nomem = 0;
    for (uint64_t nth = 1; nth < MAX_SITES; nth++) {
        tu_rm_rf(datadir);
        bdb_db *db = open_db();
        put(db, "dev", T0 + 10 * MIN, 0);
        bdb_batch *b = batch_of("dev", ts, v, 3);
        eu_arm(nth);
        int rc = bdb_db_write(db, "t1", b);
        int hit = eu_disarm();
        bdb_batch_free(b);
        assert_true(rc == BDB_OK || rc == BDB_ERR_NOMEM);
        const char *m[1] = {"temp"};
        bdb_samples s;
        memset(&s, 0, sizeof s);
        int rrc = bdb_db_read(db, "t1", "dev", m, 1, T0, T0 + HOUR, &s, NULL);
        if (rrc == BDB_OK && rc == BDB_OK)
            assert_int_equal(s.n, 4);
        bdb_samples_free(&s);
        bdb_db_close(db); /* a write failing past its WAL append makes it read-only */
        db = open_db();
        memset(&s, 0, sizeof s);
        assert_int_equal(bdb_db_read(db, "t1", "dev", m, 1, T0, T0 + HOUR, &s, NULL), BDB_OK);
        assert_true(s.n == 4 || (rc != BDB_OK && s.n == 1));
        bdb_samples_free(&s);
        assert_int_equal(bdb_db_flush(db), BDB_OK);
        assert_int_equal(diff_all(db, "dev"), 0);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        if (!eu_swept(&n, &nomem, hit, rc))
            break;
    }
    assert_true(n > 0 && n < MAX_SITES - 1);
    report("first out-of-order write", n, nomem);
}

/* A flush recomputing 18 hours' dirty minutes, their hours and day. */
static void test_recompute_flush(void **st)
{
    (void)st;
    uint64_t n = 0, nomem = 0;
    for (uint64_t nth = 1; nth < MAX_SITES; nth++) {
        bdb_db *db = base();
        late_rewrites(db);
        if (getenv("LATE_ALLOC_COUNT")) {
            eu_arm(UINT64_MAX);
            bdb_db_flush(db);
            printf("recompute flush: %llu allocations\n",
                   (unsigned long long)bdb_alloc_fail_count());
            bdb_alloc_fail_disarm();
            bdb_db_close(db);
            return;
        }
        eu_arm(nth);
        int rc = bdb_db_flush(db);
        int hit = eu_disarm();
        assert_true(rc == BDB_OK || rc == BDB_ERR_NOMEM);
        assert_int_equal(diff_all(db, "dev"), 0); /* right before the retry too */
        if (rc != BDB_OK)
            assert_int_equal(bdb_db_flush(db), BDB_OK);
        bdb_late_stats ls;
        bdb_db_late_get_stats(db, &ls);
        assert_int_equal(ls.pending, 0);
        assert_int_equal(diff_all(db, "dev"), 0);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        if (!eu_swept(&n, &nomem, hit, rc))
            break;
    }
    assert_true(n > 0 && n < MAX_SITES - 1);
    report("recompute flush", n, nomem);
}

struct answer {
    bdb_rollup r[3];
    int64_t *mk, *fd;
    size_t nmk, nfd;
};

static int read_all(bdb_db *db, struct answer *a)
{
    const char *m[1] = {"temp"};
    int rc = BDB_OK;
    for (int k = 0; k < 3 && rc == BDB_OK; k++)
        rc = bdb_db_tier_read(db, "t1", "dev", m, 1, (enum bdb_res)(k + 1), T0, T0 + 2 * DAY,
                              &a->r[k]);
    if (rc == BDB_OK)
        rc = bdb_db_late_marked_windows(db, "t1", BDB_RES_1H, T0, T0 + 2 * DAY, &a->mk, &a->nmk);
    if (rc == BDB_OK)
        rc = bdb_db_fleet_dirty(db, "t1", "temp", BDB_RES_1H, T0, T0 + 2 * DAY, &a->fd, &a->nfd);
    return rc;
}

static void answer_init(struct answer *a)
{
    memset(a, 0, sizeof *a);
    for (int k = 0; k < 3; k++)
        bdb_rollup_init(&a->r[k], bdb_res_width((enum bdb_res)(k + 1)));
}

static void answer_free(struct answer *a)
{
    for (int k = 0; k < 3; k++)
        bdb_rollup_free(&a->r[k]);
    free(a->mk);
    free(a->fd);
}

static int same_windows(const bdb_rollup *x, const bdb_rollup *y)
{
    if (x->n != y->n)
        return 0;
    for (size_t i = 0; i < x->n; i++)
        if (x->w[i].start != y->w[i].start ||
            bdb_stats_count(&x->w[i].st) != bdb_stats_count(&y->w[i].st) ||
            bdb_stats_sum(&x->w[i].st) != bdb_stats_sum(&y->w[i].st) ||
            bdb_stats_min(&x->w[i].st) != bdb_stats_min(&y->w[i].st))
            return 0;
    return 1;
}

/* Reads fixed from raw around marked minutes, the marked windows and the fleet's
 * list (recorded windows of an earlier flush merged with the marks). */
static void test_reads(void **st)
{
    (void)st;
    bdb_db *db = base();
    late_rewrites(db);
    assert_int_equal(bdb_db_flush(db), BDB_OK); /* recorded in the fleet's list */
    late_rewrites(db);                          /* marked again, not flushed */
    put(db, "dev", T0 + 3 * HOUR + 3 * MIN, 9);
    struct answer want;
    answer_init(&want);
    assert_int_equal(read_all(db, &want), BDB_OK);
    assert_int_equal(want.nmk, 3);
    assert_int_equal(want.nfd, 3);
    assert_int_equal(diff_all(db, "dev"), 0);
    uint64_t n = 0, nomem = 0;
    for (uint64_t nth = 1; nth < MAX_SITES; nth++) {
        struct answer got;
        answer_init(&got);
        eu_arm(nth);
        int rc = read_all(db, &got);
        int hit = eu_disarm();
        assert_true(rc == BDB_OK || rc == BDB_ERR_NOMEM);
        if (rc == BDB_OK) {
            for (int k = 0; k < 3; k++)
                assert_true(same_windows(&got.r[k], &want.r[k]));
            assert_int_equal(got.nmk, want.nmk);
            assert_int_equal(got.nfd, want.nfd);
            assert_memory_equal(got.fd, want.fd, want.nfd * sizeof *want.fd);
        }
        answer_free(&got);
        if (!eu_swept(&n, &nomem, hit, rc))
            break;
    }
    assert_true(n > 0 && n < MAX_SITES - 1);
    report("tier reads and window lists", n, nomem);
    /* loading the fleet's list at the first use after open */
    assert_int_equal(bdb_db_close(db), BDB_OK);
    uint64_t nl = 0, nlnomem = 0;
    for (uint64_t nth = 1; nth < MAX_SITES; nth++) {
        db = open_db();
        int64_t *v = NULL;
        size_t nv = 0;
        eu_arm(nth);
        int rc = bdb_db_fleet_dirty(db, "t1", "temp", BDB_RES_1H, T0, T0 + 2 * DAY, &v, &nv);
        int hit = eu_disarm();
        assert_true(rc == BDB_OK || rc == BDB_ERR_NOMEM);
        if (rc == BDB_OK)
            assert_int_equal(nv, want.nfd);
        free(v);
        v = NULL;
        /* the next use loads it whole */
        assert_int_equal(
            bdb_db_fleet_dirty(db, "t1", "temp", BDB_RES_1H, T0, T0 + 2 * DAY, &v, &nv), BDB_OK);
        assert_int_equal(nv, want.nfd);
        free(v);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        if (!eu_swept(&nl, &nlnomem, hit, rc))
            break;
    }
    assert_true(nl > 0 && nl < MAX_SITES - 1);
    report("fleet list load", nl, nlnomem);
    answer_free(&want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_first_late_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recompute_flush, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reads, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
