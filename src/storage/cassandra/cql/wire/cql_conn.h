/* cql_conn: one connection to one Cassandra node speaking the native protocol.
 *
 * Opening a connection negotiates the protocol version (the highest of max_version
 * down to min_version the server accepts: Cassandra 2.1 answers a v4 frame with an
 * error in a v3 frame, later servers with a protocol error, some just close), asks
 * OPTIONS, sends STARTUP (CQL_VERSION 3.0.0, no compression) and answers an
 * AUTHENTICATE with SASL PLAIN credentials (PasswordAuthenticator). With opts.tls the
 * stream is TLS (cql_io.h: handshake right after connect, the node's certificate
 * verified unless the context is insecure).
 *
 * Many requests are in flight at once, one per stream id. A reader thread owned by
 * the connection reads every response, matches it to its request by stream id and
 * calls the request's completion callback, enforces the per-request timeout and, when
 * the connection breaks, completes everything pending. Callbacks run on the reader
 * thread, or on the sending thread just before its send call returns when the answer
 * (or the connection's failure) came while that thread was still writing the
 * request (the request frame is never freed under a write in progress). Callbacks
 * must be short, must not call the synchronous functions below (they may call the
 * *_async ones) and must not take a lock the sender holds while it sends.
 *
 * Completion contract: an async call that returns BDB_OK calls its callback exactly
 * once; one that returns an error never calls it (BDB_ERR_AGAIN: every stream id is
 * in use, back off; BDB_ERR_IO: the connection is broken; BDB_ERR_SHUTDOWN: closing).
 * The callback receives a status and a response it owns (free with
 * cql_response_free). The status is BDB_OK for a normal answer or the mapping of the
 * server's error code (cql_error_status); for failures on this side (timeout, lost
 * connection, close) the response is synthesized as an ERROR with one of the
 * CQL_ERR_CLIENT_* codes below and a message, so callers handle one shape. Only on
 * out-of-memory is the response NULL. */
#ifndef BDB_CQL_CONN_H
#define BDB_CQL_CONN_H

#include "storage/cassandra/cql/wire/cql_io.h"
#include "storage/cassandra/cql/wire/cql_proto.h"

#include <stdint.h>

typedef struct cql_conn cql_conn;
typedef struct cql_prepared cql_prepared;

typedef void (*cql_done_fn)(void *ud, int status, cql_response *resp);
typedef void (*cql_event_fn)(void *ud, const cql_event *ev);

typedef struct cql_conn_opts {
    const char *host;   /* address or name (required) */
    int port;           /* 0: 9042 */
    const cql_tls *tls; /* TLS over the connection (cql_io.h), or NULL: plain TCP */
    const char *user;   /* credentials for PasswordAuthenticator, or NULL */
    const char *password;
    int connect_timeout_ms; /* 0: 5000, for TCP connect (with the TLS handshake) and each
                               handshake step */
    int request_timeout_ms; /* 0: 12000 */
    int max_version;        /* 0: 4 */
    int min_version;        /* 0: 3 */
    uint32_t max_frame;     /* 0: CQL_FRAME_DEFAULT_MAX; larger responses break the connection */
    int max_in_flight;      /* 0: 1024 stream ids (at most 32768) */
    cql_event_fn on_event;  /* server events (after cql_conn_register), or NULL */
    void *event_ud;
} cql_conn_opts;

/* Connects and completes the handshake. On failure returns BDB_ERR_IO (cannot
 * connect, connection lost, TLS handshake failed or refused), BDB_ERR_AGAIN (timed
 * out), BDB_ERR_INVALID (bad credentials, authentication required but none given, no
 * common protocol version, the node's certificate not accepted) and writes a message
 * naming host:port (and OpenSSL's reason for TLS) to err. */
int cql_conn_open(const cql_conn_opts *o, cql_conn **out, char *err, size_t errlen);
/* Completes every pending request with CQL_ERR_CLIENT_CLOSED, stops the reader
 * thread and frees the connection with its prepared statements. NULL is fine. */
void cql_conn_close(cql_conn *c);

int cql_conn_version(const cql_conn *c);
/* The server's CQL version from SUPPORTED ("3.2.0"), or "". */
const char *cql_conn_cql_version(const cql_conn *c);
/* The authenticator class the server asked for, or "" when none. */
const char *cql_conn_authenticator(const cql_conn *c);
/* 0 once the connection is broken or closing: open a new one. */
int cql_conn_usable(cql_conn *c);
int cql_conn_in_flight(cql_conn *c);

/* Sends a request frame built with cql_msg_*(version = cql_conn_version(c)). The
 * stream id in the frame is set here. */
int cql_conn_send(cql_conn *c, bdb_buf *frame, cql_done_fn done, void *ud);
/* Synchronous form: waits for a free stream id (up to the request timeout) and for
 * the answer. Returns the status as the callback would see it and the response. */
int cql_conn_request(cql_conn *c, bdb_buf *frame, cql_response **out);
/* Subscribes to server events ("TOPOLOGY_CHANGE", "STATUS_CHANGE", "SCHEMA_CHANGE"). */
int cql_conn_register(cql_conn *c, const char *const *events, uint16_t n);

/* ---------------------------------------------------------------- statements */

int cql_query(cql_conn *c, const char *query, const cql_query_params *p, cql_response **out);
int cql_query_async(cql_conn *c, const char *query, const cql_query_params *p, cql_done_fn done,
                    void *ud);

/* Prepares a statement, or returns the one this connection already prepared for the
 * same text. The handle belongs to the connection (freed by cql_conn_close). On a
 * server error returns its status and, if err_out is given, the ERROR response. */
int cql_prepare(cql_conn *c, const char *query, cql_prepared **out, cql_response **err_out);
const cql_meta *cql_prepared_binds(const cql_prepared *p);  /* bind markers */
const cql_meta *cql_prepared_result(const cql_prepared *p); /* result columns, maybe empty */
const char *cql_prepared_query(const cql_prepared *p);

/* Executes a prepared statement. If the node answers UNPREPARED (it restarted or
 * evicted the statement), the statement is prepared again and the request re-sent,
 * once, transparently. */
int cql_execute(cql_conn *c, cql_prepared *p, const cql_query_params *params, cql_response **out);
int cql_execute_async(cql_conn *c, cql_prepared *p, const cql_query_params *params,
                      cql_done_fn done, void *ud);

typedef struct cql_batch_item {
    cql_prepared *stmt; /* a prepared statement, or NULL and query set */
    const char *query;
    const cql_bytes *values;
    uint16_t nvalues;
} cql_batch_item;

/* A BATCH (CQL_BATCH_UNLOGGED for bucketdb's per-partition writes), re-preparing
 * on UNPREPARED as for EXECUTE (each statement at most once). */
int cql_batch(cql_conn *c, uint8_t type, const cql_batch_item *items, uint16_t n,
              uint16_t consistency, cql_response **out);
int cql_batch_async(cql_conn *c, uint8_t type, const cql_batch_item *items, uint16_t n,
                    uint16_t consistency, cql_done_fn done, void *ud);

/* Runs a query (prepared if p is given, else query) and calls page_fn for each page
 * of rows, following the paging state until the last page or until page_fn returns
 * non-zero. params->page_size <= 0 means 5000. On a server error returns its status
 * and, if err_out is given, the ERROR response. */
typedef int (*cql_page_fn)(void *ud, const cql_response *page);
int cql_query_paged(cql_conn *c, const char *query, cql_prepared *p, const cql_query_params *params,
                    cql_page_fn page_fn, void *ud, cql_response **err_out);

#endif
