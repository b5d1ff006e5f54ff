/* devlimit: the per-device token bucket with an injected clock (starts full, burst =
 * max(1, max_rps), refill, exact Retry-After, a clock going back), lazy expiry of idle
 * entries, growth and shrink of the open-addressing table, whole-batch admission,
 * durable profiles (survive a reopen, a corrupted file is refused), and the memory
 * per device at 1,000,000 devices (measured and printed, bounded). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "model/batch.h"
#include "server/admission/devlimit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bdb_devlimit *open_mem(int64_t idle_ms)
{
    bdb_devlimit *d = NULL;
    char err[256];
    assert_int_equal(bdb_devlimit_open(NULL, idle_ms, &d, err, sizeof err), BDB_OK);
    return d;
}

static void test_bucket_math(void **state)
{
    (void)state;
    bdb_devlimit *d = open_mem(600000);
    int64_t ra = -7;
    uint64_t k = bdb_devlimit_key("t", "dev", 3);
    /* max_rps 5: a new device holds 5 reports */
    for (int i = 0; i < 5; i++)
        assert_int_equal(bdb_devlimit_take(d, k, 5, 1, 1000, &ra), 1);
    assert_int_equal(ra, -7);
    assert_int_equal(bdb_devlimit_take(d, k, 5, 1, 1000, &ra), 0);
    assert_int_equal(ra, 1);
    /* one report per 200 ms */
    assert_int_equal(bdb_devlimit_take(d, k, 5, 1, 1199, &ra), 0);
    assert_int_equal(bdb_devlimit_take(d, k, 5, 1, 1200, &ra), 1);
    /* 4 reports need 800 ms: Retry-After 1 s; after it, admitted */
    assert_int_equal(bdb_devlimit_take(d, k, 5, 4, 1200, &ra), 0);
    assert_int_equal(ra, 1);
    assert_int_equal(bdb_devlimit_take(d, k, 5, 4, 2000, &ra), 1);
    /* more than the burst can never pass */
    assert_int_equal(bdb_devlimit_take(d, k, 5, 6, 100000, &ra), -1);
    /* never above the burst after a long pause */
    assert_int_equal(bdb_devlimit_take(d, k, 5, 5, 500000, &ra), 1);
    assert_int_equal(bdb_devlimit_take(d, k, 5, 1, 500000, &ra), 0);
    /* a clock going back refills nothing */
    assert_int_equal(bdb_devlimit_take(d, k, 5, 1, 400000, &ra), 0);
    assert_int_equal(bdb_devlimit_take(d, k, 5, 1, 500200, &ra), 1);
    bdb_devlimit_free(d);
}

static void test_burst_at_least_one(void **state)
{
    (void)state;
    bdb_devlimit *d = open_mem(600000);
    int64_t ra = 0;
    /* max_rps 1: burst 1, one report per second, retry after the second */
    assert_int_equal(bdb_devlimit_take(d, 42, 1, 1, 0, &ra), 1);
    assert_int_equal(bdb_devlimit_take(d, 42, 1, 1, 500, &ra), 0);
    assert_int_equal(ra, 1);
    assert_int_equal(bdb_devlimit_take(d, 42, 1, 1, 1000, &ra), 1);
    assert_int_equal(bdb_devlimit_take(d, 42, 1, 2, 5000, &ra), -1);
    bdb_devlimit_free(d);
}

static void test_expiry_and_shrink(void **state)
{
    (void)state;
    bdb_devlimit *d = open_mem(10000); /* 10 s idle */
    int64_t ra;
    for (uint64_t k = 1; k <= 1000; k++)
        assert_int_equal(bdb_devlimit_take(d, k, 10, 1, 0, &ra), 1);
    assert_int_equal(bdb_devlimit_entries(d), 1000);
    size_t big = bdb_devlimit_capacity(d);
    assert_true(big >= 1000 * 4 / 3);
    /* not yet idle long enough: nothing goes */
    for (int i = 0; i < 100; i++)
        bdb_devlimit_take(d, 5000, 10, 1, 10000, &ra);
    assert_int_equal(bdb_devlimit_entries(d), 1001);
    /* after the idle time, activity of one device sweeps the others away */
    for (int i = 0; i < 5000; i++)
        bdb_devlimit_take(d, 5000, 1000000, 1, 20001 + i, &ra);
    assert_int_equal(bdb_devlimit_entries(d), 1);
    assert_true(bdb_devlimit_capacity(d) < big);
    assert_true(bdb_devlimit_capacity(d) <= 32);
    /* an expired device comes back with a full bucket */
    for (int i = 0; i < 10; i++)
        assert_int_equal(bdb_devlimit_take(d, 7, 10, 1, 40000, &ra), 1);
    assert_int_equal(bdb_devlimit_take(d, 7, 10, 1, 40000, &ra), 0);
    bdb_devlimit_free(d);
}

