/* mqtt_net: the gateway's connection to a broker, plain TCP or TLS (mqtts://) with
 * OpenSSL. Sockets are non-blocking; every wait is a poll with a bound, so a stuck
 * broker costs a reconnect, never a hung thread. */
#include "server/mqtt/mqtt_gw_int.h"

#include "common/log.h"
#include "common/timeutil.h"
#include "server/server_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CONNECT_TIMEOUT_MS 5000
#define SEND_TIMEOUT_MS 10000

static void log_ssl_errors(const char *what, const char *who)
{
    unsigned long e = ERR_get_error();
    char buf[256] = "no detail";
    if (e)
        ERR_error_string_n(e, buf, sizeof buf);
    BDB_ERROR("mqtt: %s %s: %s", what, who, buf);
    ERR_clear_error();
}

int mq_tls_init(struct bdb_mqtt_gw *g)
{
    const bdb_config *cfg = &g->s->cfg;
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) {
        log_ssl_errors("cannot create the TLS context", "");
        return -1;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    int ok = cfg->mqtt_ca_file[0] ? SSL_CTX_load_verify_locations(ctx, cfg->mqtt_ca_file, NULL)
                                  : SSL_CTX_set_default_verify_paths(ctx);
    if (ok != 1) {
        log_ssl_errors("cannot load the CA certificates of mqtt_ca_file", cfg->mqtt_ca_file);
        SSL_CTX_free(ctx);
        return -1;
    }
    if (cfg->mqtt_cert_file[0] || cfg->mqtt_key_file[0]) {
        const char *key = cfg->mqtt_key_file[0] ? cfg->mqtt_key_file : cfg->mqtt_cert_file;
        if (SSL_CTX_use_certificate_chain_file(ctx, cfg->mqtt_cert_file) != 1) {
            log_ssl_errors("cannot load mqtt_cert_file", cfg->mqtt_cert_file);
            SSL_CTX_free(ctx);
            return -1;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(ctx) != 1) {
            log_ssl_errors("cannot load the client key (or it does not match the certificate)",
                           key);
            SSL_CTX_free(ctx);
            return -1;
        }
    }
    g->ssl_ctx = ctx;
    return 0;
}

void mq_tls_free(struct bdb_mqtt_gw *g)
{
    if (g->ssl_ctx)
        SSL_CTX_free(g->ssl_ctx);
    g->ssl_ctx = NULL;
}

