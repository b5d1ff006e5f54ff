/* tenants: the registry in memory (two maps: by name and by token hash), its changes,
 * reads and the per-tenant write-rate buckets; its file is tenants_file.c. */
#include "server/tenants/tenants_int.h"

#include "bucketdb/bdb.h"
#include "server/admission/hotpart.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const limit_names[BDB_LIMIT_N] = {"writes_per_second", "burst", "max_devices",
                                                     "storage_bytes"};

const char *bdb_quota_limit_name(enum bdb_quota_limit l)
{
    return (unsigned)l < BDB_LIMIT_N ? limit_names[l] : "unknown";
}

void bdb_token_hash(const char *token, size_t len, uint8_t out[BDB_HASH_BYTES])
{
    unsigned int n = 0;
    if (EVP_Digest(token, len, out, &n, EVP_sha256(), NULL) != 1 || n != BDB_HASH_BYTES) {
        /* Cannot happen with a working libcrypto; never let a failure look like a
         * match: a hash of all 0xff is no token's hash in practice. */
        memset(out, 0xff, BDB_HASH_BYTES);
    }
}

int bdb_hash_equal(const uint8_t a[BDB_HASH_BYTES], const uint8_t b[BDB_HASH_BYTES])
{
    return CRYPTO_memcmp(a, b, BDB_HASH_BYTES) == 0;
}

void tn_to_hex(const uint8_t *p, size_t n, char *out)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[p[i] >> 4];
        out[2 * i + 1] = hx[p[i] & 15];
    }
    out[2 * n] = '\0';
}

int tn_from_hex(const char *s, size_t slen, uint8_t *out, size_t n)
{
    if (slen != 2 * n)
        return -1;
    for (size_t i = 0; i < 2 * n; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0)
            return -1;
        if (i % 2 == 0)
            out[i / 2] = (uint8_t)(v << 4);
        else
            out[i / 2] |= (uint8_t)v;
    }
    return 0;
}

int bdb_token_generate(char out[BDB_TOKEN_HEX + 1])
{
    uint8_t rnd[BDB_TOKEN_BYTES];
    if (RAND_bytes(rnd, sizeof rnd) != 1)
        return BDB_ERR_IO;
    tn_to_hex(rnd, sizeof rnd, out);
    OPENSSL_cleanse(rnd, sizeof rnd);
    return BDB_OK;
}

int tn_quotas_valid(const bdb_quotas *q)
{
    /* An effective burst of up to 10 x BDB_QUOTA_MAX_RATE still fits the bucket's
     * milli-sample arithmetic in 64 bits. */
    return q->writes_per_second <= BDB_QUOTA_MAX_RATE && q->burst <= BDB_QUOTA_MAX_RATE;
}

void tn_put_entry(bdb_tenants *r, tentry *e)
{
    bdb_map_put(r->by_name, e->info.name, strlen(e->info.name), e);
    bdb_map_put(r->by_hash, e->hash, BDB_HASH_BYTES, e);
}

void tn_drop_entry(bdb_tenants *r, tentry *e)
{
    bdb_map_del(r->by_name, e->info.name, strlen(e->info.name));
    bdb_map_del(r->by_hash, e->hash, BDB_HASH_BYTES);
}

void tn_free_entries(bdb_tenants *r)
{
    size_t pos = 0;
    const void *key;
    size_t klen;
    void *val;
    while (bdb_map_next(r->by_name, &pos, &key, &klen, &val))
        free(val);
}

bdb_tenants *tn_new(const char *dir)
{
    bdb_tenants *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    size_t pl = strlen(dir) + sizeof REG_FILE + 2;
    r->dir = strdup(dir);
    r->path = malloc(pl);
    r->by_name = bdb_map_new();
    r->by_hash = bdb_map_new();
    r->dead = bdb_map_new();
    bdb_buf_init(&r->stored);
    if (!r->dir || !r->path || !r->by_name || !r->by_hash || !r->dead) {
        bdb_tenants_close(r);
        return NULL;
    }
    snprintf(r->path, pl, "%s/%s", dir, REG_FILE);
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->save_mu, NULL);
    return r;
}

