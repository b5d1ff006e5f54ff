/* mqtt_payload: a message's topic and payload to tenant, device and a batch
 * (docs/MQTT.md#topic-scheme, #payloads). See mqtt_gw.h. */
#include "server/mqtt/mqtt_gw.h"

#include "bucketdb/bdb.h"
#include "ingest/devrule.h"
#include "ingest/json_flat.h"
#include "ingest/json_ingest.h"
#include "ingest/lp_ingest.h"
#include "server/tenants/tenants.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bdb_mqtt_topic_names(const bdb_mqtt_scheme *sc, const char *default_tenant, const char *topic,
                         size_t len, char *tenant, size_t tcap, char *device, size_t dcap,
                         char *why, size_t whylen)
{
    const char *tv, *dv;
    size_t tl, dl;
    if (bdb_mqtt_scheme_ids(sc, topic, len, &tv, &tl, &dv, &dl, why, whylen) != 0)
        return -1;
    if (!tl) { /* the scheme has no {tenant}: every device of the broker is one tenant's */
        tv = default_tenant;
        tl = strlen(default_tenant);
    }
    if (tl >= tcap) {
        snprintf(why, whylen, "tenant level is longer than %zu bytes", tcap - 1);
        return -1;
    }
    memcpy(tenant, tv, tl);
    tenant[tl] = '\0';
    if (!bdb_tenant_name_valid(tenant)) {
        snprintf(why, whylen, "tenant '%s' is not a valid name (A-Z a-z 0-9 _ - .)", tenant);
        return -1;
    }
    if (dl >= dcap) {
        snprintf(why, whylen, "device level is longer than %zu bytes", dcap - 1);
        return -1;
    }
    if (dl && !bdb_batch_name_valid(dv, dl)) {
        snprintf(why, whylen, "device level is not UTF-8 or has control characters");
        return -1;
    }
    memcpy(device, dv, dl);
    device[dl] = '\0';
    return 0;
}

/* An object in the report format has one of these members; any other object is a
 * gateway's object of readings. */
