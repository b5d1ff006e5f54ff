/* iql_exec: AST -> engine calls -> InfluxDB result series. See iql_exec.h for the
 * mapping and the tier rule, docs/INFLUX.md for what a user sees. */
#include "query/influxql/iql_int.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"
#include "query/influxql/iql_gcache.h"
#include "query/influxql/iql_tier.h"
#include "query/range.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- SELECT ---- */

typedef iql_col col;

typedef struct pt {
    int64_t ts;
    double v;
    uint32_t dev; /* index in the matched device list */
    uint32_t fi;
    const char *s; /* a string field's value (owned by the result); v is then NaN */
} pt;

typedef struct sel {
    const iql_ctx *x;
    const iql_stmt *st;
    cat *c;
    iql_result *r;
    int64_t from, to; /* [from, to) ms */
    int64_t wfrom;    /* where windows start: from, or the ms before it (iql_time_bounds) */
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
        *rc->p = iql_xrealloc(*rc->p, *rc->cap * sizeof **rc->p);
    }
    (*rc->p)[(*rc->n)++] = (pt){ts, v, rc->dev, fi, NULL};
    return 0;
}

/* Keeps the points of device d in p[from..to) (time order) whose row (the fields at
 * one time) passes the statement's field conditions; returns the new end. */
static size_t keep_rows(const cat *c, const iql_stmt *st, const meas *m, const dev *d,
                        const strv *fields, pt *p, size_t from, size_t to, iql_result *r)
{
    double *v = iql_xmalloc((fields->n + 1) * sizeof *v);
    rowvals rv = {fields, v};
    size_t out = from;
    for (size_t i = from; i < to;) {
        size_t j = i;
        for (size_t f = 0; f < fields->n; f++)
            v[f] = NAN;
        for (; j < to && p[j].ts == p[i].ts; j++)
            v[p[j].fi] = p[j].v;
        if (iql_eval_cond(c, st->where, d, m, &rv, 1, r) == 1)
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
            k = iql_xrealloc(k, cap * sizeof *k);                                                  \
        }                                                                                          \
        k[n++] = (col)__VA_ARGS__;                                                                 \
    } while (0)
    for (size_t i = 0; i < st->nfields; i++) {
        const iql_field *f = &st->fields[i];
        if (f->arg.kind == IQL_N_NAME) {
            if (!f->func && !strcasecmp(f->arg.name, "time"))
                continue;
            int tag = !f->func && !iql_strv_has(&m->fields, f->arg.name) &&
                      iql_strv_has(&m->tagkeys, f->arg.name);
            PUSH({f->func, f->param, f->arg.name, tag, 0, NULL});
            k[n - 1].aliased = f->alias != NULL;
            k[n - 1].name = f->alias ? f->alias : f->func ? iql_func_name(f->func) : f->arg.name;
            continue;
        }
        /* * or /regex/: every matching field (and, for a raw *, every tag not grouped by) */
        strv names = {0};
        for (size_t j = 0; j < m->fields.n; j++)
            if (iql_name_match(&f->arg, m->fields.v[j]))
                iql_strv_push(&names, m->fields.v[j]);
        if (!f->func && f->arg.kind == IQL_N_WILD)
            for (size_t j = 0; j < m->tagkeys.n; j++)
                if (!iql_strv_has(gtags, m->tagkeys.v[j]))
                    iql_strv_push(&names, m->tagkeys.v[j]);
        iql_strv_sort_unique(&names);
        for (size_t j = 0; j < names.n; j++) {
            int tag = !f->func && !iql_strv_has(&m->fields, names.v[j]);
            PUSH({f->func, f->param, iql_ostr(r, names.v[j]), tag, 0, NULL});
            if (f->func) {
                char nm[512];
                snprintf(nm, sizeof nm, "%s_%s", iql_func_name(f->func), names.v[j]);
                k[n - 1].name = iql_ostr(r, nm);
            } else {
                k[n - 1].name = iql_ostr(r, names.v[j]); /* the catalog goes before the answer */
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
            k[i].name = iql_ostr(r, nm);
        }
    }
    for (size_t i = 0; i < n; i++)
        k[i].absent = !k[i].is_tag && !iql_strv_has(&m->fields, k[i].field);
    for (size_t i = 0; i < n; i++)
        if (!k[i].is_tag) {
            if (!iql_strv_has(fields, k[i].field))
                iql_strv_push(fields, k[i].field);
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
            iql_strv_push(g, m->tagkeys.v[i]);
    for (size_t i = 0; i < st->ngroup_tags; i++)
        iql_strv_push(g, st->group_tags[i]);
    iql_strv_sort_unique(g);
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

/* The catalog a SELECT needs. A panel of one device (WHERE device = 'x' and time)
 * lists that device alone rather than the whole tenant, where its own fields and tags
 * answer as every device's would: functions of named fields only (no raw field, no
 * wildcard, no GROUP BY *), each a field the device has in the measurement, so that
 * no column is absent from it that another device has. */
static int load_catalog(const iql_ctx *x, const iql_stmt *st, cat *c)
{
    const char *pin = iql_where_device(st->where, x->device_tag);
    int one = pin && !st->group_all_tags && st->nfields;
    for (size_t i = 0; i < st->nfields && one; i++)
        one = st->fields[i].func != IQL_FN_NONE && st->fields[i].arg.kind == IQL_N_NAME;
    if (!one)
        return iql_cat_load(x, c);
    int rc = iql_cat_load_device(x, pin, c);
    for (size_t mi = 0; mi < c->nm && rc == BDB_OK && one; mi++)
        if (iql_meas_selected(st, &c->m[mi]))
            for (size_t i = 0; i < st->nfields && one; i++)
                one = iql_strv_has(&c->m[mi].fields, st->fields[i].arg.name);
    if (rc != BDB_OK || one)
        return rc;
    iql_cat_free(c);
    return iql_cat_load(x, c);
}

/* String fields: a device keeps only the latest value of each (its attributes,
 * docs/INFLUX.md#the-mapping), so a raw SELECT of one shows that value at its time
 * when the time is in the range. */
struct attr_read {
    sel *s;
    const meas *m;
    const col *k;
    size_t nk;
    uint32_t dev;
    int fcond; /* rows were filtered on fields: a value only beside a row that passed */
    pt **p;
    size_t *n, *cap;
};

static int attr_read_cb(void *ctx, const bdb_latest *l)
{
    struct attr_read *a = ctx;
    size_t ml = strlen(a->m->name);
    for (size_t i = 0; i < l->nattrs; i++) {
        const bdb_latest_attr *at = &l->attrs[i];
        /* measurement and field split as a metric's (iql_cat.c) */
        const char *name = at->name, *dot = strchr(name, '.'), *field = "value";
        size_t nl = strlen(name);
        if (dot && dot > name && dot[1]) {
            field = dot + 1;
            nl = (size_t)(dot - name);
        }
        if (nl != ml || memcmp(name, a->m->name, ml) || at->ts < a->s->from || at->ts >= a->s->to)
            continue;
        int kept = !a->fcond;
        for (size_t j = 0; j < *a->n && !kept; j++)
            kept = (*a->p)[j].dev == a->dev && (*a->p)[j].ts == at->ts;
        if (!kept)
            continue;
        for (size_t q = 0; q < a->nk; q++) {
            if (a->k[q].is_tag || !a->k[q].absent || strcmp(a->k[q].field, field))
                continue;
            if (++a->s->read > a->s->x->max_points) {
                a->s->over = 1;
                return 1;
            }
            if (*a->n == *a->cap) {
                *a->cap = *a->cap ? *a->cap * 2 : 1024;
                *a->p = iql_xrealloc(*a->p, *a->cap * sizeof **a->p);
            }
            (*a->p)[(*a->n)++] =
                (pt){at->ts, NAN, a->dev, (uint32_t)a->k[q].fi, iql_ostr(a->s->r, at->value)};
            break;
        }
    }
    return 0;
}

/* The string fields among st's raw columns (fields m has no float of): each device's
 * latest value as a point. */
static void read_attrs(sel *s, const meas *m, const col *k, size_t nk, const size_t *md, size_t nmd,
                       int fcond, pt **p, size_t *np, size_t *capp)
{
    int any = 0;
    for (size_t q = 0; q < nk; q++)
        any |= !k[q].is_tag && k[q].absent;
    struct attr_read a = {s, m, k, nk, 0, fcond, p, np, capp};
    for (size_t i = 0; i < nmd && any && !s->over; i++) {
        a.dev = (uint32_t)i;
        bdb_db_latest(s->x->db, s->x->tenant, s->c->d[md[i]].name, attr_read_cb, &a);
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
    if (iql_time_bounds(x, st->where, 0, &s.from, &s.to, &s.has_from, &s.has_to, &s.wfrom, r) != 0)
        return 0;
    int agg = st->nfields && st->fields[0].func != IQL_FN_NONE;
    if (st->every_ns && !agg) {
        iql_set_error(r, "GROUP BY requires at least one aggregate function");
        return 0;
    }
    int64_t every = 0, off = 0;
    if (st->every_ns) {
        if (st->every_ns % NS_PER_MS) {
            iql_set_error(r, "GROUP BY time interval must be a whole number of milliseconds "
                             "(bucketdb keeps millisecond times)");
            return 0;
        }
        every = st->every_ns / NS_PER_MS;
        off = iql_floor_div(st->offset_ns, NS_PER_MS) % every;
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
    if (load_catalog(x, st, &c) != BDB_OK) {
        iql_cat_free(&c);
        iql_set_error(r, "listing the devices failed");
        return 0;
    }
    s.c = &c;
    unsigned char *ok = iql_xmalloc(c.nd + 1);
    for (size_t mi = 0; mi < c.nm && !r->error && !s.over; mi++) {
        const meas *m = &c.m[mi];
        if (!iql_meas_selected(st, m))
            continue;
        if (iql_match_devs(&c, st, m, ok, r) != 0)
            break;
        strv gt = {0}, fields = {0};
        group_tags(st, m, &gt);
        col *k = NULL;
        size_t nk = make_cols(st, m, &gt, &k, &fields, r);
        /* fields compared in WHERE are read too, and rows are filtered on them: raw only */
        int fcond = iql_cond_fields(st->where, m, &fields);
        /* the matched devices that have some wanted field, and their groups */
        size_t *md = iql_xmalloc((m->ndevs + 1) * sizeof *md), nmd = 0;
        for (size_t i = 0; i < m->ndevs; i++)
            if (ok[m->devs[i]])
                md[nmd++] = m->devs[i];
        grp *gr = iql_xmalloc((nmd + 1) * sizeof *gr);
        size_t *dg = iql_xmalloc((nmd + 1) * sizeof *dg), ng = 0;
        char **keys = iql_xmalloc((nmd + 1) * sizeof *keys);
        for (size_t i = 0; i < nmd; i++) {
            size_t cap = 2;
            for (size_t t = 0; t < gt.n; t++) {
                const char *v = iql_dev_tag(&c, &c.d[md[i]], gt.v[t]);
                cap += (v ? strlen(v) : 0) + 1;
            }
            char *key = iql_xmalloc(cap);
            size_t n = 0;
            for (size_t t = 0; t < gt.n; t++) {
                const char *v = iql_dev_tag(&c, &c.d[md[i]], gt.v[t]);
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
            size_t *by = iql_xmalloc((nmd + 1) * sizeof *by);
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
        int fleet = tier && !gt.n && nmd > 1 && !iql_where_has_tags(st->where)
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
        int quant = 0; /* a column the sketches answer */
        for (size_t i = 0; i < nk; i++)
            quant |= k[i].fn == IQL_FN_MEDIAN || k[i].fn == IQL_FN_PERCENTILE;
    again:;
        int retry = 0;
        /* read each device's wanted metrics */
        pt *p = NULL;
        size_t np = 0, capp = 0;
        tier_acc ta;
        if (tier) {
            iql_tier_acc_init(&ta, dg, ng, fields.n, every, off, s.wfrom, s.to, x->max_points);
            for (size_t i = 0; i < nk; i++)
                ta.spread |= k[i].fn == IQL_FN_STDDEV;
        } else
            memset(&ta, 0, sizeof ta);
        /* settled windows of the groups kept by an earlier statement, or to keep */
        iql_gc gc;
        int gcu = tier && !fleet && !quant && !s.over
                      ? iql_gc_plan(x, &c, m, &fields, md, nmd, dg, ng, tier, s.from, s.to, &ta,
                                    &s.read, &gc)
                      : 0;
        if (gcu < 0) {
            s.over = 1;
            gcu = 0;
        }
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
                /* with the fleet tables or kept windows, the devices' tiers answer only
                 * the edges (a build reads the middle apart, to keep it) */
                int64_t ea = fleet ? fa : gcu ? gc.a : s.to, eb = fleet ? fb : gcu ? gc.b : s.to;
                const char *dn = c.d[md[i]].name;
                int rc = iql_tier_read(x, tier, dn, metrics, fis, nm, (uint32_t)i, s.from, ea,
                                       quant, &ta, &s.read);
                if (rc == BDB_OK && gcu && gc.build) {
                    uint64_t r0 = s.read;
                    rc = iql_tier_read(x, tier, dn, metrics, fis, nm, (uint32_t)i, ea, eb, quant,
                                       &gc.mid, &s.read);
                    gc.reads += s.read - r0;
                }
                if (rc == BDB_OK && eb < s.to)
                    rc = iql_tier_read(x, tier, dn, metrics, fis, nm, (uint32_t)i, eb, s.to, quant,
                                       &ta, &s.read);
                if (rc == BDB_ERR_LIMIT) {
                    s.over = 1;
                } else if (rc != BDB_OK && rc != BDB_ERR_NOTFOUND) {
                    iql_set_error(r, "reading the %s tier failed: %s", iql_tier_name(tier),
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
                iql_set_error(r, "reading device '%.100s' failed: %s", c.d[md[i]].name,
                              bdb_strerror(e));
                break;
            }
        }
        if (gcu && iql_gc_finish(x, &gc, &ta, !s.over && !r->error) != 0)
            s.over = 1;
        if (!agg && !r->error && !s.over)
            read_attrs(&s, m, k, nk, md, nmd, fcond, &p, &np, &capp);
        for (size_t f = 0; f < fields.n && fleet && !s.over && !r->error; f++) {
            if (!fmetric[f])
                continue; /* a field this measurement does not have */
            int rc = iql_fleet_read(x, fleet, fmetric[f], (uint32_t)f, fa, fb, &ta, &s.read);
            if (rc == BDB_ERR_LIMIT)
                s.over = 1;
            else if (rc != BDB_OK)
                iql_set_error(r, "reading the fleet tables failed: %s", bdb_strerror(rc));
        }
        /* sort by group, then time: a group's points are one run */
        size_t *gstart = iql_xmalloc((ng + 2) * sizeof *gstart);
        pt *sorted = iql_xmalloc((np + 1) * sizeof *sorted);
        memset(gstart, 0, (ng + 2) * sizeof *gstart);
        for (size_t i = 0; i < np; i++)
            gstart[dg[p[i].dev] + 1]++;
        for (size_t g = 0; g < ng; g++)
            gstart[g + 1] += gstart[g];
        {
            size_t *pos = iql_xmalloc((ng + 1) * sizeof *pos);
            memcpy(pos, gstart, (ng + 1) * sizeof *pos);
            for (size_t i = 0; i < np; i++)
                sorted[pos[dg[p[i].dev]]++] = p[i];
            free(pos);
        }
        for (size_t g = 0; g < ng; g++)
            qsort(sorted + gstart[g], gstart[g + 1] - gstart[g], sizeof *sorted, cmp_pt);
        /* groups in key order */
        size_t *gorder = iql_xmalloc((ng + 1) * sizeof *gorder);
        for (size_t g = 0; g < ng; g++)
            gorder[g] = g;
        for (size_t a = 1; a < ng; a++) /* insertion sort: few groups, stable */
            for (size_t b = a; b > 0 && strcmp(gr[gorder[b - 1]].key, gr[gorder[b]].key) > 0; b--) {
                size_t t = gorder[b];
                gorder[b] = gorder[b - 1];
                gorder[b - 1] = t;
            }
        double *scratch = iql_xmalloc((np + 1) * sizeof *scratch);
        pt *fp = iql_xmalloc((np + 1) * sizeof *fp);
        for (size_t go = 0; go < ng && nk && !s.over && !r->error; go++) {
            size_t g = gorder[go];
            const pt *gp = sorted + gstart[g];
            size_t gn = gstart[g + 1] - gstart[g];
            int has_tier = tier && ta.seen[g];
            if (!gn && !has_tier)
                continue;
            iql_series *se = iql_add_series(r, m->name, nk + 1);
            se->cols[0] = "time";
            for (size_t i = 0; i < nk; i++)
                se->cols[i + 1] = k[i].name;
            if (gt.n) {
                se->ntags = gt.n;
                se->tagk = iql_xmalloc(gt.n * sizeof *se->tagk);
                se->tagv = iql_xmalloc(gt.n * sizeof *se->tagv);
                const dev *d = &c.d[md[gr[g].first]];
                for (size_t t = 0; t < gt.n; t++) {
                    const char *v = iql_dev_tag(&c, d, gt.v[t]);
                    se->tagk[t] = iql_ostr(r, gt.v[t]);
                    se->tagv[t] = iql_ostr(r, v ? v : "");
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
                                row[q + 1] = gp[j].s ? (iql_val){.t = IQL_V_STR, .s = gp[j].s}
                                                     : (iql_val){.t = IQL_V_NUM, .num = gp[j].v};
                                any = 1;
                            }
                    for (size_t q = 0; q < nk; q++)
                        if (k[q].is_tag) {
                            const char *v = iql_dev_tag(&c, &c.d[md[gp[i].dev]], k[q].field);
                            if (v)
                                row[q + 1] = (iql_val){.t = IQL_V_STR, .s = iql_ostr(r, v)};
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
                int trc = iql_tier_rows(st, &ta, g, k, nk, se);
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
                    lo = iql_floor_div(first - off, every) * every + off;
                    hi = iql_floor_div(s.to - 1 - off, every) * every + off;
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
            iql_apply_limits(se, st->limit, st->offset);
            if (!se->nrows) {
                iql_series_free(se);
                r->nseries--;
            }
        }
        free(scratch);
        free(fp);
        free(gorder);
        free(sorted);
        free(gstart);
        free(p);
        if (tier)
            iql_tier_acc_free(&ta);
        if (retry) {
            /* a percentile the sketches cannot give at InfluxDB's rank: raw after all */
            while (r->nseries > first_series)
                iql_series_free(&r->series[--r->nseries]);
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
    iql_cat_free(&c);
    if (used) { /* what answered, coarsest last: "raw", "1m,1h", "fleet" ... */
        static const char *const names[] = {"raw", "1m", "1h", "1d", "fleet"};
        char buf[32] = "";
        for (int i = 0; i < 5; i++)
            if (used & (1u << i)) {
                if (*buf)
                    strcat(buf, ",");
                strcat(buf, names[i]);
            }
        r->tier = iql_ostr(r, buf);
    }
    if (s.over) {
        for (size_t i = 0; i < r->nseries; i++)
            iql_series_free(&r->series[i]);
        r->nseries = 0;
        iql_set_error(r,
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
            iql_series_free(&r->series[i]);
        memmove(r->series, r->series + off_s, (r->nseries - off_s) * sizeof *r->series);
        r->nseries -= off_s;
        if (st->slimit && (size_t)st->slimit < r->nseries) {
            for (size_t i = (size_t)st->slimit; i < r->nseries; i++)
                iql_series_free(&r->series[i]);
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
    return iql_exec_show(c, st, out);
}
