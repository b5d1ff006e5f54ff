/* db_latest: the current-state index (db_latest.h), its readers (db.h) and the file
 * <data>/latest.
 *
 * Rules (also in docs/STORAGE.md#current-state):
 *  - event time = the newest report time of the device;
 *  - per metric: the value of the newest report that carried the metric;
 *  - state: that of the newest report that carried a state; a report without one
 *    leaves the state as it is;
 *  - an older report never replaces a newer one; at equal times the report applied
 *    later wins (replay applies in WAL order, so a restart agrees with the live run
 *    except for two concurrent requests carrying the same device and time).
 *
 * File (written with bdb_vfs_write_atomic: after a crash the old or the new one):
 *   "BDBLAT01" | u32 version=1 | u64 wal_upto | u64 ndevices | u64 image length |
 *   zstd frame of the image | u32 crc32 of all preceding bytes
 *   image = ndevices x (str tenant | str device | varint event_ts | u8 has_state
 *           [str state | varint state_ts] | uvarint nmetrics
 *           (str metric | varint ts | u64le value bits)*)
 * wal_upto is the segment the flush's WAL cut sealed: the image holds every report of
 * segments <= wal_upto (and maybe later ones, which replay applies again: applying a
 * report twice changes nothing). A file that fails any check is refused at open
 * (BDB_ERR_CORRUPT) rather than silently rebuilt: moving it away rebuilds the states
 * from the catalog and the metric values from the WAL that is left. */
#include "storage/embedded/db_latest.h"
#include "storage/embedded/db_state_sink.h" /* sink: renamed readers, walker */
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#define LT_MAGIC "BDBLAT01"
#define LT_VERSION 1
#define LT_HEADER (8 + 4 + 8 + 8 + 8)
#define LT_MAX_IMAGE (UINT64_C(16) << 30) /* refuse absurd lengths from a damaged header */
#define LT_MAX_METRICS (1u << 20)         /* per device, in a file */

typedef struct lt_metric {
    series *s; /* the catalog's series: its name, alive as long as the device */
    int64_t ts;
    double v;
} lt_metric;

struct lt_state;
struct lt_tenant;

/* One device. Guarded by its device's stripe lock; st, left and right also change
 * only with the tenant's mutex held. */
typedef struct lt_dev {
    device *dev;
    struct lt_tenant *t;
    struct lt_state *st;         /* NULL: no state reported yet */
    struct lt_dev *left, *right; /* treap links inside st's set */
    _Atomic int64_t state_ts;    /* read without the stripe lock by state listings */
    int64_t event_ts;
    lt_metric *m; /* sorted by metric name */
    uint32_t nm, cap;
    uint64_t gen;     /* sink: round of the last change (db_state_sink.c) */
    int64_t dirty_lo; /* sink: oldest report time applied since the last sent round */
} lt_dev;

typedef struct lt_state {
    char *name;
    size_t nlen;
    uint64_t count;
    lt_dev *root;
} lt_state;

typedef struct lt_tenant {
    pthread_mutex_t mu; /* states, every state's set, ndev */
    bdb_map *states;    /* name -> lt_state; a state is dropped when its last device leaves */
    uint64_t ndev;
} lt_tenant;

/* Entries of the devices of one engine stripe: open addressing on the device pointer,
 * guarded by that stripe's lock. Entries are never removed (devices never are). */
typedef struct lt_table {
    lt_dev **slot;
    uint32_t cap, n;
} lt_table;

struct db_latest {
    lt_table tables[DB_STRIPES];
    pthread_mutex_t mu; /* tenants */
    bdb_map *tenants;   /* tenant name -> lt_tenant */
    _Atomic uint64_t bytes;
    _Atomic uint64_t round, sent; /* sink: changes since round `sent` are not sent yet */
};

/* NULL when out of memory: every caller fails with BDB_ERR_NOMEM, having changed
 * nothing (alloc.h). */
static void *xcalloc(size_t n, size_t size)
{
    return bdb_calloc(n ? n : 1, size);
}

static void account(struct db_latest *L, int64_t delta)
{
    atomic_fetch_add(&L->bytes, (uint64_t)delta);
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x *= UINT64_C(0xc4ceb9fe1a85ec53);
    x ^= x >> 33;
    return x;
}

