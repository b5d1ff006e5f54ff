/* chunk: Gorilla-style XOR chunks and exact-decimal chunks.
 *
 * Layout (all bit streams are MSB-first):
 *   XOR:     u8 enc, u16le count, bits: samples
 *   PACKED:  u8 enc | flags, uvarint count, zigzag varint t0, zigzag varint m0; with two
 *            samples or more also uvarint tbase, zigzag varint vbase, zigzag varint
 *            d1 (deltas of deltas only), then bits: 6-bit tw, 6-bit vw, and for each
 *            sample i >= 1 a timestamp code and (deltas: i >= 1, deltas of deltas:
 *            i >= 2) a value code
 *   DECIMAL: u8 enc, u16le count, u8 exp, uvarint ts_bytes, ts_bytes of timestamp bits,
 *            then one zigzag varint per sample for the mantissa (read only)
 * XOR and DECIMAL timestamps: sample 0 as a zigzag varint written in 8-bit groups,
 * sample 1 as an unsigned varint delta, later samples as a delta-of-delta in one of
 * six buckets (prefix 0, 10, 110, 1110, 11110, 11111 with 0, 7, 12, 20, 32, 64 bits).
 * XOR values: sample 0 raw 64 bits, then '0' (same value), '10' + bits inside the
 * previous window, or '11' + 5-bit leading zeros + 6-bit width (0 means 64) + bits.
 * DECIMAL values: mantissa m0, then m1 - m0, then deltas of deltas.
 * PACKED flags: bits 0-3 exponent e, bit 4 deltas of deltas, bits 5-6 timestamp unit
 * (10^0..10^3 ms; timestamps, t0 and tbase are in that unit). A code of width w > 0
 * stands for x = base + unzigzag(c) (mod 2^64), where x is the timestamp delta, the
 * mantissa delta, or the delta of mantissa deltas; the all-ones code escapes to a
 * 6-bit L - 1 and an L-bit c. A width of 0 writes no codes: every x is the base. */
#include "storage/embedded/chunk.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HDR_XOR 3
#define HDR_DEC 4
/* The bit writer and reader touch 8 bytes from the current byte on. */
#define SLACK 8
/* Worst case bits per sample: 80 (varint) + 77 (new XOR window with 64 bits). */
#define MAX_SAMPLE_BITS 160
/* Worst case bits of one timestamp after the first two. */
#define MAX_DOD_BITS 69
/* No valid chunk comes near this; it keeps bit positions inside uint32_t. */
#define MAX_STREAM_BYTES (1u << 24)
#define NO_WINDOW 0xff
#define MANT_LIMIT (1ull << 53)

static const double pow10_tab[16] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                     1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};

static inline uint64_t load_be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline void store_be64(uint8_t *p, uint64_t v)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}

static inline uint64_t dbl_bits(double v)
{
    uint64_t b;
    memcpy(&b, &v, 8);
    return b;
}

static inline double bits_dbl(uint64_t b)
{
    double v;
    memcpy(&v, &b, 8);
    return v;
}

static inline uint64_t zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline uint64_t unzigzag(uint64_t u)
{
    return (u >> 1) ^ (0 - (u & 1));
}

/* ---- bit writer: OR-ing into zeroed memory lets one unaligned store place any run of
 * up to 57 bits, which is what makes appends cheap. ---- */

static inline void put_bits(uint8_t *s, uint32_t *pos, uint64_t v, unsigned n)
{
    uint8_t *p = s + (*pos >> 3);
    store_be64(p, load_be64(p) | v << (64 - (*pos & 7) - n));
    *pos += n;
}

static inline void put_bits64(uint8_t *s, uint32_t *pos, uint64_t v, unsigned n)
{
    if (n > 57) {
        put_bits(s, pos, v >> 32, n - 32);
        put_bits(s, pos, v & 0xffffffffu, 32);
    } else {
        put_bits(s, pos, v, n);
    }
}

static void put_bit_uvarint(uint8_t *s, uint32_t *pos, uint64_t v)
{
    while (v >= 0x80) {
        put_bits(s, pos, (v & 0x7f) | 0x80, 8);
        v >>= 7;
    }
    put_bits(s, pos, v, 8);
}

/* Timestamp i of a stream. Deltas are unsigned so that any two int64 timestamps fit;
 * the delta-of-delta is modular and the buckets test it as a signed number. */
static inline void put_ts(uint8_t *s, uint32_t *pos, uint32_t i, int64_t *t_last, uint64_t *t_delta,
                          int64_t ts)
{
    if (i == 0) {
        put_bit_uvarint(s, pos, zigzag(ts));
    } else {
        uint64_t delta = (uint64_t)ts - (uint64_t)*t_last;
        if (i == 1) {
            put_bit_uvarint(s, pos, delta);
        } else {
            uint64_t dod = delta - *t_delta;
            if (dod == 0)
                put_bits(s, pos, 0, 1);
            else if (dod + 64 < 128)
                put_bits(s, pos, 2u << 7 | (dod & 0x7f), 9);
            else if (dod + 2048 < 4096)
                put_bits(s, pos, 6u << 12 | (dod & 0xfff), 15);
            else if (dod + (1u << 19) < (1u << 20))
                put_bits(s, pos, 14u << 20 | (dod & 0xfffff), 24);
            else if (dod + (1ull << 31) < (1ull << 32))
                put_bits(s, pos, 30ull << 32 | (dod & 0xffffffffu), 37);
            else {
                put_bits(s, pos, 31, 5);
                put_bits64(s, pos, dod, 64);
            }
        }
        *t_delta = delta;
    }
    *t_last = ts;
}

