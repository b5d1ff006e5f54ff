/* h_influxql: InfluxDB 1.x /query (GET, POST, form bodies) over the InfluxQL parser and
 * executor (src/query/influxql/): parameters (q, db, epoch, chunked, u/p and Basic auth
 * through req_tenant), the JSON shape InfluxDB clients decode, and which tier answered
 * (X-Bucketdb-Tier). docs/INFLUX.md. */
#include "server/server_int.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"
#include "query/influxql/iql.h"
#include "query/influxql/iql_exec.h"
#include "storage/embedded/tier/db_tier.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* epoch=: the unit of times in the answer; NULL/absent: RFC 3339 strings. Divisor of
 * ms, or a multiplier (negative) for finer units. */
static int epoch_unit(const char *e, int64_t *div, int64_t *mul)
{
    static const struct {
        const char *n;
        int64_t div, mul;
    } u[] = {{"ns", 1, 1000000}, {"n", 1, 1000000}, {"u", 1, 1000},  {"\xc2\xb5", 1, 1000},
             {"ms", 1, 1},       {"s", 1000, 1},    {"m", 60000, 1}, {"h", 3600000, 1}};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++)
        if (!strcmp(e, u[i].n)) {
            *div = u[i].div;
            *mul = u[i].mul;
            return 0;
        }
    return -1;
}

/* RFC 3339 as InfluxDB prints it: no fraction for whole seconds, else trailing zeros cut. */
static void put_rfc3339(bdb_buf *b, int64_t ms)
{
    char t[48];
    bdb_format_time_ms(ms, t, sizeof t); /* ...:SS.mmmZ */
    size_t n = strlen(t);
    if (n > 5 && t[n - 1] == 'Z' && t[n - 5] == '.') {
        size_t end = n - 1;
        while (end > n - 5 && t[end - 1] == '0')
            end--;
        if (end == n - 4)
            end--; /* the dot too */
        t[end] = 'Z';
        t[end + 1] = 0;
    }
    bdb_buf_putc(b, '"');
    bdb_buf_puts(b, t);
    bdb_buf_putc(b, '"');
}

static void put_str(bdb_buf *b, const char *s)
{
    bdb_buf_putc(b, '"');
    bdb_buf_json_str(b, s, strlen(s));
    bdb_buf_putc(b, '"');
}

static void put_val(bdb_buf *b, const iql_val *v, int epoch, int64_t div, int64_t mul)
{
    switch (v->t) {
    case IQL_V_NUM:
        if (isfinite(v->num))
            bdb_buf_double(b, v->num);
        else
            bdb_buf_puts(b, "null");
        break;
    case IQL_V_INT:
        bdb_buf_i64(b, v->i);
        break;
    case IQL_V_BOOL:
        bdb_buf_puts(b, v->i ? "true" : "false");
        break;
    case IQL_V_STR:
        put_str(b, v->s);
        break;
    case IQL_V_TIME:
        if (!epoch)
            put_rfc3339(b, v->i);
        else if (div > 1)
            bdb_buf_i64(b, v->i >= 0 ? v->i / div : -((-v->i + div - 1) / div));
        else
            bdb_buf_i64(b, v->i * mul); /* times stay within int64 ns (BDB_TS_*) */
        break;
    default:
        bdb_buf_puts(b, "null");
    }
}

/* One result, or with chunked one JSON document per series ("partial" on all but the
 * last of a statement), as InfluxDB streams them. */
