#include "server/config.h"

#include "common/log.h"
#include "ingest/devrule.h"
#include "model/bucket.h"
#include "ingest/mqtt/mqtt_route.h"
#include "server/admission/hotpart.h"
#include "server/tenants/tenants.h"
#include "storage/backend.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* K_LIST: a repeatable key; each occurrence adds a line to the field. */
enum kind { K_STR, K_INT, K_U64, K_SIZE, K_MS, K_BOOL, K_LIST };

/* The settings table is data: one row per key drives parsing, printing and help. */
static const struct key {
    const char *name;
    enum kind kind;
    size_t off, len;
    const char *help;
} keys[] = {
#define S(f, h)                                                                                    \
    {                                                                                              \
#f, K_STR, offsetof(bdb_config, f), sizeof(((bdb_config *)0)->f), h                        \
    }
#define N(f, k, h)                                                                                 \
    {                                                                                              \
#f, k, offsetof(bdb_config, f), 0, h                                                       \
    }
    S(listen, "address to listen on, host:port (default 127.0.0.1:8086)"),
    S(data, "data directory (default ./data)"),
    S(storage, "embedded | cassandra://HOST[:PORT],.../KEYSPACE?dc=..&consistency=.. "
               "(docs/CASSANDRA.md; default embedded)"),
    S(log_level, "debug | info | warn | error (default info)"),
    S(sync, "WAL sync mode: batch (fsync before ack, default) | periodic"),
    N(sync_interval_ms, K_MS, "periodic mode: fsync every interval (default 100ms)"),
    N(wal_segment_bytes, K_U64, "WAL segment size (default 67108864)"),
    N(block_window_ms, K_MS, "time window of a block file, divides a day (default 2h)"),
    N(flush_interval_ms, K_MS, "flush the in-memory head to blocks at least this often (10m)"),
    N(head_max_bytes, K_U64, "flush early when the head holds more (default 1073741824)"),
    N(disk_reserve_bytes, K_U64,
      "room held back for a flush on a full disk: 0 = none, or 64KiB..1TiB (default 64MiB)"),
    N(read_cache_bytes, K_U64,
      "memory for derived windows of immutable files (docs/AGGREGATION.md#read-cache): "
      "0 = off, or 1MiB..1TiB (default 64MiB)"),
    N(catalog_cache_bytes, K_U64,
      "memory for the tenants' catalogs InfluxQL statements list (docs/INFLUX.md#catalog-cache): "
      "0 = off, or 1MiB..1TiB (default 32MiB)"),
    N(group_cache_bytes, K_U64,
      "memory for settled windows of InfluxQL statements over device groups and settled "
      "steps of PromQL range queries (docs/INFLUX.md#group-cache): 0 = off, or 1MiB..1TiB "
      "(default 32MiB)"),
    N(partition_warn_bytes, K_U64,
      "warn once per partition larger than this in block files; 0 = never (100000000)"),
    N(retention_ms, K_MS,
      "raw-data TTL of tenants without their own; 0 keeps everything (default 30d)"),
    N(device_limiter_idle, K_MS,
      "expire a device's rate-limiter state after this idle time (default 10m)"),
    N(query_workers, K_INT, "partition reads running in parallel, server-wide (default 4)"),
    N(http_threads_max, K_INT, "max concurrent HTTP connections (default 1024)"),
    N(http_header_timeout, K_MS,
      "a request's line and headers must arrive within this, 1s..1h (default 20s)"),
    N(http_body_min_rate, K_U64,
      "bytes/s a body must average after http_header_timeout; 0 = no limit (default 500)"),
    N(max_inflight_bytes, K_U64,
      "request bytes (bodies, parsed batches) held at once, server-wide (default 268435456)"),
    N(max_inflight_writes, K_INT, "write requests in flight at once, server-wide (default 256)"),
    N(tenant_inflight_share, K_INT,
      "percent of each in-flight budget one tenant may hold, 1..100 (default 50)"),
    N(max_body_bytes, K_SIZE, "max request body after decompression (default 67108864)"),
    N(max_line_bytes, K_SIZE, "max line-protocol line (default 65536)"),
    N(max_tags, K_SIZE, "max tags per point (default 64)"),
    N(max_fields, K_SIZE, "max fields per point (default 256)"),
    N(max_key_bytes, K_SIZE, "max measurement/tag/field key, device and metric name (256)"),
    N(max_tag_value_bytes, K_SIZE, "max tag value, state and string attribute (default 1024)"),
    N(max_future_ms, K_MS, "reject timestamps further than this in the future (default 1h)"),
    N(max_query_samples, K_U64, "max samples one query returns (default 1000000)"),
    S(device_tag, "line-protocol tag naming the device (default device)"),
    S(device_rule, "tags naming the device: first present of a,b; a+b joined with '/' "
                   "(docs/API.md#mapping-rule; default: device_tag alone)"),
    S(metric_naming, "measurement.field (default) | field"),
    S(default_tenant, "tenant when a request names none (default default)"),
    S(auth, "auto (token required off loopback) | on | off (default auto)"),
    N(allow_insecure_listen, K_BOOL,
      "let a non-loopback listen start with auth=off (default false)"),
    S(metrics_auth, "auto (/metrics takes the admin token where tokens are required or tenants "
                    "are registered) | open (no token: names tenants) (default auto)"),
    S(mqtt_broker, "MQTT broker to consume from, host:port; empty = no MQTT (default empty)"),
    S(mqtt_client_id, "MQTT client id of the persistent session (default bucketdb)"),
    S(mqtt_topics, "comma-separated MQTT topic filters (default bucketdb/+/+/telemetry)"),
    S(mqtt_username, "MQTT user name (default none)"),
    S(mqtt_password, "MQTT password (default none)"),
    S(mqtt_version, "MQTT protocol: 5 (default) | 3.1.1"),
    N(mqtt_session_expiry, K_MS,
      "MQTT 5 session expiry interval; 0 = the session never expires (default 0)"),
    N(mqtt_receive_max, K_INT, "MQTT 5 receive maximum: messages in flight to us (default 32)"),
    S(mqtt_topic_scheme,
      "topic levels of tenant and device, e.g. +/{tenant}/{device}/# (the default)"),
    S(mqtt_formats, "payload format per topic filter: filter=json|lp|object|value[:level]|auto,"
                    "... (default auto)"),
    {"mqtt_route", K_LIST, offsetof(bdb_config, mqtt_route), sizeof(((bdb_config *)0)->mqtt_route),
     "repeatable: <filter> scheme=<scheme> payload=<format> tenant=<name> qos=0|1, one "
     "subscription each (docs/MQTT.md#routes; default: the mqtt_topics route)"},
    S(mqtt_dead_letter_topic, "publish malformed MQTT messages here (default none: drop)"),
    S(mqtt_ca_file, "mqtts:// brokers: CA certificates file (default system CAs)"),
    S(mqtt_cert_file, "mqtts:// brokers: client certificate file (default none)"),
    S(mqtt_key_file, "mqtts:// brokers: client key file (default none)"),
    N(agg_allowed_lateness, K_MS,
      "rollup windows are final once the device's newest event is this far past (5m)"),
    N(tier_retention_1m, K_MS, "keep 1-minute rollups this long; 0 = forever (default 90d)"),
    N(tier_retention_1h, K_MS, "keep 1-hour rollups this long; 0 = forever (default 365d)"),
    N(tier_retention_1d, K_MS, "keep 1-day rollups this long; 0 = forever (default 0)"),
    N(late_threshold, K_MS, "events this far behind their device's newest are late (1h)"),
    N(hot_threshold, K_U64,
      "reports per partition per minute above which it is hot; 0 = off (default 3000)"),
    S(hot_policy, "hot partition mitigation: none | subbucket (default) | ratelimit | sample"),
    N(hot_subbuckets, K_INT, "subbucket policy: sub-buckets of a hot device, 2..64 (default 8)"),
    N(hot_rate_limit, K_U64, "ratelimit policy: reports kept per minute while hot (3000)"),
    S(hot_sample, "sample policy: fraction of reports kept while hot, (0, 1] (default 0.1)"),
    N(bucket_target_bytes, K_U64,
      "move a device to a smaller bucket past this partition size; 0 = off (100000000)"),
    N(test_clock, K_BOOL, "tests only: admin POST /internal/clock sets the clock (false)"),
    N(test_faults, K_BOOL, "tests only: admin POST /internal/fault fails the storage (false)"),
#undef S
#undef N
};