static int is_report_object(json_t *o)
{
    static const char *const keys[] = {"metrics", "reports", "device", "tags", "time"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (json_object_get(o, keys[i]))
            return 1;
    return 0;
}

static int parse_object(const bdb_config *cfg, bdb_mqtt_in *in, const char *p, size_t len,
                        const char *device, int64_t now_ms, bdb_batch *b, char *why, size_t whylen);

/* JSON reports; under auto (in->shape still AUTO) an object that is not one is handed
 * to parse_object, so that recognising it costs no extra parse. */
static int parse_json(const bdb_config *cfg, bdb_mqtt_in *in, const char *p, size_t len,
                      const char *device, int64_t now_ms, bdb_batch *b, char *why, size_t whylen)
{
    json_error_t err;
    json_t *root = json_loadb(p, len, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        in->shape = BDB_MQTT_FMT_JSON;
        snprintf(why, whylen, "invalid JSON at line %d column %d: %s", err.line, err.column,
                 err.text);
        return BDB_MQTT_BAD;
    }
    if (in->shape == BDB_MQTT_FMT_AUTO && json_is_object(root) && !is_report_object(root)) {
        json_decref(root);
        in->shape = BDB_MQTT_FMT_OBJECT;
        return parse_object(cfg, in, p, len, device, now_ms, b, why, whylen);
    }
    /* this parse refuses a key given twice, which the report parser would take the
     * last of; the reports themselves are read from the text as HTTP reads them */
    json_decref(root);
    in->shape = BDB_MQTT_FMT_JSON;
    bdb_json_limits lim;
    bdb_json_limits_default(&lim);
    lim.max_key_len = cfg->max_key_bytes;
    lim.max_value_len = cfg->max_tag_value_bytes;
    lim.max_tags = cfg->max_tags;
    lim.max_metrics = cfg->max_fields;
    lim.max_future_ms = cfg->max_future_ms;
    lim.max_age_ms = in->max_age_ms;
    lim.rule = in->rule;
    lim.device_tag = cfg->device_tag;
    lim.fallback_device = device; /* a report the rule names no device of: the topic's */
    bdb_json_result jr;
    int rc = bdb_json_ingest(p, len, now_ms, &lim, b, &jr);
    if (rc == BDB_ERR_NOMEM) { /* an incomplete batch is never written (alloc.h) */
        snprintf(why, whylen, "out of memory parsing the payload");
        return BDB_MQTT_BAD;
    }
    if (rc == BDB_ERR_LIMIT || jr.fatal || jr.accepted == 0) {
        snprintf(why, whylen, "%s", jr.first_error[0] ? jr.first_error : "no report in payload");
        return BDB_MQTT_BAD;
    }
    in->strings_skipped = jr.strings_skipped;
    if (jr.rejected) {
        snprintf(why, whylen, "%s (%zu report(s) accepted, %zu rejected)", jr.first_error,
                 jr.accepted, jr.rejected);
        return BDB_MQTT_PARTIAL;
    }
    return BDB_MQTT_OK;
}

static int parse_lp(const bdb_config *cfg, const bdb_devrule *rule, int64_t max_age_ms,
                    const char *p, size_t len, const char *device, int64_t now_ms, bdb_batch *b,
                    size_t *strings_skipped, char *why, size_t whylen)
{
    bdb_lp_limits lim;
    bdb_lp_limits_default(&lim);
    lim.max_line_len = cfg->max_line_bytes;
    lim.max_tags = cfg->max_tags;
    lim.max_fields = cfg->max_fields;
    lim.max_key_len = cfg->max_key_bytes;
    lim.max_tag_value_len = cfg->max_tag_value_bytes;
    bdb_lp_parser *lp = bdb_lp_parser_new(&lim);
    bdb_lp_map map = {cfg->device_tag,
                      rule,
                      !strcmp(cfg->metric_naming, "field"),
                      cfg->max_future_ms,
                      cfg->max_key_bytes,
                      cfg->max_tag_value_bytes};
    map.max_age_ms = max_age_ms;
    map.fallback_device = device; /* a line the rule names no device of: the topic's */
    bdb_lp_result lr;
    memset(&lr, 0, sizeof lr);
    int lrc = lp ? bdb_lp_ingest(lp, p, len, BDB_LP_NS, now_ms, &map, b, &lr) : BDB_ERR_NOMEM;
    bdb_lp_parser_free(lp);
    *strings_skipped = lr.strings_skipped;
    if (lrc == BDB_ERR_NOMEM) { /* an incomplete batch is never written (alloc.h) */
        snprintf(why, whylen, "out of memory parsing the payload");
        return BDB_MQTT_BAD;
    }
    if (lr.accepted == 0) {
        snprintf(why, whylen, "%s", lr.first_error[0] ? lr.first_error : "no line in payload");
        return BDB_MQTT_BAD;
    }
    if (lr.rejected) {
        snprintf(why, whylen, "line %zu: %s (%zu line(s) accepted, %zu rejected)",
                 lr.first_bad_line, lr.first_error, lr.accepted, lr.rejected);
        return BDB_MQTT_PARTIAL;
    }
    return BDB_MQTT_OK;
}

/* A gateway object (ingest/json_flat.h) of the topic's device, at the arrival time: it
 * has no tags, so the device rule names nothing and the topic's device applies, as
 * for a line or report without tags. */
static int parse_object(const bdb_config *cfg, bdb_mqtt_in *in, const char *p, size_t len,
                        const char *device, int64_t now_ms, bdb_batch *b, char *why, size_t whylen)
{
    bdb_jsonflat_opts o = {device,          strlen(device),     now_ms,
                           cfg->max_fields, cfg->max_key_bytes, cfg->max_tag_value_bytes};
    bdb_jsonflat_result r;
    int rc = bdb_jsonflat_ingest(p, len, &o, b, &r, why, whylen);
    if (rc == BDB_ERR_NOMEM) {
        snprintf(why, whylen, "out of memory parsing the payload");
        return BDB_MQTT_BAD;
    }
    if (rc != BDB_OK)
        return BDB_MQTT_BAD;
    in->strings_skipped = r.strings_skipped;
    return BDB_MQTT_OK;
}

/* A bare value of the topic's device (no tags, as an object): a number, true/false, or
 * else the device's state text. */
static int parse_value(const bdb_config *cfg, bdb_mqtt_in *in, const char *p, size_t len,
                       const char *device, int64_t now_ms, bdb_batch *b, char *why, size_t whylen)
{
    while (len &&
           (p[len - 1] == ' ' || p[len - 1] == '\t' || p[len - 1] == '\r' || p[len - 1] == '\n'))
        len--;
    const char *metric = "value";
    size_t mlen = 5;
    if (in->metric_level) {
        if (bdb_mqtt_topic_level(in->topic, in->topic_len, in->metric_level, &metric, &mlen) != 0 ||
            !mlen) {
            snprintf(why, whylen, "the topic has no level %d to name the metric", in->metric_level);
            return BDB_MQTT_BAD;
        }
        if (mlen > cfg->max_key_bytes || !bdb_batch_name_valid(metric, mlen)) {
            snprintf(why, whylen,
                     "metric name from topic level %d must be 1..%zu bytes of UTF-8 without "
                     "control characters",
                     in->metric_level, cfg->max_key_bytes);
            return BDB_MQTT_BAD;
        }
    }
    double d;
    int is_num = bdb_mqtt_bare_number(p, len, &d);
    bdb_batch_begin(b, device, strlen(device), now_ms, 0);
    if (is_num) {
        bdb_batch_metric(b, metric, mlen, d);
    } else {
        if (len > cfg->max_tag_value_bytes) {
            bdb_batch_cancel(b);
            snprintf(why, whylen,
                     "not a number, and as a state its length %zu exceeds "
                     "max-tag-value-bytes %zu",
                     len, cfg->max_tag_value_bytes);
            return BDB_MQTT_BAD;
        }
        if (!bdb_utf8_valid(p, len, NULL)) {
            bdb_batch_cancel(b);
            snprintf(why, whylen, "not a number, and as a state not UTF-8");
            return BDB_MQTT_BAD;
        }
        bdb_batch_state(b, p, len);
    }
    bdb_batch_end(b);
    if (bdb_batch_failed(b) != BDB_OK) {
        snprintf(why, whylen, "out of memory parsing the payload");
        return BDB_MQTT_BAD;
    }
    return BDB_MQTT_OK;
}

int bdb_mqtt_bare_number(const char *p, size_t len, double *d)
{
    if (len == 4 && !memcmp(p, "true", 4)) {
        *d = 1;
        return 1;
    }
    if (len == 5 && !memcmp(p, "false", 5)) {
        *d = 0;
        return 1;
    }
    /* JSON's number syntax: no hex, no "inf"/"nan", no leading '+' or blanks */
    char tmp[64];
    if (!len || len >= sizeof tmp)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!strchr("0123456789+-.eE", p[i]))
            return 0;
    if (p[0] == '+')
        return 0;
    memcpy(tmp, p, len);
    tmp[len] = '\0';
    char *end;
    *d = strtod(tmp, &end);
    return *end == '\0' && isfinite(*d);
}

