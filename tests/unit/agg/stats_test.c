/* agg/stats: every statistic of a window against an exact computation (long double,
 * two passes) on uniform, normal, skewed (lognormal, Pareto), constant, negative,
 * mixed-sign, tiny, huge and large-offset data, at every tier of the pyramid (60
 * minute windows -> 1 hour, 24 hours -> 1 day, 1,440 minutes -> 1 day); the textbook
 * sum-of-squares formula failing where M2 does not; merge laws; the encoding (round
 * trips, sizes, canonical form, every kind of malformed input rejected); a fixed-seed
 * corruption loop. BDB_AGG_FIGURES=1 prints the measured errors. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "agg/stats.h"
#include "bucketdb/bdb.h"
#include "common/buf.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MINUTE 60
#define HOUR 3600
#define DAY 86400

static uint64_t rng_state;

static uint64_t rng(void) /* splitmix64 */
{
    uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static double unif(void) /* (0, 1) */
{
    return ((double)(rng() >> 11) + 0.5) / 9007199254740992.0;
}

static double normal(void)
{
    return sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif());
}

enum {
    DS_UNIFORM,
    DS_NORMAL,
    DS_LOGNORMAL,
    DS_PARETO,
    DS_CONSTANT,
    DS_NEGATIVE,
    DS_MIXED,
    DS_TINY,
    DS_HUGE,
    DS_OFFSET,
    DS_COUNT
};
static const char *ds_name[DS_COUNT] = {"uniform [0,100)",        "normal 20+-5",
                                        "lognormal s=1.5",        "pareto a=1.16",
                                        "constant 42.7",          "negative -lognormal",
                                        "mixed sign, 10% zeros",  "tiny 1e-100 x lognormal",
                                        "huge 1e100 x lognormal", "offset 1e9+U(0,1)"};

static double gen(int ds)
{
    switch (ds) {
    case DS_UNIFORM:
        return 100.0 * unif();
    case DS_NORMAL:
        return 20.0 + 5.0 * normal();
    case DS_LOGNORMAL:
        return exp(1.5 * normal());
    case DS_PARETO:
        return pow(unif(), -1.0 / 1.16);
    case DS_CONSTANT:
        return 42.7;
    case DS_NEGATIVE:
        return -exp(1.5 * normal());
    case DS_MIXED:
        return unif() < 0.1 ? 0.0 : 50.0 * normal();
    case DS_TINY:
        return 1e-100 * exp(normal());
    case DS_HUGE:
        return 1e100 * exp(normal());
    default:
        return 1e9 + unif();
    }
}

static double *day_of(int ds, uint64_t seed)
{
    rng_state = seed;
    double *x = malloc(DAY * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < DAY; i++)
        x[i] = gen(ds);
    return x;
}

/* The exact statistics, up to long double rounding: a compensated sum, then the sum of
 * squared deviations from that mean in a second pass. */
typedef struct {
    size_t n;
    double min, max;
    long double sum, sumabs, mean, m2;
} ref_stats;

static ref_stats reference(const double *x, size_t n)
{
    ref_stats r = {n, x[0], x[0], 0, 0, 0, 0};
    long double c = 0;
    for (size_t i = 0; i < n; i++) {
        long double t = r.sum + x[i];
        if (fabsl(r.sum) >= fabsl((long double)x[i]))
            c += (r.sum - t) + x[i];
        else
            c += ((long double)x[i] - t) + r.sum;
        r.sum = t;
        r.sumabs += fabs(x[i]);
        if (x[i] < r.min)
            r.min = x[i];
        if (x[i] > r.max)
            r.max = x[i];
    }
    r.sum += c;
    r.mean = r.sum / (long double)n;
    for (size_t i = 0; i < n; i++) {
        long double d = (long double)x[i] - r.mean;
        r.m2 += d * d;
    }
    return r;
}

static double rel(double got, long double want)
{
    if (want == 0)
        return got == 0 ? 0 : INFINITY;
    return (double)(fabsl((long double)got - want) / fabsl(want));
}

/* Largest relative errors seen, for the figures. */
typedef struct {
    double sum, mean, sd_pop, sd_sample;
} errs;

static void track(double *worst, double e)
{
    if (e > *worst)
        *worst = e;
}

/* Every statistic of s against the reference of x[0..n). */
static void check_window(const bdb_stats *s, const double *x, size_t n, errs *e)
{
    ref_stats r = reference(x, n);
    assert_int_equal(bdb_stats_count(s), n);
    assert_true(bdb_stats_min(s) == r.min);
    assert_true(bdb_stats_max(s) == r.max);
    /* The sum is exact to a couple of ulps of itself, not of the sum of |x|: a
     * double-double accumulator does not lose the cancelled digits. */
    double sum = bdb_stats_sum(s);
    assert_true(fabsl((long double)sum - r.sum) <=
                2 * DBL_EPSILON * fabsl(r.sum) + 1e-24L * r.sumabs);
    double mean = bdb_stats_mean(s);
    assert_true(fabsl((long double)mean - r.mean) <=
                2 * DBL_EPSILON * fabsl(r.mean) + 1e-24L * r.sumabs / n);
    assert_true(mean >= r.min && mean <= r.max);
    double pop = bdb_stats_stddev_pop(s), sample = bdb_stats_stddev_sample(s);
    long double want_pop = sqrtl(r.m2 / n), want_sample = n > 1 ? sqrtl(r.m2 / (n - 1)) : NAN;
    if (r.min == r.max) {
        assert_true(pop == 0.0);
        assert_true(n > 1 ? sample == 0.0 : isnan(sample));
    } else {
        assert_true(rel(pop, want_pop) <= 1e-12);
        assert_true(n < 2 || rel(sample, want_sample) <= 1e-12);
    }
    if (e) {
        track(&e->sum, rel(sum, r.sum));
        track(&e->mean, rel(mean, r.mean));
        if (r.min != r.max) {
            track(&e->sd_pop, rel(pop, want_pop));
            if (n > 1)
                track(&e->sd_sample, rel(sample, want_sample));
        }
    }
}