/* Same order as the catalog's series array: bytes, then the shorter name first. */
static int name_cmp(const char *a, size_t al, const char *b, size_t bl)
{
    size_t m = al < bl ? al : bl;
    int c = memcmp(a, b, m);
    if (c)
        return c;
    return (al > bl) - (al < bl);
}

/* ---------------------------------------------------------------- treap */

/* The priority is derived from the entry's address, so it needs no storage. */
static uint64_t prio(const lt_dev *x)
{
    return mix64((uint64_t)(uintptr_t)x ^ UINT64_C(0x9e3779b97f4a7c15));
}

static int dev_cmp(const lt_dev *a, const lt_dev *b)
{
    return name_cmp(a->dev->name, a->dev->nlen, b->dev->name, b->dev->nlen);
}

static void tr_split(lt_dev *t, const lt_dev *key, lt_dev **l, lt_dev **r)
{
    if (!t) {
        *l = *r = NULL;
    } else if (dev_cmp(t, key) < 0) {
        tr_split(t->right, key, &t->right, r);
        *l = t;
    } else {
        tr_split(t->left, key, l, &t->left);
        *r = t;
    }
}

static lt_dev *tr_merge(lt_dev *a, lt_dev *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (prio(a) > prio(b)) {
        a->right = tr_merge(a->right, b);
        return a;
    }
    b->left = tr_merge(a, b->left);
    return b;
}

static lt_dev *tr_insert(lt_dev *root, lt_dev *x)
{
    if (!root) {
        x->left = x->right = NULL;
        return x;
    }
    if (prio(x) > prio(root)) {
        tr_split(root, x, &x->left, &x->right);
        return x;
    }
    if (dev_cmp(x, root) < 0)
        root->left = tr_insert(root->left, x);
    else
        root->right = tr_insert(root->right, x);
    return root;
}

static lt_dev *tr_remove(lt_dev *root, lt_dev *x)
{
    if (!root)
        return NULL;
    if (root == x) {
        lt_dev *m = tr_merge(x->left, x->right);
        x->left = x->right = NULL;
        return m;
    }
    if (dev_cmp(x, root) < 0)
        root->left = tr_remove(root->left, x);
    else
        root->right = tr_remove(root->right, x);
    return root;
}

/* ---------------------------------------------------------------- entries */

static lt_tenant *tenant_get(struct db_latest *L, const char *name, int create)
{
    size_t n = strlen(name);
    pthread_mutex_lock(&L->mu);
    lt_tenant *t = bdb_map_get(L->tenants, name, n);
    if (!t && create) {
        t = xcalloc(1, sizeof *t);
        if (t && !(t->states = bdb_map_new())) {
            free(t);
            t = NULL;
        }
        if (t) {
            pthread_mutex_init(&t->mu, NULL);
            if (bdb_map_set(L->tenants, name, n, t) != BDB_OK) {
                pthread_mutex_destroy(&t->mu);
                bdb_map_free(t->states);
                free(t);
                t = NULL;
            } else {
                account(L, (int64_t)(sizeof *t + n + 64));
            }
        }
    }
    pthread_mutex_unlock(&L->mu);
    return t;
}

static uint32_t slot_of(const device *d, uint32_t cap)
{
    return (uint32_t)(mix64((uint64_t)(uintptr_t)d) & (cap - 1));
}

static lt_dev *table_find(const lt_table *tb, const device *d)
{
    if (!tb->cap)
        return NULL;
    for (uint32_t i = slot_of(d, tb->cap);; i = (i + 1) & (tb->cap - 1)) {
        lt_dev *e = tb->slot[i];
        if (!e || e->dev == d)
            return e;
    }
}

static int table_put(struct db_latest *L, lt_table *tb, lt_dev *e)
{
    if ((uint64_t)(tb->n + 1) * 4 > (uint64_t)tb->cap * 3) {
        uint32_t ncap = tb->cap ? tb->cap * 2 : 16;
        lt_dev **ns = xcalloc(ncap, sizeof *ns);
        if (!ns)
            return BDB_ERR_NOMEM;
        for (uint32_t k = 0; k < tb->cap; k++) {
            lt_dev *x = tb->slot[k];
            if (!x)
                continue;
            uint32_t i = slot_of(x->dev, ncap);
            while (ns[i])
                i = (i + 1) & (ncap - 1);
            ns[i] = x;
        }
        free(tb->slot);
        account(L, ((int64_t)ncap - (int64_t)tb->cap) * (int64_t)sizeof *ns);
        tb->slot = ns;
        tb->cap = ncap;
    }
    uint32_t i = slot_of(e->dev, tb->cap);
    while (tb->slot[i])
        i = (i + 1) & (tb->cap - 1);
    tb->slot[i] = e;
    tb->n++;
    return BDB_OK;
}

