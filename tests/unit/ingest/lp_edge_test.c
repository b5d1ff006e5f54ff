/* Edge cases of line protocol onto the model that lp_ingest_test leaves out: the
 * device tag matched by exact key only, control characters in device names, the
 * retention bound at and one past, the state's length limit, over-long metric names in
 * both naming modes, and long field keys cut in the error message. Written for branch
 * coverage of lp_ingest.c (issue 8); each case a documented rule. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "ingest/lineproto.h"
#include "ingest/lp_ingest.h"
#include "model/batch.h"

#include <stdio.h>
#include <string.h>

#define NOW INT64_C(1700000000000)

static bdb_lp_result R;

/* Ingests body with map; returns the number of accepted lines. */
static size_t run(const char *body, const bdb_lp_map *map)
{
    bdb_lp_parser *p = bdb_lp_parser_new(NULL);
    bdb_batch *b = bdb_batch_new();
    assert_int_equal(bdb_lp_ingest(p, body, strlen(body), BDB_LP_MS, NOW, map, b, &R), BDB_OK);
    size_t n;
    bdb_batch_reports(b, &n);
    assert_int_equal(n, R.accepted);
    bdb_batch_free(b);
    bdb_lp_parser_free(p);
    return R.accepted;
}

static bdb_lp_map map_of(int field_only, size_t max_name, size_t max_state, int64_t max_age)
{
    bdb_lp_map m = {.device_tag = "device",
                    .field_only = field_only,
                    .max_future_ms = 3600000,
                    .max_name_bytes = max_name,
                    .max_state_bytes = max_state,
                    .max_age_ms = max_age};
    return m;
}

static void device_tag_and_names(void **state)
{
    (void)state;
    bdb_lp_map m = map_of(0, 16, 0, 0);
    /* "devicex" and "devic" are other tags: the line has no device */
    assert_int_equal(run("m,devicex=a v=1 1700000000000\n", &m), 0);
    assert_non_null(strstr(R.first_error, "missing device tag"));
    assert_int_equal(run("m,devic=a v=1 1700000000000\n", &m), 0);
    /* a device longer than max_name_bytes (16), and one at it */
    assert_int_equal(run("m,device=aaaaaaaaaaaaaaaaa v=1 1700000000000\n", &m), 0);
    assert_int_equal(run("m,device=aaaaaaaaaaaaaaaa v=1 1700000000000\n", &m), 1);
    /* measurement.field longer than 2 x max_name_bytes + 1 */
    char body[512];
    snprintf(body, sizeof body, "%s,device=d %s=1 1700000000000\n",
             "mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm", "ffff");
    assert_int_equal(run(body, &m), 0);
    assert_non_null(strstr(R.first_error, "metric name"));
    /* field-only naming: the field alone, at and past the limit */
    bdb_lp_map f = map_of(1, 8, 0, 0);
    assert_int_equal(run("m,device=d ffffffff=1 1700000000000\n", &f), 1);
    assert_int_equal(run("m,device=d fffffffff=1 1700000000000\n", &f), 0);
    /* a field key of 150 bytes is cut to 100 in the message */
    char key[151];
    memset(key, 'k', 150);
    key[150] = 0;
    snprintf(body, sizeof body, "m,device=d %s=\"s\" 1700000000000\n", key);
    assert_int_equal(run(body, &m), 0);
    char want[128];
    snprintf(want, sizeof want, "metric name for field '%.100s' is", key);
    assert_non_null(strstr(R.first_error, want));
}

static void retention_and_state(void **state)
{
    (void)state;
    bdb_lp_map m = map_of(0, 64, 4, 1000);
    assert_int_equal(run("m,device=d v=1 1699999999000\n", &m), 1); /* at the bound */
    assert_int_equal(run("m,device=d v=1 1699999998999\n", &m), 0); /* one past */
    assert_int_equal(R.beyond_retention, 1);
    assert_int_equal(run("m,device=d state=\"idle\" 1700000000000\n", &m), 1);
    assert_int_equal(run("m,device=d state=\"idles\" 1700000000000\n", &m), 0);
    assert_non_null(strstr(R.first_error, "state length 5"));
    /* an attribute is bounded as the state: beyond, not stored */
    assert_int_equal(run("m,device=d note=\"idle\" 1700000000000\n", &m), 1);
    assert_int_equal(run("m,device=d note=\"idles\" 1700000000000\n", &m), 0);
    assert_non_null(strstr(R.first_error, "no field could be stored: string field 'note'"));
    assert_int_equal(run("m,device=d v=1,note=\"idles\" 1700000000000\n", &m), 1);
    assert_int_equal(R.strings_skipped, 1);
    bdb_lp_map unlimited = map_of(0, 64, 0, 0);
    assert_int_equal(run("m,device=d state=\"a long state string\" 1\n", &unlimited), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(device_tag_and_names),
        cmocka_unit_test(retention_and_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
