/* tenants_store: the registry kept in a store besides <dir>/tenants (tenants.h,
 * bdb_tenants_open_store): which copy is the truth at open, and a registry that could
 * not be read from the store at open made the store's before its first change. */
#include "server/tenants/tenants_int.h"

#include "bucketdb/bdb.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The registry document of the store as what, for messages. */
static void doc_name(const bdb_tenants *r, char *out, size_t cap)
{
    snprintf(out, cap, "the tenant registry document of %s", r->store->ops->describe(r->store));
}

int bdb_tenants_open_store(const char *dir, bdb_sink *store, int offline_start, bdb_tenants **out,
                           char *err, size_t errlen)
{
    if (!store || !store->ops->doc_put || !store->ops->doc_get)
        return bdb_tenants_open(dir, out, err, errlen);
    if (errlen)
        err[0] = '\0';
    bdb_tenants *r = tn_new(dir);
    if (!r)
        return BDB_ERR_NOMEM;
    r->store = store;
    const char *where = store->ops->describe(store);
    char what[400], derr[400] = "";
    doc_name(r, what, sizeof what);
    void *doc = NULL;
    size_t dlen = 0;
    int rc = store->ops->doc_get(store, TN_DOC_KEY, &doc, &dlen, derr, sizeof derr);
    if (rc == BDB_OK) { /* the truth: the local file follows it */
        rc = tn_parse(r, doc, dlen, what, err, errlen);
        bdb_buf b = {.data = doc, .len = dlen, .cap = dlen};
        if (rc == BDB_OK && (rc = tn_write_file(r, &b)) != BDB_OK)
            snprintf(err, errlen, "cannot write %s: %s", r->path, bdb_strerror(rc));
        if (rc == BDB_OK) {
            bdb_buf_append(&r->stored, doc, dlen);
            r->synced = 1;
            BDB_INFO("tenant registry: %zu tenant(s) from %s (rewritten to %s)",
                     bdb_map_count(r->by_name), where, r->path);
        }
    } else if (rc == BDB_ERR_CORRUPT) { /* never half-used: the start stops here */
        snprintf(err, errlen, "%s is refused: %s", what, derr);
    } else {
        int reachable = rc == BDB_ERR_NOTFOUND;
        bdb_buf b;
        bdb_buf_init(&b);
        int frc = tn_read_file(r->path, &b, err, errlen);
        if (frc == BDB_OK)
            frc = tn_parse(r, b.data, b.len, r->path, err, errlen);
        rc = BDB_OK;
        if (frc == BDB_OK && reachable) { /* a deployment moving its registry up */
            if (store->ops->doc_put(store, TN_DOC_KEY, b.data, b.len) == BDB_OK) {
                bdb_buf_append(&r->stored, b.data, b.len);
                r->synced = 1;
                BDB_WARN("tenant registry: %s had none; stored %s there (%zu tenant(s))", where,
                         r->path, bdb_map_count(r->by_name));
            } else {
                BDB_WARN("tenant registry: cannot store %s in %s: using the file; changes "
                         "fail until it answers",
                         r->path, where);
            }
        } else if (frc == BDB_OK) {
            BDB_WARN("tenant registry: %s cannot be reached (%s): using %s, which may be "
                     "older than the store's; tenant changes fail until it answers",
                     where, derr[0] ? derr : bdb_strerror(rc), r->path);
        } else if (frc == BDB_ERR_NOTFOUND && reachable) {
            r->synced = 1; /* empty on both sides */
        } else if (frc == BDB_ERR_NOTFOUND && offline_start) {
            BDB_WARN("tenant registry: %s cannot be reached and %s does not exist: starting "
                     "with no tenant (offline_start); every tenant token is refused and tenant "
                     "changes fail until it answers",
                     where, r->path);
        } else if (frc == BDB_ERR_NOTFOUND) {
            snprintf(err, errlen,
                     "%s cannot be reached (%s) and %s does not exist: the tenants and their "
                     "tokens are only there, so this server does not start without them "
                     "(offline_start=true starts with no tenant)",
                     where, derr[0] ? derr : bdb_strerror(rc), r->path);
            rc = BDB_ERR_IO;
        } else {
            rc = frc;
        }
        bdb_buf_free(&b);
    }
    free(doc);
    if (rc != BDB_OK) {
        bdb_tenants_close(r);
        return rc;
    }
    *out = r;
    return BDB_OK;
}

