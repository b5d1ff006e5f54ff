/* cql_io: the byte stream under one CQL connection: a non-blocking TCP socket,
 * optionally with TLS over it (OpenSSL).
 *
 * A cql_tls is a client TLS context built once from files (CA, client certificate
 * and key) and shared by every connection of a session (an SSL_CTX is safe to use
 * from many threads once built). With TLS the node's certificate is verified by
 * default: chain to the CA file (or the system's CAs when none is given) and the
 * name dialled (an IP SAN for an address, a DNS name and SNI otherwise).
 * `insecure` skips the verification: the traffic is encrypted but anyone on the
 * path can pose as the node.
 *
 * Threads: one reader thread (cql_io_read_some) and any number of writers that
 * serialize among themselves (the connection's send lock) may use one cql_io at
 * once. An SSL object is not safe for a concurrent SSL_read and SSL_write, so each
 * OpenSSL call on it runs under the cql_io's own mutex; sockets are non-blocking,
 * so the mutex is held only for the call itself, never across a wait.
 *
 * With TLS, a write to a connection the peer closed raises SIGPIPE (OpenSSL writes
 * with write(2)): the process must ignore SIGPIPE (bucketdb serve and cql do).
 *
 * Errors: BDB_ERR_IO (connection refused, lost or closed, handshake failure),
 * BDB_ERR_AGAIN (timed out), BDB_ERR_INVALID (a file that does not load, a
 * certificate the verification rejects), BDB_ERR_NOMEM. Messages name host:port and
 * OpenSSL's reason. */
#ifndef BDB_CQL_IO_H
#define BDB_CQL_IO_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct cql_tls_opts {
    int enabled;
    const char *ca_file;   /* PEM CA certificates the node's chain must end in; NULL or
                              "": the system's default CAs */
    const char *cert_file; /* PEM client certificate (chain) for client authentication */
    const char *key_file;  /* its PEM private key; NULL or "": in cert_file */
    int insecure;          /* 1: do not verify the node's certificate (insecure) */
} cql_tls_opts;

typedef struct cql_tls cql_tls;

/* Builds the context: loads and checks the files. BDB_ERR_INVALID with the file and
 * OpenSSL's reason in err. */
int cql_tls_new(const cql_tls_opts *o, cql_tls **out, char *err, size_t errlen);
void cql_tls_free(cql_tls *t);

typedef struct cql_io {
    int fd;
    void *ssl; /* SSL *, or NULL for plain TCP */
    pthread_mutex_t mu;
    char peer[96];     /* "host:port" for messages */
    char reason[256];  /* why the last failed read failed (OpenSSL or errno), or "" */
    char wreason[256]; /* the same for writes (the reader thread owns reason) */
} cql_io;

/* Connects to host:port (every address it resolves to, within timeout_ms) and, with
 * tls, completes the TLS handshake in the same time. On failure io is closed and
 * err says why, naming host:port. */
int cql_io_connect(cql_io *io, const char *host, int port, const cql_tls *tls, int timeout_ms,
                   char *err, size_t errlen);
/* Writes all n bytes before the monotonic deadline (ms); why it failed in wreason. */
int cql_io_write_all(cql_io *io, const uint8_t *p, size_t n, int64_t deadline);
/* Reads exactly n bytes before the deadline. */
int cql_io_read_all(cql_io *io, uint8_t *p, size_t n, int64_t deadline);
/* Reads what is there, waiting at most wait_ms for something: > 0 bytes read, 0
 * nothing yet, -1 closed by the peer or failed (reason in io->reason). */
ssize_t cql_io_read_some(cql_io *io, uint8_t *p, size_t cap, int wait_ms);
/* Shuts the socket down both ways (wakes a reader waiting in cql_io_read_some);
 * safe from any thread, any number of times. */
void cql_io_shutdown(cql_io *io);
/* Frees the TLS state and closes the socket (no thread may use io any more). */
void cql_io_close(cql_io *io);

/* ---- pure helper (exposed for tests) ---- */

/* Whether host is an IPv4 or IPv6 address literal (verified against an IP SAN, no
 * SNI) rather than a name. */
int cql_io_host_is_ip(const char *host);

#endif
