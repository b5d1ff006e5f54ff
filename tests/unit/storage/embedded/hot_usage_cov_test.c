/* hot_usage_cov: hot-partition bookkeeping (db_hot.c) and the storage usage tracker
 * (db_usage.c) at edges the feature tests do not reach (issue 8).
 *
 * - Events per partition: a device keeps the counts of its newest 8192 partitions; an
 *   event older than all of them is not counted (the sample is still stored);
 *   telemetry_by_tenant over many partitions, stopped by its callback, and out of
 *   memory (BDB_ERR_NOMEM).
 * - Sub-bucket history: a device without a setting answers 1; a pending setting
 *   replaced by the count already in force; more changes than the history keeps; out
 *   of memory changes nothing and logs nothing (also after a reopen).
 * - Usage: more than 16 tenants in one block file (each gets a share, the shares sum
 *   to the file), more than 64 partitions over the warning size, no warning size, a
 *   partition over 64 KiB in the size histogram, a note for a new tenant lost to out
 *   of memory (the head walk still counts it), the tracker thread started without
 *   options and then given some. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "common/buf.h"
#include "storage/embedded/hot/db_hot.h"
#include "storage/embedded/core/wal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIN INT64_C(60000)
#define HOUR (60 * MIN)
#define DAY (24 * HOUR)
#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z, a day boundary */

static char tmpdir[64], datadir[128];
static int64_t now_ms;

static bdb_db *open_db(int64_t window_ms, int periodic)
{
    bdb_db_opts o;
    eu_opts(&o, datadir, eu_clock, &now_ms);
    if (window_ms)
        o.block_window_ms = window_ms;
    if (periodic)
        o.sync_mode = BDB_WAL_SYNC_PERIODIC;
    return eu_open(&o);
}

static int setup(void **state)
{
    (void)state;
    eu_scratch(tmpdir, sizeof tmpdir, "hotcov", EU_TMPFS, datadir, sizeof datadir);
    bdb_log_set_level((enum bdb_log_level)(BDB_LOG_ERROR + 1));
    now_ms = T0 + 60 * DAY;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return eu_cleanup(tmpdir);
}

struct tbt {
    uint64_t rows, events, stop_at;
    int64_t min_start;
};

static int tbt_cb(void *ctx, const bdb_tbt_row *r)
{
    struct tbt *t = ctx;
    if (t->rows == 0 || r->bucket_start < t->min_start)
        t->min_start = r->bucket_start;
    t->rows++;
    t->events += r->events;
    return t->stop_at && t->rows >= t->stop_at ? 7 : 0;
}

static size_t count_m(bdb_db *db, const char *tenant, const char *dev)
{
    const char *metrics[] = {"m"};
    bdb_samples s;
    memset(&s, 0, sizeof s);
    uint64_t chunks;
    assert_int_equal(bdb_db_read(db, tenant, dev, metrics, 1, INT64_MIN, INT64_MAX, &s, &chunks),
                     BDB_OK);
    size_t n = s.n;
    bdb_samples_free(&s);
    return n;
}

/* ---------------------------------------------------------------- events per partition */

