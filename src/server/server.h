/* server: the HTTP front of bucketdb. Owns the storage engine, the query pool and a
 * libmicrohttpd daemon (one thread per connection: a write blocks its connection
 * until its WAL fsync, never anyone else's).
 *
 * Endpoints (docs/API.md): /write, /api/v1/write/json, /ping, /query (Influx
 * CREATE DATABASE only), /api/v1/query, /api/v1/devices[/<id>[/profile]],
 * /api/v1/export, /api/v1/admin/tenants[/<name>[/token]], /health, /metrics,
 * /internal/flush. Tenancy, tokens and quotas: docs/TENANCY.md. */
#ifndef BDB_SERVER_H
#define BDB_SERVER_H

#include "server/config.h"

typedef struct bdb_server bdb_server;

/* Opens the data directory (recovering it) and starts listening.
 * Errors: BDB_ERR_IO (cannot bind or open), BDB_ERR_EXISTS (directory locked),
 * BDB_ERR_INVALID (bad listen address). With auth=auto a non-loopback address
 * requires a token on every request; with auth=off it is refused (BDB_ERR_INVALID)
 * unless allow_insecure_listen. Opens the tenant registry (<data>/tenants; a damaged
 * one is BDB_ERR_CORRUPT). */
int bdb_server_start(const bdb_config *cfg, bdb_server **out);
/* Resolves the listen address (without binding) and applies the start rule: a
 * non-loopback address with auth = off is refused unless allow_insecure_listen.
 * BDB_OK, or BDB_ERR_INVALID with the reason in err. bdb_server_start checks it too. */
int bdb_server_check_listen(const bdb_config *cfg, char *err, size_t errlen);
/* The bound port (useful with port 0). */
int bdb_server_port(const bdb_server *s);
/* The admin token (<data>/token). */
const char *bdb_server_token(const bdb_server *s);
/* 1 when every request needs a token (auth=on, or auto on a non-loopback address). */
int bdb_server_auth_required(const bdb_server *s);
/* Stops accepting, finishes requests, flushes and closes storage. */
int bdb_server_stop(bdb_server *s);

#endif
