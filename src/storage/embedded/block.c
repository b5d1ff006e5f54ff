/* block: immutable time-window block files. Layout: docs/formats/block.md.
 *
 * The writer streams chunk bytes to `<name>.tmp` through a ~1 MiB staging buffer
 * and keeps only the index tables in memory; finish() appends them, the footer, and
 * makes the file durable under its final name.
 *
 * The reader maps the file and keeps nothing but pointers into the mapping, so a
 * block with a million series costs O(1) heap. Open checks every CRC and walks the
 * whole index once to prove its structure (offsets, ordering, counts, sums); after
 * that every accessor still bounds-checks what it reads, because a mapping is only
 * as trustworthy as the file under it. */
#include "storage/embedded/block.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define BLK_MAGIC "BDBBLK"
#define BLK_MAGIC_LEN 6
#define BLK_FOOTER_MAGIC "BDBBLKFT"
#define BLK_FOOTER_MAGIC_LEN 8
#define BLK_VERSION 1
#define BLK_HEADER_SIZE 36
#define BLK_FOOTER_SIZE 140
#define BLK_CHUNK_ENTRY 44
#define BLK_CRC_SIZE 4
#define BLK_FLUSH_AT ((size_t)1 << 20)

/* Footer field offsets; the u64/i64 fields come first, in this order. */
enum {
    F_INDEX_OFF,
    F_SERIES_LEN,
    F_OFFSETS_OFF,
    F_CHUNKS_OFF,
    F_PARTS_OFF,
    F_PARTS_LEN,
    F_NSERIES,
    F_NCHUNKS,
    F_NPARTS,
    F_NSAMPLES,
    F_WINDOW_START,
    F_WINDOW_END,
    F_MIN_TS,
    F_MAX_TS,
    F_SEQ,
    F_NFIELDS
};
#define F_VERSION_AT (F_NFIELDS * 8)
#define F_INDEX_CRC_AT (F_VERSION_AT + 4)
#define F_FOOTER_CRC_AT (F_INDEX_CRC_AT + 4)
#define F_MAGIC_AT (F_FOOTER_CRC_AT + 4)
_Static_assert(F_MAGIC_AT + BLK_FOOTER_MAGIC_LEN == BLK_FOOTER_SIZE, "footer layout");

static uint32_t crc_update(uint32_t crc, const void *p, size_t n)
{
    /* zlib returns the initial value, not crc, for a NULL buffer. */
    if (n == 0) return crc;
    return (uint32_t)crc32_z(crc, p, n);
}

static int bytes_cmp(const char *a, size_t an, const char *b, size_t bn)
{
    size_t n = an < bn ? an : bn;
    int c = n ? memcmp(a, b, n) : 0;
    if (c) return c < 0 ? -1 : 1;
    return an < bn ? -1 : an > bn;
}

int bdb_series_key_cmp(const bdb_series_key *a, const bdb_series_key *b)
{
    int c = bytes_cmp(a->tenant, a->tenant_len, b->tenant, b->tenant_len);
    if (!c) c = bytes_cmp(a->device, a->device_len, b->device, b->device_len);
    if (!c) c = bytes_cmp(a->metric, a->metric_len, b->metric, b->metric_len);
    return c;
}

static int same_device(const bdb_series_key *a, const bdb_series_key *b)
{
    return !bytes_cmp(a->tenant, a->tenant_len, b->tenant, b->tenant_len) &&
           !bytes_cmp(a->device, a->device_len, b->device, b->device_len);
}

static char *path_join(const char *dir, const char *name, const char *suffix)
{
    size_t n = strlen(dir) + strlen(name) + strlen(suffix) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s%s", dir, name, suffix);
    return p;
}

/* ---- writer ---- */

/* Rows and bytes of one bucket of the device currently being written. */
struct part_acc {
    int64_t bucket;
    uint64_t rows, bytes;
};

struct bdb_block_writer {
    bdb_vfs *vfs;
    bdb_file *f;
    char *dir, *tmp_path, *final_path;
    int64_t window_start, window_end;
    uint64_t seq;
    int err; /* sticky: after a failed write the file content is unknown */

    bdb_buf out;      /* staged bytes, destined for file offset `flushed` */
    uint64_t flushed; /* bytes already handed to pwrite */

    bdb_buf series, offsets, chunks, parts; /* index tables, built in memory */

