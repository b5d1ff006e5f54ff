/* pql_eval: step-wise evaluation. Every node yields a value for all steps at once
 * (a scalar: one number per step; a vector: series with a number and a presence flag
 * per step), so a selector is read from the source once per query, not per step. */
#include "query/promql/pql_eval.h"

#include "query/promql/pql_binop.h"
#include "query/promql/pql_func.h"

#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- labels ---- */

static int label_cmp(const void *a, const void *b)
{
    return strcmp(((const pql_label *)a)->name, ((const pql_label *)b)->name);
}

void pql_labels_free(pql_labels *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].name);
        free(l->v[i].value);
    }
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* Copies the pairs of v[0..n) that keep() accepts (NULL: all), sorted, without empty
 * values. 0 or -1 out of memory. */
static int labels_copy(pql_labels *out, const pql_label *v, size_t n,
                       int (*keep)(const void *ctx, const char *name), const void *ctx)
{
    out->n = 0;
    out->v = calloc(n ? n : 1, sizeof *out->v);
    if (!out->v)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (!v[i].value[0] || (keep && !keep(ctx, v[i].name)))
            continue;
        pql_label *d = &out->v[out->n];
        d->name = strdup(v[i].name);
        d->value = strdup(v[i].value);
        out->n++;
        if (!d->name || !d->value) {
            pql_labels_free(out);
            return -1;
        }
    }
    qsort(out->v, out->n, sizeof *out->v, label_cmp);
    return 0;
}

int pql_labels_cmp(const pql_labels *a, const pql_labels *b)
{
    for (size_t i = 0; i < a->n && i < b->n; i++) {
        int c = strcmp(a->v[i].name, b->v[i].name);
        if (c)
            return c;
        if ((c = strcmp(a->v[i].value, b->v[i].value)))
            return c;
    }
    return a->n < b->n ? -1 : a->n > b->n;
}

static int not_name(const void *ctx, const char *name)
{
    (void)ctx;
    return strcmp(name, "__name__") != 0;
}

/* ---- series from the source ---- */

long pql_series_add(pql_series_set *set, const pql_label *labels, size_t n)
{
    if (set->n == set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 16;
        pql_series *s = realloc(set->s, cap * sizeof *s);
        if (!s)
            return -1;
        set->s = s;
        set->cap = cap;
    }
    pql_series *s = &set->s[set->n];
    memset(s, 0, sizeof *s);
    if (labels_copy(&s->labels, labels, n, NULL, NULL) != 0)
        return -1;
    return (long)set->n++;
}

int pql_series_push(pql_series_set *set, size_t idx, int64_t ts, double v)
{
    if (set->max_samples && set->samples >= set->max_samples)
        return -2;
    pql_series *s = &set->s[idx];
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        int64_t *t = realloc(s->ts, cap * sizeof *t);
        if (!t)
            return -1;
        s->ts = t;
        double *d = realloc(s->v, cap * sizeof *d);
        if (!d)
            return -1;
        s->v = d;
        s->cap = cap;
    }
    s->ts[s->n] = ts;
    s->v[s->n] = v;
    s->n++;
    set->samples++;
    return 0;
}

int pql_series_push_window(pql_series_set *set, size_t idx, const pql_window *w)
{
    if (set->max_samples && set->samples >= set->max_samples)
        return -2;
    pql_series *s = &set->s[idx];
    if (s->nw == s->wcap) {
        size_t cap = s->wcap ? s->wcap * 2 : 16;
        pql_window *v = realloc(s->w, cap * sizeof *v);
        if (!v)
            return -1;
        s->w = v;
        s->wcap = cap;
    }
    s->w[s->nw++] = *w;
    set->samples++;
    return 0;
}

int pql_series_add_windows(pql_series_set *set, size_t idx, size_t n, pql_window **out)
{
    if (set->max_samples && (n > set->max_samples || set->samples > set->max_samples - n))
        return -2;
    pql_series *s = &set->s[idx];
    if (n > s->wcap - s->nw) {
        size_t cap = s->wcap ? s->wcap * 2 : 16;
        if (cap < s->nw + n)
            cap = s->nw + n;
        pql_window *v = realloc(s->w, cap * sizeof *v);
        if (!v)
            return -1;
        s->w = v;
        s->wcap = cap;
    }
    *out = s->w + s->nw;
    s->nw += n;
    set->samples += n;
    return 0;
}

void pql_series_set_free(pql_series_set *set)
{
    for (size_t i = 0; i < set->n; i++) {
        pql_labels_free(&set->s[i].labels);
        free(set->s[i].ts);
        free(set->s[i].v);
        free(set->s[i].w);
    }
    free(set->s);
    memset(set, 0, sizeof *set);
}

