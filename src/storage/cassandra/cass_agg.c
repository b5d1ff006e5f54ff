/* cass_agg: tier and fleet rows in Cassandra (see cass_agg.h). */
#include "storage/cassandra/cass_agg.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "storage/cassandra/cass_sink.h"
#include "storage/cassandra/cql/cluster/cql_session.h"
#include "storage/cassandra/cql/cluster/cql_token.h"
#include "storage/cassandra/cql/wire/cql_value.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS_DAY INT64_C(86400000)
/* Rows per UNLOGGED batch: a window's blob is a few hundred bytes, so 50 rows stay
 * near Cassandra's batch size warning (5 KiB by default) without a round trip each. */
#define BATCH_ROWS 50

/* ---------------------------------------------------------------- encoding */

const char *cass_agg_table(int res)
{
    switch (res) {
    case BDB_RES_1M:
        return "agg_1m";
    case BDB_RES_1H:
        return "agg_1h";
    case BDB_RES_1D:
        return "agg_1d";
    default:
        return NULL;
    }
}

const char *cass_agg_fleet_table(int res)
{
    return res == BDB_RES_1H ? "fleet_agg_1h" : res == BDB_RES_1D ? "fleet_agg_1d" : NULL;
}

int64_t cass_agg_day(int64_t start)
{
    return bdb_align_down(start, MS_DAY);
}

/* The base of a version 2 blob's window index: its partition day's first window, so
 * that the blob still says which window of the day it holds (a byte or two) and a blob
 * read under another row's start is refused (within the day; 1d rows are their day). */
static int64_t blob_base(int64_t start, int64_t width)
{
    return bdb_floor_div(cass_agg_day(start), width);
}

void cass_agg_encode_window(const bdb_rollup *r, const bdb_window *w, bdb_buf *out)
{
    bdb_buf_putc(out, CASS_AGG_BLOB_VERSION);
    bdb_rollup_write_c(r, w->start, w->start + 1, blob_base(w->start, r->width), BDB_C2, out);
}

int cass_agg_decode_window(bdb_rollup *out, int64_t start, const uint8_t *p, size_t n)
{
    if (n < 1 || (p[0] != CASS_AGG_BLOB_VERSION && p[0] != CASS_AGG_BLOB_VERSION_1))
        return BDB_ERR_CORRUPT;
    bdb_rollup tmp;
    bdb_rollup_init(&tmp, out->width);
    bdb_dec d;
    bdb_dec_init(&d, p + 1, n - 1);
    int rc = p[0] == CASS_AGG_BLOB_VERSION_1
                 ? bdb_rollup_read(&tmp, &d, INT64_MIN, INT64_MAX)
                 : bdb_rollup_read_c(&tmp, &d, BDB_C2, blob_base(start, out->width), INT64_MIN,
                                     INT64_MAX, 0, NULL);
    if (rc == BDB_OK && (bdb_dec_left(&d) || tmp.n != 1 || tmp.w[0].start != start))
        rc = BDB_ERR_CORRUPT;
    if (rc == BDB_OK)
        rc = bdb_rollup_set_window(out, &tmp.w[0]);
    bdb_rollup_free(&tmp);
    return rc;
}

void cass_agg_encode_fleet(const bdb_fleet *f, const bdb_fleet_win *w, bdb_buf *out)
{
    bdb_buf_putc(out, CASS_AGG_FLEET_BLOB_VERSION);
    bdb_fleet_write(f, w->start, w->start + 1, out);
}

int cass_agg_decode_fleet(bdb_fleet *out, int64_t start, const uint8_t *p, size_t n)
{
    if (n < 1 || p[0] != CASS_AGG_FLEET_BLOB_VERSION)
        return BDB_ERR_CORRUPT;
    bdb_fleet tmp;
    bdb_fleet_init(&tmp, out->width);
    bdb_dec d;
    bdb_dec_init(&d, p + 1, n - 1);
    int rc = bdb_fleet_read(&tmp, &d, INT64_MIN, INT64_MAX);
    if (rc == BDB_OK && (bdb_dec_left(&d) || tmp.n != 1 || tmp.w[0].start != start))
        rc = BDB_ERR_CORRUPT;
    if (rc == BDB_OK)
        rc = bdb_fleet_merge(out, &tmp);
    bdb_fleet_free(&tmp);
    return rc;
}

