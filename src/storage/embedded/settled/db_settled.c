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
    _Atomic uint8_t retired[SLOTS]; /* moved by retire: moved again after the drop */
} settled;

static settled *state(bdb_db *db)
{
    return *db_consumer_slot(db, &db_settled_consumer);
}

static size_t slot_of(const char *tn)
{
    uint32_t h = 2166136261u; /* FNV-1a: a tenant's name to its counter */
    for (const unsigned char *p = (const unsigned char *)tn; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h % SLOTS;
}

static void bump(bdb_db *db, const char *tn)
{
    atomic_fetch_add(&state(db)->v[slot_of(tn)], 1);
}

static int settled_open(bdb_db *db)
{
    settled *s = bdb_calloc(1, sizeof *s);
    if (!s)
        return BDB_ERR_NOMEM;
    *db_consumer_slot(db, &db_settled_consumer) = s;
    return BDB_OK;
}

/* A write batch: the clock, read once, and whether a report of it is marked. */
struct sbatch {
    int64_t now;
    int marked;
};

/* The first report of a batch older than half the horizon is marked; its release
 * moves the version. The core releases every report after the whole batch's apply
 * (or instead of it), whether the write then succeeds or fails, so one move per batch
 * comes after all its samples are readable, and a backfill's batches do not all hit
 * one counter report by report. */
static int settled_reserve(bdb_db *db, device *d, const bdb_report *r, series *const *ser,
                           void *resv, void *batch)
{
    (void)d, (void)ser;
    struct sbatch *b = batch;
    if (b->marked)
        return BDB_OK;
    if (!b->now)
        b->now = bdb_clock_now(&db->o.clock);
    if (r->ts_ms < b->now - BDB_SETTLED_MS / 2)
        *(uint8_t *)resv = 1, b->marked = 1;
    return BDB_OK;
}

static void settled_release(bdb_db *db, device *d, void *resv)
{
    if (*(uint8_t *)resv)
        bump(db, d->tenant->name);
}

/* Before a retention pass drops a tenant's samples, and again once maintenance is
 * done: a reader between the two sees the first move and still the old samples. */
static int settled_retire(bdb_db *db, const char *tn, const blockent *v, size_t n, int64_t ws,
                          int64_t we)
{
    (void)v, (void)n, (void)ws, (void)we;
    bump(db, tn);
    atomic_store(&state(db)->retired[slot_of(tn)], 1);
    return BDB_OK;
}

static int settled_maintain(bdb_db *db)
{
    settled *s = state(db);
    for (size_t i = 0; i < SLOTS; i++)
        if (atomic_exchange(&s->retired[i], 0))
            atomic_fetch_add(&s->v[i], 1);
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
    *version = atomic_load(&state(db)->v[slot_of(tn)]);
    return BDB_OK;
}

const db_consumer db_settled_consumer = {
    .name = "settled",
    .resv_size = 1,
    .batch_size = sizeof(struct sbatch),
    .open = settled_open,
    .reserve = settled_reserve,
    .release = settled_release,
    .retire = settled_retire,
    .maintain = settled_maintain,
    .forget_tenant = settled_forget,
    .close = settled_close,
};
