/* Private to the embedded engine (db*.c, head.c): the in-memory catalog and head.
 *
 * Locking order (never take an earlier lock while holding a later one):
 *   flush_mutex -> flush_lock -> cat_lock -> device stripe -> blocks_lock
 * - cat_lock (rwlock) guards the tenant and device maps (creation of tenants/devices).
 * - A device's stripe mutex guards everything inside the device: tags, state, bucket
 *   history, its series array and every head chunk of its series.
 * - flush_lock (rwlock): writers hold it shared while they append to the WAL and the
 *   head; a flush holds it exclusively for the instant it cuts the WAL and freezes the
 *   head, so the frozen head and the sealed segments cover exactly the same writes.
 * - ext_mu only guards creating and dropping db->tier, late, fleet and usage (state of
 *   the optional parts, made on first use); nothing else is taken while it is held
 *   except by the state constructors, which read files.
 * - blocks_lock (rwlock) guards the block list; readers hold it shared while they read
 *   blocks, so maintenance can unmap a block only after swapping it out. */
#ifndef BDB_DB_INT_H
#define BDB_DB_INT_H

#include "common/buf.h"
#include "common/map.h"
#include "common/rcache.h"
#include "model/bucket.h"
#include "storage/embedded/block/block.h"
#include "storage/embedded/chunk/chunk.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/core/merge.h" /* db_merger: flush, compaction, sink */

#include <pthread.h>
#include <stdatomic.h>

/* A head chunk: the samples of one series in one (partition x block window) range
 * [lo, hc_hi), which lies inside one partition and one block window. In-order samples
 * go to the STREAM bytes in buf; samples older than the newest (out of order, or
 * rewriting a time) go to a small side list merged at read time, where the later
 * write of a time wins, and merged into the stream when it grows (head.c).
 * The head holds one per live series, so it is packed into one allocation: the
 * struct, then the stream's hc_cap bytes, then, only once a chunk has had an
 * out-of-order sample, its side list (struct hc_ooo). head.c reallocates it as either
 * grows, so a chunk moves: only the link to it is kept, under the device's stripe
 * lock. The range's end and the partition id are 32-bit offsets from lo, which a
 * range within one block window (at most a day) and a partition of at most a day keep
 * in range; the capacity and whether a side list follows live in st.owner. */
typedef struct hchunk {
    struct hchunk *next; /* newer chunks first */
    int64_t lo;          /* range [lo, hc_hi) */
    bdb_chunk_state st;  /* st.owner: hc_cap | HC_HAS_OOO */
    uint32_t span;       /* hc_hi - lo */
    int32_t boff;        /* lo - partition id (hc_bucket): a sub-bucket's id may exceed lo */
    uint8_t buf[];       /* the STREAM chunk (bdb_chunk_stream_put), zero past its end */
} hchunk;
/* The head's bytes per live series start here (docs/STORAGE.md#memory-per-live-series). */
_Static_assert(sizeof(hchunk) <= 64, "hchunk grew: the head holds one per live series");
/* The side list sits at buf + hc_cap, which head.c keeps a multiple of 8. */
_Static_assert(sizeof(hchunk) % 8 == 0, "the side list after buf must stay aligned");
#define HC_HAS_OOO 0x80000000u
#define HC_CAP_MAX 0x7ffffff8u
struct ooo_sample {
    int64_t ts;
    double v;
};
struct hc_ooo {
    uint16_t n, cap; /* samples held, room (at most DB_OOO_MAX) */
    uint32_t pad;
    struct ooo_sample s[];
};
#define DB_OOO_MAX 65535u
static inline uint32_t hc_cap(const hchunk *c)
{
    return c->st.owner & ~HC_HAS_OOO;
}
/* The chunk's side list, NULL if it never had one. */
static inline struct hc_ooo *hc_ooo(const hchunk *c)
{
    return c->st.owner & HC_HAS_OOO ? (struct hc_ooo *)(void *)((uint8_t *)c->buf + hc_cap(c))
                                    : NULL;
}
static inline uint32_t hc_nooo(const hchunk *c)
{
    const struct hc_ooo *o = hc_ooo(c);
    return o ? o->n : 0;
}
static inline int64_t hc_hi(const hchunk *c)
{
    return c->lo + (int64_t)c->span;
}
/* The partition id: the bucket start, plus the sub-bucket with sub-buckets (db_hot.h). */
static inline int64_t hc_bucket(const hchunk *c)
{
    return c->lo - (int64_t)c->boff;
}

