/* db_space (the disk reserve) where space_test.c does not go: a reserve that cannot
 * be made (its path taken by a directory; larger than the file system; out of
 * memory), given back twice or after it was deleted by hand, the setting off, free
 * space that cannot be read (the data directory moved away), a write crossing the
 * flush mark, which wakes the background thread for a flush, and the background
 * thread making a missing reserve and retrying a flush that failed for lack of
 * space; the flush and hold marks on a nearly full disk (a 4 MiB tmpfs when the test
 * may mount one). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "common/log.h"
#include "storage/embedded/core/db_int.h"
#include "storage/embedded/core/db_space.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>

#define T0 INT64_C(1700000000000)
#define RESERVE (1u << 20)
#define TMPFS_MAGIC_NR 0x01021994

static char tmp[256], data[500], reserve[600], logpath[400];
static int64_t now_ms;

static int setup(void **state)
{
    (void)state;
    bdb_log_set_level(BDB_LOG_OFF); /* on only where a test reads the log */
    eu_scratch(tmp, sizeof tmp, "spacecov", EU_TMPFS, data, sizeof data);
    snprintf(reserve, sizeof reserve, "%s/%s", data, DB_SPACE_FILE);
    snprintf(logpath, sizeof logpath, "%s/log", tmp);
    now_ms = T0;
    return 0;
}

static void unmount_small(void);

static int teardown(void **state)
{
    (void)state;
    bdb_log_set_level(BDB_LOG_ERROR);
    unmount_small(); /* a failed test leaves its small file system mounted */
    return eu_cleanup(tmp);
}

static bdb_db *open_reserve(uint64_t bytes, int background)
{
    bdb_db_opts o;
    eu_opts(&o, data, eu_clock, &now_ms);
    o.vfs = eu_nosync_vfs();
    o.disk_reserve_bytes = bytes;
    o.background = background;
    o.flush_interval_ms = 24 * 3600 * 1000; /* only an ask starts a flush */
    return eu_open(&o);
}

static int put1(bdb_db *db, int64_t ts)
{
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, "d", 1, ts, 1);
    bdb_batch_metric(b, "m", 1, 1.0);
    bdb_batch_end(b);
    int rc = bdb_db_write(db, "t", b);
    bdb_batch_free(b);
    return rc;
}

static long long reserve_size(void)
{
    struct stat st;
    if (stat(reserve, &st) != 0)
        return -1;
    return S_ISREG(st.st_mode) ? (long long)st.st_size : -2;
}

static int space_low(bdb_db *db)
{
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    return (int)st.space_low;
}

/* Warnings to the file logpath until log_restore. */
static int log_to_file(void)
{
    bdb_log_set_level(BDB_LOG_WARN);
    return eu_stderr_to(logpath);
}

static void log_restore(int saved)
{
    eu_stderr_restore(saved);
    bdb_log_set_level(BDB_LOG_OFF);
}

/* What the log holds, read back after log_restore. */
static char *log_text(void)
{
    size_t n;
    char *t = (char *)eu_read_file(logpath, &n);
    t[n] = '\0'; /* the spare byte */
    return t;
}

/* A directory where the reserve belongs: the open warns and refuses writes; once the
 * path is free the reserve is made and writes are taken. */
