/* vfs_alloc: every allocation of each VFS operation fails in turn (common/alloc.h's
 * injector), over the POSIX VFS and the fault VFS.
 *
 * For each operation the sweep arms "fail allocation n" for n = 1, 2, ... until a run
 * sees no injected failure. A run that failed must return BDB_ERR_NOMEM and leave the
 * files and names exactly as they were; the few steps that cannot be refused any more
 * (the fault VFS's bookkeeping after a rename or unlink already happened on disk) must
 * report success and leave a state a crash resolves cleanly: no parked backup on the
 * disk afterwards. The ASan build checks that no run leaks. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#define VT_PREFIX "bdb-vfsalloc"
#include "vfs_testutil.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "storage/vfs/vfs.h"
#include "storage/vfs/vfs_fault.h"

#include <errno.h>
#include <limits.h>

enum { MAX_ALLOCS = 32 }; /* more would mean the sweep never ends */

static void arm(int n)
{
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_NTH, (uint64_t)n);
}

/* Disarms; 1 if this run had an allocation fail. */
static int disarm(void)
{
    int hit = bdb_alloc_fail_injected() > 0;
    bdb_alloc_fail_disarm();
    return hit;
}

static int names_cb(void *ctx, const char *name)
{
    char *acc = ctx;
    if (strlen(acc) + strlen(name) + 2 < 1024) {
        strcat(acc, name);
        strcat(acc, ";");
    }
    return 0;
}

static void expect_no_leftovers(void)
{
    char names[1024] = "";
    assert_int_equal(bdb_vfs_list(bdb_vfs_posix(), tmpdir, names_cb, names), BDB_OK);
    assert_null(strstr(names, "bdbfault"));
    assert_null(strstr(names, ".tmp"));
}

static void test_posix_and_helpers(void **state)
{
    (void)state;
    bdb_vfs *v = bdb_vfs_posix();
    bdb_file *f = NULL;
    arm(1);
    int rc = bdb_vfs_open(v, P(0, "f"), BDB_O_RDWR | BDB_O_CREAT, &f);
    assert_true(disarm());
    assert_int_equal(rc, BDB_ERR_NOMEM);
    expect_disk(P(0, "f"), NULL); /* refused before the file was created */

    assert_int_equal(put_disk(P(0, "m"), "old"), 0);
    int n, failures = 0;
    for (n = 1; n <= MAX_ALLOCS; n++) {
        arm(n);
        rc = bdb_vfs_write_atomic(v, tmpdir, "m", "new", 3);
        if (!disarm())
            break;
        assert_int_equal(rc, BDB_ERR_NOMEM);
        expect_disk(P(0, "m"), "old");
        expect_no_leftovers();
        failures++;
    }
    assert_true(n <= MAX_ALLOCS && failures >= 3); /* two names and the handle */
    assert_int_equal(rc, BDB_OK);
    expect_disk(P(0, "m"), "new");

    failures = 0;
    for (n = 1; n <= MAX_ALLOCS; n++) {
        void *data = (void *)1;
        size_t len = 7;
        arm(n);
        rc = bdb_vfs_read_all(v, P(0, "m"), &data, &len);
        if (!disarm()) {
            assert_int_equal(rc, BDB_OK);
            assert_int_equal(len, 3);
            assert_memory_equal(data, "new", 3);
            free(data);
            break;
        }
        assert_int_equal(rc, BDB_ERR_NOMEM);
        assert_ptr_equal(data, (void *)1);
        assert_int_equal(len, 7);
        failures++;
    }
    assert_true(n <= MAX_ALLOCS && failures >= 2); /* the handle and the buffer */
}

static void test_fault_vfs_files(void **state)
{
    (void)state;
    arm(1);
    bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
    assert_true(disarm());
    assert_null(v);

    /* creating a file: handle, node, name, the handle underneath */
    int n, failures = 0, rc;
    for (n = 1; n <= MAX_ALLOCS; n++) {
        v = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
        bdb_file *f = NULL;
        arm(n);
        rc = bdb_vfs_open(v, P(0, "c"), BDB_O_RDWR | BDB_O_CREAT, &f);
        int hit = disarm();
        if (!hit) {
            assert_int_equal(rc, BDB_OK);
            assert_int_equal(bdb_file_close(f), BDB_OK);
        } else {
            assert_int_equal(rc, BDB_ERR_NOMEM);
            assert_false(bdb_vfs_exists(v, P(0, "c")));
            failures++;
        }
        bdb_vfs_fault_free(v);
        if (!hit)
            break;
    }
    assert_true(n <= MAX_ALLOCS && failures >= 4);
    expect_disk(P(0, "c"), "");

    /* the first unsynced write (the table, the copy), a second handle, a map */
    v = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
    bdb_file *f = NULL, *g = NULL;
    assert_int_equal(bdb_vfs_open(v, P(0, "c"), BDB_O_RDWR, &f), BDB_OK);
    failures = 0;
    for (n = 1; n <= MAX_ALLOCS; n++) {
        arm(n);
        rc = bdb_file_pwrite(f, "abc", 3, 0);
        if (!disarm())
            break;
        assert_int_equal(rc, BDB_ERR_NOMEM);
        uint64_t size;
        assert_int_equal(bdb_file_size(f, &size), BDB_OK);
        assert_int_equal(size, 0); /* the refused write left no trace */
        failures++;
    }
    assert_int_equal(failures, 2);
    assert_int_equal(rc, BDB_OK);
    arm(1);
    rc = bdb_vfs_open(v, P(0, "c"), BDB_O_RDONLY, &g);
    assert_true(disarm());
    assert_int_equal(rc, BDB_ERR_NOMEM);
    const void *p = (const void *)1;
    size_t len = 1;
    arm(1);
    rc = bdb_file_map(f, &p, &len);
    assert_true(disarm());
    assert_int_equal(rc, BDB_ERR_NOMEM);
    assert_null(p);
    assert_int_equal(len, 0);
    assert_int_equal(bdb_file_sync(f), BDB_OK);
    assert_int_equal(bdb_file_close(f), BDB_OK);
    bdb_vfs_fault_free(v);
    expect_disk(P(0, "c"), "abc");
}

