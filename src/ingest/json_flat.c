/* json_flat: see json_flat.h. The object is walked twice: once to check it (so a
 * refused object leaves nothing in the batch), once to add it; names are joined in
 * one stack buffer as the walk goes down. */
#include "ingest/json_flat.h"

#include "bucketdb/bdb.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define NAME_CAP 1024 /* joined names; longer ones are refused by max_key_len anyway */

struct walk {
    const bdb_jsonflat_opts *o;
    bdb_batch *b; /* NULL while checking */
    bdb_jsonflat_result *res;
    char name[NAME_CAP + 1];
    char *why;
    size_t whylen;
    int code;
    size_t nattrs; /* attributes so far in this pass */
};

__attribute__((format(printf, 3, 4))) static int fail(struct walk *w, int code, const char *fmt,
                                                      ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->why, w->whylen, fmt, ap);
    va_end(ap);
    w->code = code;
    return -1;
}

/* Walks obj whose members are named "<name[0..nlen)>.<key>" (just "<key>" at the top). */
static int walk_obj(struct walk *w, json_t *obj, size_t nlen, int depth)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        size_t kl = strlen(k), n = nlen ? nlen + 1 + kl : kl;
        if (n > w->o->max_key_len || n > NAME_CAP)
            return fail(w, BDB_ERR_INVALID, "name '%.*s%s%.60s' is longer than max-key-bytes %zu",
                        (int)(nlen > 60 ? 60 : nlen), w->name, nlen ? "." : "", k,
                        w->o->max_key_len);
        if (nlen)
            w->name[nlen] = '.';
        memcpy(w->name + (nlen ? nlen + 1 : 0), k, kl);
        w->name[n] = '\0';
        switch (json_typeof(v)) {
        case JSON_OBJECT:
            if (depth == BDB_JSONFLAT_MAX_DEPTH)
                return fail(w, BDB_ERR_INVALID, "object '%.100s' is nested deeper than %d levels",
                            w->name, BDB_JSONFLAT_MAX_DEPTH);
            if (walk_obj(w, v, n, depth + 1) < 0)
                return -1;
            break;
        case JSON_ARRAY:
            return fail(w, BDB_ERR_INVALID, "'%.100s' is an array: arrays cannot be stored",
                        w->name);
        case JSON_NULL:
            break;
        case JSON_STRING:
            if (depth == 1 && !strcmp(k, "state")) {
                size_t sl = json_string_length(v);
                if (sl > w->o->max_state_len)
                    return fail(w, BDB_ERR_INVALID,
                                "state length %zu exceeds max-tag-value-bytes %zu", sl,
                                w->o->max_state_len);
                if (w->b)
                    bdb_batch_state(w->b, json_string_value(v), sl);
                break;
            }
            {
                /* an attribute, bounded as the state; beyond, not stored */
                size_t sl = json_string_length(v);
                if (w->nattrs < BDB_MAX_REPORT_ATTRS && sl <= w->o->max_state_len &&
                    !memchr(json_string_value(v), 0, sl) && bdb_batch_name_valid(w->name, n)) {
                    w->nattrs++;
                    if (w->b)
                        bdb_batch_attr(w->b, w->name, n, json_string_value(v), sl);
                    else
                        w->res->attrs++;
                    break;
                }
            }
            if (!w->b && w->res->strings_skipped++ == 0)
                snprintf(w->res->first_skipped, sizeof w->res->first_skipped, "string '%.100s'",
                         w->name);
            break;
        default: { /* numbers and booleans */
            double d = json_is_true(v) ? 1 : json_is_false(v) ? 0 : json_number_value(v);
            if (!isfinite(d))
                return fail(w, BDB_ERR_INVALID, "'%.100s' is not a finite number", w->name);
            if (!bdb_batch_name_valid(w->name, n))
                return fail(w, BDB_ERR_INVALID,
                            "name '%.100s' is not UTF-8 or has control characters", w->name);
            if (!w->b && ++w->res->metrics > w->o->max_metrics)
                return fail(w, BDB_ERR_LIMIT, "more than max-fields %zu numbers in the object",
                            w->o->max_metrics);
            if (w->b)
                bdb_batch_metric(w->b, w->name, n, d);
        }
        }
    }
    return 0;
}

int bdb_jsonflat_ingest(const char *body, size_t len, const bdb_jsonflat_opts *o, bdb_batch *b,
                        bdb_jsonflat_result *res, char *why, size_t whylen)
{
    memset(res, 0, sizeof *res);
    json_error_t err;
    /* integers as doubles: a counter written as 1e20 in full must not fail the parse */
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &err);
    if (!root) {
        snprintf(why, whylen, "invalid JSON at line %d column %d: %s", err.line, err.column,
                 err.text);
        return BDB_ERR_INVALID;
    }
    struct walk w = {.o = o, .res = res, .why = why, .whylen = whylen};
    int rc = BDB_OK;
    if (!json_is_object(root)) {
        snprintf(why, whylen, "not a JSON object");
        rc = BDB_ERR_INVALID;
    } else if (walk_obj(&w, root, 0, 1) < 0) {
        rc = w.code;
    } else if (!res->metrics && !res->attrs && !json_is_string(json_object_get(root, "state"))) {
        snprintf(why, whylen, "nothing to store: no number, boolean or state%s%s",
                 res->strings_skipped ? " (not stored: " : "",
                 res->strings_skipped ? res->first_skipped : "");
        if (res->strings_skipped)
            strncat(why, ")", whylen - strlen(why) - 1);
        rc = BDB_ERR_INVALID;
    } else {
        w.b = b;
        w.nattrs = 0;
        bdb_batch_begin(b, o->device, o->device_len, o->ts_ms, 0);
        walk_obj(&w, root, 0, 1);
        bdb_batch_end(b);
        if (bdb_batch_failed(b) != BDB_OK)
            rc = BDB_ERR_NOMEM;
    }
    json_decref(root);
    return rc;
}
