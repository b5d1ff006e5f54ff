/* db_tier_late: the late-data path of the tiers (see db_tier.h, "Late data").
 *
 * A flush turns the samples it froze into partial windows, which merge exactly with
 * the partial windows of earlier flushes. Two kinds of samples must not take that
 * path: a late event (older than late_threshold behind the newest event of its
 * device) and a sample that may rewrite a (series, time) an earlier flush already put
 * in a tier file (raw keeps the newest value; merging would count both). The write
 * path reports every sample older than its device's newest event (db_late_note); the
 * ones of those two kinds mark their (device, minute) dirty. The flush that freezes
 * them recomputes each dirty minute from the raw blocks (which by then hold the
 * frozen samples too), the hour around it from the minute tier and the day from the
 * hour tier, and writes the results into TF_REPLACES files: windows that take the
 * place of every older partial window of the same start.
 *
 * Durability: the dirty set lives in memory only, and that is enough. A mark is made
 * for a sample in the head, which the WAL holds until the flush that recomputes its
 * minute commits (the catalog save). After a crash the replay applies the sample
 * again, and the mark is made again: a device's horizon (late_frozen_ts) after open is
 * the newest event time in the committed catalog, which was encoded under the flush
 * lock right after that flush's freeze (db_catalog.c), so every sample a committed
 * tier file may hold lies at or before it; a device the catalog does not know has
 * nothing in committed tier files (INT64_MIN). With a sink, such a device is unknown
 * (0) and every out-of-order sample of it counts as a possible rewrite until the first
 * flush: the sink may hold its windows though this directory does not know it.
 *
 * Locking: `mu` is a leaf lock (taken under a device stripe by the write path and under
 * flush_lock by the freeze). The frozen set is read and cleared only by the flush
 * thread, under flush_mutex. */
#include "storage/embedded/tier/db_tier.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "storage/embedded/core/db_consumer.h"
#include "storage/embedded/core/db_int.h"
#include "storage/embedded/sink/db_late_sink.h"
#include "storage/embedded/tier/db_tier_int.h"
#include "storage/embedded/sink/db_agg_sink.h"

#include <stdlib.h>
#include <string.h>

#define LATE_RING 256
#define DEFAULT_THRESHOLD (60 * BDB_MS_MIN)

struct mark {
    const device *d;
    int64_t minute;
};

struct late_ev {
    char *tenant, *device;
    int64_t ts, newest, arrived;
    uint64_t seq; /* a sink's late_put: 1, 2, ... in arrival order (db_late_sink.c) */
};

typedef struct lstate {
    bdb_db *db;
    pthread_mutex_t mu;
    struct mark *pend, *frz; /* marks of the head's active part, of the frozen part */
    size_t npend, cappend, nfrz, capfrz;
    struct late_ev ring[LATE_RING];
    size_t ring_n, ring_pos;
    uint64_t ring_seq, sent_seq, put_seq; /* last given, confirmed, handed to the sink */
    int64_t last_log_ms;
    uint64_t unlogged;
    bdb_tier_recompute_fn cb;
    void *cb_ctx;
    _Atomic uint64_t late_events, marks, recomputed[BDB_TIERS], fallbacks;
} lstate;

/* The late path's state pointer in db (db_late_consumer's slot). */
static void **late_slot(bdb_db *db)
{
    return db_consumer_slot(db, &db_late_consumer);
}

/* The newest event time of d frozen by a committed or running flush (db_late_consumer's
 * bytes of the device): INT64_MIN nothing, 0 unknown. Caller holds d's stripe lock. */
static int64_t *frozen_ts(bdb_db *db, const device *d)
{
    return db_consumer_dev(db, d, &db_late_consumer);
}

static void *late_new(bdb_db *db)
{
    lstate *l = bdb_calloc(1, sizeof *l);
    if (l) {
        l->db = db;
        pthread_mutex_init(&l->mu, NULL);
    }
    return l;
}

static lstate *late_get(bdb_db *db)
{
    /* NULL only when out of memory: markers fail (alloc.h) */
    return db_consumer_state(db, &db_late_consumer, late_new);
}

/* Readers never create the state: without it no mark was ever made and no flush
 * froze one, so they answer "none" (and cannot fail for lack of memory). */
static lstate *late_peek(bdb_db *db)
{
    pthread_mutex_lock(&db->ext_mu);
    lstate *l = *late_slot(db);
    pthread_mutex_unlock(&db->ext_mu);
    return l;
}

/* The flush thread's functions (late_frozen_sort ... late_frozen_done) run only from
 * db_tier_flush once the flush succeeded so far, so db_late_freeze has created the
 * state earlier in the same flush, on the same thread. */
static lstate *late_flushing(bdb_db *db)
{
    return *late_slot(db);
}

