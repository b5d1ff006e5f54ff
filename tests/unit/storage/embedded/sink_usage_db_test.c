/* db_sink_usage through the engine, with the in-memory fake sink (fakesink.h): the
 * storage usage of a tenant on a sink is the bytes of the rows the sink received
 * (checked against the fake's own rows), counted only once a flush commits.
 *
 * Covered: a flush counts exactly its rows (names + 32 bytes each), per tenant; a
 * failed commit counts nothing and the retry counts once; rows with a TTL leave the
 * usage when the day of their expiry is over, rows of a tenant without one stay; a
 * reopen keeps the usage (file); a crash between the usage file's save and the
 * catalog's (simulated by putting the older catalog back) does not count the flush
 * the replay sends again; a damaged file is refused (logged) and counts from 0; a new
 * data directory takes the measure from the sink's document, put again after the sink
 * refused it; the embedded engine without a sink reports 0. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"
#include "storage/fakesink.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/core/db_int.h"
#include "storage/embedded/sink/db_sink_usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DAY BDB_MS_DAY
#define HOUR BDB_MS_HOUR

static char tmpdir[64], datadir[128];
static int64_t clock_now;

/* "ttl" has a 2-day raw TTL, every other tenant keeps its data forever */
static int64_t retention(void *ctx, const char *tn)
{
    (void)ctx;
    return strcmp(tn, "ttl") == 0 ? 2 * DAY : 0;
}

static int setup(void **state)
{
    (void)state;
    eu_scratch(tmpdir, sizeof tmpdir, "skudb", EU_TMPFS, datadir, sizeof datadir);
    clock_now = bdb_align_down(bdb_now_ms(), DAY) + 12 * HOUR;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static bdb_db *open_db(fakesink *f)
{
    bdb_db_opts o;
    eu_opts(&o, datadir, eu_clock, &clock_now);
    o.tenant_retention = retention;
    o.sink = f ? &f->base : NULL;
    return eu_open(&o);
}

/* n reports of device dev, two metrics each, one second apart from ts */
static void write_n(bdb_db *db, const char *tn, const char *dev, int64_t ts, int n)
{
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < n; i++) {
        bdb_batch_begin(b, dev, strlen(dev), ts + i * 1000, 0);
        bdb_batch_metric(b, "temp", 4, 20.0 + i);
        bdb_batch_metric(b, "hum", 3, 50.0 - i);
        assert_int_equal(bdb_batch_end(b), 1);
    }
    assert_int_equal(bdb_db_write(db, tn, b), BDB_OK);
    bdb_batch_free(b);
}

/* What the fake holds for tenant, at the sink's row size. */
static uint64_t fake_bytes(fakesink *f, const char *tn)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < f->nraw; i++)
        if (strcmp(f->raw[i].tenant, tn) == 0)
            sum +=
                bdb_sku_row_bytes(strlen(tn), strlen(f->raw[i].device), strlen(f->raw[i].metric));
    return sum;
}

static void copy_file(const char *from, const char *to)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cp %s %s", from, to);
    assert_int_equal(system(cmd), 0);
}

static void test_counts_confirmed_rows(void **state)
{
    (void)state;
    fakesink *f = fakesink_new(1);
    bdb_db *db = open_db(f);
    int64_t t = clock_now - HOUR;
    write_n(db, "acme", "dev-1", t, 50);
    write_n(db, "ttl", "d2", t, 10);
    assert_int_equal(db_sku_tenant_bytes(db, "acme"), 0); /* nothing flushed yet */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(f->nraw, 120);
    uint64_t acme = db_sku_tenant_bytes(db, "acme");
    assert_int_equal(acme, 50 * (4 + 5 + 4 + 32) + 50 * (4 + 5 + 3 + 32));
    assert_int_equal(acme, fake_bytes(f, "acme"));
    assert_int_equal(db_sku_tenant_bytes(db, "ttl"), fake_bytes(f, "ttl"));
    bdb_storage_usage su;
    bdb_db_usage_start(db, &(bdb_usage_opts){0, 1});
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    assert_int_equal(bdb_db_tenant_storage(db, "acme", &su), BDB_OK);
    assert_int_equal(su.sink_bytes, acme);
    assert_int_equal(su.block_bytes, 0);
    assert_int_equal(su.bytes, acme);

    /* a failed commit counts nothing; its retry counts once */
    write_n(db, "acme", "dev-1", t + 100000, 5);
    f->fail_op = FS_COMMIT;
    f->fail_nth = 0;
    f->fail_rc = BDB_ERR_IO;
    assert_int_not_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(db_sku_tenant_bytes(db, "acme"), acme);
    f->fail_op = -1;
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    acme = db_sku_tenant_bytes(db, "acme");
    assert_int_equal(acme, fake_bytes(f, "acme"));

    /* a reopen keeps it */
    bdb_db_close(db);
    db = open_db(f);
    assert_int_equal(db_sku_tenant_bytes(db, "acme"), acme);
    assert_int_equal(db_sku_tenant_bytes(db, "ttl"), fake_bytes(f, "ttl"));

    /* expiry: ttl's rows (event time t, TTL 2 days) leave at the end of the day that
     * holds t + 2 days, not before; acme's stay */
    int64_t exp_day_end = bdb_align_down(t + 2 * DAY, DAY) + DAY;
    clock_now = exp_day_end - 1;
    assert_int_equal(db_sku_tenant_bytes(db, "ttl"), fake_bytes(f, "ttl"));
    clock_now = exp_day_end;
    assert_int_equal(db_sku_tenant_bytes(db, "ttl"), 0);
    assert_int_equal(db_sku_tenant_bytes(db, "acme"), acme);
    bdb_db_close(db);
    fakesink_free(f);
}

