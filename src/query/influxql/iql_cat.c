/* iql_cat: the catalog a statement reads: the tenant's devices with their tags, and
 * the measurements and fields their metrics make (m.f: measurement m, field f). */
#include "query/influxql/iql_int.h"

#include "bucketdb/bdb.h"
#include "common/map.h"
#include "common/rcache.h"
#include "common/timeutil.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cat_blk {
    struct cat_blk *next;
    size_t used, cap;
    _Alignas(max_align_t) unsigned char data[];
};

/* n bytes from the catalog's arena, aligned for pointers; freed with the catalog. */
static void *cat_alloc(cat *c, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct cat_blk *b = c->arena;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        b = iql_xmalloc(sizeof *b + cap);
        b->next = c->arena;
        b->used = 0;
        b->cap = cap;
        c->arena = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

static char *cat_str(cat *c, const char *s, size_t n)
{
    char *p = cat_alloc(c, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* The id of measurement name[0..n), given one the first time it is seen. */
static uint32_t meas_id(cat *c, const char *name, size_t n)
{
    uint64_t h = bdb_hash(name, n);
    void *v = bdb_map_get_h(c->mids, name, n, h);
    if (v)
        return (uint32_t)((uintptr_t)v - 1);
    if (c->nmid == c->capmid) {
        c->capmid = c->capmid ? c->capmid * 2 : 16;
        c->mnames = iql_xrealloc(c->mnames, c->capmid * sizeof *c->mnames);
    }
    c->mnames[c->nmid] = cat_str(c, name, n);
    if (bdb_map_set_h(c->mids, name, n, h, (void *)(uintptr_t)(c->nmid + 1)) != BDB_OK)
        abort(); /* the server's policy on allocation failure (docs/RELIABILITY.md) */
    return (uint32_t)c->nmid++;
}

/* The catalog's one copy of a field name or tag key: equal names are one pointer, so
 * that a measurement's lists are made unique without comparing strings. */
static char *intern(cat *c, const char *s, size_t n)
{
    uint64_t h = bdb_hash(s, n);
    char *v = bdb_map_get_h(c->strs, s, n, h);
    if (v)
        return v;
    v = cat_str(c, s, n);
    if (bdb_map_set_h(c->strs, s, n, h, v) != BDB_OK)
        abort();
    return v;
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (char *const *)a, y = (uintptr_t) * (char *const *)b;
    return x < y ? -1 : x > y;
}

/* s (interned names) unique, then in name order. */
static void unique_sorted(strv *s)
{
    if (s->n < 2)
        return;
    qsort(s->v, s->n, sizeof *s->v, cmp_ptr);
    size_t k = 1;
    for (size_t i = 1; i < s->n; i++)
        if (s->v[i] != s->v[k - 1])
            s->v[k++] = s->v[i];
    s->n = k;
    iql_strv_sort_unique(s);
}

static int cat_cb(void *ctx, const bdb_device_info *di)
{
    cat *c = ctx;
    if (c->nd == c->capd) {
        c->capd = c->capd ? c->capd * 2 : 64;
        c->d = iql_xrealloc(c->d, c->capd * sizeof *c->d);
    }
    dev *d = &c->d[c->nd];
    d->name = cat_str(c, di->device, strlen(di->device));
    d->nt = di->ntags;
    d->tk = cat_alloc(c, (di->ntags + 1) * sizeof *d->tk);
    d->tv = cat_alloc(c, (di->ntags + 1) * sizeof *d->tv);
    for (size_t i = 0; i < di->ntags; i++) {
        d->tk[i] = intern(c, di->tags[i].key, di->tags[i].klen);
        d->tv[i] = cat_str(c, di->tags[i].val, di->tags[i].vlen);
    }
    for (size_t i = 0; i < di->nmetrics; i++) {
        if (c->nt == c->capt) {
            c->capt = c->capt ? c->capt * 2 : 256;
            c->t = iql_xrealloc(c->t, c->capt * sizeof *c->t);
        }
        trip *t = &c->t[c->nt++];
        /* m.f: measurement m, field f (the first dot that leaves both non-empty);
         * otherwise measurement m, field value */
        const char *m = di->metrics[i], *dot = strchr(m, '.');
        size_t ml = strlen(m);
        t->metric = cat_str(c, m, ml);
        if (dot && dot > m && dot[1]) {
            t->mid = meas_id(c, m, (size_t)(dot - m));
            t->field = intern(c, dot + 1, ml - (size_t)(dot - m) - 1);
        } else {
            t->mid = meas_id(c, m, ml);
            t->field = c->value;
        }
        t->meas = c->mnames[t->mid];
        t->dev = c->nd;
    }
    c->nd++;
    return 0;
}

static _Thread_local char *const *sort_names; /* qsort has no context argument */

static int cmp_mid(const void *a, const void *b)
{
    return strcmp(sort_names[*(const uint32_t *)a], sort_names[*(const uint32_t *)b]);
}

/* The triples by measurement name, then device (the order the listing gave them),
 * then field: a counting sort over the measurements (few, sorted by name) instead of
 * comparing strings for each of the tenant's metrics. */
static void sort_trips(cat *c)
{
    uint32_t *ids = iql_xmalloc((c->nmid + 1) * sizeof *ids);
    uint32_t *rk = iql_xmalloc((c->nmid + 1) * sizeof *rk);
    size_t *start = iql_xmalloc((c->nmid + 1) * sizeof *start);
    trip *out = iql_xmalloc((c->nt + 1) * sizeof *out);
    for (size_t i = 0; i < c->nmid; i++)
        ids[i] = (uint32_t)i;
    sort_names = c->mnames;
    qsort(ids, c->nmid, sizeof *ids, cmp_mid);
    for (size_t i = 0; i < c->nmid; i++)
        rk[ids[i]] = (uint32_t)i;
    memset(start, 0, (c->nmid + 1) * sizeof *start);
    for (size_t i = 0; i < c->nt; i++)
        start[rk[c->t[i].mid] + 1]++;
    for (size_t i = 1; i < c->nmid; i++)
        start[i] += start[i - 1];
    for (size_t i = 0; i < c->nt; i++)
        out[start[rk[c->t[i].mid]]++] = c->t[i];
    /* fields within one (measurement, device): a device's few metrics */
    for (size_t i = 1; i < c->nt; i++) {
        trip x = out[i];
        size_t j = i;
        while (j > 0 && out[j - 1].mid == x.mid && out[j - 1].dev == x.dev &&
               strcmp(out[j - 1].field, x.field) > 0) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = x;
    }
    free(c->t);
    c->t = out;
    c->capt = c->nt + 1;
    free(start);
    free(rk);
    free(ids);
}

const char *iql_dev_tag(const cat *c, const dev *d, const char *key)
{
    if (!strcmp(key, c->devtag))
        return d->name;
    for (size_t i = 0; i < d->nt; i++)
        if (!strcmp(d->tk[i], key))
            return d->tv[i];
    return NULL;
}

/* What the listing's maps and triples leave behind: the rest is the catalog. */
static void cat_trim(cat *c)
{
    bdb_map_free(c->mids);
    bdb_map_free(c->strs);
    free(c->t);
    free(c->mnames);
    c->mids = c->strs = NULL;
    c->t = NULL;
    c->mnames = NULL;
    c->nt = c->capt = c->nmid = c->capmid = 0;
}

static int cat_load(const iql_ctx *x, const char *device, cat *c)
{
    memset(c, 0, sizeof *c);
    c->mids = bdb_map_new();
    c->strs = bdb_map_new();
    if (!c->mids || !c->strs)
        abort();
    /* a copy: a kept catalog outlives the request and its tenant's settings */
    c->devtag = cat_str(c, x->device_tag, strlen(x->device_tag));
    c->value = intern(c, "value", 5);
    int rc = device ? bdb_db_get_device(x->db, x->tenant, device, cat_cb, c)
                    : bdb_db_list_devices(x->db, x->tenant, cat_cb, c);
    if (device && rc == BDB_ERR_NOTFOUND)
        rc = BDB_OK; /* no such device: nothing to answer */
    if (rc != BDB_OK)
        return rc;
    if (c->nt)
        sort_trips(c);
    /* measurements: runs of equal meas in the sorted triples */
    c->m = iql_xmalloc((c->nt + 1) * sizeof *c->m);
    for (size_t i = 0; i < c->nt;) {
        size_t j = i;
        while (j < c->nt && c->t[j].mid == c->t[i].mid)
            j++;
        meas *m = &c->m[c->nm++];
        memset(m, 0, sizeof *m);
        m->name = c->t[i].meas;
        m->devs = iql_xmalloc((j - i) * sizeof *m->devs);
        m->mf = iql_xmalloc((j - i) * sizeof *m->mf);
        for (size_t k = i; k < j; k++) {
            iql_strv_push(&m->fields, c->t[k].field);
            if (!m->ndevs || m->devs[m->ndevs - 1] != c->t[k].dev)
                m->devs[m->ndevs++] = c->t[k].dev;
            m->mf[m->nmf++] = (mfield){c->t[k].field, c->t[k].metric, c->t[k].dev};
        }
        unique_sorted(&m->fields);
        iql_strv_push(&m->tagkeys, c->devtag);
        for (size_t k = 0; k < m->ndevs; k++) {
            const dev *d = &c->d[m->devs[k]];
            for (size_t t = 0; t < d->nt; t++)
                iql_strv_push(&m->tagkeys, d->tk[t]);
        }
        unique_sorted(&m->tagkeys);
        i = j;
    }
    cat_trim(c);
    return BDB_OK;
}

/* Bytes a catalog holds, about (for the cache's limit). */
static size_t cat_bytes(const cat *c)
{
    size_t n = sizeof *c + c->capd * sizeof *c->d + c->nm * sizeof *c->m;
    for (const struct cat_blk *b = c->arena; b; b = b->next)
        n += sizeof *b + b->cap;
    for (size_t i = 0; i < c->nm; i++) {
        const meas *m = &c->m[i];
        n += m->ndevs * sizeof *m->devs + m->nmf * sizeof *m->mf +
             (m->fields.cap + m->tagkeys.cap) * sizeof(char *);
    }
    return n;
}

static void cat_destroy(void *p)
{
    iql_cat_free(p);
    free(p);
}

/* A tenant's catalog comes from x->catalogs while the engine's version of it is the
 * one it was listed at: the key names the version, so an entry never goes stale (a
 * change makes a new key; the old entry leaves by eviction). The version is read
 * before the listing, so a change during it makes the next statement list again. A
 * catalog is kept from the second time it is missed on (bdb_rcache_admit): a tenant
 * asked once pays nothing for the cache. */
int iql_cat_load(const iql_ctx *x, cat *c)
{
    uint64_t ver[2];
    if ((!x->catalogs && !x->groups) || bdb_db_catalog_version(x->db, x->tenant, ver) != BDB_OK)
        return cat_load(x, NULL, c);
    if (!x->catalogs) {
        int rc = cat_load(x, NULL, c);
        memcpy(c->ver, ver, sizeof ver);
        c->has_ver = rc == BDB_OK;
        return rc;
    }
    size_t tl = strlen(x->tenant), dl = strlen(x->device_tag), kl = 1 + 16 + tl + 1 + dl;
    char *key = iql_xmalloc(kl);
    key[0] = 'C';
    memcpy(key + 1, ver, 16);
    memcpy(key + 17, x->tenant, tl + 1); /* the tenant's name ends at its NUL */
    memcpy(key + 18 + tl, x->device_tag, dl);
    size_t len;
    bdb_rcache_ent *ref;
    const cat *kept = bdb_rcache_get(x->catalogs, key, kl, &len, &ref);
    int rc = BDB_OK;
    if (!kept) {
        rc = cat_load(x, NULL, c);
        if (rc == BDB_OK && bdb_rcache_admit(x->catalogs, key, kl)) {
            cat *own = iql_xmalloc(sizeof *own);
            *own = *c;
            kept = bdb_rcache_put_ref(x->catalogs, key, kl, own, cat_bytes(own), cat_destroy, &ref);
            if (!kept)
                free(own); /* not kept: c still owns its parts */
        }
    }
    free(key);
    if (kept) {
        *c = *kept;
        c->cache = x->catalogs;
        c->ref = ref;
    }
    memcpy(c->ver, ver, sizeof ver);
    c->has_ver = rc == BDB_OK;
    return rc;
}

int iql_cat_load_device(const iql_ctx *x, const char *device, cat *c)
{
    return cat_load(x, device, c);
}

void iql_cat_free(cat *c)
{
    if (c->ref) {
        bdb_rcache_release(c->cache, c->ref);
        memset(c, 0, sizeof *c);
        return;
    }
    free(c->d);
    for (size_t i = 0; i < c->nm; i++) {
        free(c->m[i].fields.v);
        free(c->m[i].tagkeys.v);
        free(c->m[i].devs);
        free(c->m[i].mf);
    }
    free(c->m);
    free(c->t);
    free(c->mnames);
    if (c->mids)
        bdb_map_free(c->mids);
    if (c->strs)
        bdb_map_free(c->strs);
    while (c->arena) {
        struct cat_blk *n = c->arena->next;
        free(c->arena);
        c->arena = n;
    }
}

int iql_name_match(const iql_name *n, const char *s)
{
    if (n->kind == IQL_N_WILD)
        return 1;
    if (n->kind == IQL_N_REGEX)
        return regexec(n->re, s, 0, NULL, 0) == 0;
    return !strcmp(n->name, s);
}

int iql_meas_selected(const iql_stmt *st, const meas *m)
{
    if (!st->nfrom)
        return 1;
    for (size_t i = 0; i < st->nfrom; i++)
        if (iql_name_match(&st->from[i], m->name))
            return 1;
    return 0;
}
