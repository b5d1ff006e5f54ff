/* h_prom: Prometheus' HTTP query API under /prometheus (docs/PROMQL.md), for
 * Grafana's Prometheus data source: query, query_range, labels, label/<name>/values,
 * series, metadata, status/buildinfo. Answers and errors have Prometheus' JSON shape
 * ({"status":"success","data":...} / {"status":"error","errorType","error"}) and
 * status codes (400 bad_data, 422 execution, 404, 405, 500). The tenant is the
 * request's, as for every other endpoint (token, or tenant/db parameter). */
#include "server/server_int.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"
#include "query/promql/pql_cache.h"
#include "query/promql/pql_eval.h"
#include "query/promql/pql_lex.h"
#include "query/promql/pql_parse.h"
#include "query/promql/pql_source_db.h"
#include "server/tenants/tenants.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The Prometheus version reported by buildinfo: the one whose semantics this API
 * follows and whose answers tests/integration/test_promql_equality.py compares with. */
#define PROM_COMPAT_VERSION "2.42.0"

static enum MHD_Result prom_error(bdb_server *s, struct MHD_Connection *c, unsigned status,
                                  const char *type, const char *msg)
{
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_printf(&b, "{\"status\":\"error\",\"errorType\":\"%s\",\"error\":\"", type);
    bdb_buf_json_str(&b, msg, strlen(msg));
    bdb_buf_puts(&b, "\"}\n");
    enum MHD_Result r = respond(s, c, status, "application/json", b.data, b.len);
    bdb_buf_free(&b);
    return r;
}

enum MHD_Result prom_native_query_error(bdb_server *s, struct MHD_Connection *c)
{
    return prom_error(s, c, 400, "bad_data",
                      "this is bucketdb's native query API (GET /api/v1/query?device=...), not "
                      "Prometheus': set the Grafana Prometheus data source URL to "
                      "http://<host>:<port>/prometheus (docs/PROMQL.md)");
}

static enum MHD_Result bad_data(bdb_server *s, struct MHD_Connection *c, const char *msg)
{
    return prom_error(s, c, 400, "bad_data", msg);
}

/* A Prometheus time: Unix seconds with a fraction, or RFC 3339. 0 with *ms, 1 when
 * absent, -1 when invalid (msg filled). */
static int prom_time(struct MHD_Connection *c, const char *name, int64_t *ms, char *msg,
                     size_t msglen)
{
    const char *v = arg(c, name);
    if (!v || !*v)
        return 1;
    char *end;
    double sec = strtod(v, &end);
    int64_t t;
    if (end != v && !*end && !isspace((unsigned char)*v)) {
        if (isfinite(sec) && sec * 1000.0 >= (double)BDB_QT_MIN_MS &&
            sec * 1000.0 <= (double)BDB_QT_MAX_MS) {
            *ms = (int64_t)llround(sec * 1000.0);
            return 0;
        }
    } else if (bdb_parse_time_ms(v, &t) == BDB_OK && t >= BDB_QT_MIN_MS && t <= BDB_QT_MAX_MS &&
               strchr(v, '-') && strchr(v, 'T')) {
        *ms = t;
        return 0;
    }
    snprintf(msg, msglen,
             "invalid parameter \"%s\": cannot parse \"%.100s\" to a valid timestamp (Unix "
             "seconds or RFC 3339, years 1677..2262)",
             name, v);
    return -1;
}

/* step: seconds (a float) or a duration such as 15s */
static int prom_step(struct MHD_Connection *c, int64_t *ms, char *msg, size_t msglen)
{
    const char *v = arg(c, "step");
    if (!v || !*v) {
        snprintf(msg, msglen, "invalid parameter \"step\": cannot parse \"\" to a valid duration");
        return -1;
    }
    char *end;
    double sec = strtod(v, &end);
    if (end != v && !*end && isfinite(sec)) {
        if (sec * 1000.0 > (double)PQL_MAX_DURATION_MS) {
            snprintf(msg, msglen, "invalid parameter \"step\": longer than 100 years");
            return -1;
        }
        *ms = (int64_t)llround(sec * 1000.0);
    } else if (pql_parse_duration(v, strlen(v), ms) != 0) {
        snprintf(msg, msglen,
                 "invalid parameter \"step\": cannot parse \"%.100s\" to a valid duration "
                 "(seconds, or such as 15s, at most 100 years)",
                 v);
        return -1;
    }
    if (*ms <= 0) {
        snprintf(msg, msglen,
                 "zero or negative query resolution step widths are not accepted. "
                 "Try a positive integer");
        return -1;
    }
    return 0;
}