#define DB_MAX_METRIC_LEN UINT16_MAX

/* A series: made in its tenant's arena (cat_series), at offsetof(series, metric) +
 * the name's bytes, and freed with the tenant. */
typedef struct series {
    struct device *dev;
    hchunk *active;
    hchunk *frozen; /* being flushed; read-only until the flush frees it */
    /* db.c, under the device stripe: the samples of write batch resv_batch (the low
     * 16 bits of its id) reserved so far (head room before the WAL append, without a
     * map allocated per batch), at most UINT16_MAX: the reservation is a hint (a
     * sample it does not cover grows its chunk when applied). A batch 2^16 ids later
     * that finds its id here reserves more room than it needs, never less. */
    uint16_t resv_batch;
    uint16_t resv_n;
    uint16_t mlen; /* at most DB_MAX_METRIC_LEN (bdb_db_write refuses longer names) */
    /* The name inside the struct: looking a series up by name (every write) then
     * touches one allocation, not two. NUL-terminated. */
    char metric[];
} series;
_Static_assert(offsetof(series, metric) <= 30, "series grew: the head holds one per live series");

/* Per-device state of db_hot.c: events per partition (telemetry_by_tenant), the
 * sub-bucket history and dynamic bucket promotion. Guarded by the device stripe. */
struct db_pcount {
    int32_t minute; /* partition (bucket) start / 1 min: bucket starts are minute-aligned */
    uint32_t events;
};
struct db_subent {
    int64_t from_ms; /* applies from this event time until the next entry */
    uint32_t n;      /* sub-buckets, 1 = none */
};
typedef struct dev_hot {
    struct db_pcount *pc;   /* sorted by minute */
    struct db_subent *subs; /* nsubs of them */
    int64_t promo_cap;      /* 0, or the largest bucket the learner may pick */
    int64_t cur_start;      /* partition of the newest event, for promotion */
    uint64_t cur_samples;   /* samples written into it */
    uint32_t npc, cap_pc;
    uint32_t nsubs; /* 0 = one sub-bucket everywhere */
    int promote;    /* promotion decided during the current write */
} dev_hot;

/* A device: made in its tenant's arena with its name (cat_device), freed with the
 * tenant. Fields ordered by size: the head holds one per live device. */
typedef struct device {
    struct tenant *tenant;
    char *name;
    bdb_kv *tags; /* owned strings */
    char *state;
    series **series;
    size_t nlen;
    int64_t state_ts;
    int64_t first_ts, last_ts;
    uint64_t samples;
    int64_t pinned; /* 0 = learn */
    bdb_bucket_history hist;
    bdb_rate_learner learner;
    dev_hot hs; /* db_hot.c: the partition layout (sub-buckets, promotion) */
    uint32_t stripe;
    uint32_t ntags;
    int relearn; /* the learner changed class during the current write (db.c) */
    uint32_t nseries, cap_series;
    /* db_catalog.c: where cat_series looks first, one past its last match (reports list
     * a device's metrics in the same order as the sorted series); relaxed, a hint only */
    _Atomic uint32_t series_hint;
    /* the registered consumers' bytes of this device (db_consumer.h: dev_size),
     * db->cons.dev_total in all */
    uint64_t ext[];
} device;
_Static_assert(offsetof(device, ext) <= 200, "device grew: the head holds one per live device");

/* A tenant's arena: series are freed only with their tenant, so they are cut from
 * blocks (no allocator header and size rounding per series: 16 of a series' ~50
 * bytes). */
struct cat_block {
    struct cat_block *next;
    size_t size, used;
    _Alignas(8) unsigned char data[];
};

