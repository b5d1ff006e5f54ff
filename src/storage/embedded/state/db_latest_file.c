/* db_latest_file: the file <data>/latest of the current-state index (db_latest.h):
 * saved by every flush, loaded at open, or rebuilt from the catalog without it.
 *
 * File (written with bdb_vfs_write_atomic: after a crash the old or the new one):
 *   "BDBLAT01" | u32 version=3 | u64 wal_upto | u64 ndevices | u64 image length |
 *   zstd frame of the image | u32 crc32 of all preceding bytes
 *   image = ndevices x (str tenant | str device | varint event_ts | u8 has_state
 *           [str state | varint state_ts] | uvarint nmetrics
 *           (str metric | varint (event_ts - ts) | num value)* | uvarint nattrs
 *           (str name | str value | varint (event_ts - ts))*)
 * with num = bdb_buf_put_num (a decimal reading in about 3 bytes). Version 1 wrote
 * varint ts and the value's u64le bits, which zstd cannot shrink: version 2 is about
 * half the size (docs/formats/latest.md); version 3 adds the string attributes;
 * versions 1 and 2 (no attributes) are still read.
 * wal_upto is the segment the flush's WAL cut sealed: the image holds every report of
 * segments <= wal_upto (and maybe later ones, which replay applies again: applying a
 * report twice changes nothing). A file that fails any check is refused at open
 * (BDB_ERR_CORRUPT) rather than silently rebuilt: moving it away rebuilds the states
 * from the catalog and the metric values from the WAL that is left. */
#include "storage/embedded/core/wal.h"
#include "storage/embedded/state/db_latest_int.h"
#include "common/alloc.h"
#include "common/path.h"

#include "bucketdb/bdb.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#define LT_MAGIC "BDBLAT01"
#define LT_VERSION 3
#define LT_HEADER (8 + 4 + 8 + 8 + 8)
#define LT_MAX_IMAGE (UINT64_C(16) << 30) /* refuse absurd lengths from a damaged header */
#define LT_MAX_METRICS (1u << 20)         /* per device, in a file */

static void encode_entry(bdb_buf *b, const lt_dev *e)
{
    const device *d = e->dev;
    bdb_buf_put_str(b, d->tenant->name, strlen(d->tenant->name));
    bdb_buf_put_str(b, d->name, d->nlen);
    bdb_buf_put_varint(b, e->event_ts);
    bdb_buf_putc(b, e->st != NULL);
    if (e->st) {
        bdb_buf_put_str(b, e->st->name, e->st->nlen);
        bdb_buf_put_varint(b, atomic_load_explicit(&e->state_ts, memory_order_relaxed));
    }
    bdb_buf_put_uvarint(b, e->nm);
    for (uint32_t i = 0; i < e->nm; i++) {
        bdb_buf_put_str(b, e->m[i].s->metric, e->m[i].s->mlen);
        /* a metric's time is at most the event time; most are equal (one report) */
        bdb_buf_put_varint(b, (int64_t)((uint64_t)e->event_ts - (uint64_t)e->m[i].ts));
        bdb_buf_put_num(b, e->m[i].v);
    }
    bdb_buf_put_uvarint(b, e->na);
    for (uint32_t i = 0; i < e->na; i++) {
        bdb_buf_put_str(b, e->a[i].s, e->a[i].nlen);
        bdb_buf_put_str(b, e->a[i].s + e->a[i].nlen + 1, e->a[i].vlen);
        bdb_buf_put_varint(b, (int64_t)((uint64_t)e->event_ts - (uint64_t)e->a[i].ts));
    }
}

