/* iql_parse: InfluxQL text -> AST (iql.h): one function per grammar rule over the
 * lexer's one token ahead (iql_lex.c), regexes compiled and bounded here. Errors are InfluxDB's
 * shape so that clients that print them (the influx CLI, Grafana) show something familiar. */
#include "query/influxql/iql_lex.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- helpers ---- */

static int kw(parser *ps, const char *w)
{
    return ps->tk.t == T_IDENT && !strcasecmp(ps->tk.s, w);
}

static int accept_kw(parser *ps, const char *w)
{
    if (!kw(ps, w))
        return 0;
    iql_lex(ps);
    return 1;
}

static int expect_kw(parser *ps, const char *w)
{
    if (accept_kw(ps, w))
        return 0;
    char up[32];
    size_t i = 0;
    for (; w[i] && i < sizeof up - 1; i++)
        up[i] = (char)toupper((unsigned char)w[i]);
    up[i] = 0;
    return iql_expected(ps, up);
}

static int accept(parser *ps, enum tok t)
{
    if (ps->tk.t != t)
        return 0;
    iql_lex(ps);
    return 1;
}

/* Words that end a clause; unquoted they are not taken for names. */
static int reserved(const char *s)
{
    static const char *const w[] = {"select", "from",   "where",  "group",   "by",   "order",
                                    "limit",  "offset", "slimit", "soffset", "fill", "and",
                                    "or",     "as",     "with",   "key",     "on",   "tz",
                                    "show",   "in",     "asc",    "desc"};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        if (!strcasecmp(s, w[i]))
            return 1;
    return 0;
}

static int is_name(parser *ps)
{
    return ps->tk.t == T_QIDENT || (ps->tk.t == T_IDENT && !reserved(ps->tk.s));
}

static const char *take_name(parser *ps, const char *what)
{
    if (!is_name(ps)) {
        iql_expected(ps, what);
        return NULL;
    }
    const char *s = ps->tk.s;
    iql_lex(ps);
    return s;
}

/* glibc's regcomp copies a subexpression for each '+' and {n,m} on it, so stacked or
 * nested repetitions grow exponentially ("a++++..." of 40 '+' asks for terabytes):
 * refuse a repetition directly after another (RE2, InfluxDB's engine, refuses them
 * too) and a product of repetition counts along any nesting above IQL_MAX_REGEX_COPIES.
 * 0, or -1 with why set. */
static int regex_bounded(const char *re, const char **why)
{
    uint64_t cost[IQL_MAX_DEPTH + 1]; /* the costliest path inside each open group */
    int depth = 0, prev_quant = 0;
    uint64_t last = 1; /* cost of the atom just read (a group's: its inside) */
    cost[0] = 1;
    for (const char *p = re; *p; p++) {
        uint64_t f = 0; /* copies a repetition here makes */
        const char *q = p;
        if (*p == '+') {
            f = 2;
        } else if (*p == '*' || *p == '?') {
            f = 1;
        } else if (*p == '{' && p[1] >= '0' && p[1] <= '9') {
            uint64_t lo = 0, hi = 0;
            for (q = p + 1; *q >= '0' && *q <= '9'; q++)
                lo = lo < 100000 ? lo * 10 + (uint64_t)(*q - '0') : lo;
            hi = lo;
            if (*q == ',') {
                hi = 0;
                for (q++; *q >= '0' && *q <= '9'; q++)
                    hi = hi < 100000 ? hi * 10 + (uint64_t)(*q - '0') : hi;
                if (hi < lo)
                    hi = lo;
            }
            if (*q != '}')
                q = p; /* not a repetition: a literal brace */
            else
                f = hi + 1;
        }
        if (f) {
            if (prev_quant) {
                *why = "a repetition directly after another";
                return -1;
            }
            uint64_t c = last * f;
            if (c > IQL_MAX_REGEX_COPIES) {
                *why = "nested repetitions copying a part more than 1000 times";
                return -1;
            }
            if (c > cost[depth])
                cost[depth] = c;
            prev_quant = 1;
            p = q;
            continue;
        }
        prev_quant = 0;
        last = 1;
        if (*p == '\\' && p[1]) {
            p++;
        } else if (*p == '[') { /* a bracket expression: ']' first is a member */
            const char *e = p + 1;
            if (*e == '^')
                e++;
            if (*e == ']')
                e++;
            while (*e && *e != ']')
                e++;
            if (!*e)
                return 0; /* regcomp refuses it */
            p = e;
        } else if (*p == '(') {
            if (depth == IQL_MAX_DEPTH) {
                *why = "groups nested too deep";
                return -1;
            }
            cost[++depth] = 1;
        } else if (*p == ')' && depth > 0) {
            last = cost[depth--];
            if (last > cost[depth])
                cost[depth] = last;
        }
    }
    return 0;
}

