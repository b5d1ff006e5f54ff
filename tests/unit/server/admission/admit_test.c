/* admit: the one admission order against real registry, engine, budgets, device
 * limiter and hot partition detector (admit.h): which check refuses a batch that
 * breaks several limits, that a refusal keeps nothing but the reservation (no device
 * lock, the tenant's tokens given back), that done spends the tokens only of a batch
 * that was written and releases the reservation, and the messages, limits and
 * Retry-After of each verdict. The clock of the rate limiters is injected. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"

#include "bucketdb/bdb.h"
#include "model/batch.h"
#include "server/admission/admit.h"
#include "server/admission/devlimit.h"
#include "server/admission/quota.h"
#include "server/tenants/tenants.h"
#include "storage/embedded/core/db.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T0 1000000 /* the injected monotonic clock, ms */

static bdb_hot_policy hot_pol; /* every tenant's hot policy in these tests */

static void policy(void *ctx, const char *tenant, bdb_hot_policy *out)
{
    (void)ctx;
    (void)tenant;
    *out = hot_pol;
}

static int64_t fixed_clock(void *ctx)
{
    (void)ctx;
    return 1705327230000; /* mid-minute: the hot minute does not roll over */
}

struct fx {
    char dir[64];
    bdb_db *db;
    bdb_tenants *reg;
    bdb_bp *bp;
    bdb_devlimit *dl;
    bdb_hotpart *hot;
    bdb_admit *a;
};

static void fx_open(struct fx *f, uint64_t head_max)
{
    memset(&hot_pol, 0, sizeof hot_pol);
    snprintf(f->dir, sizeof f->dir, "/tmp/bdb-admit-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    bdb_db_opts o;
    bdb_db_opts_default(&o);
    o.data_dir = f->dir;
    o.background = 0;
    assert_int_equal(bdb_db_open(&o, &f->db), BDB_OK);
    char err[256];
    assert_int_equal(bdb_tenants_open(f->dir, &f->reg, err, sizeof err), BDB_OK);
    bdb_bp_limits bl = {1 << 20, 8, 100};
    f->bp = bdb_bp_new(&bl);
    assert_non_null(f->bp);
    assert_int_equal(bdb_devlimit_open(NULL, 60000, &f->dl, err, sizeof err), BDB_OK);
    f->hot = bdb_hotpart_new(&(bdb_hotpart_opts){{fixed_clock, NULL}, NULL, NULL});
    assert_non_null(f->hot);
    bdb_admit_env e = {f->reg, f->db, f->bp, f->dl, f->hot, policy, NULL, head_max, 0};
    f->a = bdb_admit_new(&e);
    assert_non_null(f->a);
}

static void fx_close(struct fx *f)
{
    bdb_admit_free(f->a);
    bdb_hotpart_free(f->hot);
    bdb_devlimit_free(f->dl);
    bdb_bp_free(f->bp);
    bdb_tenants_close(f->reg);
    assert_int_equal(bdb_db_close(f->db), BDB_OK);
    tu_rm_rf(f->dir);
}

static void tenant(struct fx *f, const char *name, uint64_t rate, uint64_t burst, uint64_t devices,
                   uint64_t storage)
{
    char token[BDB_TOKEN_HEX + 1];
    bdb_quotas q = {rate, burst, devices, storage};
    assert_int_equal(bdb_tenants_create(f->reg, name, &q, 0, 1, token), BDB_OK);
}

/* n reports of one metric each for device dev. */
static void reports(bdb_batch *b, const char *dev, int n)
{
    static int64_t seq;
    for (int i = 0; i < n; i++) {
        bdb_batch_begin(b, dev, strlen(dev), 1705327200000 + seq++, 0);
        bdb_batch_metric(b, "v", 1, 1.0);
        assert_int_equal(bdb_batch_end(b), 1);
    }
}

/* Admits b for tenant and, when write is set, writes it: the verdict (r->msg is a
 * copy, valid until the next call). */
static enum bdb_admit_verdict run(struct fx *f, const char *tn, const bdb_batch *b, int64_t now,
                                  int write, bdb_admit_result *r)
{
    bdb_admit_ticket t = BDB_ADMIT_TICKET_INIT;
    assert_int_equal(bdb_admit_reserve(f->a, &t, tn, 100), BDB_BP_NONE);
    enum bdb_admit_verdict v = bdb_admit_batch(f->a, &t, tn, b, "request", now, r);
    int rc = BDB_ERR_INVALID;
    if (v == BDB_ADMIT_OK && write)
        rc = bdb_db_write(f->db, tn, r->batch);
    static char msg[1024]; /* the ticket's message goes with done */
    snprintf(msg, sizeof msg, "%s", r->msg ? r->msg : "");
    r->msg = msg;
    bdb_admit_done(f->a, &t, rc);
    return v;
}

/* A batch over the device quota and over a device's max_rps is refused for the device
 * quota, which takes nothing: the device's and the tenant's tokens stay whole. */
static void test_device_quota_before_rates(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, 0);
    tenant(&f, "acme", 10, 4, 1, 0);
    assert_int_equal(bdb_devlimit_set_profile(f.dl, "acme", "d2", 2, 0), BDB_OK);
    bdb_batch *b = bdb_batch_new();
    reports(b, "d1", 1);
    bdb_admit_result r;
    assert_int_equal(run(&f, "acme", b, T0, 1, &r), BDB_ADMIT_OK); /* acme has d1 now */
    bdb_batch_reset(b);
    reports(b, "d2", 2); /* a second device, and d2's whole burst */
    bdb_admit_ticket t = BDB_ADMIT_TICKET_INIT;
    assert_int_equal(bdb_admit_batch(f.a, &t, "acme", b, "message", T0, &r), BDB_ADMIT_DEVICES);
    assert_null(t.devq);
    assert_int_equal(t.cost, 0);
    assert_string_equal(bdb_admit_limit_name(r.verdict), "max_devices");
    assert_int_equal(r.limit, 1);
    assert_int_equal(r.usage, 1);
    assert_int_equal(r.value, 1);
    assert_int_equal(r.retry_after_s, BDB_QUOTA_DEVICES_RETRY_S);
    assert_non_null(strstr(r.msg, "tenant 'acme' may have at most 1 devices; it has 1 and this "
                                  "message would add 1"));
    bdb_admit_done(f.a, &t, BDB_ERR_INVALID);
    /* nothing taken: d2 still has its burst of 2 and acme its 3 samples left */
    int64_t retry;
    assert_int_equal(bdb_devlimit_take(f.dl, bdb_devlimit_key("acme", "d2", 2), 2, 2, T0, &retry),
                     1);
    uint64_t lim;
    assert_int_equal(bdb_tenants_admit(f.reg, "acme", 3, T0, &retry, &lim), 1);
    bdb_tenant_info ti;
    assert_int_equal(bdb_tenants_get(f.reg, "acme", &ti), BDB_OK);
    assert_int_equal(ti.rejections[BDB_LIMIT_DEVICES], 1);
    assert_int_equal(bdb_admit_count(f.a, BDB_ADMIT_DEVICES), 1);
    assert_int_equal(bdb_admit_count(f.a, BDB_ADMIT_DEVICE_RATE), 0);
    bdb_batch_free(b);
    fx_close(&f);
}

