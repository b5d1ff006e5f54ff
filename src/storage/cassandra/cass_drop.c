/* cass_drop: deleting a dropped tenant's rows (cass_drop.h). */
#include "storage/cassandra/cass_drop.h"
#include "storage/cassandra/cass_state.h"
#include "storage/cassandra/cass_state_int.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/bucket.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A device whose partitions are deleted: copies, since the registry's rows are read
 * into callbacks whose strings live for the call only. */
typedef struct ddev {
    char *name;
    bdb_bucket_entry *hist;
    uint32_t nhist, nsub;
    int64_t first, last;
    char **metrics;
    size_t nmetrics;
} ddev;

typedef struct dctx {
    cass_state_ctx c;
    const char *tn;
    ddev *v;
    size_t n, cap;
    char **names; /* states, then metrics (distinct): drop_names */
    size_t nnames, capnames;
    uint64_t statements;
    int rc;
} dctx;

static char *xstrdup(const char *s)
{
    char *p = strdup(s ? s : "");
    if (!p)
        abort(); /* the Cassandra side aborts on out of memory (ARCHITECTURE.md) */
    return p;
}

static void add_dev(dctx *x, const bdb_sink_device *d, uint32_t nsub)
{
    if (x->n == x->cap) {
        x->cap = x->cap ? x->cap * 2 : 16;
        x->v = realloc(x->v, x->cap * sizeof *x->v);
        if (!x->v)
            abort();
    }
    ddev *o = &x->v[x->n++];
    memset(o, 0, sizeof *o);
    o->name = xstrdup(d->device);
    o->first = d->first_ts;
    o->last = d->last_ts;
    o->nsub = nsub ? nsub : 1;
    o->nhist = (uint32_t)d->nhist;
    o->hist = calloc(d->nhist + 1, sizeof *o->hist);
    o->metrics = calloc(d->nmetrics + 1, sizeof *o->metrics);
    if (!o->hist || !o->metrics)
        abort();
    for (size_t i = 0; i < d->nhist; i++)
        o->hist[i] = (bdb_bucket_entry){d->hist_from[i], d->hist_size[i]};
    for (size_t i = 0; i < d->nmetrics; i++)
        o->metrics[i] = xstrdup(d->metrics[i]);
    o->nmetrics = d->nmetrics;
}

static void registry_dev(void *ud, const bdb_sink_device *d)
{
    add_dev(ud, d, 1); /* the registry keeps the sub-buckets in force, not the most ever */
}

static void add_name(dctx *x, const char *s)
{
    for (size_t i = 0; i < x->nnames; i++)
        if (!strcmp(x->names[i], s))
            return;
    if (x->nnames == x->capnames) {
        x->capnames = x->capnames ? x->capnames * 2 : 16;
        x->names = realloc(x->names, x->capnames * sizeof *x->names);
        if (!x->names)
            abort();
    }
    x->names[x->nnames++] = xstrdup(s);
}

static void drop_names(dctx *x)
{
    for (size_t i = 0; i < x->nnames; i++)
        free(x->names[i]);
    x->nnames = 0;
}

static void state_of(void *ud, const bdb_sink_state *st)
{
    if (st->state) {
        char key[CASS_STATE_KEY_MAX];
        add_name(ud, cass_state_key(st->state, key));
    }
}

/* One DELETE with v's values (consumed), routed by rk (may be empty). */
static int del(dctx *x, const char *q, vb *v, bdb_buf *rk)
{
    if (x->rc != BDB_OK)
        return x->rc;
    cql_bytes *vals = vb_out(v);
    cql_call call = {.query = q,
                     .values = vals,
                     .nvalues = (uint16_t)v->n,
                     .routing_key = rk->len ? rk->data : NULL,
                     .routing_len = rk->len,
                     .consistency = x->c.write_cl,
                     .idempotent = 1};
    cql_response *r = NULL;
    x->rc = cql_session_execute(x->c.sess, &call, &r);
    if (x->rc != BDB_OK)
        BDB_ERROR("cassandra: dropping tenant %s: %.80s... failed: %s", x->tn, q,
                  r && r->h.opcode == CQL_OP_ERROR && r->error.message ? r->error.message
                                                                       : bdb_strerror(x->rc));
    cql_response_free(r);
    free(vals);
    vb_free(v);
    bdb_buf_reset(rk);
    x->statements++;
    return x->rc;
}

