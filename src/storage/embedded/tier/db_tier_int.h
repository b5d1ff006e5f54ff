/* Private to db_tier*.c: one tier file in memory, and the file format functions
 * (db_tier_file.c; layout in docs/formats/tier.md). */
#ifndef BDB_DB_TIER_INT_H
#define BDB_DB_TIER_INT_H

#include "agg/rollup.h"
#include "common/buf.h"
#include "common/rcache.h"
#include "storage/embedded/block/block.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/tier/db_tier.h"
#include "storage/vfs/vfs.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define TIER_VERSION 1
/* Version 2 adds a flags byte; it is written only when a flag is set, so files without
 * one keep the version 1 bytes. Both are read only to be rewritten as version 5 when
 * the tier is loaded (tf_upgrade). */
#define TIER_VERSION_FLAGS 2
/* Version 3: one record per device, metric names once per file, the compact window
 * encoding with the C1 sketch form (docs/formats/tier.md). Read as it is. */
#define TIER_VERSION_3 3
/* Version 5, the one written: version 3 with the C2 sketch form (bit codes). Version 4
 * was an experiment with compressed records, reverted unreleased: refused as unknown. */
#define TIER_VERSION_5 5
/* Every window in the file replaces the windows of the same series and start in files
 * of lower seq: it was recomputed from raw data (late data, rewrites). */
#define TF_REPLACES 1u
/* Version 3 only: the file keeps windows of a derived tier (1m, 1d) whose finer level
 * (raw data, the 1h tier) is gone: maintenance wrote it before it removed that level
 * (db_tier_keep_minutes, keep_days). Files without it in 1m/ and 1d/ were written by
 * flushes of older versions. Compaction never merges the two kinds. */
#define TF_KEPT 2u

/* A device's record in a file: 24 bytes in memory per device and file, and no
 * allocation of its own (its name lies in the file's names block). */
typedef struct tdev {
    uint64_t off;
    uint32_t len;  /* record bytes including its CRC */
    uint32_t name; /* offset of the NUL-terminated name in tfile.names */
} tdev;

typedef struct tfile {
    char *path;
    enum bdb_res res;
    char *tenant;
    int64_t start, end; /* file window */
    uint64_t seq, wal_upto, size;
    uint64_t *inputs; /* seqs of the files this one replaced (compaction) */
    size_t ninputs;
    unsigned flags; /* TF_REPLACES */
    int form;       /* the sketch form of its windows: BDB_C1 (version 3) or C2 */
    char *names;    /* device names, then metric names, each NUL-terminated */
    tdev *devs;     /* sorted by name */
    size_t ndev;
    uint32_t *mets; /* metric id -> offset of its name in names; sorted by name */
    size_t nmet;
    int hold;    /* maintenance: expired, but kept this pass (its days could not be kept) */
    bdb_file *f; /* open for pread while the file is in the list */
} tfile;

/* Where a series lies in a file: its device's record and its metric id. */
typedef struct tloc {
    size_t dev;
    uint32_t met;
} tloc;

/* Writes a file as its series arrive, so that a flush holds one device's record in
 * memory instead of the whole file (at 100,000 series the whole 1h file and its copy
 * were 40 MiB of a flush's peak): tf_begin, then tf_add per series in (device, metric)
 * byte order, then tf_finish. The metric table (every metric name the file may hold,
 * sorted, unique) is given at tf_begin, so a series' metric id is known when its
 * record is written; the device index is kept in memory (a name and a length per
 * device) and written after the records. With a vfs the bytes go through a staging
 * buffer to `<dir>/<seq>.tier.tmp`, published by tf_finish; without one (tests,
 * fuzzing) the whole image stays in b. */
typedef struct tbuilder {
    enum bdb_res res;
    char *tenant;
    int64_t start, end;
    uint64_t seq, wal_upto;
    uint64_t *inputs;
    size_t ninputs;
    unsigned flags;
    const char *const *mets; /* the metric table, the caller's until tf_finish */
    size_t nmet;
    bdb_vfs_stream fs; /* with a vfs: the file being written */
    int to_file;
    uint64_t hlen;    /* header bytes */
    uint64_t written; /* bytes handed to fs */
    bdb_buf b;        /* staged bytes (the whole image without a vfs) */
    bdb_buf rec;      /* the open device's series */
    bdb_buf devs;     /* the index's device list so far */
    bdb_buf win;      /* scratch: one series' windows */
    uint64_t ndev;
    char *dev; /* the open device; NULL before the first series */
    size_t dlen;
    int64_t last_met; /* the open device's last metric id */
    int err;          /* the first error, reported by tf_finish */
} tbuilder;