/* Times as Prometheus writes them: seconds, with the milliseconds when there are. */
static void put_time(bdb_buf *b, int64_t ms)
{
    /* |ms| fits: times are within BDB_QT_MIN_MS..BDB_QT_MAX_MS */
    uint64_t a = ms < 0 ? (uint64_t)0 - (uint64_t)ms : (uint64_t)ms;
    unsigned frac = (unsigned)(a % 1000);
    if (ms < 0)
        bdb_buf_putc(b, '-');
    bdb_buf_u64(b, a / 1000);
    if (!frac)
        return;
    char f[4] = {'.', (char)('0' + frac / 100), (char)('0' + frac / 10 % 10),
                 (char)('0' + frac % 10)};
    size_t n = 4;
    while (f[n - 1] == '0') /* frac > 0: a digit other than 0 stops it */
        n--;
    bdb_buf_append(b, f, n);
}

/* A sample value as Go's strconv.FormatFloat(v, 'f', -1, 64): the shortest digits
 * that read back to v, never an exponent; NaN, +Inf, -Inf by name. */
static void put_value(bdb_buf *b, double v)
{
    if (isnan(v)) {
        bdb_buf_puts(b, "\"NaN\"");
        return;
    }
    if (isinf(v)) {
        bdb_buf_puts(b, v > 0 ? "\"+Inf\"" : "\"-Inf\"");
        return;
    }
    /* In [1e-4, 1e15) bdb_buf_double writes the shortest digits that read back in
     * fixed notation, as Go does, without printf (which was most of a range answer's
     * time); outside it, it would use an exponent, which Go's 'f' format never does. */
    double a = fabs(v);
    if (a == 0 || (a >= 1e-4 && a < 1e15)) {
        bdb_buf_putc(b, '"');
        bdb_buf_double(b, v);
        bdb_buf_putc(b, '"');
        return;
    }
    /* The fewest significant digits p that read back to v (17 always do), found by
     * bisection: if p digits read back, so do p + 1 (the nearest p + 1 digit decimal is
     * at least as near as the p digit one). A mean has 15 to 17 digits; trying each p
     * from 1 was most of a range query's time. */
    char e[40];
    int p = 1, hi = 17;
    while (p < hi) {
        int mid = (p + hi) / 2;
        snprintf(e, sizeof e, "%.*e", mid - 1, v);
        if (strtod(e, NULL) == v)
            hi = mid;
        else
            p = mid + 1;
    }
    snprintf(e, sizeof e, "%.*e", p - 1, v);
    /* Those p digits in fixed notation: "%.*f" would print the double's exact binary
     * value, every digit of 1e300 */
    char dig[20];
    size_t nd = 0;
    const char *q = e;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9')
            dig[nd++] = *q;
    int ex = atoi(q + 1);
    bdb_buf_puts(b, v < 0 ? "\"-" : "\"");
    if (ex < 0) {
        bdb_buf_puts(b, "0.");
        for (int z = -1; z > ex; z--)
            bdb_buf_putc(b, '0');
        bdb_buf_append(b, dig, nd);
    } else if ((size_t)ex + 1 >= nd) {
        bdb_buf_append(b, dig, nd);
        for (size_t z = nd; z < (size_t)ex + 1; z++)
            bdb_buf_putc(b, '0');
    } else {
        bdb_buf_append(b, dig, (size_t)ex + 1);
        bdb_buf_putc(b, '.');
        bdb_buf_append(b, dig + ex + 1, nd - (size_t)ex - 1);
    }
    bdb_buf_putc(b, '"');
}

static void put_labels(bdb_buf *b, const pql_labels *l)
{
    bdb_buf_putc(b, '{');
    for (size_t i = 0; i < l->n; i++) {
        bdb_buf_puts(b, i ? ",\"" : "\"");
        bdb_buf_json_str(b, l->v[i].name, strlen(l->v[i].name));
        bdb_buf_puts(b, "\":\"");
        bdb_buf_json_str(b, l->v[i].value, strlen(l->v[i].value));
        bdb_buf_putc(b, '"');
    }
    bdb_buf_putc(b, '}');
}

