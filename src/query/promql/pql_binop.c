/* pql_binop: vector matching. Series are matched by their signature (the labels
 * on() lists, or all but the ignored ones and __name__); signatures are fixed per
 * series, so they are grouped once, and each step then pairs the present series of
 * each group as Prometheus pairs the samples of one evaluation step. A many-to-one
 * result's labels depend on the pair, so every possible pair gets its label set
 * once, and pairs with equal labels share one output series. */
#include "query/promql/pql_binop.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double pql_binop_value(enum pql_binop op, double a, double b, int *keep)
{
    *keep = 1;
    switch (op) {
    case PQL_B_ADD:
        return a + b;
    case PQL_B_SUB:
        return a - b;
    case PQL_B_MUL:
        return a * b;
    case PQL_B_DIV:
        return a / b;
    case PQL_B_MOD:
        return fmod(a, b);
    case PQL_B_POW:
        return pow(a, b);
    case PQL_B_EQ:
        *keep = a == b;
        break;
    case PQL_B_NE:
        *keep = a != b;
        break;
    case PQL_B_GT:
        *keep = a > b;
        break;
    case PQL_B_LT:
        *keep = a < b;
        break;
    case PQL_B_GE:
        *keep = a >= b;
        break;
    case PQL_B_LE:
        *keep = a <= b;
        break;
    default:
        break;
    }
    return a;
}

/* ---- labels ---- */

static int listed(char *const *v, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(v[i], name))
            return 1;
    return 0;
}

static const char *lget(const pql_labels *l, const char *name)
{
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->v[i].name, name))
            return l->v[i].value;
    return "";
}

/* The matching signature of src: pointers into src (free only key->v). */
static int sig_of(const pql_node *n, const pql_labels *src, pql_labels *key)
{
    key->n = 0;
    key->v = malloc((src->n ? src->n : 1) * sizeof *key->v);
    if (!key->v)
        return -1;
    for (size_t i = 0; i < src->n; i++) {
        const char *name = src->v[i].name;
        int in = listed(n->match, n->nmatch, name);
        if (n->on ? in : !in && strcmp(name, "__name__") != 0)
            key->v[key->n++] = src->v[i];
    }
    return 0;
}

static int push_label(pql_labels *out, const char *name, const char *value)
{
    pql_label *d = &out->v[out->n];
    d->name = strdup(name);
    d->value = strdup(value);
    out->n++;
    return d->name && d->value ? 0 : -1;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(((const pql_label *)a)->name, ((const pql_label *)b)->name);
}

static int labels_dup(const pql_labels *src, pql_labels *out)
{
    out->n = 0;
    if (!(out->v = calloc(src->n ? src->n : 1, sizeof *out->v)))
        return -1;
    for (size_t i = 0; i < src->n; i++)
        if (push_label(out, src->v[i].name, src->v[i].value) != 0)
            return -1;
    return 0;
}

/* The labels of the result of m (the "many" or the left side) with o, in
 * Prometheus' order of steps: __name__ goes for arithmetic; one-to-one keeps the
 * on() labels or drops the ignored ones; group_x(include) labels come from o (or
 * go when o lacks them); bool drops __name__ at last. */
static int result_labels(const pql_node *n, const pql_labels *m, const pql_labels *o,
                         pql_labels *out)
{
    out->n = 0;
    if (!(out->v = calloc(m->n + n->ninclude + 1, sizeof *out->v)))
        return -1;
    int arith = !pql_binop_is_cmp(n->op);
    for (size_t i = 0; i < m->n; i++) {
        const char *name = m->v[i].name;
        int is_name = !strcmp(name, "__name__");
        if ((is_name && (arith || n->bool_mod)) || listed(n->include, n->ninclude, name))
            continue;
        if (n->card == PQL_CARD_ONE_TO_ONE &&
            (n->on ? !listed(n->match, n->nmatch, name) : listed(n->match, n->nmatch, name)))
            continue;
        if (push_label(out, name, m->v[i].value) != 0)
            return -1;
    }
    for (size_t i = 0; i < n->ninclude; i++) {
        const char *name = n->include[i], *v = lget(o, name);
        if (!*v || listed(n->include, i, name) || (n->bool_mod && !strcmp(name, "__name__")))
            continue;
        if (push_label(out, name, v) != 0)
            return -1;
    }
    qsort(out->v, out->n, sizeof *out->v, name_cmp);
    return 0;
}

