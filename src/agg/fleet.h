/* fleet: aggregates of one metric over a fleet of devices, per window (1 hour, 1 day).
 *
 * A fleet window holds the bdb_stats of every reading of every device in the window
 * (so fleet min, max, avg and stddev are over readings, exactly as if one series held
 * them all) and the set of devices that contributed at least one reading. The set is
 * kept as sorted device names, not a counter, because the same device reaches the same
 * hour through several flushes (partial windows): only a union counts it once, so the
 * device count stays exact however the data was split. Stats merge exactly (agg/stats.h)
 * and a union is a union, so fleet windows merge in any order and grouping.
 *
 * Devices are added as their per-device windows (the tiers' partial windows); a window
 * of any width that divides the fleet width lands in the fleet window holding its
 * start. Adding devices in name order is O(1) per device; any order works. */
#ifndef BDB_AGG_FLEET_H
#define BDB_AGG_FLEET_H

#include "agg/rollup.h"
#include "agg/stats.h"
#include "common/buf.h"

#include <stddef.h>
#include <stdint.h>

/* Most devices one encoded fleet window may list (a decoder bound, not a fleet limit
 * of the engine: 16 Mi devices per tenant and window). */
#define BDB_FLEET_MAX_DEVICES (UINT64_C(1) << 24)

typedef struct bdb_fleet_win {
    int64_t start;
    bdb_stats st; /* every reading of every device */
    char **dev;   /* sorted, unique, owned */
    size_t ndev, cap;
} bdb_fleet_win;

typedef struct bdb_fleet {
    int64_t width;
    bdb_fleet_win *w; /* sorted by start, unique */
    size_t n, cap;
    /* names are the caller's (bdb_fleet_init_borrowed): neither copied nor freed */
    int borrow;
} bdb_fleet;

/* What a fleet window reports. avg and stddev (population) are over readings. */
typedef struct bdb_fleet_row {
    int64_t start, width;
    uint64_t devices, readings;
    double sum, min, max, avg, stddev;
} bdb_fleet_row;

void bdb_fleet_init(bdb_fleet *f, int64_t width);
/* A fleet whose device sets point at the names given to bdb_fleet_add instead of
 * copying them: the caller keeps every name alive as long as f. The engine's flush
 * builds one per (tenant, metric) from the catalog's device names; a copy per device,
 * metric and window was most of a large flush's fleet memory. Merge and read need a
 * fleet that owns its names (BDB_ERR_INVALID into a borrowing one). */
void bdb_fleet_init_borrowed(bdb_fleet *f, int64_t width);
void bdb_fleet_free(bdb_fleet *f);
void bdb_fleet_reset(bdb_fleet *f); /* drops every window, keeps the width */

/* Adds one device's statistics for a window starting at start (any width dividing
 * f->width) to the fleet window holding start. An empty st adds nothing.
 * Errors: BDB_ERR_LIMIT (a count past 2^53), BDB_ERR_NOMEM. After an error of add,
 * add_rollup, merge or read, f is still valid to free but may hold part of the
 * addition: callers discard it (no caller keeps a fleet it failed to build). */
int bdb_fleet_add(bdb_fleet *f, const char *device, int64_t start, const bdb_stats *st);
/* Adds every window of a device's rollup (r->width must divide f->width). */
int bdb_fleet_add_rollup(bdb_fleet *f, const char *device, const bdb_rollup *r);
/* dst := dst merged with src (src->width must divide dst->width). */
int bdb_fleet_merge(bdb_fleet *dst, const bdb_fleet *src);
const bdb_fleet_win *bdb_fleet_find(const bdb_fleet *f, int64_t start);
/* Removes the window starting at start, if any. */
void bdb_fleet_drop(bdb_fleet *f, int64_t start);
void bdb_fleet_row_of(const bdb_fleet *f, const bdb_fleet_win *w, bdb_fleet_row *row);

/* Encoding of the windows whose start lies in [lo, hi): uvarint n, then per window its
 * index start / width (the first a zigzag varint, later ones uvarint(index - previous -
 * 1)), the stats (bdb_stats_write), uvarint ndev and the device names front-coded
 * (uvarint bytes shared with the previous name, then the rest as a str). Canonical:
 * names strictly increasing, 1 <= ndev <= count. Reading merges the windows in [lo, hi)
 * into f (of the encoded width). Errors of read: BDB_ERR_CORRUPT, BDB_ERR_NOMEM. Write
 * (into a bdb_buf, whose own rules on memory apply) returns the
 * number of windows written. */
size_t bdb_fleet_write(const bdb_fleet *f, int64_t lo, int64_t hi, bdb_buf *out);
int bdb_fleet_read(bdb_fleet *f, bdb_dec *d, int64_t lo, int64_t hi);

#endif
