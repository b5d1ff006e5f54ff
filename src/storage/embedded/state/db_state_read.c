/* db_state_read: the registry (bdb_db_list_devices, bdb_db_get_device) and event
 * count (bdb_db_telemetry_by_tenant) readers: with a sink that takes the state ops,
 * the sink's rows merged with the local catalog and counts (db_state_sink.h). */
#include "storage/embedded/sink/db_state_sink.h"
#include "storage/embedded/sink/db_state_sink_int.h"

#include "bucketdb/bdb.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- registry */

typedef struct ss_regs {
    ss_dev *d;
    char **names;
    size_t n, cap;
    int oom; /* a copy failed: the rows are incomplete, only to be freed */
} ss_regs;

/* Room for row r->n of r->d and r->names (0), or -1. */
static int regs_room(ss_regs *r)
{
    if (r->n < r->cap)
        return 0;
    size_t cap = r->cap ? r->cap * 2 : 16;
    ss_dev *d = bdb_realloc(r->d, cap * sizeof *d);
    if (!d)
        return -1;
    r->d = d;
    char **names = bdb_realloc(r->names, cap * sizeof *names);
    if (!names)
        return -1; /* d grew alone: harmless, cap unchanged */
    r->names = names;
    r->cap = cap;
    return 0;
}

static void sink_dev_cb(void *ud, const bdb_sink_device *s)
{
    ss_regs *r = ud;
    if (regs_room(r) != 0) {
        r->oom = 1;
        return;
    }
    ss_dev *x = &r->d[r->n];
    memset(x, 0, sizeof *x);
    r->names[r->n++] = ss_strdup(s->device, &r->oom);
    x->tk = bdb_calloc(s->ntags + 1, sizeof *x->tk);
    x->tv = bdb_calloc(s->ntags + 1, sizeof *x->tv);
    x->metrics = bdb_calloc(s->nmetrics + 1, sizeof *x->metrics);
    if (!x->tk || !x->tv || !x->metrics) {
        r->oom = 1; /* counts 0: dev_free frees the vectors alone */
        return;
    }
    x->ntags = s->ntags;
    for (size_t i = 0; i < s->ntags; i++) {
        x->tk[i] = ss_strdup(s->tag_keys[i], &r->oom);
        x->tv[i] = ss_strdup(s->tag_vals[i], &r->oom);
    }
    x->first_ts = s->first_ts;
    x->last_ts = s->last_ts;
    x->samples = s->samples;
    x->bucket_ms = s->bucket_ms;
    x->pinned = s->pinned;
    x->cls = s->freq_class;
    x->nhist = s->nhist;
    x->nmetrics = s->nmetrics;
    for (size_t i = 0; i < s->nmetrics; i++)
        x->metrics[i] = ss_strdup(s->metrics[i], &r->oom);
}

static void regs_free(ss_regs *r)
{
    for (size_t i = 0; i < r->n; i++) {
        dev_free(&r->d[i]);
        free(r->names[i]);
    }
    free(r->d);
    free(r->names);
}

/* A registry row of the sink as the engine's dn info (state from the sink's
 * current state): BDB_OK with cb's answer in *stop, or BDB_ERR_NOMEM before cb. */
static int emit_sink_dev(bdb_db *db, const char *tn, const char *name, const ss_dev *x,
                         int (*cb)(void *, const bdb_device_info *), void *ctx, int *stop)
{
    ss_member st = {NULL, NULL, INT64_MIN, 0, 0};
    db->o.sink->ops->state_get(db->o.sink, tn, name, ss_sink_state_cb, &st);
    bdb_kv *tags = bdb_calloc(x->ntags + 1, sizeof *tags);
    if (!tags || st.oom) {
        free(tags);
        free(st.state);
        return BDB_ERR_NOMEM;
    }
    for (size_t i = 0; i < x->ntags; i++)
        tags[i] = (bdb_kv){x->tk[i], strlen(x->tk[i]), x->tv[i], strlen(x->tv[i])};
    bdb_device_info inf;
    memset(&inf, 0, sizeof inf);
    inf.tenant = tn;
    inf.device = name;
    inf.tags = tags;
    inf.ntags = x->ntags;
    inf.state = st.state;
    inf.state_ts = st.ts;
    inf.first_ts = x->first_ts;
    inf.last_ts = x->last_ts;
    inf.samples = x->samples;
    inf.bucket_ms = x->bucket_ms;
    inf.freq_class = x->cls;
    inf.pinned = x->pinned;
    inf.metrics = (const char *const *)x->metrics;
    inf.nmetrics = x->nmetrics;
    inf.nbucket_changes = x->nhist ? x->nhist - 1 : 0;
    *stop = cb(ctx, &inf);
    free(tags);
    free(st.state);
    return BDB_OK;
}

