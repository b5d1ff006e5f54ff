/* batch: the builder (tags, metrics, state, end/cancel, empty reports dropped), strings
 * copied so the caller's buffers may be reused, pointers stable while the batch grows
 * past several arena blocks (and strings larger than a block), reset and reuse. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_empty_batch(void **state)
{
    (void)state;
    bdb_batch *b = bdb_batch_new();
    assert_non_null(b);
    size_t n = 99;
    bdb_batch_reports(b, &n);
    assert_int_equal(n, 0);
    assert_int_equal(bdb_batch_samples(b), 0);
    bdb_batch_free(b);
    bdb_batch_free(NULL); /* safe */
}

static void test_one_report(void **state)
{
    (void)state;
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, "dev-1", 5, 1700000000000, 3);
    bdb_batch_tag(b, "site", 4, "berlin", 6);
    bdb_batch_tag(b, "floor", 5, "2", 1);
    bdb_batch_metric(b, "sensor.temp", 11, 21.5);
    bdb_batch_metric(b, "sensor.rpm", 10, -900.0);
    bdb_batch_state(b, "on", 2);
    assert_int_equal(bdb_batch_end(b), 1);

    size_t n;
    const bdb_report *r = bdb_batch_reports(b, &n);
    assert_int_equal(n, 1);
    assert_int_equal(bdb_batch_samples(b), 2);
    assert_int_equal(r[0].device_len, 5);
    assert_string_equal(r[0].device, "dev-1");
    assert_int_equal(r[0].ts_ms, 1700000000000);
    assert_int_equal(r[0].lineno, 3);
    assert_int_equal(r[0].ntags, 2);
    assert_string_equal(r[0].tags[0].key, "site");
    assert_int_equal(r[0].tags[0].klen, 4);
    assert_string_equal(r[0].tags[0].val, "berlin");
    assert_int_equal(r[0].tags[0].vlen, 6);
    assert_string_equal(r[0].tags[1].key, "floor");
    assert_string_equal(r[0].tags[1].val, "2");
    assert_int_equal(r[0].nmetrics, 2);
    assert_string_equal(r[0].metrics[0].name, "sensor.temp");
    assert_int_equal(r[0].metrics[0].nlen, 11);
    assert_true(r[0].metrics[0].value == 21.5);
    assert_string_equal(r[0].metrics[1].name, "sensor.rpm");
    assert_true(r[0].metrics[1].value == -900.0);
    assert_non_null(r[0].state);
    assert_string_equal(r[0].state, "on");
    assert_int_equal(r[0].state_len, 2);
    bdb_batch_free(b);
}

static void test_strings_are_copied_with_length(void **state)
{
    (void)state;
    bdb_batch *b = bdb_batch_new();
    char dev[16], key[16], val[16], met[16], st[16];
    strcpy(dev, "d1XXXX");
    strcpy(key, "kXX");
    strcpy(val, "vXX");
    strcpy(met, "mXX");
    strcpy(st, "faultXX");
    /* lengths shorter than the buffers: only that many bytes count */
    bdb_batch_begin(b, dev, 2, 10, 1);
    bdb_batch_tag(b, key, 1, val, 1);
    bdb_batch_metric(b, met, 1, 1.0);
    bdb_batch_state(b, st, 5);
    assert_int_equal(bdb_batch_end(b), 1);
    /* the parser's buffers are reused at once */
    memset(dev, 'Z', sizeof dev - 1);
    memset(key, 'Z', sizeof key - 1);
    memset(val, 'Z', sizeof val - 1);
    memset(met, 'Z', sizeof met - 1);
    memset(st, 'Z', sizeof st - 1);
    size_t n;
    const bdb_report *r = bdb_batch_reports(b, &n);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].device, "d1");
    assert_string_equal(r[0].tags[0].key, "k");
    assert_string_equal(r[0].tags[0].val, "v");
    assert_string_equal(r[0].metrics[0].name, "m");
    assert_string_equal(r[0].state, "fault");

    /* embedded NUL bytes survive with their lengths */
    bdb_batch_begin(b, "a\0b", 3, 11, 2);
    bdb_batch_metric(b, "x\0y", 3, 2.0);
    assert_int_equal(bdb_batch_end(b), 1);
    r = bdb_batch_reports(b, &n);
    assert_int_equal(n, 2);
    assert_int_equal(r[1].device_len, 3);
    assert_memory_equal(r[1].device, "a\0b", 4);
    assert_memory_equal(r[1].metrics[0].name, "x\0y", 4);
    bdb_batch_free(b);
}

