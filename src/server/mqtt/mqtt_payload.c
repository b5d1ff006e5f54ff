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

/* Gives the report object r the topic's device when it has none. */
static void default_device(json_t *r, const char *device)
{
    if (json_is_object(r) && !json_object_get(r, "device"))
        json_object_set_new(r, "device", json_string(device));
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
    in->shape = BDB_MQTT_FMT_JSON;
    const bdb_devrule *rule = in->rule;
    int64_t max_age_ms = in->max_age_ms;
    size_t *strings_skipped = &in->strings_skipped;
    json_t *reps = json_is_object(root) ? json_object_get(root, "reports") : NULL;
    if (json_is_array(reps) || json_is_array(root)) {
        json_t *arr = json_is_array(root) ? root : reps, *r;
        size_t i;
        json_array_foreach(arr, i, r) default_device(r, device);
    } else {
        default_device(root, device);
    }
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!text) {
        snprintf(why, whylen, "out of memory");
        return BDB_MQTT_BAD;
    }
    bdb_json_limits lim;
    bdb_json_limits_default(&lim);
    lim.max_key_len = cfg->max_key_bytes;
    lim.max_value_len = cfg->max_tag_value_bytes;
    lim.max_tags = cfg->max_tags;
    lim.max_metrics = cfg->max_fields;
    lim.max_future_ms = cfg->max_future_ms;
    lim.max_age_ms = max_age_ms;
    lim.rule = rule;
    lim.device_tag = cfg->device_tag;
    bdb_json_result jr;
    int rc = bdb_json_ingest(text, strlen(text), now_ms, &lim, b, &jr);
    free(text);
    if (rc == BDB_ERR_NOMEM) { /* an incomplete batch is never written (alloc.h) */
        snprintf(why, whylen, "out of memory parsing the payload");
        return BDB_MQTT_BAD;
    }
    if (rc == BDB_ERR_LIMIT || jr.fatal || jr.accepted == 0) {
        snprintf(why, whylen, "%s", jr.first_error[0] ? jr.first_error : "no report in payload");
        return BDB_MQTT_BAD;
    }
    *strings_skipped = jr.strings_skipped;
    if (jr.rejected) {
        snprintf(why, whylen, "%s (%zu report(s) accepted, %zu rejected)", jr.first_error,
                 jr.accepted, jr.rejected);
        return BDB_MQTT_PARTIAL;
    }
    return BDB_MQTT_OK;
}

/* Appends s with line-protocol tag escaping (comma, space, equals sign). */
static void lp_escape(bdb_buf *o, const char *s)
{
    for (; *s; s++) {
        if (*s == ',' || *s == ' ' || *s == '=' || *s == '\\')
            bdb_buf_putc(o, '\\');
        bdb_buf_putc(o, (uint8_t)*s);
    }
}

/* Copies one line, adding the device tag after the measurement when the line's tag
 * set does not name one. */
static void lp_line_with_device(bdb_buf *o, const char *l, size_t n, const char *tag,
                                const char *device)
{
    size_t i = 0;
    while (i < n && (l[i] == ' ' || l[i] == '\t'))
        i++;
    if (i == n || l[i] == '#') {
        bdb_buf_append(o, l, n);
        return;
    }
    size_t m = i; /* end of the measurement */
    while (m < n && l[m] != ',' && l[m] != ' ') {
        if (l[m] == '\\')
            m++;
        m++;
    }
    if (m > n)
        m = n;
    size_t te = m; /* end of the tag set */
    while (te < n && l[te] != ' ') {
        if (l[te] == '\\')
            te++;
        te++;
    }
    if (te > n)
        te = n;
    size_t tl = strlen(tag);
    int has = 0;
    for (size_t k = m; k + tl + 1 < te && !has; k++)
        if (l[k] == ',' && l[k - 1] != '\\' && memcmp(l + k + 1, tag, tl) == 0 &&
            l[k + 1 + tl] == '=')
            has = 1;
    if (has) {
        bdb_buf_append(o, l, n);
        return;
    }
    bdb_buf_append(o, l, m);
    bdb_buf_putc(o, ',');
    lp_escape(o, tag);
    bdb_buf_putc(o, '=');
    lp_escape(o, device);
    bdb_buf_append(o, l + m, n - m);
}

