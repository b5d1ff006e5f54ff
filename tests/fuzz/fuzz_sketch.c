/* libFuzzer harness for the aggregation core (quantile sketch and window statistics).
 * Three jobs per input:
 *  1. decode the raw bytes as a sketch and as window statistics: never crash, leak or
 *     overread; whatever is accepted re-encodes to the same bytes (the encodings are
 *     canonical), answers quantiles that are monotone in q and within [min, max], a
 *     mean within [min, max] and a stddev that is not NaN, and merges (with itself and
 *     with a sketch of another alpha, which must be refused); the skip walkers step
 *     over exactly the bytes of whatever is accepted;
 *  2. derive values from the bytes, sketch them whole and as two parts split by the
 *     input, at a bucket limit chosen by the input: the merged sketch has the same bytes
 *     as the whole one, and every quantile keeps the relative-error bound against the
 *     sorted values (from bdb_sketch_accurate_from on when buckets collapsed);
 *  3. the same split for the statistics: count, min and max equal, sum and stddev close;
 *  4. the compact forms a tier window stores (C1, C2): the raw bytes as compact
 *     statistics, and after three bytes that choose a count, min and max as a compact
 *     sketch, decode or are refused; whatever is accepted re-encodes to the bytes it
 *     took and skip_c steps over exactly those; the derived sketch of 2. and its
 *     statistics round-trip through both forms.
 * Needs src/agg/sketch.c, src/agg/sketch_c.c, src/agg/stats.c, src/agg/stats_c.c and
 * src/common/buf.c (and -lm). */
#include "agg/sketch.h"
#include "agg/stats.h"
#include "bucketdb/bdb.h"
#include "common/buf.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VALUES 1024

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            abort();                                                                               \
    } while (0)

static void check_sketch(const bdb_sketch *s)
{
    double prev = -INFINITY;
    for (int i = 0; i <= 16; i++) {
        double v = bdb_sketch_quantile(s, i / 16.0);
        if (s->count == 0) {
            CHECK(isnan(v));
            continue;
        }
        CHECK(v >= prev && v >= s->min && v <= s->max);
        prev = v;
    }
    CHECK(s->n <= s->max_buckets);
}

static void decode_any(const uint8_t *p, size_t len)
{
    bdb_sketch s, t;
    bdb_sketch_init_default(&s);
    bdb_sketch_init_default(&t);
    bdb_buf out;
    bdb_buf_init(&out);
    int rc = bdb_sketch_decode(&s, p, len);
    CHECK(rc == BDB_OK || rc == BDB_ERR_CORRUPT);
    /* the skip walkers step over exactly what a read accepts (and never past the end) */
    bdb_dec d;
    bdb_dec_init(&d, p, len);
    int skip = bdb_sketch_skip(&d);
    CHECK(skip == BDB_OK || skip == BDB_ERR_CORRUPT);
    if (rc == BDB_OK)
        CHECK(skip == BDB_OK && bdb_dec_left(&d) == 0);
    if (rc == BDB_OK) {
        bdb_sketch_write(&s, &out);
        CHECK(out.len == len && memcmp(out.data, p, len) == 0);
        check_sketch(&s);
        CHECK(bdb_sketch_copy(&t, &s) == BDB_OK);
        rc = bdb_sketch_merge(&t, &s);
        CHECK(rc == BDB_OK || rc == BDB_ERR_LIMIT);
        if (rc == BDB_OK) {
            CHECK(t.count == 2 * s.count);
            check_sketch(&t);
        }
        bdb_sketch other;
        CHECK(bdb_sketch_init(&other, s.alpha_ppm == 20000 ? 0.03 : 0.02, 64) == BDB_OK);
        CHECK(bdb_sketch_add(&other, 1.0) == BDB_OK);
        CHECK(bdb_sketch_merge(&other, &s) == BDB_ERR_INVALID);
        bdb_sketch_free(&other);
    }
    bdb_stats st;
    rc = bdb_stats_decode(&st, p, len);
    CHECK(rc == BDB_OK || rc == BDB_ERR_CORRUPT);
    bdb_dec_init(&d, p, len);
    skip = bdb_stats_skip(&d);
    CHECK(skip == BDB_OK || skip == BDB_ERR_CORRUPT);
    if (rc == BDB_OK)
        CHECK(skip == BDB_OK && bdb_dec_left(&d) == 0);
    if (rc == BDB_OK) {
        bdb_buf_reset(&out);
        bdb_stats_write(&st, &out);
        CHECK(out.len == len && memcmp(out.data, p, len) == 0);
        if (st.count) {
            double mean = bdb_stats_mean(&st);
            CHECK(mean >= st.min && mean <= st.max);
            CHECK(!isnan(bdb_stats_stddev_pop(&st)));
            bdb_stats twice = st;
            rc = bdb_stats_merge(&twice, &st);
            CHECK(rc == BDB_OK || rc == BDB_ERR_LIMIT);
            CHECK(rc != BDB_OK || !isnan(bdb_stats_stddev_pop(&twice)));
        }
    }
    bdb_buf_free(&out);
    bdb_sketch_free(&s);
    bdb_sketch_free(&t);
}

