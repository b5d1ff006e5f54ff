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
 * Without a sink, or with one in ack=wal, apply returns at its first test and ack
 * after one call: the embedded engine pays nothing per sample. */
#include "storage/embedded/sink/db_ack_sink.h"

#include "common/alloc.h"
#include "common/log.h"
#include "model/bucket.h"
#include "storage/sink.h"

#include "bucketdb/bdb.h"

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

const db_consumer db_ack_consumer = {
    .name = "ack",
    .resv_size = sizeof(struct ack_resv),
    .apply = ack_apply,
    .ack = ack_ack,
};
