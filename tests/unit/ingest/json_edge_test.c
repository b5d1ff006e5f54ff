/* Edge cases of the JSON batch format that the main test leaves out: every wrongly
 * typed field is refused per report (never the whole body) with an error naming it,
 * and the accepted reports keep their values. Written for branch coverage of
 * json_ingest.c (issue 8), each case a documented rule of docs/API.md: the time
 * window at and one past its limits, the values an accepted report stores, bodies of
 * none of the three shapes, names quoted in errors, and allocation failure answered
 * NOMEM (never "invalid"). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/timeutil.h"
#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "ingest/json_ingest.h"
#include "model/batch.h"

#include <stdio.h>
#include <string.h>

#define NOW 1700000000000LL

static bdb_json_result R;

/* Ingests one report (wrapped in a list with a good one after it) and returns 1 when
 * the report was refused and the good one kept. */
static int refused(const char *report, const char *want_in_error)
{
    char body[2048];
    snprintf(body, sizeof body,
             "[%s, {\"device\": \"ok\", \"time\": %lld, \"metrics\": {\"m\": 1}}]", report, NOW);
    bdb_batch *b = bdb_batch_new();
    bdb_json_limits lim;
    bdb_json_limits_default(&lim);
    lim.max_future_ms = 60000;
    lim.max_age_ms = 86400000;
    int rc = bdb_json_ingest(body, strlen(body), NOW, &lim, b, &R);
    bdb_batch_free(b);
    if (rc != BDB_OK && !R.accepted)
        return 0;
    int ok = R.fatal == 0 && R.accepted == 1 && R.rejected == 1 && R.first_bad_index == 0;
    if (ok && want_in_error && !strstr(R.first_error, want_in_error)) {
        fprintf(stderr, "error %s lacks %s\n", R.first_error, want_in_error);
        return 0;
    }
    return ok;
}

static int accepted(const char *report)
{
    bdb_batch *b = bdb_batch_new();
    bdb_json_limits lim;
    bdb_json_limits_default(&lim);
    int rc = bdb_json_ingest(report, strlen(report), NOW, &lim, b, &R);
    bdb_batch_free(b);
    return rc == BDB_OK && R.accepted == 1 && R.rejected == 0;
}

static void wrongly_typed_fields(void **state)
{
    (void)state;
    assert_true(refused("1", NULL));     /* a report that is not an object */
    assert_true(refused("\"x\"", NULL)); /* nor a string */
    assert_true(refused("{\"device\": \"d\", \"time\": 1.5, \"metrics\": {\"m\": 1}}", "time"));
    assert_true(refused("{\"device\": \"d\", \"time\": 1e19, \"metrics\": {\"m\": 1}}", "time"));
    assert_true(refused("{\"device\": \"d\", \"time\": -1e19, \"metrics\": {\"m\": 1}}", "time"));
    assert_true(
        refused("{\"device\": \"d\", \"time\": \"yesterday\", \"metrics\": {\"m\": 1}}", "time"));
    assert_true(refused("{\"device\": \"d\", \"time\": true, \"metrics\": {\"m\": 1}}", "time"));
    assert_true(refused("{\"device\": \"d\", \"time\": [1], \"metrics\": {\"m\": 1}}", "time"));
    assert_true(refused("{\"device\": \"d\", \"metrics\": [1]}", "metrics"));
    assert_true(refused("{\"device\": \"d\", \"metrics\": \"m\"}", "metrics"));
    assert_true(accepted("{\"device\": \"d\", \"metrics\": {\"m\": \"1\"}}")); /* an attribute */
    assert_true(refused("{\"device\": \"d\", \"metrics\": {\"m\\u007f\": \"1\"}}", NULL));
    assert_true(refused("{\"device\": \"d\", \"metrics\": {\"m\": null}}", NULL));
    assert_true(refused("{\"device\": \"d\", \"metrics\": {\"m\": {}}}", NULL));
    assert_true(refused("{\"device\": \"d\", \"metrics\": {\"m\": 1}, \"tags\": [\"a\"]}", "tags"));
    assert_true(
        refused("{\"device\": \"d\", \"metrics\": {\"m\": 1}, \"tags\": {\"k\": 1}}", NULL));
    assert_true(refused("{\"device\": \"d\", \"metrics\": {\"m\": 1}, \"state\": 3}", "state"));
    assert_true(refused("{\"device\": \"d\\u0001x\", \"metrics\": {\"m\": 1}}", "device"));
    assert_true(refused("{\"device\": \"d\\u007fx\", \"metrics\": {\"m\": 1}}", "device"));
    assert_true(refused("{\"device\": 7, \"metrics\": {\"m\": 1}}", "device"));
    assert_true(refused("{\"device\": \"d\"}", NULL)); /* neither metrics nor state */
}

