/* Per-tenant retention in the embedded engine, with an injected clock: tenants with
 * different TTLs never share a block file, so expiry deletes whole files without a
 * rewrite; reads stop at each tenant's cutoff at once; after a tenant's TTL shrinks
 * or grows, the windows it shares are regrouped once so no tenant keeps data past
 * its TTL and none loses data early; a failed rewrite loses nothing. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/hot/db_hot.h"
#include "storage/vfs/vfs.h"
#include "storage/vfs/vfs_fault.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN INT64_C(60000)
#define HOUR (60 * MIN)
#define DAY (24 * HOUR)

static char datadir[128];

/* The test's world: what time it is and each tenant's TTL (0 = server default). */
static struct world {
    int64_t now;
    int64_t ttl_a, ttl_b;
} W;

static int64_t world_clock(void *ctx)
{
    return ((struct world *)ctx)->now;
}

static int64_t world_ttl(void *ctx, const char *tenant)
{
    struct world *w = ctx;
    return !strcmp(tenant, "a") ? w->ttl_a : !strcmp(tenant, "b") ? w->ttl_b : 0;
}

static int setup(void **state)
{
    (void)state;
    snprintf(datadir, sizeof datadir, "/tmp/bdb-retention-test-%d", (int)getpid());
    tu_rm_rf(datadir);
    bdb_log_set_level(BDB_LOG_WARN);
    W.now = INT64_C(1790000000000); /* 2026-09: any fixed time works */
    W.ttl_a = W.ttl_b = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_rm_rf(datadir);
    return 0;
}

static bdb_db *open_world(bdb_vfs *vfs)
{
    bdb_db_opts o;
    bdb_db_opts_default(&o);
    o.data_dir = datadir;
    o.vfs = vfs;
    o.background = 0;
    o.retention_ms = 30 * DAY; /* the server default */
    o.clock = (bdb_clock){world_clock, &W};
    o.tenant_retention = world_ttl;
    o.tenant_retention_ctx = &W;
    bdb_db *db = NULL;
    int rc = bdb_db_open(&o, &db);
    if (rc != BDB_OK)
        fail_msg("bdb_db_open: %s", bdb_strerror(rc));
    return db;
}

/* n samples of metric m for device d of a tenant, one per minute from t0. */
static void write_run(bdb_db *db, const char *tenant, int64_t t0, int n)
{
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < n; i++) {
        bdb_batch_begin(b, "d", 1, t0 + i * MIN, (size_t)i + 1);
        bdb_batch_metric(b, "m", 1, (double)i);
        bdb_batch_end(b);
    }
    assert_int_equal(bdb_db_write(db, tenant, b), BDB_OK);
    bdb_batch_free(b);
}

static size_t count(bdb_db *db, const char *tenant)
{
    const char *m[1] = {"m"};
    bdb_samples s;
    memset(&s, 0, sizeof s);
    int rc = bdb_db_read(db, tenant, "d", m, 1, INT64_MIN, INT64_MAX, &s, NULL);
    assert_true(rc == BDB_OK || rc == BDB_ERR_NOTFOUND);
    size_t n = rc == BDB_OK ? s.n : 0;
    bdb_samples_free(&s);
    return n;
}

/* Rows stored in block files per tenant (partition statistics of every block). */
struct rows {
    uint64_t a, b;
};

static int rows_cb(void *ctx, const char *tenant, const char *device, int64_t bucket, uint64_t rows,
                   uint64_t bytes)
{
    (void)device, (void)bucket, (void)bytes;
    struct rows *r = ctx;
    if (!strcmp(tenant, "a"))
        r->a += rows;
    else if (!strcmp(tenant, "b"))
        r->b += rows;
    return 0;
}

static struct rows stored(bdb_db *db)
{
    struct rows r = {0, 0};
    assert_int_equal(bdb_db_partition_sizes(db, rows_cb, &r), BDB_OK);
    return r;
}

