/* fleetq: ad hoc fleet queries: one metric over a group of devices chosen by tag,
 * computed from the devices' tier windows (1m, 1h or 1d; bdb_db_tier_read, which merges
 * the tier files with the unflushed head, so the answer equals raw at any time).
 *
 * The devices of the tenant whose tags all match are listed in name order; their tier
 * windows are read in parallel on the query pool (at most its worker count at once,
 * shared with every other multi-partition query), and merged in name order into fleet
 * windows (agg/fleet.h): device count, readings, min, max, avg and stddev over the
 * readings. With no tag filter this recomputes the tenant's pre-computed fleet windows
 * from the device tiers (db_fleet.h), which is what a recompute after late data needs. */
#ifndef BDB_FLEETQ_H
#define BDB_FLEETQ_H

#include "agg/fleet.h"
#include "model/batch.h"
#include "query/pool.h"
#include "storage/embedded/core/db.h"

#include <stddef.h>
#include <stdint.h>

/* Most devices one ad hoc query may cover (bounds its memory: about 100 bytes per
 * device plus 64 per device window). */
#define BDB_FLEETQ_MAX_DEVICES 100000

typedef struct bdb_fleet_query {
    const char *tenant, *metric;
    const bdb_kv *tags; /* a device matches when it has every key with that value */
    size_t ntags;
    enum bdb_res res;   /* BDB_RES_1M, _1H or _1D */
    int64_t from, to;   /* windows whose start is in [align_down(from), to) */
    size_t max_devices; /* 0 = BDB_FLEETQ_MAX_DEVICES */
} bdb_fleet_query;

/* out is initialized by the caller with the resolution's width and reset here.
 * *matched receives the number of devices whose tags matched (some may have no reading
 * of the metric in the range). pool may be NULL (reads on the calling thread).
 * Errors: BDB_ERR_INVALID (resolution, range, width), BDB_ERR_LIMIT (more matching
 * devices than max_devices; nothing computed), BDB_ERR_CORRUPT, BDB_ERR_IO. */
int bdb_query_fleet(bdb_db *db, bdb_pool *pool, const bdb_fleet_query *q, bdb_fleet *out,
                    uint64_t *matched);

/* The pre-computed fleet windows of (tenant, metric) at res (1H or 1D) in
 * [align_down(from), to) (bdb_db_fleet_read), except windows that late data recomputed
 * in some device's tiers (bdb_db_fleet_dirty): those are computed here from every
 * device's tiers, so they equal raw too. *recomputed (may be NULL) gets their number.
 * Errors: as bdb_db_fleet_read and bdb_query_fleet. */
int bdb_query_fleet_tables(bdb_db *db, bdb_pool *pool, const char *tenant, const char *metric,
                           enum bdb_res res, int64_t from, int64_t to, bdb_fleet *out,
                           size_t *recomputed);

#endif
