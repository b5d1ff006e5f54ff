/* Per-tenant rollup tier retention: the registry's tier_retention_* fields (file round
 * trip, old lines without them, bad values refused) and, through the engine's tier
 * retention hook with an injected clock, tenant A keeping its 1-minute tier 2 days
 * while tenant B keeps the default 90 days and a tenant with "forever" keeps all. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"

#include "agg/rollup.h"
#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "server/tenants/tenants.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/tier/db_tier.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DAY BDB_MS_DAY
#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */

static char tmpdir[64], datadir[128];
static int64_t fake_now;

static int64_t clock_fn(void *ctx)
{
    (void)ctx;
    return fake_now;
}

static int setup(void **st)
{
    (void)st;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bdb_tierttl_XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    snprintf(datadir, sizeof datadir, "%s/data", tmpdir);
    bdb_log_set_level(BDB_LOG_ERROR);
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    tu_rm_rf(tmpdir);
    return 0;
}

/* the server's hook (server.c tenant_tier_ttl) */
static int64_t hook(void *ctx, const char *tenant, enum bdb_res res, int64_t dflt)
{
    return bdb_tenants_tier_retention(ctx, tenant, (int)res - 1, dflt);
}

static void put(bdb_db *db, const char *tn, int64_t ts)
{
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, "dev", 3, ts, 0);
    bdb_batch_metric(b, "temp", 4, 1.5);
    assert_int_equal(bdb_batch_end(b), 1);
    assert_int_equal(bdb_db_write(db, tn, b), BDB_OK);
    bdb_batch_free(b);
}

static size_t minutes(bdb_db *db, const char *tn)
{
    bdb_rollup r;
    bdb_rollup_init(&r, BDB_MS_MIN);
    const char *m[1] = {"temp"};
    assert_int_equal(bdb_db_tier_read(db, tn, "dev", m, 1, BDB_RES_1M, T0, T0 + 30 * DAY, &r),
                     BDB_OK);
    size_t n = r.n;
    bdb_rollup_free(&r);
    return n;
}