static int figures(void)
{
    const char *f = getenv("BDB_AGG_FIGURES");
    return f && *f && strcmp(f, "0") != 0;
}

/* ------------------------------------------------------------ the pyramid */

static void test_pyramid_every_dataset(void **state)
{
    (void)state;
    if (figures())
        printf("figure stats: dataset | tier | max rel err sum, mean, stddev pop, stddev sample\n");
    for (int ds = 0; ds < DS_COUNT; ds++) {
        double *x = day_of(ds, 1000 + (uint64_t)ds);
        static bdb_stats minute[DAY / MINUTE], hour[DAY / HOUR];
        bdb_stats raw_day, day_from_hours, day_from_minutes;
        bdb_stats_init(&raw_day);
        bdb_stats_init(&day_from_hours);
        bdb_stats_init(&day_from_minutes);
        errs em = {0}, eh = {0}, ed = {0};
        for (size_t m = 0; m < DAY / MINUTE; m++) {
            bdb_stats_init(&minute[m]);
            for (size_t i = m * MINUTE; i < (m + 1) * MINUTE; i++) {
                assert_int_equal(bdb_stats_add(&minute[m], x[i]), BDB_OK);
                assert_int_equal(bdb_stats_add(&raw_day, x[i]), BDB_OK);
            }
            check_window(&minute[m], x + m * MINUTE, MINUTE, &em);
            assert_int_equal(bdb_stats_merge(&day_from_minutes, &minute[m]), BDB_OK);
        }
        for (size_t h = 0; h < DAY / HOUR; h++) {
            bdb_stats_init(&hour[h]);
            for (size_t m = h * 60; m < (h + 1) * 60; m++)
                assert_int_equal(bdb_stats_merge(&hour[h], &minute[m]), BDB_OK);
            check_window(&hour[h], x + h * HOUR, HOUR, &eh);
            assert_int_equal(bdb_stats_merge(&day_from_hours, &hour[h]), BDB_OK);
        }
        check_window(&raw_day, x, DAY, &ed);
        check_window(&day_from_hours, x, DAY, &ed);
        check_window(&day_from_minutes, x, DAY, &ed);
        /* count, min and max agree exactly whichever way the day was built */
        assert_int_equal(day_from_hours.count, raw_day.count);
        assert_true(day_from_hours.min == raw_day.min && day_from_hours.max == raw_day.max);
        if (figures()) {
            printf("figure stats: %-24s | minute | %.1e %.1e %.1e %.1e\n", ds_name[ds], em.sum,
                   em.mean, em.sd_pop, em.sd_sample);
            printf("figure stats: %-24s | hour   | %.1e %.1e %.1e %.1e\n", ds_name[ds], eh.sum,
                   eh.mean, eh.sd_pop, eh.sd_sample);
            printf("figure stats: %-24s | day    | %.1e %.1e %.1e %.1e\n", ds_name[ds], ed.sum,
                   ed.mean, ed.sd_pop, ed.sd_sample);
        }
        free(x);
    }
}

/* Uneven windows too: a late minute with 1 reading, one with 7, one empty. */
static void test_uneven_windows(void **state)
{
    (void)state;
    rng_state = 77;
    double x[1000];
    for (size_t i = 0; i < 1000; i++)
        x[i] = gen(DS_LOGNORMAL);
    size_t cuts[] = {0, 1, 1, 8, 500, 999, 1000};
    bdb_stats all;
    bdb_stats_init(&all);
    for (size_t c = 0; c + 1 < sizeof cuts / sizeof *cuts; c++) {
        bdb_stats w;
        bdb_stats_init(&w);
        for (size_t i = cuts[c]; i < cuts[c + 1]; i++)
            bdb_stats_add(&w, x[i]);
        if (cuts[c + 1] > cuts[c])
            check_window(&w, x + cuts[c], cuts[c + 1] - cuts[c], NULL);
        assert_int_equal(bdb_stats_merge(&all, &w), BDB_OK);
    }
    check_window(&all, x, 1000, NULL);
}

/* The textbook one-pass formula sqrt((sum x^2 - (sum x)^2 / n) / n) cancels when the
 * mean is large against the spread; M2 does not. */
static void test_offset_defeats_sum_of_squares(void **state)
{
    (void)state;
    double *x = day_of(DS_OFFSET, 5);
    bdb_stats s;
    bdb_stats_init(&s);
    double sum = 0, sumsq = 0;
    for (size_t i = 0; i < DAY; i++) {
        bdb_stats_add(&s, x[i]);
        sum += x[i];
        sumsq += x[i] * x[i];
    }
    ref_stats r = reference(x, DAY);
    long double want = sqrtl(r.m2 / DAY);
    double var = (sumsq - sum * sum / DAY) / DAY;
    double textbook = var > 0 ? sqrt(var) : 0.0;
    assert_true(rel(textbook, want) > 1e-2); /* not one digit right */
    assert_true(rel(bdb_stats_stddev_pop(&s), want) <= 1e-12);
    if (figures())
        printf(
            "figure stats: offset 1e9+U(0,1) day stddev: exact %.15Lg, M2 %.15g, textbook %.6g\n",
            want, bdb_stats_stddev_pop(&s), textbook);
    free(x);
}

/* A run of readings at once (bdb_stats_add_n, what the 1-minute windows from raw
 * use): every dataset's minutes within the same bounds as one reading at a time, count,
 * min and max exactly equal, into an empty window and into one that holds readings. */
