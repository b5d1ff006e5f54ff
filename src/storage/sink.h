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
struct bdb_sink_ack; /* one write batch's acknowledgement (ack_begin) */
struct bdb_sink_row;
struct bdb_rollup; /* tiers and fleet: agg/rollup.h, agg/fleet.h */
struct bdb_fleet;

/* Receives samples of one metric from read(), in any order; duplicates of a time
 * are impossible (one row per series and time). */
typedef void (*bdb_sink_add_fn)(void *ud, size_t metric, int64_t ts, double v);

/* state, registry, counters, late: the records of the optional ops below. Strings are
 * valid during the call only. */
typedef struct bdb_sink_metric {
    const char *name;
    int64_t ts; /* time of the newest report that carried the metric */
    double v;
} bdb_sink_metric;
/* A string attribute (a string field other than the state): the newest value. */
typedef struct bdb_sink_attr {
    const char *name, *value;
    int64_t ts; /* time of the newest report that carried it */
} bdb_sink_attr;
typedef struct bdb_sink_state {
    const char *tenant, *device;
    int64_t event_ts;  /* newest report time; INT64_MIN = unknown */
    const char *state; /* NULL: no report carried one */
    int64_t state_ts;
    const bdb_sink_metric *metrics;
    size_t nmetrics;
    const bdb_sink_attr *attrs; /* per name the newest value wins, as for metrics */
    size_t nattrs;
} bdb_sink_state;
typedef struct bdb_sink_device {
    const char *tenant, *device;
    const char *const *tag_keys, *const *tag_vals;
    size_t ntags;
    int64_t first_ts, last_ts; /* INT64_MIN / INT64_MAX: no event */
    uint64_t samples;
    int64_t bucket_ms; /* size in force for new events */
    int pinned, freq_class;
    const int64_t *hist_from, *hist_size; /* bucket history, oldest first */
    size_t nhist;
    const char *const *metrics;
    size_t nmetrics;
} bdb_sink_device;
typedef struct bdb_sink_count {
    const char *tenant, *device;
    int64_t bucket_start, bucket_end;
    uint64_t events;
    uint32_t subbuckets;
} bdb_sink_count;
typedef struct bdb_sink_late {
    const char *tenant, *device;
    int64_t ts;      /* event time */
    int64_t newest;  /* the device's newest event time when it arrived */
    int64_t arrived; /* server clock at arrival */
    uint64_t seq;    /* arrival order on the server: the order of equal arrived */
    int64_t ttl_ms;  /* late_put only */
} bdb_sink_late;
typedef void (*bdb_sink_state_fn)(void *ud, const bdb_sink_state *st);
typedef void (*bdb_sink_device_fn)(void *ud, const bdb_sink_device *d);
typedef void (*bdb_sink_count_fn)(void *ud, const bdb_sink_count *c);

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

    /* ---- tiers and fleet (optional: NULL = the sink does not take them and the
     * engine's tier and fleet files answer; see storage/embedded/sink/db_agg_sink.c).
     * Every window handed to a put is the complete value of its window as the engine
     * knows it at that flush (the partials of every flush merged, late recomputes
     * applied), never a partial: writing it again replaces the row. ttl_s[i] is the
     * seconds window i lives (0 = forever). A put returns once the sink confirmed
     * every window (or with the error of one that failed after its retries), so the
     * flush that calls it commits after. res is BDB_RES_1M/1H/1D (agg/rollup.h). */
    int (*tier_put)(bdb_sink *s, const char *tenant, const char *device, const char *metric,
                    int res, const struct bdb_rollup *r, const int32_t *ttl_s);
    /* Merges the windows of one series at res whose start lies in [lo, hi) into out. */
    int (*tier_read)(bdb_sink *s, const char *tenant, const char *device, const char *metric,
                     int res, int64_t lo, int64_t hi, struct bdb_rollup *out);
    /* Fleet windows of (tenant, metric) at res (1H or 1D), with their device sets. */
    int (*fleet_put)(bdb_sink *s, const char *tenant, const char *metric, int res,
                     const struct bdb_fleet *f, const int32_t *ttl_s);
    int (*fleet_read)(bdb_sink *s, const char *tenant, const char *metric, int res, int64_t lo,
                      int64_t hi, struct bdb_fleet *out);

    /* ---- state, registry, counters, late (optional: NULL = the sink does not take
     * them and the engine's local index, catalog and counts answer alone; see
     * storage/embedded/sink/db_state_sink.c). A put takes the n records of one flush and
     * returns once the sink confirmed them all, so the flush that calls it commits
     * after; puts are idempotent (writing the same record again changes nothing) and
     * never let an older event replace a newer one. Reads return what the sink holds;
     * the engine merges its unflushed part. */
    int (*state_put)(bdb_sink *s, const bdb_sink_state *v, size_t n);
    int (*device_put)(bdb_sink *s, const bdb_sink_device *v, size_t n);
    /* Absolute event counts of (device, partition): a larger count replaces a
     * smaller one, never the reverse, so a re-sent flush does not count twice. */
    int (*count_put)(bdb_sink *s, const bdb_sink_count *v, size_t n);
    /* One device's latest event (BDB_ERR_NOTFOUND: none). */
    int (*state_get)(bdb_sink *s, const char *tenant, const char *device, bdb_sink_state_fn fn,
                     void *ud);
    /* state != NULL: the devices in that state (device, state, state_ts only);
     * state == NULL: every device of the tenant (event_ts, state, state_ts; no
     * metrics). */
    int (*state_list)(bdb_sink *s, const char *tenant, const char *state, bdb_sink_state_fn fn,
                      void *ud);
    int (*device_list)(bdb_sink *s, const char *tenant, bdb_sink_device_fn fn, void *ud);
    /* Counts of partitions that overlap [from, to). */
    int (*count_list)(bdb_sink *s, const char *tenant, int64_t from, int64_t to,
                      bdb_sink_count_fn fn, void *ud);

    /* ---- late arrivals (optional: NULL = the engine's in-memory list of recent late
     * events answers alone; see storage/embedded/sink/db_late_sink.c). A put takes the late
     * events noted since the last confirmed flush and returns once the sink confirmed
     * them all (the flush commits after); a re-sent event writes the same row. ttl_ms:
     * the tenant's raw TTL, counted from the event time (0 = forever). */
    int (*late_put)(bdb_sink *s, const struct bdb_sink_late *v, size_t n);
    /* Every late event the sink holds for tenant (and device, when not NULL), in any
     * order. */
    int (*late_list)(bdb_sink *s, const char *tenant, const char *device,
                     void (*fn)(void *ud, const struct bdb_sink_late *e), void *ud);

    /* ---- dropping a tenant (optional: NULL = the sink keeps a dropped tenant's rows
     * until their TTL; see storage/embedded/core/db_drop.c). Deletes every row of
     * tenant in every table: devs are the devices the engine's catalog knows (bucket
     * history, first and last event; the sink adds the ones its own registry lists),
     * nsub[i] the most sub-buckets device i ever had. Returns once the sink confirmed
     * every delete, or with the error of one that failed after its retries; deleting
     * again what is gone is not an error (the engine calls again after a failure). */
    int (*drop_tenant)(bdb_sink *s, const char *tenant, const bdb_sink_device *devs,
                       const uint32_t *nsub, size_t n);

    /* ---- acknowledgement through the sink (optional: NULL, or ack_begin giving no
     * group, = a write is acknowledged once the WAL holds it: ack=wal). With a group,
     * the engine hands a write batch's samples over right after its WAL fsync and
     * acknowledges the batch only once ack_end confirmed every row at the sink's
     * write consistency (storage/embedded/sink/db_ack_sink.c), so the samples outlive
     * the loss of this node and its disk. The flush still puts them again later
     * (same key, same value). ack_put may block while too much is in flight (the
     * queue the flushes use). */
    int (*ack_begin)(bdb_sink *s, struct bdb_sink_ack **g); /* *g NULL: ack=wal */
    /* Rows of one partition (tenant, device, partition as for put; ttl_ms as put's).
     * Strings are copied. */
    int (*ack_put)(struct bdb_sink_ack *g, const char *tenant, const char *device,
                   int64_t partition, int64_t ttl_ms, const struct bdb_sink_row *rows, size_t n);
    /* Waits for every row of g and frees it: BDB_OK, or the error of a row that failed
     * after its retries (BDB_ERR_AGAIN: not reachable, BDB_ERR_IO). */
    int (*ack_end)(struct bdb_sink_ack *g);

    /* ---- the registry's tenants (optional). Every tenant the registry has a device
     * of, in any order: an engine started with an empty catalog rebuilds it from
     * device_list (storage/embedded/sink/db_cat_sink.h). NULL: the registry cannot be
     * listed and such an engine starts empty. */
    int (*tenant_list)(bdb_sink *s, void (*fn)(void *ud, const char *tenant), void *ud);

    /* ---- named durable documents (optional: NULL = the sink keeps none, and what the
     * server would keep there stays in its data directory alone). A document is a
     * whole value under a key (e.g. "tenants": the tenant registry, server/tenants/
     * tenants.h), replaced whole by a put and read whole by a get, never seen half
     * written: a reader gets the previous document or the new one. doc_put returns once
     * the sink confirmed every byte: BDB_OK, BDB_ERR_AGAIN or BDB_ERR_IO (not reachable,
     * or a write failed after its retries: the previous document stays), BDB_ERR_EXISTS
     * (another server writes to the sink now). doc_get: BDB_OK with *data (malloc'd,
     * the caller frees; NUL-terminated beyond *len) and *len, BDB_ERR_NOTFOUND (no such
     * document), BDB_ERR_AGAIN or BDB_ERR_IO (not reachable), BDB_ERR_CORRUPT (what is
     * stored fails its checksum or misses a part; err says what). */
    int (*doc_put)(bdb_sink *s, const char *key, const void *data, size_t len);
    int (*doc_get)(bdb_sink *s, const char *key, void **data, size_t *len, char *err,
                   size_t errlen);
} bdb_sink_ops;

/* One sample handed to ack_put. */
typedef struct bdb_sink_row {
    const char *metric;
    int64_t ts;
    double v;
} bdb_sink_row;

struct bdb_sink {
    const bdb_sink_ops *ops;
};

#endif
