/* db_hot: sub-buckets, events per partition (telemetry_by_tenant) and dynamic bucket
 * promotion in the embedded engine, through its public API with background=0.
 *
 * Covered: sub-bucketed samples land in N partition ids (block partition statistics)
 * and a range query returns every one of them, from the head, after a flush, after a
 * clean reopen (catalog) and after a crash (WAL replay: same ids, same samples);
 * event counts per partition exact after flush + reopen and after a crash; counts
 * forgotten before a cutoff; promotion to the next smaller bucket past the size
 * target, with a range query across the change returning everything and the learner
 * capped by the promotion; a WAL record type 3 with a bad sub-bucket count is skipped
 * as corrupt. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "model/bucket.h"
#include "query/pool.h"
#include "query/range.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/hot/db_hot.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIN BDB_MS_MIN
#define HOUR BDB_MS_HOUR
#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z, a day boundary */

static char tmpdir[64];
static char datadir[128];
static int64_t now_ms = T0;

static int setup(void **state)
{
    (void)state;
    bdb_log_set_level(BDB_LOG_ERROR);
    eu_scratch(tmpdir, sizeof tmpdir, "hot", EU_TMPFS, datadir, sizeof datadir);
    now_ms = T0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return eu_cleanup(tmpdir);
}

static bdb_db *open_dir(const char *dir, uint64_t promo)
{
    bdb_db_opts o;
    eu_opts(&o, dir, eu_clock, &now_ms);
    bdb_db *db = NULL;
    assert_int_equal(bdb_db_open(&o, &db), BDB_OK);
    bdb_db_set_promotion_target(db, promo);
    return db;
}

struct qctx {
    uint64_t n;
    int64_t last;
    int ordered;
};

static int qcb(void *ctx, const char *metric, int64_t ts, double v)
{
    (void)metric;
    (void)v;
    struct qctx *q = ctx;
    if (q->n && ts <= q->last)
        q->ordered = 0;
    q->last = ts;
    q->n++;
    return 0;
}

/* Samples a range query returns for the device over [from, to). */
static uint64_t query_count(bdb_db *db, const char *tenant, const char *dev, int64_t from,
                            int64_t to)
{
    bdb_pool *pool = bdb_pool_new(2);
    bdb_range_query q = {tenant, dev, NULL, 0, from, to, 0, 0};
    struct qctx c = {0, 0, 1};
    bdb_query_stats st;
    int rc = bdb_query_range(db, pool, &q, qcb, &c, &st);
    bdb_pool_free(pool);
    assert_int_equal(rc, BDB_OK);
    assert_true(c.ordered);
    return c.n;
}

struct pids {
    int64_t id[256];
    uint64_t rows[256];
    int n;
    const char *dev;
};

static int pid_cb(void *ctx, const char *tenant, const char *device, int64_t bucket_start,
                  uint64_t rows, uint64_t bytes)
{
    (void)tenant;
    (void)bytes;
    struct pids *p = ctx;
    if (strcmp(device, p->dev))
        return 0;
    for (int i = 0; i < p->n; i++)
        if (p->id[i] == bucket_start) {
            p->rows[i] += rows;
            return 0;
        }
    if (p->n < 256) {
        p->id[p->n] = bucket_start;
        p->rows[p->n++] = rows;
    }
    return 0;
}

static void partition_ids(bdb_db *db, const char *dev, struct pids *p)
{
    memset(p, 0, sizeof *p);
    p->dev = dev;
    assert_int_equal(bdb_db_partition_sizes(db, pid_cb, p), BDB_OK);
}

