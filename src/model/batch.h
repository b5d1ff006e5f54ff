/* batch: the unit of ingestion every protocol produces and every storage engine
 * consumes: a list of reports, each one device's readings at one event time.
 *
 * A report = (device, event time ms, metrics {name -> double}, device tags
 * {key -> value}, optional state text, attributes {name -> string}: string fields
 * other than the state, kept as the device's latest attributes). The tenant is per batch. All
 * strings are copied into the batch's arena, so the parser's buffers may be reused at once;
 * pointers handed out stay valid until bdb_batch_reset or bdb_batch_free. */
#ifndef BDB_BATCH_H
#define BDB_BATCH_H

#include "common/utf8.h"

#include <stddef.h>
#include <stdint.h>

typedef struct bdb_kv {
    const char *key;
    size_t klen;
    const char *val;
    size_t vlen;
} bdb_kv;

typedef struct bdb_metric_val {
    const char *name;
    size_t nlen;
    double value;
} bdb_metric_val;

typedef struct bdb_report {
    const char *device;
    size_t device_len;
    int64_t ts_ms;
    const bdb_kv *tags;
    uint32_t ntags;
    uint32_t nmetrics;
    const bdb_metric_val *metrics;
    const char *state; /* NULL = no state in this report */
    size_t state_len;
    const bdb_kv *attrs; /* key = attribute name, val = its string; NULL when none */
    uint32_t nattrs;
    size_t lineno; /* source line or array index, for error messages */
} bdb_report;

typedef struct bdb_batch bdb_batch;

bdb_batch *bdb_batch_new(void);
void bdb_batch_free(bdb_batch *b);
void bdb_batch_reset(bdb_batch *b);

/* Builder: begin, add tags/metrics/state/attributes, end. A report with no metric, no
 * state and no attribute is dropped by end (returns 0); otherwise end returns 1. */
void bdb_batch_begin(bdb_batch *b, const char *device, size_t dlen, int64_t ts_ms, size_t lineno);
void bdb_batch_tag(bdb_batch *b, const char *k, size_t kl, const char *v, size_t vl);
void bdb_batch_metric(bdb_batch *b, const char *name, size_t nlen, double value);
void bdb_batch_state(bdb_batch *b, const char *s, size_t n);
/* A string attribute of the report (a string field other than the state). */
void bdb_batch_attr(bdb_batch *b, const char *name, size_t nl, const char *v, size_t vl);
int bdb_batch_end(bdb_batch *b);
/* BDB_ERR_NOMEM if a builder call since the last reset ran out of memory (the report
 * it was building was dropped; the parser fails the whole batch), else BDB_OK.
 * bdb_batch_new returns NULL when out of memory. */
int bdb_batch_failed(const bdb_batch *b);
/* Abandons the report being built (e.g. the line turned out to be invalid). */
void bdb_batch_cancel(bdb_batch *b);

/* The finished reports. Valid until the next begin/reset/free. */
const bdb_report *bdb_batch_reports(const bdb_batch *b, size_t *n);
size_t bdb_batch_samples(const bdb_batch *b); /* total metric values */
size_t bdb_batch_attrs(const bdb_batch *b);   /* total attributes: 0 in most batches */

/* Most attributes one report may carry; those beyond are not stored (the ingest
 * layers count them with the other strings not stored). */
#define BDB_MAX_REPORT_ATTRS 64

/* The rule every way in applies to device and metric names (line protocol, JSON, MQTT
 * topics, the device profile endpoint): at least one byte, well-formed UTF-8 (names
 * reach JSON answers and Cassandra text columns) and no control characters (below
 * 0x20, 0x7f). Each caller adds its own length limit. 1 if n bytes at p pass. */
static inline int bdb_batch_name_valid(const char *p, size_t n)
{
    /* inline, one pass: it runs for every name of every report */
    if (n == 0)
        return 0;
    const unsigned char *q = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        if (q[i] < 0x80) {
            if (q[i] < 0x20 || q[i] == 0x7f)
                return 0;
            i++;
        } else {
            size_t l = bdb_utf8_seq(q + i, n - i);
            if (!l)
                return 0;
            i += l;
        }
    }
    return 1;
}

#endif
