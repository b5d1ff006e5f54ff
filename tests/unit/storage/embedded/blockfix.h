/* The content of tests/fixtures/blocks/v2-chunks.blk, a block file of format version 2
 * written by the last build that wrote that version (commit 42dff49; how: the
 * fixture's README). block_test reads the file and writes the same content with the
 * current writer, and compares both with what these functions say.
 *
 * Six series of tenant "t", device "d", metrics "m0".."m5", one chunk each, in forms
 * that cover what a block stores bare and what it keeps whole:
 *   m0  PACKED, mantissa deltas: 30 readings 10 s apart at a millisecond phase
 *   m1  PACKED, deltas of deltas: a counter, timestamps in whole seconds
 *   m2  PACKED, one reading
 *   m3  XOR: values that are no exact decimal
 *   m4  PACKED, 65 readings with an escaped outlier and negative values
 *   m5  PACKED, two chunks in two buckets */
#ifndef BDB_TEST_BLOCKFIX_H
#define BDB_TEST_BLOCKFIX_H

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "storage/embedded/block/block.h"
#include "storage/embedded/chunk/chunk.h"

#include <stdio.h>
#include <string.h>

#define BF_W0 1800000000000LL
#define BF_WINDOW (2 * 3600 * 1000LL)
#define BF_BUCKET (3600 * 1000LL)
#define BF_NSERIES 6
#define BF_MAXN 100

/* Chunk j of series s: its samples and the form to encode them in. Returns 0 when
 * the series has no chunk j. */
static inline int bf_chunk(int s, int j, int64_t *ts, double *v, size_t *n, int *form)
{
    if (j > 0 && s != 5)
        return 0;
    if (j > 1)
        return 0;
    *form = BDB_CHUNK_FORM_AUTO;
    switch (s) {
    case 0:
        *n = 30;
        for (size_t i = 0; i < *n; i++) {
            ts[i] = BF_W0 + 7919 + (int64_t)i * 10000;
            v[i] = (double)(2315 + (int)((i * 37) % 101) - 50) / 100.0;
        }
        *form = BDB_CHUNK_FORM_DELTA;
        break;
    case 1:
        *n = 40;
        for (size_t i = 0; i < *n; i++) {
            ts[i] = BF_W0 + 60000 + (int64_t)i * 15000;
            v[i] = (double)(1000000 + i * 250 + (i % 3));
        }
        *form = BDB_CHUNK_FORM_DOD;
        break;
    case 2:
        *n = 1;
        ts[0] = BF_W0 + 123457;
        v[0] = 1013.25;
        break;
    case 3:
        *n = 12;
        for (size_t i = 0; i < *n; i++) {
            ts[i] = BF_W0 + 5 + (int64_t)i * 999;
            v[i] = 1.0 / (double)(i + 3);
        }
        *form = BDB_CHUNK_FORM_XOR;
        break;
    case 4:
        *n = 65;
        for (size_t i = 0; i < *n; i++) {
            ts[i] = BF_W0 + 1000 + (int64_t)i * 10000 + (i == 20 ? 7 : 0);
            v[i] = i == 40 ? 9.5e6 : -(double)((i + 1) * 3) / 10.0;
        }
        *form = BDB_CHUNK_FORM_DELTA;
        break;
    default:
        *n = 20;
        for (size_t i = 0; i < *n; i++) {
            ts[i] = BF_W0 + (int64_t)j * BF_BUCKET + 30000 + (int64_t)i * 10000;
            v[i] = 20.0 + (double)((int)i - 10 * j) / 4.0;
        }
        break;
    }
    return 1;
}

/* Writes the fixture's content as block `name` in dir with the running build's
 * writer: BDB_OK or the first error. */
static inline int bf_write(bdb_vfs *vfs, const char *dir, const char *name)
{
    bdb_block_writer *w;
    int rc = bdb_block_writer_open(vfs, dir, name, BF_W0, BF_W0 + BF_WINDOW, 7, &w);
    if (rc != BDB_OK)
        return rc;
    int64_t ts[BF_MAXN];
    double v[BF_MAXN];
    for (int s = 0; s < BF_NSERIES && rc == BDB_OK; s++) {
        char metric[16];
        snprintf(metric, sizeof metric, "m%d", s);
        bdb_series_key k = {"t", 1, "d", 1, metric, strlen(metric)};
        size_t n;
        int form;
        for (int j = 0; rc == BDB_OK && bf_chunk(s, j, ts, v, &n, &form); j++) {
            bdb_buf b;
            bdb_buf_init_checked(&b);
            rc = bdb_chunk_encode_as(ts, v, n, form, &b);
            bdb_chunk_ref c = {.bucket_start = BF_W0 + (ts[0] - BF_W0) / BF_BUCKET * BF_BUCKET,
                               .min_ts = ts[0],
                               .max_ts = ts[n - 1],
                               .count = (uint32_t)n,
                               .data = b.data,
                               .len = b.len};
            if (rc == BDB_OK)
                rc = bdb_block_writer_add(w, &k, &c);
            bdb_buf_free(&b);
        }
    }
    if (rc != BDB_OK) {
        bdb_block_writer_abort(w);
        return rc;
    }
    return bdb_block_writer_finish(w, NULL);
}

#endif
