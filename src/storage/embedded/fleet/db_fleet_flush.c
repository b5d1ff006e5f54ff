/* db_fleet_flush: the fleet flush hook: the partial fleet windows of a flush's frozen
 * series into fleet files, published with the coverage marks the readers use; the
 * files of a failed flush withdrawn by its retry (see db_fleet.h for the crash rules
 * and db_fleet.c for the locking and coverage argument). */
#include "storage/embedded/fleet/db_fleet.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/map.h"
#include "common/timeutil.h"
#include "storage/embedded/fleet/db_fleet_int.h"
#include "storage/embedded/core/db_int.h"
#include "storage/embedded/tier/db_tier.h"
#include "storage/embedded/sink/db_agg_sink.h" /* sink: fleet rows (db_agg_sink.c) */

#include <stdlib.h>
#include <string.h>

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
static int withdraw(fstate *t)
{
    ffile **gone = fl_realloc(NULL, (t->npend + 1) * sizeof *gone);
    if (!gone) /* nothing changed: the flush fails and the next one withdraws them */
        return BDB_ERR_NOMEM;
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
    return BDB_OK;
}

int db_fleet_flush(bdb_db *db, struct series *const *v, size_t n, uint64_t sealed, int rc)
{
    if (rc != BDB_OK)
        return rc;
    fstate *t = fl_get(db);
    if (!t)
        return BDB_ERR_NOMEM; /* the flush fails and keeps head and WAL (alloc.h) */
    if (agg_sink_fleet(db)) { /* sink: the files answer until this flush's rows are put */
        pthread_rwlock_wrlock(&t->lock);
        t->sink_synced = 0;
        pthread_rwlock_unlock(&t->lock);
    }
    if (t->npend && t->covered_at == atomic_load(&db->flushes) && withdraw(t) != BDB_OK)
        return BDB_ERR_NOMEM;
    t->npend = 0;
    bdb_map *accs = bdb_map_new();
    if (!accs)
        rc = BDB_ERR_NOMEM; /* the flush fails and keeps head and WAL (alloc.h) */
    db_merger g;
    memset(&g, 0, sizeof g);
    const hchunk **cov = NULL;
    size_t ncov = 0, capcov = 0;
    char key[1024];
    /* The frozen chunks are read-only until the flush frees them: no lock needed. */
    for (size_t i = 0; i < n && rc == BDB_OK; i++) {
        const series *s = v[i];
        for (const hchunk *c = s->frozen; c; c = c->next) {
            if (ncov == capcov) {
                const hchunk **nc = fl_realloc(cov, (capcov ? capcov * 2 : 256) * sizeof *cov);
                if (!nc) {
                    rc = BDB_ERR_NOMEM;
                    break;
                }
                cov = nc;
                capcov = capcov ? capcov * 2 : 256;
            }
            cov[ncov++] = c;
        }
        if (rc != BDB_OK)
            break;
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
                /* device names are the catalog's: a device outlives the flush,
                 * which holds flush_mutex (a tenant drop takes it too) */
                bdb_fleet_init_borrowed(&a->f[ri], bdb_res_width(res_of(ri)));
            if (!a->tenant || !a->metric || bdb_map_set(accs, key, kl, a) != BDB_OK) {
                free(a->tenant);
                free(a->metric);
                free(a);
                rc = BDB_ERR_NOMEM;
                break;
            }
        }
        fl_gather_list(&g, s->frozen, INT64_MIN, INT64_MAX, 0, NULL);
        /* hours of this device, added to its hour and its day */
        rc = fl_gather_into(&g, bdb_res_width(BDB_RES_1H), s->dev->name, a->f, NRES);
    }
    db_merger_free(&g);
    size_t na = accs ? bdb_map_count(accs) : 0, k = 0;
    struct acc **av = fl_realloc(NULL, (na + 1) * sizeof *av);
    size_t pos = 0, kl;
    const void *kp;
    void *val;
    while (accs && bdb_map_next(accs, &pos, &kp, &kl, &val)) {
        if (av) {
            av[k++] = val;
            continue;
        }
        struct acc *a = val; /* no room to list them: freed here, the flush fails */
        for (int ri = 0; ri < NRES; ri++)
            bdb_fleet_free(&a->f[ri]);
        free(a->tenant);
        free(a->metric);
        free(a);
    }
    bdb_map_free(accs);
    if (!av) {
        na = 0;
        rc = BDB_ERR_NOMEM;
    }
    if (na > 1)
        qsort(av, na, sizeof *av, acc_cmp);
    /* sink: windows another data directory flushed, merged into the partials */
    for (size_t i = 0; i < na && rc == BDB_OK; i++)
        for (int ri = 0; ri < NRES && rc == BDB_OK; ri++)
            rc = agg_sink_import_fleet(db, t, ri, av[i]->tenant, av[i]->metric, &av[i]->f[ri]);
    /* one file per (resolution, file window), records in (tenant, metric) order */
    struct builder *bs = NULL;
    size_t nb = 0;
    for (int ri = 0; ri < NRES && rc == BDB_OK; ri++) {
        int64_t span = bdb_tier_file_span(res_of(ri));
        for (size_t i = 0; i < na && rc == BDB_OK; i++) {
            const bdb_fleet *f = &av[i]->f[ri];
            for (size_t w = 0; w < f->n && rc == BDB_OK;) {
                int64_t fs = bdb_align_down(f->w[w].start, span);
                struct builder *b = NULL;
                for (size_t x = 0; x < nb; x++)
                    if (bs[x].ri == ri && bs[x].start == fs)
                        b = &bs[x];
                if (!b) {
                    struct builder *nbs = fl_realloc(bs, (nb + 1) * sizeof *bs);
                    if (!nbs) {
                        rc = BDB_ERR_NOMEM;
                        break;
                    }
                    bs = nbs;
                    b = &bs[nb++];
                    b->ri = ri;
                    b->start = fs;
                    b->nrec = 0;
                    bdb_buf_init_checked(&b->body); /* fl_write checks its oom flag */
                }
                bdb_buf rec;
                bdb_buf_init_checked(&rec);
                bdb_fleet_write(f, fs, fs + span, &rec);
                if (rec.oom)
                    b->body.oom = 1; /* the record is missing: fl_write fails */
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
    ffile **out = fl_realloc(NULL, (nb + 1) * sizeof *out);
    uint64_t *seqs = fl_realloc(NULL, (nb + 1) * sizeof *seqs);
    if (rc == BDB_OK) { /* room to publish them, so that publishing cannot fail */
        pthread_rwlock_wrlock(&t->lock);
        if (!out || !seqs || fl_files_reserve(t, nb) != BDB_OK)
            rc = BDB_ERR_NOMEM;
        pthread_rwlock_unlock(&t->lock);
    }
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
        qsort(cov, ncov, sizeof *cov, fl_ptr_cmp);
    pthread_rwlock_wrlock(&t->lock);
    for (size_t i = 0; i < done; i++)
        fl_files_add(t, out[i]);
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
    fl_maintain(t); /* db_fleet_maint.c */
    return BDB_OK;
}
