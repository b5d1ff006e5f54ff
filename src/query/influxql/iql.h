/* iql: the InfluxQL subset bucketdb answers on /query (docs/INFLUX.md): a lexer and a
 * recursive-descent parser from statement text to an AST. No engine dependency: the
 * executor (iql_exec.h) turns the AST into engine calls.
 *
 * Every node lives in the query's arena and is freed at once by iql_free; regular
 * expressions are compiled here (POSIX extended), so a bad one is a parse error. */
#ifndef BDB_IQL_H
#define BDB_IQL_H

#include <regex.h>
#include <stddef.h>
#include <stdint.h>

/* Parser limits (docs/INFLUX.md#limits): a bigger input is refused with an error. */
#define IQL_MAX_TEXT 65536 /* bytes of query text */
#define IQL_MAX_STMTS 32   /* statements separated by ';' */
#define IQL_MAX_DEPTH 64   /* nesting of parentheses and operators in a condition */
#define IQL_MAX_LIST 256   /* select fields, sources, GROUP BY tags, IN values */
#define IQL_MAX_COUNT 1000000000LL
#define IQL_MAX_REGEX 1024 /* bytes of one regular expression */
#define IQL_MAX_REGEX_COPIES                                                                       \
    1000 /* product of nested repetitions (iql_parse.c) */ /* LIMIT, OFFSET, SLIMIT, SOFFSET,      \
                                                              fill(N)'s magnitude */

/* Condition operators. */
enum iql_op {
    IQL_AND,
    IQL_OR,
    IQL_EQ,
    IQL_NE,
    IQL_RE,
    IQL_NRE,
    IQL_LT,
    IQL_LE,
    IQL_GT,
    IQL_GE,
    IQL_ADD,
    IQL_SUB
};

enum iql_ekind {
    IQL_X_BIN,   /* op, l, r */
    IQL_X_IDENT, /* s: a tag, a field or time */
    IQL_X_STR,   /* s: a 'string' */
    IQL_X_NUM,   /* num (isint: written without '.' or exponent; ival then exact) */
    IQL_X_DUR,   /* ival: a duration literal, nanoseconds */
    IQL_X_REGEX, /* s (the source), re */
    IQL_X_NOW,   /* now() */
    IQL_X_BOOL,  /* ival 0 or 1 */
};

typedef struct iql_expr {
    enum iql_ekind kind;
    enum iql_op op;
    struct iql_expr *l, *r;
    const char *s;
    regex_t *re;
    double num;
    int64_t ival;
    int isint;
} iql_expr;

/* A name or a pattern: a measurement in FROM, a field in SELECT or in a call. */
enum iql_nkind { IQL_N_NAME, IQL_N_REGEX, IQL_N_WILD };
typedef struct iql_name {
    enum iql_nkind kind;
    const char *name; /* NAME: the measurement or field; REGEX: the source */
    regex_t *re;
} iql_name;

/* Functions of SELECT. */
enum iql_func {
    IQL_FN_NONE,
    IQL_FN_MEAN,
    IQL_FN_MEDIAN,
    IQL_FN_MIN,
    IQL_FN_MAX,
    IQL_FN_SUM,
    IQL_FN_COUNT,
    IQL_FN_STDDEV,
    IQL_FN_SPREAD,
    IQL_FN_FIRST,
    IQL_FN_LAST,
    IQL_FN_PERCENTILE
};
const char *iql_func_name(enum iql_func f);

typedef struct iql_field {
    enum iql_func func; /* NONE: a raw field (or tag) */
    iql_name arg;
    double param; /* percentile's N, 0..100 */
    const char *alias;
} iql_field;

enum iql_fill { IQL_FILL_NULL, IQL_FILL_NONE, IQL_FILL_PREVIOUS, IQL_FILL_LINEAR, IQL_FILL_VALUE };

enum iql_skind {
    IQL_SELECT,
    IQL_SHOW_DATABASES,
    IQL_SHOW_MEASUREMENTS,
    IQL_SHOW_TAG_KEYS,
    IQL_SHOW_TAG_VALUES,
    IQL_SHOW_FIELD_KEYS,
    IQL_SHOW_SERIES,
    IQL_SHOW_RETENTION_POLICIES,
    IQL_CREATE_DATABASE,
};

typedef struct iql_stmt {
    enum iql_skind kind;
    const char *on;    /* ON db / CREATE DATABASE's name; NULL if absent */
    iql_field *fields; /* SELECT */
    size_t nfields;
    iql_name *from; /* FROM; SHOW MEASUREMENTS' WITH MEASUREMENT goes here too */
    size_t nfrom;
    iql_expr *where; /* NULL: none */
    /* GROUP BY */
    int64_t every_ns, offset_ns; /* time(every[, offset]); every 0 = no time grouping */
    const char **group_tags;
    size_t ngroup_tags;
    int group_all_tags; /* GROUP BY * */
    enum iql_fill fill;
    double fill_value;
    int desc;                               /* ORDER BY time DESC */
    int64_t limit, offset, slimit, soffset; /* 0 = none */
    /* SHOW TAG VALUES WITH KEY: op is EQ, NE, RE, NRE or IN (keys listed) */
    enum iql_op key_op;
    int key_in;
    const char **keys;
    size_t nkeys;
    regex_t *key_re;
} iql_stmt;

typedef struct iql_query {
    iql_stmt *stmts;
    size_t n;
    void *arena; /* private */
} iql_query;

/* Parses text (len bytes, may hold no NUL) into q. 0, or -1 with err filled in
 * InfluxDB's words ("error parsing query: found X, expected Y at line L, char C"); q
 * must be freed with iql_free in both cases. */
int iql_parse(const char *text, size_t len, iql_query *q, char *err, size_t errlen);
void iql_free(iql_query *q);

/* Duration text ("10s", "1h30m") to nanoseconds: 0, or -1 when not one. */
int iql_parse_duration(const char *s, size_t n, int64_t *ns);

#endif
