/* quota: the token bucket with an injected clock (starts full, burst, refill, caps,
 * clock going back, huge gaps), Retry-After exactness (after Retry-After seconds the
 * same request is admitted, one second earlier it is not), requests larger than the
 * burst, refunds, the cost of a batch, the device limit and the refusal body. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"

#include "bucketdb/bdb.h"
#include "model/batch.h"
#include "server/admission/quota.h"
#include "server/tenants/tenants.h"
#include "storage/embedded/core/db.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_default_burst(void **state)
{
    (void)state;
    assert_int_equal(bdb_quota_burst(100, 0), 100 * BDB_QUOTA_DEFAULT_BURST_SECONDS);
    assert_int_equal(bdb_quota_burst(100, 7), 7);
    assert_int_equal(bdb_quota_burst(0, 0), 0);
}

static void test_starts_full_then_refuses(void **state)
{
    (void)state;
    bdb_tbucket tb = {0};
    int64_t ra = -5;
    /* rate 10/s, burst 50: a new bucket holds the whole burst */
    assert_int_equal(bdb_tbucket_take(&tb, 10, 50, 30, 1000, &ra), 1);
    assert_int_equal(bdb_tbucket_take(&tb, 10, 50, 20, 1000, &ra), 1);
    assert_int_equal(ra, -5); /* untouched when admitted */
    assert_int_equal(bdb_tbucket_level(&tb, 10, 50, 1000), 0);
    /* empty: one sample needs 100 ms, so Retry-After is the whole second above it */
    assert_int_equal(bdb_tbucket_take(&tb, 10, 50, 1, 1000, &ra), 0);
    assert_int_equal(ra, 1);
    assert_int_equal(bdb_tbucket_take(&tb, 10, 50, 25, 1000, &ra), 0);
    assert_int_equal(ra, 3); /* 2.5 s rounded up */
    /* a refusal takes nothing */
    assert_int_equal(bdb_tbucket_level(&tb, 10, 50, 1000), 0);
}

static void test_refill_and_cap(void **state)
{
    (void)state;
    bdb_tbucket tb = {0};
    int64_t ra;
    assert_int_equal(bdb_tbucket_take(&tb, 10, 50, 50, 0, &ra), 1);
    assert_int_equal(bdb_tbucket_level(&tb, 10, 50, 99), 0);  /* 0.99 samples */
    assert_int_equal(bdb_tbucket_level(&tb, 10, 50, 100), 1); /* 100 ms = 1 sample */
    assert_int_equal(bdb_tbucket_level(&tb, 10, 50, 1000), 10);
    assert_int_equal(bdb_tbucket_take(&tb, 10, 50, 10, 1000, &ra), 1);
    assert_int_equal(bdb_tbucket_take(&tb, 10, 50, 1, 1000, &ra), 0);
    /* never above the burst, however long the pause */
    assert_int_equal(bdb_tbucket_level(&tb, 10, 50, 1000 + 3600 * 1000), 50);
    assert_int_equal(bdb_tbucket_level(&tb, 10, 50, INT64_MAX / 2), 50);
    /* the burst is usable again, and not more */
    assert_int_equal(bdb_tbucket_take(&tb, 10, 50, 51, INT64_MAX / 2, &ra), -1);
    assert_int_equal(bdb_tbucket_take(&tb, 10, 50, 50, INT64_MAX / 2, &ra), 1);
}

static void test_clock_going_back(void **state)
{
    (void)state;
    bdb_tbucket tb = {0};
    int64_t ra;
    assert_int_equal(bdb_tbucket_take(&tb, 1, 5, 5, 10000, &ra), 1);
    /* an earlier time adds nothing and does not break the next refill */
    assert_int_equal(bdb_tbucket_take(&tb, 1, 5, 1, 5000, &ra), 0);
    assert_int_equal(bdb_tbucket_level(&tb, 1, 5, 10999), 0);
    assert_int_equal(bdb_tbucket_level(&tb, 1, 5, 11000), 1);
}

static void test_cost_above_burst(void **state)
{
    (void)state;
    bdb_tbucket tb = {0};
    int64_t ra = 77;
    assert_int_equal(bdb_tbucket_take(&tb, 100, 1000, 1001, 0, &ra), -1);
    assert_int_equal(ra, 77);
    assert_int_equal(bdb_tbucket_level(&tb, 100, 1000, 0), 1000); /* nothing taken */
    assert_int_equal(bdb_tbucket_take(&tb, 100, 1000, 1000, 0, &ra), 1);
}

