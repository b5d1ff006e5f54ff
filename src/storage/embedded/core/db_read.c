/* db_read: partition reads, device listings and statistics of the embedded engine. */
#include "storage/embedded/core/db_int.h"
#include "storage/embedded/core/db_space.h"      /* free bytes */
#include "storage/embedded/sink/db_state_sink.h" /* sink: renamed readers */
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bdb_samples_free(bdb_samples *s)
{
    free(s->ts);
    free(s->v);
    memset(s, 0, sizeof *s);
}

static device *find_device(bdb_db *db, const char *tn, const char *dn)
{
    pthread_rwlock_rdlock(&db->cat_lock);
    tenant *t = cat_tenant(db, tn, strlen(tn), 0);
    device *d = t ? cat_device(db, t, dn, strlen(dn), 0) : NULL;
    pthread_rwlock_unlock(&db->cat_lock);
    return d;
}

int bdb_db_device_snapshot(bdb_db *db, const char *tn, const char *dn, bdb_device_snapshot *out)
{
    memset(out, 0, sizeof *out);
    device *d = find_device(db, tn, dn);
    if (!d)
        return BDB_ERR_NOTFOUND;
    pthread_mutex_lock(dev_lock(db, d));
    int rc = bdb_bucket_history_copy(&out->hist, &d->hist);
    out->first_ts = d->first_ts;
    out->last_ts = d->last_ts;
    out->metrics = bdb_calloc(d->nseries + 1, sizeof *out->metrics);
    if (!out->metrics)
        rc = BDB_ERR_NOMEM;
    for (uint32_t i = 0; i < d->nseries && rc == BDB_OK; i++) {
        out->metrics[i] = bdb_strdup(d->series[i]->metric);
        out->nmetrics = i + 1; /* what bdb_device_snapshot_free frees */
        if (!out->metrics[i])
            rc = BDB_ERR_NOMEM;
    }
    pthread_mutex_unlock(dev_lock(db, d));
    if (rc != BDB_OK) /* never a partial snapshot */
        bdb_device_snapshot_free(out);
    return rc;
}

int bdb_db_device_newest(bdb_db *db, const char *tn, const char *dn, int64_t *newest)
{
    device *d = find_device(db, tn, dn);
    if (!d)
        return BDB_ERR_NOTFOUND;
    if (db->o.sink) {
        *newest = INT64_MAX;
        return BDB_OK;
    }
    pthread_mutex_lock(dev_lock(db, d));
    *newest = d->last_ts;
    pthread_mutex_unlock(dev_lock(db, d));
    return BDB_OK;
}

void bdb_device_snapshot_free(bdb_device_snapshot *s)
{
    bdb_bucket_history_free(&s->hist);
    for (size_t i = 0; i < s->nmetrics; i++)
        free(s->metrics[i]);
    free(s->metrics);
    memset(s, 0, sizeof *s);
}

/* sink: one sample from db_sink_read, pushed into its metric's merger */
static void sink_add(void *ud, size_t m, int64_t t, double v)
{
    db_merger_push(&((db_merger *)ud)[m], t, v); /* out of memory fails the read */
}

