/* db_settled: the settled version of a tenant's samples, which lets a reader keep what
 * it computed from old samples (docs/INFLUX.md#group-cache).
 *
 * A sample is settled once it is older than BDB_SETTLED_MS behind the db's clock. The
 * version (bdb_db_settled_version, db.h) moves whenever a settled sample of the tenant
 * may have changed since it was last read:
 *  - a write batch holding a report older than BDB_SETTLED_MS / 2 behind the clock (a
 *    late or backfilled sample), marked at reserve and counted once, at that report's
 *    release, which the core calls after the whole batch's apply whether the write
 *    then succeeds or fails: its samples are readable by then, so a reader that read
 *    the version before reading them either saw them or sees a new version afterwards;
 *  - a retention or compaction pass that drops the tenant's samples (retire, and again
 *    at maintain, once the samples are gone), and the tenant leaving memory
 *    (forget_tenant).
 * Half the horizon for writes leaves a clock stepped back by up to BDB_SETTLED_MS / 2
 * between a reader and a later writer still counted. A read-only db (a write failed
 * in a way that stops every later one) refuses the version.
 *
 * Versions live in a fixed table of counters by a hash of the tenant's name: tenants
 * sharing a counter move each other's version (a reader recomputes, nothing is wrong).
 * Nothing is saved: a restart starts every counter at 0, and what a reader kept under
 * an older version must not outlive the process (the caches that use it are memory). */
#ifndef BDB_DB_SETTLED_H
#define BDB_DB_SETTLED_H

struct db_consumer;
extern const struct db_consumer db_settled_consumer;

#endif