static void test_refund(void **state)
{
    (void)state;
    bdb_tbucket tb = {0};
    int64_t ra;
    assert_int_equal(bdb_tbucket_take(&tb, 10, 100, 60, 0, &ra), 1);
    bdb_tbucket_refund(&tb, 100, 60);
    assert_int_equal(bdb_tbucket_level(&tb, 10, 100, 0), 100);
    bdb_tbucket_refund(&tb, 100, 60); /* capped */
    assert_int_equal(bdb_tbucket_level(&tb, 10, 100, 0), 100);
}

static void test_burst_lowered(void **state)
{
    (void)state;
    bdb_tbucket tb = {0};
    int64_t ra;
    assert_int_equal(bdb_tbucket_level(&tb, 10, 1000, 0), 1000);
    /* the operator lowers the burst: the level follows at once */
    assert_int_equal(bdb_tbucket_level(&tb, 10, 100, 0), 100);
    assert_int_equal(bdb_tbucket_take(&tb, 10, 100, 100, 0, &ra), 1);
    assert_int_equal(bdb_tbucket_take(&tb, 10, 100, 1, 0, &ra), 0);
}

static void test_large_rates(void **state)
{
    (void)state;
    bdb_tbucket tb = {0};
    int64_t ra;
    uint64_t big = BDB_QUOTA_MAX_RATE;
    uint64_t burst = bdb_quota_burst(big, 0); /* 10 x the largest rate */
    assert_int_equal(bdb_tbucket_take(&tb, big, burst, burst, 0, &ra), 1);
    assert_int_equal(bdb_tbucket_take(&tb, big, burst, big, 0, &ra), 0);
    assert_int_equal(ra, 1);
    assert_int_equal(bdb_tbucket_level(&tb, big, burst, 1000), big);
    assert_int_equal(bdb_tbucket_level(&tb, big, burst, INT64_MAX / 2), burst);
}

/* Retry-After is exact: waiting that many seconds admits the same request, waiting
 * one second less does not (when it is more than one). Random rates, bursts, costs
 * and levels from a fixed-seed generator. */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void test_retry_after_exact(void **state)
{
    (void)state;
    for (int i = 0; i < 20000; i++) {
        uint64_t rate = 1 + next_rand() % 5000;
        uint64_t burst = 1 + next_rand() % 20000;
        uint64_t first = next_rand() % (burst + 1);
        uint64_t cost = 1 + next_rand() % burst;
        int64_t t0 = (int64_t)(next_rand() % 1000000);
        int64_t gap = (int64_t)(next_rand() % 3000);
        bdb_tbucket tb = {0};
        int64_t ra = 0;
        assert_int_equal(bdb_tbucket_take(&tb, rate, burst, first, t0, &ra), 1);
        bdb_tbucket saved;
        int v = bdb_tbucket_take(&tb, rate, burst, cost, t0 + gap, &ra);
        if (v == 1)
            continue;
        assert_int_equal(v, 0);
        assert_true(ra >= 1);
        saved = tb;
        bdb_tbucket later = saved;
        int64_t ra2;
        assert_int_equal(bdb_tbucket_take(&later, rate, burst, cost, t0 + gap + ra * 1000, &ra2),
                         1);
        if (ra > 1) {
            bdb_tbucket early = saved;
            assert_int_equal(
                bdb_tbucket_take(&early, rate, burst, cost, t0 + gap + (ra - 1) * 1000, &ra2), 0);
        }
    }
}

static void test_cost_of_batch(void **state)
{
    (void)state;
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, "d1", 2, 1000, 1);
    bdb_batch_metric(b, "a", 1, 1.0);
    bdb_batch_metric(b, "b", 1, 2.0);
    bdb_batch_metric(b, "c", 1, 3.0);
    assert_int_equal(bdb_batch_end(b), 1);
    bdb_batch_begin(b, "d2", 2, 1000, 2);
    bdb_batch_state(b, "on", 2); /* a state alone costs one */
    assert_int_equal(bdb_batch_end(b), 1);
    bdb_batch_begin(b, "d3", 2, 1000, 3);
    bdb_batch_metric(b, "a", 1, 1.0);
    bdb_batch_state(b, "off", 3); /* a state with metrics costs nothing more */
    assert_int_equal(bdb_batch_end(b), 1);
    assert_int_equal(bdb_quota_cost(b), 5);
    bdb_batch_reset(b);
    assert_int_equal(bdb_quota_cost(b), 0);
    bdb_batch_free(b);
}

