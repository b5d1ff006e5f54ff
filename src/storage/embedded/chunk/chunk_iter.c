/* chunk_iter: decoding chunks of every encoding (XOR, STREAM, PACKED, DECIMAL; layout in
 * chunk.c). Every read is bounded by the chunk's length: damaged bytes end the
 * iteration with BDB_ERR_CORRUPT, never a read outside them. */
#include "storage/embedded/chunk/chunk_int.h"

#include "bucketdb/bdb.h"

#include <string.h>

/* No valid chunk comes near this; it keeps bit positions inside uint32_t. */
#define MAX_STREAM_BYTES (1u << 24)

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

/* A STREAM value: a mantissa delta, a restart or a raw value (it->raw says which
 * the sample is). Deltas need a chain, which only a restart begins. */
static int get_stream_value(bdb_chunk_iter *it)
{
    static const uint8_t width[5] = {0, 7, 12, 20, 32};
    uint64_t w = peek(it);
    unsigned ones = (unsigned)__builtin_clzll(~w | 1ull << 57);
    it->raw = 0;
    if (ones == 6) {
        it->pos += 6;
        it->rawbits = get_bits(it, 64);
        it->raw = 1;
        return 0;
    }
    if (ones == 5) {
        it->pos += 6;
        uint64_t z;
        it->exp = (uint8_t)get_bits(it, 4);
        if (get_bit_uvarint(it, &z) < 0)
            return -1;
        it->v = unzigzag(z);
        it->lead = 0; /* a chain */
    } else {
        if (it->lead == NO_WINDOW)
            return -1;
        unsigned n = width[ones];
        uint64_t d = 0;
        if (n) {
            uint64_t sign = 1ull << (n - 1);
            d = ((w << (ones + 1) >> (64 - n)) ^ sign) - sign;
        }
        it->pos += ones + 1 + n;
        it->v += d; /* unsigned: corrupt input may overflow, the range check catches it */
    }
    if (it->v + (MANT_LIMIT - 1) >= 2 * MANT_LIMIT - 1)
        return -1;
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

/* A PACKED chunk from its flags byte on, once its count and first timestamp (in
 * units) are known; q points at m0. Shared by whole chunks and by the bare ones of
 * block files, which keep count and t0 in their index. */
static int packed_rest(bdb_chunk_iter *it, uint8_t flags, uint64_t count, int64_t t0,
                       const uint8_t *q, const uint8_t *end)
{
    uint64_t z;
    if (count == 0 || count > BDB_CHUNK_MAX_SAMPLES)
        return -1;
    it->count = (uint16_t)count;
    it->exp = flags & 15;
    it->dod = flags >> 4 & 1;
    it->t_unit = unit_tab[flags >> 5 & 3];
    it->t_max = INT64_MAX / it->t_unit;
    it->t = t0;
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

/* The count and t0 of a whole PACKED chunk; *q is left at m0. */
static int packed_head(const uint8_t **q, const uint8_t *end, uint64_t *count, int64_t *t0)
{
    uint64_t z;
    if (get_uvarint(q, end, count) < 0 || get_uvarint(q, end, &z) < 0)
        return -1;
    *t0 = (int64_t)unzigzag(z);
    return 0;
}

static int packed_init(bdb_chunk_iter *it, const uint8_t *p, size_t len)
{
    const uint8_t *q = p + 1, *end = p + len;
    uint64_t count;
    int64_t t0;
    if (packed_head(&q, end, &count, &t0) < 0)
        return -1;
    return packed_rest(it, p[0], count, t0, q, end);
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
    if (kind != BDB_CHUNK_XOR && kind != BDB_CHUNK_STREAM && kind != BDB_CHUNK_DECIMAL &&
        kind != BDB_CHUNK_PACKED)
        return BDB_ERR_CORRUPT;
    it->enc = (uint8_t)kind;
    if (len > MAX_STREAM_BYTES)
        len = MAX_STREAM_BYTES;
    if (kind == BDB_CHUNK_PACKED) {
        if (packed_init(it, p, len) < 0)
            return BDB_ERR_CORRUPT;
    } else if (kind == BDB_CHUNK_XOR || kind == BDB_CHUNK_STREAM) {
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
            rc = it->enc == BDB_CHUNK_XOR      ? get_xor_value(it)
                 : it->enc == BDB_CHUNK_STREAM ? get_stream_value(it)
                                               : get_decimal_value(it);
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
        else if (it->raw)
            *v = bits_dbl(it->rawbits);
        else
            *v = (double)(int64_t)it->v / pow10_tab[it->exp];
    }
    it->i++;
    return 1;
}

int bdb_chunk_bare_offset(const uint8_t *p, size_t len, int64_t min_ts, uint32_t count,
                          size_t *rest)
{
    if (len == 0 || bdb_chunk_kind(p[0]) != BDB_CHUNK_PACKED)
        return BDB_ERR_NOTFOUND;
    const uint8_t *q = p + 1, *end = p + len;
    uint64_t n;
    int64_t t0;
    if (packed_head(&q, end, &n, &t0) < 0 || n != count)
        return BDB_ERR_INVALID;
    int64_t unit = unit_tab[p[0] >> 5 & 3];
    if (t0 > INT64_MAX / unit || t0 < INT64_MIN / unit || t0 * unit != min_ts)
        return BDB_ERR_INVALID;
    *rest = (size_t)(q - p);
    return BDB_OK;
}

int bdb_chunk_iter_init_bare(bdb_chunk_iter *it, const uint8_t *p, size_t len, int64_t min_ts,
                             uint32_t count)
{
    memset(it, 0, sizeof(*it));
    it->lead = NO_WINDOW;
    it->err = BDB_ERR_CORRUPT;
    if (len == 0 || bdb_chunk_kind(p[0]) != BDB_CHUNK_PACKED)
        return BDB_ERR_CORRUPT;
    if (len > MAX_STREAM_BYTES)
        len = MAX_STREAM_BYTES;
    int64_t unit = unit_tab[p[0] >> 5 & 3];
    /* The index's first timestamp must be one the whole chunk could have stored. */
    if (min_ts % unit != 0)
        return BDB_ERR_CORRUPT;
    it->enc = BDB_CHUNK_PACKED;
    if (packed_rest(it, p[0], count, min_ts / unit, p + 1, p + len) < 0)
        return BDB_ERR_CORRUPT;
    it->err = 0;
    return BDB_OK;
}

uint16_t bdb_chunk_count(const uint8_t *p, size_t len)
{
    if (len < HDR_XOR)
        return 0;
    switch (bdb_chunk_kind(p[0])) {
    case BDB_CHUNK_XOR:
    case BDB_CHUNK_STREAM:
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
