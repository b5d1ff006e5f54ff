/* sketch_c.c: the compact sketch encodings a window stores beside its statistics
 * (docs/formats/tier.md, "The compact window list"). The window's count, min and max are
 * stored once, in the statistics, so a sketch of the default parameters that never
 * collapsed need not repeat them, nor its end keys (those of min and max, give or take
 * one where another libm rounds log() the other way), nor its last count (the rest of
 * the count).
 *
 * C1 (tier files of version 3) spends a varint on every gap between keys and every
 * count. C2 (version 5) spends bits: most gaps are 0 and most counts small, so each is
 * an Exp-Golomb code whose order (0 to 3, the shortest for the window) is stored once
 * per column. A 1-hour window of 30 readings of a random walk takes about 4.5 bytes of
 * sketch instead of 11.3 (bench/README.md). */
#include "agg/sketch.h"
#include "agg/sketch_int.h"

#include "bucketdb/bdb.h"

#include <float.h>
#include <stdlib.h>

static int compactable(const bdb_sketch *s)
{
    return s->alpha_ppm == (uint32_t)(BDB_SKETCH_ALPHA * 1e6 + 0.5) &&
           s->max_buckets == BDB_SKETCH_MAX_BUCKETS && !s->collapsed && s->n > 0;
}

/* The keys of finite doubles, for a decoder to refuse any other. */
static void key_bounds(const bdb_sketch *t, int64_t *kmin, int64_t *kmax)
{
    *kmax = (int64_t)bdb_sk_index_of(t->ln_gamma, DBL_MAX) + 1 + BDB_SK_KEY_BIAS;
    *kmin = (int64_t)bdb_sk_index_of(t->ln_gamma, DBL_TRUE_MIN) - 1 + BDB_SK_KEY_BIAS;
}

static int key_ok(int64_t key, int64_t kmin, int64_t kmax)
{
    return key >= -kmax && key <= kmax && (key == 0 || llabs(key) >= kmin);
}

/* As bdb_sketch_read checks: the extremes lie in the end buckets, one value is one
 * bucket, the counts add up. */
static int ends_ok(const bdb_sketch *t, uint64_t total, uint64_t count, double min, double max)
{
    return total == count && bdb_sk_near_key(bdb_sk_key_of(t->ln_gamma, max), t->b[t->n - 1].key) &&
           bdb_sk_near_key(bdb_sk_key_of(t->ln_gamma, min), t->b[0].key) &&
           !(min == max && t->n != 1) && !(count == 1 && min != max);
}

/* The escape: the byte 0 then bdb_sketch_write, for what the compact form cannot hold.
 * fits says whether the compact form could have held t (then the escape is refused:
 * one encoding per sketch). */
static int read_escape(bdb_sketch *s, bdb_dec *d, uint64_t count, double min, double max,
                       int (*fits)(const bdb_sketch *))
{
    bdb_sketch t;
    bdb_sketch_init_default(&t);
    int rc = bdb_sketch_read(&t, d);
    if (rc == BDB_OK && (fits(&t) || t.count != count || t.min != min || t.max != max))
        rc = BDB_ERR_CORRUPT;
    if (rc != BDB_OK) {
        bdb_sketch_free(&t);
        d->err = 1;
        return rc;
    }
    bdb_sketch_free(s);
    *s = t;
    return BDB_OK;
}

/* The start of a compact read of nb buckets (bounded by the caller): t empty with room
 * for them, and the keys a finite double can have. BDB_OK, or BDB_ERR_NOMEM (d->err set,
 * nothing to free). */
static int begin(bdb_sketch *t, bdb_dec *d, uint64_t nb, int64_t *kmin, int64_t *kmax)
{
    bdb_sketch_init_default(t);
    if (bdb_sk_reserve(t, (uint32_t)nb) != BDB_OK) {
        d->err = 1;
        return BDB_ERR_NOMEM;
    }
    t->n = (uint32_t)nb;
    key_bounds(t, kmin, kmax);
    return BDB_OK;
}

