/* schema: CQL DDL generator (see schema.h and docs/CASSANDRA.md "Schema"). */
#include "storage/cassandra/schema.h"

#include "bucketdb/bdb.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DAY_S 86400LL

void sch_opts_default(sch_opts *o)
{
    memset(o, 0, sizeof *o);
    strcpy(o->keyspace, "bucketdb");
    o->simple_rf = 3;
    o->ttl_s = 30 * DAY_S;
    o->bucket_s = 3600;
    o->sub_bucket = 1;
    o->ver[0] = 4;
    o->ver[1] = 1;
    o->ver[2] = 0;
    o->repair_s = 7 * DAY_S;
    o->gc_grace_s = 10 * DAY_S;
    o->state_model = SCH_STATE_PARTITIONED;
    o->hash_buckets = 16;
}

int sch_parse_duration(const char *s, int64_t *secs)
{
    if (!s || !isdigit((unsigned char)*s))
        return BDB_ERR_INVALID;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || v < 0)
        return BDB_ERR_INVALID;
    long long mul = 1;
    if (*end) {
        if (end[1])
            return BDB_ERR_INVALID;
        switch (*end) {
        case 's':
            mul = 1;
            break;
        case 'm':
            mul = 60;
            break;
        case 'h':
            mul = 3600;
            break;
        case 'd':
            mul = DAY_S;
            break;
        case 'w':
            mul = 7 * DAY_S;
            break;
        case 'y':
            mul = 365 * DAY_S;
            break;
        default:
            return BDB_ERR_INVALID;
        }
    }
    if (v > INT64_MAX / mul)
        return BDB_ERR_INVALID;
    *secs = v * mul;
    return BDB_OK;
}

static int valid_ident(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max || !isalpha((unsigned char)s[0]))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_')
            return 0;
    return 1;
}

static int valid_dc(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof(((sch_dc *)0)->name))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("_-.", s[i]))
            return 0;
    return 1;
}

static int parse_rf(const char *s, size_t n, int *rf)
{
    if (n == 0 || n > 3)
        return 0;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return 0;
        v = v * 10 + (s[i] - '0');
    }
    if (v < 1 || v > 100)
        return 0;
    *rf = v;
    return 1;
}

int sch_parse_replication(const char *s, sch_opts *o, char *err, size_t errlen)
{
    if (!s || !*s) {
        snprintf(err, errlen, "empty replication");
        return BDB_ERR_INVALID;
    }
    if (!strncmp(s, "simple:", 7)) {
        if (!parse_rf(s + 7, strlen(s + 7), &o->simple_rf)) {
            snprintf(err, errlen, "replication '%s': the factor must be 1..100", s);
            return BDB_ERR_INVALID;
        }
        o->ndcs = 0;
        return BDB_OK;
    }
    int n = 0;
    const char *p = s;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        if (n == SCH_MAX_DCS) {
            snprintf(err, errlen, "replication '%s': at most %d data centers", s, SCH_MAX_DCS);
            return BDB_ERR_INVALID;
        }
        size_t nl = colon ? (size_t)(colon - p) : 0;
        if (!colon || nl >= sizeof o->dcs[n].name) {
            snprintf(err, errlen, "replication '%s': expected simple:RF or DC:RF[,DC:RF...]", s);
            return BDB_ERR_INVALID;
        }
        memcpy(o->dcs[n].name, p, nl);
        o->dcs[n].name[nl] = 0;
        if (!valid_dc(o->dcs[n].name)) {
            snprintf(err, errlen, "replication '%s': bad data center name '%s'", s, o->dcs[n].name);
            return BDB_ERR_INVALID;
        }
        if (!parse_rf(colon + 1, len - nl - 1, &o->dcs[n].rf)) {
            snprintf(err, errlen, "replication '%s': the factor of %s must be 1..100", s,
                     o->dcs[n].name);
            return BDB_ERR_INVALID;
        }
        for (int i = 0; i < n; i++)
            if (!strcmp(o->dcs[i].name, o->dcs[n].name)) {
                snprintf(err, errlen, "replication '%s': data center %s twice", s, o->dcs[n].name);
                return BDB_ERR_INVALID;
            }
        n++;
        if (!comma)
            break;
        p = comma + 1;
        if (!*p) {
            snprintf(err, errlen, "replication '%s': trailing comma", s);
            return BDB_ERR_INVALID;
        }
    }
    o->ndcs = n;
    return BDB_OK;
}

