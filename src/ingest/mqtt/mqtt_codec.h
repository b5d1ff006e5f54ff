/* mqtt_codec: the MQTT 3.1.1 and MQTT 5 packets a QoS 1 subscriber needs (plus the
 * QoS 1 PUBLISH it sends to a dead-letter topic), encoded and decoded with strict
 * bounds (docs/MQTT.md). No I/O here: the gateway (src/server/mqtt/mqtt_gw.c) owns the
 * socket.
 *
 * Functions with a `version` argument speak BDB_MQTT_V311 (protocol level 4) or
 * BDB_MQTT_V5 (level 5: properties after the variable header, reason codes); the
 * older functions without one are the 3.1.1 forms.
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
    BDB_MQTT_AUTH = 15, /* MQTT 5 only; the gateway never asks for extended auth */
};

/* Protocol levels of the CONNECT packet. */
#define BDB_MQTT_V311 4
#define BDB_MQTT_V5 5

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

/* ------------------------------------------------------------ MQTT 5 */

/* MQTT 5 reason codes the gateway sends or acts on (spec 2.4). */
#define BDB_MQTT_RC_SUCCESS 0x00
#define BDB_MQTT_RC_UNSPECIFIED 0x80
#define BDB_MQTT_RC_NOT_AUTHORIZED 0x87
#define BDB_MQTT_RC_TOPIC_INVALID 0x90
#define BDB_MQTT_RC_QUOTA_EXCEEDED 0x97
#define BDB_MQTT_RC_PAYLOAD_INVALID 0x99

/* Human name of an MQTT 5 reason code ("unknown reason code" otherwise). */
const char *bdb_mqtt_reason_str(int rc);

/* The properties the gateway reads; a property it does not keep is still checked
 * (known identifier, its type's length within the block, no forbidden repeat). */
typedef struct bdb_mqtt_props {
    uint32_t present;         /* bit (1 << n) for each BDB_MQTT_P_* seen */
    uint32_t session_expiry;  /* 0x11 */
    uint16_t receive_max;     /* 0x21 */
    uint16_t topic_alias_max; /* 0x22 */
    uint16_t topic_alias;     /* 0x23 */
    uint16_t server_keepalive;
    uint8_t max_qos, payload_format;
    uint32_t max_packet; /* 0x27 */
    const char *reason;  /* 0x1f, not NUL-terminated; points into the packet */
    size_t reason_len;
    const char *content_type; /* 0x03 */
    size_t content_type_len;
    const char *assigned_id; /* 0x12 */
    size_t assigned_id_len;
    size_t user_props; /* how many 0x26 pairs */
    uint32_t sub_id;   /* 0x0b, the lowest when a PUBLISH carries several */
    uint8_t sub_id_ok; /* 0x29 in CONNACK: subscription identifiers available */
} bdb_mqtt_props;

enum {
    BDB_MQTT_P_SESSION_EXPIRY,
    BDB_MQTT_P_RECEIVE_MAX,
    BDB_MQTT_P_TOPIC_ALIAS_MAX,
    BDB_MQTT_P_TOPIC_ALIAS,
    BDB_MQTT_P_MAX_PACKET,
    BDB_MQTT_P_MAX_QOS,
    BDB_MQTT_P_REASON,
    BDB_MQTT_P_SERVER_KEEPALIVE,
    BDB_MQTT_P_ASSIGNED_ID,
    BDB_MQTT_P_CONTENT_TYPE,
    BDB_MQTT_P_PAYLOAD_FORMAT,
    BDB_MQTT_P_SUB_ID,
    BDB_MQTT_P_SUB_ID_OK,
};
#define BDB_MQTT_HAS(props, p) (((props)->present >> (p)) & 1u)

/* Decodes a property block (variable byte integer length, then properties) at
 * buf[0..len): 0 with *used = bytes consumed, or -1 if malformed. props may be NULL
 * (validate only). */
int bdb_mqtt_parse_props(const uint8_t *buf, size_t len, size_t *used, bdb_mqtt_props *props);

