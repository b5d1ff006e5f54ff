/* pql_parse: a PromQL expression -> syntax tree, type-checked as Prometheus does at
 * parse time (docs/PROMQL.md lists the subset). No engine dependency: the evaluator
 * (pql_eval.h) walks the tree against any sample source. */
#ifndef BDB_PQL_PARSE_H
#define BDB_PQL_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* Limits (docs/PROMQL.md#limits): a deeper or longer expression is refused rather
 * than risking the stack or unbounded work. */
#define PQL_MAX_QUERY_BYTES 16384
#define PQL_MAX_DEPTH 64
#define PQL_MAX_MATCHERS 32
#define PQL_MAX_GROUPING 32
#define PQL_MAX_STRING 1024

enum pql_type { PQL_SCALAR, PQL_VECTOR, PQL_MATRIX, PQL_STRING_T };

enum pql_kind { PQL_NUMBER, PQL_STRING, PQL_SELECTOR, PQL_CALL, PQL_AGG, PQL_BINARY, PQL_NEG };

enum pql_match_op { PQL_M_EQ, PQL_M_NEQ, PQL_M_RE, PQL_M_NRE };

typedef struct pql_matcher {
    char *name, *value;
    enum pql_match_op op;
} pql_matcher;

enum pql_func {
    PQL_F_RATE,
    PQL_F_INCREASE,
    PQL_F_AVG_OT,
    PQL_F_MIN_OT,
    PQL_F_MAX_OT,
    PQL_F_SUM_OT,
    PQL_F_COUNT_OT,
    PQL_F_LAST_OT,
    PQL_F_QUANTILE_OT,
};

enum pql_aggop { PQL_A_SUM, PQL_A_AVG, PQL_A_MIN, PQL_A_MAX, PQL_A_COUNT };

enum pql_binop {
    PQL_B_ADD,
    PQL_B_SUB,
    PQL_B_MUL,
    PQL_B_DIV,
    PQL_B_MOD,
    PQL_B_POW,
    /* comparisons: filter, or 0/1 with bool */
    PQL_B_EQ,
    PQL_B_NE,
    PQL_B_GT,
    PQL_B_LT,
    PQL_B_GE,
    PQL_B_LE,
    /* set operators, between two instant vectors only */
    PQL_B_AND,
    PQL_B_OR,
    PQL_B_UNLESS,
};

/* Vector matching of a binary operation: one-to-one, group_left (many-to-one),
 * group_right (one-to-many); set operators are many-to-many. */
enum pql_card { PQL_CARD_ONE_TO_ONE, PQL_CARD_MANY_TO_ONE, PQL_CARD_ONE_TO_MANY };

typedef struct pql_node pql_node;
struct pql_node {
    enum pql_kind kind;
    enum pql_type type;
    size_t pos; /* byte offset in the query, for messages */
    double num; /* PQL_NUMBER */
    char *str;  /* PQL_STRING */
    /* PQL_SELECTOR: the metric name is a __name__ matcher among the others */
    pql_matcher *matchers;
    size_t nmatchers;
    int64_t range_ms; /* 0: an instant selector */
    int64_t offset_ms;
    /* PQL_CALL */
    enum pql_func func;
    pql_node *args[2];
    size_t nargs;
    /* PQL_AGG: by (or without) the grouping labels; expr in args[0] */
    enum pql_aggop agg;
    int without;
    char **grouping;
    size_t ngrouping;
    /* PQL_BINARY (lhs args[0], rhs args[1]) and PQL_NEG (args[0]) */
    enum pql_binop op;
    int bool_mod; /* a comparison answering 0/1 instead of filtering */
    int on;       /* on(match...): match on those labels; else ignoring(match...) */
    char **match;
    size_t nmatch;
    enum pql_card card;
    char **include; /* group_left/group_right(include...): copied from the "one" side */
    size_t ninclude;
};

/* Parses q (len bytes): 0 with *out set (free with pql_free), or -1 with err filled
 * as Prometheus words it ("1:5: parse error: ..."). */
int pql_parse(const char *q, size_t len, pql_node **out, char *err, size_t errlen);
void pql_free(pql_node *n);
const char *pql_type_name(enum pql_type t);
const char *pql_func_name(enum pql_func f);
/* The operator as written ("+", "==", "and"). */
const char *pql_binop_name(enum pql_binop op);
int pql_binop_is_cmp(enum pql_binop op);
int pql_binop_is_set(enum pql_binop op);

#endif
