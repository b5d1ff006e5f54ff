/* db_hot: events per partition (telemetry_by_tenant), sub-buckets and dynamic bucket
 * promotion of the embedded engine (db_hot.h).
 *
 * WAL record written by this file:
 *   type 3, hot settings of one device (replace them on replay):
 *     u8 3 | str tenant | str device | varint promo_cap | uvarint nsubs
 *     (varint from | uvarint n)*
 * Catalog part of a device (db_catalog.c, image version 2), after its metrics:
 *   varint promo_cap | uvarint nsubs (varint from | uvarint n)* |
 *   uvarint npc (varint minute - previous minute | uvarint events)* */
#include "storage/embedded/hot/db_hot.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "storage/embedded/core/db_consumer.h"
#include "storage/embedded/core/db_int.h"
#include "storage/embedded/sink/db_state_sink.h" /* sink: renamed readers */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A device changes its sub-bucket count twice per hot episode; older entries only
 * decide the ids of late writes into old buckets, so the oldest is dropped past this. */
#define SUBS_MAX 256
/* Partitions counted per device before the oldest counts are dropped (a device on
 * 10-minute buckets fills this in 35 days; retention normally forgets them first). */
#define PCOUNT_MAX 8192

/* Sub-bucket count in force at ts (entries are few: scan from the newest). */
static uint32_t subs_at(const device *d, int64_t ts)
{
    for (uint32_t i = d->hs.nsubs; i > 0; i--)
        if (d->hs.subs[i - 1].from_ms <= ts)
            return d->hs.subs[i - 1].n;
    return 1;
}

uint32_t db_hot_subs_within(const device *d, int64_t s, int64_t e)
{
    uint32_t n = subs_at(d, s);
    for (uint32_t i = d->hs.nsubs; i > 0 && d->hs.subs[i - 1].from_ms > s; i--)
        if (d->hs.subs[i - 1].from_ms < e && d->hs.subs[i - 1].n > n)
            n = d->hs.subs[i - 1].n;
    return n;
}

uint32_t db_hot_subs_max(const device *d)
{
    uint32_t n = 1;
    for (uint32_t i = 0; i < d->hs.nsubs; i++)
        if (d->hs.subs[i].n > n)
            n = d->hs.subs[i].n;
    return n;
}

int64_t db_partition_id(const device *d, int64_t ts, int64_t bstart)
{
    if (d->hs.nsubs == 0)
        return bstart;
    uint32_t n = subs_at(d, ts);
    if (n <= 1)
        return bstart;
    return bstart + (int64_t)((uint64_t)bdb_floor_div(ts, 1000) % n);
}

/* ---------------------------------------------------------------- counts */

static int minute_of(int64_t bstart, int32_t *out)
{
    int64_t m = bdb_floor_div(bstart, BDB_MS_MIN);
    if (m < INT32_MIN || m > INT32_MAX)
        return 0; /* beyond +-4000 years: not counted */
    *out = (int32_t)m;
    return 1;
}

uint64_t db_hot_events(const device *d, int64_t bstart)
{
    int32_t minute;
    if (!minute_of(bstart, &minute))
        return 0;
    for (uint32_t i = 0; i < d->hs.npc; i++)
        if (d->hs.pc[i].minute == minute)
            return d->hs.pc[i].events;
    return 0;
}

