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
static int64_t now_ms;    /* the queries' and the engine's now */
static int64_t ttl_ms;    /* the tenant's raw retention (0: forever) */
static int64_t oldest[3]; /* the 1m, 1h, 1d tiers' coverage (pql_db_source) */
static uint64_t max_samples = 1000000;

static int64_t clock_fn(void *ctx)
{
    (void)ctx;
    return now_ms;
}

static int64_t ttl_fn(void *ctx, const char *tenant)
{
    (void)ctx, (void)tenant;
    return ttl_ms;
}

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
    o.clock = (bdb_clock){clock_fn, NULL};
    o.tenant_retention = ttl_fn;
    now_ms = T0 + 6 * HOUR;
    oldest[0] = oldest[1] = oldest[2] = INT64_MIN;
    if (bdb_db_open(&o, &db) != BDB_OK)
        return -1;
    put_devices(0, 6, T0, 4 * 360);
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

/* q over [start, end] at step, with the cache (c) or without (NULL): its code, with
 * *r filled when it is PQL_E_OK (err: the message otherwise). */
static int eval_q(const char *q, int64_t start, int64_t end, int64_t step, bdb_rcache *c,
                  pql_result *r, char *err, size_t errlen)
{
    pql_node *expr;
    if (pql_parse(q, strlen(q), &expr, err, errlen) != 0)
        fail_msg("%s: %s", q, err);
    pql_db_source ctx = {.db = db, .tenant = "t", .tier_oldest = {oldest[0], oldest[1], oldest[2]}};
    pql_source src;
    pql_db_source_init(&src, &ctx);
    pql_eval_opts o = {.start = start, .end = end, .step = step, .max_samples = max_samples};
    pql_cache_ctx cc = {c, db, "t", q, now_ms, ctx.tier_oldest};
    int rc = pql_eval_cached(expr, &src, &o, &cc, r, err, errlen);
    pql_free(expr);
    return rc;
}

/* The answer of q, which must succeed. */
static pql_result run(const char *q, int64_t start, int64_t end, int64_t step, bdb_rcache *c)
{
    char err[400];
    pql_result r;
    if (eval_q(q, start, end, step, c, &r, err, sizeof err) != PQL_E_OK)
        fail_msg("%s: %s", q, err);
    return r;
}