typedef struct tenant {
    char *name;
    bdb_map *devices;
    /* the arena: a leaf lock, taken under a device's stripe (series of the tenant's
     * devices on different stripes are made at the same time) */
    pthread_mutex_t arena_mu;
    struct cat_block *arena;
    /* bdb_db_catalog_version: which tenant of the name this is (db->tenant_ids), and
     * changes of its devices, their tags and metrics, counted after each is made */
    uint64_t id;
    _Atomic uint64_t gen;
} tenant;

/* A published block. cls is its TTL class: the resolved TTL (ms, 0 = forever) shared
 * by every tenant in it, DB_CLS_MIXED when its tenants' TTLs differ (after a TTL
 * change; maintenance regroups it), DB_CLS_UNKNOWN until maintenance looks. tenants
 * caches the tenant names the block holds (immutable file: computed once). */
#define DB_CLS_MIXED INT64_C(-1)
#define DB_CLS_UNKNOWN INT64_C(-2)
typedef struct blockent {
    bdb_block *b;
    char *path;
    char **tenants;
    size_t ntenants;
    int64_t cls;
} blockent;

#define DB_STRIPES 256
#define DB_MAX_CONSUMERS 8

struct bdb_db {
    bdb_db_opts o;
    char *dir, *wal_dir, *blocks_dir, *quarantine_dir;
    bdb_vfs *vfs;
    int lock_fd;
    bdb_wal *wal;

    pthread_rwlock_t cat_lock;
    bdb_map *tenants;
    /* sink: the inherited horizons (storage/embedded/sink/db_cat_sink.h), NULL none */
    bdb_map *inherited, *inherited_tenants;
    pthread_mutex_t stripes[DB_STRIPES];

    pthread_mutex_t flush_mutex;
    pthread_rwlock_t flush_lock;
    uint64_t wal_upto; /* segments <= this are covered by blocks + catalog */

    pthread_rwlock_t blocks_lock;
    blockent *blocks; /* sorted by (window_start, seq) */
    size_t nblocks, cap_blocks;
    int64_t max_block_span; /* the widest block window ever listed (db_blocks_from) */
    uint64_t next_seq;

    pthread_t bg;
    int bg_running;
    pthread_mutex_t bg_mu;
    pthread_cond_t bg_cv;
    int stopping;
    /* written by whoever flushes (background or /internal/flush), read by the
     * background thread without flush_mutex: atomic (a TSan-reported race) */
    _Atomic int64_t last_flush_mono;
    /* flushes that failed (the WAL keeps their samples, the next flush retries): in
     * all, in a row now, since when (wall ms; 0 = the last flush succeeded) and the
     * last error, for /health and /metrics: a flush that keeps failing (a backend
     * refusing rows) must not look like a healthy server until the head fills up */
    _Atomic uint64_t flush_failures, flush_fail_streak;
    _Atomic int64_t flush_failing_since;
    atomic_int flush_last_error;

    atomic_int readonly; /* 0 writable; 2 read-only, reason being written; 1 read-only */
    /* db_space.c, read by every write batch: beside readonly, away from the counters
     * writers bump (a line written per batch would cost each reader a miss).
     * space_low: writes refused (the disk reserve not in place, or held). A write
     * whose WAL LSN reaches space_flush_lsn calls db_space_crossed, which asks the
     * background thread for a flush (space_flush_asked) before free space runs
     * short, and past space_hold_lsn holds writes; UINT64_MAX = not armed. */
    atomic_int space_low; /* DB_SPACE_OUT | DB_SPACE_HOLD */
    _Atomic uint64_t space_flush_lsn, space_hold_lsn;
    atomic_int space_flush_asked;
    _Atomic uint64_t space_releases;
    char readonly_reason[256];
    int replaying;

