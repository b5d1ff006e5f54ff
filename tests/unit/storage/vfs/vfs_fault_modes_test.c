/* vfs_fault_modes: what the fault VFS promises, checked on the real disk afterwards.
 *
 * - The Nth counted call of each kind (open with create, pwrite, sync, truncate,
 *   rename, unlink, sync_dir) fails once with ENOSPC (BDB_ERR_NOSPACE) or EIO
 *   (BDB_ERR_IO), errno kept, with no effect; the same call then succeeds.
 * - Each crash mode leaves exactly what it promises: KEEP the page-cache view, DROP
 *   the synced state, REORDER the result of applying some subset of the unsynced
 *   writes in their original order, TEAR a sector-aligned prefix of each write.
 * - Errors of the VFS underneath (tests/unit/storage/failvfs.h over POSIX) come back
 *   through the fault VFS unchanged, and a failed step leaves the names as they were.
 * - A file too big to hold in memory is refused by map and read_all, not truncated. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#define VT_PREFIX "bdb-vfsmodes"
#include "vfs_testutil.h"

#include "bucketdb/bdb.h"
#include "storage/failvfs.h"
#include "storage/vfs/vfs.h"
#include "storage/vfs/vfs_fault.h"

#include <errno.h>

static bdb_file *open_rw(bdb_vfs *v, const char *path)
{
    bdb_file *f = NULL;
    assert_int_equal(bdb_vfs_open(v, path, BDB_O_RDWR | BDB_O_CREAT, &f), BDB_OK);
    return f;
}

/* The next counted call fails once with err: the status and errno that must come back. */
static void fail_next(bdb_vfs *v, int err)
{
    bdb_vfs_fault_fail_at(v, bdb_vfs_fault_calls(v) + 1, err, 0);
    errno = 0;
}

static void check_failed(int rc, int err)
{
    assert_int_equal(rc, err == ENOSPC ? BDB_ERR_NOSPACE : BDB_ERR_IO);
    assert_int_equal(errno, err);
}

static void test_nth_call_of_each_kind(void **state)
{
    (void)state;
    static const int errs[] = {ENOSPC, EIO};
    for (size_t e = 0; e < 2; e++) {
        int err = errs[e];
        assert_int_equal(put_disk(P(0, "a"), "base"), 0);
        assert_int_equal(put_disk(P(0, "b"), "bee"), 0);
        unlink(P(0, "c"));
        bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 11);
        bdb_file *f, *g = NULL;
        assert_int_equal(bdb_vfs_open(v, P(0, "a"), BDB_O_RDWR, &f), BDB_OK);

        fail_next(v, err); /* open with create */
        check_failed(bdb_vfs_open(v, P(0, "c"), BDB_O_RDWR | BDB_O_CREAT, &g), err);
        assert_false(bdb_vfs_exists(v, P(0, "c")));
        fail_next(v, err); /* pwrite */
        check_failed(bdb_file_pwrite(f, "XX", 2, 0), err);
        fail_next(v, err); /* truncate */
        check_failed(bdb_file_truncate(f, 1), err);
        fail_next(v, err); /* rename */
        check_failed(bdb_vfs_rename(v, P(0, "a"), P(1, "b")), err);
        fail_next(v, err); /* unlink */
        check_failed(bdb_vfs_unlink(v, P(0, "b")), err);
        expect_disk(P(0, "a"), "base");
        expect_disk(P(0, "b"), "bee");
        expect_disk(P(0, "c"), NULL);

        /* sync: the failure also forgets the unsynced write (fsyncgate) */
        assert_int_equal(bdb_file_pwrite(f, "YY", 2, 0), BDB_OK);
        fail_next(v, err);
        check_failed(bdb_file_sync(f), err);
        assert_int_equal(bdb_file_sync(f), BDB_OK);
        expect_disk(P(0, "a"), "base");

        /* not sticky: each call, repeated, works */
        assert_int_equal(bdb_file_pwrite(f, "ZZ", 2, 0), BDB_OK);
        assert_int_equal(bdb_file_truncate(f, 3), BDB_OK);
        assert_int_equal(bdb_file_sync(f), BDB_OK);
        expect_disk(P(0, "a"), "ZZs");
        assert_int_equal(bdb_vfs_open(v, P(0, "c"), BDB_O_RDWR | BDB_O_CREAT, &g), BDB_OK);
        assert_int_equal(bdb_file_close(g), BDB_OK);
        assert_int_equal(bdb_vfs_unlink(v, P(0, "c")), BDB_OK);
        assert_int_equal(bdb_vfs_rename(v, P(0, "b"), P(1, "d")), BDB_OK);

        /* sync_dir: the directory operations stay undurable, a crash undoes them */
        fail_next(v, err);
        check_failed(bdb_vfs_sync_dir(v, tmpdir), err);
        bdb_vfs_fault_crash(v, BDB_CRASH_DROP, 512);
        assert_int_equal(bdb_file_close(f), BDB_OK);
        bdb_vfs_fault_free(v);
        expect_disk(P(0, "a"), "ZZs");
        expect_disk(P(0, "b"), "bee");
        expect_disk(P(0, "c"), ""); /* creation is durable at once, the unlink was not */
        expect_disk(P(0, "d"), NULL);
        unlink(P(0, "c"));
    }
}

