/* derived_tier: the 1m tier derived from raw data and the 1d tier from the 1h tier
 * (docs/AGGREGATION.md "The 1m tier is derived..."), in the cases a review found wrong
 * in the first version, which chose the source by a time floor:
 *  - a tenant's raw TTL grown after its minutes were kept and raw dropped: the kept
 *    minutes still answer;
 *  - the 1h retention grown after days were kept: the kept days still answer;
 *  - a sample into a 30-day window whose 1h files are gone (a backfill): added to the
 *    kept day, through the flush, the next maintenance and a restart;
 *  - a damaged chunk in an expired block: its window cannot be kept and stays, the
 *    next window's minutes are kept and answer;
 *  - kept days and their 1h files both on disk (a crash before the unlink): the 1h
 *    files are superseded at open, each day counted once;
 *  - 32 tenants' days kept in one pass (the file list grows while it is walked);
 *  - readers of the 1m and 1d tiers while maintenance keeps minutes and days and
 *    drops their raw data and 1h files: every read counts every sample once. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/crashutil.h"
#include "storage/embedded/engutil.h"

#include "agg/rollup.h"
#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/tier/db_tier.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN BDB_MS_MIN
#define HOUR BDB_MS_HOUR
#define DAY BDB_MS_DAY
#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */

static char tmpdir[64], datadir[128];
static int64_t fake_now, ttl, h1_keep; /* h1_keep: 1h retention, -1 forever, 0 default */

static int setup(void **st)
{
    (void)st;
    eu_scratch(tmpdir, sizeof tmpdir, "dtier", EU_TMPFS, datadir, sizeof datadir);
    bdb_log_set_level(BDB_LOG_ERROR + 1); /* the damaged block is expected */
    ttl = 0;
    h1_keep = 0;
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    return eu_cleanup(tmpdir);
}

static int64_t ttl_fn(void *c, const char *tn)
{
    (void)c;
    (void)tn;
    return ttl;
}

static int64_t ret_fn(void *c, const char *tn, enum bdb_res res, int64_t d)
{
    (void)c;
    (void)tn;
    return res == BDB_RES_1H && h1_keep ? h1_keep : d;
}

static void put_t(bdb_db *db, const char *tn, int64_t ts, double v)
{
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, "dev", 3, ts, 0);
    bdb_batch_metric(b, "temp", 4, v);
    assert_int_equal(bdb_batch_end(b), 1);
    assert_int_equal(bdb_db_write(db, tn, b), BDB_OK);
    bdb_batch_free(b);
}

static void put(bdb_db *db, int64_t ts, double v)
{
    put_t(db, "t1", ts, v);
}

/* The samples the tier res counts for t1/dev/temp in [from, to); rc the read's code. */
static uint64_t count_rc(bdb_db *db, enum bdb_res res, int64_t from, int64_t to, int *rc)
{
    const char *m[1] = {"temp"};
    bdb_rollup r;
    bdb_rollup_init(&r, bdb_res_width(res));
    *rc = bdb_db_tier_read(db, "t1", "dev", m, 1, res, from, to, &r);
    uint64_t n = 0;
    for (size_t i = 0; i < r.n; i++)
        n += bdb_stats_count(&r.w[i].st);
    bdb_rollup_free(&r);
    return n;
}

static uint64_t count(bdb_db *db, enum bdb_res res, int64_t from, int64_t to)
{
    int rc;
    uint64_t n = count_rc(db, res, from, to, &rc);
    assert_int_equal(rc, BDB_OK);
    return n;
}

static bdb_db *open_with(bdb_db_opts *o)
{
    eu_opts(o, datadir, eu_clock, &fake_now);
    o->tenant_retention = ttl_fn;
    bdb_db *db = eu_open(o);
    bdb_db_tier_set_retention_hook(db, ret_fn, NULL);
    return db;
}

/* Day 400 (day 0's 1h file past the 1h tier's 365 days; raw data kept forever unless
 * ttl says otherwise), day 0 holding 100 minutes of t1/dev/temp in the head. */
static bdb_db *open_day0_at_day400(bdb_db_opts *o)
{
    fake_now = T0 + 400 * DAY;
    bdb_db *db = open_with(o);
    for (int i = 0; i < 100; i++)
        put(db, T0 + i * MIN, i);
    return db;
}

