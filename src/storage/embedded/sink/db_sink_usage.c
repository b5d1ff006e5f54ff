/* db_sink_usage: confirmed sink bytes per (tenant, expiry day); see the header. */
#include "storage/embedded/sink/db_sink_usage.h"
#include "storage/sink.h"
#include "storage/embedded/core/db_consumer.h"
#include "storage/embedded/core/db_int.h"
#include "common/alloc.h"
#include "common/path.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/map.h"
#include "common/timeutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define SKU_MAGIC "BDBSKU01"
#define SKU_VERSION 1
#define SKU_HEADER (8 + 4 + 8 + 8 + 8)
#define DAY_MS INT64_C(86400000)

/* One tenant's days, sorted by day (a handful: one per day of its TTL, plus forever). */
struct tdays {
    int64_t *day;
    uint64_t *bytes;
    size_t n, cap;
};

struct bdb_sku {
    bdb_map *tenants; /* name -> struct tdays */
};

bdb_sku *bdb_sku_new(void)
{
    bdb_sku *t = bdb_calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->tenants = bdb_map_new();
    if (!t->tenants) {
        free(t);
        return NULL;
    }
    return t;
}

void bdb_sku_clear(bdb_sku *t)
{
    size_t pos = 0, kl;
    const void *k;
    void *v;
    while (bdb_map_next(t->tenants, &pos, &k, &kl, &v)) {
        struct tdays *d = v;
        free(d->day);
        free(d->bytes);
        d->n = d->cap = 0;
        d->day = NULL;
        d->bytes = NULL;
    }
}

void bdb_sku_free(bdb_sku *t)
{
    if (!t)
        return;
    bdb_sku_clear(t);
    size_t pos = 0, kl;
    const void *k;
    void *v;
    while (bdb_map_next(t->tenants, &pos, &k, &kl, &v))
        free(v);
    bdb_map_free(t->tenants);
    free(t);
}

uint64_t bdb_sku_row_bytes(size_t tenant_len, size_t device_len, size_t metric_len)
{
    return (uint64_t)tenant_len + device_len + metric_len + BDB_SKU_ROW_FIXED;
}

int64_t bdb_sku_day(int64_t ts, int64_t ttl_ms)
{
    if (ttl_ms <= 0 || ts > INT64_MAX - ttl_ms)
        return BDB_SKU_FOREVER;
    int64_t e = ts + ttl_ms;
    return e >= 0 ? e / DAY_MS : -((-e + DAY_MS - 1) / DAY_MS); /* floor */
}

/* A day is over once its last millisecond has passed. */
static int day_live(int64_t day, int64_t now_ms)
{
    if (day == BDB_SKU_FOREVER)
        return 1;
    if (day >= INT64_MAX / DAY_MS - 1)
        return 1;
    return (day + 1) * DAY_MS > now_ms;
}

int bdb_sku_add(bdb_sku *t, const char *tn, size_t tlen, int64_t day, uint64_t bytes)
{
    struct tdays *d = bdb_map_get(t->tenants, tn, tlen);
    if (!d) {
        d = bdb_calloc(1, sizeof *d);
        if (!d)
            return BDB_ERR_NOMEM;
        if (bdb_map_set(t->tenants, tn, tlen, d) != BDB_OK) {
            free(d);
            return BDB_ERR_NOMEM;
        }
    }
    size_t i = 0;
    while (i < d->n && d->day[i] < day)
        i++;
    if (i < d->n && d->day[i] == day) {
        d->bytes[i] = bytes > UINT64_MAX - d->bytes[i] ? UINT64_MAX : d->bytes[i] + bytes;
        return BDB_OK;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        int64_t *nd = bdb_realloc(d->day, cap * sizeof *nd);
        if (!nd)
            return BDB_ERR_NOMEM;
        d->day = nd;
        uint64_t *nb = bdb_realloc(d->bytes, cap * sizeof *nb);
        if (!nb)
            return BDB_ERR_NOMEM; /* day grew only: harmless, n unchanged */
        d->bytes = nb;
        d->cap = cap;
    }
    memmove(d->day + i + 1, d->day + i, (d->n - i) * sizeof *d->day);
    memmove(d->bytes + i + 1, d->bytes + i, (d->n - i) * sizeof *d->bytes);
    d->day[i] = day;
    d->bytes[i] = bytes;
    d->n++;
    return BDB_OK;
}

