/* cql_token: see cql_token.h. */
#include "storage/cassandra/cql/cluster/cql_token.h"

#include <string.h>

static inline uint64_t rotl64(uint64_t v, int r)
{
    return (v << r) | (v >> (64 - r));
}

static inline uint64_t fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

static inline uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* A tail byte as Cassandra reads it: a Java byte (signed) widened to a long. */
static inline uint64_t sx(uint8_t b)
{
    return (uint64_t)(int64_t)(int8_t)b;
}

void cql_murmur3_x64_128(const void *data, size_t n, uint64_t seed, int64_t out[2])
{
    const uint8_t *p = data;
    const uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
    uint64_t h1 = seed, h2 = seed;
    size_t nblocks = n / 16;
    for (size_t i = 0; i < nblocks; i++) {
        uint64_t k1 = le64(p + i * 16), k2 = le64(p + i * 16 + 8);
        k1 *= c1;
        k1 = rotl64(k1, 31);
        k1 *= c2;
        h1 ^= k1;
        h1 = rotl64(h1, 27);
        h1 += h2;
        h1 = h1 * 5 + 0x52dce729;
        k2 *= c2;
        k2 = rotl64(k2, 33);
        k2 *= c1;
        h2 ^= k2;
        h2 = rotl64(h2, 31);
        h2 += h1;
        h2 = h2 * 5 + 0x38495ab5;
    }
    const uint8_t *t = p + nblocks * 16;
    size_t rest = n & 15;
    uint64_t k1 = 0, k2 = 0;
    if (rest > 8) {
        for (size_t i = rest; i > 8; i--)
            k2 ^= sx(t[i - 1]) << ((i - 9) * 8);
        k2 *= c2;
        k2 = rotl64(k2, 33);
        k2 *= c1;
        h2 ^= k2;
    }
    if (rest > 0) {
        size_t top = rest > 8 ? 8 : rest;
        for (size_t i = top; i > 0; i--)
            k1 ^= sx(t[i - 1]) << ((i - 1) * 8);
        k1 *= c1;
        k1 = rotl64(k1, 31);
        k1 *= c2;
        h1 ^= k1;
    }
    h1 ^= (uint64_t)n;
    h2 ^= (uint64_t)n;
    h1 += h2;
    h2 += h1;
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 += h2;
    h2 += h1;
    out[0] = (int64_t)h1;
    out[1] = (int64_t)h2;
}

int64_t cql_murmur3_token(const void *key, size_t n)
{
    if (n == 0)
        return INT64_MIN;
    int64_t h[2];
    cql_murmur3_x64_128(key, n, 0, h);
    return h[0] == INT64_MIN ? INT64_MAX : h[0];
}

void cql_composite_key(bdb_buf *out, const cql_bytes *parts, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int32_t len = parts[i].len > 0 ? parts[i].len : 0;
        cql_put_short(out, (uint16_t)len);
        bdb_buf_append(out, parts[i].p, (size_t)len);
        cql_put_u8(out, 0);
    }
}
