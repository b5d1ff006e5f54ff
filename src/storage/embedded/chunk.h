/* chunk: compressed (timestamp, value) sequences for one series.
 *
 * Two encodings, told apart by the chunk's first byte:
 *  - XOR (Gorilla, Pelkonen et al. 2015): delta-of-delta timestamps in variable-width
 *    bit buckets, values XORed with the previous value with leading/trailing-zero
 *    windows. The head appends to it sample by sample.
 *  - DECIMAL: when every value of a chunk is an exact decimal m * 10^-e (|m| < 2^53,
 *    0 <= e <= 15), values are stored as zigzag delta-of-delta varints of m with one
 *    exponent per chunk (timestamps as in XOR, in a section of their own); chosen by
 *    bdb_chunk_encode when it is smaller. Typical sensor readings (23.7, 1013.25)
 *    shrink far below what XOR achieves.
 * Timestamps are Unix milliseconds, strictly increasing inside a chunk. Every chunk is
 * self-describing (encoding byte, sample count) so an iterator needs only its bytes. */
#ifndef BDB_CHUNK_H
#define BDB_CHUNK_H

#include <stddef.h>
#include <stdint.h>

enum bdb_chunk_encoding { BDB_CHUNK_XOR = 1, BDB_CHUNK_DECIMAL = 2 };

/* Appender for an XOR chunk, kept small because the head holds one per live series.
 * Fields are private. */
typedef struct bdb_chunk_app {
    uint8_t *buf;   /* encoded bytes; buf[0] = BDB_CHUNK_XOR, then count (u16le); NULL if empty */
    uint32_t cap;   /* bytes allocated */
    uint32_t nbits; /* bits used after the header */
    uint16_t count;
    uint8_t lead, trail; /* current XOR window; lead == 0xff before the first window */
    int64_t t_last;
    uint64_t t_delta; /* last timestamp delta (ms) */
    uint64_t v_last;  /* bit pattern of the last value */
} bdb_chunk_app;

#define BDB_CHUNK_MAX_SAMPLES 65535

void bdb_chunk_app_init(bdb_chunk_app *a);
void bdb_chunk_app_free(bdb_chunk_app *a);
/* Appends one sample. ts must be > the last appended ts.
 * Returns BDB_OK, BDB_ERR_INVALID (ts not increasing) or BDB_ERR_LIMIT (chunk full). */
int bdb_chunk_app_append(bdb_chunk_app *a, int64_t ts, double v);
/* The encoded chunk so far (valid until the next append). */
const uint8_t *bdb_chunk_app_bytes(const bdb_chunk_app *a, size_t *len);

/* Encodes n samples (ts strictly increasing) into out (appended), choosing the
 * smaller of XOR and DECIMAL. Returns BDB_OK or BDB_ERR_INVALID. */
struct bdb_buf;
int bdb_chunk_encode(const int64_t *ts, const double *vals, size_t n, struct bdb_buf *out);

/* Iterator over an encoded chunk of either kind. */
typedef struct bdb_chunk_iter {
    const uint8_t *bits;      /* bit stream: XOR samples, or DECIMAL timestamps */
    const uint8_t *vp, *vend; /* DECIMAL value varints */
    uint32_t nbytes;          /* length of the bit stream */
    uint32_t pos;             /* bits consumed */
    uint16_t count, i;
    uint8_t enc, lead, trail, exp;
    int err;
    int64_t t;
    uint64_t t_delta;
    uint64_t v;       /* XOR: bits of the last value; DECIMAL: last mantissa */
    uint64_t m_delta; /* DECIMAL: last mantissa delta */
} bdb_chunk_iter;

/* Returns BDB_OK or BDB_ERR_CORRUPT (unknown encoding or short header). */
int bdb_chunk_iter_init(bdb_chunk_iter *it, const uint8_t *p, size_t len);
/* 1 = a sample in *ts and *v, 0 = end, BDB_ERR_CORRUPT = truncated or malformed bytes. */
int bdb_chunk_iter_next(bdb_chunk_iter *it, int64_t *ts, double *v);
/* Number of samples recorded in the chunk header (0 if malformed). */
uint16_t bdb_chunk_count(const uint8_t *p, size_t len);

#endif