/* ---------------------------------------------------------------- writes */

static cql_bytes text(const char *s)
{
    return (cql_bytes){(const uint8_t *)s, (int32_t)strlen(s)};
}

/* Fixed-size values of one row: the statistics columns, the TTL and the key times. */
struct rowfix {
    uint8_t day[8], start[8], min[8], max[8], sum[8], count[8], m2[8], devs[8], ttl[4];
};

static void put_double(uint8_t *p, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, 8);
    cql_be64(p, bits);
}

static void fill_stats(struct rowfix *x, const bdb_stats *st, int64_t start, int32_t ttl)
{
    cql_be64(x->day, (uint64_t)cass_agg_day(start));
    cql_be64(x->start, (uint64_t)start);
    put_double(x->min, bdb_stats_min(st));
    put_double(x->max, bdb_stats_max(st));
    put_double(x->sum, bdb_stats_sum(st));
    cql_be64(x->count, bdb_stats_count(st));
    put_double(x->m2, st->m2);
    cql_be32(x->ttl, (uint32_t)ttl);
}

/* What a put builds for n windows: the bound values (row-major), each window's
 * fixed-size values and its blob. */
struct rows {
    cql_bytes *vals;
    struct rowfix *fx;
    bdb_buf *blobs;
    size_t n;
};

static void rows_alloc(struct rows *x, size_t n, uint16_t nv)
{
    x->n = n;
    x->vals = calloc(n * nv + 1, sizeof *x->vals);
    x->fx = calloc(n + 1, sizeof *x->fx);
    x->blobs = calloc(n + 1, sizeof *x->blobs);
    if (!x->vals || !x->fx || !x->blobs)
        abort();
    for (size_t i = 0; i < n; i++)
        bdb_buf_init(&x->blobs[i]);
}

static void rows_free(struct rows *x)
{
    for (size_t i = 0; i < x->n; i++)
        bdb_buf_free(&x->blobs[i]);
    free(x->blobs);
    free(x->fx);
    free(x->vals);
}

/* The columns every tier and fleet table has after its key and window start, from
 * row[i] on in the INSERTs' order: min_value, max_value, sum_value, count, m2, sketch,
 * then the TTL. */
static void put_stats(cql_bytes *row, size_t i, const struct rowfix *fx, const bdb_buf *blob)
{
    row[i++] = (cql_bytes){fx->min, 8};
    row[i++] = (cql_bytes){fx->max, 8};
    row[i++] = (cql_bytes){fx->sum, 8};
    row[i++] = (cql_bytes){fx->count, 8};
    row[i++] = (cql_bytes){fx->m2, 8};
    row[i++] = (cql_bytes){blob->data, (int32_t)blob->len};
    row[i] = (cql_bytes){fx->ttl, 4};
}

/* Sends rows [0, nrows) of one partition (values row-major, nv per row) as batches. */
static int send_rows(bdb_sink *s, const char *query, const cql_bytes *vals, uint16_t nv,
                     size_t nrows, const bdb_buf *rk, const char *what)
{
    int write_cl, read_cl;
    const char *ks;
    cql_session *sess = cass_sink_session(s, &ks, &write_cl, &read_cl);
    if (!sess)
        return BDB_ERR_IO;
    int rc = BDB_OK;
    for (size_t off = 0; off < nrows && rc == BDB_OK; off += BATCH_ROWS) {
        size_t k = nrows - off < BATCH_ROWS ? nrows - off : BATCH_ROWS;
        cql_call c = {.query = query,
                      .values = vals + off * nv,
                      .nvalues = nv,
                      .nrows = (uint16_t)k,
                      .routing_key = rk->data,
                      .routing_len = rk->len,
                      .consistency = write_cl,
                      .idempotent = 1};
        cql_response *r = NULL;
        rc = cql_session_batch(sess, &c, &r);
        if (rc != BDB_OK)
            BDB_WARN("cassandra: %s: batch of %zu rows failed: %s", what, k,
                     r && r->h.opcode == CQL_OP_ERROR && r->error.message ? r->error.message
                                                                          : bdb_strerror(rc));
        cql_response_free(r);
    }
    return rc;
}