/* Synced "0123456789" in x and "abc" in y, then overlapping unsynced writes. */
static void mode_fixture(bdb_vfs *v, char *logical_x, char *logical_y)
{
    assert_int_equal(put_disk(P(0, "x"), "0123456789"), 0);
    assert_int_equal(put_disk(P(0, "y"), "abc"), 0);
    bdb_file *x = open_rw(v, P(0, "x")), *y = open_rw(v, P(0, "y"));
    assert_int_equal(bdb_file_pwrite(x, "AAAA", 4, 2), BDB_OK);
    assert_int_equal(bdb_file_pwrite(x, "BB", 2, 4), BDB_OK); /* over the end of A */
    assert_int_equal(bdb_file_pwrite(y, "QQ", 2, 3), BDB_OK); /* extends y */
    size_t got;
    assert_int_equal(bdb_file_pread(x, logical_x, 63, 0, &got), BDB_OK);
    logical_x[got] = '\0';
    assert_int_equal(bdb_file_pread(y, logical_y, 63, 0, &got), BDB_OK);
    logical_y[got] = '\0';
    /* closed handles: the writes stay in the cache, still at risk */
    assert_int_equal(bdb_file_close(x), BDB_OK);
    assert_int_equal(bdb_file_close(y), BDB_OK);
}

static void test_keep_and_drop_exact(void **state)
{
    (void)state;
    char lx[64], ly[64];
    bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
    mode_fixture(v, lx, ly);
    assert_string_equal(lx, "01AABB6789");
    assert_string_equal(ly, "abcQQ");
    bdb_vfs_fault_crash(v, BDB_CRASH_KEEP, 512);
    bdb_vfs_fault_free(v);
    expect_disk(P(0, "x"), lx);
    expect_disk(P(0, "y"), ly);

    v = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
    mode_fixture(v, lx, ly);
    bdb_vfs_fault_crash(v, BDB_CRASH_DROP, 4096);
    bdb_vfs_fault_free(v);
    expect_disk(P(0, "x"), "0123456789");
    expect_disk(P(0, "y"), "abc");
}

/* REORDER: the survivors are any subset, applied in their original order, so where
 * A and B overlap B wins whenever both survive. */
static void test_reorder_is_a_subset_in_order(void **state)
{
    (void)state;
    static const char *const x_outcomes[4] = {"0123456789", "01AAAA6789", "0123BB6789",
                                              "01AABB6789"};
    int seen[4] = {0}, y_kept = 0, y_lost = 0;
    for (uint64_t seed = 1; seed <= 32; seed++) {
        char lx[64], ly[64], buf[64];
        bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), seed);
        mode_fixture(v, lx, ly);
        bdb_vfs_fault_crash(v, BDB_CRASH_REORDER, 512);
        bdb_vfs_fault_free(v);
        long n = on_disk(P(0, "x"), buf, sizeof buf);
        assert_int_equal(n, 10);
        int match = -1;
        for (int i = 0; i < 4; i++)
            if (memcmp(buf, x_outcomes[i], 10) == 0)
                match = i;
        assert_true(match >= 0);
        seen[match]++;
        n = on_disk(P(0, "y"), buf, sizeof buf);
        assert_true((n == 3 && memcmp(buf, "abc", 3) == 0) ||
                    (n == 5 && memcmp(buf, "abcQQ", 5) == 0));
        y_kept += n == 5;
        y_lost += n == 3;
    }
    for (int i = 0; i < 4; i++)
        assert_true(seen[i] > 0);
    assert_true(y_kept > 0 && y_lost > 0);
}

