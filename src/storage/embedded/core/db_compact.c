/* db_compact: maintenance of the block files: retention by tenant TTL and compaction.
 *
 * Retention (seed 003 "Retention and Expiration", issue: per-tenant TTL). Each tenant
 * has a raw-data TTL (the server's retention unless the tenant sets its own). Expired
 * data must go by deleting whole files, yet one time window holds many tenants, so
 * the files of a window are grouped by TTL: a flush writes one block per (window,
 * TTL class) and compaction keeps that grouping. A block then expires at one moment,
 * window_end + TTL, for everything in it, and is unlinked without being read.
 *
 * A tenant's TTL may change after its data was written. Its old blocks then hold
 * tenants of different classes (DB_CLS_MIXED) or sit in a class that no longer
 * matches; maintenance rewrites such a window once, regrouped by the TTLs now in
 * force, leaving out whatever has already expired. So neither failure can happen:
 * a tenant whose TTL shrank loses its data on time (rewritten out of the shared file,
 * and never read meanwhile because reads stop at the cutoff), and a tenant whose TTL
 * grew keeps data that its old neighbours' expiry would otherwise have taken.
 *
 * Compaction merges the blocks of one window and class into one; newest write wins on
 * duplicate samples (db_merger). Only the maintenance pass and flush change the block
 * list and both hold flush_mutex, so indexes into db->blocks stay valid here without
 * blocks_lock, which is taken only to publish a change. */
#include "storage/embedded/core/db_consumer.h"
#include "storage/embedded/core/db_int.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t db_tenant_ttl(bdb_db *db, const char *tn)
{
    int64_t t = 0;
    if (db->o.tenant_retention)
        t = db->o.tenant_retention(db->o.tenant_retention_ctx, tn);
    if (t <= 0)
        t = db->o.retention_ms;
    return t > 0 ? t : 0;
}

int64_t bdb_db_retention_ms(bdb_db *db, const char *tn)
{
    return db_tenant_ttl(db, tn);
}

static int64_t cutoff_for(int64_t now, int64_t ttl)
{
    if (ttl <= 0 || now < INT64_MIN + ttl)
        return INT64_MIN;
    return now - ttl;
}

int64_t bdb_db_retention_cutoff(bdb_db *db, const char *tn)
{
    return cutoff_for(bdb_clock_now(&db->o.clock), db_tenant_ttl(db, tn));
}

void db_blockent_free(blockent *e)
{
    bdb_block_close(e->b);
    free(e->path);
    for (size_t i = 0; i < e->ntenants; i++)
        free(e->tenants[i]);
    free(e->tenants);
}

/* The tenants a block holds, found with one seek per tenant rather than a walk over
 * every series: after tenant T the next series of another tenant is the first key >=
 * T "\x01" (no C-string name lies strictly between the two). */
static int block_tenants(blockent *e)
{
    if (e->tenants)
        return BDB_OK;
    bdb_block_iter it;
    bdb_block_iter_init(e->b, &it);
    bdb_series_key k;
    char **v = NULL;
    size_t n = 0;
    int r = bdb_block_iter_next(&it, &k, NULL);
    while (r == 1) {
        char **p = bdb_realloc(v, (n + 1) * sizeof *p);
        if (p)
            v = p;
        char *name = p ? bdb_malloc(k.tenant_len + 2) : NULL;
        if (!name) {
            r = BDB_ERR_NOMEM; /* freed below like a read error; nothing cached */
            break;
        }
        memcpy(name, k.tenant, k.tenant_len);
        name[k.tenant_len] = '\x01';
        name[k.tenant_len + 1] = 0;
        v[n++] = name;
        r = bdb_block_iter_seek(e->b, &it, name, k.tenant_len + 1, NULL, 0);
        name[k.tenant_len] = 0;
        if (r == BDB_OK)
            r = bdb_block_iter_next(&it, &k, NULL);
    }
    if (r < 0) {
        for (size_t i = 0; i < n; i++)
            free(v[i]);
        free(v);
        return r;
    }
    e->tenants = v ? v : bdb_calloc(1, sizeof *v); /* non-NULL marks "computed" */
    e->ntenants = n;
    return BDB_OK;
}

