/* db: the write path of the embedded engine and the WAL records it writes and replays
 * (opening, recovery and closing: db_open.c).
 *
 * WAL records written by this file (formats versioned by their type byte):
 *   type 1, batch:  u8 1 | str tenant | uvarint nnames (str metric)* |
 *                   uvarint ntagsets (uvarint n (str k, str v)*)* | uvarint nreports |
 *                   report* where report = str device | varint ts | uvarint tagset+1
 *                   (0 = none) | u8 has_state [str state] | uvarint nmetrics
 *                   (uvarint name index | u64le value bits)*
 *   type 2, bucket history of one device (replaces it on replay):
 *                   u8 2 | str tenant | str device | varint pinned | uvarint n
 *                   (varint from | varint size)*
 *   type 3, hot settings of one device (sub-buckets, promotion cap): see db_hot.c
 *   type 4, tenant dropped (u8 4 | str tenant | "bdbdrop1"; forgets it again): db_drop.c
 *   type 5, batch with string attributes: type 1 with, after each report's state,
 *                   uvarint nattrs (str name, str value)*; written only for a batch
 *                   that has attributes, so other batches keep type 1's bytes
 * Name and tag-set tables make a 5,000-line request cost ~10 bytes per sample. */
#include "storage/embedded/core/db_consumer.h"
#include "storage/embedded/core/db_int.h"
#include "storage/embedded/core/db_space.h" /* disk reserve: writes held, early flush */
#include "common/alloc.h"
#include "common/path.h"
#include "storage/embedded/hot/db_hot.h"
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

void bdb_db_opts_default(bdb_db_opts *o)
{
    memset(o, 0, sizeof *o);
    o->sync_mode = BDB_WAL_SYNC_BATCH;
    o->periodic_ms = 100;
    o->wal_segment_bytes = 64u << 20;
    o->block_window_ms = 2 * BDB_MS_HOUR;
    o->flush_interval_ms = 10 * BDB_MS_MIN;
    o->head_max_bytes = 1ull << 30;
    o->retention_ms = 0;
    o->chunk_max_samples = 2048;
    o->background = 1;
    o->read_cache_bytes = BDB_READ_CACHE_DEFAULT;
}

void db_set_readonly(bdb_db *db, int rc, const char *what)
{
    /* 2 refuses writes at once (every check is "non-zero"); 1, stored once the reason
     * is written, lets bdb_db_get_stats read the reason without a lock (a reader of
     * the reason while it was written was a data race ThreadSanitizer reported) */
    int was = 0;
    if (!atomic_compare_exchange_strong(&db->readonly, &was, 2))
        return;
    int e = errno;
    snprintf(db->readonly_reason, sizeof db->readonly_reason, "%s failed: %s (%s)", what,
             bdb_strerror(rc), strerror(e));
    atomic_store(&db->readonly, 1);
    BDB_ERROR("storage is now read-only: %s; no further write will be acknowledged",
              db->readonly_reason);
}

/* ---------------------------------------------------------------- encode */

struct enc_state {
    bdb_map *names, *tagsets;
    bdb_buf names_buf, tags_buf, reports_buf, key;
    uint64_t nnames, ntagsets;
};

static int enc_init(struct enc_state *e)
{
    memset(e, 0, sizeof *e);
    bdb_buf_init_checked(&e->names_buf);
    bdb_buf_init_checked(&e->tags_buf);
    bdb_buf_init_checked(&e->reports_buf);
    bdb_buf_init_checked(&e->key);
    e->names = bdb_map_new();
    e->tagsets = bdb_map_new();
    return e->names && e->tagsets ? BDB_OK : BDB_ERR_NOMEM;
}

static void enc_free(struct enc_state *e)
{
    bdb_map_free(e->names);
    bdb_map_free(e->tagsets);
    bdb_buf_free(&e->names_buf);
    bdb_buf_free(&e->tags_buf);
    bdb_buf_free(&e->reports_buf);
    bdb_buf_free(&e->key);
}