/* TEAR: 512-byte sectors can cut where 4 KiB sectors cannot. */
static void test_tear_sector_sizes(void **state)
{
    (void)state;
    enum { LEN = 8192 };
    static uint8_t b[LEN];
    memset(b, 'w', sizeof b);
    int fine_cut = 0;
    for (int sector = 512; sector <= 4096; sector *= 8) {
        for (uint64_t seed = 1; seed <= 24; seed++) {
            bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), seed);
            bdb_file *f = open_rw(v, P(0, "t"));
            assert_int_equal(bdb_file_truncate(f, 0), BDB_OK);
            assert_int_equal(bdb_file_pwrite(f, b, LEN, 0), BDB_OK);
            bdb_vfs_fault_crash(v, BDB_CRASH_TEAR, sector);
            assert_int_equal(bdb_file_close(f), BDB_OK);
            bdb_vfs_fault_free(v);
            static char back[LEN + 1];
            long n = on_disk(P(0, "t"), back, sizeof back);
            assert_true(n >= 0 && n <= LEN && n % sector == 0);
            for (long i = 0; i < n; i++)
                assert_int_equal(back[i], 'w');
            fine_cut += sector == 512 && n % 4096 != 0;
        }
    }
    assert_true(fine_cut > 0);
}

/* A write of no bytes is a counted call (it can fail) that changes nothing. */
static void test_write_of_nothing(void **state)
{
    (void)state;
    assert_int_equal(put_disk(P(0, "z"), "four"), 0);
    bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 9);
    bdb_file *f = open_rw(v, P(0, "z"));
    uint64_t calls = bdb_vfs_fault_calls(v), size;
    assert_int_equal(bdb_file_pwrite(f, "", 0, 100), BDB_OK);
    assert_int_equal(bdb_vfs_fault_calls(v), calls + 1);
    assert_int_equal(bdb_file_size(f, &size), BDB_OK);
    assert_int_equal(size, 4);
    fail_next(v, ENOSPC);
    check_failed(bdb_file_pwrite(f, "", 0, 100), ENOSPC);
    bdb_vfs_fault_crash(v, BDB_CRASH_KEEP, 512);
    assert_int_equal(bdb_file_close(f), BDB_OK);
    bdb_vfs_fault_free(v);
    expect_disk(P(0, "z"), "four");
}

/* A sync that fails before a planned power-off is an ordinary failure: its writes are
 * forgotten at once, not left for the crash to decide. */
static void test_failed_sync_before_power_off(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 10);
    bdb_file *f = open_rw(v, P(0, "s"));
    assert_int_equal(bdb_file_pwrite(f, "lost", 4, 0), BDB_OK);
    bdb_vfs_fault_power_off_at(v, bdb_vfs_fault_calls(v) + 10);
    fail_next(v, EIO);
    check_failed(bdb_file_sync(f), EIO);
    uint64_t size;
    assert_int_equal(bdb_file_size(f, &size), BDB_OK);
    assert_int_equal(size, 0);
    bdb_vfs_fault_crash(v, BDB_CRASH_KEEP, 512);
    assert_int_equal(bdb_file_close(f), BDB_OK);
    bdb_vfs_fault_free(v);
    expect_disk(P(0, "s"), "");
}

/* Handles close in any order; a file whose last handle went is forgotten only when
 * nothing of it is pending, and opening it again sees what the disk has. */