static void test_devices_ok(void **state)
{
    (void)state;
    assert_true(bdb_quota_devices_ok(0, 1000000, 0)); /* no limit */
    assert_true(bdb_quota_devices_ok(3, 2, 5));
    assert_false(bdb_quota_devices_ok(3, 3, 5));
    assert_true(bdb_quota_devices_ok(5, 0, 5)); /* existing devices keep writing */
    assert_true(bdb_quota_devices_ok(9, 0, 5)); /* even above a lowered limit */
    assert_false(bdb_quota_devices_ok(9, 1, 5));
    assert_false(bdb_quota_devices_ok(0, UINT64_MAX, 5)); /* no overflow */
}

/* One reading, each at a new time: rewrites of one time are one stored sample, and the
 * head may collapse them before the flush. */
static void add(bdb_batch *b, const char *dev)
{
    static int64_t n;
    bdb_batch_begin(b, dev, strlen(dev), 1705327200000 + 1000 * n++, 0);
    bdb_batch_metric(b, "v", 1, 1.0);
    assert_int_equal(bdb_batch_end(b), 1);
}

/* What the device quota counts: the tenant's devices, and the distinct devices of a
 * request it does not have yet (db_usage.c). */
static void test_tenant_usage(void **state)
{
    (void)state;
    char dir[64] = "/tmp/bdb-quota-XXXXXX";
    assert_non_null(mkdtemp(dir));
    bdb_db_opts o;
    bdb_db_opts_default(&o);
    o.data_dir = dir;
    o.background = 0;
    bdb_db *db;
    assert_int_equal(bdb_db_open(&o, &db), BDB_OK);
    uint64_t have = 99, fresh = 99;
    assert_int_equal(bdb_db_tenant_usage(db, "acme", NULL, &have, &fresh), BDB_OK);
    assert_int_equal(have, 0);
    assert_int_equal(fresh, 0);
    bdb_batch *b = bdb_batch_new();
    add(b, "d1");
    add(b, "d2");
    add(b, "d1");
    /* nothing stored yet: every distinct device is new, once */
    assert_int_equal(bdb_db_tenant_usage(db, "acme", b, &have, &fresh), BDB_OK);
    assert_int_equal(have, 0);
    assert_int_equal(fresh, 2);
    assert_int_equal(bdb_db_write(db, "acme", b), BDB_OK);
    bdb_batch_reset(b);
    add(b, "d1");
    add(b, "d3");
    add(b, "d3");
    add(b, "d4");
    assert_int_equal(bdb_db_tenant_usage(db, "acme", b, &have, &fresh), BDB_OK);
    assert_int_equal(have, 2);
    assert_int_equal(fresh, 2);
    /* another tenant's devices are its own */
    assert_int_equal(bdb_db_tenant_usage(db, "other", b, &have, &fresh), BDB_OK);
    assert_int_equal(have, 0);
    assert_int_equal(fresh, 3);
    assert_false(bdb_quota_devices_ok(2, 2, 3));
    assert_true(bdb_quota_devices_ok(2, 2, 4));
    assert_int_equal(bdb_db_tenant_usage(db, "", b, &have, &fresh), BDB_ERR_INVALID);
    bdb_batch_free(b);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    tu_rm_rf(dir);
}

static void test_error_json(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_quota_error_json(&b, "over \"quota\"", "acme", "writes_per_second", 100, 7);
    bdb_buf_putc(&b, 0);
    assert_string_equal((char *)b.data,
                        "{\"error\":\"over \\\"quota\\\"\",\"tenant\":\"acme\",\"limit\":"
                        "\"writes_per_second\",\"value\":100,\"retry_after\":7}\n");
    bdb_buf_reset(&b);
    bdb_quota_error_json(&b, "big", "t", "burst", 5, -1);
    bdb_buf_putc(&b, 0);
    assert_string_equal((char *)b.data,
                        "{\"error\":\"big\",\"tenant\":\"t\",\"limit\":\"burst\",\"value\":5}\n");
    bdb_buf_free(&b);
}

/* The storage quota against a real registry and engine: unregistered and unlimited
 * tenants pass, a tenant passes below its limit and is refused at it (counted), the
 * refusal body names tenant, limit, value and usage. */
