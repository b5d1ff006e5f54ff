/* db_latest: the current-state index (db_latest.h), its reservations and its readers
 * (db.h); the file <data>/latest is db_latest_file.c.
 *
 * Rules (also in docs/STORAGE.md#current-state):
 *  - event time = the newest report time of the device;
 *  - per metric: the value of the newest report that carried the metric;
 *  - state: that of the newest report that carried a state; a report without one
 *    leaves the state as it is;
 *  - per string attribute: the value of the newest report that carried it; a new
 *    name beyond BDB_MAX_DEVICE_ATTRS is dropped (counted);
 *  - an older report never replaces a newer one; at equal times the report applied
 *    later wins (replay applies in WAL order, so a restart agrees with the live run
 *    except for two concurrent requests carrying the same device and time).
 */
#include "storage/embedded/state/db_latest_int.h"
#include "storage/embedded/sink/db_state_sink.h" /* sink: renamed readers, walker */
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NULL when out of memory: every caller fails with BDB_ERR_NOMEM, having changed
 * nothing (alloc.h). */
static void *xcalloc(size_t n, size_t size)
{
    return bdb_calloc(n ? n : 1, size);
}

void lt_account(struct db_latest *L, int64_t delta)
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
                lt_account(L, (int64_t)(sizeof *t + n + 64));
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
        lt_account(L, ((int64_t)ncap - (int64_t)tb->cap) * (int64_t)sizeof *ns);
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

/* Removes e from its table (a hidden entry whose reservations all failed or went
 * unused): the entries after it in its probe run are placed again, so lookups that
 * passed over its slot still find them. */
static void table_del(lt_table *tb, const lt_dev *e)
{
    uint32_t mask = tb->cap - 1, i = slot_of(e->dev, tb->cap);
    while (tb->slot[i] != e)
        i = (i + 1) & mask;
    tb->slot[i] = NULL;
    tb->n--;
    for (uint32_t j = (i + 1) & mask; tb->slot[j]; j = (j + 1) & mask) {
        lt_dev *x = tb->slot[j];
        tb->slot[j] = NULL;
        uint32_t k = slot_of(x->dev, tb->cap);
        while (tb->slot[k])
            k = (k + 1) & mask;
        tb->slot[k] = x;
    }
}

static lt_dev **dev_entry(const struct db_latest *L, const device *d)
{
    return (lt_dev **)((char *)d->ext + L->dev_off);
}

/* Caller holds d's stripe lock. A new entry is hidden until lt_make_live. */
lt_dev *lt_entry(struct db_latest *L, device *d, int create)
{
    lt_dev **de = dev_entry(L, d);
    lt_table *tb = &L->tables[d->stripe];
    lt_dev *e = *de;
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
    *de = e;
    lt_account(L, sizeof *e);
    return e;
}

/* The first report applied to e: readers see it from now on. */
void lt_make_live(lt_dev *e)
{
    if (e->live)
        return;
    e->live = 1;
    pthread_mutex_lock(&e->t->mu);
    e->t->ndev++;
    pthread_mutex_unlock(&e->t->mu);
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

/* Index of series s in e (*found), looked for at hint first: a report's metrics in
 * name order sit one after another. */
static uint32_t series_pos(const lt_dev *e, const series *s, uint32_t hint, int *found)
{
    if (hint < e->nm && e->m[hint].s == s) {
        *found = 1;
        return hint;
    }
    return metric_pos(e, s->metric, s->mlen, found);
}

int lt_metric_set(struct db_latest *L, lt_dev *e, series *s, int64_t ts, double v)
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
        lt_account(L, ((int64_t)ncap - (int64_t)e->cap) * (int64_t)sizeof *nmv);
        e->m = nmv;
        e->cap = ncap;
    }
    memmove(e->m + i + 1, e->m + i, (e->nm - i) * sizeof *e->m);
    e->m[i] = (lt_metric){s, ts, v};
    e->nm++;
    return BDB_OK;
}

/* ---------------------------------------------------------------- attributes */