static void put_point(bdb_buf *b, int first, int64_t t, double v)
{
    bdb_buf_puts(b, first ? "[" : ",[");
    put_time(b, t);
    bdb_buf_putc(b, ',');
    put_value(b, v);
    bdb_buf_putc(b, ']');
}

static void put_result(bdb_buf *b, const pql_result *r, int range)
{
    bdb_buf_puts(b, "{\"status\":\"success\",\"data\":{\"resultType\":");
    if (r->type == PQL_MATRIX) {
        bdb_buf_puts(b, "\"matrix\",\"result\":[");
        for (size_t i = 0; i < r->raw.n; i++) {
            const pql_series *s = &r->raw.s[i];
            bdb_buf_puts(b, i ? ",{\"metric\":" : "{\"metric\":");
            put_labels(b, &s->labels);
            bdb_buf_puts(b, ",\"values\":[");
            for (size_t k = 0; k < s->n; k++)
                put_point(b, !k, s->ts[k], s->v[k]);
            bdb_buf_puts(b, "]}");
        }
    } else if (r->type == PQL_SCALAR && !range) {
        bdb_buf_puts(b, "\"scalar\",\"result\":");
        put_point(b, 1, r->start, r->scalar[0]);
        bdb_buf_puts(b, "}}\n");
        return;
    } else if (r->type == PQL_SCALAR) { /* a range query of a scalar: one series, no labels */
        bdb_buf_puts(b, "\"matrix\",\"result\":[{\"metric\":{},\"values\":[");
        for (size_t k = 0; k < r->nsteps; k++)
            put_point(b, !k, r->start + (int64_t)k * r->step, r->scalar[k]);
        bdb_buf_puts(b, "]}");
    } else {
        bdb_buf_puts(b, range ? "\"matrix\",\"result\":[" : "\"vector\",\"result\":[");
        for (size_t i = 0; i < r->n; i++) {
            const pql_out_series *s = &r->s[i];
            bdb_buf_puts(b, i ? ",{\"metric\":" : "{\"metric\":");
            put_labels(b, &s->labels);
            if (!range) {
                bdb_buf_puts(b, ",\"value\":");
                put_point(b, 1, r->start, s->v[0]);
                bdb_buf_putc(b, '}');
                continue;
            }
            bdb_buf_puts(b, ",\"values\":[");
            int first = 1;
            for (size_t k = 0; k < r->nsteps; k++)
                if (s->has[k]) {
                    put_point(b, first, r->start + (int64_t)k * r->step, s->v[k]);
                    first = 0;
                }
            bdb_buf_puts(b, "]}");
        }
    }
    bdb_buf_puts(b, "]}}\n");
}

/* The source over the engine for a tenant: its tiers' coverage from the server's tier
 * retention and the tenant's own (docs/TENANCY.md). */
static void db_source(bdb_server *s, const char *tenant, pql_db_source *ctx)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->db = s->db;
    ctx->pool = s->pool;
    ctx->tenant = tenant;
    ctx->lateness_ms = s->cfg.agg_allowed_lateness;
    const int64_t conf[3] = {s->cfg.tier_retention_1m, s->cfg.tier_retention_1h,
                             s->cfg.tier_retention_1d};
    bdb_clock clk = server_clock(s);
    int64_t now = bdb_clock_now(&clk);
    for (int i = 0; i < 3; i++) {
        int64_t ttl = bdb_tenants_tier_retention(s->tenants, tenant, i, conf[i] > 0 ? conf[i] : 0);
        ctx->tier_oldest[i] = ttl > 0 && now > INT64_MIN + ttl ? now - ttl : INT64_MIN;
    }
}

