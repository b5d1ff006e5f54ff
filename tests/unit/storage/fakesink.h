/* fakesink: an in-memory implementation of every op of storage/sink.h for unit tests
 * of the engine's sink glue (db_sink.c, db_agg_sink.c, db_state_sink.c,
 * db_state_read.c, db_late_sink.c). The Cassandra sink itself is tested against a real
 * cluster by the integration tests; this fake keeps the unit tests fast and lets them
 * fail any call on purpose.
 *
 * Semantics follow sink.h: raw rows keyed by (tenant, device, metric, time), the last
 * put wins; tier and fleet windows replaced whole by start; state per field newer
 * wins; device rows replaced; counts only grow; late rows keyed by the event's
 * identity. Failure injection: fail_call = K fails the K-th call of any op from now
 * (1-based, counted in `calls`), fail_op/fail_nth fail the N-th call of one op (every
 * call of it when fail_nth is 0); a failing call returns fail_rc and changes nothing. Header-only:
 * include it in one test file. */
#ifndef BDB_TEST_FAKESINK_H
#define BDB_TEST_FAKESINK_H

#include "agg/fleet.h"
#include "agg/rollup.h"
#include "bucketdb/bdb.h"
#include "storage/sink.h"

#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum fs_op {
    FS_PUT,
    FS_COMMIT,
    FS_READ,
    FS_TIER_PUT,
    FS_TIER_READ,
    FS_FLEET_PUT,
    FS_FLEET_READ,
    FS_STATE_PUT,
    FS_DEVICE_PUT,
    FS_COUNT_PUT,
    FS_STATE_GET,
    FS_STATE_LIST,
    FS_DEVICE_LIST,
    FS_COUNT_LIST,
    FS_LATE_PUT,
    FS_LATE_LIST,
    FS_ACK_PUT,
    FS_DOC_PUT,
    FS_DOC_GET,
    FS_TENANT_LIST,
    FS_NOPS
};

typedef struct fs_raw {
    char *tenant, *device, *metric;
    int64_t part, ts;
    double v;
} fs_raw;
typedef struct fs_tier {
    char *tenant, *device, *metric;
    int res;
    bdb_rollup r; /* every window put, one per start */
} fs_tier;
typedef struct fs_fleet {
    char *tenant, *metric;
    int res;
    bdb_fleet f; /* every window put, one per start */
} fs_fleet;
typedef struct fs_state {
    char *tenant, *device, *state;
    int64_t event_ts, state_ts;
    bdb_sink_metric *m; /* names owned */
    size_t nm;
} fs_state;
typedef struct fs_device {
    char *tenant, *device;
    uint64_t samples;
    int64_t first_ts, last_ts, bucket_ms;
    size_t ntags, nhist, nmetrics;
    /* the rest of the row, as fakesink_new(2)'s device_list gives it back: the tags,
     * bucket history, metric names, pinned and class, in one owned block
     * (fs_device_rest_*); NULL in a copy made by hand */
    char *rest;
} fs_device;
typedef struct fs_late {
    char *tenant, *device;
    bdb_sink_late e;
} fs_late;

typedef struct fs_doc {
    char *key;
    void *data;
    size_t len;
} fs_doc;

typedef struct fakesink {
    bdb_sink base;
    fs_doc *doc; /* named documents (doc_put / doc_get) */
    size_t ndoc;
    fs_raw *raw;
    size_t nraw;
    fs_tier *tier;
    size_t ntier;
    fs_fleet *fleet;
    size_t nfleet;
    fs_state *st;
    size_t nst;
    fs_device *dev;
    size_t ndev;
    bdb_sink_count *cnt; /* tenant, device owned */
    size_t ncnt;
    fs_late *late;
    size_t nlate;
    /* acknowledgements (ack_begin/put/end): off unless ack_on; the rows acknowledged,
     * kept apart from the flushes' (raw) with the same last-put-wins rule */
    int ack_on;
    fs_raw *ack;
    size_t nack;
    uint64_t ack_groups;
    uint64_t calls, op_calls[FS_NOPS];
    uint64_t fail_call; /* 0 = off */
    int fail_op;        /* -1 = off */
    uint64_t fail_nth;  /* 0 = every call of fail_op */
    int fail_rc;
    uint64_t failed;
    int failed_op; /* the op of the last call failed on purpose */
    int closed;
    pthread_mutex_t mu;
} fakesink;

#define FS_GROW(arr, n) ((arr) = realloc((arr), ((n) + 1) * sizeof *(arr)))