    int have_series;
    bdb_buf last;            /* tenant | device | metric of the open series */
    bdb_series_key last_key; /* lengths only; pointers are rebuilt from `last` */
    int64_t last_min_ts;
    uint64_t cur_first, cur_n;

    struct part_acc *acc; /* sorted by bucket */
    size_t nacc, acc_cap;

    uint64_t nseries, nchunks, nparts, nsamples;
    int64_t min_ts, max_ts;
};

static int w_flush(bdb_block_writer *w)
{
    if (w->out.len == 0) return BDB_OK;
    int rc = bdb_file_pwrite(w->f, w->out.data, w->out.len, w->flushed);
    if (rc != BDB_OK) return w->err = rc;
    w->flushed += w->out.len;
    bdb_buf_reset(&w->out);
    return BDB_OK;
}

/* One pwrite per ~1 MiB: small pieces are staged, large ones bypass the copy. */
static int w_write(bdb_block_writer *w, const void *p, size_t n)
{
    if (n == 0) return BDB_OK;
    if (w->out.len + n > BLK_FLUSH_AT) {
        int rc = w_flush(w);
        if (rc != BDB_OK) return rc;
        if (n >= BLK_FLUSH_AT) {
            rc = bdb_file_pwrite(w->f, p, n, w->flushed);
            if (rc != BDB_OK) return w->err = rc;
            w->flushed += n;
            return BDB_OK;
        }
    }
    bdb_buf_append(&w->out, p, n);
    return BDB_OK;
}

static uint64_t w_pos(const bdb_block_writer *w)
{
    return w->flushed + w->out.len;
}

static void w_free(bdb_block_writer *w)
{
    bdb_buf_free(&w->out);
    bdb_buf_free(&w->series);
    bdb_buf_free(&w->offsets);
    bdb_buf_free(&w->chunks);
    bdb_buf_free(&w->parts);
    bdb_buf_free(&w->last);
    free(w->acc);
    free(w->dir);
    free(w->tmp_path);
    free(w->final_path);
    free(w);
}

static void w_key(const bdb_block_writer *w, bdb_series_key *k)
{
    /* An all-empty key leaves the buffer unallocated; never offset a NULL pointer. */
    const char *p = w->last.data ? (const char *)w->last.data : "";
    *k = w->last_key;
    k->tenant = p;
    k->device = p + k->tenant_len;
    k->metric = p + k->tenant_len + k->device_len;
}

static void w_end_series(bdb_block_writer *w)
{
    bdb_series_key k;
    w_key(w, &k);
    uint8_t off[8];
    bdb_put_u64le(off, w->series.len);
    bdb_buf_append(&w->offsets, off, sizeof off);
    bdb_buf_put_str(&w->series, k.tenant, k.tenant_len);
    bdb_buf_put_str(&w->series, k.device, k.device_len);
    bdb_buf_put_str(&w->series, k.metric, k.metric_len);
    bdb_buf_put_uvarint(&w->series, w->cur_first);
    bdb_buf_put_uvarint(&w->series, w->cur_n);
    w->nseries++;
}

/* Emits the finished device's partitions; keys are sorted, so a device's metrics are
 * contiguous and its buckets never reappear later. */
static void w_end_device(bdb_block_writer *w)
{
    bdb_series_key k;
    w_key(w, &k);
    for (size_t i = 0; i < w->nacc; i++) {
        bdb_buf_put_str(&w->parts, k.tenant, k.tenant_len);
        bdb_buf_put_str(&w->parts, k.device, k.device_len);
        bdb_buf_put_varint(&w->parts, w->acc[i].bucket);
        bdb_buf_put_uvarint(&w->parts, w->acc[i].rows);
        bdb_buf_put_uvarint(&w->parts, w->acc[i].bytes);
        w->nparts++;
    }
    w->nacc = 0;
}

static int w_account(bdb_block_writer *w, int64_t bucket, uint64_t rows, uint64_t bytes)
{
    size_t lo = 0, hi = w->nacc;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (w->acc[mid].bucket < bucket)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == w->nacc || w->acc[lo].bucket != bucket) {
        if (w->nacc == w->acc_cap) {
            size_t cap = w->acc_cap ? w->acc_cap * 2 : 16;
            struct part_acc *a = realloc(w->acc, cap * sizeof *a);
            if (!a) return BDB_ERR_NOMEM;
            w->acc = a;
            w->acc_cap = cap;
        }
        memmove(&w->acc[lo + 1], &w->acc[lo], (w->nacc - lo) * sizeof *w->acc);
        w->acc[lo] = (struct part_acc){.bucket = bucket};
        w->nacc++;
    }
    w->acc[lo].rows += rows;
    w->acc[lo].bytes += bytes;
    return BDB_OK;
}

