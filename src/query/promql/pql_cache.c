/* pql_cache: kept answers of a range query's settled steps (pql_cache.h). */
#include "query/promql/pql_cache.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "common/rcache.h"
#include "storage/embedded/core/db.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A kept answer takes at most this share of the cache (as the group cache's). */
#define PC_SHARE 8
/* Kept only when the part read at least this many samples or windows per point it
 * answers: one device's windows read from the tiers cost about what decoding them
 * from the cache costs. */
#define PC_READS_PER_POINT 4

/* Whether every step's reads lie at or before the step's time: no negative offset. */
static int reads_back(const pql_node *n)
{
    if (!n)
        return 1;
    if (n->kind == PQL_SELECTOR && n->offset_ms < 0)
        return 0;
    for (size_t i = 0; i < n->nargs && i < 2; i++)
        if (!reads_back(n->args[i]))
            return 0;
    return 1;
}

/* ---- a kept answer: type, series count, steps, tier, samples; then the scalar's
 * values, or per series its labels, values and has flags ---- */

static void put_str(bdb_buf *b, const char *s)
{
    size_t l = strlen(s);
    bdb_buf_put_u32le(b, (uint32_t)l);
    bdb_buf_append(b, s, l);
}

/* The first ns steps of r (its series without a point in them left out), which read
 * `samples` samples or windows. */
static void encode(bdb_buf *b, const pql_result *r, size_t ns, uint64_t samples)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n; i++)
        n += memchr(r->s[i].has, 1, ns) != NULL;
    bdb_buf_put_u32le(b, (uint32_t)r->type);
    bdb_buf_put_u32le(b, (uint32_t)n);
    bdb_buf_put_u64le(b, ns);
    bdb_buf_put_u64le(b, (uint64_t)r->tier_ms);
    bdb_buf_put_u64le(b, samples);
    bdb_buf_put_u64le(b, (uint64_t)r->raw_from);
    if (r->type == PQL_SCALAR) {
        bdb_buf_append(b, r->scalar, ns * sizeof *r->scalar);
        return;
    }
    for (size_t i = 0; i < r->n; i++) {
        const pql_out_series *s = &r->s[i];
        if (!memchr(s->has, 1, ns))
            continue;
        bdb_buf_put_u32le(b, (uint32_t)s->labels.n);
        for (size_t k = 0; k < s->labels.n; k++) {
            put_str(b, s->labels.v[k].name);
            put_str(b, s->labels.v[k].value);
        }
        bdb_buf_append(b, s->v, ns * sizeof *s->v);
        bdb_buf_append(b, s->has, ns);
    }
}

struct rd {
    const unsigned char *p, *end;
    int bad;
};

static const void *take(struct rd *d, size_t n)
{
    if (d->bad || (size_t)(d->end - d->p) < n) {
        d->bad = 1;
        return NULL;
    }
    const void *q = d->p;
    d->p += n;
    return q;
}

static uint64_t take_u(struct rd *d, size_t n)
{
    const unsigned char *q = take(d, n);
    uint64_t v = 0;
    for (size_t i = 0; q && i < n; i++)
        v |= (uint64_t)q[i] << (8 * i);
    return v;
}

static char *take_str(struct rd *d)
{
    size_t l = (size_t)take_u(d, 4);
    const char *q = take(d, l);
    char *s = q ? malloc(l + 1) : NULL;
    if (s) {
        memcpy(s, q, l);
        s[l] = 0;
    }
    return s;
}

