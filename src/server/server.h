/* server: the HTTP front of bucketdb. Owns the storage engine, the query pool and a
 * libmicrohttpd daemon (one thread per connection: a write blocks its connection
 * until its WAL fsync, never anyone else's).
 *
 * Endpoints (docs/API.md): /write, /api/v1/write/json, /ping, /query (Influx
 * CREATE DATABASE only), /api/v1/query, /api/v1/devices[/<id>[/profile]],
 * /api/v1/export, /health, /metrics, /internal/flush. */
#ifndef BDB_SERVER_H
#define BDB_SERVER_H

#include "server/config.h"

typedef struct bdb_server bdb_server;

/* Opens the data directory (recovering it) and starts listening.
 * Errors: BDB_ERR_IO (cannot bind or open), BDB_ERR_EXISTS (directory locked),
 * BDB_ERR_INVALID (bad listen address). With auth=auto a non-loopback address
 * requires the token on every request. */
int bdb_server_start(const bdb_config *cfg, bdb_server **out);
/* The bound port (useful with port 0). */
int bdb_server_port(const bdb_server *s);
const char *bdb_server_token(const bdb_server *s);
/* Stops accepting, finishes requests, flushes and closes storage. */
int bdb_server_stop(bdb_server *s);

#endif
