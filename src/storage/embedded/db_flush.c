/* db_flush: head -> block files, compaction of a window's blocks, retention, and the
 * background thread that schedules them.
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
#include "storage/embedded/db_int.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tagged {
    int64_t ts;
    uint64_t prio, order;
    int64_t bucket;
    double v;
};

struct merger {
    struct tagged *t;
    size_t n, cap;
    int64_t *ts;
    double *v;
    size_t tn, tcap;
    bdb_buf enc;
};

static void merger_free(struct merger *m)
{
    free(m->t);
    free(m->ts);
    free(m->v);
    bdb_buf_free(&m->enc);
}

static void merger_add(struct merger *m, uint64_t prio, int64_t bucket)
{
    if (m->n + m->tn > m->cap) {
        size_t cap = (m->n + m->tn) * 2;
        struct tagged *p = realloc(m->t, cap * sizeof *p);
        if (!p)
            abort();
        m->t = p;
        m->cap = cap;
    }
    for (size_t i = 0; i < m->tn; i++)
        m->t[m->n++] = (struct tagged){m->ts[i], prio, i, bucket, m->v[i]};
    m->tn = 0;
}

static int tagged_cmp(const void *a, const void *b)
{
    const struct tagged *x = a, *y = b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    if (x->prio != y->prio)
        return x->prio > y->prio ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

/* Sorts and dedups the gathered samples and writes them as chunks of at most max
 * samples, one partition per chunk. */
static int merger_emit(struct merger *m, bdb_block_writer *w, const bdb_series_key *key,
                       uint32_t max)
{
    if (m->n > 1)
        qsort(m->t, m->n, sizeof *m->t, tagged_cmp);
    size_t k = 0;
    for (size_t i = 0; i < m->n; i++) {
        if (i > 0 && m->t[i].ts == m->t[i - 1].ts)
            continue;
        m->t[k++] = m->t[i];
    }
    m->n = k;
    int rc = BDB_OK;
    size_t i = 0;
    while (i < m->n && rc == BDB_OK) {
        size_t j = i;
        m->tn = 0;
        while (j < m->n && j - i < max && m->t[j].bucket == m->t[i].bucket) {
            if (m->tn == m->tcap) {
                size_t cap = m->tcap ? m->tcap * 2 : 256;
                int64_t *nt = realloc(m->ts, cap * sizeof *nt);
                double *nv = realloc(m->v, cap * sizeof *nv);
                if (!nt || !nv)
                    abort();
                m->ts = nt;
                m->v = nv;
                m->tcap = cap;
            }
            m->ts[m->tn] = m->t[j].ts;
            m->v[m->tn] = m->t[j].v;
            m->tn++;
            j++;
        }
        bdb_buf_reset(&m->enc);
        rc = bdb_chunk_encode(m->ts, m->v, m->tn, &m->enc);
        if (rc != BDB_OK)
            break;
        bdb_chunk_ref c = {.bucket_start = m->t[i].bucket,
                           .min_ts = m->ts[0],
                           .max_ts = m->ts[m->tn - 1],
                           .count = (uint32_t)m->tn,
                           .data = m->enc.data,
                           .len = m->enc.len};
        rc = bdb_block_writer_add(w, key, &c);
        i = j;
    }
    m->n = 0;
    m->tn = 0;
    return rc;
}

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

/* Caller holds blocks_lock exclusively (or is single-threaded at open). */
static void blocks_add(bdb_db *db, bdb_block *b, char *path)
{
    if (db->nblocks == db->cap_blocks) {
        db->cap_blocks = db->cap_blocks ? db->cap_blocks * 2 : 16;
        blockent *p = realloc(db->blocks, db->cap_blocks * sizeof *p);
        if (!p)
            abort();
        db->blocks = p;
    }
    db->blocks[db->nblocks++] = (blockent){b, path};
    qsort(db->blocks, db->nblocks, sizeof *db->blocks, block_cmp);
}

struct load_ctx {
    bdb_db *db;
    int rc;
};