static void test_partition_count_cap(void **state)
{
    (void)state;
    bdb_db *db = open_db(DAY, 1);
    /* 10-minute partitions, one event each: 8193 of them, one more than are kept (the
     * size, set before the device's first event, applies from the clock's time on) */
    now_ms = T0 - 2 * DAY;
    assert_int_equal(bdb_db_set_device_bucket(db, "t", "d", 10 * MIN), BDB_OK);
    now_ms = T0 + 60 * DAY;
    eu_put_run(db, "t", "d", T0, 10 * MIN, 8193);
    struct tbt t = {0};
    assert_int_equal(bdb_db_telemetry_by_tenant(db, "t", INT64_MIN, INT64_MAX, tbt_cb, &t), BDB_OK);
    assert_int_equal(t.rows, 8192);
    assert_int_equal(t.events, 8192);
    assert_int_equal(t.min_start, T0 + 10 * MIN); /* the oldest partition's count went */
    /* an event older than every partition kept is not counted, but it is stored */
    eu_put_run(db, "t", "d", T0 - DAY, 1, 1);
    memset(&t, 0, sizeof t);
    assert_int_equal(bdb_db_telemetry_by_tenant(db, "t", INT64_MIN, INT64_MAX, tbt_cb, &t), BDB_OK);
    assert_int_equal(t.rows, 8192);
    assert_int_equal(t.min_start, T0 + 10 * MIN);
    assert_int_equal(count_m(db, "t", "d"), 8194);
    /* a new partition's event still counts (the oldest kept one goes) */
    eu_put_run(db, "t", "d", T0 + 8193 * 10 * MIN, 1, 1);
    memset(&t, 0, sizeof t);
    assert_int_equal(bdb_db_telemetry_by_tenant(db, "t", INT64_MIN, INT64_MAX, tbt_cb, &t), BDB_OK);
    assert_int_equal(t.rows, 8192);
    assert_int_equal(t.min_start, T0 + 20 * MIN);
    /* the callback stops the walk with its own value */
    memset(&t, 0, sizeof t);
    t.stop_at = 5;
    assert_int_equal(bdb_db_telemetry_by_tenant(db, "t", INT64_MIN, INT64_MAX, tbt_cb, &t), 7);
    assert_int_equal(t.rows, 5);
    /* out of memory for the rows: an error, never a silently short answer */
    int fails = 0;
    for (uint64_t k = 1; k < 100; k++) {
        memset(&t, 0, sizeof t);
        eu_arm(k);
        int rc = bdb_db_telemetry_by_tenant(db, "t", INT64_MIN, INT64_MAX, tbt_cb, &t);
        int inj = eu_disarm();
        if (!inj) {
            assert_int_equal(rc, BDB_OK);
            assert_int_equal(t.rows, 8192);
            break;
        }
        assert_int_equal(rc, BDB_ERR_NOMEM);
        fails++;
    }
    assert_true(fails >= 1);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_tbt_several_devices_stop(void **state)
{
    (void)state;
    bdb_db *db = open_db(0, 1);
    eu_put_run(db, "t", "a", T0, HOUR, 20);
    eu_put_run(db, "t", "b", T0, HOUR, 20);
    struct tbt t = {0};
    assert_int_equal(bdb_db_telemetry_by_tenant(db, "t", INT64_MIN, INT64_MAX, tbt_cb, &t), BDB_OK);
    uint64_t all = t.rows;
    assert_true(all >= 2);
    assert_int_equal(t.events, 40);
    /* stopping on the last row of the first device: the second is never visited */
    memset(&t, 0, sizeof t);
    t.stop_at = all / 2;
    assert_int_equal(bdb_db_telemetry_by_tenant(db, "t", INT64_MIN, INT64_MAX, tbt_cb, &t), 7);
    assert_int_equal(t.rows, all / 2);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* ---------------------------------------------------------------- sub-buckets */

static void test_subbucket_history_edges(void **state)
{
    (void)state;
    bdb_db *db = open_db(0, 1);
    eu_put_run(db, "t", "d", T0, 1000, 1);
    assert_int_equal(bdb_db_subbuckets(db, "t", "d"), 1); /* known, never set */
    assert_int_equal(bdb_db_set_subbuckets(db, "t", "d", 4), BDB_OK);
    eu_put_run(db, "t", "d", T0 + 5000, 1000, 1);
    /* 8 is pending (from the second after the newest event); 4 again replaces it */
    assert_int_equal(bdb_db_set_subbuckets(db, "t", "d", 8), BDB_OK);
    assert_int_equal(bdb_db_subbuckets(db, "t", "d"), 8);
    assert_int_equal(bdb_db_set_subbuckets(db, "t", "d", 4), BDB_OK);
    assert_int_equal(bdb_db_subbuckets(db, "t", "d"), 4);
    eu_put_run(db, "t", "d", T0 + 9000, 1000, 1);
    int64_t s, e;
    uint32_t n;
    assert_int_equal(bdb_db_partition_at(db, "t", "d", T0 + 9000, &s, &e, &n), BDB_OK);
    assert_int_equal(n, 4);
    /* more changes than the history keeps (256): the newest stay in force */
    for (int i = 0; i < 300; i++) {
        assert_int_equal(bdb_db_set_subbuckets(db, "t", "d", (uint32_t)(2 + i % 3)), BDB_OK);
        eu_put_run(db, "t", "d", T0 + 10000 + i * 1000, 1, 1);
    }
    uint32_t last = 2 + 299 % 3;
    assert_int_equal(bdb_db_subbuckets(db, "t", "d"), last);
    assert_int_equal(bdb_db_partition_at(db, "t", "d", T0 + 10000 + 299 * 1000, &s, &e, &n),
                     BDB_OK);
    assert_int_equal(n, last);
    assert_int_equal(bdb_db_partition_at(db, "t", "d", T0 + 10000 + 298 * 1000, &s, &e, &n),
                     BDB_OK);
    assert_int_equal(n, 2 + 298 % 3);
    assert_int_equal(count_m(db, "t", "d"), 303);

    /* out of memory: nothing changes, nothing is logged, for a known and a new device;
     * after a reopen the WAL's staging buffer is empty, so its growth for the known
     * device's long history fails too, after the history changed (it is put back) */
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db(0, 1);
    bdb_hot_engine_stats hs0, hs;
    bdb_db_hot_stats(db, &hs0);
    int fails = 0;
    const char *devs[] = {"d", "new"};
    for (int dv = 0; dv < 2; dv++) {
        for (uint64_t k = 1; k < 100; k++) {
            eu_arm(k);
            int rc = bdb_db_set_subbuckets(db, "t", devs[dv], 16);
            int inj = eu_disarm();
            if (!inj) {
                assert_int_equal(rc, BDB_OK);
                break;
            }
            if (rc == BDB_OK)
                break; /* the failed allocation was one the write may do without */
            assert_int_equal(rc, BDB_ERR_NOMEM);
            fails++;
            assert_int_equal(bdb_db_subbuckets(db, "t", devs[dv]), dv ? 1 : last);
            bdb_db_hot_stats(db, &hs);
            assert_int_equal(hs.subbucket_changes, hs0.subbucket_changes);
        }
        bdb_db_hot_stats(db, &hs0);
    }
    assert_true(fails >= 2);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db(0, 1);
    assert_int_equal(bdb_db_subbuckets(db, "t", "new"), 16);
    assert_int_equal(bdb_db_subbuckets(db, "t", "d"), 16);
    assert_int_equal(count_m(db, "t", "d"), 303);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* ---------------------------------------------------------------- WAL record type 3 */

/* A sub-bucket record as db_hot.c logs it: type 3, tenant, device, promotion cap,
 * then (from, count) pairs; `cut` bytes are taken off the end. */
static void put_rec3(bdb_wal *w, const char *dev, int64_t cap, uint64_t ns, const int64_t *from,
                     const uint64_t *k, size_t cut)
{
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_putc(&b, 3);
    bdb_buf_put_str(&b, "t", 1);
    bdb_buf_put_str(&b, dev, strlen(dev));
    bdb_buf_put_varint(&b, cap);
    bdb_buf_put_uvarint(&b, ns);
    for (uint64_t i = 0; i < ns && i < 2; i++) { /* the arrays hold two */
        bdb_buf_put_varint(&b, from[i]);
        bdb_buf_put_uvarint(&b, k[i]);
    }
    assert_true(b.len > cut);
    assert_int_equal(bdb_wal_append(w, b.data, b.len - cut, NULL), BDB_OK);
    bdb_buf_free(&b);
}

static void test_bad_subbucket_records_skipped(void **state)
{
    (void)state;
    char waldir[192];
    assert_int_equal(mkdir(datadir, 0755), 0);
    snprintf(waldir, sizeof waldir, "%s/wal", datadir);
    bdb_wal_opts wo = {.dir = waldir};
    bdb_wal *w = NULL;
    assert_int_equal(bdb_wal_open(&wo, &w), BDB_OK);
    const int64_t from[] = {T0, T0 + 1000};
    const int64_t same[] = {T0, T0};
    const uint64_t k48[] = {4, 8}, k0[] = {4, 0}, k65[] = {4, 65};
    put_rec3(w, "ok", 0, 2, from, k48, 0);
    put_rec3(w, "same", 0, 2, same, k48, 0);    /* from not increasing */
    put_rec3(w, "zero", 0, 2, from, k0, 0);     /* count 0 */
    put_rec3(w, "big", 0, 2, from, k65, 0);     /* count above 64 */
    put_rec3(w, "many", 0, 300, from, k48, 0);  /* more entries than a history keeps */
    put_rec3(w, "cap", 12345, 2, from, k48, 0); /* a promotion cap that is no bucket */
    put_rec3(w, "cut", 0, 2, from, k48, 18);    /* cut inside the device name */
    bdb_wal_close(w);
    bdb_db *db = open_db(0, 1);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.wal_corruptions, 6);
    assert_int_equal(bdb_db_subbuckets(db, "t", "ok"), 8);
    int64_t s, e;
    uint32_t n;
    assert_int_equal(bdb_db_partition_at(db, "t", "ok", T0 + 500, &s, &e, &n), BDB_OK);
    assert_int_equal(n, 4);
    const char *bad[] = {"same", "zero", "big", "many", "cap"};
    for (int i = 0; i < 5; i++)
        assert_int_equal(bdb_db_subbuckets(db, "t", bad[i]), 1);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A time outside the stored range (BDB_TS_MIN_MS..BDB_TS_MAX_MS) is refused whole:
 * nothing stored, nothing counted. The range's two ends are stored and counted like
 * any other time (their minutes fit the counters' int32, which times far outside
 * the range, once accepted, did not). */
static void test_far_times_refused_range_ends_counted(void **state)
{
    (void)state;
    bdb_db *db = open_db(0, 1);
    const int64_t far = INT64_C(200000000000000); /* year 8307: minute > INT32_MAX */
    eu_put_run(db, "t", "d", T0, 1000, 1);
    bdb_batch *b = bdb_batch_new();
    for (int sign = -1; sign <= 1; sign += 2) {
        bdb_batch_begin(b, "d", 1, sign * far, 0);
        bdb_batch_metric(b, "m", 1, 1);
        assert_int_equal(bdb_batch_end(b), 1);
        assert_int_equal(bdb_db_write(db, "t", b), BDB_ERR_INVALID);
        bdb_batch_reset(b);
    }
    bdb_batch_free(b);
    struct tbt t = {0};
    assert_int_equal(bdb_db_telemetry_by_tenant(db, "t", INT64_MIN, INT64_MAX, tbt_cb, &t), BDB_OK);
    assert_int_equal(t.rows, 1);
    assert_int_equal(t.events, 1);
    assert_int_equal(count_m(db, "t", "d"), 1);
    eu_put_run(db, "t", "d", BDB_TS_MIN_MS, 1000, 1);
    eu_put_run(db, "t", "d", BDB_TS_MAX_MS, 1000, 1);
    memset(&t, 0, sizeof t);
    assert_int_equal(bdb_db_telemetry_by_tenant(db, "t", INT64_MIN, INT64_MAX, tbt_cb, &t), BDB_OK);
    assert_int_equal(t.rows, 3);
    assert_int_equal(t.events, 3);
    assert_int_equal(count_m(db, "t", "d"), 3);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* ---------------------------------------------------------------- usage */

static void test_usage_many_tenants_and_partitions(void **state)
{
    (void)state;
    bdb_db *db = open_db(0, 1);
    char tn[16], dn[16];
    for (int i = 0; i < 20; i++) { /* 20 tenants in one block file */
        snprintf(tn, sizeof tn, "t%02d", i);
        eu_put_run(db, tn, "d", T0, 1000, 10 + i);
    }
    for (int i = 0; i < 70; i++) { /* 70 partitions of tenant "w" */
        snprintf(dn, sizeof dn, "w%02d", i);
        eu_put_run(db, "w", dn, T0, 1000, 3);
    }
    /* one partition above 64 KiB: values that do not compress */
    bdb_batch *b = bdb_batch_new();
    uint64_t x = 88172645463325252ULL;
    for (int i = 0; i < 9000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bdb_batch_begin(b, "big", 3, T0 + i * 100, (size_t)i);
        bdb_batch_metric(b, "m", 1, (double)(x >> 11) / 3.0);
        assert_int_equal(bdb_batch_end(b), 1);
    }
    assert_int_equal(bdb_db_write(db, "x", b), BDB_OK);
    bdb_batch_free(b);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.blocks, 1);

    /* no warning size: nothing is large */
    bdb_usage_opts uo = {.partition_warn_bytes = 0, .manual = 1};
    bdb_db_usage_start(db, &uo);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    bdb_partition_summary ps;
    assert_int_equal(bdb_db_partition_summary(db, &ps), BDB_OK);
    assert_int_equal(ps.count, 20 + 70 + 1);
    assert_int_equal(ps.large, 0);
    assert_true(ps.max > 64 * 1024);
    uint64_t above = 0, total = 0;
    for (int i = 0; i <= BDB_PSIZE_NB; i++) {
        total += ps.buckets[i];
        if (i > 0)
            above += ps.buckets[i];
    }
    assert_int_equal(total, ps.count);
    assert_int_equal(above, 1); /* the big one, beyond the first bound */
    uint64_t sum = 0;
    bdb_storage_usage su;
    for (int i = 0; i < 20; i++) {
        snprintf(tn, sizeof tn, "t%02d", i);
        assert_int_equal(bdb_db_tenant_storage(db, tn, &su), BDB_OK);
        assert_true(su.block_bytes > 0);
        sum += su.block_bytes;
    }
    assert_int_equal(bdb_db_tenant_storage(db, "w", &su), BDB_OK);
    sum += su.block_bytes;
    assert_int_equal(bdb_db_tenant_storage(db, "x", &su), BDB_OK);
    sum += su.block_bytes;
    assert_int_equal(sum, st.block_bytes);
    assert_int_equal(bdb_db_tenant_storage(db, NULL, &su), BDB_ERR_NOTFOUND);

    /* a 1-byte warning size: every partition is large (more than 64 remembered) */
    uo.partition_warn_bytes = 1;
    bdb_db_usage_start(db, &uo);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    assert_int_equal(bdb_db_partition_summary(db, &ps), BDB_OK);
    assert_int_equal(ps.large, ps.count);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK); /* warned once: same figures */
    assert_int_equal(bdb_db_partition_summary(db, &ps), BDB_OK);
    assert_int_equal(ps.large, ps.count);

    /* a note for a tenant the tracker does not know yet, lost to out of memory: the
     * next measurement still finds the samples in the head */
    eu_put_run(db, "fresh", "d", T0, 1000, 5);
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_FROM, 1);
    bdb_db_usage_note(db, "fresh", 5);
    bdb_alloc_fail_disarm();
    assert_int_equal(bdb_db_tenant_storage(db, "fresh", &su), BDB_OK);
    assert_int_equal(su.unflushed_samples, 0);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    assert_int_equal(bdb_db_tenant_storage(db, "fresh", &su), BDB_OK);
    assert_int_equal(su.unflushed_samples, 5);
    assert_int_equal(su.unflushed_bytes, 5 * BDB_USAGE_SAMPLE_BYTES);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A measurement that runs out of memory is skipped: BDB_ERR_NOMEM, and the previous
 * figures stay published until a measurement succeeds. */
static void test_usage_out_of_memory(void **state)
{
    (void)state;
    bdb_db *db = open_db(0, 1);
    const char *tn[] = {"a", "b", "c"};
    for (int w = 0; w < 4; w++) { /* four windows, one block file each */
        for (int i = 0; i < 3; i++)
            eu_put_run(db, tn[i], "d", T0 + w * 2 * HOUR, 1000, 10 * (i + 1));
        assert_int_equal(bdb_db_flush(db), BDB_OK);
    }
    bdb_usage_opts uo = {.partition_warn_bytes = 1, .manual = 1};
    bdb_db_usage_start(db, &uo);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    bdb_storage_usage before[3], su;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(bdb_db_tenant_storage(db, tn[i], &before[i]), BDB_OK);
        assert_true(before[i].block_bytes > 0);
        assert_int_equal(before[i].unflushed_samples, 0);
    }
    bdb_partition_summary ps0, ps;
    assert_int_equal(bdb_db_partition_summary(db, &ps0), BDB_OK);
    assert_int_equal(ps0.count, 12);
    eu_put_run(db, "b", "d", T0 + 9 * HOUR, 1000, 7);
    eu_put_run(db, "new", "d", T0 + 9 * HOUR, 1000, 3);
    int fails = 0;
    for (uint64_t k = 1; k < 1000; k++) {
        eu_arm(k);
        int rc = bdb_db_usage_refresh(db);
        int inj = eu_disarm();
        if (!inj) {
            assert_int_equal(rc, BDB_OK);
            break;
        }
        if (rc == BDB_OK) { /* a warning's key failed: it waits, the figures are new */
            for (int i = 0; i < 3; i++)
                assert_int_equal(bdb_db_tenant_storage(db, tn[i], &before[i]), BDB_OK);
            assert_int_equal(bdb_db_partition_summary(db, &ps0), BDB_OK);
            continue;
        }
        assert_int_equal(rc, BDB_ERR_NOMEM);
        fails++;
        for (int i = 0; i < 3; i++) {
            assert_int_equal(bdb_db_tenant_storage(db, tn[i], &su), BDB_OK);
            assert_int_equal(su.block_bytes, before[i].block_bytes);
            assert_int_equal(su.unflushed_samples, before[i].unflushed_samples);
        }
        assert_int_equal(bdb_db_partition_summary(db, &ps), BDB_OK);
        assert_int_equal(ps.count, ps0.count);
        assert_int_equal(ps.scans, ps0.scans);
    }
    assert_true(fails >= 3);
    assert_int_equal(bdb_db_tenant_storage(db, "b", &su), BDB_OK);
    assert_int_equal(su.unflushed_samples, 7);
    assert_int_equal(su.block_bytes, before[1].block_bytes);
    assert_int_equal(bdb_db_tenant_storage(db, "new", &su), BDB_OK);
    assert_int_equal(su.unflushed_samples, 3);
    /* the device quota's question, out of memory: an error, not a guess */
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, "x", 1, T0, 1);
    bdb_batch_metric(b, "m", 1, 1.0);
    assert_int_equal(bdb_batch_end(b), 1);
    uint64_t devs = 0, fresh = 0;
    eu_arm(1);
    assert_int_equal(bdb_db_tenant_usage(db, "a", b, &devs, &fresh), BDB_ERR_NOMEM);
    bdb_alloc_fail_disarm();
    assert_int_equal(bdb_db_tenant_usage(db, "a", b, &devs, &fresh), BDB_OK);
    assert_int_equal(devs, 1);
    assert_int_equal(fresh, 1);
    bdb_batch_free(b);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_usage_thread_options_later(void **state)
{
    (void)state;
    bdb_db *db = open_db(0, 1);
    eu_put_run(db, "t", "d", T0, 1000, 10);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_db_usage_start(db, NULL); /* thread, no warning size yet */
    bdb_partition_summary ps;
    memset(&ps, 0, sizeof ps);
    for (int i = 0; i < 500 && !ps.measured; i++) { /* up to 5 s */
        usleep(10000);
        bdb_db_partition_summary(db, &ps);
    }
    assert_int_equal(ps.measured, 1);
    assert_int_equal(ps.count, 1);
    assert_int_equal(ps.large, 0);
    /* options arrive: the thread looks at the blocks again without a change in them */
    bdb_usage_opts uo = {.partition_warn_bytes = 1, .manual = 0};
    bdb_db_usage_start(db, &uo);
    for (int i = 0; i < 500 && ps.large == 0; i++) { /* up to 5 s */
        usleep(10000);
        bdb_db_partition_summary(db, &ps);
    }
    assert_int_equal(ps.large, 1);
    assert_int_equal(ps.warn_bytes, 1);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_partition_count_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tbt_several_devices_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_subbucket_history_edges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_subbucket_records_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_far_times_refused_range_ends_counted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_usage_many_tenants_and_partitions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_usage_out_of_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_usage_thread_options_later, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