enum { OP_UNLINK, OP_RENAME_OVER, OP_RENAME_FRESH };

/* One sweep step of a directory operation over a fresh fault VFS. A refused call
 * changed nothing; an accepted one happened on disk, and a DROP crash then either
 * undoes it (it was recorded) or keeps it (the record could not be allocated), always
 * without leaving a parked backup behind. Returns whether an allocation failed. */
static int dir_op_step(int n, int op, int *kept_after_crash)
{
    int is_rename = op != OP_UNLINK;
    const char *dst_before = op == OP_RENAME_FRESH ? NULL : "DST";
    assert_int_equal(put_disk(P(0, "src"), "SRC"), 0);
    if (dst_before)
        assert_int_equal(put_disk(P(0, "dst"), dst_before), 0);
    bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
    /* an open handle on the source, so the rename also renames its node */
    bdb_file *h = NULL;
    assert_int_equal(bdb_vfs_open(v, P(0, "src"), BDB_O_RDONLY, &h), BDB_OK);
    arm(n);
    int rc =
        is_rename ? bdb_vfs_rename(v, P(0, "src"), P(1, "dst")) : bdb_vfs_unlink(v, P(0, "src"));
    int hit = disarm();
    if (rc == BDB_ERR_NOMEM) {
        assert_true(hit);
        expect_disk(P(0, "src"), "SRC");
        expect_disk(P(0, "dst"), dst_before);
    } else {
        assert_int_equal(rc, BDB_OK);
        expect_disk(P(0, "src"), NULL);
        expect_disk(P(0, "dst"), is_rename ? "SRC" : dst_before);
    }
    bdb_vfs_fault_crash(v, BDB_CRASH_DROP, 512);
    assert_int_equal(bdb_file_close(h), BDB_OK);
    bdb_vfs_fault_free(v);
    char buf[8];
    if (rc == BDB_OK && on_disk(P(0, "src"), buf, sizeof buf) < 0) {
        /* the operation could not be recorded: it stands, whole */
        expect_disk(P(0, "dst"), is_rename ? "SRC" : dst_before);
        ++*kept_after_crash;
    } else {
        expect_disk(P(0, "src"), "SRC");
        expect_disk(P(0, "dst"), dst_before);
    }
    expect_no_leftovers();
    unlink(P(0, "src"));
    unlink(P(0, "dst"));
    return hit;
}

static void test_fault_vfs_dir_ops(void **state)
{
    (void)state;
    for (int op = OP_UNLINK; op <= OP_RENAME_FRESH; op++) {
        int n, failures = 0, kept = 0;
        for (n = 1; n <= MAX_ALLOCS; n++) {
            if (!dir_op_step(n, op, &kept))
                break;
            failures++;
        }
        assert_true(n <= MAX_ALLOCS);
        assert_true(failures >= 4);
        assert_int_equal(kept, 1); /* only a lost record leaves the operation standing */
    }

    /* a directory sync that cannot allocate leaves the operations undurable */
    assert_int_equal(put_disk(P(0, "a"), "A"), 0);
    bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
    assert_int_equal(bdb_vfs_unlink(v, P(0, "a")), BDB_OK);
    arm(1);
    int rc = bdb_vfs_sync_dir(v, tmpdir);
    assert_true(disarm());
    assert_int_equal(rc, BDB_ERR_NOMEM);
    bdb_vfs_fault_crash(v, BDB_CRASH_DROP, 512);
    bdb_vfs_fault_free(v);
    expect_disk(P(0, "a"), "A");
    expect_no_leftovers();
}

/* A name without a directory part lives in "."; that name is allocated too. */
static void test_fault_vfs_relative_name(void **state)
{
    (void)state;
    char cwd[PATH_MAX];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(tmpdir), 0);
    int n, failures = 0;
    for (n = 1; n <= MAX_ALLOCS; n++) {
        assert_int_equal(put_disk("rel", "R"), 0);
        bdb_vfs *v = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
        arm(n);
        int rc = bdb_vfs_unlink(v, "rel");
        int hit = disarm();
        if (hit && rc == BDB_ERR_NOMEM) {
            expect_disk("rel", "R");
            failures++;
        }
        if (rc == BDB_OK) /* durable now, whether or not it was recorded */
            assert_int_equal(bdb_vfs_sync_dir(v, "."), BDB_OK);
        bdb_vfs_fault_crash(v, BDB_CRASH_DROP, 512);
        bdb_vfs_fault_free(v);
        if (rc == BDB_OK)
            expect_disk("rel", NULL);
        if (!hit)
            break;
    }
    assert_int_equal(chdir(cwd), 0);
    assert_true(n <= MAX_ALLOCS && failures >= 3); /* ".", the path, its copy */
    expect_no_leftovers();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_posix_and_helpers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_vfs_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_vfs_dir_ops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_vfs_relative_name, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
