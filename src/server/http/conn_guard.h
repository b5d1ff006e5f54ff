/* conn_guard: deadlines for slow HTTP clients (docs/API.md#slow-clients).
 *
 * libmicrohttpd's connection timeout is an idle timeout: any byte received restarts
 * it, so a client sending a header byte a second holds its connection, and its
 * thread, for ever. Like nginx's client_header_timeout and Apache's mod_reqtimeout,
 * the guard gives a request's line and headers a fixed time from the moment the
 * connection opened or its previous response was sent, and its body that time plus
 * one second per `min_rate` bytes received. A watchdog thread shuts down the socket
 * of a connection past its deadline; libmicrohttpd's connection thread then sees the
 * end of the stream and closes the connection as it would for a client that left.
 * The response phase has no deadline here (libmicrohttpd's idle timeout applies).
 *
 * The connection callbacks run on libmicrohttpd's threads; every call takes the
 * guard's one mutex, which also orders a shutdown before the socket's close
 * (conn_guard_close runs before libmicrohttpd closes the descriptor). */
#ifndef BDB_CONN_GUARD_H
#define BDB_CONN_GUARD_H

#include <stddef.h>
#include <stdint.h>

typedef struct bdb_conn_guard bdb_conn_guard;
typedef struct bdb_guarded bdb_guarded;

/* header_ms > 0; min_rate in bytes per second, 0 = no body deadline. NULL when the
 * watchdog thread cannot start. */
bdb_conn_guard *bdb_conn_guard_start(int64_t header_ms, uint64_t min_rate);
void bdb_conn_guard_stop(bdb_conn_guard *g); /* NULL is fine */

/* A new connection on socket fd, waiting for its first request; NULL when out of
 * memory (that connection is then not guarded). */
bdb_guarded *bdb_conn_guard_open(bdb_conn_guard *g, int fd);
/* The connection is closing (before its socket is closed); frees it. */
void bdb_conn_guard_close(bdb_conn_guard *g, bdb_guarded *c);
/* A request's headers are complete: its body's deadline starts. */
void bdb_conn_guard_body_start(bdb_conn_guard *g, bdb_guarded *c);
/* n more body bytes arrived. */
void bdb_conn_guard_body_bytes(bdb_conn_guard *g, bdb_guarded *c, size_t n);
/* The request is complete and being answered: no deadline until it is sent. */
void bdb_conn_guard_answering(bdb_conn_guard *g, bdb_guarded *c);
/* The response was sent: the next request's headers have header_ms from now. */
void bdb_conn_guard_idle(bdb_conn_guard *g, bdb_guarded *c);

/* Connections closed for missing a deadline, since start. */
uint64_t bdb_conn_guard_closed(const bdb_conn_guard *g);

#endif
