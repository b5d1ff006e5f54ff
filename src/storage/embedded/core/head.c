/* head: the in-memory part of the engine. Each series keeps a short list of chunks,
 * one per (partition x block window) range it has samples in, newest first. A chunk
 * is cut when it reaches chunk_max_samples, so long partitions of hot devices become
 * several chunks. With sub-buckets (db_hot.h) one range holds a chunk chain per
 * partition id, so chunks are keyed by (range, partition id). */
#include "storage/embedded/core/db_int.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hchunk *chunk_new(bdb_db *db, int64_t lo, int64_t hi, int64_t bucket_start)
{
    hchunk *c = bdb_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->lo = lo;
    c->span = (uint32_t)(hi - lo);
    c->boff = (int32_t)(lo - bucket_start);
    bdb_chunk_state_init(&c->st); /* owner 0: no stream bytes, no side list */
    atomic_fetch_add(&db->head_bytes, sizeof *c);
    return c;
}

/* Bytes of the side list after the stream (0 when the chunk has none). */
static size_t ooo_bytes(const hchunk *c)
{
    const struct hc_ooo *o = hc_ooo(c);
    return o ? sizeof *o + o->cap * sizeof *o->s : 0;
}

/* The capacity at or above cap that makes the struct and its stream a size malloc gives
 * without rounding (glibc: 16-byte steps with 8 bytes of header, so 8 mod 16); a
 * multiple of 8 either way, which keeps the side list after the stream aligned. */
static size_t cap_round(size_t cap)
{
    size_t tot = ((sizeof(hchunk) + cap + 7) & ~(size_t)15) + 8;
    return tot - sizeof(hchunk);
}

/* Sets c's capacity, keeping its side-list flag. */
static void set_cap(hchunk *c, size_t cap)
{
    c->st.owner = (c->st.owner & HC_HAS_OOO) | (uint32_t)cap;
}

/* The capacity of a chunk whose stream needs need bytes and has old: an eighth more
 * than old, and 16 bytes (a dozen samples of a steady series) at least, so a chunk
 * grows every dozen samples or so, not every sample; the struct and its bytes a size
 * malloc gives without rounding (glibc: 16-byte steps with 8 bytes of header, so 8
 * mod 16). The head holds the spare room of every open chunk until the flush, so a
 * small step saves more memory than the extra copies of a few hundred bytes cost. */
static size_t chunk_cap_for(size_t need, uint32_t old)
{
    size_t cap = (size_t)old + (old / 8 > 16 ? old / 8 : 16);
    if (cap < need)
        cap = need;
    return cap_round(cap);
}

/* Makes *link's chunk hold need stream bytes, moving it (the link follows): BDB_OK or
 * BDB_ERR_NOMEM (the chunk as it was). */
static int chunk_room(bdb_db *db, hchunk **link, size_t need)
{
    hchunk *c = *link;
    size_t old = hc_cap(c);
    if (need <= old)
        return BDB_OK;
    size_t cap = chunk_cap_for(need, (uint32_t)old), ob = ooo_bytes(c);
    if (cap > HC_CAP_MAX)
        return BDB_ERR_NOMEM;
    c = bdb_realloc(c, sizeof *c + cap + ob);
    if (!c)
        return BDB_ERR_NOMEM;
    if (ob) /* the side list follows the stream */
        memmove(c->buf + cap, c->buf + old, ob);
    memset(c->buf + old, 0, cap - old);
    atomic_fetch_add(&db->head_bytes, cap - old);
    set_cap(c, cap);
    *link = c;
    return BDB_OK;
}

/* Gives back a chunk's append room (a chunk that stops growing), keeping the bytes a
 * reader's bit loads touch past the end (bdb_chunk_stream_need of no sample). */
static void chunk_trim(bdb_db *db, hchunk **link)
{
    hchunk *c = *link;
    size_t need = bdb_chunk_stream_need(&c->st, 0), old = hc_cap(c);
    if (!c->st.count || need >= old)
        return;
    size_t cap = cap_round(need), ob = ooo_bytes(c);
    if (cap >= old)
        return;
    if (ob)
        memmove(c->buf + cap, c->buf + old, ob);
    hchunk *n = bdb_realloc(c, sizeof *c + cap + ob);
    if (!n) { /* the larger chunk serves as well, once its side list is back */
        if (ob)
            memmove(c->buf + old, c->buf + cap, ob);
        memset(c->buf + cap, 0, old - cap < ob ? old - cap : ob);
        return;
    }
    atomic_fetch_sub(&db->head_bytes, old - cap);
    set_cap(n, cap);
    *link = n;
}

