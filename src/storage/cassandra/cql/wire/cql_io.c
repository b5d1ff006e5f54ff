/* cql_io: TCP and TLS transport of a CQL connection (see cql_io.h).
 *
 * Every wait is a poll bounded by a deadline or by the caller's wait; the OpenSSL
 * calls themselves never block (the socket is non-blocking), which is what makes one
 * mutex around them enough for a reader thread and a writer to share an SSL. */
#include "storage/cassandra/cql/wire/cql_io.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct cql_tls {
    SSL_CTX *ctx;
    int insecure;
};

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* OpenSSL's reason for the oldest error queued on this thread (the root cause),
 * then clears the queue. */
static void ssl_reason(char *out, size_t len, const char *fallback)
{
    unsigned long e = ERR_get_error();
    if (!e) {
        snprintf(out, len, "%s", fallback);
    } else {
        const char *r = ERR_reason_error_string(e);
        if (r)
            snprintf(out, len, "%s", r);
        else
            ERR_error_string_n(e, out, len);
    }
    ERR_clear_error();
}

/* ================================================================ context */

/* OpenSSL reports a missing file as a system-library error code: say it plainly. */
static int unreadable(const char *what, const char *file, char *err, size_t errlen)
{
    FILE *f = fopen(file, "r");
    if (f) {
        fclose(f);
        return 0;
    }
    set_err(err, errlen, "TLS: cannot open the %s %s: %s", what, file, strerror(errno));
    return 1;
}

int cql_tls_new(const cql_tls_opts *o, cql_tls **out, char *err, size_t errlen)
{
    *out = NULL;
    char why[256];
    ERR_clear_error();
    cql_tls *t = calloc(1, sizeof *t);
    if (!t)
        return BDB_ERR_NOMEM;
    t->insecure = o->insecure;
    t->ctx = SSL_CTX_new(TLS_client_method());
    if (!t->ctx) {
        ssl_reason(why, sizeof why, "unknown");
        set_err(err, errlen, "cannot create a TLS context: %s", why);
        free(t);
        return BDB_ERR_NOMEM;
    }
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(t->ctx, o->insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
    /* A write that returned WANT_WRITE is retried from the same frame, which is not
     * moved meanwhile; partial writes let a big frame go out as the socket drains. */
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* TLS 1.2 renegotiation would make a write wait for the reader thread's reads. */
    SSL_CTX_set_options(t->ctx, SSL_OP_NO_RENEGOTIATION);
    int rc = BDB_OK;
    if (o->ca_file && o->ca_file[0]) {
        if (unreadable("CA file", o->ca_file, err, errlen)) {
            rc = BDB_ERR_INVALID;
        } else if (SSL_CTX_load_verify_locations(t->ctx, o->ca_file, NULL) != 1) {
            ssl_reason(why, sizeof why, "no certificate in it");
            set_err(err, errlen, "TLS: cannot load the CA file %s: %s", o->ca_file, why);
            rc = BDB_ERR_INVALID;
        }
    } else if (!o->insecure && SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
        ssl_reason(why, sizeof why, "unknown");
        set_err(err, errlen, "TLS: cannot load the system's CA certificates: %s", why);
        rc = BDB_ERR_INVALID;
    }
    int has_cert = o->cert_file && o->cert_file[0], has_key = o->key_file && o->key_file[0];
    if (rc == BDB_OK && has_key && !has_cert) {
        set_err(err, errlen, "TLS: a client key (%s) needs its certificate file", o->key_file);
        rc = BDB_ERR_INVALID;
    }
    if (rc == BDB_OK && has_cert) {
        const char *key = has_key ? o->key_file : o->cert_file;
        if (unreadable("client certificate", o->cert_file, err, errlen) ||
            unreadable("client key", key, err, errlen)) {
            rc = BDB_ERR_INVALID;
        } else if (SSL_CTX_use_certificate_chain_file(t->ctx, o->cert_file) != 1) {
            ssl_reason(why, sizeof why, "unknown");
            set_err(err, errlen, "TLS: cannot load the client certificate %s: %s", o->cert_file,
                    why);
            rc = BDB_ERR_INVALID;
        } else if (SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM) != 1) {
            ssl_reason(why, sizeof why, "unknown");
            set_err(err, errlen, "TLS: cannot load the client key %s: %s", key, why);
            rc = BDB_ERR_INVALID;
        } else if (SSL_CTX_check_private_key(t->ctx) != 1) {
            ssl_reason(why, sizeof why, "unknown");
            set_err(err, errlen, "TLS: the client key %s does not match the certificate %s: %s",
                    key, o->cert_file, why);
            rc = BDB_ERR_INVALID;
        }
    }
    if (rc != BDB_OK) {
        cql_tls_free(t);
        return rc;
    }
    *out = t;
    return BDB_OK;
}

