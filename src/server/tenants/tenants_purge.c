/* tenants_purge: the thread that removes deleted tenants' data (tenants_purge.h). */
#include "server/tenants/tenants_purge.h"

#include "bucketdb/bdb.h"
#include "common/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#define PURGE_IDLE_S 60       /* a look without a kick: a deletion another way, a missed kick */
#define PURGE_RETRY_MIN_S 1   /* first delay after a failure */
#define PURGE_RETRY_MAX_S 300 /* the delay doubles up to this */

struct bdb_purge {
    bdb_tenants *reg;
    bdb_db *db;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stopping, kicked;
    _Atomic uint64_t purged, failures;
    atomic_int last_error;
};

/* Sleeps up to secs unless kicked or stopping; returns with mu held. */
static void wait_for(bdb_purge *p, int secs)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += secs;
    while (!p->stopping && !p->kicked)
        if (pthread_cond_timedwait(&p->cv, &p->mu, &ts) != 0)
            break;
    p->kicked = 0;
}

static void fail(bdb_purge *p, const char *key, const char *what, int rc, int delay)
{
    atomic_fetch_add(&p->failures, 1);
    atomic_store(&p->last_error, rc);
    if (delay)
        BDB_ERROR("purge of deleted tenant key %s: %s failed: %s; retrying in %d s", key, what,
                  bdb_strerror(rc), delay);
    else
        BDB_ERROR("purge of deleted tenant key %s: %s failed: %s; retrying at the next start", key,
                  what, bdb_strerror(rc));
}

/* A write that resolved its tenant just before the deletion can reach the engine after
 * the purge dropped the key (a request still receiving its body, say), which puts the
 * key back with that write's devices: unreachable, and expired, but in the catalog.
 * At start, purged keys the catalog knows again are dropped once more. */
static int stopping(bdb_purge *p)
{
    pthread_mutex_lock(&p->mu);
    int s = p->stopping;
    pthread_mutex_unlock(&p->mu);
    return s;
}

static void recheck_purged(bdb_purge *p)
{
    char **keys;
    size_t n;
    if (bdb_tenants_purged_keys(p->reg, &keys, &n) != BDB_OK)
        return; /* out of memory: looked at again at the next start */
    for (size_t i = 0; i < n; i++) {
        uint64_t devs = 0, fresh = 0;
        if (!stopping(p) && bdb_db_tenant_usage(p->db, keys[i], NULL, &devs, &fresh) == BDB_OK &&
            devs) {
            BDB_WARN("purged tenant key %s holds %llu device(s) again (a write in flight during "
                     "its purge): dropping it again",
                     keys[i], (unsigned long long)devs);
            int rc = bdb_db_drop_tenant(p->db, keys[i]);
            if (rc != BDB_OK)
                fail(p, keys[i], "dropping it again", rc, 0);
        }
        free(keys[i]);
    }
    free(keys);
}

static void *purge_main(void *arg)
{
    bdb_purge *p = arg;
    int delay = PURGE_RETRY_MIN_S;
    recheck_purged(p);
    pthread_mutex_lock(&p->mu);
    while (!p->stopping) {
        char key[BDB_TENANT_KEY_MAX + 1];
        int more = bdb_tenants_purge_next(p->reg, key, sizeof key);
        if (more != 1) {
            wait_for(p, PURGE_IDLE_S);
            continue;
        }
        pthread_mutex_unlock(&p->mu);
        int rc = bdb_db_drop_tenant(p->db, key);
        const char *what = "the drop";
        if (rc == BDB_OK) {
            /* blocks: the key's TTL has expired (server.c), so retention takes them */
            int mrc = bdb_db_maintain(p->db);
            if (mrc != BDB_OK)
                BDB_WARN("purge of %s: maintenance failed (%s); the blocks go at the next one", key,
                         bdb_strerror(mrc));
            rc = bdb_tenants_purge_done(p->reg, key);
            what = "recording it in the registry";
        }
        pthread_mutex_lock(&p->mu);
        if (rc == BDB_OK) {
            atomic_fetch_add(&p->purged, 1);
            BDB_INFO("deleted tenant key %s purged", key);
            delay = PURGE_RETRY_MIN_S;
            continue;
        }
        fail(p, key, what, rc, delay);
        wait_for(p, delay);
        delay = delay * 2 > PURGE_RETRY_MAX_S ? PURGE_RETRY_MAX_S : delay * 2;
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

bdb_purge *bdb_purge_start(bdb_tenants *r, bdb_db *db)
{
    bdb_purge *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->reg = r;
    p->db = db;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (pthread_create(&p->th, NULL, purge_main, p) != 0) {
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    return p;
}

void bdb_purge_kick(bdb_purge *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->kicked = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void bdb_purge_stop(bdb_purge *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->th, NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void bdb_purge_get_stats(bdb_purge *p, bdb_purge_stats *st)
{
    st->purged = p ? atomic_load(&p->purged) : 0;
    st->failures = p ? atomic_load(&p->failures) : 0;
    st->last_error = p ? atomic_load(&p->last_error) : 0;
}
