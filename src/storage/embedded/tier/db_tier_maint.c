/* db_tier_maint: maintenance of the tier files (db_tier.h): retention drops files
 * wholly older than their tenant's tier retention, compaction merges a window's small
 * files into one. Runs under flush_mutex like the flush hook, and takes tier_lock
 * exclusively only to swap the file lists (order: db_tier.c). */
#include "storage/embedded/tier/db_tier.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/log.h"
#include "storage/embedded/core/db_int.h"
#include "storage/embedded/tier/db_tier_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t retention_of(tstate *t, const char *tn, enum bdb_res res)
{
    int64_t dflt = bdb_tier_default_retention(res);
    int64_t conf = t->db->o.tier_retention_ms[res - 1];
    if (conf > 0)
        dflt = conf;
    else if (conf < 0)
        dflt = 0;
    return t->ret_cb ? t->ret_cb(t->ret_ctx, tn, res, dflt) : dflt;
}

int64_t tier_retention(bdb_db *db, const char *tn, enum bdb_res res)
{
    tstate *t = tier_state(db);
    if (!t) /* without the hook's answer: keep everything this time */
        return 0;
    return retention_of(t, tn, res);
}

static void drop_file(tstate *t, tfile *f, const char *why)
{
    BDB_INFO("tier %s: %s %s", bdb_res_name(f->res), why, f->path);
    bdb_vfs_unlink(t->db->vfs, f->path);
    tf_free(f);
    free(f);
}

/* Walks the series of in[0..nin) (one tier, tenant and file window, in seq order) in
 * (device, metric) order and calls emit with each one's windows merged across the
 * files (replacing files put in place of what they replace). */
typedef int (*series_fn)(void *ctx, const char *dn, const char *mn, const bdb_rollup *r);

static int merge_series(tfile *const *in, size_t nin, series_fn emit, void *ctx)
{
    titer *it = bdb_calloc(nin, sizeof *it);
    int *live = bdb_calloc(nin, sizeof *live);
    if (!it || !live) {
        free(it);
        free(live);
        return BDB_ERR_NOMEM;
    }
    bdb_rollup r;
    bdb_rollup_init(&r, bdb_res_width(in[0]->res));
    int rc = BDB_OK;
    for (size_t i = 0; i < nin; i++) {
        tf_iter_init(&it[i], in[i]);
        if (rc == BDB_OK && (live[i] = tf_iter_next(&it[i])) < 0)
            rc = live[i];
    }
    while (rc == BDB_OK) {
        size_t low = nin;
        for (size_t i = 0; i < nin; i++) {
            if (live[i] != 1)
                continue;
            int c = -1;
            if (low < nin && !(c = strcmp(tf_iter_device(&it[i]), tf_iter_device(&it[low]))))
                c = strcmp(tf_iter_metric(&it[i]), tf_iter_metric(&it[low]));
            if (c < 0)
                low = i;
        }
        if (low == nin)
            break;
        /* the names live in the input file, not in the iterator: valid after it moves */
        const char *dn = tf_iter_device(&it[low]), *mn = tf_iter_metric(&it[low]);
        bdb_rollup_reset(&r);
        for (size_t i = 0; i < nin && rc == BDB_OK; i++) {
            if (live[i] != 1 || strcmp(tf_iter_device(&it[i]), dn) ||
                strcmp(tf_iter_metric(&it[i]), mn))
                continue;
            rc = tf_iter_read(&it[i], &r);
            if (rc == BDB_OK && (live[i] = tf_iter_next(&it[i])) < 0)
                rc = live[i];
        }
        if (rc == BDB_OK)
            rc = emit(ctx, dn, mn, &r);
    }
    for (size_t i = 0; i < nin; i++)
        tf_iter_free(&it[i]);
    free(it);
    free(live);
    bdb_rollup_free(&r);
    return rc;
}

/* Every metric name of the files in[0..nin), sorted and unique: the metric table of
 * a file merged from them (pointers into their names). NULL when out of memory. */
static const char **union_mets(tfile *const *in, size_t nin, size_t *n)
{
    size_t tot = 0;
    for (size_t i = 0; i < nin; i++)
        tot += in[i]->nmet;
    const char **m = bdb_malloc((tot + 1) * sizeof *m);
    if (!m)
        return NULL;
    size_t j = 0;
    for (size_t i = 0; i < nin; i++)
        for (size_t k = 0; k < in[i]->nmet; k++)
            m[j++] = in[i]->names + in[i]->mets[k];
    *n = j;
    tf_names_sort_unique(m, n);
    return m;
}

