/* pql_lex + pql_parse: the accepted subset builds the expected tree (selectors with
 * matchers, ranges and offsets, functions, aggregations with grouping before or after,
 * precedence and associativity), Prometheus' type checks at parse time, the refusals
 * of what the subset leaves out (each naming it), positions in messages, and the
 * limits (length, depth, matchers). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "query/promql/pql_lex.h"
#include "query/promql/pql_parse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pql_node *ok(const char *q)
{
    pql_node *n = NULL;
    char err[512];
    int rc = pql_parse(q, strlen(q), &n, err, sizeof err);
    if (rc != 0)
        fail_msg("'%s' refused: %s", q, err);
    return n;
}

static void bad(const char *q, const char *want)
{
    pql_node *n = NULL;
    char err[512];
    int rc = pql_parse(q, strlen(q), &n, err, sizeof err);
    if (rc == 0)
        fail_msg("'%s' accepted", q);
    assert_null(n);
    if (!strstr(err, want))
        fail_msg("'%s': error '%s' lacks '%s'", q, err, want);
}

static void test_selectors(void **state)
{
    (void)state;
    pql_node *n = ok("env_temp{device=\"d1\", site=~'a|b', x!=`raw\\`, y!~\"z\",}");
    assert_int_equal(n->kind, PQL_SELECTOR);
    assert_int_equal(n->type, PQL_VECTOR);
    assert_int_equal(n->nmatchers, 5);
    assert_string_equal(n->matchers[0].name, "__name__");
    assert_string_equal(n->matchers[0].value, "env_temp");
    assert_int_equal(n->matchers[2].op, PQL_M_RE);
    assert_string_equal(n->matchers[3].value, "raw\\");
    assert_int_equal(n->matchers[3].op, PQL_M_NEQ);
    assert_int_equal(n->matchers[4].op, PQL_M_NRE);
    pql_free(n);

    n = ok("{__name__=~\"env_.*\"}[1h30m] offset 5m");
    assert_int_equal(n->type, PQL_MATRIX);
    assert_int_equal(n->range_ms, 90 * 60000);
    assert_int_equal(n->offset_ms, 300000);
    pql_free(n);
    n = ok("a:b offset -1m");
    assert_int_equal(n->offset_ms, -60000);
    pql_free(n);
    n = ok("x[500ms]");
    assert_int_equal(n->range_ms, 500);
    pql_free(n);

    bad("{}", "at least one non-empty matcher");
    bad("{a=\"\"}", "at least one non-empty matcher");
    bad("{a=~\".*\"}", "at least one non-empty matcher");
    bad("x{a=\"b\"", "expected \",\" or \"}\"");
    bad("x{a}", "expected one of");
    bad("x{a=b}", "expected string");
    bad("x[5]", "positive duration");
    bad("x[0s]", "positive duration");
    bad("x[5m:1m]", "subqueries");
    bad("x offset 5m[5m]", "no offset modifiers allowed before range");
    bad("x @ 100", "@ modifier");
    bad("x{a=\"\\q\"}", "bad escape");
    bad("x{a=\"unterminated}", "unterminated quoted string");
}

static void test_functions_and_aggregations(void **state)
{
    (void)state;
    pql_node *n = ok("rate(env_cnt[5m])");
    assert_int_equal(n->kind, PQL_CALL);
    assert_int_equal(n->func, PQL_F_RATE);
    assert_int_equal(n->type, PQL_VECTOR);
    pql_free(n);
    n = ok("quantile_over_time(0.9, env_temp[1h])");
    assert_int_equal(n->func, PQL_F_QUANTILE_OT);
    assert_int_equal(n->nargs, 2);
    assert_true(n->args[0]->num == 0.9);
    pql_free(n);
    n = ok("sum by (site, device) (increase(x[1m]))");
    assert_int_equal(n->kind, PQL_AGG);
    assert_int_equal(n->agg, PQL_A_SUM);
    assert_int_equal(n->ngrouping, 2);
    assert_string_equal(n->grouping[1], "device");
    assert_false(n->without);
    pql_free(n);
    n = ok("avg(x) without (device)");
    assert_int_equal(n->agg, PQL_A_AVG);
    assert_true(n->without);
    pql_free(n);
    n = ok("count(sum(x))"); /* "sum" followed by "(" is the operator, "sum" alone a metric */
    assert_int_equal(n->args[0]->kind, PQL_AGG);
    pql_free(n);
    n = ok("sum + 1");
    assert_int_equal(n->args[0]->kind, PQL_SELECTOR);
    pql_free(n);

    bad("rate(x)", "expected type range vector in call to function \"rate\", got instant vector");
    bad("rate(x[1m], 2)", "expected 1 argument(s)");
    bad("quantile_over_time(x[1m])", "expected 2 argument(s)");
    bad("quantile_over_time(x, x[1m])", "expected type scalar");
    bad("sum(x[5m])", "expected type instant vector in aggregation expression, got range vector");
    bad("sum by (a) (x) by (b)", "grouping labels twice");
    bad("irate(x[5m])", "function \"irate\" is not in bucketdb's PromQL subset");
    bad("topk(3, x)", "aggregation \"topk\" is not in bucketdb's PromQL subset");
    bad("sum(x, y)", "takes one argument");
}

