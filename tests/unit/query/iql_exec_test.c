/* iql_exec over a real embedded engine: the metric-to-measurement mapping (m.f and a
 * plain metric), SHOW answers, time bounds rounded to milliseconds the way InfluxDB's
 * nanosecond bounds select samples, the ns lower bound dating windows, fill, the
 * point limit, errors for what is not supported, and the tier rule (which tier and
 * when raw) with tier answers equal to raw ones. Equality with InfluxDB itself is
 * tests/integration/test_influxql.py. */
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
#include "query/influxql/iql.h"
#include "query/influxql/iql_exec.h"
#include "query/influxql/iql_tier.h"
#include "storage/embedded/core/db.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN 60000LL
#define HOUR 3600000LL
/* Two days ago at midnight: the tiers drop windows older than their retention (90
 * days for 1m) against the wall clock, so the data must be recent. */
static long long T0;

static char tmpdir[64];
static bdb_db *db;

/* d1 (site a) and d2 (site b): env.temp and env.hum every 10 s for 2 hours, and the
 * plain metric power every minute; temp of d1 is i % 10, of d2 100 + i % 10. */
static int setup(void **state)
{
    (void)state;
    bdb_log_set_level(BDB_LOG_ERROR + 1);
    T0 = (bdb_now_ms() / 86400000 - 2) * 86400000;
    strcpy(tmpdir, "/tmp/bdb-iql-XXXXXX");
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
    bdb_batch *b = bdb_batch_new();
    for (int d = 1; d <= 2; d++) {
        char dev[16];
        snprintf(dev, sizeof dev, "d%d", d);
        for (int i = 0; i < 720; i++) {
            bdb_batch_begin(b, dev, 2, T0 + i * 10000LL, (size_t)i);
            bdb_batch_tag(b, "site", 4, d == 1 ? "a" : "b", 1);
            bdb_batch_metric(b, "env.temp", 8, (d == 2 ? 100 : 0) + i % 10);
            bdb_batch_metric(b, "env.hum", 7, 50.5);
            if (i % 6 == 0)
                bdb_batch_metric(b, "power", 5, i);
            if (bdb_batch_end(b) != 1)
                return -1;
        }
    }
    int rc = bdb_db_write(db, "t", b);
    bdb_batch_free(b);
    return rc == BDB_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    bdb_db_close(db);
    tu_rm_rf(tmpdir);
    return 0;
}

static int64_t keep_1m;    /* the 1m tier's retention for run() (0: forever) */
static bdb_rcache *groups; /* the group cache run() passes (NULL: none) */

static iql_result run(const char *q, uint64_t max)
{
    static const char *const dbs[] = {"t"};
    iql_ctx c = {.db = db,
                 .tenant = "t",
                 .device_tag = "device",
                 .now_ms = T0 + 3 * HOUR,
                 .max_points = max ? max : 1000000,
                 .databases = dbs,
                 .ndatabases = 1,
                 .tier_keep_ms = {0, keep_1m, 0, 0},
                 .groups = groups};
    char err[600];
    iql_query pq;
    if (iql_parse(q, strlen(q), &pq, err, sizeof err) != 0)
        fail_msg("%s: %s", q, err);
    iql_result r;
    iql_exec(&c, &pq.stmts[0], &r);
    iql_free(&pq);
    return r;
}

static const iql_val *cell(const iql_result *r, size_t s, size_t row, size_t col)
{
    assert_true(s < r->nseries);
    assert_true(row < r->series[s].nrows);
    assert_true(col < r->series[s].ncols);
    return &r->series[s].vals[row * r->series[s].ncols + col];
}