static void test_add_n_every_dataset(void **state)
{
    (void)state;
    for (int ds = 0; ds < DS_COUNT; ds++) {
        double *x = day_of(ds, 2000 + (uint64_t)ds);
        errs e = {0};
        for (size_t m = 0; m < 120; m++) {
            const double *w = x + m * MINUTE;
            bdb_stats one, run, half;
            bdb_stats_init(&one);
            bdb_stats_init(&run);
            bdb_stats_init(&half);
            for (size_t i = 0; i < MINUTE; i++)
                assert_int_equal(bdb_stats_add(&one, w[i]), BDB_OK);
            assert_int_equal(bdb_stats_add_n(&run, w, MINUTE), BDB_OK);
            assert_int_equal(bdb_stats_add_n(&half, w, MINUTE / 3), BDB_OK);
            assert_int_equal(bdb_stats_add_n(&half, w + MINUTE / 3, MINUTE - MINUTE / 3), BDB_OK);
            check_window(&run, w, MINUTE, &e);
            check_window(&half, w, MINUTE, &e);
            assert_int_equal(run.count, one.count);
            assert_true(run.min == one.min && run.max == one.max);
            assert_true(bdb_stats_mean(&run) == bdb_stats_mean(&one));
        }
        free(x);
    }
    /* equal readings: no spread at all */
    double c[5] = {0.1, 0.1, 0.1, 0.1, 0.1};
    bdb_stats s;
    bdb_stats_init(&s);
    assert_int_equal(bdb_stats_add_n(&s, c, 5), BDB_OK);
    assert_true(s.m2 == 0.0 && bdb_stats_stddev_pop(&s) == 0.0);
    /* a reading that is not finite: nothing taken */
    double bad[3] = {1.0, NAN, 2.0};
    bdb_stats before = s;
    assert_int_equal(bdb_stats_add_n(&s, bad, 3), BDB_ERR_INVALID);
    assert_memory_equal(&s, &before, sizeof s);
    /* past the count limit: nothing taken */
    s.count = BDB_STATS_MAX_COUNT - 1;
    before = s;
    assert_int_equal(bdb_stats_add_n(&s, c, 2), BDB_ERR_LIMIT);
    assert_memory_equal(&s, &before, sizeof s);
    assert_int_equal(bdb_stats_add_n(&s, c, 0), BDB_OK);
}

/* ------------------------------------------------------------ edge cases */

static void test_constant_is_exact(void **state)
{
    (void)state;
    const double vals[] = {0.0, 0.1, -0.3, 42.7, 1e-300, 123456789.123, -1e300, 5e-324};
    for (size_t k = 0; k < sizeof vals / sizeof *vals; k++) {
        bdb_stats a, b;
        bdb_stats_init(&a);
        bdb_stats_init(&b);
        for (int i = 0; i < 1000; i++)
            bdb_stats_add(i < 400 ? &a : &b, vals[k]);
        bdb_stats_merge(&a, &b);
        assert_true(bdb_stats_mean(&a) == vals[k]);
        assert_true(bdb_stats_min(&a) == vals[k] && bdb_stats_max(&a) == vals[k]);
        assert_true(bdb_stats_stddev_pop(&a) == 0.0);
        assert_true(bdb_stats_stddev_sample(&a) == 0.0);
        assert_true(a.m2 == 0.0);
    }
}

static void test_small_counts(void **state)
{
    (void)state;
    bdb_stats s;
    bdb_stats_init(&s);
    assert_int_equal(bdb_stats_count(&s), 0);
    assert_true(bdb_stats_sum(&s) == 0.0);
    assert_true(isnan(bdb_stats_min(&s)) && isnan(bdb_stats_max(&s)));
    assert_true(isnan(bdb_stats_mean(&s)));
    assert_true(isnan(bdb_stats_stddev_pop(&s)) && isnan(bdb_stats_stddev_sample(&s)));
    bdb_stats_add(&s, 1.0);
    assert_true(bdb_stats_stddev_pop(&s) == 0.0);
    assert_true(isnan(bdb_stats_stddev_sample(&s)));
    assert_true(bdb_stats_mean(&s) == 1.0);
    bdb_stats_add(&s, 3.0);
    assert_true(bdb_stats_mean(&s) == 2.0);
    assert_true(bdb_stats_var_pop(&s) == 1.0);
    assert_true(bdb_stats_var_sample(&s) == 2.0);
    assert_true(bdb_stats_stddev_sample(&s) == sqrt(2.0));
    assert_true(bdb_stats_sum(&s) == 4.0);
}

static void test_rejects_non_finite(void **state)
{
    (void)state;
    bdb_stats s, before;
    bdb_stats_init(&s);
    bdb_stats_add(&s, 2.5);
    before = s;
    assert_int_equal(bdb_stats_add(&s, NAN), BDB_ERR_INVALID);
    assert_int_equal(bdb_stats_add(&s, INFINITY), BDB_ERR_INVALID);
    assert_int_equal(bdb_stats_add(&s, -INFINITY), BDB_ERR_INVALID);
    assert_memory_equal(&s, &before, sizeof s);
    /* -0.0 counts as 0.0 */
    bdb_stats z;
    bdb_stats_init(&z);
    bdb_stats_add(&z, -0.0);
    assert_false(signbit(bdb_stats_min(&z)) || signbit(bdb_stats_sum(&z)));
    /* count limit */
    bdb_stats big = s;
    big.count = BDB_STATS_MAX_COUNT;
    big.sum_hi = ldexp(2.5 * (double)BDB_STATS_MAX_COUNT, -64);
    before = big;
    assert_int_equal(bdb_stats_add(&big, 2.5), BDB_ERR_LIMIT);
    assert_int_equal(bdb_stats_merge(&big, &s), BDB_ERR_LIMIT);
    assert_memory_equal(&big, &before, sizeof big);
}

/* Values so large that squares overflow: M2 saturates at +inf, never NaN; a sum past
 * DBL_MAX reads +-inf but the mean stays right, also when sums past +DBL_MAX and past
 * -DBL_MAX merge; everything still encodes and decodes. */
