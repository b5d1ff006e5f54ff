/* lp_ingest: maps InfluxDB line protocol onto bucketdb's model.
 *
 *   sensor,device=d1,site=berlin temp=21.5,rpm=900i,state="on" 1700000000000000000
 *
 * - the device rule (devrule.h; default: the tag named by device_tag) names the
 *   device, else fallback_device when set; every tag is a device tag but device_tag
 *   where the rule named the device by it (bdb_devrule_tags);
 * - each numeric or boolean field is a metric named "<measurement>.<field>" (or just
 *   "<field>" with field naming); booleans are 1/0, integers become doubles;
 * - a string field named "state" is the device state; any other string field is an
 *   attribute named as a metric (the device's latest value per name); one that breaks
 *   the attribute limits (value over max_state_bytes, more than BDB_MAX_REPORT_ATTRS
 *   in the line) is not stored, and does not cost the line its other fields: it is
 *   counted in strings_skipped and the first is named in first_skipped
 *   (docs/API.md#mapping-rule);
 * - a point without a timestamp gets the server's receive time.
 * Lines are independent: a bad line is counted and reported, the good lines of the
 * same body are still added to the batch (Influx 1.x semantics). */
#ifndef BDB_LP_INGEST_H
#define BDB_LP_INGEST_H

#include "ingest/devrule.h"
#include "ingest/lineproto.h"
#include "model/batch.h"

#include <stddef.h>
#include <stdint.h>

typedef struct bdb_lp_map {
    const char *device_tag;
    const bdb_devrule *rule; /* NULL = the one-key rule of device_tag */
    int field_only;          /* 1 = metric is the field name alone */
    int64_t max_future_ms;   /* reject times beyond now + this; 0 = no check */
    size_t max_name_bytes;   /* device and metric names */
    size_t max_state_bytes;  /* the state string; 0 = no extra limit */
    int64_t max_age_ms;      /* refuse times older than now - this (the tenant's retention:
                                such a point would never be readable); 0 = no check */
    /* the device of a line whose tags name none under the rule (MQTT: the topic's
     * device level), its tags all device tags; NULL = such a line is rejected */
    const char *fallback_device;
} bdb_lp_map;

typedef struct bdb_lp_result {
    size_t lines;    /* non-blank, non-comment lines */
    size_t accepted; /* lines added to the batch */
    size_t rejected;
    size_t beyond_retention; /* of the rejected: parsed, but older than max_age_ms */
    size_t first_bad_line;   /* 1-based, 0 if none */
    int first_is_limit;      /* the first error was a limit (line length, tags, ...) */
    char first_error[640];   /* "unable to parse '<line>': <reason>" */
    size_t strings_skipped;  /* string fields other than state beyond the limits, not stored */
    char first_skipped[160]; /* "line 3: string field 'uptime_format'", "" if none */
} bdb_lp_result;

/* Returns BDB_OK (even when some lines were rejected; see res), or BDB_ERR_NOMEM
 * when memory ran out: then the batch is incomplete and must not be written. */
int bdb_lp_ingest(bdb_lp_parser *p, const char *body, size_t len, enum bdb_lp_precision prec,
                  int64_t now_ms, const bdb_lp_map *map, bdb_batch *b, bdb_lp_result *res);

#endif