#define NKEYS (sizeof keys / sizeof keys[0])

void bdb_config_default(bdb_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->listen, sizeof c->listen, "127.0.0.1:8086");
    snprintf(c->data, sizeof c->data, "./data");
    snprintf(c->storage, sizeof c->storage, "embedded"); /* storage */
    snprintf(c->log_level, sizeof c->log_level, "info");
    snprintf(c->sync, sizeof c->sync, "batch");
    c->sync_interval_ms = 100;
    c->wal_segment_bytes = 64u << 20;
    c->block_window_ms = 2 * BDB_MS_HOUR;
    c->flush_interval_ms = 10 * BDB_MS_MIN;
    c->head_max_bytes = 1ull << 30;
    c->read_cache_bytes = 64u << 20;
    c->catalog_cache_bytes = 32u << 20;
    c->group_cache_bytes = 32u << 20;
    c->disk_reserve_bytes = 64u << 20; /* issue 18: a flush of a full disk's WAL needs room */
    /* the 100 MB partition target (seed 002) */
    c->partition_warn_bytes = 100000000;
    c->retention_ms = 30 * INT64_C(86400000); /* issue 3: raw data kept 30 days */
    c->device_limiter_idle = 10 * BDB_MS_MIN;
    c->query_workers = 4;
    c->http_threads_max = 1024;
    c->http_header_timeout = 20000; /* as Apache mod_reqtimeout: header=20, body=20,MinRate=500 */
    c->http_body_min_rate = 500;
    c->max_inflight_bytes = 256u << 20;
    c->max_inflight_writes = 256;
    c->tenant_inflight_share = 50;
    c->max_body_bytes = 64u << 20;
    c->max_line_bytes = 65536;
    c->max_tags = 64;
    c->max_fields = 256;
    c->max_key_bytes = 256;
    c->max_tag_value_bytes = 1024;
    c->max_future_ms = BDB_MS_HOUR;
    c->max_query_samples = 1000000;
    snprintf(c->device_tag, sizeof c->device_tag, "device");
    snprintf(c->metric_naming, sizeof c->metric_naming, "measurement.field");
    snprintf(c->default_tenant, sizeof c->default_tenant, "default");
    snprintf(c->auth, sizeof c->auth, "auto");
    snprintf(c->metrics_auth, sizeof c->metrics_auth, "auto");
    snprintf(c->mqtt_client_id, sizeof c->mqtt_client_id, "bucketdb");
    snprintf(c->mqtt_topics, sizeof c->mqtt_topics, "bucketdb/+/+/telemetry");
    snprintf(c->mqtt_version, sizeof c->mqtt_version, "5");
    c->mqtt_receive_max = 32;
    snprintf(c->mqtt_topic_scheme, sizeof c->mqtt_topic_scheme, "+/{tenant}/{device}/#");
    c->agg_allowed_lateness = 5 * BDB_MS_MIN; /* rollup */
    c->tier_retention_1m = 90 * BDB_MS_DAY;
    c->tier_retention_1h = 365 * BDB_MS_DAY;
    c->tier_retention_1d = 0;
    /* late data (db_tier_late.c) */
    c->late_threshold = BDB_MS_HOUR;
    c->hot_threshold = 3000; /* 50 reports/s: far above seed 000's 1 per 10 s devices */
    snprintf(c->hot_policy, sizeof c->hot_policy, "subbucket");
    c->hot_subbuckets = 8;
    c->hot_rate_limit = 3000;
    snprintf(c->hot_sample, sizeof c->hot_sample, "0.1");
    c->bucket_target_bytes = 100000000; /* seed 002: partitions under 100 MB */
}

