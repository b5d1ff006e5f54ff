/* agg/rollup: the pyramid built through bdb_rollup (1 minute windows from samples,
 * hours merged from minutes, days from hours) against exact computation on uniform,
 * skewed (lognormal) and constant data at every tier, including a daily p99 from 1,440
 * minute windows; partial windows from split inputs merge to the same windows; the
 * window encoding round-trips and rejects damage; routing thresholds. The statistical
 * cores themselves are tested in stats_test.c and sketch_test.c. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "agg/rollup.h"
#include "bucketdb/bdb.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MIN_MS INT64_C(60000)
#define HOUR_MS (60 * MIN_MS)
#define DAY_MS (24 * HOUR_MS)
#define BOUND (0.01 * (1 + 1e-9))
/* a day of 1 Hz samples, starting at an arbitrary day boundary (2024-01-15) */
#define T0 INT64_C(1705276800000)
#define N 86400

static uint64_t rng_state;
static uint64_t rng(void)
{
    uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}
static double unif(void)
{
    return ((double)(rng() >> 11) + 0.5) / 9007199254740992.0;
}

enum { UNIFORM, SKEWED, CONSTANT };

static double *make(int kind)
{
    rng_state = 42 + (uint64_t)kind;
    double *v = malloc(N * sizeof *v);
    for (int i = 0; i < N; i++) {
        if (kind == UNIFORM)
            v[i] = 100 * unif();
        else if (kind == SKEWED) /* lognormal, sigma 1.5 */
            v[i] = exp(1.5 * sqrt(-2 * log(unif())) * cos(6.283185307179586 * unif()));
        else
            v[i] = 42.7;
    }
    return v;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Checks window w against the exact statistics of v[0..n). */
static void check_exact(const bdb_window *w, const double *v, size_t n)
{
    assert_int_equal(bdb_stats_count(&w->st), n);
    long double sum = 0, comp = 0; /* Kahan in long double: the reference must beat 2 ulps */
    double mn = v[0], mx = v[0];
    for (size_t i = 0; i < n; i++) {
        long double y = v[i] - comp, t = sum + y;
        comp = (t - sum) - y;
        sum = t;
        mn = v[i] < mn ? v[i] : mn;
        mx = v[i] > mx ? v[i] : mx;
    }
    long double mean = sum / n, m2 = 0;
    for (size_t i = 0; i < n; i++)
        m2 += (v[i] - mean) * (v[i] - mean);
    assert_true(bdb_stats_min(&w->st) == mn);
    assert_true(bdb_stats_max(&w->st) == mx);
    double s = bdb_stats_sum(&w->st);
    assert_true(fabsl(s - sum) <= 2 * 2.3e-16L * fabsl(sum) + 1e-300L);
    double sd = bdb_stats_stddev_pop(&w->st), esd = (double)sqrtl(m2 / n);
    if (esd == 0)
        assert_true(sd == 0);
    else
        assert_true(fabs(sd - esd) <= 1e-12 * esd);
    double *sorted = malloc(n * sizeof *sorted);
    memcpy(sorted, v, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_d);
    const double qs[] = {0.5, 0.95, 0.99};
    for (int k = 0; k < 3; k++) {
        double x = sorted[(size_t)floor(qs[k] * (double)(n - 1))];
        double got = bdb_sketch_quantile(&w->sk, qs[k]);
        assert_true(fabs(got - x) <= BOUND * fabs(x));
    }
    free(sorted);
}

static void pyramid(int kind)
{
    double *v = make(kind);
    bdb_rollup m, h, d;
    bdb_rollup_init(&m, MIN_MS);
    bdb_rollup_init(&h, HOUR_MS);
    bdb_rollup_init(&d, DAY_MS);
    for (int i = 0; i < N; i++)
        assert_int_equal(bdb_rollup_add(&m, T0 + (int64_t)i * 1000, v[i]), BDB_OK);
    assert_int_equal(m.n, 1440);
    assert_int_equal(bdb_rollup_merge(&h, &m), BDB_OK);
    assert_int_equal(h.n, 24);
    assert_int_equal(bdb_rollup_merge(&d, &h), BDB_OK);
    assert_int_equal(d.n, 1);
    for (int i = 0; i < 1440; i++) {
        assert_int_equal(m.w[i].start, T0 + i * MIN_MS);
        check_exact(&m.w[i], v + i * 60, 60);
    }
    for (int i = 0; i < 24; i++)
        check_exact(&h.w[i], v + i * 3600, 3600);
    check_exact(&d.w[0], v, N);
    /* the daily p99 straight from the 1,440 minute windows (the hour-free path) */
    bdb_rollup d2;
    bdb_rollup_init(&d2, DAY_MS);
    assert_int_equal(bdb_rollup_merge(&d2, &m), BDB_OK);
    check_exact(&d2.w[0], v, N);
    /* and the day of raw samples gives the identical sketch */
    bdb_rollup raw;
    bdb_rollup_init(&raw, DAY_MS);
    for (int i = 0; i < N; i++)
        bdb_rollup_add(&raw, T0 + (int64_t)i * 1000, v[i]);
    bdb_buf a, b;
    bdb_buf_init(&a);
    bdb_buf_init(&b);
    bdb_sketch_write(&d.w[0].sk, &a);
    bdb_sketch_write(&raw.w[0].sk, &b);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.data, b.data, a.len);
    assert_true(bdb_stats_count(&raw.w[0].st) == bdb_stats_count(&d.w[0].st));
    bdb_buf_free(&a);
    bdb_buf_free(&b);
    bdb_rollup_free(&raw);
    bdb_rollup_free(&d2);
    bdb_rollup_free(&m);
    bdb_rollup_free(&h);
    bdb_rollup_free(&d);
    free(v);
}

