/* read_cache: the engine's read cache (common/rcache.h, docs/AGGREGATION.md#read-cache)
 * never changes an answer. Two engines get the same writes, flushes, maintenance
 * passes and tenant drops, one with the cache and one without; after every step the
 * tier reads that use the cache (1m and 1h, statistics only, over aligned and unaligned
 * ranges) are compared byte for byte, each read three times on the cached engine (a
 * miss read as without the cache, a miss kept, a hit). The steps are the ones that could make a
 * kept value stale: more data into a window already flushed (a new block beside the old), a rewrite
 * of a flushed time (the head holds it, then a new block and a replacing tier file), late data,
 * block and tier compaction, a deleted tenant and a new one of the same name,
 * non-finite values, and a cache too small to hold a series (eviction). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "agg/rollup.h"
#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/tier/db_tier.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MIN BDB_MS_MIN
#define HOUR BDB_MS_HOUR
#define DAY BDB_MS_DAY
#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */

static char tmpdir[64], dir_c[128], dir_n[128];
static int64_t fake_now = T0 + 3 * DAY;

struct pair {
    bdb_db *c, *n; /* with the cache, without */
};

static int setup(void **st)
{
    (void)st;
    eu_scratch(tmpdir, sizeof tmpdir, "rcache", EU_TMPFS, NULL, 0);
    snprintf(dir_c, sizeof dir_c, "%s/c", tmpdir);
    snprintf(dir_n, sizeof dir_n, "%s/n", tmpdir);
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    return eu_cleanup(tmpdir);
}

static struct pair open_pair(uint64_t cache_bytes)
{
    bdb_db_opts o;
    struct pair p;
    eu_opts(&o, dir_c, eu_clock, &fake_now);
    assert_int_equal(o.read_cache_bytes, BDB_READ_CACHE_DEFAULT);
    o.read_cache_bytes = cache_bytes;
    p.c = eu_open(&o);
    eu_opts(&o, dir_n, eu_clock, &fake_now);
    o.read_cache_bytes = 0;
    p.n = eu_open(&o);
    return p;
}

static void close_pair(struct pair *p)
{
    assert_int_equal(bdb_db_close(p->c), BDB_OK);
    assert_int_equal(bdb_db_close(p->n), BDB_OK);
}

static void put(struct pair *p, const char *tn, const char *dev, const char *met, int64_t ts,
                double v)
{
    eu_put(p->c, tn, dev, met, ts, v, 0);
    eu_put(p->n, tn, dev, met, ts, v, 0);
}

/* Reports every step ms over [a, b) of dev, metrics "temp" and "hum", values from seed. */
static void put_run(struct pair *p, const char *tn, const char *dev, int64_t a, int64_t b,
                    int64_t step, unsigned seed)
{
    bdb_batch *bc = bdb_batch_new(), *bn = bdb_batch_new();
    int k = 0;
    for (int64_t t = a; t < b; t += step, k++) {
        seed = seed * 1103515245u + 12345u;
        double v = (double)(seed >> 16 & 0x7fff) / 100.0 - 50.0;
        for (int i = 0; i < 2; i++) {
            bdb_batch *x = i ? bn : bc;
            bdb_batch_begin(x, dev, strlen(dev), t, 0);
            bdb_batch_metric(x, "temp", 4, v);
            bdb_batch_metric(x, "hum", 3, v * 0.37 + 40.0);
            assert_int_equal(bdb_batch_end(x), 1);
        }
        if (k % 500 == 499) {
            assert_int_equal(bdb_db_write(p->c, tn, bc), BDB_OK);
            assert_int_equal(bdb_db_write(p->n, tn, bn), BDB_OK);
            bdb_batch_reset(bc);
            bdb_batch_reset(bn);
        }
    }
    assert_int_equal(bdb_db_write(p->c, tn, bc), BDB_OK);
    assert_int_equal(bdb_db_write(p->n, tn, bn), BDB_OK);
    bdb_batch_free(bc);
    bdb_batch_free(bn);
}

static void flush(struct pair *p)
{
    assert_int_equal(bdb_db_flush(p->c), BDB_OK);
    assert_int_equal(bdb_db_flush(p->n), BDB_OK);
}

static void maintain(struct pair *p)
{
    assert_int_equal(bdb_db_maintain(p->c), BDB_OK);
    assert_int_equal(bdb_db_maintain(p->n), BDB_OK);
}

static uint64_t hits(bdb_db *db)
{
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    return st.rcache_hits;
}

/* One stats-only tier read; rc returned, windows into r (initialized here). */
static int tread(bdb_db *db, const char *tn, const char *dev, enum bdb_res res, int64_t from,
                 int64_t to, bdb_rollup *r)
{
    const char *m[2] = {"temp", "hum"};
    bdb_rollup_init(&r[0], bdb_res_width(res));
    bdb_rollup_init(&r[1], bdb_res_width(res));
    r[0].stats_only = r[1].stats_only = 1;
    return bdb_db_tier_read(db, tn, dev, m, 2, res, from, to, r);
}

