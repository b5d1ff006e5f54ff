/* space: the disk reserve (db_space.c, issue 18). It is made at open with the size
 * asked for; a flush that fails for lack of space gets it and is retried at once, so
 * the flush succeeds and the reserve is made again; while the reserve is out, writes
 * are refused with BDB_ERR_NOSPACE and nothing acknowledged is lost; a write past the
 * hold mark holds writes until a flush; size 0 removes a reserve left by an earlier
 * run. ENOSPC comes from a VFS whose file writes fail
 * while the test says the disk is full (syncs, creates and renames still work, as on
 * a full disk); the reserve itself is a real file, as it is about the real disk. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "engutil.h"

#include "common/log.h"
#include "storage/embedded/core/db_space.h"

#include <errno.h>

#define T0 INT64_C(1700000000000)
#define RESERVE (1u << 20)

static char tmpdir[512], datadir[600], reserve[700];

static int setup(void **state)
{
    (void)state;
    bdb_log_set_level(BDB_LOG_ERROR + 1); /* the flushes fail on purpose */
    eu_scratch(tmpdir, sizeof tmpdir, "space", EU_TMPFS, datadir, sizeof datadir);
    snprintf(reserve, sizeof reserve, "%s/%s", datadir, DB_SPACE_FILE);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return eu_cleanup(tmpdir);
}

static int64_t clock_now(void *ctx)
{
    (void)ctx;
    return T0 + 86400000;
}

/* -1 when the reserve file does not exist */
static long long reserve_size(void)
{
    struct stat st;
    return stat(reserve, &st) == 0 ? (long long)st.st_size : -1;
}

static int put1(bdb_db *db, int64_t ts, double v)
{
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, "d", 1, ts, 1);
    bdb_batch_metric(b, "m", 1, v);
    bdb_batch_end(b);
    int rc = bdb_db_write(db, "t", b);
    bdb_batch_free(b);
    return rc;
}

static void check_all(bdb_db *db, int n)
{
    const char *m[1] = {"m"};
    bdb_samples s;
    memset(&s, 0, sizeof s);
    assert_int_equal(bdb_db_read(db, "t", "d", m, 1, T0, T0 + 86400000, &s, NULL), BDB_OK);
    assert_int_equal(s.n, (size_t)n);
    for (int i = 0; i < n; i++)
        assert_true(s.ts[i] == T0 + i * 1000 && s.v[i] == (double)i);
    bdb_samples_free(&s);
}

/* ---------------------------------------------------------------- a full disk */

/* File writes to fail with ENOSPC: the next n, or every one (-1). */
static int full_writes;
static struct bdb_vfs_ops full_ops;
static bdb_vfs full_vfs = {&full_ops};

static int full_pwrite(bdb_file *f, const void *buf, size_t n, uint64_t off)
{
    if (full_writes) {
        if (full_writes > 0)
            full_writes--;
        errno = ENOSPC;
        return BDB_ERR_NOSPACE;
    }
    return bdb_vfs_posix()->ops->pwrite(f, buf, n, off);
}

/* Files are the POSIX VFS's, routed through this table so pwrite can fail. */
static int full_open(bdb_vfs *v, const char *path, int flags, bdb_file **out)
{
    (void)v;
    int rc = bdb_vfs_posix()->ops->open(bdb_vfs_posix(), path, flags, out);
    if (rc == BDB_OK)
        (*out)->vfs = &full_vfs;
    return rc;
}

static bdb_vfs *full_disk(void)
{
    full_ops = *bdb_vfs_posix()->ops;
    full_ops.open = full_open;
    full_ops.pwrite = full_pwrite;
    full_writes = 0;
    return &full_vfs;
}