static void put_result(bdb_buf *b, size_t id, const iql_result *r, int epoch, int64_t div,
                       int64_t mul, int chunked)
{
    if (chunked && r->nseries > 1 && !r->error) {
        for (size_t i = 0; i < r->nseries; i++) {
            iql_result one = *r;
            one.series = &r->series[i];
            one.nseries = 1;
            bdb_buf_puts(b, "{\"results\":[");
            put_result(b, id, &one, epoch, div, mul, 0);
            if (i + 1 < r->nseries) {
                b->len--; /* the result's closing brace */
                bdb_buf_puts(b, ",\"partial\":true}");
            }
            bdb_buf_puts(b, "]}\n");
        }
        return;
    }
    if (chunked)
        bdb_buf_puts(b, "{\"results\":[");
    bdb_buf_printf(b, "{\"statement_id\":%zu", id);
    if (r->error) {
        bdb_buf_puts(b, ",\"error\":");
        put_str(b, r->error);
        bdb_buf_putc(b, '}');
        return;
    }
    if (r->nseries) {
        bdb_buf_puts(b, ",\"series\":[");
        for (size_t i = 0; i < r->nseries; i++) {
            const iql_series *s = &r->series[i];
            bdb_buf_puts(b, i ? ",{" : "{");
            int comma = 0;
            if (s->name) {
                bdb_buf_puts(b, "\"name\":");
                put_str(b, s->name);
                comma = 1;
            }
            if (s->ntags) {
                bdb_buf_puts(b, comma ? ",\"tags\":{" : "\"tags\":{");
                for (size_t t = 0; t < s->ntags; t++) {
                    if (t)
                        bdb_buf_putc(b, ',');
                    put_str(b, s->tagk[t]);
                    bdb_buf_putc(b, ':');
                    put_str(b, s->tagv[t]);
                }
                bdb_buf_putc(b, '}');
                comma = 1;
            }
            bdb_buf_puts(b, comma ? ",\"columns\":[" : "\"columns\":[");
            for (size_t k = 0; k < s->ncols; k++) {
                if (k)
                    bdb_buf_putc(b, ',');
                put_str(b, s->cols[k]);
            }
            bdb_buf_puts(b, "],\"values\":[");
            for (size_t row = 0; row < s->nrows; row++) {
                bdb_buf_puts(b, row ? ",[" : "[");
                for (size_t k = 0; k < s->ncols; k++) {
                    if (k)
                        bdb_buf_putc(b, ',');
                    put_val(b, &s->vals[row * s->ncols + k], epoch, div, mul);
                }
                bdb_buf_putc(b, ']');
            }
            bdb_buf_puts(b, "]}");
        }
        bdb_buf_putc(b, ']');
    }
    bdb_buf_putc(b, '}');
    if (chunked)
        bdb_buf_puts(b, "]}\n");
}

/* SHOW DATABASES: the tenants the caller may read. A tenant token reads its tenant;
 * the admin token every tenant; no token (where none is required) every tenant that is
 * not registered (registering one protects it with its token). */
struct dbs {
    char **v;
    size_t n, cap;
    int skip_registered;
    bdb_tenants *reg;
};

static void dbs_add(struct dbs *d, const char *t)
{
    for (size_t i = 0; i < d->n; i++)
        if (!strcmp(d->v[i], t))
            return;
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 16;
        d->v = realloc(d->v, d->cap * sizeof *d->v);
        if (!d->v)
            abort();
    }
    d->v[d->n] = strdup(t);
    if (!d->v[d->n])
        abort();
    d->n++;
}

static int dbs_dev_cb(void *ctx, const bdb_device_info *di)
{
    struct dbs *d = ctx;
    if (d->n && !strcmp(d->v[d->n - 1], di->tenant))
        return 0;
    if (d->skip_registered && bdb_tenants_get(d->reg, di->tenant, &(bdb_tenant_info){0}) == BDB_OK)
        return 0;
    dbs_add(d, di->tenant);
    return 0;
}

