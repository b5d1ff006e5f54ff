/* db_usage: what a tenant uses, for quotas, and the partition-size statistics of
 * /metrics.
 *
 * Devices are read from the catalog maps under cat_lock shared (nothing else is taken
 * meanwhile).
 *
 * Storage is kept by a tracker per open db, in db->usage: bdb_db_usage_start creates
 * it and db_blocks_close (the block list going away with the db) drops it through
 * bdb_db_usage_release. Per tenant the tracker holds
 *   block_bytes   every block file's bytes split among the tenants in it in proportion
 *                 to their chunk bytes, so header, index and footer are apportioned too;
 *   head_samples  samples of the tenant in the in-memory head at the last measurement;
 *   since         samples written since then (bdb_db_usage_note, by the writers);
 * and storage = block_bytes + BDB_USAGE_SAMPLE_BYTES x (head_samples + since).
 *
 * A measurement holds flush_mutex, so no flush, compaction or retention moves data
 * between the head and the blocks while it looks at both; writers keep writing. The
 * tracker's thread measures when the set of block files changes (a fingerprint of
 * their sequence numbers, looked at every second) and at least every
 * USAGE_HEAD_EVERY_MS for the head; the write path only reads and adds.
 *
 * Partition sizes come from the same measurement: every block lists its partitions in
 * (tenant, device, bucket start) order, so a heap over the blocks meets the pieces of
 * one partition (one per window it spans) one after the other and sums them without a
 * map. Memory is O(blocks) plus a bounded quantile sketch and a bounded set of the
 * partitions already warned about, whatever the number of partitions. */
#include "storage/embedded/core/db_int.h"
#include "storage/embedded/sink/db_sink_usage.h" /* sink: confirmed bytes */
#include "common/alloc.h"

#include "agg/sketch.h"
#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int bdb_db_tenant_usage(bdb_db *db, const char *tenant_name, const bdb_batch *b, uint64_t *devices,
                        uint64_t *new_devices)
{
    if (!tenant_name || !*tenant_name)
        return BDB_ERR_INVALID;
    size_t n = 0;
    const bdb_report *r = b ? bdb_batch_reports(b, &n) : NULL;
    bdb_map *fresh = n ? bdb_map_new() : NULL; /* distinct devices not in the catalog */
    if (n && !fresh)
        return BDB_ERR_NOMEM;
    pthread_rwlock_rdlock(&db->cat_lock);
    tenant *t = cat_tenant(db, tenant_name, strlen(tenant_name), 0);
    *devices = t ? bdb_map_count(t->devices) : 0;
    for (size_t i = 0; i < n; i++) {
        if (t && cat_device(db, t, r[i].device, r[i].device_len, 0))
            continue;
        if (!bdb_map_get(fresh, r[i].device, r[i].device_len))
            bdb_map_put(fresh, r[i].device, r[i].device_len, (void *)&r[i]);
    }
    pthread_rwlock_unlock(&db->cat_lock);
    *new_devices = fresh ? bdb_map_count(fresh) : 0;
    if (fresh)
        bdb_map_free(fresh);
    return BDB_OK;
}

uint64_t bdb_db_head_bytes(bdb_db *db)
{
    return atomic_load(&db->head_bytes);
}

/* ------------------------------------------------------------------ the tracker */

#define USAGE_TICK_MS 1000
#define USAGE_HEAD_EVERY_MS 10000
/* Partitions remembered as warned about; past it one more line says warnings stop. */
#define USAGE_WARNED_MAX 65536

const uint64_t bdb_psize_bounds[BDB_PSIZE_NB] = {
    UINT64_C(65536),     UINT64_C(262144),     UINT64_C(1048576),
    UINT64_C(4194304),   UINT64_C(16777216),   UINT64_C(67108864),
    UINT64_C(268435456), UINT64_C(1073741824), UINT64_C(4294967296)};

struct tusage {
    uint64_t block_bytes, head_samples; /* last measurement */
    _Atomic uint64_t since;             /* samples noted since it */
};

typedef struct usage {
    bdb_db *db;
    _Atomic uint64_t warn_bytes;
    atomic_int warn_set; /* 0 until bdb_db_usage_start gave options: no warnings yet */
    atomic_int reopts;   /* options changed: the next tick looks at the blocks again */
    /* the thread */
    pthread_t th;
    int th_running, stopping;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* what readers see, under lock */
    pthread_rwlock_t lock;
    bdb_map *tenants; /* name -> struct tusage; entries live as long as the tracker */
    bdb_partition_summary sum;
    /* one measurement at a time: the fields below belong to it */
    pthread_mutex_t measure_mu;
    uint64_t fingerprint;
    int have_fp;
    int64_t last_ms;  /* monotonic time of the last measurement */
    uint64_t *warned; /* sorted hashes of the partitions warned about */
    size_t nwarned, cap_warned;
    int warned_full;
} usage;