static void time_window(void **state)
{
    (void)state;
    char r[256];
    snprintf(r, sizeof r, "{\"device\": \"d\", \"time\": %lld, \"metrics\": {\"m\": 1}}",
             NOW + 60001);
    assert_true(refused(r, NULL)); /* one past max_future_ms */
    snprintf(r, sizeof r, "{\"device\": \"d\", \"time\": %lld, \"metrics\": {\"m\": 1}}",
             (long long)BDB_TS_MIN_MS - 1);
    assert_true(refused(r, "field \"time\": timestamp -9223372036855 ms is outside the "
                           "supported range")); /* one past the stored range */
    snprintf(r, sizeof r, "{\"device\": \"d\", \"time\": %lld, \"metrics\": {\"m\": 1}}",
             (long long)BDB_TS_MAX_MS + 1);
    assert_true(refused(r, "outside the supported range"));
    snprintf(r, sizeof r, "{\"device\": \"d\", \"time\": %lld, \"metrics\": {\"m\": 1}}",
             (long long)BDB_TS_MIN_MS);
    assert_true(accepted(r)); /* at the range's end (no age limit in accepted()) */
    snprintf(r, sizeof r, "{\"device\": \"d\", \"time\": %lld, \"metrics\": {\"m\": 1}}",
             NOW - 86400001);
    assert_true(refused(r, NULL)); /* one past max_age_ms */
    snprintf(r, sizeof r, "{\"device\": \"d\", \"time\": %lld, \"metrics\": {\"m\": 1}}",
             NOW + 60000);
    assert_false(refused(r, NULL)); /* at the limit: kept */
    snprintf(r, sizeof r, "{\"device\": \"d\", \"time\": %lld, \"metrics\": {\"m\": 1}}",
             NOW - 86400000);
    assert_false(refused(r, NULL)); /* exactly max_age_ms old: kept */
    snprintf(r, sizeof r, "{\"device\": \"d\", \"time\": %lld, \"metrics\": {\"m\": 1}}",
             NOW - 86400001);
    assert_true(refused(r, "retention of 86400000 ms"));
}

static void accepted_shapes(void **state)
{
    (void)state;
    assert_true(accepted("{\"device\": \"d\", \"time\": null, \"metrics\": {\"on\": true, "
                         "\"off\": false}, \"tags\": null, \"state\": null}"));
    assert_true(accepted("{\"device\": \"d\", \"state\": \"idle\", \"metrics\": null}"));
    assert_true(accepted("{\"device\": \"d\", \"time\": \"2024-01-15T14:00:00Z\", "
                         "\"metrics\": {\"m\": -0.5}, \"tags\": {\"k\": \"v\"}}"));
}

/* What an accepted report puts in the batch: booleans as 1/0, numbers as given, a
 * state-only report (no "metrics" member at all) with its state and no metric. */
static void stored_values(void **state)
{
    (void)state;
    const char *body =
        "[{\"device\": \"a\", \"time\": 5, \"metrics\": {\"on\": true, \"off\": false, "
        "\"t\": -0.5, \"big\": 100000000000000000000}},"
        " {\"device\": \"b\", \"time\": 6, \"state\": \"idle\"}]";
    bdb_batch *b = bdb_batch_new();
    assert_int_equal(bdb_json_ingest(body, strlen(body), NOW, NULL, b, &R), BDB_OK);
    size_t n;
    const bdb_report *r = bdb_batch_reports(b, &n);
    assert_int_equal(n, 2);
    assert_int_equal(r[0].nmetrics, 4);
    assert_string_equal(r[0].metrics[0].name, "on");
    assert_true(r[0].metrics[0].value == 1.0);
    assert_string_equal(r[0].metrics[1].name, "off");
    assert_true(r[0].metrics[1].value == 0.0);
    assert_true(r[0].metrics[2].value == -0.5);
    assert_true(r[0].metrics[3].value == 1e20);
    assert_null(r[0].state);
    assert_int_equal(r[1].ts_ms, 6);
    assert_int_equal(r[1].nmetrics, 0);
    assert_int_equal(r[1].ntags, 0);
    assert_non_null(r[1].state);
    assert_memory_equal(r[1].state, "idle", 4);
    assert_int_equal(r[1].state_len, 4);
    bdb_batch_free(b);
}