/* Caller holds d's stripe lock. */
static lt_dev *entry(struct db_latest *L, device *d, int create)
{
    lt_table *tb = &L->tables[d->stripe];
    lt_dev *e = table_find(tb, d);
    if (e || !create)
        return e;
    e = xcalloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->dev = d;
    e->t = tenant_get(L, d->tenant->name, 1);
    e->event_ts = INT64_MIN;
    atomic_init(&e->state_ts, INT64_MIN);
    if (!e->t || table_put(L, tb, e) != BDB_OK) {
        free(e);
        return NULL;
    }
    account(L, sizeof *e);
    pthread_mutex_lock(&e->t->mu);
    e->t->ndev++;
    pthread_mutex_unlock(&e->t->mu);
    return e;
}

/* Index of the metric or, if absent, where it would go (*found = 0). */
static uint32_t metric_pos(const lt_dev *e, const char *name, size_t nlen, int *found)
{
    uint32_t lo = 0, hi = e->nm;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        const series *s = e->m[mid].s;
        int c = name_cmp(s->metric, s->mlen, name, nlen);
        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = 0;
    return lo;
}

static int metric_set(struct db_latest *L, lt_dev *e, series *s, int64_t ts, double v)
{
    int found;
    uint32_t i = metric_pos(e, s->metric, s->mlen, &found);
    if (found) {
        if (ts >= e->m[i].ts) {
            e->m[i].ts = ts;
            e->m[i].v = v;
        }
        return BDB_OK;
    }
    if (e->nm == e->cap) {
        uint32_t ncap = e->cap ? e->cap * 2 : 2;
        lt_metric *nmv = bdb_realloc(e->m, ncap * sizeof *nmv);
        if (!nmv)
            return BDB_ERR_NOMEM;
        account(L, ((int64_t)ncap - (int64_t)e->cap) * (int64_t)sizeof *nmv);
        e->m = nmv;
        e->cap = ncap;
    }
    memmove(e->m + i + 1, e->m + i, (e->nm - i) * sizeof *e->m);
    e->m[i] = (lt_metric){s, ts, v};
    e->nm++;
    return BDB_OK;
}

/* Moves e into state (name, n), creating the set if needed; an emptied set is
 * dropped so that the states a tenant ever used do not accumulate. */
static int state_move(struct db_latest *L, lt_dev *e, const char *name, size_t n)
{
    lt_tenant *t = e->t;
    pthread_mutex_lock(&t->mu);
    /* The new set first: out of memory then leaves e in its old state. */
    lt_state *st = bdb_map_get(t->states, name, n);
    if (!st) {
        st = xcalloc(1, sizeof *st);
        char *nm = st ? xcalloc(n + 1, 1) : NULL;
        if (!nm || (memcpy(nm, name, n), bdb_map_set(t->states, name, n, st)) != BDB_OK) {
            free(nm);
            free(st);
            pthread_mutex_unlock(&t->mu);
            return BDB_ERR_NOMEM;
        }
        st->name = nm;
        st->nlen = n;
        account(L, (int64_t)(sizeof *st + n + 1 + 32));
    }
    lt_state *old = e->st;
    if (old) {
        old->root = tr_remove(old->root, e);
        if (--old->count == 0) {
            bdb_map_del(t->states, old->name, old->nlen);
            account(L, -(int64_t)(sizeof *old + old->nlen + 1 + 32));
            free(old->name);
            free(old);
        }
    }
    st->root = tr_insert(st->root, e);
    st->count++;
    e->st = st;
    pthread_mutex_unlock(&t->mu);
    return BDB_OK;
}

static int apply_state(struct db_latest *L, lt_dev *e, const char *state, size_t slen, int64_t ts)
{
    if (ts < atomic_load_explicit(&e->state_ts, memory_order_relaxed))
        return BDB_OK;
    /* Most state reports repeat the current state: no tenant lock for those. */
    if ((!e->st || e->st->nlen != slen || memcmp(e->st->name, state, slen) != 0) &&
        state_move(L, e, state, slen) != BDB_OK)
        return BDB_ERR_NOMEM;
    atomic_store_explicit(&e->state_ts, ts, memory_order_relaxed);
    return BDB_OK;
}

