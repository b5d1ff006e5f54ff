/* db_fleet: fleet files, the flush hook, reads merged with the head, compaction and
 * retention (see db_fleet.h for the crash rules).
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
#include "storage/embedded/db_fleet.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/map.h"
#include "common/timeutil.h"
#include "storage/embedded/db_fleet_int.h"
#include "storage/embedded/db_int.h"
#include "storage/embedded/db_tier.h"
#include "storage/embedded/db_agg_sink.h" /* sink: fleet rows (db_agg_sink.c) */

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

static void files_add(fstate *t, ffile *f)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 16;
        t->files = fl_xrealloc(t->files, t->cap * sizeof *t->files);
    }
    t->files[t->n++] = f;
    qsort(t->files, t->n, sizeof *t->files, file_cmp);
    if (f->seq >= t->next_seq)
        t->next_seq = f->seq + 1;
}

/* ---------------------------------------------------------------- load */

struct scan {
    fstate *t;
    int ri, pass;
    const char *dir;
    uint64_t *dead;
    size_t ndead;
};

static int is_dead(const struct scan *s, uint64_t seq)
{
    for (size_t i = 0; i < s->ndead; i++)
        if (s->dead[i] == seq)
            return 1;
    return 0;
}

static int scan_one(void *ctx, const char *name)
{
    struct scan *s = ctx;
    fstate *t = s->t;
    bdb_vfs *vfs = t->db->vfs;
    size_t n = strlen(name);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    if (n > 4 && !strcmp(name + n - 4, ".tmp")) {
        if (s->pass == 1)
            bdb_vfs_unlink(vfs, path); /* never published */
        return 0;
    }
    if (n <= 6 || strcmp(name + n - 6, ".fleet") != 0)
        return 0;
    void *data = NULL;
    size_t len = 0;
    int rc = bdb_vfs_read_all(vfs, path, &data, &len);
    if (rc != BDB_OK) {
        BDB_ERROR("cannot read fleet file %s: %s", path, bdb_strerror(rc));
        return 0;
    }
    ffile *f = bdb_calloc(1, sizeof *f);
    if (!f)
        abort();
    const char *why = NULL;
    rc = fl_parse(data, len, f, &why);
    if (rc != BDB_OK || f->ri != s->ri) {
        if (rc == BDB_OK)
            why = "resolution does not match its directory";
        else
            free(data);
        if (s->pass == 2) {
            char dst[4096];
            snprintf(dst, sizeof dst, "%s/fleet-%s", t->db->quarantine_dir, name);
            BDB_ERROR("fleet file %s is damaged (%s); moved to %s and not read", path, why, dst);
            if (bdb_vfs_rename(vfs, path, dst) == BDB_OK)
                bdb_vfs_sync_dir(vfs, s->dir);
            atomic_fetch_add(&t->quarantined, 1);
        }
        fl_file_free(f);
        return 0;
    }
    if (s->pass == 1) {
        s->dead = fl_xrealloc(s->dead, (s->ndead + f->ninputs + 1) * sizeof *s->dead);
        for (size_t i = 0; i < f->ninputs; i++)
            s->dead[s->ndead++] = f->inputs[i];
        fl_file_free(f);
        return 0;
    }
    if (is_dead(s, f->seq) || f->wal_upto > t->db->wal_upto) {
        /* superseded by a compacted file, or from a flush that never committed (its
         * samples come back from the WAL): counting it would count them twice */
        BDB_INFO("fleet file %s dropped (%s)", path,
                 is_dead(s, f->seq) ? "superseded by compaction" : "flush did not commit");
        fl_file_free(f);
        bdb_vfs_unlink(vfs, path);
        atomic_fetch_add(&t->discarded, 1);
        return 0;
    }
    f->path = fl_strndup(path, strlen(path));
    files_add(t, f);
    return 0;
}

/* ---------------------------------------------------------------- dirty windows */

static fstate *fleet_get(bdb_db *db);

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
                         enum bdb_res res, const bdb_window *w)
{
    (void)dn;
    int ri = idx_of(res);
    if (ri < 0)
        return;
    fstate *t = fleet_get(ctx);
    pthread_rwlock_wrlock(&t->lock);
    size_t i = dirty_pos(t, tn, mn, ri, w->start);
    int fresh = i == t->ndirty || dirty_cmp(&t->dirty[i], tn, mn, ri, w->start) != 0;
    if (fresh) {
        t->dirty = fl_xrealloc(t->dirty, (t->ndirty + 1) * sizeof *t->dirty);
        memmove(&t->dirty[i + 1], &t->dirty[i], (t->ndirty - i) * sizeof *t->dirty);
        t->dirty[i] =
            (fdirty){fl_strndup(tn, strlen(tn)), fl_strndup(mn, strlen(mn)), ri, w->start};
        t->ndirty++;
    }
    pthread_rwlock_unlock(&t->lock);
    /* durable before the flush that recomputed the window commits (we run inside it) */
    if (fresh && fl_dirty_save(t) != BDB_OK)
        BDB_ERROR("fleet: cannot save the list of recomputed windows");
}

