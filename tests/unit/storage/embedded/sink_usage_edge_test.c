/* db_sink_usage at its edges (sink_usage_test.c and sink_usage_db_test.c cover the
 * common paths):
 *   - the table: a day inserted between two, bytes saturating, a day too far to ever
 *     end, taking off a tenant the table lacks, prune dropping emptied days, a file
 *     without the last flush's part, a count that does not fit, every allocation of
 *     the table and of a file's decode failing in turn (BDB_ERR_NOMEM, nothing half
 *     added);
 *   - the engine: a sink_usage file that cannot be read (the measure restarts, the
 *     flushes go on), a save that fails (the flush still commits: its tier files are
 *     published already; the next flush saves), rows already past their TTL when sent,
 *     every allocation of an open over a sink failing in turn. */
#include "storage/embedded/sink_glue_util.h"

#include "common/buf.h"
#include "storage/embedded/sink/db_sink_usage.h"

#include <sys/stat.h>
#include <zlib.h>

/* ---------------------------------------------------------------- the table */

static void test_table_edges(void **st)
{
    (void)st;
    bdb_sku *t = bdb_sku_new();
    assert_non_null(t);
    int64_t d = 20000;
    assert_int_equal(bdb_sku_add(t, "a", 1, d, 1), BDB_OK);
    assert_int_equal(bdb_sku_add(t, "a", 1, d + 2, 4), BDB_OK);
    assert_int_equal(bdb_sku_add(t, "a", 1, d + 1, 2), BDB_OK); /* between the two */
    assert_int_equal(bdb_sku_tenant(t, "a", 1, (d + 1) * DAY), 6);
    assert_int_equal(bdb_sku_tenant(t, "a", 1, (d + 2) * DAY), 4);
    /* saturates instead of wrapping */
    assert_int_equal(bdb_sku_add(t, "a", 1, d + 2, UINT64_MAX - 1), BDB_OK);
    assert_int_equal(bdb_sku_tenant(t, "a", 1, (d + 2) * DAY), UINT64_MAX);
    /* a day whose end does not fit in ms never ends */
    int64_t far = INT64_MAX / DAY - 1;
    assert_int_equal(bdb_sku_add(t, "b", 1, far, 9), BDB_OK);
    assert_int_equal(bdb_sku_tenant(t, "b", 1, INT64_MAX), 9);
    /* taking off a tenant the table lacks changes nothing and adds no tenant */
    bdb_sku *o = bdb_sku_new();
    assert_int_equal(bdb_sku_add(o, "zz", 2, d, 5), BDB_OK);
    assert_int_equal(bdb_sku_add(o, "b", 1, far, 9), BDB_OK);
    assert_int_equal(bdb_sku_merge(t, o, -1), BDB_OK);
    assert_int_equal(bdb_sku_tenant(t, "zz", 2, 0), 0);
    assert_int_equal(bdb_sku_tenant(t, "b", 1, 0), 0);
    /* prune drops the emptied day: the file then holds the same as one without it */
    bdb_sku_prune(t, 0);
    bdb_sku *want = bdb_sku_new();
    assert_int_equal(bdb_sku_add(want, "a", 1, d, 1), BDB_OK);
    assert_int_equal(bdb_sku_add(want, "a", 1, d + 1, 2), BDB_OK);
    assert_int_equal(bdb_sku_add(want, "a", 1, d + 2, UINT64_MAX), BDB_OK);
    bdb_buf x, y;
    bdb_buf_init(&x);
    bdb_buf_init(&y);
    bdb_sku_encode(t, NULL, 7, &x); /* no last flush's part */
    bdb_sku_encode(want, NULL, 7, &y);
    assert_int_equal(x.len, y.len);
    assert_memory_equal(x.data, y.data, x.len);
    bdb_sku *cur = bdb_sku_new(), *last = bdb_sku_new();
    uint64_t upto = 0;
    char err[160];
    assert_int_equal(bdb_sku_decode(x.data, x.len, cur, last, &upto, err, sizeof err), BDB_OK);
    assert_int_equal(upto, 7);
    assert_int_equal(bdb_sku_tenant(cur, "a", 1, 0), UINT64_MAX);
    assert_int_equal(bdb_sku_tenant(last, "a", 1, 0), 0);
    /* a last count that does not fit after the current one */
    bdb_buf_free(&y);
    bdb_buf_init(&y);
    bdb_buf_append(&y, x.data, x.len - 4);
    uint64_t big = (x.len - 36 - 4) / 17; /* = ncur + 1 entries fit only if ncur = 0 */
    for (int i = 0; i < 8; i++)
        ((unsigned char *)y.data)[28 + i] = (unsigned char)(big >> (8 * i));
    bdb_buf_put_u32le(&y, (uint32_t)crc32(0, y.data, (uInt)y.len));
    assert_int_equal(bdb_sku_decode(y.data, y.len, cur, last, &upto, err, sizeof err),
                     BDB_ERR_CORRUPT);
    assert_non_null(strstr(err, "entry counts"));
    bdb_buf_free(&x);
    bdb_buf_free(&y);
    bdb_sku_free(t);
    bdb_sku_free(o);
    bdb_sku_free(want);
    bdb_sku_free(cur);
    bdb_sku_free(last);
}

