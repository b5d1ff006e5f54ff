/* pql_cache over a real embedded engine: range queries answered with their settled
 * steps kept equal, to the last bit, the whole range evaluated at once (an aggregation
 * over devices from the tiers, a rate of raw samples, arithmetic), from the second
 * miss on kept and from the third query on answered from the kept steps; a late sample
 * in a kept step and a new device each make the next query evaluate again; what is
 * never kept: a negative offset, one device's windows (as cheap to read as to decode),
 * an instant query, a range with no settled step. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/rcache.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "query/promql/pql_cache.h"
#include "query/promql/pql_parse.h"
#include "query/promql/pql_source_db.h"
#include "storage/embedded/core/db.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN 60000LL
#define HOUR 3600000LL

static long long T0; /* two days ago at midnight: settled, inside every tier */
static char tmpdir[64];
static bdb_db *db;
static bdb_rcache *cache;
static int64_t now_ms; /* the queries' now */

/* Devices p0..p5 (site a: p0..p3, site b: p4, p5), env.temp every 10 s for 4 hours. */
static void put_devices(int from, int to, int64_t t0, int n)
{
    bdb_batch *b = bdb_batch_new();
    for (int d = from; d < to; d++) {
        char dev[16];
        snprintf(dev, sizeof dev, "p%d", d);
        for (int i = 0; i < n; i++) {
            bdb_batch_begin(b, dev, strlen(dev), t0 + i * 10000LL + d * 7, (size_t)i);
            bdb_batch_tag(b, "site", 4, d < 4 || d > 5 ? "a" : "b", 1);
            bdb_batch_metric(b, "env.temp", 8, 10 + d + (i * 7 % 13) * 0.25);
            assert_int_equal(bdb_batch_end(b), 1);
        }
    }
    assert_int_equal(bdb_db_write(db, "t", b), BDB_OK);
    bdb_batch_free(b);
}

static int setup(void **state)
{
    (void)state;
    bdb_log_set_level(BDB_LOG_ERROR + 1);
    T0 = (bdb_now_ms() / 86400000 - 2) * 86400000;
    strcpy(tmpdir, "/tmp/bdb-pqlc-XXXXXX");
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
    put_devices(0, 6, T0, 4 * 360);
    now_ms = T0 + 6 * HOUR;
    cache = bdb_rcache_new(1 << 20);
    return cache ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    bdb_rcache_free(cache);
    bdb_db_close(db);
    tu_rm_rf(tmpdir);
    return 0;
}

/* q over [start, end] at step, with the cache (c) or without (NULL). */
static pql_result run(const char *q, int64_t start, int64_t end, int64_t step, bdb_rcache *c)
{
    pql_node *expr;
    char err[400];
    if (pql_parse(q, strlen(q), &expr, err, sizeof err) != 0)
        fail_msg("%s: %s", q, err);
    pql_db_source ctx = {.db = db, .tenant = "t", .tier_oldest = {INT64_MIN, INT64_MIN, INT64_MIN}};
    pql_source src;
    pql_db_source_init(&src, &ctx);
    pql_eval_opts o = {.start = start, .end = end, .step = step, .max_samples = 1000000};
    pql_cache_ctx cc = {c, db, "t", q, now_ms};
    pql_result r;
    int rc = pql_eval_cached(expr, &src, &o, &cc, &r, err, sizeof err);
    pql_free(expr);
    if (rc != PQL_E_OK)
        fail_msg("%s: %s", q, err);
    return r;
}

static void same_bits(const pql_result *a, const pql_result *b)
{
    assert_int_equal(a->type, b->type);
    assert_int_equal(a->nsteps, b->nsteps);
    assert_int_equal(a->start, b->start);
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->tier_ms, b->tier_ms);
    if (a->type == PQL_SCALAR)
        assert_memory_equal(a->scalar, b->scalar, a->nsteps * sizeof *a->scalar);
    for (size_t i = 0; i < a->n; i++) {
        assert_int_equal(pql_labels_cmp(&a->s[i].labels, &b->s[i].labels), 0);
        assert_memory_equal(a->s[i].has, b->s[i].has, a->nsteps);
        for (size_t k = 0; k < a->nsteps; k++)
            if (a->s[i].has[k])
                assert_memory_equal(&a->s[i].v[k], &b->s[i].v[k], sizeof(double));
    }
}

static bdb_rcache_stats stats(void)
{
    bdb_rcache_stats st;
    bdb_rcache_stats_get(cache, &st);
    return st;
}

/* Asks q three times with the cache, each answer the uncached one's; returns the
 * number of those asked from kept steps. */