/* vfs NULL: in memory (dir unused). The file is <dir>/<seq, 16 digits>.tier. inputs
 * are copied; mets is not (it must outlive tf_finish). */
void tf_begin(tbuilder *tb, bdb_vfs *vfs, const char *dir, enum bdb_res res, const char *tenant,
              int64_t start, int64_t end, uint64_t seq, uint64_t wal_upto, const uint64_t *inputs,
              size_t ninputs, unsigned flags, const char *const *mets, size_t nmet);
/* Adds the windows of r inside the file window; nothing when there are none. Series
 * come in (device, metric) byte order, each once, with a metric of the table; else
 * tf_finish fails with BDB_ERR_INVALID. */
void tf_add(tbuilder *tb, const char *device, size_t dlen, const char *metric, size_t mlen,
            const bdb_rollup *r);
/* Ends the file. With a vfs: syncs and publishes it and fills *out (opened for pread,
 * its path set); on error nothing is left under the file's name or .tmp. Without one:
 * the image is in tb->b (out unused). BDB_OK, BDB_ERR_NOMEM, BDB_ERR_INVALID (order,
 * unknown metric), or the I/O error. */
int tf_finish(tbuilder *tb, tfile *out);
/* Frees a builder, finished or not (an unfinished file's .tmp is removed). */
void tf_builder_free(tbuilder *tb);
/* Sorts v[0..*n) (byte order) and drops repeats: a metric table for tf_begin. */
void tf_names_sort_unique(const char **v, size_t *n);

/* Parses and checks a whole version 3 or 5 file image (header, index, every record's CRC
 * and framing). BDB_ERR_CORRUPT with a reason in why. On success *out is filled (f
 * NULL). */
int tf_parse(const uint8_t *p, size_t n, tfile *out, const char **why);
/* Only the header, of any version (for the superseded-file scan at load). */
int tf_parse_header(const uint8_t *p, size_t n, tfile *out);
/* The version of a file image that has a valid magic, else 0. */
uint32_t tf_version(const uint8_t *p, size_t n);
/* A version 1 or 2 image, checked whole as those versions were, rewritten as version 5
 * with the same header fields and windows into *out (initialized by the caller).
 * BDB_ERR_CORRUPT with why; BDB_ERR_NOMEM. */
int tf_upgrade(const uint8_t *p, size_t n, bdb_buf *out, const char **why);
void tf_free(tfile *t);
/* Whether the file may hold (device, metric), and where: 0 when it cannot. */
int tf_find(const tfile *t, const char *device, const char *metric, tloc *loc);
/* Reads the record of loc->dev from the open file and merges the windows of loc->met in
 * [lo, hi) into r (with TF_REPLACES: puts them in place of r's windows of the same
 * start); nothing when the device has no such series. BDB_ERR_CORRUPT if the CRC or
 * the decoding fails. */
int tf_read_rec(const tfile *t, const tloc *loc, int64_t lo, int64_t hi, bdb_rollup *r);
/* tf_read_rec through the engine's read cache c (NULL: none), the same windows merged
 * the same way: with r->stats_only, a committed file's series (key: its res and seq,
 * which no other file of this engine ever takes, and the record and metric) is
 * decoded whole once, checked as tf_read_rec checks it, and kept; other reads, and a
 * record that does not decode whole, take tf_read_rec. */
int tf_read_rec_cached(bdb_rcache *c, const tfile *t, const tloc *loc, int64_t lo, int64_t hi,
                       bdb_rollup *r);

/* Every series of a file in (device, metric) order, reading one device record at a
 * time (compaction). tf_iter_next: 1 with a series current, 0 at the end, or an error
 * code; tf_iter_read merges the current series' windows into r as tf_read_rec does. */
typedef struct titer {
    const tfile *t;
    size_t dev; /* the current device record */
    uint8_t *rec;
    size_t rlen, pos;
    uint32_t met;      /* the current series */
    size_t woff, wlen; /* its windows in rec */
    int started;
} titer;
void tf_iter_init(titer *it, const tfile *t);
int tf_iter_next(titer *it);
const char *tf_iter_device(const titer *it);
const char *tf_iter_metric(const titer *it);
int tf_iter_read(const titer *it, bdb_rollup *r);
void tf_iter_free(titer *it);

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
    _Atomic uint64_t gen; /* bumped where kept days take the place of 1h files */
    int sink_synced;      /* sink: reads may use the sink (db_agg_sink.h); under lock */
} tstate;

