/* block: immutable time-window block files, format version 2. Layout:
 * docs/formats/block.md.
 *
 * The writer streams chunk bytes (and one CRC per series' run of chunks) to
 * `<name>.tmp` through a ~1 MiB staging buffer. It keeps the index in memory in a
 * provisional form whose tenant and metric names carry first-seen ids; finish() sorts
 * the names, re-encodes the group records with the final (sorted) ids, appends them,
 * the sparse group table, the string table and the footer, and makes the file durable
 * under its final name.
 *
 * The reader maps the file and keeps nothing but pointers into the mapping, so a
 * block with a million series costs O(1) heap. Open checks every CRC and walks the
 * whole index once to prove its structure (ordering, offsets, counts, sums, the sparse
 * table); after that every accessor still bounds-checks what it decodes, because a
 * mapping is only as trustworthy as the file under it. */
#include "storage/embedded/block.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/map.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define BLK_MAGIC "BDBBLK"
#define BLK_MAGIC_LEN 6
#define BLK_FOOTER_MAGIC "BDBBLKFT"
#define BLK_FOOTER_MAGIC_LEN 8
#define BLK_VERSION 2
#define BLK_HEADER_SIZE 36
#define BLK_FOOTER_SIZE 128
#define BLK_SPARSE_ENTRY 16 /* u64 group record offset, u64 data offset */
#define BLK_STROFF_SIZE 4
#define BLK_CRC_SIZE 4
#define BLK_STRIDE 16       /* groups per sparse-table entry, as written */
#define BLK_MAX_STRIDE 4096 /* as accepted */
#define BLK_FLUSH_AT ((size_t)1 << 20)

static const char BLK_BAD_VERSION[] = "unsupported format version";

/* Footer field offsets; the u64/i64 fields come first, in this order. */
enum {
    F_INDEX_OFF,
    F_GROUPS_LEN,
    F_NSPARSE,
    F_NSTRINGS,
    F_NGROUPS,
    F_NSERIES,
    F_NCHUNKS,
    F_NSAMPLES,
    F_WINDOW_START,
    F_WINDOW_END,
    F_MIN_TS,
    F_MAX_TS,
    F_SEQ,
    F_NFIELDS
};
#define F_VERSION_AT (F_NFIELDS * 8)
#define F_STRIDE_AT (F_VERSION_AT + 4)
#define F_INDEX_CRC_AT (F_STRIDE_AT + 4)
#define F_FOOTER_CRC_AT (F_INDEX_CRC_AT + 4)
#define F_MAGIC_AT (F_FOOTER_CRC_AT + 4)
_Static_assert(F_MAGIC_AT + BLK_FOOTER_MAGIC_LEN == BLK_FOOTER_SIZE, "footer layout");

static uint32_t crc_update(uint32_t crc, const void *p, size_t n)
{
    /* zlib returns the initial value, not crc, for a NULL buffer. */
    if (n == 0)
        return crc;
    return (uint32_t)crc32_z(crc, p, n);
}

static int bytes_cmp(const char *a, size_t an, const char *b, size_t bn)
{
    size_t n = an < bn ? an : bn;
    int c = n ? memcmp(a, b, n) : 0;
    if (c)
        return c < 0 ? -1 : 1;
    return an < bn ? -1 : an > bn;
}

int bdb_series_key_cmp(const bdb_series_key *a, const bdb_series_key *b)
{
    int c = bytes_cmp(a->tenant, a->tenant_len, b->tenant, b->tenant_len);
    if (!c)
        c = bytes_cmp(a->device, a->device_len, b->device, b->device_len);
    if (!c)
        c = bytes_cmp(a->metric, a->metric_len, b->metric, b->metric_len);
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
    char *p = bdb_malloc(n);
    if (p)
        snprintf(p, n, "%s/%s%s", dir, name, suffix);
    return p;
}

/* Zigzag over two's complement bits: differences are computed modulo 2^64 and the
 * reader adds them back modulo 2^64, so every int64 pair round-trips. */
static uint64_t zz_enc(uint64_t v)
{
    return (v << 1) ^ (0 - (v >> 63));
}

static uint64_t zz_dec(uint64_t u)
{
    return (u >> 1) ^ (0 - (u & 1));
}

/* A bounds-checked LEB128 reader. A failed read sets err, moves to the end, and
 * returns 0, so every later read fails too; check err once after a group of reads. */
typedef struct rd {
    const uint8_t *p, *end;
    int err;
} rd;

static inline uint64_t rd_uv(rd *r)
{
    if (r->p < r->end && *r->p < 0x80)
        return *r->p++;
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64 && r->p < r->end; shift += 7) {
        uint8_t c = *r->p++;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            return v;
    }
    r->err = 1;
    r->p = r->end;
    return 0;
}

static inline uint64_t rd_zz(rd *r)
{
    return zz_dec(rd_uv(r));
}

static const char *rd_str(rd *r, size_t *n)
{
    uint64_t len = rd_uv(r);
    if (r->err || len > (uint64_t)(r->end - r->p)) {
        r->err = 1;
        r->p = r->end;
        *n = 0;
        return "";
    }
    const char *s = (const char *)r->p;
    r->p += len;
    *n = (size_t)len;
    return s;
}

/* ---- writer ---- */

/* A chunk of the open group, kept until the group ends: its entry encoding needs the
 * group's bucket list. */
struct wchunk {
    int64_t bucket, min_ts, max_ts;
    uint32_t count, len;
};

struct wseries {
    uint32_t metric; /* provisional name id */
    uint64_t nchunks;
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

    /* Distinct tenant and metric names, ids in first-seen order. */
    bdb_map *name_ids; /* name -> id + 1 */
    bdb_buf names;     /* the names back to back */
    uint64_t *name_off;
    uint32_t *name_len;
    uint32_t nnames, names_cap;

    bdb_buf groups; /* finished groups in provisional form (w_end_group) */
    uint64_t ngroups;
    bdb_buf scratch;

    int have_series;
    bdb_buf last;            /* tenant | device | metric of the open series */
    bdb_series_key last_key; /* lengths only; pointers are rebuilt from `last` */
    int64_t last_min_ts;
    uint32_t tenant_id, metric_id; /* of the open series */
    uint32_t run_crc;              /* CRC of the open series' chunk bytes so far */
    uint64_t run_n;                /* its chunks so far */

    struct wchunk *gc; /* chunks of the open group */
    size_t ngc, gc_cap;
    struct wseries *gs; /* finished series of the open group */
    size_t ngs, gs_cap;
    int64_t *bk; /* distinct buckets of the open group, sorted */
    size_t nbk, bk_cap;
    uint64_t gdata; /* data bytes of the open group so far */

