/* db_ack_sink: acknowledgement through the sink (ack=quorum, storage/sink.h). A write
 * batch is acknowledged once the WAL holds it; with a sink that acknowledges through,
 * also once the sink confirmed every sample of it, so a sample answered 204 outlives
 * the loss of this node together with its disk (the WAL alone does not).
 *
 * apply notes each report's partition (the bucket and sub-bucket the head put it in,
 * which the flush will use too, so the rows land where reads look); ack, after the
 * WAL fsync, hands the batch's samples to the sink grouped by (device, partition) and
 * waits for them. Samples of one device, time and metric that a batch carries twice
 * are sent once, the later report's, as the head keeps it. The flush puts every
 * sample again later (the same rows): the acknowledged copy is for the node's loss,
 * the flush's for everything derived from it.
 *
 * What reads route by must outlive the node too: a node that rebuilds its catalog
 * from the sink's registry (db_cat_sink.c) reads a device's partitions from its
 * first event to the end of the partition of its last one (query/range.c), for the
 * metrics the registry names. So before acknowledging, the device's registry row is
 * put whenever the batch takes it outside what the registry was last told (a new
 * device or metric, a new bucket size, an event before its first or past the
 * partition of its last): once per device and partition, not per report. What was
 * put is kept per device in this consumer's map (only in ack=quorum).
 *
 * Without a sink, or with one in ack=wal, apply returns at its first test and ack
 * after one call: the embedded engine pays nothing per sample. */
#include "storage/embedded/sink/db_ack_sink.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/map.h"
#include "model/bucket.h"
#include "storage/embedded/sink/db_state_sink_int.h"
#include "storage/sink.h"

#include "bucketdb/bdb.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct ack_resv {
    device *d;
    int64_t part;
};

static int ack_apply(bdb_db *db, device *d, const db_apply *a, void *resv)
{
    bdb_sink *sk = db->o.sink;
    if (!sk || !sk->ops->ack_begin || !resv) /* resv NULL: WAL replay, acknowledged long ago */
        return BDB_OK;
    struct ack_resv *r = resv;
    int64_t bstart, bend;
    bdb_bucket_range(&d->hist, a->ts, &bstart, &bend);
    r->d = d;
    r->part = db_partition_id(d, a->ts, bstart);
    return BDB_OK;
}

struct row_ref {
    size_t rep; /* report index: the later one wins a duplicate */
    const struct ack_resv *r;
    const char *metric; /* NUL-terminated copy */
    int64_t ts;
    double v;
};

static int row_cmp(const void *a, const void *b)
{
    const struct row_ref *x = a, *y = b;
    if (x->r->d != y->r->d)
        return strcmp(x->r->d->name, y->r->d->name) < 0 ? -1 : 1;
    if (x->r->part != y->r->part)
        return x->r->part < y->r->part ? -1 : 1;
    int c = strcmp(x->metric, y->metric);
    if (c)
        return c;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    return x->rep < y->rep ? -1 : x->rep > y->rep;
}

/* Sends the sorted rows of one batch, one ack_put per (device, partition). */
static int send_groups(bdb_sink *sk, struct bdb_sink_ack *g, const char *tn, int64_t ttl_ms,
                       struct row_ref *rows, size_t n, bdb_sink_row *out)
{
    for (size_t i = 0; i < n;) {
        size_t j = i, k = 0;
        while (j < n && rows[j].r->d == rows[i].r->d && rows[j].r->part == rows[i].r->part) {
            /* of equal (metric, ts) only the last, the latest report's */
            if (j + 1 < n && rows[j + 1].r->d == rows[j].r->d &&
                rows[j + 1].r->part == rows[j].r->part && rows[j + 1].ts == rows[j].ts &&
                !strcmp(rows[j + 1].metric, rows[j].metric)) {
                j++;
                continue;
            }
            out[k++] = (bdb_sink_row){rows[j].metric, rows[j].ts, rows[j].v};
            j++;
        }
        int rc = sk->ops->ack_put(g, tn, rows[i].r->d->name, rows[i].r->part, ttl_ms, out, k);
        if (rc != BDB_OK)
            return rc;
        i = j;
    }
    return BDB_OK;
}

/* What the sink's registry was last told of a device (its row's reach). */
struct reg {
    int64_t lo, hi; /* first event; end of the partition holding the last */
    uint32_t nseries, nhist;
    uint32_t subs; /* the most sub-buckets a partition count row was put with */
};

struct ack_state {
    pthread_mutex_t mu;
    bdb_map *reg; /* device pointer -> struct reg */
};

