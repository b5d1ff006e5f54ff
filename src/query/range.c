#include "query/range.h"

#include "bucketdb/bdb.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct part {
    int64_t lo, hi;
    bdb_samples *out; /* one per metric */
    uint64_t chunks;
    int rc;
};

struct plan {
    bdb_db *db;
    const bdb_range_query *q;
    const char *const *metrics;
    size_t nmetrics;
    struct part *parts;
    size_t nparts, cap;
    size_t wave_first; /* index of the first partition of the running wave */
    int desc;
};

static int collect(void *ctx, int64_t start, int64_t end)
{
    struct plan *p = ctx;
    if (p->nparts == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 16;
        struct part *np = realloc(p->parts, p->cap * sizeof *np);
        if (!np)
            abort();
        p->parts = np;
    }
    int64_t lo = start > p->q->from ? start : p->q->from;
    int64_t hi = end < p->q->to ? end : p->q->to;
    p->parts[p->nparts++] = (struct part){lo, hi, NULL, 0, BDB_OK};
    return 0;
}

static void read_part(void *arg, size_t i)
{
    struct plan *p = arg;
    size_t idx = p->desc ? p->nparts - 1 - (p->wave_first + i) : p->wave_first + i;
    struct part *pt = &p->parts[idx];
    pt->out = calloc(p->nmetrics ? p->nmetrics : 1, sizeof *pt->out);
    if (!pt->out) {
        pt->rc = BDB_ERR_NOMEM;
        return;
    }
    pt->rc = bdb_db_read(p->db, p->q->tenant, p->q->device, p->metrics, p->nmetrics, pt->lo, pt->hi,
                         pt->out, &pt->chunks);
}

/* Emits one partition's samples in order; returns 1 when the caller should stop. */
static int emit(struct plan *p, struct part *pt, uint64_t *emitted,
                int (*cb)(void *, const char *, int64_t, double), void *ctx)
{
    size_t nm = p->nmetrics;
    size_t *pos = calloc(nm ? nm : 1, sizeof *pos);
    if (!pos)
        abort();
    if (p->desc)
        for (size_t m = 0; m < nm; m++)
            pos[m] = pt->out[m].n;
    int stop = 0;
    for (;;) {
        /* k-way merge over metrics (they are few): smallest (or largest) time wins,
         * ties go to the metric earlier in name order, whatever the request order. */
        ssize_t best = -1;
        int64_t bt = 0;
        for (size_t m = 0; m < nm; m++) {
            bdb_samples *s = &pt->out[m];
            if (p->desc ? pos[m] == 0 : pos[m] >= s->n)
                continue;
            int64_t t = p->desc ? s->ts[pos[m] - 1] : s->ts[pos[m]];
            if (best < 0 || (p->desc ? t > bt : t < bt) ||
                (t == bt && strcmp(p->metrics[m], p->metrics[best]) < 0)) {
                best = (ssize_t)m;
                bt = t;
            }
        }
        if (best < 0)
            break;
        bdb_samples *s = &pt->out[best];
        double v = p->desc ? s->v[--pos[best]] : s->v[pos[best]++];
        if (cb(ctx, p->metrics[best], bt, v)) {
            stop = 1;
            break;
        }
        (*emitted)++;
        if (p->q->limit && *emitted >= p->q->limit) {
            stop = 1;
            break;
        }
    }
    free(pos);
    return stop;
}

int bdb_query_range(bdb_db *db, bdb_pool *pool, const bdb_range_query *q,
                    int (*cb)(void *, const char *, int64_t, double), void *ctx,
                    bdb_query_stats *st)
{
    if (st)
        memset(st, 0, sizeof *st);
    if (q->from >= q->to)
        return BDB_ERR_INVALID;
    bdb_device_snapshot snap;
    int rc = bdb_db_device_snapshot(db, q->tenant, q->device, &snap);
    if (rc != BDB_OK)
        return rc;
    struct plan p = {db, q, NULL, 0, NULL, 0, 0, 0, q->desc};
    if (q->nmetrics) {
        p.metrics = q->metrics;
        p.nmetrics = q->nmetrics;
    } else {
        p.metrics = (const char *const *)snap.metrics;
        p.nmetrics = snap.nmetrics;
    }
    /* Partitions outside the device's first..last event hold nothing: skip them so an
     * open-ended range does not enumerate decades of empty buckets. The end is that of
     * the last event's partition, not the event: a catalog rebuilt from a Cassandra
     * registry knows the last event its row was put with, and samples acknowledged
     * after it in the same partition (ack=quorum, db_ack_sink.c) are read too. */
    bdb_range_query clamped = *q;
    if (snap.first_ts != INT64_MAX && clamped.from < snap.first_ts)
        clamped.from = snap.first_ts;
    if (snap.last_ts != INT64_MIN) {
        int64_t ps, pe;
        bdb_bucket_range(&snap.hist, snap.last_ts, &ps, &pe);
        if (clamped.to > pe)
            clamped.to = pe;
    }
    p.q = &clamped;
    if (snap.last_ts == INT64_MIN || clamped.from >= clamped.to || p.nmetrics == 0)
        goto done;
    if (bdb_bucket_count(&snap.hist, clamped.from, clamped.to, BDB_QUERY_MAX_PARTITIONS) >
        BDB_QUERY_MAX_PARTITIONS) {
        rc = BDB_ERR_LIMIT;
        goto done;
    }
    bdb_bucket_enumerate(&snap.hist, clamped.from, clamped.to, collect, &p);

    uint64_t emitted = 0;
    int partial = 0;
    size_t wave = pool ? (size_t)bdb_pool_workers(pool) * 2 : 1;
    int stop = 0;
    for (size_t first = 0; first < p.nparts && !stop && rc == BDB_OK; first += wave) {
        size_t n = p.nparts - first < wave ? p.nparts - first : wave;
        p.wave_first = first;
        if (pool)
            bdb_pool_run(pool, read_part, &p, n);
        else
            for (size_t i = 0; i < n; i++)
                read_part(&p, i);
        for (size_t i = 0; i < n; i++) {
            size_t idx = p.desc ? p.nparts - 1 - (first + i) : first + i;
            struct part *pt = &p.parts[idx];
            if (pt->rc == BDB_ERR_PARTIAL) { /* its head samples are still emitted */
                partial = 1;
                pt->rc = BDB_OK;
            }
            if (pt->rc != BDB_OK && rc == BDB_OK)
                rc = pt->rc;
            if (st) {
                st->partitions++;
                st->chunks += pt->chunks;
            }
            if (rc == BDB_OK && !stop)
                stop = emit(&p, pt, &emitted, cb, ctx);
            for (size_t m = 0; m < p.nmetrics && pt->out; m++)
                bdb_samples_free(&pt->out[m]);
            free(pt->out);
            pt->out = NULL;
        }
    }
    if (st)
        st->samples = emitted;
    if (rc == BDB_OK && partial)
        rc = BDB_ERR_PARTIAL;
done:
    free(p.parts);
    bdb_device_snapshot_free(&snap);
    return rc;
}
