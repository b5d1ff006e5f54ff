/* db_tier: tier state, the flush hook, reads merged with the head, retention and
 * compaction of tier files (see db_tier.h for the consistency argument).
 *
 * Locking: tier_lock (rwlock, one per db) guards the file lists and `covered_at`.
 * Readers hold it shared across the whole read: tier files, then flush_lock (shared),
 * then cat_lock and the device stripe for the head. The flush hook and maintenance run
 * under flush_mutex and take tier_lock exclusively only to publish or swap files,
 * never while holding flush_lock, cat_lock or a stripe. So the order is
 *   flush_mutex -> tier_lock -> flush_lock -> cat_lock -> device stripe.
 *
 * Frozen chunks and tier files: between the moment the flush hook publishes a flush's
 * tier files and the moment that flush frees its frozen chunks, the same samples are
 * both in tier files and in the frozen lists. The hook records covered_at = the
 * engine's flush count at that moment; the flush increments the count only after it
 * freed the frozen chunks, and the next flush freezes only under flush_lock (held
 * shared by the reader). A reader therefore skips frozen chunks exactly when
 * covered_at equals the current count. */
#include "storage/embedded/tier/db_tier.h"
#include "common/alloc.h"
#include "common/path.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "storage/embedded/core/db_consumer.h"
#include "storage/embedded/core/db_int.h"
#include "storage/embedded/fileset/fileset.h"
#include "storage/embedded/tier/db_tier_int.h"
#include "storage/embedded/sink/db_agg_sink.h" /* sink: tier rows (db_agg_sink.c) */
#include "storage/sink.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS_DAY INT64_C(86400000)

int64_t bdb_tier_file_span(enum bdb_res res)
{
    switch (res) {
    case BDB_RES_1M:
        return MS_DAY;
    case BDB_RES_1H:
        return 30 * MS_DAY;
    case BDB_RES_1D:
        return 365 * MS_DAY;
    default:
        return 0;
    }
}

int64_t bdb_tier_default_retention(enum bdb_res res)
{
    switch (res) {
    case BDB_RES_1M:
        return 90 * MS_DAY;
    case BDB_RES_1H:
        return 365 * MS_DAY;
    default:
        return 0;
    }
}

/* The state lives in the tier consumer's slot (created by tier_get, freed by db_tier_close). */

static int file_cmp(const void *x, const void *y)
{
    const tfile *a = *(tfile *const *)x, *b = *(tfile *const *)y;
    if (a->res != b->res)
        return a->res < b->res ? -1 : 1;
    int c = strcmp(a->tenant, b->tenant);
    if (c)
        return c;
    if (a->start != b->start)
        return a->start < b->start ? -1 : 1;
    return (a->seq > b->seq) - (a->seq < b->seq);
}

int tier_files_add(tstate *t, tfile *f)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 32;
        tfile **p = bdb_realloc(t->files, cap * sizeof *p);
        if (!p)
            return BDB_ERR_NOMEM;
        t->files = p;
        t->cap = cap;
    }
    t->files[t->n++] = f;
    qsort(t->files, t->n, sizeof *t->files, file_cmp);
    if (f->seq >= t->next_seq)
        t->next_seq = f->seq + 1;
    return BDB_OK;
}

/* ---------------------------------------------------------------- load */

/* The tier kind of window file (fileset.h): sub r is the directory of tier r + 1. */

static int tier_replaced(void *ctx, int sub, uint8_t *data, size_t len, bdb_fileset_seqs *out)
{
    (void)ctx;
    (void)sub;
    tfile hdr;
    int rc = tf_parse_header(data, len, &hdr); /* any version: older ones are upgraded later */
    if (rc == BDB_OK) {
        rc = bdb_fileset_seqs_add(out, hdr.inputs, hdr.ninputs);
        tf_free(&hdr);
    }
    free(data);
    return rc == BDB_ERR_NOMEM ? rc : BDB_OK;
}

static int tier_parse(void *ctx, int sub, const char *dir, const char *name, uint8_t *data,
                      size_t len, void **out, uint64_t *seq, uint64_t *upto, const char **why)
{
    tstate *t = ctx;
    bdb_vfs *vfs = t->db->vfs;
    int rc = BDB_OK;
    uint32_t ver = tf_version(data, len);
    if (ver == TIER_VERSION || ver == TIER_VERSION_FLAGS) {
        /* an older version: rewritten in place as version 5 (same name, seq and header
         * fields; atomic, so a crash leaves the old or the new file) */
        bdb_buf up;
        bdb_buf_init_checked(&up);
        rc = tf_upgrade(data, len, &up, why);
        if (rc == BDB_OK)
            rc = bdb_vfs_write_atomic(vfs, dir, name, up.data, up.len);
        if (rc == BDB_OK) {
            BDB_INFO("tier file %s/%s rewritten as version 5 (%zu -> %zu bytes)", dir, name, len,
                     up.len);
            free(data);
            data = up.data;
            len = up.len;
        } else {
            bdb_buf_free(&up);
            if (rc != BDB_ERR_CORRUPT && rc != BDB_ERR_NOMEM)
                /* disk full, I/O: the load stops and fails as without memory, and is
                 * tried again, rather than leave the file's windows out unnoticed */
                BDB_ERROR("cannot rewrite tier file %s/%s as version 5: %s; the tiers load "
                          "again later",
                          dir, name, bdb_strerror(rc));
        }
    }
    tfile *f = NULL;
    if (rc == BDB_OK) {
        f = bdb_calloc(1, sizeof *f);
        rc = f ? tf_parse(data, len, f, why) : BDB_ERR_NOMEM;
        if (rc == BDB_OK && f->res != (enum bdb_res)(sub + 1)) {
            tf_free(f);
            *why = "tier does not match its directory";
            rc = BDB_ERR_CORRUPT;
        }
    }
    free(data);
    if (rc != BDB_OK) {
        free(f);
        return rc;
    }
    *out = f;
    *seq = f->seq;
    *upto = f->wal_upto;
    return BDB_OK;
}