int sch_replication_from_nodes(sch_opts *o, const char *const *node_dcs, size_t n)
{
    sch_dc dcs[SCH_MAX_DCS];
    int counts[SCH_MAX_DCS], ndcs = 0;
    for (size_t i = 0; i < n; i++) {
        const char *dc = node_dcs[i] && *node_dcs[i] ? node_dcs[i] : "datacenter1";
        if (!valid_dc(dc))
            return BDB_ERR_INVALID;
        int j = 0;
        while (j < ndcs && strcmp(dcs[j].name, dc))
            j++;
        if (j == ndcs) {
            if (ndcs == SCH_MAX_DCS)
                return BDB_ERR_INVALID;
            snprintf(dcs[j].name, sizeof dcs[j].name, "%s", dc);
            counts[j] = 0;
            ndcs++;
        }
        counts[j]++;
    }
    if (ndcs == 0)
        return BDB_ERR_INVALID;
    for (int j = 0; j < ndcs; j++) {
        dcs[j].rf = counts[j] < 3 ? counts[j] : 3;
        o->dcs[j] = dcs[j];
    }
    o->ndcs = ndcs;
    return BDB_OK;
}

int sch_parse_version(const char *s, int ver[3])
{
    int v[3] = {0, 0, 0}, n = 0;
    const char *p = s;
    while (n < 3) {
        if (!isdigit((unsigned char)*p))
            return BDB_ERR_INVALID;
        long x = 0;
        while (isdigit((unsigned char)*p) && x <= 1000)
            x = x * 10 + (*p++ - '0');
        if (x > 1000)
            return BDB_ERR_INVALID;
        v[n++] = (int)x;
        if (*p != '.')
            break;
        p++;
    }
    if (n < 2 || (*p && *p != '-'))
        return BDB_ERR_INVALID;
    memcpy(ver, v, sizeof v);
    return BDB_OK;
}

int sch_parse_state_model(const char *s, int *model)
{
    static const char *names[] = {"partitioned", "hash", "index", "mv"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, names[i])) {
            *model = i;
            return BDB_OK;
        }
    return BDB_ERR_INVALID;
}

static int ver_ge(const int v[3], int a, int b, int c)
{
    if (v[0] != a)
        return v[0] > a;
    if (v[1] != b)
        return v[1] > b;
    return v[2] >= c;
}

/* TWCS: 3.0.8 on the 3.0 line, 3.8 on the tick-tock line, and everything later. */
int sch_has_twcs(const int v[3])
{
    if (v[0] != 3)
        return v[0] > 3;
    return v[1] == 0 ? v[2] >= 8 : v[1] >= 8;
}

/* DTCS: 2.0.11 and 2.1.1 (Cassandra 2.1.0 refuses the class: checked on a real
 * node); removed in 5.0, where TWCS is preferred anyway. */
int sch_has_dtcs(const int v[3])
{
    if (v[0] != 2)
        return v[0] == 3 || v[0] == 4;
    if (v[1] == 0)
        return v[2] >= 11;
    return v[1] > 1 || v[2] >= 1;
}

int sch_has_mv(const int v[3])
{
    return ver_ge(v, 3, 0, 0);
}

int sch_compaction(const int v[3])
{
    if (sch_has_twcs(v))
        return SCH_COMPACT_TWCS;
    if (sch_has_dtcs(v))
        return SCH_COMPACT_DTCS;
    return SCH_COMPACT_STCS;
}