/* db->usage is atomic so the write path reads it without a lock. */
static usage *find(bdb_db *db)
{
    return atomic_load(&db->usage);
}

/* Identifies the set of block files: every flush, compaction, retention drop or
 * regrouping publishes or removes files, and a new file has a new sequence number.
 * Caller holds blocks_lock (or flush_mutex). */
static uint64_t fingerprint(bdb_db *db)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325) ^ db->nblocks;
    for (size_t i = 0; i < db->nblocks; i++) {
        h ^= bdb_block_get_meta(db->blocks[i].b)->seq;
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

/* Adds v to the uint64 counter of key in m (values malloc'd, freed by map_free_vals).
 * BDB_OK, or BDB_ERR_NOMEM with m unchanged. */
static int map_add(bdb_map *m, const char *key, size_t klen, uint64_t v)
{
    uint64_t *p = bdb_map_get(m, key, klen);
    if (!p) {
        p = bdb_calloc(1, sizeof *p);
        if (!p || bdb_map_set(m, key, klen, p) != BDB_OK) {
            free(p);
            return BDB_ERR_NOMEM;
        }
    }
    *p += v;
    return BDB_OK;
}

static void map_free_vals(bdb_map *m)
{
    if (!m)
        return;
    size_t pos = 0, kl;
    const void *k;
    void *v;
    while (bdb_map_next(m, &pos, &k, &kl, &v))
        free(v);
    bdb_map_free(m);
}

struct tshare {
    const char *t;
    size_t tlen;
    uint64_t bytes;
};

/* Per tenant the bytes of the block files it has data in (see the top). NULL when
 * memory runs out. */
static bdb_map *block_bytes(bdb_db *db)
{
    bdb_map *out = bdb_map_new();
    if (!out)
        return NULL;
    struct tshare *v = NULL;
    size_t cap = 0;
    int rc = BDB_OK;
    for (size_t i = 0; i < db->nblocks && rc == BDB_OK; i++) {
        const bdb_block *b = db->blocks[i].b;
        bdb_block_part_iter it;
        bdb_partition_stat st;
        bdb_block_part_iter_init(b, &it);
        size_t n = 0;
        uint64_t total = 0;
        int r;
        while ((r = bdb_block_partition_next(&it, &st)) == 1) {
            /* partitions come in tenant order: one entry per tenant run */
            if (n == 0 || v[n - 1].tlen != st.key.tenant_len ||
                memcmp(v[n - 1].t, st.key.tenant, st.key.tenant_len) != 0) {
                if (n == cap) {
                    struct tshare *p = bdb_realloc(v, (cap ? cap * 2 : 16) * sizeof *p);
                    if (!p) {
                        rc = BDB_ERR_NOMEM;
                        break;
                    }
                    v = p;
                    cap = cap ? cap * 2 : 16;
                }
                v[n++] = (struct tshare){st.key.tenant, st.key.tenant_len, 0};
            }
            v[n - 1].bytes += st.bytes;
            total += st.bytes;
        }
        if (r < 0)
            BDB_WARN("storage usage: block %s: partition index unreadable (%s); its bytes are "
                     "not counted",
                     db->blocks[i].path, bdb_strerror(r));
        if (rc != BDB_OK || r < 0 || total == 0)
            continue;
        uint64_t file = bdb_block_get_meta(b)->file_bytes, given = 0;
        for (size_t k = 0; k < n; k++) {
            uint64_t share = k + 1 == n ? file - given
                                        : (uint64_t)((unsigned __int128)file * v[k].bytes / total);
            given += share;
            if (rc == BDB_OK)
                rc = map_add(out, v[k].t, v[k].tlen, share);
        }
    }
    free(v);
    if (rc != BDB_OK) {
        map_free_vals(out);
        return NULL;
    }
    return out;
}

/* Per tenant the samples in the head (active chunks, and frozen ones a failed flush
 * left). Caller holds flush_mutex; takes cat_lock shared and each device's stripe.
 * NULL when memory runs out. */
static bdb_map *head_samples(bdb_db *db)
{
    bdb_map *out = bdb_map_new();
    if (!out)
        return NULL;
    int rc = BDB_OK;
    pthread_rwlock_rdlock(&db->cat_lock);
    size_t tp = 0, kl;
    const void *key;
    void *tv;
    while (rc == BDB_OK && bdb_map_next(db->tenants, &tp, &key, &kl, &tv)) {
        tenant *t = tv;
        uint64_t n = 0;
        size_t dp = 0;
        void *dv;
        while (bdb_map_next(t->devices, &dp, &key, &kl, &dv)) {
            device *d = dv;
            pthread_mutex_lock(dev_lock(db, d));
            for (uint32_t i = 0; i < d->nseries; i++) {
                for (const hchunk *c = d->series[i]->active; c; c = c->next)
                    n += (uint64_t)c->st.count + hc_nooo(c);
                for (const hchunk *c = d->series[i]->frozen; c; c = c->next)
                    n += (uint64_t)c->st.count + hc_nooo(c);
            }
            pthread_mutex_unlock(dev_lock(db, d));
        }
        if (n)
            rc = map_add(out, t->name, strlen(t->name), n);
    }
    pthread_rwlock_unlock(&db->cat_lock);
    if (rc != BDB_OK) {
        map_free_vals(out);
        return NULL;
    }
    return out;
}

/* ---- partition sizes ---- */

struct pcur {
    bdb_block_part_iter it;
    bdb_partition_stat st;
};

static int pcur_cmp(const bdb_partition_stat *a, const bdb_partition_stat *b)
{
    int c = bdb_series_key_cmp(&a->key, &b->key);
    if (c)
        return c;
    return (a->bucket_start > b->bucket_start) - (a->bucket_start < b->bucket_start);
}

static void heap_down(struct pcur *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < n && pcur_cmp(&h[l].st, &h[m].st) < 0)
            m = l;
        if (l + 1 < n && pcur_cmp(&h[l + 1].st, &h[m].st) < 0)
            m = l + 1;
        if (m == i)
            return;
        struct pcur t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static uint64_t part_hash(bdb_buf *tmp, const bdb_partition_stat *p)
{
    bdb_buf_reset(tmp);
    bdb_buf_append(tmp, p->key.tenant, p->key.tenant_len);
    bdb_buf_putc(tmp, 0);
    bdb_buf_append(tmp, p->key.device, p->key.device_len);
    bdb_buf_putc(tmp, 0);
    bdb_buf_put_u64le(tmp, (uint64_t)p->bucket_start);
    return bdb_hash(tmp->data, tmp->len);
}

/* Logs a partition over the warning size, once per partition while the tracker lives
 * (the server's run). Returns 1 when it logged. */
static int warn_once(usage *u, bdb_buf *tmp, const bdb_partition_stat *p, uint64_t bytes,
                     uint64_t limit)
{
    uint64_t h = part_hash(tmp, p);
    size_t lo = 0, hi = u->nwarned;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (u->warned[mid] < h)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < u->nwarned && u->warned[lo] == h)
        return 0;
    if (u->nwarned == USAGE_WARNED_MAX) {
        if (!u->warned_full)
            BDB_WARN("large partitions: %d already reported; further ones are counted in "
                     "bucketdb_large_partitions but not logged",
                     USAGE_WARNED_MAX);
        u->warned_full = 1;
        return 0;
    }
    if (tmp->oom)
        return 0; /* no key to remember it by: warned at a later measurement */
    if (u->nwarned == u->cap_warned) {
        size_t cap = u->cap_warned ? u->cap_warned * 2 : 64;
        uint64_t *nv = bdb_realloc(u->warned, cap * sizeof *nv);
        if (!nv)
            return 0; /* the same: the warning waits for a later measurement */
        u->warned = nv;
        u->cap_warned = cap;
    }
    memmove(u->warned + lo + 1, u->warned + lo, (u->nwarned - lo) * sizeof *u->warned);
    u->warned[lo] = h;
    u->nwarned++;
    char when[40];
    bdb_format_time_ms(p->bucket_start, when, sizeof when);
    BDB_WARN("large partition: tenant '%.*s' device '%.*s' partition starting %s holds %llu "
             "bytes in block files, over partition_warn_bytes %llu (target 10-100 MB); a "
             "smaller bucket for this device splits its future partitions (PUT "
             "/api/v1/devices/<id>/profile?bucket=...)",
             (int)p->key.tenant_len, p->key.tenant, (int)p->key.device_len, p->key.device, when,
             (unsigned long long)bytes, (unsigned long long)limit);
    return 1;
}

