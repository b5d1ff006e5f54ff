/* iql_parse: the statements Grafana, the influx CLI and the client libraries send
 * parse into the expected AST; bad input gets InfluxDB's error shape with the place;
 * every limit of iql.h is enforced. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "query/influxql/iql.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char err[400];

static iql_query parse_ok(const char *s)
{
    iql_query q;
    int rc = iql_parse(s, strlen(s), &q, err, sizeof err);
    if (rc != 0)
        fail_msg("%s: %s", s, err);
    return q;
}

static void parse_bad(const char *s, const char *want)
{
    iql_query q;
    int rc = iql_parse(s, strlen(s), &q, err, sizeof err);
    iql_free(&q);
    if (rc == 0)
        fail_msg("parsed: %s", s);
    if (!strstr(err, want))
        fail_msg("%s: error '%s' lacks '%s'", s, err, want);
    assert_non_null(strstr(err, "error parsing query: "));
}

static void test_grafana_panel(void **state)
{
    (void)state;
    iql_query q = parse_ok("SELECT mean(\"value\") FROM \"cpu\" WHERE (\"host\" =~ /^(a|b)$/) AND "
                           "time >= 1699920000000ms and time <= 1699923600000ms GROUP BY "
                           "time(10s), \"host\" fill(null)");
    assert_int_equal(q.n, 1);
    iql_stmt *st = &q.stmts[0];
    assert_int_equal(st->kind, IQL_SELECT);
    assert_int_equal(st->nfields, 1);
    assert_int_equal(st->fields[0].func, IQL_FN_MEAN);
    assert_string_equal(st->fields[0].arg.name, "value");
    assert_string_equal(st->from[0].name, "cpu");
    assert_int_equal(st->every_ns, 10000000000LL);
    assert_int_equal(st->ngroup_tags, 1);
    assert_string_equal(st->group_tags[0], "host");
    assert_int_equal(st->fill, IQL_FILL_NULL);
    iql_expr *w = st->where;
    assert_int_equal(w->kind, IQL_X_BIN);
    assert_int_equal(w->op, IQL_AND);
    /* (host =~ ...) AND time >= ... AND time <= ...: left-associative */
    assert_int_equal(w->r->op, IQL_LE);
    assert_int_equal(w->r->r->kind, IQL_X_DUR);
    assert_int_equal(w->r->r->ival, 1699923600000LL * 1000000);
    assert_int_equal(w->l->l->op, IQL_RE);
    assert_int_equal(regexec(w->l->l->r->re, "a", 0, NULL, 0), 0);
    assert_int_not_equal(regexec(w->l->l->r->re, "c", 0, NULL, 0), 0);
    iql_free(&q);
}

static void test_select_clauses(void **state)
{
    (void)state;
    iql_query q =
        parse_ok("select MEAN(temp) as t, percentile(temp, 95.5), count(*), max(/^t/) from env, "
                 "\"fleet\".\"autogen\".\"m2\", /^x/ where time > now() - 6h and device != 'a' or "
                 "(site = 'b') group by time(5m, -1m), * fill(-2.5) order by time desc limit 10 "
                 "offset 2 slimit 3 soffset 4; SELECT * FROM m");
    assert_int_equal(q.n, 2);
    iql_stmt *st = &q.stmts[0];
    assert_int_equal(st->nfields, 4);
    assert_string_equal(st->fields[0].alias, "t");
    assert_int_equal(st->fields[1].func, IQL_FN_PERCENTILE);
    assert_true(st->fields[1].param == 95.5);
    assert_int_equal(st->fields[2].arg.kind, IQL_N_WILD);
    assert_int_equal(st->fields[3].arg.kind, IQL_N_REGEX);
    assert_int_equal(st->nfrom, 3);
    assert_string_equal(st->from[1].name, "m2");
    assert_int_equal(st->from[2].kind, IQL_N_REGEX);
    assert_int_equal(st->where->op, IQL_OR);
    assert_int_equal(st->where->l->l->r->kind, IQL_X_BIN); /* now() - 6h */
    assert_int_equal(st->where->l->l->r->op, IQL_SUB);
    assert_int_equal(st->every_ns, 300000000000LL);
    assert_int_equal(st->offset_ns, -60000000000LL);
    assert_true(st->group_all_tags);
    assert_int_equal(st->fill, IQL_FILL_VALUE);
    assert_true(st->fill_value == -2.5);
    assert_true(st->desc);
    assert_int_equal(st->limit, 10);
    assert_int_equal(st->offset, 2);
    assert_int_equal(st->slimit, 3);
    assert_int_equal(st->soffset, 4);
    assert_int_equal(q.stmts[1].fields[0].arg.kind, IQL_N_WILD);
    iql_free(&q);
}

