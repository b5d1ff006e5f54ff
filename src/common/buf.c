#include "common/buf.h"
#include "common/alloc.h"
#include "common/utf8.h"
#include "bucketdb/bdb.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bdb_buf_init(bdb_buf *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->checked = b->oom = 0;
}

void bdb_buf_init_checked(bdb_buf *b)
{
    bdb_buf_init(b);
    b->checked = 1;
}

void bdb_buf_free(bdb_buf *b)
{
    uint8_t checked = b->checked;
    free(b->data);
    bdb_buf_init(b);
    b->checked = checked;
}

void bdb_buf_reset(bdb_buf *b)
{
    b->len = 0;
}

int bdb_buf_reserve(bdb_buf *b, size_t extra)
{
    if (b->oom)
        return BDB_ERR_NOMEM;
    if (b->cap - b->len >= extra)
        return BDB_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap - b->len < extra)
        cap *= 2;
    uint8_t *p = bdb_realloc(b->data, cap);
    if (!p) {
        if (b->checked) {
            b->oom = 1;
            return BDB_ERR_NOMEM;
        }
        fprintf(stderr, "bucketdb: out of memory growing a buffer to %zu bytes\n", cap);
        abort();
    }
    b->data = p;
    b->cap = cap;
    return BDB_OK;
}