static void test_reserve_path_taken(void **state)
{
    (void)state;
    assert_int_equal(mkdir(data, 0700), 0);
    assert_int_equal(mkdir(reserve, 0700), 0);
    int saved = log_to_file();
    bdb_db *db = open_reserve(RESERVE, 0);
    log_restore(saved);
    char *log = log_text();
    if (!strstr(log, "disk reserve: cannot make 1048576 bytes") || !strstr(log, "Is a directory"))
        fail_msg("no warning naming the reserve and the error: %s", log);
    free(log);
    assert_int_equal(space_low(db), DB_SPACE_OUT);
    assert_int_equal(put1(db, T0), BDB_ERR_NOSPACE);
    assert_int_equal(db_space_restore(db), BDB_ERR_IO);
    assert_int_equal(reserve_size(), -2); /* the directory is left alone */
    assert_int_equal(rmdir(reserve), 0);
    assert_int_equal(db_space_restore(db), BDB_OK);
    assert_int_equal(reserve_size(), RESERVE);
    assert_int_equal(space_low(db), 0);
    assert_int_equal(put1(db, T0), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A reserve larger than the whole file system: ENOSPC from the allocation, no
 * partial file left holding space, writes refused. Only on tmpfs, which refuses such a
 * size at once; a disk file system might fill itself first. */
static void test_reserve_larger_than_the_disk(void **state)
{
    (void)state;
    struct statfs sf;
    struct statvfs sv;
    assert_int_equal(statfs(tmp, &sf), 0);
    assert_int_equal(statvfs(tmp, &sv), 0);
    if ((unsigned long)sf.f_type != TMPFS_MAGIC_NR || sv.f_blocks == 0) {
        print_message("skipped: %s is not a size-limited tmpfs\n", tmp);
        return;
    }
    uint64_t total = (uint64_t)sv.f_blocks * sv.f_frsize;
    bdb_db *db = open_reserve(2 * total, 0);
    assert_int_equal(space_low(db), DB_SPACE_OUT);
    assert_int_equal(reserve_size(), -1);
    assert_int_equal(db_space_restore(db), BDB_ERR_NOSPACE);
    assert_int_equal(reserve_size(), -1);
    assert_int_equal(put1(db, T0), BDB_ERR_NOSPACE);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Giving the reserve back: once (a second release while it is out says there is no
 * room to give), after a hand deletion (the release still stops writes, says the
 * file is missing, and counts no release), out of memory on the way back, and with
 * the setting off (nothing to give, nothing to make, never tight). */
static void test_release_and_restore(void **state)
{
    (void)state;
    bdb_db *db = open_reserve(RESERVE, 0);
    assert_int_equal(reserve_size(), RESERVE);
    assert_int_equal(db_space_release(db), 1);
    assert_int_equal(reserve_size(), -1);
    assert_int_equal(db_space_release(db), 0); /* already out */
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.space_releases, 1);
    assert_int_equal(put1(db, T0), BDB_ERR_NOSPACE);

    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_FROM, 1);
    int rc = db_space_restore(db);
    bdb_alloc_fail_disarm();
    assert_int_equal(rc, BDB_ERR_NOMEM);
    assert_int_equal(space_low(db), DB_SPACE_OUT);
    assert_int_equal(db_space_restore(db), BDB_OK);
    assert_int_equal(reserve_size(), RESERVE);
    assert_int_equal(db_space_restore(db), BDB_OK); /* in place: nothing to do */

    assert_int_equal(unlink(reserve), 0); /* deleted by hand */
    int saved = log_to_file();
    assert_int_equal(db_space_release(db), 1);
    log_restore(saved);
    char *log = log_text();
    if (!strstr(log, "missing (deleted by hand?)"))
        fail_msg("no word of the missing reserve: %s", log);
    free(log);
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.space_releases, 1);
    assert_int_equal(space_low(db), DB_SPACE_OUT);
    assert_int_equal(put1(db, T0), BDB_ERR_NOSPACE);
    assert_int_equal(db_space_restore(db), BDB_OK);
    assert_int_equal(put1(db, T0), BDB_OK);

    /* the release cannot even name the file: still out, no release counted */
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_FROM, 1);
    rc = db_space_release(db);
    bdb_alloc_fail_disarm();
    assert_int_equal(rc, 1);
    assert_int_equal(space_low(db), DB_SPACE_OUT);
    assert_int_equal(reserve_size(), RESERVE);
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.space_releases, 1);
    assert_int_equal(db_space_restore(db), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);

    db = open_reserve(0, 0);
    assert_int_equal(reserve_size(), -1);
    assert_int_equal(db_space_release(db), 0);
    assert_int_equal(db_space_restore(db), BDB_OK);
    assert_int_equal(db_space_tight(db), 0);
    db_space_crossed(db, 0);
    assert_int_equal(db_space_tight(db), 0); /* off: an ask is never answered */
    assert_int_equal(put1(db, T0), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Free space unknown (statvfs fails: the data directory was moved): no mark is moved,
 * and a flush is due only when the write path asked for one, once per ask. */
static void test_free_space_unknown(void **state)
{
    (void)state;
    bdb_db *db = open_reserve(RESERVE, 0);
    char moved[400];
    snprintf(moved, sizeof moved, "%s/moved", tmp);
    assert_true(db_space_free(db) < UINT64_MAX);
    assert_int_equal(rename(data, moved), 0);
    assert_int_equal(db_space_free(db), UINT64_MAX);
    assert_int_equal(db_space_tight(db), 0);
    db_space_crossed(db, 0); /* below the hold mark: an ask, no hold */
    assert_int_equal(space_low(db), 0);
    assert_int_equal(db_space_tight(db), 1);
    assert_int_equal(db_space_tight(db), 0);
    assert_int_equal(rename(moved, data), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A WAL past 64 KiB on a roomy disk is not tight; crossing the hold mark twice holds
 * writes once (one warning), and the next look at the disk lifts the hold. */
static void test_marks(void **state)
{
    (void)state;
    bdb_db *db = open_reserve(RESERVE, 0);
    eu_put_run(db, "t", "d", T0, 1000, 5000);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_true(st.wal.bytes_on_disk >= (64u << 10));
    assert_int_equal(db_space_tight(db), 0);
    int saved = log_to_file();
    db_space_crossed(db, UINT64_MAX);
    db_space_crossed(db, UINT64_MAX);
    log_restore(saved);
    char *log = log_text();
    const char *first = strstr(log, "disk nearly full");
    assert_non_null(first);
    assert_null(strstr(first + 1, "disk nearly full"));
    free(log);
    assert_int_equal(space_low(db), DB_SPACE_HOLD);
    assert_int_equal(put1(db, T0 + 6000 * 1000), BDB_ERR_NOSPACE);
    assert_int_equal(db_space_tight(db), 1); /* asked by the crossing */
    assert_int_equal(space_low(db), 0);
    assert_int_equal(put1(db, T0 + 6000 * 1000), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* With the background thread on, a write crossing the flush mark wakes it and the
 * head is flushed, long before the flush interval (a day here). */
static void test_crossing_wakes_the_flusher(void **state)
{
    (void)state;
    bdb_db *db = open_reserve(RESERVE, 1);
    eu_put_run(db, "t", "d", T0, 1000, 100);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    uint64_t flushes = st.flushes;
    /* the thread looks at the disk every second: nothing to flush without the ask */
    nanosleep(&(struct timespec){1, 500 * 1000 * 1000}, NULL);
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.flushes, flushes);
    db_space_crossed(db, 0);
    for (int i = 0; i < 1000; i++) { /* 10 s at most */
        bdb_db_get_stats(db, &st);
        if (st.flushes > flushes && st.blocks > 0)
            break;
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    assert_true(st.flushes > flushes);
    assert_true(st.blocks > 0);
    assert_int_equal(space_low(db), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Waits up to 10 s for the background thread to bring stats to what ok() wants. */
static int wait_for(bdb_db *db, int (*ok)(const bdb_db_stats *st))
{
    bdb_db_stats st;
    for (int i = 0; i < 1000; i++) {
        bdb_db_get_stats(db, &st);
        if (ok(&st))
            return 1;
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    return 0;
}

static int reserve_in_place(const bdb_db_stats *st)
{
    return st->space_low == 0;
}

/* A reserve that could not be made at open is made by the background thread once
 * the path is free, and writes are taken again without any call. */
static void test_background_makes_the_reserve(void **state)
{
    (void)state;
    assert_int_equal(mkdir(data, 0700), 0);
    assert_int_equal(mkdir(reserve, 0700), 0);
    bdb_db *db = open_reserve(RESERVE, 1);
    assert_int_equal(space_low(db), DB_SPACE_OUT);
    assert_int_equal(put1(db, T0), BDB_ERR_NOSPACE);
    assert_int_equal(rmdir(reserve), 0);
    assert_true(wait_for(db, reserve_in_place));
    assert_int_equal(reserve_size(), RESERVE);
    assert_int_equal(put1(db, T0), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A flush that failed for lack of space is retried by the background thread within
 * seconds (not after the flush interval, a day here) once space returns. */
static int full_writes;
static struct bdb_vfs_ops full_ops;
static bdb_vfs full_vfs = {&full_ops};

static int full_pwrite(bdb_file *f, const void *buf, size_t n, uint64_t off)
{
    if (full_writes) {
        errno = ENOSPC;
        return BDB_ERR_NOSPACE;
    }
    return bdb_vfs_posix()->ops->pwrite(f, buf, n, off);
}

static int full_open(bdb_vfs *v, const char *path, int flags, bdb_file **out)
{
    (void)v;
    int rc = bdb_vfs_posix()->ops->open(bdb_vfs_posix(), path, flags, out);
    if (rc == BDB_OK)
        (*out)->vfs = &full_vfs;
    return rc;
}

static int flushed_again(const bdb_db_stats *st)
{
    return st->flush_fail_streak == 0 && st->blocks > 0;
}

static void test_background_retries_a_full_disk(void **state)
{
    (void)state;
    full_ops = *bdb_vfs_posix()->ops;
    full_ops.open = full_open;
    full_ops.pwrite = full_pwrite;
    full_writes = 0;
    bdb_db_opts o;
    eu_opts(&o, data, eu_clock, &now_ms);
    o.vfs = &full_vfs;
    o.background = 1;
    o.flush_interval_ms = 24 * 3600 * 1000;
    bdb_db *db = eu_open(&o);
    eu_put_run(db, "t", "d", T0, 1000, 100);
    full_writes = 1;
    assert_int_equal(bdb_db_flush(db), BDB_ERR_NOSPACE);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_true(st.flush_fail_streak >= 1);
    assert_int_equal(st.blocks, 0);
    full_writes = 0;
    assert_true(wait_for(db, flushed_again));
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* ---- a nearly full disk: a 4 MiB tmpfs (mounting needs root; skipped without) and a
 * filler file that leaves about 100 KiB free */

#define SMALL_FREE (100u << 10)

static char small[300], filler[400];
static int mounted;

static int mount_small(void)
{
    snprintf(small, sizeof small, "%s/small", tmp);
    snprintf(filler, sizeof filler, "%s/filler", small);
    assert_int_equal(mkdir(small, 0700), 0);
    if (mount("tmpfs", small, "tmpfs", 0, "size=4m") != 0) {
        print_message("skipped: cannot mount a small tmpfs (%s)\n", strerror(errno));
        return 0;
    }
    mounted = 1;
    snprintf(data, sizeof data, "%s/data", small);
    snprintf(reserve, sizeof reserve, "%s/%s", data, DB_SPACE_FILE);
    return 1;
}

static void unmount_small(void)
{
    if (mounted)
        assert_int_equal(umount2(small, MNT_DETACH), 0);
    mounted = 0;
}

/* Fills the small file system up to SMALL_FREE bytes free. */
static void fill_disk(void)
{
    struct statvfs sv;
    assert_int_equal(statvfs(small, &sv), 0);
    uint64_t f = (uint64_t)sv.f_bavail * sv.f_frsize;
    assert_true(f > SMALL_FREE);
    int fd = open(filler, O_RDWR | O_CREAT, 0600);
    assert_true(fd >= 0);
    assert_int_equal(posix_fallocate(fd, 0, (off_t)(f - SMALL_FREE)), 0);
    close(fd);
}

static void marks(bdb_db *db, uint64_t *written, uint64_t *w, uint64_t *ask, uint64_t *hold)
{
    bdb_wal_stats ws;
    bdb_wal_get_stats(db->wal, &ws);
    *written = ws.written_lsn;
    *w = ws.bytes_on_disk;
    *ask = atomic_load(&db->space_flush_lsn) - ws.written_lsn;
    *hold = atomic_load(&db->space_hold_lsn) - ws.written_lsn;
}

/* Little WAL, little free space, no reserve in place: the flush mark is never nearer
 * than 64 KiB of WAL (a smaller flush is not worth starting early) and the hold mark
 * not nearer than the flush mark; no flush is due. */
static void test_nearly_full_small_wal(void **state)
{
    (void)state;
    if (!mount_small())
        return;
    fill_disk();
    bdb_db *db = open_reserve(RESERVE, 0); /* no room for it */
    assert_int_equal(space_low(db), DB_SPACE_OUT);
    assert_true(db_space_free(db) <= SMALL_FREE);
    assert_int_equal(db_space_tight(db), 0);
    uint64_t written, w, ask, hold;
    marks(db, &written, &w, &ask, &hold);
    assert_true(w < (64u << 10));
    assert_int_equal(ask, (64u << 10) - w);
    assert_int_equal(hold, ask);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    unmount_small();
}

/* More WAL than half the free space, the reserve given away: a flush is due now, and
 * both marks are where the WAL is (the next write asks for a flush and is held). */
static void test_nearly_full_big_wal(void **state)
{
    (void)state;
    if (!mount_small())
        return;
    bdb_db *db = open_reserve(RESERVE, 0);
    assert_int_equal(space_low(db), 0);
    eu_put_run(db, "t", "d", T0, 1000, 20000);
    assert_int_equal(db_space_release(db), 1);
    fill_disk();
    uint64_t written, w, ask, hold;
    assert_int_equal(db_space_tight(db), 1);
    marks(db, &written, &w, &ask, &hold);
    assert_true(w >= (64u << 10));
    assert_true(db_space_free(db) / 2 < w);
    assert_int_equal(ask, 0);
    assert_int_equal(hold, 0);
    assert_int_equal(unlink(filler), 0); /* room again: not tight, the reserve made */
    assert_int_equal(db_space_tight(db), 0);
    assert_int_equal(db_space_restore(db), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    unmount_small();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reserve_path_taken, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserve_larger_than_the_disk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_and_restore, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_space_unknown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_marks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crossing_wakes_the_flusher, setup, teardown),
        cmocka_unit_test_setup_teardown(test_background_makes_the_reserve, setup, teardown),
        cmocka_unit_test_setup_teardown(test_background_retries_a_full_disk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nearly_full_small_wal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nearly_full_big_wal, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
