/* iql_tier: GROUP BY time windows from the 1m/1h/1d tiers (iql_tier.h). */
#include "query/influxql/iql_tier.h"

#include "agg/rollup.h"
#include "bucketdb/bdb.h"
#include "agg/fleet.h"
#include "query/fleetq.h"
#include "query/range.h"
#include "query/windows.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* Merges one window of field fi of device dev into its output window: a window that
 * starts before the first goes into the first, one after the last is never shown. */
static void acc_add(tier_acc *a, uint32_t dev, uint32_t fi, const bdb_window_row *r)
{
    size_t g = a->dg[dev];
    a->seen[g]++;
    if (!a->nwin || !r->count)
        return;
    size_t j;
    if (r->start >= a->jlo && r->start < a->jhi) { /* the last one's window (edge samples) */
        j = a->j;
    } else {
        int64_t d = r->start - a->lo;
        uint64_t q = d < 0 ? 0 : (uint64_t)(d / a->every);
        if (q >= a->nwin)
            return;
        j = (size_t)q;
        if (d >= 0) {
            a->j = j;
            a->jlo = a->lo + (int64_t)j * a->every;
            a->jhi = a->jlo + a->every;
        }
    }
    if (!a->g[g]) {
        /* every window of the group, as its rows will be: bounded over all groups */
        uint64_t cells = (uint64_t)a->nwin * a->nf;
        if (cells > a->max_cells - a->cells) {
            a->over = 1;
            return;
        }
        a->cells += cells;
        a->g[g] = calloc(a->nwin * a->nf, sizeof *a->g[g]);
        if (!a->g[g])
            abort();
    }
    iql_tacc *c = &a->g[g][j * a->nf + fi];
    double m2 = a->spread ? r->stddev * r->stddev * (double)r->count : 0;
    if (!c->count) {
        *c = (iql_tacc){r->count, r->sum, r->min, r->max, r->mean, m2, r->p50, r->p95, r->p99};
        return;
    }
    if (a->spread) { /* Chan et al.: merge (count, mean, m2) of two parts */
        double dm = r->mean - c->mean;
        uint64_t tot = c->count + r->count;
        c->mean += dm * (double)r->count / (double)tot;
        c->m2 += m2 + dm * dm * (double)c->count * (double)r->count / (double)tot;
    }
    c->count += r->count;
    c->sum += r->sum;
    c->min = r->min < c->min ? r->min : c->min;
    c->max = r->max > c->max ? r->max : c->max;
    c->p50 = r->p50; /* sketches answer only one window of one device (iql_tier_choose) */
    c->p95 = r->p95;
    c->p99 = r->p99;
}

/* A window (or edge sample) of one device read on the pool, kept in read order until
 * the caller merges the devices' in device order. */
typedef struct tier_item {
    int64_t start;
    uint64_t count;
    double sum, min, max; /* an edge sample: its value */
    uint32_t fi;
    uint32_t w; /* ITEM_SAMPLE, ITEM_STATS, or the whole row's index in tier_buf.w */
} tier_item;
#define ITEM_SAMPLE UINT32_MAX
#define ITEM_STATS (UINT32_MAX - 1) /* a window of which the answer wants these alone */

typedef struct tier_buf {
    tier_item *v;
    size_t n, cap;
    bdb_window_row *w;
    size_t nw, capw;
} tier_buf;

static void *grow(void *p, size_t *cap, size_t size)
{
    *cap = *cap ? *cap * 2 : 256;
    p = realloc(p, *cap * size);
    if (!p)
        abort();
    return p;
}

/* Buffers kept between queries: a 30-day panel of a tag group buffers some 20,000
 * windows, and memory fresh from the system costs a page fault per 4 KiB, more than
 * reading them. At most BUF_KEEP of at most BUF_KEEP_BYTES each are kept. */
#define BUF_KEEP 8
#define BUF_KEEP_BYTES (4u << 20)
static pthread_mutex_t buf_mu = PTHREAD_MUTEX_INITIALIZER;
static tier_buf buf_kept[BUF_KEEP];
static size_t buf_nkept;

static void buf_take(tier_buf *b)
{
    pthread_mutex_lock(&buf_mu);
    if (buf_nkept)
        *b = buf_kept[--buf_nkept];
    else
        memset(b, 0, sizeof *b);
    pthread_mutex_unlock(&buf_mu);
    b->n = b->nw = 0;
}

static void buf_give(tier_buf *b)
{
    pthread_mutex_lock(&buf_mu);
    if (buf_nkept < BUF_KEEP && b->cap * sizeof *b->v + b->capw * sizeof *b->w <= BUF_KEEP_BYTES) {
        buf_kept[buf_nkept++] = *b;
        b = NULL;
    }
    pthread_mutex_unlock(&buf_mu);
    if (b) {
        free(b->v);
        free(b->w);
    }
}