static void test_mapping_and_show(void **state)
{
    (void)state;
    iql_result r = run("SHOW MEASUREMENTS", 0);
    assert_null(r.error);
    assert_int_equal(r.series[0].nrows, 2);
    assert_string_equal(cell(&r, 0, 0, 0)->s, "env");
    assert_string_equal(cell(&r, 0, 1, 0)->s, "power");
    iql_result_free(&r);
    r = run("SHOW FIELD KEYS", 0);
    assert_int_equal(r.nseries, 2);
    assert_string_equal(cell(&r, 0, 0, 0)->s, "hum");
    assert_string_equal(cell(&r, 0, 1, 0)->s, "temp");
    assert_string_equal(cell(&r, 1, 0, 0)->s, "value"); /* power: field value */
    iql_result_free(&r);
    r = run("SHOW TAG VALUES FROM power WITH KEY =~ /^(device|site)$/ WHERE site = 'b'", 0);
    assert_int_equal(r.series[0].nrows, 2);
    assert_string_equal(cell(&r, 0, 0, 1)->s, "d2");
    assert_string_equal(cell(&r, 0, 1, 1)->s, "b");
    iql_result_free(&r);
    r = run("SHOW SERIES WHERE device = 'd1'", 0);
    assert_int_equal(r.series[0].nrows, 2);
    assert_string_equal(cell(&r, 0, 0, 0)->s, "env,device=d1,site=a");
    iql_result_free(&r);
    r = run("SHOW DATABASES", 0);
    assert_string_equal(cell(&r, 0, 0, 0)->s, "t");
    iql_result_free(&r);
}

static void test_time_bounds(void **state)
{
    (void)state;
    /* time > T0 + 10 s - 2 ns: the sample at T0 + 10 s is in, and the answer is dated
     * at the bound plus 1 ns, which lies in the millisecond before */
    char q[300];
    snprintf(q, sizeof q,
             "SELECT count(temp), first(temp) FROM env WHERE device = 'd1' AND time > %lld "
             "AND time <= %lldms",
             (T0 + 10000) * 1000000 - 2, T0 + 30000);
    iql_result r = run(q, 0);
    assert_null(r.error);
    assert_int_equal(cell(&r, 0, 0, 0)->i, T0 + 9999);
    assert_int_equal(cell(&r, 0, 0, 1)->i, 3); /* 10 s, 20 s, 30 s */
    assert_true(cell(&r, 0, 0, 2)->num == 1);
    iql_result_free(&r);
    /* a selector alone is dated at its sample */
    snprintf(q, sizeof q, "SELECT max(temp) FROM env WHERE time >= %lldms AND time < %lldms", T0,
             T0 + MIN);
    r = run(q, 0);
    assert_true(cell(&r, 0, 0, 1)->num == 105);
    assert_int_equal(cell(&r, 0, 0, 0)->i, T0 + 50000);
    iql_result_free(&r);
    r = run("SELECT temp FROM env WHERE time > now() - 1h OR time < now() - 2h", 0);
    assert_non_null(strstr(r.error, "joined by OR"));
    iql_result_free(&r);
    r = run("SHOW SERIES WHERE temp > 3", 0);
    assert_non_null(strstr(r.error, "conditions on field values"));
    iql_result_free(&r);
    /* a field condition filters rows: temp of d1 cycles 0..9 every 10 samples */
    r = run("SELECT count(temp), max(hum) FROM env WHERE device = 'd1' AND temp >= 7", 0);
    assert_null(r.error);
    assert_string_equal(r.tier, "raw");
    assert_int_equal(cell(&r, 0, 0, 1)->i, 216);
    iql_result_free(&r);
    r = run("SELECT count(temp) FROM env WHERE 3 > temp OR site = 'b'", 0);
    assert_int_equal(cell(&r, 0, 0, 1)->i, 216 + 720);
    iql_result_free(&r);
}

static void test_fill_and_limits(void **state)
{
    (void)state;
    char q[300];
    /* windows before the data: fill(null) gives null, count 0; fill(-1) the value */
    snprintf(q, sizeof q,
             "SELECT mean(temp), count(temp) FROM env WHERE device = 'd1' AND time >= %lldms "
             "AND time < %lldms GROUP BY time(30m) fill(null)",
             T0 - HOUR, T0 + HOUR);
    iql_result r = run(q, 0);
    assert_int_equal(r.series[0].nrows, 4);
    assert_int_equal(cell(&r, 0, 0, 1)->t, IQL_V_NULL);
    assert_int_equal(cell(&r, 0, 0, 2)->t, IQL_V_INT);
    assert_int_equal(cell(&r, 0, 0, 2)->i, 0);
    assert_true(cell(&r, 0, 2, 1)->num == 4.5);
    iql_result_free(&r);
    snprintf(q, sizeof q,
             "SELECT mean(temp) FROM env WHERE time >= %lldms AND time < %lldms GROUP BY "
             "time(30m), site fill(none) ORDER BY time DESC LIMIT 1 SLIMIT 1 SOFFSET 1",
             T0 - HOUR, T0 + HOUR);
    r = run(q, 0);
    assert_int_equal(r.nseries, 1);
    assert_string_equal(r.series[0].tagv[0], "a"); /* DESC: series backwards too */
    assert_int_equal(r.series[0].nrows, 1);
    assert_int_equal(cell(&r, 0, 0, 0)->i, T0 + 30 * MIN);
    iql_result_free(&r);
    /* the point limit: 1,440 samples of temp with a limit of 1,000 */
    r = run("SELECT temp FROM env", 1000);
    assert_non_null(strstr(r.error, "max-select-point limit exceeded"));
    assert_int_equal(r.nseries, 0);
    iql_result_free(&r);
    r = run("SELECT temp FROM env", 1440);
    assert_null(r.error);
    iql_result_free(&r);
}

