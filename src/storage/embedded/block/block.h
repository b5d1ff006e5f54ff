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
 * bytes summed over the device's metrics in this block) are derived from the index
 * for size histograms.
 *
 * The index (format version 3; version 2 is still read) is compact: tenant and metric names are
 * stored once in a sorted string table, the series of one device form a group that names the tenant
 * and device once, and chunk entries are delta-coded varints inside their series'
 * record. A sparse table locates every 16th group, so a lookup is a binary search over
 * it followed by a short scan. Since version 3 a PACKED chunk is stored bare, without
 * the count and first timestamp its entry already holds.
 *
 * Writing: the file is written as `<name>.tmp`, fsynced, renamed to `<name>`, and the
 * directory fsynced. Reading: the file is mapped read-only; the header, the footer, the
 * index and each series' run of chunk bytes carry a CRC-32 and a damaged one is
 * reported as BDB_ERR_CORRUPT, never returned as data. Format: docs/formats/block.md. */
#ifndef BDB_BLOCK_H
#define BDB_BLOCK_H

#include "storage/embedded/chunk/chunk.h"
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
    /* Reader: 1 when data is a bare PACKED chunk (block version 3), whose count and
     * first timestamp are the fields above; bdb_block_chunk_iter decodes either form.
     * The writer takes whole chunks only and ignores it. */
    int bare;
} bdb_chunk_ref;

/* Starts decoding a chunk returned by a cursor, bare or whole: BDB_OK or
 * BDB_ERR_CORRUPT. */
int bdb_block_chunk_iter(const bdb_chunk_ref *c, bdb_chunk_iter *it);

typedef struct bdb_block_meta {
    uint32_t version;
    int64_t window_start, window_end;
    int64_t min_ts, max_ts;
    uint64_t nseries, nchunks, nsamples;
    uint64_t file_bytes;
    uint64_t index_bytes; /* the index region: file_bytes minus header, chunk data, footer */
    uint64_t seq;         /* writer-chosen sequence; larger = newer, wins on duplicate samples */
} bdb_block_meta;

/* ---- writer ---- */
typedef struct bdb_block_writer bdb_block_writer;

/* Starts <dir>/<name>.tmp. */
int bdb_block_writer_open(bdb_vfs *vfs, const char *dir, const char *name, int64_t window_start,
                          int64_t window_end, uint64_t seq, bdb_block_writer **out);
/* Adds a chunk. Keys must come in non-decreasing key order; chunks of one series in
 * increasing min_ts. Every ts of the chunk must lie inside the window. Key components
 * and chunks are limited to 4 GiB - 1 bytes each.
 * Errors: BDB_ERR_INVALID (order, window or size violated), BDB_ERR_LIMIT (more than
 * 4 GiB of distinct tenant and metric names), I/O errors. A rejected chunk leaves the
 * writer as it was, except after an I/O error, which sticks. */
int bdb_block_writer_add(bdb_block_writer *w, const bdb_series_key *key, const bdb_chunk_ref *c);
/* Writes index and footer, fsyncs, renames, fsyncs the directory; frees w. */
int bdb_block_writer_finish(bdb_block_writer *w, bdb_block_meta *meta);
/* Removes the temporary file; frees w. */
void bdb_block_writer_abort(bdb_block_writer *w);

/* ---- reader ---- */
typedef struct bdb_block bdb_block;

/* Maps and validates footer and index. BDB_ERR_CORRUPT if damaged or of another
 * format version. */
int bdb_block_open(bdb_vfs *vfs, const char *path, bdb_block **out);
void bdb_block_close(bdb_block *b);
const bdb_block_meta *bdb_block_get_meta(const bdb_block *b);

/* Decoding position inside one device group. Private to the block files (block*.c):
 * the fields are here only so that callers can hold cursors and iterators without
 * allocating. */
typedef struct bdb_block_gpos_ {
    const bdb_block *b;
    const uint8_t *p, *end;           /* next byte to decode, end of the group record */
    const uint8_t *buckets, *bkt_end; /* the group's bucket list */
    uint64_t nbuckets;
    uint64_t data_off;  /* file offset of the next chunk's bytes */
    uint64_t first_min; /* predictions for the next entry (two's complement bits) */
    uint64_t span, count;
} bdb_block_gpos_;

/* The chunks of one series in one block, in increasing min_ts. Valid while the block
 * is open; a plain value (copying it copies the position). */
typedef struct bdb_block_cursor {
    uint64_t nchunks; /* chunks of the series in this block */
    /* private */
    bdb_block_gpos_ g_;
    uint64_t left_, run_off_, run_len_;
    int64_t prev_min_;
    int checked_, first_;
} bdb_block_cursor;

/* Finds a series (binary search over the sparse group table, then a scan of at most
 * 16 groups and of the device's metrics). BDB_OK with *cur at its first chunk,
 * BDB_ERR_NOTFOUND, BDB_ERR_CORRUPT or BDB_ERR_INVALID. */
int bdb_block_find(const bdb_block *b, const bdb_series_key *key, bdb_block_cursor *cur);
/* Returns 1 with the next chunk (data pointing into the mapping), 0 after the last,
 * or BDB_ERR_CORRUPT. The first call checks the CRC of the series' whole run of chunk
 * bytes, so damaged bytes are never returned. */
int bdb_block_cursor_next(bdb_block_cursor *cur, bdb_chunk_ref *c);

/* Series iteration in key order. */
typedef struct bdb_block_iter {
    /* private */
    bdb_block_gpos_ g_;
    uint64_t next_group_, next_data_; /* the group after the current one */
    uint64_t series_left_, next_mid_;
    uint64_t tid_;
    const char *device_;
    size_t device_len_;
} bdb_block_iter;

/* Positions it before the first series. */
void bdb_block_iter_init(const bdb_block *b, bdb_block_iter *it);
/* Positions it before the first series whose key is >= the (tenant[, device]) prefix,
 * for listing a tenant's devices without a full scan. device may be NULL. BDB_OK or
 * BDB_ERR_CORRUPT. */
int bdb_block_iter_seek(const bdb_block *b, bdb_block_iter *it, const char *tenant, size_t tlen,
                        const char *device, size_t dlen);
/* Returns 1 with the next series' key (pointing into the mapping) and a cursor over
 * its chunks (cur may be NULL), 0 at the end, or BDB_ERR_CORRUPT. */
int bdb_block_iter_next(bdb_block_iter *it, bdb_series_key *key, bdb_block_cursor *cur);

/* Partition statistics, in (tenant, device, bucket_start) order, derived from the
 * chunk entries of each device group. */
typedef struct bdb_partition_stat {
    bdb_series_key key; /* metric empty */
    int64_t bucket_start;
    uint64_t rows, bytes;
} bdb_partition_stat;

typedef struct bdb_block_part_iter {
    /* private */
    const bdb_block *b;
    uint64_t group_, data_; /* current group record and its data offset */
    uint64_t bucket_;       /* next bucket index inside the group */
} bdb_block_part_iter;

void bdb_block_part_iter_init(const bdb_block *b, bdb_block_part_iter *it);
/* Returns 1 per partition, 0 at the end, or BDB_ERR_CORRUPT. */
int bdb_block_partition_next(bdb_block_part_iter *it, bdb_partition_stat *st);

#endif