/* BDB_OK or BDB_ERR_NOMEM; out must be a checked buffer. */
static int encode_batch(const char *tname, const bdb_batch *b, bdb_buf *out)
{
    struct enc_state e;
    int rc = enc_init(&e);
    int with_attrs = bdb_batch_attrs(b) != 0;
    size_t n;
    const bdb_report *r = bdb_batch_reports(b, &n);
    for (size_t i = 0; i < n && rc == BDB_OK; i++) {
        bdb_buf *rb = &e.reports_buf;
        bdb_buf_put_str(rb, r[i].device, r[i].device_len);
        bdb_buf_put_varint(rb, r[i].ts_ms);
        uint64_t tsi = 0;
        if (r[i].ntags) {
            bdb_buf_reset(&e.key);
            bdb_buf_put_uvarint(&e.key, r[i].ntags);
            for (uint32_t k = 0; k < r[i].ntags; k++) {
                bdb_buf_put_str(&e.key, r[i].tags[k].key, r[i].tags[k].klen);
                bdb_buf_put_str(&e.key, r[i].tags[k].val, r[i].tags[k].vlen);
            }
            uintptr_t idx = (uintptr_t)bdb_map_get(e.tagsets, e.key.data, e.key.len);
            if (!idx && !e.key.oom) {
                idx = (uintptr_t)++e.ntagsets;
                if (bdb_map_set(e.tagsets, e.key.data, e.key.len, (void *)idx) != BDB_OK)
                    rc = BDB_ERR_NOMEM;
                bdb_buf_append(&e.tags_buf, e.key.data, e.key.len);
            }
            tsi = idx;
        }
        bdb_buf_put_uvarint(rb, tsi);
        bdb_buf_putc(rb, r[i].state != NULL);
        if (r[i].state)
            bdb_buf_put_str(rb, r[i].state, r[i].state_len);
        if (with_attrs) {
            bdb_buf_put_uvarint(rb, r[i].nattrs);
            for (uint32_t k = 0; k < r[i].nattrs; k++) {
                bdb_buf_put_str(rb, r[i].attrs[k].key, r[i].attrs[k].klen);
                bdb_buf_put_str(rb, r[i].attrs[k].val, r[i].attrs[k].vlen);
            }
        }
        bdb_buf_put_uvarint(rb, r[i].nmetrics);
        for (uint32_t k = 0; k < r[i].nmetrics; k++) {
            const bdb_metric_val *m = &r[i].metrics[k];
            uintptr_t idx = (uintptr_t)bdb_map_get(e.names, m->name, m->nlen);
            if (!idx) {
                idx = (uintptr_t)++e.nnames;
                if (bdb_map_set(e.names, m->name, m->nlen, (void *)idx) != BDB_OK)
                    rc = BDB_ERR_NOMEM;
                bdb_buf_put_str(&e.names_buf, m->name, m->nlen);
            }
            bdb_buf_put_uvarint(rb, idx - 1);
            bdb_buf_put_f64(rb, m->value);
        }
    }
    bdb_buf_reset(out);
    bdb_buf_putc(out, with_attrs ? 5 : 1);
    bdb_buf_put_str(out, tname, strlen(tname));
    bdb_buf_put_uvarint(out, e.nnames);
    bdb_buf_append(out, e.names_buf.data, e.names_buf.len);
    bdb_buf_put_uvarint(out, e.ntagsets);
    bdb_buf_append(out, e.tags_buf.data, e.tags_buf.len);
    bdb_buf_put_uvarint(out, n);
    bdb_buf_append(out, e.reports_buf.data, e.reports_buf.len);
    if (e.names_buf.oom || e.tags_buf.oom || e.reports_buf.oom || e.key.oom || out->oom)
        rc = BDB_ERR_NOMEM;
    enc_free(&e);
    return rc;
}

static void encode_history(const device *d, bdb_buf *out)
{
    bdb_buf_putc(out, 2);
    bdb_buf_put_str(out, d->tenant->name, strlen(d->tenant->name));
    bdb_buf_put_str(out, d->name, d->nlen);
    bdb_buf_put_varint(out, d->pinned);
    bdb_buf_put_uvarint(out, d->hist.n);
    for (uint32_t i = 0; i < d->hist.n; i++) {
        bdb_buf_put_varint(out, d->hist.e[i].from_ms);
        bdb_buf_put_varint(out, d->hist.e[i].size_ms);
    }
}

/* ---------------------------------------------------------------- apply */

static device *get_device(bdb_db *db, const char *tn, size_t tl, const char *dn, size_t dl)
{
    pthread_rwlock_rdlock(&db->cat_lock);
    tenant *t = cat_tenant(db, tn, tl, 0);
    device *d = t ? cat_device(db, t, dn, dl, 0) : NULL;
    pthread_rwlock_unlock(&db->cat_lock);
    if (d)
        return d;
    pthread_rwlock_wrlock(&db->cat_lock);
    t = cat_tenant(db, tn, tl, 1);
    d = t ? cat_device(db, t, dn, dl, 1) : NULL; /* NULL: out of memory */
    pthread_rwlock_unlock(&db->cat_lock);
    return d;
}

/* What bdb_db_write allocates for one report before its WAL append, so that applying
 * the logged record cannot run out of memory half-way (alloc.h): the device, its
 * series and head room, copies of new tags and state handed over after it, and what
 * the consumers reserved (db_consumer.h; held until prep_free). */