static int add_series(void *ctx, const char *dn, const char *mn, const bdb_rollup *r)
{
    tf_add(ctx, dn, strlen(dn), mn, strlen(mn), r);
    return BDB_OK;
}

/* The 1d tier is derived from the 1h tier while that exists (db_tier.c): before the 1h
 * files of one (tenant, file window) go, their days go to a 1d file flagged KEPT that
 * lists them as its inputs. It is published in the same locked step that removes them,
 * so a reader sees the days in one place; a crash before their unlink deletes them at
 * the next open (a file another lists as input is superseded). Kept days add to the
 * 1h tier's windows: a 1h file written later into the window (a backfill) is new data.
 * The days of a 30-day window are whole in it. Nothing with a sink, or when the 1d
 * tier's retention has passed the window. */
struct days {
    tstate *t;
    const char *tenant;
    const uint64_t *inputs;
    size_t ninputs;
    tbuilder b[2];     /* a 30-day window lies in at most two 365-day files */
    const char **mets; /* the metric table of the inputs */
    size_t nmet;
    int64_t start[2];
    uint64_t seq[2];
    size_t n;
    bdb_rollup d;
};

static int add_days(void *ctx, const char *dn, const char *mn, const bdb_rollup *r)
{
    struct days *k = ctx;
    bdb_rollup_reset(&k->d);
    int rc = bdb_rollup_merge(&k->d, r);
    int64_t span = bdb_tier_file_span(BDB_RES_1D);
    for (size_t w = 0; w < k->d.n && rc == BDB_OK;) {
        int64_t fs = bdb_align_down(k->d.w[w].start, span);
        size_t j = 0;
        while (j < k->n && k->start[j] != fs)
            j++;
        if (j == k->n) {
            if (k->n == 2)
                return BDB_ERR_INVALID; /* cannot happen: see struct days */
            k->start[j] = fs;
            k->seq[j] = k->t->next_seq++;
            tf_begin(&k->b[j], k->t->db->vfs, k->t->sub[BDB_RES_1D - 1], BDB_RES_1D, k->tenant, fs,
                     fs + span, k->seq[j], k->t->db->wal_upto, k->inputs, k->ninputs, TF_KEPT,
                     k->mets, k->nmet);
            k->n++;
        }
        tf_add(&k->b[j], dn, strlen(dn), mn, strlen(mn), &k->d);
        while (w < k->d.n && k->d.w[w].start < fs + span)
            w++;
    }
    return rc;
}

struct kept {
    tfile **v;
    size_t n, cap;
};

/* Writes the kept days of in[0..nin) (one tenant and 1h window) durably and adds the
 * files to kp, unpublished. The list of files is not changed. */
static int keep_days(tstate *t, tfile *const *in, size_t nin, int64_t now, struct kept *kp)
{
    int64_t keep = retention_of(t, in[0]->tenant, BDB_RES_1D);
    if (!tier_derived(t->db) || (keep > 0 && in[0]->end <= now - keep))
        return BDB_OK;
    uint64_t *seqs = bdb_malloc(nin * sizeof *seqs);
    if (!seqs)
        return BDB_ERR_NOMEM;
    for (size_t i = 0; i < nin; i++) {
        seqs[i] = in[i]->seq;
        if (in[i]->wal_upto > t->db->wal_upto) {
            free(seqs);
            return BDB_ERR_INVALID; /* not committed: left for a later pass */
        }
    }
    struct days k;
    memset(&k, 0, sizeof k);
    k.t = t;
    k.tenant = in[0]->tenant;
    k.inputs = seqs;
    k.ninputs = nin;
    bdb_rollup_init(&k.d, BDB_MS_DAY);
    k.mets = union_mets(in, nin, &k.nmet);
    int rc = k.mets ? merge_series(in, nin, add_days, &k) : BDB_ERR_NOMEM;
    bdb_rollup_free(&k.d);
    tfile **out = NULL;
    if (rc == BDB_OK && k.n && kp->n + k.n > kp->cap) {
        size_t cap = (kp->n + k.n) * 2;
        tfile **p = bdb_realloc(kp->v, cap * sizeof *p);
        if (p) {
            kp->v = p;
            kp->cap = cap;
        } else {
            rc = BDB_ERR_NOMEM;
        }
    }
    if (rc == BDB_OK && k.n)
        rc = tier_write_files(t, k.b, k.n, &out);
    for (size_t j = 0; rc == BDB_OK && j < k.n; j++)
        kp->v[kp->n++] = out[j];
    free(out);
    for (size_t j = 0; j < k.n; j++)
        tf_builder_free(&k.b[j]);
    free(k.mets);
    free(seqs);
    return rc;
}

