/* db_state_sink: current state, dn registry and event counts through the sink's
 * optional ops (db_state_sink.h): sent at flush, read back merged with the local
 * index. */
#include "storage/embedded/sink/db_state_sink.h"
#include "storage/embedded/sink/db_late_sink.h"
#include "storage/embedded/sink/db_state_sink_int.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "storage/sink.h"

#include <stdlib.h>
#include <string.h>

int db_ss_on(bdb_db *db)
{
    return db->o.sink && db->o.sink->ops->state_put && db->o.sink->ops->state_get;
}

/* ---------------------------------------------------------------- owned copies */

/* A dn's latest event, owned. */
typedef struct ss_latest {
    char *tenant, *device;
    int64_t event_ts;
    char *state;
    int64_t state_ts;
    bdb_sink_metric *m; /* names owned */
    size_t nm;
    bdb_sink_attr *a; /* names and values owned */
    size_t na;
    int oom; /* a copy failed: incomplete, only to be freed */
} ss_latest;

/* Into o, zeroed by the caller; o->nm is set once o->m exists, so o stays freeable. */
static void latest_copy(ss_latest *o, const char *tn, const char *dn, int64_t ev, const char *st,
                        int64_t sts, size_t nm)
{
    o->tenant = ss_strdup(tn, &o->oom);
    o->device = ss_strdup(dn, &o->oom);
    o->event_ts = ev;
    o->state = ss_strdup(st, &o->oom);
    o->state_ts = st ? sts : INT64_MIN;
    o->m = bdb_calloc(nm + 1, sizeof *o->m);
    if (o->m)
        o->nm = nm;
    else
        o->oom = 1;
}

/* The attributes into o (after latest_copy); o->na is set once o->a exists. */
static void attrs_copy(ss_latest *o, const bdb_sink_attr *a, size_t n)
{
    o->a = bdb_calloc(n + 1, sizeof *o->a);
    if (!o->a) {
        o->oom = 1;
        return;
    }
    o->na = n;
    for (size_t i = 0; i < n; i++)
        o->a[i] =
            (bdb_sink_attr){ss_strdup(a[i].name, &o->oom), ss_strdup(a[i].value, &o->oom), a[i].ts};
}

static void latest_free(ss_latest *o)
{
    for (size_t i = 0; i < o->nm; i++)
        free((char *)o->m[i].name);
    free(o->m);
    for (size_t i = 0; i < o->na; i++) {
        free((char *)o->a[i].name);
        free((char *)o->a[i].value);
    }
    free(o->a);
    free(o->tenant);
    free(o->device);
    free(o->state);
    memset(o, 0, sizeof *o);
}

static void from_local(ss_latest *o, const bdb_latest *l)
{
    latest_copy(o, l->tenant, l->device, l->event_ts, l->state, l->state_ts, l->nmetrics);
    for (size_t i = 0; i < o->nm; i++)
        o->m[i] = (bdb_sink_metric){ss_strdup(l->metrics[i].name, &o->oom), l->metrics[i].ts,
                                    l->metrics[i].value};
    /* bdb_latest_attr and bdb_sink_attr: the same three fields */
    bdb_sink_attr *a = bdb_calloc(l->nattrs + 1, sizeof *a);
    if (!a) {
        o->oom = 1;
        return;
    }
    for (size_t i = 0; i < l->nattrs; i++)
        a[i] = (bdb_sink_attr){l->attrs[i].name, l->attrs[i].value, l->attrs[i].ts};
    attrs_copy(o, a, l->nattrs);
    free(a);
}

static void from_sink(ss_latest *o, const bdb_sink_state *s)
{
    latest_copy(o, s->tenant, s->device, s->event_ts, s->state, s->state_ts, s->nmetrics);
    for (size_t i = 0; i < o->nm; i++)
        o->m[i] = (bdb_sink_metric){ss_strdup(s->metrics[i].name, &o->oom), s->metrics[i].ts,
                                    s->metrics[i].v};
    attrs_copy(o, s->attrs, s->nattrs);
}

/* ---------------------------------------------------------------- flush */

typedef struct ss_flush {
    ss_latest *l;
    ss_dev *d;
    size_t n, cap;
    ss_count *c;
    size_t nc, capc;
    int oom; /* a copy failed: the flush fails before its first put */
} ss_flush;

