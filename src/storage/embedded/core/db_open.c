/* db_open: opening the embedded engine (the directory lock, catalog, blocks, state
 * index, then WAL replay through db_apply_record), its background thread, and
 * closing it (docs/STORAGE.md, recovery). */
#include "storage/embedded/core/db_consumer.h"
#include "storage/embedded/core/db_int.h"
#include "storage/embedded/core/db_space.h" /* disk reserve */
#include "common/alloc.h"
#include "common/path.h"
#include "storage/embedded/hot/db_hot.h"
#include "storage/embedded/sink/db_agg_sink.h"
#include "storage/embedded/sink/db_cat_sink.h"
#include "storage/sink.h" /* sink: closed with the db */

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

static int replay_cb(void *ctx, const uint8_t *rec, size_t len, uint64_t segment)
{
    bdb_db *db = ctx;
    int rc = db_apply_record(db, rec, len);
    if (rc == BDB_ERR_CORRUPT) {
        /* The frame checksum matched, so this is a record we cannot understand, not
         * disk damage: skip it loudly rather than refuse to start. */
        BDB_ERROR("WAL segment %llu: undecodable record of %zu bytes skipped",
                  (unsigned long long)segment, len);
        atomic_fetch_add(&db->wal_corruptions, 1);
        return 0;
    }
    if (rc != BDB_OK)
        return rc;
    atomic_fetch_add(&db->replayed, 1);
    return 0;
}

/* Releases everything open() set up; the background thread must be stopped. The
 * WAL is closed first so its final fsync happens before the directory lock goes. */
static void db_free(bdb_db *db)
{
    bdb_wal_close(db->wal);
    bdb_db_usage_release(db); /* the storage tracker reads the others: stopped first */
    db_consumers_close(db);
    db_blocks_close(db);
    cat_free(db);
    cat_inherited_free(db);
    bdb_rcache_free(db->rcache);
    if (db->lock_fd >= 0)
        close(db->lock_fd);
    free(db->dir);
    free(db->wal_dir);
    free(db->blocks_dir);
    free(db->quarantine_dir);
    for (int i = 0; i < DB_STRIPES; i++)
        pthread_mutex_destroy(&db->stripes[i]);
    pthread_rwlock_destroy(&db->cat_lock);
    pthread_rwlock_destroy(&db->flush_lock);
    pthread_rwlock_destroy(&db->blocks_lock);
    pthread_mutex_destroy(&db->flush_mutex);
    pthread_mutex_destroy(&db->ext_mu);
    pthread_mutex_destroy(&db->bg_mu);
    pthread_cond_destroy(&db->bg_cv);
    free(db);
}