int db_latest_apply(bdb_db *db, device *d, int64_t ts, const char *state, size_t slen,
                    const char *const *names, const size_t *nlens, const double *vals, uint32_t nm)
{
    struct db_latest *L = db->latest;
    if (!L)
        return BDB_OK;
    lt_dev *e = entry(L, d, 1);
    if (!e)
        return BDB_ERR_NOMEM;
    if (ts > e->event_ts)
        e->event_ts = ts;
    /* sink: mark the entry changed (db_state_sink.c sends it at the next flush). */
    if (e->gen <= atomic_load(&L->sent) || ts < e->dirty_lo)
        e->dirty_lo = ts;
    e->gen = atomic_load(&L->round) + 1;
    for (uint32_t k = 0; k < nm; k++) {
        int found;
        uint32_t i = metric_pos(e, names[k], nlens[k], &found);
        if (found) {
            if (ts >= e->m[i].ts) {
                e->m[i].ts = ts;
                e->m[i].v = vals[k];
            }
            continue;
        }
        series *s = cat_series(db, d, names[k], nlens[k], 0);
        /* the write path created it; absent only if that append failed */
        if (s && metric_set(L, e, s, ts, vals[k]) != BDB_OK)
            return BDB_ERR_NOMEM;
    }
    if (state)
        return apply_state(L, e, state, slen, ts);
    return BDB_OK;
}

/* ---------------------------------------------------------------- readers */

/* Devices are never freed while the db is open, so their names and their series'
 * names may be used after the stripe lock is dropped. */
static device *find_device(bdb_db *db, const char *tn, const char *dn)
{
    pthread_rwlock_rdlock(&db->cat_lock);
    tenant *t = cat_tenant(db, tn, strlen(tn), 0);
    device *d = t ? cat_device(db, t, dn, strlen(dn), 0) : NULL;
    pthread_rwlock_unlock(&db->cat_lock);
    return d;
}

int db_latest_get_local(bdb_db *db, const char *tenant_name, const char *device_name,
                        int (*cb)(void *ctx, const bdb_latest *l), void *ctx)
{
    if (!db->latest)
        return BDB_ERR_NOTFOUND;
    device *d = find_device(db, tenant_name, device_name);
    if (!d)
        return BDB_ERR_NOTFOUND;
    bdb_latest out;
    memset(&out, 0, sizeof out);
    char *state = NULL;
    bdb_latest_metric *mv = NULL;
    pthread_mutex_lock(dev_lock(db, d));
    lt_dev *e = entry(db->latest, d, 0);
    if (e) {
        out.event_ts = e->event_ts;
        out.state_ts = atomic_load_explicit(&e->state_ts, memory_order_relaxed);
        if (e->st && (state = xcalloc(e->st->nlen + 1, 1)) != NULL)
            memcpy(state, e->st->name, e->st->nlen);
        mv = xcalloc(e->nm, sizeof *mv);
        if (!mv || (e->st && !state)) {
            pthread_mutex_unlock(dev_lock(db, d));
            free(state);
            free(mv);
            return BDB_ERR_NOMEM;
        }
        for (uint32_t i = 0; i < e->nm; i++)
            mv[i] = (bdb_latest_metric){e->m[i].s->metric, e->m[i].ts, e->m[i].v,
                                        e->m[i].ts == e->event_ts};
        out.nmetrics = e->nm;
    }
    pthread_mutex_unlock(dev_lock(db, d));
    if (!e)
        return BDB_ERR_NOTFOUND;
    out.tenant = d->tenant->name;
    out.device = d->name;
    out.state = state;
    out.metrics = mv;
    if (!state)
        out.state_ts = INT64_MIN;
    cb(ctx, &out);
    free(state);
    free(mv);
    return BDB_OK;
}

struct page {
    const char *after;
    size_t alen, want, n;
    const char **names;
    int64_t *ts;
};

/* In-order walk of the names after p->after, stopping once p->want are collected. */
static void collect(const lt_dev *t, struct page *p)
{
    if (!t || p->n >= p->want)
        return;
    int gt = !p->after || name_cmp(t->dev->name, t->dev->nlen, p->after, p->alen) > 0;
    if (gt)
        collect(t->left, p);
    if (p->n >= p->want)
        return;
    if (gt) {
        p->names[p->n] = t->dev->name;
        p->ts[p->n] = atomic_load_explicit(&t->state_ts, memory_order_relaxed);
        p->n++;
    }
    collect(t->right, p);
}