static uint64_t thrice(const char *q, int64_t start, int64_t end, int64_t step)
{
    pql_result want = run(q, start, end, step, NULL);
    assert_true(want.nsteps > 2);
    uint64_t h = stats().hits;
    for (int i = 0; i < 3; i++) {
        pql_result got = run(q, start, end, step, cache);
        same_bits(&want, &got);
        pql_result_free(&got);
    }
    pql_result_free(&want);
    return stats().hits - h;
}

static void test_kept_steps_answer_alike(void **state)
{
    (void)state;
    /* settled: steps up to now - 5 min = T0 + 5h55m, all of them here */
    assert_int_equal(
        thrice("avg(avg_over_time(env_temp{site=\"a\"}[10m]))", T0 + HOUR, T0 + 4 * HOUR, 10 * MIN),
        1);
    assert_int_equal(
        thrice("sum by (site) (rate(env_temp[5m]))", T0 + 20 * MIN, T0 + 3 * HOUR + 7000, 5 * MIN),
        1);
    assert_int_equal(thrice("count(env_temp) * 2", T0 + 10 * MIN, T0 + 2 * HOUR, MIN), 1);
    /* never kept: a negative offset, one device's windows, no settled step */
    uint64_t entries = stats().entries;
    assert_int_equal(
        thrice("avg(avg_over_time(env_temp[10m] offset -10m))", T0 + HOUR, T0 + 2 * HOUR, 10 * MIN),
        0);
    assert_int_equal(
        thrice("avg_over_time(env_temp{device=\"p1\"}[1h])", T0 + HOUR, T0 + 4 * HOUR, HOUR), 0);
    assert_int_equal(thrice("avg(avg_over_time(env_temp[10m]))", T0 + 5 * HOUR + 58 * MIN,
                            T0 + 7 * HOUR, 10 * MIN),
                     0);
    assert_int_equal(stats().entries, entries);
}

/* A range whose end is past the settled horizon (now - 5 min = T0 + 2h55m): the
 * kept steps to T0 + 2h50m, the rest evaluated on each hit. */
static void test_unsettled_rest(void **state)
{
    (void)state;
    now_ms = T0 + 3 * HOUR;
    assert_int_equal(
        thrice("max(max_over_time(env_temp[10m]))", T0 + HOUR, T0 + 4 * HOUR + 5000, 10 * MIN), 1);
    assert_int_equal(
        thrice("sum by (site) (rate(env_temp[5m]))", T0 + 37000, T0 + 4 * HOUR + 37000, 5 * MIN),
        1);
    now_ms = T0 + 6 * HOUR;
}

/* A late sample in a kept step, then a new device of site a: the next query
 * evaluates again and sees each. */
static void test_changes_show(void **state)
{
    (void)state;
    const char *q = "max(max_over_time(env_temp{site=\"a\"}[10m]))";
    assert_int_equal(thrice(q, T0 + HOUR, T0 + 4 * HOUR, 10 * MIN), 1);
    uint64_t m = stats().misses;
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, "p1", 2, T0 + 2 * HOUR - 3000, 0);
    bdb_batch_tag(b, "site", 4, "a", 1);
    bdb_batch_metric(b, "env.temp", 8, 1000);
    assert_int_equal(bdb_batch_end(b), 1);
    assert_int_equal(bdb_db_write(db, "t", b), BDB_OK);
    bdb_batch_free(b);
    pql_result r = run(q, T0 + HOUR, T0 + 4 * HOUR, 10 * MIN, cache);
    assert_int_equal(stats().misses, m + 1);
    assert_true(r.n == 1 && r.s[0].has[6] && r.s[0].v[6] == 1000);
    pql_result_free(&r);
    /* that miss was the new key's first: the next keeps it, the two after hit */
    assert_int_equal(thrice(q, T0 + HOUR, T0 + 4 * HOUR, 10 * MIN), 2);
    /* p6 (site a) with samples of 3 hours ago at 2000: written late, and new */
    put_devices(6, 7, T0 + 2 * HOUR, 30);
    r = run(q, T0 + HOUR, T0 + 4 * HOUR, 10 * MIN, cache);
    assert_true(r.s[0].has[7] && r.s[0].v[7] > 16 && r.s[0].v[7] < 1000);
    pql_result_free(&r);
    assert_int_equal(thrice(q, T0 + HOUR, T0 + 4 * HOUR, 10 * MIN), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_steps_answer_alike),
        cmocka_unit_test(test_unsettled_rest),
        cmocka_unit_test(test_changes_show),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
