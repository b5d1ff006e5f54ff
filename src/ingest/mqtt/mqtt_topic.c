/* mqtt_topic: see mqtt_topic.h. */
#include "ingest/mqtt/mqtt_topic.h"

#include "ingest/mqtt/mqtt_codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bdb_mqtt_scheme_parse(const char *spec, bdb_mqtt_scheme *sc, char *err, size_t errlen)
{
    memset(sc, 0, sizeof *sc);
    sc->tenant = sc->device = -1;
    size_t n = strlen(spec);
    if (n == 0 || n >= sizeof sc->text) {
        snprintf(err, errlen, "mqtt_topic_scheme: empty or longer than %zu bytes",
                 sizeof sc->text - 1);
        return -1;
    }
    memcpy(sc->text, spec, n + 1);
    char *p = sc->text;
    for (;;) {
        char *slash = strchr(p, '/');
        if (slash)
            *slash = '\0';
        if (sc->rest) {
            snprintf(err, errlen, "mqtt_topic_scheme '%s': '#' must be the last level", spec);
            return -1;
        }
        if (!strcmp(p, "#")) {
            sc->rest = 1;
        } else {
            if (sc->nlevels == BDB_MQTT_SCHEME_MAX_LEVELS) {
                snprintf(err, errlen, "mqtt_topic_scheme '%s': more than %d levels", spec,
                         BDB_MQTT_SCHEME_MAX_LEVELS);
                return -1;
            }
            int *slot = !strcmp(p, "{tenant}")   ? &sc->tenant
                        : !strcmp(p, "{device}") ? &sc->device
                                                 : NULL;
            if (slot) {
                if (*slot >= 0) {
                    snprintf(err, errlen, "mqtt_topic_scheme '%s': %s appears twice", spec, p);
                    return -1;
                }
                *slot = (int)sc->nlevels;
                sc->lit[sc->nlevels] = NULL;
            } else if (!strcmp(p, "+")) {
                sc->lit[sc->nlevels] = NULL;
            } else if (strpbrk(p, "+#{}")) {
                snprintf(err, errlen,
                         "mqtt_topic_scheme '%s': level '%s' is not a name, +, #, {tenant} or "
                         "{device}",
                         spec, p);
                return -1;
            } else {
                sc->lit[sc->nlevels] = p;
            }
            sc->nlevels++;
        }
        if (!slash)
            break;
        p = slash + 1;
    }
    if (sc->device < 0) {
        snprintf(err, errlen, "mqtt_topic_scheme '%s': {device} is missing", spec);
        return -1;
    }
    return 0;
}

int bdb_mqtt_scheme_ids(const bdb_mqtt_scheme *sc, const char *topic, size_t len,
                        const char **tenant, size_t *tlen, const char **device, size_t *dlen,
                        char *why, size_t whylen)
{
    *tenant = NULL;
    *tlen = 0;
    size_t level = 0, start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && topic[i] != '/')
            continue;
        if (level == sc->nlevels) {
            if (sc->rest)
                return 0; /* more levels under '#' */
            snprintf(why, whylen, "topic has more than the %zu levels of the topic scheme",
                     sc->nlevels);
            return -1;
        }
        const char *v = topic + start;
        size_t vl = i - start;
        const char *lit = sc->lit[level];
        if (lit && (strlen(lit) != vl || memcmp(lit, v, vl) != 0)) {
            snprintf(why, whylen, "topic level %zu is '%.*s', the topic scheme wants '%s'",
                     level + 1, (int)(vl > 64 ? 64 : vl), v, lit);
            return -1;
        }
        if ((int)level == sc->tenant || (int)level == sc->device) {
            if (vl == 0) {
                snprintf(why, whylen, "%s level (%zu) is empty",
                         (int)level == sc->tenant ? "tenant" : "device", level + 1);
                return -1;
            }
            if ((int)level == sc->tenant) {
                *tenant = v;
                *tlen = vl;
            } else {
                *device = v;
                *dlen = vl;
            }
        }
        level++;
        start = i + 1;
    }
    if (level < sc->nlevels) {
        snprintf(why, whylen, "topic has %zu levels, the topic scheme needs %zu%s", level,
                 sc->nlevels, sc->rest ? " or more" : "");
        return -1;
    }
    return 0;
}

