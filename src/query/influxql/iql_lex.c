/* iql_lex: InfluxQL tokens (identifiers, quoted names and strings, numbers, durations,
 * regexes, operators), the query arena and parse errors. */
#include "query/influxql/iql_lex.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *iql_aalloc(arena *a, size_t n)
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

char *iql_astrndup(arena *a, const char *s, size_t n)
{
    char *p = iql_aalloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void iql_arena_free(arena *a)
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
    char *out = iql_aalloc(ps->a, ps->n - ps->at);
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

void iql_lex(parser *ps)
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
        t->s = iql_astrndup(ps->a, p + ps->at, i - ps->at);
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

void iql_where_at(parser *ps, size_t pos, int *line, int *col)
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
int iql_expected(parser *ps, const char *what)
{
    if (ps->failed)
        return -1;
    ps->failed = 1;
    int line, col;
    iql_where_at(ps, ps->tk.pos, &line, &col);
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

int iql_fail(parser *ps, const char *fmt, ...)
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