static regex_t *compile(parser *ps, const char *src)
{
    const char *refusal = NULL;
    if (strlen(src) > IQL_MAX_REGEX) {
        iql_fail(ps, "regular expression longer than %d bytes", IQL_MAX_REGEX);
        return NULL;
    }
    if (regex_bounded(src, &refusal) != 0) {
        iql_fail(ps, "regular expression /%.100s/ refused: %s", src, refusal);
        return NULL;
    }
    regex_t *re = malloc(sizeof *re);
    if (!re)
        abort();
    /* Grafana's measurement search sends Go's case-insensitive flag: /(?i)text/ */
    int flags = REG_EXTENDED | REG_NOSUB;
    if (!strncmp(src, "(?i)", 4)) {
        flags |= REG_ICASE;
        src += 4;
    }
    int rc = regcomp(re, src, flags);
    if (rc != 0) {
        char why[128];
        regerror(rc, re, why, sizeof why);
        free(re);
        iql_fail(ps, "invalid regular expression /%.100s/: %s", src, why);
        return NULL;
    }
    arena *a = ps->a;
    if (a->nres == a->capres) {
        size_t cap = a->capres ? a->capres * 2 : 8;
        regex_t **v = realloc(a->res, cap * sizeof *v);
        if (!v)
            abort();
        a->res = v;
        a->capres = cap;
    }
    a->res[a->nres++] = re;
    return re;
}

/* A non-negative integer clause value (LIMIT 10), range-checked. */
static int take_count(parser *ps, const char *clause, int64_t *out)
{
    if (ps->tk.t != T_NUM || !ps->tk.isint)
        return iql_expected(ps, "integer");
    if (ps->tk.ival < 0 || ps->tk.ival > IQL_MAX_COUNT)
        return iql_fail(ps, "%s must be 0..%lld", clause, (long long)IQL_MAX_COUNT);
    *out = ps->tk.ival;
    iql_lex(ps);
    return 0;
}

/* Growable list in the arena: doubles when full (the old copy stays until iql_free). */
static void *grow(parser *ps, void *v, size_t n, size_t *cap, size_t size)
{
    if (n < *cap)
        return v;
    size_t nc = *cap ? *cap * 2 : 4;
    void *nv = iql_aalloc(ps->a, nc * size);
    if (n)
        memcpy(nv, v, n * size);
    *cap = nc;
    return nv;
}

/* ---- conditions ---- */

static iql_expr *node(parser *ps, enum iql_ekind k)
{
    iql_expr *e = iql_aalloc(ps->a, sizeof *e);
    e->kind = k;
    return e;
}

static iql_expr *parse_or(parser *ps);

