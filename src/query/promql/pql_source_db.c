/* pql_source_db: series from the device catalog, samples from bdb_query_range. */
#include "query/promql/pql_source_db.h"

#include "agg/rollup.h"
#include "bucketdb/bdb.h"
#include "query/range.h"
#include "query/windows.h"

#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pql_db_prom_name(const char *in, size_t len, char *out)
{
    size_t o = 0;
    if (!len || (in[0] >= '0' && in[0] <= '9'))
        out[o++] = '_';
    for (size_t i = 0; i < len; i++) {
        char c = in[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == ':';
        out[o++] = ok ? c : '_';
    }
    out[o] = '\0';
}

/* A tag key as a label name: no ':' (not allowed in label names), and never one of
 * the names the mapping itself sets. */
static char *tag_label(const char *key, size_t klen)
{
    char *out = malloc(klen + 7);
    if (!out)
        return NULL;
    pql_db_prom_name(key, klen, out + 4);
    for (char *p = out + 4; *p; p++)
        if (*p == ':')
            *p = '_';
    const char *n = out + 4;
    if (!strcmp(n, "device") || !strcmp(n, "bdb_metric") || !strncmp(n, "__", 2) ||
        !strncmp(n, "tag_", 4)) {
        memcpy(out, "tag_", 4);
        return out;
    }
    memmove(out, out + 4, strlen(out + 4) + 1);
    return out;
}

struct mname {
    char *prom;
    size_t idx;
};

static int mname_cmp(const void *a, const void *b)
{
    const struct mname *x = a, *y = b;
    int c = strcmp(x->prom, y->prom);
    return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

/* one device's series, handed to a visitor */
typedef int (*visit_fn)(void *ctx, const bdb_device_info *d, size_t metric, const pql_label *l,
                        size_t n);

struct walk {
    const pql_matchset *m;
    int64_t from, to;
    visit_fn visit;
    void *ctx;
    int nomem, stopped;
};

static int walk_device(void *ctx, const bdb_device_info *d)
{
    struct walk *w = ctx;
    if (d->last_ts == INT64_MIN || d->last_ts < w->from || d->first_ts > w->to || !d->nmetrics)
        return 0;
    size_t nl = d->ntags + 3;
    pql_label *l = calloc(nl, sizeof *l);
    struct mname *mn = calloc(d->nmetrics, sizeof *mn);
    int rc = 0;
    if (!l || !mn)
        goto nomem;
    l[0].name = "device";
    l[0].value = (char *)d->device;
    for (size_t i = 0; i < d->ntags; i++) {
        char *k = tag_label(d->tags[i].key, d->tags[i].klen);
        char *v = strndup(d->tags[i].val, d->tags[i].vlen);
        l[1 + i].name = k;
        l[1 + i].value = v;
        if (!k || !v)
            goto nomem;
    }
    for (size_t i = 0; i < d->nmetrics; i++) {
        size_t len = strlen(d->metrics[i]);
        mn[i].idx = i;
        if (!(mn[i].prom = malloc(len + 2)))
            goto nomem;
        pql_db_prom_name(d->metrics[i], len, mn[i].prom);
    }
    qsort(mn, d->nmetrics, sizeof *mn, mname_cmp);
    for (size_t i = 0; i < d->nmetrics && !rc; i++) {
        int clash = (i > 0 && !strcmp(mn[i].prom, mn[i - 1].prom)) ||
                    (i + 1 < d->nmetrics && !strcmp(mn[i].prom, mn[i + 1].prom));
        size_t n = 1 + d->ntags;
        l[n].name = "__name__";
        l[n++].value = mn[i].prom;
        if (clash) {
            l[n].name = "bdb_metric";
            l[n++].value = (char *)d->metrics[mn[i].idx];
        }
        if (w->m && !pql_matchset_test(w->m, l, n))
            continue;
        rc = w->visit(w->ctx, d, mn[i].idx, l, n);
    }
    if (rc < 0)
        w->nomem = 1;
    else if (rc > 0)
        w->stopped = 1;
    goto done;
nomem:
    w->nomem = 1;
    rc = 1;
done:
    for (size_t i = 0; l && i < d->ntags; i++) {
        free(l[1 + i].name);
        free(l[1 + i].value);
    }
    free(l);
    for (size_t i = 0; mn && i < d->nmetrics; i++)
        free(mn[i].prom);
    free(mn);
    return rc != 0;
}

static int walk(const pql_db_source *s, const pql_matchset *m, int64_t from, int64_t to,
                visit_fn visit, void *ctx)
{
    struct walk w = {m, from, to, visit, ctx, 0, 0};
    /* device="x" (Grafana's panel of one device): that device alone, not a listing of
     * the tenant's */
    const char *one = m ? pql_matchset_equal(m, "device") : NULL;
    int rc = one ? bdb_db_get_device(s->db, s->tenant, one, walk_device, &w)
                 : bdb_db_list_devices(s->db, s->tenant, walk_device, &w);
    if (one && rc == BDB_ERR_NOTFOUND)
        rc = BDB_OK;
    if (w.nomem || rc == BDB_ERR_NOMEM)
        return BDB_ERR_NOMEM;
    return BDB_OK;
}

struct each_ctx {
    int (*cb)(void *ctx, const pql_label *l, size_t n);
    void *ctx;
};

static int each_visit(void *ctx, const bdb_device_info *d, size_t metric, const pql_label *l,
                      size_t n)
{
    (void)d;
    (void)metric;
    struct each_ctx *e = ctx;
    return e->cb(e->ctx, l, n) ? 1 : 0;
}

int pql_db_each_series(const pql_db_source *s, const pql_matchset *m, int64_t from, int64_t to,
                       int (*cb)(void *ctx, const pql_label *l, size_t n), void *ctx)
{
    struct each_ctx e = {cb, ctx};
    return walk(s, m, from, to, each_visit, &e);
}

/* ---- select: the matching series, then each device's samples in one range read ---- */

struct pick {
    char *device, *metric;
    size_t series;
};

struct sel_ctx {
    pql_series_set *out;
    struct pick *p;
    size_t n, cap;
};

static int sel_visit(void *ctx, const bdb_device_info *d, size_t metric, const pql_label *l,
                     size_t n)
{
    struct sel_ctx *s = ctx;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        struct pick *p = realloc(s->p, cap * sizeof *p);
        if (!p)
            return -1;
        s->p = p;
        s->cap = cap;
    }
    long idx = pql_series_add(s->out, l, n);
    if (idx < 0)
        return -1;
    struct pick *p = &s->p[s->n];
    p->device = strdup(d->device);
    p->metric = strdup(d->metrics[metric]);
    p->series = (size_t)idx;
    s->n++;
    return p->device && p->metric ? 0 : -1;
}

struct read_ctx {
    pql_series_set *out;
    const struct pick *p; /* this device's picks, sorted by metric */
    size_t n;
    int over, nomem;
};

static int pick_metric_cmp(const void *a, const void *b)
{
    return strcmp(((const struct pick *)a)->metric, ((const struct pick *)b)->metric);
}

static int read_cb(void *ctx, const char *metric, int64_t ts, double v)
{
    struct read_ctx *r = ctx;
    struct pick key = {NULL, (char *)metric, 0};
    const struct pick *p = bsearch(&key, r->p, r->n, sizeof *r->p, pick_metric_cmp);
    if (!p)
        return 0;
    int rc = pql_series_push(r->out, p->series, ts, v);
    if (rc == -2)
        r->over = 1;
    else if (rc < 0)
        r->nomem = 1;
    return rc != 0;
}

static int pick_cmp(const void *a, const void *b)
{
    const struct pick *x = a, *y = b;
    int c = strcmp(x->device, y->device);
    return c ? c : strcmp(x->metric, y->metric);
}

/* One device's read for select_each: its picks (sorted by metric) and their metric
 * names. Returns a PQL_E_* code with err set, or PQL_E_OK. */
typedef int (*device_read_fn)(const pql_db_source *s, void *arg, pql_series_set *out,
                              const struct pick *p, const char **metrics, size_t n, char *err,
                              size_t errlen);

/* The series matching m with data in [from, to], added to out, then read device by
 * device (one read per device for all its matching metrics, devices in name order). */
static int select_each(const pql_db_source *s, const pql_matchset *m, int64_t from, int64_t to,
                       pql_series_set *out, device_read_fn read, void *arg, char *err,
                       size_t errlen)
{
    struct sel_ctx sc = {out, NULL, 0, 0};
    int code = PQL_E_OK;
    if (walk(s, m, from, to, sel_visit, &sc) != BDB_OK) {
        snprintf(err, errlen, "out of memory listing the series");
        code = PQL_E_INTERNAL;
    }
    if (sc.n) /* nothing matched: no array */
        qsort(sc.p, sc.n, sizeof *sc.p, pick_cmp);
    const char **metrics = calloc(sc.n ? sc.n : 1, sizeof *metrics);
    if (!metrics && !code) {
        snprintf(err, errlen, "out of memory");
        code = PQL_E_INTERNAL;
    }
    for (size_t i = 0; i < sc.n && !code;) {
        size_t j = i;
        while (j < sc.n && !strcmp(sc.p[j].device, sc.p[i].device)) {
            metrics[j - i] = sc.p[j].metric;
            j++;
        }
        code = read(s, arg, out, sc.p + i, metrics, j - i, err, errlen);
        i = j;
    }
    free(metrics);
    for (size_t i = 0; i < sc.n; i++) {
        free(sc.p[i].device);
        free(sc.p[i].metric);
    }
    free(sc.p);
    return code;
}

static int read_raw(const pql_db_source *s, void *arg, pql_series_set *out, const struct pick *p,
                    const char **metrics, size_t n, char *err, size_t errlen)
{
    const int64_t *range = arg;
    bdb_range_query q = {.tenant = s->tenant,
                         .device = p->device,
                         .metrics = metrics,
                         .nmetrics = n,
                         .from = range[0],
                         .to = range[1] + 1};
    struct read_ctx r = {out, p, n, 0, 0};
    bdb_query_stats st;
    int rc = bdb_query_range(s->db, s->pool, &q, read_cb, &r, &st);
    if (r.over) {
        snprintf(err, errlen,
                 "query processing would load too many samples into memory in query "
                 "execution (more than max-query-samples %llu); narrow the selector or "
                 "the range",
                 (unsigned long long)out->max_samples);
        return PQL_E_EXECUTION;
    }
    if (r.nomem) {
        snprintf(err, errlen, "out of memory reading samples");
        return PQL_E_INTERNAL;
    }
    if (rc == BDB_ERR_LIMIT) {
        snprintf(err, errlen, "the range spans more than %d partitions of device '%.200s'",
                 BDB_QUERY_MAX_PARTITIONS, p->device);
        return PQL_E_EXECUTION;
    }
    if (rc == BDB_ERR_PARTIAL) {
        snprintf(err, errlen,
                 "the storage backend could not be read for device '%.200s'; an answer "
                 "would hold only the samples not yet flushed: retry",
                 p->device);
        return PQL_E_UNAVAILABLE;
    }
    if (rc != BDB_OK && rc != BDB_ERR_NOTFOUND) {
        snprintf(err, errlen, "reading device '%.200s' failed: %s", p->device, bdb_strerror(rc));
        return PQL_E_INTERNAL;
    }
    return PQL_E_OK;
}

static int db_select(void *ctx, const pql_matchset *m, int64_t from, int64_t to,
                     pql_series_set *out, char *err, size_t errlen)
{
    int64_t range[2] = {from, to};
    return select_each(ctx, m, from, to, out, read_raw, range, err, errlen);
}

struct win_ctx {
    pql_series_set *out;
    const struct pick *p;
    size_t n;
    int over, nomem;
};

static int win_cb(void *ctx, const bdb_window_row *row)
{
    struct win_ctx *r = ctx;
    struct pick key = {NULL, (char *)row->metric, 0};
    const struct pick *p = bsearch(&key, r->p, r->n, sizeof *r->p, pick_metric_cmp);
    if (!p)
        return 0;
    pql_window w = {row->start, row->count, row->sum, row->min,
                    row->max,   row->p50,   row->p95, row->p99};
    int rc = pql_series_push_window(r->out, p->series, &w);
    if (rc == -2)
        r->over = 1;
    else if (rc < 0)
        r->nomem = 1;
    return rc != 0;
}

/* A run of one metric's windows (no quantiles), ascending and none empty: appended to
 * its series at once. */
static int runs_cb(void *ctx, size_t mi, const bdb_window *w, size_t n)
{
    struct win_ctx *r = ctx;
    pql_window *dst;
    int rc = pql_series_add_windows(r->out, r->p[mi].series, n, &dst);
    if (rc == -2)
        r->over = 1;
    else if (rc < 0)
        r->nomem = 1;
    if (rc)
        return 1;
    for (size_t i = 0; i < n; i++) {
        const bdb_stats *st = &w[i].st;
        dst[i] = (pql_window){w[i].start,
                              bdb_stats_count(st),
                              bdb_stats_sum(st),
                              bdb_stats_min(st),
                              bdb_stats_max(st),
                              NAN,
                              NAN,
                              NAN};
    }
    return 0;
}

struct win_args {
    int64_t from, to;
    enum bdb_res res;
    int want_quantiles;
};

static int read_windows(const pql_db_source *s, void *arg, pql_series_set *out,
                        const struct pick *p, const char **metrics, size_t n, char *err,
                        size_t errlen)
{
    const struct win_args *a = arg;
    bdb_window_query q = {.tenant = s->tenant,
                          .device = p->device,
                          .metrics = metrics,
                          .nmetrics = n,
                          .from = a->from,
                          .to = a->to,
                          .res = a->res,
                          .lateness_ms = s->lateness_ms,
                          .no_quantiles = !a->want_quantiles,
                          .no_moments = 1};
    struct win_ctx r = {out, p, n, 0, 0};
    int64_t wm;
    /* metrics[i] is p[i]'s: a run finds its series by index */
    int rc = a->want_quantiles ? bdb_query_windows(s->db, &q, win_cb, &r, &wm)
                               : bdb_query_window_runs(s->db, &q, runs_cb, &r, &wm);
    if (r.over) {
        snprintf(err, errlen,
                 "query processing would load too many samples into memory in query "
                 "execution (more than max-query-samples %llu tier windows); narrow the "
                 "selector or the range",
                 (unsigned long long)out->max_samples);
        return PQL_E_EXECUTION;
    }
    if (r.nomem) {
        snprintf(err, errlen, "out of memory reading windows");
        return PQL_E_INTERNAL;
    }
    if (rc == BDB_ERR_PARTIAL) {
        snprintf(err, errlen,
                 "the storage backend could not be read for the %s windows of device "
                 "'%.200s': retry",
                 bdb_res_name(a->res), p->device);
        return PQL_E_UNAVAILABLE;
    }
    if (rc != BDB_OK && rc != BDB_ERR_NOTFOUND) {
        snprintf(err, errlen, "reading the %s windows of device '%.200s' failed: %s",
                 bdb_res_name(a->res), p->device, bdb_strerror(rc));
        return PQL_E_INTERNAL;
    }
    return PQL_E_OK;
}

static int db_select_windows(void *ctx, const pql_matchset *m, int64_t from, int64_t to,
                             int64_t cover_from, int64_t width_ms, int want_quantiles,
                             pql_series_set *out, char *err, size_t errlen)
{
    const pql_db_source *s = ctx;
    enum bdb_res res = width_ms == bdb_res_width(BDB_RES_1D)   ? BDB_RES_1D
                       : width_ms == bdb_res_width(BDB_RES_1H) ? BDB_RES_1H
                                                               : BDB_RES_1M;
    if (cover_from < s->tier_oldest[res - 1])
        return PQL_E_NO_TIER;
    struct win_args a = {from, to, res, want_quantiles};
    /* a device with data in [from, to) only: its last sample may lie in the last window */
    return select_each(s, m, from, to - 1, out, read_windows, &a, err, errlen);
}

void pql_db_source_init(pql_source *src, pql_db_source *ctx)
{
    src->select = db_select;
    src->select_windows = db_select_windows;
    src->ctx = ctx;
}