int db_latest_save(bdb_db *db, uint64_t wal_upto)
{
    struct db_latest *L = lt_of(db);
    bdb_buf img;
    bdb_buf_init_checked(&img); /* out of memory: the save fails, the WAL stays */
    uint64_t n = 0;
    /* One stripe at a time: writers of other stripes go on meanwhile. */
    for (uint32_t s = 0; s < DB_STRIPES; s++) {
        pthread_mutex_lock(&db->stripes[s]);
        const lt_table *tb = &L->tables[s];
        for (uint32_t i = 0; i < tb->cap; i++)
            if (tb->slot[i] && tb->slot[i]->live) {
                encode_entry(&img, tb->slot[i]);
                n++;
            }
        pthread_mutex_unlock(&db->stripes[s]);
    }
    /* Every report in the snapshot was appended to the WAL before it was applied; this
     * cut makes them durable, so the file never shows a report that a power loss
     * could take out of the WAL. */
    uint64_t sealed;
    int rc = img.oom ? BDB_ERR_NOMEM : bdb_wal_cut(db->wal, &sealed);
    if (rc != BDB_OK) {
        if (rc != BDB_ERR_NOMEM)
            db_set_readonly(db, rc, "WAL segment cut (state index)");
        goto out;
    }
    uint8_t head[LT_HEADER];
    uint64_t fields[3] = {wal_upto, n, img.len};
    memcpy(head, LT_MAGIC, 8);
    for (int i = 0; i < 4; i++)
        head[8 + i] = (uint8_t)(LT_VERSION >> (8 * i));
    for (int f = 0; f < 3; f++)
        for (int i = 0; i < 8; i++)
            head[12 + 8 * f + i] = (uint8_t)(fields[f] >> (8 * i));
    rc = bdb_vfs_write_zstd(db->vfs, db->dir, "latest", head, sizeof head, img.data, img.len, 1);
out:
    if (rc != BDB_OK)
        BDB_ERROR("state index save failed: %s; WAL segments kept", bdb_strerror(rc));
    bdb_buf_free(&img);
    return rc;
}

/* Without a file (a data directory from before the index, or the file moved away):
 * states and event times from the catalog. Metric values come back from the WAL
 * segments that remain, and from each device's next report. */
static int seed_nomem; /* out of memory seeding (open only, single-threaded) */

static void seed_from_catalog(void *ctx, device *d)
{
    bdb_db *db = ctx;
    if (!d->state && d->last_ts == INT64_MIN)
        return;
    lt_dev *e = lt_entry(lt_of(db), d, 1);
    if (!e) {
        seed_nomem = 1;
        return;
    }
    lt_make_live(e);
    e->event_ts = d->last_ts;
    if (d->state && lt_apply_state(lt_of(db), e, d->state, strlen(d->state), d->state_ts))
        seed_nomem = 1;
}

static int load_image(bdb_db *db, const char *path, const uint8_t *img, size_t len, uint64_t ndev,
                      uint32_t version)
{
    bdb_dec d;
    bdb_dec_init(&d, img, len);
    for (uint64_t i = 0; i < ndev && !d.err; i++) {
        size_t tl, dl, sl = 0;
        const char *tn = bdb_dec_str(&d, &tl);
        const char *dn = bdb_dec_str(&d, &dl);
        int64_t ets = bdb_dec_varint(&d);
        const char *st = NULL;
        int64_t sts = INT64_MIN;
        if (bdb_dec_u8(&d)) {
            st = bdb_dec_str(&d, &sl);
            sts = bdb_dec_varint(&d);
        }
        uint64_t nm = bdb_dec_uvarint(&d);
        if (d.err || tl == 0 || nm > LT_MAX_METRICS || nm > bdb_dec_left(&d)) {
            d.err = 1; /* refused below, even when nothing is left to decode */
            break;
        }
        tenant *t = cat_tenant(db, tn, tl, 1);
        device *dv = t ? cat_device(db, t, dn, dl, 1) : NULL;
        lt_dev *e = dv ? lt_entry(lt_of(db), dv, 1) : NULL;
        if (!e)
            return BDB_ERR_NOMEM; /* the open fails (alloc.h) */
        lt_make_live(e);
        if (ets > e->event_ts)
            e->event_ts = ets;
        for (uint64_t k = 0; k < nm && !d.err; k++) {
            size_t ml;
            const char *m = bdb_dec_str(&d, &ml);
            int64_t ts = bdb_dec_varint(&d);
            double v;
            if (version == 1) {
                v = bdb_dec_f64(&d);
            } else {
                /* modular, as written: any event time and metric time round-trip */
                ts = (int64_t)((uint64_t)ets - (uint64_t)ts);
                v = bdb_dec_num(&d);
            }
            series *se = d.err ? NULL : cat_series(db, dv, m, ml, 1);
            if (!d.err && (!se || lt_metric_set(lt_of(db), e, se, ts, v) != BDB_OK))
                return BDB_ERR_NOMEM;
        }
        uint64_t na = version >= 3 ? bdb_dec_uvarint(&d) : 0;
        if (na > BDB_MAX_DEVICE_ATTRS)
            d.err = 1;
        for (uint64_t k = 0; k < na && !d.err; k++) {
            size_t nl, vl;
            const char *an = bdb_dec_str(&d, &nl);
            const char *av = bdb_dec_str(&d, &vl);
            int64_t ts = (int64_t)((uint64_t)ets - (uint64_t)bdb_dec_varint(&d));
            if (!d.err && (memchr(an, 0, nl) || memchr(av, 0, vl)))
                d.err = 1;
            if (!d.err && lt_attr_set(lt_of(db), e, an, nl, av, vl, ts) != BDB_OK)
                return BDB_ERR_NOMEM;
        }
        if (st && !d.err && lt_apply_state(lt_of(db), e, st, sl, sts) != BDB_OK)
            return BDB_ERR_NOMEM;
    }
    if (d.err || bdb_dec_left(&d)) {
        BDB_ERROR("state index %s: truncated or malformed content", path);
        return BDB_ERR_CORRUPT;
    }
    return BDB_OK;
}

