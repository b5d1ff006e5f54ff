/* db_cat_sink: the catalog rebuilt from the sink's registry, and the inherited
 * horizons (see db_cat_sink.h). */
#include "storage/embedded/sink/db_cat_sink.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/map.h"
#include "common/path.h"
#include "common/timeutil.h"
#include "storage/embedded/core/db_consumer.h"
#include "storage/sink.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Horizons live in two maps made on first use: "tenant\0device" and "tenant" to a
 * malloc'd int64_t (db->inherited, db->inherited_tenants). */
static int64_t *map_i64(bdb_map *m, const char *k, size_t kl)
{
    return m ? bdb_map_get(m, k, kl) : NULL;
}

static int raise_in(bdb_map **mp, const char *k, size_t kl, int64_t v)
{
    if (!*mp && !(*mp = bdb_map_new()))
        return BDB_ERR_NOMEM;
    int64_t *p = bdb_map_get(*mp, k, kl);
    if (p) {
        if (v > *p)
            *p = v;
        return BDB_OK;
    }
    p = bdb_malloc(sizeof *p);
    if (!p)
        return BDB_ERR_NOMEM;
    *p = v;
    if (bdb_map_set(*mp, k, kl, p) != BDB_OK) {
        free(p);
        return BDB_ERR_NOMEM;
    }
    return BDB_OK;
}

int cat_inherited_set(bdb_db *db, const char *tn, size_t tl, const char *dn, size_t dl,
                      int64_t last)
{
    if (last == INT64_MIN)
        return BDB_OK;
    char *k = bdb_malloc(tl + 1 + dl);
    if (!k)
        return BDB_ERR_NOMEM;
    memcpy(k, tn, tl);
    k[tl] = 0;
    memcpy(k + tl + 1, dn, dl);
    int rc = raise_in(&db->inherited, k, tl + 1 + dl, last);
    free(k);
    return rc == BDB_OK ? raise_in(&db->inherited_tenants, tn, tl, last) : rc;
}

int64_t cat_inherited(const bdb_db *db, const char *tn, const char *dn)
{
    if (!db->inherited)
        return INT64_MIN;
    size_t tl = strlen(tn), dl = strlen(dn);
    char buf[512];
    char *k = tl + 1 + dl <= sizeof buf ? buf : bdb_malloc(tl + 1 + dl);
    if (!k)
        return INT64_MAX; /* no memory to look: the caller reads the sink (safe, slower) */
    memcpy(k, tn, tl);
    k[tl] = 0;
    memcpy(k + tl + 1, dn, dl);
    const int64_t *p = map_i64(db->inherited, k, tl + 1 + dl);
    if (k != buf)
        free(k);
    return p ? *p : INT64_MIN;
}

int64_t cat_inherited_tenant(const bdb_db *db, const char *tn)
{
    const int64_t *p = map_i64(db->inherited_tenants, tn, strlen(tn));
    return p ? *p : INT64_MIN;
}

void cat_inherited_encode(const bdb_db *db, bdb_buf *out)
{
    bdb_buf_put_uvarint(out, db->inherited ? bdb_map_count(db->inherited) : 0);
    size_t pos = 0, kl;
    const void *k;
    void *v;
    while (db->inherited && bdb_map_next(db->inherited, &pos, &k, &kl, &v)) {
        size_t tl = strlen(k); /* the key is "tenant\0device" */
        bdb_buf_put_str(out, k, tl);
        bdb_buf_put_str(out, (const char *)k + tl + 1, kl - tl - 1);
        bdb_buf_put_varint(out, *(const int64_t *)v);
    }
}

static void free_map(bdb_map **mp)
{
    size_t pos = 0, kl;
    const void *k;
    void *v;
    while (*mp && bdb_map_next(*mp, &pos, &k, &kl, &v))
        free(v);
    bdb_map_free(*mp);
    *mp = NULL;
}

void cat_inherited_free(bdb_db *db)
{
    free_map(&db->inherited);
    free_map(&db->inherited_tenants);
}

/* ---------------------------------------------------------------- rebuild */

struct names {
    char **v;
    size_t n, cap;
    int nomem;
};

static void tenant_cb(void *ud, const char *tn)
{
    struct names *t = ud;
    if (t->nomem)
        return;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 8;
        char **nv = bdb_realloc(t->v, cap * sizeof *nv);
        if (!nv) {
            t->nomem = 1;
            return;
        }
        t->v = nv;
        t->cap = cap;
    }
    if (!(t->v[t->n] = bdb_strdup(tn)))
        t->nomem = 1;
    else
        t->n++;
}