/* Appends l as Prometheus prints a label set: {a="x", b="y"}, values Go-quoted. */
static void put_labels(char *buf, size_t cap, const pql_labels *l)
{
    size_t n = strlen(buf);
#define PUT(...)                                                                                   \
    do {                                                                                           \
        if (n < cap) {                                                                             \
            int w_ = snprintf(buf + n, cap - n, __VA_ARGS__);                                      \
            n += w_ > 0 ? (size_t)w_ : 0;                                                          \
        }                                                                                          \
    } while (0)
    PUT("{");
    for (size_t i = 0; i < l->n; i++) {
        PUT("%s%s=\"", i ? ", " : "", l->v[i].name);
        for (const unsigned char *c = (const unsigned char *)l->v[i].value; *c; c++) {
            if (*c == '"' || *c == '\\')
                PUT("\\%c", *c);
            else if (*c == '\n')
                PUT("\\n");
            else if (*c == '\t')
                PUT("\\t");
            else if (*c < 0x20 || *c == 0x7f)
                PUT("\\x%02x", *c);
            else
                PUT("%c", *c);
        }
        PUT("\"");
    }
    PUT("}");
#undef PUT
}

/* ---- matching ---- */

typedef struct bctx {
    const pql_node *n;
    size_t nsteps;
    uint64_t *points, max_points;
    char *err;
    size_t errlen;
    int code;
} bctx;

static int bfail(bctx *b, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bfail(bctx *b, int code, const char *fmt, ...)
{
    if (b->code)
        return b->code;
    b->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err, b->errlen, fmt, ap);
    va_end(ap);
    return code;
}

/* n result series of nsteps points, counted against the point limit */
static int alloc_out(bctx *b, size_t n, pql_out_series **out, size_t *nout)
{
    *b->points += (uint64_t)n * b->nsteps;
    if (b->max_points && *b->points > b->max_points)
        return bfail(b, PQL_E_EXECUTION,
                     "query would hold more than %llu points (series x steps) at once; narrow "
                     "the selector or the range, or raise the step",
                     (unsigned long long)b->max_points);
    if (!(*out = calloc(n ? n : 1, sizeof **out)))
        return bfail(b, PQL_E_INTERNAL, "out of memory");
    *nout = n;
    for (size_t i = 0; i < n; i++) {
        (*out)[i].v = calloc(b->nsteps, sizeof(double));
        (*out)[i].has = calloc(b->nsteps, 1);
        if (!(*out)[i].v || !(*out)[i].has)
            return bfail(b, PQL_E_INTERNAL, "out of memory");
    }
    return 0;
}

static void free_out(pql_out_series *s, size_t n)
{
    for (size_t i = 0; s && i < n; i++) {
        pql_labels_free(&s[i].labels);
        free(s[i].v);
        free(s[i].has);
    }
    free(s);
}

struct ent {
    pql_labels key;
    size_t idx; /* into the concatenation left, right */
};

static int ent_cmp(const void *a, const void *b)
{
    return pql_labels_cmp(&((const struct ent *)a)->key, &((const struct ent *)b)->key);
}

/* group[i] for i < nl: l[i]'s signature's number, group[nl + j]: r[j]'s; equal
 * signatures, equal numbers. *ng: how many. */
