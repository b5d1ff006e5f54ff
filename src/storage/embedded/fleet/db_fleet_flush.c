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
    size_t nth; /* made nth in this flush */
};

/* ---------------------------------------------------------------- flush hook */

/* One (tenant, metric) of the flush: its series are v[order[off .. off + count)], in
 * device order; its fleets are built, written out and freed one acc at a time, so the
 * device sets of only one metric are in memory at once (a flush's peak otherwise held
 * every metric's: about 26 bytes per series at 1 M series). */
struct acc {
    char *tenant, *metric;
    uint32_t id;
    size_t count, off, fill;
};

static int acc_cmp(const void *x, const void *y)
{
    const struct acc *a = *(struct acc *const *)x, *b = *(struct acc *const *)y;
    return fl_rec_cmp(a->tenant, a->metric, b->tenant, b->metric);
}

/* Builders in resolution order, first appearance within one resolution kept: the
 * order (and so the file seqs) a resolution-major walk gives. */
static int builder_cmp(const void *x, const void *y)
{
    const struct builder *a = x, *b = y;
    if (a->ri != b->ri)
        return a->ri < b->ri ? -1 : 1;
    return a->nth < b->nth ? -1 : a->nth > b->nth;
}

/* Appends the records of fleet f (resolution ri) of tenant tn, metric mn to the
 * builders of their file windows, making the missing ones. */
static int encode_into(struct builder **bs, size_t *nb, int ri, const char *tn, const char *mn,
                       const bdb_fleet *f)
{
    int64_t span = bdb_tier_file_span(res_of(ri));
    for (size_t w = 0; w < f->n;) {
        int64_t fs = bdb_align_down(f->w[w].start, span);
        struct builder *b = NULL;
        for (size_t x = 0; x < *nb; x++)
            if ((*bs)[x].ri == ri && (*bs)[x].start == fs)
                b = &(*bs)[x];
        if (!b) {
            struct builder *nbs = fl_realloc(*bs, (*nb + 1) * sizeof **bs);
            if (!nbs)
                return BDB_ERR_NOMEM;
            *bs = nbs;
            b = &(*bs)[*nb];
            b->ri = ri;
            b->start = fs;
            b->nrec = 0;
            b->nth = *nb;
            bdb_buf_init_checked(&b->body); /* fl_write checks its oom flag */
            (*nb)++;
        }
        bdb_buf rec;
        bdb_buf_init_checked(&rec);
        bdb_fleet_write(f, fs, fs + span, &rec);
        if (rec.oom)
            b->body.oom = 1; /* the record is missing: fl_write fails */
        bdb_buf_put_str(&b->body, tn, strlen(tn));
        bdb_buf_put_str(&b->body, mn, strlen(mn));
        bdb_buf_put_uvarint(&b->body, rec.len);
        bdb_buf_append(&b->body, rec.data, rec.len);
        bdb_buf_free(&rec);
        b->nrec++;
        while (w < f->n && f->w[w].start < fs + span)
            w++;
    }
    return BDB_OK;
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
    uint32_t *sacc = fl_realloc(NULL, (n + 1) * sizeof *sacc); /* series -> acc id */
    if (!accs || !sacc)
        rc = BDB_ERR_NOMEM; /* the flush fails and keeps head and WAL (alloc.h) */
    struct acc **byid = NULL;
    size_t na = 0, capid = 0;
    const hchunk **cov = NULL;
    size_t ncov = 0, capcov = 0;
    char key[1024];
    /* The frozen chunks are read-only until the flush frees them: no lock needed. */
    for (size_t i = 0; i < n && rc == BDB_OK; i++) {
        const series *s = v[i];
        sacc[i] = UINT32_MAX;
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
            if (na == capid) {
                struct acc **nb2 = fl_realloc(byid, (capid ? capid * 2 : 64) * sizeof *byid);
                if (!nb2) {
                    rc = BDB_ERR_NOMEM;
                    break;
                }
                byid = nb2;
                capid = capid ? capid * 2 : 64;
            }
            a = bdb_calloc(1, sizeof *a);
            if (!a) {
                rc = BDB_ERR_NOMEM;
                break;
            }
            a->tenant = fl_strndup(tn, tl);
            a->metric = fl_strndup(s->metric, s->mlen);
            a->id = (uint32_t)na;
            if (!a->tenant || !a->metric || bdb_map_set(accs, key, kl, a) != BDB_OK) {
                free(a->tenant);
                free(a->metric);
                free(a);
                rc = BDB_ERR_NOMEM;
                break;
            }
            byid[na++] = a;
        }
        a->count++;
        sacc[i] = a->id;
    }
    bdb_map_free(accs);
    /* the series of each (tenant, metric) in one run, accs in record order */
    struct acc **av = fl_realloc(NULL, (na + 1) * sizeof *av);
    uint32_t *order = fl_realloc(NULL, (n + 1) * sizeof *order);
    if (!av || !order)
        rc = BDB_ERR_NOMEM;
    if (rc == BDB_OK) {
        if (na) /* byid is NULL with no acc: memcpy must not see it */
            memcpy(av, byid, na * sizeof *av);
        if (na > 1)
            qsort(av, na, sizeof *av, acc_cmp);
        size_t off = 0;
        for (size_t k = 0; k < na; k++) {
            av[k]->off = off;
            off += av[k]->count;
        }
        for (size_t i = 0; i < n; i++)
            if (sacc[i] != UINT32_MAX) {
                struct acc *a = byid[sacc[i]];
                order[a->off + a->fill++] = (uint32_t)i;
            }
    }
    free(sacc);
    /* one acc at a time: its fleets built from its series (device order), windows
     * another data directory flushed merged in (sink), records encoded, fleets freed;
     * one file per (resolution, file window), records in (tenant, metric) order */
    db_merger g;
    memset(&g, 0, sizeof g);
    struct builder *bs = NULL;
    size_t nb = 0;
    for (size_t k = 0; k < na && rc == BDB_OK; k++) {
        struct acc *a = av[k];
        bdb_fleet f[NRES];
        for (int ri = 0; ri < NRES; ri++)
            /* device names are the catalog's: a device outlives the flush, which
             * holds flush_mutex (a tenant drop takes it too) */
            bdb_fleet_init_borrowed(&f[ri], bdb_res_width(res_of(ri)));
        for (size_t j = a->off; j < a->off + a->count && rc == BDB_OK; j++) {
            const series *s = v[order[j]];
            fl_gather_list(&g, s->frozen, INT64_MIN, INT64_MAX, 0, NULL);
            /* hours of this device, added to its hour and its day */
            rc = fl_gather_into(&g, bdb_res_width(BDB_RES_1H), s->dev->name, f, NRES);
        }
        for (int ri = 0; ri < NRES && rc == BDB_OK; ri++)
            rc = agg_sink_import_fleet(db, t, ri, a->tenant, a->metric, &f[ri]);
        for (int ri = 0; ri < NRES && rc == BDB_OK; ri++)
            rc = encode_into(&bs, &nb, ri, a->tenant, a->metric, &f[ri]);
        for (int ri = 0; ri < NRES; ri++)
            bdb_fleet_free(&f[ri]);
    }
    db_merger_free(&g);
    if (nb > 1)
        qsort(bs, nb, sizeof *bs, builder_cmp);
    for (size_t k = 0; k < na; k++) {
        free(byid[k]->tenant);
        free(byid[k]->metric);
        free(byid[k]);
    }
    free(byid);
    free(av);
    free(order);
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
