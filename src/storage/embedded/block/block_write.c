/* block_write: the block file writer (format version 3, docs/formats/block.md).
 *
 * The writer streams chunk bytes (and one CRC per series' run of chunks) to
 * `<name>.tmp` through a ~1 MiB staging buffer. It keeps the index in memory in a
 * provisional form whose tenant and metric names carry first-seen ids; finish() sorts
 * the names, re-encodes the group records with the final (sorted) ids, appends them,
 * the sparse group table, the string table and the footer, and makes the file durable
 * under its final name. */
#include "storage/embedded/block/block_int.h"
#include "common/alloc.h"
#include "common/path.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "common/map.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLK_FLUSH_AT ((size_t)1 << 20)

static int same_device(const bdb_series_key *a, const bdb_series_key *b)
{
    return !bytes_cmp(a->tenant, a->tenant_len, b->tenant, b->tenant_len) &&
           !bytes_cmp(a->device, a->device_len, b->device, b->device_len);
}

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
    w->tmp_path = bdb_path_join(dir, name, ".tmp");
    w->final_path = bdb_path_join(dir, name, NULL);
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
    /* A PACKED chunk is stored bare: its flags byte, then what follows its count and
     * first timestamp, which must be the entry's (the index keeps them). */
    size_t rest = 0;
    int brc = bdb_chunk_bare_offset(c->data, c->len, c->min_ts, c->count, &rest);
    if (brc == BDB_ERR_INVALID)
        return BDB_ERR_INVALID;
    const uint8_t *tail = c->data;
    size_t head_len = 0, stored = c->len;
    if (brc == BDB_OK) {
        head_len = 1;
        tail = c->data + rest;
        stored = 1 + (c->len - rest);
    }

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
        (struct wchunk){c->bucket_start, c->min_ts, c->max_ts, c->count, (uint32_t)stored};
    w->run_crc = crc_update(w->run_crc, c->data, head_len);
    w->run_crc = crc_update(w->run_crc, tail, stored - head_len);
    w->run_n++;
    w->gdata += stored;
    w->nchunks++;
    w->nsamples += c->count;
    if (c->min_ts < w->min_ts)
        w->min_ts = c->min_ts;
    if (c->max_ts > w->max_ts)
        w->max_ts = c->max_ts;
    rc = w_write(w, c->data, head_len);
    if (rc == BDB_OK)
        rc = w_write(w, tail, stored - head_len);
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