struct prep {
    device *d;
    series **ser; /* the report's series, in the order of its metrics */
    bdb_kv *tags; /* new tags (copy), or NULL when unchanged */
    char *state;  /* copy of the report's state, or NULL */
    void *resv;   /* the consumers' reservation: db->cons.resv_total bytes */
    int set_tags;
    int reserved; /* the consumers' reserve was called: release is due */
};

static void prep_free(bdb_db *db, struct prep *p, const bdb_report *reps, size_t n)
{
    for (size_t i = 0; p && i < n; i++) {
        cat_tags_free(p[i].tags, reps[i].ntags);
        free(p[i].state);
        if (p[i].reserved) {
            pthread_mutex_lock(dev_lock(db, p[i].d));
            db_consumers_release(db, p[i].d, p[i].resv);
            pthread_mutex_unlock(dev_lock(db, p[i].d));
        }
    }
    free(p);
}

/* Bytes apply_relearn may append for d: its bucket-history record after one more
 * change and its hot-settings record (a varint or a string's length takes at most
 * 10 bytes). Caller holds d's stripe lock. */
static size_t relearn_bound(const device *d)
{
    size_t names = 10 + strlen(d->tenant->name) + 10 + d->nlen;
    size_t history = 1 + names + 10 + 10 + ((size_t)d->hist.n + 1) * 20;
    size_t hot = 1 + names + 10 + 10 + ((size_t)d->hs.nsubs + 1) * 20;
    return history + hot;
}

/* Caller holds flush_lock shared. BDB_OK or BDB_ERR_NOMEM; on failure the catalog
 * may hold new devices and series without samples (invisible to reads), nothing else. */
static int prepare_batch(bdb_db *db, const char *tn, size_t tl, const bdb_report *reps, size_t nrep,
                         struct prep **out)
{
    /* One allocation: the reports' entries, the consumers' reservations of each report
     * and of the batch, then the series of all their metrics, which the apply takes
     * from here instead of looking each up again. */
    size_t nser = 0;
    for (size_t i = 0; i < nrep; i++)
        nser += reps[i].nmetrics;
    size_t rsz = db->cons.resv_total, bsz = db->cons.batch_total;
    struct prep *p = bdb_calloc(1, nrep * (sizeof *p + rsz) + bsz + nser * sizeof(series *));
    *out = p;
    if (!p)
        return BDB_ERR_NOMEM;
    char *resv = (char *)(p + nrep), *batch = resv + nrep * rsz;
    series **ser = (series **)(batch + bsz);
    /* samples of the batch per series so far (series.resv_*): the head room each series
     * needs. A concurrent batch writing the same series restarts its count; it then
     * reserves less, and its apply grows the chunk itself: what a concurrent writer took
     * meanwhile is the one thing the reservation does not cover (ARCHITECTURE.md). */
    uint32_t bid = (uint32_t)(atomic_fetch_add(&db->resv_batches, 1) + 1);
    /* The devices there already, in one hold of cat_lock: taken per report, the shared
     * lock's atomics on a line every writer thread uses cost more than the lookups,
     * whose misses overlap in one pass. A device is not forgotten while flush_lock is
     * held (get_device's callers rely on that too); new ones are made below. */
    pthread_rwlock_rdlock(&db->cat_lock);
    tenant *t = cat_tenant(db, tn, tl, 0);
    for (size_t i = 0; t && i < nrep; i++)
        p[i].d = cat_device(db, t, reps[i].device, reps[i].device_len, 0);
    pthread_rwlock_unlock(&db->cat_lock);
    for (size_t i = 0; i < nrep; i++) {
        const bdb_report *r = &reps[i];
        device *d = p[i].d ? p[i].d : (p[i].d = get_device(db, tn, tl, r->device, r->device_len));
        if (!d)
            return BDB_ERR_NOMEM;
        if (i + 1 < nrep && p[i + 1].d) /* its fields are read next, under its lock */
            __builtin_prefetch(p[i + 1].d);
        p[i].ser = ser;
        ser += r->nmetrics;
        p[i].resv = resv + i * rsz;
        int rc = BDB_OK;
        pthread_mutex_lock(dev_lock(db, d));
        if (r->ntags && !cat_tags_equal(d, r->tags, r->ntags)) {
            p[i].set_tags = 1;
            rc = cat_tags_copy(r->tags, r->ntags, &p[i].tags);
        }
        if (rc == BDB_OK && r->state && !(p[i].state = bdb_strndup(r->state, r->state_len)))
            rc = BDB_ERR_NOMEM;
        if (rc == BDB_OK)
            rc = cat_series_room(d, r->nmetrics);
        /* The series first, their chunks fetched while the next ones are looked up
         * (head_prefetch), then the head room. */
        for (uint32_t k = 0; k < r->nmetrics && rc == BDB_OK; k++) {
            series *s = p[i].ser[k] = cat_series(db, d, r->metrics[k].name, r->metrics[k].nlen, 1);
            if (!s)
                rc = BDB_ERR_NOMEM;
            else
                head_prefetch(s, HEAD_PF_CHUNK);
        }
        for (uint32_t k = 0; k < r->nmetrics && rc == BDB_OK; k++) {
            series *s = p[i].ser[k];
            if (s->resv_batch != (uint16_t)bid)
                s->resv_n = 0;
            if (s->resv_n < UINT16_MAX)
                s->resv_n++;
            s->resv_batch = (uint16_t)bid;
            /* room for every sample of the batch so far, none appended yet */
            rc = head_reserve(db, s, r->ts_ms, s->resv_n);
        }
        if (rc == BDB_OK) {
            p[i].reserved = 1;
            rc = db_consumers_reserve(db, d, r, p[i].ser, p[i].resv, batch);
        }
        pthread_mutex_unlock(dev_lock(db, d));
        if (rc != BDB_OK)
            return rc;
    }
    return db_consumers_reserve_batch(db, batch);
}