int bdb_tenants_open(const char *dir, bdb_tenants **out, char *err, size_t errlen)
{
    if (errlen)
        err[0] = '\0';
    bdb_tenants *r = tn_new(dir);
    if (!r)
        return BDB_ERR_NOMEM;
    int rc = tn_load(r, err, errlen);
    if (rc != BDB_OK) {
        bdb_tenants_close(r);
        return rc;
    }
    *out = r;
    return BDB_OK;
}

void bdb_tenants_close(bdb_tenants *r)
{
    if (!r)
        return;
    if (r->by_name) {
        tn_free_entries(r);
        bdb_map_free(r->by_name);
    }
    if (r->by_hash)
        bdb_map_free(r->by_hash);
    if (r->dead) {
        tn_free_dead(r);
        bdb_map_free(r->dead);
    }
    if (r->path) {
        pthread_mutex_destroy(&r->mu);
        pthread_mutex_destroy(&r->save_mu);
    }
    bdb_buf_free(&r->stored);
    free(r->dir);
    free(r->path);
    free(r);
}

const char *bdb_tenants_path(const bdb_tenants *r)
{
    return r->path;
}

/* ------------------------------------------------------------------ changes */

/* in with the settings p sets (NULL: none) into out: 0, or -1 when a value is out of
 * bounds. What the patch sets is bounded; a value stored before the bound stays. */
static int apply_patch(const bdb_tenant_info *in, const bdb_tenant_patch *p, bdb_tenant_info *out)
{
    *out = *in;
    if (!p)
        return 0;
    int bad =
        p->has_retention && (p->retention_ms < 0 || p->retention_ms > BDB_TENANT_RETENTION_MAX_MS);
    for (int k = 0; k < 3; k++)
        if (p->has_tier_retention[k] && p->tier_retention_ms[k] > BDB_TENANT_RETENTION_MAX_MS)
            bad = 1;
    if (bad)
        return -1;
    bdb_tenant_info nw = *in;
    if (p->has_writes_per_second)
        nw.quotas.writes_per_second = p->quotas.writes_per_second;
    if (p->has_burst)
        nw.quotas.burst = p->quotas.burst;
    if (p->has_max_devices)
        nw.quotas.max_devices = p->quotas.max_devices;
    if (p->has_storage_bytes)
        nw.quotas.storage_bytes = p->quotas.storage_bytes;
    if (p->has_retention)
        nw.retention_ms = p->retention_ms;
    if (p->has_hot_threshold)
        nw.hot.threshold = p->hot.threshold;
    if (p->has_hot_policy)
        nw.hot.policy = p->hot.policy;
    if (p->has_hot_subbuckets)
        nw.hot.subbuckets = p->hot.subbuckets;
    if (p->has_hot_rate_limit)
        nw.hot.rate_limit = p->hot.rate_limit;
    if (p->has_hot_sample)
        nw.hot.sample = p->hot.sample;
    for (int k = 0; k < 3; k++)
        if (p->has_tier_retention[k])
            nw.tier_retention_ms[k] = p->tier_retention_ms[k];
    if (p->has_device_rule)
        memcpy(nw.device_rule, p->device_rule, sizeof nw.device_rule);
    if (!tn_device_rule_valid(nw.device_rule) || !tn_quotas_valid(&nw.quotas) ||
        nw.retention_ms < 0 || !bdb_tenant_hot_valid(&nw.hot) ||
        !tn_tier_retention_valid(nw.tier_retention_ms))
        return -1;
    *out = nw;
    return 0;
}

int bdb_tenants_create(bdb_tenants *r, const char *name, const bdb_quotas *q, int64_t retention_ms,
                       int64_t now_ms, char token[BDB_TOKEN_HEX + 1])
{
    bdb_tenant_patch p = {0};
    p.has_writes_per_second = p.has_burst = p.has_max_devices = p.has_storage_bytes = 1;
    p.quotas = *q;
    p.has_retention = 1;
    p.retention_ms = retention_ms;
    return bdb_tenants_create_with(r, name, &p, now_ms, token);
}