static int group_by_sig(bctx *b, const pql_out_series *l, size_t nl, const pql_out_series *r,
                        size_t nr, size_t *group, size_t *ng)
{
    size_t nt = nl + nr;
    struct ent *e = calloc(nt ? nt : 1, sizeof *e);
    if (!e)
        return bfail(b, PQL_E_INTERNAL, "out of memory");
    size_t made = 0;
    for (; made < nt; made++) {
        e[made].idx = made;
        const pql_labels *src = made < nl ? &l[made].labels : &r[made - nl].labels;
        if (sig_of(b->n, src, &e[made].key) != 0)
            break;
    }
    if (made == nt) {
        qsort(e, nt, sizeof *e, ent_cmp);
        *ng = 0;
        for (size_t i = 0; i < nt; i++) {
            if (!i || pql_labels_cmp(&e[i].key, &e[i - 1].key))
                (*ng)++;
            group[e[i].idx] = *ng - 1;
        }
    }
    for (size_t i = 0; i < made; i++)
        free(e[i].key.v);
    free(e);
    return made == nt ? 0 : bfail(b, PQL_E_INTERNAL, "out of memory");
}

static int set_op(bctx *b, const pql_out_series *l, size_t nl, const pql_out_series *r, size_t nr,
                  const size_t *group, size_t ng, pql_out_series **out, size_t *nout)
{
    enum pql_binop op = b->n->op;
    size_t nres = op == PQL_B_OR ? nl + nr : nl;
    size_t *lseen = calloc(ng ? ng : 1, sizeof *lseen), *rseen = calloc(ng ? ng : 1, sizeof *rseen);
    if (!lseen || !rseen) {
        bfail(b, PQL_E_INTERNAL, "out of memory");
        goto done;
    }
    if (alloc_out(b, nres, out, nout) != 0)
        goto done;
    for (size_t i = 0; i < nres; i++)
        if (labels_dup(i < nl ? &l[i].labels : &r[i - nl].labels, &(*out)[i].labels) != 0) {
            bfail(b, PQL_E_INTERNAL, "out of memory");
            goto done;
        }
    for (size_t k = 0; k < b->nsteps; k++) { /* seen[g] == k + 1: present at step k */
        for (size_t i = 0; i < nl; i++)
            if (l[i].has[k])
                lseen[group[i]] = k + 1;
        for (size_t j = 0; j < nr; j++)
            if (r[j].has[k])
                rseen[group[nl + j]] = k + 1;
        for (size_t i = 0; i < nl; i++) {
            int matched = rseen[group[i]] == k + 1;
            if (l[i].has[k] && (op == PQL_B_OR || (op == PQL_B_AND) == matched)) {
                (*out)[i].v[k] = l[i].v[k];
                (*out)[i].has[k] = 1;
            }
        }
        for (size_t j = 0; op == PQL_B_OR && j < nr; j++)
            if (r[j].has[k] && lseen[group[nl + j]] != k + 1) {
                (*out)[nl + j].v[k] = r[j].v[k];
                (*out)[nl + j].has[k] = 1;
            }
    }
done:
    free(lseen);
    free(rseen);
    return b->code;
}

typedef struct side {
    const pql_out_series *s;
    size_t n;
    const size_t *group;
} side;

static int labels_idx_cmp(const void *a, const void *b, void *ctx)
{
    const pql_out_series *s = ctx;
    return pql_labels_cmp(&s[*(const size_t *)a].labels, &s[*(const size_t *)b].labels);
}

struct pair_ref {
    const pql_labels *l;
    size_t p;
};

static int pair_cmp(const void *a, const void *b)
{
    return pql_labels_cmp(((const struct pair_ref *)a)->l, ((const struct pair_ref *)b)->l);
}

/* The many-to-many refusal: o[j] and o[prev] share a signature at one step. */
static int dup_error(bctx *b, const side *o, size_t j, size_t prev)
{
    char msg[1024] = "";
    pql_labels key;
    if (sig_of(b->n, &o->s[j].labels, &key) != 0)
        return bfail(b, PQL_E_INTERNAL, "out of memory");
    put_labels(msg, sizeof msg, &key);
    free(key.v);
    char a[512] = "", c[512] = "";
    put_labels(a, sizeof a, &o->s[j].labels);
    put_labels(c, sizeof c, &o->s[prev].labels);
    return bfail(b, PQL_E_EXECUTION,
                 "found duplicate series for the match group %s on the %s hand-side of the "
                 "operation: [%s, %s];many-to-many matching not allowed: matching labels must "
                 "be unique on one side",
                 msg, b->n->card == PQL_CARD_ONE_TO_MANY ? "left" : "right", a, c);
}

