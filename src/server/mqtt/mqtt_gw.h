/* mqtt_gw: the MQTT device gateway (docs/MQTT.md).
 *
 * One thread per configured broker consumes the configured topic filters (the
 * mqtt_topics of the single-setting form, or one subscription per mqtt_route, each
 * with its own scheme, format, tenant and QoS) with our
 * own MQTT 5 or 3.1.1 client (src/ingest/mqtt/mqtt_codec.h): persistent session
 * (clean start 0; MQTT 5 with a session expiry interval), subscription at QoS 1
 * (shared subscriptions `$share/<group>/<filter>` with MQTT 5), and a PUBACK sent
 * only after the message's samples are durable (bdb_db_write returned BDB_OK), so a
 * crash at any instant loses nothing the broker holds: it re-sends what was not
 * acknowledged. A payload that cannot be stored is counted, logged with topic and
 * reason, optionally published to a dead-letter topic, and acknowledged (dropped);
 * a storage failure is never acknowledged: the gateway disconnects and retries
 * later. When the server is saturated (in-flight budgets, head guard, a tenant's
 * write rate) the gateway stops reading and the broker holds the messages.
 *
 * Files: mqtt_gw.c (lifecycle, session loop, metrics), mqtt_msg.c (one message:
 * admission, storage, dead letters), mqtt_net.c (TCP and TLS), mqtt_payload.c
 * (topic and payload mapping); mqtt_gw_int.h is their shared state. */
#ifndef BDB_MQTT_GW_H
#define BDB_MQTT_GW_H

#include "common/buf.h"
#include "ingest/mqtt/mqtt_topic.h"
#include "model/batch.h"
#include "server/config.h"

#include <stddef.h>

typedef struct bdb_server bdb_server;
typedef struct bdb_mqtt_gw bdb_mqtt_gw;

/* Starts the gateway when s->cfg.mqtt_broker is set (otherwise *out, which must hold
 * NULL, is not written: HTTP threads may be reading it).
 * Returns BDB_OK, or BDB_ERR_INVALID with a logged reason (bad broker address, topic
 * filter, scheme, formats, TLS files, dead-letter topic). Connecting happens in the
 * background, with bounded backoff. */
int bdb_mqtt_gw_start(bdb_server *s, bdb_mqtt_gw **out);
/* Stops the threads (between messages) and frees. NULL is fine. */
void bdb_mqtt_gw_stop(bdb_mqtt_gw *g);
/* Appends the gateway's Prometheus families (nothing when g is NULL). */
void bdb_mqtt_gw_metrics(bdb_mqtt_gw *g, bdb_buf *b);

/* What a message's topic and payload make (exposed for unit tests). */
enum bdb_mqtt_result { BDB_MQTT_OK, BDB_MQTT_PARTIAL, BDB_MQTT_BAD, BDB_MQTT_WRITE_FAILED };

/* Tenant and device of a topic under the scheme (the default tenant when the scheme
 * has no {tenant}): 0, or -1 with a reason (the topic does not fit the scheme, an
 * invalid tenant name, an empty or too long device, control characters). */
int bdb_mqtt_topic_names(const bdb_mqtt_scheme *sc, const char *default_tenant, const char *topic,
                         size_t len, char *tenant, size_t tcap, char *device, size_t dcap,
                         char *why, size_t whylen);
/* Parses a payload in `format` (BDB_MQTT_FMT_AUTO: JSON when it starts with '{' or
 * '[' after blanks, else line protocol) into b, giving reports without a device the
 * topic's device; max_age_ms (0 = none) refuses times older than the tenant's
 * retention, as HTTP writes do. Returns BDB_MQTT_OK, BDB_MQTT_PARTIAL (some reports rejected, *why
 * says the first) or BDB_MQTT_BAD (nothing usable, *why says why). */
int bdb_mqtt_payload_parse(const bdb_config *cfg, int format, int64_t max_age_ms,
                           const char *payload, size_t len, const char *device, int64_t now_ms,
                           bdb_batch *b, char *why, size_t whylen);

/* What a message brings beyond its payload, and what parsing it found. */
struct bdb_devrule;
typedef struct bdb_mqtt_in {
    int format;       /* the topic's format (bdb_mqtt_format_match) */
    int metric_level; /* value format: the topic level naming the metric; 0 = "value" */
    const char *topic;
    size_t topic_len;
    int64_t max_age_ms;
    const struct bdb_devrule *rule; /* the tenant's device rule; NULL = the server's */
    /* out */
    int shape;              /* the format the payload was read as (never AUTO) */
    size_t strings_skipped; /* string fields other than state, not stored */
} bdb_mqtt_in;

/* bdb_mqtt_payload_parse with the topic, per-filter and per-tenant settings: auto
 * also recognises gateway objects (object format) and bare values (value format),
 * docs/MQTT.md#payloads. */
/* 1 with *d if p (n bytes) is a JSON number or true/false (1/0), finite; else 0. */
int bdb_mqtt_bare_number(const char *p, size_t n, double *d);
int bdb_mqtt_payload_parse_in(const bdb_config *cfg, bdb_mqtt_in *in, const char *payload,
                              size_t len, const char *device, int64_t now_ms, bdb_batch *b,
                              char *why, size_t whylen);

#endif