/* ---- matchers ---- */

struct pql_matchset {
    const pql_node *sel;
    regex_t *re; /* one per matcher; used for =~ and !~ */
};

/* glibc's regcomp takes memory exponential in stacked repetitions ("a++++...") and its
 * matcher time exponential with back-references: refuse both, as RE2 (Prometheus'
 * engine) refuses nested repetition, and bound the repetition counts as RE2 does.
 * NULL when the pattern is acceptable, else why not. */
#define PQL_RE_MAX_REPEAT 1000
#define PQL_RE_MAX_QUANTIFIERS 64
static const char *re_check(const char *re)
{
    int prev_quant = 0, nq = 0;
    for (const char *p = re; *p; p++) {
        int quant = 0;
        if (*p == '\\') {
            if (p[1] >= '1' && p[1] <= '9')
                return "back-references are not supported";
            if (p[1])
                p++;
        } else if (*p == '[') { /* a bracket expression: ']' first is a member */
            const char *q = p + 1;
            if (*q == '^')
                q++;
            if (*q == ']')
                q++;
            while (*q && *q != ']') {
                if (*q == '[' && (q[1] == ':' || q[1] == '.' || q[1] == '=')) {
                    const char *e = strchr(q + 2, q[1]);
                    q = e && e[1] == ']' ? e + 1 : q;
                }
                q++;
            }
            if (!*q)
                return "unterminated bracket expression";
            p = q;
        } else if (*p == '*' || *p == '+' || *p == '?') {
            quant = 1;
        } else if (*p == '{') {
            char *end;
            long lo = strtol(p + 1, &end, 10), hi = lo;
            if (end == p + 1)
                return "invalid repetition count";
            if (*end == ',') {
                const char *h = end + 1;
                hi = *h == '}' ? lo : strtol(h, &end, 10);
                if (*h == '}')
                    end = (char *)h;
            }
            if (*end != '}' || lo < 0 || hi < lo || hi > PQL_RE_MAX_REPEAT)
                return "invalid repetition count (at most 1000)";
            quant = 1;
            p = end;
        }
        if (quant && prev_quant)
            return "invalid nested repetition operator";
        if (quant && ++nq > PQL_RE_MAX_QUANTIFIERS)
            return "more than 64 repetition operators";
        prev_quant = quant;
    }
    return NULL;
}

static int is_re(const pql_matcher *x)
{
    return x->op == PQL_M_RE || x->op == PQL_M_NRE;
}

/* Frees m with the expressions of its first `compiled` matchers. */
static void matchset_release(pql_matchset *m, size_t compiled)
{
    for (size_t j = 0; j < compiled; j++)
        if (is_re(&m->sel->matchers[j]))
            regfree(&m->re[j]);
    free(m->re);
    free(m);
}