int bdb_tenants_create_with(bdb_tenants *r, const char *name, const bdb_tenant_patch *p,
                            int64_t now_ms, char token[BDB_TOKEN_HEX + 1])
{
    static const bdb_tenant_info none;
    bdb_tenant_info info;
    if (bdb_tenant_name_registrable(name, NULL, NULL, 0) != 0 || apply_patch(&none, p, &info) != 0)
        return BDB_ERR_INVALID;
    tentry *e = calloc(1, sizeof *e);
    if (!e)
        return BDB_ERR_NOMEM;
    e->info = info;
    snprintf(e->info.name, sizeof e->info.name, "%s", name);
    e->info.created_ms = now_ms;
    e->info.token_rotated_ms = now_ms;
    int rc = bdb_token_generate(token);
    if (rc != BDB_OK) {
        free(e);
        return rc;
    }
    bdb_token_hash(token, strlen(token), e->hash);
    if ((rc = tn_begin_change(r)) != BDB_OK) {
        free(e);
        OPENSSL_cleanse(token, BDB_TOKEN_HEX);
        token[0] = '\0';
        return rc;
    }
    pthread_mutex_lock(&r->mu);
    if (bdb_map_get(r->by_name, name, strlen(name))) {
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_unlock(&r->save_mu);
        free(e);
        OPENSSL_cleanse(token, BDB_TOKEN_HEX);
        token[0] = '\0';
        return BDB_ERR_EXISTS;
    }
    tn_put_entry(r, e);
    pthread_mutex_unlock(&r->mu);
    rc = tn_persist(r);
    if (rc != BDB_OK) {
        pthread_mutex_lock(&r->mu);
        tn_drop_entry(r, e);
        pthread_mutex_unlock(&r->mu);
        free(e);
        token[0] = '\0';
    }
    pthread_mutex_unlock(&r->save_mu);
    return rc;
}

int bdb_tenants_update(bdb_tenants *r, const char *name, const bdb_tenant_patch *p,
                       bdb_tenant_info *out)
{
    int brc = tn_begin_change(r);
    if (brc != BDB_OK)
        return brc;
    pthread_mutex_lock(&r->mu);
    tentry *e = tn_find(r, name);
    if (!e) {
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_unlock(&r->save_mu);
        return BDB_ERR_NOTFOUND;
    }
    bdb_tenant_info old = e->info, nw;
    if (apply_patch(&e->info, p, &nw) != 0) {
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_unlock(&r->save_mu);
        return BDB_ERR_INVALID;
    }
    e->info = nw;
    pthread_mutex_unlock(&r->mu);
    int rc = tn_persist(r);
    pthread_mutex_lock(&r->mu);
    if (rc != BDB_OK) {
        /* keep the counters that moved meanwhile, restore the settings */
        e->info.quotas = old.quotas;
        e->info.retention_ms = old.retention_ms;
        e->info.hot = old.hot;
        memcpy(e->info.tier_retention_ms, old.tier_retention_ms, sizeof old.tier_retention_ms);
        memcpy(e->info.device_rule, old.device_rule, sizeof old.device_rule);
    } else if (out) {
        *out = e->info;
    }
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_unlock(&r->save_mu);
    return rc;
}

int bdb_tenants_undo_create(bdb_tenants *r, const char *name)
{
    int brc = tn_begin_change(r);
    if (brc != BDB_OK)
        return brc;
    pthread_mutex_lock(&r->mu);
    tentry *e = bdb_map_get(r->by_name, name, strlen(name));
    if (e)
        tn_drop_entry(r, e);
    pthread_mutex_unlock(&r->mu);
    int rc = e ? tn_persist(r) : BDB_ERR_NOTFOUND;
    if (e && rc != BDB_OK) {
        pthread_mutex_lock(&r->mu);
        tn_put_entry(r, e);
        pthread_mutex_unlock(&r->mu);
    } else {
        free(e);
    }
    pthread_mutex_unlock(&r->save_mu);
    return rc;
}