/* The kept answer v back as a result: 0, or -1 (out of memory: r freed). */
static int decode(const void *v, size_t len, int64_t start, int64_t step, pql_result *r)
{
    struct rd d = {v, (const unsigned char *)v + len, 0};
    memset(r, 0, sizeof *r);
    r->type = (enum pql_type)take_u(&d, 4);
    size_t n = (size_t)take_u(&d, 4);
    r->nsteps = (size_t)take_u(&d, 8);
    r->tier_ms = (int64_t)take_u(&d, 8);
    r->samples = take_u(&d, 8);
    r->raw_from = (int64_t)take_u(&d, 8);
    r->start = start;
    r->step = step;
    if (r->type == PQL_SCALAR) {
        const void *q = take(&d, r->nsteps * sizeof(double));
        if (!q || !(r->scalar = malloc(r->nsteps * sizeof(double) + 1)))
            return -1;
        memcpy(r->scalar, q, r->nsteps * sizeof(double));
        return 0;
    }
    r->s = calloc(n + 1, sizeof *r->s);
    if (!r->s)
        return -1;
    for (size_t i = 0; i < n && !d.bad; i++, r->n++) {
        pql_out_series *s = &r->s[i];
        size_t nl = (size_t)take_u(&d, 4);
        s->labels.v = calloc(nl + 1, sizeof *s->labels.v);
        s->v = malloc(r->nsteps * sizeof *s->v + 1);
        s->has = malloc(r->nsteps + 1);
        if (!s->labels.v || !s->v || !s->has) {
            d.bad = 1;
            r->n++;
            break;
        }
        for (size_t k = 0; k < nl && !d.bad; k++, s->labels.n++) {
            s->labels.v[k].name = take_str(&d);
            s->labels.v[k].value = take_str(&d);
            d.bad |= !s->labels.v[k].name || !s->labels.v[k].value;
        }
        const void *vv = take(&d, r->nsteps * sizeof *s->v), *hh = take(&d, r->nsteps);
        if (vv && hh) {
            memcpy(s->v, vv, r->nsteps * sizeof *s->v);
            memcpy(s->has, hh, r->nsteps);
        }
    }
    if (d.bad) {
        pql_result_free(r);
        return -1;
    }
    return 0;
}

/* ---- the whole answer from its two parts ---- */

static int series_into(pql_out_series *o, const pql_out_series *from, size_t at, size_t nsteps,
                       size_t total)
{
    if (!o->v)
        o->v = calloc(total + 1, sizeof *o->v);
    if (!o->has)
        o->has = calloc(total + 1, 1);
    if (!o->v || !o->has)
        return -1;
    memcpy(o->v + at, from->v, nsteps * sizeof *o->v);
    memcpy(o->has + at, from->has, nsteps);
    return 0;
}

/* res := a's steps then b's (series in label order, as pql_eval gives them); a and b
 * are freed. 0, -1 out of memory, -2 parts of different types. */
static int merge(pql_result *a, pql_result *b, pql_result *res)
{
    memset(res, 0, sizeof *res);
    if (a->type != b->type || (a->type != PQL_SCALAR && a->type != PQL_VECTOR)) {
        pql_result_free(a);
        pql_result_free(b);
        return -2;
    }
    size_t total = a->nsteps + b->nsteps;
    res->type = a->type;
    res->start = a->start;
    res->step = a->step;
    res->nsteps = total;
    res->tier_ms = a->tier_ms > b->tier_ms ? a->tier_ms : b->tier_ms;
    res->samples = b->samples; /* b counted on from a's */
    res->raw_from = a->raw_from < b->raw_from ? a->raw_from : b->raw_from;
    int bad = 0;
    if (a->type == PQL_SCALAR) {
        res->scalar = malloc(total * sizeof *res->scalar + 1);
        if (res->scalar) {
            memcpy(res->scalar, a->scalar, a->nsteps * sizeof *res->scalar);
            memcpy(res->scalar + a->nsteps, b->scalar, b->nsteps * sizeof *res->scalar);
        }
        bad = !res->scalar;
    } else {
        res->s = calloc(a->n + b->n + 1, sizeof *res->s);
        bad = !res->s;
        size_t i = 0, j = 0;
        while (!bad && (i < a->n || j < b->n)) {
            int c = i == a->n   ? 1
                    : j == b->n ? -1
                                : pql_labels_cmp(&a->s[i].labels, &b->s[j].labels);
            pql_out_series *o = &res->s[res->n++];
            pql_out_series *from = c <= 0 ? &a->s[i] : &b->s[j];
            o->labels = from->labels; /* taken over: the part's copy is cleared */
            from->labels = (pql_labels){0};
            if (c <= 0)
                bad |= series_into(o, &a->s[i++], 0, a->nsteps, total);
            if (c >= 0)
                bad |= series_into(o, &b->s[j++], a->nsteps, b->nsteps, total);
            if (!bad && c < 0)
                memset(o->has + a->nsteps, 0, b->nsteps);
        }
    }
    pql_result_free(a);
    pql_result_free(b);
    if (bad) {
        pql_result_free(res);
        return -1;
    }
    return 0;
}

