/* Private to the MQTT gateway's files (mqtt_gw.c, mqtt_msg.c, mqtt_net.c): the
 * gateway, one client per broker, and the counters /metrics shows. */
#ifndef BDB_MQTT_GW_INT_H
#define BDB_MQTT_GW_INT_H

#include "common/buf.h"
#include "ingest/mqtt/mqtt_codec.h"
#include "ingest/mqtt/mqtt_route.h"
#include "ingest/mqtt/mqtt_topic.h"
#include "server/mqtt/mqtt_gw.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define MQ_MAX_FILTERS 32
#define MQ_MAX_BROKERS 8
#define MQ_KEEPALIVE_S 30
/* How long the gateway waits for the broker's PUBACK of a dead-letter message
 * before it gives up on the connection (the original is then redelivered). */
#define MQ_DEAD_LETTER_WAIT_MS 30000

/* Results of a message, the label of bucketdb_mqtt_messages_total{result}. */
enum {
    MR_OK,
    MR_PARTIAL,
    MR_BAD,
    MR_WRITE_FAILED,
    MR_OVER_BURST,
    MR_DEVICE_RATE,
    MR_DEVICE_QUOTA,
    MR_STORAGE_QUOTA,
    MR_HOT,
    MR_N
};

/* One broker connection and its thread. */
typedef struct mq_client {
    struct bdb_mqtt_gw *g;
    char host[256], port[16];
    char name[300]; /* host:port as configured, for logs and the metric label */
    int tls;
    pthread_t thread;
    int started;
    int fd;
    void *ssl; /* SSL *, NULL without TLS */
    bdb_buf rbuf, wbuf;
    int64_t last_sent;       /* monotonic ms of the last packet sent (keepalive) */
    size_t skip;             /* bytes of an oversized PUBLISH still to discard */
    int ping_out;            /* a PINGREQ is unanswered */
    uint32_t broker_max_pkt; /* MQTT 5 CONNACK maximum packet size, 0 = none */
    int no_sub_ids;          /* MQTT 5 broker without subscription identifiers */
    uint16_t next_pid;       /* our packet ids (SUBSCRIBE 1, dead letters from 2) */
    atomic_int connected;
} mq_client;

struct bdb_mqtt_gw {
    bdb_server *s;
    int version; /* BDB_MQTT_V311 or BDB_MQTT_V5 */
    char *filters[MQ_MAX_FILTERS];
    size_t nfilters;
    /* With mqtt_route lines (by_route): route i is filters[i], subscribed on its own
     * with subscription identifier i + 1. Without: one route, its scheme from
     * mqtt_topic_scheme, every filter of mqtt_topics, formats from mqtt_formats. */
    bdb_mqtt_route *routes; /* parsed in place: they point into themselves */
    size_t nroutes;
    int by_route;
    bdb_mqtt_formats formats;
    size_t max_packet;
    void *ssl_ctx; /* SSL_CTX *, when a broker is mqtts:// */
    mq_client clients[MQ_MAX_BROKERS];
    size_t nclients;
    atomic_int stop;
    _Atomic uint64_t results[MR_N];
    _Atomic uint64_t samples, connects, connect_failures, duplicates, quota_pauses;
    _Atomic uint64_t strings_skipped; /* string fields other than state, not stored */
    _Atomic uint64_t bp_pauses, dead_letters, dead_letter_failures;
};

/* mqtt_msg.c: stores one PUBLISH (too_large: only its topic and id are there).
 * Returns 0 when it may be acknowledged (stored, or rejected and dead-lettered or
 * dropped) with *reason the MQTT 5 PUBACK reason code, or -1 when it must not be
 * (storage failed, the gateway stops, the connection failed while pausing). */
int mq_handle_message(mq_client *c, const bdb_mqtt_publish *p, int too_large, uint32_t sub_id,
                      uint8_t *reason);
/* mqtt_msg.c: the route of a message: the one route of the single-setting form; with
 * mqtt_route lines the one its MQTT 5 subscription identifier names (sub_id, 0 =
 * none) if that route's filter matches the topic, else the first whose filter
 * does; NULL when none does. */
const bdb_mqtt_route *mq_route_of(const struct bdb_mqtt_gw *g, uint32_t sub_id, const char *topic,
                                  size_t len);
/* mqtt_msg.c: a PUBLISH larger than max_body_bytes + 64 KiB (header h; its first
 * `prefix` body bytes are in rbuf) with a dead-letter topic set: streamed to that
 * topic as it arrives (bounded memory) and counted malformed. 0: the whole packet was
 * consumed from rbuf and may be acknowledged; 1: it cannot be dead-lettered (too
 * large for the broker, properties past the prefix), rbuf untouched, drop it as
 * without a dead-letter topic; -1: the connection failed (reconnect). */
int mq_dead_letter_large(mq_client *c, const bdb_mqtt_hdr *h, size_t prefix);

/* mqtt_net.c */
int mq_tls_init(struct bdb_mqtt_gw *g); /* 0, or -1 logged (bad CA/cert/key file) */
void mq_tls_free(struct bdb_mqtt_gw *g);
int mq_connect(mq_client *c); /* 0 with c->fd (and c->ssl) set, or -1 logged */
void mq_close(mq_client *c);
int mq_flush(mq_client *c); /* sends c->wbuf whole (bounded wait): 0 or -1 */
/* Waits up to timeout_ms for bytes and appends what arrives to c->rbuf: 1 when
 * something was read, 0 on timeout, -1 when the connection closed or failed. */
int mq_read(mq_client *c, int timeout_ms);
/* Sleeps in small steps; -1 as soon as the gateway stops. */
int mq_sleep(struct bdb_mqtt_gw *g, int64_t ms);
/* Sends a PINGREQ when half the keepalive passed since the last packet (while the
 * consumer pauses): 0, or -1 when the connection failed. */
int mq_keepalive(mq_client *c);

#endif
