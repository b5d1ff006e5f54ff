/* sketch: a mergeable quantile sketch with a relative-error guarantee (DDSketch, Masson,
 * Rim and Lee, VLDB 2019).
 *
 * With relative accuracy alpha, gamma = (1 + alpha) / (1 - alpha). A value x > 0 falls
 * in bucket i = ceil(log_gamma(x)), which covers (gamma^(i-1), gamma^i]; the bucket
 * answers for its values with gamma^i (1 - alpha), which is within a factor alpha of
 * every value in it. Negative values use the same buckets on |x| in a mirrored store,
 * and zero has its own bucket, so:
 *
 *   for every q in [0, 1], with x_k the k-th smallest of the n values (0-based) and
 *   k = floor(q (n - 1)):   |quantile(q) - x_k| <= alpha |x_k|
 *
 * (up to the rounding of log(), about 1e-13 relative; quantile(0) and quantile(1) are
 * the exact min and max, and every answer lies within [min, max]).
 *
 * At most max_buckets buckets are non-empty. When a value or a merge would make one
 * more, the lowest buckets in value order (the most negative values first) are folded
 * into the lowest bucket that stays. The guarantee then holds for every k >= the count
 * of that lowest bucket (bdb_sketch_accurate_from); below it the answer is the lowest
 * bucket's value, an over-estimate (never below x_k - alpha |x_k|). 2048 buckets at alpha = 1% span
 * 17 orders of magnitude on one sign, so telemetry rarely collapses at all.
 *
 * Merging is exact: a sketch depends only on the multiset of values added, not on how
 * they were split and merged (adding in any order, merging 1,440 minute sketches or
 * sketching the whole day gives bit-identical sketches and encodings), also when
 * buckets collapse. Counts are integers; min and max are kept exactly.
 *
 * The encoding is compact (zigzag/delta varint bucket indexes, varint counts), versioned
 * and canonical; a decoder accepts arbitrary bytes without crashing and rejects
 * anything the encoder could not have produced. Layout in docs/AGGREGATION.md. */
#ifndef BDB_AGG_SKETCH_H
#define BDB_AGG_SKETCH_H

#include "agg/cform.h"
#include "common/buf.h"

#include <stddef.h>
#include <stdint.h>

#define BDB_SKETCH_VERSION 1
#define BDB_SKETCH_ALPHA 0.01        /* default relative accuracy */
#define BDB_SKETCH_MAX_BUCKETS 2048u /* default bound on non-empty buckets */
/* Accepted parameters: alpha in whole parts per million within these bounds. */
#define BDB_SKETCH_ALPHA_PPM_MIN 100u    /* 0.0001 */
#define BDB_SKETCH_ALPHA_PPM_MAX 250000u /* 0.25 */
#define BDB_SKETCH_BUCKETS_MIN 8u
#define BDB_SKETCH_BUCKETS_MAX 65536u

typedef struct bdb_sketch_bucket {
    int32_t key; /* order-preserving: < 0 negative values, 0 zero, > 0 positive */
    uint64_t count;
} bdb_sketch_bucket;

typedef struct bdb_sketch {
    uint32_t alpha_ppm;
    uint32_t max_buckets;
    double ln_gamma;
    uint64_t count;
    double min, max;      /* meaningful when count > 0 */
    int collapsed;        /* some buckets were folded into the lowest one */
    uint32_t n, cap;      /* buckets in use, allocated */
    bdb_sketch_bucket *b; /* sorted by key */
} bdb_sketch;

/* An empty sketch. alpha must be a whole number of parts per million within the bounds
 * above and max_buckets within its bounds; otherwise BDB_ERR_INVALID (and *s is still
 * safe to free). */