int sch_check(const sch_opts *o, char *err, size_t errlen)
{
    if (!valid_ident(o->keyspace, 48)) {
        snprintf(err, errlen,
                 "keyspace '%s': 1 to 48 letters, digits or '_', starting with a letter",
                 o->keyspace);
        return BDB_ERR_INVALID;
    }
    if (o->ndcs == 0 && (o->simple_rf < 1 || o->simple_rf > 100)) {
        snprintf(err, errlen, "replication factor %d: must be 1..100", o->simple_rf);
        return BDB_ERR_INVALID;
    }
    if (o->bucket_s < 60 || o->bucket_s > 366 * DAY_S) {
        snprintf(err, errlen, "bucket %llds: must be between 1 minute and 366 days",
                 (long long)o->bucket_s);
        return BDB_ERR_INVALID;
    }
    if (o->ttl_s < 0 || o->ttl_s > 630720000) { /* Cassandra's TTL limit: 20 years */
        snprintf(err, errlen, "ttl %llds: must be 0 (none) to 20 years", (long long)o->ttl_s);
        return BDB_ERR_INVALID;
    }
    if (o->gc_grace_s < 0 || o->gc_grace_s > INT32_MAX) {
        snprintf(err, errlen, "gc_grace %llds: out of range", (long long)o->gc_grace_s);
        return BDB_ERR_INVALID;
    }
    if (o->repair_s <= 0) {
        snprintf(err, errlen, "repair interval must be positive");
        return BDB_ERR_INVALID;
    }
    if (o->gc_grace_s <= o->repair_s) {
        snprintf(err, errlen,
                 "gc_grace_seconds %lld must exceed the repair interval %lld s: tombstones "
                 "purged before a repair reaches every replica let deleted data come back; "
                 "raise --gc-grace or repair more often (--repair-interval)",
                 (long long)o->gc_grace_s, (long long)o->repair_s);
        return BDB_ERR_INVALID;
    }
    if (o->state_model == SCH_STATE_MV && !sch_has_mv(o->ver)) {
        snprintf(err, errlen,
                 "materialized views need Cassandra 3.0 or later (server %d.%d.%d): use "
                 "--state-model partitioned, hash or index",
                 o->ver[0], o->ver[1], o->ver[2]);
        return BDB_ERR_INVALID;
    }
    if (o->state_model < SCH_STATE_PARTITIONED || o->state_model > SCH_STATE_MV) {
        snprintf(err, errlen, "unknown state model");
        return BDB_ERR_INVALID;
    }
    if (o->hash_buckets < 1 || o->hash_buckets > 4096) {
        snprintf(err, errlen, "hash buckets %d: must be 1..4096", o->hash_buckets);
        return BDB_ERR_INVALID;
    }
    return BDB_OK;
}

/* A time window for TWCS: the largest unit that divides the seconds. */
static void twcs_window(int64_t s, const char **unit, long long *size)
{
    if (s % DAY_S == 0) {
        *unit = "DAYS";
        *size = s / DAY_S;
    } else if (s % 3600 == 0) {
        *unit = "HOURS";
        *size = s / 3600;
    } else {
        *unit = "MINUTES";
        *size = (s + 59) / 60;
    }
}

/* The compaction clause for a table whose data arrives in time order, expires by
 * TTL (ttl_s, 0 = never) and groups into windows of window_s seconds. */
static void compaction(bdb_buf *out, const sch_opts *o, int64_t window_s, int64_t ttl_s)
{
    switch (sch_compaction(o->ver)) {
    case SCH_COMPACT_TWCS: {
        const char *unit;
        long long size;
        twcs_window(window_s, &unit, &size);
        bdb_buf_printf(out,
                       "\n  AND compaction = {'class': 'TimeWindowCompactionStrategy', "
                       "'compaction_window_unit': '%s', 'compaction_window_size': '%lld'}",
                       unit, size);
        break;
    }
    case SCH_COMPACT_DTCS: {
        long long age = ttl_s > 0 ? (ttl_s + DAY_S - 1) / DAY_S : 365;
        bdb_buf_printf(out,
                       "\n  AND compaction = {'class': 'DateTieredCompactionStrategy', "
                       "'base_time_seconds': '%lld', 'max_sstable_age_days': '%lld'}",
                       (long long)(window_s < 3600 ? window_s : 3600), age);
        break;
    }
    default:
        bdb_buf_puts(out, "\n  AND compaction = {'class': 'SizeTieredCompactionStrategy'}");
    }
}

