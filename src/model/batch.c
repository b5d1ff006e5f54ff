#include "model/batch.h"

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
    size_t nsamples;
    /* the report being built */
    int open;
    bdb_report cur;
    bdb_kv *tags;
    size_t ntags, cap_tags;
    bdb_metric_val *mets;
    size_t nmets, cap_mets;
};

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q) {
        fprintf(stderr, "bucketdb: out of memory (%zu bytes)\n", n);
        abort();
    }
    return q;
}

static void *arena_alloc(bdb_batch *b, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    struct arena_block *blk = b->blocks;
    if (!blk || blk->cap - blk->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        blk = xrealloc(NULL, sizeof *blk + cap);
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
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

bdb_batch *bdb_batch_new(void)
{
    bdb_batch *b = xrealloc(NULL, sizeof *b);
    memset(b, 0, sizeof *b);
    return b;
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
    b->open = 0;
}

void bdb_batch_begin(bdb_batch *b, const char *device, size_t dlen, int64_t ts_ms, size_t lineno)
{
    memset(&b->cur, 0, sizeof b->cur);
    b->cur.device = arena_str(b, device, dlen);
    b->cur.device_len = dlen;
    b->cur.ts_ms = ts_ms;
    b->cur.lineno = lineno;
    b->ntags = b->nmets = 0;
    b->open = 1;
}

void bdb_batch_tag(bdb_batch *b, const char *k, size_t kl, const char *v, size_t vl)
{
    if (b->ntags == b->cap_tags) {
        b->cap_tags = b->cap_tags ? b->cap_tags * 2 : 8;
        b->tags = xrealloc(b->tags, b->cap_tags * sizeof *b->tags);
    }
    b->tags[b->ntags++] = (bdb_kv){arena_str(b, k, kl), kl, arena_str(b, v, vl), vl};
}

void bdb_batch_metric(bdb_batch *b, const char *name, size_t nlen, double value)
{
    if (b->nmets == b->cap_mets) {
        b->cap_mets = b->cap_mets ? b->cap_mets * 2 : 16;
        b->mets = xrealloc(b->mets, b->cap_mets * sizeof *b->mets);
    }
    b->mets[b->nmets++] = (bdb_metric_val){arena_str(b, name, nlen), nlen, value};
}

void bdb_batch_state(bdb_batch *b, const char *s, size_t n)
{
    b->cur.state = arena_str(b, s, n);
    b->cur.state_len = n;
}

int bdb_batch_end(bdb_batch *b)
{
    b->open = 0;
    if (b->nmets == 0 && !b->cur.state)
        return 0;
    if (b->ntags) {
        bdb_kv *t = arena_alloc(b, b->ntags * sizeof *t);
        memcpy(t, b->tags, b->ntags * sizeof *t);
        b->cur.tags = t;
        b->cur.ntags = (uint32_t)b->ntags;
    }
    if (b->nmets) {
        bdb_metric_val *m = arena_alloc(b, b->nmets * sizeof *m);
        memcpy(m, b->mets, b->nmets * sizeof *m);
        b->cur.metrics = m;
        b->cur.nmetrics = (uint32_t)b->nmets;
    }
    if (b->nreports == b->cap_reports) {
        b->cap_reports = b->cap_reports ? b->cap_reports * 2 : 64;
        b->reports = xrealloc(b->reports, b->cap_reports * sizeof *b->reports);
    }
    b->reports[b->nreports++] = b->cur;
    b->nsamples += b->nmets;
    return 1;
}

void bdb_batch_cancel(bdb_batch *b)
{
    b->open = 0;
    b->ntags = b->nmets = 0;
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
