/* cass_state: the pure rules of the current state on Cassandra: what a flush does with
 * a device's state given the one Cassandra holds (seed 004's move between
 * latest_by_state partitions, never back to an older state), write timestamps, and
 * the day partitions a count read visits. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "model/bucket.h"
#include "storage/cassandra/cass_state.h"

static void test_state_action(void **st)
{
    (void)st;
    /* Nothing in Cassandra yet: insert. */
    assert_int_equal(cass_state_action(NULL, INT64_MIN, "on", 100), CASS_STATE_WRITE);
    /* A newer state: move (delete under the old one). */
    assert_int_equal(cass_state_action("off", 50, "on", 100), CASS_STATE_MOVE);
    /* The same state again (a re-sent flush, or a later report of it): write, no
     * delete. */
    assert_int_equal(cass_state_action("on", 100, "on", 100), CASS_STATE_WRITE);
    assert_int_equal(cass_state_action("on", 50, "on", 100), CASS_STATE_WRITE);
    /* Cassandra's is newer: an older event never replaces it. */
    assert_int_equal(cass_state_action("off", 200, "on", 100), CASS_STATE_SKIP);
    assert_int_equal(cass_state_action("on", 200, "on", 100), CASS_STATE_SKIP);
    /* Same time, another state: the one written first stays. */
    assert_int_equal(cass_state_action("off", 100, "on", 100), CASS_STATE_SKIP);
}

/* Short states are their own key; longer ones a fixed-size digest that differs
 * for states differing only in their last byte. */
static void test_state_key(void **st)
{
    (void)st;
    char k1[CASS_STATE_KEY_MAX], k2[CASS_STATE_KEY_MAX];
    assert_string_equal(cass_state_key("on", k1), "on");
    assert_string_equal(cass_state_key("", k1), "");
    static char s[65537];
    memset(s, 'a', 65536);
    s[CASS_STATE_KEY_SHORT] = 0;
    assert_string_equal(cass_state_key(s, k1), s);
    s[CASS_STATE_KEY_SHORT] = 'a';
    s[CASS_STATE_KEY_SHORT + 1] = 0;
    cass_state_key(s, k1);
    assert_int_equal(strlen(k1), 8 + 32);
    assert_memory_equal(k1, "#xxh128:", 8);
    assert_int_equal(strspn(k1 + 8, "0123456789abcdef"), 32);
    s[CASS_STATE_KEY_SHORT + 1] = 'a';
    assert_string_equal(cass_state_key(s, k2), cass_state_key(s, k1)); /* deterministic */
    s[65535] = 'b';
    cass_state_key(s, k2);
    assert_int_equal(strlen(k2), 40);
    assert_string_not_equal(k1, k2);
}

static void test_usec(void **st)
{
    (void)st;
    assert_int_equal(cass_state_usec(1704067200000), INT64_C(1704067200000000));
    assert_int_equal(cass_state_usec(-5), -5000);
    assert_true(cass_state_usec(INT64_MAX / 10) == INT64_MAX);
    assert_true(cass_state_usec(INT64_MIN / 10) == INT64_MIN + 1);
    /* Ordered like the event times. */
    assert_true(cass_state_usec(2) > cass_state_usec(1));
}

static void test_count_days(void **st)
{
    (void)st;
    const int64_t D = BDB_MS_DAY, T = 1704067200000; /* a day start */
    int64_t a, b;
    /* Inside one day: that day and the day before (its 1-day buckets reach in). */
    assert_int_equal(cass_count_days(T + 3600000, T + 7200000, 400, &a, &b), 0);
    assert_true(a == T - D && b == T);
    /* A 1-day bucket need not start at midnight (a size change starts a bucket at
     * a minute): one starting a minute after the previous midnight reaches in. */
    assert_int_equal(cass_count_days(T, T + D, 400, &a, &b), 0);
    assert_true(a == T - D && b == T);
    /* to is exclusive. */
    assert_int_equal(cass_count_days(T, T + D + 1, 400, &a, &b), 0);
    assert_true(a == T - D && b == T + D);
    /* Negative times floor. */
    assert_int_equal(cass_count_days(-1, 1, 400, &a, &b), 0);
    assert_true(a == -D && b == 0);
    /* Too many days: refused rather than hundreds of reads. */
    assert_int_equal(cass_count_days(T, T + 400 * D, 400, &a, &b), -1);
    assert_int_equal(cass_count_days(T, T + 399 * D, 400, &a, &b), 0);
    assert_int_equal(cass_count_days(INT64_MIN, T, 400, &a, &b), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_action),
        cmocka_unit_test(test_state_key),
        cmocka_unit_test(test_usec),
        cmocka_unit_test(test_count_days),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
