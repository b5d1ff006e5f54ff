/* pql_lex: PromQL tokens. Numbers follow strtod (decimal, exponent, hex, Inf, NaN by
 * name in the parser), a number glued to a unit letter is a duration, strings take
 * Go's quoting ('..', "..", `raw`). */
#include "query/promql/pql_lex.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

void pql_lex_init(pql_lexer *lx, const char *src, size_t len)
{
    lx->src = src;
    lx->len = len;
    lx->pos = 0;
}

static int ident_start(int c)
{
    return isalpha(c) || c == '_' || c == ':';
}

static int ident_char(int c)
{
    return isalnum(c) || c == '_' || c == ':';
}

static int64_t unit_ms(const char *s, size_t n)
{
    if (n == 2 && !memcmp(s, "ms", 2))
        return 1;
    if (n != 1)
        return 0;
    switch (*s) {
    case 's':
        return 1000;
    case 'm':
        return 60000;
    case 'h':
        return 3600000;
    case 'd':
        return 86400000;
    case 'w':
        return 7 * INT64_C(86400000);
    case 'y':
        return 365 * INT64_C(86400000);
    }
    return 0;
}

int pql_parse_duration(const char *s, size_t n, int64_t *ms)
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
            v = v * 10 + (s[i] - '0');
            if (v > PQL_MAX_DURATION_MS)
                return -1;
            i++;
        }
        size_t u = i;
        while (i < n && isalpha((unsigned char)s[i]))
            i++;
        /* "5ms" is a unit of two letters; "5m5s" splits after each unit */
        size_t ulen = i - u;
        if (ulen > 2 || (ulen == 2 && memcmp(s + u, "ms", 2))) {
            ulen = 1;
            i = u + 1;
        }
        int64_t um = unit_ms(s + u, ulen);
        if (!um || v > PQL_MAX_DURATION_MS / um)
            return -1;
        total += v * um;
        if (total > PQL_MAX_DURATION_MS)
            return -1;
    }
    *ms = total;
    return 0;
}

static pql_token tok(pql_lexer *lx, enum pql_tok k, size_t start)
{
    pql_token t = {0};
    t.kind = k;
    t.text = lx->src + start;
    t.len = lx->pos - start;
    t.pos = start;
    return t;
}

static pql_token err(pql_lexer *lx, const char *msg, size_t start)
{
    pql_token t = {0};
    t.kind = PQL_T_ERROR;
    t.text = msg;
    t.len = strlen(msg);
    t.pos = start;
    lx->pos = lx->len;
    return t;
}

static pql_token number(pql_lexer *lx, size_t start)
{
    const char *s = lx->src + start;
    size_t n = lx->len - start;
    /* a duration: digits and unit letters with no '.' or exponent in between */
    size_t i = 0;
    while (i < n && (isdigit((unsigned char)s[i]) || isalpha((unsigned char)s[i])))
        i++;
    int64_t ms;
    if (i > 0 && isalpha((unsigned char)s[i - 1]) && pql_parse_duration(s, i, &ms) == 0 &&
        (i == n || !(isalnum((unsigned char)s[i]) || s[i] == '_'))) {
        lx->pos = start + i;
        pql_token t = tok(lx, PQL_T_DURATION, start);
        t.dur_ms = ms;
        return t;
    }
    /* strtod needs a terminated copy: a number is short */
    char buf[64];
    size_t k = 0;
    while (k < n && k < sizeof buf - 1 &&
           (isalnum((unsigned char)s[k]) || s[k] == '.' ||
            ((s[k] == '+' || s[k] == '-') && k && (s[k - 1] == 'e' || s[k - 1] == 'E'))))
        k++;
    if (k == sizeof buf - 1)
        return err(lx, "number too long", start);
    memcpy(buf, s, k);
    buf[k] = '\0';
    char *end;
    double v = strtod(buf, &end);
    if (end == buf || *end)
        return err(lx, "bad number or duration syntax", start);
    lx->pos = start + k;
    pql_token t = tok(lx, PQL_T_NUMBER, start);
    t.num = v;
    return t;
}