/* The rows of a and b alike: numbers within rel (relative), or to the last bit when
 * rel is 0. */
static void same_vals(const iql_result *a, const iql_result *b, double rel)
{
    assert_int_equal(a->nseries, b->nseries);
    for (size_t s = 0; s < a->nseries; s++) {
        assert_int_equal(a->series[s].nrows, b->series[s].nrows);
        for (size_t i = 0; i < a->series[s].nrows * a->series[s].ncols; i++) {
            const iql_val *x = &a->series[s].vals[i], *y = &b->series[s].vals[i];
            assert_int_equal(x->t, y->t);
            if (x->t != IQL_V_NUM)
                assert_int_equal(x->i, y->i);
            else if (rel > 0)
                assert_true(fabs(x->num - y->num) <= rel * fabs(x->num) + 1e-12);
            else
                assert_memory_equal(&x->num, &y->num, sizeof x->num);
        }
    }
}

/* The same statement from raw and from a tier gives the same rows. */
static void same_rows(const iql_result *a, const iql_result *b)
{
    same_vals(a, b, 1e-9);
}

static void test_tier_rule(void **state)
{
    (void)state;
    char q[400];
    const char *fns = "count(temp), mean(temp), min(temp), max(temp), spread(temp), "
                      "stddev(temp), sum(hum)";
    /* 10m over an unaligned range: the 1m tier, edges from raw; same as 10m with an
     * offset of 10 s, which no tier divides (raw) */
    snprintf(q, sizeof q,
             "SELECT %s FROM env WHERE site = 'a' AND time >= %lldms AND time < %lldms GROUP BY "
             "time(10m)",
             fns, T0 + 37000, T0 + 2 * HOUR - 13000);
    iql_result tier = run(q, 0);
    assert_null(tier.error);
    assert_string_equal(tier.tier, "1m");
    snprintf(q, sizeof q,
             "SELECT %s FROM env WHERE site = 'a' AND time >= %lldms AND time < %lldms GROUP BY "
             "time(10m, 10s)",
             fns, T0 + 37000, T0 + 2 * HOUR - 13000);
    iql_result raw = run(q, 0);
    assert_string_equal(raw.tier, "raw");
    iql_result_free(&raw);
    /* the tier's answer equals raw's: first() is never a tier's, so adding it makes
     * the same windows come from raw */
    snprintf(q, sizeof q,
             "SELECT %s, first(hum) FROM env WHERE site = 'a' AND time >= %lldms AND time < "
             "%lldms GROUP BY time(10m)",
             fns, T0 + 37000, T0 + 2 * HOUR - 13000);
    raw = run(q, 0);
    assert_string_equal(raw.tier, "raw");
    for (size_t i = 0; i < raw.series[0].nrows; i++)
        for (size_t k = 0; k < tier.series[0].ncols; k++) {
            const iql_val *x = cell(&raw, 0, i, k), *y = cell(&tier, 0, i, k);
            assert_int_equal(x->t, y->t);
            if (x->t == IQL_V_NUM)
                assert_true(fabs(x->num - y->num) <= 1e-9 * fabs(x->num) + 1e-12);
            else
                assert_int_equal(x->i, y->i);
        }
    iql_result_free(&raw);
    /* GROUP BY time(1h) over both devices, no tag condition: the fleet tables */
    snprintf(q, sizeof q,
             "SELECT %s FROM env WHERE time >= %lldms AND time < %lldms GROUP BY time(1h)", fns, T0,
             T0 + 2 * HOUR);
    iql_result fleet = run(q, 0);
    assert_string_equal(fleet.tier, "fleet");
    snprintf(q, sizeof q,
             "SELECT %s FROM env WHERE time >= %lldms AND time < %lldms GROUP BY time(60m, 60m)",
             fns, T0, T0 + 2 * HOUR);
    iql_result fleet2 = run(q, 0); /* an offset of a whole window: still the tables */
    same_rows(&fleet, &fleet2);
    iql_result_free(&fleet2);
    snprintf(q, sizeof q,
             "SELECT %s FROM env WHERE time >= %lldms AND time < %lldms GROUP BY time(1h, 1ms)",
             fns, T0, T0 + 2 * HOUR);
    raw = run(q, 0);
    assert_string_equal(raw.tier, "raw");
    iql_result_free(&raw);
    iql_result_free(&fleet);
    /* a 1m tier that keeps one hour (now is T0 + 3 h) has dropped the range: raw */
    snprintf(q, sizeof q,
             "SELECT %s FROM env WHERE site = 'a' AND time >= %lldms AND time < %lldms GROUP BY "
             "time(10m)",
             fns, T0 + 37000, T0 + 2 * HOUR - 13000);
    keep_1m = HOUR;
    raw = run(q, 0);
    keep_1m = 0;
    assert_string_equal(raw.tier, "raw");
    same_rows(&raw, &tier);
    iql_result_free(&raw);
    iql_result_free(&tier);
    /* percentiles: the sketch only where InfluxDB's rank is the sketch's (360 samples:
     * yes for 95; an hour of one device), else raw */
    snprintf(q, sizeof q,
             "SELECT percentile(temp, 95) FROM env WHERE time >= %lldms AND time < %lldms GROUP "
             "BY time(1h), device",
             T0, T0 + 2 * HOUR);
    tier = run(q, 0);
    assert_string_equal(tier.tier, "1h");
    assert_true(fabs(cell(&tier, 0, 0, 1)->num - 9) <= 0.09);
    iql_result_free(&tier);
    snprintf(q, sizeof q,
             "SELECT median(temp) FROM env WHERE time >= %lldms AND time < %lldms GROUP BY "
             "time(1h), device",
             T0, T0 + 2 * HOUR);
    raw = run(q, 0); /* 360 samples: an even count */
    assert_string_equal(raw.tier, "raw");
    assert_true(cell(&raw, 0, 0, 1)->num == 4.5);
    iql_result_free(&raw);
}