static void tier_discard(void *ctx, void *f)
{
    (void)ctx;
    tf_free(f);
    free(f);
}

static int tier_keep(void *ctx, int sub, void *fp, const char *path)
{
    (void)sub;
    tstate *t = ctx;
    tfile *f = fp;
    int rc = bdb_vfs_open(t->db->vfs, path, BDB_O_RDONLY, &f->f);
    if (rc != BDB_OK) {
        if (rc != BDB_ERR_NOMEM)
            BDB_ERROR("cannot open tier file %s: %s", path, bdb_strerror(rc));
        tier_discard(t, f);
        return rc;
    }
    f->path = bdb_strdup(path);
    if (!f->path || tier_files_add(t, f) != BDB_OK) {
        tier_discard(t, f);
        return BDB_ERR_NOMEM;
    }
    return BDB_OK;
}

static const bdb_fileset_kind tier_kind = {
    .name = "tier",
    .ext = ".tier",
    .replaced = tier_replaced,
    .parse = tier_parse,
    .discard = tier_discard,
    .keep = tier_keep,
};

static void state_free(tstate *t);

/* NULL when out of memory (nothing on disk changed). */
static tstate *state_new(bdb_db *db)
{
    tstate *t = bdb_calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->db = db;
    t->next_seq = 1;
    t->covered_at = UINT64_MAX;
    pthread_rwlock_init(&t->lock, NULL);
    t->dir = bdb_path_join(db->dir, "tiers", NULL);
    for (int r = 0; r < BDB_TIERS; r++)
        t->sub[r] = bdb_path_join(t->dir, bdb_res_name((enum bdb_res)(r + 1)), NULL);
    if (!t->dir || !t->sub[0] || !t->sub[1] || !t->sub[2]) {
        state_free(t);
        return NULL;
    }
    bdb_vfs_mkdir(db->vfs, t->dir);
    for (int r = 0; r < BDB_TIERS; r++)
        if (bdb_vfs_mkdir(db->vfs, t->sub[r]) != BDB_OK)
            BDB_ERROR("cannot create %s: %s", t->sub[r], strerror(errno));
    if (bdb_fileset_load(db->vfs, (const char *const *)t->sub, BDB_TIERS, db->quarantine_dir,
                         db->wal_upto, &tier_kind, t, &t->quarantined, &t->discarded) != BDB_OK) {
        state_free(t);
        return NULL;
    }
    bdb_vfs_sync_dir(db->vfs, t->dir);
    return t;
}

/* The state of db, loaded from disk on first use. The first use is always before the
 * first tier write of this process (the flush hook calls this first), so db->wal_upto
 * read here is the catalog's committed value. */
static void *make_state(bdb_db *db)
{
    return state_new(db);
}

tstate *tier_state(bdb_db *db)
{
    return db_consumer_state(db, &db_tier_consumer, make_state);
}

void db_tier_close(bdb_db *db)
{
    tstate *t = db_consumer_take(db, &db_tier_consumer);
    if (t)
        state_free(t);
}

static void state_free(tstate *t)
{
    for (size_t i = 0; i < t->n; i++) {
        tf_free(t->files[i]);
        free(t->files[i]);
    }
    free(t->files);
    for (int r = 0; r < BDB_TIERS; r++)
        free(t->sub[r]);
    free(t->dir);
    pthread_rwlock_destroy(&t->lock);
    free(t);
}

void bdb_db_tier_set_retention_hook(bdb_db *db, bdb_tier_retention_fn cb, void *ctx)
{
    tstate *t = tier_state(db);
    if (!t) { /* at start only; without memory for it the server does not start either */
        BDB_ERROR("out of memory loading the tier files");
        return;
    }
    pthread_rwlock_wrlock(&t->lock);
    t->ret_cb = cb;
    t->ret_ctx = ctx;
    pthread_rwlock_unlock(&t->lock);
}

void bdb_db_tier_get_stats(bdb_db *db, bdb_tier_stats *st)
{
    tstate *t = tier_state(db);
    memset(st, 0, sizeof *st);
    if (!t)
        return;
    pthread_rwlock_rdlock(&t->lock);
    for (size_t i = 0; i < t->n; i++) {
        st->files[t->files[i]->res - 1]++;
        st->bytes[t->files[i]->res - 1] += t->files[i]->size;
    }
    pthread_rwlock_unlock(&t->lock);
    st->written = atomic_load(&t->written);
    st->compacted = atomic_load(&t->compacted);
    st->dropped = atomic_load(&t->dropped);
    st->quarantined = atomic_load(&t->quarantined);
    st->discarded = atomic_load(&t->discarded);
}

/* ---------------------------------------------------------------- head samples */

int tier_merge_into(db_merger *m, bdb_rollup *r)
{
    int rc = db_merger_sort(m); /* out of memory: never windows from part of the samples */
    /* each window's run of samples at once: its statistics in two passes instead of
     * two exact means per sample (most of a 1-minute panel's time) */
    double run[256];
    size_t k = 0;
    int64_t start = 0;
    for (size_t i = 0; i < m->n && rc == BDB_OK; i++) {
        int64_t w = bdb_align_down(m->t[i].ts, r->width);
        if (k && (w != start || k == sizeof run / sizeof *run)) {
            rc = bdb_rollup_add_window(r, start, run, k);
            k = 0;
        }
        if (!isfinite(m->t[i].v)) {
            r->skipped++; /* as bdb_rollup_add does */
            continue;
        }
        start = w;
        run[k++] = m->t[i].v;
    }
    if (rc == BDB_OK && k)
        rc = bdb_rollup_add_window(r, start, run, k);
    db_merger_clear(m);
    return rc;
}