static int load_file(bdb_db *db, const char *path)
{
    void *data;
    size_t len;
    int rc = bdb_vfs_read_all(db->vfs, path, &data, &len);
    if (rc != BDB_OK) {
        BDB_ERROR("state index %s: cannot read: %s", path, bdb_strerror(rc));
        return rc;
    }
    const uint8_t *p = data;
    void *img = NULL;
    rc = BDB_ERR_CORRUPT;
    if (len < LT_HEADER + 4 || memcmp(p, LT_MAGIC, 8) != 0) {
        BDB_ERROR("state index %s: bad magic or too short (%zu bytes)", path, len);
        goto out;
    }
    if ((uint32_t)crc32(0, p, (uInt)(len - 4)) != bdb_get_u32le(p + len - 4)) {
        BDB_ERROR("state index %s: checksum mismatch", path);
        goto out;
    }
    uint32_t version = bdb_get_u32le(p + 8);
    if (version < 1 || version > LT_VERSION) {
        BDB_ERROR("state index %s: unsupported version %u", path, bdb_get_u32le(p + 8));
        goto out;
    }
    uint64_t upto = bdb_get_u64le(p + 12), ndev = bdb_get_u64le(p + 20);
    uint64_t raw = bdb_get_u64le(p + 28);
    size_t zlen = len - LT_HEADER - 4;
    unsigned long long fcs = ZSTD_getFrameContentSize(p + LT_HEADER, zlen);
    if (raw > LT_MAX_IMAGE || fcs != raw || ndev > raw) {
        BDB_ERROR("state index %s: bad image length", path);
        goto out;
    }
    img = bdb_malloc(raw ? raw : 1);
    if (!img) {
        rc = BDB_ERR_NOMEM;
        goto out;
    }
    size_t got = ZSTD_decompress(img, raw, p + LT_HEADER, zlen);
    if (ZSTD_isError(got) || got != raw) {
        BDB_ERROR("state index %s: cannot decompress", path);
        goto out;
    }
    if ((rc = load_image(db, path, img, raw, ndev, version)) != BDB_OK)
        goto out;
    if (upto < db->wal_upto) {
        /* The catalog was saved by a flush whose save of this file failed; that flush
         * kept the WAL, so replay from here covers the difference. */
        BDB_WARN("state index %s covers WAL segments up to %llu, the catalog %llu: "
                 "replaying from %llu",
                 path, (unsigned long long)upto, (unsigned long long)db->wal_upto,
                 (unsigned long long)upto + 1);
        db->wal_upto = upto;
    }
out:
    free(img);
    free(data);
    return rc;
}

