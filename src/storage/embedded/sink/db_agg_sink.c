/* db_agg_sink: complete tier and fleet windows of a flush to the sink (see
 * db_agg_sink.h). */
#include "storage/embedded/sink/db_agg_sink.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "storage/embedded/sink/db_cat_sink.h"
#include "storage/embedded/tier/db_tier.h"
#include "storage/sink.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_TTL_S INT64_C(630720000) /* Cassandra's limit: 20 years */

int agg_sink_tiers(const bdb_db *db)
{
    const bdb_sink *sk = db->o.sink;
    return sk && sk->ops->tier_put && sk->ops->tier_read;
}

int agg_sink_fleet(const bdb_db *db)
{
    const bdb_sink *sk = db->o.sink;
    return sk && sk->ops->fleet_put && sk->ops->fleet_read;
}

int32_t agg_sink_ttl(bdb_db *db, const char *tn, enum bdb_res res, int64_t start)
{
    int64_t keep = tier_retention(db, tn, res);
    if (keep <= 0)
        return 0;
    /* as the files: a window goes when its end is past the retention */
    int64_t ttl = (start + bdb_res_width(res) + keep - bdb_clock_now(&db->o.clock)) / 1000;
    if (ttl <= 0)
        return -1;
    return (int32_t)(ttl > MAX_TTL_S ? MAX_TTL_S : ttl);
}