static void test_empty_report_dropped_and_state_only_kept(void **state)
{
    (void)state;
    bdb_batch *b = bdb_batch_new();
    /* no metric, no state: dropped, even with tags */
    bdb_batch_begin(b, "d", 1, 1, 1);
    bdb_batch_tag(b, "k", 1, "v", 1);
    assert_int_equal(bdb_batch_end(b), 0);
    size_t n;
    bdb_batch_reports(b, &n);
    assert_int_equal(n, 0);

    /* state only: kept, no metrics */
    bdb_batch_begin(b, "d", 1, 2, 2);
    bdb_batch_state(b, "off", 3);
    assert_int_equal(bdb_batch_end(b), 1);
    /* empty state text is still a state */
    bdb_batch_begin(b, "e", 1, 3, 3);
    bdb_batch_state(b, "", 0);
    assert_int_equal(bdb_batch_end(b), 1);
    /* metrics only: no state */
    bdb_batch_begin(b, "f", 1, 4, 4);
    bdb_batch_metric(b, "m", 1, 0.0);
    assert_int_equal(bdb_batch_end(b), 1);

    const bdb_report *r = bdb_batch_reports(b, &n);
    assert_int_equal(n, 3);
    assert_int_equal(bdb_batch_samples(b), 1);
    assert_int_equal(r[0].nmetrics, 0);
    assert_int_equal(r[0].ntags, 0);
    assert_null(r[0].tags);
    assert_null(r[0].metrics);
    assert_string_equal(r[0].state, "off");
    assert_non_null(r[1].state);
    assert_int_equal(r[1].state_len, 0);
    assert_null(r[2].state);
    assert_int_equal(r[2].nmetrics, 1);
    bdb_batch_free(b);
}

static void test_cancel(void **state)
{
    (void)state;
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, "good", 4, 1, 1);
    bdb_batch_metric(b, "m", 1, 1.0);
    assert_int_equal(bdb_batch_end(b), 1);

    bdb_batch_begin(b, "bad", 3, 2, 2);
    bdb_batch_tag(b, "t", 1, "x", 1);
    bdb_batch_metric(b, "m1", 2, 2.0);
    bdb_batch_metric(b, "m2", 2, 3.0);
    bdb_batch_state(b, "on", 2);
    bdb_batch_cancel(b);

    /* nothing of the cancelled report leaks into the next one */
    bdb_batch_begin(b, "next", 4, 3, 3);
    bdb_batch_metric(b, "m3", 2, 4.0);
    assert_int_equal(bdb_batch_end(b), 1);

    size_t n;
    const bdb_report *r = bdb_batch_reports(b, &n);
    assert_int_equal(n, 2);
    assert_int_equal(bdb_batch_samples(b), 2);
    assert_string_equal(r[0].device, "good");
    assert_string_equal(r[1].device, "next");
    assert_int_equal(r[1].ntags, 0);
    assert_int_equal(r[1].nmetrics, 1);
    assert_string_equal(r[1].metrics[0].name, "m3");
    assert_null(r[1].state);
    assert_int_equal(r[1].lineno, 3);

    /* a cancelled state-only report is not kept either */
    bdb_batch_begin(b, "s", 1, 4, 4);
    bdb_batch_state(b, "x", 1);
    bdb_batch_cancel(b);
    bdb_batch_reports(b, &n);
    assert_int_equal(n, 2);
    bdb_batch_free(b);
}

