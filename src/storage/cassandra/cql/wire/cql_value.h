/* cql_value: CQL value serialization (section 6 of the protocol specs) for the types
 * bucketdb's schema uses, and text conversion for the CLI and tests.
 *
 * Encoders append the value's bytes only; the [bytes] length prefix is written by
 * the message encoder (cql_put_bytes). Decoders take a cql_bytes from a result row
 * and check its length: BDB_ERR_NOTFOUND for a null, BDB_ERR_CORRUPT for a value
 * of the wrong size. Collections use the v3+ format ([int] counts and lengths), the
 * same in v3 and v4. */
#ifndef BDB_CQL_VALUE_H
#define BDB_CQL_VALUE_H

#include "storage/cassandra/cql/wire/cql_proto.h"

#include <stddef.h>
#include <stdint.h>

void cql_enc_int(bdb_buf *b, int32_t v);
void cql_enc_bigint(bdb_buf *b, int64_t v); /* bigint, counter, timestamp (Unix ms) */
void cql_enc_double(bdb_buf *b, double v);
void cql_enc_boolean(bdb_buf *b, int v);
void cql_enc_uuid(bdb_buf *b, const uint8_t u[16]); /* uuid and timeuuid */
/* list<text> and set<text> (a set is sent as a list of distinct elements). */
void cql_enc_text_list(bdb_buf *b, const char *const *items, int32_t n);
void cql_enc_text_map(bdb_buf *b, const char *const *keys, const char *const *vals, int32_t n);

int cql_dec_int(cql_bytes v, int32_t *out);
int cql_dec_bigint(cql_bytes v, int64_t *out);
int cql_dec_double(cql_bytes v, double *out);
int cql_dec_boolean(cql_bytes v, int *out);
int cql_dec_uuid(cql_bytes v, uint8_t out[16]);

/* Walks the elements of a list or set (one cql_bytes each) or a map (key, value,
 * key, value...). cql_coll_begin returns the element count (entries for a map) or
 * BDB_ERR_CORRUPT / BDB_ERR_NOTFOUND; cql_coll_next returns 1 with an element, 0 at
 * the end, BDB_ERR_CORRUPT if the value is malformed. */
typedef struct cql_coll_iter {
    bdb_dec d;
    int64_t left; /* items (not entries) left */
} cql_coll_iter;
int cql_coll_begin(cql_coll_iter *it, cql_bytes v, int is_map);
int cql_coll_next(cql_coll_iter *it, cql_bytes *elem);

/* UUIDs in canonical 8-4-4-4-12 form. */
int cql_uuid_parse(const char *s, uint8_t out[16]);
void cql_uuid_format(const uint8_t u[16], char out[37]);

/* Appends a readable form of a value of type t: numbers in decimal, timestamps in
 * RFC 3339 UTC with milliseconds, blobs as 0x..., uuids canonical, collections as
 * CQL literals ({'k': 'v'}, ['a'], {'a'}). Strings are quoted only inside
 * collections. A null prints as "null". Returns BDB_OK or BDB_ERR_CORRUPT (the
 * bytes do not fit the type; what was appended so far stays). */
int cql_value_format(bdb_buf *out, const cql_type *t, cql_bytes v);

/* Parses the text form above (and CQL literals: timestamps as Unix ms or RFC 3339,
 * booleans true/false) into the value bytes of type t, appended to out. On error
 * returns BDB_ERR_INVALID and writes a reason to err. */
int cql_value_parse(bdb_buf *out, const cql_type *t, const char *s, size_t n, char *err,
                    size_t errlen);

#endif