void bdb_db_fleet_attach(bdb_db *db)
{
    fleet_get(db);
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
    fstate *t = fleet_get(db);
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
        *starts = fl_xrealloc(*starts, (*n + 1) * sizeof **starts);
        (*starts)[(*n)++] = s;
    }
    pthread_rwlock_unlock(&t->lock);
    free(mk);
    return BDB_OK;
}

static fstate *state_new(bdb_db *db)
{
    fstate *t = bdb_calloc(1, sizeof *t);
    if (!t)
        abort();
    t->db = db;
    t->next_seq = 1;
    t->covered_at = UINT64_MAX;
    pthread_rwlock_init(&t->lock, NULL);
    t->dir = fl_join(db->dir, "fleet");
    bdb_vfs_mkdir(db->vfs, t->dir);
    struct scan s = {.t = t};
    for (int ri = 0; ri < NRES; ri++) {
        t->sub[ri] = fl_join(t->dir, bdb_res_name(res_of(ri)));
        bdb_vfs_mkdir(db->vfs, t->sub[ri]);
    }
    for (int pass = 1; pass <= 2; pass++)
        for (int ri = 0; ri < NRES; ri++) {
            s.pass = pass;
            s.ri = ri;
            s.dir = t->sub[ri];
            bdb_vfs_list(db->vfs, t->sub[ri], scan_one, &s);
        }
    bdb_vfs_sync_dir(db->vfs, t->dir);
    free(s.dead);
    fl_dirty_load(t);
    return t;
}

/* Loaded on first use, which is before this process's first fleet write (the flush
 * hook calls it first), so db->wal_upto here is the catalog's committed value. */
static fstate *fleet_get(bdb_db *db)
{
    pthread_mutex_lock(&db->ext_mu);
    if (!db->fleet)
        db->fleet = state_new(db);
    fstate *t = db->fleet;
    pthread_mutex_unlock(&db->ext_mu);
    return t;
}