static inline void put_value(bdb_chunk_app *a, uint8_t *s, uint64_t bits)
{
    uint64_t x = bits ^ a->v_last;
    a->v_last = bits;
    if (x == 0) {
        put_bits(s, &a->nbits, 0, 1);
        return;
    }
    unsigned lead = (unsigned)__builtin_clzll(x), trail = (unsigned)__builtin_ctzll(x);
    if (lead > 31)
        lead = 31;
    unsigned sig = 64 - lead - trail;
    if (a->lead != NO_WINDOW && lead >= a->lead && trail >= a->trail) {
        unsigned wsig = 64u - a->lead - a->trail;
        /* A much narrower new window pays for its 11 header bits right away. */
        if (wsig <= sig + 11) {
            if (wsig + 2 <= 57) {
                put_bits(s, &a->nbits, 2ull << wsig | x >> a->trail, wsig + 2);
            } else {
                put_bits(s, &a->nbits, 2, 2);
                put_bits64(s, &a->nbits, x >> a->trail, wsig);
            }
            return;
        }
    }
    a->lead = (uint8_t)lead;
    a->trail = (uint8_t)trail;
    uint64_t head = 3u << 11 | lead << 6 | (sig & 63);
    if (sig + 13 <= 57) {
        put_bits(s, &a->nbits, head << sig | x >> trail, sig + 13);
    } else {
        put_bits(s, &a->nbits, head, 13);
        put_bits64(s, &a->nbits, x >> trail, sig);
    }
}

/* One XOR sample; the caller has checked order and capacity. */
static inline void xor_put(bdb_chunk_app *a, uint8_t *s, int64_t ts, uint64_t bits)
{
    put_ts(s, &a->nbits, a->count, &a->t_last, &a->t_delta, ts);
    if (a->count == 0) {
        put_bits64(s, &a->nbits, bits, 64);
        a->v_last = bits;
    } else {
        put_value(a, s, bits);
    }
    a->count++;
}

static void write_hdr(uint8_t *p, uint8_t enc, uint16_t count)
{
    p[0] = enc;
    p[1] = (uint8_t)count;
    p[2] = (uint8_t)(count >> 8);
}

/* ---- appender ---- */

void bdb_chunk_app_init(bdb_chunk_app *a)
{
    memset(a, 0, sizeof(*a));
    a->lead = NO_WINDOW;
}

void bdb_chunk_app_free(bdb_chunk_app *a)
{
    free(a->buf);
    bdb_chunk_app_init(a);
}

static int app_grow(bdb_chunk_app *a, size_t need)
{
    size_t cap = a->cap ? a->cap : 32;
    while (cap < need)
        cap *= 2;
    uint8_t *p = bdb_realloc(a->buf, cap);
    if (!p)
        return BDB_ERR_NOMEM; /* the chunk is as it was */
    memset(p + a->cap, 0, cap - a->cap);
    a->buf = p;
    a->cap = (uint32_t)cap;
    return BDB_OK;
}

int bdb_chunk_app_reserve(bdb_chunk_app *a, uint32_t n)
{
    size_t need = HDR_XOR + ((a->nbits + (uint64_t)n * MAX_SAMPLE_BITS) >> 3) + SLACK;
    return need > a->cap ? app_grow(a, need) : BDB_OK;
}

int bdb_chunk_app_append(bdb_chunk_app *a, int64_t ts, double v)
{
    if (a->count == BDB_CHUNK_MAX_SAMPLES)
        return BDB_ERR_LIMIT;
    if (a->count > 0 && ts <= a->t_last)
        return BDB_ERR_INVALID;
    size_t need = HDR_XOR + ((a->nbits + MAX_SAMPLE_BITS) >> 3) + SLACK;
    if (need > a->cap && app_grow(a, need) != BDB_OK)
        return BDB_ERR_NOMEM;
    xor_put(a, a->buf + HDR_XOR, ts, dbl_bits(v));
    write_hdr(a->buf, BDB_CHUNK_XOR, a->count);
    return BDB_OK;
}

const uint8_t *bdb_chunk_app_bytes(const bdb_chunk_app *a, size_t *len)
{
    static const uint8_t empty[HDR_XOR] = {BDB_CHUNK_XOR, 0, 0};
    if (!a->buf) {
        *len = sizeof(empty);
        return empty;
    }
    *len = HDR_XOR + ((a->nbits + 7) >> 3);
    return a->buf;
}

/* ---- batch encoder ---- */

/* Rounds to nearest without a libm call: adding 2^52 leaves no fraction bits, and a
 * double of magnitude >= 2^52 is already an integer. */
static inline double round_near(double x)
{
    if (fabs(x) >= 0x1p52)
        return x;
    const double magic = x < 0 ? -0x1p52 : 0x1p52;
    return (x + magic) - magic;
}

