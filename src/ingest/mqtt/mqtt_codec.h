/* mqtt_codec: the MQTT 3.1.1 packets a QoS 1 subscriber needs, encoded and decoded
 * with strict bounds (docs/MQTT.md). No I/O here: the gateway (src/server/mqtt_gw.c)
 * owns the socket.
 *
 * Decoding never reads past the bytes it is given: a fixed header is "complete",
 * "needs more bytes", "malformed" (remaining length longer than 4 bytes) or "too
 * large" (over the caller's max packet size), and each packet body is checked
 * against its remaining length before a field is read. */
#ifndef BDB_MQTT_CODEC_H
#define BDB_MQTT_CODEC_H

#include "common/buf.h"

#include <stddef.h>
#include <stdint.h>

enum bdb_mqtt_type {
    BDB_MQTT_CONNECT = 1,
    BDB_MQTT_CONNACK = 2,
    BDB_MQTT_PUBLISH = 3,
    BDB_MQTT_PUBACK = 4,
    BDB_MQTT_SUBSCRIBE = 8,
    BDB_MQTT_SUBACK = 9,
    BDB_MQTT_PINGREQ = 12,
    BDB_MQTT_PINGRESP = 13,
    BDB_MQTT_DISCONNECT = 14,
};

/* Largest remaining length the protocol can express (4 length bytes). */
#define BDB_MQTT_MAX_REMLEN 268435455u

typedef struct bdb_mqtt_hdr {
    uint8_t type;   /* high nibble of the first byte */
    uint8_t flags;  /* low nibble */
    size_t rem_len; /* remaining length */
    size_t hdr_len; /* bytes of the fixed header (2..5) */
} bdb_mqtt_hdr;

#define BDB_MQTT_NEED_MORE 0
#define BDB_MQTT_COMPLETE 1
#define BDB_MQTT_MALFORMED (-1)
#define BDB_MQTT_TOO_LARGE (-2)

/* Decodes the fixed header at buf[0..len). Returns BDB_MQTT_COMPLETE when the header
 * (not necessarily the body) is there, BDB_MQTT_NEED_MORE, BDB_MQTT_MALFORMED, or
 * BDB_MQTT_TOO_LARGE when hdr_len + rem_len would exceed max_packet. */
int bdb_mqtt_decode_header(const uint8_t *buf, size_t len, size_t max_packet, bdb_mqtt_hdr *h);
/* Encodes a remaining length into out (1..4 bytes); returns the count, 0 if too big. */
size_t bdb_mqtt_encode_remlen(uint8_t out[4], size_t n);

/* Encoders append one whole packet to out. Strings longer than 65535 bytes are
 * refused (return -1, out unchanged). user/pass may be NULL or "". */
int bdb_mqtt_encode_connect(bdb_buf *out, const char *client_id, const char *user, const char *pass,
                            uint16_t keepalive_s, int clean_session);
int bdb_mqtt_encode_subscribe(bdb_buf *out, uint16_t packet_id, const char *const *filters,
                              size_t n, uint8_t qos);
void bdb_mqtt_encode_puback(bdb_buf *out, uint16_t packet_id);
void bdb_mqtt_encode_pingreq(bdb_buf *out);
void bdb_mqtt_encode_disconnect(bdb_buf *out);
/* For tests and tools: a PUBLISH (qos 0 or 1). */
int bdb_mqtt_encode_publish(bdb_buf *out, const char *topic, const void *payload, size_t len,
                            uint8_t qos, int dup, uint16_t packet_id);

typedef struct bdb_mqtt_publish {
    const char *topic; /* not NUL-terminated; points into the packet */
    size_t topic_len;
    const uint8_t *payload;
    size_t payload_len;
    uint8_t qos;
    int dup, retain;
    uint16_t packet_id; /* 0 for QoS 0 */
} bdb_mqtt_publish;

/* Parses a PUBLISH body (the bytes after the fixed header). Returns 0, or -1 when the
 * packet is malformed: QoS 3, QoS 0 with DUP, topic length past the body, an empty
 * topic or one with wildcards or NUL, packet id 0 at QoS > 0. QoS 2 is reported as
 * is (the caller did not subscribe at QoS 2 and treats it as a protocol error). */
int bdb_mqtt_parse_publish(uint8_t flags, const uint8_t *body, size_t len, bdb_mqtt_publish *p);
/* CONNACK: 0 with *session_present and *return_code, -1 if malformed. */
int bdb_mqtt_parse_connack(const uint8_t *body, size_t len, int *session_present, int *return_code);
/* SUBACK: 0 with the packet id and up to max return codes (*n), -1 if malformed. */
int bdb_mqtt_parse_suback(const uint8_t *body, size_t len, uint16_t *packet_id, uint8_t *codes,
                          size_t max, size_t *n);

/* 1 if filter is a valid subscription filter ('+' and '#' occupy a whole level, '#'
 * only last), else 0. */
int bdb_mqtt_filter_valid(const char *filter);
/* 1 if the topic name matches the filter ('+' one level, '#' the rest, including the
 * parent level; topics starting with '$' match no filter starting with a wildcard). */
int bdb_mqtt_topic_match(const char *filter, const char *topic, size_t topic_len);

/* Human name of a CONNACK return code. */
const char *bdb_mqtt_connack_str(int rc);

#endif