/* The values every statement starts with: the tombstones' timestamp and the tenant. */
static void head(dctx *x, vb *v)
{
    vb_long(v, CASS_DROP_TIMESTAMP_US);
    vb_text(v, x->tn);
}

static void drop_device(dctx *x, const ddev *d)
{
    char q[512];
    vb v = {0};
    bdb_buf rk;
    bdb_buf_init(&rk);
    int has_events = d->first != INT64_MAX && d->last != INT64_MIN && d->first <= d->last;
    if (has_events && d->nhist) {
        snprintf(q, sizeof q,
                 "DELETE FROM %s.telemetry USING TIMESTAMP ? WHERE tenant_id = ? AND device_id = "
                 "? AND bucket = ? AND sub_bucket = ?",
                 x->c.ks);
        bdb_bucket_history h = {d->hist, d->nhist, d->nhist};
        for (int64_t ts = d->first; x->rc == BDB_OK && ts <= d->last;) {
            int64_t start, end;
            bdb_bucket_range(&h, ts, &start, &end);
            for (uint32_t sub = 0; sub < d->nsub && x->rc == BDB_OK; sub++) {
                head(x, &v);
                vb_text(&v, d->name);
                vb_long(&v, start);
                vb_int(&v, (int32_t)sub);
                del(x, q, &v, &rk);
            }
            if (end <= ts)
                break; /* a damaged history must not loop forever */
            ts = end;
        }
    }
    for (size_t m = 0; m < d->nmetrics && x->rc == BDB_OK; m++) {
        add_name(x, d->metrics[m]);
        static const char *const per_series[] = {"agg_1h", "agg_1d"};
        for (size_t t = 0; t < 2; t++) {
            snprintf(q, sizeof q,
                     "DELETE FROM %s.%s USING TIMESTAMP ? WHERE tenant_id = ? AND device_id = ? "
                     "AND metric_name = ?",
                     x->c.ks, per_series[t]);
            head(x, &v);
            vb_text(&v, d->name);
            vb_text(&v, d->metrics[m]);
            del(x, q, &v, &rk);
        }
        if (!has_events)
            continue;
        snprintf(q, sizeof q,
                 "DELETE FROM %s.agg_1m USING TIMESTAMP ? WHERE tenant_id = ? AND device_id = ? "
                 "AND metric_name = ? AND day = ?",
                 x->c.ks);
        for (int64_t day = bdb_align_down(d->first, BDB_MS_DAY); day <= d->last && x->rc == BDB_OK;
             day += BDB_MS_DAY) {
            head(x, &v);
            vb_text(&v, d->name);
            vb_text(&v, d->metrics[m]);
            vb_long(&v, day);
            del(x, q, &v, &rk);
        }
    }
    vb_free(&v);
    bdb_buf_free(&rk);
}

/* A delete of one partition of a table keyed (tenant_id, col): for each of names. */
static void drop_by_name(dctx *x, const char *table, const char *col)
{
    char q[256];
    snprintf(q, sizeof q, "DELETE FROM %s.%s USING TIMESTAMP ? WHERE tenant_id = ? AND %s = ?",
             x->c.ks, table, col);
    vb v = {0};
    bdb_buf rk;
    bdb_buf_init(&rk);
    for (size_t i = 0; i < x->nnames && x->rc == BDB_OK; i++) {
        head(x, &v);
        vb_text(&v, x->names[i]);
        cs_rkey(&rk, x->tn, x->names[i], strlen(x->names[i]));
        del(x, q, &v, &rk);
    }
    vb_free(&v);
    bdb_buf_free(&rk);
}

/* late_arrivals is keyed by (tenant, device, day of arrival), which nothing else
 * records: its partitions of the tenant are found by a scan (as its reader does). */