int bdb_db_read(bdb_db *db, const char *tn, const char *dn, const char *const *metrics,
                size_t nmetrics, int64_t lo, int64_t hi, bdb_samples *out, uint64_t *chunks)
{
    device *d = find_device(db, tn, dn);
    if (!d)
        return BDB_ERR_NOTFOUND;
    /* Expired samples are never returned, even before maintenance deletes their file. */
    int64_t cutoff = bdb_db_retention_cutoff(db, tn);
    if (lo < cutoff)
        lo = cutoff;
    if (lo >= hi) {
        for (size_t m = 0; m < nmetrics; m++)
            out[m].n = 0;
        return BDB_OK;
    }
    db_merger *g = bdb_calloc(nmetrics ? nmetrics : 1, sizeof *g);
    if (!g)
        return BDB_ERR_NOMEM;
    uint64_t nchunks = 0;
    int rc = BDB_OK;

    /* Head first, blocks second: a flush publishes its blocks before it frees the
     * frozen head, so a sample missing from the head when we look is already in a
     * published block when we look there (see db_flush). */
    /* the read cache (db_rcache.c): units of [lo, hi) the head has no chunk in */
    int64_t U = db->o.block_window_ms, first = 0;
    size_t nunits = 0;
    int cached = db_cache_units(db, lo, hi, &first, &nunits) && !db->o.sink;
    int64_t busy_local[16], *busy = busy_local;
    size_t nbusy = 0, capbusy = 8;
    pthread_mutex_lock(dev_lock(db, d));
    for (size_t m = 0; m < nmetrics; m++) {
        series *s = cat_series(db, d, metrics[m], strlen(metrics[m]), 0);
        if (!s)
            continue;
        hchunk *lists[2] = {s->active, s->frozen};
        for (int l = 0; l < 2; l++) {
            uint64_t prio = l == 0 ? UINT64_MAX : UINT64_MAX / 2;
            for (hchunk *c = lists[l]; c; c = c->next, prio--) {
                if (hc_hi(c) <= lo || c->lo >= hi)
                    continue;
                db_merger_add_head(&g[m], c, lo, hi, prio, 0);
                nchunks++;
                if (cached && nbusy == capbusy) {
                    int64_t *nb = bdb_malloc(capbusy * 4 * sizeof *nb);
                    if (nb)
                        memcpy(nb, busy, nbusy * 2 * sizeof *nb);
                    if (busy != busy_local)
                        free(busy);
                    busy = nb;
                    capbusy *= 2;
                    cached = nb != NULL;
                    if (!nb)
                        busy = busy_local; /* no cache for this read */
                }
                if (cached) {
                    busy[2 * nbusy] = c->lo;
                    busy[2 * nbusy + 1] = hc_hi(c);
                    nbusy++;
                }
            }
        }
    }
    pthread_mutex_unlock(dev_lock(db, d));

    pthread_rwlock_rdlock(&db->blocks_lock);
    /* only where every block of the range is one whole unit: a block that is not (a
     * block_window_ms changed since) is read as without the cache */
    size_t b0 = db_blocks_from(db, lo); /* before it, every block ends by lo */
    for (size_t bi = b0; bi < db->nblocks && cached; bi++) {
        const bdb_block_meta *bm = bdb_block_get_meta(db->blocks[bi].b);
        if (bm->window_start >= hi)
            break; /* sorted by window start */
        if (bm->window_end <= lo)
            continue;
        cached = bm->window_end - bm->window_start == U &&
                 bdb_align_down(bm->window_start, U) == bm->window_start;
    }
    uint8_t *served = cached ? bdb_calloc(nmetrics * nunits + 1, 1) : NULL;
    for (size_t m = 0; m < nmetrics && served; m++) {
        bdb_series_key key = {tn, strlen(tn), dn, strlen(dn), metrics[m], strlen(metrics[m])};
        db_raw_units(db, &key, lo, hi, busy, nbusy, &g[m], served + m * nunits, &nchunks);
    }
    if (busy != busy_local)
        free(busy);
    for (size_t bi = b0; bi < db->nblocks && rc == BDB_OK; bi++) {
        const bdb_block_meta *bm = bdb_block_get_meta(db->blocks[bi].b);
        if (bm->window_start >= hi)
            break;
        if (bm->window_end <= lo)
            continue;
        for (size_t m = 0; m < nmetrics && rc == BDB_OK; m++) {
            if (served && served[m * nunits + (size_t)((bm->window_start - first) / U)])
                continue; /* from the cache */
            bdb_series_key key = {tn, strlen(tn), dn, strlen(dn), metrics[m], strlen(metrics[m])};
            bdb_block_cursor cur;
            int r = bdb_block_find(db->blocks[bi].b, &key, &cur);
            if (r == BDB_ERR_NOTFOUND)
                continue;
            bdb_chunk_ref c;
            while (r == BDB_OK && (r = bdb_block_cursor_next(&cur, &c)) == 1) {
                r = BDB_OK;
                if (c.max_ts < lo || c.min_ts >= hi)
                    continue;
                db_merger_source(&g[m], bm->seq, 0);
                if ((r = db_merger_push_chunk(&g[m], &c, lo, hi)) != BDB_OK)
                    break;
                nchunks++;
            }
            if (r < 0)
                rc = r;
        }
    }
    pthread_rwlock_unlock(&db->blocks_lock);
    free(served);
    int partial = 0;
    if (rc == BDB_OK && db->o.sink) { /* sink: flushed samples live there (db_sink.c) */
        for (size_t m = 0; m < nmetrics; m++)
            db_merger_source(&g[m], 1, 0);
        rc = db_sink_read(db, d, tn, dn, metrics, nmetrics, lo, hi, sink_add, g);
        partial = rc == BDB_ERR_PARTIAL; /* the head's samples are still answered */
        if (partial)
            rc = BDB_OK;
    }

    for (size_t m = 0; m < nmetrics; m++)
        if (rc == BDB_OK && g[m].oom)
            rc = BDB_ERR_NOMEM; /* never part of the samples presented as all */
    for (size_t m = 0; m < nmetrics; m++) {
        if (rc == BDB_OK)
            rc = db_merger_samples(&g[m], &out[m].ts, &out[m].v, &out[m].n, &out[m].cap);
        db_merger_free(&g[m]);
    }
    free(g);
    if (chunks)
        *chunks += nchunks;
    return rc == BDB_OK && partial ? BDB_ERR_PARTIAL : rc;
}

