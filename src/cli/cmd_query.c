/* query: reads from a running server over HTTP (the data directory is locked by the
 * server, and going through the API keeps one code path for every reader). */
#include "cli/cli.h"

#include "common/buf.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void help(void)
{
    printf("usage: bucketdb query --device ID [options]\n"
           "       bucketdb query --devices [options]\n"
           "       bucketdb query --export [options]\n\n"
           "Reads from a running server.\n\n"
           "  --server URL      server address (default http://127.0.0.1:8086)\n"
           "  --tenant NAME     tenant (default: the server's default tenant)\n"
           "  --token TOKEN     token, when the server requires one\n"
           "  --device ID       device to read\n"
           "  --metric LIST     comma-separated metric names (default: all)\n"
           "  --from TIME       RFC 3339 or Unix ms (default: 1 hour ago)\n"
           "  --to TIME         RFC 3339 or Unix ms (default: now)\n"
           "  --limit N         at most N samples\n"
           "  --order asc|desc  time order (default asc)\n"
           "  --format json|csv output format (default json)\n"
           "  --devices         list the tenant's devices instead\n"
           "  --export          stream samples as line protocol instead\n\n"
           "Exit codes: 0 success, 1 server or connection error, 2 usage error.\n");
}

static void url_escape(bdb_buf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("-_.~,:", c))
            bdb_buf_putc(b, c);
        else {
            bdb_buf_putc(b, '%');
            bdb_buf_putc(b, (uint8_t)hex[c >> 4]);
            bdb_buf_putc(b, (uint8_t)hex[c & 15]);
        }
    }
}

static void param(bdb_buf *b, const char *k, const char *v)
{
    if (!v)
        return;
    bdb_buf_putc(b, b->data && memchr(b->data, '?', b->len) ? '&' : '?');
    bdb_buf_puts(b, k);
    bdb_buf_putc(b, '=');
    url_escape(b, v);
}

/* HTTP/1.0 GET so the server closes the connection and never uses chunked encoding. */
static int http_get(const char *server, const char *path, const char *token)
{
    char host[256] = "127.0.0.1", port[16] = "8086";
    const char *p = server;
    if (!strncmp(p, "http://", 7))
        p += 7;
    const char *colon = strrchr(p, ':'), *slash = strchr(p, '/');
    size_t hl = colon ? (size_t)(colon - p) : slash ? (size_t)(slash - p) : strlen(p);
    if (hl && hl < sizeof host) {
        memcpy(host, p, hl);
        host[hl] = '\0';
    }
    if (colon)
        snprintf(port, sizeof port, "%.*s", (int)strcspn(colon + 1, "/"), colon + 1);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, port, &hints, &ai) != 0) {
        fprintf(stderr, "bucketdb query: cannot resolve %s:%s\n", host, port);
        return BDB_EXIT_FAIL;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        fprintf(stderr, "bucketdb query: cannot connect to %s:%s\n", host, port);
        freeaddrinfo(ai);
        if (fd >= 0)
            close(fd);
        return BDB_EXIT_FAIL;
    }
    freeaddrinfo(ai);
    bdb_buf req;
    bdb_buf_init(&req);
    bdb_buf_printf(&req, "GET %s HTTP/1.0\r\nHost: %s:%s\r\n", path, host, port);
    if (token)
        bdb_buf_printf(&req, "Authorization: Token %s\r\n", token);
    bdb_buf_puts(&req, "\r\n");
    size_t off = 0;
    while (off < req.len) {
        ssize_t n = write(fd, req.data + off, req.len - off);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    bdb_buf_free(&req);
    /* Read the header, then stream the body to stdout. */
    bdb_buf hdr;
    bdb_buf_init(&hdr);
    char buf[65536];
    int status = 0, in_body = 0;
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
        if (in_body) {
            fwrite(buf, 1, (size_t)n, stdout);
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
        size_t body_off = (size_t)(end + 4 - (char *)hdr.data);
        fwrite(hdr.data + body_off, 1, hdr.len - body_off, status >= 400 ? stderr : stdout);
    }
    close(fd);
    bdb_buf_free(&hdr);
    fflush(stdout);
    if (status == 0) {
        fprintf(stderr, "bucketdb query: no HTTP response\n");
        return BDB_EXIT_FAIL;
    }
    return status >= 400 ? BDB_EXIT_FAIL : BDB_EXIT_OK;
}

int cmd_query(int argc, char **argv)
{
    const char *server = "http://127.0.0.1:8086", *tenant = NULL, *token = NULL, *device = NULL,
               *metric = NULL, *from = NULL, *to = NULL, *limit = NULL, *order = NULL,
               *format = NULL;
    int devices = 0, export = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help();
            return BDB_EXIT_OK;
        } else if (!strcmp(a, "--devices")) {
            devices = 1;
            continue;
        } else if (!strcmp(a, "--export")) {
            export = 1;
            continue;
        } else if (!strcmp(a, "--server"))
            dst = &server;
        else if (!strcmp(a, "--tenant"))
            dst = &tenant;
        else if (!strcmp(a, "--token"))
            dst = &token;
        else if (!strcmp(a, "--device"))
            dst = &device;
        else if (!strcmp(a, "--metric"))
            dst = &metric;
        else if (!strcmp(a, "--from"))
            dst = &from;
        else if (!strcmp(a, "--to"))
            dst = &to;
        else if (!strcmp(a, "--limit"))
            dst = &limit;
        else if (!strcmp(a, "--order"))
            dst = &order;
        else if (!strcmp(a, "--format"))
            dst = &format;
        if (!dst) {
            fprintf(stderr, "bucketdb query: unknown option '%s' (see --help)\n", a);
            return BDB_EXIT_USAGE;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bucketdb query: %s needs a value\n", a);
            return BDB_EXIT_USAGE;
        }
        *dst = argv[++i];
    }
    if (!token)
        token = getenv("BUCKETDB_TOKEN");
    bdb_buf path;
    bdb_buf_init(&path);
    if (devices) {
        bdb_buf_puts(&path, "/api/v1/devices");
    } else if (export) {
        bdb_buf_puts(&path, "/api/v1/export");
        param(&path, "device", device);
    } else {
        if (!device) {
            fprintf(stderr, "bucketdb query: --device is required (or --devices, --export)\n");
            return BDB_EXIT_USAGE;
        }
        bdb_buf_puts(&path, "/api/v1/query");
        param(&path, "device", device);
        param(&path, "limit", limit);
        param(&path, "order", order);
        param(&path, "format", format);
    }
    param(&path, "tenant", tenant);
    if (!devices) {
        param(&path, "metric", metric);
        param(&path, "from", from);
        param(&path, "to", to);
    }
    bdb_buf_putc(&path, 0);
    int rc = http_get(server, (const char *)path.data, token);
    bdb_buf_free(&path);
    return rc;
}