static void pcount_add(dev_hot *h, int32_t minute)
{
    /* Live writes hit the newest partition: check it before searching. */
    if (h->npc && h->pc[h->npc - 1].minute == minute) {
        if (h->pc[h->npc - 1].events < UINT32_MAX)
            h->pc[h->npc - 1].events++;
        return;
    }
    uint32_t lo = 0, hi = h->npc;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (h->pc[mid].minute < minute)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < h->npc && h->pc[lo].minute == minute) {
        if (h->pc[lo].events < UINT32_MAX)
            h->pc[lo].events++;
        return;
    }
    if (h->npc == PCOUNT_MAX) {
        if (lo == 0)
            return; /* older than everything kept */
        memmove(h->pc, h->pc + 1, (h->npc - 1) * sizeof *h->pc);
        h->npc--;
        lo--;
    }
    if (h->npc == h->cap_pc) {
        /* Out of memory loses this one count of a statistic (telemetry_by_tenant,
         * promotion), never a sample: the write goes on (alloc.h). */
        uint32_t cap = h->cap_pc ? h->cap_pc * 2 : 4;
        struct db_pcount *p = bdb_realloc(h->pc, cap * sizeof *h->pc);
        if (!p)
            return;
        h->pc = p;
        h->cap_pc = cap;
    }
    memmove(h->pc + lo + 1, h->pc + lo, (h->npc - lo) * sizeof *h->pc);
    h->pc[lo] = (struct db_pcount){minute, 1};
    h->npc++;
}

/* The next smaller allowed bucket, or 0 at the smallest. */
static int64_t smaller_bucket(int64_t size)
{
    static const int64_t order[] = {BDB_MS_DAY, 6 * BDB_MS_HOUR, BDB_MS_HOUR, 15 * BDB_MS_MIN,
                                    10 * BDB_MS_MIN};
    for (size_t i = 0; i + 1 < sizeof order / sizeof order[0]; i++)
        if (size >= order[i])
            return order[i + 1];
    return 0;
}

void db_hot_count(bdb_db *db, device *d, int64_t ts, uint32_t nm, int *relearn)
{
    int64_t bs, be;
    bdb_bucket_range(&d->hist, ts, &bs, &be);
    int32_t minute;
    if (minute_of(bs, &minute))
        pcount_add(&d->hs, minute);
    /* Promotion watches the partition of the newest event; older ones are closed. */
    if (d->hs.cur_samples == 0 || bs > d->hs.cur_start) {
        d->hs.cur_start = bs;
        d->hs.cur_samples = 0;
    }
    if (bs == d->hs.cur_start)
        d->hs.cur_samples += nm;
    uint64_t target = atomic_load_explicit(&db->promo_target, memory_order_relaxed);
    if (!target || db->replaying || d->pinned || !relearn || bs != d->hs.cur_start ||
        d->hs.cur_samples * BDB_ROW_BYTES_ESTIMATE <= target)
        return;
    int64_t in_force = bdb_bucket_size_at(&d->hist, d->last_ts);
    /* A smaller size already pending (from the end of this bucket): nothing to do. */
    if (d->hist.e[d->hist.n - 1].size_ms < in_force || !smaller_bucket(in_force))
        return;
    d->hs.promote = 1;
    *relearn = 1;
}

int64_t db_hot_next_size(bdb_db *db, device *d)
{
    int64_t size = 0;
    if (d->relearn)
        size = bdb_bucket_for_class((enum bdb_freq_class)d->learner.cls);
    if (d->hs.promote) {
        int64_t next = smaller_bucket(bdb_bucket_size_at(&d->hist, d->last_ts));
        if (next) {
            d->hs.promo_cap = next;
            size = next;
            atomic_fetch_add(&db->bucket_promotions, 1);
            BDB_INFO("device %s/%s: partition of %llu samples passed the size target; bucket "
                     "promoted to %s",
                     d->tenant->name, d->name, (unsigned long long)d->hs.cur_samples,
                     bdb_bucket_name(next));
        }
    }
    if (size && d->hs.promo_cap && size > d->hs.promo_cap)
        size = d->hs.promo_cap;
    d->relearn = 0;
    d->hs.promote = 0;
    return size;
}

void db_hot_forget_before(device *d, int64_t cutoff)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < d->hs.npc; i++) {
        int64_t start = (int64_t)d->hs.pc[i].minute * BDB_MS_MIN, s, e;
        bdb_bucket_range(&d->hist, start, &s, &e);
        if (e > cutoff)
            d->hs.pc[k++] = d->hs.pc[i];
    }
    d->hs.npc = k;
}

