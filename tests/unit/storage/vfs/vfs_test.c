/* vfs: the POSIX VFS and its helpers, then the fault VFS: fail-at-N, the page-cache
 * overlay, and each crash mode checked by reading the underlying files back. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#define VT_PREFIX "bdb-vfs"
#include "vfs_testutil.h"

#include "bucketdb/bdb.h"
#include "storage/vfs/vfs.h"
#include "storage/vfs/vfs_fault.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whole underlying file as seen without any fault layer; caller frees. */
static uint8_t *disk(const char *path, size_t *len)
{
    void *data;
    assert_int_equal(bdb_vfs_read_all(bdb_vfs_posix(), path, &data, len), BDB_OK);
    return data;
}

static void put_file(bdb_vfs *v, const char *path, uint8_t fill, size_t n)
{
    uint8_t *b = malloc(n);
    memset(b, fill, n);
    bdb_file *f;
    assert_int_equal(bdb_vfs_open(v, path, BDB_O_RDWR | BDB_O_CREAT | BDB_O_TRUNC, &f), BDB_OK);
    assert_int_equal(bdb_file_pwrite(f, b, n, 0), BDB_OK);
    assert_int_equal(bdb_file_sync(f), BDB_OK);
    assert_int_equal(bdb_file_close(f), BDB_OK);
    free(b);
}

/* ---- POSIX ---- */

static void test_posix_file_ops(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_posix();
    bdb_file *f;
    const char *path = P(0, "f");
    assert_int_equal(bdb_vfs_open(v, path, BDB_O_RDWR | BDB_O_CREAT, &f), BDB_OK);
    assert_int_equal(bdb_file_pwrite(f, "hello", 5, 0), BDB_OK);
    assert_int_equal(bdb_file_pwrite(f, "world", 5, 10), BDB_OK);
    uint64_t size;
    assert_int_equal(bdb_file_size(f, &size), BDB_OK);
    assert_int_equal(size, 15);

    char buf[64];
    size_t got;
    assert_int_equal(bdb_file_pread(f, buf, sizeof(buf), 0, &got), BDB_OK);
    assert_int_equal(got, 15); /* short read at end of file is not an error */
    assert_memory_equal(buf, "hello\0\0\0\0\0world", 15);
    assert_int_equal(bdb_file_pread(f, buf, 4, 20, &got), BDB_OK);
    assert_int_equal(got, 0);
    assert_int_equal(bdb_file_sync(f), BDB_OK);

    assert_int_equal(bdb_file_truncate(f, 5), BDB_OK);
    const void *m;
    size_t mlen;
    assert_int_equal(bdb_file_map(f, &m, &mlen), BDB_OK);
    assert_int_equal(mlen, 5);
    assert_memory_equal(m, "hello", 5);
    assert_int_equal(bdb_file_unmap(f, m, mlen), BDB_OK);
    assert_int_equal(bdb_file_truncate(f, 0), BDB_OK);
    assert_int_equal(bdb_file_map(f, &m, &mlen), BDB_OK);
    assert_null(m);
    assert_int_equal(mlen, 0);
    assert_int_equal(bdb_file_close(f), BDB_OK);

    errno = 0;
    assert_int_equal(bdb_vfs_open(v, path, BDB_O_RDWR | BDB_O_CREAT | BDB_O_EXCL, &f), BDB_ERR_IO);
    assert_int_equal(errno, EEXIST);
    errno = 0;
    assert_int_equal(bdb_vfs_open(v, P(1, "missing"), BDB_O_RDONLY, &f), BDB_ERR_IO);
    assert_int_equal(errno, ENOENT);
}

typedef struct names {
    char list[16][32];
    int n, stop_after;
} names;

static int collect(void *ctx, const char *name)
{
    names *ns = ctx;
    if (ns->n < 16)
        snprintf(ns->list[ns->n++], 32, "%s", name);
    return ns->stop_after && ns->n >= ns->stop_after;
}

static int has_name(const names *ns, const char *name)
{
    for (int i = 0; i < ns->n; i++)
        if (strcmp(ns->list[i], name) == 0)
            return 1;
    return 0;
}

