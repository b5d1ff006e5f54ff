/* wal: the write-ahead log. Records are opaque byte strings; the WAL frames, checksums,
 * segments, syncs and replays them.
 *
 * Files: <dir>/<20-digit segment number>, e.g. 00000000000000000001. Segment numbers
 * only grow. Format (see docs/STORAGE.md): 32 KiB pages; each record is split into
 * fragments typed FULL/FIRST/MIDDLE/LAST with a 7-byte header
 * (type u8, length u16le, crc32 u32le of the type byte and the payload) as in LevelDB and the
 * Prometheus WAL, so a torn tail, bad header, bad fragment sequence, bad type flag,
 * bad checksum, bad length or bad content are each detected.
 *
 * Threads: bdb_wal_append and bdb_wal_sync may be called from any number of threads.
 * Group commit: appenders write under a mutex and get an LSN (end offset in the log);
 * bdb_wal_sync(lsn) returns once that LSN is durable. One waiting thread fsyncs for
 * everyone whose records were written before the fsync began.
 *
 * Sync modes, as Cassandra's commitlog_sync:
 *  - BATCH (default): bdb_wal_sync waits for the fsync. Acknowledged = durable.
 *  - PERIODIC: a background thread fsyncs every periodic_ms; bdb_wal_sync returns at
 *    once. A crash can lose up to periodic_ms of acknowledged writes.
 * After any failed fsync the WAL is failed for good: every later append and sync
 * returns BDB_ERR_READONLY (never retry an fsync and then acknowledge). */
#ifndef BDB_WAL_H
#define BDB_WAL_H

#include "storage/vfs/vfs.h"

#include <stddef.h>
#include <stdint.h>

enum bdb_wal_sync_mode { BDB_WAL_SYNC_BATCH = 0, BDB_WAL_SYNC_PERIODIC = 1 };

typedef struct bdb_wal_opts {
    const char *dir;        /* created if missing */
    bdb_vfs *vfs;           /* NULL = POSIX */
    uint64_t segment_bytes; /* roll to a new segment past this size; default 64 MiB */
    enum bdb_wal_sync_mode sync_mode;
    int periodic_ms; /* PERIODIC interval; default 100 */
} bdb_wal_opts;

typedef struct bdb_wal bdb_wal;

typedef struct bdb_wal_replay_stats {
    uint64_t segments;      /* segments read */
    uint64_t records;       /* whole records delivered */
    uint64_t bytes;         /* bytes of valid records */
    uint64_t corrupt_bytes; /* bytes cut off as torn or corrupt */
    int corruptions;        /* number of damaged places found */
    char first_error[256];  /* "segment 3 offset 40960: bad checksum", empty if none */
} bdb_wal_replay_stats;

/* Opens (creating the directory if needed). Does not replay. Appends go to a new
 * segment numbered after the highest existing one. */
int bdb_wal_open(const bdb_wal_opts *opts, bdb_wal **out);

/* Delivers every valid record of segments >= from_segment in order. On the first
 * torn or corrupt place in a segment, that segment is truncated there (and fsynced),
 * later segments are still read, and the damage is counted in stats.
 * cb returning non-zero stops replay with that value. Call before the first append. */
int bdb_wal_replay(bdb_wal *w, uint64_t from_segment,
                   int (*cb)(void *ctx, const uint8_t *rec, size_t len, uint64_t segment),
                   void *ctx, bdb_wal_replay_stats *stats);

/* Appends one record (any length). *lsn gets a position to pass to bdb_wal_sync.
 * Errors: BDB_ERR_READONLY, BDB_ERR_IO, BDB_ERR_NOSPACE. */
int bdb_wal_append(bdb_wal *w, const void *rec, size_t len, uint64_t *lsn);

/* Returns when everything up to lsn is durable (BATCH) or at once (PERIODIC).
 * Errors: BDB_ERR_READONLY (this or an earlier fsync failed). */
int bdb_wal_sync(bdb_wal *w, uint64_t lsn);

/* Seals the current segment (fsync) and starts a new one. *sealed gets the number of
 * the sealed segment: every record appended before this call is in segments <= *sealed. */
int bdb_wal_cut(bdb_wal *w, uint64_t *sealed);

/* The lowest segment number in dir, without opening the WAL. BDB_ERR_NOTFOUND when
 * dir holds none (or does not exist); BDB_ERR_IO. */
int bdb_wal_oldest_segment(bdb_vfs *vfs, const char *dir, uint64_t *oldest);

/* Deletes every segment numbered <= upto (and fsyncs the directory). */
int bdb_wal_remove_upto(bdb_wal *w, uint64_t upto);

typedef struct bdb_wal_stats {
    uint64_t appends, bytes, fsyncs;
    uint64_t fsync_ns_total, fsync_ns_max;
    uint64_t segments_on_disk, bytes_on_disk;
    uint64_t current_segment;
    uint64_t written_lsn; /* the LSN the next append's bytes start at */
    int failed;           /* 1 after a failed fsync */
} bdb_wal_stats;

void bdb_wal_get_stats(bdb_wal *w, bdb_wal_stats *st);

/* Fsyncs and closes. Safe on NULL. */
void bdb_wal_close(bdb_wal *w);

#endif