static void test_overflow_saturates(void **state)
{
    (void)state;
    bdb_stats s, t;
    bdb_stats_init(&s);
    for (int i = 0; i < 10; i++)
        bdb_stats_add(&s, i % 2 ? 1.7e308 : -1.7e308);
    assert_false(isnan(bdb_stats_stddev_pop(&s)));
    assert_true(bdb_stats_stddev_pop(&s) == INFINITY);
    assert_true(bdb_stats_mean(&s) >= -1.7e308 && bdb_stats_mean(&s) <= 1.7e308);
    bdb_stats_init(&t);
    for (int i = 0; i < 10; i++)
        bdb_stats_add(&t, 1e308 + i * 1e292);
    assert_true(bdb_stats_sum(&t) == INFINITY);
    assert_true(bdb_stats_mean(&t) >= 1e308 && bdb_stats_mean(&t) <= 1e308 + 9e292);
    assert_false(isnan(bdb_stats_stddev_pop(&t)));
    bdb_stats u;
    bdb_stats_init(&u);
    for (int i = 0; i < 10; i++)
        bdb_stats_add(&u, -1e308);
    assert_true(bdb_stats_sum(&u) == -INFINITY);
    bdb_stats tu = t;
    bdb_stats_merge(&tu, &u);
    double want = 0; /* each reading minus 1e308, exactly */
    for (int i = 0; i < 10; i++)
        want += (1e308 + i * 1e292) - 1e308;
    assert_true(fabs(bdb_stats_sum(&tu) - want) <= 1e-15 * want);
    assert_true(fabs(bdb_stats_mean(&tu) - want / 20) <= 1e-15 * want / 20);
    bdb_stats_merge(&s, &t);
    assert_false(isnan(bdb_stats_stddev_pop(&s)) || isnan(bdb_stats_mean(&s)));
    bdb_stats *both[] = {&s, &t};
    for (int k = 0; k < 2; k++) {
        bdb_buf b;
        bdb_buf_init(&b);
        bdb_stats_write(both[k], &b);
        bdb_stats d;
        assert_int_equal(bdb_stats_decode(&d, b.data, b.len), BDB_OK);
        assert_memory_equal(&d, both[k], sizeof d);
        bdb_buf_free(&b);
    }
    /* spreads so small that the squares are subnormal: imprecise, but they encode and
     * decode (the decoder's bounds leave room for that rounding) */
    const double tiny[][3] = {
        {-1.96046504513860e-160, 0.0, 0.0}, {1e-320, 3e-320, -2e-322}, {5e-324, 0.0, 1e-323}};
    for (int k = 0; k < 3; k++) {
        bdb_stats ts, back;
        bdb_stats_init(&ts);
        for (int rep = 0; rep < 100; rep++)
            for (int i = 0; i < 3; i++)
                bdb_stats_add(&ts, tiny[k][i]);
        bdb_stats_merge(&ts, &ts);
        bdb_buf b;
        bdb_buf_init(&b);
        bdb_stats_write(&ts, &b);
        assert_int_equal(bdb_stats_decode(&back, b.data, b.len), BDB_OK);
        assert_memory_equal(&back, &ts, sizeof back);
        assert_false(isnan(bdb_stats_stddev_pop(&back)));
        bdb_buf_free(&b);
    }
    /* huge but squarable: exact as anywhere else */
    double x[4] = {1e150, 3e150, -2e150, 5e150};
    bdb_stats h;
    bdb_stats_init(&h);
    for (int i = 0; i < 4; i++)
        bdb_stats_add(&h, x[i]);
    check_window(&h, x, 4, NULL);
}

/* ------------------------------------------------------------ merge laws */

static bdb_stats from_range(const double *x, size_t a, size_t b)
{
    bdb_stats s;
    bdb_stats_init(&s);
    for (size_t i = a; i < b; i++)
        bdb_stats_add(&s, x[i]);
    return s;
}

static void assert_close(const bdb_stats *a, const bdb_stats *b)
{
    assert_int_equal(a->count, b->count);
    assert_true(a->min == b->min && a->max == b->max);
    assert_true(fabs(bdb_stats_sum(a) - bdb_stats_sum(b)) <=
                2 * DBL_EPSILON * fabs(bdb_stats_sum(a)));
    assert_true(fabs(a->m2 - b->m2) <= 1e-13 * a->m2);
}

static void test_merge_laws(void **state)
{
    (void)state;
    for (int ds = 0; ds < DS_COUNT; ds++) {
        rng_state = 99 + (uint64_t)ds;
        double x[3000];
        for (size_t i = 0; i < 3000; i++)
            x[i] = gen(ds);
        bdb_stats a = from_range(x, 0, 700), b = from_range(x, 700, 1900),
                  c = from_range(x, 1900, 3000), e;
        bdb_stats_init(&e);
        /* identity */
        bdb_stats t = a;
        bdb_stats_merge(&t, &e);
        assert_memory_equal(&t, &a, sizeof t);
        t = e;
        bdb_stats_merge(&t, &a);
        assert_memory_equal(&t, &a, sizeof t);
        /* commutative: the sum bit for bit, M2 to rounding */
        bdb_stats ab = a, ba = b;
        bdb_stats_merge(&ab, &b);
        bdb_stats_merge(&ba, &a);
        assert_true(ab.sum_hi == ba.sum_hi && ab.sum_lo == ba.sum_lo);
        assert_close(&ab, &ba);
        /* associative */
        bdb_stats ab_c = ab, bc = b, a_bc = a;
        bdb_stats_merge(&ab_c, &c);
        bdb_stats_merge(&bc, &c);
        bdb_stats_merge(&a_bc, &bc);
        assert_close(&ab_c, &a_bc);
        check_window(&ab_c, x, 3000, NULL);
        /* self-merge doubles the data */
        bdb_stats aa = a;
        assert_int_equal(bdb_stats_merge(&aa, &aa), BDB_OK);
        assert_int_equal(aa.count, 1400);
        assert_true(bdb_stats_mean(&aa) == bdb_stats_mean(&a));
        if (a.min != a.max)
            assert_true(rel(bdb_stats_var_pop(&aa), bdb_stats_var_pop(&a)) <= 1e-14);
    }
}

/* ------------------------------------------------------------ encoding */

static size_t encode(const bdb_stats *s, uint8_t *out)
{
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_stats_write(s, &b);
    size_t n = b.len;
    memcpy(out, b.data, n);
    bdb_buf_free(&b);
    return n;
}