/* ---------------------------------------------------------------- flush hook */

struct builders {
    tbuilder *v;
    size_t n;
};

static void builders_free(struct builders *bs)
{
    for (size_t i = 0; i < bs->n; i++)
        tf_builder_free(&bs->v[i]);
    free(bs->v);
    bs->v = NULL;
    bs->n = 0;
}

/* The builder of (res, tenant, file window, flags), begun with the metric table mets
 * when it is new. */
static tbuilder *builder_for(tstate *t, struct builders *bs, enum bdb_res res, const char *tn,
                             int64_t start, uint64_t sealed, unsigned flags,
                             const char *const *mets, size_t nmet)
{
    for (size_t i = bs->n; i-- > 0;)
        if (bs->v[i].res == res && bs->v[i].start == start && bs->v[i].flags == flags &&
            bs->v[i].tenant && !strcmp(bs->v[i].tenant, tn))
            return &bs->v[i];
    tbuilder *nv = bdb_realloc(bs->v, (bs->n + 1) * sizeof *bs->v);
    if (!nv)
        return NULL; /* the caller fails the flush (alloc.h) */
    bs->v = nv;
    tf_begin(&bs->v[bs->n], t->db->vfs, t->sub[res - 1], res, tn, start,
             start + bdb_tier_file_span(res), t->next_seq++, sealed, NULL, 0, flags, mets, nmet);
    return &bs->v[bs->n++];
}

/* Adds the windows of r to the builders of the file windows they fall in. */
static int add_rollup(tstate *t, struct builders *bs, enum bdb_res res, const series *s,
                      const bdb_rollup *r, uint64_t sealed, unsigned flags, const char *const *mets,
                      size_t nmet)
{
    int64_t span = bdb_tier_file_span(res);
    for (size_t i = 0; i < r->n;) {
        int64_t fs = bdb_align_down(r->w[i].start, span);
        tbuilder *tb = builder_for(t, bs, res, s->dev->tenant->name, fs, sealed, flags, mets, nmet);
        if (!tb)
            return BDB_ERR_NOMEM;
        tf_add(tb, s->dev->name, s->dev->nlen, s->metric, s->mlen, r);
        while (i < r->n && r->w[i].start < fs + span)
            i++;
    }
    return BDB_OK;
}

/* Files written (not yet published) by one flush or maintenance step. */
struct written {
    tfile **v;
    size_t n, cap;
};

/* Removes and frees what w holds (an error after some files were written). */
static void written_drop(tstate *t, struct written *w)
{
    int e = errno; /* the flush logs the first error's */
    for (size_t i = 0; i < w->n; i++) {
        if (w->v[i]->path)
            bdb_vfs_unlink(t->db->vfs, w->v[i]->path);
        tf_free(w->v[i]);
        free(w->v[i]);
    }
    free(w->v);
    memset(w, 0, sizeof *w);
    errno = e;
}

/* Finishes every builder of bs into w, then frees them (not bs->v); on error w is
 * dropped whole. */
static int finish_into(tstate *t, struct builders *bs, struct written *w, int rc)
{
    if (rc == BDB_OK && w->n + bs->n > w->cap) {
        size_t cap = (w->n + bs->n) * 2;
        tfile **p = bdb_realloc(w->v, cap * sizeof *p);
        if (!p)
            rc = BDB_ERR_NOMEM;
        else
            w->v = p, w->cap = cap;
    }
    for (size_t i = 0; i < bs->n && rc == BDB_OK; i++) {
        tfile *f = bdb_calloc(1, sizeof *f);
        if (!f) {
            rc = BDB_ERR_NOMEM;
            break;
        }
        rc = tf_finish(&bs->v[i], f);
        if (rc != BDB_OK) {
            free(f);
            break;
        }
        w->v[w->n++] = f;
    }
    /* unfinished ones remove their .tmp; the array stays the caller's */
    for (size_t i = 0; i < bs->n; i++)
        tf_builder_free(&bs->v[i]);
    bs->n = 0;
    if (rc != BDB_OK)
        written_drop(t, w);
    return rc;
}

int tier_write_files(tstate *t, tbuilder *v, size_t n, tfile ***out)
{
    struct written w = {NULL, 0, 0};
    struct builders bs = {v, n};
    int rc = finish_into(t, &bs, &w, BDB_OK);
    *out = rc == BDB_OK ? w.v : NULL;
    if (rc == BDB_OK && !w.v) /* nothing written: an empty list the caller can free */
        *out = bdb_calloc(1, sizeof **out);
    return rc == BDB_OK && !*out ? BDB_ERR_NOMEM : rc;
}

/* The metric names of v[a..b) sorted and unique (pointers into the series). */
static const char **series_mets(struct series *const *v, size_t a, size_t b, size_t *n)
{
    const char **m = bdb_malloc((b - a + 1) * sizeof *m);
    if (!m)
        return NULL;
    for (size_t i = a; i < b; i++)
        m[i - a] = v[i]->metric;
    *n = b - a;
    tf_names_sort_unique(m, n);
    return m;
}

