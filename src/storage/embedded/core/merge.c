/* merge: the newest-write-wins merge of one series' samples (merge.h). */
#include "storage/embedded/core/merge.h"
#include "storage/embedded/core/db_int.h" /* hchunk, head_chunk_samples */
#include "common/alloc.h"

#include "bucketdb/bdb.h"

#include <stdlib.h>
#include <string.h>

void db_merger_free(db_merger *m)
{
    free(m->t);
    free(m->ts);
    free(m->v);
    bdb_buf_free(&m->enc);
    memset(m, 0, sizeof *m);
}

void db_merger_clear(db_merger *m)
{
    m->n = 0;
    m->tn = 0;
}

/* Room for need samples in t: BDB_OK or BDB_ERR_NOMEM (oom set). */
static int reserve(db_merger *m, size_t need)
{
    if (need <= m->cap)
        return BDB_OK;
    size_t cap = m->cap ? m->cap * 2 : 256;
    while (cap < need)
        cap *= 2;
    db_merger_samp *p = bdb_realloc(m->t, cap * sizeof *p);
    if (!p) {
        m->oom = 1;
        return BDB_ERR_NOMEM;
    }
    m->t = p;
    m->cap = cap;
    return BDB_OK;
}

/* Room for need samples in the scratch arrays: BDB_OK or BDB_ERR_NOMEM. */
static int reserve_scratch(db_merger *m, size_t need)
{
    if (need <= m->tcap)
        return BDB_OK;
    size_t cap = m->tcap ? m->tcap * 2 : 256;
    while (cap < need)
        cap *= 2;
    int64_t *nt = bdb_realloc(m->ts, cap * sizeof *nt);
    if (!nt)
        return BDB_ERR_NOMEM;
    m->ts = nt;
    double *nv = bdb_realloc(m->v, cap * sizeof *nv);
    if (!nv)
        return BDB_ERR_NOMEM;
    m->v = nv;
    m->tcap = cap;
    return BDB_OK;
}

void db_merger_source(db_merger *m, uint64_t prio, int64_t part)
{
    m->prio = prio;
    m->order = 0;
    m->part = part;
}

void db_merger_push(db_merger *m, int64_t ts, double v)
{
    if (m->n == m->cap && reserve(m, m->n + 1) != BDB_OK)
        return;
    m->t[m->n++] = (db_merger_samp){ts, m->prio, m->order++, m->part, v};
}

int db_merger_push_chunk(db_merger *m, const bdb_chunk_ref *c, int64_t lo, int64_t hi)
{
    bdb_chunk_iter it;
    if (bdb_block_chunk_iter(c, &it) != BDB_OK)
        return BDB_ERR_CORRUPT;
    int64_t t;
    double v;
    int r;
    while ((r = bdb_chunk_iter_next(&it, &t, &v)) == 1) {
        if (t < lo || t >= hi)
            continue;
        if (m->n == m->cap && reserve(m, m->n + 1) != BDB_OK)
            return BDB_ERR_NOMEM;
        m->t[m->n++] = (db_merger_samp){t, m->prio, m->order++, m->part, v};
    }
    return r < 0 ? BDB_ERR_CORRUPT : BDB_OK;
}

void db_merger_add_head(db_merger *m, const hchunk *c, int64_t lo, int64_t hi, uint64_t prio,
                        int64_t part)
{
    db_merger_source(m, prio, part);
    m->tn = 0;
    /* on failure what was decoded is still merged, and the sort fails */
    if (head_chunk_samples(c, lo, hi, &m->ts, &m->v, &m->tn, &m->tcap) != BDB_OK)
        m->oom = 1;
    if (reserve(m, m->n + m->tn) == BDB_OK)
        for (size_t i = 0; i < m->tn; i++)
            m->t[m->n++] = (db_merger_samp){m->ts[i], prio, i, part, m->v[i]};
    m->tn = 0;
}

uint64_t db_merger_add_list(db_merger *m, const hchunk *list, int64_t lo, int64_t hi, uint64_t base,
                            int (*skip)(const void *ctx, const hchunk *c), const void *skip_ctx)
{
    size_t nc = 0, k = 0;
    for (const hchunk *c = list; c; c = c->next)
        nc++;
    for (const hchunk *c = list; c; c = c->next, k++)
        if (hc_hi(c) > lo && c->lo < hi && !(skip && skip(skip_ctx, c)))
            db_merger_add_head(m, c, lo, hi, base + nc - k, 0);
    return base + nc;
}