/* Durations: plain ms, or a number with ms, s, m, h, d. */
static int parse_ms(const char *v, int64_t *out)
{
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || n < 0)
        return -1;
    int64_t mult = 1;
    if (!strcmp(end, "") || !strcmp(end, "ms"))
        mult = 1;
    else if (!strcmp(end, "s"))
        mult = 1000;
    else if (!strcmp(end, "m"))
        mult = 60000;
    else if (!strcmp(end, "h"))
        mult = 3600000;
    else if (!strcmp(end, "d"))
        mult = 86400000;
    else
        return -1;
    if (n > INT64_MAX / mult) /* would overflow: refuse rather than wrap */
        return -1;
    *out = n * mult;
    return 0;
}

int bdb_config_parse_duration(const char *v, int64_t *out)
{
    return parse_ms(v, out);
}

static int parse_u64(const char *v, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || end == v || *v == '-')
        return -1;
    uint64_t mult = 1;
    if (!strcmp(end, "") || !strcmp(end, "B"))
        mult = 1;
    else if (!strcmp(end, "KiB") || !strcmp(end, "K"))
        mult = 1024;
    else if (!strcmp(end, "MiB") || !strcmp(end, "M"))
        mult = 1024 * 1024;
    else if (!strcmp(end, "GiB") || !strcmp(end, "G"))
        mult = 1024ull * 1024 * 1024;
    else
        return -1;
    if (n > UINT64_MAX / mult) /* would overflow: refuse rather than wrap */
        return -1;
    *out = n * mult;
    return 0;
}