int bdb_block_writer_open(bdb_vfs *vfs, const char *dir, const char *name, int64_t window_start,
                          int64_t window_end, uint64_t seq, bdb_block_writer **out)
{
    if (!vfs || !dir || !name || !*name || !out || window_start >= window_end)
        return BDB_ERR_INVALID;
    bdb_block_writer *w = calloc(1, sizeof *w);
    if (!w) return BDB_ERR_NOMEM;
    w->vfs = vfs;
    w->window_start = window_start;
    w->window_end = window_end;
    w->seq = seq;
    w->min_ts = INT64_MAX;
    w->max_ts = INT64_MIN;
    w->dir = strdup(dir);
    w->tmp_path = path_join(dir, name, ".tmp");
    w->final_path = path_join(dir, name, "");
    if (!w->dir || !w->tmp_path || !w->final_path) {
        w_free(w);
        return BDB_ERR_NOMEM;
    }
    int rc = bdb_vfs_open(vfs, w->tmp_path, BDB_O_RDWR | BDB_O_CREAT | BDB_O_TRUNC, &w->f);
    if (rc != BDB_OK) {
        w_free(w);
        return rc;
    }
    uint8_t h[BLK_HEADER_SIZE];
    memcpy(h, BLK_MAGIC, BLK_MAGIC_LEN);
    h[6] = (uint8_t)BLK_VERSION;
    h[7] = (uint8_t)(BLK_VERSION >> 8);
    bdb_put_u64le(h + 8, (uint64_t)window_start);
    bdb_put_u64le(h + 16, (uint64_t)window_end);
    bdb_put_u64le(h + 24, seq);
    bdb_put_u32le(h + 32, crc_update(0, h, 32));
    w_write(w, h, sizeof h); /* staged only: cannot fail */
    *out = w;
    return BDB_OK;
}

static int key_valid(const bdb_series_key *k)
{
    return (k->tenant || !k->tenant_len) && (k->device || !k->device_len) &&
           (k->metric || !k->metric_len);
}

int bdb_block_writer_add(bdb_block_writer *w, const bdb_series_key *key, const bdb_chunk_ref *c)
{
    if (!w || !key || !c || !key_valid(key) || (!c->data && c->len) || c->len > UINT32_MAX)
        return BDB_ERR_INVALID;
    if (w->err) return w->err;
    if (c->min_ts > c->max_ts || c->min_ts < w->window_start || c->max_ts >= w->window_end)
        return BDB_ERR_INVALID;

    /* Validate everything before changing any state, so a rejected chunk leaves the
     * writer usable. */
    int new_series = 1, new_device = 1;
    if (w->have_series) {
        bdb_series_key last;
        w_key(w, &last);
        int cmp = bdb_series_key_cmp(key, &last);
        if (cmp < 0) return BDB_ERR_INVALID;
        if (cmp == 0 && c->min_ts <= w->last_min_ts) return BDB_ERR_INVALID;
        new_series = cmp > 0;
        new_device = new_series && !same_device(key, &last);
    }

    if (new_series) {
        if (w->have_series) {
            w_end_series(w);
            if (new_device) w_end_device(w);
        }
        bdb_buf_reset(&w->last);
        bdb_buf_append(&w->last, key->tenant, key->tenant_len);
        bdb_buf_append(&w->last, key->device, key->device_len);
        bdb_buf_append(&w->last, key->metric, key->metric_len);
        w->last_key = *key;
        w->have_series = 1;
        w->cur_first = w->nchunks;
        w->cur_n = 0;
    }
    w->last_min_ts = c->min_ts;

    uint64_t off = w_pos(w);
    uint32_t crc = crc_update(0, c->data, c->len);
    uint8_t trailer[BLK_CRC_SIZE];
    bdb_put_u32le(trailer, crc);
    int rc = w_write(w, c->data, c->len);
    if (rc == BDB_OK) rc = w_write(w, trailer, sizeof trailer);
    if (rc == BDB_OK) rc = w_account(w, c->bucket_start, c->count, c->len);
    if (rc != BDB_OK) return w->err = rc;

    uint8_t e[BLK_CHUNK_ENTRY];
    bdb_put_u64le(e, (uint64_t)c->bucket_start);
    bdb_put_u64le(e + 8, (uint64_t)c->min_ts);
    bdb_put_u64le(e + 16, (uint64_t)c->max_ts);
    bdb_put_u64le(e + 24, off);
    bdb_put_u32le(e + 32, (uint32_t)c->len);
    bdb_put_u32le(e + 36, c->count);
    bdb_put_u32le(e + 40, crc);
    bdb_buf_append(&w->chunks, e, sizeof e);

    w->cur_n++;
    w->nchunks++;
    w->nsamples += c->count;
    if (c->min_ts < w->min_ts) w->min_ts = c->min_ts;
    if (c->max_ts > w->max_ts) w->max_ts = c->max_ts;
    return BDB_OK;
}

