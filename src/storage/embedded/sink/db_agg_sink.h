/* db_agg_sink: the engine's side of the sink's tier and fleet ops (storage/sink.h),
 * private to db_tier.c and db_fleet.c.
 *
 * Local tier and fleet files are still written on a sink that takes aggregates: they
 * are each flush's merge base (a Cassandra row must carry a window's complete value,
 * and the files hold every committed partial of it without a read from the cluster)
 * and the answer while Cassandra may disagree with them. A flush, after writing its
 * new files and before publishing them, computes for every window it touched the
 * complete value (the published files, then the new files in seq order, so late
 * recomputes replace exactly as a reader of the files would see) and puts it; the
 * flush fails when a put fails, so the WAL keeps the samples and the next flush puts
 * the windows again. Reads use the sink only while `synced` (per tier and fleet state,
 * changed only under that state's lock held exclusively, so a reader holding it
 * shared sees one value for its whole read): cleared before a flush's first put and at
 * open (rows of a flush that put and then crashed before its catalog save hold samples
 * the WAL replay brings back to the head), set when a flush published files whose
 * windows were all put. */
#ifndef BDB_DB_AGG_SINK_H
#define BDB_DB_AGG_SINK_H

#include "storage/embedded/fleet/db_fleet_int.h"
#include "storage/embedded/core/db_int.h"
#include "storage/embedded/tier/db_tier_int.h"
#include "storage/sink.h"

#include <stddef.h>
#include <stdint.h>

/* Whether the engine's sink takes tiers (fleet windows). */
int agg_sink_tiers(const bdb_db *db);
int agg_sink_fleet(const bdb_db *db);
/* Puts the complete windows of every series of v touched by the flush's new (not yet
 * published) tier files. Flush thread only. */
int agg_sink_put_tiers(bdb_db *db, struct series *const *v, size_t n, tfile *const *files,
                       size_t nfiles);
/* The same for the new fleet files of a flush (t's published files are the base). */
int agg_sink_put_fleet(bdb_db *db, const fstate *t, ffile *const *files, size_t nfiles);
/* The flushed windows of the metrics of device d (found under cat_lock by the caller)
 * at res in [lo, hi) from the sink, merged into out[i]. Caller holds the tier lock
 * shared with synced set, so the files hold the same windows: when the sink fails
 * (unreachable, a row that does not decode) out is reset and 0 returned for the caller
 * to read the files instead; 1 when the sink answered; BDB_ERR_NOMEM (negative, out
 * reset) when memory ran out, which the caller returns (on a new data directory the
 * files do not hold the windows). */
int agg_sink_read_tiers(bdb_db *db, struct device *d, const char *tn, const char *dn,
                        const char *const *metrics, size_t nmetrics, enum bdb_res res, int64_t lo,
                        int64_t hi, bdb_rollup *out);
/* The same for fleet windows of (tn, mn) at res (1, 0 or BDB_ERR_NOMEM); caller holds
 * the fleet lock shared with synced set. */
int agg_sink_read_fleet(bdb_db *db, const char *tn, const char *mn, enum bdb_res res, int64_t lo,
                        int64_t hi, bdb_fleet *out);
/* sink: windows of a flush's partial r (one series at res) that start at or before
 * the device's inherited horizon (db_cat_sink.h) and that the published tier files
 * lack get the sink's row merged in, so the partial written to the new file, and the
 * row put from it, carry what another data directory flushed there. Flush thread
 * only. BDB_OK (nothing to do too), the sink's error (the flush fails and is retried)
 * or BDB_ERR_NOMEM. */
int agg_sink_import_tier(bdb_db *db, const struct series *s, enum bdb_res res, bdb_rollup *r);
/* For the late path's rebuild of an hour or a day from the finer tier (base holds the
 * published files' windows of res in [a, b)): the windows at or before the device's
 * inherited horizon that base lacks are taken from the sink. Flush thread only. */
int agg_sink_inherited_fill(bdb_db *db, const struct series *s, enum bdb_res res, int64_t a,
                            int64_t b, bdb_rollup *base);
/* The same for a flush's fleet partial f of (tn, mn) at resolution index ri, against
 * the published files of t and the tenant's horizon; f may be a borrowing fleet: when
 * a row is merged it is replaced by an owning one. */
int agg_sink_import_fleet(bdb_db *db, const fstate *t, int ri, const char *tn, const char *mn,
                          bdb_fleet *f);
/* At open, when the WAL replay applied nothing: the sink holds every window the files
 * hold (or more, on a new data directory), so reads use it from the start. */
void agg_sink_open_synced(bdb_db *db);

/* TTL in seconds of a window of res starting at start for tenant tn: 0 = forever,
 * -1 = past its retention already (not written). */
int32_t agg_sink_ttl(bdb_db *db, const char *tn, enum bdb_res res, int64_t start);

#endif