static void test_storage_admit(void **state)
{
    (void)state;
    char dir[64] = "/tmp/bdb-quota-XXXXXX";
    assert_non_null(mkdtemp(dir));
    bdb_db_opts o;
    bdb_db_opts_default(&o);
    o.data_dir = dir;
    o.background = 0;
    bdb_db *db;
    assert_int_equal(bdb_db_open(&o, &db), BDB_OK);
    bdb_tenants *reg;
    char err[256], token[BDB_TOKEN_HEX + 1];
    assert_int_equal(bdb_tenants_open(dir, &reg, err, sizeof err), BDB_OK);
    bdb_quotas q = {0, 0, 0, 10 * BDB_USAGE_SAMPLE_BYTES};
    assert_int_equal(bdb_tenants_create(reg, "acme", &q, 0, 1, token), BDB_OK);
    bdb_quotas none = {0, 0, 0, 0};
    assert_int_equal(bdb_tenants_create(reg, "free", &none, 0, 1, token), BDB_OK);
    bdb_usage_opts uo = {0, 1};
    uint64_t limit = 0, usage = 0;
    /* not measured yet: passes */
    assert_int_equal(bdb_quota_storage_admit(reg, db, &uo, "acme", &limit, &usage), 1);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < 9; i++)
        add(b, "d1");
    assert_int_equal(bdb_db_write(db, "acme", b), BDB_OK);
    bdb_quota_storage_note(db, "acme", 9);
    assert_int_equal(bdb_quota_storage_admit(reg, db, &uo, "acme", &limit, &usage), 1);
    bdb_batch_reset(b);
    add(b, "d1");
    assert_int_equal(bdb_db_write(db, "acme", b), BDB_OK);
    bdb_quota_storage_note(db, "acme", 1);
    assert_int_equal(bdb_quota_storage_admit(reg, db, &uo, "acme", &limit, &usage), 0);
    assert_int_equal(limit, 10 * BDB_USAGE_SAMPLE_BYTES);
    assert_int_equal(usage, 10 * BDB_USAGE_SAMPLE_BYTES);
    /* the same after a measurement; other tenants are not affected */
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    assert_int_equal(bdb_quota_storage_admit(reg, db, &uo, "acme", &limit, &usage), 0);
    assert_int_equal(bdb_db_write(db, "free", b), BDB_OK);
    bdb_quota_storage_note(db, "free", 1000);
    assert_int_equal(bdb_quota_storage_admit(reg, db, &uo, "free", &limit, &usage), 1);
    assert_int_equal(bdb_quota_storage_admit(reg, db, &uo, "unregistered", &limit, &usage), 1);
    bdb_tenant_info ti;
    assert_int_equal(bdb_tenants_get(reg, "acme", &ti), BDB_OK);
    assert_int_equal(ti.rejections[BDB_LIMIT_STORAGE], 2);
    assert_string_equal(bdb_quota_limit_name(BDB_LIMIT_STORAGE), "storage_bytes");
    bdb_buf out;
    bdb_buf_init(&out);
    char msg[512];
    bdb_quota_storage_error(&out, msg, sizeof msg, "acme", 160, 170);
    bdb_buf_putc(&out, 0);
    assert_non_null(strstr(msg, "tenant 'acme' may store 160 bytes"));
    assert_non_null(strstr((char *)out.data, "\"tenant\":\"acme\",\"limit\":\"storage_bytes\","
                                             "\"value\":160,\"retry_after\":300,\"usage\":170}\n"));
    bdb_buf_free(&out);
    bdb_batch_free(b);
    bdb_tenants_close(reg);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    tu_rm_rf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_burst),     cmocka_unit_test(test_starts_full_then_refuses),
        cmocka_unit_test(test_refill_and_cap),    cmocka_unit_test(test_clock_going_back),
        cmocka_unit_test(test_cost_above_burst),  cmocka_unit_test(test_refund),
        cmocka_unit_test(test_burst_lowered),     cmocka_unit_test(test_large_rates),
        cmocka_unit_test(test_retry_after_exact), cmocka_unit_test(test_cost_of_batch),
        cmocka_unit_test(test_devices_ok),        cmocka_unit_test(test_tenant_usage),
        cmocka_unit_test(test_error_json),        cmocka_unit_test(test_storage_admit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