/* Room for entry f->n of f->l and f->d (0), or -1. */
static int flush_room(ss_flush *f)
{
    if (f->n < f->cap)
        return 0;
    size_t cap = f->cap ? f->cap * 2 : 64;
    ss_latest *l = bdb_realloc(f->l, cap * sizeof *l);
    if (!l)
        return -1;
    f->l = l;
    ss_dev *d = bdb_realloc(f->d, cap * sizeof *d);
    if (!d)
        return -1; /* l grew alone: harmless, cap unchanged */
    f->d = d;
    f->cap = cap;
    return 0;
}

static char *dupn(const char *s, size_t n, int *oom)
{
    char *p = bdb_strndup(s, n);
    if (!p)
        *oom = 1;
    return p;
}

/* Under d's stripe lock: d's registry row into r (zeroed); -1 when out of memory (r
 * then holds what dev_free frees). */
int ss_dev_copy(const device *d, ss_dev *r)
{
    int oom = 0;
    r->tk = bdb_calloc(d->ntags + 1, sizeof *r->tk);
    r->tv = bdb_calloc(d->ntags + 1, sizeof *r->tv);
    r->hf = bdb_calloc(d->hist.n + 1, sizeof *r->hf);
    r->hs = bdb_calloc(d->hist.n + 1, sizeof *r->hs);
    r->metrics = bdb_calloc(d->nseries + 1, sizeof *r->metrics);
    if (!r->tk || !r->tv || !r->hf || !r->hs || !r->metrics)
        return -1;
    r->ntags = d->ntags;
    for (uint32_t i = 0; i < d->ntags; i++) {
        r->tk[i] = dupn(d->tags[i].key, d->tags[i].klen, &oom);
        r->tv[i] = dupn(d->tags[i].val, d->tags[i].vlen, &oom);
    }
    r->first_ts = d->first_ts;
    r->last_ts = d->last_ts;
    r->samples = d->samples;
    r->bucket_ms = d->hist.e[d->hist.n - 1].size_ms;
    r->pinned = d->pinned != 0;
    r->cls = d->learner.cls;
    r->nhist = d->hist.n;
    for (uint32_t i = 0; i < d->hist.n; i++) {
        r->hf[i] = d->hist.e[i].from_ms;
        r->hs[i] = d->hist.e[i].size_ms;
    }
    r->nmetrics = d->nseries;
    for (uint32_t i = 0; i < d->nseries; i++)
        r->metrics[i] = ss_strdup(d->series[i]->metric, &oom);
    return oom ? -1 : 0;
}

bdb_sink_device ss_dev_record(const char *tn, const char *dn, const ss_dev *r)
{
    return (bdb_sink_device){tn,
                             dn,
                             (const char *const *)r->tk,
                             (const char *const *)r->tv,
                             r->ntags,
                             r->first_ts,
                             r->last_ts,
                             r->samples,
                             r->bucket_ms,
                             r->pinned,
                             r->cls,
                             r->hf,
                             r->hs,
                             r->nhist,
                             (const char *const *)r->metrics,
                             r->nmetrics};
}

/* Under d's stripe lock: copies its state, registry row and recent counts. After a
 * failed copy it copies nothing more (the walk cannot be stopped from here). */
static void flush_walk(void *ud, device *d, const bdb_latest *l, int64_t dirty_lo)
{
    ss_flush *f = ud;
    if (f->oom || flush_room(f) != 0) {
        f->oom = 1;
        return;
    }
    ss_latest *o = &f->l[f->n];
    ss_dev *r = &f->d[f->n++];
    memset(o, 0, sizeof *o);
    memset(r, 0, sizeof *r);
    from_local(o, l);
    f->oom |= o->oom;
    if (ss_dev_copy(d, r) != 0) {
        f->oom = 1; /* counts 0: dev_free frees the vectors alone */
        return;
    }
    /* Counts of the partitions the reports since the last sent round can have
     * touched: every partition that ends after the oldest of them. */
    for (uint32_t i = 0; i < d->hs.npc && !f->oom; i++) {
        int64_t start = (int64_t)d->hs.pc[i].minute * BDB_MS_MIN, s, e;
        bdb_bucket_range(&d->hist, start, &s, &e);
        if (e <= dirty_lo)
            continue;
        ss_count *c = ss_grow(f->c, f->nc, &f->capc, sizeof *f->c);
        if (!c) {
            f->oom = 1;
            break;
        }
        f->c = c;
        f->c[f->nc++] = (ss_count){ss_strdup(d->tenant->name, &f->oom),
                                   ss_strdup(d->name, &f->oom),
                                   s,
                                   e,
                                   d->hs.pc[i].events,
                                   db_hot_subs_within(d, s, e)};
    }
}