void db_late_close(bdb_db *db)
{
    lstate *l = db_consumer_take(db, &db_late_consumer);
    if (!l)
        return;
    for (size_t i = 0; i < LATE_RING; i++) {
        free(l->ring[i].tenant);
        free(l->ring[i].device);
    }
    free(l->pend);
    free(l->frz);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

int64_t db_late_threshold(const bdb_db *db)
{
    return db->o.late_threshold_ms > 0 ? db->o.late_threshold_ms : DEFAULT_THRESHOLD;
}

/* Room for n more marks: BDB_OK or BDB_ERR_NOMEM (the list unchanged). */
static int mark_room(struct mark **v, size_t n, size_t *cap, size_t more)
{
    if (*cap - n >= more)
        return BDB_OK;
    size_t nc = *cap ? *cap * 2 : 64;
    while (nc - n < more)
        nc *= 2;
    struct mark *p = bdb_realloc(*v, nc * sizeof *p);
    if (!p)
        return BDB_ERR_NOMEM;
    *v = p;
    *cap = nc;
    return BDB_OK;
}

static int push_mark(struct mark **v, size_t *n, size_t *cap, const device *d, int64_t minute)
{
    /* a batch of late reports usually repeats the minute just marked */
    if (*n && (*v)[*n - 1].d == d && (*v)[*n - 1].minute == minute)
        return BDB_OK;
    if (mark_room(v, *n, cap, 1) != BDB_OK)
        return BDB_ERR_NOMEM;
    (*v)[(*n)++] = (struct mark){d, minute};
    return BDB_OK;
}

int db_late_reserve(bdb_db *db, size_t n)
{
    lstate *l = late_get(db);
    if (!l)
        return BDB_ERR_NOMEM;
    pthread_mutex_lock(&l->mu);
    int rc = mark_room(&l->pend, l->npend, &l->cappend, n);
    pthread_mutex_unlock(&l->mu);
    return rc;
}

/* db.c calls it only for ts <= d->last_ts (an event not newer than the device's newest). */
int db_late_note(bdb_db *db, struct device *d, int64_t ts)
{
    int64_t thr = db_late_threshold(db);
    int late = d->last_ts - ts > thr; /* both are event times: no overflow in practice */
    int64_t frozen = *frozen_ts(db, d);
    int rewrite = frozen == 0 || ts <= frozen;
    if (!late && !rewrite)
        return BDB_OK;
    lstate *l = late_get(db);
    if (!l)
        return BDB_ERR_NOMEM;
    pthread_mutex_lock(&l->mu);
    if (push_mark(&l->pend, &l->npend, &l->cappend, d, bdb_align_down(ts, BDB_MS_MIN))) {
        pthread_mutex_unlock(&l->mu);
        return BDB_ERR_NOMEM;
    }
    atomic_fetch_add(&l->marks, 1);
    char *etn = late && !db->replaying ? bdb_strdup(d->tenant->name) : NULL;
    char *edn = etn ? bdb_strndup(d->name, d->nlen) : NULL;
    if (!edn)
        free(etn);
    if (edn) { /* the list of recent late events is diagnostic: skipped without memory */
        atomic_fetch_add(&l->late_events, 1);
        struct late_ev *e = &l->ring[l->ring_pos];
        free(e->tenant);
        free(e->device);
        e->tenant = etn;
        e->device = edn;
        e->ts = ts;
        e->newest = d->last_ts;
        e->arrived = bdb_clock_now(&db->o.clock);
        e->seq = ++l->ring_seq;
        l->ring_pos = (l->ring_pos + 1) % LATE_RING;
        if (l->ring_n < LATE_RING)
            l->ring_n++;
        /* one log line per 10 s at most: a backfill can be millions of late events */
        int64_t now = bdb_monotonic_ms();
        l->unlogged++;
        if (now - l->last_log_ms >= 10000) {
            BDB_INFO("late data: %llu event(s) more than %lld ms behind their device's newest "
                     "(latest: %s/%s at %lld, %lld ms behind); their windows are recomputed",
                     (unsigned long long)l->unlogged, (long long)thr, e->tenant, e->device,
                     (long long)ts, (long long)(d->last_ts - ts));
            l->unlogged = 0;
            l->last_log_ms = now;
        }
    }
    pthread_mutex_unlock(&l->mu);
    return BDB_OK;
}

static void device_frozen(void *ctx, device *d)
{
    bdb_db *db = ctx;
    pthread_mutex_lock(dev_lock(db, d));
    /* 0 means "unknown"; an epoch-0 newest event rounds up, which only marks more */
    *frozen_ts(db, d) = d->last_ts == 0 ? 1 : d->last_ts;
    pthread_mutex_unlock(dev_lock(db, d));
}

int db_late_freeze(bdb_db *db)
{
    lstate *l = late_get(db);
    if (!l)
        return BDB_ERR_NOMEM;
    pthread_mutex_lock(&l->mu);
    /* Room first: out of memory keeps every mark pending and fails the flush. */
    if (mark_room(&l->frz, l->nfrz, &l->capfrz, l->npend) != BDB_OK) {
        pthread_mutex_unlock(&l->mu);
        return BDB_ERR_NOMEM;
    }
    /* a failed flush leaves its frozen marks: the retry covers both */
    for (size_t i = 0; i < l->npend; i++)
        push_mark(&l->frz, &l->nfrz, &l->capfrz, l->pend[i].d, l->pend[i].minute);
    l->npend = 0;
    pthread_mutex_unlock(&l->mu);
    cat_each_device(db, device_frozen, db);
    return BDB_OK;
}

static int mark_cmp(const void *a, const void *b)
{
    const struct mark *x = a, *y = b;
    if (x->d != y->d)
        return (uintptr_t)x->d < (uintptr_t)y->d ? -1 : 1;
    return (x->minute > y->minute) - (x->minute < y->minute);
}

void late_frozen_sort(bdb_db *db)
{
    lstate *l = late_flushing(db);
    pthread_mutex_lock(&l->mu);
    if (l->nfrz > 1)
        qsort(l->frz, l->nfrz, sizeof *l->frz, mark_cmp);
    size_t k = 0;
    for (size_t i = 0; i < l->nfrz; i++)
        if (k == 0 || mark_cmp(&l->frz[k - 1], &l->frz[i]) != 0)
            l->frz[k++] = l->frz[i];
    l->nfrz = k;
    pthread_mutex_unlock(&l->mu);
}

/* The frozen dirty minutes of device d, ascending (the set sorted by late_frozen_sort;
 * only the flush thread changes it, so no lock is needed to read it). */
static const struct mark *frozen_marks(lstate *l, const device *d, size_t *n)
{
    size_t lo = 0, hi = l->nfrz;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)l->frz[mid].d < (uintptr_t)d)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t e = lo;
    while (e < l->nfrz && l->frz[e].d == d)
        e++;
    *n = e - lo;
    return *n ? l->frz + lo : NULL; /* frz may be NULL: NULL + 0 is undefined in C */
}

