/* vfs_fault: the corners of the fault VFS that the crash tests lean on without
 * looking at them (vfs_test.c has the main behaviours).
 *
 * After a crash every call fails; read-only handles refuse changes; O_EXCL and O_TRUNC
 * on a file with unsynced writes; a read past the end and across a hole; truncate
 * cutting through unsynced writes; renames onto themselves, from nowhere and over an
 * open file, then undone by a crash; an unlink undone by a crash; a failed directory
 * sync leaves its operations undurable; listings never show parked files; sticky
 * failures and power-off keep failing; relative paths and doubled slashes name the
 * same directory; freeing without a crash keeps everything. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#define VT_PREFIX "bdb-vfsfault"
#include "vfs_testutil.h"

#include "bucketdb/bdb.h"
#include "storage/vfs/vfs.h"
#include "storage/vfs/vfs_fault.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bdb_file *open_rw(bdb_vfs *v, const char *path)
{
    bdb_file *f = NULL;
    assert_int_equal(bdb_vfs_open(v, path, BDB_O_RDWR | BDB_O_CREAT, &f), BDB_OK);
    return f;
}

static int list_cb(void *ctx, const char *name)
{
    char *acc = ctx;
    strcat(acc, name);
    strcat(acc, ";");
    return 0;
}

static void test_everything_fails_after_crash(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 0); /* seed 0 is allowed */
    bdb_file *f = open_rw(v, P(0, "a"));
    assert_int_equal(bdb_file_pwrite(f, "abc", 3, 0), BDB_OK);
    bdb_vfs_fault_crash(v, BDB_CRASH_DROP, 512);
    bdb_vfs_fault_crash(v, BDB_CRASH_KEEP, 512); /* a second crash changes nothing */
    char buf[4];
    size_t got;
    uint64_t size;
    const void *p;
    size_t len;
    bdb_file *g;
    assert_int_equal(bdb_file_pread(f, buf, 3, 0, &got), BDB_ERR_IO);
    assert_int_equal(bdb_file_pwrite(f, "x", 1, 0), BDB_ERR_IO);
    assert_int_equal(bdb_file_sync(f), BDB_ERR_IO);
    assert_int_equal(bdb_file_size(f, &size), BDB_ERR_IO);
    assert_int_equal(bdb_file_truncate(f, 0), BDB_ERR_IO);
    assert_int_equal(bdb_file_map(f, &p, &len), BDB_ERR_IO);
    assert_int_equal(bdb_vfs_open(v, P(0, "a"), BDB_O_RDONLY, &g), BDB_ERR_IO);
    assert_int_equal(bdb_vfs_rename(v, P(0, "a"), P(1, "b")), BDB_ERR_IO);
    assert_int_equal(bdb_vfs_unlink(v, P(0, "a")), BDB_ERR_IO);
    assert_int_equal(bdb_vfs_mkdir(v, P(0, "d")), BDB_ERR_IO);
    assert_int_equal(bdb_vfs_sync_dir(v, tmpdir), BDB_ERR_IO);
    char names[256] = "";
    assert_int_equal(bdb_vfs_list(v, tmpdir, list_cb, names), BDB_ERR_IO);
    assert_int_equal(bdb_vfs_exists(v, P(0, "a")), 0);
    assert_int_equal(bdb_file_close(f), BDB_OK);
    bdb_vfs_fault_free(v);
    /* the unsynced write was dropped; creation itself is durable */
    assert_int_equal(on_disk(P(0, "a"), buf, sizeof buf), 0);
    assert_int_equal(mkdir(P(0, "d"), 0755), 0); /* the refused mkdir did nothing */
    bdb_vfs_fault_free(NULL);
}

