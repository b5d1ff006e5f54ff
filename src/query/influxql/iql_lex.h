/* iql_lex: the InfluxQL lexer and what the parser's files share (private to
 * src/query/influxql/): the arena every node lives in, tokens, the parser state, and
 * errors in InfluxDB's words. iql.h is the interface. */
#ifndef BDB_IQL_LEX_H
#define BDB_IQL_LEX_H

#include "query/influxql/iql.h"

#include <regex.h>
#include <stddef.h>
#include <stdint.h>

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

/* Zeroed memory from the arena (aborts when out of memory, the server's policy). */
void *iql_aalloc(arena *a, size_t n);
char *iql_astrndup(arena *a, const char *s, size_t n);
void iql_arena_free(arena *a);

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

/* Reads the next token into ps->tk. */
void iql_lex(parser *ps);
/* Line and column (1-based) of byte pos. */
void iql_where_at(parser *ps, size_t pos, int *line, int *col);
/* "found X, expected what at line L, char C" into ps->err (the first error only); -1. */
int iql_expected(parser *ps, const char *what);
/* "error parsing query: <fmt>" into ps->err (the first error only); -1. */
int iql_fail(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