static int w_write_index(bdb_block_writer *w, uint64_t *file_bytes)
{
    if (w->have_series) {
        w_end_series(w);
        w_end_device(w);
        w->have_series = 0;
    }
    const bdb_buf *tables[] = {&w->series, &w->offsets, &w->chunks, &w->parts};
    uint64_t index_off = w_pos(w);
    uint32_t icrc = 0;
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
        icrc = crc_update(icrc, tables[i]->data, tables[i]->len);
        int rc = w_write(w, tables[i]->data, tables[i]->len);
        if (rc != BDB_OK) return rc;
    }

    uint64_t f[F_NFIELDS];
    f[F_INDEX_OFF] = index_off;
    f[F_SERIES_LEN] = w->series.len;
    f[F_OFFSETS_OFF] = index_off + w->series.len;
    f[F_CHUNKS_OFF] = f[F_OFFSETS_OFF] + w->offsets.len;
    f[F_PARTS_OFF] = f[F_CHUNKS_OFF] + w->chunks.len;
    f[F_PARTS_LEN] = w->parts.len;
    f[F_NSERIES] = w->nseries;
    f[F_NCHUNKS] = w->nchunks;
    f[F_NPARTS] = w->nparts;
    f[F_NSAMPLES] = w->nsamples;
    f[F_WINDOW_START] = (uint64_t)w->window_start;
    f[F_WINDOW_END] = (uint64_t)w->window_end;
    f[F_MIN_TS] = (uint64_t)w->min_ts;
    f[F_MAX_TS] = (uint64_t)w->max_ts;
    f[F_SEQ] = w->seq;
    uint8_t ft[BLK_FOOTER_SIZE];
    for (int i = 0; i < F_NFIELDS; i++)
        bdb_put_u64le(ft + 8 * i, f[i]);
    bdb_put_u32le(ft + F_VERSION_AT, BLK_VERSION);
    bdb_put_u32le(ft + F_INDEX_CRC_AT, icrc);
    bdb_put_u32le(ft + F_FOOTER_CRC_AT, crc_update(0, ft, F_FOOTER_CRC_AT));
    memcpy(ft + F_MAGIC_AT, BLK_FOOTER_MAGIC, BLK_FOOTER_MAGIC_LEN);
    int rc = w_write(w, ft, sizeof ft);
    if (rc == BDB_OK) rc = w_flush(w);
    *file_bytes = w_pos(w);
    return rc;
}

int bdb_block_writer_finish(bdb_block_writer *w, bdb_block_meta *meta)
{
    if (!w) return BDB_ERR_INVALID;
    uint64_t file_bytes = 0;
    int rc = w->err;
    if (rc == BDB_OK) rc = w_write_index(w, &file_bytes);
    if (rc == BDB_OK) rc = bdb_file_sync(w->f);
    int close_rc = bdb_file_close(w->f);
    w->f = NULL;
    if (rc == BDB_OK) rc = close_rc;
    int renamed = 0;
    if (rc == BDB_OK) {
        rc = bdb_vfs_rename(w->vfs, w->tmp_path, w->final_path);
        renamed = rc == BDB_OK;
    }
    if (rc == BDB_OK) rc = bdb_vfs_sync_dir(w->vfs, w->dir);
    if (rc != BDB_OK) {
        /* A block whose durability is unknown is withdrawn: the caller still holds the
         * data and will write it again, and seq settles any duplicate that survives. */
        int saved = errno;
        bdb_vfs_unlink(w->vfs, renamed ? w->final_path : w->tmp_path);
        errno = saved;
        w_free(w);
        return rc;
    }
    if (meta) {
        *meta = (bdb_block_meta){
            .version = BLK_VERSION,
            .window_start = w->window_start,
            .window_end = w->window_end,
            .min_ts = w->min_ts,
            .max_ts = w->max_ts,
            .nseries = w->nseries,
            .nchunks = w->nchunks,
            .nsamples = w->nsamples,
            .file_bytes = file_bytes,
            .seq = w->seq,
        };
    }
    w_free(w);
    return BDB_OK;
}

