/* json_ingest: the JSON batch format (POST /api/v1/write/json).
 *
 *   {"reports": [ {"device": "d1", "time": 1700000000000 | "2023-11-14T22:13:20Z",
 *                  "metrics": {"temp": 21.5, "rpm": 900},
 *                  "tags": {"site": "berlin"}, "state": "on"}, ... ]}
 *
 * The device follows the device rule (devrule.h, docs/API.md#mapping-rule): the
 * "device" member counts as the tag named by device_tag, and a rule such as
 * "host+device,host" may take it from "tags" instead; every tag is stored as a
 * device tag but device_tag where the rule named the device by it, as on line
 * protocol (bdb_devrule_tags). With the default rule "device" is required.
 * A bare array of reports, or a single report object, is accepted too. "time" is Unix
 * ms or RFC 3339; missing time = now_ms. Metric values must be finite numbers
 * (booleans count as 1/0); a string value is not stored and does not cost the report
 * its other metrics (counted in strings_skipped, docs/API.md#mapping-rule), but a
 * report left with nothing to store is rejected. Tag values must be strings.
 *
 * Bad reports do not stop the others (Influx partial-write semantics): each valid
 * report is added to the batch, each invalid one is counted and the first error is
 * described with its index and field, e.g.
 *   "report 3: field \"metrics.temp\": value must be a finite number". */
#ifndef BDB_JSON_INGEST_H
#define BDB_JSON_INGEST_H

#include "ingest/devrule.h"
#include "model/batch.h"

#include <stddef.h>
#include <stdint.h>

typedef struct bdb_json_limits {
    size_t max_reports;      /* default 100000 */
    size_t max_metrics;      /* per report, default 256 */
    size_t max_tags;         /* per report, default 64 */
    size_t max_key_len;      /* device, metric, tag key, default 256 */
    size_t max_value_len;    /* tag value and state, default 1024 */
    int64_t max_future_ms;   /* refuse times further ahead of now_ms; 0 = no check (default) */
    int64_t max_age_ms;      /* refuse times older than now_ms - this (the tenant's retention);
                                0 = no check (default) */
    const bdb_devrule *rule; /* the device rule; NULL = "device" (default) */
    const char *device_tag;  /* the tag the "device" member stands for; NULL = "device" */
    /* the device of a report whose "device" and tags name none under the rule (MQTT:
     * the topic's device level), its tags all device tags; NULL = such a report is
     * rejected */
    const char *fallback_device;
} bdb_json_limits;

void bdb_json_limits_default(bdb_json_limits *l);

typedef struct bdb_json_result {
    size_t accepted, rejected;
    long first_bad_index; /* -1 if none */
    char first_error[512];
    int fatal;               /* 1 if the body itself is not valid JSON (nothing accepted) */
    size_t strings_skipped;  /* string metric values of accepted reports, not stored */
    char first_skipped[160]; /* "report 2: string metric 'fw'", "" if none */
} bdb_json_result;

/* Parses body into b. Returns BDB_OK if every report was accepted, BDB_ERR_INVALID if
 * the body is not JSON of the documented shape or some reports were rejected
 * (see res), BDB_ERR_LIMIT if more than max_reports, BDB_ERR_NOMEM if memory ran out
 * (the batch is then incomplete and must not be written). */
int bdb_json_ingest(const char *body, size_t len, int64_t now_ms, const bdb_json_limits *lim,
                    bdb_batch *b, bdb_json_result *res);

#endif