void db_hot_free(device *d)
{
    free(d->hs.pc);
    free(d->hs.subs);
    memset(&d->hs, 0, sizeof d->hs);
}

/* ---------------------------------------------------------------- encoding */

static void put_subs(const device *d, bdb_buf *b)
{
    bdb_buf_put_varint(b, d->hs.promo_cap);
    bdb_buf_put_uvarint(b, d->hs.nsubs);
    for (uint32_t i = 0; i < d->hs.nsubs; i++) {
        bdb_buf_put_varint(b, d->hs.subs[i].from_ms);
        bdb_buf_put_uvarint(b, d->hs.subs[i].n);
    }
}

/* Decodes promo_cap and a sub-bucket history into *cap, *subs, *n (malloc'd). */
static int get_subs(bdb_dec *dec, int64_t *cap, struct db_subent **subs, uint32_t *n)
{
    *cap = bdb_dec_varint(dec);
    uint64_t ns = bdb_dec_uvarint(dec);
    *subs = NULL;
    *n = 0;
    if (dec->err || ns > SUBS_MAX || (*cap != 0 && !strcmp(bdb_bucket_name(*cap), "?")))
        return BDB_ERR_CORRUPT;
    struct db_subent *v = ns ? bdb_malloc(ns * sizeof *v) : NULL;
    if (ns && !v)
        return BDB_ERR_NOMEM;
    for (uint64_t i = 0; i < ns; i++) {
        v[i].from_ms = bdb_dec_varint(dec);
        uint64_t k = bdb_dec_uvarint(dec);
        if (dec->err || k == 0 || k > BDB_SUBBUCKETS_MAX ||
            (i && v[i].from_ms <= v[i - 1].from_ms)) {
            free(v);
            return BDB_ERR_CORRUPT;
        }
        v[i].n = (uint32_t)k;
    }
    *subs = v;
    *n = (uint32_t)ns;
    return BDB_OK;
}

void db_hot_encode(const device *d, bdb_buf *b)
{
    put_subs(d, b);
    bdb_buf_put_uvarint(b, d->hs.npc);
    int64_t prev = 0;
    for (uint32_t i = 0; i < d->hs.npc; i++) {
        bdb_buf_put_varint(b, (int64_t)d->hs.pc[i].minute - prev);
        bdb_buf_put_uvarint(b, d->hs.pc[i].events);
        prev = d->hs.pc[i].minute;
    }
}

int db_hot_decode(device *d, bdb_dec *dec)
{
    int64_t cap;
    struct db_subent *subs;
    uint32_t ns;
    int rc = get_subs(dec, &cap, &subs, &ns);
    if (rc != BDB_OK)
        return rc;
    db_hot_free(d);
    d->hs.promo_cap = cap;
    d->hs.subs = subs;
    d->hs.nsubs = ns;
    uint64_t npc = bdb_dec_uvarint(dec);
    if (dec->err || npc > PCOUNT_MAX || npc > bdb_dec_left(dec))
        return BDB_ERR_CORRUPT;
    d->hs.pc = npc ? bdb_malloc(npc * sizeof *d->hs.pc) : NULL;
    if (npc && !d->hs.pc)
        return BDB_ERR_NOMEM; /* the open fails (alloc.h) */
    d->hs.cap_pc = (uint32_t)npc;
    int64_t prev = 0;
    for (uint64_t i = 0; i < npc; i++) {
        int64_t m = prev + bdb_dec_varint(dec);
        uint64_t ev = bdb_dec_uvarint(dec);
        if (dec->err || m < INT32_MIN || m > INT32_MAX || ev > UINT32_MAX || (i && m <= prev))
            return BDB_ERR_CORRUPT;
        d->hs.pc[i] = (struct db_pcount){(int32_t)m, (uint32_t)ev};
        prev = m;
    }
    d->hs.npc = (uint32_t)npc;
    return BDB_OK;
}

