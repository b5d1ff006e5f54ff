/* json_ingest: the JSON batch format, parsed with jansson.
 *
 * Each report is validated completely before anything is added to the batch, so a
 * rejected report leaves no trace in it. Integers are decoded as doubles
 * (JSON_DECODE_INT_AS_REAL): metric values are doubles anyway, and a metric like
 * 1e20 written out in full must not make jansson reject the whole body. */
#include "ingest/json_ingest.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/timeutil.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void bdb_json_limits_default(bdb_json_limits *l)
{
    l->max_reports = 100000;
    l->max_metrics = 256;
    l->max_tags = 64;
    l->max_key_len = 256;
    l->max_value_len = 1024;
    l->max_future_ms = 0;
    l->max_age_ms = 0;
}

/* One report's problem, formatted as "field \"...\": ..." into err. */
__attribute__((format(printf, 3, 4))) static int bad(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* A client-supplied name for an error message: bounded and one line. */
static const char *printable(char out[80], const char *s)
{
    size_t o = 0;
    for (; s[o] && o < 64; o++) {
        unsigned char c = (unsigned char)s[o];
        out[o] = (c < 0x20 || c == 0x7f || c == '"') ? '?' : (char)c;
    }
    if (s[o]) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
    return out;
}

static int check_key(const char *what, const char *k, size_t max, char *err, size_t errlen)
{
    char name[80];
    size_t n = strlen(k);
    if (n == 0)
        return bad(err, errlen, "field \"%s\": name must not be empty", what);
    if (n > max)
        return bad(err, errlen, "field \"%s%s\": name length %zu exceeds max-key-bytes %zu", what,
                   printable(name, k), n, max);
    return 0;
}

static int report_time(json_t *t, int64_t now_ms, int64_t *ts, char *err, size_t errlen)
{
    if (!t || json_is_null(t)) {
        *ts = now_ms;
        return 0;
    }
    if (json_is_number(t)) {
        double v = json_number_value(t);
        /* 2^63 is exactly representable, so the bounds test is exact. */
        if (v != floor(v) || v < -9223372036854775808.0 || v >= 9223372036854775808.0)
            return bad(err, errlen, "field \"time\": must be integer Unix milliseconds");
        *ts = (int64_t)v;
        return 0;
    }
    if (json_is_string(t)) {
        if (bdb_parse_time_ms(json_string_value(t), ts) != BDB_OK)
            return bad(err, errlen,
                       "field \"time\": must be Unix milliseconds or an RFC 3339 time");
        return 0;
    }
    return bad(err, errlen, "field \"time\": must be Unix milliseconds or an RFC 3339 time");
}

/* Checks a report without touching the batch. */
static int validate(json_t *r, const bdb_json_limits *lim, int64_t now_ms, int64_t *ts, char *err,
                    size_t errlen)
{
    char name[80];
    if (!json_is_object(r))
        return bad(err, errlen, "must be an object");
    json_t *dev = json_object_get(r, "device");
    if (!json_is_string(dev))
        return bad(err, errlen, "field \"device\": required string");
    size_t dn = json_string_length(dev);
    if (dn == 0)
        return bad(err, errlen, "field \"device\": must not be empty");
    if (dn > lim->max_key_len)
        return bad(err, errlen, "field \"device\": length %zu exceeds max-key-bytes %zu", dn,
                   lim->max_key_len);
    {
        /* Same rule as line protocol: names never carry control characters. */
        const unsigned char *dp = (const unsigned char *)json_string_value(dev);
        for (size_t i = 0; i < dn; i++)
            if (dp[i] < 0x20 || dp[i] == 0x7f)
                return bad(err, errlen, "field \"device\": control characters not allowed");
    }
    if (report_time(json_object_get(r, "time"), now_ms, ts, err, errlen) < 0)
        return -1;
    if (lim->max_future_ms > 0 && *ts > now_ms + lim->max_future_ms)
        return bad(err, errlen,
                   "field \"time\": %lld ms is more than max-future-ms %lld ahead of the "
                   "server clock",
                   (long long)*ts, (long long)lim->max_future_ms);
    if (lim->max_age_ms > 0 && *ts < now_ms - lim->max_age_ms)
        return bad(err, errlen,
                   "field \"time\": point beyond retention policy: %lld ms is older than the "
                   "tenant's retention of %lld ms",
                   (long long)*ts, (long long)lim->max_age_ms);

    json_t *mets = json_object_get(r, "metrics");
    size_t nmets = 0;
    if (mets && !json_is_null(mets)) {
        if (!json_is_object(mets))
            return bad(err, errlen, "field \"metrics\": must be an object");
        nmets = json_object_size(mets);
        if (nmets > lim->max_metrics)
            return bad(err, errlen, "field \"metrics\": %zu metrics exceed max-fields %zu", nmets,
                       lim->max_metrics);
        const char *k;
        json_t *v;
        json_object_foreach(mets, k, v)
        {
            if (check_key("metrics.", k, lim->max_key_len, err, errlen) < 0)
                return -1;
            /* jansson never yields NaN or infinity from text; the check keeps that
             * guarantee local instead of relying on the decoder. */
            if (!(json_is_boolean(v) || (json_is_number(v) && isfinite(json_number_value(v)))))
                return bad(err, errlen, "field \"metrics.%s\": value must be a finite number",
                           printable(name, k));
        }
    }

    json_t *tags = json_object_get(r, "tags");
    if (tags && !json_is_null(tags)) {
        if (!json_is_object(tags))
            return bad(err, errlen, "field \"tags\": must be an object");
        size_t n = json_object_size(tags);
        if (n > lim->max_tags)
            return bad(err, errlen, "field \"tags\": %zu tags exceed max-tags %zu", n,
                       lim->max_tags);
        const char *k;
        json_t *v;
        json_object_foreach(tags, k, v)
        {
            if (check_key("tags.", k, lim->max_key_len, err, errlen) < 0)
                return -1;
            if (!json_is_string(v))
                return bad(err, errlen, "field \"tags.%s\": value must be a string",
                           printable(name, k));
            if (json_string_length(v) > lim->max_value_len)
                return bad(err, errlen,
                           "field \"tags.%s\": length %zu exceeds max-tag-value-bytes %zu",
                           printable(name, k), json_string_length(v), lim->max_value_len);
        }
    }

    json_t *state = json_object_get(r, "state");
    int has_state = 0;
    if (state && !json_is_null(state)) {
        if (!json_is_string(state))
            return bad(err, errlen, "field \"state\": must be a string");
        if (json_string_length(state) > lim->max_value_len)
            return bad(err, errlen, "field \"state\": length %zu exceeds max-tag-value-bytes %zu",
                       json_string_length(state), lim->max_value_len);
        has_state = 1;
    }
    if (nmets == 0 && !has_state)
        return bad(err, errlen, "field \"metrics\": a report needs metrics or a state");
    return 0;
}

/* jansson's allocations go through bdb_malloc too, so the allocation-failure tests
 * reach the parser's own allocations; both sides free with libc free. jansson 2.14
 * does not always say "out of memory" when an allocation fails (it may report a
 * syntax error), so a failure is noted here: valid JSON is never answered "invalid"
 * because memory ran out. */
static _Thread_local int json_oom;
static void *json_alloc(size_t n)
{
    void *p = bdb_malloc(n);
    if (!p)
        json_oom = 1;
    return p;
}
static pthread_once_t alloc_once = PTHREAD_ONCE_INIT;
static void use_bdb_alloc(void)
{
    json_set_alloc_funcs(json_alloc, free);
}

static void add(bdb_batch *b, json_t *r, int64_t ts, size_t index)
{
    json_t *dev = json_object_get(r, "device");
    bdb_batch_begin(b, json_string_value(dev), json_string_length(dev), ts, index);
    const char *k;
    json_t *v;
    json_t *tags = json_object_get(r, "tags");
    if (json_is_object(tags)) {
        json_object_foreach(tags, k, v)
        {
            bdb_batch_tag(b, k, strlen(k), json_string_value(v), json_string_length(v));
        }
    }
    json_t *mets = json_object_get(r, "metrics");
    if (json_is_object(mets)) {
        json_object_foreach(mets, k, v)
        {
            double d = json_is_boolean(v) ? (json_is_true(v) ? 1.0 : 0.0) : json_number_value(v);
            bdb_batch_metric(b, k, strlen(k), d);
        }
    }
    json_t *state = json_object_get(r, "state");
    if (json_is_string(state))
        bdb_batch_state(b, json_string_value(state), json_string_length(state));
    bdb_batch_end(b);
}

int bdb_json_ingest(const char *body, size_t len, int64_t now_ms, const bdb_json_limits *lim,
                    bdb_batch *b, bdb_json_result *res)
{
    bdb_json_limits dl;
    if (!lim) {
        bdb_json_limits_default(&dl);
        lim = &dl;
    }
    memset(res, 0, sizeof *res);
    res->first_bad_index = -1;
    pthread_once(&alloc_once, use_bdb_alloc);

    json_error_t jerr;
    json_oom = 0;
    json_t *root = json_loadb(body, len, JSON_DECODE_INT_AS_REAL, &jerr);
    if (!root && (json_oom || json_error_code(&jerr) == json_error_out_of_memory)) {
        snprintf(res->first_error, sizeof res->first_error, "out of memory parsing the body");
        return BDB_ERR_NOMEM;
    }
    if (!root) {
        res->fatal = 1;
        snprintf(res->first_error, sizeof res->first_error, "invalid JSON: %s (line %d, column %d)",
                 jerr.text, jerr.line, jerr.column);
        return BDB_ERR_INVALID;
    }

    /* {"reports": [...]}, a bare array, or one report object. */
    json_t *list = root;
    if (json_is_object(root) && json_object_get(root, "reports"))
        list = json_object_get(root, "reports");
    size_t n;
    if (json_is_array(list)) {
        n = json_array_size(list);
    } else if (json_is_object(list) && list == root) {
        n = 1;
    } else {
        res->fatal = 1;
        snprintf(res->first_error, sizeof res->first_error,
                 "body must be {\"reports\": [...]}, an array of reports or one report");
        json_decref(root);
        return BDB_ERR_INVALID;
    }
    if (n > lim->max_reports) {
        snprintf(res->first_error, sizeof res->first_error,
                 "report count %zu exceeds max-reports %zu", n, lim->max_reports);
        json_decref(root);
        return BDB_ERR_LIMIT;
    }

    for (size_t i = 0; i < n; i++) {
        json_t *r = json_is_array(list) ? json_array_get(list, i) : list;
        char why[400];
        int64_t ts;
        if (validate(r, lim, now_ms, &ts, why, sizeof why) < 0) {
            if (res->rejected++ == 0) {
                res->first_bad_index = (long)i;
                snprintf(res->first_error, sizeof res->first_error, "report %zu: %s", i, why);
            }
            continue;
        }
        add(b, r, ts, i);
        if (bdb_batch_failed(b) != BDB_OK) {
            snprintf(res->first_error, sizeof res->first_error, "out of memory");
            json_decref(root);
            return BDB_ERR_NOMEM;
        }
        res->accepted++;
    }
    json_decref(root);
    return res->rejected ? BDB_ERR_INVALID : BDB_OK;
}