int bdb_tenants_delete(bdb_tenants *r, const char *name, int64_t now_ms)
{
    tdead *fresh = calloc(1, sizeof *fresh);
    if (!fresh)
        return BDB_ERR_NOMEM;
    int brc = tn_begin_change(r);
    if (brc != BDB_OK) {
        free(fresh);
        return brc;
    }
    pthread_mutex_lock(&r->mu);
    tentry *e = bdb_map_get(r->by_name, name, strlen(name));
    tdead *d = e ? bdb_map_get(r->dead, name, strlen(name)) : NULL;
    if (e && !d) { /* generation 0 until the file says otherwise: the same as none */
        snprintf(fresh->name, sizeof fresh->name, "%s", name);
        if (bdb_map_set(r->dead, fresh->name, strlen(fresh->name), fresh) == BDB_OK)
            d = fresh, fresh = NULL;
    }
    if (!e || !d) {
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_unlock(&r->save_mu);
        free(fresh);
        return e ? BDB_ERR_NOMEM : BDB_ERR_NOTFOUND;
    }
    /* The file is written with the tenant gone and its name's generation moved on, in
     * one atomic write; requests see the change only once it is durable, so none can
     * write under the new generation a deletion that then fails would leave behind. */
    bdb_buf b;
    bdb_buf_init(&b);
    const tdead before = *d;
    e->leaving = 1;
    d->gen++;
    d->at_ms = now_ms;
    int rc = tn_encode(r, &b);
    *d = before;
    e->leaving = 0;
    pthread_mutex_unlock(&r->mu);
    if (rc == BDB_OK)
        rc = tn_write(r, &b);
    bdb_buf_free(&b);
    pthread_mutex_lock(&r->mu);
    if (rc == BDB_OK) {
        tn_drop_entry(r, e);
        d->gen++;
        d->at_ms = now_ms;
    } else if (d->gen == 0) {
        bdb_map_del(r->dead, d->name, strlen(d->name));
        free(d);
    }
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_unlock(&r->save_mu);
    if (rc == BDB_OK)
        free(e);
    free(fresh); /* not needed: the name had been deleted before */
    return rc;
}

int bdb_tenants_rotate(bdb_tenants *r, const char *name, int64_t now_ms,
                       char token[BDB_TOKEN_HEX + 1])
{
    int rc = bdb_token_generate(token);
    if (rc != BDB_OK)
        return rc;
    uint8_t h[BDB_HASH_BYTES];
    bdb_token_hash(token, strlen(token), h);
    if ((rc = tn_begin_change(r)) != BDB_OK) {
        OPENSSL_cleanse(token, BDB_TOKEN_HEX);
        token[0] = '\0';
        return rc;
    }
    pthread_mutex_lock(&r->mu);
    tentry *e = tn_find(r, name);
    if (!e) {
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_unlock(&r->save_mu);
        token[0] = '\0';
        return BDB_ERR_NOTFOUND;
    }
    uint8_t old[BDB_HASH_BYTES];
    int64_t old_rot = e->info.token_rotated_ms;
    memcpy(old, e->hash, sizeof old);
    bdb_map_del(r->by_hash, e->hash, BDB_HASH_BYTES);
    memcpy(e->hash, h, sizeof h);
    e->info.token_rotated_ms = now_ms;
    bdb_map_put(r->by_hash, e->hash, BDB_HASH_BYTES, e);
    pthread_mutex_unlock(&r->mu);
    rc = tn_persist(r);
    if (rc != BDB_OK) {
        pthread_mutex_lock(&r->mu);
        bdb_map_del(r->by_hash, e->hash, BDB_HASH_BYTES);
        memcpy(e->hash, old, sizeof old);
        e->info.token_rotated_ms = old_rot;
        bdb_map_put(r->by_hash, e->hash, BDB_HASH_BYTES, e);
        pthread_mutex_unlock(&r->mu);
        token[0] = '\0';
    }
    pthread_mutex_unlock(&r->save_mu);
    return rc;
}

/* ------------------------------------------------------------------ reads */

int64_t bdb_tenants_tier_retention(bdb_tenants *r, const char *name, int tier, int64_t dflt)
{
    bdb_tenant_info ti;
    if (tier < 0 || tier > 2 || bdb_tenants_get(r, name, &ti) != BDB_OK ||
        !ti.tier_retention_ms[tier])
        return dflt;
    return ti.tier_retention_ms[tier] < 0 ? 0 : ti.tier_retention_ms[tier];
}

int bdb_tenants_device_rule(bdb_tenants *r, const char *name, char *out, size_t cap)
{
    int have = 0;
    pthread_mutex_lock(&r->mu);
    tentry *e = bdb_map_get(r->by_name, name, strlen(name));
    if (e && e->info.device_rule[0]) {
        snprintf(out, cap, "%s", e->info.device_rule);
        have = 1;
    }
    pthread_mutex_unlock(&r->mu);
    return have;
}

int bdb_tenants_get(bdb_tenants *r, const char *name, bdb_tenant_info *out)
{
    pthread_mutex_lock(&r->mu);
    tentry *e = tn_find(r, name);
    if (e)
        *out = e->info;
    pthread_mutex_unlock(&r->mu);
    return e ? BDB_OK : BDB_ERR_NOTFOUND;
}

