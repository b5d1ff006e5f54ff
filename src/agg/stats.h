/* stats: running statistics of one aggregation window that merge exactly.
 *
 * A window keeps count, min, max, the sum as an unevaluated double-double (hi + lo,
 * about 106 bits, so a day of readings sums as if in exact arithmetic and rollups of
 * rollups do not drift), and M2, the sum of squared deviations from the mean, updated
 * with Welford's recurrence on add and with the pairwise formula of Chan, Golub and
 * LeVeque on merge. The mean is never stored: it is the sum divided by the count, so a
 * window holds sums and counts and re-aggregates exactly (docs/AGGREGATION.md explains
 * why M2 and not a sum of squares: the textbook sum-of-squares formula cancels
 * catastrophically when the mean is large against the spread, e.g. 1e9 +- 0.5).
 *
 * Inputs must be finite; -0.0 is counted as 0.0. The sum is kept scaled by 2^-64 so it
 * never overflows: the mean is right for any finite inputs and bdb_stats_sum reports
 * +-inf only where the true sum is beyond DBL_MAX (the price: readings below 1e-289 sum
 * with an absolute error of up to 2^-1011 each). M2 stays finite while n times the
 * variance stays below DBL_MAX (spreads up to 1e151 for a day of 1 Hz readings, 1e146
 * for any count); past that it saturates at +inf and the stddev reports +inf, never
 * NaN. Deviations below 1e-154 have subnormal squares and lose precision.
 *
 * The encoding (bdb_stats_write) is compact, versioned and canonical: a decoder
 * accepts exactly the bytes the encoder can produce for some window, so decode then
 * encode gives back the same bytes. See docs/AGGREGATION.md for the layout. */
#ifndef BDB_AGG_STATS_H
#define BDB_AGG_STATS_H

#include "agg/cform.h"
#include "common/buf.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define BDB_STATS_VERSION 1
/* Largest count: every count is exact as a double. */
#define BDB_STATS_MAX_COUNT (UINT64_C(1) << 53)

typedef struct bdb_stats {
    uint64_t count;
    double min, max; /* meaningful when count > 0 */
    double sum_hi;   /* sum * 2^-64 = sum_hi + sum_lo, |sum_lo| <= ulp(sum_hi) / 2 */
    double sum_lo;   /* (scaled so that it never overflows) */
    double m2;       /* sum of (x - mean)^2, >= 0 */
} bdb_stats;

/* An empty window. A bdb_stats owns no memory: no free, copy by assignment. */
void bdb_stats_init(bdb_stats *s);

/* Adds one reading. BDB_ERR_INVALID for NaN or an infinity, BDB_ERR_LIMIT past
 * BDB_STATS_MAX_COUNT; on error the window is unchanged. */
int bdb_stats_add(bdb_stats *s, double v);

/* dst := dst merged with src (src may be dst). BDB_ERR_LIMIT if the counts together
 * pass BDB_STATS_MAX_COUNT (dst unchanged). */
int bdb_stats_merge(bdb_stats *dst, const bdb_stats *src);
/* Adds n readings at once, as n calls of bdb_stats_add would within rounding (the sum
 * exactly the same but for its last bits when s was not empty; m2 from two passes over
 * the readings, at least as accurate as Welford's): BDB_OK, BDB_ERR_INVALID (a reading
 * is not finite: s unchanged) or BDB_ERR_LIMIT (s unchanged). */
int bdb_stats_add_n(bdb_stats *s, const double *v, size_t n);

/* Accessors. Every one but count and sum returns NaN for an empty window. The first
 * four are inline: readers of many windows (a tier over a fleet) call them per window. */
static inline uint64_t bdb_stats_count(const bdb_stats *s)
{
    return s->count;
}
static inline double bdb_stats_sum(const bdb_stats *s) /* 0 for an empty window */
{
    return s->count ? (s->sum_hi + s->sum_lo) * 0x1p64 : 0.0; /* +-inf past DBL_MAX */
}
static inline double bdb_stats_min(const bdb_stats *s)
{
    return s->count ? s->min : NAN;
}
static inline double bdb_stats_max(const bdb_stats *s)
{
    return s->count ? s->max : NAN;
}
double bdb_stats_mean(const bdb_stats *s); /* always within [min, max] */
/* Population variance / stddev (divide by n) and sample ones (divide by n - 1; NaN
 * when n < 2). Exactly 0 when every reading was equal. */
double bdb_stats_var_pop(const bdb_stats *s);
double bdb_stats_var_sample(const bdb_stats *s);
double bdb_stats_stddev_pop(const bdb_stats *s);
double bdb_stats_stddev_sample(const bdb_stats *s);

/* Appends the encoding: 2 bytes for an empty window, 19 to 50 otherwise. */
void bdb_stats_write(const bdb_stats *s, bdb_buf *out);
/* Reads one encoding from d (which may hold more after it). On success *s is replaced
 * and BDB_OK returned; on malformed or non-canonical bytes BDB_ERR_CORRUPT, *s
 * unchanged and d->err set. */
int bdb_stats_read(bdb_stats *s, bdb_dec *d);
/* Steps d over one encoding without building it (a reader after other windows of a
 * record whose checksum it verified): the framing is checked, the values are not.
 * BDB_OK, or BDB_ERR_CORRUPT with d->err set. */
int bdb_stats_skip(bdb_dec *d);
/* Decodes a buffer holding exactly one encoding (trailing bytes are corruption). */
int bdb_stats_decode(bdb_stats *s, const void *p, size_t n);

/* The compact encodings of a window that is not empty (tier files, docs/formats/tier.md):
 * no version byte; the count, a flags byte, min, max and the unscaled sum as
 * bdb_buf_put_num (a few bytes each for decimal readings), sum_lo as an odd integer
 * times a power of two, m2 as 8 bytes; a single reading is its count and min. Form C2
 * (tier version 5) writes max and the sum as differences from min and count x min in
 * one decimal exponent whenever the three have one (stats_c.c). 8 to 16 bytes for a
 * minute of decimal readings instead of 43. Canonical and checked as bdb_stats_read;
 * an empty window is not encodable (the writer has none). Errors of read_c:
 * BDB_ERR_CORRUPT with d->err set. */
void bdb_stats_write_c(const bdb_stats *s, int form, bdb_buf *out);
int bdb_stats_read_c(bdb_stats *s, bdb_dec *d, int form);
/* Steps d over one compact encoding, as bdb_stats_skip (framing checked, values not);
 * *count gets its count. BDB_OK, or BDB_ERR_CORRUPT with d->err set. */
int bdb_stats_skip_count_c(bdb_dec *d, int form, uint64_t *count);
int bdb_stats_skip_c(bdb_dec *d, int form);

#endif