/* Every allocation of new, add (a new tenant, a vector growing), merge and decode
 * failing in turn: NOMEM with the table as before (add, merge into an empty table)
 * or an exact result. */
static void test_table_alloc_failures(void **st)
{
    (void)st;
    bdb_sku *src = bdb_sku_new();
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 12; k++) /* 12 days: the day vectors grow past 8 */
            assert_int_equal(bdb_sku_add(src, i ? i == 1 ? "b" : "c" : "a", 1, 100 + k, 10 + k),
                             BDB_OK);
    bdb_buf file;
    bdb_buf_init(&file);
    bdb_sku_encode(src, src, 3, &file);
    unsigned sites = 0, nomem = 0;
    for (uint64_t n = 1; n < 1000; n++) {
        eu_arm(n);
        bdb_sku *t = bdb_sku_new();
        int rc = t ? bdb_sku_merge(t, src, 1) : BDB_ERR_NOMEM;
        bdb_sku *cur = t ? bdb_sku_new() : NULL, *last = cur ? bdb_sku_new() : NULL;
        uint64_t upto = 0;
        char err[160];
        int drc = last ? bdb_sku_decode(file.data, file.len, cur, last, &upto, err, sizeof err)
                       : BDB_ERR_NOMEM;
        int hit = eu_disarm();
        assert_true(rc == BDB_OK || rc == BDB_ERR_NOMEM);
        assert_true(drc == BDB_OK || drc == BDB_ERR_NOMEM);
        if (rc == BDB_OK)
            for (int k = 0; k < 12; k++) /* complete: each day's bytes */
                assert_int_equal(bdb_sku_tenant(t, "c", 1, (100 + k) * DAY) -
                                     bdb_sku_tenant(t, "c", 1, (101 + k) * DAY),
                                 10 + k);
        if (drc == BDB_OK) {
            assert_int_equal(upto, 3);
            assert_int_equal(bdb_sku_tenant(cur, "b", 1, 0), bdb_sku_tenant(src, "b", 1, 0));
            assert_int_equal(bdb_sku_tenant(last, "a", 1, 0), bdb_sku_tenant(src, "a", 1, 0));
        }
        bdb_sku_free(t);
        bdb_sku_free(cur);
        bdb_sku_free(last);
        if (!hit)
            break;
        sites++;
        nomem += rc != BDB_OK || drc != BDB_OK;
    }
    assert_true(sites > 10);
    assert_int_equal(nomem, sites);
    /* add: a failing one leaves the table as it was */
    bdb_sku *t = bdb_sku_new();
    for (uint64_t n = 1; n < 100; n++) {
        uint64_t before = bdb_sku_tenant(t, "x", 1, 0);
        eu_arm(1);
        int rc = bdb_sku_add(t, "x", 1, (int64_t)n, 1);
        bdb_alloc_fail_disarm();
        assert_int_equal(bdb_sku_tenant(t, "x", 1, 0), before + (rc == BDB_OK));
        if (rc != BDB_OK)
            assert_int_equal(bdb_sku_add(t, "x", 1, (int64_t)n, 1), BDB_OK);
    }
    assert_int_equal(bdb_sku_tenant(t, "x", 1, 0), 99);
    bdb_sku_free(t);
    bdb_sku_free(src);
    bdb_buf_free(&file);
}

/* ---------------------------------------------------------------- the engine */

static uint64_t fake_bytes(fakesink *f, const char *tn)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < f->nraw; i++)
        if (strcmp(f->raw[i].tenant, tn) == 0)
            sum +=
                bdb_sku_row_bytes(strlen(tn), strlen(f->raw[i].device), strlen(f->raw[i].metric));
    return sum;
}

static int64_t ttl_of(void *ctx, const char *tn)
{
    (void)ctx;
    return !strcmp(tn, "short") ? DAY : 0;
}

static void ttl_tweak(bdb_db_opts *o)
{
    o->tenant_retention = ttl_of;
}