/* A range ending inside an hour the device's newest sample does not reach: the hour
 * comes whole from the 1h tier. A write of a later sample between the read and the
 * check that follows it (iql_tier_test_hook, as a concurrent write would) sends the
 * end edge to the minutes and raw: the answer is still raw's, the later sample out. */
/* b's columns equal a's first ones, row by row (a may have more). */
static void same_prefix(const iql_result *a, const iql_result *b)
{
    assert_int_equal(a->nseries, b->nseries);
    for (size_t s = 0; s < a->nseries; s++) {
        const iql_series *x = &a->series[s], *y = &b->series[s];
        assert_int_equal(x->nrows, y->nrows);
        for (size_t i = 0; i < x->nrows; i++)
            for (size_t k = 0; k < y->ncols; k++) {
                const iql_val *u = &x->vals[i * x->ncols + k], *v = &y->vals[i * y->ncols + k];
                assert_int_equal(u->t, v->t);
                if (u->t == IQL_V_NUM)
                    assert_true(fabs(u->num - v->num) <= 1e-9 * fabs(u->num) + 1e-12);
                else
                    assert_int_equal(u->i, v->i);
            }
    }
}

static int hook_calls;
static void write_later(const iql_ctx *c, const char *device)
{
    (void)c;
    if (strcmp(device, "d9") || hook_calls++)
        return;
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, "d9", 2, T0 + 2 * HOUR - 3000, 0);
    bdb_batch_metric(b, "env.temp", 8, 1e6);
    assert_int_equal(bdb_batch_end(b), 1);
    assert_int_equal(bdb_db_write(db, "t", b), BDB_OK);
    bdb_batch_free(b);
}