void db_hot_encode_record(const device *d, bdb_buf *out)
{
    bdb_buf_putc(out, 3);
    bdb_buf_put_str(out, d->tenant->name, strlen(d->tenant->name));
    bdb_buf_put_str(out, d->name, d->nlen);
    put_subs(d, out);
}

int db_hot_apply_record(bdb_db *db, bdb_dec *dec)
{
    size_t tl, dl;
    const char *tn = bdb_dec_str(dec, &tl);
    const char *dn = bdb_dec_str(dec, &dl);
    int64_t cap;
    struct db_subent *subs;
    uint32_t ns;
    if (dec->err)
        return BDB_ERR_CORRUPT;
    int rc = get_subs(dec, &cap, &subs, &ns);
    if (rc != BDB_OK) /* NOMEM fails the replay (the open); CORRUPT skips the record */
        return rc;
    device *d = db_get_device(db, tn, tl, dn, dl);
    if (!d) {
        free(subs);
        return BDB_ERR_NOMEM;
    }
    pthread_mutex_lock(dev_lock(db, d));
    free(d->hs.subs);
    d->hs.subs = subs;
    d->hs.nsubs = ns;
    d->hs.promo_cap = cap;
    pthread_mutex_unlock(dev_lock(db, d));
    return BDB_OK;
}

/* ---------------------------------------------------------------- sub-buckets */

/* Caller holds the stripe. BDB_OK, or BDB_ERR_NOMEM with the history unchanged (the
 * room is taken first). */
static int subs_change(device *d, int64_t from, uint32_t n)
{
    dev_hot *h = &d->hs;
    struct db_subent *ns = bdb_realloc(h->subs, (h->nsubs + 1) * sizeof *h->subs);
    if (!ns)
        return BDB_ERR_NOMEM;
    h->subs = ns;
    /* A pending entry (not in force for any event yet) is replaced, not stacked. */
    while (h->nsubs && h->subs[h->nsubs - 1].from_ms >= from)
        h->nsubs--;
    if (subs_at(d, from) == n)
        return BDB_OK; /* the history may have lost a pending entry: log it anyway */
    if (h->nsubs == SUBS_MAX) {
        memmove(h->subs, h->subs + 1, (h->nsubs - 1) * sizeof *h->subs);
        h->nsubs--;
    }
    h->subs[h->nsubs++] = (struct db_subent){from, n};
    return BDB_OK;
}

int db_hot_seed(device *d, int64_t bstart, uint64_t events, uint32_t subs)
{
    dev_hot *h = &d->hs;
    if (subs >= 1 && subs <= BDB_SUBBUCKETS_MAX && subs != subs_at(d, bstart) &&
        (h->nsubs == 0 || bstart > h->subs[h->nsubs - 1].from_ms) &&
        subs_change(d, bstart, subs) != BDB_OK)
        return BDB_ERR_NOMEM;
    int32_t minute;
    if (events == 0 || !minute_of(bstart, &minute))
        return BDB_OK;
    uint32_t ev = events > UINT32_MAX ? UINT32_MAX : (uint32_t)events;
    for (uint32_t i = 0; i < h->npc; i++)
        if (h->pc[i].minute == minute) {
            if (h->pc[i].events < ev)
                h->pc[i].events = ev;
            return BDB_OK;
        }
    pcount_add(h, minute); /* a new partition counts 1 (or nothing out of memory) */
    for (uint32_t i = 0; i < h->npc; i++)
        if (h->pc[i].minute == minute) {
            h->pc[i].events = ev;
            return BDB_OK;
        }
    return BDB_ERR_NOMEM;
}