/* A few windows of every shape, for the round trips and the corruption loop. */
static size_t sample_windows(bdb_stats *out, size_t max)
{
    size_t n = 0;
    bdb_stats_init(&out[n++]);
    for (int ds = 0; ds < DS_COUNT && n + 3 <= max; ds++) {
        rng_state = 500 + (uint64_t)ds;
        for (int len = 1; len <= 1000; len *= 10) {
            bdb_stats_init(&out[n]);
            for (int i = 0; i < len; i++)
                bdb_stats_add(&out[n], gen(ds));
            n++;
        }
    }
    return n;
}

static void test_encode_roundtrip(void **state)
{
    (void)state;
    bdb_stats w[64];
    size_t n = sample_windows(w, 64);
    uint8_t buf[64], again[64];
    int with_lo = 0;
    for (size_t k = 0; k < n; k++) {
        size_t len = encode(&w[k], buf);
        if (w[k].count == 0)
            assert_int_equal(len, 2);
        else if (w[k].min == w[k].max)
            assert_int_equal(len,
                             1 + (w[k].count < 128 ? 1 : 2) + 1 + 16 + (w[k].sum_lo != 0 ? 8 : 0));
        else
            assert_true(len >= 35 && len <= 50);
        with_lo += w[k].sum_lo != 0;
        bdb_stats d;
        assert_int_equal(bdb_stats_decode(&d, buf, len), BDB_OK);
        assert_memory_equal(&d, &w[k], sizeof d);
        assert_int_equal(encode(&d, again), len);
        assert_memory_equal(again, buf, len);
        /* trailing bytes: corrupt for decode, left for the next reader by read */
        buf[len] = 0x01;
        buf[len + 1] = 0x00; /* an empty window */
        assert_int_equal(bdb_stats_decode(&d, buf, len + 2), BDB_ERR_CORRUPT);
        bdb_dec dec;
        bdb_dec_init(&dec, buf, len + 2);
        assert_int_equal(bdb_stats_read(&d, &dec), BDB_OK);
        assert_int_equal(bdb_stats_read(&d, &dec), BDB_OK);
        assert_int_equal(d.count, 0);
        assert_int_equal(bdb_dec_left(&dec), 0);
        /* every truncation is rejected and leaves the output alone */
        for (size_t cut = 0; cut < len; cut++) {
            bdb_stats keep = w[0];
            assert_int_equal(bdb_stats_decode(&keep, buf, cut), BDB_ERR_CORRUPT);
            assert_memory_equal(&keep, &w[0], sizeof keep);
        }
    }
    assert_true(with_lo > 0); /* the compensation term is exercised */
}

static void put_f64_at(uint8_t *p, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    bdb_put_u64le(p, u);
}

/* Hand-made encodings that break one rule each. */
static void test_decode_rejects(void **state)
{
    (void)state;
    bdb_stats d;
    /* a good spread window to break: version 1, count 3, flags SPREAD, min, hi, max, m2
     * (values 1, 2, 3) */
    uint8_t good[1 + 1 + 1 + 32];
    uint8_t *p = good;
    *p++ = 1;
    *p++ = 3;
    *p++ = 0x01;
    put_f64_at(p, 1.0);
    put_f64_at(p + 8, ldexp(6.0, -64)); /* sums are stored scaled by 2^-64 */
    put_f64_at(p + 16, 3.0);
    put_f64_at(p + 24, 2.0);
    assert_int_equal(bdb_stats_decode(&d, good, sizeof good), BDB_OK);
    assert_true(bdb_stats_mean(&d) == 2.0 && bdb_stats_var_sample(&d) == 1.0);

    struct {
        size_t at; /* byte offset, or a double's offset for f64 */
        int is_f64;
        double f;
        uint8_t byte;
    } breaks[] = {
        {0, 0, 0, 2},         /* unknown version */
        {0, 0, 0, 0},         /* version 0 */
        {2, 0, 0, 0x05},      /* unknown flag */
        {2, 0, 0, 0x00},      /* no SPREAD flag: the rest becomes trailing bytes */
        {3, 1, NAN, 0},       /* min NaN */
        {3, 1, INFINITY, 0},  /* min inf */
        {3, 1, 4.0, 0},       /* min > max */
        {3, 1, 3.0, 0},       /* SPREAD with min == max */
        {3, 1, -0.0, 0},      /* negative zero: not canonical */
        {11, 1, NAN, 0},      /* sum NaN */
        {11, 1, 0x1p-58, 0},  /* sum above count * max */
        {11, 1, -1.0, 0},     /* sum below count * min */
        {11, 1, INFINITY, 0}, /* a scaled sum never overflows */
        {11, 1, 6.0, 0},      /* not scaled */
        {19, 1, NAN, 0},      /* max NaN */
        {27, 1, -1.0, 0},     /* negative M2 */
        {27, 1, NAN, 0},      /* M2 NaN */
        {27, 1, -0.0, 0},     /* M2 -0 */
        {27, 1, 100.0, 0},    /* M2 past Popoviciu's bound 3 * (3-1)^2 / 4 = 3 */
    };
    for (size_t k = 0; k < sizeof breaks / sizeof *breaks; k++) {
        uint8_t bad[sizeof good];
        memcpy(bad, good, sizeof good);
        if (breaks[k].is_f64)
            put_f64_at(bad + breaks[k].at, breaks[k].f);
        else
            bad[breaks[k].at] = breaks[k].byte;
        assert_int_equal(bdb_stats_decode(&d, bad, sizeof bad), BDB_ERR_CORRUPT);
    }
    /* a sum past DBL_MAX is a finite scaled sum */
    uint8_t big[sizeof good];
    memcpy(big, good, sizeof good);
    put_f64_at(big + 3, 1e308);
    put_f64_at(big + 11, ldexp(1e308, -64) * 3.5);
    put_f64_at(big + 19, 1.5e308);
    put_f64_at(big + 27, 1e300);
    assert_int_equal(bdb_stats_decode(&d, big, sizeof big), BDB_OK);
    assert_true(bdb_stats_sum(&d) == INFINITY);
    assert_true(bdb_stats_mean(&d) == ldexp(ldexp(1e308, -64) * 3.5 / 3, 64));
    put_f64_at(big + 11, -INFINITY);
    assert_int_equal(bdb_stats_decode(&d, big, sizeof big), BDB_ERR_CORRUPT);

    /* count rules */
    uint8_t nonmin[] = {1, 0x80, 0x00}; /* count 0 in two bytes */
    assert_int_equal(bdb_stats_decode(&d, nonmin, sizeof nonmin), BDB_ERR_CORRUPT);
    uint8_t empty[] = {1, 0x00};
    assert_int_equal(bdb_stats_decode(&d, empty, sizeof empty), BDB_OK);
    /* count 1 must be flagless with sum == min */
    uint8_t one[1 + 1 + 1 + 16 + 8];
    one[0] = 1;
    one[1] = 1;
    one[2] = 0;
    put_f64_at(one + 3, 7.0);
    put_f64_at(one + 11, ldexp(7.0, -64));
    assert_int_equal(bdb_stats_decode(&d, one, 19), BDB_OK);
    put_f64_at(one + 11, ldexp(7.5, -64));
    assert_int_equal(bdb_stats_decode(&d, one, 19), BDB_ERR_CORRUPT);
    put_f64_at(one + 11, ldexp(7.0, -64));
    one[2] = 0x02; /* with a lo term */
    put_f64_at(one + 19, 1e-20);
    assert_int_equal(bdb_stats_decode(&d, one, 27), BDB_ERR_CORRUPT);
    /* lo must be nonzero and below half an ulp of hi */
    uint8_t lo[1 + 1 + 1 + 24];
    lo[0] = 1;
    lo[1] = 2;
    lo[2] = 0x02;
    put_f64_at(lo + 3, 1.0);
    put_f64_at(lo + 11, ldexp(2.0, -64));
    put_f64_at(lo + 19, ldexp(1e-17, -64));
    assert_int_equal(bdb_stats_decode(&d, lo, sizeof lo), BDB_OK);
    put_f64_at(lo + 19, 0.0);
    assert_int_equal(bdb_stats_decode(&d, lo, sizeof lo), BDB_ERR_CORRUPT);
    put_f64_at(lo + 19, ldexp(1e-10, -64));
    assert_int_equal(bdb_stats_decode(&d, lo, sizeof lo), BDB_ERR_CORRUPT);
    /* count past 2^53 */
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_putc(&b, 1);
    bdb_buf_put_uvarint(&b, BDB_STATS_MAX_COUNT + 1);
    bdb_buf_putc(&b, 0);
    bdb_buf_put_u64le(&b, 0);
    bdb_buf_put_u64le(&b, 0);
    assert_int_equal(bdb_stats_decode(&d, b.data, b.len), BDB_ERR_CORRUPT);
    bdb_buf_free(&b);
}

