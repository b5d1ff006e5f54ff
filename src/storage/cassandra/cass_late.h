/* cass_late: the late arrivals of a Cassandra-backed server (the "late arrivals" ops
 * of storage/sink.h, wired into cass_sink's ops table).
 *
 * Table (schema.c; docs/CASSANDRA.md "Late arrivals on Cassandra"):
 *   late_arrivals ((tenant_id, device_id, bucket), event_time, metric_name)   one row
 *       per late event (metric_name '': the event, not one of its metrics), bucket =
 *       the UTC day of its arrival (bounds a device's partition during a backfill),
 *       with arrived_at, device_newest (the device's newest event time when it
 *       arrived) and arrival_seq (the server's arrival order: events of one batch
 *       share arrived_at), written USING TTL = what is left of the tenant's raw TTL counted
 *       from the event time, like the raw sample. The same event sent again (a
 *       re-sent flush) writes the same row.
 * A put sends one INSERT per event (idempotent, so the session retries them) and
 * returns once Cassandra confirmed every one. A list reads the whole table page by
 * page and keeps the rows of the tenant (and device): the table only holds late
 * events, one row each, for at most the raw TTL, and the list is a diagnostic. */
#ifndef BDB_CASS_LATE_H
#define BDB_CASS_LATE_H

#include "storage/sink.h"

#include <stdint.h>

/* After the schema's CREATE ... IF NOT EXISTS: adds device_newest and arrival_seq to a
 * late_arrivals table created by an older bucketdb (a refused ALTER means it is there). */
struct cql_session;
void cass_late_upgrade(struct cql_session *sess, const char *ks);

/* s must come from cass_sink_open (BDB_ERR_IO while it is not connected). */
int cass_late_put(bdb_sink *s, const bdb_sink_late *v, size_t n);
int cass_late_list(bdb_sink *s, const char *tenant, const char *device,
                   void (*fn)(void *ud, const bdb_sink_late *e), void *ud);

/* ---- pure helpers (unit-tested) ---- */

/* USING TTL seconds of a row for an event at ts (ms) written at now (ms) with the
 * tenant's raw TTL ttl_ms: 0 = forever (ttl_ms 0), -1 = expired already (not
 * written), else at least 1 and at most Cassandra's 20 years. */
int64_t cass_late_ttl_s(int64_t ts, int64_t ttl_ms, int64_t now);
/* The bucket (partition) of an event that arrived at arrived (ms): its UTC day. */
int64_t cass_late_bucket(int64_t arrived);

#endif
