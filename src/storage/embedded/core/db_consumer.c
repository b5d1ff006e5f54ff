/* db_consumer: the registry of consumers and the calls of their phases (db_consumer.h).
 * The write path calls reserve, apply and release once per report: these loops stay
 * plain (a NULL check and an indirect call per registered consumer), with nothing
 * allocated. */
#include "storage/embedded/core/db_consumer.h"

#include "bucketdb/bdb.h"

#include <stdlib.h>

/* Per-report, per-batch and per-device bytes are kept 8-aligned. */
#define ALIGN8(n) (((n) + 7u) & ~7u)
#define MAX_BYTES 4096u /* what the core keeps per report, batch or device in all */

int db_consumer_register(bdb_db *db, const db_consumer *c)
{
    struct db_consumers *k = &db->cons;
    if (k->n == DB_MAX_CONSUMERS || k->resv_total + ALIGN8(c->resv_size) > MAX_BYTES ||
        k->batch_total + ALIGN8(c->batch_size) > MAX_BYTES ||
        k->dev_total + ALIGN8(c->dev_size) > MAX_BYTES)
        return BDB_ERR_INVALID;
    k->c[k->n] = c;
    k->state[k->n] = NULL;
    k->resv_off[k->n] = k->resv_total;
    k->batch_off[k->n] = k->batch_total;
    k->dev_off[k->n] = k->dev_total;
    k->resv_total += ALIGN8(c->resv_size);
    k->batch_total += ALIGN8(c->batch_size);
    k->dev_total += ALIGN8(c->dev_size);
    k->n++;
    return BDB_OK;
}

void **db_consumer_slot(bdb_db *db, const db_consumer *c)
{
    for (uint32_t i = 0; i < db->cons.n; i++)
        if (db->cons.c[i] == c)
            return &db->cons.state[i];
    return NULL;
}

void *db_consumer_state(bdb_db *db, const db_consumer *c, void *(*make)(bdb_db *db))
{
    pthread_mutex_lock(&db->ext_mu);
    void **slot = db_consumer_slot(db, c);
    if (!*slot)
        *slot = make(db);
    void *s = *slot;
    pthread_mutex_unlock(&db->ext_mu);
    return s;
}

void *db_consumer_take(bdb_db *db, const db_consumer *c)
{
    pthread_mutex_lock(&db->ext_mu);
    void **slot = db_consumer_slot(db, c);
    void *s = *slot;
    *slot = NULL;
    pthread_mutex_unlock(&db->ext_mu);
    return s;
}

void *db_consumer_dev(bdb_db *db, const device *d, const db_consumer *c)
{
    for (uint32_t i = 0; i < db->cons.n; i++)
        if (db->cons.c[i] == c)
            return (char *)d->ext + db->cons.dev_off[i];
    return NULL;
}

uint32_t db_consumer_dev_off(bdb_db *db, const db_consumer *c)
{
    for (uint32_t i = 0; i < db->cons.n; i++)
        if (db->cons.c[i] == c)
            return db->cons.dev_off[i];
    abort(); /* not registered: a programming error */
}

#define EACH(i) for (uint32_t i = 0; i < db->cons.n; i++)
#define C(i) (db->cons.c[i])

int db_consumers_open(bdb_db *db)
{
    EACH(i)
    {
        if (C(i)->open) {
            int rc = C(i)->open(db);
            if (rc != BDB_OK)
                return rc;
        }
    }
    return BDB_OK;
}

void db_consumers_dev_init(bdb_db *db, device *d, int loaded)
{
    EACH(i)
    {
        if (C(i)->dev_init)
            C(i)->dev_init(db, d, loaded);
    }
}

int db_consumers_reserve(bdb_db *db, device *d, const bdb_report *r, series *const *ser, void *resv,
                         void *batch)
{
    EACH(i)
    {
        if (C(i)->reserve) {
            int rc = C(i)->reserve(db, d, r, ser, (char *)resv + db->cons.resv_off[i],
                                   (char *)batch + db->cons.batch_off[i]);
            if (rc != BDB_OK)
                return rc;
        }
    }
    return BDB_OK;
}

