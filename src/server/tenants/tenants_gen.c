/* tenants_gen: deleted tenants and storage keys (docs/TENANCY.md#deleting-a-tenant).
 *
 * The storage engine knows a tenant only by the string it is given. Deleting a
 * tenant must make everything stored under its name unreachable at once, durably,
 * and a tenant created later under the same name must start empty, on either
 * backend, even while the old data is still being removed. Rather than rewriting
 * every file that may hold the old data before answering, each deletion of a name
 * starts a new generation of it: the registry keeps "deleted <name> gen=<n>" (n
 * deletions so far) in the same atomic file write that removes the tenant, and
 * requests for the name reach the engine as the storage key "<name>@<n>" from then
 * on ("<name>" while n = 0, so data written before this existed keeps its key). '@'
 * is not allowed in a tenant name, so no request can name an old generation's key.
 * The old generations are then removed by retention (tenant_ttl in server.c gives
 * them an expired TTL). */
#include "server/tenants/tenants_int.h"

#include "bucketdb/bdb.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Splits a storage key: the name part's length and the generation (0 without '@').
 * -1 if the part after '@' is not a decimal number. */
static int key_split(const char *key, size_t *nlen, uint64_t *gen)
{
    const char *at = strchr(key, '@');
    *gen = 0;
    *nlen = strlen(key);
    if (!at)
        return 0;
    *nlen = (size_t)(at - key);
    if (at[1] < '0' || at[1] > '9')
        return -1;
    char *end;
    errno = 0;
    unsigned long long g = strtoull(at + 1, &end, 10);
    if (errno || *end)
        return -1;
    *gen = g;
    return 0;
}

static uint64_t current_gen(bdb_tenants *r, const char *name, size_t nlen)
{
    tdead *d = bdb_map_get(r->dead, name, nlen);
    return d ? d->gen : 0;
}

tentry *tn_find(bdb_tenants *r, const char *s)
{
    size_t nlen;
    uint64_t gen;
    if (!strchr(s, '@'))
        return bdb_map_get(r->by_name, s, strlen(s));
    if (key_split(s, &nlen, &gen) != 0 || gen == 0 || current_gen(r, s, nlen) != gen)
        return NULL;
    return bdb_map_get(r->by_name, s, nlen);
}

static int cmp_dead(const void *a, const void *b)
{
    return strcmp((*(tdead *const *)a)->name, (*(tdead *const *)b)->name);
}

tdead **tn_sorted_dead(bdb_tenants *r, size_t *n)
{
    size_t cnt = bdb_map_count(r->dead), k = 0;
    tdead **v = calloc(cnt ? cnt : 1, sizeof *v);
    if (!v) {
        *n = 0;
        return NULL;
    }
    size_t pos = 0;
    const void *key;
    size_t klen;
    void *val;
    while (k < cnt && bdb_map_next(r->dead, &pos, &key, &klen, &val))
        v[k++] = val;
    qsort(v, k, sizeof *v, cmp_dead);
    *n = k;
    return v;
}

void tn_free_dead(bdb_tenants *r)
{
    size_t pos = 0;
    const void *key;
    size_t klen;
    void *val;
    while (bdb_map_next(r->dead, &pos, &key, &klen, &val))
        free(val);
}

int tn_storage_key_locked(bdb_tenants *r, const char *name, char *out, size_t outlen)
{
    uint64_t gen = current_gen(r, name, strlen(name));
    int n = gen ? snprintf(out, outlen, "%s@%llu", name, (unsigned long long)gen)
                : snprintf(out, outlen, "%s", name);
    return n >= 0 && (size_t)n < outlen ? BDB_OK : BDB_ERR_LIMIT;
}