device *db_get_device(bdb_db *db, const char *tn, size_t tl, const char *dn, size_t dl)
{
    return get_device(db, tn, tl, dn, dl);
}

/* Applies one report to the head. Caller holds flush_lock shared (or is replaying).
 * ser: the report's series from prepare_batch (pp set), or room for nm of them, which
 * this fills (replay).
 * If the learner changed the device's class, the device is marked and *relearn set:
 * the bucket change is made after the whole batch (apply_relearn), because replay
 * applies the batch record before the history record and must place every sample of
 * the batch in the same partition the live write did. */
static int apply_report(bdb_db *db, const char *tn, size_t tl, const char *dn, size_t dl,
                        int64_t ts, const bdb_kv *tags, uint32_t ntags, const char *state,
                        size_t slen, const char *const *names, const size_t *nlens,
                        const double *vals, uint32_t nm, const bdb_kv *attrs, uint32_t na,
                        int *relearn, struct prep *pp, series **ser)
{
    device *d = pp ? pp->d : get_device(db, tn, tl, dn, dl);
    if (!d)
        return BDB_ERR_NOMEM;
    pthread_mutex_lock(dev_lock(db, d));
    int rc = BDB_OK;
    if (pp && pp->set_tags) { /* copies made by prepare_batch: nothing to allocate */
        cat_tags_take(d, pp->tags, ntags);
        pp->tags = NULL;
    } else if (!pp && ntags && !cat_tags_equal(d, tags, ntags)) {
        rc = cat_set_tags(d, tags, ntags);
    }
    if (pp && pp->state) {
        cat_state_take(d, pp->state, ts);
        pp->state = NULL;
    } else if (!pp && state && rc == BDB_OK) {
        rc = cat_set_state(d, state, slen, ts);
    }
    if (rc != BDB_OK) { /* replay only: the open fails */
        pthread_mutex_unlock(dev_lock(db, d));
        return rc;
    }
    int64_t prev_last = d->last_ts;
    if (ts < d->first_ts)
        d->first_ts = ts;
    if (ts > d->last_ts)
        d->last_ts = ts;
    d->samples += nm;
    if (!db->replaying && !d->pinned && bdb_rate_observe(&d->learner, ts) && relearn) {
        d->relearn = 1;
        *relearn = 1;
    }
    uint32_t i;
    if (pp) /* the series are known: their loads overlap (head_prefetch) */
        for (int stage = HEAD_PF_SERIES; stage <= HEAD_PF_TAIL; stage++)
            for (i = 0; i < nm; i++)
                head_prefetch(ser[i], stage);
    for (i = 0; i < nm && rc == BDB_OK; i++) {
        series *s = pp ? ser[i] : (ser[i] = cat_series(db, d, names[i], nlens[i], 1));
        rc = s ? head_append(db, s, ts, vals[i]) : BDB_ERR_NOMEM;
    }
    atomic_fetch_add(&db->head_samples, rc == BDB_OK ? i : i - 1);
    if (rc == BDB_OK) {
        db_apply a = {ts, prev_last, state, slen, ser, vals, nm, attrs, na, relearn};
        rc = db_consumers_apply(db, d, &a, pp ? pp->resv : NULL);
    }
    pthread_mutex_unlock(dev_lock(db, d));
    return rc;
}

/* A fleet of new devices is learnt all at once: one line each was a million lines at
 * a million devices (bench XL). So 20 a minute at INFO, the others at DEBUG; every
 * change is counted in bucketdb_bucket_changes_total and shown by /api/v1/devices. */