void late_frozen_done(bdb_db *db)
{
    lstate *l = late_flushing(db);
    pthread_mutex_lock(&l->mu);
    l->nfrz = 0;
    pthread_mutex_unlock(&l->mu);
}

/* ---------------------------------------------------------------- raw from blocks */

/* the sink (storage/sink.h) keeps one value per time: the lowest priority */
static void sink_add(void *ud, size_t metric, int64_t ts, double v)
{
    (void)metric;
    db_merger_push(ud, ts, v);
}

/* Pushes the samples of key in [lo, hi) from the published blocks, each block a source
 * with its seq as priority (the newest block wins per time, as in raw reads). Caller
 * holds blocks_lock (shared). */
static int blocks_push_locked(bdb_db *db, const bdb_series_key *key, int64_t lo, int64_t hi,
                              db_merger *m)
{
    int rc = BDB_OK;
    for (size_t bi = db_blocks_from(db, lo); bi < db->nblocks && rc == BDB_OK; bi++) {
        const bdb_block_meta *bm = bdb_block_get_meta(db->blocks[bi].b);
        if (bm->window_start >= hi)
            break; /* sorted by window start */
        if (bm->window_end <= lo)
            continue;
        bdb_block_cursor cur;
        int x = bdb_block_find(db->blocks[bi].b, key, &cur);
        if (x == BDB_ERR_NOTFOUND)
            continue;
        db_merger_source(m, bm->seq, 0);
        bdb_chunk_ref c;
        while (x == BDB_OK && (x = bdb_block_cursor_next(&cur, &c)) == 1) {
            x = BDB_OK;
            if (c.max_ts < lo || c.min_ts >= hi)
                continue;
            x = db_merger_push_chunk(m, &c, lo, hi);
        }
        if (x < 0)
            rc = x;
    }
    return rc;
}

static int blocks_push(bdb_db *db, const bdb_series_key *key, int64_t lo, int64_t hi, db_merger *m)
{
    pthread_rwlock_rdlock(&db->blocks_lock);
    int rc = blocks_push_locked(db, key, lo, hi, m);
    pthread_rwlock_unlock(&db->blocks_lock);
    return rc;
}

/* Unless rc already failed, adds the merged samples of m to r; frees m. */
static int merged_into(db_merger *m, int rc, bdb_rollup *r)
{
    if (rc == BDB_OK)
        rc = tier_merge_into(m, r);
    db_merger_free(m);
    return rc;
}

/* Adds the samples of series s in [lo, hi) from the published blocks only, the newest
 * block winning per time as in raw reads, to r. The active head is left out on
 * purpose: its samples reach the tiers with a later flush. */
static int blocks_into(bdb_db *db, const series *s, int64_t lo, int64_t hi, bdb_rollup *r)
{
    db_merger m;
    memset(&m, 0, sizeof m);
    const char *tn = s->dev->tenant->name;
    bdb_series_key key = {tn, strlen(tn), s->dev->name, s->dev->nlen, s->metric, s->mlen};
    int rc = blocks_push(db, &key, lo, hi, &m);
    if (rc == BDB_OK && db->o.sink) {
        const char *mn[1] = {s->metric};
        db_merger_source(&m, 0, 0);
        rc = db_sink_read(db, s->dev, tn, s->dev->name, mn, 1, lo, hi, sink_add, &m);
    }
    return merged_into(&m, rc, r);
}

/* Head chunks sit above every block: later writes than anything flushed. */
#define HEAD_PRIO (UINT64_C(1) << 62)

/* ---------------------------------------------------------------- cached minutes */

/* A minute window as the cache keeps it: statistics only (the cache serves readers
 * that show no quantile, whose windows hold no sketch). */
typedef bdb_stwin cmin_t;

/* Adds the cached minutes v[0..n) that start in [lo, hi) to r (stats_only). Each
 * minute of r comes from one unit only, so the merge into an empty window is a copy:
 * the same window the raw path builds. */
static int cmin_into(const cmin_t *v, size_t n, int64_t lo, int64_t hi, bdb_rollup *r)
{
    size_t a = 0, b;
    while (a < n && v[a].start < lo) /* v ascending */
        a++;
    for (b = a; b < n && v[b].start < hi; b++)
        ;
    /* the units come in time order: appended at once after the windows r holds */
    int rc = bdb_rollup_append_stats(r, v + a, b - a);
    if (rc != BDB_ERR_INVALID)
        return rc;
    bdb_window w;
    bdb_sketch_init_default(&w.sk);
    for (rc = BDB_OK; a < b && rc == BDB_OK; a++) {
        w.start = v[a].start;
        w.st = v[a].st;
        rc = bdb_rollup_merge_window(r, &w);
    }
    bdb_sketch_free(&w.sk);
    return rc;
}