static int parse_lp(const bdb_config *cfg, const bdb_devrule *rule, int64_t max_age_ms,
                    const char *p, size_t len, const char *device, int64_t now_ms, bdb_batch *b,
                    size_t *strings_skipped, char *why, size_t whylen)
{
    bdb_buf body;
    bdb_buf_init(&body);
    size_t i = 0;
    while (i < len) {
        const char *nl = memchr(p + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - p) : len;
        lp_line_with_device(&body, p + i, e - i, cfg->device_tag, device);
        if (nl)
            bdb_buf_putc(&body, '\n');
        i = e + 1;
    }
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
    bdb_lp_result lr;
    memset(&lr, 0, sizeof lr);
    int lrc = lp ? bdb_lp_ingest(lp, body.len ? (const char *)body.data : "", body.len, BDB_LP_NS,
                                 now_ms, &map, b, &lr)
                 : BDB_ERR_NOMEM;
    bdb_lp_parser_free(lp);
    bdb_buf_free(&body);
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

/* The rule's device for a payload without tags: the topic's device counts as the tag
 * device_tag. 0 with the name (in buf when built), or -1 with why. */
struct topic_tag {
    const char *tag, *device;
};

static const char *topic_device_tag(void *ctx, const char *key, size_t klen, size_t *vlen)
{
    const struct topic_tag *t = ctx;
    if (strlen(t->tag) != klen || memcmp(t->tag, key, klen))
        return NULL;
    *vlen = strlen(t->device);
    return t->device;
}

static int untagged_device(const bdb_config *cfg, const bdb_devrule *rule, const char *device,
                           char *buf, size_t cap, const char **dev, size_t *dlen, char *why,
                           size_t whylen)
{
    struct topic_tag t = {cfg->device_tag, device};
    int a = bdb_devrule_device(rule, topic_device_tag, &t, buf, cap, dev, dlen);
    if (a == -1) {
        char m[300];
        bdb_devrule_missing(rule, m, sizeof m);
        snprintf(why, whylen, "%s (the payload has no tags; the topic's device counts as '%s')", m,
                 cfg->device_tag);
        return -1;
    }
    if (a < 0 || *dlen > cfg->max_key_bytes || !bdb_batch_name_valid(*dev, *dlen)) {
        snprintf(why, whylen,
                 "device name must be 1..%zu bytes of UTF-8 without control characters",
                 cfg->max_key_bytes);
        return -1;
    }
    return 0;
}

/* A gateway object (ingest/json_flat.h) of the topic's device, at the arrival time. */
static int parse_object(const bdb_config *cfg, bdb_mqtt_in *in, const char *p, size_t len,
                        const char *device, int64_t now_ms, bdb_batch *b, char *why, size_t whylen)
{
    char buf[1024];
    const char *dev;
    size_t dlen;
    if (untagged_device(cfg, in->rule, device, buf, sizeof buf, &dev, &dlen, why, whylen) != 0)
        return BDB_MQTT_BAD;
    bdb_jsonflat_opts o = {
        dev, dlen, now_ms, cfg->max_fields, cfg->max_key_bytes, cfg->max_tag_value_bytes};
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

/* A bare value: a number, true/false, or else the device's state text. */
static int parse_value(const bdb_config *cfg, bdb_mqtt_in *in, const char *p, size_t len,
                       const char *device, int64_t now_ms, bdb_batch *b, char *why, size_t whylen)
{
    while (len &&
           (p[len - 1] == ' ' || p[len - 1] == '\t' || p[len - 1] == '\r' || p[len - 1] == '\n'))
        len--;
    char buf[1024];
    const char *dev;
    size_t dlen;
    if (untagged_device(cfg, in->rule, device, buf, sizeof buf, &dev, &dlen, why, whylen) != 0)
        return BDB_MQTT_BAD;
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
    bdb_batch_begin(b, dev, dlen, now_ms, 0);
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