/* db_tier.c, for db_tier_maint.c: the state, loaded on first use (NULL: out of
 * memory); a file added to the sorted list (BDB_ERR_NOMEM); builders (begun with the
 * tier's vfs and directory) finished and opened as *out (on error, what was written is
 * removed and *out is empty). */
tstate *tier_state(bdb_db *db);
int tier_files_add(tstate *t, tfile *f);
int tier_write_files(tstate *t, tbuilder *v, size_t n, tfile ***out);

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
 * late_recomputed counts one (and calls the recompute hook) once published;
 * late_frozen_done forgets the marks once the flush's tier files are written. */
struct series;
void late_frozen_sort(bdb_db *db);
int late_recompute(bdb_db *db, const struct series *s, bdb_rollup *part, bdb_rollup *rep);
void late_recomputed(bdb_db *db, const struct series *s, enum bdb_res res, int64_t start);
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

/* db_tier.c: adds the merged samples of m (core/merge.h: the newest write of each time,
 * as raw reads keep) to r and empties m; BDB_ERR_NOMEM when m lost a sample. */
struct db_merger;
int tier_merge_into(struct db_merger *m, bdb_rollup *r);

/* db_tier_late.c: the 1m windows of (tenant, device, metric) in [lo, hi) from raw data,
 * head and blocks, the newest write winning per time as in raw reads, merged into r (of
 * width 1 minute); tier_raw_key_minutes reads the blocks only (maintenance, which holds
 * flush_mutex, before it drops them). BDB_ERR_NOMEM, BDB_ERR_CORRUPT. */
struct device;
int tier_raw_minutes(bdb_db *db, struct device *d, const char *metric, int64_t lo, int64_t hi,
                     bdb_rollup *r);
int tier_raw_key_minutes(bdb_db *db, const bdb_series_key *key, int64_t lo, int64_t hi,
                         bdb_rollup *r);
/* Whether the 1m tier is derived from raw data and the 1d tier from the 1h tier while
 * those exist (the embedded engine) rather than stored at each flush (with a sink,
 * whose reads are remote). */
int tier_derived(const bdb_db *db);

/* The engine's calls (db_consumer.h), through db_tier_consumer and db_late_consumer. */
struct db_consumer;
struct blockent;
struct device;
struct tenant;
extern const struct db_consumer db_tier_consumer, db_late_consumer;
/* flush phase: the tier files of the frozen series (db_tier.c) */
int db_tier_flush(bdb_db *db, struct series *const *v, size_t n, uint64_t sealed, int rc);
int db_tier_maintain(bdb_db *db); /* maintain phase: retention, compaction (db_tier_maint.c) */
void db_tier_close(bdb_db *db);
/* purge_tenant phase (bdb_db_drop_tenant, under flush_mutex, right after a committed
 * flush): deletes the tenant's tier files (db_tier_maint.c). */
int db_tier_forget_tenant(bdb_db *db, const char *tn);
/* retire phase: before maintenance (under flush_mutex) drops or rewrites away the
 * raw data of tenant tn in the block window [ws, we), held by blocks v[0..n): writes
 * the tenant's minutes of that window to 1m tier files (REPLACES), which the derived
 * 1m tier reads once the raw data is gone. Nothing with a sink or when the 1m tier's
 * retention has passed the window. On error the raw data must stay. */
int db_tier_keep_minutes(bdb_db *db, const char *tn, const struct blockent *v, size_t n, int64_t ws,
                         int64_t we);
/* late data (db_tier_late.c): a sample not newer than its device's newest event (apply
 * phase, stripe held), the head freeze (freeze phase), forget_tenant, close. */
int db_late_note(bdb_db *db, struct device *d, int64_t ts); /* BDB_OK or BDB_ERR_NOMEM */
/* Room for n more marks, made before a write's WAL append so that its db_late_note
 * calls find it (another writer may take it first: then a note can still fail). */
int db_late_reserve(bdb_db *db, size_t n);
int db_late_freeze(bdb_db *db); /* BDB_OK or BDB_ERR_NOMEM (every mark kept pending) */
void db_late_close(bdb_db *db);
int64_t db_late_threshold(const bdb_db *db);
void db_late_forget_tenant(bdb_db *db, const struct tenant *t);

#endif
