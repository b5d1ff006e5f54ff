/* stats_c.c: the compact encodings of a window's statistics inside a tier window
 * (docs/formats/tier.md, "The compact window list"; docs/AGGREGATION.md).
 *
 *   uvarint count (>= 1); count 1: num min, nothing else (sum = min, m2 = 0)
 *   otherwise u8 flags (C_SPREAD, C_LO, C_RAWSUM, C_DELTA), then
 *     without C_DELTA: num min, [C_SPREAD: num max, f64 m2], num sum (the unscaled
 *       sum_hi) or with C_RAWSUM f64 sum_hi when unscaling it overflows;
 *     with C_DELTA (form C2 only): uvarint(zigzag(m) << 4 | e) for min = m / 10^e,
 *       [C_SPREAD: uvarint (max - min) x 10^e, f64 m2], zvarint (sum - count x min) x
 *       10^e: one exponent for the three, the smallest that holds them all;
 *     C_LO: sum_lo = odd * 2^exp as zvarint odd, zvarint exp.
 * num = bdb_buf_put_num.
 *
 * Why C_DELTA: the readings of a window lie close together, so max - min and sum -
 * count x min are small integers where max and the sum are not: 30 readings of a
 * random walk in hundredths save about 2.7 bytes a window. C2 writes it whenever the
 * three numbers allow (each integer below 2^50, count x min below 2^62), so one
 * window has one encoding; C1 (tier version 3) never does. */
#include "agg/stats.h"
#include "agg/stats_int.h"

#include "bucketdb/bdb.h"

#include <math.h>

#define C_SPREAD 0x01
#define C_LO 0x02
#define C_RAWSUM 0x04
#define C_DELTA 0x08
#define C_ALL1 (C_SPREAD | C_LO | C_RAWSUM)

/* Below 2^50 an integer m not a multiple of 10 is the only m / 10^e of its double
 * (common/buf.c, bdb_dec_num), which is what makes the exponent check below exact. */
#define DELTA_MAX_M (INT64_C(1) << 50)
#define DELTA_MAX_NM (INT64_C(1) << 62)

typedef struct dform {
    unsigned e;
    int64_t mm, dmax, dsum;
} dform;

/* |v|, also of INT64_MIN (which a damaged varint can hold) */
static uint64_t abs64(int64_t v)
{
    return v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
}

/* n x mm stays below 2^62 (so adding a difference below 2^62 cannot overflow). */
static int nm_fits(uint64_t n, int64_t mm)
{
    return mm == 0 || abs64(mm) <= (uint64_t)DELTA_MAX_NM / n;
}

/* The C_DELTA form of a window of n >= 2 readings, or 0 when it has none. */
static int delta_form(uint64_t n, double min, double max, int spread, double sum, dform *f)
{
    const double v[3] = {min, max, sum};
    int64_t m[3] = {0, 0, 0};
    unsigned e[3] = {0, 0, 0}, top = 0;
    for (int i = 0; i < 3; i++) {
        if (i == 1 && !spread)
            continue;
        e[i] = bdb_num_form(v[i], &m[i]);
        if (e[i] == BDB_NUM_RAW)
            return 0;
        if (e[i] > top)
            top = e[i];
    }
    for (int i = 0; i < 3; i++) {
        for (unsigned k = e[i]; k < top; k++) {
            if (abs64(m[i]) >= (uint64_t)DELTA_MAX_M / 10)
                return 0;
            m[i] *= 10;
        }
        if (abs64(m[i]) >= (uint64_t)DELTA_MAX_M)
            return 0;
    }
    if (!nm_fits(n, m[0]))
        return 0;
    f->e = top;
    f->mm = m[0];
    f->dmax = spread ? m[1] - m[0] : 0;
    f->dsum = m[2] - (int64_t)n * m[0];
    return 1;
}

