/* hotpart: per-minute report counts per device, hot episodes and the mitigation
 * decision (hotpart.h). */
#include "server/admission/hotpart.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/map.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_CAP 64
#define SAMPLE_SCALE 1000000 /* sample fractions are exact to 6 decimals */

/* A device seen in the last two minutes. key 0 marks an empty slot. */
struct slot {
    uint64_t key;
    int32_t minute; /* of count */
    uint32_t count; /* reports offered in that minute */
    uint32_t prev;  /* in the minute before it */
    uint32_t ep;    /* episode index + 1, 0 = not hot */
};

struct episode {
    uint64_t key;
    char *tenant, *device;
    int64_t since, last_ts;
    uint32_t peak;
    int32_t kept_minute; /* ratelimit: kept_min counts this minute */
    uint64_t kept_min;
    uint64_t seen; /* sample: reports seen during the episode */
    uint64_t kept, rejected, sampled_out;
    uint32_t scratch; /* reports in the batch being decided */
    int over;         /* scratch: refused in the batch being decided */
    bdb_hot_policy pol;
};

struct tstat {
    uint64_t hot_now, episodes, rejected, sampled_out;
};

struct bdb_hotpart {
    bdb_hotpart_opts o;
    pthread_mutex_t mu;
    struct slot *slots;
    size_t cap, n;
    struct episode **eps;
    size_t neps, cap_eps;
    bdb_map *tstats; /* tenant name -> struct tstat */
    int32_t minute;  /* of the last sweep */
};

/* An episode that started or ended in a call, reported after the mutex is released. */
struct note {
    char *tenant, *device;
    int hot;
    bdb_hot_policy pol;
};
struct notes {
    struct note *v;
    size_t n, cap;
};

static void *xalloc(size_t n)
{
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        fprintf(stderr, "bucketdb: out of memory (%zu bytes)\n", n);
        abort();
    }
    return p;
}

static char *xstrndup(const char *s, size_t n)
{
    char *p = xalloc(n + 1);
    memcpy(p, s, n);
    return p;
}

const char *bdb_hot_kind_name(int kind)
{
    switch (kind) {
    case BDB_HOT_SUBBUCKET:
        return "subbucket";
    case BDB_HOT_RATELIMIT:
        return "ratelimit";
    case BDB_HOT_SAMPLE:
        return "sample";
    default:
        return "none";
    }
}

int bdb_hot_kind_parse(const char *s)
{
    static const int kinds[] = {BDB_HOT_NONE, BDB_HOT_SUBBUCKET, BDB_HOT_RATELIMIT, BDB_HOT_SAMPLE};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(s, bdb_hot_kind_name(kinds[i])))
            return kinds[i];
    return -1;
}

int bdb_hot_policy_check(const bdb_hot_policy *p, char *err, size_t errlen)
{
    if (p->kind < BDB_HOT_NONE || p->kind > BDB_HOT_SAMPLE) {
        snprintf(err, errlen, "hot_policy: use none, subbucket, ratelimit or sample");
        return -1;
    }
    if (p->threshold > UINT32_MAX) {
        snprintf(err, errlen, "hot_threshold: at most %u reports per minute", UINT32_MAX);
        return -1;
    }
    if (p->subbuckets < 2 || p->subbuckets > 64) {
        snprintf(err, errlen, "hot_subbuckets: must be 2..64, got %u", p->subbuckets);
        return -1;
    }
    if (p->max_per_minute < 1) {
        snprintf(err, errlen, "hot_rate_limit: must be at least 1 report per minute");
        return -1;
    }
    if (!(p->sample > 0.0 && p->sample <= 1.0) || (uint64_t)(p->sample * SAMPLE_SCALE) == 0) {
        snprintf(err, errlen, "hot_sample: must be a fraction in (0, 1], at least 0.000001");
        return -1;
    }
    return 0;
}

bdb_hotpart *bdb_hotpart_new(const bdb_hotpart_opts *o)
{
    bdb_hotpart *h = xalloc(sizeof *h);
    if (o)
        h->o = *o;
    pthread_mutex_init(&h->mu, NULL);
    h->cap = MIN_CAP;
    h->slots = xalloc(h->cap * sizeof *h->slots);
    h->tstats = bdb_map_new();
    h->minute = INT32_MIN;
    return h;
}