static void test_subbuckets_spread_and_read(void **state)
{
    (void)state;
    bdb_db *db = open_dir(datadir, 0);
    /* 5 s unsplit, then 8 sub-buckets: 1,000 reports/s for 40 s. */
    eu_put_run(db, "t", "hot", T0, 1, 5000);
    assert_int_equal(bdb_db_set_subbuckets(db, "t", "hot", 8), BDB_OK);
    assert_int_equal(bdb_db_subbuckets(db, "t", "hot"), 8);
    assert_int_equal(bdb_db_set_subbuckets(db, "t", "hot", 65), BDB_ERR_INVALID);
    eu_put_run(db, "t", "hot", T0 + 5000, 1, 35000);
    assert_int_equal(query_count(db, "t", "hot", T0, T0 + HOUR), 40000);

    /* A crash now: the copy holds the WAL only (nothing flushed). */
    char crash[256];
    snprintf(crash, sizeof crash, "%s/crash", tmpdir);
    eu_copy_tree(datadir, crash, EU_SKIP_LOCK);

    assert_int_equal(bdb_db_flush(db), BDB_OK);
    struct pids p;
    partition_ids(db, "hot", &p);
    /* The unsplit bucket start plus 8 sub-bucket ids (sub 0 is the bucket start). */
    assert_int_equal(p.n, 8);
    uint64_t total = 0;
    for (int i = 0; i < p.n; i++) {
        assert_true(p.id[i] >= T0 && p.id[i] < T0 + 8);
        total += p.rows[i];
    }
    assert_int_equal(total, 40000);
    assert_int_equal(query_count(db, "t", "hot", T0, T0 + HOUR), 40000);
    assert_int_equal(bdb_db_close(db), BDB_OK);

    /* Clean reopen: the catalog keeps the sub-bucket history. */
    db = open_dir(datadir, 0);
    assert_int_equal(bdb_db_subbuckets(db, "t", "hot"), 8);
    assert_int_equal(query_count(db, "t", "hot", T0, T0 + HOUR), 40000);
    assert_int_equal(bdb_db_close(db), BDB_OK);

    /* Crash: replay files every sample under the same ids. */
    db = open_dir(crash, 0);
    assert_int_equal(bdb_db_subbuckets(db, "t", "hot"), 8);
    assert_int_equal(query_count(db, "t", "hot", T0, T0 + HOUR), 40000);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    struct pids q;
    partition_ids(db, "hot", &q);
    assert_int_equal(q.n, p.n);
    for (int i = 0; i < q.n; i++) {
        int found = 0;
        for (int k = 0; k < p.n; k++)
            if (p.id[k] == q.id[i] && p.rows[k] == q.rows[i])
                found = 1;
        assert_true(found);
    }
    /* Back to one: later samples go to the bucket start again. */
    assert_int_equal(bdb_db_set_subbuckets(db, "t", "hot", 1), BDB_OK);
    assert_int_equal(bdb_db_subbuckets(db, "t", "hot"), 1);
    eu_put_run(db, "t", "hot", T0 + 60000, 1, 3000);
    assert_int_equal(query_count(db, "t", "hot", T0, T0 + HOUR), 43000);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A sub-bucketed device reporting every 10 s: consecutive samples fall in different
 * sub-partitions, and each partition's samples are stored as chunks of their own, not
 * as one chunk per sample (as the flush did until 2026-11: 16 bytes a sample). */
static void test_subbuckets_chunks(void **state)
{
    (void)state;
    bdb_db *db = open_dir(datadir, 0);
    eu_put_run(db, "t", "slow", T0 + 3, 10000, 1);
    assert_int_equal(bdb_db_set_subbuckets(db, "t", "slow", 8), BDB_OK);
    eu_put_run(db, "t", "slow", T0 + 10003, 10000, 719); /* 2 h; 10 s mod 8: 4 ids */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    struct pids p;
    partition_ids(db, "slow", &p);
    /* 4 ids in each bucket the 2 h cross (1 h buckets: 2) */
    assert_true(p.n >= 4 && p.n <= 8);
    const char *m[] = {"m"};
    bdb_samples out[1];
    memset(out, 0, sizeof out);
    uint64_t chunks = 0;
    assert_int_equal(bdb_db_read(db, "t", "slow", m, 1, T0, T0 + 2 * HOUR, out, &chunks), BDB_OK);
    assert_int_equal(out[0].n, 720);
    assert_true(chunks <= (uint64_t)p.n); /* one per partition id, not one per sample */
    bdb_samples_free(&out[0]);
    assert_int_equal(query_count(db, "t", "slow", T0, T0 + 2 * HOUR), 720);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

struct tbt {
    uint64_t ev[8];
    int64_t start[8];
    int n;
    uint64_t total;
};

static int tbt_cb(void *ctx, const bdb_tbt_row *r)
{
    struct tbt *t = ctx;
    if (t->n < 8) {
        t->ev[t->n] = r->events;
        t->start[t->n++] = r->bucket_start;
    }
    t->total += r->events;
    return 0;
}

static uint64_t tbt_events(bdb_db *db, const char *dev, int64_t bucket)
{
    struct tbt t = {0};
    int rc = bdb_db_telemetry_by_tenant(db, "t", bucket, bucket + 1, tbt_cb, &t);
    (void)rc;
    (void)dev;
    return t.total;
}

static void test_events_per_partition(void **state)
{
    (void)state;
    bdb_db *db = open_dir(datadir, 0);
    /* Device buckets start at 1 h (unknown class). a: 30 reports in hour 0, 20 in
     * hour 1; b: 7 in hour 0. */
    eu_put_run(db, "t", "a", T0, MIN, 30);
    eu_put_run(db, "t", "a", T0 + HOUR, MIN, 20);
    eu_put_run(db, "t", "b", T0 + 5 * MIN, 1000, 7);
    eu_put_run(db, "u", "a", T0, MIN, 3); /* another tenant: not listed under t */
    struct tbt t = {0};
    assert_int_equal(bdb_db_telemetry_by_tenant(db, "t", T0, T0 + 2 * HOUR, tbt_cb, &t), 0);
    assert_int_equal(t.n, 3);
    assert_int_equal(t.total, 57);
    assert_int_equal(tbt_events(db, "a", T0), 37);
    assert_int_equal(tbt_events(db, "a", T0 + HOUR), 20);
    assert_int_equal(bdb_db_telemetry_by_tenant(db, "nobody", T0, T0 + 1, tbt_cb, &t),
                     BDB_ERR_NOTFOUND);

    char crash[256];
    snprintf(crash, sizeof crash, "%s/crash", tmpdir);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    eu_put_run(db, "t", "a", T0 + HOUR + 30 * MIN, 1000, 5); /* after the flush: WAL only */
    eu_copy_tree(datadir, crash, EU_SKIP_LOCK);
    assert_int_equal(tbt_events(db, "a", T0 + HOUR), 25);
    assert_int_equal(bdb_db_close(db), BDB_OK);

    db = open_dir(datadir, 0); /* catalog */
    assert_int_equal(tbt_events(db, "a", T0), 37);
    assert_int_equal(tbt_events(db, "a", T0 + HOUR), 25);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_dir(crash, 0); /* catalog of the flush + replay of the rest */
    assert_int_equal(tbt_events(db, "a", T0), 37);
    assert_int_equal(tbt_events(db, "a", T0 + HOUR), 25);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_promotion(void **state)
{
    (void)state;
    /* Target 50,000 bytes = 500 samples at the row estimate. */
    bdb_db *db = open_dir(datadir, 50000);
    /* 1 report/s from T0: the 1 h bucket passes 500 samples after ~8 min. The learner
     * would pick 15 m (HIGH needs > 1/s), so a slower 1/2s device stays MEDIUM: 1 h. */
    eu_put_run(db, "t", "p", T0, 2000, 900); /* 30 min, 900 samples in hour 0 */
    bdb_hot_engine_stats hs;
    bdb_db_hot_stats(db, &hs);
    assert_int_equal(hs.bucket_promotions, 1);
    /* The change applies from the end of the current bucket. */
    int64_t s, e;
    uint32_t subs;
    assert_int_equal(bdb_db_partition_at(db, "t", "p", T0 + 10 * MIN, &s, &e, &subs), BDB_OK);
    assert_int_equal(s, T0);
    assert_int_equal(e, T0 + HOUR);
    assert_int_equal(bdb_db_partition_at(db, "t", "p", T0 + HOUR + 20 * MIN, &s, &e, &subs),
                     BDB_OK);
    assert_int_equal(e - s, 15 * MIN);
    /* Keep writing across the change for two hours. */
    eu_put_run(db, "t", "p", T0 + 30 * MIN, 2000, 3600);
    assert_int_equal(query_count(db, "t", "p", T0, T0 + 4 * HOUR), 4500);
    /* The 15 m partitions hold 450 samples: under the target, no further promotion. */
    bdb_db_hot_stats(db, &hs);
    assert_int_equal(hs.bucket_promotions, 1);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);

    /* The cap survives a restart: a slow device would be LOW (6 h) for the learner,
     * but stays at 15 m. */
    db = open_dir(datadir, 50000);
    eu_put_run(db, "t", "p", T0 + 3 * HOUR, 5 * MIN, 60); /* 5 h at 1 per 5 min */
    assert_int_equal(bdb_db_partition_at(db, "t", "p", T0 + 7 * HOUR, &s, &e, &subs), BDB_OK);
    assert_true(e - s <= 15 * MIN);
    assert_int_equal(query_count(db, "t", "p", T0, T0 + 9 * HOUR), 4500 + 60);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_forget_counts(void **state)
{
    (void)state;
    bdb_db *db = open_dir(datadir, 0);
    eu_put_run(db, "t", "a", T0, MIN, 180); /* hours 0, 1, 2 */
    assert_int_equal(tbt_events(db, "a", T0), 60);
    assert_int_equal(bdb_db_forget_partition_counts(db, T0 + HOUR + 1), BDB_OK);
    /* Hour 0 ended at or before the cutoff; hour 1 has not. */
    assert_int_equal(tbt_events(db, "a", T0), 0);
    assert_int_equal(tbt_events(db, "a", T0 + HOUR), 60);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_subbuckets_spread_and_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_subbuckets_chunks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_events_per_partition, setup, teardown),
        cmocka_unit_test_setup_teardown(test_promotion, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forget_counts, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