/* Builds a batch much larger than one 64 KiB arena block, with some strings larger
 * than a block, and checks every report (including pointers taken at the start). */
static void check_big(bdb_batch *b, int nrep, int round)
{
    char dev[64], name[64], tk[64], tv[64];
    const char *first_dev = NULL, *first_metric = NULL;
    const bdb_kv *first_tags = NULL;
    size_t big_len = 100000;
    char *big = malloc(big_len);
    assert_non_null(big);
    for (size_t i = 0; i < big_len; i++)
        big[i] = (char)('a' + (i + (size_t)round) % 26);
    for (int i = 0; i < nrep; i++) {
        int dl = snprintf(dev, sizeof dev, "device-%d-%d", round, i);
        bdb_batch_begin(b, dev, (size_t)dl, 1000 + i, (size_t)i + 1);
        int ntags = i % 4;
        for (int t = 0; t < ntags; t++) {
            int kl = snprintf(tk, sizeof tk, "key%d", t);
            int vl = snprintf(tv, sizeof tv, "val%d-%d", t, i);
            bdb_batch_tag(b, tk, (size_t)kl, tv, (size_t)vl);
        }
        int nm = 1 + i % 40; /* beyond the initial 16-entry metric array */
        for (int m = 0; m < nm; m++) {
            int ml = snprintf(name, sizeof name, "metric.%d", m);
            bdb_batch_metric(b, name, (size_t)ml, i * 1000.0 + m);
        }
        if (i % 97 == 5)
            bdb_batch_state(b, big, big_len); /* larger than an arena block */
        assert_int_equal(bdb_batch_end(b), 1);
        if (i == 0) {
            size_t n;
            const bdb_report *r = bdb_batch_reports(b, &n);
            first_dev = r[0].device;
            first_metric = r[0].metrics[0].name;
            first_tags = r[0].tags;
        }
    }
    size_t n;
    const bdb_report *r = bdb_batch_reports(b, &n);
    assert_int_equal(n, (size_t)nrep);
    size_t samples = 0;
    for (int i = 0; i < nrep; i++) {
        snprintf(dev, sizeof dev, "device-%d-%d", round, i);
        assert_string_equal(r[i].device, dev);
        assert_int_equal(r[i].ts_ms, 1000 + i);
        assert_int_equal(r[i].lineno, (size_t)i + 1);
        assert_int_equal(r[i].ntags, (uint32_t)(i % 4));
        for (int t = 0; t < i % 4; t++) {
            snprintf(tk, sizeof tk, "key%d", t);
            snprintf(tv, sizeof tv, "val%d-%d", t, i);
            assert_string_equal(r[i].tags[t].key, tk);
            assert_string_equal(r[i].tags[t].val, tv);
        }
        assert_int_equal(r[i].nmetrics, (uint32_t)(1 + i % 40));
        for (uint32_t m = 0; m < r[i].nmetrics; m++) {
            snprintf(name, sizeof name, "metric.%u", m);
            assert_string_equal(r[i].metrics[m].name, name);
            assert_true(r[i].metrics[m].value == i * 1000.0 + m);
        }
        samples += r[i].nmetrics;
        if (i % 97 == 5) {
            assert_int_equal(r[i].state_len, big_len);
            assert_memory_equal(r[i].state, big, big_len);
            assert_int_equal(r[i].state[big_len], '\0');
        } else {
            assert_null(r[i].state);
        }
    }
    assert_int_equal(bdb_batch_samples(b), samples);
    /* pointers handed out at the start never moved */
    assert_ptr_equal(r[0].device, first_dev);
    assert_ptr_equal(r[0].metrics[0].name, first_metric);
    assert_ptr_equal(r[0].tags, first_tags);
    free(big);
}