static int fs_enter(fakesink *f, enum fs_op op)
{
    f->calls++;
    f->op_calls[op]++;
    if ((f->fail_call && f->calls == f->fail_call) ||
        (f->fail_op == (int)op && (f->fail_nth == 0 || f->op_calls[op] == f->fail_nth))) {
        f->failed++;
        f->failed_op = (int)op;
        return f->fail_rc;
    }
    return BDB_OK;
}

static int fs_eq(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

static char *fs_dup(const char *s)
{
    return s ? strdup(s) : NULL;
}

static int fs_put_locked(bdb_sink *s, const char *tn, const char *dn, const char *mn, int64_t part,
                         int64_t ttl_ms, const int64_t *ts, const double *v, size_t n)
{
    (void)ttl_ms;
    fakesink *f = (fakesink *)s;
    int rc = fs_enter(f, FS_PUT);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < f->nraw && !(f->raw[k].ts == ts[i] && fs_eq(f->raw[k].metric, mn) &&
                                fs_eq(f->raw[k].device, dn) && fs_eq(f->raw[k].tenant, tn)))
            k++;
        if (k == f->nraw) {
            FS_GROW(f->raw, f->nraw);
            f->raw[f->nraw++] = (fs_raw){fs_dup(tn), fs_dup(dn), fs_dup(mn), part, ts[i], v[i]};
        } else {
            f->raw[k].v = v[i];
            f->raw[k].part = part;
        }
    }
    return BDB_OK;
}

static int fs_commit_locked(bdb_sink *s)
{
    return fs_enter((fakesink *)s, FS_COMMIT);
}

static int fs_read_locked(bdb_sink *s, const char *tn, const char *dn, const int64_t *buckets,
                          size_t nbuckets, uint32_t nsub, int64_t lo, int64_t hi,
                          const char *const *metrics, size_t nmetrics, bdb_sink_add_fn add,
                          void *ud)
{
    (void)nsub;
    fakesink *f = (fakesink *)s;
    int rc = fs_enter(f, FS_READ);
    if (rc)
        return rc;
    for (size_t k = 0; k < f->nraw; k++) {
        fs_raw *r = &f->raw[k];
        if (!fs_eq(r->tenant, tn) || !fs_eq(r->device, dn) || r->ts < lo || r->ts >= hi)
            continue;
        int in_bucket = 0; /* partition id = bucket start + sub-bucket (nsub < bucket ms) */
        for (size_t b = 0; b < nbuckets; b++)
            if (r->part >= buckets[b] && r->part < buckets[b] + (int64_t)nsub)
                in_bucket = 1;
        for (size_t m = 0; m < nmetrics && in_bucket; m++)
            if (fs_eq(metrics[m], r->metric))
                add(ud, m, r->ts, r->v);
    }
    return BDB_OK;
}

static const char *fs_describe(bdb_sink *s)
{
    (void)s;
    return "fake://memory";
}

static void fs_close(bdb_sink *s)
{
    ((fakesink *)s)->closed = 1; /* the test frees it (fakesink_free) after its checks */
}

static int fs_tier_put_locked(bdb_sink *s, const char *tn, const char *dn, const char *mn, int res,
                              const bdb_rollup *r, const int32_t *ttl_s)
{
    (void)ttl_s;
    fakesink *f = (fakesink *)s;
    int rc = fs_enter(f, FS_TIER_PUT);
    if (rc)
        return rc;
    size_t k = 0;
    while (k < f->ntier && !(f->tier[k].res == res && fs_eq(f->tier[k].metric, mn) &&
                             fs_eq(f->tier[k].device, dn) && fs_eq(f->tier[k].tenant, tn)))
        k++;
    if (k == f->ntier) {
        FS_GROW(f->tier, f->ntier);
        f->tier[f->ntier] = (fs_tier){fs_dup(tn), fs_dup(dn), fs_dup(mn), res, {0}};
        bdb_rollup_init(&f->tier[f->ntier++].r, r->width);
    }
    for (size_t i = 0; i < r->n && rc == BDB_OK; i++)
        rc = bdb_rollup_set_window(&f->tier[k].r, &r->w[i]); /* a complete value: replaces */
    return rc;
}