struct rebuild {
    bdb_db *db;
    uint64_t devices, series, partitions;
    int64_t first, last; /* the current tenant's devices' span */
    int rc;
};

/* One registry row into the catalog (a device listed twice: the later row's fields). */
static void device_cb(void *ud, const bdb_sink_device *r)
{
    struct rebuild *x = ud;
    bdb_db *db = x->db;
    if (x->rc != BDB_OK || r->last_ts == INT64_MIN || r->first_ts == INT64_MAX)
        return; /* no event: nothing flushed to route to */
    tenant *t = cat_tenant(db, r->tenant, strlen(r->tenant), 1);
    device *d = t ? cat_device(db, t, r->device, strlen(r->device), 1) : NULL;
    if (!d) {
        x->rc = BDB_ERR_NOMEM;
        return;
    }
    d->first_ts = r->first_ts;
    d->last_ts = r->last_ts;
    d->samples = r->samples;
    d->pinned = r->pinned ? r->bucket_ms : 0;
    if (r->freq_class >= BDB_FREQ_UNKNOWN && r->freq_class <= BDB_FREQ_HIGH)
        d->learner.cls = (uint8_t)r->freq_class;
    bdb_kv *tags = r->ntags ? bdb_calloc(r->ntags, sizeof *tags) : NULL;
    if (r->ntags && !tags) {
        x->rc = BDB_ERR_NOMEM;
        return;
    }
    for (size_t i = 0; i < r->ntags; i++)
        tags[i] = (bdb_kv){
            r->tag_keys[i] ? r->tag_keys[i] : "", r->tag_keys[i] ? strlen(r->tag_keys[i]) : 0,
            r->tag_vals[i] ? r->tag_vals[i] : "", r->tag_vals[i] ? strlen(r->tag_vals[i]) : 0};
    if (cat_set_tags(d, tags, (uint32_t)r->ntags) != BDB_OK)
        x->rc = BDB_ERR_NOMEM;
    free(tags);
    /* the bucket history as the registry has it (the first entry covers all earlier
     * time); a row with none, or one that breaks the rules, keeps the size in force */
    int ok = r->nhist > 0;
    d->hist.n = 0;
    for (size_t i = 0; i < r->nhist && ok && x->rc == BDB_OK; i++) {
        int64_t from = i ? r->hist_from[i] : INT64_MIN;
        ok = bdb_bucket_history_next_ok(&d->hist, from, r->hist_size[i]);
        if (ok && bdb_bucket_history_push(&d->hist, from, r->hist_size[i]) != BDB_OK)
            x->rc = BDB_ERR_NOMEM;
    }
    if (!ok) {
        d->hist.n = 0;
        int64_t size = bdb_bucket_history_next_ok(&d->hist, INT64_MIN, r->bucket_ms)
                           ? r->bucket_ms
                           : bdb_bucket_for_class(BDB_FREQ_UNKNOWN);
        BDB_WARN("catalog: %s/%s: the registry's bucket history is unusable; %lld ms from "
                 "the start",
                 r->tenant, r->device, (long long)size);
        if (bdb_bucket_history_push(&d->hist, INT64_MIN, size) != BDB_OK)
            x->rc = BDB_ERR_NOMEM;
    }
    for (size_t i = 0; i < r->nmetrics && x->rc == BDB_OK; i++) {
        if (!r->metrics[i] || !*r->metrics[i])
            continue;
        if (!cat_series(db, d, r->metrics[i], strlen(r->metrics[i]), 1))
            x->rc = BDB_ERR_NOMEM;
        else
            x->series++;
    }
    /* as a loaded device: its newest event is what earlier flushes froze, so older
     * samples mark their minutes for recomputation (db_tier_late.c) */
    db_consumers_dev_init(db, d, 1);
    if (x->rc == BDB_OK)
        x->rc = cat_inherited_set(db, r->tenant, strlen(r->tenant), r->device, strlen(r->device),
                                  r->last_ts);
    if (r->first_ts < x->first)
        x->first = r->first_ts;
    if (r->last_ts > x->last)
        x->last = r->last_ts;
    x->devices++;
}

