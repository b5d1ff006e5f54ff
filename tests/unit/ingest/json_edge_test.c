/* Edge cases of the JSON batch format that the main test leaves out: every wrongly
 * typed field is refused per report (never the whole body) with an error naming it,
 * and the accepted reports keep their values. Written for branch coverage of
 * json_ingest.c (issue 8), each case a documented rule of docs/API.md. */
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
    assert_true(refused("{\"device\": \"d\", \"metrics\": {\"m\": \"1\"}}", NULL));
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
             NOW - 86400001);
    assert_true(refused(r, NULL)); /* one past max_age_ms */
    snprintf(r, sizeof r, "{\"device\": \"d\", \"time\": %lld, \"metrics\": {\"m\": 1}}",
             NOW + 60000);
    assert_false(refused(r, NULL)); /* at the limit: kept */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(wrongly_typed_fields),
        cmocka_unit_test(time_window),
        cmocka_unit_test(accepted_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
