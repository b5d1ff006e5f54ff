/* iql_exec: AST -> engine calls -> InfluxDB result series. See iql_exec.h for the
 * mapping and the tier rule, docs/INFLUX.md for what a user sees. */
#include "query/influxql/iql_exec.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"
#include "query/influxql/iql_tier.h"
#include "query/range.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NS_PER_MS 1000000LL

/* ---- result building ---- */

typedef struct own {
    struct own *next;
    char s[];
} own;

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        abort(); /* the server's policy on allocation failure (docs/RELIABILITY.md) */
    return p;
}

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        abort();
    return p;
}

static char *xstrdup(const char *s)
{
    size_t n = strlen(s);
    char *p = xmalloc(n + 1);
    memcpy(p, s, n + 1);
    return p;
}

static const char *ostr(iql_result *r, const char *s)
{
    size_t n = strlen(s);
    own *o = xmalloc(sizeof *o + n + 1);
    memcpy(o->s, s, n + 1);
    o->next = r->owned;
    r->owned = o;
    return o->s;
}

static void set_error(iql_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error(iql_result *r, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    free(r->error);
    r->error = xstrdup(msg);
}

static iql_series *add_series(iql_result *r, const char *name, size_t ncols)
{
    if (r->nseries == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 8;
        r->series = xrealloc(r->series, r->cap * sizeof *r->series);
    }
    iql_series *s = &r->series[r->nseries++];
    memset(s, 0, sizeof *s);
    s->name = name ? ostr(r, name) : NULL;
    s->ncols = ncols;
    s->cols = xmalloc(ncols * sizeof *s->cols);
    return s;
}

iql_val *iql_series_add_row(iql_series *s)
{
    if (s->nrows == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->vals = xrealloc(s->vals, s->cap * s->ncols * sizeof *s->vals);
    }
    iql_val *v = &s->vals[s->nrows++ * s->ncols];
    memset(v, 0, s->ncols * sizeof *v);
    return v;
}

static void series_free(iql_series *s)
{
    free(s->cols);
    free(s->vals);
    free(s->tagk);
    free(s->tagv);
}

void iql_result_free(iql_result *r)
{
    for (size_t i = 0; i < r->nseries; i++)
        series_free(&r->series[i]);
    free(r->series);
    free(r->error);
    own *o = r->owned;
    while (o) {
        own *n = o->next;
        free(o);
        o = n;
    }
    memset(r, 0, sizeof *r);
}

/* ---- string vectors ---- */

typedef struct strv {
    const char **v;
    size_t n, cap;
} strv;

static void strv_push(strv *s, const char *x)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 8;
        s->v = xrealloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = x;
}

static int cmp_strp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void strv_sort_unique(strv *s)
{
    if (s->n < 2)
        return;
    qsort(s->v, s->n, sizeof *s->v, cmp_strp);
    size_t k = 1;
    for (size_t i = 1; i < s->n; i++)
        if (strcmp(s->v[i], s->v[k - 1]))
            s->v[k++] = s->v[i];
    s->n = k;
}

static int strv_has(const strv *s, const char *x)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->v[i], x))
            return 1;
    return 0;
}

/* ---- the catalog: devices, and the measurements their metrics make ---- */

typedef struct dev {
    char *name;
    char **tk, **tv; /* the device's own tags */
    size_t nt;
} dev;

typedef struct mfield {
    const char *field, *metric;
    size_t dev;
} mfield;

typedef struct meas {
    char *name;
    strv fields;  /* sorted, unique */
    size_t *devs; /* sorted, unique device indexes */
    size_t ndevs;
    strv tagkeys; /* sorted, unique; the device tag included */
    mfield *mf;   /* (field, metric, device) of this measurement, sorted by device */
    size_t nmf;
} meas;

typedef struct cat {
    dev *d;
    size_t nd, capd;
    meas *m;
    size_t nm;
    struct trip *t;
    size_t nt, capt;
    const char *devtag;
} cat;

typedef struct trip {
    char *meas, *field, *metric;
    size_t dev;
} trip;

static void split_metric(const char *m, char **meas_out, char **field_out)
{
    const char *dot = strchr(m, '.');
    if (dot && dot > m && dot[1]) {
        size_t n = (size_t)(dot - m);
        *meas_out = xmalloc(n + 1);
        memcpy(*meas_out, m, n);
        (*meas_out)[n] = 0;
        *field_out = xstrdup(dot + 1);
    } else {
        *meas_out = xstrdup(m);
        *field_out = xstrdup("value");
    }
}

static int cat_cb(void *ctx, const bdb_device_info *di)
{
    cat *c = ctx;
    if (c->nd == c->capd) {
        c->capd = c->capd ? c->capd * 2 : 64;
        c->d = xrealloc(c->d, c->capd * sizeof *c->d);
    }
    dev *d = &c->d[c->nd];
    d->name = xstrdup(di->device);
    d->nt = di->ntags;
    d->tk = xmalloc((di->ntags + 1) * sizeof *d->tk);
    d->tv = xmalloc((di->ntags + 1) * sizeof *d->tv);
    for (size_t i = 0; i < di->ntags; i++) {
        d->tk[i] = xmalloc(di->tags[i].klen + 1);
        memcpy(d->tk[i], di->tags[i].key, di->tags[i].klen);
        d->tk[i][di->tags[i].klen] = 0;
        d->tv[i] = xmalloc(di->tags[i].vlen + 1);
        memcpy(d->tv[i], di->tags[i].val, di->tags[i].vlen);
        d->tv[i][di->tags[i].vlen] = 0;
    }
    for (size_t i = 0; i < di->nmetrics; i++) {
        if (c->nt == c->capt) {
            c->capt = c->capt ? c->capt * 2 : 256;
            c->t = xrealloc(c->t, c->capt * sizeof *c->t);
        }
        trip *t = &c->t[c->nt++];
        split_metric(di->metrics[i], &t->meas, &t->field);
        t->metric = xstrdup(di->metrics[i]);
        t->dev = c->nd;
    }
    c->nd++;
    return 0;
}

static int cmp_trip(const void *a, const void *b)
{
    const trip *x = a, *y = b;
    int r = strcmp(x->meas, y->meas);
    if (r)
        return r;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    return strcmp(x->field, y->field);
}

static const char *dev_tag(const cat *c, const dev *d, const char *key)
{
    if (!strcmp(key, c->devtag))
        return d->name;
    for (size_t i = 0; i < d->nt; i++)
        if (!strcmp(d->tk[i], key))
            return d->tv[i];
    return NULL;
}