static void test_open_end_race(void **state)
{
    (void)state;
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < 720; i++) {
        bdb_batch_begin(b, "d9", 2, T0 + i * 10000LL, (size_t)i);
        bdb_batch_tag(b, "site", 4, "z", 1);
        bdb_batch_metric(b, "env.temp", 8, i % 13);
        assert_int_equal(bdb_batch_end(b), 1);
    }
    assert_int_equal(bdb_db_write(db, "t", b), BDB_OK);
    bdb_batch_free(b);
    char q[400], qr[400];
    /* the newest sample is T0 + 2 h - 10 s, before the end */
    snprintf(q, sizeof q,
             "SELECT count(temp), mean(temp), max(temp) FROM env WHERE device = 'd9' AND time >= "
             "%lldms AND time < %lldms GROUP BY time(1h)",
             T0 - 37000, T0 + 2 * HOUR - 5000);
    snprintf(qr, sizeof qr,
             "SELECT count(temp), mean(temp), max(temp), first(temp) FROM env WHERE device = 'd9' "
             "AND time >= %lldms AND time < %lldms GROUP BY time(1h)",
             T0 - 37000, T0 + 2 * HOUR - 5000);
    iql_result raw = run(qr, 0);
    assert_string_equal(raw.tier, "raw");
    assert_int_equal(raw.nseries, 1);
    assert_int_equal(raw.series[0].nrows, 3);
    iql_result whole = run(q, 0);
    assert_string_equal(whole.tier, "1h");
    same_prefix(&raw, &whole);
    iql_result_free(&whole);
    iql_tier_test_hook = write_later;
    iql_result raced = run(q, 0);
    iql_tier_test_hook = NULL;
    assert_int_equal(hook_calls, 1);
    assert_string_equal(raced.tier, "1h");
    same_prefix(&raw, &raced); /* all of the second hour but the later sample */
    iql_result_free(&raced);
    iql_result_free(&raw);
}

/* Tier windows of several devices, groups and fields land in their own output windows
 * (merged as they are read): GROUP BY device over both devices, two fields, an
 * unaligned range whose edges come from raw, fill(none) after the data ends, against
 * the same statement answered from raw. */
static void test_tier_groups(void **state)
{
    (void)state;
    char q[500];
    const char *fns = "count(temp), mean(temp), stddev(hum), max(temp), sum(hum), spread(temp)";
    const char *range = "time >= %lldms AND time < %lldms GROUP BY time(10m%s), device";
    char where[160];
    snprintf(where, sizeof where, range, T0 + 37000, T0 + 3 * HOUR - 13000, "");
    snprintf(q, sizeof q, "SELECT %s FROM env WHERE %s fill(none)", fns, where);
    iql_result tier = run(q, 0);
    assert_null(tier.error);
    assert_string_equal(tier.tier, "1m");
    assert_int_equal(tier.nseries, 2);
    /* first(hum) is never a tier's: the same windows from raw */
    snprintf(q, sizeof q, "SELECT %s, first(hum) FROM env WHERE %s fill(none)", fns, where);
    iql_result raw = run(q, 0);
    assert_string_equal(raw.tier, "raw");
    assert_int_equal(raw.nseries, tier.nseries);
    for (size_t g = 0; g < raw.nseries; g++) {
        assert_int_equal(raw.series[g].nrows, tier.series[g].nrows);
        assert_int_equal(raw.series[g].nrows, 12); /* 2 h of data, no row after it */
        for (size_t i = 0; i < raw.series[g].nrows; i++)
            for (size_t k = 0; k < tier.series[g].ncols; k++) {
                const iql_val *x = cell(&raw, g, i, k), *y = cell(&tier, g, i, k);
                assert_int_equal(x->t, y->t);
                if (x->t == IQL_V_NUM)
                    assert_true(fabs(x->num - y->num) <= 1e-9 * fabs(x->num) + 1e-12);
                else
                    assert_int_equal(x->i, y->i);
            }
    }
    /* d2's temp is 100 + i % 10: its mean is not d1's */
    assert_true(cell(&tier, 1, 3, 2)->num > 100);
    assert_true(cell(&tier, 0, 3, 2)->num < 10);
    iql_result_free(&raw);
    iql_result_free(&tier);
}

