/* db_tier_file: the tier file format (docs/formats/tier.md). Version 4 is written:
 *
 *   header  "BDBTIER1" | u32 version 5 | u8 res | i64 start | i64 end | u64 seq |
 *           u64 wal_upto | str tenant | uvarint ninputs | uvarint seq... | u8 flags |
 *           u32 crc
 *   records one per device, by device name: per series of the device, by metric id:
 *           uvarint metric id | uvarint len | len bytes of compact windows
 *           (bdb_rollup_write_c, sketches in form C2); then u32 crc
 *   index   uvarint nmet | str metric... (sorted) | uvarint ndev |
 *           (str device | uvarint record len)... (sorted; records back to back)
 *   footer  u64 index_off | u64 index_len | u32 crc(index) | "BDTE"
 *
 * Names are written once per file (a device's record holds all its metrics), so the
 * bytes and the memory of the index grow with devices, not series. Version 3 (the C1
 * sketch form) is read as it is; versions 1 and 2 (one record per series, the version 1
 * window encoding) are read only by tf_upgrade.
 * Every record has its own CRC so that a query reads and checks only the one record it
 * needs; opening a file checks all of them once. */
#include "storage/embedded/tier/db_tier_int.h"
#include "common/alloc.h"
#include "common/timeutil.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "storage/embedded/tier/db_tier.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
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

static int str_ptr_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ---------------------------------------------------------------- writing */

/* Staged bytes go to the file once this many are waiting. */
#define TF_STAGE ((size_t)64 << 10)

static int tb_fail(tbuilder *tb, int rc)
{
    if (!tb->err)
        tb->err = rc;
    return rc;
}

/* Hands the staged bytes to the file (with a vfs; without one they stay in b). */
static void tb_drain(tbuilder *tb)
{
    if (!tb->to_file || tb->err || !tb->b.len)
        return;
    int rc = bdb_vfs_stream_write(&tb->fs, tb->b.data, tb->b.len);
    if (rc != BDB_OK) {
        tb_fail(tb, rc);
        return;
    }
    tb->written += tb->b.len;
    tb->b.len = 0;
}

void tf_begin(tbuilder *tb, bdb_vfs *vfs, const char *dir, enum bdb_res res, const char *tenant,
              int64_t start, int64_t end, uint64_t seq, uint64_t wal_upto, const uint64_t *inputs,
              size_t ninputs, unsigned flags, const char *const *mets, size_t nmet)
{
    memset(tb, 0, sizeof *tb);
    tb->res = res;
    tb->tenant = bdb_strdup(tenant);
    tb->start = start;
    tb->end = end;
    tb->seq = seq;
    tb->wal_upto = wal_upto;
    tb->flags = flags;
    tb->mets = mets;
    tb->nmet = nmet;
    tb->last_met = -1;
    bdb_buf_init_checked(&tb->b); /* out of memory: tf_finish fails */
    bdb_buf_init_checked(&tb->rec);
    bdb_buf_init_checked(&tb->devs);
    bdb_buf_init_checked(&tb->win);
    tb->inputs = bdb_malloc((ninputs + 1) * sizeof *tb->inputs);
    if (!tb->tenant || !tb->inputs) {
        tb_fail(tb, BDB_ERR_NOMEM);
        return;
    }
    if (ninputs)
        memcpy(tb->inputs, inputs, ninputs * sizeof *inputs);
    tb->ninputs = ninputs;
    bdb_buf_append(&tb->b, MAGIC, 8);
    bdb_buf_put_u32le(&tb->b, TIER_VERSION_5);
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
    bdb_buf_put_u32le(&tb->b, tb->b.oom ? 0 : crc(tb->b.data, tb->b.len));
    if (tb->b.oom) {
        tb_fail(tb, BDB_ERR_NOMEM);
        return;
    }
    tb->hlen = tb->b.len;
    if (vfs) {
        char name[32];
        snprintf(name, sizeof name, "%016" PRIu64 ".tier", seq);
        int rc = bdb_vfs_stream_open(&tb->fs, vfs, dir, name);
        if (rc != BDB_OK)
            tb_fail(tb, rc);
        else
            tb->to_file = 1;
    }
}