void cql_tls_free(cql_tls *t)
{
    if (!t)
        return;
    SSL_CTX_free(t->ctx);
    free(t);
}

/* ================================================================ TCP */

int cql_io_host_is_ip(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    return inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1;
}

static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - bdb_monotonic_ms();
        if (left <= 0)
            return BDB_ERR_AGAIN;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, left > 1000 ? 1000 : (int)left);
        if (n > 0)
            return BDB_OK;
        if (n < 0 && errno != EINTR)
            return BDB_ERR_IO;
    }
}

static int tcp_connect(const char *host, int port, int64_t deadline, int *out, char *err,
                       size_t errlen)
{
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *ai, *a;
    int g = getaddrinfo(host, portstr, &hints, &ai);
    if (g != 0) {
        set_err(err, errlen, "cannot resolve %s: %s", host, gai_strerror(g));
        return BDB_ERR_IO;
    }
    int rc = BDB_ERR_IO, saved = 0;
    for (a = ai; a; a = a->ai_next) {
        int fd =
            socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        int r = connect(fd, a->ai_addr, a->ai_addrlen);
        if (r < 0 && errno == EINPROGRESS) {
            rc = wait_fd(fd, POLLOUT, deadline);
            if (rc == BDB_OK) {
                int soerr = 0;
                socklen_t sl = sizeof soerr;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
                r = soerr ? -1 : 0;
                errno = soerr;
            } else {
                r = -1;
                errno = rc == BDB_ERR_AGAIN ? ETIMEDOUT : errno;
            }
        }
        if (r == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
            *out = fd;
            freeaddrinfo(ai);
            return BDB_OK;
        }
        saved = errno;
        close(fd);
    }
    freeaddrinfo(ai);
    set_err(err, errlen, "cannot connect to %s:%d: %s", host, port, strerror(saved));
    return saved == ETIMEDOUT ? BDB_ERR_AGAIN : BDB_ERR_IO;
}

/* ================================================================ TLS handshake */

static int tls_handshake(cql_io *io, const char *host, const cql_tls *tls, int64_t deadline,
                         char *err, size_t errlen)
{
    SSL *ssl = SSL_new(tls->ctx);
    if (!ssl)
        return BDB_ERR_NOMEM;
    io->ssl = ssl;
    SSL_set_fd(ssl, io->fd);
    /* The certificate must name what we dialled: an IP SAN for an address, a DNS
     * name otherwise (and only names go in SNI, RFC 6066). */
    int ip = cql_io_host_is_ip(host);
    if (!ip)
        SSL_set_tlsext_host_name(ssl, host);
    if (!tls->insecure) {
        X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
        if (ip)
            X509_VERIFY_PARAM_set1_ip_asc(vp, host);
        else
            X509_VERIFY_PARAM_set1_host(vp, host, 0);
    }
    ERR_clear_error();
    for (;;) {
        errno = 0;
        int r = SSL_connect(ssl);
        if (r == 1)
            return BDB_OK;
        int e = SSL_get_error(ssl, r);
        int saved = errno;
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            int rc = wait_fd(io->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline);
            if (rc == BDB_ERR_AGAIN) {
                set_err(err, errlen, "TLS handshake with %s timed out", io->peer);
                return rc;
            }
            if (rc != BDB_OK) {
                set_err(err, errlen, "TLS handshake with %s: %s", io->peer, strerror(errno));
                return rc;
            }
            continue;
        }
        long v = SSL_get_verify_result(ssl);
        if (v != X509_V_OK) {
            set_err(err, errlen, "TLS: the certificate of %s is not accepted: %s", io->peer,
                    X509_verify_cert_error_string(v));
            ERR_clear_error();
            return BDB_ERR_INVALID;
        }
        char why[256];
        const char *fb =
            e == SSL_ERROR_SYSCALL && saved ? strerror(saved) : "connection closed by the node";
        ssl_reason(why, sizeof why, fb);
        set_err(err, errlen,
                "TLS handshake with %s failed: %s (does the node have "
                "client_encryption_options enabled on this port?)",
                io->peer, why);
        return BDB_ERR_IO;
    }
}

int cql_io_connect(cql_io *io, const char *host, int port, const cql_tls *tls, int timeout_ms,
                   char *err, size_t errlen)
{
    memset(io, 0, sizeof *io);
    io->fd = -1;
    snprintf(io->peer, sizeof io->peer, "%s:%d", host, port);
    int64_t deadline = bdb_monotonic_ms() + timeout_ms;
    int rc = tcp_connect(host, port, deadline, &io->fd, err, errlen);
    if (rc != BDB_OK)
        return rc;
    pthread_mutex_init(&io->mu, NULL);
    if (tls)
        rc = tls_handshake(io, host, tls, deadline, err, errlen);
    if (rc != BDB_OK)
        cql_io_close(io);
    return rc;
}