static bdb_log_budget class_log = {.lines = 20, .window_ms = 60000};

static void log_class_change(const device *d, int64_t size)
{
    const char *cls = bdb_freq_name((enum bdb_freq_class)d->learner.cls);
    uint32_t held;
    if (!bdb_log_budget_take(&class_log, bdb_monotonic_ms(), &held)) {
        BDB_DEBUG("device %s/%s: reporting class %s, bucket %s", d->tenant->name, d->name, cls,
                  bdb_bucket_name(size));
        return;
    }
    if (held)
        BDB_INFO("%u more devices changed their reporting class in the last minute (logged at "
                 "debug level; counted in bucketdb_bucket_changes_total)",
                 held);
    BDB_INFO("device %s/%s: reporting class %s, bucket %s", d->tenant->name, d->name, cls,
             bdb_bucket_name(size));
}

/* After a batch: makes the bucket change of every device whose class changed in it,
 * from its newest event (the batch included), appending each new history to hist_out. */
static void apply_relearn(bdb_db *db, const struct prep *prep, size_t nrep, bdb_buf *hist_out)
{
    for (size_t i = 0; i < nrep; i++) {
        device *d = prep[i].d; /* made by prepare_batch */
        pthread_mutex_lock(dev_lock(db, d));
        if (d->relearn || d->hs.promote) {
            /* Room for the records first. Out of memory leaves the device as it is (its
             * size, its promotion), as bdb_bucket_change does itself, and a later write
             * tries again: nothing is applied that is not logged. Not reserved before
             * the WAL append, where every write would pay for what few ever need. */
            if (bdb_buf_reserve(hist_out, relearn_bound(d)) != BDB_OK) {
                hist_out->oom = 0; /* the records already in hist_out are whole */
                pthread_mutex_unlock(dev_lock(db, d));
                continue;
            }
            /* db_hot_next_size: the learner's size, or a promotion, capped by an
             * earlier promotion so the learner does not undo it. */
            int promote = d->hs.promote;
            int64_t cap = d->hs.promo_cap;
            int64_t size = db_hot_next_size(db, d);
            if (size && !d->pinned && bdb_bucket_change(&d->hist, d->last_ts, size, NULL)) {
                atomic_fetch_add(&db->bucket_changes, 1);
                log_class_change(d, size);
                encode_history(d, hist_out);
            }
            if (promote && d->hs.promo_cap != cap)
                db_hot_encode_record(d, hist_out);
        }
        pthread_mutex_unlock(dev_lock(db, d));
    }
}

#define MAX_REPORT_METRICS BDB_MAX_REPORT_METRICS

/* A tenant, device or metric name from a WAL record. The engine keeps names as C
 * strings, so one with a NUL inside cannot have been written by bdb_db_write (its
 * inputs are checked): the record is undecodable rather than half-applied. */
static const char *dec_name(bdb_dec *d, size_t *n)
{
    const char *s = bdb_dec_str(d, n);
    if (!d->err && memchr(s, 0, *n))
        d->err = 1;
    return s;
}