static enum MHD_Result run_query(bdb_server *s, struct MHD_Connection *c, const char *tenant,
                                 int range)
{
    uint64_t t0 = now_us();
    char msg[600];
    const char *q = arg(c, "query");
    if (!q || !*q)
        return bad_data(s, c,
                        "invalid parameter \"query\": unknown position: parse error: no "
                        "expression found in input");
    pql_eval_opts o = {0};
    o.max_samples = s->cfg.max_query_samples;
    o.max_points = s->cfg.max_query_samples;
    if (range) {
        int rc;
        if ((rc = prom_time(c, "start", &o.start, msg, sizeof msg)) != 0 ||
            (rc = prom_time(c, "end", &o.end, msg, sizeof msg)) != 0) {
            if (rc > 0)
                snprintf(msg, sizeof msg,
                         "invalid parameter \"%s\": cannot parse \"\" to a "
                         "valid timestamp",
                         arg(c, "start") && *arg(c, "start") ? "end" : "start");
            return bad_data(s, c, msg);
        }
        if (o.end < o.start)
            return bad_data(s, c, "end timestamp must not be before start time");
        if (prom_step(c, &o.step, msg, sizeof msg) != 0)
            return bad_data(s, c, msg);
        if ((uint64_t)(o.end - o.start) / (uint64_t)o.step > PQL_MAX_STEPS)
            return bad_data(s, c,
                            "exceeded maximum resolution of 11,000 points per timeseries. "
                            "Try decreasing the query resolution (?step=XX)");
    } else {
        bdb_clock clk = server_clock(s);
        o.start = bdb_clock_now(&clk);
        if (prom_time(c, "time", &o.start, msg, sizeof msg) < 0)
            return bad_data(s, c, msg);
        o.end = o.start;
        o.step = 1;
    }
    pql_node *expr;
    char perr[400];
    if (pql_parse(q, strlen(q), &expr, perr, sizeof perr) != 0) {
        snprintf(msg, sizeof msg, "invalid parameter \"query\": %s", perr);
        return bad_data(s, c, msg);
    }
    pql_db_source ctx;
    db_source(s, tenant, &ctx);
    pql_source src;
    pql_db_source_init(&src, &ctx);
    pql_result res;
    /* a range query's settled steps from the group cache (pql_cache.h) */
    bdb_clock clk = server_clock(s);
    pql_cache_ctx cc = {range ? s->groups : NULL, s->db,          tenant, q,
                        bdb_clock_now(&clk),      ctx.tier_oldest};
    int rc = pql_eval_cached(expr, &src, &o, &cc, &res, msg, sizeof msg);
    pql_free(expr);
    atomic_fetch_add(&s->queries, 1);
    if (rc != PQL_E_OK)
        return rc == PQL_E_BAD_DATA      ? bad_data(s, c, msg)
               : rc == PQL_E_EXECUTION   ? prom_error(s, c, 422, "execution", msg)
               : rc == PQL_E_UNAVAILABLE ? prom_error(s, c, 503, "unavailable", msg)
                                         : prom_error(s, c, 500, "internal", msg);
    bdb_buf b;
    bdb_buf_init(&b);
    put_result(&b, &res, range);
    pql_result_free(&res);
    hist_observe(&s->query_latency, now_us() - t0);
    enum MHD_Result r = respond(s, c, 200, "application/json", b.data, b.len);
    bdb_buf_free(&b);
    return r;
}

/* ---- labels, label values, series: over the catalog, no samples read ---- */

struct strset {
    char **v;
    size_t n, cap;
    int nomem;
};