int pql_matchset_compile(const pql_node *sel, pql_matchset **out, char *err, size_t errlen)
{
    pql_matchset *m = calloc(1, sizeof *m);
    if (!m || !(m->re = calloc(sel->nmatchers ? sel->nmatchers : 1, sizeof *m->re))) {
        free(m);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    m->sel = sel;
    for (size_t i = 0; i < sel->nmatchers; i++) {
        const pql_matcher *x = &sel->matchers[i];
        if (!is_re(x))
            continue;
        char why[128];
        const char *bad = re_check(x->value);
        /* Prometheus anchors a label regex at both ends */
        size_t n = strlen(x->value) + 5;
        char *pat = bad ? NULL : malloc(n);
        int rc = -1;
        if (pat) {
            snprintf(pat, n, "^(%s)$", x->value);
            rc = regcomp(&m->re[i], pat, REG_EXTENDED | REG_NOSUB);
            free(pat);
            if (rc != 0) {
                regerror(rc, &m->re[i], why, sizeof why);
                bad = why;
            }
        } else if (!bad) {
            bad = "out of memory";
        }
        if (rc != 0) {
            snprintf(err, errlen,
                     "invalid regular expression \"%.200s\" for label %.100s: %s (POSIX "
                     "extended syntax)",
                     x->value, x->name, bad);
            matchset_release(m, i);
            return -1;
        }
    }
    *out = m;
    return 0;
}

const char *pql_matchset_equal(const pql_matchset *m, const char *name)
{
    for (size_t i = 0; i < m->sel->nmatchers; i++) {
        const pql_matcher *x = &m->sel->matchers[i];
        if (x->op == PQL_M_EQ && x->value[0] && !strcmp(x->name, name))
            return x->value;
    }
    return NULL;
}

int pql_matchset_test(const pql_matchset *m, const pql_label *labels, size_t n)
{
    for (size_t i = 0; i < m->sel->nmatchers; i++) {
        const pql_matcher *x = &m->sel->matchers[i];
        const char *v = "";
        for (size_t j = 0; j < n; j++)
            if (!strcmp(labels[j].name, x->name)) {
                v = labels[j].value;
                break;
            }
        int ok;
        switch (x->op) {
        case PQL_M_EQ:
            ok = !strcmp(v, x->value);
            break;
        case PQL_M_NEQ:
            ok = strcmp(v, x->value) != 0;
            break;
        case PQL_M_RE:
            ok = regexec(&m->re[i], v, 0, NULL, 0) == 0;
            break;
        default:
            ok = regexec(&m->re[i], v, 0, NULL, 0) != 0;
            break;
        }
        if (!ok)
            return 0;
    }
    return 1;
}

void pql_matchset_free(pql_matchset *m)
{
    if (m)
        matchset_release(m, m->sel->nmatchers);
}

/* ---- evaluation ---- */

typedef struct val {
    enum pql_type type;
    double *scalar;
    pql_out_series *s;
    size_t n;
} val;

typedef struct ev {
    const pql_source *src;
    const pql_eval_opts *o;
    size_t nsteps;
    uint64_t samples; /* read so far, all selectors */
    uint64_t points;  /* held in vectors */
    int64_t tier_ms;  /* widest tier used */
    int64_t raw_from; /* earliest raw sample time asked for (INT64_MAX: none) */
    char *err;
    size_t errlen;
    int code;
} ev;

static int efail(ev *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int efail(ev *e, int code, const char *fmt, ...)
{
    if (e->code)
        return e->code;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, e->errlen, fmt, ap);
    va_end(ap);
    return code;
}

static int64_t step_t(const ev *e, size_t i)
{
    return e->o->start + (int64_t)i * e->o->step;
}

static void val_free(val *v)
{
    for (size_t i = 0; i < v->n; i++) {
        pql_labels_free(&v->s[i].labels);
        free(v->s[i].v);
        free(v->s[i].has);
    }
    free(v->s);
    free(v->scalar);
    memset(v, 0, sizeof *v);
}

/* Room for n vector series of nsteps points each (labels left empty). */
static int vec_alloc(ev *e, val *v, size_t n)
{
    v->type = PQL_VECTOR;
    v->n = 0;
    e->points += (uint64_t)n * e->nsteps;
    if (e->o->max_points && e->points > e->o->max_points)
        return efail(e, PQL_E_EXECUTION,
                     "query would hold more than %llu points (series x steps) at once; narrow "
                     "the selector or the range, or raise the step",
                     (unsigned long long)e->o->max_points);
    v->s = calloc(n ? n : 1, sizeof *v->s);
    if (!v->s)
        return efail(e, PQL_E_INTERNAL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        v->s[i].v = calloc(e->nsteps, sizeof(double));
        v->s[i].has = calloc(e->nsteps, 1);
        v->n = i + 1;
        if (!v->s[i].v || !v->s[i].has)
            return efail(e, PQL_E_INTERNAL, "out of memory");
    }
    return 0;
}

static int fetch(ev *e, const pql_node *sel, int64_t back, pql_series_set *set)
{
    pql_matchset *m;
    char why[400];
    if (pql_matchset_compile(sel, &m, why, sizeof why) != 0)
        return efail(e, PQL_E_BAD_DATA, "%s", why);
    int64_t from = e->o->start - sel->offset_ms - back;
    int64_t to = step_t(e, e->nsteps - 1) - sel->offset_ms;
    memset(set, 0, sizeof *set);
    if (e->o->max_samples)
        set->max_samples = e->samples >= e->o->max_samples ? 1 : e->o->max_samples - e->samples;
    if (from < e->raw_from)
        e->raw_from = from;
    int rc = e->src->select(e->src->ctx, m, from, to, set, why, sizeof why);
    pql_matchset_free(m);
    e->samples += set->samples;
    if (rc == PQL_E_EXECUTION && e->o->max_samples && e->samples >= e->o->max_samples &&
        set->max_samples < e->o->max_samples) {
        /* the source named what was left for this selector; the limit is the query's */
        pql_series_set_free(set);
        return efail(e, rc,
                     "query processing would load too many samples into memory in query "
                     "execution (more than max-query-samples %llu, over all the query's "
                     "selectors); narrow the selectors or the range",
                     (unsigned long long)e->o->max_samples);
    }
    if (rc != PQL_E_OK) {
        pql_series_set_free(set);
        return efail(e, rc, "%s", why);
    }
    return 0;
}

static int eval_selector(ev *e, const pql_node *n, val *out)
{
    pql_series_set set;
    if (fetch(e, n, PQL_LOOKBACK_MS, &set) != 0)
        return e->code;
    if (vec_alloc(e, out, set.n) != 0) {
        pql_series_set_free(&set);
        return e->code;
    }
    for (size_t i = 0; i < set.n; i++) {
        const pql_series *s = &set.s[i];
        pql_out_series *o = &out->s[i];
        o->labels = s->labels;
        memset((void *)&set.s[i].labels, 0, sizeof set.s[i].labels);
        size_t j = 0;
        for (size_t k = 0; k < e->nsteps; k++) {
            int64_t ref = step_t(e, k) - n->offset_ms;
            while (j < s->n && s->ts[j] <= ref)
                j++;
            if (j > 0 && s->ts[j - 1] >= ref - PQL_LOOKBACK_MS) {
                o->v[k] = s->v[j - 1];
                o->has[k] = 1;
            }
        }
    }
    pql_series_set_free(&set);
    return 0;
}

static int eval(ev *e, const pql_node *n, val *out);

/* The tier width a range function can be answered from exactly (0: raw): the
 * function is computable from window statistics, and the window, the step, the
 * evaluation times and the offset are all multiples of the width, so each step's
 * window is a whole number of tier windows. quantile_over_time qualifies only over
 * one window and for the quantiles a window keeps (0.5, 0.95, 0.99). */
static int64_t tier_width(const ev *e, const pql_node *n)
{
    const pql_node *sel = n->args[n->nargs - 1];
    if (!e->src->select_windows || e->o->no_tiers)
        return 0;
    int quant = n->func == PQL_F_QUANTILE_OT;
    if (quant) {
        const pql_node *p = n->args[0];
        if (p->kind != PQL_NUMBER || (p->num != 0.5 && p->num != 0.95 && p->num != 0.99))
            return 0;
    } else if (n->func != PQL_F_AVG_OT && n->func != PQL_F_MIN_OT && n->func != PQL_F_MAX_OT &&
               n->func != PQL_F_SUM_OT && n->func != PQL_F_COUNT_OT) {
        return 0;
    }
    static const int64_t widths[] = PQL_TIER_WIDTHS;
    int64_t start = e->o->part ? e->o->part_start : e->o->start;
    int many = e->o->part || e->nsteps > 1;
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
        int64_t w = widths[i];
        if (sel->range_ms % w || start % w || sel->offset_ms % w || (many && e->o->step % w) ||
            (quant && sel->range_ms != w))
            continue;
        return w;
    }
    return 0;
}