static void test_close_in_any_order(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 12);
    bdb_file *a = open_rw(v, P(0, "a")), *b = open_rw(v, P(0, "b")), *c = open_rw(v, P(0, "c"));
    assert_int_equal(bdb_file_pwrite(a, "AA", 2, 0), BDB_OK);
    assert_int_equal(bdb_file_sync(a), BDB_OK);
    assert_int_equal(bdb_file_pwrite(c, "CC", 2, 0), BDB_OK);
    assert_int_equal(bdb_file_close(a), BDB_OK); /* the oldest first, then the middle */
    assert_int_equal(bdb_file_close(b), BDB_OK);
    char buf[4];
    size_t got;
    assert_int_equal(bdb_file_pread(c, buf, sizeof buf, 0, &got), BDB_OK);
    assert_int_equal(got, 2);
    assert_memory_equal(buf, "CC", 2);
    assert_int_equal(bdb_vfs_open(v, P(0, "a"), BDB_O_RDONLY, &a), BDB_OK);
    assert_int_equal(bdb_file_pread(a, buf, sizeof buf, 0, &got), BDB_OK);
    assert_int_equal(got, 2);
    assert_memory_equal(buf, "AA", 2);
    assert_int_equal(bdb_file_close(a), BDB_OK);
    assert_int_equal(bdb_file_close(c), BDB_OK);
    bdb_vfs_fault_crash(v, BDB_CRASH_DROP, 512);
    bdb_vfs_fault_free(v);
    expect_disk(P(0, "a"), "AA");
    expect_disk(P(0, "b"), "");
    expect_disk(P(0, "c"), ""); /* closed but unsynced: dropped */
}

/* ---- errors of the VFS underneath ---- */

typedef struct stack {
    failvfs fail;
    bdb_vfs *v;
} stack;

static void stack_open(stack *s)
{
    fv_init(&s->fail, bdb_vfs_posix(), 0, EIO);
    s->v = bdb_vfs_fault_new(&s->fail.base, 3);
    assert_non_null(s->v);
}

/* Underlying call number now+k fails once with EIO. */
static void fail_under(stack *s, uint64_t k)
{
    s->fail.fail_at = fv_calls(&s->fail) + k;
    errno = 0;
}

static void test_underlying_read_errors(void **state)
{
    (void)state;
    stack s;
    stack_open(&s);
    bdb_file *f = open_rw(s.v, P(0, "r"));
    assert_int_equal(bdb_file_pwrite(f, "data", 4, 0), BDB_OK);
    char buf[8];
    size_t got = 9;
    const void *p = (const void *)1;
    size_t len = 9;
    for (uint64_t k = 1; k <= 2; k++) { /* 1: the size, 2: the read itself */
        fail_under(&s, k);
        assert_int_equal(bdb_file_pread(f, buf, sizeof buf, 0, &got), BDB_ERR_IO);
        assert_int_equal(errno, EIO);
        assert_int_equal(got, 0);
        fail_under(&s, k);
        assert_int_equal(bdb_file_map(f, &p, &len), BDB_ERR_IO);
        assert_null(p);
        assert_int_equal(len, 0);
    }
    /* nothing was lost on the way: the overlay still reads whole */
    assert_int_equal(bdb_file_pread(f, buf, sizeof buf, 0, &got), BDB_OK);
    assert_int_equal(got, 4);
    assert_memory_equal(buf, "data", 4);
    assert_int_equal(bdb_file_close(f), BDB_OK);
    bdb_vfs_fault_free(s.v);
}

static void test_underlying_sync_errors(void **state)
{
    (void)state;
    stack s;
    stack_open(&s);
    bdb_file *f = open_rw(s.v, P(0, "w"));
    assert_int_equal(bdb_file_pwrite(f, "one", 3, 0), BDB_OK);
    assert_int_equal(bdb_file_pwrite(f, "two", 3, 3), BDB_OK);
    assert_int_equal(bdb_file_pwrite(f, "six", 3, 6), BDB_OK);
    uint64_t calls = fv_calls(&s.fail);
    fail_under(&s, 2); /* the second write applied by sync: the third is not tried */
    assert_int_equal(bdb_file_sync(f), BDB_ERR_IO);
    assert_int_equal(errno, EIO);
    assert_int_equal(s.fail.failed_op, FV_PWRITE);
    assert_int_equal(fv_calls(&s.fail), calls + 2);
    assert_int_equal(bdb_file_pwrite(f, "3", 1, 0), BDB_OK);
    fail_under(&s, 2); /* the fsync after the one write */
    assert_int_equal(bdb_file_sync(f), BDB_ERR_IO);
    assert_int_equal(s.fail.failed_op, FV_SYNC);
    assert_int_equal(bdb_file_close(f), BDB_OK);

    /* creating a file whose underlying open fails registers nothing */
    bdb_file *g = NULL;
    fail_under(&s, 1);
    assert_int_equal(bdb_vfs_open(s.v, P(0, "new"), BDB_O_RDWR | BDB_O_CREAT, &g), BDB_ERR_IO);
    assert_int_equal(errno, EIO);
    assert_false(bdb_vfs_exists(s.v, P(0, "new")));
    assert_int_equal(bdb_vfs_open(s.v, P(0, "new"), BDB_O_RDONLY, &g), BDB_ERR_IO);
    assert_int_equal(errno, ENOENT);
    bdb_vfs_fault_free(s.v);
}