static void test_posix_dir_ops(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_posix();
    const char *sub = P(0, "sub");
    assert_int_equal(bdb_vfs_mkdir(v, sub), BDB_OK);
    assert_int_equal(bdb_vfs_mkdir(v, sub), BDB_OK); /* already there is fine */
    put_file(v, P(1, "a"), 'a', 3);
    errno = 0;
    assert_int_equal(bdb_vfs_mkdir(v, P(1, "a")), BDB_ERR_IO); /* a file is in the way */
    assert_int_equal(errno, ENOTDIR);

    assert_int_equal(bdb_vfs_exists(v, P(1, "a")), 1);
    assert_int_equal(bdb_vfs_rename(v, P(1, "a"), P(2, "b")), BDB_OK);
    assert_int_equal(bdb_vfs_exists(v, P(1, "a")), 0);
    assert_int_equal(bdb_vfs_exists(v, P(2, "b")), 1);
    assert_int_equal(bdb_vfs_sync_dir(v, tmpdir), BDB_OK);

    names ns = {.n = 0};
    assert_int_equal(bdb_vfs_list(v, tmpdir, collect, &ns), BDB_OK);
    assert_int_equal(ns.n, 2);
    assert_true(has_name(&ns, "sub") && has_name(&ns, "b"));
    names one = {.stop_after = 1};
    assert_int_equal(bdb_vfs_list(v, tmpdir, collect, &one), BDB_OK);
    assert_int_equal(one.n, 1);

    assert_int_equal(bdb_vfs_unlink(v, P(2, "b")), BDB_OK);
    assert_int_equal(bdb_vfs_exists(v, P(2, "b")), 0);
    errno = 0;
    assert_int_equal(bdb_vfs_unlink(v, P(2, "b")), BDB_ERR_IO);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(bdb_vfs_sync_dir(v, P(3, "nodir")), BDB_ERR_IO);
    assert_int_equal(bdb_vfs_list(v, P(3, "nodir"), collect, &ns), BDB_ERR_IO);
}

