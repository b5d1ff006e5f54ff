/* Fleet compaction under allocation failure: the flush whose hook merges a window's
 * eight committed fleet files runs with allocation N failing (common/alloc.h,
 * BDB_ALLOC_FAIL_NTH), for N = 1, 2, ... until a run reaches no injected failure.
 * Documented outcome (db_fleet_int.h: fl_maintain "skips a round it has no memory
 * for"; ARCHITECTURE.md: a failed flush keeps head and WAL): the flush returns BDB_OK
 * or BDB_ERR_NOMEM (then succeeds when repeated); every fleet window equals the exact
 * computation over what was written (after a failure, also after a reopen); a compaction skipped
 * for lack of memory is done by a later flush. Figures: "fleet alloc sweep ...". */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "agg/fleet.h"
#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/fleet/db_fleet.h"

#include <dirent.h>
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
#define NFLUSH 9 /* the ninth flush finds the eight committed files of the first ones */
#define PER 4
#define MAX_SITES 5000

static char tmpdir[64], basedir[128], snapdir[128], workdir[128];
static const char *const METS[3] = {"temp", "rpm", "hum"};

static int64_t clock_fn(void *ctx)
{
    (void)ctx;
    return T0 + 2 * DAY;
}

static bdb_db *open_db(const char *dir)
{
    bdb_db_opts o;
    eu_opts(&o, dir, clock_fn, NULL);
    o.sync_mode = BDB_WAL_SYNC_PERIODIC;
    return eu_open(&o);
}

/* Flush k writes PER samples of metric k % 3 for devices a and b (tenant t1 for even
 * k, t2 for odd k), in hour k of day 0: eight files of one window, differing records. */
static void write_flush(bdb_db *db, int k)
{
    bdb_batch *b = bdb_batch_new();
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < PER; i++) {
            bdb_batch_begin(b, d ? "b" : "a", 1, T0 + k * HOUR + i * MIN + d, 0);
            bdb_batch_metric(b, METS[k % 3], strlen(METS[k % 3]), k * 10.0 + i + d * 0.5);
            assert_int_equal(bdb_batch_end(b), 1);
        }
    assert_int_equal(bdb_db_write(db, k % 2 ? "t2" : "t1", b), BDB_OK);
    bdb_batch_free(b);
}

/* The fleet windows of (tn, metric) at 1h and 1d against what write_flush wrote for
 * flushes [0, nflush). */
static void check(bdb_db *db, int nflush)
{
    for (int t = 0; t < 2; t++)
        for (int m = 0; m < 3; m++)
            for (int r = BDB_RES_1H; r <= BDB_RES_1D; r++) {
                int64_t w = bdb_res_width((enum bdb_res)r);
                bdb_fleet f;
                bdb_fleet_init(&f, w);
                assert_int_equal(bdb_db_fleet_read(db, t ? "t2" : "t1", METS[m], (enum bdb_res)r,
                                                   T0, T0 + DAY, &f),
                                 BDB_OK);
                size_t nwin = 0;
                for (int64_t s = T0; s < T0 + DAY; s += w) {
                    uint64_t n = 0;
                    double sum = 0, mn = INFINITY, mx = -INFINITY;
                    for (int k = 0; k < nflush; k++) {
                        if (k % 2 != t || k % 3 != m || T0 + k * HOUR < s || T0 + k * HOUR >= s + w)
                            continue;
                        for (int d = 0; d < 2; d++)
                            for (int i = 0; i < PER; i++) {
                                double v = k * 10.0 + i + d * 0.5;
                                n++;
                                sum += v;
                                mn = fmin(mn, v);
                                mx = fmax(mx, v);
                            }
                    }
                    const bdb_fleet_win *fw = bdb_fleet_find(&f, s);
                    if (!n) {
                        assert_null(fw);
                        continue;
                    }
                    nwin++;
                    assert_non_null(fw);
                    bdb_fleet_row row;
                    bdb_fleet_row_of(&f, fw, &row);
                    assert_int_equal(row.devices, 2);
                    assert_int_equal(row.readings, n);
                    assert_true(row.min == mn && row.max == mx);
                    assert_true(fabs(row.avg - sum / (double)n) <= 1e-12 * fabs(sum / (double)n));
                }
                assert_int_equal(f.n, nwin);
                bdb_fleet_free(&f);
            }
}

static int setup(void **st)
{
    (void)st;
    /* tmpfs when there is one: every run copies a directory and flushes */
    eu_scratch(tmpdir, sizeof tmpdir, "falloc", EU_TMPFS, NULL, 0);
    snprintf(basedir, sizeof basedir, "%s/base", tmpdir);
    snprintf(workdir, sizeof workdir, "%s/work", tmpdir);
    snprintf(snapdir, sizeof snapdir, "%s/snap", tmpdir);
    bdb_log_set_level(BDB_LOG_ERROR + 1); /* the injected failures are expected */
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    bdb_alloc_fail_disarm();
    if (!getenv("KEEP"))
        tu_rm_rf(tmpdir);
    return 0;
}

static void test_compaction_flush(void **st)
{
    (void)st;
    bdb_db *db = open_db(basedir);
    for (int k = 0; k < NFLUSH - 1; k++) {
        write_flush(db, k);
        assert_int_equal(bdb_db_flush(db), BDB_OK);
    }
    /* a copy with the eight files uncompacted: the close's own flush would merge them */
    eu_copy_tree(basedir, snapdir, EU_SKIP_LOCK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    uint64_t n = 0, nomem = 0, skipped = 0;
    for (uint64_t nth = 1; nth < MAX_SITES; nth++) {
        tu_rm_rf(workdir);
        eu_copy_tree(snapdir, workdir, EU_SKIP_LOCK);
        db = open_db(workdir);
        bdb_fleet_file_stats fs;
        bdb_db_fleet_get_stats(db, &fs); /* loaded before arming: the sweep is the flush */
        write_flush(db, NFLUSH - 1);
        eu_arm(nth);
        int rc = bdb_db_flush(db);
        int hit = eu_disarm();
        assert_true(rc == BDB_OK || rc == BDB_ERR_NOMEM);
        check(db, NFLUSH);
        if (rc != BDB_OK)
            assert_int_equal(bdb_db_flush(db), BDB_OK);
        bdb_db_fleet_get_stats(db, &fs);
        int nf = NFLUSH;
        if (fs.compacted == 0) { /* skipped: the next flush does it */
            skipped++;
            write_flush(db, NFLUSH);
            assert_int_equal(bdb_db_flush(db), BDB_OK);
            bdb_db_fleet_get_stats(db, &fs);
            assert_true(fs.compacted >= 1);
            nf++;
        }
        check(db, nf);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        if (rc != BDB_OK || nf != NFLUSH) { /* after a failure: what the disk holds */
            db = open_db(workdir);
            check(db, nf);
            assert_int_equal(bdb_db_close(db), BDB_OK);
        }
        if (!eu_swept(&n, &nomem, hit, rc))
            break;
    }
    assert_true(n > 0 && n < MAX_SITES - 1);
    printf("fleet alloc sweep compaction flush: %llu allocations failed in turn, %llu flushes "
           "answered BDB_ERR_NOMEM, %llu compactions skipped and done by the next flush; "
           "every fleet window exact\n",
           (unsigned long long)n, (unsigned long long)nomem, (unsigned long long)skipped);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_compaction_flush, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