/* Job 4: p[0..3) give the statistics the compact form is read against. */
static void decode_compact(const uint8_t *p, size_t len)
{
    /* the statistics' compact forms, from the raw bytes */
    for (int form = BDB_C1; form <= BDB_C2; form++) {
        bdb_stats st;
        bdb_dec d;
        bdb_dec_init(&d, p, len);
        int rc = bdb_stats_read_c(&st, &d, form);
        CHECK(rc == BDB_OK || rc == BDB_ERR_CORRUPT);
        size_t used = len - bdb_dec_left(&d);
        uint64_t cnt = 0;
        bdb_dec_init(&d, p, len);
        int skip = bdb_stats_skip_count_c(&d, form, &cnt);
        CHECK(skip == BDB_OK || skip == BDB_ERR_CORRUPT);
        if (rc == BDB_OK) {
            CHECK(skip == BDB_OK && len - bdb_dec_left(&d) == used && cnt == st.count);
            bdb_buf out;
            bdb_buf_init(&out);
            bdb_stats_write_c(&st, form, &out);
            CHECK(out.len == used && memcmp(out.data, p, used) == 0);
            bdb_buf_free(&out);
        }
    }
    if (len < 3)
        return;
    uint64_t count = 1 + (uint64_t)p[0];
    double min = ((int)p[1] - 128) * 0.37, max = count == 1 ? min : min + p[2] * 0.11;
    for (int form = BDB_C1; form <= BDB_C2; form++) {
        bdb_sketch s;
        bdb_sketch_init_default(&s);
        bdb_dec d;
        bdb_dec_init(&d, p + 3, len - 3);
        int rc = bdb_sketch_read_c(&s, &d, form, count, min, max);
        CHECK(rc == BDB_OK || rc == BDB_ERR_CORRUPT);
        size_t used = len - 3 - bdb_dec_left(&d);
        bdb_dec_init(&d, p + 3, len - 3);
        int skip = bdb_sketch_skip_c(&d, form, count);
        CHECK(skip == BDB_OK || skip == BDB_ERR_CORRUPT);
        if (rc == BDB_OK) {
            CHECK(skip == BDB_OK && len - 3 - bdb_dec_left(&d) == used);
            CHECK(s.count == count && s.min == min && s.max == max);
            check_sketch(&s);
            bdb_buf out;
            bdb_buf_init(&out);
            bdb_sketch_write_c(&s, form, &out);
            CHECK(out.len == used && memcmp(out.data, p + 3, used) == 0);
            bdb_buf_free(&out);
        }
        bdb_sketch_free(&s);
    }
}