/* Random damage to valid encodings never crashes; whatever is accepted re-encodes to
 * the same bytes and answers sanely. */
static void test_corruption_loop(void **state)
{
    (void)state;
    bdb_stats w[64];
    size_t nw = sample_windows(w, 64);
    rng_state = 4242;
    size_t accepted = 0;
    for (int iter = 0; iter < 200000; iter++) {
        uint8_t buf[80], again[80];
        size_t len = encode(&w[rng() % nw], buf);
        int edits = 1 + (int)(rng() % 4);
        for (int e = 0; e < edits; e++) {
            switch (rng() % 5) {
            case 0: /* flip a bit */
                buf[rng() % len] ^= (uint8_t)(1u << (rng() % 8));
                break;
            case 1: /* a random byte */
                buf[rng() % len] = (uint8_t)rng();
                break;
            case 2: /* truncate */
                len = rng() % (len + 1);
                break;
            case 3: /* append */
                if (len < sizeof buf)
                    buf[len++] = (uint8_t)rng();
                break;
            default: /* splice a double's worth from elsewhere */
                if (len >= 16) {
                    size_t a = rng() % (len - 8), b = rng() % (len - 8);
                    memmove(buf + a, buf + b, 8);
                }
            }
            if (len == 0)
                break;
        }
        bdb_stats d;
        if (bdb_stats_decode(&d, buf, len) != BDB_OK)
            continue;
        accepted++;
        assert_int_equal(encode(&d, again), len);
        assert_memory_equal(again, buf, len);
        if (d.count == 0)
            continue;
        double mean = bdb_stats_mean(&d), sd = bdb_stats_stddev_pop(&d);
        assert_true(mean >= d.min && mean <= d.max);
        assert_false(isnan(sd));
        assert_true(sd <= (d.max - d.min) / 2 * (1 + 1e-6) + 0x1p-530);
        bdb_stats m = w[nw - 1];
        assert_int_equal(bdb_stats_merge(&m, &d), BDB_OK);
        assert_false(isnan(bdb_stats_stddev_pop(&m)) || isnan(bdb_stats_mean(&m)));
    }
    assert_true(accepted > 0);
    if (figures())
        printf("figure stats: corruption loop: 200000 damaged encodings, %zu accepted (all "
               "canonical and sane)\n",
               accepted);
}

/* The compact forms (C1 of tier version 3, C2 of version 5): every sample window back
 * bit for bit, the bytes again from the decoded window, skip_c steps over exactly one,
 * every truncation refused, and a decimal minute in the documented size. */