static int cat_load(const iql_ctx *x, cat *c)
{
    memset(c, 0, sizeof *c);
    c->devtag = x->device_tag;
    int rc = bdb_db_list_devices(x->db, x->tenant, cat_cb, c);
    if (rc != BDB_OK)
        return rc;
    if (c->nt)
        qsort(c->t, c->nt, sizeof *c->t, cmp_trip);
    /* measurements: runs of equal meas in the sorted triples */
    c->m = xmalloc((c->nt + 1) * sizeof *c->m);
    for (size_t i = 0; i < c->nt;) {
        size_t j = i;
        while (j < c->nt && !strcmp(c->t[j].meas, c->t[i].meas))
            j++;
        meas *m = &c->m[c->nm++];
        memset(m, 0, sizeof *m);
        m->name = c->t[i].meas;
        m->devs = xmalloc((j - i) * sizeof *m->devs);
        m->mf = xmalloc((j - i) * sizeof *m->mf);
        for (size_t k = i; k < j; k++) {
            strv_push(&m->fields, c->t[k].field);
            if (!m->ndevs || m->devs[m->ndevs - 1] != c->t[k].dev)
                m->devs[m->ndevs++] = c->t[k].dev;
            m->mf[m->nmf++] = (mfield){c->t[k].field, c->t[k].metric, c->t[k].dev};
        }
        strv_sort_unique(&m->fields);
        strv_push(&m->tagkeys, c->devtag);
        for (size_t k = 0; k < m->ndevs; k++) {
            const dev *d = &c->d[m->devs[k]];
            for (size_t t = 0; t < d->nt; t++)
                strv_push(&m->tagkeys, d->tk[t]);
        }
        strv_sort_unique(&m->tagkeys);
        i = j;
    }
    return BDB_OK;
}

static void cat_free(cat *c)
{
    for (size_t i = 0; i < c->nd; i++) {
        for (size_t t = 0; t < c->d[i].nt; t++) {
            free(c->d[i].tk[t]);
            free(c->d[i].tv[t]);
        }
        free(c->d[i].tk);
        free(c->d[i].tv);
        free(c->d[i].name);
    }
    free(c->d);
    for (size_t i = 0; i < c->nm; i++) {
        free(c->m[i].fields.v);
        free(c->m[i].tagkeys.v);
        free(c->m[i].devs);
        free(c->m[i].mf);
    }
    free(c->m);
    for (size_t i = 0; i < c->nt; i++) {
        free(c->t[i].meas);
        free(c->t[i].field);
        free(c->t[i].metric);
    }
    free(c->t);
}

static int name_match(const iql_name *n, const char *s)
{
    if (n->kind == IQL_N_WILD)
        return 1;
    if (n->kind == IQL_N_REGEX)
        return regexec(n->re, s, 0, NULL, 0) == 0;
    return !strcmp(n->name, s);
}

static int meas_selected(const iql_stmt *st, const meas *m)
{
    if (!st->nfrom)
        return 1;
    for (size_t i = 0; i < st->nfrom; i++)
        if (name_match(&st->from[i], m->name))
            return 1;
    return 0;
}

/* ---- WHERE: tag conditions per device, time bounds for the statement ---- */

static int is_time(const iql_expr *e)
{
    return e && e->kind == IQL_X_IDENT && !strcasecmp(e->s, "time");
}

static int refers_time(const iql_expr *e)
{
    if (!e)
        return 0;
    if (is_time(e))
        return 1;
    return e->kind == IQL_X_BIN && (refers_time(e->l) || refers_time(e->r));
}

/* Field values of one row for eval_cond: names (the statement's field list) and their
 * values at one time of one device, NaN where the row has none. */
typedef struct rowvals {
    const strv *names;
    const double *v;
} rowvals;

static int is_field_ref(const meas *m, const char *name)
{
    return !strv_has(&m->tagkeys, name) && strv_has(&m->fields, name);
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
        return !is_time(e) && is_field_ref(m, e->s);
    return e->kind == IQL_X_BIN && (e->op == IQL_ADD || e->op == IQL_SUB) &&
           (has_field(e->l, m) || has_field(e->r, m));
}

/* Device d of measurement m against e: 1 passes, 0 not, 2 unknown (a field condition
 * with no row given: rv NULL), -1 with an error in r. Time conditions pass (they are
 * bounds, time_bounds). fields: field conditions allowed (SELECT), else refused. */
