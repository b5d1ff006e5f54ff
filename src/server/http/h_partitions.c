/* h_partitions: hot partitions and telemetry_by_tenant over HTTP (docs/API.md), the
 * hot partition admission of writes, and the test-only clock.
 *
 *   GET  /api/v1/partitions/hot            hot partitions: a tenant token sees its own,
 *                                          the admin token every tenant's (or ?tenant=)
 *   GET  /api/v1/telemetry_by_tenant       events per device per bucket of one tenant:
 *        ?bucket=<time> | ?from=<time>&to=<time>
 *   POST /internal/clock?now_ms=|advance_ms=   only with test_clock = true, admin token
 *
 * A tenant's hot policy is the server's hot_* settings with the tenant's own
 * overrides (tenants.h, bdb_tenant_hot) on top. */
#include "server/server_int.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "server/admission/hotpart.h"
#include "storage/embedded/hot/db_hot.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- clock, setup */

static int64_t test_clock_now(void *ctx)
{
    bdb_server *s = ctx;
    int64_t t = atomic_load(&s->test_now_ms);
    return t ? t : bdb_now_ms();
}

bdb_clock server_clock(bdb_server *s)
{
    if (s->cfg.test_clock)
        return (bdb_clock){test_clock_now, s};
    return (bdb_clock){NULL, NULL};
}

/* Episode start/end: the subbucket policy changes the device's sub-bucket count in
 * the engine (a WAL record; runs on the writing request's thread, once per episode). */
static void on_episode(void *ctx, const char *tenant, const char *device, int hot,
                       const bdb_hot_policy *p)
{
    bdb_server *s = ctx;
    /* a deleted tenant's episode ending must not make its device again in the engine,
     * after the purge dropped it */
    if (p->kind != BDB_HOT_SUBBUCKET || bdb_tenants_key_deleted(s->tenants, tenant))
        return;
    int rc = bdb_db_set_subbuckets(s->db, tenant, device, hot ? p->subbuckets : 1);
    if (rc != BDB_OK)
        BDB_WARN("hot partition %s/%s: cannot change its sub-buckets: %s", tenant, device,
                 bdb_strerror(rc));
}

void hot_start(bdb_server *s)
{
    bdb_db_set_promotion_target(s->db, s->cfg.bucket_target_bytes);
    bdb_hotpart_opts o = {server_clock(s), on_episode, s};
    s->hot = bdb_hotpart_new(&o);
    if (s->cfg.test_clock)
        BDB_WARN("test_clock is on: POST /internal/clock can move this server's clock; "
                 "never use it in production");
}

void hot_stop(bdb_server *s)
{
    bdb_hotpart_free(s->hot);
    s->hot = NULL;
}

/* The tenant's policy: the server's, with the tenant's overrides. */
void hot_policy_of(void *ctx, const char *tenant, bdb_hot_policy *p)
{
    bdb_server *s = ctx;
    char err[200];
    if (bdb_config_hot_policy(&s->cfg, p, err, sizeof err) != 0)
        memset(p, 0, sizeof *p); /* checked at start: cannot happen */
    bdb_tenant_info ti;
    if (bdb_tenants_get(s->tenants, tenant, &ti) != BDB_OK)
        return;
    const bdb_tenant_hot *h = &ti.hot;
    if (h->threshold)
        p->threshold = h->threshold;
    if (h->policy)
        p->kind = h->policy - 1;
    if (h->subbuckets)
        p->subbuckets = h->subbuckets;
    if (h->rate_limit)
        p->max_per_minute = h->rate_limit;
    if (h->sample != 0)
        p->sample = h->sample;
}

/* ---------------------------------------------------------------- GET partitions/hot */

static void put_time(bdb_buf *b, const char *name, int64_t ms)
{
    char t[40];
    bdb_format_time_ms(ms, t, sizeof t);
    bdb_buf_printf(b, "\"%s\":\"%s\",\"%s_ms\":%lld", name, t, name, (long long)ms);
}

struct hot_out {
    bdb_server *s;
    bdb_buf *b;
    size_t n;
};