int bdb_tenants_list(bdb_tenants *r, int (*cb)(void *ctx, const bdb_tenant_info *t), void *ctx)
{
    pthread_mutex_lock(&r->mu);
    size_t n;
    tentry **v = tn_sorted_entries(r, &n);
    bdb_tenant_info *copy = v ? malloc((n ? n : 1) * sizeof *copy) : NULL;
    for (size_t i = 0; copy && i < n; i++)
        copy[i] = v[i]->info;
    pthread_mutex_unlock(&r->mu);
    free(v);
    if (!copy)
        return BDB_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        if (cb(ctx, &copy[i]))
            break;
    free(copy);
    return BDB_OK;
}

size_t bdb_tenants_count(bdb_tenants *r)
{
    pthread_mutex_lock(&r->mu);
    size_t n = bdb_map_count(r->by_name);
    pthread_mutex_unlock(&r->mu);
    return n;
}

int bdb_tenants_find_by_hash_key(bdb_tenants *r, const uint8_t hash[BDB_HASH_BYTES],
                                 char name[BDB_TENANT_NAME_MAX + 1], char *key, size_t keylen)
{
    pthread_mutex_lock(&r->mu);
    tentry *e = bdb_map_get(r->by_hash, hash, BDB_HASH_BYTES);
    /* The map finds the candidate; the stored hash is then compared in constant time. */
    int ok = e && bdb_hash_equal(e->hash, hash);
    if (ok)
        snprintf(name, BDB_TENANT_NAME_MAX + 1, "%s", e->info.name);
    if (ok && key && tn_storage_key_locked(r, e->info.name, key, keylen) != BDB_OK)
        ok = 0; /* the caller's buffer is short: no key, no tenant */
    pthread_mutex_unlock(&r->mu);
    return ok;
}

int bdb_tenants_find_by_hash(bdb_tenants *r, const uint8_t hash[BDB_HASH_BYTES],
                             char name[BDB_TENANT_NAME_MAX + 1])
{
    return bdb_tenants_find_by_hash_key(r, hash, name, NULL, 0);
}

/* ------------------------------------------------------------------ admission */

int bdb_tenants_admit(bdb_tenants *r, const char *name, uint64_t cost, int64_t now_ms,
                      int64_t *retry_after_s, uint64_t *limit_value)
{
    pthread_mutex_lock(&r->mu);
    tentry *e = tn_find(r, name);
    int verdict = 1;
    if (e && e->info.quotas.writes_per_second) {
        uint64_t rate = e->info.quotas.writes_per_second;
        uint64_t burst = bdb_quota_burst(rate, e->info.quotas.burst);
        verdict = bdb_tbucket_take(&e->tb, rate, burst, cost, now_ms, retry_after_s);
        if (verdict == 0) {
            *limit_value = rate;
            e->info.rejections[BDB_LIMIT_RATE]++;
        } else if (verdict < 0) {
            *limit_value = burst;
            e->info.rejections[BDB_LIMIT_BURST]++;
        }
    }
    pthread_mutex_unlock(&r->mu);
    return verdict;
}

void bdb_tenants_refund(bdb_tenants *r, const char *name, uint64_t cost)
{
    pthread_mutex_lock(&r->mu);
    tentry *e = tn_find(r, name);
    if (e && e->info.quotas.writes_per_second)
        bdb_tbucket_refund(
            &e->tb, bdb_quota_burst(e->info.quotas.writes_per_second, e->info.quotas.burst), cost);
    pthread_mutex_unlock(&r->mu);
}

void bdb_tenants_count_rejection(bdb_tenants *r, const char *name, enum bdb_quota_limit l)
{
    pthread_mutex_lock(&r->mu);
    tentry *e = tn_find(r, name);
    if (e && (unsigned)l < BDB_LIMIT_N)
        e->info.rejections[l]++;
    pthread_mutex_unlock(&r->mu);
}

int bdb_tenants_count_ingest(bdb_tenants *r, const char *name, uint64_t samples)
{
    pthread_mutex_lock(&r->mu);
    tentry *e = tn_find(r, name);
    if (e) {
        e->info.ingested_samples += samples;
        e->info.ingested_requests++;
    }
    pthread_mutex_unlock(&r->mu);
    return e != NULL;
}