static iql_expr *parse_primary(parser *ps)
{
    token t = ps->tk;
    iql_expr *e;
    switch (t.t) {
    case T_LP:
        /* the only recursion of a condition: bounded, so no input exhausts the stack */
        if (++ps->depth > IQL_MAX_DEPTH) {
            iql_fail(ps, "condition nested more than %d deep", IQL_MAX_DEPTH);
            return NULL;
        }
        iql_lex(ps);
        e = parse_or(ps);
        ps->depth--;
        if (!e)
            return NULL;
        if (!accept(ps, T_RP)) {
            iql_expected(ps, ")");
            return NULL;
        }
        return e;
    case T_IDENT:
        if (!strcasecmp(t.s, "now")) {
            iql_lex(ps);
            if (!accept(ps, T_LP) || !accept(ps, T_RP)) {
                iql_expected(ps, "()");
                return NULL;
            }
            return node(ps, IQL_X_NOW);
        }
        if (!strcasecmp(t.s, "true") || !strcasecmp(t.s, "false")) {
            e = node(ps, IQL_X_BOOL);
            e->ival = !strcasecmp(t.s, "true");
            iql_lex(ps);
            return e;
        }
        if (reserved(t.s)) {
            iql_expected(ps, "identifier, string, number, bool");
            return NULL;
        }
        /* fall through */
    case T_QIDENT:
        e = node(ps, IQL_X_IDENT);
        e->s = t.s;
        iql_lex(ps);
        /* "m"."tag": the last part names the tag */
        while (ps->tk.t == T_DOT) {
            iql_lex(ps);
            if (ps->tk.t != T_IDENT && ps->tk.t != T_QIDENT) {
                iql_expected(ps, "identifier");
                return NULL;
            }
            e->s = ps->tk.s;
            iql_lex(ps);
        }
        /* a type cast such as "value"::field is read and dropped */
        return e;
    case T_STR:
        e = node(ps, IQL_X_STR);
        e->s = t.s;
        iql_lex(ps);
        return e;
    case T_NUM:
        e = node(ps, IQL_X_NUM);
        e->num = t.num;
        e->isint = t.isint;
        e->ival = t.ival;
        iql_lex(ps);
        return e;
    case T_DUR:
        e = node(ps, IQL_X_DUR);
        e->ival = t.ival;
        iql_lex(ps);
        return e;
    case T_REGEX:
        e = node(ps, IQL_X_REGEX);
        e->s = t.s;
        iql_lex(ps);
        if (!(e->re = compile(ps, t.s)))
            return NULL;
        return e;
    case T_OP:
        if (t.op == IQL_SUB) { /* a negative number or duration */
            iql_lex(ps);
            if (ps->tk.t == T_NUM || ps->tk.t == T_DUR) {
                e = parse_primary(ps);
                if (e) {
                    e->num = -e->num;
                    e->ival = -e->ival;
                }
                return e;
            }
        }
        /* fall through */
    default:
        iql_expected(ps, "identifier, string, number, bool");
        return NULL;
    }
}

static iql_expr *parse_additive(parser *ps)
{
    iql_expr *l = parse_primary(ps);
    while (l && ps->tk.t == T_OP && (ps->tk.op == IQL_ADD || ps->tk.op == IQL_SUB)) {
        iql_expr *b = node(ps, IQL_X_BIN);
        b->op = ps->tk.op;
        iql_lex(ps);
        b->l = l;
        if (!(b->r = parse_primary(ps)))
            return NULL;
        l = b;
    }
    return l;
}

static iql_expr *parse_cmp(parser *ps)
{
    iql_expr *l = parse_additive(ps);
    if (l && ps->tk.t == T_OP && ps->tk.op >= IQL_EQ && ps->tk.op <= IQL_GE) {
        iql_expr *b = node(ps, IQL_X_BIN);
        b->op = ps->tk.op;
        iql_lex(ps);
        b->l = l;
        if (!(b->r = parse_additive(ps)))
            return NULL;
        if ((b->op == IQL_RE || b->op == IQL_NRE) && b->r->kind != IQL_X_REGEX) {
            iql_expected(ps, "regular expression");
            return NULL;
        }
        l = b;
    }
    return l;
}

static iql_expr *parse_and(parser *ps)
{
    iql_expr *l = parse_cmp(ps);
    while (l && kw(ps, "and")) {
        iql_lex(ps);
        iql_expr *b = node(ps, IQL_X_BIN);
        b->op = IQL_AND;
        b->l = l;
        if (!(b->r = parse_cmp(ps)))
            return NULL;
        l = b;
    }
    return l;
}

static iql_expr *parse_or(parser *ps)
{
    iql_expr *l = parse_and(ps);
    while (l && kw(ps, "or")) {
        iql_lex(ps);
        iql_expr *b = node(ps, IQL_X_BIN);
        b->op = IQL_OR;
        b->l = l;
        if (!(b->r = parse_and(ps)))
            return NULL;
        l = b;
    }
    return l;
}

/* ---- clauses ---- */

static int parse_where(parser *ps, iql_stmt *st)
{
    if (!accept_kw(ps, "where"))
        return 0;
    st->where = parse_or(ps);
    return st->where ? 0 : -1;
}