/* The derived sketch w through both compact forms, read against its own extremes. */
static void compact_roundtrip(const bdb_sketch *w)
{
    for (int form = BDB_C1; form <= BDB_C2; form++) {
        bdb_buf x, y;
        bdb_buf_init(&x);
        bdb_buf_init(&y);
        bdb_sketch_write_c(w, form, &x);
        bdb_sketch d;
        bdb_sketch_init_default(&d);
        bdb_dec dec;
        bdb_dec_init(&dec, x.data, x.len);
        CHECK(bdb_sketch_read_c(&d, &dec, form, w->count, w->min, w->max) == BDB_OK);
        CHECK(bdb_dec_left(&dec) == 0);
        bdb_sketch_write_c(&d, form, &y); /* the same bytes from the decoded one */
        CHECK(x.len == y.len && memcmp(x.data, y.data, x.len) == 0);
        bdb_buf_reset(&x);
        bdb_buf_reset(&y);
        bdb_sketch_write(w, &x); /* and the same sketch */
        bdb_sketch_write(&d, &y);
        CHECK(x.len == y.len && memcmp(x.data, y.data, x.len) == 0);
        bdb_sketch_free(&d);
        bdb_buf_free(&x);
        bdb_buf_free(&y);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Byte 0: the split point (as a fraction of the values) and the bucket limit; then per
 * value a control byte: 8 bytes of IEEE bits, a small signed integer, a repeat, or a
 * scaled byte. */
static void roundtrip_derived(const uint8_t *data, size_t size)
{
    static double vals[MAX_VALUES], sorted[MAX_VALUES];
    if (size < 2)
        return;
    uint8_t mode = data[0];
    size_t n = 0, i = 1;
    while (i < size && n < MAX_VALUES) {
        uint8_t ctl = data[i++];
        double v;
        switch (ctl & 3) {
        case 0: {
            uint64_t bits = 0;
            for (int k = 0; k < 8; k++)
                bits = bits << 8 | (i < size ? data[i++] : 0);
            memcpy(&v, &bits, sizeof v);
            break;
        }
        case 1:
            v = (double)((int)(ctl >> 2) - 32);
            break;
        case 2:
            v = n ? vals[n - 1] : 0.0;
            break;
        default:
            v = ldexp((double)(i < size ? data[i++] : 1) - 128.0, (int)(ctl >> 2) - 32);
        }
        if (!isfinite(v))
            continue;
        vals[n++] = v;
    }
    if (n == 0)
        return;
    uint32_t limit = (mode & 0x0f) ? BDB_SKETCH_BUCKETS_MIN + (mode & 0x0f) : 2048;
    size_t cut = n * (size_t)(mode >> 4) / 16;
    bdb_sketch whole, a, b;
    CHECK(bdb_sketch_init(&whole, 0.01, limit) == BDB_OK);
    CHECK(bdb_sketch_init(&a, 0.01, limit) == BDB_OK);
    CHECK(bdb_sketch_init(&b, 0.01, limit) == BDB_OK);
    bdb_stats sw, sa, sb;
    bdb_stats_init(&sw);
    bdb_stats_init(&sa);
    bdb_stats_init(&sb);
    for (size_t k = 0; k < n; k++) {
        CHECK(bdb_sketch_add(&whole, vals[k]) == BDB_OK);
        CHECK(bdb_sketch_add(k < cut ? &a : &b, vals[k]) == BDB_OK);
        CHECK(bdb_stats_add(&sw, vals[k]) == BDB_OK);
        CHECK(bdb_stats_add(k < cut ? &sa : &sb, vals[k]) == BDB_OK);
    }
    CHECK(bdb_sketch_merge(&b, &a) == BDB_OK);
    bdb_buf x, y;
    bdb_buf_init(&x);
    bdb_buf_init(&y);
    bdb_sketch_write(&whole, &x);
    bdb_sketch_write(&b, &y);
    CHECK(x.len == y.len && memcmp(x.data, y.data, x.len) == 0);
    /* the encoding round-trips */
    bdb_sketch d;
    bdb_sketch_init_default(&d);
    CHECK(bdb_sketch_decode(&d, x.data, x.len) == BDB_OK);
    bdb_buf_reset(&y);
    bdb_sketch_write(&d, &y);
    CHECK(x.len == y.len && memcmp(x.data, y.data, x.len) == 0);
    /* the bound */
    memcpy(sorted, vals, n * sizeof *vals);
    qsort(sorted, n, sizeof *sorted, cmp_double);
    uint64_t from = bdb_sketch_accurate_from(&whole);
    for (int k = 0; k <= 32; k++) {
        double q = k / 32.0, est = bdb_sketch_quantile(&whole, q);
        size_t r = (size_t)floor(q * (double)(n - 1));
        double want = sorted[r], tol = 0.01 * (1 + 1e-9) * fabs(want);
        CHECK(est >= sorted[0] && est <= sorted[n - 1]);
        if (r >= from)
            CHECK(fabs(est - want) <= tol);
        else
            CHECK(est >= want - tol);
    }
    check_sketch(&whole);
    compact_roundtrip(&whole);
    /* the statistics */
    for (int form = BDB_C1; form <= BDB_C2; form++) {
        bdb_buf c;
        bdb_buf_init(&c);
        bdb_stats_write_c(&sw, form, &c);
        bdb_stats back;
        bdb_dec dc;
        bdb_dec_init(&dc, c.data, c.len);
        CHECK(bdb_stats_read_c(&back, &dc, form) == BDB_OK && bdb_dec_left(&dc) == 0);
        CHECK(memcmp(&back, &sw, sizeof back) == 0);
        bdb_buf_free(&c);
    }
    CHECK(bdb_stats_merge(&sb, &sa) == BDB_OK);
    CHECK(sb.count == sw.count && sb.min == sw.min && sb.max == sw.max);
    /* double-double sums agree to an ulp of the sum, plus 2^-100 of the magnitudes
     * that cancelled on the way */
    double s1 = bdb_stats_sum(&sw), s2 = bdb_stats_sum(&sb), mag = 0;
    for (size_t k = 0; k < n; k++)
        mag += fabs(vals[k]);
    CHECK(s1 == s2 || fabs(s1 - s2) <= 1e-15 * fabs(s1) + 1e-29 * mag);
    double d1 = bdb_stats_stddev_pop(&sw), d2 = bdb_stats_stddev_pop(&sb), w = sw.max - sw.min;
    CHECK(!isnan(d1) && !isnan(d2));
    /* Popoviciu, unless M2 overflowed and the stddev saturated at +inf, or the squares
     * were subnormal (spreads below 1e-150) */
    if (w > 1e-150) {
        CHECK(d1 <= w / 2 * (1 + 1e-6) || (d1 == INFINITY && (double)n * w * w / 4 > 1e307));
        CHECK(d2 <= w / 2 * (1 + 1e-6) || (d2 == INFINITY && (double)n * w * w / 4 > 1e307));
    }
    bdb_buf_free(&x);
    bdb_buf_free(&y);
    bdb_sketch_free(&whole);
    bdb_sketch_free(&a);
    bdb_sketch_free(&b);
    bdb_sketch_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    decode_any(data, size);
    decode_compact(data, size);
    roundtrip_derived(data, size);
    return 0;
}