    uint64_t nseries, nchunks, nsamples;
    int64_t min_ts, max_ts;
};

/* The writer's buffers are checked (common/buf.h): an append dropped for lack of
 * memory fails the writer before any of its bytes reach the file. */
static int w_mem(const bdb_block_writer *w)
{
    return w->out.oom || w->names.oom || w->groups.oom || w->scratch.oom || w->last.oom
               ? BDB_ERR_NOMEM
               : BDB_OK;
}

static int w_flush(bdb_block_writer *w)
{
    if (w_mem(w) != BDB_OK)
        return w->err = BDB_ERR_NOMEM;
    if (w->out.len == 0)
        return BDB_OK;
    int rc = bdb_file_pwrite(w->f, w->out.data, w->out.len, w->flushed);
    if (rc != BDB_OK)
        return w->err = rc;
    w->flushed += w->out.len;
    bdb_buf_reset(&w->out);
    return BDB_OK;
}

/* One pwrite per ~1 MiB: small pieces are staged, large ones bypass the copy. */
static int w_write(bdb_block_writer *w, const void *p, size_t n)
{
    if (n == 0)
        return BDB_OK;
    if (w->err)
        return w->err;
    if (w->out.len + n > BLK_FLUSH_AT) {
        int rc = w_flush(w);
        if (rc != BDB_OK)
            return rc;
        if (n >= BLK_FLUSH_AT) {
            rc = bdb_file_pwrite(w->f, p, n, w->flushed);
            if (rc != BDB_OK)
                return w->err = rc;
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
    bdb_map_free(w->name_ids);
    bdb_buf_free(&w->names);
    free(w->name_off);
    free(w->name_len);
    bdb_buf_free(&w->groups);
    bdb_buf_free(&w->scratch);
    bdb_buf_free(&w->last);
    free(w->gc);
    free(w->gs);
    free(w->bk);
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

/* Grows *v (of element size sz) so that one more element fits. */
static int grow(void **v, size_t *cap, size_t n, size_t sz)
{
    if (n < *cap)
        return BDB_OK;
    size_t c = *cap ? *cap * 2 : 16;
    void *p = bdb_realloc(*v, c * sz);
    if (!p)
        return BDB_ERR_NOMEM;
    *v = p;
    *cap = c;
    return BDB_OK;
}

/* The id of a tenant or metric name, adding it if new. */
static int w_intern(bdb_block_writer *w, const char *s, size_t n, uint32_t *id)
{
    if (!n)
        s = "";
    uint64_t h = bdb_hash(s, n);
    void *v = bdb_map_get_h(w->name_ids, s, n, h);
    if (v) {
        *id = (uint32_t)((uintptr_t)v - 1);
        return BDB_OK;
    }
    /* String offsets in the file are u32. */
    if (n > UINT32_MAX - w->names.len || w->nnames == UINT32_MAX - 1)
        return BDB_ERR_LIMIT;
    if (w->nnames == w->names_cap) {
        uint32_t cap = w->names_cap ? w->names_cap * 2 : 64;
        if (cap < w->names_cap)
            cap = UINT32_MAX;
        uint64_t *o = bdb_realloc(w->name_off, (size_t)cap * sizeof *o);
        if (!o)
            return BDB_ERR_NOMEM;
        w->name_off = o;
        uint32_t *l = bdb_realloc(w->name_len, (size_t)cap * sizeof *l);
        if (!l)
            return BDB_ERR_NOMEM;
        w->name_len = l;
        w->names_cap = cap;
    }
    w->name_off[w->nnames] = w->names.len;
    w->name_len[w->nnames] = (uint32_t)n;
    bdb_buf_append(&w->names, s, n);
    *id = w->nnames++;
    if (bdb_map_set_h(w->name_ids, s, n, h, (void *)(uintptr_t)(*id + 1)) != BDB_OK || w->names.oom)
        return w->err = BDB_ERR_NOMEM;
    return BDB_OK;
}

static void w_end_series(bdb_block_writer *w)
{
    uint8_t trailer[BLK_CRC_SIZE];
    bdb_put_u32le(trailer, w->run_crc);
    w_write(w, trailer, sizeof trailer); /* an error sticks in w->err */
    w->gs[w->ngs++] = (struct wseries){w->metric_id, w->run_n};
    w->gdata += BLK_CRC_SIZE;
    w->nseries++;
}

static size_t bucket_index(const int64_t *bk, size_t n, int64_t bucket)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (bk[mid] < bucket)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Appends the finished device group to w->groups in provisional form:
 *   uvarint tenant_id | str device | uvarint data_len | uvarint nseries |
 *   uvarint nbuckets | uvarint bucket_list_len | bucket list |
 *   per series: uvarint metric_id | uvarint entries_len | entries
 * where the bucket list and entries (uvarint nchunks, then the chunk entries) are
 * already in their final encoding (docs/formats/block.md, "Group records"). */
static void w_end_group(bdb_block_writer *w)
{
    bdb_series_key k;
    w_key(w, &k);
    bdb_buf *o = &w->groups, *s = &w->scratch;
    bdb_buf_put_uvarint(o, w->tenant_id);
    bdb_buf_put_str(o, k.device, k.device_len);
    bdb_buf_put_uvarint(o, w->gdata);
    bdb_buf_put_uvarint(o, w->ngs);
    bdb_buf_put_uvarint(o, w->nbk);
    bdb_buf_reset(s);
    for (size_t i = 0; i < w->nbk; i++) {
        if (i == 0)
            bdb_buf_put_uvarint(s, zz_enc((uint64_t)w->bk[0] - (uint64_t)w->window_start));
        else
            bdb_buf_put_uvarint(s, (uint64_t)w->bk[i] - (uint64_t)w->bk[i - 1] - 1);
    }
    bdb_buf_put_uvarint(o, s->len);
    bdb_buf_append(o, s->data, s->len);

    uint64_t first_min = (uint64_t)w->window_start, span = 0, count = 0;
    size_t ci = 0;
    for (size_t si = 0; si < w->ngs; si++) {
        bdb_buf_reset(s);
        bdb_buf_put_uvarint(s, w->gs[si].nchunks);
        uint64_t prev_min = 0;
        for (uint64_t j = 0; j < w->gs[si].nchunks; j++, ci++) {
            const struct wchunk *c = &w->gc[ci];
            uint64_t min = (uint64_t)c->min_ts, sp = (uint64_t)c->max_ts - min;
            if (w->nbk > 1)
                bdb_buf_put_uvarint(s, bucket_index(w->bk, w->nbk, c->bucket));
            if (j == 0) {
                bdb_buf_put_uvarint(s, zz_enc(min - first_min));
                first_min = min;
            } else {
                bdb_buf_put_uvarint(s, min - prev_min - 1);
            }
            bdb_buf_put_uvarint(s, zz_enc(sp - span));
            bdb_buf_put_uvarint(s, zz_enc((uint64_t)c->count - count));
            bdb_buf_put_uvarint(s, c->len);
            prev_min = min;
            span = sp;
            count = c->count;
        }
        bdb_buf_put_uvarint(o, w->gs[si].metric);
        bdb_buf_put_uvarint(o, s->len);
        bdb_buf_append(o, s->data, s->len);
    }
    w->ngroups++;
    w->ngc = w->ngs = w->nbk = 0;
    w->gdata = 0;
}

int bdb_block_writer_open(bdb_vfs *vfs, const char *dir, const char *name, int64_t window_start,
                          int64_t window_end, uint64_t seq, bdb_block_writer **out)
{
    if (!vfs || !dir || !name || !*name || !out || window_start >= window_end)
        return BDB_ERR_INVALID;
    bdb_block_writer *w = bdb_calloc(1, sizeof *w);
    if (!w)
        return BDB_ERR_NOMEM;
    w->vfs = vfs;
    w->window_start = window_start;
    w->window_end = window_end;
    w->seq = seq;
    w->min_ts = INT64_MAX;
    w->max_ts = INT64_MIN;
    w->out.checked = w->names.checked = w->groups.checked = w->scratch.checked = 1;
    w->last.checked = 1;
    w->name_ids = bdb_map_new();
    w->dir = bdb_strdup(dir);
    w->tmp_path = path_join(dir, name, ".tmp");
    w->final_path = path_join(dir, name, "");
    if (!w->name_ids || !w->dir || !w->tmp_path || !w->final_path) {
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
    if (!w || !key || !c || !key_valid(key) || (!c->data && c->len) || c->len > UINT32_MAX ||
        key->tenant_len > UINT32_MAX || key->device_len > UINT32_MAX ||
        key->metric_len > UINT32_MAX)
        return BDB_ERR_INVALID;
    if (w->err)
        return w->err;
    if (c->min_ts > c->max_ts || c->min_ts < w->window_start || c->max_ts >= w->window_end)
        return BDB_ERR_INVALID;

    /* Validate and reserve everything before changing any state, so a rejected chunk
     * leaves the writer usable. */
    int new_series = 1, new_device = 1;
    if (w->have_series) {
        bdb_series_key last;
        w_key(w, &last);
        int cmp = bdb_series_key_cmp(key, &last);
        if (cmp < 0)
            return BDB_ERR_INVALID;
        if (cmp == 0 && c->min_ts <= w->last_min_ts)
            return BDB_ERR_INVALID;
        new_series = cmp > 0;
        new_device = new_series && !same_device(key, &last);
    }
    uint32_t tid = w->tenant_id, mid = w->metric_id;
    int rc = BDB_OK;
    if (new_device)
        rc = w_intern(w, key->tenant, key->tenant_len, &tid);
    if (rc == BDB_OK && new_series)
        rc = w_intern(w, key->metric, key->metric_len, &mid);
    if (rc == BDB_OK)
        rc = grow((void **)&w->gc, &w->gc_cap, w->ngc, sizeof *w->gc);
    if (rc == BDB_OK)
        rc = grow((void **)&w->gs, &w->gs_cap, w->ngs + 1, sizeof *w->gs); /* see below */
    if (rc == BDB_OK)
        rc = grow((void **)&w->bk, &w->bk_cap, w->nbk, sizeof *w->bk);
    /* gs has room for two: the series this add may end, and the one finish ends. */
    if (rc != BDB_OK)
        return rc; /* an unused name in the table is harmless */

    if (new_series) {
        if (w->have_series) {
            w_end_series(w);
            if (new_device)
                w_end_group(w);
        }
        bdb_buf_reset(&w->last);
        bdb_buf_append(&w->last, key->tenant, key->tenant_len);
        bdb_buf_append(&w->last, key->device, key->device_len);
        bdb_buf_append(&w->last, key->metric, key->metric_len);
        w->last_key = *key;
        w->have_series = 1;
        w->tenant_id = tid;
        w->metric_id = mid;
        w->run_crc = 0;
        w->run_n = 0;
    }
    w->last_min_ts = c->min_ts;

    size_t bi = bucket_index(w->bk, w->nbk, c->bucket_start);
    if (bi == w->nbk || w->bk[bi] != c->bucket_start) {
        memmove(&w->bk[bi + 1], &w->bk[bi], (w->nbk - bi) * sizeof *w->bk);
        w->bk[bi] = c->bucket_start;
        w->nbk++;
    }
    w->gc[w->ngc++] =
        (struct wchunk){c->bucket_start, c->min_ts, c->max_ts, c->count, (uint32_t)c->len};
    w->run_crc = crc_update(w->run_crc, c->data, c->len);
    w->run_n++;
    w->gdata += c->len;
    w->nchunks++;
    w->nsamples += c->count;
    if (c->min_ts < w->min_ts)
        w->min_ts = c->min_ts;
    if (c->max_ts > w->max_ts)
        w->max_ts = c->max_ts;
    rc = w_write(w, c->data, c->len);
    if (rc == BDB_OK && w_mem(w) != BDB_OK)
        rc = w->err = BDB_ERR_NOMEM;
    return rc;
}

struct name_ref {
    const char *p;
    uint32_t len, id;
};

static int name_ref_cmp(const void *a, const void *b)
{
    const struct name_ref *x = a, *y = b;
    return bytes_cmp(x->p, x->len, y->p, y->len);
}

/* Appends index bytes to the file and to the running index CRC. */
static int w_index(bdb_block_writer *w, uint32_t *crc, const void *p, size_t n)
{
    *crc = crc_update(*crc, p, n);
    return w_write(w, p, n);
}

/* Re-encodes the provisional groups with final name ids and writes the index. */
static int w_write_groups(bdb_block_writer *w, const uint32_t *rank, uint32_t *icrc,
                          bdb_buf *sparse, uint64_t *groups_len)
{
    rd r = {w->groups.data, w->groups.data + w->groups.len, 0};
    bdb_buf body = {.checked = 1}, head = {.checked = 1};
    uint64_t goff = 0, data = BLK_HEADER_SIZE;
    int rc = BDB_OK;
    for (uint64_t g = 0; g < w->ngroups && rc == BDB_OK; g++) {
        if (g % BLK_STRIDE == 0) {
            bdb_buf_put_u64le(sparse, goff);
            bdb_buf_put_u64le(sparse, data);
        }
        uint64_t tid = rd_uv(&r);
        size_t dlen;
        const char *dev = rd_str(&r, &dlen);
        uint64_t gdata = rd_uv(&r), ns = rd_uv(&r), nb = rd_uv(&r);
        size_t bl_len;
        const char *bl = rd_str(&r, &bl_len);
        bdb_buf_reset(&body);
        bdb_buf_put_uvarint(&body, ns);
        bdb_buf_put_uvarint(&body, nb);
        bdb_buf_append(&body, bl, bl_len);
        uint64_t next_mid = 0;
        for (uint64_t s = 0; s < ns; s++) {
            uint64_t mid = rank[rd_uv(&r)];
            size_t elen;
            const char *e = rd_str(&r, &elen);
            bdb_buf_put_uvarint(&body, mid - next_mid); /* metrics strictly increase */
            next_mid = mid + 1;
            bdb_buf_append(&body, e, elen);
        }
        bdb_buf_reset(&head);
        bdb_buf_put_uvarint(&head, rank[tid]);
        bdb_buf_put_str(&head, dev, dlen);
        bdb_buf_put_uvarint(&head, body.len);
        bdb_buf_put_uvarint(&head, gdata);
        rc = w_index(w, icrc, head.data, head.len);
        if (rc == BDB_OK)
            rc = w_index(w, icrc, body.data, body.len);
        goff += head.len + body.len;
        data += gdata;
    }
    if (rc == BDB_OK && (body.oom || head.oom))
        rc = BDB_ERR_NOMEM;
    bdb_buf_free(&body);
    bdb_buf_free(&head);
    if (rc == BDB_OK && r.err)
        rc = BDB_ERR_CORRUPT; /* cannot happen: we wrote it */
    *groups_len = goff;
    return rc;
}

static int w_write_index(bdb_block_writer *w, uint64_t *file_bytes, uint64_t *index_bytes)
{
    if (w->have_series) {
        w_end_series(w);
        w_end_group(w);
        w->have_series = 0;
    }
    if (w_mem(w) != BDB_OK)
        return w->err = BDB_ERR_NOMEM;
    if (w->err)
        return w->err;
    uint64_t index_off = w_pos(w);

    /* Final name ids follow the names' byte order. */
    struct name_ref *ord = bdb_malloc(((size_t)w->nnames + 1) * sizeof *ord);
    uint32_t *rank = bdb_malloc(((size_t)w->nnames + 1) * sizeof *rank);
    if (!ord || !rank) {
        free(ord);
        free(rank);
        return BDB_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < w->nnames; i++)
        ord[i] = (struct name_ref){(const char *)w->names.data + w->name_off[i], w->name_len[i], i};
    if (w->nnames > 1)
        qsort(ord, w->nnames, sizeof *ord, name_ref_cmp);
    for (uint32_t i = 0; i < w->nnames; i++)
        rank[ord[i].id] = i;

    uint32_t icrc = 0;
    uint64_t groups_len = 0;
    bdb_buf sparse = {.checked = 1}, stroffs = {.checked = 1};
    int rc = w_write_groups(w, rank, &icrc, &sparse, &groups_len);
    if (rc == BDB_OK && sparse.oom)
        rc = BDB_ERR_NOMEM;
    if (rc == BDB_OK)
        rc = w_index(w, &icrc, sparse.data, sparse.len);
    uint32_t soff = 0;
    for (uint32_t i = 0; i < w->nnames; i++) {
        bdb_buf_put_u32le(&stroffs, soff);
        soff += ord[i].len;
    }
    if (rc == BDB_OK && stroffs.oom)
        rc = BDB_ERR_NOMEM;
    if (rc == BDB_OK)
        rc = w_index(w, &icrc, stroffs.data, stroffs.len);
    for (uint32_t i = 0; i < w->nnames && rc == BDB_OK; i++)
        rc = w_index(w, &icrc, ord[i].p, ord[i].len);
    uint64_t nsparse = sparse.len / BLK_SPARSE_ENTRY;
    bdb_buf_free(&sparse);
    bdb_buf_free(&stroffs);
    free(ord);
    free(rank);
    if (rc != BDB_OK)
        return rc;

    uint64_t f[F_NFIELDS];
    f[F_INDEX_OFF] = index_off;
    f[F_GROUPS_LEN] = groups_len;
    f[F_NSPARSE] = nsparse;
    f[F_NSTRINGS] = w->nnames;
    f[F_NGROUPS] = w->ngroups;
    f[F_NSERIES] = w->nseries;
    f[F_NCHUNKS] = w->nchunks;
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
    bdb_put_u32le(ft + F_STRIDE_AT, BLK_STRIDE);
    bdb_put_u32le(ft + F_INDEX_CRC_AT, icrc);
    bdb_put_u32le(ft + F_FOOTER_CRC_AT, crc_update(0, ft, F_FOOTER_CRC_AT));
    memcpy(ft + F_MAGIC_AT, BLK_FOOTER_MAGIC, BLK_FOOTER_MAGIC_LEN);
    rc = w_write(w, ft, sizeof ft);
    if (rc == BDB_OK)
        rc = w_flush(w);
    *file_bytes = w_pos(w);
    *index_bytes = *file_bytes - BLK_FOOTER_SIZE - index_off;
    return rc;
}

int bdb_block_writer_finish(bdb_block_writer *w, bdb_block_meta *meta)
{
    if (!w)
        return BDB_ERR_INVALID;
    uint64_t file_bytes = 0, index_bytes = 0;
    int rc = w->err;
    if (rc == BDB_OK)
        rc = w_write_index(w, &file_bytes, &index_bytes);
    if (rc == BDB_OK)
        rc = bdb_file_sync(w->f);
    int close_rc = bdb_file_close(w->f);
    w->f = NULL;
    if (rc == BDB_OK)
        rc = close_rc;
    int renamed = 0;
    if (rc == BDB_OK) {
        rc = bdb_vfs_rename(w->vfs, w->tmp_path, w->final_path);
        renamed = rc == BDB_OK;
    }
    if (rc == BDB_OK)
        rc = bdb_vfs_sync_dir(w->vfs, w->dir);
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
            .index_bytes = index_bytes,
            .seq = w->seq,
        };
    }
    w_free(w);
    return BDB_OK;
}

void bdb_block_writer_abort(bdb_block_writer *w)
{
    if (!w)
        return;
    int saved = errno;
    if (w->f)
        bdb_file_close(w->f);
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
    const uint8_t *groups;
    uint64_t groups_len, ngroups;
    const uint8_t *sparse;
    uint64_t nsparse, stride;
    const uint8_t *stroffs;
    uint64_t nstrings;
    const uint8_t *strs;
    uint64_t strs_len;
    bdb_block_meta meta;
};

/* Name i of the string table, or NULL if its slot is out of range. */
static const char *str_at(const bdb_block *b, uint64_t i, size_t *n)
{
    if (i >= b->nstrings)
        return NULL;
    uint64_t off = bdb_get_u32le(b->stroffs + BLK_STROFF_SIZE * i);
    uint64_t end =
        i + 1 < b->nstrings ? bdb_get_u32le(b->stroffs + BLK_STROFF_SIZE * (i + 1)) : b->strs_len;
    if (off > end || end > b->strs_len)
        return NULL;
    *n = (size_t)(end - off);
    return (const char *)b->strs + off;
}

/* First name id >= s (nstrings if none); *exact if it equals s. -1 if damaged. */
static int str_lower_bound(const bdb_block *b, const char *s, size_t n, uint64_t *id, int *exact)
{
    uint64_t lo = 0, hi = b->nstrings;
    *exact = 0;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        size_t len;
        const char *p = str_at(b, mid, &len);
        if (!p)
            return -1;
        int c = bytes_cmp(p, len, s, n);
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
            if (c == 0)
                *exact = 1;
        }
    }
    *id = lo;
    return 0;
}