/* auto: '[' is JSON reports; '{' JSON reports or a gateway object (AUTO: decided by
 * parse_json); a bare number or boolean a value; anything else line protocol. */
static int sniff(const char *p, size_t len)
{
    if (p[0] == '[')
        return BDB_MQTT_FMT_JSON;
    if (p[0] == '{')
        return BDB_MQTT_FMT_AUTO; /* reports or a gateway object: parse_json decides */
    size_t n = len;
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\r' || p[n - 1] == '\n'))
        n--;
    double d;
    return bdb_mqtt_bare_number(p, n, &d) ? BDB_MQTT_FMT_VALUE : BDB_MQTT_FMT_LP;
}

int bdb_mqtt_payload_parse_in(const bdb_config *cfg, bdb_mqtt_in *in, const char *payload,
                              size_t len, const char *device, int64_t now_ms, bdb_batch *b,
                              char *why, size_t whylen)
{
    why[0] = '\0';
    in->strings_skipped = 0;
    in->shape = in->format;
    size_t i = 0;
    while (i < len &&
           (payload[i] == ' ' || payload[i] == '\t' || payload[i] == '\r' || payload[i] == '\n'))
        i++;
    if (i == len) {
        snprintf(why, whylen, "empty payload");
        return BDB_MQTT_BAD;
    }
    if (memchr(payload, '\0', len)) {
        snprintf(why, whylen, "payload contains a NUL byte");
        return BDB_MQTT_BAD;
    }
    bdb_devrule own;
    if (!in->rule) {
        bdb_config_device_rule(cfg, &own);
        in->rule = &own;
    }
    const char *p = payload + i;
    len -= i;
    if (in->shape == BDB_MQTT_FMT_AUTO)
        in->shape = sniff(p, len);
    int rc;
    switch (in->shape) {
    case BDB_MQTT_FMT_AUTO:
    case BDB_MQTT_FMT_JSON:
        rc = parse_json(cfg, in, p, len, device, now_ms, b, why, whylen);
        break;
    case BDB_MQTT_FMT_OBJECT:
        rc = parse_object(cfg, in, p, len, device, now_ms, b, why, whylen);
        break;
    case BDB_MQTT_FMT_VALUE:
        rc = parse_value(cfg, in, p, len, device, now_ms, b, why, whylen);
        break;
    default:
        rc = parse_lp(cfg, in->rule, in->max_age_ms, p, len, device, now_ms, b,
                      &in->strings_skipped, why, whylen);
    }
    if (in->rule == &own)
        in->rule = NULL;
    return rc;
}

int bdb_mqtt_payload_parse(const bdb_config *cfg, int format, int64_t max_age_ms,
                           const char *payload, size_t len, const char *device, int64_t now_ms,
                           bdb_batch *b, char *why, size_t whylen)
{
    bdb_mqtt_in in = {.format = format, .topic = "", .max_age_ms = max_age_ms};
    return bdb_mqtt_payload_parse_in(cfg, &in, payload, len, device, now_ms, b, why, whylen);
}
