/* Private to db_tier*.c: one tier file in memory, and the file format functions
 * (db_tier_file.c; layout in docs/formats/tier.md). */
#ifndef BDB_DB_TIER_INT_H
#define BDB_DB_TIER_INT_H

#include "agg/rollup.h"
#include "common/buf.h"
#include "storage/embedded/db.h"
#include "storage/embedded/db_tier.h"
#include "storage/vfs/vfs.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define TIER_VERSION 1
/* Version 2 adds a flags byte; it is written only when a flag is set, so files without
 * one keep the version 1 bytes. */
#define TIER_VERSION_FLAGS 2
/* Every window in the file replaces the windows of the same series and start in files
 * of lower seq: it was recomputed from raw data (late data, rewrites). */
#define TF_REPLACES 1u

typedef struct trec {
    char *device, *metric; /* NUL-terminated copies */
    size_t dlen, mlen;
    uint64_t off;
    uint32_t len; /* record bytes including its CRC */
} trec;

typedef struct tfile {
    char *path;
    enum bdb_res res;
    char *tenant;
    int64_t start, end; /* file window */
    uint64_t seq, wal_upto, size;
    uint64_t *inputs; /* seqs of the files this one replaced (compaction) */
    size_t ninputs;
    unsigned flags; /* TF_REPLACES */
    trec *recs;     /* sorted by (device, metric) */
    size_t nrec;
    bdb_file *f; /* open for pread while the file is in the list */
} tfile;

/* Builds a file in memory: tf_begin, then tf_add per series in any order, then
 * tf_finish, which appends index and footer. */
typedef struct tbuilder {
    enum bdb_res res;
    char *tenant;
    int64_t start, end;
    unsigned flags;
    bdb_buf b;
    bdb_buf idx;
    size_t nrec;
} tbuilder;

void tf_begin(tbuilder *tb, enum bdb_res res, const char *tenant, int64_t start, int64_t end,
              uint64_t seq, uint64_t wal_upto, const uint64_t *inputs, size_t ninputs,
              unsigned flags);
/* Adds the windows of r inside the file window; nothing when there are none. */
void tf_add(tbuilder *tb, const char *device, size_t dlen, const char *metric, size_t mlen,
            const bdb_rollup *r);
int tf_finish(tbuilder *tb); /* BDB_OK, or BDB_ERR_NOMEM: some append was dropped */
void tf_builder_free(tbuilder *tb);

/* Parses and checks a whole file image (header, index and every record's CRC).
 * BDB_ERR_CORRUPT with a reason in why. On success *out is filled (f NULL). */
int tf_parse(const uint8_t *p, size_t n, tfile *out, const char **why);
/* Only the header (for the superseded-file scan at load). */
int tf_parse_header(const uint8_t *p, size_t n, tfile *out);
void tf_free(tfile *t);
/* The record of (device, metric) or NULL. */
const trec *tf_find(const tfile *t, const char *device, const char *metric);
/* Reads one record from the open file and merges its windows in [lo, hi) into r (with
 * TF_REPLACES: puts them in place of r's windows of the same start).
 * BDB_ERR_CORRUPT if the CRC or the decoding fails. */
int tf_read_rec(const tfile *t, const trec *rec, int64_t lo, int64_t hi, bdb_rollup *r);

/* db_tier.c, for the late path: the windows of one series at res in [lo, hi) from the
 * committed tier files only (no head), merged (replacing) in seq order into out; and a
 * tenant's resolved retention of a tier (0 = forever). Flush thread only. */
/* The tier state of a db (db_tier.c; db->tier): the tier files, sorted by (res,
 * tenant, start, seq), under lock. See db_tier.c for the locking order and covered_at. */
typedef struct tstate {
    bdb_db *db;
    char *dir, *sub[BDB_TIERS];
    pthread_rwlock_t lock;
    tfile **files; /* sorted by (res, tenant, start, seq) */
    size_t n, cap;
    uint64_t next_seq;
    uint64_t covered_at; /* see the header comment; UINT64_MAX = none */
    bdb_tier_retention_fn ret_cb;
    void *ret_ctx;
    _Atomic uint64_t written, compacted, dropped, quarantined, discarded;
    int sink_synced; /* sink: reads may use the sink (db_agg_sink.h); under lock */
} tstate;

/* db_tier.c, for db_tier_maint.c: the state, loaded on first use (NULL: out of
 * memory); a file added to the sorted list (BDB_ERR_NOMEM); builders written durably
 * and opened as *out (on error, what was written is removed and *out is empty). */
tstate *tier_state(bdb_db *db);
int tier_files_add(tstate *t, tfile *f);
int tier_write_files(tstate *t, tbuilder *v, const uint64_t *seqs, size_t n, tfile ***out);

int tier_read_files(bdb_db *db, const char *tn, const char *dn, const char *metric,
                    enum bdb_res res, int64_t lo, int64_t hi, bdb_rollup *out);
int64_t tier_retention(bdb_db *db, const char *tn, enum bdb_res res);
/* bdb_db_tier_read without the late fix: tier files merged with the head. */
int tier_read_merged(bdb_db *db, const char *tn, const char *dn, const char *const *metrics,
                     size_t nmetrics, enum bdb_res res, int64_t from, int64_t to, bdb_rollup *out);

/* db_tier_late.c (flush thread only, from db_tier_flush after db_late_freeze succeeded in
 * the same flush, which created the late state they use). late_frozen_sort prepares the dirty marks
 * frozen by the flush; late_recompute takes a series' partial windows of this flush (part[0]
 * minutes from its frozen samples; part[1], part[2] their hours and days) and, when it
 * has dirty minutes, fills rep[0..2] (empty, of the tier widths) with the windows
 * recomputed from raw and coarser tiers, removing from part what they replace;
 * late_recomputed counts them (and calls the recompute hook) once published;
 * late_frozen_done forgets the marks once the flush's tier files are written. */
struct series;
void late_frozen_sort(bdb_db *db);
int late_recompute(bdb_db *db, const struct series *s, bdb_rollup *part, bdb_rollup *rep);
void late_recomputed(bdb_db *db, const struct series *s, const bdb_rollup *rep);
void late_frozen_done(bdb_db *db);
/* Reads (any thread): the device's minutes marked and not recomputed yet, sorted and
 * unique, into *out (malloc'd; the count is returned). late_fix_read puts in out the
 * windows around those minutes as raw data gives them (a rewrite of a flushed time
 * would otherwise count twice until its flush). */
size_t late_dirty_minutes(bdb_db *db, const char *tn, const char *dn, int64_t **out);
#define LATE_NOMEM SIZE_MAX /* late_dirty_minutes out of memory: the read fails */
int late_fix_read(bdb_db *db, const char *tn, const char *dn, const char *const *metrics,
                  size_t nmetrics, enum bdb_res res, int64_t from, int64_t to, const int64_t *dirty,
                  size_t ndirty, bdb_rollup *out);

#endif