int db_tier_flush(bdb_db *db, struct series *const *v, size_t n, uint64_t sealed, int rc)
{
    tstate *t = tier_state(db);
    if (rc != BDB_OK)
        return rc;
    if (!t)
        return BDB_ERR_NOMEM; /* the flush fails and keeps head and WAL (alloc.h) */
    db_merger g;
    memset(&g, 0, sizeof g);
    struct builders bs = {NULL, 0};
    struct written w = {NULL, 0, 0};
    bdb_rollup r[BDB_TIERS];
    for (int i = 0; i < BDB_TIERS; i++)
        bdb_rollup_init(&r[i], bdb_res_width((enum bdb_res)(i + 1)));
    uint64_t skipped = 0;
    /* late path: windows recomputed from raw; only which ones, until published */
    late_frozen_sort(db);
    struct redone {
        const series *s;
        enum bdb_res res;
        int64_t start;
    } *rd = NULL;
    size_t nrd = 0, caprd = 0;
    bdb_rollup rep[BDB_TIERS];
    for (int k = 0; k < BDB_TIERS; k++)
        bdb_rollup_init(&rep[k], r[k].width);
    int only_1h = tier_derived(db);
    /* The series are in key order: one tenant at a time, whose files are finished
     * (written and synced, published with the rest below) before the next begins, so
     * a flush keeps one tenant's records and open files, not every tenant's. */
    for (size_t a = 0, b; a < n && rc == BDB_OK; a = b) {
        for (b = a + 1; b < n && v[b]->dev->tenant == v[a]->dev->tenant; b++)
            ;
        size_t nmet = 0;
        const char **mets = series_mets(v, a, b, &nmet);
        if (!mets)
            rc = BDB_ERR_NOMEM;
        /* The frozen chunks are read-only until the flush frees them: no lock needed. */
        for (size_t i = a; i < b && rc == BDB_OK; i++) {
            for (int k = 0; k < BDB_TIERS; k++) {
                bdb_rollup_reset(&r[k]);
                bdb_rollup_reset(&rep[k]);
            }
            db_merger_add_list(&g, v[i]->frozen, INT64_MIN, INT64_MAX, 0, NULL, NULL);
            rc = tier_merge_into(&g, &r[0]);
            skipped += r[0].skipped;
            /* hours from minutes, days from hours: the pyramid, never raw again */
            if (rc == BDB_OK)
                rc = bdb_rollup_merge(&r[1], &r[0]);
            if (rc == BDB_OK)
                rc = bdb_rollup_merge(&r[2], &r[1]);
            if (rc == BDB_OK)
                rc = late_recompute(db, v[i], r, rep);
            /* sink: windows another data directory flushed, merged into the partial */
            for (int k = 0; k < BDB_TIERS && rc == BDB_OK; k++)
                if (!only_1h || k + 1 == BDB_RES_1H)
                    rc = agg_sink_import_tier(db, v[i], (enum bdb_res)(k + 1), &r[k]);
            /* derived tiers are read from the finer level: their windows stay in memory,
             * the minutes to make the hours */
            for (int k = 0; k < BDB_TIERS && rc == BDB_OK; k++)
                if (!only_1h || k + 1 == BDB_RES_1H)
                    rc = add_rollup(t, &bs, (enum bdb_res)(k + 1), v[i], &r[k], sealed, 0, mets,
                                    nmet);
            for (int k = 0; k < BDB_TIERS && rc == BDB_OK && rep[0].n; k++) {
                if (!only_1h || k + 1 == BDB_RES_1H)
                    rc = add_rollup(t, &bs, (enum bdb_res)(k + 1), v[i], &rep[k], sealed,
                                    TF_REPLACES, mets, nmet);
                if (rc == BDB_OK && nrd + rep[k].n > caprd) {
                    size_t cap = (nrd + rep[k].n) * 2;
                    struct redone *p = bdb_realloc(rd, cap * sizeof *p);
                    if (!p)
                        rc = BDB_ERR_NOMEM; /* the flush fails and keeps head and WAL */
                    else
                        rd = p, caprd = cap;
                }
                for (size_t x = 0; rc == BDB_OK && x < rep[k].n; x++)
                    rd[nrd++] = (struct redone){v[i], (enum bdb_res)(k + 1), rep[k].w[x].start};
            }
        }
        rc = finish_into(t, &bs, &w, rc);
        free(mets);
    }
    builders_free(&bs);
    for (int k = 0; k < BDB_TIERS; k++)
        bdb_rollup_free(&rep[k]);
    for (int i = 0; i < BDB_TIERS; i++)
        bdb_rollup_free(&r[i]);
    db_merger_free(&g);
    if (rc == BDB_OK && agg_sink_tiers(db)) { /* sink: complete windows before publishing */
        pthread_rwlock_wrlock(&t->lock);
        t->sink_synced = 0;
        pthread_rwlock_unlock(&t->lock);
        rc = agg_sink_put_tiers(db, v, n, w.v, w.n);
        if (rc != BDB_OK)
            written_drop(t, &w);
    }
    if (rc == BDB_OK) {
        pthread_rwlock_wrlock(&t->lock);
        for (size_t i = 0; i < w.n; i++)
            tier_files_add(t, w.v[i]);
        t->covered_at = atomic_load(&db->flushes);
        t->sink_synced = 1; /* sink: every window of the published files was put */
        pthread_rwlock_unlock(&t->lock);
        atomic_fetch_add(&t->written, w.n);
        for (size_t i = 0; i < nrd; i++)
            late_recomputed(db, rd[i].s, rd[i].res, rd[i].start);
        late_frozen_done(db);
        if (skipped)
            BDB_WARN("tiers: %llu non-finite samples not aggregated", (unsigned long long)skipped);
    } else {
        written_drop(t, &w);
        BDB_ERROR("tier write failed: %s; the flush will be retried", bdb_strerror(rc));
    }
    free(w.v);
    free(rd);
    return rc;
}

/* ---------------------------------------------------------------- raw to 1m */

