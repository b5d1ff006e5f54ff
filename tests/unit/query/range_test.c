/* range + pool: one device's samples across many partitions (some in blocks, some in
 * the head, across a bucket-size change), ascending and descending, with limits that
 * stop the scan early (stats.partitions), metric subsets in any order with ties
 * ordered by metric name, NOTFOUND / INVALID / LIMIT, a callback that stops the query,
 * and a pool of 3 workers giving exactly what pool NULL gives. The pool itself: every
 * item runs once, never more than `workers` at a time, from several callers at once. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "model/bucket.h"
#include "query/pool.h"
#include "query/range.h"
#include "storage/embedded/core/db.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIN BDB_MS_MIN
#define HOUR BDB_MS_HOUR
#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */
#define HOURS 120                 /* partitions of device "d" */
#define NTS (HOURS * 6)           /* one timestamp every 10 minutes */

static char tmpdir[64];
static bdb_db *db;

struct sample {
    const char *metric;
    int64_t ts;
    double v;
};

/* The reference for device "d": metric a at every timestamp, b at every second, c at
 * every third (so a, b and c often share a time), sorted by (ts, metric name). */
static struct sample ref[NTS * 3];
static size_t nref;

static void build_ref(void)
{
    nref = 0;
    for (int i = 0; i < NTS; i++) {
        int64_t ts = T0 + (int64_t)i * 10 * MIN;
        ref[nref++] = (struct sample){"a", ts, i};
        if (i % 2 == 0)
            ref[nref++] = (struct sample){"b", ts, 1000.0 + i};
        if (i % 3 == 0)
            ref[nref++] = (struct sample){"c", ts, -i};
    }
}

static void write_ref(const char *dev, size_t from, size_t to)
{
    bdb_batch *b = bdb_batch_new();
    size_t i = from;
    while (i < to) {
        int64_t ts = ref[i].ts;
        bdb_batch_begin(b, dev, strlen(dev), ts, i);
        /* metrics of one time in reverse name order: storage order must not matter */
        size_t j = i;
        while (j < to && ref[j].ts == ts)
            j++;
        for (size_t k = j; k-- > i;)
            bdb_batch_metric(b, ref[k].metric, 1, ref[k].v);
        bdb_batch_end(b);
        i = j;
    }
    assert_int_equal(bdb_db_write(db, "t", b), BDB_OK);
    bdb_batch_free(b);
}

static int setup(void **state)
{
    (void)state;
    bdb_log_set_level(BDB_LOG_ERROR + 1);
    strcpy(tmpdir, "/tmp/bdb-range-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    bdb_db_opts o;
    bdb_db_opts_default(&o);
    char dir[128];
    snprintf(dir, sizeof dir, "%s/data", tmpdir);
    o.data_dir = dir;
    o.background = 0;
    if (bdb_db_open(&o, &db) != BDB_OK)
        return -1;
    build_ref();
    /* pin 1 h buckets so the partition count is known: 120 partitions */
    if (bdb_db_set_device_bucket(db, "t", "d", HOUR) != BDB_OK)
        return -1;
    /* the first half into blocks, the second half stays in the head */
    write_ref("d", 0, nref / 2);
    if (bdb_db_flush(db) != BDB_OK)
        return -1;
    write_ref("d", nref / 2, nref);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bdb_db_close(db);
    db = NULL;
    tu_rm_rf(tmpdir);
    return 0;
}

/* ------------------------------------------------------------ helpers */

struct got {
    struct sample *s;
    size_t n, cap;
    size_t stop_at; /* 0 = never: return 1 from the callback on this call (1-based) */
    size_t calls;
};

static int got_cb(void *ctx, const char *metric, int64_t ts, double v)
{
    struct got *g = ctx;
    g->calls++;
    if (g->stop_at && g->calls == g->stop_at)
        return 1;
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 1024;
        g->s = realloc(g->s, g->cap * sizeof *g->s);
        assert_non_null(g->s);
    }
    /* metric names handed to the callback stay valid during the query only: copy
     * into a static set */
    static const char *names[] = {"a", "b", "c", "zz"};
    const char *keep = NULL;
    for (size_t i = 0; i < 4; i++)
        if (!strcmp(names[i], metric))
            keep = names[i];
    assert_non_null(keep);
    g->s[g->n++] = (struct sample){keep, ts, v};
    return 0;
}

static int run(bdb_pool *pool, const bdb_range_query *q, struct got *g, bdb_query_stats *st)
{
    memset(g, 0, sizeof *g);
    return bdb_query_range(db, pool, q, got_cb, g, st);
}