/* What retention makes of one block now: its class and how many of its tenants have
 * expired for the whole window. */
struct verdict {
    int64_t cls;
    size_t expired;
    int unreadable;
};

static struct verdict judge(bdb_db *db, blockent *e, int64_t now)
{
    struct verdict v = {DB_CLS_UNKNOWN, 0, 0};
    if (block_tenants(e) != BDB_OK) {
        v.unreadable = 1;
        return v;
    }
    const int64_t wend = bdb_block_get_meta(e->b)->window_end;
    for (size_t i = 0; i < e->ntenants; i++) {
        int64_t ttl = db_tenant_ttl(db, e->tenants[i]);
        if (i == 0)
            v.cls = ttl;
        else if (ttl != v.cls)
            v.cls = DB_CLS_MIXED;
        if (wend <= cutoff_for(now, ttl))
            v.expired++;
    }
    return v;
}

/* Merges the blocks in[0..nb) (one window) into one block per TTL class in force now,
 * leaving out the series of tenants expired for the whole window, and swaps them in
 * for the inputs. The inputs stay in the list (and on disk) if anything fails. */
static int compact_blocks(bdb_db *db, blockent *in, size_t nb, int64_t now)
{
    const bdb_block_meta *m0 = bdb_block_get_meta(in[0].b);
    const int64_t wstart = m0->window_start, wend = m0->window_end;
    db_writers ws = {NULL, 0};
    bdb_block_iter *its = bdb_calloc(nb, sizeof *its);
    int *have = bdb_calloc(nb, sizeof *have);
    bdb_series_key *keys = bdb_calloc(nb, sizeof *keys);
    bdb_block_cursor *curs = bdb_calloc(nb, sizeof *curs);
    bdb_block **gone = bdb_calloc(nb, sizeof *gone);
    if (!its || !have || !keys || !curs || !gone) {
        free(its);
        free(have);
        free(keys);
        free(curs);
        free(gone);
        return BDB_ERR_NOMEM; /* the inputs stay as they are */
    }
    db_merger m;
    memset(&m, 0, sizeof m);
    int rc = BDB_OK;
    uint64_t kept = 0, dropped = 0;
    for (size_t i = 0; i < nb; i++) {
        gone[i] = in[i].b;
        bdb_block_iter_init(in[i].b, &its[i]);
        have[i] = bdb_block_iter_next(&its[i], &keys[i], &curs[i]);
        if (have[i] < 0) {
            rc = have[i];
            have[i] = 0;
        }
    }
    char *tname = NULL; /* tenant of the previous series, to look its TTL up once */
    int64_t ttl = 0;
    /* k-way merge over the blocks' sorted series tables */
    while (rc == BDB_OK) {
        ssize_t lo = -1;
        for (size_t i = 0; i < nb; i++)
            if (have[i] && (lo < 0 || bdb_series_key_cmp(&keys[i], &keys[lo]) < 0))
                lo = (ssize_t)i;
        if (lo < 0)
            break;
        bdb_series_key key = keys[lo];
        if (!tname || key.tenant_len != strlen(tname) ||
            memcmp(key.tenant, tname, key.tenant_len)) {
            free(tname);
            tname = bdb_strndup(key.tenant, key.tenant_len);
            if (!tname) {
                rc = BDB_ERR_NOMEM; /* the inputs stay; nothing is published */
                break;
            }
            ttl = db_tenant_ttl(db, tname);
        }
        const int expired = wend <= cutoff_for(now, ttl);
        for (size_t i = 0; i < nb && rc == BDB_OK && !expired; i++) {
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
                db_merger_source(&m, prio, ref.bucket_start);
                rc = db_merger_push_chunk(&m, &ref, INT64_MIN, INT64_MAX);
            }
        }
        if (rc == BDB_OK && !expired) {
            bdb_block_writer *w;
            rc = db_writer_for(db, &ws, wstart, wend, ttl, &w);
            if (rc == BDB_OK)
                rc = db_merger_emit(&m, w, &key, db->o.chunk_max_samples);
            kept++;
        } else if (expired) {
            dropped++;
        }
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
    db_merger_free(&m);
    free(tname);
    free(its);
    free(have);
    free(keys);
    free(curs);
    size_t nout = ws.n;
    rc = db_writers_finish(db, &ws, rc, gone, nb);
    free(gone);
    if (rc != BDB_OK)
        return rc;
    for (size_t j = 0; j < nb; j++) {
        /* The rewritten block already holds everything: a leftover input is only
         * disk space, and the next start drops or merges it; say so. */
        int urc = bdb_vfs_unlink(db->vfs, in[j].path);
        if (urc != BDB_OK)
            BDB_WARN("compaction: cannot remove %s (%s); it stays on disk until the next start",
                     in[j].path, bdb_strerror(urc));
        db_blockent_free(&in[j]);
    }
    bdb_vfs_sync_dir(db->vfs, db->blocks_dir);
    atomic_fetch_add(&db->compactions, 1);
    BDB_INFO("compaction: %zu block(s) of window %lld rewritten into %zu (%llu series kept, %llu "
             "expired series left out)",
             nb, (long long)wstart, nout, (unsigned long long)kept, (unsigned long long)dropped);
    return BDB_OK;
}

