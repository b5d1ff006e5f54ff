/* chunk: compressed (timestamp, value) sequences for one series.
 *
 * Four encodings, told apart by the chunk's first byte:
 *  - XOR (Gorilla, Pelkonen et al. 2015): delta-of-delta timestamps in variable-width
 *    bit buckets, values XORed with the previous value with leading/trailing-zero
 *    windows.
 *  - STREAM: the head's encoding, appended to sample by sample (chunk_stream.c): XOR's
 *    timestamps, values as deltas of decimal mantissas at the chunk's current exponent,
 *    with a restart at a larger exponent and a raw escape for values that are no exact
 *    decimal. Only in memory: bdb_chunk_encode never writes it, readers accept it.
 *  - PACKED (first byte 0x80..0xff, which also carries the chunk's parameters): when
 *    every value of a chunk is an exact decimal m * 10^-e (|m| < 2^53, 0 <= e <= 15),
 *    the mantissas are stored as deltas (or deltas of deltas, whichever is smaller) and
 *    the timestamps as deltas, each stream bit-packed at one width per chunk around a
 *    per-chunk base, with an escape for outliers. A regular interval costs no bits per
 *    sample, a random walk of +-50 steps 7 bits. Chosen by bdb_chunk_encode when it is
 *    smaller than XOR, which it is for typical sensor readings (23.7, 1013.25) and
 *    counters.
 *  - DECIMAL: the earlier exact-decimal layout (zigzag delta-of-delta varints of m).
 *    No longer written by bdb_chunk_encode, still read: block files may hold it.
 * Timestamps are Unix milliseconds, strictly increasing inside a chunk. Every chunk is
 * self-describing (encoding byte, sample count) so an iterator needs only its bytes. */
#ifndef BDB_CHUNK_H
#define BDB_CHUNK_H

#include <stddef.h>
#include <stdint.h>

/* Values of a chunk's first byte. A PACKED chunk's byte is BDB_CHUNK_PACKED | flags:
 * bits 0-3 the decimal exponent, bit 4 BDB_CHUNK_PACKED_DOD, bits 5-6 the timestamp
 * unit (1, 10, 100 or 1000 ms). */
enum bdb_chunk_encoding {
    BDB_CHUNK_XOR = 1,
    BDB_CHUNK_DECIMAL = 2,
    BDB_CHUNK_STREAM = 3,
    BDB_CHUNK_PACKED = 0x80
};
#define BDB_CHUNK_PACKED_DOD 0x10

/* The encoding of a chunk from its first byte (flags of PACKED stripped). */
static inline int bdb_chunk_kind(uint8_t first)
{
    return first & BDB_CHUNK_PACKED ? BDB_CHUNK_PACKED : first;
}

/* The state of an appender, without its bytes: the head keeps the bytes in the same
 * allocation as its chunk (one allocation per live series, not two), so the appending
 * functions take the buffer beside the state. Fields are private (the XOR encoder of
 * chunk.c uses the same struct). */
typedef struct bdb_chunk_state {
    int64_t t_last;
    uint64_t t_delta; /* last timestamp delta (ms) */
    uint64_t v_last;  /* XOR: bit pattern of the last value; STREAM: last mantissa */
    uint32_t nbits;   /* bits used after the header */
    uint16_t count;
    uint8_t lead, trail; /* XOR: current window; lead == 0xff before the first window */
    uint8_t exp;         /* STREAM: exponent of the mantissa chain, 0xff before one */
    uint8_t miss;        /* STREAM: raw values in a row, up to a small limit */
    uint8_t zeros, run;  /* STREAM: decimals the chain's values have not needed so far,
                          * and how many values said so */
    /* Not the chunk code's: 32 bits its owner may use, in what would be the struct's
     * padding (the head keeps its chunk's capacity here: db_int.h). Zero after init. */
    uint32_t owner;
} bdb_chunk_state;

void bdb_chunk_state_init(bdb_chunk_state *st);
/* Bytes a STREAM buffer needs so that n more appends fit (the worst case per sample). */
size_t bdb_chunk_stream_need(const bdb_chunk_state *st, uint32_t n);
/* Appends one sample to the STREAM chunk in buf, which must hold
 * bdb_chunk_stream_need(st, 1) bytes, zero past the bytes used so far. ts must be >
 * the last appended ts. BDB_OK, BDB_ERR_INVALID (ts not increasing) or BDB_ERR_LIMIT
 * (chunk full); never allocates. */
int bdb_chunk_stream_put(bdb_chunk_state *st, uint8_t *buf, int64_t ts, double v);
/* The encoded chunk in buf (a static empty chunk while st holds no sample). */
const uint8_t *bdb_chunk_stream_bytes(const bdb_chunk_state *st, const uint8_t *buf, size_t *len);
/* Bytes the chunk in buf uses (what a buffer must keep when it stops growing). */
size_t bdb_chunk_stream_used(const bdb_chunk_state *st);

/* Appender for a STREAM chunk that owns its buffer (tests, the head's merge of a side
 * list). */
typedef struct bdb_chunk_app {
    uint8_t *buf; /* encoded bytes; buf[0] = BDB_CHUNK_STREAM, then count (u16le); NULL if empty */
    uint32_t cap; /* bytes allocated */
    bdb_chunk_state st;
} bdb_chunk_app;