static void test_raw_ttl_grows(void **st)
{
    (void)st;
    fake_now = T0 + DAY;
    ttl = DAY;
    bdb_db_opts o;
    bdb_db *db = open_with(&o);
    for (int i = 0; i < 1440; i++)
        put(db, T0 + i * MIN, i);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    fake_now = T0 + 2 * DAY + HOUR;
    assert_int_equal(bdb_db_maintain(db), BDB_OK); /* minutes kept, raw dropped */
    bdb_db_stats ds;
    bdb_db_get_stats(db, &ds);
    assert_int_equal(ds.blocks, 0);
    assert_int_equal(count(db, BDB_RES_1M, T0, T0 + DAY), 1440);
    ttl = 7 * DAY; /* the tenant's raw TTL grows */
    assert_int_equal(count(db, BDB_RES_1M, T0, T0 + DAY), 1440);
    ttl = 0; /* kept forever from now on */
    assert_int_equal(count(db, BDB_RES_1M, T0, T0 + DAY), 1440);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_1h_retention_grows(void **st)
{
    (void)st;
    bdb_db_opts o;
    bdb_db *db = open_day0_at_day400(&o);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_maintain(db), BDB_OK); /* 1h past 365 days: days kept */
    bdb_tier_stats ts;
    bdb_db_tier_get_stats(db, &ts);
    assert_int_equal(ts.files[1], 0);
    assert_int_equal(ts.files[2], 1);
    assert_int_equal(count(db, BDB_RES_1D, T0, T0 + DAY), 100);
    h1_keep = -1; /* the 1h tier kept forever from now on */
    assert_int_equal(count(db, BDB_RES_1D, T0, T0 + DAY), 100);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_backfill_into_kept_days(void **st)
{
    (void)st;
    fake_now = T0 + 400 * DAY; /* raw kept forever, the 1h tier 365 days */
    bdb_db_opts o;
    bdb_db *db = open_with(&o);
    for (int i = 0; i < 100; i++)
        put(db, T0 + i * MIN, i);
    put(db, T0 + 399 * DAY, 1); /* the device's newest */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_maintain(db), BDB_OK); /* day 0: days kept, 1h dropped */
    assert_int_equal(count(db, BDB_RES_1D, T0, T0 + DAY), 100);
    put(db, T0 + 5 * HOUR, 7); /* an old sample: a backfill, an import */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(count(db, BDB_RES_1D, T0, T0 + DAY), 101);
    assert_int_equal(bdb_db_maintain(db), BDB_OK); /* its 1h file goes: kept as well */
    assert_int_equal(count(db, BDB_RES_1D, T0, T0 + DAY), 101);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_with(&o);
    assert_int_equal(count(db, BDB_RES_1D, T0, T0 + DAY), 101);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_damaged_block_stays_alone(void **st)
{
    (void)st;
    fake_now = T0 + DAY;
    ttl = DAY;
    bdb_db_opts o;
    bdb_db *db = open_with(&o);
    for (int i = 0; i < 240; i++) /* block windows [0, 2h) and [2h, 4h) */
        put(db, T0 + i * MIN, i);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    /* bit rot in the chunk data of the oldest block (its index still opens) */
    char dir[256];
    snprintf(dir, sizeof dir, "%s/blocks", datadir);
    size_t nf;
    char **files = cu_list_files(dir, ".blk", &nf);
    assert_int_equal(nf, 2);
    size_t pick = strcmp(files[0], files[1]) < 0 ? 0 : 1;
    FILE *fp = fopen(files[pick], "r+b");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, 40, SEEK_SET), 0);
    assert_int_equal(fputc(0xff, fp), 0xff);
    fclose(fp);
    cu_free_list(files, nf);
    db = open_with(&o);
    fake_now = T0 + 2 * DAY + HOUR;
    assert_int_not_equal(bdb_db_maintain(db), BDB_OK); /* window [0, 2h) cannot be kept */
    bdb_db_stats ds;
    bdb_db_get_stats(db, &ds);
    assert_int_equal(ds.blocks, 1); /* it stays; the other one went */
    assert_int_equal(count(db, BDB_RES_1M, T0 + 2 * HOUR, T0 + 4 * HOUR), 120);
    assert_int_equal(count(db, BDB_RES_1H, T0 + 2 * HOUR, T0 + 4 * HOUR), 120);
    int rc;
    count_rc(db, BDB_RES_1M, T0, T0 + 2 * HOUR, &rc);
    assert_int_equal(rc, BDB_ERR_CORRUPT); /* never a wrong answer for the damaged one */
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_crash_between_kept_days_and_unlink(void **st)
{
    (void)st;
    bdb_db_opts o;
    bdb_db *db = open_day0_at_day400(&o);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    char hours[256], keep[256];
    snprintf(hours, sizeof hours, "%s/tiers/1h", datadir);
    snprintf(keep, sizeof keep, "%s/1h-before", tmpdir);
    eu_copy_tree(hours, keep, EU_WITH_LOCK);
    db = open_with(&o);
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    assert_int_equal(count(db, BDB_RES_1D, T0, T0 + DAY), 100);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    eu_copy_tree(keep, hours, EU_WITH_LOCK); /* the state of a crash before the unlink */
    db = open_with(&o);
    bdb_tier_stats ts;
    bdb_db_tier_get_stats(db, &ts);
    assert_int_equal(ts.discarded, 1); /* the 1h file: superseded by the kept days */
    assert_int_equal(ts.files[1], 0);
    assert_int_equal(count(db, BDB_RES_1D, T0, T0 + DAY), 100);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_many_tenants_in_one_pass(void **st)
{
    (void)st;
    fake_now = T0 + 400 * DAY;
    bdb_db_opts o;
    bdb_db *db = open_with(&o);
    for (int k = 0; k < 32; k++) {
        char tn[16];
        snprintf(tn, sizeof tn, "t%02d", k);
        put_t(db, tn, T0, 1);
    }
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_tier_stats ts;
    bdb_db_tier_get_stats(db, &ts);
    assert_int_equal(ts.files[1], 32);
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    bdb_db_tier_get_stats(db, &ts);
    assert_int_equal(ts.files[1], 0);
    assert_int_equal(ts.files[2], 32);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static struct {
    bdb_db *db;
    atomic_int stop, first; /* first: the finest tier read, 1m or 1d (1m past its retention) */
    _Atomic uint64_t reads, bad;
} race;

static void *race_reader(void *arg)
{
    (void)arg;
    while (!atomic_load(&race.stop)) {
        for (int res = atomic_load(&race.first); res <= BDB_RES_1D; res += 2) {
            int rc;
            uint64_t n = count_rc(race.db, (enum bdb_res)res, T0, T0 + DAY, &rc);
            if (rc != BDB_OK || n != 1440)
                atomic_fetch_add(&race.bad, 1);
            atomic_fetch_add(&race.reads, 1);
        }
    }
    return NULL;
}

static void test_reads_while_kept_and_dropped(void **st)
{
    (void)st;
    for (int round = 0; round < 20; round++) {
        char dir[256];
        snprintf(dir, sizeof dir, "%s/r%d", tmpdir, round);
        fake_now = T0 + DAY;
        ttl = DAY;
        bdb_db_opts o;
        eu_opts(&o, dir, eu_clock, &fake_now);
        o.tenant_retention = ttl_fn;
        bdb_db *db = eu_open(&o);
        bdb_db_tier_set_retention_hook(db, ret_fn, NULL);
        for (int i = 0; i < 1440; i++)
            put(db, T0 + i * MIN, i);
        assert_int_equal(bdb_db_flush(db), BDB_OK);
        race.db = db;
        /* phase 1: day 0's raw data past its retention: minutes kept, blocks dropped;
         * phase 2: its 1h file past the 1h tier's: days kept, 1h file dropped (the 1m
         * tier, past its own 90 days by then, answers nothing and is not read) */
        for (int phase = 0; phase < 2; phase++) {
            atomic_store(&race.stop, 0);
            atomic_store(&race.first, phase ? BDB_RES_1D : BDB_RES_1M);
            fake_now = phase ? T0 + 400 * DAY : T0 + 2 * DAY + HOUR;
            pthread_t th[2];
            for (int k = 0; k < 2; k++)
                assert_int_equal(pthread_create(&th[k], NULL, race_reader, NULL), 0);
            assert_int_equal(bdb_db_maintain(db), BDB_OK);
            atomic_store(&race.stop, 1);
            for (int k = 0; k < 2; k++)
                pthread_join(th[k], NULL);
        }
        bdb_tier_stats ts;
        bdb_db_tier_get_stats(db, &ts);
        bdb_db_stats ds;
        bdb_db_get_stats(db, &ds);
        assert_int_equal(ds.blocks, 0);
        assert_int_equal(ts.files[1], 0); /* every finer level went */
        assert_int_equal(count(db, BDB_RES_1D, T0, T0 + DAY), 1440);
        assert_int_equal(bdb_db_close(db), BDB_OK);
    }
    printf("derived tier race figures: reads %llu, wrong %llu\n",
           (unsigned long long)atomic_load(&race.reads),
           (unsigned long long)atomic_load(&race.bad));
    assert_int_equal(atomic_load(&race.bad), 0);
    assert_true(atomic_load(&race.reads) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_raw_ttl_grows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_1h_retention_grows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backfill_into_kept_days, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_block_stays_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_between_kept_days_and_unlink, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_tenants_in_one_pass, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reads_while_kept_and_dropped, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
