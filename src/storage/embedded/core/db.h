/* db: the embedded storage engine. One data directory:
 *
 *   <data>/LOCK            flock'd while a server has the directory open
 *   <data>/wal/            write-ahead log segments (wal.h)
 *   <data>/blocks/         immutable time-window block files (block.h)
 *   <data>/catalog         devices, tags, state, bucket histories, metric names
 *   <data>/latest          current-state index (db_latest.c)
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
#include "storage/embedded/core/wal.h"
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
    /* room held back in <data_dir>/reserve for a flush on a full disk (db_space.h);
     * 0 = none (the default here; the server's default is 64 MiB) */
    uint64_t disk_reserve_bytes;
    int64_t retention_ms; /* raw data older than this is dropped; 0 = keep (default) */
    /* Per-tenant raw TTL (ms) for tenants that set one; 0 = use retention_ms. Called
     * from flush, maintenance and reads (any thread), so it must be thread-safe and
     * cheap. NULL = every tenant uses retention_ms. */
    int64_t (*tenant_retention)(void *ctx, const char *tenant);
    void *tenant_retention_ctx;
    uint32_t chunk_max_samples; /* default 2048 */
    int background;             /* 1 = run the flush/compaction thread (default 1) */
    bdb_clock clock;            /* wall clock for retention and rates; zero = real time */
    /* rollup tiers (db_tier.h): retention of 1m, 1h, 1d in ms; 0 = the default (90 d,
     * 365 d, forever), < 0 = forever */
    int64_t tier_retention_ms[3];
    int64_t late_threshold_ms; /* late data: older than this behind the device's newest; 0 = 1 h */
    /* read cache (common/rcache.h, docs/AGGREGATION.md#read-cache): bytes held at most
     * by the derived windows of immutable block and tier files; 0 = no cache. Default
     * 64 MiB (bdb_db_opts_default). */
    uint64_t read_cache_bytes;
    /* sink (storage/sink.h): flushed raw samples go there instead of block files and
     * are read back from it; NULL = block files. bdb_db_close closes it (a failed
     * open leaves it to the caller). */
    struct bdb_sink *sink;
} bdb_db_opts;

/* The read cache's default size, and the range a configuration may set besides 0
 * (off): 1 MiB .. 1 TiB. */
#define BDB_READ_CACHE_DEFAULT (UINT64_C(64) << 20)
#define BDB_READ_CACHE_MIN (UINT64_C(1) << 20)
#define BDB_READ_CACHE_MAX (UINT64_C(1) << 40)

void bdb_db_opts_default(bdb_db_opts *o);

typedef struct bdb_db bdb_db;

/* Opens or creates the data directory, loads the catalog and blocks (a damaged block
 * is moved to <data>/quarantine/ and reported, never read), and replays the WAL.
 * Errors: BDB_ERR_INVALID (data_dir longer than BDB_DATA_DIR_MAX bytes, common/path.h),
 * BDB_ERR_IO, BDB_ERR_EXISTS (directory locked by another process),
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
 * BDB_ERR_IO, BDB_ERR_NOSPACE, BDB_ERR_INVALID (empty tenant, or a report time outside
 * BDB_TS_MIN_MS..BDB_TS_MAX_MS; nothing is written), BDB_ERR_LIMIT (a report with more
 * than BDB_MAX_REPORT_METRICS metrics; nothing is written). */
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

/* ---- storage per tenant and partition sizes (db_usage.c; docs/TENANCY.md) ----
 * A tracker measures, per tenant, the bytes of the block files it has data in (each
 * file split among its tenants by their chunk bytes) and the samples in the head; a
 * thread re-measures when the set of block files changes and every 10 s, and writers
 * add what they write in between (bdb_db_usage_note). Reading is a map lookup. */