static int apply_batch_record(bdb_db *db, bdb_dec *d, int with_attrs, int *relearn,
                              uint64_t *nsamples)
{
    size_t tl;
    const char *tn = dec_name(d, &tl);
    uint64_t nnames = bdb_dec_uvarint(d);
    if (d->err || nnames > bdb_dec_left(d))
        return BDB_ERR_CORRUPT;
    const char **names = bdb_malloc((nnames + 1) * sizeof *names);
    size_t *nlens = bdb_malloc((nnames + 1) * sizeof *nlens);
    const char **rn = bdb_malloc(MAX_REPORT_METRICS * sizeof *rn);
    size_t *rl = bdb_malloc(MAX_REPORT_METRICS * sizeof *rl);
    double *rv = bdb_malloc(MAX_REPORT_METRICS * sizeof *rv);
    series **rs = bdb_malloc(MAX_REPORT_METRICS * sizeof *rs);
    bdb_kv *tagv = NULL;
    bdb_kv attrv[BDB_MAX_REPORT_ATTRS];
    uint64_t *tagset_off = NULL;
    int rc = BDB_ERR_CORRUPT;
    if (!names || !nlens || !rn || !rl || !rv || !rs) {
        rc = BDB_ERR_NOMEM;
        goto out;
    }
    for (uint64_t i = 0; i < nnames; i++)
        names[i] = dec_name(d, &nlens[i]);
    uint64_t ntagsets = bdb_dec_uvarint(d);
    if (d->err || ntagsets > bdb_dec_left(d))
        goto out;
    /* Tag sets: decode all into one array; tagset_off[i]..[i+1] delimit set i. */
    tagset_off = bdb_calloc(ntagsets + 1, sizeof *tagset_off);
    if (!tagset_off) {
        rc = BDB_ERR_NOMEM;
        goto out;
    }
    size_t cap = 0, used = 0;
    for (uint64_t i = 0; i < ntagsets && !d->err; i++) {
        uint64_t nt = bdb_dec_uvarint(d);
        if (nt > bdb_dec_left(d)) {
            d->err = 1;
            break;
        }
        if (used + nt > cap) {
            cap = (used + nt) * 2;
            bdb_kv *nv = bdb_realloc(tagv, cap * sizeof *tagv);
            if (!nv) {
                rc = BDB_ERR_NOMEM;
                goto out;
            }
            tagv = nv;
        }
        for (uint64_t k = 0; k < nt; k++) {
            tagv[used].key = bdb_dec_str(d, &tagv[used].klen);
            tagv[used].val = bdb_dec_str(d, &tagv[used].vlen);
            used++;
        }
        tagset_off[i + 1] = used;
    }
    uint64_t nrep = bdb_dec_uvarint(d);
    if (d->err)
        goto out;
    for (uint64_t i = 0; i < nrep; i++) {
        size_t dl, sl = 0;
        const char *dn = dec_name(d, &dl);
        int64_t ts = bdb_dec_varint(d);
        uint64_t tsi = bdb_dec_uvarint(d);
        const char *st = NULL;
        if (bdb_dec_u8(d))
            st = bdb_dec_str(d, &sl);
        uint64_t na = with_attrs ? bdb_dec_uvarint(d) : 0;
        if (na > BDB_MAX_REPORT_ATTRS)
            goto out;
        for (uint64_t k = 0; k < na; k++) {
            attrv[k].key = dec_name(d, &attrv[k].klen);
            attrv[k].val = dec_name(d, &attrv[k].vlen);
        }
        uint64_t nm = bdb_dec_uvarint(d);
        /* a time outside the stored range (a record that passed its CRC but was not
         * written by this code) would overflow the bucket arithmetic: undecodable */
        if (d->err || tsi > ntagsets || nm > MAX_REPORT_METRICS || !bdb_ts_valid(ts))
            goto out;
        for (uint64_t k = 0; k < nm; k++) {
            uint64_t idx = bdb_dec_uvarint(d);
            double v = bdb_dec_f64(d);
            if (d->err || idx >= nnames)
                goto out;
            rn[k] = names[idx];
            rl[k] = nlens[idx];
            rv[k] = v;
        }
        uint32_t ntg = tsi ? (uint32_t)(tagset_off[tsi] - tagset_off[tsi - 1]) : 0;
        /* tagv is NULL when every tag set is empty: no pointer arithmetic on it then */
        const bdb_kv *tags = ntg ? tagv + tagset_off[tsi - 1] : NULL;
        int arc = apply_report(db, tn, tl, dn, dl, ts, tags, ntg, st, sl, rn, rl, rv, (uint32_t)nm,
                               attrv, (uint32_t)na, relearn, NULL, rs);
        if (arc != BDB_OK) {
            rc = arc;
            goto out;
        }
        *nsamples += nm;
    }
    rc = BDB_OK;
out:
    free(names);
    free(nlens);
    free(rn);
    free(rl);
    free(rv);
    free(rs);
    free(tagv);
    free(tagset_off);
    return rc;
}

static int apply_history_record(bdb_db *db, bdb_dec *d)
{
    size_t tl, dl;
    const char *tn = bdb_dec_str(d, &tl);
    const char *dn = bdb_dec_str(d, &dl);
    int64_t pinned = bdb_dec_varint(d);
    uint64_t n = bdb_dec_uvarint(d);
    if (d->err || n == 0 || n > bdb_dec_left(d))
        return BDB_ERR_CORRUPT;
    bdb_bucket_history h;
    h.e = NULL;
    h.n = h.cap = 0;
    for (uint64_t i = 0; i < n; i++) {
        int64_t from = bdb_dec_varint(d), size = bdb_dec_varint(d);
        if (!bdb_bucket_history_next_ok(&h, from, size))
            d->err = 1;
        if (d->err)
            break;
        if (bdb_bucket_history_push(&h, from, size) != BDB_OK) {
            bdb_bucket_history_free(&h);
            return BDB_ERR_NOMEM;
        }
    }
    if (d->err) {
        bdb_bucket_history_free(&h);
        return BDB_ERR_CORRUPT;
    }
    device *dv = get_device(db, tn, tl, dn, dl);
    if (!dv) {
        bdb_bucket_history_free(&h);
        return BDB_ERR_NOMEM;
    }
    pthread_mutex_lock(dev_lock(db, dv));
    bdb_bucket_history_free(&dv->hist);
    dv->hist = h;
    dv->pinned = pinned;
    pthread_mutex_unlock(dev_lock(db, dv));
    return BDB_OK;
}