static int fs_tier_read_locked(bdb_sink *s, const char *tn, const char *dn, const char *mn, int res,
                               int64_t lo, int64_t hi, bdb_rollup *out)
{
    fakesink *f = (fakesink *)s;
    int rc = fs_enter(f, FS_TIER_READ);
    if (rc)
        return rc;
    for (size_t k = 0; k < f->ntier; k++) {
        fs_tier *t = &f->tier[k];
        if (t->res != res || !fs_eq(t->metric, mn) || !fs_eq(t->device, dn) ||
            !fs_eq(t->tenant, tn))
            continue;
        for (size_t i = 0; i < t->r.n && rc == BDB_OK; i++)
            if (t->r.w[i].start >= lo && t->r.w[i].start < hi)
                rc = bdb_rollup_merge_window(out, &t->r.w[i]);
    }
    return rc;
}

static fs_fleet *fs_fleet_of(fakesink *f, const char *tn, const char *mn, int res, int create,
                             int64_t width)
{
    for (size_t k = 0; k < f->nfleet; k++)
        if (f->fleet[k].res == res && fs_eq(f->fleet[k].metric, mn) &&
            fs_eq(f->fleet[k].tenant, tn))
            return &f->fleet[k];
    if (!create)
        return NULL;
    FS_GROW(f->fleet, f->nfleet);
    fs_fleet *e = &f->fleet[f->nfleet++];
    e->tenant = fs_dup(tn);
    e->metric = fs_dup(mn);
    e->res = res;
    bdb_fleet_init(&e->f, width);
    return e;
}

static int fs_fleet_put_locked(bdb_sink *s, const char *tn, const char *mn, int res,
                               const bdb_fleet *fl, const int32_t *ttl_s)
{
    (void)ttl_s;
    fakesink *f = (fakesink *)s;
    int rc = fs_enter(f, FS_FLEET_PUT);
    if (rc)
        return rc;
    fs_fleet *e = fs_fleet_of(f, tn, mn, res, 1, fl->width);
    for (size_t i = 0; i < fl->n; i++)
        bdb_fleet_drop(&e->f, fl->w[i].start); /* replaced whole */
    return bdb_fleet_merge(&e->f, fl);
}

static int fs_fleet_read_locked(bdb_sink *s, const char *tn, const char *mn, int res, int64_t lo,
                                int64_t hi, bdb_fleet *out)
{
    fakesink *f = (fakesink *)s;
    int rc = fs_enter(f, FS_FLEET_READ);
    if (rc)
        return rc;
    fs_fleet *e = fs_fleet_of(f, tn, mn, res, 0, 0);
    if (!e)
        return BDB_OK;
    bdb_fleet tmp;
    bdb_fleet_init(&tmp, e->f.width);
    rc = bdb_fleet_merge(&tmp, &e->f);
    for (size_t i = tmp.n; i-- > 0;)
        if (tmp.w[i].start < lo || tmp.w[i].start >= hi)
            bdb_fleet_drop(&tmp, tmp.w[i].start);
    if (rc == BDB_OK)
        rc = bdb_fleet_merge(out, &tmp);
    bdb_fleet_free(&tmp);
    return rc;
}

static int fs_state_put_locked(bdb_sink *s, const bdb_sink_state *v, size_t n)
{
    fakesink *f = (fakesink *)s;
    int rc = fs_enter(f, FS_STATE_PUT);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < f->nst &&
               !(fs_eq(f->st[k].tenant, v[i].tenant) && fs_eq(f->st[k].device, v[i].device)))
            k++;
        if (k == f->nst) {
            FS_GROW(f->st, f->nst);
            f->st[f->nst++] = (fs_state){
                fs_dup(v[i].tenant), fs_dup(v[i].device), NULL, INT64_MIN, INT64_MIN, NULL, 0};
        }
        fs_state *e = &f->st[k];
        if (v[i].event_ts > e->event_ts)
            e->event_ts = v[i].event_ts;
        if (v[i].state && (!e->state || v[i].state_ts >= e->state_ts)) {
            free(e->state);
            e->state = fs_dup(v[i].state);
            e->state_ts = v[i].state_ts;
        }
        for (size_t m = 0; m < v[i].nmetrics; m++) {
            const bdb_sink_metric *sm = &v[i].metrics[m];
            size_t j = 0;
            while (j < e->nm && !fs_eq(e->m[j].name, sm->name))
                j++;
            if (j == e->nm) {
                FS_GROW(e->m, e->nm);
                e->m[e->nm++] = (bdb_sink_metric){fs_dup(sm->name), INT64_MIN, 0};
            }
            if (sm->ts >= e->m[j].ts) {
                e->m[j].ts = sm->ts;
                e->m[j].v = sm->v;
            }
        }
    }
    return BDB_OK;
}