int cass_agg_tier_put(bdb_sink *s, const char *tn, const char *dn, const char *metric, int res,
                      const bdb_rollup *r, const int32_t *ttl_s)
{
    const char *table = cass_agg_table(res);
    if (!table)
        return BDB_ERR_INVALID;
    int write_cl, read_cl;
    const char *ks;
    if (!cass_sink_session(s, &ks, &write_cl, &read_cl))
        return BDB_ERR_IO;
    int minute = res == BDB_RES_1M;
    char q[512];
    snprintf(q, sizeof q,
             "INSERT INTO %s.%s (tenant_id, device_id, metric_name, %swindow_start, min_value, "
             "max_value, sum_value, count, m2, sketch) VALUES (?, ?, ?, %s?, ?, ?, ?, ?, ?, ?) "
             "USING TTL ?",
             ks, table, minute ? "day, " : "", minute ? "?, " : "");
    const uint16_t nv = minute ? 12 : 11;
    struct rows x;
    rows_alloc(&x, r->n, nv);
    int rc = BDB_OK;
    char what[256];
    snprintf(what, sizeof what, "%s of %s/%s/%s", table, tn, dn, metric);
    /* Windows are sorted by start, so one agg_1m day (one partition) is a run. */
    for (size_t a = 0; a < r->n && rc == BDB_OK;) {
        int64_t day = cass_agg_day(r->w[a].start);
        size_t b = a, nrows = 0;
        cql_bytes *v0 = x.vals + a * nv;
        for (; b < r->n && (!minute || cass_agg_day(r->w[b].start) == day); b++) {
            if (ttl_s[b] < 0)
                continue; /* past its retention already */
            const bdb_window *w = &r->w[b];
            struct rowfix *fx = &x.fx[b];
            fill_stats(fx, &w->st, w->start, ttl_s[b]);
            cass_agg_encode_window(r, w, &x.blobs[b]);
            cql_bytes *row = v0 + nrows * nv;
            size_t i = 0;
            row[i++] = text(tn);
            row[i++] = text(dn);
            row[i++] = text(metric);
            if (minute)
                row[i++] = (cql_bytes){fx->day, 8};
            row[i++] = (cql_bytes){fx->start, 8};
            put_stats(row, i, fx, &x.blobs[b]);
            nrows++;
        }
        if (nrows) {
            uint8_t db8[8];
            cql_be64(db8, (uint64_t)day);
            cql_bytes parts[4] = {text(tn), text(dn), text(metric), {db8, 8}};
            bdb_buf rk;
            bdb_buf_init(&rk);
            cql_composite_key(&rk, parts, minute ? 4 : 3);
            rc = send_rows(s, q, v0, nv, nrows, &rk, what);
            bdb_buf_free(&rk);
        }
        a = b;
    }
    rows_free(&x);
    return rc;
}