int db_ss_flush(bdb_db *db, int rc, uint64_t *round)
{
    *round = 0;
    rc = db_ls_flush(db, rc); /* late arrivals (db_late_sink.c) */
    if (!db_ss_on(db) || rc != BDB_OK)
        return rc;
    bdb_sink *sk = db->o.sink;
    *round = db_latest_round(db);
    ss_flush f;
    memset(&f, 0, sizeof f);
    rc = db_latest_walk(db, NULL, 1, flush_walk, &f);
    bdb_sink_state *sv = bdb_calloc(f.n + 1, sizeof *sv);
    bdb_sink_device *dv = bdb_calloc(f.n + 1, sizeof *dv);
    bdb_sink_count *cv = bdb_calloc(f.nc + 1, sizeof *cv);
    /* Out of memory: nothing is put, the flush fails and the next one sends it all. */
    if (rc == BDB_OK && (f.oom || !sv || !dv || !cv))
        rc = BDB_ERR_NOMEM;
    for (size_t i = 0; i < f.n && rc == BDB_OK; i++) {
        ss_latest *l = &f.l[i];
        ss_dev *r = &f.d[i];
        sv[i] = (bdb_sink_state){l->tenant, l->device, l->event_ts, l->state, l->state_ts,
                                 l->m,      l->nm,     l->a,        l->na};
        dv[i] = ss_dev_record(l->tenant, l->device, r);
    }
    for (size_t i = 0; i < f.nc && rc == BDB_OK; i++) {
        ss_count *c = &f.c[i];
        cv[i] = (bdb_sink_count){c->tenant, c->device, c->s, c->e, c->ev, c->subs};
    }
    if (rc == BDB_OK && f.n)
        rc = sk->ops->state_put(sk, sv, f.n);
    if (rc == BDB_OK && f.n && sk->ops->device_put)
        rc = sk->ops->device_put(sk, dv, f.n);
    if (rc == BDB_OK && f.nc && sk->ops->count_put)
        rc = sk->ops->count_put(sk, cv, f.nc);
    for (size_t i = 0; i < f.n; i++) {
        latest_free(&f.l[i]);
        dev_free(&f.d[i]);
    }
    for (size_t i = 0; i < f.nc; i++) {
        free(f.c[i].tenant);
        free(f.c[i].device);
    }
    free(sv);
    free(dv);
    free(cv);
    if (rc != BDB_OK)
        BDB_ERROR("flush: current state of %zu device(s) not confirmed by the sink: %s", f.n,
                  bdb_strerror(rc));
    free(f.l);
    free(f.d);
    free(f.c);
    return rc;
}

void db_ss_sent(bdb_db *db, uint64_t round)
{
    db_ls_sent(db); /* late arrivals (db_late_sink.c) */
    if (round)
        db_latest_round_sent(db, round);
}

/* ---------------------------------------------------------------- latest */

static int local_latest_cb(void *ctx, const bdb_latest *l)
{
    from_local(ctx, l);
    return 0;
}

static void sink_latest_cb(void *ud, const bdb_sink_state *s)
{
    from_sink(ud, s);
}

static int metric_name_cmp(const void *a, const void *b)
{
    return strcmp(((const bdb_sink_metric *)a)->name, ((const bdb_sink_metric *)b)->name);
}

static int attr_name_cmp(const void *a, const void *b)
{
    return strcmp(((const bdb_sink_attr *)a)->name, ((const bdb_sink_attr *)b)->name);
}

/* The attributes of the local copy a and the sink's b (either NULL), per name the
 * newer (at equal times either: both hold the value of that report unless two writes
 * of one millisecond carried the name). Into *out (n of them, pointing into a and b);
 * BDB_ERR_NOMEM. */