int bdb_sku_merge(bdb_sku *dst, const bdb_sku *src, int sign)
{
    size_t pos = 0, kl;
    const void *k;
    void *v;
    while (bdb_map_next(src->tenants, &pos, &k, &kl, &v)) {
        const struct tdays *s = v;
        if (sign > 0) {
            for (size_t i = 0; i < s->n; i++)
                if (bdb_sku_add(dst, k, kl, s->day[i], s->bytes[i]) != BDB_OK)
                    return BDB_ERR_NOMEM;
            continue;
        }
        struct tdays *d = bdb_map_get(dst->tenants, k, kl);
        for (size_t i = 0; d && i < s->n; i++)
            for (size_t j = 0; j < d->n; j++)
                if (d->day[j] == s->day[i])
                    d->bytes[j] = d->bytes[j] > s->bytes[i] ? d->bytes[j] - s->bytes[i] : 0;
    }
    return BDB_OK;
}

uint64_t bdb_sku_tenant(const bdb_sku *t, const char *tn, size_t tlen, int64_t now_ms)
{
    const struct tdays *d = bdb_map_get(t->tenants, tn, tlen);
    uint64_t sum = 0;
    for (size_t i = 0; d && i < d->n; i++)
        if (day_live(d->day[i], now_ms))
            sum = d->bytes[i] > UINT64_MAX - sum ? UINT64_MAX : sum + d->bytes[i];
    return sum;
}

void bdb_sku_prune(bdb_sku *t, int64_t now_ms)
{
    size_t pos = 0, kl;
    const void *k;
    void *v;
    while (bdb_map_next(t->tenants, &pos, &k, &kl, &v)) {
        struct tdays *d = v;
        size_t o = 0;
        for (size_t i = 0; i < d->n; i++)
            if (day_live(d->day[i], now_ms) && d->bytes[i]) {
                d->day[o] = d->day[i];
                d->bytes[o++] = d->bytes[i];
            }
        d->n = o;
    }
}

static uint64_t entries(const bdb_sku *t)
{
    uint64_t n = 0;
    size_t pos = 0, kl;
    const void *k;
    void *v;
    while (bdb_map_next(t->tenants, &pos, &k, &kl, &v))
        n += ((const struct tdays *)v)->n;
    return n;
}

static void put_entries(const bdb_sku *t, bdb_buf *out)
{
    size_t pos = 0, kl;
    const void *k;
    void *v;
    while (bdb_map_next(t->tenants, &pos, &k, &kl, &v)) {
        const struct tdays *d = v;
        for (size_t i = 0; i < d->n; i++) {
            bdb_buf_put_str(out, k, kl);
            bdb_buf_put_u64le(out, (uint64_t)d->day[i]);
            bdb_buf_put_u64le(out, d->bytes[i]);
        }
    }
}

void bdb_sku_encode(const bdb_sku *cur, const bdb_sku *last, uint64_t wal_upto, bdb_buf *out)
{
    bdb_buf_append(out, SKU_MAGIC, 8);
    bdb_buf_put_u32le(out, SKU_VERSION);
    bdb_buf_put_u64le(out, wal_upto);
    bdb_buf_put_u64le(out, entries(cur));
    bdb_buf_put_u64le(out, last ? entries(last) : 0);
    put_entries(cur, out);
    if (last)
        put_entries(last, out);
    bdb_buf_put_u32le(out, (uint32_t)crc32(0, out->data, (uInt)out->len));
}

