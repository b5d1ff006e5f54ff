/* iql_parse: InfluxQL text -> AST (iql.h). A hand-written lexer that yields one token
 * ahead, and one function per grammar rule. Errors are InfluxDB's shape so that clients
 * that print them (the influx CLI, Grafana) show something familiar. */
#include "query/influxql/iql.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- arena: every node of a query, freed at once ---- */

typedef struct ablock {
    struct ablock *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} ablock;

typedef struct arena {
    ablock *head;
    regex_t **res; /* compiled regexes, for regfree */
    size_t nres, capres;
} arena;

static void *aalloc(arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > 8192 ? n : 8192;
        ablock *b = malloc(sizeof *b + cap);
        if (!b)
            abort(); /* the server's policy on allocation failure (docs/RELIABILITY.md) */
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    memset(p, 0, n);
    return p;
}

static char *astrndup(arena *a, const char *s, size_t n)
{
    char *p = aalloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

static void arena_free(arena *a)
{
    for (size_t i = 0; i < a->nres; i++) {
        regfree(a->res[i]);
        free(a->res[i]);
    }
    free(a->res);
    while (a->head) {
        ablock *n = a->head->next;
        free(a->head);
        a->head = n;
    }
    free(a);
}

/* ---- lexer ---- */

enum tok {
    T_EOF,
    T_IDENT,
    T_QIDENT,
    T_STR,
    T_NUM,
    T_DUR,
    T_REGEX,
    T_OP,
    T_LP,
    T_RP,
    T_COMMA,
    T_SEMI,
    T_DOT,
    T_STAR,
    T_BAD
};

typedef struct token {
    enum tok t;
    size_t pos, len; /* in the text */
    char *s;         /* IDENT, QIDENT, STR, REGEX: decoded text (arena) */
    double num;
    int isint;
    int64_t ival; /* NUM if isint; DUR in ns */
    enum iql_op op;
    const char *bad; /* T_BAD: why */
} token;

typedef struct parser {
    const char *p;
    size_t n, at;
    arena *a;
    token tk; /* the current token */
    int depth;
    char *err;
    size_t errlen;
    int failed;
} parser;

static int unit_ns(const char *u, size_t n, int64_t *ns)
{
    static const struct {
        const char *u;
        int64_t ns;
    } units[] = {{"ns", 1},
                 {"u", 1000},
                 {"\xc2\xb5", 1000},
                 {"ms", 1000000},
                 {"s", 1000000000LL},
                 {"m", 60000000000LL},
                 {"h", 3600000000000LL},
                 {"d", 86400000000000LL},
                 {"w", 604800000000000LL}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strlen(units[i].u) == n && !memcmp(units[i].u, u, n)) {
            *ns = units[i].ns;
            return 0;
        }
    return -1;
}

int iql_parse_duration(const char *s, size_t n, int64_t *ns)
{
    size_t i = 0;
    int64_t total = 0;
    if (!n)
        return -1;
    while (i < n) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        int64_t v = 0;
        while (i < n && isdigit((unsigned char)s[i])) {
            if (v > (INT64_MAX - 9) / 10)
                return -1;
            v = v * 10 + (s[i++] - '0');
        }
        size_t u = i;
        while (i < n && !isdigit((unsigned char)s[i]))
            i++;
        int64_t mul;
        if (unit_ns(s + u, i - u, &mul) != 0 || (v && mul > INT64_MAX / v) ||
            total > INT64_MAX - v * mul)
            return -1;
        total += v * mul;
    }
    *ns = total;
    return 0;
}

static int is_ident_start(int c)
{
    return isalpha(c) || c == '_';
}

static int is_ident_char(int c)
{
    return isalnum(c) || c == '_';
}