static void test_registry_fields(void **st)
{
    (void)st;
    char err[300], tok[BDB_TOKEN_HEX + 1];
    bdb_tenants *r = NULL;
    assert_int_equal(bdb_tenants_open(tmpdir, &r, err, sizeof err), BDB_OK);
    bdb_quotas q = {0};
    assert_int_equal(bdb_tenants_create(r, "a", &q, 0, 1000, tok), BDB_OK);
    assert_int_equal(bdb_tenants_create(r, "b", &q, 0, 1000, tok), BDB_OK);
    bdb_tenant_patch p = {0};
    p.has_tier_retention[0] = 1;
    p.tier_retention_ms[0] = 2 * DAY;
    p.has_tier_retention[2] = 1;
    p.tier_retention_ms[2] = -1;
    assert_int_equal(bdb_tenants_update(r, "a", &p, NULL), BDB_OK);
    bdb_tenant_patch bad = {0};
    bad.has_tier_retention[1] = 1;
    bad.tier_retention_ms[1] = -5;
    assert_int_equal(bdb_tenants_update(r, "b", &bad, NULL), BDB_ERR_INVALID);
    bdb_tenants_close(r);
    /* reopened from the file */
    assert_int_equal(bdb_tenants_open(tmpdir, &r, err, sizeof err), BDB_OK);
    bdb_tenant_info ti;
    assert_int_equal(bdb_tenants_get(r, "a", &ti), BDB_OK);
    assert_int_equal(ti.tier_retention_ms[0], 2 * DAY);
    assert_int_equal(ti.tier_retention_ms[1], 0);
    assert_int_equal(ti.tier_retention_ms[2], -1);
    assert_int_equal(bdb_tenants_tier_retention(r, "a", 0, 90 * DAY), 2 * DAY);
    assert_int_equal(bdb_tenants_tier_retention(r, "a", 1, 365 * DAY), 365 * DAY);
    assert_int_equal(bdb_tenants_tier_retention(r, "a", 2, 7 * DAY), 0); /* forever */
    assert_int_equal(bdb_tenants_tier_retention(r, "b", 0, 90 * DAY), 90 * DAY);
    assert_int_equal(bdb_tenants_tier_retention(r, "nobody", 0, 90 * DAY), 90 * DAY);
    /* b's line has no tier key: written only when set, so old files read as before */
    char path[200], buf[4096];
    snprintf(path, sizeof path, "%s/tenants", tmpdir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    assert_non_null(strstr(buf, "tier_retention_1m=172800000 tier_retention_1d=-1\n"));
    assert_null(strstr(strstr(buf, "tenant b "), "tier_retention"));
    bdb_tenants_close(r);
}

static void test_engine_drops_per_tenant(void **st)
{
    (void)st;
    char err[300], tok[BDB_TOKEN_HEX + 1];
    bdb_tenants *r = NULL;
    assert_int_equal(bdb_tenants_open(tmpdir, &r, err, sizeof err), BDB_OK);
    bdb_quotas q = {0};
    assert_int_equal(bdb_tenants_create(r, "a", &q, 0, 1000, tok), BDB_OK);
    assert_int_equal(bdb_tenants_create(r, "b", &q, 0, 1000, tok), BDB_OK);
    assert_int_equal(bdb_tenants_create(r, "c", &q, 0, 1000, tok), BDB_OK);
    bdb_tenant_patch p = {0};
    p.has_tier_retention[0] = 1;
    p.tier_retention_ms[0] = 2 * DAY;
    assert_int_equal(bdb_tenants_update(r, "a", &p, NULL), BDB_OK);
    p.tier_retention_ms[0] = -1;
    assert_int_equal(bdb_tenants_update(r, "c", &p, NULL), BDB_OK);

    bdb_db_opts o;
    bdb_db_opts_default(&o);
    o.data_dir = datadir;
    o.background = 0;
    o.sync_mode = BDB_WAL_SYNC_PERIODIC;
    o.clock.now_ms = clock_fn;
    o.retention_ms = 30 * DAY; /* raw data goes before the 1m tier's 90 days */
    fake_now = T0 + 10 * DAY;
    bdb_db *db = NULL;
    assert_int_equal(bdb_db_open(&o, &db), BDB_OK);
    bdb_db_tier_set_retention_hook(db, hook, r);
    const char *tn[3] = {"a", "b", "c"};
    for (int k = 0; k < 3; k++)
        for (int d = 0; d < 10; d++)
            put(db, tn[k], T0 + d * DAY + 5000);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    /* day 10: a's days 0..7 have ended 2 days ago or more. The 1m tier is derived from
     * raw data, and answers within its retention only, before maintenance too */
    assert_int_equal(minutes(db, "a"), 2);
    assert_int_equal(minutes(db, "b"), 10);
    assert_int_equal(minutes(db, "c"), 10);
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    assert_int_equal(minutes(db, "a"), 2);
    assert_int_equal(minutes(db, "b"), 10);
    /* day 12: a's files of days 0..9 have all ended more than 2 days ago */
    fake_now = T0 + 12 * DAY + 1;
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    assert_int_equal(minutes(db, "a"), 0);
    assert_int_equal(minutes(db, "b"), 10);
    assert_int_equal(minutes(db, "c"), 10);
    /* day 95: b's default 90 days has taken days 0..4; c keeps everything. The raw data
     * (30 days) went at this maintenance: its minutes were written to 1m files first */
    fake_now = T0 + 95 * DAY + 1;
    assert_true(bdb_db_retention_cutoff(db, "c") > T0 + 10 * DAY);
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    bdb_db_stats ds;
    bdb_db_get_stats(db, &ds);
    assert_int_equal(ds.blocks, 0); /* no raw data left */
    assert_int_equal(minutes(db, "b"), 5);
    assert_int_equal(minutes(db, "c"), 10);
    assert_int_equal(minutes(db, "a"), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    bdb_tenants_close(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_registry_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_engine_drops_per_tenant, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