static void compact_roundtrip(int form)
{
    bdb_stats w[64];
    size_t n = sample_windows(w, 64);
    size_t tried = 0;
    for (size_t k = 0; k < n; k++) {
        if (w[k].count == 0)
            continue; /* a tier window is never empty */
        tried++;
        bdb_buf b, again;
        bdb_buf_init(&b);
        bdb_buf_init(&again);
        bdb_stats_write_c(&w[k], form, &b);
        size_t len = b.len;
        bdb_stats_write_c(&w[k], form, &b); /* a second one after it */
        bdb_dec d;
        bdb_dec_init(&d, b.data, b.len);
        bdb_stats r;
        assert_int_equal(bdb_stats_read_c(&r, &d, form), BDB_OK);
        assert_int_equal(b.len - bdb_dec_left(&d), len);
        assert_memory_equal(&r, &w[k], sizeof r);
        bdb_stats_write_c(&r, form, &again);
        assert_int_equal(again.len, len);
        assert_memory_equal(again.data, b.data, len);
        bdb_dec_init(&d, b.data, b.len);
        assert_int_equal(bdb_stats_skip_c(&d, form), BDB_OK);
        assert_int_equal(b.len - bdb_dec_left(&d), len);
        /* stepping over it (framing only) ends where reading it does, with its count */
        uint64_t cnt = 0;
        bdb_dec_init(&d, b.data, b.len);
        assert_int_equal(bdb_stats_skip_count_c(&d, form, &cnt), BDB_OK);
        assert_int_equal(cnt, w[k].count);
        assert_int_equal(b.len - bdb_dec_left(&d), len);
        for (size_t cut = 0; cut < len; cut++) {
            bdb_dec_init(&d, b.data, cut);
            assert_int_equal(bdb_stats_read_c(&r, &d, form), BDB_ERR_CORRUPT);
            bdb_dec_init(&d, b.data, cut);
            assert_int_equal(bdb_stats_skip_count_c(&d, form, &cnt), BDB_ERR_CORRUPT);
        }
        bdb_buf_free(&b);
        bdb_buf_free(&again);
    }
    assert_true(tried > 10);
    /* six readings of two decimals: count, flags, three 3-byte numbers, sum_lo, m2 */
    bdb_stats s;
    bdb_stats_init(&s);
    const double v[6] = {51.27, 51.31, 51.18, 51.4, 51.33, 51.29};
    for (int i = 0; i < 6; i++)
        assert_int_equal(bdb_stats_add(&s, v[i]), BDB_OK);
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_stats_write_c(&s, form, &b);
    assert_true(b.len <= 1 + 1 + 3 * 3 + 8 + (s.sum_lo != 0 ? 4 : 0));
    if (form == BDB_C2) /* max and the sum as differences: a byte each here */
        assert_true(b.len <= 1 + 1 + 3 + 1 + 8 + 1 + (s.sum_lo != 0 ? 4 : 0));
    bdb_buf_reset(&b);
    bdb_stats_init(&s);
    assert_int_equal(bdb_stats_add(&s, 21.5), BDB_OK);
    bdb_stats_write_c(&s, form, &b);
    assert_int_equal(b.len, 1 + 2); /* count 1 and the reading */
    /* not canonical: C_RAWSUM with a sum that unscales to a finite double */
    bdb_buf_reset(&b);
    bdb_buf_put_uvarint(&b, 2);
    bdb_buf_putc(&b, 0x04);
    bdb_buf_put_num(&b, 21.5);
    bdb_buf_put_f64(&b, ldexp(43.0, -64));
    bdb_dec d;
    bdb_dec_init(&d, b.data, b.len);
    bdb_stats r;
    assert_int_equal(bdb_stats_read_c(&r, &d, form), BDB_ERR_CORRUPT);
    /* the same window written right reads back */
    bdb_stats two;
    bdb_stats_init(&two);
    bdb_stats_add(&two, 21.5);
    bdb_stats_add(&two, 21.5);
    bdb_buf_reset(&b);
    bdb_stats_write_c(&two, form, &b);
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(bdb_stats_read_c(&r, &d, form), BDB_OK);
    assert_memory_equal(&r, &two, sizeof r);
    /* an even sum_lo mantissa, and a count of 0, are not the writer's */
    const uint8_t zero[] = {0};
    bdb_dec_init(&d, zero, 1);
    assert_int_equal(bdb_stats_read_c(&r, &d, form), BDB_ERR_CORRUPT);
    bdb_buf_free(&b);
}

static void test_compact_roundtrip(void **state)
{
    (void)state;
    compact_roundtrip(BDB_C1);
    compact_roundtrip(BDB_C2);
    /* one tiny negative reading: its scaled sum underflows, to 0.0 and not -0.0, which
     * every decoder refuses (found by fuzz_sketch) */
    bdb_stats s, r;
    bdb_stats_init(&s);
    assert_int_equal(bdb_stats_add(&s, -0x1.c0b6f7f6p-1021), BDB_OK);
    assert_false(signbit(s.sum_hi));
    for (int form = 0; form <= BDB_C2; form++) { /* 0: the version 1 encoding */
        bdb_buf b;
        bdb_buf_init(&b);
        if (form)
            bdb_stats_write_c(&s, form, &b);
        else
            bdb_stats_write(&s, &b);
        bdb_dec d;
        bdb_dec_init(&d, b.data, b.len);
        assert_int_equal(form ? bdb_stats_read_c(&r, &d, form) : bdb_stats_read(&r, &d), BDB_OK);
        assert_memory_equal(&r, &s, sizeof r);
        bdb_buf_free(&b);
    }
}

/* The delta form is C2's alone and C2 takes it whenever it exists: C1 refuses the
 * flag, C2 refuses C1's bytes of a window that has a delta form and reads those of one
 * that has none (a raw double); every single-bit change of every sample window's C2
 * bytes is refused or encodes back to exactly the changed bytes (one encoding per
 * window). 100 windows of 30 readings of a random walk in hundredths take the
 * documented bytes in each form. */