static int eval_call_tier(ev *e, const pql_node *n, int64_t w, val *out)
{
    const pql_node *sel = n->args[n->nargs - 1];
    int quant = n->func == PQL_F_QUANTILE_OT;
    pql_matchset *m;
    char why[400];
    if (pql_matchset_compile(sel, &m, why, sizeof why) != 0)
        return efail(e, PQL_E_BAD_DATA, "%s", why);
    pql_series_set set;
    memset(&set, 0, sizeof set);
    if (e->o->max_samples)
        set.max_samples = e->samples >= e->o->max_samples ? 1 : e->o->max_samples - e->samples;
    int64_t from = e->o->start - sel->offset_ms - sel->range_ms;
    int64_t to = step_t(e, e->nsteps - 1) - sel->offset_ms;
    int64_t cover = e->o->part ? e->o->part_start - sel->offset_ms - sel->range_ms : from;
    int rc = e->src->select_windows(e->src->ctx, m, from, to, cover < from ? cover : from, w, quant,
                                    &set, why, sizeof why);
    pql_matchset_free(m);
    if (rc == PQL_E_NO_TIER) {
        pql_series_set_free(&set);
        return PQL_E_NO_TIER;
    }
    e->samples += set.samples;
    if (rc != PQL_E_OK) {
        pql_series_set_free(&set);
        return efail(e, rc, "%s", why);
    }
    if (w > e->tier_ms)
        e->tier_ms = w;
    if (vec_alloc(e, out, set.n) != 0) {
        pql_series_set_free(&set);
        return e->code;
    }
    for (size_t i = 0; i < set.n && !e->code; i++) {
        const pql_series *s = &set.s[i];
        pql_out_series *o = &out->s[i];
        if (labels_copy(&o->labels, s->labels.v, s->labels.n, not_name, NULL)) {
            efail(e, PQL_E_INTERNAL, "out of memory");
            break;
        }
        size_t lo = 0, hi = 0;
        for (size_t k = 0; k < e->nsteps; k++) {
            /* the windows starting in [t - range, t): the step's window but for a
             * sample exactly at t, which belongs to the next tier window */
            int64_t end = step_t(e, k) - sel->offset_ms, start = end - sel->range_ms;
            while (lo < s->nw && s->w[lo].start < start)
                lo++;
            if (hi < lo)
                hi = lo;
            while (hi < s->nw && s->w[hi].start < end)
                hi++;
            uint64_t cnt = 0;
            double sum = 0, mn = NAN, mx = NAN;
            for (size_t j = lo; j < hi; j++) {
                const pql_window *x = &s->w[j];
                if (!x->count)
                    continue;
                cnt += x->count;
                sum += x->sum;
                if (isnan(mn) || x->min < mn)
                    mn = x->min;
                if (isnan(mx) || x->max > mx)
                    mx = x->max;
            }
            if (!cnt)
                continue;
            double v;
            switch (n->func) {
            case PQL_F_AVG_OT:
                v = sum / (double)cnt;
                break;
            case PQL_F_MIN_OT:
                v = mn;
                break;
            case PQL_F_MAX_OT:
                v = mx;
                break;
            case PQL_F_SUM_OT:
                v = sum;
                break;
            case PQL_F_COUNT_OT:
                v = (double)cnt;
                break;
            default: { /* one window: tier_width saw to it */
                double phi = n->args[0]->num;
                const pql_window *x = &s->w[lo];
                v = phi == 0.5 ? x->p50 : phi == 0.95 ? x->p95 : x->p99;
            }
            }
            o->v[k] = v;
            o->has[k] = 1;
        }
    }
    pql_series_set_free(&set);
    return e->code;
}