static void test_pyramid_uniform(void **st)
{
    (void)st;
    pyramid(UNIFORM);
}
static void test_pyramid_skewed(void **st)
{
    (void)st;
    pyramid(SKEWED);
}
static void test_pyramid_constant(void **st)
{
    (void)st;
    pyramid(CONSTANT);
}

/* Partial windows (as several flushes produce them, in any order and with late
 * samples) merge into the same windows as one pass over everything. */
static void test_partial_windows_merge(void **st)
{
    (void)st;
    double *v = make(SKEWED);
    bdb_rollup whole, parts[3], merged;
    bdb_rollup_init(&whole, MIN_MS);
    bdb_rollup_init(&merged, HOUR_MS);
    for (int k = 0; k < 3; k++)
        bdb_rollup_init(&parts[k], MIN_MS);
    rng_state = 7;
    for (int i = 0; i < 7200; i++) {
        bdb_rollup_add(&whole, T0 + (int64_t)i * 1000, v[i]);
        bdb_rollup_add(&parts[rng() % 3], T0 + (int64_t)i * 1000, v[i]);
    }
    for (int k = 2; k >= 0; k--)
        assert_int_equal(bdb_rollup_merge(&merged, &parts[k]), BDB_OK);
    bdb_rollup hw;
    bdb_rollup_init(&hw, HOUR_MS);
    bdb_rollup_merge(&hw, &whole);
    assert_int_equal(merged.n, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_true(merged.w[i].start == hw.w[i].start);
        assert_true(merged.w[i].st.count == hw.w[i].st.count);
        assert_true(merged.w[i].st.min == hw.w[i].st.min);
        assert_true(merged.w[i].st.max == hw.w[i].st.max);
        assert_true(fabs(bdb_stats_sum(&merged.w[i].st) - bdb_stats_sum(&hw.w[i].st)) <=
                    1e-15 * fabs(bdb_stats_sum(&hw.w[i].st)));
        bdb_buf a, b;
        bdb_buf_init(&a);
        bdb_buf_init(&b);
        bdb_sketch_write(&merged.w[i].sk, &a);
        bdb_sketch_write(&hw.w[i].sk, &b);
        assert_int_equal(a.len, b.len);
        assert_memory_equal(a.data, b.data, a.len);
        bdb_buf_free(&a);
        bdb_buf_free(&b);
    }
    for (int k = 0; k < 3; k++)
        bdb_rollup_free(&parts[k]);
    bdb_rollup_free(&whole);
    bdb_rollup_free(&merged);
    bdb_rollup_free(&hw);
    free(v);
}

