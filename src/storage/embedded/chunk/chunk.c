/* chunk: Gorilla-style XOR chunks and exact-decimal chunks. This file holds the XOR
 * encoder and bdb_chunk_encode's choice of encoding; the head's STREAM appender is in
 * chunk_stream.c, the exact-decimal encoders in chunk_decimal.c, decoding in
 * chunk_iter.c, and what they share in chunk_int.h.
 *
 * Layout (all bit streams are MSB-first):
 *   XOR:     u8 enc, u16le count, bits: samples
 *   STREAM:  u8 enc, u16le count, bits: samples (memory only, never in a file)
 *   PACKED:  u8 enc | flags, uvarint count, zigzag varint t0, zigzag varint m0; with two
 *            samples or more also uvarint tbase, zigzag varint vbase, zigzag varint
 *            d1 (deltas of deltas only), then bits: 6-bit tw, 6-bit vw, and for each
 *            sample i >= 1 a timestamp code and (deltas: i >= 1, deltas of deltas:
 *            i >= 2) a value code
 *   DECIMAL: u8 enc, u16le count, u8 exp, uvarint ts_bytes, ts_bytes of timestamp bits,
 *            then one zigzag varint per sample for the mantissa (read only)
 * XOR, STREAM and DECIMAL timestamps: sample 0 as a zigzag varint written in 8-bit groups,
 * sample 1 as an unsigned varint delta, later samples as a delta-of-delta in one of
 * six buckets (prefix 0, 10, 110, 1110, 11110, 11111 with 0, 7, 12, 20, 32, 64 bits).
 * XOR values: sample 0 raw 64 bits, then '0' (same value), '10' + bits inside the
 * previous window, or '11' + 5-bit leading zeros + 6-bit width (0 means 64) + bits.
 * STREAM values: '0' (mantissa unchanged); '10', '110', '1110', '11110' with 7, 12,
 * 20, 32 bits: the mantissa delta, two's complement; '111110' + 4-bit exponent e +
 * bit varint of zigzag(m): a new chain, the value m / 10^e; '111111' + 64 bits: a raw
 * value, the chain unchanged. Deltas need a chain; the value of a mantissa is
 * m / 10^e at the chain's exponent.
 * DECIMAL values: mantissa m0, then m1 - m0, then deltas of deltas.
 * PACKED flags: bits 0-3 exponent e, bit 4 deltas of deltas, bits 5-6 timestamp unit
 * (10^0..10^3 ms; timestamps, t0 and tbase are in that unit). A code of width w > 0
 * stands for x = base + unzigzag(c) (mod 2^64), where x is the timestamp delta, the
 * mantissa delta, or the delta of mantissa deltas; the all-ones code escapes to a
 * 6-bit L - 1 and an L-bit c. A width of 0 writes no codes: every x is the base. */
#include "storage/embedded/chunk/chunk_int.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"

#include <stdlib.h>
#include <string.h>

static inline void put_value(bdb_chunk_state *a, uint8_t *s, uint64_t bits)
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
static inline void xor_put(bdb_chunk_state *a, uint8_t *s, int64_t ts, uint64_t bits)
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

/* ---- batch encoder ---- */

/* Appends the XOR chunk of the samples; returns its length. */
static size_t encode_xor(const int64_t *ts, const double *vals, size_t n, bdb_buf *out)
{
    size_t base = out->len;
    size_t xor_max = HDR_XOR + (n * MAX_SAMPLE_BITS + 7) / 8 + SLACK;
    if (bdb_buf_reserve(out, xor_max) != BDB_OK)
        return SIZE_MAX; /* out->oom */
    memset(out->data + base, 0, xor_max);
    bdb_chunk_state a;
    bdb_chunk_state_init(&a);
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
        int e = chk_decimal_exponent(vals, n);
        if (e < 0 || !chk_encode_decimal(ts, vals, n, (unsigned)e, out, SIZE_MAX))
            return out->oom ? BDB_ERR_NOMEM : BDB_ERR_INVALID;
        return BDB_OK;
    }
    if (form != BDB_CHUNK_FORM_AUTO && form != BDB_CHUNK_FORM_DELTA && form != BDB_CHUNK_FORM_DOD)
        return BDB_ERR_INVALID;

    pk_scratch sc;
    if (chk_scratch_init(&sc, n) != BDB_OK)
        return BDB_ERR_NOMEM;
    pk_chunk c;
    int mode = form == BDB_CHUNK_FORM_DELTA ? 0 : form == BDB_CHUNK_FORM_DOD ? 1 : -1;
    int ok = chk_pk_plan_chunk(ts, vals, n, mode, &sc, &c);
    if (!ok && form != BDB_CHUNK_FORM_AUTO) {
        rc = BDB_ERR_INVALID;
    } else if (!ok) {
        encode_xor(ts, vals, n, out);
    } else if (form != BDB_CHUNK_FORM_AUTO || c.len <= xor_min_len(ts, vals, n, c.len)) {
        chk_pk_write(&c, out);
    } else {
        /* XOR may win (values that happen to be decimals with many digits): try it. */
        size_t base = out->len;
        if (c.len <= encode_xor(ts, vals, n, out)) {
            out->len = base;
            chk_pk_write(&c, out);
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
