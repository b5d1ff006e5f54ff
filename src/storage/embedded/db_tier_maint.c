/* db_tier_maint: maintenance of the tier files (db_tier.h): retention drops files
 * wholly older than their tenant's tier retention, compaction merges a window's small
 * files into one. Runs under flush_mutex like the flush hook, and takes tier_lock
 * exclusively only to swap the file lists (order: db_tier.c). */
#include "storage/embedded/db_tier.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/log.h"
#include "storage/embedded/db_int.h"
#include "storage/embedded/db_tier_int.h"

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

static void retention(tstate *t)
{
    int64_t now = bdb_clock_now(&t->db->o.clock);
    tfile **drop = bdb_calloc(t->n + 1, sizeof *drop);
    if (!drop) /* out of memory: nothing dropped this time, the next maintenance does */
        return;
    size_t nd = 0, k = 0;
    pthread_rwlock_wrlock(&t->lock);
    for (size_t i = 0; i < t->n; i++) {
        tfile *f = t->files[i];
        int64_t keep = retention_of(t, f->tenant, f->res);
        if (keep > 0 && f->end <= now - keep)
            drop[nd++] = f;
        else
            t->files[k++] = f;
    }
    t->n = k;
    pthread_rwlock_unlock(&t->lock);
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
    titer *it = bdb_calloc(nin, sizeof *it);
    int *live = bdb_calloc(nin, sizeof *live);
    if (!in || !seqs || !it || !live) { /* the inputs stay; the next maintenance retries */
        free(in);
        free(seqs);
        free(it);
        free(live);
        return BDB_ERR_NOMEM;
    }
    uint64_t upto = 0;
    unsigned flags = 0;
    for (size_t i = 0; i < nin; i++) {
        in[i] = t->files[a + i];
        seqs[i] = in[i]->seq;
        /* the merge of a replacing file and what it replaced is again complete */
        flags |= in[i]->flags & TF_REPLACES;
        if (in[i]->wal_upto > upto)
            upto = in[i]->wal_upto;
    }
    const tfile *f0 = in[0];
    uint64_t seq = t->next_seq++;
    tbuilder tb;
    tf_begin(&tb, f0->res, f0->tenant, f0->start, f0->end, seq, upto, seqs, nin, flags);
    bdb_rollup r;
    bdb_rollup_init(&r, bdb_res_width(f0->res));
    int rc = BDB_OK;
    for (size_t i = 0; i < nin; i++) {
        tf_iter_init(&it[i], in[i]);
        if (rc == BDB_OK && (live[i] = tf_iter_next(&it[i])) < 0)
            rc = live[i];
    }
    /* k-way merge over the inputs' series, each walked in (device, metric) order; the
     * inputs are in seq order, so replacing windows land after what they replace */
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
            tf_add(&tb, dn, strlen(dn), mn, strlen(mn), &r);
    }
    for (size_t i = 0; i < nin; i++)
        tf_iter_free(&it[i]);
    free(it);
    free(live);
    bdb_rollup_free(&r);
    tfile **out = NULL;
    if (rc == BDB_OK)
        rc = tier_write_files(t, &tb, &seq, 1, &out);
    tf_builder_free(&tb);
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
               t->files[b]->wal_upto <= db->wal_upto)
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