/* A measurement: a name, "db"."rp"."m" (the last part counts), or /regex/. */
static int parse_source(parser *ps, iql_name *n)
{
    if (ps->tk.t == T_REGEX) {
        n->kind = IQL_N_REGEX;
        n->name = ps->tk.s;
        iql_lex(ps);
        return (n->re = compile(ps, n->name)) ? 0 : -1;
    }
    const char *s = NULL;
    for (;;) {
        if (ps->tk.t == T_DOT) { /* db..m: an empty retention policy */
            iql_lex(ps);
            continue;
        }
        if (!is_name(ps))
            return iql_expected(ps, "identifier");
        s = ps->tk.s;
        iql_lex(ps);
        if (ps->tk.t != T_DOT)
            break;
        iql_lex(ps);
        if (ps->tk.t == T_REGEX) {
            n->kind = IQL_N_REGEX;
            n->name = ps->tk.s;
            iql_lex(ps);
            return (n->re = compile(ps, n->name)) ? 0 : -1;
        }
    }
    n->kind = IQL_N_NAME;
    n->name = s;
    return 0;
}

static int parse_from(parser *ps, iql_stmt *st, int required)
{
    if (!accept_kw(ps, "from"))
        return required ? iql_expected(ps, "FROM") : 0;
    size_t cap = 0;
    do {
        if (st->nfrom == IQL_MAX_LIST)
            return iql_fail(ps, "more than %d measurements in FROM", IQL_MAX_LIST);
        st->from = grow(ps, st->from, st->nfrom, &cap, sizeof *st->from);
        if (parse_source(ps, &st->from[st->nfrom++]) != 0)
            return -1;
    } while (accept(ps, T_COMMA));
    return 0;
}

static int parse_limits(parser *ps, iql_stmt *st)
{
    if (accept_kw(ps, "limit") && take_count(ps, "LIMIT", &st->limit) != 0)
        return -1;
    if (accept_kw(ps, "offset") && take_count(ps, "OFFSET", &st->offset) != 0)
        return -1;
    if (accept_kw(ps, "slimit") && take_count(ps, "SLIMIT", &st->slimit) != 0)
        return -1;
    if (accept_kw(ps, "soffset") && take_count(ps, "SOFFSET", &st->soffset) != 0)
        return -1;
    return 0;
}

static const struct {
    const char *name;
    enum iql_func f;
} funcs[] = {{"mean", IQL_FN_MEAN},
             {"median", IQL_FN_MEDIAN},
             {"min", IQL_FN_MIN},
             {"max", IQL_FN_MAX},
             {"sum", IQL_FN_SUM},
             {"count", IQL_FN_COUNT},
             {"stddev", IQL_FN_STDDEV},
             {"spread", IQL_FN_SPREAD},
             {"first", IQL_FN_FIRST},
             {"last", IQL_FN_LAST},
             {"percentile", IQL_FN_PERCENTILE}};

const char *iql_func_name(enum iql_func f)
{
    for (size_t i = 0; i < sizeof funcs / sizeof funcs[0]; i++)
        if (funcs[i].f == f)
            return funcs[i].name;
    return "";
}

static int parse_field(parser *ps, iql_field *f)
{
    if (ps->tk.t == T_STAR) {
        f->arg.kind = IQL_N_WILD;
        iql_lex(ps);
        return 0;
    }
    if (ps->tk.t == T_REGEX) {
        f->arg.kind = IQL_N_REGEX;
        f->arg.name = ps->tk.s;
        iql_lex(ps);
        return (f->arg.re = compile(ps, f->arg.name)) ? 0 : -1;
    }
    size_t at = ps->tk.pos;
    int quoted = ps->tk.t == T_QIDENT;
    const char *name = take_name(ps, "identifier, string, number, bool");
    if (!name)
        return -1;
    if (quoted || ps->tk.t != T_LP) {
        f->arg.kind = IQL_N_NAME;
        f->arg.name = name;
        return 0;
    }
    iql_lex(ps); /* ( */
    for (size_t i = 0; i < sizeof funcs / sizeof funcs[0]; i++)
        if (!strcasecmp(funcs[i].name, name))
            f->func = funcs[i].f;
    if (f->func == IQL_FN_NONE) {
        int line, col;
        iql_where_at(ps, at, &line, &col);
        return iql_fail(ps,
                        "undefined function %.64s() at line %d, char %d (bucketdb supports mean, "
                        "median, min, max, sum, count, stddev, spread, first, last, percentile)",
                        name, line, col);
    }
    if (ps->tk.t == T_STAR) {
        f->arg.kind = IQL_N_WILD;
        iql_lex(ps);
    } else if (ps->tk.t == T_REGEX) {
        f->arg.kind = IQL_N_REGEX;
        f->arg.name = ps->tk.s;
        iql_lex(ps);
        if (!(f->arg.re = compile(ps, f->arg.name)))
            return -1;
    } else if (is_name(ps)) {
        f->arg.kind = IQL_N_NAME;
        f->arg.name = ps->tk.s;
        iql_lex(ps);
        if (ps->tk.t == T_LP)
            return iql_fail(ps, "nested function calls such as %.64s(%.64s(...)) are not supported",
                            name, f->arg.name);
    } else {
        return iql_expected(ps, "field key");
    }
    if (f->func == IQL_FN_PERCENTILE) {
        if (!accept(ps, T_COMMA))
            return iql_expected(ps, ",");
        if (ps->tk.t != T_NUM)
            return iql_expected(ps, "number");
        if (!(ps->tk.num >= 0 && ps->tk.num <= 100))
            return iql_fail(ps, "percentile's N must be 0..100");
        f->param = ps->tk.num;
        iql_lex(ps);
    }
    if (!accept(ps, T_RP))
        return iql_expected(ps, ")");
    return 0;
}