/* Whole-partition sizes over every block: histogram, quantiles, the large ones.
 * BDB_OK, or BDB_ERR_NOMEM (out is then not to be published). */
static int partitions(usage *u, bdb_db *db, bdb_partition_summary *out)
{
    uint64_t limit = atomic_load(&u->warn_bytes);
    int warn = atomic_load(&u->warn_set) && limit > 0;
    struct pcur *h = bdb_calloc(db->nblocks + 1, sizeof *h);
    if (!h)
        return BDB_ERR_NOMEM;
    int rc = BDB_OK;
    size_t n = 0;
    for (size_t i = 0; i < db->nblocks; i++) {
        bdb_block_part_iter_init(db->blocks[i].b, &h[n].it);
        if (bdb_block_partition_next(&h[n].it, &h[n].st) == 1)
            n++;
    }
    for (size_t i = n / 2; i-- > 0;)
        heap_down(h, n, i);
    bdb_sketch sk;
    bdb_sketch_init_default(&sk);
    bdb_buf tmp;
    bdb_buf_init_checked(&tmp);
    while (n > 0) {
        bdb_partition_stat cur = h[0].st;
        uint64_t bytes = 0;
        while (n > 0 && pcur_cmp(&h[0].st, &cur) == 0) {
            bytes += h[0].st.bytes;
            /* a block whose index stops decoding just ends here (logged by the
             * storage pass) */
            if (bdb_block_partition_next(&h[0].it, &h[0].st) != 1)
                h[0] = h[--n];
            heap_down(h, n, 0);
        }
        int i = 0;
        while (i < BDB_PSIZE_NB && bytes > bdb_psize_bounds[i])
            i++;
        out->buckets[i]++;
        out->count++;
        out->sum += bytes;
        if (bytes > out->max)
            out->max = bytes;
        if (bdb_sketch_add(&sk, (double)bytes) == BDB_ERR_NOMEM)
            rc = BDB_ERR_NOMEM; /* the quantiles would be off: not published */
        if (limit > 0 && bytes > limit) {
            out->large++;
            if (warn)
                warn_once(u, &tmp, &cur, bytes, limit);
        }
    }
    if (out->count) {
        out->p50 = (uint64_t)llround(bdb_sketch_quantile(&sk, 0.50));
        out->p95 = (uint64_t)llround(bdb_sketch_quantile(&sk, 0.95));
        out->p99 = (uint64_t)llround(bdb_sketch_quantile(&sk, 0.99));
    }
    out->warn_bytes = limit;
    bdb_sketch_free(&sk);
    bdb_buf_free(&tmp);
    free(h);
    return rc;
}

