/* db_rcache: what the engine keeps in its read cache (db->rcache, common/rcache.h) for
 * raw data: per block window ("unit") and series, the merged samples of the blocks
 * that hold the series there. Blocks never change once published, and a block's seq
 * is never taken again by another (db->next_seq only grows: a flush, a compaction or
 * a rewrite without a tenant writes a new seq), so a key naming the unit, the series
 * and the seqs of those blocks names one immutable result: it cannot go stale. A
 * flush or compaction that adds or replaces a block of the unit makes a new key; the
 * old entry is no longer asked for and leaves by eviction. The head is never cached:
 * a unit the head has samples in is read as without the cache. The 1m tier's minutes
 * (db_tier_late.c) and tier records (db_tier_file.c) are kept the same way. */
#include "storage/embedded/core/db_int.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"

#include <stdlib.h>
#include <string.h>

size_t db_blocks_from(const bdb_db *db, int64_t t)
{
    int64_t from = t < INT64_MIN + db->max_block_span ? INT64_MIN : t - db->max_block_span;
    size_t a = 0, b = db->nblocks;
    while (a < b) {
        size_t mid = a + (b - a) / 2;
        if (bdb_block_get_meta(db->blocks[mid].b)->window_start < from)
            a = mid + 1;
        else
            b = mid;
    }
    return a;
}

int db_cache_units(const bdb_db *db, int64_t lo, int64_t hi, int64_t *first, size_t *n)
{
    int64_t U = db->o.block_window_ms;
    /* far from the ends of the time line, so that no unit start overflows */
    if (!db->rcache || lo >= hi || lo < INT64_MIN / 4 || hi > INT64_MAX / 4)
        return 0;
    *first = bdb_align_down(lo, U);
    uint64_t k = (uint64_t)(hi - 1 - *first) / (uint64_t)U + 1;
    if (k > DB_CACHE_MAX_UNITS)
        return 0;
    *n = (size_t)k;
    return 1;
}

/* The part of a unit's key that does not need the block list: kind, unit, series. */
static void unit_prefix(char kind, const bdb_series_key *key, int64_t u, int64_t U, bdb_buf *k)
{
    bdb_buf_reset(k);
    bdb_buf_putc(k, (uint8_t)kind);
    bdb_buf_put_u64le(k, (uint64_t)u);
    bdb_buf_put_u64le(k, (uint64_t)U);
    bdb_buf_put_str(k, key->tenant, key->tenant_len);
    bdb_buf_put_str(k, key->device, key->device_len);
    bdb_buf_put_str(k, key->metric, key->metric_len);
}

int db_unit_admit(bdb_db *db, char kind, const bdb_series_key *key, int64_t u, int64_t U,
                  bdb_buf *k)
{
    unit_prefix(kind, key, u, U, k);
    return !k->oom && bdb_rcache_admit(db->rcache, k->data, k->len);
}

int db_unit_key(bdb_db *db, char kind, const bdb_series_key *key, int64_t u, int64_t U, bdb_buf *k)
{
    unit_prefix(kind, key, u, U, k);
    size_t nb = 0;
    for (size_t bi = db_blocks_from(db, u); bi < db->nblocks; bi++) {
        const bdb_block_meta *bm = bdb_block_get_meta(db->blocks[bi].b);
        if (bm->window_start >= u + U)
            break; /* sorted by window start */
        if (bm->window_end <= u)
            continue;
        bdb_block_cursor cur;
        if (bdb_block_find(db->blocks[bi].b, key, &cur) == BDB_ERR_NOTFOUND)
            continue;
        bdb_buf_put_u64le(k, bm->seq);
        nb++;
    }
    if (k->oom)
        return BDB_ERR_NOMEM;
    return nb ? BDB_OK : BDB_ERR_NOTFOUND;
}

/* A unit's raw samples as kept: n samples, the time range of each of the nc chunks
 * they came from (a read counts the chunks it decodes: a hit counts those that
 * overlap its range, as decoding them would), then ts[n] and v[n]. */
struct rawunit {
    uint64_t n, nc;
    /* int64_t chunk[nc][2]; int64_t ts[n]; double v[n]; */
};

static const int64_t *ru_chunks(const struct rawunit *r)
{
    return (const int64_t *)(r + 1);
}
static const int64_t *ru_ts(const struct rawunit *r)
{
    return ru_chunks(r) + 2 * r->nc;
}
static const double *ru_v(const struct rawunit *r)
{
    return (const double *)(ru_ts(r) + r->n);
}

/* Pushes the samples of r in [lo, hi) into m as a source of their own (no other source
 * has a sample in the unit) and counts its chunks overlapping [lo, hi). */
static void ru_push(const struct rawunit *r, int64_t lo, int64_t hi, db_merger *m,
                    uint64_t *nchunks)
{
    const int64_t *c = ru_chunks(r), *ts = ru_ts(r);
    const double *v = ru_v(r);
    for (uint64_t i = 0; i < r->nc; i++)
        if (!(c[2 * i + 1] < lo || c[2 * i] >= hi))
            (*nchunks)++;
    db_merger_source(m, 1, 0);
    uint64_t a = 0, b = r->n; /* the first sample at or after lo (ts ascending) */
    while (a < b) {
        uint64_t mid = a + (b - a) / 2;
        if (ts[mid] < lo)
            a = mid + 1;
        else
            b = mid;
    }
    for (uint64_t i = a; i < r->n && ts[i] < hi; i++)
        db_merger_push(m, ts[i], v[i]);
}

