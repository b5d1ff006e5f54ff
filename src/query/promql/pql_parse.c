/* pql_parse: recursive descent over pql_lex tokens. Precedence, lowest first, as in
 * Prometheus: or; and unless; == != > < >= <=; + -; * / %; unary minus; ^
 * (right-associative, so -2^2 is -4 and 2^3^2 is 512); the rest left-associative. Depth is bounded
 * by PQL_MAX_DEPTH so that no input exhausts the stack. */
#include "query/promql/pql_parse.h"

#include "query/promql/pql_lex.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct parser {
    pql_lexer lx;
    pql_token tok; /* current */
    pql_token peek;
    int has_peek;
    int depth;
    int failed;
    char *err;
    size_t errlen;
} parser;

static void fail(parser *p, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(parser *p, size_t pos, const char *fmt, ...)
{
    if (p->failed)
        return;
    p->failed = 1;
    /* Prometheus counts lines and columns from 1; a query is nearly always one line */
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos && i < p->lx.len; i++) {
        if (p->lx.src[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    int n = snprintf(p->err, p->errlen, "%zu:%zu: parse error: ", line, col);
    if (n < 0 || (size_t)n >= p->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

static void advance(parser *p)
{
    if (p->has_peek) {
        p->tok = p->peek;
        p->has_peek = 0;
    } else {
        p->tok = pql_lex_next(&p->lx);
    }
    if (p->tok.kind == PQL_T_ERROR)
        fail(p, p->tok.pos, "%.*s", (int)p->tok.len, p->tok.text);
}

static const pql_token *peek(parser *p)
{
    if (!p->has_peek) {
        p->peek = pql_lex_next(&p->lx);
        p->has_peek = 1;
    }
    return &p->peek;
}

static int is_ident(const pql_token *t, const char *word)
{
    return t->kind == PQL_T_IDENT && t->len == strlen(word) && !memcmp(t->text, word, t->len);
}

static const char *tok_desc(const pql_token *t, char *buf, size_t n)
{
    if (t->kind == PQL_T_EOF)
        return "end of input";
    snprintf(buf, n, "\"%.*s\"", (int)(t->len > 40 ? 40 : t->len), t->text);
    return buf;
}

static void unexpected(parser *p, const char *where)
{
    char b[64];
    fail(p, p->tok.pos, "unexpected %s %s", tok_desc(&p->tok, b, sizeof b), where);
}

static pql_node *node(parser *p, enum pql_kind k, enum pql_type t)
{
    pql_node *n = calloc(1, sizeof *n);
    if (!n) {
        fail(p, p->tok.pos, "out of memory");
        return NULL;
    }
    n->kind = k;
    n->type = t;
    n->pos = p->tok.pos;
    return n;
}

void pql_free(pql_node *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->nmatchers; i++) {
        free(n->matchers[i].name);
        free(n->matchers[i].value);
    }
    free(n->matchers);
    for (size_t i = 0; i < n->ngrouping; i++)
        free(n->grouping[i]);
    free(n->grouping);
    for (size_t i = 0; i < n->nmatch; i++)
        free(n->match[i]);
    free(n->match);
    for (size_t i = 0; i < n->ninclude; i++)
        free(n->include[i]);
    free(n->include);
    free(n->str);
    pql_free(n->args[0]);
    pql_free(n->args[1]);
    free(n);
}

const char *pql_type_name(enum pql_type t)
{
    switch (t) {
    case PQL_SCALAR:
        return "scalar";
    case PQL_VECTOR:
        return "instant vector";
    case PQL_MATRIX:
        return "range vector";
    case PQL_STRING_T:
        return "string";
    }
    return "?";
}

static const struct {
    const char *name;
    enum pql_func f;
} funcs[] = {
    {"rate", PQL_F_RATE},
    {"increase", PQL_F_INCREASE},
    {"avg_over_time", PQL_F_AVG_OT},
    {"min_over_time", PQL_F_MIN_OT},
    {"max_over_time", PQL_F_MAX_OT},
    {"sum_over_time", PQL_F_SUM_OT},
    {"count_over_time", PQL_F_COUNT_OT},
    {"last_over_time", PQL_F_LAST_OT},
    {"quantile_over_time", PQL_F_QUANTILE_OT},
};

const char *pql_func_name(enum pql_func f)
{
    for (size_t i = 0; i < sizeof funcs / sizeof funcs[0]; i++)
        if (funcs[i].f == f)
            return funcs[i].name;
    return "?";
}

static const char *const aggs[] = {"sum", "avg", "min", "max", "count"};
/* Prometheus' other aggregation operators: named in the refusal, not taken for metrics */
static const char *const other_aggs[] = {"stddev",   "stdvar",       "topk", "bottomk",
                                         "quantile", "count_values", "group"};

static pql_node *expr(parser *p);

static char *tok_string(parser *p)
{
    char *s = malloc(PQL_MAX_STRING + 1);
    if (!s) {
        fail(p, p->tok.pos, "out of memory");
        return NULL;
    }
    if (pql_unquote(p->tok.text, p->tok.len, s, PQL_MAX_STRING + 1) < 0) {
        fail(p, p->tok.pos, "invalid string (bad escape, or longer than %d bytes)", PQL_MAX_STRING);
        free(s);
        return NULL;
    }
    return s;
}

static char *tok_ident(parser *p)
{
    char *s = strndup(p->tok.text, p->tok.len);
    if (!s)
        fail(p, p->tok.pos, "out of memory");
    return s;
}

static int add_matcher(parser *p, pql_node *n, char *name, char *value, enum pql_match_op op)
{
    if (n->nmatchers == PQL_MAX_MATCHERS) {
        fail(p, p->tok.pos, "more than %d label matchers in one selector", PQL_MAX_MATCHERS);
        free(name);
        free(value);
        return -1;
    }
    if (!n->matchers) {
        n->matchers = calloc(PQL_MAX_MATCHERS, sizeof *n->matchers);
        if (!n->matchers) {
            fail(p, p->tok.pos, "out of memory");
            free(name);
            free(value);
            return -1;
        }
    }
    n->matchers[n->nmatchers++] = (pql_matcher){name, value, op};
    return 0;
}

/* '{' already current */
static int matchers(parser *p, pql_node *n)
{
    advance(p);
    while (!p->failed && p->tok.kind != PQL_T_RBRACE) {
        if (p->tok.kind != PQL_T_IDENT) {
            unexpected(p, "in label matching, expected label name");
            return -1;
        }
        char *name = tok_ident(p);
        if (!name)
            return -1;
        advance(p);
        enum pql_match_op op;
        switch (p->tok.kind) {
        case PQL_T_ASSIGN:
            op = PQL_M_EQ;
            break;
        case PQL_T_NEQ:
            op = PQL_M_NEQ;
            break;
        case PQL_T_RE:
            op = PQL_M_RE;
            break;
        case PQL_T_NRE:
            op = PQL_M_NRE;
            break;
        default:
            free(name);
            unexpected(p, "in label matching, expected one of \"=\", \"!=\", \"=~\", \"!~\"");
            return -1;
        }
        advance(p);
        if (p->tok.kind != PQL_T_STRING) {
            free(name);
            unexpected(p, "in label matching, expected string");
            return -1;
        }
        char *value = tok_string(p);
        if (!value) {
            free(name);
            return -1;
        }
        if (add_matcher(p, n, name, value, op) != 0)
            return -1;
        advance(p);
        if (p->tok.kind == PQL_T_COMMA)
            advance(p);
        else if (p->tok.kind != PQL_T_RBRACE) {
            unexpected(p, "in label matching, expected \",\" or \"}\"");
            return -1;
        }
    }
    if (p->failed)
        return -1;
    advance(p); /* '}' */
    return 0;
}

static pql_node *selector(parser *p)
{
    pql_node *n = node(p, PQL_SELECTOR, PQL_VECTOR);
    if (!n)
        return NULL;
    if (p->tok.kind == PQL_T_IDENT) {
        char *name = tok_ident(p);
        char *v = name ? strdup("__name__") : NULL;
        if (!name || !v || add_matcher(p, n, v, name, PQL_M_EQ) != 0) {
            if (!v && name)
                free(name);
            pql_free(n);
            return NULL;
        }
        advance(p);
    }
    if (p->tok.kind == PQL_T_LBRACE && matchers(p, n) != 0) {
        pql_free(n);
        return NULL;
    }
    /* Prometheus refuses a selector every series matches */
    int nonempty = 0;
    for (size_t i = 0; i < n->nmatchers; i++) {
        const pql_matcher *m = &n->matchers[i];
        if ((m->op == PQL_M_EQ && *m->value) || (m->op == PQL_M_NEQ && !*m->value) ||
            (m->op == PQL_M_RE && *m->value && strcmp(m->value, ".*") && strcmp(m->value, ".*?")) ||
            m->op == PQL_M_NRE)
            nonempty = 1;
    }
    if (!nonempty) {
        fail(p, n->pos, "vector selector must contain at least one non-empty matcher");
        pql_free(n);
        return NULL;
    }
    return n;
}

static int grouping(parser *p, pql_node *n)
{
    n->without = is_ident(&p->tok, "without");
    advance(p);
    if (p->tok.kind != PQL_T_LPAREN) {
        unexpected(p, "in grouping opts, expected \"(\"");
        return -1;
    }
    advance(p);
    if (!n->grouping) {
        n->grouping = calloc(PQL_MAX_GROUPING, sizeof *n->grouping);
        if (!n->grouping) {
            fail(p, p->tok.pos, "out of memory");
            return -1;
        }
    }
    while (!p->failed && p->tok.kind != PQL_T_RPAREN) {
        if (p->tok.kind != PQL_T_IDENT) {
            unexpected(p, "in grouping opts, expected label");
            return -1;
        }
        if (n->ngrouping == PQL_MAX_GROUPING) {
            fail(p, p->tok.pos, "more than %d grouping labels", PQL_MAX_GROUPING);
            return -1;
        }
        if (!(n->grouping[n->ngrouping] = tok_ident(p)))
            return -1;
        n->ngrouping++;
        advance(p);
        if (p->tok.kind == PQL_T_COMMA)
            advance(p);
        else if (p->tok.kind != PQL_T_RPAREN) {
            unexpected(p, "in grouping opts, expected \",\" or \")\"");
            return -1;
        }
    }
    if (p->failed)
        return -1;
    advance(p);
    return 0;
}

static pql_node *aggregation(parser *p, enum pql_aggop op)
{
    pql_node *n = node(p, PQL_AGG, PQL_VECTOR);
    if (!n)
        return NULL;
    n->agg = op;
    advance(p);
    if ((is_ident(&p->tok, "by") || is_ident(&p->tok, "without")) && grouping(p, n) != 0)
        goto bad;
    if (p->tok.kind != PQL_T_LPAREN) {
        unexpected(p, "in aggregation, expected \"(\"");
        goto bad;
    }
    advance(p);
    if (!(n->args[0] = expr(p)))
        goto bad;
    n->nargs = 1;
    if (p->tok.kind == PQL_T_COMMA) {
        fail(p, p->tok.pos, "aggregation %s takes one argument", aggs[op]);
        goto bad;
    }
    if (p->tok.kind != PQL_T_RPAREN) {
        unexpected(p, "in aggregation, expected \")\"");
        goto bad;
    }
    advance(p);
    if (is_ident(&p->tok, "by") || is_ident(&p->tok, "without")) {
        if (n->grouping) {
            fail(p, p->tok.pos, "aggregation has grouping labels twice");
            goto bad;
        }
        if (grouping(p, n) != 0)
            goto bad;
    }
    if (n->args[0]->type != PQL_VECTOR) {
        fail(p, n->args[0]->pos, "expected type instant vector in aggregation expression, got %s",
             pql_type_name(n->args[0]->type));
        goto bad;
    }
    return n;
bad:
    pql_free(n);
    return NULL;
}

static pql_node *call(parser *p)
{
    const pql_token name = p->tok;
    size_t fi = 0, nf = sizeof funcs / sizeof funcs[0];
    while (fi < nf &&
           !(name.len == strlen(funcs[fi].name) && !memcmp(name.text, funcs[fi].name, name.len)))
        fi++;
    if (fi == nf) {
        fail(p, name.pos,
             "function \"%.*s\" is not in bucketdb's PromQL subset (docs/PROMQL.md lists it)",
             (int)(name.len > 64 ? 64 : name.len), name.text);
        return NULL;
    }
    pql_node *n = node(p, PQL_CALL, PQL_VECTOR);
    if (!n)
        return NULL;
    n->func = funcs[fi].f;
    advance(p); /* name */
    advance(p); /* ( */
    size_t want = n->func == PQL_F_QUANTILE_OT ? 2 : 1;
    while (!p->failed && p->tok.kind != PQL_T_RPAREN) {
        if (n->nargs == want) {
            fail(p, p->tok.pos, "expected %zu argument(s) in call to \"%s\", got more", want,
                 funcs[fi].name);
            goto bad;
        }
        if (!(n->args[n->nargs] = expr(p)))
            goto bad;
        n->nargs++;
        if (p->tok.kind == PQL_T_COMMA)
            advance(p);
        else if (p->tok.kind != PQL_T_RPAREN) {
            unexpected(p, "in call, expected \",\" or \")\"");
            goto bad;
        }
    }
    if (p->failed)
        goto bad;
    if (n->nargs != want) {
        fail(p, p->tok.pos, "expected %zu argument(s) in call to \"%s\", got %zu", want,
             funcs[fi].name, n->nargs);
        goto bad;
    }
    advance(p);
    for (size_t i = 0; i < want; i++) {
        enum pql_type t = i + 1 < want ? PQL_SCALAR : PQL_MATRIX;
        if (n->args[i]->type != t) {
            fail(p, n->args[i]->pos, "expected type %s in call to function \"%s\", got %s",
                 pql_type_name(t), funcs[fi].name, pql_type_name(n->args[i]->type));
            goto bad;
        }
    }
    return n;
bad:
    pql_free(n);
    return NULL;
}

static pql_node *primary(parser *p)
{
    pql_token t = p->tok;
    char b[64];
    switch (t.kind) {
    case PQL_T_NUMBER: {
        pql_node *n = node(p, PQL_NUMBER, PQL_SCALAR);
        if (n)
            n->num = t.num;
        advance(p);
        return n;
    }
    case PQL_T_STRING: {
        pql_node *n = node(p, PQL_STRING, PQL_STRING_T);
        if (n && !(n->str = tok_string(p))) {
            pql_free(n);
            return NULL;
        }
        advance(p);
        return n;
    }
    case PQL_T_LPAREN: {
        advance(p);
        pql_node *n = expr(p);
        if (!n)
            return NULL;
        if (p->tok.kind != PQL_T_RPAREN) {
            unexpected(p, "in paren expression, expected \")\"");
            pql_free(n);
            return NULL;
        }
        advance(p);
        return n;
    }
    case PQL_T_LBRACE:
        return selector(p);
    case PQL_T_IDENT:
        break;
    case PQL_T_DURATION:
        fail(p, t.pos, "unexpected duration %s", tok_desc(&t, b, sizeof b));
        return NULL;
    default:
        unexpected(p, "where an expression was expected");
        return NULL;
    }
    if ((t.len == 3 && !strncasecmp(t.text, "inf", 3)) ||
        (t.len == 3 && !strncasecmp(t.text, "nan", 3))) {
        pql_node *n = node(p, PQL_NUMBER, PQL_SCALAR);
        if (n)
            n->num = tolower((unsigned char)t.text[0]) == 'i' ? INFINITY : NAN;
        advance(p);
        return n;
    }
    const pql_token *nx = peek(p);
    int opens = nx->kind == PQL_T_LPAREN || is_ident(nx, "by") || is_ident(nx, "without");
    for (size_t i = 0; i < sizeof aggs / sizeof aggs[0]; i++)
        if (is_ident(&t, aggs[i]) && opens)
            return aggregation(p, (enum pql_aggop)i);
    for (size_t i = 0; i < sizeof other_aggs / sizeof other_aggs[0]; i++)
        if (is_ident(&t, other_aggs[i]) && opens) {
            fail(p, t.pos,
                 "aggregation \"%s\" is not in bucketdb's PromQL subset (sum, avg, min, max, "
                 "count are)",
                 other_aggs[i]);
            return NULL;
        }
    if (nx->kind == PQL_T_LPAREN)
        return call(p);
    return selector(p);
}

/* primary, then a range [d] and an offset d on a selector */
static pql_node *postfix(parser *p)
{
    pql_node *n = primary(p);
    if (!n)
        return NULL;
    if (p->tok.kind == PQL_T_LBRACKET) {
        if (n->kind != PQL_SELECTOR || n->range_ms || n->offset_ms) {
            fail(p, p->tok.pos,
                 n->kind == PQL_SELECTOR ? "no offset modifiers allowed before range"
                                         : "ranges only allowed for vector selectors (subqueries "
                                           "are not in bucketdb's PromQL subset)");
            goto bad;
        }
        advance(p);
        if (p->tok.kind != PQL_T_DURATION || p->tok.dur_ms <= 0) {
            unexpected(p, "in range, expected a positive duration such as 5m");
            goto bad;
        }
        n->range_ms = p->tok.dur_ms;
        advance(p);
        /* ":1m" lexes as a name (names may start with ':') */
        if (p->tok.kind == PQL_T_COLON || (p->tok.kind == PQL_T_IDENT && p->tok.text[0] == ':')) {
            fail(p, p->tok.pos, "subqueries are not in bucketdb's PromQL subset");
            goto bad;
        }
        if (p->tok.kind != PQL_T_RBRACKET) {
            unexpected(p, "in range, expected \"]\"");
            goto bad;
        }
        advance(p);
        n->type = PQL_MATRIX;
    }
    if (is_ident(&p->tok, "offset")) {
        if (n->kind != PQL_SELECTOR) {
            fail(p, p->tok.pos, "offset modifier must be preceded by a vector selector");
            goto bad;
        }
        advance(p);
        int neg = 0;
        if (p->tok.kind == PQL_T_SUB) {
            neg = 1;
            advance(p);
        }
        if (p->tok.kind != PQL_T_DURATION) {
            unexpected(p, "in offset, expected duration");
            goto bad;
        }
        n->offset_ms = neg ? -p->tok.dur_ms : p->tok.dur_ms;
        advance(p);
    }
    if (p->tok.kind == PQL_T_LBRACKET && n->offset_ms) {
        fail(p, p->tok.pos, "no offset modifiers allowed before range");
        goto bad;
    }
    if (p->tok.kind == PQL_T_AT) {
        fail(p, p->tok.pos, "the @ modifier is not in bucketdb's PromQL subset");
        goto bad;
    }
    return n;
bad:
    pql_free(n);
    return NULL;
}

static int enter(parser *p)
{
    if (++p->depth > PQL_MAX_DEPTH) {
        fail(p, p->tok.pos, "expression nested deeper than %d levels", PQL_MAX_DEPTH);
        return -1;
    }
    return 0;
}

static pql_node *unary(parser *p);

const char *pql_binop_name(enum pql_binop op)
{
    static const char *const names[] = {
        "+", "-", "*", "/", "%", "^", "==", "!=", ">", "<", ">=", "<=", "and", "or", "unless"};
    return (size_t)op < sizeof names / sizeof names[0] ? names[op] : "?";
}

int pql_binop_is_cmp(enum pql_binop op)
{
    return op >= PQL_B_EQ && op <= PQL_B_LE;
}

int pql_binop_is_set(enum pql_binop op)
{
    return op >= PQL_B_AND;
}

/* Prometheus' keywords are case-insensitive ("AND", "On") */
static int is_kw(const pql_token *t, const char *word)
{
    return t->kind == PQL_T_IDENT && t->len == strlen(word) && !strncasecmp(t->text, word, t->len);
}

/* The binary operator at t and its precedence, Prometheus', lowest first: or 1, and
 * unless 2, comparisons 3, + - 4, * / % 5 (^ is parsed by power()); 0: none. */
static int binop_at(const pql_token *t, enum pql_binop *op)
{
    switch (t->kind) {
    case PQL_T_ADD:
        *op = PQL_B_ADD;
        return 4;
    case PQL_T_SUB:
        *op = PQL_B_SUB;
        return 4;
    case PQL_T_MUL:
        *op = PQL_B_MUL;
        return 5;
    case PQL_T_DIV:
        *op = PQL_B_DIV;
        return 5;
    case PQL_T_MOD:
        *op = PQL_B_MOD;
        return 5;
    case PQL_T_NEQ:
        *op = PQL_B_NE;
        return 3;
    case PQL_T_CMP:
        if (t->text[0] == '=')
            *op = PQL_B_EQ;
        else if (t->text[0] == '<')
            *op = t->len == 2 ? PQL_B_LE : PQL_B_LT;
        else
            *op = t->len == 2 ? PQL_B_GE : PQL_B_GT;
        return 3;
    default:
        break;
    }
    if (is_kw(t, "or")) {
        *op = PQL_B_OR;
        return 1;
    }
    if (is_kw(t, "and") || is_kw(t, "unless")) {
        *op = is_kw(t, "and") ? PQL_B_AND : PQL_B_UNLESS;
        return 2;
    }
    return 0;
}

/* "(" label, ... ")" of on/ignoring/group_left/group_right into *out */
static int label_list(parser *p, char ***out, size_t *n)
{
    if (p->tok.kind != PQL_T_LPAREN) {
        unexpected(p, "in grouping opts, expected \"(\"");
        return -1;
    }
    advance(p);
    if (!(*out = calloc(PQL_MAX_GROUPING, sizeof **out))) {
        fail(p, p->tok.pos, "out of memory");
        return -1;
    }
    while (!p->failed && p->tok.kind != PQL_T_RPAREN) {
        if (p->tok.kind != PQL_T_IDENT) {
            unexpected(p, "in grouping opts, expected label");
            return -1;
        }
        if (*n == PQL_MAX_GROUPING) {
            fail(p, p->tok.pos, "more than %d grouping labels", PQL_MAX_GROUPING);
            return -1;
        }
        if (!((*out)[*n] = tok_ident(p)))
            return -1;
        (*n)++;
        advance(p);
        if (p->tok.kind == PQL_T_COMMA)
            advance(p);
        else if (p->tok.kind != PQL_T_RPAREN) {
            unexpected(p, "in grouping opts, expected \",\" or \")\"");
            return -1;
        }
    }
    if (p->failed)
        return -1;
    advance(p);
    return 0;
}

/* The operator token is current: a PQL_BINARY node at it with the modifiers that
 * follow it, in Prometheus' order: bool, on/ignoring (...), group_left/group_right
 * [(...)]; the operands are added by binary(). */
static pql_node *operator(parser *p, enum pql_binop op)
{
    pql_node *n = node(p, PQL_BINARY, PQL_SCALAR);
    if (!n)
        return NULL;
    n->op = op;
    advance(p);
    if (is_kw(&p->tok, "bool")) {
        n->bool_mod = 1;
        advance(p);
    }
    if (is_kw(&p->tok, "on") || is_kw(&p->tok, "ignoring")) {
        n->on = is_kw(&p->tok, "on");
        advance(p);
        if (label_list(p, &n->match, &n->nmatch) != 0)
            goto bad;
        if (is_kw(&p->tok, "group_left") || is_kw(&p->tok, "group_right")) {
            n->card = is_kw(&p->tok, "group_left") ? PQL_CARD_MANY_TO_ONE : PQL_CARD_ONE_TO_MANY;
            advance(p);
            if (p->tok.kind == PQL_T_LPAREN && label_list(p, &n->include, &n->ninclude) != 0)
                goto bad;
        }
    } else if (is_kw(&p->tok, "group_left") || is_kw(&p->tok, "group_right")) {
        fail(p, p->tok.pos, "unexpected \"%.*s\": it needs on(...) or ignoring(...) before it",
             (int)p->tok.len, p->tok.text);
        goto bad;
    }
    if (!p->failed)
        return n;
bad:
    pql_free(n);
    return NULL;
}

/* Where a binary expression's text starts (its leftmost operand), for the messages
 * Prometheus places there. A loop: a long a+b+c+... chain nests to the left. */
static size_t start_pos(const pql_node *n)
{
    while (n->kind == PQL_BINARY)
        n = n->args[0];
    return n->pos;
}

/* Completes the operator node n with its operands and Prometheus' parse-time checks,
 * in Prometheus' order (the first failing one is reported). */
static pql_node *binary(parser *p, pql_node *n, pql_node *l, pql_node *r)
{
    n->args[0] = l;
    n->args[1] = r;
    n->nargs = 2;
    if (!r) {
        pql_free(n);
        return NULL;
    }
    enum pql_binop op = n->op;
    const char *name = pql_binop_name(op);
    int cmp = pql_binop_is_cmp(op), set = pql_binop_is_set(op);
    if (n->bool_mod && !cmp) {
        fail(p, n->pos, "bool modifier can only be used on comparison operators");
        goto bad;
    }
    if (cmp && !n->bool_mod && l->type == PQL_SCALAR && r->type == PQL_SCALAR) {
        fail(p, n->pos, "comparisons between scalars must use BOOL modifier");
        goto bad;
    }
    for (size_t i = 0; n->on && i < n->nmatch; i++)
        for (size_t j = 0; j < n->ninclude; j++)
            if (!strcmp(n->match[i], n->include[j])) {
                fail(p, n->pos, "label \"%s\" must not occur in ON and GROUP clause at once",
                     n->match[i]);
                goto bad;
            }
    for (int i = 0; i < 2; i++)
        if (n->args[i]->type != PQL_SCALAR && n->args[i]->type != PQL_VECTOR) {
            fail(p, start_pos(n->args[i]),
                 "binary expression must contain only scalar and instant vector types");
            goto bad;
        }
    int vv = l->type == PQL_VECTOR && r->type == PQL_VECTOR;
    if (!vv && n->nmatch) {
        fail(p, start_pos(l), "vector matching only allowed between instant vectors");
        goto bad;
    }
    if (vv && set && n->card != PQL_CARD_ONE_TO_ONE) {
        fail(p, start_pos(l), "no grouping allowed for \"%s\" operation", name);
        goto bad;
    }
    if (!vv && set) {
        fail(p, start_pos(l), "set operator \"%s\" not allowed in binary scalar expression", name);
        goto bad;
    }
    if (!vv)
        n->card = PQL_CARD_ONE_TO_ONE; /* group_left between a vector and a scalar: no effect */
    n->type = l->type == PQL_VECTOR || r->type == PQL_VECTOR ? PQL_VECTOR : PQL_SCALAR;
    return n;
bad:
    pql_free(n);
    return NULL;
}

static pql_node *power(parser *p)
{
    pql_node *l = postfix(p);
    if (!l || p->tok.kind != PQL_T_POW)
        return l;
    pql_node *n = operator(p, PQL_B_POW);
    if (!n || enter(p) != 0) {
        pql_free(n);
        pql_free(l);
        return NULL;
    }
    pql_node *r = unary(p); /* right-associative, and 2^-1 is allowed */
    p->depth--;
    return binary(p, n, l, r);
}

static pql_node *unary(parser *p)
{
    if (p->tok.kind != PQL_T_SUB && p->tok.kind != PQL_T_ADD)
        return power(p);
    int neg = p->tok.kind == PQL_T_SUB;
    size_t pos = p->tok.pos;
    advance(p);
    if (enter(p) != 0)
        return NULL;
    pql_node *a = unary(p);
    p->depth--;
    if (!a || !neg)
        return a;
    if (a->type != PQL_SCALAR && a->type != PQL_VECTOR) {
        fail(p, pos,
             "unary expression only allowed on expressions of type scalar or instant "
             "vector");
        pql_free(a);
        return NULL;
    }
    if (a->kind == PQL_NUMBER) {
        a->num = -a->num;
        return a;
    }
    pql_node *n = node(p, PQL_NEG, a->type);
    if (!n) {
        pql_free(a);
        return NULL;
    }
    n->pos = pos;
    n->args[0] = a;
    n->nargs = 1;
    return n;
}

/* Precedence climbing over the levels of binop_at; each level is left-associative.
 * The recursion is bounded by the number of levels; parentheses go through expr(),
 * which counts depth. */
static pql_node *binexpr(parser *p, int minprec)
{
    pql_node *l = unary(p);
    enum pql_binop op;
    int prec;
    while (l && !p->failed && (prec = binop_at(&p->tok, &op)) >= minprec) {
        pql_node *n = operator(p, op);
        if (!n) {
            pql_free(l);
            return NULL;
        }
        l = binary(p, n, l, binexpr(p, prec + 1));
    }
    return l;
}

static pql_node *expr(parser *p)
{
    if (enter(p) != 0)
        return NULL;
    pql_node *l = binexpr(p, 1);
    p->depth--;
    if (p->failed) {
        pql_free(l);
        return NULL;
    }
    return l;
}

int pql_parse(const char *q, size_t len, pql_node **out, char *err, size_t errlen)
{
    parser p = {0};
    p.err = err;
    p.errlen = errlen;
    if (errlen)
        err[0] = '\0';
    *out = NULL;
    pql_lex_init(&p.lx, q, len);
    if (len > PQL_MAX_QUERY_BYTES) {
        fail(&p, 0, "query longer than %d bytes", PQL_MAX_QUERY_BYTES);
        return -1;
    }
    if (memchr(q, '\0', len)) {
        fail(&p, (size_t)((const char *)memchr(q, '\0', len) - q), "NUL byte in query");
        return -1;
    }
    advance(&p);
    if (p.tok.kind == PQL_T_EOF && !p.failed) {
        fail(&p, 0, "no expression found in input");
        return -1;
    }
    pql_node *n = p.failed ? NULL : expr(&p);
    if (n && p.tok.kind != PQL_T_EOF) {
        unexpected(&p, "after the expression");
        pql_free(n);
        return -1;
    }
    if (!n) {
        if (!p.failed)
            fail(&p, p.tok.pos, "invalid expression");
        return -1;
    }
    if (n->type == PQL_STRING_T) {
        fail(&p, n->pos, "string literals are only accepted as function arguments here");
        pql_free(n);
        return -1;
    }
    *out = n;
    return 0;
}
