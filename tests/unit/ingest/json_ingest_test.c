/* Tests for the JSON batch format: shapes, times, partial rejection, value types,
 * limits and malformed bodies. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "ingest/json_ingest.h"
#include "model/batch.h"

#include <stdio.h>
#include <string.h>

#define NOW 1234567890123LL

static bdb_batch *B;
static bdb_json_result R;

static int setup(void **state)
{
    (void)state;
    B = bdb_batch_new();
    return B ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    bdb_batch_free(B);
    return 0;
}

static int ingest_lim(const char *body, const bdb_json_limits *lim)
{
    bdb_batch_reset(B);
    return bdb_json_ingest(body, strlen(body), NOW, lim, B, &R);
}

static int ingest(const char *body)
{
    return ingest_lim(body, NULL);
}

static const bdb_report *reports(size_t *n)
{
    return bdb_batch_reports(B, n);
}

static int has(const char *p, size_t n, const char *want)
{
    return p && n == strlen(want) && memcmp(p, want, n) == 0;
}

static double metric(const bdb_report *r, const char *name)
{
    for (uint32_t i = 0; i < r->nmetrics; i++)
        if (has(r->metrics[i].name, r->metrics[i].nlen, name))
            return r->metrics[i].value;
    fail_msg("metric '%s' not found", name);
    return 0;
}

static const char *tag(const bdb_report *r, const char *key)
{
    for (uint32_t i = 0; i < r->ntags; i++)
        if (has(r->tags[i].key, r->tags[i].klen, key))
            return r->tags[i].val;
    return NULL;
}

/* Asserts one rejected report among the body's and the text of the first error. */
static void expect_rejected(const char *body, const char *want)
{
    int rc = ingest(body);
    if (rc != BDB_ERR_INVALID)
        fail_msg("body %s: rc %d, want BDB_ERR_INVALID", body, rc);
    assert_int_equal(R.fatal, 0);
    assert_true(R.rejected >= 1);
    if (!strstr(R.first_error, want))
        fail_msg("body %s: error '%s' lacks '%s'", body, R.first_error, want);
}

static void test_wrapped_batch(void **state)
{
    (void)state;
    const char *body = "{\"reports\": ["
                       " {\"device\": \"d1\", \"time\": 1700000000000,"
                       "  \"metrics\": {\"temp\": 21.5, \"rpm\": 900},"
                       "  \"tags\": {\"site\": \"berlin\", \"fw\": \"1.2\"}, \"state\": \"on\"},"
                       " {\"device\": \"d2\", \"time\": \"2023-11-14T22:13:20Z\","
                       "  \"metrics\": {\"temp\": -3}}"
                       "]}";
    assert_int_equal(ingest(body), BDB_OK);
    assert_int_equal(R.accepted, 2);
    assert_int_equal(R.rejected, 0);
    assert_int_equal(R.first_bad_index, -1);
    assert_int_equal(R.fatal, 0);
    size_t n;
    const bdb_report *r = reports(&n);
    assert_int_equal(n, 2);
    assert_true(has(r[0].device, r[0].device_len, "d1"));
    assert_int_equal(r[0].ts_ms, 1700000000000LL);
    assert_int_equal(r[0].nmetrics, 2);
    assert_true(metric(&r[0], "temp") == 21.5);
    assert_true(metric(&r[0], "rpm") == 900.0);
    assert_int_equal(r[0].ntags, 2);
    assert_string_equal(tag(&r[0], "site"), "berlin");
    assert_string_equal(tag(&r[0], "fw"), "1.2");
    assert_true(has(r[0].state, r[0].state_len, "on"));
    assert_int_equal(r[0].lineno, 0);
    assert_true(has(r[1].device, r[1].device_len, "d2"));
    assert_int_equal(r[1].ts_ms, 1700000000000LL);
    assert_true(metric(&r[1], "temp") == -3.0);
    assert_null(r[1].state);
    assert_int_equal(r[1].ntags, 0);
    assert_int_equal(r[1].lineno, 1);
    assert_int_equal(bdb_batch_samples(B), 3);
}