/* The unit's samples from its blocks, as bdb_db_read merges them (each chunk a source
 * of its block's seq), into a new rawunit; NULL when a chunk does not decode or out of
 * memory (the caller reads the unit as without the cache). Caller holds blocks_lock. */
static struct rawunit *ru_build(bdb_db *db, const bdb_series_key *key, int64_t u, int64_t U,
                                size_t *size)
{
    db_merger g;
    memset(&g, 0, sizeof g);
    int64_t *ch = NULL;
    size_t nc = 0, capc = 0;
    int rc = BDB_OK;
    for (size_t bi = db_blocks_from(db, u); bi < db->nblocks && rc == BDB_OK; bi++) {
        const bdb_block_meta *bm = bdb_block_get_meta(db->blocks[bi].b);
        if (bm->window_start >= u + U)
            break;
        if (bm->window_end <= u)
            continue;
        bdb_block_cursor cur;
        int r = bdb_block_find(db->blocks[bi].b, key, &cur);
        if (r == BDB_ERR_NOTFOUND)
            continue;
        bdb_chunk_ref c;
        while (r == BDB_OK && (r = bdb_block_cursor_next(&cur, &c)) == 1) {
            r = BDB_OK;
            if (c.max_ts < u || c.min_ts >= u + U)
                continue;
            if (nc == capc) {
                size_t cap = capc ? capc * 2 : 16;
                int64_t *p = bdb_realloc(ch, cap * 2 * sizeof *p);
                if (!p) {
                    r = BDB_ERR_NOMEM;
                    break;
                }
                ch = p;
                capc = cap;
            }
            ch[2 * nc] = c.min_ts;
            ch[2 * nc + 1] = c.max_ts;
            nc++;
            db_merger_source(&g, bm->seq, 0);
            r = db_merger_push_chunk(&g, &c, u, u + U);
        }
        if (r < 0)
            rc = r;
    }
    struct rawunit *out = NULL;
    if (rc == BDB_OK)
        rc = db_merger_sort(&g);
    if (rc == BDB_OK) {
        *size = sizeof *out + (2 * nc + g.n) * sizeof(int64_t) + g.n * sizeof(double);
        out = bdb_malloc(*size);
    }
    if (out) {
        out->n = g.n;
        out->nc = nc;
        int64_t *p = (int64_t *)(out + 1);
        if (nc)
            memcpy(p, ch, 2 * nc * sizeof *p);
        int64_t *ts = p + 2 * nc;
        double *v = (double *)(ts + g.n);
        for (size_t i = 0; i < g.n; i++) {
            ts[i] = g.t[i].ts;
            v[i] = g.t[i].v;
        }
    }
    free(ch);
    db_merger_free(&g);
    return out;
}

void db_raw_units(bdb_db *db, const bdb_series_key *key, int64_t lo, int64_t hi,
                  const int64_t *busy, size_t nbusy, db_merger *m, uint8_t *served,
                  uint64_t *nchunks)
{
    int64_t U = db->o.block_window_ms, first = 0;
    size_t nunits = 0;
    if (!db_cache_units(db, lo, hi, &first, &nunits))
        return;
    bdb_buf k;
    bdb_buf_init_checked(&k);
    for (size_t ui = 0; ui < nunits; ui++) {
        int64_t u = first + (int64_t)ui * U;
        int64_t a = u < lo ? lo : u, b = hi - u > U ? u + U : hi;
        int head = 0;
        for (size_t i = 0; i < nbusy && !head; i++)
            head = !(busy[2 * i + 1] <= a || busy[2 * i] >= b);
        if (head || !db_unit_admit(db, 'R', key, u, U, &k))
            continue; /* the head has samples there, or asked once so far: no cache */
        int x = db_unit_key(db, 'R', key, u, U, &k);
        if (x == BDB_ERR_NOTFOUND) { /* no block holds the series there */
            served[ui] = 1;
            continue;
        }
        if (x != BDB_OK)
            break; /* no memory for the key: the blocks as without the cache */
        size_t len;
        bdb_rcache_ent *ref;
        const struct rawunit *r = bdb_rcache_get(db->rcache, k.data, k.len, &len, &ref);
        if (r) {
            ru_push(r, a, b, m, nchunks);
            bdb_rcache_release(db->rcache, ref);
            served[ui] = 1;
            continue;
        }
        size_t size = 0;
        struct rawunit *nr = ru_build(db, key, u, U, &size);
        if (!nr)
            continue; /* read as without the cache, which reports what went wrong */
        ru_push(nr, a, b, m, nchunks);
        served[ui] = 1;
        bdb_rcache_put(db->rcache, k.data, k.len, nr, size);
    }
    bdb_buf_free(&k);
}