/* Storage comes before the device quota; a tenant without quotas passes everything. */
static void test_storage_first(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, 0);
    tenant(&f, "full", 0, 0, 1, 2 * BDB_USAGE_SAMPLE_BYTES);
    bdb_batch *b = bdb_batch_new();
    reports(b, "d1", 2);
    bdb_admit_result r;
    assert_int_equal(run(&f, "full", b, T0, 1, &r), BDB_ADMIT_OK); /* starts the tracker */
    assert_int_equal(bdb_db_usage_refresh(f.db), BDB_OK);
    bdb_batch_reset(b);
    reports(b, "d2", 1); /* over max_devices too */
    assert_int_equal(run(&f, "full", b, T0, 0, &r), BDB_ADMIT_STORAGE);
    assert_int_equal(r.limit, 2 * BDB_USAGE_SAMPLE_BYTES);
    assert_int_equal(r.usage, 2 * BDB_USAGE_SAMPLE_BYTES);
    assert_int_equal(r.retry_after_s, BDB_QUOTA_STORAGE_RETRY_S);
    assert_string_equal(bdb_admit_limit_name(r.verdict), "storage_bytes");
    assert_int_equal(run(&f, "free", b, T0, 0, &r), BDB_ADMIT_OK);
    bdb_batch_free(b);
    fx_close(&f);
}

/* The tenant's rate: a refusal says when to retry and takes nothing; done gives the
 * tokens back when the write failed and keeps them when it was written; a batch over
 * the burst can never pass. */
