/* Gateway objects onto one report (ingest/json_flat.h): nested names, booleans, nulls,
 * the top-level state, other strings counted, and each refusal (array, depth, name
 * length, metric count, nothing to store, not an object) leaving the batch empty. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "common/alloc.h"
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

/* Limits at their edges: a joined name past the 1024-byte name buffer even when
 * max-key-bytes allows more, the long prefix cut to 60 bytes in the error, a top-level
 * name too long, the 65th attribute and strings that cannot be attributes (a
 * control character in the name) skipped and counted, an object with only
 * nulls refused without a skipped list. */
static void limits(void **state)
{
    (void)state;
    bdb_batch *b = bdb_batch_new();
    size_t n;
    static char body[8192];
    char key[1100];
    memset(key, 'k', 1020);
    key[1020] = '\0';
    /* "k...k" (1020) + "." + "abcd" = 1025 bytes: over the buffer, under max_key 4096 */
    snprintf(body, sizeof body, "{\"%s\":{\"abcd\":1}}", key);
    assert_int_equal(run(b, body, 256, 4096), BDB_ERR_INVALID);
    assert_non_null(strstr(WHY, "is longer than max-key-bytes 4096"));
    char want[80];
    memset(want, 'k', 60);
    snprintf(want + 60, sizeof want - 60, ".abcd' is");
    if (!strstr(WHY, want))
        fail_msg("want the prefix cut to 60 bytes: '%s'", WHY);
    bdb_batch_reports(b, &n);
    assert_int_equal(n, 0);
    /* one byte less fits */
    snprintf(body, sizeof body, "{\"%s\":{\"abc\":1}}", key);
    assert_int_equal(run(b, body, 256, 4096), BDB_OK);
    /* a top-level name: no '.' */
    assert_int_equal(run(b, "{\"abcdefg\":1}", 256, 6), BDB_ERR_INVALID);
    assert_non_null(strstr(WHY, "name 'abcdefg' is longer than max-key-bytes 6"));

    /* 66 short strings: 64 attributes, the other 2 skipped, the first of them named */
    size_t off = (size_t)snprintf(body, sizeof body, "{\"m\":1");
    for (int i = 0; i < 66; i++)
        off += (size_t)snprintf(body + off, sizeof body - off, ",\"a%02d\":\"x\"", i);
    snprintf(body + off, sizeof body - off, "}");
    assert_int_equal(run(b, body, 256, 256), BDB_OK);
    const bdb_report *r = bdb_batch_reports(b, &n);
    assert_int_equal(n, 1);
    assert_int_equal(r->nattrs, BDB_MAX_REPORT_ATTRS);
    assert_int_equal(R.attrs, BDB_MAX_REPORT_ATTRS);
    assert_int_equal(R.strings_skipped, 2);
    assert_string_equal(R.first_skipped, "string 'a64'");

    /* a control character in the name: not an attribute (a NUL in the value never
     * gets here: the parser refuses \u0000) */
    assert_int_equal(run(b, "{\"m\":2,\"c\\u0002\":\"v\",\"s\":\"a\\u0000b\"}", 256, 256),
                     BDB_ERR_INVALID);
    assert_non_null(strstr(WHY, "invalid JSON"));
    assert_int_equal(run(b, "{\"m\":2,\"c\\u0002\":\"v\"}", 256, 256), BDB_OK);
    r = bdb_batch_reports(b, &n);
    assert_int_equal(n, 1);
    assert_int_equal(r->nattrs, 0);
    assert_int_equal(R.strings_skipped, 1);
    assert_string_equal(R.first_skipped, "string 'c\002'");

    /* nulls only: nothing to store, and no list of skipped strings */
    assert_int_equal(run(b, "{\"a\":null,\"state\":null}", 256, 256), BDB_ERR_INVALID);
    assert_string_equal(WHY, "nothing to store: no number, boolean or state");
    /* two strings skipped: the first named */
    assert_int_equal(run(b, "{\"a\":\"123456789\",\"b\":\"123456789\"}", 256, 256),
                     BDB_ERR_INVALID);
    assert_string_equal(WHY,
                        "nothing to store: no number, boolean or state (not stored: string 'a')");
    bdb_batch_reports(b, &n);
    assert_int_equal(n, 0);
    bdb_batch_free(b);
}

/* Out of memory while the batch takes the object: BDB_ERR_NOMEM, never a partial
 * report taken as stored. */
static void out_of_memory(void **state)
{
    (void)state;
    const char *body = "{\"t\":21.5,\"u\":{\"v\":1},\"state\":\"ON\",\"fw\":\"1.2\"}";
    uint64_t nomem = 0;
    for (uint64_t nth = 1; nth < 1000; nth++) {
        bdb_batch *b = bdb_batch_new();
        assert_non_null(b);
        bdb_alloc_fail_arm(BDB_ALLOC_FAIL_FROM, nth);
        int rc = run(b, body, 256, 256);
        int hit = bdb_alloc_fail_injected() > 0;
        bdb_alloc_fail_disarm();
        bdb_batch_free(b);
        if (!hit) {
            assert_int_equal(rc, BDB_OK);
            break;
        }
        assert_int_equal(rc, BDB_ERR_NOMEM);
        nomem++;
    }
    assert_true(nomem >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shapes),
        cmocka_unit_test(refusals),
        cmocka_unit_test(limits),
        cmocka_unit_test(out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
