/* h_fleet: fleet aggregates over HTTP (docs/API.md#fleet-aggregates):
 *   GET /api/v1/fleet?metric=M[&from&to&resolution=1h|1d]       pre-computed (db_fleet.h)
 *   GET /api/v1/fleet/query?metric=M&tag=k:v...[&from&to&resolution=1m|1h|1d]
 *                                                               ad hoc over device tiers
 * Per window: devices, readings, min, max, avg, stddev (population) and sum, over the
 * readings of every device. Same authentication and tenant rules as /api/v1/query. */
#include "server/server_int.h"

#include "agg/fleet.h"
#include "bucketdb/bdb.h"
#include "common/timeutil.h"
#include "model/bucket.h"
#include "query/fleetq.h"
#include "storage/embedded/fleet/db_fleet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FLEET_MAX_TAGS 16

struct tags {
    bdb_kv kv[FLEET_MAX_TAGS];
    size_t n;
    int bad, many;
};

static enum MHD_Result tag_it(void *ctx, enum MHD_ValueKind kind, const char *key, size_t key_size,
                              const char *value, size_t value_size)
{
    (void)kind;
    (void)key_size;
    (void)value_size;
    struct tags *t = ctx;
    if (strcmp(key, "tag") != 0)
        return MHD_YES;
    const char *colon = value ? strchr(value, ':') : NULL;
    if (!colon || colon == value) {
        t->bad = 1;
        return MHD_NO;
    }
    if (t->n == FLEET_MAX_TAGS) {
        t->many = 1;
        return MHD_NO;
    }
    t->kv[t->n++] = (bdb_kv){value, (size_t)(colon - value), colon + 1, strlen(colon + 1)};
    return MHD_YES;
}

static void json_num(bdb_buf *b, double v)
{
    if (v != v || v > 1.7976931348623157e308 || v < -1.7976931348623157e308)
        bdb_buf_puts(b, "null");
    else
        bdb_buf_double(b, v);
}

static void json_str(bdb_buf *b, const char *s, size_t n)
{
    bdb_buf_putc(b, '"');
    bdb_buf_json_str(b, s, n);
    bdb_buf_putc(b, '"');
}

