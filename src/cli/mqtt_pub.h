/* mqtt_pub: a small MQTT 5 QoS 1 publisher for the operator commands (`bucketdb
 * load --mqtt`). It speaks through the server's own codec (src/ingest/mqtt/
 * mqtt_codec.h), so there is one encoder and decoder of the protocol in the tree.
 *
 * A message counts as acknowledged only when the broker's PUBACK for it arrived
 * with a success reason code (below 0x80); a PUBACK with a failure code (e.g. 0x87
 * not authorized) counts as refused, and a message whose PUBACK never came (the
 * connection failed or timed out) is neither: the caller sees it as sent minus
 * acknowledged minus refused. At most `window` messages are unacknowledged at a time
 * (the broker's receive maximum, capped at 64). Every socket wait has a timeout. */
#ifndef BDB_CLI_MQTT_PUB_H
#define BDB_CLI_MQTT_PUB_H

#include "common/buf.h"

#include <stddef.h>
#include <stdint.h>

typedef struct cli_mqtt {
    int fd; /* -1 when not connected */
    int timeout_s;
    size_t window, inflight;
    uint16_t next_id;
    long long sent, acked, refused;
    int last_reason; /* reason code of the last refusing PUBACK */
    bdb_buf rbuf, wbuf;
    char err[256]; /* why the connection failed */
} cli_mqtt;

/* Connects to broker ("host:port", "[v6]:port" or "mqtt://host:port"; port 1883 if
 * left out) with clean start and the given client id; user and pass may be NULL.
 * Returns 0, or -1 with m->err (address, connection, CONNACK refusal). */
int cli_mqtt_connect(cli_mqtt *m, const char *broker, const char *client_id, const char *user,
                     const char *pass, int timeout_s);
void cli_mqtt_close(cli_mqtt *m);

/* Publishes one QoS 1 message, first waiting for PUBACKs while the window is full.
 * Returns 0, or -1 with m->err when the connection failed. */
int cli_mqtt_publish(cli_mqtt *m, const char *topic, const void *payload, size_t len);

/* Waits until every published message is acknowledged or refused. 0, or -1 with
 * m->err (the messages still in flight stay unacknowledged). */
int cli_mqtt_drain(cli_mqtt *m);

#endif