static int eval_call(ev *e, const pql_node *n, val *out)
{
    int64_t w = tier_width(e, n);
    if (w && eval_call_tier(e, n, w, out) != PQL_E_NO_TIER)
        return e->code;
    val phi = {0};
    const pql_node *sel = n->args[n->nargs - 1];
    if (n->func == PQL_F_QUANTILE_OT && eval(e, n->args[0], &phi) != 0)
        return e->code;
    pql_series_set set;
    if (fetch(e, sel, sel->range_ms, &set) != 0) {
        val_free(&phi);
        return e->code;
    }
    if (vec_alloc(e, out, set.n) != 0) {
        pql_series_set_free(&set);
        val_free(&phi);
        return e->code;
    }
    double *scratch = NULL;
    int keep_name = n->func == PQL_F_LAST_OT;
    for (size_t i = 0; i < set.n && !e->code; i++) {
        const pql_series *s = &set.s[i];
        pql_out_series *o = &out->s[i];
        if (labels_copy(&o->labels, s->labels.v, s->labels.n, keep_name ? NULL : not_name, NULL)) {
            efail(e, PQL_E_INTERNAL, "out of memory");
            break;
        }
        size_t lo = 0, hi = 0;
        for (size_t k = 0; k < e->nsteps; k++) {
            int64_t end = step_t(e, k) - sel->offset_ms, start = end - sel->range_ms;
            while (lo < s->n && s->ts[lo] < start)
                lo++;
            if (hi < lo)
                hi = lo;
            while (hi < s->n && s->ts[hi] <= end)
                hi++;
            size_t cnt = hi - lo;
            if (!cnt)
                continue;
            switch (n->func) {
            case PQL_F_RATE:
            case PQL_F_INCREASE:
                if (cnt < 2)
                    continue;
                o->v[k] = pql_extrapolated_rate(s->ts + lo, s->v + lo, cnt, start, end,
                                                n->func == PQL_F_RATE);
                break;
            case PQL_F_QUANTILE_OT:
                if (!scratch && !(scratch = malloc(s->n * sizeof *scratch))) {
                    efail(e, PQL_E_INTERNAL, "out of memory");
                    continue;
                }
                memcpy(scratch, s->v + lo, cnt * sizeof *scratch);
                o->v[k] = pql_quantile(phi.scalar[k], scratch, cnt);
                break;
            default:
                o->v[k] = pql_over_time(n->func, s->v + lo, cnt);
            }
            o->has[k] = 1;
        }
        free(scratch);
        scratch = NULL;
    }
    pql_series_set_free(&set);
    val_free(&phi);
    return e->code;
}

struct grp {
    pql_labels key;
    size_t idx;
};