static void test_array_and_single_object(void **state)
{
    (void)state;
    assert_int_equal(ingest("[{\"device\":\"a\",\"metrics\":{\"x\":1}},"
                            " {\"device\":\"b\",\"metrics\":{\"x\":2}}]"),
                     BDB_OK);
    size_t n;
    const bdb_report *r = reports(&n);
    assert_int_equal(n, 2);
    assert_true(has(r[1].device, r[1].device_len, "b"));
    assert_true(metric(&r[1], "x") == 2.0);

    assert_int_equal(ingest("{\"device\":\"solo\",\"time\":5,\"metrics\":{\"x\":1.25}}"), BDB_OK);
    r = reports(&n);
    assert_int_equal(n, 1);
    assert_int_equal(R.accepted, 1);
    assert_true(has(r[0].device, r[0].device_len, "solo"));
    assert_int_equal(r[0].ts_ms, 5);

    /* an empty list is fine and adds nothing */
    assert_int_equal(ingest("[]"), BDB_OK);
    assert_int_equal(R.accepted, 0);
    assert_int_equal(ingest("{\"reports\": []}"), BDB_OK);
    reports(&n);
    assert_int_equal(n, 0);
}

static void test_times(void **state)
{
    (void)state;
    size_t n;
    const bdb_report *r;
    assert_int_equal(ingest("[{\"device\":\"a\",\"metrics\":{\"x\":1}},"
                            " {\"device\":\"a\",\"time\":null,\"metrics\":{\"x\":1}},"
                            " {\"device\":\"a\",\"time\":-1500,\"metrics\":{\"x\":1}},"
                            " {\"device\":\"a\",\"time\":\"2023-11-14T23:13:20.250+01:00\","
                            "  \"metrics\":{\"x\":1}},"
                            " {\"device\":\"a\",\"time\":\"1700000000001\",\"metrics\":{\"x\":1}},"
                            " {\"device\":\"a\",\"time\":1.7e12,\"metrics\":{\"x\":1}}]"),
                     BDB_OK);
    r = reports(&n);
    assert_int_equal(n, 6);
    assert_int_equal(r[0].ts_ms, NOW);
    assert_int_equal(r[1].ts_ms, NOW);
    assert_int_equal(r[2].ts_ms, -1500);
    assert_int_equal(r[3].ts_ms, 1700000000250LL);
    assert_int_equal(r[4].ts_ms, 1700000000001LL);
    assert_int_equal(r[5].ts_ms, 1700000000000LL);

    expect_rejected("[{\"device\":\"a\",\"time\":1.5,\"metrics\":{\"x\":1}}]",
                    "report 0: field \"time\"");
    expect_rejected("[{\"device\":\"a\",\"time\":true,\"metrics\":{\"x\":1}}]", "field \"time\"");
    expect_rejected("[{\"device\":\"a\",\"time\":\"yesterday\",\"metrics\":{\"x\":1}}]",
                    "field \"time\"");
    expect_rejected("[{\"device\":\"a\",\"time\":1e19,\"metrics\":{\"x\":1}}]", "field \"time\"");
    expect_rejected("[{\"device\":\"a\",\"time\":{},\"metrics\":{\"x\":1}}]", "field \"time\"");
}

static void test_partial_rejection(void **state)
{
    (void)state;
    const char *body = "{\"reports\": ["
                       " {\"device\":\"ok0\",\"metrics\":{\"t\":1}},"
                       " {\"device\":\"ok1\",\"metrics\":{\"t\":2}},"
                       " {\"device\":\"ok2\",\"metrics\":{\"t\":3}},"
                       " {\"device\":\"bad3\",\"metrics\":{\"temp\":\"hot\"}},"
                       " {\"device\":\"ok4\",\"metrics\":{\"t\":5}},"
                       " {\"metrics\":{\"t\":6}}"
                       "]}";
    bdb_json_limits lim; /* "hot" is over the attribute limit: not stored */
    bdb_json_limits_default(&lim);
    lim.max_value_len = 2;
    assert_int_equal(ingest_lim(body, &lim), BDB_ERR_INVALID);
    assert_int_equal(R.accepted, 4);
    assert_int_equal(R.rejected, 2);
    assert_int_equal(R.first_bad_index, 3);
    assert_int_equal(R.fatal, 0);
    assert_string_equal(R.first_error,
                        "report 3: field \"metrics.temp\": a string is not stored (only numbers, "
                        "booleans and 'state'), and the report has nothing else to store");
    size_t n;
    const bdb_report *r = reports(&n);
    assert_int_equal(n, 4);
    assert_true(has(r[3].device, r[3].device_len, "ok4"));
    assert_int_equal(r[3].lineno, 4); /* index in the array, not position in the batch */
    /* the rejected report left nothing behind */
    assert_int_equal(bdb_batch_samples(B), 4);
}