int cass_agg_fleet_put(bdb_sink *s, const char *tn, const char *metric, int res, const bdb_fleet *f,
                       const int32_t *ttl_s)
{
    const char *table = cass_agg_fleet_table(res);
    if (!table)
        return BDB_ERR_INVALID;
    int write_cl, read_cl;
    const char *ks;
    if (!cass_sink_session(s, &ks, &write_cl, &read_cl))
        return BDB_ERR_IO;
    char q[512];
    snprintf(q, sizeof q,
             "INSERT INTO %s.%s (tenant_id, metric_name, window_start, device_count, min_value, "
             "max_value, sum_value, count, m2, sketch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
             "USING TTL ?",
             ks, table);
    enum { NV = 11 };
    struct rows x;
    rows_alloc(&x, f->n, NV);
    size_t nrows = 0;
    for (size_t b = 0; b < f->n; b++) {
        if (ttl_s[b] < 0)
            continue;
        const bdb_fleet_win *w = &f->w[b];
        struct rowfix *fx = &x.fx[b];
        fill_stats(fx, &w->st, w->start, ttl_s[b]);
        cql_be64(fx->devs, (uint64_t)w->ndev);
        cass_agg_encode_fleet(f, w, &x.blobs[b]);
        cql_bytes *row = x.vals + nrows * NV;
        row[0] = text(tn);
        row[1] = text(metric);
        row[2] = (cql_bytes){fx->start, 8};
        row[3] = (cql_bytes){fx->devs, 8};
        put_stats(row, 4, fx, &x.blobs[b]);
        nrows++;
    }
    int rc = BDB_OK;
    if (nrows) {
        cql_bytes parts[2] = {text(tn), text(metric)};
        bdb_buf rk;
        bdb_buf_init(&rk);
        cql_composite_key(&rk, parts, 2);
        char what[256];
        snprintf(what, sizeof what, "%s of %s/%s", table, tn, metric);
        rc = send_rows(s, q, x.vals, NV, nrows, &rk, what);
        bdb_buf_free(&rk);
    }
    rows_free(&x);
    return rc;
}

/* ---------------------------------------------------------------- reads */

struct rctx {
    bdb_rollup *r; /* tier reads */
    bdb_fleet *f;  /* fleet reads */
    bdb_fleet acc; /* a fleet read's rows until the read is complete */
    int bad;
};

static void rctx_reset(void *ud)
{
    struct rctx *x = ud;
    /* a retried read restarts from its first page: what the failed attempt decoded
     * is dropped (tier windows are set, not merged, so only fleet rows need it) */
    if (x->f)
        bdb_fleet_reset(&x->acc);
}

static int read_page(void *ud, const cql_response *page)
{
    struct rctx *x = ud;
    const cql_result *res = &page->result;
    if (res->kind != CQL_RESULT_ROWS || res->meta.ncols != 2) {
        x->bad = 1;
        return 1;
    }
    for (int32_t i = 0; i < res->nrows; i++) {
        const cql_bytes *c = res->cells + (size_t)i * 2;
        int64_t start;
        if (cql_dec_bigint(c[0], &start) != BDB_OK || c[1].len < 0) {
            x->bad = 1;
            return 1;
        }
        int rc = x->f ? cass_agg_decode_fleet(&x->acc, start, c[1].p, (size_t)c[1].len)
                      : cass_agg_decode_window(x->r, start, c[1].p, (size_t)c[1].len);
        if (rc != BDB_OK) {
            x->bad = 1;
            return 1;
        }
    }
    return 0;
}

static int select_rows(bdb_sink *s, const char *q, const cql_bytes *vals, uint16_t nv,
                       const cql_bytes *kparts, size_t nk, struct rctx *x, const char *what)
{
    int write_cl, read_cl;
    const char *ks;
    cql_session *sess = cass_sink_session(s, &ks, &write_cl, &read_cl);
    if (!sess)
        return BDB_ERR_IO;
    bdb_buf rk;
    bdb_buf_init(&rk);
    cql_composite_key(&rk, kparts, nk);
    cql_call c = {.query = q,
                  .values = vals,
                  .nvalues = nv,
                  .routing_key = rk.data,
                  .routing_len = rk.len,
                  .consistency = read_cl,
                  .idempotent = 1};
    cql_response *err = NULL;
    int rc = cql_session_query_paged(sess, &c, 1000, rctx_reset, read_page, x, &err);
    if (rc == BDB_OK && x->bad)
        rc = BDB_ERR_CORRUPT;
    if (rc != BDB_OK)
        BDB_WARN("cassandra: read of %s failed: %s", what,
                 rc == BDB_ERR_CORRUPT       ? "a row's window does not decode"
                 : err && err->error.message ? err->error.message
                                             : bdb_strerror(rc));
    cql_response_free(err);
    bdb_buf_free(&rk);
    return rc;
}