/* The minutes of key in unit [u, u + U) from the blocks alone, through the cache, added
 * to r where they start in [lo, hi). *done = 0 when the unit must take the raw path
 * instead (no block holds it, or it holds non-finite samples, which r->skipped counts:
 * a cached unit never has any). */
static int unit_minutes(bdb_db *db, const bdb_series_key *key, int64_t u, int64_t U, int64_t lo,
                        int64_t hi, bdb_buf *k, bdb_rollup *r, int *done)
{
    *done = 0;
    if (!db_unit_admit(db, 'M', key, u, U, k))
        return BDB_OK; /* asked once so far: from raw */
    pthread_rwlock_rdlock(&db->blocks_lock);
    int rc = db_unit_key(db, 'M', key, u, U, k);
    if (rc != BDB_OK) {
        pthread_rwlock_unlock(&db->blocks_lock);
        return rc == BDB_ERR_NOTFOUND ? BDB_OK : rc;
    }
    size_t len;
    bdb_rcache_ent *ref;
    const cmin_t *v = bdb_rcache_get(db->rcache, k->data, k->len, &len, &ref);
    if (v) {
        pthread_rwlock_unlock(&db->blocks_lock);
        rc = cmin_into(v, len / sizeof *v, lo, hi, r);
        bdb_rcache_release(db->rcache, ref);
        *done = rc == BDB_OK;
        return rc;
    }
    /* a miss: the unit's minutes from the same blocks the key names (still locked) */
    db_merger m;
    memset(&m, 0, sizeof m);
    bdb_rollup ru;
    bdb_rollup_init(&ru, BDB_MS_MIN);
    ru.stats_only = 1;
    rc = blocks_push_locked(db, key, u, u + U, &m);
    pthread_rwlock_unlock(&db->blocks_lock);
    if (rc == BDB_OK)
        rc = tier_merge_into(&m, &ru);
    db_merger_free(&m);
    /* a chunk of the unit that does not decode, maybe outside [lo, hi): the raw path
     * reads only the range, and reports what it meets there */
    if (rc != BDB_OK && rc != BDB_ERR_NOMEM)
        rc = BDB_OK, ru.skipped = 1;
    cmin_t *nv = NULL;
    if (rc == BDB_OK && ru.skipped == 0 && (nv = bdb_malloc((ru.n ? ru.n : 1) * sizeof *nv))) {
        for (size_t i = 0; i < ru.n; i++)
            nv[i] = (cmin_t){ru.w[i].start, ru.w[i].st};
        rc = cmin_into(nv, ru.n, lo, hi, r);
        if (rc == BDB_OK) {
            *done = 1;
            bdb_rcache_put(db->rcache, k->data, k->len, nv, ru.n * sizeof *nv);
        } else {
            free(nv);
        }
    }
    bdb_rollup_free(&ru);
    return rc;
}

int tier_raw_minutes(bdb_db *db, device *d, const char *metric, int64_t lo, int64_t hi,
                     bdb_rollup *r)
{
    db_merger m;
    memset(&m, 0, sizeof m);
    size_t ml = strlen(metric);
    /* The head before the blocks: a flush that moves samples from one to the other in
     * between gives them twice (one kept per time), never not at all. */
    pthread_rwlock_rdlock(&db->flush_lock);
    pthread_mutex_lock(dev_lock(db, d));
    series *s = cat_series(db, d, metric, ml, 0);
    if (s) {
        uint64_t base = db_merger_add_list(&m, s->frozen, lo, hi, HEAD_PRIO, NULL, NULL);
        db_merger_add_list(&m, s->active, lo, hi, base, NULL, NULL);
    }
    pthread_mutex_unlock(dev_lock(db, d));
    pthread_rwlock_unlock(&db->flush_lock);
    /* the head's samples (few) merged on their own: one ascending run, newer as a rule
     * than the blocks' run after it, which the final merge then only rotates */
    int rc = db_merger_sort(&m);
    const char *tn = d->tenant->name;
    bdb_series_key key = {tn, strlen(tn), d->name, d->nlen, metric, ml};
    int64_t U = db->o.block_window_ms, first = 0;
    size_t nunits = 0;
    /* The cache (stats only, whole minutes): per block window ("unit") without head
     * samples, the minutes of its blocks, which are immutable; a unit the head has
     * samples in is merged from raw with them as before. Units are whole minutes and
     * no sample of one can replace a sample of another, so the split changes nothing:
     * each minute is built from the same samples in the same runs. */
    if (rc != BDB_OK || !r->stats_only || r->width != BDB_MS_MIN || U % BDB_MS_MIN != 0 ||
        lo % BDB_MS_MIN != 0 || hi % BDB_MS_MIN != 0 ||
        !db_cache_units(db, lo, hi, &first, &nunits)) {
        if (rc == BDB_OK)
            rc = blocks_push(db, &key, lo, hi, &m);
        return merged_into(&m, rc, r);
    }
    bdb_buf k;
    bdb_buf_init_checked(&k);
    size_t h = 0; /* the next head sample not before the unit */
    for (size_t ui = 0; ui < nunits && rc == BDB_OK; ui++) {
        int64_t u = first + (int64_t)ui * U;
        int64_t a = u < lo ? lo : u, b = hi - u > U ? u + U : hi;
        while (h < m.n && m.t[h].ts < a)
            h++;
        int done = 0;
        if (h == m.n || m.t[h].ts >= b)
            rc = unit_minutes(db, &key, u, U, a, b, &k, r, &done);
        if (rc == BDB_OK && !done)
            rc = blocks_push(db, &key, a, b, &m);
    }
    bdb_buf_free(&k);
    return merged_into(&m, rc, r);
}

