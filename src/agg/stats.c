#include "agg/stats.h"
#include "agg/stats_int.h"

#include "bucketdb/bdb.h"

#include <math.h>
#include <string.h>

/* Layout (docs/AGGREGATION.md):
 *   u8 version, uvarint count; when count > 0:
 *   u8 flags, f64 min, f64 sum_hi, [f64 sum_lo if FLAG_LO], [f64 max, f64 m2 if FLAG_SPREAD]
 * f64 is the IEEE 754 bit pattern, little endian; sum_hi and sum_lo are scaled by
 * 2^-SCALE like in memory. */
/* Knuth's TwoSum: s + e == a + b exactly, s = fl(a + b). */
static void two_sum(double a, double b, double *s, double *e)
{
    double x = a + b;
    double bb = x - a;
    *e = (a - (x - bb)) + (b - bb);
    *s = x;
}

/* (hi, lo) += (bh, bl), renormalized so that fl(hi + lo) == hi. Scaled sums stay below
 * 2^53 * DBL_MAX * 2^-64 < 2^1013 in magnitude, so this never overflows. */
static void dd_add(double *hi, double *lo, double bh, double bl)
{
    double s, e;
    two_sum(*hi, bh, &s, &e);
    e += *lo + bl;
    two_sum(s, e, hi, lo);
    *hi += 0.0; /* never a negative zero: the encoding is canonical */
    *lo += 0.0;
}

static double clamp(const bdb_stats *s, double v)
{
    return v < s->min ? s->min : v > s->max ? s->max : v;
}

/* The mean (hi + lo) / n as an unevaluated sum q + ql, accurate to about 2^-100
 * relative: deviations from it are then accurate to an ulp of the deviation, however
 * large the mean is against the spread. (The sum is scaled; a mean that rounds past
 * DBL_MAX on scaling back is clamped.) */
static void mean_dd(const bdb_stats *s, double *q, double *ql)
{
    double n = (double)s->count;
    double q0 = s->sum_hi / n;
    double r = fma(-q0, n, s->sum_hi) + s->sum_lo; /* the division's remainder */
    *q = q0 * SCALE_UP;
    *ql = (r / n) * SCALE_UP;
    if (!isfinite(*q)) { /* a mean within an ulp of DBL_MAX rounded up */
        *q = clamp(s, *q);
        *ql = 0.0;
    }
}

/* The mean rounded to a double, within [min, max] where the true mean lies. */
static double mean_of(const bdb_stats *s)
{
    double q, ql;
    mean_dd(s, &q, &ql);
    return clamp(s, q + ql);
}

void bdb_stats_init(bdb_stats *s)
{
    memset(s, 0, sizeof *s);
}

int bdb_stats_add(bdb_stats *s, double v)
{
    if (!isfinite(v))
        return BDB_ERR_INVALID;
    if (s->count >= BDB_STATS_MAX_COUNT)
        return BDB_ERR_LIMIT;
    v += 0.0; /* -0.0 -> 0.0 */
    if (s->count == 0) {
        s->count = 1;
        s->min = s->max = v;
        s->sum_hi = v * SCALE_DOWN + 0.0; /* a tiny negative v scales to -0.0: 0.0 */
        s->sum_lo = s->m2 = 0.0;
        return BDB_OK;
    }
    double bq, bql, aq, aql;
    mean_dd(s, &bq, &bql);
    s->count++;
    if (v < s->min)
        s->min = v;
    if (v > s->max)
        s->max = v;
    dd_add(&s->sum_hi, &s->sum_lo, v * SCALE_DOWN, 0.0);
    mean_dd(s, &aq, &aql);
    /* Welford: (v - mean_before)(v - mean_after) = (n-1)/n (v - mean_before)^2 >= 0 */
    double d = ((v - bq) - bql) * ((v - aq) - aql);
    if (isnan(d) || d < 0.0)
        d = isnan(d) ? INFINITY : 0.0;
    s->m2 = s->min == s->max ? 0.0 : s->m2 + d;
    return BDB_OK;
}

