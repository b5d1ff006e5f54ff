#include "agg/sketch.h"
#include "agg/sketch_int.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Keys: agg/sketch_int.h. */

/* Layout (docs/AGGREGATION.md):
 *   u8 version, u8 flags, uvarint alpha_ppm, uvarint max_buckets,
 *   uvarint n_neg, uvarint zero_count, uvarint n_pos,
 *   when not empty: f64 min, f64 max,
 *   n_neg buckets then n_pos buckets, each store by index ascending (for negative values
 *   from the bucket nearest zero outwards): the first index as a zigzag varint, every
 *   later one as uvarint(index - previous - 1), each followed by uvarint(count - 1). */
#define FLAG_COLLAPSED 0x01
#define FLAG_ALL FLAG_COLLAPSED

static double alpha_of(uint32_t ppm)
{
    return (double)ppm / 1e6;
}

static double ln_gamma_of(uint32_t ppm)
{
    double a = alpha_of(ppm);
    return log1p(a) - log1p(-a); /* ln((1 + a) / (1 - a)) */
}

int32_t bdb_sk_index_of(double ln_gamma, double v)
{
    return (int32_t)ceil(log(fabs(v)) / ln_gamma);
}

int32_t bdb_sk_key_of(double ln_gamma, double v)
{
    if (v == 0.0)
        return 0;
    int32_t k = bdb_sk_index_of(ln_gamma, v) + BDB_SK_KEY_BIAS;
    return v > 0 ? k : -k;
}

/* The value a bucket answers with: gamma^i (1 - alpha), within alpha of every value in
 * (gamma^(i-1), gamma^i]. Computed in the log domain: it may pass DBL_MAX, the caller
 * clamps it to [min, max]. */
static double value_of(const bdb_sketch *s, int32_t key)
{
    if (key == 0)
        return 0.0;
    int32_t i = (key > 0 ? key : -key) - BDB_SK_KEY_BIAS;
    double v = exp((double)i * s->ln_gamma + log1p(-alpha_of(s->alpha_ppm)));
    return key > 0 ? v : -v;
}

static int params_ok(uint32_t ppm, uint32_t max_buckets)
{
    return ppm >= BDB_SKETCH_ALPHA_PPM_MIN && ppm <= BDB_SKETCH_ALPHA_PPM_MAX &&
           max_buckets >= BDB_SKETCH_BUCKETS_MIN && max_buckets <= BDB_SKETCH_BUCKETS_MAX;
}

static void init_params(bdb_sketch *s, uint32_t ppm, uint32_t max_buckets)
{
    memset(s, 0, sizeof *s);
    s->alpha_ppm = ppm;
    s->max_buckets = max_buckets;
    s->ln_gamma = ln_gamma_of(ppm);
}

int bdb_sketch_init(bdb_sketch *s, double alpha, uint32_t max_buckets)
{
    double ppm = alpha * 1e6;
    double r = nearbyint(ppm);
    if (!(fabs(ppm - r) <= 1e-6) || r < BDB_SKETCH_ALPHA_PPM_MIN || r > BDB_SKETCH_ALPHA_PPM_MAX ||
        !params_ok((uint32_t)r, max_buckets)) {
        init_params(s, (uint32_t)(BDB_SKETCH_ALPHA * 1e6), BDB_SKETCH_MAX_BUCKETS);
        return BDB_ERR_INVALID;
    }
    init_params(s, (uint32_t)r, max_buckets);
    return BDB_OK;
}

void bdb_sketch_init_default(bdb_sketch *s)
{
    init_params(s, (uint32_t)(BDB_SKETCH_ALPHA * 1e6 + 0.5), BDB_SKETCH_MAX_BUCKETS);
}

void bdb_sketch_free(bdb_sketch *s)
{
    free(s->b);
    s->b = NULL;
    s->n = s->cap = 0;
    bdb_sketch_reset(s);
}

void bdb_sketch_reset(bdb_sketch *s)
{
    s->n = 0;
    s->count = 0;
    s->min = s->max = 0.0;
    s->collapsed = 0;
}

