/* schema: the CQL DDL of bucketdb's Cassandra keyspace, following the seeds
 * (000 telemetry, counters, aggregates, fleet tables, tenant TTL; 002 TTL and
 * gc_grace, multi-resolution; 003 time-window compaction, late arrivals,
 * multi-region; 004 latest-state models), adapted to the server version:
 * TimeWindowCompactionStrategy from 3.0.8 / 3.8, DateTieredCompactionStrategy
 * from 2.0.11 / 2.1.1, SizeTiered before; materialized views from 3.0. */
#ifndef BDB_CASSANDRA_SCHEMA_H
#define BDB_CASSANDRA_SCHEMA_H

#include "common/buf.h"

#include <stdint.h>

#define SCH_MAX_DCS 16

enum sch_state_model {
    SCH_STATE_PARTITIONED, /* latest_by_state ((tenant_id, state), device_id): default */
    SCH_STATE_HASH,        /* latest_by_state_bucket ((tenant_id, state, hash_bucket), device_id) */
    SCH_STATE_INDEX,       /* secondary index on latest_by_device (state) */
    SCH_STATE_MV,          /* materialized view over latest_by_device (server >= 3.0) */
};

enum sch_compaction { SCH_COMPACT_TWCS, SCH_COMPACT_DTCS, SCH_COMPACT_STCS };

typedef struct sch_dc {
    char name[64];
    int rf;
} sch_dc;

typedef struct sch_opts {
    char keyspace[49];
    int ndcs; /* 0: SimpleStrategy with simple_rf */
    int simple_rf;
    sch_dc dcs[SCH_MAX_DCS];
    int64_t ttl_s;    /* raw data default TTL, 0 = none */
    int64_t bucket_s; /* telemetry bucket size (compaction window) */
    int sub_bucket;   /* sub_bucket in the telemetry partition key */
    int ver[3];       /* server release, e.g. {2, 1, 0} */
    int64_t repair_s; /* stated repair interval */
    int64_t gc_grace_s;
    int state_model;
    int hash_buckets; /* for SCH_STATE_HASH */
} sch_opts;

/* Defaults: keyspace bucketdb, SimpleStrategy RF 3, TTL 30 d, bucket 1 h, with
 * sub_bucket, server 4.1.0, repair every 7 d, gc_grace 10 d, state-partitioned,
 * 16 hash buckets. */
void sch_opts_default(sch_opts *o);

/* "30d", "12h", "15m", "90s", "2w" or plain seconds. BDB_ERR_INVALID if bad. */
int sch_parse_duration(const char *s, int64_t *secs);
/* "simple:3" or "dc1:3,dc2:3" (NetworkTopologyStrategy). */
int sch_parse_replication(const char *s, sch_opts *o, char *err, size_t errlen);
/* Replication from the nodes a probe found (one data center name per node):
 * NetworkTopologyStrategy with, per data center, min(3, its nodes). */
int sch_replication_from_nodes(sch_opts *o, const char *const *node_dcs, size_t n);
/* "2.1.0", "3.11", "4.1", "3.11.4-SNAPSHOT". */
int sch_parse_version(const char *s, int ver[3]);
int sch_parse_state_model(const char *s, int *model);

int sch_has_twcs(const int ver[3]);
int sch_has_dtcs(const int ver[3]);
int sch_has_mv(const int ver[3]);
int sch_compaction(const int ver[3]);

/* Checks the options together: keyspace name, gc_grace_seconds > repair
 * interval (seed 002), materialized view needs >= 3.0, sizes. BDB_ERR_INVALID
 * with a message otherwise. */
int sch_check(const sch_opts *o, char *err, size_t errlen);

/* Cassandra refuses a partition key over 65,535 bytes (each composite component
 * costs its length + 3), and with it every flush that writes one, forever. The
 * longest keys are the aggregate tables' (tenant, device, metric, day), with a metric
 * name of up to 2 * max_key_bytes + 1 (measurement.field). 0 when names up to these
 * limits fit every table's key (latest_by_state's long states are digested, see
 * cass_state.h), else BDB_ERR_LIMIT with a message naming the limit and the largest
 * max_key_bytes that fits. */
#define SCH_KEY_MAX 65535
int sch_check_key_limits(size_t max_tenant_bytes, size_t max_key_bytes, char *err, size_t errlen);

/* Appends the DDL to out and warnings (one per line, no prefix) to warn.
 * Runs sch_check first. */
int sch_generate(const sch_opts *o, bdb_buf *out, bdb_buf *warn, char *err, size_t errlen);

#endif