/* NULL when memory runs out (u->tenants unchanged). */
static struct tusage *tusage_get(usage *u, const char *name, size_t len)
{
    struct tusage *t = bdb_map_get(u->tenants, name, len);
    if (!t) {
        t = bdb_calloc(1, sizeof *t);
        if (!t || bdb_map_set(u->tenants, name, len, t) != BDB_OK) {
            free(t);
            return NULL;
        }
    }
    return t;
}

/* One measurement (see the top). force: look at the blocks even if unchanged.
 * Out of memory, the round is skipped and logged (BDB_ERR_NOMEM): the figures are
 * background bookkeeping, the previous ones stay published and the tracker's next
 * tick measures again, so failing anything else for them would be worse. */
static int measure(usage *u, int force)
{
    bdb_db *db = u->db;
    pthread_mutex_lock(&u->measure_mu);
    int64_t t0 = bdb_monotonic_ms();
    pthread_mutex_lock(&db->flush_mutex);
    pthread_rwlock_rdlock(&db->blocks_lock);
    uint64_t fp = fingerprint(db);
    int blocks = force || !u->have_fp || fp != u->fingerprint;
    bdb_map *bb = NULL;
    bdb_partition_summary ps;
    memset(&ps, 0, sizeof ps);
    int oom = 0;
    if (blocks) {
        bb = block_bytes(db);
        oom = !bb || partitions(u, db, &ps) != BDB_OK;
    }
    pthread_rwlock_unlock(&db->blocks_lock);
    /* What the writers noted so far is in the head walk below (or in a flush's blocks,
     * which cannot happen while flush_mutex is held): it is taken off `since` at
     * publication. A write noted between here and the walk counts twice until the
     * next measurement: the error is on the high side, by the writes in flight. */
    bdb_map *marks = oom ? NULL : bdb_map_new();
    oom |= !marks;
    size_t pos = 0, kl;
    const void *k;
    void *v;
    pthread_rwlock_rdlock(&u->lock);
    while (!oom && bdb_map_next(u->tenants, &pos, &k, &kl, &v))
        oom = map_add(marks, k, kl, atomic_load(&((struct tusage *)v)->since)) != BDB_OK;
    pthread_rwlock_unlock(&u->lock);
    bdb_map *hs = oom ? NULL : head_samples(db);
    oom |= !hs;
    pthread_mutex_unlock(&db->flush_mutex);

    pthread_rwlock_wrlock(&u->lock);
    /* every tenant's entry before anything changes, so publishing cannot stop half way
     * (an entry made for nothing holds zeros, as a tenant without data would) */
    pos = 0;
    while (!oom && bb && bdb_map_next(bb, &pos, &k, &kl, &v))
        oom = !tusage_get(u, k, kl);
    pos = 0;
    while (!oom && bdb_map_next(hs, &pos, &k, &kl, &v))
        oom = !tusage_get(u, k, kl);
    if (oom) {
        pthread_rwlock_unlock(&u->lock);
        pthread_mutex_unlock(&u->measure_mu);
        BDB_WARN("storage usage: out of memory; this measurement is skipped (the previous "
                 "figures stay)");
        map_free_vals(bb);
        map_free_vals(marks);
        map_free_vals(hs);
        return BDB_ERR_NOMEM;
    }
    pos = 0;
    while (bdb_map_next(u->tenants, &pos, &k, &kl, &v)) {
        struct tusage *t = v;
        if (bb)
            t->block_bytes = 0;
        t->head_samples = 0;
        uint64_t *m = bdb_map_get(marks, k, kl);
        if (m)
            atomic_fetch_sub(&t->since, *m);
    }
    pos = 0;
    while (bb && bdb_map_next(bb, &pos, &k, &kl, &v))
        tusage_get(u, k, kl)->block_bytes = *(uint64_t *)v;
    pos = 0;
    while (bdb_map_next(hs, &pos, &k, &kl, &v))
        tusage_get(u, k, kl)->head_samples = *(uint64_t *)v;
    int64_t now = bdb_monotonic_ms();
    if (blocks) {
        ps.scans = u->sum.scans;
        u->sum = ps;
    }
    u->sum.measured = 1;
    u->sum.scans++;
    u->sum.measured_ms = now;
    u->sum.scan_ms = (uint64_t)(now - t0);
    pthread_rwlock_unlock(&u->lock);
    u->fingerprint = fp;
    u->have_fp = 1;
    u->last_ms = now;
    pthread_mutex_unlock(&u->measure_mu);
    map_free_vals(bb);
    map_free_vals(marks);
    map_free_vals(hs);
    return BDB_OK;
}