int bdb_sketch_init(bdb_sketch *s, double alpha, uint32_t max_buckets);
/* bdb_sketch_init(s, BDB_SKETCH_ALPHA, BDB_SKETCH_MAX_BUCKETS), which cannot fail. */
void bdb_sketch_init_default(bdb_sketch *s);
void bdb_sketch_free(bdb_sketch *s);
/* Empties the sketch, keeping its parameters and memory. */
void bdb_sketch_reset(bdb_sketch *s);
/* dst (initialized) := src. BDB_ERR_NOMEM leaves dst unchanged. */
int bdb_sketch_copy(bdb_sketch *dst, const bdb_sketch *src);

/* Adds v (n times). BDB_ERR_INVALID for NaN, an infinity or n == 0; BDB_ERR_LIMIT if
 * the total count would overflow; BDB_ERR_NOMEM. On error the sketch is unchanged. */
int bdb_sketch_add(bdb_sketch *s, double v);
int bdb_sketch_add_n(bdb_sketch *s, double v, uint64_t n);

/* dst := dst merged with src (src may be dst). Both must have the same alpha
 * (BDB_ERR_INVALID otherwise); the result keeps the smaller max_buckets.
 * BDB_ERR_LIMIT / BDB_ERR_NOMEM as for add. On error dst is unchanged. */
int bdb_sketch_merge(bdb_sketch *dst, const bdb_sketch *src);

/* The q-quantile estimate, q in [0, 1]; NaN for an empty sketch or q outside. */
double bdb_sketch_quantile(const bdb_sketch *s, double q);
uint64_t bdb_sketch_count(const bdb_sketch *s);
double bdb_sketch_min(const bdb_sketch *s); /* NaN when empty */
double bdb_sketch_max(const bdb_sketch *s);
double bdb_sketch_alpha(const bdb_sketch *s);
/* The smallest rank k (0-based) from which the alpha guarantee holds: 0 unless buckets
 * collapsed, then the count of the lowest bucket. */
uint64_t bdb_sketch_accurate_from(const bdb_sketch *s);

/* Appends the encoding (9 bytes when empty, about 2 bytes per non-empty bucket). */
void bdb_sketch_write(const bdb_sketch *s, bdb_buf *out);
/* Reads one encoding from d into s, which must be initialized; its parameters are
 * replaced by the encoded ones. On malformed or non-canonical bytes BDB_ERR_CORRUPT,
 * *s unchanged and d->err set; BDB_ERR_NOMEM. */
int bdb_sketch_read(bdb_sketch *s, bdb_dec *d);
/* Steps d over one encoding without building it (see bdb_stats_skip): the framing is
 * checked, the buckets are not. BDB_OK, or BDB_ERR_CORRUPT with d->err set. */
int bdb_sketch_skip(bdb_dec *d);
/* Decodes a buffer holding exactly one encoding (trailing bytes are corruption). */
int bdb_sketch_decode(bdb_sketch *s, const void *p, size_t n);

/* The compact encodings inside a window whose statistics (count, min, max) are stored
 * beside it (docs/formats/tier.md, "The compact window list"). For a sketch of the
 * default parameters that never collapsed they store the buckets without what the
 * statistics already say; any other sketch is the byte 0 and bdb_sketch_write.
 * BDB_C1 (tier files of version 3): uvarint nb, the first key as zvarint(key -
 * the key of min), the others as uvarint gaps, the counts (uvarint count - 1 each) only
 * when nb < count. BDB_C2 (version 5): the end keys as offsets from the keys of
 * min and max, the inner gaps and all counts but the last as Exp-Golomb bit codes.
 * read_c checks what bdb_sketch_read checks, against the given count, min and max
 * (which it does not read), and refuses any form the writer would not have chosen;
 * skip_c steps over one, checking its framing. Errors of read_c: BDB_ERR_CORRUPT (d->err
 * set), BDB_ERR_NOMEM. */
void bdb_sketch_write_c(const bdb_sketch *s, int form, bdb_buf *out);
int bdb_sketch_read_c(bdb_sketch *s, bdb_dec *d, int form, uint64_t count, double min, double max);
int bdb_sketch_skip_c(bdb_dec *d, int form, uint64_t count);

#endif