static int grp_cmp(const void *a, const void *b)
{
    const struct grp *x = a, *y = b;
    int c = pql_labels_cmp(&x->key, &y->key);
    return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

struct keep_ctx {
    const pql_node *n;
};

static int keep_grouping(const void *ctx, const char *name)
{
    const pql_node *n = ((const struct keep_ctx *)ctx)->n;
    int listed = 0;
    for (size_t i = 0; i < n->ngrouping && !listed; i++)
        listed = !strcmp(n->grouping[i], name);
    if (n->without)
        return !listed && strcmp(name, "__name__") != 0;
    return listed;
}

static int eval_agg(ev *e, const pql_node *n, val *out)
{
    val in = {0};
    if (eval(e, n->args[0], &in) != 0)
        return e->code;
    struct grp *g = calloc(in.n ? in.n : 1, sizeof *g);
    if (!g) {
        val_free(&in);
        return efail(e, PQL_E_INTERNAL, "out of memory");
    }
    struct keep_ctx kc = {n};
    size_t ng = 0;
    for (size_t i = 0; i < in.n; i++, ng++) {
        g[i].idx = i;
        if (labels_copy(&g[i].key, in.s[i].labels.v, in.s[i].labels.n, keep_grouping, &kc)) {
            efail(e, PQL_E_INTERNAL, "out of memory");
            break;
        }
    }
    qsort(g, ng, sizeof *g, grp_cmp);
    size_t groups = 0;
    for (size_t i = 0; i < ng; i++)
        if (!i || pql_labels_cmp(&g[i].key, &g[i - 1].key))
            groups++;
    if (!e->code && vec_alloc(e, out, groups) == 0) {
        size_t gi = 0;
        for (size_t i = 0; i < ng; gi++) {
            size_t j = i;
            while (j < ng && !pql_labels_cmp(&g[j].key, &g[i].key))
                j++;
            pql_out_series *o = &out->s[gi];
            o->labels = g[i].key;
            g[i].key = (pql_labels){0};
            for (size_t k = 0; k < e->nsteps; k++) {
                double acc = 0;
                size_t cnt = 0;
                for (size_t m = i; m < j; m++) {
                    const pql_out_series *s = &in.s[g[m].idx];
                    if (!s->has[k])
                        continue;
                    double x = s->v[k];
                    if (!cnt++) {
                        acc = x;
                        continue;
                    }
                    switch (n->agg) {
                    case PQL_A_SUM:
                    case PQL_A_AVG:
                        acc += x;
                        break;
                    case PQL_A_MIN:
                        if (x < acc || isnan(acc))
                            acc = x;
                        break;
                    case PQL_A_MAX:
                        if (x > acc || isnan(acc))
                            acc = x;
                        break;
                    case PQL_A_COUNT:
                        break;
                    }
                }
                if (!cnt)
                    continue;
                if (n->agg == PQL_A_AVG)
                    acc /= (double)cnt;
                else if (n->agg == PQL_A_COUNT)
                    acc = (double)cnt;
                o->v[k] = acc;
                o->has[k] = 1;
            }
            i = j;
        }
    }
    for (size_t i = 0; i < ng; i++)
        pql_labels_free(&g[i].key);
    free(g);
    val_free(&in);
    return e->code;
}

static int scalar_alloc(ev *e, val *v)
{
    v->type = PQL_SCALAR;
    v->scalar = calloc(e->nsteps, sizeof(double));
    return v->scalar ? 0 : efail(e, PQL_E_INTERNAL, "out of memory");
}

/* vector op vector (pql_binop.h): the result replaces both operands */
static int eval_vv(ev *e, const pql_node *n, val *a, val *b, val *out)
{
    pql_out_series *s;
    size_t ns;
    int rc = pql_vector_binop(n, a->s, a->n, b->s, b->n, e->nsteps, &e->points, e->o->max_points,
                              &s, &ns, e->err, e->errlen);
    if (rc != PQL_E_OK)
        return e->code = rc;
    out->type = PQL_VECTOR;
    out->s = s;
    out->n = ns;
    return 0;
}

/* scalar op scalar, vector op scalar, scalar op vector, -vector: as Prometheus, a
 * comparison keeps the vector's value (or answers 0/1 with bool), and arithmetic
 * and bool drop the metric name. */
static int eval_binary(ev *e, const pql_node *n, val *out)
{
    val a = {0}, b = {0};
    if (eval(e, n->args[0], &a) != 0 || (n->kind == PQL_BINARY && eval(e, n->args[1], &b) != 0)) {
        val_free(&a);
        val_free(&b);
        return e->code;
    }
    if (a.type == PQL_VECTOR && b.type == PQL_VECTOR) {
        eval_vv(e, n, &a, &b, out);
        goto done;
    }
    if (n->kind == PQL_NEG) { /* the operand moves right, as in 0 - x */
        b = a;
        a = (val){0};
        if (scalar_alloc(e, &a) != 0)
            goto done;
    }
    enum pql_binop op = n->kind == PQL_NEG ? PQL_B_SUB : n->op;
    int keep, bool_mod = n->kind == PQL_BINARY && n->bool_mod;
    if (a.type == PQL_SCALAR && b.type == PQL_SCALAR) {
        for (size_t k = 0; k < e->nsteps; k++) {
            double x = n->kind == PQL_NEG ? -b.scalar[k]
                                          : pql_binop_value(op, a.scalar[k], b.scalar[k], &keep);
            a.scalar[k] = bool_mod ? keep : x;
        }
        *out = a;
        a = (val){0};
        goto done;
    }
    int vec_left = a.type == PQL_VECTOR, cmp = pql_binop_is_cmp(op);
    val *v = vec_left ? &a : &b, *s = vec_left ? &b : &a;
    for (size_t i = 0; i < v->n; i++) {
        pql_out_series *o = &v->s[i];
        if (!cmp || bool_mod) {
            pql_labels l;
            if (labels_copy(&l, o->labels.v, o->labels.n, not_name, NULL) != 0) {
                efail(e, PQL_E_INTERNAL, "out of memory");
                goto done;
            }
            pql_labels_free(&o->labels);
            o->labels = l;
        }
        for (size_t k = 0; k < e->nsteps; k++) {
            if (!o->has[k])
                continue;
            if (n->kind == PQL_NEG) {
                o->v[k] = -o->v[k];
                continue;
            }
            double x = vec_left ? pql_binop_value(op, o->v[k], s->scalar[k], &keep)
                                : pql_binop_value(op, s->scalar[k], o->v[k], &keep);
            if (cmp && !vec_left)
                x = o->v[k];
            if (bool_mod)
                o->v[k] = keep;
            else if (keep)
                o->v[k] = x;
            else
                o->has[k] = 0;
        }
    }
    *out = *v;
    *v = (val){0};
done:
    val_free(&a);
    val_free(&b);
    return e->code;
}

static int idx_cmp_ctx_labels(const void *a, const void *b, void *ctx)
{
    const pql_out_series *s = ctx;
    return pql_labels_cmp(&s[*(const size_t *)a].labels, &s[*(const size_t *)b].labels);
}

/* Series with the same labels are one series to Prometheus: they merge when present
 * at different steps (a function or arithmetic dropping __name__ from series told
 * apart by it, x or x offset 5m), and are refused, as by Prometheus, when two have a
 * value at one step. */
static int merge_same_labels(ev *e, val *v)
{
    if (v->type != PQL_VECTOR || v->n < 2)
        return 0;
    size_t *ix = malloc(v->n * sizeof *ix);
    if (!ix)
        return efail(e, PQL_E_INTERNAL, "out of memory");
    for (size_t i = 0; i < v->n; i++)
        ix[i] = i;
    qsort_r(ix, v->n, sizeof *ix, idx_cmp_ctx_labels, v->s);
    int dup = 0, merged = 0;
    for (size_t i = 1; i < v->n && !dup; i++) {
        pql_out_series *a = &v->s[ix[i - 1]], *b = &v->s[ix[i]];
        if (pql_labels_cmp(&a->labels, &b->labels))
            continue;
        for (size_t k = 0; k < e->nsteps && !dup; k++)
            dup = a->has[k] && b->has[k];
        for (size_t k = 0; k < e->nsteps && !dup; k++)
            if (a->has[k]) { /* b, the survivor of the run, takes a's points */
                b->v[k] = a->v[k];
                b->has[k] = 1;
                a->has[k] = 0;
            }
        merged = 1;
    }
    free(ix);
    if (dup)
        return efail(e, PQL_E_EXECUTION, "vector cannot contain metrics with the same labelset");
    if (merged) { /* a series emptied by the merge is dropped with the empty ones */
        size_t k = 0;
        for (size_t i = 0; i < v->n; i++) {
            int any = 0;
            for (size_t j = 0; j < e->nsteps && !any; j++)
                any = v->s[i].has[j];
            if (any)
                v->s[k++] = v->s[i];
            else {
                pql_labels_free(&v->s[i].labels);
                free(v->s[i].v);
                free(v->s[i].has);
            }
        }
        v->n = k;
    }
    return 0;
}

static int eval_node(ev *e, const pql_node *n, val *out)
{
    switch (n->kind) {
    case PQL_NUMBER:
        if (scalar_alloc(e, out) != 0)
            return e->code;
        for (size_t k = 0; k < e->nsteps; k++)
            out->scalar[k] = n->num;
        return 0;
    case PQL_SELECTOR:
        if (n->range_ms)
            return efail(e, PQL_E_BAD_DATA,
                         "a range vector is only accepted as a function "
                         "argument here");
        return eval_selector(e, n, out);
    case PQL_CALL:
        return eval_call(e, n, out) || merge_same_labels(e, out);
    case PQL_AGG:
        return eval_agg(e, n, out);
    case PQL_BINARY:
    case PQL_NEG:
        return eval_binary(e, n, out) || merge_same_labels(e, out);
    case PQL_STRING:
        break;
    }
    return efail(e, PQL_E_BAD_DATA, "string literals are not accepted here");
}

/* On failure out holds nothing: every caller may just return. */
static int eval(ev *e, const pql_node *n, val *out)
{
    memset(out, 0, sizeof *out);
    if (eval_node(e, n, out) != 0)
        val_free(out);
    return e->code;
}

static int out_cmp(const void *a, const void *b)
{
    return pql_labels_cmp(&((const pql_out_series *)a)->labels,
                          &((const pql_out_series *)b)->labels);
}

static int raw_cmp(const void *a, const void *b)
{
    return pql_labels_cmp(&((const pql_series *)a)->labels, &((const pql_series *)b)->labels);
}

int pql_eval(const pql_node *expr, const pql_source *src, const pql_eval_opts *o, pql_result *res,
             char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    ev e = {src, o, 0, o->part_samples, 0, 0, INT64_MAX, err, errlen, 0};
    if (o->step <= 0 || o->end < o->start)
        return efail(&e, PQL_E_BAD_DATA, "invalid evaluation range");
    uint64_t steps = (uint64_t)((o->end - o->start) / o->step) + 1;
    if (steps > PQL_MAX_STEPS + 1)
        return efail(&e, PQL_E_BAD_DATA,
                     "exceeded maximum resolution of 11,000 points per timeseries. Try "
                     "decreasing the query resolution (?step=XX)");
    e.nsteps = (size_t)steps;
    res->start = o->start;
    res->step = o->step;
    res->nsteps = e.nsteps;
    if (expr->type == PQL_MATRIX) {
        /* only an instant query shows raw samples */
        if (e.nsteps != 1)
            return efail(&e, PQL_E_BAD_DATA,
                         "invalid expression type \"range vector\" for range query, must be "
                         "Scalar or instant Vector");
        res->type = PQL_MATRIX;
        if (fetch(&e, expr, expr->range_ms, &res->raw) != 0)
            return e.code;
        size_t k = 0;
        for (size_t i = 0; i < res->raw.n; i++)
            if (res->raw.s[i].n)
                res->raw.s[k++] = res->raw.s[i];
            else {
                pql_labels_free(&res->raw.s[i].labels);
                free(res->raw.s[i].ts);
                free(res->raw.s[i].v);
            }
        res->raw.n = k;
        if (res->raw.n)
            qsort(res->raw.s, res->raw.n, sizeof *res->raw.s, raw_cmp);
        return 0;
    }
    val v;
    if (eval(&e, expr, &v) != 0)
        return e.code;
    res->type = v.type;
    res->scalar = v.scalar;
    /* series without any point are not part of the answer */
    size_t k = 0;
    for (size_t i = 0; i < v.n; i++) {
        int any = 0;
        for (size_t j = 0; j < e.nsteps && !any; j++)
            any = v.s[i].has[j];
        if (any)
            v.s[k++] = v.s[i];
        else {
            pql_labels_free(&v.s[i].labels);
            free(v.s[i].v);
            free(v.s[i].has);
        }
    }
    if (k) /* a scalar has no series array */
        qsort(v.s, k, sizeof *v.s, out_cmp);
    res->s = v.s;
    res->n = k;
    res->tier_ms = e.tier_ms;
    res->samples = e.samples;
    res->raw_from = e.raw_from;
    return 0;
}

void pql_result_free(pql_result *r)
{
    for (size_t i = 0; i < r->n; i++) {
        pql_labels_free(&r->s[i].labels);
        free(r->s[i].v);
        free(r->s[i].has);
    }
    free(r->s);
    free(r->scalar);
    pql_series_set_free(&r->raw);
    memset(r, 0, sizeof *r);
}