static struct ack_state *ack_state(bdb_db *db)
{
    pthread_mutex_lock(&db->ext_mu);
    void **slot = db_consumer_slot(db, &db_ack_consumer);
    if (!*slot) {
        struct ack_state *st = bdb_calloc(1, sizeof *st);
        if (st && !(st->reg = bdb_map_new())) {
            free(st);
            st = NULL;
        }
        if (st)
            pthread_mutex_init(&st->mu, NULL);
        *slot = st;
    }
    struct ack_state *st = *slot;
    pthread_mutex_unlock(&db->ext_mu);
    return st;
}

/* Under d's stripe lock: the registry's reach once d's row as it is now is put. */
static struct reg reach_of(const device *d)
{
    int64_t s, e;
    bdb_bucket_range(&d->hist, d->last_ts, &s, &e);
    return (struct reg){d->first_ts, e, d->nseries, d->hist.n, db_hot_subs_max(d)};
}

/* Under d's stripe lock: the count row of the partition where d's sub-bucket count
 * last rose to its most (the partitions a reader scans follow the most sub-buckets a
 * device ever had: db_sink_read). */
static bdb_sink_count subs_row(const char *tn, const device *d)
{
    uint32_t top = db_hot_subs_max(d), i = d->hs.nsubs;
    while (i > 0 && d->hs.subs[i - 1].n != top)
        i--;
    int64_t s, e;
    bdb_bucket_range(&d->hist, i ? d->hs.subs[i - 1].from_ms : d->last_ts, &s, &e);
    return (bdb_sink_count){tn, d->name, s, e, db_hot_events(d, s), db_hot_subs_within(d, s, e)};
}

/* Puts the registry rows of the batch's devices (rows sorted by device) that the
 * batch took outside what the registry holds, and waits for them. A device whose
 * sub-buckets rose past what the counts table was told gets its count row put too: a
 * node that rebuilds its catalog scans as many sub-buckets as those rows name, and
 * the acknowledged rows of a device made hot since the last flush lie in them. */
static int register_devices(bdb_db *db, bdb_sink *sk, const char *tn, const struct row_ref *rows,
                            size_t n)
{
    struct ack_state *st = ack_state(db);
    if (!st)
        return BDB_ERR_NOMEM;
    size_t nd = 0;
    for (size_t i = 0; i < n; i++)
        nd += i == 0 || rows[i].r->d != rows[i - 1].r->d;
    device **dv = bdb_calloc(nd + 1, sizeof *dv);
    ss_dev *rv = bdb_calloc(nd + 1, sizeof *rv);
    struct reg *nr = bdb_calloc(nd + 1, sizeof *nr);
    bdb_sink_device *rec = bdb_calloc(nd + 1, sizeof *rec);
    bdb_sink_count *cnt = bdb_calloc(nd + 1, sizeof *cnt);
    int rc = dv && rv && nr && rec && cnt ? BDB_OK : BDB_ERR_NOMEM;
    size_t k = 0, kc = 0;
    for (size_t i = 0; i < n && rc == BDB_OK; i++) {
        device *d = rows[i].r->d;
        if (i && d == rows[i - 1].r->d)
            continue;
        pthread_mutex_lock(dev_lock(db, d));
        pthread_mutex_lock(&st->mu);
        const struct reg *e = bdb_map_get(st->reg, &d, sizeof d);
        int due = !e || d->first_ts < e->lo || d->last_ts >= e->hi || d->nseries != e->nseries ||
                  d->hist.n != e->nhist;
        int due_subs = sk->ops->count_put && db_hot_subs_max(d) > (e ? e->subs : 1);
        pthread_mutex_unlock(&st->mu);
        if (due_subs)
            cnt[kc++] = subs_row(tn, d);
        if (due || due_subs) {
            dv[k] = d;
            nr[k] = reach_of(d);
            if (ss_dev_copy(d, &rv[k]) != 0)
                rc = BDB_ERR_NOMEM;
            rec[k] = ss_dev_record(tn, d->name, &rv[k]);
            k++;
        }
        pthread_mutex_unlock(dev_lock(db, d));
    }
    if (rc == BDB_OK && k)
        rc = sk->ops->device_put(sk, rec, k);
    if (rc == BDB_OK && kc)
        rc = sk->ops->count_put(sk, cnt, kc);
    for (size_t i = 0; i < k && rc == BDB_OK; i++) {
        struct reg *e = bdb_malloc(sizeof *e);
        if (!e) {
            rc = BDB_ERR_NOMEM; /* put again next time: harmless */
            break;
        }
        *e = nr[i];
        pthread_mutex_lock(&st->mu);
        free(bdb_map_put(st->reg, &dv[i], sizeof dv[i], e));
        pthread_mutex_unlock(&st->mu);
    }
    for (size_t i = 0; i < k; i++)
        dev_free(&rv[i]);
    free(dv);
    free(rv);
    free(nr);
    free(rec);
    free(cnt);
    return rc;
}

