/* admit: the admission order of admit.h over the checks of the sibling modules. */
#include "server/admission/admit.h"

#include "bucketdb/bdb.h"
#include "common/map.h"
#include "common/timeutil.h"
#include "server/admission/devlimit.h"
#include "server/admission/quota.h"
#include "server/tenants/tenants.h"
#include "storage/embedded/core/db.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Stripes of the device lock: writes of tenants that share one wait for each other
 * only while a write adds devices under a device quota. */
#define DEVQ_STRIPES 16

struct bdb_admit {
    bdb_admit_env env;
    pthread_mutex_t devq[DEVQ_STRIPES];
    _Atomic uint64_t counts[BDB_ADMIT_N];
};

const char *bdb_admit_limit_name(enum bdb_admit_verdict v)
{
    static const char *const names[BDB_ADMIT_N] = {
        "",      "head_memory", "storage_bytes", "max_devices", "writes_per_second",
        "burst", "max_rps",     "hot_rate_limit"};
    return (unsigned)v < BDB_ADMIT_N ? names[v] : "";
}

bdb_admit *bdb_admit_new(const bdb_admit_env *env)
{
    bdb_admit *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->env = *env;
    for (size_t i = 0; i < DEVQ_STRIPES; i++)
        pthread_mutex_init(&a->devq[i], NULL);
    return a;
}

void bdb_admit_free(bdb_admit *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < DEVQ_STRIPES; i++)
        pthread_mutex_destroy(&a->devq[i]);
    free(a);
}

uint64_t bdb_admit_count(const bdb_admit *a, enum bdb_admit_verdict v)
{
    return (unsigned)v < BDB_ADMIT_N ? atomic_load(&a->counts[v]) : 0;
}