int bdb_sku_decode(const void *data, size_t len, bdb_sku *cur, bdb_sku *last, uint64_t *wal_upto,
                   char *err, size_t errlen)
{
    const uint8_t *p = data;
    bdb_sku_clear(cur);
    bdb_sku_clear(last);
    if (len < SKU_HEADER + 4 || memcmp(p, SKU_MAGIC, 8) != 0) {
        snprintf(err, errlen, "bad magic or too short (%zu bytes)", len);
        return BDB_ERR_CORRUPT;
    }
    if ((uint32_t)crc32(0, p, (uInt)(len - 4)) != bdb_get_u32le(p + len - 4)) {
        snprintf(err, errlen, "checksum mismatch");
        return BDB_ERR_CORRUPT;
    }
    if (bdb_get_u32le(p + 8) != SKU_VERSION) {
        snprintf(err, errlen, "unsupported version %u (this build reads %d)", bdb_get_u32le(p + 8),
                 SKU_VERSION);
        return BDB_ERR_CORRUPT;
    }
    *wal_upto = bdb_get_u64le(p + 12);
    uint64_t ncur = bdb_get_u64le(p + 20), nlast = bdb_get_u64le(p + 28);
    /* an entry takes at least 17 bytes: bounds the counts before looping on them */
    size_t body = len - SKU_HEADER - 4;
    if (ncur > body / 17 || nlast > body / 17 - ncur) {
        snprintf(err, errlen, "entry counts %llu + %llu do not fit in %zu bytes",
                 (unsigned long long)ncur, (unsigned long long)nlast, body);
        return BDB_ERR_CORRUPT;
    }
    bdb_dec d;
    bdb_dec_init(&d, p + SKU_HEADER, body);
    for (uint64_t i = 0; i < ncur + nlast; i++) {
        size_t tl;
        const char *tn = bdb_dec_str(&d, &tl);
        int64_t day = (int64_t)bdb_dec_u64le(&d);
        uint64_t bytes = bdb_dec_u64le(&d);
        if (d.err) {
            snprintf(err, errlen, "entry %llu truncated", (unsigned long long)i);
            return BDB_ERR_CORRUPT;
        }
        if (bdb_sku_add(i < ncur ? cur : last, tn, tl, day, bytes) != BDB_OK)
            return BDB_ERR_NOMEM;
    }
    if (bdb_dec_left(&d)) {
        snprintf(err, errlen, "%zu bytes after the last entry", bdb_dec_left(&d));
        return BDB_ERR_CORRUPT;
    }
    return BDB_OK;
}

/* ------------------------------------------------------------ the engine's side */

struct skustate {
    pthread_mutex_t mu;
    bdb_sku *cur;     /* confirmed, as saved */
    bdb_sku *pending; /* noted by the running flush */
    int oom;          /* a note failed: this flush's count is short */
    int unsaved;      /* cur holds more than the file: the next flush saves it */
    int doc_unsaved;  /* ... or more than the sink's document: the next flush puts it */
};

/* A directory without the file (new, or one that replaces a lost one) takes the
 * measure from the sink's document, which every flush that saved the file put there
 * too: the quota then holds across the loss of a server's disk instead of starting
 * over at 0. Its WAL cut belongs to the server that wrote it, whose WAL is gone with
 * its disk, so its last flush stays counted (its rows are in the sink). Caller holds
 * ext_mu; cur and pend are empty. */
static void load_doc(bdb_db *db, struct skustate *s)
{
    bdb_sink *sk = db->o.sink;
    if (!sk || !sk->ops->doc_get)
        return;
    void *data = NULL;
    size_t len = 0;
    uint64_t upto = 0;
    char err[160] = "";
    int rc = sk->ops->doc_get(sk, BDB_SKU_DOC, &data, &len, err, sizeof err);
    if (rc == BDB_OK)
        rc = bdb_sku_decode(data, len, s->cur, s->pending, &upto, err, sizeof err);
    free(data);
    bdb_sku_clear(s->pending);
    if (rc == BDB_ERR_NOTFOUND)
        return;
    if (rc != BDB_OK) {
        bdb_sku_clear(s->cur);
        BDB_ERROR("sink usage: the sink's document %s: %s%s%s; storage usage restarts from 0",
                  BDB_SKU_DOC, bdb_strerror(rc), *err ? ": " : "", err);
        return;
    }
    s->unsaved = 1; /* the file is written at the next flush */
    BDB_INFO("sink usage: no %s file here; taken from the sink's document", BDB_SKU_FILE);
}