/* Events telemetry_by_tenant still lists for the tenant (all time). */
static int tbt_cb(void *ctx, const bdb_tbt_row *r)
{
    *(uint64_t *)ctx += r->events;
    return 0;
}

static uint64_t tbt_events(bdb_db *db, const char *tenant)
{
    uint64_t n = 0;
    int rc = bdb_db_telemetry_by_tenant(db, tenant, INT64_MIN, INT64_MAX, tbt_cb, &n);
    assert_true(rc == BDB_OK || rc == BDB_ERR_NOTFOUND);
    return n;
}

static bdb_db_stats stats(bdb_db *db)
{
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    return st;
}

/* Tenants of different TTLs written into the same windows get separate files; the
 * shorter TTL's files are deleted whole, nothing is rewritten. */
static void test_classes_expire_whole_files(void **state)
{
    (void)state;
    W.ttl_a = 1 * DAY;
    W.ttl_b = 10 * DAY;
    bdb_db *db = open_world(NULL);
    int64_t t0 = bdb_align_down(W.now - 3 * DAY, 2 * HOUR); /* one 2 h window */
    write_run(db, "a", t0, 60);
    write_run(db, "b", t0, 60);
    write_run(db, "a", W.now - HOUR, 30);
    write_run(db, "b", W.now - HOUR, 30);
    /* a's old samples are past its cutoff already, before any file exists */
    assert_int_equal(count(db, "a"), 30);
    assert_int_equal(count(db, "b"), 90);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_db_stats st = stats(db);
    assert_int_equal(st.blocks, 4); /* 2 windows x 2 classes */
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    st = stats(db);
    assert_int_equal(st.retention_drops, 1);   /* a's old file, unlinked unread */
    assert_int_equal(tbt_events(db, "a"), 30); /* its partition counts went with it */
    assert_int_equal(tbt_events(db, "b"), 90);
    assert_int_equal(st.compactions, 0);
    assert_int_equal(st.blocks, 3);
    struct rows r = stored(db);
    assert_int_equal(r.a, 30);
    assert_int_equal(r.b, 90);
    /* nine days later b's old window goes too, whole */
    W.now += 9 * DAY;
    assert_int_equal(count(db, "b"), 30);
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    st = stats(db);
    assert_int_equal(st.compactions, 0);
    r = stored(db);
    assert_int_equal(r.b, 30);
    assert_int_equal(r.a, 0); /* a's recent window expired after a day as well */
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_world(NULL);
    assert_int_equal(count(db, "a"), 0);
    assert_int_equal(count(db, "b"), 30);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Two tenants share files while their TTLs are equal; when a's shrinks, its data
 * leaves the shared files on time and b's stays; a second pass changes nothing. */
static void test_shrunk_ttl_regroups(void **state)
{
    (void)state;
    W.ttl_a = W.ttl_b = 10 * DAY;
    bdb_db *db = open_world(NULL);
    int64_t t0 = bdb_align_down(W.now - 3 * DAY, 2 * HOUR);
    write_run(db, "a", t0, 60);
    write_run(db, "b", t0, 60);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    assert_int_equal(stats(db).blocks, 1); /* same class: one shared file */
    assert_int_equal(stats(db).compactions, 0);

    W.ttl_a = 1 * DAY;
    assert_int_equal(count(db, "a"), 0); /* invisible at once */
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    bdb_db_stats st = stats(db);
    assert_int_equal(st.compactions, 1); /* the shared file rewritten without a */
    assert_int_equal(st.blocks, 1);
    struct rows r = stored(db);
    assert_int_equal(r.a, 0);
    assert_int_equal(r.b, 60);
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    assert_int_equal(stats(db).compactions, 1); /* stable */
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_world(NULL);
    assert_int_equal(count(db, "b"), 60);
    assert_int_equal(stored(db).a, 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* The opposite: a's TTL grows while it shares a file with b; when b's data expires,
 * a's must survive (rewritten into its own file), not go with b's file. */
static void test_grown_ttl_keeps_data(void **state)
{
    (void)state;
    W.ttl_a = W.ttl_b = 1 * DAY;
    bdb_db *db = open_world(NULL);
    int64_t t0 = bdb_align_down(W.now - 12 * HOUR, 2 * HOUR);
    write_run(db, "a", t0, 60);
    write_run(db, "b", t0, 60);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(stats(db).blocks, 1);

    W.ttl_a = 30 * DAY;
    /* the shared file now mixes two classes; regrouping does not wait for expiry */
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    assert_int_equal(stats(db).blocks, 2);
    assert_int_equal(stats(db).retention_drops, 0);
    W.now += 3 * DAY;
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    bdb_db_stats st = stats(db);
    assert_int_equal(st.retention_drops, 1); /* b's file, whole */
    struct rows r = stored(db);
    assert_int_equal(r.a, 60);
    assert_int_equal(r.b, 0);
    assert_int_equal(count(db, "a"), 60);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_world(NULL);
    assert_int_equal(count(db, "a"), 60);
    assert_int_equal(count(db, "b"), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A rewrite that fails half-way (I/O error on any of its calls) publishes nothing and
 * deletes nothing: every sample that should survive is still read, and the next pass
 * succeeds. */
static void test_failed_regroup_loses_nothing(void **state)
{
    (void)state;
    int failures = 0;
    for (uint64_t k = 1; k <= 12; k++) {
        tu_rm_rf(datadir);
        W.now = INT64_C(1790000000000);
        W.ttl_a = W.ttl_b = 10 * DAY;
        bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), k);
        bdb_db *db = open_world(fv);
        int64_t t0 = bdb_align_down(W.now - 3 * DAY, 2 * HOUR);
        write_run(db, "a", t0, 60);
        write_run(db, "b", t0, 60);
        assert_int_equal(bdb_db_flush(db), BDB_OK);
        W.ttl_a = 1 * DAY;
        bdb_vfs_fault_fail_at(fv, bdb_vfs_fault_calls(fv) + k, EIO, 0);
        int rc = bdb_db_maintain(db);
        bdb_vfs_fault_fail_at(fv, 0, 0, 0); /* the fault hits this rewrite only */
        failures += rc != BDB_OK;
        assert_int_equal(count(db, "b"), 60);
        assert_int_equal(count(db, "a"), 0);
        if (rc != BDB_OK)
            assert_int_equal(stored(db).b, 60);
        assert_int_equal(bdb_db_maintain(db), BDB_OK);
        struct rows r = stored(db);
        assert_int_equal(r.a, 0);
        assert_int_equal(r.b, 60);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        db = open_world(fv);
        assert_int_equal(count(db, "b"), 60);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        bdb_vfs_fault_free(fv);
    }
    assert_true(failures >= 3); /* the rewrite's calls were hit, not just later ones */
}

/* The resolved TTL: a tenant's own, else the server's; reads stop at the cutoff. */
static void test_resolution_and_cutoff(void **state)
{
    (void)state;
    W.ttl_a = 2 * DAY;
    bdb_db *db = open_world(NULL);
    assert_int_equal(bdb_db_retention_ms(db, "a"), 2 * DAY);
    assert_int_equal(bdb_db_retention_ms(db, "other"), 30 * DAY);
    assert_int_equal(bdb_db_retention_cutoff(db, "a"), W.now - 2 * DAY);
    write_run(db, "a", W.now - 2 * DAY - 10 * MIN, 20); /* 10 before the cutoff */
    assert_int_equal(count(db, "a"), 10);
    W.now += 5 * MIN;
    assert_int_equal(count(db, "a"), 5);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_classes_expire_whole_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shrunk_ttl_regroups, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grown_ttl_keeps_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_regroup_loses_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resolution_and_cutoff, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