/* The tags, history, metric names, pinned and class of a registry row, packed:
 * NUL-terminated strings and decimal numbers, one after another. */
static char *fs_device_rest_pack(const bdb_sink_device *v)
{
    size_t cap = 64;
    for (size_t i = 0; i < v->ntags; i++)
        cap += strlen(v->tag_keys[i]) + strlen(v->tag_vals[i]) + 2;
    for (size_t i = 0; i < v->nmetrics; i++)
        cap += strlen(v->metrics[i]) + 1;
    cap += v->nhist * 44;
    char *out = malloc(cap), *p = out;
    if (!out)
        abort();
    p +=
        sprintf(p, "%zu %zu %zu %d %d", v->ntags, v->nhist, v->nmetrics, v->pinned, v->freq_class) +
        1;
    for (size_t i = 0; i < v->ntags; i++) {
        p = stpcpy(p, v->tag_keys[i]) + 1;
        p = stpcpy(p, v->tag_vals[i]) + 1;
    }
    for (size_t i = 0; i < v->nhist; i++)
        p += sprintf(p, "%lld %lld", (long long)v->hist_from[i], (long long)v->hist_size[i]) + 1;
    for (size_t i = 0; i < v->nmetrics; i++)
        p = stpcpy(p, v->metrics[i]) + 1;
    return out;
}

/* Unpacks d->rest into v's arrays (malloc'd into *mem, freed by the caller). */
static void fs_device_rest_unpack(const fs_device *d, bdb_sink_device *v, void **mem)
{
    *mem = NULL;
    if (!d->rest)
        return;
    const char *p = d->rest;
    size_t nt = 0, nh = 0, nm = 0;
    int pinned = 0, cls = 0;
    if (sscanf(p, "%zu %zu %zu %d %d", &nt, &nh, &nm, &pinned, &cls) != 5)
        abort();
    p += strlen(p) + 1;
    char **arr = calloc(2 * nt + nm + 1, sizeof *arr);
    int64_t *h = calloc(2 * nh + 1, sizeof *h);
    if (!arr || !h)
        abort();
    for (size_t i = 0; i < 2 * nt; i++, p += strlen(p) + 1)
        arr[i] = (char *)p;
    for (size_t i = 0; i < nh; i++, p += strlen(p) + 1) {
        long long a, b;
        if (sscanf(p, "%lld %lld", &a, &b) != 2)
            abort();
        h[i] = a;
        h[nh + i] = b;
    }
    for (size_t i = 0; i < nm; i++, p += strlen(p) + 1)
        arr[2 * nt + i] = (char *)p;
    char **keys = calloc(nt + 1, sizeof *keys), **vals = calloc(nt + 1, sizeof *vals);
    if (!keys || !vals)
        abort();
    for (size_t i = 0; i < nt; i++) {
        keys[i] = arr[2 * i];
        vals[i] = arr[2 * i + 1];
    }
    v->tag_keys = (const char *const *)keys;
    v->tag_vals = (const char *const *)vals;
    v->ntags = nt;
    v->hist_from = h;
    v->hist_size = h + nh;
    v->nhist = nh;
    v->metrics = (const char *const *)(arr + 2 * nt);
    v->nmetrics = nm;
    v->pinned = pinned;
    v->freq_class = cls;
    void **m = calloc(4, sizeof *m); /* what to free after the call */
    if (!m)
        abort();
    m[0] = arr;
    m[1] = h;
    m[2] = keys;
    m[3] = vals;
    *mem = m;
}

static void fs_device_rest_free(void *mem)
{
    void **m = mem;
    if (!m)
        return;
    for (int i = 0; i < 4; i++)
        free(m[i]);
    free(m);
}

static int fs_device_put_locked(bdb_sink *s, const bdb_sink_device *v, size_t n)
{
    fakesink *f = (fakesink *)s;
    int rc = fs_enter(f, FS_DEVICE_PUT);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < f->ndev &&
               !(fs_eq(f->dev[k].tenant, v[i].tenant) && fs_eq(f->dev[k].device, v[i].device)))
            k++;
        if (k == f->ndev) {
            FS_GROW(f->dev, f->ndev);
            f->dev[f->ndev++] =
                (fs_device){fs_dup(v[i].tenant), fs_dup(v[i].device), 0, 0, 0, 0, 0, 0, 0, NULL};
        }
        fs_device *d = &f->dev[k];
        d->samples = v[i].samples;
        d->first_ts = v[i].first_ts;
        d->last_ts = v[i].last_ts;
        d->bucket_ms = v[i].bucket_ms;
        d->ntags = v[i].ntags;
        d->nhist = v[i].nhist;
        d->nmetrics = v[i].nmetrics;
        free(d->rest);
        d->rest = fs_device_rest_pack(&v[i]);
    }
    return BDB_OK;
}