/* A group record's header: who it is, where its body and data are. */
struct ghead {
    uint64_t tid;
    const char *dev;
    size_t dev_len;
    uint64_t data_len;
    const uint8_t *body, *end;
    uint64_t next; /* offset of the next record in the group table */
};

static int ghead_read(const bdb_block *b, uint64_t off, struct ghead *h)
{
    if (off >= b->groups_len)
        return -1;
    rd r = {b->groups + off, b->groups + b->groups_len, 0};
    h->tid = rd_uv(&r);
    h->dev = rd_str(&r, &h->dev_len);
    uint64_t blen = rd_uv(&r);
    h->data_len = rd_uv(&r);
    if (r.err || h->tid >= b->nstrings || blen > (uint64_t)(r.end - r.p))
        return -1;
    h->body = r.p;
    h->end = r.p + blen;
    h->next = (uint64_t)(h->end - b->groups);
    return 0;
}

static int ghead_cmp(const struct ghead *h, uint64_t tid, const char *dev, size_t dlen)
{
    if (h->tid != tid)
        return h->tid < tid ? -1 : 1;
    return bytes_cmp(h->dev, h->dev_len, dev, dlen);
}

/* Starts decoding a group body whose data begins at file offset data: reads the
 * series count and proves the bucket list (strictly increasing, no overflow). */