static int hot_row(void *ctx, const bdb_hot_info *i)
{
    struct hot_out *h = ctx;
    bdb_buf *b = h->b;
    /* A deleted tenant's devices stay in the detector until they go quiet; listed, they
     * would show under the name of the tenant that has it now. */
    if (bdb_tenants_key_deleted(h->s->tenants, i->tenant))
        return 0;
    int64_t bs = 0, be = 0;
    uint32_t subs = 1;
    int have = bdb_db_partition_at(h->s->db, i->tenant, i->device, i->last_event_ms, &bs, &be,
                                   &subs) == BDB_OK;
    if (h->n++)
        bdb_buf_putc(b, ',');
    char tname[BDB_TENANT_NAME_MAX + 1]; /* the name, not its storage key */
    const char *tn = bdb_tenant_key_name(i->tenant, tname);
    bdb_buf_puts(b, "{\"tenant\":\"");
    bdb_buf_json_str(b, tn, strlen(tn));
    bdb_buf_puts(b, "\",\"device\":\"");
    bdb_buf_json_str(b, i->device, strlen(i->device));
    bdb_buf_puts(b, "\",");
    if (have) {
        put_time(b, "bucket_start", bs);
        bdb_buf_printf(b, ",\"bucket_end_ms\":%lld,\"bucket\":\"%s\",\"subbuckets\":%u,",
                       (long long)be, bdb_bucket_name(be - bs), subs);
    }
    bdb_buf_printf(b,
                   "\"writes_last_minute\":%llu,\"writes_this_minute\":%llu,"
                   "\"peak_per_minute\":%llu,\"threshold\":%llu,",
                   (unsigned long long)i->writes_prev, (unsigned long long)i->writes_minute,
                   (unsigned long long)i->peak, (unsigned long long)i->policy.threshold);
    put_time(b, "since", i->since_ms);
    bdb_buf_printf(b, ",\"policy\":\"%s\"", bdb_hot_kind_name(i->policy.kind));
    switch (i->policy.kind) {
    case BDB_HOT_SUBBUCKET:
        bdb_buf_printf(b, ",\"policy_subbuckets\":%u", i->policy.subbuckets);
        break;
    case BDB_HOT_RATELIMIT:
        bdb_buf_printf(b, ",\"policy_rate_limit\":%llu",
                       (unsigned long long)i->policy.max_per_minute);
        break;
    case BDB_HOT_SAMPLE:
        bdb_buf_printf(b, ",\"policy_sample\":%.6g", i->policy.sample);
        break;
    default:
        break;
    }
    bdb_buf_printf(b, ",\"kept\":%llu,\"rejected\":%llu,\"sampled_out\":%llu}",
                   (unsigned long long)i->kept, (unsigned long long)i->rejected,
                   (unsigned long long)i->sampled_out);
    return 0;
}

enum MHD_Result h_partitions_hot(bdb_server *s, struct MHD_Connection *c)
{
    enum MHD_Result r;
    req_ident id;
    if (req_auth(s, c, &id, &r) != 0)
        return r;
    const char *t = arg(c, "tenant");
    const char *tenant = NULL; /* all tenants: the admin token without ?tenant= */
    if (id.who != WHO_ADMIN || (t && *t)) {
        tenant = req_tenant(s, c, &r);
        if (!tenant)
            return r;
    }
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_putc(&b, '{');
    bdb_clock ck = server_clock(s);
    put_time(&b, "now", bdb_clock_now(&ck));
    bdb_buf_puts(&b, ",\"partitions\":[");
    struct hot_out h = {s, &b, 0};
    bdb_hotpart_list(s->hot, tenant, hot_row, &h);
    bdb_buf_printf(&b, "],\"count\":%zu}\n", h.n);
    r = respond(s, c, 200, "application/json", b.data, b.len);
    bdb_buf_free(&b);
    return r;
}

/* ---------------------------------------------------------------- telemetry_by_tenant */

#define TBT_MAX_ROWS 100000

struct tbt_row {
    int64_t start, end;
    char *device;
    uint64_t events;
    uint32_t subs;
};

struct tbt_rows {
    struct tbt_row *v;
    size_t n, cap;
    int truncated;
};

static int tbt_cb(void *ctx, const bdb_tbt_row *r)
{
    struct tbt_rows *t = ctx;
    if (t->n == TBT_MAX_ROWS) {
        t->truncated = 1;
        return 1;
    }
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 64;
        struct tbt_row *v = realloc(t->v, t->cap * sizeof *v);
        if (!v)
            abort();
        t->v = v;
    }
    char *d = strdup(r->device);
    if (!d)
        abort();
    t->v[t->n++] = (struct tbt_row){r->bucket_start, r->bucket_end, d, r->events, r->subbuckets};
    return 0;
}

static int tbt_cmp(const void *a, const void *b)
{
    const struct tbt_row *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->device, y->device);
}

