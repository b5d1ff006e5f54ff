/* head (the in-memory chunks and their out-of-order side lists) where the engine
 * tests do not go: rewrites of one time in the stream and in the side list (the
 * latest write wins, before and after the side list is merged into the stream and
 * after a flush), and every allocation of an out-of-order burst failed in turn
 * (BDB_ERR_NOMEM, never a wrong or doubled sample; a retry makes the data exact);
 * the head's bytes per live series after ten minutes of 10 s reports, against a
 * budget (docs/STORAGE.md#memory-per-live-series). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "common/log.h"

#define T0 INT64_C(1790000000000)
#define SEC INT64_C(1000)
#define NBASE 40 /* in-order samples: chunks of 16, the first two full */

static char tmp[256], data[300];
static int64_t now_ms;

/* The model: value by second since T0, NAN where nothing was written. */
static double model[NBASE + 8];
/* One batch for every write, made before any allocation is failed; a batch that
 * cannot take the report counts as a refused write. */
static bdb_batch *B;

static int setup(void **state)
{
    (void)state;
    bdb_log_set_level(BDB_LOG_OFF); /* the sweep's failures log */
    eu_scratch(tmp, sizeof tmp, "head", EU_TMPFS, data, sizeof data);
    now_ms = T0 + NBASE * SEC;
    B = bdb_batch_new();
    return B ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    bdb_log_set_level(BDB_LOG_ERROR);
    bdb_batch_free(B);
    return eu_cleanup(tmp);
}

static bdb_db *open_db(void)
{
    bdb_db_opts o;
    eu_opts(&o, data, eu_clock, &now_ms);
    o.vfs = eu_nosync_vfs();
    o.chunk_max_samples = 16;
    return eu_open(&o);
}

static int put(bdb_db *db, int sec, double v)
{
    bdb_batch_reset(B);
    bdb_batch_begin(B, "d", 1, T0 + sec * SEC, 1);
    bdb_batch_metric(B, "m", 1, v);
    if (bdb_batch_end(B) != 1)
        return BDB_ERR_NOMEM;
    int rc = bdb_db_write(db, "t", B);
    if (rc == BDB_OK)
        model[sec] = v;
    return rc;
}

static void base(bdb_db *db)
{
    for (size_t i = 0; i < sizeof model / sizeof *model; i++)
        model[i] = NAN;
    for (int i = 0; i < NBASE; i++)
        assert_int_equal(put(db, i, i), BDB_OK);
}

/* Every sample read back equals the model, once per time. */
static void check(bdb_db *db, const char *when)
{
    const char *m[] = {"m"};
    bdb_samples s;
    memset(&s, 0, sizeof s);
    assert_int_equal(bdb_db_read(db, "t", "d", m, 1, T0, T0 + 3600 * SEC, &s, NULL), BDB_OK);
    size_t want = 0;
    for (size_t i = 0; i < sizeof model / sizeof *model; i++)
        want += !isnan(model[i]);
    if (s.n != want)
        fail_msg("%s: %zu samples, want %zu", when, s.n, want);
    for (size_t i = 0; i < s.n; i++) {
        int64_t sec = (s.ts[i] - T0) / SEC;
        assert_true(sec >= 0 && sec < (int64_t)(sizeof model / sizeof *model));
        if (s.v[i] != model[sec])
            fail_msg("%s: second %lld reads %g, want %g", when, (long long)sec, s.v[i], model[sec]);
        if (i && s.ts[i] <= s.ts[i - 1])
            fail_msg("%s: time %lld twice or out of order", when, (long long)sec);
    }
    bdb_samples_free(&s);
}

/* The out-of-order burst: rewrites of times in full chunks (twice for second 5, so
 * the side list holds two writes of it), and new times between them after the
 * newest; more than the 8 a side list holds before it is merged. */
static const int burst_sec[] = {5, 3, 5, 12, 20, 7, 0, 15, 9, 3, 21, 1, 44, 42};