/* Unlinks blocks whose every tenant has expired; they are removed from the list
 * first so no reader can reach them. */
static void drop_blocks(bdb_db *db, blockent *v, size_t n)
{
    pthread_rwlock_wrlock(&db->blocks_lock);
    size_t k = 0;
    for (size_t i = 0; i < db->nblocks; i++) {
        int g = 0;
        for (size_t j = 0; j < n && !g; j++)
            g = db->blocks[i].b == v[j].b;
        if (!g)
            db->blocks[k++] = db->blocks[i];
    }
    db->nblocks = k;
    pthread_rwlock_unlock(&db->blocks_lock);
    for (size_t j = 0; j < n; j++) {
        BDB_INFO("retention: dropping %s (window ending %lld, every tenant in it expired)",
                 v[j].path, (long long)bdb_block_get_meta(v[j].b)->window_end);
        int urc = bdb_vfs_unlink(db->vfs, v[j].path);
        if (urc != BDB_OK) /* unreadable already; the next start drops it again */
            BDB_WARN("retention: cannot remove %s (%s)", v[j].path, bdb_strerror(urc));
        db_blockent_free(&v[j]);
        atomic_fetch_add(&db->retention_drops, 1);
    }
    if (n)
        bdb_vfs_sync_dir(db->vfs, db->blocks_dir);
}

/* Before the raw data of tenants expired for the whole window [a, b) goes (dropped, or
 * left out of a compaction), their minutes go to the 1m tier (db_tier.c). */
static int keep_expired_minutes(bdb_db *db, size_t a, size_t b, int64_t now)
{
    const bdb_block_meta *m = bdb_block_get_meta(db->blocks[a].b);
    int rc = BDB_OK;
    for (size_t i = a; i < b && rc == BDB_OK; i++) {
        const blockent *e = &db->blocks[i];
        for (size_t k = 0; k < e->ntenants && rc == BDB_OK; k++) {
            const char *tn = e->tenants[k];
            if (m->window_end > cutoff_for(now, db_tenant_ttl(db, tn)))
                continue;
            int seen = 0; /* once per tenant: its blocks of the window are read together */
            for (size_t j = a; j <= i && !seen; j++)
                for (size_t q = 0; q < db->blocks[j].ntenants && !seen; q++)
                    seen = (j < i || q < k) && !strcmp(db->blocks[j].tenants[q], tn);
            if (!seen)
                rc = db_consumers_retire(db, tn, &db->blocks[a], b - a, m->window_start,
                                         m->window_end);
        }
    }
    return rc;
}

/* One window's blocks [a, b): drop what expired whole, then compact when two blocks
 * share a class, a block mixes classes, or part of a block expired. */
