/* block: reading block files (format versions 2 and 3, docs/formats/block.md): series key
 * order, lookups, per-series cursors, series and partition iteration over a block that
 * block_open.c has mapped and validated. The writer is block_write.c.
 *
 * Every accessor bounds-checks what it decodes even though open proved the whole
 * index, because a mapping is only as trustworthy as the file under it. */
#include "storage/embedded/block/block_int.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"

#include <string.h>

int bdb_series_key_cmp(const bdb_series_key *a, const bdb_series_key *b)
{
    int c = bytes_cmp(a->tenant, a->tenant_len, b->tenant, b->tenant_len);
    if (!c)
        c = bytes_cmp(a->device, a->device_len, b->device, b->device_len);
    if (!c)
        c = bytes_cmp(a->metric, a->metric_len, b->metric, b->metric_len);
    return c;
}

const char *blk_str_at(const bdb_block *b, uint64_t i, size_t *n)
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
        const char *p = blk_str_at(b, mid, &len);
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

int blk_ghead_read(const bdb_block *b, uint64_t off, struct ghead *h)
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

int blk_gpos_open(const bdb_block *b, const struct ghead *h, uint64_t data, bdb_block_gpos_ *g,
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

/* Bucket idx of a group whose list blk_gpos_open has proven. */
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

int blk_ser_head(bdb_block_gpos_ *g, uint64_t *next_mid, uint64_t *mid, uint64_t *nchunks)
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

int blk_ser_walk(bdb_block_gpos_ *g, uint64_t nchunks, bdb_block_cursor *cur, struct acc *a)
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
        if (blk_ghead_read(b, bdb_get_u64le(b->sparse + BLK_SPARSE_ENTRY * mid), &h) != 0)
            return -1;
        if (blk_ghead_cmp(&h, tid, dev, dlen) < 0)
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
        if (blk_ghead_read(b, off, &h) != 0)
            return -1;
        if (blk_ghead_cmp(&h, tid, dev, dlen) >= 0)
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
    if (blk_ghead_read(b, goff, &h) != 0)
        return BDB_ERR_CORRUPT;
    if (blk_ghead_cmp(&h, tid, dev, key->device_len) != 0)
        return BDB_ERR_NOTFOUND;
    if (blk_gpos_open(b, &h, data, &g, &ns) != 0)
        return BDB_ERR_CORRUPT;
    for (uint64_t s = 0; s < ns; s++) {
        uint64_t m, n;
        if (blk_ser_head(&g, &next_mid, &m, &n) != 0)
            return BDB_ERR_CORRUPT;
        if (m > mid)
            return BDB_ERR_NOTFOUND;
        if (blk_ser_walk(&g, n, m == mid ? cur : NULL, NULL) != 0)
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
        .bare = b->meta.version >= 3 && e.len && bdb_chunk_kind(b->map[e.off]) == BDB_CHUNK_PACKED,
    };
    return 1;
}

int bdb_block_chunk_iter(const bdb_chunk_ref *c, bdb_chunk_iter *it)
{
    if (c->bare)
        return bdb_chunk_iter_init_bare(it, c->data, c->len, c->min_ts, c->count);
    return bdb_chunk_iter_init(it, c->data, c->len);
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
        if (blk_ghead_read(b, it->next_group_, &h) != 0 ||
            blk_gpos_open(b, &h, it->next_data_, &it->g_, &ns))
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
    if (blk_ser_head(&it->g_, &it->next_mid_, &mid, &n) != 0 ||
        blk_ser_walk(&it->g_, n, &c, NULL) != 0)
        return BDB_ERR_CORRUPT;
    it->series_left_--;
    size_t tlen, mlen;
    const char *t = blk_str_at(b, it->tid_, &tlen), *m = blk_str_at(b, mid, &mlen);
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
        if (blk_ghead_read(b, it->group_, &h) != 0 || blk_gpos_open(b, &h, it->data_, &g, &ns) != 0)
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
                if (blk_ser_head(&s, &next_mid, &mid, &n) != 0 ||
                    blk_ser_walk(&s, n, NULL, &a) != 0)
                    return BDB_ERR_CORRUPT;
            }
            if (a.chunks == 0)
                continue;
            size_t tlen;
            const char *t = blk_str_at(b, h.tid, &tlen);
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