static void test_write_atomic_and_read_all(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_posix();
    assert_int_equal(bdb_vfs_write_atomic(v, tmpdir, "meta", "first", 5), BDB_OK);
    void *data;
    size_t len;
    assert_int_equal(bdb_vfs_read_all(v, P(0, "meta"), &data, &len), BDB_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(data, "first", 5);
    free(data);

    assert_int_equal(bdb_vfs_write_atomic(v, tmpdir, "meta", "second!", 7), BDB_OK);
    assert_int_equal(bdb_vfs_read_all(v, P(0, "meta"), &data, &len), BDB_OK);
    assert_int_equal(len, 7);
    assert_memory_equal(data, "second!", 7);
    free(data);
    assert_int_equal(bdb_vfs_exists(v, P(1, "meta.tmp")), 0);

    assert_int_equal(bdb_vfs_write_atomic(v, tmpdir, "empty", "", 0), BDB_OK);
    assert_int_equal(bdb_vfs_read_all(v, P(1, "empty"), &data, &len), BDB_OK);
    assert_non_null(data);
    assert_int_equal(len, 0);
    free(data);
    assert_int_equal(bdb_vfs_read_all(v, P(2, "none"), &data, &len), BDB_ERR_IO);
}

/* ---- fault VFS: injected errors ---- */

static void test_fault_fail_at(void **state)
{
    (void)state;
    bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
    const char *path = P(0, "f");
    bdb_file *f;
    assert_int_equal(bdb_vfs_fault_calls(fv), 0);
    assert_int_equal(bdb_vfs_open(fv, path, BDB_O_RDWR | BDB_O_CREAT, &f), BDB_OK); /* 1 */
    assert_int_equal(bdb_file_pwrite(f, "abc", 3, 0), BDB_OK);                      /* 2 */
    bdb_vfs_fault_fail_at(fv, 3, ENOSPC, 0);
    errno = 0;
    assert_int_equal(bdb_file_pwrite(f, "XYZ", 3, 0), BDB_ERR_NOSPACE); /* 3 */
    assert_int_equal(errno, ENOSPC);
    assert_int_equal(bdb_file_pwrite(f, "def", 3, 3), BDB_OK); /* 4: not sticky */

    /* Reads, sizes and plain opens are not counted. */
    char buf[8];
    size_t got;
    uint64_t size;
    bdb_file *g;
    assert_int_equal(bdb_file_pread(f, buf, sizeof(buf), 0, &got), BDB_OK);
    assert_int_equal(bdb_file_size(f, &size), BDB_OK);
    assert_int_equal(bdb_vfs_open(fv, path, BDB_O_RDONLY, &g), BDB_OK);
    assert_int_equal(bdb_file_close(g), BDB_OK);
    assert_int_equal(bdb_vfs_fault_calls(fv), 4);
    assert_int_equal(got, 6);
    assert_memory_equal(buf, "abcdef", 6); /* the failed write left no trace */

    bdb_vfs_fault_fail_at(fv, 6, EIO, 1);
    assert_int_equal(bdb_file_sync(f), BDB_OK); /* 5 */
    errno = 0;
    assert_int_equal(bdb_file_truncate(f, 1), BDB_ERR_IO); /* 6 */
    assert_int_equal(errno, EIO);
    assert_int_equal(bdb_vfs_rename(fv, path, P(1, "g")), BDB_ERR_IO); /* 7, sticky */
    assert_int_equal(bdb_vfs_unlink(fv, path), BDB_ERR_IO);            /* 8 */
    assert_int_equal(bdb_file_pwrite(f, "q", 1, 0), BDB_ERR_IO);       /* 9 */
    assert_int_equal(bdb_vfs_open(fv, P(1, "g"), BDB_O_RDWR | BDB_O_CREAT, &g), BDB_ERR_IO);
    assert_int_equal(bdb_vfs_fault_calls(fv), 10);
    assert_int_equal(bdb_vfs_exists(fv, path), 1);
    assert_int_equal(bdb_vfs_exists(fv, P(1, "g")), 0);
    assert_int_equal(bdb_file_close(f), BDB_OK);
    bdb_vfs_fault_free(fv);

    size_t len;
    uint8_t *d = disk(path, &len);
    assert_int_equal(len, 6);
    assert_memory_equal(d, "abcdef", 6);
    free(d);
}

/* A failed fsync forgets the unsynced writes; a retry that succeeds must not bring
 * them back (fsyncgate). */
static void test_fault_failed_sync_loses_writes(void **state)
{
    (void)state;
    bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
    const char *path = P(0, "f");
    put_file(fv, path, 'a', 4);
    bdb_file *f;
    assert_int_equal(bdb_vfs_open(fv, path, BDB_O_RDWR, &f), BDB_OK);
    assert_int_equal(bdb_file_pwrite(f, "bb", 2, 4), BDB_OK);
    bdb_vfs_fault_fail_at(fv, bdb_vfs_fault_calls(fv) + 1, EIO, 0);
    assert_int_equal(bdb_file_sync(f), BDB_ERR_IO);
    assert_int_equal(bdb_file_sync(f), BDB_OK);
    uint64_t size;
    assert_int_equal(bdb_file_size(f, &size), BDB_OK);
    assert_int_equal(size, 4);
    assert_int_equal(bdb_file_close(f), BDB_OK);
    bdb_vfs_fault_free(fv);
    size_t len;
    uint8_t *d = disk(path, &len);
    assert_int_equal(len, 4);
    free(d);
}

/* ---- fault VFS: the page-cache overlay ---- */

static void test_fault_overlay(void **state)
{
    (void)state;
    bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
    const char *path = P(0, "f");
    put_file(fv, path, 'a', 8);
    bdb_file *f;
    assert_int_equal(bdb_vfs_open(fv, path, BDB_O_RDWR, &f), BDB_OK);
    assert_int_equal(bdb_file_pwrite(f, "XY", 2, 2), BDB_OK);
    assert_int_equal(bdb_file_pwrite(f, "ZZ", 2, 12), BDB_OK); /* past the end: a hole */
    assert_int_equal(bdb_file_pwrite(f, "W", 1, 3), BDB_OK);   /* later write wins */

    const uint8_t want[14] = {'a', 'a', 'X', 'W', 'a', 'a', 'a', 'a', 0, 0, 0, 0, 'Z', 'Z'};
    uint8_t buf[32];
    size_t got;
    assert_int_equal(bdb_file_pread(f, buf, sizeof(buf), 0, &got), BDB_OK);
    assert_int_equal(got, 14);
    assert_memory_equal(buf, want, 14);
    assert_int_equal(bdb_file_pread(f, buf, 4, 11, &got), BDB_OK);
    assert_int_equal(got, 3);
    assert_memory_equal(buf, want + 11, 3);
    const void *m;
    size_t mlen;
    assert_int_equal(bdb_file_map(f, &m, &mlen), BDB_OK);
    assert_int_equal(mlen, 14);
    assert_memory_equal(m, want, 14);
    assert_int_equal(bdb_file_unmap(f, m, mlen), BDB_OK);

    size_t len;
    uint8_t *d = disk(path, &len);
    assert_int_equal(len, 8); /* nothing reached the disk yet */
    free(d);

    /* A second handle on the same file shares the cache. */
    bdb_file *g;
    assert_int_equal(bdb_vfs_open(fv, path, BDB_O_RDONLY, &g), BDB_OK);
    assert_int_equal(bdb_file_pread(g, buf, sizeof(buf), 0, &got), BDB_OK);
    assert_int_equal(got, 14);
    assert_int_equal(bdb_file_pwrite(g, "q", 1, 0), BDB_ERR_IO); /* read-only handle */
    assert_int_equal(bdb_file_close(g), BDB_OK);

    assert_int_equal(bdb_file_sync(f), BDB_OK);
    d = disk(path, &len);
    assert_int_equal(len, 14);
    assert_memory_equal(d, want, 14);
    free(d);

    /* Truncate cuts unsynced writes too. */
    assert_int_equal(bdb_file_pwrite(f, "TT", 2, 6), BDB_OK);
    assert_int_equal(bdb_file_truncate(f, 7), BDB_OK);
    assert_int_equal(bdb_file_pread(f, buf, sizeof(buf), 0, &got), BDB_OK);
    assert_int_equal(got, 7);
    assert_memory_equal(buf, "aaXWaaT", 7);
    assert_int_equal(bdb_file_close(f), BDB_OK);
    bdb_vfs_fault_free(fv);
}

/* ---- fault VFS: power loss ---- */

/* 8 KiB of 'a' synced, then unsynced writes; returns the open handle. */
static bdb_file *crash_fixture(bdb_vfs *fv, const char *path)
{
    put_file(fv, path, 'a', 8192);
    bdb_file *f;
    assert_int_equal(bdb_vfs_open(fv, path, BDB_O_RDWR, &f), BDB_OK);
    return f;
}

static void test_crash_keep_and_drop(void **state)
{
    (void)state;
    for (int mode = 0; mode < 2; mode++) {
        const char *path = P(0, mode ? "drop" : "keep");
        bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), 7);
        bdb_file *f = crash_fixture(fv, path);
        assert_int_equal(bdb_file_pwrite(f, "bbbb", 4, 100), BDB_OK);
        assert_int_equal(bdb_file_pwrite(f, "cccc", 4, 8192), BDB_OK);
        /* A closed file's unsynced writes are still in the cache, still at risk. */
        assert_int_equal(bdb_file_close(f), BDB_OK);
        bdb_vfs_fault_crash(fv, mode ? BDB_CRASH_DROP : BDB_CRASH_KEEP, 512);
        assert_int_equal(bdb_vfs_open(fv, path, BDB_O_RDONLY, &f), BDB_ERR_IO);
        bdb_vfs_fault_free(fv);

        size_t len;
        uint8_t *d = disk(path, &len);
        if (mode == 0) {
            assert_int_equal(len, 8196);
            assert_memory_equal(d + 100, "bbbb", 4);
            assert_memory_equal(d + 8192, "cccc", 4);
        } else {
            assert_int_equal(len, 8192);
            assert_memory_equal(d + 100, "aaaa", 4);
        }
        free(d);
    }
}