typedef struct ss_names {
    char **v;
    size_t n, cap;
    int oom;
} ss_names;

static int local_name_cb(void *ctx, const bdb_device_info *d)
{
    ss_names *x = ctx;
    char **v = ss_grow(x->v, x->n, &x->cap, sizeof *x->v);
    if (!v) {
        x->oom = 1;
        return 1; /* stops the listing */
    }
    x->v = v;
    x->v[x->n++] = ss_strdup(d->device, &x->oom);
    return x->oom;
}

struct stop_cb {
    int (*cb)(void *, const bdb_device_info *);
    void *ctx;
    int rc;
};

static int stop_cb(void *ctx, const bdb_device_info *d)
{
    struct stop_cb *s = ctx;
    s->rc = s->cb(s->ctx, d);
    return s->rc;
}

int bdb_db_catalog_version(bdb_db *db, const char *tn, uint64_t version[2])
{
    if (db_ss_on(db) && db->o.sink->ops->device_list)
        return BDB_ERR_INVALID; /* bdb_db_list_devices asks the registry */
    pthread_rwlock_rdlock(&db->cat_lock);
    tenant *t = cat_tenant(db, tn, strlen(tn), 0);
    if (t) {
        version[0] = t->id;
        version[1] = atomic_load_explicit(&t->gen, memory_order_acquire);
    }
    pthread_rwlock_unlock(&db->cat_lock);
    return t ? BDB_OK : BDB_ERR_NOTFOUND;
}

int bdb_db_list_devices(bdb_db *db, const char *tn, int (*cb)(void *ctx, const bdb_device_info *d),
                        void *ctx)
{
    if (!db_ss_on(db) || !tn || !db->o.sink->ops->device_list)
        return db_read_list_devices_local(db, tn, cb, ctx);
    ss_regs r = {0};
    int rc = db->o.sink->ops->device_list(db->o.sink, tn, sink_dev_cb, &r);
    if (rc == BDB_ERR_NOMEM || r.oom) { /* never part of the devices */
        regs_free(&r);
        return BDB_ERR_NOMEM;
    }
    if (rc != BDB_OK) {
        BDB_WARN("devices of %s: the sink failed (%s); answering from the local catalog", tn,
                 bdb_strerror(rc));
        regs_free(&r);
        return db_read_list_devices_local(db, tn, cb, ctx);
    }
    ss_names loc = {0};
    rc = db_read_list_devices_local(db, tn, local_name_cb, &loc);
    /* Both lists in name order; the local catalog answers for the devices it has. */
    size_t *ord = bdb_calloc(r.n + 1, sizeof *ord);
    if (rc == BDB_ERR_NOMEM || loc.oom || !ord) {
        rc = BDB_ERR_NOMEM; /* before the first device is handed to cb */
        goto out;
    }
    rc = BDB_OK;
    for (size_t i = 0; i < r.n; i++)
        ord[i] = i;
    for (size_t i = 1; i < r.n; i++) { /* insertion sort: a tenant's rows come sorted */
        size_t v = ord[i], j = i;
        while (j > 0 && strcmp(r.names[ord[j - 1]], r.names[v]) > 0) {
            ord[j] = ord[j - 1];
            j--;
        }
        ord[j] = v;
    }
    size_t a = 0, b = 0;
    struct stop_cb sc = {cb, ctx, 0};
    while (rc == BDB_OK && sc.rc == 0 && (a < loc.n || b < r.n)) {
        int c = a == loc.n ? 1 : b == r.n ? -1 : strcmp(loc.v[a], r.names[ord[b]]);
        if (c <= 0) {
            /* (NOTFOUND: gone since the listing, retention removed it) */
            if (db_read_get_device_local(db, tn, loc.v[a], stop_cb, &sc) == BDB_ERR_NOMEM)
                rc = BDB_ERR_NOMEM;
            a++;
            if (c == 0)
                b++;
        } else {
            rc = emit_sink_dev(db, tn, r.names[ord[b]], &r.d[ord[b]], cb, ctx, &sc.rc);
            b++;
        }
    }
out:
    for (size_t i = 0; i < loc.n; i++)
        free(loc.v[i]);
    free(loc.v);
    free(ord);
    regs_free(&r);
    return rc; /* NOMEM after some devices: the caller drops the partial listing */
}