/* Mantissa of v at exponent e if (double)m / 10^e reproduces v bit for bit, which is
 * exactly what the iterator computes. This rejects -0.0, NaN, infinities, subnormals
 * and anything too large or too fine. */
static inline int decimal_at(double v, unsigned e, int64_t *m)
{
    double x = v * pow10_tab[e];
    if (!(fabs(x) < 0x1p53))
        return 0;
    int64_t mi = (int64_t)round_near(x);
    if (mi >= (int64_t)MANT_LIMIT || mi <= -(int64_t)MANT_LIMIT)
        return 0;
    if (dbl_bits((double)mi / pow10_tab[e]) != dbl_bits(v))
        return 0;
    *m = mi;
    return 1;
}

/* The smallest exponent at which every value is an exact decimal, or -1. A value exact
 * at e stays exact at a larger exponent unless its mantissa outgrows 2^53, which the
 * writing pass re-checks. */
static int decimal_exponent(const double *vals, size_t n)
{
    unsigned e = 0;
    int64_t m;
    for (size_t i = 0; i < n; i++) {
        if (decimal_at(vals[i], e, &m))
            continue;
        do {
            if (++e > 15)
                return -1;
        } while (!decimal_at(vals[i], e, &m));
    }
    return (int)e;
}

/* Appends a DECIMAL chunk; gives up (out unchanged, returns 0) if a value does not fit
 * the exponent or the chunk would not be smaller than limit bytes. */
static int encode_decimal(const int64_t *ts, const double *vals, size_t n, unsigned e, bdb_buf *out,
                          size_t limit)
{
    size_t base = out->len;
    size_t ts_max = (2 * MAX_SAMPLE_BITS + n * MAX_DOD_BITS + 7) / 8 + SLACK;
    /* Timestamps go 8 bytes in (room for the length varint), then slide down. */
    if (bdb_buf_reserve(out, HDR_DEC + 8 + ts_max) != BDB_OK)
        return 0; /* a checked buffer out of memory: out->oom tells the caller */
    uint8_t *s = out->data + base + HDR_DEC + 8;
    memset(s, 0, ts_max);
    uint32_t pos = 0;
    int64_t t_last = 0;
    uint64_t t_delta = 0;
    for (size_t i = 0; i < n; i++)
        put_ts(s, &pos, (uint32_t)i, &t_last, &t_delta, ts[i]);
    size_t ts_bytes = (pos + 7) >> 3;
    uint8_t *p = out->data + base;
    write_hdr(p, BDB_CHUNK_DECIMAL, (uint16_t)n);
    p[3] = (uint8_t)e;
    out->len = base + HDR_DEC;
    bdb_buf_put_uvarint(out, ts_bytes);
    s = out->data + base + HDR_DEC + 8; /* in case the buffer moved */
    memmove(out->data + out->len, s, ts_bytes);
    out->len += ts_bytes;

    int64_t m_last = 0, d_last = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t m;
        if (!decimal_at(vals[i], e, &m) || out->len - base >= limit) {
            out->len = base;
            return 0;
        }
        /* |m| < 2^53, so deltas and deltas of deltas cannot overflow. */
        int64_t d = m - m_last;
        bdb_buf_put_varint(out, i == 0 ? m : i == 1 ? d : d - d_last);
        m_last = m;
        d_last = d;
    }
    if (out->len - base >= limit) {
        out->len = base;
        return 0;
    }
    return 1;
}

/* ---- PACKED ---- */

#define PK_WIDTH_BITS 6 /* each of tw and vw */
#define PK_MAX_WIDTH 63
#define PK_LEN_BITS 6 /* escape: L - 1 */
#define PK_SAMPLE 15  /* values looked at to guess a median */
#define PK_STACK 128  /* samples whose scratch fits on the stack */

static const int64_t unit_tab[4] = {1, 10, 100, 1000};

static inline unsigned bit_len(uint64_t u)
{
    return u ? 64u - (unsigned)__builtin_clzll(u) : 0;
}