static void quarantine(bdb_db *db, const char *path, const char *name, const char *why)
{
    char dst[4096];
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
    char path[4096];
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
    blocks_add(db, b, strdup(path));
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
    for (size_t i = 0; i < db->nblocks; i++) {
        bdb_block_close(db->blocks[i].b);
        free(db->blocks[i].path);
    }
    free(db->blocks);
    db->blocks = NULL;
    db->nblocks = db->cap_blocks = 0;
}

/* ---------------------------------------------------------------- writers per window */

struct wwin {
    int64_t start;
    bdb_block_writer *w;
    char name[64];
    uint64_t seq;
};

struct writers {
    struct wwin *v;
    size_t n;
};

static int writer_for(bdb_db *db, struct writers *ws, int64_t wstart, bdb_block_writer **out)
{
    for (size_t i = 0; i < ws->n; i++)
        if (ws->v[i].start == wstart) {
            *out = ws->v[i].w;
            return BDB_OK;
        }
    struct wwin *p = realloc(ws->v, (ws->n + 1) * sizeof *p);
    if (!p)
        abort();
    ws->v = p;
    struct wwin *x = &ws->v[ws->n];
    x->start = wstart;
    x->seq = db->next_seq++;
    snprintf(x->name, sizeof x->name, "%016" PRIu64 ".blk", x->seq);
    int rc = bdb_block_writer_open(db->vfs, db->blocks_dir, x->name, wstart,
                                   wstart + db->o.block_window_ms, x->seq, &x->w);
    if (rc != BDB_OK)
        return rc;
    ws->n++;
    *out = x->w;
    return BDB_OK;
}