/* The current state of a rebuilt device (the registry row has none): the catalog's
 * state is what /api/v1/devices answers for a device the catalog knows. */
static void state_cb(void *ud, const bdb_sink_state *st)
{
    struct rebuild *x = ud;
    if (x->rc != BDB_OK || !st->state)
        return;
    tenant *t = cat_tenant(x->db, st->tenant, strlen(st->tenant), 0);
    device *d = t ? cat_device(x->db, t, st->device, strlen(st->device), 0) : NULL;
    if (d && cat_set_state(d, st->state, strlen(st->state), st->state_ts) != BDB_OK)
        x->rc = BDB_ERR_NOMEM;
}

/* A partition's event count and sub-buckets (telemetry_by_tenant_totals): the
 * counts a flush writes are absolute, so the local count of a partition both
 * directories wrote must start from the stored one; a hot device's sub-buckets are
 * what raw reads of its partitions scan. */
static void count_cb(void *ud, const bdb_sink_count *c)
{
    struct rebuild *x = ud;
    if (x->rc != BDB_OK)
        return;
    tenant *t = cat_tenant(x->db, c->tenant, strlen(c->tenant), 0);
    device *d = t ? cat_device(x->db, t, c->device, strlen(c->device), 0) : NULL;
    if (!d || cat_inherited(x->db, c->tenant, c->device) == INT64_MIN)
        return; /* not a rebuilt device */
    x->rc = db_hot_seed(d, c->bucket_start, c->events, c->subbuckets);
    x->partitions++;
}

#define COUNT_SPAN (399 * BDB_MS_DAY) /* below the sink's 400-day bound per listing */

int cat_sink_rebuild(bdb_db *db)
{
    bdb_sink *sk = db->o.sink;
    if (!sk || !sk->ops->tenant_list || !sk->ops->device_list ||
        atomic_load(&db->device_count) != 0)
        return BDB_OK;
    /* A catalog file, even one listing no device (retention or a tenant's deletion
     * emptied it), is this directory's own record: only a directory that never
     * committed a flush is rebuilt (devices the registry still lists after their data
     * expired would come back otherwise). */
    char path[BDB_PATH_BUF];
    snprintf(path, sizeof path, "%s/catalog", db->dir);
    if (bdb_vfs_exists(db->vfs, path))
        return BDB_OK;
    struct names tn = {NULL, 0, 0, 0};
    int rc = sk->ops->tenant_list(sk, tenant_cb, &tn);
    if (rc == BDB_OK && tn.nomem)
        rc = BDB_ERR_NOMEM;
    struct rebuild x = {db, 0, 0, 0, INT64_MAX, INT64_MIN, BDB_OK};
    for (size_t i = 0; i < tn.n && rc == BDB_OK; i++) {
        x.first = INT64_MAX;
        x.last = INT64_MIN;
        rc = sk->ops->device_list(sk, tn.v[i], device_cb, &x);
        if (rc == BDB_OK)
            rc = x.rc;
        if (rc == BDB_OK && sk->ops->state_list)
            rc = sk->ops->state_list(sk, tn.v[i], NULL, state_cb, &x);
        if (rc == BDB_OK)
            rc = x.rc;
        /* the day before the first event: a partition starts at or before it */
        for (int64_t a = x.first - BDB_MS_DAY;
             rc == BDB_OK && sk->ops->count_list && x.first <= x.last && a <= x.last;
             a += COUNT_SPAN) {
            int64_t b = x.last - a < COUNT_SPAN ? x.last + 1 : a + COUNT_SPAN;
            rc = sk->ops->count_list(sk, tn.v[i], a, b, count_cb, &x);
            if (rc == BDB_OK)
                rc = x.rc;
        }
    }
    for (size_t i = 0; i < tn.n; i++)
        free(tn.v[i]);
    free(tn.v);
    if (rc != BDB_OK) {
        BDB_ERROR("catalog: cannot rebuild it from %s: %s", sk->ops->describe(sk),
                  bdb_strerror(rc));
        return rc;
    }
    if (x.devices)
        BDB_WARN("catalog: empty; rebuilt %llu device(s), %llu series, %llu partition "
                 "count(s) from the registry of %s (flushes merge the windows these devices "
                 "had there)",
                 (unsigned long long)x.devices, (unsigned long long)x.series,
                 (unsigned long long)x.partitions, sk->ops->describe(sk));
    return BDB_OK;
}