static void test_memory_per_device(void **state)
{
    (void)state;
    bdb_devlimit *d = open_mem(600000);
    int64_t ra;
    const uint64_t n = 1000000;
    for (uint64_t i = 0; i < n; i++) {
        char name[32];
        int l = snprintf(name, sizeof name, "sensor-%llu", (unsigned long long)i);
        uint64_t k = bdb_devlimit_key("tenant", name, (size_t)l);
        assert_int_equal(bdb_devlimit_take(d, k, 10, 1, 1000, &ra), 1);
    }
    size_t entries = bdb_devlimit_entries(d);
    assert_true(entries >= n - 2 && entries <= n); /* 64-bit key collisions: ~0 */
    double per = (double)bdb_devlimit_table_bytes(d) / (double)entries;
    printf("devlimit: %zu devices, %zu slots of %zu bytes, %.1f bytes per device\n", entries,
           bdb_devlimit_capacity(d), bdb_devlimit_entry_size(), per);
    assert_int_equal(bdb_devlimit_entry_size(), 24);
    assert_true(per <= 64.0);
    bdb_devlimit_free(d);
}

static bdb_batch *batch_of(const char **devs, size_t n)
{
    bdb_batch *b = bdb_batch_new();
    for (size_t i = 0; i < n; i++) {
        bdb_batch_begin(b, devs[i], strlen(devs[i]), 1000 + (int64_t)i, i + 1);
        bdb_batch_metric(b, "v", 1, 1.0);
        assert_int_equal(bdb_batch_end(b), 1);
    }
    return b;
}

static void test_admit_whole_batch(void **state)
{
    (void)state;
    bdb_devlimit *d = open_mem(600000);
    const char *dev = NULL;
    size_t dl = 0;
    uint32_t lim = 0, val = 0;
    int64_t ra = 0;
    const char *none[] = {"a", "b"};
    bdb_batch *b0 = batch_of(none, 2);
    /* no profiles: everything passes */
    assert_int_equal(bdb_devlimit_admit(d, "t", b0, 0, &dev, &dl, &lim, &val, &ra), 1);
    assert_int_equal(bdb_devlimit_set_profile(d, "t", "a", 2, 10000), BDB_OK);
    uint32_t r;
    int64_t iv;
    assert_int_equal(bdb_devlimit_get_profile(d, "t", "a", &r, &iv), 1);
    assert_int_equal(r, 2);
    assert_int_equal(iv, 10000);
    assert_int_equal(bdb_devlimit_get_profile(d, "u", "a", &r, &iv), 0);
    /* a: 2 reports in one batch pass, a third is refused with the whole batch */
    const char *two_a[] = {"a", "b", "a", "b", "b"};
    bdb_batch *b1 = batch_of(two_a, 5);
    assert_int_equal(bdb_devlimit_admit(d, "t", b1, 0, &dev, &dl, &lim, &val, &ra), 1);
    const char *mixed[] = {"b", "a"};
    bdb_batch *b2 = batch_of(mixed, 2);
    assert_int_equal(bdb_devlimit_admit(d, "t", b2, 100, &dev, &dl, &lim, &val, &ra), 0);
    assert_int_equal(dl, 1);
    assert_memory_equal(dev, "a", 1);
    assert_int_equal(lim, 2);
    assert_int_equal(val, 1);
    assert_int_equal(ra, 1);
    /* other tenants' device "a" has no profile */
    assert_int_equal(bdb_devlimit_admit(d, "u", b1, 100, &dev, &dl, &lim, &val, &ra), 1);
    /* three reports of a never fit a burst of 2 */
    const char *three[] = {"a", "a", "a"};
    bdb_batch *b3 = batch_of(three, 3);
    assert_int_equal(bdb_devlimit_admit(d, "t", b3, 99000, &dev, &dl, &lim, &val, &ra), -1);
    assert_int_equal(val, 3);
    /* a refusal took nothing: the full burst is still there */
    assert_int_equal(bdb_devlimit_admit(d, "t", b1, 99000, &dev, &dl, &lim, &val, &ra), 1);
    /* max_rps 0 lifts the limit */
    assert_int_equal(bdb_devlimit_set_profile(d, "t", "a", 0, 10000), BDB_OK);
    assert_int_equal(bdb_devlimit_admit(d, "t", b3, 99000, &dev, &dl, &lim, &val, &ra), 1);
    assert_int_equal(bdb_devlimit_set_profile(d, "t", "a", BDB_DEVLIMIT_MAX_RPS + 1, 0),
                     BDB_ERR_INVALID);
    bdb_batch_free(b0);
    bdb_batch_free(b1);
    bdb_batch_free(b2);
    bdb_batch_free(b3);
    bdb_devlimit_free(d);
}

