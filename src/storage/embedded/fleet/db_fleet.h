/* db_fleet: pre-computed fleet aggregates of the embedded engine, per (tenant, metric,
 * hour) and per (tenant, metric, day): device count, readings, min, max, avg, stddev
 * (agg/fleet.h).
 *
 * Computed at flush from the same frozen head the tiers use (samples merged with the
 * newest write of each time winning), so a fleet window is the merge of the partial
 * fleet windows of every flush that touched it; device sets merge as unions, so the
 * device count is exact even when one device reaches an hour through several flushes.
 *
 * Crash rules are the tiers' (db_tier.h): every fleet file records the WAL position its
 * flush sealed (wal_upto) and counts only once the catalog covers it. At open a file
 * past the catalog's wal_upto came from a flush that did not commit: it is deleted and
 * the WAL replay brings its samples back to the head. A flush that published fleet
 * files and then failed (tier or block write) is retried with the same frozen chunks
 * plus newer ones: the retry first withdraws the files of the failed attempt, so they
 * are never counted twice. Reads merge the files with the head's unflushed samples,
 * so a fleet answer equals raw at any time.
 *
 * Files: <data>/fleet/{1h,1d}/<16-digit seq>.fleet, one file window each (30 days for
 * 1h, 365 days for 1d, as the tiers), every tenant and metric of a flush in it; format
 * in docs/AGGREGATION.md#fleet-aggregates. The flush hook also merges the committed
 * files of one window into one once there are 8 and drops files past the 1h (1d) tier
 * retention. */
#ifndef BDB_DB_FLEET_H
#define BDB_DB_FLEET_H

#include "agg/fleet.h"
#include "storage/embedded/core/db.h"

#include <stddef.h>
#include <stdint.h>

/* Reads the fleet windows of (tenant, metric) at res (BDB_RES_1H or BDB_RES_1D) whose
 * start lies in [align_down(from, width), to) into out (initialized with the width;
 * reset here). A tenant or metric nobody has gives no windows.
 * Errors: BDB_ERR_INVALID (res, range, out's width), BDB_ERR_CORRUPT. */
int bdb_db_fleet_read(bdb_db *db, const char *tenant, const char *metric, enum bdb_res res,
                      int64_t from, int64_t to, bdb_fleet *out);

/* Late data (db_tier.h): when the late path recomputes a device's hour or day, the fleet
 * window of that start holds a stale partial of the device (a rewritten reading counted
 * twice, say). bdb_db_fleet_attach registers the tiers' recompute hook, which records
 * such windows in <data>/fleet/dirty (durably, inside the flush that recomputes them);
 * bdb_db_fleet_dirty lists the recorded starts in [align_down(from), to), plus the
 * windows the late path has marked and not recomputed yet (a rewrite of a flushed time
 * still in the head is in a fleet file and in the head: bdb_db_late_marked_windows),
 * which a reader answers from the device tiers instead (bdb_query_fleet_tables in
 * query/fleetq.h).
 * Call attach once after open, not from inside a flush (the server does). */
void bdb_db_fleet_attach(bdb_db *db);
/* *starts is malloc'd (free it), sorted, unique. Errors: BDB_ERR_INVALID (res),
 * BDB_ERR_NOMEM. */
int bdb_db_fleet_dirty(bdb_db *db, const char *tenant, const char *metric, enum bdb_res res,
                       int64_t from, int64_t to, int64_t **starts, size_t *n);

typedef struct bdb_fleet_file_stats {
    uint64_t files[2], bytes[2]; /* 1h, 1d */
    uint64_t written, compacted, dropped, quarantined, discarded, withdrawn;
} bdb_fleet_file_stats;
void bdb_db_fleet_get_stats(bdb_db *db, bdb_fleet_file_stats *st);

/* The engine's hooks (db_fleet_flush, db_fleet_close) are declared in db.h. */

#endif