typedef struct bdb_mqtt_connect_opts {
    int version; /* BDB_MQTT_V311 or BDB_MQTT_V5 */
    const char *client_id, *user, *pass;
    uint16_t keepalive_s;
    int clean_start;
    /* MQTT 5 only */
    uint32_t session_expiry_s; /* 0xffffffff: never expires */
    uint16_t receive_max;      /* 0: not sent (the protocol's 65535) */
    uint32_t max_packet;       /* 0: not sent (no limit) */
} bdb_mqtt_connect_opts;
int bdb_mqtt_encode_connect_opts(bdb_buf *out, const bdb_mqtt_connect_opts *o);

/* SUBSCRIBE at one QoS for every filter; MQTT 5 adds an empty property block and
 * subscription options = the QoS (no local 0, which shared subscriptions require). */
int bdb_mqtt_encode_subscribe_v(bdb_buf *out, int version, uint16_t packet_id,
                                const char *const *filters, size_t n, uint8_t qos);
/* SUBSCRIBE of one filter; with MQTT 5 and sub_id > 0 it carries that subscription
 * identifier (1..268435455), which the broker returns on every PUBLISH the
 * subscription delivers. */
int bdb_mqtt_encode_subscribe_id(bdb_buf *out, int version, uint16_t packet_id, const char *filter,
                                 uint8_t qos, uint32_t sub_id);
/* PUBACK; with MQTT 5 a reason code other than success is sent (3.1.1 has none). */
void bdb_mqtt_encode_puback_v(bdb_buf *out, int version, uint16_t packet_id, uint8_t reason);
/* DISCONNECT; MQTT 5 with reason "normal disconnection" (remaining length 0). */
void bdb_mqtt_encode_disconnect_v(bdb_buf *out, int version);

typedef struct bdb_mqtt_user_prop {
    const char *key, *value; /* NUL-terminated UTF-8 */
} bdb_mqtt_user_prop;
/* PUBLISH (qos 0 or 1). With MQTT 5 the user properties are sent (ignored for
 * 3.1.1). payload NULL: only the packet's head is encoded, its length counting len
 * payload bytes that the caller sends after it (streamed, never held whole). Returns
 * -1 (out unchanged) for an empty or too long topic, a string over 65535 bytes, or a
 * packet past BDB_MQTT_MAX_REMLEN. */
int bdb_mqtt_encode_publish_v(bdb_buf *out, int version, const char *topic, const void *payload,
                              size_t len, uint8_t qos, int dup, uint16_t packet_id,
                              const bdb_mqtt_user_prop *props, size_t nprops);

/* PUBLISH body of either version. For MQTT 5 the properties are checked and kept in
 * p->props (a Topic Alias is refused: the gateway announces a Topic Alias Maximum of
 * 0, so the topic is always there). */
int bdb_mqtt_parse_publish_v(int version, uint8_t flags, const uint8_t *body, size_t len,
                             bdb_mqtt_publish *p, bdb_mqtt_props *props);
/* CONNACK of either version: *return_code is the 3.1.1 return code or the MQTT 5
 * reason code; props (MQTT 5, may be NULL) gets the broker's limits. */
int bdb_mqtt_parse_connack_v(int version, const uint8_t *body, size_t len, int *session_present,
                             int *return_code, bdb_mqtt_props *props);
/* SUBACK of either version; MQTT 5 codes are 0..2 granted or a failure >= 0x80. */
int bdb_mqtt_parse_suback_v(int version, const uint8_t *body, size_t len, uint16_t *packet_id,
                            uint8_t *codes, size_t max, size_t *n, bdb_mqtt_props *props);
/* PUBACK of either version (the broker's answer to our dead-letter PUBLISH):
 * *reason is 0 for 3.1.1 and for an MQTT 5 PUBACK without a reason code. */
int bdb_mqtt_parse_puback(int version, const uint8_t *body, size_t len, uint16_t *packet_id,
                          int *reason, bdb_mqtt_props *props);
/* DISCONNECT sent by an MQTT 5 broker: reason code (0 when absent) and properties. */
int bdb_mqtt_parse_disconnect(const uint8_t *body, size_t len, int *reason, bdb_mqtt_props *props);

/* Shared subscription `$share/<group>/<filter>` (MQTT 5, spec 4.8.2): returns 1 and
 * sets *inner to the filter part when f is one with a valid group name (non-empty,
 * no '+', '#' or '/') and a valid filter; 0 when f does not start with "$share/";
 * -1 when it does but is invalid. */
int bdb_mqtt_filter_shared(const char *f, const char **inner);

#endif
