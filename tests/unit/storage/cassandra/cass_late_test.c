/* cass_late: the pure rules of late events on Cassandra: the USING TTL of a row (what
 * is left of the tenant's raw TTL counted from the event time, like the raw sample)
 * and the day partition of an arrival. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "model/bucket.h"
#include "storage/cassandra/cass_late.h"

#define T INT64_C(1704067200000) /* 2024-01-01T00:00:00Z */
#define H INT64_C(3600000)

static void test_ttl(void **st)
{
    (void)st;
    /* No raw TTL: the row lives forever (USING TTL 0). */
    assert_int_equal(cass_late_ttl_s(T, 0, T + 1000), 0);
    /* 30 days of raw TTL, an event 2 days late: 28 days left. */
    assert_int_equal(cass_late_ttl_s(T - 48 * H, 30 * BDB_MS_DAY, T), 28 * 86400);
    /* Partial seconds round down, but never to 0 (which would mean forever). */
    assert_int_equal(cass_late_ttl_s(T, 1500, T), 1);
    /* Expired already: not written. */
    assert_int_equal(cass_late_ttl_s(T, 999, T), -1);
    assert_int_equal(cass_late_ttl_s(T - 31 * BDB_MS_DAY, 30 * BDB_MS_DAY, T), -1);
    /* Capped at Cassandra's 20 years, also against overflow. */
    assert_int_equal(cass_late_ttl_s(T, INT64_C(1) << 50, T), 630720000);
    assert_int_equal(cass_late_ttl_s(INT64_MAX - 5, 100, T), 630720000);
}

static void test_bucket(void **st)
{
    (void)st;
    assert_int_equal(cass_late_bucket(T), T);
    assert_int_equal(cass_late_bucket(T + 23 * H + 59 * 60000), T);
    assert_int_equal(cass_late_bucket(T + 24 * H), T + BDB_MS_DAY);
    /* Before 1970: the day that holds it, not the next one. */
    assert_int_equal(cass_late_bucket(-1), -BDB_MS_DAY);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ttl),
        cmocka_unit_test(test_bucket),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