/* The end of a compact read: t, its buckets decoded (ok 0 when they were not), checked
 * against the statistics and moved into s, or freed. */
static int finish(bdb_sketch *s, bdb_sketch *t, bdb_dec *d, int ok, uint64_t total, uint64_t count,
                  double min, double max)
{
    t->count = total;
    t->min = min;
    t->max = max;
    if (!ok || d->err || !ends_ok(t, total, count, min, max)) {
        bdb_sketch_free(t);
        d->err = 1;
        return BDB_ERR_CORRUPT;
    }
    bdb_sketch_free(s);
    *s = *t;
    return BDB_OK;
}

/* ---------------------------------------------------------------- C1 */

static void write_c1(const bdb_sketch *s, bdb_buf *out)
{
    if (!compactable(s)) {
        bdb_buf_putc(out, 0);
        bdb_sketch_write(s, out);
        return;
    }
    bdb_buf_put_uvarint(out, s->n);
    bdb_buf_put_varint(out, (int64_t)s->b[0].key - bdb_sk_key_of(s->ln_gamma, s->min));
    for (uint32_t i = 1; i < s->n; i++)
        bdb_buf_put_uvarint(out, (uint64_t)((int64_t)s->b[i].key - s->b[i - 1].key - 1));
    if (s->n < s->count)
        for (uint32_t i = 0; i < s->n; i++)
            bdb_buf_put_uvarint(out, s->b[i].count - 1);
}

static int read_c1(bdb_sketch *s, bdb_dec *d, uint64_t count, double min, double max)
{
    uint64_t nb = bdb_dec_uvarint_canon(d);
    if (d->err)
        goto corrupt;
    if (nb == 0)
        return read_escape(s, d, count, min, max, compactable);
    /* every bucket past the first takes at least a byte: no allocation for garbage */
    if (nb > count || nb > BDB_SKETCH_MAX_BUCKETS || nb - 1 > bdb_dec_left(d) || count == 0)
        goto corrupt;
    bdb_sketch t;
    int64_t kmin, kmax;
    if (begin(&t, d, nb, &kmin, &kmax) != BDB_OK)
        return BDB_ERR_NOMEM;
    int64_t dk = bdb_dec_varint_canon(d); /* bounded before the sum: no overflow */
    int64_t key =
        dk < -2 * kmax || dk > 2 * kmax ? kmax + 1 : (int64_t)bdb_sk_key_of(t.ln_gamma, min) + dk;
    for (uint32_t i = 0; i < t.n && !d->err; i++) {
        if (i > 0) {
            uint64_t gap = bdb_dec_uvarint_canon(d);
            key = gap >= (uint64_t)(kmax - key) ? kmax + 1 : key + 1 + (int64_t)gap;
        }
        if (!key_ok(key, kmin, kmax))
            d->err = 1; /* not the key of a finite double */
        else
            t.b[i] = (bdb_sketch_bucket){(int32_t)key, 1};
    }
    uint64_t total = nb;
    if (nb < count) {
        total = 0;
        for (uint32_t i = 0; i < t.n && !d->err; i++) {
            uint64_t c = bdb_dec_uvarint_canon(d);
            if (c >= count - total)
                d->err = 1;
            else
                total += (t.b[i].count = c + 1);
        }
    }
    return finish(s, &t, d, 1, total, count, min, max);
corrupt:
    d->err = 1;
    return BDB_ERR_CORRUPT;
}

static int skip_c1(bdb_dec *d, uint64_t count)
{
    uint64_t nb = bdb_dec_uvarint_canon(d);
    if (!d->err && nb == 0)
        return bdb_sketch_skip(d);
    if (d->err || nb > count || nb > BDB_SKETCH_MAX_BUCKETS) {
        d->err = 1;
        return BDB_ERR_CORRUPT;
    }
    bdb_dec_varint(d);
    for (uint64_t i = 1; i < nb && !d->err; i++)
        bdb_dec_uvarint(d);
    for (uint64_t i = 0; nb < count && i < nb && !d->err; i++)
        bdb_dec_uvarint(d);
    return d->err ? BDB_ERR_CORRUPT : BDB_OK;
}

