/* cass_agg: the rollup tiers and fleet aggregates of the Cassandra sink (the
 * tier_put/tier_read/fleet_put/fleet_read ops of storage/sink.h).
 *
 * Tables (schema.c): agg_1m ((tenant_id, device_id, metric_name, day), window_start),
 * agg_1h and agg_1d ((tenant_id, device_id, metric_name), window_start), fleet_agg_1h
 * and fleet_agg_1d ((tenant_id, metric_name), window_start). One row per window. The
 * columns min_value, max_value, sum_value, count and m2 (and device_count) are there
 * for people and CQL tools; bucketdb reads only the blob in `sketch`, which holds the
 * window's exact, mergeable state: a version byte (1), then the window as the tier
 * files encode it (agg/rollup.h: the stats with the double-double sum, then the
 * quantile sketch) or, for the fleet tables, as the fleet files do (agg/fleet.h: the
 * stats, then the device set, so the device count stays exact when the head's
 * unflushed readings merge with it). A double in sum_value alone would lose the low
 * half of the sum and M2 could not be merged with another window's.
 *
 * Each row carries USING TTL (the caller's per-window seconds; 0 = none). Rows of one
 * partition go as UNLOGGED batches of at most 50 rows, sent from the flush thread and
 * confirmed before the put returns; every write is idempotent (the complete value of a
 * window, same key). Reads are one paged SELECT per partition (agg_1m: per day). */
#ifndef BDB_CASS_AGG_H
#define BDB_CASS_AGG_H

#include "agg/fleet.h"
#include "agg/rollup.h"
#include "common/buf.h"
#include "storage/sink.h"

#include <stddef.h>
#include <stdint.h>

/* The blob of a tier row: version 2 (written) holds the window in the compact form of
 * tier files version 5 (statistics once, the sketch in form C2, the window's index
 * from its partition day's first); version 1 (read) in the version 1 window encoding.
 * Fleet rows are version 1. */
#define CASS_AGG_BLOB_VERSION 2
#define CASS_AGG_BLOB_VERSION_1 1
#define CASS_AGG_FLEET_BLOB_VERSION 1
/* Most partitions (days of agg_1m) one read visits: 20 years. */
#define CASS_AGG_MAX_DAYS 7305

/* ---- the sink ops (wired into cass_sink.c's table) ---- */
int cass_agg_tier_put(bdb_sink *s, const char *tenant, const char *device, const char *metric,
                      int res, const bdb_rollup *r, const int32_t *ttl_s);
int cass_agg_tier_read(bdb_sink *s, const char *tenant, const char *device, const char *metric,
                       int res, int64_t lo, int64_t hi, bdb_rollup *out);
int cass_agg_fleet_put(bdb_sink *s, const char *tenant, const char *metric, int res,
                       const bdb_fleet *f, const int32_t *ttl_s);
int cass_agg_fleet_read(bdb_sink *s, const char *tenant, const char *metric, int res, int64_t lo,
                        int64_t hi, bdb_fleet *out);

/* ---- pure row encoding (unit-tested) ---- */

/* Table names: agg_1m/agg_1h/agg_1d, fleet_agg_1h/fleet_agg_1d; NULL for other res. */
const char *cass_agg_table(int res);
const char *cass_agg_fleet_table(int res);
/* The agg_1m partition (day start, UTC) of a window start. */
int64_t cass_agg_day(int64_t start);
/* Appends the blob of window w of r (w points into r->w). */
void cass_agg_encode_window(const bdb_rollup *r, const bdb_window *w, bdb_buf *out);
/* Puts the window of a blob into out (of the tier's width), replacing any window of
 * the same start. BDB_ERR_CORRUPT unless the blob holds exactly one well-formed window
 * starting at start (the row's window_start) with the known version. */
int cass_agg_decode_window(bdb_rollup *out, int64_t start, const uint8_t *p, size_t n);
void cass_agg_encode_fleet(const bdb_fleet *f, const bdb_fleet_win *w, bdb_buf *out);
/* Merges the fleet window of a blob into out (which must have no window at start). */
int cass_agg_decode_fleet(bdb_fleet *out, int64_t start, const uint8_t *p, size_t n);

#endif
