/* db_usage: per-tenant storage and whole-partition sizes, measured by hand
 * (bdb_usage_opts.manual, background = 0) so that every flush, compaction, retention
 * drop and measurement is explicit.
 *
 * Covered: unflushed samples count 16 bytes each, also between measurements through
 * bdb_db_usage_note, and are not counted twice once measured; after a flush the
 * tenants' block bytes add up to exactly the bytes of the block files on disk, split by
 * their data; compaction and a retention drop change the figures to the new files;
 * tenants are kept apart; a partition spread over three block windows is one
 * partition of the summed size; the large-partition warning is logged once per
 * partition, however many measurements see it; without a tracker nothing is counted. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIN BDB_MS_MIN
#define HOUR BDB_MS_HOUR
#define DAY BDB_MS_DAY

static char tmpdir[64];
static char datadir[128];
static int64_t clock_now; /* the db's wall clock in these tests */

static int setup(void **state)
{
    (void)state;
    eu_scratch(tmpdir, sizeof tmpdir, "usage", EU_TMPFS, datadir, sizeof datadir);
    clock_now = bdb_align_down(bdb_now_ms(), DAY) + 12 * HOUR;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return eu_cleanup(tmpdir);
}

static bdb_db *open_db(int64_t retention_ms)
{
    bdb_db_opts o;
    bdb_db_opts_default(&o);
    o.data_dir = datadir;
    o.background = 0;
    o.retention_ms = retention_ms;
    o.clock = (bdb_clock){eu_clock, &clock_now};
    return eu_open(&o);
}

static void start(bdb_db *db, uint64_t warn)
{
    bdb_usage_opts uo = {warn, 1};
    bdb_db_usage_start(db, &uo);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
}

/* n samples of one metric from ts0 every step, one batch; returns n. */
static uint64_t put(bdb_db *db, const char *tenant, const char *dev, int64_t ts0, int64_t step,
                    int n)
{
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < n; i++) {
        bdb_batch_begin(b, dev, strlen(dev), ts0 + i * step, (size_t)i + 1);
        /* values that do not compress to nothing */
        bdb_batch_metric(b, "m", 1, (double)((i * 7919) % 1000) / 7.0);
        bdb_batch_end(b);
    }
    assert_int_equal(bdb_db_write(db, tenant, b), BDB_OK);
    bdb_batch_free(b);
    return (uint64_t)n;
}

static bdb_storage_usage usage_of(bdb_db *db, const char *tenant)
{
    bdb_storage_usage su;
    assert_int_equal(bdb_db_tenant_storage(db, tenant, &su), BDB_OK);
    assert_int_equal(su.measured, 1);
    assert_int_equal(su.bytes, su.block_bytes + su.unflushed_bytes);
    assert_int_equal(su.unflushed_bytes, su.unflushed_samples * BDB_USAGE_SAMPLE_BYTES);
    return su;
}

/* Bytes and number of the block files on disk. */
static uint64_t disk_blocks(int *nfiles)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/blocks", datadir);
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    uint64_t total = 0;
    *nfiles = 0;
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l < 4 || strcmp(de->d_name + l - 4, ".blk") != 0)
            continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        assert_int_equal(stat(p, &st), 0);
        total += (uint64_t)st.st_size;
        (*nfiles)++;
    }
    closedir(d);
    return total;
}