static void test_profiles_durable(void **state)
{
    (void)state;
    char dir[] = "/tmp/bdb-devlimit-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char err[512];
    bdb_devlimit *d = NULL;
    assert_int_equal(bdb_devlimit_open(dir, 600000, &d, err, sizeof err), BDB_OK);
    assert_int_equal(bdb_devlimit_set_profile(d, "acme", "site/line 1/%unit", 7, 10000), BDB_OK);
    assert_int_equal(bdb_devlimit_set_profile(d, "acme", "b", 3, 0), BDB_OK);
    assert_int_equal(bdb_devlimit_set_profile(d, "acme", "b", 4, 5000), BDB_OK);
    bdb_devlimit_free(d);
    assert_int_equal(bdb_devlimit_open(dir, 600000, &d, err, sizeof err), BDB_OK);
    assert_int_equal(bdb_devlimit_profiles(d), 2);
    uint32_t r = 0;
    int64_t iv = 0;
    assert_int_equal(bdb_devlimit_get_profile(d, "acme", "site/line 1/%unit", &r, &iv), 1);
    assert_int_equal(r, 7);
    assert_int_equal(iv, 10000);
    assert_int_equal(bdb_devlimit_get_profile(d, "acme", "b", &r, &iv), 1);
    assert_int_equal(r, 4);
    assert_int_equal(iv, 5000);
    bdb_devlimit_free(d);
    /* a flipped byte is detected, not silently loaded */
    char path[600];
    snprintf(path, sizeof path, "%s/profiles", dir);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 22, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, 22, SEEK_SET);
    fputc(ch ^ 1, f);
    fclose(f);
    d = NULL;
    assert_int_equal(bdb_devlimit_open(dir, 600000, &d, err, sizeof err), BDB_ERR_CORRUPT);
    assert_null(d);
    assert_non_null(strstr(err, "checksum"));
    unlink(path);
    rmdir(dir);
}

/* The refused device is named whole, however long max_key_bytes lets names be (the
 * server once copied it into 256 bytes). */
static void test_admit_names_long_device_whole(void **state)
{
    (void)state;
    bdb_devlimit *d = open_mem(600000);
    char name[701];
    memset(name, 'x', 700);
    name[699] = 'z';
    name[700] = '\0';
    assert_int_equal(bdb_devlimit_set_profile(d, "t", name, 1, 0), BDB_OK);
    const char *devs[] = {"short", name, name};
    bdb_batch *b = batch_of(devs, 3);
    const char *dev = NULL;
    size_t dl = 0;
    uint32_t lim = 0, val = 0;
    int64_t ra = 0;
    assert_int_equal(bdb_devlimit_admit(d, "t", b, 0, &dev, &dl, &lim, &val, &ra), -1);
    assert_int_equal(dl, 700);
    assert_memory_equal(dev, name, 700);
    assert_int_equal(lim, 1);
    assert_int_equal(val, 2);
    bdb_batch_free(b);
    bdb_devlimit_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket_math),
        cmocka_unit_test(test_burst_at_least_one),
        cmocka_unit_test(test_expiry_and_shrink),
        cmocka_unit_test(test_memory_per_device),
        cmocka_unit_test(test_admit_whole_batch),
        cmocka_unit_test(test_admit_names_long_device_whole),
        cmocka_unit_test(test_profiles_durable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