void bdb_buf_append(bdb_buf *b, const void *p, size_t n)
{
    if (n == 0 || bdb_buf_reserve(b, n) != BDB_OK)
        return;
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void bdb_buf_putc(bdb_buf *b, uint8_t c)
{
    if (bdb_buf_reserve(b, 1) != BDB_OK)
        return;
    b->data[b->len++] = c;
}

void bdb_buf_puts(bdb_buf *b, const char *s)
{
    bdb_buf_append(b, s, strlen(s));
}

void bdb_buf_printf(bdb_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (bdb_buf_reserve(b, (size_t)n + 1) != BDB_OK)
        return;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void bdb_buf_put_u32le(bdb_buf *b, uint32_t v)
{
    if (bdb_buf_reserve(b, 4) != BDB_OK)
        return;
    bdb_put_u32le(b->data + b->len, v);
    b->len += 4;
}

void bdb_buf_put_u64le(bdb_buf *b, uint64_t v)
{
    if (bdb_buf_reserve(b, 8) != BDB_OK)
        return;
    bdb_put_u64le(b->data + b->len, v);
    b->len += 8;
}

void bdb_buf_put_uvarint(bdb_buf *b, uint64_t v)
{
    if (bdb_buf_reserve(b, 10) != BDB_OK)
        return;
    uint8_t *p = b->data + b->len;
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    b->len = (size_t)(p - b->data);
}

void bdb_buf_put_varint(bdb_buf *b, int64_t v)
{
    bdb_buf_put_uvarint(b, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

void bdb_buf_put_f64(bdb_buf *b, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    bdb_buf_put_u64le(b, u);
}

void bdb_buf_put_str(bdb_buf *b, const char *s, size_t n)
{
    bdb_buf_put_uvarint(b, n);
    bdb_buf_append(b, s, n);
}

void bdb_buf_json_str(bdb_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (bdb_buf_reserve(b, n + 2) != BDB_OK)
        return;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            bdb_buf_putc(b, '\\');
            bdb_buf_putc(b, c);
        } else if (c < 0x20) {
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            bdb_buf_append(b, esc, 6);
        } else if (c < 0x80) {
            bdb_buf_putc(b, c);
        } else {
            /* JSON must be UTF-8: ingestion refuses other bytes, but data stored before
             * it did, or read from elsewhere, must not make a whole answer unreadable */
            size_t l = bdb_utf8_seq((const unsigned char *)s + i, n - i);
            if (l) {
                bdb_buf_append(b, s + i, l);
                i += l - 1;
            } else {
                bdb_buf_append(b, "\\ufffd", 6);
            }
        }
    }
}

/* Doubles for JSON and line protocol: the shortest of %.15g, %.16g and %.17g that
 * reads back as the same double (what strtod gives), as printf and strtod would
 * find it, but without them for |v| in [1e-4, 1e15), where %g writes fixed
 * notation: formatting doubles was most of the time of a JSON answer. The other
 * values go through printf. common_test compares both ways over many values. */

static const double p10d[] = {1e-4, 1e-3, 1e-2, 1e-1, 1e0,  1e1,  1e2,  1e3,
                              1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                              1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19};
#define P10(d) p10d[(d) + 4] /* 10^d for d in -4..19 */

/* Two digits at a time from a table: put_fixed and the integer writers run for
 * every value of an answer. */
static const char digits2[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536"
    "37383940414243444546474849505152535455565758596061626364656667686970717273"
    "7475767778798081828384858687888990919293949596979899";

/* The decimal digits of u at the end of buf (24 bytes); returns where they start. */
static char *u64_digits(uint64_t u, char *end)
{
    char *p = end;
    while (u >= 100) {
        unsigned r = (unsigned)(u % 100);
        u /= 100;
        *--p = digits2[2 * r + 1];
        *--p = digits2[2 * r];
    }
    if (u >= 10) {
        *--p = digits2[2 * u + 1];
        *--p = digits2[2 * u];
    } else {
        *--p = (char)('0' + u);
    }
    return p;
}

/* u with d decimals, in fixed notation without trailing zeros; returns the length. */
static size_t put_fixed(uint64_t u, int d, int neg, char *out)
{
    while (d > 0 && u % 10 == 0) {
        u /= 10;
        d--;
    }
    char tmp[24], *end = tmp + sizeof tmp;
    const char *p = u64_digits(u, end);
    int n = (int)(end - p);
    size_t len = 0;
    if (neg)
        out[len++] = '-';
    if (n <= d) { /* 0.0042: the zeros before the first digit */
        out[len++] = '0';
        out[len++] = '.';
        for (int z = n; z < d; z++)
            out[len++] = '0';
    } else {
        memcpy(out + len, p, (size_t)(n - d));
        len += (size_t)(n - d);
        p += n - d;
        n = d;
        if (d)
            out[len++] = '.';
    }
    memcpy(out + len, p, (size_t)n);
    return len + (size_t)n;
}

/* Up to 15 digits (what a sensor sends: 21.37, 1013, 0.004): m = round(a x 10^d)
 * with exactly 15 digits. If m / 10^d == a, that decimal reads back as a (m and
 * 10^d are exact doubles, and both the division and strtod round the same exact
 * quotient correctly), so it is what %.15g prints, and without its trailing zeros
 * the shortest form. If not, no decimal of 15 digits or fewer reads back as a. k is
 * about log10(a); the checks on m settle it. */
static size_t fmt_15(double a, int k, int neg, char *out)
{
    int d = 14 - k;
    double m = rint(a * P10(d));
    if (m >= 1e15 && d > 0)
        m = rint(a * P10(--d));
    else if (m < 1e14 && d < 19)
        m = rint(a * P10(++d));
    if (m >= 1e15 || m < 1e14 || m / P10(d) != a)
        return 0;
    return put_fixed((uint64_t)m, d, neg, out);
}

__extension__ typedef unsigned __int128 u128;

static const uint64_t pow5[] = {1ull,
                                5ull,
                                25ull,
                                125ull,
                                625ull,
                                3125ull,
                                15625ull,
                                78125ull,
                                390625ull,
                                1953125ull,
                                9765625ull,
                                48828125ull,
                                244140625ull,
                                1220703125ull,
                                6103515625ull,
                                30517578125ull,
                                152587890625ull,
                                762939453125ull,
                                3814697265625ull,
                                19073486328125ull,
                                95367431640625ull,
                                476837158203125ull,
                                2384185791015625ull};

/* f x 2^e x 10^j rounded to an integer, half to even, exactly (f < 2^53, j <= 22:
 * f x 5^j < 2^105; the caller keeps the result below 10^17). */
static uint64_t scaled_round(uint64_t f, int e, int j)
{
    u128 num = (u128)f * pow5[j];
    int s = e + j;
    if (s >= 0)
        return (uint64_t)(num << s);
    if (s < -120)
        return 0;
    u128 q = num >> -s, rem = num - (q << -s), half = (u128)1 << (-s - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return (uint64_t)q;
}

/* Does the decimal D x 10^-j read back as f x 2^e? Yes when it lies strictly between
 * the midpoints to the neighbouring doubles, or on one and f is even (strtod rounds
 * ties to even). Both sides are scaled by 10^j x 2^(2-e) to compare integers. */
static int reads_back(uint64_t f, int e, uint64_t D, int j)
{
    u128 lo = 4 * f - (f == (1ull << 52) ? 1 : 2), hi = 4 * f + 2; /* x 2^(e-2) */
    u128 x = D;
    lo *= pow5[j];
    hi *= pow5[j];
    int t = e - 2 + j;
    if (t >= 0) {
        lo <<= t;
        hi <<= t;
    } else {
        x <<= -t;
    }
    if (x > lo && x < hi)
        return 1;
    return (x == lo || x == hi) && !(f & 1);
}

/* 16 or 17 digits, exactly as %.16g (if it reads back) or else %.17g print them:
 * correctly rounded digits of a = f x 2^e, computed in 128-bit integers. 0 if the
 * digit count cannot be settled (the printf path then decides). */
static size_t fmt_17(double a, int k, int neg, char *out)
{
    uint64_t bits;
    memcpy(&bits, &a, sizeof bits);
    uint64_t f = (bits & ((1ull << 52) - 1)) | (1ull << 52); /* a is normal here */
    int e = (int)((bits >> 52) & 0x7ff) - 1075;
    for (int n = 16; n <= 17; n++) {
        uint64_t lo = (uint64_t)P10(n - 1), hi = (uint64_t)P10(n);
        int j = n - 1 - k;
        uint64_t D = scaled_round(f, e, j);
        if (D >= hi && j > 0)
            D = scaled_round(f, e, --j);
        else if (D < lo && j < 22)
            D = scaled_round(f, e, ++j);
        if (D == hi && j > 0) { /* 9.99...96 rounded up to the next power of ten */
            D = lo;
            j--;
        }
        if (D < lo || D >= hi)
            return 0;
        if (n == 17 || reads_back(f, e, D, j))
            return put_fixed(D, j, neg, out);
    }
    return 0;
}

void bdb_buf_u64(bdb_buf *b, uint64_t v)
{
    char tmp[24], *end = tmp + sizeof tmp;
    char *p = u64_digits(v, end);
    bdb_buf_append(b, p, (size_t)(end - p));
}

void bdb_buf_i64(bdb_buf *b, int64_t v)
{
    char tmp[24], *end = tmp + sizeof tmp;
    /* the magnitude as unsigned: -INT64_MIN does not fit an int64_t */
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    char *p = u64_digits(u, end);
    if (v < 0)
        *--p = '-';
    bdb_buf_append(b, p, (size_t)(end - p));
}

void bdb_buf_double(bdb_buf *b, double v)
{
    char tmp[32];
    double a = fabs(v);
    if (a >= 1e-4 && a < 1e15) {
        int k = -4; /* 10^k <= a, about */
        while (k < 14 && a >= P10(k + 1))
            k++;
        size_t n = fmt_15(a, k, v < 0, tmp);
        if (!n)
            n = fmt_17(a, k, v < 0, tmp);
        if (n) {
            bdb_buf_append(b, tmp, n);
            return;
        }
    }
    /* %.17g always round-trips; try shorter first so 0.1 prints as 0.1. */
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (prec == 17 || strtod(tmp, NULL) == v)
            break;
    }
    bdb_buf_puts(b, tmp);
}

void bdb_dec_init(bdb_dec *d, const void *p, size_t n)
{
    d->p = p;
    d->end = d->p + n;
    d->err = 0;
}

static int need(bdb_dec *d, size_t n)
{
    if (d->err || (size_t)(d->end - d->p) < n) {
        d->err = 1;
        return 0;
    }
    return 1;
}

uint8_t bdb_dec_u8(bdb_dec *d)
{
    if (!need(d, 1))
        return 0;
    return *d->p++;
}

uint32_t bdb_dec_u32le(bdb_dec *d)
{
    if (!need(d, 4))
        return 0;
    uint32_t v = bdb_get_u32le(d->p);
    d->p += 4;
    return v;
}

uint64_t bdb_dec_u64le(bdb_dec *d)
{
    if (!need(d, 8))
        return 0;
    uint64_t v = bdb_get_u64le(d->p);
    d->p += 8;
    return v;
}

uint64_t bdb_dec_uvarint_slow(bdb_dec *d)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (!need(d, 1))
            return 0;
        uint8_t c = *d->p++;
        /* The 10th byte holds only bit 63: more would be silently dropped. */
        if (shift == 63 && (c & 0x7e)) {
            d->err = 1;
            return 0;
        }
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            return v;
    }
    d->err = 1;
    return 0;
}

uint64_t bdb_dec_uvarint_canon_slow(bdb_dec *d)
{
    const uint8_t *start = d->p;
    uint64_t v = bdb_dec_uvarint(d);
    size_t len = (size_t)(d->p - start), want = 1;
    for (uint64_t x = v; x >= 0x80; x >>= 7)
        want++;
    if (!d->err && len != want) {
        d->err = 1;
        return 0;
    }
    return v;
}

int64_t bdb_dec_varint_canon(bdb_dec *d)
{
    uint64_t u = bdb_dec_uvarint_canon(d);
    return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

double bdb_dec_f64(bdb_dec *d)
{
    uint64_t u = bdb_dec_u64le(d);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* ---------------------------------------------------------------- exact numbers */

#define NUM_RAW BDB_NUM_RAW
#define NUM_MAX_M 9007199254740992.0 /* 2^53: every integer up to it is a double */

static const double num_p10[15] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6, 1e7,
                                   1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14};

/* The form bdb_buf_put_num writes: the smallest e with v == m / 10^e (a correctly
 * rounded division of two exact doubles, so the reader gets the same bits), or
 * NUM_RAW. */
unsigned bdb_num_form(double v, int64_t *m)
{
    if (!isfinite(v) || (v == 0.0 && signbit(v)) || fabs(v) > NUM_MAX_M)
        return NUM_RAW;
    for (unsigned e = 0; e < NUM_RAW; e++) {
        double x = nearbyint(v * num_p10[e]);
        if (fabs(x) > NUM_MAX_M)
            break; /* larger e only grows it */
        if (x / num_p10[e] == v) {
            *m = (int64_t)x;
            return e;
        }
    }
    return NUM_RAW;
}

double bdb_num_value(int64_t m, unsigned e)
{
    return (double)m / num_p10[e];
}

void bdb_buf_put_num(bdb_buf *b, double v)
{
    int64_t m = 0;
    unsigned e = bdb_num_form(v, &m);
    if (e == NUM_RAW) {
        bdb_buf_putc(b, NUM_RAW);
        bdb_buf_put_f64(b, v);
        return;
    }
    uint64_t zz = ((uint64_t)m << 1) ^ (uint64_t)(m >> 63);
    bdb_buf_put_uvarint(b, zz << 4 | e);
}

double bdb_dec_num(bdb_dec *d)
{
    uint64_t u = bdb_dec_uvarint_canon(d);
    if (d->err)
        return 0.0;
    unsigned e = (unsigned)(u & 15u), want;
    int64_t m = 0;
    double v;
    if (e == NUM_RAW) {
        if (u != NUM_RAW) {
            d->err = 1;
            return 0.0;
        }
        v = bdb_dec_f64(d);
        want = bdb_num_form(v, &m);
    } else {
        uint64_t zz = u >> 4;
        int64_t k = (int64_t)(zz >> 1) ^ -(int64_t)(zz & 1);
        if (k > (int64_t)NUM_MAX_M || k < -(int64_t)NUM_MAX_M) {
            d->err = 1;
            return 0.0;
        }
        v = (double)k / num_p10[e];
        /* num_form would find e and k again, so the form is canonical: with e = 0, v is
         * k exactly; with |k| < 2^50 not a multiple of 10, another m' / 10^e' (e' < e)
         * differs from k / 10^e by at least 10^-e, more than v's ulp (< 0.51 x 10^-e),
         * so it rounds to another double, and v x 10^e is k within 0.25. The check
         * costs more than the rest of the decoding. */
        if (e == 0 || (k % 10 != 0 && k < (INT64_C(1) << 50) && k > -(INT64_C(1) << 50)))
            return v;
        want = bdb_num_form(v, &m);
        if (want == e && m != k)
            want = NUM_RAW; /* another m of the same e: not what the writer made */
    }
    if (want != e)
        d->err = 1; /* not the writer's form (canonical) */
    return d->err ? 0.0 : v;
}

void bdb_dec_skip_num(bdb_dec *d)
{
    uint64_t u = bdb_dec_uvarint(d);
    if (d->err || (u & 15u) != NUM_RAW)
        return;
    if (u != NUM_RAW)
        d->err = 1;
    else
        bdb_dec_bytes(d, 8);
}

int64_t bdb_dec_varint(bdb_dec *d)
{
    uint64_t u = bdb_dec_uvarint(d);
    return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

const char *bdb_dec_str(bdb_dec *d, size_t *n)
{
    uint64_t len = bdb_dec_uvarint(d);
    if (d->err || len > bdb_dec_left(d)) {
        d->err = 1;
        *n = 0;
        return "";
    }
    const char *s = (const char *)d->p;
    d->p += len;
    *n = (size_t)len;
    return s;
}

const uint8_t *bdb_dec_bytes(bdb_dec *d, size_t n)
{
    if (!need(d, n))
        return NULL;
    const uint8_t *p = d->p;
    d->p += n;
    return p;
}
