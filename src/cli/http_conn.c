/* http_conn: keep-alive HTTP/1.1 client (see http_conn.h). */
#include "cli/http_conn.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define MAX_HEADER 65536
#define MAX_KEPT_BODY (1u << 20)

int cli_conn_init(cli_conn *c, const char *server, int timeout_s)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->timeout_s = timeout_s > 0 ? timeout_s : 60;
    snprintf(c->host, sizeof c->host, "127.0.0.1");
    snprintf(c->port, sizeof c->port, "8086");
    const char *p = server ? server : "";
    if (!strncmp(p, "http://", 7))
        p += 7;
    else if (strstr(p, "://")) {
        snprintf(c->err, sizeof c->err, "server '%s': only http:// is supported", server);
        return -1;
    }
    size_t hl = strcspn(p, ":/");
    if (hl >= sizeof c->host) {
        snprintf(c->err, sizeof c->err, "server '%s': host name too long", server);
        return -1;
    }
    if (hl) {
        memcpy(c->host, p, hl);
        c->host[hl] = '\0';
    }
    if (p[hl] == ':') {
        size_t pl = strcspn(p + hl + 1, "/");
        if (pl == 0 || pl >= sizeof c->port) {
            snprintf(c->err, sizeof c->err, "server '%s': bad port", server);
            return -1;
        }
        memcpy(c->port, p + hl + 1, pl);
        c->port[pl] = '\0';
    }
    return 0;
}

void cli_conn_close(cli_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->reused = 0;
    c->rpos = c->rlen = 0;
}

void cli_resp_init(cli_resp *r)
{
    memset(r, 0, sizeof *r);
    r->retry_after = -1;
    bdb_buf_init(&r->body);
}

void cli_resp_free(cli_resp *r)
{
    bdb_buf_free(&r->body);
}

static int do_connect(cli_conn *c)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    int rc = getaddrinfo(c->host, c->port, &hints, &ai);
    if (rc != 0) {
        snprintf(c->err, sizeof c->err, "cannot resolve %.100s:%.15s: %s", c->host, c->port,
                 gai_strerror(rc));
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd >= 0) {
        struct timeval tv = {.tv_sec = c->timeout_s};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        snprintf(c->err, sizeof c->err, "cannot connect to %.100s:%.15s: %s", c->host, c->port,
                 strerror(errno));
        freeaddrinfo(ai);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    freeaddrinfo(ai);
    c->fd = fd;
    c->reused = 0;
    c->rpos = c->rlen = 0;
    return 0;
}