/* A body that is not one of the three shapes is refused whole, nothing kept: a bare
 * scalar as invalid JSON naming the token and its line, a "reports" member that is not an array
 * as a body of the wrong shape. */
static void bodies_of_no_shape(void **state)
{
    (void)state;
    static const struct {
        const char *body, *want;
    } cases[] = {
        {"5", "invalid JSON: '[' or '{' expected near '5' (line 1, column 1)"},
        {"\"x\"", "invalid JSON: '[' or '{' expected near '\"x\"' (line 1, column"},
        {"null", "invalid JSON: '[' or '{' expected near 'null' (line 1, column"},
        {"{\"reports\": 5}", "body must be {\"reports\": [...]}"},
        {"{\"reports\": null}", "body must be {\"reports\": [...]}"},
        {"{\"reports\": {\"device\": \"d\", \"metrics\": {\"m\": 1}}}",
         "body must be {\"reports\": [...]}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bdb_batch *b = bdb_batch_new();
        const char *body = cases[i].body;
        assert_int_equal(bdb_json_ingest(body, strlen(body), NOW, NULL, b, &R), BDB_ERR_INVALID);
        assert_int_equal(R.fatal, 1);
        assert_int_equal(R.accepted, 0);
        if (!strstr(R.first_error, cases[i].want))
            fail_msg("body %s: error '%s' lacks '%s'", body, R.first_error, cases[i].want);
        size_t n;
        bdb_batch_reports(b, &n);
        assert_int_equal(n, 0);
        bdb_batch_free(b);
    }
}

/* A name quoted in an error is one printable line: DEL, control bytes and quotes
 * become '?'. */
static void names_in_errors_are_printable(void **state)
{
    (void)state;
    assert_true(refused("{\"device\": \"d\", \"metrics\": {\"a\\u007fb\": \"x\"}}",
                        "field \"metrics.a?b\": a string is not stored"));
    assert_true(refused("{\"device\": \"d\", \"metrics\": {\"a\\u0001\\\"b\": \"x\"}}",
                        "field \"metrics.a??b\""));
    assert_true(refused("{\"device\": \"d\", \"metrics\": {\"m\": 1}, \"tags\": {\"k\\u007f\": 2}}",
                        "field \"tags.k?\": value must be a string"));
}

/* With every allocation from the nth on failing, a body that parses (one report
 * rejected, two accepted) is answered NOMEM, never "invalid JSON" nor a partial
 * result presented as the whole; with no failure injected it is the full answer. */
static void out_of_memory_is_nomem(void **state)
{
    (void)state;
    const char *body = "{\"reports\": [{\"device\": \"d1\", \"tags\": {\"s\": \"b\"},"
                       " \"metrics\": {\"x\": 1, \"y\": true}, \"state\": \"on\"},"
                       " {\"device\": \"d2\", \"metrics\": {\"x\\u007f\": \"bad\"}},"
                       " {\"device\": \"d3\", \"time\": \"2024-01-15T14:00:00Z\","
                       " \"metrics\": {\"z\": 2.5}}]}";
    int nomem = 0, n;
    for (n = 1; n <= 2000; n++) {
        bdb_batch *b = bdb_batch_new();
        assert_non_null(b);
        bdb_alloc_fail_arm(BDB_ALLOC_FAIL_FROM, (uint64_t)n);
        int rc = bdb_json_ingest(body, strlen(body), NOW, NULL, b, &R);
        bdb_alloc_fail_disarm();
        int hit = bdb_alloc_fail_injected() > 0;
        bdb_batch_free(b);
        if (rc == BDB_ERR_NOMEM) {
            assert_true(hit);
            assert_int_equal(R.fatal, 0);
            assert_non_null(strstr(R.first_error, "out of memory"));
            nomem++;
            continue;
        }
        /* not one failure reached the parse: the whole, exact answer */
        assert_false(hit);
        assert_int_equal(rc, BDB_ERR_INVALID);
        assert_int_equal(R.fatal, 0);
        assert_int_equal(R.accepted, 2);
        assert_int_equal(R.rejected, 1);
        assert_int_equal(R.first_bad_index, 1);
        break;
    }
    assert_true(n <= 2000 && nomem > 0);
    assert_int_equal(nomem, n - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(wrongly_typed_fields),   cmocka_unit_test(time_window),
        cmocka_unit_test(accepted_shapes),        cmocka_unit_test(stored_values),
        cmocka_unit_test(bodies_of_no_shape),     cmocka_unit_test(names_in_errors_are_printable),
        cmocka_unit_test(out_of_memory_is_nomem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