static void test_rate_refund_and_burst(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, 0);
    tenant(&f, "acme", 2, 4, 0, 0);
    bdb_batch *b = bdb_batch_new();
    reports(b, "d1", 4);
    bdb_admit_result r;
    assert_int_equal(run(&f, "acme", b, T0, 0, &r), BDB_ADMIT_OK); /* not written: refunded */
    assert_int_equal(run(&f, "acme", b, T0, 1, &r), BDB_ADMIT_OK); /* written: spent */
    assert_int_equal(run(&f, "acme", b, T0, 0, &r), BDB_ADMIT_RATE);
    assert_int_equal(r.retry_after_s, 2);
    assert_int_equal(r.limit, 2);
    assert_int_equal(r.value, 4);
    assert_non_null(strstr(r.msg, "may write 2 samples per second; this request of 4 samples "
                                  "can be accepted in 2 s"));
    assert_int_equal(run(&f, "acme", b, T0 + 2000, 1, &r), BDB_ADMIT_OK);
    reports(b, "d1", 1); /* 5 samples > burst 4 */
    assert_int_equal(run(&f, "acme", b, T0 + 60000, 0, &r), BDB_ADMIT_BURST);
    assert_int_equal(r.retry_after_s, -1);
    assert_int_equal(r.limit, 4);
    assert_string_equal(bdb_admit_limit_name(r.verdict), "burst");
    assert_non_null(strstr(r.msg, "request too large for the quota: tenant 'acme' has a burst "
                                  "of 4 samples and this request holds 5; split it into "
                                  "smaller requests"));
    bdb_batch_free(b);
    fx_close(&f);
}

/* A device over max_rps after the tenant's rate passed: the tenant's tokens are given
 * back; the message names the device and its limit. */
static void test_device_rate_refunds_tenant_rate(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, 0);
    tenant(&f, "acme", 1, 3, 0, 0);
    assert_int_equal(bdb_devlimit_set_profile(f.dl, "acme", "lim", 2, 0), BDB_OK);
    bdb_batch *b = bdb_batch_new();
    reports(b, "lim", 3);
    bdb_admit_result r;
    assert_int_equal(run(&f, "acme", b, T0, 0, &r), BDB_ADMIT_DEVICE_RATE);
    assert_int_equal(r.limit, 2);
    assert_int_equal(r.value, 3);
    assert_int_equal(r.retry_after_s, 1);
    assert_int_equal(r.device_len, 3);
    assert_memory_equal(r.device, "lim", 3);
    assert_string_equal(bdb_admit_limit_name(r.verdict), "max_rps");
    bdb_batch_reset(b);
    reports(b, "other", 3); /* the whole burst of 3: nothing of it was kept by the refusal */
    assert_int_equal(run(&f, "acme", b, T0, 1, &r), BDB_ADMIT_OK);
    assert_int_equal(bdb_admit_count(f.a, BDB_ADMIT_DEVICE_RATE), 1);
    bdb_batch_free(b);
    fx_close(&f);
}

/* Hot partitions come last: the ratelimit policy refuses a hot device over its minute
 * (the device lock and the tenant's tokens given back), the sample policy hands out
 * the kept reports, which done frees. */
static void test_hot_policies(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, 0);
    tenant(&f, "acme", 1000, 0, 100, 0);
    hot_pol = (bdb_hot_policy){5, BDB_HOT_RATELIMIT, 0, 6, 0};
    bdb_batch *b = bdb_batch_new();
    reports(b, "h", 5);
    bdb_admit_result r;
    assert_int_equal(run(&f, "acme", b, T0, 1, &r), BDB_ADMIT_OK); /* at the threshold */
    bdb_batch_reset(b);
    reports(b, "h2", 1); /* a new device: the device lock is taken */
    reports(b, "h", 8);  /* hot now; 8 > its 6 a minute */
    bdb_admit_ticket t = BDB_ADMIT_TICKET_INIT;
    assert_int_equal(bdb_admit_batch(f.a, &t, "acme", b, "request", T0, &r), BDB_ADMIT_HOT);
    assert_null(t.devq);
    assert_int_equal(t.cost, 0);
    assert_int_equal(r.limit, 6);
    assert_int_equal(r.value, 8);
    assert_true(r.retry_after_s >= 1 && r.retry_after_s <= 60);
    assert_memory_equal(r.device, "h", 1);
    assert_string_equal(bdb_admit_limit_name(r.verdict), "hot_rate_limit");
    assert_non_null(strstr(r.msg, "hot partition rate limit: device 'h' of tenant 'acme' is hot "
                                  "and may send 6 reports per minute"));
    bdb_admit_done(f.a, &t, BDB_ERR_INVALID);
    /* the sample policy keeps part of a hot device's reports */
    hot_pol = (bdb_hot_policy){5, BDB_HOT_SAMPLE, 0, 0, 0.5};
    bdb_batch_reset(b);
    reports(b, "s", 10);
    memset(&t, 0, sizeof t);
    assert_int_equal(bdb_admit_batch(f.a, &t, "acme", b, "request", T0, &r), BDB_ADMIT_OK);
    assert_ptr_not_equal(r.batch, b);
    assert_ptr_equal(r.batch, t.kept);
    size_t kept = bdb_batch_samples(r.batch);
    assert_true(kept < 10 && kept >= 5);
    assert_int_equal(bdb_db_write(f.db, "acme", r.batch), BDB_OK);
    bdb_admit_done(f.a, &t, BDB_OK);
    assert_null(t.kept);
    bdb_batch_free(b);
    fx_close(&f);
}