/* An edge sample as a window of one. */
static bdb_window_row sample_row(const char *metric, int64_t ts, double v)
{
    return (bdb_window_row){.metric = metric,
                            .start = ts,
                            .count = 1,
                            .sum = v,
                            .min = v,
                            .max = v,
                            .mean = v,
                            .p50 = v,
                            .p95 = v,
                            .p99 = v};
}

struct tread {
    tier_acc *ta;
    const char *const *metrics;
    const uint32_t *fis;
    size_t nm;
    uint32_t dev;
    uint64_t *read, max;
    int over;
    /* on the pool: the windows go to buf, counted against max in *shared (all the
     * devices read at once), and are merged later */
    tier_buf *buf;
    _Atomic uint64_t *shared;
    int sample; /* the row is an edge sample: the item alone keeps it */
    int whole;  /* the answer wants the windows' mean, stddev or quantiles too */
};

static int tread_cb(void *ctx, const bdb_window_row *r)
{
    struct tread *t = ctx;
    if (t->buf ? atomic_fetch_add(t->shared, 1) + 1 > t->max : ++*t->read > t->max) {
        t->over = 1;
        return 1;
    }
    uint32_t fi = 0;
    for (size_t i = 0; i < t->nm; i++)
        if (t->metrics[i] == r->metric || !strcmp(t->metrics[i], r->metric)) {
            fi = t->fis[i];
            break;
        }
    if (t->buf) {
        tier_buf *b = t->buf;
        if (b->n == b->cap)
            b->v = grow(b->v, &b->cap, sizeof *b->v);
        uint32_t w = t->sample ? ITEM_SAMPLE : ITEM_STATS;
        if (!t->sample && t->whole) {
            if (b->nw == b->capw)
                b->w = grow(b->w, &b->capw, sizeof *b->w);
            w = (uint32_t)b->nw;
            b->w[b->nw++] = *r;
        }
        b->v[b->n++] = (tier_item){r->start, r->count, r->sum, r->min, r->max, fi, w};
        return 0;
    }
    acc_add(t->ta, t->dev, fi, r);
    if (t->ta->over) {
        t->over = 1;
        return 1;
    }
    return 0;
}

/* A raw sample as a window of one: the edges of an unaligned range merge with the
 * tier's windows (every function a tier answers across edges is mergeable). */
static int edge_cb(void *ctx, const char *metric, int64_t ts, double v)
{
    struct tread *t = ctx;
    bdb_window_row row = sample_row(metric, ts, v);
    t->sample = 1;
    int stop = tread_cb(ctx, &row);
    t->sample = 0;
    return stop;
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

/* iql_tier_read into t (which says where the windows go). */
static int tier_read(const iql_ctx *c, int tier, const char *device, struct tread *t, int64_t from,
                     int64_t to, int quantiles, int moments)
{
    int64_t w = bdb_res_width((enum bdb_res)tier);
    /* [a, b): the tier's whole windows inside the range; the edges from raw */
    int64_t a = floordiv64(from - 1, w) * w + w, b = floordiv64(to, w) * w;
    const char *const *metrics = t->metrics;
    size_t nm = t->nm;
    int rc = BDB_OK;
    if (a >= b) {
        rc = read_edge(c, device, t, from, to);
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
                              .no_moments = !moments};
        int64_t wm;
        rc = read_edge(c, device, t, from, a);
        if (rc == BDB_OK && !t->over)
            rc = bdb_query_windows(c->db, &q, tread_cb, t, &wm);
        if (rc == BDB_OK && !t->over)
            rc = read_edge(c, device, t, b, to);
    }
    if (t->over)
        return BDB_ERR_LIMIT;
    return rc;
}

int iql_tier_read(const iql_ctx *c, int tier, const char *device, const char *const *metrics,
                  const uint32_t *fis, size_t nm, uint32_t dev, int64_t from, int64_t to,
                  int quantiles, tier_acc *ta, uint64_t *read)
{
    struct tread t = {ta, metrics, fis, nm, dev, read, c->max_points, 0, NULL, NULL};
    return tier_read(c, tier, device, &t, from, to, quantiles, ta->spread);
}

/* Devices per pool run: other queries' reads get the pool between two runs. */
#define TIER_WAVE 64

struct devs_job {
    const iql_ctx *c;
    int tier, quantiles, moments;
    iql_tier_dev *devs;
    const int64_t *ranges;
    size_t nranges;
    tier_buf *bufs; /* one per task */
    struct span {
        uint32_t task;
        size_t a, b; /* the device's items in its task's buffer */
    } * span;        /* per device of the wave */
    size_t first, n; /* the wave */
    _Atomic size_t next;
    _Atomic uint64_t shared;
};

/* A task takes the wave's next device until none is left: tasks that wait for a core
 * do not hold devices the others could read. */