/* ---------------------------------------------------------------- C2
 *
 *   uvarint head    0: the escape follows; else 1 + 3 (nb - 1) + c0, nb >= 1 the buckets,
 *                   c0 the first key's offset from the key of min (0: 0, 1: +1, 2: -1)
 *   when nb >= 2, bits, each byte filled from its high bit, the last padded with 0:
 *     2 bits cl     the last key's offset from the key of max, coded as c0
 *     nb >= 3:      2 bits k, then the nb - 2 inner gaps (key - previous - 1), each
 *                   Exp-Golomb of order k
 *     nb < count:   2 bits k, then the counts - 1 of every bucket but the last, each
 *                   Exp-Golomb of order k (the last is what is left of count; when
 *                   nb == count every count is 1)
 * Each k is the order of fewest bits for its column, the smaller on a tie. */

#define EG_MAX_ZEROS 62 /* no value here needs more: a decoder refuses longer prefixes */

static int off_code(int64_t off)
{
    return off == 0 ? 0 : off == 1 ? 1 : off == -1 ? 2 : -1;
}

static int64_t code_off(unsigned c)
{
    return c == 0 ? 0 : c == 1 ? 1 : -1;
}

/* The codes of the end keys' offsets, or 0 when the sketch has no C2 form. */
static int c2_codes(const bdb_sketch *s, unsigned *c0, unsigned *cl)
{
    if (!compactable(s))
        return 0;
    int a = off_code((int64_t)s->b[0].key - bdb_sk_key_of(s->ln_gamma, s->min));
    int b = off_code((int64_t)s->b[s->n - 1].key - bdb_sk_key_of(s->ln_gamma, s->max));
    if (a < 0 || b < 0)
        return 0;
    *c0 = (unsigned)a;
    *cl = (unsigned)b;
    return 1;
}

static int c2_fits(const bdb_sketch *s)
{
    unsigned a, b;
    return c2_codes(s, &a, &b);
}

static unsigned eg_bits(uint64_t v, unsigned k)
{
    uint64_t x = v + (UINT64_C(1) << k);
    unsigned nb = 64u - (unsigned)__builtin_clzll(x);
    return 2 * nb - 1 - k;
}

static uint64_t gap_at(const bdb_sketch *s, uint32_t i)
{
    return (uint64_t)((int64_t)s->b[i].key - s->b[i - 1].key - 1);
}

static uint64_t count_at(const bdb_sketch *s, uint32_t i)
{
    return s->b[i].count - 1;
}

/* The order of fewest bits for values at(s, i), i in [a, b). */
static unsigned best_k(const bdb_sketch *s, uint32_t a, uint32_t b,
                       uint64_t (*at)(const bdb_sketch *, uint32_t))
{
    uint64_t cost[4] = {0, 0, 0, 0};
    for (uint32_t i = a; i < b; i++) {
        uint64_t v = at(s, i);
        for (unsigned k = 0; k < 4; k++)
            cost[k] += eg_bits(v, k);
    }
    unsigned best = 0;
    for (unsigned k = 1; k < 4; k++)
        if (cost[k] < cost[best])
            best = k;
    return best;
}

typedef struct bitw {
    bdb_buf *out;
    uint64_t acc; /* the pending bits, in the low n */
    unsigned n;
} bitw;

static void bw_bits(bitw *w, uint64_t v, unsigned n) /* n <= 32 */
{
    w->acc = (w->acc << n) | v;
    w->n += n;
    while (w->n >= 8) {
        w->n -= 8;
        bdb_buf_putc(w->out, (uint8_t)(w->acc >> w->n));
    }
    w->acc &= (UINT64_C(1) << w->n) - 1;
}