static char *attr_copy(const char *name, size_t nl, const char *val, size_t vl)
{
    char *s = bdb_malloc(nl + vl + 2);
    if (s) {
        memcpy(s, name, nl);
        s[nl] = '\0';
        memcpy(s + nl + 1, val, vl);
        s[nl + 1 + vl] = '\0';
    }
    return s;
}

static size_t attr_bytes(const lt_attr *a)
{
    return (size_t)a->nlen + a->vlen + 2;
}

/* Index of attribute name or where it would go (*found = 0). */
static uint32_t attr_pos(const lt_dev *e, const char *name, size_t nl, int *found)
{
    uint32_t lo = 0, hi = e->na;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = name_cmp(e->a[mid].s, e->a[mid].nlen, name, nl);
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

/* Stores copy s (name nl, value vl bytes) at ts: replaces an older value, or takes a
 * new slot (room made by the caller). Returns 1 if s was taken. */
static int attr_put(struct db_latest *L, lt_dev *e, char *s, size_t nl, size_t vl, int64_t ts)
{
    int found;
    uint32_t i = attr_pos(e, s, nl, &found);
    if (found) {
        if (ts < e->a[i].ts)
            return 0;
        lt_account(L, (int64_t)(nl + vl + 2) - (int64_t)attr_bytes(&e->a[i]));
        free(e->a[i].s);
        e->a[i] = (lt_attr){s, (uint32_t)nl, (uint32_t)vl, ts};
        return 1;
    }
    memmove(e->a + i + 1, e->a + i, (e->na - i) * sizeof *e->a);
    e->a[i] = (lt_attr){s, (uint32_t)nl, (uint32_t)vl, ts};
    e->na++;
    lt_account(L, (int64_t)(nl + vl + 2));
    return 1;
}

static int attr_room(struct db_latest *L, lt_dev *e, uint64_t need)
{
    if (need <= e->acap)
        return BDB_OK;
    uint64_t ncap = e->acap ? e->acap : 4;
    while (ncap < need)
        ncap *= 2;
    lt_attr *na = bdb_realloc(e->a, ncap * sizeof *na);
    if (!na)
        return BDB_ERR_NOMEM;
    lt_account(L, ((int64_t)ncap - (int64_t)e->acap) * (int64_t)sizeof *na);
    e->a = na;
    e->acap = (uint8_t)ncap; /* < 2 x BDB_MAX_DEVICE_ATTRS: need never exceeds it */
    return BDB_OK;
}

int lt_attr_set(struct db_latest *L, lt_dev *e, const char *name, size_t nl, const char *val,
                size_t vl, int64_t ts)
{
    int found;
    uint32_t i = attr_pos(e, name, nl, &found);
    if (found ? ts < e->a[i].ts : e->na + e->ares >= BDB_MAX_DEVICE_ATTRS) {
        if (!found)
            atomic_fetch_add(&L->attrs_dropped, 1);
        return BDB_OK;
    }
    if (!found && attr_room(L, e, (uint64_t)e->na + e->ares + 1) != BDB_OK)
        return BDB_ERR_NOMEM;
    char *s = attr_copy(name, nl, val, vl);
    if (!s)
        return BDB_ERR_NOMEM;
    attr_put(L, e, s, nl, vl, ts);
    return BDB_OK;
}

uint64_t bdb_db_attrs_dropped(bdb_db *db)
{
    return atomic_load(&lt_of(db)->attrs_dropped);
}

/* Moves e into state (name, n), creating the set if needed; an emptied set is
 * dropped so that the states a tenant ever used do not accumulate. */
/* The set of state (name, n) of t, made empty if it does not exist; NULL when out of
 * memory (t unchanged). Caller holds t->mu. */
static lt_state *state_get(struct db_latest *L, lt_tenant *t, const char *name, size_t n)
{
    lt_state *st = bdb_map_get(t->states, name, n);
    if (st)
        return st;
    st = xcalloc(1, sizeof *st);
    char *nm = st ? xcalloc(n + 1, 1) : NULL;
    if (!nm || (memcpy(nm, name, n), bdb_map_set(t->states, name, n, st)) != BDB_OK) {
        free(nm);
        free(st);
        return NULL;
    }
    st->name = nm;
    st->nlen = n;
    lt_account(L, (int64_t)(sizeof *st + n + 1 + 32));
    return st;
}

static int state_move(struct db_latest *L, lt_dev *e, const char *name, size_t n)
{
    lt_tenant *t = e->t;
    pthread_mutex_lock(&t->mu);
    /* The new set first: out of memory then leaves e in its old state. */
    lt_state *st = state_get(L, t, name, n);
    if (!st) {
        pthread_mutex_unlock(&t->mu);
        return BDB_ERR_NOMEM;
    }
    lt_state *old = e->st;
    if (old) {
        old->root = tr_remove(old->root, e);
        if (--old->count == 0 && !old->pending) {
            bdb_map_del(t->states, old->name, old->nlen);
            lt_account(L, -(int64_t)(sizeof *old + old->nlen + 1 + 32));
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

int lt_apply_state(struct db_latest *L, lt_dev *e, const char *state, size_t slen, int64_t ts)
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

int db_latest_apply(bdb_db *db, device *d, const db_latest_resv *r, int64_t ts, const char *state,
                    size_t slen, series *const *ser, const double *vals, uint32_t nm,
                    const bdb_kv *attrs, uint32_t na)
{
    struct db_latest *L = lt_of(db);
    lt_dev *e = r && r->e ? r->e : lt_entry(L, d, 1);
    if (!e)
        return BDB_ERR_NOMEM;
    lt_make_live(e);
    if (ts > e->event_ts)
        e->event_ts = ts;
    /* sink: mark the entry changed (db_state_sink.c sends it at the next flush). */
    if (e->gen <= atomic_load(&L->sent) || ts < e->dirty_lo)
        e->dirty_lo = ts;
    e->gen = atomic_load(&L->round) + 1;
    uint32_t hint = 0;
    for (uint32_t k = 0; k < nm; k++) {
        int found;
        uint32_t i = series_pos(e, ser[k], hint, &found);
        hint = i + 1;
        if (found) {
            if (ts >= e->m[i].ts) {
                e->m[i].ts = ts;
                e->m[i].v = vals[k];
            }
            continue;
        }
        if (lt_metric_set(L, e, ser[k], ts, vals[k]) != BDB_OK)
            return BDB_ERR_NOMEM;
    }
    for (uint32_t k = 0; k < na; k++) {
        if (r && r->e) {
            /* the copies and slots of the reservation: nothing to allocate; a copy
             * not taken (an older value) is freed at release */
            if (k < r->nattrs && r->abuf[k] &&
                attr_put(L, e, r->abuf[k], attrs[k].klen, attrs[k].vlen, ts))
                r->abuf[k] = NULL;
        } else if (lt_attr_set(L, e, attrs[k].key, attrs[k].klen, attrs[k].val, attrs[k].vlen,
                               ts) != BDB_OK) {
            return BDB_ERR_NOMEM;
        }
    }
    if (state)
        return lt_apply_state(L, e, state, slen, ts);
    return BDB_OK;
}

/* ---------------------------------------------------------------- reservations */

static void state_unpin(struct db_latest *L, lt_tenant *t, lt_state *st)
{
    pthread_mutex_lock(&t->mu);
    if (--st->pending == 0 && st->count == 0) {
        bdb_map_del(t->states, st->name, st->nlen);
        lt_account(L, -(int64_t)(sizeof *st + st->nlen + 1 + 32));
        free(st->name);
        free(st);
    }
    pthread_mutex_unlock(&t->mu);
}

/* Holds (creating it with no device in it if need be) the set of state (name, n). */
static lt_state *state_pin(struct db_latest *L, lt_tenant *t, const char *name, size_t n)
{
    pthread_mutex_lock(&t->mu);
    lt_state *st = state_get(L, t, name, n);
    if (st)
        st->pending++;
    pthread_mutex_unlock(&t->mu);
    return st;
}

/* The attribute copies and slots of a reservation (see db_latest_reserve). */
static int reserve_attrs(struct db_latest *L, lt_dev *e, const bdb_kv *attrs, uint32_t na,
                         db_latest_resv *r)
{
    r->abuf = bdb_calloc(na, sizeof *r->abuf);
    if (!r->abuf)
        return BDB_ERR_NOMEM;
    r->nattrs = na;
    uint32_t add = 0;
    for (uint32_t k = 0; k < na; k++) {
        int found;
        attr_pos(e, attrs[k].key, attrs[k].klen, &found);
        if (!found) {
            /* names are never removed: those missing now bound what this report adds */
            if ((uint64_t)e->na + e->ares + add >= BDB_MAX_DEVICE_ATTRS) {
                atomic_fetch_add(&L->attrs_dropped, 1);
                continue;
            }
            add++;
        }
        r->abuf[k] = attr_copy(attrs[k].key, attrs[k].klen, attrs[k].val, attrs[k].vlen);
        if (!r->abuf[k])
            return BDB_ERR_NOMEM;
    }
    if (attr_room(L, e, (uint64_t)e->na + e->ares + add) != BDB_OK)
        return BDB_ERR_NOMEM;
    e->ares = (uint8_t)(e->ares + add);
    r->aslots = add;
    return BDB_OK;
}

int db_latest_reserve(bdb_db *db, device *d, const char *state, size_t slen, series *const *ser,
                      uint32_t nm, const bdb_kv *attrs, uint32_t na, db_latest_resv *r)
{
    struct db_latest *L = lt_of(db);
    memset(r, 0, sizeof *r);
    lt_dev *e = lt_entry(L, d, 1);
    if (!e)
        return BDB_ERR_NOMEM;
    e->pending++;
    r->e = e;
    /* Metrics are never removed from an entry, so those missing now bound what this
     * report can add at its apply. */
    uint32_t add = 0, hint = 0;
    for (uint32_t k = 0; k < nm; k++) {
        int found;
        hint = series_pos(e, ser[k], hint, &found) + 1;
        add += !found;
    }
    uint64_t need = (uint64_t)e->nm + e->mres + add;
    if (need > e->cap) {
        /* A device's first report names the metrics it usually has: sized to them
         * exactly (the index holds one entry per live series), doubled later. */
        uint64_t ncap = e->cap ? e->cap : need;
        while (ncap < need)
            ncap *= 2;
        lt_metric *nmv = ncap <= UINT32_MAX ? bdb_realloc(e->m, ncap * sizeof *nmv) : NULL;
        if (!nmv) {
            db_latest_release(db, r);
            return BDB_ERR_NOMEM;
        }
        lt_account(L, ((int64_t)ncap - (int64_t)e->cap) * (int64_t)sizeof *nmv);
        e->m = nmv;
        e->cap = (uint32_t)ncap;
    }
    e->mres += add;
    r->metrics = add;
    /* Every state is held, the current one too: an earlier report of the same batch
     * may move the device away from it and empty its set before this one applies. */
    if (state && !(r->st = state_pin(L, e->t, state, slen))) {
        db_latest_release(db, r);
        return BDB_ERR_NOMEM;
    }
    /* only reports with string attributes pay for these */
    if (na && reserve_attrs(L, e, attrs, na, r) != BDB_OK) {
        db_latest_release(db, r);
        return BDB_ERR_NOMEM;
    }
    return BDB_OK;
}

void db_latest_release(bdb_db *db, db_latest_resv *r)
{
    struct db_latest *L = lt_of(db);
    lt_dev *e = r->e;
    if (!e)
        return;
    if (r->st)
        state_unpin(L, e->t, r->st);
    e->mres -= r->metrics;
    e->ares = (uint8_t)(e->ares - r->aslots);
    if (r->abuf) {
        for (uint32_t k = 0; k < r->nattrs; k++)
            free(r->abuf[k]);
        free(r->abuf);
    }
    if (--e->pending == 0 && !e->live) {
        table_del(&L->tables[e->dev->stripe], e);
        *dev_entry(L, e->dev) = NULL;
        lt_account(L, -(int64_t)(sizeof *e + (size_t)e->cap * sizeof *e->m +
                                 (size_t)e->acap * sizeof *e->a));
        free(e->m);
        free(e->a);
        free(e);
    }
    memset(r, 0, sizeof *r);
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
    device *d = find_device(db, tenant_name, device_name);
    if (!d)
        return BDB_ERR_NOTFOUND;
    bdb_latest out;
    memset(&out, 0, sizeof out);
    char *state = NULL;
    bdb_latest_metric *mv = NULL;
    bdb_latest_attr *av = NULL; /* the array, then the strings, in one allocation */
    pthread_mutex_lock(dev_lock(db, d));
    lt_dev *e = lt_entry(lt_of(db), d, 0);
    if (e && !e->live)
        e = NULL; /* held by a write not applied yet */
    if (e) {
        out.event_ts = e->event_ts;
        out.state_ts = atomic_load_explicit(&e->state_ts, memory_order_relaxed);
        if (e->st && (state = xcalloc(e->st->nlen + 1, 1)) != NULL)
            memcpy(state, e->st->name, e->st->nlen);
        mv = xcalloc(e->nm, sizeof *mv);
        size_t abytes = (size_t)e->na * sizeof *av;
        for (uint32_t i = 0; i < e->na; i++)
            abytes += attr_bytes(&e->a[i]);
        if (e->na && (av = bdb_malloc(abytes)) != NULL) {
            /* copied: a newer value frees the old string once the lock is dropped */
            char *p = (char *)(av + e->na);
            for (uint32_t i = 0; i < e->na; i++) {
                memcpy(p, e->a[i].s, attr_bytes(&e->a[i]));
                av[i] = (bdb_latest_attr){p, p + e->a[i].nlen + 1, e->a[i].ts};
                p += attr_bytes(&e->a[i]);
            }
            out.attrs = av;
            out.nattrs = e->na;
        }
        if (!mv || (e->st && !state) || (e->na && !av)) {
            pthread_mutex_unlock(dev_lock(db, d));
            free(state);
            free(mv);
            free(av);
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
    free(av);
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
    lt_tenant *t = tenant_get(lt_of(db), tenant_name, 0);
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
    lt_tenant *t = tenant_get(lt_of(db), tenant_name, 0);
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
        if (!st->count)
            continue; /* only held by a write's reservation: nobody is in it yet */
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
    return atomic_load(&lt_of(db)->bytes);
}

/* ---------------------------------------------------------------- sink (db_state_sink.c) */

uint64_t db_latest_round(bdb_db *db)
{
    return atomic_fetch_add(&lt_of(db)->round, 1) + 1;
}

void db_latest_round_sent(bdb_db *db, uint64_t round)
{
    atomic_store(&lt_of(db)->sent, round);
}

int db_latest_walk(bdb_db *db, const char *tn, int changed_only, db_latest_walk_fn fn, void *ud)
{
    struct db_latest *L = lt_of(db);
    uint64_t sent = atomic_load(&L->sent);
    bdb_latest_metric *mv = NULL;
    bdb_latest_attr *av = NULL;
    uint32_t mcap = 0, acap = 0;
    for (uint32_t s = 0; s < DB_STRIPES; s++) {
        pthread_mutex_lock(&db->stripes[s]);
        lt_table *tb = &L->tables[s];
        for (uint32_t i = 0; i < tb->cap; i++) {
            lt_dev *e = tb->slot[i];
            if (!e || !e->live || (changed_only && e->gen <= sent) ||
                (tn && strcmp(e->dev->tenant->name, tn) != 0))
                continue;
            if (e->nm > mcap) {
                mcap = e->nm;
                free(mv);
                mv = xcalloc(mcap, sizeof *mv);
                if (!mv) {
                    pthread_mutex_unlock(&db->stripes[s]);
                    free(av);
                    return BDB_ERR_NOMEM;
                }
            }
            if (e->na > acap) {
                acap = e->na;
                free(av);
                av = xcalloc(acap, sizeof *av);
                if (!av) {
                    pthread_mutex_unlock(&db->stripes[s]);
                    free(mv);
                    return BDB_ERR_NOMEM;
                }
            }
            for (uint32_t k = 0; k < e->nm; k++)
                mv[k] = (bdb_latest_metric){e->m[k].s->metric, e->m[k].ts, e->m[k].v,
                                            e->m[k].ts == e->event_ts};
            for (uint32_t k = 0; k < e->na; k++) /* the stripe lock is held: no copy */
                av[k] = (bdb_latest_attr){e->a[k].s, e->a[k].s + e->a[k].nlen + 1, e->a[k].ts};
            bdb_latest l = {e->dev->tenant->name,
                            e->dev->name,
                            e->event_ts,
                            e->st ? e->st->name : NULL,
                            e->st ? atomic_load_explicit(&e->state_ts, memory_order_relaxed)
                                  : INT64_MIN,
                            mv,
                            e->nm,
                            av,
                            e->na};
            fn(ud, e->dev, &l, e->dirty_lo);
        }
        pthread_mutex_unlock(&db->stripes[s]);
    }
    free(mv);
    free(av);
    return BDB_OK;
}

/* ---------------------------------------------------------------- dropping a tenant */

void db_latest_forget_tenant(bdb_db *db, const tenant *t)
{
    struct db_latest *L = lt_of(db);
    for (uint32_t s = 0; s < DB_STRIPES; s++) {
        pthread_mutex_lock(&db->stripes[s]);
        lt_table *tb = &L->tables[s];
        /* table_del places later entries of the probe run again, possibly into slots
         * this pass already looked at: passes repeat until one removes nothing. */
        for (int removed = 1; removed;) {
            removed = 0;
            for (uint32_t i = 0; i < tb->cap; i++) {
                lt_dev *e = tb->slot[i];
                if (!e || e->dev->tenant != t)
                    continue;
                table_del(tb, e);
                *dev_entry(L, e->dev) = NULL;
                int64_t bytes = (int64_t)(sizeof *e + (size_t)e->cap * sizeof *e->m +
                                          (size_t)e->acap * sizeof *e->a);
                for (uint32_t k = 0; k < e->na; k++) {
                    bytes += (int64_t)attr_bytes(&e->a[k]);
                    free(e->a[k].s);
                }
                lt_account(L, -bytes);
                free(e->a);
                free(e->m);
                free(e);
                removed = 1;
            }
        }
        pthread_mutex_unlock(&db->stripes[s]);
    }
    /* Every entry of the tenant is gone, so its state sets only point at freed ones. */
    pthread_mutex_lock(&L->mu);
    lt_tenant *lt = bdb_map_del(L->tenants, t->name, strlen(t->name));
    pthread_mutex_unlock(&L->mu);
    if (!lt)
        return;
    size_t sp = 0, kl;
    const void *key;
    void *sv;
    while (bdb_map_next(lt->states, &sp, &key, &kl, &sv)) {
        lt_state *st = sv;
        lt_account(L, -(int64_t)(sizeof *st + st->nlen + 1 + 32));
        free(st->name);
        free(st);
    }
    bdb_map_free(lt->states);
    pthread_mutex_destroy(&lt->mu);
    lt_account(L, -(int64_t)(sizeof *lt + strlen(t->name) + 64));
    free(lt);
}

/* ---------------------------------------------------------------- consumer */

static int lt_reserve(bdb_db *db, device *d, const bdb_report *r, series *const *ser, void *resv,
                      void *batch)
{
    (void)batch;
    return db_latest_reserve(db, d, r->state, r->state_len, ser, r->nmetrics, r->attrs, r->nattrs,
                             resv);
}

static int lt_apply(bdb_db *db, device *d, const db_apply *a, void *resv)
{
    return db_latest_apply(db, d, resv, a->ts, a->state, a->slen, a->ser, a->vals, a->nm, a->attrs,
                           a->na);
}

static void lt_release(bdb_db *db, device *d, void *resv)
{
    (void)d;
    db_latest_release(db, resv);
}

const db_consumer db_latest_consumer = {
    .name = "latest",
    .resv_size = sizeof(db_latest_resv),
    .dev_size = sizeof(lt_dev *),
    .open = db_latest_open,
    .reserve = lt_reserve,
    .apply = lt_apply,
    .release = lt_release,
    .commit = db_latest_save,
    .forget_tenant = db_latest_forget_tenant,
    .close = db_latest_free,
};