static int seq_cmp(const void *a, const void *b)
{
    const tfile *x = *(tfile *const *)a, *y = *(tfile *const *)b;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* One series at one tier: the windows the new files touch, completed from the
 * published files, then put. */
static int put_series(bdb_db *db, const series *s, enum bdb_res res, tfile *const *nf, size_t nn,
                      bdb_rollup *touched, bdb_rollup *full, bdb_rollup *out)
{
    const char *tn = s->dev->tenant->name, *dn = s->dev->name;
    bdb_rollup_reset(touched);
    int rc = BDB_OK;
    for (size_t i = 0; i < nn && rc == BDB_OK; i++) {
        if (nf[i]->res != res || strcmp(nf[i]->tenant, tn) != 0)
            continue;
        tloc loc;
        if (tf_find(nf[i], dn, s->metric, &loc))
            rc = tf_read_rec(nf[i], &loc, INT64_MIN, INT64_MAX, touched);
    }
    if (rc != BDB_OK || touched->n == 0)
        return rc;
    int64_t lo = touched->w[0].start, hi = touched->w[touched->n - 1].start + touched->width;
    bdb_rollup_reset(full);
    rc = tier_read_files(db, tn, dn, s->metric, res, lo, hi, full);
    for (size_t i = 0; i < nn && rc == BDB_OK; i++) {
        if (nf[i]->res != res || strcmp(nf[i]->tenant, tn) != 0)
            continue;
        tloc loc;
        if (tf_find(nf[i], dn, s->metric, &loc))
            rc = tf_read_rec(nf[i], &loc, lo, hi, full);
    }
    if (rc != BDB_OK)
        return rc;
    bdb_rollup_reset(out);
    for (size_t i = 0; i < touched->n && rc == BDB_OK; i++) {
        const bdb_window *w = bdb_rollup_find(full, touched->w[i].start);
        if (w) /* (a window a recompute emptied keeps its old row: see CASSANDRA.md) */
            rc = bdb_rollup_set_window(out, w);
    }
    if (rc != BDB_OK || out->n == 0)
        return rc;
    int32_t *ttl = bdb_malloc(out->n * sizeof *ttl);
    if (!ttl)
        return BDB_ERR_NOMEM; /* nothing put for this series: the flush fails */
    for (size_t i = 0; i < out->n; i++)
        ttl[i] = agg_sink_ttl(db, tn, res, out->w[i].start);
    bdb_sink *sk = db->o.sink;
    rc = sk->ops->tier_put(sk, tn, dn, s->metric, (int)res, out, ttl);
    free(ttl);
    return rc;
}

/* Series are put by PUT_THREADS threads, each taking every PUT_THREADS-th one: a put
 * is a round trip per partition, and a flush of many devices would otherwise wait for
 * them one after the other. They only read the files (pread) and the frozen head,
 * which the flush thread leaves alone while it waits for them. */
#define PUT_THREADS 8

struct putter {
    bdb_db *db;
    struct series *const *v;
    size_t n, first;
    tfile *const *nf;
    size_t nfiles;
    _Atomic int *failed;
    int rc;
    uint64_t windows;
    pthread_t th;
};

static void *put_range(void *arg)
{
    struct putter *p = arg;
    bdb_rollup touched, full, out;
    for (int k = 0; k < BDB_TIERS && p->rc == BDB_OK; k++) {
        enum bdb_res res = (enum bdb_res)(k + 1);
        int64_t width = bdb_res_width(res);
        bdb_rollup_init(&touched, width);
        bdb_rollup_init(&full, width);
        bdb_rollup_init(&out, width);
        for (size_t i = p->first; i < p->n && p->rc == BDB_OK; i += PUT_THREADS) {
            if (atomic_load(p->failed))
                break; /* the flush failed already: stop feeding it */
            p->rc = put_series(p->db, p->v[i], res, p->nf, p->nfiles, &touched, &full, &out);
            p->windows += out.n;
            bdb_rollup_reset(&out);
        }
        bdb_rollup_free(&touched);
        bdb_rollup_free(&full);
        bdb_rollup_free(&out);
    }
    if (p->rc != BDB_OK)
        atomic_store(p->failed, 1);
    return NULL;
}

int agg_sink_put_tiers(bdb_db *db, struct series *const *v, size_t n, tfile *const *files,
                       size_t nfiles)
{
    tfile **nf = bdb_malloc((nfiles + 1) * sizeof *nf);
    if (!nf) {
        BDB_ERROR("tiers: sink put failed: %s; the flush will be retried",
                  bdb_strerror(BDB_ERR_NOMEM));
        return BDB_ERR_NOMEM;
    }
    if (nfiles) /* files may be NULL when the flush wrote none */
        memcpy(nf, files, nfiles * sizeof *nf);
    /* the order a reader of the published list applies them in (one series' files of
     * one tier and tenant differ by file window or by seq) */
    if (nfiles > 1)
        qsort(nf, nfiles, sizeof *nf, seq_cmp);
    _Atomic int failed = 0;
    struct putter ps[PUT_THREADS];
    size_t nth = n < PUT_THREADS ? n : PUT_THREADS;
    int started[PUT_THREADS] = {0};
    for (size_t i = 0; i < nth; i++) {
        ps[i] = (struct putter){db, v, n, i, nf, nfiles, &failed, BDB_OK, 0, 0};
        /* (no thread to be had: the flush thread puts that share too, below) */
        started[i] = i > 0 && pthread_create(&ps[i].th, NULL, put_range, &ps[i]) == 0;
    }
    int rc = BDB_OK;
    uint64_t windows = 0;
    for (size_t i = 0; i < nth; i++) {
        if (started[i])
            pthread_join(ps[i].th, NULL);
        else
            put_range(&ps[i]); /* the flush thread's own share (i = 0) */
        if (rc == BDB_OK)
            rc = ps[i].rc;
        windows += ps[i].windows;
    }
    free(nf);
    if (rc != BDB_OK)
        BDB_ERROR("tiers: sink put failed: %s; the flush will be retried", bdb_strerror(rc));
    else if (windows)
        BDB_INFO("tiers: %llu complete window(s) confirmed by %s", (unsigned long long)windows,
                 db->o.sink->ops->describe(db->o.sink));
    /* tests only (tests/integration/test_cassandra_tiers.py): a window in which the rows
     * are confirmed and the flush has not committed, for a kill -9 to land in */
    const char *pause = getenv("BDB_TEST_PAUSE_AFTER_AGG_PUT_MS");
    if (rc == BDB_OK && windows && pause && atoi(pause) > 0) {
        BDB_WARN("tiers: test pause of %d ms after the sink put, before the commit", atoi(pause));
        struct timespec ts = {atoi(pause) / 1000, (long)(atoi(pause) % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return rc;
}

/* ---------------------------------------------------------------- fleet */

static int fleet_series(bdb_db *db, const fstate *t, int ri, const char *tn, const char *mn,
                        ffile *const *nf, size_t nn, uint64_t *windows)
{
    enum bdb_res res = res_of(ri);
    int64_t width = bdb_res_width(res);
    bdb_fleet touched, full;
    bdb_fleet_init(&touched, width);
    bdb_fleet_init(&full, width);
    int rc = BDB_OK;
    for (size_t i = 0; i < nn && rc == BDB_OK; i++) {
        const frec *r = nf[i]->ri == ri ? fl_find(nf[i], tn, mn) : NULL;
        if (!r)
            continue;
        bdb_dec d;
        bdb_dec_init(&d, r->p, r->len);
        rc = bdb_fleet_read(&touched, &d, INT64_MIN, INT64_MAX);
    }
    if (rc == BDB_OK && touched.n) {
        int64_t lo = touched.w[0].start, hi = touched.w[touched.n - 1].start + width;
        for (size_t i = 0; i < t->n && rc == BDB_OK; i++) {
            const ffile *f = t->files[i];
            const frec *r = f->ri == ri && f->end > lo && f->start < hi ? fl_find(f, tn, mn) : NULL;
            if (!r)
                continue;
            bdb_dec d;
            bdb_dec_init(&d, r->p, r->len);
            rc = bdb_fleet_read(&full, &d, lo, hi);
        }
        if (rc == BDB_OK)
            rc = bdb_fleet_merge(&full, &touched);
        /* only the windows this flush touched */
        for (size_t i = full.n; i-- > 0 && rc == BDB_OK;)
            if (!bdb_fleet_find(&touched, full.w[i].start))
                bdb_fleet_drop(&full, full.w[i].start);
        if (rc == BDB_OK && full.n) {
            int32_t *ttl = bdb_malloc(full.n * sizeof *ttl);
            for (size_t i = 0; ttl && i < full.n; i++)
                ttl[i] = agg_sink_ttl(db, tn, res, full.w[i].start);
            bdb_sink *sk = db->o.sink;
            rc = ttl ? sk->ops->fleet_put(sk, tn, mn, (int)res, &full, ttl) : BDB_ERR_NOMEM;
            free(ttl);
            *windows += full.n;
        }
    }
    bdb_fleet_free(&touched);
    bdb_fleet_free(&full);
    return rc;
}

int agg_sink_put_fleet(bdb_db *db, const fstate *t, ffile *const *files, size_t nfiles)
{
    int rc = BDB_OK;
    uint64_t windows = 0;
    for (size_t i = 0; i < nfiles && rc == BDB_OK; i++) {
        for (size_t j = 0; j < files[i]->nrec && rc == BDB_OK; j++) {
            const frec *r = &files[i]->recs[j];
            int seen = 0; /* done with an earlier new file of the same resolution */
            for (size_t k = 0; k < i && !seen; k++)
                seen = files[k]->ri == files[i]->ri && fl_find(files[k], r->tenant, r->metric);
            if (!seen)
                rc = fleet_series(db, t, files[i]->ri, r->tenant, r->metric, files, nfiles,
                                  &windows);
        }
    }
    if (rc != BDB_OK)
        BDB_ERROR("fleet: sink put failed: %s; the flush will be retried", bdb_strerror(rc));
    else if (windows)
        BDB_INFO("fleet: %llu complete window(s) confirmed by %s", (unsigned long long)windows,
                 db->o.sink->ops->describe(db->o.sink));
    return rc;
}

/* ---------------------------------------------------------------- inherited windows */

int agg_sink_import_tier(bdb_db *db, const series *s, enum bdb_res res, bdb_rollup *r)
{
    if (!agg_sink_tiers(db) || r->n == 0)
        return BDB_OK;
    const char *tn = s->dev->tenant->name, *dn = s->dev->name;
    int64_t hz = cat_inherited(db, tn, dn);
    if (hz == INT64_MIN || r->w[0].start > hz)
        return BDB_OK; /* every window after what the registry knew: nothing to merge */
    int64_t width = r->width, lo = r->w[0].start, hi = lo;
    for (size_t i = 0; i < r->n && r->w[i].start <= hz; i++)
        hi = r->w[i].start + width;
    bdb_rollup loc, rem;
    bdb_rollup_init(&loc, width);
    bdb_rollup_init(&rem, width);
    int rc = tier_read_files(db, tn, dn, s->metric, res, lo, hi, &loc);
    /* the windows the local files lack: one read of their span */
    int64_t mlo = INT64_MAX, mhi = INT64_MIN;
    for (size_t i = 0; rc == BDB_OK && i < r->n && r->w[i].start < hi; i++)
        if (!bdb_rollup_find(&loc, r->w[i].start)) {
            if (mlo == INT64_MAX)
                mlo = r->w[i].start;
            mhi = r->w[i].start + width;
        }
    bdb_sink *sk = db->o.sink;
    if (rc == BDB_OK && mlo < mhi)
        rc = sk->ops->tier_read(sk, tn, dn, s->metric, (int)res, mlo, mhi, &rem);
    uint64_t merged = 0;
    for (size_t i = 0; rc == BDB_OK && i < rem.n; i++) {
        if (rem.w[i].start < mlo || rem.w[i].start >= mhi ||
            bdb_rollup_find(&loc, rem.w[i].start) || !bdb_rollup_find(r, rem.w[i].start))
            continue;
        rc = bdb_rollup_merge_window(r, &rem.w[i]);
        merged++;
    }
    bdb_rollup_free(&loc);
    bdb_rollup_free(&rem);
    if (rc != BDB_OK)
        BDB_ERROR("tiers: %s/%s/%s: cannot read the inherited %s windows from the sink: %s", tn, dn,
                  s->metric, bdb_res_name(res), bdb_strerror(rc));
    else if (merged)
        BDB_INFO("tiers: %s/%s/%s: %llu inherited %s window(s) merged from %s", tn, dn, s->metric,
                 (unsigned long long)merged, bdb_res_name(res), sk->ops->describe(sk));
    return rc;
}

int agg_sink_inherited_fill(bdb_db *db, const series *s, enum bdb_res res, int64_t a, int64_t b,
                            bdb_rollup *base)
{
    if (!agg_sink_tiers(db))
        return BDB_OK;
    const char *tn = s->dev->tenant->name, *dn = s->dev->name;
    int64_t hz = cat_inherited(db, tn, dn), width = base->width;
    if (hz == INT64_MIN || a > hz)
        return BDB_OK;
    if (hz < INT64_MAX - width && b > bdb_align_down(hz, width) + width)
        b = bdb_align_down(hz, width) + width;
    bdb_rollup rem;
    bdb_rollup_init(&rem, width);
    bdb_sink *sk = db->o.sink;
    int rc = sk->ops->tier_read(sk, tn, dn, s->metric, (int)res, a, b, &rem);
    for (size_t i = 0; rc == BDB_OK && i < rem.n; i++)
        if (rem.w[i].start >= a && rem.w[i].start < b && !bdb_rollup_find(base, rem.w[i].start))
            rc = bdb_rollup_set_window(base, &rem.w[i]);
    bdb_rollup_free(&rem);
    if (rc != BDB_OK)
        BDB_ERROR("tiers: %s/%s/%s: cannot read the inherited %s windows from the sink: %s", tn, dn,
                  s->metric, bdb_res_name(res), bdb_strerror(rc));
    return rc;
}

int agg_sink_import_fleet(bdb_db *db, const fstate *t, int ri, const char *tn, const char *mn,
                          bdb_fleet *f)
{
    if (!agg_sink_fleet(db) || f->n == 0)
        return BDB_OK;
    int64_t hz = cat_inherited_tenant(db, tn);
    if (hz == INT64_MIN || f->w[0].start > hz)
        return BDB_OK;
    enum bdb_res res = res_of(ri);
    int64_t width = f->width, lo = f->w[0].start, hi = lo;
    for (size_t i = 0; i < f->n && f->w[i].start <= hz; i++)
        hi = f->w[i].start + width;
    bdb_fleet loc, rem, own;
    bdb_fleet_init(&loc, width);
    bdb_fleet_init(&rem, width);
    bdb_fleet_init(&own, width);
    int rc = BDB_OK;
    for (size_t i = 0; i < t->n && rc == BDB_OK; i++) {
        const ffile *ff = t->files[i];
        const frec *r = ff->ri == ri && ff->end > lo && ff->start < hi ? fl_find(ff, tn, mn) : NULL;
        if (!r)
            continue;
        bdb_dec d;
        bdb_dec_init(&d, r->p, r->len);
        rc = bdb_fleet_read(&loc, &d, lo, hi);
    }
    int64_t mlo = INT64_MAX, mhi = INT64_MIN;
    for (size_t i = 0; rc == BDB_OK && i < f->n && f->w[i].start < hi; i++)
        if (!bdb_fleet_find(&loc, f->w[i].start)) {
            if (mlo == INT64_MAX)
                mlo = f->w[i].start;
            mhi = f->w[i].start + width;
        }
    bdb_sink *sk = db->o.sink;
    if (rc == BDB_OK && mlo < mhi)
        rc = sk->ops->fleet_read(sk, tn, mn, (int)res, mlo, mhi, &rem);
    /* only the windows this partial has and the files lack */
    for (size_t i = rem.n; rc == BDB_OK && i-- > 0;)
        if (rem.w[i].start < mlo || rem.w[i].start >= mhi || bdb_fleet_find(&loc, rem.w[i].start) ||
            !bdb_fleet_find(f, rem.w[i].start))
            bdb_fleet_drop(&rem, rem.w[i].start);
    size_t merged = rem.n;
    if (rc == BDB_OK && merged) {
        /* f may borrow its names (merges refuse that): copied through its encoding,
         * exact as the fleet files are */
        bdb_buf enc;
        bdb_buf_init_checked(&enc);
        bdb_fleet_write(f, INT64_MIN, INT64_MAX, &enc);
        rc = enc.oom ? BDB_ERR_NOMEM : BDB_OK;
        if (rc == BDB_OK) {
            bdb_dec d;
            bdb_dec_init(&d, enc.data, enc.len);
            rc = bdb_fleet_read(&own, &d, INT64_MIN, INT64_MAX);
        }
        bdb_buf_free(&enc);
        if (rc == BDB_OK)
            rc = bdb_fleet_merge(&own, &rem);
        if (rc == BDB_OK) {
            bdb_fleet_free(f);
            *f = own;
            bdb_fleet_init(&own, width);
        }
    }
    bdb_fleet_free(&loc);
    bdb_fleet_free(&rem);
    bdb_fleet_free(&own);
    if (rc != BDB_OK)
        BDB_ERROR("fleet: %s/%s: cannot read the inherited %s windows from the sink: %s", tn, mn,
                  bdb_res_name(res), bdb_strerror(rc));
    else if (merged)
        BDB_INFO("fleet: %s/%s: %zu inherited %s window(s) merged from %s", tn, mn, merged,
                 bdb_res_name(res), sk->ops->describe(sk));
    return rc;
}

void agg_sink_open_synced(bdb_db *db)
{
    if (agg_sink_tiers(db)) {
        tstate *t = tier_state(db);
        if (t) {
            pthread_rwlock_wrlock(&t->lock);
            t->sink_synced = 1;
            pthread_rwlock_unlock(&t->lock);
        }
    }
    if (agg_sink_fleet(db)) {
        fstate *f = fl_get(db);
        if (f) {
            pthread_rwlock_wrlock(&f->lock);
            f->sink_synced = 1;
            pthread_rwlock_unlock(&f->lock);
        }
    }
}

/* ---------------------------------------------------------------- reads */

int agg_sink_read_tiers(bdb_db *db, struct device *d, const char *tn, const char *dn,
                        const char *const *metrics, size_t nmetrics, enum bdb_res res, int64_t lo,
                        int64_t hi, bdb_rollup *out)
{
    /* Only the device's lifetime can hold windows: a wide range asks no empty days. */
    pthread_mutex_lock(dev_lock(db, d));
    int64_t first = d->first_ts, last = d->last_ts;
    pthread_mutex_unlock(dev_lock(db, d));
    int64_t width = bdb_res_width(res);
    if (first > last)
        return 1; /* no event yet: nothing flushed either */
    int64_t a = bdb_align_down(first, width);
    int64_t b = last > INT64_MAX - width ? INT64_MAX : bdb_align_down(last, width) + width;
    if (a > lo)
        lo = a;
    if (b < hi)
        hi = b;
    bdb_sink *sk = db->o.sink;
    int rc = BDB_OK;
    for (size_t m = 0; m < nmetrics && rc == BDB_OK && lo < hi; m++)
        rc = sk->ops->tier_read(sk, tn, dn, metrics[m], (int)res, lo, hi, &out[m]);
    if (rc == BDB_OK)
        return 1;
    for (size_t m = 0; m < nmetrics; m++)
        bdb_rollup_reset(&out[m]);
    if (rc == BDB_ERR_NOMEM) /* not the sink's failure: the files may lack the windows */
        return BDB_ERR_NOMEM;
    BDB_WARN("tiers: %s/%s answered from the local tier files: the sink failed (%s)", tn, dn,
             bdb_strerror(rc));
    return 0;
}

int agg_sink_read_fleet(bdb_db *db, const char *tn, const char *mn, enum bdb_res res, int64_t lo,
                        int64_t hi, bdb_fleet *out)
{
    bdb_sink *sk = db->o.sink;
    int rc = sk->ops->fleet_read(sk, tn, mn, (int)res, lo, hi, out);
    if (rc == BDB_OK)
        return 1;
    bdb_fleet_reset(out);
    if (rc == BDB_ERR_NOMEM) /* not the sink's failure: the files may lack the windows */
        return BDB_ERR_NOMEM;
    BDB_WARN("fleet: %s/%s answered from the local fleet files: the sink failed (%s)", tn, mn,
             bdb_strerror(rc));
    return 0;
}