static int any_cb(void *ctx, const char *name)
{
    char *acc = ctx;
    strcat(acc, name);
    strcat(acc, ";");
    return 0;
}

/* No parked ".bdbfault-bak-" file may be left on the real disk. */
static void expect_no_backup(void)
{
    char names[512] = "";
    assert_int_equal(bdb_vfs_list(bdb_vfs_posix(), tmpdir, any_cb, names), BDB_OK);
    assert_null(strstr(names, "bdbfault"));
}

static void test_underlying_dir_errors(void **state)
{
    (void)state;
    assert_int_equal(put_disk(P(0, "from"), "FROM"), 0);
    assert_int_equal(put_disk(P(0, "to"), "TO"), 0);
    stack s;
    stack_open(&s);
    /* 1: parking the old target fails; 2: the rename itself fails, the target returns */
    for (uint64_t k = 1; k <= 2; k++) {
        fail_under(&s, k);
        assert_int_equal(bdb_vfs_rename(s.v, P(0, "from"), P(1, "to")), BDB_ERR_IO);
        assert_int_equal(errno, EIO);
        assert_int_equal(s.fail.failed_op, FV_RENAME);
        expect_disk(P(0, "from"), "FROM");
        expect_disk(P(0, "to"), "TO");
        expect_no_backup();
    }
    fail_under(&s, 1); /* parking the unlinked file fails */
    assert_int_equal(bdb_vfs_unlink(s.v, P(0, "to")), BDB_ERR_IO);
    expect_disk(P(0, "to"), "TO");
    expect_no_backup();

    /* the real directory sync fails: the rename stays undurable, the crash undoes it */
    assert_int_equal(bdb_vfs_rename(s.v, P(0, "from"), P(1, "to")), BDB_OK);
    expect_disk(P(0, "to"), "FROM");
    fail_under(&s, 1);
    assert_int_equal(bdb_vfs_sync_dir(s.v, tmpdir), BDB_ERR_IO);
    assert_int_equal(s.fail.failed_op, FV_SYNC_DIR);
    bdb_vfs_fault_crash(s.v, BDB_CRASH_DROP, 512);
    bdb_vfs_fault_free(s.v);
    expect_disk(P(0, "from"), "FROM");
    expect_disk(P(0, "to"), "TO");
    expect_no_backup();
}

/* A logical size of SIZE_MAX (an unsynced write at the far end) cannot be held in
 * memory: map and read_all refuse it instead of allocating or cutting it. */
static void test_file_too_big_for_memory(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 4);
    bdb_file *f = open_rw(v, P(0, "huge"));
    assert_int_equal(bdb_file_pwrite(f, "end!", 4, (uint64_t)SIZE_MAX - 4), BDB_OK);
    uint64_t size;
    assert_int_equal(bdb_file_size(f, &size), BDB_OK);
    assert_true(size == (uint64_t)SIZE_MAX);
    const void *p = (const void *)1;
    size_t len = 1;
    assert_int_equal(bdb_file_map(f, &p, &len), BDB_ERR_NOMEM);
    assert_null(p);
    assert_int_equal(len, 0);
    void *data = (void *)1;
    errno = 0;
    assert_int_equal(bdb_vfs_read_all(v, P(0, "huge"), &data, &len), BDB_ERR_IO);
    assert_int_equal(errno, EFBIG);
    assert_ptr_equal(data, (void *)1);
    bdb_vfs_fault_crash(v, BDB_CRASH_DROP, 512);
    assert_int_equal(bdb_file_close(f), BDB_OK);
    bdb_vfs_fault_free(v);
    expect_disk(P(0, "huge"), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nth_call_of_each_kind, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keep_and_drop_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reorder_is_a_subset_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tear_sector_sizes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_of_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_sync_before_power_off, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_in_any_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_underlying_read_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_underlying_sync_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_underlying_dir_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_too_big_for_memory, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