static void test_read_only_handle(void **state)
{
    (void)state;
    assert_int_equal(put_disk(P(0, "ro"), "hello"), 0);
    bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
    bdb_file *f;
    assert_int_equal(bdb_vfs_open(v, P(0, "ro"), BDB_O_RDONLY, &f), BDB_OK);
    assert_int_equal(bdb_file_pwrite(f, "x", 1, 0), BDB_ERR_IO);
    assert_int_equal(errno, EBADF);
    assert_int_equal(bdb_file_truncate(f, 1), BDB_ERR_IO);
    assert_int_equal(errno, EBADF);
    assert_int_equal(bdb_vfs_fault_calls(v), 0); /* refused before counting */
    assert_int_equal(bdb_file_close(f), BDB_OK);
    /* opening what does not exist fails through to the real error */
    assert_int_equal(bdb_vfs_open(v, P(0, "missing"), BDB_O_RDONLY, &f), BDB_ERR_IO);
    assert_int_equal(errno, ENOENT);
    bdb_vfs_fault_free(v);
    char buf[8];
    assert_int_equal(on_disk(P(0, "ro"), buf, sizeof buf), 5);
}

static void test_excl_trunc_and_holes(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 2);
    bdb_file *f = open_rw(v, P(0, "a")), *g;
    assert_int_equal(bdb_file_pwrite(f, "0123456789", 10, 0), BDB_OK);
    /* O_EXCL sees the file the page cache holds, even unsynced */
    assert_int_equal(bdb_vfs_open(v, P(0, "a"), BDB_O_RDWR | BDB_O_CREAT | BDB_O_EXCL, &g),
                     BDB_ERR_IO);
    assert_int_equal(errno, EEXIST);
    /* a write past the end leaves a hole that reads as zeros */
    assert_int_equal(bdb_file_pwrite(f, "Z", 1, 20), BDB_OK);
    char buf[32];
    size_t got;
    assert_int_equal(bdb_file_pread(f, buf, sizeof buf, 0, &got), BDB_OK);
    assert_int_equal(got, 21);
    assert_memory_equal(buf, "0123456789\0\0\0\0\0\0\0\0\0\0Z", 21);
    assert_int_equal(bdb_file_pread(f, buf, sizeof buf, 21, &got), BDB_OK);
    assert_int_equal(got, 0); /* at the end: nothing, no error */
    /* truncate cuts through the unsynced writes: one dropped, one shortened */
    assert_int_equal(bdb_file_truncate(f, 4), BDB_OK);
    uint64_t size;
    assert_int_equal(bdb_file_size(f, &size), BDB_OK);
    assert_int_equal(size, 4);
    const void *p;
    size_t len;
    assert_int_equal(bdb_file_map(f, &p, &len), BDB_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(p, "0123", 4);
    assert_int_equal(bdb_file_unmap(f, p, len), BDB_OK);
    /* O_TRUNC through a second handle forgets the unsynced writes */
    assert_int_equal(bdb_vfs_open(v, P(0, "a"), BDB_O_RDWR | BDB_O_TRUNC, &g), BDB_OK);
    assert_int_equal(bdb_file_size(f, &size), BDB_OK);
    assert_int_equal(size, 0);
    assert_int_equal(bdb_file_map(g, &p, &len), BDB_OK);
    assert_null(p);
    assert_int_equal(len, 0);
    assert_int_equal(bdb_file_close(g), BDB_OK);
    assert_int_equal(bdb_file_close(f), BDB_OK);
    bdb_vfs_fault_free(v);
    assert_int_equal(on_disk(P(0, "a"), buf, sizeof buf), 0);
}