static void ep_free(struct episode *e)
{
    free(e->tenant);
    free(e->device);
    free(e);
}

void bdb_hotpart_free(bdb_hotpart *h)
{
    if (!h)
        return;
    for (size_t i = 0; i < h->neps; i++)
        ep_free(h->eps[i]);
    free(h->eps);
    free(h->slots);
    size_t pos = 0, kl;
    const void *k;
    void *v;
    while (bdb_map_next(h->tstats, &pos, &k, &kl, &v))
        free(v);
    bdb_map_free(h->tstats);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

/* ---------------------------------------------------------------- table */

static int32_t minute_of(int64_t ms)
{
    int64_t m = bdb_floor_div(ms, 60000);
    return m < INT32_MIN ? INT32_MIN + 1 : m > INT32_MAX ? INT32_MAX : (int32_t)m;
}

static uint64_t dev_key(uint64_t th, const char *dev, size_t dl)
{
    uint64_t k = bdb_hash(dev, dl) ^ (th * UINT64_C(0x9E3779B97F4A7C15));
    return k ? k : 1;
}

static size_t probe(const struct slot *s, size_t cap, uint64_t key)
{
    size_t i = (size_t)(key ^ (key >> 29)) & (cap - 1);
    while (s[i].key && s[i].key != key)
        i = (i + 1) & (cap - 1);
    return i;
}

static void rehash(bdb_hotpart *h, size_t cap)
{
    struct slot *ns = xalloc(cap * sizeof *ns);
    for (size_t i = 0; i < h->cap; i++)
        if (h->slots[i].key)
            ns[probe(ns, cap, h->slots[i].key)] = h->slots[i];
    free(h->slots);
    h->slots = ns;
    h->cap = cap;
}

static struct slot *find_or_add(bdb_hotpart *h, uint64_t key, int32_t minute)
{
    size_t i = probe(h->slots, h->cap, key);
    if (h->slots[i].key)
        return &h->slots[i];
    if ((h->n + 1) * 4 > h->cap * 3) {
        rehash(h, h->cap * 2);
        i = probe(h->slots, h->cap, key);
    }
    h->slots[i] = (struct slot){key, minute, 0, 0, 0};
    h->n++;
    return &h->slots[i];
}

static struct slot *find(bdb_hotpart *h, uint64_t key)
{
    size_t i = probe(h->slots, h->cap, key);
    return h->slots[i].key ? &h->slots[i] : NULL;
}

static void roll(struct slot *s, int32_t cur)
{
    if (s->minute == cur)
        return;
    s->prev = s->minute == cur - 1 ? s->count : 0;
    s->count = 0;
    s->minute = cur;
}

static struct tstat *tstat_of(bdb_hotpart *h, const char *tenant)
{
    struct tstat *t = bdb_map_get(h->tstats, tenant, strlen(tenant));
    if (!t) {
        t = xalloc(sizeof *t);
        bdb_map_put(h->tstats, tenant, strlen(tenant), t);
    }
    return t;
}

static void note_add(struct notes *ns, const struct episode *e, int hot)
{
    if (ns->n == ns->cap) {
        ns->cap = ns->cap ? ns->cap * 2 : 4;
        struct note *v = realloc(ns->v, ns->cap * sizeof *v);
        if (!v)
            abort();
        ns->v = v;
    }
    ns->v[ns->n++] = (struct note){strdup(e->tenant), strdup(e->device), hot, e->pol};
}

/* Calls the episode callback for every note, outside the mutex, and frees them. */
static void notes_flush(bdb_hotpart *h, struct notes *ns)
{
    for (size_t i = 0; i < ns->n; i++) {
        if (h->o.episode)
            h->o.episode(h->o.episode_ctx, ns->v[i].tenant, ns->v[i].device, ns->v[i].hot,
                         &ns->v[i].pol);
        free(ns->v[i].tenant);
        free(ns->v[i].device);
    }
    free(ns->v);
}

static void end_episode(bdb_hotpart *h, struct slot *s, int64_t now, struct notes *ns)
{
    size_t idx = s->ep - 1;
    struct episode *e = h->eps[idx];
    BDB_INFO("hot partition ended: tenant %s device %s after %lld s (peak %u reports/min; "
             "policy %s: %llu kept, %llu rejected, %llu sampled out)",
             e->tenant, e->device, (long long)((now - e->since) / 1000), e->peak,
             bdb_hot_kind_name(e->pol.kind), (unsigned long long)e->kept,
             (unsigned long long)e->rejected, (unsigned long long)e->sampled_out);
    struct tstat *t = tstat_of(h, e->tenant);
    if (t->hot_now)
        t->hot_now--;
    note_add(ns, e, 0);
    s->ep = 0;
    /* Swap-remove, and point the moved episode's slot at its new index. */
    h->eps[idx] = h->eps[--h->neps];
    if (idx < h->neps) {
        struct slot *ms = find(h, h->eps[idx]->key);
        if (ms)
            ms->ep = (uint32_t)idx + 1;
    }
    ep_free(e);
}

/* On a new minute: rolls every slot, ends the episodes whose last minute closed at
 * or below their threshold, drops the slots idle for two minutes, and shrinks the
 * table to fit. */
static void sweep(bdb_hotpart *h, int32_t cur, int64_t now, struct notes *ns)
{
    if (h->minute == cur)
        return;
    h->minute = cur;
    for (size_t i = 0; i < h->cap; i++) {
        struct slot *s = &h->slots[i];
        if (!s->key)
            continue;
        roll(s, cur);
        if (s->ep && s->prev <= h->eps[s->ep - 1]->pol.threshold)
            end_episode(h, s, now, ns); /* looks slots up: keys must stay intact here */
    }
    size_t live = 0;
    for (size_t i = 0; i < h->cap; i++) {
        struct slot *s = &h->slots[i];
        if (!s->key)
            continue;
        if (!s->ep && s->count == 0 && s->prev == 0)
            s->key = 0; /* the rehash below drops it */
        else
            live++;
    }
    size_t cap = MIN_CAP;
    while (live * 8 > cap * 3)
        cap *= 2;
    h->n = live;
    rehash(h, cap > h->cap ? h->cap : cap);
}

static void tick_locked(bdb_hotpart *h, int64_t now, struct notes *ns)
{
    sweep(h, minute_of(now), now, ns);
}

void bdb_hotpart_tick(bdb_hotpart *h)
{
    struct notes ns = {0};
    pthread_mutex_lock(&h->mu);
    tick_locked(h, bdb_clock_now(&h->o.clock), &ns);
    pthread_mutex_unlock(&h->mu);
    notes_flush(h, &ns);
}

/* ---------------------------------------------------------------- decide */

static struct episode *start_episode(bdb_hotpart *h, struct slot *s, const char *tenant,
                                     const bdb_report *r, const bdb_hot_policy *p, int64_t now,
                                     struct notes *ns)
{
    struct episode *e = xalloc(sizeof *e);
    e->key = s->key;
    e->tenant = strdup(tenant);
    e->device = xstrndup(r->device, r->device_len);
    e->since = now;
    e->last_ts = r->ts_ms;
    e->pol = *p;
    e->kept_minute = INT32_MIN;
    if (h->neps == h->cap_eps) {
        h->cap_eps = h->cap_eps ? h->cap_eps * 2 : 8;
        struct episode **v = realloc(h->eps, h->cap_eps * sizeof *v);
        if (!v)
            abort();
        h->eps = v;
    }
    h->eps[h->neps++] = e;
    s->ep = (uint32_t)h->neps;
    struct tstat *t = tstat_of(h, tenant);
    t->hot_now++;
    t->episodes++;
    BDB_WARN("hot partition detected: tenant %s device %s: %u reports in this minute, above "
             "the threshold of %llu per minute; policy %s",
             tenant, e->device, s->count, (unsigned long long)p->threshold,
             bdb_hot_kind_name(p->kind));
    note_add(ns, e, 1);
    return e;
}

int bdb_hotpart_decide(bdb_hotpart *h, const char *tenant, const bdb_hot_policy *p,
                       const bdb_report *r, size_t n, uint8_t *dec, bdb_hot_verdict *v)
{
    memset(v, 0, sizeof *v);
    uint32_t *idx = n ? xalloc(n * sizeof *idx) : NULL;
    struct notes ns = {0};
    uint64_t th = bdb_hash(tenant, strlen(tenant));
    int64_t now = bdb_clock_now(&h->o.clock);
    int32_t cur = minute_of(now);
    int ok = 1;

    pthread_mutex_lock(&h->mu);
    tick_locked(h, now, &ns);
    /* 1: count every report; start episodes; note each hot device's reports. */
    for (size_t i = 0; i < n; i++) {
        struct slot *s = find_or_add(h, dev_key(th, r[i].device, r[i].device_len), cur);
        roll(s, cur);
        if (s->count < UINT32_MAX)
            s->count++;
        struct episode *e = s->ep ? h->eps[s->ep - 1] : NULL;
        if (!e && p->threshold && s->count > p->threshold)
            e = start_episode(h, s, tenant, &r[i], p, now, &ns);
        if (e) {
            if (s->count > e->peak)
                e->peak = s->count;
            if (r[i].ts_ms > e->last_ts)
                e->last_ts = r[i].ts_ms;
            e->scratch++;
        }
        idx[i] = s->ep;
    }
    /* 2: a rate-limited device with more reports than its minute allows refuses the
     * whole batch, before anything is taken from any allowance. */
    for (size_t i = 0; i < n; i++) {
        struct episode *e = idx[i] ? h->eps[idx[i] - 1] : NULL;
        if (!e || e->pol.kind != BDB_HOT_RATELIMIT)
            continue;
        if (e->kept_minute != cur) {
            e->kept_minute = cur;
            e->kept_min = 0;
        }
        if (e->kept_min + e->scratch > e->pol.max_per_minute) {
            e->over = 1;
            ok = 0;
        }
    }
    /* 3: decide each report. */
    struct tstat *t = NULL;
    for (size_t i = 0; i < n; i++) {
        struct episode *e = idx[i] ? h->eps[idx[i] - 1] : NULL;
        dec[i] = BDB_HOT_KEEP;
        if (!e)
            continue;
        if (!t)
            t = tstat_of(h, tenant);
        if (!ok) {
            if (e->over) {
                dec[i] = BDB_HOT_REJECT;
                e->rejected++;
                t->rejected++;
                if (!v->rejected++) {
                    v->device = r[i].device;
                    v->device_len = r[i].device_len;
                    v->limit = e->pol.max_per_minute;
                    v->retry_after_ms = (int64_t)(cur + 1) * 60000 - now;
                }
            }
            continue;
        }
        if (e->pol.kind == BDB_HOT_RATELIMIT) {
            e->kept_min++;
        } else if (e->pol.kind == BDB_HOT_SAMPLE) {
            uint64_t f = (uint64_t)(e->pol.sample * SAMPLE_SCALE + 0.5);
            e->seen++;
            if ((e->seen * f) / SAMPLE_SCALE == ((e->seen - 1) * f) / SAMPLE_SCALE) {
                dec[i] = BDB_HOT_DROP;
                e->sampled_out++;
                t->sampled_out++;
                v->dropped++;
                continue;
            }
        }
        e->kept++;
    }
    for (size_t i = 0; i < n; i++) {
        if (idx[i]) {
            h->eps[idx[i] - 1]->scratch = 0;
            h->eps[idx[i] - 1]->over = 0;
        }
    }
    pthread_mutex_unlock(&h->mu);
    free(idx);
    notes_flush(h, &ns);
    return ok;
}

int bdb_hotpart_admit_batch(bdb_hotpart *h, const char *tenant, const bdb_hot_policy *p,
                            const bdb_batch *b, bdb_batch **out, bdb_hot_verdict *v)
{
    *out = NULL;
    size_t n;
    const bdb_report *r = bdb_batch_reports(b, &n);
    uint8_t *dec = xalloc(n);
    int ok = bdb_hotpart_decide(h, tenant, p, r, n, dec, v);
    if (ok && v->dropped) {
        bdb_batch *nb = bdb_batch_new();
        for (size_t i = 0; i < n; i++) {
            if (dec[i] != BDB_HOT_KEEP)
                continue;
            bdb_batch_begin(nb, r[i].device, r[i].device_len, r[i].ts_ms, r[i].lineno);
            for (uint32_t k = 0; k < r[i].ntags; k++)
                bdb_batch_tag(nb, r[i].tags[k].key, r[i].tags[k].klen, r[i].tags[k].val,
                              r[i].tags[k].vlen);
            for (uint32_t k = 0; k < r[i].nmetrics; k++)
                bdb_batch_metric(nb, r[i].metrics[k].name, r[i].metrics[k].nlen,
                                 r[i].metrics[k].value);
            if (r[i].state)
                bdb_batch_state(nb, r[i].state, r[i].state_len);
            bdb_batch_end(nb);
        }
        *out = nb;
    }
    free(dec);
    return ok;
}

/* ---------------------------------------------------------------- listing */

static int info_cmp(const void *a, const void *b)
{
    const bdb_hot_info *x = a, *y = b;
    int c = strcmp(x->tenant, y->tenant);
    return c ? c : strcmp(x->device, y->device);
}

int bdb_hotpart_list(bdb_hotpart *h, const char *tenant,
                     int (*cb)(void *ctx, const bdb_hot_info *i), void *ctx)
{
    struct notes ns = {0};
    pthread_mutex_lock(&h->mu);
    tick_locked(h, bdb_clock_now(&h->o.clock), &ns);
    bdb_hot_info *v = xalloc((h->neps ? h->neps : 1) * sizeof *v);
    size_t n = 0;
    for (size_t i = 0; i < h->neps; i++) {
        struct episode *e = h->eps[i];
        if (tenant && strcmp(tenant, e->tenant))
            continue;
        struct slot *s = find(h, e->key);
        v[n++] =
            (bdb_hot_info){strdup(e->tenant), strdup(e->device), e->since,      s ? s->count : 0,
                           s ? s->prev : 0,   e->peak,           e->last_ts,    e->pol,
                           e->kept,           e->rejected,       e->sampled_out};
    }
    pthread_mutex_unlock(&h->mu);
    notes_flush(h, &ns);
    if (n > 1)
        qsort(v, n, sizeof *v, info_cmp);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (!rc)
            rc = cb(ctx, &v[i]);
        free((char *)v[i].tenant);
        free((char *)v[i].device);
    }
    free(v);
    return rc;
}