/* Whether r (a whole range's answer) is worth keeping: points to answer, and many
 * samples or windows read per point (an aggregation over devices, a rate of raw
 * samples); one device's windows read from the tiers cost about what decoding them
 * from the cache costs. */
static int worth(const pql_result *r)
{
    uint64_t points = (uint64_t)r->n * r->nsteps;
    return r->type == PQL_VECTOR && r->n && r->samples >= PC_READS_PER_POINT * points;
}

/* Keeps the first ns steps of r (the whole range's answer) under key k, within its
 * share of the cache, with what the whole read beyond the rest: a hit's rest counts on
 * from there, so the two add up to what the whole range reads. */
static void keep(bdb_rcache *c, const bdb_buf *k, const pql_result *r, size_t ns,
                 uint64_t rest_samples)
{
    bdb_buf val;
    bdb_buf_init(&val);
    encode(&val, r, ns, r->samples > rest_samples ? r->samples - rest_samples : 0);
    bdb_rcache_stats cs;
    bdb_rcache_stats_get(c, &cs);
    if (val.len <= cs.max_bytes / PC_SHARE) {
        bdb_rcache_put(c, k->data, k->len, val.data, val.len);
        val.data = NULL; /* the cache's now */
    }
    bdb_buf_free(&val);
}

static int oom(char *err, size_t errlen)
{
    snprintf(err, errlen, "out of memory");
    return PQL_E_INTERNAL;
}

/* Into k, per selector of n, whether each tier still covers its first window at the
 * query's start: what decides between a tier and raw samples, which a kept part and
 * the whole range must decide alike. Returns the earliest time a selector reads. */
static int64_t earliest(const pql_node *n, int64_t start, const int64_t *tier_oldest, bdb_buf *k)
{
    if (!n)
        return INT64_MAX;
    int64_t e = INT64_MAX;
    if (n->kind == PQL_SELECTOR) {
        int64_t back = n->offset_ms + (n->range_ms ? n->range_ms : PQL_LOOKBACK_MS);
        e = start - back;
        uint8_t bits = 0;
        for (int i = 0; i < 3 && tier_oldest; i++)
            bits |= (uint8_t)((e >= tier_oldest[i]) << i);
        bdb_buf_putc(k, bits);
    }
    for (size_t i = 0; i < n->nargs && i < 2; i++) {
        int64_t x = earliest(n->args[i], start, tier_oldest, k);
        e = x < e ? x : e;
    }
    return e;
}