void db_fleet_close(bdb_db *db)
{
    pthread_mutex_lock(&db->ext_mu);
    fstate *t = db->fleet;
    db->fleet = NULL;
    pthread_mutex_unlock(&db->ext_mu);
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
    fstate *t = fleet_get(db);
    memset(st, 0, sizeof *st);
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

struct samp {
    int64_t ts;
    uint64_t prio, order;
    double v;
};

struct gather {
    struct samp *s;
    size_t n, cap;
    int64_t *ts;
    double *v;
    size_t tn, tcap;
    int oom; /* a sample was dropped for lack of memory: gather_into fails */
};

static int samp_cmp(const void *a, const void *b)
{
    const struct samp *x = a, *y = b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    if (x->prio != y->prio)
        return x->prio > y->prio ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

static int ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (const hchunk *const *)a,
              y = (uintptr_t) * (const hchunk *const *)b;
    return (x > y) - (x < y);
}

static int covered(const fstate *t, const hchunk *c)
{
    return t->ncov && bsearch(&c, t->cov, t->ncov, sizeof *t->cov, ptr_cmp) != NULL;
}

/* Appends a chunk list (newest first) oldest first, so later writes get higher
 * priorities, skipping chunks in skip's covered set (skip may be NULL). */
static uint64_t gather_list(struct gather *g, const hchunk *list, int64_t lo, int64_t hi,
                            uint64_t base, const fstate *skip)
{
    size_t nc = 0, k = 0;
    for (const hchunk *c = list; c; c = c->next)
        nc++;
    for (const hchunk *c = list; c; c = c->next, k++) {
        if (c->hi <= lo || c->lo >= hi || (skip && covered(skip, c)))
            continue;
        g->tn = 0;
        if (head_chunk_samples(c, lo, hi, &g->ts, &g->v, &g->tn, &g->tcap) != BDB_OK)
            g->oom = 1;
        if (g->n + g->tn > g->cap) {
            g->cap = (g->n + g->tn) * 2;
            g->s = fl_xrealloc(g->s, g->cap * sizeof *g->s);
        }
        for (size_t i = 0; i < g->tn; i++)
            g->s[g->n++] = (struct samp){g->ts[i], base + nc - k, i, g->v[i]};
    }
    return base + nc;
}

/* Sorts the gathered samples, keeps the newest write of each time (as raw reads do)
 * and adds each window's statistics (width w) of device dev to every fleet in fl[0..nf)
 * (widths multiples of w). Empties the gather. Non-finite samples are skipped. */
static int gather_into(struct gather *g, int64_t w, const char *dev, bdb_fleet *fl, int nf)
{
    if (g->oom) { /* never windows from part of the samples */
        g->oom = 0;
        g->n = 0;
        return BDB_ERR_NOMEM;
    }
    if (g->n > 1)
        qsort(g->s, g->n, sizeof *g->s, samp_cmp);
    int rc = BDB_OK;
    bdb_stats st;
    bdb_stats_init(&st);
    int64_t cur = INT64_MIN;
    for (size_t i = 0; i <= g->n && rc == BDB_OK; i++) {
        int end = i == g->n;
        if (!end && i > 0 && g->s[i].ts == g->s[i - 1].ts)
            continue;
        int64_t ws = end ? INT64_MIN : bdb_align_down(g->s[i].ts, w);
        if ((end || ws != cur) && st.count) {
            for (int k = 0; k < nf && rc == BDB_OK; k++)
                rc = bdb_fleet_add(&fl[k], dev, cur, &st);
            bdb_stats_init(&st);
        }
        if (end)
            break;
        cur = ws;
        int arc = bdb_stats_add(&st, g->s[i].v);
        if (arc == BDB_ERR_LIMIT)
            rc = arc; /* BDB_ERR_INVALID: a non-finite value, not aggregated */
    }
    g->n = 0;
    return rc;
}

static void gather_free(struct gather *g)
{
    free(g->s);
    free(g->ts);
    free(g->v);
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
    fstate *t = fleet_get(db);
    int rc = BDB_OK;
    pthread_rwlock_rdlock(&t->lock);
    int from_sink = t->sink_synced && agg_sink_fleet(db);
    if (from_sink) /* sink: the flushed windows come from the sink (db_agg_sink.c) */
        from_sink = agg_sink_read_fleet(db, tn, mn, res, lo, hi, out);
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
    struct gather g;
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
            uint64_t base = gather_list(&g, s->frozen, lo, hi, 0, skip);
            gather_list(&g, s->active, lo, hi, base, NULL);
        }
        pthread_mutex_unlock(dev_lock(db, d));
        if (g.n)
            rc = gather_into(&g, width, d->name, out, 1);
    }
    pthread_rwlock_unlock(&db->cat_lock);
    pthread_rwlock_unlock(&db->flush_lock);
    pthread_rwlock_unlock(&t->lock);
    gather_free(&g);
    return rc;
}

/* ---------------------------------------------------------------- writing files */

struct builder {
    int ri;
    int64_t start;
    bdb_buf body;
    size_t nrec;
};

/* ---------------------------------------------------------------- flush hook */

struct acc {
    char *tenant, *metric;
    bdb_fleet f[NRES];
};

static int acc_cmp(const void *x, const void *y)
{
    const struct acc *a = *(struct acc *const *)x, *b = *(struct acc *const *)y;
    return fl_rec_cmp(a->tenant, a->metric, b->tenant, b->metric);
}

/* Withdraws the files of a publish whose flush failed (see the header comment). */
static void withdraw(fstate *t)
{
    ffile **gone = fl_xrealloc(NULL, (t->npend + 1) * sizeof *gone);
    size_t ng = 0, k = 0;
    pthread_rwlock_wrlock(&t->lock);
    for (size_t i = 0; i < t->n; i++) {
        int pend = 0;
        for (size_t j = 0; j < t->npend; j++)
            pend |= t->files[i]->seq == t->pend[j];
        if (pend)
            gone[ng++] = t->files[i];
        else
            t->files[k++] = t->files[i];
    }
    t->n = k;
    t->covered_at = UINT64_MAX;
    t->ncov = 0;
    pthread_rwlock_unlock(&t->lock);
    for (size_t i = 0; i < ng; i++) {
        BDB_INFO("fleet: withdrawing %s (its flush failed; the retry recomputes it)",
                 gone[i]->path);
        bdb_vfs_unlink(t->db->vfs, gone[i]->path);
        bdb_vfs_sync_dir(t->db->vfs, t->sub[gone[i]->ri]);
        fl_file_free(gone[i]);
        atomic_fetch_add(&t->withdrawn, 1);
    }
    free(gone);
    t->npend = 0;
}

