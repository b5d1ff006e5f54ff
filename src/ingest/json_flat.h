/* json_flat: the JSON objects home-automation gateways publish (docs/MQTT.md#payloads),
 * one device's readings at one time, onto one report:
 *
 *   {"temperature": 21.5, "humidity": 40, "state": "ON", "battery_low": false}
 *   {"Time": "2024-01-15T14:00:00", "AM2301": {"Temperature": 21.5}, "TempUnit": "C"}
 *
 * - a number is a metric named by its key; keys of nested objects are joined with '.'
 *   ("AM2301.Temperature"), at most BDB_JSONFLAT_MAX_DEPTH objects deep;
 * - true/false are 1/0;
 * - a string member named "state" at the top is the device state;
 * - any other string is an attribute named by its key (joined as a metric's); one
 *   over max_state_len, or beyond BDB_MAX_REPORT_ATTRS, is not stored: counted in
 *   strings_skipped, the first named;
 * - null is skipped (gateways send it for a reading they do not have);
 * - an array cannot be stored: the whole object is refused, naming it.
 * The time is the caller's (the message's arrival). */
#ifndef BDB_JSON_FLAT_H
#define BDB_JSON_FLAT_H

#include "model/batch.h"

#include <stddef.h>
#include <stdint.h>

#define BDB_JSONFLAT_MAX_DEPTH 8 /* nested objects, the top one counting as 1 */

typedef struct bdb_jsonflat_opts {
    const char *device; /* the device name, already checked */
    size_t device_len;
    int64_t ts_ms;
    size_t max_metrics;   /* metrics after flattening (max_fields) */
    size_t max_key_len;   /* a joined metric name (max_key_bytes) */
    size_t max_state_len; /* max_tag_value_bytes */
} bdb_jsonflat_opts;

typedef struct bdb_jsonflat_result {
    size_t metrics;
    size_t attrs; /* strings stored as attributes */
    size_t strings_skipped;
    char first_skipped[160]; /* "string 'Time'", "" if none */
} bdb_jsonflat_result;

/* Parses body into one report of b. BDB_OK; BDB_ERR_INVALID with why (not JSON, not
 * an object, an array member, too deep, a name too long or with control characters,
 * nothing to store); BDB_ERR_LIMIT with why (more than max_metrics); BDB_ERR_NOMEM. */
int bdb_jsonflat_ingest(const char *body, size_t len, const bdb_jsonflat_opts *o, bdb_batch *b,
                        bdb_jsonflat_result *res, char *why, size_t whylen);

#endif