/* Finishes every writer and publishes the blocks; on error aborts the rest. */
static int writers_finish(bdb_db *db, struct writers *ws, int rc)
{
    bdb_block **opened = calloc(ws->n + 1, sizeof *opened);
    char **paths = calloc(ws->n + 1, sizeof *paths);
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
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", db->blocks_dir, ws->v[i].name);
        rc = bdb_block_open(db->vfs, path, &opened[nopen]);
        if (rc == BDB_OK)
            paths[nopen++] = strdup(path);
    }
    if (rc == BDB_OK) {
        pthread_rwlock_wrlock(&db->blocks_lock);
        for (size_t i = 0; i < nopen; i++)
            blocks_add(db, opened[i], paths[i]);
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
            f->cap = f->cap ? f->cap * 2 : 1024;
            series **p = realloc(f->v, f->cap * sizeof *p);
            if (!p)
                abort();
            f->v = p;
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

static int series_cmp(const void *a, const void *b)
{
    bdb_series_key x, y;
    series_key(*(series *const *)a, &x);
    series_key(*(series *const *)b, &y);
    return bdb_series_key_cmp(&x, &y);
}

/* Writes the frozen chunks of one series: ranges in ascending time, each range's
 * chunks (continuations and side lists) merged with the newest write winning. */
static int flush_series(bdb_db *db, series *s, struct writers *ws, struct merger *m)
{
    size_t nc = 0;
    for (hchunk *c = s->frozen; c; c = c->next)
        nc++;
    hchunk **arr = malloc(nc * sizeof *arr);
    if (!arr)
        abort();
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
     * get a higher priority. */
    for (size_t a = 0; a < nc && rc == BDB_OK;) {
        size_t b = a;
        while (b < nc && arr[b]->lo == arr[a]->lo) {
            head_chunk_samples(arr[b], INT64_MIN, INT64_MAX, &m->ts, &m->v, &m->tn, &m->tcap);
            merger_add(m, (uint64_t)b + 1, arr[b]->bucket_start);
            b++;
        }
        bdb_block_writer *w;
        rc = writer_for(db, ws, bdb_align_down(arr[a]->lo, db->o.block_window_ms), &w);
        if (rc == BDB_OK)
            rc = merger_emit(m, w, &key, db->o.chunk_max_samples);
        a = b;
    }
    free(arr);
    return rc;
}

int db_flush(bdb_db *db)
{
    pthread_mutex_lock(&db->flush_mutex);
    if (atomic_load(&db->readonly)) {
        pthread_mutex_unlock(&db->flush_mutex);
        return BDB_ERR_READONLY;
    }
    int64_t t0 = bdb_monotonic_ms();
    struct freeze_ctx f = {db, NULL, 0, 0};
    bdb_buf cat;
    bdb_buf_init(&cat);
    uint64_t sealed = 0;

    pthread_rwlock_wrlock(&db->flush_lock);
    int rc = bdb_wal_cut(db->wal, &sealed);
    if (rc != BDB_OK) {
        pthread_rwlock_unlock(&db->flush_lock);
        db_set_readonly(db, rc, "WAL segment cut");
        pthread_mutex_unlock(&db->flush_mutex);
        return rc;
    }
    pthread_rwlock_rdlock(&db->cat_lock);
    cat_each_device(db, freeze_device, &f);
    uint64_t old_upto = db->wal_upto;
    db->wal_upto = sealed;
    cat_encode(db, &cat);
    db->wal_upto = old_upto;
    pthread_rwlock_unlock(&db->cat_lock);
    pthread_rwlock_unlock(&db->flush_lock);

    if (f.n > 1) /* f.v is NULL when nothing was frozen: qsort(NULL) is UB */
        qsort(f.v, f.n, sizeof *f.v, series_cmp);
    struct writers ws = {NULL, 0};
    struct merger m;
    memset(&m, 0, sizeof m);
    uint64_t nsamples = 0;
    for (size_t i = 0; i < f.n && rc == BDB_OK; i++)
        rc = flush_series(db, f.v[i], &ws, &m);
    size_t nblocks = ws.n;
    rc = writers_finish(db, &ws, rc);
    merger_free(&m);
    if (rc != BDB_OK) {
        /* The frozen chunks stay in memory and the WAL keeps them; the next flush
         * retries. Disk full lands here: writes are still acknowledged through the
         * WAL until it cannot grow either. */
        BDB_ERROR("flush failed: %s (%s); will retry", bdb_strerror(rc), strerror(errno));
        goto out;
    }
    rc = cat_save(db, &cat);
    if (rc != BDB_OK) {
        BDB_ERROR("catalog save failed: %s; WAL segments kept", bdb_strerror(rc));
    }
    for (size_t i = 0; i < f.n; i++) {
        series *s = f.v[i];
        pthread_mutex_lock(dev_lock(db, s->dev));
        hchunk *c = s->frozen;
        s->frozen = NULL;
        pthread_mutex_unlock(dev_lock(db, s->dev));
        for (hchunk *x = c; x; x = x->next)
            nsamples += x->app.count + x->nooo;
        head_free_chunks(db, c);
    }
    if (rc == BDB_OK) {
        db->wal_upto = sealed;
        rc = bdb_wal_remove_upto(db->wal, sealed);
    }
    atomic_fetch_add(&db->flushes, 1);
    BDB_INFO("flush: %zu series, %llu samples into %zu block(s) in %lld ms", f.n,
             (unsigned long long)nsamples, nblocks, (long long)(bdb_monotonic_ms() - t0));
out:
    db->last_flush_mono = bdb_monotonic_ms();
    free(f.v);
    bdb_buf_free(&cat);
    pthread_mutex_unlock(&db->flush_mutex);
    return rc;
}

/* ---------------------------------------------------------------- compaction */

/* Merges blocks [a, b) of db->blocks (one window) into one block. Caller holds
 * flush_mutex, so the block list changes only here while this runs. */
static int compact_window(bdb_db *db, size_t a, size_t b)
{
    size_t nb = b - a;
    blockent *in = malloc(nb * sizeof *in);
    if (!in)
        abort();
    memcpy(in, db->blocks + a, nb * sizeof *in);
    const bdb_block_meta *m0 = bdb_block_get_meta(in[0].b);
    const int64_t wstart = m0->window_start; /* m0 dies with in[0].b below */
    uint64_t seq = db->next_seq++;
    char name[64];
    snprintf(name, sizeof name, "%016" PRIu64 ".blk", seq);
    bdb_block_writer *w;
    int rc = bdb_block_writer_open(db->vfs, db->blocks_dir, name, m0->window_start, m0->window_end,
                                   seq, &w);
    if (rc != BDB_OK) {
        free(in);
        return rc;
    }
    bdb_block_iter *its = calloc(nb, sizeof *its);
    int *have = calloc(nb, sizeof *have);
    bdb_series_key *keys = calloc(nb, sizeof *keys);
    bdb_block_cursor *curs = calloc(nb, sizeof *curs);
    if (!its || !have || !keys || !curs)
        abort();
    struct merger m;
    memset(&m, 0, sizeof m);
    for (size_t i = 0; i < nb; i++) {
        bdb_block_iter_init(in[i].b, &its[i]);
        have[i] = bdb_block_iter_next(&its[i], &keys[i], &curs[i]);
        if (have[i] < 0) {
            rc = have[i];
            have[i] = 0;
        }
    }
    /* k-way merge over the blocks' sorted series tables */
    while (rc == BDB_OK) {
        ssize_t lo = -1;
        for (size_t i = 0; i < nb; i++)
            if (have[i] && (lo < 0 || bdb_series_key_cmp(&keys[i], &keys[lo]) < 0))
                lo = (ssize_t)i;
        if (lo < 0)
            break;
        bdb_series_key key = keys[lo];
        for (size_t i = 0; i < nb && rc == BDB_OK; i++) {
            if (!have[i] || bdb_series_key_cmp(&keys[i], &key) != 0)
                continue;
            uint64_t prio = bdb_block_get_meta(in[i].b)->seq;
            bdb_chunk_ref ref;
            int more;
            while (rc == BDB_OK && (more = bdb_block_cursor_next(&curs[i], &ref)) != 0) {
                if (more < 0) {
                    rc = more;
                    break;
                }
                bdb_chunk_iter it;
                rc = bdb_chunk_iter_init(&it, ref.data, ref.len);
                int64_t t;
                double v;
                int r;
                while (rc == BDB_OK && (r = bdb_chunk_iter_next(&it, &t, &v)) != 0) {
                    if (r < 0) {
                        rc = BDB_ERR_CORRUPT;
                        break;
                    }
                    if (m.tn == m.tcap) {
                        size_t cap = m.tcap ? m.tcap * 2 : 256;
                        int64_t *nt = realloc(m.ts, cap * sizeof *nt);
                        double *nv = realloc(m.v, cap * sizeof *nv);
                        if (!nt || !nv)
                            abort();
                        m.ts = nt;
                        m.v = nv;
                        m.tcap = cap;
                    }
                    m.ts[m.tn] = t;
                    m.v[m.tn] = v;
                    m.tn++;
                }
                merger_add(&m, prio, ref.bucket_start);
            }
        }
        if (rc == BDB_OK)
            rc = merger_emit(&m, w, &key, db->o.chunk_max_samples);
        /* Advance after emitting: key points into a block mapping that stays valid. */
        for (size_t i = 0; i < nb; i++) {
            if (!have[i] || bdb_series_key_cmp(&keys[i], &key) != 0)
                continue;
            have[i] = bdb_block_iter_next(&its[i], &keys[i], &curs[i]);
            if (have[i] < 0) {
                if (rc == BDB_OK)
                    rc = have[i];
                have[i] = 0;
            }
        }
    }
    merger_free(&m);
    free(its);
    free(have);
    free(keys);
    free(curs);
    if (rc != BDB_OK) {
        bdb_block_writer_abort(w);
        free(in);
        return rc;
    }
    bdb_block_meta meta;
    rc = bdb_block_writer_finish(w, &meta);
    bdb_block *nbk = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", db->blocks_dir, name);
    if (rc == BDB_OK)
        rc = bdb_block_open(db->vfs, path, &nbk);
    if (rc != BDB_OK) {
        free(in);
        return rc;
    }
    pthread_rwlock_wrlock(&db->blocks_lock);
    size_t k = 0;
    for (size_t i = 0; i < db->nblocks; i++) {
        int gone = 0;
        for (size_t j = 0; j < nb; j++)
            if (db->blocks[i].b == in[j].b)
                gone = 1;
        if (!gone)
            db->blocks[k++] = db->blocks[i];
    }
    db->nblocks = k;
    blocks_add(db, nbk, strdup(path));
    pthread_rwlock_unlock(&db->blocks_lock);
    for (size_t j = 0; j < nb; j++) {
        bdb_block_close(in[j].b);
        bdb_vfs_unlink(db->vfs, in[j].path);
        free(in[j].path);
    }
    bdb_vfs_sync_dir(db->vfs, db->blocks_dir);
    atomic_fetch_add(&db->compactions, 1);
    BDB_INFO("compaction: %zu blocks of window %lld merged into %s (%llu samples)", nb,
             (long long)wstart, name, (unsigned long long)meta.nsamples);
    free(in);
    return BDB_OK;
}

int db_maintain(bdb_db *db)
{
    pthread_mutex_lock(&db->flush_mutex);
    int rc = BDB_OK;
    if (atomic_load(&db->readonly)) {
        pthread_mutex_unlock(&db->flush_mutex);
        return BDB_ERR_READONLY;
    }
    /* Retention: whole windows only, never a rewrite. */
    if (db->o.retention_ms > 0) {
        int64_t cutoff = bdb_clock_now(&db->o.clock) - db->o.retention_ms;
        pthread_rwlock_wrlock(&db->blocks_lock);
        size_t k = 0;
        blockent *drop = malloc((db->nblocks + 1) * sizeof *drop);
        size_t nd = 0;
        for (size_t i = 0; i < db->nblocks; i++) {
            if (bdb_block_get_meta(db->blocks[i].b)->window_end <= cutoff)
                drop[nd++] = db->blocks[i];
            else
                db->blocks[k++] = db->blocks[i];
        }
        db->nblocks = k;
        pthread_rwlock_unlock(&db->blocks_lock);
        for (size_t i = 0; i < nd; i++) {
            BDB_INFO("retention: dropping %s", drop[i].path);
            bdb_block_close(drop[i].b);
            bdb_vfs_unlink(db->vfs, drop[i].path);
            free(drop[i].path);
            atomic_fetch_add(&db->retention_drops, 1);
        }
        if (nd)
            bdb_vfs_sync_dir(db->vfs, db->blocks_dir);
        free(drop);
    }
    /* Compaction: every window with more than one block. Only this thread (under
     * flush_mutex) changes the list, so indexes stay valid without blocks_lock. */
    for (size_t a = 0; a < db->nblocks;) {
        const bdb_block_meta *ma = bdb_block_get_meta(db->blocks[a].b);
        int64_t ws = ma->window_start, we = ma->window_end;
        size_t b = a + 1;
        while (b < db->nblocks && bdb_block_get_meta(db->blocks[b].b)->window_start == ws &&
               bdb_block_get_meta(db->blocks[b].b)->window_end == we)
            b++;
        if (b - a > 1) {
            int crc = compact_window(db, a, b);
            if (crc != BDB_OK) {
                /* Keep going: one bad window must not stop the others' compaction. */
                BDB_ERROR("compaction of window %lld failed: %s", (long long)ws, bdb_strerror(crc));
                rc = crc;
                a = b;
                continue;
            }
            /* the list changed: resume after this window */
            a = 0;
            while (a < db->nblocks && (bdb_block_get_meta(db->blocks[a].b)->window_start < ws ||
                                       (bdb_block_get_meta(db->blocks[a].b)->window_start == ws &&
                                        bdb_block_get_meta(db->blocks[a].b)->window_end <= we)))
                a++;
            continue;
        }
        a = b;
    }
    pthread_mutex_unlock(&db->flush_mutex);
    return rc;
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
        if (!atomic_load(&db->readonly) && (now - db->last_flush_mono >= db->o.flush_interval_ms ||
                                            atomic_load(&db->head_bytes) > db->o.head_max_bytes))
            db_flush(db);
        if (!atomic_load(&db->readonly) && now - last_maint >= 30000) {
            db_maintain(db);
            last_maint = bdb_monotonic_ms();
        }
        pthread_mutex_lock(&db->bg_mu);
    }
    pthread_mutex_unlock(&db->bg_mu);
    return NULL;
}
