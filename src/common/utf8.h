/* utf8: is a byte string well-formed UTF-8 (RFC 3629)?
 *
 * Every name and string a client sends ends up in JSON answers, in Cassandra `text`
 * columns and in MQTT strings, and all three require UTF-8: a device name with a
 * stray 0xff byte made /api/v1/devices invalid JSON for every client, and a Cassandra
 * node refuses to store it. So ingestion refuses such bytes (with the offset of the
 * first bad one), and the JSON writer replaces any that reach it anyway. */
#ifndef BDB_UTF8_H
#define BDB_UTF8_H

#include <stddef.h>

/* Length (1..4) of the well-formed UTF-8 sequence at p (n bytes available), or 0 when
 * the bytes there are not one: a stray continuation byte, a lead byte without its
 * continuation bytes, an overlong form, a surrogate (U+D800..DFFF) or a code point
 * above U+10FFFF. NUL is a valid one-byte sequence; callers that refuse control
 * characters check for them on their own. */
size_t bdb_utf8_seq(const unsigned char *p, size_t n);

/* 1 when all n bytes are well-formed UTF-8, else 0 with *bad_at (if not NULL) the
 * offset of the first byte that does not start a well-formed sequence. */
int bdb_utf8_valid(const char *p, size_t n, size_t *bad_at);

#endif
