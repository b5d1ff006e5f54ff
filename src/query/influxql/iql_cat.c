/* iql_cat: the catalog a statement reads: the tenant's devices with their tags, and
 * the measurements and fields their metrics make (m.f: measurement m, field f). */
#include "query/influxql/iql_int.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void split_metric(const char *m, char **meas_out, char **field_out)
{
    const char *dot = strchr(m, '.');
    if (dot && dot > m && dot[1]) {
        size_t n = (size_t)(dot - m);
        *meas_out = iql_xmalloc(n + 1);
        memcpy(*meas_out, m, n);
        (*meas_out)[n] = 0;
        *field_out = iql_xstrdup(dot + 1);
    } else {
        *meas_out = iql_xstrdup(m);
        *field_out = iql_xstrdup("value");
    }
}

static int cat_cb(void *ctx, const bdb_device_info *di)
{
    cat *c = ctx;
    if (c->nd == c->capd) {
        c->capd = c->capd ? c->capd * 2 : 64;
        c->d = iql_xrealloc(c->d, c->capd * sizeof *c->d);
    }
    dev *d = &c->d[c->nd];
    d->name = iql_xstrdup(di->device);
    d->nt = di->ntags;
    d->tk = iql_xmalloc((di->ntags + 1) * sizeof *d->tk);
    d->tv = iql_xmalloc((di->ntags + 1) * sizeof *d->tv);
    for (size_t i = 0; i < di->ntags; i++) {
        d->tk[i] = iql_xmalloc(di->tags[i].klen + 1);
        memcpy(d->tk[i], di->tags[i].key, di->tags[i].klen);
        d->tk[i][di->tags[i].klen] = 0;
        d->tv[i] = iql_xmalloc(di->tags[i].vlen + 1);
        memcpy(d->tv[i], di->tags[i].val, di->tags[i].vlen);
        d->tv[i][di->tags[i].vlen] = 0;
    }
    for (size_t i = 0; i < di->nmetrics; i++) {
        if (c->nt == c->capt) {
            c->capt = c->capt ? c->capt * 2 : 256;
            c->t = iql_xrealloc(c->t, c->capt * sizeof *c->t);
        }
        trip *t = &c->t[c->nt++];
        split_metric(di->metrics[i], &t->meas, &t->field);
        t->metric = iql_xstrdup(di->metrics[i]);
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

const char *iql_dev_tag(const cat *c, const dev *d, const char *key)
{
    if (!strcmp(key, c->devtag))
        return d->name;
    for (size_t i = 0; i < d->nt; i++)
        if (!strcmp(d->tk[i], key))
            return d->tv[i];
    return NULL;
}

int iql_cat_load(const iql_ctx *x, cat *c)
{
    memset(c, 0, sizeof *c);
    c->devtag = x->device_tag;
    int rc = bdb_db_list_devices(x->db, x->tenant, cat_cb, c);
    if (rc != BDB_OK)
        return rc;
    if (c->nt)
        qsort(c->t, c->nt, sizeof *c->t, cmp_trip);
    /* measurements: runs of equal meas in the sorted triples */
    c->m = iql_xmalloc((c->nt + 1) * sizeof *c->m);
    for (size_t i = 0; i < c->nt;) {
        size_t j = i;
        while (j < c->nt && !strcmp(c->t[j].meas, c->t[i].meas))
            j++;
        meas *m = &c->m[c->nm++];
        memset(m, 0, sizeof *m);
        m->name = c->t[i].meas;
        m->devs = iql_xmalloc((j - i) * sizeof *m->devs);
        m->mf = iql_xmalloc((j - i) * sizeof *m->mf);
        for (size_t k = i; k < j; k++) {
            iql_strv_push(&m->fields, c->t[k].field);
            if (!m->ndevs || m->devs[m->ndevs - 1] != c->t[k].dev)
                m->devs[m->ndevs++] = c->t[k].dev;
            m->mf[m->nmf++] = (mfield){c->t[k].field, c->t[k].metric, c->t[k].dev};
        }
        iql_strv_sort_unique(&m->fields);
        iql_strv_push(&m->tagkeys, c->devtag);
        for (size_t k = 0; k < m->ndevs; k++) {
            const dev *d = &c->d[m->devs[k]];
            for (size_t t = 0; t < d->nt; t++)
                iql_strv_push(&m->tagkeys, d->tk[t]);
        }
        iql_strv_sort_unique(&m->tagkeys);
        i = j;
    }
    return BDB_OK;
}

void iql_cat_free(cat *c)
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

int iql_name_match(const iql_name *n, const char *s)
{
    if (n->kind == IQL_N_WILD)
        return 1;
    if (n->kind == IQL_N_REGEX)
        return regexec(n->re, s, 0, NULL, 0) == 0;
    return !strcmp(n->name, s);
}

int iql_meas_selected(const iql_stmt *st, const meas *m)
{
    if (!st->nfrom)
        return 1;
    for (size_t i = 0; i < st->nfrom; i++)
        if (iql_name_match(&st->from[i], m->name))
            return 1;
    return 0;
}
