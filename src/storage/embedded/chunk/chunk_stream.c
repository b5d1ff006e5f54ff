/* chunk_stream: the head's appender, which writes STREAM chunks (layout in chunk.c).
 *
 * The head holds every sample since the last flush, so its bytes per sample are the
 * server's memory per sample. Readings arrive as decimal text (21.37, 1013.25), which
 * XOR encodes in 60 to 70 bits because the binary mantissas of decimals differ in
 * every bit; the same readings as integer mantissas step by small deltas. STREAM
 * keeps PACKED's idea (mantissas at a decimal exponent) in a form one sample can be
 * appended to with no planning and no second pass: each value is a delta of the
 * mantissa at the chain's exponent, a restart of the chain at the smallest exponent
 * that holds the value exactly when the current one does not (more decimals, or a
 * mantissa too large), or the raw 64 bits when it is no exact decimal at all. A value
 * with fewer decimals stays on the chain; when RUN_LOWER values in a row have needed
 * fewer, the chain restarts at the exponent they need (one reading of 21.375 among
 * tenths must not make every later delta ten times larger). Every sample still fits
 * MAX_SAMPLE_BITS, so bdb_chunk_app_reserve keeps its promise that reserved appends
 * never allocate. */
#include "storage/embedded/chunk/chunk_int.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"

#include <stdlib.h>
#include <string.h>

/* After this many raw values in a row, look for an exponent only on every 16th sample:
 * a series of non-decimal values would otherwise try all 16 exponents per sample. */
#define MISS_PATIENCE 8
/* Chain values in a row that all needed a smaller exponent before the chain drops to it. */
#define RUN_LOWER 16

void bdb_chunk_state_init(bdb_chunk_state *st)
{
    memset(st, 0, sizeof(*st));
    st->lead = NO_WINDOW;
    st->exp = NO_EXP;
}

void bdb_chunk_app_init(bdb_chunk_app *a)
{
    a->buf = NULL;
    a->cap = 0;
    bdb_chunk_state_init(&a->st);
}

void bdb_chunk_app_free(bdb_chunk_app *a)
{
    free(a->buf);
    bdb_chunk_app_init(a);
}

size_t bdb_chunk_stream_need(const bdb_chunk_state *st, uint32_t n)
{
    return HDR_XOR + ((st->nbits + (uint64_t)n * MAX_SAMPLE_BITS) >> 3) + SLACK;
}

size_t bdb_chunk_stream_used(const bdb_chunk_state *st)
{
    return HDR_XOR + ((st->nbits + 7) >> 3);
}

/* Grows by half: a buffer of its own is a test's or a merge's, not the head's. */
static int app_grow(bdb_chunk_app *a, size_t need)
{
    size_t cap = a->cap ? a->cap : 32;
    while (cap < need)
        cap = (cap + cap / 2 + 15) & ~(size_t)15;
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
    size_t need = bdb_chunk_stream_need(&a->st, n);
    return need > a->cap ? app_grow(a, need) : BDB_OK;
}

/* A new mantissa chain: value m at exponent e. */
static void put_restart(bdb_chunk_state *a, uint8_t *s, unsigned e, int64_t m)
{
    put_bits(s, &a->nbits, STREAM_RESTART << 4 | e, 10);
    put_bit_uvarint(s, &a->nbits, zigzag(m));
    a->exp = (uint8_t)e;
    a->v_last = (uint64_t)m;
    a->miss = 0;
    a->zeros = (uint8_t)e; /* no value after the restart has said what it needs yet */
    a->run = 0;
}

/* Trailing decimal zeros of m, at most max. */
static unsigned dec_zeros(int64_t m, unsigned max)
{
    unsigned z = 0;
    while (z < max && m % 10 == 0) {
        m /= 10;
        z++;
    }
    return z;
}

static void put_stream_value(bdb_chunk_state *a, uint8_t *s, double v)
{
    int64_t m;
    if (a->exp != NO_EXP) {
        if (decimal_at(v, a->exp, &m)) {
            if (a->zeros) {
                a->zeros = (uint8_t)dec_zeros(m, a->zeros);
                if (a->zeros && ++a->run >= RUN_LOWER) {
                    unsigned z = a->zeros;
                    for (unsigned k = 0; k < z; k++)
                        m /= 10;
                    put_restart(a, s, a->exp - z, m);
                    return;
                }
            }
            /* |m| < 2^53 on both sides: the delta cannot overflow. */
            int64_t d = m - (int64_t)a->v_last;
            if (d == 0) {
                put_bits(s, &a->nbits, 0, 1);
            } else if (d >= -64 && d < 64) {
                put_bits(s, &a->nbits, 2u << 7 | ((uint64_t)d & 0x7f), 9);
            } else if (d >= -2048 && d < 2048) {
                put_bits(s, &a->nbits, 6u << 12 | ((uint64_t)d & 0xfff), 15);
            } else if (d >= -(1 << 19) && d < (1 << 19)) {
                put_bits(s, &a->nbits, 14u << 20 | ((uint64_t)d & 0xfffff), 24);
            } else if (d >= INT32_MIN && d <= INT32_MAX) {
                put_bits(s, &a->nbits, 30ull << 32 | ((uint64_t)d & 0xffffffffu), 37);
            } else {
                goto restart; /* a jump no delta bucket holds: a new chain */
            }
            a->v_last = (uint64_t)m;
            a->miss = 0;
            return;
        }
    }
restart:
    if (a->miss < MISS_PATIENCE || (a->count & 15) == 0) {
        for (unsigned e = 0; e <= 15; e++) {
            if (decimal_at(v, e, &m)) {
                put_restart(a, s, e, m);
                return;
            }
        }
    }
    put_bits(s, &a->nbits, STREAM_RAW, 6);
    put_bits64(s, &a->nbits, dbl_bits(v), 64);
    if (a->miss < MISS_PATIENCE)
        a->miss++;
}

int bdb_chunk_stream_put(bdb_chunk_state *a, uint8_t *buf, int64_t ts, double v)
{
    if (a->count == BDB_CHUNK_MAX_SAMPLES)
        return BDB_ERR_LIMIT;
    if (a->count > 0 && ts <= a->t_last)
        return BDB_ERR_INVALID;
    uint8_t *s = buf + HDR_XOR;
    put_ts(s, &a->nbits, a->count, &a->t_last, &a->t_delta, ts);
    put_stream_value(a, s, v);
    a->count++;
    write_hdr(buf, BDB_CHUNK_STREAM, a->count);
    return BDB_OK;
}

int bdb_chunk_app_append(bdb_chunk_app *a, int64_t ts, double v)
{
    if (a->st.count == BDB_CHUNK_MAX_SAMPLES)
        return BDB_ERR_LIMIT;
    if (a->st.count > 0 && ts <= a->st.t_last)
        return BDB_ERR_INVALID;
    if (bdb_chunk_app_reserve(a, 1) != BDB_OK)
        return BDB_ERR_NOMEM;
    return bdb_chunk_stream_put(&a->st, a->buf, ts, v);
}

const uint8_t *bdb_chunk_stream_bytes(const bdb_chunk_state *st, const uint8_t *buf, size_t *len)
{
    static const uint8_t empty[HDR_XOR] = {BDB_CHUNK_STREAM, 0, 0};
    if (!st->count) {
        *len = sizeof(empty);
        return empty;
    }
    *len = bdb_chunk_stream_used(st);
    return buf;
}

const uint8_t *bdb_chunk_app_bytes(const bdb_chunk_app *a, size_t *len)
{
    return bdb_chunk_stream_bytes(&a->st, a->buf, len);
}
