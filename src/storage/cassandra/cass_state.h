/* cass_state: the current state, the device registry and the per-partition event
 * counts of a Cassandra-backed server (the "state, registry, counters" ops of
 * storage/sink.h, wired into cass_sink's ops table).
 *
 * Tables (schema.c; docs/CASSANDRA.md "Current state, registry and counts"):
 *   latest_by_device ((tenant_id), device_id)   every cell written USING TIMESTAMP =
 *       the event time it comes from (microseconds): event_time at the newest report,
 *       state and state_time at the newest state report, metrics[m] and
 *       metric_times[m] at the newest report of m. Cassandra's last-write-wins then
 *       keeps the newest event per cell whatever order flushes (or re-sent flushes)
 *       arrive in.
 *   latest_by_state ((tenant_id, state), device_id)   seed 004's state-partitioned
 *       model: when a device's state changes, its row under the old state is deleted
 *       USING TIMESTAMP = the new state's time and the new row inserted at the same
 *       time; the old state is read from latest_by_device first (one read per device
 *       whose state a flush carries). The key's state column is cass_state_key()
 *       (a digest for a long state, whose full text is then in state_full).
 *   devices ((tenant_id), device_id)   the registry: tags, class, bucket size and
 *       history, pinned, metrics, first/last seen, written USING TIMESTAMP = last seen.
 *       Its collections are blobs holding their native protocol v3 encoding
 *       (tags_blob, history_blob, metrics_blob): an overwrite is one cell, where a
 *       collection column also writes a range tombstone (Cassandra 2.1.0 was seen
 *       spinning in compaction over those; it refuses frozen collections, which came
 *       in 2.1.3). The older tags, bucket_history and metrics columns of a keyspace
 *       from before are no longer written; a read falls back to them while the blob
 *       is null.
 *   telemetry_by_tenant_totals ((tenant_id, day), bucket, device_id)   absolute event
 *       counts per partition, written USING TIMESTAMP = the count itself: a larger count
 *       wins, a re-sent flush writes the same value (the seed's counter table would
 *       count a re-sent flush twice).
 * A put groups its records by tenant and sends each statement kind as UNLOGGED
 * batches of at most 50 rows (idempotent, so the session retries them), one after
 * another; the old states of the devices whose state a flush carries are read with
 * one IN query per 50 devices. A put returns once Cassandra confirmed every batch. */
#ifndef BDB_CASS_STATE_H
#define BDB_CASS_STATE_H

#include "storage/sink.h"

#include <stdint.h>

/* s must come from cass_sink_open (the ops reach its session through
 * cass_sink_session; while it is not connected every op fails with BDB_ERR_IO). */
/* After the schema's CREATE ... IF NOT EXISTS: adds the columns this file writes to
 * tables of a keyspace created before they existed. Each column is looked up in the
 * schema tables first, so a healthy start sends no ALTER that Cassandra refuses (a
 * refusal would count in /metrics' failures and errors); an ALTER refused anyway is
 * ignored. */
struct cql_session;
void cass_state_upgrade(struct cql_session *sess, const char *ks);
/* 1 when ks.table has column col, 0 when it has not, -1 when the schema tables could
 * not be read (the caller then tries the ALTER). Names are identifiers already checked
 * (cass_uri.c's keyspace rule, this code's own table and column names). */
int cass_column_exists(struct cql_session *sess, const char *ks, const char *table,
                       const char *col);

int cass_state_put(bdb_sink *s, const bdb_sink_state *v, size_t n);
int cass_device_put(bdb_sink *s, const bdb_sink_device *v, size_t n);
int cass_count_put(bdb_sink *s, const bdb_sink_count *v, size_t n);
int cass_state_get(bdb_sink *s, const char *tenant, const char *device, bdb_sink_state_fn fn,
                   void *ud);
int cass_state_list(bdb_sink *s, const char *tenant, const char *state, bdb_sink_state_fn fn,
                    void *ud);
int cass_device_list(bdb_sink *s, const char *tenant, bdb_sink_device_fn fn, void *ud);
/* The tenants of the devices table (SELECT DISTINCT over the whole ring, paged). */
int cass_tenant_list(bdb_sink *s, void (*fn)(void *ud, const char *tenant), void *ud);
int cass_count_list(bdb_sink *s, const char *tenant, int64_t from, int64_t to, bdb_sink_count_fn fn,
                    void *ud);

/* ---- pure helpers (unit-tested) ---- */

/* What a flush does with a device's state given the state Cassandra holds (old,
 * old_ts; old NULL = none): CASS_STATE_SKIP (Cassandra's is newer, or the same time
 * with another state: the first one written stays), CASS_STATE_WRITE (insert the row
 * under the new state), CASS_STATE_MOVE (also delete the row under old). */
enum { CASS_STATE_SKIP = 0, CASS_STATE_WRITE = 1, CASS_STATE_MOVE = 2 };
int cass_state_action(const char *old, int64_t old_ts, const char *state, int64_t state_ts);
/* latest_by_state's partition key column for a state: the state itself up to
 * CASS_STATE_KEY_SHORT bytes, else "#xxh128:" and the 32 hex digits of its XXH3-128
 * digest (Cassandra refuses a partition key over 65,535 bytes, and a state may be
 * 65,536). A long state's row also holds the full state in state_full, which reads
 * compare, so two states with one key are never confused. Returns out. */
#define CASS_STATE_KEY_SHORT 256
#define CASS_STATE_KEY_MAX (CASS_STATE_KEY_SHORT + 1)
const char *cass_state_key(const char *state, char out[CASS_STATE_KEY_MAX]);
/* Write timestamp (microseconds) for an event time in ms, saturating. */
int64_t cass_state_usec(int64_t ms);
/* The day partitions [first, last] (Unix ms, day-aligned) holding the buckets that
 * overlap [from, to) (buckets are at most one day long). 0, or -1 when the range
 * spans more than max_days. */
int cass_count_days(int64_t from, int64_t to, int64_t max_days, int64_t *first, int64_t *last);

#endif