    _Atomic uint64_t samples_written, reports_written, write_batches, series_count, device_count,
        tenant_count, head_bytes, head_samples, flushes, compactions, retention_drops, quarantined,
        replayed, wal_corruptions, wal_corrupt_bytes, bucket_changes, ooo_samples;
    _Atomic uint64_t resv_batches; /* db.c: ids of write batches for series.resv_batch */
    _Atomic uint64_t tenant_ids;   /* db_catalog.c: tenant.id */
    /* db_hot.c: promotion size target (bytes, 0 = off) and counters */
    _Atomic uint64_t promo_target, bucket_promotions, subbucket_changes;
    /* What follows the write, flush and maintenance paths (db_consumer.h): registered
     * at open, their state behind state[]. A consumer that makes its state on first
     * use does so under ext_mu. */
    struct db_consumers {
        const struct db_consumer *c[DB_MAX_CONSUMERS];
        void *state[DB_MAX_CONSUMERS];
        uint32_t resv_off[DB_MAX_CONSUMERS], batch_off[DB_MAX_CONSUMERS], dev_off[DB_MAX_CONSUMERS];
        uint32_t n, resv_total, batch_total, dev_total;
    } cons;
    pthread_mutex_t ext_mu;
    _Atomic(struct usage *) usage; /* db_usage.c (read by writers without a lock) */
    /* Derived windows of immutable files, keyed on their seqs (db_rcache.c); NULL when
     * o.read_cache_bytes is 0. Thread-safe on its own: taken under any lock or none. */
    bdb_rcache *rcache;
};

/* head.c */
int head_append(bdb_db *db, series *s, int64_t ts, double v);
/* Makes the room n appends at ts need (the chunk, its continuation, bytes or the
 * side list), so that head_append after the WAL append cannot run out of memory:
 * BDB_OK or BDB_ERR_NOMEM (only empty chunks were added). Stripe lock held. */
int head_reserve(bdb_db *db, series *s, int64_t ts, uint32_t n);
void head_free_chunks(bdb_db *db, hchunk *c);
/* Starts the memory loads an append to s will wait for, in stages (HEAD_PF_*): each
 * stage reads what the one before fetched, so a caller with several series runs one
 * stage over all of them before the next, and their cache misses overlap instead of
 * following one another (the head of 100,000 series is far larger than the caches).
 * Only a hint: changes nothing. HEAD_PF_SERIES reads nothing (any thread, no lock);
 * the later stages read the chunk list: the device's stripe lock held. */
enum { HEAD_PF_SERIES, HEAD_PF_CHUNK, HEAD_PF_TAIL };
void head_prefetch(const series *s, int stage);
/* Decodes the samples of chunk c inside [lo, hi) (ooo merged, later write wins),
 * appending ts/v pairs in time order. BDB_OK, or BDB_ERR_NOMEM with only part of them
 * appended: the caller must fail, never use a partial list. */
int head_chunk_samples(const hchunk *c, int64_t lo, int64_t hi, int64_t **ts, double **v, size_t *n,
                       size_t *cap);

/* db_catalog.c. With create set, cat_tenant/cat_device/cat_series return NULL when
 * out of memory, having added nothing. cat_set_tags/cat_set_state return BDB_OK or
 * BDB_ERR_NOMEM (the old value kept); the write path copies first (cat_tags_copy,
 * a strdup) before its WAL append and hands the copies over after it (cat_*_take),
 * which cannot fail. */
tenant *cat_tenant(bdb_db *db, const char *name, size_t len, int create);
device *cat_device(bdb_db *db, tenant *t, const char *name, size_t len, int create);
series *cat_series(bdb_db *db, device *d, const char *metric, size_t mlen, int create);
/* Room for n series in the array of a device that has none yet, sized exactly (a
 * device's first report names the metrics it usually has; the array grows by half
 * later): BDB_OK or BDB_ERR_NOMEM. Stripe lock held. */
