/* stats_int.h: what the statistics' encodings share inside src/agg (not a public
 * interface). */
#ifndef BDB_AGG_STATS_INT_H
#define BDB_AGG_STATS_INT_H

#include "agg/stats.h"

#include <stdint.h>

/* Flags of the version 1 encoding (docs/AGGREGATION.md). */
#define FLAG_SPREAD 0x01 /* min < max: max and m2 follow; otherwise max = min, m2 = 0 */
#define FLAG_LO 0x02     /* sum_lo != 0 follows */
#define FLAG_ALL (FLAG_SPREAD | FLAG_LO)

/* The sum is kept scaled by 2^-SCALE: 2^53 readings of DBL_MAX still sum to a finite
 * double, so the sum never overflows (bdb_stats_sum reports +-inf where the true sum is
 * past DBL_MAX) and the mean is always right. What it costs: readings below 2^-958
 * (about 1e-289) are summed with an absolute error of up to 2^-1011 each. */
#define SCALE 64
/* ldexp(v, -SCALE) as a multiplication: a power of two, so the product is the same
 * correctly rounded value (subnormal results too), without a libm call per reading */
#define SCALE_DOWN 0x1p-64
#define SCALE_UP 0x1p64 /* ldexp(v, SCALE): exact, or +-inf where ldexp overflows too */

/* The checks a window built by add and merge always passes, with the version 1 flags
 * that say which parts it has. 1 when it passes. */
int bdb_stats_plausible(const bdb_stats *s, uint8_t flags);

#endif