#define BDB_CHUNK_MAX_SAMPLES 65535

void bdb_chunk_app_init(bdb_chunk_app *a);
void bdb_chunk_app_free(bdb_chunk_app *a);
/* Appends one sample. ts must be > the last appended ts.
 * Returns BDB_OK, BDB_ERR_INVALID (ts not increasing), BDB_ERR_LIMIT (chunk full) or
 * BDB_ERR_NOMEM (the chunk unchanged). */
int bdb_chunk_app_append(bdb_chunk_app *a, int64_t ts, double v);
/* Grows the buffer so that n more appends cannot fail for lack of memory:
 * BDB_OK or BDB_ERR_NOMEM (the chunk unchanged). */
int bdb_chunk_app_reserve(bdb_chunk_app *a, uint32_t n);
/* The encoded chunk so far (valid until the next append). */
const uint8_t *bdb_chunk_app_bytes(const bdb_chunk_app *a, size_t *len);

/* Encodes n samples (ts strictly increasing) into out (appended), choosing the
 * smallest of XOR, PACKED with mantissa deltas and PACKED with deltas of deltas.
 * Returns BDB_OK, BDB_ERR_INVALID, or BDB_ERR_NOMEM (a checked out buffer ran out of
 * memory: out->oom is set; an unchecked one aborts). */
struct bdb_buf;
int bdb_chunk_encode(const int64_t *ts, const double *vals, size_t n, struct bdb_buf *out);

/* One form, for tests and tools: what bdb_chunk_encode chooses from, plus the old
 * DECIMAL layout. */
enum bdb_chunk_form {
    BDB_CHUNK_FORM_AUTO,    /* same as bdb_chunk_encode */
    BDB_CHUNK_FORM_XOR,     /* Gorilla XOR */
    BDB_CHUNK_FORM_DECIMAL, /* the old DECIMAL layout */
    BDB_CHUNK_FORM_DELTA,   /* PACKED, mantissa deltas */
    BDB_CHUNK_FORM_DOD      /* PACKED, mantissa deltas of deltas */
};
/* Like bdb_chunk_encode but in the given form. Returns BDB_ERR_INVALID (out unchanged)
 * also when a decimal form cannot hold the values exactly. */
int bdb_chunk_encode_as(const int64_t *ts, const double *vals, size_t n, int form,
                        struct bdb_buf *out);

/* Iterator over an encoded chunk of any kind. Fields are private. */
typedef struct bdb_chunk_iter {
    const uint8_t *bits;      /* bit stream: XOR samples, DECIMAL timestamps, PACKED codes */
    const uint8_t *vp, *vend; /* DECIMAL value varints */
    uint32_t nbytes;          /* length of the bit stream */
    uint32_t pos;             /* bits consumed */
    uint16_t count, i;
    uint8_t enc, lead, trail, exp;
    uint8_t tw, vw, dod; /* PACKED: code widths of timestamps and values; deltas of deltas */
    uint8_t raw;         /* STREAM: the current sample is rawbits, not a mantissa */
    int err;
    int64_t t;             /* PACKED: in units of t_unit */
    uint64_t t_delta;      /* PACKED: base of the timestamp deltas */
    uint64_t v;            /* XOR: bits of the last value; the others: last mantissa */
    uint64_t rawbits;      /* STREAM: bits of the last raw value */
    uint64_t m_delta;      /* DECIMAL, PACKED: last mantissa delta */
    uint64_t v_base;       /* PACKED: base of the value codes */
    int64_t t_unit, t_max; /* PACKED: ms per timestamp unit, largest timestamp in units */
} bdb_chunk_iter;

/* Returns BDB_OK or BDB_ERR_CORRUPT (unknown encoding or short header). */
int bdb_chunk_iter_init(bdb_chunk_iter *it, const uint8_t *p, size_t len);
/* 1 = a sample in *ts and *v, 0 = end, BDB_ERR_CORRUPT = truncated or malformed bytes. */
int bdb_chunk_iter_next(bdb_chunk_iter *it, int64_t *ts, double *v);
/* Block files (version 3) keep a PACKED chunk bare: its flags byte and then
 * everything after its count and first timestamp, which the block's index holds.
 * bdb_chunk_bare_offset gives where that rest starts in the whole chunk p: BDB_OK with
 * *rest, BDB_ERR_NOTFOUND (not PACKED: kept whole) or BDB_ERR_INVALID (malformed, or
 * the count or first timestamp differs from the ones given). */
int bdb_chunk_bare_offset(const uint8_t *p, size_t len, int64_t min_ts, uint32_t count,
                          size_t *rest);
/* Iterates a bare PACKED chunk, with its first timestamp (ms) and count from the
 * index. BDB_OK or BDB_ERR_CORRUPT. */
int bdb_chunk_iter_init_bare(bdb_chunk_iter *it, const uint8_t *p, size_t len, int64_t min_ts,
                             uint32_t count);
/* Number of samples recorded in the chunk header (0 if malformed). */
uint16_t bdb_chunk_count(const uint8_t *p, size_t len);

#endif