struct tst_copy {
    char *name;
    struct tstat t;
};

static int tst_cmp(const void *a, const void *b)
{
    return strcmp(((const struct tst_copy *)a)->name, ((const struct tst_copy *)b)->name);
}

void bdb_hotpart_stats(bdb_hotpart *h, void (*cb)(void *ctx, const bdb_hot_tenant_stats *s),
                       void *ctx)
{
    struct notes ns = {0};
    pthread_mutex_lock(&h->mu);
    tick_locked(h, bdb_clock_now(&h->o.clock), &ns);
    size_t cnt = bdb_map_count(h->tstats), n = 0;
    struct tst_copy *v = xalloc((cnt ? cnt : 1) * sizeof *v);
    size_t pos = 0, kl;
    const void *k;
    void *val;
    while (bdb_map_next(h->tstats, &pos, &k, &kl, &val) && n < cnt)
        v[n++] = (struct tst_copy){xstrndup(k, kl), *(struct tstat *)val};
    pthread_mutex_unlock(&h->mu);
    notes_flush(h, &ns);
    if (n > 1)
        qsort(v, n, sizeof *v, tst_cmp);
    for (size_t i = 0; i < n; i++) {
        bdb_hot_tenant_stats s = {v[i].name, v[i].t.hot_now, v[i].t.episodes, v[i].t.rejected,
                                  v[i].t.sampled_out};
        cb(ctx, &s);
        free(v[i].name);
    }
    free(v);
}

size_t bdb_hotpart_entries(bdb_hotpart *h)
{
    pthread_mutex_lock(&h->mu);
    size_t n = h->n;
    pthread_mutex_unlock(&h->mu);
    return n;
}

size_t bdb_hotpart_table_bytes(bdb_hotpart *h)
{
    pthread_mutex_lock(&h->mu);
    size_t b = h->cap * sizeof(struct slot);
    pthread_mutex_unlock(&h->mu);
    return b;
}
