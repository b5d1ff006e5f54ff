/* h_query: range queries and the device registry over HTTP. */
#include "server/server_int.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "model/bucket.h"
#include "query/range.h"
#include "query/windows.h"
#include "storage/embedded/tier/db_tier.h"
#include "server/config.h"
#include "server/admission/devlimit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct qout {
    bdb_buf *b;
    int csv;
    uint64_t n, max;
    int overflow;
};

static int row_cb(void *ctx, const char *metric, int64_t ts, double v)
{
    struct qout *o = ctx;
    if (o->n >= o->max) {
        o->overflow = 1;
        return 1;
    }
    if (o->csv) {
        bdb_buf_i64(o->b, ts);
        bdb_buf_putc(o->b, ',');
        /* metric names may contain commas or quotes: quote per RFC 4180 when needed */
        if (strpbrk(metric, ",\"\n")) {
            bdb_buf_putc(o->b, '"');
            for (const char *p = metric; *p; p++) {
                if (*p == '"')
                    bdb_buf_putc(o->b, '"');
                bdb_buf_putc(o->b, (uint8_t)*p);
            }
            bdb_buf_putc(o->b, '"');
        } else {
            bdb_buf_puts(o->b, metric);
        }
        bdb_buf_putc(o->b, ',');
        bdb_buf_double(o->b, v);
        bdb_buf_putc(o->b, '\n');
    } else {
        bdb_buf_puts(o->b, o->n ? ",[" : "[");
        bdb_buf_i64(o->b, ts);
        bdb_buf_puts(o->b, ",\"");
        bdb_buf_json_str(o->b, metric, strlen(metric));
        bdb_buf_puts(o->b, "\",");
        bdb_buf_double(o->b, v);
        bdb_buf_putc(o->b, ']');
    }
    o->n++;
    return 0;
}

