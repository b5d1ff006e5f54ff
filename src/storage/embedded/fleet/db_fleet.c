/* db_fleet: the fleet state (files loaded at first use, the recomputed-window list),
 * head samples and reads merged with the head (see db_fleet.h for the crash rules; the
 * flush hook in db_fleet_flush.c, compaction and retention in db_fleet_maint.c).
 *
 * Locking: fleet_lock (rwlock, one per db) guards the file list and the coverage
 * marks. Readers hold it shared across the whole read: files, then flush_lock (shared),
 * cat_lock (shared) and each device stripe for the head. The flush hook runs under
 * flush_mutex and takes fleet_lock exclusively only to publish, withdraw or swap
 * files, holding nothing else. Order:
 *   flush_mutex -> fleet_lock -> flush_lock -> cat_lock -> device stripe.
 * fleet_lock and the tiers' tier_lock are never held together.
 *
 * Frozen chunks and fleet files: after the hook publishes a flush's files and before
 * that flush frees its frozen chunks, the same samples are in both. The hook records
 * covered_at = the flush count and the sorted addresses of the frozen chunks it
 * aggregated; the flush count grows only once those chunks are freed. A reader skips
 * a frozen chunk exactly when covered_at equals the current count and the chunk is in
 * the covered set, so chunks frozen by a retry after a failed flush are still read
 * from the head until the retry publishes them. */
#include "storage/embedded/fleet/db_fleet.h"
#include "common/alloc.h"
#include "common/path.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/map.h"
#include "common/timeutil.h"
#include "storage/embedded/fleet/db_fleet_int.h"
#include "storage/embedded/core/db_consumer.h"
#include "storage/embedded/core/db_int.h"
#include "storage/embedded/fileset/fileset.h"
#include "storage/embedded/tier/db_tier.h"
#include "storage/embedded/sink/db_agg_sink.h" /* sink: fleet rows (db_agg_sink.c) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int file_cmp(const void *x, const void *y)
{
    const ffile *a = *(ffile *const *)x, *b = *(ffile *const *)y;
    if (a->ri != b->ri)
        return a->ri < b->ri ? -1 : 1;
    if (a->start != b->start)
        return a->start < b->start ? -1 : 1;
    return (a->seq > b->seq) - (a->seq < b->seq);
}

/* Room for extra more files, so that fl_files_add cannot fail where undoing is hard. */
int fl_files_reserve(fstate *t, size_t extra)
{
    if (t->n + extra <= t->cap)
        return BDB_OK;
    size_t cap = t->cap ? t->cap * 2 : 16;
    while (cap < t->n + extra)
        cap *= 2;
    ffile **nf = fl_realloc(t->files, cap * sizeof *t->files);
    if (!nf)
        return BDB_ERR_NOMEM;
    t->files = nf;
    t->cap = cap;
    return BDB_OK;
}

/* The caller reserved the room (fl_files_reserve) and holds the lock exclusively. */
void fl_files_add(fstate *t, ffile *f)
{
    t->files[t->n++] = f;
    qsort(t->files, t->n, sizeof *t->files, file_cmp);
    if (f->seq >= t->next_seq)
        t->next_seq = f->seq + 1;
}

/* ---------------------------------------------------------------- load */

/* The fleet kind of window file (fileset.h): sub ri is the directory of resolution ri. */

static int fleet_replaced(void *ctx, int sub, uint8_t *data, size_t len, bdb_fileset_seqs *out)
{
    (void)ctx;
    (void)sub;
    ffile *f = bdb_calloc(1, sizeof *f);
    const char *why = NULL;
    int rc = f ? fl_parse(data, len, f, &why) : BDB_ERR_NOMEM;
    if (rc != BDB_OK)
        free(data); /* fl_parse took it only on success */
    else
        rc = bdb_fileset_seqs_add(out, f->inputs, f->ninputs);
    fl_file_free(f);
    return rc == BDB_ERR_NOMEM ? rc : BDB_OK;
}

static int fleet_parse(void *ctx, int sub, const char *dir, const char *name, uint8_t *data,
                       size_t len, void **out, uint64_t *seq, uint64_t *upto, const char **why)
{
    (void)ctx;
    (void)dir;
    (void)name;
    ffile *f = bdb_calloc(1, sizeof *f);
    int rc = f ? fl_parse(data, len, f, why) : BDB_ERR_NOMEM;
    if (rc != BDB_OK) {
        free(data);
        free(f);
        return rc;
    }
    if (f->ri != sub) {
        fl_file_free(f);
        *why = "resolution does not match its directory";
        return BDB_ERR_CORRUPT;
    }
    *out = f;
    *seq = f->seq;
    *upto = f->wal_upto;
    return BDB_OK;
}

static void fleet_discard(void *ctx, void *f)
{
    (void)ctx;
    fl_file_free(f);
}

