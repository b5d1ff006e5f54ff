/* dedup: what of a batch survives its own duplicates.
 *
 * Two reports of one device at the same millisecond (line protocol points less than
 * a millisecond apart, or lines without a timestamp, which all get the receive time)
 * are one sample per metric once stored: the later report's value wins (docs/API.md,
 * "Current state"; reads resolve duplicates the same way). Counting both made the
 * write counters and a partial write's `accepted` figure claim samples that were
 * never kept. This counts what a batch keeps, without changing the batch. */
#ifndef BDB_DEDUP_H
#define BDB_DEDUP_H

#include "model/batch.h"

#include <stddef.h>

typedef struct bdb_dedup {
    size_t samples; /* metric values a later report of the same device, time and
                       metric overrides */
    size_t reports; /* reports of which nothing survives: every metric (and the state,
                       if any) overridden by later reports of the same device and time */
} bdb_dedup;

/* Fills *d. BDB_OK, or BDB_ERR_NOMEM with *d zero (nothing known to be overridden). */
int bdb_dedup_count(const bdb_batch *b, bdb_dedup *d);

#endif