static int gpos_open(const bdb_block *b, const struct ghead *h, uint64_t data, bdb_block_gpos_ *g,
                     uint64_t *nseries)
{
    if (data < BLK_HEADER_SIZE || data > b->data_end || h->data_len > b->data_end - data)
        return -1;
    rd r = {h->body, h->end, 0};
    *nseries = rd_uv(&r);
    uint64_t nb = rd_uv(&r);
    const uint8_t *list = r.p;
    uint64_t prev = 0;
    for (uint64_t i = 0; i < nb && !r.err; i++) {
        if (i == 0) {
            prev = (uint64_t)b->meta.window_start + rd_zz(&r);
        } else {
            uint64_t d = rd_uv(&r);
            if (d >= (uint64_t)INT64_MAX - prev) /* prev + 1 + d must stay <= INT64_MAX */
                return -1;
            prev += 1 + d;
        }
    }
    if (r.err || *nseries == 0 || nb == 0)
        return -1;
    *g = (bdb_block_gpos_){
        .b = b,
        .p = r.p,
        .end = h->end,
        .buckets = list,
        .bkt_end = r.p,
        .nbuckets = nb,
        .data_off = data,
        .first_min = (uint64_t)b->meta.window_start,
    };
    return 0;
}

/* Bucket idx of a group whose list gpos_open has proven. */
static int64_t bucket_at(const bdb_block_gpos_ *g, uint64_t idx)
{
    rd r = {g->buckets, g->bkt_end, 0};
    uint64_t v = (uint64_t)g->b->meta.window_start + rd_zz(&r);
    for (uint64_t i = 1; i <= idx; i++)
        v += 1 + rd_uv(&r);
    return (int64_t)v;
}