/* A statement pinned to one device (WHERE device = 'x') answers as with every device
 * listed: compared with the same statement selecting the device by a regex. d3 has
 * temp only: hum is still a field of env (d1's and d2's), so count(hum) is 0, not
 * null, in d3's windows. Runs last: it adds d3. */
static void test_one_device(void **state)
{
    (void)state;
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < 30; i++) {
        bdb_batch_begin(b, "d3", 2, T0 + i * 60000LL, (size_t)i);
        bdb_batch_metric(b, "env.temp", 8, 7.5);
        assert_int_equal(bdb_batch_end(b), 1);
    }
    assert_int_equal(bdb_db_write(db, "t", b), BDB_OK);
    bdb_batch_free(b);
    const char *stmts[] = {
        "SELECT count(hum), count(temp) FROM env WHERE %s AND time >= %lldms AND time < %lldms "
        "GROUP BY time(10m)",
        "SELECT mean(temp), max(hum) FROM env WHERE %s AND time >= %lldms AND time < %lldms "
        "GROUP BY time(10m) fill(none)",
        "SELECT max(temp) FROM env WHERE %s AND time >= %lldms AND time < %lldms"};
    const char *devs[] = {"d3", "d1", "nope"};
    for (size_t k = 0; k < 3; k++)
        for (size_t d = 0; d < 3; d++) {
            char q[400], w[64];
            snprintf(w, sizeof w, "device = '%s'", devs[d]);
            snprintf(q, sizeof q, stmts[k], w, T0, T0 + HOUR);
            iql_result one = run(q, 0);
            snprintf(w, sizeof w, "device =~ /^%s$/", devs[d]);
            snprintf(q, sizeof q, stmts[k], w, T0, T0 + HOUR);
            iql_result all = run(q, 0);
            assert_null(one.error);
            assert_null(all.error);
            same_rows(&all, &one);
            if (d == 2)
                assert_int_equal(one.nseries, 0);
            iql_result_free(&one);
            iql_result_free(&all);
        }
    /* d3's count(hum): 0 beside its temp */
    char q[300];
    snprintf(q, sizeof q,
             "SELECT count(hum), count(temp) FROM env WHERE device = 'd3' AND time >= %lldms AND "
             "time < %lldms GROUP BY time(10m)",
             T0, T0 + HOUR);
    iql_result r = run(q, 0);
    assert_int_equal(r.nseries, 1);
    assert_int_equal(cell(&r, 0, 0, 1)->t, IQL_V_INT);
    assert_int_equal(cell(&r, 0, 0, 1)->i, 0);
    assert_int_equal(cell(&r, 0, 0, 2)->i, 10);
    iql_result_free(&r);
}

/* Values equal to the last bit, as a kept result's windows must be. */
static void same_bits(const iql_result *a, const iql_result *b)
{
    assert_null(a->error);
    assert_null(b->error);
    assert_string_equal(a->tier, b->tier);
    same_vals(a, b, 0);
}

static iql_result run_cached(const char *q, bdb_rcache *c)
{
    groups = c;
    iql_result r = run(q, 0);
    groups = NULL;
    return r;
}

/* h1 (site a) and h2 (site b): env.temp and a varying env.hum every 10 s for 2 hours,
 * so that GROUP BY site merges two devices per group (d1 and d2 being the others). */
static void put_h_devices(void)
{
    bdb_batch *b = bdb_batch_new();
    for (int d = 1; d <= 2; d++) {
        char dev[16];
        snprintf(dev, sizeof dev, "h%d", d);
        for (int i = 0; i < 720; i++) {
            bdb_batch_begin(b, dev, 2, T0 + i * 10000LL + 3000 * d, (size_t)i);
            bdb_batch_tag(b, "site", 4, d == 1 ? "a" : "b", 1);
            bdb_batch_metric(b, "env.temp", 8, 0.1 * (i % 17) + d);
            bdb_batch_metric(b, "env.hum", 7, 40 + 0.37 * (i % 23));
            assert_int_equal(bdb_batch_end(b), 1);
        }
    }
    assert_int_equal(bdb_db_write(db, "t", b), BDB_OK);
    bdb_batch_free(b);
}

