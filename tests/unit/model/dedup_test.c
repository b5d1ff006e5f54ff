/* dedup: what a batch keeps of reports that share a device and a millisecond (later
 * wins per metric and for the state), without duplicates, with many reports of one
 * series (receive-time points), and a report of which only the state survives. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "model/batch.h"
#include "model/dedup.h"

#include <stdio.h>
#include <string.h>

/* Adds a report: metrics as "a=1,b=2" style names (values do not matter here). */
static void add(bdb_batch *b, const char *dev, int64_t ts, const char *metrics, const char *st)
{
    bdb_batch_begin(b, dev, strlen(dev), ts, 1);
    char buf[128];
    snprintf(buf, sizeof buf, "%s", metrics);
    for (char *m = strtok(buf, ","); m; m = strtok(NULL, ","))
        bdb_batch_metric(b, m, strlen(m), 1.0);
    if (st)
        bdb_batch_state(b, st, strlen(st));
    assert_int_equal(bdb_batch_end(b), 1);
}

static bdb_dedup count(bdb_batch *b)
{
    bdb_dedup d;
    assert_int_equal(bdb_dedup_count(b, &d), BDB_OK);
    return d;
}

static void test_no_duplicates(void **state)
{
    (void)state;
    bdb_batch *b = bdb_batch_new();
    bdb_dedup d = count(b);
    assert_int_equal(d.samples + d.reports, 0);
    add(b, "d1", 1000, "t", NULL);
    add(b, "d1", 1001, "t", NULL);
    add(b, "d2", 1000, "t", NULL);
    add(b, "d12", 1000, "t", NULL); /* a device name that extends another */
    d = count(b);
    assert_int_equal(d.samples, 0);
    assert_int_equal(d.reports, 0);
    bdb_batch_free(b);
}

static void test_same_millisecond(void **state)
{
    (void)state;
    bdb_batch *b = bdb_batch_new();
    /* a report of attributes only is never counted as overridden */
    bdb_batch_begin(b, "d1", 2, 1000, 1);
    bdb_batch_attr(b, "fw", 2, "1", 1);
    assert_int_equal(bdb_batch_end(b), 1);
    add(b, "d1", 1000, "f", NULL);
    bdb_dedup d0 = count(b);
    assert_int_equal(d0.reports, 0);
    bdb_batch_reset(b);
    /* two points 0.5 ms apart: one sample kept, one report overridden */
    add(b, "d1", 1000, "f", NULL);
    add(b, "d1", 1000, "f", NULL);
    bdb_dedup d = count(b);
    assert_int_equal(d.samples, 1);
    assert_int_equal(d.reports, 1);
    assert_int_equal(bdb_batch_samples(b) - d.samples, 1);
    /* partly overlapping: the first report keeps g, so it still counts */
    bdb_batch_reset(b);
    add(b, "d1", 1000, "f,g", NULL);
    add(b, "d2", 1000, "f", NULL);
    add(b, "d1", 1000, "f", NULL);
    d = count(b);
    assert_int_equal(d.samples, 1);
    assert_int_equal(d.reports, 0);
    /* states: a later state overrides an earlier one; a report whose metrics are all
     * overridden still counts while its state survives */
    bdb_batch_reset(b);
    add(b, "d1", 1000, "f", "on");
    add(b, "d1", 1000, "f", NULL);
    d = count(b);
    assert_int_equal(d.samples, 1);
    assert_int_equal(d.reports, 0);
    add(b, "d1", 1000, "h", "off");
    d = count(b);
    assert_int_equal(d.samples, 1);
    assert_int_equal(d.reports, 1);
    bdb_batch_free(b);
}

static void test_many_of_one_series(void **state)
{
    (void)state;
    bdb_batch *b = bdb_batch_new();
    /* lines without a timestamp all get the receive time */
    for (int i = 0; i < 5000; i++)
        add(b, "d1", 7, "a,b", NULL);
    for (int i = 0; i < 100; i++) {
        char dev[16];
        snprintf(dev, sizeof dev, "x%d", i);
        add(b, dev, 7, "a", NULL);
    }
    bdb_dedup d = count(b);
    assert_int_equal(d.samples, 2 * 4999);
    assert_int_equal(d.reports, 4999);
    bdb_batch_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_duplicates),
        cmocka_unit_test(test_same_millisecond),
        cmocka_unit_test(test_many_of_one_series),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
