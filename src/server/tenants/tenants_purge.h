/* tenants_purge: removing the data of deleted tenants (docs/TENANCY.md#deleting-a-tenant).
 *
 * A deletion makes the old generation's key unreachable at once (tenants_gen.c); a
 * background thread then drops the key's data from the engine (bdb_db_drop_tenant:
 * head, WAL, catalog, current state, late marks, fleet and tier files, and the rows of
 * a sink such as Cassandra), runs maintenance so that expired block files go, and
 * records the generation as purged in the registry ("purged=" of the deleted line).
 * At start every generation not recorded is purged again (a crash in between, a
 * failure), which is harmless for the ones that were: the drop is idempotent. A
 * failed purge is logged, counted and retried with a growing delay (1 s .. 5 min). */
#ifndef BDB_TENANTS_PURGE_H
#define BDB_TENANTS_PURGE_H

#include "server/tenants/tenants.h"
#include "storage/embedded/core/db.h"

#include <stdint.h>

typedef struct bdb_purge bdb_purge;

/* Starts the thread (NULL when it cannot start: then nothing is purged until the next
 * start, and the data stays unreachable). */
bdb_purge *bdb_purge_start(bdb_tenants *r, bdb_db *db);
/* A deletion was recorded: purge now instead of at the next periodic look (60 s). */
void bdb_purge_kick(bdb_purge *p);
/* Waits for a running drop to end (a sink's deletes are bounded by its timeouts) and
 * stops the thread; call before the db closes. Safe on NULL. */
void bdb_purge_stop(bdb_purge *p);

typedef struct bdb_purge_stats {
    uint64_t purged;   /* generations purged since the start */
    uint64_t failures; /* drops or registry records that failed (retried) */
    int last_error;    /* BDB_ERR_* of the last failure, 0 = none */
} bdb_purge_stats;
void bdb_purge_get_stats(bdb_purge *p, bdb_purge_stats *st);

#endif
