/* fleetq: ad hoc fleet queries over device tiers (see fleetq.h). */
#include "query/fleetq.h"

#include "bucketdb/bdb.h"
#include "storage/embedded/fleet/db_fleet.h"
#include "storage/embedded/tier/db_tier.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct dwin {
    int64_t start;
    bdb_stats st;
};

struct dres {
    char *name;
    struct dwin *w;
    size_t n;
};

struct job {
    bdb_db *db;
    const bdb_fleet_query *q;
    int64_t width;
    struct dres *dev;
    size_t ndev, cap, max;
    int over;
    _Atomic int rc;
};

static int tags_match(const bdb_fleet_query *q, const bdb_device_info *d)
{
    for (size_t i = 0; i < q->ntags; i++) {
        int hit = 0;
        for (size_t k = 0; k < d->ntags && !hit; k++)
            hit = d->tags[k].klen == q->tags[i].klen && d->tags[k].vlen == q->tags[i].vlen &&
                  !memcmp(d->tags[k].key, q->tags[i].key, q->tags[i].klen) &&
                  !memcmp(d->tags[k].val, q->tags[i].val, q->tags[i].vlen);
        if (!hit)
            return 0;
    }
    return 1;
}

static int list_cb(void *ctx, const bdb_device_info *d)
{
    struct job *j = ctx;
    if (!tags_match(j->q, d))
        return 0;
    if (j->ndev == j->max) {
        j->over = 1;
        return 1;
    }
    if (j->ndev == j->cap) {
        j->cap = j->cap ? j->cap * 2 : 256;
        j->dev = realloc(j->dev, j->cap * sizeof *j->dev);
        if (!j->dev)
            abort();
    }
    struct dres *r = &j->dev[j->ndev++];
    memset(r, 0, sizeof *r);
    r->name = strdup(d->device);
    if (!r->name)
        abort();
    return 0;
}

/* One device: its tier windows of the metric, kept as statistics only (the sketches
 * are not needed for fleet figures and would cost ~1 KiB per window). */
static void read_one(void *arg, size_t i)
{
    struct job *j = arg;
    if (atomic_load(&j->rc) != BDB_OK)
        return;
    struct dres *r = &j->dev[i];
    bdb_rollup ro;
    bdb_rollup_init(&ro, j->width);
    ro.stats_only = 1; /* nor decoded from the tier files */
    const char *m = j->q->metric;
    int rc =
        bdb_db_tier_read(j->db, j->q->tenant, r->name, &m, 1, j->q->res, j->q->from, j->q->to, &ro);
    if (rc == BDB_OK && ro.n) {
        r->w = malloc(ro.n * sizeof *r->w);
        if (!r->w)
            abort();
        for (size_t k = 0; k < ro.n; k++)
            r->w[k] = (struct dwin){ro.w[k].start, ro.w[k].st};
        r->n = ro.n;
    }
    bdb_rollup_free(&ro);
    if (rc != BDB_OK && rc != BDB_ERR_NOTFOUND) { /* a device gone meanwhile has no data */
        int ok = BDB_OK;
        atomic_compare_exchange_strong(&j->rc, &ok, rc);
    }
}

int bdb_query_fleet(bdb_db *db, bdb_pool *pool, const bdb_fleet_query *q, bdb_fleet *out,
                    uint64_t *matched)
{
    int64_t width = bdb_res_width(q->res);
    if (width == 0 || q->from >= q->to || out->width != width || !q->metric)
        return BDB_ERR_INVALID;
    bdb_fleet_reset(out);
    struct job j;
    memset(&j, 0, sizeof j);
    j.db = db;
    j.q = q;
    j.width = width;
    j.max = q->max_devices ? q->max_devices : BDB_FLEETQ_MAX_DEVICES;
    atomic_init(&j.rc, BDB_OK);
    int rc = bdb_db_list_devices(db, q->tenant, list_cb, &j);
    if (rc == BDB_OK && j.over)
        rc = BDB_ERR_LIMIT;
    if (matched)
        *matched = j.ndev;
    if (rc == BDB_OK && j.ndev) {
        if (pool && j.ndev > 1)
            bdb_pool_run(pool, read_one, &j, j.ndev);
        else
            for (size_t i = 0; i < j.ndev; i++)
                read_one(&j, i);
        rc = atomic_load(&j.rc);
    }
    /* merged in name order: each device set grows by appending */
    for (size_t i = 0; i < j.ndev; i++) {
        for (size_t k = 0; k < j.dev[i].n && rc == BDB_OK; k++)
            rc = bdb_fleet_add(out, j.dev[i].name, j.dev[i].w[k].start, &j.dev[i].w[k].st);
        free(j.dev[i].w);
        free(j.dev[i].name);
    }
    free(j.dev);
    if (rc != BDB_OK)
        bdb_fleet_reset(out);
    return rc;
}

static int i64_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int bdb_query_fleet_tables(bdb_db *db, bdb_pool *pool, const char *tenant, const char *metric,
                           enum bdb_res res, int64_t from, int64_t to, bdb_fleet *out,
                           size_t *recomputed)
{
    if (recomputed)
        *recomputed = 0;
    int rc = bdb_db_fleet_read(db, tenant, metric, res, from, to, out);
    int64_t *starts = NULL;
    size_t n = 0;
    if (rc == BDB_OK)
        rc = bdb_db_fleet_dirty(db, tenant, metric, res, from, to, &starts, &n);
    bdb_fleet w;
    bdb_fleet_init(&w, out->width);
    if (rc == BDB_OK && n) {
        /* one pass over the devices for the span of the recomputed windows, keeping
         * only those */
        bdb_fleet_query q = {.tenant = tenant,
                             .metric = metric,
                             .res = res,
                             .from = starts[0],
                             .to = starts[n - 1] + out->width};
        rc = bdb_query_fleet(db, pool, &q, &w, NULL);
        for (size_t i = w.n; i-- > 0 && rc == BDB_OK;)
            if (!bsearch(&w.w[i].start, starts, n, sizeof *starts, i64_cmp))
                bdb_fleet_drop(&w, w.w[i].start);
        for (size_t i = 0; i < n; i++)
            bdb_fleet_drop(out, starts[i]);
        if (rc == BDB_OK)
            rc = bdb_fleet_merge(out, &w);
    }
    bdb_fleet_free(&w);
    free(starts);
    if (rc == BDB_OK && recomputed)
        *recomputed = n;
    if (rc != BDB_OK)
        bdb_fleet_reset(out);
    return rc;
}