static int in_set(const char *m, const char *const *set, size_t n)
{
    if (n == 0)
        return 1;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(m, set[i]))
            return 1;
    return 0;
}

/* The expected answer from the reference: filter, order (desc = time descending, ties
 * still by metric name), limit. */
static size_t expected(const bdb_range_query *q, struct sample *out)
{
    size_t n = 0;
    if (!q->desc) {
        for (size_t i = 0; i < nref; i++)
            if (ref[i].ts >= q->from && ref[i].ts < q->to &&
                in_set(ref[i].metric, q->metrics, q->nmetrics))
                out[n++] = ref[i];
    } else {
        /* walk times from the newest; inside one time keep name order */
        size_t i = nref;
        while (i > 0) {
            size_t j = i;
            while (j > 0 && ref[j - 1].ts == ref[i - 1].ts)
                j--;
            for (size_t k = j; k < i; k++)
                if (ref[k].ts >= q->from && ref[k].ts < q->to &&
                    in_set(ref[k].metric, q->metrics, q->nmetrics))
                    out[n++] = ref[k];
            i = j;
        }
    }
    if (q->limit && n > q->limit)
        n = q->limit;
    return n;
}

static void check_same(const struct got *g, const struct sample *want, size_t n)
{
    if (g->n != n)
        fail_msg("got %zu samples, want %zu", g->n, n);
    for (size_t i = 0; i < n; i++) {
        if (g->s[i].ts != want[i].ts || strcmp(g->s[i].metric, want[i].metric) != 0 ||
            g->s[i].v != want[i].v)
            fail_msg("sample %zu: got (%s, %lld, %g) want (%s, %lld, %g)", i, g->s[i].metric,
                     (long long)g->s[i].ts, g->s[i].v, want[i].metric, (long long)want[i].ts,
                     want[i].v);
    }
}

static struct sample want_buf[NTS * 3];

/* Runs q with pool NULL and with a 3-worker pool; both must equal the reference. */
static void check_query(bdb_pool *pool, const bdb_range_query *q, bdb_query_stats *st_null,
                        bdb_query_stats *st_pool)
{
    size_t n = expected(q, want_buf);
    struct got g;
    assert_int_equal(run(NULL, q, &g, st_null), BDB_OK);
    check_same(&g, want_buf, n);
    assert_int_equal(st_null->samples, n);
    free(g.s);
    assert_int_equal(run(pool, q, &g, st_pool), BDB_OK);
    check_same(&g, want_buf, n);
    assert_int_equal(st_pool->samples, n);
    free(g.s);
}

/* Number of 1 h partitions holding the first n samples of want_buf (asc or desc). */
static uint64_t partitions_of_first(size_t n)
{
    uint64_t parts = 0;
    int64_t last = INT64_MIN;
    for (size_t i = 0; i < n; i++) {
        int64_t p = bdb_align_down(want_buf[i].ts, HOUR);
        if (p != last)
            parts++;
        last = p;
    }
    return parts;
}

/* ------------------------------------------------------------ tests */

static void test_full_range_asc_desc(void **state)
{
    (void)state;
    bdb_pool *pool = bdb_pool_new(3);
    assert_int_equal(bdb_pool_workers(pool), 3);
    bdb_range_query q = {
        .tenant = "t", .device = "d", .from = T0 - 10 * HOUR, .to = T0 + 1000 * HOUR};
    bdb_query_stats a, b;
    for (int desc = 0; desc < 2; desc++) {
        q.desc = desc;
        check_query(pool, &q, &a, &b);
        assert_int_equal(a.samples, nref);
        /* the range is clamped to the device's first..last event: 120 partitions */
        assert_int_equal(a.partitions, HOURS);
        assert_int_equal(b.partitions, HOURS);
        assert_true(a.chunks >= HOURS * 3 / 2);
        assert_int_equal(a.chunks, b.chunks);
    }
    bdb_pool_free(pool);
}

