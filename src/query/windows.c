/* windows: aggregated windows of one device (see windows.h). */
#include "query/windows.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"
#include "storage/embedded/tier/db_tier.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* What both readers share: the device's rollups of the metrics asked (or all of its
 * metrics, sorted by name into *sorted), read from the tier. */
struct wread {
    bdb_device_snapshot snap;
    const char *const *names;
    const char **sorted;
    size_t n;
    bdb_rollup *r;
    int64_t wm;
};

static int wread_open(bdb_db *db, const bdb_window_query *q, struct wread *x, int64_t *watermark)
{
    memset(x, 0, sizeof *x);
    int64_t width = bdb_res_width(q->res);
    if (width == 0 || q->from >= q->to)
        return BDB_ERR_INVALID;
    int rc = bdb_db_device_snapshot(db, q->tenant, q->device, &x->snap);
    if (rc != BDB_OK)
        return rc;
    x->wm = INT64_MIN;
    if (x->snap.last_ts != INT64_MIN)
        x->wm = x->snap.last_ts - (q->lateness_ms > 0 ? q->lateness_ms : 0);
    if (watermark)
        *watermark = x->wm;
    x->names = q->metrics;
    x->n = q->nmetrics;
    if (!x->names || x->n == 0) {
        x->n = x->snap.nmetrics;
        x->sorted = malloc((x->n + 1) * sizeof *x->sorted);
        if (!x->sorted)
            abort();
        for (size_t i = 0; i < x->n; i++)
            x->sorted[i] = x->snap.metrics[i];
        qsort(x->sorted, x->n, sizeof *x->sorted, name_cmp);
        x->names = x->sorted;
    }
    x->r = calloc(x->n + 1, sizeof *x->r);
    if (!x->r)
        abort();
    for (size_t i = 0; i < x->n; i++) {
        bdb_rollup_init(&x->r[i], width);
        x->r[i].stats_only = q->no_quantiles;
    }
    if (x->n)
        rc = bdb_db_tier_read(db, q->tenant, q->device, x->names, x->n, q->res, q->from, q->to,
                              x->r);
    return rc;
}

static void wread_close(struct wread *x)
{
    for (size_t i = 0; x->r && i < x->n; i++)
        bdb_rollup_free(&x->r[i]);
    free(x->r);
    free(x->sorted);
    bdb_device_snapshot_free(&x->snap);
}

int bdb_query_windows(bdb_db *db, const bdb_window_query *q,
                      int (*cb)(void *ctx, const bdb_window_row *r), void *ctx, int64_t *watermark)
{
    struct wread x;
    int rc = wread_open(db, q, &x, watermark);
    if (!x.r) /* no snapshot taken: nothing to close */
        return rc;
    const char *const *names = x.names;
    size_t n = x.n;
    bdb_rollup *r = x.r;
    int64_t width = bdb_res_width(q->res), wm = x.wm;
    size_t *pos = calloc(n + 1, sizeof *pos);
    if (!pos)
        abort();
    if (q->desc)
        for (size_t i = 0; i < n; i++)
            pos[i] = r[i].n;
    uint64_t emitted = 0;
    /* merge the metrics in time order, ties by metric name (names are sorted) */
    while (rc == BDB_OK && (!q->limit || emitted < q->limit)) {
        ssize_t best = -1;
        for (size_t i = 0; i < n; i++) {
            if (q->desc ? pos[i] == 0 : pos[i] >= r[i].n)
                continue;
            const bdb_window *w = &r[i].w[q->desc ? pos[i] - 1 : pos[i]];
            const bdb_window *b = best < 0 ? NULL : &r[best].w[q->desc ? pos[best] - 1 : pos[best]];
            if (!b || (q->desc ? w->start > b->start : w->start < b->start))
                best = (ssize_t)i;
        }
        if (best < 0)
            break;
        const bdb_window *w = &r[best].w[q->desc ? --pos[best] : pos[best]++];
        bdb_window_row row = {
            .metric = names[best],
            .start = w->start,
            .width = width,
            .count = bdb_stats_count(&w->st),
            .sum = bdb_stats_sum(&w->st),
            .min = bdb_stats_min(&w->st),
            .max = bdb_stats_max(&w->st),
            .mean = q->no_moments ? NAN : bdb_stats_mean(&w->st),
            .stddev = q->no_moments ? NAN : bdb_stats_stddev_pop(&w->st),
            .p50 = NAN,
            .p95 = NAN,
            .p99 = NAN,
            .final = wm != INT64_MIN && w->start + width <= wm,
        };
        if (!q->no_quantiles) {
            row.p50 = bdb_sketch_quantile(&w->sk, 0.50);
            row.p95 = bdb_sketch_quantile(&w->sk, 0.95);
            row.p99 = bdb_sketch_quantile(&w->sk, 0.99);
        }
        emitted++;
        if (cb(ctx, &row))
            break;
    }
    free(pos);
    wread_close(&x);
    return rc;
}

int bdb_query_window_runs(bdb_db *db, const bdb_window_query *q,
                          int (*cb)(void *ctx, size_t mi, const bdb_window *w, size_t n), void *ctx,
                          int64_t *watermark)
{
    if (q->desc || q->limit || !q->no_quantiles)
        return BDB_ERR_INVALID;
    struct wread x;
    int rc = wread_open(db, q, &x, watermark);
    if (!x.r) /* no snapshot taken: nothing to close */
        return rc;
    for (size_t i = 0; i < x.n && rc == BDB_OK; i++)
        if (x.r[i].n && cb(ctx, i, x.r[i].w, x.r[i].n))
            break;
    wread_close(&x);
    return rc;
}