static void test_nonfinite_and_negative_time(void **st)
{
    (void)st;
    bdb_rollup r;
    bdb_rollup_init(&r, MIN_MS);
    assert_int_equal(bdb_rollup_add(&r, -1, 1.0), BDB_OK); /* 1969-12-31T23:59:59.999 */
    assert_int_equal(bdb_rollup_add(&r, 0, 2.0), BDB_OK);
    assert_int_equal(bdb_rollup_add(&r, 5, NAN), BDB_OK);
    assert_int_equal(bdb_rollup_add(&r, 5, INFINITY), BDB_OK);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.skipped, 2);
    assert_true(r.w[0].start == -MIN_MS);
    assert_true(r.w[1].start == 0);
    assert_non_null(bdb_rollup_find(&r, 0));
    assert_null(bdb_rollup_find(&r, MIN_MS));
    bdb_rollup h;
    bdb_rollup_init(&h, 7 * 1000); /* 7 s does not divide by 60 s */
    assert_int_equal(bdb_rollup_merge(&h, &r), BDB_ERR_INVALID);
    bdb_rollup_free(&h);
    bdb_rollup_free(&r);
}

static void test_encoding(void **st)
{
    (void)st;
    double *v = make(UNIFORM);
    bdb_rollup r;
    bdb_rollup_init(&r, MIN_MS);
    for (int i = 0; i < 600; i++) /* minutes 0..9, then a gap, then minute 100 */
        bdb_rollup_add(&r, T0 + (int64_t)i * 1000, v[i]);
    bdb_rollup_add(&r, T0 + 100 * MIN_MS, 5.0);
    bdb_buf b;
    bdb_buf_init(&b);
    assert_int_equal(bdb_rollup_write(&r, INT64_MIN, INT64_MAX, &b), 11);
    bdb_rollup back;
    bdb_rollup_init(&back, MIN_MS);
    bdb_dec d;
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(bdb_rollup_read(&back, &d, INT64_MIN, INT64_MAX), BDB_OK);
    assert_int_equal(bdb_dec_left(&d), 0);
    assert_int_equal(back.n, 11);
    bdb_buf again;
    bdb_buf_init(&again);
    bdb_rollup_write(&back, INT64_MIN, INT64_MAX, &again);
    assert_int_equal(again.len, b.len);
    assert_memory_equal(again.data, b.data, b.len);
    /* a sub-range: only minutes 2..4 */
    bdb_rollup sub;
    bdb_rollup_init(&sub, MIN_MS);
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(bdb_rollup_read(&sub, &d, T0 + 2 * MIN_MS, T0 + 5 * MIN_MS), BDB_OK);
    assert_int_equal(sub.n, 3);
    /* every truncation and every single-byte flip fails cleanly or decodes to sane
     * windows (never a crash, never a window whose parts disagree) */
    for (size_t cut = 0; cut < b.len; cut++) {
        bdb_rollup x;
        bdb_rollup_init(&x, MIN_MS);
        bdb_dec_init(&d, b.data, cut);
        int rc = bdb_rollup_read(&x, &d, INT64_MIN, INT64_MAX);
        assert_true(rc == BDB_ERR_CORRUPT || bdb_dec_left(&d) == 0);
        assert_true(cut == 0 ? rc == BDB_ERR_CORRUPT : 1);
        bdb_rollup_free(&x);
    }
    int rejected = 0;
    for (size_t i = 0; i < b.len; i++) {
        uint8_t save = b.data[i];
        b.data[i] ^= 0x5a;
        bdb_rollup x;
        bdb_rollup_init(&x, MIN_MS);
        bdb_dec_init(&d, b.data, b.len);
        if (bdb_rollup_read(&x, &d, INT64_MIN, INT64_MAX) != BDB_OK)
            rejected++;
        for (size_t k = 0; k < x.n; k++)
            assert_true(x.w[k].st.count == bdb_sketch_count(&x.w[k].sk));
        bdb_rollup_free(&x);
        b.data[i] = save;
    }
    assert_true(rejected > 0);
    bdb_buf_free(&b);
    bdb_buf_free(&again);
    bdb_rollup_free(&r);
    bdb_rollup_free(&back);
    bdb_rollup_free(&sub);
    free(v);
}