int db_consumers_reserve_batch(bdb_db *db, void *batch)
{
    EACH(i)
    {
        if (C(i)->reserve_batch) {
            int rc = C(i)->reserve_batch(db, (char *)batch + db->cons.batch_off[i]);
            if (rc != BDB_OK)
                return rc;
        }
    }
    return BDB_OK;
}

int db_consumers_apply(bdb_db *db, device *d, const db_apply *a, void *resv)
{
    EACH(i)
    {
        if (C(i)->apply) {
            int rc = C(i)->apply(db, d, a, resv ? (char *)resv + db->cons.resv_off[i] : NULL);
            if (rc != BDB_OK)
                return rc;
        }
    }
    return BDB_OK;
}

void db_consumers_release(bdb_db *db, device *d, void *resv)
{
    EACH(i)
    {
        if (C(i)->release)
            C(i)->release(db, d, (char *)resv + db->cons.resv_off[i]);
    }
}

int db_consumers_ack(bdb_db *db, const char *tn, const bdb_report *reps, size_t n, const void *resv)
{
    EACH(i)
    {
        if (C(i)->ack) {
            int rc = C(i)->ack(db, tn, reps, n, (const char *)resv + db->cons.resv_off[i],
                               db->cons.resv_total);
            if (rc != BDB_OK)
                return rc;
        }
    }
    return BDB_OK;
}

int db_consumers_freeze(bdb_db *db)
{
    int rc = BDB_OK;
    EACH(i)
    {
        if (C(i)->freeze) {
            int r = C(i)->freeze(db);
            if (rc == BDB_OK)
                rc = r;
        }
    }
    return rc;
}

int db_consumers_flush(bdb_db *db, series *const *v, size_t n, uint64_t sealed, int rc)
{
    EACH(i)
    {
        if (C(i)->flush)
            rc = C(i)->flush(db, v, n, sealed, rc);
    }
    return rc;
}

int db_consumers_commit(bdb_db *db, uint64_t sealed)
{
    EACH(i)
    {
        if (C(i)->commit) {
            int rc = C(i)->commit(db, sealed);
            if (rc != BDB_OK)
                return rc;
        }
    }
    return BDB_OK;
}

int db_consumers_retire(bdb_db *db, const char *tn, const blockent *v, size_t n, int64_t ws,
                        int64_t we)
{
    EACH(i)
    {
        if (C(i)->retire) {
            int rc = C(i)->retire(db, tn, v, n, ws, we);
            if (rc != BDB_OK)
                return rc;
        }
    }
    return BDB_OK;
}

/* Every consumer maintains even when another failed (one bad part must not stop the
 * others'); the first error is returned. */
int db_consumers_maintain(bdb_db *db)
{
    int rc = BDB_OK;
    EACH(i)
    {
        if (C(i)->maintain) {
            int r = C(i)->maintain(db);
            if (rc == BDB_OK)
                rc = r;
        }
    }
    return rc;
}

void db_consumers_forget_tenant(bdb_db *db, const tenant *t)
{
    EACH(i)
    {
        if (C(i)->forget_tenant)
            C(i)->forget_tenant(db, t);
    }
}

/* Stops at the first error: bdb_db_drop_tenant is called again to complete a drop. */
int db_consumers_purge_tenant(bdb_db *db, const char *tn)
{
    EACH(i)
    {
        if (C(i)->purge_tenant) {
            int rc = C(i)->purge_tenant(db, tn);
            if (rc != BDB_OK)
                return rc;
        }
    }
    return BDB_OK;
}

void db_consumers_close(bdb_db *db)
{
    for (uint32_t i = db->cons.n; i-- > 0;) {
        if (C(i)->close)
            C(i)->close(db);
    }
}