struct ent {
    uint64_t bucket; /* index into the group's list */
    int64_t min_ts, max_ts;
    uint32_t count;
    uint64_t off, len; /* of the chunk bytes in the file */
};

/* Decodes the next chunk entry of a series; first says whether it is the series'
 * first (then *prev_min is not read). Proves it lies in the window, in the data
 * region, and after *prev_min; advances g and *prev_min. 0 or -1. */
static int ent_next(bdb_block_gpos_ *g, int first, int64_t *prev_min, struct ent *e)
{
    const bdb_block *b = g->b;
    rd r = {g->p, g->end, 0};
    uint64_t ws = (uint64_t)b->meta.window_start, last = (uint64_t)b->meta.window_end - 1;
    uint64_t bi = g->nbuckets > 1 ? rd_uv(&r) : 0;
    uint64_t min;
    if (first) {
        min = g->first_min + rd_zz(&r);
    } else {
        uint64_t d = rd_uv(&r);
        if (d >= last - (uint64_t)*prev_min) /* prev_min + 1 + d must stay <= last */
            return -1;
        min = (uint64_t)*prev_min + 1 + d;
    }
    uint64_t span = g->span + rd_zz(&r);
    uint64_t count = g->count + rd_zz(&r);
    uint64_t len = rd_uv(&r);
    if (r.err || bi >= g->nbuckets || min - ws > last - ws || span > last - min ||
        count > UINT32_MAX || len > b->data_end - g->data_off)
        return -1;
    *e = (struct ent){bi, (int64_t)min, (int64_t)(min + span), (uint32_t)count, g->data_off, len};
    g->p = r.p;
    if (first)
        g->first_min = min;
    g->span = span;
    g->count = count;
    g->data_off += len;
    *prev_min = (int64_t)min;
    return 0;
}

/* Reads a series header: metric id (delta from the group's previous one) and chunk
 * count. */