void bdb_block_writer_abort(bdb_block_writer *w)
{
    if (!w) return;
    int saved = errno;
    if (w->f) bdb_file_close(w->f);
    bdb_vfs_unlink(w->vfs, w->tmp_path);
    errno = saved;
    w_free(w);
}

/* ---- reader ---- */

struct bdb_block {
    bdb_file *f;
    const uint8_t *map;
    size_t map_len;
    uint64_t data_end; /* = start of the index region */
    const uint8_t *series;
    uint64_t series_len;
    const uint8_t *offsets;
    const uint8_t *chunks;
    const uint8_t *parts;
    uint64_t parts_len;
    uint64_t nparts;
    bdb_block_meta meta;
};

/* Decodes series record s. Returns 0, or -1 if it does not decode inside its slot. */
static int read_series(const bdb_block *b, uint64_t s, bdb_series_key *k, uint64_t *first,
                       uint64_t *n)
{
    if (s >= b->meta.nseries) return -1;
    uint64_t off = bdb_get_u64le(b->offsets + 8 * s);
    uint64_t end =
        s + 1 < b->meta.nseries ? bdb_get_u64le(b->offsets + 8 * (s + 1)) : b->series_len;
    if (off >= end || end > b->series_len) return -1;
    bdb_dec d;
    bdb_dec_init(&d, b->series + off, (size_t)(end - off));
    k->tenant = bdb_dec_str(&d, &k->tenant_len);
    k->device = bdb_dec_str(&d, &k->device_len);
    k->metric = bdb_dec_str(&d, &k->metric_len);
    *first = bdb_dec_uvarint(&d);
    *n = bdb_dec_uvarint(&d);
    if (d.err || bdb_dec_left(&d) != 0) return -1;
    if (*n == 0 || *first > b->meta.nchunks || *n > b->meta.nchunks - *first) return -1;
    return 0;
}

static void read_chunk_entry(const bdb_block *b, uint64_t i, bdb_chunk_ref *c, uint64_t *off,
                             uint32_t *crc)
{
    const uint8_t *e = b->chunks + BLK_CHUNK_ENTRY * i;
    c->bucket_start = (int64_t)bdb_get_u64le(e);
    c->min_ts = (int64_t)bdb_get_u64le(e + 8);
    c->max_ts = (int64_t)bdb_get_u64le(e + 16);
    *off = bdb_get_u64le(e + 24);
    c->len = bdb_get_u32le(e + 32);
    c->count = bdb_get_u32le(e + 36);
    *crc = bdb_get_u32le(e + 40);
    c->data = NULL;
}

static int read_part(const bdb_block *b, uint64_t *pos, bdb_partition_stat *st)
{
    if (*pos >= b->parts_len) return -1;
    bdb_dec d;
    bdb_dec_init(&d, b->parts + *pos, (size_t)(b->parts_len - *pos));
    st->key.tenant = bdb_dec_str(&d, &st->key.tenant_len);
    st->key.device = bdb_dec_str(&d, &st->key.device_len);
    st->key.metric = "";
    st->key.metric_len = 0;
    st->bucket_start = bdb_dec_varint(&d);
    st->rows = bdb_dec_uvarint(&d);
    st->bytes = bdb_dec_uvarint(&d);
    if (d.err) return -1;
    *pos = b->parts_len - bdb_dec_left(&d);
    return 0;
}

/* Proves the chunk table: contiguous offsets that tile the data region exactly, every
 * chunk inside the window. Also derives the totals the footer claims. */
