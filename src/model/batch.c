#include "model/batch.h"
#include "common/alloc.h"
#include "bucketdb/bdb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Strings and per-report arrays live in an arena of chained blocks so that pointers
 * handed out never move while the batch grows, and a reset costs nothing. */
struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    char data[];
};

struct bdb_batch {
    struct arena_block *blocks;
    bdb_report *reports;
    size_t nreports, cap_reports;
    size_t nsamples, nattrs_total;
    /* the report being built */
    int open;
    bdb_report cur;
    bdb_kv *tags;
    size_t ntags, cap_tags;
    bdb_metric_val *mets;
    size_t nmets, cap_mets;
    bdb_kv *attrs;
    size_t nattrs, cap_attrs;
    /* Sticky until reset: a builder call ran out of memory, so the report being built
     * is dropped at end and the parser must fail the whole batch. */
    int oom;
};

/* Grows *arr to hold one more element of size sz; 0, or -1 (and b->oom) on failure. */
static int grow(bdb_batch *b, void **arr, size_t *cap, size_t n, size_t sz, size_t first)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : first;
    void *q = bdb_realloc(*arr, nc * sz);
    if (!q) {
        b->oom = 1;
        return -1;
    }
    *arr = q;
    *cap = nc;
    return 0;
}

static void *arena_alloc(bdb_batch *b, size_t n)
{
    if (b->oom)
        return NULL;
    n = (n + 7) & ~(size_t)7;
    struct arena_block *blk = b->blocks;
    if (!blk || blk->cap - blk->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        blk = bdb_malloc(sizeof *blk + cap);
        if (!blk) {
            b->oom = 1;
            return NULL;
        }
        blk->cap = cap;
        blk->used = 0;
        blk->next = b->blocks;
        b->blocks = blk;
    }
    void *p = blk->data + blk->used;
    blk->used += n;
    return p;
}

static const char *arena_str(bdb_batch *b, const char *s, size_t n)
{
    char *p = arena_alloc(b, n + 1);
    if (!p)
        return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

bdb_batch *bdb_batch_new(void)
{
    return bdb_calloc(1, sizeof(bdb_batch));
}

void bdb_batch_free(bdb_batch *b)
{
    if (!b)
        return;
    while (b->blocks) {
        struct arena_block *n = b->blocks->next;
        free(b->blocks);
        b->blocks = n;
    }
    free(b->reports);
    free(b->tags);
    free(b->mets);
    free(b->attrs);
    free(b);
}

void bdb_batch_reset(bdb_batch *b)
{
    /* Keep the newest (largest-so-far) block for reuse; free the rest. */
    if (b->blocks) {
        struct arena_block *keep = b->blocks, *n = keep->next;
        while (n) {
            struct arena_block *nn = n->next;
            free(n);
            n = nn;
        }
        keep->next = NULL;
        keep->used = 0;
    }
    b->nreports = 0;
    b->nsamples = 0;
    b->nattrs_total = 0;
    b->open = 0;
    b->oom = 0;
}

int bdb_batch_failed(const bdb_batch *b)
{
    return b->oom ? BDB_ERR_NOMEM : BDB_OK;
}

void bdb_batch_begin(bdb_batch *b, const char *device, size_t dlen, int64_t ts_ms, size_t lineno)
{
    memset(&b->cur, 0, sizeof b->cur);
    b->cur.device = arena_str(b, device, dlen);
    b->cur.device_len = dlen;
    b->cur.ts_ms = ts_ms;
    b->cur.lineno = lineno;
    b->ntags = b->nmets = b->nattrs = 0;
    b->open = 1;
}

void bdb_batch_tag(bdb_batch *b, const char *k, size_t kl, const char *v, size_t vl)
{
    if (grow(b, (void **)&b->tags, &b->cap_tags, b->ntags, sizeof *b->tags, 8))
        return;
    const char *ks = arena_str(b, k, kl), *vs = arena_str(b, v, vl);
    if (ks && vs)
        b->tags[b->ntags++] = (bdb_kv){ks, kl, vs, vl};
}

void bdb_batch_metric(bdb_batch *b, const char *name, size_t nlen, double value)
{
    if (grow(b, (void **)&b->mets, &b->cap_mets, b->nmets, sizeof *b->mets, 16))
        return;
    const char *ns = arena_str(b, name, nlen);
    if (ns)
        b->mets[b->nmets++] = (bdb_metric_val){ns, nlen, value};
}

void bdb_batch_state(bdb_batch *b, const char *s, size_t n)
{
    b->cur.state = arena_str(b, s, n);
    b->cur.state_len = n;
}

void bdb_batch_attr(bdb_batch *b, const char *name, size_t nl, const char *v, size_t vl)
{
    if (b->nattrs >= BDB_MAX_REPORT_ATTRS ||
        grow(b, (void **)&b->attrs, &b->cap_attrs, b->nattrs, sizeof *b->attrs, 4))
        return;
    const char *ns = arena_str(b, name, nl), *vs = arena_str(b, v, vl);
    if (ns && vs)
        b->attrs[b->nattrs++] = (bdb_kv){ns, nl, vs, vl};
}

int bdb_batch_end(bdb_batch *b)
{
    b->open = 0;
    if (b->oom || !b->cur.device) /* a builder call failed: never a partial report */
        return 0;
    if (b->nmets == 0 && !b->cur.state && b->nattrs == 0)
        return 0;
    if (b->ntags) {
        bdb_kv *t = arena_alloc(b, b->ntags * sizeof *t);
        if (!t)
            return 0;
        memcpy(t, b->tags, b->ntags * sizeof *t);
        b->cur.tags = t;
        b->cur.ntags = (uint32_t)b->ntags;
    }
    if (b->nmets) {
        bdb_metric_val *m = arena_alloc(b, b->nmets * sizeof *m);
        if (!m)
            return 0;
        memcpy(m, b->mets, b->nmets * sizeof *m);
        b->cur.metrics = m;
        b->cur.nmetrics = (uint32_t)b->nmets;
    }
    if (b->nattrs) {
        bdb_kv *a = arena_alloc(b, b->nattrs * sizeof *a);
        if (!a)
            return 0;
        memcpy(a, b->attrs, b->nattrs * sizeof *a);
        b->cur.attrs = a;
        b->cur.nattrs = (uint32_t)b->nattrs;
    }
    if (grow(b, (void **)&b->reports, &b->cap_reports, b->nreports, sizeof *b->reports, 64))
        return 0;
    b->reports[b->nreports++] = b->cur;
    b->nsamples += b->nmets;
    b->nattrs_total += b->nattrs;
    return 1;
}

void bdb_batch_cancel(bdb_batch *b)
{
    b->open = 0;
    b->ntags = b->nmets = b->nattrs = 0;
}

const bdb_report *bdb_batch_reports(const bdb_batch *b, size_t *n)
{
    *n = b->nreports;
    return b->reports;
}

size_t bdb_batch_samples(const bdb_batch *b)
{
    return b->nsamples;
}

size_t bdb_batch_attrs(const bdb_batch *b)
{
    return b->nattrs_total;
}
