/* db_consumer: how what the engine derives from its samples (the current-state index,
 * late marking, event counts per partition, tiers, fleet tables, sink usage) follows
 * the write, flush and maintenance paths without the core knowing any of it.
 *
 * A consumer is a table of phase functions, registered when the db opens
 * (db_features.c names every built-in one; registration order is call order, and close
 * runs in reverse). The core calls each phase of every consumer that has it at one
 * documented point, and a new feature registers instead of adding a call, a branch or a
 * field to the core. A phase left NULL is skipped.
 *
 * Memory the core keeps for a consumer without knowing its type:
 *  - state: one pointer per db (db_consumer_slot), owned by the consumer;
 *  - resv_size bytes per report of a write batch, zeroed, between reserve and release;
 *  - batch_size bytes per write batch, zeroed, between the reserves and reserve_batch;
 *  - dev_size bytes per device, zeroed, for the device's life (db_consumer_dev).
 *
 * Phases, in the order a db meets them:
 *  open          after the catalog and blocks are loaded, before the WAL replay. An
 *                error fails the open.
 *  dev_init      a device was made (loaded = 0), or the catalog load decoded it
 *                (loaded = 1: its first_ts/last_ts are set). Caller holds what made it.
 *  reserve       write, once per report, before the WAL append, under the device's
 *                stripe lock: make the room apply will need, so that a logged record
 *                cannot fail half-applied. ser: the report's series, in the order of
 *                its metrics. batch: this consumer's batch slot.
 *  reserve_batch write, once per batch after every reserve, before the WAL append.
 *  apply         write (and WAL replay), once per report after the head append, under
 *                the device's stripe lock. resv is NULL on replay (the consumer
 *                allocates as it goes; out of memory fails the open). May set
 *                *a->relearn to ask the core to reconsider the device's bucket after
 *                the batch (a->relearn may be NULL).
 *  ack           write, once per batch after its WAL fsync (every report applied),
 *                before release, outside every lock: what must hold before the batch
 *                is acknowledged; it may block. An error fails the write (its records
 *                stay logged and applied: a retry writes the same values again).
 *                resv: report i's bytes of this consumer at resv + i * stride.
 *  release       write, once per reserved report, after its apply or instead of it (the
 *                write failed), under the stripe lock: give back what apply did not
 *                take. Called for every report whose reserve was called, also when that
 *                reserve failed, and only once every report of the batch that is
 *                applied has been (releases come last in a write).
 *  freeze        flush, with the head frozen, under flush_lock exclusive and cat_lock
 *                shared: take what the flush will need from the live state.
 *  flush         flush, after the blocks are written (or the sink rows committed), in
 *                registration order: rc is the flush's status so far, the return value
 *                its new status (a consumer whose rc is not BDB_OK must remove whatever
 *                it wrote and return rc). v: the frozen series in key order.
 *  commit        flush, after the catalog is saved and before the WAL segments it
 *                covers go: an error keeps the WAL (the flush counts as failed).
 *  retire        maintenance, before blocks [v, v + n) of window [ws, we) lose tenant
 *                tn's expired samples (dropped or compacted away).
 *  maintain      maintenance, after the blocks' retention and compaction.
 *  forget_tenant a tenant leaves memory (dropped, live or on replay), before its
 *                devices are freed; caller holds flush_lock exclusively or replays.
 *  purge_tenant  a dropped tenant's files and rows go (bdb_db_drop_tenant's step 4).
 *  close         the db closes (reverse registration order): free the state.
 *
 * Every phase function returns BDB_OK or an error of db.h's set unless typed void. */
#ifndef BDB_DB_CONSUMER_H
#define BDB_DB_CONSUMER_H

#include "storage/embedded/core/db_int.h"

#include <stddef.h>
#include <stdint.h>

/* What apply sees of one report, after its samples are in the head. */
typedef struct db_apply {
    int64_t ts;
    int64_t prev_last_ts; /* the device's newest event before this report */
    const char *state;    /* NULL: the report has none */
    size_t slen;
    struct series *const *ser; /* the report's series, in the order of its metrics */
    const double *vals;
    uint32_t nm;
    const bdb_kv *attrs;
    uint32_t na;
    int *relearn; /* may be NULL */
} db_apply;