static const char *check_chunks(const bdb_block *b, uint64_t *bytes, uint64_t *samples,
                                int64_t *min_ts, int64_t *max_ts)
{
    uint64_t expect = BLK_HEADER_SIZE;
    *bytes = *samples = 0;
    *min_ts = INT64_MAX;
    *max_ts = INT64_MIN;
    for (uint64_t i = 0; i < b->meta.nchunks; i++) {
        bdb_chunk_ref c;
        uint64_t off;
        uint32_t crc;
        read_chunk_entry(b, i, &c, &off, &crc);
        if (off != expect || c.len + BLK_CRC_SIZE > b->data_end - off)
            return "chunk offsets do not tile the data region";
        if (c.min_ts > c.max_ts || c.min_ts < b->meta.window_start ||
            c.max_ts >= b->meta.window_end)
            return "chunk outside the window";
        expect = off + c.len + BLK_CRC_SIZE;
        *bytes += c.len;
        *samples += c.count;
        if (c.min_ts < *min_ts) *min_ts = c.min_ts;
        if (c.max_ts > *max_ts) *max_ts = c.max_ts;
    }
    if (expect != b->data_end) return "data region has unindexed bytes";
    return NULL;
}

static const char *check_series(const bdb_block *b)
{
    if (b->meta.nseries == 0)
        return b->series_len == 0 && b->meta.nchunks == 0 ? NULL : "series table mismatch";
    if (bdb_get_u64le(b->offsets) != 0) return "series offsets do not start at 0";
    bdb_series_key prev = {0};
    uint64_t next_first = 0;
    for (uint64_t s = 0; s < b->meta.nseries; s++) {
        bdb_series_key k;
        uint64_t first, n;
        if (read_series(b, s, &k, &first, &n) != 0) return "bad series record";
        if (s > 0 && bdb_series_key_cmp(&prev, &k) >= 0) return "series out of order";
        if (first != next_first) return "series chunk ranges not contiguous";
        int64_t prev_min = INT64_MIN;
        for (uint64_t i = first; i < first + n; i++) {
            int64_t min_ts = (int64_t)bdb_get_u64le(b->chunks + BLK_CHUNK_ENTRY * i + 8);
            if (i > first && min_ts <= prev_min) return "chunks of a series out of order";
            prev_min = min_ts;
        }
        next_first += n;
        prev = k;
    }
    return next_first == b->meta.nchunks ? NULL : "chunks not covered by series";
}

static const char *check_parts(const bdb_block *b, uint64_t bytes)
{
    uint64_t pos = 0, rows = 0, sum_bytes = 0;
    bdb_partition_stat prev = {0};
    for (uint64_t i = 0; i < b->nparts; i++) {
        bdb_partition_stat st;
        if (read_part(b, &pos, &st) != 0) return "bad partition record";
        if (i > 0) {
            int c = bdb_series_key_cmp(&prev.key, &st.key);
            if (c > 0 || (c == 0 && prev.bucket_start >= st.bucket_start))
                return "partitions out of order";
        }
        if (st.rows > b->meta.nsamples - rows || st.bytes > bytes - sum_bytes)
            return "partition sums exceed totals";
        rows += st.rows;
        sum_bytes += st.bytes;
        prev = st;
    }
    if (pos != b->parts_len) return "partition table has trailing bytes";
    if (rows != b->meta.nsamples || sum_bytes != bytes) return "partition sums differ from totals";
    return NULL;
}

/* Checks the footer's region arithmetic against the file size, overflow-safely.
 * Returns NULL or the reason. */
