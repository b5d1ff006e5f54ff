/* log: a log call leaves errno as it found it. Callers log a failure and then report
 * its errno (the flush's "flush failed: ... (strerror)" line, issue 18); the first
 * call's gmtime_r reads the time zone, which fails with ENOENT where the zone file is
 * missing, as TZ points at here. Its own binary: the zone is read once a process. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/log.h"

#include <errno.h>
#include <stdlib.h>

static void test_log_keeps_errno(void **state)
{
    (void)state;
    assert_int_equal(setenv("TZ", ":/nonexistent/bucketdb-test-zone", 1), 0);
    bdb_log_set_level(BDB_LOG_INFO);
    errno = ENOSPC;
    BDB_INFO("log_test: a line whose errno must survive");
    assert_int_equal(errno, ENOSPC);
    errno = EIO;
    BDB_ERROR("log_test: and a second one");
    assert_int_equal(errno, EIO);
    bdb_log_set_level(BDB_LOG_ERROR + 1); /* below the level: nothing written, errno kept */
    errno = ENOSPC;
    BDB_ERROR("log_test: not written");
    assert_int_equal(errno, ENOSPC);
}

/* The budget of a per-device message: `lines` a window, the rest held back and
 * counted, the count handed to the first line of a later window. */
static void test_log_budget(void **state)
{
    (void)state;
    bdb_log_budget b = {.lines = 3, .window_ms = 1000};
    uint32_t held = 99;
    int64_t t = 0; /* a monotonic clock may start at 0 */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(bdb_log_budget_take(&b, t + i, &held), 1);
        assert_int_equal(held, 0);
    }
    for (int i = 0; i < 5; i++) {
        assert_int_equal(bdb_log_budget_take(&b, t + 999, &held), 0);
        assert_int_equal(held, 0);
    }
    /* the next window: the first line says what the last one held back */
    assert_int_equal(bdb_log_budget_take(&b, t + 1000, &held), 1);
    assert_int_equal(held, 5);
    assert_int_equal(bdb_log_budget_take(&b, t + 1001, &held), 1);
    assert_int_equal(held, 0);
    assert_int_equal(bdb_log_budget_take(&b, t + 1002, &held), 1);
    assert_int_equal(bdb_log_budget_take(&b, t + 1003, &held), 0);
    /* a long quiet time is one new window, whatever its length */
    assert_int_equal(bdb_log_budget_take(&b, t + 50000, &held), 1);
    assert_int_equal(held, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log_keeps_errno),
        cmocka_unit_test(test_log_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