static void *usage_main(void *arg)
{
    usage *u = arg;
    pthread_mutex_lock(&u->mu);
    while (!u->stopping) {
        pthread_mutex_unlock(&u->mu);
        /* Cheap check first: the fingerprint needs blocks_lock shared only. */
        pthread_rwlock_rdlock(&u->db->blocks_lock);
        uint64_t fp = fingerprint(u->db);
        pthread_rwlock_unlock(&u->db->blocks_lock);
        pthread_mutex_lock(&u->measure_mu);
        int force = atomic_exchange(&u->reopts, 0);
        int due = force || !u->have_fp || fp != u->fingerprint ||
                  bdb_monotonic_ms() - u->last_ms >= USAGE_HEAD_EVERY_MS;
        pthread_mutex_unlock(&u->measure_mu);
        if (due && measure(u, force) != BDB_OK && force)
            atomic_store(&u->reopts, 1); /* the new options still want a full look */
        pthread_mutex_lock(&u->mu);
        if (u->stopping)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += USAGE_TICK_MS / 1000;
        pthread_cond_timedwait(&u->cv, &u->mu, &ts);
    }
    pthread_mutex_unlock(&u->mu);
    return NULL;
}

void bdb_db_usage_start(bdb_db *db, const bdb_usage_opts *o)
{
    usage *u = find(db);
    if (!u) {
        pthread_mutex_lock(&db->ext_mu);
        u = atomic_load(&db->usage);
        if (!u) {
            u = bdb_calloc(1, sizeof *u);
            if (!u)
                abort();
            u->db = db;
            u->tenants = bdb_map_new();
            if (!u->tenants)
                abort();
            atomic_store(&u->warn_bytes, BDB_PARTITION_WARN_BYTES);
            pthread_mutex_init(&u->measure_mu, NULL);
            pthread_rwlock_init(&u->lock, NULL);
            pthread_mutex_init(&u->mu, NULL);
            pthread_condattr_t ca;
            pthread_condattr_init(&ca);
            pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
            pthread_cond_init(&u->cv, &ca);
            pthread_condattr_destroy(&ca);
            if (o) {
                atomic_store(&u->warn_bytes, o->partition_warn_bytes);
                atomic_store(&u->warn_set, 1);
            }
            if (!o || !o->manual)
                u->th_running = pthread_create(&u->th, NULL, usage_main, u) == 0;
            atomic_store(&db->usage, u);
        }
        pthread_mutex_unlock(&db->ext_mu);
    }
    if (o &&
        (!atomic_load(&u->warn_set) || atomic_load(&u->warn_bytes) != o->partition_warn_bytes)) {
        atomic_store(&u->warn_bytes, o->partition_warn_bytes);
        atomic_store(&u->warn_set, 1);
        atomic_store(&u->reopts, 1);
    }
}

