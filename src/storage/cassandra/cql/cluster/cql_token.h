/* cql_token: partition tokens as Cassandra's Murmur3Partitioner computes them, for
 * token-aware routing.
 *
 * The hash is MurmurHash3 x64 128-bit with seed 0, of which the token is the first
 * 64-bit half, read as signed. Cassandra's implementation differs from the reference
 * one in the tail (the last length % 16 bytes): each tail byte is sign-extended before
 * it is shifted into place, so keys whose tail has a byte >= 0x80 hash differently
 * from the reference; this module reproduces Cassandra. The smallest long is never a
 * token of a key (it stands for the minimum token): it maps to the largest long, and
 * an empty key has the minimum token. */
#ifndef BDB_CQL_TOKEN_H
#define BDB_CQL_TOKEN_H

#include "common/buf.h"
#include "storage/cassandra/cql/wire/cql_proto.h"

#include <stddef.h>
#include <stdint.h>

/* Both 64-bit halves of Cassandra's MurmurHash3 x64_128 of [p, p + n). */
void cql_murmur3_x64_128(const void *p, size_t n, uint64_t seed, int64_t out[2]);
/* The Murmur3Partitioner token of a serialized partition key. */
int64_t cql_murmur3_token(const void *key, size_t n);
/* The serialized partition key of a composite (multi-column) partition key: for each
 * component, a 2-byte big-endian length, the value, and a 0 byte. A single-column key
 * is just its value (use it as is). */
void cql_composite_key(bdb_buf *out, const cql_bytes *parts, size_t n);

#endif