/* ---------------------------------------------------------------- listings */

static void fill_info(const device *d, bdb_device_info *inf, const char **metric_names)
{
    memset(inf, 0, sizeof *inf);
    inf->tenant = d->tenant->name;
    inf->device = d->name;
    inf->tags = d->tags;
    inf->ntags = d->ntags;
    inf->state = d->state;
    inf->state_ts = d->state_ts;
    inf->first_ts = d->first_ts;
    inf->last_ts = d->last_ts;
    inf->samples = d->samples;
    inf->bucket_ms = d->hist.e[d->hist.n - 1].size_ms;
    inf->freq_class = d->learner.cls;
    inf->pinned = d->pinned != 0;
    inf->nbucket_changes = d->hist.n - 1;
    for (uint32_t i = 0; i < d->nseries; i++)
        metric_names[i] = d->series[i]->metric;
    inf->metrics = metric_names;
    inf->nmetrics = d->nseries;
}

static int call_with_device(bdb_db *db, device *d, int (*cb)(void *, const bdb_device_info *),
                            void *ctx)
{
    /* A listing calls this for every device of a tenant: the metric names of a
     * typical device fit on the stack, so most calls allocate nothing. */
    const char *local[32];
    pthread_mutex_lock(dev_lock(db, d));
    const char **names = d->nseries < 32 ? local : bdb_calloc(d->nseries + 1, sizeof *names);
    if (!names) {
        pthread_mutex_unlock(dev_lock(db, d));
        return BDB_ERR_NOMEM;
    }
    names[d->nseries] = NULL; /* as calloc left it */
    bdb_device_info inf;
    fill_info(d, &inf, names);
    int rc = cb(ctx, &inf);
    pthread_mutex_unlock(dev_lock(db, d));
    if (names != local)
        free(names);
    return rc;
}

int db_read_get_device_local(bdb_db *db, const char *tn, const char *dn,
                             int (*cb)(void *, const bdb_device_info *), void *ctx)
{
    device *d = find_device(db, tn, dn);
    if (!d)
        return BDB_ERR_NOTFOUND;
    return call_with_device(db, d, cb, ctx) == BDB_ERR_NOMEM ? BDB_ERR_NOMEM : BDB_OK;
}

static int dev_cmp(const void *a, const void *b)
{
    const device *x = *(device *const *)a, *y = *(device *const *)b;
    int c = x->tenant == y->tenant ? 0 : strcmp(x->tenant->name, y->tenant->name);
    return c ? c : strcmp(x->name, y->name);
}

/* The devices to list: one tenant's device map, or every device. */
struct collect {
    device **v;
    size_t n, cap;
    int oom; /* a device was left out: the listing fails */
};

static void collect_cb(void *ctx, device *d)
{
    struct collect *c = ctx;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        device **p = bdb_realloc(c->v, cap * sizeof *p);
        if (!p) {
            c->oom = 1;
            return;
        }
        c->v = p;
        c->cap = cap;
    }
    c->v[c->n++] = d;
}

int db_read_list_devices_local(bdb_db *db, const char *tn,
                               int (*cb)(void *, const bdb_device_info *), void *ctx)
{
    struct collect c = {NULL, 0, 0, 0};
    pthread_rwlock_rdlock(&db->cat_lock);
    if (tn) {
        tenant *t = cat_tenant(db, tn, strlen(tn), 0);
        if (t) {
            size_t pos = 0, kl;
            const void *k;
            void *v;
            while (bdb_map_next(t->devices, &pos, &k, &kl, &v))
                collect_cb(&c, v);
        }
    } else {
        cat_each_device(db, collect_cb, &c);
    }
    pthread_rwlock_unlock(&db->cat_lock);
    /* Devices are never freed while the db is open, so the pointers stay valid. */
    if (c.n > 1) /* qsort's base must not be NULL, even for zero elements */
        qsort(c.v, c.n, sizeof *c.v, dev_cmp);
    int rc = c.oom ? BDB_ERR_NOMEM : BDB_OK;
    for (size_t i = 0; i < c.n && rc == BDB_OK; i++) {
        int r = call_with_device(db, c.v[i], cb, ctx);
        if (r == BDB_ERR_NOMEM) /* a listing with a device left out is an error */
            rc = r;
        else if (r)
            break;
    }
    free(c.v);
    return rc;
}