void bdb_stats_write_c(const bdb_stats *s, int form, bdb_buf *out)
{
    bdb_buf_put_uvarint(out, s->count);
    if (s->count == 1) {
        bdb_buf_put_num(out, s->min);
        return;
    }
    double sum = ldexp(s->sum_hi, SCALE);
    uint8_t flags = (s->min < s->max ? C_SPREAD : 0) | (s->sum_lo != 0.0 ? C_LO : 0) |
                    (isfinite(sum) ? 0 : C_RAWSUM);
    dform f;
    if (form != BDB_C1 && !(flags & C_RAWSUM) &&
        delta_form(s->count, s->min, s->max, flags & C_SPREAD, sum, &f)) {
        flags |= C_DELTA;
        bdb_buf_putc(out, flags);
        uint64_t zz = ((uint64_t)f.mm << 1) ^ (uint64_t)(f.mm >> 63);
        bdb_buf_put_uvarint(out, zz << 4 | f.e);
        if (flags & C_SPREAD) {
            bdb_buf_put_uvarint(out, (uint64_t)f.dmax);
            bdb_buf_put_f64(out, s->m2);
        }
        bdb_buf_put_varint(out, f.dsum);
    } else {
        bdb_buf_putc(out, flags);
        bdb_buf_put_num(out, s->min);
        if (flags & C_SPREAD) {
            bdb_buf_put_num(out, s->max);
            bdb_buf_put_f64(out, s->m2);
        }
        if (flags & C_RAWSUM)
            bdb_buf_put_f64(out, s->sum_hi);
        else
            bdb_buf_put_num(out, sum);
    }
    if (flags & C_LO) {
        int e;
        double m = frexp(s->sum_lo, &e); /* |m| in [0.5, 1): 53 bits as an integer */
        int64_t odd = (int64_t)ldexp(m, 53);
        e -= 53;
        while (!(odd & 1)) {
            odd /= 2;
            e++;
        }
        bdb_buf_put_varint(out, odd);
        bdb_buf_put_varint(out, e);
    }
}

/* A num, and whether it was the raw form (the byte 15 and 8 bytes). */
static double num_raw(bdb_dec *d, int *raw)
{
    *raw = d->p < d->end && *d->p == BDB_NUM_RAW;
    return bdb_dec_num(d);
}

/* The C_DELTA part: min, max, m2 and the scaled sum into t. 0 when malformed or not
 * what the writer makes. */
static int read_delta(bdb_stats *t, bdb_dec *d, uint8_t flags)
{
    uint64_t u = bdb_dec_uvarint_canon(d);
    unsigned e = (unsigned)(u & 15u);
    uint64_t zz = u >> 4;
    int64_t mm = (int64_t)(zz >> 1) ^ -(int64_t)(zz & 1);
    if (d->err || e >= BDB_NUM_RAW || abs64(mm) >= (uint64_t)DELTA_MAX_M)
        return 0;
    int64_t mx = mm;
    t->min = t->max = bdb_num_value(mm, e);
    if (flags & C_SPREAD) {
        uint64_t dmax = bdb_dec_uvarint_canon(d);
        if (d->err || dmax == 0 || dmax >= (uint64_t)(2 * DELTA_MAX_M))
            return 0;
        mx = mm + (int64_t)dmax;
        if (abs64(mx) >= (uint64_t)DELTA_MAX_M)
            return 0;
        t->max = bdb_num_value(mx, e);
        t->m2 = bdb_dec_f64(d);
    }
    int64_t dsum = bdb_dec_varint_canon(d);
    if (d->err || !nm_fits(t->count, mm) || abs64(dsum) >= (uint64_t)DELTA_MAX_NM)
        return 0;
    int64_t ms = (int64_t)t->count * mm + dsum;
    if (abs64(ms) >= (uint64_t)DELTA_MAX_M)
        return 0;
    /* the smallest exponent of the three: one of them needs all e digits */
    if (e > 0 && mm % 10 == 0 && mx % 10 == 0 && ms % 10 == 0)
        return 0;
    double sum = bdb_num_value(ms, e);
    t->sum_hi = sum * SCALE_DOWN;
    return t->sum_hi * SCALE_UP == sum; /* bits the scaled sum cannot hold */
}

