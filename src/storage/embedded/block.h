/* block: immutable time-window block files.
 *
 * One block holds the chunks of many series for one time window [window_start,
 * window_end) and nothing outside it (the time-window compaction rule: a block never
 * mixes two windows, so retention drops whole files). Several blocks may exist for
 * one window (a flush of the head writes one per window it touches); compaction
 * merges blocks of the same window into one.
 *
 * A series is (tenant, device, metric); series appear in the file sorted by the byte
 * string tenant "\0" device "\0" metric. Each chunk belongs to one partition
 * (tenant, device, bucket_start) and records it. Per-partition statistics (rows and
 * bytes summed over the device's metrics in this block) are stored for size
 * histograms.
 *
 * Writing: the file is written as `<name>.tmp`, fsynced, renamed to `<name>`, and the
 * directory fsynced. Reading: the file is mapped read-only; the footer, the index and
 * each chunk carry a CRC32 and a damaged one is reported as BDB_ERR_CORRUPT, never
 * returned as data. Format: docs/STORAGE.md, "Block files". */
#ifndef BDB_BLOCK_H
#define BDB_BLOCK_H

#include "storage/vfs/vfs.h"

#include <stddef.h>
#include <stdint.h>

typedef struct bdb_series_key {
    const char *tenant;
    size_t tenant_len;
    const char *device;
    size_t device_len;
    const char *metric;
    size_t metric_len;
} bdb_series_key;

/* Compares two keys in file order (tenant, then device, then metric, bytewise). */
int bdb_series_key_cmp(const bdb_series_key *a, const bdb_series_key *b);

typedef struct bdb_chunk_ref {
    int64_t bucket_start; /* partition this chunk belongs to */
    int64_t min_ts, max_ts;
    uint32_t count;
    const uint8_t *data; /* points into the mapping (reader) */
    size_t len;
} bdb_chunk_ref;

typedef struct bdb_block_meta {
    uint32_t version;
    int64_t window_start, window_end;
    int64_t min_ts, max_ts;
    uint64_t nseries, nchunks, nsamples;
    uint64_t file_bytes;
    uint64_t seq; /* writer-chosen sequence; larger = newer, wins on duplicate samples */
} bdb_block_meta;

/* ---- writer ---- */
typedef struct bdb_block_writer bdb_block_writer;

/* Starts <dir>/<name>.tmp. */
int bdb_block_writer_open(bdb_vfs *vfs, const char *dir, const char *name, int64_t window_start,
                          int64_t window_end, uint64_t seq, bdb_block_writer **out);
/* Adds a chunk. Keys must come in non-decreasing key order; chunks of one series in
 * increasing min_ts. Every ts of the chunk must lie inside the window.
 * Errors: BDB_ERR_INVALID (order or window violated), I/O errors. */
int bdb_block_writer_add(bdb_block_writer *w, const bdb_series_key *key, const bdb_chunk_ref *c);
/* Writes index and footer, fsyncs, renames, fsyncs the directory; frees w. */
int bdb_block_writer_finish(bdb_block_writer *w, bdb_block_meta *meta);
/* Removes the temporary file; frees w. */
void bdb_block_writer_abort(bdb_block_writer *w);

/* ---- reader ---- */
typedef struct bdb_block bdb_block;

/* Maps and validates footer and index. BDB_ERR_CORRUPT if damaged. */
int bdb_block_open(bdb_vfs *vfs, const char *path, bdb_block **out);
void bdb_block_close(bdb_block *b);
const bdb_block_meta *bdb_block_get_meta(const bdb_block *b);

/* Finds a series. Returns BDB_OK and the index of its first chunk in *first and the
 * number of chunks in *n, or BDB_ERR_NOTFOUND. Binary search over the index. */
int bdb_block_find(const bdb_block *b, const bdb_series_key *key, size_t *first, size_t *n);
/* Fills c for chunk i (0..nchunks-1) after checking its CRC (BDB_ERR_CORRUPT). */
int bdb_block_chunk(const bdb_block *b, size_t i, bdb_chunk_ref *c);

/* Series iteration in key order: pass *pos = 0; returns 1 with the key (pointing into
 * the mapping), its first chunk index and chunk count; 0 at the end. */
int bdb_block_series_next(const bdb_block *b, size_t *pos, bdb_series_key *key, size_t *first,
                          size_t *n);
/* First series position whose key is >= the given (tenant[, device]) prefix, for
 * listing a tenant's devices without a full scan. device may be NULL. */
size_t bdb_block_seek(const bdb_block *b, const char *tenant, size_t tlen, const char *device,
                      size_t dlen);

/* Partition statistics: pass *pos = 0; returns 1 per partition, 0 at the end. */
typedef struct bdb_partition_stat {
    bdb_series_key key; /* metric empty */
    int64_t bucket_start;
    uint64_t rows, bytes;
} bdb_partition_stat;
int bdb_block_partition_next(const bdb_block *b, size_t *pos, bdb_partition_stat *st);

#endif