int bdb_db_set_subbuckets(bdb_db *db, const char *tn, const char *dn, uint32_t n)
{
    if (n == 0 || n > BDB_SUBBUCKETS_MAX)
        return BDB_ERR_INVALID;
    if (atomic_load(&db->readonly))
        return BDB_ERR_READONLY;
    device *d = db_get_device(db, tn, strlen(tn), dn, strlen(dn));
    if (!d)
        return BDB_ERR_NOMEM;
    /* Memory first, so that once the history changed nothing can fail but the WAL
     * append, and that puts the old history back: room for the longest record, and a
     * copy of the history as it was. */
    bdb_buf rec;
    bdb_buf_init_checked(&rec);
    struct db_subent *old = bdb_malloc((SUBS_MAX + 1) * sizeof *old);
    if (!old ||
        bdb_buf_reserve(&rec, 64 + strlen(tn) + strlen(dn) + (SUBS_MAX + 1) * 16) != BDB_OK) {
        free(old);
        bdb_buf_free(&rec);
        return BDB_ERR_NOMEM;
    }
    uint64_t lsn = 0;
    int rc = BDB_OK;
    pthread_rwlock_rdlock(&db->flush_lock);
    pthread_mutex_lock(dev_lock(db, d));
    int64_t from = d->last_ts == INT64_MIN ? bdb_align_down(bdb_clock_now(&db->o.clock), 1000)
                                           : bdb_align_down(d->last_ts, 1000) + 1000;
    uint32_t nold = d->hs.nsubs;
    if (nold)
        memcpy(old, d->hs.subs, nold * sizeof *old);
    int changed =
        subs_at(d, from) != n || (d->hs.nsubs && d->hs.subs[d->hs.nsubs - 1].from_ms >= from);
    if (changed && (rc = subs_change(d, from, n)) != BDB_OK)
        changed = 0; /* out of memory: nothing changed, nothing logged */
    if (changed) {
        db_hot_encode_record(d, &rec);
        /* under the stripe, so that a failed append can restore what it did not log */
        rc = bdb_wal_append(db->wal, rec.data, rec.len, &lsn);
        if (rc != BDB_OK) {
            if (nold) /* subs holds at least nold entries: subs_change only grows it */
                memcpy(d->hs.subs, old, nold * sizeof *old);
            d->hs.nsubs = nold;
            changed = 0;
        }
    }
    pthread_mutex_unlock(dev_lock(db, d));
    pthread_rwlock_unlock(&db->flush_lock);
    free(old);
    if (changed && rc == BDB_OK)
        rc = bdb_wal_sync(db->wal, lsn);
    if (rc == BDB_ERR_READONLY || rc == BDB_ERR_IO)
        db_set_readonly(db, rc, "WAL write");
    if (changed && rc == BDB_OK) {
        atomic_fetch_add(&db->subbucket_changes, 1);
        BDB_INFO("device %s/%s: %u sub-bucket(s) from %lld", tn, dn, n, (long long)from);
    }
    bdb_buf_free(&rec);
    return rc;
}

static device *find_device(bdb_db *db, const char *tn, const char *dn)
{
    pthread_rwlock_rdlock(&db->cat_lock);
    tenant *t = cat_tenant(db, tn, strlen(tn), 0);
    device *d = t ? cat_device(db, t, dn, strlen(dn), 0) : NULL;
    pthread_rwlock_unlock(&db->cat_lock);
    return d;
}

uint32_t bdb_db_subbuckets(bdb_db *db, const char *tn, const char *dn)
{
    device *d = find_device(db, tn, dn);
    if (!d)
        return 1;
    pthread_mutex_lock(dev_lock(db, d));
    uint32_t n = d->hs.nsubs ? d->hs.subs[d->hs.nsubs - 1].n : 1;
    pthread_mutex_unlock(dev_lock(db, d));
    return n;
}

int bdb_db_partition_at(bdb_db *db, const char *tn, const char *dn, int64_t ts, int64_t *start,
                        int64_t *end, uint32_t *subbuckets)
{
    device *d = find_device(db, tn, dn);
    if (!d)
        return BDB_ERR_NOTFOUND;
    pthread_mutex_lock(dev_lock(db, d));
    bdb_bucket_range(&d->hist, ts, start, end);
    *subbuckets = subs_at(d, ts);
    pthread_mutex_unlock(dev_lock(db, d));
    return BDB_OK;
}