/* bdb_rollup_read_part gives the windows bdb_rollup_read gives for every range, and
 * its skip walkers step over exactly the bytes of every kind of window (empty-spread,
 * negative, zero, many buckets, a lone zero). */
static void test_encoding_part(void **st)
{
    (void)st;
    rng_state = 42;
    bdb_rollup r;
    bdb_rollup_init(&r, MIN_MS);
    int64_t m = 0;
    for (int w = 0; w < 300; w++) {
        m += 1 + (int64_t)(rng() % 3); /* gaps of 0 to 2 minutes */
        int kind = (int)(rng() % 5), n = 1 + (int)(rng() % 40);
        for (int i = 0; i < n; i++) {
            double x = kind == 0   ? 21.5                   /* one value, no spread */
                       : kind == 1 ? -100 * unif()          /* negative */
                       : kind == 2 ? (i % 3 ? 0.0 : unif()) /* zeros and some above */
                       : kind == 3 ? 0.0                    /* only zeros */
                                   : exp(10 * unif() - 5);  /* many buckets */
            bdb_rollup_add(&r, T0 + m * MIN_MS + i, x);
        }
    }
    bdb_buf b;
    bdb_buf_init(&b);
    size_t nw = bdb_rollup_write(&r, INT64_MIN, INT64_MAX, &b);
    assert_int_equal(nw, 300);
    bdb_dec d;
    /* every window stepped over: exactly the whole encoding consumed */
    bdb_rollup x;
    bdb_rollup_init(&x, MIN_MS);
    int stopped = -1;
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(
        bdb_rollup_read_part(&x, &d, T0 + 10000 * MIN_MS, T0 + 10001 * MIN_MS, &stopped), BDB_OK);
    assert_int_equal(x.n, 0);
    assert_int_equal(stopped, 0);
    assert_int_equal(bdb_dec_left(&d), 0);
    bdb_rollup_free(&x);
    for (int q = 0; q < 2000; q++) {
        int64_t lo = T0 + (int64_t)(rng() % (uint64_t)(m + 20)) * MIN_MS - 10 * MIN_MS;
        int64_t hi = lo + (int64_t)(rng() % 200) * MIN_MS + (int64_t)(rng() % 2);
        bdb_rollup full, part;
        bdb_rollup_init(&full, MIN_MS);
        bdb_rollup_init(&part, MIN_MS);
        bdb_dec_init(&d, b.data, b.len);
        assert_int_equal(bdb_rollup_read(&full, &d, lo, hi), BDB_OK);
        bdb_dec_init(&d, b.data, b.len);
        assert_int_equal(bdb_rollup_read_part(&part, &d, lo, hi, &stopped), BDB_OK);
        assert_int_equal(part.n, full.n);
        assert_int_equal(stopped, r.n && r.w[r.n - 1].start >= hi);
        if (!stopped)
            assert_int_equal(bdb_dec_left(&d), 0);
        for (size_t k = 0; k < full.n; k++) {
            assert_int_equal(part.w[k].start, full.w[k].start);
            assert_int_equal(part.w[k].st.count, full.w[k].st.count);
            assert_true(part.w[k].st.min == full.w[k].st.min);
            assert_true(part.w[k].st.max == full.w[k].st.max);
            assert_true(bdb_stats_sum(&part.w[k].st) == bdb_stats_sum(&full.w[k].st));
            assert_true(bdb_sketch_quantile(&part.w[k].sk, 0.5) ==
                        bdb_sketch_quantile(&full.w[k].sk, 0.5));
        }
        bdb_rollup_free(&full);
        bdb_rollup_free(&part);
    }
    /* stats_only: the same statistics, the sketches stepped over (left empty) */
    for (int q = 0; q < 50; q++) {
        int64_t lo = T0 + (int64_t)(rng() % (uint64_t)(m + 20)) * MIN_MS - 10 * MIN_MS;
        int64_t hi = q % 2 ? INT64_MAX : lo + (int64_t)(rng() % 300) * MIN_MS;
        bdb_rollup full, lean;
        bdb_rollup_init(&full, MIN_MS);
        bdb_rollup_init(&lean, MIN_MS);
        lean.stats_only = 1;
        bdb_dec_init(&d, b.data, b.len);
        assert_int_equal(bdb_rollup_read(&full, &d, lo, hi), BDB_OK);
        bdb_dec_init(&d, b.data, b.len);
        int rc = q % 3 ? bdb_rollup_read_part(&lean, &d, lo, hi, &stopped)
                       : bdb_rollup_read(&lean, &d, lo, hi);
        assert_int_equal(rc, BDB_OK);
        assert_int_equal(lean.n, full.n);
        for (size_t k = 0; k < full.n; k++) {
            assert_int_equal(lean.w[k].start, full.w[k].start);
            assert_memory_equal(&lean.w[k].st, &full.w[k].st, sizeof full.w[k].st);
            assert_int_equal(bdb_sketch_count(&lean.w[k].sk), 0);
        }
        bdb_rollup_free(&full);
        bdb_rollup_free(&lean);
    }
    /* cut anywhere: an error or a clean read of what is there, never past the end */
    for (size_t cut = 0; cut < b.len; cut += 7) {
        bdb_rollup_init(&x, MIN_MS);
        bdb_dec_init(&d, b.data, cut);
        int rc = bdb_rollup_read_part(&x, &d, T0 + 150 * MIN_MS, T0 + 160 * MIN_MS, &stopped);
        assert_true(rc == BDB_ERR_CORRUPT || rc == BDB_OK);
        assert_true(rc != BDB_OK || stopped || bdb_dec_left(&d) == 0);
        bdb_rollup_free(&x);
    }
    bdb_buf_free(&b);
    bdb_rollup_free(&r);
}