/* Reads a quoted run ending at q; backslash escapes the quote and itself. */
static int lex_quoted(parser *ps, token *t, char q)
{
    size_t i = ps->at + 1;
    char *out = aalloc(ps->a, ps->n - ps->at);
    size_t o = 0;
    while (i < ps->n && ps->p[i] != q) {
        if (ps->p[i] == '\n' && q != '/') {
            t->bad = "a newline inside a quoted string";
            return -1;
        }
        if (ps->p[i] == '\\' && i + 1 < ps->n) {
            char nx = ps->p[i + 1];
            if (q == '/') {
                /* a regex keeps its escapes, except the one that hides the delimiter */
                if (nx != '/')
                    out[o++] = '\\';
                out[o++] = nx;
            } else if (nx == 'n') {
                out[o++] = '\n';
            } else {
                out[o++] = nx;
            }
            i += 2;
            continue;
        }
        out[o++] = ps->p[i++];
    }
    if (i >= ps->n) {
        t->bad = q == '/' ? "an unterminated regex" : "an unterminated string";
        return -1;
    }
    out[o] = 0;
    t->s = out;
    ps->at = i + 1;
    return 0;
}

static void lex(parser *ps)
{
    token *t = &ps->tk;
    memset(t, 0, sizeof *t);
    while (ps->at < ps->n && isspace((unsigned char)ps->p[ps->at]))
        ps->at++;
    /* -- comments to the end of the line */
    while (ps->at + 1 < ps->n && ps->p[ps->at] == '-' && ps->p[ps->at + 1] == '-') {
        while (ps->at < ps->n && ps->p[ps->at] != '\n')
            ps->at++;
        while (ps->at < ps->n && isspace((unsigned char)ps->p[ps->at]))
            ps->at++;
    }
    t->pos = ps->at;
    if (ps->at >= ps->n) {
        t->t = T_EOF;
        return;
    }
    const char *p = ps->p;
    size_t i = ps->at;
    unsigned char c = (unsigned char)p[i];
    if (is_ident_start(c)) {
        while (i < ps->n && is_ident_char((unsigned char)p[i]))
            i++;
        t->t = T_IDENT;
        t->s = astrndup(ps->a, p + ps->at, i - ps->at);
        ps->at = i;
    } else if (c == '"' || c == '\'' || c == '/') {
        if (lex_quoted(ps, t, (char)c) != 0) {
            t->t = T_BAD;
            ps->at = ps->n;
        } else {
            t->t = c == '"' ? T_QIDENT : c == '\'' ? T_STR : T_REGEX;
        }
    } else if (isdigit(c) || (c == '.' && i + 1 < ps->n && isdigit((unsigned char)p[i + 1]))) {
        while (i < ps->n && isdigit((unsigned char)p[i]))
            i++;
        int isint = 1;
        if (i < ps->n && p[i] == '.') {
            isint = 0;
            i++;
            while (i < ps->n && isdigit((unsigned char)p[i]))
                i++;
        }
        if (i < ps->n && (p[i] == 'e' || p[i] == 'E') && i + 1 < ps->n &&
            (isdigit((unsigned char)p[i + 1]) ||
             ((p[i + 1] == '+' || p[i + 1] == '-') && i + 2 < ps->n &&
              isdigit((unsigned char)p[i + 2])))) {
            isint = 0;
            i += 2;
            while (i < ps->n && isdigit((unsigned char)p[i]))
                i++;
        }
        size_t end = i;
        /* digits glued to letters: a duration such as 10s, 1h30m or 1699920000000ms */
        while (end < ps->n && (isalnum((unsigned char)p[end]) || (unsigned char)p[end] >= 0x80))
            end++;
        if (end > i) {
            if (!isint || iql_parse_duration(p + ps->at, end - ps->at, &t->ival) != 0) {
                t->t = T_BAD;
                t->bad = "an invalid duration (units ns, u, ms, s, m, h, d, w; at most "
                         "about 292 years)";
                t->len = end - ps->at;
                ps->at = end;
                return;
            }
            t->t = T_DUR;
            ps->at = end;
        } else {
            char tmp[64];
            size_t n = i - ps->at < sizeof tmp - 1 ? i - ps->at : sizeof tmp - 1;
            memcpy(tmp, p + ps->at, n);
            tmp[n] = 0;
            t->t = T_NUM;
            t->num = strtod(tmp, NULL);
            t->isint = isint;
            if (isint) {
                errno = 0;
                long long v = strtoll(tmp, NULL, 10);
                if (errno || i - ps->at >= sizeof tmp - 1) {
                    t->t = T_BAD;
                    t->bad = "an integer out of range";
                }
                t->ival = v;
            }
            ps->at = i;
        }
    } else {
        ps->at = i + 1;
        char c2 = i + 1 < ps->n ? p[i + 1] : 0;
        switch (c) {
        case '(':
            t->t = T_LP;
            break;
        case ')':
            t->t = T_RP;
            break;
        case ',':
            t->t = T_COMMA;
            break;
        case ';':
            t->t = T_SEMI;
            break;
        case '.':
            t->t = T_DOT;
            break;
        case '*':
            t->t = T_STAR;
            break;
        case '+':
            t->t = T_OP;
            t->op = IQL_ADD;
            break;
        case '-':
            t->t = T_OP;
            t->op = IQL_SUB;
            break;
        case '=':
            t->t = T_OP;
            t->op = IQL_EQ;
            if (c2 == '~') {
                t->op = IQL_RE;
                ps->at++;
            }
            break;
        case '!':
            t->t = T_OP;
            if (c2 == '=')
                t->op = IQL_NE;
            else if (c2 == '~')
                t->op = IQL_NRE;
            else
                t->t = T_BAD;
            ps->at++;
            break;
        case '<':
            t->t = T_OP;
            t->op = IQL_LT;
            if (c2 == '=' || c2 == '>') {
                t->op = c2 == '=' ? IQL_LE : IQL_NE;
                ps->at++;
            }
            break;
        case '>':
            t->t = T_OP;
            t->op = IQL_GT;
            if (c2 == '=') {
                t->op = IQL_GE;
                ps->at++;
            }
            break;
        default:
            t->t = T_BAD;
            break;
        }
    }
    t->len = ps->at - t->pos;
}