int tier_raw_key_minutes(bdb_db *db, const bdb_series_key *key, int64_t lo, int64_t hi,
                         bdb_rollup *r)
{
    db_merger m;
    memset(&m, 0, sizeof m);
    int rc = blocks_push(db, key, lo, hi, &m);
    return merged_into(&m, rc, r);
}

/* ---------------------------------------------------------------- recompute */

/* Removes from r the windows whose start lies in [a, a + w) for a window of cover. */
static void drop_covered(bdb_rollup *r, const bdb_rollup *cover)
{
    bdb_window empty;
    memset(&empty, 0, sizeof empty);
    for (size_t i = 0; i < cover->n; i++) {
        int64_t a = cover->w[i].start, b = a + cover->width;
        for (size_t k = 0; k < r->n;) {
            if (r->w[k].start >= a && r->w[k].start < b) {
                empty.start = r->w[k].start;
                bdb_rollup_set_window(r, &empty); /* removes it: r->w[k] is the next */
            } else {
                k++;
            }
        }
    }
}

/* Replacement windows at tier k (1h or 1d) around the replacements of tier k - 1: per
 * coarse window, the finer tier's committed files, then this flush's partial windows
 * (part[k - 1]), then the finer replacements, folded into one window. */
static int coarse_replace(bdb_db *db, const series *s, int k, const bdb_rollup *part,
                          bdb_rollup *rep)
{
    enum bdb_res fine = (enum bdb_res)k; /* tier index k - 1 is resolution k */
    int64_t w = rep[k].width;
    int rc = BDB_OK;
    bdb_rollup base;
    bdb_rollup_init(&base, bdb_res_width(fine));
    bdb_window out;
    bdb_sketch_init_default(&out.sk);
    int64_t done = INT64_MIN;
    for (size_t i = 0; i < rep[k - 1].n && rc == BDB_OK; i++) {
        int64_t a = bdb_align_down(rep[k - 1].w[i].start, w), b = a + w;
        if (a == done) /* rep[k - 1] is sorted: windows of one coarse window are together */
            continue;
        done = a;
        bdb_rollup_reset(&base);
        if (k == 1 && tier_derived(db)) {
            /* no minute files: the hour's minutes from raw, which the blocks hold whole
             * by now (this flush's samples included) */
            rc = blocks_into(db, s, a, b, &base);
        } else {
            rc = tier_read_files(db, s->dev->tenant->name, s->dev->name, s->metric, fine, a, b,
                                 &base);
            if (rc == BDB_OK) /* sink: what another data directory flushed there */
                rc = agg_sink_inherited_fill(db, s, fine, a, b, &base);
            for (size_t j = 0; j < part[k - 1].n && rc == BDB_OK; j++)
                if (part[k - 1].w[j].start >= a && part[k - 1].w[j].start < b)
                    rc = bdb_rollup_merge_window(&base, &part[k - 1].w[j]);
            for (size_t j = i; j < rep[k - 1].n && rep[k - 1].w[j].start < b && rc == BDB_OK; j++)
                rc = bdb_rollup_set_window(&base, &rep[k - 1].w[j]);
        }
        out.start = a;
        bdb_stats_init(&out.st);
        bdb_sketch_reset(&out.sk);
        if (rc == BDB_OK)
            rc = bdb_rollup_fold(&base, a, b, &out);
        if (rc == BDB_OK)
            rc = bdb_rollup_set_window(&rep[k], &out);
    }
    bdb_sketch_free(&out.sk);
    bdb_rollup_free(&base);
    return rc;
}

/* Whether tier res (or raw, BDB_RES_RAW) still holds everything from start on, so a
 * window starting there can be rebuilt from it. */
static int complete_from(bdb_db *db, const char *tn, enum bdb_res res, int64_t start)
{
    if (res == BDB_RES_RAW)
        return start >= bdb_db_retention_cutoff(db, tn);
    int64_t keep = tier_retention(db, tn, res);
    return keep <= 0 || start >= bdb_clock_now(&db->o.clock) - keep;
}