int bdb_sk_reserve(bdb_sketch *s, uint32_t want)
{
    if (want <= s->cap)
        return BDB_OK;
    uint32_t cap = s->cap ? s->cap : 16;
    while (cap < want)
        cap *= 2;
    bdb_sketch_bucket *p = bdb_realloc(s->b, (size_t)cap * sizeof *p);
    if (!p)
        return BDB_ERR_NOMEM;
    s->b = p;
    s->cap = cap;
    return BDB_OK;
}

int bdb_sketch_copy(bdb_sketch *dst, const bdb_sketch *src)
{
    if (dst == src)
        return BDB_OK;
    if (bdb_sk_reserve(dst, src->n) != BDB_OK)
        return BDB_ERR_NOMEM;
    bdb_sketch_bucket *b = dst->b;
    uint32_t cap = dst->cap;
    *dst = *src;
    dst->b = b;
    dst->cap = cap;
    if (src->n)
        memcpy(dst->b, src->b, (size_t)src->n * sizeof *b);
    return BDB_OK;
}

/* First position whose key is >= key. */
static uint32_t lower_bound(const bdb_sketch *s, int32_t key)
{
    uint32_t lo = 0, hi = s->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->b[mid].key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void note_range(bdb_sketch *s, double lo, double hi)
{
    if (s->count == 0) {
        s->min = lo;
        s->max = hi;
        return;
    }
    if (lo < s->min)
        s->min = lo;
    if (hi > s->max)
        s->max = hi;
}

int bdb_sketch_add_n(bdb_sketch *s, double v, uint64_t n)
{
    if (!isfinite(v) || n == 0)
        return BDB_ERR_INVALID;
    if (n > UINT64_MAX - s->count)
        return BDB_ERR_LIMIT;
    v += 0.0; /* -0.0 -> 0.0 */
    int32_t key = bdb_sk_key_of(s->ln_gamma, v);
    uint32_t pos = lower_bound(s, key);
    if (pos < s->n && s->b[pos].key == key) {
        s->b[pos].count += n;
    } else if (s->n < s->max_buckets) {
        if (bdb_sk_reserve(s, s->n + 1) != BDB_OK)
            return BDB_ERR_NOMEM;
        memmove(s->b + pos + 1, s->b + pos, (size_t)(s->n - pos) * sizeof *s->b);
        s->b[pos] = (bdb_sketch_bucket){key, n};
        s->n++;
    } else if (pos == 0) {
        /* below the lowest bucket of a full sketch: folds into it */
        s->b[0].count += n;
        s->collapsed = 1;
    } else {
        /* one bucket too many: the lowest folds into the next */
        uint64_t folded = s->b[0].count;
        memmove(s->b, s->b + 1, (size_t)(pos - 1) * sizeof *s->b);
        s->b[pos - 1] = (bdb_sketch_bucket){key, n};
        s->b[0].count += folded;
        s->collapsed = 1;
    }
    note_range(s, v, v);
    s->count += n;
    return BDB_OK;
}

int bdb_sketch_add(bdb_sketch *s, double v)
{
    return bdb_sketch_add_n(s, v, 1);
}

/* Folds the lowest buckets so that at most max remain. */
static void fold_to(bdb_sketch *s, uint32_t max)
{
    if (s->n <= max)
        return;
    uint32_t f = s->n - max;
    uint64_t sum = 0;
    for (uint32_t i = 0; i <= f; i++)
        sum += s->b[i].count;
    memmove(s->b, s->b + f, (size_t)max * sizeof *s->b);
    s->b[0].count = sum;
    s->n = max;
    s->collapsed = 1;
}

int bdb_sketch_merge(bdb_sketch *dst, const bdb_sketch *src)
{
    if (dst->alpha_ppm != src->alpha_ppm)
        return BDB_ERR_INVALID;
    if (src->count > UINT64_MAX - dst->count)
        return BDB_ERR_LIMIT;
    uint32_t max = dst->max_buckets < src->max_buckets ? dst->max_buckets : src->max_buckets;
    /* How many of src's keys dst lacks. */
    uint32_t missing = 0, i = 0, j = 0;
    while (j < src->n) {
        if (i < dst->n && dst->b[i].key < src->b[j].key) {
            i++;
        } else {
            if (i >= dst->n || dst->b[i].key != src->b[j].key)
                missing++;
            else
                i++;
            j++;
        }
    }
    if (missing == 0) {
        /* every key of src is in dst (always so when src == dst): add in place */
        for (i = 0, j = 0; j < src->n; i++) {
            if (dst->b[i].key == src->b[j].key)
                dst->b[i].count += src->b[j++].count;
        }
    } else {
        uint32_t m = dst->n + missing;
        if (bdb_sk_reserve(dst, m) != BDB_OK)
            return BDB_ERR_NOMEM;
        /* merge from the back, in place */
        int64_t a = (int64_t)dst->n - 1, b = (int64_t)src->n - 1, w = (int64_t)m - 1;
        while (b >= 0) {
            if (a >= 0 && dst->b[a].key > src->b[b].key) {
                dst->b[w--] = dst->b[a--];
            } else if (a >= 0 && dst->b[a].key == src->b[b].key) {
                dst->b[w].key = dst->b[a].key;
                dst->b[w--].count = dst->b[a--].count + src->b[b--].count;
            } else {
                dst->b[w--] = src->b[b--];
            }
        }
        dst->n = m;
    }
    if (src->count)
        note_range(dst, src->min, src->max);
    dst->count += src->count;
    dst->collapsed |= src->collapsed;
    dst->max_buckets = max;
    fold_to(dst, max);
    return BDB_OK;
}

double bdb_sketch_quantile(const bdb_sketch *s, double q)
{
    if (s->count == 0 || !(q >= 0.0 && q <= 1.0))
        return NAN;
    if (q == 0.0)
        return s->min;
    if (q == 1.0)
        return s->max;
    double rank = q * (double)(s->count - 1);
    uint64_t cum = 0;
    double v = s->max;
    for (uint32_t i = 0; i < s->n; i++) {
        cum += s->b[i].count;
        if ((double)cum > rank) {
            v = value_of(s, s->b[i].key);
            break;
        }
    }
    if (v < s->min)
        v = s->min;
    if (v > s->max)
        v = s->max;
    return v;
}

uint64_t bdb_sketch_count(const bdb_sketch *s)
{
    return s->count;
}

double bdb_sketch_min(const bdb_sketch *s)
{
    return s->count ? s->min : NAN;
}

double bdb_sketch_max(const bdb_sketch *s)
{
    return s->count ? s->max : NAN;
}

double bdb_sketch_alpha(const bdb_sketch *s)
{
    return alpha_of(s->alpha_ppm);
}

uint64_t bdb_sketch_accurate_from(const bdb_sketch *s)
{
    return s->collapsed && s->n ? s->b[0].count : 0;
}

/* ------------------------------------------------------------ encoding */

static int32_t index_of_key(int32_t key)
{
    return (key > 0 ? key : -key) - BDB_SK_KEY_BIAS;
}

/* One store: positions [from, to) of s->b, walked by ascending index (step -1 walks
 * the negative store from the bucket nearest zero outwards). */
static void put_store(bdb_buf *out, const bdb_sketch *s, int64_t first, int64_t n, int step)
{
    int32_t prev = 0;
    for (int64_t k = 0; k < n; k++) {
        const bdb_sketch_bucket *b = &s->b[first + k * step];
        int32_t i = index_of_key(b->key);
        if (k == 0)
            bdb_buf_put_varint(out, i);
        else
            bdb_buf_put_uvarint(out, (uint64_t)((int64_t)i - prev - 1));
        bdb_buf_put_uvarint(out, b->count - 1);
        prev = i;
    }
}

void bdb_sketch_write(const bdb_sketch *s, bdb_buf *out)
{
    uint32_t neg = lower_bound(s, 0), pos = neg;
    uint64_t zero = 0;
    if (pos < s->n && s->b[pos].key == 0)
        zero = s->b[pos++].count;
    bdb_buf_putc(out, BDB_SKETCH_VERSION);
    bdb_buf_putc(out, s->collapsed ? FLAG_COLLAPSED : 0);
    bdb_buf_put_uvarint(out, s->alpha_ppm);
    bdb_buf_put_uvarint(out, s->max_buckets);
    bdb_buf_put_uvarint(out, neg);
    bdb_buf_put_uvarint(out, zero);
    bdb_buf_put_uvarint(out, s->n - pos);
    if (s->count == 0)
        return;
    bdb_buf_put_f64(out, s->min);
    bdb_buf_put_f64(out, s->max);
    put_store(out, s, (int64_t)neg - 1, neg, -1);
    put_store(out, s, pos, s->n - pos, 1);
}

/* Reads one store of n buckets into b[at], b[at + step], ...; keys carry sign. */
static void get_store(bdb_dec *d, bdb_sketch_bucket *b, int64_t at, uint64_t n, int step, int sign,
                      int32_t idx_lo, int32_t idx_hi, uint64_t *total)
{
    int64_t prev = 0;
    for (uint64_t k = 0; k < n && !d->err; k++) {
        int64_t i;
        if (k == 0) {
            int64_t z = bdb_dec_varint_canon(d);
            if (z < idx_lo || z > idx_hi)
                d->err = 1;
            i = z;
        } else {
            uint64_t gap = bdb_dec_uvarint_canon(d);
            if (gap >= (uint64_t)(idx_hi - prev))
                d->err = 1;
            i = prev + 1 + (int64_t)(gap & 0xffffffffu);
        }
        uint64_t c = bdb_dec_uvarint_canon(d);
        if (c == UINT64_MAX || c + 1 > UINT64_MAX - *total)
            d->err = 1;
        if (d->err)
            return;
        *total += c + 1;
        int32_t key = (int32_t)i + BDB_SK_KEY_BIAS;
        b[at + (int64_t)k * step] = (bdb_sketch_bucket){sign > 0 ? key : -key, c + 1};
        prev = i;
    }
}

static int is_neg_zero(double v)
{
    return v == 0.0 && signbit(v);
}

int bdb_sk_near_key(int32_t a, int32_t b)
{
    if (a == 0 || b == 0 || (a > 0) != (b > 0))
        return a == b;
    return a - b <= 1 && b - a <= 1;
}

int bdb_sketch_read(bdb_sketch *s, bdb_dec *d)
{
    uint8_t version = bdb_dec_u8(d);
    uint8_t flags = bdb_dec_u8(d);
    uint64_t ppm = bdb_dec_uvarint_canon(d);
    uint64_t maxb = bdb_dec_uvarint_canon(d);
    uint64_t n_neg = bdb_dec_uvarint_canon(d);
    uint64_t zero = bdb_dec_uvarint_canon(d);
    uint64_t n_pos = bdb_dec_uvarint_canon(d);
    if (d->err || version != BDB_SKETCH_VERSION || (flags & ~FLAG_ALL) || ppm > UINT32_MAX ||
        maxb > UINT32_MAX || !params_ok((uint32_t)ppm, (uint32_t)maxb) || n_neg > maxb ||
        n_pos > maxb)
        goto corrupt;
    uint64_t nb = n_neg + n_pos + (zero ? 1 : 0);
    if (nb > maxb || ((flags & FLAG_COLLAPSED) && nb != maxb))
        goto corrupt;
    bdb_sketch t;
    init_params(&t, (uint32_t)ppm, (uint32_t)maxb);
    t.collapsed = flags & FLAG_COLLAPSED;
    if (nb == 0) {
        if (t.collapsed)
            goto corrupt;
        s->alpha_ppm = t.alpha_ppm;
        s->max_buckets = t.max_buckets;
        s->ln_gamma = t.ln_gamma;
        bdb_sketch_reset(s);
        return BDB_OK;
    }
    /* 16 bytes of min and max and at least 2 per bucket must follow: no allocation for
     * a short garbage input */
    if (bdb_dec_left(d) < 16 + 2 * (n_neg + n_pos))
        goto corrupt;
    t.min = bdb_dec_f64(d);
    t.max = bdb_dec_f64(d);
    if (!isfinite(t.min) || !isfinite(t.max) || is_neg_zero(t.min) || is_neg_zero(t.max) ||
        t.min > t.max)
        goto corrupt;
    t.b = bdb_malloc((size_t)nb * sizeof *t.b);
    if (!t.b) {
        d->err = 1;
        return BDB_ERR_NOMEM;
    }
    t.n = t.cap = (uint32_t)nb;
    int32_t idx_lo = bdb_sk_index_of(t.ln_gamma, DBL_TRUE_MIN) - 1;
    int32_t idx_hi = bdb_sk_index_of(t.ln_gamma, DBL_MAX) + 1;
    uint64_t total = 0;
    get_store(d, t.b, (int64_t)n_neg - 1, n_neg, -1, -1, idx_lo, idx_hi, &total);
    if (zero) {
        if (zero > UINT64_MAX - total)
            d->err = 1;
        total += zero;
        t.b[n_neg] = (bdb_sketch_bucket){0, zero};
    }
    uint64_t pos_at = n_neg + (zero ? 1 : 0);
    get_store(d, t.b, (int64_t)pos_at, n_pos, 1, 1, idx_lo, idx_hi, &total);
    if (d->err)
        goto corrupt_free;
    t.count = total;
    /* min and max agree with the buckets: the top bucket holds max, the lowest holds min
     * unless lower buckets were folded into it; one value means min == max. */
    int32_t kmin = bdb_sk_key_of(t.ln_gamma, t.min), kmax = bdb_sk_key_of(t.ln_gamma, t.max);
    if (!bdb_sk_near_key(kmax, t.b[t.n - 1].key))
        goto corrupt_free;
    if (t.collapsed ? kmin > t.b[0].key && !bdb_sk_near_key(kmin, t.b[0].key)
                    : !bdb_sk_near_key(kmin, t.b[0].key))
        goto corrupt_free;
    if ((t.count == 1 && t.min != t.max) || (t.collapsed && t.min == t.max) ||
        (t.min == t.max && t.n != 1))
        goto corrupt_free;
    free(s->b);
    *s = t;
    return BDB_OK;
corrupt_free:
    free(t.b);
corrupt:
    d->err = 1;
    return BDB_ERR_CORRUPT;
}

int bdb_sketch_skip(bdb_dec *d)
{
    uint8_t version = bdb_dec_u8(d);
    uint8_t flags = bdb_dec_u8(d);
    bdb_dec_uvarint(d); /* alpha */
    uint64_t maxb = bdb_dec_uvarint(d);
    uint64_t n_neg = bdb_dec_uvarint(d);
    uint64_t zero = bdb_dec_uvarint(d);
    uint64_t n_pos = bdb_dec_uvarint(d);
    /* the header rules of bdb_sketch_read (maxb below 2^32 also keeps the sums below
     * exact); two varints per bucket bound the counts by the bytes left */
    if (d->err || version != BDB_SKETCH_VERSION || (flags & ~FLAG_ALL) || maxb > UINT32_MAX ||
        n_neg > maxb || n_pos > maxb || n_neg + n_pos + (zero ? 1 : 0) > maxb ||
        n_neg + n_pos > bdb_dec_left(d)) {
        d->err = 1;
        return BDB_ERR_CORRUPT;
    }
    if (n_neg + n_pos + (zero ? 1 : 0) == 0)
        return BDB_OK; /* an empty sketch: no min, max or buckets */
    bdb_dec_bytes(d, 16);
    for (uint64_t k = 0; k < 2 * (n_neg + n_pos) && !d->err; k++)
        bdb_dec_uvarint(d); /* the first index of a store is zigzag: same length */
    return d->err ? BDB_ERR_CORRUPT : BDB_OK;
}

int bdb_sketch_decode(bdb_sketch *s, const void *p, size_t n)
{
    bdb_dec d;
    bdb_dec_init(&d, p, n);
    bdb_sketch t;
    bdb_sketch_init_default(&t);
    int rc = bdb_sketch_read(&t, &d);
    if (rc == BDB_OK && bdb_dec_left(&d) != 0)
        rc = BDB_ERR_CORRUPT;
    if (rc == BDB_OK) {
        bdb_sketch_free(s);
        *s = t;
    } else {
        bdb_sketch_free(&t);
    }
    return rc;
}
