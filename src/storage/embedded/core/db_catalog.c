/* db_catalog: tenants, devices and series in memory, and the catalog file that
 * persists them at every flush.
 *
 * Catalog file (written with bdb_vfs_write_atomic, so it is either the old or the new
 * one after a crash):
 *   "BDBCAT01" | u32 version=2 | u64 wal_upto | u64 next_seq | uvarint ndevices |
 *   ndevices x device | u32 crc32 of all preceding bytes
 *   device = str tenant | str name | varint first_ts | varint last_ts | uvarint samples |
 *            u8 has_state [str state | varint state_ts] | uvarint ntags (str k, str v)* |
 *            varint pinned_bucket | uvarint nhist (varint from, varint size)* |
 *            uvarint nmetrics (str metric)*
 * (str = uvarint length + bytes; varint = zigzag LEB128.)
 * Image version 2 appends to each device its hot-partition part (db_hot.c: promotion
 * cap, sub-bucket history, events per partition); version 3 (written now) then the
 * rate learner's state (u8 class | u8 pending | u8 pending_n | varint window start |
 * uvarint count), so a device keeps its reporting class across a restart. Versions 1
 * and 2 are still read: version 1 with no sub-buckets and no counts, both with the
 * learner starting over (class unknown).
 *
 * On disk that image is wrapped and compressed (version 2):
 *   "BDBCAT02" | u32 version=2 | u64 image length | zstd frame of the image |
 *   u32 crc32 of all preceding bytes
 * Device names, tags and metric names repeat across a fleet, so zstd shrinks the
 * catalog several times over. The image is built under the flush lock and compressed
 * outside it, so writers never wait for compression. Version 1 files (the bare image)
 * are still read. */
#include "storage/embedded/core/db_consumer.h"
#include "storage/embedded/core/db_int.h"
#include "common/alloc.h"
#include "common/path.h"
#include "storage/embedded/sink/db_cat_sink.h"

#include "bucketdb/bdb.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#define CAT_MAGIC "BDBCAT01"
#define CAT_VERSION 4 /* image version written; 1 to 3 are still read */
#define CAT2_MAGIC "BDBCAT02"
#define CAT2_VERSION 2
#define CAT_MAX_IMAGE (UINT64_C(8) << 30) /* refuse absurd lengths from a damaged header */