int late_recompute(bdb_db *db, const series *s, bdb_rollup *part, bdb_rollup *rep)
{
    lstate *l = late_flushing(db);
    size_t nm;
    const struct mark *m = frozen_marks(l, s->dev, &nm);
    const char *tn = s->dev->tenant->name;
    int rc = BDB_OK;
    /* the dirty minutes this series has frozen samples in, and that can be rebuilt */
    for (size_t i = 0; i < nm && rc == BDB_OK; i++) {
        int64_t mn = m[i].minute;
        if (!bdb_rollup_find(&part[0], mn))
            continue;
        /* the hour is rebuilt from its minutes: from raw when the 1m tier is derived */
        if (!complete_from(db, tn, BDB_RES_RAW, mn) ||
            !complete_from(db, tn, tier_derived(db) ? BDB_RES_RAW : BDB_RES_1M,
                           bdb_align_down(mn, BDB_MS_HOUR)) ||
            !complete_from(db, tn, BDB_RES_1H, bdb_align_down(mn, BDB_MS_DAY))) {
            atomic_fetch_add(&l->fallbacks, 1);
            continue; /* the finer data is gone: keep the partial window */
        }
        rc = blocks_into(db, s, mn, mn + BDB_MS_MIN, &rep[0]);
    }
    if (rc != BDB_OK || rep[0].n == 0)
        return rc;
    /* minutes: the recomputed windows take the place of this flush's partial ones */
    drop_covered(&part[0], &rep[0]);
    for (int k = 1; k < BDB_TIERS && rc == BDB_OK; k++) {
        bdb_rollup_reset(&part[k]);
        rc = bdb_rollup_merge(&part[k], &part[k - 1]);
        if (rc == BDB_OK)
            rc = coarse_replace(db, s, k, part, rep);
        if (rc == BDB_OK)
            drop_covered(&part[k], &rep[k]);
    }
    return rc;
}

void late_recomputed(bdb_db *db, const series *s, enum bdb_res res, int64_t start)
{
    lstate *l = late_flushing(db);
    atomic_fetch_add(&l->recomputed[res - 1], 1);
    if (l->cb)
        l->cb(l->cb_ctx, s->dev->tenant->name, s->dev->name, s->metric, res, start);
}

/* ---------------------------------------------------------------- public */

void bdb_db_tier_set_recompute_hook(bdb_db *db, bdb_tier_recompute_fn cb, void *ctx)
{
    lstate *l = late_get(db);
    if (!l) { /* at start only; without memory for it the server does not start either */
        BDB_ERROR("out of memory setting the tier recompute hook");
        return;
    }
    pthread_mutex_lock(&db->flush_mutex); /* the flush thread calls it */
    l->cb = cb;
    l->cb_ctx = ctx;
    pthread_mutex_unlock(&db->flush_mutex);
}

void bdb_db_late_get_stats(bdb_db *db, bdb_late_stats *st)
{
    lstate *l = late_peek(db);
    memset(st, 0, sizeof *st);
    st->threshold_ms = db_late_threshold(db);
    if (!l)
        return;
    st->late_events = atomic_load(&l->late_events);
    st->dirty_marks = atomic_load(&l->marks);
    for (int k = 0; k < BDB_TIERS; k++)
        st->recomputed[k] = atomic_load(&l->recomputed[k]);
    st->fallbacks = atomic_load(&l->fallbacks);
    pthread_mutex_lock(&l->mu);
    st->pending = l->npend + l->nfrz;
    pthread_mutex_unlock(&l->mu);
}

void db_late_unsent(bdb_db *db, void (*fn)(void *ud, const bdb_late_event *e), void *ud)
{
    lstate *l = late_peek(db);
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    uint64_t top = 0;
    for (size_t i = 0; i < l->ring_n; i++) {
        const struct late_ev *e = &l->ring[(l->ring_pos + LATE_RING - 1 - i) % LATE_RING];
        if (e->seq <= l->sent_seq)
            continue;
        bdb_late_event out = {e->tenant, e->device, e->ts, e->newest, e->arrived, e->seq};
        fn(ud, &out);
        if (e->seq > top)
            top = e->seq;
    }
    l->put_seq = top > l->sent_seq ? top : l->sent_seq;
    pthread_mutex_unlock(&l->mu);
}

void db_late_sent(bdb_db *db)
{
    lstate *l = late_peek(db);
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    if (l->put_seq > l->sent_seq)
        l->sent_seq = l->put_seq;
    pthread_mutex_unlock(&l->mu);
}

int db_late_recent_local(bdb_db *db, const char *tn, const char *dn,
                         int (*cb)(void *ctx, const bdb_late_event *e), void *ctx)
{
    lstate *l = late_peek(db);
    if (!l) /* no late event yet */
        return BDB_OK;
    pthread_mutex_lock(&l->mu);
    int stop = 0;
    for (size_t i = 0; i < l->ring_n && !stop; i++) {
        /* newest first */
        const struct late_ev *e = &l->ring[(l->ring_pos + LATE_RING - 1 - i) % LATE_RING];
        if ((tn && strcmp(tn, e->tenant)) || (dn && strcmp(dn, e->device)))
            continue;
        bdb_late_event out = {e->tenant, e->device, e->ts, e->newest, e->arrived, e->seq};
        stop = cb(ctx, &out);
    }
    pthread_mutex_unlock(&l->mu);
    return BDB_OK;
}

/* ---------------------------------------------------------------- reads */

static int i64_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

size_t late_dirty_minutes(bdb_db *db, const char *tn, const char *dn, int64_t **out)
{
    *out = NULL;
    pthread_rwlock_rdlock(&db->cat_lock);
    tenant *te = cat_tenant(db, tn, strlen(tn), 0);
    device *d = te ? cat_device(db, te, dn, strlen(dn), 0) : NULL;
    pthread_rwlock_unlock(&db->cat_lock);
    if (!d)
        return 0;
    lstate *l = late_peek(db);
    if (!l) /* no mark was ever made */
        return 0;
    size_t n = 0, cap = 0;
    int64_t *v = NULL;
    pthread_mutex_lock(&l->mu);
    for (int k = 0; k < 2; k++) {
        const struct mark *m = k ? l->frz : l->pend;
        size_t nm = k ? l->nfrz : l->npend;
        for (size_t i = 0; i < nm; i++) {
            if (m[i].d != d)
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                int64_t *nv = bdb_realloc(v, cap * sizeof *v);
                if (!nv) {
                    pthread_mutex_unlock(&l->mu);
                    free(v);
                    return LATE_NOMEM;
                }
                v = nv;
            }
            v[n++] = m[i].minute;
        }
    }
    pthread_mutex_unlock(&l->mu);
    if (n > 1)
        qsort(v, n, sizeof *v, i64_cmp);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || v[k - 1] != v[i])
            v[k++] = v[i];
    *out = v;
    return k;
}

