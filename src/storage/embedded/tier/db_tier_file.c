/* db_tier_file: the tier file format (docs/formats/tier.md). Version 3 is written:
 *
 *   header  "BDBTIER1" | u32 version 3 | u8 res | i64 start | i64 end | u64 seq |
 *           u64 wal_upto | str tenant | uvarint ninputs | uvarint seq... | u8 flags |
 *           u32 crc
 *   records one per device, by device name: per series of the device, by metric id:
 *           uvarint metric id | uvarint len | len bytes of compact windows
 *           (bdb_rollup_write_c); then u32 crc
 *   index   uvarint nmet | str metric... (sorted) | uvarint ndev |
 *           (str device | uvarint record len)... (sorted; records back to back)
 *   footer  u64 index_off | u64 index_len | u32 crc(index) | "BDTE"
 *
 * Names are written once per file (a device's record holds all its metrics), so the
 * bytes and the memory of the index grow with devices, not series. Versions 1 and 2
 * (one record per series, the version 1 window encoding) are read only by tf_upgrade.
 * Every record has its own CRC so that a query reads and checks only the one record it
 * needs; opening a file checks all of them once. */
#include "storage/embedded/tier/db_tier_int.h"
#include "common/alloc.h"
#include "common/timeutil.h"

#include "bucketdb/bdb.h"
#include "storage/embedded/tier/db_tier.h"

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

static int bytes_cmp(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

/* ---------------------------------------------------------------- writing */

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
    bdb_buf_init_checked(&tb->pieces);
    bdb_buf_init_checked(&tb->names);
    if (!tb->tenant)
        tb->oom = 1;
    bdb_buf_append(&tb->b, MAGIC, 8);
    bdb_buf_put_u32le(&tb->b, TIER_VERSION_3);
    bdb_buf_putc(&tb->b, (uint8_t)res);
    bdb_buf_put_u64le(&tb->b, (uint64_t)start);
    bdb_buf_put_u64le(&tb->b, (uint64_t)end);
    bdb_buf_put_u64le(&tb->b, seq);
    bdb_buf_put_u64le(&tb->b, wal_upto);
    bdb_buf_put_str(&tb->b, tenant, strlen(tenant));
    bdb_buf_put_uvarint(&tb->b, ninputs);
    for (size_t i = 0; i < ninputs; i++)
        bdb_buf_put_uvarint(&tb->b, inputs[i]);
    bdb_buf_putc(&tb->b, (uint8_t)flags);
    bdb_buf_put_u32le(&tb->b, crc(tb->b.data, tb->b.len));
}

static size_t put_name(bdb_buf *b, const char *s, size_t n)
{
    size_t off = b->len;
    bdb_buf_append(b, s, n);
    bdb_buf_putc(b, 0);
    return off;
}

void tf_add(tbuilder *tb, const char *device, size_t dlen, const char *metric, size_t mlen,
            const bdb_rollup *r)
{
    if (tb->oom || tb->pieces.oom || tb->names.oom) /* tf_finish reports it */
        return;
    size_t off = tb->pieces.len;
    int64_t base = bdb_floor_div(tb->start, r->width);
    if (bdb_rollup_write_c(r, tb->start, tb->end, base, &tb->pieces) == 0)
        return; /* no window in this file: no series */
    if (tb->npc == tb->cap) {
        size_t cap = tb->cap ? tb->cap * 2 : 256;
        tpiece *p = bdb_realloc(tb->pc, cap * sizeof *p);
        if (!p) {
            tb->oom = 1;
            return;
        }
        tb->pc = p;
        tb->cap = cap;
    }
    tpiece *p = &tb->pc[tb->npc++];
    /* flushes and compactions add a device's series one after another: its name once */
    const tpiece *prev = tb->npc > 1 ? p - 1 : NULL;
    const char *nm = (const char *)tb->names.data;
    if (prev && !bytes_cmp(nm + prev->dname, strlen(nm + prev->dname), device, dlen))
        p->dname = prev->dname;
    else
        p->dname = put_name(&tb->names, device, dlen);
    p->mname = put_name(&tb->names, metric, mlen);
    p->off = off;
    p->len = tb->pieces.len - off;
}