static void test_metric_values(void **state)
{
    (void)state;
    assert_int_equal(ingest("{\"device\":\"d\",\"metrics\":{\"on\":true,\"off\":false,"
                            "\"big\":100000000000000000000,\"neg\":-0.5,\"i\":-7}}"),
                     BDB_OK);
    size_t n;
    const bdb_report *r = reports(&n);
    assert_int_equal(n, 1);
    assert_true(metric(&r[0], "on") == 1.0);
    assert_true(metric(&r[0], "off") == 0.0);
    assert_true(metric(&r[0], "big") == 1e20);
    assert_true(metric(&r[0], "neg") == -0.5);
    assert_true(metric(&r[0], "i") == -7.0);

    static const char *const bad[] = {"null", "{}", "[1]"};
    char body[160];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(body, sizeof body, "[{\"device\":\"d\",\"metrics\":{\"ok\":1,\"v\":%s}}]", bad[i]);
        expect_rejected(body, "report 0: field \"metrics.v\": value must be a finite number");
        assert_int_equal(R.accepted, 0);
    }
    /* a string value is an attribute */
    assert_int_equal(ingest("[{\"device\":\"d\",\"metrics\":{\"ok\":1,\"fw\":\"1.2\"}}]"), BDB_OK);
    r = reports(&n);
    assert_int_equal(r[0].nattrs, 1);
    assert_true(has(r[0].attrs[0].key, r[0].attrs[0].klen, "fw"));
    assert_true(has(r[0].attrs[0].val, r[0].attrs[0].vlen, "1.2"));
    /* over the limit it is not stored and costs the report nothing else */
    bdb_json_limits lim;
    bdb_json_limits_default(&lim);
    lim.max_value_len = 2;
    assert_int_equal(ingest_lim("[{\"device\":\"d\",\"metrics\":{\"ok\":1,\"fw\":\"1.2\","
                                "\"v\":\"NaN\"}},{\"device\":\"e\",\"metrics\":{\"x\":2}}]",
                                &lim),
                     BDB_OK);
    assert_int_equal(R.accepted, 2);
    assert_int_equal(R.strings_skipped, 2);
    assert_string_equal(R.first_skipped, "report 0: string metric 'fw'");
    r = reports(&n);
    assert_int_equal(r[0].nmetrics, 1);
    assert_true(metric(&r[0], "ok") == 1.0);
    /* NaN and Infinity are not JSON and an overflowing number is not a double: jansson
     * refuses the body, so such values never reach the batch. */
    assert_int_equal(ingest("[{\"device\":\"d\",\"metrics\":{\"v\":NaN}}]"), BDB_ERR_INVALID);
    assert_int_equal(R.fatal, 1);
    assert_int_equal(ingest("[{\"device\":\"d\",\"metrics\":{\"v\":Infinity}}]"), BDB_ERR_INVALID);
    assert_int_equal(R.fatal, 1);
    assert_int_equal(ingest("[{\"device\":\"d\",\"metrics\":{\"v\":1e400}}]"), BDB_ERR_INVALID);
    assert_int_equal(R.fatal, 1);
    assert_int_equal(R.accepted, 0);
}

static void test_report_shape_errors(void **state)
{
    (void)state;
    expect_rejected("[5]", "report 0: must be an object");
    expect_rejected("[{\"metrics\":{\"x\":1}}]", "report 0: field \"device\"");
    expect_rejected("[{\"device\":7,\"metrics\":{\"x\":1}}]", "field \"device\"");
    expect_rejected("[{\"device\":\"\",\"metrics\":{\"x\":1}}]", "field \"device\"");
    expect_rejected("[{\"device\":\"d\",\"metrics\":[1]}]", "field \"metrics\"");
    expect_rejected("[{\"device\":\"d\",\"metrics\":{\"\":1}}]", "field \"metrics.\"");
    expect_rejected("[{\"device\":\"d\"}]", "needs metrics or a state");
    expect_rejected("[{\"device\":\"d\",\"metrics\":{}}]", "needs metrics or a state");
    expect_rejected("[{\"device\":\"d\",\"metrics\":{\"x\":1},\"tags\":[\"a\"]}]",
                    "field \"tags\"");
    expect_rejected("[{\"device\":\"d\",\"metrics\":{\"x\":1},\"tags\":{\"site\":1}}]",
                    "report 0: field \"tags.site\": value must be a string");
    expect_rejected("[{\"device\":\"d\",\"metrics\":{\"x\":1},\"tags\":{\"\":\"v\"}}]",
                    "field \"tags.\"");
    expect_rejected("[{\"device\":\"d\",\"state\":1}]", "field \"state\"");

    /* a state alone is a report; unknown keys and null optionals are ignored */
    assert_int_equal(ingest("[{\"device\":\"d\",\"state\":\"fault\",\"tags\":null,"
                            "\"metrics\":null,\"extra\":[1,2]}]"),
                     BDB_OK);
    size_t n;
    const bdb_report *r = reports(&n);
    assert_int_equal(n, 1);
    assert_int_equal(r[0].nmetrics, 0);
    assert_true(has(r[0].state, r[0].state_len, "fault"));
}