int bdb_db_open(const bdb_db_opts *opts, bdb_db **out)
{
    /* The bound that keeps every file name of the engine inside BDB_PATH_BUF. */
    size_t dirlen = strlen(opts->data_dir);
    if (dirlen > BDB_DATA_DIR_MAX) {
        BDB_ERROR("data directory path is %zu bytes long; the limit is %d bytes", dirlen,
                  BDB_DATA_DIR_MAX);
        return BDB_ERR_INVALID;
    }
    bdb_db *db = bdb_calloc(1, sizeof *db);
    if (!db)
        return BDB_ERR_NOMEM;
    db->o = *opts;
    if (db->o.block_window_ms <= 0 || BDB_MS_DAY % db->o.block_window_ms != 0)
        db->o.block_window_ms = 2 * BDB_MS_HOUR;
    if (db->o.chunk_max_samples == 0 || db->o.chunk_max_samples > BDB_CHUNK_MAX_SAMPLES)
        db->o.chunk_max_samples = 2048;
    db->vfs = opts->vfs ? opts->vfs : bdb_vfs_posix();
    db->dir = bdb_strdup(opts->data_dir);
    db->wal_dir = bdb_path_join(db->dir, "wal", NULL);
    db->blocks_dir = bdb_path_join(db->dir, "blocks", NULL);
    db->quarantine_dir = bdb_path_join(db->dir, "quarantine", NULL);
    db->lock_fd = -1;
    db->tenants = bdb_map_new();
    db->next_seq = 1;
    if (db->o.read_cache_bytes)
        db->rcache = bdb_rcache_new(db->o.read_cache_bytes);
    int nomem = !db->dir || !db->wal_dir || !db->blocks_dir || !db->quarantine_dir ||
                !db->tenants || (db->o.read_cache_bytes && !db->rcache);
    pthread_rwlock_init(&db->cat_lock, NULL);
    pthread_rwlock_init(&db->flush_lock, NULL);
    pthread_rwlock_init(&db->blocks_lock, NULL);
    pthread_mutex_init(&db->flush_mutex, NULL);
    pthread_mutex_init(&db->ext_mu, NULL);
    pthread_mutex_init(&db->bg_mu, NULL);
    pthread_cond_init(&db->bg_cv, NULL);
    for (int i = 0; i < DB_STRIPES; i++)
        pthread_mutex_init(&db->stripes[i], NULL);

    int rc;
    if (nomem) {
        rc = BDB_ERR_NOMEM;
        goto fail;
    }
    if ((rc = bdb_vfs_mkdir(db->vfs, db->dir)) != BDB_OK ||
        (rc = bdb_vfs_mkdir(db->vfs, db->blocks_dir)) != BDB_OK ||
        (rc = bdb_vfs_mkdir(db->vfs, db->quarantine_dir)) != BDB_OK) {
        BDB_ERROR("cannot create data directory %s: %s", db->dir, strerror(errno));
        goto fail;
    }
    /* An advisory lock keeps two servers from sharing one directory. */
    char *lockp = bdb_path_join(db->dir, "LOCK", NULL);
    db->lock_fd = lockp ? open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0644) : -1;
    rc = lockp ? BDB_ERR_IO : BDB_ERR_NOMEM;
    free(lockp);
    if (db->lock_fd < 0)
        goto fail;
    if (flock(db->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        BDB_ERROR("data directory %s is in use by another process", db->dir);
        rc = BDB_ERR_EXISTS;
        goto fail;
    }
    /* before the catalog: a loaded device gets its consumers' bytes */
    if ((rc = db_features_register(db)) != BDB_OK)
        goto fail;
    if ((rc = cat_load(db)) != BDB_OK)
        goto fail;
    if ((rc = cat_sink_rebuild(db)) != BDB_OK) /* an empty catalog on a filled sink */
        goto fail;
    if ((rc = db_blocks_load(db)) != BDB_OK)
        goto fail;
    if ((rc = db_consumers_open(db)) != BDB_OK) /* after the catalog, before replay */
        goto fail;
    bdb_wal_opts wo = {.dir = db->wal_dir,
                       .vfs = db->vfs,
                       .segment_bytes = opts->wal_segment_bytes,
                       .sync_mode = opts->sync_mode,
                       .periodic_ms = opts->periodic_ms};
    if ((rc = bdb_wal_open(&wo, &db->wal)) != BDB_OK) {
        BDB_ERROR("cannot open WAL in %s: %s", db->wal_dir, bdb_strerror(rc));
        goto fail;
    }
    bdb_wal_replay_stats rs;
    memset(&rs, 0, sizeof rs);
    int64_t t0 = bdb_monotonic_ms();
    db->replaying = 1;
    rc = bdb_wal_replay(db->wal, db->wal_upto + 1, replay_cb, db, &rs);
    db->replaying = 0;
    if (rc != BDB_OK) {
        BDB_ERROR("WAL replay failed: %s", bdb_strerror(rc));
        goto fail;
    }
    atomic_fetch_add(&db->wal_corruptions, (uint64_t)rs.corruptions);
    atomic_fetch_add(&db->wal_corrupt_bytes, rs.corrupt_bytes);
    if (rs.corruptions)
        BDB_WARN("WAL: %d damaged place(s), %llu bytes cut: %s", rs.corruptions,
                 (unsigned long long)rs.corrupt_bytes, rs.first_error);
    BDB_INFO("recovered %llu devices, %llu series, %zu blocks; replayed %llu WAL records "
             "(%llu bytes, %llu segments) in %lld ms",
             (unsigned long long)atomic_load(&db->device_count),
             (unsigned long long)atomic_load(&db->series_count), db->nblocks,
             (unsigned long long)rs.records, (unsigned long long)rs.bytes,
             (unsigned long long)rs.segments, (long long)(bdb_monotonic_ms() - t0));
    /* sink: nothing replayed, so the sink's tier and fleet rows hold at least what the
     * local files hold (all of it on a new directory): reads use them at once */
    if (rs.records == 0 && db->o.sink)
        agg_sink_open_synced(db);
    db->last_flush_mono = bdb_monotonic_ms();
    db_space_open(db); /* after replay: a full disk still opens, refusing writes */
    if (opts->background) {
        if (pthread_create(&db->bg, NULL, db_background, db) != 0) {
            rc = BDB_ERR_NOMEM;
            goto fail;
        }
        db->bg_running = 1;
    }
    *out = db;
    return BDB_OK;
fail:
    db_free(db);
    return rc;
}

int bdb_db_close(bdb_db *db)
{
    if (!db)
        return BDB_OK;
    if (db->bg_running) {
        pthread_mutex_lock(&db->bg_mu);
        db->stopping = 1;
        pthread_cond_signal(&db->bg_cv);
        pthread_mutex_unlock(&db->bg_mu);
        pthread_join(db->bg, NULL);
        db->bg_running = 0;
    }
    int rc = BDB_OK;
    if (!atomic_load(&db->readonly))
        rc = db_flush(db);
    struct bdb_sink *sink = db->o.sink; /* sink: owned by the db, closed after it */
    db_free(db);
    if (sink)
        sink->ops->close(sink);
    return rc;
}

int bdb_db_flush(bdb_db *db)
{
    return db_flush(db);
}

int bdb_db_maintain(bdb_db *db)
{
    return db_maintain(db);
}
