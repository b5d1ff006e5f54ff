#include "common/map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Linear probing with backward-shift deletion: no tombstones, so lookups stay
 * short under churn. Each slot caches the hash so most mismatches skip memcmp. */
struct slot {
    uint64_t hash;
    char *key; /* NULL = empty */
    size_t klen;
    void *val;
};

struct bdb_map {
    struct slot *slots;
    size_t cap; /* power of two */
    size_t count;
};

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n, sz);
    if (!p) {
        fprintf(stderr, "bucketdb: out of memory\n");
        abort();
    }
    return p;
}

uint64_t bdb_hash(const void *p, size_t n)
{
    return XXH3_64bits(p, n);
}

bdb_map *bdb_map_new(void)
{
    bdb_map *m = xcalloc(1, sizeof *m);
    m->cap = 16;
    m->slots = xcalloc(m->cap, sizeof *m->slots);
    return m;
}

void bdb_map_free(bdb_map *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->cap; i++)
        free(m->slots[i].key);
    free(m->slots);
    free(m);
}

size_t bdb_map_count(const bdb_map *m)
{
    return m->count;
}

static size_t find(const bdb_map *m, const void *key, size_t klen, uint64_t h)
{
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        const struct slot *s = &m->slots[i];
        if (!s->key)
            return i;
        if (s->hash == h && s->klen == klen && memcmp(s->key, key, klen) == 0)
            return i;
    }
}

void *bdb_map_get_h(const bdb_map *m, const void *key, size_t klen, uint64_t h)
{
    const struct slot *s = &m->slots[find(m, key, klen, h)];
    return s->key ? s->val : NULL;
}

void *bdb_map_get(const bdb_map *m, const void *key, size_t klen)
{
    return bdb_map_get_h(m, key, klen, bdb_hash(key, klen));
}

static void grow(bdb_map *m)
{
    struct slot *old = m->slots;
    size_t oldcap = m->cap;
    m->cap *= 2;
    m->slots = xcalloc(m->cap, sizeof *m->slots);
    for (size_t i = 0; i < oldcap; i++) {
        if (!old[i].key)
            continue;
        size_t mask = m->cap - 1, j = old[i].hash & mask;
        while (m->slots[j].key)
            j = (j + 1) & mask;
        m->slots[j] = old[i];
    }
    free(old);
}

void *bdb_map_put_h(bdb_map *m, const void *key, size_t klen, uint64_t h, void *val)
{
    if ((m->count + 1) * 4 > m->cap * 3)
        grow(m);
    struct slot *s = &m->slots[find(m, key, klen, h)];
    if (s->key) {
        void *prev = s->val;
        s->val = val;
        return prev;
    }
    s->key = xcalloc(1, klen + 1);
    memcpy(s->key, key, klen);
    s->klen = klen;
    s->hash = h;
    s->val = val;
    m->count++;
    return NULL;
}

void *bdb_map_put(bdb_map *m, const void *key, size_t klen, void *val)
{
    return bdb_map_put_h(m, key, klen, bdb_hash(key, klen), val);
}

void *bdb_map_del(bdb_map *m, const void *key, size_t klen)
{
    size_t mask = m->cap - 1;
    size_t i = find(m, key, klen, bdb_hash(key, klen));
    if (!m->slots[i].key)
        return NULL;
    void *val = m->slots[i].val;
    free(m->slots[i].key);
    m->slots[i].key = NULL;
    m->count--;
    /* Backward shift: pull later entries of the probe run into the hole. */
    for (size_t j = (i + 1) & mask; m->slots[j].key; j = (j + 1) & mask) {
        size_t home = m->slots[j].hash & mask;
        int between = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (between)
            continue;
        m->slots[i] = m->slots[j];
        m->slots[j].key = NULL;
        i = j;
    }
    return val;
}

int bdb_map_next(const bdb_map *m, size_t *pos, const void **key, size_t *klen, void **val)
{
    while (*pos < m->cap) {
        const struct slot *s = &m->slots[(*pos)++];
        if (s->key) {
            *key = s->key;
            *klen = s->klen;
            *val = s->val;
            return 1;
        }
    }
    return 0;
}