static void test_crash_kills_handles(void **state)
{
    (void)state;
    bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), 7);
    bdb_file *f = crash_fixture(fv, P(0, "f"));
    bdb_vfs_fault_crash(fv, BDB_CRASH_KEEP, 512);
    char buf[4];
    size_t got;
    uint64_t size;
    assert_int_equal(bdb_file_pread(f, buf, 4, 0, &got), BDB_ERR_IO);
    assert_int_equal(bdb_file_pwrite(f, "x", 1, 0), BDB_ERR_IO);
    assert_int_equal(bdb_file_sync(f), BDB_ERR_IO);
    assert_int_equal(bdb_file_size(f, &size), BDB_ERR_IO);
    assert_int_equal(bdb_vfs_rename(fv, P(0, "f"), P(1, "g")), BDB_ERR_IO);
    assert_int_equal(bdb_file_close(f), BDB_OK);
    bdb_vfs_fault_free(fv);
}

/* Each seed tears one unaligned 8000-byte write; what survives must be a prefix ending
 * on a sector boundary of the file, and across seeds real tears must happen. */
static void check_tear(int sector)
{
    enum { OFF = 100, LEN = 8000 };
    uint8_t *b = malloc(LEN);
    memset(b, 'b', LEN);
    int partial = 0, none = 0, all = 0;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        const char *path = P(0, "tear");
        bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), seed);
        bdb_file *f = crash_fixture(fv, path);
        assert_int_equal(bdb_file_pwrite(f, b, LEN, OFF), BDB_OK);
        bdb_vfs_fault_crash(fv, BDB_CRASH_TEAR, sector);
        assert_int_equal(bdb_file_close(f), BDB_OK);
        bdb_vfs_fault_free(fv);

        size_t len;
        uint8_t *d = disk(path, &len);
        assert_int_equal(len, 8192);
        size_t k = 0;
        while (k < LEN && d[OFF + k] == 'b')
            k++;
        for (size_t i = 0; i < len; i++)
            assert_int_equal(d[i], (i >= OFF && i < OFF + k) ? 'b' : 'a');
        assert_true(k == 0 || k == LEN || (OFF + k) % (size_t)sector == 0);
        partial += k > 0 && k < LEN;
        none += k == 0;
        all += k == LEN;
        free(d);
    }
    assert_true(partial > 0);
    assert_true(none + all + partial == 40);
    free(b);
}