static void test_route(void **st)
{
    (void)st;
    assert_int_equal(bdb_rollup_route(HOUR_MS), BDB_RES_RAW);
    assert_int_equal(bdb_rollup_route(6 * HOUR_MS), BDB_RES_RAW);
    assert_int_equal(bdb_rollup_route(6 * HOUR_MS + 1), BDB_RES_1M);
    assert_int_equal(bdb_rollup_route(7 * DAY_MS), BDB_RES_1M);
    assert_int_equal(bdb_rollup_route(7 * DAY_MS + 1), BDB_RES_1H);
    assert_int_equal(bdb_rollup_route(90 * DAY_MS), BDB_RES_1H);
    assert_int_equal(bdb_rollup_route(90 * DAY_MS + 1), BDB_RES_1D);
    assert_int_equal(bdb_res_parse("1h"), BDB_RES_1H);
    assert_int_equal(bdb_res_parse("raw"), BDB_RES_RAW);
    assert_int_equal(bdb_res_parse("5m"), -1);
    assert_true(bdb_res_width(BDB_RES_1D) == DAY_MS);
}

/* bdb_rollup_append_stats makes the windows merge_window makes (statistics only),
 * after what r holds; out of order or unaligned it refuses and leaves r as it was. */
static void test_append_stats(void **st)
{
    (void)st;
    bdb_rollup src, a, b;
    bdb_rollup_init(&src, 60000);
    src.stats_only = 1;
    for (int i = 0; i < 500; i++)
        assert_int_equal(bdb_rollup_add(&src, 1700000000000 + i * 7777, sin(i) * 100), BDB_OK);
    bdb_stwin *v = malloc(src.n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < src.n; i++)
        v[i] = (bdb_stwin){src.w[i].start, src.w[i].st};
    bdb_rollup_init(&a, 60000);
    bdb_rollup_init(&b, 60000);
    a.stats_only = b.stats_only = 1;
    size_t half = src.n / 2;
    assert_int_equal(bdb_rollup_append_stats(&a, v, half), BDB_OK);
    assert_int_equal(bdb_rollup_append_stats(&a, v + half, src.n - half), BDB_OK);
    for (size_t i = 0; i < src.n; i++)
        assert_int_equal(bdb_rollup_merge_window(&b, &src.w[i]), BDB_OK);
    assert_int_equal(a.n, b.n);
    for (size_t i = 0; i < a.n; i++) {
        assert_true(a.w[i].start == b.w[i].start);
        assert_memory_equal(&a.w[i].st, &b.w[i].st, sizeof a.w[i].st);
        assert_int_equal(bdb_sketch_count(&a.w[i].sk), 0);
    }
    /* before the last window, or unaligned: refused, nothing appended */
    assert_int_equal(bdb_rollup_append_stats(&a, v, 1), BDB_ERR_INVALID);
    bdb_stwin odd = {a.w[a.n - 1].start + 60001, v[0].st};
    assert_int_equal(bdb_rollup_append_stats(&a, &odd, 1), BDB_ERR_INVALID);
    assert_int_equal(a.n, b.n);
    free(v);
    bdb_rollup_free(&src);
    bdb_rollup_free(&a);
    bdb_rollup_free(&b);
}

