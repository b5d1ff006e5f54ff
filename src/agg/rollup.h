/* rollup: event-time windows of one series and how they merge into coarser tiers.
 *
 * A window holds the mergeable statistics of the samples whose time falls in
 * [start, start + width): bdb_stats (count, sum, min, max, M2) and a bdb_sketch
 * (p50/p95/p99 within 1% relative). Windows are aligned to multiples of the width on the
 * Unix epoch (floor division, so negative times work). The pyramid is
 *
 *   raw samples -> 1 minute -> 1 hour (merge of its 60 minutes) -> 1 day (merge of 24 hours)
 *
 * and because both parts merge exactly (stats: count/min/max bit for bit, sum to about
 * 2^-106, M2 by Chan-Golub-LeVeque; sketch: byte-identical however the data was split),
 * a partial window from one flush merges with a partial window of the same interval
 * from another flush, and a day built from 1,440 minutes equals the day built from raw.
 *
 * A bdb_rollup is the sorted set of windows of one series at one width. Non-finite
 * samples (NaN, +-inf) are not aggregated: they are skipped and counted in `skipped`.
 *
 * Routing (which tier answers a query) is also here because it is a pure function of
 * the requested range: bdb_rollup_route. */
#ifndef BDB_AGG_ROLLUP_H
#define BDB_AGG_ROLLUP_H

#include "agg/sketch.h"
#include "agg/stats.h"
#include "common/buf.h"

#include <stddef.h>
#include <stdint.h>

/* Resolutions, in pyramid order. The tiers are 1M, 1H and 1D; RAW is the samples. */
enum bdb_res { BDB_RES_RAW = 0, BDB_RES_1M = 1, BDB_RES_1H = 2, BDB_RES_1D = 3 };
#define BDB_TIERS 3 /* 1M, 1H, 1D */

typedef struct bdb_window {
    int64_t start;
    bdb_stats st;
    bdb_sketch sk;
} bdb_window;

typedef struct bdb_rollup {
    int64_t width; /* ms */
    bdb_window *w; /* sorted by start, unique */
    size_t n, cap;
    uint64_t skipped; /* non-finite samples not aggregated */
    /* Set by a reader whose answer shows no quantile: bdb_rollup_read and _read_part
     * step over the encoded sketches (bdb_sketch_skip) and keep the statistics only,
     * and bdb_rollup_add adds to the statistics only, so the windows' sketches hold
     * only what was merged in memory. Decoding the sketches is most of the cost of
     * reading a tier record, and adding to them most of deriving one from raw.
     * Its windows' sketches stay zeroed (no memory, no parameters): merges, copies and
     * folds from it leave sketches alone, and it is never written. Set it right after
     * bdb_rollup_init, before the first window. */
    int stats_only;
} bdb_rollup;

/* Width in ms of a resolution (0 for RAW), its name ("raw", "1m", "1h", "1d"), and
 * the parse of a name (-1 when unknown). */
int64_t bdb_res_width(enum bdb_res r);
const char *bdb_res_name(enum bdb_res r);
int bdb_res_parse(const char *s);

/* The tier that answers resolution=auto for a range of range_ms (the seed's thresholds):
 * > 90 days -> 1d; > 7 days -> 1h; > 6 hours -> 1m; else raw. */
enum bdb_res bdb_rollup_route(int64_t range_ms);

void bdb_rollup_init(bdb_rollup *r, int64_t width);
void bdb_rollup_free(bdb_rollup *r);
/* Drops every window, keeping the width. */
void bdb_rollup_reset(bdb_rollup *r);

/* Adds one sample to the window holding ts. A non-finite v is skipped (BDB_OK).
 * Errors: BDB_ERR_LIMIT (a window's count past 2^53), BDB_ERR_NOMEM. */
int bdb_rollup_add(bdb_rollup *r, int64_t ts, double v);
/* Adds n finite readings, all of the window holding start, as n bdb_rollup_add calls
 * would (the statistics of the run at once: bdb_stats_add_n). Same errors; on one,
 * the readings the window took are counted in all of it. */