/* Splits a comma-separated list in place. */
static size_t split_list(char *s, const char **out, size_t max)
{
    size_t n = 0;
    char *save;
    for (char *t = strtok_r(s, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save))
        if (*t)
            out[n++] = t;
    return n;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorts a metric list and drops repeats: rows with equal times come out in metric
 * name order whatever order the caller listed them in, and "a,a" does not return
 * every sample of a twice. */
static size_t sort_unique(const char **v, size_t n)
{
    if (n < 2)
        return n;
    qsort(v, n, sizeof *v, cmp_str);
    size_t k = 1;
    for (size_t i = 1; i < n; i++)
        if (strcmp(v[i], v[k - 1]) != 0)
            v[k++] = v[i];
    return k;
}

/* ---- aggregated windows (resolution=1m|1h|1d|auto) ---- */

struct wout {
    bdb_buf *b;
    int csv;
    const char *tier;
    uint64_t n, max;
    int overflow;
    unsigned stats; /* STAT_* bits: the columns asked for (stats=) */
};

/* The statistics of an aggregated window, in column order (docs/API.md, stats=). */
static const char *const stat_names[] = {"count",  "sum", "min", "max", "mean",
                                         "stddev", "p50", "p95", "p99"};
#define STAT_N 9
#define STAT_ALL ((1u << STAT_N) - 1)
#define STAT_QUANTILES (7u << 6) /* p50, p95, p99 */

/* Parses stats=a,b,...; returns the STAT_* mask, or 0 (err filled) on a bad list. */
static unsigned parse_stats(const char *v, char *err, size_t errlen)
{
    unsigned mask = 0;
    const char *p = v;
    for (;;) {
        size_t n = strcspn(p, ",");
        int k = -1;
        for (int i = 0; i < STAT_N && k < 0; i++)
            if (strlen(stat_names[i]) == n && !strncmp(p, stat_names[i], n))
                k = i;
        if (k < 0) {
            snprintf(err, errlen,
                     "unknown statistic '%.*s' in 'stats': use a comma-separated list of "
                     "count, sum, min, max, mean, stddev, p50, p95, p99",
                     (int)(n > 64 ? 64 : n), p);
            return 0;
        }
        mask |= 1u << k;
        if (!p[n])
            return mask;
        p += n + 1;
    }
}

static void csv_field(bdb_buf *b, const char *v)
{
    if (!strpbrk(v, ",\"\n")) {
        bdb_buf_puts(b, v);
        return;
    }
    bdb_buf_putc(b, '"');
    for (const char *p = v; *p; p++) {
        if (*p == '"')
            bdb_buf_putc(b, '"');
        bdb_buf_putc(b, (uint8_t)*p);
    }
    bdb_buf_putc(b, '"');
}

static int window_cb(void *ctx, const bdb_window_row *r)
{
    struct wout *o = ctx;
    if (o->n >= o->max) {
        o->overflow = 1;
        return 1;
    }
    /* count first (an integer), then the doubles, in stat_names order */
    const double v[] = {0, r->sum, r->min, r->max, r->mean, r->stddev, r->p50, r->p95, r->p99};
    if (o->csv) {
        bdb_buf_i64(o->b, r->start);
        bdb_buf_putc(o->b, ',');
        csv_field(o->b, r->metric);
        bdb_buf_putc(o->b, ',');
        bdb_buf_puts(o->b, o->tier);
    } else {
        bdb_buf_puts(o->b, o->n ? ",[" : "[");
        bdb_buf_i64(o->b, r->start);
        bdb_buf_puts(o->b, ",\"");
        bdb_buf_json_str(o->b, r->metric, strlen(r->metric));
        bdb_buf_putc(o->b, '"');
    }
    for (int i = 0; i < STAT_N; i++) {
        if (!(o->stats & (1u << i)))
            continue;
        bdb_buf_putc(o->b, ',');
        if (i == 0)
            bdb_buf_u64(o->b, r->count);
        else
            bdb_buf_double(o->b, v[i]);
    }
    if (o->csv)
        bdb_buf_puts(o->b, r->final ? ",true\n" : ",false\n");
    else
        bdb_buf_puts(o->b, r->final ? ",true]" : ",false]");
    o->n++;
    return 0;
}

/* Answers a query from a rollup tier; q is the parsed raw query. */
static enum MHD_Result query_tier(bdb_server *s, struct MHD_Connection *c, const bdb_range_query *q,
                                  enum bdb_res res, const char *asked, int csv, unsigned stats,
                                  uint64_t t0)
{
    bdb_window_query wq = {.tenant = q->tenant,
                           .device = q->device,
                           .metrics = q->metrics,
                           .nmetrics = q->nmetrics,
                           .from = q->from,
                           .to = q->to,
                           .res = res,
                           .lateness_ms = s->cfg.agg_allowed_lateness,
                           .limit = q->limit,
                           .desc = q->desc,
                           .no_quantiles = !(stats & STAT_QUANTILES)};
    bdb_buf body;
    bdb_buf_init(&body);
    struct wout o = {&body, csv, bdb_res_name(res), 0, s->cfg.max_query_samples, 0, stats};
    bdb_buf cols; /* the chosen statistics' names, comma-separated */
    bdb_buf_init(&cols);
    for (int i = 0; i < STAT_N; i++)
        if (stats & (1u << i))
            bdb_buf_printf(&cols, csv ? ",%s" : ",\"%s\"", stat_names[i]);
    if (csv) {
        bdb_buf_puts(&body, "time,metric,tier");
        bdb_buf_append(&body, cols.data, cols.len);
        bdb_buf_puts(&body, ",final\n");
    }
    int64_t wm = INT64_MIN;
    int rc = bdb_query_windows(s->db, &wq, window_cb, &o, &wm);
    atomic_fetch_add(&s->queries, 1);
    if (rc != BDB_OK) {
        bdb_buf_free(&body);
        bdb_buf_free(&cols);
        char msg[400], tname[BDB_TENANT_NAME_MAX + 1];
        if (rc == BDB_ERR_NOTFOUND) {
            snprintf(msg, sizeof msg, "device '%.200s' not found in tenant '%s'", q->device,
                     bdb_tenant_key_name(q->tenant, tname));
            return respond_json_error(s, c, 404, msg, 0);
        }
        snprintf(msg, sizeof msg, "query failed: %s", bdb_strerror(rc));
        /* windows are never answered half-computed: 503 while the backend is away */
        return respond_json_error(s, c, rc == BDB_ERR_PARTIAL ? 503 : 500, msg, 0);
    }
    if (o.overflow) {
        bdb_buf_free(&body);
        bdb_buf_free(&cols);
        char msg[200];
        snprintf(msg, sizeof msg,
                 "query returns more than max-query-samples %llu windows; add a limit, narrow "
                 "the range or use a coarser resolution",
                 (unsigned long long)s->cfg.max_query_samples);
        return respond_json_error(s, c, 422, msg, 0);
    }
    hist_observe(&s->query_latency, now_us() - t0);
    enum MHD_Result res_;
    if (csv) {
        res_ = respond(s, c, 200, "text/csv", body.data, body.len);
        bdb_buf_free(&body);
        bdb_buf_free(&cols);
        return res_;
    }
    bdb_buf full;
    bdb_buf_init(&full);
    char tname[BDB_TENANT_NAME_MAX + 1]; /* the name, not its storage key */
    const char *tn = bdb_tenant_key_name(q->tenant, tname);
    bdb_buf_puts(&full, "{\"tenant\":\"");
    bdb_buf_json_str(&full, tn, strlen(tn));
    bdb_buf_puts(&full, "\",\"device\":\"");
    bdb_buf_json_str(&full, q->device, strlen(q->device));
    bdb_buf_printf(&full,
                   "\",\"tier\":\"%s\",\"resolution\":\"%s\",\"width_ms\":%lld,\"from\":%lld,"
                   "\"to\":%lld,\"order\":\"%s\",\"watermark\":",
                   bdb_res_name(res), asked, (long long)bdb_res_width(res), (long long)q->from,
                   (long long)q->to, q->desc ? "desc" : "asc");
    if (wm == INT64_MIN)
        bdb_buf_puts(&full, "null");
    else
        bdb_buf_printf(&full, "%lld", (long long)wm);
    bdb_buf_printf(&full, ",\"relative_error\":%g,\"count\":%llu,\"columns\":[\"time\",\"metric\"",
                   BDB_SKETCH_ALPHA, (unsigned long long)o.n);
    bdb_buf_append(&full, cols.data, cols.len);
    bdb_buf_puts(&full, ",\"final\"],\"values\":[");
    bdb_buf_free(&cols);
    bdb_buf_append(&full, body.data, body.len);
    bdb_buf_puts(&full, "]}\n");
    bdb_buf_free(&body);
    res_ = respond(s, c, 200, "application/json", full.data, full.len);
    bdb_buf_free(&full);
    return res_;
}

enum MHD_Result h_query(bdb_server *s, struct MHD_Connection *c)
{
    enum MHD_Result res;
    const char *tenant = req_tenant(s, c, &res);
    if (!tenant)
        return res;
    uint64_t t0 = now_us();
    const char *device = arg(c, "device");
    /* Grafana's Prometheus data source with the server root as its URL sends
     * query=1+1 here: tell it where Prometheus' API is instead of "missing device" */
    if ((!device || !*device) && arg(c, "query"))
        return prom_native_query_error(s, c);
    if (!device || !*device)
        return respond_json_error(s, c, 400, "missing parameter 'device'", 0);
    bdb_range_query q = {0};
    q.tenant = tenant;
    q.device = device;
    q.to = bdb_now_ms() + 1;
    q.from = q.to - BDB_MS_HOUR;
    int hf = time_param(s, c, "from", &q.from, &res), ht;
    if (hf < 0 || (ht = time_param(s, c, "to", &q.to, &res)) < 0)
        return res;
    if (hf && !ht) /* open-ended: to the end of the times a sample can have */
        q.to = BDB_QT_MAX_MS;
    if (ht && !hf) /* "the hour before to", not "the last hour", which may end before to */
        q.from = q.to - BDB_MS_HOUR;
    if (q.from >= q.to)
        return respond_json_error(s, c, 400, "'from' must be before 'to'", 0);
    const char *lim = arg(c, "limit");
    if (lim && count_param(lim, UINT64_MAX, &q.limit) != 0)
        return respond_json_error(s, c, 400,
                                  "invalid 'limit': must be an integer "
                                  "0..18446744073709551615 (0: no limit)",
                                  0);
    const char *order = arg(c, "order");
    if (order && strcmp(order, "asc") && strcmp(order, "desc"))
        return respond_json_error(s, c, 400, "'order' must be asc or desc", 0);
    q.desc = order && !strcmp(order, "desc");
    const char *fmt = arg(c, "format");
    if (fmt && strcmp(fmt, "json") && strcmp(fmt, "csv"))
        return respond_json_error(s, c, 400, "'format' must be json or csv", 0);
    int csv = fmt && !strcmp(fmt, "csv");
    /* rollup: resolution=raw|1m|1h|1d|auto (docs/API.md) */
    const char *rs = arg(c, "resolution");
    int tier = BDB_RES_RAW;
    if (rs && strcmp(rs, "auto") && (tier = bdb_res_parse(rs)) < 0)
        return respond_json_error(s, c, 400, "'resolution' must be raw, 1m, 1h, 1d or auto", 0);
    if (rs && !strcmp(rs, "auto")) {
        /* an open end counts up to now: "from last month" is a month, not forever */
        int64_t end = q.to < bdb_now_ms() + 1 ? q.to : bdb_now_ms() + 1;
        tier = bdb_rollup_route(end > q.from ? end - q.from : 0);
    }
    char *mlist = NULL;
    const char *metrics[257];
    const char *m = arg(c, "metric");
    if (m && *m) {
        mlist = strdup(m);
        /* one name more than the limit tells a long list from one at the limit:
         * refuse it rather than silently answer for the first 256 names only */
        size_t nm = split_list(mlist, metrics, 257);
        if (nm > 256) {
            free(mlist);
            return respond_json_error(s, c, 400, "'metric' lists more than 256 names", 0);
        }
        q.nmetrics = sort_unique(metrics, nm);
        q.metrics = metrics;
    }
    /* stats=: which statistics an aggregated answer carries (default all) */
    unsigned stats = STAT_ALL;
    const char *sv = arg(c, "stats");
    if (sv) {
        char err[300];
        if (tier == BDB_RES_RAW && !(rs && !strcmp(rs, "auto"))) {
            free(mlist);
            return respond_json_error(s, c, 400,
                                      "'stats' applies to aggregated windows: add "
                                      "resolution=1m, 1h, 1d or auto",
                                      0);
        }
        if (!(stats = parse_stats(sv, err, sizeof err))) {
            free(mlist);
            return respond_json_error(s, c, 400, err, 0);
        }
    }
    if (tier != BDB_RES_RAW) {
        enum MHD_Result r = query_tier(s, c, &q, (enum bdb_res)tier, rs, csv, stats, t0);
        free(mlist);
        return r;
    }
    bdb_buf body;
    bdb_buf_init(&body);
    struct qout o = {&body, csv, 0, s->cfg.max_query_samples, 0};
    if (csv)
        bdb_buf_puts(&body, "time,metric,value\n");
    else
        bdb_buf_puts(&body, "[");
    bdb_query_stats st;
    int rc = bdb_query_range(s->db, s->pool, &q, row_cb, &o, &st);
    free(mlist);
    atomic_fetch_add(&s->queries, 1);
    int partial = rc == BDB_ERR_PARTIAL; /* the head's rows, marked below */
    if (partial)
        rc = BDB_OK;
    if (rc == BDB_ERR_NOTFOUND) {
        bdb_buf_free(&body);
        char msg[400], tname[BDB_TENANT_NAME_MAX + 1];
        snprintf(msg, sizeof msg, "device '%.200s' not found in tenant '%s'", device,
                 bdb_tenant_key_name(tenant, tname));
        return respond_json_error(s, c, 404, msg, 0);
    }
    if (rc == BDB_ERR_LIMIT) {
        bdb_buf_free(&body);
        char msg[200];
        snprintf(msg, sizeof msg, "range spans more than %d partitions; narrow it",
                 BDB_QUERY_MAX_PARTITIONS);
        return respond_json_error(s, c, 400, msg, 0);
    }
    if (rc != BDB_OK) {
        bdb_buf_free(&body);
        char msg[200];
        snprintf(msg, sizeof msg, "query failed: %s", bdb_strerror(rc));
        return respond_json_error(s, c, 500, msg, 0);
    }
    if (o.overflow) {
        bdb_buf_free(&body);
        char msg[200];
        snprintf(msg, sizeof msg,
                 "query returns more than max-query-samples %llu; add a limit or narrow the "
                 "range",
                 (unsigned long long)s->cfg.max_query_samples);
        return respond_json_error(s, c, 422, msg, 0);
    }
    atomic_fetch_add(&s->query_samples, o.n);
    hist_observe(&s->query_latency, now_us() - t0);
    const char *ph = partial ? H_PARTIAL_HEADER : NULL;
    if (csv) {
        res = respond_hdr(s, c, 200, "text/csv", body.data, body.len, ph, H_PARTIAL_REASON);
        bdb_buf_free(&body);
        return res;
    }
    /* Wrap the rows with the plan's facts; the rows were built first so that a failed
     * query never sends a half response. */
    bdb_buf full;
    bdb_buf_init(&full);
    char tname[BDB_TENANT_NAME_MAX + 1];
    const char *tn = bdb_tenant_key_name(tenant, tname);
    bdb_buf_puts(&full, "{\"tenant\":\"");
    bdb_buf_json_str(&full, tn, strlen(tn));
    bdb_buf_puts(&full, "\",\"device\":\"");
    bdb_buf_json_str(&full, device, strlen(device));
    bdb_buf_printf(
        &full,
        "\",\"tier\":\"raw\",\"resolution\":\"%s\",\"from\":%lld,\"to\":%lld,\"order\":\"%s\","
        "\"partitions\":%llu,\"chunks\":%llu,\"count\":%llu,"
        "\"columns\":[\"time\",\"metric\",\"value\"],\"values\":",
        rs ? rs : "raw", (long long)q.from, (long long)q.to, q.desc ? "desc" : "asc",
        (unsigned long long)st.partitions, (unsigned long long)st.chunks, (unsigned long long)o.n);
    bdb_buf_append(&full, body.data, body.len);
    bdb_buf_puts(&full, "]");
    if (partial)
        bdb_buf_puts(&full, ",\"partial\":true,\"partial_reason\":\"" H_PARTIAL_REASON "\"");
    bdb_buf_puts(&full, "}\n");
    bdb_buf_free(&body);
    res = respond_hdr(s, c, 200, "application/json", full.data, full.len, ph, H_PARTIAL_REASON);
    bdb_buf_free(&full);
    return res;
}

static void device_json(bdb_buf *b, const bdb_device_info *d)
{
    bdb_buf_puts(b, "{\"device\":\"");
    bdb_buf_json_str(b, d->device, strlen(d->device));
    bdb_buf_puts(b, "\",\"tags\":{");
    for (size_t i = 0; i < d->ntags; i++) {
        bdb_buf_puts(b, i ? ",\"" : "\"");
        bdb_buf_json_str(b, d->tags[i].key, d->tags[i].klen);
        bdb_buf_puts(b, "\":\"");
        bdb_buf_json_str(b, d->tags[i].val, d->tags[i].vlen);
        bdb_buf_putc(b, '"');
    }
    bdb_buf_puts(b, "},\"state\":");
    if (d->state) {
        bdb_buf_putc(b, '"');
        bdb_buf_json_str(b, d->state, strlen(d->state));
        bdb_buf_printf(b, "\",\"state_time\":%lld", (long long)d->state_ts);
    } else {
        bdb_buf_puts(b, "null,\"state_time\":null");
    }
    if (d->last_ts != INT64_MIN)
        bdb_buf_printf(b, ",\"first_time\":%lld,\"last_time\":%lld", (long long)d->first_ts,
                       (long long)d->last_ts);
    else
        bdb_buf_puts(b, ",\"first_time\":null,\"last_time\":null");
    bdb_buf_printf(b,
                   ",\"samples\":%llu,\"bucket\":\"%s\",\"bucket_ms\":%lld,\"class\":\"%s\","
                   "\"pinned\":%s,\"bucket_changes\":%zu,\"metrics\":[",
                   (unsigned long long)d->samples, bdb_bucket_name(d->bucket_ms),
                   (long long)d->bucket_ms, bdb_freq_name((enum bdb_freq_class)d->freq_class),
                   d->pinned ? "true" : "false", d->nbucket_changes);
    for (size_t i = 0; i < d->nmetrics; i++) {
        bdb_buf_puts(b, i ? ",\"" : "\"");
        bdb_buf_json_str(b, d->metrics[i], strlen(d->metrics[i]));
        bdb_buf_putc(b, '"');
    }
    bdb_buf_puts(b, "]}");
}

struct list_ctx {
    bdb_buf *b;
    size_t n;
};

static int list_cb(void *ctx, const bdb_device_info *d)
{
    struct list_ctx *l = ctx;
    if (l->n++)
        bdb_buf_putc(l->b, ',');
    device_json(l->b, d);
    return 0;
}

/* Pages of /api/v1/devices and /partitions: default and most entries per page. */
#define DEVICES_PAGE_DEFAULT 1000
#define DEVICES_PAGE_MAX 10000

/* `limit` of a paged listing: 1..DEVICES_PAGE_MAX, DEVICES_PAGE_DEFAULT if absent. */
static int page_limit(bdb_server *s, struct MHD_Connection *c, size_t *limit, enum MHD_Result *res)
{
    *limit = DEVICES_PAGE_DEFAULT;
    const char *lim = arg(c, "limit");
    if (!lim)
        return 0;
    uint64_t v;
    if (count_param(lim, DEVICES_PAGE_MAX, &v) != 0 || v < 1) {
        char msg[120];
        snprintf(msg, sizeof msg, "invalid 'limit': must be an integer 1..%d", DEVICES_PAGE_MAX);
        *res = respond_json_error(s, c, 400, msg, 0);
        return -1;
    }
    *limit = (size_t)v;
    return 0;
}

/* One page of the device listing: the devices after `cursor` (name order), at most
 * limit of them; every device is counted in total. */
struct page_ctx {
    bdb_buf *b;
    const char *cursor;
    size_t limit, n;
    uint64_t total;
    int more;
    char *last;
};

static int page_cb(void *ctx, const bdb_device_info *d)
{
    struct page_ctx *p = ctx;
    p->total++;
    if (p->cursor && strcmp(d->device, p->cursor) <= 0)
        return 0;
    if (p->n == p->limit) {
        p->more = 1;
        return 0; /* keep counting */
    }
    if (p->n++)
        bdb_buf_putc(p->b, ',');
    device_json(p->b, d);
    free(p->last);
    p->last = strdup(d->device);
    if (!p->last)
        abort();
    return 0;
}

struct part_ctx {
    bdb_buf *b;
    size_t limit, n;
    int more;
    int64_t last_end;
};

static int part_cb(void *ctx, int64_t start, int64_t end)
{
    struct part_ctx *p = ctx;
    if (p->n == p->limit) {
        p->more = 1;
        return 1;
    }
    if (p->n++)
        bdb_buf_putc(p->b, ',');
    bdb_buf_printf(p->b, "{\"start\":%lld,\"end\":%lld,\"bucket\":\"%s\"}", (long long)start,
                   (long long)end, bdb_bucket_name(end - start));
    p->last_end = end;
    return 0;
}

static enum MHD_Result device_route(bdb_server *s, struct MHD_Connection *c, const char *tenant,
                                    char *dev, const char *method);

enum MHD_Result h_devices(bdb_server *s, struct MHD_Connection *c, const char *rest,
                          const char *method)
{
    enum MHD_Result res;
    const char *tenant = req_tenant(s, c, &res);
    if (!tenant)
        return res;
    if (*rest && strcmp(rest, "/")) {
        /* A copy of the whole id, however long: a cut one could name another device. */
        char *dev = strdup(rest + 1);
        if (!dev)
            return respond_json_error(s, c, 503, "out of memory", 1);
        res = device_route(s, c, tenant, dev, method);
        free(dev);
        return res;
    }
    size_t limit;
    if (page_limit(s, c, &limit, &res) != 0)
        return res;
    const char *cursor = arg(c, "cursor");
    bdb_buf rows, b;
    bdb_buf_init(&rows);
    bdb_buf_init(&b);
    struct page_ctx p = {&rows, cursor && *cursor ? cursor : NULL, limit, 0, 0, 0, NULL};
    if (bdb_db_list_devices(s->db, tenant, page_cb, &p) == BDB_ERR_NOMEM) {
        free(p.last); /* never a list with devices left out */
        bdb_buf_free(&rows);
        return respond_json_error(s, c, 503, "out of memory listing the devices", 1);
    }
    char tname[BDB_TENANT_NAME_MAX + 1];
    const char *tn = bdb_tenant_key_name(tenant, tname);
    bdb_buf_puts(&b, "{\"tenant\":\"");
    bdb_buf_json_str(&b, tn, strlen(tn));
    bdb_buf_puts(&b, "\",\"devices\":[");
    bdb_buf_append(&b, rows.data, rows.len);
    bdb_buf_printf(&b, "],\"count\":%zu,\"total\":%llu,\"next_cursor\":", p.n,
                   (unsigned long long)p.total);
    if (p.more && p.last) {
        bdb_buf_putc(&b, '"');
        bdb_buf_json_str(&b, p.last, strlen(p.last));
        bdb_buf_putc(&b, '"');
    } else {
        bdb_buf_puts(&b, "null");
    }
    bdb_buf_puts(&b, "}\n");
    res = respond(s, c, 200, "application/json", b.data, b.len);
    free(p.last);
    bdb_buf_free(&rows);
    bdb_buf_free(&b);
    return res;
}

/* /<device>[/partitions|/profile]; the device id is URL-decoded by MHD, so an id may
 * contain '/' (MQTT-style "site/line/unit"): only a final /partitions or /profile names
 * a sub-resource. */
static enum MHD_Result device_route(bdb_server *s, struct MHD_Connection *c, const char *tenant,
                                    char *dev, const char *method)
{
    enum MHD_Result res;
    bdb_buf b;
    bdb_buf_init(&b);
    struct list_ctx l = {&b, 0};
    char *sub = strrchr(dev, '/');
    if (sub && (!strcmp(sub + 1, "partitions") || !strcmp(sub + 1, "profile")))
        *sub++ = '\0';
    else
        sub = NULL;
    if (sub && !strcmp(sub, "profile")) {
        if (strcmp(method, "PUT") && strcmp(method, "POST"))
            return respond_json_error(s, c, 405, "use PUT", 0);
        /* A profile may create the device: the names ingestion accepts, no others. */
        if (!bdb_batch_name_valid(dev, strlen(dev)) || strlen(dev) > s->cfg.max_key_bytes) {
            char why[128];
            snprintf(why, sizeof why,
                     "device name must be 1..%zu bytes of UTF-8 without control characters",
                     s->cfg.max_key_bytes);
            return respond_json_error(s, c, 400, why, 0);
        }
        const char *bk = arg(c, "bucket");
        int64_t size = 0;
        if (bk && strcmp(bk, "auto") && !(size = bdb_bucket_parse(bk)))
            return respond_json_error(s, c, 400, "'bucket' must be auto, 10m, 15m, 1h, 6h or 1d",
                                      0);
        /* Device profile: max_rps (reports per second, 0 = no limit) and
         * expected_interval (a duration, kept for operators). */
        const char *rps_s = arg(c, "max_rps"), *iv_s = arg(c, "expected_interval");
        uint64_t rps = 0;
        int64_t iv = 0;
        if (rps_s) {
            if (count_param(rps_s, BDB_DEVLIMIT_MAX_RPS, &rps) != 0)
                return respond_json_error(s, c, 400, "'max_rps' must be an integer 0..1000000", 0);
        }
        if (iv_s && (bdb_config_parse_duration(iv_s, &iv) != 0 || iv < 0))
            return respond_json_error(
                s, c, 400, "'expected_interval' must be a duration such as 10s or 5m", 0);
        /* A profile may create the device: the tenant's device quota applies. */
        bdb_batch *one = bdb_batch_new();
        bdb_batch_begin(one, dev, strlen(dev), 0, 0);
        bdb_batch_state(one, "", 0);
        bdb_batch_end(one);
        pthread_mutex_t *held;
        if (devq_check(s, c, tenant, one, &held, &res) != 0) {
            bdb_batch_free(one);
            return res;
        }
        bdb_batch_free(one);
        /* Without rate parameters a PUT sets the bucket (auto when absent), as before. */
        int prof = rps_s || iv_s;
        int rc = bk || !prof ? bdb_db_set_device_bucket(s->db, tenant, dev, size) : BDB_OK;
        if (rc == BDB_OK && prof) {
            uint32_t old_rps = 0;
            int64_t old_iv = 0;
            bdb_devlimit_get_profile(s->devlimit, tenant, dev, &old_rps, &old_iv);
            rc = bdb_devlimit_set_profile(s->devlimit, tenant, dev, rps_s ? (uint32_t)rps : old_rps,
                                          iv_s ? iv : old_iv);
        }
        bdb_admit_devices_unlock(held);
        if (rc == BDB_ERR_AGAIN) /* the store (Cassandra) did not confirm the profile */
            return respond_json_error(s, c, 503,
                                      "the storage backend that keeps the device profiles did "
                                      "not confirm the change (not reachable?); the profile is "
                                      "unchanged",
                                      0);
        if (rc != BDB_OK)
            return respond_json_error(s, c, rc == BDB_ERR_READONLY ? 503 : 500, bdb_strerror(rc),
                                      0);
        if (prof && !bk) {
            /* a profile alone does not create the device: answer with the profile */
            uint32_t p_rps = 0;
            int64_t p_iv = 0;
            bdb_devlimit_get_profile(s->devlimit, tenant, dev, &p_rps, &p_iv);
            bdb_buf_puts(&b, "{\"device\":\"");
            bdb_buf_json_str(&b, dev, strlen(dev));
            bdb_buf_printf(&b, "\",\"max_rps\":%u,\"expected_interval_ms\":%lld}\n", p_rps,
                           (long long)p_iv);
            res = respond(s, c, 200, "application/json", b.data, b.len);
            bdb_buf_free(&b);
            return res;
        }
    } else if (sub && strcmp(sub, "partitions")) {
        return respond_json_error(s, c, 404, "unknown device resource", 0);
    }
    if (sub && !strcmp(sub, "partitions")) {
        int64_t from = INT64_MIN, to = INT64_MAX; /* default: the device's data span */
        int64_t cur = INT64_MIN; /* next_cursor of the previous page: a partition start */
        size_t limit;
        if (time_param(s, c, "from", &from, &res) < 0 || time_param(s, c, "to", &to, &res) < 0 ||
            time_param(s, c, "cursor", &cur, &res) < 0 || page_limit(s, c, &limit, &res) != 0)
            return res;
        if (cur != INT64_MIN && cur > from)
            from = cur;
        bdb_buf_puts(&b, "{\"partitions\":[");
        struct part_ctx p = {&b, limit, 0, 0, 0};
        int rc = bdb_db_device_partitions(s->db, tenant, dev, from, to, part_cb, &p);
        if (rc == BDB_ERR_NOTFOUND) {
            bdb_buf_free(&b);
            return respond_json_error(s, c, 404, "device not found", 0);
        }
        bdb_buf_printf(&b, "],\"count\":%zu,\"next_cursor\":", p.n);
        if (p.more)
            bdb_buf_printf(&b, "%lld}\n", (long long)p.last_end);
        else
            bdb_buf_puts(&b, "null}\n");
    } else {
        int rc = bdb_db_get_device(s->db, tenant, dev, list_cb, &l);
        if (rc == BDB_ERR_NOTFOUND) {
            bdb_buf_free(&b);
            return respond_json_error(s, c, 404, "device not found", 0);
        }
        bdb_buf_putc(&b, '\n');
    }
    res = respond(s, c, 200, "application/json", b.data, b.len);
    bdb_buf_free(&b);
    return res;
}

/* ---------------------------------------------------------------- late data */

struct late_ctx {
    bdb_buf *b;
    uint64_t n, limit;
};

static int late_row(void *ctx, const bdb_late_event *e)
{
    struct late_ctx *l = ctx;
    char t[40], nw[40], ar[40];
    bdb_format_time_ms(e->ts, t, sizeof t);
    bdb_format_time_ms(e->newest, nw, sizeof nw);
    bdb_format_time_ms(e->arrived, ar, sizeof ar);
    bdb_buf_puts(l->b, l->n ? ",{\"device\":\"" : "{\"device\":\"");
    bdb_buf_json_str(l->b, e->device, strlen(e->device));
    bdb_buf_printf(l->b,
                   "\",\"time\":\"%s\",\"time_ms\":%lld,\"device_newest\":\"%s\","
                   "\"behind_ms\":%lld,\"arrived\":\"%s\"}",
                   t, (long long)e->ts, nw, (long long)(e->newest - e->ts), ar);
    return ++l->n >= l->limit;
}

enum MHD_Result h_late(bdb_server *s, struct MHD_Connection *c)
{
    enum MHD_Result res;
    const char *tenant = req_tenant(s, c, &res);
    if (!tenant)
        return res;
    const char *device = arg(c, "device");
    struct late_ctx l = {NULL, 0, 100};
    const char *lim = arg(c, "limit");
    if (lim) {
        if (count_param(lim, 256, &l.limit) != 0 || l.limit == 0)
            return respond_json_error(s, c, 400, "'limit' must be 1..256", 0);
    }
    bdb_late_stats st;
    bdb_db_late_get_stats(s->db, &st);
    bdb_buf b;
    bdb_buf_init(&b);
    l.b = &b;
    char tname[BDB_TENANT_NAME_MAX + 1];
    const char *tn = bdb_tenant_key_name(tenant, tname);
    bdb_buf_puts(&b, "{\"tenant\":\"");
    bdb_buf_json_str(&b, tn, strlen(tn));
    bdb_buf_printf(&b,
                   "\",\"threshold_ms\":%lld,\"late_events_total\":%llu,"
                   "\"recompute_pending\":%llu,\"events\":[",
                   (long long)st.threshold_ms, (unsigned long long)st.late_events,
                   (unsigned long long)st.pending);
    bdb_db_late_recent(s->db, tenant, device && *device ? device : NULL, late_row, &l);
    bdb_buf_puts(&b, "]}\n");
    enum MHD_Result r = respond(s, c, 200, "application/json", b.data, b.len);
    bdb_buf_free(&b);
    return r;
}

void h_late_metrics(bdb_server *s, bdb_buf *b)
{
    bdb_late_stats st;
    bdb_db_late_get_stats(s->db, &st);
    bdb_buf_puts(b, "# HELP bucketdb_late_events_total Events later than late_threshold behind "
                    "their device's newest, since start.\n"
                    "# TYPE bucketdb_late_events_total counter\n");
    bdb_buf_printf(b, "bucketdb_late_events_total %llu\n", (unsigned long long)st.late_events);
    bdb_buf_puts(b, "# HELP bucketdb_tier_windows_recomputed_total Rollup windows recomputed "
                    "from raw data (late data, rewrites), by tier.\n"
                    "# TYPE bucketdb_tier_windows_recomputed_total counter\n");
    for (int k = 0; k < BDB_TIERS; k++)
        bdb_buf_printf(b, "bucketdb_tier_windows_recomputed_total{tier=\"%s\"} %llu\n",
                       bdb_res_name((enum bdb_res)(k + 1)), (unsigned long long)st.recomputed[k]);
    bdb_buf_puts(b, "# HELP bucketdb_tier_recompute_pending Dirty minutes waiting for the "
                    "next flush.\n# TYPE bucketdb_tier_recompute_pending gauge\n");
    bdb_buf_printf(b, "bucketdb_tier_recompute_pending %llu\n", (unsigned long long)st.pending);
    bdb_buf_puts(b, "# HELP bucketdb_tier_recompute_fallbacks_total Dirty minutes kept partial "
                    "because the finer data had expired.\n"
                    "# TYPE bucketdb_tier_recompute_fallbacks_total counter\n");
    bdb_buf_printf(b, "bucketdb_tier_recompute_fallbacks_total %llu\n",
                   (unsigned long long)st.fallbacks);
}