/* Created (and the file loaded) by db_sku_open at open, when db->wal_upto is the
 * catalog's and no flush runs; later calls find it, or after an allocation failure
 * there make it then (db->wal_upto is still the catalog's until a flush commits, and
 * such a flush noted nothing: its rows are missing from the measure, logged). A
 * server without a sink never creates it. */
static struct skustate *get(bdb_db *db)
{
    pthread_mutex_lock(&db->ext_mu);
    struct skustate *s = *db_consumer_slot(db, &db_sku_consumer);
    if (s) {
        pthread_mutex_unlock(&db->ext_mu);
        return s;
    }
    s = bdb_calloc(1, sizeof *s);
    bdb_sku *cur = bdb_sku_new(), *pend = bdb_sku_new();
    if (!s || !cur || !pend) {
        free(s);
        bdb_sku_free(cur);
        bdb_sku_free(pend);
        pthread_mutex_unlock(&db->ext_mu);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    s->cur = cur;
    s->pending = pend;
    char path[BDB_PATH_BUF];
    snprintf(path, sizeof path, "%s/%s", db->dir, BDB_SKU_FILE);
    if (bdb_vfs_exists(db->vfs, path)) {
        void *data = NULL;
        size_t len = 0;
        uint64_t upto = 0;
        char err[160] = "";
        int rc = bdb_vfs_read_all(db->vfs, path, &data, &len);
        if (rc == BDB_OK)
            rc = bdb_sku_decode(data, len, cur, pend, &upto, err, sizeof err);
        free(data);
        if (rc == BDB_ERR_NOMEM) { /* not damage: the next call loads it again */
            pthread_mutex_destroy(&s->mu);
            free(s);
            bdb_sku_free(cur);
            bdb_sku_free(pend);
            pthread_mutex_unlock(&db->ext_mu);
            return NULL;
        }
        if (rc == BDB_OK && upto > db->wal_upto) {
            /* the catalog missed that flush: replay sends it again and counts it then */
            bdb_sku_merge(cur, pend, -1);
        }
        if (rc != BDB_OK) {
            /* Only the quota's measure is lost (the rows are in Cassandra): it restarts
             * from zero and the next flush overwrites the file. */
            BDB_ERROR("sink usage %s: %s%s%s; storage usage restarts from 0", path,
                      bdb_strerror(rc), *err ? ": " : "", err);
            bdb_sku_clear(cur);
        }
        bdb_sku_clear(pend);
    } else {
        load_doc(db, s);
    }
    *db_consumer_slot(db, &db_sku_consumer) = s;
    pthread_mutex_unlock(&db->ext_mu);
    return s;
}

void db_sku_note(bdb_db *db, const char *tn, const char *dn, const char *metric, int64_t ttl_ms,
                 const int64_t *ts, size_t n)
{
    struct skustate *s = get(db);
    if (!s)
        return; /* out of memory: not counted (db_sku_flush_done logs it) */
    uint64_t row = bdb_sku_row_bytes(strlen(tn), strlen(dn), strlen(metric));
    size_t tl = strlen(tn);
    int64_t now = bdb_clock_now(&db->o.clock);
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < n; i++) {
        /* rows already past their TTL are not sent (cass_sink.c), so not counted */
        if (ttl_ms > 0 && (ts[i] + ttl_ms - now) / 1000 <= 0)
            continue;
        if (bdb_sku_add(s->pending, tn, tl, bdb_sku_day(ts[i], ttl_ms), row) != BDB_OK)
            s->oom = 1;
    }
    pthread_mutex_unlock(&s->mu);
}