/* One report of dev (site) at ts: temp v, and tag model when given. */
static void put_one(const char *dev, const char *site, const char *model, int64_t ts, double v)
{
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, dev, strlen(dev), ts, 0);
    bdb_batch_tag(b, "site", 4, site, strlen(site));
    if (model)
        bdb_batch_tag(b, "model", 5, model, strlen(model));
    bdb_batch_metric(b, "env.temp", 8, v);
    assert_int_equal(bdb_batch_end(b), 1);
    assert_int_equal(bdb_db_write(db, "t", b), BDB_OK);
    bdb_batch_free(b);
}

/* Asks q three times with cache c: every answer bit-equal to want. */
static void thrice_same(const char *q, const iql_result *want, bdb_rcache *c)
{
    for (int i = 0; i < 3; i++) {
        iql_result r = run_cached(q, c);
        same_bits(want, &r);
        iql_result_free(&r);
    }
}

/* The group cache (iql_gcache.h): statements over groups of devices (GROUP BY site,
 * two devices a group; one group of all four) asked again keep their settled windows
 * from their second miss on and answer from them the third time, to the last bit
 * what the devices' tiers give, with an offset too; a late sample in a kept window
 * (the settled version moves), a device's new tag (the catalog's version alone) and a
 * new device in the group each make the next statement read again, and it sees the
 * change. */
static void test_group_cache(void **state)
{
    (void)state;
    put_h_devices();
    char q[400], q2[400];
    snprintf(q, sizeof q,
             "SELECT count(temp), mean(temp), max(temp), stddev(hum) FROM env WHERE device =~ "
             "/^[dh][12]$/ AND time >= %lldms AND time < %lldms GROUP BY time(10m), site",
             T0 + 37000, T0 + 2 * HOUR + 40 * MIN + 7000);
    snprintf(q2, sizeof q2,
             "SELECT sum(temp), min(hum), spread(temp) FROM env WHERE site =~ /^(a|b)$/ AND "
             "time >= %lldms AND time < %lldms GROUP BY time(20m, 5m) fill(none)",
             T0 + 1000, T0 + 2 * HOUR + 59 * MIN);
    bdb_rcache *c = bdb_rcache_new(1 << 20);
    assert_non_null(c);
    iql_result plain = run_cached(q, NULL), plain2 = run_cached(q2, NULL);
    assert_string_equal(plain.tier, "1m");
    assert_int_equal(plain.nseries, 2);
    assert_int_equal(plain.series[0].nrows, 17); /* windows 0 .. 16 from T0 */
    assert_int_equal(plain2.nseries, 1);
    bdb_rcache_stats st;
    for (int i = 0; i < 3; i++) {
        iql_result r = run_cached(q, c);
        same_bits(&plain, &r);
        iql_result_free(&r);
        bdb_rcache_stats_get(c, &st);
        assert_int_equal(st.misses, i < 2 ? (uint64_t)i + 1 : 2);
        assert_int_equal(st.hits, i < 2 ? 0 : 1);
        assert_int_equal(st.entries, i ? 1 : 0); /* kept from the second miss */
    }
    thrice_same(q2, &plain2, c);
    bdb_rcache_stats_get(c, &st);
    assert_int_equal(st.hits, 2);
    /* a late sample in window 3 (T0 + 30 min) of site a: the next statement reads it */
    put_one("d1", "a", NULL, T0 + 30 * MIN + 5000, 1000);
    iql_result late = run_cached(q, c);
    iql_result_free(&plain);
    plain = run_cached(q, NULL);
    same_bits(&plain, &late);
    assert_true(cell(&late, 0, 3, 3)->num == 1000);
    iql_result_free(&late);
    bdb_rcache_stats_get(c, &st);
    assert_int_equal(st.misses, 5);
    thrice_same(q, &plain, c);
    /* h2's new tag, with a sample of now: only the catalog's version moves */
    uint64_t sv0, sv1;
    assert_int_equal(bdb_db_settled_version(db, "t", &sv0), BDB_OK);
    put_one("h2", "b", "m7", bdb_now_ms(), 1);
    assert_int_equal(bdb_db_settled_version(db, "t", &sv1), BDB_OK);
    assert_int_equal(sv0, sv1);
    bdb_rcache_stats_get(c, &st);
    uint64_t misses = st.misses;
    thrice_same(q, &plain, c);
    bdb_rcache_stats_get(c, &st);
    assert_int_equal(st.misses, misses + 2); /* a new key: kept at its second miss */
    /* a new device of site a, with a sample of now: the group's windows hold it */
    put_one("h3", "a", NULL, bdb_now_ms(), 5);
    thrice_same(q, &plain, c); /* h3 does not match q's devices */
    iql_result_free(&plain2);
    plain2 = run_cached(q2, NULL);
    thrice_same(q2, &plain2, c);
    iql_result_free(&plain2);
    iql_result_free(&plain);
    bdb_rcache_free(c);
}

