/* db_fleet_maint: retention and compaction of fleet files, run by the flush hook
 * (db_fleet.c) once a flush published its files; see db_fleet_int.h. */
#include "storage/embedded/fleet/db_fleet_int.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "storage/embedded/tier/db_tier.h"

#include <stdlib.h>
#include <string.h>

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
 * their seqs, so a crash between its rename and the unlinks counts nothing twice.
 * The records of tenant skip (NULL: none) are left out: a dropped tenant's windows
 * leave the files by the same crash-safe replacement. */
static int compact(fstate *t, ffile **in, size_t nin, const char *skip)
{
    uint64_t *seqs = fl_realloc(NULL, nin * sizeof *seqs);
    size_t *pos = bdb_calloc(nin, sizeof *pos);
    if (!seqs || !pos) {
        free(seqs);
        free(pos);
        return BDB_ERR_NOMEM;
    }
    uint64_t upto = 0;
    for (size_t i = 0; i < nin; i++) {
        seqs[i] = in[i]->seq;
        upto = in[i]->wal_upto > upto ? in[i]->wal_upto : upto;
    }
    int ri = in[0]->ri;
    int64_t width = bdb_res_width(res_of(ri));
    bdb_buf body;
    bdb_buf_init_checked(&body); /* fl_write checks its oom flag */
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
        int skipped = skip && !strcmp(key.tenant, skip);
        bdb_fleet_reset(&f);
        for (size_t i = 0; i < nin; i++) {
            if (pos[i] >= in[i]->nrec)
                continue;
            const frec *x = &in[i]->recs[pos[i]];
            if (fl_rec_cmp(x->tenant, x->metric, key.tenant, key.metric))
                continue;
            bdb_dec d;
            bdb_dec_init(&d, x->p, x->len);
            if (rc == BDB_OK && !skipped)
                rc = bdb_fleet_read(&f, &d, INT64_MIN, INT64_MAX);
            pos[i]++;
        }
        if (rc != BDB_OK)
            break;
        if (skipped)
            continue;
        bdb_buf rec;
        bdb_buf_init_checked(&rec);
        bdb_fleet_write(&f, INT64_MIN, INT64_MAX, &rec);
        if (rec.oom)
            body.oom = 1;
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
        fl_files_add(t, out);
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
void fl_maintain(fstate *t)
{
    int64_t now = bdb_clock_now(&t->db->o.clock);
    /* Out of memory, retention and compaction skip this round: the files stay correct
     * as they are, and the next flush tries again. */
    ffile **drop = fl_realloc(NULL, (t->n + 1) * sizeof *drop);
    if (!drop) {
        BDB_ERROR("fleet: out of memory; retention and compaction skipped this flush");
        return;
    }
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
    ffile **in = fl_realloc(NULL, (t->n + 1) * sizeof *in);
    if (!in) {
        BDB_ERROR("fleet: out of memory; compaction skipped this flush");
        return;
    }
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
        if (nin >= FLEET_COMPACT_AT && compact(t, in, nin, NULL) == BDB_OK)
            a += 1 + others; /* the group shrank to the merged file and the others */
        else
            a = b;
    }
    free(in);
}

/* Each committed file holding a record of the tenant is replaced by a copy without
 * them (one-input compaction), and its recomputed windows leave the dirty list. Files of a flush
 * not committed yet are left: the caller runs right after a committed flush, so there are none.
 * Idempotent. */
/* The tenant's entries of the list of windows late data recomputed (sorted by tenant
 * first, so one run) leave it and its file; on a failed save the list stays whole. */
static int forget_dirty(fstate *t, const char *tn)
{
    size_t a = 0;
    while (a < t->ndirty && strcmp(t->dirty[a].tenant, tn) < 0)
        a++;
    size_t b = a;
    while (b < t->ndirty && !strcmp(t->dirty[b].tenant, tn))
        b++;
    if (a == b)
        return BDB_OK;
    fdirty *nv = fl_realloc(NULL, (t->ndirty - (b - a) + 1) * sizeof *nv);
    if (!nv)
        return BDB_ERR_NOMEM;
    memcpy(nv, t->dirty, a * sizeof *nv);
    memcpy(nv + a, t->dirty + b, (t->ndirty - b) * sizeof *nv);
    fdirty *old = t->dirty;
    size_t nold = t->ndirty;
    pthread_rwlock_wrlock(&t->lock);
    t->dirty = nv;
    t->ndirty = nold - (b - a);
    pthread_rwlock_unlock(&t->lock);
    int rc = fl_dirty_save(t); /* only the flush thread (flush_mutex) changes the list */
    pthread_rwlock_wrlock(&t->lock);
    if (rc != BDB_OK) {
        t->dirty = old;
        t->ndirty = nold;
    }
    pthread_rwlock_unlock(&t->lock);
    if (rc != BDB_OK) {
        free(nv);
        return rc;
    }
    for (size_t i = a; i < b; i++) {
        free(old[i].tenant);
        free(old[i].metric);
    }
    free(old);
    return BDB_OK;
}

int fl_forget_tenant(fstate *t, const char *tn)
{
    int rc = forget_dirty(t, tn);
    for (size_t i = 0; i < t->n && rc == BDB_OK;) {
        ffile *f = t->files[i];
        int holds = 0;
        for (size_t k = 0; k < f->nrec && !holds; k++)
            holds = !strcmp(f->recs[k].tenant, tn);
        if (!holds || f->wal_upto > t->db->wal_upto) {
            i++;
            continue;
        }
        rc = compact(t, &f, 1, tn);
        /* the list was re-sorted: start over (files without the tenant are passed over) */
        i = 0;
    }
    return rc;
}

int db_fleet_forget_tenant(bdb_db *db, const char *tn)
{
    fstate *t = fl_get(db);
    return t ? fl_forget_tenant(t, tn) : BDB_ERR_NOMEM;
}