static void retention(tstate *t)
{
    int64_t now = bdb_clock_now(&t->db->o.clock);
    tfile **drop = bdb_calloc(t->n + 1, sizeof *drop);
    if (!drop) /* out of memory: nothing dropped this time, the next maintenance does */
        return;
    /* 1h files about to go: their days first; a group whose days could not be kept
     * stays for the next pass (only this thread changes the list: no lock to read it) */
    struct kept kp = {NULL, 0, 0};
    for (size_t a = 0; a < t->n;) {
        tfile *f = t->files[a];
        size_t b = a + 1;
        while (b < t->n && t->files[b]->res == f->res && t->files[b]->start == f->start &&
               !strcmp(t->files[b]->tenant, f->tenant))
            b++;
        int64_t keep = retention_of(t, f->tenant, f->res);
        if (f->res == BDB_RES_1H && keep > 0 && f->end <= now - keep) {
            int rc = keep_days(t, &t->files[a], b - a, now, &kp);
            if (rc != BDB_OK) {
                BDB_ERROR("tier 1d: cannot keep the days of %s in [%lld, %lld) before its 1h "
                          "files go: %s; they stay",
                          f->tenant, (long long)f->start, (long long)f->end, bdb_strerror(rc));
                for (size_t i = a; i < b; i++)
                    t->files[i]->hold = 1;
            }
        }
        a = b;
    }
    size_t nd = 0, k = 0;
    pthread_rwlock_wrlock(&t->lock);
    /* room for the kept files first, so that publishing them cannot fail; without it
     * they are unlinked and what they keep stays where it is */
    int publish = 1;
    if (kp.n && t->n + kp.n > t->cap) {
        tfile **p = bdb_realloc(t->files, (t->n + kp.n) * sizeof *p);
        if (p) {
            t->files = p;
            t->cap = t->n + kp.n;
        } else {
            publish = 0;
        }
    }
    for (size_t j = 0; !publish && j < kp.n; j++)
        for (size_t q = 0; q < kp.v[j]->ninputs; q++)
            for (size_t i = 0; i < t->n; i++)
                if (t->files[i]->seq == kp.v[j]->inputs[q])
                    t->files[i]->hold = 1;
    for (size_t i = 0; i < t->n; i++) {
        tfile *f = t->files[i];
        int64_t keep = retention_of(t, f->tenant, f->res);
        if (keep > 0 && f->end <= now - keep && !f->hold)
            drop[nd++] = f;
        else
            t->files[k++] = f;
        f->hold = 0;
    }
    t->n = k;
    for (size_t j = 0; publish && j < kp.n; j++)
        tier_files_add(t, kp.v[j]); /* cannot fail: room made above */
    if (publish && kp.n)
        atomic_fetch_add(&t->gen, 1); /* derived 1d reads in flight start again */
    pthread_rwlock_unlock(&t->lock);
    if (publish) {
        atomic_fetch_add(&t->written, kp.n);
    } else {
        BDB_ERROR("tier 1d: out of memory publishing kept days; the 1h files stay");
        for (size_t j = 0; j < kp.n; j++)
            drop_file(t, kp.v[j], "not published");
    }
    free(kp.v);
    for (size_t i = 0; i < nd; i++) {
        int r = drop[i]->res - 1;
        drop_file(t, drop[i], "retention drops");
        bdb_vfs_sync_dir(t->db->vfs, t->sub[r]);
        atomic_fetch_add(&t->dropped, 1);
    }
    free(drop);
}

/* Merges files [a, b) of t->files (one tier, tenant and file window, all committed)
 * into one. The new file lists the inputs' seqs, so a crash after its rename but
 * before the inputs are unlinked does not count them twice at the next open. */