static int eval_cond(const cat *c, const iql_expr *e, const dev *d, const meas *m,
                     const rowvals *rv, int fields, iql_result *r)
{
    if (!e)
        return 1;
    if (e->kind == IQL_X_BOOL)
        return (int)e->ival;
    if (e->kind != IQL_X_BIN) {
        set_error(r, "invalid condition: a comparison is expected, not a lone value");
        return -1;
    }
    if (e->op == IQL_AND || e->op == IQL_OR) {
        /* both sides always: an error must not depend on the order */
        int a = eval_cond(c, e->l, d, m, rv, fields, r);
        int b = a < 0 ? -1 : eval_cond(c, e->r, d, m, rv, fields, r);
        if (a < 0 || b < 0)
            return -1;
        if (e->op == IQL_AND)
            return !a || !b ? 0 : a == 1 && b == 1 ? 1 : 2;
        return a == 1 || b == 1 ? 1 : !a && !b ? 0 : 2;
    }
    if (refers_time(e))
        return 1;
    if (has_field(e->l, m) || has_field(e->r, m)) {
        if (!fields) {
            set_error(r, "conditions on field values are not supported here: filter on tags");
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
    const char *v = dev_tag(c, d, id->s);
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
        const char *w = dev_tag(c, d, lit->s);
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
    set_error(r, "invalid condition on tag '%.100s': use =, !=, =~ or !~", id->s);
    return -1;
}

/* The fields of m that e compares (appended to out once each); 1 when there is one. */
static int cond_fields(const iql_expr *e, const meas *m, strv *out)
{
    if (!e)
        return 0;
    if (e->kind == IQL_X_IDENT) {
        if (is_time(e) || !is_field_ref(m, e->s))
            return 0;
        if (!strv_has(out, e->s))
            strv_push(out, e->s);
        return 1;
    }
    if (e->kind != IQL_X_BIN)
        return 0;
    int a = cond_fields(e->l, m, out);
    return cond_fields(e->r, m, out) | a;
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
            set_error(r,
                      "time '%.64s' is outside the times bucketdb holds (1677-09-21T00:12:44Z "
                      "to 2262-04-11T23:47:16Z)",
                      e->s);
            return -1;
        }
        if (rc != BDB_OK) {
            set_error(r,
                      "invalid time '%.64s': use RFC 3339 (2023-11-14T00:00:00Z), an epoch with "
                      "a unit (1699920000000ms) or now() - 6h",
                      e->s);
            return -1;
        }
        if (__builtin_mul_overflow(ms, NS_PER_MS, ns)) {
            set_error(r, "time '%.64s' is outside the range of nanosecond times", e->s);
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
                set_error(r, "time expression overflows the range of nanosecond times");
                return -1;
            }
            return 0;
        }
        break;
    default:
        break;
    }
    set_error(r, "invalid time condition: compare time with now(), an RFC 3339 string or an "
                 "epoch with a unit");
    return -1;
}

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* Narrows [*from, *to) (ms) by the time comparisons of e. */
static int time_bounds(const iql_ctx *c, const iql_expr *e, int under_or, int64_t *from,
                       int64_t *to, int *has_from, int *has_to, int64_t *wfrom, iql_result *r)
{
    if (!e || e->kind != IQL_X_BIN)
        return 0;
    if (e->op == IQL_AND || e->op == IQL_OR) {
        int o = under_or || e->op == IQL_OR;
        return time_bounds(c, e->l, o, from, to, has_from, has_to, wfrom, r) ||
               time_bounds(c, e->r, o, from, to, has_from, has_to, wfrom, r);
    }
    if (!is_time(e->l) && !is_time(e->r))
        return 0;
    if (under_or) {
        set_error(r, "time conditions joined by OR are not supported: join them with AND");
        return -1;
    }
    enum iql_op op = e->op;
    const iql_expr *v = e->r;
    if (is_time(e->r)) { /* 5 < time: the same as time > 5 */
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
    int64_t lo_ms = floor_div(ns, NS_PER_MS), hi_ms = lo_ms + (ns % NS_PER_MS != 0);
    /* lo_ms = floor(ns / 1e6), hi_ms = ceil(ns / 1e6): samples are whole ms */
    int64_t f = INT64_MIN, t = INT64_MAX;
    /* InfluxDB starts the first GROUP BY window, and dates an answer without one, at
     * the lower bound in ns: "time > X" starts at X + 1 ns, which lies in X's ms */
    int64_t wf = lo_ms;
    switch (op) {
    case IQL_GT:
        f = lo_ms + 1;
        wf = ns == INT64_MAX ? lo_ms : floor_div(ns + 1, NS_PER_MS);
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
        set_error(r, "invalid time condition: use =, <, <=, > or >= with time");
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
static int where_has_tags(const iql_expr *e)
{
    if (!e || e->kind != IQL_X_BIN)
        return e != NULL && e->kind != IQL_X_BOOL;
    if (e->op == IQL_AND || e->op == IQL_OR)
        return where_has_tags(e->l) || where_has_tags(e->r);
    return !refers_time(e);
}

/* ---- SHOW ---- */

static void apply_limits(iql_series *s, int64_t limit, int64_t offset)
{
    size_t off = (size_t)offset < s->nrows ? (size_t)offset : s->nrows;
    size_t n = s->nrows - off;
    if (limit > 0 && (size_t)limit < n)
        n = (size_t)limit;
    if (off)
        memmove(s->vals, s->vals + off * s->ncols, n * s->ncols * sizeof *s->vals);
    s->nrows = n;
}

/* The devices of m that pass the statement's WHERE: a 0/1 per catalog device. -1 on error. */
static int match_devs(const cat *c, const iql_stmt *st, const meas *m, unsigned char *ok,
                      iql_result *r)
{
    memset(ok, 0, c->nd ? c->nd : 1);
    for (size_t i = 0; i < m->ndevs; i++) {
        int v = eval_cond(c, st->where, &c->d[m->devs[i]], m, NULL, st->kind == IQL_SELECT, r);
        if (v < 0)
            return -1;
        ok[m->devs[i]] = v != 0; /* unknown (a field condition): decided per row */
    }
    return 0;
}

static void single_col(iql_result *r, const char *name, const char *col, strv *vals,
                       const iql_stmt *st)
{
    if (!vals->n)
        return;
    iql_series *s = add_series(r, name, 1);
    s->cols[0] = col;
    for (size_t i = 0; i < vals->n; i++) {
        iql_val *v = iql_series_add_row(s);
        v->t = IQL_V_STR;
        v->s = ostr(r, vals->v[i]);
    }
    apply_limits(s, st->limit, st->offset);
}

/* A series key as InfluxDB writes it: commas, spaces and '=' escaped. */
static void key_part(char *out, size_t *n, size_t cap, const char *s, int is_meas)
{
    for (; *s && *n + 2 < cap; s++) {
        if (*s == ',' || *s == ' ' || (*s == '=' && !is_meas))
            out[(*n)++] = '\\';
        out[(*n)++] = *s;
    }
    out[*n] = 0;
}

static int exec_show(const iql_ctx *x, const iql_stmt *st, iql_result *r)
{
    if (st->kind == IQL_SHOW_DATABASES) {
        strv v = {0};
        for (size_t i = 0; i < x->ndatabases; i++)
            strv_push(&v, x->databases[i]);
        iql_series *s = add_series(r, "databases", 1);
        s->cols[0] = "name";
        for (size_t i = 0; i < v.n; i++) {
            iql_val *val = iql_series_add_row(s);
            val->t = IQL_V_STR;
            val->s = ostr(r, v.v[i]);
        }
        free(v.v);
        return 0;
    }
    if (st->kind == IQL_SHOW_RETENTION_POLICIES) {
        iql_series *s = add_series(r, NULL, 5);
        static const char *const cols[] = {"name", "duration", "shardGroupDuration", "replicaN",
                                           "default"};
        memcpy(s->cols, cols, sizeof cols);
        iql_val *v = iql_series_add_row(s);
        v[0] = (iql_val){.t = IQL_V_STR, .s = "autogen"};
        v[1] = (iql_val){.t = IQL_V_STR, .s = "0s"};
        v[2] = (iql_val){.t = IQL_V_STR, .s = "168h0m0s"};
        v[3] = (iql_val){.t = IQL_V_INT, .i = 1};
        v[4] = (iql_val){.t = IQL_V_BOOL, .i = 1};
        return 0;
    }
    if (st->kind == IQL_CREATE_DATABASE)
        return 0;
    cat c;
    if (cat_load(x, &c) != BDB_OK) {
        cat_free(&c);
        set_error(r, "listing the devices failed");
        return 0;
    }
    unsigned char *ok = xmalloc(c.nd + 1);
    strv all = {0}; /* SHOW MEASUREMENTS, SHOW SERIES: one list over every measurement */
    char **keys = NULL;
    size_t nkeys = 0;
    for (size_t mi = 0; mi < c.nm; mi++) {
        const meas *m = &c.m[mi];
        if (!meas_selected(st, m))
            continue;
        if (match_devs(&c, st, m, ok, r) != 0)
            break;
        strv v = {0};
        switch (st->kind) {
        case IQL_SHOW_MEASUREMENTS:
            for (size_t i = 0; i < m->ndevs; i++)
                if (ok[m->devs[i]]) {
                    strv_push(&all, m->name);
                    break;
                }
            break;
        case IQL_SHOW_TAG_KEYS:
        case IQL_SHOW_TAG_VALUES: {
            /* pairs "key\0value" kept as two lists would need a pair sort: join with \x1f */
            for (size_t i = 0; i < m->ndevs; i++) {
                const dev *d = &c.d[m->devs[i]];
                if (!ok[m->devs[i]])
                    continue;
                for (size_t t = 0; t <= d->nt; t++) {
                    const char *k = t < d->nt ? d->tk[t] : c.devtag;
                    const char *val = t < d->nt ? d->tv[t] : d->name;
                    if (st->kind == IQL_SHOW_TAG_KEYS) {
                        strv_push(&v, k);
                        continue;
                    }
                    int want;
                    if (st->key_in || st->key_op == IQL_EQ) {
                        want = 0;
                        for (size_t q = 0; q < st->nkeys; q++)
                            want |= !strcmp(st->keys[q], k);
                    } else if (st->key_op == IQL_NE) {
                        want = strcmp(st->keys[0], k) != 0;
                    } else {
                        want = (regexec(st->key_re, k, 0, NULL, 0) == 0) == (st->key_op == IQL_RE);
                    }
                    if (!want)
                        continue;
                    size_t kl = strlen(k), vl = strlen(val);
                    char *pair = xmalloc(kl + vl + 2);
                    memcpy(pair, k, kl);
                    pair[kl] = '\x1f';
                    memcpy(pair + kl + 1, val, vl + 1);
                    keys = xrealloc(keys, (nkeys + 1) * sizeof *keys);
                    keys[nkeys++] = pair;
                    strv_push(&v, pair);
                }
            }
            strv_sort_unique(&v);
            if (st->kind == IQL_SHOW_TAG_KEYS) {
                single_col(r, m->name, "tagKey", &v, st);
            } else if (v.n) {
                iql_series *s = add_series(r, m->name, 2);
                s->cols[0] = "key";
                s->cols[1] = "value";
                for (size_t i = 0; i < v.n; i++) {
                    iql_val *row = iql_series_add_row(s);
                    char *sep = strchr(v.v[i], '\x1f');
                    *sep = 0;
                    row[0] = (iql_val){.t = IQL_V_STR, .s = ostr(r, v.v[i])};
                    row[1] = (iql_val){.t = IQL_V_STR, .s = ostr(r, sep + 1)};
                    *sep = '\x1f';
                }
                apply_limits(s, st->limit, st->offset);
            }
            break;
        }
        case IQL_SHOW_FIELD_KEYS:
            if (m->fields.n) {
                iql_series *s = add_series(r, m->name, 2);
                s->cols[0] = "fieldKey";
                s->cols[1] = "fieldType";
                for (size_t i = 0; i < m->fields.n; i++) {
                    iql_val *row = iql_series_add_row(s);
                    row[0] = (iql_val){.t = IQL_V_STR, .s = ostr(r, m->fields.v[i])};
                    row[1] = (iql_val){.t = IQL_V_STR, .s = "float"};
                }
                apply_limits(s, st->limit, st->offset);
            }
            break;
        case IQL_SHOW_SERIES:
            for (size_t i = 0; i < m->ndevs; i++) {
                const dev *d = &c.d[m->devs[i]];
                if (!ok[m->devs[i]])
                    continue;
                /* the key's tags in key order: the device's tags and the device tag */
                strv tk = {0};
                for (size_t t = 0; t < d->nt; t++)
                    strv_push(&tk, d->tk[t]);
                strv_push(&tk, c.devtag);
                strv_sort_unique(&tk);
                size_t cap = 64 + strlen(m->name) * 2;
                for (size_t t = 0; t < tk.n; t++)
                    cap += 2 * (strlen(tk.v[t]) + strlen(dev_tag(&c, d, tk.v[t]))) + 2;
                char *key = xmalloc(cap);
                size_t n = 0;
                key_part(key, &n, cap, m->name, 1);
                for (size_t t = 0; t < tk.n; t++) {
                    key[n++] = ',';
                    key_part(key, &n, cap, tk.v[t], 0);
                    key[n++] = '=';
                    key_part(key, &n, cap, dev_tag(&c, d, tk.v[t]), 0);
                }
                key[n] = 0;
                free(tk.v);
                keys = xrealloc(keys, (nkeys + 1) * sizeof *keys);
                keys[nkeys++] = key;
                strv_push(&all, key);
            }
            break;
        default:
            break;
        }
        free(v.v);
    }
    if (!r->error) {
        strv_sort_unique(&all);
        if (st->kind == IQL_SHOW_MEASUREMENTS)
            single_col(r, "measurements", "name", &all, st);
        else if (st->kind == IQL_SHOW_SERIES)
            single_col(r, NULL, "key", &all, st);
        /* a series that LIMIT/OFFSET emptied is left out, as InfluxDB does */
        size_t kept = 0;
        for (size_t i = 0; i < r->nseries; i++) {
            if (r->series[i].nrows)
                r->series[kept++] = r->series[i];
            else
                series_free(&r->series[i]);
        }
        r->nseries = kept;
    } else {
        for (size_t i = 0; i < r->nseries; i++)
            series_free(&r->series[i]);
        r->nseries = 0;
    }
    for (size_t i = 0; i < nkeys; i++)
        free(keys[i]);
    free(keys);
    free(all.v);
    free(ok);
    cat_free(&c);
    return 0;
}

/* ---- SELECT ---- */

typedef iql_col col;

typedef struct pt {
    int64_t ts;
    double v;
    uint32_t dev; /* index in the matched device list */
    uint32_t fi;
} pt;

typedef struct sel {
    const iql_ctx *x;
    const iql_stmt *st;
    cat *c;
    iql_result *r;
    int64_t from, to; /* [from, to) ms */
    int64_t wfrom;    /* where windows start: from, or the ms before it (time_bounds) */
    int has_from, has_to;
    uint64_t read; /* samples read so far (max_points) */
    int over;
} sel;

struct read_ctx {
    sel *s;
    pt **p;
    size_t *n, *cap;
    uint32_t dev;
    const char *const *metrics;
    const uint32_t *fis;
    size_t nm;
};

static int read_cb(void *ctx, const char *metric, int64_t ts, double v)
{
    struct read_ctx *rc = ctx;
    if (++rc->s->read > rc->s->x->max_points) {
        rc->s->over = 1;
        return 1;
    }
    uint32_t fi = 0;
    for (size_t i = 0; i < rc->nm; i++)
        if (!strcmp(rc->metrics[i], metric)) {
            fi = rc->fis[i];
            break;
        }
    if (*rc->n == *rc->cap) {
        *rc->cap = *rc->cap ? *rc->cap * 2 : 1024;
        *rc->p = xrealloc(*rc->p, *rc->cap * sizeof **rc->p);
    }
    (*rc->p)[(*rc->n)++] = (pt){ts, v, rc->dev, fi};
    return 0;
}

/* Keeps the points of device d in p[from..to) (time order) whose row (the fields at
 * one time) passes the statement's field conditions; returns the new end. */
static size_t keep_rows(const cat *c, const iql_stmt *st, const meas *m, const dev *d,
                        const strv *fields, pt *p, size_t from, size_t to, iql_result *r)
{
    double *v = xmalloc((fields->n + 1) * sizeof *v);
    rowvals rv = {fields, v};
    size_t out = from;
    for (size_t i = from; i < to;) {
        size_t j = i;
        for (size_t f = 0; f < fields->n; f++)
            v[f] = NAN;
        for (; j < to && p[j].ts == p[i].ts; j++)
            v[p[j].fi] = p[j].v;
        if (eval_cond(c, st->where, d, m, &rv, 1, r) == 1)
            for (size_t k = i; k < j; k++)
                p[out++] = p[k];
        i = j;
    }
    free(v);
    return out;
}

static int cmp_pt(const void *a, const void *b)
{
    const pt *x = a, *y = b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    return x->fi < y->fi ? -1 : x->fi > y->fi;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One function over the points of a field in a window (in time order). *sel_ts gets
 * the time of the selected point for selectors. 0: no value. */
static int aggregate(const col *k, const pt *p, size_t n, iql_val *out, int64_t *sel_ts,
                     double *scratch)
{
    if (k->fn == IQL_FN_COUNT) {
        out->t = IQL_V_INT;
        out->i = (int64_t)n;
        return n > 0;
    }
    if (!n)
        return 0;
    out->t = IQL_V_NUM;
    double sum = 0;
    size_t best = 0;
    switch (k->fn) {
    case IQL_FN_SUM:
    case IQL_FN_MEAN:
        for (size_t i = 0; i < n; i++)
            sum += p[i].v;
        out->num = k->fn == IQL_FN_SUM ? sum : sum / (double)n;
        return 1;
    case IQL_FN_MIN:
    case IQL_FN_MAX:
        /* ties: the earlier point, as InfluxDB's selectors */
        for (size_t i = 1; i < n; i++)
            if (k->fn == IQL_FN_MIN ? p[i].v < p[best].v : p[i].v > p[best].v)
                best = i;
        out->num = p[best].v;
        *sel_ts = p[best].ts;
        return 1;
    case IQL_FN_FIRST:
    case IQL_FN_LAST:
        /* equal times (several devices): the larger value, as InfluxDB */
        for (size_t i = 1; i < n; i++) {
            int later = p[i].ts > p[best].ts, same = p[i].ts == p[best].ts;
            if (k->fn == IQL_FN_FIRST ? (same && p[i].v > p[best].v)
                                      : (later || (same && p[i].v > p[best].v)))
                best = i;
        }
        out->num = p[best].v;
        *sel_ts = p[best].ts;
        return 1;
    case IQL_FN_SPREAD: {
        double lo = p[0].v, hi = p[0].v;
        for (size_t i = 1; i < n; i++) {
            lo = p[i].v < lo ? p[i].v : lo;
            hi = p[i].v > hi ? p[i].v : hi;
        }
        out->num = hi - lo;
        return 1;
    }
    case IQL_FN_STDDEV: {
        if (n < 2)
            return 0;
        for (size_t i = 0; i < n; i++)
            sum += p[i].v;
        double mean = sum / (double)n, ss = 0;
        for (size_t i = 0; i < n; i++)
            ss += (p[i].v - mean) * (p[i].v - mean);
        out->num = sqrt(ss / (double)(n - 1));
        return 1;
    }
    case IQL_FN_MEDIAN:
    case IQL_FN_PERCENTILE: {
        for (size_t i = 0; i < n; i++)
            scratch[i] = p[i].v;
        qsort(scratch, n, sizeof *scratch, cmp_dbl);
        if (k->fn == IQL_FN_MEDIAN) {
            out->num = n % 2 ? scratch[n / 2]
                             : scratch[n / 2 - 1] + (scratch[n / 2] - scratch[n / 2 - 1]) / 2;
            return 1;
        }
        /* nearest rank, as InfluxDB: index floor(n * N / 100 + 0.5) - 1 */
        int64_t i = (int64_t)floor((double)n * k->param / 100.0 + 0.5) - 1;
        if (i < 0 || (size_t)i >= n)
            return 0;
        out->num = scratch[i];
        /* the time of a point holding that value (the first in time order) */
        for (size_t j = 0; j < n; j++)
            if (p[j].v == scratch[i]) {
                *sel_ts = p[j].ts;
                break;
            }
        return 1;
    }
    default:
        return 0;
    }
}

static int is_selector(enum iql_func f)
{
    return f == IQL_FN_MIN || f == IQL_FN_MAX || f == IQL_FN_FIRST || f == IQL_FN_LAST ||
           f == IQL_FN_PERCENTILE;
}

/* The output columns of st for measurement m; 0 when none applies to m. */
static size_t make_cols(const iql_stmt *st, const meas *m, const strv *gtags, col **out,
                        strv *fields, iql_result *r)
{
    col *k = NULL;
    size_t n = 0, cap = 0;
#define PUSH(...)                                                                                  \
    do {                                                                                           \
        if (n == cap) {                                                                            \
            cap = cap ? cap * 2 : 8;                                                               \
            k = xrealloc(k, cap * sizeof *k);                                                      \
        }                                                                                          \
        k[n++] = (col)__VA_ARGS__;                                                                 \
    } while (0)
    for (size_t i = 0; i < st->nfields; i++) {
        const iql_field *f = &st->fields[i];
        if (f->arg.kind == IQL_N_NAME) {
            if (!f->func && !strcasecmp(f->arg.name, "time"))
                continue;
            int tag = !f->func && !strv_has(&m->fields, f->arg.name) &&
                      strv_has(&m->tagkeys, f->arg.name);
            PUSH({f->func, f->param, f->arg.name, tag, 0, NULL});
            k[n - 1].aliased = f->alias != NULL;
            k[n - 1].name = f->alias ? f->alias : f->func ? iql_func_name(f->func) : f->arg.name;
            continue;
        }
        /* * or /regex/: every matching field (and, for a raw *, every tag not grouped by) */
        strv names = {0};
        for (size_t j = 0; j < m->fields.n; j++)
            if (name_match(&f->arg, m->fields.v[j]))
                strv_push(&names, m->fields.v[j]);
        if (!f->func && f->arg.kind == IQL_N_WILD)
            for (size_t j = 0; j < m->tagkeys.n; j++)
                if (!strv_has(gtags, m->tagkeys.v[j]))
                    strv_push(&names, m->tagkeys.v[j]);
        strv_sort_unique(&names);
        for (size_t j = 0; j < names.n; j++) {
            int tag = !f->func && !strv_has(&m->fields, names.v[j]);
            PUSH({f->func, f->param, ostr(r, names.v[j]), tag, 0, NULL});
            if (f->func) {
                char nm[512];
                snprintf(nm, sizeof nm, "%s_%s", iql_func_name(f->func), names.v[j]);
                k[n - 1].name = ostr(r, nm);
            } else {
                k[n - 1].name = ostr(r, names.v[j]); /* the catalog goes before the answer */
            }
        }
        free(names.v);
    }
#undef PUSH
    /* repeated names get _1, _2 as in InfluxDB */
    for (size_t i = 1; i < n; i++) {
        if (k[i].aliased)
            continue; /* InfluxDB keeps an alias as written, twice if so */
        int dup = 0;
        for (size_t j = 0; j < i; j++)
            dup += !strcmp(k[j].name, k[i].name);
        if (dup) {
            char nm[512];
            for (int s = dup;; s++) {
                snprintf(nm, sizeof nm, "%s_%d", k[i].name, s);
                int clash = 0;
                for (size_t j = 0; j < n; j++)
                    clash |= j != i && !strcmp(k[j].name, nm);
                if (!clash)
                    break;
            }
            k[i].name = ostr(r, nm);
        }
    }
    for (size_t i = 0; i < n; i++)
        k[i].absent = !k[i].is_tag && !strv_has(&m->fields, k[i].field);
    for (size_t i = 0; i < n; i++)
        if (!k[i].is_tag) {
            if (!strv_has(fields, k[i].field))
                strv_push(fields, k[i].field);
            for (size_t j = 0; j < fields->n; j++)
                if (!strcmp(fields->v[j], k[i].field))
                    k[i].fi = (int)j;
        }
    *out = k;
    return n;
}

/* Tags of the GROUP BY for measurement m, sorted. */
static void group_tags(const iql_stmt *st, const meas *m, strv *g)
{
    if (st->group_all_tags)
        for (size_t i = 0; i < m->tagkeys.n; i++)
            strv_push(g, m->tagkeys.v[i]);
    for (size_t i = 0; i < st->ngroup_tags; i++)
        strv_push(g, st->group_tags[i]);
    strv_sort_unique(g);
}

/* qsort has no context argument; statements run one per thread at a time */
static _Thread_local char **sort_keys;

static int cmp_by_key(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int r = strcmp(sort_keys[x], sort_keys[y]);
    return r ? r : (x < y ? -1 : x > y);
}

typedef struct grp {
    char *key;    /* tag values joined by \x1f */
    size_t first; /* an index into the matched devices (for the tags) */
} grp;

static void fill_rows(iql_series *s, const iql_stmt *st, size_t first_col)
{
    for (size_t cidx = first_col; cidx < s->ncols; cidx++) {
        if (st->fill == IQL_FILL_PREVIOUS) {
            const iql_val *prev = NULL;
            for (size_t i = 0; i < s->nrows; i++) {
                iql_val *v = &s->vals[i * s->ncols + cidx];
                if (v->t == IQL_V_NULL && prev)
                    *v = *prev;
                else if (v->t != IQL_V_NULL)
                    prev = v;
            }
        } else if (st->fill == IQL_FILL_VALUE) {
            for (size_t i = 0; i < s->nrows; i++) {
                iql_val *v = &s->vals[i * s->ncols + cidx];
                if (v->t == IQL_V_NULL) {
                    v->t = IQL_V_NUM;
                    v->num = st->fill_value;
                }
            }
        } else if (st->fill == IQL_FILL_LINEAR) {
            size_t last = SIZE_MAX;
            for (size_t i = 0; i < s->nrows; i++) {
                iql_val *v = &s->vals[i * s->ncols + cidx];
                if (v->t == IQL_V_NULL)
                    continue;
                if (last != SIZE_MAX && i > last + 1) {
                    const iql_val *a = &s->vals[last * s->ncols + cidx];
                    double x0 = (double)s->vals[last * s->ncols].i,
                           x1 = (double)s->vals[i * s->ncols].i;
                    double y0 = a->t == IQL_V_INT ? (double)a->i : a->num,
                           y1 = v->t == IQL_V_INT ? (double)v->i : v->num;
                    for (size_t j = last + 1; j < i; j++) {
                        iql_val *w = &s->vals[j * s->ncols + cidx];
                        double x = (double)s->vals[j * s->ncols].i;
                        if (a->t == IQL_V_INT && v->t == IQL_V_INT) {
                            w->t = IQL_V_INT;
                            w->i = (int64_t)(y0 + (y1 - y0) * (x - x0) / (x1 - x0));
                        } else {
                            w->t = IQL_V_NUM;
                            w->num = y0 + (y1 - y0) * (x - x0) / (x1 - x0);
                        }
                    }
                }
                last = i;
            }
        }
    }
}

static void reverse_rows(iql_series *s)
{
    iql_val tmp[64];
    for (size_t i = 0, j = s->nrows ? s->nrows - 1 : 0; i < j; i++, j--) {
        iql_val *a = &s->vals[i * s->ncols], *b = &s->vals[j * s->ncols];
        for (size_t k = 0; k < s->ncols; k += 64) {
            size_t m = s->ncols - k < 64 ? s->ncols - k : 64;
            memcpy(tmp, a + k, m * sizeof *tmp);
            memcpy(a + k, b + k, m * sizeof *tmp);
            memcpy(b + k, tmp, m * sizeof *tmp);
        }
    }
}

static int exec_select(const iql_ctx *x, const iql_stmt *st, iql_result *r)
{
    sel s = {.x = x,
             .st = st,
             .r = r,
             .from = BDB_QT_MIN_MS,
             .to = BDB_QT_MAX_MS,
             .wfrom = BDB_QT_MIN_MS};
    if (time_bounds(x, st->where, 0, &s.from, &s.to, &s.has_from, &s.has_to, &s.wfrom, r) != 0)
        return 0;
    int agg = st->nfields && st->fields[0].func != IQL_FN_NONE;
    if (st->every_ns && !agg) {
        set_error(r, "GROUP BY requires at least one aggregate function");
        return 0;
    }
    int64_t every = 0, off = 0;
    if (st->every_ns) {
        if (st->every_ns % NS_PER_MS) {
            set_error(r, "GROUP BY time interval must be a whole number of milliseconds "
                         "(bucketdb keeps millisecond times)");
            return 0;
        }
        every = st->every_ns / NS_PER_MS;
        off = floor_div(st->offset_ns, NS_PER_MS) % every;
        if (off < 0)
            off += every;
        if (!s.has_to) /* InfluxDB: an open-ended GROUP BY time ends now */
            s.to = x->now_ms + 1;
    }
    if (s.from >= s.to)
        return 0;
    r->tier = "raw";
    unsigned used = 0; /* bits: which data answered each measurement */
    cat c;
    if (cat_load(x, &c) != BDB_OK) {
        cat_free(&c);
        set_error(r, "listing the devices failed");
        return 0;
    }
    s.c = &c;
    unsigned char *ok = xmalloc(c.nd + 1);
    for (size_t mi = 0; mi < c.nm && !r->error && !s.over; mi++) {
        const meas *m = &c.m[mi];
        if (!meas_selected(st, m))
            continue;
        if (match_devs(&c, st, m, ok, r) != 0)
            break;
        strv gt = {0}, fields = {0};
        group_tags(st, m, &gt);
        col *k = NULL;
        size_t nk = make_cols(st, m, &gt, &k, &fields, r);
        /* fields compared in WHERE are read too, and rows are filtered on them: raw only */
        int fcond = cond_fields(st->where, m, &fields);
        /* the matched devices that have some wanted field, and their groups */
        size_t *md = xmalloc((m->ndevs + 1) * sizeof *md), nmd = 0;
        for (size_t i = 0; i < m->ndevs; i++)
            if (ok[m->devs[i]])
                md[nmd++] = m->devs[i];
        grp *gr = xmalloc((nmd + 1) * sizeof *gr);
        size_t *dg = xmalloc((nmd + 1) * sizeof *dg), ng = 0;
        char **keys = xmalloc((nmd + 1) * sizeof *keys);
        for (size_t i = 0; i < nmd; i++) {
            size_t cap = 2;
            for (size_t t = 0; t < gt.n; t++) {
                const char *v = dev_tag(&c, &c.d[md[i]], gt.v[t]);
                cap += (v ? strlen(v) : 0) + 1;
            }
            char *key = xmalloc(cap);
            size_t n = 0;
            for (size_t t = 0; t < gt.n; t++) {
                const char *v = dev_tag(&c, &c.d[md[i]], gt.v[t]);
                size_t l = v ? strlen(v) : 0;
                memcpy(key + n, v ? v : "", l);
                n += l;
                key[n++] = '\x1f';
            }
            key[n] = 0;
            keys[i] = key;
        }
        /* groups numbered in key order: the devices sorted by key, equal keys one group */
        {
            size_t *by = xmalloc((nmd + 1) * sizeof *by);
            for (size_t i = 0; i < nmd; i++)
                by[i] = i;
            sort_keys = keys;
            qsort(by, nmd, sizeof *by, cmp_by_key);
            for (size_t i = 0; i < nmd; i++) {
                size_t d = by[i];
                if (!ng || strcmp(gr[ng - 1].key, keys[d])) {
                    gr[ng++] = (grp){keys[d], d};
                } else {
                    free(keys[d]);
                }
                dg[d] = ng - 1;
            }
            free(by);
            free(keys);
        }
        size_t first_series = r->nseries;
        /* a tier answers when every function and the range fit it (iql_tier.h) */
        int tier = agg && every && !fcond ? iql_tier_choose(x, k, nk, every, off, s.from, s.to,
                                                            s.has_from, s.has_to, ng == nmd)
                                          : 0;
        /* the fleet tables answer whole hours or days of every device at once */
        int64_t fa = 0, fb = 0;
        int fleet = tier && !gt.n && nmd > 1 && !where_has_tags(st->where)
                        ? iql_fleet_choose(x, k, nk, every, off, s.from, s.to, &fa, &fb)
                        : 0;
        const char *fmetric[IQL_MAX_LIST];
        for (size_t f = 0; f < fields.n && fleet; f++) {
            /* one metric per field, or the tables (per metric) do not answer it */
            fmetric[f] = NULL;
            for (size_t j = 0; j < m->nmf && fleet; j++)
                if (!strcmp(m->mf[j].field, fields.v[f])) {
                    if (fmetric[f] && strcmp(fmetric[f], m->mf[j].metric))
                        fleet = 0;
                    fmetric[f] = m->mf[j].metric;
                }
        }
    again:;
        int retry = 0;
        /* read each device's wanted metrics */
        pt *p = NULL;
        size_t np = 0, capp = 0;
        tier_rows tr = {0};
        size_t mj = 0; /* m->mf and md are both in device order: one walk */
        for (size_t i = 0; i < nmd && fields.n && !s.over; i++) {
            const char *metrics[IQL_MAX_LIST];
            uint32_t fis[IQL_MAX_LIST];
            size_t nm = 0;
            while (mj < m->nmf && m->mf[mj].dev < md[i])
                mj++;
            for (size_t j = mj; j < m->nmf && m->mf[j].dev == md[i]; j++)
                for (size_t f = 0; f < fields.n && nm < IQL_MAX_LIST; f++)
                    if (!strcmp(fields.v[f], m->mf[j].field)) {
                        metrics[nm] = m->mf[j].metric;
                        fis[nm++] = (uint32_t)f;
                    }
            if (!nm)
                continue;
            if (tier) {
                /* with the fleet tables, the devices' tiers answer only the edges */
                int rc = iql_tier_read(x, tier, c.d[md[i]].name, metrics, fis, nm, (uint32_t)i,
                                       s.from, fleet ? fa : s.to, &tr, &s.read);
                if (rc == BDB_OK && fleet)
                    rc = iql_tier_read(x, tier, c.d[md[i]].name, metrics, fis, nm, (uint32_t)i, fb,
                                       s.to, &tr, &s.read);
                if (rc == BDB_ERR_LIMIT) {
                    s.over = 1;
                } else if (rc != BDB_OK && rc != BDB_ERR_NOTFOUND) {
                    set_error(r, "reading the %s tier failed: %s", iql_tier_name(tier),
                              bdb_strerror(rc));
                }
                continue;
            }
            bdb_range_query q = {.tenant = x->tenant,
                                 .device = c.d[md[i]].name,
                                 .metrics = metrics,
                                 .nmetrics = nm,
                                 .from = s.from,
                                 .to = s.to};
            struct read_ctx rc = {&s, &p, &np, &capp, (uint32_t)i, metrics, fis, nm};
            bdb_query_stats qs;
            size_t first_pt = np;
            int e = bdb_query_range(x->db, x->pool, &q, read_cb, &rc, &qs);
            if (e == BDB_OK && fcond && !s.over)
                np = keep_rows(&c, st, m, &c.d[md[i]], &fields, p, first_pt, np, r);
            if (e != BDB_OK && e != BDB_ERR_NOTFOUND) {
                set_error(r, "reading device '%.100s' failed: %s", c.d[md[i]].name,
                          bdb_strerror(e));
                break;
            }
        }
        for (size_t f = 0; f < fields.n && fleet && !s.over && !r->error; f++) {
            if (!fmetric[f])
                continue; /* a field this measurement does not have */
            int rc = iql_fleet_read(x, fleet, fmetric[f], (uint32_t)f, fa, fb, &tr, &s.read);
            if (rc == BDB_ERR_LIMIT)
                s.over = 1;
            else if (rc != BDB_OK)
                set_error(r, "reading the fleet tables failed: %s", bdb_strerror(rc));
        }
        /* sort by group, then time: a group's points are one run */
        size_t *gstart = xmalloc((ng + 2) * sizeof *gstart);
        pt *sorted = xmalloc((np + 1) * sizeof *sorted);
        memset(gstart, 0, (ng + 2) * sizeof *gstart);
        for (size_t i = 0; i < np; i++)
            gstart[dg[p[i].dev] + 1]++;
        for (size_t g = 0; g < ng; g++)
            gstart[g + 1] += gstart[g];
        {
            size_t *pos = xmalloc((ng + 1) * sizeof *pos);
            memcpy(pos, gstart, (ng + 1) * sizeof *pos);
            for (size_t i = 0; i < np; i++)
                sorted[pos[dg[p[i].dev]]++] = p[i];
            free(pos);
        }
        for (size_t g = 0; g < ng; g++)
            qsort(sorted + gstart[g], gstart[g + 1] - gstart[g], sizeof *sorted, cmp_pt);
        /* groups in key order */
        size_t *gorder = xmalloc((ng + 1) * sizeof *gorder);
        for (size_t g = 0; g < ng; g++)
            gorder[g] = g;
        for (size_t a = 1; a < ng; a++) /* insertion sort: few groups, stable */
            for (size_t b = a; b > 0 && strcmp(gr[gorder[b - 1]].key, gr[gorder[b]].key) > 0; b--) {
                size_t t = gorder[b];
                gorder[b] = gorder[b - 1];
                gorder[b - 1] = t;
            }
        size_t *tstart = xmalloc((ng + 2) * sizeof *tstart);
        iql_tier_sort(&tr, dg, ng, tstart);
        double *scratch = xmalloc((np + 1) * sizeof *scratch);
        pt *fp = xmalloc((np + 1) * sizeof *fp);
        for (size_t go = 0; go < ng && nk && !s.over && !r->error; go++) {
            size_t g = gorder[go];
            const pt *gp = sorted + gstart[g];
            size_t gn = gstart[g + 1] - gstart[g];
            int has_tier = tier && tstart[g + 1] > tstart[g];
            if (!gn && !has_tier)
                continue;
            iql_series *se = add_series(r, m->name, nk + 1);
            se->cols[0] = "time";
            for (size_t i = 0; i < nk; i++)
                se->cols[i + 1] = k[i].name;
            if (gt.n) {
                se->ntags = gt.n;
                se->tagk = xmalloc(gt.n * sizeof *se->tagk);
                se->tagv = xmalloc(gt.n * sizeof *se->tagv);
                const dev *d = &c.d[md[gr[g].first]];
                for (size_t t = 0; t < gt.n; t++) {
                    const char *v = dev_tag(&c, d, gt.v[t]);
                    se->tagk[t] = ostr(r, gt.v[t]);
                    se->tagv[t] = ostr(r, v ? v : "");
                }
            }
            if (!agg) {
                for (size_t i = 0; i < gn;) {
                    size_t j = i;
                    iql_val *row = iql_series_add_row(se);
                    row[0] = (iql_val){.t = IQL_V_TIME, .i = gp[i].ts};
                    int any = 0;
                    for (; j < gn && gp[j].ts == gp[i].ts && gp[j].dev == gp[i].dev; j++)
                        for (size_t q = 0; q < nk; q++)
                            if (!k[q].is_tag && (uint32_t)k[q].fi == gp[j].fi) {
                                row[q + 1] = (iql_val){.t = IQL_V_NUM, .num = gp[j].v};
                                any = 1;
                            }
                    for (size_t q = 0; q < nk; q++)
                        if (k[q].is_tag) {
                            const char *v = dev_tag(&c, &c.d[md[gp[i].dev]], k[q].field);
                            if (v)
                                row[q + 1] = (iql_val){.t = IQL_V_STR, .s = ostr(r, v)};
                        }
                    if (!any)
                        se->nrows--;
                    i = j;
                    if (se->nrows > x->max_points) {
                        s.over = 1;
                        break;
                    }
                }
            } else if (has_tier) {
                int trc = iql_tier_rows(st, tr.w + tstart[g], tstart[g + 1] - tstart[g], k, nk,
                                        every, off, s.wfrom, s.to, se, x->max_points);
                if (trc == -2) {
                    retry = 1;
                    break;
                }
                if (trc != 0)
                    s.over = 1;
            } else {
                int64_t lo, hi, w = every;
                if (every) {
                    int64_t first = s.has_from ? s.wfrom : gp[0].ts;
                    lo = floor_div(first - off, every) * every + off;
                    hi = floor_div(s.to - 1 - off, every) * every + off;
                    if ((uint64_t)((hi - lo) / every) >= x->max_points) {
                        s.over = 1;
                        break;
                    }
                } else {
                    lo = s.has_from ? s.wfrom : 0;
                    hi = lo;
                    w = 0;
                }
                size_t at = 0;
                for (int64_t ws = lo;; ws += w) {
                    size_t a = at;
                    while (at < gn && (!w || gp[at].ts < ws + w))
                        at++;
                    iql_val *row = iql_series_add_row(se);
                    row[0] = (iql_val){.t = IQL_V_TIME, .i = ws};
                    int any = 0;
                    for (size_t q = 0; q < nk; q++) {
                        size_t n = 0;
                        for (size_t i = a; i < at; i++)
                            if (gp[i].fi == (uint32_t)k[q].fi)
                                fp[n++] = gp[i];
                        int64_t sts = ws;
                        if (aggregate(&k[q], fp, n, &row[q + 1], &sts, scratch))
                            any = 1;
                        else if (k[q].fn != IQL_FN_COUNT || st->fill != IQL_FILL_NULL ||
                                 k[q].absent)
                            row[q + 1].t = IQL_V_NULL; /* count fills 0 under fill(null) */
                        if (!every && nk == 1 && is_selector(k[q].fn) && n)
                            row[0].i = sts;
                    }
                    if (!any && st->fill == IQL_FILL_NONE)
                        se->nrows--;
                    if (!w || ws >= hi)
                        break;
                }
            }
            if (agg)
                fill_rows(se, st, 1);
            if (st->desc)
                reverse_rows(se);
            apply_limits(se, st->limit, st->offset);
            if (!se->nrows) {
                series_free(se);
                r->nseries--;
            }
        }
        free(scratch);
        free(tstart);
        free(fp);
        free(gorder);
        free(sorted);
        free(gstart);
        free(p);
        iql_tier_rows_free(&tr);
        if (retry) {
            /* a percentile the sketches cannot give at InfluxDB's rank: raw after all */
            while (r->nseries > first_series)
                series_free(&r->series[--r->nseries]);
            tier = 0;
            fleet = 0;
            goto again;
        }
        used |= 1u << (fleet ? 4 : tier); /* BDB_RES_RAW..1D, then the fleet tables */
        for (size_t g = 0; g < ng; g++)
            free(gr[g].key);
        free(gr);
        free(dg);
        free(md);
        free(k);
        free(gt.v);
        free(fields.v);
    }
    free(ok);
    cat_free(&c);
    if (used) { /* what answered, coarsest last: "raw", "1m,1h", "fleet" ... */
        static const char *const names[] = {"raw", "1m", "1h", "1d", "fleet"};
        char buf[32] = "";
        for (int i = 0; i < 5; i++)
            if (used & (1u << i)) {
                if (*buf)
                    strcat(buf, ",");
                strcat(buf, names[i]);
            }
        r->tier = ostr(r, buf);
    }
    if (s.over) {
        for (size_t i = 0; i < r->nseries; i++)
            series_free(&r->series[i]);
        r->nseries = 0;
        set_error(r,
                  "max-select-point limit exceeded: the query would read or return more than "
                  "max_query_samples %llu points; narrow the time range, filter on tags or "
                  "group by a longer time interval",
                  (unsigned long long)x->max_points);
        return -1;
    }
    /* InfluxDB orders the series backwards too under ORDER BY time DESC */
    if (st->desc)
        for (size_t i = 0, j = r->nseries ? r->nseries - 1 : 0; i < j; i++, j--) {
            iql_series t = r->series[i];
            r->series[i] = r->series[j];
            r->series[j] = t;
        }
    /* SLIMIT / SOFFSET over the series */
    if (st->soffset || st->slimit) {
        size_t off_s = (size_t)st->soffset < r->nseries ? (size_t)st->soffset : r->nseries;
        for (size_t i = 0; i < off_s; i++)
            series_free(&r->series[i]);
        memmove(r->series, r->series + off_s, (r->nseries - off_s) * sizeof *r->series);
        r->nseries -= off_s;
        if (st->slimit && (size_t)st->slimit < r->nseries) {
            for (size_t i = (size_t)st->slimit; i < r->nseries; i++)
                series_free(&r->series[i]);
            r->nseries = (size_t)st->slimit;
        }
    }
    return 0;
}

int iql_exec(const iql_ctx *c, const iql_stmt *st, iql_result *out)
{
    memset(out, 0, sizeof *out);
    if (st->kind == IQL_SELECT)
        return exec_select(c, st, out);
    return exec_show(c, st, out);
}