static void test_crash_tear(void **state)
{
    (void)state;
    check_tear(512);
    check_tear(4096);
}

/* A tear that extends the file leaves it shorter: the lost sectors are simply absent. */
static void test_crash_tear_extending(void **state)
{
    (void)state;
    int saw_short = 0;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        const char *path = P(0, "ext");
        bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), seed);
        bdb_file *f = crash_fixture(fv, path);
        uint8_t b[2048];
        memset(b, 'b', sizeof(b));
        assert_int_equal(bdb_file_pwrite(f, b, sizeof(b), 8192), BDB_OK);
        bdb_vfs_fault_crash(fv, BDB_CRASH_TEAR, 512);
        assert_int_equal(bdb_file_close(f), BDB_OK);
        bdb_vfs_fault_free(fv);
        size_t len;
        uint8_t *d = disk(path, &len);
        assert_true(len >= 8192 && len <= 8192 + sizeof(b) && len % 512 == 0);
        for (size_t i = 8192; i < len; i++)
            assert_int_equal(d[i], 'b');
        saw_short += len > 8192 && len < 8192 + sizeof(b);
        free(d);
    }
    assert_true(saw_short > 0);
}

/* Sixteen one-sector writes: each survives whole or not at all, independently of order. */
static void test_crash_reorder(void **state)
{
    (void)state;
    int out_of_order = 0, mixed = 0;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        const char *path = P(0, "reorder");
        bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), seed);
        bdb_file *f = crash_fixture(fv, path);
        for (int i = 0; i < 16; i++) {
            uint8_t s[512];
            memset(s, 'A' + i, sizeof(s));
            assert_int_equal(bdb_file_pwrite(f, s, sizeof(s), (uint64_t)i * 512), BDB_OK);
        }
        bdb_vfs_fault_crash(fv, BDB_CRASH_REORDER, 512);
        assert_int_equal(bdb_file_close(f), BDB_OK);
        bdb_vfs_fault_free(fv);
        size_t len;
        uint8_t *d = disk(path, &len);
        assert_int_equal(len, 8192);
        int survived[16], n = 0;
        for (int i = 0; i < 16; i++) {
            uint8_t c = d[i * 512];
            assert_true(c == 'a' || c == 'A' + i);
            for (int j = 0; j < 512; j++)
                assert_int_equal(d[i * 512 + j], c);
            survived[i] = c != 'a';
            n += survived[i];
        }
        for (int i = 1; i < 16; i++)
            if (survived[i] && !survived[i - 1])
                out_of_order = 1;
        mixed += n > 0 && n < 16;
        free(d);
    }
    assert_true(out_of_order);
    assert_true(mixed > 0);
}

static uint8_t first_byte(const char *path)
{
    size_t len;
    uint8_t *d = disk(path, &len);
    assert_true(len > 0);
    uint8_t c = d[0];
    free(d);
    return c;
}

