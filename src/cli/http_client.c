#include "cli/http_client.h"

#include "cli/cli.h"
#include "common/buf.h"

#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void cli_url_escape(bdb_buf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("-_.~,:", c)) {
            bdb_buf_putc(b, c);
        } else {
            bdb_buf_putc(b, '%');
            bdb_buf_putc(b, (uint8_t)hex[c >> 4]);
            bdb_buf_putc(b, (uint8_t)hex[c & 15]);
        }
    }
}

static int connect_to(const char *prog, const char *server, char *host, size_t hostlen, char *port,
                      size_t portlen)
{
    const char *p = server;
    if (!strncmp(p, "http://", 7))
        p += 7;
    const char *colon = strrchr(p, ':'), *slash = strchr(p, '/');
    size_t hl = colon ? (size_t)(colon - p) : slash ? (size_t)(slash - p) : strlen(p);
    if (hl && hl < hostlen) {
        memcpy(host, p, hl);
        host[hl] = '\0';
    }
    if (colon)
        snprintf(port, portlen, "%.*s", (int)strcspn(colon + 1, "/"), colon + 1);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, port, &hints, &ai) != 0) {
        fprintf(stderr, "bucketdb %s: cannot resolve %s:%s\n", prog, host, port);
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        fprintf(stderr, "bucketdb %s: cannot connect to %s:%s\n", prog, host, port);
        freeaddrinfo(ai);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    freeaddrinfo(ai);
    return fd;
}

int cli_http(const char *prog, const char *server, const char *method, const char *path,
             const char *token, const char *body)
{
    char host[256] = "127.0.0.1", port[16] = "8086";
    int fd = connect_to(prog, server, host, sizeof host, port, sizeof port);
    if (fd < 0)
        return BDB_EXIT_FAIL;
    bdb_buf req;
    bdb_buf_init(&req);
    bdb_buf_printf(&req, "%s %s HTTP/1.0\r\nHost: %s:%s\r\n", method, path, host, port);
    if (token)
        bdb_buf_printf(&req, "Authorization: Token %s\r\n", token);
    if (body)
        bdb_buf_printf(&req, "Content-Type: application/json\r\nContent-Length: %zu\r\n",
                       strlen(body));
    bdb_buf_puts(&req, "\r\n");
    if (body)
        bdb_buf_puts(&req, body);
    size_t off = 0;
    while (off < req.len) {
        ssize_t n = write(fd, req.data + off, req.len - off);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    bdb_buf_free(&req);
    /* Read the header, then stream the body (an export can be large). */
    bdb_buf hdr;
    bdb_buf_init(&hdr);
    char buf[65536];
    int status = 0, in_body = 0, last = '\n';
    FILE *out = stdout;
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
        if (in_body) {
            fwrite(buf, 1, (size_t)n, out);
            last = buf[n - 1];
            continue;
        }
        bdb_buf_append(&hdr, buf, (size_t)n);
        bdb_buf_putc(&hdr, 0);
        hdr.len--;
        char *end = strstr((char *)hdr.data, "\r\n\r\n");
        if (!end)
            continue;
        sscanf((char *)hdr.data, "HTTP/%*s %d", &status);
        in_body = 1;
        out = status >= 400 ? stderr : stdout;
        size_t body_off = (size_t)(end + 4 - (char *)hdr.data);
        if (hdr.len > body_off) {
            fwrite(hdr.data + body_off, 1, hdr.len - body_off, out);
            last = hdr.data[hdr.len - 1];
        }
    }
    close(fd);
    bdb_buf_free(&hdr);
    if (in_body && last != '\n')
        fputc('\n', out);
    fflush(stdout);
    if (status == 0) {
        fprintf(stderr, "bucketdb %s: no HTTP response\n", prog);
        return BDB_EXIT_FAIL;
    }
    return status >= 400 ? BDB_EXIT_FAIL : BDB_EXIT_OK;
}
