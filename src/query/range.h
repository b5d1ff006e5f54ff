/* range: one device's samples over [from, to), across any number of partitions and
 * bucket-size changes.
 *
 * The plan comes from the device's bucket history: every partition intersecting the
 * range (clamped to the device's first and last event) is read, in waves of
 * 2 x workers partitions run in parallel on the pool, and emitted in time order (ties
 * by metric name), newest first with desc. A limit stops the scan early, so
 * "last 10 samples" reads only the newest partitions. */
#ifndef BDB_RANGE_H
#define BDB_RANGE_H

#include "query/pool.h"
#include "storage/embedded/core/db.h"

#include <stddef.h>
#include <stdint.h>

#define BDB_QUERY_MAX_PARTITIONS 100000

typedef struct bdb_range_query {
    const char *tenant;
    const char *device;
    const char *const *metrics; /* NULL/0 = every metric of the device */
    size_t nmetrics;
    int64_t from, to; /* [from, to) Unix ms */
    uint64_t limit;   /* 0 = no limit */
    int desc;
} bdb_range_query;

typedef struct bdb_query_stats {
    uint64_t partitions; /* partitions read */
    uint64_t chunks;     /* chunks decoded */
    uint64_t samples;    /* samples returned */
} bdb_query_stats;

/* cb gets each sample; returning non-zero stops the query (not an error).
 * Errors: BDB_ERR_NOTFOUND (no such device), BDB_ERR_LIMIT (more partitions than
 * BDB_QUERY_MAX_PARTITIONS), BDB_ERR_INVALID (from >= to), BDB_ERR_CORRUPT.
 * BDB_ERR_PARTIAL: every sample was emitted except those of a sink that could not be
 * read (bdb_db_read); an answer built from them must be marked partial. */
int bdb_query_range(bdb_db *db, bdb_pool *pool, const bdb_range_query *q,
                    int (*cb)(void *ctx, const char *metric, int64_t ts, double v), void *ctx,
                    bdb_query_stats *st);

#endif