static int compact(tstate *t, size_t a, size_t b)
{
    size_t nin = b - a;
    tfile **in = bdb_malloc(nin * sizeof *in);
    uint64_t *seqs = bdb_malloc(nin * sizeof *seqs);
    if (!in || !seqs) { /* the inputs stay; the next maintenance retries */
        free(in);
        free(seqs);
        return BDB_ERR_NOMEM;
    }
    uint64_t upto = 0;
    unsigned flags = 0;
    for (size_t i = 0; i < nin; i++) {
        in[i] = t->files[a + i];
        seqs[i] = in[i]->seq;
        /* the merge of a replacing file and what it replaced is again complete; kept
         * files are merged only with kept files (db_tier_maintain) */
        flags |= in[i]->flags & (TF_REPLACES | TF_KEPT);
        if (in[i]->wal_upto > upto)
            upto = in[i]->wal_upto;
    }
    const tfile *f0 = in[0];
    uint64_t seq = t->next_seq++;
    size_t nmet = 0;
    const char **mets = union_mets(in, nin, &nmet);
    tbuilder tb;
    memset(&tb, 0, sizeof tb);
    int rc = mets ? BDB_OK : BDB_ERR_NOMEM;
    if (rc == BDB_OK) {
        tf_begin(&tb, t->db->vfs, t->sub[f0->res - 1], f0->res, f0->tenant, f0->start, f0->end, seq,
                 upto, seqs, nin, flags, mets, nmet);
        rc = merge_series(in, nin, add_series, &tb);
    }
    tfile **out = NULL;
    if (rc == BDB_OK)
        rc = tier_write_files(t, &tb, 1, &out);
    tf_builder_free(&tb);
    free(mets);
    if (rc != BDB_OK) {
        BDB_ERROR("tier compaction of %s failed: %s", f0->path, bdb_strerror(rc));
        free(in);
        free(seqs);
        return rc;
    }
    pthread_rwlock_wrlock(&t->lock);
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++)
        if (i < a || i >= b)
            t->files[k++] = t->files[i];
    t->n = k;
    tier_files_add(t, out[0]); /* cannot fail: the list shrank by nin >= 1 first */
    pthread_rwlock_unlock(&t->lock);
    int r0 = in[0]->res - 1;
    for (size_t i = 0; i < nin; i++)
        drop_file(t, in[i], "compacted");
    bdb_vfs_sync_dir(t->db->vfs, t->sub[r0]);
    atomic_fetch_add(&t->compacted, 1);
    free(out);
    free(in);
    free(seqs);
    return BDB_OK;
}

int db_tier_maintain(bdb_db *db)
{
    tstate *t = tier_state(db);
    if (!t)
        return BDB_ERR_NOMEM;
    retention(t);
    /* Only this thread (under flush_mutex) changes the list, so indexes stay valid
     * without the lock between compactions. Files past the committed catalog (a
     * catalog save failed) stay out: merged, they would be dropped with the rest at a
     * restart. */
    int rc = BDB_OK;
    for (size_t a = 0; a < t->n;) {
        size_t b = a;
        while (b < t->n && t->files[b]->res == t->files[a]->res &&
               t->files[b]->start == t->files[a]->start &&
               !strcmp(t->files[b]->tenant, t->files[a]->tenant) &&
               t->files[b]->wal_upto <= db->wal_upto &&
               (t->files[b]->flags & TF_KEPT) == (t->files[a]->flags & TF_KEPT))
            b++;
        if (b - a > 1) {
            int crc = compact(t, a, b);
            if (crc != BDB_OK) {
                rc = crc;
                a = b;
            }
            /* on success the merged file sorts at the position of the first input's
             * group; whatever follows moved down by b - a - 1 */
            else
                a++;
            continue;
        }
        a = b > a ? b : a + 1;
    }
    return rc;
}

/* Tier files hold one tenant each, so a dropped tenant's windows leave by deleting
 * its files, whatever their window (retention would wait for the window's end, up to
 * a year for the 1d tier). Files of a flush not committed yet stay: the caller runs
 * right after a committed flush, so there are none. */
int db_tier_forget_tenant(bdb_db *db, const char *tn)
{
    tstate *t = tier_state(db);
    if (!t)
        return BDB_ERR_NOMEM;
    tfile **gone = bdb_calloc(t->n + 1, sizeof *gone);
    if (!gone)
        return BDB_ERR_NOMEM;
    size_t ng = 0, k = 0;
    pthread_rwlock_wrlock(&t->lock);
    for (size_t i = 0; i < t->n; i++) {
        tfile *f = t->files[i];
        if (!strcmp(f->tenant, tn) && f->wal_upto <= db->wal_upto)
            gone[ng++] = f;
        else
            t->files[k++] = f;
    }
    t->n = k;
    pthread_rwlock_unlock(&t->lock);
    for (size_t i = 0; i < ng; i++) {
        drop_file(t, gone[i], "deletes a dropped tenant's file");
        atomic_fetch_add(&t->dropped, 1);
    }
    free(gone);
    for (int r = 0; ng && r < BDB_TIERS; r++)
        bdb_vfs_sync_dir(db->vfs, t->sub[r]);
    return BDB_OK;
}
