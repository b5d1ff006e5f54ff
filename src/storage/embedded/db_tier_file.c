/* db_tier_file: the tier file format, versions 1 and 2 (docs/formats/tier.md).
 *
 *   header  "BDBTIER1" | u32 version | u8 res | i64 start | i64 end | u64 seq |
 *           u64 wal_upto | str tenant | uvarint ninputs | uvarint seq... |
 *           [version 2: u8 flags] | u32 crc
 *   records per series: str device | str metric | rollup windows | u32 crc
 *   index   uvarint n | (str device | str metric | uvarint off | uvarint len)...
 *   footer  u64 index_off | u64 index_len | u32 crc(index) | "BDTE"
 *
 * Every part has its own CRC so that a query reads and checks only the one record it
 * needs; opening a file checks all of them once. */
#include "storage/embedded/db_tier_int.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "storage/embedded/db_tier.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define MAGIC "BDBTIER1"
#define FOOT_MAGIC "BDTE"
#define FOOTER 24

static uint32_t crc(const void *p, size_t n)
{
    return (uint32_t)crc32_z(0, p, n);
}

void tf_begin(tbuilder *tb, enum bdb_res res, const char *tenant, int64_t start, int64_t end,
              uint64_t seq, uint64_t wal_upto, const uint64_t *inputs, size_t ninputs,
              unsigned flags)
{
    memset(tb, 0, sizeof *tb);
    tb->res = res;
    tb->tenant = bdb_strdup(tenant);
    tb->start = start;
    tb->end = end;
    tb->flags = flags;
    bdb_buf_init_checked(&tb->b); /* out of memory: tf_finish fails */
    bdb_buf_init_checked(&tb->idx);
    if (!tb->tenant)
        tb->b.oom = 1;
    bdb_buf_append(&tb->b, MAGIC, 8);
    bdb_buf_put_u32le(&tb->b, flags ? TIER_VERSION_FLAGS : TIER_VERSION);
    bdb_buf_putc(&tb->b, (uint8_t)res);
    bdb_buf_put_u64le(&tb->b, (uint64_t)start);
    bdb_buf_put_u64le(&tb->b, (uint64_t)end);
    bdb_buf_put_u64le(&tb->b, seq);
    bdb_buf_put_u64le(&tb->b, wal_upto);
    bdb_buf_put_str(&tb->b, tenant, strlen(tenant));
    bdb_buf_put_uvarint(&tb->b, ninputs);
    for (size_t i = 0; i < ninputs; i++)
        bdb_buf_put_uvarint(&tb->b, inputs[i]);
    if (flags)
        bdb_buf_putc(&tb->b, (uint8_t)flags);
    bdb_buf_put_u32le(&tb->b, crc(tb->b.data, tb->b.len));
}

void tf_add(tbuilder *tb, const char *device, size_t dlen, const char *metric, size_t mlen,
            const bdb_rollup *r)
{
    if (tb->b.oom || tb->idx.oom) /* tf_finish reports it */
        return;
    size_t off = tb->b.len;
    bdb_buf_put_str(&tb->b, device, dlen);
    bdb_buf_put_str(&tb->b, metric, mlen);
    if (bdb_rollup_write(r, tb->start, tb->end, &tb->b) == 0) {
        tb->b.len = off; /* no window in this file: no record */
        return;
    }
    bdb_buf_put_u32le(&tb->b, crc(tb->b.data + off, tb->b.len - off));
    bdb_buf_put_str(&tb->idx, device, dlen);
    bdb_buf_put_str(&tb->idx, metric, mlen);
    bdb_buf_put_uvarint(&tb->idx, off);
    bdb_buf_put_uvarint(&tb->idx, tb->b.len - off);
    tb->nrec++;
}

int tf_finish(tbuilder *tb)
{
    uint64_t ioff = tb->b.len;
    bdb_buf_put_uvarint(&tb->b, tb->nrec);
    bdb_buf_append(&tb->b, tb->idx.data, tb->idx.len);
    uint64_t ilen = tb->b.len - ioff;
    uint32_t icrc = crc(tb->b.data + ioff, ilen);
    bdb_buf_put_u64le(&tb->b, ioff);
    bdb_buf_put_u64le(&tb->b, ilen);
    bdb_buf_put_u32le(&tb->b, icrc);
    bdb_buf_append(&tb->b, FOOT_MAGIC, 4);
    return tb->b.oom || tb->idx.oom ? BDB_ERR_NOMEM : BDB_OK;
}

void tf_builder_free(tbuilder *tb)
{
    free(tb->tenant);
    bdb_buf_free(&tb->b);
    bdb_buf_free(&tb->idx);
    memset(tb, 0, sizeof *tb);
}