static void test_show(void **state)
{
    (void)state;
    iql_query q = parse_ok("SHOW DATABASES; SHOW MEASUREMENTS LIMIT 1; SHOW MEASUREMENTS WITH "
                           "MEASUREMENT =~ /e/ WHERE site = 'x'; SHOW TAG KEYS FROM \"env\"; "
                           "SHOW TAG VALUES FROM env WITH KEY = \"site\" WHERE device =~ /d1/ "
                           "LIMIT 5; SHOW TAG VALUES WITH KEY IN (site, device); SHOW TAG "
                           "VALUES WITH KEY =~ /s.*/; SHOW FIELD KEYS FROM env; SHOW SERIES "
                           "FROM env WHERE site='x' LIMIT 3 OFFSET 1; SHOW RETENTION POLICIES "
                           "ON fleet; CREATE DATABASE \"x\" WITH DURATION 1d");
    assert_int_equal(q.n, 11);
    assert_int_equal(q.stmts[0].kind, IQL_SHOW_DATABASES);
    assert_int_equal(q.stmts[1].kind, IQL_SHOW_MEASUREMENTS);
    assert_int_equal(q.stmts[1].limit, 1);
    assert_int_equal(q.stmts[2].from[0].kind, IQL_N_REGEX);
    assert_non_null(q.stmts[2].where);
    assert_int_equal(q.stmts[3].kind, IQL_SHOW_TAG_KEYS);
    assert_int_equal(q.stmts[4].kind, IQL_SHOW_TAG_VALUES);
    assert_int_equal(q.stmts[4].key_op, IQL_EQ);
    assert_string_equal(q.stmts[4].keys[0], "site");
    assert_int_equal(q.stmts[4].limit, 5);
    assert_true(q.stmts[5].key_in);
    assert_int_equal(q.stmts[5].nkeys, 2);
    assert_non_null(q.stmts[6].key_re);
    assert_int_equal(q.stmts[7].kind, IQL_SHOW_FIELD_KEYS);
    assert_int_equal(q.stmts[8].kind, IQL_SHOW_SERIES);
    assert_int_equal(q.stmts[8].offset, 1);
    assert_string_equal(q.stmts[9].on, "fleet");
    assert_int_equal(q.stmts[10].kind, IQL_CREATE_DATABASE);
    assert_string_equal(q.stmts[10].on, "x");
    iql_free(&q);
}

static void test_literals(void **state)
{
    (void)state;
    iql_query q = parse_ok("SELECT v FROM m WHERE time >= '2023-11-14T00:00:00Z' AND time < "
                           "1699920000000000000 AND t = 'it\\'s' AND u = 1.5e3 AND \"we\\\"ird\" "
                           "-- a comment\n = 'x'");
    iql_expr *w = q.stmts[0].where;
    assert_int_equal(w->r->l->kind, IQL_X_IDENT);
    assert_int_equal(w->l->r->r->num, 1500);
    assert_string_equal(w->l->l->r->r->s, "it's");
    assert_int_equal(w->l->l->l->r->r->ival, 1699920000000000000LL);
    assert_true(w->l->l->l->r->r->isint);
    iql_free(&q);
    int64_t ns;
    assert_int_equal(iql_parse_duration("1h30m", 5, &ns), 0);
    assert_int_equal(ns, 5400000000000LL);
    assert_int_equal(iql_parse_duration("10x", 3, &ns), -1);
    assert_int_equal(iql_parse_duration("99999999999999999999s", 21, &ns), -1);
}