static int fs_count_put_locked(bdb_sink *s, const bdb_sink_count *v, size_t n)
{
    fakesink *f = (fakesink *)s;
    int rc = fs_enter(f, FS_COUNT_PUT);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < f->ncnt &&
               !(f->cnt[k].bucket_start == v[i].bucket_start &&
                 fs_eq(f->cnt[k].tenant, v[i].tenant) && fs_eq(f->cnt[k].device, v[i].device)))
            k++;
        if (k == f->ncnt) {
            FS_GROW(f->cnt, f->ncnt);
            f->cnt[f->ncnt] = v[i];
            f->cnt[f->ncnt].tenant = fs_dup(v[i].tenant);
            f->cnt[f->ncnt++].device = fs_dup(v[i].device);
        } else if (v[i].events > f->cnt[k].events) { /* never the reverse */
            f->cnt[k].events = v[i].events;
            f->cnt[k].bucket_end = v[i].bucket_end;
            f->cnt[k].subbuckets = v[i].subbuckets;
        }
    }
    return BDB_OK;
}

static void fs_emit_state(const fs_state *e, int with_metrics, bdb_sink_state_fn fn, void *ud)
{
    bdb_sink_state v = {e->tenant,
                        e->device,
                        e->event_ts,
                        e->state,
                        e->state_ts,
                        with_metrics ? e->m : NULL,
                        with_metrics ? e->nm : 0};
    fn(ud, &v);
}

static int fs_state_get_locked(bdb_sink *s, const char *tn, const char *dn, bdb_sink_state_fn fn,
                               void *ud)
{
    fakesink *f = (fakesink *)s;
    int rc = fs_enter(f, FS_STATE_GET);
    if (rc)
        return rc;
    for (size_t k = 0; k < f->nst; k++)
        if (fs_eq(f->st[k].tenant, tn) && fs_eq(f->st[k].device, dn)) {
            fs_emit_state(&f->st[k], 1, fn, ud);
            return BDB_OK;
        }
    return BDB_ERR_NOTFOUND;
}

static int fs_state_list_locked(bdb_sink *s, const char *tn, const char *state,
                                bdb_sink_state_fn fn, void *ud)
{
    fakesink *f = (fakesink *)s;
    int rc = fs_enter(f, FS_STATE_LIST);
    if (rc)
        return rc;
    for (size_t k = 0; k < f->nst; k++)
        if (fs_eq(f->st[k].tenant, tn) && (!state || fs_eq(f->st[k].state, state)))
            fs_emit_state(&f->st[k], 0, fn, ud);
    return BDB_OK;
}

static int fs_device_list_locked(bdb_sink *s, const char *tn, bdb_sink_device_fn fn, void *ud)
{
    fakesink *f = (fakesink *)s;
    int rc = fs_enter(f, FS_DEVICE_LIST);
    if (rc)
        return rc;
    for (size_t k = 0; k < f->ndev; k++) {
        fs_device *d = &f->dev[k];
        if (!fs_eq(d->tenant, tn))
            continue;
        bdb_sink_device v;
        memset(&v, 0, sizeof v);
        v.tenant = d->tenant;
        v.device = d->device;
        v.first_ts = d->first_ts;
        v.last_ts = d->last_ts;
        v.samples = d->samples;
        v.bucket_ms = d->bucket_ms;
        void *mem = NULL;
        if (f->base.ops->tenant_list) /* fakesink_new(2): the whole row */
            fs_device_rest_unpack(d, &v, &mem);
        fn(ud, &v);
        fs_device_rest_free(mem);
    }
    return BDB_OK;
}

static int fs_count_list_locked(bdb_sink *s, const char *tn, int64_t from, int64_t to,
                                bdb_sink_count_fn fn, void *ud)
{
    fakesink *f = (fakesink *)s;
    int rc = fs_enter(f, FS_COUNT_LIST);
    if (rc)
        return rc;
    for (size_t k = 0; k < f->ncnt; k++)
        if (fs_eq(f->cnt[k].tenant, tn) && f->cnt[k].bucket_end > from &&
            f->cnt[k].bucket_start < to)
            fn(ud, &f->cnt[k]);
    return BDB_OK;
}