static int tcp_connect(mq_client *c)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int e = getaddrinfo(c->host, c->port, &hints, &res);
    if (e != 0) {
        BDB_WARN("mqtt: cannot resolve %s: %s", c->host, gai_strerror(e));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
            close(fd);
            fd = -1;
            continue;
        }
        struct pollfd pf = {fd, POLLOUT, 0};
        int err = 0;
        socklen_t el = sizeof err;
        if (poll(&pf, 1, CONNECT_TIMEOUT_MS) != 1 ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

/* Waits for what OpenSSL asked for (r = SSL_get_error result): 1 ready, 0 timeout
 * or stop, -1 a real error. */
static int ssl_wait(mq_client *c, int r, int timeout_ms)
{
    short ev;
    if (r == SSL_ERROR_WANT_READ)
        ev = POLLIN;
    else if (r == SSL_ERROR_WANT_WRITE)
        ev = POLLOUT;
    else
        return -1;
    struct pollfd pf = {c->fd, ev, 0};
    return poll(&pf, 1, timeout_ms) > 0 ? 1 : 0;
}

static int tls_handshake(mq_client *c)
{
    SSL *ssl = SSL_new(c->g->ssl_ctx);
    if (!ssl)
        return -1;
    c->ssl = ssl;
    SSL_set_fd(ssl, c->fd);
    /* The certificate must name the host we dialled: an IP SAN for an address, a DNS
     * name (and SNI) otherwise. */
    struct in6_addr a6;
    struct in_addr a4;
    X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
    if (inet_pton(AF_INET, c->host, &a4) == 1 || inet_pton(AF_INET6, c->host, &a6) == 1) {
        X509_VERIFY_PARAM_set1_ip_asc(vp, c->host);
    } else {
        SSL_set_tlsext_host_name(ssl, c->host);
        X509_VERIFY_PARAM_set1_host(vp, c->host, 0);
    }
    int64_t deadline = bdb_monotonic_ms() + CONNECT_TIMEOUT_MS;
    for (;;) {
        int r = SSL_connect(ssl);
        if (r == 1)
            return 0;
        int e = SSL_get_error(ssl, r);
        int64_t left = deadline - bdb_monotonic_ms();
        if ((e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) || left <= 0) {
            long v = SSL_get_verify_result(ssl);
            if (v != X509_V_OK)
                BDB_ERROR("mqtt: TLS to %s: certificate not accepted: %s", c->name,
                          X509_verify_cert_error_string(v));
            else
                log_ssl_errors("TLS handshake failed with", c->name);
            return -1;
        }
        if (ssl_wait(c, e, (int)(left < 200 ? left : 200)) < 0)
            return -1;
        if (atomic_load(&c->g->stop))
            return -1;
    }
}

int mq_connect(mq_client *c)
{
    c->fd = tcp_connect(c);
    c->ssl = NULL;
    if (c->fd < 0)
        return -1;
    if (c->tls && tls_handshake(c) != 0) {
        mq_close(c);
        return -1;
    }
    return 0;
}

void mq_close(mq_client *c)
{
    if (c->ssl) {
        SSL_free(c->ssl); /* no close_notify: the MQTT DISCONNECT said goodbye */
        c->ssl = NULL;
    }
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

int mq_flush(mq_client *c)
{
    size_t off = 0;
    int64_t deadline = bdb_monotonic_ms() + SEND_TIMEOUT_MS;
    while (off < c->wbuf.len) {
        short ev = POLLOUT;
        if (c->ssl) {
            int n = SSL_write(c->ssl, c->wbuf.data + off, (int)(c->wbuf.len - off));
            if (n > 0) {
                off += (size_t)n;
                continue;
            }
            int e = SSL_get_error(c->ssl, n);
            if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
                return -1;
            ev = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        } else {
            ssize_t n = send(c->fd, c->wbuf.data + off, c->wbuf.len - off, MSG_NOSIGNAL);
            if (n > 0) {
                off += (size_t)n;
                continue;
            }
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                return -1;
        }
        if (bdb_monotonic_ms() > deadline)
            return -1;
        struct pollfd pf = {c->fd, ev, 0};
        poll(&pf, 1, 100);
    }
    bdb_buf_reset(&c->wbuf);
    c->last_sent = bdb_monotonic_ms();
    return 0;
}

int mq_read(mq_client *c, int timeout_ms)
{
    uint8_t tmp[65536];
    if (!c->ssl || SSL_pending(c->ssl) == 0) {
        struct pollfd pf = {c->fd, POLLIN, 0};
        int pr = poll(&pf, 1, timeout_ms);
        if (pr < 0)
            return errno == EINTR ? 0 : -1;
        if (pr == 0)
            return 0;
    }
    if (c->ssl) {
        int n = SSL_read(c->ssl, tmp, sizeof tmp);
        if (n > 0) {
            bdb_buf_append(&c->rbuf, tmp, (size_t)n);
            return 1;
        }
        int e = SSL_get_error(c->ssl, n);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            return 0;
        if (e != SSL_ERROR_ZERO_RETURN)
            log_ssl_errors("TLS read failed from", c->name);
        else
            BDB_WARN("mqtt: broker %s closed the connection", c->name);
        return -1;
    }
    ssize_t n = recv(c->fd, tmp, sizeof tmp, 0);
    if (n == 0) {
        BDB_WARN("mqtt: broker %s closed the connection", c->name);
        return -1;
    }
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    bdb_buf_append(&c->rbuf, tmp, (size_t)n);
    return 1;
}

int mq_sleep(struct bdb_mqtt_gw *g, int64_t ms)
{
    int64_t end = bdb_monotonic_ms() + ms;
    while (!atomic_load(&g->stop)) {
        int64_t left = end - bdb_monotonic_ms();
        if (left <= 0)
            return 0;
        usleep((useconds_t)(left < 100 ? left : 100) * 1000);
    }
    return -1;
}

int mq_keepalive(mq_client *c)
{
    if (bdb_monotonic_ms() - c->last_sent < MQ_KEEPALIVE_S * 1000 / 2)
        return 0;
    bdb_mqtt_encode_pingreq(&c->wbuf);
    return mq_flush(c);
}