enum MHD_Result h_telemetry_by_tenant(bdb_server *s, struct MHD_Connection *c)
{
    enum MHD_Result r;
    const char *tenant = req_tenant(s, c, &r);
    if (!tenant)
        return r;
    int64_t bucket = 0, from = 0, to = 0;
    int hb, hf, ht;
    if ((hb = time_param(s, c, "bucket", &bucket, &r)) < 0 ||
        (hf = time_param(s, c, "from", &from, &r)) < 0 ||
        (ht = time_param(s, c, "to", &to, &r)) < 0)
        return r;
    if (hb && (hf || ht))
        return respond_json_error(s, c, 400, "give either 'bucket' or 'from' and 'to', not both",
                                  0);
    if (hb) {
        from = bucket;
        to = bucket + 1;
    } else if (!hf || !ht) {
        return respond_json_error(s, c, 400,
                                  "missing parameter: 'bucket' (a time inside the buckets to "
                                  "list) or both 'from' and 'to'",
                                  0);
    } else if (from >= to) {
        return respond_json_error(s, c, 400, "'from' must be before 'to'", 0);
    }
    struct tbt_rows rows = {0};
    bdb_db_telemetry_by_tenant(s->db, tenant, from, to, tbt_cb, &rows);
    if (rows.n > 1)
        qsort(rows.v, rows.n, sizeof *rows.v, tbt_cmp);
    bdb_buf b;
    bdb_buf_init(&b);
    char tname[BDB_TENANT_NAME_MAX + 1];
    const char *tn = bdb_tenant_key_name(tenant, tname);
    bdb_buf_puts(&b, "{\"tenant\":\"");
    bdb_buf_json_str(&b, tn, strlen(tn));
    bdb_buf_printf(&b, "\",\"from_ms\":%lld,\"to_ms\":%lld,\"buckets\":[", (long long)from,
                   (long long)to);
    uint64_t total = 0;
    for (size_t i = 0; i < rows.n;) {
        size_t j = i;
        uint64_t sum = 0;
        if (i)
            bdb_buf_putc(&b, ',');
        bdb_buf_putc(&b, '{');
        put_time(&b, "bucket", rows.v[i].start);
        bdb_buf_printf(&b, ",\"bucket_end_ms\":%lld,\"bucket_size\":\"%s\",\"devices\":[",
                       (long long)rows.v[i].end, bdb_bucket_name(rows.v[i].end - rows.v[i].start));
        for (; j < rows.n && rows.v[j].start == rows.v[i].start && rows.v[j].end == rows.v[i].end;
             j++) {
            if (j > i)
                bdb_buf_putc(&b, ',');
            bdb_buf_puts(&b, "{\"device\":\"");
            bdb_buf_json_str(&b, rows.v[j].device, strlen(rows.v[j].device));
            bdb_buf_printf(&b, "\",\"event_count\":%llu,\"subbuckets\":%u}",
                           (unsigned long long)rows.v[j].events, rows.v[j].subs);
            sum += rows.v[j].events;
        }
        bdb_buf_printf(&b, "],\"event_count\":%llu}", (unsigned long long)sum);
        total += sum;
        i = j;
    }
    bdb_buf_printf(&b, "],\"rows\":%zu,\"event_count\":%llu,\"truncated\":%s}\n", rows.n,
                   (unsigned long long)total, rows.truncated ? "true" : "false");
    for (size_t i = 0; i < rows.n; i++)
        free(rows.v[i].device);
    free(rows.v);
    r = respond(s, c, 200, "application/json", b.data, b.len);
    bdb_buf_free(&b);
    return r;
}

/* ---------------------------------------------------------------- test clock */

enum MHD_Result h_clock(bdb_server *s, struct MHD_Connection *c)
{
    enum MHD_Result r;
    req_ident id;
    if (req_auth(s, c, &id, &r) != 0)
        return r;
    if (id.who != WHO_ADMIN) {
        atomic_fetch_add(&s->forbidden, 1);
        return respond_json_error(s, c, 403, "forbidden: /internal/clock needs the admin token", 0);
    }
    const char *now = arg(c, "now_ms"), *adv = arg(c, "advance_ms");
    char *end = NULL;
    /* The clock stays inside the stored time range: retention and hot minutes
     * compute with it. */
    char msg[160];
    if (now && *now) {
        errno = 0;
        long long v = strtoll(now, &end, 10);
        if (*end || errno || v <= 0 || v > BDB_TS_MAX_MS) {
            snprintf(msg, sizeof msg, "'now_ms' must be an integer 1..%lld", BDB_TS_MAX_MS);
            return respond_json_error(s, c, 400, msg, 0);
        }
        atomic_store(&s->test_now_ms, (int64_t)v);
    } else if (adv && *adv) {
        errno = 0;
        long long v = strtoll(adv, &end, 10);
        int64_t cur = test_clock_now(s);
        if (*end || errno || v < 0 || v > BDB_TS_MAX_MS - cur) {
            snprintf(msg, sizeof msg, "'advance_ms' must be an integer 0..%lld",
                     (long long)(BDB_TS_MAX_MS - cur));
            return respond_json_error(s, c, 400, msg, 0);
        }
        atomic_store(&s->test_now_ms, cur + (int64_t)v);
    } else {
        return respond_json_error(s, c, 400, "give 'now_ms' or 'advance_ms'", 0);
    }
    bdb_hotpart_tick(s->hot);
    char body[64];
    int n = snprintf(body, sizeof body, "{\"now_ms\":%lld}\n", (long long)test_clock_now(s));
    return respond(s, c, 200, "application/json", body, (size_t)n);
}