int bdb_config_set(bdb_config *c, const char *key, const char *value, char *err, size_t errlen)
{
    char norm[64];
    size_t i;
    for (i = 0; key[i] && i < sizeof norm - 1; i++)
        norm[i] = key[i] == '-' ? '_' : key[i];
    norm[i] = '\0';
    for (size_t k = 0; k < NKEYS; k++) {
        if (strcmp(keys[k].name, norm) != 0)
            continue;
        char *field = (char *)c + keys[k].off;
        switch (keys[k].kind) {
        case K_STR:
            if (strlen(value) >= keys[k].len) {
                snprintf(err, errlen, "%s: value too long (max %zu bytes)", norm, keys[k].len - 1);
                return -1;
            }
            snprintf(field, keys[k].len, "%s", value);
            return 0;
        case K_LIST: {
            size_t have = strlen(field), n = strlen(value);
            if (strchr(value, '\n') || have + (have ? 1 : 0) + n >= keys[k].len) {
                snprintf(err, errlen, "%s: all lines together longer than %zu bytes", norm,
                         keys[k].len - 1);
                return -1;
            }
            if (have)
                field[have++] = '\n';
            memcpy(field + have, value, n + 1);
            return 0;
        }
        case K_INT: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(value, &end, 10);
            if (errno || end == value || *end || *value == '-' || v > 1000000000) {
                snprintf(err, errlen, "%s: '%s' is not a valid number", norm, value);
                return -1;
            }
            *(int *)field = (int)v;
            return 0;
        }
        case K_U64:
        case K_SIZE: {
            uint64_t v;
            if (parse_u64(value, &v)) {
                snprintf(err, errlen, "%s: '%s' is not a valid size (e.g. 1048576, 64MiB)", norm,
                         value);
                return -1;
            }
            if (keys[k].kind == K_U64)
                *(uint64_t *)field = v;
            else
                *(size_t *)field = (size_t)v;
            return 0;
        }
        case K_MS: {
            int64_t v;
            if (parse_ms(value, &v)) {
                snprintf(err, errlen, "%s: '%s' is not a valid duration (e.g. 500ms, 10m, 2h)",
                         norm, value);
                return -1;
            }
            *(int64_t *)field = v;
            return 0;
        }
        case K_BOOL:
            if (!strcmp(value, "true") || !strcmp(value, "1") || !strcmp(value, "yes") ||
                !strcmp(value, "on")) {
                *(int *)field = 1;
            } else if (!strcmp(value, "false") || !strcmp(value, "0") || !strcmp(value, "no") ||
                       !strcmp(value, "off")) {
                *(int *)field = 0;
            } else {
                snprintf(err, errlen, "%s: '%s' is not true or false", norm, value);
                return -1;
            }
            return 0;
        }
    }
    snprintf(err, errlen, "unknown setting '%s'", key);
    return -1;
}