static void test_latest_write_wins(void **state)
{
    (void)state;
    bdb_db *db = open_db();
    base(db);
    for (size_t i = 0; i < sizeof burst_sec / sizeof *burst_sec; i++) {
        assert_int_equal(put(db, burst_sec[i], 1000 + (double)i), BDB_OK);
        check(db, "during the burst");
    }
    assert_true(model[5] == 1002);
    assert_true(model[3] == 1009);
    assert_true(bdb_db_head_bytes(db) > 0);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    check(db, "after the flush");
    /* every byte the side lists, their merges and the chunks' moves counted went back */
    assert_int_equal(bdb_db_head_bytes(db), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db();
    check(db, "after a reopen");
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_burst_allocation_failures(void **state)
{
    (void)state;
    uint64_t runs = 0, nomem = 0;
    for (uint64_t nth = 1; nth < 100000; nth++) {
        tu_rm_rf(data);
        bdb_db *db = open_db();
        base(db);
        int hit = 0;
        size_t failed = 0;
        eu_arm(nth);
        for (size_t i = 0; i < sizeof burst_sec / sizeof *burst_sec; i++) {
            int rc = put(db, burst_sec[i], 1000 + (double)i);
            assert_true(rc == BDB_OK || rc == BDB_ERR_NOMEM);
            if (rc != BDB_OK) {
                failed++;
                hit = eu_disarm();
                check(db, "after a refused write"); /* nothing of it, nothing lost */
                assert_int_equal(put(db, burst_sec[i], 1000 + (double)i), BDB_OK);
            }
        }
        hit |= eu_disarm();
        check(db, "after the burst");
        assert_int_equal(bdb_db_flush(db), BDB_OK);
        check(db, "after the flush");
        assert_int_equal(bdb_db_close(db), BDB_OK);
        if (!eu_swept(&runs, &nomem, hit, failed ? BDB_ERR_NOMEM : BDB_OK))
            break;
    }
    print_message(
        "out-of-order burst: %llu allocations failed in turn, %llu writes refused, " EU_LEAKS "\n",
        (unsigned long long)runs, (unsigned long long)nomem);
    assert_true(nomem > 10);
}

/* The head's own bytes per live series (chunks: struct, stream and spare room, as
 * head_bytes counts them) after 60 reports 10 s apart of 50 devices x 10 metrics, the
 * shape of bench/headmem.c: measured 184 (one allocation of 64 bytes of struct and
 * the stream's bytes, the side list inside it too); 200 with an 80-byte struct and the
 * side list apart, 216 before the stream's bytes moved into the chunk. Every byte
 * counted goes back at the flush. */
#define BPS_DEV 50
#define BPS_MET 10
#define BPS_REP 60
#define BPS_BUDGET 188
static void test_bytes_per_series(void **state)
{
    (void)state;
    static const char *const met[BPS_MET] = {
        "env.temp",  "env.humidity", "env.pressure", "pwr.voltage", "pwr.current",
        "pwr.power", "net.rssi",     "sys.cpu",      "sys.mem",     "bat.level"};
    bdb_db_opts o;
    eu_opts(&o, data, eu_clock, &now_ms);
    o.vfs = eu_nosync_vfs();
    bdb_db *db = eu_open(&o);
    char dev[16];
    for (int r = 0; r < BPS_REP; r++) {
        bdb_batch_reset(B);
        for (int d = 0; d < BPS_DEV; d++) {
            int64_t ts = T0 + r * 10 * SEC + (d * 7919) % (10 * SEC);
            int n = snprintf(dev, sizeof dev, "dev-%03d", d);
            bdb_batch_begin(B, dev, (size_t)n, ts, (size_t)d);
            for (int m = 0; m < BPS_MET; m++)
                bdb_batch_metric(B, met[m], strlen(met[m]),
                                 (double)((d * 31 + m * 7 + r) % 5000) / 100);
            assert_int_equal(bdb_batch_end(B), 1);
            now_ms = ts;
        }
        assert_int_equal(bdb_db_write(db, "t", B), BDB_OK);
    }
    uint64_t per = bdb_db_head_bytes(db) / (BPS_DEV * BPS_MET);
    print_message("head: %llu bytes per live series after %d samples each\n",
                  (unsigned long long)per, BPS_REP);
    assert_true(per <= BPS_BUDGET);
    const char *m[] = {"pwr.power"};
    bdb_samples smp;
    memset(&smp, 0, sizeof smp);
    assert_int_equal(bdb_db_read(db, "t", "dev-007", m, 1, T0, T0 + 3600 * SEC, &smp, NULL),
                     BDB_OK);
    assert_int_equal(smp.n, BPS_REP);
    for (int r = 0; r < BPS_REP; r++)
        assert_true(smp.v[r] == (double)((7 * 31 + 5 * 7 + r) % 5000) / 100);
    bdb_samples_free(&smp);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_head_bytes(db), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Rounds that overtake the one before (two connections of a fleet): every other
 * sample of one long chunk arrives late, into the side list, which is merged into the
 * stream as it fills (head.c); the head's bytes stay within a budget all along
 * (measured 2,456 at 1,536 samples; the list alone, never merged, would take 12 KiB),
 * and every read, then the flush, keeps each sample once. */
#define LATE_N 1536
#define LATE_BUDGET 2600
static void test_late_rounds_long_chunk(void **state)
{
    (void)state;
    static double lm[LATE_N];
    bdb_db_opts o;
    eu_opts(&o, data, eu_clock, &now_ms);
    o.vfs = eu_nosync_vfs();
    bdb_db *db = eu_open(&o);
    uint64_t most = 0;
    for (int r = 0; r < LATE_N; r += 2) {
        for (int k = 1; k >= 0; k--) { /* r + 1 first: r is late */
            int i = r + k;
            lm[i] = (double)((i * 37) % 1000) / 10;
            bdb_batch_reset(B);
            bdb_batch_begin(B, "d", 1, T0 + i * SEC, 1);
            bdb_batch_metric(B, "m", 1, lm[i]);
            assert_int_equal(bdb_batch_end(B), 1);
            assert_int_equal(bdb_db_write(db, "t", B), BDB_OK);
        }
        uint64_t hb = bdb_db_head_bytes(db);
        most = hb > most ? hb : most;
    }
    print_message("late rounds: at most %llu head bytes for %d samples\n", (unsigned long long)most,
                  LATE_N);
    assert_true(most <= LATE_BUDGET);
    const char *m[] = {"m"};
    for (int pass = 0; pass < 2; pass++) {
        bdb_samples smp;
        memset(&smp, 0, sizeof smp);
        assert_int_equal(bdb_db_read(db, "t", "d", m, 1, T0, T0 + 3600 * SEC, &smp, NULL), BDB_OK);
        assert_int_equal(smp.n, LATE_N);
        for (int i = 0; i < LATE_N; i++)
            assert_true(smp.ts[i] == T0 + i * SEC && smp.v[i] == lm[i]);
        bdb_samples_free(&smp);
        if (pass == 0)
            assert_int_equal(bdb_db_flush(db), BDB_OK);
    }
    assert_int_equal(bdb_db_head_bytes(db), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_latest_write_wins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_burst_allocation_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bytes_per_series, setup, teardown),
        cmocka_unit_test_setup_teardown(test_late_rounds_long_chunk, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