/* The metric's id: its position in the table, or -1. */
static int64_t met_id(const tbuilder *tb, const char *m, size_t ml)
{
    size_t lo = 0, hi = tb->nmet;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *x = tb->mets[mid];
        int c = bytes_cmp(x, strlen(x), m, ml);
        if (c == 0)
            return (int64_t)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* Ends the open device: its record (series, CRC) to the staged bytes, its index entry. */
static void end_device(tbuilder *tb)
{
    if (!tb->dev || tb->err)
        return;
    bdb_buf_put_u32le(&tb->rec, tb->rec.oom ? 0 : crc(tb->rec.data, tb->rec.len));
    bdb_buf_append(&tb->b, tb->rec.data, tb->rec.len);
    bdb_buf_put_str(&tb->devs, tb->dev, tb->dlen);
    bdb_buf_put_uvarint(&tb->devs, tb->rec.len);
    tb->ndev++;
    if (tb->rec.oom || tb->b.oom || tb->devs.oom) {
        tb_fail(tb, BDB_ERR_NOMEM);
        return;
    }
    tb->rec.len = 0;
    tb->last_met = -1;
    free(tb->dev);
    tb->dev = NULL;
    if (tb->b.len >= TF_STAGE)
        tb_drain(tb);
}

void tf_add(tbuilder *tb, const char *device, size_t dlen, const char *metric, size_t mlen,
            const bdb_rollup *r)
{
    if (tb->err) /* tf_finish reports it */
        return;
    /* The windows first (into the scratch buffer): a series with none in this file
     * adds nothing, not even its device. */
    int64_t base = bdb_floor_div(tb->start, r->width);
    tb->win.len = 0;
    size_t nw = bdb_rollup_write_c(r, tb->start, tb->end, base, BDB_C2, &tb->win);
    if (tb->win.oom) {
        tb_fail(tb, BDB_ERR_NOMEM);
        return;
    }
    if (nw == 0)
        return; /* no window in this file: no series */
    int64_t id = met_id(tb, metric, mlen);
    int c = tb->dev ? bytes_cmp(tb->dev, tb->dlen, device, dlen) : -1;
    if (id < 0 || c > 0 || (c == 0 && id <= tb->last_met)) {
        tb_fail(tb, BDB_ERR_INVALID); /* a caller's bug: out of order, twice, or unknown */
        return;
    }
    if (c < 0) {
        end_device(tb);
        if (tb->err)
            return; /* the open device stays for tf_builder_free */
        tb->dev = bdb_strndup(device, dlen);
        tb->dlen = dlen;
        if (!tb->dev) {
            tb_fail(tb, BDB_ERR_NOMEM);
            return;
        }
    }
    tb->last_met = id;
    bdb_buf_put_uvarint(&tb->rec, (uint64_t)id);
    bdb_buf_put_uvarint(&tb->rec, tb->win.len);
    bdb_buf_append(&tb->rec, tb->win.data, tb->win.len);
    if (tb->rec.oom)
        tb_fail(tb, BDB_ERR_NOMEM);
}

void tf_names_sort_unique(const char **v, size_t *n)
{
    if (*n > 1)
        qsort(v, *n, sizeof *v, str_ptr_cmp);
    size_t u = 0;
    for (size_t i = 0; i < *n; i++)
        if (u == 0 || strcmp(v[u - 1], v[i]) != 0)
            v[u++] = v[i];
    *n = u;
}

static int parse_index(const uint8_t *ip, uint64_t ilen, uint64_t hlen, uint64_t ioff,
                       const uint8_t *img, tfile *out, const char **why);

int tf_finish(tbuilder *tb, tfile *out)
{
    end_device(tb);
    /* the index: the metric table, then the devices */
    bdb_buf idx;
    bdb_buf_init_checked(&idx);
    bdb_buf_put_uvarint(&idx, tb->nmet);
    for (size_t i = 0; i < tb->nmet; i++)
        bdb_buf_put_str(&idx, tb->mets[i], strlen(tb->mets[i]));
    bdb_buf_put_uvarint(&idx, tb->ndev);
    bdb_buf_append(&idx, tb->devs.data, tb->devs.len);
    if (idx.oom)
        tb_fail(tb, BDB_ERR_NOMEM);
    uint64_t ioff = tb->written + tb->b.len;
    if (!tb->err) {
        bdb_buf_append(&tb->b, idx.data, idx.len);
        bdb_buf_put_u64le(&tb->b, ioff);
        bdb_buf_put_u64le(&tb->b, idx.len);
        bdb_buf_put_u32le(&tb->b, crc(idx.data, idx.len));
        bdb_buf_append(&tb->b, FOOT_MAGIC, 4);
        if (tb->b.oom)
            tb_fail(tb, BDB_ERR_NOMEM);
    }
    if (!tb->to_file) {
        bdb_buf_free(&idx);
        return tb->err;
    }
    tb_drain(tb);
    uint64_t size = tb->written;
    memset(out, 0, sizeof *out);
    const char *why = NULL;
    /* the index as written, into the in-memory file (the records were checked as they
     * were made, and the file is not read back) */
    if (!tb->err) {
        int rc = parse_index(idx.data, idx.len, tb->hlen, ioff, NULL, out, &why);
        if (rc == BDB_ERR_CORRUPT)
            BDB_ERROR("tier file %s: its own index does not parse: %s", tb->fs.path, why);
        if (rc != BDB_OK)
            tb_fail(tb, rc);
    }
    bdb_buf_free(&idx);
    char *path = tb->err ? NULL : bdb_strdup(tb->fs.path);
    bdb_vfs *vfs = tb->fs.v;
    if (!tb->err && !path)
        tb_fail(tb, BDB_ERR_NOMEM);
    if (!tb->err) {
        int rc = bdb_vfs_stream_commit(&tb->fs); /* ends the stream either way */
        tb->to_file = 0;
        if (rc != BDB_OK)
            tb_fail(tb, rc);
    }
    if (!tb->err) {
        int rc = bdb_vfs_open(vfs, path, BDB_O_RDONLY, &out->f);
        if (rc != BDB_OK) {
            int e = errno;
            bdb_vfs_unlink(vfs, path);
            errno = e;
            tb_fail(tb, rc);
        }
    }
    if (tb->err) {
        free(path);
        tf_free(out);
        return tb->err;
    }
    out->res = tb->res;
    out->start = tb->start;
    out->end = tb->end;
    out->seq = tb->seq;
    out->wal_upto = tb->wal_upto;
    out->flags = tb->flags;
    out->form = BDB_C2; /* what tf_begin writes: version 5 */
    out->size = size;
    out->tenant = tb->tenant; /* handed over */
    tb->tenant = NULL;
    out->inputs = tb->inputs;
    tb->inputs = NULL;
    out->ninputs = tb->ninputs;
    out->path = path;
    return BDB_OK;
}

void tf_builder_free(tbuilder *tb)
{
    if (tb->to_file)
        bdb_vfs_stream_abort(&tb->fs); /* never finished: its .tmp goes */
    free(tb->tenant);
    free(tb->inputs);
    free(tb->dev);
    bdb_buf_free(&tb->b);
    bdb_buf_free(&tb->rec);
    bdb_buf_free(&tb->devs);
    bdb_buf_free(&tb->win);
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
        (ver != TIER_VERSION && ver != TIER_VERSION_FLAGS && ver != TIER_VERSION_3 &&
         ver != TIER_VERSION_5) ||
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
        /* canonical: version 2 only with its one flag; versions 3 and 5 always have the byte */
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
    out->form = ver == TIER_VERSION_5 ? BDB_C2 : BDB_C1;
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

/* ---------------------------------------------------------------- versions 3 and 5 */

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

/* The index (metric table, device list) at ioff..ioff+ilen of a file whose header is
 * hlen bytes, into out's names, mets and devs. img: the whole image, whose records are
 * then checked too (CRC, framing); NULL for a file this process just wrote. */
static int parse_index(const uint8_t *ip, uint64_t ilen, uint64_t hlen, uint64_t ioff,
                       const uint8_t *img, tfile *out, const char **why)
{
    bdb_dec d;
    bdb_dec_init(&d, ip, ilen);
    /* the names block is at most the index's size: every name is a str in it */
    out->names = bdb_malloc(ilen + 1);
    uint64_t nmet = bdb_dec_uvarint(&d);
    if (d.err || nmet > ilen) {
        *why = "index count";
        return BDB_ERR_CORRUPT;
    }
    out->mets = bdb_malloc((nmet + 1) * sizeof *out->mets);
    if (!out->names || !out->mets)
        return BDB_ERR_NOMEM;
    size_t used = 0;
    for (uint64_t i = 0; i < nmet; i++) {
        size_t ml;
        const char *mn = bdb_dec_str(&d, &ml);
        if (d.err || memchr(mn, 0, ml) ||
            (i > 0 && bytes_cmp(out->names + out->mets[i - 1],
                                strlen(out->names + out->mets[i - 1]), mn, ml) >= 0)) {
            *why = "metric table (unsorted or repeated name)";
            return BDB_ERR_CORRUPT;
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
        return BDB_ERR_CORRUPT;
    }
    out->devs = bdb_malloc((ndev + 1) * sizeof *out->devs);
    if (!out->devs)
        return BDB_ERR_NOMEM;
    uint64_t next = hlen; /* records are back to back from the header to the index */
    for (uint64_t i = 0; i < ndev; i++) {
        size_t dl;
        const char *dn = bdb_dec_str(&d, &dl);
        uint64_t len = bdb_dec_uvarint(&d);
        /* names may be empty: the WAL replays what older writers accepted */
        if (d.err || memchr(dn, 0, dl) || len < 5 || len > ioff - next || len > UINT32_MAX ||
            (img && crc(img + next, len - 4) != bdb_get_u32le(img + next + len - 4))) {
            *why = "record damaged (bounds or CRC)";
            return BDB_ERR_CORRUPT;
        }
        if (i > 0 && bytes_cmp(out->names + out->devs[i - 1].name,
                               strlen(out->names + out->devs[i - 1].name), dn, dl) >= 0) {
            *why = "devices unsorted or repeated";
            return BDB_ERR_CORRUPT;
        }
        if (img && !record_framed(img + next, len - 4, nmet)) {
            *why = "record damaged (series framing)";
            return BDB_ERR_CORRUPT;
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
        return BDB_ERR_CORRUPT;
    }
    return BDB_OK;
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
    int rc = BDB_ERR_CORRUPT;
    uint64_t ioff, ilen;
    uint32_t ver = tf_version(p, n);
    if (ver != TIER_VERSION_3 && ver != TIER_VERSION_5)
        *why = "not a version 3 or 5 file";
    else if (!footer(p, n, hlen, &ioff, &ilen))
        *why = "truncated, or index damaged (bounds or CRC)";
    else
        rc = parse_index(p + ioff, ilen, hlen, ioff, p, out, why);
    if (rc != BDB_OK)
        tf_free(out);
    return rc;
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
    int rc = bdb_rollup_read_c(into, &d, t->form, bdb_floor_div(t->start, r->width), a, b, part,
                               &stopped);
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

/* Merges (or, in a replacing file, puts) the cached windows v[0..n) in [lo, hi), as
 * read_windows does with the decoded ones: the same calls with the same windows. */
static int cached_into(const tfile *t, const bdb_stwin *v, size_t n, int64_t lo, int64_t hi,
                       bdb_rollup *r)
{
    int64_t a = lo < t->start ? t->start : lo, b = hi > t->end ? t->end : hi;
    bdb_rollup tmp, *into = r;
    if (t->flags & TF_REPLACES) {
        bdb_rollup_init(&tmp, r->width);
        tmp.stats_only = r->stats_only;
        into = &tmp;
    }
    bdb_window w;
    bdb_sketch_init_default(&w.sk);
    int rc = BDB_OK;
    size_t k = 0, hiw = n; /* v ascending: the first window at or after a */
    while (k < hiw) {
        size_t mid = k + (hiw - k) / 2;
        if (v[mid].start < a)
            k = mid + 1;
        else
            hiw = mid;
    }
    size_t e = k;
    while (e < n && v[e].start < b)
        e++;
    /* after every window into holds (the usual case: one file of the span, or files
     * of later spans): appended at once; else merged one by one */
    rc = bdb_rollup_append_stats(into, v + k, e - k);
    if (rc == BDB_ERR_INVALID)
        for (rc = BDB_OK; k < e && rc == BDB_OK; k++) {
            w.start = v[k].start;
            w.st = v[k].st;
            rc = bdb_rollup_merge_window(into, &w);
        }
    bdb_sketch_free(&w.sk);
    if (into == &tmp) {
        for (size_t i = 0; i < tmp.n && rc == BDB_OK; i++)
            rc = bdb_rollup_set_window(r, &tmp.w[i]);
        bdb_rollup_free(&tmp);
    }
    return rc;
}

int tf_read_rec_cached(bdb_rcache *c, const tfile *t, const tloc *loc, int64_t lo, int64_t hi,
                       bdb_rollup *r)
{
    if (!c || !r->stats_only || r->width != bdb_res_width(t->res))
        return tf_read_rec(t, loc, lo, hi, r);
    uint8_t key[1 + 1 + 8 + 8 + 4];
    key[0] = 'T';
    key[1] = (uint8_t)t->res;
    memcpy(key + 2, &t->seq, 8);
    uint64_t dev = loc->dev;
    memcpy(key + 10, &dev, 8);
    memcpy(key + 18, &loc->met, 4);
    size_t len;
    bdb_rcache_ent *ref;
    const bdb_stwin *v = bdb_rcache_get(c, key, sizeof key, &len, &ref);
    if (v) {
        int rc = cached_into(t, v, len / sizeof *v, lo, hi, r);
        bdb_rcache_release(c, ref);
        return rc;
    }
    uint8_t *p;
    size_t n;
    int rc = read_record(t, loc->dev, &p, &n);
    if (rc != BDB_OK)
        return rc;
    size_t pos = 0, woff = 0, wlen = 0;
    uint32_t id = 0;
    int k;
    while ((k = next_series(p, n, &pos, (uint32_t)t->nmet, &id, &woff, &wlen)) == 1 &&
           id < loc->met)
        ;
    if (k < 0 || k == 0 || id != loc->met) { /* as tf_read_rec: an error, or no such series */
        free(p);
        return k < 0 ? k : BDB_OK;
    }
    /* the whole series, every window checked (a read of the whole file window) */
    bdb_rollup all;
    bdb_rollup_init(&all, r->width);
    all.stats_only = 1;
    bdb_dec d;
    bdb_dec_init(&d, p + woff, wlen);
    int stopped = 0;
    int whole = bdb_rollup_read_c(&all, &d, t->form, bdb_floor_div(t->start, r->width), t->start,
                                  t->end, 0, &stopped) == BDB_OK &&
                bdb_dec_left(&d) == 0;
    bdb_stwin *nv = whole ? bdb_malloc((all.n ? all.n : 1) * sizeof *nv) : NULL;
    if (nv) {
        for (size_t i = 0; i < all.n; i++)
            nv[i] = (bdb_stwin){all.w[i].start, all.w[i].st};
        rc = cached_into(t, nv, all.n, lo, hi, r);
        if (rc == BDB_OK)
            bdb_rcache_put(c, key, sizeof key, nv, all.n * sizeof *nv);
        else
            free(nv);
    } else { /* damaged past the range asked, or no memory: as without the cache */
        rc = read_windows(t, p + woff, wlen, lo, hi, r);
    }
    bdb_rollup_free(&all);
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

/* A version 1 or 2 record: its series' names and where its bytes are. */
struct oldrec {
    const char *dn, *mn;
    size_t dl, ml;
    uint64_t off, len;
};

static int oldrec_cmp(const void *x, const void *y)
{
    const struct oldrec *a = x, *b = y;
    int c = bytes_cmp(a->dn, a->dl, b->dn, b->dl);
    return c ? c : bytes_cmp(a->mn, a->ml, b->mn, b->ml);
}

/* Checks a version 1 or 2 index as those versions' reader did (footer, index CRC,
 * records back to back, every record's CRC) into *out (sorted by device and metric;
 * names point into p). */
static int upgrade_index(const uint8_t *p, size_t n, size_t hlen, struct oldrec **out, size_t *nout,
                         const char **why)
{
    uint64_t ioff, ilen;
    *out = NULL;
    *nout = 0;
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
    struct oldrec *v = bdb_malloc((nrec + 1) * sizeof *v);
    if (!v)
        return BDB_ERR_NOMEM;
    uint64_t next = hlen;
    for (uint64_t i = 0; i < nrec; i++) {
        struct oldrec *o = &v[i];
        o->dn = bdb_dec_str(&d, &o->dl);
        o->mn = bdb_dec_str(&d, &o->ml);
        o->off = bdb_dec_uvarint(&d);
        o->len = bdb_dec_uvarint(&d);
        if (d.err || o->off != next || o->len < 4 || o->len > ioff - o->off ||
            memchr(o->dn, 0, o->dl) || memchr(o->mn, 0, o->ml) ||
            crc(p + o->off, o->len - 4) != bdb_get_u32le(p + o->off + o->len - 4)) {
            *why = "record damaged (bounds or CRC)";
            free(v);
            return BDB_ERR_CORRUPT;
        }
        next = o->off + o->len;
    }
    if (next != ioff || bdb_dec_left(&d) != 0) {
        *why = "index does not cover the records exactly";
        free(v);
        return BDB_ERR_CORRUPT;
    }
    if (nrec > 1)
        qsort(v, nrec, sizeof *v, oldrec_cmp);
    *out = v;
    *nout = nrec;
    return BDB_OK;
}

/* Adds the windows of every record of v (checked by upgrade_index) to tb. */
static int upgrade_records(const uint8_t *p, const struct oldrec *v, size_t nv, tbuilder *tb,
                           int64_t width, const char **why)
{
    bdb_rollup r;
    bdb_rollup_init(&r, width);
    int rc = BDB_OK;
    for (size_t i = 0; i < nv && rc == BDB_OK; i++) {
        const struct oldrec *o = &v[i];
        bdb_dec rd;
        bdb_dec_init(&rd, p + o->off, o->len - 4);
        size_t rdl, rml;
        const char *rdn = bdb_dec_str(&rd, &rdl), *rmn = bdb_dec_str(&rd, &rml);
        bdb_rollup_reset(&r);
        if (rd.err || rdl != o->dl || rml != o->ml || memcmp(rdn, o->dn, o->dl) ||
            memcmp(rmn, o->mn, o->ml))
            rc = BDB_ERR_CORRUPT;
        if (rc == BDB_OK)
            rc = bdb_rollup_read(&r, &rd, tb->start, tb->end);
        if (rc == BDB_OK && bdb_dec_left(&rd) != 0)
            rc = BDB_ERR_CORRUPT;
        if (rc == BDB_ERR_CORRUPT)
            *why = "record damaged (windows)";
        if (rc == BDB_OK)
            tf_add(tb, o->dn, o->dl, o->mn, o->ml, &r);
    }
    bdb_rollup_free(&r);
    return rc;
}

int tf_upgrade(const uint8_t *p, size_t n, bdb_buf *out, const char **why)
{
    tfile h;
    memset(&h, 0, sizeof h);
    size_t hlen = header(p, n, &h);
    if (hlen == HDR_NOMEM)
        return BDB_ERR_NOMEM;
    if (!hlen || tf_version(p, n) == TIER_VERSION_3 || tf_version(p, n) == TIER_VERSION_5) {
        *why = "bad header (magic, version, fields or CRC)";
        tf_free(&h);
        return BDB_ERR_CORRUPT;
    }
    struct oldrec *v;
    size_t nv;
    int rc = upgrade_index(p, n, hlen, &v, &nv, why);
    /* the metric table: the names, NUL-terminated copies in one block */
    char *block = NULL;
    const char **mets = NULL;
    size_t nmet = nv;
    if (rc == BDB_OK) {
        size_t bytes = 1;
        for (size_t i = 0; i < nv; i++)
            bytes += v[i].ml + 1;
        block = bdb_malloc(bytes);
        mets = bdb_malloc((nv + 1) * sizeof *mets);
        if (!block || !mets)
            rc = BDB_ERR_NOMEM;
        for (size_t i = 0, at = 0; rc == BDB_OK && i < nv; i++) {
            memcpy(block + at, v[i].mn, v[i].ml);
            block[at + v[i].ml] = 0;
            mets[i] = block + at;
            at += v[i].ml + 1;
        }
        if (rc == BDB_OK)
            tf_names_sort_unique(mets, &nmet);
    }
    tbuilder tb;
    memset(&tb, 0, sizeof tb);
    if (rc == BDB_OK) {
        tf_begin(&tb, NULL, NULL, h.res, h.tenant, h.start, h.end, h.seq, h.wal_upto, h.inputs,
                 h.ninputs, h.flags, mets, nmet);
        rc = upgrade_records(p, v, nv, &tb, bdb_res_width(h.res), why);
    }
    if (rc == BDB_OK)
        rc = tf_finish(&tb, NULL);
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
    free(mets);
    free(block);
    free(v);
    tf_free(&h);
    return rc;
}