/* ---- errors ---- */

static void where_at(parser *ps, size_t pos, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < pos && i < ps->n; i++) {
        if (ps->p[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

/* "found X, expected Y at line L, char C", as InfluxDB words it. */
static int expected(parser *ps, const char *what)
{
    if (ps->failed)
        return -1;
    ps->failed = 1;
    int line, col;
    where_at(ps, ps->tk.pos, &line, &col);
    if (ps->tk.t == T_BAD && ps->tk.bad) {
        snprintf(ps->err, ps->errlen, "error parsing query: found %s at line %d, char %d",
                 ps->tk.bad, line, col);
        return -1;
    }
    char found[80];
    if (ps->tk.t == T_EOF)
        snprintf(found, sizeof found, "EOF");
    else
        snprintf(found, sizeof found, "%.*s", (int)(ps->tk.len > 60 ? 60 : ps->tk.len),
                 ps->p + ps->tk.pos);
    snprintf(ps->err, ps->errlen, "error parsing query: found %s, expected %s at line %d, char %d",
             found, what, line, col);
    return -1;
}

static int fail(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(parser *ps, const char *fmt, ...)
{
    if (ps->failed)
        return -1;
    ps->failed = 1;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(ps->err, ps->errlen, "error parsing query: %s", msg);
    return -1;
}

/* ---- helpers ---- */

static int kw(parser *ps, const char *w)
{
    return ps->tk.t == T_IDENT && !strcasecmp(ps->tk.s, w);
}

static int accept_kw(parser *ps, const char *w)
{
    if (!kw(ps, w))
        return 0;
    lex(ps);
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
    return expected(ps, up);
}

static int accept(parser *ps, enum tok t)
{
    if (ps->tk.t != t)
        return 0;
    lex(ps);
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
        expected(ps, what);
        return NULL;
    }
    const char *s = ps->tk.s;
    lex(ps);
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
        fail(ps, "regular expression longer than %d bytes", IQL_MAX_REGEX);
        return NULL;
    }
    if (regex_bounded(src, &refusal) != 0) {
        fail(ps, "regular expression /%.100s/ refused: %s", src, refusal);
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
        fail(ps, "invalid regular expression /%.100s/: %s", src, why);
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
        return expected(ps, "integer");
    if (ps->tk.ival < 0 || ps->tk.ival > IQL_MAX_COUNT)
        return fail(ps, "%s must be 0..%lld", clause, (long long)IQL_MAX_COUNT);
    *out = ps->tk.ival;
    lex(ps);
    return 0;
}

/* Growable list in the arena: doubles when full (the old copy stays until iql_free). */
static void *grow(parser *ps, void *v, size_t n, size_t *cap, size_t size)
{
    if (n < *cap)
        return v;
    size_t nc = *cap ? *cap * 2 : 4;
    void *nv = aalloc(ps->a, nc * size);
    if (n)
        memcpy(nv, v, n * size);
    *cap = nc;
    return nv;
}

/* ---- conditions ---- */

static iql_expr *node(parser *ps, enum iql_ekind k)
{
    iql_expr *e = aalloc(ps->a, sizeof *e);
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
            fail(ps, "condition nested more than %d deep", IQL_MAX_DEPTH);
            return NULL;
        }
        lex(ps);
        e = parse_or(ps);
        ps->depth--;
        if (!e)
            return NULL;
        if (!accept(ps, T_RP)) {
            expected(ps, ")");
            return NULL;
        }
        return e;
    case T_IDENT:
        if (!strcasecmp(t.s, "now")) {
            lex(ps);
            if (!accept(ps, T_LP) || !accept(ps, T_RP)) {
                expected(ps, "()");
                return NULL;
            }
            return node(ps, IQL_X_NOW);
        }
        if (!strcasecmp(t.s, "true") || !strcasecmp(t.s, "false")) {
            e = node(ps, IQL_X_BOOL);
            e->ival = !strcasecmp(t.s, "true");
            lex(ps);
            return e;
        }
        if (reserved(t.s)) {
            expected(ps, "identifier, string, number, bool");
            return NULL;
        }
        /* fall through */
    case T_QIDENT:
        e = node(ps, IQL_X_IDENT);
        e->s = t.s;
        lex(ps);
        /* "m"."tag": the last part names the tag */
        while (ps->tk.t == T_DOT) {
            lex(ps);
            if (ps->tk.t != T_IDENT && ps->tk.t != T_QIDENT) {
                expected(ps, "identifier");
                return NULL;
            }
            e->s = ps->tk.s;
            lex(ps);
        }
        /* a type cast such as "value"::field is read and dropped */
        return e;
    case T_STR:
        e = node(ps, IQL_X_STR);
        e->s = t.s;
        lex(ps);
        return e;
    case T_NUM:
        e = node(ps, IQL_X_NUM);
        e->num = t.num;
        e->isint = t.isint;
        e->ival = t.ival;
        lex(ps);
        return e;
    case T_DUR:
        e = node(ps, IQL_X_DUR);
        e->ival = t.ival;
        lex(ps);
        return e;
    case T_REGEX:
        e = node(ps, IQL_X_REGEX);
        e->s = t.s;
        lex(ps);
        if (!(e->re = compile(ps, t.s)))
            return NULL;
        return e;
    case T_OP:
        if (t.op == IQL_SUB) { /* a negative number or duration */
            lex(ps);
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
        expected(ps, "identifier, string, number, bool");
        return NULL;
    }
}

static iql_expr *parse_additive(parser *ps)
{
    iql_expr *l = parse_primary(ps);
    while (l && ps->tk.t == T_OP && (ps->tk.op == IQL_ADD || ps->tk.op == IQL_SUB)) {
        iql_expr *b = node(ps, IQL_X_BIN);
        b->op = ps->tk.op;
        lex(ps);
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
        lex(ps);
        b->l = l;
        if (!(b->r = parse_additive(ps)))
            return NULL;
        if ((b->op == IQL_RE || b->op == IQL_NRE) && b->r->kind != IQL_X_REGEX) {
            expected(ps, "regular expression");
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
        lex(ps);
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
        lex(ps);
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
        lex(ps);
        return (n->re = compile(ps, n->name)) ? 0 : -1;
    }
    const char *s = NULL;
    for (;;) {
        if (ps->tk.t == T_DOT) { /* db..m: an empty retention policy */
            lex(ps);
            continue;
        }
        if (!is_name(ps))
            return expected(ps, "identifier");
        s = ps->tk.s;
        lex(ps);
        if (ps->tk.t != T_DOT)
            break;
        lex(ps);
        if (ps->tk.t == T_REGEX) {
            n->kind = IQL_N_REGEX;
            n->name = ps->tk.s;
            lex(ps);
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
        return required ? expected(ps, "FROM") : 0;
    size_t cap = 0;
    do {
        if (st->nfrom == IQL_MAX_LIST)
            return fail(ps, "more than %d measurements in FROM", IQL_MAX_LIST);
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
        lex(ps);
        return 0;
    }
    if (ps->tk.t == T_REGEX) {
        f->arg.kind = IQL_N_REGEX;
        f->arg.name = ps->tk.s;
        lex(ps);
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
    lex(ps); /* ( */
    for (size_t i = 0; i < sizeof funcs / sizeof funcs[0]; i++)
        if (!strcasecmp(funcs[i].name, name))
            f->func = funcs[i].f;
    if (f->func == IQL_FN_NONE) {
        int line, col;
        where_at(ps, at, &line, &col);
        return fail(ps,
                    "undefined function %.64s() at line %d, char %d (bucketdb supports mean, "
                    "median, min, max, sum, count, stddev, spread, first, last, percentile)",
                    name, line, col);
    }
    if (ps->tk.t == T_STAR) {
        f->arg.kind = IQL_N_WILD;
        lex(ps);
    } else if (ps->tk.t == T_REGEX) {
        f->arg.kind = IQL_N_REGEX;
        f->arg.name = ps->tk.s;
        lex(ps);
        if (!(f->arg.re = compile(ps, f->arg.name)))
            return -1;
    } else if (is_name(ps)) {
        f->arg.kind = IQL_N_NAME;
        f->arg.name = ps->tk.s;
        lex(ps);
        if (ps->tk.t == T_LP)
            return fail(ps, "nested function calls such as %.64s(%.64s(...)) are not supported",
                        name, f->arg.name);
    } else {
        return expected(ps, "field key");
    }
    if (f->func == IQL_FN_PERCENTILE) {
        if (!accept(ps, T_COMMA))
            return expected(ps, ",");
        if (ps->tk.t != T_NUM)
            return expected(ps, "number");
        if (!(ps->tk.num >= 0 && ps->tk.num <= 100))
            return fail(ps, "percentile's N must be 0..100");
        f->param = ps->tk.num;
        lex(ps);
    }
    if (!accept(ps, T_RP))
        return expected(ps, ")");
    return 0;
}

static int parse_fields(parser *ps, iql_stmt *st)
{
    size_t cap = 0;
    do {
        if (st->nfields == IQL_MAX_LIST)
            return fail(ps, "more than %d fields in SELECT", IQL_MAX_LIST);
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
        return fail(ps, "mixing aggregate and non-aggregate queries is not supported");
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
            lex(ps);
            if (!accept(ps, T_LP))
                return expected(ps, "(");
            if (ps->tk.t != T_DUR)
                return expected(ps, "duration");
            if (ps->tk.ival <= 0)
                return fail(ps, "GROUP BY time interval must be positive");
            if (st->every_ns)
                return fail(ps, "multiple time dimensions not allowed");
            st->every_ns = ps->tk.ival;
            lex(ps);
            if (accept(ps, T_COMMA)) {
                int neg = ps->tk.t == T_OP && ps->tk.op == IQL_SUB;
                if (neg)
                    lex(ps);
                if (ps->tk.t != T_DUR)
                    return expected(ps, "duration");
                st->offset_ns = neg ? -ps->tk.ival : ps->tk.ival;
                lex(ps);
            }
            if (!accept(ps, T_RP))
                return expected(ps, ")");
        } else if (accept(ps, T_STAR)) {
            st->group_all_tags = 1;
        } else if (ps->tk.t == T_REGEX) {
            return fail(ps, "GROUP BY /regex/ is not supported; name the tags or use *");
        } else {
            const char *t = take_name(ps, "identifier");
            if (!t)
                return -1;
            if (st->ngroup_tags == IQL_MAX_LIST)
                return fail(ps, "more than %d tags in GROUP BY", IQL_MAX_LIST);
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
    lex(ps);
    if (!accept(ps, T_LP))
        return expected(ps, "(");
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
            lex(ps);
        }
        if (ps->tk.t != T_NUM)
            return expected(ps, "null, none, previous, linear or a number");
        if (!(fabs(ps->tk.num) <= 1e300))
            return fail(ps, "fill value out of range");
        st->fill = IQL_FILL_VALUE;
        st->fill_value = neg ? -ps->tk.num : ps->tk.num;
        lex(ps);
    }
    if (!accept(ps, T_RP))
        return expected(ps, ")");
    return 0;
}

static int parse_select(parser *ps, iql_stmt *st)
{
    st->kind = IQL_SELECT;
    if (parse_fields(ps, st) != 0)
        return -1;
    if (kw(ps, "into"))
        return fail(ps, "SELECT ... INTO is not supported");
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
        return fail(ps, "tz() is not supported: bucketdb answers in UTC (drop the tz clause)");
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
                return expected(ps, "= or =~");
            lex(ps);
            st->from = aalloc(ps->a, sizeof *st->from);
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
        return expected(ps, "DATABASES, MEASUREMENTS, SERIES, TAG KEYS, TAG VALUES, FIELD KEYS, "
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
            return expected(ps, "(");
        size_t cap = 0;
        do {
            const char *k = take_name(ps, "identifier");
            if (!k)
                return -1;
            if (st->nkeys == IQL_MAX_LIST)
                return fail(ps, "more than %d keys in WITH KEY IN", IQL_MAX_LIST);
            st->keys = grow(ps, st->keys, st->nkeys, &cap, sizeof(char *));
            st->keys[st->nkeys++] = k;
        } while (accept(ps, T_COMMA));
        if (!accept(ps, T_RP))
            return expected(ps, ")");
    } else {
        if (ps->tk.t != T_OP || (ps->tk.op != IQL_EQ && ps->tk.op != IQL_NE &&
                                 ps->tk.op != IQL_RE && ps->tk.op != IQL_NRE))
            return expected(ps, "=, !=, =~, !~ or IN");
        st->key_op = ps->tk.op;
        lex(ps);
        if (st->key_op == IQL_RE || st->key_op == IQL_NRE) {
            if (ps->tk.t != T_REGEX)
                return expected(ps, "regular expression");
            if (!(st->key_re = compile(ps, ps->tk.s)))
                return -1;
            lex(ps);
        } else {
            const char *k = take_name(ps, "identifier");
            if (!k)
                return -1;
            st->keys = aalloc(ps->a, sizeof(char *));
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
            lex(ps);
        return 0;
    }
    return expected(ps, "SELECT, SHOW, CREATE");
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
    lex(&ps);
    size_t cap = 0;
    while (ps.tk.t != T_EOF) {
        if (accept(&ps, T_SEMI))
            continue;
        if (q->n == IQL_MAX_STMTS) {
            fail(&ps, "more than %d statements in one query", IQL_MAX_STMTS);
            return -1;
        }
        q->stmts = grow(&ps, q->stmts, q->n, &cap, sizeof *q->stmts);
        iql_stmt *st = &q->stmts[q->n++];
        if (parse_stmt(&ps, st) != 0)
            return -1;
        if (ps.tk.t != T_EOF && ps.tk.t != T_SEMI) {
            expected(&ps, ";");
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
        arena_free(q->arena);
    memset(q, 0, sizeof *q);
}