static int attrs_merge(const ss_latest *a, const ss_latest *b, bdb_latest_attr **out, size_t *n)
{
    size_t k = 0, t = (a ? a->na : 0) + (b ? b->na : 0);
    bdb_sink_attr *all = bdb_calloc(t + 1, sizeof *all);
    bdb_latest_attr *av = bdb_calloc(t + 1, sizeof *av);
    if (!all || !av) {
        free(all);
        free(av);
        return BDB_ERR_NOMEM;
    }
    for (size_t i = 0; a && i < a->na; i++)
        all[k++] = a->a[i];
    for (size_t i = 0; b && i < b->na; i++)
        all[k++] = b->a[i];
    qsort(all, k, sizeof *all, attr_name_cmp);
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        if (m && strcmp(av[m - 1].name, all[i].name) == 0) {
            if (all[i].ts > av[m - 1].ts)
                av[m - 1] = (bdb_latest_attr){all[i].name, all[i].value, all[i].ts};
            continue;
        }
        av[m++] = (bdb_latest_attr){all[i].name, all[i].value, all[i].ts};
    }
    free(all);
    *out = av;
    *n = m;
    return BDB_OK;
}

int bdb_db_latest(bdb_db *db, const char *tn, const char *dn,
                  int (*cb)(void *ctx, const bdb_latest *l), void *ctx)
{
    if (!db_ss_on(db))
        return db_latest_get_local(db, tn, dn, cb, ctx);
    ss_latest lo = {0}, cs = {0};
    int lrc = db_latest_get_local(db, tn, dn, local_latest_cb, &lo);
    int crc = lrc == BDB_ERR_NOMEM || lo.oom
                  ? BDB_ERR_NOMEM
                  : db->o.sink->ops->state_get(db->o.sink, tn, dn, sink_latest_cb, &cs);
    if (crc == BDB_ERR_NOMEM || cs.oom) { /* never half the answer */
        latest_free(&lo);
        latest_free(&cs);
        return BDB_ERR_NOMEM;
    }
    if (crc != BDB_OK && crc != BDB_ERR_NOTFOUND) {
        BDB_WARN("current state of %s/%s: the sink failed (%s); answering from the local index", tn,
                 dn, bdb_strerror(crc));
    }
    if (lrc != BDB_OK && crc != BDB_OK) {
        latest_free(&lo);
        return crc == BDB_ERR_NOTFOUND ? lrc : crc;
    }
    /* Per field the newer event wins; the local index (which also holds what is not
     * flushed yet) wins ties. */
    ss_latest *a = lrc == BDB_OK ? &lo : NULL, *b = crc == BDB_OK ? &cs : NULL;
    int64_t ev = INT64_MIN;
    const char *state = NULL;
    int64_t sts = INT64_MIN;
    if (a && a->event_ts > ev)
        ev = a->event_ts;
    if (b && b->event_ts > ev)
        ev = b->event_ts;
    if (a && a->state) {
        state = a->state;
        sts = a->state_ts;
    }
    if (b && b->state && (!state || b->state_ts > sts)) {
        state = b->state;
        sts = b->state_ts;
    }
    size_t n = (a ? a->nm : 0) + (b ? b->nm : 0), k = 0;
    bdb_sink_metric *all = bdb_calloc(n + 1, sizeof *all);
    bdb_latest_metric *mv = bdb_calloc(n + 1, sizeof *mv);
    if (!all || !mv) {
        free(all);
        free(mv);
        latest_free(&lo);
        latest_free(&cs);
        return BDB_ERR_NOMEM;
    }
    if (a)
        for (size_t i = 0; i < a->nm; i++)
            all[k++] = a->m[i];
    if (b)
        for (size_t i = 0; i < b->nm; i++)
            all[k++] = b->m[i];
    /* Stable preference for the local copy: sort, then keep the newer of equal names. */
    qsort(all, k, sizeof *all, metric_name_cmp);
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        if (m && strcmp(mv[m - 1].name, all[i].name) == 0) {
            if (all[i].ts > mv[m - 1].ts) {
                mv[m - 1].ts = all[i].ts;
                mv[m - 1].value = all[i].v;
            }
            continue;
        }
        mv[m++] = (bdb_latest_metric){all[i].name, all[i].ts, all[i].v, 0};
    }
    for (size_t i = 0; i < m; i++)
        mv[i].in_event = mv[i].ts == ev;
    bdb_latest_attr *av = NULL;
    size_t nav = 0;
    if (attrs_merge(a, b, &av, &nav) != BDB_OK) {
        free(mv);
        free(all);
        latest_free(&lo);
        latest_free(&cs);
        return BDB_ERR_NOMEM;
    }
    bdb_latest out = {tn, dn, ev, state, sts, mv, m, av, nav};
    cb(ctx, &out);
    free(av);
    free(mv);
    free(all);
    latest_free(&lo);
    latest_free(&cs);
    return BDB_OK;
}

