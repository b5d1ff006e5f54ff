/* Private to db_fleet*.c: the fleet state, one fleet file in memory, head samples
 * (db_fleet.c), the file formats (db_fleet_file.c): fleet files and the list of windows
 * late data recomputed, retention and compaction (db_fleet_maint.c), the flush hook
 * (db_fleet_flush.c).
 * Layout in docs/AGGREGATION.md#fleet-aggregates. */
#ifndef BDB_DB_FLEET_INT_H
#define BDB_DB_FLEET_INT_H

#include "agg/fleet.h"
#include "common/buf.h"
#include "storage/embedded/core/db_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define FLEET_MAGIC "BDBFLT01"
#define FLEET_VERSION 2 /* 2: records in one zstd frame; 1 (records as they are) still read */
#define FLEET_MAX_BODY (UINT64_C(1) << 30) /* records of one file, uncompressed */
#define FLEET_COMPACT_AT 8 /* committed files of one window before they are merged */
#define NRES 2             /* 1h, 1d */

static inline enum bdb_res res_of(int i)
{
    return i == 0 ? BDB_RES_1H : BDB_RES_1D;
}
static inline int idx_of(enum bdb_res r)
{
    return r == BDB_RES_1H ? 0 : r == BDB_RES_1D ? 1 : -1;
}

typedef struct frec {
    char *tenant, *metric;
    const uint8_t *p; /* into the file's data */
    size_t len;
} frec;

typedef struct ffile {
    char *path;
    int ri; /* 0 = 1h, 1 = 1d */
    int64_t start, end;
    uint64_t seq, wal_upto;
    uint64_t *inputs;
    size_t ninputs;
    uint8_t *data;
    size_t size;
    frec *recs; /* sorted by (tenant, metric) */
    size_t nrec;
} ffile;

/* A fleet window that late data recomputed in a device's tiers (see db_fleet.h). */
typedef struct fdirty {
    char *tenant, *metric;
    int ri;
    int64_t start;
} fdirty;

typedef struct fstate {
    bdb_db *db;
    char *dir, *sub[NRES];
    pthread_rwlock_t lock;
    ffile **files; /* sorted by (res, start, seq) */
    size_t n, cap;
    uint64_t next_seq;
    uint64_t covered_at; /* flush count at the last publish; UINT64_MAX = none */
    const hchunk **cov;  /* frozen chunks that publish covered, sorted */
    size_t ncov;
    uint64_t *pend; /* seqs of that publish (withdrawn if its flush fails) */
    size_t npend;
    fdirty *dirty; /* sorted by (tenant, metric, ri, start); under lock */
    size_t ndirty;
    _Atomic uint64_t written, compacted, dropped, quarantined, discarded, withdrawn;
    int sink_synced; /* sink: reads may use the sink (db_agg_sink.h); under lock */
} fstate;

/* NULL when memory runs out (common/alloc.h): callers fail with BDB_ERR_NOMEM. */
void *fl_realloc(void *p, size_t n);
char *fl_strndup(const char *s, size_t n);

void fl_file_free(ffile *f);
int fl_rec_cmp(const char *t1, const char *m1, const char *t2, const char *m2);
/* Parses a whole file; takes ownership of data on success; *why names the damage.
 * BDB_ERR_NOMEM is not damage: the file is fine, the caller fails instead. */
int fl_parse(uint8_t *data, size_t len, ffile *f, const char **why);
const frec *fl_find(const ffile *f, const char *tenant, const char *metric);
/* Encodes (records: nrec records already encoded in body), writes durably into the
 * resolution's directory and parses it back: *out is the file as published. */
int fl_write(fstate *t, int ri, int64_t start, uint64_t seq, uint64_t upto, const uint64_t *in,
             size_t nin, size_t nrec, const bdb_buf *body, ffile **out);
/* The state of db, loaded from disk at first use (db_fleet.c); NULL when memory runs
 * out (tried again at the next use). */
fstate *fl_get(bdb_db *db);

/* Head samples (db_fleet.c), shared by the reads and the flush hook, merged by a
 * db_merger (core/merge.h). */
/* Adds a chunk list (newest first) to g, later writes at higher priorities, skipping
 * chunks in skip's covered set (skip may be NULL); returns the priority base for a list
 * of newer chunks. */
uint64_t fl_gather_list(db_merger *g, const hchunk *list, int64_t lo, int64_t hi, uint64_t base,
                        const fstate *skip);
/* Adds the merged samples of g (the newest write of each time) as per-window statistics
 * (width w) of device dev to fl[0..nf); empties g. BDB_ERR_NOMEM when g lost a sample. */
int fl_gather_into(db_merger *g, int64_t w, const char *dev, bdb_fleet *fl, int nf);
/* Orders chunk addresses (the covered set is sorted by it). */
int fl_ptr_cmp(const void *a, const void *b);

/* The file list (db_fleet.c), kept sorted; callers hold t->lock exclusively. Reserve
 * the room first (BDB_OK or BDB_ERR_NOMEM), so that adding cannot fail. */
int fl_files_reserve(fstate *t, size_t extra);
void fl_files_add(fstate *t, ffile *f);
/* Retention, then compaction (db_fleet_maint.c); run by the flush hook under
 * flush_mutex once a flush published its files. Skips a round it has no memory for. */
void fl_maintain(fstate *t);
/* Rewrites the committed files that hold records of tenant without them (db_fleet_maint.c).
 * Caller holds flush_mutex. BDB_OK, BDB_ERR_NOMEM, BDB_ERR_IO ... (files not yet
 * rewritten stay as they were; calling again finishes). */
int fl_forget_tenant(fstate *t, const char *tn);

/* The recomputed-window list: saved whole and atomically; loaded at open (BDB_OK
 * when missing or damaged, which is logged; BDB_ERR_NOMEM). */
int fl_dirty_save(fstate *t);
int fl_dirty_load(fstate *t);

/* The engine's calls (db_consumer.h), through db_fleet_consumer: the flush phase runs
 * before the tier consumer's, on the same frozen series; close frees the state;
 * purge_tenant (bdb_db_drop_tenant, under flush_mutex, right after a committed flush)
 * rewrites the fleet files that hold the tenant's windows without them. */
struct db_consumer;
extern const struct db_consumer db_fleet_consumer;
int db_fleet_flush(bdb_db *db, struct series *const *v, size_t n, uint64_t sealed, int rc);
void db_fleet_close(bdb_db *db);
int db_fleet_forget_tenant(bdb_db *db, const char *tn);

#endif