int db_latest_state_devices_local(bdb_db *db, const char *tenant_name, const char *state,
                                  const char *after, size_t limit,
                                  int (*cb)(void *ctx, const char *device, int64_t state_ts),
                                  void *ctx, int *more, uint64_t *total)
{
    *more = 0;
    *total = 0;
    if (limit < 1 || limit > BDB_STATE_PAGE_MAX)
        return BDB_ERR_INVALID;
    lt_tenant *t = db->latest ? tenant_get(db->latest, tenant_name, 0) : NULL;
    if (!t)
        return BDB_OK;
    struct page p = {after, after ? strlen(after) : 0, limit + 1, 0, NULL, NULL};
    p.names = xcalloc(limit + 1, sizeof *p.names);
    p.ts = xcalloc(limit + 1, sizeof *p.ts);
    if (!p.names || !p.ts) {
        free(p.names);
        free(p.ts);
        return BDB_ERR_NOMEM;
    }
    pthread_mutex_lock(&t->mu);
    lt_state *st = bdb_map_get(t->states, state, strlen(state));
    if (st) {
        *total = st->count;
        collect(st->root, &p);
    }
    pthread_mutex_unlock(&t->mu);
    if (p.n > limit) {
        *more = 1;
        p.n = limit;
    }
    for (size_t i = 0; i < p.n; i++)
        if (cb(ctx, p.names[i], p.ts[i]))
            break;
    free(p.names);
    free(p.ts);
    return BDB_OK;
}

struct count_row {
    char *name;
    uint64_t n;
};

static int count_cmp(const void *a, const void *b)
{
    const struct count_row *x = a, *y = b;
    return strcmp(x->name, y->name);
}

int db_latest_state_counts_local(bdb_db *db, const char *tenant_name,
                                 int (*cb)(void *ctx, const char *state, uint64_t devices),
                                 void *ctx, uint64_t *no_state)
{
    *no_state = 0;
    lt_tenant *t = db->latest ? tenant_get(db->latest, tenant_name, 0) : NULL;
    if (!t)
        return BDB_OK;
    pthread_mutex_lock(&t->mu);
    size_t n = bdb_map_count(t->states), k = 0, pos = 0, klen;
    struct count_row *rows = xcalloc(n, sizeof *rows);
    const void *key;
    void *v;
    uint64_t in_state = 0;
    int nomem = !rows;
    while (!nomem && k < n && bdb_map_next(t->states, &pos, &key, &klen, &v)) {
        lt_state *st = v;
        rows[k].name = xcalloc(st->nlen + 1, 1);
        if (!rows[k].name) {
            nomem = 1;
            break;
        }
        memcpy(rows[k].name, st->name, st->nlen);
        rows[k].n = st->count;
        in_state += st->count;
        k++;
    }
    *no_state = t->ndev - in_state;
    pthread_mutex_unlock(&t->mu);
    if (nomem) { /* never part of the counts */
        for (size_t i = 0; i < k; i++)
            free(rows[i].name);
        free(rows);
        *no_state = 0;
        return BDB_ERR_NOMEM;
    }
    if (k > 1)
        qsort(rows, k, sizeof *rows, count_cmp);
    int stop = 0;
    for (size_t i = 0; i < k; i++) {
        if (!stop)
            stop = cb(ctx, rows[i].name, rows[i].n);
        free(rows[i].name);
    }
    free(rows);
    return BDB_OK;
}

uint64_t bdb_db_state_bytes(bdb_db *db)
{
    return db->latest ? atomic_load(&db->latest->bytes) : 0;
}

/* ---------------------------------------------------------------- file */

static void encode_entry(bdb_buf *b, const lt_dev *e)
{
    const device *d = e->dev;
    bdb_buf_put_str(b, d->tenant->name, strlen(d->tenant->name));
    bdb_buf_put_str(b, d->name, d->nlen);
    bdb_buf_put_varint(b, e->event_ts);
    bdb_buf_putc(b, e->st != NULL);
    if (e->st) {
        bdb_buf_put_str(b, e->st->name, e->st->nlen);
        bdb_buf_put_varint(b, atomic_load_explicit(&e->state_ts, memory_order_relaxed));
    }
    bdb_buf_put_uvarint(b, e->nm);
    for (uint32_t i = 0; i < e->nm; i++) {
        bdb_buf_put_str(b, e->m[i].s->metric, e->m[i].s->mlen);
        bdb_buf_put_varint(b, e->m[i].ts);
        bdb_buf_put_f64(b, e->m[i].v);
    }
}