int db_apply_record(bdb_db *db, const uint8_t *rec, size_t len)
{
    bdb_dec d;
    bdb_dec_init(&d, rec, len);
    uint8_t type = bdb_dec_u8(&d);
    uint64_t ns = 0;
    switch (type) {
    case 1:
        return apply_batch_record(db, &d, 0, NULL, &ns);
    case 5:
        return apply_batch_record(db, &d, 1, NULL, &ns);
    case 2:
        return apply_history_record(db, &d);
    case 3:
        return db_hot_apply_record(db, &d);
    case 4:
        return db_drop_apply_record(db, &d);
    default:
        return BDB_ERR_CORRUPT;
    }
}

/* ---------------------------------------------------------------- write */

int bdb_db_write(bdb_db *db, const char *tenant_name, const bdb_batch *batch)
{
    if (!tenant_name || !*tenant_name)
        return BDB_ERR_INVALID;
    if (atomic_load(&db->readonly))
        return BDB_ERR_READONLY;
    /* the disk reserve is given to a flush or cannot be made, or the WAL holds what
     * a flush can still write (db_space.h) */
    if (atomic_load_explicit(&db->space_low, memory_order_relaxed))
        return BDB_ERR_NOSPACE;
    size_t nrep;
    const bdb_report *reps = bdb_batch_reports(batch, &nrep);
    if (nrep == 0)
        return BDB_OK;
    /* Refuse the whole batch rather than store part of a report: the WAL record and
     * the head must hold exactly what was acknowledged. */
    for (size_t i = 0; i < nrep; i++) {
        if (reps[i].nmetrics > MAX_REPORT_METRICS || reps[i].nattrs > BDB_MAX_REPORT_ATTRS)
            return BDB_ERR_LIMIT;
        if (!bdb_ts_valid(reps[i].ts_ms)) /* ingestion refuses these first */
            return BDB_ERR_INVALID;
        for (uint32_t k = 0; k < reps[i].nmetrics; k++)
            if (reps[i].metrics[k].nlen > DB_MAX_METRIC_LEN) /* and these (max_key_bytes) */
                return BDB_ERR_LIMIT;
    }
    bdb_buf rec, hist;
    bdb_buf_init_checked(&rec);
    bdb_buf_init_checked(&hist);
    struct prep *prep = NULL;
    uint64_t lsn = 0;
    int rc = encode_batch(tenant_name, batch, &rec);
    if (rc != BDB_OK)
        goto out;

    size_t tl = strlen(tenant_name);
    pthread_rwlock_rdlock(&db->flush_lock);
    /* Everything the apply below needs is allocated first: out of memory here leaves
     * the db as if the write never came (alloc.h). */
    rc = prepare_batch(db, tenant_name, tl, reps, nrep, &prep);
    if (rc == BDB_OK)
        rc = bdb_wal_append(db->wal, rec.data, rec.len, &lsn);
    if (rc != BDB_OK) {
        pthread_rwlock_unlock(&db->flush_lock);
        if (rc == BDB_ERR_READONLY || rc == BDB_ERR_IO)
            db_set_readonly(db, rc, "WAL write");
        if (rc == BDB_ERR_NOSPACE && db->o.disk_reserve_bytes) /* a flush makes room */
            db_space_crossed(db, 0);
        goto out;
    }
    /* Apply straight from the batch: decoding our own record again would cost more. */
    double vals[MAX_REPORT_METRICS];
    uint64_t samples = 0;
    int relearn = 0;
    for (size_t i = 0; i < nrep && rc == BDB_OK; i++) {
        const bdb_report *r = &reps[i];
        uint32_t nm = r->nmetrics;
        for (uint32_t k = 0; k < nm; k++)
            vals[k] = r->metrics[k].value;
        /* the next report's series are on their way while this one is applied (an
         * address from prep: nothing shared is read without its lock) */
        if (i + 1 < nrep)
            for (uint32_t k = 0; k < reps[i + 1].nmetrics; k++)
                head_prefetch(prep[i + 1].ser[k], HEAD_PF_SERIES);
        /* the series come from prepare_batch: no names needed */
        rc = apply_report(db, tenant_name, tl, r->device, r->device_len, r->ts_ms, r->tags,
                          r->ntags, r->state, r->state_len, NULL, NULL, vals, nm, r->attrs,
                          r->nattrs, &relearn, &prep[i], prep[i].ser);
        samples += nm;
    }
    if (relearn && rc == BDB_OK)
        apply_relearn(db, prep, nrep, &hist);
    if (rc == BDB_OK && hist.oom)
        rc = BDB_ERR_NOMEM;
    if (rc == BDB_ERR_NOMEM) {
        /* Past the WAL append and not prepared for (head room or history bytes another
         * writer took meanwhile): the record is logged but the head holds part of it.
         * Refuse every further write, as after a failed fsync: a restart replays the
         * whole record (an unacknowledged write, like one cut by a crash, may then be
         * there whole; never in part). The alloc_fail sweep checks that a lone write
         * never gets here. */
        db_set_readonly(db, rc, "applying a logged write");
    }
    if (rc == BDB_OK && hist.len) {
        /* Several history records may be concatenated in hist; they are appended one
         * by one so replay sees each as its own record. */
        bdb_dec d;
        bdb_dec_init(&d, hist.data, hist.len);
        while (rc == BDB_OK && bdb_dec_left(&d)) {
            const uint8_t *start = d.p;
            uint8_t type = bdb_dec_u8(&d); /* 2 history, 3 hot settings: same shape */
            size_t l;
            bdb_dec_str(&d, &l);
            bdb_dec_str(&d, &l);
            bdb_dec_varint(&d);
            uint64_t n = bdb_dec_uvarint(&d);
            for (uint64_t k = 0; k < n; k++) {
                bdb_dec_varint(&d);
                if (type == 3)
                    bdb_dec_uvarint(&d);
                else
                    bdb_dec_varint(&d);
            }
            rc = bdb_wal_append(db->wal, start, (size_t)(d.p - start), &lsn);
        }
        /* The batch is applied and logged, its bucket change applied but not logged
         * (a WAL segment roll out of memory): only a restart makes them agree. */
        if (rc == BDB_ERR_NOMEM)
            db_set_readonly(db, rc, "logging a bucket change");
    }
    pthread_rwlock_unlock(&db->flush_lock);
    if (rc == BDB_OK)
        rc = bdb_wal_sync(db->wal, lsn);
    if (rc == BDB_ERR_READONLY || rc == BDB_ERR_IO)
        db_set_readonly(db, rc, "WAL fsync");
    if (rc == BDB_OK) /* logged: what the acknowledgement waits for besides (db_consumer.h) */
        rc = db_consumers_ack(db, tenant_name, reps, nrep, prep[0].resv);
    if (rc == BDB_OK) {
        atomic_fetch_add(&db->samples_written, samples);
        atomic_fetch_add(&db->reports_written, nrep);
        atomic_fetch_add(&db->write_batches, 1);
    }
out:
    prep_free(db, prep, reps, nrep);
    bdb_buf_free(&rec);
    bdb_buf_free(&hist);
    /* one load and compare; past the mark, once per mark (db_space.c) */
    if (rc == BDB_OK && lsn >= atomic_load_explicit(&db->space_flush_lsn, memory_order_relaxed))
        db_space_crossed(db, lsn);
    if (rc == BDB_OK && atomic_load(&db->head_bytes) > db->o.head_max_bytes && db->bg_running) {
        pthread_mutex_lock(&db->bg_mu);
        pthread_cond_signal(&db->bg_cv);
        pthread_mutex_unlock(&db->bg_mu);
    }
    return rc;
}

