/* db_late_sink: the engine's side of the sink's late-arrival ops (storage/sink.h;
 * private to db*.c).
 *
 * Flush: db_ls_flush hands the sink the late events noted since the last confirmed
 * flush (the entries of db_tier_late.c's recent list it has not sent), with their
 * tenant's raw TTL, after the raw samples' puts and before the flush commits; the WAL
 * segments go only after they are confirmed, and a failed flush sends them again.
 * db_ls_sent marks them sent once the flush committed. Called from db_state_sink.c's
 * db_ss_flush and db_ss_sent, so the flush does both in one place.
 *
 * Reads: with such a sink bdb_db_late_recent (db_tier.h, defined in db_late_sink.c)
 * answers from the sink's rows merged with the local list (which also holds what is
 * not flushed yet), the same event seen on both sides counted once, newest arrival
 * first. Without one it is db_late_recent_local. */
#ifndef BDB_DB_LATE_SINK_H
#define BDB_DB_LATE_SINK_H

#include "storage/embedded/core/db.h"
#include "storage/embedded/tier/db_tier.h"

/* 1 when db->o.sink takes the late ops. */
int db_ls_on(bdb_db *db);
/* rc: the flush's status so far; returns the new one (rc untouched when not BDB_OK). */
int db_ls_flush(bdb_db *db, int rc);
void db_ls_sent(bdb_db *db);

/* db_tier_late.c. db_late_unsent calls fn (under the list's leaf lock: fn must not
 * take engine locks) for each listed late event not confirmed by the sink yet and
 * remembers them as handed over; db_late_sent marks those confirmed. */
void db_late_unsent(bdb_db *db, void (*fn)(void *ud, const bdb_late_event *e), void *ud);
void db_late_sent(bdb_db *db);
/* The in-memory list alone (bdb_db_late_recent's contract). */
int db_late_recent_local(bdb_db *db, const char *tn, const char *dn,
                         int (*cb)(void *ctx, const bdb_late_event *e), void *ctx);

#endif
