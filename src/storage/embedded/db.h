/* db: the embedded storage engine. One data directory:
 *
 *   <data>/LOCK            flock'd while a server has the directory open
 *   <data>/wal/            write-ahead log segments (wal.h)
 *   <data>/blocks/         immutable time-window block files (block.h)
 *   <data>/catalog         devices, tags, state, bucket histories, metric names
 *
 * Write path: bdb_db_write encodes the batch as one WAL record, applies it to the
 * in-memory head (per series XOR chunks cut at partition and window boundaries) and
 * waits for the WAL sync. A background thread flushes the head into block files (one
 * per time window touched) every flush interval or when the head grows past its
 * limit, then deletes the WAL segments the blocks cover; it also merges the blocks of
 * one window into one (compaction) and drops windows past retention.
 *
 * Read path: bdb_db_read returns one device's samples in a time range from the head
 * and the blocks; duplicates (same series and time) resolve to the newest write. The
 * query layer (src/query/range.c) enumerates partitions through the device's bucket
 * history and calls it per partition on a bounded worker pool.
 *
 * Thread-safety: every function may be called from any thread. */
#ifndef BDB_DB_H
#define BDB_DB_H

#include "common/timeutil.h"
#include "model/batch.h"
#include "model/bucket.h"
#include "storage/embedded/wal.h"
#include "storage/vfs/vfs.h"

#include <stddef.h>
#include <stdint.h>

typedef struct bdb_db_opts {
    const char *data_dir;
    bdb_vfs *vfs; /* NULL = POSIX */
    enum bdb_wal_sync_mode sync_mode;
    int periodic_ms;            /* PERIODIC sync interval, default 100 */
    uint64_t wal_segment_bytes; /* default 64 MiB */
    int64_t block_window_ms;    /* default 2 h; must divide a day */
    int64_t flush_interval_ms;  /* head -> blocks at least this often; default 10 min */
    uint64_t head_max_bytes;    /* flush early past this; default 1 GiB */
    int64_t retention_ms;       /* raw data older than this is dropped; 0 = keep (default) */
    /* Per-tenant raw TTL (ms) for tenants that set one; 0 = use retention_ms. Called
     * from flush, maintenance and reads (any thread), so it must be thread-safe and
     * cheap. NULL = every tenant uses retention_ms. */
    int64_t (*tenant_retention)(void *ctx, const char *tenant);
    void *tenant_retention_ctx;
    uint32_t chunk_max_samples; /* default 2048 */
    int background;             /* 1 = run the flush/compaction thread (default 1) */
    bdb_clock clock;            /* wall clock for retention and rates; zero = real time */
} bdb_db_opts;

void bdb_db_opts_default(bdb_db_opts *o);

typedef struct bdb_db bdb_db;

/* Opens or creates the data directory, loads the catalog and blocks (a damaged block
 * is moved to <data>/quarantine/ and reported, never read), and replays the WAL.
 * Errors: BDB_ERR_IO, BDB_ERR_EXISTS (directory locked by another process),
 * BDB_ERR_CORRUPT (catalog unreadable), BDB_ERR_NOMEM. */
int bdb_db_open(const bdb_db_opts *opts, bdb_db **out);
/* Flushes the head to blocks, fsyncs, closes. Safe on NULL. */
int bdb_db_close(bdb_db *db);

/* Per-device settings an operator may set (profile). size 0 = learn from rate. */
int bdb_db_set_device_bucket(bdb_db *db, const char *tenant, const char *device, int64_t size_ms);

/* Most metrics one report may carry (the config's max_fields may not exceed it). */
#define BDB_MAX_REPORT_METRICS 4096

/* Writes a batch for one tenant. Returns when durable under the sync mode.
 * Errors: BDB_ERR_READONLY (a previous fsync failed: nothing more is accepted),
 * BDB_ERR_IO, BDB_ERR_NOSPACE, BDB_ERR_INVALID (empty tenant), BDB_ERR_LIMIT (a report
 * with more than BDB_MAX_REPORT_METRICS metrics; nothing is written). */
int bdb_db_write(bdb_db *db, const char *tenant, const bdb_batch *batch);

typedef struct bdb_device_info {
    const char *tenant, *device;
    const bdb_kv *tags;
    size_t ntags;
    const char *state; /* NULL if never set */
    int64_t state_ts;
    int64_t first_ts, last_ts;
    uint64_t samples;  /* written since the catalog began */
    int64_t bucket_ms; /* size in force for new events */
    int freq_class;    /* enum bdb_freq_class */
    int pinned;        /* bucket set by profile */
    const char *const *metrics;
    size_t nmetrics;
    size_t nbucket_changes;
} bdb_device_info;

