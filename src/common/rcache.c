/* rcache: see rcache.h. One mutex guards the table, the LRU list and the counters; a
 * get or put holds it for a hash lookup and a few links, never while a value is built
 * or read (the caller does that between get and release, or before put). */
#include "common/rcache.h"
#include "common/alloc.h"
#include "common/map.h" /* bdb_hash */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct bdb_rcache_ent {
    struct bdb_rcache_ent *hnext;         /* hash chain */
    struct bdb_rcache_ent *newer, *older; /* LRU list: head = newest */
    uint64_t hash, cost;
    void *val;
    void (*free_fn)(void *); /* NULL: free() */
    size_t len, klen;
    uint32_t refs; /* readers holding it, plus 1 while it is in the table */
    unsigned char key[];
};

struct bdb_rcache {
    pthread_mutex_t mu;
    bdb_rcache_ent **tab;
    size_t nb; /* buckets, a power of two */
    bdb_rcache_ent *newest, *oldest;
    uint64_t max_bytes, bytes, entries, hits, misses, evictions;
    uint64_t seen[RCACHE_SEEN_SLOTS]; /* hashes of keys missed lately (0: none) */
};

bdb_rcache *bdb_rcache_new(uint64_t max_bytes)
{
    bdb_rcache *c = bdb_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->nb = 64;
    c->tab = bdb_calloc(c->nb, sizeof *c->tab);
    if (!c->tab) {
        free(c);
        return NULL;
    }
    c->max_bytes = max_bytes;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

static void ent_free(bdb_rcache_ent *e)
{
    if (e->free_fn)
        e->free_fn(e->val);
    else
        free(e->val);
    free(e);
}

/* Drops one reference (under mu); the last one frees the entry. */
static void unref(bdb_rcache_ent *e)
{
    if (--e->refs == 0)
        ent_free(e);
}

void bdb_rcache_free(bdb_rcache *c)
{
    if (!c)
        return;
    for (bdb_rcache_ent *e = c->newest, *n; e; e = n) {
        n = e->older;
        ent_free(e);
    }
    free(c->tab);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static bdb_rcache_ent **chain(bdb_rcache *c, uint64_t h)
{
    return &c->tab[h & (c->nb - 1)];
}

static bdb_rcache_ent *find(bdb_rcache *c, const void *key, size_t klen, uint64_t h)
{
    for (bdb_rcache_ent *e = *chain(c, h); e; e = e->hnext)
        if (e->hash == h && e->klen == klen && !memcmp(e->key, key, klen))
            return e;
    return NULL;
}

static void lru_unlink(bdb_rcache *c, bdb_rcache_ent *e)
{
    if (e->newer)
        e->newer->older = e->older;
    else
        c->newest = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        c->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void lru_push(bdb_rcache *c, bdb_rcache_ent *e)
{
    e->older = c->newest;
    e->newer = NULL;
    if (c->newest)
        c->newest->newer = e;
    c->newest = e;
    if (!c->oldest)
        c->oldest = e;
}

/* Takes e out of the table (under mu): readers holding it keep it until release. */
static void evict(bdb_rcache *c, bdb_rcache_ent *e)
{
    bdb_rcache_ent **p = chain(c, e->hash);
    while (*p != e)
        p = &(*p)->hnext;
    *p = e->hnext;
    lru_unlink(c, e);
    c->bytes -= e->cost;
    c->entries--;
    c->evictions++;
    unref(e);
}

/* Doubles the table when it holds more entries than buckets; without memory the
 * chains only grow longer. */
static void grow(bdb_rcache *c)
{
    if (c->entries <= c->nb)
        return;
    size_t nb = c->nb * 2;
    bdb_rcache_ent **t = bdb_calloc(nb, sizeof *t);
    if (!t)
        return;
    for (size_t i = 0; i < c->nb; i++)
        for (bdb_rcache_ent *e = c->tab[i], *n; e; e = n) {
            n = e->hnext;
            e->hnext = t[e->hash & (nb - 1)];
            t[e->hash & (nb - 1)] = e;
        }
    free(c->tab);
    c->tab = t;
    c->nb = nb;
}

const void *bdb_rcache_get(bdb_rcache *c, const void *key, size_t klen, size_t *len,
                           bdb_rcache_ent **ref)
{
    uint64_t h = bdb_hash(key, klen);
    pthread_mutex_lock(&c->mu);
    bdb_rcache_ent *e = find(c, key, klen, h);
    if (e) {
        c->hits++;
        e->refs++;
        lru_unlink(c, e);
        lru_push(c, e);
    } else {
        c->misses++;
    }
    pthread_mutex_unlock(&c->mu);
    *ref = e;
    if (!e)
        return NULL;
    *len = e->len;
    return e->val;
}

void bdb_rcache_release(bdb_rcache *c, bdb_rcache_ent *ref)
{
    if (!ref)
        return;
    pthread_mutex_lock(&c->mu);
    unref(ref);
    pthread_mutex_unlock(&c->mu);
}

/* Puts val under key (see bdb_rcache_put_ref); NULL when nothing is kept, val still
 * the caller's. */
static const void *put(bdb_rcache *c, const void *key, size_t klen, void *val, size_t len,
                       void (*free_fn)(void *), bdb_rcache_ent **ref)
{
    uint64_t cost = (uint64_t)len + klen + RCACHE_ENTRY_OVERHEAD;
    if (cost > c->max_bytes)
        return NULL;
    bdb_rcache_ent *e = bdb_malloc(sizeof *e + klen);
    if (!e)
        return NULL;
    memset(e, 0, sizeof *e);
    e->hash = bdb_hash(key, klen);
    e->cost = cost;
    e->val = val;
    e->free_fn = free_fn;
    e->len = len;
    e->klen = klen;
    e->refs = 1;
    memcpy(e->key, key, klen);
    pthread_mutex_lock(&c->mu);
    bdb_rcache_ent *old = find(c, key, klen, e->hash);
    if (old) { /* another reader built it meanwhile: theirs is kept */
        if (ref) {
            old->refs++;
            *ref = old;
        }
        pthread_mutex_unlock(&c->mu);
        ent_free(e);
        return ref ? old->val : val;
    }
    while (c->oldest && c->bytes + cost > c->max_bytes)
        evict(c, c->oldest);
    bdb_rcache_ent **p = chain(c, e->hash);
    e->hnext = *p;
    *p = e;
    lru_push(c, e);
    c->bytes += cost;
    c->entries++;
    if (ref) {
        e->refs++;
        *ref = e;
    }
    grow(c);
    pthread_mutex_unlock(&c->mu);
    return val;
}

void bdb_rcache_put(bdb_rcache *c, const void *key, size_t klen, void *val, size_t len)
{
    if (!put(c, key, klen, val, len, NULL, NULL))
        free(val);
}

const void *bdb_rcache_put_ref(bdb_rcache *c, const void *key, size_t klen, void *val, size_t len,
                               void (*free_fn)(void *), bdb_rcache_ent **ref)
{
    return put(c, key, klen, val, len, free_fn, ref);
}

int bdb_rcache_admit(bdb_rcache *c, const void *key, size_t klen)
{
    uint64_t h = bdb_hash(key, klen) | 1; /* never 0, the empty slot */
    pthread_mutex_lock(&c->mu);
    uint64_t *slot = &c->seen[(h >> 1) % RCACHE_SEEN_SLOTS];
    int again = *slot == h;
    *slot = h;
    pthread_mutex_unlock(&c->mu);
    return again;
}

void bdb_rcache_stats_get(bdb_rcache *c, bdb_rcache_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    st->hits = c->hits;
    st->misses = c->misses;
    st->evictions = c->evictions;
    st->entries = c->entries;
    st->bytes = c->bytes;
    st->max_bytes = c->max_bytes;
    pthread_mutex_unlock(&c->mu);
}