static char *xstrndup(const char *s, size_t n)
{
    char *p = bdb_malloc(n + 1);
    if (!p)
        return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* First and largest block of a tenant's arena: a tenant of one device takes 1 KiB,
 * a fleet's blocks waste at most 64 KiB. */
#define ARENA_FIRST 1024
#define ARENA_MAX 65536

/* n zeroed bytes, 8-aligned, from t's arena; NULL when out of memory. */
static void *arena_alloc(tenant *t, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    void *p = NULL;
    pthread_mutex_lock(&t->arena_mu);
    struct cat_block *b = t->arena;
    if (!b || b->size - b->used < n) {
        size_t sz = b ? b->size * 2 : ARENA_FIRST;
        if (sz > ARENA_MAX)
            sz = ARENA_MAX;
        if (sz < n)
            sz = n;
        struct cat_block *nb = bdb_malloc(sizeof *nb + sz);
        if (!nb)
            goto out;
        nb->next = b;
        nb->size = sz;
        nb->used = 0;
        t->arena = b = nb;
    }
    p = b->data + b->used;
    b->used += n;
out:
    pthread_mutex_unlock(&t->arena_mu);
    if (p)
        memset(p, 0, n);
    return p;
}

static void arena_free(tenant *t)
{
    for (struct cat_block *b = t->arena, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    t->arena = NULL;
}

/* Caller holds cat_lock exclusively when create is set. Out of memory: NULL, and
 * nothing was added (so for every create below). */
tenant *cat_tenant(bdb_db *db, const char *name, size_t len, int create)
{
    tenant *t = bdb_map_get(db->tenants, name, len);
    if (t || !create)
        return t;
    t = bdb_calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->name = xstrndup(name, len);
    t->devices = bdb_map_new_borrowed(); /* keyed by the devices' names in the arena */
    pthread_mutex_init(&t->arena_mu, NULL);
    if (!t->name || !t->devices || bdb_map_set(db->tenants, name, len, t) != BDB_OK) {
        bdb_map_free(t->devices);
        pthread_mutex_destroy(&t->arena_mu);
        free(t->name);
        free(t);
        return NULL;
    }
    t->id = atomic_fetch_add(&db->tenant_ids, 1) + 1;
    atomic_fetch_add(&db->tenant_count, 1);
    return t;
}

device *cat_device(bdb_db *db, tenant *t, const char *name, size_t len, int create)
{
    uint64_t h = bdb_hash(name, len);
    device *d = bdb_map_get_h(t->devices, name, len, h);
    if (d || !create)
        return d;
    /* From the arena (a device lives as long as its tenant), its name behind it. Out
     * of memory below leaves these bytes unused in the arena until the tenant goes. */
    size_t dsz = (sizeof *d + db->cons.dev_total + 7) & ~(size_t)7;
    d = arena_alloc(t, dsz + len + 1);
    if (!d)
        return NULL;
    d->tenant = t;
    d->name = (char *)d + dsz;
    memcpy(d->name, name, len);
    d->nlen = len;
    d->stripe = (uint32_t)(bdb_hash(t->name, strlen(t->name)) ^ h) % DB_STRIPES;
    d->first_ts = INT64_MAX;
    d->last_ts = INT64_MIN;
    d->state_ts = INT64_MIN;
    if (bdb_bucket_history_init(&d->hist, bdb_bucket_for_class(BDB_FREQ_UNKNOWN)) != BDB_OK ||
        bdb_map_set_h(t->devices, d->name, len, h, d) != BDB_OK) {
        bdb_bucket_history_free(&d->hist);
        return NULL;
    }
    db_consumers_dev_init(db, d, 0);
    atomic_fetch_add(&db->device_count, 1);
    atomic_fetch_add_explicit(&t->gen, 1, memory_order_release);
    return d;
}

int cat_series_room(device *d, uint32_t n)
{
    if (d->nseries || d->cap_series >= n)
        return BDB_OK;
    series **a = bdb_realloc(d->series, n * sizeof *a);
    if (!a)
        return BDB_ERR_NOMEM;
    d->series = a;
    d->cap_series = n;
    return BDB_OK;
}

/* Caller holds the device's stripe lock. Devices report a handful of metrics, so a
 * linear scan beats hashing. */
series *cat_series(bdb_db *db, device *d, const char *metric, size_t mlen, int create)
{
    uint32_t ns = d->nseries, h = atomic_load_explicit(&d->series_hint, memory_order_relaxed);
    if (h >= ns)
        h = 0;
    for (uint32_t k = 0; k < ns; k++) {
        uint32_t i = h + k < ns ? h + k : h + k - ns;
        series *s = d->series[i];
        if (s->mlen == mlen && memcmp(s->metric, metric, mlen) == 0) {
            atomic_store_explicit(&d->series_hint, i + 1, memory_order_relaxed);
            return s;
        }
    }
    if (!create || mlen > DB_MAX_METRIC_LEN) /* bdb_db_write refuses such names */
        return NULL;
    if (d->nseries == d->cap_series) {
        /* Grown by half: a device's metrics arrive in its first reports and then stay,
         * so doubling would leave up to half the array unused for the device's life. */
        uint32_t cap = d->cap_series ? d->cap_series + (d->cap_series + 1) / 2 : 4;
        series **n = bdb_realloc(d->series, cap * sizeof *n);
        if (!n)
            return NULL;
        d->series = n;
        d->cap_series = cap;
    }
    series *s = arena_alloc(d->tenant, offsetof(series, metric) + mlen + 1);
    if (!s)
        return NULL;
    s->dev = d;
    memcpy(s->metric, metric, mlen);
    s->mlen = (uint16_t)mlen;
    /* Keep the array sorted by name so listings and flushes see metric order. */
    uint32_t i = d->nseries;
    while (i > 0) {
        series *p = d->series[i - 1];
        size_t m = p->mlen < mlen ? p->mlen : mlen;
        int c = memcmp(p->metric, metric, m);
        if (c < 0 || (c == 0 && p->mlen < mlen))
            break;
        d->series[i] = p;
        i--;
    }
    d->series[i] = s;
    d->nseries++;
    atomic_fetch_add(&db->series_count, 1);
    atomic_fetch_add_explicit(&d->tenant->gen, 1, memory_order_release);
    return s;
}

int cat_tags_equal(const device *d, const bdb_kv *tags, uint32_t n)
{
    if (d->ntags != n)
        return 0;
    for (uint32_t i = 0; i < n; i++) {
        const bdb_kv *a = &d->tags[i], *b = &tags[i];
        if (a->klen != b->klen || a->vlen != b->vlen || memcmp(a->key, b->key, a->klen) ||
            memcmp(a->val, b->val, a->vlen))
            return 0;
    }
    return 1;
}

static void free_tags(device *d)
{
    for (uint32_t i = 0; i < d->ntags; i++) {
        free((char *)d->tags[i].key);
        free((char *)d->tags[i].val);
    }
    free(d->tags);
    d->tags = NULL;
    d->ntags = 0;
}

int cat_tags_copy(const bdb_kv *tags, uint32_t n, bdb_kv **out)
{
    *out = NULL;
    if (!n)
        return BDB_OK;
    bdb_kv *v = bdb_calloc(n, sizeof *v);
    if (!v)
        return BDB_ERR_NOMEM;
    for (uint32_t i = 0; i < n; i++) {
        v[i] = (bdb_kv){xstrndup(tags[i].key, tags[i].klen), tags[i].klen,
                        xstrndup(tags[i].val, tags[i].vlen), tags[i].vlen};
        if (!v[i].key || !v[i].val) {
            cat_tags_free(v, i + 1);
            return BDB_ERR_NOMEM;
        }
    }
    *out = v;
    return BDB_OK;
}

void cat_tags_free(bdb_kv *v, uint32_t n)
{
    for (uint32_t i = 0; v && i < n; i++) {
        free((char *)v[i].key);
        free((char *)v[i].val);
    }
    free(v);
}

void cat_tags_take(device *d, bdb_kv *tags, uint32_t n)
{
    free_tags(d);
    d->tags = tags;
    d->ntags = tags ? n : 0;
    atomic_fetch_add_explicit(&d->tenant->gen, 1, memory_order_release);
}

int cat_set_tags(device *d, const bdb_kv *tags, uint32_t n)
{
    bdb_kv *v;
    if (cat_tags_copy(tags, n, &v) != BDB_OK)
        return BDB_ERR_NOMEM; /* the old tags stay */
    cat_tags_take(d, v, n);
    return BDB_OK;
}

void cat_state_take(device *d, char *s, int64_t ts)
{
    /* Never let an older event overwrite the current state. */
    if (ts < d->state_ts) {
        free(s);
        return;
    }
    free(d->state);
    d->state = s;
    d->state_ts = ts;
}

int cat_set_state(device *d, const char *s, size_t n, int64_t ts)
{
    if (ts < d->state_ts)
        return BDB_OK;
    char *c = xstrndup(s, n);
    if (!c)
        return BDB_ERR_NOMEM; /* the old state stays */
    cat_state_take(d, c, ts);
    return BDB_OK;
}

struct each_ctx {
    void (*cb)(void *, device *);
    void *ctx;
};

void cat_each_device(bdb_db *db, void (*cb)(void *ctx, device *d), void *ctx)
{
    size_t tp = 0, tk;
    const void *key;
    void *tv;
    while (bdb_map_next(db->tenants, &tp, &key, &tk, &tv)) {
        tenant *t = tv;
        size_t dp = 0, dk;
        void *dv;
        while (bdb_map_next(t->devices, &dp, &key, &dk, &dv))
            cb(ctx, dv);
    }
}

static void enc_device(void *ctx, device *d)
{
    bdb_buf *b = ctx;
    bdb_buf_put_str(b, d->tenant->name, strlen(d->tenant->name));
    bdb_buf_put_str(b, d->name, d->nlen);
    bdb_buf_put_varint(b, d->first_ts);
    bdb_buf_put_varint(b, d->last_ts);
    bdb_buf_put_uvarint(b, d->samples);
    bdb_buf_putc(b, d->state != NULL);
    if (d->state) {
        bdb_buf_put_str(b, d->state, strlen(d->state));
        bdb_buf_put_varint(b, d->state_ts);
    }
    bdb_buf_put_uvarint(b, d->ntags);
    for (uint32_t i = 0; i < d->ntags; i++) {
        bdb_buf_put_str(b, d->tags[i].key, d->tags[i].klen);
        bdb_buf_put_str(b, d->tags[i].val, d->tags[i].vlen);
    }
    bdb_buf_put_varint(b, d->pinned);
    bdb_buf_put_uvarint(b, d->hist.n);
    for (uint32_t i = 0; i < d->hist.n; i++) {
        bdb_buf_put_varint(b, d->hist.e[i].from_ms);
        bdb_buf_put_varint(b, d->hist.e[i].size_ms);
    }
    bdb_buf_put_uvarint(b, d->nseries);
    for (uint32_t i = 0; i < d->nseries; i++)
        bdb_buf_put_str(b, d->series[i]->metric, d->series[i]->mlen);
    db_hot_encode(d, b);
    /* version 3: the rate learner */
    bdb_buf_putc(b, d->learner.cls);
    bdb_buf_putc(b, d->learner.pending);
    bdb_buf_putc(b, d->learner.pending_n);
    bdb_buf_put_varint(b, d->learner.win_start);
    bdb_buf_put_uvarint(b, d->learner.count);
}

/* The rate learner of an image of version 3: classes within the enum, a count that
 * fits; anything else is a malformed catalog. */
static void dec_learner(device *dv, bdb_dec *d)
{
    uint8_t cls = bdb_dec_u8(d), pending = bdb_dec_u8(d), pending_n = bdb_dec_u8(d);
    int64_t win = bdb_dec_varint(d);
    uint64_t count = bdb_dec_uvarint(d);
    if (d->err || cls > BDB_FREQ_HIGH || pending > BDB_FREQ_HIGH || count > UINT32_MAX) {
        d->err = 1;
        return;
    }
    dv->learner = (bdb_rate_learner){win, (uint32_t)count, cls, pending, pending_n};
}

struct enc_ctx {
    bdb_db *db;
    bdb_buf *b;
};

static void enc_device_locked(void *ctx, device *d)
{
    struct enc_ctx *e = ctx;
    pthread_mutex_lock(dev_lock(e->db, d));
    enc_device(e->b, d);
    pthread_mutex_unlock(dev_lock(e->db, d));
}

/* Caller holds flush_lock exclusively (so the snapshot matches the WAL cut) and
 * cat_lock shared. */
void cat_encode(bdb_db *db, bdb_buf *out)
{
    bdb_buf_reset(out);
    bdb_buf_append(out, CAT_MAGIC, 8);
    bdb_buf_put_u32le(out, CAT_VERSION);
    bdb_buf_put_u64le(out, db->wal_upto);
    bdb_buf_put_u64le(out, db->next_seq);
    bdb_buf_put_uvarint(out, atomic_load(&db->device_count));
    struct enc_ctx e = {db, out};
    cat_each_device(db, enc_device_locked, &e);
    cat_inherited_encode(db, out); /* version 4 */
    bdb_buf_put_u32le(out, (uint32_t)crc32(0, out->data, (uInt)out->len));
}

int cat_save(bdb_db *db, size_t image_len, const bdb_buf *frame)
{
    uint8_t head[8 + 4 + 8];
    memcpy(head, CAT2_MAGIC, 8);
    for (int i = 0; i < 4; i++)
        head[8 + i] = (uint8_t)(CAT2_VERSION >> (8 * i));
    for (int i = 0; i < 8; i++)
        head[12 + i] = (uint8_t)((uint64_t)image_len >> (8 * i));
    return bdb_vfs_write_framed(db->vfs, db->dir, "catalog", head, sizeof head, frame->data,
                                frame->len);
}

/* Unwraps a version 2 file into its image (malloc'd, replaces *data). */
static int cat_unwrap(const char *path, void **data, size_t *len)
{
    const uint8_t *p = *data;
    if (*len < 8 + 4 + 8 + 4)
        return BDB_ERR_CORRUPT;
    uint32_t want = bdb_get_u32le(p + *len - 4);
    if ((uint32_t)crc32(0, p, (uInt)(*len - 4)) != want) {
        BDB_ERROR("catalog %s: checksum mismatch", path);
        return BDB_ERR_CORRUPT;
    }
    if (bdb_get_u32le(p + 8) != CAT2_VERSION) {
        BDB_ERROR("catalog %s: unsupported version %u", path, bdb_get_u32le(p + 8));
        return BDB_ERR_CORRUPT;
    }
    uint64_t raw = bdb_get_u64le(p + 12);
    size_t zlen = *len - 8 - 4 - 8 - 4;
    unsigned long long fcs = ZSTD_getFrameContentSize(p + 20, zlen);
    if (raw > CAT_MAX_IMAGE || fcs != raw) {
        BDB_ERROR("catalog %s: bad image length", path);
        return BDB_ERR_CORRUPT;
    }
    void *img = bdb_malloc(raw ? raw : 1);
    if (!img)
        return BDB_ERR_NOMEM;
    size_t got = ZSTD_decompress(img, raw, p + 20, zlen);
    if (ZSTD_isError(got) || got != raw) {
        BDB_ERROR("catalog %s: cannot decompress", path);
        free(img);
        return BDB_ERR_CORRUPT;
    }
    free(*data);
    *data = img;
    *len = raw;
    return BDB_OK;
}

int cat_load(bdb_db *db)
{
    char path[BDB_PATH_BUF];
    snprintf(path, sizeof path, "%s/catalog", db->dir);
    if (!bdb_vfs_exists(db->vfs, path))
        return BDB_OK;
    void *data;
    size_t len;
    int rc = bdb_vfs_read_all(db->vfs, path, &data, &len);
    if (rc != BDB_OK)
        return rc;
    if (len >= 8 && memcmp(data, CAT2_MAGIC, 8) == 0 &&
        (rc = cat_unwrap(path, &data, &len)) != BDB_OK)
        goto out;
    rc = BDB_ERR_CORRUPT;
    if (len < 8 + 4 + 8 + 8 + 1 + 4 || memcmp(data, CAT_MAGIC, 8) != 0) {
        BDB_ERROR("catalog %s: bad magic or too short (%zu bytes)", path, len);
        goto out;
    }
    uint32_t want = bdb_get_u32le((const uint8_t *)data + len - 4);
    if ((uint32_t)crc32(0, data, (uInt)(len - 4)) != want) {
        BDB_ERROR("catalog %s: checksum mismatch", path);
        goto out;
    }
    bdb_dec d;
    bdb_dec_init(&d, data, len - 4);
    bdb_dec_bytes(&d, 8);
    uint32_t ver = bdb_dec_u32le(&d);
    if (ver < 1 || ver > CAT_VERSION) {
        BDB_ERROR("catalog %s: unsupported version %u", path, ver);
        goto out;
    }
    db->wal_upto = bdb_dec_u64le(&d);
    db->next_seq = bdb_dec_u64le(&d);
    uint64_t n = bdb_dec_uvarint(&d);
    int nomem = 0; /* out of memory: the open fails with BDB_ERR_NOMEM, not CORRUPT */
    for (uint64_t i = 0; i < n && !d.err && !nomem; i++) {
        size_t tl, nl;
        const char *tn = bdb_dec_str(&d, &tl);
        const char *dn = bdb_dec_str(&d, &nl);
        if (d.err)
            break;
        tenant *t = cat_tenant(db, tn, tl, 1);
        device *dv = t ? cat_device(db, t, dn, nl, 1) : NULL;
        if (!dv) {
            nomem = 1;
            break;
        }
        dv->first_ts = bdb_dec_varint(&d);
        dv->last_ts = bdb_dec_varint(&d);
        db_consumers_dev_init(db, dv, 1);
        dv->samples = bdb_dec_uvarint(&d);
        if (bdb_dec_u8(&d)) {
            size_t sl;
            const char *s = bdb_dec_str(&d, &sl);
            int64_t sts = bdb_dec_varint(&d);
            if (!d.err && cat_set_state(dv, s, sl, sts) != BDB_OK)
                nomem = 1;
        }
        uint64_t nt = bdb_dec_uvarint(&d);
        if (nt > 1u << 16) {
            d.err = 1;
            break;
        }
        bdb_kv *tags = nt ? bdb_calloc(nt, sizeof *tags) : NULL;
        if (nt && !tags) {
            nomem = 1;
            break;
        }
        for (uint64_t k = 0; k < nt && !d.err; k++) {
            tags[k].key = bdb_dec_str(&d, &tags[k].klen);
            tags[k].val = bdb_dec_str(&d, &tags[k].vlen);
        }
        if (!d.err && cat_set_tags(dv, tags, (uint32_t)nt) != BDB_OK)
            nomem = 1;
        free(tags);
        dv->pinned = bdb_dec_varint(&d);
        uint64_t nh = bdb_dec_uvarint(&d);
        if (nh == 0 || nh > 1u << 20) {
            d.err = 1;
            break;
        }
        dv->hist.n = 0;
        for (uint64_t k = 0; k < nh && !d.err; k++) {
            int64_t from = bdb_dec_varint(&d), size = bdb_dec_varint(&d);
            if (d.err || !bdb_bucket_history_next_ok(&dv->hist, from, size)) {
                d.err = 1;
                break;
            }
            if (bdb_bucket_history_push(&dv->hist, from, size) != BDB_OK)
                nomem = 1;
        }
        uint64_t nm = bdb_dec_uvarint(&d);
        if (!d.err && nm <= bdb_dec_left(&d) && cat_series_room(dv, (uint32_t)nm) != BDB_OK)
            nomem = 1;
        for (uint64_t k = 0; k < nm && !d.err && !nomem; k++) {
            size_t ml;
            const char *m = bdb_dec_str(&d, &ml);
            if (!d.err && !cat_series(db, dv, m, ml, 1))
                nomem = 1;
        }
        int hrc = ver >= 2 && !d.err && !nomem ? db_hot_decode(dv, &d) : BDB_OK;
        if (hrc == BDB_ERR_NOMEM)
            nomem = 1;
        else if (hrc != BDB_OK)
            d.err = 1;
        if (ver >= 3 && !d.err && !nomem)
            dec_learner(dv, &d);
    }
    /* version 4: the inherited horizons (db_cat_sink.h) */
    uint64_t nih = ver >= 4 && !d.err && !nomem ? bdb_dec_uvarint(&d) : 0;
    for (uint64_t i = 0; i < nih && !d.err && !nomem; i++) {
        size_t tl, nl;
        const char *tn = bdb_dec_str(&d, &tl);
        const char *dn = bdb_dec_str(&d, &nl);
        int64_t last = bdb_dec_varint(&d);
        if (!d.err && cat_inherited_set(db, tn, tl, dn, nl, last) != BDB_OK)
            nomem = 1;
    }
    if (nomem) {
        rc = BDB_ERR_NOMEM;
        goto out;
    }
    if (d.err) {
        BDB_ERROR("catalog %s: truncated or malformed content", path);
        goto out;
    }
    rc = BDB_OK;
out:
    free(data);
    return rc;
}

/* Frees t, its devices, their series and head chunks, and takes them out of the
 * counters. t is no longer in db->tenants. */
void cat_tenant_free(bdb_db *db, tenant *t)
{
    size_t dp = 0, dk;
    const void *key;
    void *dv;
    uint64_t ndev = 0, nser = 0;
    while (bdb_map_next(t->devices, &dp, &key, &dk, &dv)) {
        device *d = dv;
        for (uint32_t i = 0; i < d->nseries; i++) {
            head_free_chunks(db, d->series[i]->active);
            head_free_chunks(db, d->series[i]->frozen);
        }
        nser += d->nseries;
        ndev++;
        free(d->series);
        free_tags(d);
        free(d->state);
        bdb_bucket_history_free(&d->hist);
        db_hot_free(d);
    }
    bdb_map_free(t->devices);
    arena_free(t);
    pthread_mutex_destroy(&t->arena_mu);
    free(t->name);
    free(t);
    atomic_fetch_sub(&db->device_count, ndev);
    atomic_fetch_sub(&db->series_count, nser);
    atomic_fetch_sub(&db->tenant_count, 1);
}

void cat_free(bdb_db *db)
{
    if (!db->tenants) /* an open that ran out of memory */
        return;
    size_t tp = 0, tk;
    const void *key;
    void *tv;
    while (bdb_map_next(db->tenants, &tp, &key, &tk, &tv))
        cat_tenant_free(db, tv);
    bdb_map_free(db->tenants);
    db->tenants = NULL;
}