int bdb_stats_read_c(bdb_stats *s, bdb_dec *d, int form)
{
    bdb_stats t;
    bdb_stats_init(&t);
    t.count = bdb_dec_uvarint_canon(d);
    if (d->err || t.count == 0 || t.count > BDB_STATS_MAX_COUNT)
        goto corrupt;
    uint8_t flags = 0;
    if (t.count == 1) {
        t.min = t.max = bdb_dec_num(d);
        t.sum_hi = t.min * SCALE_DOWN + 0.0; /* as bdb_stats_add */
    } else {
        flags = bdb_dec_u8(d);
        if (flags & ~(form == BDB_C1 ? C_ALL1 : C_ALL1 | C_DELTA) ||
            (flags & C_DELTA && flags & C_RAWSUM))
            goto corrupt;
        if (flags & C_DELTA) {
            if (!read_delta(&t, d, flags))
                goto corrupt;
        } else {
            int raw_min, raw_max = 0, raw_sum = 1;
            double sum = 0.0;
            t.min = t.max = num_raw(d, &raw_min);
            if (flags & C_SPREAD) {
                t.max = num_raw(d, &raw_max);
                t.m2 = bdb_dec_f64(d);
            }
            if (flags & C_RAWSUM) {
                t.sum_hi = bdb_dec_f64(d);
                if (isfinite(t.sum_hi * SCALE_UP))
                    goto corrupt; /* the writer uses the raw sum only when it must */
            } else {
                sum = num_raw(d, &raw_sum);
                t.sum_hi = sum * SCALE_DOWN;
                if (t.sum_hi * SCALE_UP != sum)
                    goto corrupt; /* bits the scaled sum cannot hold */
            }
            /* C2 takes the delta form whenever it exists; only numbers that all have
             * a decimal form can have one (the check is skipped otherwise) */
            dform f;
            if (form != BDB_C1 && !d->err && !raw_min && !raw_max && !raw_sum &&
                delta_form(t.count, t.min, t.max, flags & C_SPREAD, sum, &f))
                goto corrupt;
        }
        if (flags & C_LO) {
            int64_t odd = bdb_dec_varint_canon(d), e = bdb_dec_varint_canon(d);
            if (d->err || !(odd & 1) || odd >= (INT64_C(1) << 53) || odd <= -(INT64_C(1) << 53) ||
                e < -1074 || e > 1100) /* below 2^-1074 no odd multiple is a double */
                goto corrupt;
            t.sum_lo = ldexp((double)odd, (int)e);
        }
    }
    /* the version 1 checks, with its flags: spread, and sum_lo when not zero */
    if (d->err || !bdb_stats_plausible(&t, (flags & C_SPREAD ? FLAG_SPREAD : 0) |
                                               (flags & C_LO ? FLAG_LO : 0)))
        goto corrupt;
    *s = t;
    return BDB_OK;
corrupt:
    d->err = 1;
    return BDB_ERR_CORRUPT;
}

int bdb_stats_skip_count_c(bdb_dec *d, int form, uint64_t *count)
{
    /* Converting each number and checking its form costs divisions; a reader stepping
     * over the windows before its range needs their lengths and count only. */
    uint64_t n = bdb_dec_uvarint_canon(d);
    if (d->err || n == 0 || n > BDB_STATS_MAX_COUNT)
        goto corrupt;
    if (n == 1) {
        bdb_dec_skip_num(d); /* the reading */
    } else {
        uint8_t flags = bdb_dec_u8(d);
        if (flags & ~(form == BDB_C1 ? C_ALL1 : C_ALL1 | C_DELTA) ||
            (flags & C_DELTA && flags & C_RAWSUM))
            goto corrupt;
        if (flags & C_DELTA) {
            bdb_dec_uvarint(d); /* min */
            if (flags & C_SPREAD) {
                bdb_dec_uvarint(d);
                bdb_dec_bytes(d, 8); /* m2 */
            }
            bdb_dec_uvarint(d); /* the sum's difference (zigzag: same length) */
        } else {
            bdb_dec_skip_num(d); /* min */
            if (flags & C_SPREAD) {
                bdb_dec_skip_num(d);
                bdb_dec_bytes(d, 8); /* m2 */
            }
            if (flags & C_RAWSUM)
                bdb_dec_bytes(d, 8);
            else
                bdb_dec_skip_num(d);
        }
        if (flags & C_LO) {
            bdb_dec_uvarint(d);
            bdb_dec_uvarint(d);
        }
    }
    if (d->err)
        goto corrupt;
    *count = n;
    return BDB_OK;
corrupt:
    d->err = 1;
    return BDB_ERR_CORRUPT;
}

int bdb_stats_skip_c(bdb_dec *d, int form)
{
    uint64_t n;
    return bdb_stats_skip_count_c(d, form, &n);
}