static int64_t retention_from(bdb_db *db, const char *tn, enum bdb_res res);

struct mkey {
    char *dev, *met;
};

static int mkey_cmp(const void *a, const void *b)
{
    const struct mkey *x = a, *y = b;
    int c = strcmp(x->dev, y->dev);
    return c ? c : strcmp(x->met, y->met);
}

/* The (device, metric) pairs of tenant tn in blocks v[0..n), sorted and unique. */
static int tenant_keys(const blockent *v, size_t n, const char *tn, struct mkey **out, size_t *nout)
{
    size_t tl = strlen(tn), nk = 0, cap = 0;
    struct mkey *k = NULL;
    int rc = BDB_OK;
    for (size_t i = 0; i < n && rc == BDB_OK; i++) {
        bdb_block_iter it;
        bdb_series_key sk;
        rc = bdb_block_iter_seek(v[i].b, &it, tn, tl, NULL, 0);
        int x;
        while (rc == BDB_OK && (x = bdb_block_iter_next(&it, &sk, NULL)) == 1 &&
               sk.tenant_len == tl && !memcmp(sk.tenant, tn, tl)) {
            if (nk == cap) {
                size_t nc = cap ? cap * 2 : 256;
                struct mkey *p = bdb_realloc(k, nc * sizeof *p);
                if (!p) {
                    rc = BDB_ERR_NOMEM;
                    break;
                }
                k = p;
                cap = nc;
            }
            k[nk].dev = bdb_strndup(sk.device, sk.device_len);
            k[nk].met = bdb_strndup(sk.metric, sk.metric_len);
            if (!k[nk].dev || !k[nk].met) {
                free(k[nk].dev);
                free(k[nk].met);
                rc = BDB_ERR_NOMEM;
                break;
            }
            nk++;
        }
        if (rc == BDB_OK && x < 0)
            rc = x;
    }
    if (rc == BDB_OK && nk > 1) {
        qsort(k, nk, sizeof *k, mkey_cmp);
        size_t u = 1;
        for (size_t i = 1; i < nk; i++) {
            if (mkey_cmp(&k[u - 1], &k[i]) == 0) {
                free(k[i].dev);
                free(k[i].met);
            } else {
                k[u++] = k[i];
            }
        }
        nk = u;
    }
    if (rc != BDB_OK) {
        for (size_t i = 0; i < nk; i++) {
            free(k[i].dev);
            free(k[i].met);
        }
        free(k);
        k = NULL;
        nk = 0;
    }
    *out = k;
    *nout = nk;
    return rc;
}

int db_tier_keep_minutes(bdb_db *db, const char *tn, const blockent *v, size_t n, int64_t ws,
                         int64_t we)
{
    if (!tier_derived(db))
        return BDB_OK; /* with a sink the minutes were stored at flush */
    if (we <= retention_from(db, tn, BDB_RES_1M))
        return BDB_OK; /* the 1m tier would not answer them either */
    /* Every minute of the window is past the 1m tier's TTL: the tier file would only
     * outlive them because files leave whole. A deleted tenant's key (TTL 1 ms) must
     * not get its minutes written again after its drop deleted its tier files. */
    int64_t keep = tier_retention(db, tn, BDB_RES_1M), now = bdb_clock_now(&db->o.clock);
    if (keep > 0 && now >= INT64_MIN + keep && we <= now - keep)
        return BDB_OK;
    tstate *t = tier_state(db);
    if (!t)
        return BDB_ERR_NOMEM;
    struct mkey *keys;
    size_t nk;
    int rc = tenant_keys(v, n, tn, &keys, &nk);
    struct builders bs = {NULL, 0};
    /* the metric table of the files: the keys' metrics */
    size_t nmet = nk;
    const char **mets = bdb_malloc((nk + 1) * sizeof *mets);
    if (!mets && rc == BDB_OK)
        rc = BDB_ERR_NOMEM;
    for (size_t i = 0; mets && i < nk; i++)
        mets[i] = keys[i].met;
    if (mets)
        tf_names_sort_unique(mets, &nmet);
    bdb_rollup r;
    bdb_rollup_init(&r, BDB_MS_MIN);
    int64_t span = bdb_tier_file_span(BDB_RES_1M);
    size_t tl = strlen(tn);
    for (size_t i = 0; i < nk && rc == BDB_OK; i++) {
        size_t dl = strlen(keys[i].dev), ml = strlen(keys[i].met);
        bdb_series_key sk = {tn, tl, keys[i].dev, dl, keys[i].met, ml};
        bdb_rollup_reset(&r);
        rc = tier_raw_key_minutes(db, &sk, ws, we, &r);
        /* KEPT, and REPLACES: complete minutes from raw take the place of any window of
         * theirs in older files (a pass repeated after a crash, an older version's) */
        for (size_t w = 0; w < r.n && rc == BDB_OK;) {
            int64_t fs = bdb_align_down(r.w[w].start, span);
            tbuilder *tb = builder_for(t, &bs, BDB_RES_1M, tn, fs, db->wal_upto,
                                       TF_REPLACES | TF_KEPT, mets, nmet);
            if (!tb)
                rc = BDB_ERR_NOMEM;
            else
                tf_add(tb, keys[i].dev, dl, keys[i].met, ml, &r);
            while (w < r.n && r.w[w].start < fs + span)
                w++;
        }
    }
    bdb_rollup_free(&r);
    tfile **files = NULL;
    size_t nb = bs.n;
    if (rc == BDB_OK && nb)
        rc = tier_write_files(t, bs.v, nb, &files);
    /* the builders are done with the metric table, which points into the keys */
    free(mets);
    for (size_t i = 0; i < nk; i++) {
        free(keys[i].dev);
        free(keys[i].met);
    }
    free(keys);
    size_t added = 0;
    if (rc == BDB_OK && nb) {
        pthread_rwlock_wrlock(&t->lock);
        while (added < nb && tier_files_add(t, files[added]) == BDB_OK)
            added++;
        pthread_rwlock_unlock(&t->lock);
        atomic_fetch_add(&t->written, added);
        /* a file not listed would hide its minutes once the blocks go: unlinked, and the
         * error keeps the blocks (a listed one is harmless: raw wins where it still is) */
        for (size_t i = added; i < nb; i++) {
            bdb_vfs_unlink(db->vfs, files[i]->path);
            tf_free(files[i]);
            free(files[i]);
        }
        if (added < nb)
            rc = BDB_ERR_NOMEM;
    }
    if (rc == BDB_OK && nb) {
        BDB_INFO("tier 1m: the minutes of %s in [%lld, %lld) kept in %zu file(s) before their raw "
                 "data goes",
                 tn, (long long)ws, (long long)we, nb);
    }
    free(files);
    builders_free(&bs);
    return rc;
}