int bdb_config_load(bdb_config *c, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    char line[4096];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line;
        /* '#' starts a comment at the start of a line or after a blank, so MQTT topic
         * filters such as a/# keep their wildcard */
        for (char *h = p; *h; h++)
            if (*h == '#' && (h == p || isspace((unsigned char)h[-1]))) {
                *h = '\0';
                break;
            }
        while (isspace((unsigned char)*p))
            p++;
        size_t n = strlen(p);
        while (n && isspace((unsigned char)p[n - 1]))
            p[--n] = '\0';
        if (!*p)
            continue;
        char *k = p;
        while (*p && !isspace((unsigned char)*p) && *p != '=')
            p++;
        char *kend = p;
        while (isspace((unsigned char)*p) || *p == '=')
            p++;
        *kend = '\0';
        char msg[256];
        if (!*p) {
            snprintf(err, errlen, "%s:%d: '%s' has no value", path, lineno, k);
            fclose(f);
            return -1;
        }
        if (bdb_config_set(c, k, p, msg, sizeof msg)) {
            snprintf(err, errlen, "%s:%d: %s", path, lineno, msg);
            fclose(f);
            return -1;
        }
    }
    fclose(f);
    return 0;
}

/* mqtt_route lines, checked at start so that a bad one stops the server with the
 * line's number rather than when the gateway starts. */
static int check_mqtt_routes(const bdb_config *c, char *err, size_t errlen)
{
    if (!c->mqtt_route[0])
        return 0;
    /* with routes these three would be silently ignored: refuse them instead */
    if (strcmp(c->mqtt_topics, "bucketdb/+/+/telemetry") ||
        strcmp(c->mqtt_topic_scheme, "+/{tenant}/{device}/#") || c->mqtt_formats[0]) {
        snprintf(err, errlen,
                 "mqtt_route: leave mqtt_topics, mqtt_topic_scheme and mqtt_formats unset when "
                 "routes are given (each route has its filter, scheme= and payload=)");
        return -1;
    }
    bdb_mqtt_route *r = malloc(sizeof *r);
    if (!r) {
        snprintf(err, errlen, "mqtt_route: out of memory");
        return -1;
    }
    int ret = 0, n = 0;
    for (const char *l = c->mqtt_route; *l && !ret;) {
        size_t len = strcspn(l, "\n");
        char line[sizeof c->mqtt_route], why[600];
        snprintf(line, sizeof line, "%.*s", (int)len, l);
        l += len + (l[len] == '\n');
        if (++n > BDB_MQTT_ROUTES_MAX) {
            snprintf(err, errlen, "mqtt_route: more than %d routes", BDB_MQTT_ROUTES_MAX);
            ret = -1;
        } else if (bdb_mqtt_route_parse(line, r, why, sizeof why) != 0) {
            snprintf(err, errlen, "mqtt_route %d ('%.200s'): %s", n, line, why);
            ret = -1;
        } else if (r->tenant[0] && !bdb_tenant_name_valid(r->tenant)) {
            snprintf(err, errlen,
                     "mqtt_route %d ('%.200s'): tenant=%s is not a valid name (A-Z a-z 0-9 _ - "
                     ".)",
                     n, line, r->tenant);
            ret = -1;
        } else if (r->inner && strcmp(c->mqtt_version, "5")) {
            snprintf(err, errlen,
                     "mqtt_route %d ('%.200s'): a shared subscription needs mqtt_version = 5", n,
                     line);
            ret = -1;
        }
    }
    free(r);
    return ret;
}