int db_latest_save(bdb_db *db, uint64_t wal_upto)
{
    struct db_latest *L = db->latest;
    if (!L)
        return BDB_OK;
    bdb_buf img, out;
    bdb_buf_init_checked(&img); /* out of memory: the save fails, the WAL stays */
    bdb_buf_init_checked(&out);
    uint64_t n = 0;
    /* One stripe at a time: writers of other stripes go on meanwhile. */
    for (uint32_t s = 0; s < DB_STRIPES; s++) {
        pthread_mutex_lock(&db->stripes[s]);
        const lt_table *tb = &L->tables[s];
        for (uint32_t i = 0; i < tb->cap; i++)
            if (tb->slot[i]) {
                encode_entry(&img, tb->slot[i]);
                n++;
            }
        pthread_mutex_unlock(&db->stripes[s]);
    }
    /* Every report in the snapshot was appended to the WAL before it was applied; this
     * cut makes them durable, so the file never shows a report that a power loss
     * could take out of the WAL. */
    uint64_t sealed;
    int rc = img.oom ? BDB_ERR_NOMEM : bdb_wal_cut(db->wal, &sealed);
    if (rc != BDB_OK) {
        if (rc != BDB_ERR_NOMEM)
            db_set_readonly(db, rc, "WAL segment cut (state index)");
        goto out;
    }
    size_t bound = ZSTD_compressBound(img.len);
    if ((rc = bdb_buf_reserve(&out, LT_HEADER + bound + 4)) != BDB_OK)
        goto out;
    bdb_buf_append(&out, LT_MAGIC, 8);
    bdb_buf_put_u32le(&out, LT_VERSION);
    bdb_buf_put_u64le(&out, wal_upto);
    bdb_buf_put_u64le(&out, n);
    bdb_buf_put_u64le(&out, img.len);
    size_t z = ZSTD_compress(out.data + out.len, bound, img.data, img.len, 1);
    if (ZSTD_isError(z)) {
        BDB_ERROR("state index compression failed: %s", ZSTD_getErrorName(z));
        rc = BDB_ERR_IO;
        goto out;
    }
    out.len += z;
    bdb_buf_put_u32le(&out, (uint32_t)crc32(0, out.data, (uInt)out.len));
    rc = bdb_vfs_write_atomic(db->vfs, db->dir, "latest", out.data, out.len);
out:
    if (rc != BDB_OK)
        BDB_ERROR("state index save failed: %s; WAL segments kept", bdb_strerror(rc));
    bdb_buf_free(&img);
    bdb_buf_free(&out);
    return rc;
}

/* Without a file (a data directory from before the index, or the file moved away):
 * states and event times from the catalog. Metric values come back from the WAL
 * segments that remain, and from each device's next report. */
static int seed_nomem; /* out of memory seeding (open only, single-threaded) */

static void seed_from_catalog(void *ctx, device *d)
{
    bdb_db *db = ctx;
    if (!d->state && d->last_ts == INT64_MIN)
        return;
    lt_dev *e = entry(db->latest, d, 1);
    if (!e) {
        seed_nomem = 1;
        return;
    }
    e->event_ts = d->last_ts;
    if (d->state && apply_state(db->latest, e, d->state, strlen(d->state), d->state_ts))
        seed_nomem = 1;
}