/* ---------------------------------------------------------------- read */

/* Merges the records of (tn, dn, metric) of every file of tier res overlapping
 * [lo, hi) into out, in list order (seq order within a file window, so replacing
 * windows land after what they replace). Caller holds t->lock (shared) or is the flush
 * thread. */
static int read_files(tstate *t, const char *tn, const char *dn, const char *metric,
                      enum bdb_res res, int64_t lo, int64_t hi, bdb_rollup *out)
{
    int rc = BDB_OK;
    for (size_t i = 0; i < t->n && rc == BDB_OK; i++) {
        const tfile *f = t->files[i];
        if (f->res != res || f->end <= lo || f->start >= hi || strcmp(f->tenant, tn) != 0)
            continue;
        tloc loc;
        if (tf_find(f, dn, metric, &loc))
            rc = tf_read_rec_cached(t->db->rcache, f, &loc, lo, hi, out);
        if (rc == BDB_ERR_CORRUPT)
            BDB_ERROR("tier file %s: record %s/%s failed its check", f->path, dn, metric);
    }
    return rc;
}

int tier_read_files(bdb_db *db, const char *tn, const char *dn, const char *metric,
                    enum bdb_res res, int64_t lo, int64_t hi, bdb_rollup *out)
{
    tstate *t = tier_state(db);
    return t ? read_files(t, tn, dn, metric, res, lo, hi, out) : BDB_ERR_NOMEM;
}

int bdb_db_tier_read(bdb_db *db, const char *tn, const char *dn, const char *const *metrics,
                     size_t nmetrics, enum bdb_res res, int64_t from, int64_t to, bdb_rollup *out)
{
    /* the late path's marks first: a flush may recompute them meanwhile, and a window
     * fixed from raw is right either way */
    int64_t *dirty = NULL;
    size_t ndirty = late_dirty_minutes(db, tn, dn, &dirty);
    if (ndirty == LATE_NOMEM)
        return BDB_ERR_NOMEM;
    int rc = tier_read_merged(db, tn, dn, metrics, nmetrics, res, from, to, out);
    if (rc == BDB_OK && ndirty)
        rc = late_fix_read(db, tn, dn, metrics, nmetrics, res, from, to, dirty, ndirty, out);
    free(dirty);
    return rc;
}

int tier_derived(const bdb_db *db)
{
    return db->o.sink == NULL;
}

/* Windows of every file of tier res and tenant tn overlapping [lo, hi) whose flags
 * match (want, under mask), merged into out for each metric. Caller holds t->lock. */
static int read_files_if(tstate *t, const char *tn, const char *dn, const char *const *metrics,
                         size_t nmetrics, enum bdb_res res, unsigned mask, unsigned want,
                         int64_t lo, int64_t hi, bdb_rollup *out)
{
    int rc = BDB_OK;
    for (size_t i = 0; i < t->n && rc == BDB_OK; i++) {
        const tfile *f = t->files[i];
        if (f->res != res || f->end <= lo || f->start >= hi || (f->flags & mask) != want ||
            strcmp(f->tenant, tn) != 0)
            continue;
        for (size_t m = 0; m < nmetrics && rc == BDB_OK; m++) {
            tloc loc;
            if (tf_find(f, dn, metrics[m], &loc))
                rc = tf_read_rec_cached(t->db->rcache, f, &loc, lo, hi, &out[m]);
        }
        if (rc == BDB_ERR_CORRUPT)
            BDB_ERROR("tier file %s: record of %s failed its check", f->path, dn);
    }
    return rc;
}

/* Merges into out the windows of from whose span of width `unit` (a block window, a
 * 30-day 1h file span) holds no window of busy (which may be out: its spans are taken
 * before anything is merged): files answer where the finer level has nothing. */
static int merge_where_free(bdb_rollup *out, const bdb_rollup *from, int64_t unit,
                            const bdb_rollup *busy)
{
    size_t nb = busy->n;
    int64_t *spans = bdb_malloc((nb + 1) * sizeof *spans);
    if (!spans)
        return BDB_ERR_NOMEM;
    for (size_t i = 0; i < nb; i++) /* busy is sorted: so are its spans */
        spans[i] = bdb_align_down(busy->w[i].start, unit);
    int rc = BDB_OK;
    size_t j = 0;
    for (size_t i = 0; i < from->n && rc == BDB_OK; i++) {
        int64_t sp = bdb_align_down(from->w[i].start, unit);
        while (j < nb && spans[j] < sp)
            j++;
        if (j < nb && spans[j] == sp)
            continue;
        rc = bdb_rollup_merge_window(out, &from->w[i]);
    }
    free(spans);
    return rc;
}