void tf_free(tfile *t)
{
    if (t->f)
        bdb_file_close(t->f);
    for (size_t i = 0; i < t->nrec; i++) {
        free(t->recs[i].device);
        free(t->recs[i].metric);
    }
    free(t->recs);
    free(t->inputs);
    free(t->tenant);
    free(t->path);
    memset(t, 0, sizeof *t);
}

static int bytes_cmp(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

static int rec_cmp(const void *x, const void *y)
{
    const trec *a = x, *b = y;
    int c = bytes_cmp(a->device, a->dlen, b->device, b->dlen);
    return c ? c : bytes_cmp(a->metric, a->mlen, b->metric, b->mlen);
}

#define HDR_NOMEM SIZE_MAX /* header(): out of memory, not a bad header */

/* Parses the header into out; returns its length, 0 when malformed or HDR_NOMEM. */
static size_t header(const uint8_t *p, size_t n, tfile *out)
{
    bdb_dec d;
    bdb_dec_init(&d, p, n);
    const uint8_t *m = bdb_dec_bytes(&d, 8);
    uint32_t ver = bdb_dec_u32le(&d);
    uint8_t res = bdb_dec_u8(&d);
    int64_t start = (int64_t)bdb_dec_u64le(&d), end = (int64_t)bdb_dec_u64le(&d);
    uint64_t seq = bdb_dec_u64le(&d), wal_upto = bdb_dec_u64le(&d);
    size_t tlen;
    const char *tn = bdb_dec_str(&d, &tlen);
    uint64_t ninputs = bdb_dec_uvarint(&d);
    if (d.err || !m || memcmp(m, MAGIC, 8) || (ver != TIER_VERSION && ver != TIER_VERSION_FLAGS) ||
        res < BDB_RES_1M || res > BDB_RES_1D || ninputs > bdb_dec_left(&d) || start >= end ||
        (uint64_t)end - (uint64_t)start != (uint64_t)bdb_tier_file_span((enum bdb_res)res) ||
        tlen == 0 || memchr(tn, 0, tlen)) /* unsigned: end - start may overflow int64 */
        return 0;
    uint64_t *inputs = bdb_calloc(ninputs + 1, sizeof *inputs);
    if (!inputs)
        return HDR_NOMEM;
    for (uint64_t i = 0; i < ninputs; i++)
        inputs[i] = bdb_dec_uvarint(&d);
    unsigned flags = 0;
    if (ver == TIER_VERSION_FLAGS) {
        flags = bdb_dec_u8(&d);
        if (flags == 0 || (flags & ~TF_REPLACES)) /* canonical: v2 only with a known flag */
            d.err = 1;
    }
    size_t hlen = n - bdb_dec_left(&d);
    uint32_t c = bdb_dec_u32le(&d);
    if (d.err || c != crc(p, hlen)) {
        free(inputs);
        return 0;
    }
    out->res = (enum bdb_res)res;
    out->start = start;
    out->end = end;
    out->seq = seq;
    out->wal_upto = wal_upto;
    out->tenant = bdb_strndup(tn, tlen);
    if (!out->tenant) {
        free(inputs);
        return HDR_NOMEM;
    }
    out->inputs = inputs;
    out->ninputs = ninputs;
    out->flags = flags;
    out->size = n;
    return hlen + 4;
}

int tf_parse_header(const uint8_t *p, size_t n, tfile *out)
{
    memset(out, 0, sizeof *out);
    size_t h = header(p, n, out);
    return h == HDR_NOMEM ? BDB_ERR_NOMEM : h ? BDB_OK : BDB_ERR_CORRUPT;
}

int tf_parse(const uint8_t *p, size_t n, tfile *out, const char **why)
{
    memset(out, 0, sizeof *out);
    size_t hlen = header(p, n, out);
    if (hlen == HDR_NOMEM)
        return BDB_ERR_NOMEM; /* not damage: the caller must not quarantine */
    if (!hlen) {
        *why = "bad header (magic, version, fields or CRC)";
        return BDB_ERR_CORRUPT;
    }
    if (n < hlen + FOOTER || memcmp(p + n - 4, FOOT_MAGIC, 4) != 0) {
        *why = "truncated or missing footer";
        goto bad;
    }
    uint64_t ioff = bdb_get_u64le(p + n - FOOTER), ilen = bdb_get_u64le(p + n - FOOTER + 8);
    uint32_t icrc = bdb_get_u32le(p + n - FOOTER + 16);
    if (ioff < hlen || ioff > n - FOOTER || ilen != n - FOOTER - ioff ||
        crc(p + ioff, ilen) != icrc) {
        *why = "index damaged (bounds or CRC)";
        goto bad;
    }
    bdb_dec d;
    bdb_dec_init(&d, p + ioff, ilen);
    uint64_t nrec = bdb_dec_uvarint(&d);
    if (d.err || nrec > ilen / 4) {
        *why = "index count";
        goto bad;
    }
    out->recs = bdb_calloc(nrec + 1, sizeof *out->recs);
    if (!out->recs) {
        tf_free(out);
        return BDB_ERR_NOMEM; /* not damage: the caller must not quarantine */
    }
    uint64_t next = hlen; /* records are back to back from the header to the index */
    for (uint64_t i = 0; i < nrec; i++) {
        size_t dl, ml;
        const char *dn = bdb_dec_str(&d, &dl), *mn = bdb_dec_str(&d, &ml);
        uint64_t off = bdb_dec_uvarint(&d), len = bdb_dec_uvarint(&d);
        /* a NUL inside a name would make the strndup copies below shorter than
         * dlen/mlen, which rec_cmp then reads past */
        if (d.err || off != next || len < 4 || len > ioff - off || memchr(dn, 0, dl) ||
            memchr(mn, 0, ml) || crc(p + off, len - 4) != bdb_get_u32le(p + off + len - 4)) {
            *why = "record damaged (bounds or CRC)";
            goto bad;
        }
        next = off + len;
        trec *r = &out->recs[out->nrec++];
        r->device = bdb_strndup(dn, dl);
        r->metric = bdb_strndup(mn, ml);
        if (!r->device || !r->metric) {
            tf_free(out);
            return BDB_ERR_NOMEM;
        }
        r->dlen = dl;
        r->mlen = ml;
        r->off = off;
        r->len = (uint32_t)len;
    }
    if (next != ioff || bdb_dec_left(&d) != 0) {
        *why = "index does not cover the records exactly";
        goto bad;
    }
    if (out->nrec > 1)
        qsort(out->recs, out->nrec, sizeof *out->recs, rec_cmp);
    for (size_t i = 1; i < out->nrec; i++)
        if (rec_cmp(&out->recs[i - 1], &out->recs[i]) == 0) {
            *why = "a series appears twice";
            goto bad;
        }
    return BDB_OK;
bad:
    tf_free(out);
    return BDB_ERR_CORRUPT;
}

const trec *tf_find(const tfile *t, const char *device, const char *metric)
{
    trec key = {.device = (char *)device,
                .metric = (char *)metric,
                .dlen = strlen(device),
                .mlen = strlen(metric)};
    return t->nrec ? bsearch(&key, t->recs, t->nrec, sizeof *t->recs, rec_cmp) : NULL;
}

int tf_read_rec(const tfile *t, const trec *rec, int64_t lo, int64_t hi, bdb_rollup *r)
{
    uint8_t *p = bdb_malloc(rec->len);
    if (!p)
        return BDB_ERR_NOMEM;
    size_t got = 0;
    int rc = bdb_file_pread(t->f, p, rec->len, rec->off, &got);
    if (rc == BDB_OK && got != rec->len)
        rc = BDB_ERR_CORRUPT;
    if (rc == BDB_OK && crc(p, rec->len - 4) != bdb_get_u32le(p + rec->len - 4))
        rc = BDB_ERR_CORRUPT;
    if (rc == BDB_OK) {
        bdb_dec d;
        bdb_dec_init(&d, p, rec->len - 4);
        size_t dl, ml;
        bdb_dec_str(&d, &dl);
        bdb_dec_str(&d, &ml);
        if (d.err)
            rc = BDB_ERR_CORRUPT;
        int64_t a = lo < t->start ? t->start : lo, b = hi > t->end ? t->end : hi;
        /* A read of the whole file window checks every window; a query of part of it
         * (the checksum above holds for the rest) builds only the windows it wants. */
        int part = a > t->start || b < t->end, stopped = 0;
        bdb_rollup tmp, *into = r;
        if (t->flags & TF_REPLACES) {
            bdb_rollup_init(&tmp, r->width);
            tmp.stats_only = r->stats_only;
            into = &tmp;
        }
        if (rc == BDB_OK)
            rc = part ? bdb_rollup_read_part(into, &d, a, b, &stopped)
                      : bdb_rollup_read(into, &d, a, b);
        if (into == &tmp) {
            for (size_t i = 0; i < tmp.n && rc == BDB_OK; i++)
                rc = bdb_rollup_set_window(r, &tmp.w[i]);
            bdb_rollup_free(&tmp);
        }
        if (rc == BDB_OK && !stopped && bdb_dec_left(&d) != 0)
            rc = BDB_ERR_CORRUPT;
    }
    free(p);
    return rc;
}