int db_latest_open(bdb_db *db)
{
    struct db_latest *L = bdb_calloc(1, sizeof *L);
    if (!L)
        return BDB_ERR_NOMEM;
    pthread_mutex_init(&L->mu, NULL);
    L->tenants = bdb_map_new();
    lt_account(L, sizeof *L);
    L->dev_off = db_consumer_dev_off(db, &db_latest_consumer);
    *db_consumer_slot(db, &db_latest_consumer) =
        L; /* freed by db_latest_free even when the open fails */
    if (!L->tenants)
        return BDB_ERR_NOMEM;
    char path[BDB_PATH_BUF];
    snprintf(path, sizeof path, "%s/latest", db->dir);
    if (bdb_vfs_exists(db->vfs, path)) {
        int rc = load_file(db, path);
        if (rc == BDB_ERR_CORRUPT)
            BDB_ERROR("state index %s is damaged; refusing to start. Move it away to "
                      "rebuild it from the catalog and the WAL (latest metric values of "
                      "devices that have not reported since the last flush are then lost "
                      "until they report again)",
                      path);
        return rc;
    }
    uint64_t devices = atomic_load(&db->device_count);
    if (devices) {
        BDB_WARN("state index %s missing: rebuilding states from the catalog (%llu devices) "
                 "and metric values from the WAL",
                 path, (unsigned long long)devices);
        seed_nomem = 0;
        cat_each_device(db, seed_from_catalog, db);
        if (seed_nomem)
            return BDB_ERR_NOMEM;
        /* Replay starts after the catalog's segment, unless the flush that saved the
         * catalog never saved this file (a crash between the two, or a failed save, on
         * a directory that had none yet): that flush kept its segments, and their
         * reports are the only copy of the metric values they carry. Replay then starts
         * at the oldest segment still there, as for a file older than the catalog.
         * Never lower than that: db->wal_upto also tells the tier, fleet and
         * sink-usage files of committed flushes from those of a flush that never
         * committed, and the segments of earlier flushes are gone (lowering it to 0
         * made the open delete them all). */
        uint64_t oldest;
        int rc = bdb_wal_oldest_segment(db->vfs, db->wal_dir, &oldest);
        if (rc != BDB_OK && rc != BDB_ERR_NOTFOUND)
            return rc;
        if (rc == BDB_OK && oldest >= 1 && oldest <= db->wal_upto) {
            BDB_WARN("state index %s missing, and WAL segments from %llu kept by a flush "
                     "that did not save it: replaying from %llu",
                     path, (unsigned long long)oldest, (unsigned long long)oldest);
            db->wal_upto = oldest - 1;
        }
    }
    return BDB_OK;
}

void db_latest_free(bdb_db *db)
{
    struct db_latest *L = lt_of(db);
    if (!L)
        return;
    for (uint32_t s = 0; s < DB_STRIPES; s++) {
        lt_table *tb = &L->tables[s];
        for (uint32_t i = 0; i < tb->cap; i++)
            if (tb->slot[i]) {
                for (uint32_t k = 0; k < tb->slot[i]->na; k++)
                    free(tb->slot[i]->a[k].s);
                free(tb->slot[i]->a);
                free(tb->slot[i]->m);
                free(tb->slot[i]);
            }
        free(tb->slot);
    }
    size_t tp = 0, kl;
    const void *key;
    void *tv;
    while (L->tenants && bdb_map_next(L->tenants, &tp, &key, &kl, &tv)) {
        lt_tenant *t = tv;
        size_t sp = 0;
        void *sv;
        while (bdb_map_next(t->states, &sp, &key, &kl, &sv)) {
            lt_state *st = sv;
            free(st->name);
            free(st);
        }
        bdb_map_free(t->states);
        pthread_mutex_destroy(&t->mu);
        free(t);
    }
    bdb_map_free(L->tenants);
    pthread_mutex_destroy(&L->mu);
    free(L);
    *db_consumer_slot(db, &db_latest_consumer) = NULL;
}
