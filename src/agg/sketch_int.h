/* sketch_int.h: what the sketch's encodings share inside src/agg (not a public
 * interface).
 *
 * Bucket keys: a value x > 0 with index i = ceil(log_gamma(x)) has key i + KEY_BIAS, a
 * value x < 0 has key -(i(|x|) + KEY_BIAS), zero has key 0. Key order is value order.
 * With alpha >= 1e-4 every index of a finite double lies within +-3.8e6, so keys of
 * nonzero values are never 0 and fit an int32. */
#ifndef BDB_AGG_SKETCH_INT_H
#define BDB_AGG_SKETCH_INT_H

#include "agg/sketch.h"

#include <stdint.h>

#define BDB_SK_KEY_BIAS (1 << 23)

/* The index of |v| > 0; v finite. */
int32_t bdb_sk_index_of(double ln_gamma, double v);
int32_t bdb_sk_key_of(double ln_gamma, double v);
/* Keys of a value computed here may differ by one from the writer's where another libm
 * rounds log() the other way at a bucket boundary: 1 when a and b are the same or such
 * neighbours (never across zero). */
int bdb_sk_near_key(int32_t a, int32_t b);
/* Room for want buckets. BDB_OK or BDB_ERR_NOMEM. */
int bdb_sk_reserve(bdb_sketch *s, uint32_t want);

#endif