int bdb_db_usage_refresh(bdb_db *db)
{
    usage *u = find(db);
    if (!u)
        return BDB_ERR_NOTFOUND;
    return measure(u, 1);
}

void bdb_db_usage_note(bdb_db *db, const char *tenant_name, uint64_t samples)
{
    usage *u = find(db);
    if (!u || !tenant_name || !samples)
        return;
    size_t len = strlen(tenant_name);
    pthread_rwlock_rdlock(&u->lock);
    struct tusage *t = bdb_map_get(u->tenants, tenant_name, len);
    if (t)
        atomic_fetch_add(&t->since, samples);
    pthread_rwlock_unlock(&u->lock);
    if (t)
        return;
    pthread_rwlock_wrlock(&u->lock);
    t = tusage_get(u, tenant_name, len);
    if (t) /* else out of memory: the next measurement's head walk counts them */
        atomic_fetch_add(&t->since, samples);
    pthread_rwlock_unlock(&u->lock);
}

int bdb_db_tenant_storage(bdb_db *db, const char *tenant_name, bdb_storage_usage *out)
{
    memset(out, 0, sizeof *out);
    usage *u = find(db);
    if (!u || !tenant_name)
        return BDB_ERR_NOTFOUND;
    pthread_rwlock_rdlock(&u->lock);
    out->measured = u->sum.measured;
    struct tusage *t = bdb_map_get(u->tenants, tenant_name, strlen(tenant_name));
    if (t) {
        out->block_bytes = t->block_bytes;
        out->unflushed_samples = t->head_samples + atomic_load(&t->since);
    }
    pthread_rwlock_unlock(&u->lock);
    out->unflushed_bytes = out->unflushed_samples * BDB_USAGE_SAMPLE_BYTES;
    out->sink_bytes = db_sku_tenant_bytes(db, tenant_name); /* 0 without a sink */
    out->bytes = out->block_bytes + out->sink_bytes + out->unflushed_bytes;
    return BDB_OK;
}

int bdb_db_partition_summary(bdb_db *db, bdb_partition_summary *out)
{
    memset(out, 0, sizeof *out);
    usage *u = find(db);
    if (!u)
        return BDB_ERR_NOTFOUND;
    pthread_rwlock_rdlock(&u->lock);
    *out = u->sum;
    pthread_rwlock_unlock(&u->lock);
    return BDB_OK;
}

void bdb_db_usage_release(bdb_db *db)
{
    usage *u = atomic_exchange(&db->usage, NULL);
    if (!u)
        return;
    if (u->th_running) {
        pthread_mutex_lock(&u->mu);
        u->stopping = 1;
        pthread_cond_signal(&u->cv);
        pthread_mutex_unlock(&u->mu);
        pthread_join(u->th, NULL);
    }
    size_t pos = 0, kl;
    const void *k;
    void *v;
    while (bdb_map_next(u->tenants, &pos, &k, &kl, &v))
        free(v);
    bdb_map_free(u->tenants);
    free(u->warned);
    pthread_mutex_destroy(&u->measure_mu);
    pthread_rwlock_destroy(&u->lock);
    pthread_mutex_destroy(&u->mu);
    pthread_cond_destroy(&u->cv);
    free(u);
}
