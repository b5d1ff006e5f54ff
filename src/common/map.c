#include "common/map.h"
#include "common/alloc.h"
#include "bucketdb/bdb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Linear probing with backward-shift deletion: no tombstones, so lookups stay
 * short under churn. Each slot caches the hash so most mismatches skip memcmp. */
/* 24 bytes: the catalog's device map holds one per device (a million at XL). The
 * hash's low 32 bits pick the home slot (the table stays below 2^32 slots) and sift
 * probes before a memcmp. */
struct slot {
    char *key; /* NULL = empty */
    void *val;
    uint32_t hash;
    uint32_t klen;
};

struct bdb_map {
    struct slot *slots;
    size_t cap; /* power of two, at most 2^32 */
    size_t count;
    int borrow; /* keys are the caller's (bdb_map_new_borrowed) */
};

uint64_t bdb_hash(const void *p, size_t n)
{
    return XXH3_64bits(p, n);
}

bdb_map *bdb_map_new_borrowed(void)
{
    bdb_map *m = bdb_map_new();
    if (m)
        m->borrow = 1;
    return m;
}

bdb_map *bdb_map_new(void)
{
    bdb_map *m = bdb_calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->cap = 16;
    m->slots = bdb_calloc(m->cap, sizeof *m->slots);
    if (!m->slots) {
        free(m);
        return NULL;
    }
    return m;
}

void bdb_map_free(bdb_map *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->cap && !m->borrow; i++)
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
        if (s->hash == (uint32_t)h && s->klen == klen && memcmp(s->key, key, klen) == 0)
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

static int grow(bdb_map *m)
{
    struct slot *old = m->slots;
    size_t oldcap = m->cap;
    if (oldcap > UINT32_MAX / 2) /* homes come from 32 bits of the hash */
        return BDB_ERR_NOMEM;
    struct slot *ns = bdb_calloc(oldcap * 2, sizeof *ns);
    if (!ns)
        return BDB_ERR_NOMEM;
    m->cap = oldcap * 2;
    m->slots = ns;
    for (size_t i = 0; i < oldcap; i++) {
        if (!old[i].key)
            continue;
        size_t mask = m->cap - 1, j = old[i].hash & mask;
        while (m->slots[j].key)
            j = (j + 1) & mask;
        m->slots[j] = old[i];
    }
    free(old);
    return BDB_OK;
}

static int put(bdb_map *m, const void *key, size_t klen, uint64_t h, void *val, void **prev)
{
    *prev = NULL;
    struct slot *s = &m->slots[find(m, key, klen, h)];
    if (s->key) {
        *prev = s->val;
        s->val = val;
        return BDB_OK;
    }
    if (klen > UINT32_MAX)
        return BDB_ERR_NOMEM; /* no key of this code is near 4 GiB */
    /* Copy the key before growing: a failure then leaves the map untouched. */
    char *k = m->borrow ? (char *)(uintptr_t)key : bdb_malloc(klen + 1);
    if (!k)
        return BDB_ERR_NOMEM;
    if ((m->count + 1) * 4 > m->cap * 3) {
        if (grow(m) != BDB_OK) {
            if (!m->borrow)
                free(k);
            return BDB_ERR_NOMEM;
        }
        s = &m->slots[find(m, key, klen, h)];
    }
    if (!m->borrow) {
        memcpy(k, key, klen);
        k[klen] = 0;
    }
    s->key = k;
    s->klen = (uint32_t)klen;
    s->hash = (uint32_t)h;
    s->val = val;
    m->count++;
    return BDB_OK;
}

void *bdb_map_put_h(bdb_map *m, const void *key, size_t klen, uint64_t h, void *val)
{
    void *prev;
    put(m, key, klen, h, val, &prev);
    return prev;
}

int bdb_map_set_h(bdb_map *m, const void *key, size_t klen, uint64_t h, void *val)
{
    void *prev;
    return put(m, key, klen, h, val, &prev);
}

int bdb_map_set(bdb_map *m, const void *key, size_t klen, void *val)
{
    return bdb_map_set_h(m, key, klen, bdb_hash(key, klen), val);
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
    if (!m->borrow)
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