int bdb_rollup_add_window(bdb_rollup *r, int64_t start, const double *v, size_t n);
/* Merges a window of any width that is a divisor of r->width (including r->width)
 * into the window of r holding w->start: the coarsening step of the pyramid.
 * Errors: BDB_ERR_INVALID (different sketch accuracy), BDB_ERR_LIMIT, BDB_ERR_NOMEM. */
int bdb_rollup_merge_window(bdb_rollup *r, const bdb_window *w);
/* A window's statistics alone, as a cache keeps them (a reader that shows no quantile
 * holds no sketch). */
typedef struct bdb_stwin {
    int64_t start;
    bdb_stats st;
} bdb_stwin;
/* Appends v[0..n) (ascending starts, multiples of r->width, all after r's last window)
 * to r with empty sketches: the windows n bdb_rollup_merge_window calls would make
 * there, in one allocation. A window of count 0 is skipped, as merging it would be.
 * BDB_ERR_INVALID (and r unchanged) when v does not fit that; BDB_ERR_NOMEM. */
int bdb_rollup_append_stats(bdb_rollup *r, const bdb_stwin *v, size_t n);
/* Replaces the window of r at src->start (same width) by a copy of src: a window
 * recomputed from raw data supersedes the partial windows merged so far. An empty src
 * removes the window. Errors: BDB_ERR_NOMEM. */
int bdb_rollup_set_window(bdb_rollup *r, const bdb_window *src);
/* Merges the windows of src whose start lies in [lo, hi) into out (initialized by the
 * caller; its start is left alone): one coarser window from finer ones.
 * Errors: as bdb_rollup_merge_window. */
int bdb_rollup_fold(const bdb_rollup *src, int64_t lo, int64_t hi, bdb_window *out);
/* Merges every window of src into dst (src->width must divide dst->width). */
int bdb_rollup_merge(bdb_rollup *dst, const bdb_rollup *src);
/* The window starting at start, or NULL. */
const bdb_window *bdb_rollup_find(const bdb_rollup *r, int64_t start);

/* Encoding of a rollup's windows whose start lies in [lo, hi): uvarint n, then per
 * window its index start / width (the first as a zigzag varint, later ones as
 * uvarint(index - previous - 1)), the stats and the sketch (docs/formats/tier.md). Reading merges
 * the decoded windows into r (which must have the encoded width) and keeps only those whose start
 * lies in [lo, hi). Errors of read: BDB_ERR_CORRUPT (malformed, non-canonical, unsorted,
 * misaligned). Write returns the number of windows written. */
size_t bdb_rollup_write(const bdb_rollup *r, int64_t lo, int64_t hi, bdb_buf *out);
int bdb_rollup_read(bdb_rollup *r, bdb_dec *d, int64_t lo, int64_t hi);
/* As bdb_rollup_read for a reader that wants part of a record whose checksum it has
 * verified: windows before lo are stepped over without being built (their framing is
 * checked, not their values), and reading stops at the first window at or after hi
 * with *stopped = 1 and d left there (the rest is neither read nor checked). A query
 * of the last hour of a 1-day 1m file then builds 60 windows, not 1,440. */
int bdb_rollup_read_part(bdb_rollup *r, bdb_dec *d, int64_t lo, int64_t hi, int *stopped);

/* The compact form of tier files of versions 3 and 5 (docs/formats/tier.md): as above,
 * but the first index is uvarint(index - base) (base = the file window's first index, so
 * one or two bytes), and each window is bdb_stats_write_c then bdb_sketch_write_c in
 * the given form (BDB_C1 in version 3, BDB_C2 in version 5). Nothing is
 * written (0 returned) when no window lies in [lo, hi), so n >= 1. read_c reads one
 * such list; with part as bdb_rollup_read_part (stopped may be NULL otherwise). Every
 * window's start must lie at or after base * width. */
size_t bdb_rollup_write_c(const bdb_rollup *r, int64_t lo, int64_t hi, int64_t base, int form,
                          bdb_buf *out);
int bdb_rollup_read_c(bdb_rollup *r, bdb_dec *d, int form, int64_t base, int64_t lo, int64_t hi,
                      int part, int *stopped);

#endif
