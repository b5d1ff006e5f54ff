/* db_drop: dropping a tenant (bdb_db_drop_tenant, db.h) and WAL record type 4.
 *
 * A tenant's data lives in the head and the WAL, the catalog, the current-state index
 * and its file, the late-data marks, fleet files (shared by every tenant), tier files
 * and blocks (or a sink). The drop removes it from each, in an order that a crash at
 * any point leaves either the tenant as it was or gone, never half of it readable
 * again after the replay:
 *
 *  1. a flush (when the catalog knows the tenant), so that no frozen chunk of a failed
 *     flush is left (the fleet hook's covered set compares chunk addresses, which the
 *     drop frees) and a sink has every device the tenant has; without one, the last
 *     flush must have succeeded (else BDB_ERR_AGAIN), so every fleet and tier file is
 *     committed;
 *  2. with a sink that takes it, the sink's rows (drop_tenant, storage/sink.h), from
 *     the devices and bucket histories the catalog still knows;
 *  3. WAL record type 4 "tenant dropped" (u8 4 | str tenant | "bdbdrop1", nothing
 *     after: docs/formats/wal.md), appended under the
 *     flush lock held exclusively and synced, then the tenant is forgotten in memory:
 *     catalog, head, current state, late marks. A replay applies the tenant's older
 *     records and then this one, so a crash before step 5 forgets it again;
 *  4. the fleet files holding its windows are rewritten without them, and its tier
 *     files (one tenant each) are deleted;
 *  5. a flush: the catalog and the `latest` file are written without the tenant, and
 *     the WAL segments up to the cut (the record of step 3 among them) are deleted.
 * Block files are not touched here: they leave by retention (a file holding only
 * the tenant is deleted, one shared with others rewritten without it), which the
 * caller makes expire for the key (the server's retention hook does for a deleted
 * generation) and runs (bdb_db_maintain). Every step is idempotent: a drop that failed or was cut
 * short by a crash is completed by calling it again. */
#include "storage/embedded/core/db_consumer.h"
#include "storage/embedded/core/db_int.h"
#include "common/alloc.h"
#include "storage/sink.h"

#include "bucketdb/bdb.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

#define REC_DROP 4
/* A drop forgets a whole tenant: a record damaged into type 4 (a flipped type byte of
 * a type 3 record, CRC recomputed by the damage) must not decode as one, so the record
 * carries a fixed mark and nothing after it. */
#define DROP_MARK "bdbdrop1"
#define DROP_MARK_LEN 8

/* Forgets tenant (len bytes) in memory; 1 if it was known. Caller holds flush_lock
 * exclusively, or replays (single thread). */
static int drop_mem(bdb_db *db, const char *name, size_t len)
{
    pthread_rwlock_wrlock(&db->cat_lock);
    tenant *t = cat_tenant(db, name, len, 0);
    if (t)
        bdb_map_del(db->tenants, name, len);
    pthread_rwlock_unlock(&db->cat_lock);
    if (!t)
        return 0;
    /* The consumers that point at the tenant's devices let go of them first. */
    db_consumers_forget_tenant(db, t);
    cat_tenant_free(db, t);
    return 1;
}

int db_drop_apply_record(bdb_db *db, bdb_dec *dec)
{
    size_t len;
    const char *name = bdb_dec_str(dec, &len);
    if (dec->err || len == 0 || memchr(name, 0, len) || bdb_dec_left(dec) != DROP_MARK_LEN ||
        memcmp(dec->p, DROP_MARK, DROP_MARK_LEN) != 0)
        return BDB_ERR_CORRUPT;
    drop_mem(db, name, len);
    return BDB_OK;
}

/* The sink's view of the tenant's devices (step 2): pointers into the catalog, valid
 * while flush_mutex is held and nothing writes to the tenant. */
struct sink_devs {
    bdb_sink_device *v;
    uint32_t *nsub;
    int64_t *hist;        /* from, size pairs of every device, one array */
    const char **metrics; /* metric names of every device, one array */
    size_t n;
    int oom;
};