/* The store's registry replaces the one in memory (read from the file, or empty, at
 * an open that could not reach the store). The run-time counters and rate buckets of
 * the tenants in both stay. Caller holds save_mu. */
static int adopt(bdb_tenants *r, const void *doc, size_t len)
{
    char what[400], err[600];
    doc_name(r, what, sizeof what);
    bdb_tenants *t = tn_new(r->dir);
    if (!t)
        return BDB_ERR_NOMEM;
    int rc = tn_parse(t, doc, len, what, err, sizeof err);
    if (rc == BDB_ERR_CORRUPT)
        BDB_ERROR("tenant registry: %s is refused: %s", what, err);
    bdb_buf b = {.data = (uint8_t *)doc, .len = len, .cap = len};
    if (rc == BDB_OK && (rc = tn_write_file(r, &b)) != BDB_OK)
        BDB_ERROR("tenant registry: cannot write %s: %s", r->path, bdb_strerror(rc));
    if (rc != BDB_OK) {
        bdb_tenants_close(t);
        return rc;
    }
    pthread_mutex_lock(&r->mu);
    size_t pos = 0;
    const void *key;
    size_t klen;
    void *val;
    while (bdb_map_next(t->by_name, &pos, &key, &klen, &val)) {
        tentry *e = val, *old = bdb_map_get(r->by_name, key, klen);
        if (old) {
            memcpy(e->info.rejections, old->info.rejections, sizeof e->info.rejections);
            e->info.ingested_samples = old->info.ingested_samples;
            e->info.ingested_requests = old->info.ingested_requests;
            e->tb = old->tb;
        }
    }
    bdb_map *m = r->by_name;
    r->by_name = t->by_name, t->by_name = m;
    m = r->by_hash;
    r->by_hash = t->by_hash, t->by_hash = m;
    m = r->dead;
    r->dead = t->dead, t->dead = m;
    size_t n = bdb_map_count(r->by_name);
    pthread_mutex_unlock(&r->mu);
    bdb_tenants_close(t); /* frees the registry replaced */
    BDB_WARN("tenant registry: replaced by %s (%zu tenant(s)), which could not be read at start",
             what, n);
    return BDB_OK;
}

/* Makes the registry in memory the store's: adopts the store's document, or stores
 * this one when it has none. Caller holds save_mu. */
static int sync_store(bdb_tenants *r)
{
    void *doc = NULL;
    size_t len = 0;
    char err[400] = "";
    int rc = r->store->ops->doc_get(r->store, TN_DOC_KEY, &doc, &len, err, sizeof err);
    if (rc == BDB_OK) {
        rc = adopt(r, doc, len);
        if (rc == BDB_OK)
            bdb_buf_append(&r->stored, doc, len);
    } else if (rc == BDB_ERR_NOTFOUND) {
        bdb_buf b;
        bdb_buf_init(&b);
        pthread_mutex_lock(&r->mu);
        rc = tn_encode(r, &b);
        pthread_mutex_unlock(&r->mu);
        if (rc == BDB_OK && r->store->ops->doc_put(r->store, TN_DOC_KEY, b.data, b.len) != BDB_OK)
            rc = BDB_ERR_AGAIN;
        if (rc == BDB_OK)
            bdb_buf_append(&r->stored, b.data, b.len);
        bdb_buf_free(&b);
    } else if (rc == BDB_ERR_CORRUPT) {
        char what[400];
        doc_name(r, what, sizeof what);
        BDB_ERROR("tenant registry: %s is refused: %s", what, err);
    } else {
        rc = BDB_ERR_AGAIN;
    }
    free(doc);
    if (rc == BDB_OK)
        r->synced = 1;
    return rc;
}

int tn_begin_change(bdb_tenants *r)
{
    pthread_mutex_lock(&r->save_mu);
    int rc = r->store && !r->synced ? sync_store(r) : BDB_OK;
    if (rc != BDB_OK)
        pthread_mutex_unlock(&r->save_mu);
    return rc;
}