typedef struct db_consumer {
    const char *name;
    uint32_t resv_size, batch_size, dev_size;
    int (*open)(bdb_db *db);
    void (*dev_init)(bdb_db *db, device *d, int loaded);
    int (*reserve)(bdb_db *db, device *d, const bdb_report *r, struct series *const *ser,
                   void *resv, void *batch);
    int (*reserve_batch)(bdb_db *db, void *batch);
    int (*apply)(bdb_db *db, device *d, const db_apply *a, void *resv);
    void (*release)(bdb_db *db, device *d, void *resv);
    int (*ack)(bdb_db *db, const char *tn, const bdb_report *reps, size_t n, const void *resv,
               size_t stride);
    int (*freeze)(bdb_db *db);
    int (*flush)(bdb_db *db, struct series *const *v, size_t n, uint64_t sealed, int rc);
    int (*commit)(bdb_db *db, uint64_t sealed);
    int (*retire)(bdb_db *db, const char *tn, const blockent *v, size_t n, int64_t ws, int64_t we);
    int (*maintain)(bdb_db *db);
    void (*forget_tenant)(bdb_db *db, const tenant *t);
    int (*purge_tenant)(bdb_db *db, const char *tn);
    void (*close)(bdb_db *db);
} db_consumer;

/* Adds c (static storage) to db. BDB_OK, or BDB_ERR_INVALID when DB_MAX_CONSUMERS are
 * registered already or the sizes exceed what the core keeps. Before the catalog loads
 * only (db_open). */
int db_consumer_register(bdb_db *db, const db_consumer *c);
/* Registers every built-in consumer (db_features.c: the one place that names them). */
int db_features_register(bdb_db *db);

/* c's state pointer in db; NULL if c is not registered. */
void **db_consumer_slot(bdb_db *db, const db_consumer *c);
/* c's state in db, made by make(db) on first use, under db->ext_mu: for a consumer
 * whose state is built lazily (its files read at its first use). NULL when make
 * returns NULL (out of memory): made again at the next use. */
void *db_consumer_state(bdb_db *db, const db_consumer *c, void *(*make)(bdb_db *db));
/* c's state in db, taken out of its slot under db->ext_mu (NULL: none): for close. */
void *db_consumer_take(bdb_db *db, const db_consumer *c);
/* c's dev_size bytes of device d (c registered with dev_size > 0). */
void *db_consumer_dev(bdb_db *db, const device *d, const db_consumer *c);
/* Where c's bytes start in every device's d->ext (c registered with dev_size > 0):
 * for a consumer that finds them on its hot path without the lookup above. */
uint32_t db_consumer_dev_off(bdb_db *db, const db_consumer *c);

/* The phases, called by the core (see above). *_all returns the first error and still
 * calls the others where the text above says so. */
int db_consumers_open(bdb_db *db);
void db_consumers_dev_init(bdb_db *db, device *d, int loaded);
/* resv: db->cons.resv_total bytes for this report, batch: db->cons.batch_total bytes */
int db_consumers_reserve(bdb_db *db, device *d, const bdb_report *r, struct series *const *ser,
                         void *resv, void *batch);
int db_consumers_reserve_batch(bdb_db *db, void *batch);
int db_consumers_apply(bdb_db *db, device *d, const db_apply *a, void *resv);
void db_consumers_release(bdb_db *db, device *d, void *resv);
/* resv: report 0's reservation (db->cons.resv_total bytes per report, back to back). */
int db_consumers_ack(bdb_db *db, const char *tn, const bdb_report *reps, size_t n,
                     const void *resv);
int db_consumers_freeze(bdb_db *db);
int db_consumers_flush(bdb_db *db, struct series *const *v, size_t n, uint64_t sealed, int rc);
int db_consumers_commit(bdb_db *db, uint64_t sealed);
int db_consumers_retire(bdb_db *db, const char *tn, const blockent *v, size_t n, int64_t ws,
                        int64_t we);
int db_consumers_maintain(bdb_db *db);
void db_consumers_forget_tenant(bdb_db *db, const tenant *t);
int db_consumers_purge_tenant(bdb_db *db, const char *tn);
void db_consumers_close(bdb_db *db);

#endif