int bdb_db_get_device(bdb_db *db, const char *tn, const char *dn,
                      int (*cb)(void *, const bdb_device_info *), void *ctx)
{
    int rc = db_read_get_device_local(db, tn, dn, cb, ctx);
    if (rc != BDB_ERR_NOTFOUND || !db_ss_on(db) || !db->o.sink->ops->device_list)
        return rc;
    ss_regs r = {0};
    int lrc = db->o.sink->ops->device_list(db->o.sink, tn, sink_dev_cb, &r);
    if (lrc == BDB_ERR_NOMEM || r.oom)
        rc = BDB_ERR_NOMEM; /* not "not found": the sink's rows are unknown */
    else if (lrc == BDB_OK)
        for (size_t i = 0; i < r.n; i++)
            if (strcmp(r.names[i], dn) == 0) {
                int stop;
                rc = emit_sink_dev(db, tn, dn, &r.d[i], cb, ctx, &stop);
                break;
            }
    regs_free(&r);
    return rc;
}

/* ---------------------------------------------------------------- counts */

typedef struct ss_tbt {
    ss_count *v;
    size_t n, cap;
    int oom; /* a copy failed: the rows are incomplete, only to be freed */
} ss_tbt;

static void tbt_add(ss_tbt *t, const char *dn, int64_t s, int64_t e, uint64_t ev, uint32_t subs)
{
    ss_count *v = ss_grow(t->v, t->n, &t->cap, sizeof *t->v);
    if (!v) {
        t->oom = 1;
        return;
    }
    t->v = v;
    t->v[t->n++] = (ss_count){NULL, ss_strdup(dn, &t->oom), s, e, ev, subs};
}

static int local_tbt_cb(void *ctx, const bdb_tbt_row *r)
{
    ss_tbt *t = ctx;
    tbt_add(t, r->device, r->bucket_start, r->bucket_end, r->events, r->subbuckets);
    return t->oom; /* stops the listing */
}

static void sink_tbt_cb(void *ud, const bdb_sink_count *c)
{
    tbt_add(ud, c->device, c->bucket_start, c->bucket_end, c->events, c->subbuckets);
}

static int tbt_cmp(const void *a, const void *b)
{
    const ss_count *x = a, *y = b;
    int c = strcmp(x->device, y->device);
    if (c)
        return c;
    if (x->s != y->s)
        return x->s < y->s ? -1 : 1;
    return (x->e > y->e) - (x->e < y->e);
}

int bdb_db_telemetry_by_tenant(bdb_db *db, const char *tn, int64_t from, int64_t to,
                               int (*cb)(void *ctx, const bdb_tbt_row *r), void *ctx)
{
    if (!db_ss_on(db) || !db->o.sink->ops->count_list)
        return db_hot_tbt_local(db, tn, from, to, cb, ctx);
    ss_tbt t = {0};
    int lrc = db_hot_tbt_local(db, tn, from, to, local_tbt_cb, &t);
    size_t nlocal = t.n;
    int crc = lrc == BDB_ERR_NOMEM || t.oom
                  ? BDB_ERR_NOMEM
                  : db->o.sink->ops->count_list(db->o.sink, tn, from, to, sink_tbt_cb, &t);
    if (crc == BDB_ERR_NOMEM || t.oom) { /* never part of the counts */
        for (size_t i = 0; i < t.n; i++)
            free(t.v[i].device);
        free(t.v);
        return BDB_ERR_NOMEM;
    }
    if (crc != BDB_OK)
        BDB_WARN("telemetry_by_tenant of %s: the sink failed (%s); answering from the local "
                 "counts",
                 tn, bdb_strerror(crc));
    int rc = BDB_OK;
    if (lrc == BDB_ERR_NOTFOUND && t.n == nlocal)
        rc = BDB_ERR_NOTFOUND;
    /* Counts are absolute: the larger of the two is the newer. */
    if (t.n > 1)
        qsort(t.v, t.n, sizeof *t.v, tbt_cmp);
    int stop = 0;
    for (size_t i = 0; i < t.n;) {
        size_t j = i;
        uint64_t ev = 0;
        uint32_t subs = 1;
        while (j < t.n && tbt_cmp(&t.v[i], &t.v[j]) == 0) {
            if (t.v[j].ev >= ev) {
                ev = t.v[j].ev;
                subs = t.v[j].subs;
            }
            j++;
        }
        if (!stop) {
            bdb_tbt_row r = {t.v[i].device, t.v[i].s, t.v[i].e, ev, subs};
            stop = cb(ctx, &r);
            if (stop)
                rc = stop;
        }
        for (size_t k = i; k < j; k++)
            free(t.v[k].device);
        i = j;
    }
    free(t.v);
    return rc;
}
