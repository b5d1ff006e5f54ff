/* iql_gcache: kept group results of settled windows (iql_gcache.h). */
#include "query/influxql/iql_gcache.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "common/rcache.h"
#include "storage/embedded/core/db.h"

#include <stdlib.h>
#include <string.h>

/* A kept result: header, then per group the windows it merged and where its cells
 * start (GC_NONE: none with data), then the cells (nwin x nf per group with data). */
typedef struct gc_val {
    int64_t a;
    uint64_t reads; /* windows its devices' reads took: counted again on a hit */
    uint32_t ng, nf, nwin, ncells_groups;
} gc_val;
#define GC_NONE UINT32_MAX

/* A kept result takes at most this share of the cache: a statement grouping by a tag
 * of thousands of values would evict every other panel's. */
#define GC_SHARE 8

static int64_t floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* Where a kept result's parts start. */
static size_t cells_off(size_t ng)
{
    return sizeof(gc_val) + ng * 12 + (ng & 1) * 4; /* the cells 8-aligned */
}

/* Merges kept result v into ta: -1 past ta's bound. */
static int merge_val(tier_acc *ta, const void *v)
{
    const gc_val *h = v;
    const uint64_t *seen = (const uint64_t *)(h + 1);
    const uint32_t *at = (const uint32_t *)(seen + h->ng);
    const iql_tacc *cells = (const iql_tacc *)((const char *)v + cells_off(h->ng));
    int rc = 0;
    for (size_t gi = 0; gi < h->ng && !rc; gi++)
        rc = iql_tier_acc_add(ta, gi, h->a, at[gi] == GC_NONE ? NULL : cells + at[gi], h->nwin,
                              seen[gi]);
    return rc;
}

int iql_gc_plan(const iql_ctx *x, const cat *c, const meas *m, const strv *fields, const size_t *md,
                size_t nmd, const size_t *dg, size_t ng, int tier, int64_t from, int64_t to,
                tier_acc *ta, uint64_t *read, iql_gc *g)
{
    memset(g, 0, sizeof *g);
    uint64_t settled;
    /* devices merged into fewer groups, each window counted (no sketch): worth keeping */
    if (!x->groups || !c->has_ver || nmd <= ng || !ta->nwin || ng > UINT32_MAX ||
        bdb_db_settled_version(x->db, x->tenant, &settled) != BDB_OK)
        return 0;
    int64_t e = ta->every, lo = ta->lo;
    /* whole output windows inside [from, to) that end before the settled horizon */
    int64_t a = lo + (floordiv(from - lo - 1, e) + 1) * e;
    int64_t hz = x->now_ms - BDB_SETTLED_MS;
    int64_t end = to < hz ? to : hz;
    int64_t b = lo + floordiv(end - lo, e) * e;
    if (a >= b)
        return 0;
    uint64_t nwin = (uint64_t)((b - a) / e);
    bdb_rcache_stats cs;
    bdb_rcache_stats_get(x->groups, &cs);
    if (nwin > UINT32_MAX || (double)ng * (double)nwin * (double)ta->nf * sizeof(iql_tacc) >
                                 (double)cs.max_bytes / GC_SHARE)
        return 0;
    bdb_buf k;
    bdb_buf_init(&k);
    bdb_buf_putc(&k, 'G');
    bdb_buf_putc(&k, (uint8_t)tier);
    bdb_buf_putc(&k, (uint8_t)ta->spread);
    bdb_buf_put_u64le(&k, c->ver[0]);
    bdb_buf_put_u64le(&k, c->ver[1]);
    bdb_buf_put_u64le(&k, settled);
    bdb_buf_put_u64le(&k, (uint64_t)e);
    bdb_buf_put_u64le(&k, (uint64_t)a);
    bdb_buf_put_u64le(&k, (uint64_t)b);
    bdb_buf_put_u64le(&k, (uint64_t)x->lateness_ms);
    bdb_buf_put_str(&k, x->tenant, strlen(x->tenant));
    bdb_buf_put_str(&k, x->device_tag, strlen(x->device_tag));
    bdb_buf_put_str(&k, m->name, strlen(m->name));
    bdb_buf_put_uvarint(&k, fields->n);
    for (size_t f = 0; f < fields->n; f++)
        bdb_buf_put_str(&k, fields->v[f], strlen(fields->v[f]));
    bdb_buf_put_uvarint(&k, ng);
    bdb_buf_put_uvarint(&k, nmd);
    for (size_t i = 0; i < nmd; i++) {
        bdb_buf_put_u32le(&k, (uint32_t)md[i]);
        bdb_buf_put_u32le(&k, (uint32_t)dg[i]);
    }
    g->a = a;
    g->b = b;
    size_t len;
    bdb_rcache_ent *ref;
    const unsigned char *v = bdb_rcache_get(x->groups, k.data, k.len, &len, &ref);
    if (v) {
        /* the limit as the devices' reads would count it */
        const gc_val *h = (const gc_val *)v;
        *read += h->reads;
        int rc = *read > x->max_points ? -1 : merge_val(ta, v);
        bdb_rcache_release(x->groups, ref);
        bdb_buf_free(&k);
        if (rc)
            return -1;
        g->hit = 1;
        return 1;
    }
    if (!bdb_rcache_admit(x->groups, k.data, k.len)) {
        bdb_buf_free(&k);
        return 0;
    }
    g->build = 1;
    g->key = (char *)k.data; /* the buffer's bytes are the caller's now */
    g->klen = k.len;
    iql_tier_acc_init(&g->mid, ta->dg, ng, ta->nf, e, a - floordiv(a, e) * e, a, b, nwin + 1);
    g->mid.spread = ta->spread;
    g->mid.max_cells = ta->max_cells;
    return 1;
}

int iql_gc_finish(const iql_ctx *x, iql_gc *g, tier_acc *ta, int ok)
{
    int rc = 0;
    if (g->build) {
        tier_acc *mid = &g->mid;
        size_t ng = mid->ng, nf = mid->nf, nwin = mid->nwin, with = 0;
        for (size_t gi = 0; gi < ng; gi++)
            with += mid->g[gi] != NULL;
        size_t per = nwin * nf, len = cells_off(ng) + with * per * sizeof(iql_tacc);
        unsigned char *v = iql_xmalloc(len);
        gc_val *h = (gc_val *)v;
        *h = (gc_val){g->a, g->reads, (uint32_t)ng, (uint32_t)nf, (uint32_t)nwin, (uint32_t)with};
        uint64_t *seen = (uint64_t *)(h + 1);
        uint32_t *at = (uint32_t *)(seen + ng);
        iql_tacc *cells = (iql_tacc *)(v + cells_off(ng));
        size_t n = 0;
        for (size_t gi = 0; gi < ng; gi++) {
            seen[gi] = mid->seen[gi];
            at[gi] = mid->g[gi] ? (uint32_t)(n * per) : GC_NONE;
            if (mid->g[gi])
                memcpy(cells + n++ * per, mid->g[gi], per * sizeof *cells);
        }
        if (ng & 1)
            memset(at + ng, 0, 4);
        rc = merge_val(ta, v);
        if (ok && !rc && !mid->over)
            bdb_rcache_put(x->groups, g->key, g->klen, v, len);
        else
            free(v);
        iql_tier_acc_free(mid);
    }
    free(g->key);
    memset(g, 0, sizeof *g);
    return rc;
}
