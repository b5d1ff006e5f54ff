/* buf: a growable byte buffer with append-style encoders and a sticky-error decoder.
 *
 * Encoders append to a caller-owned bdb_buf (Prometheus Encbuf style). Allocation
 * failure: a buffer set up with bdb_buf_init_checked (the engine's and the parsers')
 * gets a sticky `oom` flag instead, every later append is a no-op, and its owner
 * checks the flag once after a group of appends and returns BDB_ERR_NOMEM. Any other
 * buffer (the server's responses, whose allocations the server's abort-on-OOM policy
 * covers, docs/RELIABILITY.md) aborts the process, so no truncated answer is sent. */
#ifndef BDB_BUF_H
#define BDB_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct bdb_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
    uint8_t checked; /* allocation failure sets oom instead of aborting */
    uint8_t oom;     /* sticky: an append was dropped for lack of memory */
} bdb_buf;

void bdb_buf_init(bdb_buf *b);
void bdb_buf_init_checked(bdb_buf *b);
void bdb_buf_free(bdb_buf *b);  /* keeps the checked mode, clears oom */
void bdb_buf_reset(bdb_buf *b); /* len = 0, keeps capacity; keeps oom */
/* BDB_OK, or BDB_ERR_NOMEM (checked buffers only; oom is set and nothing fits). */
int bdb_buf_reserve(bdb_buf *b, size_t extra);
void bdb_buf_append(bdb_buf *b, const void *p, size_t n);
void bdb_buf_putc(bdb_buf *b, uint8_t c);
void bdb_buf_puts(bdb_buf *b, const char *s);
void bdb_buf_printf(bdb_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void bdb_buf_put_u32le(bdb_buf *b, uint32_t v);
void bdb_buf_put_u64le(bdb_buf *b, uint64_t v);
void bdb_buf_put_uvarint(bdb_buf *b, uint64_t v);
void bdb_buf_put_varint(bdb_buf *b, int64_t v);            /* zigzag */
void bdb_buf_put_f64(bdb_buf *b, double v);                /* IEEE 754 bits, little-endian */
void bdb_buf_put_str(bdb_buf *b, const char *s, size_t n); /* uvarint length + bytes */
/* A finite or non-finite double, exactly and compactly (bdb_dec_num reads it back bit
 * for bit): a value that is m / 10^e for an integer |m| <= 2^53 and e <= 14 (readings
 * such as 21.5 or 1013.25) is uvarint(zigzag(m) << 4 | e), 1 to 4 bytes for telemetry;
 * anything else (-0.0, NaN, 1/3) is the byte 15 and the 8 bytes of bdb_buf_put_f64. The
 * smallest e is used, and the decoder refuses any other form (canonical). */
void bdb_buf_put_num(bdb_buf *b, double v);
/* The form bdb_buf_put_num chooses for v: the smallest e (0..14) with v == m / 10^e and
 * |m| <= 2^53, m in *m; or BDB_NUM_RAW. bdb_num_value(m, e) is m / 10^e, a correctly
 * rounded division of two exact doubles (so every m' / 10^e' of the same rational gives
 * the same bits). */
#define BDB_NUM_RAW 15u
unsigned bdb_num_form(double v, int64_t *m);
double bdb_num_value(int64_t m, unsigned e);
/* Appends s as the inside of a JSON string (escapes ", \ and control bytes). */
void bdb_buf_json_str(bdb_buf *b, const char *s, size_t n);
/* Appends an integer in decimal, as printf's %lld / %llu would (without printf: these
 * run for every row of an answer). */
void bdb_buf_i64(bdb_buf *b, int64_t v);
void bdb_buf_u64(bdb_buf *b, uint64_t v);
/* Appends a double the way JSON and line protocol want it (shortest round-trip). */
void bdb_buf_double(bdb_buf *b, double v);

/* Decoder over a byte range. After any failed read `err` is set and every later
 * read returns zero; check `err` once after a group of reads. */
typedef struct bdb_dec {
    const uint8_t *p;
    const uint8_t *end;
    int err;
} bdb_dec;

void bdb_dec_init(bdb_dec *d, const void *p, size_t n);
uint8_t bdb_dec_u8(bdb_dec *d);
uint32_t bdb_dec_u32le(bdb_dec *d);
uint64_t bdb_dec_u64le(bdb_dec *d);
uint64_t bdb_dec_uvarint_slow(bdb_dec *d);
uint64_t bdb_dec_uvarint_canon_slow(bdb_dec *d);
/* Most varints of the tier records and the WAL are one byte: that one without a call. */
static inline uint64_t bdb_dec_uvarint(bdb_dec *d)
{
    if (!d->err && d->p < d->end && *d->p < 0x80)
        return *d->p++;
    return bdb_dec_uvarint_slow(d);
}
int64_t bdb_dec_varint(bdb_dec *d);
/* Like bdb_dec_uvarint but also an error unless the varint is in its shortest form,
 * for formats whose encoding must be canonical (one byte string per value). */
static inline uint64_t bdb_dec_uvarint_canon(bdb_dec *d)
{
    if (!d->err && d->p < d->end && *d->p < 0x80)
        return *d->p++; /* one byte: the shortest form */
    return bdb_dec_uvarint_canon_slow(d);
}
int64_t bdb_dec_varint_canon(bdb_dec *d); /* zigzag, shortest form only */
double bdb_dec_f64(bdb_dec *d);
double bdb_dec_num(bdb_dec *d); /* bdb_buf_put_num's form; err if not canonical */
/* Steps over a bdb_buf_put_num value: its framing is checked, its form and value are
 * not (a reader stepping over data whose checksum it verified). */
void bdb_dec_skip_num(bdb_dec *d);
/* Returns a pointer into the decoded range (not copied) and its length. */
const char *bdb_dec_str(bdb_dec *d, size_t *n);
const uint8_t *bdb_dec_bytes(bdb_dec *d, size_t n);
static inline size_t bdb_dec_left(const bdb_dec *d)
{
    return (size_t)(d->end - d->p);
}

static inline void bdb_put_u32le(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}
static inline uint32_t bdb_get_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline void bdb_put_u64le(uint8_t *p, uint64_t v)
{
    bdb_put_u32le(p, (uint32_t)v);
    bdb_put_u32le(p + 4, (uint32_t)(v >> 32));
}
static inline uint64_t bdb_get_u64le(const uint8_t *p)
{
    return (uint64_t)bdb_get_u32le(p) | (uint64_t)bdb_get_u32le(p + 4) << 32;
}

#endif
