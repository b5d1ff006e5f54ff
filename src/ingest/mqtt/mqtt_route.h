/* mqtt_route: one `mqtt_route` line of the configuration (docs/MQTT.md#routes): a
 * subscription filter with its own topic scheme, payload format, fixed tenant and
 * QoS, so one server can take several gateways' topic layouts at once. Pure string
 * work; the gateway (src/server/mqtt/) subscribes and picks a message's route. */
#ifndef BDB_MQTT_ROUTE_H
#define BDB_MQTT_ROUTE_H

#include "ingest/mqtt/mqtt_topic.h"

#include <stddef.h>

/* Routes per server: every one is a subscription, and the gateway's subscription
 * table holds 32. */
#define BDB_MQTT_ROUTES_MAX 32
/* A fixed tenant's name as the tenant registry bounds it. */
#define BDB_MQTT_ROUTE_TENANT_MAX 128

/* Holds pointers into itself (the scheme's literals, the filter's inner part): parse
 * it where it stays, never copy it. */
typedef struct bdb_mqtt_route {
    char filter[1024]; /* as subscribed, $share/<group>/ included */
    size_t inner;      /* offset of the filter a topic is matched against */
    bdb_mqtt_scheme scheme;
    int format; /* enum bdb_mqtt_format */
    int level;  /* value:<level>: the metric's topic level, 0 = "value" */
    int qos;    /* 0 or 1 */
    char tenant[BDB_MQTT_ROUTE_TENANT_MAX + 1]; /* empty: {tenant} level, or the default */
} bdb_mqtt_route;

/* "<filter> [scheme=<scheme>] [payload=<format>] [tenant=<name>] [qos=0|1]", options
 * in any order, separated by blanks. Defaults: scheme +/{tenant}/{device}/#, payload
 * auto, qos 1. 0, or -1 with err naming the option (unknown option, a value given
 * twice, invalid filter or $share group, bad scheme or format, qos other than 0 or 1,
 * a tenant= and a {tenant} level both). The tenant's characters are checked by the
 * caller (the tenant registry's rule). */
int bdb_mqtt_route_parse(const char *spec, bdb_mqtt_route *r, char *err, size_t errlen);

/* 1 when the topic matches the route's filter (the inner filter of $share). */
int bdb_mqtt_route_matches(const bdb_mqtt_route *r, const char *topic, size_t len);

#endif