static int parse_fields(parser *ps, iql_stmt *st)
{
    size_t cap = 0;
    do {
        if (st->nfields == IQL_MAX_LIST)
            return iql_fail(ps, "more than %d fields in SELECT", IQL_MAX_LIST);
        st->fields = grow(ps, st->fields, st->nfields, &cap, sizeof *st->fields);
        iql_field *f = &st->fields[st->nfields++];
        if (parse_field(ps, f) != 0)
            return -1;
        if (accept_kw(ps, "as") && !(f->alias = take_name(ps, "identifier")))
            return -1;
    } while (accept(ps, T_COMMA));
    int agg = 0, raw = 0;
    for (size_t i = 0; i < st->nfields; i++)
        if (st->fields[i].func)
            agg = 1;
        else
            raw = 1;
    if (agg && raw)
        return iql_fail(ps, "mixing aggregate and non-aggregate queries is not supported");
    return 0;
}

static int parse_group_by(parser *ps, iql_stmt *st)
{
    if (!accept_kw(ps, "group"))
        return 0;
    if (expect_kw(ps, "by") != 0)
        return -1;
    size_t cap = 0;
    do {
        if (kw(ps, "time")) {
            iql_lex(ps);
            if (!accept(ps, T_LP))
                return iql_expected(ps, "(");
            if (ps->tk.t != T_DUR)
                return iql_expected(ps, "duration");
            if (ps->tk.ival <= 0)
                return iql_fail(ps, "GROUP BY time interval must be positive");
            if (st->every_ns)
                return iql_fail(ps, "multiple time dimensions not allowed");
            st->every_ns = ps->tk.ival;
            iql_lex(ps);
            if (accept(ps, T_COMMA)) {
                int neg = ps->tk.t == T_OP && ps->tk.op == IQL_SUB;
                if (neg)
                    iql_lex(ps);
                if (ps->tk.t != T_DUR)
                    return iql_expected(ps, "duration");
                st->offset_ns = neg ? -ps->tk.ival : ps->tk.ival;
                iql_lex(ps);
            }
            if (!accept(ps, T_RP))
                return iql_expected(ps, ")");
        } else if (accept(ps, T_STAR)) {
            st->group_all_tags = 1;
        } else if (ps->tk.t == T_REGEX) {
            return iql_fail(ps, "GROUP BY /regex/ is not supported; name the tags or use *");
        } else {
            const char *t = take_name(ps, "identifier");
            if (!t)
                return -1;
            if (st->ngroup_tags == IQL_MAX_LIST)
                return iql_fail(ps, "more than %d tags in GROUP BY", IQL_MAX_LIST);
            st->group_tags = grow(ps, st->group_tags, st->ngroup_tags, &cap, sizeof(char *));
            st->group_tags[st->ngroup_tags++] = t;
        }
    } while (accept(ps, T_COMMA));
    return 0;
}

