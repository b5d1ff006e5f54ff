/* vfs_errors: the POSIX VFS and its whole-file helpers when the system call fails.
 *
 * The engine relies on three promises of vfs.h: a failure is an error status, never a
 * partial success; ENOSPC is BDB_ERR_NOSPACE and everything else BDB_ERR_IO, with
 * errno kept; and bdb_vfs_write_atomic leaves either the old or the new content and no
 * temporary file. Each failure is provoked for real: missing paths, a directory where
 * a file is expected, read-only handles, /dev/full for a full disk. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#define VT_PREFIX "bdb-vfserr"
#include "vfs_testutil.h"

#include "bucketdb/bdb.h"
#include "storage/vfs/vfs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void put(const char *path, const char *text)
{
    bdb_file *f;
    bdb_vfs *v = bdb_vfs_posix();
    assert_int_equal(bdb_vfs_open(v, path, BDB_O_RDWR | BDB_O_CREAT | BDB_O_TRUNC, &f), BDB_OK);
    assert_int_equal(bdb_file_pwrite(f, text, strlen(text), 0), BDB_OK);
    assert_int_equal(bdb_file_close(f), BDB_OK);
}

static void test_open_errors(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_posix();
    bdb_file *f = NULL;
    errno = 0;
    assert_int_equal(bdb_vfs_open(v, P(0, "missing"), BDB_O_RDONLY, &f), BDB_ERR_IO);
    assert_int_equal(errno, ENOENT);
    put(P(0, "a"), "x");
    assert_int_equal(bdb_vfs_open(v, P(0, "a"), BDB_O_RDWR | BDB_O_CREAT | BDB_O_EXCL, &f),
                     BDB_ERR_IO);
    assert_int_equal(errno, EEXIST);
    /* the same flags on a new name create it */
    assert_int_equal(bdb_vfs_open(v, P(0, "b"), BDB_O_RDWR | BDB_O_CREAT | BDB_O_EXCL, &f), BDB_OK);
    assert_int_equal(bdb_file_close(f), BDB_OK);
    assert_true(bdb_vfs_exists(v, P(0, "b")));
    assert_false(bdb_vfs_exists(v, P(0, "missing")));
}

static void test_read_only_handle_refuses_changes(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_posix();
    put(P(0, "ro"), "hello");
    bdb_file *f;
    assert_int_equal(bdb_vfs_open(v, P(0, "ro"), BDB_O_RDONLY, &f), BDB_OK);
    assert_int_equal(bdb_file_pwrite(f, "x", 1, 0), BDB_ERR_IO);
    assert_int_equal(errno, EBADF);
    assert_int_equal(bdb_file_truncate(f, 0), BDB_ERR_IO);
    /* nothing changed, and a read past the end is short, not an error */
    char buf[16];
    size_t got = 99;
    assert_int_equal(bdb_file_pread(f, buf, sizeof buf, 0, &got), BDB_OK);
    assert_int_equal(got, 5);
    assert_memory_equal(buf, "hello", 5);
    assert_int_equal(bdb_file_pread(f, buf, sizeof buf, 100, &got), BDB_OK);
    assert_int_equal(got, 0);
    assert_int_equal(bdb_file_close(f), BDB_OK);
}

static void test_directory_as_file(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_posix();
    assert_int_equal(bdb_vfs_mkdir(v, P(0, "dir")), BDB_OK);
    bdb_file *f;
    assert_int_equal(bdb_vfs_open(v, P(0, "dir"), BDB_O_RDONLY, &f), BDB_OK);
    char buf[8];
    size_t got = 99;
    assert_int_equal(bdb_file_pread(f, buf, sizeof buf, 0, &got), BDB_ERR_IO);
    assert_int_equal(errno, EISDIR);
    assert_int_equal(got, 0);
    /* a directory cannot be mapped either */
    const void *p = NULL;
    size_t len = 0;
    uint64_t size;
    assert_int_equal(bdb_file_size(f, &size), BDB_OK);
    if (size > 0) {
        assert_int_equal(bdb_file_map(f, &p, &len), BDB_ERR_IO);
        assert_null(p);
    }
    assert_int_equal(bdb_file_close(f), BDB_OK);
    /* read_all reports the read error and hands back nothing */
    void *data = (void *)1;
    size_t n = 7;
    assert_int_equal(bdb_vfs_read_all(v, P(0, "dir"), &data, &n), BDB_ERR_IO);
    assert_ptr_equal(data, (void *)1);
    assert_int_equal(n, 7);
    assert_int_equal(bdb_vfs_read_all(v, P(0, "missing"), &data, &n), BDB_ERR_IO);
    assert_int_equal(errno, ENOENT);
}

static void test_map_empty_and_unmap_null(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_posix();
    put(P(0, "empty"), "");
    bdb_file *f;
    assert_int_equal(bdb_vfs_open(v, P(0, "empty"), BDB_O_RDONLY, &f), BDB_OK);
    const void *p = (const void *)1;
    size_t len = 5;
    assert_int_equal(bdb_file_map(f, &p, &len), BDB_OK);
    assert_null(p);
    assert_int_equal(len, 0);
    assert_int_equal(bdb_file_unmap(f, p, len), BDB_OK);
    assert_int_equal(bdb_file_close(f), BDB_OK);
    void *data = NULL;
    size_t n = 9;
    assert_int_equal(bdb_vfs_read_all(v, P(0, "empty"), &data, &n), BDB_OK);
    assert_non_null(data); /* an empty file still gives a buffer to free */
    assert_int_equal(n, 0);
    free(data);
}

