/* chunk_decimal: the exact-decimal encoders: finding the exponent at which every value
 * of a chunk is an exact decimal, the PACKED planner and writer, and the old DECIMAL
 * layout (written only on request, for tests and tools). Layout: chunk.c. */
#include "storage/embedded/chunk/chunk_int.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"

#include <stdlib.h>
#include <string.h>

/* The smallest exponent at which every value is an exact decimal, or -1. A value exact
 * at e stays exact at a larger exponent unless its mantissa outgrows 2^53, which the
 * writing pass re-checks. */
int chk_decimal_exponent(const double *vals, size_t n)
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

int chk_encode_decimal(const int64_t *ts, const double *vals, size_t n, unsigned e, bdb_buf *out,
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

#define PK_SAMPLE 15 /* values looked at to guess a median */

static inline unsigned bit_len(uint64_t u)
{
    return u ? 64u - (unsigned)__builtin_clzll(u) : 0;
}

/* zigzag of a modular difference read as signed */
static inline uint64_t zz(uint64_t d)
{
    return (d << 1) ^ (0 - (d >> 63));
}

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

/* Forced inline: it runs once or twice per sample, and in this smaller file gcc's
 * heuristics stopped inlining it into chk_pk_write once chunk.c was split (about +40 % of
 * instructions in that loop, measured with callgrind). */
static inline __attribute__((always_inline)) void put_code(uint8_t *s, uint32_t *pos, uint64_t x,
                                                           const pk_plan *p)
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

void chk_pk_write(const pk_chunk *c, bdb_buf *out)
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

int chk_scratch_init(pk_scratch *sc, size_t n)
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

int chk_pk_plan_chunk(const int64_t *ts, const double *vals, size_t n, int mode, pk_scratch *sc,
                      pk_chunk *c)
{
    int e = chk_decimal_exponent(vals, n);
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
