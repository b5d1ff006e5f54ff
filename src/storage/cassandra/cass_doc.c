/* cass_doc: named documents in the docs table (cass_doc.h). */
#include "storage/cassandra/cass_doc.h"
#include "storage/cassandra/cass_state_int.h"
#include "storage/cassandra/cql/wire/cql_value.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define HEAD_MAGIC "bucketdb-doc 1"
#define SLICE_PAGE 8 /* slices per page read: 2 MiB, far below any frame limit */

size_t cass_doc_head_format(const cass_doc_head *h, char *out, size_t cap)
{
    int n = snprintf(out, cap,
                     HEAD_MAGIC " version=%" PRId64 " parts=%" PRIu32 " bytes=%" PRIu64
                                " crc32=%08" PRIx32,
                     h->version, h->parts, h->bytes, h->crc);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

int cass_doc_head_parse(const void *p, size_t n, cass_doc_head *h)
{
    char t[160];
    if (n >= sizeof t)
        return BDB_ERR_CORRUPT;
    memcpy(t, p, n);
    t[n] = '\0';
    long long v;
    unsigned long long parts, bytes;
    unsigned crc;
    int used = -1;
    if (sscanf(t, HEAD_MAGIC " version=%lld parts=%llu bytes=%llu crc32=%8x%n", &v, &parts, &bytes,
               &crc, &used) != 4 ||
        used != (int)n || bytes > CASS_DOC_MAX_BYTES ||
        parts != (bytes + CASS_DOC_PART_MAX - 1) / CASS_DOC_PART_MAX)
        return BDB_ERR_CORRUPT;
    h->version = (int64_t)v;
    h->parts = (uint32_t)parts;
    h->bytes = bytes;
    h->crc = crc;
    return BDB_OK;
}

void cass_doc_head_of(const void *data, size_t len, int64_t version, cass_doc_head *h)
{
    h->version = version;
    h->bytes = len;
    h->parts = (uint32_t)((len + CASS_DOC_PART_MAX - 1) / CASS_DOC_PART_MAX);
    h->crc = (uint32_t)crc32(0L, len ? data : Z_NULL, (uInt)len);
}

int cass_doc_assemble(const cass_doc_head *h, const cass_doc_slice *v, size_t n, void **data,
                      char *err, size_t errlen)
{
    *data = NULL;
    if (n != h->parts) {
        snprintf(err, errlen, "%zu of its %" PRIu32 " parts are stored", n, h->parts);
        return BDB_ERR_CORRUPT;
    }
    char *out = malloc(h->bytes + 1);
    uint8_t *seen = calloc(h->parts ? h->parts : 1, 1);
    if (!out || !seen) {
        free(out);
        free(seen);
        return BDB_ERR_NOMEM;
    }
    int rc = BDB_OK;
    for (size_t i = 0; i < n && rc == BDB_OK; i++) {
        uint64_t off = (uint64_t)v[i].part * CASS_DOC_PART_MAX;
        uint64_t want =
            v[i].part >= 0 && off < h->bytes
                ? (h->bytes - off < CASS_DOC_PART_MAX ? h->bytes - off : CASS_DOC_PART_MAX)
                : 0;
        if (v[i].part < 0 || (uint32_t)v[i].part >= h->parts || seen[v[i].part]) {
            snprintf(err, errlen, "part %d is not one of its %" PRIu32, (int)v[i].part, h->parts);
            rc = BDB_ERR_CORRUPT;
        } else if (v[i].len < 0 || (uint64_t)v[i].len != want) {
            snprintf(err, errlen, "part %d holds %d bytes, not %" PRIu64, (int)v[i].part,
                     (int)v[i].len, want);
            rc = BDB_ERR_CORRUPT;
        } else {
            seen[v[i].part] = 1;
            memcpy(out + off, v[i].p, (size_t)v[i].len);
        }
    }
    if (rc == BDB_OK &&
        (uint32_t)crc32(0L, h->bytes ? (const Bytef *)out : Z_NULL, (uInt)h->bytes) != h->crc) {
        snprintf(err, errlen, "checksum mismatch (a part of another version, or damaged)");
        rc = BDB_ERR_CORRUPT;
    }
    free(seen);
    if (rc != BDB_OK) {
        free(out);
        return rc;
    }
    out[h->bytes] = '\0';
    *data = out;
    return BDB_OK;
}

/* The partition key of version v's slices. */
static void slice_key(char *out, size_t cap, const char *key, int64_t v)
{
    snprintf(out, cap, "%s#%" PRId64, key, v);
}

/* Reads the rows (part, body) of partition k into r. */
static int read_rows(const cass_state_ctx *c, const char *k, rowset *r)
{
    char q[160];
    snprintf(q, sizeof q, "SELECT part, body FROM %s.docs WHERE k = ?", c->ks);
    vb v = {0};
    vb_text(&v, k);
    cql_bytes *vals = vb_out(&v);
    cql_call call = {.query = q,
                     .values = vals,
                     .nvalues = 1,
                     .routing_key = k,
                     .routing_len = strlen(k),
                     .consistency = c->read_cl,
                     .idempotent = 1};
    cql_response *err = NULL;
    int rc = cql_session_query_paged(c->sess, &call, SLICE_PAGE, rs_reset, rs_page, r, &err);
    if (rc == BDB_OK && r->bad)
        rc = BDB_ERR_CORRUPT;
    if (rc != BDB_OK)
        BDB_WARN("cassandra: reading document %s failed: %s", k,
                 err && err->error.message ? err->error.message : bdb_strerror(rc));
    cql_response_free(err);
    free(vals);
    vb_free(&v);
    return rc;
}

/* The header of key: BDB_OK, BDB_ERR_NOTFOUND, BDB_ERR_CORRUPT or the read's error. */
static int read_head(const cass_state_ctx *c, const char *key, cass_doc_head *h)
{
    rowset r = {.ncols = 2};
    bdb_buf_init(&r.arena);
    int rc = read_rows(c, key, &r);
    if (rc == BDB_OK) {
        rc = BDB_ERR_NOTFOUND;
        for (size_t i = 0; i < r.nrows; i++) {
            cql_bytes part = rs_cell(&r, i, 0), body = rs_cell(&r, i, 1);
            int32_t pn;
            if (part.len == 4 && cql_dec_int(part, &pn) == BDB_OK && pn == 0)
                rc = body.len < 0 ? BDB_ERR_CORRUPT
                                  : cass_doc_head_parse(body.p, (size_t)body.len, h);
        }
    }
    rs_free(&r);
    return rc;
}

static int exec(const cass_state_ctx *c, const char *q, vb *v, const char *k)
{
    cql_bytes *vals = vb_out(v);
    cql_call call = {.query = q,
                     .values = vals,
                     .nvalues = (uint16_t)v->n,
                     .routing_key = k,
                     .routing_len = strlen(k),
                     .consistency = c->write_cl,
                     .idempotent = 1};
    cql_response *r = NULL;
    int rc = cql_session_execute(c->sess, &call, &r);
    if (rc != BDB_OK)
        BDB_WARN("cassandra: writing document %s failed: %s", k,
                 r && r->h.opcode == CQL_OP_ERROR && r->error.message ? r->error.message
                                                                      : bdb_strerror(rc));
    cql_response_free(r);
    free(vals);
    bdb_buf_reset(&v->b);
    v->n = 0;
    return rc;
}

int cass_doc_put(bdb_sink *s, const char *key, const void *data, size_t len)
{
    if (len > CASS_DOC_MAX_BYTES)
        return BDB_ERR_LIMIT;
    cass_state_ctx c;
    int rc = cs_ctx(s, &c);
    if (rc != BDB_OK)
        return rc;
    cass_doc_head old, h;
    int have_old = read_head(&c, key, &old);
    if (have_old != BDB_OK && have_old != BDB_ERR_NOTFOUND && have_old != BDB_ERR_CORRUPT)
        return have_old; /* not reachable: nothing written */
    /* A new version number: never the stored one's, whose slices a reader may be on. */
    int64_t ver = bdb_now_ms();
    if (have_old == BDB_OK && ver <= old.version)
        ver = old.version + 1;
    cass_doc_head_of(data, len, ver, &h);
    char q[200], sk[300];
    snprintf(q, sizeof q, "INSERT INTO %s.docs (k, part, body) VALUES (?, ?, ?)", c.ks);
    slice_key(sk, sizeof sk, key, ver);
    vb v = {0};
    for (uint32_t i = 0; i < h.parts && rc == BDB_OK; i++) {
        size_t off = (size_t)i * CASS_DOC_PART_MAX;
        vb_text(&v, sk);
        vb_int(&v, (int32_t)i);
        vb_raw(&v, (const char *)data + off,
               len - off < CASS_DOC_PART_MAX ? len - off : CASS_DOC_PART_MAX);
        rc = exec(&c, q, &v, sk);
    }
    if (rc == BDB_OK) { /* the switch: one row */
        char head[160];
        size_t hl = cass_doc_head_format(&h, head, sizeof head);
        vb_text(&v, key);
        vb_int(&v, 0);
        vb_raw(&v, head, hl);
        rc = exec(&c, q, &v, key);
    }
    if (rc == BDB_OK && have_old == BDB_OK) { /* the old slices: no reader needs them now */
        char dq[160], ok[300];
        snprintf(dq, sizeof dq, "DELETE FROM %s.docs WHERE k = ?", c.ks);
        slice_key(ok, sizeof ok, key, old.version);
        vb_text(&v, ok);
        if (exec(&c, dq, &v, ok) != BDB_OK)
            BDB_WARN("cassandra: the previous version of document %s stays (harmless)", key);
    }
    vb_free(&v);
    return rc;
}

int cass_doc_get(bdb_sink *s, const char *key, void **data, size_t *len, char *err, size_t errlen)
{
    *data = NULL;
    *len = 0;
    if (errlen)
        err[0] = '\0';
    cass_state_ctx c;
    int rc = cs_ctx(s, &c);
    if (rc != BDB_OK) {
        snprintf(err, errlen, "Cassandra is not reachable");
        return rc;
    }
    cass_doc_head h;
    rc = read_head(&c, key, &h);
    if (rc == BDB_ERR_CORRUPT)
        snprintf(err, errlen, "the header row of document '%s' is damaged", key);
    else if (rc != BDB_OK && rc != BDB_ERR_NOTFOUND)
        snprintf(err, errlen, "cannot read document '%s': %s", key, bdb_strerror(rc));
    if (rc != BDB_OK)
        return rc;
    char sk[300];
    slice_key(sk, sizeof sk, key, h.version);
    rowset r = {.ncols = 2};
    bdb_buf_init(&r.arena);
    rc = read_rows(&c, sk, &r);
    cass_doc_slice *v = NULL;
    if (rc == BDB_OK && !(v = calloc(r.nrows ? r.nrows : 1, sizeof *v)))
        rc = BDB_ERR_NOMEM;
    for (size_t i = 0; rc == BDB_OK && i < r.nrows; i++) {
        cql_bytes part = rs_cell(&r, i, 0), body = rs_cell(&r, i, 1);
        if (part.len != 4 || cql_dec_int(part, &v[i].part) != BDB_OK)
            v[i].part = -1;
        v[i].p = body.p;
        v[i].len = body.len;
    }
    if (rc == BDB_OK) {
        char why[200];
        rc = cass_doc_assemble(&h, v, r.nrows, data, why, sizeof why);
        if (rc == BDB_ERR_CORRUPT)
            snprintf(err, errlen, "document '%s' (version %" PRId64 ") is damaged: %s", key,
                     h.version, why);
        if (rc == BDB_OK)
            *len = (size_t)h.bytes;
    } else {
        snprintf(err, errlen, "cannot read document '%s': %s", key, bdb_strerror(rc));
    }
    free(v);
    rs_free(&r);
    return rc;
}