static void maintain(fstate *t);

int db_fleet_flush(bdb_db *db, struct series **v, size_t n, uint64_t sealed, int rc)
{
    fstate *t = fleet_get(db);
    if (rc != BDB_OK)
        return rc;
    if (agg_sink_fleet(db)) { /* sink: the files answer until this flush's rows are put */
        pthread_rwlock_wrlock(&t->lock);
        t->sink_synced = 0;
        pthread_rwlock_unlock(&t->lock);
    }
    if (t->npend && t->covered_at == atomic_load(&db->flushes))
        withdraw(t);
    t->npend = 0;
    bdb_map *accs = bdb_map_new();
    if (!accs)
        rc = BDB_ERR_NOMEM; /* the flush fails and keeps head and WAL (alloc.h) */
    struct gather g;
    memset(&g, 0, sizeof g);
    const hchunk **cov = NULL;
    size_t ncov = 0, capcov = 0;
    char key[1024];
    /* The frozen chunks are read-only until the flush frees them: no lock needed. */
    for (size_t i = 0; i < n && rc == BDB_OK; i++) {
        const series *s = v[i];
        for (const hchunk *c = s->frozen; c; c = c->next) {
            if (ncov == capcov) {
                capcov = capcov ? capcov * 2 : 256;
                cov = fl_xrealloc(cov, capcov * sizeof *cov);
            }
            cov[ncov++] = c;
        }
        const char *tn = s->dev->tenant->name;
        size_t tl = strlen(tn);
        if (tl + 1 + s->mlen > sizeof key)
            continue; /* names are bounded far below this by ingestion */
        memcpy(key, tn, tl);
        key[tl] = 0;
        memcpy(key + tl + 1, s->metric, s->mlen);
        size_t kl = tl + 1 + s->mlen;
        struct acc *a = bdb_map_get(accs, key, kl);
        if (!a) {
            a = bdb_calloc(1, sizeof *a);
            if (!a) {
                rc = BDB_ERR_NOMEM;
                break;
            }
            a->tenant = fl_strndup(tn, tl);
            a->metric = fl_strndup(s->metric, s->mlen);
            for (int ri = 0; ri < NRES; ri++)
                bdb_fleet_init(&a->f[ri], bdb_res_width(res_of(ri)));
            if (bdb_map_set(accs, key, kl, a) != BDB_OK) {
                free(a->tenant);
                free(a->metric);
                free(a);
                rc = BDB_ERR_NOMEM;
                break;
            }
        }
        gather_list(&g, s->frozen, INT64_MIN, INT64_MAX, 0, NULL);
        /* hours of this device, added to its hour and its day */
        rc = gather_into(&g, bdb_res_width(BDB_RES_1H), s->dev->name, a->f, NRES);
    }
    gather_free(&g);
    size_t na = accs ? bdb_map_count(accs) : 0, k = 0;
    struct acc **av = fl_xrealloc(NULL, (na + 1) * sizeof *av);
    size_t pos = 0, kl;
    const void *kp;
    void *val;
    while (accs && bdb_map_next(accs, &pos, &kp, &kl, &val))
        av[k++] = val;
    bdb_map_free(accs);
    if (na > 1)
        qsort(av, na, sizeof *av, acc_cmp);
    /* one file per (resolution, file window), records in (tenant, metric) order */
    struct builder *bs = NULL;
    size_t nb = 0;
    for (int ri = 0; ri < NRES && rc == BDB_OK; ri++) {
        int64_t span = bdb_tier_file_span(res_of(ri));
        for (size_t i = 0; i < na; i++) {
            const bdb_fleet *f = &av[i]->f[ri];
            for (size_t w = 0; w < f->n;) {
                int64_t fs = bdb_align_down(f->w[w].start, span);
                struct builder *b = NULL;
                for (size_t x = 0; x < nb; x++)
                    if (bs[x].ri == ri && bs[x].start == fs)
                        b = &bs[x];
                if (!b) {
                    bs = fl_xrealloc(bs, (nb + 1) * sizeof *bs);
                    b = &bs[nb++];
                    b->ri = ri;
                    b->start = fs;
                    b->nrec = 0;
                    bdb_buf_init(&b->body);
                }
                bdb_buf rec;
                bdb_buf_init(&rec);
                bdb_fleet_write(f, fs, fs + span, &rec);
                bdb_buf_put_str(&b->body, av[i]->tenant, strlen(av[i]->tenant));
                bdb_buf_put_str(&b->body, av[i]->metric, strlen(av[i]->metric));
                bdb_buf_put_uvarint(&b->body, rec.len);
                bdb_buf_append(&b->body, rec.data, rec.len);
                bdb_buf_free(&rec);
                b->nrec++;
                while (w < f->n && f->w[w].start < fs + span)
                    w++;
            }
        }
    }
    for (size_t i = 0; i < na; i++) {
        for (int ri = 0; ri < NRES; ri++)
            bdb_fleet_free(&av[i]->f[ri]);
        free(av[i]->tenant);
        free(av[i]->metric);
        free(av[i]);
    }
    free(av);
    ffile **out = fl_xrealloc(NULL, (nb + 1) * sizeof *out);
    uint64_t *seqs = fl_xrealloc(NULL, (nb + 1) * sizeof *seqs);
    size_t done = 0;
    for (size_t i = 0; i < nb && rc == BDB_OK; i++) {
        seqs[i] = t->next_seq++;
        rc = fl_write(t, bs[i].ri, bs[i].start, seqs[i], sealed, NULL, 0, bs[i].nrec, &bs[i].body,
                      &out[done]);
        if (rc == BDB_OK)
            done++;
    }
    for (size_t i = 0; i < nb; i++)
        bdb_buf_free(&bs[i].body);
    free(bs);
    if (rc == BDB_OK && agg_sink_fleet(db)) /* sink: complete windows before publishing */
        rc = agg_sink_put_fleet(db, t, out, done);
    if (rc != BDB_OK) {
        for (size_t i = 0; i < done; i++) {
            bdb_vfs_unlink(db->vfs, out[i]->path);
            fl_file_free(out[i]);
        }
        free(out);
        free(seqs);
        free(cov);
        BDB_ERROR("fleet write failed: %s; the flush will be retried", bdb_strerror(rc));
        return rc;
    }
    if (ncov > 1)
        qsort(cov, ncov, sizeof *cov, ptr_cmp);
    pthread_rwlock_wrlock(&t->lock);
    for (size_t i = 0; i < done; i++)
        files_add(t, out[i]);
    free(t->cov);
    t->cov = cov;
    t->ncov = ncov;
    t->covered_at = atomic_load(&db->flushes);
    t->sink_synced = 1; /* sink: every window of the published files was put */
    pthread_rwlock_unlock(&t->lock);
    free(t->pend);
    t->pend = seqs;
    t->npend = done;
    atomic_fetch_add(&t->written, done);
    free(out);
    maintain(t);
    return BDB_OK;
}