static int parse_fill(parser *ps, iql_stmt *st)
{
    if (!kw(ps, "fill"))
        return 0;
    iql_lex(ps);
    if (!accept(ps, T_LP))
        return iql_expected(ps, "(");
    int neg = 0;
    if (accept_kw(ps, "null"))
        st->fill = IQL_FILL_NULL;
    else if (accept_kw(ps, "none"))
        st->fill = IQL_FILL_NONE;
    else if (accept_kw(ps, "previous"))
        st->fill = IQL_FILL_PREVIOUS;
    else if (accept_kw(ps, "linear"))
        st->fill = IQL_FILL_LINEAR;
    else {
        if (ps->tk.t == T_OP && ps->tk.op == IQL_SUB) {
            neg = 1;
            iql_lex(ps);
        }
        if (ps->tk.t != T_NUM)
            return iql_expected(ps, "null, none, previous, linear or a number");
        if (!(fabs(ps->tk.num) <= 1e300))
            return iql_fail(ps, "fill value out of range");
        st->fill = IQL_FILL_VALUE;
        st->fill_value = neg ? -ps->tk.num : ps->tk.num;
        iql_lex(ps);
    }
    if (!accept(ps, T_RP))
        return iql_expected(ps, ")");
    return 0;
}

static int parse_select(parser *ps, iql_stmt *st)
{
    st->kind = IQL_SELECT;
    if (parse_fields(ps, st) != 0)
        return -1;
    if (kw(ps, "into"))
        return iql_fail(ps, "SELECT ... INTO is not supported");
    if (parse_from(ps, st, 1) != 0 || parse_where(ps, st) != 0 || parse_group_by(ps, st) != 0 ||
        parse_fill(ps, st) != 0)
        return -1;
    if (accept_kw(ps, "order")) {
        if (expect_kw(ps, "by") != 0 || expect_kw(ps, "time") != 0)
            return -1;
        if (accept_kw(ps, "desc"))
            st->desc = 1;
        else
            accept_kw(ps, "asc");
    }
    if (parse_limits(ps, st) != 0)
        return -1;
    if (kw(ps, "tz"))
        return iql_fail(ps, "tz() is not supported: bucketdb answers in UTC (drop the tz clause)");
    return 0;
}

static int parse_on(parser *ps, iql_stmt *st)
{
    if (accept_kw(ps, "on") && !(st->on = take_name(ps, "identifier")))
        return -1;
    return 0;
}

static int parse_show(parser *ps, iql_stmt *st)
{
    if (accept_kw(ps, "databases")) {
        st->kind = IQL_SHOW_DATABASES;
        return 0;
    }
    if (accept_kw(ps, "retention")) {
        if (expect_kw(ps, "policies") != 0)
            return -1;
        st->kind = IQL_SHOW_RETENTION_POLICIES;
        return parse_on(ps, st);
    }
    if (accept_kw(ps, "measurements")) {
        st->kind = IQL_SHOW_MEASUREMENTS;
        if (parse_on(ps, st) != 0)
            return -1;
        if (accept_kw(ps, "with")) {
            if (expect_kw(ps, "measurement") != 0)
                return -1;
            if (ps->tk.t != T_OP || (ps->tk.op != IQL_EQ && ps->tk.op != IQL_RE))
                return iql_expected(ps, "= or =~");
            iql_lex(ps);
            st->from = iql_aalloc(ps->a, sizeof *st->from);
            st->nfrom = 1;
            if (parse_source(ps, st->from) != 0)
                return -1;
        }
        return parse_where(ps, st) || parse_limits(ps, st);
    }
    if (accept_kw(ps, "series")) {
        st->kind = IQL_SHOW_SERIES;
        return parse_on(ps, st) || parse_from(ps, st, 0) || parse_where(ps, st) ||
               parse_limits(ps, st);
    }
    if (accept_kw(ps, "field")) {
        st->kind = IQL_SHOW_FIELD_KEYS;
        return expect_kw(ps, "keys") || parse_on(ps, st) || parse_from(ps, st, 0) ||
               parse_limits(ps, st);
    }
    if (!accept_kw(ps, "tag"))
        return iql_expected(ps,
                            "DATABASES, MEASUREMENTS, SERIES, TAG KEYS, TAG VALUES, FIELD KEYS, "
                            "RETENTION POLICIES");
    if (accept_kw(ps, "keys")) {
        st->kind = IQL_SHOW_TAG_KEYS;
        return parse_on(ps, st) || parse_from(ps, st, 0) || parse_where(ps, st) ||
               parse_limits(ps, st);
    }
    if (expect_kw(ps, "values") != 0)
        return -1;
    st->kind = IQL_SHOW_TAG_VALUES;
    if (parse_on(ps, st) || parse_from(ps, st, 0))
        return -1;
    if (expect_kw(ps, "with") != 0 || expect_kw(ps, "key") != 0)
        return -1;
    if (accept_kw(ps, "in")) {
        st->key_in = 1;
        if (!accept(ps, T_LP))
            return iql_expected(ps, "(");
        size_t cap = 0;
        do {
            const char *k = take_name(ps, "identifier");
            if (!k)
                return -1;
            if (st->nkeys == IQL_MAX_LIST)
                return iql_fail(ps, "more than %d keys in WITH KEY IN", IQL_MAX_LIST);
            st->keys = grow(ps, st->keys, st->nkeys, &cap, sizeof(char *));
            st->keys[st->nkeys++] = k;
        } while (accept(ps, T_COMMA));
        if (!accept(ps, T_RP))
            return iql_expected(ps, ")");
    } else {
        if (ps->tk.t != T_OP || (ps->tk.op != IQL_EQ && ps->tk.op != IQL_NE &&
                                 ps->tk.op != IQL_RE && ps->tk.op != IQL_NRE))
            return iql_expected(ps, "=, !=, =~, !~ or IN");
        st->key_op = ps->tk.op;
        iql_lex(ps);
        if (st->key_op == IQL_RE || st->key_op == IQL_NRE) {
            if (ps->tk.t != T_REGEX)
                return iql_expected(ps, "regular expression");
            if (!(st->key_re = compile(ps, ps->tk.s)))
                return -1;
            iql_lex(ps);
        } else {
            const char *k = take_name(ps, "identifier");
            if (!k)
                return -1;
            st->keys = iql_aalloc(ps->a, sizeof(char *));
            st->keys[0] = k;
            st->nkeys = 1;
        }
    }
    return parse_where(ps, st) || parse_limits(ps, st);
}

