/* db_fleet_file: the fleet file format and the recomputed-window list (see
 * db_fleet_int.h; layouts in docs/AGGREGATION.md#fleet-aggregates). */
#include "storage/embedded/fleet/db_fleet_int.h"
#include "common/alloc.h"
#include "common/path.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "storage/embedded/tier/db_tier.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

void *fl_realloc(void *p, size_t n)
{
    return bdb_realloc(p, n ? n : 1);
}

char *fl_strndup(const char *s, size_t n)
{
    char *p = fl_realloc(NULL, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

void fl_file_free(ffile *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->nrec; i++) {
        free(f->recs[i].tenant);
        free(f->recs[i].metric);
    }
    free(f->recs);
    free(f->inputs);
    free(f->data);
    free(f->path);
    free(f);
}

int fl_rec_cmp(const char *t1, const char *m1, const char *t2, const char *m2)
{
    int c = strcmp(t1, t2);
    return c ? c : strcmp(m1, m2);
}

/* magic, u32 version, u8 res (2 = 1h, 3 = 1d), varint start, varint end, u64 seq,
 * u64 wal_upto, uvarint ninputs, uvarint seq..., uvarint nrec, then the records: nrec x
 * (str tenant, str metric, uvarint len, len bytes of bdb_fleet_write); in version 2 as
 * uvarint raw length and one zstd frame of them, in version 1 as they are; u32 CRC-32
 * of all before. Version 2 because each window lists its devices, and a tenant's
 * metrics list the same devices again: the frame stores each list about once. */
static void file_encode(bdb_buf *out, int ri, int64_t start, int64_t end, uint64_t seq,
                        uint64_t upto, const uint64_t *in, size_t nin, size_t nrec,
                        const bdb_buf *body)
{
    bdb_buf_append(out, FLEET_MAGIC, 8);
    bdb_buf_put_u32le(out, FLEET_VERSION);
    bdb_buf_putc(out, (uint8_t)res_of(ri));
    bdb_buf_put_varint(out, start);
    bdb_buf_put_varint(out, end);
    bdb_buf_put_u64le(out, seq);
    bdb_buf_put_u64le(out, upto);
    bdb_buf_put_uvarint(out, nin);
    for (size_t i = 0; i < nin; i++)
        bdb_buf_put_uvarint(out, in[i]);
    bdb_buf_put_uvarint(out, nrec);
    bdb_buf_put_uvarint(out, body->len);
    size_t bound = ZSTD_compressBound(body->len);
    if (bdb_buf_reserve(out, bound + 4) != BDB_OK)
        return; /* out->oom */
    size_t z = ZSTD_compress(out->data + out->len, bound, body->data, body->len, 3);
    if (ZSTD_isError(z)) { /* only for lack of memory: the caller's check of oom fails */
        out->oom = 1;
        return;
    }
    out->len += z;
    bdb_buf_put_u32le(out, (uint32_t)crc32(0L, out->data, (uInt)out->len));
}

/* The records of a version 2 file: the frame at d decompressed into *body (malloc'd),
 * exactly raw bytes. BDB_OK, BDB_ERR_NOMEM or BDB_ERR_CORRUPT. */
static int body_inflate(bdb_dec *d, uint8_t **body, size_t *blen)
{
    uint64_t raw = bdb_dec_uvarint(d);
    size_t zlen = bdb_dec_left(d);
    const uint8_t *z = d->err ? NULL : bdb_dec_bytes(d, zlen);
    if (!z || raw > FLEET_MAX_BODY || ZSTD_getFrameContentSize(z, zlen) != raw)
        return BDB_ERR_CORRUPT;
    uint8_t *b = fl_realloc(NULL, raw);
    if (!b)
        return BDB_ERR_NOMEM;
    size_t got = ZSTD_decompress(b, raw, z, zlen);
    if (ZSTD_isError(got) || got != raw) {
        free(b);
        return BDB_ERR_CORRUPT;
    }
    *body = b;
    *blen = raw;
    return BDB_OK;
}

/* Parses a whole file; takes ownership of data on success. */
int fl_parse(uint8_t *data, size_t len, ffile *f, const char **why)
{
    *why = "truncated";
    if (len < 8 + 4 + 4 || memcmp(data, FLEET_MAGIC, 8) != 0) {
        *why = "bad magic";
        return BDB_ERR_CORRUPT;
    }
    if (bdb_get_u32le(data + len - 4) != (uint32_t)crc32(0L, data, (uInt)(len - 4))) {
        *why = "checksum mismatch";
        return BDB_ERR_CORRUPT;
    }
    bdb_dec d;
    int rc = BDB_ERR_CORRUPT;
    uint8_t *body = NULL; /* version 2: the records, decompressed */
    bdb_dec_init(&d, data + 8, len - 8 - 4);
    uint32_t version = bdb_dec_u32le(&d);
    if (version != 1 && version != FLEET_VERSION) {
        *why = "unknown version";
        return BDB_ERR_CORRUPT;
    }
    f->ri = idx_of((enum bdb_res)bdb_dec_u8(&d));
    f->start = bdb_dec_varint(&d);
    f->end = bdb_dec_varint(&d);
    f->seq = bdb_dec_u64le(&d);
    f->wal_upto = bdb_dec_u64le(&d);
    uint64_t nin = bdb_dec_uvarint(&d);
    if (d.err || f->ri < 0 || f->end <= f->start || nin > bdb_dec_left(&d)) {
        *why = "bad header";
        return BDB_ERR_CORRUPT;
    }
    f->inputs = fl_realloc(NULL, (nin + 1) * sizeof *f->inputs);
    if (!f->inputs)
        return BDB_ERR_NOMEM;
    f->ninputs = nin;
    for (uint64_t i = 0; i < nin; i++)
        f->inputs[i] = bdb_dec_uvarint(&d);
    uint64_t nrec = bdb_dec_uvarint(&d);
    if (d.err) {
        *why = "bad header";
        goto bad;
    }
    if (version == 2) {
        size_t blen = 0;
        rc = body_inflate(&d, &body, &blen);
        if (rc != BDB_OK) {
            *why = "bad compressed records";
            goto bad;
        }
        rc = BDB_ERR_CORRUPT;
        bdb_dec_init(&d, body, blen);
    }
    if (nrec > bdb_dec_left(&d)) {
        *why = "bad header";
        goto bad;
    }
    f->recs = fl_realloc(NULL, (nrec + 1) * sizeof *f->recs);
    if (!f->recs) {
        rc = BDB_ERR_NOMEM;
        goto bad;
    }
    for (uint64_t i = 0; i < nrec; i++) {
        size_t tl = 0, ml = 0;
        const char *tn = bdb_dec_str(&d, &tl), *mn = bdb_dec_str(&d, &ml);
        uint64_t rl = bdb_dec_uvarint(&d);
        const uint8_t *p = d.err || rl > bdb_dec_left(&d) ? NULL : bdb_dec_bytes(&d, rl);
        if (!p) {
            *why = "bad record";
            goto bad;
        }
        frec *r = &f->recs[f->nrec];
        r->tenant = fl_strndup(tn, tl);
        r->metric = fl_strndup(mn, ml);
        r->p = p;
        r->len = rl;
        f->nrec++;
        if (!r->tenant || !r->metric) {
            rc = BDB_ERR_NOMEM;
            goto bad;
        }
        if (i &&
            fl_rec_cmp(f->recs[i - 1].tenant, f->recs[i - 1].metric, r->tenant, r->metric) >= 0) {
            *why = "records out of order";
            goto bad;
        }
    }
    if (bdb_dec_left(&d) != 0) {
        *why = "trailing bytes";
        goto bad;
    }
    if (body) { /* the records point into body; the file's bytes are done with */
        free(data);
        data = body;
    }
    f->data = data;
    f->size = len;
    return BDB_OK;
bad:
    free(body);
    for (size_t i = 0; i < f->nrec; i++) {
        free(f->recs[i].tenant);
        free(f->recs[i].metric);
    }
    free(f->recs);
    free(f->inputs);
    f->recs = NULL;
    f->inputs = NULL;
    f->nrec = f->ninputs = 0;
    if (rc == BDB_ERR_NOMEM)
        *why = "out of memory";
    return rc;
}

const frec *fl_find(const ffile *f, const char *tn, const char *mn)
{
    size_t lo = 0, hi = f->nrec;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = fl_rec_cmp(f->recs[mid].tenant, f->recs[mid].metric, tn, mn);
        if (c == 0)
            return &f->recs[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* <data>/fleet/dirty: magic "BDBFLD01", uvarint n, n x (str tenant, str metric, u8 res,
 * varint start), u32 CRC-32 of all before; written whole, atomically. */
int fl_dirty_save(fstate *t)
{
    bdb_buf b;
    bdb_buf_init_checked(&b);
    bdb_buf_append(&b, "BDBFLD01", 8);
    bdb_buf_put_uvarint(&b, t->ndirty);
    for (size_t i = 0; i < t->ndirty; i++) {
        bdb_buf_put_str(&b, t->dirty[i].tenant, strlen(t->dirty[i].tenant));
        bdb_buf_put_str(&b, t->dirty[i].metric, strlen(t->dirty[i].metric));
        bdb_buf_putc(&b, (uint8_t)res_of(t->dirty[i].ri));
        bdb_buf_put_varint(&b, t->dirty[i].start);
    }
    bdb_buf_put_u32le(&b, (uint32_t)crc32(0L, b.data, (uInt)b.len));
    int rc =
        b.oom ? BDB_ERR_NOMEM : bdb_vfs_write_atomic(t->db->vfs, t->dir, "dirty", b.data, b.len);
    bdb_buf_free(&b);
    return rc;
}

int fl_dirty_load(fstate *t)
{
    int rc = BDB_OK;
    char path[BDB_PATH_BUF];
    snprintf(path, sizeof path, "%s/dirty", t->dir);
    void *data = NULL;
    size_t len = 0;
    int rrc = bdb_vfs_read_all(t->db->vfs, path, &data, &len);
    if (rrc == BDB_ERR_NOMEM)
        return rrc;
    if (rrc != BDB_OK)
        return BDB_OK; /* none yet */
    const uint8_t *p = data;
    int ok = len >= 12 && !memcmp(p, "BDBFLD01", 8) &&
             bdb_get_u32le(p + len - 4) == (uint32_t)crc32(0L, p, (uInt)(len - 4));
    bdb_dec d;
    bdb_dec_init(&d, p + 8, ok ? len - 12 : 0);
    uint64_t n = ok ? bdb_dec_uvarint(&d) : 0;
    if (n > bdb_dec_left(&d))
        ok = 0;
    for (uint64_t i = 0; ok && i < n; i++) {
        size_t tl = 0, ml = 0;
        const char *tn = bdb_dec_str(&d, &tl), *mn = bdb_dec_str(&d, &ml);
        int ri = idx_of((enum bdb_res)bdb_dec_u8(&d));
        int64_t start = bdb_dec_varint(&d);
        if (d.err || ri < 0) {
            ok = 0;
            break;
        }
        fdirty *nd = fl_realloc(t->dirty, (t->ndirty + 1) * sizeof *t->dirty);
        if (nd)
            t->dirty = nd;
        fdirty x = {nd ? fl_strndup(tn, tl) : NULL, nd ? fl_strndup(mn, ml) : NULL, ri, start};
        if (!x.tenant || !x.metric) {
            free(x.tenant);
            free(x.metric);
            rc = BDB_ERR_NOMEM;
            break;
        }
        t->dirty[t->ndirty++] = x;
    }
    if (rc != BDB_OK) /* the caller fails and frees the state; loaded again next time */
        BDB_ERROR("fleet: out of memory loading %s", path);
    else if (!ok)
        BDB_ERROR("fleet: %s is damaged; pre-computed fleet windows that late data changed "
                  "may be off (GET /api/v1/fleet/query is unaffected)",
                  path);
    free(data);
    return rc;
}

static char *file_name(uint64_t seq)
{
    char *p = fl_realloc(NULL, 32);
    if (p)
        snprintf(p, 32, "%016" PRIu64 ".fleet", seq);
    return p;
}

/* Encodes, writes durably and parses one file; *out is its in-memory form. */
int fl_write(fstate *t, int ri, int64_t start, uint64_t seq, uint64_t upto, const uint64_t *in,
             size_t nin, size_t nrec, const bdb_buf *body, ffile **out)
{
    bdb_buf b;
    bdb_buf_init_checked(&b);
    int64_t span = bdb_tier_file_span(res_of(ri));
    file_encode(&b, ri, start, start + span, seq, upto, in, nin, nrec, body);
    char *name = file_name(seq);
    /* every allocation before the file exists, so a failure leaves no file behind */
    ffile *f = bdb_calloc(1, sizeof *f);
    char *path = name ? bdb_path_join(t->sub[ri], name, NULL) : NULL;
    int rc = b.oom || body->oom || !f || !path ? BDB_ERR_NOMEM : BDB_OK;
    if (rc == BDB_OK)
        rc = bdb_vfs_write_atomic(t->db->vfs, t->sub[ri], name, b.data, b.len);
    if (rc == BDB_OK) {
        const char *why;
        rc = fl_parse(b.data, b.len, f, &why);
        if (rc == BDB_OK) {
            b.data = NULL; /* owned by f now */
            f->path = path;
            path = NULL;
        } else { /* parsing what we just encoded fails only for lack of memory */
            bdb_vfs_unlink(t->db->vfs, path);
        }
    }
    if (rc != BDB_OK) {
        free(f);
        f = NULL;
    }
    free(path);
    free(name);
    bdb_buf_free(&b);
    *out = f;
    return rc;
}