static inline unsigned uvarint_len(uint64_t v)
{
    unsigned n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* zigzag of a modular difference read as signed */
static inline uint64_t zz(uint64_t d)
{
    return (d << 1) ^ (0 - (d >> 63));
}

/* How one stream of x (mod 2^64) is coded: zigzag(x - base) in w bits, all ones
 * escaping; bits is the stream's total size. */
typedef struct pk_plan {
    uint64_t base, bits;
    unsigned w;
} pk_plan;

/* The best width for this base, kept in *best if it beats it. An escaped code costs
 * w + 6 + L bits, so the width trades n * w against the outliers it leaves out. */
static void plan_base(const uint64_t *x, size_t n, uint64_t base, pk_plan *best, size_t *below,
                      size_t *above)
{
    /* h[2k] counts codes of bit length k, h[2k + 1] those of them that are all ones
     * (the escape code of width k): one increment per value. */
    uint32_t h[130] = {0};
    uint64_t all = 0;
    size_t odd = 0; /* an odd code is an x below the base */
    for (size_t i = 0; i < n; i++) {
        uint64_t u = zz(x[i] - base);
        all |= u;
        odd += u & 1;
        h[2 * bit_len(u) + ((u & (u + 1)) == 0)]++;
    }
    *below = odd;
    *above = n - odd - h[1];
    if (all == 0) { /* every code is 0 */
        best->base = base;
        best->bits = 0;
        best->w = 0;
        return;
    }
    unsigned top = bit_len(all);
    unsigned wmax = top + 1 > PK_MAX_WIDTH ? PK_MAX_WIDTH : top + 1;
    uint64_t esc = 0; /* bits of the escapes above the current width */
    for (unsigned k = wmax + 1; k <= top; k++)
        esc += (uint64_t)(h[2 * k] + h[2 * k + 1]) * (PK_LEN_BITS + k);
    for (unsigned w = wmax; w >= 1; w--) {
        uint64_t c = (uint64_t)n * w + esc + (uint64_t)h[2 * w + 1] * (PK_LEN_BITS + w);
        if (c < best->bits) {
            best->base = base;
            best->bits = c;
            best->w = w;
        }
        esc += (uint64_t)(h[2 * w] + h[2 * w + 1]) * (PK_LEN_BITS + w);
    }
}

/* Two candidate bases: the middle of the range, best for evenly spread values (the
 * width then leaves out outliers on both sides), and, if most values lie on one side
 * of it, a median guessed from up to 15 evenly spaced values, which lopsided outliers
 * (a gap in regular timestamps, a spike to one side) do not move. */
static void plan_stream(const uint64_t *x, size_t n, pk_plan *p)
{
    p->base = 0;
    p->bits = 0;
    p->w = 0;
    if (n == 0)
        return;
    int64_t lo = (int64_t)x[0], hi = lo;
    for (size_t i = 1; i < n; i++) {
        int64_t v = (int64_t)x[i];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    uint64_t mid = (uint64_t)lo + (((uint64_t)hi - (uint64_t)lo) >> 1);
    size_t below, above;
    p->bits = UINT64_MAX;
    plan_base(x, n, mid, p, &below, &above);
    if (p->w == 0 || (below <= 3 * (n - below) && above <= 3 * (n - above)))
        return;
    int64_t s[PK_SAMPLE];
    size_t k = n < PK_SAMPLE ? n : PK_SAMPLE, step = n / k, at = 0;
    for (size_t j = 0; j < k; j++, at += step) {
        int64_t v = (int64_t)x[at];
        size_t i = j;
        for (; i > 0 && s[i - 1] > v; i--)
            s[i] = s[i - 1];
        s[i] = v;
    }
    uint64_t med = (uint64_t)s[k / 2];
    if (med != mid)
        plan_base(x, n, med, p, &below, &above);
}

static inline void put_code(uint8_t *s, uint32_t *pos, uint64_t x, const pk_plan *p)
{
    if (!p->w)
        return;
    uint64_t u = zz(x - p->base), esc = ~0ull >> (64 - p->w);
    if (u < esc) {
        put_bits64(s, pos, u, p->w);
        return;
    }
    unsigned len = bit_len(u);
    put_bits64(s, pos, esc, p->w);
    put_bits(s, pos, len - 1, PK_LEN_BITS);
    put_bits64(s, pos, u, len);
}

/* Everything a PACKED chunk needs, worked out before a byte is written. */
typedef struct pk_chunk {
    size_t n;
    unsigned e, unit, dod;
    int64_t t0; /* in the unit */
    int64_t m0, d1;
    const uint64_t *dt, *xv; /* timestamp deltas (n - 1); value deltas or their deltas */
    pk_plan tp, vp;
    size_t len;
} pk_chunk;

static size_t pk_size(pk_chunk *c)
{
    size_t hdr = 1 + uvarint_len(c->n) + uvarint_len(zigzag(c->t0)) + uvarint_len(zigzag(c->m0));
    if (c->n < 2)
        return hdr;
    hdr += uvarint_len(c->tp.base) + uvarint_len(zz(c->vp.base));
    if (c->dod)
        hdr += uvarint_len(zigzag(c->d1));
    return hdr + (2 * PK_WIDTH_BITS + c->tp.bits + c->vp.bits + 7) / 8;
}

static void pk_write(const pk_chunk *c, bdb_buf *out)
{
    bdb_buf_putc(out, (uint8_t)(BDB_CHUNK_PACKED | c->unit << 5 | c->dod << 4 | c->e));
    bdb_buf_put_uvarint(out, c->n);
    bdb_buf_put_uvarint(out, zigzag(c->t0));
    bdb_buf_put_uvarint(out, zigzag(c->m0));
    if (c->n < 2)
        return;
    bdb_buf_put_uvarint(out, c->tp.base);
    bdb_buf_put_uvarint(out, zz(c->vp.base));
    if (c->dod)
        bdb_buf_put_uvarint(out, zigzag(c->d1));
    uint64_t bits = 2 * PK_WIDTH_BITS + c->tp.bits + c->vp.bits;
    size_t nbytes = (size_t)((bits + 7) / 8);
    if (bdb_buf_reserve(out, nbytes + SLACK) != BDB_OK)
        return; /* out->oom */
    uint8_t *s = out->data + out->len;
    memset(s, 0, nbytes + SLACK);
    uint32_t pos = 0;
    put_bits(s, &pos, c->tp.w, PK_WIDTH_BITS);
    put_bits(s, &pos, c->vp.w, PK_WIDTH_BITS);
    size_t nv = c->dod ? c->n - 2 : c->n - 1, first_v = c->n - 1 - nv;
    for (size_t i = 0; i + 1 < c->n; i++) {
        put_code(s, &pos, c->dt[i], &c->tp);
        if (i >= first_v)
            put_code(s, &pos, c->xv[i - first_v], &c->vp);
    }
    out->len += nbytes;
}

/* Mantissas of all values at exponent e; 0 if one does not fit it. */
static int mantissas(const double *vals, size_t n, unsigned e, int64_t *m)
{
    for (size_t i = 0; i < n; i++)
        if (!decimal_at(vals[i], e, &m[i]))
            return 0;
    return 1;
}

/* Constant divisors, so that no division instruction is needed. */
static inline int64_t ts_in_unit(int64_t t, unsigned unit)
{
    switch (unit) {
    case 3:
        return t / 1000;
    case 2:
        return t / 100;
    case 1:
        return t / 10;
    default:
        return t;
    }
}

/* The coarsest unit (index into unit_tab) that divides every timestamp. */
static unsigned ts_unit(const int64_t *ts, size_t n)
{
    unsigned u = 3;
    for (size_t i = 0; i < n && u > 0; i++) {
        int64_t t = ts[i];
        while (u > 0 && ts_in_unit(t, u) * unit_tab[u] != t)
            u--;
    }
    return u;
}

/* Scratch for one encode: mantissas and the three delta streams. */
typedef struct pk_scratch {
    int64_t *m;
    uint64_t *dt, *dv, *ddv;
    uint64_t stack[4 * PK_STACK];
    uint64_t *heap;
} pk_scratch;

static int scratch_init(pk_scratch *sc, size_t n)
{
    uint64_t *p = sc->stack;
    sc->heap = NULL;
    if (n > PK_STACK) {
        p = sc->heap = bdb_malloc(4 * n * sizeof(*p));
        if (!p)
            return BDB_ERR_NOMEM;
    }
    sc->m = (int64_t *)p;
    sc->dt = p + n;
    sc->dv = p + 2 * n;
    sc->ddv = p + 3 * n;
    return BDB_OK;
}

/* Plans a PACKED chunk in the given mode (0 deltas, 1 deltas of deltas, -1 the smaller)
 * into *c. Returns 0 if the values are not exact decimals. */
static int pk_plan_chunk(const int64_t *ts, const double *vals, size_t n, int mode, pk_scratch *sc,
                         pk_chunk *c)
{
    int e = decimal_exponent(vals, n);
    if (e < 0 || !mantissas(vals, n, (unsigned)e, sc->m))
        return 0;
    const int64_t *m = sc->m;
    memset(c, 0, sizeof(*c));
    c->n = n;
    c->e = (unsigned)e;
    c->unit = ts_unit(ts, n);
    c->t0 = ts_in_unit(ts[0], c->unit);
    c->m0 = m[0];
    uint64_t t_prev = (uint64_t)c->t0;
    for (size_t i = 1; i < n; i++) {
        uint64_t t = (uint64_t)ts_in_unit(ts[i], c->unit);
        sc->dt[i - 1] = t - t_prev;
        t_prev = t;
        /* |m| < 2^53: deltas and deltas of deltas cannot overflow. */
        sc->dv[i - 1] = (uint64_t)(m[i] - m[i - 1]);
        if (i >= 2)
            sc->ddv[i - 2] = sc->dv[i - 1] - sc->dv[i - 2];
    }
    c->dt = sc->dt;
    c->xv = sc->dv;
    c->d1 = n >= 2 ? (int64_t)sc->dv[0] : 0;
    plan_stream(sc->dt, n - 1, &c->tp);
    pk_chunk dod = *c;
    if (mode != 1) {
        plan_stream(sc->dv, n - 1, &c->vp);
        c->len = pk_size(c);
    }
    if (mode != 0) {
        dod.dod = 1;
        dod.xv = sc->ddv;
        plan_stream(sc->ddv, n >= 2 ? n - 2 : 0, &dod.vp);
        dod.len = pk_size(&dod);
        if (mode == 1 || dod.len < c->len)
            *c = dod;
    }
    return 1;
}

/* Appends the appender's XOR chunk; returns its length. */
static size_t encode_xor(const int64_t *ts, const double *vals, size_t n, bdb_buf *out)
{
    size_t base = out->len;
    size_t xor_max = HDR_XOR + (n * MAX_SAMPLE_BITS + 7) / 8 + SLACK;
    if (bdb_buf_reserve(out, xor_max) != BDB_OK)
        return SIZE_MAX; /* out->oom */
    memset(out->data + base, 0, xor_max);
    bdb_chunk_app a;
    bdb_chunk_app_init(&a);
    uint8_t *s = out->data + base + HDR_XOR;
    for (size_t i = 0; i < n; i++)
        xor_put(&a, s, ts[i], dbl_bits(vals[i]));
    write_hdr(out->data + base, BDB_CHUNK_XOR, a.count);
    size_t len = HDR_XOR + ((a.nbits + 7) >> 3);
    out->len = base + len;
    return len;
}

/* A lower bound of the XOR chunk's length: each timestamp after the second costs at
 * least a bit, and each value a bit if unchanged, else 2 bits plus its significant ones.
 * Stops early once it reaches enough. */
static size_t xor_min_len(const int64_t *ts, const double *vals, size_t n, size_t enough)
{
    uint64_t bits = 8 * uvarint_len(zigzag(ts[0])) + 64;
    if (n >= 2)
        bits += 8 * uvarint_len((uint64_t)ts[1] - (uint64_t)ts[0]) + (n - 2);
    /* Often a bit per value already says enough. */
    size_t len = HDR_XOR + (size_t)((bits + (n - 1) + 7) / 8);
    if (len >= enough)
        return len;
    uint64_t prev = dbl_bits(vals[0]);
    for (size_t i = 1; i < n; i++) {
        uint64_t b = dbl_bits(vals[i]), x = b ^ prev;
        prev = b;
        if (x == 0) {
            bits += 1;
        } else {
            unsigned lead = (unsigned)__builtin_clzll(x), trail = (unsigned)__builtin_ctzll(x);
            if (lead > 31)
                lead = 31;
            bits += 2 + 64 - lead - trail;
        }
    }
    return HDR_XOR + (size_t)((bits + 7) / 8);
}

static int check_input(const int64_t *ts, size_t n)
{
    if (n == 0 || n > BDB_CHUNK_MAX_SAMPLES)
        return BDB_ERR_INVALID;
    for (size_t i = 1; i < n; i++)
        if (ts[i] <= ts[i - 1])
            return BDB_ERR_INVALID;
    return BDB_OK;
}

int bdb_chunk_encode_as(const int64_t *ts, const double *vals, size_t n, int form, bdb_buf *out)
{
    int rc = check_input(ts, n);
    if (rc != BDB_OK)
        return rc;
    if (form == BDB_CHUNK_FORM_XOR) {
        encode_xor(ts, vals, n, out);
        return out->oom ? BDB_ERR_NOMEM : BDB_OK;
    }
    if (form == BDB_CHUNK_FORM_DECIMAL) {
        int e = decimal_exponent(vals, n);
        if (e < 0 || !encode_decimal(ts, vals, n, (unsigned)e, out, SIZE_MAX))
            return out->oom ? BDB_ERR_NOMEM : BDB_ERR_INVALID;
        return BDB_OK;
    }
    if (form != BDB_CHUNK_FORM_AUTO && form != BDB_CHUNK_FORM_DELTA && form != BDB_CHUNK_FORM_DOD)
        return BDB_ERR_INVALID;

    pk_scratch sc;
    if (scratch_init(&sc, n) != BDB_OK)
        return BDB_ERR_NOMEM;
    pk_chunk c;
    int mode = form == BDB_CHUNK_FORM_DELTA ? 0 : form == BDB_CHUNK_FORM_DOD ? 1 : -1;
    int ok = pk_plan_chunk(ts, vals, n, mode, &sc, &c);
    if (!ok && form != BDB_CHUNK_FORM_AUTO) {
        rc = BDB_ERR_INVALID;
    } else if (!ok) {
        encode_xor(ts, vals, n, out);
    } else if (form != BDB_CHUNK_FORM_AUTO || c.len <= xor_min_len(ts, vals, n, c.len)) {
        pk_write(&c, out);
    } else {
        /* XOR may win (values that happen to be decimals with many digits): try it. */
        size_t base = out->len;
        if (c.len <= encode_xor(ts, vals, n, out)) {
            out->len = base;
            pk_write(&c, out);
        }
    }
    free(sc.heap);
    if (rc == BDB_OK && out->oom)
        rc = BDB_ERR_NOMEM;
    return rc;
}

int bdb_chunk_encode(const int64_t *ts, const double *vals, size_t n, bdb_buf *out)
{
    return bdb_chunk_encode_as(ts, vals, n, BDB_CHUNK_FORM_AUTO, out);
}

/* ---- iterator ---- */

/* 64 bits from bit pos on, MSB-aligned; at least 57 are meaningful. Past the end of
 * the stream it reads zeros, and the caller compares pos with the length afterwards. */
static inline uint64_t peek(const bdb_chunk_iter *it)
{
    size_t i = it->pos >> 3;
    uint64_t w = 0;
    if (i + 8 <= it->nbytes) {
        w = load_be64(it->bits + i);
    } else {
        for (unsigned k = 0; k < 8 && i + k < it->nbytes; k++)
            w |= (uint64_t)it->bits[i + k] << (56 - 8 * k);
    }
    return w << (it->pos & 7);
}

/* 1 <= n <= 64 bits. */
static inline uint64_t get_bits(bdb_chunk_iter *it, unsigned n)
{
    if (n > 57) {
        uint64_t hi = peek(it) >> (64 - (n - 32));
        it->pos += n - 32;
        uint64_t lo = peek(it) >> 32;
        it->pos += 32;
        return hi << 32 | lo;
    }
    uint64_t v = peek(it) >> (64 - n);
    it->pos += n;
    return v;
}

static int get_bit_uvarint(bdb_chunk_iter *it, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        uint64_t b = get_bits(it, 8);
        v |= (b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

static int get_ts(bdb_chunk_iter *it)
{
    static const uint8_t width[6] = {0, 7, 12, 20, 32, 64};
    uint64_t delta;
    if (it->i == 0) {
        uint64_t z;
        if (get_bit_uvarint(it, &z) < 0)
            return -1;
        it->t = (int64_t)unzigzag(z);
        return 0;
    }
    if (it->i == 1) {
        if (get_bit_uvarint(it, &delta) < 0)
            return -1;
    } else {
        uint64_t w = peek(it);
        unsigned ones = (unsigned)__builtin_clzll(~w | 1ull << 58);
        unsigned n = width[ones];
        uint64_t dod = 0;
        if (n == 0) {
            it->pos += 1;
        } else if (n <= 32) {
            unsigned prefix = ones + 1;
            dod = w << prefix >> (64 - n);
            it->pos += prefix + n;
        } else {
            it->pos += 5;
            dod = get_bits(it, 64);
        }
        if (n) {
            uint64_t sign = 1ull << (n - 1);
            dod = (dod ^ sign) - sign;
        }
        delta = it->t_delta + dod;
    }
    /* Timestamps strictly increase and stay inside int64. */
    if (delta == 0 || delta > (uint64_t)INT64_MAX - (uint64_t)it->t)
        return -1;
    it->t_delta = delta;
    it->t = (int64_t)((uint64_t)it->t + delta);
    return 0;
}

static int get_xor_value(bdb_chunk_iter *it)
{
    if (it->i == 0) {
        it->v = get_bits(it, 64);
        return 0;
    }
    uint64_t w = peek(it);
    if (!(w >> 63)) {
        it->pos += 1;
        return 0;
    }
    unsigned sig;
    if (!(w >> 62 & 1)) {
        if (it->lead == NO_WINDOW)
            return -1;
        sig = 64u - it->lead - it->trail;
        it->pos += 2;
    } else {
        unsigned lead = (unsigned)(w >> 57) & 31;
        sig = (unsigned)(w >> 51) & 63;
        if (sig == 0)
            sig = 64;
        if (lead + sig > 64)
            return -1;
        it->lead = (uint8_t)lead;
        it->trail = (uint8_t)(64 - lead - sig);
        it->pos += 13;
    }
    it->v ^= get_bits(it, sig) << it->trail;
    return 0;
}

static int get_varint(bdb_chunk_iter *it, uint64_t *out)
{
    const uint8_t *p = it->vp;
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64 && p < it->vend; shift += 7) {
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            it->vp = p;
            *out = unzigzag(v);
            return 0;
        }
    }
    return -1;
}

static int get_decimal_value(bdb_chunk_iter *it)
{
    uint64_t d;
    if (it->vp < it->vend && *it->vp < 0x80) {
        d = unzigzag(*it->vp++);
    } else if (get_varint(it, &d) < 0) {
        return -1;
    }
    /* Unsigned arithmetic: corrupt input may overflow, the range check catches it. */
    if (it->i == 0) {
        it->v = d;
    } else {
        it->m_delta = it->i == 1 ? d : it->m_delta + d;
        it->v += it->m_delta;
    }
    if (it->v + (MANT_LIMIT - 1) >= 2 * MANT_LIMIT - 1)
        return -1;
    return 0;
}

/* An unsigned varint inside [*pp, end). */
static int get_uvarint(const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64 && p < end; shift += 7) {
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *pp = p;
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* One code of width w >= 1, escape resolved. */
static inline uint64_t get_code(bdb_chunk_iter *it, unsigned w)
{
    uint64_t u = get_bits(it, w);
    if (u == ~0ull >> (64 - w))
        u = get_bits(it, (unsigned)get_bits(it, PK_LEN_BITS) + 1);
    return u;
}

static int packed_init(bdb_chunk_iter *it, const uint8_t *p, size_t len)
{
    const uint8_t *q = p + 1, *end = p + len;
    uint64_t count, z;
    if (get_uvarint(&q, end, &count) < 0 || count == 0 || count > BDB_CHUNK_MAX_SAMPLES)
        return -1;
    it->count = (uint16_t)count;
    it->exp = p[0] & 15;
    it->dod = p[0] >> 4 & 1;
    it->t_unit = unit_tab[p[0] >> 5 & 3];
    it->t_max = INT64_MAX / it->t_unit;
    if (get_uvarint(&q, end, &z) < 0)
        return -1;
    it->t = (int64_t)unzigzag(z);
    if (it->t > it->t_max || it->t < INT64_MIN / it->t_unit)
        return -1;
    if (get_uvarint(&q, end, &z) < 0)
        return -1;
    it->v = unzigzag(z);
    if (it->v + (MANT_LIMIT - 1) >= 2 * MANT_LIMIT - 1)
        return -1;
    if (count == 1)
        return 0;
    if (get_uvarint(&q, end, &it->t_delta) < 0 || get_uvarint(&q, end, &z) < 0)
        return -1;
    it->v_base = unzigzag(z);
    if (it->dod) {
        if (get_uvarint(&q, end, &z) < 0)
            return -1;
        it->m_delta = unzigzag(z);
    }
    it->bits = q;
    it->nbytes = (uint32_t)(end - q);
    if (it->nbytes < 2)
        return -1;
    uint64_t w = peek(it) >> (64 - 2 * PK_WIDTH_BITS);
    it->tw = (uint8_t)(w >> PK_WIDTH_BITS);
    it->vw = (uint8_t)(w & ((1u << PK_WIDTH_BITS) - 1));
    it->pos = 2 * PK_WIDTH_BITS;
    return 0;
}

/* Sample i >= 1 of a PACKED chunk. */
static inline int packed_next(bdb_chunk_iter *it)
{
    uint64_t dt = it->t_delta;
    if (it->tw)
        dt += unzigzag(get_code(it, it->tw));
    /* Timestamps strictly increase and stay inside int64 once scaled. */
    if (dt == 0 || dt > (uint64_t)it->t_max - (uint64_t)it->t)
        return -1;
    it->t = (int64_t)((uint64_t)it->t + dt);
    /* Unsigned arithmetic: corrupt input may overflow, the range check catches it. */
    if (!it->dod) {
        uint64_t d = it->v_base;
        if (it->vw)
            d += unzigzag(get_code(it, it->vw));
        it->v += d;
    } else {
        if (it->i >= 2) {
            uint64_t dd = it->v_base;
            if (it->vw)
                dd += unzigzag(get_code(it, it->vw));
            it->m_delta += dd;
        }
        it->v += it->m_delta;
    }
    if (it->v + (MANT_LIMIT - 1) >= 2 * MANT_LIMIT - 1)
        return -1;
    return 0;
}

int bdb_chunk_iter_init(bdb_chunk_iter *it, const uint8_t *p, size_t len)
{
    memset(it, 0, sizeof(*it));
    it->lead = NO_WINDOW;
    it->err = BDB_ERR_CORRUPT;
    if (len < HDR_XOR)
        return BDB_ERR_CORRUPT;
    int kind = bdb_chunk_kind(p[0]);
    if (kind != BDB_CHUNK_XOR && kind != BDB_CHUNK_DECIMAL && kind != BDB_CHUNK_PACKED)
        return BDB_ERR_CORRUPT;
    it->enc = (uint8_t)kind;
    if (len > MAX_STREAM_BYTES)
        len = MAX_STREAM_BYTES;
    if (kind == BDB_CHUNK_PACKED) {
        if (packed_init(it, p, len) < 0)
            return BDB_ERR_CORRUPT;
    } else if (kind == BDB_CHUNK_XOR) {
        it->count = (uint16_t)(p[1] | p[2] << 8);
        it->bits = p + HDR_XOR;
        it->nbytes = (uint32_t)(len - HDR_XOR);
    } else {
        it->count = (uint16_t)(p[1] | p[2] << 8);
        if (len < HDR_DEC || p[3] > 15)
            return BDB_ERR_CORRUPT;
        it->exp = p[3];
        it->vp = p + HDR_DEC;
        it->vend = p + len;
        uint64_t ts_bytes = 0;
        for (unsigned shift = 0;; shift += 7) {
            if (shift > 21 || it->vp == it->vend)
                return BDB_ERR_CORRUPT;
            uint8_t b = *it->vp++;
            ts_bytes |= (uint64_t)(b & 0x7f) << shift;
            if (!(b & 0x80))
                break;
        }
        if (ts_bytes > (size_t)(it->vend - it->vp))
            return BDB_ERR_CORRUPT;
        it->bits = it->vp;
        it->nbytes = (uint32_t)ts_bytes;
        it->vp += ts_bytes;
    }
    it->err = 0;
    return BDB_OK;
}

int bdb_chunk_iter_next(bdb_chunk_iter *it, int64_t *ts, double *v)
{
    if (it->err)
        return it->err;
    if (it->i == it->count)
        return 0;
    int rc;
    if (it->enc == BDB_CHUNK_PACKED) {
        rc = it->i ? packed_next(it) : 0;
    } else {
        rc = get_ts(it);
        if (rc == 0)
            rc = it->enc == BDB_CHUNK_XOR ? get_xor_value(it) : get_decimal_value(it);
    }
    if (rc < 0 || it->pos > (uint64_t)it->nbytes * 8) {
        it->err = BDB_ERR_CORRUPT;
        return it->err;
    }
    if (it->enc == BDB_CHUNK_PACKED) {
        *ts = it->t * it->t_unit;
        *v = (double)(int64_t)it->v / pow10_tab[it->exp];
    } else {
        *ts = it->t;
        if (it->enc == BDB_CHUNK_XOR)
            *v = bits_dbl(it->v);
        else
            *v = (double)(int64_t)it->v / pow10_tab[it->exp];
    }
    it->i++;
    return 1;
}

uint16_t bdb_chunk_count(const uint8_t *p, size_t len)
{
    if (len < HDR_XOR)
        return 0;
    switch (bdb_chunk_kind(p[0])) {
    case BDB_CHUNK_XOR:
        break;
    case BDB_CHUNK_DECIMAL:
        if (len < HDR_DEC || p[3] > 15)
            return 0;
        break;
    case BDB_CHUNK_PACKED: {
        const uint8_t *q = p + 1;
        uint64_t count;
        if (get_uvarint(&q, p + len, &count) < 0 || count > BDB_CHUNK_MAX_SAMPLES)
            return 0;
        return (uint16_t)count;
    }
    default:
        return 0;
    }
    return (uint16_t)(p[1] | p[2] << 8);
}