static int fs_late_put_locked(bdb_sink *s, const bdb_sink_late *v, size_t n)
{
    fakesink *f = (fakesink *)s;
    int rc = fs_enter(f, FS_LATE_PUT);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < f->nlate &&
               !(f->late[k].e.ts == v[i].ts && f->late[k].e.arrived == v[i].arrived &&
                 f->late[k].e.seq == v[i].seq && fs_eq(f->late[k].tenant, v[i].tenant) &&
                 fs_eq(f->late[k].device, v[i].device)))
            k++;
        if (k == f->nlate) {
            FS_GROW(f->late, f->nlate);
            f->late[f->nlate].tenant = fs_dup(v[i].tenant);
            f->late[f->nlate].device = fs_dup(v[i].device);
            f->nlate++;
        }
        f->late[k].e = v[i];
        f->late[k].e.tenant = f->late[k].tenant;
        f->late[k].e.device = f->late[k].device;
    }
    return BDB_OK;
}

static int fs_late_list_locked(bdb_sink *s, const char *tn, const char *dn,
                               void (*fn)(void *ud, const bdb_sink_late *e), void *ud)
{
    fakesink *f = (fakesink *)s;
    int rc = fs_enter(f, FS_LATE_LIST);
    if (rc)
        return rc;
    for (size_t k = 0; k < f->nlate; k++)
        if (fs_eq(f->late[k].tenant, tn) && (!dn || fs_eq(f->late[k].device, dn)))
            fn(ud, &f->late[k].e);
    return BDB_OK;
}

/* The engine calls the sink from several threads at once (tier puts run in parallel):
 * every op holds the fake's lock (recursive: a read callback may call another op). */
static int fs_put(bdb_sink *s, const char *tn, const char *dn, const char *mn, int64_t part,
                  int64_t ttl_ms, const int64_t *ts, const double *v, size_t n)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu);
    int rc = fs_put_locked(s, tn, dn, mn, part, ttl_ms, ts, v, n);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int fs_commit(bdb_sink *s)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu);
    int rc = fs_commit_locked(s);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int fs_read(bdb_sink *s, const char *tn, const char *dn, const int64_t *buckets,
                   size_t nbuckets, uint32_t nsub, int64_t lo, int64_t hi,
                   const char *const *metrics, size_t nmetrics, bdb_sink_add_fn add, void *ud)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu);
    int rc = fs_read_locked(s, tn, dn, buckets, nbuckets, nsub, lo, hi, metrics, nmetrics, add, ud);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int fs_tier_put(bdb_sink *s, const char *tn, const char *dn, const char *mn, int res,
                       const bdb_rollup *r, const int32_t *ttl_s)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu);
    int rc = fs_tier_put_locked(s, tn, dn, mn, res, r, ttl_s);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int fs_tier_read(bdb_sink *s, const char *tn, const char *dn, const char *mn, int res,
                        int64_t lo, int64_t hi, bdb_rollup *out)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu);
    int rc = fs_tier_read_locked(s, tn, dn, mn, res, lo, hi, out);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int fs_fleet_put(bdb_sink *s, const char *tn, const char *mn, int res, const bdb_fleet *fl,
                        const int32_t *ttl_s)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu);
    int rc = fs_fleet_put_locked(s, tn, mn, res, fl, ttl_s);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int fs_fleet_read(bdb_sink *s, const char *tn, const char *mn, int res, int64_t lo,
                         int64_t hi, bdb_fleet *out)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu);
    int rc = fs_fleet_read_locked(s, tn, mn, res, lo, hi, out);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int fs_state_put(bdb_sink *s, const bdb_sink_state *v, size_t n)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu);
    int rc = fs_state_put_locked(s, v, n);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int fs_device_put(bdb_sink *s, const bdb_sink_device *v, size_t n)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu);
    int rc = fs_device_put_locked(s, v, n);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int fs_count_put(bdb_sink *s, const bdb_sink_count *v, size_t n)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu);
    int rc = fs_count_put_locked(s, v, n);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int fs_state_get(bdb_sink *s, const char *tn, const char *dn, bdb_sink_state_fn fn, void *ud)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu);
    int rc = fs_state_get_locked(s, tn, dn, fn, ud);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int fs_state_list(bdb_sink *s, const char *tn, const char *state, bdb_sink_state_fn fn,
                         void *ud)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu);
    int rc = fs_state_list_locked(s, tn, state, fn, ud);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int fs_device_list(bdb_sink *s, const char *tn, bdb_sink_device_fn fn, void *ud)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu);
    int rc = fs_device_list_locked(s, tn, fn, ud);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int fs_count_list(bdb_sink *s, const char *tn, int64_t from, int64_t to,
                         bdb_sink_count_fn fn, void *ud)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu);
    int rc = fs_count_list_locked(s, tn, from, to, fn, ud);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int fs_late_put(bdb_sink *s, const bdb_sink_late *v, size_t n)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu);
    int rc = fs_late_put_locked(s, v, n);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int fs_late_list(bdb_sink *s, const char *tn, const char *dn,
                        void (*fn)(void *ud, const bdb_sink_late *e), void *ud)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu);
    int rc = fs_late_list_locked(s, tn, dn, fn, ud);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

