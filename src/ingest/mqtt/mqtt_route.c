/* mqtt_route: see mqtt_route.h. */
#include "ingest/mqtt/mqtt_route.h"

#include "ingest/mqtt/mqtt_codec.h"

#include <stdio.h>
#include <string.h>

/* Option values are single words: a blank ends them. */
static size_t word_len(const char *p)
{
    size_t n = 0;
    while (p[n] && p[n] != ' ' && p[n] != '\t')
        n++;
    return n;
}

static int set_once(int *seen, const char *name, char *err, size_t errlen)
{
    if (*seen) {
        snprintf(err, errlen, "%s= given twice", name);
        return -1;
    }
    *seen = 1;
    return 0;
}

int bdb_mqtt_route_parse(const char *spec, bdb_mqtt_route *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->qos = 1;
    const char *p = spec;
    while (*p == ' ' || *p == '\t')
        p++;
    size_t fl = word_len(p);
    static const char *const opts[] = {"scheme=", "payload=", "tenant=", "qos="};
    for (size_t i = 0; fl && i < sizeof opts / sizeof *opts; i++)
        if (!strncmp(p, opts[i], strlen(opts[i])))
            fl = 0; /* an option where the filter belongs */
    if (!fl) {
        snprintf(err, errlen,
                 "expected '<filter> scheme=... payload=... tenant=... qos=...', "
                 "the topic filter first");
        return -1;
    }
    if (fl >= sizeof r->filter) {
        snprintf(err, errlen, "filter longer than %zu bytes", sizeof r->filter - 1);
        return -1;
    }
    memcpy(r->filter, p, fl);
    r->filter[fl] = '\0';
    p += fl;
    const char *inner = r->filter;
    int shared = bdb_mqtt_filter_shared(r->filter, &inner);
    if (shared < 0 || !bdb_mqtt_filter_valid(inner)) {
        snprintf(err, errlen, "'%s' is not a valid topic filter%s", r->filter,
                 shared < 0 ? " ($share/<group>/<filter>)" : "");
        return -1;
    }
    r->inner = (size_t)(inner - r->filter);
    int seen_scheme = 0, seen_payload = 0, seen_tenant = 0, seen_qos = 0;
    char scheme[sizeof r->scheme.text] = "+/{tenant}/{device}/#", val[1024];
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        size_t n = word_len(p);
        const char *eq = memchr(p, '=', n);
        if (!eq) {
            snprintf(err, errlen, "'%.*s' is not option=value", (int)(n > 64 ? 64 : n), p);
            return -1;
        }
        size_t kl = (size_t)(eq - p), vl = n - kl - 1;
        if (vl >= sizeof val) {
            snprintf(err, errlen, "%.*s= value longer than %zu bytes", (int)kl, p, sizeof val - 1);
            return -1;
        }
        memcpy(val, eq + 1, vl);
        val[vl] = '\0';
        if (kl == 6 && !memcmp(p, "scheme", 6)) {
            if (set_once(&seen_scheme, "scheme", err, errlen) != 0)
                return -1;
            if (vl >= sizeof scheme) {
                snprintf(err, errlen, "scheme= longer than %zu bytes", sizeof scheme - 1);
                return -1;
            }
            memcpy(scheme, val, vl + 1);
        } else if (kl == 7 && !memcmp(p, "payload", 7)) {
            if (set_once(&seen_payload, "payload", err, errlen) != 0)
                return -1;
            r->format = bdb_mqtt_format_parse(val, &r->level);
            if (r->format == -2) {
                snprintf(err, errlen, "payload=%s: the metric level must be 1..%d", val,
                         BDB_MQTT_SCHEME_MAX_LEVELS);
                return -1;
            }
            if (r->format < 0) {
                snprintf(err, errlen,
                         "payload=%s is not json, lp, object, value, value:<level> or auto", val);
                return -1;
            }
        } else if (kl == 6 && !memcmp(p, "tenant", 6)) {
            if (set_once(&seen_tenant, "tenant", err, errlen) != 0)
                return -1;
            if (vl == 0 || vl > BDB_MQTT_ROUTE_TENANT_MAX) {
                snprintf(err, errlen, "tenant= must be 1..%d characters",
                         BDB_MQTT_ROUTE_TENANT_MAX);
                return -1;
            }
            memcpy(r->tenant, val, vl + 1);
        } else if (kl == 3 && !memcmp(p, "qos", 3)) {
            if (set_once(&seen_qos, "qos", err, errlen) != 0)
                return -1;
            if (strcmp(val, "0") && strcmp(val, "1")) {
                snprintf(err, errlen, "qos=%s: must be 0 or 1 (QoS 2 is not supported)", val);
                return -1;
            }
            r->qos = val[0] - '0';
        } else {
            snprintf(err, errlen, "unknown option '%.*s' (scheme, payload, tenant, qos)",
                     (int)(kl > 64 ? 64 : kl), p);
            return -1;
        }
        p += n;
    }
    char why[512];
    if (bdb_mqtt_scheme_parse(scheme, &r->scheme, why, sizeof why) != 0) {
        /* the scheme parser names the global key; here it is an option */
        const char *m = !strncmp(why, "mqtt_topic_scheme", 17) ? why + 17 : why;
        snprintf(err, errlen, "scheme%s", m);
        return -1;
    }
    if (r->tenant[0] && r->scheme.tenant >= 0) {
        snprintf(err, errlen, "tenant=%s and the scheme's {tenant} level both name the tenant",
                 r->tenant);
        return -1;
    }
    return 0;
}

int bdb_mqtt_route_matches(const bdb_mqtt_route *r, const char *topic, size_t len)
{
    return bdb_mqtt_topic_match(r->filter + r->inner, topic, len);
}