static void drop_late(dctx *x)
{
    char q[256];
    snprintf(q, sizeof q, "SELECT tenant_id, device_id, bucket FROM %s.late_arrivals", x->c.ks);
    vb v = {0};
    bdb_buf rk;
    bdb_buf_init(&rk);
    rowset r = {.ncols = 3};
    bdb_buf_init(&r.arena);
    x->rc = cs_query(&x->c, q, &v, &rk, &r);
    vb_free(&v);
    snprintf(q, sizeof q,
             "DELETE FROM %s.late_arrivals USING TIMESTAMP ? WHERE tenant_id = ? AND device_id = "
             "? AND bucket = ?",
             x->c.ks);
    for (size_t i = 0; x->rc == BDB_OK && i < r.nrows; i++) {
        char *tn = cs_cell_str(rs_cell(&r, i, 0)), *dn = cs_cell_str(rs_cell(&r, i, 1));
        int64_t b = cs_cell_ms(rs_cell(&r, i, 2), INT64_MIN);
        if (tn && dn && b != INT64_MIN && !strcmp(tn, x->tn)) {
            head(x, &v);
            vb_text(&v, dn);
            vb_long(&v, b);
            del(x, q, &v, &rk);
        }
        free(tn);
        free(dn);
    }
    rs_free(&r);
    vb_free(&v);
    bdb_buf_free(&rk);
}

static void drop_tenant_rows(dctx *x, const char *table)
{
    char q[256];
    snprintf(q, sizeof q, "DELETE FROM %s.%s USING TIMESTAMP ? WHERE tenant_id = ?", x->c.ks,
             table);
    vb v = {0};
    bdb_buf rk;
    bdb_buf_init(&rk);
    head(x, &v);
    cs_rkey(&rk, x->tn, NULL, 0);
    del(x, q, &v, &rk);
    vb_free(&v);
    bdb_buf_free(&rk);
}

int cass_drop_tenant(bdb_sink *s, const char *tenant, const bdb_sink_device *devs,
                     const uint32_t *nsub, size_t n)
{
    dctx x;
    memset(&x, 0, sizeof x);
    x.tn = tenant;
    x.rc = cs_ctx(s, &x.c);
    if (x.rc != BDB_OK)
        return x.rc;
    int64_t t0 = bdb_monotonic_ms();
    for (size_t i = 0; i < n; i++)
        add_dev(&x, &devs[i], nsub[i]);
    x.rc = cass_device_list(s, tenant, registry_dev, &x);
    /* states first: the current-state rows are deleted at the end */
    if (x.rc == BDB_OK)
        x.rc = cass_state_list(s, tenant, NULL, state_of, &x);
    if (x.rc == BDB_OK)
        drop_by_name(&x, "latest_by_state", "state");
    drop_names(&x);
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (size_t i = 0; i < x.n && x.rc == BDB_OK; i++) {
        drop_device(&x, &x.v[i]);
        if (x.v[i].first < lo)
            lo = x.v[i].first;
        if (x.v[i].last != INT64_MAX && x.v[i].last > hi)
            hi = x.v[i].last;
    }
    if (x.rc == BDB_OK) {
        drop_by_name(&x, "fleet_agg_1h", "metric_name");
        drop_by_name(&x, "fleet_agg_1d", "metric_name");
    }
    drop_names(&x);
    /* counts: a partition per day a bucket of the tenant started in */
    char q[256];
    snprintf(q, sizeof q,
             "DELETE FROM %s.telemetry_by_tenant_totals USING TIMESTAMP ? WHERE tenant_id = ? "
             "AND day = ?",
             x.c.ks);
    vb v = {0};
    bdb_buf rk;
    bdb_buf_init(&rk);
    if (lo <= hi)
        for (int64_t day = bdb_align_down(lo, BDB_MS_DAY) - BDB_MS_DAY; day <= hi && x.rc == BDB_OK;
             day += BDB_MS_DAY) {
            head(&x, &v);
            vb_long(&v, day);
            del(&x, q, &v, &rk);
        }
    vb_free(&v);
    bdb_buf_free(&rk);
    if (x.rc == BDB_OK)
        drop_late(&x);
    if (x.rc == BDB_OK)
        drop_tenant_rows(&x, "latest_by_device");
    if (x.rc == BDB_OK)
        drop_tenant_rows(&x, "devices");
    if (x.rc == BDB_OK)
        BDB_INFO("cassandra: tenant %s dropped: %zu device(s), %llu DELETE statements in %lld ms",
                 tenant, x.n, (unsigned long long)x.statements,
                 (long long)(bdb_monotonic_ms() - t0));
    for (size_t i = 0; i < x.n; i++) {
        free(x.v[i].name);
        free(x.v[i].hist);
        for (size_t k = 0; k < x.v[i].nmetrics; k++)
            free(x.v[i].metrics[k]);
        free(x.v[i].metrics);
    }
    free(x.v);
    free(x.names);
    return x.rc;
}
