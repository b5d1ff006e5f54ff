/* db_tier_maint (tier retention keeping the days of expiring 1h files, and the
 * compaction of a window's files) with every allocation of one maintenance pass
 * failed in turn: the pass answers BDB_OK or BDB_ERR_NOMEM, every tier read stays
 * exact meanwhile (a window whose days could not be kept keeps its 1h files; nothing
 * is counted twice), and the next pass with memory back leaves the state a clean pass
 * leaves: one 1d file holding the days, one compacted 1h file, across a reopen; with
 * 32 files, publishing the kept days grows the file list, which may fail too (the
 * kept files are then unlinked and the 1h files stay). Days past the 1d tier's own
 * retention are not kept. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "common/log.h"
#include "storage/embedded/tier/db_tier.h"

#define MIN BDB_MS_MIN
#define HOUR BDB_MS_HOUR
#define DAY BDB_MS_DAY
#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */
#define NOW (T0 + 400 * DAY)      /* day 0's 1h files past the 1h tier's 365 days */
#define RECENT (NOW - DAY)        /* a window the 1h tier still keeps */
#define PER 6                     /* minutes per window and flush */

static char tmp[256], data[300];
static int64_t now_ms;
static int rounds;         /* flushes into each window: rounds files per window */
static int64_t keep_1d_ms; /* the 1d tier's retention (0: the default, forever) */

static int setup(void **state)
{
    (void)state;
    bdb_log_set_level(BDB_LOG_OFF); /* failed passes log */
    eu_scratch(tmp, sizeof tmp, "tmaint", EU_TMPFS, data, sizeof data);
    now_ms = NOW;
    rounds = 2;
    keep_1d_ms = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bdb_log_set_level(BDB_LOG_ERROR);
    return eu_cleanup(tmp);
}

static bdb_db *open_db(void)
{
    bdb_db_opts o;
    eu_opts(&o, data, eu_clock, &now_ms);
    o.vfs = eu_nosync_vfs();
    o.tier_retention_ms[BDB_RES_1D - 1] = keep_1d_ms;
    return eu_open(&o);
}

/* `rounds` flushes of PER minutes into each window: day 0 (expired in the 1h
 * tier: its days are kept) and a recent day (several files of one window: compacted).
 * 16 rounds make 32 files, as many as the file list has room for, so publishing the
 * kept days must grow it. */
static void fill(bdb_db *db)
{
    for (int round = 0; round < rounds; round++) {
        for (int i = 0; i < PER; i++) {
            eu_put(db, "t1", "dev", "temp", T0 + (round * PER + i) * MIN, i, 0);
            eu_put(db, "t1", "dev", "temp", RECENT + (round * PER + i) * MIN, i, 0);
        }
        assert_int_equal(bdb_db_flush(db), BDB_OK);
    }
}

static uint64_t count(bdb_db *db, enum bdb_res res, int64_t from, int64_t to)
{
    const char *m[1] = {"temp"};
    bdb_rollup r;
    bdb_rollup_init(&r, bdb_res_width(res));
    assert_int_equal(bdb_db_tier_read(db, "t1", "dev", m, 1, res, from, to, &r), BDB_OK);
    uint64_t n = 0;
    for (size_t i = 0; i < r.n; i++)
        n += bdb_stats_count(&r.w[i].st);
    bdb_rollup_free(&r);
    return n;
}

static void check_counts(bdb_db *db)
{
    uint64_t n = (uint64_t)PER * (uint64_t)rounds;
    assert_int_equal(count(db, BDB_RES_1D, T0, T0 + DAY), n);
    assert_int_equal(count(db, BDB_RES_1H, RECENT, RECENT + DAY), n);
    assert_int_equal(count(db, BDB_RES_1D, RECENT, RECENT + DAY), n);
}

/* The state a clean pass leaves. */
static void check_done(bdb_db *db)
{
    check_counts(db);
    bdb_tier_stats ts;
    bdb_db_tier_get_stats(db, &ts);
    assert_int_equal(ts.files[BDB_RES_1H - 1], 1); /* the recent window, compacted */
    assert_int_equal(ts.files[BDB_RES_1D - 1], 1); /* day 0's days, kept */
}

static void test_clean_pass(void **state)
{
    (void)state;
    bdb_db *db = open_db();
    fill(db);
    bdb_tier_stats ts;
    bdb_db_tier_get_stats(db, &ts);
    assert_int_equal(ts.files[BDB_RES_1H - 1], 2 * rounds);
    assert_int_equal(ts.files[BDB_RES_1D - 1], 0);
    check_counts(db);
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    check_done(db);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db();
    check_done(db);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_allocation_failures(void **state)
{
    (void)state;
    rounds = *(int *)*state;
    uint64_t runs = 0, nomem = 0;
    for (uint64_t nth = 1; nth < 100000; nth++) {
        tu_rm_rf(data);
        bdb_db *db = open_db();
        fill(db);
        check_counts(db); /* loads the tier files before the sweep */
        eu_arm(nth);
        int rc = bdb_db_maintain(db);
        int hit = eu_disarm();
        if (rc != BDB_OK && rc != BDB_ERR_NOMEM)
            fail_msg("allocation %llu failed: %s", (unsigned long long)nth, bdb_strerror(rc));
        check_counts(db);
        assert_int_equal(bdb_db_maintain(db), BDB_OK);
        check_done(db);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        db = open_db();
        check_done(db);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        if (!eu_swept(&runs, &nomem, hit, rc))
            break;
    }
    print_message(
        "tier maintenance of %d files: %llu allocations failed in turn, %llu passes answered "
        "NOMEM, " EU_LEAKS "\n",
        2 * rounds, (unsigned long long)runs, (unsigned long long)nomem);
    assert_true(runs > 20);
}

/* Days past the 1d tier's own retention are not kept: the expired 1h files go
 * without a 1d file. */
static void test_days_past_1d_retention(void **state)
{
    (void)state;
    keep_1d_ms = 300 * DAY;
    bdb_db *db = open_db();
    fill(db);
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    bdb_tier_stats ts;
    bdb_db_tier_get_stats(db, &ts);
    assert_int_equal(ts.files[BDB_RES_1H - 1], 1);
    assert_int_equal(ts.files[BDB_RES_1D - 1], 0);
    assert_int_equal(count(db, BDB_RES_1H, RECENT, RECENT + DAY), PER * rounds);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static int two = 2, sixteen = 16;

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_clean_pass, setup, teardown),
        cmocka_unit_test_prestate_setup_teardown(test_allocation_failures, setup, teardown, &two),
        cmocka_unit_test_prestate_setup_teardown(test_allocation_failures, setup, teardown,
                                                 &sixteen),
        cmocka_unit_test_setup_teardown(test_days_past_1d_retention, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