static void test_sub_ranges(void **state)
{
    (void)state;
    bdb_pool *pool = bdb_pool_new(3);
    bdb_query_stats a, b;
    /* boundaries inside partitions and exactly on them, one ms, a single partition */
    int64_t cases[][2] = {
        {T0 + 90 * MIN, T0 + 5 * HOUR + 5 * MIN},
        {T0 + HOUR, T0 + 2 * HOUR},
        {T0 + HOUR, T0 + HOUR + 1},
        {T0 + HOUR + 1, T0 + HOUR + 10 * MIN}, /* no sample inside */
        {T0 + 59 * HOUR, T0 + 61 * HOUR + 1},  /* across the block/head split */
        {T0 + (HOURS - 1) * HOUR, T0 + HOURS * HOUR},
        {T0 - 100 * HOUR, T0 + 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int desc = 0; desc < 2; desc++) {
            bdb_range_query q = {
                .tenant = "t", .device = "d", .from = cases[c][0], .to = cases[c][1], .desc = desc};
            check_query(pool, &q, &a, &b);
            assert_int_equal(a.partitions, b.partitions);
        }
    }
    /* [T0 + 1h, T0 + 2h) reads exactly one partition */
    bdb_range_query q = {.tenant = "t", .device = "d", .from = T0 + HOUR, .to = T0 + 2 * HOUR};
    check_query(pool, &q, &a, &b);
    assert_int_equal(a.partitions, 1);
    assert_int_equal(a.samples, 6 + 3 + 2);
    bdb_pool_free(pool);
}

static void test_limit_stops_early(void **state)
{
    (void)state;
    bdb_pool *pool = bdb_pool_new(3);
    bdb_query_stats a, b;
    uint64_t limits[] = {1, 5, 11, 12, 30, 100};
    for (size_t l = 0; l < sizeof limits / sizeof limits[0]; l++) {
        for (int desc = 0; desc < 2; desc++) {
            bdb_range_query q = {.tenant = "t",
                                 .device = "d",
                                 .from = T0 - HOUR,
                                 .to = T0 + 1000 * HOUR,
                                 .limit = limits[l],
                                 .desc = desc};
            check_query(pool, &q, &a, &b);
            assert_int_equal(a.samples, limits[l]);
            /* without a pool: exactly the partitions that hold the answer */
            uint64_t need = partitions_of_first((size_t)limits[l]);
            assert_int_equal(a.partitions, need);
            /* with the pool: at most one wave (2 x workers) beyond that, far from all */
            assert_true(b.partitions >= need);
            assert_true(b.partitions < need + 6);
            assert_true(b.partitions < HOURS);
        }
    }
    /* desc with limit reads the newest partitions: the last samples, newest first */
    bdb_range_query q = {
        .tenant = "t", .device = "d", .from = T0, .to = T0 + 1000 * HOUR, .limit = 3, .desc = 1};
    struct got g;
    assert_int_equal(run(NULL, &q, &g, &a), BDB_OK);
    assert_int_equal(g.n, 3);
    assert_int_equal(g.s[0].ts, T0 + (NTS - 1) * 10 * MIN);
    assert_true(g.s[0].ts > g.s[2].ts);
    free(g.s);
    /* a limit larger than the answer returns everything */
    q.limit = 1000000;
    q.desc = 0;
    check_query(pool, &q, &a, &b);
    assert_int_equal(a.samples, nref);
    bdb_pool_free(pool);
}

static void test_metric_subsets_and_ties(void **state)
{
    (void)state;
    bdb_pool *pool = bdb_pool_new(3);
    bdb_query_stats a, b;
    const char *sets[][3] = {
        {"a", NULL, NULL}, {"b", "c", NULL},  {"c", "a", NULL},
        {"c", "b", "a"},   {"a", "zz", NULL}, /* a metric the device never had */
    };
    size_t sizes[] = {1, 2, 2, 3, 2};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (int desc = 0; desc < 2; desc++) {
            bdb_range_query q = {.tenant = "t",
                                 .device = "d",
                                 .metrics = sets[s],
                                 .nmetrics = sizes[s],
                                 .from = T0 + 7 * HOUR,
                                 .to = T0 + 70 * HOUR,
                                 .desc = desc};
            check_query(pool, &q, &a, &b);
        }
    }
    /* explicitly: at T0 all three share the time; name order whatever the request order */
    const char *rev[] = {"c", "b", "a"};
    bdb_range_query q = {
        .tenant = "t", .device = "d", .metrics = rev, .nmetrics = 3, .from = T0, .to = T0 + 1};
    struct got g;
    assert_int_equal(run(pool, &q, &g, &a), BDB_OK);
    assert_int_equal(g.n, 3);
    assert_string_equal(g.s[0].metric, "a");
    assert_string_equal(g.s[1].metric, "b");
    assert_string_equal(g.s[2].metric, "c");
    free(g.s);
    /* only unknown metrics: nothing, no error */
    const char *none[] = {"zz"};
    q.metrics = none;
    q.nmetrics = 1;
    q.to = T0 + 1000 * HOUR;
    assert_int_equal(run(NULL, &q, &g, &a), BDB_OK);
    assert_int_equal(g.n, 0);
    free(g.s);
    bdb_pool_free(pool);
}