/* An acknowledgement group: the fake's rows go in at the put, so end only counts. */
struct bdb_sink_ack {
    fakesink *f;
};

static int fs_ack_begin(bdb_sink *s, struct bdb_sink_ack **g)
{
    fakesink *f = (fakesink *)s;
    *g = NULL;
    if (!f->ack_on)
        return BDB_OK;
    *g = calloc(1, sizeof **g);
    if (!*g)
        abort();
    (*g)->f = f;
    return BDB_OK;
}

static int fs_ack_put(struct bdb_sink_ack *g, const char *tn, const char *dn, int64_t part,
                      int64_t ttl_ms, const bdb_sink_row *rows, size_t n)
{
    (void)ttl_ms;
    fakesink *f = g->f;
    pthread_mutex_lock(&f->mu);
    int rc = fs_enter(f, FS_ACK_PUT);
    for (size_t i = 0; i < n && rc == BDB_OK; i++) {
        size_t k = 0;
        while (k < f->nack &&
               !(f->ack[k].ts == rows[i].ts && fs_eq(f->ack[k].metric, rows[i].metric) &&
                 fs_eq(f->ack[k].device, dn) && fs_eq(f->ack[k].tenant, tn)))
            k++;
        if (k == f->nack) {
            FS_GROW(f->ack, f->nack);
            f->ack[f->nack++] = (fs_raw){fs_dup(tn), fs_dup(dn), fs_dup(rows[i].metric),
                                         part,       rows[i].ts, rows[i].v};
        } else {
            f->ack[k].v = rows[i].v;
            f->ack[k].part = part;
        }
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int fs_ack_end(struct bdb_sink_ack *g)
{
    fakesink *f = g->f;
    pthread_mutex_lock(&f->mu);
    f->ack_groups++;
    pthread_mutex_unlock(&f->mu);
    free(g);
    return BDB_OK;
}

/* A document replaced whole; a failing put leaves the previous one. */
static int fs_doc_put(bdb_sink *s, const char *key, const void *data, size_t len)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu);
    int rc = fs_enter(f, FS_DOC_PUT);
    if (rc == BDB_OK) {
        size_t k = 0;
        while (k < f->ndoc && strcmp(f->doc[k].key, key))
            k++;
        if (k == f->ndoc) {
            FS_GROW(f->doc, f->ndoc);
            f->doc[f->ndoc++] = (fs_doc){fs_dup(key), NULL, 0};
        }
        free(f->doc[k].data);
        f->doc[k].data = malloc(len + 1);
        if (!f->doc[k].data)
            abort();
        memcpy(f->doc[k].data, data, len);
        f->doc[k].len = len;
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int fs_doc_get(bdb_sink *s, const char *key, void **data, size_t *len, char *err,
                      size_t errlen)
{
    fakesink *f = (fakesink *)s;
    *data = NULL;
    *len = 0;
    pthread_mutex_lock(&f->mu);
    int rc = fs_enter(f, FS_DOC_GET);
    if (rc != BDB_OK)
        snprintf(err, errlen, "fake sink: doc_get fails on purpose");
    size_t k = 0;
    while (rc == BDB_OK && k < f->ndoc && strcmp(f->doc[k].key, key))
        k++;
    if (rc == BDB_OK && k == f->ndoc)
        rc = BDB_ERR_NOTFOUND;
    if (rc == BDB_OK) {
        char *p = malloc(f->doc[k].len + 1);
        if (!p)
            abort();
        memcpy(p, f->doc[k].data, f->doc[k].len);
        p[f->doc[k].len] = '\0';
        *data = p;
        *len = f->doc[k].len;
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

/* Every tenant with a registry row (fakesink_new(2)): an engine on an empty data
 * directory rebuilds its catalog from them (db_cat_sink.c). */
static int fs_tenant_list(bdb_sink *s, void (*fn)(void *ud, const char *tenant), void *ud)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu);
    int rc = fs_enter(f, FS_TENANT_LIST);
    for (size_t k = 0; rc == BDB_OK && k < f->ndev; k++) {
        size_t j = 0;
        while (j < k && !fs_eq(f->dev[j].tenant, f->dev[k].tenant))
            j++;
        if (j == k)
            fn(ud, f->dev[k].tenant);
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

/* Every op (full = 1) or the raw ops alone (full = 0: tiers, fleet, state and late
 * stay with the engine's files, as for a sink that does not take them). */
static const bdb_sink_ops fs_ops_full = {
    fs_put,        fs_commit,    fs_read,      fs_describe,   fs_close,
    fs_tier_put,   fs_tier_read, fs_fleet_put, fs_fleet_read, fs_state_put,
    fs_device_put, fs_count_put, fs_state_get, fs_state_list, fs_device_list,
    fs_count_list, fs_late_put,  fs_late_list, NULL,          fs_ack_begin,
    fs_ack_put,    fs_ack_end,   NULL,         fs_doc_put,    fs_doc_get,
};
/* full = 2: every op and the tenant listing, with whole registry rows */
static const bdb_sink_ops fs_ops_rebuild = {
    fs_put,        fs_commit,    fs_read,        fs_describe,   fs_close,
    fs_tier_put,   fs_tier_read, fs_fleet_put,   fs_fleet_read, fs_state_put,
    fs_device_put, fs_count_put, fs_state_get,   fs_state_list, fs_device_list,
    fs_count_list, fs_late_put,  fs_late_list,   NULL,          fs_ack_begin,
    fs_ack_put,    fs_ack_end,   fs_tenant_list, fs_doc_put,    fs_doc_get,
};
static const bdb_sink_ops fs_ops_raw = {fs_put, fs_commit, fs_read, fs_describe, fs_close, NULL,
                                        NULL,   NULL,      NULL,    NULL,        NULL,     NULL,
                                        NULL,   NULL,      NULL,    NULL,        NULL,     NULL};

static fakesink *fakesink_new(int full)
{
    fakesink *f = calloc(1, sizeof *f);
    if (!f)
        abort();
    f->base.ops = full == 2 ? &fs_ops_rebuild : full ? &fs_ops_full : &fs_ops_raw;
    f->fail_op = -1;
    f->fail_rc = BDB_ERR_IO;
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&f->mu, &a);
    pthread_mutexattr_destroy(&a);
    return f;
}

static void fakesink_free(fakesink *f)
{
    for (size_t k = 0; k < f->nraw; k++) {
        free(f->raw[k].tenant);
        free(f->raw[k].device);
        free(f->raw[k].metric);
    }
    for (size_t k = 0; k < f->ntier; k++) {
        free(f->tier[k].tenant);
        free(f->tier[k].device);
        free(f->tier[k].metric);
        bdb_rollup_free(&f->tier[k].r);
    }
    for (size_t k = 0; k < f->nfleet; k++) {
        free(f->fleet[k].tenant);
        free(f->fleet[k].metric);
        bdb_fleet_free(&f->fleet[k].f);
    }
    for (size_t k = 0; k < f->nst; k++) {
        free(f->st[k].tenant);
        free(f->st[k].device);
        free(f->st[k].state);
        for (size_t j = 0; j < f->st[k].nm; j++)
            free((char *)f->st[k].m[j].name);
        free(f->st[k].m);
    }
    for (size_t k = 0; k < f->ndev; k++) {
        free(f->dev[k].tenant);
        free(f->dev[k].device);
        free(f->dev[k].rest);
    }
    for (size_t k = 0; k < f->ncnt; k++) {
        free((char *)f->cnt[k].tenant);
        free((char *)f->cnt[k].device);
    }
    for (size_t k = 0; k < f->nlate; k++) {
        free(f->late[k].tenant);
        free(f->late[k].device);
    }
    for (size_t k = 0; k < f->nack; k++) {
        free(f->ack[k].tenant);
        free(f->ack[k].device);
        free(f->ack[k].metric);
    }
    for (size_t k = 0; k < f->ndoc; k++) {
        free(f->doc[k].key);
        free(f->doc[k].data);
    }
    free(f->doc);
    free(f->ack);
    free(f->raw);
    free(f->tier);
    free(f->fleet);
    free(f->st);
    free(f->dev);
    free(f->cnt);
    free(f->late);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

#endif