int db_sku_flush_done(bdb_db *db, int rc, uint64_t sealed)
{
    /* Never fails the flush: by now its tier and fleet files are published, so a
     * retry would count their samples twice; the quota's measure is bookkeeping (it
     * errs low until the next save). */
    struct skustate *s = get(db);
    if (!s) {
        BDB_ERROR("sink usage: out of memory; this flush's rows are not counted");
        return rc;
    }
    pthread_mutex_lock(&s->mu);
    if (rc == BDB_OK && s->oom)
        BDB_ERROR("sink usage: out of memory noting rows; some of this flush's are not counted");
    bdb_buf doc = {0}; /* what goes to the sink's document, after the lock */
    if (rc == BDB_OK && (entries(s->pending) > 0 || s->unsaved || s->doc_unsaved)) {
        bdb_sku_prune(s->cur, bdb_clock_now(&db->o.clock));
        if (bdb_sku_merge(s->cur, s->pending, 1) != BDB_OK) {
            bdb_sku_merge(s->cur, s->pending, -1); /* undo what got in */
            bdb_sku_clear(s->pending);
            BDB_ERROR("sink usage: out of memory; this flush's rows are not counted");
        }
        bdb_buf b;
        bdb_buf_init_checked(&b);
        bdb_sku_encode(s->cur, s->pending, sealed, &b);
        int src = b.oom ? BDB_ERR_NOMEM
                        : bdb_vfs_write_atomic(db->vfs, db->dir, BDB_SKU_FILE, b.data, b.len);
        /* Not saved: counted in memory, saved by the next flush; a crash before that
         * loses this flush's rows from the measure (the file's cut is older, so
         * nothing is taken off either). */
        s->unsaved = src != BDB_OK;
        if (src != BDB_OK)
            BDB_ERROR("sink usage: cannot save %s/%s: %s; saved at the next flush", db->dir,
                      BDB_SKU_FILE, bdb_strerror(src));
        if (src == BDB_OK && db->o.sink->ops->doc_put)
            doc = b; /* the file's bytes: the document is a copy of the file */
        else
            bdb_buf_free(&b);
    }
    bdb_sku_clear(s->pending);
    s->oom = 0;
    pthread_mutex_unlock(&s->mu);
    if (doc.data) {
        /* outside the lock: the write path's quota check reads the measure meanwhile.
         * Best effort: the flush committed already; a document not put is put by the
         * next flush, and until then a new directory would take an older measure. */
        int drc = db->o.sink->ops->doc_put(db->o.sink, BDB_SKU_DOC, doc.data, doc.len);
        bdb_buf_free(&doc);
        if (drc != BDB_OK)
            BDB_WARN("sink usage: the sink did not take document %s: %s; put at the next flush",
                     BDB_SKU_DOC, bdb_strerror(drc));
        pthread_mutex_lock(&s->mu);
        s->doc_unsaved = drc != BDB_OK;
        pthread_mutex_unlock(&s->mu);
    }
    return rc;
}

uint64_t db_sku_tenant_bytes(bdb_db *db, const char *tn)
{
    if (!db->o.sink || !tn)
        return 0;
    struct skustate *s = get(db);
    if (!s)
        return 0;
    pthread_mutex_lock(&s->mu);
    uint64_t v = bdb_sku_tenant(s->cur, tn, strlen(tn), bdb_clock_now(&db->o.clock));
    pthread_mutex_unlock(&s->mu);
    return v;
}

void db_sku_open(bdb_db *db)
{
    (void)get(db);
}

void db_sku_close(bdb_db *db)
{
    struct skustate *s = *db_consumer_slot(db, &db_sku_consumer);
    if (!s)
        return;
    *db_consumer_slot(db, &db_sku_consumer) = NULL;
    bdb_sku_free(s->cur);
    bdb_sku_free(s->pending);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Only a db with a sink counts sink bytes. */
static int sku_open(bdb_db *db)
{
    if (db->o.sink)
        db_sku_open(db);
    return BDB_OK;
}

static int sku_flush(bdb_db *db, struct series *const *v, size_t n, uint64_t sealed, int rc)
{
    (void)v, (void)n;
    return db->o.sink ? db_sku_flush_done(db, rc, sealed) : rc;
}

const db_consumer db_sku_consumer = {
    .name = "sink usage",
    .open = sku_open,
    .flush = sku_flush,
    .close = db_sku_close,
};