/* The first start the retention of tier res leaves answered for tenant tn: whole file
 * spans, as the files' retention drops them (INT64_MIN: kept forever). */
static int64_t retention_from(bdb_db *db, const char *tn, enum bdb_res res)
{
    int64_t keep = tier_retention(db, tn, res), now = bdb_clock_now(&db->o.clock);
    if (keep <= 0 || now < INT64_MIN + keep)
        return INT64_MIN;
    return bdb_align_down(now - keep, bdb_tier_file_span(res));
}

/* The 1m tier of the embedded engine: minutes from raw data (head and blocks), the
 * newest write per time winning; where a block window holds none of the device's raw
 * samples, from the 1m files, which maintenance wrote before it dropped the raw data
 * (KEPT), or flushes of older versions wrote. A minute is stored only once its raw
 * samples are gone: at 10 s reports a stored minute (20 bytes and more) costs more than
 * the six samples it sums up. A crash between writing kept minutes and dropping their
 * blocks leaves both: the raw data answers. */
static int read_derived_1m(bdb_db *db, tstate *t, const char *tn, const char *dn,
                           const char *const *metrics, size_t nmetrics, int64_t lo, int64_t hi,
                           bdb_rollup *out)
{
    pthread_rwlock_rdlock(&db->cat_lock);
    tenant *te = cat_tenant(db, tn, strlen(tn), 0);
    device *d = te ? cat_device(db, te, dn, strlen(dn), 0) : NULL;
    pthread_rwlock_unlock(&db->cat_lock);
    if (!d)
        return BDB_ERR_NOTFOUND;
    int64_t from = retention_from(db, tn, BDB_RES_1M);
    if (lo < from)
        lo = from;
    if (lo >= hi)
        return BDB_OK;
    bdb_rollup *f = bdb_calloc(nmetrics, sizeof *f);
    if (!f)
        return BDB_ERR_NOMEM;
    for (size_t m = 0; m < nmetrics; m++)
        bdb_rollup_init(&f[m], BDB_MS_MIN);
    /* Raw data first, files second: maintenance keeps a window's minutes before it
     * drops its blocks, so if it does both in between, raw still has the window (and
     * wins); it is never in neither. */
    int rc = BDB_OK;
    for (size_t m = 0; m < nmetrics && rc == BDB_OK; m++)
        rc = tier_raw_minutes(db, d, metrics[m], lo, hi, &out[m]);
    if (rc == BDB_OK) {
        pthread_rwlock_rdlock(&t->lock);
        rc = read_files_if(t, tn, dn, metrics, nmetrics, BDB_RES_1M, 0, 0, lo, hi, f);
        pthread_rwlock_unlock(&t->lock);
    }
    for (size_t m = 0; m < nmetrics && rc == BDB_OK; m++)
        if (f[m].n)
            rc = merge_where_free(&out[m], &f[m], db->o.block_window_ms, &out[m]);
    for (size_t m = 0; m < nmetrics; m++)
        bdb_rollup_free(&f[m]);
    free(f);
    return rc;
}

/* The 1d tier of the embedded engine: days folded from the 1h tier (files and head),
 * plus the days kept in 1d files when 1h files went (KEPT: published in the step that
 * removed those, so the two never hold the same hours), plus, where no 1h file of the
 * tenant covers a 30-day span, the days of 1d files older versions' flushes wrote.
 * Stored beside the hours, the days of a fleet's first day cost as many bytes. */
static int read_derived_1d_once(bdb_db *db, tstate *t, const char *tn, const char *dn,
                                const char *const *metrics, size_t nmetrics, int64_t lo, int64_t hi,
                                bdb_rollup *out);

/* Kept days and the 1h files they replace change places in one locked step, but the
 * days and the hours are read in two: a read that saw that step happen (the tier's
 * generation moved) is done again, so it never counts an hour twice or not at all. */
static int read_derived_1d(bdb_db *db, tstate *t, const char *tn, const char *dn,
                           const char *const *metrics, size_t nmetrics, int64_t lo, int64_t hi,
                           bdb_rollup *out)
{
    for (;;) {
        uint64_t g = atomic_load(&t->gen);
        for (size_t m = 0; m < nmetrics; m++)
            bdb_rollup_reset(&out[m]);
        int rc = read_derived_1d_once(db, t, tn, dn, metrics, nmetrics, lo, hi, out);
        if (rc != BDB_OK || atomic_load(&t->gen) == g)
            return rc; /* a retention pass is rare and short: this ends */
    }
}