int bdb_config_check(const bdb_config *c, char *err, size_t errlen)
{
    if (strcmp(c->sync, "batch") && strcmp(c->sync, "periodic")) {
        snprintf(err, errlen, "sync: must be batch or periodic, not '%s'", c->sync);
        return -1;
    }
    if (bdb_log_parse_level(c->log_level) < 0) {
        snprintf(err, errlen, "log_level: must be debug, info, warn or error");
        return -1;
    }
    if (strcmp(c->metric_naming, "measurement.field") && strcmp(c->metric_naming, "field")) {
        snprintf(err, errlen, "metric_naming: must be measurement.field or field");
        return -1;
    }
    if (strcmp(c->auth, "auto") && strcmp(c->auth, "on") && strcmp(c->auth, "off")) {
        snprintf(err, errlen, "auth: must be auto, on or off");
        return -1;
    }
    if (strcmp(c->metrics_auth, "auto") && strcmp(c->metrics_auth, "open")) {
        snprintf(err, errlen, "metrics_auth: must be auto or open, not '%.64s'", c->metrics_auth);
        return -1;
    }
    if (c->block_window_ms <= 0 || BDB_MS_DAY % c->block_window_ms != 0 ||
        c->block_window_ms % BDB_MS_MIN != 0) {
        snprintf(err, errlen,
                 "block_window_ms: must be whole minutes dividing a day (e.g. 1h, 2h)");
        return -1;
    }
    if (c->late_threshold <= 0) { /* late data */
        snprintf(err, errlen, "late_threshold: must be above 0 (e.g. 1h)");
        return -1;
    }
    if (!strchr(c->listen, ':')) {
        snprintf(err, errlen, "listen: expected host:port, got '%s'", c->listen);
        return -1;
    }
    if (!bdb_backend_name(c->storage)) {
        snprintf(err, errlen, "storage: expected embedded or cassandra://..., got '%.200s'",
                 c->storage);
        return -1;
    }
    if (c->read_cache_bytes &&
        (c->read_cache_bytes < (1u << 20) || c->read_cache_bytes > (1ull << 40))) {
        snprintf(err, errlen, "read_cache_bytes: must be 0 (off) or 1MiB..1TiB, not %llu",
                 (unsigned long long)c->read_cache_bytes);
        return -1;
    }
    if (c->catalog_cache_bytes &&
        (c->catalog_cache_bytes < (1u << 20) || c->catalog_cache_bytes > (1ull << 40))) {
        snprintf(err, errlen, "catalog_cache_bytes: must be 0 (off) or 1MiB..1TiB, not %llu",
                 (unsigned long long)c->catalog_cache_bytes);
        return -1;
    }
    if (c->group_cache_bytes &&
        (c->group_cache_bytes < (1u << 20) || c->group_cache_bytes > (1ull << 40))) {
        snprintf(err, errlen, "group_cache_bytes: must be 0 (off) or 1MiB..1TiB, not %llu",
                 (unsigned long long)c->group_cache_bytes);
        return -1;
    }
    if (c->disk_reserve_bytes &&
        (c->disk_reserve_bytes < (64u << 10) || c->disk_reserve_bytes > (1ull << 40))) {
        snprintf(err, errlen, "disk_reserve_bytes: must be 0 (none) or 64KiB..1TiB, not %llu",
                 (unsigned long long)c->disk_reserve_bytes);
        return -1;
    }
    if (c->sync_interval_ms < 1 || c->sync_interval_ms > 60000) {
        snprintf(err, errlen, "sync_interval_ms: must be 1ms..60s");
        return -1;
    }
    if (c->http_header_timeout < 1000 || c->http_header_timeout > 3600000) {
        snprintf(err, errlen, "http_header_timeout: must be 1s..1h");
        return -1;
    }
    if (c->http_body_min_rate > (1ull << 30)) {
        snprintf(err, errlen, "http_body_min_rate: at most 1073741824 (bytes per second)");
        return -1;
    }
    if (c->query_workers < 1 || c->query_workers > 256) {
        snprintf(err, errlen, "query_workers: must be 1..256");
        return -1;
    }
    if (c->max_fields > 4096) { /* BDB_MAX_REPORT_METRICS: one report's metrics in the engine */
        snprintf(err, errlen, "max_fields: at most 4096");
        return -1;
    }
    /* a metric name (measurement.field) is up to twice this plus one, and the engine
     * keeps at most 65,535 bytes of one (db.c) */
    if (c->max_key_bytes < 1 || c->max_key_bytes > 32767) {
        snprintf(err, errlen, "max_key_bytes: must be 1..32767");
        return -1;
    }
    if (c->max_body_bytes < 1024 || c->max_line_bytes < 64 || c->max_fields < 1) {
        snprintf(err, errlen,
                 "limits: max_body_bytes >= 1024, max_line_bytes >= 64, "
                 "max_fields >= 1");
        return -1;
    }
    if (c->max_inflight_writes < 1) {
        snprintf(err, errlen, "max_inflight_writes: at least 1");
        return -1;
    }
    if (c->tenant_inflight_share < 1 || c->tenant_inflight_share > 100) {
        snprintf(err, errlen, "tenant_inflight_share: must be 1..100 (percent)");
        return -1;
    }
    if (c->max_inflight_bytes < 65536) {
        snprintf(err, errlen, "max_inflight_bytes: at least 65536");
        return -1;
    }
    if (strcmp(c->mqtt_version, "5") && strcmp(c->mqtt_version, "3.1.1")) {
        snprintf(err, errlen, "mqtt_version: must be 5 or 3.1.1, not '%s'", c->mqtt_version);
        return -1;
    }
    if (c->mqtt_receive_max < 1 || c->mqtt_receive_max > 65535) {
        snprintf(err, errlen, "mqtt_receive_max: must be 1..65535");
        return -1;
    }
    if (check_mqtt_routes(c, err, errlen) != 0)
        return -1;
    if (bdb_config_hot_policy(c, NULL, err, errlen) != 0)
        return -1;
    if (!c->device_tag[0] || !c->default_tenant[0]) {
        snprintf(err, errlen, "device_tag and default_tenant must not be empty");
        return -1;
    }
    if (c->device_rule[0]) {
        bdb_devrule r;
        char why[300];
        if (bdb_devrule_parse(c->device_rule, &r, why, sizeof why) != 0) {
            snprintf(err, errlen, "device_rule: %s", why);
            return -1;
        }
    }
    return 0;
}

