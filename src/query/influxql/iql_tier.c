/* iql_tier: GROUP BY time windows from the 1m/1h/1d tiers (iql_tier.h). */
#include "query/influxql/iql_tier.h"

#include "agg/rollup.h"
#include "bucketdb/bdb.h"
#include "agg/fleet.h"
#include "query/fleetq.h"
#include "query/range.h"
#include "query/windows.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void (*iql_tier_test_hook)(const iql_ctx *c, const char *device);

const char *iql_tier_name(int tier)
{
    return bdb_res_name((enum bdb_res)tier);
}

static int64_t floordiv64(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t floormod64(int64_t a, int64_t b)
{
    return a - floordiv64(a, b) * b;
}

/* 1 when tier t still holds windows from `from` on (its retention, against now). */
static int tier_keeps(const iql_ctx *c, int t, int64_t from)
{
    int64_t keep = c->tier_keep_ms[t];
    return keep <= 0 || from >= c->now_ms - keep;
}

int iql_tier_choose(const iql_ctx *c, const iql_col *k, size_t nk, int64_t every, int64_t off,
                    int64_t from, int64_t to, int has_from, int has_to, int single)
{
    (void)has_to; /* an open end is now: its partial window comes from raw like any edge */
    if (!has_from)
        return 0; /* the windows would start at the first sample: raw finds it */
    for (int t = BDB_RES_1D; t >= BDB_RES_1M; t--) {
        int64_t w = bdb_res_width((enum bdb_res)t);
        int aligned = !floormod64(from, w) && !floormod64(to, w);
        if (every % w || off % w || !tier_keeps(c, t, from))
            continue;
        /* the tier must cover at least one whole window of it, or raw is as cheap */
        if (floordiv64(to, w) - floordiv64(from - 1, w) - 1 < 1)
            continue;
        int fits = 1;
        for (size_t i = 0; i < nk && fits; i++) {
            switch (k[i].fn) {
            case IQL_FN_COUNT:
            case IQL_FN_SUM:
            case IQL_FN_MEAN:
            case IQL_FN_MIN:
            case IQL_FN_MAX:
            case IQL_FN_SPREAD:
            case IQL_FN_STDDEV:
                break;
            case IQL_FN_MEDIAN:
                fits = every == w && single && aligned;
                break;
            case IQL_FN_PERCENTILE:
                fits = every == w && single && aligned &&
                       (k[i].param == 50 || k[i].param == 95 || k[i].param == 99);
                break;
            default:
                fits = 0;
            }
        }
        if (fits)
            return t;
    }
    return 0;
}

void iql_tier_acc_init(tier_acc *a, const size_t *dg, size_t ng, size_t nf, int64_t every,
                       int64_t off, int64_t from, int64_t to, uint64_t max)
{
    memset(a, 0, sizeof *a);
    a->dg = dg;
    a->ng = ng;
    a->nf = nf;
    a->every = every;
    a->lo = floordiv64(from - off, every) * every + off;
    int64_t hi = floordiv64(to - 1 - off, every) * every + off;
    uint64_t span = (uint64_t)((hi - a->lo) / every);
    a->nwin = span < max ? (size_t)span + 1 : 0;
    a->max_cells = max > UINT64_MAX / 4 ? UINT64_MAX : max * 4;
    a->g = calloc(ng + 1, sizeof *a->g);
    a->seen = calloc(ng + 1, sizeof *a->seen);
    if (!a->g || !a->seen)
        abort();
}

void iql_tier_acc_free(tier_acc *a)
{
    for (size_t g = 0; a->g && g < a->ng; g++)
        free(a->g[g]);
    free(a->g);
    free(a->seen);
    memset(a, 0, sizeof *a);
}

/* The output window of a window starting at start (one before the first goes into
 * the first), or SIZE_MAX when it is never shown. */
static inline size_t acc_slot(tier_acc *a, int64_t start)
{
    if (start >= a->jlo && start < a->jhi) /* the last one's window (edge samples) */
        return a->j;
    if (a->jhi > a->jlo && start >= a->jhi && start - a->jhi < a->every) {
        /* the next output window (a tier's windows in time order): no division */
        if (a->j + 1 >= a->nwin)
            return SIZE_MAX;
        a->jlo = a->jhi;
        a->jhi += a->every;
        return ++a->j;
    }
    int64_t d = start - a->lo;
    uint64_t q = d < 0 ? 0 : (uint64_t)(d / a->every);
    if (q >= a->nwin)
        return SIZE_MAX;
    if (d >= 0) {
        a->j = (size_t)q;
        a->jlo = a->lo + (int64_t)q * a->every;
        a->jhi = a->jlo + a->every;
    }
    return (size_t)q;
}

static void tacc_merge(iql_tacc *c, const iql_tacc *r, int spread);

/* Group g's windows, allocated at its first: every window of the group, as its rows
 * will be, bounded over all groups (NULL and over past it). */
static iql_tacc *acc_cells(tier_acc *a, size_t g)
{
    if (!a->g[g]) {
        uint64_t cells = (uint64_t)a->nwin * a->nf;
        if (cells > a->max_cells - a->cells) {
            a->over = 1;
            return NULL;
        }
        a->cells += cells;
        a->g[g] = calloc(a->nwin * a->nf, sizeof *a->g[g]);
        if (!a->g[g])
            abort();
    }
    return a->g[g];
}

/* Merges window v (starting at start) of field fi of device dev into its output
 * window. */
static void acc_put(tier_acc *a, uint32_t dev, uint32_t fi, int64_t start, const iql_tacc *v)
{
    size_t g = a->dg[dev];
    a->seen[g]++;
    if (!a->nwin || !v->count)
        return;
    size_t j = acc_slot(a, start);
    iql_tacc *cells = j == SIZE_MAX ? NULL : acc_cells(a, g);
    if (cells)
        tacc_merge(&cells[j * a->nf + fi], v, a->spread);
}

int iql_tier_acc_add(tier_acc *a, size_t g, int64_t start, const iql_tacc *cells, size_t nwin,
                     uint64_t seen)
{
    a->seen[g] += seen;
    if (!a->nwin || !cells || start < a->lo)
        return 0;
    uint64_t j0 = (uint64_t)((start - a->lo) / a->every);
    if (j0 >= a->nwin)
        return 0;
    size_t n = nwin < a->nwin - j0 ? nwin : a->nwin - (size_t)j0;
    iql_tacc *dst = acc_cells(a, g);
    if (!dst)
        return -1;
    dst += j0 * a->nf;
    for (size_t i = 0; i < n * a->nf; i++)
        tacc_merge(&dst[i], &cells[i], a->spread);
    return 0;
}

/* Merges one window row of field fi of device dev (the sketches' values from it). */
static void acc_add(tier_acc *a, uint32_t dev, uint32_t fi, const bdb_window_row *r)
{
    iql_tacc v = {r->count, r->sum,  r->min,
                  r->max,   r->mean, a->spread ? r->stddev * r->stddev * (double)r->count : 0,
                  r->p50,   r->p95,  r->p99};
    acc_put(a, dev, fi, r->start, &v);
}

struct tread {
    tier_acc *ta;
    const char *const *metrics;
    const uint32_t *fis;
    size_t nm;
    uint32_t dev;
    uint64_t *read, max;
    int over;
    const char *last_metric; /* edge_cb's last metric and its field index */
    uint32_t last_fi;
    int64_t hold_from; /* runs_cb keeps windows from here on in held (INT64_MAX: none) */
    bdb_stwin *held;   /* per metric: the window kept, count 0 if none */
};

static int tread_cb(void *ctx, const bdb_window_row *r)
{
    struct tread *t = ctx;
    if (++*t->read > t->max) {
        t->over = 1;
        return 1;
    }
    uint32_t fi = 0;
    for (size_t i = 0; i < t->nm; i++)
        if (t->metrics[i] == r->metric || !strcmp(t->metrics[i], r->metric)) {
            fi = t->fis[i];
            break;
        }
    acc_add(t->ta, t->dev, fi, r);
    if (t->ta->over) {
        t->over = 1;
        return 1;
    }
    return 0;
}

/* Merges one tier window's statistics into output cell c. */
static inline void put_stats(const tier_acc *a, iql_tacc *c, const bdb_stats *st)
{
    uint64_t cnt = bdb_stats_count(st);
    double sum = bdb_stats_sum(st), mn = bdb_stats_min(st), mx = bdb_stats_max(st);
    if (a->spread) {
        iql_tacc v = {cnt, sum, mn, mx, bdb_stats_mean(st), st->m2, NAN, NAN, NAN};
        tacc_merge(c, &v, 1);
    } else if (!c->count) {
        *c = (iql_tacc){cnt, sum, mn, mx, 0, 0, NAN, NAN, NAN};
    } else {
        c->count += cnt;
        c->sum += sum;
        c->min = mn < c->min ? mn : c->min;
        c->max = mx > c->max ? mx : c->max;
    }
}

/* A run of one metric's windows (no quantiles), ascending and none empty: merged
 * straight from their stats, the group's windows found once for the run. */
static int runs_cb(void *ctx, size_t mi, const bdb_window *w, size_t n)
{
    struct tread *t = ctx;
    tier_acc *a = t->ta;
    if (n > t->max || *t->read > t->max - n) {
        t->over = 1;
        return 1;
    }
    *t->read += n;
    size_t g = a->dg[t->dev];
    a->seen[g] += n;
    if (!a->nwin)
        return 0;
    size_t fi = t->fis[mi], j = acc_slot(a, w[0].start);
    if (j == SIZE_MAX)
        return 0;
    iql_tacc *cells = acc_cells(a, g);
    if (!cells) {
        t->over = 1;
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        if (w[i].start >= t->hold_from) { /* ascending: the last one, partly past the range */
            t->held[mi] = (bdb_stwin){w[i].start, w[i].st};
            break;
        }
        if (i && (j = acc_slot(a, w[i].start)) == SIZE_MAX)
            break; /* ascending: every later window is past the last one shown too */
        put_stats(a, &cells[j * a->nf + fi], &w[i].st);
    }
    return 0;
}

/* A raw sample as a window of one: the edges of an unaligned range merge with the
 * tier's windows (every function a tier answers across edges is mergeable). */
static int edge_cb(void *ctx, const char *metric, int64_t ts, double v)
{
    struct tread *t = ctx;
    tier_acc *a = t->ta;
    if (++*t->read > t->max) {
        t->over = 1;
        return 1;
    }
    /* a range read hands out one metric's samples in runs: its field index once */
    if (metric != t->last_metric) {
        t->last_metric = metric;
        t->last_fi = 0;
        for (size_t i = 0; i < t->nm; i++)
            if (t->metrics[i] == metric || !strcmp(t->metrics[i], metric)) {
                t->last_fi = t->fis[i];
                break;
            }
    }
    size_t g = a->dg[t->dev];
    a->seen[g]++;
    size_t j = a->nwin ? acc_slot(a, ts) : SIZE_MAX;
    iql_tacc *cells = j == SIZE_MAX ? NULL : acc_cells(a, g);
    if (cells) {
        iql_tacc one = {1, v, v, v, v, 0, v, v, v};
        tacc_merge(&cells[j * a->nf + t->last_fi], &one, a->spread);
    } else if (a->over) {
        t->over = 1;
        return 1;
    }
    return 0;
}

static int read_edge(const iql_ctx *c, const char *device, struct tread *t, int64_t from,
                     int64_t to)
{
    if (from >= to)
        return BDB_OK;
    bdb_range_query q = {.tenant = c->tenant,
                         .device = device,
                         .metrics = t->metrics,
                         .nmetrics = t->nm,
                         .from = from,
                         .to = to};
    bdb_query_stats st;
    return bdb_query_range(c->db, c->pool, &q, edge_cb, t, &st);
}

/* An edge of tier tier: its whole minutes from the 1m tier (a minute's statistics in
 * place of its samples: a Grafana range such as now() - 24h has up to two tier windows
 * of raw edges per device), the rest raw. Not with quantiles (their ranges are
 * aligned: no edges), for the 1m tier itself, or where the 1m tier no longer holds
 * the minutes. */
static int read_edge_minutes(const iql_ctx *c, int tier, const char *device, struct tread *t,
                             int64_t from, int64_t to, int quantiles)
{
    const int64_t m = 60000;
    int64_t ma = floordiv64(from - 1, m) * m + m, mb = floordiv64(to, m) * m;
    if (quantiles || tier == BDB_RES_1M || ma >= mb || !tier_keeps(c, BDB_RES_1M, ma))
        return read_edge(c, device, t, from, to);
    int rc = read_edge(c, device, t, from, ma);
    if (rc == BDB_OK && !t->over) {
        bdb_window_query q = {.tenant = c->tenant,
                              .device = device,
                              .metrics = t->metrics,
                              .nmetrics = t->nm,
                              .from = ma,
                              .to = mb,
                              .res = BDB_RES_1M,
                              .lateness_ms = c->lateness_ms,
                              .no_quantiles = 1,
                              .no_moments = !t->ta->spread};
        int64_t wm;
        rc = bdb_query_window_runs(c->db, &q, runs_cb, t, &wm);
    }
    if (rc == BDB_OK && !t->over)
        rc = read_edge(c, device, t, mb, to);
    return rc;
}

/* Forgets the held windows of t (runs_cb counted them as read) and holds no more: the
 * edge they stood for is read again, its minutes through runs_cb too. */
static void drop_held(struct tread *t)
{
    for (size_t mi = 0; mi < t->nm; mi++)
        if (t->held[mi].st.count) {
            (*t->read)--;
            t->ta->seen[t->ta->dg[t->dev]]--;
        }
    t->hold_from = INT64_MAX;
}

/* The held windows of t (runs_cb) into their output windows. */
static void put_held(struct tread *t)
{
    tier_acc *a = t->ta;
    for (size_t mi = 0; mi < t->nm; mi++) {
        const bdb_stwin *h = &t->held[mi];
        if (!h->st.count || !a->nwin)
            continue;
        size_t j = acc_slot(a, h->start);
        iql_tacc *cells = j == SIZE_MAX ? NULL : acc_cells(a, a->dg[t->dev]);
        if (cells)
            put_stats(a, &cells[j * a->nf + t->fis[mi]], &h->st);
        else if (a->over)
            t->over = 1;
    }
}

int iql_tier_read(const iql_ctx *c, int tier, const char *device, const char *const *metrics,
                  const uint32_t *fis, size_t nm, uint32_t dev, int64_t from, int64_t to,
                  int quantiles, tier_acc *ta, uint64_t *read)
{
    int64_t w = bdb_res_width((enum bdb_res)tier);
    /* [a, b): the tier's whole windows inside the range; the edges from raw */
    int64_t a = floordiv64(from - 1, w) * w + w, b = floordiv64(to, w) * w;
    struct tread t = {ta, metrics, fis, nm, dev, read, c->max_points, 0, NULL, 0, INT64_MAX, NULL};
    /* An end inside a window (Grafana's now) that no sample of the device reaches: the
     * tier's window is the range's. Held until the newest sample is known to be still
     * before the end after the read (a write of a later time may land meanwhile). */
    int64_t newest;
    int whole_last = !quantiles && a <= b && b < to && b <= INT64_MAX - w &&
                     bdb_db_device_newest(c->db, c->tenant, device, &newest) == BDB_OK &&
                     newest < to;
    if (whole_last) {
        t.held = calloc(nm + 1, sizeof *t.held);
        if (!t.held)
            abort();
        t.hold_from = b;
        b += w;
    }
    int rc = BDB_OK;
    if (a >= b) {
        rc = read_edge_minutes(c, tier, device, &t, from, to, quantiles);
    } else {
        bdb_window_query q = {.tenant = c->tenant,
                              .device = device,
                              .metrics = metrics,
                              .nmetrics = nm,
                              .from = a,
                              .to = b,
                              .res = (enum bdb_res)tier,
                              .lateness_ms = c->lateness_ms,
                              .no_quantiles = !quantiles,
                              .no_moments = !ta->spread};
        int64_t wm;
        rc = read_edge_minutes(c, tier, device, &t, from, a, quantiles);
        if (rc == BDB_OK && !t.over)
            rc = quantiles ? bdb_query_windows(c->db, &q, tread_cb, &t, &wm)
                           : bdb_query_window_runs(c->db, &q, runs_cb, &t, &wm);
        if (whole_last && rc == BDB_OK && !t.over) {
            if (iql_tier_test_hook)
                iql_tier_test_hook(c, device);
            if (bdb_db_device_newest(c->db, c->tenant, device, &newest) == BDB_OK && newest < to) {
                put_held(&t);
            } else { /* a sample at or after the end arrived: the edge as any other */
                int64_t end_from = t.hold_from;
                drop_held(&t);
                rc = read_edge_minutes(c, tier, device, &t, end_from, to, quantiles);
            }
        } else if (rc == BDB_OK && !t.over) {
            rc = read_edge_minutes(c, tier, device, &t, b, to, quantiles);
        }
    }
    free(t.held);
    if (t.over)
        return BDB_ERR_LIMIT;
    return rc;
}

/* Merges window r into c as acc_add merges a tier window. */
static void tacc_merge(iql_tacc *c, const iql_tacc *r, int spread)
{
    if (!r->count)
        return;
    if (!c->count) {
        *c = *r;
        return;
    }
    if (spread) {
        double dm = r->mean - c->mean;
        uint64_t tot = c->count + r->count;
        c->mean += dm * (double)r->count / (double)tot;
        c->m2 += r->m2 + dm * dm * (double)c->count * (double)r->count / (double)tot;
    }
    c->count += r->count;
    c->sum += r->sum;
    c->min = r->min < c->min ? r->min : c->min;
    c->max = r->max > c->max ? r->max : c->max;
    c->p50 = r->p50;
    c->p95 = r->p95;
    c->p99 = r->p99;
}

/* One column of one output window. */
static int tier_value(const iql_col *k, const iql_tacc *w, iql_val *out)
{
    uint64_t cnt = w ? w->count : 0;
    if (k->fn == IQL_FN_COUNT) {
        out->t = IQL_V_INT;
        out->i = (int64_t)cnt;
        return cnt > 0;
    }
    if (!cnt)
        return 0;
    out->t = IQL_V_NUM;
    switch (k->fn) {
    case IQL_FN_SUM:
        out->num = w->sum;
        return 1;
    case IQL_FN_MEAN:
        out->num = w->sum / (double)cnt;
        return 1;
    case IQL_FN_MIN:
        out->num = w->min;
        return 1;
    case IQL_FN_MAX:
        out->num = w->max;
        return 1;
    case IQL_FN_SPREAD:
        out->num = w->max - w->min;
        return 1;
    case IQL_FN_STDDEV:
        if (cnt < 2)
            return 0;
        out->num = sqrt(w->m2 / (double)(cnt - 1));
        return 1;
    case IQL_FN_MEDIAN:
    case IQL_FN_PERCENTILE: {
        double p = k->fn == IQL_FN_MEDIAN ? 50 : k->param, q = p / 100;
        /* The sketch answers rank floor(q (n - 1)) (agg/sketch.h); InfluxDB's percentile
         * takes rank floor(n q + 0.5) - 1 and its median averages the middle two of an
         * even count. Only where they agree is the sketch's value InfluxDB's (within
         * its error). */
        double nn = (double)cnt;
        if (k->fn == IQL_FN_MEDIAN ? cnt % 2 == 0 : floor(nn * q + 0.5) - 1 != floor(q * (nn - 1)))
            return -2;
        out->num = p == 50 ? w->p50 : p == 95 ? w->p95 : w->p99;
        return !isnan(out->num);
    }
    default:
        return 0;
    }
}

int iql_tier_rows(const iql_stmt *st, const tier_acc *ta, size_t g, const iql_col *k, size_t nk,
                  iql_series *se)
{
    if (!ta->nwin)
        return -1;
    const iql_tacc *acc = ta->g[g];
    for (size_t j = 0; j < ta->nwin; j++) {
        iql_val *row = iql_series_add_row(se);
        row[0] = (iql_val){.t = IQL_V_TIME, .i = ta->lo + (int64_t)j * ta->every};
        int any = 0;
        for (size_t q = 0; q < nk; q++) {
            const iql_tacc *w = acc && !k[q].is_tag ? &acc[j * ta->nf + (size_t)k[q].fi] : NULL;
            int v = tier_value(&k[q], w, &row[q + 1]);
            if (v == -2)
                return -2;
            if (v)
                any = 1;
            else if (k[q].fn != IQL_FN_COUNT || st->fill != IQL_FILL_NULL || k[q].absent)
                row[q + 1].t = IQL_V_NULL;
        }
        if (!any && st->fill == IQL_FILL_NONE)
            se->nrows--;
    }
    return 0;
}

int iql_fleet_choose(const iql_ctx *c, const iql_col *k, size_t nk, int64_t every, int64_t off,
                     int64_t from, int64_t to, int64_t *a, int64_t *b)
{
    for (size_t i = 0; i < nk; i++)
        if (k[i].fn == IQL_FN_MEDIAN || k[i].fn == IQL_FN_PERCENTILE || k[i].fn == IQL_FN_FIRST ||
            k[i].fn == IQL_FN_LAST)
            return 0; /* the fleet tables keep statistics, no sketch */
    for (int t = BDB_RES_1D; t >= BDB_RES_1H; t--) {
        int64_t w = bdb_res_width((enum bdb_res)t);
        if (every % w || off % w || !tier_keeps(c, t, from)) /* the tables follow the tiers */
            continue;
        *a = floordiv64(from - 1, w) * w + w;
        *b = floordiv64(to, w) * w;
        if (*a < *b)
            return t;
    }
    return 0;
}

int iql_fleet_read(const iql_ctx *c, int res, const char *metric, uint32_t fi, int64_t from,
                   int64_t to, tier_acc *ta, uint64_t *read)
{
    bdb_fleet f;
    bdb_fleet_init(&f, bdb_res_width((enum bdb_res)res));
    int rc = bdb_query_fleet_tables(c->db, c->pool, c->tenant, metric, (enum bdb_res)res, from, to,
                                    &f, NULL);
    struct tread t = {ta, &metric, &fi, 1, 0, read, c->max_points, 0, NULL, 0, INT64_MAX, NULL};
    for (size_t i = 0; rc == BDB_OK && i < f.n && !t.over; i++) {
        bdb_fleet_row fr;
        bdb_fleet_row_of(&f, &f.w[i], &fr);
        if (fr.start < from || fr.start >= to)
            continue;
        bdb_window_row row = {.metric = metric,
                              .start = fr.start,
                              .count = fr.readings,
                              .sum = fr.sum,
                              .min = fr.min,
                              .max = fr.max,
                              .mean = fr.avg,
                              .stddev = fr.stddev,
                              .p50 = NAN,
                              .p95 = NAN,
                              .p99 = NAN};
        tread_cb(&t, &row);
    }
    bdb_fleet_free(&f);
    if (t.over)
        return BDB_ERR_LIMIT;
    return rc;
}
