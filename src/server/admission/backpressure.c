/* backpressure: in-flight budgets per server and per tenant, and the head guard. */
#include "server/admission/backpressure.h"

#include "common/map.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const reason_names[BDB_BP_REASON_N] = {
    "inflight_bytes", "inflight_writes", "tenant_bytes", "tenant_writes", "head_memory"};

const char *bdb_bp_reason_name(enum bdb_bp_reason r)
{
    return r >= 0 && r < BDB_BP_REASON_N ? reason_names[r] : "none";
}

unsigned bdb_bp_status(enum bdb_bp_reason r)
{
    return r == BDB_BP_TENANT_BYTES || r == BDB_BP_TENANT_WRITES ? 429 : 503;
}

int64_t bdb_bp_retry_after(enum bdb_bp_reason r)
{
    return r == BDB_BP_HEAD_MEMORY ? BDB_BP_RETRY_HEAD_S : BDB_BP_RETRY_INFLIGHT_S;
}

uint64_t bdb_bp_share(uint64_t max, unsigned share_pct)
{
    if (share_pct >= 100)
        return max;
    /* max / 100 * pct + remainder part, without overflowing for huge max */
    uint64_t v = max / 100 * share_pct + max % 100 * share_pct / 100;
    return v ? v : 1;
}

enum bdb_bp_reason bdb_bp_decide(const bdb_bp_limits *l, uint64_t total_bytes,
                                 uint64_t total_writes, uint64_t tenant_bytes,
                                 uint64_t tenant_writes, int has_tenant, uint64_t own_bytes,
                                 uint64_t add_bytes, uint64_t add_writes)
{
    /* At 100 % the server-wide rule says it all. */
    if (has_tenant && l->share_pct < 100) {
        int alone = tenant_bytes <= own_bytes; /* nothing else of the tenant holds bytes */
        if (!alone && add_bytes &&
            tenant_bytes + add_bytes > bdb_bp_share(l->max_bytes, l->share_pct))
            return BDB_BP_TENANT_BYTES;
        if (add_writes && tenant_writes + add_writes > bdb_bp_share(l->max_writes, l->share_pct))
            return BDB_BP_TENANT_WRITES;
    }
    int alone = total_bytes <= own_bytes; /* nothing else holds bytes */
    if (!alone && add_bytes && total_bytes + add_bytes > l->max_bytes)
        return BDB_BP_INFLIGHT_BYTES;
    if (add_writes && total_writes + add_writes > l->max_writes)
        return BDB_BP_INFLIGHT_WRITES;
    return BDB_BP_NONE;
}

int bdb_bp_head_over(uint64_t head_bytes, uint64_t head_max)
{
    if (head_max == 0 || head_max > UINT64_MAX / BDB_BP_HEAD_FACTOR)
        return 0;
    return head_bytes > head_max * BDB_BP_HEAD_FACTOR;
}

/* What one tenant holds; the entry exists only while it holds something, so the map
 * is bounded by the requests in flight, whatever names clients send. */
struct tstate {
    uint64_t bytes, writes;
};

struct bdb_bp {
    bdb_bp_limits lim;
    pthread_mutex_t mu;
    bdb_map *tenants; /* name -> struct tstate */
    uint64_t bytes, writes, peak_bytes, peak_writes;
    uint64_t events[BDB_BP_REASON_N];
    int head_shedding;
    enum bdb_bp_reason last_server_reason, last_tenant_reason;
    int64_t last_server_ms, last_tenant_ms;
    char last_tenant[BDB_BP_TENANT_MAX + 1];
};

bdb_bp *bdb_bp_new(const bdb_bp_limits *l)
{
    bdb_bp *bp = calloc(1, sizeof *bp);
    if (!bp)
        return NULL;
    bp->lim = *l;
    if (bp->lim.share_pct < 1 || bp->lim.share_pct > 100)
        bp->lim.share_pct = 100;
    bp->tenants = bdb_map_new();
    if (!bp->tenants) {
        free(bp);
        return NULL;
    }
    pthread_mutex_init(&bp->mu, NULL);
    bp->last_server_reason = bp->last_tenant_reason = BDB_BP_NONE;
    return bp;
}