int bdb_mqtt_format_parse(const char *s, int *level)
{
    *level = 0;
    if (!strcmp(s, "value"))
        return BDB_MQTT_FMT_VALUE;
    if (!strncmp(s, "value:", 6)) {
        char *end;
        long l = strtol(s + 6, &end, 10);
        if (end == s + 6 || *end || l < 1 || l > BDB_MQTT_SCHEME_MAX_LEVELS)
            return -2;
        *level = (int)l;
        return BDB_MQTT_FMT_VALUE;
    }
    if (!strcmp(s, "object"))
        return BDB_MQTT_FMT_OBJECT;
    if (!strcmp(s, "json"))
        return BDB_MQTT_FMT_JSON;
    if (!strcmp(s, "lp") || !strcmp(s, "lineproto") || !strcmp(s, "line"))
        return BDB_MQTT_FMT_LP;
    if (!strcmp(s, "auto"))
        return BDB_MQTT_FMT_AUTO;
    return -1;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    return s;
}

int bdb_mqtt_formats_parse(const char *spec, bdb_mqtt_formats *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    if (strlen(spec) >= sizeof f->text) {
        snprintf(err, errlen, "mqtt_formats: longer than %zu bytes", sizeof f->text - 1);
        return -1;
    }
    snprintf(f->text, sizeof f->text, "%s", spec);
    char *p = f->text;
    while (p) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        char *item = trim(p);
        p = comma ? comma + 1 : NULL;
        if (!*item)
            continue;
        /* the last '=' splits: a topic filter may itself contain '=' */
        char *eq = strrchr(item, '=');
        if (!eq) {
            snprintf(err, errlen, "mqtt_formats: '%s' is not filter=format", item);
            return -1;
        }
        *eq = '\0';
        char *filter = trim(item), *fmt = trim(eq + 1);
        int level, v = bdb_mqtt_format_parse(fmt, &level);
        if (v == -2) {
            snprintf(err, errlen, "mqtt_formats: '%s': the metric level must be 1..%d", fmt,
                     BDB_MQTT_SCHEME_MAX_LEVELS);
            return -1;
        }
        if (v < 0) {
            snprintf(err, errlen,
                     "mqtt_formats: format '%s' is not json, lp, object, value[:level] or auto",
                     fmt);
            return -1;
        }
        if (!bdb_mqtt_filter_valid(filter)) {
            snprintf(err, errlen, "mqtt_formats: '%s' is not a valid topic filter", filter);
            return -1;
        }
        if (f->n == BDB_MQTT_FORMATS_MAX) {
            snprintf(err, errlen, "mqtt_formats: more than %d entries", BDB_MQTT_FORMATS_MAX);
            return -1;
        }
        f->filter[f->n] = filter;
        f->format[f->n] = v;
        f->level[f->n] = level;
        f->n++;
    }
    return 0;
}

int bdb_mqtt_format_match(const bdb_mqtt_formats *f, const char *topic, size_t len, int *level)
{
    *level = 0;
    for (size_t i = 0; i < f->n; i++)
        if (bdb_mqtt_topic_match(f->filter[i], topic, len)) {
            *level = f->level[i];
            return f->format[i];
        }
    return BDB_MQTT_FMT_AUTO;
}

int bdb_mqtt_format_for(const bdb_mqtt_formats *f, const char *topic, size_t len)
{
    int level;
    return bdb_mqtt_format_match(f, topic, len, &level);
}

int bdb_mqtt_topic_level(const char *topic, size_t len, int level, const char **p, size_t *n)
{
    size_t i = 0;
    for (int l = 1; l < level; l++) {
        const char *slash = memchr(topic + i, '/', len - i);
        if (!slash)
            return -1;
        i = (size_t)(slash - topic) + 1;
    }
    const char *slash = memchr(topic + i, '/', len - i);
    *p = topic + i;
    *n = slash ? (size_t)(slash - topic) - i : len - i;
    return 0;
}

const char *bdb_mqtt_format_name(int format)
{
    switch (format) {
    case BDB_MQTT_FMT_JSON:
        return "json";
    case BDB_MQTT_FMT_LP:
        return "lp";
    case BDB_MQTT_FMT_VALUE:
        return "value";
    case BDB_MQTT_FMT_OBJECT:
        return "object";
    default:
        return "auto";
    }
}