/* ---------------------------------------------------------------- settings, stats */

void bdb_db_set_promotion_target(bdb_db *db, uint64_t bytes)
{
    atomic_store(&db->promo_target, bytes);
}

void bdb_db_hot_stats(bdb_db *db, bdb_hot_engine_stats *st)
{
    st->bucket_promotions = atomic_load(&db->bucket_promotions);
    st->subbucket_changes = atomic_load(&db->subbucket_changes);
}

/* ---------------------------------------------------------------- telemetry_by_tenant */

int db_hot_tbt_local(bdb_db *db, const char *tn, int64_t from, int64_t to,
                     int (*cb)(void *ctx, const bdb_tbt_row *r), void *ctx)
{
    /* Rows are copied under the stripe and handed out after it is released. cat_lock
     * stays shared throughout (the callback must not write to the engine): it keeps
     * the tenant's device map from growing under the iteration. */
    pthread_rwlock_rdlock(&db->cat_lock);
    tenant *t = cat_tenant(db, tn, strlen(tn), 0);
    if (!t) {
        pthread_rwlock_unlock(&db->cat_lock);
        return BDB_ERR_NOTFOUND;
    }
    struct row {
        int64_t s, e;
        uint64_t ev;
        uint32_t subs;
    } *rows = NULL;
    size_t cap = 0;
    int rc = 0;
    size_t pos = 0, kl;
    const void *key;
    void *dv;
    while (rc == 0 && bdb_map_next(t->devices, &pos, &key, &kl, &dv)) {
        device *d = dv;
        size_t n = 0;
        pthread_mutex_lock(dev_lock(db, d));
        for (uint32_t i = 0; i < d->hs.npc; i++) {
            int64_t start = (int64_t)d->hs.pc[i].minute * BDB_MS_MIN, s, e;
            bdb_bucket_range(&d->hist, start, &s, &e);
            if (e <= from || s >= to)
                continue;
            if (n == cap) {
                struct row *nr = bdb_realloc(rows, (cap ? cap * 2 : 16) * sizeof *rows);
                if (!nr) {
                    rc = BDB_ERR_NOMEM;
                    break;
                }
                rows = nr;
                cap = cap ? cap * 2 : 16;
            }
            rows[n++] = (struct row){s, e, d->hs.pc[i].events, db_hot_subs_within(d, s, e)};
        }
        pthread_mutex_unlock(dev_lock(db, d));
        for (size_t i = 0; i < n && rc == 0; i++) {
            bdb_tbt_row r = {d->name, rows[i].s, rows[i].e, rows[i].ev, rows[i].subs};
            rc = cb(ctx, &r);
        }
    }
    pthread_rwlock_unlock(&db->cat_lock);
    free(rows);
    return rc;
}

struct forget_ctx {
    bdb_db *db;
    int64_t cutoff;
};

static void forget_one(void *ctx, device *d)
{
    struct forget_ctx *f = ctx;
    pthread_mutex_lock(dev_lock(f->db, d));
    db_hot_forget_before(d, f->cutoff);
    pthread_mutex_unlock(dev_lock(f->db, d));
}

int bdb_db_forget_partition_counts(bdb_db *db, int64_t cutoff)
{
    struct forget_ctx f = {db, cutoff};
    pthread_rwlock_rdlock(&db->cat_lock);
    cat_each_device(db, forget_one, &f);
    pthread_rwlock_unlock(&db->cat_lock);
    return BDB_OK;
}

/* The event counts follow the write path as a consumer (db_consumer.h); the partition
 * layout they decide (sub-buckets, promotion) stays with the device (db_int.h). */
static int hot_apply(bdb_db *db, device *d, const db_apply *a, void *resv)
{
    (void)resv;
    db_hot_count(db, d, a->ts, a->nm, a->relearn);
    return BDB_OK;
}

const db_consumer db_hot_consumer = {.name = "hot", .apply = hot_apply};