static int fleet_keep(void *ctx, int sub, void *fp, const char *path)
{
    (void)sub;
    fstate *t = ctx;
    ffile *f = fp;
    f->path = fl_strndup(path, strlen(path));
    if (!f->path || fl_files_reserve(t, 1) != BDB_OK) {
        fl_file_free(f);
        return BDB_ERR_NOMEM;
    }
    fl_files_add(t, f);
    return BDB_OK;
}

static const bdb_fileset_kind fleet_kind = {
    .name = "fleet",
    .ext = ".fleet",
    .replaced = fleet_replaced,
    .parse = fleet_parse,
    .discard = fleet_discard,
    .keep = fleet_keep,
};

/* ---------------------------------------------------------------- dirty windows */

static int dirty_cmp(const fdirty *a, const char *tn, const char *mn, int ri, int64_t start)
{
    int c = fl_rec_cmp(a->tenant, a->metric, tn, mn);
    if (c)
        return c;
    if (a->ri != ri)
        return a->ri < ri ? -1 : 1;
    return (a->start > start) - (a->start < start);
}

/* Index of the first entry >= key. */
static size_t dirty_pos(const fstate *t, const char *tn, const char *mn, int ri, int64_t start)
{
    size_t lo = 0, hi = t->ndirty;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (dirty_cmp(&t->dirty[mid], tn, mn, ri, start) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The late path recomputed a device's window: the fleet window of that start now
 * holds a stale partial of that device, so reads answer it from the device tiers. */
static void on_recompute(void *ctx, const char *tn, const char *dn, const char *mn,
                         enum bdb_res res, int64_t start)
{
    (void)dn;
    int ri = idx_of(res);
    if (ri < 0)
        return;
    fstate *t = fl_get(ctx);
    if (!t) /* loaded by the fleet hook earlier in this flush: not reached in practice */
        return;
    pthread_rwlock_wrlock(&t->lock);
    size_t i = dirty_pos(t, tn, mn, ri, start);
    int fresh = i == t->ndirty || dirty_cmp(&t->dirty[i], tn, mn, ri, start) != 0;
    if (fresh) {
        /* The hook cannot fail the flush: out of memory, the window goes unrecorded,
         * as when saving the list fails below, and the error is logged. */
        fdirty *nd = fl_realloc(t->dirty, (t->ndirty + 1) * sizeof *t->dirty);
        if (nd)
            t->dirty = nd;
        fdirty x = {nd ? fl_strndup(tn, strlen(tn)) : NULL, nd ? fl_strndup(mn, strlen(mn)) : NULL,
                    ri, start};
        if (x.tenant && x.metric) {
            memmove(&t->dirty[i + 1], &t->dirty[i], (t->ndirty - i) * sizeof *t->dirty);
            t->dirty[i] = x;
            t->ndirty++;
        } else {
            free(x.tenant);
            free(x.metric);
            fresh = 0;
            BDB_ERROR("fleet: out of memory recording recomputed window %s/%s at %lld", tn, mn,
                      (long long)start);
        }
    }
    pthread_rwlock_unlock(&t->lock);
    /* durable before the flush that recomputed the window commits (we run inside it) */
    if (fresh && fl_dirty_save(t) != BDB_OK)
        BDB_ERROR("fleet: cannot save the list of recomputed windows");
}

void bdb_db_fleet_attach(bdb_db *db)
{
    fl_get(db);
    bdb_db_tier_set_recompute_hook(db, on_recompute, db);
}

int bdb_db_fleet_dirty(bdb_db *db, const char *tn, const char *mn, enum bdb_res res, int64_t from,
                       int64_t to, int64_t **starts, size_t *n)
{
    int ri = idx_of(res);
    *starts = NULL;
    *n = 0;
    if (ri < 0)
        return BDB_ERR_INVALID;
    int64_t lo = bdb_align_down(from, bdb_res_width(res));
    /* Windows with marks of the late path: a rewrite of a flushed time still in the head
     * (or in the flush under way) is in a fleet file and in the head, counted twice,
     * until its flush recomputes the window. Marks first: that flush records the window
     * below before it forgets the mark, so no window slips between the two looks. */
    int64_t *mk = NULL;
    size_t nmk = 0;
    int rc = from < to ? bdb_db_late_marked_windows(db, tn, res, from, to, &mk, &nmk) : BDB_OK;
    if (rc != BDB_OK)
        return rc;
    fstate *t = fl_get(db);
    if (!t) {
        free(mk);
        return BDB_ERR_NOMEM;
    }
    pthread_rwlock_rdlock(&t->lock);
    size_t i = dirty_pos(t, tn, mn, ri, lo), k = 0;
    for (;;) { /* both sorted: merged, unique */
        int rec = i < t->ndirty && dirty_cmp(&t->dirty[i], tn, mn, ri, to) < 0;
        if (!rec && k == nmk)
            break;
        int64_t s;
        if (rec && (k == nmk || t->dirty[i].start <= mk[k]))
            s = t->dirty[i++].start;
        else
            s = mk[k++];
        if (*n && (*starts)[*n - 1] == s)
            continue;
        int64_t *ns = fl_realloc(*starts, (*n + 1) * sizeof **starts);
        if (!ns) {
            rc = BDB_ERR_NOMEM;
            break;
        }
        *starts = ns;
        (*starts)[(*n)++] = s;
    }
    pthread_rwlock_unlock(&t->lock);
    free(mk);
    if (rc != BDB_OK) {
        free(*starts);
        *starts = NULL;
        *n = 0;
    }
    return rc;
}

static void state_free(fstate *t);

/* NULL when memory runs out: the load changed nothing but unlinking leftover .tmp
 * files and dropping uncommitted files, which a later load would do the same way. */
static fstate *state_new(bdb_db *db)
{
    fstate *t = bdb_calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->db = db;
    t->next_seq = 1;
    t->covered_at = UINT64_MAX;
    pthread_rwlock_init(&t->lock, NULL);
    t->dir = bdb_path_join(db->dir, "fleet", NULL);
    int rc = t->dir ? BDB_OK : BDB_ERR_NOMEM;
    if (rc == BDB_OK)
        bdb_vfs_mkdir(db->vfs, t->dir);
    for (int ri = 0; ri < NRES && rc == BDB_OK; ri++) {
        t->sub[ri] = bdb_path_join(t->dir, bdb_res_name(res_of(ri)), NULL);
        if (!t->sub[ri])
            rc = BDB_ERR_NOMEM;
        else
            bdb_vfs_mkdir(db->vfs, t->sub[ri]);
    }
    if (rc == BDB_OK)
        rc = bdb_fileset_load(db->vfs, (const char *const *)t->sub, NRES, db->quarantine_dir,
                              db->wal_upto, &fleet_kind, t, &t->quarantined, &t->discarded);
    if (rc == BDB_OK) {
        bdb_vfs_sync_dir(db->vfs, t->dir);
        rc = fl_dirty_load(t);
    }
    if (rc != BDB_OK) {
        BDB_ERROR("fleet: cannot load the fleet files: %s", bdb_strerror(rc));
        state_free(t);
        return NULL;
    }
    return t;
}

/* Loaded on first use, which is before this process's first fleet write (the flush
 * hook calls it first), so db->wal_upto here is the catalog's committed value. NULL
 * when memory runs out (tried again at the next use). */
static void *make_state(bdb_db *db)
{
    return state_new(db);
}

fstate *fl_get(bdb_db *db)
{
    return db_consumer_state(db, &db_fleet_consumer, make_state);
}

void db_fleet_close(bdb_db *db)
{
    state_free(db_consumer_take(db, &db_fleet_consumer));
}

static void state_free(fstate *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++)
        fl_file_free(t->files[i]);
    free(t->files);
    free(t->cov);
    free(t->pend);
    for (size_t i = 0; i < t->ndirty; i++) {
        free(t->dirty[i].tenant);
        free(t->dirty[i].metric);
    }
    free(t->dirty);
    for (int ri = 0; ri < NRES; ri++)
        free(t->sub[ri]);
    free(t->dir);
    pthread_rwlock_destroy(&t->lock);
    free(t);
}

void bdb_db_fleet_get_stats(bdb_db *db, bdb_fleet_file_stats *st)
{
    fstate *t = fl_get(db);
    memset(st, 0, sizeof *st);
    if (!t)
        return; /* out of memory loading them: no figures this time */
    pthread_rwlock_rdlock(&t->lock);
    for (size_t i = 0; i < t->n; i++) {
        st->files[t->files[i]->ri]++;
        st->bytes[t->files[i]->ri] += t->files[i]->size;
    }
    pthread_rwlock_unlock(&t->lock);
    st->written = atomic_load(&t->written);
    st->compacted = atomic_load(&t->compacted);
    st->dropped = atomic_load(&t->dropped);
    st->quarantined = atomic_load(&t->quarantined);
    st->discarded = atomic_load(&t->discarded);
    st->withdrawn = atomic_load(&t->withdrawn);
}

/* ---------------------------------------------------------------- head samples */

int fl_ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (const hchunk *const *)a,
              y = (uintptr_t) * (const hchunk *const *)b;
    return (x > y) - (x < y);
}

