/* agg/sketch: the relative-error guarantee against exact order statistics on uniform,
 * normal, skewed (lognormal, Pareto), constant, negative, mixed-sign, tiny, huge and
 * zero-heavy data at every tier (1 minute, 60 minutes -> 1 hour, 24 hours -> 1 day,
 * 1,440 minutes -> 1 day: a daily p99 from minute sketches); exact merging (the same
 * bytes however values are split, ordered and merged, also when buckets collapse);
 * the collapse bound; edge values; parameters; the encoding (round trips, canonical
 * form, malformed input rejected); a fixed-seed corruption loop.
 * BDB_AGG_FIGURES=1 prints the measured errors and sizes. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "agg/sketch.h"
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
#define ALPHA 0.01
/* log() rounding may put a value at a bucket boundary one bucket over */
#define BOUND(alpha) ((alpha) * (1 + 1e-9))

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
    DS_ZEROS,
    DS_WALK,
    DS_COUNT
};
static const char *ds_name[DS_COUNT] = {"uniform [0,100)",        "normal 20+-5",
                                        "lognormal s=1.5",        "pareto a=1.16",
                                        "constant 42.7",          "negative -lognormal",
                                        "mixed sign, 10% zeros",  "tiny 1e-100 x lognormal",
                                        "huge 1e100 x lognormal", "70% zeros, pareto",
                                        "temperature walk 0.01 C"};

static double walk;

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
    case DS_ZEROS:
        return unif() < 0.7 ? 0.0 : pow(unif(), -1.0 / 1.16);
    default: /* a thermometer: 0.01 degree steps around 21 C */
        walk += (double)((int)(rng() % 3) - 1) * 0.01;
        if (walk < -3 || walk > 3)
            walk *= 0.9;
        return round((21.0 + walk) * 100) / 100;
    }
}