int bdb_db_device_partitions(bdb_db *db, const char *tn, const char *dn, int64_t from, int64_t to,
                             int (*cb)(void *, int64_t, int64_t), void *ctx)
{
    bdb_device_snapshot s;
    int rc = bdb_db_device_snapshot(db, tn, dn, &s);
    if (rc != BDB_OK)
        return rc;
    /* An open end (INT64_MIN / INT64_MAX) means "as far as the device has data", so
     * a listing without bounds does not enumerate millennia of empty buckets. */
    if (from == INT64_MIN)
        from = s.first_ts;
    if (to == INT64_MAX)
        to = s.last_ts == INT64_MIN ? INT64_MIN : s.last_ts + 1;
    bdb_bucket_enumerate(&s.hist, from, to, cb, ctx);
    bdb_device_snapshot_free(&s);
    return BDB_OK;
}

void bdb_db_get_stats(bdb_db *db, bdb_db_stats *st)
{
    memset(st, 0, sizeof *st);
    st->samples_written = atomic_load(&db->samples_written);
    st->reports_written = atomic_load(&db->reports_written);
    st->write_batches = atomic_load(&db->write_batches);
    st->series = atomic_load(&db->series_count);
    st->devices = atomic_load(&db->device_count);
    st->tenants = atomic_load(&db->tenant_count);
    st->head_bytes = atomic_load(&db->head_bytes);
    st->head_samples = atomic_load(&db->head_samples);
    st->flushes = atomic_load(&db->flushes);
    st->flush_failures = atomic_load(&db->flush_failures);
    st->flush_fail_streak = atomic_load(&db->flush_fail_streak);
    st->flush_failing_since_ms = atomic_load(&db->flush_failing_since);
    st->flush_last_error = atomic_load(&db->flush_last_error);
    st->compactions = atomic_load(&db->compactions);
    st->retention_drops = atomic_load(&db->retention_drops);
    st->quarantined = atomic_load(&db->quarantined);
    st->wal_replayed_records = atomic_load(&db->replayed);
    st->wal_corruptions = atomic_load(&db->wal_corruptions);
    st->wal_corrupt_bytes = atomic_load(&db->wal_corrupt_bytes);
    st->bucket_changes = atomic_load(&db->bucket_changes);
    st->ooo_samples = atomic_load(&db->ooo_samples);
    int ro = atomic_load(&db->readonly); /* 2: the reason is being written (db.c) */
    st->readonly = ro != 0;
    st->space_low = atomic_load(&db->space_low);
    st->space_releases = atomic_load(&db->space_releases);
    st->disk_free_bytes = db_space_free(db);
    bdb_rcache_stats rs;
    bdb_rcache_stats_get(db->rcache, &rs);
    st->rcache_hits = rs.hits;
    st->rcache_misses = rs.misses;
    st->rcache_evictions = rs.evictions;
    st->rcache_entries = rs.entries;
    st->rcache_bytes = rs.bytes;
    st->rcache_max_bytes = rs.max_bytes;
    if (ro == 1)
        snprintf(st->readonly_reason, sizeof st->readonly_reason, "%s", db->readonly_reason);
    else if (ro)
        snprintf(st->readonly_reason, sizeof st->readonly_reason, "%s",
                 "read-only (the reason is being recorded)");
    pthread_rwlock_rdlock(&db->blocks_lock);
    st->blocks = db->nblocks;
    for (size_t i = 0; i < db->nblocks; i++) {
        const bdb_block_meta *m = bdb_block_get_meta(db->blocks[i].b);
        st->block_bytes += m->file_bytes;
        st->block_samples += m->nsamples;
        /* Maintenance will merge a window's blocks of one TTL class and split mixed ones. */
        if (db->blocks[i].cls == DB_CLS_MIXED ||
            (i > 0 && bdb_block_get_meta(db->blocks[i - 1].b)->window_start == m->window_start &&
             db->blocks[i - 1].cls == db->blocks[i].cls))
            st->pending_compactions++;
    }
    pthread_rwlock_unlock(&db->blocks_lock);
    if (db->wal)
        bdb_wal_get_stats(db->wal, &st->wal);
}

int bdb_db_partition_sizes(bdb_db *db,
                           int (*cb)(void *, const char *, const char *, int64_t, uint64_t,
                                     uint64_t),
                           void *ctx)
{
    char tn[512], dn[512];
    pthread_rwlock_rdlock(&db->blocks_lock);
    for (size_t i = 0; i < db->nblocks; i++) {
        bdb_block_part_iter pit;
        bdb_partition_stat ps;
        bdb_block_part_iter_init(db->blocks[i].b, &pit);
        while (bdb_block_partition_next(&pit, &ps) == 1) {
            snprintf(tn, sizeof tn, "%.*s", (int)ps.key.tenant_len, ps.key.tenant);
            snprintf(dn, sizeof dn, "%.*s", (int)ps.key.device_len, ps.key.device);
            if (cb(ctx, tn, dn, ps.bucket_start, ps.rows, ps.bytes))
                break;
        }
    }
    pthread_rwlock_unlock(&db->blocks_lock);
    return BDB_OK;
}