static int ser_head(bdb_block_gpos_ *g, uint64_t *next_mid, uint64_t *mid, uint64_t *nchunks)
{
    rd r = {g->p, g->end, 0};
    uint64_t d = rd_uv(&r), n = rd_uv(&r);
    uint64_t ns = g->b->nstrings;
    if (r.err || *next_mid >= ns || d >= ns - *next_mid || n == 0)
        return -1;
    *mid = *next_mid + d;
    *next_mid = *mid + 1;
    *nchunks = n;
    g->p = r.p;
    return 0;
}

/* Sums over chunk entries: all of them (bucket == UINT64_MAX) or one bucket's. */
struct acc {
    uint64_t bucket;
    uint64_t chunks, rows, bytes;
    int64_t min_ts, max_ts;
};

/* Walks the entries of a series whose header was just read, leaving g after its run
 * CRC. Fills cur (if not NULL) to iterate the series and adds to a (if not NULL). */
static int ser_walk(bdb_block_gpos_ *g, uint64_t nchunks, bdb_block_cursor *cur, struct acc *a)
{
    bdb_block_gpos_ start = *g;
    uint64_t run_off = g->data_off;
    int64_t prev = 0;
    for (uint64_t i = 0; i < nchunks; i++) {
        struct ent e;
        if (ent_next(g, i == 0, &prev, &e) != 0)
            return -1;
        if (a && (a->bucket == UINT64_MAX || a->bucket == e.bucket)) {
            a->chunks++;
            a->rows += e.count;
            a->bytes += e.len;
            if (e.min_ts < a->min_ts)
                a->min_ts = e.min_ts;
            if (e.max_ts > a->max_ts)
                a->max_ts = e.max_ts;
        }
    }
    if (BLK_CRC_SIZE > g->b->data_end - g->data_off)
        return -1;
    uint64_t run_len = g->data_off - run_off;
    g->data_off += BLK_CRC_SIZE;
    if (cur)
        *cur = (bdb_block_cursor){.nchunks = nchunks,
                                  .g_ = start,
                                  .left_ = nchunks,
                                  .run_off_ = run_off,
                                  .run_len_ = run_len,
                                  .first_ = 1};
    return 0;
}

/* Proves the string table: every slot in range, names strictly increasing. */
static const char *check_strings(const bdb_block *b)
{
    if (b->nstrings == 0)
        return b->strs_len == 0 ? NULL : "string bytes without strings";
    if (bdb_get_u32le(b->stroffs) != 0)
        return "string table does not start at 0";
    const char *prev = NULL;
    size_t plen = 0;
    for (uint64_t i = 0; i < b->nstrings; i++) {
        size_t len;
        const char *s = str_at(b, i, &len);
        if (!s)
            return "bad string table entry";
        if (prev && bytes_cmp(prev, plen, s, len) >= 0)
            return "string table out of order";
        prev = s;
        plen = len;
    }
    return NULL;
}

/* Walks every group: records decode exactly, groups and metrics strictly increase,
 * chunk entries lie in the window and tile the data region, the sparse table points
 * at every stride-th group, and the totals equal the footer's. */
static const char *check_groups(const bdb_block *b)
{
    uint64_t off = 0, data = BLK_HEADER_SIZE, gi = 0, nseries = 0;
    struct acc tot = {.bucket = UINT64_MAX, .min_ts = INT64_MAX, .max_ts = INT64_MIN};
    struct ghead prev = {0};
    while (off < b->groups_len) {
        if (gi % b->stride == 0) {
            uint64_t k = gi / b->stride;
            if (k >= b->nsparse)
                return "sparse table too short";
            const uint8_t *e = b->sparse + BLK_SPARSE_ENTRY * k;
            if (bdb_get_u64le(e) != off || bdb_get_u64le(e + 8) != data)
                return "sparse table disagrees with the groups";
        }
        struct ghead h;
        if (ghead_read(b, off, &h) != 0)
            return "bad group record";
        if (gi > 0 && ghead_cmp(&prev, h.tid, h.dev, h.dev_len) >= 0)
            return "groups out of order";
        bdb_block_gpos_ g;
        uint64_t ns, next_mid = 0, chunks0 = tot.chunks;
        if (gpos_open(b, &h, data, &g, &ns) != 0)
            return "bad group header";
        for (uint64_t s = 0; s < ns; s++, nseries++) {
            uint64_t mid, n;
            if (ser_head(&g, &next_mid, &mid, &n) != 0 || ser_walk(&g, n, NULL, &tot) != 0)
                return "bad series record";
        }
        if (g.p != g.end)
            return "group record has trailing bytes";
        if (g.data_off - data != h.data_len)
            return "group data length disagrees with its chunks";
        if (g.nbuckets > tot.chunks - chunks0)
            return "group lists more buckets than chunks";
        prev = h;
        off = h.next;
        data += h.data_len;
        gi++;
    }
    if (gi != b->ngroups || b->nsparse != (gi + b->stride - 1) / b->stride)
        return "group count disagrees with the footer";
    if (data != b->data_end)
        return "data region has unindexed bytes";
    if (nseries != b->meta.nseries || tot.chunks != b->meta.nchunks ||
        tot.rows != b->meta.nsamples || tot.min_ts != b->meta.min_ts ||
        tot.max_ts != b->meta.max_ts)
        return "footer totals disagree with the index";
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
    b->meta.version = bdb_get_u32le(ft + F_VERSION_AT);
    if (b->meta.version != BLK_VERSION)
        return BLK_BAD_VERSION;
    uint64_t f[F_NFIELDS];
    for (int i = 0; i < F_NFIELDS; i++)
        f[i] = bdb_get_u64le(ft + 8 * i);
    uint64_t index_end = b->map_len - BLK_FOOTER_SIZE;
    if (f[F_INDEX_OFF] < BLK_HEADER_SIZE || f[F_INDEX_OFF] > index_end)
        return "index offset out of range";
    uint64_t left = index_end - f[F_INDEX_OFF];
    if (f[F_GROUPS_LEN] > left)
        return "group table out of range";
    left -= f[F_GROUPS_LEN];
    if (f[F_NSPARSE] > left / BLK_SPARSE_ENTRY)
        return "sparse table out of range";
    left -= BLK_SPARSE_ENTRY * f[F_NSPARSE];
    if (f[F_NSTRINGS] > left / BLK_STROFF_SIZE)
        return "string table out of range";
    left -= BLK_STROFF_SIZE * f[F_NSTRINGS];
    if (left > UINT32_MAX)
        return "string bytes out of range";
    uint32_t stride = bdb_get_u32le(ft + F_STRIDE_AT);
    if (stride == 0 || stride > BLK_MAX_STRIDE)
        return "bad sparse stride";
    if ((int64_t)f[F_WINDOW_START] >= (int64_t)f[F_WINDOW_END])
        return "empty window";

    b->data_end = f[F_INDEX_OFF];
    b->groups = b->map + f[F_INDEX_OFF];
    b->groups_len = f[F_GROUPS_LEN];
    b->ngroups = f[F_NGROUPS];
    b->sparse = b->groups + f[F_GROUPS_LEN];
    b->nsparse = f[F_NSPARSE];
    b->stride = stride;
    b->stroffs = b->sparse + BLK_SPARSE_ENTRY * f[F_NSPARSE];
    b->nstrings = f[F_NSTRINGS];
    b->strs = b->stroffs + BLK_STROFF_SIZE * f[F_NSTRINGS];
    b->strs_len = left;
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
        .index_bytes = index_end - f[F_INDEX_OFF],
        .seq = f[F_SEQ],
    };
    if (crc_update(0, b->groups, index_end - f[F_INDEX_OFF]) != bdb_get_u32le(ft + F_INDEX_CRC_AT))
        return "index CRC mismatch";
    return NULL;
}

