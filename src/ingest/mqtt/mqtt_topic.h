/* mqtt_topic: what a message's topic says (docs/MQTT.md#topic-scheme): which levels
 * name the tenant and the device (the topic scheme), and which payload format a
 * topic carries (per-filter formats). Pure string work, no allocation: both tables
 * live in fixed-size structs filled from the configuration at start. */
#ifndef BDB_MQTT_TOPIC_H
#define BDB_MQTT_TOPIC_H

#include <stddef.h>

#define BDB_MQTT_SCHEME_MAX_LEVELS 32
#define BDB_MQTT_FORMATS_MAX 32

/* A scheme such as "+/{tenant}/{device}/#": one entry per level, each a literal
 * that must match, '+' (any), {tenant} or {device}; a final '#' accepts any further
 * levels (without it the topic must have exactly as many levels). {device} is
 * required; without {tenant} every message goes to the default tenant. */
typedef struct bdb_mqtt_scheme {
    size_t nlevels;
    int tenant, device; /* level index; tenant -1 = none */
    int rest;           /* 1 when the scheme ends in '#' (not counted in nlevels) */
    const char *lit[BDB_MQTT_SCHEME_MAX_LEVELS]; /* NULL: any value */
    char text[256];                              /* the levels, NUL-separated */
} bdb_mqtt_scheme;

/* 0, or -1 with a message naming the problem (unknown placeholder, '#' not last,
 * {device} missing or twice, too many levels, too long). */
int bdb_mqtt_scheme_parse(const char *spec, bdb_mqtt_scheme *sc, char *err, size_t errlen);
/* Tenant and device of a topic: 0 with pointers into topic (*tlen = 0 when the
 * scheme has no {tenant}), or -1 with why (fewer levels, a literal that differs,
 * an empty tenant or device level). Names are not validated here. */
int bdb_mqtt_scheme_ids(const bdb_mqtt_scheme *sc, const char *topic, size_t len,
                        const char **tenant, size_t *tlen, const char **device, size_t *dlen,
                        char *why, size_t whylen);

enum bdb_mqtt_format {
    BDB_MQTT_FMT_AUTO,
    BDB_MQTT_FMT_JSON, /* the report format of POST /api/v1/write/json */
    BDB_MQTT_FMT_LP,
    BDB_MQTT_FMT_VALUE, /* a bare number, boolean or state text (Home Assistant) */
    BDB_MQTT_FMT_OBJECT /* a gateway's object of readings (ingest/json_flat.h) */
};

/* "filter=format,filter=format": the first filter matching a topic gives its format
 * (json, lp or lineproto, object, value or value:<level>, auto); a topic no filter
 * matches is auto (sniffed from the payload). value:<level> names the metric after
 * that topic level, 1..BDB_MQTT_SCHEME_MAX_LEVELS; plain value calls it "value". */
typedef struct bdb_mqtt_formats {
    size_t n;
    const char *filter[BDB_MQTT_FORMATS_MAX];
    int format[BDB_MQTT_FORMATS_MAX];
    int level[BDB_MQTT_FORMATS_MAX]; /* value: the metric's topic level (1-based), 0 = none */
    char text[1024];
} bdb_mqtt_formats;

/* One format name: json, lp (lineproto, line), object, value, value:<level> or auto;
 * -1 for an unknown name, -2 for a level outside 1..BDB_MQTT_SCHEME_MAX_LEVELS. */
int bdb_mqtt_format_parse(const char *s, int *level);
int bdb_mqtt_formats_parse(const char *spec, bdb_mqtt_formats *f, char *err, size_t errlen);
int bdb_mqtt_format_for(const bdb_mqtt_formats *f, const char *topic, size_t len);
/* As bdb_mqtt_format_for, also giving the metric level of a value format (0 = none). */
int bdb_mqtt_format_match(const bdb_mqtt_formats *f, const char *topic, size_t len, int *level);
/* Level `level` (1-based) of a topic: 0 with *p, *n, or -1 when it has fewer levels. */
int bdb_mqtt_topic_level(const char *topic, size_t len, int level, const char **p, size_t *n);
const char *bdb_mqtt_format_name(int format);

#endif
