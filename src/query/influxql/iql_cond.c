/* iql_cond: WHERE: tag and field conditions per device and row, time bounds. */
#include "query/influxql/iql_int.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_field_ref(const meas *m, const char *name)
{
    return !iql_strv_has(&m->tagkeys, name) && iql_strv_has(&m->fields, name);
}

int iql_is_time(const iql_expr *e)
{
    return e && e->kind == IQL_X_IDENT && !strcasecmp(e->s, "time");
}

int iql_refers_time(const iql_expr *e)
{
    if (!e)
        return 0;
    if (iql_is_time(e))
        return 1;
    return e->kind == IQL_X_BIN && (iql_refers_time(e->l) || iql_refers_time(e->r));
}

static int cmp_num(enum iql_op op, double a, double b)
{
    switch (op) {
    case IQL_EQ:
        return a == b;
    case IQL_NE:
        return a != b;
    case IQL_LT:
        return a < b;
    case IQL_LE:
        return a <= b;
    case IQL_GT:
        return a > b;
    case IQL_GE:
        return a >= b;
    default:
        return 0;
    }
}

static double field_of(const rowvals *rv, const char *name)
{
    for (size_t i = 0; i < rv->names->n; i++)
        if (!strcmp(rv->names->v[i], name))
            return rv->v[i];
    return NAN;
}

/* A number in a field condition: a literal, a field of the row, or sums and
 * differences of those; NaN when a field is missing or a term is not a number. */
static double num_value(const iql_expr *e, const meas *m, const rowvals *rv)
{
    switch (e->kind) {
    case IQL_X_NUM:
        return e->isint ? (double)e->ival : e->num;
    case IQL_X_IDENT:
        return is_field_ref(m, e->s) ? field_of(rv, e->s) : NAN;
    case IQL_X_BIN:
        if (e->op == IQL_ADD)
            return num_value(e->l, m, rv) + num_value(e->r, m, rv);
        if (e->op == IQL_SUB)
            return num_value(e->l, m, rv) - num_value(e->r, m, rv);
        return NAN;
    default:
        return NAN;
    }
}

/* 1 when e is a field of m or arithmetic over one. */
static int has_field(const iql_expr *e, const meas *m)
{
    if (e->kind == IQL_X_IDENT)
        return !iql_is_time(e) && is_field_ref(m, e->s);
    return e->kind == IQL_X_BIN && (e->op == IQL_ADD || e->op == IQL_SUB) &&
           (has_field(e->l, m) || has_field(e->r, m));
}

/* Device d of measurement m against e: 1 passes, 0 not, 2 unknown (a field condition
 * with no row given: rv NULL), -1 with an error in r. Time conditions pass (they are
 * bounds, iql_time_bounds). fields: field conditions allowed (SELECT), else refused. */
int iql_eval_cond(const cat *c, const iql_expr *e, const dev *d, const meas *m, const rowvals *rv,
                  int fields, iql_result *r)
{
    if (!e)
        return 1;
    if (e->kind == IQL_X_BOOL)
        return (int)e->ival;
    if (e->kind != IQL_X_BIN) {
        iql_set_error(r, "invalid condition: a comparison is expected, not a lone value");
        return -1;
    }
    if (e->op == IQL_AND || e->op == IQL_OR) {
        /* both sides always: an error must not depend on the order */
        int a = iql_eval_cond(c, e->l, d, m, rv, fields, r);
        int b = a < 0 ? -1 : iql_eval_cond(c, e->r, d, m, rv, fields, r);
        if (a < 0 || b < 0)
            return -1;
        if (e->op == IQL_AND)
            return !a || !b ? 0 : a == 1 && b == 1 ? 1 : 2;
        return a == 1 || b == 1 ? 1 : !a && !b ? 0 : 2;
    }
    if (iql_refers_time(e))
        return 1;
    if (has_field(e->l, m) || has_field(e->r, m)) {
        if (!fields) {
            iql_set_error(r, "conditions on field values are not supported here: filter on tags");
            return -1;
        }
        if (!rv)
            return 2;
        if ((e->l->kind != IQL_X_NUM && !has_field(e->l, m)) ||
            (e->r->kind != IQL_X_NUM && !has_field(e->r, m)))
            return 0; /* a float equals no string, matches no regex */
        double a = num_value(e->l, m, rv), b = num_value(e->r, m, rv);
        return !isnan(a) && !isnan(b) && cmp_num(e->op, a, b);
    }
    const iql_expr *id = e->l, *lit = e->r;
    enum iql_op op = e->op;
    if (id->kind != IQL_X_IDENT) {
        id = e->r;
        lit = e->l;
        /* 5 < temp is temp > 5 */
        op = op == IQL_LT   ? IQL_GT
             : op == IQL_LE ? IQL_GE
             : op == IQL_GT ? IQL_LT
             : op == IQL_GE ? IQL_LE
                            : op;
    }
    if (id->kind != IQL_X_IDENT)
        return 1; /* a constant comparison such as 1 = 1 */
    const char *v = iql_dev_tag(c, d, id->s);
    if (!v)
        v = "";
    switch (lit->kind) {
    case IQL_X_STR:
        if (op == IQL_EQ)
            return !strcmp(v, lit->s);
        if (op == IQL_NE)
            return strcmp(v, lit->s) != 0;
        if (op >= IQL_LT && op <= IQL_GE) {
            int k = strcmp(v, lit->s);
            return op == IQL_LT ? k < 0 : op == IQL_LE ? k <= 0 : op == IQL_GT ? k > 0 : k >= 0;
        }
        break;
    case IQL_X_REGEX:
        if (op == IQL_RE)
            return regexec(lit->re, v, 0, NULL, 0) == 0;
        if (op == IQL_NRE)
            return regexec(lit->re, v, 0, NULL, 0) != 0;
        break;
    case IQL_X_IDENT: {
        const char *w = iql_dev_tag(c, d, lit->s);
        if (!w)
            w = "";
        if (op == IQL_EQ)
            return !strcmp(v, w);
        if (op == IQL_NE)
            return strcmp(v, w) != 0;
        break;
    }
    default:
        return 0; /* a tag is a string: it equals no number */
    }
    iql_set_error(r, "invalid condition on tag '%.100s': use =, !=, =~ or !~", id->s);
    return -1;
}