int cass_agg_tier_read(bdb_sink *s, const char *tn, const char *dn, const char *metric, int res,
                       int64_t lo, int64_t hi, bdb_rollup *out)
{
    const char *table = cass_agg_table(res);
    if (!table || lo >= hi)
        return table ? BDB_OK : BDB_ERR_INVALID;
    int write_cl, read_cl;
    const char *ks;
    if (!cass_sink_session(s, &ks, &write_cl, &read_cl))
        return BDB_ERR_IO;
    int minute = res == BDB_RES_1M;
    char q[512];
    snprintf(q, sizeof q,
             "SELECT window_start, sketch FROM %s.%s WHERE tenant_id = ? AND device_id = ? AND "
             "metric_name = ? %s AND window_start >= ? AND window_start < ?",
             ks, table, minute ? "AND day = ?" : "");
    int64_t d0 = minute ? cass_agg_day(lo) : 0, d1 = minute ? cass_agg_day(hi - 1) : 0;
    if (minute && (d1 - d0) / MS_DAY >= CASS_AGG_MAX_DAYS)
        return BDB_ERR_LIMIT;
    char what[256];
    snprintf(what, sizeof what, "%s of %s/%s/%s", table, tn, dn, metric);
    struct rctx x = {out, NULL, {0}, 0};
    int rc = BDB_OK;
    for (int64_t day = d0; day <= d1 && rc == BDB_OK; day += MS_DAY) {
        uint8_t db8[8], lob[8], hib[8];
        cql_be64(db8, (uint64_t)day);
        cql_be64(lob, (uint64_t)lo);
        cql_be64(hib, (uint64_t)hi);
        cql_bytes key[4] = {text(tn), text(dn), text(metric), {db8, 8}};
        cql_bytes vals[6];
        size_t i = 0;
        for (; i < (minute ? 4u : 3u); i++)
            vals[i] = key[i];
        vals[i++] = (cql_bytes){lob, 8};
        vals[i++] = (cql_bytes){hib, 8};
        rc = select_rows(s, q, vals, (uint16_t)i, key, minute ? 4 : 3, &x, what);
    }
    return rc;
}

int cass_agg_fleet_read(bdb_sink *s, const char *tn, const char *metric, int res, int64_t lo,
                        int64_t hi, bdb_fleet *out)
{
    const char *table = cass_agg_fleet_table(res);
    if (!table || lo >= hi)
        return table ? BDB_OK : BDB_ERR_INVALID;
    int write_cl, read_cl;
    const char *ks;
    if (!cass_sink_session(s, &ks, &write_cl, &read_cl))
        return BDB_ERR_IO;
    char q[512];
    snprintf(q, sizeof q,
             "SELECT window_start, sketch FROM %s.%s WHERE tenant_id = ? AND metric_name = ? AND "
             "window_start >= ? AND window_start < ?",
             ks, table);
    uint8_t lob[8], hib[8];
    cql_be64(lob, (uint64_t)lo);
    cql_be64(hib, (uint64_t)hi);
    cql_bytes key[2] = {text(tn), text(metric)};
    cql_bytes vals[4] = {key[0], key[1], {lob, 8}, {hib, 8}};
    struct rctx x = {NULL, out, {0}, 0};
    bdb_fleet_init(&x.acc, out->width);
    char what[256];
    snprintf(what, sizeof what, "%s of %s/%s", table, tn, metric);
    int rc = select_rows(s, q, vals, 4, key, 2, &x, what);
    if (rc == BDB_OK)
        rc = bdb_fleet_merge(out, &x.acc);
    bdb_fleet_free(&x.acc);
    return rc;
}
