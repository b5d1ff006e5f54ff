/* json_ingest: the JSON batch format, parsed with jansson.
 *
 * Each report is validated completely before anything is added to the batch, so a
 * rejected report leaves no trace in it. Integers are decoded as doubles
 * (JSON_DECODE_INT_AS_REAL): metric values are doubles anyway, and a metric like
 * 1e20 written out in full must not make jansson reject the whole body. A key twice in
 * one object (two devices, two values of one metric) refuses the body: jansson would
 * otherwise keep the last one without a word.
 *
 * Members are looked up through json_kind(), which calls a missing member JSON_NULL
 * (the format treats an absent field and null alike), so each test below is one
 * comparison of a type instead of jansson's json_is_* macros, whose null-pointer
 * checks would be repeated on values that can never be NULL. */
#include "ingest/json_ingest.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/timeutil.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
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
    l->rule = NULL;
    l->device_tag = NULL;
    l->fallback_device = NULL;
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

/* The type of a member; a missing one (NULL) counts as null. */
static json_type json_kind(const json_t *v)
{
    return v ? json_typeof(v) : JSON_NULL;
}

/* A metric's value as a double: numbers (finite), and booleans as 1/0. */
static int metric_value(const json_t *v, double *d)
{
    switch (json_typeof(v)) {
    case JSON_TRUE:
        *d = 1.0;
        return 0;
    case JSON_FALSE:
        *d = 0.0;
        return 0;
    case JSON_REAL:
    case JSON_INTEGER:
        /* jansson never yields NaN or infinity from text; the check keeps that
         * guarantee local instead of relying on the decoder. */
        *d = json_number_value(v);
        return isfinite(*d) ? 0 : -1;
    default:
        return -1;
    }
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
    double v;
    switch (json_kind(t)) {
    case JSON_NULL:
        *ts = now_ms;
        return 0;
    case JSON_REAL:
    case JSON_INTEGER:
        v = json_number_value(t);
        /* 2^63 is exactly representable, so the bounds test is exact. */
        if (v != floor(v) || v < -9223372036854775808.0 || v >= 9223372036854775808.0)
            return bad(err, errlen, "field \"time\": must be integer Unix milliseconds");
        *ts = (int64_t)v;
        return 0;
    case JSON_STRING:
        if (bdb_parse_time_ms(json_string_value(t), ts) != BDB_OK)
            return bad(err, errlen,
                       "field \"time\": must be Unix milliseconds or an RFC 3339 time");
        return 0;
    default:
        return bad(err, errlen, "field \"time\": must be Unix milliseconds or an RFC 3339 time");
    }
}

/* What the device rule sees of a report: its tags, and its "device" member as the
 * tag named device_tag (the member wins over a tag of that name). */
struct report_tags {
    json_t *dev, *tags;
    const bdb_devrule_tags *dr;
};

static const char *report_tag(void *ctx, const char *key, size_t klen, size_t *vlen)
{
    struct report_tags *rt = ctx;
    if (rt->dev && klen == rt->dr->dtl && !memcmp(key, rt->dr->device_tag, klen)) {
        *vlen = json_string_length(rt->dev);
        return json_string_value(rt->dev);
    }
    if (!rt->tags)
        return NULL;
    char k[BDB_DEVRULE_MAX_TEXT];
    memcpy(k, key, klen); /* klen < BDB_DEVRULE_MAX_TEXT: a key of the rule's text */
    k[klen] = '\0';
    json_t *v = json_object_get(rt->tags, k);
    if (json_kind(v) != JSON_STRING)
        return NULL;
    *vlen = json_string_length(v);
    return json_string_value(v);
}

/* The "alternative" of a report named by fallback_device: no tag used. */
#define NO_ALT (-100)

/* A report's device name (into buf when built) and the rule's alternative used. */
typedef struct report_dev {
    const char *p;
    size_t n;
    int alt;
    char buf[1024];
} report_dev;

/* Checks a report without touching the batch. */
/* Whether the string v of metrics key k is stored as the report's attribute number
 * n: bounded as a state (max_value_len), at most BDB_MAX_REPORT_ATTRS, no NUL (the
 * engine keeps attributes as C strings), and k a valid name. */
static int attr_fits(const char *k, const json_t *v, const bdb_json_limits *lim, size_t n)
{
    size_t l = json_string_length(v);
    return n < BDB_MAX_REPORT_ATTRS && l <= lim->max_value_len &&
           !memchr(json_string_value(v), 0, l) && bdb_batch_name_valid(k, strlen(k));
}