static int samp_cmp(const void *a, const void *b)
{
    const db_merger_samp *x = a, *y = b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    if (x->prio != y->prio)
        return x->prio > y->prio ? -1 : 1; /* the later write first: it is kept */
    return (x->order > y->order) - (x->order < y->order);
}

/* The end of the strictly ascending run of t that starts at a (a < n). */
static size_t run_end(const db_merger_samp *t, size_t a, size_t n)
{
    size_t i = a + 1;
    while (i < n && t[i - 1].ts < t[i].ts)
        i++;
    return i;
}

static void reverse(db_merger_samp *t, size_t a, size_t b)
{
    while (a + 1 < b) {
        db_merger_samp x = t[a];
        t[a++] = t[--b];
        t[b] = x;
    }
}

int db_merger_sort(db_merger *m)
{
    if (m->oom) {
        m->oom = 0;
        db_merger_clear(m);
        return BDB_ERR_NOMEM;
    }
    if (m->n < 2)
        return BDB_OK;
    /* A strictly ascending whole has one order whatever the tie-breaks, so skipping
     * the sort gives what qsort would; the same holds for two such runs, the second
     * wholly before the first (a read's newer head chunk gathered before the blocks). */
    size_t a = run_end(m->t, 0, m->n);
    if (a == m->n)
        return BDB_OK;
    if (run_end(m->t, a, m->n) == m->n && m->t[m->n - 1].ts < m->t[0].ts) {
        reverse(m->t, 0, a);
        reverse(m->t, a, m->n);
        reverse(m->t, 0, m->n);
        return BDB_OK;
    }
    qsort(m->t, m->n, sizeof *m->t, samp_cmp);
    size_t k = 1;
    for (size_t i = 1; i < m->n; i++)
        if (m->t[i].ts != m->t[k - 1].ts)
            m->t[k++] = m->t[i];
    m->n = k;
    return BDB_OK;
}

/* Samples t[i..j) of one partition, ascending, as one chunk of the block. */
static int emit_chunk(db_merger *m, bdb_block_writer *w, const bdb_series_key *key, size_t i,
                      size_t j)
{
    m->tn = 0;
    for (size_t k = i; k < j; k++) {
        m->ts[m->tn] = m->t[k].ts;
        m->v[m->tn++] = m->t[k].v;
    }
    bdb_buf_reset(&m->enc);
    int rc = bdb_chunk_encode(m->ts, m->v, m->tn, &m->enc);
    if (rc == BDB_OK && m->enc.oom)
        rc = BDB_ERR_NOMEM;
    if (rc != BDB_OK) {
        m->enc.oom = 0;
        return rc;
    }
    bdb_chunk_ref c = {.bucket_start = m->t[i].part,
                       .min_ts = m->ts[0],
                       .max_ts = m->ts[m->tn - 1],
                       .count = (uint32_t)m->tn,
                       .data = m->enc.data,
                       .len = m->enc.len};
    return bdb_block_writer_add(w, key, &c);
}

static int part_cmp(const void *a, const void *b)
{
    const db_merger_samp *x = a, *y = b;
    if (x->part != y->part)
        return x->part < y->part ? -1 : 1;
    return (x->ts > y->ts) - (x->ts < y->ts); /* unique after the sort */
}

struct seg {
    size_t i, j;
    int64_t min_ts;
};

static int seg_cmp(const void *a, const void *b)
{
    const struct seg *x = a, *y = b;
    return (x->min_ts > y->min_ts) - (x->min_ts < y->min_ts);
}

/* A series spread over several partitions (a hot device's sub-buckets) interleaves
 * them sample by sample in time: cutting the time order wherever the partition
 * changes stored one-sample chunks (16 bytes a sample instead of about 1.5, and a
 * chunk entry to walk per sample on every read). So each partition's samples become
 * chunks of their own; the block wants a series' chunks by strictly increasing
 * min_ts, which distinct sample times give. */