static int maintain_window(bdb_db *db, size_t a, size_t b, int64_t now)
{
    size_t nb = b - a;
    blockent *drop = bdb_malloc(nb * sizeof *drop), *keep = bdb_malloc(nb * sizeof *keep);
    if (!drop || !keep) {
        free(drop);
        free(keep);
        return BDB_ERR_NOMEM; /* nothing judged, dropped or merged */
    }
    size_t nd = 0, nk = 0;
    int need = 0;
    pthread_rwlock_wrlock(&db->blocks_lock); /* cls is read by bdb_db_get_stats */
    for (size_t i = a; i < b; i++) {
        struct verdict v = judge(db, &db->blocks[i], now);
        db->blocks[i].cls = v.cls;
        if (v.unreadable)
            continue; /* reads report it; never delete what cannot be judged */
        if (db->blocks[i].ntenants > 0 && v.expired == db->blocks[i].ntenants) {
            drop[nd++] = db->blocks[i];
            continue;
        }
        if (v.expired > 0 || v.cls == DB_CLS_MIXED)
            need = 1;
        for (size_t j = 0; j < nk && !need; j++)
            need = keep[j].cls == v.cls;
        keep[nk++] = db->blocks[i];
    }
    pthread_rwlock_unlock(&db->blocks_lock);
    int rc = keep_expired_minutes(db, a, b, now);
    if (rc != BDB_OK) { /* the raw data stays until its minutes are kept */
        free(drop);
        free(keep);
        return rc;
    }
    drop_blocks(db, drop, nd);
    if (need && nk > 0)
        rc = compact_blocks(db, keep, nk, now);
    free(drop);
    free(keep);
    return rc;
}

/* telemetry_by_tenant counts of partitions past their tenant's retention go with the
 * data (db_hot.c keeps them per device). */
struct forget {
    bdb_db *db;
    int64_t now, cutoff;
    const tenant *last;
};

static void forget_expired(void *ctx, device *d)
{
    struct forget *f = ctx;
    if (d->tenant != f->last) {
        f->last = d->tenant;
        f->cutoff = cutoff_for(f->now, db_tenant_ttl(f->db, d->tenant->name));
    }
    if (f->cutoff == INT64_MIN)
        return;
    pthread_mutex_lock(dev_lock(f->db, d));
    db_hot_forget_before(d, f->cutoff);
    pthread_mutex_unlock(dev_lock(f->db, d));
}

int db_maintain(bdb_db *db)
{
    pthread_mutex_lock(&db->flush_mutex);
    if (atomic_load(&db->readonly)) {
        pthread_mutex_unlock(&db->flush_mutex);
        return BDB_ERR_READONLY;
    }
    const int64_t now = bdb_clock_now(&db->o.clock);
    int rc = BDB_OK;
    for (size_t a = 0; a < db->nblocks;) {
        const bdb_block_meta *ma = bdb_block_get_meta(db->blocks[a].b);
        const int64_t ws = ma->window_start, we = ma->window_end;
        size_t b = a + 1;
        while (b < db->nblocks && bdb_block_get_meta(db->blocks[b].b)->window_start == ws &&
               bdb_block_get_meta(db->blocks[b].b)->window_end == we)
            b++;
        int wrc = maintain_window(db, a, b, now);
        if (wrc != BDB_OK) {
            /* Keep going: one bad window must not stop the others' maintenance. */
            BDB_ERROR("maintenance of window %lld failed: %s", (long long)ws, bdb_strerror(wrc));
            rc = wrc;
        }
        /* The list may have changed: resume after this window. */
        a = 0;
        while (a < db->nblocks && (bdb_block_get_meta(db->blocks[a].b)->window_start < ws ||
                                   (bdb_block_get_meta(db->blocks[a].b)->window_start == ws &&
                                    bdb_block_get_meta(db->blocks[a].b)->window_end <= we)))
            a++;
    }
    struct forget fg = {db, now, INT64_MIN, NULL};
    pthread_rwlock_rdlock(&db->cat_lock);
    cat_each_device(db, forget_expired, &fg);
    pthread_rwlock_unlock(&db->cat_lock);
    int trc = db_consumers_maintain(db); /* e.g. tier retention and compaction */
    pthread_mutex_unlock(&db->flush_mutex);
    return rc != BDB_OK ? rc : trc;
}