/* ---------------------------------------------------------------- maintenance */

static int64_t retention_ms(fstate *t, int ri)
{
    enum bdb_res r = res_of(ri);
    int64_t conf = t->db->o.tier_retention_ms[r - 1];
    return conf > 0 ? conf : conf < 0 ? 0 : bdb_tier_default_retention(r);
}

static void drop_files(fstate *t, ffile **v, size_t n, const char *why, _Atomic uint64_t *ctr)
{
    for (size_t i = 0; i < n; i++) {
        BDB_INFO("fleet %s: %s %s", bdb_res_name(res_of(v[i]->ri)), why, v[i]->path);
        bdb_vfs_unlink(t->db->vfs, v[i]->path);
        bdb_vfs_sync_dir(t->db->vfs, t->sub[v[i]->ri]);
        fl_file_free(v[i]);
        if (ctr)
            atomic_fetch_add(ctr, 1);
    }
}

/* Merges committed files of one window (in, nin; taken over) into one file listing
 * their seqs, so a crash between its rename and the unlinks counts nothing twice. */
static int compact(fstate *t, ffile **in, size_t nin)
{
    uint64_t *seqs = fl_xrealloc(NULL, nin * sizeof *seqs);
    size_t *pos = bdb_calloc(nin, sizeof *pos);
    if (!pos)
        abort();
    uint64_t upto = 0;
    for (size_t i = 0; i < nin; i++) {
        seqs[i] = in[i]->seq;
        upto = in[i]->wal_upto > upto ? in[i]->wal_upto : upto;
    }
    int ri = in[0]->ri;
    int64_t width = bdb_res_width(res_of(ri));
    bdb_buf body;
    bdb_buf_init(&body);
    size_t nrec = 0;
    bdb_fleet f;
    bdb_fleet_init(&f, width);
    int rc = BDB_OK;
    for (;;) { /* k-way merge over the inputs' sorted records */
        const frec *low = NULL;
        for (size_t i = 0; i < nin; i++)
            if (pos[i] < in[i]->nrec) {
                const frec *x = &in[i]->recs[pos[i]];
                if (!low || fl_rec_cmp(x->tenant, x->metric, low->tenant, low->metric) < 0)
                    low = x;
            }
        if (!low)
            break;
        frec key = *low;
        bdb_fleet_reset(&f);
        for (size_t i = 0; i < nin; i++) {
            if (pos[i] >= in[i]->nrec)
                continue;
            const frec *x = &in[i]->recs[pos[i]];
            if (fl_rec_cmp(x->tenant, x->metric, key.tenant, key.metric))
                continue;
            bdb_dec d;
            bdb_dec_init(&d, x->p, x->len);
            if (rc == BDB_OK)
                rc = bdb_fleet_read(&f, &d, INT64_MIN, INT64_MAX);
            pos[i]++;
        }
        if (rc != BDB_OK)
            break;
        bdb_buf rec;
        bdb_buf_init(&rec);
        bdb_fleet_write(&f, INT64_MIN, INT64_MAX, &rec);
        bdb_buf_put_str(&body, key.tenant, strlen(key.tenant));
        bdb_buf_put_str(&body, key.metric, strlen(key.metric));
        bdb_buf_put_uvarint(&body, rec.len);
        bdb_buf_append(&body, rec.data, rec.len);
        bdb_buf_free(&rec);
        nrec++;
    }
    bdb_fleet_free(&f);
    free(pos);
    ffile *out = NULL;
    if (rc == BDB_OK)
        rc = fl_write(t, ri, in[0]->start, t->next_seq++, upto, seqs, nin, nrec, &body, &out);
    bdb_buf_free(&body);
    if (rc == BDB_OK) {
        pthread_rwlock_wrlock(&t->lock);
        size_t k = 0;
        for (size_t i = 0; i < t->n; i++) {
            int gone = 0;
            for (size_t j = 0; j < nin; j++)
                gone |= t->files[i] == in[j];
            if (!gone)
                t->files[k++] = t->files[i];
        }
        t->n = k;
        files_add(t, out);
        pthread_rwlock_unlock(&t->lock);
        drop_files(t, in, nin, "compacted", NULL);
        atomic_fetch_add(&t->compacted, 1);
    } else {
        BDB_ERROR("fleet compaction of %s failed: %s", in[0]->path, bdb_strerror(rc));
    }
    free(seqs);
    return rc;
}