static void bw_eg(bitw *w, uint64_t v, unsigned k)
{
    uint64_t x = v + (UINT64_C(1) << k);
    unsigned nb = 64u - (unsigned)__builtin_clzll(x);
    for (unsigned z = nb - 1 - k; z > 0;) {
        unsigned c = z > 32 ? 32 : z;
        bw_bits(w, 0, c);
        z -= c;
    }
    while (nb > 32) {
        nb -= 32;
        bw_bits(w, (x >> nb) & 0xffffffffu, 32);
    }
    bw_bits(w, x & ((UINT64_C(1) << nb) - 1), nb);
}

static void write_c2(const bdb_sketch *s, bdb_buf *out)
{
    unsigned c0, cl;
    if (!c2_codes(s, &c0, &cl)) {
        bdb_buf_putc(out, 0);
        bdb_sketch_write(s, out);
        return;
    }
    bdb_buf_put_uvarint(out, 1 + (uint64_t)(s->n - 1) * 3 + c0);
    if (s->n == 1)
        return;
    bitw w = {out, 0, 0};
    bw_bits(&w, cl, 2);
    if (s->n >= 3) {
        unsigned k = best_k(s, 1, s->n - 1, gap_at);
        bw_bits(&w, k, 2);
        for (uint32_t i = 1; i + 1 < s->n; i++)
            bw_eg(&w, gap_at(s, i), k);
    }
    if (s->n < s->count) {
        unsigned k = best_k(s, 0, s->n - 1, count_at);
        bw_bits(&w, k, 2);
        for (uint32_t i = 0; i + 1 < s->n; i++)
            bw_eg(&w, count_at(s, i), k);
    }
    if (w.n)
        bw_bits(&w, 0, 8 - w.n);
}

typedef struct bitr {
    bdb_dec *d;
    unsigned acc, n; /* the current byte, its bits not yet read */
} bitr;

/* Past the end of the input: d->err, and zeros. */
static unsigned br_bit(bitr *r)
{
    if (!r->n) {
        r->acc = bdb_dec_u8(r->d);
        r->n = 8;
    }
    r->n--;
    return (r->acc >> r->n) & 1u;
}

static unsigned br_bits(bitr *r, unsigned n)
{
    unsigned v = 0;
    while (n--)
        v = v << 1 | br_bit(r);
    return v;
}

static uint64_t br_eg(bitr *r, unsigned k)
{
    unsigned z = 0;
    while (!br_bit(r)) {
        if (++z > EG_MAX_ZEROS - k || r->d->err) {
            r->d->err = 1;
            return 0;
        }
    }
    uint64_t x = 1;
    for (unsigned i = 0; i < z + k; i++)
        x = x << 1 | br_bit(r);
    return x - (UINT64_C(1) << k);
}

/* The padding of the last byte is zero (one encoding per sketch). */
static int br_end(const bitr *r)
{
    return (r->acc & ((1u << r->n) - 1u)) == 0;
}

/* Steps over (t == NULL) or decodes into t (buckets reserved, keys and counts set)
 * the bits of a sketch of nb >= 2 buckets whose first key is first; last is the key
 * of max. Canonical orders are checked only when decoding. */
