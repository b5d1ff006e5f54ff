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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log_keeps_errno),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