int bdb_db_late_marked_windows(bdb_db *db, const char *tn, enum bdb_res res, int64_t from,
                               int64_t to, int64_t **starts, size_t *n)
{
    *starts = NULL;
    *n = 0;
    int64_t w = bdb_res_width(res);
    if (w == 0 || from >= to)
        return BDB_ERR_INVALID;
    int64_t lo = bdb_align_down(from, w);
    pthread_rwlock_rdlock(&db->cat_lock);
    const tenant *te = cat_tenant(db, tn, strlen(tn), 0);
    pthread_rwlock_unlock(&db->cat_lock);
    lstate *l = te ? late_peek(db) : NULL;
    if (!l) /* no such tenant, or no mark was ever made */
        return BDB_OK;
    size_t k = 0, cap = 0;
    int64_t *v = NULL;
    int rc = BDB_OK;
    pthread_mutex_lock(&l->mu);
    for (int f = 0; f < 2 && rc == BDB_OK; f++) {
        const struct mark *m = f ? l->frz : l->pend;
        size_t nm = f ? l->nfrz : l->npend;
        for (size_t i = 0; i < nm; i++) {
            int64_t a = bdb_align_down(m[i].minute, w);
            if (m[i].d->tenant != te || a < lo || a >= to || (k && v[k - 1] == a))
                continue;
            if (k == cap) {
                cap = cap ? cap * 2 : 16;
                int64_t *nv = bdb_realloc(v, cap * sizeof *v);
                if (!nv) {
                    rc = BDB_ERR_NOMEM;
                    break;
                }
                v = nv;
            }
            v[k++] = a;
        }
    }
    pthread_mutex_unlock(&l->mu);
    if (rc != BDB_OK) {
        free(v);
        return rc;
    }
    if (k > 1)
        qsort(v, k, sizeof *v, i64_cmp);
    size_t u = 0;
    for (size_t i = 0; i < k; i++)
        if (u == 0 || v[u - 1] != v[i])
            v[u++] = v[i];
    *starts = v;
    *n = u;
    return BDB_OK;
}

/* The minute windows of raw data in [a, b) of one metric (newest write per time). */
static int raw_minutes(bdb_db *db, const char *tn, const char *dn, const char *metric, int64_t a,
                       int64_t b, bdb_rollup *r)
{
    bdb_samples s;
    memset(&s, 0, sizeof s);
    const char *m[1] = {metric};
    int rc = bdb_db_read(db, tn, dn, m, 1, a, b, &s, NULL);
    for (size_t i = 0; i < s.n && rc == BDB_OK; i++)
        rc = bdb_rollup_add(r, s.ts[i], s.v[i]);
    bdb_samples_free(&s);
    return rc;
}

/* Puts the raw minute window of every dirty minute in [a, b) into r (in place of what
 * r has for it; removes it when raw has no sample there). */
static int replace_dirty(bdb_db *db, const char *tn, const char *dn, const char *metric,
                         const int64_t *dirty, size_t nd, int64_t a, int64_t b, bdb_rollup *r)
{
    size_t i = 0;
    while (i < nd && dirty[i] < a)
        i++;
    if (i == nd || dirty[i] >= b)
        return BDB_OK;
    size_t e = i;
    while (e < nd && dirty[e] < b)
        e++;
    bdb_rollup raw;
    bdb_rollup_init(&raw, BDB_MS_MIN);
    int rc = raw_minutes(db, tn, dn, metric, dirty[i], dirty[e - 1] + BDB_MS_MIN, &raw);
    bdb_window empty;
    memset(&empty, 0, sizeof empty);
    int64_t cutoff = bdb_db_retention_cutoff(db, tn);
    for (size_t k = i; k < e && rc == BDB_OK; k++) {
        if (dirty[k] < cutoff) /* raw has expired there: keep what the tier says */
            continue;
        const bdb_window *w = bdb_rollup_find(&raw, dirty[k]);
        empty.start = dirty[k];
        rc = bdb_rollup_set_window(r, w ? w : &empty);
    }
    bdb_rollup_free(&raw);
    return rc;
}