static int c2_bits(bitr *r, bdb_sketch *t, uint64_t nb, uint64_t count, int64_t first,
                   int32_t kmax_of_max)
{
    int64_t kmin = 0, kmax = 0;
    if (t)
        key_bounds(t, &kmin, &kmax);
    unsigned cl = br_bits(r, 2);
    if (cl == 3)
        return 0;
    int64_t key = first;
    if (nb >= 3) {
        unsigned k = br_bits(r, 2);
        for (uint64_t i = 1; i + 1 < nb && !r->d->err; i++) {
            uint64_t gap = br_eg(r, k);
            if (!t)
                continue;
            key = gap >= (uint64_t)(kmax - key) ? kmax + 1 : key + 1 + (int64_t)gap;
            if (!key_ok(key, kmin, kmax))
                return 0;
            t->b[i] = (bdb_sketch_bucket){(int32_t)key, 1};
        }
        if (r->d->err || (t && k != best_k(t, 1, (uint32_t)nb - 1, gap_at)))
            return 0;
    }
    if (t) {
        int64_t last = (int64_t)kmax_of_max + code_off(cl);
        if (last <= key || !key_ok(last, kmin, kmax))
            return 0;
        t->b[nb - 1] = (bdb_sketch_bucket){(int32_t)last, 1};
    }
    if (nb < count) {
        unsigned k = br_bits(r, 2);
        uint64_t total = 0;
        for (uint64_t i = 0; i + 1 < nb && !r->d->err; i++) {
            uint64_t c = br_eg(r, k);
            if (!t)
                continue;
            /* every bucket after this one keeps at least 1 */
            if (c >= count - total - (nb - 1 - i))
                return 0;
            total += (t->b[i].count = c + 1);
        }
        if (r->d->err)
            return 0;
        if (t) {
            t->b[nb - 1].count = count - total;
            if (k != best_k(t, 0, (uint32_t)nb - 1, count_at))
                return 0;
        }
    }
    return !r->d->err && br_end(r);
}

static int read_c2(bdb_sketch *s, bdb_dec *d, uint64_t count, double min, double max)
{
    uint64_t head = bdb_dec_uvarint_canon(d);
    if (d->err)
        goto corrupt;
    if (head == 0)
        return read_escape(s, d, count, min, max, c2_fits);
    uint64_t nb = (head - 1) / 3 + 1;
    unsigned c0 = (unsigned)((head - 1) % 3);
    /* every inner bucket takes at least a bit: no allocation for garbage */
    if (count == 0 || nb > count || nb > BDB_SKETCH_MAX_BUCKETS ||
        (nb > 2 && nb - 2 > 8 * (uint64_t)bdb_dec_left(d)))
        goto corrupt;
    bdb_sketch t;
    int64_t kmin, kmax;
    if (begin(&t, d, nb, &kmin, &kmax) != BDB_OK)
        return BDB_ERR_NOMEM;
    int64_t first = (int64_t)bdb_sk_key_of(t.ln_gamma, min) + code_off(c0);
    int ok = key_ok(first, kmin, kmax);
    if (ok) {
        t.b[0] = (bdb_sketch_bucket){(int32_t)first, nb == 1 ? count : 1};
        bitr r = {d, 0, 0};
        if (nb >= 2)
            ok = c2_bits(&r, &t, nb, count, first, bdb_sk_key_of(t.ln_gamma, max));
    }
    return finish(s, &t, d, ok, count, count, min, max);
corrupt:
    d->err = 1;
    return BDB_ERR_CORRUPT;
}

static int skip_c2(bdb_dec *d, uint64_t count)
{
    uint64_t head = bdb_dec_uvarint_canon(d);
    if (!d->err && head == 0)
        return bdb_sketch_skip(d);
    uint64_t nb = d->err ? 0 : (head - 1) / 3 + 1;
    if (d->err || nb > count || nb > BDB_SKETCH_MAX_BUCKETS) {
        d->err = 1;
        return BDB_ERR_CORRUPT;
    }
    bitr r = {d, 0, 0};
    if (nb >= 2 && !c2_bits(&r, NULL, nb, count, 0, 0))
        d->err = 1;
    return d->err ? BDB_ERR_CORRUPT : BDB_OK;
}

/* ---------------------------------------------------------------- the interface */

void bdb_sketch_write_c(const bdb_sketch *s, int form, bdb_buf *out)
{
    if (form == BDB_C1)
        write_c1(s, out);
    else
        write_c2(s, out);
}

int bdb_sketch_read_c(bdb_sketch *s, bdb_dec *d, int form, uint64_t count, double min, double max)
{
    return form == BDB_C1 ? read_c1(s, d, count, min, max) : read_c2(s, d, count, min, max);
}

int bdb_sketch_skip_c(bdb_dec *d, int form, uint64_t count)
{
    return form == BDB_C1 ? skip_c1(d, count) : skip_c2(d, count);
}