int bdb_admit_head_wait(bdb_admit *a)
{
    int64_t t0 = bdb_monotonic_ms();
    for (;;) {
        int64_t now = bdb_monotonic_ms();
        if (!bdb_bp_head_check(a->env.bp, bdb_db_head_bytes(a->env.db), a->env.head_max_bytes, 0,
                               now))
            return 0;
        if (now - t0 >= BDB_BP_HEAD_WAIT_MS) {
            bdb_bp_count(a->env.bp, BDB_BP_HEAD_MEMORY, now);
            return -1;
        }
        /* The background thread is flushing (a writer signals it whenever the head is
         * over its limit); look again shortly. */
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

enum bdb_bp_reason bdb_admit_reserve(bdb_admit *a, bdb_admit_ticket *t, const char *tenant,
                                     uint64_t bytes)
{
    if (bdb_admit_head_wait(a) != 0)
        return BDB_BP_HEAD_MEMORY;
    return bdb_bp_admit(a->env.bp, &t->bp, tenant, bytes * (1 + BDB_BP_PARSE_FACTOR), 1,
                        bdb_monotonic_ms());
}

/* ------------------------------------------------------------ device quota */

static pthread_mutex_t *devq_lock_of(bdb_admit *a, const char *tenant)
{
    return &a->devq[bdb_hash(tenant, strlen(tenant)) % DEVQ_STRIPES];
}

int bdb_admit_devices(bdb_admit *a, const char *tenant, const bdb_batch *b, pthread_mutex_t **held,
                      uint64_t *max, uint64_t *have, uint64_t *fresh)
{
    *held = NULL;
    *max = *have = *fresh = 0;
    bdb_tenant_info ti;
    if (bdb_tenants_get(a->env.tenants, tenant, &ti) != BDB_OK || !ti.quotas.max_devices)
        return 0;
    *max = ti.quotas.max_devices;
    if (bdb_db_tenant_usage(a->env.db, tenant, b, have, fresh) != BDB_OK || *fresh == 0)
        return 0; /* adds no device: nothing to serialise */
    /* Check again under the tenant's lock, held until the write is done, so that two
     * writes cannot both take the last free device. */
    pthread_mutex_t *mu = devq_lock_of(a, tenant);
    pthread_mutex_lock(mu);
    if (bdb_db_tenant_usage(a->env.db, tenant, b, have, fresh) == BDB_OK &&
        !bdb_quota_devices_ok(*have, *fresh, *max)) {
        pthread_mutex_unlock(mu);
        bdb_tenants_count_rejection(a->env.tenants, tenant, BDB_LIMIT_DEVICES);
        return -1;
    }
    *held = mu;
    return 0;
}

void bdb_admit_devices_msg(bdb_buf *out, const char *tenant, uint64_t max, uint64_t have,
                           uint64_t fresh, const char *noun)
{
    char tname[BDB_TENANT_NAME_MAX + 1];
    bdb_buf_printf(out,
                   "quota exceeded: tenant '%s' may have at most %llu devices; it has %llu and "
                   "this %s would add %llu; nothing of it was written",
                   bdb_tenant_key_name(tenant, tname), (unsigned long long)max,
                   (unsigned long long)have, noun, (unsigned long long)fresh);
}

void bdb_admit_devices_unlock(pthread_mutex_t *held)
{
    if (held)
        pthread_mutex_unlock(held);
}

/* ------------------------------------------------------------ one batch */

/* Gives back what steps 5-6 took, for a refusal after them. */
static void undo(bdb_admit *a, bdb_admit_ticket *t)
{
    if (t->cost)
        bdb_tenants_refund(a->env.tenants, t->tenant, t->cost);
    t->cost = 0;
    bdb_admit_devices_unlock(t->devq);
    t->devq = NULL;
}

static enum bdb_admit_verdict refuse(bdb_admit *a, bdb_admit_ticket *t, bdb_admit_result *r,
                                     enum bdb_admit_verdict v)
{
    undo(a, t);
    atomic_fetch_add(&a->counts[v], 1);
    bdb_buf_putc(&t->msg, '\0');
    r->msg = (const char *)t->msg.data;
    r->verdict = v;
    return v;
}

enum bdb_admit_verdict bdb_admit_batch(bdb_admit *a, bdb_admit_ticket *t, const char *tenant,
                                       const bdb_batch *b, const char *noun, int64_t now_ms,
                                       bdb_admit_result *r)
{
    memset(r, 0, sizeof *r);
    r->retry_after_s = -1;
    t->tenant = tenant;
    bdb_buf_reset(&t->msg);
    bdb_batch_free(t->kept); /* an earlier call's, when a caller asks again */
    t->kept = NULL;
    char tname[BDB_TENANT_NAME_MAX + 1];
    const char *tn = bdb_tenant_key_name(tenant, tname); /* the name, not its storage key */

    if (bdb_admit_head_wait(a) != 0) {
        r->retry_after_s = bdb_bp_retry_after(BDB_BP_HEAD_MEMORY);
        bdb_buf_printf(&t->msg,
                       "server overloaded: the storage head holds more than %d x "
                       "head_max_bytes; nothing of this %s was written",
                       BDB_BP_HEAD_FACTOR, noun);
        return refuse(a, t, r, BDB_ADMIT_HEAD);
    }

    bdb_usage_opts uo = {a->env.partition_warn_bytes, 0};
    if (!bdb_quota_storage_admit(a->env.tenants, a->env.db, &uo, tenant, &r->limit, &r->usage)) {
        r->retry_after_s = BDB_QUOTA_STORAGE_RETRY_S;
        char msg[512];
        bdb_quota_storage_msg(msg, sizeof msg, tenant, r->limit, r->usage, noun);
        bdb_buf_puts(&t->msg, msg);
        return refuse(a, t, r, BDB_ADMIT_STORAGE);
    }

    if (bdb_admit_devices(a, tenant, b, &t->devq, &r->limit, &r->usage, &r->value) != 0) {
        r->retry_after_s = BDB_QUOTA_DEVICES_RETRY_S; /* only paces: waiting frees none */
        bdb_admit_devices_msg(&t->msg, tenant, r->limit, r->usage, r->value, noun);
        return refuse(a, t, r, BDB_ADMIT_DEVICES);
    }

    uint64_t cost = bdb_quota_cost(b);
    int64_t retry = 0;
    int v = bdb_tenants_admit(a->env.tenants, tenant, cost, now_ms, &retry, &r->limit);
    if (v <= 0) {
        r->value = cost;
        if (v == 0) {
            r->retry_after_s = retry;
            bdb_buf_printf(&t->msg,
                           "quota exceeded: tenant '%s' may write %llu samples per second; this "
                           "%s of %llu samples can be accepted in %lld s; nothing of it was "
                           "written",
                           tn, (unsigned long long)r->limit, noun, (unsigned long long)cost,
                           (long long)retry);
            return refuse(a, t, r, BDB_ADMIT_RATE);
        }
        bdb_buf_printf(&t->msg,
                       "%s too large for the quota: tenant '%s' has a burst of %llu samples and "
                       "this %s holds %llu; split it into smaller %ss; nothing of it was "
                       "written",
                       noun, tn, (unsigned long long)r->limit, noun, (unsigned long long)cost,
                       noun);
        return refuse(a, t, r, BDB_ADMIT_BURST);
    }
    t->cost = cost;

    uint32_t dlimit = 0, dvalue = 0;
    retry = 1;
    v = bdb_devlimit_admit(a->env.devlimit, tenant, b, now_ms, &r->device, &r->device_len, &dlimit,
                           &dvalue, &retry);
    if (v <= 0) {
        r->retry_after_s = v < 0 ? 1 : retry; /* more than one second allows: only pacing helps */
        r->limit = dlimit;
        r->value = dvalue;
        bdb_buf_printf(&t->msg,
                       "device rate limit exceeded: device '%.*s' of tenant '%s' may send %u "
                       "reports per second; this %s holds %u of its reports; nothing of it was "
                       "written",
                       (int)r->device_len, r->device, tn, dlimit, noun, dvalue);
        return refuse(a, t, r, BDB_ADMIT_DEVICE_RATE);
    }

    bdb_hot_policy hp;
    a->env.hot_policy(a->env.hot_ctx, tenant, &hp);
    bdb_hot_verdict hv;
    memset(&hv, 0, sizeof hv);
    if (hp.threshold && !bdb_hotpart_admit_batch(a->env.hot, tenant, &hp, b, &t->kept, &hv)) {
        int64_t s = (hv.retry_after_ms + 999) / 1000;
        r->retry_after_s = s < 1 ? 1 : s;
        r->limit = hv.limit;
        r->value = hv.rejected;
        r->device = hv.device;
        r->device_len = hv.device_len;
        bdb_buf_printf(&t->msg,
                       "hot partition rate limit: device '%.*s' of tenant '%s' is hot and may "
                       "send %llu reports per minute while hot; this %s holds %zu of its "
                       "reports, more than remain of this minute's allowance; nothing of it was "
                       "written",
                       (int)hv.device_len, hv.device, tn, (unsigned long long)hv.limit, noun,
                       hv.rejected);
        return refuse(a, t, r, BDB_ADMIT_HOT);
    }
    atomic_fetch_add(&a->counts[BDB_ADMIT_OK], 1);
    r->batch = t->kept ? t->kept : b;
    return BDB_ADMIT_OK;
}

void bdb_admit_done(bdb_admit *a, bdb_admit_ticket *t, int write_rc)
{
    if (write_rc == BDB_OK)
        t->cost = 0; /* written: the tokens are spent */
    undo(a, t);
    bdb_batch_free(t->kept);
    t->kept = NULL;
    bdb_buf_free(&t->msg);
    bdb_bp_release(a->env.bp, &t->bp);
}