static const char *check_footer(bdb_block *b, const uint8_t *ft)
{
    if (memcmp(ft + F_MAGIC_AT, BLK_FOOTER_MAGIC, BLK_FOOTER_MAGIC_LEN) != 0)
        return "bad footer magic";
    if (crc_update(0, ft, F_FOOTER_CRC_AT) != bdb_get_u32le(ft + F_FOOTER_CRC_AT))
        return "footer CRC mismatch";
    if (bdb_get_u32le(ft + F_VERSION_AT) != BLK_VERSION) return "unsupported version";
    uint64_t f[F_NFIELDS];
    for (int i = 0; i < F_NFIELDS; i++)
        f[i] = bdb_get_u64le(ft + 8 * i);
    uint64_t index_end = b->map_len - BLK_FOOTER_SIZE;
    if (f[F_INDEX_OFF] < BLK_HEADER_SIZE || f[F_INDEX_OFF] > index_end)
        return "index offset out of range";
    uint64_t left = index_end - f[F_INDEX_OFF];
    if (f[F_SERIES_LEN] > left || f[F_OFFSETS_OFF] != f[F_INDEX_OFF] + f[F_SERIES_LEN])
        return "series table out of range";
    left -= f[F_SERIES_LEN];
    if (f[F_NSERIES] > left / 8 || f[F_CHUNKS_OFF] != f[F_OFFSETS_OFF] + 8 * f[F_NSERIES])
        return "offset table out of range";
    left -= 8 * f[F_NSERIES];
    if (f[F_NCHUNKS] > left / BLK_CHUNK_ENTRY ||
        f[F_PARTS_OFF] != f[F_CHUNKS_OFF] + BLK_CHUNK_ENTRY * f[F_NCHUNKS])
        return "chunk table out of range";
    left -= BLK_CHUNK_ENTRY * f[F_NCHUNKS];
    if (f[F_PARTS_LEN] != left) return "partition table out of range";
    if ((int64_t)f[F_WINDOW_START] >= (int64_t)f[F_WINDOW_END]) return "empty window";

    b->data_end = f[F_INDEX_OFF];
    b->series = b->map + f[F_INDEX_OFF];
    b->series_len = f[F_SERIES_LEN];
    b->offsets = b->map + f[F_OFFSETS_OFF];
    b->chunks = b->map + f[F_CHUNKS_OFF];
    b->parts = b->map + f[F_PARTS_OFF];
    b->parts_len = f[F_PARTS_LEN];
    b->nparts = f[F_NPARTS];
    b->meta = (bdb_block_meta){
        .version = BLK_VERSION,
        .window_start = (int64_t)f[F_WINDOW_START],
        .window_end = (int64_t)f[F_WINDOW_END],
        .min_ts = (int64_t)f[F_MIN_TS],
        .max_ts = (int64_t)f[F_MAX_TS],
        .nseries = f[F_NSERIES],
        .nchunks = f[F_NCHUNKS],
        .nsamples = f[F_NSAMPLES],
        .file_bytes = b->map_len,
        .seq = f[F_SEQ],
    };
    if (crc_update(0, b->series, index_end - f[F_INDEX_OFF]) != bdb_get_u32le(ft + F_INDEX_CRC_AT))
        return "index CRC mismatch";
    return NULL;
}

static const char *check_header(const bdb_block *b)
{
    const uint8_t *h = b->map;
    if (memcmp(h, BLK_MAGIC, BLK_MAGIC_LEN) != 0) return "bad header magic";
    if (crc_update(0, h, 32) != bdb_get_u32le(h + 32)) return "header CRC mismatch";
    if ((h[6] | h[7] << 8) != BLK_VERSION ||
        (int64_t)bdb_get_u64le(h + 8) != b->meta.window_start ||
        (int64_t)bdb_get_u64le(h + 16) != b->meta.window_end ||
        bdb_get_u64le(h + 24) != b->meta.seq)
        return "header disagrees with footer";
    return NULL;
}

static const char *validate(bdb_block *b)
{
    if (b->map_len < BLK_HEADER_SIZE + BLK_FOOTER_SIZE) return "file too short";
    const char *why = check_footer(b, b->map + b->map_len - BLK_FOOTER_SIZE);
    if (!why) why = check_header(b);
    uint64_t bytes = 0, samples = 0;
    int64_t min_ts, max_ts;
    if (!why) why = check_chunks(b, &bytes, &samples, &min_ts, &max_ts);
    if (!why &&
        (samples != b->meta.nsamples || min_ts != b->meta.min_ts || max_ts != b->meta.max_ts))
        why = "footer totals disagree with chunk table";
    if (!why) why = check_series(b);
    if (!why) why = check_parts(b, bytes);
    return why;
}

int bdb_block_open(bdb_vfs *vfs, const char *path, bdb_block **out)
{
    if (!vfs || !path || !out) return BDB_ERR_INVALID;
    bdb_block *b = calloc(1, sizeof *b);
    if (!b) return BDB_ERR_NOMEM;
    int rc = bdb_vfs_open(vfs, path, BDB_O_RDONLY, &b->f);
    if (rc != BDB_OK) {
        free(b);
        return rc;
    }
    /* Reject short files before mapping: an empty file has no mapping to check. */
    uint64_t size = 0;
    rc = bdb_file_size(b->f, &size);
    if (rc == BDB_OK && size < BLK_HEADER_SIZE + BLK_FOOTER_SIZE) {
        BDB_WARN("block %s is corrupt: file too short (%llu bytes)", path,
                 (unsigned long long)size);
        rc = BDB_ERR_CORRUPT;
    }
    const void *p = NULL;
    size_t len = 0;
    if (rc == BDB_OK) rc = bdb_file_map(b->f, &p, &len);
    if (rc != BDB_OK) {
        bdb_file_close(b->f);
        free(b);
        return rc;
    }
    b->map = p;
    b->map_len = p ? len : 0;
    const char *why = validate(b);
    if (why) {
        BDB_WARN("block %s is corrupt: %s", path, why);
        bdb_block_close(b);
        return BDB_ERR_CORRUPT;
    }
    *out = b;
    return BDB_OK;
}