static int collect_devs(bdb_db *db, const char *name, struct sink_devs *s)
{
    memset(s, 0, sizeof *s);
    pthread_rwlock_rdlock(&db->cat_lock);
    tenant *t = cat_tenant(db, name, strlen(name), 0);
    size_t nd = t ? bdb_map_count(t->devices) : 0, nh = 0, nm = 0;
    size_t dp = 0, kl;
    const void *key;
    void *dv;
    while (t && bdb_map_next(t->devices, &dp, &key, &kl, &dv)) {
        nh += ((device *)dv)->hist.n;
        nm += ((device *)dv)->nseries;
    }
    s->v = bdb_calloc(nd + 1, sizeof *s->v);
    s->nsub = bdb_calloc(nd + 1, sizeof *s->nsub);
    s->hist = bdb_calloc(2 * nh + 1, sizeof *s->hist);
    s->metrics = bdb_calloc(nm + 1, sizeof *s->metrics);
    if (!s->v || !s->nsub || !s->hist || !s->metrics) {
        pthread_rwlock_unlock(&db->cat_lock);
        return BDB_ERR_NOMEM;
    }
    size_t hp = 0, mp = 0;
    dp = 0;
    while (t && bdb_map_next(t->devices, &dp, &key, &kl, &dv)) {
        device *d = dv;
        pthread_mutex_lock(dev_lock(db, d));
        bdb_sink_device *o = &s->v[s->n];
        o->tenant = t->name;
        o->device = d->name;
        o->first_ts = d->first_ts;
        o->last_ts = d->last_ts;
        o->hist_from = s->hist + hp;
        o->hist_size = s->hist + hp + d->hist.n;
        o->nhist = d->hist.n;
        for (uint32_t i = 0; i < d->hist.n; i++) {
            s->hist[hp + i] = d->hist.e[i].from_ms;
            s->hist[hp + d->hist.n + i] = d->hist.e[i].size_ms;
        }
        hp += 2 * (size_t)d->hist.n;
        o->metrics = s->metrics + mp;
        o->nmetrics = d->nseries;
        for (uint32_t i = 0; i < d->nseries; i++)
            s->metrics[mp++] = d->series[i]->metric;
        uint32_t subs = 1;
        for (uint32_t i = 0; i < d->hs.nsubs; i++)
            if (d->hs.subs[i].n > subs)
                subs = d->hs.subs[i].n;
        s->nsub[s->n++] = subs;
        pthread_mutex_unlock(dev_lock(db, d));
    }
    pthread_rwlock_unlock(&db->cat_lock);
    return BDB_OK;
}

static void free_devs(struct sink_devs *s)
{
    free(s->v);
    free(s->nsub);
    free(s->hist);
    free(s->metrics);
}

int bdb_db_drop_tenant(bdb_db *db, const char *name)
{
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len > BDB_DROP_NAME_MAX)
        return BDB_ERR_INVALID;
    if (atomic_load(&db->readonly))
        return BDB_ERR_READONLY;
    pthread_rwlock_rdlock(&db->cat_lock);
    int in_catalog = cat_tenant(db, name, len, 0) != NULL;
    pthread_rwlock_unlock(&db->cat_lock);
    /* step 1; a key the catalog does not know has nothing in the head: no flush (the
     * purge looks at every deleted generation at each start) */
    int rc = in_catalog ? db_flush(db) : BDB_OK;
    if (rc != BDB_OK)
        return rc;
    pthread_mutex_lock(&db->flush_mutex);
    /* A flush that failed since step 1 left frozen chunks: try again later. */
    if (atomic_load(&db->flush_fail_streak) || atomic_load(&db->readonly)) {
        pthread_mutex_unlock(&db->flush_mutex);
        return BDB_ERR_AGAIN;
    }
    bdb_sink *sk = db->o.sink;
    if (sk && sk->ops->drop_tenant) { /* step 2 */
        struct sink_devs s;
        rc = collect_devs(db, name, &s);
        if (rc == BDB_OK)
            rc = sk->ops->drop_tenant(sk, name, s.v, s.nsub, s.n);
        free_devs(&s);
        if (rc != BDB_OK) {
            pthread_mutex_unlock(&db->flush_mutex);
            BDB_ERROR("dropping tenant %s: the sink's rows were not all deleted: %s; the "
                      "local data stays until a retry succeeds",
                      name, bdb_strerror(rc));
            return rc;
        }
    }
    bdb_buf rec; /* step 3 */
    bdb_buf_init_checked(&rec);
    bdb_buf_putc(&rec, REC_DROP);
    bdb_buf_put_str(&rec, name, len);
    bdb_buf_append(&rec, DROP_MARK, DROP_MARK_LEN);
    uint64_t lsn = 0;
    int known = 0;
    if (rec.oom)
        rc = BDB_ERR_NOMEM;
    pthread_rwlock_wrlock(&db->flush_lock);
    pthread_rwlock_rdlock(&db->cat_lock);
    int present = cat_tenant(db, name, len, 0) != NULL;
    pthread_rwlock_unlock(&db->cat_lock);
    if (rc == BDB_OK && present) {
        rc = bdb_wal_append(db->wal, rec.data, rec.len, &lsn);
        if (rc == BDB_OK)
            known = drop_mem(db, name, len);
    }
    pthread_rwlock_unlock(&db->flush_lock);
    bdb_buf_free(&rec);
    if (rc == BDB_OK && known)
        rc = bdb_wal_sync(db->wal, lsn);
    if (rc == BDB_ERR_READONLY || rc == BDB_ERR_IO)
        db_set_readonly(db, rc, "WAL write of a tenant drop");
    if (rc == BDB_OK) /* step 4 */
        rc = db_consumers_purge_tenant(db, name);
    pthread_mutex_unlock(&db->flush_mutex);
    if (rc == BDB_OK && known) /* step 5 */
        rc = db_flush(db);
    if (rc == BDB_OK)
        BDB_INFO("tenant %s dropped%s", name, known ? "" : " (nothing left in memory)");
    else
        BDB_ERROR("dropping tenant %s failed: %s; calling again completes it", name,
                  bdb_strerror(rc));
    return rc;
}