static int emit_parts(db_merger *m, bdb_block_writer *w, const bdb_series_key *key, uint32_t max)
{
    qsort(m->t, m->n, sizeof *m->t, part_cmp);
    size_t nseg = 0, cap = 64;
    struct seg *sg = bdb_malloc(cap * sizeof *sg);
    if (!sg)
        return BDB_ERR_NOMEM;
    for (size_t i = 0; i < m->n;) {
        size_t j = i;
        while (j < m->n && j - i < max && m->t[j].part == m->t[i].part)
            j++;
        if (nseg == cap) {
            struct seg *n2 = bdb_realloc(sg, 2 * cap * sizeof *sg);
            if (!n2) {
                free(sg);
                return BDB_ERR_NOMEM;
            }
            sg = n2;
            cap *= 2;
        }
        sg[nseg++] = (struct seg){i, j, m->t[i].ts};
        i = j;
    }
    qsort(sg, nseg, sizeof *sg, seg_cmp);
    int rc = BDB_OK;
    for (size_t k = 0; k < nseg && rc == BDB_OK; k++)
        rc = emit_chunk(m, w, key, sg[k].i, sg[k].j);
    free(sg);
    return rc;
}

int db_merger_emit(db_merger *m, bdb_block_writer *w, const bdb_series_key *key, uint32_t max)
{
    m->enc.checked = 1;
    int rc = db_merger_sort(m);
    if (rc == BDB_OK && max == 0)
        rc = BDB_ERR_INVALID; /* no chunk could hold a sample */
    if (rc == BDB_OK && reserve_scratch(m, m->n < max ? m->n : max) != BDB_OK)
        rc = BDB_ERR_NOMEM;
    size_t one = 1;
    while (rc == BDB_OK && one < m->n && m->t[one].part == m->t[0].part)
        one++;
    if (rc == BDB_OK && one < m->n) {
        rc = emit_parts(m, w, key, max);
    } else {
        for (size_t i = 0; i < m->n && rc == BDB_OK;) {
            size_t j = i + max < m->n ? i + max : m->n;
            rc = emit_chunk(m, w, key, i, j);
            i = j;
        }
    }
    db_merger_clear(m);
    return rc;
}

int db_merger_each_part(db_merger *m,
                        int (*put)(void *ctx, int64_t part, const int64_t *ts, const double *v,
                                   size_t n),
                        void *ctx)
{
    int rc = db_merger_sort(m);
    if (rc == BDB_OK && reserve_scratch(m, m->n) != BDB_OK)
        rc = BDB_ERR_NOMEM; /* nothing put */
    /* order is spent once sorted: it marks the samples already put */
    for (size_t i = 0; i < m->n && rc == BDB_OK; i++)
        m->t[i].order = 0;
    for (size_t a = 0; a < m->n && rc == BDB_OK; a++) {
        if (m->t[a].order)
            continue;
        int64_t part = m->t[a].part;
        size_t n = 0;
        for (size_t b = a; b < m->n; b++)
            if (!m->t[b].order && m->t[b].part == part) {
                m->t[b].order = 1;
                m->ts[n] = m->t[b].ts;
                m->v[n++] = m->t[b].v;
            }
        rc = put(ctx, part, m->ts, m->v, n);
    }
    db_merger_clear(m);
    return rc;
}

int db_merger_samples(db_merger *m, int64_t **ts, double **v, size_t *n, size_t *cap)
{
    *n = 0;
    int rc = db_merger_sort(m);
    if (rc == BDB_OK && m->n > *cap) {
        size_t nc = *cap * 2 > m->n ? *cap * 2 : m->n;
        int64_t *nt = bdb_realloc(*ts, nc * sizeof *nt);
        if (nt)
            *ts = nt;
        double *nv = nt ? bdb_realloc(*v, nc * sizeof *nv) : NULL;
        if (nv) {
            *v = nv;
            *cap = nc;
        } else {
            rc = BDB_ERR_NOMEM;
        }
    }
    for (size_t i = 0; i < m->n && rc == BDB_OK; i++) {
        (*ts)[i] = m->t[i].ts;
        (*v)[i] = m->t[i].v;
    }
    if (rc == BDB_OK)
        *n = m->n;
    db_merger_clear(m);
    return rc;
}