/* Arithmetic and comparisons: one-to-one, or many-to-one with m the "many" side
 * (group_right swaps the sides, and the operands back for the operator). */
static int match_op(bctx *b, const side *m, const side *o, size_t ng, pql_out_series **out,
                    size_t *nout)
{
    const pql_node *n = b->n;
    int swapped = n->card == PQL_CARD_ONE_TO_MANY;
    size_t *ostart = calloc(ng + 1, sizeof *ostart), *opos = calloc(o->n + 1, sizeof *opos);
    size_t *omem = calloc(o->n + 1, sizeof *omem), *oord = calloc(o->n + 1, sizeof *oord);
    size_t *pbase = calloc(m->n + 1, sizeof *pbase), *seen = calloc(ng + 1, sizeof *seen);
    size_t *first = calloc(ng + 1, sizeof *first), *mseen = calloc(ng + 1, sizeof *mseen);
    pql_labels *pl = NULL;
    size_t *pid = NULL, *idseen = NULL, npairs = 0, nid = 0;
    struct pair_ref *ref = NULL;
    if (!ostart || !opos || !omem || !oord || !pbase || !seen || !first || !mseen) {
        bfail(b, PQL_E_INTERNAL, "out of memory");
        goto done;
    }
    /* the "one" side in label order (the order Prometheus finds duplicates in), and
     * its members per group: omem[ostart[g] ..) */
    for (size_t j = 0; j < o->n; j++)
        oord[j] = j;
    if (o->n)
        qsort_r(oord, o->n, sizeof *oord, labels_idx_cmp, (void *)o->s);
    for (size_t j = 0; j < o->n; j++)
        ostart[o->group[j] + 1]++;
    for (size_t g = 0; g < ng; g++)
        ostart[g + 1] += ostart[g];
    for (size_t x = 0; x < o->n; x++) {
        size_t j = oord[x], g = o->group[j];
        opos[j] = first[g]++; /* first[] counts here; reused below */
        omem[ostart[g] + opos[j]] = j;
    }
    for (size_t i = 0; i < m->n; i++) {
        size_t g = m->group[i];
        pbase[i] = npairs;
        npairs += ostart[g + 1] - ostart[g];
    }
    /* every pair that may match holds a label set: bounded even without a point
     * limit, since a group of the "one" side whose series take turns pairs with every
     * series of the other side */
    uint64_t cap = b->max_points ? b->max_points : PQL_BINOP_MAX_PAIRS;
    if (*b->points + npairs > cap) {
        bfail(b, PQL_E_EXECUTION,
              "query would hold more than %llu points (series x steps, and the pairs of "
              "series vector matching can pair) at once; narrow the selector or the range, "
              "or raise the step",
              (unsigned long long)cap);
        goto done;
    }
    pl = calloc(npairs + 1, sizeof *pl);
    pid = calloc(npairs + 1, sizeof *pid);
    ref = calloc(npairs + 1, sizeof *ref);
    if (!pl || !pid || !ref) {
        bfail(b, PQL_E_INTERNAL, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < m->n; i++) {
        size_t g = m->group[i];
        for (size_t t = 0; t < ostart[g + 1] - ostart[g]; t++) {
            size_t p = pbase[i] + t;
            if (result_labels(n, &m->s[i].labels, &o->s[omem[ostart[g] + t]].labels, &pl[p])) {
                bfail(b, PQL_E_INTERNAL, "out of memory");
                goto done;
            }
            ref[p] = (struct pair_ref){&pl[p], p};
        }
    }
    qsort(ref, npairs, sizeof *ref, pair_cmp);
    for (size_t x = 0; x < npairs; x++) {
        if (x && pql_labels_cmp(ref[x].l, ref[x - 1].l))
            nid++;
        pid[ref[x].p] = nid;
    }
    nid = npairs ? nid + 1 : 0;
    if (alloc_out(b, nid, out, nout) != 0 || !(idseen = calloc(nid + 1, sizeof *idseen))) {
        bfail(b, PQL_E_INTERNAL, "out of memory");
        goto done;
    }
    for (size_t x = 0; x < npairs; x++) {
        pql_labels *dst = &(*out)[pid[ref[x].p]].labels;
        if (!dst->v) {
            *dst = pl[ref[x].p];
            pl[ref[x].p] = (pql_labels){0};
        }
    }
    for (size_t k = 0; k < b->nsteps && !b->code; k++) { /* seen marks: k + 1 */
        int any_m = 0, any_o = 0;
        for (size_t i = 0; i < m->n && !any_m; i++)
            any_m = m->s[i].has[k];
        for (size_t j = 0; j < o->n && !any_o; j++)
            any_o = o->s[j].has[k];
        if (!any_m || !any_o) /* nothing can match: Prometheus checks nothing either */
            continue;
        for (size_t x = 0; x < o->n; x++) {
            size_t j = oord[x], g = o->group[j];
            if (!o->s[j].has[k])
                continue;
            if (seen[g] == k + 1) {
                dup_error(b, o, j, first[g]);
                goto done;
            }
            seen[g] = k + 1;
            first[g] = j;
        }
        for (size_t i = 0; i < m->n; i++) {
            size_t g = m->group[i];
            if (!m->s[i].has[k] || seen[g] != k + 1)
                continue;
            size_t j = first[g];
            double vl = m->s[i].v[k], vr = o->s[j].v[k];
            if (swapped) {
                double t = vl;
                vl = vr;
                vr = t;
            }
            int keep;
            double v = pql_binop_value(n->op, vl, vr, &keep);
            if (n->bool_mod)
                v = keep;
            else if (!keep)
                continue;
            size_t id = pid[pbase[i] + opos[j]];
            if (n->card == PQL_CARD_ONE_TO_ONE && mseen[g] == k + 1) {
                bfail(b, PQL_E_EXECUTION,
                      "multiple matches for labels: many-to-one matching must be explicit "
                      "(group_left/group_right)");
                goto done;
            }
            mseen[g] = k + 1;
            if (idseen[id] == k + 1) {
                bfail(b, PQL_E_EXECUTION,
                      n->card == PQL_CARD_ONE_TO_ONE
                          ? "vector cannot contain metrics with the same labelset"
                          : "multiple matches for labels: grouping labels must ensure unique "
                            "matches");
                goto done;
            }
            idseen[id] = k + 1;
            (*out)[id].v[k] = v;
            (*out)[id].has[k] = 1;
        }
    }
done:
    for (size_t p = 0; pl && p < npairs; p++)
        pql_labels_free(&pl[p]);
    free(pl);
    free(pid);
    free(ref);
    free(idseen);
    free(ostart);
    free(opos);
    free(omem);
    free(oord);
    free(pbase);
    free(seen);
    free(first);
    free(mseen);
    return b->code;
}

int pql_vector_binop(const pql_node *n, const pql_out_series *l, size_t nl, const pql_out_series *r,
                     size_t nr, size_t nsteps, uint64_t *points, uint64_t max_points,
                     pql_out_series **out, size_t *nout, char *err, size_t errlen)
{
    bctx b = {n, nsteps, points, max_points, err, errlen, 0};
    *out = NULL;
    *nout = 0;
    size_t *group = calloc(nl + nr + 1, sizeof *group), ng = 0;
    if (!group)
        return bfail(&b, PQL_E_INTERNAL, "out of memory");
    if (group_by_sig(&b, l, nl, r, nr, group, &ng) == 0) {
        if (pql_binop_is_set(n->op)) {
            set_op(&b, l, nl, r, nr, group, ng, out, nout);
        } else {
            side ls = {l, nl, group}, rs = {r, nr, group + nl};
            int swapped = n->card == PQL_CARD_ONE_TO_MANY;
            match_op(&b, swapped ? &rs : &ls, swapped ? &ls : &rs, ng, out, nout);
        }
    }
    free(group);
    if (b.code) {
        free_out(*out, *nout);
        *out = NULL;
        *nout = 0;
    }
    return b.code;
}