static double *data_of(int ds, uint64_t seed, size_t n)
{
    rng_state = seed;
    walk = 0;
    double *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = gen(ds);
    return x;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorted copy of x[0..n). */
static double *sorted(const double *x, size_t n)
{
    double *s = malloc(n * sizeof *s);
    assert_non_null(s);
    memcpy(s, x, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    return s;
}

/* The exact q-quantile as the sketch defines it: the k-th smallest, k = floor(q(n-1)). */
static double exact_q(const double *sorted_x, size_t n, double q)
{
    return sorted_x[(size_t)floor(q * (double)(n - 1))];
}

static double rel_err(double est, double exact)
{
    if (exact == 0)
        return est == 0 ? 0 : INFINITY;
    return fabs(est - exact) / fabs(exact);
}

static int figures(void)
{
    const char *f = getenv("BDB_AGG_FIGURES");
    return f && *f && strcmp(f, "0") != 0;
}

static void encode(const bdb_sketch *s, bdb_buf *b)
{
    bdb_buf_reset(b);
    bdb_sketch_write(s, b);
}

static void assert_same_sketch(const bdb_sketch *a, const bdb_sketch *b)
{
    bdb_buf x, y;
    bdb_buf_init(&x);
    bdb_buf_init(&y);
    encode(a, &x);
    encode(b, &y);
    assert_int_equal(x.len, y.len);
    assert_memory_equal(x.data, y.data, x.len);
    assert_int_equal(a->n, b->n);
    for (uint32_t i = 0; i < a->n; i++)
        assert_true(a->b[i].key == b->b[i].key && a->b[i].count == b->b[i].count);
    assert_true(a->count == b->count && a->min == b->min && a->max == b->max);
    assert_int_equal(a->collapsed, b->collapsed);
    bdb_buf_free(&x);
    bdb_buf_free(&y);
}

static const double QS[3] = {0.5, 0.95, 0.99};

/* Checks p50/p95/p99 (and, if sweep, every q on a 0.001 grid) of s against the exact
 * values of x[0..n); returns the worst relative error at each of p50/p95/p99. */
static void check_quantiles(const bdb_sketch *s, const double *x, size_t n, int sweep,
                            double worst[3])
{
    double *sx = sorted(x, n);
    double alpha = bdb_sketch_alpha(s);
    assert_int_equal(bdb_sketch_count(s), n);
    assert_true(bdb_sketch_min(s) == sx[0] && bdb_sketch_max(s) == sx[n - 1]);
    assert_true(bdb_sketch_quantile(s, 0.0) == sx[0]);
    assert_true(bdb_sketch_quantile(s, 1.0) == sx[n - 1]);
    for (int k = 0; k < 3; k++) {
        double e = rel_err(bdb_sketch_quantile(s, QS[k]), exact_q(sx, n, QS[k]));
        assert_true(e <= BOUND(alpha));
        if (e > worst[k])
            worst[k] = e;
    }
    if (sweep) {
        double prev = -INFINITY;
        for (int i = 0; i <= 1000; i++) {
            double q = i / 1000.0, est = bdb_sketch_quantile(s, q);
            assert_true(rel_err(est, exact_q(sx, n, q)) <= BOUND(alpha));
            assert_true(est >= prev); /* monotone in q */
            prev = est;
        }
    }
    free(sx);
}

static bdb_sketch sketch_of(const double *x, size_t n, double alpha, uint32_t max_buckets)
{
    bdb_sketch s;
    assert_int_equal(bdb_sketch_init(&s, alpha, max_buckets), BDB_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(bdb_sketch_add(&s, x[i]), BDB_OK);
    return s;
}

/* ------------------------------------------------------------ the pyramid */

static void test_pyramid_every_dataset(void **state)
{
    (void)state;
    if (figures())
        printf("figure sketch: dataset | max rel err p50 p95 p99 (minute; hour; day) | bytes "
               "minute avg/max, day | buckets day\n");
    bdb_buf enc;
    bdb_buf_init(&enc);
    for (int ds = 0; ds < DS_COUNT; ds++) {
        double *x = data_of(ds, 2000 + (uint64_t)ds, DAY);
        static bdb_sketch minute[DAY / MINUTE];
        bdb_sketch hour[DAY / HOUR], from_hours, from_minutes;
        bdb_sketch_init_default(&from_hours);
        bdb_sketch_init_default(&from_minutes);
        double wm[3] = {0}, wh[3] = {0}, wd[3] = {0};
        size_t minute_bytes = 0, minute_max = 0;
        for (size_t m = 0; m < DAY / MINUTE; m++) {
            minute[m] = sketch_of(x + m * MINUTE, MINUTE, ALPHA, BDB_SKETCH_MAX_BUCKETS);
            check_quantiles(&minute[m], x + m * MINUTE, MINUTE, 0, wm);
            encode(&minute[m], &enc);
            minute_bytes += enc.len;
            if (enc.len > minute_max)
                minute_max = enc.len;
            assert_int_equal(bdb_sketch_merge(&from_minutes, &minute[m]), BDB_OK);
        }
        for (size_t h = 0; h < DAY / HOUR; h++) {
            bdb_sketch_init_default(&hour[h]);
            for (size_t m = h * 60; m < (h + 1) * 60; m++)
                assert_int_equal(bdb_sketch_merge(&hour[h], &minute[m]), BDB_OK);
            /* the hour from 60 minute sketches is the sketch of the hour's raw data */
            bdb_sketch direct = sketch_of(x + h * HOUR, HOUR, ALPHA, BDB_SKETCH_MAX_BUCKETS);
            assert_same_sketch(&hour[h], &direct);
            bdb_sketch_free(&direct);
            check_quantiles(&hour[h], x + h * HOUR, HOUR, 0, wh);
            assert_int_equal(bdb_sketch_merge(&from_hours, &hour[h]), BDB_OK);
        }
        /* 24 hours, 1,440 minutes and the raw day: one sketch, byte for byte */
        bdb_sketch day = sketch_of(x, DAY, ALPHA, BDB_SKETCH_MAX_BUCKETS);
        assert_same_sketch(&from_hours, &day);
        assert_same_sketch(&from_minutes, &day);
        assert_false(day.collapsed);
        check_quantiles(&from_minutes, x, DAY, 1, wd);
        encode(&day, &enc);
        assert_true(enc.len <= 25 + 5 * (size_t)day.n); /* a few bytes per bucket */
        if (ds == DS_WALK) /* a slowly moving sensor costs next to nothing */
            assert_true(minute_max <= 40 && enc.len <= 64);
        if (figures())
            printf("figure sketch: %-24s | %.5f %.5f %.5f; %.5f %.5f %.5f; %.5f %.5f %.5f | "
                   "%.1f/%zu, %zu | %u\n",
                   ds_name[ds], wm[0], wm[1], wm[2], wh[0], wh[1], wh[2], wd[0], wd[1], wd[2],
                   (double)minute_bytes / (DAY / MINUTE), minute_max, enc.len, day.n);
        for (size_t m = 0; m < DAY / MINUTE; m++)
            bdb_sketch_free(&minute[m]);
        for (size_t h = 0; h < DAY / HOUR; h++)
            bdb_sketch_free(&hour[h]);
        bdb_sketch_free(&from_hours);
        bdb_sketch_free(&from_minutes);
        bdb_sketch_free(&day);
        free(x);
    }
    bdb_buf_free(&enc);
}

/* The headline: a daily p99 from 1,440 minute sketches against the exact daily
 * p99, on the data sets where a p99 is hardest (heavy tails). */
static void test_daily_p99_from_minutes(void **state)
{
    (void)state;
    const int sets[] = {DS_LOGNORMAL, DS_PARETO, DS_MIXED, DS_WALK};
    for (size_t k = 0; k < sizeof sets / sizeof *sets; k++) {
        double *x = data_of(sets[k], 31337 + k, DAY);
        bdb_sketch day;
        bdb_sketch_init_default(&day);
        for (size_t m = 0; m < DAY / MINUTE; m++) {
            bdb_sketch ms = sketch_of(x + m * MINUTE, MINUTE, ALPHA, BDB_SKETCH_MAX_BUCKETS);
            assert_int_equal(bdb_sketch_merge(&day, &ms), BDB_OK);
            bdb_sketch_free(&ms);
        }
        double *sx = sorted(x, DAY);
        double exact = exact_q(sx, DAY, 0.99), est = bdb_sketch_quantile(&day, 0.99);
        assert_true(rel_err(est, exact) <= BOUND(ALPHA));
        if (figures())
            printf("figure sketch: daily p99 from 1440 minute sketches, %s: exact %.6g, sketch "
                   "%.6g, rel err %.5f\n",
                   ds_name[sets[k]], exact, est, rel_err(est, exact));
        free(sx);
        free(x);
        bdb_sketch_free(&day);
    }
}

/* Other accuracies keep their own bound. */
static void test_other_alphas(void **state)
{
    (void)state;
    const double alphas[] = {0.0001, 0.001, 0.005, 0.02, 0.05, 0.25};
    double *x = data_of(DS_MIXED, 8, 20000);
    uint32_t prev_n = UINT32_MAX;
    for (size_t k = 0; k < sizeof alphas / sizeof *alphas; k++) {
        bdb_sketch s = sketch_of(x, 20000, alphas[k], BDB_SKETCH_BUCKETS_MAX);
        assert_true(bdb_sketch_alpha(&s) == alphas[k]);
        double w[3] = {0};
        check_quantiles(&s, x, 20000, 1, w);
        assert_true(s.n <= prev_n); /* coarser buckets, fewer of them */
        prev_n = s.n;
        bdb_sketch_free(&s);
    }
    free(x);
}

/* ------------------------------------------------------------ merge laws */

static void test_merge_order_free(void **state)
{
    (void)state;
    const uint32_t limits[] = {BDB_SKETCH_MAX_BUCKETS, 24};
    enum { PARTS = 12, N = 6000 };
    for (size_t l = 0; l < 2; l++) {
        for (int ds = 0; ds < DS_COUNT; ds++) {
            double *x = data_of(ds, 9000 + (uint64_t)ds, N);
            if (l == 1) /* a range wide enough to collapse 24 buckets */
                for (size_t i = 0; i < N; i++)
                    x[i] *= exp(4 * normal());
            bdb_sketch whole = sketch_of(x, N, ALPHA, limits[l]);
            assert_true(whole.n <= limits[l]);
            if (l == 1 && ds != DS_CONSTANT)
                assert_true(whole.collapsed);
            /* shuffled adds */
            double *y = malloc(N * sizeof *y);
            memcpy(y, x, N * sizeof *y);
            for (size_t i = N - 1; i > 0; i--) {
                size_t j = rng() % (i + 1);
                double t = y[i];
                y[i] = y[j];
                y[j] = t;
            }
            bdb_sketch shuffled = sketch_of(y, N, ALPHA, limits[l]);
            assert_same_sketch(&shuffled, &whole);
            /* every value to a random part (some parts may stay empty) */
            bdb_sketch part[PARTS], ltr, rtl;
            for (int p = 0; p < PARTS; p++)
                bdb_sketch_init(&part[p], ALPHA, limits[l]);
            for (size_t i = 0; i < N; i++)
                assert_int_equal(bdb_sketch_add(&part[rng() % (i < N / 2 ? PARTS : 3)], x[i]),
                                 BDB_OK);
            bdb_sketch_init(&ltr, ALPHA, limits[l]);
            bdb_sketch_init(&rtl, ALPHA, limits[l]);
            for (int p = 0; p < PARTS; p++) {
                assert_int_equal(bdb_sketch_merge(&ltr, &part[p]), BDB_OK);
                assert_int_equal(bdb_sketch_merge(&rtl, &part[PARTS - 1 - p]), BDB_OK);
            }
            assert_same_sketch(&ltr, &whole);
            assert_same_sketch(&rtl, &whole);
            /* a random tree: merge two random survivors until one is left */
            int alive = PARTS;
            while (alive > 1) {
                int i = (int)(rng() % (uint64_t)alive), j = (int)(rng() % (uint64_t)alive);
                if (i == j)
                    continue;
                assert_int_equal(bdb_sketch_merge(&part[i], &part[j]), BDB_OK);
                bdb_sketch_free(&part[j]);
                part[j] = part[alive - 1];
                alive--;
            }
            assert_same_sketch(&part[0], &whole);
            bdb_sketch_free(&part[0]);
            bdb_sketch_free(&ltr);
            bdb_sketch_free(&rtl);
            bdb_sketch_free(&whole);
            bdb_sketch_free(&shuffled);
            free(y);
            free(x);
        }
    }
}

/* Self-merge doubles every count; merging an empty sketch changes nothing. */
static void test_merge_identity_and_self(void **state)
{
    (void)state;
    double *x = data_of(DS_MIXED, 5, 5000);
    bdb_sketch s = sketch_of(x, 5000, ALPHA, BDB_SKETCH_MAX_BUCKETS), e, t, twice;
    bdb_sketch_init_default(&e);
    bdb_sketch_init_default(&t);
    assert_int_equal(bdb_sketch_copy(&t, &s), BDB_OK);
    assert_int_equal(bdb_sketch_merge(&t, &e), BDB_OK);
    assert_same_sketch(&t, &s);
    assert_int_equal(bdb_sketch_merge(&e, &s), BDB_OK);
    assert_same_sketch(&e, &s);
    assert_int_equal(bdb_sketch_merge(&t, &t), BDB_OK);
    bdb_sketch_init_default(&twice);
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < 5000; i++)
            bdb_sketch_add(&twice, x[i]);
    assert_same_sketch(&t, &twice);
    /* add_n is n adds */
    bdb_sketch_reset(&t);
    for (size_t i = 0; i < 5000; i++)
        assert_int_equal(bdb_sketch_add_n(&t, x[i], 2), BDB_OK);
    assert_same_sketch(&t, &twice);
    bdb_sketch_free(&s);
    bdb_sketch_free(&e);
    bdb_sketch_free(&t);
    bdb_sketch_free(&twice);
    free(x);
}

/* ------------------------------------------------------------ collapse */

/* 256 buckets over lognormal values (s = 2) of both signs, which need about 1,200: the
 * lowest buckets fold,
 * every rank from bdb_sketch_accurate_from keeps the bound, the ranks below it are
 * over-estimated (never by less than -alpha); minute sketches still merge to the day's sketch, and
 * a merge with a smaller limit gives the sketch built with that limit. */
static void test_collapse_bound(void **state)
{
    (void)state;
    const size_t n = 30000;
    rng_state = 606;
    double *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (unif() < 0.2 ? -1 : 1) * exp(2 * normal());
    bdb_sketch s = sketch_of(x, n, ALPHA, 256);
    assert_int_equal(s.n, 256);
    assert_true(s.collapsed);
    uint64_t from = bdb_sketch_accurate_from(&s);
    assert_true(from > n / 2 && from < 0.99 * (n - 1)); /* p99 still holds, p50 not */
    double *sx = sorted(x, n);
    size_t accurate = 0;
    for (int i = 0; i <= 10000; i++) {
        double q = i / 10000.0, est = bdb_sketch_quantile(&s, q);
        size_t k = (size_t)floor(q * (double)(n - 1));
        if (k >= from) {
            assert_true(rel_err(est, sx[k]) <= BOUND(ALPHA));
            accurate++;
        } else {
            assert_true(est >= sx[k] - BOUND(ALPHA) * fabs(sx[k]));
        }
    }
    assert_true(accurate > 0);
    assert_true(rel_err(bdb_sketch_quantile(&s, 0.99), exact_q(sx, n, 0.99)) <= BOUND(ALPHA));
    /* minute-sized pieces merge to the same collapsed sketch */
    bdb_sketch m;
    bdb_sketch_init(&m, ALPHA, 256);
    for (size_t a = 0; a < n; a += MINUTE) {
        bdb_sketch p = sketch_of(x + a, MINUTE, ALPHA, 256);
        assert_int_equal(bdb_sketch_merge(&m, &p), BDB_OK);
        bdb_sketch_free(&p);
    }
    assert_same_sketch(&m, &s);
    /* a default sketch merged into a 256-bucket one, and the other way round */
    bdb_sketch wide = sketch_of(x, n / 2, ALPHA, BDB_SKETCH_MAX_BUCKETS);
    bdb_sketch narrow = sketch_of(x + n / 2, n - n / 2, ALPHA, 256);
    assert_false(wide.collapsed);
    bdb_sketch w2;
    bdb_sketch_init_default(&w2);
    bdb_sketch_copy(&w2, &wide);
    assert_int_equal(bdb_sketch_merge(&wide, &narrow), BDB_OK);
    assert_int_equal(wide.max_buckets, 256);
    assert_same_sketch(&wide, &s);
    assert_int_equal(bdb_sketch_merge(&narrow, &w2), BDB_OK);
    assert_same_sketch(&narrow, &s);
    bdb_sketch_free(&s);
    bdb_sketch_free(&m);
    bdb_sketch_free(&wide);
    bdb_sketch_free(&narrow);
    bdb_sketch_free(&w2);
    free(sx);
    free(x);
}

/* ------------------------------------------------------------ edges */

static void test_edge_values(void **state)
{
    (void)state;
    bdb_sketch s;
    bdb_sketch_init_default(&s);
    assert_true(isnan(bdb_sketch_quantile(&s, 0.5)));
    assert_true(isnan(bdb_sketch_min(&s)) && isnan(bdb_sketch_max(&s)));
    assert_int_equal(bdb_sketch_count(&s), 0);
    /* one value: every quantile is that value exactly */
    bdb_sketch_add(&s, 3.14159);
    for (int i = 0; i <= 100; i++)
        assert_true(bdb_sketch_quantile(&s, i / 100.0) == 3.14159);
    assert_true(isnan(bdb_sketch_quantile(&s, -0.01)));
    assert_true(isnan(bdb_sketch_quantile(&s, 1.01)));
    assert_true(isnan(bdb_sketch_quantile(&s, NAN)));
    /* zeros, negative zero */
    bdb_sketch_reset(&s);
    assert_int_equal(bdb_sketch_count(&s), 0);
    for (int i = 0; i < 10; i++)
        bdb_sketch_add(&s, i % 2 ? 0.0 : -0.0);
    assert_int_equal(s.n, 1);
    assert_true(bdb_sketch_quantile(&s, 0.5) == 0.0);
    assert_false(signbit(bdb_sketch_min(&s)) || signbit(bdb_sketch_quantile(&s, 0.3)));
    /* the extremes of the doubles: every rank within the bound, nothing infinite */
    double ext[] = {DBL_TRUE_MIN, 2 * DBL_TRUE_MIN, DBL_MIN,  1e-300,  1.0,      1e300,
                    DBL_MAX / 2,  DBL_MAX,          -DBL_MAX, -1e-310, -DBL_MIN, 0.0};
    size_t n = sizeof ext / sizeof *ext;
    bdb_sketch e = sketch_of(ext, n, ALPHA, BDB_SKETCH_MAX_BUCKETS);
    double w[3] = {0};
    check_quantiles(&e, ext, n, 1, w);
    /* rejected values leave the sketch alone */
    bdb_buf before, after;
    bdb_buf_init(&before);
    bdb_buf_init(&after);
    encode(&e, &before);
    assert_int_equal(bdb_sketch_add(&e, NAN), BDB_ERR_INVALID);
    assert_int_equal(bdb_sketch_add(&e, INFINITY), BDB_ERR_INVALID);
    assert_int_equal(bdb_sketch_add(&e, -INFINITY), BDB_ERR_INVALID);
    assert_int_equal(bdb_sketch_add_n(&e, 1.0, 0), BDB_ERR_INVALID);
    assert_int_equal(bdb_sketch_add_n(&e, 1.0, UINT64_MAX), BDB_ERR_LIMIT);
    bdb_sketch other;
    assert_int_equal(bdb_sketch_init(&other, 0.02, BDB_SKETCH_MAX_BUCKETS), BDB_OK);
    bdb_sketch_add(&other, 1.0);
    assert_int_equal(bdb_sketch_merge(&e, &other), BDB_ERR_INVALID); /* another alpha */
    encode(&e, &after);
    assert_int_equal(before.len, after.len);
    assert_memory_equal(before.data, after.data, before.len);
    /* counts near the top of uint64 */
    bdb_sketch big;
    bdb_sketch_init_default(&big);
    assert_int_equal(bdb_sketch_add_n(&big, 5.0, UINT64_MAX - 1), BDB_OK);
    assert_int_equal(bdb_sketch_add(&big, -5.0), BDB_OK);
    assert_int_equal(bdb_sketch_add(&big, 5.0), BDB_ERR_LIMIT);
    assert_int_equal(bdb_sketch_merge(&big, &big), BDB_ERR_LIMIT);
    assert_true(rel_err(bdb_sketch_quantile(&big, 0.5), 5.0) <= BOUND(ALPHA));
    assert_true(bdb_sketch_quantile(&big, 0.0) == -5.0);
    bdb_buf_free(&before);
    bdb_buf_free(&after);
    bdb_sketch_free(&s);
    bdb_sketch_free(&e);
    bdb_sketch_free(&other);
    bdb_sketch_free(&big);
}

static void test_parameters(void **state)
{
    (void)state;
    bdb_sketch s;
    assert_int_equal(bdb_sketch_init(&s, 0.01, 2048), BDB_OK);
    assert_true(bdb_sketch_alpha(&s) == 0.01);
    bdb_sketch_free(&s);
    const double bad_alpha[] = {0.0, -0.01, 0.00009, 0.2500001, 0.3, 1.0, NAN, INFINITY, 0.0123456};
    for (size_t k = 0; k < sizeof bad_alpha / sizeof *bad_alpha; k++) {
        assert_int_equal(bdb_sketch_init(&s, bad_alpha[k], 2048), BDB_ERR_INVALID);
        bdb_sketch_free(&s); /* still safe */
    }
    assert_int_equal(bdb_sketch_init(&s, 0.01, 7), BDB_ERR_INVALID);
    assert_int_equal(bdb_sketch_init(&s, 0.01, 65537), BDB_ERR_INVALID);
    assert_int_equal(bdb_sketch_init(&s, 0.0001, 8), BDB_OK);
    assert_int_equal(bdb_sketch_init(&s, 0.25, 65536), BDB_OK);
    bdb_sketch_free(&s);
}

/* ------------------------------------------------------------ encoding */

/* Sketches of every shape, for round trips and the corruption loop. */
static size_t sample_sketches(bdb_sketch *out, size_t max)
{
    size_t n = 0;
    bdb_sketch_init_default(&out[n++]);
    bdb_sketch_init(&out[n], 0.001, 64);
    bdb_sketch_add(&out[n++], 0.0);
    for (int ds = 0; ds < DS_COUNT && n + 3 <= max; ds++) {
        for (int len = 1; len <= 1000; len *= 10) {
            double *x = data_of(ds, 700 + (uint64_t)ds * 10 + (uint64_t)len, (size_t)len);
            out[n++] = sketch_of(x, (size_t)len, ds % 3 ? ALPHA : 0.02,
                                 ds == DS_PARETO ? 8 : BDB_SKETCH_MAX_BUCKETS);
            free(x);
        }
    }
    return n;
}

static void test_encode_roundtrip(void **state)
{
    (void)state;
    bdb_sketch w[64];
    size_t nw = sample_sketches(w, 64);
    bdb_buf b, again;
    bdb_buf_init(&b);
    bdb_buf_init(&again);
    int collapsed = 0;
    for (size_t k = 0; k < nw; k++) {
        encode(&w[k], &b);
        if (k == 0)
            assert_int_equal(b.len, 9);
        collapsed += w[k].collapsed;
        bdb_sketch d;
        bdb_sketch_init_default(&d);
        assert_int_equal(bdb_sketch_decode(&d, b.data, b.len), BDB_OK);
        assert_same_sketch(&d, &w[k]);
        assert_int_equal(d.alpha_ppm, w[k].alpha_ppm);
        assert_int_equal(d.max_buckets, w[k].max_buckets);
        for (int i = 0; i <= 100; i++) {
            double q1 = bdb_sketch_quantile(&d, i / 100.0),
                   q2 = bdb_sketch_quantile(&w[k], i / 100.0);
            if (!(q1 == q2 || (isnan(q1) && isnan(q2))))
                fail_msg("sketch %zu q %d: %g != %g", k, i, q1, q2);
        }
        encode(&d, &again);
        assert_int_equal(again.len, b.len);
        assert_memory_equal(again.data, b.data, b.len);
        /* two encodings back to back: read takes exactly one; decode wants exactly one */
        size_t len = b.len;
        bdb_sketch_write(&w[0], &b);
        assert_int_equal(bdb_sketch_decode(&d, b.data, b.len), BDB_ERR_CORRUPT);
        assert_same_sketch(&d, &w[k]); /* unchanged by a failed decode */
        bdb_dec dec;
        bdb_dec_init(&dec, b.data, b.len);
        assert_int_equal(bdb_sketch_read(&d, &dec), BDB_OK);
        assert_int_equal(bdb_dec_left(&dec), b.len - len);
        assert_int_equal(bdb_sketch_read(&d, &dec), BDB_OK);
        assert_int_equal(bdb_sketch_count(&d), 0);
        assert_int_equal(bdb_dec_left(&dec), 0);
        /* every truncation is rejected */
        for (size_t cut = 0; cut < len; cut++)
            assert_int_equal(bdb_sketch_decode(&d, b.data, cut), BDB_ERR_CORRUPT);
        bdb_sketch_free(&d);
    }
    assert_true(collapsed > 0);
    for (size_t k = 0; k < nw; k++)
        bdb_sketch_free(&w[k]);
    bdb_buf_free(&b);
    bdb_buf_free(&again);
}

/* A hand-made encoding: header fields, then min, max and the buckets as given. */
typedef struct {
    int version, flags;
    uint64_t ppm, maxb, n_neg, zero, n_pos;
    double min, max;
    int64_t idx[8];
    uint64_t cnt[8]; /* count - 1 as encoded */
} raw_sketch;

static void put_raw(bdb_buf *b, const raw_sketch *r)
{
    bdb_buf_reset(b);
    bdb_buf_putc(b, (uint8_t)r->version);
    bdb_buf_putc(b, (uint8_t)r->flags);
    bdb_buf_put_uvarint(b, r->ppm);
    bdb_buf_put_uvarint(b, r->maxb);
    bdb_buf_put_uvarint(b, r->n_neg);
    bdb_buf_put_uvarint(b, r->zero);
    bdb_buf_put_uvarint(b, r->n_pos);
    if (r->n_neg + r->n_pos + r->zero == 0)
        return;
    uint64_t u;
    memcpy(&u, &r->min, 8);
    bdb_buf_put_u64le(b, u);
    memcpy(&u, &r->max, 8);
    bdb_buf_put_u64le(b, u);
    uint64_t k = 0;
    for (int store = 0; store < 2; store++) {
        uint64_t cnt = store ? r->n_pos : r->n_neg;
        for (uint64_t i = 0; i < cnt; i++, k++) {
            if (i == 0)
                bdb_buf_put_varint(b, r->idx[k]);
            else
                bdb_buf_put_uvarint(b, (uint64_t)(r->idx[k] - r->idx[k - 1] - 1));
            bdb_buf_put_uvarint(b, r->cnt[k]);
        }
    }
}

static int32_t idx_of(double v)
{
    return (int32_t)ceil(log(fabs(v)) / (log1p(ALPHA) - log1p(-ALPHA)));
}

static void test_decode_rejects(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_sketch d;
    bdb_sketch_init_default(&d);
    /* a good one: -2 (x1), 0 (x3), 1.5 (x2) and 10 (x1) */
    const raw_sketch good = {
        1, 0, 10000, 2048, 1, 3, 2, -2, 10, {idx_of(2), idx_of(1.5), idx_of(10)}, {0, 1, 0}};
    put_raw(&b, &good);
    assert_int_equal(bdb_sketch_decode(&d, b.data, b.len), BDB_OK);
    assert_int_equal(bdb_sketch_count(&d), 7);
    assert_true(bdb_sketch_quantile(&d, 0.5) == 0.0);
    assert_true(rel_err(bdb_sketch_quantile(&d, 5.0 / 6), 1.5) <= BOUND(ALPHA));
    /* one broken rule each */
    raw_sketch r;
#define BREAK(stmt)                                                                                \
    do {                                                                                           \
        r = good;                                                                                  \
        stmt;                                                                                      \
        put_raw(&b, &r);                                                                           \
        assert_int_equal(bdb_sketch_decode(&d, b.data, b.len), BDB_ERR_CORRUPT);                   \
    } while (0)
    BREAK(r.version = 2);
    BREAK(r.version = 0);
    BREAK(r.flags = 2);
    BREAK(r.flags = 1); /* collapsed, but fewer buckets than the limit */
    BREAK(r.ppm = 99);  /* alpha out of range */
    BREAK(r.ppm = 250001);
    BREAK(r.ppm = 1ull << 33);
    BREAK(r.maxb = 7); /* limit out of range */
    BREAK(r.maxb = 65537);
    BREAK(r.maxb = 2); /* more buckets than the limit */
    BREAK(r.min = NAN);
    BREAK(r.min = -INFINITY);
    BREAK(r.max = INFINITY);
    BREAK(r.min = 11);    /* min > max */
    BREAK(r.min = -1000); /* min not in the lowest bucket */
    BREAK(r.max = 1000);  /* max not in the top bucket */
    BREAK(r.max = 1.5);
    BREAK(r.idx[2] = idx_of(1.5)); /* not increasing */
    BREAK(r.idx[1] = 5000000);     /* past the index of DBL_MAX */
    BREAK(r.idx[0] = -5000000);
    BREAK(r.cnt[1] = UINT64_MAX); /* count overflows */
    BREAK((r.cnt[0] = UINT64_MAX - 1, r.cnt[2] = 5));
    BREAK(r.n_pos = 3); /* more buckets than bytes */
    /* one value: min == max and a single bucket */
    raw_sketch one = {1, 0, 10000, 2048, 0, 0, 1, 7, 7, {idx_of(7)}, {0}};
    r = one;
    put_raw(&b, &r);
    assert_int_equal(bdb_sketch_decode(&d, b.data, b.len), BDB_OK);
    r.max = 7.01;
    put_raw(&b, &r);
    assert_int_equal(bdb_sketch_decode(&d, b.data, b.len), BDB_ERR_CORRUPT);
    r = one;
    r.n_pos = 2;
    r.idx[1] = idx_of(7) + 3;
    r.cnt[1] = 0;
    put_raw(&b, &r);
    assert_int_equal(bdb_sketch_decode(&d, b.data, b.len), BDB_ERR_CORRUPT);
    r.min = -0.0; /* not canonical */
    r.n_pos = 1;
    r.zero = 1;
    r.max = 7;
    put_raw(&b, &r);
    assert_int_equal(bdb_sketch_decode(&d, b.data, b.len), BDB_ERR_CORRUPT);
    r.min = 0.0;
    put_raw(&b, &r);
    assert_int_equal(bdb_sketch_decode(&d, b.data, b.len), BDB_OK);
    /* an empty sketch is nine bytes of header and nothing else */
    raw_sketch empty = {1, 0, 10000, 2048, 0, 0, 0, 0, 0, {0}, {0}};
    put_raw(&b, &empty);
    assert_int_equal(bdb_sketch_decode(&d, b.data, b.len), BDB_OK);
    assert_int_equal(b.len, 9);
    empty.flags = 1;
    put_raw(&b, &empty);
    assert_int_equal(bdb_sketch_decode(&d, b.data, b.len), BDB_ERR_CORRUPT);
    /* varints in their shortest form only */
    const uint8_t longer[] = {1, 0, 0x90, 0x4e, 0x80, 0x10, 0x80, 0x00, 0, 0};
    assert_int_equal(bdb_sketch_decode(&d, longer, sizeof longer), BDB_ERR_CORRUPT);
    const uint8_t shortest[] = {1, 0, 0x90, 0x4e, 0x80, 0x10, 0, 0, 0};
    assert_int_equal(bdb_sketch_decode(&d, shortest, sizeof shortest), BDB_OK);
    /* a tenth varint byte above 1 carries bits past the 64th (found by fuzz_sketch) */
    uint8_t tenth[] = {1,    0,    0x7f, 0xff, 0x03, 0, 0xbf, 0xff, 0xe7, 0xe7, 0xff,
                       0xff, 0xff, 0xff, 0xff, 0x05, 0, 0,    0,    0,    0,    0,
                       0,    0,    0,    0,    0,    0, 0,    0,    0,    0,    0};
    assert_int_equal(bdb_sketch_decode(&d, tenth, sizeof tenth), BDB_ERR_CORRUPT);
    tenth[15] = 0x01; /* the same count in its one valid form */
    assert_int_equal(bdb_sketch_decode(&d, tenth, sizeof tenth), BDB_OK);
    assert_true(bdb_sketch_count(&d) > UINT64_MAX / 2);
    bdb_sketch_free(&d);
    bdb_buf_free(&b);
#undef BREAK
}

/* Random damage to valid encodings never crashes; whatever is accepted re-encodes to
 * the same bytes, answers monotone quantiles within [min, max] and merges. */
static void test_corruption_loop(void **state)
{
    (void)state;
    bdb_sketch w[64];
    size_t nw = sample_sketches(w, 64);
    bdb_buf *enc = malloc(nw * sizeof *enc);
    for (size_t k = 0; k < nw; k++) {
        bdb_buf_init(&enc[k]);
        encode(&w[k], &enc[k]);
    }
    bdb_buf buf, again;
    bdb_buf_init(&buf);
    bdb_buf_init(&again);
    bdb_sketch d, m;
    bdb_sketch_init_default(&d);
    bdb_sketch_init_default(&m);
    rng_state = 4243;
    size_t accepted = 0;
    for (int iter = 0; iter < 100000; iter++) {
        const bdb_buf *src = &enc[rng() % nw];
        bdb_buf_reset(&buf);
        bdb_buf_append(&buf, src->data, src->len);
        int edits = 1 + (int)(rng() % 4);
        for (int e = 0; e < edits && buf.len > 0; e++) {
            switch (rng() % 5) {
            case 0:
                buf.data[rng() % buf.len] ^= (uint8_t)(1u << (rng() % 8));
                break;
            case 1:
                buf.data[rng() % buf.len] = (uint8_t)rng();
                break;
            case 2:
                buf.len = rng() % (buf.len + 1);
                break;
            case 3:
                bdb_buf_putc(&buf, (uint8_t)rng());
                break;
            default: /* a small-varint byte, the most likely to stay valid */
                buf.data[rng() % buf.len] = (uint8_t)(rng() % 4);
            }
        }
        if (bdb_sketch_decode(&d, buf.data, buf.len) != BDB_OK)
            continue;
        accepted++;
        encode(&d, &again);
        assert_int_equal(again.len, buf.len);
        assert_memory_equal(again.data, buf.data, buf.len);
        double prev = -INFINITY;
        for (int i = 0; i <= 20 && d.count; i++) {
            double v = bdb_sketch_quantile(&d, i / 20.0);
            assert_true(v >= prev && v >= d.min && v <= d.max);
            prev = v;
        }
        bdb_sketch_copy(&m, &w[rng() % nw]);
        int rc = bdb_sketch_merge(&m, &d);
        assert_true(rc == BDB_OK || rc == BDB_ERR_INVALID || rc == BDB_ERR_LIMIT);
        assert_true(rc != BDB_ERR_INVALID || m.alpha_ppm != d.alpha_ppm);
        if (rc == BDB_OK)
            assert_true(m.n <= m.max_buckets);
    }
    assert_true(accepted > 0);
    if (figures())
        printf("figure sketch: corruption loop: 100000 damaged encodings, %zu accepted (all "
               "canonical and sane)\n",
               accepted);
    for (size_t k = 0; k < nw; k++) {
        bdb_sketch_free(&w[k]);
        bdb_buf_free(&enc[k]);
    }
    free(enc);
    bdb_sketch_free(&d);
    bdb_sketch_free(&m);
    bdb_buf_free(&buf);
    bdb_buf_free(&again);
}

/* bdb_sketch_skip refuses the headers bdb_sketch_read refuses, including counts that
 * would wrap around when summed. */
static void test_skip_rejects(void **st)
{
    (void)st;
    const uint64_t big = UINT64_C(1) << 63;
    const struct {
        uint8_t version, flags;
        uint64_t maxb, n_neg, zero, n_pos;
    } bad[] = {
        {BDB_SKETCH_VERSION, 0, UINT64_MAX, big, 5, big},    /* the sum wraps to 0 */
        {BDB_SKETCH_VERSION, 0, UINT64_C(1) << 33, 1, 0, 1}, /* maxb past 2^32 */
        {BDB_SKETCH_VERSION, 0x80, 2048, 1, 0, 1},           /* unknown flag */
        {BDB_SKETCH_VERSION, 0, 2, 1, 1, 1},                 /* more buckets than maxb */
        {BDB_SKETCH_VERSION + 1, 0, 2048, 1, 0, 1},          /* another version */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bdb_buf b;
        bdb_buf_init(&b);
        bdb_buf_putc(&b, bad[i].version);
        bdb_buf_putc(&b, bad[i].flags);
        bdb_buf_put_uvarint(&b, 10000);
        bdb_buf_put_uvarint(&b, bad[i].maxb);
        bdb_buf_put_uvarint(&b, bad[i].n_neg);
        bdb_buf_put_uvarint(&b, bad[i].zero);
        bdb_buf_put_uvarint(&b, bad[i].n_pos);
        for (int k = 0; k < 40; k++)
            bdb_buf_putc(&b, 1);
        bdb_dec d;
        bdb_dec_init(&d, b.data, b.len);
        if (bdb_sketch_skip(&d) != BDB_ERR_CORRUPT)
            fail_msg("case %zu: skip accepted a header read refuses", i);
        assert_true(d.err);
        bdb_sketch sk;
        bdb_sketch_init_default(&sk);
        assert_int_equal(bdb_sketch_decode(&sk, b.data, b.len), BDB_ERR_CORRUPT);
        bdb_sketch_free(&sk);
        bdb_buf_free(&b);
    }
}

/* The compact forms (C1 of tier version 3, C2 of version 4): every sample sketch
 * (collapsed ones and other parameters take the full form behind a 0 byte) back as it
 * was, its bytes again from the decoded one, skip_c over exactly one, truncations
 * refused, the full form of a sketch that has a compact one refused. */
static void compact_roundtrip(int form)
{
    bdb_sketch w[64];
    size_t nw = sample_sketches(w, 64);
    bdb_buf b, again;
    bdb_buf_init(&b);
    bdb_buf_init(&again);
    int full = 0, compact = 0;
    for (size_t k = 0; k < nw; k++) {
        if (w[k].count == 0)
            continue;
        bdb_buf_reset(&b);
        bdb_sketch_write_c(&w[k], form, &b);
        size_t len = b.len;
        if (b.data[0] == 0)
            full++;
        else
            compact++;
        bdb_buf_putc(&b, 0x7f); /* what follows is left alone */
        bdb_sketch d;
        bdb_sketch_init_default(&d);
        bdb_dec dec;
        bdb_dec_init(&dec, b.data, b.len);
        assert_int_equal(bdb_sketch_read_c(&d, &dec, form, w[k].count, w[k].min, w[k].max), BDB_OK);
        assert_int_equal(bdb_dec_left(&dec), 1);
        assert_same_sketch(&d, &w[k]);
        assert_int_equal(d.alpha_ppm, w[k].alpha_ppm);
        assert_int_equal(d.max_buckets, w[k].max_buckets);
        bdb_buf_reset(&again);
        bdb_sketch_write_c(&d, form, &again);
        assert_int_equal(again.len, len);
        assert_memory_equal(again.data, b.data, len);
        bdb_dec_init(&dec, b.data, b.len);
        assert_int_equal(bdb_sketch_skip_c(&dec, form, w[k].count), BDB_OK);
        assert_int_equal(bdb_dec_left(&dec), 1);
        for (size_t cut = 0; cut < len; cut++) {
            bdb_dec_init(&dec, b.data, cut);
            assert_int_equal(bdb_sketch_read_c(&d, &dec, form, w[k].count, w[k].min, w[k].max),
                             BDB_ERR_CORRUPT);
            bdb_dec_init(&dec, b.data, cut);
            assert_int_equal(bdb_sketch_skip_c(&dec, form, w[k].count), BDB_ERR_CORRUPT);
        }
        /* another count than the stats': refused by C1, which repeats every count; C2
         * stores the count once, in the statistics, and its last bucket takes the rest */
        bdb_dec_init(&dec, b.data, len);
        if (form == BDB_C1)
            assert_int_equal(bdb_sketch_read_c(&d, &dec, form, w[k].count + 1, w[k].min, w[k].max),
                             BDB_ERR_CORRUPT);
        if (b.data[0] != 0) { /* the full form where the compact one exists: refused */
            bdb_buf_reset(&again);
            bdb_buf_putc(&again, 0);
            bdb_sketch_write(&w[k], &again);
            bdb_dec_init(&dec, again.data, again.len);
            assert_int_equal(bdb_sketch_read_c(&d, &dec, form, w[k].count, w[k].min, w[k].max),
                             BDB_ERR_CORRUPT);
        }
        bdb_sketch_free(&d);
    }
    assert_true(full > 0 && compact > 0);
    bdb_buf_free(&b);
    bdb_buf_free(&again);
    for (size_t k = 0; k < nw; k++)
        bdb_sketch_free(&w[k]);
}

static void test_compact_roundtrip(void **state)
{
    (void)state;
    compact_roundtrip(BDB_C1);
    compact_roundtrip(BDB_C2);
}

/* One encoding per sketch in C2: every single-bit change of every sample sketch's
 * compact bytes is refused, or decodes to a sketch that encodes to exactly the changed
 * bytes (so no two byte strings mean one sketch: a wrong order k, non-zero padding, an
 * end offset of 3 are all refused). */
static void test_c2_canonical(void **state)
{
    (void)state;
    bdb_sketch w[64];
    size_t nw = sample_sketches(w, 64);
    bdb_buf b, again;
    bdb_buf_init(&b);
    bdb_buf_init(&again);
    size_t tried = 0, refused = 0;
    for (size_t k = 0; k < nw; k++) {
        if (w[k].count == 0)
            continue;
        bdb_buf_reset(&b);
        bdb_sketch_write_c(&w[k], BDB_C2, &b);
        if (b.data[0] == 0 || b.len > 64)
            continue;
        for (size_t bit = 0; bit < b.len * 8; bit++) {
            b.data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            bdb_sketch d;
            bdb_sketch_init_default(&d);
            bdb_dec dec;
            bdb_dec_init(&dec, b.data, b.len);
            int rc = bdb_sketch_read_c(&d, &dec, BDB_C2, w[k].count, w[k].min, w[k].max);
            tried++;
            if (rc != BDB_OK || bdb_dec_left(&dec) != 0) {
                refused++;
            } else {
                bdb_buf_reset(&again);
                bdb_sketch_write_c(&d, BDB_C2, &again);
                if (again.len != b.len || memcmp(again.data, b.data, b.len) != 0)
                    fail_msg("sketch %zu bit %zu: decoded, but encodes otherwise", k, bit);
            }
            bdb_sketch_free(&d);
            b.data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        }
    }
    assert_true(tried > 100 && refused > 0);
    /* hand-made: two buckets of one value each (1 and 2), the last key's offset coded 3 */
    bdb_sketch s;
    bdb_sketch_init_default(&s);
    assert_int_equal(bdb_sketch_add(&s, 1.0), BDB_OK);
    assert_int_equal(bdb_sketch_add(&s, 2.0), BDB_OK);
    bdb_buf_reset(&b);
    bdb_sketch_write_c(&s, BDB_C2, &b);
    assert_int_equal(b.len, 2); /* head (nb 2, first key at min's), then cl 0 and padding */
    assert_int_equal(b.data[1], 0);
    b.data[1] = 0xc0;
    bdb_dec dec;
    bdb_dec_init(&dec, b.data, b.len);
    assert_int_equal(bdb_sketch_read_c(&s, &dec, BDB_C2, 2, 1.0, 2.0), BDB_ERR_CORRUPT);
    bdb_dec_init(&dec, b.data, b.len);
    assert_int_equal(bdb_sketch_skip_c(&dec, BDB_C2, 2), BDB_ERR_CORRUPT);
    b.data[1] = 0x01; /* padding not zero */
    bdb_dec_init(&dec, b.data, b.len);
    assert_int_equal(bdb_sketch_read_c(&s, &dec, BDB_C2, 2, 1.0, 2.0), BDB_ERR_CORRUPT);
    bdb_sketch_free(&s);
    bdb_buf_free(&b);
    bdb_buf_free(&again);
    for (size_t k = 0; k < nw; k++)
        bdb_sketch_free(&w[k]);
}

/* C2's bit codes past 32 bits: bucket counts of billions (a long window of a device
 * that reports one value, merged over years) and a gap across zero (negative and
 * positive readings), back bit for bit in both forms. */
static void test_compact_wide_codes(void **state)
{
    (void)state;
    bdb_sketch s, d;
    bdb_sketch_init_default(&s);
    assert_int_equal(bdb_sketch_add_n(&s, -2.5, UINT64_C(6000000000)), BDB_OK);
    assert_int_equal(bdb_sketch_add_n(&s, 0.0, UINT64_C(5000000001)), BDB_OK);
    assert_int_equal(bdb_sketch_add_n(&s, 1e300, 3), BDB_OK);
    assert_int_equal(bdb_sketch_add(&s, 7.25), BDB_OK);
    for (int form = BDB_C1; form <= BDB_C2; form++) {
        bdb_buf b, again;
        bdb_buf_init(&b);
        bdb_buf_init(&again);
        bdb_sketch_write_c(&s, form, &b);
        assert_int_not_equal(b.data[0], 0); /* the compact form, not the escape */
        bdb_sketch_init_default(&d);
        bdb_dec dec;
        bdb_dec_init(&dec, b.data, b.len);
        assert_int_equal(bdb_sketch_read_c(&d, &dec, form, s.count, s.min, s.max), BDB_OK);
        assert_int_equal(bdb_dec_left(&dec), 0);
        assert_same_sketch(&d, &s);
        bdb_sketch_write_c(&d, form, &again);
        assert_int_equal(again.len, b.len);
        assert_memory_equal(again.data, b.data, b.len);
        bdb_dec_init(&dec, b.data, b.len);
        assert_int_equal(bdb_sketch_skip_c(&dec, form, s.count), BDB_OK);
        assert_int_equal(bdb_dec_left(&dec), 0);
        bdb_sketch_free(&d);
        bdb_buf_free(&b);
        bdb_buf_free(&again);
    }
    bdb_sketch_free(&s);
}

/* What the forms cost on windows like a fleet's (deterministic sizes): six distinct
 * readings, and 30 readings of a random walk in hundredths, as bench/loadgen.c sends. */
static void test_compact_sizes(void **state)
{
    (void)state;
    bdb_sketch s;
    bdb_sketch_init_default(&s);
    const double v[6] = {51.27, 53.31, 55.18, 57.4, 59.33, 61.29};
    for (int i = 0; i < 6; i++)
        assert_int_equal(bdb_sketch_add(&s, v[i]), BDB_OK);
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_sketch_write_c(&s, BDB_C1, &b);
    assert_int_equal(b.len, 7); /* nb, first key, five gaps */
    bdb_buf_reset(&b);
    bdb_sketch_write_c(&s, BDB_C2, &b);
    assert_int_equal(b.len, 3); /* head; cl, k, four gaps of 1 (3 bits each), padding */
    bdb_sketch_reset(&s);
    uint64_t x = 88172645463325252ull;
    int cents = 5127;
    size_t c1 = 0, c2 = 0;
    for (int win = 0; win < 100; win++) {
        bdb_sketch_reset(&s);
        for (int i = 0; i < 30; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            cents += (int)(x % 101) - 50;
            assert_int_equal(bdb_sketch_add(&s, cents / 100.0), BDB_OK);
        }
        bdb_buf_reset(&b);
        bdb_sketch_write_c(&s, BDB_C1, &b);
        c1 += b.len;
        bdb_buf_reset(&b);
        bdb_sketch_write_c(&s, BDB_C2, &b);
        c2 += b.len;
    }
    printf("100 windows of 30 readings: C1 %zu bytes, C2 %zu bytes\n", c1, c2);
    assert_int_equal(c1, 748);
    assert_int_equal(c2, 381);
    bdb_sketch_free(&s);
    bdb_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pyramid_every_dataset),
        cmocka_unit_test(test_daily_p99_from_minutes),
        cmocka_unit_test(test_other_alphas),
        cmocka_unit_test(test_merge_order_free),
        cmocka_unit_test(test_merge_identity_and_self),
        cmocka_unit_test(test_collapse_bound),
        cmocka_unit_test(test_edge_values),
        cmocka_unit_test(test_parameters),
        cmocka_unit_test(test_encode_roundtrip),
        cmocka_unit_test(test_decode_rejects),
        cmocka_unit_test(test_corruption_loop),
        cmocka_unit_test(test_skip_rejects),
        cmocka_unit_test(test_compact_roundtrip),
        cmocka_unit_test(test_c2_canonical),
        cmocka_unit_test(test_compact_wide_codes),
        cmocka_unit_test(test_compact_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