/* A new (empty) chunk for [lo, hi) linked in at *link, in front of the chunk there. */
static hchunk *chunk_insert(bdb_db *db, series *s, hchunk **link, int64_t lo, int64_t hi,
                            int64_t bucket_start)
{
    hchunk *n = chunk_new(db, lo, hi, bucket_start);
    if (!n)
        return NULL;
    n->next = *link;
    *link = n;
    /* The newest chunk so far is done growing (a new range or a full chunk): reports
     * move forward in time, and the head holds every chunk until the flush. */
    if (link == &s->active && n->next)
        chunk_trim(db, &n->next);
    return n;
}

void head_free_chunks(bdb_db *db, hchunk *c)
{
    while (c) {
        hchunk *n = c->next;
        atomic_fetch_sub(&db->head_bytes, sizeof *c + hc_cap(c) + ooo_bytes(c));
        atomic_fetch_sub(&db->head_samples, (uint64_t)c->st.count + hc_nooo(c));
        free(c);
        c = n;
    }
}

/* Side lists longer than this are merged into the chunk's stream instead of growing:
 * a side-list sample costs 16 bytes, a STREAM sample about 1.3. */
#define OOO_MERGE_MIN 8

/* Re-encodes *link's chunk with its side list merged in (the later write of a time
 * wins), with room for n more samples in the stream and none in the list; the chunk
 * moves (the link follows). BDB_ERR_NOMEM or BDB_ERR_LIMIT (too many samples for one
 * chunk) leave the chunk as it was. */
static int ooo_merge(bdb_db *db, hchunk **link, uint32_t n)
{
    hchunk *c = *link;
    /* the samples' arrays and the new stream sized once: grown sample by sample,
     * their reallocs were most of a merge's cost */
    size_t cap = (size_t)c->st.count + hc_nooo(c), ns = 0;
    int64_t *ts = bdb_malloc((cap + 1) * sizeof *ts);
    double *v = bdb_malloc((cap + 1) * sizeof *v);
    int rc =
        ts && v ? head_chunk_samples(c, INT64_MIN, INT64_MAX, &ts, &v, &ns, &cap) : BDB_ERR_NOMEM;
    if (rc == BDB_OK && ns + n > BDB_CHUNK_MAX_SAMPLES)
        rc = BDB_ERR_LIMIT;
    bdb_chunk_app app;
    bdb_chunk_app_init(&app);
    if (rc == BDB_OK)
        rc = bdb_chunk_app_reserve(&app, (uint32_t)ns);
    for (size_t i = 0; i < ns && rc == BDB_OK; i++)
        rc = bdb_chunk_app_append(&app, ts[i], v[i]);
    free(ts);
    free(v);
    size_t ncap = chunk_cap_for(bdb_chunk_stream_need(&app.st, n), 0);
    hchunk *m = NULL;
    /* what the chunk holds before the realloc drops its side list */
    uint64_t before = hc_cap(c) + (uint64_t)ooo_bytes(c);
    uint64_t dropped = (uint64_t)c->st.count + hc_nooo(c) - ns; /* rewritten times */
    if (rc == BDB_OK && ncap > HC_CAP_MAX)
        rc = BDB_ERR_NOMEM;
    /* The side list after the stream is dropped (its samples are in app), so the
     * chunk may shrink. */
    if (rc == BDB_OK && !(m = bdb_realloc(c, sizeof *c + ncap)))
        rc = BDB_ERR_NOMEM;
    if (rc != BDB_OK) {
        bdb_chunk_app_free(&app);
        return rc;
    }
    size_t used = ns ? bdb_chunk_stream_used(&app.st) : 0;
    memcpy(m->buf, app.buf, used);
    memset(m->buf + used, 0, ncap - used);
    m->st = app.st;
    m->st.owner = (uint32_t)ncap; /* and no side list */
    bdb_chunk_app_free(&app);
    *link = m;
    if (ncap > before)
        atomic_fetch_add(&db->head_bytes, ncap - before);
    else
        atomic_fetch_sub(&db->head_bytes, before - ncap);
    atomic_fetch_sub(&db->head_samples, dropped);
    return BDB_OK;
}
/* Room for n more side-list samples in *link's chunk: BDB_OK or BDB_ERR_NOMEM (the list
 * unchanged). A long list is merged into the stream first when that works (the chunk
 * moves; the link follows). */