#define BDB_USAGE_SAMPLE_BYTES 16 /* an unflushed sample: an 8-byte time, an 8-byte value */
#define BDB_PARTITION_WARN_BYTES UINT64_C(100000000) /* the 100 MB partition target */
typedef struct bdb_usage_opts {
    uint64_t partition_warn_bytes; /* warn once per partition above it; 0 = never */
    int manual;                    /* 1: no thread; only bdb_db_usage_refresh measures (tests) */
} bdb_usage_opts;
/* Starts the tracker (first call: measures at once on its thread) or updates its
 * options; cheap, so every user calls it. o = NULL starts it without options: no
 * partition warning is logged until options arrive. */
void bdb_db_usage_start(bdb_db *db, const bdb_usage_opts *o);
/* Measures now on the calling thread. BDB_OK, BDB_ERR_NOTFOUND (not started),
 * BDB_ERR_NOMEM (the measurement is skipped; the previous figures stay). */
int bdb_db_usage_refresh(bdb_db *db);
/* A durable write of `samples` samples for tenant (every ingestion path, after
 * bdb_db_write succeeded). */
void bdb_db_usage_note(bdb_db *db, const char *tenant, uint64_t samples);
typedef struct bdb_storage_usage {
    uint64_t bytes;             /* block_bytes + sink_bytes + unflushed_bytes */
    uint64_t block_bytes;       /* share of block files */
    uint64_t unflushed_samples; /* in the head, or written since the last measurement */
    uint64_t unflushed_bytes;   /* BDB_USAGE_SAMPLE_BYTES each */
    uint64_t sink_bytes;        /* rows a sink (Cassandra) confirmed, unexpired (db_sink_usage.h) */
    int measured;               /* 0 before the first measurement: all zero */
} bdb_storage_usage;
/* BDB_OK, BDB_ERR_NOTFOUND (tracker not started; *out zeroed). */
int bdb_db_tenant_storage(bdb_db *db, const char *tenant, bdb_storage_usage *out);
/* Sizes of whole partitions (every block's piece summed; head not counted). */
#define BDB_PSIZE_NB 9
extern const uint64_t bdb_psize_bounds[BDB_PSIZE_NB]; /* 64 KiB x 4^i, to 4 GiB */
typedef struct bdb_partition_summary {
    int measured;                       /* 0 before the first measurement */
    uint64_t count, sum, max;           /* partitions in block files, bytes */
    uint64_t buckets[BDB_PSIZE_NB + 1]; /* per bound (<=), last: above all; not cumulative */
    uint64_t p50, p95, p99;             /* within 1 % (DDSketch); 0 without partitions */
    uint64_t large, warn_bytes;         /* partitions above warn_bytes */
    int64_t measured_ms;                /* monotonic time of the last measurement */
    uint64_t scan_ms, scans;            /* its duration; measurements so far */
} bdb_partition_summary;
/* The last measurement's figures (no scan: /metrics). BDB_OK, BDB_ERR_NOTFOUND. */
int bdb_db_partition_summary(bdb_db *db, bdb_partition_summary *out);
/* Stops and frees the tracker (db_blocks_close calls it when the db closes). */
void bdb_db_usage_release(bdb_db *db);

/* Retention (db_compact.c). A sample is readable for its tenant's TTL after its event
 * time: reads never return older samples, and a block file is deleted once every
 * tenant in it has expired for the whole of its window. Flush and compaction group
 * tenants into block files by TTL, so that moment is the same for everything in a
 * file; after a tenant's TTL changes, maintenance regroups the windows it shares.
 * bdb_db_retention_ms: the tenant's resolved TTL, 0 = kept forever.
 * bdb_db_retention_cutoff: the oldest readable time now (INT64_MIN = no limit). */
int64_t bdb_db_retention_ms(bdb_db *db, const char *tenant);
int64_t bdb_db_retention_cutoff(bdb_db *db, const char *tenant);