static void test_limits(void **state)
{
    (void)state;
    bdb_json_limits d;
    bdb_json_limits_default(&d);
    assert_int_equal(d.max_reports, 100000);
    assert_int_equal(d.max_metrics, 256);
    assert_int_equal(d.max_tags, 64);
    assert_int_equal(d.max_key_len, 256);
    assert_int_equal(d.max_value_len, 1024);

    bdb_json_limits l = {
        .max_reports = 2, .max_metrics = 2, .max_tags = 1, .max_key_len = 3, .max_value_len = 4};
    assert_int_equal(ingest_lim("[{\"device\":\"abc\",\"metrics\":{\"xyz\":1,\"b\":2},"
                                "\"tags\":{\"k\":\"vvvv\"},\"state\":\"ssss\"},"
                                "{\"device\":\"d\",\"metrics\":{\"x\":1}}]",
                                &l),
                     BDB_OK);
    assert_int_equal(R.accepted, 2);

    assert_int_equal(ingest_lim("[{\"device\":\"d\",\"metrics\":{\"x\":1}},"
                                "{\"device\":\"d\",\"metrics\":{\"x\":1}},"
                                "{\"device\":\"d\",\"metrics\":{\"x\":1}}]",
                                &l),
                     BDB_ERR_LIMIT);
    assert_int_equal(R.accepted, 0);
    assert_non_null(strstr(R.first_error, "report count 3 exceeds max-reports 2"));
    size_t n;
    reports(&n);
    assert_int_equal(n, 0);

    static const struct {
        const char *body, *want;
    } cases[] = {
        {"[{\"device\":\"abcd\",\"metrics\":{\"x\":1}}]", "field \"device\": length 4"},
        {"[{\"device\":\"d\",\"metrics\":{\"x\":1,\"y\":2,\"z\":3}}]", "exceed max-fields 2"},
        {"[{\"device\":\"d\",\"metrics\":{\"wxyz\":1}}]",
         "field \"metrics.wxyz\": name length 4 exceeds max-key-bytes 3"},
        {"[{\"device\":\"d\",\"metrics\":{\"x\":1},\"tags\":{\"a\":\"1\",\"b\":\"2\"}}]",
         "exceed max-tags 1"},
        {"[{\"device\":\"d\",\"metrics\":{\"x\":1},\"tags\":{\"long\":\"1\"}}]",
         "field \"tags.long\": name length 4"},
        {"[{\"device\":\"d\",\"metrics\":{\"x\":1},\"tags\":{\"k\":\"12345\"}}]",
         "field \"tags.k\": length 5 exceeds max-tag-value-bytes 4"},
        {"[{\"device\":\"d\",\"state\":\"12345\"}]",
         "field \"state\": length 5 exceeds max-tag-value-bytes 4"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        assert_int_equal(ingest_lim(cases[i].body, &l), BDB_ERR_INVALID);
        assert_int_equal(R.rejected, 1);
        if (!strstr(R.first_error, cases[i].want))
            fail_msg("case %zu: '%s' lacks '%s'", i, R.first_error, cases[i].want);
    }
}

static void test_invalid_bodies(void **state)
{
    (void)state;
    static const char *const bad_json[] = {
        "", "{", "[{\"device\":}]", "nope", "[1,]", "{\"a\" 1}", "\"just a string\"", "42",
        "[{}] extra", "[\"\\u0000\"]",
        /* a duplicate key would otherwise be settled silently by the last one (issue 18) */
        "[{\"device\":\"a\",\"device\":\"b\",\"metrics\":{\"x\":1}}]",
        "[{\"device\":\"a\",\"metrics\":{\"x\":1,\"x\":2}}]"};
    for (size_t i = 0; i < sizeof bad_json / sizeof *bad_json; i++) {
        assert_int_equal(ingest(bad_json[i]), BDB_ERR_INVALID);
        assert_int_equal(R.fatal, 1);
        assert_int_equal(R.accepted, 0);
        if (!strstr(R.first_error, "invalid JSON"))
            fail_msg("body '%s': '%s'", bad_json[i], R.first_error);
    }
    assert_int_equal(ingest("[{\"device\":\"a\",\"metrics\":{\"x\":1,\"x\":2}}]"), BDB_ERR_INVALID);
    assert_non_null(strstr(R.first_error, "duplicate object key"));
    /* valid JSON of the wrong shape */
    assert_int_equal(ingest("{\"reports\": 5}"), BDB_ERR_INVALID);
    assert_int_equal(R.fatal, 1);
    assert_non_null(strstr(R.first_error, "reports"));
    assert_int_equal(ingest("{\"reports\": {\"device\":\"d\",\"metrics\":{\"x\":1}}}"),
                     BDB_ERR_INVALID);
    assert_int_equal(R.fatal, 1);
    size_t n;
    reports(&n);
    assert_int_equal(n, 0);
    /* the body length is honoured: trailing bytes beyond len are not read */
    const char body[] = "[{\"device\":\"d\",\"metrics\":{\"x\":1}}]GARBAGE";
    bdb_batch_reset(B);
    assert_int_equal(bdb_json_ingest(body, sizeof body - 1 - 7, NOW, NULL, B, &R), BDB_OK);
    assert_int_equal(R.accepted, 1);
}

static void test_names_in_errors_are_bounded(void **state)
{
    (void)state;
    char body[2048];
    char name[201]; /* within max-key-bytes, far beyond what a message shows */
    memset(name, 'n', 200);
    name[200] = '\0';
    char val[1026]; /* over max-tag-value-bytes: not stored as an attribute */
    memset(val, 'v', 1025);
    val[1025] = '\0';
    snprintf(body, sizeof body, "[{\"device\":\"d\",\"metrics\":{\"%s\":\"%s\"}}]", name, val);
    expect_rejected(body, "...\": a string is not stored");
    assert_true(strlen(R.first_error) < 200);
    /* quotes and control characters in names do not break the message */
    expect_rejected("[{\"device\":\"d\",\"metrics\":{\"a\\\"b\\nc\":\"x\"}}]",
                    "field \"metrics.a?b?c\"");
}

/* A configured device tag without a rule: the "device" member stands for it, and a
 * report naming only the tag is taken by it too. */
static void test_device_tag_without_rule(void **state)
{
    (void)state;
    bdb_json_limits lim;
    bdb_json_limits_default(&lim);
    lim.device_tag = "host";
    size_t n;
    assert_int_equal(ingest_lim("[{\"device\":\"d1\",\"metrics\":{\"m\":1}},"
                                "{\"tags\":{\"host\":\"h2\"},\"metrics\":{\"m\":2}}]",
                                &lim),
                     BDB_OK);
    const bdb_report *r = reports(&n);
    assert_int_equal(n, 2);
    assert_string_equal(r[0].device, "d1");
    assert_string_equal(r[1].device, "h2");
    assert_true(metric(&r[1], "m") == 2);
    /* a "device" tag is only a tag now: the report names no device */
    assert_int_equal(ingest_lim("{\"tags\":{\"device\":\"d3\"},\"metrics\":{\"m\":3}}", &lim),
                     BDB_ERR_INVALID);
    assert_int_equal(R.rejected, 1);
    assert_string_equal(R.first_error, "report 0: field \"device\": required string");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wrapped_batch),
        cmocka_unit_test(test_array_and_single_object),
        cmocka_unit_test(test_times),
        cmocka_unit_test(test_partial_rejection),
        cmocka_unit_test(test_metric_values),
        cmocka_unit_test(test_report_shape_errors),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_invalid_bodies),
        cmocka_unit_test(test_names_in_errors_are_bounded),
        cmocka_unit_test(test_device_tag_without_rule),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