static void test_rename_corners(void **state)
{
    (void)state;
    assert_int_equal(put_disk(P(0, "old"), "OLD"), 0);
    bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 3);
    /* onto itself: nothing happens; from nowhere: ENOENT */
    assert_int_equal(bdb_vfs_rename(v, P(0, "old"), P(1, "old")), BDB_OK);
    assert_int_equal(bdb_vfs_rename(v, P(0, "nope"), P(1, "nope")), BDB_ERR_IO);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(bdb_vfs_rename(v, P(0, "nope"), P(1, "x")), BDB_ERR_IO);
    assert_int_equal(errno, ENOENT);
    /* into a directory that does not exist: the real rename fails, the displaced
     * target (none here) stays */
    assert_int_equal(bdb_vfs_rename(v, P(0, "old"), P(1, "no/dir/x")), BDB_ERR_IO);
    /* a file replaced while open: the open handle keeps reading the old content */
    bdb_file *f = open_rw(v, P(0, "new"));
    assert_int_equal(bdb_file_pwrite(f, "NEW", 3, 0), BDB_OK);
    assert_int_equal(bdb_file_sync(f), BDB_OK);
    bdb_file *o;
    assert_int_equal(bdb_vfs_open(v, P(0, "old"), BDB_O_RDONLY, &o), BDB_OK);
    assert_int_equal(bdb_vfs_rename(v, P(0, "new"), P(1, "old")), BDB_OK);
    char buf[8];
    size_t got;
    assert_int_equal(bdb_file_pread(o, buf, sizeof buf, 0, &got), BDB_OK);
    assert_int_equal(got, 3);
    assert_memory_equal(buf, "OLD", 3);
    /* the renamed handle follows its file to the new name */
    bdb_file *n2;
    assert_int_equal(bdb_vfs_open(v, P(0, "old"), BDB_O_RDONLY, &n2), BDB_OK);
    assert_int_equal(bdb_file_pread(n2, buf, sizeof buf, 0, &got), BDB_OK);
    assert_memory_equal(buf, "NEW", 3);
    assert_int_equal(bdb_file_close(n2), BDB_OK);
    /* listings never show the parked copy of the displaced file */
    char names[256] = "";
    assert_int_equal(bdb_vfs_list(v, tmpdir, list_cb, names), BDB_OK);
    assert_string_equal(names, "old;");
    /* the rename was not made durable: the crash undoes it */
    bdb_vfs_fault_crash(v, BDB_CRASH_DROP, 512);
    assert_int_equal(bdb_file_close(o), BDB_OK);
    assert_int_equal(bdb_file_close(f), BDB_OK);
    bdb_vfs_fault_free(v);
    assert_int_equal(on_disk(P(0, "old"), buf, sizeof buf), 3);
    assert_memory_equal(buf, "OLD", 3);
    assert_int_equal(on_disk(P(0, "new"), buf, sizeof buf), 3);
    assert_memory_equal(buf, "NEW", 3);
}

static void test_unlink_and_failed_dir_sync(void **state)
{
    (void)state;
    assert_int_equal(put_disk(P(0, "a"), "AAAA"), 0);
    bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 4);
    assert_int_equal(bdb_vfs_unlink(v, P(0, "missing")), BDB_ERR_IO);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(bdb_vfs_unlink(v, P(0, "a")), BDB_OK);
    assert_false(bdb_vfs_exists(v, P(0, "a")));
    /* the directory sync fails (ENOSPC here): the unlink is still not durable */
    bdb_vfs_fault_fail_at(v, bdb_vfs_fault_calls(v) + 1, ENOSPC, 0);
    assert_int_equal(bdb_vfs_sync_dir(v, tmpdir), BDB_ERR_NOSPACE);
    /* a sync of a directory that does not exist fails through to the real error */
    assert_int_equal(bdb_vfs_sync_dir(v, P(0, "nodir")), BDB_ERR_IO);
    bdb_vfs_fault_crash(v, BDB_CRASH_REORDER, 512);
    bdb_vfs_fault_free(v);
    char buf[8];
    assert_int_equal(on_disk(P(0, "a"), buf, sizeof buf), 4);
}