static void test_unreadable_and_unsaved_file(void **st)
{
    (void)st;
    fakesink *f = fakesink_new(1);
    char dir[160], path[200];
    path_of(dir, sizeof dir, "un");
    snprintf(path, sizeof path, "%s/%s", dir, BDB_SKU_FILE);
    fake_now = T0 + HOUR;
    bdb_db *db = open_db("un", f);
    eu_put(db, "t1", "d0", "temp", T0, 1.5, 0);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    uint64_t b1 = db_sku_tenant_bytes(db, "t1");
    assert_true(b1 > 0);
    assert_int_equal(b1, fake_bytes(f, "t1"));
    bdb_db_close(db);
    /* the file cannot be read (a directory in its place): the measure restarts from
     * zero, and the flushes go on although the save fails */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkdir(path, 0755), 0);
    db = open_db("un", f);
    assert_int_equal(db_sku_tenant_bytes(db, "t1"), 0);
    eu_put(db, "t1", "d1", "temp", T0, 2.5, 0);
    assert_int_equal(bdb_db_flush(db), BDB_OK); /* committed: the save is retried later */
    uint64_t b2 = db_sku_tenant_bytes(db, "t1");
    assert_true(b2 > 0 && b2 < fake_bytes(f, "t1"));
    /* the place is free again: the next flush saves what the failed save missed, even
     * with nothing new of its own */
    assert_int_equal(rmdir(path), 0);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_db_close(db);
    db = open_db("un", f);
    assert_int_equal(db_sku_tenant_bytes(db, "t1"), b2);
    /* no tenant, and an engine without a sink: nothing */
    assert_int_equal(db_sku_tenant_bytes(db, NULL), 0);
    bdb_db *plain = open_db("un_plain", NULL);
    assert_int_equal(db_sku_tenant_bytes(plain, "t1"), 0);
    bdb_db_close(plain);
    bdb_db_close(db);
    fakesink_free(f);
}

static void test_rows_past_ttl(void **st)
{
    (void)st;
    fakesink *f = fakesink_new(1);
    open_tweak = ttl_tweak;
    fake_now = T0 + 3 * DAY;
    bdb_db *db = open_db("pt", f);
    open_tweak = NULL;
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < 2; i++) { /* two days old and one hour old, TTL one day */
        bdb_batch_begin(b, "d0", 2, i ? fake_now - HOUR : fake_now - 2 * DAY, 0);
        bdb_batch_metric(b, "temp", 4, i);
        assert_int_equal(bdb_batch_end(b), 1);
    }
    int rc = bdb_db_write(db, "short", b);
    bdb_batch_free(b);
    assert_int_equal(rc, BDB_OK);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    /* only the live row counts (the old one is not kept by the sink either) */
    assert_int_equal(db_sku_tenant_bytes(db, "short"), bdb_sku_row_bytes(5, 2, 4));
    bdb_db_close(db);
    fakesink_free(f);
}

/* Every allocation of an open over a sink (the usage file loaded among the rest)
 * failing in turn: NOMEM, or an engine whose measure is the saved one. */
static void test_open_alloc_failures(void **st)
{
    (void)st;
    fakesink *f = fakesink_new(1);
    fake_now = T0 + HOUR;
    bdb_db *db = open_db("oa", f);
    eu_put(db, "t1", "d0", "temp", T0, 1.5, 0);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    uint64_t want = db_sku_tenant_bytes(db, "t1");
    bdb_db_close(db);
    char img[160], dir[160];
    path_of(img, sizeof img, "oa");
    path_of(dir, sizeof dir, "oa_work");
    unsigned sites = 0;
    for (uint64_t n = 1; n < 5000; n++) {
        tu_rm_rf(dir); /* every open starts from the same directory */
        assert_int_equal(cu_copy_tree(img, dir), 0);
        bdb_db_opts o;
        eu_opts(&o, dir, clock_fn, NULL);
        o.vfs = eu_nosync_vfs();
        o.sync_mode = BDB_WAL_SYNC_PERIODIC;
        o.sink = &f->base;
        bdb_db *x = NULL;
        eu_arm(n);
        int rc = bdb_db_open(&o, &x);
        int hit = eu_disarm();
        assert_true(rc == BDB_OK || rc == BDB_ERR_NOMEM);
        if (rc == BDB_OK) {
            /* (when the usage could not be made at open, the first use makes it) */
            assert_int_equal(db_sku_tenant_bytes(x, "t1"), want);
            assert_int_equal(bdb_db_close(x), BDB_OK);
        }
        f->closed = 0;
        if (!hit)
            break;
        sites++;
    }
    assert_true(sites > 10);
    printf("alloc sweep open over a sink: %u allocation sites failed in turn\n", sites);
    fakesink_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_edges),
        cmocka_unit_test(test_table_alloc_failures),
        cmocka_unit_test_setup_teardown(test_unreadable_and_unsaved_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rows_past_ttl, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_alloc_failures, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