/* The device lock is held from an admission that adds a device until done, and a
 * caller that asks again after a refusal holds nothing twice. */
static void test_device_lock_until_done(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, 0);
    tenant(&f, "acme", 0, 0, 5, 0);
    bdb_batch *b = bdb_batch_new();
    reports(b, "n1", 1);
    bdb_admit_ticket t = BDB_ADMIT_TICKET_INIT;
    bdb_admit_result r;
    assert_int_equal(bdb_admit_batch(f.a, &t, "acme", b, "request", T0, &r), BDB_ADMIT_OK);
    assert_non_null(t.devq);
    assert_int_equal(pthread_mutex_trylock(t.devq), EBUSY);
    pthread_mutex_t *held = t.devq;
    bdb_admit_done(f.a, &t, BDB_ERR_INVALID);
    assert_null(t.devq);
    assert_int_equal(pthread_mutex_trylock(held), 0);
    pthread_mutex_unlock(held);
    /* a device that exists adds nothing: no lock */
    assert_int_equal(bdb_db_write(f.db, "acme", b), BDB_OK);
    memset(&t, 0, sizeof t);
    assert_int_equal(bdb_admit_batch(f.a, &t, "acme", b, "request", T0, &r), BDB_ADMIT_OK);
    assert_null(t.devq);
    bdb_admit_done(f.a, &t, BDB_OK);
    bdb_batch_free(b);
    fx_close(&f);
}

/* The reservation: reserve takes (1 + BDB_BP_PARSE_FACTOR) x bytes and a write slot,
 * done gives them back; with the head over its bound both steps refuse (after the
 * guard's wait). */
static void test_reserve_and_head(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, 1); /* a head of 1 byte: any data puts it over */
    bdb_admit_ticket t = BDB_ADMIT_TICKET_INIT;
    assert_int_equal(bdb_admit_reserve(f.a, &t, "acme", 1000), BDB_BP_NONE);
    bdb_bp_stats st;
    bdb_bp_get_stats(f.bp, &st);
    assert_int_equal(st.bytes, 1000 * (1 + BDB_BP_PARSE_FACTOR));
    assert_int_equal(st.writes, 1);
    bdb_batch *b = bdb_batch_new();
    reports(b, "d", 3);
    assert_int_equal(bdb_db_write(f.db, "acme", b), BDB_OK);
    bdb_admit_result r;
    assert_int_equal(bdb_admit_batch(f.a, &t, "acme", b, "message", T0, &r), BDB_ADMIT_HEAD);
    assert_string_equal(bdb_admit_limit_name(r.verdict), "head_memory");
    assert_int_equal(r.retry_after_s, BDB_BP_RETRY_HEAD_S);
    assert_non_null(strstr(r.msg, "nothing of this message was written"));
    bdb_admit_done(f.a, &t, BDB_ERR_INVALID);
    bdb_bp_get_stats(f.bp, &st);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(st.writes, 0);
    memset(&t, 0, sizeof t);
    assert_int_equal(bdb_admit_reserve(f.a, &t, "acme", 10), BDB_BP_HEAD_MEMORY);
    bdb_admit_done(f.a, &t, BDB_ERR_INVALID); /* nothing held: harmless */
    bdb_bp_get_stats(f.bp, &st);
    assert_int_equal(st.writes, 0);
    assert_int_equal(st.events[BDB_BP_HEAD_MEMORY], 2);
    bdb_batch_free(b);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_quota_before_rates),
        cmocka_unit_test(test_storage_first),
        cmocka_unit_test(test_rate_refund_and_burst),
        cmocka_unit_test(test_device_rate_refunds_tenant_rate),
        cmocka_unit_test(test_hot_policies),
        cmocka_unit_test(test_device_lock_until_done),
        cmocka_unit_test(test_reserve_and_head),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