pql_token pql_lex_next(pql_lexer *lx)
{
    const char *s = lx->src;
    while (lx->pos < lx->len) {
        if (isspace((unsigned char)s[lx->pos]))
            lx->pos++;
        else if (s[lx->pos] == '#') /* comment to the end of the line */
            while (lx->pos < lx->len && s[lx->pos] != '\n')
                lx->pos++;
        else
            break;
    }
    size_t start = lx->pos;
    if (lx->pos >= lx->len)
        return tok(lx, PQL_T_EOF, start);
    int c = (unsigned char)s[lx->pos];
    int c2 = lx->pos + 1 < lx->len ? (unsigned char)s[lx->pos + 1] : 0;
    if (isdigit(c) || (c == '.' && isdigit(c2)))
        return number(lx, start);
    if (ident_start(c)) {
        while (lx->pos < lx->len && ident_char((unsigned char)s[lx->pos]))
            lx->pos++;
        return tok(lx, PQL_T_IDENT, start);
    }
    if (c == '"' || c == '\'' || c == '`') {
        lx->pos++;
        while (lx->pos < lx->len && s[lx->pos] != c) {
            if (c != '`' && s[lx->pos] == '\\')
                lx->pos++;
            else if (c != '`' && s[lx->pos] == '\n')
                return err(lx, "unterminated quoted string", start);
            lx->pos++;
        }
        if (lx->pos >= lx->len)
            return err(lx, "unterminated quoted string", start);
        lx->pos++;
        return tok(lx, PQL_T_STRING, start);
    }
    lx->pos++;
    switch (c) {
    case '{':
        return tok(lx, PQL_T_LBRACE, start);
    case '}':
        return tok(lx, PQL_T_RBRACE, start);
    case '(':
        return tok(lx, PQL_T_LPAREN, start);
    case ')':
        return tok(lx, PQL_T_RPAREN, start);
    case '[':
        return tok(lx, PQL_T_LBRACKET, start);
    case ']':
        return tok(lx, PQL_T_RBRACKET, start);
    case ',':
        return tok(lx, PQL_T_COMMA, start);
    case '+':
        return tok(lx, PQL_T_ADD, start);
    case '-':
        return tok(lx, PQL_T_SUB, start);
    case '*':
        return tok(lx, PQL_T_MUL, start);
    case '/':
        return tok(lx, PQL_T_DIV, start);
    case '%':
        return tok(lx, PQL_T_MOD, start);
    case '^':
        return tok(lx, PQL_T_POW, start);
    case ':':
        return tok(lx, PQL_T_COLON, start);
    case '@':
        return tok(lx, PQL_T_AT, start);
    case '=':
        if (c2 == '~' || c2 == '=')
            lx->pos++;
        return tok(lx, c2 == '~' ? PQL_T_RE : c2 == '=' ? PQL_T_CMP : PQL_T_ASSIGN, start);
    case '!':
        if (c2 == '=' || c2 == '~') {
            lx->pos++;
            return tok(lx, c2 == '=' ? PQL_T_NEQ : PQL_T_NRE, start);
        }
        return err(lx, "unexpected character after '!'", start);
    case '<':
    case '>':
        if (c2 == '=')
            lx->pos++;
        return tok(lx, PQL_T_CMP, start);
    }
    return err(lx, "unexpected character", start);
}

long pql_unquote(const char *text, size_t len, char *out, size_t n)
{
    if (len < 2 || !n)
        return -1;
    char q = text[0];
    size_t o = 0;
    for (size_t i = 1; i + 1 < len; i++) {
        char ch = text[i];
        if (q != '`' && ch == '\\') {
            if (++i + 1 >= len)
                return -1;
            switch (text[i]) {
            case 'n':
                ch = '\n';
                break;
            case 't':
                ch = '\t';
                break;
            case 'r':
                ch = '\r';
                break;
            case '\\':
            case '"':
            case '\'':
                ch = text[i];
                break;
            default:
                return -1;
            }
        }
        if (o + 1 >= n)
            return -1;
        out[o++] = ch;
    }
    out[o] = '\0';
    return (long)o;
}