/* The windows of a and b are the same bytes: statistics and sketches (a stats-only
 * read leaves them empty, except where it fixes a late minute from raw). */
static void same(const bdb_rollup *a, const bdb_rollup *b)
{
    assert_int_equal(a->n, b->n);
    bdb_buf ea, eb;
    bdb_buf_init(&ea);
    bdb_buf_init(&eb);
    for (size_t i = 0; i < a->n; i++) {
        assert_true(a->w[i].start == b->w[i].start);
        assert_memory_equal(&a->w[i].st, &b->w[i].st, sizeof a->w[i].st);
        bdb_buf_reset(&ea);
        bdb_buf_reset(&eb);
        bdb_sketch_write(&a->w[i].sk, &ea);
        bdb_sketch_write(&b->w[i].sk, &eb);
        assert_int_equal(ea.len, eb.len);
        assert_memory_equal(ea.data, eb.data, ea.len);
    }
    bdb_buf_free(&ea);
    bdb_buf_free(&eb);
}

/* Every checked read of dev (1m and 1h, ranges aligned or not, inside the data and
 * past it) is the same on both engines, three times on the cached one. Returns the windows
 * compared (a test that compares nothing proves nothing). */
static size_t check_dev(struct pair *p, const char *tn, const char *dev)
{
    static const struct {
        enum bdb_res res;
        int64_t from, to;
    } q[] = {
        {BDB_RES_1M, T0, T0 + DAY},
        {BDB_RES_1M, T0 + 7 * MIN + 13, T0 + 26 * HOUR + 5 * MIN + 1},
        {BDB_RES_1M, T0 + 3 * HOUR, T0 + 5 * HOUR},
        {BDB_RES_1M, T0 + 90 * MIN, T0 + 2 * DAY},
        {BDB_RES_1H, T0, T0 + 2 * DAY},
        {BDB_RES_1H, T0 + 5 * HOUR, T0 + 40 * HOUR},
        {BDB_RES_1H, T0 - 30 * DAY, T0 + 60 * DAY},
    };
    size_t n = 0;
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        bdb_rollup rn[2], rc[2];
        int en = tread(p->n, tn, dev, q[i].res, q[i].from, q[i].to, rn);
        for (int k = 0; k < 3; k++) { /* asked once, kept at the second, a hit at the third */
            int ec = tread(p->c, tn, dev, q[i].res, q[i].from, q[i].to, rc);
            assert_int_equal(ec, en);
            for (int m = 0; m < 2; m++) {
                same(&rc[m], &rn[m]);
                bdb_rollup_free(&rc[m]);
            }
        }
        for (int m = 0; m < 2; m++) {
            n += rn[m].n;
            bdb_rollup_free(&rn[m]);
        }
    }
    return n;
}

/* Raw reads of dev over ranges aligned or not: the same samples and the same count of
 * chunks decoded (which /api/v1/query answers), three times on the cached engine. */
static size_t check_raw(struct pair *p, const char *tn, const char *dev)
{
    static const int64_t q[][2] = {
        {T0, T0 + DAY},
        {T0 + 7 * MIN + 13, T0 + 26 * HOUR + 5 * MIN + 1},
        {T0 + 3 * HOUR + 1, T0 + 3 * HOUR + 50 * MIN},
        {T0 - DAY, T0 + 3 * DAY},
    };
    const char *m[2] = {"hum", "temp"};
    size_t n = 0;
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        bdb_samples sn[2], sc[2];
        uint64_t cn = 0, cc = 0;
        memset(sn, 0, sizeof sn);
        int en = bdb_db_read(p->n, tn, dev, m, 2, q[i][0], q[i][1], sn, &cn);
        for (int k = 0; k < 3; k++) {
            memset(sc, 0, sizeof sc);
            cc = 0;
            int ec = bdb_db_read(p->c, tn, dev, m, 2, q[i][0], q[i][1], sc, &cc);
            assert_int_equal(ec, en);
            assert_int_equal(cc, cn);
            for (int j = 0; j < 2; j++) {
                assert_int_equal(sc[j].n, sn[j].n);
                if (sn[j].n) {
                    assert_memory_equal(sc[j].ts, sn[j].ts, sn[j].n * sizeof *sn[j].ts);
                    assert_memory_equal(sc[j].v, sn[j].v, sn[j].n * sizeof *sn[j].v);
                }
                bdb_samples_free(&sc[j]);
            }
        }
        for (int j = 0; j < 2; j++) {
            n += sn[j].n;
            bdb_samples_free(&sn[j]);
        }
    }
    return n;
}