/* The fields of m that e compares (appended to out once each); 1 when there is one. */
int iql_cond_fields(const iql_expr *e, const meas *m, strv *out)
{
    if (!e)
        return 0;
    if (e->kind == IQL_X_IDENT) {
        if (iql_is_time(e) || !is_field_ref(m, e->s))
            return 0;
        if (!iql_strv_has(out, e->s))
            iql_strv_push(out, e->s);
        return 1;
    }
    if (e->kind != IQL_X_BIN)
        return 0;
    int a = iql_cond_fields(e->l, m, out);
    return iql_cond_fields(e->r, m, out) | a;
}

static int add_ns(int64_t a, int64_t b, int64_t *out)
{
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

/* A time expression in ns: a number (ns), a duration, an RFC 3339 string, now(),
 * and sums or differences of those. */
static int time_value(const iql_ctx *c, const iql_expr *e, int64_t *ns, iql_result *r)
{
    switch (e->kind) {
    case IQL_X_NUM:
        if (!e->isint) {
            *ns = (int64_t)e->num;
            return 0;
        }
        /* fall through */
    case IQL_X_DUR:
        *ns = e->ival;
        return 0;
    case IQL_X_NOW:
        *ns = c->now_ms * NS_PER_MS;
        return 0;
    case IQL_X_STR: {
        int64_t ms;
        int rc = bdb_parse_query_time(e->s, &ms);
        if (rc == BDB_ERR_LIMIT) {
            iql_set_error(r,
                          "time '%.64s' is outside the times bucketdb holds (1677-09-21T00:12:44Z "
                          "to 2262-04-11T23:47:16Z)",
                          e->s);
            return -1;
        }
        if (rc != BDB_OK) {
            iql_set_error(
                r,
                "invalid time '%.64s': use RFC 3339 (2023-11-14T00:00:00Z), an epoch with "
                "a unit (1699920000000ms) or now() - 6h",
                e->s);
            return -1;
        }
        if (__builtin_mul_overflow(ms, NS_PER_MS, ns)) {
            iql_set_error(r, "time '%.64s' is outside the range of nanosecond times", e->s);
            return -1;
        }
        return 0;
    }
    case IQL_X_BIN:
        if (e->op == IQL_ADD || e->op == IQL_SUB) {
            int64_t a, b;
            if (time_value(c, e->l, &a, r) || time_value(c, e->r, &b, r))
                return -1;
            if (e->op == IQL_SUB && b == INT64_MIN)
                b = INT64_MAX;
            else if (e->op == IQL_SUB)
                b = -b;
            if (add_ns(a, b, ns) != 0) {
                iql_set_error(r, "time expression overflows the range of nanosecond times");
                return -1;
            }
            return 0;
        }
        break;
    default:
        break;
    }
    iql_set_error(r, "invalid time condition: compare time with now(), an RFC 3339 string or an "
                     "epoch with a unit");
    return -1;
}

int64_t iql_floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* Narrows [*from, *to) (ms) by the time comparisons of e. */
int iql_time_bounds(const iql_ctx *c, const iql_expr *e, int under_or, int64_t *from, int64_t *to,
                    int *has_from, int *has_to, int64_t *wfrom, iql_result *r)
{
    if (!e || e->kind != IQL_X_BIN)
        return 0;
    if (e->op == IQL_AND || e->op == IQL_OR) {
        int o = under_or || e->op == IQL_OR;
        return iql_time_bounds(c, e->l, o, from, to, has_from, has_to, wfrom, r) ||
               iql_time_bounds(c, e->r, o, from, to, has_from, has_to, wfrom, r);
    }
    if (!iql_is_time(e->l) && !iql_is_time(e->r))
        return 0;
    if (under_or) {
        iql_set_error(r, "time conditions joined by OR are not supported: join them with AND");
        return -1;
    }
    enum iql_op op = e->op;
    const iql_expr *v = e->r;
    if (iql_is_time(e->r)) { /* 5 < time: the same as time > 5 */
        v = e->l;
        op = op == IQL_LT   ? IQL_GT
             : op == IQL_LE ? IQL_GE
             : op == IQL_GT ? IQL_LT
             : op == IQL_GE ? IQL_LE
                            : op;
    }
    int64_t ns;
    if (time_value(c, v, &ns, r) != 0)
        return -1;
    int64_t lo_ms = iql_floor_div(ns, NS_PER_MS), hi_ms = lo_ms + (ns % NS_PER_MS != 0);
    /* lo_ms = floor(ns / 1e6), hi_ms = ceil(ns / 1e6): samples are whole ms */
    int64_t f = INT64_MIN, t = INT64_MAX;
    /* InfluxDB starts the first GROUP BY window, and dates an answer without one, at
     * the lower bound in ns: "time > X" starts at X + 1 ns, which lies in X's ms */
    int64_t wf = lo_ms;
    switch (op) {
    case IQL_GT:
        f = lo_ms + 1;
        wf = ns == INT64_MAX ? lo_ms : iql_floor_div(ns + 1, NS_PER_MS);
        break;
    case IQL_GE:
        f = hi_ms;
        break;
    case IQL_LT:
        t = hi_ms;
        break;
    case IQL_LE:
        t = lo_ms + 1;
        break;
    case IQL_EQ:
        f = hi_ms;
        t = lo_ms + 1;
        break;
    default:
        iql_set_error(r, "invalid time condition: use =, <, <=, > or >= with time");
        return -1;
    }
    if (f != INT64_MIN) {
        *has_from = 1;
        if (f > *from)
            *from = f;
        if (wf > *wfrom)
            *wfrom = wf;
    }
    if (t != INT64_MAX) {
        *has_to = 1;
        if (t < *to)
            *to = t;
    }
    return 0;
}

/* 1 when e compares anything but time (a tag condition). */
int iql_where_has_tags(const iql_expr *e)
{
    if (!e || e->kind != IQL_X_BIN)
        return e != NULL && e->kind != IQL_X_BOOL;
    if (e->op == IQL_AND || e->op == IQL_OR)
        return iql_where_has_tags(e->l) || iql_where_has_tags(e->r);
    return !iql_refers_time(e);
}

static int pin_walk(const iql_expr *e, const char *devtag, const char **pin)
{
    if (e->kind != IQL_X_BIN || e->op == IQL_OR)
        return 0;
    if (e->op == IQL_AND)
        return pin_walk(e->l, devtag, pin) && pin_walk(e->r, devtag, pin);
    if (iql_refers_time(e))
        return 1;
    const iql_expr *id = e->l->kind == IQL_X_IDENT ? e->l : e->r;
    const iql_expr *lit = id == e->l ? e->r : e->l;
    if (e->op != IQL_EQ || *pin || id->kind != IQL_X_IDENT || lit->kind != IQL_X_STR ||
        strcmp(id->s, devtag))
        return 0;
    *pin = lit->s;
    return 1;
}

const char *iql_where_device(const iql_expr *e, const char *devtag)
{
    const char *pin = NULL;
    return e && pin_walk(e, devtag, &pin) ? pin : NULL;
}

/* The devices of m that pass the statement's WHERE: a 0/1 per catalog device. -1 on error. */
int iql_match_devs(const cat *c, const iql_stmt *st, const meas *m, unsigned char *ok,
                   iql_result *r)
{
    memset(ok, 0, c->nd ? c->nd : 1);
    for (size_t i = 0; i < m->ndevs; i++) {
        int v = iql_eval_cond(c, st->where, &c->d[m->devs[i]], m, NULL, st->kind == IQL_SELECT, r);
        if (v < 0)
            return -1;
        ok[m->devs[i]] = v != 0; /* unknown (a field condition): decided per row */
    }
    return 0;
}