static const char *check_header(const bdb_block *b)
{
    const uint8_t *h = b->map;
    if (memcmp(h, BLK_MAGIC, BLK_MAGIC_LEN) != 0)
        return "bad header magic";
    if (crc_update(0, h, 32) != bdb_get_u32le(h + 32))
        return "header CRC mismatch";
    if ((h[6] | h[7] << 8) != BLK_VERSION ||
        (int64_t)bdb_get_u64le(h + 8) != b->meta.window_start ||
        (int64_t)bdb_get_u64le(h + 16) != b->meta.window_end ||
        bdb_get_u64le(h + 24) != b->meta.seq)
        return "header disagrees with footer";
    return NULL;
}

static const char *validate(bdb_block *b)
{
    if (b->map_len < BLK_HEADER_SIZE + BLK_FOOTER_SIZE)
        return "file too short";
    const char *why = check_footer(b, b->map + b->map_len - BLK_FOOTER_SIZE);
    if (!why)
        why = check_header(b);
    if (!why)
        why = check_strings(b);
    if (!why)
        why = check_groups(b);
    return why;
}

int bdb_block_open(bdb_vfs *vfs, const char *path, bdb_block **out)
{
    if (!vfs || !path || !out)
        return BDB_ERR_INVALID;
    bdb_block *b = bdb_calloc(1, sizeof *b);
    if (!b)
        return BDB_ERR_NOMEM;
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
    if (rc == BDB_OK)
        rc = bdb_file_map(b->f, &p, &len);
    if (rc != BDB_OK) {
        bdb_file_close(b->f);
        free(b);
        return rc;
    }
    b->map = p;
    b->map_len = p ? len : 0;
    const char *why = validate(b);
    if (why == BLK_BAD_VERSION) {
        BDB_WARN("block %s has format version %u, which this build cannot read (it reads "
                 "version %d only)",
                 path, b->meta.version, BLK_VERSION);
        bdb_block_close(b);
        return BDB_ERR_CORRUPT;
    }
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
    if (!b)
        return;
    if (b->map)
        bdb_file_unmap(b->f, b->map, b->map_len);
    bdb_file_close(b->f);
    free(b);
}

const bdb_block_meta *bdb_block_get_meta(const bdb_block *b)
{
    return &b->meta;
}

/* Position (record offset, data offset) of the first group whose (tenant id, device)
 * is >= the target: binary search over the sparse table, then a scan of at most one
 * stride of groups. 0 or -1. */
