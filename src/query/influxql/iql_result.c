/* iql_result: the result series a statement answers with, and string lists. */
#include "query/influxql/iql_int.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct own {
    struct own *next;
    char s[];
} own;

void *iql_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        abort(); /* the server's policy on allocation failure (docs/RELIABILITY.md) */
    return p;
}

void *iql_xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        abort();
    return p;
}

char *iql_xstrdup(const char *s)
{
    size_t n = strlen(s);
    char *p = iql_xmalloc(n + 1);
    memcpy(p, s, n + 1);
    return p;
}

const char *iql_ostr(iql_result *r, const char *s)
{
    size_t n = strlen(s);
    own *o = iql_xmalloc(sizeof *o + n + 1);
    memcpy(o->s, s, n + 1);
    o->next = r->owned;
    r->owned = o;
    return o->s;
}

void iql_set_error(iql_result *r, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    free(r->error);
    r->error = iql_xstrdup(msg);
}

iql_series *iql_add_series(iql_result *r, const char *name, size_t ncols)
{
    if (r->nseries == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 8;
        r->series = iql_xrealloc(r->series, r->cap * sizeof *r->series);
    }
    iql_series *s = &r->series[r->nseries++];
    memset(s, 0, sizeof *s);
    s->name = name ? iql_ostr(r, name) : NULL;
    s->ncols = ncols;
    s->cols = iql_xmalloc(ncols * sizeof *s->cols);
    return s;
}

iql_val *iql_series_add_row(iql_series *s)
{
    if (s->nrows == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->vals = iql_xrealloc(s->vals, s->cap * s->ncols * sizeof *s->vals);
    }
    iql_val *v = &s->vals[s->nrows++ * s->ncols];
    memset(v, 0, s->ncols * sizeof *v);
    return v;
}

void iql_series_free(iql_series *s)
{
    free(s->cols);
    free(s->vals);
    free(s->tagk);
    free(s->tagv);
}

void iql_result_free(iql_result *r)
{
    for (size_t i = 0; i < r->nseries; i++)
        iql_series_free(&r->series[i]);
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

void iql_strv_push(strv *s, const char *x)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 8;
        s->v = iql_xrealloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = x;
}

static int cmp_strp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void iql_strv_sort_unique(strv *s)
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

int iql_strv_has(const strv *s, const char *x)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->v[i], x))
            return 1;
    return 0;
}

void iql_apply_limits(iql_series *s, int64_t limit, int64_t offset)
{
    size_t off = (size_t)offset < s->nrows ? (size_t)offset : s->nrows;
    size_t n = s->nrows - off;
    if (limit > 0 && (size_t)limit < n)
        n = (size_t)limit;
    if (off)
        memmove(s->vals, s->vals + off * s->ncols, n * s->ncols * sizeof *s->vals);
    s->nrows = n;
}