static int read_derived_1d_once(bdb_db *db, tstate *t, const char *tn, const char *dn,
                                const char *const *metrics, size_t nmetrics, int64_t lo, int64_t hi,
                                bdb_rollup *out)
{
    int64_t from = retention_from(db, tn, BDB_RES_1D);
    if (lo < from)
        lo = from;
    if (lo >= hi)
        return BDB_OK;
    int64_t span = bdb_tier_file_span(BDB_RES_1H);
    bdb_rollup *h = bdb_calloc(2 * nmetrics, sizeof *h), *old = h + nmetrics;
    if (!h)
        return BDB_ERR_NOMEM;
    for (size_t m = 0; m < nmetrics; m++) {
        bdb_rollup_init(&h[m], BDB_MS_HOUR);
        h[m].stats_only = out[m].stats_only;
        bdb_rollup_init(&old[m], BDB_MS_DAY);
        old[m].stats_only = out[m].stats_only;
    }
    /* the 1h spans of the tenant that have files: there, older 1d files are superseded */
    bdb_rollup spans;
    bdb_rollup_init(&spans, span);
    pthread_rwlock_rdlock(&t->lock);
    int rc = read_files_if(t, tn, dn, metrics, nmetrics, BDB_RES_1D, TF_KEPT, TF_KEPT, lo, hi, out);
    if (rc == BDB_OK)
        rc = read_files_if(t, tn, dn, metrics, nmetrics, BDB_RES_1D, TF_KEPT, 0, lo, hi, old);
    for (size_t i = 0; i < t->n && rc == BDB_OK; i++) {
        const tfile *f = t->files[i];
        if (f->res == BDB_RES_1H && f->end > lo && f->start < hi && !strcmp(f->tenant, tn)) {
            bdb_window w;
            memset(&w, 0, sizeof w);
            bdb_sketch_init_default(&w.sk);
            w.start = f->start;
            rc = bdb_stats_add(&w.st, 0.0); /* a marker: the span has a 1h file */
            if (rc == BDB_OK)
                rc = bdb_rollup_merge_window(&spans, &w);
            bdb_sketch_free(&w.sk);
        }
    }
    pthread_rwlock_unlock(&t->lock);
    if (rc == BDB_OK)
        rc = tier_read_merged(db, tn, dn, metrics, nmetrics, BDB_RES_1H, lo, hi, h);
    for (size_t m = 0; m < nmetrics && rc == BDB_OK; m++) {
        rc = bdb_rollup_merge(&out[m], &h[m]);
        if (rc == BDB_OK && old[m].n)
            rc = merge_where_free(&out[m], &old[m], span, &spans);
    }
    bdb_rollup_free(&spans);
    for (size_t m = 0; m < 2 * nmetrics; m++)
        bdb_rollup_free(&h[m]);
    free(h);
    return rc;
}

int tier_read_merged(bdb_db *db, const char *tn, const char *dn, const char *const *metrics,
                     size_t nmetrics, enum bdb_res res, int64_t from, int64_t to, bdb_rollup *out)
{
    int64_t width = bdb_res_width(res);
    if (width == 0 || from >= to)
        return BDB_ERR_INVALID;
    /* Whole windows only: every window that starts before `to` is read to its end,
     * from the files and from the head alike (a window cut at `to` in the head but
     * whole in the files would be neither). */
    int64_t lo = bdb_align_down(from, width);
    int64_t hi = to > INT64_MAX - width ? INT64_MAX : bdb_align_down(to - 1, width) + width;
    for (size_t i = 0; i < nmetrics; i++) {
        if (out[i].width != width)
            return BDB_ERR_INVALID;
        bdb_rollup_reset(&out[i]);
    }
    tstate *t = tier_state(db);
    if (!t)
        return BDB_ERR_NOMEM;
    if (res == BDB_RES_1M && tier_derived(db))
        return read_derived_1m(db, t, tn, dn, metrics, nmetrics, lo, hi, out);
    if (res == BDB_RES_1D && tier_derived(db))
        return read_derived_1d(db, t, tn, dn, metrics, nmetrics, lo, hi, out);
    pthread_rwlock_rdlock(&t->lock);
    pthread_rwlock_rdlock(&db->cat_lock);
    tenant *te = cat_tenant(db, tn, strlen(tn), 0);
    device *d = te ? cat_device(db, te, dn, strlen(dn), 0) : NULL;
    pthread_rwlock_unlock(&db->cat_lock);
    int rc = d ? BDB_OK : BDB_ERR_NOTFOUND;
    int from_sink = rc == BDB_OK && t->sink_synced && agg_sink_tiers(db);
    if (from_sink) /* sink: the flushed windows come from the sink (db_agg_sink.c) */
        from_sink = agg_sink_read_tiers(db, d, tn, dn, metrics, nmetrics, res, lo, hi, out);
    if (from_sink < 0) {
        rc = from_sink;
        from_sink = 0;
    }
    /* tier files of this tenant and tier overlapping [lo, hi) */
    for (size_t m = 0; m < nmetrics && rc == BDB_OK && !from_sink; m++)
        rc = read_files(t, tn, dn, metrics[m], res, lo, hi, &out[m]);
    /* the head: samples not yet in tier files */
    if (rc == BDB_OK) {
        db_merger g;
        memset(&g, 0, sizeof g);
        bdb_rollup tmp;
        pthread_rwlock_rdlock(&db->flush_lock);
        int skip_frozen = t->covered_at == atomic_load(&db->flushes);
        pthread_mutex_lock(dev_lock(db, d));
        for (size_t m = 0; m < nmetrics && rc == BDB_OK; m++) {
            series *s = cat_series(db, d, metrics[m], strlen(metrics[m]), 0);
            if (!s)
                continue;
            uint64_t base = 0;
            if (!skip_frozen)
                base = db_merger_add_list(&g, s->frozen, lo, hi, 0, NULL, NULL);
            db_merger_add_list(&g, s->active, lo, hi, base, NULL, NULL);
            bdb_rollup_init(&tmp, width);
            tmp.stats_only = out[m].stats_only;
            rc = tier_merge_into(&g, &tmp);
            if (rc == BDB_OK)
                rc = bdb_rollup_merge(&out[m], &tmp);
            bdb_rollup_free(&tmp);
        }
        pthread_mutex_unlock(dev_lock(db, d));
        pthread_rwlock_unlock(&db->flush_lock);
        db_merger_free(&g);
    }
    pthread_rwlock_unlock(&t->lock);
    return rc;
}

const db_consumer db_tier_consumer = {
    .name = "tier",
    .flush = db_tier_flush,
    .retire = db_tier_keep_minutes,
    .maintain = db_tier_maintain,
    .purge_tenant = db_tier_forget_tenant,
    .close = db_tier_close,
};