int cat_series_room(device *d, uint32_t n);
int cat_set_tags(device *d, const bdb_kv *tags, uint32_t n);
int cat_tags_copy(const bdb_kv *tags, uint32_t n, bdb_kv **out);
void cat_tags_free(bdb_kv *v, uint32_t n);
void cat_tags_take(device *d, bdb_kv *tags, uint32_t n); /* takes ownership */
int cat_tags_equal(const device *d, const bdb_kv *tags, uint32_t n);
int cat_set_state(device *d, const char *s, size_t n, int64_t ts);
void cat_state_take(device *d, char *s, int64_t ts); /* takes ownership */
void cat_encode(bdb_db *db, bdb_buf *out);
int cat_load(bdb_db *db);
/* The catalog file (format in db_catalog.c) from an image's length and its zstd
 * frame (bdb_zstd_frame at CAT_ZSTD_LEVEL): a flush keeps the frame, not the image,
 * from its freeze to its commit. */
#define CAT_ZSTD_LEVEL 3
int cat_save(bdb_db *db, size_t image_len, const bdb_buf *frame);
void cat_free(bdb_db *db);
/* Frees a tenant taken out of db->tenants: its devices, series and head chunks
 * (head, device and series counters lowered). */
void cat_tenant_free(bdb_db *db, tenant *t);
/* Calls cb for every device (cat_lock must be held by the caller, shared). */
void cat_each_device(bdb_db *db, void (*cb)(void *ctx, device *d), void *ctx);
static inline pthread_mutex_t *dev_lock(bdb_db *db, const device *d)
{
    return &db->stripes[d->stripe];
}

/* Block writers of one flush or compaction, one per (window, TTL class). */
struct db_wwin {
    int64_t start, cls;
    bdb_block_writer *w;
    char name[64];
    uint64_t seq;
};
typedef struct db_writers {
    struct db_wwin *v;
    size_t n;
} db_writers;
int db_writer_for(bdb_db *db, db_writers *ws, int64_t wstart, int64_t wend, int64_t cls,
                  bdb_block_writer **out);
/* Finishes every writer and publishes the new blocks, removing the blocks in gone from
 * the list in the same step (the caller closes and unlinks them); on error aborts the
 * rest and publishes nothing. */
int db_writers_finish(bdb_db *db, db_writers *ws, int rc, bdb_block *const *gone, size_t ngone);
/* The first block of the list that may overlap [t, ...): every block before it ends at
 * or before t (a binary search on the window starts, less the widest window listed).
 * Caller holds blocks_lock. */
size_t db_blocks_from(const bdb_db *db, int64_t t);
/* Caller holds blocks_lock exclusively (or is single-threaded at open). */
int db_blocks_add(bdb_db *db, bdb_block *b, char *path, int64_t cls);
int db_blocks_reserve(bdb_db *db, size_t n);

int db_flush(bdb_db *db);
/* db_sink.c: flush and read through db->o.sink (storage/sink.h) */
int db_sink_flush_series(bdb_db *db, series *s, db_merger *m, int64_t ttl_ms);
int db_sink_read(bdb_db *db, device *d, const char *tn, const char *dn, const char *const *metrics,
                 size_t nmetrics, int64_t lo, int64_t hi,
                 void (*add)(void *ud, size_t metric, int64_t ts, double v), void *ud);
int db_blocks_load(bdb_db *db);
void db_blocks_close(bdb_db *db);
void *db_background(void *arg);

/* db_rcache.c: the read cache's raw units (see there). The key of series key's data
 * in unit [u, u + U) for cache entries of kind: the unit, the series, and the seqs of
 * the blocks holding the series there (caller holds blocks_lock); BDB_ERR_NOTFOUND
 * when none does, BDB_ERR_NOMEM. */
/* Whether a read of [lo, hi) may use the cache unit by unit: a cache, a range far from
 * the ends of the time line, at most DB_CACHE_MAX_UNITS units (a longer read is rare
 * and would hold one key per unit); then *first = the first unit's start, *n units. */
#define DB_CACHE_MAX_UNITS 4096
int db_cache_units(const bdb_db *db, int64_t lo, int64_t hi, int64_t *first, size_t *n);
/* Whether the unit of series key is worth the cache (bdb_rcache_admit on the key's
 * part that needs no block list): 0 the first time lately, and the read goes as without
 * the cache at the cost of this lookup only; k is scratch. */