static void test_large_batch_and_reset(void **state)
{
    (void)state;
    bdb_batch *b = bdb_batch_new();
    check_big(b, 3000, 0);
    bdb_batch_reset(b);
    size_t n = 1;
    bdb_batch_reports(b, &n);
    assert_int_equal(n, 0);
    assert_int_equal(bdb_batch_samples(b), 0);
    /* reuse after reset: everything is consistent again */
    check_big(b, 2000, 1);
    bdb_batch_reset(b);
    check_big(b, 10, 2);
    bdb_batch_reset(b);
    bdb_batch_reset(b); /* twice is fine */
    bdb_batch_free(b);

    /* reset of a never-used batch */
    b = bdb_batch_new();
    bdb_batch_reset(b);
    check_big(b, 5, 3);
    bdb_batch_free(b);
}

/* A report left open by begin without end is replaced by the next begin. */
static void test_begin_twice(void **state)
{
    (void)state;
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, "a", 1, 1, 1);
    bdb_batch_metric(b, "m", 1, 1.0);
    bdb_batch_state(b, "s", 1);
    bdb_batch_begin(b, "b", 1, 2, 2);
    bdb_batch_metric(b, "n", 1, 2.0);
    assert_int_equal(bdb_batch_end(b), 1);
    size_t n;
    const bdb_report *r = bdb_batch_reports(b, &n);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].device, "b");
    assert_int_equal(r[0].nmetrics, 1);
    assert_string_equal(r[0].metrics[0].name, "n");
    assert_null(r[0].state);
    assert_int_equal(bdb_batch_samples(b), 1);
    bdb_batch_free(b);
}
/* Attributes: a report of attributes only is kept, at most BDB_MAX_REPORT_ATTRS per
 * report, counted per batch, gone after a reset and after a cancel. */
static void test_attributes(void **state)
{
    (void)state;
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, "d", 1, 1, 1);
    bdb_batch_attr(b, "fw", 2, "1.2", 3);
    assert_int_equal(bdb_batch_end(b), 1);
    bdb_batch_begin(b, "e", 1, 2, 2);
    char name[16];
    for (int i = 0; i < BDB_MAX_REPORT_ATTRS + 5; i++) {
        snprintf(name, sizeof name, "a%d", i);
        bdb_batch_attr(b, name, strlen(name), "", 0);
    }
    bdb_batch_metric(b, "m", 1, 1.0);
    assert_int_equal(bdb_batch_end(b), 1);
    bdb_batch_begin(b, "f", 1, 3, 3);
    bdb_batch_attr(b, "x", 1, "y", 1);
    bdb_batch_cancel(b);
    size_t n;
    const bdb_report *r = bdb_batch_reports(b, &n);
    assert_int_equal(n, 2);
    assert_int_equal(r[0].nattrs, 1);
    assert_int_equal(r[0].nmetrics, 0);
    assert_null(r[0].state);
    assert_string_equal(r[0].attrs[0].key, "fw");
    assert_string_equal(r[0].attrs[0].val, "1.2");
    assert_int_equal(r[0].attrs[0].vlen, 3);
    assert_int_equal(r[1].nattrs, BDB_MAX_REPORT_ATTRS);
    assert_int_equal(r[1].attrs[0].vlen, 0);
    assert_int_equal(bdb_batch_attrs(b), 1 + BDB_MAX_REPORT_ATTRS);
    bdb_batch_reset(b);
    assert_int_equal(bdb_batch_attrs(b), 0);
    bdb_batch_begin(b, "g", 1, 4, 4);
    bdb_batch_metric(b, "m", 1, 1.0);
    assert_int_equal(bdb_batch_end(b), 1);
    r = bdb_batch_reports(b, &n);
    assert_int_equal(r[0].nattrs, 0);
    assert_null(r[0].attrs);
    bdb_batch_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_batch),
        cmocka_unit_test(test_one_report),
        cmocka_unit_test(test_strings_are_copied_with_length),
        cmocka_unit_test(test_empty_report_dropped_and_state_only_kept),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_large_batch_and_reset),
        cmocka_unit_test(test_begin_twice),
        cmocka_unit_test(test_attributes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