static int validate(json_t *r, const bdb_json_limits *lim, const bdb_devrule_tags *dr,
                    int64_t now_ms, int64_t *ts, report_dev *rd, size_t *strings,
                    const char **first_str, char *err, size_t errlen)
{
    *strings = 0;
    *first_str = NULL;
    char name[80];
    if (json_typeof(r) != JSON_OBJECT)
        return bad(err, errlen, "must be an object");
    json_t *dev = json_object_get(r, "device");
    if (json_kind(dev) != JSON_NULL && json_typeof(dev) != JSON_STRING)
        return bad(err, errlen, "field \"device\": must be a string");
    json_t *rtags = json_object_get(r, "tags");
    struct report_tags rt = {dev, json_kind(rtags) == JSON_OBJECT ? rtags : NULL, dr};
    rd->alt =
        bdb_devrule_device(dr->rule, report_tag, &rt, rd->buf, sizeof rd->buf, &rd->p, &rd->n);
    if (rd->alt == -1 && lim->fallback_device) {
        rd->p = lim->fallback_device;
        rd->n = strlen(rd->p);
        rd->alt = NO_ALT;
    }
    if (rd->alt == -1) {
        if (dr->dt_alone)
            return bad(err, errlen, "field \"device\": required string");
        char why[300];
        bdb_devrule_missing(dr->rule, why, sizeof why);
        return bad(err, errlen, "field \"device\": %s", why);
    }
    size_t dn = rd->alt < 0 && rd->alt != NO_ALT ? SIZE_MAX : rd->n;
    if (dn == 0)
        return bad(err, errlen, "field \"device\": must not be empty");
    if (dn > lim->max_key_len)
        return bad(err, errlen, "field \"device\": length %zu exceeds max-key-bytes %zu",
                   rd->alt < 0 && rd->alt != NO_ALT ? sizeof rd->buf : dn, lim->max_key_len);
    if (!bdb_batch_name_valid(rd->p, dn))
        return bad(err, errlen, "field \"device\": control characters not allowed");
    if (report_time(json_object_get(r, "time"), now_ms, ts, err, errlen) < 0)
        return -1;
    if (!bdb_ts_valid(*ts)) {
        char why[160];
        bdb_ts_range_error(*ts, why, sizeof why);
        return bad(err, errlen, "field \"time\": %s", why);
    }
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
    size_t nmets = 0, nattrs = 0;
    if (json_kind(mets) != JSON_NULL) {
        if (json_typeof(mets) != JSON_OBJECT)
            return bad(err, errlen, "field \"metrics\": must be an object");
        nmets = json_object_size(mets);
        if (nmets > lim->max_metrics)
            return bad(err, errlen, "field \"metrics\": %zu metrics exceed max-fields %zu", nmets,
                       lim->max_metrics);
        for (void *it = json_object_iter(mets); it; it = json_object_iter_next(mets, it)) {
            const char *k = json_object_iter_key(it);
            double d;
            if (check_key("metrics.", k, lim->max_key_len, err, errlen) < 0)
                return -1;
            if (json_typeof(json_object_iter_value(it)) == JSON_STRING) {
                if (attr_fits(k, json_object_iter_value(it), lim, nattrs))
                    nattrs++;
                else if (!(*strings)++)
                    *first_str = k;
                continue;
            }
            if (metric_value(json_object_iter_value(it), &d) < 0)
                return bad(err, errlen, "field \"metrics.%s\": value must be a finite number",
                           printable(name, k));
        }
    }

    json_t *tags = json_object_get(r, "tags");
    if (json_kind(tags) != JSON_NULL) {
        if (json_typeof(tags) != JSON_OBJECT)
            return bad(err, errlen, "field \"tags\": must be an object");
        size_t n = json_object_size(tags);
        if (n > lim->max_tags)
            return bad(err, errlen, "field \"tags\": %zu tags exceed max-tags %zu", n,
                       lim->max_tags);
        for (void *it = json_object_iter(tags); it; it = json_object_iter_next(tags, it)) {
            const char *k = json_object_iter_key(it);
            json_t *v = json_object_iter_value(it);
            if (check_key("tags.", k, lim->max_key_len, err, errlen) < 0)
                return -1;
            if (json_typeof(v) != JSON_STRING)
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
    if (json_kind(state) != JSON_NULL) {
        if (json_typeof(state) != JSON_STRING)
            return bad(err, errlen, "field \"state\": must be a string");
        if (json_string_length(state) > lim->max_value_len)
            return bad(err, errlen, "field \"state\": length %zu exceeds max-tag-value-bytes %zu",
                       json_string_length(state), lim->max_value_len);
        has_state = 1;
    }
    if (nmets == *strings && *strings && !has_state)
        return bad(err, errlen,
                   "field \"metrics.%s\": a string is not stored (only numbers, booleans and "
                   "'state'), and the report has nothing else to store",
                   printable(name, *first_str));
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

static void add(bdb_batch *b, json_t *r, const bdb_devrule_tags *dr, const report_dev *rd,
                int64_t ts, size_t index, const bdb_json_limits *lim)
{
    uint32_t nattrs = 0;
    bdb_batch_begin(b, rd->p, rd->n, ts, index);
    /* validate() passed: tags and metrics are objects or absent/null, their values
     * strings and numbers or booleans, and a state is a string or absent/null. */
    json_t *tags = json_object_get(r, "tags");
    if (json_kind(tags) == JSON_OBJECT) {
        /* by key: the name may be the "device" member's, not a tag's (devrule.h) */
        bdb_devrule_skip skip = bdb_devrule_tags_skip(dr, rd->alt, NULL);
        for (void *it = json_object_iter(tags); it; it = json_object_iter_next(tags, it)) {
            const char *k = json_object_iter_key(it);
            json_t *v = json_object_iter_value(it);
            size_t kl = strlen(k);
            if (bdb_devrule_tag_stored(&skip, k, kl, json_string_value(v)))
                bdb_batch_tag(b, k, kl, json_string_value(v), json_string_length(v));
        }
    }
    json_t *mets = json_object_get(r, "metrics");
    if (json_kind(mets) == JSON_OBJECT) {
        for (void *it = json_object_iter(mets); it; it = json_object_iter_next(mets, it)) {
            const char *k = json_object_iter_key(it);
            json_t *v = json_object_iter_value(it);
            double d = 0;
            if (json_typeof(v) == JSON_STRING) {
                /* the same choice as validate(), which counted those not stored */
                if (attr_fits(k, v, lim, nattrs)) {
                    bdb_batch_attr(b, k, strlen(k), json_string_value(v), json_string_length(v));
                    nattrs++;
                }
                continue;
            }
            if (metric_value(v, &d) < 0)
                continue;
            bdb_batch_metric(b, k, strlen(k), d);
        }
    }
    json_t *state = json_object_get(r, "state");
    if (json_kind(state) == JSON_STRING)
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

    bdb_devrule_tags dr;
    bdb_devrule_tags_init(&dr, lim->rule, lim->device_tag);
    json_error_t jerr;
    json_oom = 0;
    json_t *root = json_loadb(body, len, JSON_DECODE_INT_AS_REAL | JSON_REJECT_DUPLICATES, &jerr);
    /* every allocation jansson makes goes through json_alloc, so json_oom is set
     * whenever one failed (json_error_out_of_memory or not) */
    if (!root && json_oom) {
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
    if (json_typeof(root) == JSON_OBJECT && json_object_get(root, "reports"))
        list = json_object_get(root, "reports");
    int is_array = json_typeof(list) == JSON_ARRAY;
    size_t n;
    if (is_array) {
        n = json_array_size(list);
    } else if (list == root) { /* without JSON_DECODE_ANY a root is an object or array */
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
        json_t *r = is_array ? json_array_get(list, i) : list;
        char why[400];
        int64_t ts;
        report_dev rd;
        size_t strings;
        const char *first_str;
        if (validate(r, lim, &dr, now_ms, &ts, &rd, &strings, &first_str, why, sizeof why) < 0) {
            if (res->rejected++ == 0) {
                res->first_bad_index = (long)i;
                snprintf(res->first_error, sizeof res->first_error, "report %zu: %s", i, why);
            }
            continue;
        }
        add(b, r, &dr, &rd, ts, i, lim);
        if (bdb_batch_failed(b) != BDB_OK) {
            snprintf(res->first_error, sizeof res->first_error, "out of memory");
            json_decref(root);
            return BDB_ERR_NOMEM;
        }
        res->accepted++;
        if (strings && !res->strings_skipped) {
            char name[80];
            snprintf(res->first_skipped, sizeof res->first_skipped,
                     "report %zu: string metric '%s'", i, printable(name, first_str));
        }
        res->strings_skipped += strings;
    }
    json_decref(root);
    return res->rejected ? BDB_ERR_INVALID : BDB_OK;
}