/* Evaluates a constant expression through the tree (no source needed). */
static double num(const pql_node *n)
{
    switch (n->kind) {
    case PQL_NUMBER:
        return n->num;
    case PQL_NEG:
        return -num(n->args[0]);
    case PQL_BINARY: {
        double a = num(n->args[0]), b = num(n->args[1]);
        switch (n->op) {
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
            return a == b;
        case PQL_B_NE:
            return a != b;
        case PQL_B_GT:
            return a > b;
        case PQL_B_LT:
            return a < b;
        case PQL_B_GE:
            return a >= b;
        case PQL_B_LE:
            return a <= b;
        default:
            return NAN;
        }
    }
    default:
        return NAN;
    }
}

static void test_arithmetic(void **state)
{
    (void)state;
    static const struct {
        const char *q;
        double v;
    } cases[] = {
        {"1+1", 2},       {"1 + 2 * 3", 7}, {"(1 + 2) * 3", 9}, {"2 ^ 3 ^ 2", 512},
        {"-2 ^ 2", -4},   {"2 ^ -1", 0.5},  {"10 - 4 - 3", 3},  {"7 % 4", 3},
        {"1e3 / 4", 250}, {"0x10", 16},     {".5 + 1", 1.5},    {"- - 3", 3},
        {"+5", 5},        {"8 / 2 / 2", 2}, {"1 # comment", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pql_node *n = ok(cases[i].q);
        assert_int_equal(n->type, PQL_SCALAR);
        if (num(n) != cases[i].v)
            fail_msg("'%s' = %g, want %g", cases[i].q, num(n), cases[i].v);
        pql_free(n);
    }
    pql_node *n = ok("Inf");
    assert_true(isinf(n->num) && n->num > 0);
    pql_free(n);
    n = ok("-inf");
    assert_true(isinf(n->num) && n->num < 0);
    pql_free(n);
    n = ok("NaN");
    assert_true(isnan(n->num));
    pql_free(n);
    n = ok("x * 2");
    assert_int_equal(n->type, PQL_VECTOR);
    pql_free(n);
    n = ok("-x");
    assert_int_equal(n->kind, PQL_NEG);
    assert_int_equal(n->type, PQL_VECTOR);
    pql_free(n);

    bad("x[5m] * 2", "only scalar and instant vector");
    bad("-x[5m]", "unary expression only allowed");
    bad("1 +", "unexpected end of input");
    bad("(1", "expected \")\"");
    bad("1 2", "unexpected \"2\" after the expression");
    bad("5m", "unexpected duration");
    bad("\"str\"", "string literals");
    bad("", "no expression found");
    bad("   ", "no expression found");
    bad("1 $ 2", "unexpected character");
    bad("1 ! 2", "after '!'");
}

/* The shape of a tree as text: (op l r), selectors by metric name, numbers as %g. */
static void shape(const pql_node *n, char *buf, size_t cap)
{
    size_t len = strlen(buf);
    if (n->kind == PQL_BINARY) {
        snprintf(buf + len, cap - len, "(%s ", pql_binop_name(n->op));
        shape(n->args[0], buf, cap);
        strncat(buf, " ", cap - strlen(buf) - 1);
        shape(n->args[1], buf, cap);
        strncat(buf, ")", cap - strlen(buf) - 1);
    } else if (n->kind == PQL_NEG) {
        strncat(buf, "(neg ", cap - len - 1);
        shape(n->args[0], buf, cap);
        strncat(buf, ")", cap - strlen(buf) - 1);
    } else if (n->kind == PQL_SELECTOR) {
        snprintf(buf + len, cap - len, "%s", n->matchers[0].value);
    } else if (n->kind == PQL_NUMBER) {
        snprintf(buf + len, cap - len, "%g", n->num);
    } else {
        snprintf(buf + len, cap - len, "?");
    }
}

static void test_binary_operators(void **state)
{
    (void)state;
    /* Prometheus' precedence: or < and unless < comparisons < + - < * / % < ^ */
    static const struct {
        const char *q, *tree;
    } cases[] = {
        {"a or b and c", "(or a (and b c))"},
        {"a and b or c", "(or (and a b) c)"},
        {"a unless b or c and d", "(or (unless a b) (and c d))"},
        {"a and b > 1", "(and a (> b 1))"},
        {"a > b + 1", "(> a (+ b 1))"},
        {"a + b * c", "(+ a (* b c))"},
        {"a - b - c", "(- (- a b) c)"},
        {"a / b % c", "(% (/ a b) c)"},
        {"a ^ b ^ c", "(^ a (^ b c))"},
        {"-a ^ 2", "(neg (^ a 2))"},
        {"a == b != c", "(!= (== a b) c)"},
        {"a <= b >= c < d > e", "(> (< (>= (<= a b) c) d) e)"},
        {"(a or b) and c", "(and (or a b) c)"},
        {"a AND b Or c UNLESS d", "(or (and a b) (unless c d))"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pql_node *n = ok(cases[i].q);
        char buf[256] = "";
        shape(n, buf, sizeof buf);
        if (strcmp(buf, cases[i].tree))
            fail_msg("'%s' parsed as %s, want %s", cases[i].q, buf, cases[i].tree);
        assert_int_equal(n->type, PQL_VECTOR);
        pql_free(n);
    }

    pql_node *n = ok("a / on(device, site) group_left(host) b");
    assert_int_equal(n->op, PQL_B_DIV);
    assert_true(n->on);
    assert_int_equal(n->nmatch, 2);
    assert_string_equal(n->match[1], "site");
    assert_int_equal(n->card, PQL_CARD_MANY_TO_ONE);
    assert_int_equal(n->ninclude, 1);
    assert_string_equal(n->include[0], "host");
    pql_free(n);
    n = ok("a > bool ignoring(x) b");
    assert_true(n->bool_mod);
    assert_false(n->on);
    assert_int_equal(n->nmatch, 1);
    assert_int_equal(n->card, PQL_CARD_ONE_TO_ONE);
    pql_free(n);
    n = ok("a * on() group_right b");
    assert_true(n->on);
    assert_int_equal(n->nmatch, 0);
    assert_int_equal(n->card, PQL_CARD_ONE_TO_MANY);
    assert_int_equal(n->ninclude, 0);
    pql_free(n);
    n = ok("a ^ ignoring(x) b"); /* ^ takes modifiers too */
    assert_int_equal(n->nmatch, 1);
    pql_free(n);
    n = ok("sum(a) - on() group_left 1"); /* grouping without labels between vector and scalar */
    assert_int_equal(n->type, PQL_VECTOR);
    pql_free(n);
    n = ok("2 == bool 1 + 1");
    assert_int_equal(n->type, PQL_SCALAR);
    assert_true(num(n) == 1);
    pql_free(n);
    n = ok("1 < bool 2 > bool 0");
    assert_true(num(n) == 1);
    pql_free(n);

    /* Prometheus' checks, at the operator or at the expression's start */
    bad("1 > 2", "1:3: parse error: comparisons between scalars must use BOOL modifier");
    bad("x + bool y", "1:3: parse error: bool modifier can only be used on comparison operators");
    bad("x and 1",
        "1:1: parse error: set operator \"and\" not allowed in binary scalar expression");
    bad("1 or x", "set operator \"or\" not allowed in binary scalar expression");
    bad("sum(x) + on(a) 1",
        "1:1: parse error: vector matching only allowed between instant vectors");
    bad("x or on(a) group_left y", "1:1: parse error: no grouping allowed for \"or\" operation");
    bad("x * on(a) group_left(b, a) y",
        "1:3: parse error: label \"a\" must not occur in ON and GROUP clause at once");
    bad("x * group_left y", "1:5: parse error: unexpected \"group_left\": it needs on(...)");
    bad("x / on y", "1:8: parse error: unexpected \"y\" in grouping opts, expected \"(\"");
    bad("x / on(a b",
        "1:10: parse error: unexpected \"b\" in grouping opts, expected \",\" or \")\"");
    bad("x / ignoring(1) y", "expected label");
    bad("x[5m] > 1",
        "1:1: parse error: binary expression must contain only scalar and instant vector");
    bad("x > rate(y[1m])[5m]", "ranges only allowed for vector selectors");
    bad("x >", "1:4: parse error: unexpected end of input");
    bad("x > bool", "unexpected end of input");
    bad("x = y", "unexpected \"=\" after the expression");
    bad("a + b\n  > bool c and 1", "1:1: parse error: set operator \"and\"");
    bad("a and\n 1 > 2", "2:4: parse error: comparisons between scalars");
}

static void test_positions_and_limits(void **state)
{
    (void)state;
    bad("sum(x) + rate(y)", "1:15: parse error: expected type range vector");
    bad("1 +\n  )", "2:3: parse error");
    char *deep = malloc(PQL_MAX_DEPTH * 2 + 8);
    size_t k = 0;
    for (int i = 0; i < PQL_MAX_DEPTH + 2; i++)
        deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < PQL_MAX_DEPTH + 2; i++)
        deep[k++] = ')';
    deep[k] = '\0';
    bad(deep, "nested deeper than 64 levels");
    /* unary minus and ^ recurse too */
    memset(deep, '-', PQL_MAX_DEPTH + 2);
    strcpy(deep + PQL_MAX_DEPTH + 2, "1");
    bad(deep, "nested deeper");
    free(deep);

    char *longq = malloc(PQL_MAX_QUERY_BYTES + 2);
    memset(longq, ' ', PQL_MAX_QUERY_BYTES + 1);
    longq[0] = '1';
    longq[PQL_MAX_QUERY_BYTES + 1] = '\0';
    bad(longq, "query longer than 16384 bytes");
    free(longq);

    char many[2048] = "x{";
    for (int i = 0; i < PQL_MAX_MATCHERS; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "l%d=\"v\",", i);
    strcat(many, "}");
    bad(many, "more than 32 label matchers");

    pql_node *n;
    char err[64];
    assert_int_equal(pql_parse("a\0b", 3, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, "NUL"));
}

static void test_durations(void **state)
{
    (void)state;
    int64_t ms;
    assert_int_equal(pql_parse_duration("1h30m", 5, &ms), 0);
    assert_int_equal(ms, 5400000);
    assert_int_equal(pql_parse_duration("2d", 2, &ms), 0);
    assert_int_equal(ms, 2 * 86400000LL);
    assert_int_equal(pql_parse_duration("1w", 2, &ms), 0);
    assert_int_equal(ms, 7 * 86400000LL);
    assert_int_equal(pql_parse_duration("1s500ms", 7, &ms), 0);
    assert_int_equal(ms, 1500);
    assert_int_equal(pql_parse_duration("5x", 2, &ms), -1);
    assert_int_equal(pql_parse_duration("m", 1, &ms), -1);
    assert_int_equal(pql_parse_duration("", 0, &ms), -1);
    assert_int_equal(pql_parse_duration("101y", 4, &ms), -1);
    assert_int_equal(pql_parse_duration("99999999999999999999s", 21, &ms), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selectors),
        cmocka_unit_test(test_functions_and_aggregations),
        cmocka_unit_test(test_arithmetic),
        cmocka_unit_test(test_binary_operators),
        cmocka_unit_test(test_positions_and_limits),
        cmocka_unit_test(test_durations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