/* A kept result counts what it took to read against the point limit: a statement
 * sharing its windows with a longer first edge is over the limit from the cache as it
 * is from the devices. */
static void test_group_cache_limit(void **state)
{
    (void)state;
    char qa[400], qb[400];
    const char *fmt = "SELECT mean(temp) FROM env WHERE device =~ /^[dh][12]$/ AND time >= "
                      "%lldms AND time < %lldms GROUP BY time(10m)";
    snprintf(qa, sizeof qa, fmt, T0 + 10 * MIN, T0 + 2 * HOUR);
    snprintf(qb, sizeof qb, fmt, T0 + 37000, T0 + 2 * HOUR);
    /* the least limit qb passes from the devices */
    uint64_t lim = 1;
    for (;; lim++) {
        iql_result r = run(qb, lim);
        int ok = !r.error;
        iql_result_free(&r);
        if (ok)
            break;
        assert_true(lim < 100000);
    }
    iql_result r = run(qa, lim - 1);
    assert_null(r.error); /* qa reads less: no first edge */
    iql_result_free(&r);
    bdb_rcache *c = bdb_rcache_new(1 << 20);
    groups = c;
    for (int i = 0; i < 3; i++) {
        r = run(qa, lim - 1);
        assert_null(r.error);
        iql_result_free(&r);
    }
    r = run(qb, lim - 1);
    groups = NULL;
    assert_non_null(r.error);
    assert_non_null(strstr(r.error, "max-select-point"));
    iql_result_free(&r);
    bdb_rcache_stats st;
    bdb_rcache_stats_get(c, &st);
    assert_int_equal(st.hits, 2); /* qa's third, and qb */
    bdb_rcache_free(c);
}

/* A tier answer keeps every window of each group with data (the rows it becomes):
 * at most 4 x max_query_samples windows x fields over all groups, even where few are
 * read (ten devices of one sample each, GROUP BY device, fill(none)). Runs last. */
static void test_tier_cells_limit(void **state)
{
    (void)state;
    bdb_batch *b = bdb_batch_new();
    for (int d = 0; d < 10; d++) {
        char dev[16];
        snprintf(dev, sizeof dev, "e%d", d);
        bdb_batch_begin(b, dev, strlen(dev), T0 + 5 * MIN, 0);
        bdb_batch_metric(b, "env.temp", 8, d);
        assert_int_equal(bdb_batch_end(b), 1);
    }
    assert_int_equal(bdb_db_write(db, "t", b), BDB_OK);
    bdb_batch_free(b);
    char q[300];
    snprintf(q, sizeof q,
             "SELECT mean(temp) FROM env WHERE device =~ /^e/ AND time >= %lldms AND time < "
             "%lldms GROUP BY time(1m), device fill(none)",
             T0, T0 + 2 * HOUR);
    iql_result r = run(q, 400); /* 10 groups x 120 windows = 1200 <= 1600 */
    assert_null(r.error);
    assert_string_equal(r.tier, "1m");
    assert_int_equal(r.nseries, 10);
    assert_int_equal(r.series[9].nrows, 1);
    assert_true(cell(&r, 9, 0, 1)->num == 9);
    iql_result_free(&r);
    r = run(q, 200); /* 1200 > 800 */
    assert_non_null(r.error);
    assert_non_null(strstr(r.error, "max-select-point"));
    iql_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mapping_and_show),
        cmocka_unit_test(test_time_bounds),
        cmocka_unit_test(test_fill_and_limits),
        cmocka_unit_test(test_tier_rule),
        cmocka_unit_test(test_tier_groups),
        cmocka_unit_test(test_one_device),
        cmocka_unit_test(test_group_cache),
        cmocka_unit_test(test_group_cache_limit),
        cmocka_unit_test(test_tier_cells_limit),
        cmocka_unit_test(test_open_end_race), /* last: its device d9 joins the tenant */
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
