/* config: every server setting, its default, and how it is read.
 *
 * Precedence: built-in defaults < config file (`--config FILE`) < command-line flags.
 * File format: one `key = value` per line (the `=` is optional), `#` starts a comment.
 * The keys and flags are the same names (flag `--max-body-bytes` = key
 * `max_body_bytes`); docs/CONFIG.md lists them all. */
#ifndef BDB_CONFIG_H
#define BDB_CONFIG_H

#include "common/path.h"

#include <stddef.h>
#include <stdint.h>

typedef struct bdb_config {
    char listen[256];                /* host:port */
    char data[BDB_DATA_DIR_MAX + 1]; /* the engine's limit too (common/path.h) */
    char storage[2048]; /* storage: "embedded" or cassandra://... (docs/CASSANDRA.md) */
    char log_level[16];
    char sync[16];            /* batch | periodic */
    int64_t sync_interval_ms; /* periodic */
    uint64_t wal_segment_bytes;
    int64_t block_window_ms;
    int64_t flush_interval_ms;
    uint64_t head_max_bytes;
    uint64_t read_cache_bytes;     /* read cache limit (db.h); 0 = off */
    uint64_t catalog_cache_bytes;  /* InfluxQL's tenant catalogs kept (iql_exec.h); 0 = off */
    uint64_t group_cache_bytes;    /* settled group windows and PromQL steps (iql_gcache.h,
                                    * pql_cache.h); 0 = off */
    uint64_t disk_reserve_bytes;   /* room held back for a flush on a full disk; 0 = none */
    uint64_t partition_warn_bytes; /* warn once per partition above it; 0 = never (quota) */
    int64_t retention_ms;
    int64_t device_limiter_idle; /* ms: device limiter entries idle longer expire */
    int query_workers;
    int http_threads_max; /* connection limit (one thread each) */
    /* slow clients (conn_guard.h): time for a request's line and headers, and the
     * body's minimum average rate after that much grace (0 = none) */
    int64_t http_header_timeout;
    uint64_t http_body_min_rate;
    /* backpressure (src/server/admission/backpressure.h) */
    uint64_t max_inflight_bytes; /* request bytes held server-wide */
    int max_inflight_writes;     /* write requests in flight server-wide */
    int tenant_inflight_share;   /* percent of each budget one tenant may hold */
    /* ingestion limits */
    size_t max_body_bytes; /* after decompression */
    size_t max_line_bytes;
    size_t max_tags;
    size_t max_fields;
    size_t max_key_bytes;
    size_t max_tag_value_bytes;
    int64_t max_future_ms;
    uint64_t max_query_samples;
    /* line-protocol mapping */
    char device_tag[64];
    char device_rule[256];  /* ingest/devrule.h; empty = device_tag alone */
    char metric_naming[32]; /* measurement.field | field */
    char default_tenant[128];
    char auth[16];             /* auto | on | off */
    int allow_insecure_listen; /* 1: a non-loopback listen with auth=off may start */
    char metrics_auth[16];     /* auto (the admin token where tokens matter) | open */
    /* MQTT gateway (docs/MQTT.md); mqtt_broker empty = off */
    char mqtt_broker[1024]; /* comma-separated host:port or mqtts://host:port */
    char mqtt_client_id[128];
    char mqtt_topics[1024]; /* comma-separated subscription filters */
    char mqtt_username[128];
    char mqtt_password[256];
    char mqtt_version[16];       /* 3.1.1 | 5 */
    int64_t mqtt_session_expiry; /* ms (sent in s); 0 = never expires */
    int mqtt_receive_max;        /* MQTT 5 receive maximum, 1..65535 */
    char mqtt_topic_scheme[256]; /* which levels are tenant and device */
    char mqtt_formats[1024];     /* filter=json|lp|auto,... */
    /* mqtt_route lines (repeatable key), '\n'-separated; empty = the one route of
     * mqtt_topics, mqtt_topic_scheme and mqtt_formats */
    char mqtt_route[8192];
    char mqtt_dead_letter_topic[256]; /* empty = malformed messages are dropped */
    char mqtt_ca_file[1024];          /* mqtts://: CA bundle (empty = system default) */
    char mqtt_cert_file[1024];        /* mqtts://: optional client certificate */
    char mqtt_key_file[1024];         /* and its key */
    /* rollup tiers (docs/AGGREGATION.md): a window is final once the device's newest
     * event is this much past its end; tier retention in ms, 0 = forever */
    int64_t agg_allowed_lateness;
    int64_t tier_retention_1m, tier_retention_1h, tier_retention_1d;
    int64_t late_threshold; /* late data: ms behind the device's newest event */
    /* hot partitions (src/server/admission/hotpart.h; tenants may override), promotion */
    uint64_t hot_threshold;       /* reports per partition per minute; 0 = detection off */
    char hot_policy[16];          /* none | subbucket | ratelimit | sample */
    int hot_subbuckets;           /* subbucket: N, 2..64 */
    uint64_t hot_rate_limit;      /* ratelimit: reports kept per minute while hot */
    char hot_sample[24];          /* sample: fraction kept while hot, (0, 1] */
    uint64_t bucket_target_bytes; /* promote a device past this partition size; 0 = off */
    int test_clock;               /* tests only: POST /internal/clock moves the wall clock */
    int test_faults; /* tests only: the engine runs on vfs_fault, POST /internal/fault */
} bdb_config;

void bdb_config_default(bdb_config *c);
/* Sets one key. Returns 0, or -1 with a message in err (unknown key, bad value). */
int bdb_config_set(bdb_config *c, const char *key, const char *value, char *err, size_t errlen);
/* Reads a file. Returns 0, or -1 with "FILE:LINE: message" in err. */
int bdb_config_load(bdb_config *c, const char *path, char *err, size_t errlen);
/* Checks cross-field rules after everything is set. */
int bdb_config_check(const bdb_config *c, char *err, size_t errlen);
/* Writes the effective configuration in file format (for `serve --print-config`). */
void bdb_config_print(const bdb_config *c, void *file);
/* Parses a duration (plain ms, or a number with ms, s, m, h, d). 0 or -1. */
int bdb_config_parse_duration(const char *v, int64_t *out);
/* Names of all keys, NULL-terminated (for --help and docs). */
const char *const *bdb_config_keys(void);
const char *bdb_config_help(const char *key);
/* The server-wide device rule (device_rule, or device_tag alone when it is empty). */
struct bdb_devrule;
void bdb_config_device_rule(const bdb_config *c, struct bdb_devrule *out);
/* The server-wide hot partition policy (hot_* keys); 0, or -1 with a message. */
struct bdb_hot_policy;
int bdb_config_hot_policy(const bdb_config *c, struct bdb_hot_policy *out, char *err,
                          size_t errlen);

#endif