static void test_sticky_and_power_off(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 5);
    bdb_file *f = open_rw(v, P(0, "a"));                     /* call 1 */
    assert_int_equal(bdb_file_pwrite(f, "1", 1, 0), BDB_OK); /* call 2 */
    bdb_vfs_fault_fail_at(v, 3, EIO, 1);
    for (int i = 0; i < 3; i++)
        assert_int_equal(bdb_file_pwrite(f, "2", 1, 1), BDB_ERR_IO);
    bdb_vfs_fault_fail_at(v, 0, 0, 0);
    assert_int_equal(bdb_file_pwrite(f, "3", 1, 1), BDB_OK);
    /* after power off the sync fails but the page cache survives for the crash */
    bdb_vfs_fault_power_off_at(v, bdb_vfs_fault_calls(v) + 1);
    assert_int_equal(bdb_file_sync(f), BDB_ERR_IO);
    assert_int_equal(bdb_file_pwrite(f, "4", 1, 2), BDB_ERR_IO);
    bdb_vfs_fault_crash(v, BDB_CRASH_KEEP, 512);
    assert_int_equal(bdb_file_close(f), BDB_OK);
    bdb_vfs_fault_free(v);
    char buf[8];
    assert_int_equal(on_disk(P(0, "a"), buf, sizeof buf), 2);
    assert_memory_equal(buf, "13", 2);
}

/* Relative names, a doubled slash and a trailing one all mean the same directory. */
static void test_path_spellings(void **state)
{
    (void)state;
    char cwd[PATH_MAX];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(tmpdir), 0);
    assert_int_equal(put_disk("rel", "R"), 0);
    assert_int_equal(put_disk("keep", "K"), 0);
    bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 6);
    assert_int_equal(bdb_vfs_unlink(v, "rel"), BDB_OK); /* directory "." */
    assert_int_equal(bdb_vfs_sync_dir(v, "."), BDB_OK); /* durable now */
    char dbl[300], trail[300];
    snprintf(dbl, sizeof dbl, "%s//keep", tmpdir);
    snprintf(trail, sizeof trail, "%s/", tmpdir);
    assert_int_equal(bdb_vfs_unlink(v, dbl), BDB_OK);
    assert_int_equal(bdb_vfs_sync_dir(v, trail), BDB_OK);
    /* a file at the root of the path space has "/" as its directory; we only name it */
    assert_int_equal(bdb_vfs_unlink(v, "/bdb-vfsfault-no-such-file"), BDB_ERR_IO);
    bdb_vfs_fault_crash(v, BDB_CRASH_DROP, 512);
    bdb_vfs_fault_free(v);
    char buf[4];
    assert_int_equal(on_disk("rel", buf, sizeof buf), -1);
    assert_int_equal(on_disk("keep", buf, sizeof buf), -1);
    assert_int_equal(chdir(cwd), 0);
}

/* Freeing without a crash is a machine that went on running: all stays. */
static void test_free_keeps_everything(void **state)
{
    (void)state;
    assert_int_equal(put_disk(P(0, "target"), "T"), 0);
    bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 7);
    bdb_file *f = open_rw(v, P(0, "src"));
    assert_int_equal(bdb_file_pwrite(f, "SRC", 3, 0), BDB_OK);
    assert_int_equal(bdb_file_close(f), BDB_OK);
    assert_int_equal(bdb_vfs_rename(v, P(0, "src"), P(1, "target")), BDB_OK);
    bdb_vfs_fault_free(v);
    char buf[8];
    assert_int_equal(on_disk(P(0, "target"), buf, sizeof buf), 3);
    assert_memory_equal(buf, "SRC", 3);
    char names[256] = "";
    assert_int_equal(bdb_vfs_list(bdb_vfs_posix(), tmpdir, list_cb, names), BDB_OK);
    assert_string_equal(names, "target;"); /* no parked backup left behind */
}

/* TEAR with an unusual sector size falls back to 512 B; a write that starts inside a
 * sector keeps nothing of it unless the whole sector made it. */
static void test_tear_default_sector(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        char path[256];
        snprintf(path, sizeof path, "%s/t%llu", tmpdir, (unsigned long long)seed);
        bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), seed);
        bdb_file *f = open_rw(v, path);
        static char block[2000];
        memset(block, 'x', sizeof block);
        assert_int_equal(bdb_file_pwrite(f, block, sizeof block, 100), BDB_OK);
        bdb_vfs_fault_crash(v, BDB_CRASH_TEAR, 0);
        assert_int_equal(bdb_file_close(f), BDB_OK);
        bdb_vfs_fault_free(v);
        static char back[4096];
        long n = on_disk(path, back, sizeof back);
        /* whatever survived ends on a 512-byte boundary or at the write's end */
        assert_true(n == 0 || n == 2100 || n % 512 == 0);
        for (long i = 100; i < n; i++)
            assert_int_equal(back[i], 'x');
    }
}

