/* db_settled: the settled version of a tenant's samples (db.h, bdb_db_settled_version),
 * on a db with a test clock.
 *
 * Covered: a write whose reports are all newer than BDB_SETTLED_MS / 2 behind the clock
 * leaves the version; a batch with a report older moves it once, for its tenant only;
 * a retention pass that drops the tenant's samples moves it, and again once they are
 * gone; a dropped tenant's moves; a db turned read-only by a failed write refuses the
 * version; a db with a sink refuses it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "engutil.h"
#include "storage/fakesink.h"

#include "storage/vfs/vfs_fault.h"

#include <errno.h>

#define MIN 60000LL
#define DAY 86400000LL

static int64_t now_ms;
static char tmp[128], data[160];

static int setup(void **st)
{
    (void)st;
    now_ms = 1700000000000LL;
    eu_scratch(tmp, sizeof tmp, "settled", EU_TMPFS, data, sizeof data);
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    return eu_cleanup(tmp);
}

static uint64_t version(bdb_db *db, const char *tn)
{
    uint64_t v = 0;
    assert_int_equal(bdb_db_settled_version(db, tn, &v), BDB_OK);
    return v;
}

static void test_writes_move_their_tenant(void **st)
{
    (void)st;
    bdb_db_opts o;
    eu_opts(&o, data, eu_clock, &now_ms);
    bdb_db *db = eu_open(&o);
    uint64_t a = version(db, "a"), b = version(db, "b");
    assert_int_equal(version(db, "a"), a); /* reading it changes nothing */
    /* fresh: the newest report and one just inside half the horizon */
    eu_put(db, "a", "d1", "m", now_ms - 1000, 1, 1);
    eu_put(db, "a", "d1", "m", now_ms - BDB_SETTLED_MS / 2, 2, 2);
    assert_int_equal(version(db, "a"), a);
    /* a batch with a report older than that moves it, once (two of three here) */
    bdb_batch *bt = bdb_batch_new();
    bdb_batch_begin(bt, "d1", 2, now_ms - 500, 1);
    bdb_batch_metric(bt, "m", 1, 3);
    assert_int_equal(bdb_batch_end(bt), 1);
    bdb_batch_begin(bt, "d2", 2, now_ms - BDB_SETTLED_MS / 2 - 1, 2);
    bdb_batch_metric(bt, "m", 1, 4);
    assert_int_equal(bdb_batch_end(bt), 1);
    bdb_batch_begin(bt, "d3", 2, now_ms - 20 * DAY, 3);
    bdb_batch_metric(bt, "m", 1, 5);
    assert_int_equal(bdb_batch_end(bt), 1);
    assert_int_equal(bdb_db_write(db, "a", bt), BDB_OK);
    bdb_batch_free(bt);
    assert_int_equal(version(db, "a"), a + 1);
    assert_int_equal(version(db, "b"), b); /* another tenant's counter */
    /* an old sample of b moves b's */
    eu_put(db, "b", "d1", "m", now_ms - 10 * MIN, 6, 1);
    assert_int_equal(version(db, "a"), a + 1);
    assert_int_equal(version(db, "b"), b + 1);
    /* the clock moves on: the samples of a minute ago are settled in turn */
    now_ms += 10 * MIN;
    eu_put(db, "a", "d1", "m", now_ms - 11 * MIN + 1, 7, 3);
    assert_int_equal(version(db, "a"), a + 2);
    /* b dropped: its samples are gone */
    assert_int_equal(bdb_db_drop_tenant(db, "b"), BDB_OK);
    assert_true(version(db, "b") > b + 1);
    assert_int_equal(version(db, "a"), a + 2);
    bdb_db_close(db);
}

/* Retention drops a's samples 31 days old: the pass moves a's version. */
static void test_retention_moves(void **st)
{
    (void)st;
    bdb_db_opts o;
    eu_opts(&o, data, eu_clock, &now_ms);
    o.retention_ms = 30 * DAY;
    bdb_db *db = eu_open(&o);
    eu_put_run(db, "a", "d1", now_ms - 29 * DAY - 12 * 3600000LL, MIN, 10);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    uint64_t a = version(db, "a");
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    assert_int_equal(version(db, "a"), a); /* nothing expired yet */
    now_ms += 2 * DAY;
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    bdb_db_stats s;
    bdb_db_get_stats(db, &s);
    assert_true(s.retention_drops >= 1);
    assert_true(version(db, "a") >= a + 2); /* before the drop, and after it */
    bdb_db_close(db);
}

/* Storage fails under a write: the db is read-only and refuses the version. */
static void test_readonly_refuses(void **st)
{
    (void)st;
    bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
    bdb_db_opts o;
    eu_opts(&o, data, eu_clock, &now_ms);
    o.vfs = fv;
    bdb_db *db = eu_open(&o);
    eu_put(db, "a", "d1", "m", now_ms - 1000, 1, 1);
    (void)version(db, "a");
    bdb_vfs_fault_fail_at(fv, bdb_vfs_fault_calls(fv) + 1, EIO, 1);
    bdb_batch *bt = bdb_batch_new();
    bdb_batch_begin(bt, "d1", 2, now_ms - 500, 1);
    bdb_batch_metric(bt, "m", 1, 2);
    assert_int_equal(bdb_batch_end(bt), 1);
    assert_int_not_equal(bdb_db_write(db, "a", bt), BDB_OK);
    bdb_batch_free(bt);
    uint64_t v;
    assert_int_equal(bdb_db_settled_version(db, "a", &v), BDB_ERR_READONLY);
    bdb_db_close(db);
    bdb_vfs_fault_free(fv);
}

/* With a sink, other nodes write the same keyspace: no version. */
static void test_sink_refuses(void **st)
{
    (void)st;
    fakesink *f = fakesink_new(1);
    bdb_db_opts o;
    eu_opts(&o, data, eu_clock, &now_ms);
    o.sink = &f->base;
    bdb_db *db = eu_open(&o);
    uint64_t v;
    assert_int_equal(bdb_db_settled_version(db, "a", &v), BDB_ERR_INVALID);
    bdb_db_close(db);
    fakesink_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_writes_move_their_tenant, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retention_moves, setup, teardown),
        cmocka_unit_test_setup_teardown(test_readonly_refuses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sink_refuses, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
