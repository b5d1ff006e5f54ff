/* devlimit with a store (bdb_devlimit_open_store): device profiles kept as the
 * store's document "profiles" besides <dir>/profiles, over the fake sink's documents.
 *
 * Covered: a change goes to the store first and the file holds the same bytes; a
 * server on a new directory gets the profiles from the store (and its file written);
 * a change the store refuses fails with BDB_ERR_AGAIN and changes nothing (memory,
 * file, document); a store without the document gets the file at open; a store
 * unreachable at open leaves the file in force, and the first change reads the store
 * first (its newer profiles are kept, not overwritten by the file's); a damaged
 * document is refused at open. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"

#include "bucketdb/bdb.h"
#include "server/admission/devlimit.h"
#include "storage/fakesink.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir_a[64], dir_b[64];

static int setup(void **state)
{
    (void)state;
    strcpy(dir_a, "/tmp/bdb-dlstore-XXXXXX");
    strcpy(dir_b, "/tmp/bdb-dlstore-XXXXXX");
    return mkdtemp(dir_a) && mkdtemp(dir_b) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tu_rm_rf(dir_a);
    tu_rm_rf(dir_b);
    return 0;
}

static bdb_devlimit *open_on(const char *dir, fakesink *f)
{
    bdb_devlimit *d = NULL;
    char err[600];
    int rc = bdb_devlimit_open_store(dir, f ? &f->base : NULL, 60000, &d, err, sizeof err);
    if (rc != BDB_OK)
        fail_msg("open: %s (%s)", bdb_strerror(rc), err);
    return d;
}

static uint32_t rps_of(bdb_devlimit *d, const char *tn, const char *dev)
{
    uint32_t rps = 0;
    int64_t iv = 0;
    return bdb_devlimit_get_profile(d, tn, dev, &rps, &iv) ? rps : UINT32_MAX;
}

/* The file of dir and the fake's document hold the same bytes. */
static void assert_same_copies(const char *dir, fakesink *f)
{
    char path[128], buf[4096];
    snprintf(path, sizeof path, "%s/profiles", dir);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    size_t k = 0;
    while (k < f->ndoc && strcmp(f->doc[k].key, "profiles"))
        k++;
    assert_true(k < f->ndoc);
    assert_int_equal(f->doc[k].len, n);
    assert_memory_equal(f->doc[k].data, buf, n);
}

static void test_store_first_and_new_directory(void **state)
{
    (void)state;
    fakesink *f = fakesink_new(1);
    bdb_devlimit *a = open_on(dir_a, f);
    assert_int_equal(bdb_devlimit_set_profile(a, "acme", "pump 1", 5, 10000), BDB_OK);
    assert_int_equal(bdb_devlimit_set_profile(a, "acme", "valve", 0, 60000), BDB_OK);
    assert_same_copies(dir_a, f);
    /* refused by the store: nothing changes anywhere */
    f->fail_op = FS_DOC_PUT;
    f->fail_nth = 0;
    f->fail_rc = BDB_ERR_AGAIN;
    assert_int_equal(bdb_devlimit_set_profile(a, "acme", "pump 1", 9, 0), BDB_ERR_AGAIN);
    assert_int_equal(bdb_devlimit_set_profile(a, "acme", "new", 3, 0), BDB_ERR_AGAIN);
    f->fail_op = -1;
    assert_int_equal(rps_of(a, "acme", "pump 1"), 5);
    assert_int_equal(rps_of(a, "acme", "new"), UINT32_MAX);
    assert_int_equal(bdb_devlimit_profiles(a), 2);
    assert_same_copies(dir_a, f);
    bdb_devlimit_free(a);
    /* the disk is lost: a new directory gets them from the store */
    bdb_devlimit *b = open_on(dir_b, f);
    assert_int_equal(bdb_devlimit_profiles(b), 2);
    assert_int_equal(rps_of(b, "acme", "pump 1"), 5);
    assert_int_equal(rps_of(b, "acme", "valve"), 0);
    assert_same_copies(dir_b, f);
    bdb_devlimit_free(b);
    fakesink_free(f);
}

static void test_migration_and_unreachable(void **state)
{
    (void)state;
    /* a directory with profiles and no store: a store without the document gets them */
    bdb_devlimit *a = open_on(dir_a, NULL);
    assert_int_equal(bdb_devlimit_set_profile(a, "t", "d1", 7, 0), BDB_OK);
    bdb_devlimit_free(a);
    fakesink *f = fakesink_new(1);
    a = open_on(dir_a, f);
    assert_int_equal(rps_of(a, "t", "d1"), 7);
    assert_same_copies(dir_a, f);
    /* another server changes the store's profiles meanwhile */
    bdb_devlimit *b = open_on(dir_b, f);
    assert_int_equal(bdb_devlimit_set_profile(b, "t", "d2", 4, 0), BDB_OK);
    bdb_devlimit_free(b);
    bdb_devlimit_free(a);
    /* A restarts while the store cannot be read: its file (without d2) is in force */
    f->fail_op = FS_DOC_GET;
    f->fail_nth = 0;
    f->fail_rc = BDB_ERR_AGAIN;
    a = open_on(dir_a, f);
    assert_int_equal(rps_of(a, "t", "d2"), UINT32_MAX);
    /* still unreachable: a change fails */
    assert_int_equal(bdb_devlimit_set_profile(a, "t", "d3", 1, 0), BDB_ERR_AGAIN);
    assert_int_equal(rps_of(a, "t", "d3"), UINT32_MAX);
    /* back: the first change takes the store's profiles first, d2 is kept */
    f->fail_op = -1;
    assert_int_equal(bdb_devlimit_set_profile(a, "t", "d3", 1, 0), BDB_OK);
    assert_int_equal(rps_of(a, "t", "d1"), 7);
    assert_int_equal(rps_of(a, "t", "d2"), 4);
    assert_int_equal(rps_of(a, "t", "d3"), 1);
    assert_same_copies(dir_a, f);
    bdb_devlimit_free(a);
    fakesink_free(f);
}

static void test_damaged_document_refused(void **state)
{
    (void)state;
    fakesink *f = fakesink_new(1);
    bdb_devlimit *a = open_on(dir_a, f);
    assert_int_equal(bdb_devlimit_set_profile(a, "t", "d1", 7, 0), BDB_OK);
    bdb_devlimit_free(a);
    for (size_t k = 0; k < f->ndoc; k++)
        if (!strcmp(f->doc[k].key, "profiles"))
            ((char *)f->doc[k].data)[f->doc[k].len / 2] ^= 1;
    bdb_devlimit *d = NULL;
    char err[600] = "";
    assert_int_equal(bdb_devlimit_open_store(dir_b, &f->base, 60000, &d, err, sizeof err),
                     BDB_ERR_CORRUPT);
    assert_null(d);
    assert_non_null(strstr(err, "checksum"));
    fakesink_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_store_first_and_new_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migration_and_unreachable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_document_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
