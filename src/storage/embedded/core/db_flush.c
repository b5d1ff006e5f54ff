/* db_flush: head -> block files, the block list, and the background thread that
 * schedules flushes and maintenance (compaction and retention are in db_compact.c).
 *
 * Flush protocol (crash-safe at every step):
 *  1. Under flush_lock (exclusive): cut the WAL (segments <= S are sealed), move every
 *     series' active chunks to its frozen list, and encode the catalog with wal_upto=S.
 *  2. Without blocking writers: write one block per window touched by the frozen
 *     chunks (tmp + fsync + rename + dir fsync), open them, publish them in the block
 *     list.
 *  3. Save the catalog (atomic rename). Free the frozen chunks. Delete segments <= S.
 * A crash before 3 leaves the old catalog, so replay starts below S and re-applies
 * samples that are also in the new blocks; reads resolve such duplicates (same series
 * and time) to one sample, so nothing is lost or doubled. */
#include "storage/embedded/core/db_consumer.h"
#include "storage/embedded/core/db_int.h"
#include "storage/embedded/core/db_space.h" /* disk reserve */
#include "common/alloc.h"
#include "common/path.h"
#include "storage/sink.h" /* sink: flush through db->o.sink */

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "storage/embedded/sink/db_state_sink.h" /* sink: state, registry, counts */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- block list */