static int covered(const fstate *t, const hchunk *c)
{
    return t->ncov && bsearch(&c, t->cov, t->ncov, sizeof *t->cov, fl_ptr_cmp) != NULL;
}

static int covered_cb(const void *t, const hchunk *c)
{
    return covered(t, c);
}

uint64_t fl_gather_list(db_merger *g, const hchunk *list, int64_t lo, int64_t hi, uint64_t base,
                        const fstate *skip)
{
    return db_merger_add_list(g, list, lo, hi, base, skip ? covered_cb : NULL, skip);
}

/* Non-finite samples are left out of the windows (bdb_stats_add refuses them). */
int fl_gather_into(db_merger *g, int64_t w, const char *dev, bdb_fleet *fl, int nf)
{
    int rc = db_merger_sort(g); /* out of memory: never windows from part of the samples */
    bdb_stats st;
    bdb_stats_init(&st);
    int64_t cur = INT64_MIN;
    for (size_t i = 0; i <= g->n && rc == BDB_OK; i++) {
        int end = i == g->n;
        int64_t ws = end ? INT64_MIN : bdb_align_down(g->t[i].ts, w);
        if ((end || ws != cur) && st.count) {
            for (int k = 0; k < nf && rc == BDB_OK; k++)
                rc = bdb_fleet_add(&fl[k], dev, cur, &st);
            bdb_stats_init(&st);
        }
        if (end)
            break;
        cur = ws;
        int arc = bdb_stats_add(&st, g->t[i].v);
        if (arc == BDB_ERR_LIMIT)
            rc = arc; /* BDB_ERR_INVALID: a non-finite value, not aggregated */
    }
    db_merger_clear(g);
    return rc;
}

