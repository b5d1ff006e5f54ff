/* Gateway objects onto one report (ingest/json_flat.h): nested names, booleans, nulls,
 * the top-level state, other strings counted, and each refusal (array, depth, name
 * length, metric count, nothing to store, not an object) leaving the batch empty. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "ingest/json_flat.h"
#include "model/batch.h"

#include <stdio.h>
#include <string.h>

static bdb_jsonflat_result R;
static char WHY[300];

static int run(bdb_batch *b, const char *body, size_t max_metrics, size_t max_key)
{
    bdb_jsonflat_opts o = {"dev", 3, 1000, max_metrics, max_key, 8};
    bdb_batch_reset(b);
    return bdb_jsonflat_ingest(body, strlen(body), &o, b, &R, WHY, sizeof WHY);
}

static double metric(const bdb_report *r, const char *name)
{
    for (uint32_t i = 0; i < r->nmetrics; i++)
        if (r->metrics[i].nlen == strlen(name) &&
            !memcmp(r->metrics[i].name, name, r->metrics[i].nlen))
            return r->metrics[i].value;
    fail_msg("no metric %s", name);
    return 0;
}

static void shapes(void **state)
{
    (void)state;
    bdb_batch *b = bdb_batch_new();
    size_t n;
    assert_int_equal(run(b,
                         "{\"t\":21.5,\"u\":{\"v\":1,\"w\":{\"x\":2}},\"ok\":true,\"no\":false,"
                         "\"n\":null,\"state\":\"ON\",\"fw\":\"1.2\",\"u2\":{\"s\":\"x\"}}",
                         256, 256),
                     BDB_OK);
    const bdb_report *r = bdb_batch_reports(b, &n);
    assert_int_equal(n, 1);
    assert_int_equal(r->nmetrics, 5);
    assert_true(metric(r, "t") == 21.5);
    assert_true(metric(r, "u.v") == 1);
    assert_true(metric(r, "u.w.x") == 2);
    assert_true(metric(r, "ok") == 1);
    assert_true(metric(r, "no") == 0);
    assert_string_equal(r->state, "ON");
    assert_int_equal(r->ts_ms, 1000);
    /* other strings are attributes under their joined keys */
    assert_int_equal(R.strings_skipped, 0);
    assert_int_equal(r->nattrs, 2);
    assert_string_equal(r->attrs[0].key, "fw");
    assert_string_equal(r->attrs[0].val, "1.2");
    assert_string_equal(r->attrs[1].key, "u2.s");
    /* one over the state's limit (8 here) is not stored */
    assert_int_equal(run(b, "{\"t\":1,\"fw\":\"123456789\"}", 256, 256), BDB_OK);
    r = bdb_batch_reports(b, &n);
    assert_int_equal(r->nattrs, 0);
    assert_int_equal(R.strings_skipped, 1);
    assert_string_equal(R.first_skipped, "string 'fw'");
    /* a state-only object is stored */
    assert_int_equal(run(b, "{\"state\":\"off\"}", 256, 256), BDB_OK);
    bdb_batch_free(b);
}

static void refusals(void **state)
{
    (void)state;
    bdb_batch *b = bdb_batch_new();
    size_t n;
    static const struct {
        const char *body;
        size_t max_metrics, max_key;
        int rc;
        const char *why;
    } cases[] = {
        {"{\"a\":1,\"l\":[1,2]}", 256, 256, BDB_ERR_INVALID, "'l' is an array"},
        {"{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":{\"f\":{\"g\":{\"h\":1}}}}}}}}", 256, 256, BDB_OK, ""},
        {"{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":{\"f\":{\"g\":{\"h\":{\"i\":1}}}}}}}}}", 256, 256,
         BDB_ERR_INVALID, "object 'a.b.c.d.e.f.g.h' is nested deeper than 8 levels"},
        {"{\"abc\":{\"def\":1}}", 256, 6, BDB_ERR_INVALID, "longer than max-key-bytes 6"},
        {"{\"abc\":{\"de\":1}}", 256, 6, BDB_OK, ""},
        {"{\"a\":1,\"b\":2,\"c\":3}", 2, 256, BDB_ERR_LIMIT, "more than max-fields 2"},
        {"{\"a\":\"x\"}", 256, 256, BDB_OK, ""},
        {"{\"a\":\"123456789\"}", 256, 256, BDB_ERR_INVALID, "nothing to store"},
        {"{\"state\":\"123456789\"}", 256, 256, BDB_ERR_INVALID, "max-tag-value-bytes 8"},
        {"[1]", 256, 256, BDB_ERR_INVALID, "not a JSON object"},
        {"{\"a\":", 256, 256, BDB_ERR_INVALID, "invalid JSON"},
        {"{\"a\\u0001\":1}", 256, 256, BDB_ERR_INVALID, "control characters"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = run(b, cases[i].body, cases[i].max_metrics, cases[i].max_key);
        assert_int_equal(rc, cases[i].rc);
        bdb_batch_reports(b, &n);
        assert_int_equal(n, rc == BDB_OK ? 1 : 0);
        if (rc != BDB_OK && !strstr(WHY, cases[i].why))
            fail_msg("case %zu: '%s' not in '%s'", i, cases[i].why, WHY);
    }
    bdb_batch_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shapes),
        cmocka_unit_test(refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
