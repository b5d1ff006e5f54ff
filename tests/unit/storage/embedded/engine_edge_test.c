/* engine_edge: engine entry points at the edges of their documented contracts that
 * the feature tests do not reach.
 *
 * - bdb_db_tenant_usage (the device quota's question): invalid tenant, unknown
 *   tenant, a batch naming known and new devices (each new one counted once), no batch.
 * - Sub-buckets: the documented BDB_ERR_INVALID bounds, a device created by the
 *   setting, a repeated setting that changes nothing, a pending setting replaced
 *   before any event, the setting surviving a reopen through the WAL and through the
 *   catalog, and BDB_ERR_READONLY once a WAL fsync failed (failvfs.h).
 * - The usage tracker before it is started and with arguments it ignores. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"
#include "storage/failvfs.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/hot/db_hot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T0 INT64_C(1790000000000)

static char tmpdir[64], datadir[128];
static int64_t now_ms = T0;

static bdb_db *open_db(bdb_vfs *vfs)
{
    bdb_db_opts o;
    eu_opts(&o, datadir, eu_clock, &now_ms);
    o.vfs = vfs;
    return eu_open(&o);
}

static int write_one(bdb_db *db, const char *tenant, const char *dev, int64_t ts)
{
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, dev, strlen(dev), ts, 1);
    bdb_batch_metric(b, "m", 1, 1.5);
    bdb_batch_end(b);
    int rc = bdb_db_write(db, tenant, b);
    bdb_batch_free(b);
    return rc;
}

static int setup(void **state)
{
    (void)state;
    eu_scratch(tmpdir, sizeof tmpdir, "edge", EU_TMPFS, datadir, sizeof datadir);
    bdb_log_set_level((enum bdb_log_level)(BDB_LOG_ERROR + 1));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return eu_cleanup(tmpdir);
}

static void test_tenant_usage(void **state)
{
    (void)state;
    bdb_db *db = open_db(NULL);
    uint64_t devs = 99, fresh = 99;
    assert_int_equal(bdb_db_tenant_usage(db, NULL, NULL, &devs, &fresh), BDB_ERR_INVALID);
    assert_int_equal(bdb_db_tenant_usage(db, "", NULL, &devs, &fresh), BDB_ERR_INVALID);
    /* a batch for a tenant nobody has: every distinct device is new, once */
    bdb_batch *b = bdb_batch_new();
    const char *names[] = {"a", "b", "a", "c", "b"};
    for (size_t i = 0; i < 5; i++) {
        bdb_batch_begin(b, names[i], 1, T0 + (int64_t)i, i + 1);
        bdb_batch_metric(b, "m", 1, 1.0);
        bdb_batch_end(b);
    }
    assert_int_equal(bdb_db_tenant_usage(db, "t", b, &devs, &fresh), BDB_OK);
    assert_int_equal(devs, 0);
    assert_int_equal(fresh, 3);
    /* once "a" exists, only b and c are new; without a batch nothing is */
    assert_int_equal(write_one(db, "t", "a", T0), BDB_OK);
    assert_int_equal(bdb_db_tenant_usage(db, "t", b, &devs, &fresh), BDB_OK);
    assert_int_equal(devs, 1);
    assert_int_equal(fresh, 2);
    assert_int_equal(bdb_db_tenant_usage(db, "t", NULL, &devs, &fresh), BDB_OK);
    assert_int_equal(devs, 1);
    assert_int_equal(fresh, 0);
    /* another tenant's device of the same name is not this tenant's */
    assert_int_equal(bdb_db_tenant_usage(db, "u", b, &devs, &fresh), BDB_OK);
    assert_int_equal(devs, 0);
    assert_int_equal(fresh, 3);
    bdb_batch_free(b);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_subbucket_settings(void **state)
{
    (void)state;
    bdb_db *db = open_db(NULL);
    assert_int_equal(bdb_db_set_subbuckets(db, "t", "d", 0), BDB_ERR_INVALID);
    assert_int_equal(bdb_db_set_subbuckets(db, "t", "d", BDB_SUBBUCKETS_MAX + 1), BDB_ERR_INVALID);
    assert_int_equal(bdb_db_subbuckets(db, "t", "d"), 1); /* unknown device */
    int64_t s, e;
    uint32_t n;
    assert_int_equal(bdb_db_partition_at(db, "t", "d", T0, &s, &e, &n), BDB_ERR_NOTFOUND);
    /* the setting creates the device; set again before any event, it replaces the
     * pending entry instead of stacking */
    assert_int_equal(bdb_db_set_subbuckets(db, "t", "d", 4), BDB_OK);
    assert_int_equal(bdb_db_set_subbuckets(db, "t", "d", 8), BDB_OK);
    assert_int_equal(bdb_db_subbuckets(db, "t", "d"), 8);
    bdb_hot_engine_stats hs;
    bdb_db_hot_stats(db, &hs);
    uint64_t changes = hs.subbucket_changes;
    assert_int_equal(write_one(db, "t", "d", T0 + 5000), BDB_OK);
    /* the same count again once it is in force: nothing to log */
    assert_int_equal(bdb_db_set_subbuckets(db, "t", "d", 8), BDB_OK);
    bdb_db_hot_stats(db, &hs);
    assert_int_equal(hs.subbucket_changes, changes);
    assert_int_equal(bdb_db_partition_at(db, "t", "d", T0 + 5000, &s, &e, &n), BDB_OK);
    assert_true(s <= T0 + 5000 && T0 + 5000 < e);
    assert_int_equal(n, 8);
    /* a new count from the second after the newest event */
    assert_int_equal(bdb_db_set_subbuckets(db, "t", "d", 2), BDB_OK);
    assert_int_equal(write_one(db, "t", "d", T0 + 9000), BDB_OK);
    /* reopen without a flush: the settings come back from the WAL */
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db(NULL);
    assert_int_equal(bdb_db_subbuckets(db, "t", "d"), 2);
    assert_int_equal(bdb_db_partition_at(db, "t", "d", T0 + 5000, &s, &e, &n), BDB_OK);
    assert_int_equal(n, 8);
    assert_int_equal(bdb_db_partition_at(db, "t", "d", T0 + 9000, &s, &e, &n), BDB_OK);
    assert_int_equal(n, 2);
    /* and after a flush, from the catalog */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db(NULL);
    assert_int_equal(bdb_db_subbuckets(db, "t", "d"), 2);
    assert_int_equal(bdb_db_partition_at(db, "t", "d", T0 + 5000, &s, &e, &n), BDB_OK);
    assert_int_equal(n, 8);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Finds the call number of the first WAL fsync of a write, by a dry run. */
static uint64_t first_wal_sync(void)
{
    for (uint64_t n = 1; n < 500; n++) {
        tu_rm_rf(datadir);
        failvfs v;
        fv_init(&v, bdb_vfs_posix(), 0, EIO);
        bdb_db *db = open_db(&v.base);
        uint64_t base = fv_calls(&v);
        bdb_db_close(db);
        tu_rm_rf(datadir);
        /* the calls of open are the same each time; fail each later call in turn
         * until the failed one is a WAL sync */
        fv_init(&v, bdb_vfs_posix(), base + n, EIO);
        db = open_db(&v.base);
        write_one(db, "t", "d", T0);
        int hit = v.failed_op == FV_SYNC && strstr(v.failed_path, "/wal/");
        bdb_db_close(db);
        if (hit)
            return base + n;
    }
    fail_msg("no WAL fsync in a write");
    return 0;
}

static void test_readonly_after_wal_fsync_failure(void **state)
{
    (void)state;
    uint64_t at = first_wal_sync();
    tu_rm_rf(datadir);
    failvfs v;
    fv_init(&v, bdb_vfs_posix(), at, EIO);
    bdb_db *db = open_db(&v.base);
    /* the write whose fsync failed is not acknowledged (the WAL already reports the
     * read-only state for it) */
    int rc = write_one(db, "t", "d", T0);
    assert_true(rc == BDB_ERR_READONLY || rc == BDB_ERR_IO);
    assert_int_equal(write_one(db, "t", "d", T0 + 1), BDB_ERR_READONLY);
    assert_int_equal(bdb_db_set_subbuckets(db, "t", "d", 4), BDB_ERR_READONLY);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_true(st.readonly);
    assert_non_null(strstr(st.readonly_reason, "fsync"));
    bdb_db_close(db);
}

static void test_usage_tracker_edges(void **state)
{
    (void)state;
    bdb_db *db = open_db(NULL);
    bdb_storage_usage su;
    bdb_partition_summary ps;
    /* not started: documented NOTFOUND, zeroed output; notes are dropped */
    assert_int_equal(bdb_db_usage_refresh(db), BDB_ERR_NOTFOUND);
    assert_int_equal(bdb_db_tenant_storage(db, "t", &su), BDB_ERR_NOTFOUND);
    assert_int_equal(su.bytes, 0);
    assert_int_equal(bdb_db_partition_summary(db, &ps), BDB_ERR_NOTFOUND);
    bdb_db_usage_note(db, "t", 5);
    bdb_usage_opts uo = {.partition_warn_bytes = 2, .manual = 1};
    bdb_db_usage_start(db, &uo);
    bdb_db_usage_start(db, &uo); /* again, same options: no change */
    uo.partition_warn_bytes = 1;
    bdb_db_usage_start(db, &uo); /* new options */
    /* ignored arguments */
    bdb_db_usage_note(db, NULL, 5);
    bdb_db_usage_note(db, "t", 0);
    assert_int_equal(write_one(db, "t", "d", T0), BDB_OK);
    bdb_db_usage_note(db, "t", 1);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    assert_int_equal(bdb_db_tenant_storage(db, "t", &su), BDB_OK);
    assert_true(su.measured);
    assert_true(su.block_bytes > 0);
    assert_int_equal(bdb_db_tenant_storage(db, "nobody", &su), BDB_OK);
    assert_int_equal(su.bytes, 0);
    assert_int_equal(bdb_db_partition_summary(db, &ps), BDB_OK);
    assert_int_equal(ps.count, 1);
    assert_int_equal(ps.large, 1); /* above the 1-byte warning size (one sample: 2 bytes) */
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tenant_usage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_subbucket_settings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_readonly_after_wal_fsync_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_usage_tracker_edges, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