static int group_lower_bound(const bdb_block *b, uint64_t tid, const char *dev, size_t dlen,
                             uint64_t *goff, uint64_t *data)
{
    uint64_t lo = 0, hi = b->nsparse;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        struct ghead h;
        if (ghead_read(b, bdb_get_u64le(b->sparse + BLK_SPARSE_ENTRY * mid), &h) != 0)
            return -1;
        if (ghead_cmp(&h, tid, dev, dlen) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint64_t off = 0, d = BLK_HEADER_SIZE;
    if (lo > 0) {
        off = bdb_get_u64le(b->sparse + BLK_SPARSE_ENTRY * (lo - 1));
        d = bdb_get_u64le(b->sparse + BLK_SPARSE_ENTRY * (lo - 1) + 8);
    }
    while (off < b->groups_len) {
        struct ghead h;
        if (ghead_read(b, off, &h) != 0)
            return -1;
        if (ghead_cmp(&h, tid, dev, dlen) >= 0)
            break;
        if (d > b->data_end || h.data_len > b->data_end - d)
            return -1;
        off = h.next;
        d += h.data_len;
    }
    *goff = off;
    *data = d;
    return 0;
}

int bdb_block_find(const bdb_block *b, const bdb_series_key *key, bdb_block_cursor *cur)
{
    if (!b || !key || !cur || !key_valid(key))
        return BDB_ERR_INVALID;
    uint64_t tid, mid;
    int exact;
    if (str_lower_bound(b, key->tenant ? key->tenant : "", key->tenant_len, &tid, &exact) != 0)
        return BDB_ERR_CORRUPT;
    if (!exact)
        return BDB_ERR_NOTFOUND;
    if (str_lower_bound(b, key->metric ? key->metric : "", key->metric_len, &mid, &exact) != 0)
        return BDB_ERR_CORRUPT;
    if (!exact)
        return BDB_ERR_NOTFOUND;
    const char *dev = key->device ? key->device : "";
    uint64_t goff, data;
    if (group_lower_bound(b, tid, dev, key->device_len, &goff, &data) != 0)
        return BDB_ERR_CORRUPT;
    if (goff >= b->groups_len)
        return BDB_ERR_NOTFOUND;
    struct ghead h;
    bdb_block_gpos_ g;
    uint64_t ns, next_mid = 0;
    if (ghead_read(b, goff, &h) != 0)
        return BDB_ERR_CORRUPT;
    if (ghead_cmp(&h, tid, dev, key->device_len) != 0)
        return BDB_ERR_NOTFOUND;
    if (gpos_open(b, &h, data, &g, &ns) != 0)
        return BDB_ERR_CORRUPT;
    for (uint64_t s = 0; s < ns; s++) {
        uint64_t m, n;
        if (ser_head(&g, &next_mid, &m, &n) != 0)
            return BDB_ERR_CORRUPT;
        if (m > mid)
            return BDB_ERR_NOTFOUND;
        if (ser_walk(&g, n, m == mid ? cur : NULL, NULL) != 0)
            return BDB_ERR_CORRUPT;
        if (m == mid)
            return BDB_OK;
    }
    return BDB_ERR_NOTFOUND;
}

int bdb_block_cursor_next(bdb_block_cursor *cur, bdb_chunk_ref *c)
{
    if (!cur || !c)
        return BDB_ERR_INVALID;
    if (cur->left_ == 0)
        return 0;
    const bdb_block *b = cur->g_.b;
    if (!b)
        return BDB_ERR_INVALID;
    uint64_t run_off = cur->run_off_, run_len = cur->run_len_;
    if (run_off < BLK_HEADER_SIZE || run_off > b->data_end || run_len > b->data_end - run_off ||
        BLK_CRC_SIZE > b->data_end - run_off - run_len)
        return BDB_ERR_CORRUPT;
    if (!cur->checked_) {
        const uint8_t *run = b->map + run_off;
        if (crc_update(0, run, (size_t)run_len) != bdb_get_u32le(run + run_len))
            return BDB_ERR_CORRUPT;
        cur->checked_ = 1;
    }
    struct ent e;
    if (ent_next(&cur->g_, cur->first_, &cur->prev_min_, &e) != 0 || e.off < run_off ||
        e.len > run_off + run_len - e.off)
        return BDB_ERR_CORRUPT;
    cur->first_ = 0;
    cur->left_--;
    *c = (bdb_chunk_ref){
        .bucket_start = bucket_at(&cur->g_, e.bucket),
        .min_ts = e.min_ts,
        .max_ts = e.max_ts,
        .count = e.count,
        .data = b->map + e.off,
        .len = (size_t)e.len,
    };
    return 1;
}

void bdb_block_iter_init(const bdb_block *b, bdb_block_iter *it)
{
    memset(it, 0, sizeof *it);
    it->g_.b = b;
    it->next_data_ = BLK_HEADER_SIZE;
}

int bdb_block_iter_seek(const bdb_block *b, bdb_block_iter *it, const char *tenant, size_t tlen,
                        const char *device, size_t dlen)
{
    if (!b || !it || (!tenant && tlen) || (!device && dlen))
        return BDB_ERR_INVALID;
    bdb_block_iter_init(b, it);
    /* Tenants are compared by name id, and ids follow name order: the lower bound of a
     * name missing from the table sorts just after it, and every group of that tenant
     * is >= (id, ""). */
    uint64_t tid, goff, data;
    int exact;
    if (str_lower_bound(b, tenant ? tenant : "", tlen, &tid, &exact) != 0)
        return BDB_ERR_CORRUPT;
    const char *dev = "";
    if (exact && device) {
        dev = device;
    } else {
        dlen = 0;
    }
    if (group_lower_bound(b, tid, dev, dlen, &goff, &data) != 0)
        return BDB_ERR_CORRUPT;
    it->next_group_ = goff;
    it->next_data_ = data;
    return BDB_OK;
}

int bdb_block_iter_next(bdb_block_iter *it, bdb_series_key *key, bdb_block_cursor *cur)
{
    if (!it || !key)
        return BDB_ERR_INVALID;
    const bdb_block *b = it->g_.b;
    if (!b)
        return 0;
    while (it->series_left_ == 0) {
        if (it->next_group_ >= b->groups_len)
            return 0;
        struct ghead h;
        uint64_t ns;
        if (ghead_read(b, it->next_group_, &h) != 0 ||
            gpos_open(b, &h, it->next_data_, &it->g_, &ns))
            return BDB_ERR_CORRUPT;
        it->tid_ = h.tid;
        it->device_ = h.dev;
        it->device_len_ = h.dev_len;
        it->series_left_ = ns;
        it->next_mid_ = 0;
        it->next_group_ = h.next;
        it->next_data_ += h.data_len;
    }
    uint64_t mid, n;
    bdb_block_cursor c;
    if (ser_head(&it->g_, &it->next_mid_, &mid, &n) != 0 || ser_walk(&it->g_, n, &c, NULL) != 0)
        return BDB_ERR_CORRUPT;
    it->series_left_--;
    size_t tlen, mlen;
    const char *t = str_at(b, it->tid_, &tlen), *m = str_at(b, mid, &mlen);
    if (!t || !m)
        return BDB_ERR_CORRUPT;
    *key = (bdb_series_key){t, tlen, it->device_, it->device_len_, m, mlen};
    if (cur)
        *cur = c;
    return 1;
}

void bdb_block_part_iter_init(const bdb_block *b, bdb_block_part_iter *it)
{
    *it = (bdb_block_part_iter){.b = b, .group_ = 0, .data_ = BLK_HEADER_SIZE, .bucket_ = 0};
}

int bdb_block_partition_next(bdb_block_part_iter *it, bdb_partition_stat *st)
{
    if (!it || !st)
        return BDB_ERR_INVALID;
    const bdb_block *b = it->b;
    if (!b)
        return 0;
    while (it->group_ < b->groups_len) {
        struct ghead h;
        bdb_block_gpos_ g;
        uint64_t ns;
        if (ghead_read(b, it->group_, &h) != 0 || gpos_open(b, &h, it->data_, &g, &ns) != 0)
            return BDB_ERR_CORRUPT;
        /* One pass over the group's entries per bucket: a group has few buckets (a
         * window spans a handful of partitions of one device) and at most as many
         * buckets as chunks, which open checked. */
        while (it->bucket_ < g.nbuckets) {
            struct acc a = {.bucket = it->bucket_++, .min_ts = INT64_MAX, .max_ts = INT64_MIN};
            bdb_block_gpos_ s = g;
            uint64_t next_mid = 0;
            for (uint64_t i = 0; i < ns; i++) {
                uint64_t mid, n;
                if (ser_head(&s, &next_mid, &mid, &n) != 0 || ser_walk(&s, n, NULL, &a) != 0)
                    return BDB_ERR_CORRUPT;
            }
            if (a.chunks == 0)
                continue;
            size_t tlen;
            const char *t = str_at(b, h.tid, &tlen);
            if (!t)
                return BDB_ERR_CORRUPT;
            *st = (bdb_partition_stat){
                .key = {t, tlen, h.dev, h.dev_len, "", 0},
                .bucket_start = bucket_at(&g, a.bucket),
                .rows = a.rows,
                .bytes = a.bytes,
            };
            return 1;
        }
        it->group_ = h.next;
        it->data_ += h.data_len;
        it->bucket_ = 0;
    }
    return 0;
}