static int parse_stmt(parser *ps, iql_stmt *st)
{
    if (accept_kw(ps, "select"))
        return parse_select(ps, st);
    if (accept_kw(ps, "show"))
        return parse_show(ps, st);
    if (accept_kw(ps, "create")) {
        if (expect_kw(ps, "database") != 0)
            return -1;
        st->kind = IQL_CREATE_DATABASE;
        if (!(st->on = take_name(ps, "identifier")))
            return -1;
        /* WITH DURATION ... and the like: tenants have their own retention; skip */
        while (ps->tk.t != T_EOF && ps->tk.t != T_SEMI && ps->tk.t != T_BAD)
            iql_lex(ps);
        return 0;
    }
    return iql_expected(ps, "SELECT, SHOW, CREATE");
}

int iql_parse(const char *text, size_t len, iql_query *q, char *err, size_t errlen)
{
    memset(q, 0, sizeof *q);
    arena *a = calloc(1, sizeof *a);
    if (!a)
        abort();
    q->arena = a;
    if (len > IQL_MAX_TEXT) {
        snprintf(err, errlen,
                 "error parsing query: the query is %zu bytes, more than the %d allowed", len,
                 IQL_MAX_TEXT);
        return -1;
    }
    if (memchr(text, 0, len)) {
        snprintf(err, errlen, "error parsing query: the query holds a NUL byte");
        return -1;
    }
    parser ps = {.p = text, .n = len, .a = a, .err = err, .errlen = errlen};
    iql_lex(&ps);
    size_t cap = 0;
    while (ps.tk.t != T_EOF) {
        if (accept(&ps, T_SEMI))
            continue;
        if (q->n == IQL_MAX_STMTS) {
            iql_fail(&ps, "more than %d statements in one query", IQL_MAX_STMTS);
            return -1;
        }
        q->stmts = grow(&ps, q->stmts, q->n, &cap, sizeof *q->stmts);
        iql_stmt *st = &q->stmts[q->n++];
        if (parse_stmt(&ps, st) != 0)
            return -1;
        if (ps.tk.t != T_EOF && ps.tk.t != T_SEMI) {
            iql_expected(&ps, ";");
            return -1;
        }
    }
    if (q->n == 0) {
        snprintf(err, errlen, "error parsing query: empty query");
        return -1;
    }
    return 0;
}

void iql_free(iql_query *q)
{
    if (q->arena)
        iql_arena_free(q->arena);
    memset(q, 0, sizeof *q);
}
