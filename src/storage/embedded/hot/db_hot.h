/* db_hot: what the embedded engine does for hot partitions (docs/TENANCY.md, "Hot
 * partitions") and the telemetry_by_tenant table (seed 000, "Multi-Tenant Isolation").
 *
 * - Events per partition: every report applied to a device (live or replayed from the
 *   WAL) adds one event to the partition (tenant, device, bucket start) it falls in.
 *   The counts are saved in the catalog and rebuilt by WAL replay, so they survive a
 *   restart exactly; retention forgets the counts of the partitions it drops.
 * - Sub-buckets: a device may spread its samples over N sub-partitions of each bucket
 *   (N <= 64). The partition id of a sample is bucket start + (floor(ts / 1 s) mod N):
 *   a whole second of samples stays in one sub-partition, so the chunks a hot device's
 *   partition is cut into stay long (the flush cuts a chunk wherever the id changes).
 *   N is a history over event time, like the bucket history: a change applies from
 *   the second after the device's newest event, is logged as WAL record type 3 and
 *   saved in the catalog, so replay files every sample under the same id. Reads select
 *   by time and merge whatever chunks they find, so sub-buckets are invisible to them.
 * - Promotion: when the partition holding a device's newest event grows past the
 *   size target (estimated as samples x BDB_ROW_BYTES_ESTIMATE), the device moves to
 *   the next smaller bucket (1d -> 6h -> 1h -> 15m -> 10m) through bdb_bucket_change
 *   (from the end of the current bucket: a written bucket keeps its size). The new
 *   size is also a cap on what the rate learner may pick afterwards, so the learner
 *   does not undo a promotion; the cap is saved with the sub-bucket history.
 *
 * Thread-safety: every function may be called from any thread. */
#ifndef BDB_DB_HOT_H
#define BDB_DB_HOT_H

#include "storage/embedded/core/db.h"

#include <stdint.h>

/* Registered by db_features.c: counts the events of every applied report. */
struct db_consumer;
extern const struct db_consumer db_hot_consumer;

#define BDB_SUBBUCKETS_MAX 64
/* Bytes a stored sample is taken to cost when sizing a partition: a row of seed 000's
 * Cassandra table ("~100 bytes"), which is what the size target protects. */
#define BDB_ROW_BYTES_ESTIMATE 100
/* Seed 002: partitions above 100 MB risk timeouts. */
#define BDB_PROMOTION_TARGET_DEFAULT (UINT64_C(100) * 1000 * 1000)

/* Sets the device's sub-bucket count from the second after its newest event (n = 1
 * ends sub-bucketing). Logged in the WAL and durable when it returns. Creates the
 * device if it does not exist. Errors: BDB_ERR_INVALID (n is 0 or above
 * BDB_SUBBUCKETS_MAX), BDB_ERR_READONLY, BDB_ERR_IO, BDB_ERR_NOMEM. */
int bdb_db_set_subbuckets(bdb_db *db, const char *tenant, const char *device, uint32_t n);
/* The sub-bucket count in force for new events (1 when none, or the device is unknown). */
uint32_t bdb_db_subbuckets(bdb_db *db, const char *tenant, const char *device);

/* Size target for promotion in bytes (0 turns promotion off). */
void bdb_db_set_promotion_target(bdb_db *db, uint64_t bytes);

typedef struct bdb_hot_engine_stats {
    uint64_t bucket_promotions; /* since the process started */
    uint64_t subbucket_changes;
} bdb_hot_engine_stats;
void bdb_db_hot_stats(bdb_db *db, bdb_hot_engine_stats *st);

/* One row of telemetry_by_tenant. Pointers valid during the callback only. */
typedef struct bdb_tbt_row {
    const char *device;
    int64_t bucket_start, bucket_end;
    uint64_t events;
    uint32_t subbuckets; /* in force at the bucket's start */
} bdb_tbt_row;

/* Calls cb for every partition of the tenant's devices that intersects [from, to)
 * and has events, in no particular order (the caller sorts); a non-zero return stops
 * and is returned. Errors: BDB_ERR_NOTFOUND (the tenant has no device), BDB_ERR_NOMEM
 * (rows already passed to cb are then not the whole answer). */
int bdb_db_telemetry_by_tenant(bdb_db *db, const char *tenant, int64_t from, int64_t to,
                               int (*cb)(void *ctx, const bdb_tbt_row *r), void *ctx);

/* Forgets the event counts of every device's partitions that end at or before cutoff
 * (all tenants; retention with per-tenant cutoffs calls db_hot_forget_before per
 * device, db_int.h). Returns BDB_OK. */
int bdb_db_forget_partition_counts(bdb_db *db, int64_t cutoff);

/* The partition holding ts for the device: its bucket [start, end) and sub-bucket
 * count. BDB_OK or BDB_ERR_NOTFOUND. */
int bdb_db_partition_at(bdb_db *db, const char *tenant, const char *device, int64_t ts,
                        int64_t *start, int64_t *end, uint32_t *subbuckets);

#endif