/* Retention (whole files whose window ended before now minus the tier's retention),
 * then compaction of windows with FLEET_COMPACT_AT committed files or more. Runs in
 * the flush hook under flush_mutex: only it changes the list's membership. */
static void maintain(fstate *t)
{
    int64_t now = bdb_clock_now(&t->db->o.clock);
    ffile **drop = fl_xrealloc(NULL, (t->n + 1) * sizeof *drop);
    size_t nd = 0, k = 0;
    pthread_rwlock_wrlock(&t->lock);
    for (size_t i = 0; i < t->n; i++) {
        int64_t keep = retention_ms(t, t->files[i]->ri);
        if (keep > 0 && t->files[i]->end <= now - keep && t->files[i]->wal_upto <= t->db->wal_upto)
            drop[nd++] = t->files[i];
        else
            t->files[k++] = t->files[i];
    }
    t->n = k;
    pthread_rwlock_unlock(&t->lock);
    drop_files(t, drop, nd, "retention drops", &t->dropped);
    free(drop);
    ffile **in = fl_xrealloc(NULL, (t->n + 1) * sizeof *in);
    for (size_t a = 0; a < t->n;) {
        size_t b = a, nin = 0;
        while (b < t->n && t->files[b]->ri == t->files[a]->ri &&
               t->files[b]->start == t->files[a]->start) {
            if (t->files[b]->wal_upto <= t->db->wal_upto)
                in[nin++] = t->files[b];
            b++;
        }
        size_t others = b - a - nin;
        /* files of a flush not committed yet stay out: merged, they would be dropped
         * with the rest at a restart */
        if (nin >= FLEET_COMPACT_AT && compact(t, in, nin) == BDB_OK)
            a += 1 + others; /* the group shrank to the merged file and the others */
        else
            a = b;
    }
    free(in);
}
