/* pql_lex: the tokens of a PromQL expression (docs/PROMQL.md). The lexer never
 * allocates: a token points into the query text. */
#ifndef BDB_PQL_LEX_H
#define BDB_PQL_LEX_H

#include <stddef.h>
#include <stdint.h>

enum pql_tok {
    PQL_T_EOF,
    PQL_T_ERROR, /* text: the lexer's message */
    PQL_T_NUMBER,
    PQL_T_DURATION,
    PQL_T_STRING, /* text/len: the quoted source, quotes included */
    PQL_T_IDENT,
    PQL_T_LBRACE,
    PQL_T_RBRACE,
    PQL_T_LPAREN,
    PQL_T_RPAREN,
    PQL_T_LBRACKET,
    PQL_T_RBRACKET,
    PQL_T_COMMA,
    PQL_T_ASSIGN, /* = */
    PQL_T_NEQ,    /* != */
    PQL_T_RE,     /* =~ */
    PQL_T_NRE,    /* !~ */
    PQL_T_ADD,
    PQL_T_SUB,
    PQL_T_MUL,
    PQL_T_DIV,
    PQL_T_MOD,
    PQL_T_POW,
    PQL_T_CMP, /* == < > <= >= (the text tells which); != is PQL_T_NEQ */
    PQL_T_COLON,
    PQL_T_AT,
};

typedef struct pql_token {
    enum pql_tok kind;
    const char *text;
    size_t len;
    size_t pos;     /* byte offset in the query */
    double num;     /* PQL_T_NUMBER */
    int64_t dur_ms; /* PQL_T_DURATION */
} pql_token;

typedef struct pql_lexer {
    const char *src;
    size_t len, pos;
} pql_lexer;

void pql_lex_init(pql_lexer *lx, const char *src, size_t len);
/* The next token; PQL_T_ERROR carries a static message in text. */
pql_token pql_lex_next(pql_lexer *lx);
/* A Prometheus duration ("1h30m", "500ms"): 0 with *ms set, or -1 (not one, or more
 * than PQL_MAX_DURATION_MS). */
#define PQL_MAX_DURATION_MS (INT64_C(100) * 365 * 86400000) /* 100 years */
int pql_parse_duration(const char *s, size_t n, int64_t *ms);
/* Decodes a PQL_T_STRING token's text into out (NUL-terminated, at most n bytes):
 * the decoded length, or -1 (bad escape). */
long pql_unquote(const char *text, size_t len, char *out, size_t n);

#endif
