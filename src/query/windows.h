/* windows: one device's aggregated windows (1m, 1h, 1d tiers) over a time range.
 *
 * The tier answers from its files merged with the head's unflushed samples
 * (bdb_db_tier_read), so a window's count, sum, min and max equal what raw gives for
 * the same interval, and p50/p95/p99 are within 1% of the exact order statistic.
 * Windows come in time order (ties by metric name), newest first with desc.
 *
 * A window is final once the device's watermark has passed its end: watermark = the
 * newest event time of the device minus the allowed lateness. A final window does not
 * change any more except for samples later than the lateness (late-data item). */
#ifndef BDB_WINDOWS_H
#define BDB_WINDOWS_H

#include "agg/rollup.h"
#include "storage/embedded/core/db.h"

#include <stddef.h>
#include <stdint.h>

typedef struct bdb_window_query {
    const char *tenant;
    const char *device;
    const char *const *metrics; /* NULL/0 = every metric of the device */
    size_t nmetrics;
    int64_t from, to; /* windows whose start is in [align_down(from), to) */
    enum bdb_res res; /* BDB_RES_1M, _1H or _1D */
    int64_t lateness_ms;
    uint64_t limit; /* 0 = no limit */
    int desc;
    int no_quantiles; /* p50/p95/p99 left NaN: walking the sketches costs, and an
                         answer that does not show them need not pay it */
    int no_moments;   /* mean and stddev left NaN: their exact forms cost more than
                         reading the window, and a caller that adds sums needs neither */
} bdb_window_query;

/* Statistics of one window, as reported. */
typedef struct bdb_window_row {
    const char *metric;
    int64_t start, width;
    uint64_t count;
    double sum, min, max, mean, stddev; /* stddev: population (divides by n) */
    double p50, p95, p99;
    int final;
} bdb_window_row;

/* cb gets each window; returning non-zero stops (not an error). *watermark receives
 * the device's watermark (INT64_MIN when it has no sample).
 * Errors: BDB_ERR_NOTFOUND (device), BDB_ERR_INVALID (resolution, from >= to),
 * BDB_ERR_CORRUPT, BDB_ERR_IO. */
int bdb_query_windows(bdb_db *db, const bdb_window_query *q,
                      int (*cb)(void *ctx, const bdb_window_row *r), void *ctx, int64_t *watermark);

/* The same windows as their statistics, in one call of cb per metric (its windows
 * ascending, none empty) instead of one per window: for a caller that merges many
 * devices' windows, where building and passing each row costs more than its sum.
 * q->desc, q->limit and the quantiles are not served (BDB_ERR_INVALID unless 0 and
 * no_quantiles set); cb's metric is q->metrics[mi] (or the device's, sorted). A
 * non-zero cb stops. Errors as bdb_query_windows. */
int bdb_query_window_runs(bdb_db *db, const bdb_window_query *q,
                          int (*cb)(void *ctx, size_t mi, const bdb_window *w, size_t n), void *ctx,
                          int64_t *watermark);
#endif