static int load_image(bdb_db *db, const char *path, const uint8_t *img, size_t len, uint64_t ndev)
{
    bdb_dec d;
    bdb_dec_init(&d, img, len);
    for (uint64_t i = 0; i < ndev && !d.err; i++) {
        size_t tl, dl, sl = 0;
        const char *tn = bdb_dec_str(&d, &tl);
        const char *dn = bdb_dec_str(&d, &dl);
        int64_t ets = bdb_dec_varint(&d);
        const char *st = NULL;
        int64_t sts = INT64_MIN;
        if (bdb_dec_u8(&d)) {
            st = bdb_dec_str(&d, &sl);
            sts = bdb_dec_varint(&d);
        }
        uint64_t nm = bdb_dec_uvarint(&d);
        if (d.err || tl == 0 || nm > LT_MAX_METRICS || nm > bdb_dec_left(&d))
            break;
        tenant *t = cat_tenant(db, tn, tl, 1);
        device *dv = t ? cat_device(db, t, dn, dl, 1) : NULL;
        lt_dev *e = dv ? entry(db->latest, dv, 1) : NULL;
        if (!e)
            return BDB_ERR_NOMEM; /* the open fails (alloc.h) */
        if (ets > e->event_ts)
            e->event_ts = ets;
        for (uint64_t k = 0; k < nm && !d.err; k++) {
            size_t ml;
            const char *m = bdb_dec_str(&d, &ml);
            int64_t ts = bdb_dec_varint(&d);
            double v = bdb_dec_f64(&d);
            series *se = d.err ? NULL : cat_series(db, dv, m, ml, 1);
            if (!d.err && (!se || metric_set(db->latest, e, se, ts, v) != BDB_OK))
                return BDB_ERR_NOMEM;
        }
        if (st && !d.err && apply_state(db->latest, e, st, sl, sts) != BDB_OK)
            return BDB_ERR_NOMEM;
    }
    if (d.err || bdb_dec_left(&d)) {
        BDB_ERROR("state index %s: truncated or malformed content", path);
        return BDB_ERR_CORRUPT;
    }
    return BDB_OK;
}

static int load_file(bdb_db *db, const char *path)
{
    void *data;
    size_t len;
    int rc = bdb_vfs_read_all(db->vfs, path, &data, &len);
    if (rc != BDB_OK) {
        BDB_ERROR("state index %s: cannot read: %s", path, bdb_strerror(rc));
        return rc;
    }
    const uint8_t *p = data;
    void *img = NULL;
    rc = BDB_ERR_CORRUPT;
    if (len < LT_HEADER + 4 || memcmp(p, LT_MAGIC, 8) != 0) {
        BDB_ERROR("state index %s: bad magic or too short (%zu bytes)", path, len);
        goto out;
    }
    if ((uint32_t)crc32(0, p, (uInt)(len - 4)) != bdb_get_u32le(p + len - 4)) {
        BDB_ERROR("state index %s: checksum mismatch", path);
        goto out;
    }
    if (bdb_get_u32le(p + 8) != LT_VERSION) {
        BDB_ERROR("state index %s: unsupported version %u", path, bdb_get_u32le(p + 8));
        goto out;
    }
    uint64_t upto = bdb_get_u64le(p + 12), ndev = bdb_get_u64le(p + 20);
    uint64_t raw = bdb_get_u64le(p + 28);
    size_t zlen = len - LT_HEADER - 4;
    unsigned long long fcs = ZSTD_getFrameContentSize(p + LT_HEADER, zlen);
    if (raw > LT_MAX_IMAGE || fcs != raw || ndev > raw) {
        BDB_ERROR("state index %s: bad image length", path);
        goto out;
    }
    img = bdb_malloc(raw ? raw : 1);
    if (!img) {
        rc = BDB_ERR_NOMEM;
        goto out;
    }
    size_t got = ZSTD_decompress(img, raw, p + LT_HEADER, zlen);
    if (ZSTD_isError(got) || got != raw) {
        BDB_ERROR("state index %s: cannot decompress", path);
        goto out;
    }
    if ((rc = load_image(db, path, img, raw, ndev)) != BDB_OK)
        goto out;
    if (upto < db->wal_upto) {
        /* The catalog was saved by a flush whose save of this file failed; that flush
         * kept the WAL, so replay from here covers the difference. */
        BDB_WARN("state index %s covers WAL segments up to %llu, the catalog %llu: "
                 "replaying from %llu",
                 path, (unsigned long long)upto, (unsigned long long)db->wal_upto,
                 (unsigned long long)upto + 1);
        db->wal_upto = upto;
    }
out:
    free(img);
    free(data);
    return rc;
}

