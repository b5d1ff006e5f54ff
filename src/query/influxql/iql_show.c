/* iql_show: SHOW statements and CREATE DATABASE. */
#include "query/influxql/iql_int.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void single_col(iql_result *r, const char *name, const char *col, strv *vals,
                       const iql_stmt *st)
{
    if (!vals->n)
        return;
    iql_series *s = iql_add_series(r, name, 1);
    s->cols[0] = col;
    for (size_t i = 0; i < vals->n; i++) {
        iql_val *v = iql_series_add_row(s);
        v->t = IQL_V_STR;
        v->s = iql_ostr(r, vals->v[i]);
    }
    iql_apply_limits(s, st->limit, st->offset);
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

/* A field of SHOW FIELD KEYS: the numeric fields of the catalog, and the string
 * fields the devices' latest attributes name (docs/INFLUX.md). */
typedef struct fkey {
    const char *name, *type;
} fkey;

struct attr_walk {
    const char *meas;
    size_t mlen;
    iql_result *r;
    fkey *v;
    size_t n, cap;
};

static int attr_cb(void *ctx, const bdb_latest *l)
{
    struct attr_walk *w = ctx;
    for (size_t i = 0; i < l->nattrs; i++) {
        const char *a = l->attrs[i].name, *dot = strchr(a, '.'), *field;
        /* measurement and field split as a metric's (iql_cat.c): before and after the
         * first '.', else the whole name and "value" */
        if (dot && dot > a && dot[1]) {
            if ((size_t)(dot - a) != w->mlen || memcmp(a, w->meas, w->mlen) != 0)
                continue;
            field = dot + 1;
        } else {
            if (strcmp(a, w->meas) != 0)
                continue;
            field = "value";
        }
        if (w->n == w->cap) {
            w->cap = w->cap ? w->cap * 2 : 16;
            w->v = iql_xrealloc(w->v, w->cap * sizeof *w->v);
        }
        w->v[w->n++] = (fkey){iql_ostr(w->r, field), "string"};
    }
    return 0;
}

static int fkey_cmp(const void *a, const void *b)
{
    const fkey *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->type, y->type);
}

static void show_field_keys(const iql_ctx *x, const cat *c, const meas *m, const iql_stmt *st,
                            iql_result *r)
{
    struct attr_walk w = {m->name, strlen(m->name), r, NULL, 0, 0};
    for (size_t i = 0; i < m->ndevs; i++) /* a device without attributes: nothing added */
        bdb_db_latest(x->db, x->tenant, c->d[m->devs[i]].name, attr_cb, &w);
    for (size_t i = 0; i < m->fields.n; i++) {
        if (w.n == w.cap) {
            w.cap = w.cap ? w.cap * 2 : 16;
            w.v = iql_xrealloc(w.v, w.cap * sizeof *w.v);
        }
        w.v[w.n++] = (fkey){m->fields.v[i], "float"};
    }
    if (w.n > 1)
        qsort(w.v, w.n, sizeof *w.v, fkey_cmp);
    iql_series *s = iql_add_series(r, m->name, 2);
    s->cols[0] = "fieldKey";
    s->cols[1] = "fieldType";
    for (size_t i = 0; i < w.n; i++) {
        if (i && !fkey_cmp(&w.v[i], &w.v[i - 1]))
            continue; /* the same string field of several devices */
        iql_val *row = iql_series_add_row(s);
        row[0] = (iql_val){.t = IQL_V_STR, .s = iql_ostr(r, w.v[i].name)};
        row[1] = (iql_val){.t = IQL_V_STR, .s = w.v[i].type};
    }
    iql_apply_limits(s, st->limit, st->offset);
    free(w.v);
}