/* /dev/full: every write fails with ENOSPC, the one errno the engine tells apart */
static void test_full_disk_is_nospace(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_posix();
    bdb_file *f;
    if (bdb_vfs_open(v, "/dev/full", BDB_O_RDWR, &f) != BDB_OK) {
        print_message("no /dev/full here: skipped\n");
        skip();
    }
    errno = 0;
    assert_int_equal(bdb_file_pwrite(f, "abc", 3, 0), BDB_ERR_NOSPACE);
    assert_int_equal(errno, ENOSPC);
    /* a character device cannot be fdatasync'ed: an I/O error, not NOSPACE */
    int rc = bdb_file_sync(f);
    assert_true(rc == BDB_OK || rc == BDB_ERR_IO);
    assert_int_equal(bdb_file_close(f), BDB_OK);
}

static void test_dir_op_errors(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_posix();
    assert_int_equal(bdb_vfs_rename(v, P(0, "missing"), P(1, "x")), BDB_ERR_IO);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(bdb_vfs_unlink(v, P(0, "missing")), BDB_ERR_IO);
    assert_int_equal(errno, ENOENT);
    /* mkdir: an existing directory is fine, a file in the way or a missing parent not */
    assert_int_equal(bdb_vfs_mkdir(v, P(0, "d")), BDB_OK);
    assert_int_equal(bdb_vfs_mkdir(v, P(0, "d")), BDB_OK);
    put(P(0, "file"), "x");
    assert_int_equal(bdb_vfs_mkdir(v, P(0, "file")), BDB_ERR_IO);
    assert_int_equal(errno, ENOTDIR);
    assert_int_equal(bdb_vfs_mkdir(v, P(0, "no/such/parent")), BDB_ERR_IO);
    assert_int_equal(errno, ENOENT);
    /* a symbolic link to nowhere: the name exists, but it is no directory */
    assert_int_equal(symlink(P(1, "nowhere"), P(0, "dangling")), 0);
    errno = 0;
    assert_int_equal(bdb_vfs_mkdir(v, P(0, "dangling")), BDB_ERR_IO);
    assert_int_equal(errno, ENOTDIR);
    assert_int_equal(bdb_vfs_sync_dir(v, P(0, "missing")), BDB_ERR_IO);
    assert_int_equal(bdb_vfs_sync_dir(v, P(0, "d")), BDB_OK);
}

static int count_cb(void *ctx, const char *name)
{
    (void)name;
    return ++*(int *)ctx >= 2; /* stop after the second entry */
}

static void test_list_errors_and_stop(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_posix();
    int n = 0;
    assert_int_equal(bdb_vfs_list(v, P(0, "missing"), count_cb, &n), BDB_ERR_IO);
    assert_int_equal(n, 0);
    put(P(0, "a"), "1");
    put(P(0, "b"), "2");
    put(P(0, "c"), "3");
    assert_int_equal(bdb_vfs_list(v, tmpdir, count_cb, &n), BDB_OK);
    assert_int_equal(n, 2); /* the callback's stop is honoured */
}

static int has_tmp_cb(void *ctx, const char *name)
{
    if (strstr(name, ".tmp"))
        ++*(int *)ctx;
    return 0;
}

static void test_write_atomic_failures(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_posix();
    /* no such directory: the temporary file cannot even be created */
    assert_int_equal(bdb_vfs_write_atomic(v, P(0, "missing"), "x", "data", 4), BDB_ERR_IO);
    /* the target name is a non-empty directory: the rename fails, the temporary file
     * goes, the directory is untouched */
    assert_int_equal(bdb_vfs_mkdir(v, P(0, "target")), BDB_OK);
    put(P(0, "target/inside"), "keep");
    assert_int_equal(bdb_vfs_write_atomic(v, tmpdir, "target", "data", 4), BDB_ERR_IO);
    int tmps = 0;
    assert_int_equal(bdb_vfs_list(v, tmpdir, has_tmp_cb, &tmps), BDB_OK);
    assert_int_equal(tmps, 0);
    void *data;
    size_t n;
    assert_int_equal(bdb_vfs_read_all(v, P(0, "target/inside"), &data, &n), BDB_OK);
    assert_int_equal(n, 4);
    assert_memory_equal(data, "keep", 4);
    free(data);
    /* and a normal replacement still works */
    put(P(0, "f"), "old content");
    assert_int_equal(bdb_vfs_write_atomic(v, tmpdir, "f", "new", 3), BDB_OK);
    assert_int_equal(bdb_vfs_read_all(v, P(0, "f"), &data, &n), BDB_OK);
    assert_int_equal(n, 3);
    assert_memory_equal(data, "new", 3);
    free(data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_only_handle_refuses_changes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_directory_as_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_map_empty_and_unmap_null, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_disk_is_nospace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_op_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_errors_and_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_atomic_failures, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