static void strset_add(struct strset *ss, const char *s)
{
    if (ss->nomem)
        return;
    if (ss->n == ss->cap) {
        size_t cap = ss->cap ? ss->cap * 2 : 64;
        char **v = realloc(ss->v, cap * sizeof *v);
        if (!v) {
            ss->nomem = 1;
            return;
        }
        ss->v = v;
        ss->cap = cap;
    }
    if (!(ss->v[ss->n] = strdup(s)))
        ss->nomem = 1;
    else
        ss->n++;
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void strset_finish(struct strset *ss)
{
    if (!ss->n)
        return;
    qsort(ss->v, ss->n, sizeof *ss->v, str_cmp);
    size_t k = 1;
    for (size_t i = 1; i < ss->n; i++) {
        if (strcmp(ss->v[i], ss->v[k - 1]))
            ss->v[k++] = ss->v[i];
        else
            free(ss->v[i]);
    }
    ss->n = k;
}

static void strset_free(struct strset *ss)
{
    for (size_t i = 0; i < ss->n; i++)
        free(ss->v[i]);
    free(ss->v);
}

enum meta_kind { META_LABELS, META_VALUES, META_SERIES };

struct meta_ctx {
    enum meta_kind kind;
    const char *label;
    struct strset out;
};

static int meta_cb(void *ctx, const pql_label *l, size_t n)
{
    struct meta_ctx *m = ctx;
    if (m->kind == META_SERIES) {
        /* one label set, encoded as JSON now: equal sets dedupe as equal strings */
        pql_labels ls = {(pql_label *)l, n};
        pql_label *sorted = malloc((n ? n : 1) * sizeof *sorted);
        if (!sorted) {
            m->out.nomem = 1;
            return 1;
        }
        memcpy(sorted, l, n * sizeof *l);
        for (size_t i = 1; i < n; i++)
            for (size_t j = i; j > 0 && strcmp(sorted[j - 1].name, sorted[j].name) > 0; j--) {
                pql_label t = sorted[j];
                sorted[j] = sorted[j - 1];
                sorted[j - 1] = t;
            }
        ls.v = sorted;
        bdb_buf b;
        bdb_buf_init(&b);
        put_labels(&b, &ls);
        bdb_buf_putc(&b, '\0');
        strset_add(&m->out, (const char *)b.data);
        bdb_buf_free(&b);
        free(sorted);
    }
    for (size_t i = 0; i < n && m->kind != META_SERIES; i++) {
        if (m->kind == META_LABELS)
            strset_add(&m->out, l[i].name);
        else if (!strcmp(l[i].name, m->label))
            strset_add(&m->out, l[i].value);
    }
    return m->out.nomem;
}

struct match_list {
    const char *v[64];
    size_t n;
    int over;
};

static enum MHD_Result match_it(void *cls, enum MHD_ValueKind kind, const char *key,
                                size_t key_size, const char *value, size_t value_size)
{
    (void)kind;
    (void)key_size;
    (void)value_size;
    struct match_list *m = cls;
    if (key && value && !strcmp(key, "match[]")) {
        if (m->n == sizeof m->v / sizeof m->v[0])
            m->over = 1;
        else
            m->v[m->n++] = value;
    }
    return MHD_YES;
}

static enum MHD_Result run_meta(bdb_server *s, struct MHD_Connection *c, const char *tenant,
                                enum meta_kind kind, const char *label)
{
    char msg[600];
    struct match_list ml = {{0}, 0, 0};
    args_each(c, match_it, &ml);
    if (ml.over)
        return bad_data(s, c, "more than 64 match[] parameters");
    if (kind == META_SERIES && !ml.n)
        return bad_data(s, c, "no match[] parameter provided");
    int64_t from = INT64_MIN, to = INT64_MAX;
    if (prom_time(c, "start", &from, msg, sizeof msg) < 0 ||
        prom_time(c, "end", &to, msg, sizeof msg) < 0)
        return bad_data(s, c, msg);
    struct meta_ctx m = {kind, label, {0}};
    pql_db_source ctx;
    db_source(s, tenant, &ctx);
    int rc = BDB_OK;
    for (size_t i = 0; i < (ml.n ? ml.n : 1) && rc == BDB_OK; i++) {
        pql_node *sel = NULL;
        pql_matchset *ms = NULL;
        if (ml.n) {
            char perr[400];
            if (pql_parse(ml.v[i], strlen(ml.v[i]), &sel, perr, sizeof perr) != 0 ||
                sel->kind != PQL_SELECTOR || sel->range_ms) {
                if (sel)
                    snprintf(perr, sizeof perr, "match[] must be a vector selector");
                pql_free(sel);
                strset_free(&m.out);
                snprintf(msg, sizeof msg, "invalid parameter \"match[]\": %s", perr);
                return bad_data(s, c, msg);
            }
            if (pql_matchset_compile(sel, &ms, msg, sizeof msg) != 0) {
                pql_free(sel);
                strset_free(&m.out);
                return bad_data(s, c, msg);
            }
        }
        rc = pql_db_each_series(&ctx, ms, from, to, meta_cb, &m);
        pql_matchset_free(ms);
        pql_free(sel);
    }
    if (rc != BDB_OK || m.out.nomem) {
        strset_free(&m.out);
        return prom_error(s, c, 503, "internal", "out of memory listing the series");
    }
    strset_finish(&m.out);
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_puts(&b, "{\"status\":\"success\",\"data\":[");
    for (size_t i = 0; i < m.out.n; i++) {
        if (i)
            bdb_buf_putc(&b, ',');
        if (kind == META_SERIES) {
            bdb_buf_puts(&b, m.out.v[i]);
            continue;
        }
        bdb_buf_putc(&b, '"');
        bdb_buf_json_str(&b, m.out.v[i], strlen(m.out.v[i]));
        bdb_buf_putc(&b, '"');
    }
    bdb_buf_puts(&b, "]}\n");
    strset_free(&m.out);
    enum MHD_Result r = respond(s, c, 200, "application/json", b.data, b.len);
    bdb_buf_free(&b);
    return r;
}

static enum MHD_Result buildinfo(bdb_server *s, struct MHD_Connection *c)
{
    char body[400];
    int n = snprintf(body, sizeof body,
                     "{\"status\":\"success\",\"data\":{\"version\":\"%s\",\"revision\":"
                     "\"bucketdb-%s\",\"branch\":\"\",\"buildUser\":\"bucketdb\",\"buildDate\":"
                     "\"\",\"goVersion\":\"\"}}\n",
                     PROM_COMPAT_VERSION, BDB_VERSION);
    return respond(s, c, 200, "application/json", body, (size_t)n);
}

enum MHD_Result h_prom(bdb_server *s, struct MHD_Connection *c, const char *rest,
                       const char *method)
{
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (!get)
        return prom_error(s, c, 405, "bad_data",
                          "use GET, or POST with Content-Type "
                          "application/x-www-form-urlencoded");
    if (!strcmp(rest, "/api/v1/status/buildinfo"))
        return buildinfo(s, c);
    /* Grafana asks for exemplars, and for rules and alerts when its alerting UI manages
     * the data source: bucketdb has none of them, which is an answer, not an error */
    static const struct {
        const char *path, *body;
    } empty[] = {
        {"/api/v1/query_exemplars", "{\"status\":\"success\",\"data\":[]}\n"},
        {"/api/v1/rules", "{\"status\":\"success\",\"data\":{\"groups\":[]}}\n"},
        {"/api/v1/alerts", "{\"status\":\"success\",\"data\":{\"alerts\":[]}}\n"},
    };
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++)
        if (!strcmp(rest, empty[i].path)) {
            enum MHD_Result r0;
            if (!req_tenant(s, c, &r0))
                return r0;
            return respond(s, c, 200, "application/json", empty[i].body, strlen(empty[i].body));
        }
    enum MHD_Result res;
    const char *tenant = NULL;
    const char *label = NULL;
    int known = !strcmp(rest, "/api/v1/query") || !strcmp(rest, "/api/v1/query_range") ||
                !strcmp(rest, "/api/v1/labels") || !strcmp(rest, "/api/v1/series") ||
                !strcmp(rest, "/api/v1/metadata");
    if (!strncmp(rest, "/api/v1/label/", 14)) {
        label = rest + 14;
        size_t n = strlen(label);
        known = n > 7 && !strcmp(label + n - 7, "/values");
    }
    if (!known) {
        char msg[300];
        snprintf(msg, sizeof msg,
                 "%.200s is not part of bucketdb's Prometheus API (docs/PROMQL.md lists it)", rest);
        return prom_error(s, c, 404, "not_found", msg);
    }
    if (!(tenant = req_tenant(s, c, &res)))
        return res;
    if (!strcmp(rest, "/api/v1/query"))
        return run_query(s, c, tenant, 0);
    if (!strcmp(rest, "/api/v1/query_range"))
        return run_query(s, c, tenant, 1);
    if (!strcmp(rest, "/api/v1/labels"))
        return run_meta(s, c, tenant, META_LABELS, NULL);
    if (!strcmp(rest, "/api/v1/series"))
        return run_meta(s, c, tenant, META_SERIES, NULL);
    if (!strcmp(rest, "/api/v1/metadata")) { /* bucketdb keeps no metric types or help */
        static const char body[] = "{\"status\":\"success\",\"data\":{}}\n";
        return respond(s, c, 200, "application/json", body, sizeof body - 1);
    }
    char name[300];
    size_t n = strlen(label) - 7;
    if (n == 0 || n >= sizeof name)
        return bad_data(s, c, "invalid label name");
    memcpy(name, label, n);
    name[n] = '\0';
    return run_meta(s, c, tenant, META_VALUES, name);
}