static void test_crash_between_saves(void **state)
{
    (void)state;
    fakesink *f = fakesink_new(1);
    bdb_db *db = open_db(f);
    int64_t t = clock_now - HOUR;
    write_n(db, "acme", "dev-1", t, 20);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    uint64_t first = db_sku_tenant_bytes(db, "acme");
    assert_true(first > 0);
    char cat[256], aside[256], sku[256];
    snprintf(cat, sizeof cat, "%s/catalog", datadir);
    snprintf(aside, sizeof aside, "%s/catalog.before", tmpdir);
    snprintf(sku, sizeof sku, "%s/%s", datadir, BDB_SKU_FILE);
    copy_file(cat, aside);
    write_n(db, "acme", "dev-2", t, 30);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    uint64_t second = db_sku_tenant_bytes(db, "acme");
    assert_true(second > first);
    bdb_db_close(db);
    /* the crash: the usage file has the second flush, the catalog does not */
    copy_file(aside, cat);
    db = open_db(f);
    assert_int_equal(db_sku_tenant_bytes(db, "acme"), first);
    bdb_db_close(db);

    /* a damaged file: logged, counted from 0 */
    FILE *fp = fopen(sku, "r+b");
    assert_non_null(fp);
    fseek(fp, 9, SEEK_SET);
    fputc(0x7f, fp);
    fclose(fp);
    db = open_db(f);
    assert_int_equal(db_sku_tenant_bytes(db, "acme"), 0);
    bdb_db_close(db);
    fakesink_free(f);
}

/* The disk is lost: a server on a new data directory takes the measure from the sink's
 * document, which every flush that saved the file put. A document the sink refused
 * (the flush commits anyway) is put by the next flush, also one with nothing new. */
static void test_new_dir_takes_the_document(void **state)
{
    (void)state;
    fakesink *f = fakesink_new(1);
    bdb_db *db = open_db(f);
    int64_t t = clock_now - HOUR;
    write_n(db, "acme", "dev-1", t, 20);
    write_n(db, "ttl", "d2", t, 10);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    f->fail_op = FS_DOC_PUT;
    f->fail_nth = 0;
    f->fail_rc = BDB_ERR_AGAIN;
    write_n(db, "acme", "dev-2", t, 5);
    assert_int_equal(bdb_db_flush(db), BDB_OK); /* not failed by the document */
    uint64_t acme = db_sku_tenant_bytes(db, "acme");
    assert_int_equal(acme, fake_bytes(f, "acme"));
    f->fail_op = -1;
    uint64_t puts = f->op_calls[FS_DOC_PUT];
    assert_int_equal(bdb_db_flush(db), BDB_OK); /* nothing to send: puts the document */
    assert_int_equal(f->op_calls[FS_DOC_PUT], puts + 1);
    assert_int_equal(bdb_db_flush(db), BDB_OK); /* put: nothing more */
    assert_int_equal(f->op_calls[FS_DOC_PUT], puts + 1);
    bdb_db_close(db);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", datadir);
    assert_int_equal(system(cmd), 0);
    db = open_db(f);
    assert_int_equal(db_sku_tenant_bytes(db, "acme"), acme);
    assert_int_equal(db_sku_tenant_bytes(db, "ttl"), fake_bytes(f, "ttl"));
    /* its first flush writes the file: a restart keeps the measure */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_db_close(db);
    db = open_db(f);
    assert_int_equal(db_sku_tenant_bytes(db, "acme"), acme);
    bdb_db_close(db);
    fakesink_free(f);
}

static void test_embedded_counts_nothing_here(void **state)
{
    (void)state;
    bdb_db *db = open_db(NULL);
    write_n(db, "acme", "dev-1", clock_now - HOUR, 20);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(db_sku_tenant_bytes(db, "acme"), 0);
    char sku[256];
    snprintf(sku, sizeof sku, "%s/%s", datadir, BDB_SKU_FILE);
    assert_int_not_equal(access(sku, F_OK), 0);
    bdb_db_close(db);
}

int main(void)
{
    bdb_log_set_level(BDB_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_counts_confirmed_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_between_saves, setup, teardown),
        cmocka_unit_test_setup_teardown(test_new_dir_takes_the_document, setup, teardown),
        cmocka_unit_test_setup_teardown(test_embedded_counts_nothing_here, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
