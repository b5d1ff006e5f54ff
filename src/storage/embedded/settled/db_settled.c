/* db_settled: the settled version per tenant (db_settled.h). */
#include "storage/embedded/settled/db_settled.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/timeutil.h"
#include "storage/embedded/core/db_consumer.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 256

typedef struct settled {
    _Atomic uint64_t v[SLOTS];
} settled;

static _Atomic uint64_t *slot_of(bdb_db *db, const char *tn)
{
    settled *s = *db_consumer_slot(db, &db_settled_consumer);
    uint32_t h = 2166136261u; /* FNV-1a: a tenant's name to its counter */
    for (const unsigned char *p = (const unsigned char *)tn; *p; p++)
        h = (h ^ *p) * 16777619u;
    return &s->v[h % SLOTS];
}

static void bump(bdb_db *db, const char *tn)
{
    atomic_fetch_add_explicit(slot_of(db, tn), 1, memory_order_release);
}

static int settled_open(bdb_db *db)
{
    settled *s = bdb_calloc(1, sizeof *s);
    if (!s)
        return BDB_ERR_NOMEM;
    *db_consumer_slot(db, &db_settled_consumer) = s;
    return BDB_OK;
}

static int settled_ack(bdb_db *db, const char *tn, const bdb_report *reps, size_t n,
                       const void *resv, size_t stride)
{
    (void)resv, (void)stride;
    int64_t oldest = INT64_MAX;
    for (size_t i = 0; i < n; i++)
        oldest = reps[i].ts_ms < oldest ? reps[i].ts_ms : oldest;
    int64_t now = bdb_clock_now(&db->o.clock);
    if (n && oldest < now - BDB_SETTLED_MS / 2)
        bump(db, tn);
    return BDB_OK;
}

static int settled_retire(bdb_db *db, const char *tn, const blockent *v, size_t n, int64_t ws,
                          int64_t we)
{
    (void)v, (void)n, (void)ws, (void)we;
    bump(db, tn);
    return BDB_OK;
}

static void settled_forget(bdb_db *db, const tenant *t)
{
    bump(db, t->name);
}

static void settled_close(bdb_db *db)
{
    void **p = db_consumer_slot(db, &db_settled_consumer);
    free(*p);
    *p = NULL;
}

int bdb_db_settled_version(bdb_db *db, const char *tn, uint64_t *version)
{
    if (db->o.sink)
        return BDB_ERR_INVALID; /* other nodes write the same keyspace */
    if (atomic_load(&db->readonly))
        return BDB_ERR_READONLY; /* a failed write may have left samples readable */
    if (!*db_consumer_slot(db, &db_settled_consumer))
        return BDB_ERR_INVALID;
    *version = atomic_load_explicit(slot_of(db, tn), memory_order_acquire);
    return BDB_OK;
}

const db_consumer db_settled_consumer = {
    .name = "settled",
    .open = settled_open,
    .ack = settled_ack,
    .retire = settled_retire,
    .forget_tenant = settled_forget,
    .close = settled_close,
};