static int ack_ack(bdb_db *db, const char *tn, const bdb_report *reps, size_t n, const void *resv,
                   size_t stride)
{
    bdb_sink *sk = db->o.sink;
    if (!sk || !sk->ops->ack_begin)
        return BDB_OK;
    struct bdb_sink_ack *g = NULL;
    int rc = sk->ops->ack_begin(sk, &g);
    if (rc != BDB_OK || !g)
        return rc == BDB_OK ? BDB_OK : BDB_ERR_AGAIN;
    size_t nrows = 0, names = 0;
    for (size_t i = 0; i < n; i++) {
        nrows += reps[i].nmetrics;
        for (uint32_t k = 0; k < reps[i].nmetrics; k++)
            names += reps[i].metrics[k].nlen + 1;
    }
    struct row_ref *rows = bdb_malloc((nrows + 1) * sizeof *rows);
    bdb_sink_row *out = bdb_malloc((nrows + 1) * sizeof *out);
    char *nbuf = bdb_malloc(names + 1);
    if (!rows || !out || !nbuf) {
        rc = BDB_ERR_NOMEM;
    } else {
        size_t m = 0;
        char *p = nbuf;
        for (size_t i = 0; i < n; i++) {
            const struct ack_resv *r = (const void *)((const char *)resv + i * stride);
            if (!r->d) /* not applied: nothing of it to confirm */
                continue;
            for (uint32_t k = 0; k < reps[i].nmetrics; k++) {
                const bdb_metric_val *mv = &reps[i].metrics[k];
                memcpy(p, mv->name, mv->nlen);
                p[mv->nlen] = 0;
                rows[m++] = (struct row_ref){i, r, p, reps[i].ts_ms, mv->value};
                p += mv->nlen + 1;
            }
        }
        qsort(rows, m, sizeof *rows, row_cmp);
        rc = send_groups(sk, g, tn, db_tenant_ttl(db, tn), rows, m, out);
        if (rc == BDB_OK && sk->ops->device_put)
            rc = register_devices(db, sk, tn, rows, m);
    }
    int end = sk->ops->ack_end(g); /* waits for what was put, also after a failure */
    free(rows);
    free(out);
    free(nbuf);
    if (rc == BDB_OK)
        rc = end;
    if (rc != BDB_OK && rc != BDB_ERR_NOMEM)
        rc = BDB_ERR_AGAIN; /* the sink did not confirm: not acknowledged, retryable */
    return rc;
}

/* A tenant's devices are about to be freed: their entries go (keys are pointers, and
 * a stale one could stand for a later device at the same address). In rounds of a
 * fixed batch, so that nothing is allocated: a map is not changed while walked. */
static void ack_forget_tenant(bdb_db *db, const tenant *t)
{
    struct ack_state *st = *db_consumer_slot(db, &db_ack_consumer);
    if (!st)
        return;
    pthread_mutex_lock(&st->mu);
    for (;;) {
        device *gone[256];
        size_t ng = 0, pos = 0, klen;
        const void *key;
        void *val;
        while (ng < 256 && bdb_map_next(st->reg, &pos, &key, &klen, &val)) {
            device *d;
            memcpy(&d, key, sizeof d);
            if (d->tenant == t)
                gone[ng++] = d;
        }
        for (size_t i = 0; i < ng; i++)
            free(bdb_map_del(st->reg, &gone[i], sizeof gone[i]));
        if (ng < 256)
            break;
    }
    pthread_mutex_unlock(&st->mu);
}

static void ack_close(bdb_db *db)
{
    void **slot = db_consumer_slot(db, &db_ack_consumer);
    struct ack_state *st = *slot;
    *slot = NULL;
    if (!st)
        return;
    size_t pos = 0, klen;
    const void *key;
    void *val;
    while (bdb_map_next(st->reg, &pos, &key, &klen, &val))
        free(val);
    bdb_map_free(st->reg);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

const db_consumer db_ack_consumer = {
    .name = "ack",
    .resv_size = sizeof(struct ack_resv),
    .apply = ack_apply,
    .ack = ack_ack,
    .forget_tenant = ack_forget_tenant,
    .close = ack_close,
};