/* ---------------------------------------------------------------- devices per state */

typedef struct ss_members {
    ss_member *v;
    size_t n, cap;
    const char *state;
    int oom; /* a copy failed: the list is incomplete */
} ss_members;

static void members_add(ss_members *m, const char *dev, const char *state, int64_t ts, int src)
{
    ss_member *v = ss_grow(m->v, m->n, &m->cap, sizeof *m->v);
    if (!v) {
        m->oom = 1;
        return;
    }
    m->v = v;
    m->v[m->n++] = (ss_member){ss_strdup(dev, &m->oom), ss_strdup(state, &m->oom), ts, src, 0};
}

static void members_free(ss_members *m)
{
    for (size_t i = 0; i < m->n; i++) {
        free(m->v[i].dev);
        free(m->v[i].state);
    }
    free(m->v);
}

static int member_cmp(const void *a, const void *b)
{
    const ss_member *x = a, *y = b;
    int c = strcmp(x->dev, y->dev);
    return c ? c : x->src - y->src; /* local (1) before sink (2) */
}

static int local_member_cb(void *ctx, const char *dn, int64_t ts)
{
    ss_members *m = ctx;
    members_add(m, dn, m->state, ts, 1);
    return m->oom; /* stops the page */
}

static void sink_member_cb(void *ud, const bdb_sink_state *s)
{
    ss_members *m = ud;
    members_add(m, s->device, s->state, s->state ? s->state_ts : INT64_MIN, 2);
}

/* Sorts by dn and merges each dn's local and sink entries into one: the
 * newer state wins, the local one on a tie. */
static void members_merge(ss_members *m)
{
    if (m->n > 1)
        qsort(m->v, m->n, sizeof *m->v, member_cmp);
    size_t k = 0;
    for (size_t i = 0; i < m->n; i++) {
        if (k && strcmp(m->v[k - 1].dev, m->v[i].dev) == 0) {
            ss_member *p = &m->v[k - 1], *q = &m->v[i];
            if (q->state && (!p->state || q->ts > p->ts)) {
                free(p->state);
                p->state = q->state;
                p->ts = q->ts;
                q->state = NULL;
            }
            p->src |= q->src;
            free(q->dev);
            free(q->state);
            continue;
        }
        m->v[k++] = m->v[i];
    }
    m->n = k;
}

/* The local index's entry of one dn: its state and state time. */
static int local_state_cb(void *ctx, const bdb_latest *l)
{
    ss_member *x = ctx;
    x->state = ss_strdup(l->state, &x->oom);
    x->ts = l->state ? l->state_ts : INT64_MIN;
    return 0;
}