static void common_opts(bdb_buf *out, const sch_opts *o, int64_t ttl_s)
{
    if (ttl_s >= 0)
        bdb_buf_printf(out, "\n  AND default_time_to_live = %lld", (long long)ttl_s);
    bdb_buf_printf(out, "\n  AND gc_grace_seconds = %lld;\n\n", (long long)o->gc_grace_s);
}

static const char *const model_names[] = {"state-partitioned table", "hash-bucket partitioning",
                                          "secondary index", "materialized view"};

int sch_check_key_limits(size_t max_tenant_bytes, size_t max_key_bytes, char *err, size_t errlen)
{
    /* agg_1m ((tenant_id, device_id, metric_name, day)): 4 components of len + 3 */
    const size_t fixed = max_tenant_bytes + 1 + 8 + 4 * 3;
    if (max_tenant_bytes < SCH_KEY_MAX && max_key_bytes <= (SCH_KEY_MAX - fixed) / 3)
        return BDB_OK;
    size_t fit = max_tenant_bytes < SCH_KEY_MAX - fixed ? (SCH_KEY_MAX - fixed) / 3 : 0;
    snprintf(err, errlen,
             "max_key_bytes %zu is too large for the Cassandra backend: a device id and a "
             "metric name (up to 2 * max_key_bytes + 1) of that length would make a partition "
             "key of agg_1m longer than Cassandra's %d bytes; use max_key_bytes <= %zu",
             max_key_bytes, SCH_KEY_MAX, fit);
    return BDB_ERR_LIMIT;
}