int pql_eval_cached(const pql_node *expr, const pql_source *src, const pql_eval_opts *o,
                    const pql_cache_ctx *cc, pql_result *res, char *err, size_t errlen)
{
    uint64_t cat[2], settled;
    int64_t hz = cc->now_ms - BDB_SETTLED_MS;
    if (!cc->cache || o->step <= 0 || o->end <= o->start || hz < o->start ||
        expr->type == PQL_MATRIX || !reads_back(expr) ||
        bdb_db_catalog_version(cc->db, cc->tenant, cat) != BDB_OK ||
        bdb_db_settled_version(cc->db, cc->tenant, &settled) != BDB_OK)
        return pql_eval(expr, src, o, res, err, errlen);
    uint64_t nsteps = (uint64_t)((o->end - o->start) / o->step) + 1;
    uint64_t ns = (uint64_t)((hz - o->start) / o->step) + 1; /* steps at or before hz */
    if (ns > nsteps)
        ns = nsteps;
    if (ns < 2)
        return pql_eval(expr, src, o, res, err, errlen);
    bdb_buf k;
    bdb_buf_init(&k);
    bdb_buf_putc(&k, 'P');
    bdb_buf_put_u64le(&k, cat[0]);
    bdb_buf_put_u64le(&k, cat[1]);
    bdb_buf_put_u64le(&k, settled);
    bdb_buf_put_u64le(&k, (uint64_t)o->start);
    bdb_buf_put_u64le(&k, (uint64_t)o->step);
    bdb_buf_put_u64le(&k, ns);
    bdb_buf_put_u64le(&k, o->max_samples);
    bdb_buf_put_u64le(&k, o->max_points);
    bdb_buf_putc(&k, (uint8_t)o->no_tiers);
    put_str(&k, cc->tenant);
    put_str(&k, cc->query);
    earliest(expr, o->start, cc->tier_oldest, &k);
    /* Raw reads end at the tenant's retention cutoff, which moves with the clock: kept
     * and used only where no raw read reached it (then neither evaluation was cut;
     * windows from the tiers are not). */
    int64_t cutoff = bdb_db_retention_cutoff(cc->db, cc->tenant);
    pql_eval_opts bo = *o;
    bo.part = 1;
    bo.part_start = o->start;
    bo.start = o->start + (int64_t)ns * o->step;
    size_t len;
    bdb_rcache_ent *ref;
    const void *v = bdb_rcache_get(cc->cache, k.data, k.len, &len, &ref);
    if (!v) {
        /* the whole range at once; its first ns steps are what a later query keeps */
        int admit = bdb_rcache_admit(cc->cache, k.data, k.len);
        int rc = pql_eval(expr, src, o, res, err, errlen);
        if (rc == PQL_E_OK && admit && worth(res) && res->raw_from >= cutoff) {
            /* the rest alone, for what the kept part counts against the limit */
            pql_result b;
            char berr[8];
            if (ns == nsteps) {
                keep(cc->cache, &k, res, (size_t)ns, 0);
            } else if (pql_eval(expr, src, &bo, &b, berr, sizeof berr) == PQL_E_OK) {
                keep(cc->cache, &k, res, (size_t)ns, b.samples);
                pql_result_free(&b);
            }
        }
        bdb_buf_free(&k);
        return rc;
    }
    pql_result a, b;
    int d = decode(v, len, o->start, o->step, &a);
    bdb_rcache_release(cc->cache, ref);
    bdb_buf_free(&k);
    if (d != 0)
        return oom(err, errlen);
    if (a.raw_from < cutoff) { /* read before the cutoff moved past its samples */
        pql_result_free(&a);
        return pql_eval(expr, src, o, res, err, errlen);
    }
    if (ns == nsteps) {
        *res = a;
        return PQL_E_OK;
    }
    /* the rest's reads count after the kept part's, as in the whole range */
    bo.part_samples = a.samples;
    int rc = pql_eval(expr, src, &bo, &b, err, errlen);
    if (rc != PQL_E_OK) {
        pql_result_free(&a);
        return rc;
    }
    int m = merge(&a, &b, res);
    if (m == -2) /* not one type at every step: the whole range as one */
        return pql_eval(expr, src, o, res, err, errlen);
    if (m)
        return oom(err, errlen);
    if (o->max_points && (uint64_t)res->n * res->nsteps > o->max_points) {
        /* the answer alone holds more points than the whole range may */
        pql_result_free(res);
        snprintf(err, errlen,
                 "query would hold more than %llu points (series x steps) at once; narrow the "
                 "selector or the range, or raise the step",
                 (unsigned long long)o->max_points);
        return PQL_E_EXECUTION;
    }
    return PQL_E_OK;
}