/* A stats-only rollup takes windows that carry sketches (merged, set, folded) into
 * statistics alone: the same statistics as a full rollup, its sketches zeroed, never
 * allocated, and a fold out of it leaves the target's sketch alone. */
static void test_stats_only_sketches(void **st)
{
    (void)st;
    bdb_rollup full, lean;
    bdb_rollup_init(&full, 60000);
    for (int i = 0; i < 400; i++)
        assert_int_equal(bdb_rollup_add(&full, 1700000000000 + i * 3001, cos(i) * 50), BDB_OK);
    bdb_rollup_init(&lean, 60000);
    lean.stats_only = 1;
    for (size_t i = 0; i < full.n; i++) {
        assert_true(bdb_sketch_count(&full.w[i].sk) > 0);
        assert_int_equal(i % 2 ? bdb_rollup_merge_window(&lean, &full.w[i])
                               : bdb_rollup_set_window(&lean, &full.w[i]),
                         BDB_OK);
    }
    assert_int_equal(bdb_rollup_merge_window(&lean, &full.w[0]), BDB_OK); /* twice */
    assert_int_equal(lean.n, full.n);
    for (size_t i = 0; i < lean.n; i++) {
        assert_true(lean.w[i].start == full.w[i].start);
        assert_int_equal(lean.w[i].st.count, full.w[i].st.count * (i == 0 ? 2 : 1));
        assert_null(lean.w[i].sk.b);
        assert_int_equal(bdb_sketch_count(&lean.w[i].sk), 0);
    }
    bdb_window out;
    out.start = lean.w[0].start;
    bdb_stats_init(&out.st);
    bdb_sketch_init_default(&out.sk);
    assert_int_equal(bdb_rollup_fold(&lean, INT64_MIN, INT64_MAX, &out), BDB_OK);
    assert_int_equal(out.st.count, full.w[0].st.count + 400);
    assert_int_equal(bdb_sketch_count(&out.sk), 0);
    bdb_sketch_free(&out.sk);
    bdb_rollup_free(&full);
    bdb_rollup_free(&lean);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pyramid_uniform),
        cmocka_unit_test(test_stats_only_sketches),
        cmocka_unit_test(test_pyramid_skewed),
        cmocka_unit_test(test_pyramid_constant),
        cmocka_unit_test(test_partial_windows_merge),
        cmocka_unit_test(test_nonfinite_and_negative_time),
        cmocka_unit_test(test_encoding),
        cmocka_unit_test(test_encoding_part),
        cmocka_unit_test(test_route),
        cmocka_unit_test(test_append_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