static void test_crash_dir_ops(void **state)
{
    (void)state;
    bdb_vfs *posix = bdb_vfs_posix();
    /* Unsynced rename over an existing file and unsynced unlink: both undone. */
    bdb_vfs *fv = bdb_vfs_fault_new(posix, 3);
    put_file(fv, P(0, "old"), 'o', 10);
    put_file(fv, P(1, "new"), 'n', 10);
    put_file(fv, P(2, "gone"), 'g', 10);
    assert_int_equal(bdb_vfs_rename(fv, P(1, "new"), P(0, "old")), BDB_OK);
    assert_int_equal(bdb_vfs_unlink(fv, P(2, "gone")), BDB_OK);
    assert_int_equal(bdb_vfs_exists(fv, P(2, "gone")), 0);
    names ns = {.n = 0};
    assert_int_equal(bdb_vfs_list(fv, tmpdir, collect, &ns), BDB_OK);
    assert_int_equal(ns.n, 1); /* parked backups stay hidden */
    assert_true(has_name(&ns, "old"));
    assert_int_equal(first_byte(P(0, "old")), 'n');
    bdb_vfs_fault_crash(fv, BDB_CRASH_DROP, 512);
    bdb_vfs_fault_free(fv);
    assert_int_equal(first_byte(P(0, "old")), 'o');
    assert_int_equal(first_byte(P(1, "new")), 'n');
    assert_int_equal(first_byte(P(2, "gone")), 'g');
    ns.n = 0;
    assert_int_equal(bdb_vfs_list(posix, tmpdir, collect, &ns), BDB_OK);
    assert_int_equal(ns.n, 3);

    /* After sync_dir the same operations survive any crash and leave no backups. */
    fv = bdb_vfs_fault_new(posix, 3);
    assert_int_equal(bdb_vfs_rename(fv, P(1, "new"), P(0, "old")), BDB_OK);
    assert_int_equal(bdb_vfs_unlink(fv, P(2, "gone")), BDB_OK);
    assert_int_equal(bdb_vfs_sync_dir(fv, tmpdir), BDB_OK);
    bdb_vfs_fault_crash(fv, BDB_CRASH_DROP, 512);
    bdb_vfs_fault_free(fv);
    assert_int_equal(first_byte(P(0, "old")), 'n');
    ns.n = 0;
    assert_int_equal(bdb_vfs_list(posix, tmpdir, collect, &ns), BDB_OK);
    assert_int_equal(ns.n, 1);

    /* KEEP is a process crash: unsynced directory operations stand. */
    fv = bdb_vfs_fault_new(posix, 3);
    assert_int_equal(bdb_vfs_rename(fv, P(0, "old"), P(1, "moved")), BDB_OK);
    bdb_vfs_fault_crash(fv, BDB_CRASH_KEEP, 512);
    bdb_vfs_fault_free(fv);
    assert_int_equal(bdb_vfs_exists(posix, P(0, "old")), 0);
    assert_int_equal(first_byte(P(1, "moved")), 'n');
}

/* write_atomic through the fault VFS: after a crash at any point the file holds the
 * old or the new content, never a mix; once it returned, the new content. */
static void test_write_atomic_survives_crash(void **state)
{
    (void)state;
    bdb_vfs *posix = bdb_vfs_posix();
    assert_int_equal(bdb_vfs_write_atomic(posix, tmpdir, "m", "old-content", 11), BDB_OK);
    bdb_vfs *fv = bdb_vfs_fault_new(posix, 5);
    assert_int_equal(bdb_vfs_write_atomic(fv, tmpdir, "m", "NEW", 3), BDB_OK);
    bdb_vfs_fault_crash(fv, BDB_CRASH_DROP, 512);
    bdb_vfs_fault_free(fv);
    size_t len;
    uint8_t *d = disk(P(0, "m"), &len);
    assert_int_equal(len, 3);
    assert_memory_equal(d, "NEW", 3);
    free(d);

    /* Fail each counted step in turn, then crash: old or new, whole. */
    for (uint64_t n = 1; n <= 4; n++) {
        fv = bdb_vfs_fault_new(posix, n);
        bdb_vfs_fault_fail_at(fv, n, EIO, 1);
        int rc = bdb_vfs_write_atomic(fv, tmpdir, "m", "third-version", 13);
        assert_int_not_equal(rc, BDB_OK);
        bdb_vfs_fault_crash(fv, BDB_CRASH_TEAR, 512);
        bdb_vfs_fault_free(fv);
        d = disk(P(0, "m"), &len);
        assert_int_equal(len, 3);
        assert_memory_equal(d, "NEW", 3);
        free(d);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_posix_file_ops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_posix_dir_ops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_atomic_and_read_all, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_fail_at, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_failed_sync_loses_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_overlay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_keep_and_drop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_kills_handles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_tear, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_tear_extending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_reorder, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_dir_ops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_atomic_survives_crash, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