int iql_exec_show(const iql_ctx *x, const iql_stmt *st, iql_result *r)
{
    if (st->kind == IQL_SHOW_DATABASES) {
        strv v = {0};
        for (size_t i = 0; i < x->ndatabases; i++)
            iql_strv_push(&v, x->databases[i]);
        iql_series *s = iql_add_series(r, "databases", 1);
        s->cols[0] = "name";
        for (size_t i = 0; i < v.n; i++) {
            iql_val *val = iql_series_add_row(s);
            val->t = IQL_V_STR;
            val->s = iql_ostr(r, v.v[i]);
        }
        free(v.v);
        return 0;
    }
    if (st->kind == IQL_SHOW_RETENTION_POLICIES) {
        iql_series *s = iql_add_series(r, NULL, 5);
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
    if (iql_cat_load(x, &c) != BDB_OK) {
        iql_cat_free(&c);
        iql_set_error(r, "listing the devices failed");
        return 0;
    }
    unsigned char *ok = iql_xmalloc(c.nd + 1);
    strv all = {0}; /* SHOW MEASUREMENTS, SHOW SERIES: one list over every measurement */
    char **keys = NULL;
    size_t nkeys = 0;
    for (size_t mi = 0; mi < c.nm; mi++) {
        const meas *m = &c.m[mi];
        if (!iql_meas_selected(st, m))
            continue;
        if (iql_match_devs(&c, st, m, ok, r) != 0)
            break;
        strv v = {0};
        switch (st->kind) {
        case IQL_SHOW_MEASUREMENTS:
            for (size_t i = 0; i < m->ndevs; i++)
                if (ok[m->devs[i]]) {
                    iql_strv_push(&all, m->name);
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
                        iql_strv_push(&v, k);
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
                    char *pair = iql_xmalloc(kl + vl + 2);
                    memcpy(pair, k, kl);
                    pair[kl] = '\x1f';
                    memcpy(pair + kl + 1, val, vl + 1);
                    keys = iql_xrealloc(keys, (nkeys + 1) * sizeof *keys);
                    keys[nkeys++] = pair;
                    iql_strv_push(&v, pair);
                }
            }
            iql_strv_sort_unique(&v);
            if (st->kind == IQL_SHOW_TAG_KEYS) {
                single_col(r, m->name, "tagKey", &v, st);
            } else if (v.n) {
                iql_series *s = iql_add_series(r, m->name, 2);
                s->cols[0] = "key";
                s->cols[1] = "value";
                for (size_t i = 0; i < v.n; i++) {
                    iql_val *row = iql_series_add_row(s);
                    char *sep = strchr(v.v[i], '\x1f');
                    *sep = 0;
                    row[0] = (iql_val){.t = IQL_V_STR, .s = iql_ostr(r, v.v[i])};
                    row[1] = (iql_val){.t = IQL_V_STR, .s = iql_ostr(r, sep + 1)};
                    *sep = '\x1f';
                }
                iql_apply_limits(s, st->limit, st->offset);
            }
            break;
        }
        case IQL_SHOW_FIELD_KEYS:
            if (m->fields.n)
                show_field_keys(x, &c, m, st, r);
            break;
        case IQL_SHOW_SERIES:
            for (size_t i = 0; i < m->ndevs; i++) {
                const dev *d = &c.d[m->devs[i]];
                if (!ok[m->devs[i]])
                    continue;
                /* the key's tags in key order: the device's tags and the device tag */
                strv tk = {0};
                for (size_t t = 0; t < d->nt; t++)
                    iql_strv_push(&tk, d->tk[t]);
                iql_strv_push(&tk, c.devtag);
                iql_strv_sort_unique(&tk);
                size_t cap = 64 + strlen(m->name) * 2;
                for (size_t t = 0; t < tk.n; t++)
                    cap += 2 * (strlen(tk.v[t]) + strlen(iql_dev_tag(&c, d, tk.v[t]))) + 2;
                char *key = iql_xmalloc(cap);
                size_t n = 0;
                key_part(key, &n, cap, m->name, 1);
                for (size_t t = 0; t < tk.n; t++) {
                    key[n++] = ',';
                    key_part(key, &n, cap, tk.v[t], 0);
                    key[n++] = '=';
                    key_part(key, &n, cap, iql_dev_tag(&c, d, tk.v[t]), 0);
                }
                key[n] = 0;
                free(tk.v);
                keys = iql_xrealloc(keys, (nkeys + 1) * sizeof *keys);
                keys[nkeys++] = key;
                iql_strv_push(&all, key);
            }
            break;
        default:
            break;
        }
        free(v.v);
    }
    if (!r->error) {
        iql_strv_sort_unique(&all);
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
                iql_series_free(&r->series[i]);
        }
        r->nseries = kept;
    } else {
        for (size_t i = 0; i < r->nseries; i++)
            iql_series_free(&r->series[i]);
        r->nseries = 0;
    }
    for (size_t i = 0; i < nkeys; i++)
        free(keys[i]);
    free(keys);
    free(all.v);
    free(ok);
    iql_cat_free(&c);
    return 0;
}
