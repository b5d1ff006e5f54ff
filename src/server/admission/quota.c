/* quota: token bucket, request cost, device limit and the refusal body. */
#include "server/admission/quota.h"

#include "bucketdb/bdb.h"

#include <stdio.h>
#include <string.h>

uint64_t bdb_quota_burst(uint64_t rate, uint64_t burst)
{
    if (burst)
        return burst;
    return rate * BDB_QUOTA_DEFAULT_BURST_SECONDS;
}

static void refill(bdb_tbucket *tb, uint64_t rate, uint64_t burst, int64_t now_ms)
{
    int64_t cap = (int64_t)burst * 1000;
    if (!tb->primed) {
        tb->primed = 1;
        tb->level_ms = cap;
        tb->last_ms = now_ms;
        return;
    }
    if (tb->level_ms > cap) /* burst lowered since the last call */
        tb->level_ms = cap;
    if (now_ms <= tb->last_ms)
        return; /* no time passed, or the clock went back: nothing to add */
    int64_t dt = now_ms - tb->last_ms;
    tb->last_ms = now_ms;
    /* rate samples/s x dt ms = rate x dt milli-samples; stop at the cap without
     * multiplying past it. */
    int64_t room = cap - tb->level_ms;
    if (room <= 0)
        return;
    if ((uint64_t)dt >= (uint64_t)room / rate + 1)
        tb->level_ms = cap;
    else
        tb->level_ms += (int64_t)rate * dt;
    if (tb->level_ms > cap)
        tb->level_ms = cap;
}

int bdb_tbucket_take(bdb_tbucket *tb, uint64_t rate, uint64_t burst, uint64_t cost, int64_t now_ms,
                     int64_t *retry_after_s)
{
    refill(tb, rate, burst, now_ms);
    if (cost > burst)
        return -1;
    int64_t need = (int64_t)cost * 1000;
    if (tb->level_ms >= need) {
        tb->level_ms -= need;
        return 1;
    }
    /* ms until the level reaches need, rounded up, then whole seconds rounded up */
    uint64_t missing = (uint64_t)(need - tb->level_ms);
    uint64_t wait_ms = (missing + rate - 1) / rate;
    int64_t s = (int64_t)((wait_ms + 999) / 1000);
    *retry_after_s = s < 1 ? 1 : s;
    return 0;
}

void bdb_tbucket_refund(bdb_tbucket *tb, uint64_t burst, uint64_t cost)
{
    int64_t cap = (int64_t)burst * 1000;
    if (cost > burst)
        cost = burst;
    tb->level_ms += (int64_t)cost * 1000;
    if (tb->level_ms > cap)
        tb->level_ms = cap;
}

uint64_t bdb_tbucket_level(bdb_tbucket *tb, uint64_t rate, uint64_t burst, int64_t now_ms)
{
    refill(tb, rate, burst, now_ms);
    return tb->level_ms > 0 ? (uint64_t)tb->level_ms / 1000 : 0;
}

uint64_t bdb_quota_cost(const bdb_batch *b)
{
    size_t n;
    const bdb_report *r = bdb_batch_reports(b, &n);
    uint64_t cost = 0;
    for (size_t i = 0; i < n; i++)
        cost += r[i].nmetrics ? r[i].nmetrics : 1;
    return cost;
}

int bdb_quota_devices_ok(uint64_t current, uint64_t new_devices, uint64_t max)
{
    if (max == 0 || new_devices == 0)
        return 1;
    return current <= max && new_devices <= max - current;
}

void bdb_quota_error_json(bdb_buf *b, const char *msg, const char *tenant, const char *limit,
                          uint64_t value, int64_t retry_after_s)
{
    bdb_buf_puts(b, "{\"error\":\"");
    bdb_buf_json_str(b, msg, strlen(msg));
    char tname[BDB_TENANT_NAME_MAX + 1]; /* the name, not its storage key */
    tenant = bdb_tenant_key_name(tenant, tname);
    bdb_buf_puts(b, "\",\"tenant\":\"");
    bdb_buf_json_str(b, tenant, strlen(tenant));
    bdb_buf_puts(b, "\",\"limit\":\"");
    bdb_buf_json_str(b, limit, strlen(limit));
    bdb_buf_printf(b, "\",\"value\":%llu", (unsigned long long)value);
    if (retry_after_s >= 0)
        bdb_buf_printf(b, ",\"retry_after\":%lld", (long long)retry_after_s);
    bdb_buf_puts(b, "}\n");
}

int bdb_quota_storage_admit(bdb_tenants *reg, bdb_db *db, const bdb_usage_opts *uo,
                            const char *tenant, uint64_t *limit, uint64_t *usage)
{
    bdb_db_usage_start(db, uo);
    bdb_tenant_info ti;
    if (bdb_tenants_get(reg, tenant, &ti) != BDB_OK || !ti.quotas.storage_bytes)
        return 1;
    bdb_storage_usage su;
    /* Before the first measurement (moments after a start) the block share is still 0,
     * so su.bytes is a lower bound: what the sink confirmed (loaded at open) plus the
     * unflushed samples. Refusing when even that reaches the quota is right at once. */
    if (bdb_db_tenant_storage(db, tenant, &su) != BDB_OK)
        return 1;
    if (su.bytes < ti.quotas.storage_bytes)
        return 1;
    *limit = ti.quotas.storage_bytes;
    *usage = su.bytes;
    bdb_tenants_count_rejection(reg, tenant, BDB_LIMIT_STORAGE);
    return 0;
}

void bdb_quota_storage_msg(char *msg, size_t msglen, const char *tenant, uint64_t limit,
                           uint64_t usage, const char *noun)
{
    char tname[BDB_TENANT_NAME_MAX + 1]; /* the name, not its storage key */
    snprintf(msg, msglen,
             "storage quota exceeded: tenant '%s' may store %llu bytes (storage_bytes) and "
             "stores %llu; nothing of this %s was written; space frees when retention "
             "drops old data or the quota is raised",
             bdb_tenant_key_name(tenant, tname), (unsigned long long)limit,
             (unsigned long long)usage, noun);
}

void bdb_quota_storage_error(bdb_buf *b, char *msg, size_t msglen, const char *tenant,
                             uint64_t limit, uint64_t usage)
{
    bdb_quota_storage_msg(msg, msglen, tenant, limit, usage, "request");
    bdb_quota_error_json(b, msg, tenant, bdb_quota_limit_name(BDB_LIMIT_STORAGE), limit,
                         BDB_QUOTA_STORAGE_RETRY_S);
    /* one more field: what the tenant stores now */
    if (b->len >= 2 && b->data[b->len - 2] == '}') {
        b->len -= 2;
        bdb_buf_printf(b, ",\"usage\":%llu}\n", (unsigned long long)usage);
    }
}

void bdb_quota_storage_note(bdb_db *db, const char *tenant, uint64_t samples)
{
    bdb_db_usage_note(db, tenant, samples);
}