void bdb_bp_free(bdb_bp *bp)
{
    if (!bp)
        return;
    size_t pos = 0;
    const void *k;
    size_t kl;
    void *v;
    while (bdb_map_next(bp->tenants, &pos, &k, &kl, &v))
        free(v);
    bdb_map_free(bp->tenants);
    pthread_mutex_destroy(&bp->mu);
    free(bp);
}

/* Under mu. */
static void count(bdb_bp *bp, enum bdb_bp_reason r, const char *tenant, int64_t now_ms)
{
    if (r < 0 || r >= BDB_BP_REASON_N)
        return;
    bp->events[r]++;
    if (bdb_bp_status(r) == 429) {
        bp->last_tenant_reason = r;
        bp->last_tenant_ms = now_ms;
        snprintf(bp->last_tenant, sizeof bp->last_tenant, "%s", tenant ? tenant : "");
    } else {
        bp->last_server_reason = r;
        bp->last_server_ms = now_ms;
    }
}

static struct tstate *tstate_of(bdb_bp *bp, const char *tenant, int create)
{
    if (!tenant || !*tenant)
        return NULL;
    size_t n = strlen(tenant);
    struct tstate *ts = bdb_map_get(bp->tenants, tenant, n);
    if (!ts && create) {
        ts = calloc(1, sizeof *ts);
        if (!ts)
            abort(); /* allocation failure aborts (docs/ARCHITECTURE.md) */
        bdb_map_put(bp->tenants, tenant, n, ts);
    }
    return ts;
}

/* Under mu: drops the entry of a tenant that holds nothing any more. */
static void tstate_trim(bdb_bp *bp, const char *tenant, struct tstate *ts)
{
    if (ts && ts->bytes == 0 && ts->writes == 0) {
        bdb_map_del(bp->tenants, tenant, strlen(tenant));
        free(ts);
    }
}

static void peaks(bdb_bp *bp)
{
    if (bp->bytes > bp->peak_bytes)
        bp->peak_bytes = bp->bytes;
    if (bp->writes > bp->peak_writes)
        bp->peak_writes = bp->writes;
}

enum bdb_bp_reason bdb_bp_admit(bdb_bp *bp, bdb_bp_ticket *t, const char *tenant, uint64_t bytes,
                                int write, int64_t now_ms)
{
    memset(t, 0, sizeof *t);
    int has_tenant = tenant && *tenant && strlen(tenant) <= BDB_BP_TENANT_MAX;
    pthread_mutex_lock(&bp->mu);
    struct tstate *ts = has_tenant ? tstate_of(bp, tenant, 0) : NULL;
    enum bdb_bp_reason r = bdb_bp_decide(&bp->lim, bp->bytes, bp->writes, ts ? ts->bytes : 0,
                                         ts ? ts->writes : 0, has_tenant, 0, bytes, write ? 1 : 0);
    if (r != BDB_BP_NONE) {
        count(bp, r, has_tenant ? tenant : NULL, now_ms);
        pthread_mutex_unlock(&bp->mu);
        return r;
    }
    if (has_tenant && (bytes || write)) {
        ts = tstate_of(bp, tenant, 1);
        ts->bytes += bytes;
        ts->writes += write ? 1 : 0;
        snprintf(t->tenant, sizeof t->tenant, "%s", tenant);
    } else if (has_tenant) {
        snprintf(t->tenant, sizeof t->tenant, "%s", tenant);
    }
    bp->bytes += bytes;
    bp->writes += write ? 1 : 0;
    peaks(bp);
    pthread_mutex_unlock(&bp->mu);
    t->bytes = bytes;
    t->write = write ? 1 : 0;
    t->admitted = 1;
    return BDB_BP_NONE;
}

