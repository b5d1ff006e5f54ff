/* db_state_sink: the engine's side of the sink's state, registry and counter ops
 * (storage/sink.h; private to db*.c).
 *
 * Flush: db_ss_flush sends every device whose current-state entry changed since the
 * last confirmed flush: its latest event (state_put), its registry row (device_put)
 * and the event counts of its partitions from the oldest report it received since
 * (count_put), after the raw samples' puts and before the flush commits; the WAL
 * segments go only after all of it is confirmed. db_ss_sent marks those changes sent
 * once the flush committed; a failed flush sends them again next time.
 *
 * Reads: with such a sink the public readers (bdb_db_latest, bdb_db_state_devices,
 * bdb_db_state_counts, bdb_db_list_devices, bdb_db_get_device,
 * bdb_db_telemetry_by_tenant, all defined in db_state_sink.c) answer from the sink,
 * merged with the engine's local index for what is not flushed yet (per field the
 * newer event wins). Without one they are the local readers below. */
#ifndef BDB_DB_STATE_SINK_H
#define BDB_DB_STATE_SINK_H

#include "storage/embedded/core/db.h"
#include "storage/embedded/hot/db_hot.h"
#include "storage/embedded/core/db_int.h"

#include <stdint.h>

/* 1 when db->o.sink takes the state ops. */
int db_ss_on(bdb_db *db);
/* Called by db_flush after the raw puts (rc: their status so far); returns the new
 * status. *round is what db_ss_sent needs after the commit. */
int db_ss_flush(bdb_db *db, int rc, uint64_t *round);
void db_ss_sent(bdb_db *db, uint64_t round);

/* The local readers (db_latest.c, db_read.c, db_hot.c), same contracts as db.h's. */
int db_latest_get_local(bdb_db *db, const char *tn, const char *dn,
                        int (*cb)(void *ctx, const bdb_latest *l), void *ctx);
int db_latest_state_devices_local(bdb_db *db, const char *tn, const char *state, const char *after,
                                  size_t limit,
                                  int (*cb)(void *ctx, const char *dn, int64_t state_ts), void *ctx,
                                  int *more, uint64_t *total);
int db_latest_state_counts_local(bdb_db *db, const char *tn,
                                 int (*cb)(void *ctx, const char *state, uint64_t devices),
                                 void *ctx, uint64_t *no_state);
int db_read_get_device_local(bdb_db *db, const char *tn, const char *dn,
                             int (*cb)(void *, const bdb_device_info *), void *ctx);
int db_read_list_devices_local(bdb_db *db, const char *tn,
                               int (*cb)(void *, const bdb_device_info *), void *ctx);
int db_hot_tbt_local(bdb_db *db, const char *tn, int64_t from, int64_t to,
                     int (*cb)(void *ctx, const bdb_tbt_row *r), void *ctx);

/* db_latest.c: change rounds and a walk over the index. db_latest_round closes the
 * current round and returns its number; entries changed later belong to the next. */
uint64_t db_latest_round(bdb_db *db);
void db_latest_round_sent(bdb_db *db, uint64_t round);
/* Calls fn for every entry (of tenant tn, NULL = all; changed_only: changed since the
 * last sent round) with its device's stripe lock held: fn must not take engine
 * locks. dirty_lo is the oldest report time applied since the last sent round. */
typedef void (*db_latest_walk_fn)(void *ud, device *d, const bdb_latest *l, int64_t dirty_lo);
/* BDB_OK, or BDB_ERR_NOMEM part way (fn has seen some entries only). */
int db_latest_walk(bdb_db *db, const char *tn, int changed_only, db_latest_walk_fn fn, void *ud);

#endif