/* The code of q, for a query that may fail. */
static int run_err(const char *q, int64_t start, int64_t end, int64_t step, bdb_rcache *c)
{
    char err[400];
    pql_result r;
    int rc = eval_q(q, start, end, step, c, &r, err, sizeof err);
    if (rc == PQL_E_OK)
        pql_result_free(&r);
    return rc;
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

/* The raw retention cutoff moves with the clock: a query whose reads reach it is
 * neither kept nor answered from kept steps (the cut would differ), and answers as
 * the whole range. */
static void test_retention_cutoff(void **state)
{
    (void)state;
    const char *q = "sum(count_over_time(env_temp[450s]))"; /* raw: no tier of 7.5 m */
    int64_t a = T0 + HOUR + 10 * MIN, b = T0 + 3 * HOUR;
    ttl_ms = now_ms - (T0 + HOUR); /* the cutoff at T0 + 1 h: reads start at T0 + 1h02m30s */
    assert_int_equal(bdb_db_flush(db), BDB_OK); /* blocks: reads cut at the cutoff */
    assert_int_equal(thrice(q, a, b, 10 * MIN), 1);
    pql_result before = run(q, a, b, 10 * MIN, NULL);
    now_ms += 15 * MIN; /* the cutoff at T0 + 1h15m: the first steps lose samples */
    pql_result want = run(q, a, b, 10 * MIN, NULL), got = run(q, a, b, 10 * MIN, cache);
    same_bits(&want, &got); /* the kept steps found and left: they read before the cutoff */
    assert_true(want.s[0].v[0] < before.s[0].v[0]);
    pql_result_free(&before);
    pql_result_free(&want);
    pql_result_free(&got);
    thrice(q, a, b, 10 * MIN); /* each time the whole range's answer */
    /* windows from the tiers are not cut: such a query is kept past the cutoff */
    assert_int_equal(thrice("sum(count_over_time(env_temp[10m]))", a, b, 10 * MIN), 1);
    now_ms -= 15 * MIN;
    ttl_ms = 0;
}

/* The tiers' coverage decides between a tier and raw samples (a sample on a minute
 * boundary counts in one step from raw, the next from the tier): kept steps are the
 * whole range's choice, also for the rest of a hit and after the coverage moves. */
static void test_tier_coverage(void **state)
{
    (void)state;
    const char *q = "sum(count_over_time(env_temp[10m]))";
    int64_t a = T0 + HOUR, b = T0 + 3 * HOUR;
    now_ms = T0 + 2 * HOUR; /* settled up to T0 + 1h55m: a rest on every hit */
    assert_int_equal(thrice(q, a, b, 10 * MIN), 1);
    pql_result tier = run(q, a, b, 10 * MIN, NULL);
    assert_int_equal(tier.tier_ms, MIN);
    /* the 1m tier no longer covers the start: raw for the whole range, and the rest */
    oldest[0] = T0 + HOUR + 30 * MIN;
    assert_int_equal(thrice(q, a, b, 10 * MIN), 1);
    pql_result raw = run(q, a, b, 10 * MIN, NULL);
    assert_int_equal(raw.tier_ms, 0);
    int differ = 0;
    for (size_t k = 0; k < raw.nsteps; k++)
        differ |= raw.s[0].v[k] != tier.s[0].v[k];
    assert_true(differ); /* the test can tell the two apart */
    pql_result_free(&raw);
    pql_result_free(&tier);
    oldest[0] = INT64_MIN;
    now_ms = T0 + 6 * HOUR;
}

/* max_query_samples: the rest's reads count after the kept part's; samples written
 * since into the rest's steps (on time: no settled version moves) take the query over
 * the limit from kept steps as from the whole range. */
static void test_limit_counts_kept_part(void **state)
{
    (void)state;
    const char *q = "sum(rate(env_temp[5m]))";
    int64_t a = T0 + 10 * MIN, b = T0 + 5 * HOUR;
    now_ms = T0 + 4 * HOUR; /* the rest: T0 + 3h55m on, no data yet */
    max_samples = 1;
    while (run_err(q, a, b, 5 * MIN, NULL) != PQL_E_OK) {
        max_samples++;
        assert_true(max_samples < 10000000);
    }
    assert_int_equal(thrice(q, a, b, 5 * MIN), 1);
    /* five more reports of each device in the last minute: not settled, no new device */
    uint64_t cat0[2], cat1[2];
    assert_int_equal(bdb_db_catalog_version(db, "t", cat0), BDB_OK);
    put_devices(0, 6, T0 + 4 * HOUR - 55000, 5);
    assert_int_equal(bdb_db_catalog_version(db, "t", cat1), BDB_OK);
    assert_memory_equal(cat0, cat1, sizeof cat0);
    assert_int_equal(run_err(q, a, b, 5 * MIN, NULL), PQL_E_EXECUTION);
    uint64_t h = stats().hits;
    assert_int_equal(run_err(q, a, b, 5 * MIN, cache), PQL_E_EXECUTION);
    assert_int_equal(stats().hits, h + 1); /* from the kept steps, and still refused */
    max_samples = 1000000;
    now_ms = T0 + 6 * HOUR;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_steps_answer_alike),
        cmocka_unit_test(test_unsettled_rest),
        cmocka_unit_test(test_changes_show),
        cmocka_unit_test(test_retention_cutoff),
        cmocka_unit_test(test_tier_coverage),
        cmocka_unit_test(test_limit_counts_kept_part),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