static void test_errors(void **state)
{
    (void)state;
    struct got g;
    bdb_query_stats st;
    bdb_range_query q = {.tenant = "t", .device = "nobody", .from = T0, .to = T0 + HOUR};
    assert_int_equal(run(NULL, &q, &g, &st), BDB_ERR_NOTFOUND);
    assert_int_equal(g.calls, 0);
    q.tenant = "other";
    q.device = "d";
    assert_int_equal(run(NULL, &q, &g, &st), BDB_ERR_NOTFOUND);
    q.tenant = "t";
    q.from = q.to = T0;
    assert_int_equal(run(NULL, &q, &g, &st), BDB_ERR_INVALID);
    q.from = T0 + 1;
    assert_int_equal(run(NULL, &q, &g, &st), BDB_ERR_INVALID);
    assert_int_equal(g.calls, 0);
    /* stats may be NULL */
    q.from = T0;
    q.to = T0 + HOUR;
    memset(&g, 0, sizeof g);
    assert_int_equal(bdb_query_range(db, NULL, &q, got_cb, &g, NULL), BDB_OK);
    assert_int_equal(g.n, 6 + 3 + 2);
    free(g.s);

    /* more partitions than BDB_QUERY_MAX_PARTITIONS between the first and last event */
    assert_int_equal(bdb_db_set_device_bucket(db, "t", "far", HOUR), BDB_OK);
    bdb_batch *b = bdb_batch_new();
    int64_t far_end = T0 + (int64_t)(BDB_QUERY_MAX_PARTITIONS + 5) * HOUR;
    bdb_batch_begin(b, "far", 3, T0, 1);
    bdb_batch_metric(b, "a", 1, 1.0);
    bdb_batch_end(b);
    bdb_batch_begin(b, "far", 3, far_end, 2);
    bdb_batch_metric(b, "a", 1, 2.0);
    bdb_batch_end(b);
    assert_int_equal(bdb_db_write(db, "t", b), BDB_OK);
    bdb_batch_free(b);
    bdb_range_query f = {.tenant = "t", .device = "far", .from = T0 - HOUR, .to = far_end + 1};
    assert_int_equal(run(NULL, &f, &g, &st), BDB_ERR_LIMIT);
    assert_int_equal(g.calls, 0);
    free(g.s);
    /* exactly the maximum is allowed */
    f.to = T0 + (int64_t)BDB_QUERY_MAX_PARTITIONS * HOUR;
    assert_int_equal(run(NULL, &f, &g, &st), BDB_OK);
    assert_int_equal(g.n, 1);
    free(g.s);
    /* limit 1 desc over the whole far range is still refused (the plan is bounded first) */
    f.to = far_end + 1;
    f.limit = 1;
    f.desc = 1;
    assert_int_equal(run(NULL, &f, &g, &st), BDB_ERR_LIMIT);
    free(g.s);
    /* a narrow range of the same device is fine */
    f.from = far_end - HOUR;
    assert_int_equal(run(NULL, &f, &g, &st), BDB_OK);
    assert_int_equal(g.n, 1);
    assert_true(g.s[0].v == 2.0);
    free(g.s);
}

static void test_callback_stops(void **state)
{
    (void)state;
    bdb_pool *pool = bdb_pool_new(3);
    for (int p = 0; p < 2; p++) {
        bdb_range_query q = {.tenant = "t", .device = "d", .from = T0, .to = T0 + 1000 * HOUR};
        struct got g;
        memset(&g, 0, sizeof g);
        g.stop_at = 25;
        bdb_query_stats st;
        assert_int_equal(bdb_query_range(db, p ? pool : NULL, &q, got_cb, &g, &st), BDB_OK);
        assert_int_equal(g.calls, 25);
        assert_int_equal(g.n, 24);
        assert_true(st.partitions < HOURS);
        for (size_t i = 0; i < g.n; i++)
            assert_int_equal(g.s[i].ts, ref[i].ts);
        free(g.s);
    }
    bdb_pool_free(pool);
}