/* ---------------------------------------------------------------- read */

int bdb_db_fleet_read(bdb_db *db, const char *tn, const char *mn, enum bdb_res res, int64_t from,
                      int64_t to, bdb_fleet *out)
{
    int ri = idx_of(res);
    int64_t width = bdb_res_width(res);
    if (ri < 0 || from >= to || out->width != width)
        return BDB_ERR_INVALID;
    bdb_fleet_reset(out);
    int64_t lo = bdb_align_down(from, width), hi = to;
    fstate *t = fl_get(db);
    if (!t)
        return BDB_ERR_NOMEM;
    int rc = BDB_OK;
    pthread_rwlock_rdlock(&t->lock);
    int from_sink = t->sink_synced && agg_sink_fleet(db);
    if (from_sink) /* sink: the flushed windows come from the sink (db_agg_sink.c) */
        from_sink = agg_sink_read_fleet(db, tn, mn, res, lo, hi, out);
    if (from_sink < 0) {
        rc = from_sink;
        from_sink = 0;
    }
    for (size_t i = 0; i < t->n && rc == BDB_OK && !from_sink; i++) {
        const ffile *f = t->files[i];
        if (f->ri != ri || f->end <= lo || f->start >= hi)
            continue;
        const frec *r = fl_find(f, tn, mn);
        if (!r)
            continue;
        bdb_dec d;
        bdb_dec_init(&d, r->p, r->len);
        rc = bdb_fleet_read(out, &d, lo, hi);
        if (rc == BDB_OK && bdb_dec_left(&d))
            rc = BDB_ERR_CORRUPT;
        if (rc == BDB_ERR_CORRUPT)
            BDB_ERROR("fleet file %s: record %s/%s failed to decode", f->path, tn, mn);
    }
    /* the head: samples not yet in fleet files */
    db_merger g;
    memset(&g, 0, sizeof g);
    pthread_rwlock_rdlock(&db->flush_lock);
    const fstate *skip = t->covered_at == atomic_load(&db->flushes) ? t : NULL;
    pthread_rwlock_rdlock(&db->cat_lock);
    tenant *te = rc == BDB_OK ? cat_tenant(db, tn, strlen(tn), 0) : NULL;
    size_t pos = 0, kl;
    const void *key;
    void *val;
    size_t mlen = strlen(mn);
    while (te && rc == BDB_OK && bdb_map_next(te->devices, &pos, &key, &kl, &val)) {
        device *d = val;
        pthread_mutex_lock(dev_lock(db, d));
        series *s = cat_series(db, d, mn, mlen, 0);
        if (s) {
            uint64_t base = fl_gather_list(&g, s->frozen, lo, hi, 0, skip);
            fl_gather_list(&g, s->active, lo, hi, base, NULL);
        }
        pthread_mutex_unlock(dev_lock(db, d));
        if (g.n || g.oom)
            rc = fl_gather_into(&g, width, d->name, out, 1);
    }
    pthread_rwlock_unlock(&db->cat_lock);
    pthread_rwlock_unlock(&db->flush_lock);
    pthread_rwlock_unlock(&t->lock);
    db_merger_free(&g);
    return rc;
}

const db_consumer db_fleet_consumer = {
    .name = "fleet",
    .flush = db_fleet_flush,
    .purge_tenant = db_fleet_forget_tenant,
    .close = db_fleet_close,
};