static void test_compact_c2(void **state)
{
    (void)state;
    bdb_stats s, r;
    bdb_stats_init(&s);
    const double v[6] = {51.27, 51.31, 51.18, 51.4, 51.33, 51.29};
    for (int i = 0; i < 6; i++)
        assert_int_equal(bdb_stats_add(&s, v[i]), BDB_OK);
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_stats_write_c(&s, BDB_C2, &b);
    assert_true(b.data[1] & 0x08); /* the delta form */
    bdb_dec d;
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(bdb_stats_read_c(&r, &d, BDB_C1), BDB_ERR_CORRUPT);
    uint64_t cnt;
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(bdb_stats_skip_count_c(&d, BDB_C1, &cnt), BDB_ERR_CORRUPT);
    bdb_buf_reset(&b);
    bdb_stats_write_c(&s, BDB_C1, &b);
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(bdb_stats_read_c(&r, &d, BDB_C2), BDB_ERR_CORRUPT);
    assert_int_equal(bdb_stats_add(&s, 1.0 / 3.0), BDB_OK); /* no decimal form now */
    bdb_buf_reset(&b);
    bdb_stats_write_c(&s, BDB_C1, &b);
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(bdb_stats_read_c(&r, &d, BDB_C2), BDB_OK);
    assert_memory_equal(&r, &s, sizeof r);
    /* one encoding per window */
    bdb_stats w[64];
    size_t n = sample_windows(w, 64), tried = 0, refused = 0;
    bdb_buf again;
    bdb_buf_init(&again);
    for (size_t k = 0; k < n; k++) {
        if (w[k].count == 0)
            continue;
        bdb_buf_reset(&b);
        bdb_stats_write_c(&w[k], BDB_C2, &b);
        for (size_t bit = 0; bit < b.len * 8; bit++) {
            b.data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            bdb_dec_init(&d, b.data, b.len);
            tried++;
            if (bdb_stats_read_c(&r, &d, BDB_C2) != BDB_OK || bdb_dec_left(&d) != 0) {
                refused++;
            } else {
                bdb_buf_reset(&again);
                bdb_stats_write_c(&r, BDB_C2, &again);
                if (again.len != b.len || memcmp(again.data, b.data, b.len) != 0)
                    fail_msg("window %zu bit %zu: decoded, but encodes otherwise", k, bit);
            }
            b.data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        }
    }
    assert_true(tried > 1000 && refused > 0);
    /* sizes */
    uint64_t x = 88172645463325252ull;
    int cents = 5127;
    size_t c1 = 0, c2 = 0;
    for (int win = 0; win < 100; win++) {
        bdb_stats_init(&s);
        for (int i = 0; i < 30; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            cents += (int)(x % 101) - 50;
            assert_int_equal(bdb_stats_add(&s, cents / 100.0), BDB_OK);
        }
        bdb_buf_reset(&b);
        bdb_stats_write_c(&s, BDB_C1, &b);
        c1 += b.len;
        bdb_buf_reset(&b);
        bdb_stats_write_c(&s, BDB_C2, &b);
        c2 += b.len;
        bdb_dec_init(&d, b.data, b.len);
        assert_int_equal(bdb_stats_read_c(&r, &d, BDB_C2), BDB_OK);
        assert_memory_equal(&r, &s, sizeof r);
    }
    printf("100 windows of 30 readings: statistics C1 %zu bytes, C2 %zu bytes\n", c1, c2);
    assert_int_equal(c1, 2287);
    assert_int_equal(c2, 2022);
    bdb_buf_free(&b);
    bdb_buf_free(&again);
}

/* The decoder's absolute room for subnormal sums and squares (n * 2^-1074 on the sum,
 * n * 2^-1060 on m2) still decides a window that only it lets through: the checks try
 * without it first, and that shortcut must neither widen nor narrow what passes. */
static void test_absolute_room(void **state)
{
    (void)state;
    /* three readings in [0, 1e-300]: n min = 0, so the relative room is nothing */
    const double sums[] = {-0x1p-1073, -0x1p-1072, 0x1p-1073};
    const int ok[] = {1, 0, 1}; /* 2 and 4 units below 0, the room being 3 */
    for (int k = 0; k < 3; k++) {
        bdb_stats s = {.count = 3, .min = 0.0, .max = 1e-300, .sum_hi = sums[k]};
        bdb_buf b;
        bdb_buf_init(&b);
        for (int form = BDB_C1; form <= BDB_C2; form++) {
            bdb_buf_reset(&b);
            bdb_stats_write_c(&s, form, &b);
            bdb_dec d;
            bdb_dec_init(&d, b.data, b.len);
            bdb_stats r;
            assert_int_equal(bdb_stats_read_c(&r, &d, form), ok[k] ? BDB_OK : BDB_ERR_CORRUPT);
        }
        bdb_buf_free(&b);
    }
    /* a spread whose (max - min)^2 / 4 underflows to 0: m2 within n * 2^-1060 passes,
     * beyond it does not */
    const double m2s[] = {0.0, 0x1p-1060, 0x1p-1058};
    const int m2ok[] = {1, 1, 0};
    for (int k = 0; k < 3; k++) {
        bdb_stats s = {.count = 3, .min = 0.0, .max = 0x1p-540, .m2 = m2s[k]};
        s.sum_hi = s.max * 0x1p-64; /* readings 0, 0 and max */
        bdb_buf b;
        bdb_buf_init(&b);
        for (int form = BDB_C1; form <= BDB_C2; form++) {
            bdb_buf_reset(&b);
            bdb_stats_write_c(&s, form, &b);
            bdb_dec d;
            bdb_dec_init(&d, b.data, b.len);
            bdb_stats r;
            assert_int_equal(bdb_stats_read_c(&r, &d, form), m2ok[k] ? BDB_OK : BDB_ERR_CORRUPT);
        }
        bdb_buf_free(&b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pyramid_every_dataset),
        cmocka_unit_test(test_absolute_room),
        cmocka_unit_test(test_uneven_windows),
        cmocka_unit_test(test_add_n_every_dataset),
        cmocka_unit_test(test_offset_defeats_sum_of_squares),
        cmocka_unit_test(test_constant_is_exact),
        cmocka_unit_test(test_small_counts),
        cmocka_unit_test(test_rejects_non_finite),
        cmocka_unit_test(test_overflow_saturates),
        cmocka_unit_test(test_merge_laws),
        cmocka_unit_test(test_encode_roundtrip),
        cmocka_unit_test(test_decode_rejects),
        cmocka_unit_test(test_corruption_loop),
        cmocka_unit_test(test_compact_roundtrip),
        cmocka_unit_test(test_compact_c2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