static void test_unflushed_then_flushed(void **state)
{
    (void)state;
    bdb_db *db = open_db(0);
    start(db, 0);
    int64_t t0 = clock_now - 3 * HOUR;
    uint64_t na = put(db, "a", "d1", t0, 1000, 100);
    uint64_t nb = put(db, "b", "d1", t0, 1000, 300) + put(db, "b", "d2", t0, 1000, 200);
    /* not noted and not measured yet: nothing */
    assert_int_equal(usage_of(db, "a").bytes, 0);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    assert_int_equal(usage_of(db, "a").unflushed_samples, na);
    assert_int_equal(usage_of(db, "a").bytes, na * BDB_USAGE_SAMPLE_BYTES);
    assert_int_equal(usage_of(db, "b").bytes, nb * BDB_USAGE_SAMPLE_BYTES);
    assert_int_equal(usage_of(db, "a").block_bytes, 0);
    /* A write noted between measurements counts at once, and the next measurement
     * (which finds it in the head) does not count it twice. */
    uint64_t more = put(db, "a", "d1", t0 + 100000, 1000, 50);
    bdb_db_usage_note(db, "a", more);
    assert_int_equal(usage_of(db, "a").unflushed_samples, na + more);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    assert_int_equal(usage_of(db, "a").unflushed_samples, na + more);
    assert_int_equal(usage_of(db, "b").unflushed_samples, nb);
    /* A tenant that never wrote has nothing. */
    assert_int_equal(usage_of(db, "nobody").bytes, 0);

    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    bdb_storage_usage a = usage_of(db, "a"), b = usage_of(db, "b");
    assert_int_equal(a.unflushed_samples, 0);
    assert_int_equal(b.unflushed_samples, 0);
    int nfiles;
    uint64_t disk = disk_blocks(&nfiles);
    assert_true(nfiles >= 1);
    assert_true(a.block_bytes > 0 && b.block_bytes > 0);
    assert_int_equal(a.block_bytes + b.block_bytes, disk);
    /* b wrote 500 samples in two devices, a 150 in one */
    assert_true(b.block_bytes > a.block_bytes);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_compaction_and_reopen(void **state)
{
    (void)state;
    bdb_db *db = open_db(0);
    start(db, 0);
    int64_t w = bdb_align_down(clock_now, 2 * HOUR) - 2 * HOUR; /* one whole window */
    put(db, "a", "d1", w, 1000, 400);
    put(db, "b", "d1", w, 1000, 100);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    put(db, "a", "d1", w + 400000, 1000, 400);
    put(db, "b", "d2", w, 1000, 100);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    int nfiles;
    uint64_t disk = disk_blocks(&nfiles);
    assert_int_equal(nfiles, 2);
    bdb_storage_usage a = usage_of(db, "a"), b = usage_of(db, "b");
    assert_int_equal(a.block_bytes + b.block_bytes, disk);
    /* a's partition sits in both files: one partition, not two */
    bdb_partition_summary ps;
    assert_int_equal(bdb_db_partition_summary(db, &ps), BDB_OK);
    assert_int_equal(ps.count, 3); /* a/d1, b/d1, b/d2 */

    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    uint64_t disk2 = disk_blocks(&nfiles);
    assert_int_equal(nfiles, 1);
    assert_true(disk2 != disk); /* one index instead of two */
    bdb_storage_usage a2 = usage_of(db, "a"), b2 = usage_of(db, "b");
    assert_int_equal(a2.block_bytes + b2.block_bytes, disk2);
    assert_true(a2.block_bytes > b2.block_bytes);
    assert_int_equal(bdb_db_partition_summary(db, &ps), BDB_OK);
    assert_int_equal(ps.count, 3);
    assert_int_equal(bdb_db_close(db), BDB_OK);

    /* After a restart the first measurement finds the same. */
    db = open_db(0);
    start(db, 0);
    assert_int_equal(usage_of(db, "a").block_bytes, a2.block_bytes);
    assert_int_equal(usage_of(db, "b").block_bytes, b2.block_bytes);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_retention_drop(void **state)
{
    (void)state;
    bdb_db *db = open_db(DAY);
    start(db, 0);
    int64_t w = bdb_align_down(clock_now, 2 * HOUR) - 4 * HOUR;
    put(db, "a", "d1", w, 1000, 300);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    put(db, "a", "d1", clock_now - 10 * MIN, 1000, 100); /* a later window, kept */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    int nfiles;
    uint64_t before = usage_of(db, "a").block_bytes;
    assert_int_equal(before, disk_blocks(&nfiles));
    assert_int_equal(nfiles, 2);
    /* A day later the first window has expired, the second not yet. */
    clock_now += DAY - HOUR;
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    uint64_t after = usage_of(db, "a").block_bytes;
    assert_int_equal(after, disk_blocks(&nfiles));
    assert_int_equal(nfiles, 1);
    assert_true(after > 0 && after < before);
    clock_now += DAY;
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    assert_int_equal(usage_of(db, "a").bytes, 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static int count_pieces(void *ctx, const char *t, const char *d, int64_t bs, uint64_t rows,
                        uint64_t bytes)
{
    (void)t;
    (void)d;
    (void)bs;
    (void)rows;
    uint64_t *acc = ctx;
    acc[0]++;
    acc[1] += bytes;
    return 0;
}

/* Runs a measurement with stderr sent to a file; returns how many lines of it hold
 * "large partition:". */
static int warnings_of_refresh(bdb_db *db)
{
    char path[256];
    snprintf(path, sizeof path, "%s/stderr", tmpdir);
    int saved = eu_stderr_to(path);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    eu_stderr_restore(saved);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, "large partition:") != NULL;
    fclose(f);
    return n;
}

static void test_partition_over_windows_and_warning(void **state)
{
    (void)state;
    int64_t day = bdb_align_down(clock_now, DAY);
    clock_now = day - DAY; /* the bucket change applies from then on */
    bdb_db *db = open_db(0);
    assert_int_equal(bdb_db_set_device_bucket(db, "a", "big", DAY), BDB_OK);
    clock_now = day + 7 * HOUR;
    /* three 2 h windows of one 1-day partition, and a small device */
    for (int w = 0; w < 3; w++)
        put(db, "a", "big", day + w * 2 * HOUR, 1000, 500);
    put(db, "a", "small", day, 60000, 10);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    uint64_t pieces[2] = {0, 0};
    assert_int_equal(bdb_db_partition_sizes(db, count_pieces, pieces), BDB_OK);
    assert_true(pieces[0] >= 4); /* the big partition is in three files */

    bdb_usage_opts uo = {0, 1};
    bdb_db_usage_start(db, &uo);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    bdb_partition_summary ps;
    assert_int_equal(bdb_db_partition_summary(db, &ps), BDB_OK);
    assert_int_equal(ps.count, 2);
    assert_int_equal(ps.sum, pieces[1]);
    uint64_t total = 0;
    for (int i = 0; i <= BDB_PSIZE_NB; i++)
        total += ps.buckets[i];
    assert_int_equal(total, 2);
    assert_true(ps.max > pieces[1] / 2); /* the big one holds most bytes */
    assert_true(ps.p99 <= ps.max && ps.p50 >= 1);
    assert_int_equal(ps.large, 0); /* warnings off */

    /* A threshold between the two sizes: the big one warned once, in one run. */
    uo.partition_warn_bytes = ps.sum - ps.max + 1;
    assert_true(uo.partition_warn_bytes < ps.max);
    bdb_db_usage_start(db, &uo);
    assert_int_equal(warnings_of_refresh(db), 1);
    assert_int_equal(bdb_db_partition_summary(db, &ps), BDB_OK);
    assert_int_equal(ps.large, 1);
    assert_int_equal(ps.warn_bytes, uo.partition_warn_bytes);
    assert_int_equal(warnings_of_refresh(db), 0);
    assert_int_equal(bdb_db_partition_summary(db, &ps), BDB_OK);
    assert_int_equal(ps.large, 1); /* still counted */
    /* A new partition over it is warned about in its turn. */
    put(db, "a", "big", day + DAY + HOUR, 1000, 1500);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(warnings_of_refresh(db), 1);
    assert_int_equal(warnings_of_refresh(db), 0);
    assert_int_equal(bdb_db_partition_summary(db, &ps), BDB_OK);
    assert_int_equal(ps.count, 3);
    assert_int_equal(ps.large, 2);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_without_tracker(void **state)
{
    (void)state;
    bdb_db *db = open_db(0);
    put(db, "a", "d1", clock_now - HOUR, 1000, 10);
    bdb_db_usage_note(db, "a", 10); /* ignored */
    bdb_storage_usage su;
    assert_int_equal(bdb_db_tenant_storage(db, "a", &su), BDB_ERR_NOTFOUND);
    assert_int_equal(su.bytes, 0);
    bdb_partition_summary ps;
    assert_int_equal(bdb_db_partition_summary(db, &ps), BDB_ERR_NOTFOUND);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_ERR_NOTFOUND);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* The tracker's own thread measures without being asked. */
static void test_thread_measures(void **state)
{
    (void)state;
    bdb_db *db = open_db(0);
    put(db, "a", "d1", clock_now - HOUR, 1000, 10);
    bdb_usage_opts uo = {0, 0};
    bdb_db_usage_start(db, &uo);
    bdb_storage_usage su = {0};
    for (int i = 0; i < 500 && !su.measured; i++) { /* up to 5 s */
        usleep(10000);
        bdb_db_tenant_storage(db, "a", &su);
    }
    assert_int_equal(su.measured, 1);
    assert_int_equal(su.unflushed_samples, 10);
    /* a flush changes the block files: measured again within a second or two */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    for (int i = 0; i < 500 && su.block_bytes == 0; i++) { /* up to 5 s */
        usleep(10000);
        bdb_db_tenant_storage(db, "a", &su);
    }
    assert_true(su.block_bytes > 0);
    assert_int_equal(su.unflushed_samples, 0);
    assert_int_equal(bdb_db_close(db), BDB_OK); /* stops the thread */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unflushed_then_flushed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compaction_and_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retention_drop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_partition_over_windows_and_warning, setup, teardown),
        cmocka_unit_test_setup_teardown(test_without_tracker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_thread_measures, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
