/* sink: where the embedded engine's flushed raw samples go and are read back from,
 * when not its own block files.
 *
 * The engine keeps its write-ahead log, in-memory head, catalog, tiers and
 * current-state index either way. Without a sink (the default) a flush writes block
 * files; with one, a flush hands every frozen series to put() partition by partition
 * and then calls commit(), which returns only when the sink has confirmed every
 * sample. Only after that does the engine free the frozen head and delete the WAL
 * segments the flush covers, so an acknowledged sample is always in the WAL or
 * confirmed by the sink. A failed commit fails the flush: the head and the WAL keep
 * everything and the next flush sends it again (puts must be idempotent: same key,
 * same value).
 *
 * Reads of a device's range ask the head first and the sink second (a sample that
 * left the head was confirmed before it left).
 *
 * Implementations: the Cassandra telemetry table (storage/cassandra/cass_sink.h). */
#ifndef BDB_STORAGE_SINK_H
#define BDB_STORAGE_SINK_H

#include <stddef.h>
#include <stdint.h>

typedef struct bdb_sink bdb_sink;

/* Receives samples of one metric from read(), in any order; duplicates of a time
 * are impossible (one row per series and time). */
typedef void (*bdb_sink_add_fn)(void *ud, size_t metric, int64_t ts, double v);

typedef struct bdb_sink_ops {
    /* Samples of one series inside one partition (partition id as the engine's
     * db_partition_id: bucket start plus sub-bucket), sorted by time, deduplicated.
     * ttl_ms: the tenant's resolved raw TTL, counted from each sample's event time
     * (0 = forever). May block while too much is in flight. */
    int (*put)(bdb_sink *s, const char *tenant, const char *device, const char *metric,
               int64_t partition, int64_t ttl_ms, const int64_t *ts, const double *v, size_t n);
    /* Waits until everything put since the last commit is confirmed. BDB_OK, or the
     * error of a put that failed after its retries (BDB_ERR_AGAIN, BDB_ERR_IO). */
    int (*commit)(bdb_sink *s);
    /* Samples of the named metrics in [lo, hi) from the partitions with the given
     * bucket starts, each with sub-buckets 0..nsub-1. */
    int (*read)(bdb_sink *s, const char *tenant, const char *device, const int64_t *buckets,
                size_t nbuckets, uint32_t nsub, int64_t lo, int64_t hi, const char *const *metrics,
                size_t nmetrics, bdb_sink_add_fn add, void *ud);
    /* One line for logs and /status ("cassandra://127.0.0.1:9042/bucketdb, ..."). */
    const char *(*describe)(bdb_sink *s);
    void (*close)(bdb_sink *s);
} bdb_sink_ops;

struct bdb_sink {
    const bdb_sink_ops *ops;
};

#endif