int bdb_stats_add_n(bdb_stats *s, const double *v, size_t n)
{
    if (n < 2)
        return n ? bdb_stats_add(s, v[0]) : BDB_OK;
    if (n > BDB_STATS_MAX_COUNT - s->count)
        return BDB_ERR_LIMIT;
    bdb_stats b;
    memset(&b, 0, sizeof b);
    b.count = n;
    b.min = b.max = v[0] + 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = v[i] + 0.0; /* -0.0 -> 0.0 */
        if (!isfinite(x))
            return BDB_ERR_INVALID;
        if (x < b.min)
            b.min = x;
        if (x > b.max)
            b.max = x;
        dd_add(&b.sum_hi, &b.sum_lo, x * SCALE_DOWN, 0.0);
    }
    /* Two passes: the deviations from the mean as an unevaluated sum (one division
     * for the run, where Welford takes two means per reading) */
    if (b.min != b.max) {
        double q, ql;
        mean_dd(&b, &q, &ql);
        double m2 = 0.0;
        for (size_t i = 0; i < n; i++) {
            double d = (v[i] - q) - ql;
            m2 += d * d;
        }
        b.m2 = isnan(m2) ? INFINITY : m2;
    }
    if (s->count == 0) {
        *s = b;
        return BDB_OK;
    }
    return bdb_stats_merge(s, &b);
}

int bdb_stats_merge(bdb_stats *dst, const bdb_stats *src)
{
    if (src->count == 0)
        return BDB_OK;
    if (dst->count == 0) {
        *dst = *src;
        return BDB_OK;
    }
    if (src->count > BDB_STATS_MAX_COUNT - dst->count)
        return BDB_ERR_LIMIT;
    bdb_stats a = *dst, b = *src; /* src may alias dst */
    double na = (double)a.count, nb = (double)b.count;
    double aq, aql, bq, bql;
    mean_dd(&a, &aq, &aql);
    mean_dd(&b, &bq, &bql);
    double delta = (bq - aq) + (bql - aql);
    /* Chan, Golub, LeVeque: M2 = M2a + M2b + delta^2 na nb / (na + nb) */
    double m2 = a.m2 + b.m2 + delta * delta * (na / (na + nb)) * nb;
    if (isnan(m2))
        m2 = INFINITY;
    dst->count = a.count + b.count;
    dst->min = a.min < b.min ? a.min : b.min;
    dst->max = a.max > b.max ? a.max : b.max;
    dst->sum_hi = a.sum_hi;
    dst->sum_lo = a.sum_lo;
    dd_add(&dst->sum_hi, &dst->sum_lo, b.sum_hi, b.sum_lo);
    dst->m2 = dst->min == dst->max ? 0.0 : m2 + 0.0;
    return BDB_OK;
}

double bdb_stats_mean(const bdb_stats *s)
{
    return s->count ? mean_of(s) : NAN;
}

static double variance(const bdb_stats *s, uint64_t ddof)
{
    if (s->count <= ddof)
        return NAN;
    if (s->min == s->max)
        return 0.0;
    return s->m2 / (double)(s->count - ddof);
}

double bdb_stats_var_pop(const bdb_stats *s)
{
    return s->count ? variance(s, 0) : NAN;
}

double bdb_stats_var_sample(const bdb_stats *s)
{
    return variance(s, 1);
}

double bdb_stats_stddev_pop(const bdb_stats *s)
{
    return sqrt(bdb_stats_var_pop(s));
}

double bdb_stats_stddev_sample(const bdb_stats *s)
{
    return sqrt(bdb_stats_var_sample(s));
}

void bdb_stats_write(const bdb_stats *s, bdb_buf *out)
{
    bdb_buf_putc(out, BDB_STATS_VERSION);
    bdb_buf_put_uvarint(out, s->count);
    if (s->count == 0)
        return;
    uint8_t flags = (s->min < s->max ? FLAG_SPREAD : 0) | (s->sum_lo != 0.0 ? FLAG_LO : 0);
    bdb_buf_putc(out, flags);
    bdb_buf_put_f64(out, s->min);
    bdb_buf_put_f64(out, s->sum_hi);
    if (flags & FLAG_LO)
        bdb_buf_put_f64(out, s->sum_lo);
    if (flags & FLAG_SPREAD) {
        bdb_buf_put_f64(out, s->max);
        bdb_buf_put_f64(out, s->m2);
    }
}

static int is_neg_zero(double v)
{
    return v == 0.0 && signbit(v);
}