int bdb_tenants_storage_key(bdb_tenants *r, const char *name, char *out, size_t outlen)
{
    pthread_mutex_lock(&r->mu);
    int rc = tn_storage_key_locked(r, name, out, outlen);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int bdb_tenants_key_deleted(bdb_tenants *r, const char *key)
{
    size_t nlen;
    uint64_t gen;
    if (key_split(key, &nlen, &gen) != 0)
        return 0;
    pthread_mutex_lock(&r->mu);
    int dead = gen < current_gen(r, key, nlen);
    pthread_mutex_unlock(&r->mu);
    return dead;
}

int bdb_tenants_deleted(bdb_tenants *r, const char *name, uint64_t *gen, int64_t *at_ms)
{
    pthread_mutex_lock(&r->mu);
    tdead *d = bdb_map_get(r->dead, name, strlen(name));
    int dead = d && d->gen; /* 0: a deletion being written, not durable yet */
    if (dead) {
        *gen = d->gen;
        *at_ms = d->at_ms;
    }
    pthread_mutex_unlock(&r->mu);
    return dead;
}

const char *bdb_tenant_key_name(const char *key, char out[BDB_TENANT_NAME_MAX + 1])
{
    const char *at = strchr(key, '@');
    if (!at)
        return key;
    size_t n = (size_t)(at - key);
    if (n > BDB_TENANT_NAME_MAX)
        n = BDB_TENANT_NAME_MAX;
    memcpy(out, key, n);
    out[n] = '\0';
    return out;
}

/* ---------------------------------------------------------------- purging */

static int gen_key(const char *name, uint64_t gen, char *out, size_t outlen)
{
    int n = gen ? snprintf(out, outlen, "%s@%llu", name, (unsigned long long)gen)
                : snprintf(out, outlen, "%s", name);
    return n >= 0 && (size_t)n < outlen ? BDB_OK : BDB_ERR_LIMIT;
}

int bdb_tenants_purge_next(bdb_tenants *r, char *out, size_t outlen)
{
    int rc = 0;
    pthread_mutex_lock(&r->mu);
    size_t pos = 0, kl;
    const void *key;
    void *val;
    while (bdb_map_next(r->dead, &pos, &key, &kl, &val)) {
        tdead *d = val;
        if (d->purged < d->gen) {
            rc = gen_key(d->name, d->purged, out, outlen) == BDB_OK ? 1 : BDB_ERR_LIMIT;
            break;
        }
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

uint64_t bdb_tenants_purge_pending(bdb_tenants *r)
{
    uint64_t n = 0;
    pthread_mutex_lock(&r->mu);
    size_t pos = 0, kl;
    const void *key;
    void *val;
    while (bdb_map_next(r->dead, &pos, &key, &kl, &val)) {
        tdead *d = val;
        n += d->gen - d->purged;
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}

int bdb_tenants_purge_done(bdb_tenants *r, const char *key)
{
    size_t nlen;
    uint64_t gen;
    if (key_split(key, &nlen, &gen) != 0)
        return BDB_ERR_NOTFOUND;
    int brc = tn_begin_change(r);
    if (brc != BDB_OK)
        return brc;
    pthread_mutex_lock(&r->mu);
    tdead *d = bdb_map_get(r->dead, key, nlen);
    if (!d || d->purged != gen || gen >= d->gen) {
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_unlock(&r->save_mu);
        return BDB_ERR_NOTFOUND;
    }
    /* As a deletion: the file is encoded with the change, and memory follows only once
     * the file is durable. */
    bdb_buf b;
    bdb_buf_init(&b);
    d->purged++;
    int rc = tn_encode(r, &b);
    d->purged--;
    pthread_mutex_unlock(&r->mu);
    if (rc == BDB_OK)
        rc = tn_write(r, &b);
    bdb_buf_free(&b);
    if (rc == BDB_OK) {
        pthread_mutex_lock(&r->mu);
        d->purged++; /* save_mu held throughout: nothing else changed d */
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_unlock(&r->save_mu);
    return rc;
}

int bdb_tenants_purged_keys(bdb_tenants *r, char ***keys, size_t *n)
{
    *keys = NULL;
    *n = 0;
    pthread_mutex_lock(&r->mu);
    size_t total = 0, pos = 0, kl;
    const void *key;
    void *val;
    while (bdb_map_next(r->dead, &pos, &key, &kl, &val))
        total += ((tdead *)val)->purged;
    char **v = calloc(total + 1, sizeof *v);
    int rc = v ? BDB_OK : BDB_ERR_NOMEM;
    pos = 0;
    while (rc == BDB_OK && bdb_map_next(r->dead, &pos, &key, &kl, &val)) {
        tdead *d = val;
        for (uint64_t g = 0; g < d->purged && rc == BDB_OK; g++) {
            char k[BDB_TENANT_KEY_MAX + 1];
            gen_key(d->name, g, k, sizeof k); /* fits: a name and a 64-bit number */
            if ((v[*n] = strdup(k)) == NULL)
                rc = BDB_ERR_NOMEM;
            else
                ++*n;
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (rc != BDB_OK) {
        for (size_t i = 0; i < *n; i++)
            free(v[i]);
        free(v);
        *n = 0;
        return rc;
    }
    *keys = v;
    return BDB_OK;
}