/* ---------------------------------------------------------------- /metrics */

struct hm_row {
    char tenant[BDB_TENANT_NAME_MAX + 1];
    uint64_t v[4]; /* hot_now, episodes, rejected, sampled_out */
};

struct hm_ctx {
    bdb_server *s;
    struct hm_row *rows;
    size_t n, cap;
};

/* Registered tenants get their own series, every other tenant shares "(other)", so
 * the number of series stays bounded (as with the ingestion counters). */
static void hm_cb(void *ctx, const bdb_hot_tenant_stats *st)
{
    struct hm_ctx *h = ctx;
    char tname[BDB_TENANT_NAME_MAX + 1];
    const char *label = bdb_tenant_key_name(st->tenant, tname); /* a name, not a key */
    if (bdb_tenants_get(h->s->tenants, st->tenant, &(bdb_tenant_info){0}) != BDB_OK)
        label = "(other)";
    size_t i = 0;
    while (i < h->n && strcmp(h->rows[i].tenant, label))
        i++;
    if (i == h->n) {
        if (h->n == h->cap) {
            h->cap = h->cap ? h->cap * 2 : 8;
            struct hm_row *v = realloc(h->rows, h->cap * sizeof *v);
            if (!v)
                abort();
            h->rows = v;
        }
        memset(&h->rows[i], 0, sizeof h->rows[i]);
        snprintf(h->rows[i].tenant, sizeof h->rows[i].tenant, "%s", label);
        h->n++;
    }
    h->rows[i].v[0] += st->hot_now;
    h->rows[i].v[1] += st->episodes;
    h->rows[i].v[2] += st->rejected;
    h->rows[i].v[3] += st->sampled_out;
}

void hot_metrics(bdb_server *s, bdb_buf *b)
{
    static const struct {
        const char *name, *type, *help;
    } fam[4] = {
        {"bucketdb_hot_partitions", "gauge",
         "Partitions hot now (docs/TENANCY.md#hot-partitions)."},
        {"bucketdb_hot_episodes_total", "counter", "Hot partition episodes started."},
        {"bucketdb_hot_rejected_total", "counter",
         "Reports of hot devices refused by the ratelimit policy."},
        {"bucketdb_hot_sampled_out_total", "counter",
         "Reports of hot devices acknowledged but not stored by the sample policy."},
    };
    struct hm_ctx h = {s, NULL, 0, 0};
    bdb_hotpart_stats(s->hot, hm_cb, &h);
    for (int f = 0; f < 4; f++) {
        bdb_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", fam[f].name, fam[f].help, fam[f].name,
                       fam[f].type);
        for (size_t i = 0; i < h.n; i++)
            bdb_buf_printf(b, "%s{tenant=\"%s\"} %llu\n", fam[f].name, h.rows[i].tenant,
                           (unsigned long long)h.rows[i].v[f]);
    }
    free(h.rows);
    bdb_hot_engine_stats es;
    bdb_db_hot_stats(s->db, &es);
    bdb_buf_printf(b,
                   "# HELP bucketdb_bucket_promotions_total Devices moved to a smaller bucket "
                   "because a partition passed bucket_target_bytes.\n"
                   "# TYPE bucketdb_bucket_promotions_total counter\n"
                   "bucketdb_bucket_promotions_total %llu\n"
                   "# HELP bucketdb_subbucket_changes_total Sub-bucket count changes of hot "
                   "devices (logged in the WAL).\n"
                   "# TYPE bucketdb_subbucket_changes_total counter\n"
                   "bucketdb_subbucket_changes_total %llu\n"
                   "# HELP bucketdb_hot_tracked_devices Devices whose per-minute report count "
                   "is kept (active in the last two minutes).\n"
                   "# TYPE bucketdb_hot_tracked_devices gauge\n"
                   "bucketdb_hot_tracked_devices %zu\n"
                   "# HELP bucketdb_hot_table_bytes Bytes of the hot partition counting table.\n"
                   "# TYPE bucketdb_hot_table_bytes gauge\n"
                   "bucketdb_hot_table_bytes %zu\n",
                   (unsigned long long)es.bucket_promotions,
                   (unsigned long long)es.subbucket_changes, bdb_hotpart_entries(s->hot),
                   bdb_hotpart_table_bytes(s->hot));
}