void bdb_config_device_rule(const bdb_config *c, bdb_devrule *out)
{
    char why[300];
    if (!c->device_rule[0] || bdb_devrule_parse(c->device_rule, out, why, sizeof why) != 0)
        bdb_devrule_single(out, c->device_tag, strlen(c->device_tag));
}

void bdb_config_print(const bdb_config *c, void *file)
{
    FILE *f = file;
    for (size_t k = 0; k < NKEYS; k++) {
        const char *field = (const char *)c + keys[k].off;
        switch (keys[k].kind) {
        case K_STR:
            /* an empty value cannot be read back: show it as a comment */
            fprintf(f, "%s%s = %s\n", *field ? "" : "# ", keys[k].name, field);
            break;
        case K_INT:
            fprintf(f, "%s = %d\n", keys[k].name, *(const int *)field);
            break;
        case K_U64:
            fprintf(f, "%s = %llu\n", keys[k].name, (unsigned long long)*(const uint64_t *)field);
            break;
        case K_SIZE:
            fprintf(f, "%s = %zu\n", keys[k].name, *(const size_t *)field);
            break;
        case K_MS:
            fprintf(f, "%s = %lldms\n", keys[k].name, (long long)*(const int64_t *)field);
            break;
        case K_BOOL:
            fprintf(f, "%s = %s\n", keys[k].name, *(const int *)field ? "true" : "false");
            break;
        case K_LIST:
            if (!*field)
                fprintf(f, "# %s =\n", keys[k].name);
            for (const char *l = field; *l;) {
                size_t n = strcspn(l, "\n");
                fprintf(f, "%s = %.*s\n", keys[k].name, (int)n, l);
                l += n + (l[n] == '\n');
            }
            break;
        }
    }
}

const char *const *bdb_config_keys(void)
{
    static const char *names[NKEYS + 1];
    for (size_t k = 0; k < NKEYS; k++)
        names[k] = keys[k].name;
    return names;
}

const char *bdb_config_help(const char *key)
{
    for (size_t k = 0; k < NKEYS; k++)
        if (!strcmp(keys[k].name, key))
            return keys[k].help;
    return NULL;
}

int bdb_config_hot_policy(const bdb_config *c, bdb_hot_policy *out, char *err, size_t errlen)
{
    bdb_hot_policy p = {c->hot_threshold, bdb_hot_kind_parse(c->hot_policy),
                        (uint32_t)c->hot_subbuckets, c->hot_rate_limit, 0};
    char *end;
    errno = 0;
    p.sample = strtod(c->hot_sample, &end);
    if (errno || end == c->hot_sample || *end) {
        snprintf(err, errlen, "hot_sample: '%s' is not a number", c->hot_sample);
        return -1;
    }
    if (c->hot_subbuckets > 64 || bdb_hot_policy_check(&p, err, errlen) != 0)
        return -1;
    if (out)
        *out = p;
    return 0;
}