/* tf_finish sorts pieces by (device, metric) through this context (qsort has none) */
static _Thread_local const char *sort_names;

static int piece_cmp(const void *x, const void *y)
{
    const tpiece *a = x, *b = y;
    int c = strcmp(sort_names + a->dname, sort_names + b->dname);
    return c ? c : strcmp(sort_names + a->mname, sort_names + b->mname);
}

static int mname_cmp(const void *x, const void *y)
{
    return strcmp(sort_names + *(const size_t *)x, sort_names + *(const size_t *)y);
}

int tf_finish(tbuilder *tb)
{
    if (tb->oom || tb->pieces.oom || tb->names.oom || tb->b.oom)
        return BDB_ERR_NOMEM;
    const char *nm = (const char *)tb->names.data;
    sort_names = nm;
    if (tb->npc > 1)
        qsort(tb->pc, tb->npc, sizeof *tb->pc, piece_cmp);
    /* the metric table: every metric name once, sorted; a piece's id by search */
    size_t *mt = bdb_malloc((tb->npc + 1) * sizeof *mt);
    uint32_t *ids = bdb_malloc((tb->npc + 1) * sizeof *ids);
    if (!mt || !ids) {
        free(mt);
        free(ids);
        return BDB_ERR_NOMEM;
    }
    for (size_t i = 0; i < tb->npc; i++)
        mt[i] = tb->pc[i].mname;
    if (tb->npc > 1)
        qsort(mt, tb->npc, sizeof *mt, mname_cmp);
    size_t nmet = 0;
    for (size_t i = 0; i < tb->npc; i++)
        if (nmet == 0 || strcmp(nm + mt[nmet - 1], nm + mt[i]) != 0)
            mt[nmet++] = mt[i];
    int rc = BDB_OK;
    for (size_t i = 0; i < tb->npc; i++) {
        size_t lo = 0, hi = nmet;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (strcmp(nm + mt[mid], nm + tb->pc[i].mname) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        ids[i] = (uint32_t)lo;
        if (i > 0 && !strcmp(nm + tb->pc[i].dname, nm + tb->pc[i - 1].dname) &&
            ids[i] == ids[i - 1])
            rc = BDB_ERR_INVALID; /* a series added twice */
    }
    bdb_buf idx;
    bdb_buf_init_checked(&idx);
    bdb_buf_put_uvarint(&idx, nmet);
    for (size_t i = 0; i < nmet; i++)
        bdb_buf_put_str(&idx, nm + mt[i], strlen(nm + mt[i]));
    size_t ndev = 0;
    for (size_t i = 0; i < tb->npc; i++)
        if (i == 0 || strcmp(nm + tb->pc[i].dname, nm + tb->pc[i - 1].dname) != 0)
            ndev++;
    bdb_buf_put_uvarint(&idx, ndev);
    for (size_t i = 0; i < tb->npc && rc == BDB_OK;) {
        size_t off = tb->b.len, j = i;
        const char *dn = nm + tb->pc[i].dname;
        for (; j < tb->npc && !strcmp(nm + tb->pc[j].dname, dn); j++) {
            bdb_buf_put_uvarint(&tb->b, ids[j]);
            bdb_buf_put_uvarint(&tb->b, tb->pc[j].len);
            bdb_buf_append(&tb->b, tb->pieces.data + tb->pc[j].off, tb->pc[j].len);
        }
        bdb_buf_put_u32le(&tb->b, tb->b.oom ? 0 : crc(tb->b.data + off, tb->b.len - off));
        bdb_buf_put_str(&idx, dn, strlen(dn));
        bdb_buf_put_uvarint(&idx, tb->b.len - off);
        i = j;
    }
    free(mt);
    free(ids);
    if (rc == BDB_OK && !idx.oom && !tb->b.oom) {
        uint64_t ioff = tb->b.len;
        bdb_buf_append(&tb->b, idx.data, idx.len);
        bdb_buf_put_u64le(&tb->b, ioff);
        bdb_buf_put_u64le(&tb->b, idx.len);
        bdb_buf_put_u32le(&tb->b, crc(idx.data, idx.len));
        bdb_buf_append(&tb->b, FOOT_MAGIC, 4);
    }
    int oom = idx.oom || tb->b.oom; /* bdb_buf_free clears the flag */
    bdb_buf_free(&idx);
    /* the pieces are in the file now */
    bdb_buf_free(&tb->pieces);
    if (rc == BDB_OK && oom)
        rc = BDB_ERR_NOMEM;
    return rc;
}

void tf_builder_free(tbuilder *tb)
{
    free(tb->tenant);
    bdb_buf_free(&tb->b);
    bdb_buf_free(&tb->pieces);
    bdb_buf_free(&tb->names);
    free(tb->pc);
    memset(tb, 0, sizeof *tb);
}

/* ---------------------------------------------------------------- header */

void tf_free(tfile *t)
{
    if (t->f)
        bdb_file_close(t->f);
    free(t->names);
    free(t->devs);
    free(t->mets);
    free(t->inputs);
    free(t->tenant);
    free(t->path);
    memset(t, 0, sizeof *t);
}

uint32_t tf_version(const uint8_t *p, size_t n)
{
    return n >= 12 && !memcmp(p, MAGIC, 8) ? bdb_get_u32le(p + 8) : 0;
}

#define HDR_NOMEM SIZE_MAX /* header(): out of memory, not a bad header */

/* Parses the header of any version into out; returns its length, 0 when malformed or
 * HDR_NOMEM. */
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
    if (d.err || !m || memcmp(m, MAGIC, 8) ||
        (ver != TIER_VERSION && ver != TIER_VERSION_FLAGS && ver != TIER_VERSION_3) ||
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
    if (ver != TIER_VERSION) {
        flags = bdb_dec_u8(&d);
        /* canonical: version 2 only with its one flag; version 3 always has the byte */
        if ((ver == TIER_VERSION_FLAGS && (flags == 0 || (flags & ~TF_REPLACES))) ||
            (flags & ~(TF_REPLACES | TF_KEPT)))
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

/* The footer's index range, checked against the file and its CRC; 0 when damaged. */
static int footer(const uint8_t *p, size_t n, size_t hlen, uint64_t *ioff, uint64_t *ilen)
{
    if (n < hlen + FOOTER || memcmp(p + n - 4, FOOT_MAGIC, 4) != 0)
        return 0;
    *ioff = bdb_get_u64le(p + n - FOOTER);
    *ilen = bdb_get_u64le(p + n - FOOTER + 8);
    uint32_t icrc = bdb_get_u32le(p + n - FOOTER + 16);
    return *ioff >= hlen && *ioff <= n - FOOTER && *ilen == n - FOOTER - *ioff &&
           crc(p + *ioff, *ilen) == icrc;
}

/* ---------------------------------------------------------------- version 3 */

/* The series of a record (without its CRC) are framed right: metric ids strictly
 * increasing and below nmet, lengths inside the record, at least one series. */
static int record_framed(const uint8_t *p, size_t n, size_t nmet)
{
    bdb_dec d;
    bdb_dec_init(&d, p, n);
    uint64_t prev = 0;
    int first = 1;
    while (bdb_dec_left(&d) > 0 && !d.err) {
        uint64_t id = bdb_dec_uvarint_canon(&d), len = bdb_dec_uvarint_canon(&d);
        if (d.err || id >= nmet || (!first && id <= prev) || len == 0 || len > bdb_dec_left(&d))
            return 0;
        bdb_dec_bytes(&d, len);
        prev = id;
        first = 0;
    }
    return !d.err && !first;
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
    if (tf_version(p, n) != TIER_VERSION_3) {
        *why = "not a version 3 file";
        goto bad;
    }
    uint64_t ioff, ilen;
    if (!footer(p, n, hlen, &ioff, &ilen)) {
        *why = "truncated, or index damaged (bounds or CRC)";
        goto bad;
    }
    bdb_dec d;
    bdb_dec_init(&d, p + ioff, ilen);
    /* the names block is at most the index's size: every name is a str in it */
    out->names = bdb_malloc(ilen + 1);
    uint64_t nmet = bdb_dec_uvarint(&d);
    if (d.err || nmet > ilen) {
        *why = "index count";
        goto bad;
    }
    out->mets = bdb_malloc((nmet + 1) * sizeof *out->mets);
    if (!out->names || !out->mets) {
        tf_free(out);
        return BDB_ERR_NOMEM;
    }
    size_t used = 0;
    for (uint64_t i = 0; i < nmet; i++) {
        size_t ml;
        const char *mn = bdb_dec_str(&d, &ml);
        if (d.err || memchr(mn, 0, ml) ||
            (i > 0 && bytes_cmp(out->names + out->mets[i - 1],
                                strlen(out->names + out->mets[i - 1]), mn, ml) >= 0)) {
            *why = "metric table (unsorted or repeated name)";
            goto bad;
        }
        out->mets[i] = (uint32_t)used;
        memcpy(out->names + used, mn, ml);
        out->names[used + ml] = 0;
        used += ml + 1;
    }
    out->nmet = nmet;
    uint64_t ndev = bdb_dec_uvarint(&d);
    if (d.err || ndev > ilen / 3) {
        *why = "index count";
        goto bad;
    }
    out->devs = bdb_malloc((ndev + 1) * sizeof *out->devs);
    if (!out->devs) {
        tf_free(out);
        return BDB_ERR_NOMEM;
    }
    uint64_t next = hlen; /* records are back to back from the header to the index */
    for (uint64_t i = 0; i < ndev; i++) {
        size_t dl;
        const char *dn = bdb_dec_str(&d, &dl);
        uint64_t len = bdb_dec_uvarint(&d);
        /* names may be empty: the WAL replays what older writers accepted */
        if (d.err || memchr(dn, 0, dl) || len < 5 || len > ioff - next || len > UINT32_MAX ||
            crc(p + next, len - 4) != bdb_get_u32le(p + next + len - 4)) {
            *why = "record damaged (bounds or CRC)";
            goto bad;
        }
        if (i > 0 && bytes_cmp(out->names + out->devs[i - 1].name,
                               strlen(out->names + out->devs[i - 1].name), dn, dl) >= 0) {
            *why = "devices unsorted or repeated";
            goto bad;
        }
        if (!record_framed(p + next, len - 4, nmet)) {
            *why = "record damaged (series framing)";
            goto bad;
        }
        tdev *t = &out->devs[out->ndev++];
        t->off = next;
        t->len = (uint32_t)len;
        t->name = (uint32_t)used;
        memcpy(out->names + used, dn, dl);
        out->names[used + dl] = 0;
        used += dl + 1;
        next += len;
    }
    if (next != ioff || bdb_dec_left(&d) != 0) {
        *why = "index does not cover the records exactly";
        goto bad;
    }
    return BDB_OK;
bad:
    tf_free(out);
    return BDB_ERR_CORRUPT;
}

int tf_find(const tfile *t, const char *device, const char *metric, tloc *loc)
{
    size_t lo = 0, hi = t->ndev;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(t->names + t->devs[mid].name, device);
        if (c == 0) {
            size_t a = 0, b = t->nmet;
            while (a < b) {
                size_t m = a + (b - a) / 2;
                int k = strcmp(t->names + t->mets[m], metric);
                if (k == 0) {
                    loc->dev = mid;
                    loc->met = (uint32_t)m;
                    return 1;
                }
                if (k < 0)
                    a = m + 1;
                else
                    b = m;
            }
            return 0;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

/* Reads and checks the record of device i: a malloc'd copy without its CRC. */
static int read_record(const tfile *t, size_t i, uint8_t **out, size_t *len)
{
    const tdev *dv = &t->devs[i];
    uint8_t *p = bdb_malloc(dv->len);
    if (!p)
        return BDB_ERR_NOMEM;
    size_t got = 0;
    int rc = bdb_file_pread(t->f, p, dv->len, dv->off, &got);
    if (rc == BDB_OK && got != dv->len)
        rc = BDB_ERR_CORRUPT;
    if (rc == BDB_OK && crc(p, dv->len - 4) != bdb_get_u32le(p + dv->len - 4))
        rc = BDB_ERR_CORRUPT;
    if (rc != BDB_OK) {
        free(p);
        return rc;
    }
    *out = p;
    *len = dv->len - 4;
    return BDB_OK;
}

/* Merges (or, in a replacing file, puts) the windows encoded in p[0..n) in [lo, hi). */
static int read_windows(const tfile *t, const uint8_t *p, size_t n, int64_t lo, int64_t hi,
                        bdb_rollup *r)
{
    bdb_dec d;
    bdb_dec_init(&d, p, n);
    int64_t a = lo < t->start ? t->start : lo, b = hi > t->end ? t->end : hi;
    /* A read of the whole file window checks every window; a query of part of it (the
     * checksum holds for the rest) builds only the windows it wants. */
    int part = a > t->start || b < t->end, stopped = 0;
    bdb_rollup tmp, *into = r;
    if (t->flags & TF_REPLACES) {
        bdb_rollup_init(&tmp, r->width);
        tmp.stats_only = r->stats_only;
        into = &tmp;
    }
    int rc = bdb_rollup_read_c(into, &d, bdb_floor_div(t->start, r->width), a, b, part, &stopped);
    if (into == &tmp) {
        for (size_t i = 0; i < tmp.n && rc == BDB_OK; i++)
            rc = bdb_rollup_set_window(r, &tmp.w[i]);
        bdb_rollup_free(&tmp);
    }
    if (rc == BDB_OK && !stopped && bdb_dec_left(&d) != 0)
        rc = BDB_ERR_CORRUPT;
    return rc;
}

/* The next series of a record after *pos: its metric id and windows. 1, 0 at the
 * end, BDB_ERR_CORRUPT when the framing is wrong (checked at open, so only a file
 * changed since). */
static int next_series(const uint8_t *p, size_t n, size_t *pos, uint32_t nmet, uint32_t *id,
                       size_t *woff, size_t *wlen)
{
    if (*pos >= n)
        return 0;
    bdb_dec d;
    bdb_dec_init(&d, p + *pos, n - *pos);
    uint64_t m = bdb_dec_uvarint(&d), len = bdb_dec_uvarint(&d);
    if (d.err || m >= nmet || len == 0 || len > bdb_dec_left(&d))
        return BDB_ERR_CORRUPT;
    *id = (uint32_t)m;
    *woff = n - bdb_dec_left(&d);
    *wlen = len;
    *pos = *woff + len;
    return 1;
}

int tf_read_rec(const tfile *t, const tloc *loc, int64_t lo, int64_t hi, bdb_rollup *r)
{
    uint8_t *p;
    size_t n;
    int rc = read_record(t, loc->dev, &p, &n);
    if (rc != BDB_OK)
        return rc;
    size_t pos = 0, woff, wlen;
    uint32_t id;
    int k;
    while ((k = next_series(p, n, &pos, (uint32_t)t->nmet, &id, &woff, &wlen)) == 1 &&
           id < loc->met)
        ;
    if (k < 0)
        rc = k;
    else if (k == 1 && id == loc->met)
        rc = read_windows(t, p + woff, wlen, lo, hi, r);
    free(p);
    return rc;
}

void tf_iter_init(titer *it, const tfile *t)
{
    memset(it, 0, sizeof *it);
    it->t = t;
}

int tf_iter_next(titer *it)
{
    for (;;) {
        if (it->started && it->rec) {
            int k = next_series(it->rec, it->rlen, &it->pos, (uint32_t)it->t->nmet, &it->met,
                                &it->woff, &it->wlen);
            if (k != 0)
                return k;
            free(it->rec);
            it->rec = NULL;
            it->dev++;
        }
        it->started = 1;
        if (it->dev >= it->t->ndev)
            return 0;
        int rc = read_record(it->t, it->dev, &it->rec, &it->rlen);
        if (rc != BDB_OK)
            return rc;
        it->pos = 0;
    }
}

const char *tf_iter_device(const titer *it)
{
    return it->t->names + it->t->devs[it->dev].name;
}

const char *tf_iter_metric(const titer *it)
{
    return it->t->names + it->t->mets[it->met];
}

int tf_iter_read(const titer *it, bdb_rollup *r)
{
    return read_windows(it->t, it->rec + it->woff, it->wlen, INT64_MIN, INT64_MAX, r);
}

void tf_iter_free(titer *it)
{
    free(it->rec);
    it->rec = NULL;
}

/* ---------------------------------------------------------------- versions 1 and 2 */

/* Checks a version 1 or 2 image as those versions' reader did (footer, index CRC,
 * records back to back, every record's CRC) and adds every record's windows to tb. */
static int upgrade_records(const uint8_t *p, size_t n, size_t hlen, tbuilder *tb, int64_t width,
                           const char **why)
{
    uint64_t ioff, ilen;
    if (!footer(p, n, hlen, &ioff, &ilen)) {
        *why = "truncated, or index damaged (bounds or CRC)";
        return BDB_ERR_CORRUPT;
    }
    bdb_dec d;
    bdb_dec_init(&d, p + ioff, ilen);
    uint64_t nrec = bdb_dec_uvarint(&d);
    if (d.err || nrec > ilen / 4) {
        *why = "index count";
        return BDB_ERR_CORRUPT;
    }
    bdb_rollup r;
    bdb_rollup_init(&r, width);
    int rc = BDB_OK;
    uint64_t next = hlen;
    for (uint64_t i = 0; i < nrec && rc == BDB_OK; i++) {
        size_t dl, ml;
        const char *dn = bdb_dec_str(&d, &dl), *mn = bdb_dec_str(&d, &ml);
        uint64_t off = bdb_dec_uvarint(&d), len = bdb_dec_uvarint(&d);
        if (d.err || off != next || len < 4 || len > ioff - off || memchr(dn, 0, dl) ||
            memchr(mn, 0, ml) || crc(p + off, len - 4) != bdb_get_u32le(p + off + len - 4)) {
            *why = "record damaged (bounds or CRC)";
            rc = BDB_ERR_CORRUPT;
            break;
        }
        next = off + len;
        bdb_dec rd;
        bdb_dec_init(&rd, p + off, len - 4);
        size_t rdl, rml;
        const char *rdn = bdb_dec_str(&rd, &rdl), *rmn = bdb_dec_str(&rd, &rml);
        bdb_rollup_reset(&r);
        if (rd.err || rdl != dl || rml != ml || memcmp(rdn, dn, dl) || memcmp(rmn, mn, ml))
            rc = BDB_ERR_CORRUPT;
        if (rc == BDB_OK)
            rc = bdb_rollup_read(&r, &rd, tb->start, tb->end);
        if (rc == BDB_OK && bdb_dec_left(&rd) != 0)
            rc = BDB_ERR_CORRUPT;
        if (rc == BDB_ERR_CORRUPT)
            *why = "record damaged (windows)";
        if (rc == BDB_OK)
            tf_add(tb, dn, dl, mn, ml, &r);
    }
    bdb_rollup_free(&r);
    if (rc == BDB_OK && (next != ioff || bdb_dec_left(&d) != 0)) {
        *why = "index does not cover the records exactly";
        rc = BDB_ERR_CORRUPT;
    }
    return rc;
}

int tf_upgrade(const uint8_t *p, size_t n, bdb_buf *out, const char **why)
{
    tfile h;
    memset(&h, 0, sizeof h);
    size_t hlen = header(p, n, &h);
    if (hlen == HDR_NOMEM)
        return BDB_ERR_NOMEM;
    if (!hlen || tf_version(p, n) == TIER_VERSION_3) {
        *why = "bad header (magic, version, fields or CRC)";
        tf_free(&h);
        return BDB_ERR_CORRUPT;
    }
    tbuilder tb;
    tf_begin(&tb, h.res, h.tenant, h.start, h.end, h.seq, h.wal_upto, h.inputs, h.ninputs, h.flags);
    int rc = upgrade_records(p, n, hlen, &tb, bdb_res_width(h.res), why);
    if (rc == BDB_OK)
        rc = tf_finish(&tb);
    if (rc == BDB_ERR_INVALID) {
        *why = "a series appears twice";
        rc = BDB_ERR_CORRUPT;
    }
    if (rc == BDB_OK) {
        bdb_buf_free(out);
        *out = tb.b;
        memset(&tb.b, 0, sizeof tb.b);
    }
    tf_builder_free(&tb);
    tf_free(&h);
    return rc;
}