enum bdb_bp_reason bdb_bp_grow(bdb_bp *bp, bdb_bp_ticket *t, uint64_t bytes, int64_t now_ms)
{
    if (!t->admitted || bytes == 0)
        return BDB_BP_NONE;
    pthread_mutex_lock(&bp->mu);
    struct tstate *ts = tstate_of(bp, t->tenant, 0);
    enum bdb_bp_reason r =
        bdb_bp_decide(&bp->lim, bp->bytes, bp->writes, ts ? ts->bytes : 0, ts ? ts->writes : 0,
                      t->tenant[0] != 0, t->bytes, bytes, 0);
    if (r != BDB_BP_NONE) {
        count(bp, r, t->tenant, now_ms);
        pthread_mutex_unlock(&bp->mu);
        return r;
    }
    if (t->tenant[0]) {
        ts = tstate_of(bp, t->tenant, 1);
        ts->bytes += bytes;
    }
    bp->bytes += bytes;
    t->bytes += bytes;
    peaks(bp);
    pthread_mutex_unlock(&bp->mu);
    return BDB_BP_NONE;
}

void bdb_bp_shrink(bdb_bp *bp, bdb_bp_ticket *t, uint64_t bytes)
{
    if (!t->admitted || bytes == 0)
        return;
    if (bytes > t->bytes)
        bytes = t->bytes;
    pthread_mutex_lock(&bp->mu);
    struct tstate *ts = tstate_of(bp, t->tenant, 0);
    if (ts)
        ts->bytes -= bytes <= ts->bytes ? bytes : ts->bytes;
    bp->bytes -= bytes <= bp->bytes ? bytes : bp->bytes;
    pthread_mutex_unlock(&bp->mu);
    t->bytes -= bytes;
}

void bdb_bp_release(bdb_bp *bp, bdb_bp_ticket *t)
{
    if (!t->admitted)
        return;
    pthread_mutex_lock(&bp->mu);
    struct tstate *ts = tstate_of(bp, t->tenant, 0);
    if (ts) {
        ts->bytes -= t->bytes <= ts->bytes ? t->bytes : ts->bytes;
        ts->writes -= t->write && ts->writes ? 1 : 0;
        tstate_trim(bp, t->tenant, ts);
    }
    bp->bytes -= t->bytes <= bp->bytes ? t->bytes : bp->bytes;
    bp->writes -= t->write && bp->writes ? 1 : 0;
    pthread_mutex_unlock(&bp->mu);
    t->bytes = 0;
    t->write = 0;
    t->admitted = 0;
}

int bdb_bp_head_check(bdb_bp *bp, uint64_t head_bytes, uint64_t head_max, int refuse,
                      int64_t now_ms)
{
    pthread_mutex_lock(&bp->mu);
    bp->head_shedding = bdb_bp_head_over(head_bytes, head_max);
    int shed = bp->head_shedding;
    if (shed && refuse)
        count(bp, BDB_BP_HEAD_MEMORY, NULL, now_ms);
    pthread_mutex_unlock(&bp->mu);
    return shed;
}

void bdb_bp_count(bdb_bp *bp, enum bdb_bp_reason r, int64_t now_ms)
{
    pthread_mutex_lock(&bp->mu);
    count(bp, r, NULL, now_ms);
    pthread_mutex_unlock(&bp->mu);
}

void bdb_bp_get_stats(bdb_bp *bp, bdb_bp_stats *st)
{
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&bp->mu);
    st->bytes = bp->bytes;
    st->writes = bp->writes;
    st->peak_bytes = bp->peak_bytes;
    st->peak_writes = bp->peak_writes;
    st->tenants = bdb_map_count(bp->tenants);
    memcpy(st->events, bp->events, sizeof st->events);
    st->head_shedding = bp->head_shedding;
    st->last_server_reason = bp->last_server_reason;
    st->last_server_ms = bp->last_server_ms;
    st->last_tenant_reason = bp->last_tenant_reason;
    st->last_tenant_ms = bp->last_tenant_ms;
    snprintf(st->last_tenant, sizeof st->last_tenant, "%s", bp->last_tenant);
    pthread_mutex_unlock(&bp->mu);
}
