/* db_tier: the aggregation tiers of the embedded engine (1 minute, 1 hour, 1 day).
 *
 * Tier data is derived from the same frozen head a flush writes into block files, so
 * it covers exactly the WAL segments that flush retires: every tier file records the
 * WAL position the flush sealed (wal_upto) and is valid only once the catalog says the
 * segments up to it are covered (the catalog save is the flush's commit point). At
 * open, a tier file past the catalog's wal_upto is from a flush that did not commit:
 * it is deleted and the WAL replay puts its samples back into the head, so they are
 * counted once. A flush emits, per (tenant, device, metric), partial windows of the
 * samples it flushed; partial windows of the same interval from several flushes merge
 * exactly (agg/rollup.h). Queries merge the tier files with the not-yet-flushed head,
 * so a tier answer equals raw at any time.
 *
 * Files: <data>/tiers/{1m,1h,1d}/<16-digit seq>.tier, one tenant and one file window
 * each (1m: a day, 1h: 30 days, 1d: 365 days, aligned on the epoch); format in
 * docs/formats/tier.md. Maintenance merges the files of one (tier, tenant, file
 * window) into one and drops whole files past the tier's retention.
 *
 * Late data and rewrites (db_tier_late.c): a sample older than late_threshold behind
 * its device's newest event (a late event: counted, logged, listed), or one that may
 * rewrite a (series, time) an earlier flush already aggregated, marks its minute dirty.
 * The flush that writes it recomputes that minute from the raw blocks, the hour from
 * the minute tier and the day from the hour tier, into files whose windows replace
 * the older partial windows (TF_REPLACES), so the tiers equal raw again. Until that
 * flush, a read computes the windows around the marked minutes from raw data. */
#ifndef BDB_DB_TIER_H
#define BDB_DB_TIER_H

#include "agg/rollup.h"
#include "storage/embedded/core/db.h"

#include <stddef.h>
#include <stdint.h>

/* Size of the time window one tier file covers. */
int64_t bdb_tier_file_span(enum bdb_res res);
/* Default retention of a tier in ms; 0 = forever (1m: 90 days, 1h: 365 days, 1d: 0). */
int64_t bdb_tier_default_retention(enum bdb_res res);

/* Reads the windows of the given metrics of one device at resolution res (1M, 1H or 1D)
 * whose start lies in [align_down(from, width), to), from the tier files merged with
 * the head's samples not yet flushed. out[i] (initialized by the caller with the tier
 * width, reset here) receives metric i. A metric the device does not have gives no
 * windows. Errors: BDB_ERR_NOTFOUND (no such device), BDB_ERR_INVALID (res or range),
 * BDB_ERR_CORRUPT (a tier record failed its CRC or decoding), BDB_ERR_IO. */
int bdb_db_tier_read(bdb_db *db, const char *tenant, const char *device, const char *const *metrics,
                     size_t nmetrics, enum bdb_res res, int64_t from, int64_t to, bdb_rollup *out);

/* Per-tenant retention override: cb returns the retention in ms of tier res for the
 * tenant (0 = forever), given the configured default. NULL restores the defaults.
 * The tenant registry sets it; maintenance calls it under the engine's flush mutex,
 * so it must not call back into the engine. */
typedef int64_t (*bdb_tier_retention_fn)(void *ctx, const char *tenant, enum bdb_res res,
                                         int64_t dflt_ms);
void bdb_db_tier_set_retention_hook(bdb_db *db, bdb_tier_retention_fn cb, void *ctx);

typedef struct bdb_tier_stats {
    uint64_t files[BDB_TIERS], bytes[BDB_TIERS];
    uint64_t written, compacted, dropped, quarantined, discarded;
} bdb_tier_stats;
void bdb_db_tier_get_stats(bdb_db *db, bdb_tier_stats *st);

/* Called once per window recomputed by the late path, after its file is published,
 * from the flush thread (under the engine's flush mutex: it must not flush or call
 * bdb_db_tier_set_recompute_hook; reading tiers is fine). The window of that start at
 * tier res for (tenant, device, metric) now replaces every window of that start seen
 * before (bdb_db_tier_read gives it). The fleet aggregates use it to recompute their
 * hours and days. NULL removes the hook. */
typedef void (*bdb_tier_recompute_fn)(void *ctx, const char *tenant, const char *device,
                                      const char *metric, enum bdb_res res, int64_t start);
void bdb_db_tier_set_recompute_hook(bdb_db *db, bdb_tier_recompute_fn cb, void *ctx);

/* The window starts at res (1M, 1H or 1D) in [align_down(from), to) holding a minute
 * the late path marked for some device of tenant and has not recomputed yet (late or
 * rewriting samples still in the head or in the flush under way), sorted and unique;
 * *starts malloc'd (free it). Derived data merged from flushes plus the head (the fleet
 * tables) counts a rewrite of a flushed time twice in exactly these windows until the
 * flush recomputes them; the device tiers fix them on read. Costs one pass over the
 * marks, nothing when there are none. Errors: BDB_ERR_INVALID (res, range),
 * BDB_ERR_NOMEM. */
int bdb_db_late_marked_windows(bdb_db *db, const char *tenant, enum bdb_res res, int64_t from,
                               int64_t to, int64_t **starts, size_t *n);

typedef struct bdb_late_stats {
    uint64_t late_events;           /* events later than the threshold (not from replay) */
    uint64_t dirty_marks;           /* minutes marked for recompute (late or rewrite) */
    uint64_t recomputed[BDB_TIERS]; /* windows recomputed, per tier */
    uint64_t fallbacks;             /* dirty minutes kept partial: finer data expired */
    uint64_t pending;               /* marks not recomputed yet */
    int64_t threshold_ms;
} bdb_late_stats;
void bdb_db_late_get_stats(bdb_db *db, bdb_late_stats *st);

/* The most recent late events (at most 256 kept, in memory only), newest first,
 * optionally of one tenant and device; cb returns non-zero to stop. With a sink that
 * takes late arrivals, also the flushed ones it holds (db_late_sink.h). */
typedef struct bdb_late_event {
    const char *tenant, *device;
    int64_t ts;      /* event time */
    int64_t newest;  /* the device's newest event time when it arrived */
    int64_t arrived; /* wall clock at arrival */
    uint64_t seq;    /* arrival order on this server: the order of equal arrived */
} bdb_late_event;
int bdb_db_late_recent(bdb_db *db, const char *tenant, const char *device,
                       int (*cb)(void *ctx, const bdb_late_event *e), void *ctx);

/* The engine's hooks (db_tier_flush, db_tier_maintain, db_tier_close) are declared in
 * db.h. */

#endif