static void test_errors(void **state)
{
    (void)state;
    parse_bad("SELEC x FROM m", "found SELEC, expected SELECT, SHOW, CREATE at line 1, char 1");
    parse_bad("SELECT x FROM", "found EOF, expected identifier at line 1, char 14");
    parse_bad("SELECT x\nFROM m WHERE", "at line 2, char 13");
    parse_bad("SELECT foo(x) FROM m", "undefined function foo()");
    parse_bad("SELECT mean(x), x FROM m", "mixing aggregate and non-aggregate");
    parse_bad("SELECT mean(x) FROM m GROUP BY time(0s)", "must be positive");
    parse_bad("SELECT mean(x) FROM m GROUP BY time(1q)", "invalid duration");
    parse_bad("SELECT x FROM m tz('Europe/Paris')", "tz() is not supported");
    parse_bad("SELECT x FROM m WHERE a =~ /(/", "invalid regular expression");
    parse_bad("SELECT x FROM m WHERE a = 'x", "unterminated string");
    parse_bad("SELECT x FROM m LIMIT -1", "expected integer");
    parse_bad("SELECT x FROM m LIMIT 1000000001", "LIMIT must be 0..1000000000");
    parse_bad("SELECT percentile(x, 101) FROM m", "percentile's N must be 0..100");
    parse_bad("SELECT percentile(x) FROM m", "expected ,");
    parse_bad("SELECT mean(max(x)) FROM m", "nested function calls");
    parse_bad("SHOW TAG VALUES FROM m", "expected WITH");
    parse_bad("SHOW FOO", "expected DATABASES");
    parse_bad("", "empty query");
    parse_bad("SELECT x FROM m WHERE a = 'b' extra", "expected ;");
    parse_bad("SELECT x FROM m WHERE a = 99999999999999999999", "integer out of range");
    parse_bad("SELECT x INTO y FROM m", "INTO is not supported");
    parse_bad("SELECT mean(x) FROM m fill(sideways)", "expected null, none, previous");
    /* regexes that would make regcomp copy a part exponentially often */
    parse_bad("SELECT x FROM m WHERE a =~ /a++++++++++++++++++++++++++++++++++++++++++/",
              "a repetition directly after another");
    parse_bad("SELECT x FROM m WHERE a =~ /((((((((((a+)+)+)+)+)+)+)+)+)+)+/",
              "more than 1000 times");
    parse_bad("SELECT x FROM m WHERE a =~ /(a{100}){11}/", "more than 1000 times");
    iql_query q = parse_ok("SELECT x FROM m WHERE a =~ /^(a{10}|[+*]+){9}x?[{]\\++$/");
    iql_free(&q);
}

static void test_limits(void **state)
{
    (void)state;
    char *s = malloc(IQL_MAX_TEXT + 100);
    /* nesting: (((...a = 'b'...))) at the limit, then one level past it */
    for (int depth = IQL_MAX_DEPTH; depth <= IQL_MAX_DEPTH + 1; depth++) {
        size_t n = (size_t)sprintf(s, "SELECT x FROM m WHERE ");
        for (int i = 0; i < depth; i++)
            s[n++] = '(';
        n += (size_t)sprintf(s + n, "a = 'b'");
        for (int i = 0; i < depth; i++)
            s[n++] = ')';
        s[n] = 0;
        if (depth == IQL_MAX_DEPTH) {
            iql_query ok = parse_ok(s);
            iql_free(&ok);
        } else {
            parse_bad(s, "nested more than 64 deep");
        }
    }
    size_t n;
    /* text size */
    memset(s, ' ', IQL_MAX_TEXT + 1);
    memcpy(s, "SHOW DATABASES", 14);
    iql_query q;
    assert_int_equal(iql_parse(s, IQL_MAX_TEXT + 1, &q, err, sizeof err), -1);
    assert_non_null(strstr(err, "more than the 65536 allowed"));
    iql_free(&q);
    assert_int_equal(iql_parse(s, IQL_MAX_TEXT, &q, err, sizeof err), 0);
    iql_free(&q);
    /* statements: 32 parse, 33 do not */
    n = 0;
    for (int i = 0; i < IQL_MAX_STMTS; i++)
        n += (size_t)sprintf(s + n, "SHOW DATABASES;");
    q = parse_ok(s);
    assert_int_equal(q.n, IQL_MAX_STMTS);
    iql_free(&q);
    sprintf(s + n, "SHOW DATABASES");
    parse_bad(s, "more than 32 statements");
    /* fields: 256 parse, 257 do not */
    n = (size_t)sprintf(s, "SELECT a");
    for (int i = 1; i < IQL_MAX_LIST; i++)
        n += (size_t)sprintf(s + n, ",a");
    sprintf(s + n, " FROM m");
    q = parse_ok(s);
    assert_int_equal(q.stmts[0].nfields, IQL_MAX_LIST);
    iql_free(&q);
    sprintf(s + n, ",a FROM m");
    parse_bad(s, "more than 256 fields");
    /* a regex of 1,024 bytes parses, 1,025 do not */
    n = (size_t)sprintf(s, "SHOW MEASUREMENTS WITH MEASUREMENT =~ /");
    memset(s + n, 'x', IQL_MAX_REGEX);
    sprintf(s + n + IQL_MAX_REGEX, "/");
    q = parse_ok(s);
    iql_free(&q);
    memset(s + n, 'x', IQL_MAX_REGEX + 1);
    sprintf(s + n + IQL_MAX_REGEX + 1, "/");
    parse_bad(s, "regular expression longer than 1024 bytes");
    /* a NUL byte inside */
    assert_int_equal(iql_parse("SHOW\0DATABASES", 14, &q, err, sizeof err), -1);
    assert_non_null(strstr(err, "NUL byte"));
    iql_free(&q);
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grafana_panel), cmocka_unit_test(test_select_clauses),
        cmocka_unit_test(test_show),          cmocka_unit_test(test_literals),
        cmocka_unit_test(test_errors),        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