static void read_devs_task(void *arg, size_t i)
{
    struct devs_job *j = arg;
    tier_buf *b = &j->bufs[i];
    /* the engine's range reads stay on this thread: a pool task that waits on the pool
     * could wait for itself */
    iql_ctx c = *j->c;
    c.pool = NULL;
    for (size_t k; (k = atomic_fetch_add(&j->next, 1)) < j->n;) {
        iql_tier_dev *d = &j->devs[j->first + k];
        struct tread t = {.metrics = d->metrics,
                          .fis = d->fis,
                          .nm = d->nm,
                          .dev = d->dev,
                          .max = c.max_points,
                          .buf = b,
                          .shared = &j->shared,
                          .whole = j->moments || j->quantiles};
        size_t a = b->n;
        d->rc = BDB_OK;
        for (size_t r = 0; r < j->nranges && d->rc == BDB_OK; r++)
            d->rc = tier_read(&c, j->tier, d->device, &t, j->ranges[2 * r], j->ranges[2 * r + 1],
                              j->quantiles, j->moments);
        j->span[k] = (struct span){(uint32_t)i, a, b->n};
    }
}

void iql_tier_read_devs(const iql_ctx *c, int tier, iql_tier_dev *devs, size_t n,
                        const int64_t *ranges, size_t nranges, int quantiles, tier_acc *ta,
                        uint64_t *read)
{
    /* a task per core at most: more only take turns on the cores (sysconf reads a
     * file: once) */
    static _Atomic long ncores;
    long cores = atomic_load(&ncores);
    if (!cores)
        atomic_store(&ncores, cores = sysconf(_SC_NPROCESSORS_ONLN));
    size_t tasks = c->pool ? (size_t)bdb_pool_workers(c->pool) : 0;
    if (cores > 0 && tasks > (size_t)cores)
        tasks = (size_t)cores;
    if (tasks < 2 || n < 2) { /* one after another, straight into ta */
        for (size_t i = 0; i < n; i++) {
            iql_tier_dev *d = &devs[i];
            d->rc = BDB_OK;
            for (size_t r = 0; r < nranges && d->rc == BDB_OK; r++)
                d->rc = iql_tier_read(c, tier, d->device, d->metrics, d->fis, d->nm, d->dev,
                                      ranges[2 * r], ranges[2 * r + 1], quantiles, ta, read);
            if (d->rc == BDB_ERR_LIMIT)
                return;
        }
        return;
    }
    /* The devices are read in parallel, a wave at a time, into the tasks' buffers; the
     * buffers are merged in device order, the order of a read one after another, so
     * that the sums are the same to the last bit whatever thread read what. The items
     * buffered at once are bounded by max_points like the reads (shared). */
    struct devs_job j = {.c = c,
                         .tier = tier,
                         .quantiles = quantiles,
                         .moments = ta->spread,
                         .devs = devs,
                         .ranges = ranges,
                         .nranges = nranges};
    j.bufs = calloc(tasks, sizeof *j.bufs);
    j.span = calloc(TIER_WAVE, sizeof *j.span);
    if (!j.bufs || !j.span)
        abort();
    for (size_t i = 0; i < tasks; i++)
        buf_take(&j.bufs[i]);
    for (size_t first = 0; first < n; first += TIER_WAVE) {
        j.first = first;
        j.n = n - first < TIER_WAVE ? n - first : TIER_WAVE;
        atomic_store(&j.next, 0);
        atomic_store(&j.shared, *read);
        for (size_t i = 0; i < tasks; i++)
            j.bufs[i].n = j.bufs[i].nw = 0;
        bdb_pool_run(c->pool, read_devs_task, &j, j.n < tasks ? j.n : tasks);
        int stop = 0;
        for (size_t k = 0; k < j.n && !stop; k++) {
            iql_tier_dev *d = &devs[first + k];
            const tier_buf *b = &j.bufs[j.span[k].task];
            for (size_t x = j.span[k].a; x < j.span[k].b && !stop; x++) {
                const tier_item *it = &b->v[x];
                bdb_window_row sr;
                if (it->w == ITEM_SAMPLE)
                    sr = sample_row(NULL, it->start, it->sum);
                else if (it->w == ITEM_STATS)
                    sr = (bdb_window_row){.start = it->start,
                                          .count = it->count,
                                          .sum = it->sum,
                                          .min = it->min,
                                          .max = it->max,
                                          .mean = NAN,
                                          .stddev = NAN,
                                          .p50 = NAN,
                                          .p95 = NAN,
                                          .p99 = NAN};
                if (++*read > c->max_points ||
                    (acc_add(ta, d->dev, it->fi, it->w >= ITEM_STATS ? &sr : &b->w[it->w]),
                     ta->over)) {
                    d->rc = BDB_ERR_LIMIT;
                    stop = 1;
                }
            }
            stop |= d->rc == BDB_ERR_LIMIT;
        }
        if (stop)
            break;
    }
    for (size_t i = 0; i < tasks; i++)
        buf_give(&j.bufs[i]);
    free(j.bufs);
    free(j.span);
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
    struct tread t = {ta, &metric, &fi, 1, 0, read, c->max_points, 0};
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