/* Dropping a tenant (db_drop.c; docs/TENANCY.md#deleting-a-tenant): removes what the
 * engine holds for tenant from the head and the WAL, the catalog, the current-state
 * index, the late-data marks, the fleet and tier files, and with a sink that takes it,
 * the sink's rows (storage/sink.h, drop_tenant) first. Block files leave by retention:
 * the caller gives the tenant an expired TTL (tenant_retention) and runs
 * bdb_db_maintain after. Nothing may write to the tenant any more. Idempotent and
 * resumable: after a failure or a crash, calling again completes it. Blocks flushes
 * while the sink deletes. Errors: BDB_ERR_INVALID (empty name or longer than
 * BDB_DROP_NAME_MAX), BDB_ERR_READONLY, BDB_ERR_AGAIN (a flush is failing: nothing
 * dropped yet), the sink's or the flush's errors. */
#define BDB_DROP_NAME_MAX 4096
int bdb_db_drop_tenant(bdb_db *db, const char *tenant);

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
    /* failed flushes in all and in a row now; the first of those in a row (wall ms, 0
     * when the last flush succeeded) and the last one's error (a BDB_ERR_* code) */
    uint64_t flush_failures, flush_fail_streak;
    int64_t flush_failing_since_ms;
    int flush_last_error;
    uint64_t pending_compactions;
    uint64_t quarantined;
    uint64_t wal_replayed_records, wal_corruptions, wal_corrupt_bytes;
    uint64_t bucket_changes;
    uint64_t ooo_samples;
    int readonly;
    char readonly_reason[256];
    /* the disk reserve (db_space.h): space_low is 1 while it is not in place, 2
     * while writes are held because the WAL reached what a flush could still write,
     * 3 both; writes are refused with BDB_ERR_NOSPACE meanwhile. Times it was given
     * to a flush; bytes free on the data disk (UINT64_MAX unknown) */
    int space_low;
    uint64_t space_releases, disk_free_bytes;
    bdb_wal_stats wal;
    /* the read cache (o.read_cache_bytes; all 0 without one): lookups answered and not,
     * entries evicted, entries and bytes held, the limit */
    uint64_t rcache_hits, rcache_misses, rcache_evictions, rcache_entries, rcache_bytes,
        rcache_max_bytes;
} bdb_db_stats;

void bdb_db_get_stats(bdb_db *db, bdb_db_stats *st);
/* Bytes held by the in-memory head now (one atomic load; for admission control). */
uint64_t bdb_db_head_bytes(bdb_db *db);

/* Partition sizes (bytes) of every partition in blocks, for histograms. */
int bdb_db_partition_sizes(bdb_db *db,
                           int (*cb)(void *ctx, const char *tenant, const char *device,
                                     int64_t bucket_start, uint64_t rows, uint64_t bytes),
                           void *ctx);

/* ---- current state (db_latest.c; docs/STORAGE.md#current-state) ----
 * Per device the latest event and per metric the latest value, never replaced by an
 * older event; per tenant an index from state to the devices in it, with counts.
 * A device is in the state of its newest report that carried one (reports without a
 * state leave it where it is); a device that never reported one is in no state. */
typedef struct bdb_latest_metric {
    const char *name;
    int64_t ts;   /* time of the newest report that carried this metric */
    double value; /* its value there */
    int in_event; /* 1 if ts is the device's latest event time */
} bdb_latest_metric;

typedef struct bdb_latest_attr {
    const char *name, *value;
    int64_t ts; /* time of the newest report that carried this attribute */
} bdb_latest_attr;

/* Most string attributes the current-state index keeps per device: a new name beyond
 * it is not stored (counted in bdb_db_attrs_dropped). */
#define BDB_MAX_DEVICE_ATTRS 64

typedef struct bdb_latest {
    const char *tenant, *device;
    int64_t event_ts;                 /* newest report time */
    const char *state;                /* NULL if no report carried one */
    int64_t state_ts;                 /* time of the newest report that carried a state */
    const bdb_latest_metric *metrics; /* every metric the device reported, name order */
    size_t nmetrics;
    const bdb_latest_attr *attrs; /* string attributes, name order */
    size_t nattrs;
} bdb_latest;

/* Attributes not kept because their device had BDB_MAX_DEVICE_ATTRS already. */
uint64_t bdb_db_attrs_dropped(bdb_db *db);