void bdb_block_close(bdb_block *b)
{
    if (!b) return;
    if (b->map) bdb_file_unmap(b->f, b->map, b->map_len);
    bdb_file_close(b->f);
    free(b);
}

const bdb_block_meta *bdb_block_get_meta(const bdb_block *b)
{
    return &b->meta;
}

/* First series position whose key is >= k. */
static size_t lower_bound(const bdb_block *b, const bdb_series_key *k, int *corrupt)
{
    uint64_t lo = 0, hi = b->meta.nseries;
    *corrupt = 0;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        bdb_series_key mk;
        uint64_t first, n;
        if (read_series(b, mid, &mk, &first, &n) != 0) {
            *corrupt = 1;
            return (size_t)b->meta.nseries;
        }
        if (bdb_series_key_cmp(&mk, k) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (size_t)lo;
}

int bdb_block_find(const bdb_block *b, const bdb_series_key *key, size_t *first, size_t *n)
{
    if (!b || !key || !key_valid(key)) return BDB_ERR_INVALID;
    int corrupt;
    size_t pos = lower_bound(b, key, &corrupt);
    if (corrupt) return BDB_ERR_CORRUPT;
    bdb_series_key k;
    uint64_t f, cnt;
    if (pos >= b->meta.nseries) return BDB_ERR_NOTFOUND;
    if (read_series(b, pos, &k, &f, &cnt) != 0) return BDB_ERR_CORRUPT;
    if (bdb_series_key_cmp(&k, key) != 0) return BDB_ERR_NOTFOUND;
    *first = (size_t)f;
    *n = (size_t)cnt;
    return BDB_OK;
}

int bdb_block_chunk(const bdb_block *b, size_t i, bdb_chunk_ref *c)
{
    if (!b || !c || i >= b->meta.nchunks) return BDB_ERR_INVALID;
    uint64_t off;
    uint32_t crc;
    bdb_chunk_ref r;
    read_chunk_entry(b, i, &r, &off, &crc);
    if (off < BLK_HEADER_SIZE || off > b->data_end || r.len + BLK_CRC_SIZE > b->data_end - off)
        return BDB_ERR_CORRUPT;
    const uint8_t *data = b->map + off;
    if (crc_update(0, data, r.len) != crc || bdb_get_u32le(data + r.len) != crc)
        return BDB_ERR_CORRUPT;
    r.data = data;
    *c = r;
    return BDB_OK;
}

int bdb_block_series_next(const bdb_block *b, size_t *pos, bdb_series_key *key, size_t *first,
                          size_t *n)
{
    uint64_t f, cnt;
    if (!b || !pos || *pos >= b->meta.nseries || read_series(b, *pos, key, &f, &cnt) != 0) return 0;
    *first = (size_t)f;
    *n = (size_t)cnt;
    (*pos)++;
    return 1;
}

size_t bdb_block_seek(const bdb_block *b, const char *tenant, size_t tlen, const char *device,
                      size_t dlen)
{
    /* (tenant, "", "") sorts before every key of that tenant, and likewise for a
     * device, so a plain lower bound finds the first match. */
    bdb_series_key k = {.tenant = tenant, .tenant_len = tlen, .device = "", .metric = ""};
    if (device) {
        k.device = device;
        k.device_len = dlen;
    }
    int corrupt;
    return lower_bound(b, &k, &corrupt);
}

int bdb_block_partition_next(const bdb_block *b, size_t *pos, bdb_partition_stat *st)
{
    if (!b || !pos || !st) return 0;
    uint64_t p = *pos;
    if (read_part(b, &p, st) != 0) return 0;
    *pos = (size_t)p;
    return 1;
}