int sch_generate(const sch_opts *o, bdb_buf *out, bdb_buf *warn, char *err, size_t errlen)
{
    int rc = sch_check(o, err, errlen);
    if (rc != BDB_OK)
        return rc;
    const char *ks = o->keyspace;
    int comp = sch_compaction(o->ver);
    const char *comp_name = comp == SCH_COMPACT_TWCS   ? "TimeWindowCompactionStrategy"
                            : comp == SCH_COMPACT_DTCS ? "DateTieredCompactionStrategy"
                                                       : "SizeTieredCompactionStrategy";
    if (comp == SCH_COMPACT_STCS)
        bdb_buf_printf(warn,
                       "Cassandra %d.%d.%d has neither TimeWindowCompactionStrategy (3.0.8/3.8) "
                       "nor DateTieredCompactionStrategy (2.0.11/2.1.1): time-series tables use "
                       "SizeTieredCompactionStrategy, so expired data is dropped by compaction "
                       "rather than as whole SSTables\n",
                       o->ver[0], o->ver[1], o->ver[2]);
    else if (comp == SCH_COMPACT_DTCS)
        bdb_buf_printf(warn,
                       "Cassandra %d.%d.%d has no TimeWindowCompactionStrategy (3.0.8/3.8): "
                       "time-series tables use DateTieredCompactionStrategy\n",
                       o->ver[0], o->ver[1], o->ver[2]);
    if (o->ndcs == 0 && o->simple_rf < 3)
        bdb_buf_printf(warn,
                       "replication factor %d: fine for a test node, but QUORUM needs RF >= 3 "
                       "to survive a node loss\n",
                       o->simple_rf);

    bdb_buf_printf(out,
                   "-- bucketdb schema for Cassandra %d.%d.%d (generated by `bucketdb schema`).\n"
                   "-- Raw TTL %lld s, bucket %lld s, compaction %s, gc_grace_seconds %lld\n"
                   "-- (repair interval %lld s), current-state model: %s.\n"
                   "-- Idempotent: applying it again changes nothing.\n\n",
                   o->ver[0], o->ver[1], o->ver[2], (long long)o->ttl_s, (long long)o->bucket_s,
                   comp_name, (long long)o->gc_grace_s, (long long)o->repair_s,
                   model_names[o->state_model]);

    /* keyspace */
    bdb_buf_printf(out, "CREATE KEYSPACE IF NOT EXISTS %s\n  WITH replication = {", ks);
    if (o->ndcs == 0) {
        bdb_buf_printf(out, "'class': 'SimpleStrategy', 'replication_factor': %d}", o->simple_rf);
    } else {
        bdb_buf_puts(out, "'class': 'NetworkTopologyStrategy'");
        for (int i = 0; i < o->ndcs; i++)
            bdb_buf_printf(out, ", '%s': %d", o->dcs[i].name, o->dcs[i].rf);
        bdb_buf_puts(out, "}");
    }
    bdb_buf_puts(out, "\n  AND durable_writes = true;\n\n");

    /* raw samples */
    bdb_buf_printf(
        out,
        "-- Raw samples (seed 000): one partition per tenant, device and time bucket%s.\n"
        "-- bucket = event_time rounded down to the device's bucket size.\n"
        "CREATE TABLE IF NOT EXISTS %s.telemetry (\n"
        "  tenant_id text,\n  device_id text,\n  bucket timestamp,\n",
        o->sub_bucket ? " (and sub-bucket: 0 unless the device is hot)" : "", ks);
    if (o->sub_bucket)
        bdb_buf_puts(out, "  sub_bucket int,\n");
    bdb_buf_printf(out,
                   "  event_time timestamp,\n  metric_name text,\n  metric_value double,\n"
                   "  tags map<text, text>,\n  state text,\n"
                   "  PRIMARY KEY ((tenant_id, device_id, bucket%s), event_time, metric_name)\n"
                   ") WITH CLUSTERING ORDER BY (event_time DESC, metric_name ASC)",
                   o->sub_bucket ? ", sub_bucket" : "");
    compaction(out, o, o->bucket_s, o->ttl_s);
    common_opts(out, o, o->ttl_s);

    /* per-tenant counters */
    bdb_buf_printf(out,
                   "-- Samples per tenant, bucket and device (seed 000; counters take no TTL).\n"
                   "CREATE TABLE IF NOT EXISTS %s.telemetry_by_tenant (\n"
                   "  tenant_id text,\n  bucket timestamp,\n  device_id text,\n"
                   "  event_count counter,\n"
                   "  PRIMARY KEY ((tenant_id, bucket), device_id)\n"
                   ") WITH gc_grace_seconds = %lld;\n\n",
                   ks, (long long)o->gc_grace_s);
    bdb_buf_printf(out,
                   "-- What bucketdb writes instead: absolute events per tenant, bucket and\n"
                   "-- device (written USING TIMESTAMP = the count, so the larger count wins):\n"
                   "-- a re-sent flush after a crash writes the same value, where a counter\n"
                   "-- would count it twice. The day in the key bounds a range read.\n"
                   "CREATE TABLE IF NOT EXISTS %s.telemetry_by_tenant_totals (\n"
                   "  tenant_id text,\n  day timestamp,\n  bucket timestamp,\n"
                   "  device_id text,\n  bucket_end timestamp,\n  event_count bigint,\n"
                   "  sub_buckets int,\n"
                   "  PRIMARY KEY ((tenant_id, day), bucket, device_id)\n"
                   ") WITH gc_grace_seconds = %lld;\n\n",
                   ks, (long long)o->gc_grace_s);

    /* aggregate pyramid */
    static const struct {
        const char *name, *what, *part;
        int64_t ttl, window;
    } aggs[] = {
        {"agg_1m", "1-minute", ", day", 90 * DAY_S, DAY_S},
        {"agg_1h", "hourly", "", 365 * DAY_S, 30 * DAY_S},
        {"agg_1d", "daily", "", 0, 0},
    };
    bdb_buf_puts(out,
                 "-- Aggregate pyramid (seeds 000, 002, 003): sum, count and m2 (sum of squared\n"
                 "-- deviations from the mean), not averages, so tiers re-aggregate exactly;\n"
                 "-- sketch is what bucketdb reads back: a version byte, then the window's\n"
                 "-- exact state (stats with the sum as a double-double, then the mergeable\n"
                 "-- quantile sketch for p50/p95/p99); the other columns are for people.\n");
    for (size_t i = 0; i < sizeof aggs / sizeof aggs[0]; i++) {
        bdb_buf_printf(out,
                       "CREATE TABLE IF NOT EXISTS %s.%s ( -- %s windows\n"
                       "  tenant_id text,\n  device_id text,\n  metric_name text,\n%s"
                       "  window_start timestamp,\n"
                       "  min_value double,\n  max_value double,\n  sum_value double,\n"
                       "  count bigint,\n  m2 double,\n  sketch blob,\n"
                       "  PRIMARY KEY ((tenant_id, device_id, metric_name%s), window_start)\n"
                       ") WITH CLUSTERING ORDER BY (window_start DESC)",
                       ks, aggs[i].name, aggs[i].what, aggs[i].part[0] ? "  day timestamp,\n" : "",
                       aggs[i].part);
        if (aggs[i].window)
            compaction(out, o, aggs[i].window, aggs[i].ttl);
        common_opts(out, o, aggs[i].ttl);
    }

    /* fleet aggregates */
    static const struct {
        const char *name, *what;
        int64_t ttl, window;
    } fleet[] = {{"fleet_agg_1h", "hourly", 365 * DAY_S, 30 * DAY_S},
                 {"fleet_agg_1d", "daily", 0, 0}};
    bdb_buf_puts(out, "-- Fleet aggregates per tenant and metric (seed 000), pre-computed;\n"
                      "-- sketch holds a version byte, the stats and the window's device set\n"
                      "-- (so device_count stays exact when unflushed readings merge in).\n");
    for (size_t i = 0; i < 2; i++) {
        bdb_buf_printf(out,
                       "CREATE TABLE IF NOT EXISTS %s.%s ( -- %s windows\n"
                       "  tenant_id text,\n  metric_name text,\n  window_start timestamp,\n"
                       "  device_count bigint,\n  min_value double,\n  max_value double,\n"
                       "  sum_value double,\n  count bigint,\n  m2 double,\n  sketch blob,\n"
                       "  PRIMARY KEY ((tenant_id, metric_name), window_start)\n"
                       ") WITH CLUSTERING ORDER BY (window_start DESC)",
                       ks, fleet[i].name, fleet[i].what);
        if (fleet[i].window)
            compaction(out, o, fleet[i].window, fleet[i].ttl);
        common_opts(out, o, fleet[i].ttl);
    }

    /* late arrivals */
    bdb_buf_printf(out,
                   "-- Late arrivals (seed 003, approach 2): samples later than the threshold,\n"
                   "-- merged at query time; kept apart so out-of-order writes do not spread\n"
                   "-- the telemetry table's SSTables over many time windows. Size-tiered.\n"
                   "CREATE TABLE IF NOT EXISTS %s.late_arrivals (\n"
                   "  tenant_id text,\n  device_id text,\n  bucket timestamp,\n"
                   "  event_time timestamp,\n  metric_name text,\n  metric_value double,\n"
                   "  tags map<text, text>,\n  state text,\n  arrived_at timestamp,\n"
                   "  device_newest timestamp,\n  arrival_seq bigint,\n"
                   "  PRIMARY KEY ((tenant_id, device_id, bucket), event_time, metric_name)\n"
                   ") WITH CLUSTERING ORDER BY (event_time DESC, metric_name ASC)\n"
                   "  AND compaction = {'class': 'SizeTieredCompactionStrategy'}",
                   ks);
    common_opts(out, o, o->ttl_s);

    /* devices */
    bdb_buf_printf(out,
                   "-- Device registry and profile: tags, learned reporting class and bucket\n"
                   "-- size, rate limit, sub-buckets of a hot device. bucketdb rewrites a\n"
                   "-- device's row whole at each flush, so its collections are blobs in the\n"
                   "-- native protocol v3 collection encoding (one cell per overwrite, no range\n"
                   "-- tombstone; 2.1.0 has no frozen collections); tags, bucket_history and\n"
                   "-- metrics are the older collection columns, no longer written.\n"
                   "CREATE TABLE IF NOT EXISTS %s.devices (\n"
                   "  tenant_id text,\n  device_id text,\n  tags map<text, text>,\n"
                   "  profile text,\n  reporting_class text,\n  bucket_seconds int,\n"
                   "  sub_buckets int,\n  max_rate double,\n  first_seen timestamp,\n"
                   "  last_seen timestamp,\n  pinned boolean,\n"
                   "  bucket_history map<timestamp, int>,\n  metrics set<text>,\n"
                   "  samples bigint,\n  tags_blob blob,\n  history_blob blob,\n"
                   "  metrics_blob blob,\n"
                   "  PRIMARY KEY ((tenant_id), device_id)\n"
                   ") WITH gc_grace_seconds = %lld;\n\n",
                   ks, (long long)o->gc_grace_s);

    /* latest state */
    bdb_buf_printf(out,
                   "-- Latest event per device (seed 004, multi-tenant key). Written with\n"
                   "-- USING TIMESTAMP = event time (microseconds), so an older event never\n"
                   "-- overwrites a newer one: event_time at the newest report, state and\n"
                   "-- state_time at the newest state report, each metric and string\n"
                   "-- attribute at its own newest.\n"
                   "CREATE TABLE IF NOT EXISTS %s.latest_by_device (\n"
                   "  tenant_id text,\n  device_id text,\n  event_time timestamp,\n"
                   "  state text,\n  state_time timestamp,\n  metrics map<text, double>,\n"
                   "  metric_times map<text, timestamp>,\n  attributes map<text, text>,\n"
                   "  attribute_times map<text, timestamp>,\n"
                   "  PRIMARY KEY ((tenant_id), device_id)\n"
                   ") WITH gc_grace_seconds = %lld;\n\n",
                   ks, (long long)o->gc_grace_s);

    switch (o->state_model) {
    case SCH_STATE_PARTITIONED:
        bdb_buf_printf(
            out,
            "-- Current state, state-partitioned table (seed 004 solution 3): each\n"
            "-- new state of a device is one insert here plus deletes of the device's\n"
            "-- rows under its other states (tombstones mostly resolve in the memtable).\n"
            "-- state is the state up to 256 bytes, else '#xxh128:' and its digest in\n"
            "-- hex (a partition key holds at most 65535 bytes), the state then in\n"
            "-- state_full ('' when state is the state).\n"
            "CREATE TABLE IF NOT EXISTS %s.latest_by_state (\n"
            "  tenant_id text,\n  state text,\n  device_id text,\n"
            "  event_time timestamp,\n  metrics map<text, double>,\n  state_full text,\n"
            "  PRIMARY KEY ((tenant_id, state), device_id)\n"
            ") WITH gc_grace_seconds = %lld;\n",
            ks, (long long)o->gc_grace_s);
        break;
    case SCH_STATE_HASH:
        bdb_buf_printf(out,
                       "-- Current state with hash-bucket partitioning (seed 004 solution 5):\n"
                       "-- hash_bucket = hash(device_id) mod %d, computed by bucketdb (no UDF\n"
                       "-- needed); a state query reads the %d partitions of (tenant, state).\n"
                       "CREATE TABLE IF NOT EXISTS %s.latest_by_state_bucket (\n"
                       "  tenant_id text,\n  state text,\n  hash_bucket int,\n  device_id text,\n"
                       "  event_time timestamp,\n  metrics map<text, double>,\n"
                       "  PRIMARY KEY ((tenant_id, state, hash_bucket), device_id)\n"
                       ") WITH gc_grace_seconds = %lld;\n",
                       o->hash_buckets, o->hash_buckets, ks, (long long)o->gc_grace_s);
        break;
    case SCH_STATE_INDEX:
        bdb_buf_printf(
            out,
            "-- Current state through a secondary index (seed 004 solution 2): efficient\n"
            "-- with the tenant in the query (one partition); without it every node is\n"
            "-- asked, so it suits infrequent or large state queries.\n"
            "CREATE INDEX IF NOT EXISTS latest_by_device_state_idx\n"
            "  ON %s.latest_by_device (state);\n",
            ks);
        break;
    case SCH_STATE_MV:
        bdb_buf_printf(
            out,
            "-- Current state through a materialized view (seed 004 solution 1).\n"
            "-- Caveats: views are experimental since 3.0.15 / 3.11.1 and disabled by\n"
            "-- default from 4.0 (materialized_views_enabled: true in cassandra.yaml);\n"
            "-- the view is updated asynchronously and can drift from its base table\n"
            "-- (no built-in repair between them); every base write costs a read-before-\n"
            "-- write; a popular state makes one large (tenant, state) partition.\n"
            "CREATE MATERIALIZED VIEW IF NOT EXISTS %s.latest_by_state_mv AS\n"
            "  SELECT tenant_id, state, device_id, event_time, metrics\n"
            "  FROM %s.latest_by_device\n"
            "  WHERE tenant_id IS NOT NULL AND state IS NOT NULL AND device_id IS NOT NULL\n"
            "  PRIMARY KEY ((tenant_id, state), device_id);\n",
            ks, ks);
        break;
    }
    /* which data directory the keyspace belongs to, which server writes to it now */
    bdb_buf_printf(out,
                   "-- Owner (cass_owner.c): row 'keyspace' names the keyspace's identity,\n"
                   "-- which the data directory that writes to it keeps in its file 'cluster';\n"
                   "-- row 'writer' is the lease of the one server writing now (a TTL the\n"
                   "-- server renews; taken and renewed with lightweight transactions), with\n"
                   "-- what `bucketdb cluster status` shows of that server: its backlog in\n"
                   "-- bytes, last confirmed flush (ms), listen address and version; row\n"
                   "-- 'generation' counts the flushes (with the node that made the last),\n"
                   "-- which the data directory's file also keeps: an older copy is behind.\n"
                   "CREATE TABLE IF NOT EXISTS %s.owner (\n"
                   "  k text PRIMARY KEY,\n  id text,\n  node text,\n  host text,\n"
                   "  pid int,\n  since bigint,\n  backlog_bytes bigint,\n  last_flush bigint,\n"
                   "  listen text,\n  version text,\n  generation bigint\n"
                   ") WITH gc_grace_seconds = %lld;\n",
                   ks, (long long)o->gc_grace_s);
    /* named documents: the tenant registry (cass_doc.h) */
    bdb_buf_printf(out,
                   "\n-- Documents (cass_doc.c): the tenant registry (tenants, token hashes,\n"
                   "-- quotas, settings, deleted generations), the same bytes as the data\n"
                   "-- directory's file 'tenants'. Row (k, 0) is the header naming a version,\n"
                   "-- its part count, length and CRC-32; rows (k#version, 0..n-1) the parts of\n"
                   "-- at most 256 KiB. Written parts first, header last: never seen half.\n"
                   "CREATE TABLE IF NOT EXISTS %s.docs (\n"
                   "  k text,\n  part int,\n  body blob,\n  PRIMARY KEY (k, part)\n"
                   ") WITH gc_grace_seconds = %lld;\n",
                   ks, (long long)o->gc_grace_s);
    return BDB_OK;
}