void cql_io_shutdown(cql_io *io)
{
    if (io->fd >= 0)
        shutdown(io->fd, SHUT_RDWR);
}

void cql_io_close(cql_io *io)
{
    if (io->fd < 0)
        return;
    /* No close_notify: the connection is dropped as with plain TCP, and a broken
     * one could not carry it anyway. */
    if (io->ssl)
        SSL_free(io->ssl);
    io->ssl = NULL;
    close(io->fd);
    io->fd = -1;
    pthread_mutex_destroy(&io->mu);
}

/* ================================================================ reads and writes */

/* One non-blocking transfer: > 0 bytes moved, 0 would block (*want = the poll event
 * to wait for), -1 failed or closed (why in io->reason for a read, io->wreason for a
 * write: the reader thread and a writer each have their own). */
static ssize_t xfer(cql_io *io, int writing, uint8_t *p, size_t n, short *want)
{
    char *reason = writing ? io->wreason : io->reason;
    size_t rlen = sizeof io->reason;
    if (!io->ssl) {
        ssize_t r = writing ? send(io->fd, p, n, MSG_NOSIGNAL) : recv(io->fd, p, n, MSG_DONTWAIT);
        if (r > 0)
            return r;
        if (r == 0 && !writing) {
            snprintf(reason, rlen, "connection closed by the node");
            return -1;
        }
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            *want = writing ? POLLOUT : POLLIN;
            return 0;
        }
        snprintf(reason, rlen, "%s", strerror(errno));
        return -1;
    }
    int len = n > INT32_MAX ? INT32_MAX : (int)n;
    pthread_mutex_lock(&io->mu);
    ERR_clear_error();
    errno = 0;
    int r = writing ? SSL_write(io->ssl, p, len) : SSL_read(io->ssl, p, len);
    int e = r > 0 ? SSL_ERROR_NONE : SSL_get_error(io->ssl, r);
    int saved = errno;
    if (e == SSL_ERROR_SSL)
        ssl_reason(reason, rlen, "TLS error");
    else
        ERR_clear_error();
    pthread_mutex_unlock(&io->mu);
    if (r > 0)
        return r;
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        *want = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        return 0;
    }
    if (e == SSL_ERROR_SYSCALL && saved == EINTR) {
        *want = writing ? POLLOUT : POLLIN;
        return 0;
    }
    if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && !saved))
        snprintf(reason, rlen, "connection closed by the node");
    else if (e == SSL_ERROR_SYSCALL)
        snprintf(reason, rlen, "%s", strerror(saved));
    return -1;
}

/* Waits for what a transfer asked for. A TLS write that wants to read (a handshake
 * message in the way) waits at most 20 ms at a time: the reader thread may consume
 * those bytes first, and then the poll would not wake. */
static int wait_want(cql_io *io, int writing, short want, int64_t deadline)
{
    if (writing && want == POLLIN) {
        int64_t cap = bdb_monotonic_ms() + 20;
        int rc = wait_fd(io->fd, POLLIN, cap < deadline ? cap : deadline);
        if (rc == BDB_ERR_AGAIN && bdb_monotonic_ms() < deadline)
            return BDB_OK;
        return rc;
    }
    return wait_fd(io->fd, want, deadline);
}

static int xfer_all(cql_io *io, int writing, uint8_t *p, size_t n, int64_t deadline)
{
    (writing ? io->wreason : io->reason)[0] = '\0';
    while (n > 0) {
        short want = 0;
        ssize_t r = xfer(io, writing, p, n, &want);
        if (r > 0) {
            p += r;
            n -= (size_t)r;
            continue;
        }
        if (r < 0)
            return BDB_ERR_IO;
        int rc = wait_want(io, writing, want, deadline);
        if (rc != BDB_OK)
            return rc;
    }
    return BDB_OK;
}

int cql_io_write_all(cql_io *io, const uint8_t *p, size_t n, int64_t deadline)
{
    return xfer_all(io, 1, (uint8_t *)p, n, deadline);
}

int cql_io_read_all(cql_io *io, uint8_t *p, size_t n, int64_t deadline)
{
    return xfer_all(io, 0, p, n, deadline);
}

ssize_t cql_io_read_some(cql_io *io, uint8_t *p, size_t cap, int wait_ms)
{
    /* Try first: TLS may hold decrypted bytes the socket no longer signals. */
    short want = 0;
    ssize_t r = xfer(io, 0, p, cap, &want);
    if (r != 0)
        return r;
    struct pollfd pf = {.fd = io->fd, .events = want};
    int n = poll(&pf, 1, wait_ms);
    if (n < 0 && errno != EINTR) {
        snprintf(io->reason, sizeof io->reason, "%s", strerror(errno));
        return -1;
    }
    if (n <= 0)
        return 0;
    return xfer(io, 0, p, cap, &want);
}
