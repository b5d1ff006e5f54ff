/* http_conn: a keep-alive HTTP/1.1 client connection for the operator commands
 * (load, import, export, plan --measure), which send many requests or stream large
 * answers, and under cli_http (http_client.h), the one-shot form query and tenant use.
 *
 * Responses with Content-Length, chunked encoding or close-delimited bodies are
 * read; a body is either collected (bounded) or handed to a sink as it arrives, so
 * an export of any size runs in constant memory. Every socket read and write has a
 * timeout, so no call can hang forever. */
#ifndef BDB_CLI_HTTP_CONN_H
#define BDB_CLI_HTTP_CONN_H

#include "common/buf.h"

#include <stddef.h>

typedef struct cli_conn {
    char host[256], port[16];
    int fd;     /* -1 when not connected */
    int reused; /* the connection served a request already */
    int timeout_s;
    char rbuf[65536];
    size_t rpos, rlen;
    char err[256]; /* why the last request failed */
} cli_conn;

typedef struct cli_resp {
    int status;
    int retry_after; /* seconds from Retry-After, -1 if absent */
    bdb_buf body;    /* the body when no sink took it (at most 1 MiB kept) */
} cli_resp;

/* Body sink: gets the body in pieces; returns 0 to go on, non-zero to stop (the
 * connection is then closed). */
typedef int (*cli_sink)(void *ctx, const char *data, size_t len);

/* server: "http://host:port" or "host:port" (default 127.0.0.1:8086). Does not
 * connect yet. Returns 0, or -1 with c->err set for a malformed address. */
int cli_conn_init(cli_conn *c, const char *server, int timeout_s);
void cli_conn_close(cli_conn *c);

void cli_resp_init(cli_resp *r);
void cli_resp_free(cli_resp *r);

/* One request. token (may be NULL) goes in "Authorization: Token"; ctype and body
 * (may be NULL) describe the request body. If sink is given, a 2xx body goes to it;
 * any other body is collected in r->body. A connection the server had closed between
 * two requests is reopened once. Returns 0 when a response was read (whatever its
 * status), -1 with c->err on a connection error or timeout. */
int cli_conn_request(cli_conn *c, const char *method, const char *path, const char *token,
                     const char *ctype, const void *body, size_t len, cli_sink sink, void *ctx,
                     cli_resp *r);

#endif