int db_latest_open(bdb_db *db)
{
    struct db_latest *L = xcalloc(1, sizeof *L);
    if (!L)
        return BDB_ERR_NOMEM;
    pthread_mutex_init(&L->mu, NULL);
    L->tenants = bdb_map_new();
    account(L, sizeof *L);
    db->latest = L; /* freed by db_latest_free even when the open fails */
    if (!L->tenants)
        return BDB_ERR_NOMEM;
    char path[4096];
    snprintf(path, sizeof path, "%s/latest", db->dir);
    if (bdb_vfs_exists(db->vfs, path)) {
        int rc = load_file(db, path);
        if (rc == BDB_ERR_CORRUPT)
            BDB_ERROR("state index %s is damaged; refusing to start. Move it away to "
                      "rebuild it from the catalog and the WAL (latest metric values of "
                      "devices that have not reported since the last flush are then lost "
                      "until they report again)",
                      path);
        return rc;
    }
    uint64_t devices = atomic_load(&db->device_count);
    if (devices) {
        BDB_WARN("state index %s missing: rebuilding states from the catalog (%llu devices) "
                 "and metric values from the WAL",
                 path, (unsigned long long)devices);
        seed_nomem = 0;
        cat_each_device(db, seed_from_catalog, db);
        if (seed_nomem)
            return BDB_ERR_NOMEM;
        db->wal_upto = 0; /* replay every segment that is left */
    }
    return BDB_OK;
}

void db_latest_free(bdb_db *db)
{
    struct db_latest *L = db->latest;
    if (!L)
        return;
    for (uint32_t s = 0; s < DB_STRIPES; s++) {
        lt_table *tb = &L->tables[s];
        for (uint32_t i = 0; i < tb->cap; i++)
            if (tb->slot[i]) {
                free(tb->slot[i]->m);
                free(tb->slot[i]);
            }
        free(tb->slot);
    }
    size_t tp = 0, kl;
    const void *key;
    void *tv;
    while (L->tenants && bdb_map_next(L->tenants, &tp, &key, &kl, &tv)) {
        lt_tenant *t = tv;
        size_t sp = 0;
        void *sv;
        while (bdb_map_next(t->states, &sp, &key, &kl, &sv)) {
            lt_state *st = sv;
            free(st->name);
            free(st);
        }
        bdb_map_free(t->states);
        pthread_mutex_destroy(&t->mu);
        free(t);
    }
    bdb_map_free(L->tenants);
    pthread_mutex_destroy(&L->mu);
    free(L);
    db->latest = NULL;
}

/* ---------------------------------------------------------------- sink (db_state_sink.c) */

uint64_t db_latest_round(bdb_db *db)
{
    return db->latest ? atomic_fetch_add(&db->latest->round, 1) + 1 : 0;
}

void db_latest_round_sent(bdb_db *db, uint64_t round)
{
    if (db->latest)
        atomic_store(&db->latest->sent, round);
}

int db_latest_walk(bdb_db *db, const char *tn, int changed_only, db_latest_walk_fn fn, void *ud)
{
    struct db_latest *L = db->latest;
    if (!L)
        return BDB_OK;
    uint64_t sent = atomic_load(&L->sent);
    bdb_latest_metric *mv = NULL;
    uint32_t mcap = 0;
    for (uint32_t s = 0; s < DB_STRIPES; s++) {
        pthread_mutex_lock(&db->stripes[s]);
        lt_table *tb = &L->tables[s];
        for (uint32_t i = 0; i < tb->cap; i++) {
            lt_dev *e = tb->slot[i];
            if (!e || (changed_only && e->gen <= sent) ||
                (tn && strcmp(e->dev->tenant->name, tn) != 0))
                continue;
            if (e->nm > mcap) {
                mcap = e->nm;
                free(mv);
                mv = xcalloc(mcap, sizeof *mv);
                if (!mv) {
                    pthread_mutex_unlock(&db->stripes[s]);
                    return BDB_ERR_NOMEM;
                }
            }
            for (uint32_t k = 0; k < e->nm; k++)
                mv[k] = (bdb_latest_metric){e->m[k].s->metric, e->m[k].ts, e->m[k].v,
                                            e->m[k].ts == e->event_ts};
            bdb_latest l = {e->dev->tenant->name,
                            e->dev->name,
                            e->event_ts,
                            e->st ? e->st->name : NULL,
                            e->st ? atomic_load_explicit(&e->state_ts, memory_order_relaxed)
                                  : INT64_MIN,
                            mv,
                            e->nm};
            fn(ud, e->dev, &l, e->dirty_lo);
        }
        pthread_mutex_unlock(&db->stripes[s]);
    }
    free(mv);
    return BDB_OK;
}