static int dbs_reg_cb(void *ctx, const bdb_tenant_info *t)
{
    dbs_add(ctx, t->name);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void list_databases(bdb_server *s, struct MHD_Connection *c, const char *tenant,
                           struct dbs *d)
{
    req_ident id;
    enum MHD_Result ignored;
    if (req_auth(s, c, &id, &ignored) != 0 || id.who == WHO_TENANT) {
        dbs_add(d, tenant);
        return;
    }
    d->reg = s->tenants;
    d->skip_registered = id.who != WHO_ADMIN;
    dbs_add(d, s->cfg.default_tenant);
    bdb_db_list_devices(s->db, NULL, dbs_dev_cb, d);
    if (id.who == WHO_ADMIN)
        bdb_tenants_list(s->tenants, dbs_reg_cb, d);
    qsort(d->v, d->n, sizeof *d->v, cmp_str);
}

static enum MHD_Result influx_query(bdb_server *s, struct MHD_Connection *c);

/* A POST whose body is a form without the form Content-Type ("q=CREATE+DATABASE+x",
 * as some write-only clients send it) is read as one too, as before InfluxQL. */
/* The tiers' retention for tenant as the engine applies it (db_tier.h): the setting
 * (> 0 set, < 0 forever, 0 the default), then the tenant's own. */
static void tier_keep(bdb_server *s, const char *tenant, iql_ctx *x)
{
    const int64_t conf[4] = {0, s->cfg.tier_retention_1m, s->cfg.tier_retention_1h,
                             s->cfg.tier_retention_1d};
    for (int t = BDB_RES_1M; t <= BDB_RES_1D; t++) {
        int64_t dflt = conf[t] > 0 ? conf[t] : conf[t] < 0 ? 0 : bdb_tier_default_retention(t);
        x->tier_keep_ms[t] = bdb_tenants_tier_retention(s->tenants, tenant, t - 1, dflt);
    }
}

/* ON <db> in a request that names no database (the influx CLI before `use`): that
 * tenant, under the rules req_tenant applies to a named one; NULL with msg set when
 * the caller may not read it. */
static const char *on_tenant(bdb_server *s, struct MHD_Connection *c, const char *on, char *msg,
                             size_t n)
{
    req_ident id;
    enum MHD_Result ignored; /* req_tenant authenticated this request already */
    if (req_auth(s, c, &id, &ignored) != 0 || id.who == WHO_TENANT) {
        atomic_fetch_add(&s->forbidden, 1);
        snprintf(msg, n,
                 "forbidden: the token belongs to tenant '%s' and may not access tenant "
                 "'%.128s'",
                 id.tenant, on);
        return NULL;
    }
    if (!bdb_tenant_name_valid(on)) {
        snprintf(msg, n, "invalid database '%.128s': use 1..128 characters of A-Z a-z 0-9 _ - .",
                 on);
        return NULL;
    }
    if (id.who == WHO_ANON && bdb_tenants_get(s->tenants, on, &(bdb_tenant_info){0}) == BDB_OK) {
        atomic_fetch_add(&s->auth_failures, 1);
        snprintf(msg, n, "authorization failed: tenant '%.128s' is registered; send its token", on);
        return NULL;
    }
    return on;
}

enum MHD_Result h_influx_query(bdb_server *s, struct MHD_Connection *c, req *r)
{
    if (r->form.n || !r->body.len || arg(c, "q"))
        return influx_query(s, c);
    if (form_parse(r) != 0)
        return respond_json_error(s, c, 503, "out of memory reading the form", 1);
    form_current(&r->form);
    enum MHD_Result res = influx_query(s, c);
    form_current(NULL);
    return res;
}

static enum MHD_Result influx_query(bdb_server *s, struct MHD_Connection *c)
{
    enum MHD_Result res;
    const char *tenant = req_tenant(s, c, &res);
    if (!tenant)
        return res;
    uint64_t t0 = now_us();
    const char *q = arg(c, "q");
    if (!q || !*q)
        return respond_json_error(s, c, 400, "missing required parameter \"q\"", 1);
    int64_t div = 1, mul = 1;
    const char *ep = arg(c, "epoch");
    int epoch = ep && *ep;
    if (epoch && epoch_unit(ep, &div, &mul) != 0)
        return respond_json_error(s, c, 400,
                                  "invalid 'epoch': use ns, u, µ, ms, s, m or h (or leave it out "
                                  "for RFC 3339 times)",
                                  1);
    const char *ch = arg(c, "chunked");
    int chunked = ch && !strcmp(ch, "true");
    char err[600];
    iql_query pq;
    if (iql_parse(q, strlen(q), &pq, err, sizeof err) != 0) {
        iql_free(&pq);
        return respond_json_error(s, c, 400, err, 1);
    }
    struct dbs d = {0};
    for (size_t i = 0; i < pq.n; i++)
        if (pq.stmts[i].kind == IQL_SHOW_DATABASES && !d.n)
            list_databases(s, c, tenant, &d);
    iql_ctx x = {.db = s->db,
                 .pool = s->pool,
                 .tenant = tenant,
                 .device_tag = s->cfg.device_tag,
                 .lateness_ms = s->cfg.agg_allowed_lateness,
                 .max_points = s->cfg.max_query_samples,
                 .databases = (const char *const *)d.v,
                 .ndatabases = d.n,
                 .catalogs = s->catalogs,
                 .groups = s->groups};
    bdb_clock clk = server_clock(s);
    x.now_ms = bdb_clock_now(&clk);
    const char *dbp = arg(c, "db"), *tp = arg(c, "tenant");
    int named = (dbp && *dbp) || (tp && *tp); /* the request names its database */
    bdb_buf b;
    bdb_buf_init(&b);
    static const char *const sources[] = {"raw", "1m", "1h", "1d", "fleet"};
    unsigned used = 0; /* bits over sources: what answered the SELECTs */
    if (!chunked)
        bdb_buf_puts(&b, "{\"results\":[");
    for (size_t i = 0; i < pq.n; i++) {
        const iql_stmt *st = &pq.stmts[i];
        iql_result out;
        const char *st_tenant = tenant;
        char m[400] = "";
        if (st->on && st->kind != IQL_CREATE_DATABASE && strcmp(st->on, tenant)) {
            if (named)
                snprintf(m, sizeof m, "database not found: %.128s (this request reads '%s')",
                         st->on, tenant);
            else
                st_tenant = on_tenant(s, c, st->on, m, sizeof m);
        }
        if (*m) {
            memset(&out, 0, sizeof out);
            out.error = strdup(m);
            if (!out.error)
                abort();
        } else {
            x.tenant = st_tenant;
            tier_keep(s, st_tenant, &x);
            iql_exec(&x, st, &out);
            atomic_fetch_add(&s->queries, 1);
        }
        for (const char *p = out.tier; p && *p;) { /* "raw,1h": one or more names */
            size_t n = strcspn(p, ",");
            for (unsigned k = 0; k < 5; k++)
                if (strlen(sources[k]) == n && !strncmp(p, sources[k], n))
                    used |= 1u << k;
            p += n + (p[n] == ',');
        }
        if (!chunked && i)
            bdb_buf_putc(&b, ',');
        put_result(&b, i, &out, epoch, div, mul, chunked);
        int stop = out.error != NULL;
        iql_result_free(&out);
        if (stop) /* as InfluxDB: statements after a failed one are not run */
            break;
    }
    if (!chunked)
        bdb_buf_puts(&b, "]}\n");
    iql_free(&pq);
    for (size_t i = 0; i < d.n; i++)
        free(d.v[i]);
    free(d.v);
    hist_observe(&s->query_latency, now_us() - t0);
    char tiers[32] = "";
    for (unsigned k = 0; k < 5; k++)
        if (used & (1u << k)) {
            if (*tiers)
                strcat(tiers, ",");
            strcat(tiers, sources[k]);
        }
    res = respond_hdr(s, c, 200, "application/json", b.data, b.len, "X-Bucketdb-Tier",
                      used ? tiers : NULL);
    bdb_buf_free(&b);
    return res;
}