int bdb_stats_plausible(const bdb_stats *s, uint8_t flags)
{
    if (!isfinite(s->min) || !isfinite(s->max) || is_neg_zero(s->min) || is_neg_zero(s->max))
        return 0;
    if ((flags & FLAG_SPREAD) ? !(s->min < s->max) : s->min != s->max)
        return 0;
    if (s->count == 1 && (flags != 0 || s->sum_hi != s->min * SCALE_DOWN + 0.0))
        return 0;
    if (isnan(s->m2) || s->m2 < 0.0 || is_neg_zero(s->m2))
        return 0;
    if (!isfinite(s->sum_hi) || is_neg_zero(s->sum_hi))
        return 0;
    if (flags & FLAG_LO) {
        if (!isfinite(s->sum_lo) || s->sum_lo == 0.0 || s->sum_hi + s->sum_lo != s->sum_hi)
            return 0;
    }
    /* n min <= sum <= n max, with room for rounding (relative, and absolute where scaled
     * values went subnormal). Each check first without its absolute room: computing
     * that subnormal term costs a microcode assist (some 100 cycles, most of a tier
     * read's time), and adding it only ever widens the room, so a value that passes
     * without it passes with it. */
    double n = (double)s->count;
    double lo = n * (s->min * SCALE_DOWN), hi = n * (s->max * SCALE_DOWN);
    double lo_room = lo - fabs(lo) * 1e-9, hi_room = hi + fabs(hi) * 1e-9;
    if (s->sum_hi < lo_room || s->sum_hi > hi_room) {
        double tiny = n * 0x1p-1074;
        if (s->sum_hi < lo_room - tiny || s->sum_hi > hi_room + tiny)
            return 0;
    }
    /* Popoviciu: the variance is at most (max - min)^2 / 4; with room for rounding,
     * relative, and absolute for subnormal squares (each step and merge can add an
     * error of 2^-1075 times up to n) */
    double w = s->max - s->min;
    double pop = n * (w * w / 4.0) * (1.0 + 1e-6);
    if (s->m2 > pop && s->m2 > pop + n * 0x1p-1060)
        return 0;
    return 1;
}

int bdb_stats_read(bdb_stats *s, bdb_dec *d)
{
    bdb_stats t;
    bdb_stats_init(&t);
    uint8_t version = bdb_dec_u8(d);
    t.count = bdb_dec_uvarint_canon(d);
    if (d->err || version != BDB_STATS_VERSION || t.count > BDB_STATS_MAX_COUNT)
        goto corrupt;
    if (t.count > 0) {
        uint8_t flags = bdb_dec_u8(d);
        if (flags & ~FLAG_ALL)
            goto corrupt;
        t.min = t.max = bdb_dec_f64(d);
        t.sum_hi = bdb_dec_f64(d);
        if (flags & FLAG_LO)
            t.sum_lo = bdb_dec_f64(d);
        if (flags & FLAG_SPREAD) {
            t.max = bdb_dec_f64(d);
            t.m2 = bdb_dec_f64(d);
        }
        if (d->err || !bdb_stats_plausible(&t, flags))
            goto corrupt;
    }
    *s = t;
    return BDB_OK;
corrupt:
    d->err = 1;
    return BDB_ERR_CORRUPT;
}

int bdb_stats_skip(bdb_dec *d)
{
    uint8_t version = bdb_dec_u8(d);
    uint64_t count = bdb_dec_uvarint(d);
    if (!d->err && version == BDB_STATS_VERSION && count > 0) {
        uint8_t flags = bdb_dec_u8(d);
        if (flags & ~FLAG_ALL)
            d->err = 1;
        size_t n = 2 + ((flags & FLAG_LO) ? 1 : 0) + ((flags & FLAG_SPREAD) ? 2 : 0);
        bdb_dec_bytes(d, 8 * n);
    } else if (version != BDB_STATS_VERSION) {
        d->err = 1;
    }
    return d->err ? BDB_ERR_CORRUPT : BDB_OK;
}

int bdb_stats_decode(bdb_stats *s, const void *p, size_t n)
{
    bdb_dec d;
    bdb_dec_init(&d, p, n);
    bdb_stats t;
    if (bdb_stats_read(&t, &d) != BDB_OK || bdb_dec_left(&d) != 0)
        return BDB_ERR_CORRUPT;
    *s = t;
    return BDB_OK;
}
