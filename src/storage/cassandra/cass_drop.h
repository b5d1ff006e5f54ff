/* cass_drop: deleting every row of a dropped tenant's storage key on Cassandra (the
 * drop_tenant op of storage/sink.h, wired into cass_sink's ops table;
 * docs/CASSANDRA.md#deleting-a-tenant-on-cassandra).
 *
 * The partitions come from the devices the engine's catalog passes and the ones the
 * keyspace's own `devices` rows list (bucket history, first and last event, metrics):
 * telemetry per (device, bucket, sub-bucket), agg_1m per (device, metric, day),
 * agg_1h/agg_1d per (device, metric), fleet_agg_1h/1d per metric,
 * telemetry_by_tenant_totals per day, latest_by_state per state the tenant's devices
 * are in, late_arrivals per partition a scan of the table finds; latest_by_device and
 * devices (partition = tenant) last, so that a drop cut short finds them again. Every
 * DELETE is idempotent (retried by the session) and written USING TIMESTAMP 2^62 us,
 * so it shadows every cell of the key, including those written USING TIMESTAMP of a
 * future event time; nothing writes to a dropped key again. Statements run one after
 * another; the first that fails after its retries ends the drop with its error (the
 * engine keeps the tenant and calls again later). */
#ifndef BDB_CASS_DROP_H
#define BDB_CASS_DROP_H

#include "storage/sink.h"

#include <stddef.h>
#include <stdint.h>

#define CASS_DROP_TIMESTAMP_US (INT64_C(1) << 62)

int cass_drop_tenant(bdb_sink *s, const char *tenant, const bdb_sink_device *devs,
                     const uint32_t *nsub, size_t n);

#endif