static void test_reserve_given_to_a_failing_flush(void **state)
{
    (void)state;
    bdb_vfs *fv = full_disk();
    bdb_db_opts o;
    eu_opts(&o, datadir, clock_now, NULL);
    o.vfs = fv;
    o.disk_reserve_bytes = RESERVE;
    bdb_db *db = eu_open(&o);
    assert_int_equal(reserve_size(), RESERVE);
    eu_put_run(db, "t", "d", T0, 1000, 3000);
    /* one ENOSPC in the flush's block writing: the retry with the reserve's room
     * succeeds, within the same call */
    full_writes = 1;
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.readonly, 0);
    assert_int_equal(st.flush_failures, 1);
    assert_int_equal(st.flush_fail_streak, 0);
    assert_int_equal(st.space_releases, 1);
    assert_int_equal(st.space_low, 0);
    assert_true(st.blocks > 0);
    assert_int_equal(reserve_size(), RESERVE); /* made again */
    assert_int_equal(put1(db, T0 + 3000 * 1000, 3000.0), BDB_OK);
    check_all(db, 3001);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_writes_refused_while_reserve_out(void **state)
{
    (void)state;
    bdb_vfs *fv = full_disk();
    bdb_db_opts o;
    eu_opts(&o, datadir, clock_now, NULL);
    o.vfs = fv;
    o.disk_reserve_bytes = RESERVE;
    bdb_db *db = eu_open(&o);
    eu_put_run(db, "t", "d", T0, 1000, 2000);
    /* the disk stays full: both attempts fail, the reserve is out, writes refused */
    full_writes = -1;
    assert_int_equal(bdb_db_flush(db), BDB_ERR_NOSPACE);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.readonly, 0);
    assert_int_equal(st.flush_failures, 2);
    assert_int_equal(st.space_low, 1);
    assert_int_equal(reserve_size(), -1);
    full_writes = 0; /* space returns */
    assert_int_equal(put1(db, T0 + 2000 * 1000, 1.0), BDB_ERR_NOSPACE);
    check_all(db, 2000); /* everything acknowledged is readable from the head */
    /* no partial file of the failed flushes is left in the data directory */
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.blocks, 0);
    DIR *d = opendir(datadir);
    assert_non_null(d);
    char sub[800];
    snprintf(sub, sizeof sub, "%s/blocks", datadir);
    DIR *bd = opendir(sub);
    assert_non_null(bd);
    for (struct dirent *e; (e = readdir(bd));)
        assert_true(e->d_name[0] == '.'); /* neither .blk nor .tmp */
    closedir(bd);
    closedir(d);
    /* the next flush succeeds, makes the reserve again and writes are taken */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.space_low, 0);
    assert_int_equal(st.flush_fail_streak, 0);
    assert_int_equal(reserve_size(), RESERVE);
    assert_int_equal(put1(db, T0 + 2000 * 1000, 2000.0), BDB_OK);
    check_all(db, 2001);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    /* after a restart too */
    eu_opts(&o, datadir, clock_now, NULL);
    o.disk_reserve_bytes = RESERVE;
    db = eu_open(&o);
    check_all(db, 2001);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Past the hold mark the write path holds writes; the look after the next flush
 * lifts the hold when the disk has room (this scratch directory has plenty). */
static void test_hold_lifted_by_a_flush(void **state)
{
    (void)state;
    bdb_db_opts o;
    eu_opts(&o, datadir, clock_now, NULL);
    o.disk_reserve_bytes = RESERVE;
    bdb_db *db = eu_open(&o);
    assert_int_equal(put1(db, T0, 0.0), BDB_OK);
    db_space_crossed(db, UINT64_MAX); /* a write whose LSN passed both marks */
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.space_low, DB_SPACE_HOLD);
    assert_int_equal(put1(db, T0 + 1000, 1.0), BDB_ERR_NOSPACE);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.space_low, 0);
    assert_int_equal(reserve_size(), RESERVE); /* a hold does not touch the reserve */
    assert_int_equal(put1(db, T0 + 1000, 1.0), BDB_OK);
    check_all(db, 2);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_reserve_resized_and_removed(void **state)
{
    (void)state;
    bdb_db_opts o;
    eu_opts(&o, datadir, clock_now, NULL);
    o.disk_reserve_bytes = RESERVE;
    assert_int_equal(bdb_db_close(eu_open(&o)), BDB_OK);
    assert_int_equal(reserve_size(), RESERVE);
    o.disk_reserve_bytes = RESERVE / 4; /* a smaller setting shrinks it */
    assert_int_equal(bdb_db_close(eu_open(&o)), BDB_OK);
    assert_int_equal(reserve_size(), RESERVE / 4);
    o.disk_reserve_bytes = 0; /* off: the room is given back */
    bdb_db *db = eu_open(&o);
    assert_int_equal(reserve_size(), -1);
    assert_int_equal(put1(db, T0, 1.0), BDB_OK);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.space_low, 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reserve_given_to_a_failing_flush, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writes_refused_while_reserve_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hold_lifted_by_a_flush, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserve_resized_and_removed, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