int bdb_db_set_device_bucket(bdb_db *db, const char *tn, const char *dn, int64_t size_ms)
{
    if (size_ms != 0 && !strcmp(bdb_bucket_name(size_ms), "?"))
        return BDB_ERR_INVALID;
    if (atomic_load(&db->readonly))
        return BDB_ERR_READONLY;
    device *d = get_device(db, tn, strlen(tn), dn, strlen(dn));
    if (!d)
        return BDB_ERR_NOMEM;
    bdb_buf hist;
    bdb_buf_init(&hist);
    uint64_t lsn = 0;
    int rc = BDB_OK;
    pthread_rwlock_rdlock(&db->flush_lock);
    pthread_mutex_lock(dev_lock(db, d));
    d->pinned = size_ms;
    int64_t want = size_ms ? size_ms : bdb_bucket_for_class((enum bdb_freq_class)d->learner.cls);
    int64_t newest = d->last_ts == INT64_MIN ? bdb_clock_now(&db->o.clock) : d->last_ts;
    bdb_bucket_change(&d->hist, newest, want, NULL);
    encode_history(d, &hist);
    pthread_mutex_unlock(dev_lock(db, d));
    rc = bdb_wal_append(db->wal, hist.data, hist.len, &lsn);
    pthread_rwlock_unlock(&db->flush_lock);
    if (rc == BDB_OK)
        rc = bdb_wal_sync(db->wal, lsn);
    bdb_buf_free(&hist);
    return rc;
}