static enum MHD_Result fleet(bdb_server *s, struct MHD_Connection *c, const char *tenant, int adhoc)
{
    uint64_t t0 = now_us();
    const char *metric = arg(c, "metric");
    if (!metric || !*metric)
        return respond_json_error(s, c, 400, "missing parameter 'metric'", 0);
    const char *rs = arg(c, "resolution");
    int res = rs ? bdb_res_parse(rs) : BDB_RES_1H;
    if (res != BDB_RES_1H && res != BDB_RES_1D && !(adhoc && res == BDB_RES_1M))
        return respond_json_error(
            s, c, 400,
            adhoc ? "'resolution' must be 1m, 1h or 1d" : "'resolution' must be 1h or 1d", 0);
    int64_t width = bdb_res_width((enum bdb_res)res);
    /* default range: the last day of hours, 30 days of days, an hour of minutes */
    int64_t span = res == BDB_RES_1D   ? 30 * BDB_MS_DAY
                   : res == BDB_RES_1H ? BDB_MS_DAY
                                       : BDB_MS_HOUR;
    int64_t to = bdb_now_ms() + 1, from = 0;
    enum MHD_Result bad;
    int fr = time_param(s, c, "from", &from, &bad);
    if (fr < 0 || time_param(s, c, "to", &to, &bad) < 0)
        return bad;
    if (!fr)
        from = to - span; /* to is in range: this cannot overflow */
    if (from >= to)
        return respond_json_error(s, c, 400, "'from' must be before 'to'", 0);
    struct tags tg = {.n = 0};
    if (adhoc) {
        args_each(c, tag_it, &tg);
        if (tg.bad)
            return respond_json_error(s, c, 400, "invalid 'tag': use tag=key:value", 0);
        if (tg.many) {
            char msg[100];
            snprintf(msg, sizeof msg, "more than %d 'tag' parameters", FLEET_MAX_TAGS);
            return respond_json_error(s, c, 400, msg, 0);
        }
    }
    const char *fmt = arg(c, "format");
    if (fmt && strcmp(fmt, "json") && strcmp(fmt, "csv"))
        return respond_json_error(s, c, 400, "'format' must be json or csv", 0);
    int csv = fmt && !strcmp(fmt, "csv");
    bdb_fleet f;
    bdb_fleet_init(&f, width);
    uint64_t matched = 0;
    size_t recomputed = 0;
    int rc;
    if (adhoc) {
        bdb_fleet_query q = {.tenant = tenant,
                             .metric = metric,
                             .tags = tg.kv,
                             .ntags = tg.n,
                             .res = (enum bdb_res)res,
                             .from = from,
                             .to = to};
        rc = bdb_query_fleet(s->db, s->pool, &q, &f, &matched);
    } else {
        rc = bdb_query_fleet_tables(s->db, s->pool, tenant, metric, (enum bdb_res)res, from, to, &f,
                                    &recomputed);
    }
    atomic_fetch_add(&s->queries, 1);
    if (rc != BDB_OK) {
        bdb_fleet_free(&f);
        char msg[200];
        if (rc == BDB_ERR_LIMIT) {
            snprintf(msg, sizeof msg, "more than %d devices match; add a 'tag' to narrow the group",
                     BDB_FLEETQ_MAX_DEVICES);
            return respond_json_error(s, c, 422, msg, 0);
        }
        snprintf(msg, sizeof msg, "fleet query failed: %s", bdb_strerror(rc));
        return respond_json_error(s, c, 500, msg, 0);
    }
    if (f.n > s->cfg.max_query_samples) {
        bdb_fleet_free(&f);
        char msg[200];
        snprintf(msg, sizeof msg,
                 "query returns more than max-query-samples %llu windows; narrow the range or "
                 "use a coarser resolution",
                 (unsigned long long)s->cfg.max_query_samples);
        return respond_json_error(s, c, 422, msg, 0);
    }
    bdb_buf b;
    bdb_buf_init(&b);
    if (csv) {
        bdb_buf_puts(&b, "time,devices,readings,min,max,avg,stddev,sum\n");
    } else {
        char tname[BDB_TENANT_NAME_MAX + 1]; /* the name, not its storage key */
        const char *tn = bdb_tenant_key_name(tenant, tname);
        bdb_buf_puts(&b, "{\"tenant\":");
        json_str(&b, tn, strlen(tn));
        bdb_buf_puts(&b, ",\"metric\":");
        json_str(&b, metric, strlen(metric));
        bdb_buf_printf(&b,
                       ",\"source\":\"%s\",\"resolution\":\"%s\",\"width_ms\":%lld,\"from\":%lld,"
                       "\"to\":%lld",
                       adhoc ? "device_tiers" : "fleet_tables", bdb_res_name((enum bdb_res)res),
                       (long long)width, (long long)from, (long long)to);
        if (adhoc) {
            bdb_buf_puts(&b, ",\"tags\":{");
            for (size_t i = 0; i < tg.n; i++) {
                if (i)
                    bdb_buf_putc(&b, ',');
                json_str(&b, tg.kv[i].key, tg.kv[i].klen);
                bdb_buf_putc(&b, ':');
                json_str(&b, tg.kv[i].val, tg.kv[i].vlen);
            }
            bdb_buf_printf(&b, "},\"matched_devices\":%llu", (unsigned long long)matched);
        } else {
            bdb_buf_printf(&b, ",\"recomputed\":%zu", recomputed);
        }
        bdb_buf_printf(&b,
                       ",\"count\":%zu,\"columns\":[\"time\",\"devices\",\"readings\",\"min\","
                       "\"max\",\"avg\",\"stddev\",\"sum\"],\"values\":[",
                       f.n);
    }
    for (size_t i = 0; i < f.n; i++) {
        bdb_fleet_row r;
        bdb_fleet_row_of(&f, &f.w[i], &r);
        const double v[] = {r.min, r.max, r.avg, r.stddev, r.sum};
        if (csv) {
            bdb_buf_printf(&b, "%lld,%llu,%llu", (long long)r.start, (unsigned long long)r.devices,
                           (unsigned long long)r.readings);
        } else {
            bdb_buf_printf(&b, "%s[%lld,%llu,%llu", i ? "," : "", (long long)r.start,
                           (unsigned long long)r.devices, (unsigned long long)r.readings);
        }
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
            bdb_buf_putc(&b, ',');
            json_num(&b, v[k]);
        }
        bdb_buf_puts(&b, csv ? "\n" : "]");
    }
    if (!csv)
        bdb_buf_puts(&b, "]}\n");
    bdb_fleet_free(&f);
    hist_observe(&s->query_latency, now_us() - t0);
    enum MHD_Result out = respond(s, c, 200, csv ? "text/csv" : "application/json", b.data, b.len);
    bdb_buf_free(&b);
    return out;
}

enum MHD_Result h_fleet(bdb_server *s, struct MHD_Connection *c, const char *rest,
                        const char *method)
{
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return respond_json_error(s, c, 405, "use GET", 0);
    int adhoc;
    if (!*rest)
        adhoc = 0;
    else if (!strcmp(rest, "/query"))
        adhoc = 1;
    else {
        char msg[300];
        snprintf(msg, sizeof msg,
                 "no such endpoint: /api/v1/fleet%.200s (use /api/v1/fleet or "
                 "/api/v1/fleet/query)",
                 rest);
        return respond_json_error(s, c, 404, msg, 0);
    }
    enum MHD_Result res;
    const char *tenant = req_tenant(s, c, &res);
    if (!tenant)
        return res;
    return fleet(s, c, tenant, adhoc);
}