/* Many unsynced writes and directory operations (the tables grow), syncs that make
 * one directory durable and leave another pending, and a KEEP crash over all of it. */
static void test_many_pending_then_keep(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 8);
    /* power goes off later than anything here: calls before it work */
    bdb_vfs_fault_power_off_at(v, 1000);
    assert_int_equal(bdb_vfs_mkdir(v, P(0, "sub")), BDB_OK);
    bdb_file *f = open_rw(v, P(0, "many"));
    for (int i = 0; i < 40; i++)
        assert_int_equal(bdb_file_pwrite(f, "ab", 2, (uint64_t)i * 2), BDB_OK);
    /* a write wholly below the cut survives a truncate untouched */
    assert_int_equal(bdb_file_truncate(f, 60), BDB_OK);
    uint64_t size;
    assert_int_equal(bdb_file_size(f, &size), BDB_OK);
    assert_int_equal(size, 60);
    /* CREAT without EXCL on a known file opens it */
    bdb_file *g;
    assert_int_equal(bdb_vfs_open(v, P(0, "many"), BDB_O_RDWR | BDB_O_CREAT, &g), BDB_OK);
    assert_int_equal(bdb_file_close(g), BDB_OK);
    /* 20 renames to fresh names in sub/, one over an existing file in the top dir */
    for (int i = 0; i < 20; i++) {
        char a[256], b[256];
        snprintf(a, sizeof a, "%s/sub/f%d", tmpdir, i);
        snprintf(b, sizeof b, "%s/sub/g%d", tmpdir, i);
        bdb_file *h = open_rw(v, a);
        assert_int_equal(bdb_file_close(h), BDB_OK);
        assert_int_equal(bdb_vfs_rename(v, a, b), BDB_OK);
    }
    bdb_file *t = open_rw(v, P(0, "t1"));
    assert_int_equal(bdb_file_close(t), BDB_OK);
    t = open_rw(v, P(0, "t2"));
    assert_int_equal(bdb_file_close(t), BDB_OK);
    assert_int_equal(bdb_vfs_rename(v, P(0, "t1"), P(1, "t2")), BDB_OK);
    /* unlinking a file that is still open: the handle keeps it */
    assert_int_equal(bdb_vfs_unlink(v, P(0, "many")), BDB_OK);
    assert_int_equal(bdb_file_size(f, &size), BDB_OK);
    assert_int_equal(size, 60);
    assert_int_equal(bdb_vfs_sync_dir(v, P(0, "sub")), BDB_OK); /* top dir stays pending */
    bdb_vfs_fault_crash(v, BDB_CRASH_KEEP, 512);
    assert_int_equal(bdb_file_close(f), BDB_OK);
    bdb_vfs_fault_free(v);
    char buf[8];
    assert_int_equal(on_disk(P(0, "many"), buf, sizeof buf), -1); /* KEEP: unlink stands */
    assert_int_equal(on_disk(P(0, "t1"), buf, sizeof buf), -1);
    assert_int_equal(on_disk(P(0, "t2"), buf, sizeof buf), 0);
    assert_int_equal(on_disk(P(0, "sub/g19"), buf, sizeof buf), 0);
    assert_int_equal(on_disk(P(0, "sub/f19"), buf, sizeof buf), -1);
    char names[256] = "";
    assert_int_equal(bdb_vfs_list(bdb_vfs_posix(), tmpdir, list_cb, names), BDB_OK);
    assert_null(strstr(names, "bdbfault")); /* KEEP removed every parked backup */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_everything_fails_after_crash, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_only_handle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_excl_trunc_and_holes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rename_corners, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unlink_and_failed_dir_sync, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sticky_and_power_off, setup, teardown),
        cmocka_unit_test_setup_teardown(test_path_spellings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_keeps_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tear_default_sector, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_pending_then_keep, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