/* Most devices one bdb_db_state_devices call returns. */
#define BDB_STATE_PAGE_MAX 10000

/* The device's latest event; the pointers are valid during the callback only.
 * Errors: BDB_ERR_NOTFOUND (unknown device, or one that never sent a report). */
int bdb_db_latest(bdb_db *db, const char *tenant, const char *device,
                  int (*cb)(void *ctx, const bdb_latest *l), void *ctx);
/* Devices of the tenant in state now, in name order, after the name `after` (NULL =
 * from the start), at most limit (1..BDB_STATE_PAGE_MAX); *more is set when there are
 * further devices, *total to the number of devices in the state. cb gets each device
 * and the time of its newest state report. Errors: BDB_ERR_INVALID (limit). */
int bdb_db_state_devices(bdb_db *db, const char *tenant, const char *state, const char *after,
                         size_t limit, int (*cb)(void *ctx, const char *device, int64_t state_ts),
                         void *ctx, int *more, uint64_t *total);
/* Devices per state of the tenant, in state name order; *no_state gets the devices
 * with reports but no state. Kept incrementally: no scan over devices. */
int bdb_db_state_counts(bdb_db *db, const char *tenant,
                        int (*cb)(void *ctx, const char *state, uint64_t devices), void *ctx,
                        uint64_t *no_state);
/* Bytes the current-state index holds (entries, metric values, tables, state sets). */
uint64_t bdb_db_state_bytes(bdb_db *db);

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
/* The version of tenant's catalog as a listing shows it (devices, their tags and
 * metric names): equal versions, equal listings. A change counts once it is made, so a
 * version read before a listing that is still the version afterwards means that
 * listing is current. Errors: BDB_ERR_NOTFOUND (no such tenant), BDB_ERR_INVALID (with
 * a sink whose registry lists devices other nodes write: no local version). */
int bdb_db_catalog_version(bdb_db *db, const char *tenant, uint64_t version[2]);
/* Samples older than this behind the db's clock are settled (db_settled.h). */
#define BDB_SETTLED_MS (5 * 60 * 1000)
/* The settled version of tenant's samples: equal versions, equal settled samples (a
 * write, a retention pass or a drop that may change a sample older than BDB_SETTLED_MS
 * moves it once done; read it before reading the samples). Not persistent: a restart
 * starts it over, so what is kept under it must live in memory only. Errors:
 * BDB_ERR_INVALID (with a sink: other nodes write too), BDB_ERR_READONLY. */
int bdb_db_settled_version(bdb_db *db, const char *tenant, uint64_t *version);
/* The device's newest sample time (INT64_MIN before its first). A write moves it
 * before its samples become readable, under the same lock: a read that saw a sample
 * at t is followed by a call answering t or later. With a sink the keyspace may hold
 * samples this node never took (another node's, a lost disk's): INT64_MAX, unknown.
 * Errors: BDB_ERR_NOTFOUND. */
int bdb_db_device_newest(bdb_db *db, const char *tenant, const char *device, int64_t *newest);

typedef struct bdb_samples {
    int64_t *ts;
    double *v;
    size_t n, cap;
} bdb_samples;

void bdb_samples_free(bdb_samples *s);

/* Reads the samples of the given metrics of one device inside [lo, hi) from the head
 * and the blocks, newest write winning per time; out[i] receives metric i in time
 * order (reset first). Errors: BDB_ERR_NOTFOUND, BDB_ERR_CORRUPT (a damaged chunk:
 * nothing is returned rather than wrong values). BDB_ERR_PARTIAL: a sink could not be
 * reached; out holds what the head (and any local data) holds, and a caller that
 * answers it must say the answer is partial (callers that treat every non-OK code as
 * a failure need not know it). */
int bdb_db_read(bdb_db *db, const char *tenant, const char *device, const char *const *metrics,
                size_t nmetrics, int64_t lo, int64_t hi, bdb_samples *out, uint64_t *chunks);

#endif
