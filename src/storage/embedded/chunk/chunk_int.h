/* chunk_int.h: what the chunk files share (chunk.c, the XOR encoder and the choice
 * of encoding; chunk_stream.c, the head's STREAM appender; chunk_decimal.c, the
 * exact-decimal encoders; chunk_iter.c, decoding): header sizes and limits, byte and
 * zigzag helpers, the MSB-first bit writer, the exact-decimal test, and the PACKED
 * planner's types. Private to those files; the public interface is chunk.h and
 * the layout is the header comment of chunk.c. */
#ifndef BDB_CHUNK_INT_H
#define BDB_CHUNK_INT_H

#include "storage/embedded/chunk/chunk.h"

#include "common/buf.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define HDR_XOR 3
#define HDR_DEC 4
/* The bit writer and reader touch 8 bytes from the current byte on. */
#define SLACK 8
/* Worst case bits per sample: 80 (varint) + 77 (new XOR window with 64 bits). */
#define MAX_SAMPLE_BITS 160
/* Worst case bits of one timestamp after the first two. */
#define MAX_DOD_BITS 69
#define NO_WINDOW 0xff
/* STREAM: no mantissa chain yet (only raw values so far, or none) */
#define NO_EXP 0xff
/* STREAM value prefixes past the four delta buckets: '111110' + 4-bit exponent +
 * mantissa (bit varint), '111111' + 64 raw bits. */
#define STREAM_RESTART 0x3eu
#define STREAM_RAW 0x3fu
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

static inline void put_bit_uvarint(uint8_t *s, uint32_t *pos, uint64_t v)
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

static inline void write_hdr(uint8_t *p, uint8_t enc, uint16_t count)
{
    p[0] = enc;
    p[1] = (uint8_t)count;
    p[2] = (uint8_t)(count >> 8);
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

/* ---- PACKED ---- */

#define PK_WIDTH_BITS 6 /* each of tw and vw */
#define PK_MAX_WIDTH 63
#define PK_LEN_BITS 6 /* escape: L - 1 */
#define PK_STACK 128  /* samples whose scratch fits on the stack */

static const int64_t unit_tab[4] = {1, 10, 100, 1000};

/* How one stream of x (mod 2^64) is coded: zigzag(x - base) in w bits, all ones
 * escaping; bits is the stream's total size. */
typedef struct pk_plan {
    uint64_t base, bits;
    unsigned w;
} pk_plan;

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

/* Scratch for one encode: mantissas and the three delta streams. */
typedef struct pk_scratch {
    int64_t *m;
    uint64_t *dt, *dv, *ddv;
    uint64_t stack[4 * PK_STACK];
    uint64_t *heap;
} pk_scratch;

/* The smallest exponent at which every value is an exact decimal, or -1. */
int chk_decimal_exponent(const double *vals, size_t n);
/* Appends a DECIMAL chunk; gives up (out unchanged, returns 0) if a value does not fit
 * the exponent or the chunk would not be smaller than limit bytes. */
int chk_encode_decimal(const int64_t *ts, const double *vals, size_t n, unsigned e, bdb_buf *out,
                       size_t limit);
/* Points the scratch at the stack or, for more than PK_STACK samples, at one heap
 * block (sc->heap, the caller frees it). BDB_OK or BDB_ERR_NOMEM. */
int chk_scratch_init(pk_scratch *sc, size_t n);
/* Plans a PACKED chunk in the given mode (0 deltas, 1 deltas of deltas, -1 the smaller)
 * into *c. Returns 0 if the values are not exact decimals. */
int chk_pk_plan_chunk(const int64_t *ts, const double *vals, size_t n, int mode, pk_scratch *sc,
                      pk_chunk *c);
/* Appends the planned chunk (c->len bytes) to out; out->oom if it ran out of memory. */
void chk_pk_write(const pk_chunk *c, bdb_buf *out);

#endif