/* Lists the devices of a tenant (all tenants if tenant is NULL) in name order.
 * The info pointers are valid only during the callback. */
int bdb_db_list_devices(bdb_db *db, const char *tenant,
                        int (*cb)(void *ctx, const bdb_device_info *d), void *ctx);
int bdb_db_get_device(bdb_db *db, const char *tenant, const char *device,
                      int (*cb)(void *ctx, const bdb_device_info *d), void *ctx);
/* Partitions of a device intersecting [from, to): start, end. from = INT64_MIN or
 * to = INT64_MAX mean the device's first or last event. */
int bdb_db_device_partitions(bdb_db *db, const char *tenant, const char *device, int64_t from,
                             int64_t to, int (*cb)(void *ctx, int64_t start, int64_t end),
                             void *ctx);

/* Devices the tenant has, and how many distinct devices of batch b (may be NULL) it
 * does not have yet (db_usage.c; for the device quota). */
int bdb_db_tenant_usage(bdb_db *db, const char *tenant, const bdb_batch *b, uint64_t *devices,
                        uint64_t *new_devices);

/* Retention (db_compact.c). A sample is readable for its tenant's TTL after its event
 * time: reads never return older samples, and a block file is deleted once every
 * tenant in it has expired for the whole of its window. Flush and compaction group
 * tenants into block files by TTL, so that moment is the same for everything in a
 * file; after a tenant's TTL changes, maintenance regroups the windows it shares.
 * bdb_db_retention_ms: the tenant's resolved TTL, 0 = kept forever.
 * bdb_db_retention_cutoff: the oldest readable time now (INT64_MIN = no limit). */
int64_t bdb_db_retention_ms(bdb_db *db, const char *tenant);
int64_t bdb_db_retention_cutoff(bdb_db *db, const char *tenant);

/* Forces a head flush (tests, shutdown, `POST /internal/flush`). */
int bdb_db_flush(bdb_db *db);
/* Runs compaction and retention once (tests). */
int bdb_db_maintain(bdb_db *db);

typedef struct bdb_db_stats {
    uint64_t samples_written, reports_written, write_batches;
    uint64_t series, devices, tenants;
    uint64_t head_bytes, head_samples;
    uint64_t blocks, block_bytes, block_samples;
    uint64_t flushes, compactions, retention_drops;
    uint64_t pending_compactions;
    uint64_t quarantined;
    uint64_t wal_replayed_records, wal_corruptions, wal_corrupt_bytes;
    uint64_t bucket_changes;
    uint64_t ooo_samples;
    int readonly;
    char readonly_reason[256];
    bdb_wal_stats wal;
} bdb_db_stats;

void bdb_db_get_stats(bdb_db *db, bdb_db_stats *st);
/* Bytes held by the in-memory head now (one atomic load; for admission control). */
uint64_t bdb_db_head_bytes(bdb_db *db);

/* Partition sizes (bytes) of every partition in blocks, for histograms. */
int bdb_db_partition_sizes(bdb_db *db,
                           int (*cb)(void *ctx, const char *tenant, const char *device,
                                     int64_t bucket_start, uint64_t rows, uint64_t bytes),
                           void *ctx);

/* ---- partition reads, for the query layer (src/query) ---- */

/* What a query needs to plan: the bucket history and the metric names. */
typedef struct bdb_device_snapshot {
    bdb_bucket_history hist;
    char **metrics;
    size_t nmetrics;
    int64_t first_ts, last_ts; /* INT64_MAX / INT64_MIN when the device has no sample */
} bdb_device_snapshot;

/* Errors: BDB_ERR_NOTFOUND. Free with bdb_device_snapshot_free. */
int bdb_db_device_snapshot(bdb_db *db, const char *tenant, const char *device,
                           bdb_device_snapshot *out);
void bdb_device_snapshot_free(bdb_device_snapshot *s);

typedef struct bdb_samples {
    int64_t *ts;
    double *v;
    size_t n, cap;
} bdb_samples;

void bdb_samples_free(bdb_samples *s);

/* Reads the samples of the given metrics of one device inside [lo, hi) from the head
 * and the blocks, newest write winning per time; out[i] receives metric i in time
 * order (reset first). Errors: BDB_ERR_NOTFOUND, BDB_ERR_CORRUPT (a damaged chunk:
 * nothing is returned rather than wrong values). */
int bdb_db_read(bdb_db *db, const char *tenant, const char *device, const char *const *metrics,
                size_t nmetrics, int64_t lo, int64_t hi, bdb_samples *out, uint64_t *chunks);

#endif