int bdb_db_state_devices(bdb_db *db, const char *tn, const char *state, const char *after,
                         size_t limit, int (*cb)(void *ctx, const char *dn, int64_t state_ts),
                         void *ctx, int *more, uint64_t *total)
{
    if (!db_ss_on(db) || limit < 1 || limit > BDB_STATE_PAGE_MAX)
        return db_latest_state_devices_local(db, tn, state, after, limit, cb, ctx, more, total);
    *more = 0;
    *total = 0;
    ss_members m = {NULL, 0, 0, state, 0};
    /* Every local member, page by page. */
    int lmore = 1, rc = BDB_OK;
    uint64_t ltotal;
    while (lmore && rc == BDB_OK) {
        size_t before = m.n;
        const char *last = m.n ? m.v[m.n - 1].dev : NULL;
        char *lastc = ss_strdup(last, &m.oom);
        if (!m.oom)
            rc = db_latest_state_devices_local(db, tn, state, lastc, BDB_STATE_PAGE_MAX,
                                               local_member_cb, &m, &lmore, &ltotal);
        free(lastc);
        if (m.oom)
            rc = BDB_ERR_NOMEM;
        if (m.n == before)
            break;
    }
    if (rc == BDB_OK)
        rc = db->o.sink->ops->state_list(db->o.sink, tn, state, sink_member_cb, &m);
    if (rc == BDB_ERR_NOMEM || m.oom) { /* never part of the members */
        members_free(&m);
        return BDB_ERR_NOMEM;
    }
    if (rc != BDB_OK) {
        BDB_WARN("devices in state %s of %s: the sink failed (%s); answering from the local "
                 "index",
                 state, tn, bdb_strerror(rc));
        members_free(&m);
        return db_latest_state_devices_local(db, tn, state, after, limit, cb, ctx, more, total);
    }
    members_merge(&m);
    /* A member only one side knows may have moved on the other: the local index for
     * the sink's rows (memory), the sink for the local-only ones (those changed since
     * the last flush, mostly). */
    size_t k = 0, i;
    for (i = 0; i < m.n; i++) {
        ss_member *x = &m.v[i];
        ss_member other = {NULL, NULL, INT64_MIN, 0, 0};
        int orc = BDB_OK;
        if (x->src == 2)
            orc = db_latest_get_local(db, tn, x->dev, local_state_cb, &other);
        else if (x->src == 1)
            db->o.sink->ops->state_get(db->o.sink, tn, x->dev, ss_sink_state_cb, &other);
        int gone = other.state && strcmp(other.state, state) != 0 &&
                   (other.ts > x->ts || (other.ts == x->ts && x->src == 2));
        free(other.state);
        if (orc == BDB_ERR_NOMEM || other.oom)
            break; /* whether x moved on is unknown */
        if (gone) {
            free(x->dev);
            free(x->state);
            continue;
        }
        m.v[k++] = *x;
    }
    if (i < m.n) {
        memmove(m.v + k, m.v + i, (m.n - i) * sizeof *m.v);
        m.n = k + (m.n - i);
        members_free(&m);
        return BDB_ERR_NOMEM;
    }
    m.n = k;
    *total = m.n;
    size_t start = 0;
    while (after && start < m.n && strcmp(m.v[start].dev, after) <= 0)
        start++;
    for (i = start; i < m.n; i++) {
        if (i - start == limit) {
            *more = 1;
            break;
        }
        if (cb(ctx, m.v[i].dev, m.v[i].ts))
            break;
    }
    members_free(&m);
    return BDB_OK;
}

/* ---------------------------------------------------------------- counts per state */

static void local_all_cb(void *ud, device *d, const bdb_latest *l, int64_t dirty_lo)
{
    (void)d;
    (void)dirty_lo;
    ss_members *m = ud;
    members_add(m, l->device, l->state, l->state ? l->state_ts : INT64_MIN, 1);
}

static int str_cmp(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    return strcmp(x, y);
}

int bdb_db_state_counts(bdb_db *db, const char *tn,
                        int (*cb)(void *ctx, const char *state, uint64_t devices), void *ctx,
                        uint64_t *no_state)
{
    if (!db_ss_on(db))
        return db_latest_state_counts_local(db, tn, cb, ctx, no_state);
    ss_members m = {NULL, 0, 0, NULL, 0};
    int rc = db->o.sink->ops->state_list(db->o.sink, tn, NULL, sink_member_cb, &m);
    if (rc == BDB_ERR_NOMEM || m.oom) { /* never part of the counts */
        members_free(&m);
        return BDB_ERR_NOMEM;
    }
    if (rc != BDB_OK) {
        BDB_WARN("state counts of %s: the sink failed (%s); answering from the local index", tn,
                 bdb_strerror(rc));
        members_free(&m);
        return db_latest_state_counts_local(db, tn, cb, ctx, no_state);
    }
    const char **names = NULL;
    if (db_latest_walk(db, tn, 0, local_all_cb, &m) != BDB_OK || m.oom ||
        !(names = bdb_calloc(m.n + 1, sizeof *names))) {
        members_free(&m);
        return BDB_ERR_NOMEM;
    }
    members_merge(&m);
    *no_state = 0;
    size_t k = 0;
    for (size_t i = 0; i < m.n; i++) {
        if (m.v[i].state)
            names[k++] = m.v[i].state;
        else
            (*no_state)++;
    }
    if (k > 1)
        qsort(names, k, sizeof *names, str_cmp);
    for (size_t i = 0; i < k;) {
        size_t j = i;
        while (j < k && strcmp(names[j], names[i]) == 0)
            j++;
        if (cb(ctx, names[i], (uint64_t)(j - i)))
            break;
        i = j;
    }
    free(names);
    members_free(&m);
    return BDB_OK;
}

void ss_sink_state_cb(void *ud, const bdb_sink_state *s)
{
    ss_member *x = ud;
    x->state = ss_strdup(s->state, &x->oom);
    x->ts = s->state ? s->state_ts : INT64_MIN;
}
