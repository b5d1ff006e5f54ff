/* admin_token: the server's admin token (docs/TENANCY.md#tokens).
 *
 * Without a store, or with one that keeps no documents: <dir>/token, 48 hex
 * characters made on the first start (docs/formats/README.md).
 *
 * With a store that keeps documents (Cassandra: sink.h doc_put/doc_get), the token's
 * SHA-256 is also the store's document "admin" (docs/CASSANDRA.md#the-admin-token),
 * so every server of a keyspace, one started on an empty directory too, takes the
 * same admin token. The document is the truth: a directory whose file holds another
 * token keeps its file, but that token is refused (a warning says so). A directory
 * without the file makes none: the token is whatever the directory that made it
 * printed, and *token is "" here. A keyspace without the document (a first start, or
 * one of an older bucketdb) gets the directory's token's hash; an unreachable store
 * leaves the directory's token (made if need be) in force until a start reaches it. */
#ifndef BDB_ADMIN_TOKEN_H
#define BDB_ADMIN_TOKEN_H

#include "server/tenants/tenants.h" /* BDB_HASH_BYTES */
#include "storage/sink.h"

#include <stddef.h>
#include <stdint.h>

#define BDB_ADMIN_TOKEN_LEN 48 /* hex characters of a token this server makes */
#define BDB_ADMIN_TOKEN_MAX 64 /* a token file's longest word that is taken */
#define BDB_ADMIN_DOC_KEY "admin"

/* Fills token (NUL-terminated, "" when this directory does not hold it) and hash.
 * Errors: BDB_ERR_IO (the file cannot be read or made; errno is set), BDB_ERR_CORRUPT
 * (the store's document is not one; err says why). */
int bdb_admin_token_open(const char *dir, bdb_sink *store, char token[BDB_ADMIN_TOKEN_MAX + 1],
                         uint8_t hash[BDB_HASH_BYTES], char *err, size_t errlen);

#endif