int late_fix_read(bdb_db *db, const char *tn, const char *dn, const char *const *metrics,
                  size_t nmetrics, enum bdb_res res, int64_t from, int64_t to, const int64_t *dirty,
                  size_t nd, bdb_rollup *out)
{
    int64_t w = bdb_res_width(res), lo = bdb_align_down(from, w);
    int rc = BDB_OK;
    bdb_rollup fine;
    bdb_rollup_init(&fine, BDB_MS_MIN);
    bdb_window cw;
    bdb_sketch_init_default(&cw.sk);
    for (size_t m = 0; m < nmetrics && rc == BDB_OK; m++) {
        if (res == BDB_RES_1M) {
            rc = replace_dirty(db, tn, dn, metrics[m], dirty, nd, lo, to, &out[m]);
            continue;
        }
        /* a coarse window around dirty minutes: its minutes (files and head), the
         * dirty ones from raw, folded */
        int64_t done = INT64_MIN;
        for (size_t i = 0; i < nd && rc == BDB_OK; i++) {
            int64_t a = bdb_align_down(dirty[i], w);
            if (a == done || a < lo || a >= to)
                continue;
            done = a;
            if (!complete_from(db, tn, BDB_RES_1M, a))
                continue; /* its minutes are gone: the window stays as read */
            const char *one[1] = {metrics[m]};
            rc = tier_read_merged(db, tn, dn, one, 1, BDB_RES_1M, a, a + w, &fine);
            if (rc == BDB_ERR_NOTFOUND)
                rc = BDB_OK;
            if (rc == BDB_OK)
                rc = replace_dirty(db, tn, dn, metrics[m], dirty, nd, a, a + w, &fine);
            cw.start = a;
            bdb_stats_init(&cw.st);
            bdb_sketch_reset(&cw.sk);
            if (rc == BDB_OK)
                rc = bdb_rollup_fold(&fine, a, a + w, &cw);
            if (rc == BDB_OK)
                rc = bdb_rollup_set_window(&out[m], &cw);
        }
    }
    bdb_sketch_free(&cw.sk);
    bdb_rollup_free(&fine);
    return rc;
}

/* ---------------------------------------------------------------- dropping a tenant */

static size_t keep_marks(struct mark *v, size_t n, const struct tenant *t)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i].d->tenant != t)
            v[k++] = v[i];
    return k;
}

void db_late_forget_tenant(bdb_db *db, const struct tenant *t)
{
    lstate *l = late_peek(db);
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    /* The marks point at the tenant's devices, which the caller frees next. */
    l->npend = keep_marks(l->pend, l->npend, t);
    l->nfrz = keep_marks(l->frz, l->nfrz, t);
    /* The recent-events ring is packed again, oldest first from slot 0, without the
     * tenant's events, so readers (newest first from ring_pos back) see no gap. */
    struct late_ev keep[LATE_RING];
    size_t nk = 0;
    for (size_t i = 0; i < l->ring_n; i++) {
        struct late_ev *e = &l->ring[(l->ring_pos + LATE_RING - l->ring_n + i) % LATE_RING];
        if (e->tenant && !strcmp(e->tenant, t->name)) {
            free(e->tenant);
            free(e->device);
        } else {
            keep[nk++] = *e;
        }
        e->tenant = e->device = NULL;
    }
    for (size_t i = 0; i < LATE_RING; i++) {
        free(l->ring[i].tenant);
        free(l->ring[i].device);
        l->ring[i] = i < nk ? keep[i] : (struct late_ev){0};
    }
    l->ring_n = nk;
    l->ring_pos = nk % LATE_RING;
    pthread_mutex_unlock(&l->mu);
}

/* ---------------------------------------------------------------- consumer */

/* A write batch's reports that may mark a late minute: not newer than their device's
 * newest event or than an earlier report of the batch. */
struct late_batch {
    size_t n;
    int64_t max;
    int seen;
};

static void late_dev_init(bdb_db *db, device *d, int loaded)
{
    if (loaded) {
        /* The catalog is encoded under the flush lock right after the freeze, so its
         * newest event time is the newest the last committed flush froze: samples at
         * or before it may rewrite a tier window (0 is "unknown"). */
        *frozen_ts(db, d) = d->last_ts == INT64_MIN ? INT64_MIN : d->last_ts == 0 ? 1 : d->last_ts;
        return;
    }
    /* A device the catalog did not know has no window in a committed tier file (the
     * files of a flush that did not commit are deleted at open), so none of its samples
     * rewrites one: no late mark for being out of order. With a sink the windows are
     * also in the sink, which a fresh data directory does not know: unknown (0). */
    *frozen_ts(db, d) = db->o.sink ? 0 : INT64_MIN;
}

static int late_c_reserve(bdb_db *db, device *d, const bdb_report *r, series *const *ser,
                          void *resv, void *batch)
{
    (void)db, (void)ser, (void)resv;
    struct late_batch *b = batch;
    if (r->ts_ms <= d->last_ts || (b->seen && r->ts_ms <= b->max))
        b->n++;
    if (!b->seen || r->ts_ms > b->max) {
        b->max = r->ts_ms;
        b->seen = 1;
    }
    return BDB_OK;
}

static int late_c_reserve_batch(bdb_db *db, void *batch)
{
    const struct late_batch *b = batch;
    return b->n ? db_late_reserve(db, b->n) : BDB_OK;
}

static int late_c_apply(bdb_db *db, device *d, const db_apply *a, void *resv)
{
    (void)resv;
    return a->ts <= a->prev_last_ts ? db_late_note(db, d, a->ts) : BDB_OK;
}

const db_consumer db_late_consumer = {
    .name = "late",
    .batch_size = sizeof(struct late_batch),
    .dev_size = sizeof(int64_t),
    .dev_init = late_dev_init,
    .reserve = late_c_reserve,
    .reserve_batch = late_c_reserve_batch,
    .apply = late_c_apply,
    .freeze = db_late_freeze,
    .forget_tenant = db_late_forget_tenant,
    .close = db_late_close,
};