static int block_cmp(const void *a, const void *b)
{
    const bdb_block_meta *x = bdb_block_get_meta(((const blockent *)a)->b);
    const bdb_block_meta *y = bdb_block_get_meta(((const blockent *)b)->b);
    if (x->window_start != y->window_start)
        return x->window_start < y->window_start ? -1 : 1;
    /* Blocks written under another block_window_ms sit apart from this window's. */
    if (x->window_end != y->window_end)
        return x->window_end < y->window_end ? -1 : 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* Room for n more entries in the block list (flush_mutex held): BDB_OK or
 * BDB_ERR_NOMEM. Growing needs blocks_lock: readers hold the array. */
int db_blocks_reserve(bdb_db *db, size_t n)
{
    if (db->cap_blocks - db->nblocks >= n)
        return BDB_OK;
    size_t cap = db->cap_blocks ? db->cap_blocks * 2 : 16;
    while (cap - db->nblocks < n)
        cap *= 2;
    pthread_rwlock_wrlock(&db->blocks_lock);
    blockent *p = bdb_realloc(db->blocks, cap * sizeof *p);
    if (p) {
        db->blocks = p;
        db->cap_blocks = cap;
    }
    pthread_rwlock_unlock(&db->blocks_lock);
    return p ? BDB_OK : BDB_ERR_NOMEM;
}

/* Caller holds blocks_lock exclusively (or is single-threaded at open) and made room
 * with db_blocks_reserve, or is opening (then out of memory is BDB_ERR_NOMEM). */
int db_blocks_add(bdb_db *db, bdb_block *b, char *path, int64_t cls)
{
    if (db->nblocks == db->cap_blocks) {
        size_t cap = db->cap_blocks ? db->cap_blocks * 2 : 16;
        blockent *p = bdb_realloc(db->blocks, cap * sizeof *p);
        if (!p)
            return BDB_ERR_NOMEM;
        db->blocks = p;
        db->cap_blocks = cap;
    }
    db->blocks[db->nblocks++] = (blockent){b, path, NULL, 0, cls};
    const bdb_block_meta *bm = bdb_block_get_meta(b);
    if (bm->window_end - bm->window_start > db->max_block_span) /* db_blocks_from */
        db->max_block_span = bm->window_end - bm->window_start;
    qsort(db->blocks, db->nblocks, sizeof *db->blocks, block_cmp);
    return BDB_OK;
}

struct load_ctx {
    bdb_db *db;
    int rc;
};

static void quarantine(bdb_db *db, const char *path, const char *name, const char *why)
{
    char dst[BDB_PATH_BUF];
    snprintf(dst, sizeof dst, "%s/%s", db->quarantine_dir, name);
    BDB_ERROR("block %s is damaged (%s); moved to %s and not read", path, why, dst);
    if (bdb_vfs_rename(db->vfs, path, dst) == BDB_OK)
        bdb_vfs_sync_dir(db->vfs, db->blocks_dir);
    atomic_fetch_add(&db->quarantined, 1);
}

static int load_one(void *ctx, const char *name)
{
    struct load_ctx *lc = ctx;
    bdb_db *db = lc->db;
    size_t n = strlen(name);
    char path[BDB_PATH_BUF];
    snprintf(path, sizeof path, "%s/%s", db->blocks_dir, name);
    if (n > 4 && strcmp(name + n - 4, ".tmp") == 0) {
        /* An unfinished write from before a crash: never published, safe to drop. */
        bdb_vfs_unlink(db->vfs, path);
        return 0;
    }
    if (n <= 4 || strcmp(name + n - 4, ".blk") != 0)
        return 0;
    unsigned long long seq = strtoull(name, NULL, 10);
    if (seq >= db->next_seq)
        db->next_seq = seq + 1;
    bdb_block *b;
    int rc = bdb_block_open(db->vfs, path, &b);
    if (rc == BDB_ERR_CORRUPT) {
        quarantine(db, path, name, "failed validation");
        return 0;
    }
    if (rc != BDB_OK) {
        BDB_ERROR("cannot open block %s: %s", path, bdb_strerror(rc));
        lc->rc = rc;
        return 1;
    }
    if (bdb_block_get_meta(b)->seq >= db->next_seq)
        db->next_seq = bdb_block_get_meta(b)->seq + 1;
    char *p = bdb_strdup(path);
    if (!p || db_blocks_add(db, b, p, DB_CLS_UNKNOWN) != BDB_OK) {
        free(p);
        bdb_block_close(b);
        lc->rc = BDB_ERR_NOMEM;
        return 1;
    }
    return 0;
}

int db_blocks_load(bdb_db *db)
{
    struct load_ctx lc = {db, BDB_OK};
    int rc = bdb_vfs_list(db->vfs, db->blocks_dir, load_one, &lc);
    return rc != BDB_OK ? rc : lc.rc;
}

void db_blocks_close(bdb_db *db)
{
    for (size_t i = 0; i < db->nblocks; i++)
        db_blockent_free(&db->blocks[i]);
    free(db->blocks);
    db->blocks = NULL;
    db->nblocks = db->cap_blocks = 0;
}

/* ---------------------------------------------------------------- writers per window */

/* One writer per (window, TTL class): tenants with different TTLs never share a file,
 * so retention can delete whole files (db_compact.c). */
int db_writer_for(bdb_db *db, db_writers *ws, int64_t wstart, int64_t wend, int64_t cls,
                  bdb_block_writer **out)
{
    for (size_t i = 0; i < ws->n; i++)
        if (ws->v[i].start == wstart && ws->v[i].cls == cls) {
            *out = ws->v[i].w;
            return BDB_OK;
        }
    struct db_wwin *p = bdb_realloc(ws->v, (ws->n + 1) * sizeof *p);
    if (!p)
        return BDB_ERR_NOMEM;
    ws->v = p;
    struct db_wwin *x = &ws->v[ws->n];
    x->start = wstart;
    x->cls = cls;
    x->seq = db->next_seq++;
    snprintf(x->name, sizeof x->name, "%016" PRIu64 ".blk", x->seq);
    int rc = bdb_block_writer_open(db->vfs, db->blocks_dir, x->name, wstart, wend, x->seq, &x->w);
    if (rc != BDB_OK)
        return rc;
    ws->n++;
    *out = x->w;
    return BDB_OK;
}

int db_writers_finish(bdb_db *db, db_writers *ws, int rc, bdb_block *const *gone, size_t ngone)
{
    bdb_block **opened = bdb_calloc(ws->n + 1, sizeof *opened);
    char **paths = bdb_calloc(ws->n + 1, sizeof *paths);
    int64_t *cls = bdb_calloc(ws->n + 1, sizeof *cls);
    if ((!opened || !paths || !cls) && rc == BDB_OK)
        rc = BDB_ERR_NOMEM; /* every writer is aborted below, nothing published */
    /* The block list grows before any block is published, so publishing cannot fail. */
    if (rc == BDB_OK && db_blocks_reserve(db, ws->n) != BDB_OK)
        rc = BDB_ERR_NOMEM;
    size_t nopen = 0;
    for (size_t i = 0; i < ws->n; i++) {
        if (rc != BDB_OK) {
            bdb_block_writer_abort(ws->v[i].w);
            continue;
        }
        bdb_block_meta meta;
        rc = bdb_block_writer_finish(ws->v[i].w, &meta);
        if (rc != BDB_OK)
            continue;
        char path[BDB_PATH_BUF];
        snprintf(path, sizeof path, "%s/%s", db->blocks_dir, ws->v[i].name);
        rc = bdb_block_open(db->vfs, path, &opened[nopen]);
        if (rc == BDB_OK) {
            cls[nopen] = ws->v[i].cls;
            paths[nopen] = bdb_strdup(path);
            if (!paths[nopen]) {
                bdb_block_close(opened[nopen]);
                bdb_vfs_unlink(db->vfs, path);
                rc = BDB_ERR_NOMEM;
                continue;
            }
            nopen++;
        }
    }
    if (rc == BDB_OK) {
        pthread_rwlock_wrlock(&db->blocks_lock);
        if (ngone) {
            size_t k = 0;
            for (size_t i = 0; i < db->nblocks; i++) {
                int g = 0;
                for (size_t j = 0; j < ngone && !g; j++)
                    g = db->blocks[i].b == gone[j];
                if (!g)
                    db->blocks[k++] = db->blocks[i];
            }
            db->nblocks = k;
        }
        for (size_t i = 0; i < nopen; i++)
            db_blocks_add(db, opened[i], paths[i], cls[i]);
        pthread_rwlock_unlock(&db->blocks_lock);
    } else {
        for (size_t i = 0; i < nopen; i++) {
            bdb_block_close(opened[i]);
            bdb_vfs_unlink(db->vfs, paths[i]);
            free(paths[i]);
        }
    }
    free(opened);
    free(paths);
    free(cls);
    free(ws->v);
    ws->v = NULL;
    ws->n = 0;
    return rc;
}

/* ---------------------------------------------------------------- flush */

struct freeze_ctx {
    bdb_db *db;
    series **v;
    size_t n, cap;
    int oom;
};

static void freeze_device(void *ctx, device *d)
{
    struct freeze_ctx *f = ctx;
    pthread_mutex_lock(dev_lock(f->db, d));
    for (uint32_t i = 0; i < d->nseries; i++) {
        series *s = d->series[i];
        if (!s->active && !s->frozen)
            continue;
        if (s->active) {
            /* A frozen list left by a failed flush is older than the active one. */
            hchunk *tail = s->active;
            while (tail->next)
                tail = tail->next;
            tail->next = s->frozen;
            s->frozen = s->active;
            s->active = NULL;
        }
        if (f->n == f->cap) {
            size_t cap = f->cap ? f->cap * 2 : 1024;
            series **p = bdb_realloc(f->v, cap * sizeof *p);
            if (!p) {
                /* frozen but not in the list: this flush must fail as a whole, so the
                 * WAL keeps it; the next flush freezes it again */
                f->oom = 1;
                continue;
            }
            f->v = p;
            f->cap = cap;
        }
        f->v[f->n++] = s;
    }
    pthread_mutex_unlock(dev_lock(f->db, d));
}

static void series_key(const series *s, bdb_series_key *k)
{
    k->tenant = s->dev->tenant->name;
    k->tenant_len = strlen(s->dev->tenant->name);
    k->device = s->dev->name;
    k->device_len = s->dev->nlen;
    k->metric = s->metric;
    k->metric_len = s->mlen;
}

static int name_cmp(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

/* The order of bdb_series_key_cmp (tenant, device, metric, each bytewise), which the
 * block writer requires. The flush sorts every frozen series with it (2 M series: 8%
 * of a headmem run's CPU when it built both keys per comparison): series of one
 * device share their device, and devices of one tenant their tenant, so those
 * names are compared only when they differ. */
static int series_cmp(const void *a, const void *b)
{
    const series *x = *(series *const *)a, *y = *(series *const *)b;
    if (x->dev != y->dev) {
        const tenant *tx = x->dev->tenant, *ty = y->dev->tenant;
        if (tx != ty) {
            int c = strcmp(tx->name, ty->name); /* NUL-free names: bytewise, shorter first */
            if (c)
                return c;
        }
        return name_cmp(x->dev->name, x->dev->nlen, y->dev->name, y->dev->nlen);
    }
    return name_cmp(x->metric, x->mlen, y->metric, y->mlen);
}

/* Writes the frozen chunks of one series: ranges in ascending time, each range's
 * chunks (continuations and side lists) merged with the newest write winning. */
static int flush_series(bdb_db *db, series *s, db_writers *ws, db_merger *m, int64_t cls)
{
    size_t nc = 0;
    for (hchunk *c = s->frozen; c; c = c->next)
        nc++;
    hchunk **arr = bdb_malloc((nc ? nc : 1) * sizeof *arr);
    if (!arr)
        return BDB_ERR_NOMEM;
    size_t i = nc;
    for (hchunk *c = s->frozen; c; c = c->next)
        arr[--i] = c; /* oldest first */
    /* After a failed flush the list is active + old frozen and may not be in range
     * order; a stable sort by range restores it (insertion sort: lists are short). */
    for (size_t x = 1; x < nc; x++) {
        hchunk *c = arr[x];
        size_t y = x;
        while (y > 0 && arr[y - 1]->lo > c->lo) {
            arr[y] = arr[y - 1];
            y--;
        }
        arr[y] = c;
    }
    bdb_series_key key;
    series_key(s, &key);
    int rc = BDB_OK;
    /* Equal ranges are now side by side, older continuations first; later chunks
     * get a higher priority. Ranges of one series never overlap unless a damaged WAL
     * record rewrote the device's bucket history under samples already in the head;
     * overlapping ranges are merged as one, so that the chunks still reach the writer
     * in time order (it refuses anything else, and the flush would fail for good). */
    for (size_t a = 0; a < nc && rc == BDB_OK;) {
        size_t b = a;
        int64_t hi = hc_hi(arr[a]);
        while (b < nc && arr[b]->lo < hi) {
            if (hc_hi(arr[b]) > hi)
                hi = hc_hi(arr[b]);
            db_merger_add_head(m, arr[b], INT64_MIN, INT64_MAX, (uint64_t)b + 1, hc_bucket(arr[b]));
            b++;
        }
        bdb_block_writer *w;
        int64_t wstart = bdb_align_down(arr[a]->lo, db->o.block_window_ms);
        rc = db_writer_for(db, ws, wstart, wstart + db->o.block_window_ms, cls, &w);
        if (rc == BDB_OK)
            rc = db_merger_emit(m, w, &key, db->o.chunk_max_samples);
        a = b;
    }
    free(arr);
    return rc;
}

/* The system error of the step that failed first: cleanup after it (unlinking files
 * never written) changes errno, and the log must name the cause. */
static void first_errno(int rc, int *err)
{
    if (rc != BDB_OK && !*err)
        *err = rc == BDB_ERR_NOSPACE ? ENOSPC : rc == BDB_ERR_IO ? errno : -1;
}

static int flush_once(bdb_db *db)
{
    pthread_mutex_lock(&db->flush_mutex);
    if (atomic_load(&db->readonly)) {
        pthread_mutex_unlock(&db->flush_mutex);
        return BDB_ERR_READONLY;
    }
    int64_t t0 = bdb_monotonic_ms();
    struct freeze_ctx f = {db, NULL, 0, 0};
    bdb_buf cat;
    bdb_buf_init_checked(&cat);
    uint64_t sealed = 0;

    pthread_rwlock_wrlock(&db->flush_lock);
    int rc = bdb_wal_cut(db->wal, &sealed);
    if (rc != BDB_OK) {
        pthread_rwlock_unlock(&db->flush_lock);
        if (rc != BDB_ERR_NOMEM) /* out of memory: nothing changed, the next flush retries */
            db_set_readonly(db, rc, "WAL segment cut");
        pthread_mutex_unlock(&db->flush_mutex);
        return rc;
    }
    pthread_rwlock_rdlock(&db->cat_lock);
    cat_each_device(db, freeze_device, &f);
    int lrc = db_consumers_freeze(db);
    uint64_t old_upto = db->wal_upto;
    db->wal_upto = sealed;
    cat_encode(db, &cat);
    db->wal_upto = old_upto;
    pthread_rwlock_unlock(&db->cat_lock);
    pthread_rwlock_unlock(&db->flush_lock);
    if (f.oom || cat.oom || lrc != BDB_OK) /* out of memory: fails below, all kept */
        rc = BDB_ERR_NOMEM;
    /* The catalog is kept compressed until its save: its image (about 21 bytes per
     * series) would otherwise count in the flush's peak beside the frozen head. */
    size_t cat_len = cat.len;
    bdb_buf catz;
    bdb_buf_init_checked(&catz);
    if (rc == BDB_OK)
        rc = bdb_zstd_frame(cat.data, cat.len, CAT_ZSTD_LEVEL, &catz);
    bdb_buf_free(&cat);

    if (f.n > 1) /* f.v is NULL when nothing was frozen: qsort(NULL) is UB */
        qsort(f.v, f.n, sizeof *f.v, series_cmp);
    db_writers ws = {NULL, 0};
    db_merger m;
    memset(&m, 0, sizeof m);
    uint64_t nsamples = 0;
    const tenant *last = NULL;
    int64_t cls = 0;
    for (size_t i = 0; i < f.n && rc == BDB_OK; i++) {
        /* Series are in key order, so the tenant's TTL is looked up once per tenant. */
        if (f.v[i]->dev->tenant != last) {
            last = f.v[i]->dev->tenant;
            cls = db_tenant_ttl(db, last->name);
        }
        rc = db->o.sink ? db_sink_flush_series(db, f.v[i], &m, cls) /* sink: db_sink.c */
                        : flush_series(db, f.v[i], &ws, &m, cls);
    }
    int err = 0;
    first_errno(rc, &err);
    uint64_t ss_round; /* sink: state, registry, counts (db_state_sink.c) */
    rc = db_ss_flush(db, rc, &ss_round);
    if (db->o.sink) { /* sink: every put confirmed before the head and WAL let go */
        int crc = db->o.sink->ops->commit(db->o.sink);
        if (rc == BDB_OK)
            rc = crc;
    }
    first_errno(rc, &err);
    size_t nblocks = ws.n;
    rc = db_writers_finish(db, &ws, rc, NULL, 0);
    first_errno(rc, &err);
    db_merger_free(&m);
    /* what follows the flush (fleet tables, tiers, sink usage), from the frozen series */
    rc = db_consumers_flush(db, f.v, f.n, sealed, rc);
    first_errno(rc, &err);
    if (rc != BDB_OK) {
        /* The frozen chunks stay in memory and the WAL keeps them; the next flush
         * retries. Disk full lands here: writes are still acknowledged through the
         * WAL until it cannot grow either (or until db_flush gives the flush the disk
         * reserve). Every step above removed the files it had written. */
        BDB_ERROR("flush failed: %s (%s); will retry", bdb_strerror(rc),
                  err > 0 ? strerror(err) : "no system error");
        goto out;
    }
    db_ss_sent(db, ss_round); /* sink: those state changes are confirmed */
    rc = cat_save(db, cat_len, &catz);
    bdb_buf_free(&catz); /* before the commit phase builds its own images */
    if (rc != BDB_OK) {
        BDB_ERROR("catalog save failed: %s; WAL segments kept", bdb_strerror(rc));
    }
    if (rc == BDB_OK) /* e.g. the current-state index file, before the WAL segments go */
        rc = db_consumers_commit(db, sealed);
    for (size_t i = 0; i < f.n; i++) {
        series *s = f.v[i];
        pthread_mutex_lock(dev_lock(db, s->dev));
        hchunk *c = s->frozen;
        s->frozen = NULL;
        pthread_mutex_unlock(dev_lock(db, s->dev));
        for (hchunk *x = c; x; x = x->next)
            nsamples += x->st.count + hc_nooo(x);
        head_free_chunks(db, c);
    }
    if (rc == BDB_OK) {
        db->wal_upto = sealed;
        /* The flush is committed: the catalog (with wal_upto) and the state index are
         * synced. Segments left behind are at or below wal_upto, so a reopen does not
         * replay them, and they stay listed, so the next flush removes them: a failure
         * here is not a failed flush. */
        int trc = bdb_wal_remove_upto(db->wal, sealed);
        if (trc != BDB_OK)
            BDB_WARN("flush committed, but removing WAL segments up to %llu failed: %s (%s); "
                     "the next flush retries",
                     (unsigned long long)sealed, bdb_strerror(trc), strerror(errno));
    }
    atomic_fetch_add(&db->flushes, 1);
    uint64_t failed = atomic_exchange(&db->flush_fail_streak, 0);
    if (failed)
        BDB_INFO("flush: succeeded again after %llu failed flush(es) in a row",
                 (unsigned long long)failed);
    atomic_store(&db->flush_failing_since, 0);
    BDB_INFO("flush: %zu series, %llu samples into %zu block(s) in %lld ms", f.n,
             (unsigned long long)nsamples, nblocks, (long long)(bdb_monotonic_ms() - t0));
out:
    if (rc != BDB_OK) {
        /* The error and the start time before the streak: a reader (bdb_db_get_stats
         * loads the streak first) that sees a streak sees them too. Flushes are
         * serialized by flush_mutex, so only readers race with this. */
        atomic_fetch_add(&db->flush_failures, 1);
        atomic_store(&db->flush_last_error, rc);
        if (atomic_load(&db->flush_fail_streak) == 0)
            atomic_store(&db->flush_failing_since, bdb_clock_now(&db->o.clock));
        atomic_fetch_add(&db->flush_fail_streak, 1);
    }
    db->last_flush_mono = bdb_monotonic_ms();
    free(f.v);
    bdb_buf_free(&catz);
    pthread_mutex_unlock(&db->flush_mutex);
    return rc;
}

/* A flush that fails for lack of space gets the disk reserve and one retry at once:
 * the reserve is the room its blocks and tier files need while the WAL still exists
 * (db_space.h). Writes stay refused until the reserve is made again. */
int db_flush(bdb_db *db)
{
    int rc = flush_once(db);
    if (rc == BDB_ERR_NOSPACE && db_space_release(db)) {
        rc = flush_once(db);
        if (rc == BDB_OK)
            BDB_INFO("flush: succeeded with the disk reserve's room");
    }
    if (rc == BDB_OK)
        db_space_tight(db); /* arms the write path's next early flush */
    if (rc == BDB_OK && db_space_restore(db) != BDB_OK)
        BDB_WARN("disk reserve: cannot make %llu bytes yet (%llu bytes free); writes stay "
                 "refused, retried every second",
                 (unsigned long long)db->o.disk_reserve_bytes,
                 (unsigned long long)db_space_free(db));
    return rc;
}

/* When the background thread flushes next. A flush that failed for lack of space is
 * retried after 1, 2, 4 ... 32 s (never later than the flush interval), so the server
 * recovers by itself soon after space returns; other failures wait for the interval,
 * as a sink that refuses rows should not be hammered. Short of space, a flush starts
 * before the WAL outgrows half the free space (db_space_tight). */
static int flush_due(bdb_db *db, int64_t now)
{
    int64_t since = now - db->last_flush_mono;
    uint64_t streak = atomic_load(&db->flush_fail_streak);
    if (streak && atomic_load(&db->flush_last_error) == BDB_ERR_NOSPACE) {
        int64_t wait = INT64_C(1000) << (streak > 6 ? 5 : streak - 1);
        return since >= (wait < db->o.flush_interval_ms ? wait : db->o.flush_interval_ms);
    }
    if (since >= db->o.flush_interval_ms || atomic_load(&db->head_bytes) > db->o.head_max_bytes)
        return 1;
    return !streak && db_space_tight(db);
}

void *db_background(void *arg)
{
    bdb_db *db = arg;
    int64_t last_maint = bdb_monotonic_ms();
    pthread_mutex_lock(&db->bg_mu);
    while (!db->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&db->bg_cv, &db->bg_mu, &ts);
        if (db->stopping)
            break;
        pthread_mutex_unlock(&db->bg_mu);
        int64_t now = bdb_monotonic_ms();
        if (!atomic_load(&db->readonly) && flush_due(db, now))
            db_flush(db);
        /* a reserve given to a flush that then failed, or missing since open: made
         * again once a flush has succeeded and the disk has the room */
        if (atomic_load(&db->space_low) && !atomic_load(&db->flush_fail_streak))
            db_space_restore(db);
        if (!atomic_load(&db->readonly) && now - last_maint >= 30000) {
            db_maintain(db);
            last_maint = bdb_monotonic_ms();
        }
        pthread_mutex_lock(&db->bg_mu);
    }
    pthread_mutex_unlock(&db->bg_mu);
    return NULL;
}