static int ooo_room(bdb_db *db, hchunk **link, uint32_t n)
{
    hchunk *c = *link;
    const struct hc_ooo *o = hc_ooo(c);
    uint32_t have = o ? o->cap : 0, nooo = o ? o->n : 0;
    if (have - nooo >= n)
        return BDB_OK;
    if (nooo >= OOO_MERGE_MIN) {
        (void)ooo_merge(db, link, n); /* if it fails, the list grows as it would have */
        c = *link;
        o = hc_ooo(c);
        have = o ? o->cap : 0;
        nooo = o ? o->n : 0;
    }
    uint32_t cap = have ? have * 2u : 4u;
    while (cap - nooo < n)
        cap *= 2;
    if (cap > DB_OOO_MAX) {
        /* Only a full chunk whose merge failed gets here: a stream of its own size
         * would not fit a chunk either. */
        cap = DB_OOO_MAX;
        if (cap - nooo < n)
            return BDB_ERR_LIMIT;
    }
    size_t ob = ooo_bytes(c), nb = sizeof(struct hc_ooo) + cap * sizeof(struct ooo_sample);
    hchunk *m = bdb_realloc(c, sizeof *c + hc_cap(c) + nb);
    if (!m)
        return BDB_ERR_NOMEM;
    if (!ob) {
        m->st.owner |= HC_HAS_OOO;
        hc_ooo(m)->n = 0;
        hc_ooo(m)->pad = 0;
    }
    hc_ooo(m)->cap = (uint16_t)cap;
    atomic_fetch_add(&db->head_bytes, nb - ob);
    *link = m;
    return BDB_OK;
}

static int ooo_add(bdb_db *db, hchunk **link, int64_t ts, double v)
{
    if (ooo_room(db, link, 1) != BDB_OK)
        return BDB_ERR_NOMEM;
    struct hc_ooo *o = hc_ooo(*link);
    o->s[o->n++] = (struct ooo_sample){ts, v};
    atomic_fetch_add(&db->ooo_samples, 1);
    return BDB_OK;
}

/* The link to the chunk a sample at ts goes to, created (empty) if the range has none
 * yet; with in_order set and the newest chunk full, its (empty) continuation. NULL
 * when out of memory. An empty chunk holds no sample, so creating one changes no
 * answer. */
static hchunk **chunk_for(bdb_db *db, series *s, int64_t ts, int *in_order)
{
    device *d = s->dev;
    int64_t bstart, bend;
    bdb_bucket_range(&d->hist, ts, &bstart, &bend);
    int64_t w = db->o.block_window_ms;
    int64_t wstart = bdb_align_down(ts, w);
    int64_t lo = bstart > wstart ? bstart : wstart;
    int64_t hi = bend < wstart + w ? bend : wstart + w;
    int64_t pid = db_partition_id(d, ts, bstart);
    hchunk **link = &s->active;
    while (*link && (*link)->lo > lo)
        link = &(*link)->next;
    hchunk **g = link;
    while (*g && (*g)->lo == lo && hc_bucket(*g) != pid)
        g = &(*g)->next;
    if (*g && (*g)->lo == lo)
        link = g;
    else if (!chunk_insert(db, s, link, lo, hi, pid)) /* first of the range's group */
        return NULL;
    const hchunk *c = *link;
    *in_order = c->st.count == 0 || ts > c->st.t_last;
    if (*in_order && c->st.count >= db->o.chunk_max_samples &&
        !chunk_insert(db, s, link, lo, hi, pid)) /* full: continuation in front */
        return NULL;
    return link;
}

void head_prefetch(const series *s, int stage)
{
    if (stage == HEAD_PF_SERIES) {
        __builtin_prefetch(&s->active);
        return;
    }
    const hchunk *c = s->active;
    if (!c)
        return;
    if (stage == HEAD_PF_CHUNK) {
        /* the chunk's fields, then its stream's header (rewritten by every append) */
        __builtin_prefetch(c, 1);
        __builtin_prefetch(c->buf, 1);
    } else {
        __builtin_prefetch(c->buf + bdb_chunk_stream_used(&c->st), 1);
    }
}