static void test_across_bucket_change(void **state)
{
    (void)state;
    /* 3 h of 1 h buckets, then 15 min buckets for 2 h */
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < 18; i++) {
        bdb_batch_begin(b, "chg", 3, T0 + i * 10 * MIN, 1);
        bdb_batch_metric(b, "a", 1, i);
        bdb_batch_end(b);
    }
    assert_int_equal(bdb_db_write(db, "t", b), BDB_OK);
    assert_int_equal(bdb_db_set_device_bucket(db, "t", "chg", 15 * MIN), BDB_OK);
    bdb_batch_reset(b);
    for (int i = 18; i < 30; i++) {
        bdb_batch_begin(b, "chg", 3, T0 + i * 10 * MIN, 1);
        bdb_batch_metric(b, "a", 1, i);
        bdb_batch_end(b);
    }
    assert_int_equal(bdb_db_write(db, "t", b), BDB_OK);
    bdb_batch_free(b);
    bdb_pool *pool = bdb_pool_new(3);
    for (int flush = 0; flush < 2; flush++) {
        if (flush)
            assert_int_equal(bdb_db_flush(db), BDB_OK);
        for (int p = 0; p < 2; p++) {
            for (int desc = 0; desc < 2; desc++) {
                bdb_range_query q = {.tenant = "t",
                                     .device = "chg",
                                     .from = T0 - HOUR,
                                     .to = T0 + 10 * HOUR,
                                     .desc = desc};
                struct got g;
                bdb_query_stats st;
                assert_int_equal(run(p ? pool : NULL, &q, &g, &st), BDB_OK);
                assert_int_equal(g.n, 30);
                for (int i = 0; i < 30; i++) {
                    int k = desc ? 29 - i : i;
                    assert_int_equal(g.s[i].ts, T0 + k * 10 * MIN);
                    assert_true(g.s[i].v == k);
                }
                /* [T0, T0 + 4h50m]: 3 one-hour partitions and 8 quarters */
                assert_int_equal(st.partitions, 3 + 8);
                free(g.s);
            }
        }
    }
    bdb_pool_free(pool);
}

/* ------------------------------------------------------------ pool */

struct pool_ctx {
    atomic_int running, max_running;
    atomic_int hits[1000];
    atomic_long sum;
};

static void pool_fn(void *arg, size_t i)
{
    struct pool_ctx *c = arg;
    int now = atomic_fetch_add(&c->running, 1) + 1;
    int m = atomic_load(&c->max_running);
    while (now > m && !atomic_compare_exchange_weak(&c->max_running, &m, now))
        ;
    atomic_fetch_add(&c->hits[i], 1);
    atomic_fetch_add(&c->sum, (long)i);
    sched_yield();
    atomic_fetch_sub(&c->running, 1);
}

struct caller {
    bdb_pool *pool;
    struct pool_ctx *ctx;
    size_t n;
};

static void *caller_thread(void *arg)
{
    struct caller *c = arg;
    for (int r = 0; r < 20; r++)
        bdb_pool_run(c->pool, pool_fn, c->ctx, c->n);
    return NULL;
}

static void test_pool(void **state)
{
    (void)state;
    static struct pool_ctx c;
    memset(&c, 0, sizeof c);
    bdb_pool *p = bdb_pool_new(3);
    bdb_pool_run(p, pool_fn, &c, 0); /* nothing */
    assert_int_equal(atomic_load(&c.sum), 0);
    bdb_pool_run(p, pool_fn, &c, 1);
    assert_int_equal(atomic_load(&c.hits[0]), 1);
    bdb_pool_run(p, pool_fn, &c, 1000);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(atomic_load(&c.hits[i]), i == 0 ? 2 : 1);
    assert_int_equal(atomic_load(&c.sum), 999 * 1000 / 2);
    assert_true(atomic_load(&c.max_running) <= 3);
    assert_int_equal(atomic_load(&c.running), 0);

    /* several callers share the pool; each run returns only when its items are done */
    static struct pool_ctx c2;
    memset(&c2, 0, sizeof c2);
    pthread_t th[4];
    struct caller cl[4];
    for (int i = 0; i < 4; i++) {
        cl[i] = (struct caller){p, &c2, 250};
        assert_int_equal(pthread_create(&th[i], NULL, caller_thread, &cl[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 250; i++)
        assert_int_equal(atomic_load(&c2.hits[i]), 4 * 20);
    assert_true(atomic_load(&c2.max_running) <= 3);
    bdb_pool_free(p);

    /* fewer than one worker asked: one */
    p = bdb_pool_new(0);
    assert_int_equal(bdb_pool_workers(p), 1);
    memset(&c, 0, sizeof c);
    bdb_pool_run(p, pool_fn, &c, 10);
    assert_int_equal(atomic_load(&c.sum), 45);
    assert_int_equal(atomic_load(&c.max_running), 1);
    bdb_pool_free(p);
    bdb_pool_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_full_range_asc_desc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sub_ranges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limit_stops_early, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metric_subsets_and_ties, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callback_stops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_across_bucket_change, setup, teardown),
        cmocka_unit_test(test_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
