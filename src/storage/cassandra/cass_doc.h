/* cass_doc: named durable documents in the keyspace (the doc_put / doc_get ops of
 * storage/sink.h, wired into cass_sink's ops table); the tenant registry is one
 * (docs/CASSANDRA.md "The tenant registry on Cassandra").
 *
 * Table (schema.c): docs (k text, part int, body blob, PRIMARY KEY (k, part)).
 *   k = <key>, part 0: the header, the text
 *       "bucketdb-doc 1 version=<v> parts=<n> bytes=<len> crc32=<8 hex>"
 *   k = <key>#<v>, parts 0..n-1: the document's bytes in slices of at most
 *       CASS_DOC_PART_MAX bytes (<len> in all; CRC-32 <crc32> over them).
 * A put writes every slice of a new version first, then the header (one row: it is
 * replaced atomically), then deletes the previous version's slices; a put that stops
 * half-way leaves the old header pointing at the old, complete slices. A get reads
 * the header, then the slices it names, and refuses (BDB_ERR_CORRUPT) a document whose
 * slices are missing, too long, of another total length or checksum, rather than hand
 * over part of it. */
#ifndef BDB_CASS_DOC_H
#define BDB_CASS_DOC_H

#include "storage/sink.h"

#include <stddef.h>
#include <stdint.h>

#define CASS_DOC_PART_MAX (256u << 10)
#define CASS_DOC_MAX_BYTES (64u << 20) /* larger documents are refused by put and get */

typedef struct cass_doc_head {
    int64_t version;
    uint32_t parts;
    uint64_t bytes;
    uint32_t crc;
} cass_doc_head;

/* The header text of h into out (NUL-terminated); its length. */
size_t cass_doc_head_format(const cass_doc_head *h, char *out, size_t cap);
/* Parses a header: BDB_OK, or BDB_ERR_CORRUPT (not a header this version reads, or
 * parts and bytes disagree). */
int cass_doc_head_parse(const void *p, size_t n, cass_doc_head *h);
/* The header of data (version set by the caller). */
void cass_doc_head_of(const void *data, size_t len, int64_t version, cass_doc_head *h);

/* One stored slice as read back: its part number and bytes. */
typedef struct cass_doc_slice {
    int32_t part;
    const void *p;
    int32_t len;
} cass_doc_slice;
/* The document from the slices read for header h (any order): BDB_OK with *data
 * (malloc'd, NUL-terminated beyond h->bytes), or BDB_ERR_CORRUPT (err says which
 * check failed), BDB_ERR_NOMEM. */
int cass_doc_assemble(const cass_doc_head *h, const cass_doc_slice *v, size_t n, void **data,
                      char *err, size_t errlen);

/* The ops (s from cass_sink_open; BDB_ERR_IO while not connected). */
int cass_doc_put(bdb_sink *s, const char *key, const void *data, size_t len);
int cass_doc_get(bdb_sink *s, const char *key, void **data, size_t *len, char *err, size_t errlen);

#endif