static int write_all(cli_conn *c, const void *p, size_t n)
{
    const char *s = p;
    while (n) {
        ssize_t w = send(c->fd, s, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            snprintf(c->err, sizeof c->err, "send to %.100s:%.15s failed: %s", c->host, c->port,
                     w < 0 ? strerror(errno) : "connection closed");
            return -1;
        }
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Refills rbuf; returns bytes available, 0 at EOF, -1 on error. */
static ssize_t fill(cli_conn *c)
{
    if (c->rpos < c->rlen)
        return (ssize_t)(c->rlen - c->rpos);
    for (;;) {
        ssize_t n = recv(c->fd, c->rbuf, sizeof c->rbuf, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(c->err, sizeof c->err, "read from %.100s:%.15s failed: %s", c->host, c->port,
                     errno == EAGAIN || errno == EWOULDBLOCK ? "timed out" : strerror(errno));
            return -1;
        }
        c->rpos = 0;
        c->rlen = (size_t)n;
        return n;
    }
}

/* Reads one CRLF-terminated line (without it) into line; -1 on error or EOF. */
static int read_line(cli_conn *c, bdb_buf *line)
{
    bdb_buf_reset(line);
    for (;;) {
        ssize_t n = fill(c);
        if (n <= 0) {
            if (n == 0)
                snprintf(c->err, sizeof c->err, "connection closed by %.100s:%.15s", c->host,
                         c->port);
            return -1;
        }
        char *nl = memchr(c->rbuf + c->rpos, '\n', (size_t)n);
        size_t take = nl ? (size_t)(nl - (c->rbuf + c->rpos)) + 1 : (size_t)n;
        bdb_buf_append(line, c->rbuf + c->rpos, take);
        c->rpos += take;
        if (line->len > MAX_HEADER) {
            snprintf(c->err, sizeof c->err, "response header longer than %d bytes", MAX_HEADER);
            return -1;
        }
        if (nl) {
            while (line->len &&
                   (line->data[line->len - 1] == '\n' || line->data[line->len - 1] == '\r'))
                line->len--;
            bdb_buf_putc(line, 0);
            line->len--;
            return 0;
        }
    }
}

struct body_out {
    cli_resp *r;
    cli_sink sink;
    void *ctx;
    int stopped;
};

static void deliver(struct body_out *o, const char *p, size_t n)
{
    if (o->stopped || n == 0)
        return;
    if (o->sink) {
        if (o->sink(o->ctx, p, n))
            o->stopped = 1;
        return;
    }
    if (o->r->body.len < MAX_KEPT_BODY) {
        size_t room = MAX_KEPT_BODY - o->r->body.len;
        bdb_buf_append(&o->r->body, p, n < room ? n : room);
    }
}

/* Passes up to want bytes (or everything until EOF when want < 0) to o. */
static int read_body(cli_conn *c, long long want, struct body_out *o)
{
    while (want != 0 && !o->stopped) {
        ssize_t n = fill(c);
        if (n < 0)
            return -1;
        if (n == 0) {
            if (want < 0)
                return 0;
            snprintf(c->err, sizeof c->err, "connection closed in the middle of a response");
            return -1;
        }
        size_t take = want >= 0 && (long long)n > want ? (size_t)want : (size_t)n;
        deliver(o, c->rbuf + c->rpos, take);
        c->rpos += take;
        if (want > 0)
            want -= (long long)take;
    }
    return 0;
}

static int read_chunked(cli_conn *c, struct body_out *o)
{
    bdb_buf line;
    bdb_buf_init(&line);
    int rc = -1;
    for (;;) {
        if (read_line(c, &line) != 0)
            break;
        char *end;
        long long n = strtoll((char *)line.data, &end, 16);
        if (end == (char *)line.data || n < 0) {
            snprintf(c->err, sizeof c->err, "bad chunk size in response");
            break;
        }
        if (n == 0) { /* trailers up to the empty line */
            while (read_line(c, &line) == 0 && line.len)
                ;
            rc = 0;
            break;
        }
        if (read_body(c, n, o) != 0 || o->stopped || read_line(c, &line) != 0)
            break;
    }
    bdb_buf_free(&line);
    return o->stopped ? 0 : rc;
}

static int once(cli_conn *c, const bdb_buf *req, const void *body, size_t len, int head,
                cli_sink sink, void *ctx, cli_resp *r, int *got_any)
{
    *got_any = 0;
    if (c->fd < 0 && do_connect(c) != 0)
        return -1;
    if (write_all(c, req->data, req->len) != 0 || (len && write_all(c, body, len) != 0))
        return -1;
    bdb_buf line;
    bdb_buf_init(&line);
    int rc = -1;
    if (read_line(c, &line) != 0)
        goto out;
    *got_any = 1;
    r->status = 0;
    sscanf((char *)line.data, "HTTP/%*s %d", &r->status);
    if (r->status < 100) {
        snprintf(c->err, sizeof c->err, "not an HTTP response: %.60s", (char *)line.data);
        goto out;
    }
    long long clen = -1;
    int chunked = 0, close_after = 0;
    for (;;) {
        if (read_line(c, &line) != 0)
            goto out;
        if (line.len == 0)
            break;
        char *k = (char *)line.data, *v = strchr(k, ':');
        if (!v)
            continue;
        *v++ = '\0';
        v += strspn(v, " \t");
        if (!strcasecmp(k, "Content-Length"))
            clen = strtoll(v, NULL, 10);
        else if (!strcasecmp(k, "Transfer-Encoding") && strcasestr(v, "chunked"))
            chunked = 1;
        else if (!strcasecmp(k, "Connection") && strcasestr(v, "close"))
            close_after = 1;
        else if (!strcasecmp(k, "Retry-After"))
            r->retry_after = atoi(v);
    }
    struct body_out o = {r, r->status >= 200 && r->status < 300 ? sink : NULL, ctx, 0};
    if (head || r->status == 204 || r->status == 304 || (r->status >= 100 && r->status < 200))
        rc = 0;
    else if (chunked)
        rc = read_chunked(c, &o);
    else if (clen >= 0)
        rc = read_body(c, clen, &o);
    else {
        rc = read_body(c, -1, &o);
        close_after = 1;
    }
    if (o.stopped)
        close_after = 1;
    if (rc == 0 && close_after)
        cli_conn_close(c);
    else if (rc == 0)
        c->reused = 1;
out:
    bdb_buf_free(&line);
    return rc;
}

int cli_conn_request(cli_conn *c, const char *method, const char *path, const char *token,
                     const char *ctype, const void *body, size_t len, cli_sink sink, void *ctx,
                     cli_resp *r)
{
    bdb_buf req;
    bdb_buf_init(&req);
    bdb_buf_printf(&req, "%s %s HTTP/1.1\r\nHost: %.100s:%.15s\r\n", method, path, c->host,
                   c->port);
    if (token && *token)
        bdb_buf_printf(&req, "Authorization: Token %s\r\n", token);
    if (body || !strcmp(method, "POST") || !strcmp(method, "PUT"))
        bdb_buf_printf(&req, "Content-Type: %s\r\nContent-Length: %zu\r\n",
                       ctype ? ctype : "application/octet-stream", len);
    bdb_buf_puts(&req, "\r\n");
    int head = !strcmp(method, "HEAD");
    bdb_buf_reset(&r->body);
    r->status = 0;
    r->retry_after = -1;
    int got_any, was_reused = c->fd >= 0 && c->reused;
    int rc = once(c, &req, body, len, head, sink, ctx, r, &got_any);
    if (rc != 0) {
        cli_conn_close(c);
        /* A kept-alive connection the server closed meanwhile: nothing was answered,
         * so send the request once more on a fresh connection. */
        if (was_reused && !got_any)
            rc = once(c, &req, body, len, head, sink, ctx, r, &got_any);
        if (rc != 0)
            cli_conn_close(c);
    }
    bdb_buf_free(&req);
    return rc;
}