int db_unit_admit(bdb_db *db, char kind, const bdb_series_key *key, int64_t u, int64_t U,
                  bdb_buf *k);
int db_unit_key(bdb_db *db, char kind, const bdb_series_key *key, int64_t u, int64_t U, bdb_buf *k);
/* Raw reads through the cache, for blocks of whole units only (each block's window is
 * one unit [k U, (k + 1) U), U = o.block_window_ms): for each unit of [lo, hi) that
 * overlaps none of the nbusy head ranges busy[2i..2i+1] ([a, b)), pushes the merged
 * samples of its blocks in [lo, hi) into m (cached, or built and kept), counts the
 * chunks those are from in *nchunks, and sets served[unit index from align_down(lo,
 * U)]: the caller then skips that unit's blocks. Caller holds blocks_lock (shared). */
void db_raw_units(bdb_db *db, const bdb_series_key *key, int64_t lo, int64_t hi,
                  const int64_t *busy, size_t nbusy, db_merger *m, uint8_t *served,
                  uint64_t *nchunks);

/* db_compact.c */
int db_maintain(bdb_db *db);
/* The tenant's resolved raw TTL in ms (0 = forever). */
int64_t db_tenant_ttl(bdb_db *db, const char *tn);
void db_blockent_free(blockent *e);

/* db_hot.c (caller holds the device's stripe lock unless said otherwise) */
/* Partition id of a sample at ts in the bucket starting at bstart: bstart, or
 * bstart + sub with sub-buckets (sub < 64 < one minute, so ids never collide). */
int64_t db_partition_id(const device *d, int64_t ts, int64_t bstart);
/* The most sub-buckets in force anywhere in the partition [s, e) (a device made hot
 * spreads the rest of its current partition: that partition holds the new count's
 * sub-buckets too), and over the device's whole history: what a reader must scan. */
uint32_t db_hot_subs_within(const device *d, int64_t s, int64_t e);
uint32_t db_hot_subs_max(const device *d);
/* Events counted in the partition starting at bstart (0: none counted). */
uint64_t db_hot_events(const device *d, int64_t bstart);
/* Counts one report of nm samples at ts (telemetry_by_tenant) and checks the
 * promotion target; sets *relearn when a promotion is due (made in db_hot_promote). */
void db_hot_count(bdb_db *db, device *d, int64_t ts, uint32_t nm, int *relearn);
/* After a batch: the bucket size the device should move to (learner class, promotion,
 * promotion cap), or 0 for no change. Clears the flags. */
int64_t db_hot_next_size(bdb_db *db, device *d);
/* Forgets the event counts of partitions that end at or before cutoff (retention). */
void db_hot_forget_before(device *d, int64_t cutoff);
void db_hot_free(device *d);
/* A partition's count and sub-buckets as another data directory left them in the sink
 * (db_cat_sink.c, at open): the count is raised to events, and a sub-bucket count in
 * force at bstart that differs from the device's is recorded from bstart on (rows in
 * time order). BDB_OK or BDB_ERR_NOMEM. */
int db_hot_seed(device *d, int64_t bstart, uint64_t events, uint32_t subs);
/* Catalog part of a device (db_catalog.c) and WAL record type 3. */
void db_hot_encode(const device *d, bdb_buf *b);
int db_hot_decode(device *d, bdb_dec *dec);
void db_hot_encode_record(const device *d, bdb_buf *out);
int db_hot_apply_record(bdb_db *db, bdb_dec *dec);

/* db.c */
device *db_get_device(bdb_db *db, const char *tn, size_t tl, const char *dn, size_t dl);
void db_set_readonly(bdb_db *db, int rc, const char *what);
int db_apply_record(bdb_db *db, const uint8_t *rec, size_t len);

/* db_drop.c: WAL record type 4, "tenant dropped" (bdb_db_drop_tenant): on replay the
 * tenant is forgotten again. */
int db_drop_apply_record(bdb_db *db, bdb_dec *dec);

#endif
