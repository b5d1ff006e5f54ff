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

int bdb_query_windows(bdb_db *db, const bdb_window_query *q,
                      int (*cb)(void *ctx, const bdb_window_row *r), void *ctx, int64_t *watermark)
{
    int64_t width = bdb_res_width(q->res);
    if (width == 0 || q->from >= q->to)
        return BDB_ERR_INVALID;
    bdb_device_snapshot snap;
    int rc = bdb_db_device_snapshot(db, q->tenant, q->device, &snap);
    if (rc != BDB_OK)
        return rc;
    int64_t wm = INT64_MIN;
    if (snap.last_ts != INT64_MIN)
        wm = snap.last_ts - (q->lateness_ms > 0 ? q->lateness_ms : 0);
    if (watermark)
        *watermark = wm;
    const char *const *names = q->metrics;
    size_t n = q->nmetrics;
    const char **sorted = NULL;
    if (!names || n == 0) {
        n = snap.nmetrics;
        sorted = malloc((n + 1) * sizeof *sorted);
        if (!sorted)
            abort();
        for (size_t i = 0; i < n; i++)
            sorted[i] = snap.metrics[i];
        qsort(sorted, n, sizeof *sorted, name_cmp);
        names = sorted;
    }
    bdb_rollup *r = calloc(n + 1, sizeof *r);
    size_t *pos = calloc(n + 1, sizeof *pos);
    if (!r || !pos)
        abort();
    for (size_t i = 0; i < n; i++) {
        bdb_rollup_init(&r[i], width);
        r[i].stats_only = q->no_quantiles;
    }
    if (n)
        rc = bdb_db_tier_read(db, q->tenant, q->device, names, n, q->res, q->from, q->to, r);
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
    for (size_t i = 0; i < n; i++)
        bdb_rollup_free(&r[i]);
    free(r);
    free(pos);
    free(sorted);
    bdb_device_snapshot_free(&snap);
    return rc;
}