static size_t check(struct pair *p)
{
    return check_dev(p, "t1", "d1") + check_dev(p, "t1", "d2") + check_dev(p, "t2", "d1") +
           check_raw(p, "t1", "d1") + check_raw(p, "t1", "d2") + check_raw(p, "t2", "d1");
}

static void test_same_answers_through_changes(void **st)
{
    (void)st;
    struct pair p = open_pair(BDB_READ_CACHE_DEFAULT);
    /* a day and a half at 10 s, flushed: blocks and 1h tier files */
    put_run(&p, "t1", "d1", T0, T0 + 36 * HOUR, 10000, 1);
    put_run(&p, "t1", "d2", T0 + 1234, T0 + 30 * HOUR, 10000, 2);
    put_run(&p, "t2", "d1", T0 + 777, T0 + 20 * HOUR, 10000, 3);
    flush(&p);
    assert_true(check(&p) > 1000);
    uint64_t h = hits(p.c);
    assert_true(h > 0);
    /* the head holds the next samples: those windows come from raw, the rest cached */
    put_run(&p, "t1", "d1", T0 + 36 * HOUR, T0 + 40 * HOUR, 10000, 4);
    assert_true(check(&p) > 1000);
    /* more samples into flushed windows (a new block beside the old: a new key) */
    put_run(&p, "t1", "d1", T0 + 5 * HOUR + 5, T0 + 7 * HOUR, 30000, 5);
    check(&p);
    flush(&p);
    check(&p);
    /* rewrites of flushed times with other values (late path: replacing tier files) */
    for (int i = 0; i < 50; i++)
        put(&p, "t1", "d2", i % 2 ? "temp" : "hum", T0 + 1234 + (int64_t)i * 370000, 1000.0 + i);
    check(&p);
    flush(&p);
    check(&p);
    /* late data far behind, into an hour with no data yet, and non-finite values */
    put(&p, "t2", "d1", "temp", T0 + 22 * HOUR + 5, NAN);
    put(&p, "t2", "d1", "temp", T0 + 22 * HOUR + 15, 3.5);
    put(&p, "t2", "d1", "hum", T0 + 3 * HOUR + 1, INFINITY);
    put_run(&p, "t2", "d1", T0 + 30 * HOUR, T0 + 31 * HOUR, 10000, 6);
    flush(&p);
    check(&p);
    put_run(&p, "t2", "d1", T0 + 10 * HOUR + 3, T0 + 11 * HOUR, 60000, 7);
    flush(&p);
    check(&p);
    /* compaction of blocks and tier files: new seqs for the same data */
    maintain(&p);
    check(&p);
    /* a deleted tenant: gone on both; a new one of the same name, other values */
    assert_int_equal(bdb_db_drop_tenant(p.c, "t2"), BDB_OK);
    assert_int_equal(bdb_db_drop_tenant(p.n, "t2"), BDB_OK);
    maintain(&p);
    bdb_rollup r[2];
    assert_int_equal(tread(p.c, "t2", "d1", BDB_RES_1M, T0, T0 + DAY, r), BDB_ERR_NOTFOUND);
    bdb_rollup_free(&r[0]);
    bdb_rollup_free(&r[1]);
    check(&p);
    put_run(&p, "t2", "d1", T0 + 2 * HOUR, T0 + 9 * HOUR, 20000, 8);
    check(&p);
    flush(&p);
    check(&p);
    maintain(&p);
    check(&p);
    assert_true(hits(p.c) > h);
    close_pair(&p);
}

/* A cache that holds a series' day at most: evictions, and the same answers. */
static void test_small_cache_evicts(void **st)
{
    (void)st;
    struct pair p = open_pair(64 << 10);
    put_run(&p, "t1", "d1", T0, T0 + 36 * HOUR, 10000, 11);
    put_run(&p, "t1", "d2", T0 + 1234, T0 + 30 * HOUR, 10000, 12);
    put_run(&p, "t2", "d1", T0 + 777, T0 + 20 * HOUR, 10000, 13);
    flush(&p);
    assert_true(check(&p) > 1000);
    check(&p);
    bdb_db_stats s;
    bdb_db_get_stats(p.c, &s);
    assert_true(s.rcache_evictions > 0);
    assert_true(s.rcache_hits > 0);
    assert_true(s.rcache_bytes <= 64 << 10);
    assert_int_equal(s.rcache_max_bytes, 64 << 10);
    bdb_db_get_stats(p.n, &s); /* the engine without a cache counts nothing */
    assert_int_equal(s.rcache_hits + s.rcache_misses + s.rcache_max_bytes, 0);
    close_pair(&p);
}

int main(void)
{
    bdb_log_set_level(BDB_LOG_ERROR + 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_same_answers_through_changes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_small_cache_evicts, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