int head_reserve(bdb_db *db, series *s, int64_t ts, uint32_t n)
{
    int in_order;
    hchunk **link = chunk_for(db, s, ts, &in_order);
    if (!link)
        return BDB_ERR_NOMEM;
    if (!in_order)
        return ooo_room(db, link, n);
    return chunk_room(db, link, bdb_chunk_stream_need(&(*link)->st, n));
}

/* Caller holds the device's stripe lock and counts the sample in db->head_samples
 * (once per report: a shared counter bumped per sample costs more than the append). */
int head_append(bdb_db *db, series *s, int64_t ts, double v)
{
    /* The newest chunk of the range and partition id takes in-order appends; older
     * full chunks of the same pair only receive out-of-order samples. */
    int in_order;
    hchunk **link = chunk_for(db, s, ts, &in_order);
    if (!link)
        return BDB_ERR_NOMEM;
    if (!in_order)
        return ooo_add(db, link, ts, v); /* accounts for what it allocates */
    if ((*link)->st.count == BDB_CHUNK_MAX_SAMPLES)
        return BDB_ERR_LIMIT;
    if (chunk_room(db, link, bdb_chunk_stream_need(&(*link)->st, 1)) != BDB_OK)
        return BDB_ERR_NOMEM;
    hchunk *c = *link;
    return bdb_chunk_stream_put(&c->st, c->buf, ts, v);
}

static int push(int64_t **ts, double **v, size_t *n, size_t *cap, int64_t t, double x)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        int64_t *nt = bdb_realloc(*ts, nc * sizeof **ts);
        if (nt)
            *ts = nt;
        double *nv = nt ? bdb_realloc(*v, nc * sizeof **v) : NULL;
        if (!nv)
            return BDB_ERR_NOMEM; /* both arrays still hold *cap */
        *v = nv;
        *cap = nc;
    }
    (*ts)[*n] = t;
    (*v)[*n] = x;
    (*n)++;
    return BDB_OK;
}

struct ts_pair {
    int64_t ts;
    uint32_t i;
};

static int pair_cmp(const void *a, const void *b)
{
    const struct ts_pair *x = a, *y = b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

int head_chunk_samples(const hchunk *c, int64_t lo, int64_t hi, int64_t **ts, double **v, size_t *n,
                       size_t *cap)
{
    size_t len;
    const uint8_t *bytes = bdb_chunk_stream_bytes(&c->st, c->buf, &len);
    /* Sort a copy of the side list stably by time; among equal times the later write
     * (higher index) must win, so tag with the index before sorting. */
    struct ooo_sample *o = NULL;
    uint32_t no = 0;
    const struct hc_ooo *side = hc_ooo(c);
    uint32_t nside = side ? side->n : 0;
    if (nside) {
        struct ts_pair *pr = bdb_malloc(nside * sizeof *pr);
        o = bdb_malloc(nside * sizeof *o);
        if (!o || !pr) {
            free(pr);
            free(o);
            return BDB_ERR_NOMEM;
        }
        for (uint32_t i = 0; i < nside; i++)
            pr[i] = (struct ts_pair){side->s[i].ts, i};
        qsort(pr, nside, sizeof *pr, pair_cmp);
        for (uint32_t i = 0; i < nside; i++) {
            /* keep only the last write of each time */
            if (i + 1 < nside && pr[i + 1].ts == pr[i].ts)
                continue;
            o[no++] = side->s[pr[i].i];
        }
        free(pr);
    }
    bdb_chunk_iter it;
    int64_t t = 0;
    double x = 0;
    int have = 0;
    if (len && bdb_chunk_iter_init(&it, bytes, len) == BDB_OK)
        have = bdb_chunk_iter_next(&it, &t, &x) == 1;
    uint32_t oi = 0;
    while (have || oi < no) {
        int64_t ot;
        double ov;
        if (have && (oi >= no || t < o[oi].ts)) {
            ot = t;
            ov = x;
            have = bdb_chunk_iter_next(&it, &t, &x) == 1;
        } else {
            ot = o[oi].ts;
            ov = o[oi].v;
            if (have && t == ot) /* the side list holds the later write */
                have = bdb_chunk_iter_next(&it, &t, &x) == 1;
            oi++;
        }
        if (ot >= lo && ot < hi && push(ts, v, n, cap, ot, ov) != BDB_OK) {
            free(o);
            return BDB_ERR_NOMEM;
        }
    }
    free(o);
    return BDB_OK;
}
