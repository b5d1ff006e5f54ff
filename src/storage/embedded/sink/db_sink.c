/* db_sink: the engine's side of an external sink (storage/sink.h): a flush sends the
 * frozen chunks of each series there instead of into block files, and reads of
 * flushed data ask it for the device's partitions. */
#include "storage/embedded/core/db_int.h"
#include "storage/embedded/sink/db_sink_usage.h"
#include "common/alloc.h"
#include "storage/sink.h"

#include "bucketdb/bdb.h"

#include <stdlib.h>
#include <string.h>

static int tagged_cmp(const void *a, const void *b)
{
    const struct db_tagged *x = a, *y = b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    if (x->prio != y->prio)
        return x->prio > y->prio ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

int db_sink_flush_series(bdb_db *db, series *s, db_merger *m, int64_t ttl_ms)
{
    bdb_sink *sk = db->o.sink;
    size_t nc = 0;
    for (hchunk *c = s->frozen; c; c = c->next)
        nc++;
    hchunk **arr = bdb_malloc((nc + 1) * sizeof *arr);
    if (!arr)
        return BDB_ERR_NOMEM; /* the flush fails and keeps head and WAL (alloc.h) */
    size_t i = nc;
    for (hchunk *c = s->frozen; c; c = c->next)
        arr[--i] = c; /* oldest first: later chunks get a higher priority */
    for (size_t k = 0; k < nc; k++) {
        if (head_chunk_samples(arr[k], INT64_MIN, INT64_MAX, &m->ts, &m->v, &m->tn, &m->tcap))
            m->oom = 1;
        db_merger_add(m, (uint64_t)k + 1, hc_bucket(arr[k]));
    }
    free(arr);
    if (m->oom) {
        m->oom = 0;
        m->n = m->tn = 0;
        return BDB_ERR_NOMEM;
    }
    if (m->n > 1)
        qsort(m->t, m->n, sizeof *m->t, tagged_cmp);
    /* Newest write of each time only, then one put per partition: the sink batches
     * per partition. */
    size_t k = 0;
    for (size_t j = 0; j < m->n; j++)
        if (j == 0 || m->t[j].ts != m->t[j - 1].ts)
            m->t[k++] = m->t[j];
    m->n = k;
    int rc = BDB_OK;
    int64_t *ts = bdb_malloc((m->n + 1) * sizeof *ts);
    double *v = bdb_malloc((m->n + 1) * sizeof *v);
    /* Samples of one partition are not contiguous in time order when sub-buckets
     * interleave them; gather each partition in turn. */
    unsigned char *done = bdb_calloc(m->n + 1, 1);
    if (!ts || !v || !done)
        rc = BDB_ERR_NOMEM; /* nothing put; the flush fails and keeps head and WAL */
    for (size_t a = 0; a < m->n && rc == BDB_OK; a++) {
        if (done[a])
            continue;
        int64_t part = m->t[a].bucket;
        size_t n = 0;
        for (size_t b = a; b < m->n; b++)
            if (!done[b] && m->t[b].bucket == part) {
                done[b] = 1;
                ts[n] = m->t[b].ts;
                v[n++] = m->t[b].v;
            }
        rc =
            sk->ops->put(sk, s->dev->tenant->name, s->dev->name, s->metric, part, ttl_ms, ts, v, n);
        if (rc == BDB_OK) /* quota: counted once the flush commits (db_sink_usage.c) */
            db_sku_note(db, s->dev->tenant->name, s->dev->name, s->metric, ttl_ms, ts, n);
    }
    free(done);
    free(ts);
    free(v);
    m->n = 0;
    m->tn = 0;
    return rc;
}

struct parts {
    int64_t *v;
    size_t n, cap;
};

static int part_cb(void *ctx, int64_t start, int64_t end)
{
    (void)end;
    struct parts *p = ctx;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 8;
        int64_t *nv = bdb_realloc(p->v, cap * sizeof *nv);
        if (!nv)
            return BDB_ERR_NOMEM; /* non-zero stops the walk; db_sink_read fails */
        p->v = nv;
        p->cap = cap;
    }
    p->v[p->n++] = start;
    return p->n >= 100000; /* bounded: the query layer reads one partition per call */
}

/* A sink that cannot be reached (BDB_ERR_IO, _AGAIN: Cassandra down or timing out)
 * leaves the head's samples still worth answering, as long as the answer says what it
 * lacks; other failures (out of memory, a row that does not decode) stay errors. */
static int partial_if_away(int rc)
{
    return rc == BDB_ERR_IO || rc == BDB_ERR_AGAIN ? BDB_ERR_PARTIAL : rc;
}

int db_sink_read(bdb_db *db, device *d, const char *tn, const char *dn, const char *const *metrics,
                 size_t nmetrics, int64_t lo, int64_t hi,
                 void (*add)(void *ud, size_t metric, int64_t ts, double v), void *ud)
{
    bdb_sink *sk = db->o.sink;
    bdb_bucket_history h;
    uint32_t nsub = 1;
    pthread_mutex_lock(dev_lock(db, d));
    int rc = bdb_bucket_history_copy(&h, &d->hist);
    for (uint32_t i = 0; i < d->hs.nsubs; i++)
        if (d->hs.subs[i].n > nsub)
            nsub = d->hs.subs[i].n;
    pthread_mutex_unlock(dev_lock(db, d));
    if (rc != BDB_OK)
        return rc;
    struct parts p = {NULL, 0, 0};
    if (bdb_bucket_enumerate(&h, lo, hi, part_cb, &p) == BDB_ERR_NOMEM)
        rc = BDB_ERR_NOMEM;
    bdb_bucket_history_free(&h);
    if (p.n && rc == BDB_OK)
        rc = partial_if_away(
            sk->ops->read(sk, tn, dn, p.v, p.n, nsub, lo, hi, metrics, nmetrics, add, ud));
    free(p.v);
    return rc;
}
